/* gpt: trains the decoder-only transformer of model.h under any layout.
 *
 *   gpt --devices cpu:2 --layout dp --steps 30
 *   gpt --devices cpu:3 --layout tp --heads 6 --hidden 96
 *   gpt --devices cpu:4 --layout hybrid --tie --trace gpt.json
 *   gpt --devices cpu:8 --pp 2 --layout hybrid --micro 8  (dp x tp x pp)
 *   gpt --steps 100 --save ckpt --save-every 20
 *   gpt --steps 200 --save ckpt --resume ckpt
 *   gpt --load gpt_torch.safetensors --data inputs.npy,targets.npy
 *
 * Prints "step N loss X" per step and a throughput line (samples are
 * sequences of --seq tokens). Exit status 0, 1 for a failure while
 * building or running, 2 for bad flags (a path that cannot be written or
 * read included, a data file that does not fit --batch, --seq and --vocab,
 * and a checkpoint that does not fit the model). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/graph.h>

#include "common/ex_ckpt.h"
#include "common/ex_flags.h"
#include "common/ex_npy.h"
#include "common/ex_run.h"
#include "gpt/model.h"

static const char usage[] =
    "usage: gpt [flags]\n"
    "Trains a decoder-only transformer (pre-LN blocks of causal attention\n"
    "and a GELU MLP) on synthetic token sequences or .npy files of token\n"
    "ids, under a layout of CPU devices: single, dp (data parallel), tp\n"
    "(weights split as Megatron's tensor parallelism) or hybrid (data x\n"
    "tensor parallel on a [N/2, 2] mesh), optionally in pipeline stages\n"
    "(--pp) over micro-batches (--micro).";

int main(int argc, char **argv) {
  ex_gpt_config c = ex_gpt_defaults();
  int64_t steps = 10, batch = c.batch, seq = c.seq, vocab = c.vocab,
          hidden = c.hidden, heads = c.heads, layers = c.layers,
          seed = (int64_t)c.seed;
  double lr = -1;
  const char *devices = "cpu:1", *layout = "single", *optimizer = "adam",
             *trace = NULL, *engine = "auto", *data = NULL;
  bool tie = false, bf16 = false, profile = false, memory = false,
       recompute = false, check = false, print_graph = false, megatron = false;
  int64_t threads = 0;
  ex_train_flags tf = EX_TRAIN_FLAGS_INIT;
  ex_ckpt_flags ckf = {0};
  int64_t pp = 1, micro = 1;
  const char *schedule = NULL;
  const ex_flag flags[] = {
      EX_PARALLEL_FLAGS(devices, layout, pp, micro, schedule),
      {"steps", EX_FLAG_INT, &steps, "training steps", 1},
      {"batch", EX_FLAG_INT, &batch, "sequences per step (global)", 1},
      {"seq", EX_FLAG_INT, &seq, "tokens per sequence", 1},
      {"vocab", EX_FLAG_INT, &vocab, "vocabulary size", 2},
      {"hidden", EX_FLAG_INT, &hidden, "model width (a multiple of --heads)",
       1},
      {"heads", EX_FLAG_INT, &heads, "attention heads", 1},
      {"layers", EX_FLAG_INT, &layers, "transformer blocks", 1},
      {"tie", EX_FLAG_BOOL, &tie, "tie the head to the token embedding", 0},
      {"megatron", EX_FLAG_BOOL, &megatron,
       "tp, hybrid: activations replicated between blocks, each attention "
       "and MLP ending in one all-reduce (Megatron's plan; default: the "
       "compiler's choice, docs/examples.md)",
       0},
      {"bf16", EX_FLAG_BOOL, &bf16, "the same as --dtype bf16", 0},
      {"seed", EX_FLAG_INT64, &seed, "seed of the initializers and data", 0},
      {"lr", EX_FLAG_POSITIVE, &lr, "learning rate (adam 3e-3, sgd 0.1)", 0},
      {"optimizer", EX_FLAG_STRING, &optimizer, "adam | sgd", 0},
      {"data", EX_FLAG_STRING, &data,
       "INPUTS.npy,TARGETS.npy (token ids [N, seq]) instead of synthetic "
       "data",
       0},
      EX_TRAIN_FLAGS(tf),
      {"threads", EX_FLAG_INT, &threads,
       "threads of each CPU device (0: the CPUs shared out between the "
       "devices)",
       0},
      {"trace", EX_FLAG_STRING, &trace, "write a Chrome trace to PATH", 0},
      {"save", EX_FLAG_STRING, &ckf.save,
       "save a checkpoint to directory DIR at the end", 0},
      {"save-every", EX_FLAG_INT, &ckf.save_every,
       "also save after every N steps (needs --save)", 1},
      {"load", EX_FLAG_STRING, &ckf.load,
       "load weights: a checkpoint or safetensors file (PyTorch's too)", 0},
      {"resume", EX_FLAG_STRING, &ckf.resume,
       "continue a checkpoint: weights, optimizer state, step, data", 0},
      {"engine", EX_FLAG_STRING, &engine, "auto | session | sharded | interp",
       0},
      {"profile", EX_FLAG_BOOL, &profile, "print time per op kind", 0},
      {"recompute", EX_FLAG_BOOL, &recompute,
       "recompute each block's activations in the backward pass "
       "(docs/api.md, \"Recomputation\")",
       0},
      {"memory", EX_FLAG_BOOL, &memory,
       "print each device's planned memory at the end (session engine)", 0},
      {"check-replicas", EX_FLAG_BOOL, &check,
       "sharded engine: check that replicas agree after every op", 0},
      {"print-graph", EX_FLAG_BOOL, &print_graph,
       "print the compiled graph (nd-SBP of every value, boxing nodes)", 0},
  };
  char err[512];
  switch (ex_flags_parse(argc, argv, usage, flags,
                         (int)(sizeof flags / sizeof flags[0]), stdout, err,
                         sizeof err)) {
  case EX_FLAGS_HELP: return 0;
  case EX_FLAGS_ERROR: fprintf(stderr, "gpt: %s\n", err); return 2;
  case EX_FLAGS_OK: break;
  }
  ex_run_opts ro = {.engine = EX_ENGINE_AUTO,
                    .trace_path = trace,
                    .cpu_threads = (int)threads,
                    .profile = profile,
                    .check_replicas = check};
  char placement[512];
  static char stages[EX_MAX_STAGES][512];
  if (ex_layout_parse(layout, &c.layout) != SL_OK ||
      (bf16 && strcmp(tf.dtype, "f32") && strcmp(tf.dtype, "bf16")
           ? sl_set_error(SL_EINVAL, "--bf16 and --dtype %s disagree", tf.dtype)
           : SL_OK) != SL_OK ||
      ex_engine_parse(engine, &ro.engine) != SL_OK ||
      ex_layout_placement(c.layout, devices, placement, sizeof placement) !=
          SL_OK ||
      ex_stage_placements(c.layout, devices, (int)pp, stages) != SL_OK ||
      ex_pipeline_check((int)micro, batch, schedule) != SL_OK ||
      (megatron && !ex_layout_is_tensor_parallel(c.layout)
           ? sl_set_error(SL_EINVAL,
                          "--megatron is for the tp and hybrid layouts, "
                          "not %s",
                          layout)
           : SL_OK) != SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    return 2;
  }
  c.pp = (int)pp;
  c.micro = (int)micro;
  c.schedule = schedule;
  for (int s = 0; s < c.pp; s++)
    c.stage_placement[s] = stages[s];
  if (strcmp(optimizer, "adam") == 0) {
    c.opt = sl_optimizer_adam(lr > 0 ? lr : 3e-3);
  } else if (strcmp(optimizer, "sgd") == 0) {
    c.opt = sl_optimizer_sgd(lr > 0 ? lr : 0.1, 0);
  } else {
    fprintf(stderr, "gpt: unknown optimizer '%s' (adam, sgd)\n", optimizer);
    return 2;
  }
  if (bf16) tf.dtype = "bf16";
  if (ex_train_flags_apply(&tf, &c.dtype, &c.opt) != SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    return 2;
  }
  c.recompute = recompute;
  if (hidden % heads != 0) {
    fprintf(stderr, "gpt: --hidden %lld is not a multiple of --heads %lld\n",
            (long long)hidden, (long long)heads);
    return 2;
  }
  /* The data files are read through now (shape, dtype, every id), so a
   * bad one fails here rather than at the step that reaches it. */
  char ipath[1024] = "", tpath[1024] = "";
  if (data) {
    const char *comma = strchr(data, ',');
    if (!comma || comma == data || !comma[1] || strchr(comma + 1, ',') ||
        (size_t)(comma - data) >= sizeof ipath) {
      fprintf(stderr, "gpt: --data wants INPUTS.npy,TARGETS.npy, got '%s'\n",
              data);
      return 2;
    }
    snprintf(ipath, sizeof ipath, "%.*s", (int)(comma - data), data);
    snprintf(tpath, sizeof tpath, "%s", comma + 1);
    int64_t irows, trows;
    if (!ex_npy_check_ids("data", ipath, seq, batch, vocab, &irows, err,
                          sizeof err) ||
        !ex_npy_check_ids("data", tpath, seq, batch, vocab, &trows, err,
                          sizeof err)) {
      fprintf(stderr, "gpt: %s\n", err);
      return 2;
    }
    if (irows != trows) {
      fprintf(stderr,
              "gpt: flag '--data': %s has %lld rows, %s %lld: want one "
              "target row per input row\n",
              ipath, (long long)irows, tpath, (long long)trows);
      return 2;
    }
    c.npy_inputs = ipath;
    c.npy_targets = tpath;
  }
  if ((trace &&
       !ex_path_check_file_writable("trace", trace, err, sizeof err)) ||
      !ex_ckpt_check(&ckf, err, sizeof err)) {
    fprintf(stderr, "gpt: %s\n", err);
    return 2;
  }
  c.batch = batch;
  c.seq = seq;
  c.vocab = vocab;
  c.hidden = hidden;
  c.heads = heads;
  c.layers = (int)layers;
  c.tie = tie;
  c.megatron = megatron;
  c.seed = (uint64_t)seed;
  c.placement = placement;

  int rc = 1;
  sl_graph *g = NULL;
  ex_run *run = NULL;
  if (sl_graph_create(&g) != SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    goto done;
  }
  if (ex_gpt_build(g, &c) != SL_OK) {
    fprintf(stderr, "gpt: building the model: %s\n",
            sl_graph_status(g) != SL_OK ? sl_graph_error(g) : sl_last_error());
    goto done;
  }
  if (ex_run_create(g, &ro, &run) != SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    goto done;
  }
  if (!ex_run_needs(run, "gpt", memory, "--memory", EX_ENGINE_SESSION) ||
      !ex_run_needs(run, "gpt", ex_ckpt_any(&ckf),
                    "checkpoints (--save, --load, --resume)",
                    EX_ENGINE_SESSION) ||
      !ex_run_needs(run, "gpt", check, "--check-replicas", EX_ENGINE_SHARDED) ||
      !ex_run_needs(run, "gpt", pp > 1 || micro > 1 || schedule,
                    "pipelining (--pp, --micro, --schedule)",
                    EX_ENGINE_SESSION)) {
    rc = 2;
    goto done;
  }
  printf("gpt: %lld blocks, hidden %lld, %lld heads, seq %lld, vocab %lld, "
         "batch %lld%s%s%s, layout %s on %s, engine %s\n",
         (long long)layers, (long long)hidden, (long long)heads, (long long)seq,
         (long long)vocab, (long long)batch, tie ? ", tied head" : "",
         c.dtype != SL_DTYPE_F32 ? ", matmuls in " : "",
         c.dtype != SL_DTYPE_F32 ? sl_dtype_name(c.dtype) : "", layout,
         placement, ex_engine_name(ex_run_engine(run)));
  if (pp > 1 || micro > 1)
    printf("pipeline: %lld stage%s, %lld micro-batches of %lld, schedule %s\n",
           (long long)pp, pp == 1 ? "" : "s", (long long)micro,
           (long long)(batch / micro), schedule ? schedule : "1f1b");
  fflush(stdout); /* before any error the checkpoint flags print */
  if (print_graph) {
    int len = sl_graph_print(g, NULL, 0);
    char *buf = malloc((size_t)len + 1);
    if (buf) {
      sl_graph_print(g, buf, (size_t)len + 1);
      fputs(buf, stdout);
      free(buf);
    }
  }
  ex_ckpt ck;
  int64_t first = 0;
  if (ex_ckpt_begin(&ck, &ckf, run, ex_gpt_torch_name, &c, stdout, &first) !=
      SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    rc = 2;
    goto done;
  }
  if (first >= steps)
    printf("nothing to run: the checkpoint is at step %lld, --steps %lld "
           "counts from step 0\n",
           (long long)first, (long long)steps);
  ex_train_result res;
  if (ex_train_range(run, first, steps, batch, "loss", stdout, NULL, &res,
                     ex_ckpt_hook, &ck, ck.flags.save_every) != SL_OK ||
      ex_ckpt_end(&ck) != SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    goto done;
  }
  if (first < steps) ex_train_print(stdout, &res, run, layout, placement);
  if (profile && first < steps)
    ex_run_profile_print(run, stdout, 16, (int)(steps - first));
  if (memory && ex_run_memory_print(run, stdout) != SL_OK) {
    fprintf(stderr, "gpt: %s\n", sl_last_error());
    goto done;
  }
  rc = 0;
done:
  ex_run_destroy(run);
  sl_graph_destroy(g);
  return rc;
}
