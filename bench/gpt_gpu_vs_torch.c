/* bench_gpt_gpu_vs_torch: a training step of examples/gpt's transformer on
 * one GPU, sluice against PyTorch (the target: sluice's step time
 * <= 1.0x PyTorch's). docs/cuda.md, "Benchmarks on a GPU", has the
 * commands.
 *
 * sluice: ex_gpt_build (examples/gpt/model.c) with GPT-2 small's shape by
 * default — 12 layers, hidden 768, 12 heads, sequence 1024, vocabulary
 * 50257, batch 8, head tied to the token embedding, Adam — placed on
 * "cuda:0" and run by the embedded session (never the reference engines,
 * which would run CPU kernels on host memory). PyTorch:
 * bench/peers/gpt_torch.py, the same model op for op on the same GPU, run
 * after sluice has released the GPU; its header lists what matches what.
 *
 * Precision (the bf16 matmuls): by default examples/gpt's --bf16
 * (every matmul, the attention's included, takes bf16 inputs with f32
 * products and outputs; weights, the softmax and the rest f32) against
 * PyTorch's forward under torch.autocast(bfloat16) (the same split).
 * --f32: both sides all f32 with true-f32
 * matmuls (sluice: cublasSgemm in cuBLAS's default math mode; PyTorch:
 * allow_tf32 = False).
 * Attention: PyTorch runs twice, with explicit attention ops as sluice's
 * sl_scaled_dot_product_attention (batch matmul, scale, causal mask,
 * softmax, batch matmul) and with its fused scaled_dot_product_attention;
 * the ratio is printed against both.
 *
 * A step: one sl_session_run (data, forward, backward, Adam) and the loss
 * fetched to the host, timed on the wall clock; PyTorch's likewise from a
 * synchronize to loss.item(). Medians over --steps after --warmup.
 *
 * Checks, so that a wrong computation is not reported as fast: every loss
 * finite, the first near ln(vocab) (the loss of the initial, almost uniform
 * prediction), and PyTorch's model holding as many trainable parameters in
 * as many tensors as sluice's graph updates with adam_update. A failure
 * prints why and exits 1, as does a session that cannot run on the
 * placement (its error is printed). Without CUDA in the build or without a
 * GPU it prints why and exits 0.
 *
 * Usage: bench_gpt_gpu_vs_torch [--steps N] [--warmup N] [--layers N]
 *        [--hidden N] [--heads N] [--seq N] [--batch N] [--vocab N]
 *        [--untied] [--lr X] [--placement cuda:0] [--python PATH]
 *        [--attention both|math|sdpa] [--no-torch]   (--help) */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sluice/build.h>
#include <sluice/graph.h>
#include <sluice/placement.h>

#include "common/ex_flags.h"
#include "common/ex_run.h"
#include "core_int.h"
#include "device_iface.h"
#include "gpt/model.h"
#include "graph_int.h"
#include "bench_util.h"

#ifndef GPT_TORCH_PEER
#define GPT_TORCH_PEER "bench/peers/gpt_torch.py"
#endif

#define PROG "bench_gpt_gpu_vs_torch"

typedef struct opts {
  int64_t steps, warmup, batch, seq, layers, hidden, heads, vocab;
  double lr;
  const char *placement, *python, *attention;
  bool untied, no_torch, f32;
} opts;

/* The trainable parameters the graph updates: the w of every adam_update. */
static void count_params(const sl_graph *g, int64_t *numel, int *tensors) {
  *numel = 0;
  *tensors = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_OP || strcmp(nd->op->name, "adam_update") != 0)
      continue;
    *numel += sl_shape_numel(&sl__graph_value(g, nd->in[0])->meta.shape);
    (*tensors)++;
  }
}

/* The loss a near-uniform prediction over `vocab` classes gives at the
 * start, with the slack the random initial logits add. */
static bool first_loss_plausible(double loss, int64_t vocab) {
  double want = log((double)vocab);
  return loss > want - 1.0 && loss < want + 1.5;
}

/* ---- the PyTorch peer ------------------------------------------------- */

typedef struct peer_result {
  bool ok;
  double ms, ms_min, peak_gib;
  int steps;
  int64_t params;
  int tensors;
  double loss_first, loss_last;
  char why[256];
} peer_result;

static void peer_parse(char *line, peer_result *r, int *losses) {
  line[strcspn(line, "\r\n")] = 0;
  long long np;
  int nt, step;
  double v;
  if (!strncmp(line, "info ", 5)) {
    printf("  peer: %s\n", line + 5);
  } else if (sscanf(line, "params %lld %d", &np, &nt) == 2) {
    r->params = np;
    r->tensors = nt;
  } else if (sscanf(line, "loss %d %lf", &step, &v) == 2) {
    if (*losses == 0) r->loss_first = v;
    r->loss_last = v;
    (*losses)++;
  } else if (!strncmp(line, "result ", 7)) {
    char att[16], dt[16];
    if (sscanf(line,
               "result attention=%15s dtype=%15s ms_per_step %lf min %lf "
               "steps %d peak_gib %lf",
               att, dt, &r->ms, &r->ms_min, &r->steps, &r->peak_gib) == 6)
      r->ok = r->ms > 0;
  } else {
    printf("  peer says: %s\n", line);
  }
}

/* Runs gpt_torch.py with `attention` on the GPU; r->ok when it measured. */
static void peer_run(const opts *o, const char *attention, peer_result *r) {
  memset(r, 0, sizeof *r);
  r->ms = r->loss_first = r->loss_last = NAN;
  char a[9][32];
  snprintf(a[0], sizeof a[0], "%lld", (long long)o->batch);
  snprintf(a[1], sizeof a[1], "%lld", (long long)o->seq);
  snprintf(a[2], sizeof a[2], "%lld", (long long)o->layers);
  snprintf(a[3], sizeof a[3], "%lld", (long long)o->hidden);
  snprintf(a[4], sizeof a[4], "%lld", (long long)o->heads);
  snprintf(a[5], sizeof a[5], "%lld", (long long)o->vocab);
  snprintf(a[6], sizeof a[6], "%.17g", o->lr);
  snprintf(a[7], sizeof a[7], "%lld", (long long)o->steps);
  snprintf(a[8], sizeof a[8], "%lld", (long long)o->warmup);
  const char *argv[32];
  int n = 0;
  argv[n++] = o->python;
  argv[n++] = GPT_TORCH_PEER;
  const char *kv[][2] = {{"--device", "cuda"},
                         {"--dtype", o->f32 ? "f32" : "bf16"},
                         {"--attention", attention},
                         {"--batch", a[0]},
                         {"--seq", a[1]},
                         {"--layers", a[2]},
                         {"--hidden", a[3]},
                         {"--heads", a[4]},
                         {"--vocab", a[5]},
                         {"--lr", a[6]},
                         {"--steps", a[7]},
                         {"--warmup", a[8]}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
    argv[n++] = kv[i][0];
    argv[n++] = kv[i][1];
  }
  if (o->untied) argv[n++] = "--untied";
  argv[n] = NULL;
  bench_peer p;
  if (!bench_peer_start(argv, &p, r->why, sizeof r->why)) return;
  int losses = 0;
  char line[1024];
  while (fgets(line, sizeof line, p.out))
    peer_parse(line, r, &losses);
  int status = bench_peer_wait(&p);
  if (status != 0) {
    snprintf(r->why, sizeof r->why,
             "%s %s --attention %s failed (exit status %d; its messages are "
             "above)",
             o->python, GPT_TORCH_PEER, attention, status);
    r->ok = false;
  } else if (!r->ok) {
    snprintf(r->why, sizeof r->why, "no result line from %s --attention %s",
             GPT_TORCH_PEER, attention);
  }
}

/* ---- main ------------------------------------------------------------- */

static const char usage[] =
    "usage: " PROG " [flags]\n"
    "A training step of examples/gpt's transformer (GPT-2 small's shape by\n"
    "default) on one GPU: sluice's embedded session against PyTorch\n"
    "(bench/peers/gpt_torch.py). See the source's header and docs/cuda.md,\n"
    "\"Benchmarks on a GPU\".";

int main(int argc, char **argv) {
  opts o = {.steps = 20,
            .warmup = 3,
            .batch = 8,
            .seq = 1024,
            .layers = 12,
            .hidden = 768,
            .heads = 12,
            .vocab = 50257,
            .lr = 6e-4,
            .placement = "cuda:0",
            .python = "/usr/bin/python3",
            .attention = "both"};
  const ex_flag flags[] = {
      {"steps", EX_FLAG_INT, &o.steps, "timed steps", 1},
      {"warmup", EX_FLAG_INT, &o.warmup, "untimed steps first", 0},
      {"batch", EX_FLAG_INT, &o.batch, "sequences per step", 1},
      {"seq", EX_FLAG_INT, &o.seq, "tokens per sequence", 1},
      {"layers", EX_FLAG_INT, &o.layers, "transformer blocks", 1},
      {"hidden", EX_FLAG_INT, &o.hidden, "model width", 1},
      {"heads", EX_FLAG_INT, &o.heads, "attention heads", 1},
      {"vocab", EX_FLAG_INT, &o.vocab, "vocabulary", 2},
      {"untied", EX_FLAG_BOOL, &o.untied,
       "a separate head (default: tied to the token embedding)", 0},
      {"lr", EX_FLAG_DOUBLE, &o.lr, "Adam's learning rate", 0},
      {"placement", EX_FLAG_STRING, &o.placement, "one CUDA device", 0},
      {"python", EX_FLAG_STRING, &o.python, "the peer's interpreter", 0},
      {"attention", EX_FLAG_STRING, &o.attention,
       "PyTorch's attention: both | math (explicit ops) | sdpa (fused)", 0},
      {"no-torch", EX_FLAG_BOOL, &o.no_torch, "sluice only", 0},
      {"f32", EX_FLAG_BOOL, &o.f32,
       "f32 matmuls on both sides (default: bf16 matmul inputs)", 0},
  };
  char err[256];
  switch (ex_flags_parse(argc, argv, usage, flags,
                         (int)(sizeof flags / sizeof flags[0]), stdout, err,
                         sizeof err)) {
  case EX_FLAGS_HELP: return 0;
  case EX_FLAGS_ERROR: fprintf(stderr, PROG ": %s\n", err); return 2;
  case EX_FLAGS_OK: break;
  }
  const char *atts[2];
  int n_att = 0;
  if (!strcmp(o.attention, "both")) {
    atts[n_att++] = "math";
    atts[n_att++] = "sdpa";
  } else if (!strcmp(o.attention, "math") || !strcmp(o.attention, "sdpa")) {
    atts[n_att++] = o.attention;
  } else {
    fprintf(stderr, PROG ": --attention '%s': want both, math or sdpa\n",
            o.attention);
    return 2;
  }
  if (o.hidden % o.heads != 0) {
    fprintf(stderr, PROG ": --hidden %lld is not a multiple of --heads %lld\n",
            (long long)o.hidden, (long long)o.heads);
    return 2;
  }
  sl_placement *pl = NULL;
  if (sl_placement_parse(o.placement, &pl) != SL_OK) {
    fprintf(stderr, PROG ": --placement: %s\n", sl_last_error());
    return 2;
  }
  bool one_gpu = sl_placement_device_type(pl) == SL_DEVICE_CUDA &&
                 sl_placement_size(pl) == 1;
  int node = 0, device = 0;
  if (one_gpu) sl_placement_rank_device(pl, 0, &node, &device);
  sl_placement_destroy(pl);
  if (!one_gpu) {
    fprintf(stderr, PROG ": --placement '%s': want one CUDA device (cuda:0)\n",
            o.placement);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);

  /* No GPU, or no CUDA in the build: nothing to measure. */
  sl__device *dev = NULL;
  if (sl__device_open(SL_DEVICE_CUDA, device, &dev) != SL_OK) {
    printf(PROG ": skipped: %s\n", sl_last_error());
    return 0;
  }
  sl__device_close(dev);
  sl_cuda_device_info info;
  if (sl_build_cuda_device_info(device, &info) != SL_OK)
    snprintf(info.name, sizeof info.name, "?");

  int64_t tokens = o.batch * o.seq;
  printf(PROG
         ": examples/gpt, %lld layers, hidden %lld, %lld heads, seq "
         "%lld, vocab %lld, batch %lld (%lld tokens a step), %s head, Adam "
         "lr %g\n",
         (long long)o.layers, (long long)o.hidden, (long long)o.heads,
         (long long)o.seq, (long long)o.vocab, (long long)o.batch,
         (long long)tokens, o.untied ? "separate" : "tied", o.lr);
  printf("  on %s (%s); %s\n", o.placement, info.name,
         o.f32 ? "f32 everywhere on both sides, true-f32 matmuls (no TF32)"
               : "bf16 matmul inputs, f32 products and weights (PyTorch: "
                 "autocast bf16)");
  printf("  %lld timed steps after %lld warm-up; a step = data, forward, "
         "backward, Adam, loss\n  fetched to the host (wall time)\n",
         (long long)o.steps, (long long)o.warmup);
  fflush(stdout);

  /* sluice */
  ex_gpt_config c = ex_gpt_defaults();
  c.batch = o.batch;
  c.seq = o.seq;
  c.vocab = o.vocab;
  c.hidden = o.hidden;
  c.heads = o.heads;
  c.layers = (int)o.layers;
  c.tie = !o.untied;
  c.dtype = o.f32 ? SL_DTYPE_F32 : SL_DTYPE_BF16;
  c.layout = EX_LAYOUT_SINGLE;
  c.placement = o.placement;
  c.opt = sl_optimizer_adam(o.lr);
  sl_graph *g = NULL;
  ex_run *run = NULL;
  int rc = 1, n = (int)o.steps, total = (int)(o.steps + o.warmup);
  double *ms = calloc((size_t)n, sizeof *ms);
  float *loss = calloc((size_t)total, sizeof *loss);
  if (!ms || !loss) {
    fprintf(stderr, PROG ": out of memory\n");
    goto done;
  }
  if (sl_graph_create(&g) != SL_OK) {
    fprintf(stderr, PROG ": %s\n", sl_last_error());
    goto done;
  }
  if (ex_gpt_build(g, &c) != SL_OK) {
    fprintf(stderr, PROG ": building the model: %s\n",
            sl_graph_status(g) != SL_OK ? sl_graph_error(g) : sl_last_error());
    goto done;
  }
  int64_t params = 0;
  int tensors = 0;
  count_params(g, &params, &tensors);
  ex_run_opts ro = {.engine = EX_ENGINE_SESSION};
  if (ex_run_create(g, &ro, &run) != SL_OK) {
    fprintf(stderr, PROG ": sluice cannot train on %s: %s\n", o.placement,
            sl_last_error());
    goto done;
  }
  for (int s = 0; s < total; s++) {
    uint64_t t0 = sl__now_ns();
    if (ex_run_step(run) != SL_OK ||
        ex_run_fetch(run, "loss", &loss[s], sizeof loss[s]) != SL_OK) {
      fprintf(stderr, PROG ": sluice's step %d on %s: %s\n", s, o.placement,
              sl_last_error());
      goto done;
    }
    double t = (double)(sl__now_ns() - t0) / 1e6;
    if (s >= o.warmup) ms[s - o.warmup] = t;
    if (!isfinite(loss[s])) {
      fprintf(stderr,
              PROG ": sluice's loss at step %d is %g: the GPU "
                   "computation is wrong\n",
              s, (double)loss[s]);
      goto done;
    }
  }
  if (!first_loss_plausible(loss[0], o.vocab)) {
    fprintf(stderr,
            PROG ": sluice's first loss is %g, want about ln(%lld) = %.3f: "
                 "the GPU computation is wrong\n",
            (double)loss[0], (long long)o.vocab, log((double)o.vocab));
    goto done;
  }
  double sluice_ms = bench_median(ms, n);
  ex_run_destroy(run); /* the GPU's memory back before PyTorch runs */
  run = NULL;
  printf("  sluice: %lld trainable parameters in %d tensors\n",
         (long long)params, tensors);

  /* PyTorch */
  peer_result pr[2];
  bool peers_ok = true;
  memset(pr, 0, sizeof pr);
  for (int i = 0; i < n_att && !o.no_torch; i++) {
    printf("\nPyTorch peer (%s attention): %s %s\n", atts[i], o.python,
           GPT_TORCH_PEER);
    peer_run(&o, atts[i], &pr[i]);
    if (pr[i].ok && (pr[i].params != params || pr[i].tensors != tensors)) {
      snprintf(pr[i].why, sizeof pr[i].why,
               "its model has %lld parameters in %d tensors, sluice's %lld in "
               "%d: not the same architecture",
               (long long)pr[i].params, pr[i].tensors, (long long)params,
               tensors);
      pr[i].ok = false;
    }
    if (pr[i].ok && !first_loss_plausible(pr[i].loss_first, o.vocab)) {
      snprintf(pr[i].why, sizeof pr[i].why,
               "its first loss is %g, want about %.3f", pr[i].loss_first,
               log((double)o.vocab));
      pr[i].ok = false;
    }
    if (!pr[i].ok) {
      printf("  peer FAILED: %s\n", pr[i].why);
      peers_ok = false;
    }
  }

  printf("\n%-44s %10s %12s %13s %s\n", "training step", "ms/step", "tokens/s",
         "sluice/torch", "loss first -> last");
  char label[96];
  snprintf(label, sizeof label, "sluice (session engine, %s)", o.placement);
  printf("%-44s %10.2f %12.0f %13s %.4f -> %.4f\n", label, sluice_ms,
         (double)tokens / sluice_ms * 1e3, "", (double)loss[0],
         (double)loss[total - 1]);
  for (int i = 0; i < n_att && !o.no_torch; i++) {
    snprintf(label, sizeof label, "PyTorch eager, %s attention",
             !strcmp(atts[i], "math") ? "explicit" : "fused SDPA");
    if (!pr[i].ok) {
      printf("%-44s %10s %12s %13s FAILED (above)\n", label, "-", "-", "-");
      continue;
    }
    printf("%-44s %10.2f %12.0f %13.3f %.4f -> %.4f\n", label, pr[i].ms,
           (double)tokens / pr[i].ms * 1e3, sluice_ms / pr[i].ms,
           pr[i].loss_first, pr[i].loss_last);
  }
  printf("\n  ms/step: median wall time of %lld steps after %lld warm-up. "
         "sluice/torch: sluice's\n  time over PyTorch's (target: <= 1.00). "
         "explicit attention: the ops sluice runs\n  (batch matmul, scale, "
         "causal mask, softmax, batch matmul); fused SDPA: PyTorch's\n  "
         "scaled_dot_product_attention. Losses: the first and last steps' "
         "(synthetic data,\n  different draws on the two sides).\n",
         (long long)o.steps, (long long)o.warmup);
  for (int i = 0; i < n_att && !o.no_torch; i++)
    if (pr[i].ok)
      printf("  PyTorch (%s): peak %.2f GiB allocated\n", atts[i],
             pr[i].peak_gib);
  rc = peers_ok ? 0 : 1;
done:
  ex_run_destroy(run);
  sl_graph_destroy(g);
  free(ms);
  free(loss);
  return rc;
}
