/* The collective specs of boxing steps (lower_int.h, sl__pcoll): for each
 * group of each boxing step, what the step computes, who runs it, where
 * each member runs, the members' boxes, fills and pieces (sbp/exchange.c),
 * the block a group collective's members hold together, and on GPUs
 * whether NCCL runs it as it stands. Lowering computes them once; the
 * session makes its engines from them and never reads the boxing route. */
#include <string.h>

#include "lower_int.h"

const char *sl__pcoll_op_name(sl__pcoll_op op) {
  static const char *const names[] = {
      "all_reduce", "reduce_scatter", "all_gather", "all_to_all",
      "exchange",   "slice",          "zero"};
  return (int)op >= 0 && (int)op < SL__PCOLL_OP_COUNT ? names[op] : "?";
}

sl__pcoll *sl__pplan_add_coll(sl__pplan *p, sl__xgeom *g) {
  if (p->n_colls == p->cap_colls) {
    int32_t cap = p->cap_colls ? p->cap_colls * 2 : 16;
    sl__pcoll *c = sl__reallocarray(p->colls, (size_t)cap, sizeof *c);
    if (!c) {
      sl__xgeom_free(g);
      return NULL;
    }
    p->colls = c;
    p->cap_colls = cap;
  }
  sl__pcoll *c = &p->colls[p->n_colls];
  memset(c, 0, sizeof *c);
  c->node = c->step = c->group = c->in_axis = c->out_axis = -1;
  c->device_op = SL__PCOLL_EXCHANGE;
  c->dtype = g->dtype;
  c->reduce = g->op;
  c->geom = *g;
  memset(g, 0, sizeof *g);
  c->machine = sl__calloc((size_t)c->geom.n + 1, sizeof *c->machine);
  c->device = sl__calloc((size_t)c->geom.n + 1, sizeof *c->device);
  if (!c->machine || !c->device) {
    sl__free(c->machine);
    sl__free(c->device);
    sl__xgeom_free(&c->geom);
    return NULL;
  }
  p->n_colls++;
  return c;
}

void sl__pplan_free_colls(sl__pplan *p) {
  for (int32_t i = 0; i < p->n_colls; i++) {
    sl__free(p->colls[i].machine);
    sl__free(p->colls[i].device);
    sl__xgeom_free(&p->colls[i].geom);
  }
  sl__free(p->colls);
  p->colls = NULL;
  p->n_colls = p->cap_colls = 0;
}

/* Where plan rank q's part of a step runs: its device, or a CUDA rank's
 * host side unless the devices run the step. */
static void member_where(const sl_boxing_route *bp, int q, bool on_devices,
                         uint32_t *machine, uint32_t *device) {
  int node = 0, dev = 0;
  sl_boxing_route_rank_device(bp, q, &node, &dev);
  *machine = (uint32_t)node;
  *device = (uint32_t)dev;
  if (sl_boxing_route_rank_device_type(bp, q) == SL_DEVICE_CUDA)
    *device += SL__DEV_CUDA;
  if (!on_devices) *device = sl__dev_host_side(*device);
}

/* Whether group step s is what NCCL's all-gather (reduce-scatter)
 * computes with no packing: the host collective (comm/coll/coll.c) cuts
 * the group's block along the split axis into sl_split_range parts,
 * member k's part k; on axis 0, with an extent the group size divides,
 * every part is one contiguous, equally sized run of the block's
 * row-major buffer, in member order — NCCL's layout. The block is the
 * step's source layout, broadcast on the step's mesh axis, at the group's
 * first member; checked for every group (uneven splits on other mesh axes
 * make blocks differ). */
static bool nccl_layout(const sl_boxing_route *bp, int s) {
  sl_nd_sbp from, to;
  sl_boxing_step_layout(bp, s, &from, &to);
  int m = sl_boxing_step_mesh_axis(bp, s);
  if (m < 0 || m >= from.ndim) return false;
  const sl_sbp *split = sl_boxing_step_op(bp, s) == SL_BOXING_ALL_GATHER
                            ? &from.sbp[m]
                            : &to.sbp[m];
  if (split->kind != SL_SBP_SPLIT || split->axis != 0) return false;
  sl_nd_sbp bl = from;
  bl.sbp[m] = sl_sbp_broadcast();
  int fs, ts;
  sl__boxing_step_sides(bp, s, &fs, &ts);
  const sl_placement *p = sl__boxing_side_placement(bp, fs);
  bool ok = true;
  for (int gi = 0; ok && gi < sl_boxing_step_group_count(bp, s); gi++) {
    const int *ranks = NULL;
    int gn = sl_boxing_step_group(bp, s, gi, &ranks);
    sl_slice blk;
    ok =
        gn >= 1 &&
        sl_local_slice(&bp->shape, p, &bl,
                       sl__boxing_side_rank(bp, fs, ranks[0]), &blk) == SL_OK &&
        blk.extent[0] % gn == 0;
  }
  return ok;
}

/* The device engine's realization of group step s: NCCL's collective with
 * its count, when NCCL computes the step as it stands. */
static void device_op(const sl_boxing_route *bp, int s, sl__pcoll *c) {
  int64_t in_n = sl_slice_numel(&c->geom.in_box[0]);
  int64_t out_n = sl_slice_numel(&c->geom.out_box[0]);
  int64_t gn = c->geom.n;
  c->device_op = SL__PCOLL_EXCHANGE;
  c->device_count = in_n;
  if (c->op == SL__PCOLL_ALL_REDUCE && out_n == in_n) {
    c->device_op = SL__PCOLL_ALL_REDUCE;
  } else if (c->op == SL__PCOLL_ALL_GATHER && nccl_layout(bp, s) &&
             out_n == gn * in_n) {
    c->device_op = SL__PCOLL_ALL_GATHER;
  } else if (c->op == SL__PCOLL_REDUCE_SCATTER && nccl_layout(bp, s) &&
             in_n == gn * out_n) {
    c->device_op = SL__PCOLL_REDUCE_SCATTER;
    c->device_count = out_n;
  }
}

/* The pieces form of a step, into a new spec: a group step's group, the
 * exchange of a send_recv or copy step (group -1), or a local step's one
 * member (placement rank `rank`, group member `member`). */
static sl_status geometry(sl__pplan *p, const sl_boxing_route *bp, int step,
                          int group, bool local, int rank, int member,
                          sl__pcoll **out) {
  sl__xgeom g;
  SL_CHECK(local        ? sl__xgeom_local(bp, step, rank, member, &g)
           : group >= 0 ? sl__xgeom_group(bp, step, group, &g)
                        : sl__xgeom_p2p(bp, step, &g));
  sl__pcoll *c = sl__pplan_add_coll(p, &g);
  if (!c) return SL_ENOMEM;
  c->block = bp->shape;
  *out = c;
  return SL_OK;
}

sl_status sl__lower_coll(sl__pplan *p, const sl_boxing_route *bp,
                         const char *name, int32_t node, int step, int group,
                         sl__engine engine, int32_t *out) {
  sl__pcoll *c = NULL;
  SL_CHECK(geometry(p, bp, step, group, false, -1, -1, &c));
  *out = p->n_colls - 1;
  c->name = name;
  c->node = node;
  c->step = step;
  c->group = group;
  c->engine = engine;
  const int *ranks = NULL;
  if (group >= 0) sl_boxing_step_group(bp, step, group, &ranks);
  for (int k = 0; k < c->geom.n; k++)
    member_where(bp, ranks ? ranks[k] : k, engine == SL__ENGINE_DEVICE,
                 &c->machine[k], &c->device[k]);
  if (group < 0) {
    c->op = SL__PCOLL_EXCHANGE;
    return SL_OK;
  }
  sl__group_step gs;
  SL_CHECK(sl__boxing_group_step(bp, step, group, &gs));
  int m = gs.axis;
  /* The block: the source layout broadcast on the step's mesh axis, at
   * the group's first member. */
  sl_nd_sbp bl = gs.from;
  bl.sbp[m] = sl_sbp_broadcast();
  int fs, ts;
  sl__boxing_step_sides(bp, step, &fs, &ts);
  sl_slice blk;
  SL_CHECK(sl_local_slice(&bp->shape, sl__boxing_side_placement(bp, fs), &bl,
                          sl__boxing_side_rank(bp, fs, gs.ranks[0]), &blk));
  c->block.ndim = blk.ndim;
  for (int d = 0; d < blk.ndim; d++)
    c->block.dims[d] = blk.extent[d];
  switch (sl_boxing_step_op(bp, step)) {
  case SL_BOXING_ALL_REDUCE: c->op = SL__PCOLL_ALL_REDUCE; break;
  case SL_BOXING_REDUCE_SCATTER:
    c->op = SL__PCOLL_REDUCE_SCATTER;
    c->out_axis = gs.to.sbp[m].axis;
    break;
  case SL_BOXING_ALL_GATHER:
    c->op = SL__PCOLL_ALL_GATHER;
    c->in_axis = gs.from.sbp[m].axis;
    break;
  case SL_BOXING_ALL_TO_ALL:
    c->op = SL__PCOLL_ALL_TO_ALL;
    c->in_axis = gs.from.sbp[m].axis;
    c->out_axis = gs.to.sbp[m].axis;
    break;
  default:
    return sl__fail(SL_EINTERNAL, "boxing '%s' step %d is not a collective",
                    name, step);
  }
  if (engine == SL__ENGINE_DEVICE) device_op(bp, step, c);
  return SL_OK;
}

sl_status sl__lower_local_coll(sl__pplan *p, const sl_boxing_route *bp,
                               const char *name, int32_t node, int step,
                               int rank, int member, bool on_devices,
                               int32_t *out) {
  sl__pcoll *c = NULL;
  SL_CHECK(geometry(p, bp, step, -1, true, rank, member, &c));
  *out = p->n_colls - 1;
  c->name = name;
  c->node = node;
  c->step = step;
  member_where(bp, rank, on_devices, &c->machine[0], &c->device[0]);
  sl_nd_sbp from, to;
  sl_boxing_step_layout(bp, step, &from, &to);
  int m = sl_boxing_step_mesh_axis(bp, step);
  c->local_n = sl_placement_mesh_dim(sl__boxing_side_placement(bp, 0), m);
  if (sl_boxing_step_op(bp, step) == SL_BOXING_SLICE) {
    c->op = SL__PCOLL_SLICE;
    c->out_axis = to.sbp[m].axis;
  } else {
    c->op = SL__PCOLL_ZERO;
    c->local_from_b = from.sbp[m].kind == SL_SBP_BROADCAST;
    c->in_axis = c->local_from_b ? 0 : from.sbp[m].axis;
  }
  return SL_OK;
}
