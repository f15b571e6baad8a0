/* sluice comm — hierarchical all-reduce (net_hier.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "net_hier.h"

typedef struct hier_member {
  struct sl__net_hier *h;
  int k;
  void *out;
  sl__net_coll_done_fn done;
  void *arg;
} hier_member;

struct sl__net_hier {
  sl__coll *local, *bcast;
  sl__net_coll *nc;
  sl__net_group group;
  uint32_t *nodes;
  int n;
  sl_dtype dt;
  sl_reduce_op op;
  size_t count, bytes;
  uint8_t *scratch;
  uint64_t round;
  _Atomic int net_st; /* the round's status between the nodes */
  char net_msg[600];
  hier_member *m;
};

static void bcast_done(void *arg, sl_status st) {
  hier_member *m = arg;
  sl__net_hier *h = m->h;
  int net = atomic_load(&h->net_st);
  if (st == SL_OK && net != SL_OK) st = sl__fail(net, "%s", h->net_msg);
  m->done(m->arg, st);
}

static void net_done(void *arg, sl_status st) {
  sl__net_hier *h = arg;
  if (st != SL_OK)
    snprintf(h->net_msg, sizeof h->net_msg, "%s", sl_last_error());
  atomic_store(&h->net_st, st);
  hier_member *m = &h->m[0];
  /* the broadcast lets the other members go on, with the data or the
   * failure */
  if (sl__coll_arrive(h->bcast, 0, h->scratch, h->bytes, m->out, h->bytes,
                      bcast_done, m) != SL_OK)
    m->done(m->arg, SL_EINTERNAL);
}

static void local_done(void *arg, sl_status st) {
  hier_member *m = arg;
  sl__net_hier *h = m->h;
  if (st != SL_OK) {
    m->done(m->arg, st);
    return;
  }
  if (m->k != 0) {
    if (sl__coll_arrive(h->bcast, m->k, NULL, 0, m->out, h->bytes, bcast_done,
                        m) != SL_OK)
      m->done(m->arg, SL_EINTERNAL);
    return;
  }
  memcpy(h->scratch, m->out, h->bytes);
  atomic_store(&h->net_st, SL_OK);
  st = sl__net_all_reduce(h->nc, &h->group, h->round++, h->scratch, h->count,
                          h->dt, h->op, net_done, h);
  if (st != SL_OK) net_done(h, st); /* done is not called: do its part */
}

sl_status sl__net_hier_create(const sl__net_hier_desc *d, sl__net_hier **out) {
  *out = NULL;
  if (!d || !d->comm || !d->nc || !d->group || !d->group->nodes ||
      d->local_members < 1 || !d->workers || d->count < 1 ||
      (unsigned)d->dtype >= SL_DTYPE_COUNT)
    return sl__fail(SL_EINVAL, "hierarchical all-reduce: bad description");
  sl__net_hier *h = sl__calloc(1, sizeof *h);
  if (!h) return SL_ENOMEM;
  sl_status st = SL_OK;
  h->n = d->local_members;
  h->nc = d->nc;
  h->dt = d->dtype;
  h->op = d->op;
  h->count = d->count;
  h->bytes = d->count * sl_dtype_size(d->dtype);
  h->nodes = sl__malloc(d->group->n * sizeof *h->nodes);
  h->m = sl__calloc((size_t)h->n, sizeof *h->m);
  h->scratch = sl__malloc(h->bytes);
  if (!h->nodes || !h->m || !h->scratch) {
    st = SL_ENOMEM;
    goto fail;
  }
  memcpy(h->nodes, d->group->nodes, d->group->n * sizeof *h->nodes);
  h->group = *d->group;
  h->group.nodes = h->nodes;
  for (int k = 0; k < h->n; k++) {
    h->m[k].h = h;
    h->m[k].k = k;
  }
  sl__coll_desc cd = {0};
  cd.name = d->name ? d->name : "hier";
  cd.dtype = d->dtype;
  cd.reduce = d->op;
  cd.n = h->n;
  cd.workers = d->workers;
  cd.block.ndim = 1;
  cd.block.dims[0] = (int64_t)d->count;
  cd.op = SL__COLL_ALL_REDUCE;
  SL_CHECK_GOTO(sl__coll_create(d->comm, &cd, &h->local), st, fail);
  cd.op = SL__COLL_BROADCAST;
  cd.root = 0;
  SL_CHECK_GOTO(sl__coll_create(d->comm, &cd, &h->bcast), st, fail);
  *out = h;
  return SL_OK;
fail:
  sl__net_hier_destroy(h);
  return st;
}

void sl__net_hier_destroy(sl__net_hier *h) {
  if (!h) return;
  sl__free(h->nodes);
  sl__free(h->m);
  sl__free(h->scratch);
  sl__free(h);
}

sl_status sl__net_hier_arrive(sl__net_hier *h, int member, const void *in,
                              void *out, sl__net_coll_done_fn done, void *arg) {
  if (member < 0 || member >= h->n || !in || !out || !done)
    return sl__fail(SL_EINVAL,
                    "hierarchical all-reduce: bad arrival of "
                    "member %d",
                    member);
  hier_member *m = &h->m[member];
  m->out = out;
  m->done = done;
  m->arg = arg;
  return sl__coll_arrive(h->local, member, in, h->bytes, out, h->bytes,
                         local_done, m);
}
