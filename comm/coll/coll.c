/* The collectives' geometry (what each member hands in and gets back, with
 * uneven and empty parts as in docs/boxing.md) and the per-member tasks.
 *
 * Every task writes only its own member's output (all_reduce: its own chunk
 * of every output), and reductions combine members in member order, so the
 * result is the same whether one thread runs all tasks or n threads run
 * one each. */
#include <stdio.h>
#include <stdalign.h>
#include <string.h>

#include "coll_int.h"
#include "sbp_int.h"

const char *sl__coll_op_name(sl__coll_op op) {
  switch (op) {
  case SL__COLL_ALL_REDUCE: return "all_reduce";
  case SL__COLL_REDUCE_SCATTER: return "reduce_scatter";
  case SL__COLL_ALL_GATHER: return "all_gather";
  case SL__COLL_ALL_TO_ALL: return "all_to_all";
  case SL__COLL_BROADCAST: return "broadcast";
  case SL__COLL_EXCHANGE: return "exchange";
  }
  return "?";
}

static int64_t numel(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= dims[d];
  return n;
}

static sl_status bad(const sl__coll *x, const char *fmt, int a, int b) {
  char why[160];
  snprintf(why, sizeof why, fmt, a, b);
  return sl__fail(SL_EINVAL, "collective '%s' (%s, %d members): %s", x->name,
                  sl__coll_op_name(x->op), x->n, why);
}

static bool slice_inside(const sl_slice *in, const sl_slice *box, int ndim) {
  if (in->ndim != ndim || box->ndim != ndim) return false;
  for (int d = 0; d < ndim; d++)
    if (in->start[d] < box->start[d] || in->extent[d] < 0 ||
        in->start[d] + in->extent[d] > box->start[d] + box->extent[d])
      return false;
  return true;
}

static bool slice_in_shape(const sl_slice *s, int ndim, const int64_t *dims) {
  if (s->ndim != ndim) return false;
  for (int d = 0; d < ndim; d++)
    if (s->start[d] < 0 || s->extent[d] < 0 ||
        s->start[d] + s->extent[d] > dims[d])
      return false;
  return true;
}

static sl_status exchange_geometry(sl__coll *x, const sl__coll_desc *d) {
  int n = x->n, nd = x->ndim;
  if (!d->has_in || !d->has_out || !d->in_slice || !d->out_slice ||
      (d->piece_count > 0 && !d->pieces) || d->piece_count < 0)
    return bad(x, "missing member boxes or pieces", 0, 0);
  x->has_in = sl__calloc((size_t)n, sizeof *x->has_in);
  x->has_out = sl__calloc((size_t)n, sizeof *x->has_out);
  x->in_slice = sl__calloc((size_t)n, sizeof *x->in_slice);
  x->out_slice = sl__calloc((size_t)n, sizeof *x->out_slice);
  x->fill = sl__calloc((size_t)n, sizeof *x->fill);
  x->by_dst = sl__calloc((size_t)d->piece_count + 1, sizeof *x->by_dst);
  if (!x->has_in || !x->has_out || !x->in_slice || !x->out_slice || !x->fill ||
      !x->by_dst)
    return SL_ENOMEM;
  x->piece_reduce = d->piece_reduce;
  for (int k = 0; k < n; k++) {
    x->has_in[k] = d->has_in[k];
    x->has_out[k] = d->has_out[k];
    x->fill[k] = d->fill ? d->fill[k] : SL__COLL_FILL_ZERO;
    if (x->fill[k] != SL__COLL_FILL_ZERO &&
        (x->fill[k] < SL_REDUCE_SUM || x->fill[k] > SL_REDUCE_MIN))
      return bad(x, "member %d: unknown fill %d", k, x->fill[k]);
    coll_member *m = &x->m[k];
    if (x->has_in[k]) {
      x->in_slice[k] = d->in_slice[k];
      if (!slice_in_shape(&x->in_slice[k], nd, x->block))
        return bad(x, "member %d: input box outside the tensor", k, 0);
      memcpy(m->in_dims, x->in_slice[k].extent, sizeof m->in_dims);
      m->in_bytes = (size_t)sl_slice_numel(&x->in_slice[k]) * x->es;
    }
    if (x->has_out[k]) {
      x->out_slice[k] = d->out_slice[k];
      if (!slice_in_shape(&x->out_slice[k], nd, x->block))
        return bad(x, "member %d: output box outside the tensor", k, 0);
      memcpy(m->out_dims, x->out_slice[k].extent, sizeof m->out_dims);
      m->out_bytes = (size_t)sl_slice_numel(&x->out_slice[k]) * x->es;
    }
  }
  /* Group the pieces by target (a counting sort keeps their order). */
  for (int i = 0; i < d->piece_count; i++) {
    const sl__coll_piece *p = &d->pieces[i];
    if (p->src < 0 || p->src >= n || p->dst < 0 || p->dst >= n)
      return bad(x, "piece %d: member out of range", i, 0);
    if (!x->has_in[p->src] || !x->has_out[p->dst])
      return bad(x, "piece %d: its members hold no such buffers", i, 0);
    if (!slice_inside(&p->slice, &x->in_slice[p->src], nd) ||
        !slice_inside(&p->slice, &x->out_slice[p->dst], nd))
      return bad(x, "piece %d: not inside the boxes of members it joins", i, 0);
    x->m[p->dst].n_pieces++;
  }
  int32_t off = 0;
  for (int k = 0; k < n; k++) {
    x->m[k].first_piece = off;
    off += x->m[k].n_pieces;
    x->m[k].n_pieces = 0;
  }
  for (int i = 0; i < d->piece_count; i++) {
    coll_member *m = &x->m[d->pieces[i].dst];
    x->by_dst[m->first_piece + m->n_pieces++] = d->pieces[i];
  }
  return SL_OK;
}

sl_status sl__coll_geometry(sl__coll *x, const sl__coll_desc *d) {
  int n = x->n, nd = x->ndim;
  bool reduces = x->op == SL__COLL_ALL_REDUCE ||
                 x->op == SL__COLL_REDUCE_SCATTER ||
                 (x->op == SL__COLL_EXCHANGE && d->piece_reduce);
  if (reduces && (d->reduce < SL_REDUCE_SUM || d->reduce > SL_REDUCE_MIN))
    return bad(x, "unknown reduce op %d", (int)d->reduce, 0);
  if (x->op == SL__COLL_EXCHANGE) return exchange_geometry(x, d);
  int split = -1; /* the axis members' parts are cut along */
  switch (x->op) {
  case SL__COLL_REDUCE_SCATTER: split = x->out_axis; break;
  case SL__COLL_ALL_GATHER: split = x->in_axis; break;
  case SL__COLL_ALL_TO_ALL:
    if (x->in_axis < 0 || x->in_axis >= nd || x->out_axis < 0 ||
        x->out_axis >= nd || x->in_axis == x->out_axis)
      return bad(x, "split axes %d and %d do not fit the block", x->in_axis,
                 x->out_axis);
    break;
  case SL__COLL_BROADCAST:
    if (x->root < 0 || x->root >= n)
      return bad(x, "root %d out of range", x->root, 0);
    break;
  default: break;
  }
  if ((x->op == SL__COLL_REDUCE_SCATTER || x->op == SL__COLL_ALL_GATHER) &&
      (split < 0 || split >= nd))
    return bad(x, "split axis %d outside a block of %d dims", split, nd);
  int64_t total = numel(nd, x->block);
  for (int k = 0; k < n; k++) {
    coll_member *m = &x->m[k];
    memcpy(m->in_dims, x->block, sizeof m->in_dims);
    memcpy(m->out_dims, x->block, sizeof m->out_dims);
    switch (x->op) {
    case SL__COLL_ALL_REDUCE:
      sl_split_range(total, n, k, &m->part_start, &m->part_extent);
      break;
    case SL__COLL_REDUCE_SCATTER:
      sl_split_range(x->block[split], n, k, &m->part_start, &m->part_extent);
      m->out_dims[split] = m->part_extent;
      break;
    case SL__COLL_ALL_GATHER:
      sl_split_range(x->block[split], n, k, &m->part_start, &m->part_extent);
      m->in_dims[split] = m->part_extent;
      break;
    case SL__COLL_ALL_TO_ALL: {
      int64_t s, e;
      sl_split_range(x->block[x->in_axis], n, k, &s, &e);
      m->in_dims[x->in_axis] = e;
      sl_split_range(x->block[x->out_axis], n, k, &m->part_start,
                     &m->part_extent);
      m->out_dims[x->out_axis] = m->part_extent;
      break;
    }
    default: break;
    }
    m->in_bytes = (size_t)numel(nd, m->in_dims) * x->es;
    m->out_bytes = (size_t)numel(nd, m->out_dims) * x->es;
    if (x->op == SL__COLL_BROADCAST && k != x->root) m->in_bytes = 0;
  }
  return SL_OK;
}

bool sl__coll_task_has_work(const sl__coll *x, int k) {
  const coll_member *m = &x->m[k];
  if (x->op == SL__COLL_ALL_REDUCE) return m->part_extent > 0;
  return m->out_bytes > 0;
}

static const unsigned char *cin(const sl__coll *x, int k) {
  return (const unsigned char *)x->m[k].in;
}

/* all_reduce: member k reduces chunk k of every input, in member order,
 * a tile at a time into a buffer of its own, and copies each tile into
 * every output. A tile is read from every input before it is written
 * anywhere, so a member's output may be its input (in place: the memory
 * planner gives an all-reduce the bytes of the gradient it reduces). */
#define TILE_BYTES 4096

static void task_all_reduce(sl__coll *x, int k) {
  const coll_member *m = &x->m[k];
  /* The common case in one pass, no tile. */
  if (x->n == 2 && x->dtype == SL_DTYPE_F32 && x->reduce == SL_REDUCE_SUM) {
    int64_t s = m->part_start;
    sl__elem_sum2_f32((float *)x->m[0].out + s, (float *)x->m[1].out + s,
                      (const float *)x->m[0].in + s,
                      (const float *)x->m[1].in + s, m->part_extent);
    return;
  }
  alignas(64) unsigned char tile[TILE_BYTES];
  int64_t per = (int64_t)(TILE_BYTES / x->es);
  for (int64_t e = 0; e < m->part_extent; e += per) {
    int64_t cnt = SL_MIN(per, m->part_extent - e);
    size_t off = (size_t)(m->part_start + e) * x->es, len = (size_t)cnt * x->es;
    memcpy(tile, cin(x, 0) + off, len);
    for (int j = 1; j < x->n; j++)
      sl__elem_reduce(x->dtype, x->reduce, tile, cin(x, j) + off, cnt);
    for (int j = 0; j < x->n; j++)
      memcpy((unsigned char *)x->m[j].out + off, tile, len);
  }
}

/* Member j's chunk of member k's reduce-scatter part into k's output,
 * reduced into it or copied. */
static void rs_move(sl__coll *x, int k, int j, bool reduce) {
  const coll_member *m = &x->m[k];
  int64_t zero[SL_MAX_DIMS] = {0}, off[SL_MAX_DIMS] = {0};
  off[x->out_axis] = m->part_start;
  sl__box_move(x->dtype, x->ndim, m->out, m->out_dims, zero, x->m[j].in,
               x->block, off, m->out_dims, reduce, x->reduce);
}

static void task_reduce_scatter(sl__coll *x, int k) {
  if (x->m[k].early) { /* two members: k's own chunk is in place */
    rs_move(x, k, 1 - k, true);
    return;
  }
  for (int j = 0; j < x->n; j++)
    rs_move(x, k, j, j > 0);
}

/* Member j's block into member k's all-gather output. */
static void ag_move(sl__coll *x, int k, int j) {
  const coll_member *s = &x->m[j];
  int64_t zero[SL_MAX_DIMS] = {0}, off[SL_MAX_DIMS] = {0};
  off[x->in_axis] = s->part_start;
  sl__box_move(x->dtype, x->ndim, x->m[k].out, x->m[k].out_dims, off, s->in,
               s->in_dims, zero, s->in_dims, false, SL_REDUCE_SUM);
}

static void task_all_gather(sl__coll *x, int k) {
  for (int j = 0; j < x->n; j++)
    if (j != k || !x->m[k].early) ag_move(x, k, j);
}

void sl__coll_early_part(sl__coll *x, int k) {
  coll_member *m = &x->m[k];
  if (x->op == SL__COLL_ALL_GATHER && m->out_bytes) {
    ag_move(x, k, k);
    m->early = true;
  } else if (x->op == SL__COLL_REDUCE_SCATTER && x->n == 2 &&
             x->reduce == SL_REDUCE_SUM && m->out_bytes) {
    rs_move(x, k, k, false);
    m->early = true;
  }
}

static void task_all_to_all(sl__coll *x, int k) {
  const coll_member *m = &x->m[k];
  int64_t dst_off[SL_MAX_DIMS] = {0}, src_off[SL_MAX_DIMS] = {0},
          ext[SL_MAX_DIMS];
  src_off[x->out_axis] = m->part_start;
  for (int j = 0; j < x->n; j++) {
    const coll_member *s = &x->m[j];
    memcpy(ext, m->out_dims, sizeof ext);
    ext[x->in_axis] = s->in_dims[x->in_axis];
    sl__box_move(x->dtype, x->ndim, m->out, m->out_dims, dst_off, s->in,
                 s->in_dims, src_off, ext, false, SL_REDUCE_SUM);
    dst_off[x->in_axis] += s->in_dims[x->in_axis];
  }
}

static void task_exchange(sl__coll *x, int k) {
  coll_member *m = &x->m[k];
  if (!x->has_out[k]) return;
  int64_t cnt = numel(x->ndim, m->out_dims);
  if (x->fill[k] != SL__COLL_FILL_ZERO)
    sl__elem_fill_identity(x->dtype, (sl_reduce_op)x->fill[k], m->out, cnt);
  else if (m->out_bytes)
    memset(m->out, 0, m->out_bytes);
  const sl_slice *ob = &x->out_slice[k];
  for (int32_t i = 0; i < m->n_pieces; i++) {
    const sl__coll_piece *p = &x->by_dst[m->first_piece + i];
    const sl_slice *ib = &x->in_slice[p->src];
    int64_t so[SL_MAX_DIMS], dof[SL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
      so[d] = p->slice.start[d] - ib->start[d];
      dof[d] = p->slice.start[d] - ob->start[d];
    }
    sl__box_move(x->dtype, x->ndim, m->out, m->out_dims, dof, x->m[p->src].in,
                 x->m[p->src].in_dims, so, p->slice.extent, x->piece_reduce,
                 x->reduce);
  }
}

void sl__coll_run_task(sl__coll *x, int k) {
  switch (x->op) {
  case SL__COLL_ALL_REDUCE: task_all_reduce(x, k); break;
  case SL__COLL_REDUCE_SCATTER: task_reduce_scatter(x, k); break;
  case SL__COLL_ALL_GATHER: task_all_gather(x, k); break;
  case SL__COLL_ALL_TO_ALL: task_all_to_all(x, k); break;
  case SL__COLL_BROADCAST:
    if (x->m[k].out_bytes)
      memcpy(x->m[k].out, x->m[x->root].in, x->m[k].out_bytes);
    break;
  case SL__COLL_EXCHANGE: task_exchange(x, k); break;
  }
}
