/* sluice examples — the MLP classifier: `layers` hidden layers of width
 * `hidden` with ReLU, a linear head, softmax cross-entropy, trained by SGD
 * or Adam. The example program, its tests and bench/mlp_vs_torch all build
 * it with ex_mlp_build.
 *
 * Layouts (ex_flags.h):
 *   single  everything broadcast on the placement (one device: plain)
 *   dp      batch S(0); weights B; the gradients are partial and all-reduced
 *   tp      Megatron: matmul j (the hidden layers, then the head) is
 *           column-split (W S(1), bias S(0)) for even j and row-split (W
 *           S(0), bias B) for odd j, so each column/row pair needs ONE
 *           all-reduce (of the row-split output); a head that would be
 *           column-split stays replicated
 *   hybrid  a [N/2, 2] mesh: (S(0),B) data, (B,S(1)) / (B,S(0)) weights
 *
 * Data: synthetic (default) is a Gaussian mixture drawn fresh each step by
 * counter-based sources, identical under any layout: labels uniform in
 * [0, classes), x = centroid[label] + noise, with the centroids a fixed
 * random (non-trainable) table, so the task is learnable and the loss
 * falls. Or `.npy` files (x [N, in] f32, labels [N] i32/i64), read `batch`
 * rows per step, each device reading its own slice. Or inputs "x" and
 * "labels" fed by the program (benchmarks). */
#ifndef SLUICE_EXAMPLES_MLP_MODEL_H
#define SLUICE_EXAMPLES_MLP_MODEL_H

#include <stdint.h>

#include <sluice/graph.h>

#include "common/ex_ckpt.h"
#include "common/ex_flags.h"
#include "common/ex_pipeline.h"

typedef enum ex_mlp_data {
  EX_MLP_DATA_SYNTHETIC = 0,
  EX_MLP_DATA_NPY = 1,
  EX_MLP_DATA_FEED = 2, /* inputs "x" [batch, in] f32, "labels" [batch] i32 */
} ex_mlp_data;

typedef struct ex_mlp_config {
  int64_t batch, in, hidden, classes;
  int layers; /* hidden layers, >= 1 */
  uint64_t seed;
  ex_layout layout;
  const char *placement; /* from ex_layout_placement */
  ex_mlp_data data;
  const char *npy_x, *npy_labels; /* EX_MLP_DATA_NPY */
  sl_optimizer opt;
  bool recompute; /* each hidden layer a recompute region */
  sl_dtype dtype; /* the matmuls' inputs (sl_graph_set_compute_dtype) */
  /* Pipelining (docs/pipeline.md): pp stages (1: none) on
   * stage_placement[0..pp) (ex_stage_placements), the matmuls balanced
   * over them; `micro` micro-batches of batch/micro rows per step (1:
   * none); the schedule (NULL: 1f1b). */
  int pp, micro;
  const char *stage_placement[EX_MAX_STAGES];
  const char *schedule;
} ex_mlp_config;

/* The defaults: batch 256, in 1024, 4 hidden layers of 1024, 10 classes,
 * seed 1, single on cpu:0, synthetic data, SGD lr 0.05. */
ex_mlp_config ex_mlp_defaults(void);

/* Builds the model, its loss (fetched as "loss") and the optimizer into
 * the empty graph g (default placement set from c->placement). Returns the
 * graph's status; the graph's error message names the failing op. For .npy
 * data, the in-feature count comes from the file (c->in is ignored). */
sl_status ex_mlp_build(sl_graph *g, const ex_mlp_config *c);

/* The ex_torch_map_fn of bench/peers/mlp_torch.py's model (ctx: the
 * ex_mlp_config), an nn.Sequential of Linear, ReLU, ..., Linear whose
 * state_dict names its tensors by position: fcJ.w and fcJ.b are
 * "{2(J-1)}.weight" (transposed: nn.Linear keeps [out, in]) and
 * "{2(J-1)}.bias", the head "{2 layers}.weight" and ".bias". The synthetic
 * data's centroids have no PyTorch name. */
bool ex_mlp_torch_name(const void *ctx, const char *var, char *name,
                       size_t size, ex_torch_layout *layout);

#endif
