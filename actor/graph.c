/* Actor graphs: actors, register descriptors and edges, as a session builds
 * them from a node's plan (include/sluice/actor.h). */
#include <stdio.h>
#include <string.h>

#include "actor_int.h"

/* ---- a small map from uint64 to int32 -------------------------------------
 */

#define MAP_EMPTY UINT64_MAX

static size_t map_slot(const sl__u64map *m, uint64_t key) {
  size_t i = (size_t)sl__mix64(key) & (m->cap - 1);
  while (m->keys[i] != MAP_EMPTY && m->keys[i] != key)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int32_t map_get(const sl__u64map *m, uint64_t key) {
  if (m->cap == 0) return -1;
  size_t i = map_slot(m, key);
  return m->keys[i] == key ? m->vals[i] : -1;
}

/* Makes room for one more key, so the next map_set cannot fail. */
static sl_status map_reserve(sl__u64map *m) {
  if ((m->n + 1) * 2 > m->cap) {
    sl__u64map g = {0};
    g.cap = m->cap ? m->cap * 2 : 64;
    g.keys = sl__reallocarray(NULL, g.cap, sizeof *g.keys);
    g.vals = sl__reallocarray(NULL, g.cap, sizeof *g.vals);
    if (!g.keys || !g.vals) {
      sl__free(g.keys);
      sl__free(g.vals);
      return SL_ENOMEM;
    }
    for (size_t i = 0; i < g.cap; i++)
      g.keys[i] = MAP_EMPTY;
    for (size_t i = 0; i < m->cap; i++) {
      if (m->keys[i] == MAP_EMPTY) continue;
      size_t j = map_slot(&g, m->keys[i]);
      g.keys[j] = m->keys[i];
      g.vals[j] = m->vals[i];
      g.n++;
    }
    sl__free(m->keys);
    sl__free(m->vals);
    *m = g;
  }
  return SL_OK;
}

static void map_set(sl__u64map *m, uint64_t key, int32_t val) {
  size_t i = map_slot(m, key);
  if (m->keys[i] != key) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
}

static void map_free(sl__u64map *m) {
  sl__free(m->keys);
  sl__free(m->vals);
}

/* ---- plans ----------------------------------------------------------------
 */

sl_status sl_actor_graph_create(sl_actor_graph **out) {
  *out = NULL;
  sl_actor_graph *p;
  if (SL_NEW(p) != SL_OK) return SL_ENOMEM;
  if (sl__arena_create(0, &p->arena) != SL_OK) {
    sl__free(p);
    return SL_ENOMEM;
  }
  atomic_init(&p->frozen, 0);
  *out = p;
  return SL_OK;
}

void sl_actor_graph_destroy(sl_actor_graph *p) {
  if (!p) return;
  for (int32_t i = 0; i < p->n_actors; i++) {
    sl__free(p->actors[i].in);
    sl__free(p->actors[i].out);
  }
  for (int32_t i = 0; i < p->n_regsts; i++)
    sl__free(p->regsts[i].cons);
  sl__free(p->actors);
  sl__free(p->regsts);
  sl__free(p->blocks);
  map_free(&p->by_id);
  map_free(&p->next_index);
  sl__arena_destroy(p->arena);
  sl__free(p);
}

int32_t sl__plan_find(const sl_actor_graph *p, sl_actor_id id) {
  return map_get(&p->by_id, id);
}

sl_status sl_actor_graph_set_mark(sl_actor_graph *p, sl_actor_id a,
                                  const char *mark) {
  if (!p || !mark) return sl__fail(SL_EINVAL, "actor graph: NULL graph or mark");
  if (atomic_load(&p->frozen))
    return sl__fail(SL_ESTATE, "actor graph: a job was created from it already");
  int32_t i = sl__plan_find(p, a);
  if (i < 0)
    return sl__fail(SL_ENOTFOUND, "actor graph: no actor %llx to mark",
                    (unsigned long long)a);
  char *m = sl__arena_strdup(p->arena, mark);
  if (!m) return SL_ENOMEM;
  p->actors[i].mark = m;
  return SL_OK;
}

int32_t sl_actor_graph_actor_count(const sl_actor_graph *p) {
  return p->n_actors;
}
int32_t sl_actor_graph_regst_count(const sl_actor_graph *p) {
  return p->n_regsts;
}

const char *sl_actor_graph_actor_name(const sl_actor_graph *p, sl_actor_id id) {
  int32_t i = sl__plan_find(p, id);
  return i < 0 ? NULL : p->actors[i].d.name;
}

/* Grows *arr (of *cap elements of size sz) to hold n + 1. */
static sl_status grow(void **arr, int32_t *cap, int32_t n, size_t sz) {
  if (n < *cap) return SL_OK;
  int32_t c = *cap ? *cap * 2 : 4;
  void *q = sl__reallocarray(*arr, (size_t)c, sz);
  if (!q) return SL_ENOMEM;
  *arr = q;
  *cap = c;
  return SL_OK;
}

static sl_status check_frozen(const sl_actor_graph *p) {
  if (atomic_load(&p->frozen))
    return sl__fail(
        SL_ESTATE, "actor graph: cannot change an actor graph once a job was created from it");
  return SL_OK;
}

static const char *kind_name(sl_actor_kind k) {
  switch (k) {
  case SL_ACTOR_KERNEL: return "kernel";
  case SL_ACTOR_SOURCE: return "source";
  case SL_ACTOR_SINK: return "sink";
  case SL_ACTOR_REPEAT: return "repeat";
  case SL_ACTOR_ACCUMULATE: return "accumulate";
  case SL_ACTOR_PACK: return "pack";
  case SL_ACTOR_UNPACK: return "unpack";
  }
  return NULL;
}

/* index < 0: the next free one of its stream. */
static sl_status add_actor(sl_actor_graph *p, const sl_actor_desc *d,
                           int64_t index, bool proxy, sl_actor_id *out) {
  *out = 0;
  SL_CHECK(check_frozen(p));
  if (!d->name || !d->name[0])
    return sl__fail(SL_EINVAL, "actor graph: an actor needs a name");
  if (!kind_name(d->kind))
    return sl__fail(SL_EINVAL, "actor '%s': unknown kind %d", d->name,
                    (int)d->kind);
  if (d->node >= SL_ACTOR_MAX_NODES || d->device >= SL_ACTOR_MAX_DEVICES ||
      d->stream >= SL_ACTOR_MAX_STREAMS)
    return sl__fail(SL_EINVAL,
                    "actor '%s': node %u, device %u or stream %u out of range "
                    "(at most %u, %u, %u)",
                    d->name, d->node, d->device, d->stream,
                    SL_ACTOR_MAX_NODES - 1, SL_ACTOR_MAX_DEVICES - 1,
                    SL_ACTOR_MAX_STREAMS - 1);
  uint64_t skey = sl_actor_id_make(d->node, d->device, d->stream, 0);
  int32_t next = map_get(&p->next_index, skey);
  if (next < 0) next = 0;
  if (index < 0) index = next;
  if (index >= SL_ACTOR_MAX_INDEX - 1)
    return sl__fail(SL_EINVAL,
                    "actor '%s': stream %u of device %u on node %u "
                    "already has %u actors",
                    d->name, d->stream, d->device, d->node,
                    SL_ACTOR_MAX_INDEX - 1);
  if (p->n_actors == INT32_MAX)
    return sl__fail(SL_EINVAL, "actor graph: too many actors");
  SL_CHECK(grow((void **)&p->actors, &p->cap_actors, p->n_actors,
                sizeof *p->actors));
  char *name = sl__arena_strdup(p->arena, d->name);
  if (!name) return SL_ENOMEM;
  sl_actor_id id =
      sl_actor_id_make(d->node, d->device, d->stream, (uint32_t)index);
  if (map_get(&p->by_id, id) >= 0)
    return sl__fail(SL_EINVAL,
                    "actor '%s': index %lld of stream %u of device %u on node "
                    "%u is taken",
                    d->name, (long long)index, d->stream, d->device, d->node);
  SL_CHECK(map_reserve(&p->next_index));
  SL_CHECK(map_reserve(&p->by_id));
  map_set(&p->next_index, skey, (int32_t)SL_MAX(next, index + 1));
  map_set(&p->by_id, id, p->n_actors);
  plan_actor *a = &p->actors[p->n_actors++];
  memset(a, 0, sizeof *a);
  a->d = *d;
  a->d.name = name;
  a->id = id;
  a->proxy = proxy;
  if (d->node + 1 > p->n_nodes) p->n_nodes = d->node + 1;
  *out = id;
  return SL_OK;
}

sl_status sl_actor_graph_add_actor(sl_actor_graph *p, const sl_actor_desc *d,
                                   sl_actor_id *out) {
  return add_actor(p, d, -1, false, out);
}

sl_status sl_actor_graph_add_actor_at(sl_actor_graph *p, const sl_actor_desc *d,
                                      uint32_t index, sl_actor_id *out) {
  return add_actor(p, d, index, false, out);
}

sl_status sl_actor_graph_add_proxy(sl_actor_graph *p, const sl_actor_desc *d,
                                   uint32_t index, sl_actor_id *out) {
  return add_actor(p, d, index, true, out);
}

/* Makes slot `slot` of *arr (n used, -1 for holes) exist. */
static sl_status slot_reserve(int32_t **arr, int32_t *n, int32_t *cap,
                              int32_t slot) {
  while (*n <= slot) {
    SL_CHECK(grow((void **)arr, cap, *n, sizeof **arr));
    (*arr)[(*n)++] = -1;
  }
  return SL_OK;
}

/* wire, slot < 0: the descriptor's index, the producer's next slot. */
static sl_status add_output(sl_actor_graph *p, sl_actor_id producer,
                            const sl_regst_desc *d, int32_t wire, int32_t slot,
                            int32_t *out) {
  *out = -1;
  SL_CHECK(check_frozen(p));
  int32_t ai = sl__plan_find(p, producer);
  if (ai < 0)
    return sl__fail(SL_ENOTFOUND, "actor graph: no actor with id 0x%llx",
                    (unsigned long long)producer);
  plan_actor *a = &p->actors[ai];
  if (d->count < 1)
    return sl__fail(SL_EINVAL,
                    "actor '%s': an output needs at least 1 register, not %d",
                    a->d.name, (int)d->count);
  if (d->initial < 0 || d->initial > d->count)
    return sl__fail(SL_EINVAL,
                    "actor '%s': %d initial registers of an output with %d",
                    a->d.name, (int)d->initial, (int)d->count);
  if (d->device >= 0 && (uint32_t)d->device >= SL_ACTOR_MAX_DEVICES)
    return sl__fail(SL_EINVAL,
                    "actor '%s': an output on device %d (at most %u)",
                    a->d.name, (int)d->device, SL_ACTOR_MAX_DEVICES - 1);
  if (slot < 0) slot = a->n_out;
  if (slot >= UINT16_MAX)
    return sl__fail(SL_EINVAL, "actor '%s': too many outputs", a->d.name);
  if (slot < a->n_out && a->out[slot] >= 0)
    return sl__fail(SL_EINVAL, "actor '%s': output slot %d is taken", a->d.name,
                    (int)slot);
  if (p->n_regsts == INT32_MAX)
    return sl__fail(SL_EINVAL, "actor graph: too many register descriptors");
  SL_CHECK(grow((void **)&p->regsts, &p->cap_regsts, p->n_regsts,
                sizeof *p->regsts));
  SL_CHECK(slot_reserve(&a->out, &a->n_out, &a->cap_out, slot));
  char namebuf[256];
  const char *name = d->name;
  if (!name || !name[0]) {
    snprintf(namebuf, sizeof namebuf, "%s.out%d", a->d.name, (int)slot);
    name = namebuf;
  }
  char *dup = sl__arena_strdup(p->arena, name);
  if (!dup) return SL_ENOMEM;
  int32_t ri = p->n_regsts++;
  plan_regst *r = &p->regsts[ri];
  memset(r, 0, sizeof *r);
  r->d = *d;
  r->d.name = dup;
  if (r->d.device < 0) r->d.device = (int32_t)a->d.device;
  r->wire = wire < 0 ? ri : wire;
  r->producer = ai;
  r->out_slot = slot;
  a->out[slot] = ri;
  *out = ri;
  return SL_OK;
}

sl_status sl_actor_graph_add_output(sl_actor_graph *p, sl_actor_id producer,
                                    const sl_regst_desc *d, int32_t *out) {
  return add_output(p, producer, d, -1, -1, out);
}

sl_status sl_actor_graph_add_output_at(sl_actor_graph *p, sl_actor_id producer,
                                       const sl_regst_desc *d, int32_t wire,
                                       uint16_t slot, int32_t *out) {
  *out = -1;
  if (wire < 0)
    return sl__fail(SL_EINVAL, "actor graph: a descriptor numbered %d", (int)wire);
  return add_output(p, producer, d, wire, slot, out);
}

sl_status sl_actor_graph_add_block(sl_actor_graph *p, uint32_t node,
                                   int32_t device, size_t bytes, int32_t *out) {
  *out = 0;
  SL_CHECK(check_frozen(p));
  if (node >= SL_ACTOR_MAX_NODES || device < 0 ||
      (uint32_t)device >= SL_ACTOR_MAX_DEVICES || p->n_blocks == INT32_MAX)
    return sl__fail(SL_EINVAL, "actor graph: a block on node %u, device %d", node,
                    (int)device);
  SL_CHECK(grow((void **)&p->blocks, &p->cap_blocks, p->n_blocks,
                sizeof *p->blocks));
  p->blocks[p->n_blocks++] = (plan_block){node, device, bytes};
  *out = p->n_blocks;
  return SL_OK;
}

sl_status sl_actor_graph_place(sl_actor_graph *p, int32_t desc, int32_t block,
                               size_t offset) {
  SL_CHECK(check_frozen(p));
  if (desc < 0 || desc >= p->n_regsts || block < 1 || block > p->n_blocks)
    return sl__fail(SL_ENOTFOUND, "actor graph: no register descriptor %d or block %d",
                    (int)desc, (int)block);
  plan_regst *r = &p->regsts[desc];
  const plan_actor *a = &p->actors[r->producer];
  const plan_block *b = &p->blocks[block - 1];
  size_t stride = sl_register_stride(r->d.bytes), count = (size_t)r->d.count;
  if ((r->d.bytes && !stride) || b->node != a->d.node ||
      b->device != r->d.device || offset % SL_REGISTER_ALIGN ||
      offset > b->bytes || (stride && count > (b->bytes - offset) / stride))
    return sl__fail(SL_EINVAL,
                    "actor graph: %zu registers of %zu bytes ('%s', node %u, device "
                    "%d) do not fit at offset %zu of block %d (node %u, "
                    "device %d, %zu bytes)",
                    count, r->d.bytes, r->d.name, a->d.node, (int)r->d.device,
                    offset, (int)block, b->node, (int)b->device, b->bytes);
  r->block = block;
  r->offset = offset;
  return SL_OK;
}

/* slot, position < 0: the consumer's next input slot, the descriptor's
 * next reader. */
static sl_status connect(sl_actor_graph *p, int32_t desc, sl_actor_id consumer,
                         int32_t slot, int32_t position) {
  SL_CHECK(check_frozen(p));
  if (desc < 0 || desc >= p->n_regsts)
    return sl__fail(SL_ENOTFOUND, "actor graph: no register descriptor %d", (int)desc);
  int32_t ci = sl__plan_find(p, consumer);
  if (ci < 0)
    return sl__fail(SL_ENOTFOUND, "actor graph: no actor with id 0x%llx",
                    (unsigned long long)consumer);
  plan_regst *r = &p->regsts[desc];
  plan_actor *c = &p->actors[ci];
  for (int32_t i = 0; i < c->n_in; i++)
    if (c->in[i] == desc)
      return sl__fail(SL_EINVAL, "actor '%s': already reads '%s'", c->d.name,
                      r->d.name);
  if (slot < 0) slot = c->n_in;
  if (position < 0) position = r->n_cons;
  if (slot >= UINT16_MAX || position >= UINT16_MAX || r->n_cons >= UINT16_MAX)
    return sl__fail(SL_EINVAL, "actor '%s': too many inputs or readers",
                    c->d.name);
  if (slot < c->n_in && c->in[slot] >= 0)
    return sl__fail(SL_EINVAL, "actor '%s': input slot %d is taken", c->d.name,
                    (int)slot);
  SL_CHECK(slot_reserve(&c->in, &c->n_in, &c->cap_in, slot));
  SL_CHECK(grow((void **)&r->cons, &r->cap_cons, r->n_cons, sizeof *r->cons));
  r->cons[r->n_cons++] = (plan_consumer){ci, slot, position};
  c->in[slot] = desc;
  return SL_OK;
}

sl_status sl_actor_graph_connect(sl_actor_graph *p, int32_t desc,
                                 sl_actor_id consumer) {
  return connect(p, desc, consumer, -1, -1);
}

sl_status sl_actor_graph_connect_at(sl_actor_graph *p, int32_t desc,
                                    sl_actor_id consumer, uint16_t slot,
                                    uint16_t position) {
  return connect(p, desc, consumer, slot, position);
}
