/* The GPT model (see model.h). */
#include "gpt/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ex_util.h"

ex_gpt_config ex_gpt_defaults(void) {
  ex_gpt_config c = {0};
  c.batch = 8;
  c.seq = 32;
  c.vocab = 64;
  c.hidden = 64;
  c.heads = 4;
  c.layers = 2;
  c.seed = 1;
  c.layout = EX_LAYOUT_SINGLE;
  c.placement = "cpu:0";
  c.pp = 1;
  c.micro = 1;
  c.opt = sl_optimizer_adam(3e-3);
  return c;
}

typedef struct builder {
  sl_graph *g;
  const ex_gpt_config *c;
  uint64_t seed;
} builder;

/* With `megatron`, the all-reduce that closes an attention or MLP block
 * under tensor parallelism: its output to the activations' replicated
 * layout. Without, the output is left to the compiler, which at the
 * example's sizes splits the batch and gathers each weight's shard before
 * use instead: forcing the replicated layout there costs an all-gather and
 * a slice back per block. */
static sl_tensor all_reduce(builder *b, sl_tensor partial) {
  if (!b->c->megatron || !ex_layout_is_tensor_parallel(b->c->layout))
    return partial;
  char sbp[32];
  ex_layout_sbp(b->c->layout, 0, -1, sbp, sizeof sbp);
  return sl_to_global(partial, NULL, sbp);
}

/* A parameter split on tensor axis `model_axis` by tensor parallelism (-1:
 * replicated), never by data parallelism. */
static sl_tensor param(builder *b, const char *name, const sl_shape *s,
                       sl_init init, int model_axis) {
  char sbp[32];
  ex_layout_sbp(b->c->layout, -1, model_axis, sbp, sizeof sbp);
  return sl_variable(b->g, name, s, SL_DTYPE_F32, init, NULL, sbp);
}

static sl_init normal(builder *b, double std) {
  return sl_init_normal(0, std, ++b->seed);
}

static sl_tensor layer_norm(builder *b, sl_tensor x, const char *name) {
  char gn[64], bn[64];
  snprintf(gn, sizeof gn, "%s.g", name);
  snprintf(bn, sizeof bn, "%s.b", name);
  sl_shape s = SL_SHAPE(b->c->hidden);
  sl_tensor gamma = param(b, gn, &s, sl_init_constant(1), -1);
  sl_tensor beta = param(b, bn, &s, sl_init_zeros(), -1);
  return sl_name(sl_layer_norm(x, gamma, beta, 1e-5), name);
}

/* [B,S,H,hd] <-> [B,H,S,hd]. */
static sl_tensor swap_heads(sl_tensor t) {
  static const int perm[4] = {0, 2, 1, 3};
  return sl_transpose(t, 4, perm);
}

/* Causal self-attention of a [B,S,D]: [B,S,D], partial under tensor
 * parallelism until the residual add all-reduces it. The weights carry a
 * head axis — q, k, v [D, H, hd], the output projection [H, hd, D] — which
 * tensor parallelism splits, so each rank holds whole heads whatever the
 * device count, and the projections are single matrix products in memory:
 * a [B,S,D] times [D, H*hd] gives [B,S,H,hd], and [B,S,H,hd] contracted
 * over (H, hd) with [H, hd, D] gives [B,S,D]. */
static sl_tensor attention(builder *b, sl_tensor a, const char *name) {
  const ex_gpt_config *c = b->c;
  int64_t hd = c->hidden / c->heads;
  sl_shape wqs = SL_SHAPE(c->hidden, c->heads, hd),
           wos = SL_SHAPE(c->heads, hd, c->hidden);
  sl_tensor qkv[3];
  const char *parts[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    char wn[64], pn[64];
    snprintf(wn, sizeof wn, "%s.w%s", name, parts[i]);
    snprintf(pn, sizeof pn, "%s.%s", name, parts[i]);
    sl_tensor w = param(b, wn, &wqs, normal(b, 0.02), 1);
    qkv[i] = sl_name(swap_heads(sl_matmul(a, w, false, false)), pn);
  }
  sl_tensor att = sl_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], true);
  char on[64], won[64];
  snprintf(on, sizeof on, "%s.o", name);
  snprintf(won, sizeof won, "%s.wo", name);
  sl_tensor wo =
      param(b, won, &wos, normal(b, 0.02 / sqrt(2.0 * c->layers)), 0);
  return all_reduce(b, sl_name(sl_tensordot(swap_heads(att), wo, 2), on));
}

/* fc2(gelu(fc1(m))): fc1 column-split, fc2 row-split (partial output). */
static sl_tensor mlp(builder *b, sl_tensor m, const char *name) {
  const ex_gpt_config *c = b->c;
  int64_t d = c->hidden, f = 4 * c->hidden;
  char n1[64], n1b[64], n2[64], n2b[64];
  snprintf(n1, sizeof n1, "%s.fc1.w", name);
  snprintf(n1b, sizeof n1b, "%s.fc1.b", name);
  snprintf(n2, sizeof n2, "%s.fc2.w", name);
  snprintf(n2b, sizeof n2b, "%s.fc2.b", name);
  sl_shape w1s = SL_SHAPE(d, f), b1s = SL_SHAPE(f), w2s = SL_SHAPE(f, d),
           b2s = SL_SHAPE(d);
  sl_tensor w1 = param(b, n1, &w1s, normal(b, 0.02), 1);
  sl_tensor b1 = param(b, n1b, &b1s, sl_init_zeros(), 0);
  sl_tensor w2 = param(b, n2, &w2s, normal(b, 0.02 / sqrt(2.0 * c->layers)), 0);
  sl_tensor b2 = param(b, n2b, &b2s, sl_init_zeros(), -1);
  sl_tensor h = sl_gelu(sl_add(sl_matmul(m, w1, false, false), b1));
  return sl_add(all_reduce(b, sl_matmul(h, w2, false, false)), b2);
}

sl_status ex_gpt_build(sl_graph *g, const ex_gpt_config *cfg) {
  /* With micro-batches the graph is built for one micro-batch. */
  ex_gpt_config mc = *cfg;
  const ex_gpt_config *c = &mc;
  EX_CHECK(ex_pipeline_setup(g, "gpt", mc.micro, mc.schedule, &mc.batch));
  if (c->heads < 1 || c->hidden % c->heads != 0)
    return sl_set_error(SL_EINVAL,
                        "gpt: hidden %lld is not a multiple of heads "
                        "%lld",
                        (long long)c->hidden, (long long)c->heads);
  if (c->seq < 1 || c->vocab < 2 || c->layers < 1 || c->batch < 1)
    return sl_set_error(SL_EINVAL,
                        "gpt: want batch, seq, layers >= 1 and vocab "
                        ">= 2");
  if (!c->npy_inputs != !c->npy_targets)
    return sl_set_error(SL_EINVAL,
                        "gpt: .npy data wants both the inputs and the "
                        "targets");
  sl_status st = sl_graph_set_default_placement(
      g, c->pp > 1 ? c->stage_placement[0] : c->placement);
  if (st == SL_OK) st = sl_graph_set_compute_dtype(g, c->dtype);
  if (st != SL_OK) return st;
  builder bd = {g, c, c->seed * 1000};
  builder *b = &bd;
  char dsbp[32], rsbp[32];
  ex_layout_sbp(c->layout, 0, -1, dsbp, sizeof dsbp);
  ex_layout_sbp(c->layout, -1, -1, rsbp, sizeof rsbp);

  sl_tensor inputs, targets;
  if (c->npy_inputs) {
    inputs =
        sl_name(sl_data_npy(g, c->npy_inputs, c->batch, NULL, dsbp), "inputs");
    targets = sl_name(sl_data_npy(g, c->npy_targets, c->batch, NULL, dsbp),
                      "targets");
  } else {
    /* Tokens t[:, 0..S]; inputs t[:, 1..S], targets f(t[:, 0..S-1]). */
    sl_shape ts = SL_SHAPE(c->batch, c->seq + 1), ms = SL_SHAPE(c->vocab, 1),
             tgs = SL_SHAPE(c->batch, c->seq);
    sl_tensor tokens =
        sl_name(sl_data_random_int(g, &ts, SL_DTYPE_I32, 0, c->vocab,
                                   b->seed + 500, NULL, dsbp),
                "tokens");
    sl_tensor map = sl_variable_set_trainable(
        sl_variable(g, "next_map", &ms, SL_DTYPE_F32,
                    sl_init_uniform(0, (double)c->vocab - 0.5, b->seed + 501),
                    NULL, rsbp),
        false);
    inputs = sl_name(sl_slice_of(tokens, 1, 1, c->seq + 1), "inputs");
    sl_tensor prev = sl_slice_of(tokens, 1, 0, c->seq);
    targets = sl_name(
        sl_cast(sl_reshape(sl_embedding(map, prev), &tgs), SL_DTYPE_I32),
        "targets");
  }

  sl_shape es = SL_SHAPE(c->vocab, c->hidden), ps = SL_SHAPE(c->seq, c->hidden);
  /* Tensor parallelism splits the LM head over the vocabulary: the logits
   * stay split, and the loss reduces only per-token values across devices
   * (docs/vocab_parallel.md). A tied head is the embedding's table. */
  sl_tensor wte = param(b, "wte", &es, normal(b, 0.02), c->tie ? 0 : -1);
  sl_tensor wpe = param(b, "wpe", &ps, normal(b, 0.01), -1);
  sl_tensor x = sl_name(sl_add(sl_embedding(wte, inputs), wpe), "embed");
  int stage = 0;
  for (int l = 0; l < c->layers; l++) {
    if (c->pp > 1 && ex_stage_of(l, c->layers, c->pp) != stage)
      x = ex_enter_stage(
          g, c->stage_placement[stage = ex_stage_of(l, c->layers, c->pp)], x,
          dsbp);
    char name[32], ln[48];
    snprintf(name, sizeof name, "h%d", l);
    snprintf(ln, sizeof ln, "%s.ln1", name);
    char an[48];
    snprintf(an, sizeof an, "%s.attn", name);
    if (c->recompute) sl_graph_push_recompute(g);
    x = sl_add(x, attention(b, layer_norm(b, x, ln), an));
    snprintf(ln, sizeof ln, "%s.ln2", name);
    snprintf(an, sizeof an, "%s.mlp", name);
    x = sl_add(x, mlp(b, layer_norm(b, x, ln), an));
    if (c->recompute) sl_graph_pop_recompute(g);
  }
  if (c->pp > 1 && stage != c->pp - 1)
    x = ex_enter_stage(g, c->stage_placement[stage = c->pp - 1], x, dsbp);
  if (c->pp > 1)
    targets = sl_to_global(targets, c->stage_placement[stage], dsbp);
  x = layer_norm(b, x, "lnf");
  sl_tensor logits;
  if (c->tie) {
    logits = sl_matmul(x, wte, false, true);
  } else {
    sl_shape hs = SL_SHAPE(c->hidden, c->vocab);
    sl_tensor head = param(b, "head.w", &hs, normal(b, 0.02), 1);
    logits = sl_matmul(x, head, false, false);
  }
  logits = sl_name(logits, "logits");
  sl_tensor loss = sl_name(sl_cross_entropy(logits, targets), "xent");
  st = sl_minimize(loss, &c->opt);
  if (st != SL_OK) return st;
  return sl_fetch(loss, "loss");
}

bool ex_gpt_torch_name(const void *ctx, const char *var, char *name,
                       size_t size, ex_torch_layout *layout) {
  const ex_gpt_config *c = ctx;
  /* Whole-model tensors: the same name, or the peer's underscore. */
  static const char *const top[][2] = {{"wte", "wte"},
                                       {"wpe", "wpe"},
                                       {"lnf.g", "lnf_g"},
                                       {"lnf.b", "lnf_b"},
                                       {"head.w", "head"}};
  *layout = EX_TORCH_SAME;
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
    if (strcmp(var, top[i][0]) == 0) {
      snprintf(name, size, "%s", top[i][1]);
      return true;
    }
  /* Block tensors: "hL.<part>" -> "blocks.L.<peer's key>". */
  static const struct {
    const char *part, *key;
    ex_torch_layout layout;
  } block[] = {
      {"ln1.g", "ln1_g", EX_TORCH_SAME},
      {"ln1.b", "ln1_b", EX_TORCH_SAME},
      {"attn.wq", "wq", EX_TORCH_MERGE_LAST},
      {"attn.wk", "wk", EX_TORCH_MERGE_LAST},
      {"attn.wv", "wv", EX_TORCH_MERGE_LAST},
      {"attn.wo", "wo", EX_TORCH_MERGE_FIRST},
      {"ln2.g", "ln2_g", EX_TORCH_SAME},
      {"ln2.b", "ln2_b", EX_TORCH_SAME},
      {"mlp.fc1.w", "fc1_w", EX_TORCH_SAME},
      {"mlp.fc1.b", "fc1_b", EX_TORCH_SAME},
      {"mlp.fc2.w", "fc2_w", EX_TORCH_SAME},
      {"mlp.fc2.b", "fc2_b", EX_TORCH_SAME},
  };
  if (var[0] != 'h') return false;
  char *end;
  long l = strtol(var + 1, &end, 10);
  if (end == var + 1 || *end != '.' || l < 0 || l >= c->layers) return false;
  for (size_t i = 0; i < sizeof block / sizeof block[0]; i++)
    if (strcmp(end + 1, block[i].part) == 0) {
      snprintf(name, size, "blocks.%ld.%s", l, block[i].key);
      *layout = block[i].layout;
      return true;
    }
  return false;
}
