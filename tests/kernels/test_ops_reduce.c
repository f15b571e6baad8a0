/* Reductions against naive references: every subset of axes of a 3-dim
 * tensor with and without keepdims, negative axes, all axes (empty and
 * absent lists), empty tensors and scalars, integer sums, a long row's
 * accuracy, a mean over a split axis dividing by the global count,
 * reduce_sum_like down to every shape that broadcasts, and every bad-input
 * message. SLUICE_TEST_SEED replays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "op_harness.h"

static uint64_t g_seed;

#define SHAPE(...)                                                             \
  oph_shape((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),         \
            (int64_t[]){__VA_ARGS__})

static sl_host_tensor *run1(const char *name, const sl__attrs *at,
                            sl_host_tensor *x) {
  sl_host_tensor *out[SL_OP_MAX_OUTPUTS] = {0};
  oph_run(name, at, 1, &x, 0, out);
  return out[0];
}

enum { SUM, MEAN, MAX };

/* Naive reduction of x over the axes in mask, into want (kept axes in
 * order), in double. */
static void naive_reduce(const sl_host_tensor *x, unsigned mask, int kind,
                         double *want, int64_t out_n) {
  const sl_shape *s = sl_host_tensor_shape(x);
  int64_t count = 1;
  for (int d = 0; d < s->ndim; d++)
    if (mask & (1u << d)) count *= s->dims[d];
  for (int64_t o = 0; o < out_n; o++)
    want[o] = kind == MAX ? -INFINITY : 0;
  int64_t n = sl_shape_numel(s);
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i, o = 0, ostride = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
      int64_t c = rest % s->dims[d];
      rest /= s->dims[d];
      if (!(mask & (1u << d))) {
        o += c * ostride;
        ostride *= s->dims[d];
      }
    }
    double v = sl_host_tensor_get(x, i);
    want[o] = kind == MAX ? (v > want[o] ? v : want[o]) : want[o] + v;
  }
  if (kind == MEAN)
    for (int64_t o = 0; o < out_n; o++)
      want[o] /= (double)count;
}

static void check_reduce(sl_rng *r, const sl_shape *s, sl_dtype dt,
                         unsigned mask, bool keep, int form) {
  static const char *const names[] = {"reduce_sum", "reduce_mean",
                                      "reduce_max"};
  sl__attrs at = {0};
  int64_t axes[SL_MAX_DIMS];
  int n = 0;
  bool all = mask == (1u << s->ndim) - 1u;
  for (int d = 0; d < s->ndim; d++)
    if (mask & (1u << d)) axes[n++] = form == 1 ? d - s->ndim : d;
  /* form 2 spells "all axes" as an absent list, form 3 as an empty one. */
  if (!(all && form == 2))
    sl__attrs_set_ints(&at, "axes", all && form == 3 ? 0 : n, axes);
  sl__attrs_set_int(&at, "keepdims", keep);
  for (int kind = SUM; kind <= MAX; kind++) {
    if (kind == MEAN && !sl_dtype_is_float(dt)) continue;
    sl_host_tensor *x = oph_random(r, dt, s, -8, 8);
    sl_host_tensor *y = run1(names[kind], &at, x);
    const sl_shape *ys = sl_host_tensor_shape(y);
    /* Output shape: kept dims, reduced ones as 1 with keepdims. */
    int k = 0;
    for (int d = 0; d < s->ndim; d++) {
      if (!(mask & (1u << d)))
        assert_int_equal(ys->dims[k++], s->dims[d]);
      else if (keep)
        assert_int_equal(ys->dims[k++], 1);
    }
    assert_int_equal(ys->ndim, k);
    int64_t on = sl_shape_numel(ys);
    double want[4096];
    assert_true(on <= 4096);
    naive_reduce(x, mask, kind, want, on);
    for (int64_t o = 0; o < on; o++) {
      double got = sl_host_tensor_get(y, o), w = want[o];
      if (kind == MAX && !sl_dtype_is_float(dt) && w == -INFINITY)
        w = dt == SL_DTYPE_I32 ? INT32_MIN : -9223372036854775808.0;
      bool ok = (isnan(got) && isnan(w)) || got == w ||
                fabs(got - w) <= 1e-6 * (1 + fabs(w));
      if (!ok)
        fail_msg("%s %s mask %x keep %d: element %lld got %.9g want %.9g",
                 names[kind], sl_dtype_name(dt), mask, keep, (long long)o, got,
                 w);
    }
    sl_host_tensor_destroy(x);
    sl_host_tensor_destroy(y);
  }
}

static void test_reduce_every_axis_set(void **state) {
  sl_rng r = {g_seed};
  const sl_shape shapes[] = {SHAPE(3, 5, 7), SHAPE(4, 1, 9), SHAPE(0, 4, 2),
                             SHAPE(2, 0, 3)};
  const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32,
                          SL_DTYPE_I64};
  for (size_t si = 0; si < SL_ARRAY_LEN(shapes); si++)
    for (size_t d = 0; d < SL_ARRAY_LEN(dts); d++)
      for (unsigned mask = 1; mask < 8; mask++) /* 0: an empty list = all */
        for (int keep = 0; keep < 2; keep++)
          check_reduce(&r, &shapes[si], dts[d], mask, keep,
                       (int)sl__rng_below(&r, 4));
}

static void test_reduce_scalar_and_vector(void **state) {
  sl_rng r = {g_seed + 1};
  sl_shape sc = oph_shape(0, NULL), v = SHAPE(1000);
  check_reduce(&r, &sc, SL_DTYPE_F32, 0, false, 2);
  check_reduce(&r, &v, SL_DTYPE_F32, 1, false, 0);
  check_reduce(&r, &v, SL_DTYPE_F64, 1, true, 3);
  /* A mean of nothing is NaN, a max of nothing -inf, a sum 0. */
  sl_shape e = SHAPE(0);
  sl_host_tensor *x = oph_random(&r, SL_DTYPE_F32, &e, 0, 0);
  sl_host_tensor *m = run1("reduce_mean", NULL, x),
                 *mx = run1("reduce_max", NULL, x),
                 *s = run1("reduce_sum", NULL, x);
  assert_true(isnan(sl_host_tensor_get(m, 0)));
  assert_true(sl_host_tensor_get(mx, 0) == -INFINITY);
  assert_true(sl_host_tensor_get(s, 0) == 0);
  sl_host_tensor_destroy(x);
  sl_host_tensor_destroy(m);
  sl_host_tensor_destroy(mx);
  sl_host_tensor_destroy(s);
}

/* A long f32 row: the 8-way partial sums stay close to the exact sum. */
static void test_long_row_accuracy(void **state) {
  sl_rng r = {g_seed + 2};
  sl_shape s = SHAPE(3, 100003);
  sl_host_tensor *x = oph_random(&r, SL_DTYPE_F32, &s, -1, 1);
  float *xd = sl_host_tensor_data(x);
  for (int64_t i = 0; i < 300009; i++)
    xd[i] = (float)((double)sl__rng_below(&r, 1u << 24) / (1u << 24)) + 0.1f;
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){1});
  sl_host_tensor *y = run1("reduce_sum", &at, x);
  for (int row = 0; row < 3; row++) {
    double exact = 0;
    for (int64_t j = 0; j < 100003; j++)
      exact += xd[row * 100003 + j];
    assert_true(fabs(sl_host_tensor_get(y, row) - exact) <= 2e-5 * exact);
  }
  sl_host_tensor_destroy(y);
  /* And down the columns (the bias-gradient pattern). */
  sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){0});
  y = run1("reduce_sum", &at, x);
  for (int64_t j = 0; j < 100003; j += 997) {
    double exact = (double)xd[j] + xd[100003 + j] + xd[200006 + j];
    assert_true(fabs(sl_host_tensor_get(y, j) - exact) <= 1e-6 * exact);
  }
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(x);
}

/* The kernel of a rank holding rows [2, 5) of a [7, 3] tensor's mean over
 * axis 0 divides by 7, not 3: the ranks' partial results add up. */
static void test_mean_uses_global_count(void **state) {
  const sl__op_def *op = sl__op_find("reduce_mean");
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[3] = {0};
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){0});
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  k.attrs = &at;
  k.n_in = k.n_out = 1;
  k.in[0] = x;
  k.out[0] = y;
  k.in_meta[0] = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){3, 3});
  k.out_meta[0] = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){3});
  k.in_global[0] = SHAPE(7, 3);
  k.out_global[0] = SHAPE(3);
  k.in_slice[0] = (sl_slice){2, {2, 0}, {3, 3}};
  k.out_slice[0] = (sl_slice){1, {0}, {3}};
  k.out_partial[0] = true;
  assert_int_equal(sl__op_run_cpu(op, &k), SL_OK);
  assert_true(fabsf(y[0] - 12.f / 7) < 1e-6f);
  assert_true(fabsf(y[2] - 18.f / 7) < 1e-6f);
}

static void test_sum_like(void **state) {
  sl_rng r = {g_seed + 3};
  sl_shape x = SHAPE(2, 3, 4);
  struct {
    sl_shape to;
    unsigned mask;
  } cases[] = {
      {SHAPE(3, 1), 1u | 4u}, {SHAPE(4), 1u | 2u},  {oph_shape(0, NULL), 7u},
      {SHAPE(1, 1, 1), 7u},   {SHAPE(2, 3, 4), 0u}, {SHAPE(2, 1, 4), 2u},
      {SHAPE(1, 3, 4), 1u},
  };
  for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
    sl__attrs at = {0};
    sl__attrs_set_ints(&at, "shape", cases[c].to.ndim, cases[c].to.dims);
    sl_host_tensor *t = oph_random(&r, SL_DTYPE_F32, &x, -8, 8);
    sl_host_tensor *y = run1("reduce_sum_like", &at, t);
    assert_true(sl_shape_equal(sl_host_tensor_shape(y), &cases[c].to));
    double want[64];
    naive_reduce(t, cases[c].mask, SUM, want, sl_shape_numel(&cases[c].to));
    for (int64_t o = 0; o < sl_shape_numel(&cases[c].to); o++)
      assert_true(sl_host_tensor_get(y, o) == want[o]);
    sl_host_tensor_destroy(t);
    sl_host_tensor_destroy(y);
  }
}

static void test_reduce_errors(void **state) {
  sl__meta m = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){3, 4});
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){2});
  oph_expect_infer_error("reduce_sum", &at, 1, &m,
                         "axis 2 out of range for a 2-dim input");
  sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){-3});
  oph_expect_infer_error("reduce_max", &at, 1, &m,
                         "axis -3 out of range for a 2-dim input");
  sl__attrs_set_ints(&at, "axes", 2, (int64_t[]){1, -1});
  oph_expect_infer_error("reduce_mean", &at, 1, &m, "axis 1 listed twice");
  sl__attrs_set_int(&at, "axes", 1);
  oph_expect_infer_error("reduce_sum", &at, 1, &m,
                         "attribute 'axes' is not a list of axes");
  sl__meta mi = oph_meta(SL_DTYPE_I32, 1, (int64_t[]){3});
  oph_expect_infer_error("reduce_mean", NULL, 1, &mi,
                         "input 0: dtype i32 not supported (f32, f64)");
  sl__meta mb = oph_meta(SL_DTYPE_BOOL, 1, (int64_t[]){3});
  oph_expect_infer_error("reduce_sum", NULL, 1, &mb,
                         "dtype bool not supported");
  sl__attrs like = {0};
  oph_expect_infer_error("reduce_sum_like", &like, 1, &m,
                         "attribute 'shape' (a list of extents) missing");
  sl__attrs_set_ints(&like, "shape", 1, (int64_t[]){3});
  oph_expect_infer_error("reduce_sum_like", &like, 1, &m,
                         "shape [3] does not broadcast to the input's [3,4]");
  sl__attrs_set_ints(&like, "shape", 3, (int64_t[]){1, 3, 4});
  oph_expect_infer_error("reduce_sum_like", &like, 1, &m,
                         "does not broadcast to the input's");
}

int main(void) {
  g_seed = oph_seed("ops reduce");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_every_axis_set),
      cmocka_unit_test(test_reduce_scalar_and_vector),
      cmocka_unit_test(test_long_row_accuracy),
      cmocka_unit_test(test_mean_uses_global_count),
      cmocka_unit_test(test_sum_like),
      cmocka_unit_test(test_reduce_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
