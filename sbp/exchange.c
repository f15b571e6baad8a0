/* A boxing step as pieces (docs/boxing.md): boxes of the global tensor
 * that one member's input gives to one member's output, stored or reduced
 * there — the form the device exchanges run (comm/coll/dev_xchg.c).
 * Computed from the boxing route alone (its layouts, groups, boxes and
 * pieces), never from the graph, so whoever holds a plan's boxing can lay
 * its steps out. */
#include <string.h>

#include "sbp_int.h"

sl_status sl__boxing_group_step(const sl_boxing_route *bp, int step, int group,
                                sl__group_step *out) {
  sl_boxing_step_layout(bp, step, &out->from, &out->to);
  out->axis = sl_boxing_step_mesh_axis(bp, step);
  out->ranks = NULL;
  out->n = sl_boxing_step_group(bp, step, group, &out->ranks);
  if (out->n < 1 || out->axis < 0 || out->axis >= out->from.ndim)
    return sl__fail(SL_EINTERNAL,
                    "boxing step %d: a group of %d on mesh axis %d", step,
                    out->n, out->axis);
  return SL_OK;
}

void sl__xgeom_free(sl__xgeom *g) {
  sl__free(g->has_in);
  sl__free(g->has_out);
  sl__free(g->in_box);
  sl__free(g->out_box);
  sl__free(g->fill);
  sl__free(g->pieces);
  memset(g, 0, sizeof *g);
}

sl_status sl__xgeom_alloc(sl__xgeom *g, int n, int max_pieces) {
  memset(g, 0, sizeof *g);
  g->n = n;
  g->has_in = sl__calloc((size_t)n, sizeof *g->has_in);
  g->has_out = sl__calloc((size_t)n, sizeof *g->has_out);
  g->in_box = sl__calloc((size_t)n, sizeof *g->in_box);
  g->out_box = sl__calloc((size_t)n, sizeof *g->out_box);
  g->fill = sl__calloc((size_t)n, sizeof *g->fill);
  g->pieces = sl__calloc((size_t)max_pieces + 1, sizeof *g->pieces);
  if (g->has_in && g->has_out && g->in_box && g->out_box && g->fill &&
      g->pieces)
    return SL_OK;
  sl__xgeom_free(g);
  return SL_ENOMEM;
}

/* Every member's output is its pieces' boxes exactly once (stored pieces
 * cannot overlap: the inputs they come from do not), or filled first:
 * anything else is a planner bug that would leave garbage in a shard. */
static sl_status geom_check(const sl__xgeom *g, int step) {
  for (int k = 0; k < g->n; k++) {
    if (!g->has_out[k] || g->fill[k]) continue;
    int64_t covered = 0;
    for (int i = 0; i < g->n_pieces; i++)
      if (g->pieces[i].dst == k && !g->pieces[i].reduce)
        covered += sl_slice_numel(&g->pieces[i].box);
    if (covered != sl_slice_numel(&g->out_box[k]))
      return sl__fail(SL_EINTERNAL,
                      "boxing step %d: member %d's pieces cover %lld of "
                      "its %lld elements",
                      step, k, (long long)covered,
                      (long long)sl_slice_numel(&g->out_box[k]));
  }
  return SL_OK;
}

/* Pieces of member j's input for member k's output, for every pair (k
 * outer, j inner: the order member k applies them in); partial inputs are
 * reduced into the output, the first stored. */
static void geom_intersect(sl__xgeom *g, bool partial) {
  for (int k = 0; k < g->n; k++) {
    if (!g->has_out[k]) continue;
    bool first = true;
    for (int j = 0; j < g->n; j++) {
      sl_slice box;
      if (!g->has_in[j] ||
          !sl_slice_intersect(&g->in_box[j], &g->out_box[k], &box))
        continue;
      g->pieces[g->n_pieces++] = (sl__xpiece){j, k, box, partial && !first};
      first = false;
    }
  }
}

sl_status sl__xgeom_group(const sl_boxing_route *bp, int step, int group,
                          sl__xgeom *g) {
  sl__group_step gs;
  SL_CHECK(sl__boxing_group_step(bp, step, group, &gs));
  const sl_placement *p = bp->place[0]; /* group steps: one placement */
  sl_nd_sbp from = gs.from, to = gs.to;
  int m = gs.axis, gn = gs.n;
  const int *ranks = gs.ranks;
  int fs, ts; /* group steps: one side */
  sl__boxing_step_sides(bp, step, &fs, &ts);
  sl_status st = sl__xgeom_alloc(g, gn, gn * gn);
  for (int k = 0; k < gn && st == SL_OK; k++) {
    int r = sl__boxing_side_rank(bp, fs, ranks[k]);
    g->has_in[k] = g->has_out[k] = true;
    st = sl_local_slice(&bp->shape, p, &from, r, &g->in_box[k]);
    if (st == SL_OK) st = sl_local_slice(&bp->shape, p, &to, r, &g->out_box[k]);
  }
  if (st != SL_OK) {
    sl__xgeom_free(g);
    return st;
  }
  g->dtype = bp->dtype;
  g->op = SL_REDUCE_SUM;
  sl_boxing_step_reduce(bp, step, &g->op);
  geom_intersect(g, from.sbp[m].kind == SL_SBP_PARTIAL);
  st = geom_check(g, step);
  if (st != SL_OK) sl__xgeom_free(g);
  return st;
}

sl_status sl__xgeom_p2p(const sl_boxing_route *bp, int step, sl__xgeom *g) {
  int R = sl_boxing_route_rank_count(bp);
  int np = sl_boxing_step_piece_count(bp, step);
  sl_status st = sl__xgeom_alloc(g, R, np);
  g->dtype = bp->dtype;
  g->op = SL_REDUCE_SUM;
  bool has_red = sl_boxing_step_reduce(bp, step, &g->op);
  for (int q = 0; q < R && st == SL_OK; q++) {
    sl_reduce_op f;
    g->fill[q] = sl_boxing_step_fill(bp, step, q, &f);
    if (g->fill[q] && f != g->op)
      st = sl__fail(SL_EINTERNAL,
                    "boxing step %d fills with another reduction than "
                    "it reduces with",
                    step);
    if (st != SL_OK) break;
    g->has_in[q] = sl__boxing_step_box(bp, step, q, false, &g->in_box[q]);
    g->has_out[q] = sl__boxing_step_box(bp, step, q, true, &g->out_box[q]);
  }
  for (int i = 0; i < np && st == SL_OK; i++) {
    sl__xpiece *pc = &g->pieces[i];
    bool r = false;
    st = sl_boxing_step_piece(bp, step, i, &pc->src, &pc->dst, &pc->box, &r);
    pc->reduce = r && has_red;
    g->n_pieces++;
  }
  if (st == SL_OK) st = geom_check(g, step);
  if (st != SL_OK) sl__xgeom_free(g);
  return st;
}

sl_status sl__xgeom_local(const sl_boxing_route *bp, int step, int rank,
                          int member, sl__xgeom *g) {
  const sl_placement *p = bp->place[0];
  int m = sl_boxing_step_mesh_axis(bp, step);
  sl_nd_sbp from, to;
  sl_boxing_step_layout(bp, step, &from, &to);
  SL_CHECK(sl__xgeom_alloc(g, 1, 1));
  g->has_in[0] = g->has_out[0] = true;
  g->dtype = bp->dtype;
  g->op = SL_REDUCE_SUM;
  sl_boxing_step_reduce(bp, step, &g->op);
  sl_status st = sl_local_slice(&bp->shape, p, &from, rank, &g->in_box[0]);
  if (st == SL_OK)
    st = sl_local_slice(&bp->shape, p, &to, rank, &g->out_box[0]);
  if (st != SL_OK) {
    sl__xgeom_free(g);
    return st;
  }
  /* slice: keep the part of the copy the target holds. zero (docs/
   * boxing.md section 3): from B, member 0 keeps its copy and the others
   * hold the identity; from S(i), the shard sits at its place in the
   * group's block, the identity around it. */
  bool zero = sl_boxing_step_op(bp, step) == SL_BOXING_ZERO;
  bool keeps = !zero || from.sbp[m].kind != SL_SBP_BROADCAST || member == 0;
  sl_slice box;
  int64_t kept = 0;
  if (keeps && sl_slice_intersect(&g->in_box[0], &g->out_box[0], &box)) {
    g->pieces[g->n_pieces++] = (sl__xpiece){0, 0, box, false};
    kept = sl_slice_numel(&box);
  }
  g->fill[0] = zero && kept != sl_slice_numel(&g->out_box[0]);
  st = geom_check(g, step);
  if (st != SL_OK) sl__xgeom_free(g);
  return st;
}
