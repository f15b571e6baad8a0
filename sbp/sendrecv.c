/* Point-to-point steps between layouts: `copy` (rank i to rank i, same mesh
 * and nd-SBP) and `send_recv` by slice intersection.
 *
 * send_recv: every target rank that must hold real data (all of them, or
 * for a partial target the one whose partial coordinates are all 0 in each
 * partial group) receives exactly the pieces of source shards that
 * intersect its slice. Source ranks that differ only on broadcast axes hold
 * copies: one is picked, the one on the receiver's own device if any, else
 * the least loaded so far. Source ranks that differ on partial axes hold
 * parts: the receiver gets a piece from each and reduces them into a buffer
 * that starts at the reduce op's identity. The other members of a partial
 * target group are filled with the target op's identity. */
#include <math.h>
#include <string.h>

#include "sbp_int.h"

/* A plan must stay listable: beyond this many pieces send_recv is refused
 * (a real conversion that large should first reduce on the source). */
#define MAX_PIECES (1 << 20)

typedef struct pieces {
  sl__piece *v;
  int n, cap;
  bool count_only; /* a first pass that only counts, so that an oversized
                      plan is refused before anything is allocated */
} pieces;

static sl_status push(pieces *ps, int src, int dst, const sl_slice *slice) {
  if (ps->n == MAX_PIECES)
    return sl__fail(SL_EUNSUPPORTED, "boxing send_recv: more than %d pieces",
                    MAX_PIECES);
  if (ps->count_only) {
    ps->n++;
    return SL_OK;
  }
  if (ps->n == ps->cap) {
    int cap = ps->cap ? ps->cap * 2 : 16;
    sl__piece *v = sl__reallocarray(ps->v, (size_t)cap, sizeof *v);
    if (!v) return SL_ENOMEM;
    ps->v = v;
    ps->cap = cap;
  }
  sl__piece *p = &ps->v[ps->n++];
  p->src = src;
  p->dst = dst;
  p->slice = *slice;
  return SL_OK;
}

/* Bytes and time of a point-to-point step: per rank, the slower of its
 * sends and its receives, each message costing α + b/β on its link; the
 * step takes as long as its slowest rank. Pieces that stay on one device
 * cost nothing. */
static sl_status finish(sl_boxing_route *plan, sl__step *st, pieces *ps) {
  size_t es = sl_dtype_size(plan->dtype);
  int n = plan->rank_count;
  double *send = sl__calloc((size_t)n * 2, sizeof(double));
  if (!send) return SL_ENOMEM;
  double *recv = send + n;
  for (int i = 0; i < ps->n; i++) {
    const sl__piece *p = &ps->v[i];
    if (p->src == p->dst) continue;
    int64_t b = sl_slice_numel(&p->slice) * (int64_t)es;
    st->bytes_sent[p->src] += b;
    bool inter = plan->rank_node[p->src] != plan->rank_node[p->dst];
    double t = sl__cost_message(&plan->cost, inter, b);
    send[p->src] += t;
    recv[p->dst] += t;
  }
  double worst = 0.0;
  for (int r = 0; r < n; r++)
    worst = fmax(worst, fmax(send[r], recv[r]));
  sl__free(send);
  st->predicted_us = worst;

  /* One group: every plan rank of both layouts. */
  st->group_count = 1;
  st->group_off = sl__arena_calloc(plan->arena, 2, sizeof(int));
  st->group_ranks = sl__arena_calloc(plan->arena, (size_t)n, sizeof(int));
  st->pieces = sl__arena_calloc(plan->arena, (size_t)SL_MAX(ps->n, 1),
                                sizeof(sl__piece));
  if (!st->group_off || !st->group_ranks || !st->pieces) return SL_ENOMEM;
  st->group_off[1] = n;
  for (int r = 0; r < n; r++)
    st->group_ranks[r] = r;
  if (ps->n) memcpy(st->pieces, ps->v, (size_t)ps->n * sizeof(sl__piece));
  st->piece_count = ps->n;
  return SL_OK;
}

sl_status sl__plan_copy(sl_boxing_route *plan) {
  sl__step *st = sl__plan_add_step(plan);
  if (!st) return SL_ENOMEM;
  st->op = SL_BOXING_COPY;
  st->from_side = 0;
  st->to_side = 1;
  st->from = plan->sbp[0];
  st->to = plan->sbp[1];
  pieces ps = {0};
  sl_status s = SL_OK;
  int size = sl_placement_size(plan->place[0]);
  for (int r = 0; r < size && s == SL_OK; r++) {
    sl_slice sl;
    sl__local_slice(&plan->shape, plan->place[0], &plan->sbp[0], r, &sl);
    if (sl_slice_numel(&sl) > 0)
      s = push(&ps, plan->plan_rank[0][r], plan->plan_rank[1][r], &sl);
  }
  if (s == SL_OK) s = finish(plan, st, &ps);
  sl__free(ps.v);
  return s;
}

/* ---- send_recv --------------------------------------------------------- */

typedef struct walk {
  sl_boxing_route *plan;
  const sl_placement *src;
  const sl_nd_sbp *sbp;
  unsigned pmask, bmask;
  int dst_plan;        /* receiving plan rank */
  int same_src;        /* source rank on the receiver's device, or -1 */
  int64_t *load;       /* bytes assigned per source rank */
  int *parts, *copies; /* scratch lists of source ranks */
  pieces *ps;
} walk;

static bool same_coords_except(const sl_placement *p, int r1, int r2,
                               unsigned free_mask) {
  int c1[SL_MAX_MESH_AXES], c2[SL_MAX_MESH_AXES];
  sl_placement_rank_coord(p, r1, c1);
  sl_placement_rank_coord(p, r2, c2);
  for (int k = 0; k < sl_placement_mesh_ndim(p); k++)
    if (!(free_mask & (1u << k)) && c1[k] != c2[k]) return false;
  return true;
}

/* The source block with split coordinates coord intersects the receiver's
 * slice in *piece: one piece from every partial part, each from one copy. */
static sl_status take_block(walk *w, const int *coord, const sl_slice *piece) {
  int rep = sl_placement_coord_rank(w->src, coord);
  size_t es = sl_dtype_size(w->plan->dtype);
  /* Loads only rank the copies, so they saturate instead of overflowing
   * for tensors near the int64 limits. */
  int64_t bytes;
  if (__builtin_mul_overflow(sl_slice_numel(piece), (int64_t)es, &bytes))
    bytes = INT64_MAX;
  int nparts = sl__mesh_ranks(w->src, rep, w->pmask, w->parts);
  for (int i = 0; i < nparts; i++) {
    int ncopies = sl__mesh_ranks(w->src, w->parts[i], w->bmask, w->copies);
    int pick = w->copies[0];
    if (w->same_src >= 0 &&
        same_coords_except(w->src, w->same_src, w->parts[i], w->bmask)) {
      pick = w->same_src;
    } else {
      for (int c = 1; c < ncopies; c++)
        if (w->load[w->copies[c]] < w->load[pick]) pick = w->copies[c];
    }
    int src_plan = w->plan->plan_rank[0][pick];
    if (src_plan != w->dst_plan &&
        __builtin_add_overflow(w->load[pick], bytes, &w->load[pick]))
      w->load[pick] = INT64_MAX;
    SL_CHECK(push(w->ps, src_plan, w->dst_plan, piece));
  }
  return SL_OK;
}

/* Descends the source's split axes, visiting only the blocks that meet the
 * receiver's slice d: at each split the parts covering d's range follow from
 * the balanced split arithmetic, so large meshes cost what they touch. */
static sl_status descend(walk *w, int k, int *coord, const sl_slice *block,
                         const sl_slice *d) {
  if (k == w->sbp->ndim) {
    sl_slice piece;
    if (!sl_slice_intersect(block, d, &piece)) return SL_OK;
    return take_block(w, coord, &piece);
  }
  if (w->sbp->sbp[k].kind != SL_SBP_SPLIT) {
    coord[k] = 0;
    return descend(w, k + 1, coord, block, d);
  }
  int a = w->sbp->sbp[k].axis, n = sl_placement_mesh_dim(w->src, k);
  int64_t lo = SL_MAX(block->start[a], d->start[a]) - block->start[a];
  int64_t hi =
      SL_MIN(block->start[a] + block->extent[a], d->start[a] + d->extent[a]) -
      block->start[a];
  if (hi <= lo) return SL_OK;
  int first = sl__split_part_of(block->extent[a], n, lo);
  int last = sl__split_part_of(block->extent[a], n, hi - 1);
  for (int c = first; c <= last; c++) {
    sl_slice sub = *block;
    int64_t st, ext;
    sl_split_range(block->extent[a], n, c, &st, &ext);
    sub.start[a] += st;
    sub.extent[a] = ext;
    coord[k] = c;
    SL_CHECK(descend(w, k + 1, coord, &sub, d));
  }
  return SL_OK;
}

/* Every target rank: receivers get their pieces, the other members of a
 * partial target group an identity fill. */
static sl_status walk_targets(walk *w, sl__step *st, bool src_partial,
                              sl_reduce_op sop, sl_reduce_op dop) {
  sl_boxing_route *plan = w->plan;
  const sl_placement *dst = plan->place[1];
  const sl_nd_sbp *dsbp = &plan->sbp[1];
  int ns = sl_placement_size(w->src), nt = sl_placement_size(dst);
  unsigned dpmask = sl__nd_sbp_mask(dsbp, SL_SBP_PARTIAL);
  sl_status s = SL_OK;
  sl_slice whole;
  memset(&whole, 0, sizeof whole);
  whole.ndim = plan->shape.ndim;
  for (int d = 0; d < whole.ndim; d++)
    whole.extent[d] = plan->shape.dims[d];

  for (int t = 0; t < nt && s == SL_OK; t++) {
    sl_slice d;
    sl__local_slice(&plan->shape, dst, dsbp, t, &d);
    if (sl_slice_numel(&d) == 0) continue;
    int dp = plan->plan_rank[1][t];
    int coord[SL_MAX_MESH_AXES];
    sl_placement_rank_coord(dst, t, coord);
    bool receiver = true;
    for (int k = 0; k < dsbp->ndim; k++)
      if ((dpmask & (1u << k)) && coord[k] != 0) receiver = false;
    if (!receiver) {
      st->fill[dp] = (int8_t)dop;
      continue;
    }
    if (src_partial) st->fill[dp] = (int8_t)sop;
    w->dst_plan = dp;
    w->same_src = dp < ns ? dp : -1; /* plan rank < ns: a source device */
    int scoord[SL_MAX_MESH_AXES] = {0};
    s = descend(w, 0, scoord, &whole, &d);
  }
  return s;
}

sl_status sl__plan_send_recv(sl_boxing_route *plan) {
  sl__step *st = sl__plan_add_step(plan);
  if (!st) return SL_ENOMEM;
  const sl_placement *src = plan->place[0];
  const sl_nd_sbp *ssbp = &plan->sbp[0], *dsbp = &plan->sbp[1];
  st->op = SL_BOXING_SEND_RECV;
  st->from_side = 0;
  st->to_side = 1;
  st->from = *ssbp;
  st->to = *dsbp;
  sl_reduce_op sop = SL_REDUCE_SUM, dop = SL_REDUCE_SUM;
  bool src_partial = sl__nd_sbp_partial_op(ssbp, &sop);
  bool dst_partial = sl__nd_sbp_partial_op(dsbp, &dop);
  if (src_partial || dst_partial) {
    st->has_reduce = true;
    st->reduce = src_partial ? sop : dop;
  }
  st->piece_reduce = src_partial;
  st->fill = sl__arena_calloc(plan->arena, (size_t)plan->rank_count, 1);
  if (!st->fill) return SL_ENOMEM;
  memset(st->fill, SL__FILL_NONE, (size_t)plan->rank_count);

  int ns = sl_placement_size(src);
  pieces ps = {0};
  walk w = {0};
  w.plan = plan;
  w.src = src;
  w.sbp = ssbp;
  w.pmask = sl__nd_sbp_mask(ssbp, SL_SBP_PARTIAL);
  w.bmask = sl__nd_sbp_mask(ssbp, SL_SBP_BROADCAST);
  w.ps = &ps;
  w.load = sl__calloc((size_t)ns, sizeof(int64_t));
  w.parts = sl__calloc((size_t)ns * 2, sizeof(int));
  sl_status s = (w.load && w.parts) ? SL_OK : SL_ENOMEM;
  if (s == SL_OK) w.copies = w.parts + ns;

  if (s == SL_OK) {
    ps.count_only = true;
    s = walk_targets(&w, st, src_partial, sop, dop);
  }
  if (s == SL_OK && ps.n > 0) {
    /* The real pass, with the exact room and fresh loads. */
    ps.v = sl__reallocarray(NULL, (size_t)ps.n, sizeof *ps.v);
    ps.cap = ps.n;
    ps.n = 0;
    ps.count_only = false;
    memset(w.load, 0, (size_t)ns * sizeof(int64_t));
    s = ps.v ? walk_targets(&w, st, src_partial, sop, dop) : SL_ENOMEM;
  }
  if (s == SL_OK) s = finish(plan, st, &ps);
  sl__free(ps.v);
  sl__free(w.load);
  sl__free(w.parts);
  return s;
}
