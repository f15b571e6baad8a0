/* Boxing routes: creation (argument checks, plan ranks, choosing between the
 * same-placement search, copy and send_recv), totals and accessors. */
#include <string.h>

#include "sbp_int.h"

const char *sl_boxing_op_name(sl_boxing_op op) {
  switch (op) {
  case SL_BOXING_ALL_REDUCE: return "all_reduce";
  case SL_BOXING_REDUCE_SCATTER: return "reduce_scatter";
  case SL_BOXING_ALL_GATHER: return "all_gather";
  case SL_BOXING_ALL_TO_ALL: return "all_to_all";
  case SL_BOXING_SLICE: return "slice";
  case SL_BOXING_ZERO: return "zero";
  case SL_BOXING_SEND_RECV: return "send_recv";
  case SL_BOXING_COPY: return "copy";
  }
  return "?";
}

sl__step *sl__plan_add_step(sl_boxing_route *plan) {
  if (plan->step_count == plan->step_cap) {
    int cap = plan->step_cap ? plan->step_cap * 2 : 4;
    sl__step *s = sl__reallocarray(plan->steps, (size_t)cap, sizeof *s);
    if (!s) return NULL;
    plan->steps = s;
    plan->step_cap = cap;
  }
  int64_t *bytes =
      sl__arena_calloc(plan->arena, (size_t)plan->rank_count, sizeof *bytes);
  if (!bytes) return NULL;
  sl__step *s = &plan->steps[plan->step_count++];
  memset(s, 0, sizeof *s);
  s->mesh_axis = -1;
  s->bytes_sent = bytes;
  return s;
}

bool sl__plan_ranks_inter(const sl_boxing_route *plan, int n,
                          const int *ranks) {
  for (int i = 1; i < n; i++)
    if (plan->rank_node[ranks[i]] != plan->rank_node[ranks[0]]) return true;
  return false;
}

/* Plan ranks: the source's ranks, then the target's devices the source does
 * not have, in target rank order. */
static sl_status map_ranks(sl_boxing_route *plan) {
  const sl_placement *src = plan->place[0], *dst = plan->place[1];
  int ns = sl_placement_size(src), nt = sl_placement_size(dst);
  int cap = ns + nt;
  plan->rank_node = sl__arena_calloc(plan->arena, (size_t)cap, sizeof(int));
  plan->rank_device = sl__arena_calloc(plan->arena, (size_t)cap, sizeof(int));
  plan->plan_rank[0] = sl__arena_calloc(plan->arena, (size_t)ns, sizeof(int));
  plan->plan_rank[1] = sl__arena_calloc(plan->arena, (size_t)nt, sizeof(int));
  if (!plan->rank_node || !plan->rank_device || !plan->plan_rank[0] ||
      !plan->plan_rank[1])
    return SL_ENOMEM;
  int n = 0;
  for (int r = 0; r < ns; r++, n++) {
    SL_CHECK(sl_placement_rank_device(src, r, &plan->rank_node[n],
                                      &plan->rank_device[n]));
    plan->plan_rank[0][r] = n;
  }
  for (int t = 0; t < nt; t++) {
    int node, dev;
    SL_CHECK(sl_placement_rank_device(dst, t, &node, &dev));
    int r = plan->cross_type ? -1 : sl_placement_rank_of(src, node, dev);
    if (r < 0) {
      r = n++;
      plan->rank_node[r] = node;
      plan->rank_device[r] = dev;
    }
    plan->plan_rank[1][t] = r;
  }
  plan->rank_count = n;
  for (int side = 0; side < 2; side++) {
    int m = side ? nt : ns;
    plan->side_rank[side] =
        sl__arena_calloc(plan->arena, (size_t)n + 1, sizeof(int));
    if (!plan->side_rank[side]) return SL_ENOMEM;
    for (int q = 0; q < n; q++)
      plan->side_rank[side][q] = -1;
    for (int r = 0; r < m; r++)
      plan->side_rank[side][plan->plan_rank[side][r]] = r;
  }
  return SL_OK;
}

int sl__boxing_plan_rank(const sl_boxing_route *plan, int side, int r) {
  return plan->plan_rank[side][r];
}

int sl__boxing_side_rank(const sl_boxing_route *plan, int side, int q) {
  return plan->side_rank[side][q];
}

void sl__boxing_step_sides(const sl_boxing_route *plan, int step, int *from,
                           int *to) {
  *from = plan->steps[step].from_side;
  *to = plan->steps[step].to_side;
}

const sl_placement *sl__boxing_side_placement(const sl_boxing_route *plan,
                                              int side) {
  return plan->place[side];
}

bool sl__boxing_step_box(const sl_boxing_route *plan, int step, int q,
                         bool after, sl_slice *box) {
  const sl__step *s = &plan->steps[step];
  int side = after ? s->to_side : s->from_side;
  int r = plan->side_rank[side][q];
  memset(box, 0, sizeof *box);
  if (r < 0) return false;
  sl__local_slice(&plan->shape, plan->place[side], after ? &s->to : &s->from, r,
                  box);
  return true;
}

static bool same_mesh(const sl_placement *a, const sl_placement *b) {
  if (sl_placement_size(a) != sl_placement_size(b)) return false;
  if (sl_placement_mesh_ndim(a) != sl_placement_mesh_ndim(b)) return false;
  for (int k = 0; k < sl_placement_mesh_ndim(a); k++)
    if (sl_placement_mesh_dim(a, k) != sl_placement_mesh_dim(b, k))
      return false;
  return true;
}

static sl_status check_args(const sl_shape *shape, sl_dtype dt,
                            const sl_placement *src, const sl_nd_sbp *src_sbp,
                            const sl_placement *dst, const sl_nd_sbp *dst_sbp) {
  if (!shape || !src || !src_sbp || !dst || !dst_sbp)
    return sl__fail(SL_EINVAL, "boxing route: NULL argument");
  if (shape->ndim < 0 || shape->ndim > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "boxing route: shape has %d dims (0 to %d)",
                    shape->ndim, SL_MAX_DIMS);
  for (int d = 0; d < shape->ndim; d++)
    if (shape->dims[d] < 0)
      return sl__fail(SL_EINVAL, "boxing route: shape extent %lld is negative",
                      (long long)shape->dims[d]);
  if (sl_dtype_size(dt) == 0)
    return sl__fail(SL_EINVAL, "boxing route: unknown dtype %d", (int)dt);
  sl_status st = sl_nd_sbp_check(src_sbp, src, shape);
  if (st != SL_OK) return sl__fail_context(st, "boxing source: ");
  st = sl_nd_sbp_check(dst_sbp, dst, shape);
  if (st != SL_OK) return sl__fail_context(st, "boxing target: ");
  return SL_OK;
}

sl_status
sl_boxing_route_create(const sl_shape *shape, sl_dtype dt,
                       const sl_placement *src, const sl_nd_sbp *src_sbp,
                       const sl_placement *dst, const sl_nd_sbp *dst_sbp,
                       const sl_boxing_cost *cost, sl_boxing_route **out) {
  if (!out) return sl__fail(SL_EINVAL, "boxing route: NULL out");
  *out = NULL;
  SL_CHECK(check_args(shape, dt, src, src_sbp, dst, dst_sbp));
  sl_boxing_cost c =
      cost ? *cost : sl_boxing_cost_default(sl_placement_device_type(src));
  SL_CHECK(sl__cost_check(&c));

  sl_status st;
  sl_boxing_route *plan;
  if (SL_NEW(plan) != SL_OK) return SL_ENOMEM;
  SL_CHECK_GOTO(sl__arena_create(0, &plan->arena), st, fail);
  plan->shape = *shape;
  plan->dtype = dt;
  plan->sbp[0] = *src_sbp;
  plan->sbp[1] = *dst_sbp;
  plan->cost = c;
  SL_CHECK_GOTO(sl_placement_copy(src, &plan->place[0]), st, fail);
  SL_CHECK_GOTO(sl_placement_copy(dst, &plan->place[1]), st, fail);
  plan->cross_type =
      sl_placement_device_type(src) != sl_placement_device_type(dst);
  SL_CHECK_GOTO(map_ranks(plan), st, fail);

  if (sl_placement_equal(src, dst)) {
    if (!sl_nd_sbp_equal(src_sbp, dst_sbp))
      SL_CHECK_GOTO(sl__plan_same_placement(plan), st, fail);
  } else if (same_mesh(src, dst) && sl_nd_sbp_equal(src_sbp, dst_sbp)) {
    SL_CHECK_GOTO(sl__plan_copy(plan), st, fail);
  } else {
    SL_CHECK_GOTO(sl__plan_send_recv(plan), st, fail);
  }

  plan->bytes_sent =
      sl__arena_calloc(plan->arena, (size_t)plan->rank_count, sizeof(int64_t));
  if (!plan->bytes_sent) {
    st = SL_ENOMEM;
    goto fail;
  }
  for (int i = 0; i < plan->step_count; i++) {
    for (int r = 0; r < plan->rank_count; r++)
      plan->bytes_sent[r] += plan->steps[i].bytes_sent[r];
    plan->predicted_us += plan->steps[i].predicted_us;
  }
  *out = plan;
  return SL_OK;
fail:
  sl_boxing_route_destroy(plan);
  return st;
}

void sl_boxing_route_destroy(sl_boxing_route *plan) {
  if (!plan) return;
  sl_placement_destroy(plan->place[0]);
  sl_placement_destroy(plan->place[1]);
  sl__free(plan->steps);
  sl__arena_destroy(plan->arena);
  sl__free(plan);
}

/* ---- accessors --------------------------------------------------------- */

int sl_boxing_route_rank_count(const sl_boxing_route *plan) {
  return plan->rank_count;
}

void sl_boxing_route_rank_device(const sl_boxing_route *plan, int rank,
                                 int *node, int *device) {
  bool ok = rank >= 0 && rank < plan->rank_count;
  if (node) *node = ok ? plan->rank_node[rank] : -1;
  if (device) *device = ok ? plan->rank_device[rank] : -1;
}

sl_device_type sl_boxing_route_rank_device_type(const sl_boxing_route *plan,
                                                int rank) {
  int side = rank >= sl_placement_size(plan->place[0]) ? 1 : 0;
  return sl_placement_device_type(plan->place[side]);
}

const int64_t *sl_boxing_route_bytes_sent(const sl_boxing_route *plan) {
  return plan->bytes_sent;
}

double sl_boxing_route_predicted_us(const sl_boxing_route *plan) {
  return plan->predicted_us;
}

int sl_boxing_route_step_count(const sl_boxing_route *plan) {
  return plan->step_count;
}

static const sl__step *get_step(const sl_boxing_route *plan, int step) {
  if (!plan || step < 0 || step >= plan->step_count) return NULL;
  return &plan->steps[step];
}

sl_boxing_op sl_boxing_step_op(const sl_boxing_route *plan, int step) {
  const sl__step *s = get_step(plan, step);
  return s ? s->op : (sl_boxing_op)-1;
}

bool sl_boxing_step_reduce(const sl_boxing_route *plan, int step,
                           sl_reduce_op *op) {
  const sl__step *s = get_step(plan, step);
  if (!s || !s->has_reduce) return false;
  if (op) *op = s->reduce;
  return true;
}

int sl_boxing_step_mesh_axis(const sl_boxing_route *plan, int step) {
  const sl__step *s = get_step(plan, step);
  return s ? s->mesh_axis : -1;
}

void sl_boxing_step_layout(const sl_boxing_route *plan, int step,
                           sl_nd_sbp *from, sl_nd_sbp *to) {
  const sl__step *s = get_step(plan, step);
  sl_nd_sbp none = {0};
  if (from) *from = s ? s->from : none;
  if (to) *to = s ? s->to : none;
}

int sl_boxing_step_group_count(const sl_boxing_route *plan, int step) {
  const sl__step *s = get_step(plan, step);
  return s ? s->group_count : 0;
}

int sl_boxing_step_group(const sl_boxing_route *plan, int step, int group,
                         const int **ranks) {
  const sl__step *s = get_step(plan, step);
  if (!s || group < 0 || group >= s->group_count) {
    if (ranks) *ranks = NULL;
    return 0;
  }
  if (ranks) *ranks = s->group_ranks + s->group_off[group];
  return s->group_off[group + 1] - s->group_off[group];
}

const int64_t *sl_boxing_step_bytes_sent(const sl_boxing_route *plan,
                                         int step) {
  const sl__step *s = get_step(plan, step);
  return s ? s->bytes_sent : NULL;
}

double sl_boxing_step_predicted_us(const sl_boxing_route *plan, int step) {
  const sl__step *s = get_step(plan, step);
  return s ? s->predicted_us : 0.0;
}

int sl_boxing_step_piece_count(const sl_boxing_route *plan, int step) {
  const sl__step *s = get_step(plan, step);
  return s ? s->piece_count : 0;
}

sl_status sl_boxing_step_piece(const sl_boxing_route *plan, int step, int piece,
                               int *src, int *dst, sl_slice *slice,
                               bool *reduce) {
  const sl__step *s = get_step(plan, step);
  if (!s || piece < 0 || piece >= s->piece_count)
    return sl__fail(SL_EINVAL, "boxing route: no piece %d in step %d", piece,
                    step);
  const sl__piece *p = &s->pieces[piece];
  if (src) *src = p->src;
  if (dst) *dst = p->dst;
  if (slice) *slice = p->slice;
  if (reduce) *reduce = s->piece_reduce;
  return SL_OK;
}

bool sl_boxing_step_fill(const sl_boxing_route *plan, int step, int rank,
                         sl_reduce_op *op) {
  const sl__step *s = get_step(plan, step);
  if (!s || !s->fill || rank < 0 || rank >= plan->rank_count ||
      s->fill[rank] == SL__FILL_NONE)
    return false;
  if (op) *op = (sl_reduce_op)s->fill[rank];
  return true;
}
