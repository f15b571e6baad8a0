/* Invariance cases for the pointwise op family (kernels/ops_pointwise.def):
 * how to make random valid inputs for each op (see op_harness.h). Shapes
 * have extents up to 5 (so 2, 3 and 4 ranks split them unevenly and the
 * 2x2 mesh leaves some shards empty) and occasionally 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "op_harness.h"

static int below(sl_rng *r, int n) {
  return (int)sl__rng_below(r, (uint64_t)n);
}

static sl_shape rshape(sl_rng *r, int min_nd, int max_nd) {
  return oph_random_shape(r, min_nd + below(r, max_nd - min_nd + 1), 5, 0.06);
}

#define PICK(r, ...)                                                           \
  ((const sl_dtype[]){__VA_ARGS__}[below(                                      \
      r, (int)(sizeof((const sl_dtype[]){__VA_ARGS__}) / sizeof(sl_dtype)))])

/* ---- unary
 * -------------------------------------------------------------------- */

static sl_status unary(sl_rng *r, int *n_in, sl_host_tensor **in, sl_dtype dt,
                       double lo, double hi) {
  sl_shape s = rshape(r, 0, 4);
  in[0] = oph_random(r, dt, &s, lo, hi);
  *n_in = 1;
  return SL_OK;
}

#define UNARY_CASE(fn, DTS, lo, hi)                                            \
  static sl_status fn(sl_rng *r, sl__attrs *at, int *n_in,                     \
                      sl_host_tensor **in) {                                   \
    (void)at;                                                                  \
    return unary(r, n_in, in, PICK DTS, lo, hi);                               \
  }

UNARY_CASE(c_identity,
           (r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_F16, SL_DTYPE_BF16,
            SL_DTYPE_I8, SL_DTYPE_I32, SL_DTYPE_I64, SL_DTYPE_U8,
            SL_DTYPE_BOOL),
           -4, 4)
UNARY_CASE(c_relu, (r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32, SL_DTYPE_I64),
           -4, 4)
UNARY_CASE(c_float, (r, SL_DTYPE_F32, SL_DTYPE_F32, SL_DTYPE_F64), -4, 4)
UNARY_CASE(c_positive, (r, SL_DTYPE_F32, SL_DTYPE_F64), 0.125, 6)
UNARY_CASE(c_numeric,
           (r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32, SL_DTYPE_I64), -4, 4)

static sl_status c_scalar(sl_rng *r, sl__attrs *at, int *n_in,
                          sl_host_tensor **in) {
  sl_dtype dt = PICK(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32, SL_DTYPE_I64);
  /* Negative, zero and positive values (scalar_mul's P(max) signature
   * depends on the sign). */
  double v = (double)(below(r, 9) - 4) / (sl_dtype_is_float(dt) ? 2 : 1);
  if (below(r, 2))
    SL_CHECK(sl__attrs_set_float(at, "value", v));
  else
    SL_CHECK(sl__attrs_set_int(at, "value", (int64_t)v));
  return unary(r, n_in, in, dt, -4, 4);
}

/* ---- binary
 * ------------------------------------------------------------------- */

/* Two shapes that broadcast to a random output shape: each input takes a
 * suffix of the output's dims with some extents set to 1. */
static void broadcast_pair(sl_rng *r, sl_shape *a, sl_shape *b) {
  sl_shape o = rshape(r, 0, 4);
  sl_shape *ab[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    int drop = below(r, 3) == 0 ? below(r, o.ndim + 1) : 0;
    memset(ab[k], 0, sizeof *ab[k]);
    ab[k]->ndim = o.ndim - drop;
    for (int d = 0; d < ab[k]->ndim; d++)
      ab[k]->dims[d] = below(r, 4) == 0 ? 1 : o.dims[d + drop];
  }
}

static sl_status binary(sl_rng *r, int *n_in, sl_host_tensor **in, sl_dtype dt,
                        bool bcast, double blo, double bhi) {
  sl_shape a, b;
  if (bcast) {
    broadcast_pair(r, &a, &b);
  } else {
    a = b = rshape(r, 0, 4);
  }
  in[0] = oph_random(r, dt, &a, -4, 4);
  in[1] = oph_random(r, dt, &b, blo, bhi);
  *n_in = 2;
  return SL_OK;
}

#define BINARY_CASE(fn, DTS, bcast, blo, bhi)                                  \
  static sl_status fn(sl_rng *r, sl__attrs *at, int *n_in,                     \
                      sl_host_tensor **in) {                                   \
    (void)at;                                                                  \
    return binary(r, n_in, in, PICK DTS, bcast, blo, bhi);                     \
  }

BINARY_CASE(c_arith,
            (r, SL_DTYPE_F32, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32,
             SL_DTYPE_I64),
            true, -4, 4)
/* Divisors away from 0. */
BINARY_CASE(c_div, (r, SL_DTYPE_F32, SL_DTYPE_F64), true, 0.25, 4)
BINARY_CASE(c_grad, (r, SL_DTYPE_F32, SL_DTYPE_F64), false, -1, 1)

/* ---- reductions
 * ----------------------------------------------------------------- */

static sl_status reduce_case(sl_rng *r, sl__attrs *at, int *n_in,
                             sl_host_tensor **in, sl_dtype dt) {
  sl_shape s = rshape(r, 0, 4);
  int64_t axes[SL_MAX_DIMS];
  int n = 0;
  /* A random subset of the axes, some written negative; empty = all. */
  for (int d = 0; d < s.ndim; d++)
    if (below(r, 2)) axes[n++] = below(r, 3) == 0 ? d - s.ndim : d;
  if (n || below(r, 2)) SL_CHECK(sl__attrs_set_ints(at, "axes", n, axes));
  SL_CHECK(sl__attrs_set_int(at, "keepdims", below(r, 2)));
  in[0] = oph_random(r, dt, &s, -4, 4);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_reduce_num(sl_rng *r, sl__attrs *at, int *n_in,
                              sl_host_tensor **in) {
  return reduce_case(
      r, at, n_in, in,
      PICK(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32, SL_DTYPE_I64));
}

static sl_status c_reduce_float(sl_rng *r, sl__attrs *at, int *n_in,
                                sl_host_tensor **in) {
  return reduce_case(r, at, n_in, in, PICK(r, SL_DTYPE_F32, SL_DTYPE_F64));
}

/* x and a shape that broadcasts to x's: some leading dims dropped, some
 * others set to 1. */
static sl_status c_sum_like(sl_rng *r, sl__attrs *at, int *n_in,
                            sl_host_tensor **in) {
  sl_shape s = rshape(r, 0, 4);
  int drop = below(r, s.ndim + 1);
  int64_t to[SL_MAX_DIMS];
  for (int d = drop; d < s.ndim; d++)
    to[d - drop] = below(r, 2) ? 1 : s.dims[d];
  SL_CHECK(sl__attrs_set_ints(at, "shape", s.ndim - drop, to));
  in[0] = oph_random(r, PICK(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32), &s,
                     -4, 4);
  *n_in = 1;
  return SL_OK;
}

/* ---- shape ops
 * ------------------------------------------------------------------- */

static sl_dtype any_dtype(sl_rng *r) {
  return PICK(r, SL_DTYPE_F32, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_F16,
              SL_DTYPE_BF16, SL_DTYPE_I8, SL_DTYPE_I32, SL_DTYPE_I64,
              SL_DTYPE_U8, SL_DTYPE_BOOL);
}

/* A new shape for x's elements: adjacent dims merged, even dims split in
 * two, 1s inserted, and sometimes one extent left to -1. Half the shapes
 * have an extent that is a multiple of 4, so the even signatures between a
 * merged or split axis and its parts meet meshes they cut evenly. */
static sl_status c_reshape(sl_rng *r, sl__attrs *at, int *n_in,
                           sl_host_tensor **in) {
  sl_shape s = rshape(r, 0, 4);
  if (s.ndim > 0 && below(r, 2) == 0) s.dims[below(r, s.ndim)] *= 4;
  int64_t t[SL_MAX_DIMS];
  int n = s.ndim;
  memcpy(t, s.dims, sizeof s.dims);
  for (int step = below(r, 4); step > 0; step--) {
    int kind = below(r, 3);
    if (kind == 0 && n >= 2) { /* merge */
      int d = below(r, n - 1);
      t[d] *= t[d + 1];
      memmove(&t[d + 1], &t[d + 2], (size_t)(n - d - 2) * sizeof *t);
      n--;
    } else if (kind == 1 && n >= 1 && n < SL_MAX_DIMS) { /* split */
      int d = below(r, n);
      if (t[d] % 2 == 0 && t[d] > 0) {
        memmove(&t[d + 1], &t[d], (size_t)(n - d) * sizeof *t);
        t[d] = 2;
        t[d + 1] /= 2;
        n++;
      }
    } else if (n < SL_MAX_DIMS) { /* insert a 1 */
      int d = below(r, n + 1);
      memmove(&t[d + 1], &t[d], (size_t)(n - d) * sizeof *t);
      t[d] = 1;
      n++;
    }
  }
  if (n > 0 && below(r, 3) == 0) {
    int d = below(r, n);
    int64_t others = 1;
    for (int i = 0; i < n; i++)
      if (i != d) others *= t[i];
    if (others != 0) t[d] = -1;
  }
  SL_CHECK(sl__attrs_set_ints(at, "shape", n, t));
  in[0] = oph_random(r, any_dtype(r), &s, -4, 4);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_transpose(sl_rng *r, sl__attrs *at, int *n_in,
                             sl_host_tensor **in) {
  sl_shape s = rshape(r, 0, 4);
  int64_t perm[SL_MAX_DIMS];
  for (int i = 0; i < s.ndim; i++)
    perm[i] = i;
  for (int i = s.ndim - 1; i > 0; i--) {
    int j = below(r, i + 1);
    int64_t tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  SL_CHECK(sl__attrs_set_ints(at, "perm", s.ndim, perm));
  in[0] = oph_random(r, any_dtype(r), &s, -4, 4);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_broadcast_to(sl_rng *r, sl__attrs *at, int *n_in,
                                sl_host_tensor **in) {
  sl_shape t = rshape(r, 0, 4), x;
  int drop = below(r, t.ndim + 1);
  memset(&x, 0, sizeof x);
  x.ndim = t.ndim - drop;
  for (int d = 0; d < x.ndim; d++)
    x.dims[d] = below(r, 2) ? 1 : t.dims[d + drop];
  SL_CHECK(sl__attrs_set_ints(at, "shape", t.ndim, t.dims));
  in[0] = oph_random(r, any_dtype(r), &x, -4, 4);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_slice(sl_rng *r, sl__attrs *at, int *n_in,
                         sl_host_tensor **in) {
  sl_shape s = rshape(r, 1, 4);
  int axis = below(r, s.ndim);
  int64_t len = s.dims[axis];
  int64_t a = (int64_t)sl__rng_below(r, (uint64_t)len + 1);
  int64_t b = a + (int64_t)sl__rng_below(r, (uint64_t)(len - a) + 1);
  /* Python-style negative positions now and then. */
  if (below(r, 3) == 0 && a > 0) a -= len;
  if (below(r, 3) == 0 && b > 0 && b < len) b -= len;
  SL_CHECK(sl__attrs_set_int(at, "axis", below(r, 2) ? axis : axis - s.ndim));
  SL_CHECK(sl__attrs_set_int(at, "start", a));
  SL_CHECK(sl__attrs_set_int(at, "end", b));
  in[0] = oph_random(r, any_dtype(r), &s, -4, 4);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_concat(sl_rng *r, sl__attrs *at, int *n_in,
                          sl_host_tensor **in) {
  sl_shape s = rshape(r, 1, 4);
  int axis = below(r, s.ndim);
  int n =
      below(r, 4) == 0 ? 2 + below(r, SL_OP_MAX_INPUTS - 1) : 2 + below(r, 3);
  sl_dtype dt = any_dtype(r);
  for (int i = 0; i < n; i++) {
    sl_shape si = s;
    si.dims[axis] = below(r, 4);
    in[i] = oph_random(r, dt, &si, -4, 4);
  }
  SL_CHECK(sl__attrs_set_int(at, "axis", axis));
  *n_in = n;
  return SL_OK;
}

/* ---- cast, mask
 * ------------------------------------------------------------------ */

static sl_status c_cast(sl_rng *r, sl__attrs *at, int *n_in,
                        sl_host_tensor **in) {
  SL_CHECK(sl__attrs_set_int(at, "dtype", any_dtype(r)));
  /* Rounding each partial part on its own: exact here (the parts are
   * multiples of 1/8 within bf16's and f16's integers). */
  if (below(r, 3) == 0) SL_CHECK(sl__attrs_set_int(at, "partial_rounding", 1));
  sl_shape s = rshape(r, 0, 4);
  /* Integers past the edges of i8/u8 so saturation shows; floats where
   * bf16 still holds the harness's partial parts exactly. */
  sl_dtype from = any_dtype(r);
  bool fl = sl_dtype_is_float(from);
  in[0] = oph_random(r, from, &s, fl ? -16 : -200, fl ? 16 : 300);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_causal_mask(sl_rng *r, sl__attrs *at, int *n_in,
                               sl_host_tensor **in) {
  static const double fills[] = {0, -INFINITY, -1e9, 3.5};
  SL_CHECK(sl__attrs_set_float(at, "fill", fills[below(r, 4)]));
  sl_shape s = rshape(r, 2, 4);
  in[0] = oph_random(r, PICK(r, SL_DTYPE_F32, SL_DTYPE_F64), &s, -4, 4);
  *n_in = 1;
  return SL_OK;
}

/* ---- sources and random ops
 * ---------------------------------------------------------- */

static sl_status source_attrs(sl_rng *r, sl__attrs *at) {
  sl_shape s = rshape(r, 0, 4);
  SL_CHECK(sl__attrs_set_ints(at, "shape", s.ndim, s.dims));
  SL_CHECK(sl__attrs_set_int(at, "seed", (int64_t)sl__rng_next(r)));
  SL_CHECK(sl__attrs_set_int(at, "per_step", below(r, 2)));
  return SL_OK;
}

static sl_status c_fill(sl_rng *r, sl__attrs *at, int *n_in,
                        sl_host_tensor **in) {
  (void)in;
  SL_CHECK(source_attrs(r, at));
  SL_CHECK(sl__attrs_set_int(at, "dtype", any_dtype(r)));
  SL_CHECK(sl__attrs_set_float(at, "value", (double)(below(r, 41) - 20) / 4));
  *n_in = 0;
  return SL_OK;
}

static sl_status c_uniform(sl_rng *r, sl__attrs *at, int *n_in,
                           sl_host_tensor **in) {
  (void)in;
  SL_CHECK(source_attrs(r, at));
  SL_CHECK(sl__attrs_set_int(at, "dtype", PICK(r, SL_DTYPE_F32, SL_DTYPE_F64)));
  double lo = below(r, 7) - 3;
  SL_CHECK(sl__attrs_set_float(at, "low", lo));
  SL_CHECK(sl__attrs_set_float(at, "high", lo + below(r, 5)));
  *n_in = 0;
  return SL_OK;
}

static sl_status c_normal(sl_rng *r, sl__attrs *at, int *n_in,
                          sl_host_tensor **in) {
  (void)in;
  SL_CHECK(source_attrs(r, at));
  SL_CHECK(sl__attrs_set_int(at, "dtype", PICK(r, SL_DTYPE_F32, SL_DTYPE_F64)));
  SL_CHECK(sl__attrs_set_float(at, "mean", below(r, 5) - 2));
  SL_CHECK(sl__attrs_set_float(at, "std", (double)below(r, 5) / 2));
  *n_in = 0;
  return SL_OK;
}

static sl_status c_int(sl_rng *r, sl__attrs *at, int *n_in,
                       sl_host_tensor **in) {
  (void)in;
  SL_CHECK(source_attrs(r, at));
  SL_CHECK(sl__attrs_set_int(at, "dtype", PICK(r, SL_DTYPE_I32, SL_DTYPE_I64)));
  int64_t lo = below(r, 21) - 10;
  SL_CHECK(sl__attrs_set_int(at, "low", lo));
  SL_CHECK(sl__attrs_set_int(at, "high", lo + 1 + below(r, 1000)));
  *n_in = 0;
  return SL_OK;
}

static sl_status c_dropout(sl_rng *r, sl__attrs *at, int *n_in,
                           sl_host_tensor **in) {
  static const double ps[] = {0, 0.25, 0.5, 0.9};
  SL_CHECK(sl__attrs_set_float(at, "p", ps[below(r, 4)]));
  SL_CHECK(sl__attrs_set_int(at, "seed", (int64_t)sl__rng_next(r)));
  return unary(r, n_in, in, PICK(r, SL_DTYPE_F32, SL_DTYPE_F64), -4, 4);
}

/* ---- the table
 * ------------------------------------------------------------------ */

#define EXACT                                                                  \
  { 0, 0 }
/* Exact unless noted: elementwise results do not depend on the layout, and
 * partial parts are multiples of 1/4 (op_harness.h), so their sums and
 * their products with test values are exact. */
static const op_case cases[] = {
    {"identity", c_identity, EXACT, 0},
    {"relu", c_relu, EXACT, 0},
    {"gelu", c_float, EXACT, 0},
    {"tanh", c_float, EXACT, 0},
    {"sigmoid", c_float, EXACT, 0},
    {"square", c_numeric, EXACT, 0},
    {"sqrt", c_positive, EXACT, 0},
    {"exp", c_float, EXACT, 0},
    {"log", c_positive, EXACT, 0},
    {"neg", c_numeric, EXACT, 0},
    {"scalar_add", c_scalar, EXACT, 0},
    {"scalar_mul", c_scalar, EXACT, 0},
    {"add", c_arith, EXACT, 0},
    {"sub", c_arith, EXACT, 0},
    {"mul", c_arith, EXACT, 0},
    /* P parts divided separately round differently from their sum. */
    {"div", c_div, {1e-5, 1e-5}, 0},
    {"maximum", c_arith, EXACT, 0},
    {"relu_grad", c_grad, EXACT, 0},
    /* (P, B -> P): dy's parts times a rounded derivative. */
    {"gelu_grad", c_grad, {1e-5, 1e-5}, 0},
    {"tanh_grad", c_grad, EXACT, 0},
    {"sigmoid_grad", c_grad, EXACT, 0},
    {"reduce_sum", c_reduce_num, EXACT, 0},
    /* Partial means are rounded separately. */
    {"reduce_mean", c_reduce_float, {1e-6, 1e-6}, 0},
    {"reduce_max", c_reduce_num, EXACT, 0},
    {"reduce_sum_like", c_sum_like, EXACT, 0},
    {"reshape", c_reshape, EXACT, 16},
    {"transpose", c_transpose, EXACT, 0},
    {"broadcast_to", c_broadcast_to, EXACT, 0},
    {"slice", c_slice, EXACT, 0},
    {"concat", c_concat, EXACT, 0},
    {"cast", c_cast, EXACT, 16},
    {"causal_mask", c_causal_mask, EXACT, 0},
    {"fill", c_fill, EXACT, 0},
    {"random_uniform", c_uniform, EXACT, 0},
    {"random_normal", c_normal, EXACT, 0},
    {"random_int", c_int, EXACT, 0},
    /* (P -> P): parts scaled by 1/(1-p) separately. */
    {"dropout", c_dropout, {1e-6, 1e-6}, 0},
    {"dropout_grad", c_dropout, {1e-6, 1e-6}, 0},
};

const op_case *op_cases_pointwise(int *n) {
  *n = (int)SL_ARRAY_LEN(cases);
  return cases;
}
