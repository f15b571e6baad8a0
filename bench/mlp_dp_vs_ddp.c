/* bench_mlp_dp_vs_ddp: the examples' MLP (4 hidden layers of 1024, global
 * batch 256, softmax cross-entropy, plain SGD) trained data parallel on 2
 * nodes x 1 CPU device — `sluice launch --nnodes 2 --devices cpu:1` with
 * examples/mlp on cpu:0-1/0, so the gradients' all-reduce crosses the data
 * plane between two daemon processes — against PyTorch
 * DistributedDataParallel over gloo in 2 processes (bench/peers/
 * mlp_torch.py ddp), one thread per process on both sides.
 *
 * The peer trains on one fixed random batch. So does the first sluice row:
 * a batch of the same shape and kind (N(0,1) features, labels uniform over
 * the classes), written to two .npy files that examples/mlp reads with
 * --data. The second row is examples/mlp as it comes, generating a fresh
 * batch inside the graph every step (a Gaussian mixture: more work than
 * the peer does, about 0.3 ms a step here).
 *
 * The runs alternate, round after round, so that all meet the same
 * machine load; the table gives each one's median samples/s over the
 * rounds and its ratio to DDP's (target: the fixed batch >= 1.6x DDP).
 * PyTorch runs with OPENBLAS_CORETYPE set to the kernel set sluice's BLAS
 * uses.
 *
 * Usage: bench_mlp_dp_vs_ddp [--steps N] [--rounds R] [--python PATH]
 *        [--no-torch] (--help) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sluice/graph.h>

#include "cpu/blas.h"
#include "cpu/npy.h"
#include "bench_util.h"

#define BATCH 256
#define FEATURES 1024 /* examples/mlp's --in */
#define CLASSES 10    /* and --classes */

#ifndef MLP_TORCH_PEER
#define MLP_TORCH_PEER "bench/peers/mlp_torch.py"
#endif

/* Runs cmd through the shell; the first line starting with `key` is
 * parsed with fmt into *a and *b. NAN, NAN when absent. */
static void run_parse(const char *cmd, const char *key, const char *fmt,
                      double *a, double *b) {
  *a = *b = NAN;
  FILE *p = popen(cmd, "r");
  if (!p) {
    perror("popen");
    return;
  }
  char line[1024];
  while (fgets(line, sizeof line, p)) {
    const char *at = strstr(line, key);
    if (at && isnan(*a) && sscanf(at, fmt, a, b) != 2) *a = *b = NAN;
  }
  int st = pclose(p);
  if (st != 0) fprintf(stderr, "bench: '%s' exited with %d\n", cmd, st);
}

/* One fixed batch, as the peer's torch.randn / torch.randint: into
 * DIR/x.npy and DIR/y.npy. False with a message on failure. */
static bool write_batch(const char *dir) {
  float *x = malloc(sizeof(float) * BATCH * FEATURES);
  int32_t y[BATCH];
  if (!x) return false;
  uint64_t z = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < BATCH * FEATURES; i += 2) {
    /* splitmix64, two uniforms, Box-Muller */
    double u[2];
    for (int k = 0; k < 2; k++) {
      uint64_t v = (z += 0x9e3779b97f4a7c15ull);
      v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
      v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
      u[k] = ((double)((v ^ (v >> 31)) >> 11) + 0.5) / 9007199254740992.0;
    }
    double r = sqrt(-2 * log(u[0]));
    x[i] = (float)(r * cos(2 * M_PI * u[1]));
    x[i + 1] = (float)(r * sin(2 * M_PI * u[1]));
  }
  for (int i = 0; i < BATCH; i++)
    y[i] = (int32_t)((unsigned)(i * 7919 + 13) % CLASSES);
  char xp[512], yp[512];
  snprintf(xp, sizeof xp, "%s/x.npy", dir);
  snprintf(yp, sizeof yp, "%s/y.npy", dir);
  sl_shape xs = SL_SHAPE(BATCH, FEATURES), ys = SL_SHAPE(BATCH);
  bool ok = sl__npy_write(xp, SL_DTYPE_F32, &xs, x) == SL_OK &&
            sl__npy_write(yp, SL_DTYPE_I32, &ys, y) == SL_OK;
  if (!ok) fprintf(stderr, "bench: writing the batch: %s\n", sl_last_error());
  free(x);
  return ok;
}

static void remove_batch(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/x.npy", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/y.npy", dir);
  unlink(path);
  rmdir(dir);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_mlp_dp_vs_ddp [--steps N] [--rounds R] "
          "[--python PATH] [--no-torch]\n"
          "The 4x1024 MLP, global batch 256, data parallel on 2 nodes x 1 "
          "device\n(sluice launch + examples/mlp) against PyTorch DDP over "
          "gloo in 2 processes,\nboth on one fixed batch; sluice also "
          "with a batch generated every step.\n"
          "  --steps N     training steps per run (default 100; the first is "
          "not timed)\n"
          "  --rounds R    alternating runs of each (default 3)\n"
          "  --python P    the interpreter with torch (default "
          "/usr/bin/python3)\n"
          "  --no-torch    sluice only\n");
}

enum { FIXED, FRESH, DDP, RUNS };

int main(int argc, char **argv) {
  long steps = 100, rounds = 3;
  const char *python = "/usr/bin/python3";
  int torch = 1;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--steps") && v) {
      steps = strtol(v, NULL, 10);
      i++;
    } else if (!strcmp(argv[i], "--rounds") && v) {
      rounds = strtol(v, NULL, 10);
      i++;
    } else if (!strcmp(argv[i], "--python") && v) {
      python = v;
      i++;
    } else if (!strcmp(argv[i], "--no-torch")) {
      torch = 0;
    } else {
      fprintf(stderr, "bench_mlp_dp_vs_ddp: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (steps < 2 || rounds < 1 || rounds > 50) {
    fprintf(stderr, "bench_mlp_dp_vs_ddp: --steps >= 2, --rounds 1..50\n");
    return 2;
  }
  char dir[] = "/tmp/sluice-bench-mlp-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("bench_mlp_dp_vs_ddp: mkdtemp");
    return 1;
  }
  if (!write_batch(dir)) {
    remove_batch(dir);
    return 1;
  }
  const char *core = sl__blas_coretype();
  char cmd[RUNS][2048];
  const char *label[RUNS] = {"sluice dp, one fixed batch (as DDP)",
                             "sluice dp, a batch generated each step",
                             "PyTorch DDP (gloo), one fixed batch"};
  for (int k = FIXED; k <= FRESH; k++) {
    char data[600] = "";
    if (k == FIXED)
      snprintf(data, sizeof data, " --data '%s/x.npy,%s/y.npy'", dir, dir);
    snprintf(cmd[k], sizeof cmd[k],
             "'%s' launch --nnodes 2 --devices cpu:1 -- '%s' --devices "
             "cpu:0-1/0 --layout dp --threads 1 --batch %d --in %d "
             "--classes %d --steps %ld%s 2>/dev/null",
             SLUICE_CLI_PATH, SLUICE_MLP_PATH, BATCH, FEATURES, CLASSES, steps,
             data);
  }
  snprintf(cmd[DDP], sizeof cmd[DDP],
           "OPENBLAS_CORETYPE=%s OMP_NUM_THREADS=1 '%s' '%s' ddp --world 2 "
           "--batch %d --in %d --classes %d --steps %ld 2>/dev/null",
           core && core[0] ? core : "", python, MLP_TORCH_PEER, BATCH, FEATURES,
           CLASSES, steps - 1);
  int runs = torch ? RUNS : DDP;
  for (int k = 0; k < runs; k++)
    printf("%s: %s\n", label[k], cmd[k]);
  double sps[RUNS][50], ms[RUNS][50];
  for (long r = 0; r < rounds; r++) {
    printf("round %ld:", r + 1);
    for (int k = 0; k < runs; k++) {
      if (k == DDP)
        run_parse(cmd[k], "torch ddp",
                  "torch ddp samples_per_s %lf ms_per_step %lf", &sps[k][r],
                  &ms[k][r]);
      else
        run_parse(cmd[k], "throughput:", "throughput: %lf samples/s, %lf",
                  &sps[k][r], &ms[k][r]);
      printf("%s %.2f ms/step", k ? "," : "", ms[k][r]);
      fflush(stdout);
    }
    printf("\n");
  }
  double med_sps[RUNS], med_ms[RUNS];
  for (int k = 0; k < runs; k++) {
    med_sps[k] = bench_median(sps[k], (int)rounds);
    med_ms[k] = bench_median(ms[k], (int)rounds);
  }
  printf("\n%-46s %12s %12s %8s\n", "MLP 4x1024, batch 256, 2 nodes x 1 device",
         "ms/step", "samples/s", "vs DDP");
  for (int k = 0; k < runs; k++) {
    printf("%-46s %12.2f %12.1f", label[k], med_ms[k], med_sps[k]);
    if (torch)
      printf(" %8.3f\n", med_sps[k] / med_sps[DDP]);
    else
      printf(" %8s\n", "-");
  }
  if (torch)
    printf("(vs DDP: samples/s over PyTorch DDP's; target >= 1.6 on one "
           "fixed batch)\n");
  remove_batch(dir);
  return isnan(med_sps[FIXED]) || isnan(med_sps[FRESH]) ? 1 : 0;
}
