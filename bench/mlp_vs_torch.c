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
 * Times are medians of per-step wall times after warm-up steps (the
 * machine may be shared: medians resist outliers); sluice's single-device
 * figure is the better of two rounds run before and after PyTorch's, so a
 * burst of load during one of them does not decide the ratio.
 *
 * Usage: bench_mlp_vs_torch [--steps N] [--engine auto|session|sharded]
 *        [--profile] [--no-torch] [--no-dp] [--python PATH] ... (--help) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/graph.h>

#include "common/ex_flags.h"
#include "common/ex_run.h"
#include "cpu/blas.h"
#include "graph_int.h"
#include "mlp/model.h"

#ifndef MLP_TORCH_PEER
#define MLP_TORCH_PEER "bench/peers/mlp_torch.py"
#endif

typedef struct opts {
  int64_t steps, warmup, batch, in, hidden, layers, classes;
  const char *engine, *python;
  bool profile, no_torch, no_dp;
} opts;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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
                     const char *placement, ex_engine engine, bool profile) {
  ex_mlp_config c = config(o, layout, placement);
  if (sl_graph_create(&r->g) != SL_OK) die("graph");
  if (ex_mlp_build(r->g, &c) != SL_OK) {
    fprintf(stderr, "bench_mlp_vs_torch: %s\n", sl_graph_error(r->g));
    exit(1);
  }
  ex_run_opts ro = {engine, NULL, profile, false};
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

/* Runs warm-up steps, then `steps` timed ones: median ms/step, and the
 * total wall time of the timed steps in *total_ms. */
static double time_steps(rig *r, const opts *o, double *total_ms, float *loss) {
  for (int64_t s = 0; s < o->warmup; s++)
    if (ex_run_step(r->run) != SL_OK) die("step");
  double *t = malloc((size_t)o->steps * sizeof *t);
  if (!t) die("malloc");
  uint64_t start = sl__now_ns();
  for (int64_t s = 0; s < o->steps; s++) {
    uint64_t t0 = sl__now_ns();
    if (ex_run_step(r->run) != SL_OK) die("step");
    t[s] = (double)(sl__now_ns() - t0) / 1e6;
  }
  if (total_ms) *total_ms = (double)(sl__now_ns() - start) / 1e6;
  if (loss && ex_run_fetch(r->run, "loss", loss, sizeof *loss) != SL_OK)
    die("fetch");
  double m = median(t, (int)o->steps);
  free(t);
  return m;
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

/* Median wall time of the whole sequence of sgemm calls, ms. */
static double matmul_floor(const mm_call *calls, int n, int reps,
                           double *gflop) {
  float **bufs = calloc((size_t)n * 3, sizeof *bufs);
  if (!bufs) die("malloc");
  *gflop = 0;
  sl_rng rng = {7};
  for (int i = 0; i < n; i++) {
    const mm_call *c = &calls[i];
    int64_t sz[3] = {c->m * c->k, c->k * c->n, c->m * c->n};
    for (int j = 0; j < 3; j++) {
      bufs[3 * i + j] = malloc((size_t)(sz[j] * c->batch) * sizeof(float));
      if (!bufs[3 * i + j]) die("malloc");
      for (int64_t e = 0; e < sz[j] * c->batch; e++)
        bufs[3 * i + j][e] =
            (float)((int)sl__rng_below(&rng, 2001) - 1000) / 1000.0f;
    }
    *gflop += 2.0 * (double)c->m * (double)c->n * (double)c->k *
              (double)c->batch / 1e9;
  }
  double *t = malloc((size_t)(reps + 1) * sizeof *t);
  if (!t) die("malloc");
  for (int r = -1; r < reps; r++) {
    uint64_t t0 = sl__now_ns();
    for (int i = 0; i < n; i++) {
      const mm_call *c = &calls[i];
      for (int64_t bi = 0; bi < c->batch; bi++) {
        const float *a = bufs[3 * i] + bi * c->m * c->k,
                    *b = bufs[3 * i + 1] + bi * c->k * c->n;
        float *cc = bufs[3 * i + 2] + bi * c->m * c->n;
        if (sl__blas_sgemm(c->ta, c->tb, c->m, c->n, c->k, 1.0f, a,
                           c->ta ? c->m : c->k, b, c->tb ? c->k : c->n, 0.0f,
                           cc, c->n) != SL_OK)
          die("sgemm");
      }
    }
    if (r >= 0) t[r] = (double)(sl__now_ns() - t0) / 1e6;
  }
  double m = median(t, reps);
  free(t);
  for (int i = 0; i < 3 * n; i++)
    free(bufs[i]);
  free(bufs);
  return m;
}

/* ---- the PyTorch peer --------------------------------------------------- */

/* Runs the peer; returns the value after `key` in its output line starting
 * with `prefix`, or NAN (with the reason printed) when it failed. */
static double run_peer(const opts *o, const char *mode, const char *prefix,
                       const char *key, double *second, const char *key2) {
  const char *core = sl__blas_coretype();
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s%s %s %s %s --steps %lld --warmup %lld --batch %lld --in %lld "
           "--hidden %lld --layers %lld --classes %lld 2>&1",
           core ? "OPENBLAS_CORETYPE=" : "env -u OPENBLAS_CORETYPE",
           core ? core : "", o->python, MLP_TORCH_PEER, mode,
           (long long)o->steps, (long long)o->warmup, (long long)o->batch,
           (long long)o->in, (long long)o->hidden, (long long)o->layers,
           (long long)o->classes);
  FILE *p = popen(cmd, "r");
  if (!p) {
    perror("popen");
    return NAN;
  }
  char line[1024], all[8192] = "";
  double v = NAN;
  while (fgets(line, sizeof line, p)) {
    if (strlen(all) + strlen(line) < sizeof all) strcat(all, line);
    if (strncmp(line, prefix, strlen(prefix)) != 0) continue;
    const char *at = strstr(line, key);
    if (at) v = strtod(at + strlen(key), NULL);
    at = key2 ? strstr(line, key2) : NULL;
    if (at && second) *second = strtod(at + strlen(key2), NULL);
  }
  int st = pclose(p);
  if (isnan(v) || st != 0) {
    fprintf(stderr, "bench_mlp_vs_torch: the PyTorch peer failed (%s):\n%s",
            mode, all);
    return NAN;
  }
  return v;
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
  if (sl__blas_set_threads(1) != SL_OK) die("blas threads");
  printf("bench_mlp_vs_torch: %lld hidden layers of %lld, in %lld, %lld "
         "classes, batch %lld, SGD; %lld timed steps after %lld warm-up\n",
         (long long)o.layers, (long long)o.hidden, (long long)o.in,
         (long long)o.classes, (long long)o.batch, (long long)o.steps,
         (long long)o.warmup);
  printf("blas: %s\n", sl__blas_describe());
  const char *core = sl__blas_coretype();
  printf("PyTorch peer: %s %s with OPENBLAS_CORETYPE=%s (sluice's kernel set)"
         "\n",
         o.python, MLP_TORCH_PEER, core ? core : "(unset)");
  fflush(stdout);

  /* 1 device: sluice, round 1. */
  rig one;
  rig_open(&one, &o, EX_LAYOUT_SINGLE, "cpu:0", engine, o.profile);
  ex_engine used = ex_run_engine(one.run);
  float loss = 0;
  double s1 = time_steps(&one, &o, NULL, &loss);
  if (o.profile) {
    printf("\nper-op time of one sluice step (engine %s):\n",
           ex_engine_name(used));
    ex_run_profile_print(one.run, stdout, 14, (int)(o.steps + o.warmup));
  }
  /* The floor: this step's matmuls alone. */
  mm_call calls[256];
  int ncalls = step_matmuls(one.g, calls, 256);
  double gflop;
  double floor_ms = matmul_floor(calls, ncalls, 15, &gflop);
  /* PyTorch, then sluice again. */
  double t_min = NAN;
  double torch_ms = o.no_torch ? NAN
                               : run_peer(&o, "single", "torch single",
                                          "ms_per_step ", &t_min, "min ");
  double s2 = time_steps(&one, &o, NULL, NULL);
  double sluice_ms = fmin(s1, s2);
  rig_close(&one);

  /* 2 devices, data parallel. */
  double dp_sps = NAN, dp_ms = NAN, ddp_sps = NAN, ddp_ms = NAN;
  const char *dp_note = "";
  if (!o.no_dp) {
    if (used == EX_ENGINE_SESSION) {
      rig two;
      rig_open(&two, &o, EX_LAYOUT_DP, "cpu:0-1", engine, false);
      double total;
      dp_ms = time_steps(&two, &o, &total, NULL);
      dp_sps = (double)o.batch * (double)o.steps / (total / 1e3);
      rig_close(&two);
    } else {
      dp_note = " (needs the session engine: serial engines do not run "
                "devices in parallel)";
    }
    if (!o.no_torch)
      ddp_sps = run_peer(&o, "ddp", "torch ddp", "samples_per_s ", &ddp_ms,
                         "ms_per_step ");
  }

  char label[96];
  printf("\n%-44s %12s %12s %8s\n", "1 device, one thread", "ms/step",
         "samples/s", "ratio");
  snprintf(label, sizeof label, "sluice (%s engine, cpu:0)",
           ex_engine_name(used));
  printf("%-44s %12.2f %12.1f %8s\n", label, sluice_ms,
         (double)o.batch / sluice_ms * 1e3, "1.00");
  printf("%-44s %12.2f %12.1f %8.3f\n", "PyTorch (1 thread)", torch_ms,
         (double)o.batch / torch_ms * 1e3, sluice_ms / torch_ms);
  snprintf(label, sizeof label, "matmul-only floor (%d sgemm, %.2f GFLOP)",
           ncalls, gflop);
  printf("%-44s %12.2f %12.1f %8.3f\n", label, floor_ms,
         (double)o.batch / floor_ms * 1e3, sluice_ms / floor_ms);
  printf("  (ratio = sluice's ms/step over the row's; targets: <= 1.00 vs "
         "PyTorch, <= 1.05 vs the floor; sgemm rate in the floor %.1f "
         "GFLOP/s)\n",
         gflop / floor_ms * 1e3);
  if (!o.no_dp) {
    printf("\n%-44s %12s %12s %8s\n", "2 devices, data parallel, batch 256",
           "ms/step", "samples/s", "ratio");
    printf("%-44s %12.2f %12.1f %8s%s\n", "sluice dp (cpu:0-1, one process)",
           dp_ms, dp_sps, "1.00", dp_note);
    printf("%-44s %12.2f %12.1f %8.3f\n", "PyTorch DDP (gloo, 2 processes)",
           ddp_ms, ddp_sps, dp_sps / ddp_sps);
    printf("  (ratio = sluice's samples/s over PyTorch's; > 1 is faster)\n");
  }
  printf("\nfinal loss after %lld steps: %.5f\n",
         (long long)(o.steps * 2 + o.warmup), (double)loss);
  return 0;
}
