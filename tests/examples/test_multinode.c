/* Multi-node invariance: examples/mlp and examples/gpt under `sluice
 * launch` (real daemon processes on 127.0.0.1) with data, tensor and
 * hybrid parallelism on 2 and 3 nodes of 1 and 2 CPU devices each print
 * the single-device run's losses, within the parallel-invariance
 * tolerance (docs/api.md: 1e-4 relative; sums are reordered across
 * devices). Every run's boxing spans the nodes, so the collectives go
 * over the data plane; a program reading .npy files runs too. Each run is
 * bounded by the launcher's own guard
 * and ctest's timeout. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_run.h"
#include "cpu/npy.h"

#define STEPS 4
#define TOL 1e-4

typedef struct example {
  const char *name, *path;
  const char *extra[6]; /* small sizes, so the matrix stays quick */
} example;

static const example examples[] = {
    {"mlp", SLUICE_MLP_PATH, {"--hidden", "64", "--in", "32", NULL}},
    {"gpt", SLUICE_GPT_PATH, {NULL}},
};

/* The losses printed as "step N loss X"; returns how many. */
static int parse_losses(const char *out, double *loss, int max) {
  int n = 0;
  for (const char *p = out; p && *p && n < max; p = strchr(p, '\n')) {
    if (*p == '\n') p++;
    int step;
    double v;
    if (sscanf(p, "step %d loss %lf", &step, &v) == 2 && step == n)
      loss[n++] = v;
  }
  return n;
}

/* Runs ex (under `sluice launch` when launch_nodes is set) with extra
 * flags `more` (NULL-terminated, may be NULL) and reads its losses. */
static void run_with(const example *ex, const char *launch_nodes,
                     const char *launch_devices, const char *devices,
                     const char *layout, const char *const *more,
                     double *loss) {
  const char *argv[32];
  int a = 0;
  if (launch_nodes) {
    argv[a++] = SLUICE_CLI_PATH;
    argv[a++] = "launch";
    argv[a++] = "--nnodes";
    argv[a++] = launch_nodes;
    argv[a++] = "--devices";
    argv[a++] = launch_devices;
    argv[a++] = "--";
  }
  argv[a++] = ex->path;
  argv[a++] = "--devices";
  argv[a++] = devices;
  argv[a++] = "--layout";
  argv[a++] = layout;
  argv[a++] = "--steps";
  argv[a++] = "4";
  for (int i = 0; ex->extra[i]; i++)
    argv[a++] = ex->extra[i];
  for (int i = 0; more && more[i]; i++)
    argv[a++] = more[i];
  argv[a] = NULL;
  cli_result r;
  assert_int_equal(cli_run(argv[0], argv, &r), 0);
  if (r.status != 0 || parse_losses(r.out, loss, STEPS) != STEPS)
    fail_msg("%s --devices %s --layout %s (launch %s x %s): status %d\n"
             "stdout:\n%s\nstderr:\n%s",
             ex->name, devices, layout, launch_nodes ? launch_nodes : "-",
             launch_devices ? launch_devices : "-", r.status, r.out, r.err);
  cli_result_free(&r);
}

static void run(const example *ex, const char *launch_nodes,
                const char *launch_devices, const char *devices,
                const char *layout, double *loss) {
  run_with(ex, launch_nodes, launch_devices, devices, layout, NULL, loss);
}

static void matrix(const example *ex) {
  double ref[STEPS];
  run(ex, NULL, NULL, "cpu:1", "single", ref);
  static const char *const layouts[] = {"dp", "tp", "hybrid"};
  static const int shapes[][2] = {{2, 1}, {2, 2}, {3, 1}, {3, 2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int nodes = shapes[s][0], devs = shapes[s][1];
    char nn[8], dd[16], pl[32];
    snprintf(nn, sizeof nn, "%d", nodes);
    snprintf(dd, sizeof dd, "cpu:%d", devs);
    if (devs == 1)
      snprintf(pl, sizeof pl, "cpu:0-%d/0", nodes - 1);
    else
      snprintf(pl, sizeof pl, "cpu:0-%d/0-%d", nodes - 1, devs - 1);
    for (int l = 0; l < 3; l++) {
      if (!strcmp(layouts[l], "hybrid") && (nodes * devs) % 2) continue;
      double got[STEPS];
      run(ex, nn, dd, pl, layouts[l], got);
      for (int k = 0; k < STEPS; k++) {
        printf("%s %s on %s: step %d loss %.7f (one device %.7f)\n", ex->name,
               layouts[l], pl, k, got[k], ref[k]);
        if (fabs(got[k] - ref[k]) > TOL * fabs(ref[k]))
          fail_msg("%s %s on %s: step %d loss %.9g, one device %.9g", ex->name,
                   layouts[l], pl, k, got[k], ref[k]);
      }
    }
  }
}

/* A program reading .npy files: the daemons open the same files (the
 * graph carries their absolute paths) and train to the same losses. */
static void test_npy_data(void **state) {
  (void)state;
  char dir[] = "/tmp/sluice-npy-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char xp[128], lp[128], data[300];
  snprintf(xp, sizeof xp, "%s/x.npy", dir);
  snprintf(lp, sizeof lp, "%s/labels.npy", dir);
  enum { N = 512, IN = 32 };
  static float x[N * IN];
  static int32_t y[N];
  for (int i = 0; i < N * IN; i++)
    x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  for (int i = 0; i < N; i++)
    y[i] = (i * 7) % 10;
  sl_shape xs = {2, {N, IN}}, ys = {1, {N}};
  assert_int_equal(sl__npy_write(xp, SL_DTYPE_F32, &xs, x), SL_OK);
  assert_int_equal(sl__npy_write(lp, SL_DTYPE_I32, &ys, y), SL_OK);
  snprintf(data, sizeof data, "%s,%s", xp, lp);
  example ex = {
      "mlp-npy", SLUICE_MLP_PATH, {"--hidden", "64", "--data", data, NULL}};
  double ref[STEPS], got[STEPS];
  run(&ex, NULL, NULL, "cpu:1", "single", ref);
  run(&ex, "2", "cpu:1", "cpu:0-1/0", "dp", got);
  for (int k = 0; k < STEPS; k++) {
    printf("npy dp on cpu:0-1/0: step %d loss %.7f (one device %.7f)\n", k,
           got[k], ref[k]);
    if (fabs(got[k] - ref[k]) > TOL * fabs(ref[k]))
      fail_msg("npy: step %d loss %.9g, one device %.9g", k, got[k], ref[k]);
  }
  unlink(xp);
  unlink(lp);
  rmdir(dir);
}

/* The daemons run the program's plan as submitted, never lowering the
 * graph themselves: a program that plans without memory sharing
 * (SLUICE_MEMORY_SHARING=0, which the daemons do not see) still trains on
 * them, to the same losses. */
static void test_program_plan(void **state) {
  (void)state;
  double ref[STEPS], got[STEPS];
  run(&examples[0], NULL, NULL, "cpu:1", "single", ref);
  const char *argv[] = {SLUICE_CLI_PATH,
                        "launch",
                        "--nnodes",
                        "2",
                        "--devices",
                        "cpu:1",
                        "--",
                        "/usr/bin/env",
                        "SLUICE_MEMORY_SHARING=0",
                        SLUICE_MLP_PATH,
                        "--devices",
                        "cpu:0-1/0",
                        "--layout",
                        "dp",
                        "--steps",
                        "4",
                        "--hidden",
                        "64",
                        "--in",
                        "32",
                        NULL};
  cli_result r;
  assert_int_equal(cli_run(argv[0], argv, &r), 0);
  if (r.status != 0 || parse_losses(r.out, got, STEPS) != STEPS)
    fail_msg("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.out, r.err);
  cli_result_free(&r);
  for (int k = 0; k < STEPS; k++)
    if (fabs(got[k] - ref[k]) > TOL * fabs(ref[k]))
      fail_msg("step %d loss %.9g, one device %.9g", k, got[k], ref[k]);
}

static void test_mlp(void **state) {
  (void)state;
  matrix(&examples[0]);
}

static void test_gpt(void **state) {
  (void)state;
  matrix(&examples[1]);
}

/* Pipeline stages on separate daemons (docs/pipeline.md): the stage
 * edges go over the data plane and the losses are those of one device
 * without micro-batches. Two and three daemons with one stage each, and
 * dp x pp (two devices per stage node). */
static void test_pipeline_across_nodes(void **state) {
  (void)state;
  static const struct {
    const char *nodes, *devs, *placement, *layout, *pp, *schedule;
  } cases[] = {
      {"2", "cpu:1", "cpu:0-1/0", "single", "2", "1f1b"},
      {"3", "cpu:1", "cpu:0-2/0", "single", "3", "gpipe"},
      {"2", "cpu:2", "cpu:0-1/0-1", "dp", "2", "zero-bubble"},
  };
  for (size_t e = 0; e < 2; e++) {
    double ref[STEPS];
    run(&examples[e], NULL, NULL, "cpu:1", "single", ref);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      const char *more[] = {"--pp",       cases[c].pp,       "--micro", "4",
                            "--schedule", cases[c].schedule, NULL};
      double got[STEPS];
      run_with(&examples[e], cases[c].nodes, cases[c].devs, cases[c].placement,
               cases[c].layout, more, got);
      for (int k = 0; k < STEPS; k++) {
        printf("%s pp %s %s %s on %s: step %d loss %.7f (one device %.7f)\n",
               examples[e].name, cases[c].pp, cases[c].schedule,
               cases[c].layout, cases[c].placement, k, got[k], ref[k]);
        if (fabs(got[k] - ref[k]) > TOL * fabs(ref[k]))
          fail_msg("%s pp %s on %s: step %d loss %.9g, one device %.9g",
                   examples[e].name, cases[c].pp, cases[c].placement, k, got[k],
                   ref[k]);
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_gpt),
      cmocka_unit_test(test_npy_data),
      cmocka_unit_test(test_program_plan),
      cmocka_unit_test(test_pipeline_across_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
