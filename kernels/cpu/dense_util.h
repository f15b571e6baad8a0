/* Helpers of the dense op family (matmul.c, softmax.c, loss.c, norm.c,
 * embedding.c, optim.c): checks and messages for shape inference, signature
 * lists, index loads, and the row loops' building blocks.
 *
 * Row reductions run in SL__DENSE_LANES independent partial sums (lane l
 * takes elements l, l + 16, l + 32, ... of the row) combined in a fixed
 * tree, written with vector extensions. The result of a row depends only on
 * the row's values, never on where the row sits in a shard or on which
 * instruction set runs it (the files are compiled without FP contraction),
 * so a split on other axes gives bit-identical rows. */
#ifndef SLUICE_KERNELS_CPU_DENSE_UTIL_H
#define SLUICE_KERNELS_CPU_DENSE_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op.h"

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

/* Rows of a shape that reduces over its last dim: numel / last (0 when the
 * last dim is 0 or the shape is a scalar gives 1 row of 1). */
static inline int64_t sl__dense_rows(const sl_shape *s, int64_t *len) {
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

/* exp(x) for x <= 88 (the ops call it on x - max <= 0): 2^n * e^r with
 * n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 split in a
 * part exact in n * hi and a rest), e^r by its Taylor series to degree 7
 * (truncation below 1e-8 relative on that interval, about 1 ulp of float
 * rounding). Only +, *, compares and integer bit operations, so it
 * vectorises and gives the same bits in vector and scalar code. Returns 0
 * below -87.33 (where 2^n leaves the normal range) and NaN for NaN. */
static inline float sl__dense_exp(float x) {
  const float lo = -87.33654f, hi = 88.0f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  /* Round to nearest by adding 1.5 * 2^23: the integer lands in the low
   * mantissa bits. */
  const float magic = 12582912.0f;
  float t = xc * 1.44269504088896341f + magic;
  int32_t tb;
  memcpy(&tb, &t, sizeof tb);
  int32_t n = tb - 0x4B400000;
  float fn = t - magic;
  float r = (xc - fn * 0.693145751953125f) - fn * 1.428606765330187e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t sb = (n + 127) << 23;
  float s;
  memcpy(&s, &sb, sizeof s);
  float y = p * s;
  return x < lo ? 0.0f : y;
}

/* ---- 16-lane vectors ---------------------------------------------------- */

/* GCC/Clang vector extensions: the compiler maps a 16-float vector to the
 * target's registers (four SSE, two AVX or one AVX-512 register), the same
 * operations in the same order on any target. Row loops use them so they
 * vectorise by construction rather than by the auto-vectoriser's mood. */
/* Vectors pass by value only between static inline functions of the files
 * that include this header, so GCC's note that a 64-byte vector's calling
 * convention depends on AVX-512 never matters to them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float sl__vf __attribute__((vector_size(SL__DENSE_LANES * 4)));
typedef int32_t sl__vi __attribute__((vector_size(SL__DENSE_LANES * 4)));

static inline sl__vf sl__vf_load(const float *p) {
  sl__vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void sl__vf_store(float *p, sl__vf v) { memcpy(p, &v, sizeof v); }
static inline sl__vf sl__vf_splat(float x) { return (sl__vf){0} + x; }
/* The first n (< 16) elements of p, the other lanes `pad`. */
static inline sl__vf sl__vf_load_tail(const float *p, int64_t n, float pad) {
  float t[SL__DENSE_LANES];
  for (int l = 0; l < SL__DENSE_LANES; l++)
    t[l] = l < n ? p[l] : pad;
  return sl__vf_load(t);
}
static inline void sl__vf_store_tail(float *p, sl__vf v, int64_t n) {
  float t[SL__DENSE_LANES];
  sl__vf_store(t, v);
  for (int64_t l = 0; l < n; l++)
    p[l] = t[l];
}
/* m ? a : b lane by lane (m: all ones or zero per lane). */
static inline sl__vf sl__vf_select(sl__vi m, sl__vf a, sl__vf b) {
  return (sl__vf)((m & (sl__vi)a) | (~m & (sl__vi)b));
}
static inline sl__vf sl__vf_max(sl__vf a, sl__vf b) {
  return sl__vf_select(b > a, b, a);
}
/* Lane sum and max in a fixed tree. */
static inline float sl__vf_sum(sl__vf v) {
  float t[SL__DENSE_LANES];
  sl__vf_store(t, v);
  for (int w = SL__DENSE_LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++)
      t[l] += t[l + w];
  return t[0];
}
static inline float sl__vf_hmax(sl__vf v) {
  float t[SL__DENSE_LANES];
  sl__vf_store(t, v);
  for (int w = SL__DENSE_LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++)
      t[l] = t[l + w] > t[l] ? t[l + w] : t[l];
  return t[0];
}

/* sl__dense_exp on 16 lanes: the same operations, so the same bits. */
static inline sl__vf sl__vf_exp(sl__vf x) {
  const float lo = -87.33654f, hi = 88.0f, magic = 12582912.0f;
  sl__vi below = x < lo;
  sl__vf xc = sl__vf_select(below, sl__vf_splat(lo), x);
  xc = sl__vf_select(xc > hi, sl__vf_splat(hi), xc);
  sl__vf t = xc * 1.44269504088896341f + magic;
  sl__vi n = (sl__vi)t - 0x4B400000;
  sl__vf fn = t - magic;
  sl__vf r = (xc - fn * 0.693145751953125f) - fn * 1.428606765330187e-6f;
  sl__vf p = sl__vf_splat(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  sl__vf y = p * (sl__vf)((n + 127) << 23);
  return sl__vf_select(below, sl__vf_splat(0.0f), y);
}

/* ---- rows ---------------------------------------------------------------- */

/* Lane l of a row reduction takes elements l, l + 16, l + 32, ... */

/* max of x[0..n) (n >= 1). A NaN may be skipped here: the callers then
 * sum exp(x - max), and the NaN reaches every output of the row that way. */
static inline float sl__dense_row_max(const float *x, int64_t n) {
  sl__vf acc = sl__vf_splat(x[0]);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES)
    acc = sl__vf_max(acc, sl__vf_load(x + j));
  if (j < n) acc = sl__vf_max(acc, sl__vf_load_tail(x + j, n - j, x[0]));
  return sl__vf_hmax(acc);
}

/* sum of exp(x[j] - m) over j < n; with y != NULL also y[j] = exp(x[j] -
 * m). */
static inline float sl__dense_row_expsum(const float *x, int64_t n, float m,
                                         float *y) {
  sl__vf acc = sl__vf_splat(0.0f), vm = sl__vf_splat(m);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES) {
    sl__vf e = sl__vf_exp(sl__vf_load(x + j) - vm);
    if (y) sl__vf_store(y + j, e);
    acc += e;
  }
  if (j < n) {
    /* -inf pads: exp(-inf - m) = 0. */
    sl__vf e = sl__vf_exp(sl__vf_load_tail(x + j, n - j, -INFINITY) - vm);
    if (y) sl__vf_store_tail(y + j, e, n - j);
    acc += e;
  }
  return sl__vf_sum(acc);
}

/* sum of x[0..n). */
static inline float sl__dense_row_sum(const float *x, int64_t n) {
  sl__vf acc = sl__vf_splat(0.0f);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES)
    acc += sl__vf_load(x + j);
  if (j < n) acc += sl__vf_load_tail(x + j, n - j, 0.0f);
  return sl__vf_sum(acc);
}

/* sum of x[j] * y[j] over j < n. */
static inline float sl__dense_row_dot(const float *x, const float *y,
                                      int64_t n) {
  sl__vf acc = sl__vf_splat(0.0f);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES)
    acc += sl__vf_load(x + j) * sl__vf_load(y + j);
  if (j < n)
    acc += sl__vf_load_tail(x + j, n - j, 0.0f) *
           sl__vf_load_tail(y + j, n - j, 0.0f);
  return sl__vf_sum(acc);
}

#endif
