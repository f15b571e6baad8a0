/* bench_mlp_dp_vs_ddp: the examples' MLP (4 hidden layers of 1024, global
 * batch 256, softmax cross-entropy, plain SGD) trained data parallel on 2
 * nodes x 1 CPU device — `sluice launch --nnodes 2 --devices cpu:1` with
 * examples/mlp on cpu:0-1/0, so the gradients' all-reduce crosses the data
 * plane between two daemon processes — against PyTorch
 * DistributedDataParallel over gloo in 2 processes (bench/peers/
 * mlp_torch.py ddp), one thread per process on both sides.
 *
 * The two alternate, round after round, so that both meet the same
 * machine load; the table gives each side's median samples/s over the
 * rounds and the ratio (target: sluice >= 1.6x DDP). PyTorch runs with
 * OPENBLAS_CORETYPE set to the kernel set sluice's BLAS uses.
 *
 * Usage: bench_mlp_dp_vs_ddp [--steps N] [--rounds R] [--python PATH]
 *        [--no-torch] (--help) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blas.h"
#include "bench_util.h"

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

static void usage(FILE *f) {
  fprintf(f, "usage: bench_mlp_dp_vs_ddp [--steps N] [--rounds R] "
             "[--python PATH] [--no-torch]\n"
             "The 4x1024 MLP, global batch 256, data parallel on 2 nodes x 1 "
             "device\n(sluice launch + examples/mlp) against PyTorch DDP over "
             "gloo in 2 processes.\n"
             "  --steps N     training steps per run (default 100; the first is "
             "not timed)\n"
             "  --rounds R    alternating runs of each side (default 3)\n"
             "  --python P    the interpreter with torch (default "
             "/usr/bin/python3)\n"
             "  --no-torch    sluice only\n");
}

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
  const char *core = sl__blas_coretype();
  char sl_cmd[2048], pt_cmd[2048];
  snprintf(sl_cmd, sizeof sl_cmd,
           "'%s' launch --nnodes 2 --devices cpu:1 -- '%s' --devices "
           "cpu:0-1/0 --layout dp --batch 256 --steps %ld 2>/dev/null",
           SLUICE_CLI_PATH, SLUICE_MLP_PATH, steps);
  snprintf(pt_cmd, sizeof pt_cmd,
           "OPENBLAS_CORETYPE=%s OMP_NUM_THREADS=1 '%s' '%s' ddp --world 2 "
           "--batch 256 --steps %ld 2>/dev/null",
           core && core[0] ? core : "", python, MLP_TORCH_PEER, steps - 1);
  printf("sluice: %s\n", sl_cmd);
  if (torch) printf("PyTorch: %s\n", pt_cmd);
  double sl_sps[50], pt_sps[50], sl_ms[50], pt_ms[50];
  for (long r = 0; r < rounds; r++) {
    run_parse(sl_cmd, "throughput:", "throughput: %lf samples/s, %lf",
              &sl_sps[r], &sl_ms[r]);
    if (torch)
      run_parse(pt_cmd, "torch ddp",
                "torch ddp samples_per_s %lf ms_per_step %lf", &pt_sps[r],
                &pt_ms[r]);
    printf("round %ld: sluice %.1f samples/s (%.2f ms/step)", r + 1, sl_sps[r],
           sl_ms[r]);
    if (torch)
      printf(", DDP %.1f samples/s (%.2f ms/step)", pt_sps[r], pt_ms[r]);
    printf("\n");
  }
  double s = bench_median(sl_sps, (int)rounds),
         sm = bench_median(sl_ms, (int)rounds);
  printf("\n%-46s %12s %12s %8s\n", "MLP 4x1024, batch 256, 2 nodes x 1 device",
         "ms/step", "samples/s", "ratio");
  printf("%-46s %12.2f %12.1f %8s\n", "sluice dp (2 daemons, data plane)", sm,
         s, "1.000");
  if (torch) {
    double p = bench_median(pt_sps, (int)rounds),
           pm = bench_median(pt_ms, (int)rounds);
    printf("%-46s %12.2f %12.1f %8.3f\n", "PyTorch DDP (gloo, 2 processes)", pm,
           p, s / p);
    printf("(ratio: sluice samples/s over PyTorch's; target >= 1.6)\n");
  }
  return isnan(s) ? 1 : 0;
}
