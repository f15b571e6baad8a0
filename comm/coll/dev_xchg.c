/* Boxing steps between GPUs that are no NCCL collective as they stand
 * (docs/cuda.md, "Sessions on CUDA placements"): all-to-alls, all-gathers
 * and reduce-scatters of uneven parts or along another axis than 0,
 * send_recv and copy steps between placements, and the local slice and
 * zero steps. Each becomes pieces (sbp/exchange.c): boxes of the global
 * tensor that one member's input gives to one member's output, stored or
 * reduced there — the form the host's exchange collective runs (coll.c) —
 * and each member runs a small program on its device stream around one
 * grouped NCCL send/recv call (dev_group.c launches it):
 *
 *   before: fill the output with the reduction's identity where the step
 *           says so; pack every piece it sends that is not one contiguous
 *           run of its input into a staging buffer;
 *   NCCL:   its sends, and its receives — straight into the output when
 *           the piece is stored into one contiguous run of it, into the
 *           staging buffer otherwise;
 *   after:  in the step's piece order, its own pieces (input to output)
 *           and the staged received ones, stored or reduced.
 *
 * A sender's k-th piece to a peer is that peer's k-th piece from it (both
 * walk the pieces in one order), which is how NCCL pairs sends and
 * receives. Reductions apply in the step's piece order, the host's, so a
 * reduce-scatter adds member 0's part first as the host collective does.
 * Staging buffers come from the device's caching allocator once, when the
 * program is made: a step's pieces have the same sizes every round, and
 * the stream orders one round's unpacking before the next round's packing. */
#include <string.h>

#include "dev_boxing.h"

/* One box a member moves: a send (from its input), or a piece it applies
 * to its output (from its input, or received). */
typedef struct dx_move {
  int peer;                 /* the other member (a piece of its own: itself) */
  int64_t off[SL_MAX_DIMS]; /* the box in this member's buffer */
  int64_t src_off[SL_MAX_DIMS]; /* own piece: the box in the input */
  int64_t ext[SL_MAX_DIMS];
  size_t bytes;
  int64_t stage; /* byte offset in the staging buffer; -1: none (direct) */
  size_t direct; /* direct: byte offset in the buffer */
  bool reduce;
  bool own; /* applied from the input */
} dx_move;

struct sl__dxchg {
  const sl__dev_handle *dev;
  sl_dtype dtype;
  size_t es;
  int ndim;
  sl_reduce_op op;
  int64_t in_dims[SL_MAX_DIMS], out_dims[SL_MAX_DIMS];
  bool fill;
  int n_send, n_apply, n_recv;
  dx_move *send, *apply;
  sl__dev_send *sends; /* per launch */
  sl__dev_recv *recvs;
  void *stage;
};

/* ---- a member's program ------------------------------------------------- */

/* Whether a box of extents ext in a row-major buffer of dims is one
 * contiguous run, wherever it starts: every dim after the first one the
 * box spans more than one element of is whole. */
static bool contiguous(int nd, const int64_t *dims, const int64_t *ext) {
  int d = 0;
  while (d < nd && ext[d] == 1)
    d++;
  for (d++; d < nd; d++)
    if (ext[d] != dims[d]) return false;
  return true;
}

static size_t flat_offset(int nd, const int64_t *dims, const int64_t *off) {
  int64_t o = 0;
  for (int d = 0; d < nd; d++)
    o = o * dims[d] + off[d];
  return (size_t)o;
}

/* The box of piece box relative to a buffer holding the global box at. */
static void relative(int nd, const sl_slice *box, const sl_slice *at,
                     int64_t *off, int64_t *ext) {
  for (int d = 0; d < nd; d++) {
    off[d] = box->start[d] - at->start[d];
    ext[d] = box->extent[d];
  }
}

/* Staging space: 256-byte aligned runs, the caching allocator's grain. */
static int64_t take_stage(size_t *used, size_t bytes) {
  int64_t at = (int64_t)*used;
  *used += (bytes + 255) / 256 * 256;
  return at;
}

void sl__dxchg_destroy(sl__dxchg *x) {
  if (!x) return;
  if (x->stage) sl__caching_alloc_free(x->dev->mem, x->stage);
  sl__free(x->send);
  sl__free(x->apply);
  sl__free(x->sends);
  sl__free(x->recvs);
  sl__free(x);
}

sl_status sl__dxchg_create(const sl__dev_handle *dev, const sl__xgeom *g,
                           int me, sl__dxchg **out) {
  *out = NULL;
  sl__dxchg *x;
  if (SL_NEW(x) != SL_OK) return SL_ENOMEM;
  x->dev = dev;
  x->dtype = g->dtype;
  x->es = sl_dtype_size(g->dtype);
  x->op = g->op;
  x->ndim = g->has_in[me] ? g->in_box[me].ndim : g->out_box[me].ndim;
  for (int d = 0; d < x->ndim; d++) {
    x->in_dims[d] = g->has_in[me] ? g->in_box[me].extent[d] : 0;
    x->out_dims[d] = g->has_out[me] ? g->out_box[me].extent[d] : 0;
  }
  x->fill = g->has_out[me] && g->fill[me];
  x->send = sl__calloc((size_t)g->n_pieces + 1, sizeof *x->send);
  x->apply = sl__calloc((size_t)g->n_pieces + 1, sizeof *x->apply);
  x->sends = sl__calloc((size_t)g->n_pieces + 1, sizeof *x->sends);
  x->recvs = sl__calloc((size_t)g->n_pieces + 1, sizeof *x->recvs);
  if (!x->send || !x->apply || !x->sends || !x->recvs) {
    sl__dxchg_destroy(x);
    return SL_ENOMEM;
  }
  size_t staged = 0;
  for (int i = 0; i < g->n_pieces; i++) {
    const sl__xpiece *pc = &g->pieces[i];
    size_t bytes = (size_t)sl_slice_numel(&pc->box) * x->es;
    if (bytes == 0 || (pc->src != me && pc->dst != me)) continue;
    if (pc->src == me && pc->dst != me) {
      dx_move *mv = &x->send[x->n_send++];
      mv->peer = pc->dst;
      mv->bytes = bytes;
      relative(x->ndim, &pc->box, &g->in_box[me], mv->off, mv->ext);
      mv->direct = flat_offset(x->ndim, x->in_dims, mv->off) * x->es;
      mv->stage = contiguous(x->ndim, x->in_dims, mv->ext)
                      ? -1
                      : take_stage(&staged, bytes);
    }
    if (pc->dst != me) continue;
    dx_move *mv = &x->apply[x->n_apply++];
    mv->peer = pc->src;
    mv->bytes = bytes;
    mv->reduce = pc->reduce;
    mv->own = pc->src == me;
    relative(x->ndim, &pc->box, &g->out_box[me], mv->off, mv->ext);
    if (mv->own) {
      relative(x->ndim, &pc->box, &g->in_box[me], mv->src_off, mv->ext);
      mv->stage = -1;
    } else {
      x->n_recv++;
      mv->direct = flat_offset(x->ndim, x->out_dims, mv->off) * x->es;
      mv->stage = !mv->reduce && contiguous(x->ndim, x->out_dims, mv->ext)
                      ? -1
                      : take_stage(&staged, bytes);
    }
  }
  sl_status st = SL_OK;
  if (staged) st = sl__caching_alloc_alloc(dev->mem, staged, NULL, &x->stage);
  if (st != SL_OK) {
    sl__dxchg_destroy(x);
    return st;
  }
  *out = x;
  return SL_OK;
}

static sl_status box(sl__dxchg *x, sl__stream *s, void *dst,
                     const int64_t *dst_dims, const int64_t *dst_off,
                     const void *src, const int64_t *src_dims,
                     const int64_t *src_off, const int64_t *ext, bool reduce) {
  sl__box_op b = {.dtype = x->dtype,
                  .ndim = x->ndim,
                  .dst = dst,
                  .src = src,
                  .reduce = reduce,
                  .op = x->op};
  memcpy(b.dst_dims, dst_dims, sizeof b.dst_dims);
  memcpy(b.dst_off, dst_off, sizeof b.dst_off);
  if (src) {
    memcpy(b.src_dims, src_dims, sizeof b.src_dims);
    memcpy(b.src_off, src_off, sizeof b.src_off);
  }
  memcpy(b.ext, ext, sizeof b.ext);
  return x->dev->box(&b, s);
}

/* The exchange's part of a launch's arguments; in and out stay as the
 * member arrived with them (an exchange does not read them). */
static void set_lists(sl__dxchg *x, sl__stream *s, sl__dev_rank_args *a) {
  a->stream = s;
  a->n_send = x->n_send;
  a->n_recv = x->n_recv;
  a->send = x->sends;
  a->recv = x->recvs;
}

sl_status sl__dxchg_before(sl__dxchg *x, const void *in, void *out,
                           sl__stream *s, sl__dev_rank_args *a) {
  static const int64_t zero[SL_MAX_DIMS];
  SL_CHECK(sl__device_make_current(x->dev->dev));
  if (x->fill)
    SL_CHECK(box(x, s, out, x->out_dims, zero, NULL, NULL, NULL, x->out_dims,
                 false));
  unsigned char *stage = x->stage;
  for (int i = 0; i < x->n_send; i++) {
    const dx_move *mv = &x->send[i];
    const void *buf = (const unsigned char *)in + mv->direct;
    if (mv->stage >= 0) {
      buf = stage + mv->stage;
      SL_CHECK(box(x, s, stage + mv->stage, mv->ext, zero, in, x->in_dims,
                   mv->off, mv->ext, false));
    }
    x->sends[i] = (sl__dev_send){mv->peer, buf, mv->bytes};
  }
  int r = 0;
  for (int i = 0; i < x->n_apply; i++) {
    const dx_move *mv = &x->apply[i];
    if (mv->own) continue;
    void *buf = mv->stage >= 0 ? (void *)(stage + mv->stage)
                               : (void *)((unsigned char *)out + mv->direct);
    x->recvs[r++] = (sl__dev_recv){mv->peer, buf, mv->bytes};
  }
  set_lists(x, s, a);
  return SL_OK;
}

sl_status sl__dxchg_after(sl__dxchg *x, const void *in, void *out,
                          sl__stream *s) {
  static const int64_t zero[SL_MAX_DIMS];
  SL_CHECK(sl__device_make_current(x->dev->dev));
  unsigned char *stage = x->stage;
  for (int i = 0; i < x->n_apply; i++) {
    const dx_move *mv = &x->apply[i];
    if (mv->own)
      SL_CHECK(box(x, s, out, x->out_dims, mv->off, in, x->in_dims, mv->src_off,
                   mv->ext, mv->reduce));
    else if (mv->stage >= 0)
      SL_CHECK(box(x, s, out, x->out_dims, mv->off, stage + mv->stage, mv->ext,
                   zero, mv->ext, mv->reduce));
  }
  return SL_OK;
}

size_t sl__dxchg_warm_bytes(const sl__dxchg *x) {
  return (size_t)x->n_send + (size_t)x->n_recv;
}

void sl__dxchg_warm_args(sl__dxchg *x, void *buf, sl__stream *s,
                         sl__dev_rank_args *a) {
  unsigned char *b = buf;
  for (int i = 0; i < x->n_send; i++)
    x->sends[i] = (sl__dev_send){x->send[i].peer, b++, 1};
  int r = 0;
  for (int i = 0; i < x->n_apply; i++)
    if (!x->apply[i].own)
      x->recvs[r++] = (sl__dev_recv){x->apply[i].peer, b++, 1};
  set_lists(x, s, a);
}
