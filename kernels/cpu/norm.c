/* Layer normalisation over the last dim, and its gradient.
 *
 * layer_norm(x [..., D], gamma [D], beta [D]; eps = 1e-5)
 *   -> y [..., D], mean [...], rstd [...]
 *   mean = sum x / D, var = sum (x - mean)^2 / D (biased, as PyTorch),
 *   rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * gamma + beta.
 *   mean and rstd are kept for the backward.
 *   Signatures: (S(i), B, B -> S(i), S(i), S(i)) for each leading axis i.
 * layer_norm_grad(dy, x, gamma, mean, rstd) -> dx, dgamma [D], dbeta [D]
 *   with xhat = (x - mean) * rstd and g = gamma * dy:
 *   dx = rstd * (g - mean_D(g) - xhat * mean_D(g * xhat)),
 *   dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy.
 *   Signatures: (S(i), S(i), B, S(i), S(i) -> S(i), P, P) for each leading
 *   axis i; (P, B, B, B, B -> P, P, P) (everything is linear in dy).
 *
 * On one thread a row is read once from memory: its reductions and its
 * writes run over the row while it sits in L1. dgamma/dbeta are
 * accumulated in double (the workspace) over the shard's rows, in row
 * order. Cut over a device's team (core_team.h) the backward runs in two
 * passes: the rows' two sums cut by rows, then dx, dgamma and dbeta cut by
 * columns, each column's sums still in row order, so the bits do not
 * depend on the team. */
#include <math.h>

#include "cpu/dense_util.h"

#define S sl__dense_S
#define B sl__dense_B
#define P sl__dense_P

/* x [..., D] with D > 0, and a [D] vector `name`. */
static sl_status check_vec(const sl__meta *x, const sl__meta *v,
                           const char *name) {
  SL_CHECK(sl__dense_want_f32(v, name));
  int64_t d = x->shape.dims[x->shape.ndim - 1];
  if (v->shape.ndim != 1 || v->shape.dims[0] != d) {
    char sx[96], sv[96];
    return sl__fail(SL_EINVAL, "x %s and %s %s: want %s [%lld]",
                    SL__DENSE_SHAPE_STR(sx, &x->shape), name,
                    SL__DENSE_SHAPE_STR(sv, &v->shape), name, (long long)d);
  }
  return SL_OK;
}

static sl_status check_x(const sl__meta *x, const char *name) {
  SL_CHECK(sl__dense_want_f32(x, name));
  char sx[96];
  if (x->shape.ndim < 1)
    return sl__fail(SL_EINVAL, "%s is a scalar: want [..., D]", name);
  if (x->shape.dims[x->shape.ndim - 1] == 0)
    return sl__fail(SL_EINVAL, "%s %s: the normalised dim is empty", name,
                    SL__DENSE_SHAPE_STR(sx, &x->shape));
  return SL_OK;
}

static sl_status ln_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 3));
  SL_CHECK(check_x(&in[0], "x"));
  SL_CHECK(check_vec(&in[0], &in[1], "gamma"));
  SL_CHECK(check_vec(&in[0], &in[2], "beta"));
  double eps = sl__attr_float(at, "eps", 1e-5);
  if (!(eps >= 0.0 && eps < INFINITY))
    return sl__fail(SL_EINVAL, "eps %g: want a finite value >= 0", eps);
  out[0] = in[0];
  out[1].dtype = out[2].dtype = SL_DTYPE_F32;
  out[1].shape = out[2].shape = sl__dense_drop_last(&in[0].shape);
  return SL_OK;
}

static int ln_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                         sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 3) return 0;
  for (int i = 0; i + 1 < in[0].shape.ndim; i++)
    n = sl__dense_sig_add(sigs, n, max, 3, (sl_sbp[]){S(i), B(), B()}, 3,
                          (sl_sbp[]){S(i), S(i), S(i)});
  return n;
}

/* Rows [b, e) of a layer norm, on one member of the device's team. */
typedef struct ln_rows {
  const float *x, *gamma, *beta;
  float *y, *mean, *rstd;
  float eps;
  int64_t d;
} ln_rows;

static void ln_rows_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const ln_rows *a = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  int64_t d = a->d;
  float inv_d = 1.0f / (float)d;
  for (int64_t r = b; r < e; r++) {
    const float *xr = a->x + r * d;
    float *yr = a->y + r * d;
    float mu = v->row_sum(xr, d) * inv_d;
    float rs = 1.0f / sqrtf(v->row_sqdev(xr, d, mu) * inv_d + a->eps);
    for (int64_t j = 0; j < d; j++)
      yr[j] = (xr[j] - mu) * rs * a->gamma[j] + a->beta[j];
    a->mean[r] = mu;
    a->rstd[r] = rs;
  }
}

static sl_status ln_cpu(const sl__kernel_ctx *k) {
  int64_t d;
  int64_t rows = sl__dense_rows_of(&k->in_meta[0].shape, &d);
  const float *x = k->in[0], *gamma = k->in[1], *beta = k->in[2];
  float *y = k->out[0], *mean = k->out[1], *rstd = k->out[2];
  float eps = (float)sl__attr_float(k->attrs, "eps", 1e-5);
  if (d == 0) return SL_OK;
  ln_rows r = {x, gamma, beta, y, mean, rstd, eps, d};
  sl__team_for(k->team, rows, SL__GRAIN_ELEMS / d + 1, ln_rows_part, &r);
  return SL_OK;
}

const sl__op_def sl__op_layer_norm = {
    .name = "layer_norm",
    .min_in = 3,
    .max_in = 3,
    .n_out = 3,
    .infer = ln_infer,
    .signatures = ln_signatures,
    .cpu = ln_cpu,
};

/* ---- layer_norm_grad ---------------------------------------------------- */

static sl_status lng_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 5));
  SL_CHECK(check_x(&in[1], "x"));
  SL_CHECK(sl__dense_want_f32(&in[0], "dy"));
  SL_CHECK(sl__dense_want_same_shape(&in[0], "dy", &in[1], "x"));
  SL_CHECK(check_vec(&in[1], &in[2], "gamma"));
  sl_shape rs = sl__dense_drop_last(&in[1].shape);
  const char *names[2] = {"mean", "rstd"};
  for (int i = 0; i < 2; i++) {
    SL_CHECK(sl__dense_want_f32(&in[3 + i], names[i]));
    if (!sl_shape_equal(&in[3 + i].shape, &rs)) {
      char sx[96], sv[96], sw[96];
      return sl__fail(SL_EINVAL, "x %s and %s %s: want %s %s",
                      SL__DENSE_SHAPE_STR(sx, &in[1].shape), names[i],
                      SL__DENSE_SHAPE_STR(sv, &in[3 + i].shape), names[i],
                      SL__DENSE_SHAPE_STR(sw, &rs));
    }
  }
  out[0] = in[1];
  out[1] = out[2] = in[2];
  return SL_OK;
}

static int lng_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 5) return 0;
  for (int i = 0; i + 1 < in[1].shape.ndim; i++)
    n = sl__dense_sig_add(sigs, n, max, 5,
                          (sl_sbp[]){S(i), S(i), B(), S(i), S(i)}, 3,
                          (sl_sbp[]){S(i), P(), P()});
  return sl__dense_sig_add(sigs, n, max, 5, (sl_sbp[]){P(), B(), B(), B(), B()},
                           3, (sl_sbp[]){P(), P(), P()});
}

/* Workspace: dgamma and dbeta in double ([D] each), then each row's two
 * scaled sums a and b (f32 [rows] each). */
static size_t lng_workspace(const sl__kernel_ctx *k) {
  const sl_shape *s = &k->in_meta[2].shape;
  int64_t d;
  int64_t rows = sl__dense_rows_of(&k->in_meta[1].shape, &d);
  return (size_t)(s->ndim ? s->dims[0] : 0) * 2 * sizeof(double) +
         (size_t)rows * 2 * sizeof(float);
}

/* One layer_norm_grad call, for the team's parts. */
typedef struct lng_run {
  const float *dy, *x, *gamma, *mean, *rstd;
  float *dx, *a, *b; /* a, b: per row, from the first pass */
  double *dg, *db;
  int64_t rows, d;
} lng_run;

/* Rows [lo, hi): a = mean over the row of gamma dy, b = of gamma dy xhat. */
static void lng_sums_part(void *arg, int64_t lo, int64_t hi, int part) {
  (void)part;
  const lng_run *r = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  float inv_d = 1.0f / (float)r->d;
  for (int64_t i = lo; i < hi; i++) {
    float sg, sgx;
    v->row_ln_grad_sums(r->gamma, r->dy + i * r->d, r->x + i * r->d, r->mean[i],
                        r->rstd[i], r->d, &sg, &sgx);
    r->a[i] = sg * inv_d;
    r->b[i] = sgx * inv_d;
  }
}

/* Columns [lo, hi) of row i: dx, and their terms of dgamma and dbeta. */
static void lng_row_cols(const lng_run *r, const sl__dense_rows *v, int64_t i,
                         int64_t lo, int64_t hi) {
  int64_t at = i * r->d + lo;
  v->ln_grad_row(r->dy + at, r->x + at, r->gamma + lo, r->mean[i], r->rstd[i],
                 r->a[i], r->b[i], r->dx + at, r->dg + lo, r->db + lo, hi - lo);
}

/* Columns [lo, hi) of every row, in row order: dx, and dgamma and dbeta's
 * sums of those columns. */
static void lng_cols_part(void *arg, int64_t lo, int64_t hi, int part) {
  (void)part;
  const lng_run *r = arg;
  const sl__dense_rows *v = sl__dense_rows_get();
  for (int64_t i = 0; i < r->rows; i++)
    lng_row_cols(r, v, i, lo, hi);
}

static sl_status lng_cpu(const sl__kernel_ctx *k) {
  int64_t d;
  int64_t rows = sl__dense_rows_of(&k->in_meta[1].shape, &d);
  float *dgamma = k->out[1], *dbeta = k->out[2];
  if (d == 0) return SL_OK;
  if (!k->workspace || k->workspace_bytes < lng_workspace(k))
    return sl__fail(SL_EINVAL, "layer_norm_grad: no workspace (run it with "
                               "sl__op_run_cpu)");
  double *dg = k->workspace, *db = dg + d;
  float *a = (float *)(db + d);
  lng_run r = {.dy = k->in[0],
               .x = k->in[1],
               .gamma = k->in[2],
               .mean = k->in[3],
               .rstd = k->in[4],
               .dx = k->out[0],
               .a = a,
               .b = a + rows,
               .dg = dg,
               .db = db,
               .rows = rows,
               .d = d};
  for (int64_t j = 0; j < d; j++)
    dg[j] = db[j] = 0.0;
  int64_t row_grain = SL__GRAIN_ELEMS / d + 1,
          col_grain = SL__GRAIN_ELEMS / (rows + 1) + 1;
  if (sl__team_parts(k->team, rows, row_grain) == 1 &&
      sl__team_parts(k->team, d, col_grain) == 1) {
    /* One thread: each row's sums and its writes in one pass, while the
     * row sits in L1 (the same operations, so the same bits). */
    const sl__dense_rows *v = sl__dense_rows_get();
    for (int64_t i = 0; i < rows; i++) {
      lng_sums_part(&r, i, i + 1, 0);
      lng_row_cols(&r, v, i, 0, d);
    }
  } else {
    sl__team_for(k->team, rows, row_grain, lng_sums_part, &r);
    sl__team_for(k->team, d, col_grain, lng_cols_part, &r);
  }
  for (int64_t j = 0; j < d; j++) {
    dgamma[j] = (float)dg[j];
    dbeta[j] = (float)db[j];
  }
  return SL_OK;
}

const sl__op_def sl__op_layer_norm_grad = {
    .name = "layer_norm_grad",
    .min_in = 5,
    .max_in = 5,
    .n_out = 3,
    .infer = lng_infer,
    .signatures = lng_signatures,
    .workspace = lng_workspace,
    .cpu = lng_cpu,
};
