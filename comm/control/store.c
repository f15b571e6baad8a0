/* The master's key-value store (blocking get) and named barriers. Runs on
 * the server's completion-queue thread only (master.c says why). */
#include <string.h>

#include "cp_int.h"

/* ---- the key-value table ----------------------------------------------- */

struct cp_kv_entry {
  char *key;
  uint8_t *value;
  size_t len;
  cp_kv_entry *next;
};

/* FNV-1a: keys are short names, chosen by trusted members. */
static uint64_t hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

void sl__cp_kv_init(cp_kv *t) { memset(t, 0, sizeof *t); }

void sl__cp_kv_free(cp_kv *t) {
  for (size_t b = 0; b < t->n_buckets; b++) {
    cp_kv_entry *e = t->buckets[b], *next;
    for (; e; e = next) {
      next = e->next;
      sl__free(e->key);
      sl__free(e->value);
      sl__free(e);
    }
  }
  sl__free(t->buckets);
  memset(t, 0, sizeof *t);
}

static cp_kv_entry *find(const cp_kv *t, const char *key) {
  if (!t->n_buckets) return NULL;
  for (cp_kv_entry *e = t->buckets[hash(key) % t->n_buckets]; e; e = e->next)
    if (strcmp(e->key, key) == 0) return e;
  return NULL;
}

const uint8_t *sl__cp_kv_find(const cp_kv *t, const char *key, size_t *len) {
  const cp_kv_entry *e = find(t, key);
  if (!e) return NULL;
  *len = e->len;
  return e->value;
}

static sl_status grow(cp_kv *t) {
  size_t n = t->n_buckets ? 2 * t->n_buckets : 16;
  cp_kv_entry **b = sl__calloc(n, sizeof *b);
  if (!b) return SL_ENOMEM;
  for (size_t i = 0; i < t->n_buckets; i++) {
    cp_kv_entry *e = t->buckets[i], *next;
    for (; e; e = next) {
      next = e->next;
      size_t k = hash(e->key) % n;
      e->next = b[k];
      b[k] = e;
    }
  }
  sl__free(t->buckets);
  t->buckets = b;
  t->n_buckets = n;
  return SL_OK;
}

sl_status sl__cp_kv_set(cp_kv *t, const char *key, const uint8_t *value,
                        size_t len) {
  uint8_t *copy = sl__malloc(len ? len : 1);
  if (!copy) return SL_ENOMEM;
  if (len) memcpy(copy, value, len);
  cp_kv_entry *e = find(t, key);
  if (e) {
    t->bytes -= e->len;
    sl__free(e->value);
  } else {
    if (t->count >= t->n_buckets && grow(t) != SL_OK) {
      sl__free(copy);
      return SL_ENOMEM;
    }
    if (SL_NEW(e) != SL_OK || !(e->key = sl__strdup(key))) {
      sl__free(e);
      sl__free(copy);
      return SL_ENOMEM;
    }
    size_t k = hash(key) % t->n_buckets;
    e->next = t->buckets[k];
    t->buckets[k] = e;
    t->count++;
  }
  e->value = copy;
  e->len = len;
  t->bytes += len;
  return SL_OK;
}

/* ---- KvPut, KvGet ------------------------------------------------------ */

void sl__cp_do_kv_put(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__KvPut *q = (const void *)c->body;
  if (sl__cp_kv_set(&m->kv, q->key, q->value.data, q->value.len) != SL_OK) {
    sl__cp_call_fail(c, SL_ENOMEM, "KvPut '%s': out of memory", q->key);
    return;
  }
  Sluice__Cp__Empty r = SLUICE__CP__EMPTY__INIT;
  sl__cp_call_reply(c, &r.base);
  sl__cp_wake(m, CP_WAIT_KV);
}

bool sl__cp_do_kv_get(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__KvGet *q = (const void *)c->body;
  size_t len;
  const uint8_t *v = sl__cp_kv_find(&m->kv, q->key, &len);
  if (!v) {
    if (q->wait) return false;
    sl__cp_call_fail(c, SL_ENOTFOUND, "KvGet: no key '%s'", q->key);
    return true;
  }
  Sluice__Cp__Value r = SLUICE__CP__VALUE__INIT;
  r.value.data = (uint8_t *)v;
  r.value.len = len;
  sl__cp_call_reply(c, &r.base);
  return true;
}

/* ---- barriers ---------------------------------------------------------- */

/* One round of a named barrier: which nodes have arrived. A completed round
 * is deleted at once (its waiters are answered then), so a name can be
 * used again; each round has an id of its own, which waiters remember. */
struct cp_barrier {
  char *name;
  uint64_t id;
  int arrived;
  bool *in; /* per rank */
  cp_barrier *next;
};

static cp_barrier *barrier_find(sl__cp_master *m, const char *name) {
  for (cp_barrier *b = m->barriers; b; b = b->next)
    if (strcmp(b->name, name) == 0) return b;
  return NULL;
}

static void barrier_remove(sl__cp_master *m, cp_barrier *b) {
  for (cp_barrier **p = &m->barriers; *p; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      break;
    }
  sl__free(b->name);
  sl__free(b->in);
  sl__free(b);
}

void sl__cp_barriers_free(sl__cp_master *m) {
  while (m->barriers)
    barrier_remove(m, m->barriers);
}

void sl__cp_do_barrier(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__BarrierRequest *q = (const void *)c->body;
  if (c->rank < 0) {
    sl__cp_call_fail(c, SL_EINVAL,
                     "Barrier '%s': only nodes take part in barriers", q->name);
    return;
  }
  /* A barrier cannot complete while a node is missing: say so now rather
   * than at the deadline. */
  for (int r = 0; r < m->nnodes; r++) {
    const cp_member *x = m->nodes[r];
    if (!x || x->state != SL__CP_MEMBER_LIVE) {
      sl__cp_call_fail(c, SL_ECOMM, "Barrier '%s': node %d is %s", q->name, r,
                       x ? sl__cp_member_state_name(x->state)
                         : "not connected");
      return;
    }
  }
  cp_barrier *b = barrier_find(m, q->name);
  if (!b) {
    if (SL_NEW(b) != SL_OK || !(b->name = sl__strdup(q->name)) ||
        !(b->in = sl__calloc((size_t)m->nnodes, sizeof *b->in))) {
      if (b) sl__free(b->name);
      sl__free(b);
      sl__cp_call_fail(c, SL_ENOMEM, "Barrier '%s': out of memory", q->name);
      return;
    }
    b->id = ++m->barrier_seq;
    b->next = m->barriers;
    m->barriers = b;
  }
  c->wait_gen = b->id;
  if (b->in[c->rank]) {
    /* The node arrives again: a retry after its deadline passed, whose
     * cancellation may not have reached us yet. The newer call takes the
     * older one's place. */
    for (sl__cp_call *o = m->waits[CP_WAIT_BARRIER]; o; o = o->wnext) {
      const Sluice__Cp__BarrierRequest *oq = (const void *)o->body;
      if (o->rank == c->rank && o->wait_gen == b->id &&
          strcmp(oq->name, q->name) == 0) {
        sl__cp_call_fail(o, SL_EABORTED,
                         "Barrier '%s': superseded by a newer arrival of "
                         "node %d",
                         q->name, c->rank);
        break;
      }
    }
    sl__cp_park(m, c, CP_WAIT_BARRIER);
    return;
  }
  b->in[c->rank] = true;
  b->arrived++;
  if (b->arrived < m->nnodes) {
    sl__cp_park(m, c, CP_WAIT_BARRIER);
    return;
  }
  barrier_remove(m, b);
  Sluice__Cp__Empty r = SLUICE__CP__EMPTY__INIT;
  sl__cp_call_reply(c, &r.base);
  sl__cp_wake(m, CP_WAIT_BARRIER);
}

bool sl__cp_try_barrier(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__BarrierRequest *q = (const void *)c->body;
  const cp_barrier *b = barrier_find(m, q->name);
  if (b && b->id == c->wait_gen) return false;
  Sluice__Cp__Empty r = SLUICE__CP__EMPTY__INIT;
  sl__cp_call_reply(c, &r.base);
  return true;
}

void sl__cp_barrier_cancel(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__BarrierRequest *q = (const void *)c->body;
  cp_barrier *b = barrier_find(m, q->name);
  if (!b || b->id != c->wait_gen || c->rank < 0 || !b->in[c->rank]) return;
  b->in[c->rank] = false;
  if (--b->arrived == 0) barrier_remove(m, b);
}

void sl__cp_store_member_gone(sl__cp_master *m, const cp_member *who,
                              const char *why) {
  if (who->role != SL__CP_NODE) return;
  /* No barrier can complete without the node: fail every waiter, naming
   * it, and forget the rounds so the names start afresh. */
  while (m->waits[CP_WAIT_BARRIER]) {
    sl__cp_call *c = m->waits[CP_WAIT_BARRIER];
    const Sluice__Cp__BarrierRequest *q = (const void *)c->body;
    sl__cp_call_fail(c, SL_ECOMM, "Barrier '%s': %s", q->name, why);
  }
  sl__cp_barriers_free(m);
}
