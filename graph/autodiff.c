/* Reverse-mode autodiff: from a scalar loss, each node on a path from the
 * requested tensors to the loss gets its gradient rule applied in reverse
 * topological order; gradients of a value used more than once are summed
 * with add. The new nodes sit on their forward node's placement and
 * pipeline stage, marked backward, in a scope named after it
 * ("<node>_grad/..."). */
#include <string.h>

#include "grad.h"

const sl__grad_rule *sl__grad_find(const char *op) {
  const sl__grad_rule *const tables[] = {
      sl__grad_rules_pointwise, sl__grad_rules_shape, sl__grad_rules_dense};
  for (size_t t = 0; t < SL_ARRAY_LEN(tables); t++)
    for (const sl__grad_rule *r = tables[t]; r->op; r++)
      if (strcmp(r->op, op) == 0) return r;
  return NULL;
}

sl_tensor sl__g_full_like(sl_graph *g, sl_tensor like, double v) {
  const sl__meta *m = sl__g_meta(g, like);
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "shape", m->shape.ndim, m->shape.dims);
  sl__attrs_set_int(&at, "dtype", m->dtype);
  sl__attrs_set_float(&at, "value", v);
  const sl_placement *p = g->force_placement
                              ? g->force_placement
                              : sl__g_value(g, like.id)->placement;
  return sl__g_source(g, "fill", &at, NULL, p, NULL);
}

sl_tensor sl__g_unbroadcast(sl_graph *g, sl_tensor x, sl_tensor like) {
  if (x.id < 0) return x;
  if (sl_shape_equal(&sl__g_meta(g, x)->shape, &sl__g_meta(g, like)->shape))
    return x;
  return sl_reduce_sum_like(x, like);
}

/* Adds a gradient contribution to acc[v]. */
static void accumulate(sl_graph *g, sl_tensor *acc, int32_t v, sl_tensor d) {
  if (d.id < 0) return;
  acc[v] = acc[v].id < 0 ? d : sl_add(acc[v], d);
}

/* Values the loss depends on (useful) that depend on a wrt value (dep). */
static void reach(sl_graph *g, int32_t loss, int n, const sl_tensor *wrt,
                  bool *dep, bool *useful) {
  for (int i = 0; i < n; i++)
    dep[wrt[i].id] = true;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__node *nd = &g->nodes[i]->n;
    if (nd->kind != SL__NODE_OP) continue;
    bool d = false;
    for (int k = 0; k < nd->n_in; k++)
      d = d || dep[nd->in[k]];
    for (int j = 0; j < nd->n_out && d; j++)
      dep[nd->out[j]] = true;
  }
  useful[loss] = true;
  for (int32_t i = g->values[loss]->producer; i >= 0; i--) {
    const sl__node *nd = &g->nodes[i]->n;
    if (nd->kind != SL__NODE_OP) continue;
    bool u = false;
    for (int j = 0; j < nd->n_out; j++)
      u = u || useful[nd->out[j]];
    for (int k = 0; k < nd->n_in && u; k++)
      useful[nd->in[k]] = true;
  }
}

/* The gradient acc[v] of value v in the layout sl_gradient_sbp asked for:
 * the op making it, when this pass made it (values from nv on, the count
 * before the pass) for v alone, produces that layout; another gradient is
 * converted. */
static void constrain(sl_graph *g, sl_tensor *acc, int32_t nv, int32_t v) {
  const sl__value *val = g->values[v];
  sl_tensor *a = &acc[v];
  if (val->grad_sbp.ndim == 0 || a->id < 0) return;
  bool alone = a->id >= nv;
  for (int32_t u = 0; u < nv && alone; u++)
    alone = u == v || acc[u].id != a->id;
  sl__value *grad = g->values[a->id];
  const sl__node *p = &g->nodes[grad->producer]->n;
  if (alone && !grad->sbp_fixed && p->kind == SL__NODE_OP &&
      grad->placement == val->placement) {
    grad->sbp = val->grad_sbp;
    grad->sbp_fixed = true;
    return;
  }
  *a = sl_to_global_p(*a, val->placement, &val->grad_sbp);
}

static sl_status backward(sl_graph *g, sl_tensor loss, int n,
                          const sl_tensor *wrt, sl_tensor *grads,
                          bool zeros_for_missing) {
  int32_t nv = g->n_values;
  bool *dep = sl__calloc((size_t)nv, sizeof *dep);
  bool *useful = sl__calloc((size_t)nv, sizeof *useful);
  sl_tensor *acc = sl__calloc((size_t)nv, sizeof *acc);
  sl_status st = SL_OK;
  if (!dep || !useful || !acc) {
    st = sl__g_error(g, SL_ENOMEM, "autodiff", sl_tensor_name(loss), NULL,
                     "out of memory");
    goto done;
  }
  for (int32_t v = 0; v < nv; v++)
    acc[v] = sl__g_poison(g, false);
  reach(g, loss.id, n, wrt, dep, useful);
  sl__g_assign_stages(g); /* the forward's stages, for backward nodes */
  int32_t saved_stage = g->force_stage;
  int32_t loss_node = g->values[loss.id]->producer;
  sl_placement *saved_place = g->force_placement;
  sl__mark saved_mark = g->mark;
  g->mark = SL__MARK_BACKWARD;
  g->force_placement = g->values[loss.id]->placement;
  acc[loss.id] = sl__g_full_like(g, loss, 1.0);
  for (int32_t i = loss_node; i >= 0 && !g->err; i--) {
    const sl__node *nd = &g->nodes[i]->n;
    if (nd->kind != SL__NODE_OP) continue;
    sl_tensor dy[SL_OP_MAX_OUTPUTS], dx[SL_OP_MAX_INPUTS];
    bool any_dy = false, need[SL_OP_MAX_INPUTS], any_need = false;
    for (int j = 0; j < nd->n_out; j++) {
      constrain(g, acc, nv, nd->out[j]);
      dy[j] = acc[nd->out[j]];
      any_dy = any_dy || dy[j].id >= 0;
    }
    for (int k = 0; k < nd->n_in; k++) {
      need[k] = dep[nd->in[k]] && useful[nd->in[k]] &&
                sl_dtype_is_float(g->values[nd->in[k]]->meta.dtype);
      any_need = any_need || need[k];
      dx[k] = sl__g_poison(g, false);
    }
    if (!any_dy || !any_need) continue;
    const sl__grad_rule *r = sl__grad_find(nd->op->name);
    if (!r) {
      st = sl__g_error(g, SL_EUNSUPPORTED, "op", nd->name, nd->op->name,
                       "has no gradient, but the loss depends on it through "
                       "a tensor being differentiated");
      break;
    }
    char scope[300];
    snprintf(scope, sizeof scope, "%.250s_grad", nd->name);
    /* The node's name already carries its scope: build outside it. */
    char saved_scope[sizeof g->scope];
    int saved_depth = g->scope_depth;
    memcpy(saved_scope, g->scope, sizeof saved_scope);
    g->scope[0] = '\0';
    g->scope_depth = 0;
    sl_graph_push_scope(g, scope);
    g->force_placement = nd->placement;
    /* Backward nodes on nd's placement are nd's stage; on the placement
     * of a per-micro-batch input from another one (the gradient sent
     * back), that input's. */
    g->force_stage = nd->stage;
    g->stage_place = nd->placement;
    g->input_place = NULL;
    for (int k = 0; k < nd->n_in; k++) {
      const sl__node *pk = &g->nodes[g->values[nd->in[k]]->producer]->n;
      if (pk->micro >= 0 && pk->placement != nd->placement) {
        g->input_stage = pk->stage;
        g->input_place = pk->placement;
      }
    }
    st = r->fn(g, nd, dy, need, dx);
    for (int k = 0; k < nd->n_in && st == SL_OK && !g->err; k++)
      if (need[k]) accumulate(g, acc, nd->in[k], dx[k]);
    memcpy(g->scope, saved_scope, sizeof saved_scope);
    g->scope_depth = saved_depth;
    if (st == SL_OK && g->err) st = g->err;
    if (st != SL_OK) break;
  }
  for (int i = 0; i < n && !g->err; i++) {
    constrain(g, acc, nv, wrt[i].id);
    grads[i] = acc[wrt[i].id];
    if (grads[i].id < 0 && zeros_for_missing) {
      g->force_placement = g->values[wrt[i].id]->placement;
      grads[i] = sl__g_full_like(g, wrt[i], 0.0);
    }
  }
  g->force_placement = saved_place;
  g->force_stage = saved_stage;
  g->stage_place = g->input_place = NULL;
  g->mark = saved_mark;
  if (g->err) st = g->err;
done:
  sl__free(dep);
  sl__free(useful);
  sl__free(acc);
  return st;
}

/* Checks shared by gradients and minimize. */
sl_status sl__g_check_loss(sl_graph *g, sl_tensor loss, const char *what) {
  const sl__value *v = g->values[loss.id];
  if (sl_shape_numel(&v->meta.shape) != 1)
    return sl__g_error(g, SL_EINVAL, what, sl_tensor_name(loss), NULL,
                       "the loss must have one element (it has shape "
                       "with %lld)",
                       (long long)sl_shape_numel(&v->meta.shape));
  if (!sl_dtype_is_float(v->meta.dtype))
    return sl__g_error(g, SL_EINVAL, what, sl_tensor_name(loss), NULL,
                       "the loss must be a float tensor, not %s",
                       sl_dtype_name(v->meta.dtype));
  return SL_OK;
}

sl_status sl__g_gradients(sl_tensor loss, int n, const sl_tensor *wrt,
                          sl_tensor *grads, bool zeros_for_missing) {
  sl_graph *g = loss.graph;
  for (int i = 0; i < n; i++)
    grads[i] = sl__g_poison(g, false);
  if (!g) return sl__fail(SL_EINVAL, "gradients: poisoned loss");
  if (!sl__g_usable(g, 1, &loss, "autodiff") ||
      (n && !sl__g_usable(g, n, wrt, "autodiff")))
    return g->err ? g->err : SL_EINVAL;
  SL_CHECK(sl__g_check_loss(g, loss, "autodiff"));
  return backward(g, loss, n, wrt, grads, zeros_for_missing);
}

sl_status sl__graph_gradients(sl_tensor loss, int n, const sl_tensor *wrt,
                              sl_tensor *grads) {
  return sl__g_gradients(loss, n, wrt, grads, true);
}
