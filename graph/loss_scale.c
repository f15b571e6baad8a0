/* Dynamic loss scaling (sl_optimizer.loss_scale), for f16 mixed precision,
 * as PyTorch's GradScaler does it:
 *
 * - the backward pass starts from loss * scale, so small f16 gradients do
 *   not flush to zero;
 * - every gradient is divided by the scale before clipping and the
 *   update;
 * - check = the sum over the gradients of reduce_sum(g * 0): 0, or NaN as
 *   soon as one element is inf or NaN;
 * - loss_scale_update(scale, good steps, check, skipped steps) gives the
 *   next scale and count (halved and reset on overflow, doubled after
 *   `window` good steps), keep (0 on overflow, else 1), which every update
 *   takes as its rows input, so a step with an overflow changes no weight
 *   and no optimizer state, and the count of skipped steps, which every
 *   update takes after rows: as in PyTorch, where a skipped step never
 *   calls optimizer.step(), Adam's bias correction and SGD's first step
 *   count only the steps taken.
 *
 * The scale and the counts are variables of the loss's placement, named
 * "loss_scale", "loss_scale.good_steps" and "loss_scale.skipped_steps":
 * optimizer state, saved and restored with the rest. */
#include "grad.h"

/* A scalar f32 state variable `name` on placement p (broadcast),
 * initialised to v. */
static sl_tensor scalar_state(sl_graph *g, const char *name, double v,
                              sl_placement *p) {
  sl_shape s = {.ndim = 0};
  sl_nd_sbp b = {.ndim = sl_placement_mesh_ndim(p)};
  for (int m = 0; m < b.ndim; m++)
    b.sbp[m] = sl_sbp_broadcast();
  return sl__g_state_variable(g, name, &s, SL_DTYPE_F32, sl_init_constant(v), p,
                              &b);
}

sl_tensor sl__g_loss_scale_begin(sl_graph *g, sl_tensor loss,
                                 const sl_optimizer *o, sl_tensor *scale) {
  sl_placement *p = sl__g_value(g, loss.id)->placement;
  sl__mark saved = g->mark;
  g->mark = SL__MARK_OPTIMIZER;
  *scale = scalar_state(g, "loss_scale", o->loss_scale, p);
  g->mark = saved;
  if (scale->id < 0) return *scale;
  g->force_placement = p;
  sl_tensor scaled = sl_mul(loss, *scale);
  g->force_placement = NULL;
  return scaled;
}

sl_tensor sl__g_loss_scale_end(sl_graph *g, int n, sl_tensor *grads,
                               sl_tensor scale, const sl_optimizer *o,
                               sl_tensor *skipped) {
  sl_placement *p = sl__g_value(g, scale.id)->placement;
  sl_tensor good = scalar_state(g, "loss_scale.good_steps", 0, p);
  sl_tensor skips = scalar_state(g, "loss_scale.skipped_steps", 0, p);
  *skipped = sl__g_poison(g, false);
  sl_tensor check = sl__g_poison(g, false);
  for (int i = 0; i < n && !g->err; i++) {
    g->force_placement = sl__g_value(g, grads[i].id)->placement;
    grads[i] = sl_div(grads[i], scale);
    sl_tensor c = sl_reduce_sum(sl_mul_scalar(grads[i], 0.0), 0, NULL, false);
    g->force_placement = p;
    check = check.id < 0 ? c : sl_add(check, c);
  }
  if (g->err) return sl__g_poison(g, false);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "window",
                    o->loss_scale_window > 0 ? o->loss_scale_window : 2000);
  g->force_placement = p;
  sl_tensor in[4] = {scale, good, check, skips}, outs[SL_OP_MAX_OUTPUTS];
  sl_tensor r = sl__g_op(g, "loss_scale_update", 4, in, &at, outs);
  g->force_placement = NULL;
  if (r.id < 0) return r;
  g->nodes[sl__g_value(g, scale.id)->producer]->n.update = outs[0].id;
  g->nodes[sl__g_value(g, good.id)->producer]->n.update = outs[1].id;
  g->nodes[sl__g_value(g, skips.id)->producer]->n.update = outs[3].id;
  /* The count before this step: a step that overflows keeps everything,
   * and one that does not leaves the count as it was. */
  *skipped = skips;
  return outs[2];
}
