/* sluice comm — ring collectives between nodes over the data plane
 * (net_coll.h explains the algorithm and the threading).
 *
 * Every instance's state is under nc->lock; the work (reductions, copies,
 * the next send) runs under it on the thread that made it possible: the
 * loop thread in the hooks, the starting thread for chunks staged before
 * the start. Done callbacks are called after the lock is released. */
#include <stdlib.h>
#include <string.h>

#include "net_coll_int.h"

#define DEF_CHUNK (1ull << 20)
/* Below this an all-reduce takes fewer hops than the shared one's three. */
#define DEF_SHARED_MIN (256ull << 10)
/* Beyond one scratch buffer kept for reuse, at most this many bytes. */
#define SPARE_CAP (256ull << 20)

static uint32_t mod(int64_t a, uint32_t n) {
  int64_t m = a % (int64_t)n;
  return (uint32_t)(m < 0 ? m + n : m);
}

static inst *find(sl__net_coll *nc, uint64_t group, uint64_t seq) {
  for (inst *x = nc->insts; x; x = x->next)
    if (x->group == group && x->seq == seq) return x;
  return NULL;
}

/* Keeps buf (bytes) for a later instance, or frees it; with nc->lock. */
static void spare_put(sl__net_coll *nc, uint8_t *buf, uint64_t bytes) {
  uint64_t total = bytes;
  int n = 0, smallest = -1;
  for (int i = 0; i < NC_SPARES; i++) {
    if (!nc->spare[i]) continue;
    n++;
    total += nc->spare_bytes[i];
    if (smallest < 0 || nc->spare_bytes[i] < nc->spare_bytes[smallest])
      smallest = i;
  }
  /* Full, or over the cap: the smallest of them all goes. */
  if (smallest >= 0 && (n == NC_SPARES || total > SPARE_CAP)) {
    if (nc->spare_bytes[smallest] >= bytes) {
      sl__free(buf);
      return;
    }
    sl__free(nc->spare[smallest]);
    nc->spare[smallest] = NULL;
    nc->spare_bytes[smallest] = 0;
  }
  for (int i = 0; i < NC_SPARES; i++)
    if (!nc->spare[i]) {
      nc->spare[i] = buf;
      nc->spare_bytes[i] = bytes;
      return;
    }
  sl__free(buf);
}

/* The smallest spare of at least `bytes`, taken out of the pool; NULL if
 * none. With nc->lock. */
static uint8_t *spare_take(sl__net_coll *nc, uint64_t bytes, uint64_t *got) {
  int best = -1;
  for (int i = 0; i < NC_SPARES; i++)
    if (nc->spare[i] && nc->spare_bytes[i] >= bytes &&
        (best < 0 || nc->spare_bytes[i] < nc->spare_bytes[best]))
      best = i;
  if (best < 0) return NULL;
  uint8_t *buf = nc->spare[best];
  *got = nc->spare_bytes[best];
  nc->spare[best] = NULL;
  nc->spare_bytes[best] = 0;
  return buf;
}

sl_status sl__nc_scratch(sl__net_coll *nc, inst *x, uint64_t bytes) {
  if (x->scratch || !bytes) return SL_OK;
  x->scratch = spare_take(nc, bytes, &x->scratch_bytes); /* maybe larger */
  if (!x->scratch) {
    x->scratch = sl__malloc(bytes);
    x->scratch_bytes = bytes;
  }
  return x->scratch ? SL_OK : SL_ENOMEM;
}

static void free_inst(sl__net_coll *nc, inst *x) {
  for (staged *s = x->sq, *n; s; s = n) {
    n = s->next;
    sl__free(s->buf);
    sl__free(s);
  }
  x->sq = x->sq_tail = NULL;
  sl__free(x->nodes);
  sl__free(x->seg_start);
  sl__free(x->seg_cnt);
  sl__free(x->send_start);
  sl__free(x->send_cnt);
  sl__free(x->phase_in);
  sl__free((void *)x->lent);
  x->phase_in = NULL;
  x->lent = NULL;
  x->nodes = NULL;
  x->seg_start = x->seg_cnt = x->send_start = x->send_cnt = NULL;
  if (x->scratch) spare_put(nc, x->scratch, x->scratch_bytes);
  x->scratch = NULL;
  sl__free(x->work);
  x->work = NULL;
}

static void unlink_inst(sl__net_coll *nc, inst *x) {
  for (inst **pp = &nc->insts; *pp; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      return;
    }
}

/* Byte offset and length of lane `lane`'s piece of segment k. */
static void piece(const inst *x, uint32_t k, uint32_t lane, uint64_t *off,
                  uint64_t *len) {
  uint64_t c = x->seg_cnt[k];
  uint64_t a = x->seg_start[k] + c * lane / x->lanes;
  uint64_t b = x->seg_start[k] + c * (lane + 1) / x->lanes;
  *off = a * x->esize;
  *len = (b - a) * x->esize;
}

/* The segment received at step t; the one sent at step t+1 is the same. */
static uint32_t recv_seg(const inst *x, uint32_t t) {
  if (t < x->rs_steps) return mod((int64_t)x->r - t - 2, x->n);
  return mod((int64_t)x->r - (t - x->rs_steps) - 1, x->n);
}

static uint32_t send_seg(const inst *x, uint32_t t) {
  if (t > 0) return recv_seg(x, t - 1);
  return x->rs_steps ? mod((int64_t)x->r - 1, x->n) : x->r;
}

void sl__nc_fail(inst *x, sl_status st, const char *msg) {
  if (x->failed) return;
  x->failed = true;
  x->fail_st = st;
  snprintf(x->fail_msg, sizeof x->fail_msg, "%s", msg);
}

/* Calls done (later, via pd) when the instance is over. */
static bool check_done(sl__net_coll *nc, inst *x, pending_done *pd) {
  if (!x->started || x->finished) return false;
  if (x->send_done != x->send_issued) return false;
  if (!x->failed && x->recv_done < x->recv_total) return false;
  if (x->op == OP_EXCHANGE && !x->failed && x->total_bytes && x->n > 1) {
    /* base = part 0 op part 1 op ... in member order; this member's part
     * is src, moved aside first when the result overwrites it */
    uint64_t tb = x->total_bytes;
    const uint8_t *mine = x->src;
    if (mine == x->base && x->r != 0) {
      memcpy(x->scratch + x->r * tb, mine, tb);
      mine = x->scratch + x->r * tb;
    }
    const uint8_t *first = x->r == 0 ? mine : x->scratch;
    if (first != x->base) memcpy(x->base, first, tb);
    for (uint32_t k = 1; k < x->n; k++)
      sl__elem_reduce(x->dt, x->rop, x->base,
                      k == x->r ? mine : x->scratch + k * tb,
                      (int64_t)(tb / x->esize));
  }
  x->finished = true;
  pd->fn = x->done;
  pd->arg = x->arg;
  pd->st = x->failed ? x->fail_st : SL_OK;
  snprintf(pd->msg, sizeof pd->msg, "%s", x->fail_msg);
  if (x->failed) {
    nc->stats.failed++;
    free_inst(nc, x); /* the tombstone stays listed */
  } else {
    nc->stats.completed++;
    unlink_inst(nc, x);
    free_inst(nc, x);
    sl__free(x);
  }
  return true;
}

/* Sends one frame of x to node, with the payload's CRC32C when crc is not
 * NULL; a frame written at once counts as sent here, since no sent hook
 * follows it. A refused send fails x. */
static void send_frame(sl__net_coll *nc, inst *x, uint32_t node,
                       const sl__dp_frame *f, const void *payload, uint64_t len,
                       const uint32_t *crc) {
  bool written;
  x->send_issued++;
  sl_status st = crc ? sl__dp_endpoint_send_coll_crc(nc->ep, node, f, payload,
                                                     len, *crc, x, &written)
                     : sl__dp_endpoint_send_coll(nc->ep, node, f, payload, len,
                                                 x, &written);
  if (st != SL_OK) {
    x->send_issued--;
    sl__nc_fail(x, st, sl_last_error());
    return;
  }
  x->send_done += written;
  nc->stats.chunks_sent++;
}

/* crc: the piece's CRC32C when known (an all-gather step forwards the
 * bytes it received unchanged, over TCP with their checksum), else NULL. */
static void send_step(sl__net_coll *nc, inst *x, uint32_t t, uint32_t lane,
                      const uint32_t *crc) {
  if (x->failed) return;
  uint64_t off, len;
  piece(x, send_seg(x, t), lane, &off, &len);
  sl__dp_frame f = sl__nc_frame(x, (int32_t)t, (int32_t)lane);
  f.piece = (int64_t)off;
  /* step 0 sends this member's own values; later steps what it reduced
   * or received */
  send_frame(nc, x, x->right, &f,
             len ? (t == 0 ? x->src : x->base) + off : NULL, len, crc);
}

sl__dp_frame sl__nc_frame(const inst *x, int32_t desc, int32_t index) {
  sl__dp_frame f = {0};
  f.src = x->group;
  f.dst = x->seq;
  f.desc = desc;
  f.index = index;
  f.slot = (uint16_t)x->op;
  f.consumer = (uint16_t)x->dt;
  return f;
}

void sl__nc_send(sl__net_coll *nc, inst *x, uint32_t node,
                 const sl__dp_frame *f, const void *payload, uint64_t len) {
  send_frame(nc, x, node, f, len ? payload : NULL, len, NULL);
}

/* The exchange and the all-to-all send straight to every member. */
static bool is_direct(const inst *x) {
  return x->op == OP_EXCHANGE || x->op == OP_ALL_TO_ALL;
}

/* Bytes this member receives from member k and sends it, and where
 * member k's arrive. */
static uint64_t direct_recv_bytes(const inst *x, uint32_t k) {
  return x->op == OP_EXCHANGE ? x->total_bytes : x->seg_cnt[k] * x->esize;
}

static uint64_t direct_send_bytes(const inst *x, uint32_t k) {
  return x->op == OP_EXCHANGE ? x->total_bytes : x->send_cnt[k] * x->esize;
}

static uint8_t *direct_slot(const inst *x, uint32_t k) {
  uint8_t *p = x->op == OP_EXCHANGE ? x->scratch : x->base;
  uint64_t off =
      x->op == OP_EXCHANGE ? k * x->total_bytes : x->seg_start[k] * x->esize;
  /* An empty collective has no buffers: NULL + 0 is undefined in C. */
  return p ? p + off : p;
}

static void send_exchange(sl__net_coll *nc, inst *x, uint32_t k) {
  if (x->failed) return;
  uint32_t node = x->nodes[k];
  uint64_t len = direct_send_bytes(x, k);
  /* An all-to-all with nothing to send has no buffer: NULL + 0 is
   * undefined in C. */
  const uint8_t *payload = x->op == OP_EXCHANGE ? x->src
                           : x->in ? x->in + x->send_start[k] * x->esize
                                   : NULL;
  sl__dp_frame f = sl__nc_frame(x, 0, (int32_t)x->r);
  sl__nc_send(nc, x, node, &f, payload, len);
}

/* A member that finds the instance broken (a chunk that does not match)
 * tells every other member, which would otherwise wait for it: a frame
 * with step -1 carrying the reason. */
#define ABORT_STEP (-1)
#define ABORT_MAX 400u

static void send_abort(sl__net_coll *nc, inst *x) {
  size_t len = strnlen(x->fail_msg, ABORT_MAX);
  for (uint32_t k = 0; k < x->n; k++) {
    if (k == x->r) continue;
    sl__dp_frame f = {0};
    f.src = x->group;
    f.dst = x->seq;
    f.desc = ABORT_STEP;
    f.slot = (uint16_t)x->op;
    bool written;
    x->send_issued++;
    if (sl__dp_endpoint_send_coll(nc->ep, x->nodes[k], &f, x->fail_msg, len, x,
                                  &written) != SL_OK)
      x->send_issued--;
    else
      x->send_done += written;
  }
}

int sl__nc_member_of(const inst *x, uint32_t node) {
  for (uint32_t i = 0; i < x->n; i++)
    if (x->nodes[i] == node) return (int)i;
  return -1;
}

/* ---- the tree (OP_TREE, described at the top) --------------------------- */

static uint32_t lowbit(uint32_t r) { return r & (~r + 1); }

/* Member r's children are r + m for the powers of two m below this. */
static uint32_t tree_span(const inst *x, uint32_t r) {
  if (r) return lowbit(r);
  uint32_t span = 1;
  while (span < x->n)
    span <<= 1;
  return span;
}

static uint32_t tree_kids(const inst *x, uint32_t r) {
  uint32_t kids = 0;
  for (uint32_t m = 1; m < tree_span(x, r) && r + m < x->n; m <<= 1)
    kids++;
  return kids;
}

static bool tree_is_kid(const inst *x, uint32_t k) {
  uint32_t d = k - x->r;
  return k > x->r && k < x->n && lowbit(d) == d && d < tree_span(x, x->r);
}

/* Where child k's sum arrives: slot j for k = r + 2^j (the children are
 * j = 0, 1, ... kids-1). */
static uint8_t *tree_kid_slot(const inst *x, uint32_t k) {
  uint32_t j = 0;
  while ((1u << j) < k - x->r)
    j++;
  return x->scratch ? x->scratch + j * x->total_bytes : NULL;
}

static void send_tree(sl__net_coll *nc, inst *x, uint32_t k, int step,
                      const uint8_t *payload) {
  if (x->failed) return;
  sl__dp_frame f = sl__nc_frame(x, step, (int32_t)x->r);
  sl__nc_send(nc, x, x->nodes[k], &f, payload, x->total_bytes);
}

/* The total is in base: down to the children, the largest subtree first. */
static void tree_down(sl__net_coll *nc, inst *x) {
  for (uint32_t m = tree_span(x, x->r) >> 1; m; m >>= 1)
    if (x->r + m < x->n) send_tree(nc, x, x->r + m, TREE_DOWN, x->base);
}

/* Every child's sum is in: this member's own values, then the children's
 * in the order of j, up to the parent (the root sends the total down). */
static void tree_up(sl__net_coll *nc, inst *x) {
  uint64_t tb = x->total_bytes;
  const uint8_t *sum = x->src;
  if (x->kids) {
    if (tb && x->base != x->src) memcpy(x->base, x->src, tb);
    for (uint32_t j = 0; j < x->kids && tb; j++)
      sl__elem_reduce(x->dt, x->rop, x->base, x->scratch + j * tb,
                      (int64_t)(tb / x->esize));
    sum = x->base;
  }
  if (x->r == 0)
    tree_down(nc, x); /* the root has children whenever n > 1 */
  else
    send_tree(nc, x, x->r - lowbit(x->r), TREE_UP, sum);
}

/* Checks a chunk against the instance: SL_ECOMM with the reason. */
static sl_status check_tree_chunk(const inst *x, uint32_t node,
                                  const sl__dp_frame *f) {
  int k = sl__nc_member_of(x, node);
  bool from_kid = f->desc == TREE_UP && k >= 0 && tree_is_kid(x, (uint32_t)k);
  bool from_parent = f->desc == TREE_DOWN && x->r && k >= 0 &&
                     (uint32_t)k == x->r - lowbit(x->r);
  if (f->slot == x->op && f->consumer == x->dt && f->piece == 0 &&
      f->index == k && f->len == x->total_bytes && (from_kid || from_parent))
    return SL_OK;
  return sl__fail(SL_ECOMM,
                  "collective %llu/%llu: a chunk from node %u (op %u dtype "
                  "%u step %d, %llu bytes) that does not fit this member's "
                  "tree all-reduce of %llu bytes of dtype %d as member %u "
                  "(sizes, dtypes or algorithms differ between members)",
                  (unsigned long long)x->group, (unsigned long long)x->seq,
                  node, f->slot, f->consumer, f->desc,
                  (unsigned long long)f->len,
                  (unsigned long long)x->total_bytes, (int)x->dt, x->r);
}

static sl_status check_chunk(const sl__net_coll *nc, const inst *x,
                             uint32_t node, const sl__dp_frame *f) {
  if (x->op == OP_TREE) return check_tree_chunk(x, node, f);
  if (x->op == OP_SHARED) return sl__nc_shared_check(nc, x, node, f);
  if (is_direct(x)) {
    int k = sl__nc_member_of(x, node);
    if (f->slot == x->op && f->consumer == x->dt && f->desc == 0 && k >= 0 &&
        (uint32_t)k != x->r && f->index == k && f->piece == 0 &&
        f->len == direct_recv_bytes(x, (uint32_t)k))
      return SL_OK;
    return sl__fail(
        SL_ECOMM,
        "collective %llu/%llu: a chunk from node %u (op %u dtype "
        "%u, %llu bytes) that does not match this member's "
        "op %d of %llu bytes of dtype %d (sizes, dtypes or "
        "algorithms differ between members)",
        (unsigned long long)x->group, (unsigned long long)x->seq, node, f->slot,
        f->consumer, (unsigned long long)f->len, x->op,
        (unsigned long long)(k >= 0 ? direct_recv_bytes(x, (uint32_t)k) : 0),
        (int)x->dt);
  }
  if (node != x->left)
    return sl__fail(SL_ECOMM,
                    "collective %llu/%llu: a chunk from node %u, whose left "
                    "neighbour is node %u",
                    (unsigned long long)x->group, (unsigned long long)x->seq,
                    node, x->left);
  if (f->slot != x->op || f->consumer != x->dt || f->desc < 0 ||
      (uint32_t)f->desc >= x->steps || f->index < 0 ||
      (uint32_t)f->index >= x->lanes)
    return sl__fail(SL_ECOMM,
                    "collective %llu/%llu: a chunk for op %u dtype %u step %d "
                    "lane %d, but this member runs op %d dtype %d with %u "
                    "steps of %u lanes",
                    (unsigned long long)x->group, (unsigned long long)x->seq,
                    f->slot, f->consumer, f->desc, f->index, x->op, (int)x->dt,
                    x->steps, x->lanes);
  uint64_t off, len;
  piece(x, recv_seg(x, (uint32_t)f->desc), (uint32_t)f->index, &off, &len);
  if ((uint64_t)f->piece != off || f->len != len)
    return sl__fail(SL_ECOMM,
                    "collective %llu/%llu: step %d lane %d: %llu bytes at "
                    "%lld, expected %llu at %llu (sizes differ between "
                    "members)",
                    (unsigned long long)x->group, (unsigned long long)x->seq,
                    f->desc, f->index, (unsigned long long)f->len,
                    (long long)f->piece, (unsigned long long)len,
                    (unsigned long long)off);
  return SL_OK;
}

/* A chunk is in buf: reduce or store it, forward it, count it. */
static void take_chunk(sl__net_coll *nc, inst *x, uint32_t node,
                       const sl__dp_frame *f, const void *buf) {
  if (x->failed) return;
  if (x->op == OP_SHARED) {
    sl__nc_shared_take(nc, x, node, f, buf);
    return;
  }
  if (x->op == OP_TREE) {
    bool up = f->desc == TREE_UP;
    uint8_t *slot = up ? tree_kid_slot(x, (uint32_t)f->index) : x->base;
    if (f->len && buf != slot) memcpy(slot, buf, f->len);
    x->recv_done++;
    nc->stats.chunks_received++;
    if (!up)
      tree_down(nc, x);
    else if (++x->kids_in == x->kids)
      tree_up(nc, x);
    return;
  }
  if (is_direct(x)) {
    uint8_t *slot = direct_slot(x, (uint32_t)f->index);
    if (f->len && buf != slot) memcpy(slot, buf, f->len);
    x->recv_done++;
    nc->stats.chunks_received++;
    return;
  }
  uint32_t t = (uint32_t)f->desc, lane = (uint32_t)f->index;
  uint64_t off = (uint64_t)f->piece, len = f->len;
  if (!len) {
    /* an empty piece */
  } else if (t < x->rs_steps) {
    /* this member's values (src: base itself in place) with the chunk,
     * in one pass and in the same operand order either way (same bits) */
    sl__elem_reduce_into(x->dt, x->rop, x->base + off, x->src + off, buf,
                         (int64_t)(len / x->esize));
  } else if (buf != x->base + off)
    memcpy(x->base + off, buf, len);
  if (x->op == OP_REDUCE_SCATTER && t + 1 == x->rs_steps && len)
    memcpy(x->out + (off - x->seg_start[x->r] * x->esize), x->base + off, len);
  x->recv_done++;
  nc->stats.chunks_received++;
  if (t + 1 < x->steps)
    send_step(nc, x, t + 1, lane,
              t >= x->rs_steps && !(f->flags & SL__DP_FLAG_SHM)
                  ? &f->payload_crc
                  : NULL); /* a chunk from shared memory came without one */
}

/* Takes the staged chunks that are complete, in arrival order. */
static void drain(sl__net_coll *nc, inst *x) {
  while (x->sq && x->sq->complete) {
    staged *s = x->sq;
    x->sq = s->next;
    if (!x->sq) x->sq_tail = NULL;
    if (!x->failed) {
      if (check_chunk(nc, x, s->node, &s->f) != SL_OK) {
        sl__nc_fail(x, SL_ECOMM, sl_last_error());
        send_abort(nc, x);
      } else {
        take_chunk(nc, x, s->node, &s->f, s->buf);
      }
    }
    sl__free(s->buf);
    sl__free(s);
  }
}

static void call_done(const pending_done *pd) {
  if (!pd->fn) return;
  if (pd->st != SL_OK) sl__fail(pd->st, "%s", pd->msg);
  pd->fn(pd->arg, pd->st);
}

/* ---- the data plane's hooks (loop thread) ------------------------------- */

static sl_status hook_target(void *ctx, uint32_t node, const sl__dp_frame *f,
                             void **buf) {
  sl__net_coll *nc = ctx;
  sl_status st = SL_OK;
  void *in_place = *buf; /* the bytes, when in shared memory */
  *buf = NULL;
  if (f->desc == ABORT_STEP) {
    if (f->len > ABORT_MAX)
      return sl__fail(SL_ECOMM, "collective: an abort of %llu bytes",
                      (unsigned long long)f->len);
    *buf = f->len ? sl__malloc((size_t)f->len) : NULL;
    return f->len && !*buf ? SL_ENOMEM : SL_OK;
  }
  pthread_mutex_lock(&nc->lock);
  inst *x = find(nc, f->src, f->dst);
  if (!x) {
    x = sl__calloc(1, sizeof *x);
    if (!x) {
      st = SL_ENOMEM;
      goto out;
    }
    x->group = f->src;
    x->seq = f->dst;
    x->next = nc->insts;
    nc->insts = x;
  }
  if (x->finished || x->failed) goto out; /* dropped */
  if (!x->started || x->sq) {
    staged *s = sl__calloc(1, sizeof *s);
    void *b = f->len ? sl__malloc((size_t)f->len) : NULL;
    if (!s || (f->len && !b)) {
      sl__free(s);
      sl__free(b);
      st = SL_ENOMEM;
      goto out;
    }
    s->node = node;
    s->f = *f;
    s->buf = b;
    if (x->sq_tail)
      x->sq_tail->next = s;
    else
      x->sq = s;
    x->sq_tail = s;
    nc->stats.chunks_staged++;
    *buf = b;
    goto out;
  }
  if (check_chunk(nc, x, node, f) != SL_OK) {
    /* the members disagree: this collective fails on all of them, the
     * pair stays (the chunk is read and dropped) */
    sl__nc_fail(x, SL_ECOMM, sl_last_error());
    send_abort(nc, x);
    goto out;
  }
  uint32_t t = (uint32_t)f->desc;
  if (!f->len) goto out;
  if (x->op == OP_SHARED) {
    st = sl__nc_shared_target(nc, x, f, buf);
    goto out;
  }
  if (x->op == OP_TREE) {
    *buf = t == TREE_UP ? tree_kid_slot(x, (uint32_t)f->index) : x->base;
    goto out;
  }
  if (is_direct(x)) {
    *buf = direct_slot(x, (uint32_t)f->index);
    goto out;
  }
  /* a reduce-scatter step reduces from its chunk: in place when the bytes
   * sit in shared memory, else from the scratch they are read into */
  if (t < x->rs_steps)
    *buf = in_place ? in_place : x->scratch + (uint64_t)f->index * x->piece_max;
  else
    *buf = x->base + f->piece;
out:
  pthread_mutex_unlock(&nc->lock);
  return st;
}

static void hook_received(void *ctx, uint32_t node, const sl__dp_frame *f,
                          void *buf) {
  sl__net_coll *nc = ctx;
  pending_done pd = {0};
  if (f->desc == ABORT_STEP) {
    char msg[ABORT_MAX + 160];
    snprintf(msg, sizeof msg,
             "collective %llu/%llu: node %u gave up on it: %.*s",
             (unsigned long long)f->src, (unsigned long long)f->dst, node,
             (int)f->len, buf ? (const char *)buf : "");
    sl__free(buf);
    pthread_mutex_lock(&nc->lock);
    inst *x = find(nc, f->src, f->dst);
    if (!x && (x = sl__calloc(1, sizeof *x))) { /* not started here yet */
      x->group = f->src;
      x->seq = f->dst;
      x->next = nc->insts;
      nc->insts = x;
    }
    if (x && !x->finished) {
      sl__nc_fail(x, SL_ECOMM, msg);
      check_done(nc, x, &pd);
    }
    pthread_mutex_unlock(&nc->lock);
    call_done(&pd);
    return;
  }
  pthread_mutex_lock(&nc->lock);
  inst *x = find(nc, f->src, f->dst);
  if (x && !x->finished) {
    staged *s = x->sq;
    while (s && (s->complete || s->node != node))
      s = s->next;
    if (s) {
      s->complete = true;
      if (x->started) drain(nc, x);
    } else if (!x->failed) {
      take_chunk(nc, x, node, f, buf);
    }
    check_done(nc, x, &pd);
  }
  pthread_mutex_unlock(&nc->lock);
  call_done(&pd);
}

static void hook_sent(void *ctx, void *token, sl_status st) {
  sl__net_coll *nc = ctx;
  inst *x = token;
  pending_done pd = {0};
  pthread_mutex_lock(&nc->lock);
  x->send_done++;
  /* A dropped chunk means its pair failed: the failed hook, called after
   * the pair's queues are dropped, fails the instance with the reason. */
  if (st != SL_OK && x->right < nc->nnodes && nc->node_failed[x->right])
    sl__nc_fail(x, nc->node_st[x->right], nc->node_msg[x->right]);
  check_done(nc, x, &pd);
  pthread_mutex_unlock(&nc->lock);
  call_done(&pd);
}

#define ANY_NODE UINT32_MAX

/* With the lock held: fails the running instances `node` is a member of
 * (ANY_NODE: all), releases the lock, then calls their dones. */
static void fail_running_unlock(sl__net_coll *nc, uint32_t node, sl_status st,
                                const char *msg) {
  size_t cap = 0, npd = 0;
  for (inst *x = nc->insts; x; x = x->next)
    cap++;
  pending_done *pds = cap ? sl__calloc(cap, sizeof *pds) : NULL;
  for (inst *x = nc->insts, *next; x; x = next) {
    next = x->next; /* check_done may free x */
    if (!x->started || x->finished) continue;
    bool member = node == ANY_NODE;
    for (uint32_t i = 0; i < x->n && !member; i++)
      member = x->nodes[i] == node;
    if (!member) continue;
    sl__nc_fail(x, st, msg);
    pending_done pd = {0};
    if (check_done(nc, x, &pd) && pds) pds[npd++] = pd;
  }
  pthread_mutex_unlock(&nc->lock);
  for (size_t i = 0; i < npd; i++)
    call_done(&pds[i]);
  sl__free(pds);
}

/* Fails the instances `node` is a member of; `mark`: and later starts. */
static void fail_node(sl__net_coll *nc, uint32_t node, sl_status st,
                      const char *msg, bool mark) {
  if (node >= nc->nnodes) return;
  pthread_mutex_lock(&nc->lock);
  if (mark) {
    nc->node_failed[node] = true;
    nc->node_st[node] = st;
    snprintf(nc->node_msg[node], sizeof nc->node_msg[node], "%s", msg);
  }
  fail_running_unlock(nc, node, st, msg);
}

static void hook_failed(void *ctx, uint32_t node, sl_status st,
                        const char *msg) {
  fail_node(ctx, node, st, msg, true);
}

static void hook_closed(void *ctx, uint32_t node, const char *msg) {
  fail_node(ctx, node, SL_ECOMM, msg, false);
}

/* ---- create, destroy ---------------------------------------------------- */

/* A figure from the config, else from the environment variable, else 0. */
static sl_status figure(double given, const char *var, double *out) {
  *out = given;
  const char *e = getenv(var);
  if (given != 0 || !e || !e[0]) return SL_OK;
  char *end;
  *out = strtod(e, &end);
  if (*end)
    return sl__fail(SL_EINVAL, "%s='%s' is not a number", var, e);
  return SL_OK;
}

static sl_status configure_all_reduce(sl__net_coll *nc,
                                      const sl__net_coll_config *cfg) {
  const char *algo = cfg && cfg->all_reduce ? cfg->all_reduce
                                            : getenv("SLUICE_NET_COLL_ALGO");
  nc->ar_auto = !algo || !algo[0] || !strcmp(algo, "auto");
  if (!nc->ar_auto) {
    nc->ar_algo = SL__NET_ALGO_COUNT;
    for (int a = 0; a < SL__NET_ALGO_PAIRWISE; a++)
      if (!strcmp(algo, sl__net_algo_name((sl__net_algo)a)))
        nc->ar_algo = (sl__net_algo)a;
    if (nc->ar_algo == SL__NET_ALGO_COUNT)
      return sl__fail(SL_EINVAL,
                      "collectives: unknown all-reduce algorithm '%s' "
                      "(SLUICE_NET_COLL_ALGO: ring, exchange, tree or auto)",
                      algo);
  }
  nc->cost = sl_boxing_cost_default(SL_DEVICE_CPU);
  double us, gbps;
  SL_CHECK(figure(cfg ? cfg->latency_us : 0, "SLUICE_NET_COLL_LATENCY_US",
                  &us));
  SL_CHECK(figure(cfg ? cfg->bandwidth_gbps : 0,
                  "SLUICE_NET_COLL_BANDWIDTH_GBPS", &gbps));
  if (us != 0) nc->cost.inter_latency_us = us;
  if (gbps != 0) nc->cost.inter_bandwidth_gbps = gbps;
  return sl__cost_check(&nc->cost);
}

sl_status sl__net_coll_create(sl__dp_endpoint *ep,
                              const sl__net_coll_config *cfg,
                              sl__net_coll **out) {
  *out = NULL;
  sl__net_coll *nc = sl__calloc(1, sizeof *nc);
  if (!nc) return SL_ENOMEM;
  nc->ep = ep;
  nc->node = sl__dp_endpoint_node(ep);
  nc->nnodes = ep->cfg.nnodes;
  uint64_t chunk = cfg ? cfg->chunk_bytes : 0;
  if (!chunk) {
    const char *e = getenv("SLUICE_NET_COLL_CHUNK");
    chunk = e && e[0] ? strtoull(e, NULL, 0) : 0;
  }
  nc->chunk = chunk ? chunk : DEF_CHUNK;
  nc->shared_min =
      cfg && cfg->shared_min_bytes ? cfg->shared_min_bytes : DEF_SHARED_MIN;
  sl_status st = configure_all_reduce(nc, cfg);
  if (st != SL_OK) {
    sl__free(nc);
    return st;
  }
  nc->node_failed = sl__calloc(nc->nnodes, sizeof *nc->node_failed);
  nc->node_st = sl__calloc(nc->nnodes, sizeof *nc->node_st);
  nc->node_msg = sl__calloc(nc->nnodes, sizeof *nc->node_msg);
  if (!nc->node_failed || !nc->node_st || !nc->node_msg) {
    sl__free(nc->node_failed);
    sl__free(nc->node_st);
    sl__free(nc->node_msg);
    sl__free(nc);
    return SL_ENOMEM;
  }
  pthread_mutex_init(&nc->lock, NULL);
  static const sl__dp_coll_hooks hooks = {hook_target, hook_received, hook_sent,
                                          hook_failed, hook_closed};
  sl__dp_endpoint_set_coll(ep, &hooks, nc);
  *out = nc;
  return SL_OK;
}

void sl__net_coll_destroy(sl__net_coll *nc) {
  if (!nc) return;
  for (inst *x = nc->insts, *n; x; x = n) {
    n = x->next;
    free_inst(nc, x);
    sl__free(x);
  }
  for (int i = 0; i < NC_SPARES; i++)
    sl__free(nc->spare[i]);
  sl__free(nc->node_failed);
  sl__free(nc->node_st);
  sl__free(nc->node_msg);
  sl__free(nc->maps);
  pthread_mutex_destroy(&nc->lock);
  sl__free(nc);
}

void sl__net_coll_get_stats(sl__net_coll *nc, sl__net_coll_stats *out) {
  pthread_mutex_lock(&nc->lock);
  *out = nc->stats;
  pthread_mutex_unlock(&nc->lock);
}

void sl__net_coll_abort(sl__net_coll *nc, sl_status st, const char *msg) {
  pthread_mutex_lock(&nc->lock);
  if (!nc->aborted) {
    nc->aborted = true;
    nc->abort_st = st;
    snprintf(nc->abort_msg, sizeof nc->abort_msg, "%s", msg ? msg : "");
  }
  fail_running_unlock(nc, ANY_NODE, st, nc->abort_msg);
}

sl_status sl__net_coll_aborted(sl__net_coll *nc) {
  pthread_mutex_lock(&nc->lock);
  sl_status st = nc->aborted ? nc->abort_st : SL_OK;
  if (st != SL_OK) sl__fail(st, "%s", nc->abort_msg);
  pthread_mutex_unlock(&nc->lock);
  return st;
}

void sl__net_coll_reset(sl__net_coll *nc) {
  pthread_mutex_lock(&nc->lock);
  nc->aborted = false;
  for (uint32_t i = 0; i < nc->nnodes; i++)
    nc->node_failed[i] = false;
  for (inst **pp = &nc->insts; *pp;) {
    inst *x = *pp;
    /* An instance still running, or one whose staged chunk is being read
     * by the loop thread, stays. */
    bool busy = x->started && !x->finished;
    for (staged *q = x->sq; q && !busy; q = q->next)
      busy = !q->complete;
    if (busy) {
      pp = &x->next;
      continue;
    }
    *pp = x->next;
    free_inst(nc, x);
    sl__free(x);
  }
  pthread_mutex_unlock(&nc->lock);
}

/* ---- starting ----------------------------------------------------------- */

static bool dtype_ok(sl_dtype dt) { return (unsigned)dt < SL_DTYPE_COUNT; }

/* Checks the group and finds this node's place: SL_EINVAL. */
static sl_status check_group(const sl__net_coll *nc, const sl__net_group *g,
                             uint32_t *rank) {
  if (!g || !g->nodes || g->n == 0 || g->n > nc->nnodes)
    return sl__fail(SL_EINVAL, "collective: a group needs 1..%u nodes",
                    nc->nnodes);
  bool found = false;
  for (uint32_t i = 0; i < g->n; i++) {
    if (g->nodes[i] >= nc->nnodes)
      return sl__fail(SL_EINVAL, "collective group %llu: node %u of %u",
                      (unsigned long long)g->id, g->nodes[i], nc->nnodes);
    for (uint32_t j = 0; j < i; j++)
      if (g->nodes[j] == g->nodes[i])
        return sl__fail(SL_EINVAL, "collective group %llu: node %u twice",
                        (unsigned long long)g->id, g->nodes[i]);
    if (g->nodes[i] == nc->node) {
      found = true;
      *rank = i;
    }
  }
  if (!found)
    return sl__fail(SL_EINVAL, "collective group %llu: node %u is not in it",
                    (unsigned long long)g->id, nc->node);
  return SL_OK;
}

typedef struct start_args {
  int op;
  const sl__net_group *g;
  uint64_t seq;
  uint8_t *base;
  const uint8_t *src; /* all-reduce: this member's values (NULL: base) */
  const uint8_t *in;  /* reduce-scatter, all-gather */
  uint8_t *out;
  const size_t *counts;      /* NULL: count split evenly */
  const size_t *send_counts; /* all-to-all: in's parts */
  size_t count;
  sl_dtype dt;
  sl_reduce_op rop;
  sl__net_coll_done_fn done;
  void *arg;
} start_args;

static sl_status start(sl__net_coll *nc, const start_args *a) {
  uint32_t r = 0;
  sl_status st = check_group(nc, a->g, &r);
  if (st != SL_OK) return st;
  if (!dtype_ok(a->dt))
    return sl__fail(SL_EINVAL, "collective: dtype %d", (int)a->dt);
  if (a->op != OP_ALL_GATHER && (unsigned)a->rop > SL_REDUCE_MIN)
    return sl__fail(SL_EINVAL, "collective: reduce op %d", (int)a->rop);
  if (!a->done) return sl__fail(SL_EINVAL, "collective: no done callback");
  uint32_t n = a->g->n;
  size_t es = sl_dtype_size(a->dt);
  inst tmp = {0};
  tmp.nodes = sl__malloc(n * sizeof *tmp.nodes);
  tmp.seg_start = sl__malloc(n * sizeof *tmp.seg_start);
  tmp.seg_cnt = sl__malloc(n * sizeof *tmp.seg_cnt);
  if (!tmp.nodes || !tmp.seg_start || !tmp.seg_cnt) {
    st = SL_ENOMEM;
    goto fail;
  }
  if (a->op == OP_ALL_TO_ALL) {
    tmp.send_start = sl__malloc(n * sizeof *tmp.send_start);
    tmp.send_cnt = sl__malloc(n * sizeof *tmp.send_cnt);
    if (!tmp.send_start || !tmp.send_cnt) {
      st = SL_ENOMEM;
      goto fail;
    }
    uint64_t off = 0;
    for (uint32_t k = 0; k < n; k++) {
      tmp.send_start[k] = off;
      tmp.send_cnt[k] = a->send_counts[k];
      off += a->send_counts[k];
    }
    if (a->send_counts[r] != a->counts[r]) {
      st = sl__fail(SL_EINVAL,
                    "collective %llu/%llu: all-to-all keeps %zu elements "
                    "of its own but receives %zu from itself",
                    (unsigned long long)a->g->id, (unsigned long long)a->seq,
                    a->send_counts[r], a->counts[r]);
      goto fail;
    }
  }
  memcpy(tmp.nodes, a->g->nodes, n * sizeof *tmp.nodes);
  uint64_t total = 0, seg_max = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint64_t c = a->counts ? a->counts[k]
                           : (uint64_t)a->count * (k + 1) / n -
                                 (uint64_t)a->count * k / n;
    tmp.seg_start[k] = total;
    tmp.seg_cnt[k] = c;
    total += c;
    seg_max = SL_MAX(seg_max, c * es);
  }
  tmp.op = a->op;
  tmp.dt = a->dt;
  tmp.rop = a->rop;
  tmp.esize = es;
  tmp.n = n;
  tmp.r = r;
  tmp.right = a->g->nodes[(r + 1) % n];
  tmp.left = a->g->nodes[(r + n - 1) % n];
  tmp.lanes = (uint32_t)SL_MAX(1, (seg_max + nc->chunk - 1) / nc->chunk);
  tmp.piece_max = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint64_t c = tmp.seg_cnt[k];
    /* the largest piece: ceil(c / lanes) elements */
    tmp.piece_max = SL_MAX(tmp.piece_max, (c + tmp.lanes - 1) / tmp.lanes * es);
  }
  tmp.rs_steps = a->op == OP_ALL_GATHER ? 0 : n - 1;
  tmp.steps = a->op == OP_ALL_REDUCE ? 2 * (n - 1) : n - 1;
  tmp.total_bytes = total * es;
  if (a->op == OP_EXCHANGE || a->op == OP_ALL_TO_ALL || a->op == OP_TREE ||
      a->op == OP_SHARED) {
    tmp.lanes = 1;
    tmp.rs_steps = 0;
    tmp.steps = n > 1;
    /* the scratch: the exchange's one slot per member, the tree's one per
     * child */
    tmp.kids = a->op == OP_TREE && n > 1 ? tree_kids(&tmp, r) : 0;
    tmp.piece_max = a->op == OP_EXCHANGE ? tmp.total_bytes * n
                    : a->op == OP_TREE   ? tmp.total_bytes * tmp.kids
                                         : 0; /* shared: when needed */
  }
  if (a->op == OP_ALL_TO_ALL) {
    uint64_t pb = tmp.seg_cnt[r] * es;
    tmp.in = a->in;
    if (pb)
      memcpy(a->out + tmp.seg_start[r] * es, a->in + tmp.send_start[r] * es,
             pb);
  }
  tmp.done = a->done;
  tmp.arg = a->arg;
  tmp.out = a->out;
  tmp.base = a->base;
  tmp.src = a->src ? a->src : a->base;
  /* one member: the reduction is its own values */
  if (n == 1 && tmp.src != tmp.base && total)
    memcpy(tmp.base, tmp.src, total * es);
  if (a->op == OP_REDUCE_SCATTER) {
    if (n == 1) {
      if (total) memcpy(a->out, a->in, total * es);
    } else if (total) {
      tmp.work = sl__malloc(total * es);
      if (!tmp.work) {
        st = SL_ENOMEM;
        goto fail;
      }
      memcpy(tmp.work, a->in, total * es);
    }
    tmp.base = tmp.work;
    tmp.src = tmp.work;
  } else if (a->op == OP_ALL_GATHER && tmp.seg_cnt[r]) {
    uint8_t *mine = a->out + tmp.seg_start[r] * es;
    if (mine != a->in) memmove(mine, a->in, tmp.seg_cnt[r] * es);
  }
  tmp.recv_total = (uint64_t)tmp.steps * tmp.lanes;
  if (a->op == OP_EXCHANGE || a->op == OP_ALL_TO_ALL) tmp.recv_total = n - 1;
  if (a->op == OP_TREE) tmp.recv_total = n > 1 ? tmp.kids + (r != 0) : 0;
  if (a->op == OP_SHARED && (st = sl__nc_shared_init(&tmp)) != SL_OK) goto fail;
  pending_done pd = {0};
  pthread_mutex_lock(&nc->lock);
  if (nc->aborted) {
    st = sl__fail(nc->abort_st, "%s", nc->abort_msg);
    pthread_mutex_unlock(&nc->lock);
    goto fail;
  }
  for (uint32_t i = 0; i < n; i++)
    if (nc->node_failed[tmp.nodes[i]] && tmp.nodes[i] != nc->node) {
      st =
          sl__fail(nc->node_st[tmp.nodes[i]], "%s", nc->node_msg[tmp.nodes[i]]);
      pthread_mutex_unlock(&nc->lock);
      goto fail;
    }
  inst *x = find(nc, a->g->id, a->seq);
  if (x && x->started) {
    pthread_mutex_unlock(&nc->lock);
    st = sl__fail(SL_EINVAL, "collective %llu/%llu: started twice",
                  (unsigned long long)a->g->id, (unsigned long long)a->seq);
    goto fail;
  }
  if ((tmp.rs_steps || a->op == OP_EXCHANGE || a->op == OP_TREE) && tmp.steps &&
      sl__nc_scratch(nc, &tmp, tmp.lanes * tmp.piece_max) != SL_OK) {
    pthread_mutex_unlock(&nc->lock);
    st = SL_ENOMEM;
    goto fail;
  }
  if (!x) {
    x = sl__calloc(1, sizeof *x);
    if (!x) {
      pthread_mutex_unlock(&nc->lock);
      st = SL_ENOMEM;
      goto fail;
    }
    x->next = nc->insts;
    nc->insts = x;
  }
  bool pre_failed = x->failed;
  sl_status pre_st = x->fail_st;
  char pre_msg[sizeof x->fail_msg];
  memcpy(pre_msg, x->fail_msg, sizeof pre_msg);
  tmp.next = x->next;
  tmp.sq = x->sq;
  tmp.sq_tail = x->sq_tail;
  tmp.group = a->g->id;
  tmp.seq = a->seq;
  tmp.started = true;
  *x = tmp;
  tmp = (inst){0};
  nc->stats.started++;
  nc->stats.by_algo[x->op == OP_EXCHANGE     ? SL__NET_ALGO_EXCHANGE
                    : x->op == OP_TREE       ? SL__NET_ALGO_TREE
                    : x->op == OP_ALL_TO_ALL ? SL__NET_ALGO_PAIRWISE
                    : x->op == OP_SHARED     ? SL__NET_ALGO_SHARED
                                             : SL__NET_ALGO_RING]++;
  if (pre_failed) sl__nc_fail(x, pre_st, pre_msg); /* another member gave up */
  if (x->op == OP_TREE) {
    if (x->steps && !x->kids) tree_up(nc, x); /* a leaf sends at once */
  } else if (x->op == OP_SHARED) {
    sl__nc_shared_start(nc, x);
  } else if (is_direct(x)) {
    for (uint32_t k = 0; k < x->n && x->steps; k++)
      if (k != x->r) send_exchange(nc, x, k);
  } else {
    for (uint32_t lane = 0; lane < x->lanes && x->steps; lane++)
      send_step(nc, x, 0, lane, NULL);
  }
  drain(nc, x);
  check_done(nc, x, &pd);
  pthread_mutex_unlock(&nc->lock);
  call_done(&pd);
  return SL_OK;
fail:
  sl__free(tmp.nodes);
  sl__free(tmp.seg_start);
  sl__free(tmp.seg_cnt);
  sl__free(tmp.send_start);
  sl__free(tmp.send_cnt);
  sl__free(tmp.phase_in);
  sl__free((void *)tmp.lent);
  sl__free(tmp.work);
  sl__free(tmp.scratch);
  return st;
}

const char *sl__net_algo_name(sl__net_algo a) {
  switch (a) {
  case SL__NET_ALGO_RING: return "ring";
  case SL__NET_ALGO_EXCHANGE: return "exchange";
  case SL__NET_ALGO_TREE: return "tree";
  case SL__NET_ALGO_PAIRWISE: return "pairwise";
  case SL__NET_ALGO_SHARED: return "shared";
  default: return "?";
  }
}

sl__net_algo sl__net_all_reduce_algo(const sl__net_coll *nc, uint32_t n,
                                     size_t count, sl_dtype dt) {
  if (n <= 1) return SL__NET_ALGO_RING; /* nothing moves */
  if (!nc->ar_auto) return nc->ar_algo;
  size_t es = (unsigned)dt < SL_DTYPE_COUNT ? sl_dtype_size(dt) : 1;
  return (sl__net_algo)sl__cost_all_reduce_best(&nc->cost, (int)n,
                                                (int64_t)(count * es), NULL);
}

sl_status sl__net_all_reduce(sl__net_coll *nc, const sl__net_group *g,
                             uint64_t seq, void *buf, size_t count, sl_dtype dt,
                             sl_reduce_op op, sl__net_coll_done_fn done,
                             void *arg) {
  return sl__net_all_reduce_into(nc, g, seq, buf, buf, count, dt, op, done,
                                 arg);
}

sl_status sl__net_all_reduce_into(sl__net_coll *nc, const sl__net_group *g,
                                  uint64_t seq, const void *in, void *out,
                                  size_t count, sl_dtype dt, sl_reduce_op op,
                                  sl__net_coll_done_fn done, void *arg) {
  if (count && (!in || !out))
    return sl__fail(SL_EINVAL, "collective: no buffer");
  size_t es = (unsigned)dt < SL_DTYPE_COUNT ? sl_dtype_size(dt) : 1;
  if (count && in != out) {
    uintptr_t a = (uintptr_t)in, b = (uintptr_t)out;
    if (a < b + count * es && b < a + count * es)
      return sl__fail(SL_EINVAL, "collective: in and out overlap");
  }
  sl__net_algo algo =
      g ? sl__net_all_reduce_algo(nc, g->n, count, dt) : SL__NET_ALGO_RING;
  /* through the shared registers when the job's pools allow it */
  pthread_mutex_lock(&nc->lock);
  bool shared = g && sl__nc_shared_fits(nc, g, (uint64_t)count * es);
  pthread_mutex_unlock(&nc->lock);
  int op_code = shared                          ? OP_SHARED
                : algo == SL__NET_ALGO_EXCHANGE ? OP_EXCHANGE
                : algo == SL__NET_ALGO_TREE     ? OP_TREE
                                                : OP_ALL_REDUCE;
  start_args a = {.op = op_code,
                  .g = g,
                  .seq = seq,
                  .base = out,
                  .src = in,
                  .count = count,
                  .dt = dt,
                  .rop = op,
                  .done = done,
                  .arg = arg};
  return start(nc, &a);
}

static size_t sum_counts(const size_t *counts, uint32_t n) {
  size_t t = 0;
  for (uint32_t i = 0; i < n; i++)
    t += counts[i];
  return t;
}

sl_status sl__net_all_gather(sl__net_coll *nc, const sl__net_group *g,
                             uint64_t seq, const void *in, void *out,
                             const size_t *counts, sl_dtype dt,
                             sl__net_coll_done_fn done, void *arg) {
  if (!g || !counts)
    return sl__fail(SL_EINVAL, "collective: all-gather needs counts");
  if (sum_counts(counts, g->n) && !out)
    return sl__fail(SL_EINVAL, "collective: no output buffer");
  start_args a = {.op = OP_ALL_GATHER,
                  .g = g,
                  .seq = seq,
                  .base = out,
                  .in = in,
                  .out = out,
                  .counts = counts,
                  .dt = dt,
                  .done = done,
                  .arg = arg};
  return start(nc, &a);
}

sl_status sl__net_reduce_scatter(sl__net_coll *nc, const sl__net_group *g,
                                 uint64_t seq, const void *in, void *out,
                                 const size_t *counts, sl_dtype dt,
                                 sl_reduce_op op, sl__net_coll_done_fn done,
                                 void *arg) {
  if (!g || !counts)
    return sl__fail(SL_EINVAL, "collective: reduce-scatter needs counts");
  if (sum_counts(counts, g->n) && !in)
    return sl__fail(SL_EINVAL, "collective: no input buffer");
  start_args a = {.op = OP_REDUCE_SCATTER,
                  .g = g,
                  .seq = seq,
                  .in = in,
                  .out = out,
                  .counts = counts,
                  .dt = dt,
                  .rop = op,
                  .done = done,
                  .arg = arg};
  return start(nc, &a);
}

sl_status sl__net_all_to_allv(sl__net_coll *nc, const sl__net_group *g,
                              uint64_t seq, const void *in,
                              const size_t *send_counts, void *out,
                              const size_t *recv_counts, sl_dtype dt,
                              sl__net_coll_done_fn done, void *arg) {
  if (!g || g->n == 0 || !send_counts || !recv_counts)
    return sl__fail(SL_EINVAL, "collective: all-to-all needs a group and "
                               "counts");
  if ((sum_counts(send_counts, g->n) && !in) ||
      (sum_counts(recv_counts, g->n) && !out))
    return sl__fail(SL_EINVAL, "collective: no buffer");
  start_args a = {.op = OP_ALL_TO_ALL,
                  .g = g,
                  .seq = seq,
                  .base = out,
                  .in = in,
                  .out = out,
                  .counts = recv_counts,
                  .send_counts = send_counts,
                  .dt = dt,
                  .done = done,
                  .arg = arg};
  return start(nc, &a);
}

sl_status sl__net_all_to_all(sl__net_coll *nc, const sl__net_group *g,
                             uint64_t seq, const void *in, void *out,
                             size_t count, sl_dtype dt,
                             sl__net_coll_done_fn done, void *arg) {
  if (!g || g->n == 0 || g->n > nc->nnodes)
    return sl__fail(SL_EINVAL, "collective: all-to-all needs a group");
  size_t *counts = sl__malloc(g->n * sizeof *counts);
  if (!counts) return SL_ENOMEM;
  for (uint32_t k = 0; k < g->n; k++)
    counts[k] = count;
  sl_status st =
      sl__net_all_to_allv(nc, g, seq, in, counts, out, counts, dt, done, arg);
  sl__free(counts);
  return st;
}
