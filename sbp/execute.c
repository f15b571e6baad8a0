/* The reference executor: runs a plan on in-memory shards, one buffer per
 * plan rank per layout. Each step moves data the way its collective would,
 * from the members' buffers in group order and nothing else: the logical
 * tensor is never consulted, so a wrong plan gives wrong shards. Shapes are
 * checked against the layouts after every step (a mismatch is a planner
 * bug, SL_EINTERNAL). */
#include <stdio.h>
#include <string.h>

#include "sbp_int.h"

typedef struct buf {
  void *data; /* NULL: this plan rank holds nothing in the layout */
  int64_t dims[SL_MAX_DIMS];
} buf;

typedef struct exec {
  const sl_boxing_route *plan;
  int ndim;
  size_t es;
  int step;
  buf *cur, *next;
} exec;

static int64_t numel_of(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= dims[d];
  return n;
}

static sl_status alloc_buf(exec *x, buf *b, const int64_t *dims) {
  memcpy(b->dims, dims, sizeof b->dims);
  size_t bytes = (size_t)numel_of(x->ndim, dims) * x->es;
  b->data = sl__malloc(bytes ? bytes : 1);
  return b->data ? SL_OK : SL_ENOMEM;
}

static void free_bufs(buf *b, int n) {
  if (!b) return;
  for (int i = 0; i < n; i++)
    sl__free(b[i].data);
}

static sl_status bad(exec *x, const char *why, int rank) {
  return sl__fail(SL_EINTERNAL,
                  "boxing execute: step %d (%s): plan rank %d: "
                  "%s",
                  x->step, sl_boxing_op_name(x->plan->steps[x->step].op), rank,
                  why);
}

/* Members agree on every dim but `except` (-1: on every dim). */
static sl_status check_members(exec *x, int n, const int *g, int except) {
  for (int k = 0; k < n; k++) {
    if (!x->cur[g[k]].data) return bad(x, "holds no shard", g[k]);
    for (int d = 0; d < x->ndim; d++)
      if (d != except && x->cur[g[k]].dims[d] != x->cur[g[0]].dims[d])
        return bad(x, "shard shape differs from its group's", g[k]);
  }
  return SL_OK;
}

/* Part `part` of n along axis of src into a new buffer of dst. */
static sl_status take_part(exec *x, buf *dst, const buf *src, int axis, int n,
                           int part) {
  int64_t dims[SL_MAX_DIMS], off[SL_MAX_DIMS] = {0}, st, ext;
  memcpy(dims, src->dims, sizeof dims);
  sl_split_range(src->dims[axis], n, part, &st, &ext);
  dims[axis] = ext;
  off[axis] = st;
  SL_CHECK(alloc_buf(x, dst, dims));
  int64_t zero[SL_MAX_DIMS] = {0};
  sl__box_move(x->plan->dtype, x->ndim, dst->data, dims, zero, src->data,
               src->dims, off, dims, false, SL_REDUCE_SUM);
  return SL_OK;
}

/* Elementwise reduction of the members' buffers, in group order. */
static sl_status reduce_group(exec *x, int n, const int *g, sl_reduce_op op,
                              buf *acc) {
  SL_CHECK(check_members(x, n, g, -1));
  SL_CHECK(alloc_buf(x, acc, x->cur[g[0]].dims));
  int64_t cnt = numel_of(x->ndim, acc->dims);
  memcpy(acc->data, x->cur[g[0]].data, (size_t)cnt * x->es);
  for (int k = 1; k < n; k++)
    sl__elem_reduce(x->plan->dtype, op, acc->data, x->cur[g[k]].data, cnt);
  return SL_OK;
}

static sl_status copy_to_all(exec *x, int n, const int *g, const buf *b) {
  int64_t cnt = numel_of(x->ndim, b->dims);
  for (int k = 0; k < n; k++) {
    SL_CHECK(alloc_buf(x, &x->next[g[k]], b->dims));
    memcpy(x->next[g[k]].data, b->data, (size_t)cnt * x->es);
  }
  return SL_OK;
}

static bool split_in(sl_sbp e, int ndim) {
  return e.kind == SL_SBP_SPLIT && e.axis >= 0 && e.axis < ndim;
}

/* A group step's layouts must be the ones its op converts between, so that
 * a broken plan fails cleanly instead of moving memory it does not have. */
static sl_status check_group_step(exec *x, const sl__step *s) {
  int m = s->mesh_axis;
  bool ok = m >= 0 && m < s->from.ndim && s->from.ndim == s->to.ndim &&
            s->group_count > 0;
  sl_sbp a = ok ? s->from.sbp[m] : sl_sbp_broadcast();
  sl_sbp b = ok ? s->to.sbp[m] : sl_sbp_broadcast();
  int nd = x->ndim;
  switch (ok ? s->op : (sl_boxing_op)-1) {
  case SL_BOXING_ALL_REDUCE:
    ok = a.kind == SL_SBP_PARTIAL && b.kind == SL_SBP_BROADCAST;
    break;
  case SL_BOXING_REDUCE_SCATTER:
    ok = a.kind == SL_SBP_PARTIAL && split_in(b, nd);
    break;
  case SL_BOXING_ALL_GATHER:
    ok = split_in(a, nd) && b.kind == SL_SBP_BROADCAST;
    break;
  case SL_BOXING_ALL_TO_ALL:
    ok = split_in(a, nd) && split_in(b, nd) && a.axis != b.axis;
    break;
  case SL_BOXING_SLICE:
    ok = a.kind == SL_SBP_BROADCAST && split_in(b, nd);
    break;
  case SL_BOXING_ZERO:
    ok = (a.kind == SL_SBP_BROADCAST || split_in(a, nd)) &&
         b.kind == SL_SBP_PARTIAL;
    break;
  default: ok = false; break;
  }
  for (int i = 0; ok && i < s->group_off[s->group_count]; i++)
    ok = s->group_ranks[i] >= 0 && s->group_ranks[i] < x->plan->rank_count;
  if (!ok) return bad(x, "the step's layouts do not fit its op", -1);
  return SL_OK;
}

static sl_status run_group(exec *x, const sl__step *s, int n, const int *g) {
  sl_dtype dt = x->plan->dtype;
  int m = s->mesh_axis;
  sl_sbp a = s->from.sbp[m], b = s->to.sbp[m];
  int64_t zero[SL_MAX_DIMS] = {0};
  buf tmp = {0};
  sl_status st = SL_OK;
  switch (s->op) {
  case SL_BOXING_ALL_REDUCE:
    SL_CHECK_GOTO(reduce_group(x, n, g, s->reduce, &tmp), st, out);
    SL_CHECK_GOTO(copy_to_all(x, n, g, &tmp), st, out);
    break;
  case SL_BOXING_REDUCE_SCATTER:
    /* Member k ends with chunk k of the reduced buffer. */
    SL_CHECK_GOTO(reduce_group(x, n, g, s->reduce, &tmp), st, out);
    for (int k = 0; k < n; k++)
      SL_CHECK_GOTO(take_part(x, &x->next[g[k]], &tmp, b.axis, n, k), st, out);
    break;
  case SL_BOXING_ALL_GATHER: {
    /* Concatenate the members' shards along the split axis, group order. */
    SL_CHECK_GOTO(check_members(x, n, g, a.axis), st, out);
    int64_t dims[SL_MAX_DIMS], off[SL_MAX_DIMS] = {0};
    memcpy(dims, x->cur[g[0]].dims, sizeof dims);
    dims[a.axis] = 0;
    for (int k = 0; k < n; k++)
      dims[a.axis] += x->cur[g[k]].dims[a.axis];
    SL_CHECK_GOTO(alloc_buf(x, &tmp, dims), st, out);
    for (int k = 0; k < n; k++) {
      const buf *mb = &x->cur[g[k]];
      sl__box_move(dt, x->ndim, tmp.data, dims, off, mb->data, mb->dims, zero,
                   mb->dims, false, SL_REDUCE_SUM);
      off[a.axis] += mb->dims[a.axis];
    }
    SL_CHECK_GOTO(copy_to_all(x, n, g, &tmp), st, out);
    break;
  }
  case SL_BOXING_ALL_TO_ALL:
    /* Member k gets part k (along b's axis) of every member's shard,
     * concatenated along a's axis in group order. */
    SL_CHECK_GOTO(check_members(x, n, g, a.axis), st, out);
    for (int k = 0; k < n; k++) {
      int64_t dims[SL_MAX_DIMS], doff[SL_MAX_DIMS] = {0},
                                 soff[SL_MAX_DIMS] = {0}, ext[SL_MAX_DIMS], pst,
                                 pext;
      memcpy(dims, x->cur[g[0]].dims, sizeof dims);
      sl_split_range(dims[b.axis], n, k, &pst, &pext);
      dims[b.axis] = pext;
      dims[a.axis] = 0;
      for (int r = 0; r < n; r++)
        dims[a.axis] += x->cur[g[r]].dims[a.axis];
      SL_CHECK_GOTO(alloc_buf(x, &x->next[g[k]], dims), st, out);
      soff[b.axis] = pst;
      for (int r = 0; r < n; r++) {
        const buf *mb = &x->cur[g[r]];
        memcpy(ext, dims, sizeof ext);
        ext[a.axis] = mb->dims[a.axis];
        sl__box_move(dt, x->ndim, x->next[g[k]].data, dims, doff, mb->data,
                     mb->dims, soff, ext, false, SL_REDUCE_SUM);
        doff[a.axis] += mb->dims[a.axis];
      }
    }
    break;
  case SL_BOXING_SLICE:
    SL_CHECK_GOTO(check_members(x, n, g, -1), st, out);
    for (int k = 0; k < n; k++)
      SL_CHECK_GOTO(take_part(x, &x->next[g[k]], &x->cur[g[k]], b.axis, n, k),
                    st, out);
    break;
  case SL_BOXING_ZERO:
    for (int k = 0; k < n; k++) {
      const buf *mb = &x->cur[g[k]];
      if (!mb->data) SL_CHECK_GOTO(bad(x, "holds no shard", g[k]), st, out);
      if (a.kind == SL_SBP_BROADCAST) {
        /* Member 0 keeps the value, the others become the identity. */
        SL_CHECK_GOTO(alloc_buf(x, &x->next[g[k]], mb->dims), st, out);
        int64_t cnt = numel_of(x->ndim, mb->dims);
        if (k == 0)
          memcpy(x->next[g[k]].data, mb->data, (size_t)cnt * x->es);
        else
          sl__elem_fill_identity(dt, s->reduce, x->next[g[k]].data, cnt);
        continue;
      }
      /* Zero-pad in place: the shard goes to its offset in the group's
       * block (whose shape the plan's target layout gives). */
      sl_slice want;
      sl__local_slice(&x->plan->shape, x->plan->place[s->to_side], &s->to, g[k],
                      &want);
      int64_t off[SL_MAX_DIMS] = {0}, pst, pext;
      sl_split_range(want.extent[a.axis], n, k, &pst, &pext);
      off[a.axis] = pst;
      for (int d = 0; d < x->ndim; d++)
        if (mb->dims[d] != (d == a.axis ? pext : want.extent[d]))
          SL_CHECK_GOTO(bad(x, "shard does not fit its padded block", g[k]), st,
                        out);
      SL_CHECK_GOTO(alloc_buf(x, &x->next[g[k]], want.extent), st, out);
      sl__elem_fill_identity(dt, s->reduce, x->next[g[k]].data,
                             sl_slice_numel(&want));
      sl__box_move(dt, x->ndim, x->next[g[k]].data, want.extent, off, mb->data,
                   mb->dims, zero, mb->dims, false, SL_REDUCE_SUM);
    }
    break;
  default: st = bad(x, "not a group operation", g[0]); break;
  }
out:
  sl__free(tmp.data);
  return st;
}

static sl_status run_p2p(exec *x, const sl__step *s) {
  const sl_boxing_route *plan = x->plan;
  int step = (int)(s - plan->steps);
  sl_status st;
  const sl_placement *tp = plan->place[s->to_side];
  for (int t = 0; t < sl_placement_size(tp); t++) {
    int p = plan->plan_rank[s->to_side][t];
    sl_slice want;
    sl__boxing_step_box(plan, step, p, true, &want);
    SL_CHECK_GOTO(alloc_buf(x, &x->next[p], want.extent), st, out);
    int64_t cnt = sl_slice_numel(&want);
    if (s->fill && s->fill[p] != SL__FILL_NONE)
      sl__elem_fill_identity(plan->dtype, (sl_reduce_op)s->fill[p],
                             x->next[p].data, cnt);
    else
      memset(x->next[p].data, 0, (size_t)cnt * x->es);
  }
  for (int i = 0; i < s->piece_count; i++) {
    const sl__piece *pc = &s->pieces[i];
    bool in = pc->src >= 0 && pc->src < plan->rank_count && pc->dst >= 0 &&
              pc->dst < plan->rank_count && pc->slice.ndim == x->ndim;
    sl_slice have, want;
    if (!in || !sl__boxing_step_box(plan, step, pc->src, false, &have) ||
        !sl__boxing_step_box(plan, step, pc->dst, true, &want) ||
        !x->cur[pc->src].data) {
      st = bad(x, "piece between ranks outside the layouts", pc->src);
      goto out;
    }
    int64_t soff[SL_MAX_DIMS], doff[SL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
      soff[d] = pc->slice.start[d] - have.start[d];
      doff[d] = pc->slice.start[d] - want.start[d];
      if (soff[d] < 0 || soff[d] + pc->slice.extent[d] > have.extent[d] ||
          doff[d] < 0 || doff[d] + pc->slice.extent[d] > want.extent[d]) {
        st = bad(x, "piece outside the shards it joins", pc->dst);
        goto out;
      }
    }
    sl__box_move(plan->dtype, x->ndim, x->next[pc->dst].data, want.extent, doff,
                 x->cur[pc->src].data, have.extent, soff, pc->slice.extent,
                 s->piece_reduce, s->reduce);
  }
  st = SL_OK;
out:
  return st;
}

/* After a step every rank of the target layout holds a shard of its slice's
 * shape, and no other rank holds one. */
static sl_status check_layout(exec *x, const sl__step *s) {
  const sl_boxing_route *plan = x->plan;
  const sl_placement *tp = plan->place[s->to_side];
  int held = 0;
  for (int r = 0; r < plan->rank_count; r++)
    held += x->next[r].data != NULL;
  if (held != sl_placement_size(tp))
    return bad(x, "wrong number of shards after the step", 0);
  for (int t = 0; t < sl_placement_size(tp); t++) {
    int p = plan->plan_rank[s->to_side][t];
    sl_slice want;
    sl__local_slice(&plan->shape, tp, &s->to, t, &want);
    if (!x->next[p].data) return bad(x, "holds no shard after the step", p);
    for (int d = 0; d < x->ndim; d++)
      if (x->next[p].dims[d] != want.extent[d])
        return bad(x, "shard shape differs from the layout's", p);
  }
  return SL_OK;
}

sl_status sl_boxing_execute(const sl_boxing_route *plan,
                            const void *const *src_shards,
                            void *const *dst_shards) {
  if (!plan || !src_shards || !dst_shards)
    return sl__fail(SL_EINVAL, "boxing execute: NULL argument");
  exec x = {0};
  x.plan = plan;
  x.ndim = plan->shape.ndim;
  x.es = sl_dtype_size(plan->dtype);
  int n = plan->rank_count;
  sl_status st = SL_OK;
  x.cur = sl__calloc((size_t)n, sizeof(buf));
  x.next = sl__calloc((size_t)n, sizeof(buf));
  if (!x.cur || !x.next) {
    st = SL_ENOMEM;
    goto out;
  }
  const sl_placement *sp = plan->place[0], *tp = plan->place[1];
  for (int r = 0; r < sl_placement_size(sp); r++) {
    sl_slice sl;
    sl__local_slice(&plan->shape, sp, &plan->sbp[0], r, &sl);
    int p = plan->plan_rank[0][r];
    SL_CHECK_GOTO(alloc_buf(&x, &x.cur[p], sl.extent), st, out);
    size_t bytes = (size_t)sl_slice_numel(&sl) * x.es;
    if (bytes && !src_shards[r]) {
      st = sl__fail(SL_EINVAL, "boxing execute: source shard %d is NULL", r);
      goto out;
    }
    if (bytes) memcpy(x.cur[p].data, src_shards[r], bytes);
  }
  for (x.step = 0; x.step < plan->step_count; x.step++) {
    const sl__step *s = &plan->steps[x.step];
    if (s->from_side < 0 || s->from_side > 1 || s->to_side < 0 ||
        s->to_side > 1 ||
        sl_nd_sbp_check(&s->from, plan->place[s->from_side], &plan->shape) ||
        sl_nd_sbp_check(&s->to, plan->place[s->to_side], &plan->shape)) {
      st = bad(&x, "the step's layouts do not fit its placements", -1);
      goto out;
    }
    if (s->op == SL_BOXING_SEND_RECV || s->op == SL_BOXING_COPY) {
      SL_CHECK_GOTO(run_p2p(&x, s), st, out);
    } else {
      SL_CHECK_GOTO(check_group_step(&x, s), st, out);
      for (int gi = 0; gi < s->group_count; gi++)
        SL_CHECK_GOTO(run_group(&x, s, s->group_off[gi + 1] - s->group_off[gi],
                                s->group_ranks + s->group_off[gi]),
                      st, out);
    }
    SL_CHECK_GOTO(check_layout(&x, s), st, out);
    free_bufs(x.cur, n);
    buf *t = x.cur;
    x.cur = x.next;
    x.next = t;
    memset(x.next, 0, (size_t)n * sizeof(buf));
  }
  for (int t = 0; t < sl_placement_size(tp); t++) {
    sl_slice sl;
    sl__local_slice(&plan->shape, tp, &plan->sbp[1], t, &sl);
    const buf *b = &x.cur[plan->plan_rank[1][t]];
    bool ok = b->data != NULL;
    for (int d = 0; ok && d < x.ndim; d++)
      ok = b->dims[d] == sl.extent[d];
    if (!ok) {
      st = sl__fail(SL_EINTERNAL,
                    "boxing execute: target rank %d: the plan "
                    "leaves no shard of the target's shape",
                    t);
      goto out;
    }
    size_t bytes = (size_t)sl_slice_numel(&sl) * x.es;
    if (bytes && !dst_shards[t]) {
      st = sl__fail(SL_EINVAL, "boxing execute: target shard %d is NULL", t);
      goto out;
    }
    if (bytes) memcpy(dst_shards[t], b->data, bytes);
  }
out:
  free_bufs(x.cur, n);
  free_bufs(x.next, n);
  sl__free(x.cur);
  sl__free(x.next);
  return st;
}
