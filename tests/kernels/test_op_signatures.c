/* Parallel invariance of every op (DESIGN.md section 10, invariant 1): for
 * each op in the registry, random valid inputs (shapes with extents that
 * do not divide the mesh sizes, some shards empty), every signature the op
 * declares plus the implied all-B, on 1-4 ranks in 1-D meshes and every
 * pair of signatures on the 2x2 mesh, must reproduce the single-device
 * result after reassembling the outputs (op_harness.h).
 *
 * Each op needs an entry in op_cases_pointwise.c, op_cases_dense.c or
 * op_cases_data.c: an op without one fails this test, so no op can be added
 * untested.
 * Prints its seed; SLUICE_TEST_SEED replays a run, SLUICE_TEST_OP=name
 * checks one op. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_harness.h"

static uint64_t g_seed;

static const op_case *(*const tables[])(int *n) = {
    op_cases_pointwise, op_cases_dense, op_cases_data};

static const op_case *find_case(const char *name) {
  for (size_t f = 0; f < SL_ARRAY_LEN(tables); f++) {
    int n;
    const op_case *t = tables[f](&n);
    for (int i = 0; i < n; i++)
      if (strcmp(t[i].op, name) == 0) return &t[i];
  }
  return NULL;
}

/* Every op in the registry has a case, and every case names an op. */
static void test_every_op_has_a_case(void **state) {
  (void)state;
  int missing = 0;
  for (int i = 0; i < sl__op_count(); i++)
    if (!find_case(sl__op_at(i)->name)) {
      printf("op %s has no entry in op_cases_*.c\n", sl__op_at(i)->name);
      missing++;
    }
  for (size_t f = 0; f < SL_ARRAY_LEN(tables); f++) {
    int n;
    const op_case *t = tables[f](&n);
    for (int i = 0; i < n; i++)
      if (!sl__op_find(t[i].op)) {
        printf("case for %s names no registered op\n", t[i].op);
        missing++;
      }
  }
  assert_int_equal(missing, 0);
}

static void run_op(const sl__op_def *op, const op_case *c, uint64_t seed) {
  sl_rng rng = {seed};
  int trials = c->trials ? c->trials : 8;
  oph_stats stats = {0, 0, 0};
  for (int t = 0; t < trials; t++) {
    sl__attrs at;
    memset(&at, 0, sizeof at);
    sl_host_tensor *in[SL_OP_MAX_INPUTS] = {0};
    sl_host_tensor *ref[SL_OP_MAX_OUTPUTS] = {0};
    int n_in = 0;
    sl_status st = c->make(&rng, &at, &n_in, in);
    if (st != SL_OK)
      fail_msg("op %s: case generator: %s", op->name, sl_last_error());
    int64_t step = (int64_t)sl__rng_below(&rng, 5);
    st = oph_run_single(op, &at, n_in, in, step, ref);
    if (st != SL_OK) fail_msg("%s", sl_last_error());
    st = oph_check_all(op, &at, n_in, in, ref, sl__rng_next(&rng), step, c->tol,
                       &stats);
    if (st != SL_OK) {
      char attrs[256], shapes[512] = "";
      sl__attrs_print(&at, attrs, sizeof attrs);
      size_t len = 0;
      for (int i = 0; i < n_in; i++) {
        char sh[96];
        sl_shape_print(sl_host_tensor_shape(in[i]), sh, sizeof sh);
        len += (size_t)snprintf(shapes + len, sizeof shapes - len, " %s %s",
                                sl_dtype_name(sl_host_tensor_dtype(in[i])), sh);
      }
      fail_msg("%s\n  (trial %d, attrs: %s, inputs:%s, step %" PRId64 ")",
               sl_last_error(), t, attrs, shapes, step);
    }
    for (int i = 0; i < n_in; i++)
      sl_host_tensor_destroy(in[i]);
    for (int o = 0; o < op->n_out; o++)
      sl_host_tensor_destroy(ref[o]);
  }
  printf("  %-26s %d trials, %4d signatures, %5d layouts, %4d skipped\n",
         op->name, trials, stats.sigs, stats.layouts, stats.skipped);
}

static void test_every_op_invariant(void **state) {
  (void)state;
  const char *only = getenv("SLUICE_TEST_OP");
  int ran = 0;
  for (int i = 0; i < sl__op_count(); i++) {
    const sl__op_def *op = sl__op_at(i);
    if (only && *only && strcmp(only, op->name) != 0) continue;
    const op_case *c = find_case(op->name);
    if (!c) continue; /* reported by test_every_op_has_a_case */
    /* Each op gets its own stream, so replaying one op with SLUICE_TEST_OP
     * sees the same cases as the full run. */
    uint64_t h = g_seed;
    for (const char *p = op->name; *p; p++)
      h = sl__mix64(h ^ (unsigned char)*p);
    run_op(op, c, h);
    ran++;
  }
  if (only && *only && ran == 0) fail_msg("no op named %s", only);
}

int main(void) {
  g_seed = oph_seed("op signatures");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_has_a_case),
      cmocka_unit_test(test_every_op_invariant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
