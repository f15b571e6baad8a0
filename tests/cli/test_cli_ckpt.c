/* `sluice ckpt` end to end: help, info on a checkpoint directory written by
 * the internal writer and on a hand-made plain safetensors file, convert,
 * and bad usage or input (exit 2, the reason on stderr, nothing on
 * stdout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ckpt_util.h"
#include "cli_run.h"

#ifndef SLUICE_CLI_PATH
#error "SLUICE_CLI_PATH must name the sluice binary"
#endif

static cli_result run(const char *first, ...) {
  const char *argv[16] = {SLUICE_CLI_PATH};
  int n = 1;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a; a = va_arg(ap, const char *))
    argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  cli_result r;
  assert_int_equal(cli_run(SLUICE_CLI_PATH, argv, &r), 0);
  if (r.status > 2)
    fail_msg("sluice %s ... ended with status %d; stderr:\n%s", first, r.status,
             r.err);
  return r;
}

static void expect_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("expected '%s' in:\n%s", needle, hay);
}

/* Exit 2, nothing on stdout, a message holding `needle` on stderr. */
static void expect_usage_error(cli_result r, const char *needle) {
  assert_int_equal(r.status, 2);
  assert_string_equal(r.out, "");
  expect_contains(r.err, needle);
  cli_result_free(&r);
}

static void save(const char *dir) {
  ttensor ts[2];
  ts[0] = (ttensor){.name = "fc1.w",
                    .dtype = SL_DTYPE_F32,
                    .placement = "cpu:0-1",
                    .sbp = "S(0)"};
  sl_shape_parse("5,6", &ts[0].shape);
  split_rows(&ts[0], 0, 2, 2);
  ts[1] = (ttensor){.name = "fc1.b",
                    .dtype = SL_DTYPE_BF16,
                    .placement = "cpu:0-1",
                    .sbp = "B"};
  sl_shape_parse("6", &ts[1].shape);
  split_rows(&ts[1], 0, 1, 1);
  sl__ckpt_kv kv = {"model", "mlp"};
  if (save_tensors(dir, 5, 2, 2, ts, 1, &kv) != SL_OK)
    fail_msg("save: %s", sl_last_error());
}

static void test_help(void **state) {
  (void)state;
  cli_result r = run("ckpt", "--help", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "usage: sluice ckpt");
  expect_contains(r.out, "info PATH");
  expect_contains(r.out, "convert PATH OUT");
  cli_result_free(&r);
  r = run("ckpt", "info", "--help", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "usage: sluice ckpt info PATH");
  cli_result_free(&r);
  r = run("ckpt", "convert", "-h", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "usage: sluice ckpt convert");
  cli_result_free(&r);
  r = run("--help", NULL);
  expect_contains(r.out, "  ckpt ");
  cli_result_free(&r);
  expect_usage_error(run("ckpt", NULL), "usage: sluice ckpt");
  expect_usage_error(run("ckpt", "bogus", NULL), "'bogus'");
  expect_usage_error(run("ckpt", "info", NULL), "usage: sluice ckpt info");
  expect_usage_error(run("ckpt", "info", "a", "b", NULL), "usage");
  expect_usage_error(run("ckpt", "info", "--bad", NULL), "'--bad'");
  expect_usage_error(run("ckpt", "convert", "a", NULL), "usage");
  expect_usage_error(run("ckpt", "convert", "a", "b", "--x", NULL), "'--x'");
}

static void test_info_convert(void **state) {
  (void)state;
  char dir[256], ck[300], out[320];
  scratch_dir(dir, sizeof dir);
  snprintf(ck, sizeof ck, "%s/ck", dir);
  snprintf(out, sizeof out, "%s/one.safetensors", dir);
  save(ck);
  cli_result r = run("ckpt", "info", ck, NULL);
  assert_int_equal(r.status, 0);
  printf("%s", r.out);
  expect_contains(r.out, "kind: sluice checkpoint directory");
  expect_contains(r.out, "step: 5\n");
  expect_contains(r.out, "metadata: model = mlp");
  expect_contains(r.out, "NAME ");
  /* Name, dtype, shape, placement, sbp, pieces, bytes. */
  const char *row = strstr(r.out, "fc1.w ");
  assert_non_null(row);
  char name[32], dt[16], shape[32], pl[32], sbp[32];
  int pieces;
  long long bytes;
  assert_int_equal(sscanf(row, "%31s %15s %31s %31s %31s %d %lld", name, dt,
                          shape, pl, sbp, &pieces, &bytes),
                   7);
  assert_string_equal(dt, "F32");
  assert_string_equal(shape, "[5,6]");
  assert_string_equal(pl, "cpu:0-1");
  assert_string_equal(sbp, "S(0)");
  assert_int_equal(pieces, 2);
  assert_int_equal(bytes, 120);
  expect_contains(r.out, "total: 2 tensors, 132 bytes");
  assert_string_equal(r.err, "");
  cli_result_free(&r);

  r = run("ckpt", "convert", ck, out, NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "wrote ");
  expect_contains(r.out, "2 tensors");
  cli_result_free(&r);
  r = run("ckpt", "info", out, NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "kind: plain safetensors file");
  expect_contains(r.out, "step: 5\n");
  row = strstr(r.out, "fc1.w ");
  assert_non_null(row);
  assert_int_equal(sscanf(row, "%31s %15s %31s %31s %31s %d %lld", name, dt,
                          shape, pl, sbp, &pieces, &bytes),
                   7);
  assert_string_equal(pl, "-");
  assert_int_equal(pieces, 1);
  cli_result_free(&r);

  /* A corrupt node file, a missing path, an unwritable output. */
  char node1[400];
  char fname[64];
  sl__ckpt_file_name(5, 1, fname, sizeof fname);
  snprintf(node1, sizeof node1, "%s/%s", ck, fname);
  FILE *f = fopen(node1, "r+b");
  fseek(f, -2, SEEK_END);
  int c = fgetc(f);
  fseek(f, -2, SEEK_END);
  fputc(c ^ 1, f);
  fclose(f);
  expect_usage_error(run("ckpt", "info", ck, NULL), "CRC32C");
  expect_usage_error(run("ckpt", "convert", ck, out, NULL), fname);
  expect_usage_error(run("ckpt", "info", "/nonexistent/x.safetensors", NULL),
                     "SL_ENOTFOUND");
  expect_usage_error(run("ckpt", "convert", out, "/nonexistent/dir/o", NULL),
                     "/nonexistent/dir/o");
  rm_rf(dir);
}

static void test_info_plain(void **state) {
  (void)state;
  char dir[256], p[300];
  scratch_dir(dir, sizeof dir);
  snprintf(p, sizeof p, "%s/hf.safetensors", dir);
  const char *json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"emb\":{\"dtype\":\"U16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
      "\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
  FILE *f = fopen(p, "wb");
  uint64_t len = strlen(json);
  unsigned char l8[8];
  for (int k = 0; k < 8; k++)
    l8[k] = (unsigned char)(len >> (8 * k));
  fwrite(l8, 1, 8, f);
  fwrite(json, 1, len, f);
  for (int k = 0; k < 16; k++)
    fputc(k, f);
  fclose(f);
  cli_result r = run("ckpt", "info", p, NULL);
  assert_int_equal(r.status, 0);
  printf("%s", r.out);
  expect_contains(r.out, "kind: plain safetensors file");
  expect_contains(r.out, "step: none");
  expect_contains(r.out, "metadata: format = pt");
  expect_contains(r.out, "U16*");
  expect_contains(r.out, "* a dtype sluice does not compute with");
  expect_contains(r.out, "total: 2 tensors, 16 bytes");
  cli_result_free(&r);
  /* Not a safetensors file at all. */
  f = fopen(p, "wb");
  fputs("hello", f);
  fclose(f);
  expect_usage_error(run("ckpt", "info", p, NULL), "hf.safetensors");
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_info_convert),
      cmocka_unit_test(test_info_plain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
