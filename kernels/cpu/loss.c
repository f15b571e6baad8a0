/* Sparse cross-entropy with integer labels, and its gradient.
 *
 * sparse_cross_entropy(logits [..., C] f32, labels [...] i32/i64)
 *   -> loss [...] f32, loss = log(sum_c exp(logits[c])) - logits[label],
 *   computed as log(sum exp(logits - max)) - (logits[label] - max).
 *   Signatures: S(i) on logits, labels and loss for each leading axis i.
 * sparse_cross_entropy_grad(dloss [...], logits [..., C], labels [...])
 *   -> dlogits [..., C] = dloss * (softmax(logits) - onehot(label)).
 *   Signatures: S(i) on all for each leading axis i; (P, B, B -> P) (linear
 *   in dloss).
 * A label outside [0, C) is SL_EINVAL naming the label and its global
 * position; the labels are checked before anything is written.
 *
 * Each row is read twice (max, then exp and sum) and, for the gradient,
 * the exps are written into dlogits and scaled in place, so exp runs once
 * per element. Rows are cut over the device's team (core_team.h): each is
 * computed whole by one thread, so the bits do not depend on the team. */
#include <math.h>

#include "cpu/dense_util.h"

#define S sl__dense_S
#define B sl__dense_B
#define P sl__dense_P

/* logits [..., C] and labels [...]: labels' shape is logits' without C. */
static sl_status check_pair(const sl__meta *logits, const sl__meta *labels) {
  SL_CHECK(sl__dense_want_f32(logits, "logits"));
  SL_CHECK(sl__dense_want_index(labels, "labels"));
  char sa[96], sb[96], sc[96];
  if (logits->shape.ndim < 1)
    return sl__fail(SL_EINVAL, "logits is a scalar: want [..., classes]");
  if (logits->shape.dims[logits->shape.ndim - 1] == 0)
    return sl__fail(SL_EINVAL, "logits %s: no classes",
                    SL__DENSE_SHAPE_STR(sa, &logits->shape));
  sl_shape want = sl__dense_drop_last(&logits->shape);
  if (!sl_shape_equal(&want, &labels->shape))
    return sl__fail(SL_EINVAL, "logits %s and labels %s: want labels %s",
                    SL__DENSE_SHAPE_STR(sa, &logits->shape),
                    SL__DENSE_SHAPE_STR(sb, &labels->shape),
                    SL__DENSE_SHAPE_STR(sc, &want));
  return SL_OK;
}

static sl_status ce_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 2));
  SL_CHECK(check_pair(&in[0], &in[1]));
  out[0].dtype = SL_DTYPE_F32;
  out[0].shape = in[1].shape;
  return SL_OK;
}

static int ce_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                         sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 2) return 0;
  for (int i = 0; i + 1 < in[0].shape.ndim; i++)
    n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(i), S(i)}, 1,
                          (sl_sbp[]){S(i)});
  return n;
}

static sl_status ce_grad_infer(const sl__attrs *at, int n_in,
                               const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 3));
  SL_CHECK(sl__dense_want_f32(&in[0], "dloss"));
  SL_CHECK(check_pair(&in[1], &in[2]));
  char sa[96], sb[96];
  if (!sl_shape_equal(&in[0].shape, &in[2].shape))
    return sl__fail(SL_EINVAL, "dloss %s and labels %s: shapes differ",
                    SL__DENSE_SHAPE_STR(sa, &in[0].shape),
                    SL__DENSE_SHAPE_STR(sb, &in[2].shape));
  out[0] = in[1];
  return SL_OK;
}

static int ce_grad_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                              sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 3) return 0;
  for (int i = 0; i + 1 < in[1].shape.ndim; i++)
    n = sl__dense_sig_add(sigs, n, max, 3, (sl_sbp[]){S(i), S(i), S(i)}, 1,
                          (sl_sbp[]){S(i)});
  return sl__dense_sig_add(sigs, n, max, 3, (sl_sbp[]){P(), B(), B()}, 1,
                           (sl_sbp[]){P()});
}

/* Every label of the shard in [0, classes); in = the labels' input index. */
static sl_status check_labels(const sl__kernel_ctx *k, int in, int64_t rows,
                              int64_t classes) {
  const void *lab = k->in[in];
  sl_dtype dt = k->in_meta[in].dtype;
  for (int64_t r = 0; r < rows; r++) {
    int64_t c = sl__dense_index(lab, dt, r);
    if (c < 0 || c >= classes) {
      char pos[160];
      sl__dense_global_pos(&k->in_slice[in], r, pos, sizeof pos);
      return sl__fail(SL_EINVAL,
                      "label %lld at position %s out of range [0, %lld)",
                      (long long)c, pos, (long long)classes);
    }
  }
  return SL_OK;
}

/* One cross-entropy call's rows, for the team's parts. */
typedef struct ce_run {
  const float *x, *dloss; /* dloss: the gradient's only */
  const void *lab;
  sl_dtype dt;
  int64_t classes;
  float *out; /* loss [rows], or dlogits [rows, classes] */
} ce_run;

static void ce_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const ce_run *c = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  for (int64_t r = b; r < e; r++) {
    const float *xr = c->x + r * c->classes;
    float m = v->row_max(xr, c->classes);
    float lse = logf(v->row_expsum(xr, c->classes, m, NULL));
    c->out[r] = lse - (xr[sl__dense_index(c->lab, c->dt, r)] - m);
  }
}

static void ce_grad_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const ce_run *c = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  for (int64_t r = b; r < e; r++) {
    const float *xr = c->x + r * c->classes;
    float *o = c->out + r * c->classes;
    float m = v->row_max(xr, c->classes);
    float g = c->dloss[r], scale = g / v->row_expsum(xr, c->classes, m, o);
    v->row_affine(o, o, c->classes, 0.0f, scale, 0.0f);
    o[sl__dense_index(c->lab, c->dt, r)] -= g;
  }
}

static sl_status ce_cpu(const sl__kernel_ctx *k) {
  int64_t classes;
  int64_t rows = sl__dense_rows_of(&k->in_meta[0].shape, &classes);
  if (rows == 0) return SL_OK;
  SL_CHECK(check_labels(k, 1, rows, classes));
  ce_run c = {.x = k->in[0],
              .lab = k->in[1],
              .dt = k->in_meta[1].dtype,
              .classes = classes,
              .out = k->out[0]};
  sl__team_for(k->team, rows, SL__GRAIN_ELEMS / (classes + 1) + 1, ce_part, &c);
  return SL_OK;
}

static sl_status ce_grad_cpu(const sl__kernel_ctx *k) {
  int64_t classes;
  int64_t rows = sl__dense_rows_of(&k->in_meta[1].shape, &classes);
  if (rows == 0) return SL_OK;
  SL_CHECK(check_labels(k, 2, rows, classes));
  ce_run c = {.x = k->in[1],
              .dloss = k->in[0],
              .lab = k->in[2],
              .dt = k->in_meta[2].dtype,
              .classes = classes,
              .out = k->out[0]};
  sl__team_for(k->team, rows, SL__GRAIN_ELEMS / (classes + 1) + 1, ce_grad_part,
               &c);
  return SL_OK;
}

const sl__op_def sl__op_sparse_cross_entropy = {
    .name = "sparse_cross_entropy",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = ce_infer,
    .signatures = ce_signatures,
    .cpu = ce_cpu,
};

const sl__op_def sl__op_sparse_cross_entropy_grad = {
    .name = "sparse_cross_entropy_grad",
    .min_in = 3,
    .max_in = 3,
    .n_out = 1,
    .infer = ce_grad_infer,
    .signatures = ce_grad_signatures,
    .cpu = ce_grad_cpu,
};
