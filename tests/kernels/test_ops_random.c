/* fill, the counter-based random ops and dropout: values in range, the
 * moments of large samples, values keyed only by (seed, step, global flat
 * index) (the same numbers whatever the shape, different per seed, per step
 * only when per_step is set), dropout's mask rate, scale and its gradient's
 * identical mask, and every bad-input message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernel_util.h"
#include "op_harness.h"

#define INTS(at, name, ...)                                                    \
  sl__attrs_set_ints(                                                          \
      at, name, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),     \
      (int64_t[]){__VA_ARGS__})

static sl_host_tensor *source(const char *name, const sl__attrs *at,
                              int64_t step) {
  sl_host_tensor *out[SL_OP_MAX_OUTPUTS] = {0};
  oph_run(name, at, 0, NULL, step, out);
  return out[0];
}

static void test_fill(void **state) {
  for (int d = 0; d < SL_DTYPE_COUNT; d++) {
    sl__attrs at = {0};
    INTS(&at, "shape", 3, 5);
    sl__attrs_set_int(&at, "dtype", d);
    sl__attrs_set_float(&at, "value", 2.5);
    sl_host_tensor *y = source("fill", &at, 0);
    double want = sl_dtype_is_float((sl_dtype)d) ? 2.5
                  : d == SL_DTYPE_BOOL           ? 1
                                                 : 2;
    for (int i = 0; i < 15; i++)
      assert_true(sl_host_tensor_get(y, i) == want);
    sl_host_tensor_destroy(y);
  }
  sl__attrs at = {0};
  INTS(&at, "shape", 0, 4);
  sl_host_tensor *y = source("fill", &at, 0); /* f32 zeros of no elements */
  assert_int_equal(sl_host_tensor_nbytes(y), 0);
  sl_host_tensor_destroy(y);
  sl__attrs_set_ints(&at, "shape", 0, NULL);
  sl__attrs_set_int(&at, "value", -7);
  y = source("fill", &at, 0);
  assert_true(sl_host_tensor_get(y, 0) == -7);
  sl_host_tensor_destroy(y);
}

static void test_uniform(void **state) {
  for (int f64 = 0; f64 < 2; f64++) {
    sl__attrs at = {0};
    INTS(&at, "shape", 400, 250);
    sl__attrs_set_int(&at, "dtype", f64 ? SL_DTYPE_F64 : SL_DTYPE_F32);
    sl__attrs_set_float(&at, "low", -2);
    sl__attrs_set_float(&at, "high", 3);
    sl__attrs_set_int(&at, "seed", 11);
    sl_host_tensor *y = source("random_uniform", &at, 0);
    double sum = 0, sq = 0;
    int buckets[10] = {0};
    for (int64_t i = 0; i < 100000; i++) {
      double v = sl_host_tensor_get(y, i);
      assert_true(v >= -2 && v < 3);
      sum += v;
      sq += v * v;
      buckets[(int)((v + 2) * 2)]++;
    }
    double mean = sum / 1e5, var = sq / 1e5 - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.02);
    assert_true(fabs(var - 25.0 / 12) < 0.05);
    for (int b = 0; b < 10; b++)
      assert_true(abs(buckets[b] - 10000) < 500);
    sl_host_tensor_destroy(y);
  }
}

static void test_normal(void **state) {
  sl__attrs at = {0};
  INTS(&at, "shape", 100000);
  sl__attrs_set_float(&at, "mean", 1.5);
  sl__attrs_set_float(&at, "std", 2);
  sl__attrs_set_int(&at, "seed", 5);
  sl_host_tensor *y = source("random_normal", &at, 0);
  double sum = 0, sq = 0, cube = 0;
  int within1 = 0;
  for (int64_t i = 0; i < 100000; i++) {
    double z = (sl_host_tensor_get(y, i) - 1.5) / 2;
    assert_true(isfinite(z));
    sum += z;
    sq += z * z;
    cube += z * z * z;
    within1 += fabs(z) < 1;
  }
  assert_true(fabs(sum / 1e5) < 0.015);
  assert_true(fabs(sq / 1e5 - 1) < 0.02);
  assert_true(fabs(cube / 1e5) < 0.05);
  assert_true(fabs(within1 / 1e5 - 0.6827) < 0.01);
  sl_host_tensor_destroy(y);
}

/* random_normal's own log and cos (kernel_util.h, shared with the CUDA
 * kernel) against libm over the arguments Box-Muller gives them: u1 in
 * (0, 1] and u2 in [0, 1), multiples of 2^-53, from the smallest to the
 * largest; and every instruction-set instance of the kernel gives the
 * same bits. */
static void test_normal_math(void **state) {
  sl_rng r = {7};
  double worst_log = 0, worst_cos = 0;
  for (int i = 0; i < 200000; i++) {
    uint64_t b = sl__rng_next(&r);
    /* spread over every binade: shift away up to 52 leading bits */
    double u = ((double)((b >> 11) >> (i % 53)) + 1.0) * 0x1.0p-53;
    double want = log(u), got = sl__log_pos(u);
    double rel = want != 0 ? fabs(got - want) / fabs(want) : fabs(got);
    worst_log = fmax(worst_log, rel);
    double v = (double)(sl__rng_next(&r) >> 11) * 0x1.0p-53;
    worst_cos = fmax(worst_cos, fabs(sl__cos_2pi(v) - cos(2 * M_PI * v)));
  }
  double edges[] = {0x1.0p-53, 0.5, 0.25, 0.75, 1 - 0x1.0p-53, 0.125};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
    worst_cos =
        fmax(worst_cos, fabs(sl__cos_2pi(edges[i]) - cos(2 * M_PI * edges[i])));
    worst_log = fmax(worst_log, fabs(sl__log_pos(edges[i]) - log(edges[i])) /
                                    fabs(log(edges[i])));
  }
  assert_true(sl__log_pos(1.0) == 0.0);
  assert_true(worst_log < 1e-15);
  assert_true(worst_cos < 1e-15);

  sl__attrs at = {0};
  INTS(&at, "shape", 3, 1001);
  sl__attrs_set_int(&at, "seed", 11);
  sl_host_tensor *ref = NULL;
  for (int isa = SL__ISA_SSE; isa <= SL__ISA_AVX512; isa++) {
    if ((int)sl__isa_force(isa) != isa) continue; /* the CPU lacks it */
    sl_host_tensor *y = source("random_normal", &at, 0);
    if (!ref) {
      ref = y;
      continue;
    }
    assert_memory_equal(sl_host_tensor_data(y), sl_host_tensor_data(ref),
                        3 * 1001 * sizeof(float));
    sl_host_tensor_destroy(y);
  }
  sl__isa_force(-1);
  sl_host_tensor_destroy(ref);
  (void)state;
}

static void test_random_int(void **state) {
  for (int i64 = 0; i64 < 2; i64++) {
    sl__attrs at = {0};
    INTS(&at, "shape", 7, 1000);
    sl__attrs_set_int(&at, "dtype", i64 ? SL_DTYPE_I64 : SL_DTYPE_I32);
    sl__attrs_set_int(&at, "low", -3);
    sl__attrs_set_int(&at, "high", 4);
    sl__attrs_set_int(&at, "seed", 99);
    sl_host_tensor *y = source("random_int", &at, 0);
    int count[7] = {0};
    for (int64_t i = 0; i < 7000; i++) {
      double v = sl_host_tensor_get(y, i);
      assert_true(v >= -3 && v < 4 && v == floor(v));
      count[(int)v + 3]++;
    }
    for (int k = 0; k < 7; k++)
      assert_true(abs(count[k] - 1000) < 130);
    sl_host_tensor_destroy(y);
  }
  /* The whole i64 range is a valid (and huge) range. */
  sl__attrs at = {0};
  INTS(&at, "shape", 64);
  sl__attrs_set_int(&at, "low", INT64_MIN);
  sl__attrs_set_int(&at, "high", INT64_MAX);
  sl_host_tensor *y = source("random_int", &at, 0);
  int negative = 0;
  for (int i = 0; i < 64; i++)
    negative += sl_host_tensor_get(y, i) < 0;
  assert_true(negative > 10 && negative < 54);
  sl_host_tensor_destroy(y);
}

/* Values depend on the global flat index, the seed and (per_step) the step
 * only: the same numbers in any shape. */
static void test_counter_keys(void **state) {
  const char *ops[] = {"random_uniform", "random_normal", "random_int"};
  for (int o = 0; o < 3; o++) {
    sl__attrs a = {0}, b = {0};
    INTS(&a, "shape", 6, 7);
    INTS(&b, "shape", 42);
    if (o == 2) {
      sl__attrs_set_int(&a, "low", 0);
      sl__attrs_set_int(&a, "high", 1000000);
      sl__attrs_set_int(&b, "low", 0);
      sl__attrs_set_int(&b, "high", 1000000);
    }
    sl__attrs_set_int(&a, "seed", 3);
    sl__attrs_set_int(&b, "seed", 3);
    sl_host_tensor *ya = source(ops[o], &a, 0), *yb = source(ops[o], &b, 7);
    assert_memory_equal(sl_host_tensor_cdata(ya), sl_host_tensor_cdata(yb),
                        sl_host_tensor_nbytes(ya));
    /* per_step: step 7 differs from step 0, and is reproducible. */
    sl__attrs_set_int(&b, "per_step", 1);
    sl_host_tensor *yc = source(ops[o], &b, 7), *yd = source(ops[o], &b, 7);
    assert_memory_equal(sl_host_tensor_cdata(yc), sl_host_tensor_cdata(yd),
                        sl_host_tensor_nbytes(yc));
    int same = 0;
    for (int i = 0; i < 42; i++)
      same += sl_host_tensor_get(ya, i) == sl_host_tensor_get(yc, i);
    assert_true(same < 3);
    /* Another seed, other numbers. */
    sl__attrs_set_int(&a, "seed", 4);
    sl_host_tensor *ye = source(ops[o], &a, 0);
    same = 0;
    for (int i = 0; i < 42; i++)
      same += sl_host_tensor_get(ya, i) == sl_host_tensor_get(ye, i);
    assert_true(same < 3);
    sl_host_tensor *all[] = {ya, yb, yc, yd, ye};
    for (int i = 0; i < 5; i++)
      sl_host_tensor_destroy(all[i]);
  }
}

static void test_dropout(void **state) {
  sl_rng r = {17};
  sl_shape s = oph_shape(2, (int64_t[]){100, 1000});
  for (int f64 = 0; f64 < 2; f64++) {
    sl_host_tensor *x =
        oph_random(&r, f64 ? SL_DTYPE_F64 : SL_DTYPE_F32, &s, 1, 4);
    sl__attrs at = {0};
    sl__attrs_set_float(&at, "p", 0.3);
    sl__attrs_set_int(&at, "seed", 8);
    sl_host_tensor *y[2] = {0}, *g[2] = {0}, *y2[2] = {0};
    oph_run("dropout", &at, 1, &x, 4, y);
    oph_run("dropout_grad", &at, 1, &x, 4, g);
    oph_run("dropout", &at, 1, &x, 5, y2);
    int dropped = 0, moved = 0;
    for (int64_t i = 0; i < 100000; i++) {
      double xv = sl_host_tensor_get(x, i), yv = sl_host_tensor_get(y[0], i);
      if (yv == 0) {
        dropped++;
      } else {
        double want = f64 ? xv / 0.7 : (double)((float)xv * (float)(1 / 0.7));
        assert_true(fabs(yv - want) <= 1e-12 * want);
      }
      /* The gradient applies the same mask at the same step. */
      assert_true(sl_host_tensor_get(g[0], i) == yv);
      moved += (sl_host_tensor_get(y2[0], i) == 0) != (yv == 0);
    }
    assert_true(abs(dropped - 30000) < 700);
    assert_true(moved > 30000); /* the next step draws a new mask */
    sl_host_tensor_destroy(y[0]);
    sl_host_tensor_destroy(g[0]);
    sl_host_tensor_destroy(y2[0]);
    /* p = 0 passes x through. */
    sl__attrs_set_float(&at, "p", 0);
    oph_run("dropout", &at, 1, &x, 4, y);
    assert_memory_equal(sl_host_tensor_cdata(x), sl_host_tensor_cdata(y[0]),
                        sl_host_tensor_nbytes(x));
    sl_host_tensor_destroy(y[0]);
    sl_host_tensor_destroy(x);
  }
}

static void test_random_errors(void **state) {
  sl__attrs at = {0};
  oph_expect_infer_error("random_uniform", &at, 0, NULL,
                         "attribute 'shape' (a list of extents) missing");
  INTS(&at, "shape", 2, -1);
  oph_expect_infer_error("fill", &at, 0, NULL,
                         "attribute 'shape': extent -1 is negative");
  INTS(&at, "shape", 2, 3);
  sl__attrs_set_int(&at, "dtype", SL_DTYPE_I32);
  oph_expect_infer_error(
      "random_normal", &at, 0, NULL,
      "attribute 'dtype': dtype i32 not supported (f32, f64)");
  sl__attrs_set_int(&at, "dtype", SL_DTYPE_F32);
  oph_expect_infer_error(
      "random_int", &at, 0, NULL,
      "attribute 'dtype': dtype f32 not supported (i32, i64)");
  sl__attrs_set_float(&at, "low", 2);
  sl__attrs_set_float(&at, "high", 1);
  oph_expect_infer_error("random_uniform", &at, 0, NULL,
                         "low 2 and high 1: need finite low <= high");
  sl__attrs_set_float(&at, "std", -1);
  oph_expect_infer_error("random_normal", &at, 0, NULL,
                         "mean 0, std -1: need finite values, std >= 0");
  sl__attrs ri = {0};
  INTS(&ri, "shape", 2);
  oph_expect_infer_error("random_int", &ri, 0, NULL,
                         "attributes 'low' and 'high' are required");
  sl__attrs_set_int(&ri, "low", 5);
  sl__attrs_set_int(&ri, "high", 5);
  oph_expect_infer_error("random_int", &ri, 0, NULL, "empty range [5, 5)");
  sl__attrs_set_int(&ri, "dtype", SL_DTYPE_I32);
  sl__attrs_set_int(&ri, "high", 1ll << 40);
  oph_expect_infer_error("random_int", &ri, 0, NULL,
                         "range [5, 1099511627776) does not fit i32");
  sl__meta x = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){4});
  oph_expect_infer_error("random_uniform", &at, 1, &x,
                         "1 inputs given, takes 0");
  sl__attrs d = {0};
  oph_expect_infer_error("dropout", &d, 1, &x,
                         "drop probability p = nan not in [0, 1)");
  sl__attrs_set_float(&d, "p", 1);
  oph_expect_infer_error("dropout_grad", &d, 1, &x,
                         "drop probability p = 1 not in [0, 1)");
  sl__meta xi = oph_meta(SL_DTYPE_I64, 1, (int64_t[]){4});
  sl__attrs_set_float(&d, "p", 0.5);
  oph_expect_infer_error("dropout", &d, 1, &xi, "dtype i64 not supported");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fill),       cmocka_unit_test(test_uniform),
      cmocka_unit_test(test_normal),     cmocka_unit_test(test_normal_math),
      cmocka_unit_test(test_random_int), cmocka_unit_test(test_counter_keys),
      cmocka_unit_test(test_dropout),    cmocka_unit_test(test_random_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
