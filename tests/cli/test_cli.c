/* The built `sluice` binary end to end: help, info, `sluice boxing` in
 * human and JSON form (checked against the byte counts of DESIGN.md §6),
 * --verify (passing, and failing through a link seam), the flag forms, cost
 * overrides, and every kind of bad input
 * (exit 2, one stderr line naming the problem, nothing on stdout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "json_mini.h"

#if !defined(SLUICE_CLI_PATH) || !defined(SLUICE_MISMATCH_CLI_PATH)
#error "SLUICE_CLI_PATH and SLUICE_MISMATCH_CLI_PATH must name the binaries"
#endif

#define MAX_ARGS 40

/* Runs `sluice args...` (a NULL-terminated list) and fails the test on a
 * harness failure or a crash; a crash is never an acceptable answer. */
static cli_result run_v(const char *prog, const char *first, va_list ap) {
  const char *argv[MAX_ARGS] = {prog};
  int n = 1;
  for (const char *a = first; a; a = va_arg(ap, const char *)) {
    assert_true(n < MAX_ARGS - 1);
    argv[n++] = a;
  }
  argv[n] = NULL;
  cli_result r;
  assert_int_equal(cli_run(prog, argv, &r), 0);
  if (r.status > 2)
    fail_msg("sluice %s ... ended with status %d; stderr:\n%s", first, r.status,
             r.err);
  return r;
}

static cli_result run(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  cli_result r = run_v(SLUICE_CLI_PATH, first, ap);
  va_end(ap);
  return r;
}

/* The command linked with a verifier that always finds rank 2, index 5:
 * expected 3, got 0.5 (tests/cli/mismatch_seam.c). */
static cli_result run_mismatch(const char *first, ...) {
  va_list ap;
  va_start(ap, first);
  cli_result r = run_v(SLUICE_MISMATCH_CLI_PATH, first, ap);
  va_end(ap);
  return r;
}

static void expect_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("expected '%s' in:\n%s", needle, hay);
}

/* Parses r's stdout as JSON (and has python3 agree when it is installed:
 * a second, independent parser). */
static jv *json_of(const cli_result *r) {
  char err[256];
  jv *v = jv_parse(r->out, err, sizeof err);
  if (!v) fail_msg("invalid JSON (%s):\n%s", err, r->out);
  static int have_python = -1;
  if (have_python < 0) {
    const char *argv[] = {"python3", "-c", "pass", NULL};
    cli_result p;
    have_python = cli_run("python3", argv, &p) == 0 && p.status == 0;
    if (p.out) cli_result_free(&p);
    if (!have_python)
      printf("python3 not found: JSON checked by json_mini only\n");
  }
  if (have_python) {
    char path[] = "/tmp/sluice_cli_json_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(r->out);
    assert_int_equal(write(fd, r->out, len), (ssize_t)len);
    close(fd);
    const char *argv[] = {"python3", "-c",
                          "import json,sys; json.load(open(sys.argv[1]))", path,
                          NULL};
    cli_result p;
    assert_int_equal(cli_run("python3", argv, &p), 0);
    unlink(path);
    if (p.status != 0) fail_msg("python3 rejects the JSON: %s", p.err);
    cli_result_free(&p);
  }
  return v;
}

/* ---- the JSON checker itself: it must reject what is not JSON ---------- */

static void test_json_reader(void **state) {
  const char *good[] = {"{}",
                        "[]",
                        "0",
                        "-1.5e+3",
                        "\"a\\n\\u00e9\"",
                        " {\"a\": [1, true, null, {\"b\": \"c\"}]} "};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char err[128];
    jv *v = jv_parse(good[i], err, sizeof err);
    if (!v) fail_msg("'%s' rejected: %s", good[i], err);
    jv_free(v);
  }
  const char *bad[] = {"",        "{",         "[1,]",  "{\"a\":1,}", "01",
                       "1.",      "nan",       "inf",   "{a:1}",      "[1] 2",
                       "\"\t\"",  "'x'",       "[1 2]", "-",          "tru",
                       "\"\\x\"", "{\"a\" 1}", "1e",    "+1",         "[\"]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char err[128];
    jv *v = jv_parse(bad[i], err, sizeof err);
    if (v) fail_msg("'%s' accepted", bad[i]);
    assert_true(strlen(err) > 0);
  }
  jv *v = jv_parse("{\"k\": [1, 2.5, \"s\"], \"t\": true}", NULL, 0);
  assert_non_null(v);
  assert_int_equal(jv_len(jv_get(v, "k")), 3);
  assert_true(jv_num(jv_at(jv_get(v, "k"), 1)) == 2.5);
  assert_string_equal(jv_str(jv_at(jv_get(v, "k"), 2)), "s");
  assert_true(jv_bool(jv_get(v, "t")));
  assert_null(jv_get(v, "missing"));
  jv_free(v);
}

/* ---- top level and info ------------------------------------------------ */

static void test_top_level(void **state) {
  cli_result r = run("--help", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "usage: sluice");
  expect_contains(r.out, "  info ");
  expect_contains(r.out, "  boxing ");
  cli_result_free(&r);
  r = run("nosuchcommand", NULL);
  assert_int_equal(r.status, 2);
  expect_contains(r.err, "nosuchcommand");
  cli_result_free(&r);
  r = run("--version", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "sluice 0.");
  cli_result_free(&r);
}

static void test_info(void **state) {
  cli_result r = run("info", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "sluice ");
  expect_contains(r.out, "features:");
  expect_contains(r.out, "devices:");
  expect_contains(r.out, "cpu: ");
  assert_string_equal(r.err, "");
  cli_result_free(&r);
  r = run("info", "extra", NULL);
  assert_int_equal(r.status, 2);
  cli_result_free(&r);
}

static void test_boxing_help(void **state) {
  const char *forms[] = {"--help", "-h"};
  for (int i = 0; i < 2; i++) {
    cli_result r = run("boxing", forms[i], NULL);
    assert_int_equal(r.status, 0);
    const char *flags[] = {"--shape",
                           "--dtype",
                           "--from-placement",
                           "--from ",
                           "--to ",
                           "--to-placement",
                           "--json",
                           "--verify",
                           "--seed",
                           "--intra-bw",
                           "--inter-bw",
                           "--intra-latency-us",
                           "--inter-latency-us",
                           "--help"};
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
      expect_contains(r.out, flags[k]);
    assert_string_equal(r.err, "");
    cli_result_free(&r);
  }
}

/* ---- human output ------------------------------------------------------ */

static void test_human_all_reduce(void **state) {
  /* T = 8*6*4 = 192 bytes on n = 4 ranks: all_reduce sends 2T(n-1)/n. */
  cli_result r = run("boxing", "--shape", "8,6", "--from-placement", "cpu:0-3",
                     "--from", "P", "--to", "B", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "boxing [8,6] f32: cpu:0-3 P -> cpu:0-3 B\n");
  expect_contains(r.out, "all_reduce");
  expect_contains(r.out, "sum");
  expect_contains(r.out, "P -> B");
  expect_contains(r.out, "288 each");
  expect_contains(r.out, "[0,1,2,3]");
  expect_contains(r.out, "total: 1152 bytes sent, at most 288 by one rank");
  /* Same placement: no rank map line. */
  assert_null(strstr(r.out, "plan ranks (node,device)"));
  assert_string_equal(r.err, "");
  cli_result_free(&r);
}

static void test_human_nothing_to_do(void **state) {
  cli_result r =
      run("boxing", "--shape", "[8,6]", "--dtype", "bf16", "--from-placement",
          "cpu:0-3[2,2]", "--from", "(S(0),B)", "--to", "(S(0),B)", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "boxing [8,6] bf16: cpu:0-3[2,2] (S(0),B) -> ");
  expect_contains(r.out, "no data movement needed\n");
  assert_null(strstr(r.out, "total:"));
  cli_result_free(&r);
}

static void test_human_placement_change(void **state) {
  cli_result r = run("boxing", "--shape", "10,7", "--from-placement", "cpu:0-3",
                     "--from", "S(0)", "--to-placement", "cpu:4-6", "--to",
                     "S(1)", "--verify", "--seed", "11", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "cpu:0-3 S(0) -> cpu:4-6 S(1)\n");
  /* Plan ranks: the source's four, then the target's three new devices. */
  expect_contains(r.out, "plan ranks (node,device): 0=(0,0) 1=(0,1) 2=(0,2) "
                         "3=(0,3) 4=(0,4) 5=(0,5) 6=(0,6)\n");
  expect_contains(r.out, "send_recv");
  expect_contains(r.out, "verified");
  expect_contains(r.out, "seed 11");
  cli_result_free(&r);
}

/* ---- JSON --------------------------------------------------------------- */

static void expect_all(const jv *arr, int n, double want) {
  assert_int_equal(jv_type(arr), JV_ARRAY);
  assert_int_equal(jv_len(arr), n);
  for (int i = 0; i < n; i++)
    if (jv_num(jv_at(arr, i)) != want)
      fail_msg("entry %d is %g, want %g", i, jv_num(jv_at(arr, i)), want);
}

static void test_json_all_reduce(void **state) {
  cli_result r = run("boxing", "--shape", "8,6", "--from-placement", "cpu:0-3",
                     "--from", "P", "--to", "B", "--json", NULL);
  assert_int_equal(r.status, 0);
  jv *v = json_of(&r);
  const jv *shape = jv_get(v, "shape");
  assert_int_equal(jv_len(shape), 2);
  assert_true(jv_num(jv_at(shape, 0)) == 8 && jv_num(jv_at(shape, 1)) == 6);
  assert_string_equal(jv_str(jv_get(v, "dtype")), "f32");
  assert_string_equal(jv_str(jv_get(jv_get(v, "from"), "placement")),
                      "cpu:0-3");
  assert_string_equal(jv_str(jv_get(jv_get(v, "from"), "sbp")), "P");
  assert_string_equal(jv_str(jv_get(jv_get(v, "to"), "placement")), "cpu:0-3");
  assert_string_equal(jv_str(jv_get(jv_get(v, "to"), "sbp")), "B");
  const jv *ranks = jv_get(v, "ranks");
  assert_int_equal(jv_len(ranks), 4);
  for (int i = 0; i < 4; i++) {
    assert_true(jv_num(jv_at(jv_at(ranks, i), 0)) == 0);
    assert_true(jv_num(jv_at(jv_at(ranks, i), 1)) == i);
  }
  const jv *steps = jv_get(v, "steps");
  assert_int_equal(jv_len(steps), 1);
  const jv *s0 = jv_at(steps, 0);
  assert_string_equal(jv_str(jv_get(s0, "op")), "all_reduce");
  assert_string_equal(jv_str(jv_get(s0, "reduce")), "sum");
  assert_true(jv_num(jv_get(s0, "mesh_axis")) == 0);
  assert_string_equal(jv_str(jv_get(s0, "from")), "P");
  assert_string_equal(jv_str(jv_get(s0, "to")), "B");
  const jv *groups = jv_get(s0, "groups");
  assert_int_equal(jv_len(groups), 1);
  assert_int_equal(jv_len(jv_at(groups, 0)), 4);
  expect_all(jv_get(s0, "bytes_sent_per_rank"), 4, 2.0 * 192 * 3 / 4);
  expect_all(jv_get(v, "bytes_sent_per_rank"), 4, 288);
  double us = jv_num(jv_get(v, "predicted_us"));
  assert_true(us > 0);
  assert_true(fabs(us - jv_num(jv_get(s0, "predicted_us"))) <= 1e-9 * us);
  /* No --verify: no verdict. */
  assert_null(jv_get(v, "verified"));
  jv_free(v);
  cli_result_free(&r);
}

/* DESIGN.md §6 on one placement of n = 4: the step and the bytes each rank
 * sends, T logical bytes. */
static void test_json_design_table(void **state) {
  static const struct {
    const char *shape, *from, *to, *op;
    bool reduce;
    double bytes; /* per rank */
  } rows[] = {
      {"8,6", "P", "S(0)", "reduce_scatter", true, 192.0 * 3 / 4},
      {"8,6", "S(0)", "B", "all_gather", false, 192.0 * 3 / 4},
      {"8,8", "S(0)", "S(1)", "all_to_all", false, 256.0 * 3 / 16},
      {"8,6", "B", "S(1)", "slice", false, 0},
      {"8,6", "B", "P", "zero", true, 0},
      {"8,6", "P(max)", "B", "all_reduce", true, 2.0 * 192 * 3 / 4},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    cli_result r = run("boxing", "--shape", rows[i].shape, "--from-placement",
                       "cpu:0-3", "--from", rows[i].from, "--to", rows[i].to,
                       "--json", "--verify", "--seed", "5", NULL);
    if (r.status != 0)
      fail_msg("%s -> %s: status %d %s", rows[i].from, rows[i].to, r.status,
               r.err);
    jv *v = json_of(&r);
    const jv *steps = jv_get(v, "steps");
    if (jv_len(steps) != 1)
      fail_msg("%s -> %s: %d steps:\n%s", rows[i].from, rows[i].to,
               jv_len(steps), r.out);
    const jv *s0 = jv_at(steps, 0);
    assert_string_equal(jv_str(jv_get(s0, "op")), rows[i].op);
    /* "reduce" appears exactly where the step reduces. */
    assert_int_equal(jv_get(s0, "reduce") != NULL, rows[i].reduce);
    expect_all(jv_get(s0, "bytes_sent_per_rank"), 4, rows[i].bytes);
    assert_true(jv_get(v, "verified") && jv_bool(jv_get(v, "verified")));
    assert_true(jv_num(jv_get(v, "seed")) == 5);
    assert_null(jv_get(v, "mismatch"));
    jv_free(v);
    cli_result_free(&r);
  }
}

static void test_json_nd_and_empty(void **state) {
  cli_result r =
      run("boxing", "--shape", "8,6", "--from-placement", "cpu:0-3[2,2]",
          "--from", "(S(0),P)", "--to", "(B,B)", "--json", "--verify", NULL);
  assert_int_equal(r.status, 0);
  jv *v = json_of(&r);
  assert_true(jv_bool(jv_get(v, "verified")));
  assert_string_equal(jv_str(jv_get(jv_get(v, "from"), "sbp")), "(S(0),P)");
  assert_string_equal(jv_str(jv_get(jv_get(v, "from"), "placement")),
                      "cpu:0-3[2,2]");
  const jv *steps = jv_get(v, "steps");
  assert_true(jv_len(steps) >= 1);
  /* The per-step byte arrays add up to the totals. */
  const jv *total = jv_get(v, "bytes_sent_per_rank");
  assert_int_equal(jv_len(total), 4);
  for (int rk = 0; rk < 4; rk++) {
    double sum = 0;
    for (int s = 0; s < jv_len(steps); s++)
      sum += jv_num(jv_at(jv_get(jv_at(steps, s), "bytes_sent_per_rank"), rk));
    assert_true(sum == jv_num(jv_at(total, rk)));
  }
  /* The last step ends in the target layout. */
  assert_string_equal(jv_str(jv_get(jv_at(steps, jv_len(steps) - 1), "to")),
                      "(B,B)");
  jv_free(v);
  cli_result_free(&r);

  r = run("boxing", "--shape", "", "--from-placement", "cpu:0-1", "--from", "B",
          "--to", "B", "--json", NULL);
  assert_int_equal(r.status, 0);
  v = json_of(&r);
  assert_int_equal(jv_len(jv_get(v, "shape")), 0);
  assert_int_equal(jv_type(jv_get(v, "steps")), JV_ARRAY);
  assert_int_equal(jv_len(jv_get(v, "steps")), 0);
  expect_all(jv_get(v, "bytes_sent_per_rank"), 2, 0);
  assert_true(jv_num(jv_get(v, "predicted_us")) == 0);
  jv_free(v);
  cli_result_free(&r);
}

/* --flag=value and --flag value give identical output. */
static void test_flag_forms(void **state) {
  cli_result a =
      run("boxing", "--shape", "8,6", "--dtype", "f16", "--from-placement",
          "cpu:0-3", "--from", "S(0)", "--to", "B", "--json", NULL);
  cli_result b =
      run("boxing", "--json", "--to=B", "--from=S(0)",
          "--from-placement=cpu:0-3", "--dtype=f16", "--shape=8,6", NULL);
  assert_int_equal(a.status, 0);
  assert_int_equal(b.status, 0);
  assert_string_equal(a.out, b.out);
  jv *v = json_of(&a);
  assert_string_equal(jv_str(jv_get(v, "dtype")), "f16");
  /* f16: T = 96 bytes, all_gather sends T(n-1)/n = 72. */
  expect_all(jv_get(v, "bytes_sent_per_rank"), 4, 72);
  jv_free(v);
  cli_result_free(&a);
  cli_result_free(&b);
}

static double predicted_us(const char *bw, const char *lat) {
  cli_result r =
      run("boxing", "--shape", "8,6", "--from-placement", "cpu:0-3", "--from",
          "P", "--to", "B", "--json", "--intra-bw", bw, "--intra-latency-us",
          lat, "--inter-bw", "1000", "--inter-latency-us", "1000", NULL);
  assert_int_equal(r.status, 0);
  jv *v = json_of(&r);
  double us = jv_num(jv_get(v, "predicted_us"));
  jv_free(v);
  cli_result_free(&r);
  return us;
}

/* The α-β model: with no latency, the busiest rank's 288 bytes over a
 * 1 GB/s link (1000 bytes per µs) take 0.288 µs, half that at 2 GB/s;
 * latency only adds. Inter-node figures do not touch a one-node plan. */
static void test_cost_overrides(void **state) {
  double t1 = predicted_us("1", "0");
  assert_true(fabs(t1 - 0.288) < 1e-9);
  double t2 = predicted_us("2", "0");
  assert_true(fabs(t2 - 0.144) < 1e-9);
  double t3 = predicted_us("1", "10");
  assert_true(t3 >= t1 + 10);
  assert_true(predicted_us("1", "0") == t1);
}

static void test_verify_human(void **state) {
  cli_result r = run("boxing", "--shape", "5,7,3", "--dtype", "i32",
                     "--from-placement", "cpu:0-5[2,3]", "--from",
                     "(P(min),S(2))", "--to", "(S(1),S(0))", "--verify", NULL);
  assert_int_equal(r.status, 0);
  expect_contains(r.out, "verified: every target shard matches");
  /* No --seed: the chosen one is printed so the run can be replayed. */
  const char *seed = strstr(r.out, "(seed ");
  assert_non_null(seed);
  unsigned long long s = strtoull(seed + 6, NULL, 10);
  char text[32];
  snprintf(text, sizeof text, "%llu", s);
  cli_result again =
      run("boxing", "--shape", "5,7,3", "--dtype", "i32", "--from-placement",
          "cpu:0-5[2,3]", "--from", "(P(min),S(2))", "--to", "(S(1),S(0))",
          "--verify", "--seed", text, NULL);
  assert_int_equal(again.status, 0);
  assert_string_equal(again.out, r.out);
  cli_result_free(&again);
  cli_result_free(&r);
}

static void test_verify_mismatch(void **state) {
  cli_result r = run_mismatch("boxing", "--shape", "8,6", "--from-placement",
                              "cpu:0-3", "--from", "P", "--to", "B", "--verify",
                              "--seed", "42", NULL);
  assert_int_equal(r.status, 1);
  expect_contains(r.out, "all_reduce"); /* the plan is still shown */
  expect_contains(r.out, "verify FAILED (seed 42): target rank 2, index 5: "
                         "expected 3, got 0.5\n");
  assert_null(strstr(r.out, "verified:"));
  cli_result_free(&r);
  r = run_mismatch("boxing", "--shape", "8,6", "--from-placement", "cpu:0-3",
                   "--from", "P", "--to", "B", "--verify", "--seed", "42",
                   "--json", NULL);
  assert_int_equal(r.status, 1);
  jv *v = json_of(&r);
  assert_int_equal(jv_type(jv_get(v, "verified")), JV_BOOL);
  assert_false(jv_bool(jv_get(v, "verified")));
  assert_true(jv_num(jv_get(v, "seed")) == 42);
  const jv *m = jv_get(v, "mismatch");
  assert_true(jv_num(jv_get(m, "rank")) == 2);
  assert_true(jv_num(jv_get(m, "index")) == 5);
  assert_true(jv_num(jv_get(m, "expected")) == 3);
  assert_true(jv_num(jv_get(m, "got")) == 0.5);
  jv_free(v);
  cli_result_free(&r);
  /* Without --verify the seam is never called. */
  r = run_mismatch("boxing", "--shape", "8,6", "--from-placement", "cpu:0-3",
                   "--from", "P", "--to", "B", NULL);
  assert_int_equal(r.status, 0);
  cli_result_free(&r);
}

/* ---- bad input ---------------------------------------------------------- */

#define BASE "--shape", "8,6", "--from-placement", "cpu:0-3"

typedef struct bad_case {
  const char *args[16];
  const char *needle;
} bad_case;

static const bad_case bad_cases[] = {
    {{BASE, "--from", "P", "--to", "B", "--shape", "9"}, "--shape given more"},
    {{"--shape", "8,a", "--from-placement", "cpu:0-3", "--from", "P", "--to",
      "B"},
     "'a'"},
    {{"--shape", "-1,3", "--from-placement", "cpu:0-3", "--from", "P", "--to",
      "B"},
     "'-1'"},
    {{"--shape", "1,2,3,4,5,6,7,8,9", "--from-placement", "cpu:0-3", "--from",
      "P", "--to", "B"},
     "more than 8"},
    {{"--shape", "[8,6", "--from-placement", "cpu:0-3", "--from", "P", "--to",
      "B"},
     "--shape"},
    {{"--shape", "8,6", "--from-placement", "cpu:3-1", "--from", "P", "--to",
      "B"},
     "--from-placement"},
    {{"--shape", "8,6", "--from-placement", "tpu:0-3", "--from", "P", "--to",
      "B"},
     "tpu"},
    {{BASE, "--from", "P", "--to", "B", "--to-placement", "cpu:0-3[3,3]"},
     "--to-placement"},
    {{BASE, "--from", "S(x)", "--to", "B"}, "--from"},
    {{BASE, "--from", "P", "--to", "Q"}, "--to: "},
    {{BASE, "--from", "P", "--to", "B", "--dtype", "f33"}, "'f33'"},
    {{BASE, "--from", "S(2)", "--to", "B"}, "S(2)"},
    {{BASE, "--from", "P", "--to", "S(-1)"}, "--to"},
    {{BASE, "--from", "(S(0),B)", "--to", "B"}, "does not fit"},
    {{"--shape", "8,6", "--from-placement", "cpu:0-3[2,2]", "--from", "S(0)",
      "--to", "(B,B)"},
     "does not fit"},
    {{"--shape", "8,6", "--from-placement", "cpu:0-3[2,2]", "--from",
      "(P(max),P)", "--to", "(B,B)"},
     "does not fit"},
    {{BASE, "--from", "P"}, "missing required flag --to"},
    {{"--from-placement", "cpu:0-3", "--from", "P", "--to", "B"},
     "missing required flag --shape"},
    {{"--shape", "8,6", "--from", "P", "--to", "B"},
     "missing required flag --from-placement"},
    {{BASE, "--to", "B"}, "missing required flag --from"},
    {{BASE, "--from", "P", "--to", "B", "--frobnicate"},
     "unknown flag '--frobnicate'"},
    {{BASE, "--from", "P", "--to", "B", "--frobnicate=3"},
     "unknown flag '--frobnicate'"},
    {{BASE, "--from", "P", "--to", "B", "-x"}, "unexpected argument '-x'"},
    {{BASE, "--from", "P", "--to", "B", "extra"},
     "unexpected argument 'extra'"},
    {{BASE, "--from", "P", "--to"}, "missing value for --to"},
    {{BASE, "--from", "--to", "B"}, "missing value for --from"},
    {{BASE, "--from", "P", "--to", "B", "--json=yes"}, "--json takes no value"},
    {{BASE, "--from", "P", "--to", "B", "--to-placement", "cuda:0-3"},
     "device type"},
    {{BASE, "--from", "P", "--to", "B", "--seed", "-1"}, "--seed '-1'"},
    {{BASE, "--from", "P", "--to", "B", "--seed", "99999999999999999999"},
     "--seed"},
    {{BASE, "--from", "P", "--to", "B", "--intra-bw", "0"}, "--intra-bw '0'"},
    {{BASE, "--from", "P", "--to", "B", "--inter-bw", "inf"}, "--inter-bw"},
    {{BASE, "--from", "P", "--to", "B", "--intra-bw", "nan"}, "--intra-bw"},
    {{BASE, "--from", "P", "--to", "B", "--intra-bw", "1x"}, "'1x'"},
    {{BASE, "--from", "P", "--to", "B", "--intra-latency-us", "-1"},
     "--intra-latency-us '-1'"},
    {{BASE, "--from", "P", "--to", "B", "--inter-latency-us", ""},
     "--inter-latency-us"},
    /* Input with a newline still gives one line on stderr. */
    {{"--shape", "8\n6", "--from-placement", "cpu:0-3", "--from", "P", "--to",
      "B"},
     "--shape"},
    {{BASE, "--from", "P", "--to", "B", "--to-placement", "cpu:0-70000"},
     "--to-placement"},
    /* Verifying this would take tens of GiB: refused, not attempted. */
    {{"--shape", "100000,100000", "--from-placement", "cpu:0-3", "--from",
      "S(0)", "--to", "B", "--verify"},
     "--verify would need about"},
};

static void test_bad_input(void **state) {
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const char *argv[24] = {SLUICE_CLI_PATH, "boxing"};
    int n = 2;
    for (int k = 0; k < 16 && bad_cases[i].args[k]; k++)
      argv[n++] = bad_cases[i].args[k];
    argv[n] = NULL;
    cli_result r;
    assert_int_equal(cli_run(SLUICE_CLI_PATH, argv, &r), 0);
    if (r.status != 2)
      fail_msg("case %zu (%s): status %d, want 2; stderr: %s", i,
               bad_cases[i].needle, r.status, r.err);
    if (cli_line_count(r.err) != 1 || r.err[strlen(r.err) - 1] != '\n')
      fail_msg("case %zu: stderr is not one line:\n%s", i, r.err);
    if (strncmp(r.err, "sluice boxing: ", 15) != 0)
      fail_msg("case %zu: stderr does not start with 'sluice boxing: ': %s", i,
               r.err);
    if (!strstr(r.err, bad_cases[i].needle))
      fail_msg("case %zu: stderr '%s' does not name '%s'", i, r.err,
               bad_cases[i].needle);
    assert_string_equal(r.out, "");
    cli_result_free(&r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_reader),
      cmocka_unit_test(test_top_level),
      cmocka_unit_test(test_info),
      cmocka_unit_test(test_boxing_help),
      cmocka_unit_test(test_human_all_reduce),
      cmocka_unit_test(test_human_nothing_to_do),
      cmocka_unit_test(test_human_placement_change),
      cmocka_unit_test(test_json_all_reduce),
      cmocka_unit_test(test_json_design_table),
      cmocka_unit_test(test_json_nd_and_empty),
      cmocka_unit_test(test_flag_forms),
      cmocka_unit_test(test_cost_overrides),
      cmocka_unit_test(test_verify_human),
      cmocka_unit_test(test_verify_mismatch),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
