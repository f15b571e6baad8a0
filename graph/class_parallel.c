/* Class-parallel softmax and cross-entropy: Megatron's vocabulary-parallel
 * cross-entropy and InsightFace's model-parallel softmax, chosen by SBP.
 *
 * softmax, log_softmax, sparse_cross_entropy and their gradients normalise
 * over one axis (the classes), so their fused kernels need every class of a
 * row: a tensor split over that axis would be all-gathered, [rows, C] per
 * device, and the gradient built whole. When SBP inference reaches such an
 * op and an input arrives split over its axis on some mesh axis, the op is
 * expanded into ops that each work on their shard of the classes, with the
 * row statistics reduced as [rows] partial values:
 *
 *   m = max_c x            (reduce_max: P(max), all-reduced)
 *   z = x - m, e = exp(z)  (local)
 *   s = sum_c e            (reduce_sum: P, all-reduced)
 *   softmax = e / s,  log_softmax = z - log s
 *   sparse_cross_entropy = log s - sum_c z * one_hot(label)   (P, reduced)
 *   softmax_grad      = y * (dy - sum_c dy * y)
 *   log_softmax_grad  = dy - exp(y) * sum_c dy
 *   sparse_cross_entropy_grad = (e / s - one_hot(label)) * dloss
 *
 * Every full-size tensor stays split over the classes; what crosses
 * devices is [rows] wide. The fused kernel's max-shifted formula is kept,
 * so the results differ from it only in the order of the sums. The
 * cross-entropy's gradient reuses its forward's m and s (reduced once per
 * step, [rows] kept from the forward to the backward pass) when it reads
 * the same logits; e is computed again.
 *
 * Autodiff has run by then (each gradient op is expanded on its own), so
 * the new ops need no gradients. The expanded node itself becomes the last
 * op of its expansion: its name and output value stay, so consumers,
 * fetches and names are untouched; the new ops, named "<node>/<op>_<n>",
 * are placed just before it and inherit its pass, micro-batch, stage and
 * recomputation. */
#include <string.h>

#include "graph_priv.h"

typedef enum cp_kind {
  CP_NONE = 0,
  CP_SOFTMAX,
  CP_LOG_SOFTMAX,
  CP_SOFTMAX_GRAD,
  CP_LOG_SOFTMAX_GRAD,
  CP_CE,
  CP_CE_GRAD,
} cp_kind;

static cp_kind kind_of(const sl__node *n) {
  static const struct {
    const char *op;
    cp_kind kind;
  } ops[] = {{"softmax", CP_SOFTMAX},
             {"log_softmax", CP_LOG_SOFTMAX},
             {"softmax_grad", CP_SOFTMAX_GRAD},
             {"log_softmax_grad", CP_LOG_SOFTMAX_GRAD},
             {"sparse_cross_entropy", CP_CE},
             {"sparse_cross_entropy_grad", CP_CE_GRAD}};
  if (n->kind != SL__NODE_OP) return CP_NONE;
  for (size_t i = 0; i < SL_ARRAY_LEN(ops); i++)
    if (strcmp(n->op->name, ops[i].op) == 0) return ops[i].kind;
  return CP_NONE;
}

/* The input whose shape has the class axis (the others: labels, dloss). */
static int class_input(cp_kind k) { return k == CP_CE_GRAD ? 1 : 0; }

/* The class axis of node n of kind k (normalised). */
static int class_axis(const sl_graph *g, const sl__node *n, cp_kind k) {
  int nd = g->values[n->in[class_input(k)]]->meta.shape.ndim;
  int a = k == CP_CE || k == CP_CE_GRAD
              ? nd - 1
              : (int)sl__attr_int(&n->attrs, "axis", -1);
  return a < 0 ? a + nd : a;
}

/* Whether value v is split over tensor axis a on some mesh axis. */
static bool split_over(const sl__value *v, int a) {
  for (int m = 0; m < v->sbp.ndim; m++)
    if (v->sbp.sbp[m].kind == SL_SBP_SPLIT && v->sbp.sbp[m].axis == a)
      return true;
  return false;
}

bool sl__g_class_split(const sl_graph *g, const sl__node *n,
                       const uint8_t *open) {
  cp_kind k = kind_of(n);
  if (k == CP_NONE) return false;
  int a = class_axis(g, n, k);
  /* The inputs of the class axis' shape: x; dy and y; logits. */
  int first = class_input(k), last = k == CP_SOFTMAX_GRAD ||
                                             k == CP_LOG_SOFTMAX_GRAD
                                         ? 1
                                         : first;
  for (int i = first; i <= last; i++)
    if (!open[n->in[i]] && split_over(g->values[n->in[i]], a)) return true;
  return false;
}

/* one_hot(labels) over logits' classes, laid out as logits are on every
 * mesh axis they split (B elsewhere), so each device builds only its own
 * classes' columns. */
static sl_tensor one_hot_like(sl_graph *g, sl_tensor labels, sl_tensor x,
                              int a) {
  const sl__value *xv = g->values[x.id];
  sl_tensor oh = sl_one_hot(labels, xv->meta.shape.dims[a]);
  if (oh.id < 0) return oh;
  sl__value *o = g->values[oh.id];
  o->sbp.ndim = xv->sbp.ndim;
  for (int m = 0; m < xv->sbp.ndim; m++)
    o->sbp.sbp[m] = xv->sbp.sbp[m].kind == SL_SBP_SPLIT ? xv->sbp.sbp[m]
                                                        : sl_sbp_broadcast();
  o->sbp_fixed = true;
  return oh;
}

/* Builds the expansion of node n up to its last op, which it writes as
 * (op, inputs) into *last_op, last_in. */
static void build(sl_graph *g, const sl__node *n, cp_kind k, int a,
                  const char **last_op, sl_tensor *last_in) {
  sl_tensor in0 = sl__g_tensor(g, n->in[0]);
  sl_tensor in1 = n->n_in > 1 ? sl__g_tensor(g, n->in[1]) : in0;
  sl_tensor x = k == CP_CE_GRAD ? in1 : in0;
  sl_tensor m = x, z = x, e = x, s = x; /* set where the kind uses them */
  sl__value *xv = g->values[x.id];
  if (k == CP_CE_GRAD && xv->class_max && xv->class_sum) {
    /* The forward's row statistics: s is [rows], wanted as [rows, 1]. */
    sl_shape keep = xv->meta.shape;
    keep.dims[a] = 1;
    m = sl__g_tensor(g, xv->class_max - 1);
    z = sl_sub(x, m);
    e = sl_exp(z);
    s = sl_reshape(sl__g_tensor(g, xv->class_sum - 1), &keep);
  } else if (k == CP_SOFTMAX || k == CP_LOG_SOFTMAX || k == CP_CE ||
             k == CP_CE_GRAD) {
    m = sl_reduce_max(x, 1, &a, true);
    z = sl_sub(x, m);
    e = sl_exp(z);
    s = sl_reduce_sum(e, 1, &a, k != CP_CE);
    if (k == CP_CE && m.id >= 0 && s.id >= 0) {
      g->values[x.id]->class_max = m.id + 1;
      g->values[x.id]->class_sum = s.id + 1;
    }
  }
  switch (k) {
  case CP_SOFTMAX:
    *last_op = "div";
    last_in[0] = e, last_in[1] = s;
    break;
  case CP_LOG_SOFTMAX:
    *last_op = "sub";
    last_in[0] = z, last_in[1] = sl_log(s);
    break;
  case CP_SOFTMAX_GRAD: /* in0 = dy, in1 = y */
    *last_op = "mul";
    last_in[0] = in1;
    last_in[1] = sl_sub(in0, sl_reduce_sum(sl_mul(in0, in1), 1, &a, true));
    break;
  case CP_LOG_SOFTMAX_GRAD:
    *last_op = "sub";
    last_in[0] = in0;
    last_in[1] = sl_mul(sl_exp(in1), sl_reduce_sum(in0, 1, &a, true));
    break;
  case CP_CE: { /* in1 = labels */
    sl_tensor picked =
        sl_reduce_sum(sl_mul(z, one_hot_like(g, in1, x, a)), 1, &a, false);
    *last_op = "sub";
    last_in[0] = sl_log(s), last_in[1] = picked;
    break;
  }
  case CP_CE_GRAD: { /* in0 = dloss, in2 = labels */
    sl_tensor labels = sl__g_tensor(g, n->in[2]);
    sl_shape col = g->values[n->in[0]]->meta.shape;
    col.dims[col.ndim++] = 1;
    *last_op = "mul";
    last_in[0] = sl_sub(sl_div(e, s), one_hot_like(g, labels, x, a));
    last_in[1] = sl_reshape(in0, &col);
    break;
  }
  case CP_NONE: break;
  }
}

/* Moves nodes [from, g->n_nodes) to just before index `at`, renumbering
 * what names node indices. */
static void move_before(sl_graph *g, int32_t at, int32_t from) {
  int32_t k = g->n_nodes - from;
  sl__gnode **moved = g->nodes + from;
  sl__gnode *tmp[64];
  SL_ASSERT(k <= (int32_t)SL_ARRAY_LEN(tmp));
  memcpy(tmp, moved, (size_t)k * sizeof *tmp);
  memmove(g->nodes + at + k, g->nodes + at, (size_t)(from - at) * sizeof *tmp);
  memcpy(g->nodes + at, tmp, (size_t)k * sizeof *tmp);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sl__gnode *gn = g->nodes[i];
    if (gn->n.micro_of >= at && gn->n.micro_of < from) gn->n.micro_of += k;
    if (i < at) continue;
    gn->index = i;
    for (int j = 0; j < gn->n.n_out; j++)
      g->values[gn->n.out[j]]->producer = i;
  }
}

sl_status sl__g_class_expand(sl_graph *g, int32_t i) {
  sl__gnode *gn = g->nodes[i];
  sl__node *n = &gn->n;
  cp_kind k = kind_of(n);
  int a = class_axis(g, n, k);
  int32_t n0 = g->n_nodes;
  /* Build as the node's own pass would, on its placement, in a scope named
   * after it. */
  char saved_scope[sizeof g->scope];
  memcpy(saved_scope, g->scope, sizeof saved_scope);
  int saved_depth = g->scope_depth, saved_recompute = g->recompute_depth;
  sl__mark saved_mark = g->mark;
  sl_placement *saved_place = g->force_placement;
  snprintf(g->scope, sizeof g->scope, "%s", n->name);
  g->scope_depth = 0;
  g->recompute_depth = 0;
  g->mark = n->optimizer  ? SL__MARK_OPTIMIZER
            : n->backward ? SL__MARK_BACKWARD
                          : SL__MARK_FORWARD;
  g->force_placement = n->placement;
  const char *last_op = NULL;
  sl_tensor last_in[2] = {sl__g_tensor(g, n->in[0]), sl__g_tensor(g, n->in[0])};
  build(g, n, k, a, &last_op, last_in);
  memcpy(g->scope, saved_scope, sizeof saved_scope);
  g->scope_depth = saved_depth;
  g->recompute_depth = saved_recompute;
  g->mark = saved_mark;
  g->force_placement = saved_place;
  if (g->err) return g->err;
  for (int32_t j = n0; j < g->n_nodes; j++) {
    sl__gnode *c = g->nodes[j];
    c->n.micro = n->micro;
    c->n.stage = n->stage;
    c->n.phase = n->phase;
    c->n.recompute = n->recompute;
    c->recompute = gn->recompute;
  }
  /* The node becomes the last op, with the output it had. */
  const sl__op_def *op = sl__op_find(last_op);
  sl__meta in[2] = {g->values[last_in[0].id]->meta,
                    g->values[last_in[1].id]->meta};
  sl__meta out;
  sl__attrs none = {0};
  if (!op || op->infer(&none, 2, in, &out) != SL_OK ||
      !sl_shape_equal(&out.shape, &g->values[n->out[0]]->meta.shape))
    return sl__g_error(g, SL_EINTERNAL, "op", n->name, n->op->name,
                       "its class-parallel form does not give its shape");
  n->op = op;
  n->attrs = none;
  n->n_in = 2;
  n->in[0] = last_in[0].id;
  n->in[1] = last_in[1].id;
  move_before(g, i, n0);
  return SL_OK;
}
