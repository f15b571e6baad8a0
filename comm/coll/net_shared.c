/* The shared all-reduce (OP_SHARED; docs/cluster.md, "Shared registers"):
 * between daemons on one host whose register pools map each other, a
 * member reads its peers' values where they lie instead of receiving
 * copies of them.
 *
 * Member r of n owns segment r (the ring's even split). Three frames go
 * from every member to every other, in this order, none carrying more
 * than a segment:
 *   READY    its values (src): lent — their offset in its pool — when they
 *            lie there, else segment k of them, to member k, by value;
 *   REDUCED  once it has heard READY from everyone, it reduces segment r
 *            (its own values first, then the others' in member order) into
 *            its base and says so: lent, or the segment by value;
 *   DONE     once it has copied every other segment into its base, it will
 *            read nothing of anyone's any more.
 * A member is done when it has all three from everyone: only then may its
 * caller reuse the buffers the others read. Reading a peer's lent values
 * needs no lock: the peer changes its segment k of src (in place, its
 * base) only after member k's REDUCED says k is done reading it, and its
 * own segment of base never after its REDUCED. So every member ends with
 * the same bits, whatever lies where; a buffer outside the pool (or a
 * pool that is full) only costs the copies the frames carry.
 *
 * Whether an all-reduce runs this way is decided alike on every member
 * from what they all know: the job's map of who maps whom and the size
 * (sl__nc_shared_fits). With nc->lock held throughout. */
#include <string.h>

#include "net_coll_int.h"

enum { SH_READY = 0, SH_REDUCED = 1, SH_DONE = 2 };
#define NOT_LENT (-1)

bool sl__nc_shared_fits(const sl__net_coll *nc, const sl__net_group *g,
                        uint64_t bytes) {
  if (!nc->maps || !nc->ar_auto || g->n < 2 || bytes < nc->shared_min)
    return false;
  for (uint32_t i = 0; i < g->n; i++)
    if (g->nodes[i] >= nc->nnodes) return false; /* start() says why */
  for (uint32_t i = 0; i < g->n; i++)
    for (uint32_t j = 0; j < g->n; j++)
      if (i != j && !nc->maps[(uint64_t)g->nodes[i] * nc->nnodes + g->nodes[j]])
        return false;
  return true;
}

sl_status sl__net_coll_set_shared(sl__net_coll *nc, const sl__shm_pool *pool,
                                  const sl__shm_view *views, uint32_t n,
                                  const uint8_t *maps) {
  uint8_t *all = NULL;
  if (maps) {
    if (n > nc->nnodes)
      return sl__fail(SL_EINVAL, "shared registers: %u nodes of %u", n,
                      nc->nnodes);
    if (!(all = sl__calloc((size_t)nc->nnodes * nc->nnodes, 1)))
      return SL_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
      memcpy(all + (size_t)i * nc->nnodes, maps + (size_t)i * n, n);
  }
  pthread_mutex_lock(&nc->lock);
  sl__free(nc->maps);
  nc->maps = all;
  nc->pool = all ? pool : NULL;
  nc->views = all ? views : NULL;
  nc->n_views = all ? n : 0;
  pthread_mutex_unlock(&nc->lock);
  return SL_OK;
}

sl_status sl__nc_shared_init(inst *x) {
  x->phase_in = sl__calloc(x->n, sizeof *x->phase_in);
  x->lent = sl__calloc(x->n, sizeof *x->lent);
  x->recv_total = 3ull * (x->n - 1);
  return x->phase_in && x->lent ? SL_OK : SL_ENOMEM;
}

static uint64_t seg_off(const inst *x, uint32_t k) {
  return x->seg_start[k] * x->esize;
}

static uint64_t seg_bytes(const inst *x, uint32_t k) {
  return x->seg_cnt[k] * x->esize;
}

/* Where member k's values of segment r arrive by value. */
static uint8_t *ready_slot(const inst *x, uint32_t k) {
  return x->scratch ? x->scratch + (uint64_t)k * seg_bytes(x, x->r) : NULL;
}

static void tell(sl__net_coll *nc, inst *x, uint32_t k, int phase,
                 int64_t piece, const void *payload, uint64_t len) {
  if (x->failed) return;
  sl__dp_frame f = sl__nc_frame(x, phase, (int32_t)x->r);
  f.piece = piece;
  sl__nc_send(nc, x, x->nodes[k], &f, payload, len);
}

/* Lends buf when it lies in this node's pool: its offset, else NOT_LENT. */
static int64_t lend(const sl__net_coll *nc, const inst *x, const void *buf) {
  uint64_t off;
  return sl__shm_pool_offset(nc->pool, buf, x->total_bytes, &off) ? (int64_t)off
                                                                  : NOT_LENT;
}

void sl__nc_shared_start(sl__net_coll *nc, inst *x) {
  int64_t at = lend(nc, x, x->src);
  for (uint32_t k = 0; k < x->n; k++)
    if (k != x->r)
      tell(nc, x, k, SH_READY, at, x->src + seg_off(x, k),
           at == NOT_LENT ? seg_bytes(x, k) : 0);
}

sl_status sl__nc_shared_check(const sl__net_coll *nc, const inst *x,
                              uint32_t node, const sl__dp_frame *f) {
  int k = sl__nc_member_of(x, node);
  const char *why = NULL;
  if (f->slot != OP_SHARED || f->consumer != x->dt)
    why = "another algorithm or dtype";
  else if (k < 0 || (uint32_t)k == x->r || f->index != k)
    why = "not from the member it names";
  else if (f->desc != x->phase_in[k] || f->desc > SH_DONE)
    why = "out of order";
  else if (f->desc == SH_DONE ? f->len || f->piece != NOT_LENT
           : f->piece == NOT_LENT
               ? f->len !=
                     seg_bytes(x, f->desc == SH_READY ? x->r : (uint32_t)k)
               : f->len || f->piece < 0 || node >= nc->n_views ||
                     !nc->views[node].base ||
                     (uint64_t)f->piece > nc->views[node].bytes ||
                     x->total_bytes >
                         nc->views[node].bytes - (uint64_t)f->piece)
    why = "a size or a place outside the member's pool";
  if (!why) return SL_OK;
  return sl__fail(SL_ECOMM,
                  "collective %llu/%llu: a shared all-reduce frame from node "
                  "%u (op %u dtype %u phase %d, %llu bytes at %lld) that does "
                  "not fit this member's %llu bytes of dtype %d: %s",
                  (unsigned long long)x->group, (unsigned long long)x->seq,
                  node, f->slot, f->consumer, f->desc,
                  (unsigned long long)f->len, (long long)f->piece,
                  (unsigned long long)x->total_bytes, (int)x->dt, why);
}

sl_status sl__nc_shared_target(sl__net_coll *nc, inst *x, const sl__dp_frame *f,
                               void **buf) {
  *buf = NULL;
  if (!f->len) return SL_OK;
  if (f->desc == SH_REDUCED) {
    *buf = x->base + seg_off(x, (uint32_t)f->index);
    return SL_OK;
  }
  SL_CHECK(sl__nc_scratch(nc, x, (uint64_t)x->n * seg_bytes(x, x->r)));
  *buf = ready_slot(x, (uint32_t)f->index);
  return SL_OK;
}

/* Every member's values are in: segment r, reduced, goes to everyone. */
static void reduce_mine(sl__net_coll *nc, inst *x) {
  uint64_t off = seg_off(x, x->r), bytes = seg_bytes(x, x->r);
  int64_t cnt = (int64_t)x->seg_cnt[x->r];
  bool first = true;
  for (uint32_t k = 0; k < x->n && cnt; k++) {
    if (k == x->r) continue;
    const uint8_t *v = x->lent[k] ? x->lent[k] + off : ready_slot(x, k);
    if (x->lent[k]) nc->stats.bytes_read_shared += bytes;
    if (first)
      sl__elem_reduce_into(x->dt, x->rop, x->base + off, x->src + off, v, cnt);
    else
      sl__elem_reduce(x->dt, x->rop, x->base + off, v, cnt);
    first = false;
  }
  int64_t at = lend(nc, x, x->base);
  for (uint32_t k = 0; k < x->n; k++)
    if (k != x->r)
      tell(nc, x, k, SH_REDUCED, at, x->base + off, at == NOT_LENT ? bytes : 0);
}

void sl__nc_shared_take(sl__net_coll *nc, inst *x, uint32_t node,
                        const sl__dp_frame *f, const void *buf) {
  uint32_t k = (uint32_t)f->index;
  const uint8_t *lent =
      f->piece == NOT_LENT ? NULL : nc->views[node].base + f->piece;
  x->phase_in[k]++;
  x->recv_done++;
  nc->stats.chunks_received++;
  if (f->desc == SH_READY) {
    x->lent[k] = lent;
    if (f->len) {
      /* staged before the start: into its slot now */
      sl_status st = sl__nc_scratch(nc, x, (uint64_t)x->n * seg_bytes(x, x->r));
      if (st != SL_OK) {
        sl__nc_fail(x, st, "collective: no memory for a shared all-reduce");
        return;
      }
      if (buf != ready_slot(x, k)) memcpy(ready_slot(x, k), buf, f->len);
    }
    if (++x->ready_in == x->n - 1) reduce_mine(nc, x);
  } else if (f->desc == SH_REDUCED) {
    uint64_t off = seg_off(x, k), bytes = seg_bytes(x, k);
    if (lent && bytes) {
      memcpy(x->base + off, lent + off, bytes);
      nc->stats.bytes_read_shared += bytes;
    } else if (f->len && buf != x->base + off) {
      memcpy(x->base + off, buf, f->len);
    }
    if (++x->reduced_in == x->n - 1)
      for (uint32_t j = 0; j < x->n; j++)
        if (j != x->r) tell(nc, x, j, SH_DONE, NOT_LENT, NULL, 0);
  }
}
