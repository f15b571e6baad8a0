/* mlp: trains the MLP classifier of model.h under any layout.
 *
 *   mlp --devices cpu:4 --layout dp --steps 20
 *   mlp --devices cpu:3 --layout tp --hidden 256 --optimizer adam
 *   mlp --devices cpu:4 --layout hybrid --trace mlp.json
 *   mlp --devices cpu:4 --pp 2 --layout dp --micro 8 --schedule 1f1b
 *   mlp --data x.npy,y.npy --batch 64
 *   mlp --steps 500 --save ckpt --save-every 100
 *   mlp --steps 1000 --save ckpt --resume ckpt
 *   mlp --load mlp_torch.safetensors --data x.npy,y.npy --steps 1
 *
 * Prints "step N loss X" per step and a throughput line. Exit status 0, 1
 * for a failure while building or running, 2 for bad flags (a path that
 * cannot be written or read included, and a checkpoint that does not fit
 * the model). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/graph.h>

#include "common/ex_ckpt.h"
#include "common/ex_flags.h"
#include "common/ex_run.h"
#include "mlp/model.h"

static const char usage[] =
    "usage: mlp [flags]\n"
    "Trains an MLP classifier (ReLU hidden layers, softmax cross-entropy) on\n"
    "synthetic Gaussian-mixture data or .npy files, under a layout of CPU\n"
    "devices: single, dp (data parallel), tp (Megatron tensor parallel) or\n"
    "hybrid (data x tensor parallel on a [N/2, 2] mesh), optionally in --pp\n"
    "pipeline stages (--pp) over micro-batches (--micro).";

int main(int argc, char **argv) {
  ex_mlp_config c = ex_mlp_defaults();
  int64_t steps = 10, batch = c.batch, in = c.in, hidden = c.hidden,
          classes = c.classes, layers = c.layers, seed = (int64_t)c.seed;
  double lr = -1, momentum = 0;
  const char *devices = "cpu:1", *layout = "single", *optimizer = "sgd",
             *data = NULL, *trace = NULL, *engine = "auto";
  int64_t pp = 1, micro = 1;
  const char *schedule = NULL;
  bool profile = false, check = false, print_graph = false, memory = false,
       recompute = false;
  int64_t threads = 0;
  ex_train_flags tf = EX_TRAIN_FLAGS_INIT;
  ex_ckpt_flags ckf = {0};
  const ex_flag flags[] = {
      EX_PARALLEL_FLAGS(devices, layout, pp, micro, schedule),
      {"steps", EX_FLAG_INT, &steps, "training steps", 1},
      {"batch", EX_FLAG_INT, &batch, "global batch size", 1},
      {"in", EX_FLAG_INT, &in, "input features (synthetic data)", 1},
      {"hidden", EX_FLAG_INT, &hidden, "width of the hidden layers", 1},
      {"layers", EX_FLAG_INT, &layers, "hidden layers", 1},
      {"classes", EX_FLAG_INT, &classes, "classes (the head's outputs)", 2},
      {"seed", EX_FLAG_INT64, &seed, "seed of the initializers and data", 0},
      {"lr", EX_FLAG_POSITIVE, &lr, "learning rate (sgd 0.05, adam 0.001)", 0},
      {"momentum", EX_FLAG_FRACTION, &momentum, "SGD momentum, in [0, 1)", 0},
      {"optimizer", EX_FLAG_STRING, &optimizer, "sgd | adam", 0},
      {"data", EX_FLAG_STRING, &data,
       "X.npy,LABELS.npy instead of synthetic data", 0},
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
       "recompute each hidden layer's activations in the backward pass "
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
  case EX_FLAGS_ERROR: fprintf(stderr, "mlp: %s\n", err); return 2;
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
      ex_engine_parse(engine, &ro.engine) != SL_OK ||
      ex_layout_placement(c.layout, devices, placement, sizeof placement) !=
          SL_OK ||
      ex_stage_placements(c.layout, devices, (int)pp, stages) != SL_OK ||
      ex_pipeline_check((int)micro, batch, schedule) != SL_OK) {
    fprintf(stderr, "mlp: %s\n", sl_last_error());
    return 2;
  }
  c.pp = (int)pp;
  c.micro = (int)micro;
  c.schedule = schedule;
  for (int s = 0; s < c.pp; s++)
    c.stage_placement[s] = stages[s];
  if (strcmp(optimizer, "sgd") == 0) {
    c.opt = sl_optimizer_sgd(lr > 0 ? lr : 0.05, momentum);
  } else if (strcmp(optimizer, "adam") == 0) {
    if (momentum != 0) {
      fprintf(stderr, "mlp: flag '--momentum' is for --optimizer sgd\n");
      return 2;
    }
    c.opt = sl_optimizer_adam(lr > 0 ? lr : 1e-3);
  } else {
    fprintf(stderr, "mlp: unknown optimizer '%s' (sgd, adam)\n", optimizer);
    return 2;
  }
  if (ex_train_flags_apply(&tf, &c.dtype, &c.opt) != SL_OK) {
    fprintf(stderr, "mlp: %s\n", sl_last_error());
    return 2;
  }
  c.recompute = recompute;
  char xpath[1024] = "", ypath[1024] = "";
  if (data) {
    const char *comma = strchr(data, ',');
    if (!comma || comma == data || !comma[1] ||
        (size_t)(comma - data) >= sizeof xpath) {
      fprintf(stderr, "mlp: --data wants X.npy,LABELS.npy, got '%s'\n", data);
      return 2;
    }
    snprintf(xpath, sizeof xpath, "%.*s", (int)(comma - data), data);
    snprintf(ypath, sizeof ypath, "%s", comma + 1);
    c.data = EX_MLP_DATA_NPY;
    c.npy_x = xpath;
    c.npy_labels = ypath;
  }
  if ((trace &&
       !ex_path_check_file_writable("trace", trace, err, sizeof err)) ||
      !ex_ckpt_check(&ckf, err, sizeof err)) {
    fprintf(stderr, "mlp: %s\n", err);
    return 2;
  }
  c.batch = batch;
  c.in = in;
  c.hidden = hidden;
  c.classes = classes;
  c.layers = (int)layers;
  c.seed = (uint64_t)seed;
  c.placement = placement;

  int rc = 1;
  sl_graph *g = NULL;
  ex_run *run = NULL;
  if (sl_graph_create(&g) != SL_OK) {
    fprintf(stderr, "mlp: %s\n", sl_last_error());
    goto done;
  }
  if (ex_mlp_build(g, &c) != SL_OK) {
    fprintf(stderr, "mlp: building the model: %s\n",
            sl_graph_status(g) != SL_OK ? sl_graph_error(g) : sl_last_error());
    goto done;
  }
  if (ex_run_create(g, &ro, &run) != SL_OK) {
    fprintf(stderr, "mlp: %s\n", sl_last_error());
    goto done;
  }
  if (!ex_run_needs(run, "mlp", memory, "--memory", EX_ENGINE_SESSION) ||
      !ex_run_needs(run, "mlp", ex_ckpt_any(&ckf),
                    "checkpoints (--save, --load, --resume)",
                    EX_ENGINE_SESSION) ||
      !ex_run_needs(run, "mlp", check, "--check-replicas", EX_ENGINE_SHARDED) ||
      !ex_run_needs(run, "mlp", pp > 1 || micro > 1 || schedule,
                    "pipelining (--pp, --micro, --schedule)",
                    EX_ENGINE_SESSION)) {
    rc = 2;
    goto done;
  }
  printf("mlp: %lld hidden layers of %lld, batch %lld%s%s, layout %s on %s, "
         "engine %s\n",
         (long long)layers, (long long)hidden, (long long)batch,
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
  if (ex_ckpt_begin(&ck, &ckf, run, ex_mlp_torch_name, &c, stdout, &first) !=
      SL_OK) {
    fprintf(stderr, "mlp: %s\n", sl_last_error());
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
    fprintf(stderr, "mlp: %s\n", sl_last_error());
    goto done;
  }
  if (first < steps) ex_train_print(stdout, &res, run, layout, placement);
  if (profile && first < steps)
    ex_run_profile_print(run, stdout, 16, (int)(steps - first));
  if (memory && ex_run_memory_print(run, stdout) != SL_OK) {
    fprintf(stderr, "mlp: %s\n", sl_last_error());
    goto done;
  }
  rc = 0;
done:
  ex_run_destroy(run);
  sl_graph_destroy(g);
  return rc;
}
