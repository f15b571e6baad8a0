/* Invariance cases for the pointwise op family (kernels/ops_pointwise.def):
 * how to make random valid inputs for each op (see op_harness.h). Shapes
 * have extents up to 5 (so 2, 3 and 4 ranks split them unevenly and the
 * 2x2 mesh leaves some shards empty) and occasionally 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "op_harness.h"

static int below(sl_rng *r, int n) { return (int)sl__rng_below(r, (uint64_t)n); }

static sl_shape rshape(sl_rng *r, int min_nd, int max_nd) {
  return oph_random_shape(r, min_nd + below(r, max_nd - min_nd + 1), 5, 0.06);
}

#define PICK(r, ...)                                                           \
  ((const sl_dtype[]){__VA_ARGS__}[below(                                      \
      r, (int)(sizeof((const sl_dtype[]){__VA_ARGS__}) / sizeof(sl_dtype)))])

/* ---- unary -------------------------------------------------------------------- */

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
            SL_DTYPE_I8, SL_DTYPE_I32, SL_DTYPE_I64, SL_DTYPE_U8, SL_DTYPE_BOOL),
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

/* ---- the table ------------------------------------------------------------------ */

#define EXACT {0, 0}
/* Reassembly reorders nothing for elementwise ops, but partial parts go
 * through the function separately (exp(a) vs exp(a) exactly), so exact. */
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
};

const op_case *op_cases_pointwise(int *n) {
  *n = (int)SL_ARRAY_LEN(cases);
  return cases;
}
