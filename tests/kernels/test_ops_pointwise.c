/* Pointwise ops against naive references: unary activations and their
 * libm-free f32 math, scalar ops, integer wrap-around, broadcasting
 * arithmetic on every broadcasting pattern (rows, columns, both, scalars,
 * missing dims, empty tensors), the activation gradients (gelu's against
 * a finite difference), and every bad-input message. Randomised inputs
 * print their seed; SLUICE_TEST_SEED replays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/kernel_util.h"
#include "dtype_bits.h"
#include "op_harness.h"

static uint64_t g_seed;

#define SHAPE(...)                                                             \
  oph_shape((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),         \
            (int64_t[]){__VA_ARGS__})
#define SCALAR oph_shape(0, NULL)

static sl_host_tensor *run1(const char *name, const sl__attrs *at,
                            sl_host_tensor *x) {
  sl_host_tensor *out[SL_OP_MAX_OUTPUTS] = {0};
  oph_run(name, at, 1, &x, 0, out);
  return out[0];
}

static sl_host_tensor *run2(const char *name, const sl__attrs *at,
                            sl_host_tensor *a, sl_host_tensor *b) {
  sl_host_tensor *in[2] = {a, b}, *out[SL_OP_MAX_OUTPUTS] = {0};
  oph_run(name, at, 2, in, 0, out);
  return out[0];
}

/* |got - want| <= atol + rtol |want|, NaN matching NaN. */
static void expect_close(const char *what, int64_t i, double got, double want,
                         double atol, double rtol) {
  if (isnan(want) && isnan(got)) return;
  if (got == want) return;
  if (!(fabs(got - want) <= atol + rtol * fabs(want)))
    fail_msg("%s: element %lld: got %.9g, want %.9g", what, (long long)i, got,
             want);
}

/* ---- unary
 * ------------------------------------------------------------------------ */

static double ref_gelu(double x) {
  return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

typedef struct unary_ref {
  const char *op;
  double (*f)(double);
  double lo, hi; /* input range */
} unary_ref;

static double f_relu(double x) { return x > 0 ? x : 0; }
static double f_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double f_square(double x) { return x * x; }
static double f_neg(double x) { return -x; }

static const unary_ref unary_refs[] = {
    {"relu", f_relu, -6, 6},     {"gelu", ref_gelu, -6, 6},
    {"tanh", tanh, -6, 6},       {"sigmoid", f_sigmoid, -20, 20},
    {"square", f_square, -6, 6}, {"sqrt", sqrt, 0, 50},
    {"exp", exp, -20, 20},       {"log", log, 0.125, 50},
    {"neg", f_neg, -6, 6},
};

static void test_unary_against_libm(void **state) {
  sl_rng r = {g_seed};
  const sl_shape shapes[] = {SHAPE(7, 5), SHAPE(13), SCALAR, SHAPE(0, 3),
                             SHAPE(3, 1, 17)};
  for (size_t u = 0; u < SL_ARRAY_LEN(unary_refs); u++)
    for (int f64 = 0; f64 < 2; f64++)
      for (size_t si = 0; si < SL_ARRAY_LEN(shapes); si++) {
        const unary_ref *ur = &unary_refs[u];
        sl_dtype dt = f64 ? SL_DTYPE_F64 : SL_DTYPE_F32;
        sl_host_tensor *x = oph_random(&r, dt, &shapes[si], ur->lo, ur->hi);
        /* Off the 1/8 grid too, where the polynomials must hold up. */
        int64_t n = sl_shape_numel(&shapes[si]);
        for (int64_t i = 0; i < n; i += 2)
          sl_host_tensor_set(x, i,
                             ur->lo + (ur->hi - ur->lo) *
                                          (double)sl__rng_below(&r, 1000003) /
                                          1000003.0);
        sl_host_tensor *y = run1(ur->op, NULL, x);
        assert_true(sl_shape_equal(sl_host_tensor_shape(y), &shapes[si]));
        assert_int_equal(sl_host_tensor_dtype(y), dt);
        for (int64_t i = 0; i < n; i++) {
          double xv = sl_host_tensor_get(x, i);
          /* f32: the input is already rounded; compare with the exact
           * function of that input, to a few f32 ulps. */
          expect_close(ur->op, i, sl_host_tensor_get(y, i), ur->f(xv),
                       f64 ? 1e-15 : 2e-7, f64 ? 1e-14 : 1e-6);
        }
        sl_host_tensor_destroy(x);
        sl_host_tensor_destroy(y);
      }
}

/* The libm-free float exp and tanh across their whole range. */
static void test_fast_math_range(void **state) {
  double worst = 0;
  for (double x = -103.5; x < 88.7; x += 0.00731) {
    float xf = (float)x;
    double want = exp((double)xf);
    double got = sl__expf(xf);
    if (want > 1.2e-38) { /* normal results: relative error */
      double rel = fabs(got - want) / want;
      if (rel > worst) worst = rel;
    } else {
      assert_true(fabs(got - want) <= 2e-45 + 1e-6 * want);
    }
  }
  assert_true(worst < 4.8e-7); /* 4 ulp */
  assert_true(isinf(sl__expf(88.73f)) && sl__expf(88.73f) > 0);
  assert_true(isinf(sl__expf(INFINITY)));
  assert_true(sl__expf(-104.f) == 0.f && sl__expf(-INFINITY) == 0.f);
  assert_true(isnan(sl__expf(NAN)));
  assert_true(sl__expf(0.f) == 1.f);
  for (double x = -12; x < 12; x += 0.000917) {
    float xf = (float)x;
    double want = tanh((double)xf);
    assert_true(fabs(sl__tanhf(xf) - want) <= 1.5e-7 + 1e-6 * fabs(want));
  }
  assert_true(sl__tanhf(INFINITY) == 1.f && sl__tanhf(-INFINITY) == -1.f);
  assert_true(isnan(sl__tanhf(NAN)));
  assert_true(sl__tanhf(1e-30f) == 1e-30f); /* tiny inputs keep precision */
  assert_true(sl__sigmoidf(-200.f) == 0.f && sl__sigmoidf(200.f) == 1.f);
}

static void test_unary_special_values(void **state) {
  sl_shape s = SHAPE(5);
  double v[] = {-INFINITY, -1e30, 0, 1e30, INFINITY};
  sl_host_tensor *x = oph_from(SL_DTYPE_F32, &s, v);
  sl_host_tensor *y = run1("tanh", NULL, x);
  double t[] = {-1, -1, 0, 1, 1};
  for (int i = 0; i < 5; i++)
    assert_true(sl_host_tensor_get(y, i) == t[i]);
  sl_host_tensor_destroy(y);
  y = run1("sigmoid", NULL, x);
  double sg[] = {0, 0, 0.5, 1, 1};
  for (int i = 0; i < 5; i++)
    assert_true(sl_host_tensor_get(y, i) == sg[i]);
  sl_host_tensor_destroy(y);
  y = run1("relu", NULL, x);
  double rl[] = {0, 0, 0, 1e30, INFINITY};
  for (int i = 0; i < 5; i++)
    assert_true(sl_host_tensor_get(y, i) == (double)(float)rl[i]);
  sl_host_tensor_destroy(y);
  y = run1("gelu", NULL, x);
  assert_true(sl_host_tensor_get(y, 2) == 0);
  assert_true(sl_host_tensor_get(y, 3) == (double)(float)1e30);
  assert_true(sl_host_tensor_get(y, 1) == 0); /* -1e30 * 0: -0 */
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(x);
}

/* Integer arithmetic wraps instead of overflowing (UBSan would catch a
 * signed overflow). */
static void test_integer_wrap(void **state) {
  sl_shape s = SHAPE(4);
  sl_host_tensor *x =
      oph_from(SL_DTYPE_I32, &s, (double[]){INT32_MAX, INT32_MIN, -7, 65536});
  sl_host_tensor *y = run1("square", NULL, x);
  assert_true(sl_host_tensor_get(y, 0) == 1); /* (2^31-1)^2 mod 2^32 */
  assert_true(sl_host_tensor_get(y, 1) == 0);
  assert_true(sl_host_tensor_get(y, 2) == 49);
  assert_true(sl_host_tensor_get(y, 3) == 0);
  sl_host_tensor_destroy(y);
  y = run1("neg", NULL, x);
  assert_true(sl_host_tensor_get(y, 1) == INT32_MIN);
  assert_true(sl_host_tensor_get(y, 2) == 7);
  sl_host_tensor_destroy(y);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "value", 1);
  y = run1("scalar_add", &at, x);
  assert_true(sl_host_tensor_get(y, 0) == INT32_MIN);
  assert_true(sl_host_tensor_get(y, 2) == -6);
  sl_host_tensor_destroy(y);
  sl__attrs_set_float(&at, "value", -3);
  y = run1("scalar_mul", &at, x);
  assert_true(sl_host_tensor_get(y, 2) == 21);
  sl_host_tensor_destroy(y);
  y = run1("relu", NULL, x);
  assert_true(sl_host_tensor_get(y, 1) == 0 &&
              sl_host_tensor_get(y, 3) == 65536);
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(x);

  sl_host_tensor *a =
      oph_from(SL_DTYPE_I64, &s, (double[]){9.2233720368547758e18, -5, 3, 0});
  /* INT64_MAX is not a double: set it exactly. */
  int64_t big = INT64_MAX;
  memcpy(sl_host_tensor_data(a), &big, 8);
  sl_host_tensor *b = oph_from(SL_DTYPE_I64, &s, (double[]){1, 5, -4, 0});
  y = run2("add", NULL, a, b);
  int64_t got;
  memcpy(&got, sl_host_tensor_cdata(y), 8);
  assert_true(got == INT64_MIN);
  sl_host_tensor_destroy(y);
  y = run2("mul", NULL, a, b);
  assert_true(sl_host_tensor_get(y, 1) == -25 &&
              sl_host_tensor_get(y, 2) == -12);
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(a);
  sl_host_tensor_destroy(b);
}

static void test_scalar_ops(void **state) {
  sl_rng r = {g_seed + 1};
  sl_shape s = SHAPE(3, 7);
  for (int f64 = 0; f64 < 2; f64++) {
    sl_dtype dt = f64 ? SL_DTYPE_F64 : SL_DTYPE_F32;
    sl_host_tensor *x = oph_random(&r, dt, &s, -4, 4);
    sl__attrs at = {0};
    sl__attrs_set_float(&at, "value", 0.375);
    sl_host_tensor *a = run1("scalar_add", &at, x),
                   *m = run1("scalar_mul", &at, x);
    for (int64_t i = 0; i < 21; i++) {
      double v = sl_host_tensor_get(x, i);
      assert_true(sl_host_tensor_get(a, i) == v + 0.375);
      assert_true(sl_host_tensor_get(m, i) == v * 0.375);
    }
    sl_host_tensor_destroy(a);
    sl_host_tensor_destroy(m);
    sl_host_tensor_destroy(x);
  }
}

static void test_identity_every_dtype(void **state) {
  sl_rng r = {g_seed + 2};
  sl_shape s = SHAPE(5, 3);
  for (int d = 0; d < SL_DTYPE_COUNT; d++) {
    sl_host_tensor *x = oph_random(&r, (sl_dtype)d, &s, -4, 4);
    sl_host_tensor *y = run1("identity", NULL, x);
    assert_int_equal(sl_host_tensor_dtype(y), d);
    assert_memory_equal(sl_host_tensor_cdata(x), sl_host_tensor_cdata(y),
                        sl_host_tensor_nbytes(x));
    sl_host_tensor_destroy(x);
    sl_host_tensor_destroy(y);
  }
}

static void test_unary_errors(void **state) {
  sl__meta i32 = oph_meta(SL_DTYPE_I32, 1, (int64_t[]){3});
  sl__meta f32 = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){3});
  sl__meta two[2] = {f32, f32};
  oph_expect_infer_error("gelu", NULL, 1, &i32,
                         "input 0: dtype i32 not supported (f32, f64)");
  oph_expect_infer_error("sqrt", NULL, 1,
                         (sl__meta[]){oph_meta(SL_DTYPE_F16, 0, NULL)},
                         "dtype f16 not supported");
  oph_expect_infer_error("relu", NULL, 2, two, "2 inputs given, takes 1");
  oph_expect_infer_error("scalar_add", NULL, 1, &f32,
                         "attribute 'value' (a number) missing");
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "value", 0.5);
  oph_expect_infer_error("scalar_mul", &at, 1, &i32,
                         "value 0.5 is not an integer a i32 tensor can hold");
  sl__attrs_set_float(&at, "value", 3e9);
  oph_expect_infer_error("scalar_add", &at, 1, &i32,
                         "value 3e+09 is not an integer");
  sl__attrs_set_ints(&at, "value", 1, (int64_t[]){1});
  oph_expect_infer_error("scalar_add", &at, 1, &f32, "'value' (a number)");
}

/* ---- binary
 * ---------------------------------------------------------------------- */

/* The flat index into x (shape xs) of output element o (shape os) under
 * numpy broadcasting, computed naively. */
static int64_t bcast_index(const sl_shape *os, const sl_shape *xs, int64_t o) {
  int64_t idx = 0, stride = 1;
  for (int d = os->ndim - 1; d >= 0; d--) {
    int64_t c = o % os->dims[d];
    o /= os->dims[d];
    int xd = d - (os->ndim - xs->ndim);
    if (xd < 0) continue;
    if (xs->dims[xd] != 1) idx += c * stride;
    stride *= xs->dims[xd];
  }
  return idx;
}

typedef double (*bin_ref)(double, double);
static double b_add(double a, double b) { return a + b; }
static double b_sub(double a, double b) { return a - b; }
static double b_mul(double a, double b) { return a * b; }
static double b_div(double a, double b) { return a / b; }
static double b_max(double a, double b) { return a > b ? a : b; }

/* Every case on one thread and on a team of 3, whose parts of the larger
 * outputs begin and end inside rows. */
static void test_broadcasting(void **state) {
  sl_rng r = {g_seed + 3};
  sl__team *team;
  assert_int_equal(sl__team_create(3, NULL, "ops", &team), SL_OK);
  struct {
    sl_shape a, b, out;
  } cases[] = {
      {SHAPE(5, 7), SHAPE(5, 7), SHAPE(5, 7)}, /* same shape */
      {SHAPE(5, 7), SHAPE(7), SHAPE(5, 7)},    /* row bias */
      {SHAPE(5, 7), SHAPE(5, 1), SHAPE(5, 7)}, /* column */
      {SHAPE(1, 7), SHAPE(5, 1), SHAPE(5, 7)}, /* outer */
      {SCALAR, SHAPE(3, 4), SHAPE(3, 4)},      /* scalar */
      {SHAPE(2, 1, 4), SHAPE(3, 1), SHAPE(2, 3, 4)},
      {SHAPE(3, 1, 5, 1), SHAPE(4, 1, 6), SHAPE(3, 4, 5, 6)},
      {SHAPE(0, 3), SHAPE(3), SHAPE(0, 3)}, /* empty */
      {SHAPE(4, 0), SHAPE(1), SHAPE(4, 0)},
      {SHAPE(1), SHAPE(0), SHAPE(0)},
      {SCALAR, SCALAR, SCALAR},
      {SHAPE(6, 1000), SHAPE(1000), SHAPE(6, 1000)}, /* vector rows */
      {SHAPE(5, 10007), SHAPE(10007), SHAPE(5, 10007)},
      {SHAPE(7, 3, 2503), SHAPE(3, 1), SHAPE(7, 3, 2503)},
  };
  const char *ops[] = {"add", "sub", "mul", "div", "maximum"};
  bin_ref refs[] = {b_add, b_sub, b_mul, b_div, b_max};
  const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32,
                          SL_DTYPE_I64};
  for (int t = 0; t < 2; t++)
    for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++)
      for (size_t o = 0; o < SL_ARRAY_LEN(ops); o++)
        for (size_t d = 0; d < SL_ARRAY_LEN(dts); d++) {
          if (o == 3 && !sl_dtype_is_float(dts[d])) continue;
          oph_set_team(t ? team : NULL);
          for (int swap = 0; swap < 2; swap++) {
            const sl_shape *sa = swap ? &cases[c].b : &cases[c].a;
            const sl_shape *sb = swap ? &cases[c].a : &cases[c].b;
            sl_host_tensor *a = oph_random(&r, dts[d], sa, -8, 8);
            sl_host_tensor *b = oph_random(&r, dts[d], sb, 0.5, 8);
            sl_host_tensor *y = run2(ops[o], NULL, a, b);
            assert_true(sl_shape_equal(sl_host_tensor_shape(y), &cases[c].out));
            int64_t n = sl_shape_numel(&cases[c].out);
            for (int64_t i = 0; i < n; i++) {
              double av =
                  sl_host_tensor_get(a, bcast_index(&cases[c].out, sa, i));
              double bv =
                  sl_host_tensor_get(b, bcast_index(&cases[c].out, sb, i));
              double want = refs[o](av, bv);
              if (dts[d] == SL_DTYPE_F32) want = (float)want;
              if (sl_host_tensor_get(y, i) != want)
                fail_msg("%s case %zu swap %d %s team %d: element %lld: got "
                         "%.9g, want %.9g",
                         ops[o], c, swap, sl_dtype_name(dts[d]), t ? 3 : 1,
                         (long long)i, sl_host_tensor_get(y, i), want);
            }
            sl_host_tensor_destroy(a);
            sl_host_tensor_destroy(b);
            sl_host_tensor_destroy(y);
          }
        }
  oph_set_team(NULL);
  sl__team_destroy(team);
}

static void test_maximum_nan(void **state) {
  sl_shape s = SHAPE(4);
  sl_host_tensor *a =
      oph_from(SL_DTYPE_F32, &s, (double[]){NAN, 1, 2, -INFINITY});
  sl_host_tensor *b = oph_from(SL_DTYPE_F32, &s, (double[]){1, NAN, 3, -5});
  sl_host_tensor *y = run2("maximum", NULL, a, b);
  assert_true(isnan(sl_host_tensor_get(y, 0)) &&
              isnan(sl_host_tensor_get(y, 1)));
  assert_true(sl_host_tensor_get(y, 2) == 3 && sl_host_tensor_get(y, 3) == -5);
  sl_host_tensor_destroy(a);
  sl_host_tensor_destroy(b);
  sl_host_tensor_destroy(y);
}

static void test_binary_errors(void **state) {
  sl__meta m[2];
  m[0] = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 3});
  m[1] = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){4});
  oph_expect_infer_error(
      "add", NULL, 2, m,
      "shapes [2,3] and [4] do not broadcast (axis 1: 3 vs 4)");
  m[1] = oph_meta(SL_DTYPE_F64, 1, (int64_t[]){3});
  oph_expect_infer_error("mul", NULL, 2, m,
                         "inputs 0 and 1: dtypes f32 and f64 differ");
  m[0] = oph_meta(SL_DTYPE_I32, 1, (int64_t[]){3});
  m[1] = oph_meta(SL_DTYPE_I32, 1, (int64_t[]){3});
  oph_expect_infer_error("div", NULL, 2, m,
                         "input 0: dtype i32 not supported (f32, f64)");
  m[0] = oph_meta(SL_DTYPE_U8, 1, (int64_t[]){3});
  m[1] = oph_meta(SL_DTYPE_U8, 1, (int64_t[]){3});
  oph_expect_infer_error("sub", NULL, 2, m,
                         "dtype u8 not supported (f32, f64, i32, i64)");
  oph_expect_infer_error("add", NULL, 1, m, "1 inputs given, takes 2");
  m[0] = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 3});
  m[1] = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){3});
  oph_expect_infer_error("relu_grad", NULL, 2, m,
                         "shapes [2,3] and [3] differ (no broadcasting)");
}

/* ---- gradients
 * -------------------------------------------------------------------- */

static void test_activation_grads(void **state) {
  sl_rng r = {g_seed + 4};
  const sl_shape shapes[] = {SHAPE(9, 11), SHAPE(0, 4), SCALAR};
  for (size_t si = 0; si < SL_ARRAY_LEN(shapes); si++)
    for (int f64 = 0; f64 < 2; f64++) {
      sl_dtype dt = f64 ? SL_DTYPE_F64 : SL_DTYPE_F32;
      sl_host_tensor *dy = oph_random(&r, dt, &shapes[si], -3, 3);
      sl_host_tensor *x = oph_random(&r, dt, &shapes[si], -5, 5);
      sl_host_tensor *tx = run1("tanh", NULL, x),
                     *sx = run1("sigmoid", NULL, x);
      sl_host_tensor *gr = run2("relu_grad", NULL, dy, x);
      sl_host_tensor *gg = run2("gelu_grad", NULL, dy, x);
      sl_host_tensor *gt = run2("tanh_grad", NULL, dy, tx);
      sl_host_tensor *gs = run2("sigmoid_grad", NULL, dy, sx);
      int64_t n = sl_shape_numel(&shapes[si]);
      double tol = f64 ? 1e-12 : 1e-6;
      for (int64_t i = 0; i < n; i++) {
        double d = sl_host_tensor_get(dy, i), xv = sl_host_tensor_get(x, i);
        double t = sl_host_tensor_get(tx, i), s = sl_host_tensor_get(sx, i);
        expect_close("relu_grad", i, sl_host_tensor_get(gr, i), xv > 0 ? d : 0,
                     0, 0);
        /* gelu's derivative by central differences in double. */
        double h = 1e-5;
        double fd = (ref_gelu(xv + h) - ref_gelu(xv - h)) / (2 * h);
        expect_close("gelu_grad", i, sl_host_tensor_get(gg, i), d * fd,
                     f64 ? 1e-8 : 2e-6, f64 ? 1e-8 : 2e-6);
        expect_close("tanh_grad", i, sl_host_tensor_get(gt, i), d * (1 - t * t),
                     tol, tol);
        expect_close("sigmoid_grad", i, sl_host_tensor_get(gs, i),
                     d * s * (1 - s), tol, tol);
      }
      sl_host_tensor *all[] = {dy, x, tx, sx, gr, gg, gt, gs};
      for (size_t k = 0; k < SL_ARRAY_LEN(all); k++)
        sl_host_tensor_destroy(all[k]);
    }
}

/* ---- instruction-set instances
 * ---------------------------------------------------- */

/* Every hot loop is compiled for SSE, AVX2 and AVX-512 (SL__MULTIVERSION);
 * each instance this CPU runs must give the bits of the SSE one, on row
 * lengths around the vector widths (main loops and tails) and on NaN and
 * infinities. */
static void test_isa_instances_agree(void **state) {
  sl_rng r = {g_seed + 5};
  sl__isa top = sl__isa_force(-1);
  const char *unary[] = {"relu",   "gelu",       "tanh",      "sigmoid",
                         "square", "sqrt",       "exp",       "log",
                         "neg",    "scalar_add", "scalar_mul"};
  const char *binary[] = {"add",       "sub",       "mul",
                          "div",       "maximum",   "relu_grad",
                          "gelu_grad", "tanh_grad", "sigmoid_grad"};
  const char *reduce[] = {"reduce_sum", "reduce_mean", "reduce_max"};
  /* and dropout's integer mask test (random.c) */
  const int64_t lens[] = {1, 7, 8, 15, 31, 32, 33, 67, 1000};
  const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32,
                          SL_DTYPE_I64};
  int checked = 0;
  for (size_t li = 0; li < SL_ARRAY_LEN(lens); li++)
    for (size_t d = 0; d < SL_ARRAY_LEN(dts); d++) {
      sl_shape s = SHAPE(3, lens[li]), row = SHAPE(lens[li]), col = SHAPE(3, 1);
      bool fl = sl_dtype_is_float(dts[d]);
      sl_host_tensor *x = oph_random(&r, dts[d], &s, -9, 9);
      sl_host_tensor *y = oph_random(&r, dts[d], &s, 0.5, 9);
      sl_host_tensor *b = oph_random(&r, dts[d], &row, -9, 9);
      sl_host_tensor *c = oph_random(&r, dts[d], &col, -9, 9);
      if (fl && lens[li] > 5) { /* specials inside the vector part */
        sl_host_tensor_set(x, 1, NAN);
        sl_host_tensor_set(x, 2, INFINITY);
        sl_host_tensor_set(x, 3, -INFINITY);
        sl_host_tensor_set(x, lens[li] + 4, 100);
        sl_host_tensor_set(x, 2 * lens[li] + 5, -100);
      }
      /* (op, inputs, attrs) runs; every one under every instance. */
      for (int k = 0; k < 24; k++) {
        const char *op;
        sl_host_tensor *in[2] = {x, NULL};
        int n_in = 1;
        sl__attrs at = {0};
        if (k < 11) {
          op = unary[k];
          sl__attrs_set_int(&at, "value", 3);
        } else if (k < 20) {
          op = binary[(k - 11) % 9];
          in[1] = (k - 11) % 3 == 0 ? y : (k - 11) % 3 == 1 ? b : c;
          n_in = 2;
          if (strstr(op, "_grad")) in[1] = y;
        } else if (k < 23) {
          op = reduce[k - 20];
          sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){(k + (int)li) % 2});
        } else {
          op = "dropout";
          sl__attrs_set_float(&at, "p", 0.3);
          sl__attrs_set_int(&at, "seed", 5);
        }
        const sl__op_def *def = sl__op_find(op);
        sl__meta m[2];
        for (int i = 0; i < n_in; i++) {
          m[i].dtype = dts[d];
          m[i].shape = *sl_host_tensor_shape(in[i]);
        }
        sl__meta om[SL_OP_MAX_OUTPUTS];
        if (def->infer(&at, n_in, m, om) != SL_OK) continue; /* dtype */
        sl_host_tensor *want[SL_OP_MAX_OUTPUTS] = {0};
        sl__isa_force(SL__ISA_SSE);
        oph_run(op, &at, n_in, in, 0, want);
        for (int isa = SL__ISA_AVX2; isa <= (int)top; isa++) {
          sl_host_tensor *got[SL_OP_MAX_OUTPUTS] = {0};
          assert_int_equal(sl__isa_force(isa), isa);
          oph_run(op, &at, n_in, in, 0, got);
          if (memcmp(sl_host_tensor_cdata(got[0]),
                     sl_host_tensor_cdata(want[0]),
                     sl_host_tensor_nbytes(want[0])) != 0)
            fail_msg("%s %s [3,%lld]: the %s instance differs from sse", op,
                     sl_dtype_name(dts[d]), (long long)lens[li],
                     sl__isa_name((sl__isa)isa));
          sl_host_tensor_destroy(got[0]);
          checked++;
        }
        sl_host_tensor_destroy(want[0]);
      }
      sl_host_tensor_destroy(x);
      sl_host_tensor_destroy(y);
      sl_host_tensor_destroy(b);
      sl_host_tensor_destroy(c);
    }
  sl__isa_force(-1);
  printf("instances above sse on this CPU: %d (up to %s); %d runs compared\n",
         (int)top, sl__isa_name(top), checked);
}

/* half.c's rows on every instruction set the CPU runs, against
 * dtype_bits.h bit for bit: every f16 (NaNs of every payload among them)
 * widened, and f32 values narrowed to f16 and bf16 (ties, subnormals, the
 * edges of the range, infinities, NaNs with low payloads), in blocks long
 * enough for the vector paths with NaNs inside some blocks. */
static void test_half_rows(void **state) {
  enum { N = 65536 };
  static uint16_t h[N], got16[N], want16[N];
  static float f[N], got[N], want[N];
  static const uint32_t edges[] = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
      0xff800123, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0x33000000,
      0x33000001, 0x337fffff, 0x38800000, 0x387fe000, 0x387ff000, 0x3f801000,
      0x3f803000, 0x3f808000, 0x3f818000, 0x00000001, 0x807fffff, 0x7f7fffff};
  uint64_t seed = 12345;
  for (int i = 0; i < N; i++) {
    h[i] = (uint16_t)i;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = i < (int)SL_ARRAY_LEN(edges) ? edges[i]
                 : i % 97 == 5 ? 0x7fc00000u | (uint32_t)(seed >> 60)
                               : (uint32_t)(seed >> 32);
    memcpy(&f[i], &u, sizeof u);
  }
  sl__isa top = sl__isa_force(-1);
  for (int isa = SL__ISA_SSE; isa <= (int)top; isa++) {
    assert_int_equal(sl__isa_force(isa), isa);
    sl__f16_widen(got, h, N);
    for (int i = 0; i < N; i++) {
      float w = sl__f16_to_f32_bits(h[i]);
      if (memcmp(&got[i], &w, 4))
        fail_msg("isa %d: f16 0x%04x widened wrongly", isa, h[i]);
    }
    sl__f16_narrow(got16, f, N);
    for (int i = 0; i < N; i++)
      want16[i] = sl__f16_from_f32(f[i]);
    for (int i = 0; i < N; i++)
      if (got16[i] != want16[i])
        fail_msg("isa %d: f32 %a to f16: 0x%04x, want 0x%04x", isa,
                 (double)f[i], got16[i], want16[i]);
    sl__bf16_narrow(got16, f, N);
    sl__bf16_widen(want, got16, N);
    for (int i = 0; i < N; i++) {
      float w = sl__bf16_to_f32_bits(sl__bf16_from_f32(f[i]));
      if (got16[i] != sl__bf16_from_f32(f[i]) || memcmp(&want[i], &w, 4))
        fail_msg("isa %d: f32 %a to bf16 and back wrong", isa, (double)f[i]);
    }
  }
  sl__isa_force(-1);
}

int main(void) {
  g_seed = oph_seed("ops pointwise");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_against_libm),
      cmocka_unit_test(test_fast_math_range),
      cmocka_unit_test(test_unary_special_values),
      cmocka_unit_test(test_integer_wrap),
      cmocka_unit_test(test_scalar_ops),
      cmocka_unit_test(test_identity_every_dtype),
      cmocka_unit_test(test_unary_errors),
      cmocka_unit_test(test_broadcasting),
      cmocka_unit_test(test_maximum_nan),
      cmocka_unit_test(test_binary_errors),
      cmocka_unit_test(test_activation_grads),
      cmocka_unit_test(test_isa_instances_agree),
      cmocka_unit_test(test_half_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
