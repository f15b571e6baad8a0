/* `sluice boxing` option parsing, called directly: what each flag sets,
 * defaults, help short-circuit, the error contract (one line, nothing owned
 * after a failure, small or absent error buffers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "boxing_args.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void test_full_request(void **state) {
  char *argv[] = {"boxing",
                  "--shape=8x6",
                  "--dtype",
                  "i64",
                  "--from-placement",
                  "cpu:0-1/0-1[2,2]",
                  "--from",
                  "(S(0),P)",
                  "--to",
                  "S(1)",
                  "--to-placement=cpu:0-1/0-1[4]",
                  "--json",
                  "--verify",
                  "--seed",
                  "18446744073709551615",
                  "--intra-bw",
                  "2.5",
                  "--intra-latency-us=0",
                  "--inter-bw=1e-3",
                  "--inter-latency-us",
                  "7"};
  sl_cli_boxing_args a;
  char err[256];
  assert_int_equal(
      sl_cli_boxing_args_parse(ARGC(argv), argv, &a, err, sizeof err), SL_OK);
  assert_string_equal(err, "");
  assert_false(a.help);
  assert_true(a.json);
  assert_true(a.verify);
  assert_true(a.seed_given);
  assert_true(a.seed == UINT64_MAX);
  assert_int_equal(a.shape.ndim, 2);
  assert_int_equal(a.shape.dims[0], 8);
  assert_int_equal(a.shape.dims[1], 6);
  assert_int_equal(a.dtype, SL_DTYPE_I64);
  assert_int_equal(sl_placement_size(a.src_place), 4);
  assert_int_equal(sl_placement_node_count(a.src_place), 2);
  assert_int_equal(sl_placement_mesh_ndim(a.src_place), 2);
  assert_true(a.dst_place_given);
  assert_int_equal(sl_placement_mesh_ndim(a.dst_place), 1);
  assert_true(sl_placement_same_devices(a.src_place, a.dst_place));
  sl_nd_sbp want;
  assert_int_equal(sl_nd_sbp_parse("(S(0),P)", &want), SL_OK);
  assert_true(sl_nd_sbp_equal(&a.src_sbp, &want));
  assert_int_equal(sl_nd_sbp_parse("S(1)", &want), SL_OK);
  assert_true(sl_nd_sbp_equal(&a.dst_sbp, &want));
  assert_true(a.cost.intra_bandwidth_gbps == 2.5);
  assert_true(a.cost.intra_latency_us == 0);
  assert_true(a.cost.inter_bandwidth_gbps == 1e-3);
  assert_true(a.cost.inter_latency_us == 7);
  sl_cli_boxing_args_clear(&a);
  assert_null(a.src_place);
  sl_cli_boxing_args_clear(&a); /* twice is fine */
}

static void test_defaults(void **state) {
  char *argv[] = {"boxing",   "--shape", "",  "--from-placement",
                  "cuda:0-7", "--from",  "B", "--to",
                  "P(max)"};
  sl_cli_boxing_args a;
  char err[256];
  assert_int_equal(
      sl_cli_boxing_args_parse(ARGC(argv), argv, &a, err, sizeof err), SL_OK);
  assert_int_equal(a.shape.ndim, 0); /* '' is a scalar */
  assert_int_equal(a.dtype, SL_DTYPE_F32);
  assert_false(a.json || a.verify || a.seed_given || a.dst_place_given);
  /* The target placement is an equal, separately owned copy. */
  assert_non_null(a.dst_place);
  assert_ptr_not_equal(a.src_place, a.dst_place);
  assert_true(sl_placement_equal(a.src_place, a.dst_place));
  sl_boxing_cost def = sl_boxing_cost_default(SL_DEVICE_CUDA);
  assert_memory_equal(&a.cost, &def, sizeof def);
  assert_int_equal(a.dst_sbp.sbp[0].kind, SL_SBP_PARTIAL);
  assert_int_equal(a.dst_sbp.sbp[0].reduce, SL_REDUCE_MAX);
  sl_cli_boxing_args_clear(&a);
}

static void test_help_short_circuits(void **state) {
  /* Help wins over errors anywhere else on the line. */
  char *argv[] = {"boxing", "--shape", "bad", "--nosuch", "-h"};
  sl_cli_boxing_args a;
  char err[64];
  assert_int_equal(
      sl_cli_boxing_args_parse(ARGC(argv), argv, &a, err, sizeof err), SL_OK);
  assert_true(a.help);
  assert_null(a.src_place);
  assert_null(a.dst_place);
  assert_true(strstr(sl_cli_boxing_usage, "--inter-latency-us") != NULL);
}

static void expect_error(int argc, char **argv, const char *needle) {
  sl_cli_boxing_args a;
  char err[512];
  memset(&a, 0x5a, sizeof a);
  sl_status st = sl_cli_boxing_args_parse(argc, argv, &a, err, sizeof err);
  if (st == SL_OK) fail_msg("accepted; wanted an error naming '%s'", needle);
  assert_int_equal(st, SL_EINVAL);
  if (!strstr(err, needle)) fail_msg("'%s' does not name '%s'", err, needle);
  for (const char *p = err; *p; p++)
    assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
  /* Nothing is owned after a failure (no leak for a sanitizer to find). */
  assert_null(a.src_place);
  assert_null(a.dst_place);
  /* No message buffer at all must be fine too. */
  assert_int_equal(sl_cli_boxing_args_parse(argc, argv, &a, NULL, 0), st);
}

static void test_errors(void **state) {
  char *empty[] = {"boxing"};
  expect_error(1, empty, "missing required flag --shape");
  char *nl[] = {"boxing",
                "--shape",
                "8\n\x1b[31m6",
                "--from-placement",
                "cpu:0",
                "--from",
                "B",
                "--to",
                "B"};
  expect_error(ARGC(nl), nl, "--shape: shape '8??[31m6'");
  char *eq_empty[] = {"boxing", "--shape=8", "--from-placement=", "--from=B",
                      "--to=B"};
  expect_error(ARGC(eq_empty), eq_empty, "--from-placement");
  char *dashdash[] = {"boxing", "--"};
  expect_error(ARGC(dashdash), dashdash, "unexpected argument '--'");
  char *eq_flag[] = {"boxing", "--=x"};
  expect_error(ARGC(eq_flag), eq_flag, "unknown flag '--'");
  char *twice[] = {"boxing", "--verify", "--verify"};
  expect_error(ARGC(twice), twice, "--verify given more than once");
  char *dev[] = {"boxing",  "--shape",        "4",       "--from-placement",
                 "cpu:0-1", "--from",         "S(0)",    "--to",
                 "S(0)",    "--to-placement", "cuda:0-1"};
  expect_error(ARGC(dev), dev, "device type");
  char *axis[] = {"boxing",  "--shape", "4",    "--from-placement",
                  "cpu:0-1", "--from",  "S(0)", "--to",
                  "S(1)"};
  expect_error(ARGC(axis), axis,
               "--to 'S(1)' does not fit shape [4] on cpu:0-1");
  /* A long argument is quoted, not copied whole. */
  static char longarg[5000];
  memset(longarg, 'z', sizeof longarg - 1);
  char *lng[] = {"boxing", longarg};
  expect_error(ARGC(lng), lng, "unexpected argument 'zzz");
}

static void test_small_error_buffer(void **state) {
  char *argv[] = {"boxing", "--frobnicate"};
  sl_cli_boxing_args a;
  char err[8];
  memset(err, 'x', sizeof err);
  assert_int_equal(
      sl_cli_boxing_args_parse(ARGC(argv), argv, &a, err, sizeof err),
      SL_EINVAL);
  assert_int_equal(strlen(err), sizeof err - 1);
  assert_memory_equal(err, "unknown", 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_request),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_help_short_circuits),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_small_error_buffer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
