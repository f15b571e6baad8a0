/* Reductions: reduce_sum, reduce_mean, reduce_max over a set of axes
 * (attrs: axes = list, empty or absent = all; keepdims = 0/1), and
 * reduce_sum_like (attr shape: sums x down to a shape that broadcasts to
 * x's, the reverse of broadcasting, for gradients of broadcasting ops).
 *
 * Signatures: a split on a kept axis stays a split (on the axis's position
 * in the output); a split on a reduced axis leaves each rank a partial
 * result: P for sum and mean, P(max) for max. Partial inputs pass through
 * (P -> P for sum and mean, which are linear; P(max) -> P(max) for max).
 * reduce_mean divides by the GLOBAL count of reduced elements (from
 * in_global), so partial sums of a split axis add up to the mean. An empty
 * local shard yields the reduction's identity (0, or -inf / the lowest
 * integer for max), which is what its partial part must be. The mean of no
 * elements is NaN (0/0), as in numpy.
 *
 * The kernel walks the input once in memory order with the output offset
 * of each row (sl__iter over the input shape with zero output strides on
 * reduced axes): rows whose inner axis is kept accumulate elementwise into
 * the output row (column sums, e.g. a bias gradient, vectorise), rows
 * whose inner axis is reduced are summed on vector accumulators in a fixed
 * lane order (row sums vectorise) and added to one output element. */
#include <math.h>
#include <string.h>

#include "cpu/kernel_util.h"

typedef enum red_kind { RED_SUM, RED_MEAN, RED_MAX } red_kind;

/* ---- axes
 * ---------------------------------------------------------------------- */

/* The reduced axes of an ndim-dim input from the `axes` attribute: a bit
 * mask. Empty or absent: every axis. */
static sl_status axes_mask(const sl__attrs *at, int ndim, unsigned *mask) {
  int n;
  const int64_t *v = sl__attr_ints(at, "axes", &n);
  *mask = 0;
  if (sl__attr_has(at, "axes") && !v)
    return sl__fail(SL_EINVAL, "attribute 'axes' is not a list of axes");
  if (n == 0) {
    *mask = (1u << ndim) - 1u;
    return SL_OK;
  }
  for (int i = 0; i < n; i++) {
    int a;
    SL_CHECK(sl__axis_norm("axis", v[i], ndim, &a));
    if (*mask & (1u << a))
      return sl__fail(SL_EINVAL, "axis %d listed twice", a);
    *mask |= 1u << a;
  }
  return SL_OK;
}

/* The mask of x's axes that reduce_sum_like sums to reach `to`: the
 * leading axes `to` lacks and those where `to` has extent 1 and x not. */
static unsigned like_mask(const sl_shape *x, const sl_shape *to) {
  unsigned m = 0;
  int off = x->ndim - to->ndim;
  for (int i = 0; i < x->ndim; i++)
    if (i < off || (to->dims[i - off] == 1 && x->dims[i] != 1)) m |= 1u << i;
  return m;
}

static bool keepdims(const sl__attrs *at) {
  return sl__attr_int(at, "keepdims", 0) != 0;
}

/* ---- inference and signatures
 * ------------------------------------------------------ */

static sl_status reduce_infer(red_kind kind, const sl__attrs *at, int n_in,
                              const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype,
                           kind == RED_MEAN ? SL__DT_FLOAT : SL__DT_NUM));
  unsigned mask;
  SL_CHECK(axes_mask(at, in[0].shape.ndim, &mask));
  bool keep = keepdims(at);
  memset(out, 0, sizeof *out);
  out[0].dtype = in[0].dtype;
  for (int i = 0; i < in[0].shape.ndim; i++) {
    if (!(mask & (1u << i)))
      out[0].shape.dims[out[0].shape.ndim++] = in[0].shape.dims[i];
    else if (keep)
      out[0].shape.dims[out[0].shape.ndim++] = 1;
  }
  return SL_OK;
}

static int reduce_sigs(red_kind kind, const sl__attrs *at, int n_in,
                       const sl__meta *in, sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  unsigned mask;
  if (n_in != 1 || axes_mask(at, in[0].shape.ndim, &mask) != SL_OK) return 0;
  bool keep = keepdims(at);
  sl_sbp part = kind == RED_MAX ? sl__Pmax() : sl__P();
  int o = 0; /* the output axis of input axis i */
  for (int i = 0; i < in[0].shape.ndim; i++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = sl__S(i);
    if (mask & (1u << i)) {
      s->out[0] = part;
      if (keep) o++;
    } else {
      s->out[0] = sl__S(o++);
    }
    sl__sig_commit(&l);
  }
  sl__sbp_sig *s = sl__sig_begin(&l);
  s->in[0] = s->out[0] = part;
  sl__sig_commit(&l);
  return l.n;
}

static sl_status like_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype, SL__DT_NUM));
  sl_shape to;
  SL_CHECK(sl__attr_shape(at, "shape", &to));
  if (!sl__broadcasts_to(&to, &in[0].shape))
    return sl__fail(SL_EINVAL,
                    "shape %s does not broadcast to the input's %s, so the "
                    "input cannot be summed down to it",
                    sl__shape_text(&to).s, sl__shape_text(&in[0].shape).s);
  out[0].dtype = in[0].dtype;
  out[0].shape = to;
  return SL_OK;
}

static int like_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                     sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  sl_shape to;
  if (n_in != 1 || sl__attr_shape(at, "shape", &to) != SL_OK ||
      !sl__broadcasts_to(&to, &in[0].shape))
    return 0;
  unsigned mask = like_mask(&in[0].shape, &to);
  int off = in[0].shape.ndim - to.ndim;
  for (int i = 0; i < in[0].shape.ndim; i++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = sl__S(i);
    s->out[0] = (mask & (1u << i)) ? sl__P() : sl__S(i - off);
    sl__sig_commit(&l);
  }
  sl__sbp_sig *s = sl__sig_begin(&l);
  s->in[0] = s->out[0] = sl__P();
  sl__sig_commit(&l);
  return l.n;
}

/* ---- the kernel
 * ------------------------------------------------------------------ */

/* Row kernels: o[0] = op(o[0], x[0..n)) for a reduced inner axis (stride
 * 0), o[j] = op(o[j], x[j]) for a kept one (a plain loop the compiler
 * vectorises). A reduced row runs on four 32-byte vector accumulators
 * (GCC vector extensions): lane l of accumulator k takes elements
 * j + 8k + l (floats; 4 lanes for 8-byte types), then the accumulators and
 * lanes combine in a fixed order and the tail follows one by one. The
 * order depends only on n, so every instruction-set instance gives the
 * same bits. Integer sums run in the unsigned type, whose wrap-around is
 * defined. */
#define SUM_ROW(fname, T, U)                                                   \
  SL__MULTIVERSION(fname, (T * o, const T *x, int64_t n, bool inner_reduced),  \
                   (o, x, n, inner_reduced), {                                 \
                     if (!inner_reduced) {                                     \
                       for (int64_t j = 0; j < n; j++)                         \
                         o[j] = (T)((U)o[j] + (U)x[j]);                        \
                       return;                                                 \
                     }                                                         \
                     typedef U vec __attribute__((vector_size(32)));           \
                     enum { L = 32 / sizeof(U) };                              \
                     vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, v0, v1, v2,   \
                         v3;                                                   \
                     int64_t j = 0;                                            \
                     for (; j + 4 * L <= n; j += 4 * L) {                      \
                       memcpy(&v0, x + j, sizeof v0);                          \
                       memcpy(&v1, x + j + L, sizeof v1);                      \
                       memcpy(&v2, x + j + 2 * L, sizeof v2);                  \
                       memcpy(&v3, x + j + 3 * L, sizeof v3);                  \
                       a0 += v0;                                               \
                       a1 += v1;                                               \
                       a2 += v2;                                               \
                       a3 += v3;                                               \
                     }                                                         \
                     a0 = (a0 + a1) + (a2 + a3);                               \
                     U s = (U)o[0];                                            \
                     for (int l = 0; l < L; l++)                               \
                       s += a0[l];                                             \
                     for (; j < n; j++)                                        \
                       s += (U)x[j];                                           \
                     o[0] = (T)s;                                              \
                   })

/* NaN wins, as in numpy's max. */
#define MAX2(a, b) ((b) > (a) || (b) != (b) ? (b) : (a))
/* Row maxima the same way, with a vector select: lanes keep the larger
 * value or a NaN (b != b), and a NaN accumulator stays NaN, so a NaN
 * anywhere wins the final combine. */
#define MAX_ROW(fname, T)                                                      \
  SL__MULTIVERSION(fname, (T * o, const T *x, int64_t n, bool inner_reduced),  \
                   (o, x, n, inner_reduced), {                                 \
                     if (!inner_reduced) {                                     \
                       for (int64_t j = 0; j < n; j++)                         \
                         o[j] = MAX2(o[j], x[j]);                              \
                       return;                                                 \
                     }                                                         \
                     typedef T vec __attribute__((vector_size(32)));           \
                     enum { L = 32 / sizeof(T) };                              \
                     vec a0 = (vec){0} + o[0], a1 = a0, a2 = a0, a3 = a0, v0,  \
                         v1, v2, v3;                                           \
                     int64_t j = 0;                                            \
                     for (; j + 4 * L <= n; j += 4 * L) {                      \
                       memcpy(&v0, x + j, sizeof v0);                          \
                       memcpy(&v1, x + j + L, sizeof v1);                      \
                       memcpy(&v2, x + j + 2 * L, sizeof v2);                  \
                       memcpy(&v3, x + j + 3 * L, sizeof v3);                  \
                       VMAX(a0, v0);                                           \
                       VMAX(a1, v1);                                           \
                       VMAX(a2, v2);                                           \
                       VMAX(a3, v3);                                           \
                     }                                                         \
                     VMAX(a0, a1);                                             \
                     VMAX(a2, a3);                                             \
                     VMAX(a0, a2);                                             \
                     T m = a0[0];                                              \
                     for (int l = 1; l < L; l++)                               \
                       m = MAX2(m, a0[l]);                                     \
                     for (; j < n; j++)                                        \
                       m = MAX2(m, x[j]);                                      \
                     o[0] = m;                                                 \
                   })
/* a = MAX2(a, b) lane by lane, as a bitwise select on the comparison mask
 * (C has no vector ?:). */
#define VMAX(a, b)                                                             \
  do {                                                                         \
    __typeof__((b) > (a)) m_ = ((b) > (a)) | ((b) != (b));                     \
    (a) = (__typeof__(a))(((__typeof__(m_))(b)&m_) |                           \
                          ((__typeof__(m_))(a) & ~m_));                        \
  } while (0)

SUM_ROW(sum_f32, float, float)
SUM_ROW(sum_f64, double, double)
SUM_ROW(sum_i32, int32_t, uint32_t)
SUM_ROW(sum_i64, int64_t, uint64_t)
MAX_ROW(max_f32, float)
MAX_ROW(max_f64, double)
MAX_ROW(max_i32, int32_t)
MAX_ROW(max_i64, int64_t)

static void fill_identity(sl_dtype dt, bool is_max, void *o, int64_t n) {
  switch (dt) {
  case SL_DTYPE_F32:
    for (int64_t i = 0; i < n; i++)
      ((float *)o)[i] = is_max ? -INFINITY : 0.f;
    break;
  case SL_DTYPE_F64:
    for (int64_t i = 0; i < n; i++)
      ((double *)o)[i] = is_max ? -INFINITY : 0.0;
    break;
  case SL_DTYPE_I32:
    for (int64_t i = 0; i < n; i++)
      ((int32_t *)o)[i] = is_max ? INT32_MIN : 0;
    break;
  case SL_DTYPE_I64:
    for (int64_t i = 0; i < n; i++)
      ((int64_t *)o)[i] = is_max ? INT64_MIN : 0;
    break;
  default: break;
  }
}

/* Reduces the local input over the axes in mask into the local output,
 * whose elements are the kept axes in order (keepdims or not). */
static sl_status reduce_run(const sl__kernel_ctx *k, unsigned mask,
                            bool is_max) {
  const sl_shape *x = &k->in_meta[0].shape;
  sl_dtype dt = k->in_meta[0].dtype;
  int64_t out_n = sl_shape_numel(&k->out_meta[0].shape);
  fill_identity(dt, is_max, k->out[0], out_n);
  /* Output strides over the input's axes: 0 on reduced ones. */
  int64_t ostride[SL_MAX_DIMS], s = 1;
  for (int i = x->ndim - 1; i >= 0; i--) {
    if (mask & (1u << i)) {
      ostride[i] = 0;
    } else {
      ostride[i] = s;
      s *= x->dims[i];
    }
  }
  if (s != out_n)
    return sl__fail(SL_EINVAL, "local output %s does not fit input %s",
                    sl__shape_text(&k->out_meta[0].shape).s,
                    sl__shape_text(x).s);
  sl__iter it;
  const int64_t *strides[1] = {ostride};
  sl__iter_init_strided(&it, x, 1, strides);
  if (it.empty) return SL_OK;
  bool inner_reduced = it.strides[1][it.ndim - 1] == 0;
  sl__iter_pos p;
  sl__iter_seek(&it, 0, &p);
  for (int64_t r = 0; r < it.rows; r++, sl__iter_next(&it, &p)) {
    const int64_t *off = p.off;
    switch (dt) {
#define CASE(DT, T, SUMF, MAXF)                                                \
  case DT:                                                                     \
    (is_max ? MAXF : SUMF)((T *)k->out[0] + off[1],                            \
                           (const T *)k->in[0] + off[0], it.len,               \
                           inner_reduced);                                     \
    break;
      CASE(SL_DTYPE_F32, float, sum_f32, max_f32)
      CASE(SL_DTYPE_F64, double, sum_f64, max_f64)
      CASE(SL_DTYPE_I32, int32_t, sum_i32, max_i32)
      CASE(SL_DTYPE_I64, int64_t, sum_i64, max_i64)
#undef CASE
    default: return sl__check_dtype("input 0", dt, SL__DT_NUM);
    }
  }
  return SL_OK;
}

static sl_status reduce_cpu(red_kind kind, const sl__kernel_ctx *k) {
  unsigned mask;
  SL_CHECK(axes_mask(k->attrs, k->in_meta[0].shape.ndim, &mask));
  SL_CHECK(reduce_run(k, mask, kind == RED_MAX));
  if (kind != RED_MEAN) return SL_OK;
  /* Divide by the global count: a split axis's ranks each hold part of
   * the sum (their outputs are partial), not part of the mean. */
  double count = 1;
  for (int i = 0; i < k->in_global[0].ndim; i++)
    if (mask & (1u << i)) count *= (double)k->in_global[0].dims[i];
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (k->out_meta[0].dtype == SL_DTYPE_F32) {
    float *o = k->out[0];
    float inv = (float)(1.0 / count);
    if (count == 0)
      for (int64_t i = 0; i < n; i++)
        o[i] = o[i] / 0.f;
    else
      for (int64_t i = 0; i < n; i++)
        o[i] *= inv;
  } else {
    double *o = k->out[0];
    for (int64_t i = 0; i < n; i++)
      o[i] /= count;
  }
  return SL_OK;
}

static sl_status like_cpu(const sl__kernel_ctx *k) {
  return reduce_run(k, like_mask(&k->in_global[0], &k->out_global[0]), false);
}

#define REDUCE_OP(NAME, KIND)                                                  \
  static sl_status NAME##_infer(const sl__attrs *at, int n_in,                 \
                                const sl__meta *in, sl__meta *out) {           \
    return reduce_infer(KIND, at, n_in, in, out);                              \
  }                                                                            \
  static int NAME##_sigs(const sl__attrs *at, int n_in, const sl__meta *in,    \
                         sl__sbp_sig *sigs, int max) {                         \
    return reduce_sigs(KIND, at, n_in, in, sigs, max);                         \
  }                                                                            \
  static sl_status NAME##_cpu(const sl__kernel_ctx *k) {                       \
    return reduce_cpu(KIND, k);                                                \
  }                                                                            \
  const sl__op_def sl__op_##NAME = {                                           \
      .name = #NAME,                                                           \
      .min_in = 1,                                                             \
      .max_in = 1,                                                             \
      .n_out = 1,                                                              \
      .infer = NAME##_infer,                                                   \
      .signatures = NAME##_sigs,                                               \
      .cpu = NAME##_cpu,                                                       \
  };

REDUCE_OP(reduce_sum, RED_SUM)
REDUCE_OP(reduce_mean, RED_MEAN)
REDUCE_OP(reduce_max, RED_MAX)

const sl__op_def sl__op_reduce_sum_like = {
    .name = "reduce_sum_like",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = like_infer,
    .signatures = like_sigs,
    .cpu = like_cpu,
};
