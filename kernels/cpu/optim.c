/* Optimizer updates and gradient clipping by global norm, with PyTorch's
 * semantics (torch.optim.SGD, Adam, AdamW; torch.nn.utils.clip_grad_norm_).
 * The updates write new versions of the parameter and the state as outputs;
 * an output may be the very buffer of its input (each element is read
 * before it is written) but must not overlap it otherwise.
 *
 * sgd_update(w, g, m; lr, momentum = 0, dampening = 0, weight_decay = 0,
 *            nesterov = 0) -> w_new, m_new
 *   d = g + weight_decay * w             (when weight_decay != 0)
 *   with momentum != 0:
 *     m_new = d                          at the first step (k->step == 0:
 *                                        PyTorch creates the buffer from d)
 *     m_new = momentum * m + (1 - dampening) * d   later
 *     d = nesterov ? d + momentum * m_new : m_new
 *   without momentum PyTorch keeps no buffer: m may then be an empty [0]
 *   tensor (m_new is one too, always B), or w's shape (m_new = m, copied)
 *   w_new = w - lr * d
 * adam_update(w, g, m, v; lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
 *             weight_decay = 0, decoupled = 0) -> w_new, m_new, v_new
 *   t = k->step + 1 (PyTorch's step count after its increment)
 *   decoupled (AdamW): w' = w * (1 - lr * weight_decay), d = g
 *   otherwise (Adam):  w' = w, d = g + weight_decay * w (when != 0)
 *   m_new = m + (1 - beta1) * (d - m)    (PyTorch: exp_avg.lerp_)
 *   v_new = beta2 * v + (1 - beta2) * d * d   (PyTorch: addcmul_)
 *   w_new = w' - (lr / (1 - beta1^t)) * m_new
 *                / (sqrt(v_new) / sqrt(1 - beta2^t) + eps)
 *   The step is the training step the runtime passes (its piece id), so
 *   the bias correction follows the step count and a program restarted at
 *   step s continues with t = s + 1.
 * Skipped steps (loss scaling): an optional input after rows, skipped, a
 *   scalar f32, counts the steps before this one that loss scaling
 *   skipped; both updates then count steps as step - skipped (Adam's t,
 *   SGD's first step), as PyTorch does, whose GradScaler does not call a
 *   skipped step's optimizer.step(). rows is present whenever skipped is.
 * Lazy updates (sl_optimizer.lazy_embeddings, for tables read only by
 * embedding lookups): an optional last input rows [w's rows] f32 counts
 * how often the step looked each row of w up; a row whose count is 0
 * keeps its weight and state (their outputs copy the inputs), as
 * TensorFlow's LazyAdam does. rows is split like the outputs' rows: S(0)
 * where they are split over axis 0, else B.
 * Signatures: S(i) on every input and output, for each axis i of w (all-B
 * is implied). With attribute zero = 1 or 2 (sl_minimize's ZeRO updates,
 * docs/zero.md) also the sharded ones: for each axis i, w whole (B), every
 * other input and every output S(i), the update computed on the block of
 * w the outputs hold. Only sl_minimize asks for them: it fixes the outputs
 * to a layout whose block lies inside the device's block of w, which a
 * free choice on each mesh axis would not ensure.
 *
 * loss_scale_update(scale, good, check, skipped; window)
 *     -> scale_new, good_new, keep, skipped_new
 *   (scalars; dynamic loss scaling, as PyTorch's GradScaler.update with
 *   growth 2, backoff 0.5 and growth_interval `window`): check is the sum
 *   of every gradient times 0, so it is NaN when any gradient holds an inf
 *   or NaN and 0 otherwise. Not finite: scale_new = scale / 2, good_new =
 *   0, keep = 0 (the step's updates keep everything, through their rows
 *   input), skipped_new = skipped + 1. Finite: keep = 1, skipped_new =
 *   skipped (the updates' skipped input), good_new = good + 1, and when
 *   that reaches window the scale doubles and good_new is 0. All-B only.
 * global_norm_scale(s0, s1, ...; max_norm) -> scale (scalar)
 *   each input a scalar sum of squares of one gradient;
 *   scale = min(1, max_norm / (sqrt(s0 + s1 + ...) + 1e-6)).
 *   All-B only. */
#include <math.h>

#include "cpu/dense_util.h"

#define S sl__dense_S

enum { CHUNK = 512 };

/* Same shape and f32 for every input; the outputs copy input 0. */
static sl_status check_state(int n_in, const sl__meta *in, const char **names) {
  SL_CHECK(sl__dense_want_f32(&in[0], names[0]));
  for (int i = 1; i < n_in; i++) {
    SL_CHECK(sl__dense_want_f32(&in[i], names[i]));
    SL_CHECK(sl__dense_want_same_shape(&in[0], names[0], &in[i], names[i]));
  }
  return SL_OK;
}

/* The skipped-steps input: an f32 scalar. */
static sl_status check_skipped(const sl__meta *in) {
  char ss[96];
  SL_CHECK(sl__dense_want_f32(in, "skipped"));
  if (sl_shape_numel(&in->shape) != 1)
    return sl__fail(SL_EINVAL, "skipped %s: want a scalar",
                    SL__DENSE_SHAPE_STR(ss, &in->shape));
  return SL_OK;
}

/* The steps this update counts (step - skipped, when the input after rows,
 * at n_state + 1, is there): SL_EINVAL unless 0 <= skipped <= step. */
static sl_status counted_step(const sl__kernel_ctx *k, const char *op,
                              int n_state, int64_t *out) {
  double skipped =
      k->n_in > n_state + 1 ? ((const float *)k->in[n_state + 1])[0] : 0.0;
  if (!(skipped >= 0 && skipped <= (double)k->step &&
        skipped == floor(skipped)))
    return sl__fail(SL_EINVAL,
                    "%s: skipped steps %g at step %lld: want a "
                    "whole number in [0, step]",
                    op, skipped, (long long)k->step);
  *out = k->step - (int64_t)skipped;
  return SL_OK;
}

/* A lazy update's rows input: f32 [w's rows] ([1] for a scalar w). */
static sl_status check_rows(const sl__meta *w, const sl__meta *rows) {
  SL_CHECK(sl__dense_want_f32(rows, "rows"));
  char sw[96], sr[96];
  int64_t want = w->shape.ndim ? w->shape.dims[0] : 1;
  if (rows->shape.ndim != 1 || rows->shape.dims[0] != want)
    return sl__fail(SL_EINVAL, "rows %s for w %s: want one count per row of w",
                    SL__DENSE_SHAPE_STR(sr, &rows->shape),
                    SL__DENSE_SHAPE_STR(sw, &w->shape));
  return SL_OK;
}

static sl_status want_range(const sl__attrs *at, const char *name, double dflt,
                            double lo, double hi, bool hi_open) {
  double v = sl__attr_float(at, name, dflt);
  if (!(v >= lo && (hi_open ? v < hi : v <= hi)))
    return sl__fail(SL_EINVAL, "%s %g: want a value in [%g, %g%s", name, v, lo,
                    hi, hi_open ? ")" : "]");
  return SL_OK;
}

/* The same split on every input and output, per axis of w; with
 * attribute zero, also w whole and the rest split. A lazy update's rows
 * (input n_state, when n_in is one more) follow the outputs' rows; the
 * skipped-steps scalar after them is B. */
static int state_signatures(const sl__attrs *at, int n_in, int n_state,
                            int n_out, const sl__meta *in, sl__sbp_sig *sigs,
                            int max) {
  int n = 0;
  sl_sbp ins[SL_OP_MAX_INPUTS], outs[SL_OP_MAX_OUTPUTS];
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && !sl__attr_int(at, "zero", 0)) break;
    for (int a = 0; a < in[0].shape.ndim; a++) {
      for (int i = 0; i < n_state; i++)
        ins[i] = S(a);
      for (int i = 0; i < n_out; i++)
        outs[i] = S(a);
      if (n_in > n_state) ins[n_state] = a == 0 ? S(0) : sl__dense_B();
      if (n_in > n_state + 1) ins[n_state + 1] = sl__dense_B();
      if (pass == 1) ins[0] = sl__dense_B();
      n = sl__dense_sig_add(sigs, n, max, n_in, ins, n_out, outs);
    }
  }
  return n;
}

/* A lazy update's rows: calls run on the parts of elements [b, e) of the
 * outputs (rows of `inner` elements) whose row count is not 0, and keep
 * on the others; run on all of it without rows. */
typedef void (*range_fn)(const void *arg, int64_t b, int64_t e);
static void by_rows(const float *rows, int64_t inner, int64_t b, int64_t e,
                    range_fn run, range_fn keep, const void *arg) {
  if (!rows || inner <= 0) {
    run(arg, b, e);
    return;
  }
  while (b < e) {
    int64_t r = b / inner, end = SL_MIN((r + 1) * inner, e);
    bool touched = rows[r] != 0.0f;
    /* Untouched or touched alike, whole runs of rows at a time. */
    while (end < e && (rows[end / inner] != 0.0f) == touched)
      end = SL_MIN(end + inner, e);
    (touched ? run : keep)(arg, b, end);
    b = end;
  }
}

/* dst[b, e) = src[b, e) unless they are one buffer. */
static void keep_copy(float *dst, const float *src, int64_t b, int64_t e) {
  if (dst != src && e > b)
    memmove(dst + b, src + b, (size_t)(e - b) * sizeof *dst);
}

/* The rows input of a lazy update with n_state state inputs, and the
 * outputs' row length; NULL without one. */
static const float *rows_of(const sl__kernel_ctx *k, int n_state,
                            int64_t *inner) {
  *inner = 0;
  if (k->n_in <= n_state) return NULL;
  int64_t rows = k->in_meta[n_state].shape.dims[0];
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  *inner = rows > 0 ? n / rows : 0;
  return k->in[n_state];
}

/* The block of w the outputs hold, contiguous: where it lies in w, or
 * copied into output 0 when it is strided there (the update then runs in
 * place: it reads each element before writing it). */
static const float *shard_of_w(const sl__kernel_ctx *k) {
  sl__shard_view v = sl__kernel_shard_view(k);
  const float *w = k->in[0];
  if (v.offset) w += v.offset; /* an empty w may lie at NULL */
  if (v.rows == 1 || v.inner == v.stride) return w;
  float *wn = k->out[0];
  for (int64_t r = 0; r < v.rows; r++)
    memcpy(wn + r * v.inner, w + r * v.stride, (size_t)v.inner * sizeof *w);
  return wn;
}

/* ---- sgd ----------------------------------------------------------------- */

static const char *sgd_names[3] = {"w", "g", "m"};

/* m is the empty [0] placeholder a momentum-free SGD may pass. */
static bool sgd_no_state(const sl__attrs *at, const sl__meta *m) {
  return sl__attr_float(at, "momentum", 0.0) == 0.0 && m->shape.ndim == 1 &&
         m->shape.dims[0] == 0 && m->dtype == SL_DTYPE_F32;
}

static sl_status sgd_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  if (n_in >= 4) SL_CHECK(check_rows(&in[0], &in[3]));
  if (n_in == 5) SL_CHECK(check_skipped(&in[4]));
  if (n_in < 4) SL_CHECK(sl__dense_want_inputs(n_in, 3));
  bool no_state = sgd_no_state(at, &in[2]);
  SL_CHECK(check_state(no_state ? 2 : 3, in, sgd_names));
  SL_CHECK(want_range(at, "lr", 0.0, 0.0, INFINITY, true));
  SL_CHECK(want_range(at, "momentum", 0.0, 0.0, INFINITY, true));
  SL_CHECK(want_range(at, "dampening", 0.0, -INFINITY, INFINITY, true));
  SL_CHECK(want_range(at, "weight_decay", 0.0, 0.0, INFINITY, true));
  bool nesterov = sl__attr_int(at, "nesterov", 0) != 0;
  if (nesterov && (sl__attr_float(at, "momentum", 0.0) <= 0.0 ||
                   sl__attr_float(at, "dampening", 0.0) != 0.0))
    return sl__fail(SL_EINVAL, "nesterov momentum needs momentum > 0 and "
                               "dampening 0");
  out[0] = in[0];
  out[1] = in[2];
  return SL_OK;
}

static int sgd_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  if (n_in < 3 || n_in > 5) return 0;
  int n = state_signatures(at, n_in, 3, 2, in, sigs, max);
  if (sgd_no_state(at, &in[2]))
    for (int i = 0; i < n; i++)
      sigs[i].in[2] = sigs[i].out[1] = sl__dense_B();
  return n;
}

/* One SGD call, cut over the device's team in whole chunks. */
typedef struct sgd_run {
  const float *w, *g, *m;
  float *wn, *mn;
  int64_t n;
  sl__dense_sgd cf;
  bool copy_state; /* no momentum: the state passes through unchanged */
  const float *rows; /* a lazy update's row counts, else NULL */
  int64_t inner;     /* ... and the outputs' row length */
} sgd_run;

/* Elements [b, i1) of a row a lazy update skips. */
static void sgd_keep(const void *arg, int64_t b, int64_t i1) {
  const sgd_run *r = arg;
  keep_copy(r->wn, r->w, b, i1);
  if (r->cf.use_mom || r->copy_state) keep_copy(r->mn, r->m, b, i1);
}

static void sgd_range(const void *arg, int64_t b, int64_t i1) {
  const sgd_run *r = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  if (r->copy_state) memmove(r->mn + b, r->m + b, (size_t)(i1 - b) * 4);
  /* Plain SGD: one pass over memory (a weight updated in place included). */
  if (!r->cf.use_mom && !r->cf.has_wd) {
    v->sgd_plain(r->cf.lr, r->w + b, r->g + b, r->wn + b, i1 - b);
    return;
  }
  /* Chunks computed into local arrays, then stored: the loops vectorise
   * without alias checks, and an output that is its input's buffer reads
   * each chunk before it is written. */
  float wl[CHUNK], ml[CHUNK];
  for (int64_t i0 = b; i0 < i1; i0 += CHUNK) {
    int64_t c = SL_MIN(CHUNK, i1 - i0);
    v->sgd_chunk(&r->cf, r->w + i0, r->g + i0, r->m + i0, wl, ml, c);
    memcpy(r->wn + i0, wl, (size_t)c * sizeof *wl);
    if (r->cf.use_mom) memcpy(r->mn + i0, ml, (size_t)c * sizeof *ml);
  }
}

static void sgd_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const sgd_run *r = arg;
  by_rows(r->rows, r->inner, b * CHUNK, SL_MIN(e * CHUNK, r->n), sgd_range,
          sgd_keep, r);
}

static sl_status sgd_cpu(const sl__kernel_ctx *k) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  sgd_run r = {.w = shard_of_w(k),
               .g = k->in[1],
               .m = k->in[2],
               .wn = k->out[0],
               .mn = k->out[1],
               .n = n};
  float mom = (float)sl__attr_float(k->attrs, "momentum", 0.0);
  float wd = (float)sl__attr_float(k->attrs, "weight_decay", 0.0);
  bool use_mom = mom != 0.0f;
  int64_t counted = 0;
  SL_CHECK(counted_step(k, "sgd_update", 3, &counted));
  r.cf = (sl__dense_sgd){
      .lr = (float)sl__attr_float(k->attrs, "lr", 0.0),
      .mom = mom,
      .damp1 = (float)(1.0 - sl__attr_float(k->attrs, "dampening", 0.0)),
      .wd = wd,
      .has_wd = wd != 0.0f,
      .first = use_mom && counted == 0,
      .nesterov = sl__attr_int(k->attrs, "nesterov", 0) != 0,
      .use_mom = use_mom};
  bool no_state = sl_shape_numel(&k->in_meta[2].shape) != n;
  if (no_state) r.m = r.g; /* never read: any valid memory */
  r.copy_state = !use_mom && !no_state && r.mn != r.m;
  r.rows = rows_of(k, 3, &r.inner);
  sl__team_for(k->team, (n + CHUNK - 1) / CHUNK, SL__GRAIN_ELEMS / CHUNK,
               sgd_part, &r);
  return SL_OK;
}

const sl__op_def sl__op_sgd_update = {
    .name = "sgd_update",
    .min_in = 3,
    .max_in = 5,
    .n_out = 2,
    .infer = sgd_infer,
    .signatures = sgd_signatures,
    .cpu = sgd_cpu,
    .weight_update = true,
};

/* ---- adam ---------------------------------------------------------------- */

static const char *adam_names[4] = {"w", "g", "m", "v"};

static sl_status adam_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  if (n_in >= 5) SL_CHECK(check_rows(&in[0], &in[4]));
  if (n_in == 6) SL_CHECK(check_skipped(&in[5]));
  if (n_in < 5) SL_CHECK(sl__dense_want_inputs(n_in, 4));
  SL_CHECK(check_state(4, in, adam_names));
  SL_CHECK(want_range(at, "lr", 1e-3, 0.0, INFINITY, true));
  SL_CHECK(want_range(at, "beta1", 0.9, 0.0, 1.0, true));
  SL_CHECK(want_range(at, "beta2", 0.999, 0.0, 1.0, true));
  SL_CHECK(want_range(at, "eps", 1e-8, 0.0, INFINITY, true));
  SL_CHECK(want_range(at, "weight_decay", 0.0, 0.0, INFINITY, true));
  int64_t dec = sl__attr_int(at, "decoupled", 0);
  if (dec != 0 && dec != 1)
    return sl__fail(SL_EINVAL, "decoupled %lld: want 0 (Adam) or 1 (AdamW)",
                    (long long)dec);
  out[0] = out[1] = out[2] = in[0];
  return SL_OK;
}

static int adam_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__sbp_sig *sigs, int max) {
  return n_in >= 4 && n_in <= 6
             ? state_signatures(at, n_in, 4, 3, in, sigs, max)
             : 0;
}

/* One Adam call, cut over the device's team in whole chunks (as SGD). */
typedef struct adam_run {
  const float *w, *g, *m, *v;
  float *wn, *mn, *vn;
  int64_t n;
  sl__dense_adam cf;
  const float *rows; /* a lazy update's row counts, else NULL */
  int64_t inner;
} adam_run;

static void adam_keep(const void *arg, int64_t b, int64_t i1) {
  const adam_run *r = arg;
  keep_copy(r->wn, r->w, b, i1);
  keep_copy(r->mn, r->m, b, i1);
  keep_copy(r->vn, r->v, b, i1);
}

static void adam_range(const void *arg, int64_t b, int64_t i1) {
  const adam_run *r = arg;
  const sl__dense_rows *vt = sl__dense_rows_get();
  float wl[CHUNK], ml[CHUNK], vl[CHUNK];
  for (int64_t i0 = b; i0 < i1; i0 += CHUNK) {
    int64_t c = SL_MIN(CHUNK, i1 - i0);
    vt->adam_chunk(&r->cf, r->w + i0, r->g + i0, r->m + i0, r->v + i0, wl, ml,
                   vl, c);
    memcpy(r->wn + i0, wl, (size_t)c * sizeof *wl);
    memcpy(r->mn + i0, ml, (size_t)c * sizeof *ml);
    memcpy(r->vn + i0, vl, (size_t)c * sizeof *vl);
  }
}

static void adam_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const adam_run *r = arg;
  by_rows(r->rows, r->inner, b * CHUNK, SL_MIN(e * CHUNK, r->n), adam_range,
          adam_keep, r);
}

static sl_status adam_cpu(const sl__kernel_ctx *k) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  const float *w = shard_of_w(k), *g = k->in[1], *m = k->in[2], *v = k->in[3];
  float *wn = k->out[0], *mn = k->out[1], *vn = k->out[2];
  double lr = sl__attr_float(k->attrs, "lr", 1e-3);
  double b1 = sl__attr_float(k->attrs, "beta1", 0.9);
  double b2 = sl__attr_float(k->attrs, "beta2", 0.999);
  float eps = (float)sl__attr_float(k->attrs, "eps", 1e-8);
  double wd = sl__attr_float(k->attrs, "weight_decay", 0.0);
  bool decoupled = sl__attr_int(k->attrs, "decoupled", 0) != 0;
  if (k->step < 0)
    return sl__fail(SL_EINVAL, "adam_update: step %lld is negative",
                    (long long)k->step);
  int64_t counted = 0;
  SL_CHECK(counted_step(k, "adam_update", 4, &counted));
  /* The scalars as PyTorch forms them: Python floats (double), each applied
   * to float tensors as a float. */
  double t = (double)counted + 1.0;
  float step_size = (float)(lr / (1.0 - pow(b1, t)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(b2, t));
  float one_b1 = (float)(1.0 - b1), fb2 = (float)b2, one_b2 = (float)(1.0 - b2);
  float decay = decoupled ? (float)(1.0 - lr * wd) : 1.0f;
  float l2 = decoupled ? 0.0f : (float)wd;
  bool has_l2 = l2 != 0.0f, has_decay = decoupled && wd != 0.0;
  adam_run r = {.w = w,
                .g = g,
                .m = m,
                .v = v,
                .wn = wn,
                .mn = mn,
                .vn = vn,
                .n = n,
                .cf = {decay, l2, one_b1, fb2, one_b2, bc2_sqrt, eps, step_size,
                       has_decay, has_l2}};
  r.rows = rows_of(k, 4, &r.inner);
  sl__team_for(k->team, (n + CHUNK - 1) / CHUNK, SL__GRAIN_ELEMS / CHUNK,
               adam_part, &r);
  return SL_OK;
}

const sl__op_def sl__op_adam_update = {
    .name = "adam_update",
    .min_in = 4,
    .max_in = 6,
    .n_out = 3,
    .infer = adam_infer,
    .signatures = adam_signatures,
    .cpu = adam_cpu,
    .weight_update = true,
};

/* ---- loss_scale_update --------------------------------------------------- */

static sl_status lsu_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 4));
  const char *names[4] = {"scale", "good", "check", "skipped"};
  for (int i = 0; i < 4; i++) {
    char ss[96];
    SL_CHECK(sl__dense_want_f32(&in[i], names[i]));
    if (sl_shape_numel(&in[i].shape) != 1)
      return sl__fail(SL_EINVAL, "%s %s: want a scalar", names[i],
                      SL__DENSE_SHAPE_STR(ss, &in[i].shape));
  }
  if (sl__attr_int(at, "window", 0) < 1)
    return sl__fail(SL_EINVAL, "window %lld: want at least 1 step",
                    (long long)sl__attr_int(at, "window", 0));
  for (int j = 0; j < 4; j++) {
    memset(&out[j], 0, sizeof out[j]);
    out[j].dtype = SL_DTYPE_F32; /* scalars */
  }
  return SL_OK;
}

static sl_status lsu_cpu(const sl__kernel_ctx *k) {
  float scale = ((const float *)k->in[0])[0];
  float good = ((const float *)k->in[1])[0];
  float check = ((const float *)k->in[2])[0];
  float skipped = ((const float *)k->in[3])[0];
  float window = (float)sl__attr_int(k->attrs, "window", 1);
  bool finite = check - check == 0.0f; /* NaN and inf give NaN */
  good = finite ? good + 1.0f : 0.0f;
  if (!finite) scale *= 0.5f;
  if (good >= window) scale *= 2.0f, good = 0.0f;
  ((float *)k->out[0])[0] = scale;
  ((float *)k->out[1])[0] = good;
  ((float *)k->out[2])[0] = finite ? 1.0f : 0.0f;
  ((float *)k->out[3])[0] = finite ? skipped : skipped + 1.0f;
  return SL_OK;
}

const sl__op_def sl__op_loss_scale_update = {
    .name = "loss_scale_update",
    .min_in = 4,
    .max_in = 4,
    .n_out = 4,
    .infer = lsu_infer,
    .signatures = NULL,
    .cpu = lsu_cpu,
};

/* ---- global_norm_scale --------------------------------------------------- */

static sl_status gns_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  if (n_in < 1)
    return sl__fail(SL_EINVAL,
                    "no inputs: want one sum of squares per gradient");
  for (int i = 0; i < n_in; i++) {
    char name[32], ss[96];
    snprintf(name, sizeof name, "input %d", i);
    SL_CHECK(sl__dense_want_f32(&in[i], name));
    if (sl_shape_numel(&in[i].shape) != 1)
      return sl__fail(SL_EINVAL, "input %d %s: want a scalar", i,
                      SL__DENSE_SHAPE_STR(ss, &in[i].shape));
  }
  double mx = sl__attr_float(at, "max_norm", NAN);
  if (!(mx > 0.0 && mx < INFINITY))
    return sl__fail(SL_EINVAL, "max_norm %g: want a finite value > 0", mx);
  memset(&out[0], 0, sizeof out[0]);
  out[0].dtype = SL_DTYPE_F32; /* shape: a scalar */
  return SL_OK;
}

static sl_status gns_cpu(const sl__kernel_ctx *k) {
  double sum = 0.0;
  for (int i = 0; i < k->n_in; i++)
    sum += ((const float *)k->in[i])[0];
  double mx = sl__attr_float(k->attrs, "max_norm", NAN);
  /* clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped
   * to at most 1. A NaN norm gives NaN, as there. */
  float total = (float)sqrt(sum);
  float coef = (float)mx / (total + 1e-6f);
  ((float *)k->out[0])[0] = coef < 1.0f ? coef : (coef == coef ? 1.0f : coef);
  return SL_OK;
}

const sl__op_def sl__op_global_norm_scale = {
    .name = "global_norm_scale",
    .min_in = 1,
    .max_in = SL_OP_MAX_INPUTS,
    .n_out = 1,
    .infer = gns_infer,
    .signatures = NULL,
    .cpu = gns_cpu,
};
