/* bench_cpu_peers: training on the whole CPU machine, one table per model,
 * sluice against JAX (XLA:CPU) and PyTorch in one run.
 *
 * Models (the examples' own, built in this process):
 *   mlp      4 hidden layers of 1024, batch 256, softmax cross-entropy, SGD,
 *            on one fixed batch fed once (as the peers do)
 *   gpt      examples/gpt's defaults (batch 8, seq 32, hidden 64, 4 heads,
 *            2 layers, vocab 64), tied head, Adam; sluice and PyTorch draw
 *            a new batch of tokens every step, JAX trains on a fixed one
 *   gpt-256  the same with 4 layers of hidden 256 and seq 128
 *
 * Rows, for an n-core machine:
 *   sluice   one device with one thread (the one-thread reference), then
 *            every layout and split that fills the machine: single on one
 *            device of n threads; dp and tp on d devices of n/d threads for
 *            every d > 1 dividing n; hybrid for even d >= 4
 *   JAX      bench/peers/cpu_jax.py in a virtual environment under the
 *            build folder (created on first use by bench/peers/install.sh):
 *            one device on one thread, one device on every core, and dp and
 *            tp on n host devices (XLA_FLAGS
 *            --xla_force_host_platform_device_count=n, NamedSharding)
 *   PyTorch  Debian's python3-torch: 1 thread; n threads as a user gets
 *            them (torch.set_num_threads(n), OpenBLAS's pool n wide); torch
 *            on 1 thread with OpenBLAS on n (its matmuls run in the system
 *            OpenBLAS, whose pool torch.set_num_threads does not reach:
 *            PyTorch's fastest setting here); data parallel in n one-thread
 *            processes over gloo (mlp: DistributedDataParallel; gpt, not an
 *            nn.Module: one all-reduce of all gradients per step)
 *
 * Every row runs `--rounds` times, the rows of a round one after the other,
 * so that all meet the same drift in machine load; a row's time is the
 * median over rounds of its mean step time (sluice) or median step time
 * (peers), after warm-up steps (compilation included for JAX). Columns:
 * ms/step, the speed against JAX's best row (JAX ms / row ms: above 1 is
 * faster), and for sluice's parallel rows the share of the ideal (the
 * one-thread time / n, over the row's time). Targets (issue 23): sluice's
 * best >= 1.0x JAX's best; dp and tp on 2 devices >= 0.9 of the ideal.
 *
 * PyTorch runs with OPENBLAS_CORETYPE set to the kernel set sluice's BLAS
 * uses, so both sides multiply with the same sgemm kernels.
 *
 * Usage: bench_cpu_peers [--model mlp|gpt|gpt-256|all] [--steps N]
 *        [--rounds R] [--no-jax] [--no-torch] [--python PATH] (--help) */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sluice/graph.h>
#include <sluice/session.h>

#include "common/ex_flags.h"
#include "common/ex_run.h"
#include "core_team.h"
#include "core_thread.h"
#include "cpu/blas.h"
#include "gpt/model.h"
#include "mlp/model.h"
#include "bench_util.h"

#define MAX_ROWS 32
#define MAX_ROUNDS 16

typedef enum { SYS_SLUICE, SYS_JAX, SYS_TORCH } sys_kind;

typedef struct row {
  sys_kind sys;
  char layout[16]; /* single, dp, tp, hybrid; torch: threads, ddp */
  int devices, threads;
  int blas; /* PyTorch: OpenBLAS's threads (OPENBLAS_NUM_THREADS) */
  double ms[MAX_ROUNDS];
  int n_ms;
  char why[256]; /* why a peer row has no number */
} row;

typedef struct model {
  const char *name, *what;
  bool gpt;
  int64_t batch, seq, hidden, heads, layers, vocab;
  /* timed steps per row and round unless --steps says: a fraction of a
   * second of the one-thread row, so a millisecond step is not timed over
   * a few dozen milliseconds of a noisy machine */
  int64_t steps;
} model;

static const model models[] = {
    {"mlp", "4 hidden layers of 1024, batch 256, SGD", false, 256, 0, 1024, 0,
     4, 0, 20},
    {"gpt", "examples' defaults: batch 8, seq 32, hidden 64, 2 layers, Adam",
     true, 8, 32, 64, 4, 2, 64, 300},
    {"gpt-256", "batch 8, seq 128, hidden 256, 4 layers, Adam", true, 8, 128,
     256, 4, 4, 64, 20},
};

typedef struct opts {
  const char *model, *python;
  int64_t steps, rounds;
  bool no_jax, no_torch;
  char venv_python[1024];
} opts;

static int64_t steps_of(const model *m, const opts *o) {
  return o->steps > 0 ? o->steps : m->steps;
}

/* ---- the cores' round trip ------------------------------------------------
 */

/* The round trip of a cache line between threads pinned to the first two
 * CPUs this process may use, in ns (median of 5 runs of 100000); NAN with
 * fewer than two. On a virtual machine it tells how far apart the vCPUs
 * sit now: on the 2-vCPU development machine about 100 ns at times and
 * 400 at others, and every crossing of the parallel rows (collectives,
 * messages, shared rows) costs more with it. */
typedef struct ping {
  _Alignas(64) atomic_int flag;
  int cpu;
} ping;

enum { ROUND_TRIPS = 100000 };

static void *pong(void *arg) {
  ping *p = arg;
  sl__pin_self(p->cpu);
  for (int i = 0; i < ROUND_TRIPS; i++) {
    while (atomic_load(&p->flag) != 2 * i + 1) {
    }
    atomic_store(&p->flag, 2 * i + 2);
  }
  return NULL;
}

static double core_round_trip_ns(void) {
  int cpus[2];
  cpu_set_t mine;
  if (sl__cpu_list(cpus, 2) < 2 ||
      pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) != 0)
    return NAN;
  double runs[5];
  int n = 0;
  sl__pin_self(cpus[0]);
  for (; n < 5; n++) {
    ping p = {.cpu = cpus[1]};
    atomic_init(&p.flag, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, pong, &p) != 0) break;
    uint64_t t0 = sl__now_ns();
    for (int i = 0; i < ROUND_TRIPS; i++) {
      atomic_store(&p.flag, 2 * i + 1);
      while (atomic_load(&p.flag) != 2 * i + 2) {
      }
    }
    runs[n] = (double)(sl__now_ns() - t0) / ROUND_TRIPS;
    pthread_join(t, NULL);
  }
  pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
  return n == 5 ? bench_median(runs, n) : NAN;
}

/* ---- sluice, in this process --------------------------------------------- */

static sl_status build(sl_graph *g, const model *m, const row *r,
                       char *placement, size_t n) {
  ex_layout layout;
  char devices[32];
  snprintf(devices, sizeof devices, "cpu:%d", r->devices);
  SL_CHECK(ex_layout_parse(r->layout, &layout));
  SL_CHECK(ex_layout_placement(layout, devices, placement, n));
  if (!m->gpt) {
    ex_mlp_config c = ex_mlp_defaults();
    c.batch = m->batch;
    c.hidden = m->hidden;
    c.layers = (int)m->layers;
    c.layout = layout;
    c.placement = placement;
    c.data = EX_MLP_DATA_FEED; /* one fixed batch, as the peers train on */
    return ex_mlp_build(g, &c);
  }
  ex_gpt_config c = ex_gpt_defaults();
  c.batch = m->batch;
  c.seq = m->seq;
  c.hidden = m->hidden;
  c.heads = m->heads;
  c.layers = (int)m->layers;
  c.vocab = m->vocab;
  c.tie = true;
  c.layout = layout;
  c.placement = placement;
  return ex_gpt_build(g, &c);
}

/* The mlp's fixed batch: features uniform in [-1, 1), labels uniform over
 * the classes (examples/mlp's defaults: in 1024, 10 classes). */
static sl_status feed_batch(ex_run *run, const model *m) {
  ex_mlp_config d = ex_mlp_defaults();
  size_t nx = (size_t)(m->batch * d.in);
  float *x = malloc(nx * sizeof *x);
  int32_t *y = malloc((size_t)m->batch * sizeof *y);
  sl_status st = x && y ? SL_OK : SL_ENOMEM;
  sl_rng rng = {42};
  for (size_t i = 0; st == SL_OK && i < nx; i++)
    x[i] = (float)((double)(sl__rng_next(&rng) >> 11) * 0x1.0p-53 * 2 - 1);
  for (int64_t i = 0; st == SL_OK && i < m->batch; i++)
    y[i] = (int32_t)sl__rng_below(&rng, (uint64_t)d.classes);
  if (st == SL_OK) st = ex_run_feed(run, "x", x, nx * sizeof *x);
  if (st == SL_OK)
    st = ex_run_feed(run, "labels", y, (size_t)m->batch * sizeof *y);
  free(x);
  free(y);
  return st;
}

static double run_sluice(const model *m, const row *r, const opts *o) {
  char placement[256];
  sl_graph *g;
  ex_run *run = NULL;
  ex_run_opts ro = {.engine = EX_ENGINE_SESSION, .cpu_threads = r->threads};
  ex_train_result res = {0};
  sl_status st = sl_graph_create(&g);
  if (st == SL_OK) st = build(g, m, r, placement, sizeof placement);
  if (st == SL_OK) st = ex_run_create(g, &ro, &run);
  if (st == SL_OK && !m->gpt) st = feed_batch(run, m);
  int64_t steps = steps_of(m, o);
  if (st == SL_OK)
    st = ex_train(run, SL_MAX(3, steps / 10), m->batch, "loss", NULL, NULL,
                  NULL);
  if (st == SL_OK)
    st = ex_train(run, steps + 1, m->batch, "loss", NULL, NULL, &res);
  if (st != SL_OK) {
    fprintf(stderr, "bench_cpu_peers: sluice %s %s on %d x %d: %s\n", m->name,
            r->layout, r->devices, r->threads,
            sl_graph_status(g) ? sl_graph_error(g) : sl_last_error());
    ex_run_destroy(run); /* its threads joined before the process exits */
    exit(1);
  }
  ex_run_destroy(run);
  sl_graph_destroy(g);
  return res.ms_per_step;
}

/* ---- peers --------------------------------------------------------------- */

/* Runs a peer to its end; its "ms_per_step X" value, or NAN with the
 * reason in why. */
static double run_peer(const char *const *argv, char *why, size_t n) {
  bench_peer p;
  fflush(stdout);
  if (!bench_peer_start(argv, &p, why, n)) return NAN;
  char line[1024];
  double ms = NAN;
  while (fgets(line, sizeof line, p.out)) {
    const char *at = strstr(line, "ms_per_step ");
    if (at) ms = strtod(at + strlen("ms_per_step "), NULL);
  }
  int rc = bench_peer_wait(&p);
  if (rc != 0 || isnan(ms)) {
    snprintf(why, n, "%s exited with status %d (its messages are above)",
             argv[1], rc);
    return NAN;
  }
  return ms;
}

static double run_row_peer(const model *m, const row *r, const opts *o,
                           char *why, size_t n) {
  char a[10][32];
  snprintf(a[0], sizeof a[0], "%lld", (long long)steps_of(m, o));
  snprintf(a[1], sizeof a[1], "%d", r->devices);
  snprintf(a[2], sizeof a[2], "%d", r->threads);
  snprintf(a[3], sizeof a[3], "%lld", (long long)m->batch);
  snprintf(a[4], sizeof a[4], "%lld", (long long)m->hidden);
  snprintf(a[5], sizeof a[5], "%lld", (long long)m->layers);
  snprintf(a[6], sizeof a[6], "%lld", (long long)m->seq);
  snprintf(a[7], sizeof a[7], "%lld", (long long)m->heads);
  snprintf(a[8], sizeof a[8], "%lld", (long long)m->vocab);
  snprintf(a[9], sizeof a[9], "%d", 29600 + (int)(getpid() % 300));
  const char *argv[40];
  int k = 0;
  if (r->sys == SYS_JAX) {
    argv[k++] = o->venv_python;
    argv[k++] = BENCH_PEERS "/cpu_jax.py";
    argv[k++] = m->gpt ? "gpt" : "mlp";
    argv[k++] = r->layout;
    argv[k++] = "--devices";
    argv[k++] = a[1];
    argv[k++] = "--threads";
    argv[k++] = r->threads == 0 ? "0" : a[2];
  } else if (!m->gpt) {
    argv[k++] = o->python;
    argv[k++] = BENCH_PEERS "/mlp_torch.py";
    argv[k++] = strcmp(r->layout, "ddp") == 0 ? "ddp" : "single";
    argv[k++] = strcmp(r->layout, "ddp") == 0 ? "--world" : "--threads";
    argv[k++] = strcmp(r->layout, "ddp") == 0 ? a[1] : a[2];
    argv[k++] = "--port";
    argv[k++] = a[9];
  } else {
    argv[k++] = o->python;
    argv[k++] = BENCH_PEERS "/gpt_torch.py";
    argv[k++] = "--device";
    argv[k++] = "cpu";
    argv[k++] = "--lr";
    argv[k++] = "3e-3";
    if (strcmp(r->layout, "ddp") == 0) {
      argv[k++] = "--ddp";
      argv[k++] = "--world";
      argv[k++] = a[1];
      argv[k++] = "--port";
      argv[k++] = a[9];
    } else {
      argv[k++] = "--threads";
      argv[k++] = a[2];
    }
  }
  argv[k++] = "--steps";
  argv[k++] = a[0];
  argv[k++] = "--batch";
  argv[k++] = a[3];
  argv[k++] = "--hidden";
  argv[k++] = a[4];
  argv[k++] = "--layers";
  argv[k++] = a[5];
  if (m->gpt) {
    argv[k++] = "--seq";
    argv[k++] = a[6];
    argv[k++] = "--heads";
    argv[k++] = a[7];
    argv[k++] = "--vocab";
    argv[k++] = a[8];
  }
  argv[k] = NULL;
  /* torch.set_num_threads does not reach the system OpenBLAS's own pool. */
  char blas[16];
  snprintf(blas, sizeof blas, "%d", r->blas);
  if (r->sys == SYS_TORCH) {
    setenv("OPENBLAS_NUM_THREADS", blas, 1);
    setenv("OMP_NUM_THREADS", a[2], 1);
  } else {
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
  }
  return run_peer(argv, why, n);
}

/* ---- the table ------------------------------------------------------------
 */

static int add(row *rows, int n, sys_kind sys, const char *layout, int devices,
               int threads, int blas) {
  if (n == MAX_ROWS) return n;
  rows[n] =
      (row){.sys = sys, .devices = devices, .threads = threads, .blas = blas};
  snprintf(rows[n].layout, sizeof rows[n].layout, "%s", layout);
  return n + 1;
}

static int plan_rows(row *rows, int cores, const opts *o) {
  int n = add(rows, 0, SYS_SLUICE, "single", 1, 1, 0);
  if (cores > 1) n = add(rows, n, SYS_SLUICE, "single", 1, cores, 0);
  for (int d = 2; d <= cores; d++) {
    if (cores % d) continue;
    n = add(rows, n, SYS_SLUICE, "dp", d, cores / d, 0);
    n = add(rows, n, SYS_SLUICE, "tp", d, cores / d, 0);
    if (d >= 4 && d % 2 == 0)
      n = add(rows, n, SYS_SLUICE, "hybrid", d, cores / d, 0);
  }
  if (!o->no_jax) {
    n = add(rows, n, SYS_JAX, "single", 1, 1, 0);
    n = add(rows, n, SYS_JAX, "single", 1, 0, 0);
    if (cores > 1) {
      n = add(rows, n, SYS_JAX, "dp", cores, 0, 0);
      n = add(rows, n, SYS_JAX, "tp", cores, 0, 0);
    }
  }
  /* PyTorch: one thread; n threads as a user gets them (torch's and
   * OpenBLAS's pools both n wide); torch on one thread with OpenBLAS on n
   * (Debian's torch multiplies in OpenBLAS, and that is its fastest
   * setting here); DDP, one thread per process. */
  if (!o->no_torch) {
    n = add(rows, n, SYS_TORCH, "threads", 1, 1, 1);
    if (cores > 1) {
      n = add(rows, n, SYS_TORCH, "threads", 1, cores, cores);
      n = add(rows, n, SYS_TORCH, "threads", 1, 1, cores);
      n = add(rows, n, SYS_TORCH, "ddp", cores, 1, 1);
    }
  }
  return n;
}

static double row_ms(row *r) {
  if (r->n_ms == 0) return NAN;
  double v[MAX_ROUNDS];
  memcpy(v, r->ms, sizeof v);
  return bench_median(v, r->n_ms);
}

/* The row's label, as bench/README.md's tables print it. */
static void describe(const row *r, const model *m, int cores, char *buf,
                     size_t n) {
  const char *s = r->layout;
  int d = r->devices, t = r->threads;
  if (r->sys == SYS_SLUICE)
    snprintf(buf, n, "sluice %s %d x %d", s, d, t);
  else if (r->sys == SYS_JAX && t == 1)
    snprintf(buf, n, "JAX single, 1 thread");
  else if (r->sys == SYS_JAX && d == 1)
    snprintf(buf, n, "JAX single, %d cores", cores);
  else if (r->sys == SYS_JAX)
    snprintf(buf, n, "JAX %s, %d devices", s, d);
  else if (strcmp(s, "ddp") == 0)
    snprintf(buf, n,
             m->gpt ? "PyTorch data parallel, %d processes"
                    : "PyTorch DDP, %d processes of 1 thread",
             d);
  else
    snprintf(buf, n, "PyTorch %d thread%s, OpenBLAS %d", t, t == 1 ? "" : "s",
             r->blas);
}

static void bench_model(const model *m, const opts *o, int cores) {
  row rows[MAX_ROWS];
  int n = plan_rows(rows, cores, o);
  for (int round = 0; round < o->rounds; round++)
    for (int i = 0; i < n; i++) {
      row *r = &rows[i];
      if (r->why[0]) continue; /* a peer that failed once */
      double ms = r->sys == SYS_SLUICE
                      ? run_sluice(m, r, o)
                      : run_row_peer(m, r, o, r->why, sizeof r->why);
      if (!isnan(ms)) r->ms[r->n_ms++] = ms;
    }
  double one = row_ms(&rows[0]), jax_best = NAN, best = INFINITY;
  for (int i = 0; i < n; i++) {
    double ms = row_ms(&rows[i]);
    if (rows[i].sys == SYS_JAX && !(ms >= jax_best)) jax_best = ms;
    if (rows[i].sys == SYS_SLUICE && ms < best) best = ms;
  }
  printf("\n%s (%s), %d cores, median of %lld rounds of %lld steps\n\n",
         m->name, m->what, cores, (long long)o->rounds,
         (long long)steps_of(m, o));
  printf("| system, layout, devices x threads | ms/step | vs JAX best | of "
         "ideal |\n|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    const row *r = &rows[i];
    char name[96];
    describe(r, m, cores, name, sizeof name);
    double ms = row_ms(&rows[i]);
    if (isnan(ms)) {
      printf("| %s | – | – | – |  (%s)\n", name, r->why);
      continue;
    }
    char vs[32] = "–", ideal[32] = "–";
    if (!isnan(jax_best)) snprintf(vs, sizeof vs, "%.2fx", jax_best / ms);
    if (r->sys == SYS_SLUICE && r->devices * r->threads == cores && cores > 1)
      snprintf(ideal, sizeof ideal, "%.2f", one / cores / ms);
    printf("| %s | %.2f | %s | %s |\n", name, ms, vs, ideal);
  }
  if (!isnan(jax_best))
    printf("\nsluice's best layout: %.2f ms/step, %.2fx JAX's best (%.2f); "
           "target >= 1.0x\n",
           best, jax_best / best, jax_best);
  fflush(stdout);
}

int main(int argc, char **argv) {
  opts o = {.model = "all", .steps = 0, .rounds = 3};
  o.python =
      getenv("SLUICE_PYTHON") ? getenv("SLUICE_PYTHON") : "/usr/bin/python3";
  static const char usage[] =
      "usage: bench_cpu_peers [flags]\n"
      "Trains the examples' models on the whole machine: sluice on every\n"
      "layout and devices x threads split that fills it, JAX (XLA:CPU, "
      "in a\nvirtual environment under the build folder) and PyTorch, one "
      "table per\nmodel.\n";
  const ex_flag flags[] = {
      {"model", EX_FLAG_STRING, &o.model, "mlp | gpt | gpt-256 | all", 0},
      {"steps", EX_FLAG_INT, &o.steps,
       "timed steps per row and round (0: each model's own: mlp 20, gpt 300, "
       "gpt-256 20)",
       0},
      {"rounds", EX_FLAG_INT, &o.rounds, "rounds (a row's time: the median)",
       1},
      {"no-jax", EX_FLAG_BOOL, &o.no_jax, "leave JAX out", 0},
      {"no-torch", EX_FLAG_BOOL, &o.no_torch, "leave PyTorch out", 0},
      {"python", EX_FLAG_STRING, &o.python,
       "the Python with torch ($SLUICE_PYTHON)", 0},
  };
  char err[512];
  switch (ex_flags_parse(argc, argv, usage, flags,
                         (int)(sizeof flags / sizeof flags[0]), stdout, err,
                         sizeof err)) {
  case EX_FLAGS_HELP: return 0;
  case EX_FLAGS_ERROR: fprintf(stderr, "bench_cpu_peers: %s\n", err); return 2;
  case EX_FLAGS_OK: break;
  }
  if (o.rounds > MAX_ROUNDS) {
    fprintf(stderr, "bench_cpu_peers: --rounds %lld: at most %d\n",
            (long long)o.rounds, MAX_ROUNDS);
    return 2;
  }
  bool any = false;
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    any |= strcmp(o.model, "all") == 0 || strcmp(o.model, models[i].name) == 0;
  if (!any) {
    fprintf(stderr,
            "bench_cpu_peers: --model %s: want mlp, gpt, gpt-256 or "
            "all\n",
            o.model);
    return 2;
  }
  /* The peers: installed when missing (bench/peers/install.sh prints the
   * Python to use on its last line). */
  if (!o.no_jax || !o.no_torch) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "sh %s/install.sh %s %s %s", BENCH_PEERS,
             o.no_torch ? "" : "torch", o.no_jax ? "" : "jax",
             o.no_jax ? "" : BENCH_JAX_VENV);
    FILE *p = popen(cmd, "r");
    char line[1024] = "";
    while (p && fgets(line, sizeof line, p)) {
      line[strcspn(line, "\n")] = '\0';
      if (strncmp(line, "jax-python ", 11) == 0)
        snprintf(o.venv_python, sizeof o.venv_python, "%s", line + 11);
    }
    if (!p || pclose(p) != 0) {
      fprintf(stderr,
              "bench_cpu_peers: installing the peers failed (%s); "
              "--no-jax / --no-torch leave them out\n",
              cmd);
      return 1;
    }
  }
  const char *core = sl__blas_coretype();
  if (core) setenv("OPENBLAS_CORETYPE", core, 1);
  int cores = sl__cpu_count();
  printf("bench_cpu_peers: %d cores; sluice BLAS %s\n", cores,
         sl__blas_describe());
  /* How far apart the cores sit, before and after: a virtual machine's
   * can move, and the parallel rows pay for every crossing. */
  printf("cores' round trip: %.0f ns\n", core_round_trip_ns());
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(o.model, "all") == 0 || strcmp(o.model, models[i].name) == 0)
      bench_model(&models[i], &o, cores);
  printf("\ncores' round trip at the end: %.0f ns\n", core_round_trip_ns());
  return 0;
}
