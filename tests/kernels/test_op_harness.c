/* The op harness itself: it must catch wrong signatures and wrong kernels
 * (a harness that passes everything would make every invariance test
 * worthless). Deliberately broken ops defined here must fail, and correct
 * ones pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "cpu/kernel_util.h"
#include "op_harness.h"

/* ---- fake ops
 * ------------------------------------------------------------------ */

static sl_status same_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  out[0] = in[0];
  return SL_OK;
}

/* relu declared linear: P -> P is wrong (relu(a) + relu(b) != relu(a+b)). */
static int relu_p_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                       sl__sbp_sig *sigs, int max) {
  sigs[0].in[0] = sigs[0].out[0] = sl_sbp_partial(SL_REDUCE_SUM);
  return 1;
}
static sl_status relu_cpu(const sl__kernel_ctx *k) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  const float *x = k->in[0];
  float *y = k->out[0];
  for (int64_t i = 0; i < n; i++)
    y[i] = x[i] > 0 ? x[i] : 0;
  return SL_OK;
}
static const sl__op_def bad_relu = {.name = "bad_relu",
                                    .min_in = 1,
                                    .max_in = 1,
                                    .n_out = 1,
                                    .infer = same_infer,
                                    .signatures = relu_p_sigs,
                                    .cpu = relu_cpu};

/* Writes each element's index, declared S(0) -> S(0): with_slice uses the
 * global position (correct), without it the local one (wrong). */
static int s0_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                   sl__sbp_sig *sigs, int max) {
  sigs[0].in[0] = sigs[0].out[0] = sl_sbp_split(0);
  return 1;
}
static sl_status index_cpu(const sl__kernel_ctx *k) {
  bool global = sl__attr_int(k->attrs, "global", 0) != 0;
  int64_t rows = sl__shape_rows(&k->out_meta[0].shape);
  int64_t len = sl__shape_len(&k->out_meta[0].shape);
  float *y = k->out[0];
  for (int64_t r = 0; r < rows; r++) {
    int64_t g = global ? sl__slice_row_global(&k->out_slice[0],
                                              &k->out_global[0], r, NULL)
                       : r * len;
    for (int64_t j = 0; j < len; j++)
      y[r * len + j] = (float)(g + j);
  }
  return SL_OK;
}
static const sl__op_def index_op = {.name = "index",
                                    .min_in = 1,
                                    .max_in = 1,
                                    .n_out = 1,
                                    .infer = same_infer,
                                    .signatures = s0_sigs,
                                    .cpu = index_cpu};

/* Forgets the last element of every shard. */
static sl_status lazy_cpu(const sl__kernel_ctx *k) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n > 0) memcpy(k->out[0], k->in[0], (size_t)(n - 1) * sizeof(float));
  return SL_OK;
}
static const sl__op_def lazy_op = {.name = "lazy",
                                   .min_in = 1,
                                   .max_in = 1,
                                   .n_out = 1,
                                   .infer = same_infer,
                                   .signatures = s0_sigs,
                                   .cpu = lazy_cpu};

/* Different values on different calls: B copies disagree. */
static sl_status counter_cpu(const sl__kernel_ctx *k) {
  static float calls;
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  float *y = k->out[0];
  calls += 1;
  for (int64_t i = 0; i < n; i++)
    y[i] = calls;
  return SL_OK;
}
static const sl__op_def counter_op = {.name = "counter",
                                      .min_in = 1,
                                      .max_in = 1,
                                      .n_out = 1,
                                      .infer = same_infer,
                                      .signatures = NULL,
                                      .cpu = counter_cpu};

/* Declares S(3) on a 2-dim tensor. */
static int bad_axis_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                         sl__sbp_sig *sigs, int max) {
  sigs[0].in[0] = sigs[0].out[0] = sl_sbp_split(3);
  return 1;
}
static const sl__op_def bad_axis_op = {.name = "bad_axis",
                                       .min_in = 1,
                                       .max_in = 1,
                                       .n_out = 1,
                                       .infer = same_infer,
                                       .signatures = bad_axis_sigs,
                                       .cpu = relu_cpu};

/* ---- tests
 * ------------------------------------------------------------------- */

static sl_host_tensor *input(sl_rng *r, int64_t d0, int64_t d1) {
  sl_shape s = oph_shape(2, (int64_t[]){d0, d1});
  return oph_random(r, SL_DTYPE_F32, &s, -4, 4);
}

static sl_status check(const sl__op_def *op, const sl__attrs *at,
                       sl_host_tensor *x) {
  sl_host_tensor *ref[1] = {NULL};
  sl_status st = oph_run_single(op, at, 1, &x, 0, ref);
  if (st != SL_OK) return st;
  st = oph_check_all(op, at, 1, &x, ref, 7, 0, (oph_tol){0, 0}, NULL);
  sl_host_tensor_destroy(ref[0]);
  return st;
}

static void test_catches_wrong_partial(void **state) {
  sl_rng r = {1};
  sl_host_tensor *x = input(&r, 5, 3);
  assert_int_equal(check(&bad_relu, NULL, x), SL_EMISMATCH);
  assert_non_null(strstr(sl_last_error(), "op bad_relu on cpu:"));
  assert_non_null(strstr(sl_last_error(), "in P -> out P"));
  /* The correct relu passes on the same data. */
  assert_int_equal(check(sl__op_find("relu"), NULL, x), SL_OK);
  sl_host_tensor_destroy(x);
}

static void test_catches_ignored_slice(void **state) {
  sl_rng r = {2};
  sl_host_tensor *x = input(&r, 5, 3);
  sl__attrs at = {0};
  assert_int_equal(check(&index_op, &at, x), SL_EMISMATCH);
  assert_non_null(strstr(sl_last_error(), "in S(0) -> out S(0)"));
  sl__attrs_set_int(&at, "global", 1);
  assert_int_equal(check(&index_op, &at, x), SL_OK);
  sl_host_tensor_destroy(x);
}

static void test_catches_unwritten_output(void **state) {
  sl_rng r = {3};
  sl_host_tensor *x = input(&r, 5, 3);
  assert_int_equal(check(&lazy_op, NULL, x), SL_EMISMATCH);
  sl_host_tensor_destroy(x);
}

static void test_catches_differing_copies(void **state) {
  sl_rng r = {4};
  sl_host_tensor *x = input(&r, 2, 2);
  sl_host_tensor *ref[1] = {NULL};
  assert_int_equal(oph_run_single(&counter_op, NULL, 1, &x, 0, ref), SL_OK);
  sl_placement *p;
  assert_int_equal(sl_placement_parse("cpu:0-1", &p), SL_OK);
  sl__sbp_sig all_b;
  memset(&all_b, 0, sizeof all_b);
  all_b.in[0] = all_b.out[0] = sl_sbp_broadcast();
  assert_int_equal(oph_check_layout(&counter_op, NULL, 1, &x, ref, p, &all_b, 1,
                                    0, (oph_tol){0, 0}),
                   SL_EMISMATCH);
  assert_non_null(strstr(sl_last_error(), "broadcast copies differ"));
  sl_placement_destroy(p);
  sl_host_tensor_destroy(ref[0]);
  sl_host_tensor_destroy(x);
}

static void test_catches_malformed_signature(void **state) {
  sl_rng r = {5};
  sl_host_tensor *x = input(&r, 2, 2);
  assert_int_equal(check(&bad_axis_op, NULL, x), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "S(3) on a 2-dim tensor"));
  sl_host_tensor_destroy(x);
}

/* P and P(max) on one tensor has no value: reported as unsupported, and
 * every partial kind alone works (identity passes P(max)/P(min) through). */
static void test_mixed_partials_skipped(void **state) {
  sl_rng r = {6};
  sl_host_tensor *x = input(&r, 3, 5);
  sl_host_tensor *ref[1] = {NULL};
  const sl__op_def *id = sl__op_find("identity");
  assert_non_null(id);
  assert_int_equal(oph_run_single(id, NULL, 1, &x, 0, ref), SL_OK);
  sl_placement *p;
  assert_int_equal(sl_placement_parse("cpu:0-3[2,2]", &p), SL_OK);
  sl__sbp_sig s[2];
  memset(s, 0, sizeof s);
  s[0].in[0] = s[0].out[0] = sl_sbp_partial(SL_REDUCE_SUM);
  s[1].in[0] = s[1].out[0] = sl_sbp_partial(SL_REDUCE_MAX);
  assert_int_equal(
      oph_check_layout(id, NULL, 1, &x, ref, p, s, 1, 0, (oph_tol){0, 0}),
      SL_EUNSUPPORTED);
  s[0].in[0] = s[0].out[0] = sl_sbp_partial(SL_REDUCE_MIN);
  s[1].in[0] = s[1].out[0] = sl_sbp_partial(SL_REDUCE_MIN);
  assert_int_equal(
      oph_check_layout(id, NULL, 1, &x, ref, p, s, 1, 0, (oph_tol){0, 0}),
      SL_OK);
  oph_stats st = {0, 0, 0};
  assert_int_equal(
      oph_check_all(id, NULL, 1, &x, ref, 9, 0, (oph_tol){0, 0}, &st), SL_OK);
  assert_true(st.skipped > 0 && st.layouts > 0);
  sl_placement_destroy(p);
  sl_host_tensor_destroy(ref[0]);
  sl_host_tensor_destroy(x);
}

static void test_compare_tolerance(void **state) {
  sl_shape s = oph_shape(2, (int64_t[]){2, 2});
  sl_host_tensor *a = oph_from(SL_DTYPE_F32, &s, (double[]){1, 2, 3, 4});
  sl_host_tensor *b = oph_from(SL_DTYPE_F32, &s, (double[]){1, 2, 3, 4.001});
  assert_int_equal(oph_compare("t", a, b, (oph_tol){0, 0}), SL_EMISMATCH);
  assert_non_null(strstr(sl_last_error(), "element [1,1]"));
  assert_int_equal(oph_compare("t", a, b, (oph_tol){0, 1e-3}), SL_OK);
  assert_int_equal(oph_compare("t", a, b, (oph_tol){2e-3, 0}), SL_OK);
  sl_host_tensor *c = oph_from(SL_DTYPE_F64, &s, (double[]){1, 2, 3, 4});
  assert_int_equal(oph_compare("t", a, c, (oph_tol){1, 1}), SL_EMISMATCH);
  sl_host_tensor_destroy(a);
  sl_host_tensor_destroy(b);
  sl_host_tensor_destroy(c);
}

/* Partial inputs really are split into parts: scalar_add under P -> P
 * (not a signature it declares) adds the constant once per part, so two
 * ranks must show a difference. */
static void test_partial_parts_differ(void **state) {
  sl_rng r = {8};
  sl_host_tensor *x = input(&r, 4, 3);
  sl_host_tensor *ref[1] = {NULL};
  const sl__op_def *op = sl__op_find("scalar_add");
  assert_non_null(op);
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "value", 1.5);
  assert_int_equal(oph_run_single(op, &at, 1, &x, 0, ref), SL_OK);
  sl_placement *p;
  assert_int_equal(sl_placement_parse("cpu:0-1", &p), SL_OK);
  sl__sbp_sig s;
  memset(&s, 0, sizeof s);
  s.in[0] = s.out[0] = sl_sbp_partial(SL_REDUCE_SUM);
  assert_int_equal(
      oph_check_layout(op, &at, 1, &x, ref, p, &s, 1, 0, (oph_tol){0, 0}),
      SL_EMISMATCH);
  sl_placement_destroy(p);
  sl_host_tensor_destroy(ref[0]);
  sl_host_tensor_destroy(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_catches_wrong_partial),
      cmocka_unit_test(test_catches_ignored_slice),
      cmocka_unit_test(test_catches_unwritten_output),
      cmocka_unit_test(test_catches_differing_copies),
      cmocka_unit_test(test_catches_malformed_signature),
      cmocka_unit_test(test_mixed_partials_skipped),
      cmocka_unit_test(test_compare_tolerance),
      cmocka_unit_test(test_partial_parts_differ),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
