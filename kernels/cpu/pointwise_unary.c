/* Elementwise ops of one input: identity, activations (relu, gelu, tanh,
 * sigmoid), square, sqrt, exp, log, neg, and the scalar ops scalar_add and
 * scalar_mul.
 *
 * Every one maps S(i) to S(i) (an element's result depends on it alone).
 * Partial inputs are accepted only where the function commutes with the
 * reduction: linear ones (identity, neg, scalar_mul) with P(sum); monotone
 * non-decreasing ones defined on all of [-inf, inf] (relu, tanh, sigmoid,
 * exp, scalar_add, scalar_mul by value > 0) with P(max) and P(min), since
 * f(max p) = max f(p) and f maps the identity -inf/+inf that empty parts
 * hold to f's own bound; neg swaps P(max) and P(min). sqrt and log are
 * monotone but partial parts may leave their domain (a part of a positive
 * maximum can be negative), and gelu and square are not monotone.
 *
 * f32 uses the libm-free sl__expf / sl__tanhf (kernel_util.h) so the loops
 * vectorise; f64 uses libm. Integer arithmetic wraps (computed unsigned: no
 * signed-overflow UB). */
#include <math.h>
#include <string.h>

#include "cpu/kernel_util.h"

typedef void (*un_f32)(float *o, const float *x, int64_t n, double v);
typedef void (*un_f64)(double *o, const double *x, int64_t n, double v);
typedef void (*un_i32)(int32_t *o, const int32_t *x, int64_t n, double v);
typedef void (*un_i64)(int64_t *o, const int64_t *x, int64_t n, double v);

/* How an op treats partial inputs (see the file comment). */
enum {
  PART_NONE = 0,
  PART_SUM = 1,    /* P -> P */
  PART_MONO = 2,   /* P(max) -> P(max), P(min) -> P(min) */
  PART_ANTI = 4,   /* P(max) -> P(min), P(min) -> P(max) */
  PART_MAXMIN = 8, /* identity: P(max)/P(min) through unchanged */
};

typedef struct unary_impl {
  un_f32 f32;
  un_f64 f64;
  un_i32 i32;
  un_i64 i64;
  bool any_dtype;   /* identity: a byte copy, every dtype */
  bool has_value;   /* takes the `value` attribute */
  unsigned part;    /* PART_* */
  bool mono_if_pos; /* scalar_mul: monotone for value > 0 (0 * inf is NaN) */
} unary_impl;

#define LOOP(fname, T, EXPR)                                                   \
  SL__MULTIVERSION(fname, (T * o, const T *x, int64_t n, double v),            \
                   (o, x, n, v), {                                             \
                     (void)v;                                                  \
                     for (int64_t i = 0; i < n; i++) {                         \
                       T a = x[i];                                             \
                       o[i] = (EXPR);                                          \
                     }                                                         \
                   })

/* Wrapping integer arithmetic. */
#define WADD32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define WMUL32(a, b) ((int32_t)((uint32_t)(a) * (uint32_t)(b)))
#define WADD64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define WMUL64(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))

LOOP(relu_f32, float, a > 0 ? a : 0.f)
LOOP(relu_f64, double, a > 0 ? a : 0.0)
LOOP(relu_i32, int32_t, a > 0 ? a : 0)
LOOP(relu_i64, int64_t, a > 0 ? a : 0)
LOOP(gelu_f32, float, sl__geluf(a))
LOOP(gelu_f64, double, sl__gelu(a))
LOOP(tanh_f32, float, sl__tanhf(a))
LOOP(tanh_f64, double, tanh(a))
LOOP(sigmoid_f32, float, sl__sigmoidf(a))
LOOP(sigmoid_f64, double, 1.0 / (1.0 + exp(-a)))
LOOP(square_f32, float, a *a)
LOOP(square_f64, double, a *a)
LOOP(square_i32, int32_t, WMUL32(a, a))
LOOP(square_i64, int64_t, WMUL64(a, a))
LOOP(sqrt_f32, float, sqrtf(a))
LOOP(sqrt_f64, double, sqrt(a))
LOOP(exp_f32, float, sl__expf(a))
LOOP(exp_f64, double, exp(a))
LOOP(log_f32, float, logf(a))
LOOP(log_f64, double, log(a))
LOOP(neg_f32, float, -a)
LOOP(neg_f64, double, -a)
LOOP(neg_i32, int32_t, WMUL32(a, -1))
LOOP(neg_i64, int64_t, WMUL64(a, -1))
LOOP(sadd_f32, float, a + (float)v)
LOOP(sadd_f64, double, a + v)
LOOP(sadd_i32, int32_t, WADD32(a, (int32_t)v))
LOOP(sadd_i64, int64_t, WADD64(a, (int64_t)v))
LOOP(smul_f32, float, a *(float)v)
LOOP(smul_f64, double, a *v)
LOOP(smul_i32, int32_t, WMUL32(a, (int32_t)v))
LOOP(smul_i64, int64_t, WMUL64(a, (int64_t)v))

#define FLOATS(f) .f32 = f##_f32, .f64 = f##_f64
#define NUMERIC(f) FLOATS(f), .i32 = f##_i32, .i64 = f##_i64

static const unary_impl impl_identity = {.any_dtype = true,
                                         .part = PART_SUM | PART_MAXMIN};
static const unary_impl impl_relu = {NUMERIC(relu), .part = PART_MONO};
static const unary_impl impl_gelu = {FLOATS(gelu)};
static const unary_impl impl_tanh = {FLOATS(tanh), .part = PART_MONO};
static const unary_impl impl_sigmoid = {FLOATS(sigmoid), .part = PART_MONO};
static const unary_impl impl_square = {NUMERIC(square)};
static const unary_impl impl_sqrt = {FLOATS(sqrt)};
static const unary_impl impl_exp = {FLOATS(exp), .part = PART_MONO};
static const unary_impl impl_log = {FLOATS(log)};
static const unary_impl impl_neg = {NUMERIC(neg), .part = PART_SUM | PART_ANTI};
static const unary_impl impl_scalar_add = {NUMERIC(sadd), .has_value = true,
                                           .part = PART_MONO};
static const unary_impl impl_scalar_mul = {
    NUMERIC(smul), .has_value = true, .part = PART_SUM, .mono_if_pos = true};

static unsigned impl_dtypes(const unary_impl *u) {
  if (u->any_dtype) return SL__DT_ALL;
  return (u->f32 ? SL__DT(SL_DTYPE_F32) : 0) |
         (u->f64 ? SL__DT(SL_DTYPE_F64) : 0) |
         (u->i32 ? SL__DT(SL_DTYPE_I32) : 0) |
         (u->i64 ? SL__DT(SL_DTYPE_I64) : 0);
}

/* The `value` attribute, given as a float or an int; NaN when absent. */
static double attr_value(const sl__attrs *at) {
  double v = NAN;
  sl__attr_number(at, "value", &v);
  return v;
}

static sl_status unary_infer(const unary_impl *u, const sl__attrs *at, int n_in,
                             const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype, impl_dtypes(u)));
  if (u->has_value) {
    double v;
    if (!sl__attr_number(at, "value", &v))
      return sl__fail(SL_EINVAL, "attribute 'value' (a number) missing");
    if (!sl_dtype_is_float(in[0].dtype)) {
      /* An integer tensor takes an integer value it can hold. */
      double lim =
          in[0].dtype == SL_DTYPE_I32 ? 2147483648.0 : 9223372036854775808.0;
      if (!(v == floor(v) && v >= -lim && v < lim))
        return sl__fail(SL_EINVAL,
                        "value %g is not an integer a %s tensor can hold", v,
                        sl_dtype_name(in[0].dtype));
    }
  }
  out[0] = in[0];
  return SL_OK;
}

static int unary_sigs(const unary_impl *u, const sl__attrs *at, int n_in,
                      const sl__meta *in, sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  for (int i = 0; i < in[0].shape.ndim; i++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = s->out[0] = sl__S(i);
    sl__sig_commit(&l);
  }
  unsigned part = u->part;
  if (u->mono_if_pos && attr_value(at) > 0) part |= PART_MONO;
  static const sl_reduce_op mm[2] = {SL_REDUCE_MAX, SL_REDUCE_MIN};
  if (part & PART_SUM) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = s->out[0] = sl__P();
    sl__sig_commit(&l);
  }
  for (int k = 0; k < 2; k++) {
    if (part & (PART_MONO | PART_MAXMIN)) {
      sl__sbp_sig *s = sl__sig_begin(&l);
      s->in[0] = s->out[0] = sl_sbp_partial(mm[k]);
      sl__sig_commit(&l);
    }
    if (part & PART_ANTI) {
      sl__sbp_sig *s = sl__sig_begin(&l);
      s->in[0] = sl_sbp_partial(mm[k]);
      s->out[0] = sl_sbp_partial(mm[1 - k]);
      sl__sig_commit(&l);
    }
  }
  return l.n;
}

/* Elements [b, e) of one call, on one member of the device's team. */
typedef struct unary_run {
  const unary_impl *u;
  sl_dtype dt;
  void *out;
  const void *in;
  double v;
} unary_run;

static void unary_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const unary_run *r = arg;
  switch (r->dt) {
  case SL_DTYPE_F32:
    r->u->f32((float *)r->out + b, (const float *)r->in + b, e - b, r->v);
    break;
  case SL_DTYPE_F64:
    r->u->f64((double *)r->out + b, (const double *)r->in + b, e - b, r->v);
    break;
  case SL_DTYPE_I32:
    r->u->i32((int32_t *)r->out + b, (const int32_t *)r->in + b, e - b, r->v);
    break;
  case SL_DTYPE_I64:
    r->u->i64((int64_t *)r->out + b, (const int64_t *)r->in + b, e - b, r->v);
    break;
  default: break;
  }
}

static sl_status unary_cpu(const unary_impl *u, const sl__kernel_ctx *k) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n == 0) return SL_OK;
  double v = u->has_value ? attr_value(k->attrs) : 0;
  if (u->any_dtype) {
    if (k->out[0] != k->in[0])
      memcpy(k->out[0], k->in[0],
             (size_t)n * sl_dtype_size(k->in_meta[0].dtype));
    return SL_OK;
  }
  sl_dtype dt = k->in_meta[0].dtype;
  bool has = dt == SL_DTYPE_F32 || dt == SL_DTYPE_F64 ||
             (dt == SL_DTYPE_I32 && u->i32) || (dt == SL_DTYPE_I64 && u->i64);
  if (!has) return sl__check_dtype("input 0", dt, impl_dtypes(u));
  unary_run r = {u, dt, k->out[0], k->in[0], v};
  sl__team_for(k->team, n, SL__GRAIN_ELEMS, unary_part, &r);
  return SL_OK;
}

#define UNARY_OP(NAME, IMPL)                                                   \
  static sl_status NAME##_infer(const sl__attrs *at, int n_in,                 \
                                const sl__meta *in, sl__meta *out) {           \
    return unary_infer(&IMPL, at, n_in, in, out);                              \
  }                                                                            \
  static int NAME##_sigs(const sl__attrs *at, int n_in, const sl__meta *in,    \
                         sl__sbp_sig *sigs, int max) {                         \
    return unary_sigs(&IMPL, at, n_in, in, sigs, max);                         \
  }                                                                            \
  static sl_status NAME##_cpu(const sl__kernel_ctx *k) {                       \
    return unary_cpu(&IMPL, k);                                                \
  }                                                                            \
  const sl__op_def sl__op_##NAME = {                                           \
      .name = #NAME,                                                           \
      .min_in = 1,                                                             \
      .max_in = 1,                                                             \
      .n_out = 1,                                                              \
      .infer = NAME##_infer,                                                   \
      .signatures = NAME##_sigs,                                               \
      .cpu = NAME##_cpu,                                                       \
      .inplace = true,                                                         \
  };

UNARY_OP(identity, impl_identity)
UNARY_OP(relu, impl_relu)
UNARY_OP(gelu, impl_gelu)
UNARY_OP(tanh, impl_tanh)
UNARY_OP(sigmoid, impl_sigmoid)
UNARY_OP(square, impl_square)
UNARY_OP(sqrt, impl_sqrt)
UNARY_OP(exp, impl_exp)
UNARY_OP(log, impl_log)
UNARY_OP(neg, impl_neg)
UNARY_OP(scalar_add, impl_scalar_add)
UNARY_OP(scalar_mul, impl_scalar_mul)
