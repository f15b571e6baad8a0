/* sl_minimize: the backward pass of a loss, optional clipping by global
 * norm, and one update op per trainable variable (sgd_update or
 * adam_update), whose outputs become the variables' next versions. State
 * (momentum, Adam's m and v) lives in variables of the weight's placement
 * and SBP, initialised to zeros and updated the same way.
 *
 * ZeRO (zero_stage 1 and 2) is a layout, OneFlow's way: where a weight is
 * broadcast over a mesh axis of more than one device (data parallel), its
 * update runs on a shard instead, split over that axis, and its state
 * lives in that shard's layout. Fixing the update's outputs to the shard
 * makes SBP inference pick the update ops' sharded signature (the weight
 * read whole where it lies, the gradient's partial sum reduce-scattered),
 * and compile boxes the new weight back into the variable's layout (an
 * all-gather into the variable's register). The update's attribute `zero`
 * carries the stage, which the memory planner reads (graph/memory.c).
 * Stage 3 gives the variable itself the shard's layout: the update is then
 * an ordinary sharded one, and compile gathers the weight for its readers,
 * once for the forward pass and again for the backward pass; the
 * variable's attribute `zero` (3) tells compile and the memory planner,
 * which lets at most two gathered weights live on a device at a time. */
#include <math.h>
#include <string.h>

#include "grad.h"

static sl_status check_opt(sl_graph *g, const char *name,
                           const sl_optimizer *o) {
#define BAD(...) sl__g_error(g, SL_EINVAL, "optimizer", name, NULL, __VA_ARGS__)
  if ((int)o->kind < SL_OPTIMIZER_SGD || (int)o->kind > SL_OPTIMIZER_ADAMW)
    return BAD("unknown kind %d", (int)o->kind);
  if (!(o->lr > 0) || !isfinite(o->lr))
    return BAD("learning rate %g must be positive and finite", o->lr);
  if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
    return BAD("weight decay %g must be >= 0", o->weight_decay);
  if (!(o->clip_norm >= 0) || !isfinite(o->clip_norm))
    return BAD("clip norm %g must be >= 0 (0: no clipping)", o->clip_norm);
  if (o->zero_stage < 0 || o->zero_stage > 3)
    return BAD("zero stage %d: want 0 (off), 1, 2 or 3", o->zero_stage);
  if (!(o->loss_scale >= 0) || !isfinite(o->loss_scale))
    return BAD("loss scale %g must be >= 0 (0: no loss scaling)",
               o->loss_scale);
  if (o->loss_scale_window < 0)
    return BAD("loss scale window %d must be >= 0 (0: 2000 steps)",
               o->loss_scale_window);
  if (o->reduce_dtype != SL_DTYPE_F32 && o->reduce_dtype != SL_DTYPE_BF16)
    return BAD("reduce dtype %s: want f32 or bf16",
               (unsigned)o->reduce_dtype < SL_DTYPE_COUNT
                   ? sl_dtype_name(o->reduce_dtype)
                   : "?");
  if (o->kind == SL_OPTIMIZER_SGD && !(o->momentum >= 0 && o->momentum < 1))
    return BAD("momentum %g is outside [0, 1)", o->momentum);
  if (o->kind != SL_OPTIMIZER_SGD) {
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
      return BAD("betas %g, %g must lie in [0, 1)", o->beta1, o->beta2);
    if (!(o->eps > 0) || !isfinite(o->eps))
      return BAD("eps %g must be positive", o->eps);
  }
  return SL_OK;
#undef BAD
}

sl_tensor sl__g_state_variable(sl_graph *g, const char *name,
                               const sl_shape *shape, sl_dtype dt, sl_init init,
                               const sl_placement *p, const sl_nd_sbp *sbp) {
  /* State names are global, never under the caller's scope. */
  char saved[sizeof g->scope];
  memcpy(saved, g->scope, sizeof saved);
  g->scope[0] = '\0';
  sl_tensor s = sl_variable_p(g, name, shape, dt, init, p, sbp);
  memcpy(g->scope, saved, sizeof saved);
  if (s.id >= 0) {
    sl__gnode *n = g->nodes[sl__g_value(g, s.id)->producer];
    n->trainable = false;
    n->n.optimizer = true;
  }
  return s;
}

/* A zero-initialised state variable "<weight>.<what>" shaped like w, in
 * the update's layout `sbp`; `empty` makes it a [0] tensor (broadcast),
 * for SGD without momentum, which keeps no state: a full-size buffer
 * would be read and written for nothing every step. */
static sl_tensor state_like(sl_graph *g, sl_tensor w, const sl_nd_sbp *sbp,
                            const char *what, bool empty) {
  const sl__value *v = sl__g_value(g, w.id);
  char name[300];
  snprintf(name, sizeof name, "%.250s.%s", sl_tensor_name(w), what);
  sl_shape none = {.ndim = 1, .dims = {0}};
  sl_nd_sbp bcast = {.ndim = v->sbp.ndim};
  for (int i = 0; i < bcast.ndim; i++)
    bcast.sbp[i] = sl_sbp_broadcast();
  return sl__g_state_variable(g, name, empty ? &none : &v->meta.shape,
                              v->meta.dtype, sl_init_zeros(), v->placement,
                              empty ? &bcast : sbp);
}

/* The layout w's update runs in: w's own, or with ZeRO its shard: every
 * mesh axis over which w is broadcast to several devices splits one
 * tensor axis, the first that no later mesh axis splits already, so that
 * each device's shard lies inside the block of w it holds (the update
 * ops' sharded signature; uneven parts are fine). A scalar, or a weight
 * with no such axis, stays whole. */
static sl_nd_sbp update_layout(const sl__value *w, int zero_stage) {
  sl_nd_sbp s = w->sbp;
  if (zero_stage == 0) return s;
  int first = s.ndim; /* the first mesh axis to split */
  for (int m = 0; m < s.ndim && first == s.ndim; m++)
    if (s.sbp[m].kind == SL_SBP_BROADCAST &&
        sl_placement_mesh_dim(w->placement, m) > 1)
      first = m;
  for (int a = 0; a < w->meta.shape.ndim; a++) {
    bool later = false;
    for (int k = first + 1; k < s.ndim; k++)
      later |= s.sbp[k].kind == SL_SBP_SPLIT && s.sbp[k].axis == a;
    if (later) continue;
    sl_nd_sbp z = s;
    for (int m = first; m < s.ndim; m++)
      if (z.sbp[m].kind == SL_SBP_BROADCAST &&
          sl_placement_mesh_dim(w->placement, m) > 1)
        z.sbp[m] = sl_sbp_split(a);
    if (sl_nd_sbp_check(&z, w->placement, &w->meta.shape) == SL_OK) return z;
    sl_clear_error();
  }
  return s;
}

/* The gradient of w, in the layout of its update, reduced in bf16
 * (sl_optimizer.reduce_dtype): rounded to bf16 part by part, converted to
 * the update's layout there (the all-reduce or reduce-scatter then moves
 * bf16), and widened back to f32. */
static sl_tensor reduce_in_bf16(sl_graph *g, sl_tensor w, sl_tensor grad,
                                const sl_nd_sbp *layout) {
  g->force_placement = sl__g_value(g, grad.id)->placement;
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "dtype", SL_DTYPE_BF16);
  sl__attrs_set_int(&at, "partial_rounding", 1);
  sl_tensor low = sl__g_op(g, "cast", 1, &grad, &at, NULL);
  low = sl_to_global_p(low, sl__g_value(g, w.id)->placement, layout);
  g->force_placement = sl__g_value(g, w.id)->placement;
  sl_tensor r = sl_cast(low, SL_DTYPE_F32);
  g->force_placement = NULL;
  return r;
}

/* Scales every gradient by min(1, clip / global norm): the norm is
 * sqrt(sum over gradients of reduce_sum(g^2)); global_norm_scale takes up
 * to SL_OP_MAX_INPUTS partial sums, so longer lists are added pairwise
 * first. */
static void clip(sl_graph *g, int n, const sl_tensor *w,
                 const sl_nd_sbp *layout, sl_tensor *grads, double max_norm) {
  sl_tensor *s = sl__calloc((size_t)n, sizeof *s);
  if (!s) {
    sl__g_error(g, SL_ENOMEM, "optimizer", "clip", NULL, "out of memory");
    return;
  }
  for (int i = 0; i < n; i++) {
    /* The gradient in its update's layout first: the one conversion the
     * update needs anyway (an all-reduce for a data-parallel weight, a
     * reduce-scatter with ZeRO), so the norm adds none of its own. */
    const sl__value *wv = sl__g_value(g, w[i].id);
    grads[i] = sl_to_global_p(grads[i], wv->placement, &layout[i]);
    g->force_placement = sl__g_value(g, grads[i].id)->placement;
    s[i] = sl_reduce_sum(sl_square(grads[i]), 0, NULL, false);
  }
  int count = n;
  while (count > SL_OP_MAX_INPUTS) {
    int k = 0;
    for (int i = 0; i < count; i += 2) {
      if (i + 1 < count) {
        g->force_placement = sl__g_value(g, s[i].id)->placement;
        s[k++] = sl_add(s[i], s[i + 1]);
      } else {
        s[k++] = s[i];
      }
    }
    count = k;
  }
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "max_norm", max_norm);
  g->force_placement = NULL;
  sl_tensor scale = sl__g_op(g, "global_norm_scale", count, s, &at, NULL);
  sl__free(s);
  for (int i = 0; i < n; i++) {
    g->force_placement = sl__g_value(g, grads[i].id)->placement;
    grads[i] = sl_mul(grads[i], scale);
  }
  g->force_placement = NULL;
}

/* For a lazy update of w (sl_optimizer.lazy_embeddings): how often the
 * step looks up each row of w, f32 [rows], when every reader of w is an
 * embedding lookup with w as its table (every micro-batch's and
 * recomputed copy among them); else a poisoned tensor. Each device counts
 * the rows it holds. */
static sl_tensor lookup_counts(sl_graph *g, sl_tensor w) {
  sl_tensor counts = sl__g_poison(g, false);
  const sl__value *wv = sl__g_value(g, w.id);
  int64_t rows = wv->meta.shape.ndim == 2 ? wv->meta.shape.dims[0] : -1;
  for (int32_t i = 0; i < g->n_nodes && rows >= 0; i++) {
    const sl__node *n = &g->nodes[i]->n;
    if (n->kind != SL__NODE_OP || n->op->weight_update) continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == w.id && (strcmp(n->op->name, "embedding") || k != 0))
        return sl__g_poison(g, false);
  }
  for (int32_t i = 0, n0 = g->n_nodes; i < n0 && rows >= 0; i++) {
    const sl__node *n = &g->nodes[i]->n;
    if (n->kind != SL__NODE_OP || strcmp(n->op->name, "embedding") ||
        n->in[0] != w.id)
      continue;
    sl_tensor ids = sl__g_tensor(g, n->in[1]);
    const sl__value *iv = sl__g_value(g, ids.id);
    sl__attrs at = {0};
    sl_shape os = iv->meta.shape;
    os.dims[os.ndim++] = 1;
    sl__attrs_set_ints(&at, "shape", os.ndim, os.dims);
    sl__attrs_set_int(&at, "dtype", SL_DTYPE_F32);
    sl__attrs_set_float(&at, "value", 1.0);
    g->force_placement = n->placement;
    sl_tensor ones = sl__g_source(g, "fill", &at, NULL, n->placement, NULL);
    sl__attrs vat = {0};
    sl__attrs_set_int(&vat, "vocab", rows);
    sl_tensor in[2] = {ones, ids};
    sl_tensor c = sl__g_op(g, "embedding_grad", 2, in, &vat, NULL);
    if (c.id >= 0 && n->placement == wv->placement) {
      /* Split over the rows where w is (B, S(1) elsewhere: a column split
       * has all the rows), so that each device counts its own rows. */
      sl__value *cv = sl__g_value(g, c.id);
      cv->sbp.ndim = wv->sbp.ndim;
      for (int m = 0; m < wv->sbp.ndim; m++)
        cv->sbp.sbp[m] = wv->sbp.sbp[m].kind == SL_SBP_SPLIT &&
                                 wv->sbp.sbp[m].axis == 0
                             ? wv->sbp.sbp[m]
                             : sl_sbp_broadcast();
      cv->sbp_fixed = true;
    }
    sl_shape cs = {.ndim = 1, .dims = {rows}};
    c = sl_reshape(c, &cs);
    g->force_placement = wv->placement;
    counts = counts.id < 0 ? c : sl_add(counts, c);
  }
  return counts;
}

/* The rows input of w's update, or a poisoned tensor for none: the
 * lookup counts of a lazy update, times keep (loss scaling's scalar, 0 on
 * an overflow) broadcast over w's rows. */
static sl_tensor update_rows(sl_graph *g, sl_tensor w, sl_tensor keep,
                             const sl_optimizer *o) {
  sl_tensor counts =
      o->lazy_embeddings ? lookup_counts(g, w) : sl__g_poison(g, false);
  if (keep.id < 0 || g->err) return counts;
  const sl__value *wv = sl__g_value(g, w.id);
  g->force_placement = wv->placement;
  sl_shape one = {.ndim = 1, .dims = {1}};
  sl_shape rows = {.ndim = 1,
                   .dims = {wv->meta.shape.ndim ? wv->meta.shape.dims[0] : 1}};
  sl_tensor k = sl_broadcast_to(sl_reshape(keep, &one), &rows);
  return counts.id < 0 ? k : sl_mul(counts, k);
}

/* w's ZeRO stage: its own (sl_variable_set_zero_stage) or the
 * optimizer's. */
static int zero_stage_of(const sl_graph *g, sl_tensor w,
                         const sl_optimizer *o) {
  const sl__gnode *n = g->nodes[sl__g_value(g, w.id)->producer];
  return n->zero_stage ? n->zero_stage - 1 : o->zero_stage;
}

/* w's update from grad; keep and skipped are loss scaling's (poisoned
 * without it). */
static void update(sl_graph *g, sl_tensor w, const sl_nd_sbp *layout,
                   sl_tensor grad, sl_tensor keep, sl_tensor skipped,
                   const sl_optimizer *o) {
  sl__gnode *wn = g->nodes[sl__g_value(g, w.id)->producer];
  g->force_placement = sl__g_value(g, w.id)->placement;
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "lr", o->lr);
  sl__attrs_set_float(&at, "weight_decay", o->weight_decay);
  bool sharded = !sl_nd_sbp_equal(layout, &sl__g_value(g, w.id)->sbp);
  if (sharded || wn->zero3)
    sl__attrs_set_int(&at, "zero", zero_stage_of(g, w, o));
  sl_tensor outs[SL_OP_MAX_OUTPUTS];
  sl_tensor st[2];
  sl_tensor rows = update_rows(g, w, keep, o);
  if (g->err) return;
  g->force_placement = sl__g_value(g, w.id)->placement;
  /* Optional inputs: rows, then (with loss scaling, which makes rows)
   * the skipped steps. */
  int extra = rows.id < 0 ? 0 : skipped.id < 0 ? 1 : 2;
  if (o->kind == SL_OPTIMIZER_SGD) {
    sl__attrs_set_float(&at, "momentum", o->momentum);
    st[0] = state_like(g, w, layout, "momentum", o->momentum == 0);
    sl_tensor in[5] = {w, grad, st[0], rows, skipped};
    if (sl__g_op(g, "sgd_update", 3 + extra, in, &at, outs).id < 0) return;
  } else {
    sl__attrs_set_float(&at, "beta1", o->beta1);
    sl__attrs_set_float(&at, "beta2", o->beta2);
    sl__attrs_set_float(&at, "eps", o->eps);
    sl__attrs_set_int(&at, "decoupled", o->kind == SL_OPTIMIZER_ADAMW);
    st[0] = state_like(g, w, layout, "m", false);
    st[1] = state_like(g, w, layout, "v", false);
    sl_tensor in[6] = {w, grad, st[0], st[1], rows, skipped};
    if (sl__g_op(g, "adam_update", 4 + extra, in, &at, outs).id < 0) return;
  }
  int n_state = o->kind == SL_OPTIMIZER_SGD ? 1 : 2;
  /* Sharded, the outputs are fixed to the shard (inference then converts
   * the inputs); SGD's empty state stays broadcast. */
  bool empty = o->kind == SL_OPTIMIZER_SGD && o->momentum == 0;
  for (int i = 0; sharded && i < (empty ? 1 : 1 + n_state); i++) {
    sl__value *v = sl__g_value(g, outs[i].id);
    v->sbp = *layout;
    v->sbp_fixed = true;
  }
  wn->n.update = outs[0].id;
  for (int i = 0; i < n_state; i++)
    g->nodes[sl__g_value(g, st[i].id)->producer]->n.update = outs[1 + i].id;
}

sl_status sl_minimize(sl_tensor loss, const sl_optimizer *opt) {
  sl_graph *g = loss.graph;
  if (!g) return sl__fail(SL_EINVAL, "minimize: poisoned loss");
  if (!sl__g_usable(g, 1, &loss, "minimize"))
    return g->err ? g->err : SL_EINVAL;
  const char *lname = sl_tensor_name(loss);
  if (!opt)
    return sl__g_error(g, SL_EINVAL, "optimizer", lname, NULL,
                       "no optimizer given");
  if (g->minimized)
    return sl__g_error(g, SL_ESTATE, "optimizer", lname, NULL,
                       "sl_minimize was already called on this graph");
  SL_CHECK(check_opt(g, lname, opt));
  SL_CHECK(sl__g_check_loss(g, loss, "optimizer"));
  g->minimized = true;
  /* The trainable float variables (created before the loss's consumers). */
  int32_t nvars = 0;
  sl_tensor *w = sl__calloc((size_t)g->n_nodes + 1, sizeof *w);
  if (!w)
    return sl__g_error(g, SL_ENOMEM, "optimizer", lname, NULL, "out of memory");
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__gnode *n = g->nodes[i];
    if (n->n.kind == SL__NODE_VARIABLE && n->trainable &&
        sl_dtype_is_float(g->values[n->n.out[0]]->meta.dtype))
      w[nvars++] = sl__g_tensor(g, n->n.out[0]);
  }
  sl_tensor *grads = sl__calloc((size_t)nvars + 1, sizeof *grads);
  sl_nd_sbp *layout = sl__calloc((size_t)nvars + 1, sizeof *layout);
  if (!grads || !layout) {
    sl__free(w);
    sl__free(grads);
    sl__free(layout);
    return sl__g_error(g, SL_ENOMEM, "optimizer", lname, NULL, "out of memory");
  }
  /* Loss scaling: the gradients of loss * scale, divided by it below. */
  sl_tensor scale = sl__g_poison(g, false), keep = scale, skipped = scale;
  sl_tensor target =
      opt->loss_scale > 0 ? sl__g_loss_scale_begin(g, loss, opt, &scale) : loss;
  sl_status st =
      g->err ? g->err : sl__g_gradients(target, nvars, w, grads, false);
  /* Keep only the variables the loss depends on. */
  int32_t k = 0;
  for (int32_t i = 0; i < nvars && st == SL_OK; i++)
    if (grads[i].id >= 0) {
      w[k] = w[i];
      grads[k++] = grads[i];
    }
  if (st == SL_OK && k == 0)
    st = sl__g_error(g, SL_EINVAL, "optimizer", lname, NULL,
                     "the loss depends on no trainable variable");
  /* Recompute regions: the backward pass reads their values computed
   * again. Then, with micro-batches: every micro-batch's forward and
   * backward, and the gradients' mean over them. */
  if (st == SL_OK) st = sl__g_recompute(g);
  if (st == SL_OK) st = sl__g_unroll(g, k, grads);
  if (st == SL_OK) {
    sl_placement *saved = g->force_placement;
    g->mark = SL__MARK_OPTIMIZER;
    sl_graph_push_scope(g, "optimizer");
    for (int32_t i = 0; i < k; i++) {
      sl__value *wv = sl__g_value(g, w[i].id);
      int stage = zero_stage_of(g, w[i], opt);
      layout[i] = update_layout(wv, stage);
      if (stage == 3 && !sl_nd_sbp_equal(&layout[i], &wv->sbp)) {
        /* ZeRO-3: the weight lives as its shard between steps. */
        sl__gnode *vn = g->nodes[wv->producer];
        vn->zero3 = true;
        vn->zero3_read = wv->sbp;
        wv->sbp = layout[i];
        sl__attrs_set_int(&vn->n.attrs, "zero", 3);
      }
    }
    if (scale.id >= 0)
      keep = sl__g_loss_scale_end(g, k, grads, scale, opt, &skipped);
    for (int32_t i = 0; i < k && opt->reduce_dtype == SL_DTYPE_BF16; i++)
      grads[i] = reduce_in_bf16(g, w[i], grads[i], &layout[i]);
    if (opt->clip_norm > 0) clip(g, k, w, layout, grads, opt->clip_norm);
    for (int32_t i = 0; i < k && !g->err; i++)
      update(g, w[i], &layout[i], grads[i], keep, skipped, opt);
    sl_graph_pop_scope(g);
    g->mark = SL__MARK_FORWARD;
    g->force_placement = saved;
    st = g->err;
  }
  sl__free(w);
  sl__free(grads);
  sl__free(layout);
  return st;
}
