/* Helpers of the dense op family (matmul.c, softmax.c, loss.c, norm.c,
 * embedding.c, optim.c): checks and messages for shape inference, signature
 * lists, index loads, and the row loops' building blocks.
 *
 * Row reductions run in SL__DENSE_LANES independent partial sums (lane l
 * takes elements l, l + 16, l + 32, ... of the row) combined in a fixed
 * tree, in vector code chosen for the CPU (sl__dense_rows). The result of a
 * row depends only on the row's values, never on where the row sits in a
 * shard or on which instruction set runs it (the files are compiled without
 * FP contraction), so a split on other axes gives bit-identical rows. */
#ifndef SLUICE_KERNELS_CPU_DENSE_UTIL_H
#define SLUICE_KERNELS_CPU_DENSE_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/blas.h"
#include "cpu/kernel_util.h" /* sl__dense_exp */
#include "op.h"

/* The bit-identity above needs every a * b + c rounded twice. GCC does not
 * contract in ISO C mode (-std=c11); clang contracts within an expression
 * by default, and AVX-512 has FMA, so say it (for the rest of the file). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define SL__DENSE_LANES 16

/* ---- infer helpers ----------------------------------------------------- */

/* "[4,3]" of a shape for messages (a buffer per call site). */
#define SL__DENSE_SHAPE_STR(buf, shape)                                        \
  (sl_shape_print((shape), (buf), sizeof(buf)), (buf))

/* Normalises axis (negative counts from the end) for a tensor of ndim dims;
 * SL_EINVAL naming `what` when it is out of range. */
static inline sl_status sl__dense_axis(int64_t axis, int ndim, const char *what,
                                       int *out) {
  if (axis < -ndim || axis >= ndim)
    return sl__fail(SL_EINVAL, "%s %lld out of range for a %d-d tensor", what,
                    (long long)axis, ndim);
  *out = (int)(axis < 0 ? axis + ndim : axis);
  return SL_OK;
}

/* SL_EINVAL unless meta m (input `name`) is f32. */
static inline sl_status sl__dense_want_f32(const sl__meta *m,
                                           const char *name) {
  if (m->dtype != SL_DTYPE_F32)
    return sl__fail(SL_EINVAL, "%s: dtype %s, want f32", name,
                    sl_dtype_name(m->dtype));
  return SL_OK;
}

/* SL_EINVAL unless meta m (input `name`) is i32 or i64. */
static inline sl_status sl__dense_want_index(const sl__meta *m,
                                             const char *name) {
  if (m->dtype != SL_DTYPE_I32 && m->dtype != SL_DTYPE_I64)
    return sl__fail(SL_EINVAL, "%s: dtype %s, want i32 or i64", name,
                    sl_dtype_name(m->dtype));
  return SL_OK;
}

/* SL_EINVAL unless a and b (inputs named na, nb) have equal shapes. */
static inline sl_status sl__dense_want_same_shape(const sl__meta *a,
                                                  const char *na,
                                                  const sl__meta *b,
                                                  const char *nb) {
  if (sl_shape_equal(&a->shape, &b->shape)) return SL_OK;
  char sa[96], sb[96];
  return sl__fail(SL_EINVAL, "%s %s and %s %s: shapes differ", na,
                  SL__DENSE_SHAPE_STR(sa, &a->shape), nb,
                  SL__DENSE_SHAPE_STR(sb, &b->shape));
}

/* SL_EINVAL unless the input count is `want`. */
static inline sl_status sl__dense_want_inputs(int n_in, int want) {
  if (n_in != want)
    return sl__fail(SL_EINVAL, "%d inputs, want %d", n_in, want);
  return SL_OK;
}

/* The shape s without its last dim. */
static inline sl_shape sl__dense_drop_last(const sl_shape *s) {
  sl_shape r = *s;
  if (r.ndim > 0) r.dims[--r.ndim] = 0;
  return r;
}

/* ---- signatures -------------------------------------------------------- */

static inline sl_sbp sl__dense_S(int axis) { return sl_sbp_split(axis); }
static inline sl_sbp sl__dense_B(void) { return sl_sbp_broadcast(); }
static inline sl_sbp sl__dense_P(void) { return sl_sbp_partial(SL_REDUCE_SUM); }

/* Appends the signature (in[0..n_in), out[0..n_out)) when there is room;
 * returns the new count. */
static inline int sl__dense_sig_add(sl__sbp_sig *sigs, int n, int max, int n_in,
                                    const sl_sbp *in, int n_out,
                                    const sl_sbp *out) {
  if (n >= max) return n;
  sl__sbp_sig *s = &sigs[n];
  memset(s, 0, sizeof *s);
  for (int i = 0; i < n_in; i++)
    s->in[i] = in[i];
  for (int i = 0; i < n_out; i++)
    s->out[i] = out[i];
  return n + 1;
}

/* ---- kernels ------------------------------------------------------------ */

/* Index element i of an i32 or i64 buffer. */
static inline int64_t sl__dense_index(const void *p, sl_dtype dt, int64_t i) {
  return dt == SL_DTYPE_I64 ? ((const int64_t *)p)[i]
                            : (int64_t)((const int32_t *)p)[i];
}

/* Rows of a shape reduced over its last dim: the product of the other
 * dims; *len gets the last dim. A scalar is 1 row of 1. */
static inline int64_t sl__dense_rows_of(const sl_shape *s, int64_t *len) {
  int64_t last = s->ndim ? s->dims[s->ndim - 1] : 1;
  int64_t rows = 1;
  for (int i = 0; i + 1 < s->ndim; i++)
    rows *= s->dims[i];
  *len = last;
  return rows;
}

/* The global multi-index "[i,j]" of local flat position `flat` of a shard
 * whose slice is sl (local extents = sl->extent), for error messages. */
static inline void sl__dense_global_pos(const sl_slice *sl, int64_t flat,
                                        char *buf, size_t size) {
  int64_t idx[SL_MAX_DIMS];
  for (int d = sl->ndim - 1; d >= 0; d--) {
    int64_t e = sl->extent[d] > 0 ? sl->extent[d] : 1;
    idx[d] = flat % e + sl->start[d];
    flat /= e;
  }
  int len = snprintf(buf, size, "[");
  for (int d = 0; d < sl->ndim && len > 0 && (size_t)len < size; d++)
    len += snprintf(buf + len, size - (size_t)len, "%s%lld", d ? "," : "",
                    (long long)idx[d]);
  if (len > 0 && (size_t)len < size)
    snprintf(buf + len, size - (size_t)len, "]");
}

/* The 16 lanes of a row reduction combined in a fixed tree. */
static inline float sl__dense_lanes_sum(float *t) {
  for (int w = SL__DENSE_LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++)
      t[l] += t[l + w];
  return t[0];
}
static inline float sl__dense_lanes_max(float *t) {
  for (int w = SL__DENSE_LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++)
      t[l] = t[l + w] > t[l] ? t[l + w] : t[l];
  return t[0];
}

/* ---- vector loops, one table per instruction set ------------------------ */

/* The loops that need vector code to be fast (exp, row reductions), from
 * dense_rows_impl.h. Every table gives the same bits for the same input.
 * In the row functions lane l of the reduction takes elements l, l + 16,
 * l + 32, ... in order; n >= 1 for row_max. */
/* Scalars of one sgd_update / adam_update call (optim.c forms them). */
typedef struct sl__dense_sgd {
  float lr, mom, damp1, wd;
  bool has_wd, first, nesterov, use_mom;
} sl__dense_sgd;

typedef struct sl__dense_adam {
  float decay, l2, one_b1, b2, one_b2, bc2_sqrt, eps, step_size;
  bool has_decay, has_l2;
} sl__dense_adam;

typedef struct sl__dense_rows {
  const char *name; /* "sse" (16-byte vectors, any target), "avx2", "avx512" */
  bool (*usable)(const sl__cpu_features *f);
  /* max of x[0..n). A NaN may be skipped: callers then sum exp(x - max),
   * which carries the NaN to every output of the row. */
  float (*row_max)(const float *x, int64_t n);
  /* sum of e_j = exp(x[j] - m), j < n; also y[j] = e_j when y != NULL. */
  float (*row_expsum)(const float *x, int64_t n, float m, float *y);
  float (*row_sum)(const float *x, int64_t n);
  float (*row_dot)(const float *x, const float *y, int64_t n);
  /* sum of (x[j] - mu)^2. */
  float (*row_sqdev)(const float *x, int64_t n, float mu);
  /* *sg = sum g_j, *sgx = sum g_j (x[j] - mu) rs, g_j = gamma[j] dy[j]. */
  void (*row_ln_grad_sums)(const float *gamma, const float *dy, const float *x,
                           float mu, float rs, int64_t n, float *sg,
                           float *sgx);
  /* e = exp(x[j] - m[j]); y[j] = e (y != NULL); acc[j] += e; j < w. */
  void (*exp_cols)(const float *x, const float *m, float *y, float *acc,
                   int64_t w);
  /* dx[j] = dy[j] - exp(y[j]) * s[j * s_step] (s_step 0: s[0]). */
  void (*exp_mul_sub)(const float *dy, const float *y, const float *s,
                      int64_t s_step, float *dx, int64_t n);
  /* y[j] = (x[j] - a) s - b (y may be x): softmax's scaling (a = b = 0)
   * and log_softmax's output (s = 1) with their exact bits. */
  void (*row_affine)(const float *x, float *y, int64_t n, float a, float s,
                     float b);
  /* One row of layer_norm_grad: dx[j] = rs ((gamma[j] dy[j] - a) - xhat_j
   * b) with xhat_j = (x[j] - mu) rs; dg[j] += dy[j] xhat_j, db[j] +=
   * dy[j] (in double). */
  void (*ln_grad_row)(const float *dy, const float *x, const float *gamma,
                      float mu, float rs, float a, float b, float *dx,
                      double *dg, double *db, int64_t n);
  /* n elements of sgd_update / adam_update into wl, ml (and vl): the
   * formulas of optim.c. The outputs are distinct from the inputs. */
  void (*sgd_chunk)(const sl__dense_sgd *c, const float *w, const float *g,
                    const float *m, float *wl, float *ml, int64_t n);
  /* wn[j] = w[j] - lr g[j] (wn may be w): the same bits as sgd_chunk
   * without momentum and weight decay, in one pass. */
  void (*sgd_plain)(float lr, const float *w, const float *g, float *wn,
                    int64_t n);
  void (*adam_chunk)(const sl__dense_adam *c, const float *w, const float *g,
                     const float *m, const float *v, float *wl, float *ml,
                     float *vl, int64_t n);
} sl__dense_rows;

/* The fastest table this CPU runs (chosen once). Thread-safe. */
const sl__dense_rows *sl__dense_rows_get(void);
/* Every table built in, "sse" first (tests compare them). */
int sl__dense_rows_count(void);
const sl__dense_rows *sl__dense_rows_at(int i);
/* Tables from instruction-set files (x86: avx2, avx512); CMake picks the
 * file for the target. Returns how many, *out points at them. */
int sl__dense_rows_isa(const sl__dense_rows *const **out);

#endif
