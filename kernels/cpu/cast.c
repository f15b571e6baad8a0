/* cast(x; dtype): converts between any two dtypes.
 *
 * Rules (those of sl_store_element, so casts and host tensors agree):
 * floats round to nearest even (f16/bf16 through sl_f32_to_f16 and
 * friends); float -> integer truncates toward zero, saturates at the
 * type's range and maps NaN to 0 (an out-of-range C conversion would be
 * undefined behaviour); integer -> integer saturates; anything -> bool is
 * (x != 0); bool -> anything gives 0 or 1.
 *
 * Signatures: S(i) -> S(i) for every axis. Partial values pass only between
 * float dtypes. P(max)/P(min) -> the same for any float pair: rounding is
 * monotone, so the max of rounded parts is the rounded max, and +-inf (what
 * empty parts hold) stays. P -> P only where every source value converts
 * exactly (f16/bf16 -> f32/f64, f32 -> f64, a dtype to itself): then the
 * parts' sum differs from the source's only by the order of the float
 * additions. A narrowing cast (f32 -> bf16) would round every part
 * separately, an error of the target's precision per part, not a reordered
 * sum, so it has no P signature, unless attribute partial_rounding is 1:
 * a gradient reduced in bf16 (sl_optimizer.reduce_dtype) accepts exactly
 * that rounding. Integer targets would saturate or truncate each part,
 * which is not the cast of the sum. */
#include <math.h>
#include <string.h>

#include "cpu/kernel_util.h"

static sl_status target(const sl__attrs *at, sl_dtype *out) {
  if (!sl__attr_has(at, "dtype"))
    return sl__fail(SL_EINVAL, "attribute 'dtype' missing");
  return sl__attr_dtype(at, "dtype", SL_DTYPE_F32, SL__DT_ALL, out);
}

static sl_status cast_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype, SL__DT_ALL));
  out[0].shape = in[0].shape;
  return target(at, &out[0].dtype);
}

static int cast_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                     sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  sl_dtype to;
  if (n_in != 1 || target(at, &to) != SL_OK) return 0;
  for (int i = 0; i < in[0].shape.ndim; i++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = s->out[0] = sl__S(i);
    sl__sig_commit(&l);
  }
  sl_dtype from = in[0].dtype;
  if (sl_dtype_is_float(from) && sl_dtype_is_float(to)) {
    bool exact = from == to || to == SL_DTYPE_F64 ||
                 (to == SL_DTYPE_F32 && from != SL_DTYPE_F64) ||
                 sl__attr_int(at, "partial_rounding", 0) == 1;
    static const sl_reduce_op ops[3] = {SL_REDUCE_SUM, SL_REDUCE_MAX,
                                        SL_REDUCE_MIN};
    for (int k = exact ? 0 : 1; k < 3; k++) {
      sl__sbp_sig *s = sl__sig_begin(&l);
      s->in[0] = s->out[0] = sl_sbp_partial(ops[k]);
      sl__sig_commit(&l);
    }
  }
  return l.n;
}

/* Saturating float -> integer (see the file comment). lo and hi_excl are
 * exact doubles bounding the values that truncate into range. */
static inline int64_t sat_int(double v, double lo, double hi_excl, int64_t imin,
                              int64_t imax) {
  if (v != v) return 0;
  if (v < lo) return imin;
  if (v >= hi_excl) return imax;
  return (int64_t)v;
}

#define LOOP(T_IN, T_OUT, EXPR)                                                \
  do {                                                                         \
    const T_IN *x = k->in[0];                                                  \
    T_OUT *o = k->out[0];                                                      \
    for (int64_t i = 0; i < n; i++) {                                          \
      T_IN a = x[i];                                                           \
      o[i] = (EXPR);                                                           \
    }                                                                          \
  } while (0)

/* The common pairs, as tight loops; the rest goes element by element
 * through double (exact for every source value but i64 beyond 2^53, whose
 * conversion to a narrower type saturates or rounds anyway) or, between
 * integers, through int64. */
static bool cast_fast(const sl__kernel_ctx *k, sl_dtype from, sl_dtype to,
                      int64_t n) {
#define PAIR(a, b) ((int)(a)*SL_DTYPE_COUNT + (int)(b))
  switch (PAIR(from, to)) {
  case PAIR(SL_DTYPE_F32, SL_DTYPE_F64): LOOP(float, double, (double)a); break;
  case PAIR(SL_DTYPE_F64, SL_DTYPE_F32): LOOP(double, float, (float)a); break;
  case PAIR(SL_DTYPE_F32, SL_DTYPE_F16):
  case PAIR(SL_DTYPE_F16, SL_DTYPE_F32):
  case PAIR(SL_DTYPE_F32, SL_DTYPE_BF16):
  case PAIR(SL_DTYPE_BF16, SL_DTYPE_F32):
    sl__half_convert(k->team, from, to, k->out[0], k->in[0], n);
    break;
  case PAIR(SL_DTYPE_I32, SL_DTYPE_F32): LOOP(int32_t, float, (float)a); break;
  case PAIR(SL_DTYPE_I64, SL_DTYPE_F32): LOOP(int64_t, float, (float)a); break;
  case PAIR(SL_DTYPE_I32, SL_DTYPE_F64):
    LOOP(int32_t, double, (double)a);
    break;
  case PAIR(SL_DTYPE_I64, SL_DTYPE_F64):
    LOOP(int64_t, double, (double)a);
    break;
  case PAIR(SL_DTYPE_I32, SL_DTYPE_I64): LOOP(int32_t, int64_t, a); break;
  case PAIR(SL_DTYPE_F32, SL_DTYPE_I32):
    LOOP(
        float, int32_t,
        (int32_t)sat_int(a, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX));
    break;
  case PAIR(SL_DTYPE_F32, SL_DTYPE_I64):
    LOOP(float, int64_t,
         sat_int(a, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN,
                 INT64_MAX));
    break;
  default: return false;
  }
#undef PAIR
  return true;
}

static bool is_int(sl_dtype dt) { return !sl_dtype_is_float(dt); }

static int64_t load_int(sl_dtype dt, const void *buf, int64_t i) {
  switch (dt) {
  case SL_DTYPE_I8: return ((const int8_t *)buf)[i];
  case SL_DTYPE_I32: return ((const int32_t *)buf)[i];
  case SL_DTYPE_I64: return ((const int64_t *)buf)[i];
  case SL_DTYPE_U8: return ((const uint8_t *)buf)[i];
  default: return ((const uint8_t *)buf)[i] != 0; /* bool */
  }
}

static void store_int(sl_dtype dt, void *buf, int64_t i, int64_t v) {
#define SAT(lo, hi) (v < (lo) ? (lo) : (v > (hi) ? (hi) : v))
  switch (dt) {
  case SL_DTYPE_I8: ((int8_t *)buf)[i] = (int8_t)SAT(INT8_MIN, INT8_MAX); break;
  case SL_DTYPE_I32:
    ((int32_t *)buf)[i] = (int32_t)SAT(INT32_MIN, INT32_MAX);
    break;
  case SL_DTYPE_I64: ((int64_t *)buf)[i] = v; break;
  case SL_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)SAT(0, UINT8_MAX); break;
  default: ((uint8_t *)buf)[i] = v != 0; break; /* bool */
  }
#undef SAT
}

static sl_status cast_cpu(const sl__kernel_ctx *k) {
  sl_dtype from = k->in_meta[0].dtype, to = k->out_meta[0].dtype;
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n == 0) return SL_OK;
  if (from == to) {
    memcpy(k->out[0], k->in[0], (size_t)n * sl_dtype_size(from));
    return SL_OK;
  }
  if (cast_fast(k, from, to, n)) return SL_OK;
  if (is_int(from) && is_int(to)) {
    for (int64_t i = 0; i < n; i++)
      store_int(to, k->out[0], i, load_int(from, k->in[0], i));
    return SL_OK;
  }
  if (is_int(from) && to == SL_DTYPE_F32) {
    for (int64_t i = 0; i < n; i++)
      ((float *)k->out[0])[i] = (float)load_int(from, k->in[0], i);
    return SL_OK;
  }
  for (int64_t i = 0; i < n; i++)
    sl_store_element(to, k->out[0], i, sl_load_element(from, k->in[0], i));
  return SL_OK;
}

const sl__op_def sl__op_cast = {
    .name = "cast",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = cast_infer,
    .signatures = cast_sigs,
    .cpu = cast_cpu,
};
