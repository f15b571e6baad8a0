/* Source and random ops: fill, random_uniform, random_normal, random_int,
 * and dropout / dropout_grad.
 *
 * Randomness is counter-based (kernel_util.h): element e of a tensor gets
 * sl__rand_bits(sl__rand_key(seed, step'), global flat index of e), where
 * step' is the step for per-step streams and 0 otherwise. Kernels take the
 * global index from out_slice / out_global, so a value depends only on the
 * seed, the step and its position in the global tensor: never on the
 * placement, the SBP or the number of ranks. Any split is therefore a
 * valid signature, and dropout's mask is the same on every rank of a
 * partial group (they hold the same positions), so dropout is linear under
 * P as well.
 *
 * Attributes: shape (ints), dtype (an sl_dtype value), seed (int),
 * per_step (0/1); fill: value; random_uniform: low (0), high (1);
 * random_normal: mean (0), std (1); random_int: low, high (values in
 * [low, high)); dropout, dropout_grad: p (drop probability in [0, 1)),
 * seed. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cpu/kernel_util.h"

/* ---- shared
 * ------------------------------------------------------------------- */

/* Every S(i) of the output of a source op. */
static int source_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                       sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 0, 1);
  sl_shape s;
  if (n_in != 0 || sl__attr_shape(at, "shape", &s) != SL_OK) return 0;
  for (int i = 0; i < s.ndim; i++) {
    sl__sbp_sig *g = sl__sig_begin(&l);
    g->out[0] = sl__S(i);
    sl__sig_commit(&l);
  }
  return l.n;
}

static double attr_num(const sl__attrs *at, const char *name, double dflt) {
  double v = dflt;
  sl__attr_number(at, name, &v);
  return v;
}

static sl_status source_infer(const sl__attrs *at, int n_in, sl_dtype dflt,
                              unsigned allowed, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 0, 0));
  SL_CHECK(sl__attr_shape(at, "shape", &out[0].shape));
  SL_CHECK(sl__attr_dtype(at, "dtype", dflt, allowed, &out[0].dtype));
  return SL_OK;
}

static uint64_t stream_key(const sl__kernel_ctx *k, bool always_step) {
  bool per_step = always_step || sl__attr_int(k->attrs, "per_step", 0) != 0;
  return sl__rand_key(sl__attr_int(k->attrs, "seed", 0),
                      per_step ? k->step : 0);
}

/* Calls ROW_BODY for each local row with g = the global flat index of the
 * row's first element and n = the row length. */
#define FOR_ROWS(k, slice, global, ROW_BODY)                                   \
  do {                                                                         \
    int64_t rows_ = sl__shape_rows(&(k)->out_meta[0].shape);                   \
    int64_t n = sl__shape_len(&(k)->out_meta[0].shape);                        \
    if (sl_shape_numel(&(k)->out_meta[0].shape) == 0) break;                   \
    for (int64_t r = 0; r < rows_; r++) {                                      \
      int64_t g = sl__slice_row_global((slice), (global), r, NULL);            \
      ROW_BODY                                                                 \
    }                                                                          \
  } while (0)

/* ---- fill
 * --------------------------------------------------------------------- */

static sl_status fill_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  return source_infer(at, n_in, SL_DTYPE_F32, SL__DT_ALL, out);
}

static sl_status fill_cpu(const sl__kernel_ctx *k) {
  sl_dtype dt = k->out_meta[0].dtype;
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n == 0) return SL_OK;
  size_t es = sl_dtype_size(dt);
  /* Convert once (with the library's saturating rules), then repeat the
   * bytes. */
  unsigned char one[8];
  sl_store_element(dt, one, 0, attr_num(k->attrs, "value", 0));
  char *o = k->out[0];
  switch (es) {
  case 1: memset(o, one[0], (size_t)n); break;
  case 2: {
    uint16_t v;
    memcpy(&v, one, 2);
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)o)[i] = v;
    break;
  }
  case 4: {
    uint32_t v;
    memcpy(&v, one, 4);
    for (int64_t i = 0; i < n; i++)
      ((uint32_t *)o)[i] = v;
    break;
  }
  default: {
    uint64_t v;
    memcpy(&v, one, 8);
    for (int64_t i = 0; i < n; i++)
      ((uint64_t *)o)[i] = v;
  }
  }
  return SL_OK;
}

const sl__op_def sl__op_fill = {
    .name = "fill",
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .infer = fill_infer,
    .signatures = source_sigs,
    .cpu = fill_cpu,
};

/* ---- random_uniform
 * ------------------------------------------------------------ */

static sl_status uniform_infer(const sl__attrs *at, int n_in,
                               const sl__meta *in, sl__meta *out) {
  SL_CHECK(source_infer(at, n_in, SL_DTYPE_F32, SL__DT_FLOAT, out));
  double lo = attr_num(at, "low", 0), hi = attr_num(at, "high", 1);
  if (!(isfinite(lo) && isfinite(hi) && lo <= hi))
    return sl__fail(SL_EINVAL, "low %g and high %g: need finite low <= high",
                    lo, hi);
  return SL_OK;
}

static sl_status uniform_cpu(const sl__kernel_ctx *k) {
  uint64_t key = stream_key(k, false);
  double lo = attr_num(k->attrs, "low", 0), hi = attr_num(k->attrs, "high", 1);
  double w = hi - lo;
  if (k->out_meta[0].dtype == SL_DTYPE_F32) {
    float *o = k->out[0];
    /* [low, high): a rounded value that lands on high steps below it. */
    float top = (float)hi, below_top = nextafterf(top, -INFINITY);
    FOR_ROWS(k, &k->out_slice[0], &k->out_global[0], {
      for (int64_t j = 0; j < n; j++) {
        double u = sl__rand_unit_f64(sl__rand_bits(key, (uint64_t)(g + j)));
        float v = (float)(lo + w * u);
        o[r * n + j] = v >= top && lo < hi ? below_top : v;
      }
    });
  } else {
    double *o = k->out[0];
    FOR_ROWS(k, &k->out_slice[0], &k->out_global[0], {
      for (int64_t j = 0; j < n; j++) {
        double u = sl__rand_unit_f64(sl__rand_bits(key, (uint64_t)(g + j)));
        double v = lo + w * u;
        o[r * n + j] = v >= hi && lo < hi ? nextafter(hi, -INFINITY) : v;
      }
    });
  }
  return SL_OK;
}

const sl__op_def sl__op_random_uniform = {
    .name = "random_uniform",
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .infer = uniform_infer,
    .signatures = source_sigs,
    .cpu = uniform_cpu,
    .per_step = true,
    .by_position = true,
};

/* ---- random_normal
 * ------------------------------------------------------------- */

static sl_status normal_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                              sl__meta *out) {
  SL_CHECK(source_infer(at, n_in, SL_DTYPE_F32, SL__DT_FLOAT, out));
  double mean = attr_num(at, "mean", 0), sd = attr_num(at, "std", 1);
  if (!(isfinite(mean) && isfinite(sd) && sd >= 0))
    return sl__fail(SL_EINVAL, "mean %g, std %g: need finite values, std >= 0",
                    mean, sd);
  return SL_OK;
}

#define NORMAL_ROW(fname, T)                                                   \
  SL__MULTIVERSION(                                                            \
      fname,                                                                   \
      (T * o, int64_t n, uint64_t key, uint64_t g, double mean, double sd),    \
      (o, n, key, g, mean, sd), {                                              \
        for (int64_t j = 0; j < n; j++)                                        \
          o[j] = (T)(mean + sd * sl__normal_at(key, g + (uint64_t)j));         \
      })
NORMAL_ROW(normal_f32, float)
NORMAL_ROW(normal_f64, double)

/* Rows [b, e) of a normal draw, on one member of the device's team (each
 * value depends only on its global index). */
typedef struct normal_run {
  const sl__kernel_ctx *k;
  uint64_t key;
  double mean, sd;
  int64_t n; /* row length */
} normal_run;

static void normal_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const normal_run *a = arg;
  const sl__kernel_ctx *k = a->k;
  for (int64_t r = b; r < e; r++) {
    uint64_t g = (uint64_t)sl__slice_row_global(&k->out_slice[0],
                                                &k->out_global[0], r, NULL);
    if (k->out_meta[0].dtype == SL_DTYPE_F32)
      normal_f32((float *)k->out[0] + r * a->n, a->n, a->key, g, a->mean,
                 a->sd);
    else
      normal_f64((double *)k->out[0] + r * a->n, a->n, a->key, g, a->mean,
                 a->sd);
  }
}

static sl_status normal_cpu(const sl__kernel_ctx *k) {
  if (sl_shape_numel(&k->out_meta[0].shape) == 0) return SL_OK;
  normal_run a = {k, stream_key(k, false), attr_num(k->attrs, "mean", 0),
                  attr_num(k->attrs, "std", 1),
                  sl__shape_len(&k->out_meta[0].shape)};
  /* A normal value costs tens of nanoseconds: parts of 1/16 the grain. */
  sl__team_for(k->team, sl__shape_rows(&k->out_meta[0].shape),
               SL__GRAIN_ELEMS / 16 / a.n + 1, normal_part, &a);
  return SL_OK;
}

const sl__op_def sl__op_random_normal = {
    .name = "random_normal",
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .infer = normal_infer,
    .signatures = source_sigs,
    .cpu = normal_cpu,
    .per_step = true,
    .by_position = true,
};

/* ---- random_int
 * ---------------------------------------------------------------- */

static sl_status int_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(source_infer(at, n_in, SL_DTYPE_I64, SL__DT_INT, out));
  if (!sl__attr_has(at, "low") || !sl__attr_has(at, "high"))
    return sl__fail(SL_EINVAL, "attributes 'low' and 'high' are required");
  int64_t lo = sl__attr_int(at, "low", 0), hi = sl__attr_int(at, "high", 0);
  if (lo >= hi)
    return sl__fail(SL_EINVAL, "empty range [%lld, %lld)", (long long)lo,
                    (long long)hi);
  if (out[0].dtype == SL_DTYPE_I32 && (lo < INT32_MIN || hi - 1 > INT32_MAX))
    return sl__fail(SL_EINVAL, "range [%lld, %lld) does not fit i32",
                    (long long)lo, (long long)hi);
  return SL_OK;
}

static sl_status int_cpu(const sl__kernel_ctx *k) {
  uint64_t key = stream_key(k, false);
  int64_t lo = sl__attr_int(k->attrs, "low", 0);
  uint64_t range = (uint64_t)sl__attr_int(k->attrs, "high", 0) - (uint64_t)lo;
  bool i32 = k->out_meta[0].dtype == SL_DTYPE_I32;
  FOR_ROWS(k, &k->out_slice[0], &k->out_global[0], {
    for (int64_t j = 0; j < n; j++) {
      /* Lemire's multiply-shift: uniform enough for 64 random bits (bias
       * below range / 2^64) and no division. */
      uint64_t b = sl__rand_bits(key, (uint64_t)(g + j));
      uint64_t off = (uint64_t)(((unsigned __int128)b * range) >> 64);
      int64_t v = (int64_t)((uint64_t)lo + off);
      if (i32)
        ((int32_t *)k->out[0])[r * n + j] = (int32_t)v;
      else
        ((int64_t *)k->out[0])[r * n + j] = v;
    }
  });
  return SL_OK;
}

const sl__op_def sl__op_random_int = {
    .name = "random_int",
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .infer = int_infer,
    .signatures = source_sigs,
    .cpu = int_cpu,
    .per_step = true,
    .by_position = true,
};

/* ---- dropout
 * ------------------------------------------------------------------- */

static sl_status dropout_infer(const sl__attrs *at, int n_in,
                               const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype, SL__DT_FLOAT));
  double p = attr_num(at, "p", NAN);
  if (!(p >= 0 && p < 1))
    return sl__fail(SL_EINVAL, "drop probability p = %g not in [0, 1)", p);
  out[0] = in[0];
  return SL_OK;
}

static int dropout_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                        sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  if (n_in != 1) return 0;
  for (int i = 0; i < in[0].shape.ndim; i++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = s->out[0] = sl__S(i);
    sl__sig_commit(&l);
  }
  sl__sbp_sig *s = sl__sig_begin(&l);
  s->in[0] = s->out[0] = sl__P();
  sl__sig_commit(&l);
  return l.n;
}

/* y = x * keep / (1 - p), keep = (u >= p) for u uniform in [0, 1) keyed by
 * (seed, step, global index): the forward and its gradient draw the same
 * mask at the same step. With u = m 2^-53 (m the top 53 random bits) the
 * test is the integer one m >= ceil(p 2^53) (p 2^53 is exact), so the row
 * loop is all integer arithmetic and vectorises (AVX-512 has the 64-bit
 * multiplies SplitMix64 needs). */
#define DROP_ROW(fname, T)                                                     \
  SL__MULTIVERSION(fname,                                                      \
                   (T * o, const T *x, int64_t n, uint64_t key, uint64_t g,    \
                    uint64_t t, T scale),                                      \
                   (o, x, n, key, g, t, scale), {                              \
                     for (int64_t j = 0; j < n; j++) {                         \
                       uint64_t b = sl__rand_bits(key, g + (uint64_t)j);       \
                       o[j] = (b >> 11) >= t ? x[j] * scale : (T)0;            \
                     }                                                         \
                   })
DROP_ROW(drop_f32, float)
DROP_ROW(drop_f64, double)

static sl_status dropout_cpu(const sl__kernel_ctx *k) {
  uint64_t key = stream_key(k, true);
  double p = attr_num(k->attrs, "p", 0);
  uint64_t t = (uint64_t)ceil(p * 0x1.0p53);
  double scale = 1.0 / (1.0 - p);
  bool f32 = k->out_meta[0].dtype == SL_DTYPE_F32;
  FOR_ROWS(k, &k->out_slice[0], &k->out_global[0], {
    if (f32)
      drop_f32((float *)k->out[0] + r * n, (const float *)k->in[0] + r * n, n,
               key, (uint64_t)g, t, (float)scale);
    else
      drop_f64((double *)k->out[0] + r * n, (const double *)k->in[0] + r * n, n,
               key, (uint64_t)g, t, scale);
  });
  return SL_OK;
}

const sl__op_def sl__op_dropout = {
    .name = "dropout",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = dropout_infer,
    .signatures = dropout_sigs,
    .cpu = dropout_cpu,
    .by_position = true,
};

/* dropout's gradient applies the same mask and scale to dy: the same
 * computation, a separate op so plans and traces name it. */
const sl__op_def sl__op_dropout_grad = {
    .name = "dropout_grad",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = dropout_infer,
    .signatures = dropout_sigs,
    .cpu = dropout_cpu,
    .by_position = true,
};
