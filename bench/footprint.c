/* What a small CPU job costs before any compute: sluice against PyTorch,
 * side by side in one run.
 *
 *   peak RSS of a small training run: examples/mlp (4 hidden layers of 64,
 *     batch 32, 20 SGD steps, one CPU device) against the same MLP in
 *     PyTorch (bench/peers/mlp_torch.py single);
 *   start-up of the launcher: `sluice --help` against `torchrun --help`.
 *
 * Each command runs as a child; its peak RSS is the kernel's ru_maxrss and
 * its time the wall clock from fork to exit, the median of --runs runs.
 * With a CUDA build, the sluice rows also hold for it: a CPU program never
 * opens the CUDA module. usage: bench_footprint [--runs N] [--python P] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#ifndef FOOTPRINT_MLP
#define FOOTPRINT_MLP "examples/mlp"
#endif
#ifndef FOOTPRINT_CLI
#define FOOTPRINT_CLI "sluice"
#endif
#ifndef FOOTPRINT_TORCH_PEER
#define FOOTPRINT_TORCH_PEER "mlp_torch.py"
#endif

typedef struct cost {
  double rss_mib, ms;
  bool ok;
} cost;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Runs argv once, its output discarded: peak RSS and wall time. */
static cost run_once(char *const *argv) {
  cost c = {0};
  double t0 = now_ms();
  pid_t pid = fork();
  if (pid < 0) return c;
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout) ||
        !freopen("/dev/null", "w", stderr))
      _exit(127);
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid) return c;
  c.ms = now_ms() - t0;
  c.rss_mib = (double)ru.ru_maxrss / 1024.0;
  c.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return c;
}

/* The median over runs; !ok when any run failed. */
static cost run(char *const *argv, int runs) {
  double rss[64], ms[64];
  cost out = {.ok = true};
  for (int i = 0; i < runs; i++) {
    cost c = run_once(argv);
    if (!c.ok) {
      fprintf(stderr, "bench_footprint: '%s' failed\n", argv[0]);
      return (cost){0};
    }
    rss[i] = c.rss_mib;
    ms[i] = c.ms;
  }
  out.rss_mib = bench_median(rss, runs);
  out.ms = bench_median(ms, runs);
  return out;
}

static void row(const char *what, const char *unit, double ours,
                const char *peer, double theirs, bool have_peer) {
  if (have_peer)
    printf("| %s | %.1f %s | %s %.1f %s | %.3f |\n", what, ours, unit, peer,
           theirs, unit, ours / theirs);
  else
    printf("| %s | %.1f %s | %s: not run | |\n", what, ours, unit, peer);
}

int main(int argc, char **argv) {
  int runs = 5;
  const char *python = getenv("SLUICE_PYTHON");
  if (!python) python = "python3";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: bench_footprint [--runs N] [--python PYTHON]\n"
             "Peak RSS of a small CPU training run and the launcher's "
             "start-up,\nsluice against PyTorch (median of N runs, default "
             "5).\n");
      return 0;
    }
    if (i + 1 < argc && strcmp(argv[i], "--runs") == 0) {
      runs = atoi(argv[++i]);
    } else if (i + 1 < argc && strcmp(argv[i], "--python") == 0) {
      python = argv[++i];
    } else {
      fprintf(stderr, "bench_footprint: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (runs < 1 || runs > 64) {
    fprintf(stderr, "bench_footprint: --runs wants 1 to 64\n");
    return 2;
  }
  char *mlp[] = {FOOTPRINT_MLP, "--steps", "20", "--hidden", "64", "--in",
                 "64",          "--batch", "32", "--layers", "4",  NULL};
  char *torch_mlp[] = {(char *)python,
                       FOOTPRINT_TORCH_PEER,
                       "single",
                       "--steps",
                       "20",
                       "--hidden",
                       "64",
                       "--in",
                       "64",
                       "--batch",
                       "32",
                       "--layers",
                       "4",
                       "--warmup",
                       "0",
                       NULL};
  char *help[] = {FOOTPRINT_CLI, "--help", NULL};
  char *torchrun[] = {"torchrun", "--help", NULL};
  cost ours_mlp = run(mlp, runs), ours_help = run(help, runs);
  if (!ours_mlp.ok || !ours_help.ok) return 1;
  cost peer_mlp = run(torch_mlp, runs), peer_help = run(torchrun, runs);
  printf("| what | sluice | PyTorch | ratio |\n|---|---|---|---|\n");
  row("peak RSS, MLP 4x64 batch 32, 20 steps on one CPU", "MiB",
      ours_mlp.rss_mib, "same MLP:", peer_mlp.rss_mib, peer_mlp.ok);
  row("wall time of that run", "ms", ours_mlp.ms, "same MLP:", peer_mlp.ms,
      peer_mlp.ok);
  row("`sluice --help`", "ms", ours_help.ms, "`torchrun --help`:", peer_help.ms,
      peer_help.ok);
  row("peak RSS of `--help`", "MiB", ours_help.rss_mib,
      "`torchrun --help`:", peer_help.rss_mib, peer_help.ok);
  return 0;
}
