/* bench_checkpoint: saving and restoring a model's state, against the
 * disk and against PyTorch, in one run on one machine:
 *
 *   state     `--tensors` / 3 weights of [rows, 1024] f32 trained with Adam
 *             (each weight with its m and v): 24 tensors of [2048, 1024],
 *             192 MiB, by default
 *   layouts   "1 device": cpu:0; "4 devices": cpu:0-3, every tensor S(0)
 *   save      sl_session_save into a fresh directory (a safetensors file
 *             and index.json, fsync'd and renamed into place)
 *   restore   sl_session_restore of that checkpoint into a new session of
 *             the same layout (the files are in the page cache, as
 *             torch.load's are)
 *   disk      dd if=/dev/zero bs=4M conv=fsync of the same number of
 *             bytes into the same directory: the disk's sequential write
 *   PyTorch   bench/peers/checkpoint_torch.py: torch.save of the same
 *             tensors then fsync, and torch.load
 *   background  the cost of sl_session_save_async to a training loop:
 *             the time of `--steps` steps with one background save started
 *             at their first step (and waited for after the last), against
 *             the same steps without, run side by side in alternating
 *             order; the cost is the median over the pairs of their
 *             ratio. The snapshot is taken between steps and counts
 *
 * Every figure is the median of `--repeats` runs. GB/s are 1e9 bytes per
 * second of the state's bytes. Targets: save >= 0.8x the disk and faster
 * than torch.save; the background save costs <= 5% of the steps' time; a
 * "!" marks a miss.
 *
 * Usage: bench_checkpoint [--dir DIR] [--tensors N] [--rows R]
 *        [--repeats K] [--steps S] [--python PATH] [--no-torch] (--help)
 * Exit status 0, 1 when a save or restore failed, 2 for bad flags. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sluice/sluice.h>

#include "bench_util.h"

#ifndef CHECKPOINT_TORCH_PEER
#define CHECKPOINT_TORCH_PEER "bench/peers/checkpoint_torch.py"
#endif

#define COLS 1024

static int n_weights = 8, rows = 2048, repeats = 5, steps = 50;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* n_weights weights, loss = sum of mean(w^2); Adam. */
static sl_graph *model(const char *placement, const char *sbp) {
  sl_graph *g = NULL;
  if (sl_graph_create(&g) != SL_OK ||
      sl_graph_set_default_placement(g, placement) != SL_OK)
    return NULL;
  sl_tensor loss = {0};
  for (int i = 0; i < n_weights; i++) {
    char name[32];
    snprintf(name, sizeof name, "w%d", i);
    sl_tensor w =
        sl_variable(g, name, &SL_SHAPE(rows, COLS), SL_DTYPE_F32,
                    sl_init_uniform(-1, 1, (uint64_t)i + 1), NULL, sbp);
    sl_tensor l = sl_reduce_mean(sl_square(w), 0, NULL, false);
    loss = i ? sl_add(loss, l) : l;
  }
  sl_optimizer o = sl_optimizer_adam(1e-3);
  sl_minimize(loss, &o);
  if (sl_graph_status(g) != SL_OK) {
    fprintf(stderr, "bench_checkpoint: graph: %s\n", sl_graph_error(g));
    sl_graph_destroy(g);
    return NULL;
  }
  return g;
}

typedef struct layout_result {
  double save_s, restore_s, steps_s, steps_bg_s;
  double bg_cost; /* the median over pairs of with / without - 1 */
  bool ok;
} layout_result;

static bool run(sl_session *s, int n) {
  if (sl_session_run(s, n) == SL_OK) return true;
  fprintf(stderr, "bench_checkpoint: run: %s\n", sl_last_error());
  return false;
}

static layout_result measure(const char *placement, const char *sbp,
                             const char *dir) {
  layout_result r = {0};
  double save[16], restore[16], plain[16], bg[16], cost[16];
  sl_graph *g = model(placement, sbp);
  sl_session *s = NULL;
  if (!g || sl_session_create(g, NULL, &s) != SL_OK) {
    fprintf(stderr, "bench_checkpoint: session: %s\n", sl_last_error());
    goto out;
  }
  if (!run(s, 2)) goto out;
  for (int k = 0; k < repeats; k++) {
    char d[1024];
    snprintf(d, sizeof d, "%s/sluice_%s_%d", dir, placement, k);
    double t0 = now_s();
    if (sl_session_save(s, d) != SL_OK) {
      fprintf(stderr, "bench_checkpoint: save: %s\n", sl_last_error());
      goto out;
    }
    save[k] = now_s() - t0;
    sl_graph *g2 = model(placement, sbp);
    sl_session *s2 = NULL;
    if (!g2 || sl_session_create(g2, NULL, &s2) != SL_OK) goto out;
    t0 = now_s();
    sl_status st = sl_session_restore(s2, d);
    restore[k] = now_s() - t0;
    sl_session_destroy(s2);
    sl_graph_destroy(g2);
    if (st != SL_OK) {
      fprintf(stderr, "bench_checkpoint: restore: %s\n", sl_last_error());
      goto out;
    }
    /* Training with and without a background save, side by side, in
     * alternating order (the machine's speed drifts). */
    for (int with = 0; with < 2; with++) {
      bool save_now = (with + k) % 2 == 1;
      t0 = now_s();
      if ((save_now && sl_session_save_async(s, d) != SL_OK) ||
          !run(s, steps) || (save_now && sl_session_save_wait(s) != SL_OK)) {
        fprintf(stderr, "bench_checkpoint: background save: %s\n",
                sl_last_error());
        goto out;
      }
      *(save_now ? &bg[k] : &plain[k]) = now_s() - t0;
    }
    cost[k] = bg[k] / plain[k] - 1;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) != 0) fprintf(stderr, "bench_checkpoint: %s failed\n", cmd);
  }
  r.save_s = bench_median(save, repeats);
  r.restore_s = bench_median(restore, repeats);
  r.steps_s = bench_median(plain, repeats);
  r.steps_bg_s = bench_median(bg, repeats);
  r.bg_cost = bench_median(cost, repeats);
  r.ok = true;
out:
  sl_session_destroy(s);
  sl_graph_destroy(g);
  return r;
}

/* dd's sequential write with fsync of `bytes` into dir: seconds. */
static double disk_write_s(const char *dir, int64_t bytes) {
  double v[16];
  for (int k = 0; k < repeats; k++) {
    char cmd[1600];
    snprintf(cmd, sizeof cmd,
             "dd if=/dev/zero of='%s/dd.bin' bs=4M count=%lld conv=fsync "
             "status=none && rm -f '%s/dd.bin'",
             dir, (long long)((bytes + (4 << 20) - 1) / (4 << 20)), dir);
    double t0 = now_s();
    if (system(cmd) != 0) return -1;
    v[k] = now_s() - t0;
  }
  return bench_median(v, repeats);
}

/* torch.save + fsync and torch.load of the same tensors: seconds each. */
static bool torch_times(const char *python, const char *dir, double *save_s,
                        double *load_s, char *why, size_t n) {
  char tensors[16], rs[16], rep[16];
  snprintf(tensors, sizeof tensors, "%d", 3 * n_weights);
  snprintf(rs, sizeof rs, "%d", rows);
  snprintf(rep, sizeof rep, "%d", repeats);
  const char *argv[] = {python,      CHECKPOINT_TORCH_PEER,
                        "--dir",     dir,
                        "--tensors", tensors,
                        "--rows",    rs,
                        "--repeats", rep,
                        NULL};
  bench_peer p;
  if (!bench_peer_start(argv, &p, why, n)) return false;
  double sv[16], lv[16];
  int got = 0;
  char line[256];
  while (got < repeats && fgets(line, sizeof line, p.out))
    if (sscanf(line, "torch save_s %lf load_s %lf", &sv[got], &lv[got]) == 2)
      got++;
  int rc = bench_peer_wait(&p);
  if (got < repeats || rc != 0) {
    snprintf(why, n, "%s exited %d after %d results (torch missing?)",
             CHECKPOINT_TORCH_PEER, rc, got);
    return false;
  }
  *save_s = bench_median(sv, repeats);
  *load_s = bench_median(lv, repeats);
  return true;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_checkpoint [--dir DIR] [--tensors N] [--rows R] "
          "[--repeats K]\n"
          "                        [--steps S] [--python PATH] [--no-torch]\n"
          "Saves and restores a model's state (N f32 tensors of [R, 1024]: "
          "weights\nwith Adam's m and v; N a multiple of 3, default 24, R "
          "2048) on 1 and 4\ndevices, against dd with fsync and torch.save "
          "in the same run; and the\ncost of a background save to S "
          "training steps (default 50). DIR: where\nfiles go (default "
          "/tmp). The median of K runs (default 5).\n");
}

static bool int_flag(const char *v, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || errno || *end || x < lo || x > hi) return false;
  *out = (int)x;
  return true;
}

int main(int argc, char **argv) {
  const char *base = "/tmp", *python = "/usr/bin/python3";
  bool no_torch = false;
  int tensors = 24;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--dir") == 0 && v) {
      base = v, i++;
    } else if (strcmp(a, "--python") == 0 && v) {
      python = v, i++;
    } else if (strcmp(a, "--no-torch") == 0) {
      no_torch = true;
    } else if (strcmp(a, "--tensors") == 0) {
      ok = int_flag(v, 3, 3000, &tensors) && tensors % 3 == 0, i++;
    } else if (strcmp(a, "--rows") == 0) {
      ok = int_flag(v, 4, 1 << 20, &rows), i++;
    } else if (strcmp(a, "--repeats") == 0) {
      ok = int_flag(v, 1, 16, &repeats), i++;
    } else if (strcmp(a, "--steps") == 0) {
      ok = int_flag(v, 1, 100000, &steps), i++;
    } else {
      ok = false;
    }
    if (!ok) {
      fprintf(stderr, "bench_checkpoint: bad flag '%s'%s%s\n", a, v ? " " : "",
              v ? v : "");
      usage(stderr);
      return 2;
    }
  }
  n_weights = tensors / 3;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/bench_checkpoint_XXXXXX", base);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "bench_checkpoint: mkdtemp in '%s': %s\n", base,
            strerror(errno));
    return 2;
  }
  int64_t bytes = (int64_t)tensors * rows * COLS * 4;
  printf("bench_checkpoint: %d tensors of [%d, %d] f32, %.1f MiB, in %s; "
         "median of %d\n",
         tensors, rows, COLS, (double)bytes / (1 << 20), dir, repeats);
  fflush(stdout);
  double disk = disk_write_s(dir, bytes);
  double tsave = 0, tload = 0;
  char why[512] = "--no-torch";
  bool torch =
      !no_torch && torch_times(python, dir, &tsave, &tload, why, sizeof why);
  const char *names[] = {"1 device", "4 devices"};
  const char *pls[] = {"cpu:0", "cpu:0-3"}, *sbps[] = {"B", "S(0)"};
  layout_result res[2];
  for (int l = 0; l < 2; l++)
    res[l] = measure(pls[l], sbps[l], dir);
  double gb = (double)bytes / 1e9;
  printf("\n| what | sluice GB/s | disk (dd, fsync) GB/s | sluice / disk | "
         "torch GB/s | sluice / torch |\n|---|---|---|---|---|---|\n");
  bool failed = false;
  for (int l = 0; l < 2; l++) {
    if (!res[l].ok) {
      failed = true;
      continue;
    }
    double s = gb / res[l].save_s, d = disk > 0 ? gb / disk : 0;
    double r = gb / res[l].restore_s;
    char tcol[32] = "-", tr[32] = "-", tcol2[32] = "-", tr2[32] = "-";
    if (torch) {
      snprintf(tcol, sizeof tcol, "%.2f", gb / tsave);
      snprintf(tr, sizeof tr, "%.2f%s", (gb / res[l].save_s) / (gb / tsave),
               res[l].save_s > tsave ? " !" : "");
      snprintf(tcol2, sizeof tcol2, "%.2f", gb / tload);
      snprintf(tr2, sizeof tr2, "%.2f", r / (gb / tload));
    }
    printf("| save, %s | %.2f | %.2f | %.2f%s | %s | %s |\n", names[l], s, d,
           d > 0 ? s / d : 0, d > 0 && s / d < 0.8 ? " !" : "", tcol, tr);
    printf("| restore, %s | %.2f | | | %s (load) | %s |\n", names[l], r, tcol2,
           tr2);
  }
  printf("\n| background save | %d steps, s | with a save, s | cost (median "
         "of pairs) |\n"
         "|---|---|---|---|\n",
         steps);
  for (int l = 0; l < 2; l++) {
    if (!res[l].ok) continue;
    double cost = res[l].bg_cost;
    printf("| %s | %.3f | %.3f | %+.1f%%%s |\n", names[l], res[l].steps_s,
           res[l].steps_bg_s, 100 * cost, cost > 0.05 ? " !" : "");
  }
  if (!torch) printf("\nPyTorch not measured: %s\n", why);
  rmdir(dir);
  return failed ? 1 : 0;
}
