/* Shape ops, cast and causal_mask against naive references: reshape with
 * -1, transposes of every permutation (and a large 2-D one), broadcast_to,
 * slices with negative positions and empty results, concat of many and
 * empty inputs, cast between every pair of dtypes (saturation, NaN,
 * infinities, rounding), causal masks on square and non-square scores, and
 * every bad-input message. SLUICE_TEST_SEED replays. */
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
#define INTS(at, name, ...)                                                    \
  sl__attrs_set_ints(                                                          \
      at, name, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),     \
      (int64_t[]){__VA_ARGS__})

static sl_host_tensor *run1(const char *name, const sl__attrs *at,
                            sl_host_tensor *x) {
  sl_host_tensor *out[SL_OP_MAX_OUTPUTS] = {0};
  oph_run(name, at, 1, &x, 0, out);
  return out[0];
}

/* Coordinates of flat index i in shape s. */
static void coords(const sl_shape *s, int64_t i, int64_t *c) {
  for (int d = s->ndim - 1; d >= 0; d--) {
    c[d] = i % s->dims[d];
    i /= s->dims[d];
  }
}

static int64_t flat(const sl_shape *s, const int64_t *c) {
  int64_t f = 0;
  for (int d = 0; d < s->ndim; d++)
    f = f * s->dims[d] + c[d];
  return f;
}

/* ---- reshape
 * --------------------------------------------------------------------- */

static void test_reshape(void **state) {
  sl_rng r = {g_seed};
  sl_shape s = SHAPE(4, 3, 5);
  sl_host_tensor *x = oph_random(&r, SL_DTYPE_I64, &s, -100, 100);
  sl__attrs at = {0};
  INTS(&at, "shape", 5, -1, 3);
  sl_host_tensor *y = run1("reshape", &at, x);
  sl_shape want = SHAPE(5, 4, 3);
  assert_true(sl_shape_equal(sl_host_tensor_shape(y), &want));
  assert_memory_equal(sl_host_tensor_cdata(x), sl_host_tensor_cdata(y), 60 * 8);
  sl_host_tensor_destroy(y);
  INTS(&at, "shape", 60);
  y = run1("reshape", &at, x);
  assert_int_equal(sl_host_tensor_shape(y)->ndim, 1);
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(x);
  /* Empty and scalar tensors. */
  sl_shape e = SHAPE(0, 3);
  x = oph_random(&r, SL_DTYPE_F32, &e, 0, 1);
  INTS(&at, "shape", 3, 0, 7);
  y = run1("reshape", &at, x);
  assert_int_equal(sl_shape_numel(sl_host_tensor_shape(y)), 0);
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(x);
  sl_shape one = SHAPE(1, 1);
  x = oph_random(&r, SL_DTYPE_F32, &one, 0, 1);
  sl__attrs_set_ints(&at, "shape", 0, NULL);
  y = run1("reshape", &at, x);
  assert_int_equal(sl_host_tensor_shape(y)->ndim, 0);
  assert_true(sl_host_tensor_get(y, 0) == sl_host_tensor_get(x, 0));
  sl_host_tensor_destroy(y);
  sl_host_tensor_destroy(x);

  sl__meta m = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 3});
  INTS(&at, "shape", -1, 2, -1);
  oph_expect_infer_error("reshape", &at, 1, &m,
                         "-1 given twice (dims 0 and 2)");
  INTS(&at, "shape", 4);
  oph_expect_infer_error("reshape", &at, 1, &m,
                         "cannot reshape [2,3] (6 elements) to [4] (4)");
  INTS(&at, "shape", -1, 4);
  oph_expect_infer_error(
      "reshape", &at, 1, &m,
      "cannot reshape [2,3] (6 elements) to a multiple of 4");
  INTS(&at, "shape", 3, -2);
  oph_expect_infer_error("reshape", &at, 1, &m, "extent -2 is negative");
  sl__meta z = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){0, 3});
  INTS(&at, "shape", 0, -1);
  oph_expect_infer_error("reshape", &at, 1, &z,
                         "-1 is ambiguous when another extent is 0");
  oph_expect_infer_error("reshape", NULL, 1, &m, "attribute 'shape'");
}

/* ---- transpose
 * ------------------------------------------------------------------- */

static void check_transpose(sl_rng *r, const sl_shape *s, const int64_t *perm,
                            sl_dtype dt) {
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "perm", s->ndim, perm);
  sl_host_tensor *x = oph_random(r, dt, s, -100, 100);
  sl_host_tensor *y = run1("transpose", &at, x);
  const sl_shape *ys = sl_host_tensor_shape(y);
  for (int j = 0; j < s->ndim; j++)
    assert_int_equal(ys->dims[j], s->dims[perm[j]]);
  int64_t n = sl_shape_numel(s), oc[SL_MAX_DIMS], ic[SL_MAX_DIMS];
  for (int64_t i = 0; i < n; i++) {
    coords(ys, i, oc);
    for (int j = 0; j < s->ndim; j++)
      ic[perm[j]] = oc[j];
    if (sl_host_tensor_get(y, i) != sl_host_tensor_get(x, flat(s, ic)))
      fail_msg("transpose: element %lld differs", (long long)i);
  }
  sl_host_tensor_destroy(x);
  sl_host_tensor_destroy(y);
}

static void test_transpose(void **state) {
  sl_rng r = {g_seed + 1};
  sl_shape s = SHAPE(2, 3, 4, 5);
  /* All 24 permutations of 4 axes, each dtype size. */
  int64_t p[4];
  const sl_dtype dts[] = {SL_DTYPE_U8, SL_DTYPE_F16, SL_DTYPE_F32,
                          SL_DTYPE_I64};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 4; c++)
        for (int d = 0; d < 4; d++) {
          if (a == b || a == c || a == d || b == c || b == d || c == d)
            continue;
          p[0] = a, p[1] = b, p[2] = c, p[3] = d;
          check_transpose(&r, &s, p, dts[(a + b) % 4]);
        }
  sl_shape big = SHAPE(67, 131);
  check_transpose(&r, &big, (int64_t[]){1, 0}, SL_DTYPE_F32);
  /* Attention's head swaps, their rows of 16 contiguous, on one thread and
   * cut over a team of 3. */
  sl__team *team;
  assert_int_equal(sl__team_create(3, NULL, "ops", &team), SL_OK);
  sl_shape heads = SHAPE(8, 37, 4, 16);
  for (int t = 0; t < 2; t++) {
    oph_set_team(t ? team : NULL);
    check_transpose(&r, &heads, (int64_t[]){0, 2, 1, 3}, SL_DTYPE_F32);
    check_transpose(&r, &heads, (int64_t[]){0, 2, 3, 1}, SL_DTYPE_F32);
  }
  oph_set_team(NULL);
  sl__team_destroy(team);
  sl_shape e = SHAPE(3, 0, 2);
  check_transpose(&r, &e, (int64_t[]){2, 0, 1}, SL_DTYPE_F32);
  sl_shape sc = oph_shape(0, NULL);
  check_transpose(&r, &sc, NULL, SL_DTYPE_F64);

  sl__meta m = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 3});
  sl__attrs at = {0};
  INTS(&at, "perm", 0);
  oph_expect_infer_error("transpose", &at, 1, &m,
                         "perm has 1 entries for a 2-dim input");
  INTS(&at, "perm", 1, 1);
  oph_expect_infer_error("transpose", &at, 1, &m, "perm lists axis 1 twice");
  INTS(&at, "perm", 0, 2);
  oph_expect_infer_error("transpose", &at, 1, &m,
                         "perm entry 2 out of range for a 2-dim input");
  oph_expect_infer_error("transpose", NULL, 1, &m, "attribute 'perm'");
}

/* ---- broadcast_to
 * ---------------------------------------------------------------- */

static void test_broadcast_to(void **state) {
  sl_rng r = {g_seed + 2};
  struct {
    sl_shape x, to;
  } cases[] = {
      {SHAPE(3), SHAPE(4, 3)},          {SHAPE(4, 1), SHAPE(4, 5)},
      {SHAPE(1, 1), SHAPE(2, 3, 4)},    {oph_shape(0, NULL), SHAPE(3, 2)},
      {SHAPE(2, 1, 3), SHAPE(2, 5, 3)}, {SHAPE(1), SHAPE(0, 4)},
      {SHAPE(2, 3), SHAPE(2, 3)},
  };
  for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++)
    for (int d = 0; d < SL_DTYPE_COUNT; d++) {
      sl__attrs at = {0};
      sl__attrs_set_ints(&at, "shape", cases[c].to.ndim, cases[c].to.dims);
      sl_host_tensor *x = oph_random(&r, (sl_dtype)d, &cases[c].x, -50, 50);
      sl_host_tensor *y = run1("broadcast_to", &at, x);
      assert_true(sl_shape_equal(sl_host_tensor_shape(y), &cases[c].to));
      int64_t n = sl_shape_numel(&cases[c].to), oc[SL_MAX_DIMS],
              ic[SL_MAX_DIMS];
      int off = cases[c].to.ndim - cases[c].x.ndim;
      for (int64_t i = 0; i < n; i++) {
        coords(&cases[c].to, i, oc);
        for (int k = 0; k < cases[c].x.ndim; k++)
          ic[k] = cases[c].x.dims[k] == 1 ? 0 : oc[k + off];
        assert_true(sl_host_tensor_get(y, i) ==
                    sl_host_tensor_get(x, flat(&cases[c].x, ic)));
      }
      sl_host_tensor_destroy(x);
      sl_host_tensor_destroy(y);
    }
  sl__meta m = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 3});
  sl__attrs at = {0};
  INTS(&at, "shape", 3, 3);
  oph_expect_infer_error("broadcast_to", &at, 1, &m,
                         "cannot broadcast [2,3] to [3,3]");
  INTS(&at, "shape", 3);
  oph_expect_infer_error("broadcast_to", &at, 1, &m,
                         "cannot broadcast [2,3] to [3]");
  INTS(&at, "shape", 2, -3);
  oph_expect_infer_error("broadcast_to", &at, 1, &m, "extent -3 is negative");
}

/* ---- slice, concat
 * --------------------------------------------------------------- */

static void test_slice(void **state) {
  sl_rng r = {g_seed + 3};
  sl_shape s = SHAPE(4, 7, 3);
  struct {
    int64_t axis, start, end, want_start, want_len;
  } cases[] = {
      {1, 2, 5, 2, 3}, {1, -3, 7, 4, 3}, {-1, 0, -1, 0, 2},
      {0, 4, 4, 4, 0}, {2, 0, 3, 0, 3},  {1, -7, -5, 0, 2},
  };
  for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
    sl__attrs at = {0};
    sl__attrs_set_int(&at, "axis", cases[c].axis);
    sl__attrs_set_int(&at, "start", cases[c].start);
    sl__attrs_set_int(&at, "end", cases[c].end);
    sl_host_tensor *x = oph_random(&r, SL_DTYPE_F32, &s, -8, 8);
    sl_host_tensor *y = run1("slice", &at, x);
    int axis = (int)(cases[c].axis < 0 ? cases[c].axis + 3 : cases[c].axis);
    const sl_shape *ys = sl_host_tensor_shape(y);
    assert_int_equal(ys->dims[axis], cases[c].want_len);
    int64_t n = sl_shape_numel(ys), oc[SL_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
      coords(ys, i, oc);
      oc[axis] += cases[c].want_start;
      assert_true(sl_host_tensor_get(y, i) ==
                  sl_host_tensor_get(x, flat(&s, oc)));
    }
    sl_host_tensor_destroy(x);
    sl_host_tensor_destroy(y);
  }
  sl__meta m = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){4, 5});
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "axis", 1);
  oph_expect_infer_error("slice", &at, 1, &m,
                         "attributes 'start' and 'end' are required");
  sl__attrs_set_int(&at, "start", 3);
  sl__attrs_set_int(&at, "end", 6);
  oph_expect_infer_error("slice", &at, 1, &m,
                         "slice [3, 6) out of range for axis 1 of extent 5");
  sl__attrs_set_int(&at, "end", 2);
  oph_expect_infer_error("slice", &at, 1, &m, "slice [3, 2) out of range");
  sl__attrs_set_int(&at, "axis", 2);
  oph_expect_infer_error("slice", &at, 1, &m,
                         "axis 2 out of range for a 2-dim input");
}

static void test_concat(void **state) {
  sl_rng r = {g_seed + 4};
  for (int axis = 0; axis < 3; axis++) {
    int64_t ext[5] = {2, 0, 3, 1, 4};
    sl_host_tensor *in[5];
    int64_t total = 0;
    for (int i = 0; i < 5; i++) {
      sl_shape s = SHAPE(3, 4, 5);
      s.dims[axis] = ext[i];
      total += ext[i];
      in[i] = oph_random(&r, SL_DTYPE_BF16, &s, -8, 8);
    }
    sl__attrs at = {0};
    sl__attrs_set_int(&at, "axis", axis - (axis == 2 ? 3 : 0));
    sl_host_tensor *out[SL_OP_MAX_OUTPUTS] = {0};
    oph_run("concat", &at, 5, in, 0, out);
    const sl_shape *ys = sl_host_tensor_shape(out[0]);
    assert_int_equal(ys->dims[axis], total);
    int64_t n = sl_shape_numel(ys), oc[SL_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
      coords(ys, i, oc);
      int k = 0;
      while (oc[axis] >= ext[k])
        oc[axis] -= ext[k++];
      assert_true(
          sl_host_tensor_get(out[0], i) ==
          sl_host_tensor_get(in[k], flat(sl_host_tensor_shape(in[k]), oc)));
    }
    for (int i = 0; i < 5; i++)
      sl_host_tensor_destroy(in[i]);
    sl_host_tensor_destroy(out[0]);
  }
  sl__meta m[3] = {oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 3}),
                   oph_meta(SL_DTYPE_F32, 2, (int64_t[]){2, 4}),
                   oph_meta(SL_DTYPE_F64, 2, (int64_t[]){2, 3})};
  sl__attrs at = {0};
  oph_expect_infer_error("concat", &at, 2, m,
                         "inputs 0 [2,3] and 1 [2,4] differ outside axis 0");
  oph_expect_infer_error("concat", &at, 3, m,
                         "inputs 0 and 2: dtypes f32 and f64 differ");
  oph_expect_infer_error("concat", &at, 1, m, "1 inputs given, takes 2 to 16");
  sl__meta r1 = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){3});
  sl__meta mix[2] = {m[0], r1};
  sl__attrs_set_int(&at, "axis", 1);
  oph_expect_infer_error("concat", &at, 2, mix, "differ outside axis 1");
}

/* ---- cast
 * ------------------------------------------------------------------------ */

static double cast_one(sl_dtype from, sl_dtype to, double v) {
  sl_shape s = SHAPE(1);
  sl_host_tensor *x = oph_from(from, &s, &v);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "dtype", to);
  sl_host_tensor *y = run1("cast", &at, x);
  double r = sl_host_tensor_get(y, 0);
  sl_host_tensor_destroy(x);
  sl_host_tensor_destroy(y);
  return r;
}

static void test_cast_rules(void **state) {
  /* float -> int: truncation, saturation, NaN to 0. */
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_I32, 2.75) == 2);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_I32, -2.75) == -2);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_I32, 3e9) == INT32_MAX);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_I32, -INFINITY) == INT32_MIN);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_I32, NAN) == 0);
  assert_true(cast_one(SL_DTYPE_F64, SL_DTYPE_U8, -5) == 0);
  assert_true(cast_one(SL_DTYPE_F64, SL_DTYPE_U8, 300) == 255);
  assert_true(cast_one(SL_DTYPE_F16, SL_DTYPE_I8, -200) == -128);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_I64, 1e30) ==
              9223372036854775807.0);
  /* int -> int saturates; anything -> bool is x != 0. */
  assert_true(cast_one(SL_DTYPE_I64, SL_DTYPE_I32, 1e12) == INT32_MAX);
  assert_true(cast_one(SL_DTYPE_I32, SL_DTYPE_U8, -1) == 0);
  assert_true(cast_one(SL_DTYPE_I32, SL_DTYPE_I8, 1000) == 127);
  assert_true(cast_one(SL_DTYPE_I32, SL_DTYPE_BOOL, -3) == 1);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_BOOL, 0.25) == 1);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_BOOL, -0.0) == 0);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_BOOL, NAN) == 1);
  assert_true(cast_one(SL_DTYPE_BOOL, SL_DTYPE_F32, 1) == 1);
  /* Float rounding: to nearest even, overflow to inf. */
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_F16, 65504) == 65504);
  assert_true(isinf(cast_one(SL_DTYPE_F32, SL_DTYPE_F16, 1e5)));
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_F16, 1 + 0x1p-11) == 1);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_F16, 1 + 3 * 0x1p-11) ==
              1 + 0x1p-9);
  assert_true(cast_one(SL_DTYPE_F32, SL_DTYPE_BF16, 1 + 0x1p-8) == 1);
  assert_true(cast_one(SL_DTYPE_F64, SL_DTYPE_F32, 0.1) == (double)0.1f);
  assert_true(isnan(cast_one(SL_DTYPE_F32, SL_DTYPE_BF16, NAN)));
  assert_true(cast_one(SL_DTYPE_I32, SL_DTYPE_F16, 2049) == 2048);
  assert_true(cast_one(SL_DTYPE_U8, SL_DTYPE_F64, 255) == 255);
  /* i64 -> f32 rounds once: 2^24 + 1 to 2^24. */
  assert_true(cast_one(SL_DTYPE_I64, SL_DTYPE_F32, 16777217) == 16777216);
}

/* Every pair: small integers survive exactly, shapes and dtypes follow. */
static void test_cast_every_pair(void **state) {
  sl_shape s = SHAPE(2, 3);
  double v[6] = {0, 1, 2, 3, 4, 5};
  for (int f = 0; f < SL_DTYPE_COUNT; f++)
    for (int t = 0; t < SL_DTYPE_COUNT; t++) {
      sl_host_tensor *x = oph_from((sl_dtype)f, &s, v);
      sl__attrs at = {0};
      sl__attrs_set_int(&at, "dtype", t);
      sl_host_tensor *y = run1("cast", &at, x);
      assert_int_equal(sl_host_tensor_dtype(y), t);
      assert_true(sl_shape_equal(sl_host_tensor_shape(y), &s));
      for (int i = 0; i < 6; i++) {
        double want = sl_host_tensor_get(x, i);
        if (t == SL_DTYPE_BOOL) want = want != 0;
        assert_true(sl_host_tensor_get(y, i) == want);
      }
      sl_host_tensor_destroy(x);
      sl_host_tensor_destroy(y);
    }
  sl__meta m = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){3});
  oph_expect_infer_error("cast", NULL, 1, &m, "attribute 'dtype' missing");
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "dtype", 42);
  oph_expect_infer_error("cast", &at, 1, &m,
                         "attribute 'dtype': 42 is not a dtype");
}

/* ---- causal_mask
 * ----------------------------------------------------------------- */

static void test_causal_mask(void **state) {
  sl_rng r = {g_seed + 5};
  const sl_shape shapes[] = {SHAPE(2, 5, 5), SHAPE(3, 4, 6), SHAPE(6, 2),
                             SHAPE(2, 2, 0, 3), SHAPE(1, 1)};
  const double fills[] = {-INFINITY, 0, -1e9};
  for (size_t si = 0; si < SL_ARRAY_LEN(shapes); si++)
    for (size_t fi = 0; fi < SL_ARRAY_LEN(fills); fi++)
      for (int f64 = 0; f64 < 2; f64++) {
        sl__attrs at = {0};
        sl__attrs_set_float(&at, "fill", fills[fi]);
        sl_host_tensor *x = oph_random(&r, f64 ? SL_DTYPE_F64 : SL_DTYPE_F32,
                                       &shapes[si], -8, 8);
        sl_host_tensor *y = run1("causal_mask", &at, x);
        int nd = shapes[si].ndim;
        int64_t n = sl_shape_numel(&shapes[si]), c[SL_MAX_DIMS];
        for (int64_t i = 0; i < n; i++) {
          coords(&shapes[si], i, c);
          double want = c[nd - 1] > c[nd - 2]
                            ? (f64 ? fills[fi] : (float)fills[fi])
                            : sl_host_tensor_get(x, i);
          assert_true(sl_host_tensor_get(y, i) == want);
        }
        sl_host_tensor_destroy(x);
        sl_host_tensor_destroy(y);
      }
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "fill", 0);
  sl__meta v = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){4});
  oph_expect_infer_error("causal_mask", &at, 1, &v,
                         "input [4] has 1 dims; causal_mask needs [..., q, k]");
  sl__meta i = oph_meta(SL_DTYPE_I32, 2, (int64_t[]){4, 4});
  oph_expect_infer_error("causal_mask", &at, 1, &i, "dtype i32 not supported");
  sl__meta f = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){4, 4});
  oph_expect_infer_error("causal_mask", NULL, 1, &f,
                         "attribute 'fill' (a number) missing");
}

int main(void) {
  g_seed = oph_seed("ops shape");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_broadcast_to),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_cast_rules),
      cmocka_unit_test(test_cast_every_pair),
      cmocka_unit_test(test_causal_mask),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
