/* sluice examples — a decoder-only transformer (GPT-2 shaped): token and
 * position embeddings, `layers` pre-LN blocks of causal self-attention
 * (sl_scaled_dot_product_attention) and a GELU MLP, a final layer norm and
 * a head tied to the token embedding or separate (`tie`). The example
 * program and its tests build it with ex_gpt_build.
 *
 * Attention weights carry a head axis — Q, K, V as [heads, hidden, hd] and
 * the output projection as [heads, hd, hidden] — so tensor parallelism
 * splits whole heads even when the device count does not divide them. The
 * projections are batched matmuls over [batch, heads]:
 *   x [B,S,D] -> [B,1,S,D] -> broadcast [B,H,S,D];
 *   W [H,D,hd] -> [1,H,D,hd] -> broadcast [B,H,D,hd];  q = x_b · W_b
 *   o = sum over heads of att [B,H,S,hd] · Wo_b [B,H,hd,D].
 *
 * Layouts (ex_flags.h): dp splits the batch; tp splits the weights as
 * Megatron does: Q, K, V and fc1 column-split (by heads / by fc1 outputs),
 * the output projection and fc2 row-split; embeddings and layer norms stay
 * replicated. With `megatron` each attention and each MLP then ends in one
 * all-reduce of a partial sum; without, the compiler chooses (at small
 * sizes it splits the batch and gathers each weight's shard). hybrid does
 * both on a [N/2, 2] mesh.
 *
 * Data: synthetic token sequences that can be learnt: t[b, 0..S] uniform in
 * [0, vocab) (a counter-based source, identical under any layout), the
 * model reads t[:, 1..S] and predicts at position i the token
 * f(t[:, i]) = f(previous input token) for a fixed random map f (a
 * non-trainable table), so attention to the previous position is what
 * lowers the loss; position 0's target depends on a token the model never
 * sees. Or .npy files of token ids (npy_inputs, npy_targets; [N, seq],
 * i32 or i64), `batch` rows of each per step, step k reading rows
 * [k*batch, (k+1)*batch) modulo N, each device its own slice (dp splits the
 * rows): what bench/peers/gpt_torch.py --save-batch writes. */
#ifndef SLUICE_EXAMPLES_GPT_MODEL_H
#define SLUICE_EXAMPLES_GPT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <sluice/graph.h>

#include "common/ex_ckpt.h"
#include "common/ex_flags.h"
#include "common/ex_pipeline.h"

typedef struct ex_gpt_config {
  int64_t batch, seq, vocab, hidden, heads;
  int layers;
  bool tie; /* head = token embedding transposed */
  /* Mixed precision (sl_graph_set_compute_dtype): SL_DTYPE_BF16 or F16
   * makes every matmul (projections, attention, MLP, head, and the
   * backward pass's) take 16-bit inputs, f32 products and outputs;
   * everything else stays f32. SL_DTYPE_F32 (the default): off. */
  sl_dtype dtype;
  uint64_t seed;
  const char *npy_inputs, *npy_targets; /* both or neither; NULL: the
                                           synthetic task */
  ex_layout layout;
  const char *placement; /* from ex_layout_placement */
  /* tp and hybrid: keep the activations replicated between blocks, so that
   * each attention and each MLP ends in one all-reduce of its partial sum
   * (Megatron's plan). Off: the compiler chooses, by its costs, how the
   * split weights are used (docs/examples.md). */
  bool megatron;
  sl_optimizer opt;
  bool recompute; /* each block a recompute region */
  /* Pipelining (docs/pipeline.md): pp stages (1: none) on
   * stage_placement[0..pp) (ex_stage_placements) with the blocks balanced
   * over them, the embedding on the first and the head on the last;
   * `micro` micro-batches of batch/micro rows per step; the schedule (NULL:
   * 1f1b). */
  int pp, micro;
  const char *stage_placement[EX_MAX_STAGES];
  const char *schedule;
} ex_gpt_config;

/* Defaults: batch 8, seq 32, vocab 64, hidden 64, 4 heads, 2 layers,
 * untied, seed 1, synthetic data, single on cpu:0, Adam lr 3e-3. */
ex_gpt_config ex_gpt_defaults(void);

/* Builds the model, the loss (fetched as "loss") and the optimizer into the
 * empty graph g. SL_EINVAL when hidden is not a multiple of heads or only
 * one .npy file is given; else the graph's status (its message names the
 * failing op, a .npy file's path among them). */
sl_status ex_gpt_build(sl_graph *g, const ex_gpt_config *c);

/* The ex_torch_map_fn of bench/peers/gpt_torch.py's model (ctx: the
 * ex_gpt_config), whose state_dict() names its parameters "wte", "wpe",
 * "blocks.L.ln1_g", "blocks.L.wq", ..., "lnf_g", "head"
 * (docs/examples.md has the table). Q, K and V are [D, D] matrices there,
 * [D, H, hd] here, and the output projection [D, D] there, [H, hd, D]
 * here: the same numbers in the same order (EX_TORCH_MERGE_LAST and
 * EX_TORCH_MERGE_FIRST); everything
 * else has sluice's shape too (the peer multiplies x @ W, not
 * nn.Linear). */
bool ex_gpt_torch_name(const void *ctx, const char *var, char *name,
                       size_t size, ex_torch_layout *layout);

#endif
