/* The MLP classifier (see model.h). */
#include "mlp/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ex_util.h"

ex_mlp_config ex_mlp_defaults(void) {
  ex_mlp_config c = {0};
  c.batch = 256;
  c.in = 1024;
  c.hidden = 1024;
  c.classes = 10;
  c.layers = 4;
  c.seed = 1;
  c.layout = EX_LAYOUT_SINGLE;
  c.placement = "cpu:0";
  c.data = EX_MLP_DATA_SYNTHETIC;
  c.opt = sl_optimizer_sgd(0.05, 0);
  c.pp = 1;
  c.micro = 1;
  return c;
}

/* How tensor parallelism splits matmul j of n (the hidden layers, then the
 * head): alternately by columns and rows, so a row-split layer consumes the
 * column-split layer's S(1) activations directly and one all-reduce of its
 * partial output closes the pair. */
typedef enum tp_role { TP_COL = 0, TP_ROW = 1, TP_REPLICATED = 2 } tp_role;

static tp_role role_of(int j, int n) {
  if (j % 2 == 1) return TP_ROW;
  /* A column-split head would leave split logits that the loss must gather:
   * a small replicated head is cheaper and simpler. */
  return j == n - 1 ? TP_REPLICATED : TP_COL;
}

/* One linear layer y = x W + b with W [in, out], b [out] laid out for its
 * role; `relu` applies the activation. */
static sl_tensor linear(sl_graph *g, const ex_mlp_config *c, sl_tensor x,
                        const char *name, int64_t in, int64_t out, tp_role r,
                        bool relu, uint64_t seed) {
  char wname[64], bname[64], wsbp[32], bsbp[32];
  int w_axis = r == TP_COL ? 1 : r == TP_ROW ? 0 : -1;
  int b_axis = r == TP_COL ? 0 : -1;
  ex_layout_sbp(c->layout, -1, w_axis, wsbp, sizeof wsbp);
  ex_layout_sbp(c->layout, -1, b_axis, bsbp, sizeof bsbp);
  snprintf(wname, sizeof wname, "%s.w", name);
  snprintf(bname, sizeof bname, "%s.b", name);
  sl_shape ws = SL_SHAPE(in, out), bs = SL_SHAPE(out);
  /* He init for the ReLU layers, Glorot for the head. */
  sl_init wi = relu ? sl_init_kaiming_uniform(sqrt(2.0), seed)
                    : sl_init_xavier_uniform(1.0, seed);
  sl_tensor w = sl_variable(g, wname, &ws, SL_DTYPE_F32, wi, NULL, wsbp);
  sl_tensor b =
      sl_variable(g, bname, &bs, SL_DTYPE_F32, sl_init_zeros(), NULL, bsbp);
  sl_tensor y = sl_name(sl_matmul(x, w, false, false), name);
  if (r == TP_ROW && ex_layout_is_tensor_parallel(c->layout)) {
    /* The row-split product is partial: one all-reduce to the activation
     * layout (left to itself, inference would pick a cheaper-looking
     * reduce-scatter here and pay an all-gather at the next layer). */
    char asbp[32];
    ex_layout_sbp(c->layout, 0, -1, asbp, sizeof asbp);
    y = sl_to_global(y, NULL, asbp);
  }
  y = sl_add(y, b);
  return relu ? sl_relu(y) : y;
}

sl_status ex_mlp_build(sl_graph *g, const ex_mlp_config *cfg) {
  /* With micro-batches the graph is built for one micro-batch. */
  ex_mlp_config mc = *cfg;
  const ex_mlp_config *c = &mc;
  EX_CHECK(ex_pipeline_setup(g, "mlp", mc.micro, mc.schedule, &mc.batch));
  sl_status st = sl_graph_set_default_placement(
      g, c->pp > 1 ? c->stage_placement[0] : c->placement);
  if (st == SL_OK) st = sl_graph_set_compute_dtype(g, c->dtype);
  if (st != SL_OK) return st;
  char dsbp[32], lsbp[32];
  /* Activations: the batch axis is what data parallelism splits. */
  ex_layout_sbp(c->layout, 0, -1, dsbp, sizeof dsbp);
  ex_layout_sbp(c->layout, 0, -1, lsbp, sizeof lsbp);
  sl_tensor x, labels;
  int64_t in = c->in;
  uint64_t seed = c->seed * 1000;
  switch (c->data) {
  case EX_MLP_DATA_NPY: {
    x = sl_name(sl_data_npy(g, c->npy_x, c->batch, NULL, dsbp), "x");
    labels =
        sl_name(sl_data_npy(g, c->npy_labels, c->batch, NULL, lsbp), "labels");
    sl_shape xs;
    if (sl_tensor_shape(x, &xs) == SL_OK && xs.ndim == 2) in = xs.dims[1];
    break;
  }
  case EX_MLP_DATA_FEED: {
    sl_shape xs = SL_SHAPE(c->batch, c->in), ls = SL_SHAPE(c->batch);
    x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, dsbp);
    labels = sl_input(g, "labels", &ls, SL_DTYPE_I32, NULL, lsbp);
    break;
  }
  case EX_MLP_DATA_SYNTHETIC:
  default: {
    /* A Gaussian mixture: one fixed random centroid per class. Every
     * source is counter-based, so the data never depend on the layout. */
    sl_shape cs = SL_SHAPE(c->classes, c->in), xs = SL_SHAPE(c->batch, c->in),
             ls = SL_SHAPE(c->batch);
    char rsbp[32];
    ex_layout_sbp(c->layout, -1, -1, rsbp, sizeof rsbp);
    sl_tensor centroids = sl_variable_set_trainable(
        sl_variable(g, "centroids", &cs, SL_DTYPE_F32,
                    sl_init_normal(0, 1, seed + 1), NULL, rsbp),
        false);
    labels = sl_name(sl_data_random_int(g, &ls, SL_DTYPE_I32, 0, c->classes,
                                        seed + 2, NULL, lsbp),
                     "labels");
    sl_tensor noise = sl_name(
        sl_data_random_normal(g, &xs, SL_DTYPE_F32, 0, 1, seed + 3, NULL, dsbp),
        "noise");
    x = sl_name(sl_add(sl_embedding(centroids, labels), noise), "x");
    break;
  }
  }
  int n = c->layers + 1; /* matmuls: the hidden layers and the head */
  sl_tensor h = x;
  int stage = 0;
  for (int j = 0; j < c->layers; j++) {
    char name[32];
    snprintf(name, sizeof name, "fc%d", j + 1);
    if (ex_stage_of(j, n, c->pp) != stage)
      h = ex_enter_stage(
          g, c->stage_placement[stage = ex_stage_of(j, n, c->pp)], h, dsbp);
    if (c->recompute) sl_graph_push_recompute(g);
    h = linear(g, c, h, name, j == 0 ? in : c->hidden, c->hidden, role_of(j, n),
               true, seed + 10 + (uint64_t)j);
    if (c->recompute) sl_graph_pop_recompute(g);
  }
  if (c->pp > 1 && stage != c->pp - 1)
    h = ex_enter_stage(g, c->stage_placement[stage = c->pp - 1], h, dsbp);
  sl_tensor logits = linear(g, c, h, "head", c->layers > 0 ? c->hidden : in,
                            c->classes, role_of(n - 1, n), false, seed + 9);
  if (c->pp > 1) labels = sl_to_global(labels, c->stage_placement[stage], lsbp);
  sl_tensor loss = sl_name(sl_cross_entropy(logits, labels), "xent");
  st = sl_minimize(loss, &c->opt);
  if (st != SL_OK) return st;
  return sl_fetch(loss, "loss");
}

bool ex_mlp_torch_name(const void *ctx, const char *var, char *name,
                       size_t size, ex_torch_layout *layout) {
  const ex_mlp_config *c = ctx;
  int j; /* the Linear's index among the Linears */
  const char *part;
  if (strncmp(var, "head.", 5) == 0) {
    j = c->layers;
    part = var + 5;
  } else if (strncmp(var, "fc", 2) == 0) {
    char *end;
    long k = strtol(var + 2, &end, 10);
    if (end == var + 2 || *end != '.' || k < 1 || k > c->layers) return false;
    j = (int)k - 1;
    part = end + 1;
  } else {
    return false;
  }
  bool weight = strcmp(part, "w") == 0;
  if (!weight && strcmp(part, "b") != 0) return false;
  /* nn.Sequential numbers its modules: Linear, ReLU, Linear, ... */
  snprintf(name, size, "%d.%s", 2 * j, weight ? "weight" : "bias");
  *layout = weight ? EX_TORCH_LINEAR : EX_TORCH_SAME;
  return true;
}
