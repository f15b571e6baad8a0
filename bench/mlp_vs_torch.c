/* bench_mlp_vs_torch: the examples' MLP (4 hidden layers of 1024, batch
 * 256, softmax cross-entropy, plain SGD) trained by sluice and by PyTorch
 * in one run, with a table:
 *
 *   1 device   sluice ms/step on one device (one thread), PyTorch ms/step
 *              with torch.set_num_threads(1), their ratio, and the
 *              matmul-only floor: the step's matmuls — the exact shapes and
 *              transposes of the compiled graph — run back to back through
 *              sl__blas_sgemm on one thread (targets: sluice <= 1.0x
 *              PyTorch and <= 1.05x the floor)
 *   2 devices  sluice data parallel on cpu:0-1 in this process against
 *              PyTorch DDP over gloo in 2 processes (global batch 256 both):
 *              samples/s and ratio
 *
 * PyTorch (bench/peers/mlp_torch.py in /usr/bin/python3) runs as a
 * subprocess with OPENBLAS_CORETYPE set to the kernel set sluice's own BLAS
 * uses (Debian's torch multiplies in the system OpenBLAS), so both sides use
 * the same sgemm kernels whatever the environment pins.
 *
 * The machine may be shared, and its load drifts. So the measurements run
 * in lock step: step i of sluice, then the floor's matmuls once, then step i
 * of PyTorch (the peer waits on a pipe for each "step" line), and so on;
 * each side is timed alone but all of them meet the same load. Times are
 * medians of the per-step wall times, after warm-up steps.
 *
 * Usage: bench_mlp_vs_torch [--steps N] [--engine auto|session|sharded]
 *        [--profile] [--no-torch] [--no-dp] [--python PATH] ... (--help) */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sluice/graph.h>

#include "common/ex_flags.h"
#include "common/ex_run.h"
#include "cpu/blas.h"
#include "graph_int.h"
#include "mlp/model.h"
#include "bench_util.h"

#ifndef MLP_TORCH_PEER
#define MLP_TORCH_PEER "bench/peers/mlp_torch.py"
#endif

typedef struct opts {
  int64_t steps, warmup, batch, in, hidden, layers, classes;
  const char *engine, *python;
  bool profile, no_torch, no_dp;
} opts;

static void die(const char *what) {
  fprintf(stderr, "bench_mlp_vs_torch: %s: %s\n", what, sl_last_error());
  exit(1);
}

static ex_mlp_config config(const opts *o, ex_layout layout,
                            const char *placement) {
  ex_mlp_config c = ex_mlp_defaults();
  c.batch = o->batch;
  c.in = o->in;
  c.hidden = o->hidden;
  c.layers = (int)o->layers;
  c.classes = o->classes;
  c.layout = layout;
  c.placement = placement;
  c.data = EX_MLP_DATA_FEED;
  c.opt = sl_optimizer_sgd(0.01, 0);
  return c;
}

/* A built, fed run of the MLP. */
typedef struct rig {
  sl_graph *g;
  ex_run *run;
} rig;

static void rig_open(rig *r, const opts *o, ex_layout layout,
                     const char *placement, ex_engine engine, bool profile,
                     bool out_of_place) {
  ex_mlp_config c = config(o, layout, placement);
  if (sl_graph_create(&r->g) != SL_OK) die("graph");
  if (ex_mlp_build(r->g, &c) != SL_OK) {
    fprintf(stderr, "bench_mlp_vs_torch: %s\n", sl_graph_error(r->g));
    exit(1);
  }
  /* One thread per device, as PyTorch's side has (the default would give
   * a lone device every core). */
  ex_run_opts ro = {.engine = engine,
                    .profile = profile,
                    .out_of_place_updates = out_of_place,
                    .cpu_threads = 1};
  if (ex_run_create(r->g, &ro, &r->run) != SL_OK) die("run");
  size_t nx = (size_t)(o->batch * o->in);
  float *x = malloc(nx * sizeof *x);
  int32_t *y = malloc((size_t)o->batch * sizeof *y);
  if (!x || !y) die("malloc");
  sl_rng rng = {42};
  for (size_t i = 0; i < nx; i++)
    x[i] = (float)((double)(sl__rng_next(&rng) >> 11) * 0x1.0p-53 * 2 - 1);
  for (int64_t i = 0; i < o->batch; i++)
    y[i] = (int32_t)sl__rng_below(&rng, (uint64_t)o->classes);
  if (ex_run_feed(r->run, "x", x, nx * sizeof *x) != SL_OK ||
      ex_run_feed(r->run, "labels", y, (size_t)o->batch * sizeof *y) != SL_OK)
    die("feed");
  free(x);
  free(y);
}

static void rig_close(rig *r) {
  ex_run_destroy(r->run);
  sl_graph_destroy(r->g);
}

/* ---- the matmul-only floor --------------------------------------------- */

typedef struct mm_call {
  bool ta, tb;
  int64_t m, n, k, batch;
} mm_call;

/* The matmuls of the compiled single-device graph, as the kernels call
 * sgemm (kernels/cpu/matmul.c: a's leading dims flatten into m). */
static int step_matmuls(const sl_graph *g, mm_call *calls, int max) {
  int n = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g) && n < max; i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_OP) continue;
    bool mm = strcmp(nd->op->name, "matmul") == 0,
         bmm = strcmp(nd->op->name, "batch_matmul") == 0;
    if (!mm && !bmm) continue;
    const sl_shape *a = &sl__graph_value(g, nd->in[0])->meta.shape;
    const sl_shape *b = &sl__graph_value(g, nd->in[1])->meta.shape;
    mm_call c = {sl__attr_int(&nd->attrs, "trans_a", 0) != 0,
                 sl__attr_int(&nd->attrs, "trans_b", 0) != 0,
                 1,
                 1,
                 1,
                 1};
    int na = a->ndim, nb = b->ndim;
    c.k = a->dims[c.ta ? na - 2 : na - 1];
    c.n = b->dims[c.tb ? nb - 2 : nb - 1];
    if (mm) {
      for (int d = 0; d < na; d++)
        if (d != (c.ta ? 0 : na - 1)) c.m *= a->dims[d];
    } else {
      c.m = a->dims[c.ta ? na - 1 : na - 2];
      for (int d = 0; d < na - 2; d++)
        c.batch *= a->dims[d];
    }
    calls[n++] = c;
  }
  return n;
}

/* Buffers for the step's matmuls. */
typedef struct floor_rig {
  const mm_call *calls;
  int n;
  float **bufs; /* a, b, c per call */
  double gflop;
} floor_rig;

static void floor_open(floor_rig *f, const mm_call *calls, int n) {
  f->calls = calls;
  f->n = n;
  f->gflop = 0;
  f->bufs = calloc((size_t)n * 3, sizeof *f->bufs);
  if (!f->bufs) die("malloc");
  sl_rng rng = {7};
  for (int i = 0; i < n; i++) {
    const mm_call *c = &calls[i];
    int64_t sz[3] = {c->m * c->k, c->k * c->n, c->m * c->n};
    for (int j = 0; j < 3; j++) {
      f->bufs[3 * i + j] = malloc((size_t)(sz[j] * c->batch) * sizeof(float));
      if (!f->bufs[3 * i + j]) die("malloc");
      for (int64_t e = 0; e < sz[j] * c->batch; e++)
        f->bufs[3 * i + j][e] =
            (float)((int)sl__rng_below(&rng, 2001) - 1000) / 1000.0f;
    }
    f->gflop += 2.0 * (double)c->m * (double)c->n * (double)c->k *
                (double)c->batch / 1e9;
  }
}

/* One pass over the step's matmuls, back to back: wall time in ms. */
static double floor_run(const floor_rig *f) {
  uint64_t t0 = sl__now_ns();
  for (int i = 0; i < f->n; i++) {
    const mm_call *c = &f->calls[i];
    for (int64_t bi = 0; bi < c->batch; bi++) {
      const float *a = f->bufs[3 * i] + bi * c->m * c->k,
                  *b = f->bufs[3 * i + 1] + bi * c->k * c->n;
      float *cc = f->bufs[3 * i + 2] + bi * c->m * c->n;
      if (sl__blas_sgemm(c->ta, c->tb, c->m, c->n, c->k, 1.0f, a,
                         c->ta ? c->m : c->k, b, c->tb ? c->k : c->n, 0.0f, cc,
                         c->n) != SL_OK)
        die("sgemm");
    }
  }
  return (double)(sl__now_ns() - t0) / 1e6;
}

static void floor_close(floor_rig *f) {
  for (int i = 0; i < 3 * f->n; i++)
    free(f->bufs[i]);
  free(f->bufs);
}

/* ---- the PyTorch peer --------------------------------------------------- */

/* The peer in lock step: one "step" line in, one "t MS" line out. */
typedef struct peer {
  pid_t pid;
  FILE *to, *from;
  char summary[512];
} peer;

/* Starts the peer in `mode` and waits for its "ready". false (with the
 * reason printed) when it cannot start. */
static bool peer_open(peer *p, const opts *o, const char *mode) {
  memset(p, 0, sizeof *p);
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) {
    perror("pipe");
    return false;
  }
  char a[7][32];
  snprintf(a[0], sizeof a[0], "%lld", (long long)o->warmup);
  snprintf(a[1], sizeof a[1], "%lld", (long long)o->batch);
  snprintf(a[2], sizeof a[2], "%lld", (long long)o->in);
  snprintf(a[3], sizeof a[3], "%lld", (long long)o->hidden);
  snprintf(a[4], sizeof a[4], "%lld", (long long)o->layers);
  snprintf(a[5], sizeof a[5], "%lld", (long long)o->classes);
  snprintf(a[6], sizeof a[6], "%d", 29000 + (int)(getpid() % 1000));
  fflush(stdout);
  p->pid = fork();
  if (p->pid < 0) {
    perror("fork");
    return false;
  }
  if (p->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]);
    close(to[1]);
    close(from[0]);
    close(from[1]);
    const char *core = sl__blas_coretype();
    if (core)
      setenv("OPENBLAS_CORETYPE", core, 1);
    else
      unsetenv("OPENBLAS_CORETYPE");
    /* One thread: torch.set_num_threads(1) covers torch's own pool, not the
     * system OpenBLAS's, which would otherwise take every free core. */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    execl(o->python, o->python, MLP_TORCH_PEER, mode, "--lockstep", "--warmup",
          a[0], "--batch", a[1], "--in", a[2], "--hidden", a[3], "--layers",
          a[4], "--classes", a[5], "--port", a[6], (char *)NULL);
    fprintf(stderr, "bench_mlp_vs_torch: cannot run %s: %s\n", o->python,
            strerror(errno));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  p->to = fdopen(to[1], "w");
  p->from = fdopen(from[0], "r");
  char line[512];
  while (p->from && fgets(line, sizeof line, p->from))
    if (strncmp(line, "ready", 5) == 0) return true;
  fprintf(stderr,
          "bench_mlp_vs_torch: the PyTorch peer (%s) did not start "
          "(its messages are above)\n",
          mode);
  return false;
}

/* One peer step: its wall time in ms, or NAN; its CPU time in *cpu. */
static double peer_step(peer *p, double *cpu) {
  char line[512];
  fputs("step\n", p->to);
  fflush(p->to);
  *cpu = NAN;
  while (fgets(line, sizeof line, p->from))
    if (line[0] == 't' && line[1] == ' ') {
      char *end;
      double wall = strtod(line + 2, &end);
      *cpu = strtod(end, NULL);
      return wall;
    }
  return NAN;
}

static double cpu_ms(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void peer_close(peer *p) {
  if (p->to) {
    fputs("quit\n", p->to);
    fclose(p->to);
  }
  char line[512];
  while (p->from && fgets(line, sizeof line, p->from))
    if (strncmp(line, "torch ", 6) == 0)
      snprintf(p->summary, sizeof p->summary, "%s", line);
  if (p->from) fclose(p->from);
  if (p->pid > 0) waitpid(p->pid, NULL, 0);
}

int main(int argc, char **argv) {
  opts o = {30,    3,     256,  1024, 1024, 4, 10, "auto", "/usr/bin/python3",
            false, false, false};
  const ex_flag flags[] = {
      {"steps", EX_FLAG_INT, &o.steps, "timed steps per measurement", 3},
      {"warmup", EX_FLAG_INT, &o.warmup, "untimed steps first", 0},
      {"batch", EX_FLAG_INT, &o.batch, "global batch", 2},
      {"in", EX_FLAG_INT, &o.in, "input features", 1},
      {"hidden", EX_FLAG_INT, &o.hidden, "hidden width", 1},
      {"layers", EX_FLAG_INT, &o.layers, "hidden layers", 1},
      {"classes", EX_FLAG_INT, &o.classes, "classes", 2},
      {"engine", EX_FLAG_STRING, &o.engine, "auto | session | sharded", 0},
      {"python", EX_FLAG_STRING, &o.python, "the peer's interpreter", 0},
      {"profile", EX_FLAG_BOOL, &o.profile,
       "per-op times of the 1-device step (sharded engine)", 0},
      {"no-torch", EX_FLAG_BOOL, &o.no_torch, "skip the PyTorch peers", 0},
      {"no-dp", EX_FLAG_BOOL, &o.no_dp, "skip the 2-device comparison", 0},
  };
  char err[256];
  switch (ex_flags_parse(argc, argv,
                         "usage: bench_mlp_vs_torch [flags]\nsluice vs "
                         "PyTorch on the examples' MLP (see the source's "
                         "header).",
                         flags, (int)(sizeof flags / sizeof flags[0]), stdout,
                         err, sizeof err)) {
  case EX_FLAGS_HELP: return 0;
  case EX_FLAGS_ERROR:
    fprintf(stderr, "bench_mlp_vs_torch: %s\n", err);
    return 2;
  case EX_FLAGS_OK: break;
  }
  ex_engine engine;
  if (ex_engine_parse(o.engine, &engine) != SL_OK) {
    fprintf(stderr, "bench_mlp_vs_torch: %s\n", sl_last_error());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (sl__blas_set_threads(1) != SL_OK) die("blas threads");
  printf("bench_mlp_vs_torch: %lld hidden layers of %lld, in %lld, %lld "
         "classes, batch %lld, SGD; %lld timed steps in lock step after %lld "
         "warm-up\n",
         (long long)o.layers, (long long)o.hidden, (long long)o.in,
         (long long)o.classes, (long long)o.batch, (long long)o.steps,
         (long long)o.warmup);
  printf("blas: %s\n", sl__blas_describe());
  const char *core = sl__blas_coretype();
  printf("PyTorch peer: %s %s with OPENBLAS_CORETYPE=%s (sluice's kernel set)"
         "\n",
         o.python, MLP_TORCH_PEER, core ? core : "(unset)");
  fflush(stdout);
  int n = (int)o.steps;
  double *ts = calloc((size_t)n, sizeof *ts),
         *tf = calloc((size_t)n, sizeof *tf),
         *tt = calloc((size_t)n, sizeof *tt),
         *td = calloc((size_t)n, sizeof *td),
         *tq = calloc((size_t)n, sizeof *tq);
  /* CPU times: sluice's process (every session thread), the floor's
   * thread, the peer's process. */
  double *cs = calloc((size_t)n, sizeof *cs),
         *cf = calloc((size_t)n, sizeof *cf),
         *ct = calloc((size_t)n, sizeof *ct);
  /* The sharded reference engine beside the session: the same kernels run
   * serially in this thread, optimizer updates in place. */
  double *tr = calloc((size_t)n, sizeof *tr),
         *cr = calloc((size_t)n, sizeof *cr);
  /* The calling thread's share of sluice's step CPU time (the session's
   * devices run on threads of their own). */
  double *cm = calloc((size_t)n, sizeof *cm),
         *to = calloc((size_t)n, sizeof *to),
         *co = calloc((size_t)n, sizeof *co);
  if (!cm || !to || !co) die("malloc");
  if (!ts || !tf || !tt || !td || !tq || !cs || !cf || !ct || !tr || !cr)
    die("malloc");

  /* 1 device: sluice, the floor and PyTorch in lock step. */
  rig one;
  rig_open(&one, &o, EX_LAYOUT_SINGLE, "cpu:0", engine, o.profile, false);
  ex_engine used = ex_run_engine(one.run);
  mm_call calls[256];
  floor_rig fl;
  floor_open(&fl, calls, step_matmuls(one.g, calls, 256));
  rig ref;
  bool with_ref = used == EX_ENGINE_SESSION;
  if (with_ref)
    rig_open(&ref, &o, EX_LAYOUT_SINGLE, "cpu:0", EX_ENGINE_SHARDED, false,
             false);
  /* ... and with out-of-place updates, as the session runs them. */
  rig oop;
  if (with_ref)
    rig_open(&oop, &o, EX_LAYOUT_SINGLE, "cpu:0", EX_ENGINE_SHARDED, false,
             true);
  for (int64_t s = 0; s < o.warmup; s++) {
    if (ex_run_step(one.run) != SL_OK) die("step");
    if (with_ref && ex_run_step(ref.run) != SL_OK) die("step");
    if (with_ref && ex_run_step(oop.run) != SL_OK) die("step");
    floor_run(&fl);
  }
  peer tp;
  bool torch_ok = !o.no_torch && peer_open(&tp, &o, "single");
  for (int i = 0; i < n; i++) {
    double c0 = cpu_ms(CLOCK_PROCESS_CPUTIME_ID),
           m0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
    uint64_t t0 = sl__now_ns();
    if (ex_run_step(one.run) != SL_OK) die("step");
    ts[i] = (double)(sl__now_ns() - t0) / 1e6;
    cs[i] = cpu_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    cm[i] = cpu_ms(CLOCK_THREAD_CPUTIME_ID) - m0;
    c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
    tf[i] = floor_run(&fl);
    cf[i] = cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
    tr[i] = cr[i] = NAN;
    if (with_ref) {
      c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
      t0 = sl__now_ns();
      if (ex_run_step(ref.run) != SL_OK) die("step");
      tr[i] = (double)(sl__now_ns() - t0) / 1e6;
      cr[i] = cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
      c0 = cpu_ms(CLOCK_THREAD_CPUTIME_ID);
      t0 = sl__now_ns();
      if (ex_run_step(oop.run) != SL_OK) die("step");
      to[i] = (double)(sl__now_ns() - t0) / 1e6;
      co[i] = cpu_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
    }
    ct[i] = NAN;
    tt[i] = torch_ok ? peer_step(&tp, &ct[i]) : NAN;
  }
  if (torch_ok) peer_close(&tp);
  float loss = 0;
  if (ex_run_fetch(one.run, "loss", &loss, sizeof loss) != SL_OK) die("fetch");
  if (o.profile) {
    printf("\nper-op time of one sluice step (engine %s):\n",
           ex_engine_name(used));
    ex_run_profile_print(one.run, stdout, 14, (int)(o.steps + o.warmup));
  }
  double sluice_ms = bench_median(ts, n), floor_ms = bench_median(tf, n),
         torch_ms = torch_ok ? bench_median(tt, n) : NAN;
  double sluice_cpu = bench_median(cs, n), floor_cpu = bench_median(cf, n),
         torch_cpu = torch_ok ? bench_median(ct, n) : NAN;
  double ref_ms = with_ref ? bench_median(tr, n) : NAN,
         ref_cpu = with_ref ? bench_median(cr, n) : NAN,
         oop_ms = with_ref ? bench_median(to, n) : NAN,
         oop_cpu = with_ref ? bench_median(co, n) : NAN;
  if (with_ref) {
    rig_close(&ref);
    rig_close(&oop);
  }
  int ncalls = fl.n;
  double gflop = fl.gflop;
  floor_close(&fl);
  rig_close(&one);

  /* 2 devices, data parallel, against DDP in lock step. */
  double dp_ms = NAN, ddp_ms = NAN;
  const char *dp_note = "";
  if (!o.no_dp) {
    rig two;
    bool run_dp = used == EX_ENGINE_SESSION;
    if (run_dp) {
      rig_open(&two, &o, EX_LAYOUT_DP, "cpu:0-1", engine, false, false);
      for (int64_t s = 0; s < o.warmup; s++)
        if (ex_run_step(two.run) != SL_OK) die("step");
    } else {
      dp_note = " (needs the session engine: serial engines do not run "
                "devices in parallel)";
    }
    peer dp;
    bool ddp_ok = !o.no_torch && peer_open(&dp, &o, "ddp");
    for (int i = 0; i < n; i++) {
      td[i] = NAN;
      if (run_dp) {
        uint64_t t0 = sl__now_ns();
        if (ex_run_step(two.run) != SL_OK) die("step");
        td[i] = (double)(sl__now_ns() - t0) / 1e6;
      }
      double unused;
      tq[i] = ddp_ok ? peer_step(&dp, &unused) : NAN;
    }
    if (ddp_ok) peer_close(&dp);
    if (run_dp) rig_close(&two);
    dp_ms = run_dp ? bench_median(td, n) : NAN;
    ddp_ms = ddp_ok ? bench_median(tq, n) : NAN;
  }

  char label[96];
  printf("\n%-42s %9s %9s %7s %9s %7s\n", "1 device, one thread", "ms/step",
         "samples/s", "ratio", "cpu ms", "ratio");
  snprintf(label, sizeof label, "sluice (%s engine, cpu:0)",
           ex_engine_name(used));
  printf("%-42s %9.2f %9.1f %7s %9.2f %7s\n", label, sluice_ms,
         (double)o.batch / sluice_ms * 1e3, "", sluice_cpu, "");
  printf("%-42s %9.2f %9.1f %7.3f %9.2f %7.3f\n", "PyTorch (1 thread)",
         torch_ms, (double)o.batch / torch_ms * 1e3, sluice_ms / torch_ms,
         torch_cpu, sluice_cpu / torch_cpu);
  snprintf(label, sizeof label, "matmul-only floor (%d sgemm, %.2f GFLOP)",
           ncalls, gflop);
  printf("%-42s %9.2f %9.1f %7.3f %9.2f %7.3f\n", label, floor_ms,
         (double)o.batch / floor_ms * 1e3, sluice_ms / floor_ms, floor_cpu,
         sluice_cpu / floor_cpu);
  if (with_ref)
    printf("%-42s %9.2f %9.1f %7s %9.2f %7s\n",
           "sluice, sharded engine (in-place updates)", ref_ms,
           (double)o.batch / ref_ms * 1e3, "", ref_cpu, "");
  if (with_ref)
    printf("%-42s %9.2f %9.1f %7s %9.2f %7s\n",
           "sluice, sharded engine (out-of-place upd.)", oop_ms,
           (double)o.batch / oop_ms * 1e3, "", oop_cpu, "");
  if (used == EX_ENGINE_SESSION)
    printf("  of sluice's cpu ms, the calling thread's (in sl_session_run): "
           "%.2f\n",
           bench_median(cm, n));
  if (with_ref)
    printf("  the sharded engine's ratios: %.3f / %.3f vs PyTorch, %.3f / %.3f "
           "vs the floor\n",
           ref_ms / torch_ms, ref_cpu / torch_cpu, ref_ms / floor_ms,
           ref_cpu / floor_cpu);
  printf("  ratio: sluice's time over the row's (targets: <= 1.00 vs PyTorch, "
         "<= 1.05\n  vs the floor). ms/step: median wall time; cpu ms: median "
         "CPU time of\n  the step (sluice: every thread of the process; less "
         "sensitive to a\n  shared machine's load). The floor's sgemm ran at "
         "%.1f GFLOP/s (wall).\n",
         gflop / floor_ms * 1e3);
  if (!o.no_dp) {
    printf("\n%-44s %12s %12s %8s\n", "2 devices, data parallel, batch 256",
           "ms/step", "samples/s", "ratio");
    printf("%-44s %12.2f %12.1f %8s%s\n", "sluice dp (cpu:0-1, one process)",
           dp_ms, (double)o.batch / dp_ms * 1e3, "", dp_note);
    printf("%-44s %12.2f %12.1f %8.3f\n", "PyTorch DDP (gloo, 2 processes)",
           ddp_ms, (double)o.batch / ddp_ms * 1e3, ddp_ms / dp_ms);
    printf("  ratio: sluice's samples/s over PyTorch's (> 1: sluice is "
           "faster)\n");
  }
  printf("\nsluice's loss after %lld steps: %.5f\n",
         (long long)(o.steps + o.warmup), (double)loss);
  free(ts);
  free(tf);
  free(tt);
  free(td);
  free(tq);
  free(cs);
  free(cf);
  free(ct);
  free(tr);
  free(cr);
  free(cm);
  free(to);
  free(co);
  return 0;
}
