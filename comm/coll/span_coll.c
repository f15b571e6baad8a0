/* sluice comm — boxing collectives across nodes (span_coll.h says what;
 * this file says how).
 *
 * Which bytes cross: the in-process tasks (coll.c) say which box of which
 * member's input each output is made from. For a receiving node, `needs`
 * lists those boxes for its members' tasks whose source member lives
 * elsewhere, in a fixed order (local member, then source member or
 * piece), without repeats; every node computes the same lists, so a
 * sender knows what to pack for each receiver and the receiver where each
 * packed box goes, and nothing but boxes travels. */
#include <stdio.h>
#include <string.h>

#include <pthread.h>

#include "coll_int.h"
#include "sbp_int.h"
#include "span_coll.h"

#define ALIGN 64u /* packed boxes start aligned for typed access */

/* One box of member `src`'s input (in its own coordinates) that a member
 * on node `to` reads. */
typedef struct need {
  int src;
  uint32_t to; /* index into nodes */
  int64_t start[SL_MAX_DIMS], extent[SL_MAX_DIMS];
  size_t off; /* in the packed buffer of its (sender, receiver) pair */
} need;

typedef struct waiting {
  sl__coll_done_fn done;
  void *arg;
} waiting;

struct sl__span {
  sl__coll *geo;
  int n; /* geo's members (geo may be freed before the span) */
  sl__net_coll *nc;
  uint64_t id;
  void (*tell_waiting)(void *arg, bool on); /* the desc's waiting */
  uint32_t *node_of; /* per member: index into nodes */
  uint32_t *nodes, nn, self;
  sl__net_group group;
  int *local, n_local;
  /* all-reduce */
  size_t count;
  /* the others: what this node sends (to every node) and receives */
  need *send, *recv;
  int n_send, n_recv;
  size_t *send_counts, *recv_counts; /* bytes per node, aligned parts */
  uint8_t *send_buf, *recv_buf;
  void **remote_in; /* per member: a copy of a remote member's input */

  pthread_mutex_t lock;
  int arrived;        /* local members in this round */
  bool running;       /* between nodes */
  sl_status aborted;  /* SL_OK while not */
  uint64_t seq;       /* rounds started */
  waiting *wait;      /* per local slot */
  waiting *wait_copy; /* the callbacks being called, for many members
                         (a round's are all called before the next one
                         can end, so one copy suffices) */
  bool *present;
  int *slot_of; /* member -> local slot, -1 */
};

static int64_t box_numel(int nd, const int64_t *ext) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++)
    n *= ext[d];
  return n;
}

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Appends the box unless the same one of the same source for the same
 * node is listed. */
static sl_status add_need(need **v, int *n, int *cap, int src, uint32_t to,
                          int nd, const int64_t *start, const int64_t *ext) {
  if (box_numel(nd, ext) == 0) return SL_OK;
  for (int i = 0; i < *n; i++) {
    need *q = &(*v)[i];
    if (q->src == src && q->to == to &&
        !memcmp(q->start, start, (size_t)nd * sizeof *start) &&
        !memcmp(q->extent, ext, (size_t)nd * sizeof *ext))
      return SL_OK;
  }
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 16;
    need *g = sl__realloc(*v, (size_t)nc * sizeof *g);
    if (!g) return SL_ENOMEM;
    *v = g;
    *cap = nc;
  }
  need *q = &(*v)[(*n)++];
  memset(q, 0, sizeof *q);
  q->src = src;
  q->to = to;
  memcpy(q->start, start, (size_t)nd * sizeof *start);
  memcpy(q->extent, ext, (size_t)nd * sizeof *ext);
  return SL_OK;
}

/* The boxes member k's task reads from member j's input (coll.c's tasks). */
static sl_status needs_of_member(const sl__span *x, int k, need **v, int *n,
                                 int *cap) {
  const sl__coll *g = x->geo;
  const coll_member *m = &g->m[k];
  int nd = g->ndim;
  uint32_t to = x->node_of[k];
  int64_t st[SL_MAX_DIMS], ext[SL_MAX_DIMS];
  if (g->op == SL__COLL_EXCHANGE) {
    for (int32_t i = 0; i < m->n_pieces; i++) {
      const sl__coll_piece *p = &g->by_dst[m->first_piece + i];
      if (x->node_of[p->src] == to) continue;
      const sl_slice *ib = &g->in_slice[p->src];
      for (int d = 0; d < nd; d++) {
        st[d] = p->slice.start[d] - ib->start[d];
        ext[d] = p->slice.extent[d];
      }
      SL_CHECK(add_need(v, n, cap, p->src, to, nd, st, ext));
    }
    return SL_OK;
  }
  for (int j = 0; j < g->n; j++) {
    if (x->node_of[j] == to) continue;
    const coll_member *s = &g->m[j];
    memset(st, 0, sizeof st);
    memcpy(ext, s->in_dims, sizeof ext);
    switch (g->op) {
    case SL__COLL_REDUCE_SCATTER:
      st[g->out_axis] = m->part_start;
      ext[g->out_axis] = m->part_extent;
      break;
    case SL__COLL_ALL_TO_ALL:
      memcpy(ext, m->out_dims, sizeof ext);
      ext[g->in_axis] = s->in_dims[g->in_axis];
      st[g->out_axis] = m->part_start;
      break;
    case SL__COLL_BROADCAST:
      if (j != g->root) continue;
      break;
    default: break; /* all-gather: the whole input */
    }
    SL_CHECK(add_need(v, n, cap, j, to, nd, st, ext));
  }
  return SL_OK;
}

/* Every node's needs, in (receiving node, member, source) order. */
static sl_status plan_transfers(sl__span *x) {
  const sl__coll *g = x->geo;
  need *all = NULL;
  int n = 0, cap = 0;
  sl_status st = SL_OK;
  for (int k = 0; k < g->n && st == SL_OK; k++)
    st = needs_of_member(x, k, &all, &n, &cap);
  if (st != SL_OK) goto out;
  x->send = sl__calloc((size_t)n + 1, sizeof *x->send);
  x->recv = sl__calloc((size_t)n + 1, sizeof *x->recv);
  x->send_counts = sl__calloc(x->nn, sizeof *x->send_counts);
  x->recv_counts = sl__calloc(x->nn, sizeof *x->recv_counts);
  x->remote_in = sl__calloc((size_t)g->n, sizeof *x->remote_in);
  if (!x->send || !x->recv || !x->send_counts || !x->recv_counts ||
      !x->remote_in) {
    st = SL_ENOMEM;
    goto out;
  }
  size_t *sent_to = x->send_counts, *recv_from = x->recv_counts;
  for (int i = 0; i < n; i++) {
    need q = all[i];
    uint32_t from = x->node_of[q.src];
    size_t bytes = align_up((size_t)box_numel(g->ndim, q.extent) * g->es);
    if (from == x->self) {
      q.off = sent_to[q.to];
      sent_to[q.to] += bytes;
      x->send[x->n_send++] = q;
    } else if (q.to == x->self) {
      q.off = recv_from[from];
      recv_from[from] += bytes;
      x->recv[x->n_recv++] = q;
      if (!x->remote_in[q.src] && g->m[q.src].in_bytes) {
        x->remote_in[q.src] = sl__malloc(g->m[q.src].in_bytes + ALIGN);
        if (!x->remote_in[q.src]) {
          st = SL_ENOMEM;
          goto out;
        }
      }
    }
  }
  /* The packed buffers: one part per node, in node order. */
  size_t ts = 0, tr = 0;
  for (uint32_t j = 0; j < x->nn; j++) {
    ts += sent_to[j];
    tr += recv_from[j];
  }
  for (int i = 0; i < x->n_send; i++) {
    size_t base = 0;
    for (uint32_t j = 0; j < x->send[i].to; j++)
      base += sent_to[j];
    x->send[i].off += base;
  }
  for (int i = 0; i < x->n_recv; i++) {
    size_t base = 0;
    uint32_t from = x->node_of[x->recv[i].src];
    for (uint32_t j = 0; j < from; j++)
      base += recv_from[j];
    x->recv[i].off += base;
  }
  x->send_buf = ts ? sl__malloc(ts) : NULL;
  x->recv_buf = tr ? sl__malloc(tr) : NULL;
  if ((ts && !x->send_buf) || (tr && !x->recv_buf)) st = SL_ENOMEM;
out:
  sl__free(all);
  return st;
}

sl_status sl__span_create(const sl__span_desc *d, sl__span **out) {
  *out = NULL;
  if (!d || !d->geo || !d->member_node || !d->nc)
    return sl__fail(SL_EINVAL, "span collective: NULL argument");
  const sl__coll *g = d->geo;
  sl__span *x;
  if (SL_NEW(x) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&x->lock, NULL);
  x->geo = d->geo;
  x->n = g->n;
  x->nc = d->nc;
  x->id = d->id;
  x->tell_waiting = d->waiting;
  x->aborted = SL_OK;
  sl_status st = SL_OK;
  x->node_of = sl__calloc((size_t)g->n, sizeof *x->node_of);
  x->nodes = sl__calloc((size_t)g->n, sizeof *x->nodes);
  x->local = sl__calloc((size_t)g->n, sizeof *x->local);
  x->slot_of = sl__calloc((size_t)g->n, sizeof *x->slot_of);
  x->wait = sl__calloc((size_t)g->n, sizeof *x->wait);
  x->present = sl__calloc((size_t)g->n, sizeof *x->present);
  x->wait_copy = sl__calloc((size_t)g->n, sizeof *x->wait_copy);
  if (!x->node_of || !x->nodes || !x->local || !x->slot_of || !x->wait ||
      !x->present || !x->wait_copy) {
    st = SL_ENOMEM;
    goto fail;
  }
  /* Nodes in order of their first member; the ring follows it. */
  bool self_found = false;
  for (int k = 0; k < g->n; k++) {
    uint32_t node = d->member_node[k], i = 0;
    while (i < x->nn && x->nodes[i] != node)
      i++;
    if (i == x->nn) x->nodes[x->nn++] = node;
    x->node_of[k] = i;
    x->slot_of[k] = -1;
    if (node == d->self) {
      self_found = true;
      x->self = i;
      x->slot_of[k] = x->n_local;
      x->local[x->n_local++] = k;
    }
  }
  if (!self_found) {
    st = sl__fail(SL_EINVAL, "collective '%s': node %u has no member of it",
                  g->name, d->self);
    goto fail;
  }
  x->group.id = d->id;
  x->group.nodes = x->nodes;
  x->group.n = x->nn;
  if (g->op == SL__COLL_ALL_REDUCE) {
    x->count = (size_t)box_numel(g->ndim, g->block);
  } else {
    st = plan_transfers(x);
    if (st != SL_OK) goto fail;
  }
  *out = x;
  return SL_OK;
fail:
  sl__span_destroy(x);
  return st;
}

void sl__span_destroy(sl__span *x) {
  if (!x) return;
  for (int k = 0; x->remote_in && k < x->n; k++)
    sl__free(x->remote_in[k]);
  sl__free(x->remote_in);
  sl__free(x->node_of);
  sl__free(x->nodes);
  sl__free(x->local);
  sl__free(x->slot_of);
  sl__free(x->wait);
  sl__free(x->wait_copy);
  sl__free(x->present);
  sl__free(x->send);
  sl__free(x->recv);
  sl__free(x->send_counts);
  sl__free(x->recv_counts);
  sl__free(x->send_buf);
  sl__free(x->recv_buf);
  pthread_mutex_destroy(&x->lock);
  sl__free(x);
}

/* Takes the round's callbacks out (under lock) and readies the next. */
static int take_waiting(sl__span *x, waiting *out) {
  int n = 0;
  for (int i = 0; i < x->n_local; i++) {
    if (!x->present[i]) continue;
    out[n++] = x->wait[i];
    x->present[i] = false;
  }
  x->arrived = 0;
  x->running = false;
  return n;
}

static void call_all(const waiting *w, int n, sl_status st) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", st == SL_OK ? "" : sl_last_error());
  for (int i = 0; i < n; i++) {
    if (st != SL_OK) sl__fail(st, "%s", msg);
    w[i].done(w[i].arg, st);
  }
}

/* The callbacks are called from a copy: calling one may start the next
 * round on this thread. */
#define STACK_WAITING 16

static void finish(sl__span *x, sl_status st) {
  waiting stack[STACK_WAITING];
  waiting *w = x->n_local <= STACK_WAITING ? stack : x->wait_copy;
  pthread_mutex_lock(&x->lock);
  int n = take_waiting(x, w);
  pthread_mutex_unlock(&x->lock);
  call_all(w, n, st);
}

/* What arrived from the other nodes goes into the remote inputs' copies;
 * then each local member's task, exactly as in one process. */
static void complete_round(sl__span *x) {
  sl__coll *g = x->geo;
  if (g->op == SL__COLL_ALL_REDUCE) {
    size_t bytes = x->count * g->es;
    const void *res = g->m[x->local[0]].out;
    for (int i = 1; i < x->n_local; i++)
      memcpy(g->m[x->local[i]].out, res, bytes);
    return;
  }
  int64_t zero[SL_MAX_DIMS] = {0};
  for (int i = 0; i < x->n_recv; i++) {
    const need *q = &x->recv[i];
    sl__box_move(g->dtype, g->ndim, x->remote_in[q->src], g->m[q->src].in_dims,
                 q->start, x->recv_buf + q->off, q->extent, zero, q->extent,
                 false, SL_REDUCE_SUM);
  }
  for (int k = 0; k < g->n; k++)
    if (x->slot_of[k] < 0) g->m[k].in = x->remote_in[k];
  for (int i = 0; i < x->n_local; i++)
    sl__coll_run_task(g, x->local[i]);
}

static void net_done(void *arg, sl_status st) {
  sl__span *x = arg;
  /* The round is local work again until its members are done (a failed
   * one just completes them: what they said stays for the hang report). */
  if (st == SL_OK && x->tell_waiting) {
    pthread_mutex_lock(&x->lock);
    for (int i = 0; i < x->n_local; i++)
      if (x->present[i]) x->tell_waiting(x->wait[i].arg, false);
    pthread_mutex_unlock(&x->lock);
  }
  if (st == SL_OK) complete_round(x);
  finish(x, st);
}

/* Every local member is here: the local half, then the nodes. */
static void start_round(sl__span *x, uint64_t seq) {
  sl__coll *g = x->geo;
  sl_status st;
  if (g->op == SL__COLL_ALL_REDUCE) {
    if (!x->count) {
      finish(x, SL_OK);
      return;
    }
    size_t bytes = x->count * g->es;
    uint8_t *buf = g->m[x->local[0]].out;
    const uint8_t *in = g->m[x->local[0]].in;
    uintptr_t a = (uintptr_t)in, b = (uintptr_t)buf;
    if (x->n_local == 1 && (a == b || a + bytes <= b || b + bytes <= a)) {
      /* one member here: the nodes reduce its input straight into its
       * output (no copy of the whole input first) */
      st = sl__net_all_reduce_into(x->nc, &x->group, seq, in, buf, x->count,
                                   g->dtype, g->reduce, net_done, x);
    } else {
      memcpy(buf, in, bytes);
      for (int i = 1; i < x->n_local; i++)
        sl__elem_reduce(g->dtype, g->reduce, buf, g->m[x->local[i]].in,
                        (int64_t)x->count);
      st = sl__net_all_reduce(x->nc, &x->group, seq, buf, x->count, g->dtype,
                              g->reduce, net_done, x);
    }
  } else {
    int64_t zero[SL_MAX_DIMS] = {0};
    for (int i = 0; i < x->n_send; i++) {
      const need *q = &x->send[i];
      sl__box_move(g->dtype, g->ndim, x->send_buf + q->off, q->extent, zero,
                   g->m[q->src].in, g->m[q->src].in_dims, q->start, q->extent,
                   false, SL_REDUCE_SUM);
    }
    st = sl__net_all_to_allv(x->nc, &x->group, seq, x->send_buf, x->send_counts,
                             x->recv_buf, x->recv_counts, SL_DTYPE_U8, net_done,
                             x);
  }
  if (st != SL_OK) {
    sl__fail_context(st, "collective '%s': ", g->name);
    finish(x, st);
  }
}

sl_status sl__span_arrive(sl__span *x, int member, const void *in,
                          size_t in_bytes, void *out, size_t out_bytes,
                          sl__coll_done_fn done, void *arg) {
  sl__coll *g = x->geo;
  if (member < 0 || member >= g->n || x->slot_of[member] < 0)
    return sl__fail(SL_EINVAL, "collective '%s': member %d is not on node %u",
                    g->name, member, x->nodes[x->self]);
  const coll_member *m = &g->m[member];
  if (in_bytes != m->in_bytes || out_bytes != m->out_bytes || !done)
    return sl__fail(SL_EINVAL,
                    "collective '%s': member %d hands in %zu and %zu bytes, "
                    "expected %zu and %zu",
                    g->name, member, in_bytes, out_bytes, m->in_bytes,
                    m->out_bytes);
  int slot = x->slot_of[member];
  pthread_mutex_lock(&x->lock);
  if (x->present[slot]) {
    pthread_mutex_unlock(&x->lock);
    return sl__fail(SL_EINVAL, "collective '%s': member %d arrived twice",
                    g->name, member);
  }
  sl_status ab = x->aborted;
  if (ab != SL_OK) {
    pthread_mutex_unlock(&x->lock);
    sl__fail(ab, "collective '%s': the job was aborted", g->name);
    done(arg, ab);
    return SL_OK;
  }
  g->m[member].in = in;
  g->m[member].out = out;
  x->wait[slot] = (waiting){done, arg};
  x->present[slot] = true;
  /* Waiting from now on, the last arriver too: once the local part is
   * done the round waits for the other nodes. Before the round can start,
   * so before done can be called. */
  if (x->tell_waiting) x->tell_waiting(arg, true);
  bool last = ++x->arrived == x->n_local;
  uint64_t seq = 0;
  if (last) {
    x->running = true;
    seq = x->seq++;
  }
  pthread_mutex_unlock(&x->lock);
  if (last) start_round(x, seq);
  return SL_OK;
}

void sl__span_abort(sl__span *x, sl_status st) {
  if (st == SL_OK) st = SL_EABORTED;
  waiting stack[STACK_WAITING];
  waiting *w = x->n_local <= STACK_WAITING ? stack : x->wait_copy;
  int n = 0;
  pthread_mutex_lock(&x->lock);
  if (x->aborted == SL_OK) x->aborted = st;
  if (!x->running) n = take_waiting(x, w);
  pthread_mutex_unlock(&x->lock);
  if (n) sl__fail(st, "collective '%s': the job was aborted", x->geo->name);
  call_all(w, n, st);
}
