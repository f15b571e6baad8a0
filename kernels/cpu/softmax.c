/* softmax, log_softmax and their gradients over one axis of any rank.
 *
 * softmax(x; axis)          y = exp(x - max) / sum exp(x - max)
 * log_softmax(x; axis)      y = (x - max) - log(sum exp(x - max))
 * softmax_grad(dy, y; axis)      dx = y * (dy - sum(dy * y))
 * log_softmax_grad(dy, y; axis)  dx = dy - exp(y) * sum(dy)
 * (sums over `axis`, default -1; y is the forward op's output.)
 *
 * Signatures: S(i) on every input and the output for each i != axis; the
 * gradients, linear in dy, also take (P, B -> P).
 *
 * A tensor is [outer, len, inner] around the axis. When the axis is the
 * last one (inner = 1) a row is contiguous: one max pass, one pass that
 * writes exp and sums it, one scaling pass, all over a row that stays in
 * L1. Otherwise blocks of up to COLS inner columns are processed together,
 * vectorised across the columns, each column summed in axis order. Which
 * path runs depends only on the axis, not on shard extents, so a split on
 * another axis gives bit-identical results. */
#include <math.h>

#include "cpu/dense_util.h"

#define S sl__dense_S
#define B sl__dense_B
#define P sl__dense_P

enum { COLS = 1024 };

typedef enum sm_kind {
  SM_SOFTMAX = 0,
  SM_LOG_SOFTMAX = 1,
  SM_SOFTMAX_GRAD = 2,
  SM_LOG_SOFTMAX_GRAD = 3,
} sm_kind;

/* outer, len, inner of shape s around axis. */
static void split3(const sl_shape *s, int axis, int64_t *outer, int64_t *len,
                   int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++)
    *outer *= s->dims[i];
  for (int i = axis + 1; i < s->ndim; i++)
    *inner *= s->dims[i];
  *len = s->dims[axis];
}

static sl_status sm_axis(const sl__attrs *at, int ndim, int *axis) {
  if (ndim == 0)
    return sl__fail(SL_EINVAL, "x is a scalar: no axis to normalise");
  return sl__dense_axis(sl__attr_int(at, "axis", -1), ndim, "axis", axis);
}

static sl_status fwd_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 1));
  SL_CHECK(sl__dense_want_f32(&in[0], "x"));
  int axis = 0;
  SL_CHECK(sm_axis(at, in[0].shape.ndim, &axis));
  out[0] = in[0];
  return SL_OK;
}

static sl_status grad_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 2));
  SL_CHECK(sl__dense_want_f32(&in[0], "dy"));
  SL_CHECK(sl__dense_want_f32(&in[1], "y"));
  SL_CHECK(sl__dense_want_same_shape(&in[0], "dy", &in[1], "y"));
  int axis = 0;
  SL_CHECK(sm_axis(at, in[0].shape.ndim, &axis));
  out[0] = in[0];
  return SL_OK;
}

static int fwd_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  int axis = 0, n = 0;
  if (n_in != 1 || sm_axis(at, in[0].shape.ndim, &axis) != SL_OK) return 0;
  for (int i = 0; i < in[0].shape.ndim; i++)
    if (i != axis)
      n = sl__dense_sig_add(sigs, n, max, 1, (sl_sbp[]){S(i)}, 1,
                            (sl_sbp[]){S(i)});
  return n;
}

static int grad_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__sbp_sig *sigs, int max) {
  int axis = 0, n = 0;
  if (n_in != 2 || sm_axis(at, in[0].shape.ndim, &axis) != SL_OK) return 0;
  for (int i = 0; i < in[0].shape.ndim; i++)
    if (i != axis)
      n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(i), S(i)}, 1,
                            (sl_sbp[]){S(i)});
  return sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){P(), B()}, 1,
                           (sl_sbp[]){P()});
}

/* ---- contiguous rows (axis last) ---------------------------------------- */

static void row_softmax(const sl__dense_rows *v, const float *x, float *y,
                        int64_t n) {
  float m = v->row_max(x, n);
  float inv = 1.0f / v->row_expsum(x, n, m, y);
  v->row_affine(y, y, n, 0.0f, inv, 0.0f); /* y * inv, exactly */
}

static void row_log_softmax(const sl__dense_rows *v, const float *x, float *y,
                            int64_t n) {
  float m = v->row_max(x, n);
  float lse = logf(v->row_expsum(x, n, m, NULL));
  v->row_affine(x, y, n, m, 1.0f, lse); /* (x - m) - lse, exactly */
}

static void row_softmax_grad(const sl__dense_rows *v, const float *dy,
                             const float *y, float *dx, int64_t n) {
  float dot = v->row_dot(dy, y, n);
  for (int64_t j = 0; j < n; j++)
    dx[j] = y[j] * (dy[j] - dot);
}

static void row_log_softmax_grad(const sl__dense_rows *v, const float *dy,
                                 const float *y, float *dx, int64_t n) {
  float s = v->row_sum(dy, n);
  v->exp_mul_sub(dy, y, &s, 0, dx, n);
}

/* ---- strided columns (axis not last) ------------------------------------ */

/* x, dy, y, out point at column 0 of a block of w columns of one outer
 * slice; consecutive axis positions are `inner` apart. */
static void cols_run(const sl__dense_rows *v, sm_kind kind, const float *x,
                     const float *y, float *out, int64_t len, int64_t inner,
                     int64_t w) {
  float a[COLS], b[COLS];
  /* Every path writes a[0..w) and b[0..w) before reading them; the memsets
   * tell GCC's -Wmaybe-uninitialized so (it cannot follow that). */
  memset(a, 0, (size_t)w * sizeof *a);
  memset(b, 0, (size_t)w * sizeof *b);
  switch (kind) {
  case SM_SOFTMAX:
  case SM_LOG_SOFTMAX:
    for (int64_t j = 0; j < w; j++)
      a[j] = x[j], b[j] = 0.0f;
    for (int64_t c = 1; c < len; c++)
      for (int64_t j = 0; j < w; j++) {
        float e = x[c * inner + j];
        a[j] = e > a[j] ? e : a[j];
      }
    if (kind == SM_SOFTMAX) {
      for (int64_t c = 0; c < len; c++)
        v->exp_cols(x + c * inner, a, out + c * inner, b, w);
      for (int64_t j = 0; j < w; j++)
        b[j] = 1.0f / b[j];
      for (int64_t c = 0; c < len; c++)
        for (int64_t j = 0; j < w; j++)
          out[c * inner + j] *= b[j];
    } else {
      for (int64_t c = 0; c < len; c++)
        v->exp_cols(x + c * inner, a, NULL, b, w);
      for (int64_t j = 0; j < w; j++)
        b[j] = logf(b[j]);
      for (int64_t c = 0; c < len; c++)
        for (int64_t j = 0; j < w; j++)
          out[c * inner + j] = (x[c * inner + j] - a[j]) - b[j];
    }
    break;
  case SM_SOFTMAX_GRAD: /* x is dy */
    for (int64_t j = 0; j < w; j++)
      a[j] = 0.0f;
    for (int64_t c = 0; c < len; c++)
      for (int64_t j = 0; j < w; j++)
        a[j] += x[c * inner + j] * y[c * inner + j];
    for (int64_t c = 0; c < len; c++)
      for (int64_t j = 0; j < w; j++)
        out[c * inner + j] = y[c * inner + j] * (x[c * inner + j] - a[j]);
    break;
  case SM_LOG_SOFTMAX_GRAD:
    for (int64_t j = 0; j < w; j++)
      a[j] = 0.0f;
    for (int64_t c = 0; c < len; c++)
      for (int64_t j = 0; j < w; j++)
        a[j] += x[c * inner + j];
    for (int64_t c = 0; c < len; c++)
      v->exp_mul_sub(x + c * inner, y + c * inner, a, 1, out + c * inner, w);
    break;
  }
}

/* Rows [b, e) of a softmax over the last axis, on one member of the
 * device's team (each row is one member's). */
typedef struct sm_rows {
  sm_kind kind;
  const float *x, *y;
  float *out;
  int64_t len;
} sm_rows;

static void sm_rows_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const sm_rows *a = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  int64_t len = a->len;
  for (int64_t r = b; r < e; r++) {
    const float *xr = a->x + r * len;
    float *o = a->out + r * len;
    switch (a->kind) {
    case SM_SOFTMAX: row_softmax(v, xr, o, len); break;
    case SM_LOG_SOFTMAX: row_log_softmax(v, xr, o, len); break;
    case SM_SOFTMAX_GRAD:
      row_softmax_grad(v, xr, a->y + r * len, o, len);
      break;
    case SM_LOG_SOFTMAX_GRAD:
      row_log_softmax_grad(v, xr, a->y + r * len, o, len);
      break;
    }
  }
}

static sl_status sm_run(const sl__kernel_ctx *k, sm_kind kind) {
  const sl_shape *s = &k->in_meta[0].shape;
  int axis = 0;
  SL_CHECK(sm_axis(k->attrs, s->ndim, &axis));
  int64_t outer, len, inner;
  split3(s, axis, &outer, &len, &inner);
  const float *x = k->in[0];
  const float *y = kind >= SM_SOFTMAX_GRAD ? k->in[1] : NULL;
  float *out = k->out[0];
  const sl__dense_rows *v = sl__dense_rows_get();
  if (outer == 0 || len == 0 || inner == 0) return SL_OK;
  if (axis == s->ndim - 1) {
    sm_rows r = {kind, x, y, out, len};
    sl__team_for(k->team, outer, SL__GRAIN_ELEMS / len + 1, sm_rows_part, &r);
    return SL_OK;
  }
  /* Wide blocks: each axis position is then a 4 KiB contiguous run, which
   * streams better than narrow blocks that would stay in L2 (measured). */
  int64_t cols = COLS;
  for (int64_t r = 0; r < outer; r++)
    for (int64_t j0 = 0; j0 < inner; j0 += cols) {
      int64_t off = r * len * inner + j0;
      cols_run(v, kind, x + off, y ? y + off : NULL, out + off, len, inner,
               SL_MIN(cols, inner - j0));
    }
  return SL_OK;
}

static sl_status softmax_cpu(const sl__kernel_ctx *k) {
  return sm_run(k, SM_SOFTMAX);
}
static sl_status log_softmax_cpu(const sl__kernel_ctx *k) {
  return sm_run(k, SM_LOG_SOFTMAX);
}
static sl_status softmax_grad_cpu(const sl__kernel_ctx *k) {
  return sm_run(k, SM_SOFTMAX_GRAD);
}
static sl_status log_softmax_grad_cpu(const sl__kernel_ctx *k) {
  return sm_run(k, SM_LOG_SOFTMAX_GRAD);
}

const sl__op_def sl__op_softmax = {
    .name = "softmax",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = fwd_infer,
    .signatures = fwd_signatures,
    .cpu = softmax_cpu,
};

const sl__op_def sl__op_log_softmax = {
    .name = "log_softmax",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = fwd_infer,
    .signatures = fwd_signatures,
    .cpu = log_softmax_cpu,
};

const sl__op_def sl__op_softmax_grad = {
    .name = "softmax_grad",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = grad_infer,
    .signatures = grad_signatures,
    .cpu = softmax_grad_cpu,
};

const sl__op_def sl__op_log_softmax_grad = {
    .name = "log_softmax_grad",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = grad_infer,
    .signatures = grad_signatures,
    .cpu = log_softmax_grad_cpu,
};
