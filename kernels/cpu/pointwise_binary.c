/* Elementwise ops of two inputs: the broadcasting arithmetic add, sub, mul,
 * div, maximum, and the activation gradients relu_grad(dy, y),
 * gelu_grad(dy, x), tanh_grad(dy, y), sigmoid_grad(dy, y) (same shapes, no
 * broadcasting).
 *
 * Broadcasting follows numpy: shapes align at the end, an extent-1 or
 * missing dim repeats. Signatures, per output axis i: where both inputs
 * have the full extent, (S(ia), S(ib) -> S(i)); where one input repeats
 * along i, that input is B and the other S(its axis) -> S(i), since every
 * output slice then needs the whole repeated input. A kernel sees local
 * shards whose shapes broadcast the same way (a B input keeps extent 1).
 * Partial rules: add/sub (P, P -> P); mul (P, B -> P), (B, P -> P); div
 * (P, B -> P) (linear in the numerator only); maximum (P(max), P(max) ->
 * P(max)) and (P(max), B -> P(max)) and mirrored, since max distributes
 * over max; the gradients are linear in dy: (P, B -> P).
 *
 * The inner loops get unit or zero strides from sl__iter (kernel_util.h),
 * so same-shape ops and row-broadcast bias adds run as vectorised rows,
 * compiled for SSE, AVX2 and AVX-512 (SL__MULTIVERSION).
 * Integer arithmetic wraps (computed unsigned). */
#include <math.h>
#include <string.h>

#include "cpu/kernel_util.h"

typedef void (*bin_fn)(void *o, const void *a, const void *b, int64_t n,
                       int64_t sa, int64_t sb);

/* Partial-input rules (see the file comment). */
enum {
  BP_SUM_BOTH = 1,  /* (P, P -> P) */
  BP_SUM_LEFT = 2,  /* (P, B -> P) */
  BP_SUM_RIGHT = 4, /* (B, P -> P) */
  BP_MAX = 8,       /* maximum's P(max) rules */
};

typedef struct binary_impl {
  bin_fn f32, f64, i32, i64;
  bool broadcast; /* numpy broadcasting; false: shapes must be equal */
  unsigned part;
} binary_impl;

/* One row of n outputs; sa/sb are the inputs' element strides (0 repeats
 * an element). The (1,1), (1,0) and (0,1) cases get their own loops so
 * the compiler vectorises them. */
#define BIN(fname, T, EXPR)                                                    \
  SL__MULTIVERSION(                                                            \
      fname##_row,                                                             \
      (T * o, const T *a, const T *b, int64_t n, int64_t sa, int64_t sb),      \
      (o, a, b, n, sa, sb), {                                                  \
        if (sa == 1 && sb == 1) {                                              \
          for (int64_t i = 0; i < n; i++) {                                    \
            T x = a[i], y = b[i];                                              \
            o[i] = (EXPR);                                                     \
          }                                                                    \
        } else if (sa == 1 && sb == 0) {                                       \
          T y = b[0];                                                          \
          for (int64_t i = 0; i < n; i++) {                                    \
            T x = a[i];                                                        \
            o[i] = (EXPR);                                                     \
          }                                                                    \
        } else if (sa == 0 && sb == 1) {                                       \
          T x = a[0];                                                          \
          for (int64_t i = 0; i < n; i++) {                                    \
            T y = b[i];                                                        \
            o[i] = (EXPR);                                                     \
          }                                                                    \
        } else {                                                               \
          for (int64_t i = 0; i < n; i++) {                                    \
            T x = a[i * sa], y = b[i * sb];                                    \
            o[i] = (EXPR);                                                     \
          }                                                                    \
        }                                                                      \
      })                                                                       \
  static void fname(void *o, const void *a, const void *b, int64_t n,          \
                    int64_t sa, int64_t sb) {                                  \
    fname##_row(o, a, b, n, sa, sb);                                           \
  }

#define W32(op, x, y) ((int32_t)((uint32_t)(x)op(uint32_t)(y)))
#define W64(op, x, y) ((int64_t)((uint64_t)(x)op(uint64_t)(y)))
/* Propagates NaN from either side, like numpy's maximum. */
#define MAXIMUM(x, y) ((x) > (y) || (x) != (x) ? (x) : (y))

BIN(add_f32, float, x + y)
BIN(add_f64, double, x + y)
BIN(add_i32, int32_t, W32(+, x, y))
BIN(add_i64, int64_t, W64(+, x, y))
BIN(sub_f32, float, x - y)
BIN(sub_f64, double, x - y)
BIN(sub_i32, int32_t, W32(-, x, y))
BIN(sub_i64, int64_t, W64(-, x, y))
BIN(mul_f32, float, x *y)
BIN(mul_f64, double, x *y)
BIN(mul_i32, int32_t, W32(*, x, y))
BIN(mul_i64, int64_t, W64(*, x, y))
BIN(div_f32, float, x / y)
BIN(div_f64, double, x / y)
BIN(maximum_f32, float, MAXIMUM(x, y))
BIN(maximum_f64, double, MAXIMUM(x, y))
BIN(maximum_i32, int32_t, MAXIMUM(x, y))
BIN(maximum_i64, int64_t, MAXIMUM(x, y))

/* Gradients: x is dy, y the saved forward value (gelu: its input). */
BIN(relu_grad_f32, float, y > 0 ? x : 0.f)
BIN(relu_grad_f64, double, y > 0 ? x : 0.0)
BIN(gelu_grad_f32, float, x *sl__gelu_gradf(y))
BIN(gelu_grad_f64, double, x *sl__gelu_grad(y))
BIN(tanh_grad_f32, float, x *(1.f - y * y))
BIN(tanh_grad_f64, double, x *(1.0 - y * y))
BIN(sigmoid_grad_f32, float, x *y *(1.f - y))
BIN(sigmoid_grad_f64, double, x *y *(1.0 - y))

#define FLOATS(f) .f32 = f##_f32, .f64 = f##_f64
#define NUMERIC(f) FLOATS(f), .i32 = f##_i32, .i64 = f##_i64

static const binary_impl impl_add = {NUMERIC(add), .broadcast = true,
                                     .part = BP_SUM_BOTH};
static const binary_impl impl_sub = {NUMERIC(sub), .broadcast = true,
                                     .part = BP_SUM_BOTH};
static const binary_impl impl_mul = {NUMERIC(mul), .broadcast = true,
                                     .part = BP_SUM_LEFT | BP_SUM_RIGHT};
static const binary_impl impl_div = {FLOATS(div), .broadcast = true,
                                     .part = BP_SUM_LEFT};
static const binary_impl impl_maximum = {NUMERIC(maximum), .broadcast = true,
                                         .part = BP_MAX};
static const binary_impl impl_relu_grad = {FLOATS(relu_grad),
                                           .part = BP_SUM_LEFT};
static const binary_impl impl_gelu_grad = {FLOATS(gelu_grad),
                                           .part = BP_SUM_LEFT};
static const binary_impl impl_tanh_grad = {FLOATS(tanh_grad),
                                           .part = BP_SUM_LEFT};
static const binary_impl impl_sigmoid_grad = {FLOATS(sigmoid_grad),
                                              .part = BP_SUM_LEFT};

static unsigned impl_dtypes(const binary_impl *u) {
  return (u->f32 ? SL__DT(SL_DTYPE_F32) : 0) |
         (u->f64 ? SL__DT(SL_DTYPE_F64) : 0) |
         (u->i32 ? SL__DT(SL_DTYPE_I32) : 0) |
         (u->i64 ? SL__DT(SL_DTYPE_I64) : 0);
}

static bin_fn impl_fn(const binary_impl *u, sl_dtype dt) {
  switch (dt) {
  case SL_DTYPE_F32: return u->f32;
  case SL_DTYPE_F64: return u->f64;
  case SL_DTYPE_I32: return u->i32;
  case SL_DTYPE_I64: return u->i64;
  default: return NULL;
  }
}

static sl_status binary_infer(const binary_impl *u, const sl__attrs *at,
                              int n_in, const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 2, 2));
  SL_CHECK(sl__check_same_dtype(2, in));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype, impl_dtypes(u)));
  out[0].dtype = in[0].dtype;
  if (u->broadcast)
    return sl__broadcast_shapes(&in[0].shape, &in[1].shape, &out[0].shape);
  if (!sl_shape_equal(&in[0].shape, &in[1].shape))
    return sl__fail(SL_EINVAL, "shapes %s and %s differ (no broadcasting)",
                    sl__shape_text(&in[0].shape).s,
                    sl__shape_text(&in[1].shape).s);
  out[0].shape = in[0].shape;
  return SL_OK;
}

static void add_sig(sl__sig_list *l, sl_sbp a, sl_sbp b, sl_sbp o) {
  sl__sbp_sig *s = sl__sig_begin(l);
  s->in[0] = a;
  s->in[1] = b;
  s->out[0] = o;
  sl__sig_commit(l);
}

static int binary_sigs(const binary_impl *u, const sl__attrs *at, int n_in,
                       const sl__meta *in, sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 2, 1);
  sl_shape out;
  if (n_in != 2 ||
      sl__broadcast_shapes(&in[0].shape, &in[1].shape, &out) != SL_OK)
    return 0;
  const sl_shape *a = &in[0].shape, *b = &in[1].shape;
  for (int i = 0; i < out.ndim; i++) {
    int ia = i - (out.ndim - a->ndim), ib = i - (out.ndim - b->ndim);
    bool a_full = ia >= 0 && a->dims[ia] == out.dims[i];
    bool b_full = ib >= 0 && b->dims[ib] == out.dims[i];
    if (a_full && b_full)
      add_sig(&l, sl__S(ia), sl__S(ib), sl__S(i));
    else if (a_full)
      add_sig(&l, sl__S(ia), sl__B(), sl__S(i));
    else if (b_full)
      add_sig(&l, sl__B(), sl__S(ib), sl__S(i));
  }
  if (u->part & BP_SUM_BOTH) add_sig(&l, sl__P(), sl__P(), sl__P());
  if (u->part & BP_SUM_LEFT) add_sig(&l, sl__P(), sl__B(), sl__P());
  if (u->part & BP_SUM_RIGHT) add_sig(&l, sl__B(), sl__P(), sl__P());
  if (u->part & BP_MAX) {
    add_sig(&l, sl__Pmax(), sl__Pmax(), sl__Pmax());
    add_sig(&l, sl__Pmax(), sl__B(), sl__Pmax());
    add_sig(&l, sl__B(), sl__Pmax(), sl__Pmax());
  }
  return l.n;
}

/* Output elements [b, e) of one call (rows of it.len, a part may begin
 * and end inside a row), on one member of the device's team. */
typedef struct binary_run {
  bin_fn fn;
  const sl__iter *it;
  size_t es;
  char *o;
  const char *a, *b;
} binary_run;

static void binary_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const binary_run *r = arg;
  const sl__iter *it = r->it;
  int64_t sa = it->strides[1][it->ndim - 1], sb = it->strides[2][it->ndim - 1];
  sl__iter_pos p;
  sl__iter_seek(it, b / it->len, &p);
  /* The part may begin inside a row (at j); every later row from 0. */
  for (int64_t i = b, j = b % it->len; i < e; j = 0, sl__iter_next(it, &p)) {
    int64_t n = SL_MIN(it->len - j, e - i);
    r->fn(r->o + (size_t)(p.off[0] + j) * r->es,
          r->a + (size_t)(p.off[1] + j * sa) * r->es,
          r->b + (size_t)(p.off[2] + j * sb) * r->es, n, sa, sb);
    i += n;
  }
}

static sl_status binary_cpu(const binary_impl *u, const sl__kernel_ctx *k) {
  sl_dtype dt = k->out_meta[0].dtype;
  bin_fn fn = impl_fn(u, dt);
  if (!fn) return sl__check_dtype("input 0", dt, impl_dtypes(u));
  const sl_shape *shapes[2] = {&k->in_meta[0].shape, &k->in_meta[1].shape};
  if (!sl__broadcasts_to(shapes[0], &k->out_meta[0].shape) ||
      !sl__broadcasts_to(shapes[1], &k->out_meta[0].shape))
    return sl__fail(SL_EINVAL, "local shards %s and %s do not broadcast to %s",
                    sl__shape_text(shapes[0]).s, sl__shape_text(shapes[1]).s,
                    sl__shape_text(&k->out_meta[0].shape).s);
  sl__iter it;
  sl__iter_init(&it, &k->out_meta[0].shape, 2, shapes);
  if (it.empty) return SL_OK;
  binary_run r = {fn, &it, sl_dtype_size(dt), k->out[0], k->in[0], k->in[1]};
  sl__team_for(k->team, it.rows * it.len, SL__GRAIN_ELEMS, binary_part, &r);
  return SL_OK;
}

#define BINARY_OP(NAME, IMPL)                                                  \
  static sl_status NAME##_infer(const sl__attrs *at, int n_in,                 \
                                const sl__meta *in, sl__meta *out) {           \
    return binary_infer(&IMPL, at, n_in, in, out);                             \
  }                                                                            \
  static int NAME##_sigs(const sl__attrs *at, int n_in, const sl__meta *in,    \
                         sl__sbp_sig *sigs, int max) {                         \
    return binary_sigs(&IMPL, at, n_in, in, sigs, max);                        \
  }                                                                            \
  static sl_status NAME##_cpu(const sl__kernel_ctx *k) {                       \
    return binary_cpu(&IMPL, k);                                               \
  }                                                                            \
  const sl__op_def sl__op_##NAME = {                                           \
      .name = #NAME,                                                           \
      .min_in = 2,                                                             \
      .max_in = 2,                                                             \
      .n_out = 1,                                                              \
      .infer = NAME##_infer,                                                   \
      .signatures = NAME##_sigs,                                               \
      .cpu = NAME##_cpu,                                                       \
      .inplace = true,                                                         \
  };

BINARY_OP(add, impl_add)
BINARY_OP(sub, impl_sub)
BINARY_OP(mul, impl_mul)
BINARY_OP(div, impl_div)
BINARY_OP(maximum, impl_maximum)
BINARY_OP(relu_grad, impl_relu_grad)
BINARY_OP(gelu_grad, impl_gelu_grad)
BINARY_OP(tanh_grad, impl_tanh_grad)
BINARY_OP(sigmoid_grad, impl_sigmoid_grad)
