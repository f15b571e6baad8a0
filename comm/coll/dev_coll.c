/* Device collectives: what every backend shares — checking arguments,
 * mapping dtypes and reductions, exchanging unique ids, issuing each
 * collective for all local ranks in one group under the process's launch
 * lock, and the per-group communicator cache. The backends only call their
 * library (dev_coll_nccl.c) or pretend to (the tests' fake). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core_thread.h"
#include "cuda_module.h"
#include "dev_coll.h"

struct sl__dev_coll {
  const sl__dev_coll_vtable *vt;
  void *ctx;
  /* Held while a launch issues its group, so the launches of a process form
   * one sequence (dev_coll.h, "Launch order"). */
  pthread_mutex_t launch_mu;
};

struct sl__dev_comm {
  sl__dev_coll *e;
  char *name;
  int nranks, nlocal;
  int *ranks, *devices;
  int *local_of; /* nranks entries: local index of a rank, or -1 */
  void **h;      /* backend communicators, per local index */
  bool aborted;  /* h freed by comm_abort; under e->launch_mu */
  pthread_mutex_t state_mu;
  sl_status failed; /* the failure that poisoned the communicator */
  char why[512];
};

#define DEFAULT_TIMEOUT_MS 60000u
#define KV_PREFIX "sluice/dev_coll/"
#define CP_PUT_TIMEOUT_MS 30000u

/* ---- backends ---------------------------------------------------------- */

sl_status sl__dev_coll_nccl_open(sl__dev_coll **out) {
  if (out) *out = NULL;
  if (!sl_build_has_nccl())
    return sl__fail(SL_EUNSUPPORTED,
                    "nccl: this build of sluice is built without CUDA/NCCL "
                    "(configured with SLUICE_CUDA=OFF or without nvcc)");
  const sl__cuda_module *m;
  sl_status st = sl__cuda_module_get(&m);
  if (st != SL_OK) return sl__fail_context(st, "nccl: ");
  return sl__dev_coll_create(m->nccl, NULL, out);
}

sl_status sl__dev_coll_create(const sl__dev_coll_vtable *vt, void *ctx,
                              sl__dev_coll **out) {
  if (out) *out = NULL;
  if (!vt || !out) return sl__fail(SL_EINVAL, "device collectives: NULL table");
  const char *name = vt->name ? vt->name : "?";
  static const struct {
    size_t off;
    const char *what;
  } req[] = {
      {offsetof(sl__dev_coll_vtable, unique_id), "unique_id"},
      {offsetof(sl__dev_coll_vtable, comm_init), "comm_init"},
      {offsetof(sl__dev_coll_vtable, comm_destroy), "comm_destroy"},
      {offsetof(sl__dev_coll_vtable, comm_abort), "comm_abort"},
      {offsetof(sl__dev_coll_vtable, group_start), "group_start"},
      {offsetof(sl__dev_coll_vtable, group_end), "group_end"},
      {offsetof(sl__dev_coll_vtable, all_reduce), "all_reduce"},
      {offsetof(sl__dev_coll_vtable, reduce_scatter), "reduce_scatter"},
      {offsetof(sl__dev_coll_vtable, all_gather), "all_gather"},
      {offsetof(sl__dev_coll_vtable, send), "send"},
      {offsetof(sl__dev_coll_vtable, recv), "recv"},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(req); i++) {
    void (*fn)(void);
    memcpy(&fn, (const char *)vt + req[i].off, sizeof fn);
    if (!fn)
      return sl__fail(SL_EINVAL, "device collective backend '%s': no %s", name,
                      req[i].what);
  }
  if (vt->id_bytes == 0 || vt->id_bytes > SL__DEV_COLL_ID_MAX)
    return sl__fail(SL_EINVAL,
                    "device collective backend '%s': unique ids of %zu bytes "
                    "(1 to %d)",
                    name, vt->id_bytes, SL__DEV_COLL_ID_MAX);
  sl__dev_coll *e;
  if (SL_NEW(e) != SL_OK) return SL_ENOMEM;
  e->vt = vt;
  e->ctx = ctx;
  pthread_mutex_init(&e->launch_mu, NULL);
  *out = e;
  return SL_OK;
}

void sl__dev_coll_destroy(sl__dev_coll *e) {
  if (!e) return;
  if (e->vt->close) e->vt->close(e->ctx);
  pthread_mutex_destroy(&e->launch_mu);
  sl__free(e);
}

const char *sl__dev_coll_backend_name(const sl__dev_coll *e) {
  return e && e->vt->name ? e->vt->name : "?";
}

const char *sl__dev_coll_op_name(sl__dev_coll_op op) {
  switch (op) {
  case SL__DEV_ALL_REDUCE: return "all_reduce";
  case SL__DEV_REDUCE_SCATTER: return "reduce_scatter";
  case SL__DEV_ALL_GATHER: return "all_gather";
  case SL__DEV_ALL_TO_ALL: return "all_to_all";
  case SL__DEV_EXCHANGE: return "exchange";
  }
  return "?";
}

sl_status sl__dev_coll_map(const sl__dev_coll *e, sl_dtype dt, bool reduces,
                           sl_reduce_op op, sl__dev_type *t, sl__dev_redop *r) {
  sl__dev_type tt;
  sl__dev_redop rr = SL__DEV_SUM;
  switch (dt) {
  case SL_DTYPE_F32: tt = SL__DEV_FLOAT32; break;
  case SL_DTYPE_F16: tt = SL__DEV_FLOAT16; break;
  case SL_DTYPE_BF16: tt = SL__DEV_BFLOAT16; break;
  case SL_DTYPE_F64: tt = SL__DEV_FLOAT64; break;
  case SL_DTYPE_I8: tt = SL__DEV_INT8; break;
  case SL_DTYPE_I32: tt = SL__DEV_INT32; break;
  case SL_DTYPE_I64: tt = SL__DEV_INT64; break;
  case SL_DTYPE_U8: tt = SL__DEV_UINT8; break;
  case SL_DTYPE_BOOL: tt = SL__DEV_UINT8; break;
  default:
    return sl__fail(SL_EUNSUPPORTED,
                    "dtype %d has no device-collective element type", (int)dt);
  }
  if (reduces) {
    switch (op) {
    case SL_REDUCE_SUM: rr = SL__DEV_SUM; break;
    case SL_REDUCE_MAX: rr = SL__DEV_MAX; break;
    case SL_REDUCE_MIN: rr = SL__DEV_MIN; break;
    default:
      return sl__fail(SL_EUNSUPPORTED,
                      "reduce op %d has no device-collective reduction",
                      (int)op);
    }
    /* Bool values are 0/1 and a sum of them saturates to or (sbp/elem.c);
     * a uint8 sum would not, a max is exactly or. */
    if (dt == SL_DTYPE_BOOL && op == SL_REDUCE_SUM) rr = SL__DEV_MAX;
  }
  if (e && !(e->vt->types & SL__DEV_TYPE_BIT(tt)))
    return sl__fail(SL_EUNSUPPORTED,
                    "device collective backend '%s' cannot handle %s",
                    sl__dev_coll_backend_name(e), sl_dtype_name(dt));
  if (t) *t = tt;
  if (r) *r = rr;
  return SL_OK;
}

/* ---- the key-value store ----------------------------------------------- */

static sl_status cp_put(void *ctx, const char *key, const void *bytes,
                        size_t len) {
  return sl__cp_kv_put(ctx, key, bytes, len, CP_PUT_TIMEOUT_MS);
}

static sl_status cp_get(void *ctx, const char *key, uint64_t wait_ms,
                        uint8_t **bytes, size_t *len) {
  return sl__cp_kv_get(ctx, key, true, wait_ms, bytes, len);
}

sl__dev_kv sl__dev_kv_cp(sl__cp_client *c) {
  sl__dev_kv kv = {cp_put, cp_get, c};
  return kv;
}

/* FNV-1a, 64 bits (Fowler, Noll, Vo). */
static uint64_t hash_name(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

sl_status sl__dev_coll_key(uint64_t job, const char *group, char *buf,
                           size_t cap) {
  if (buf && cap) buf[0] = '\0';
  if (!buf || cap < SL__CP_MAX_NAME + 1)
    return sl__fail(SL_EINVAL,
                    "device group key: a buffer of %zu bytes "
                    "(%d needed)",
                    cap, SL__CP_MAX_NAME + 1);
  if (!group || !group[0])
    return sl__fail(SL_EINVAL, "device group key: empty group name");
  int n =
      snprintf(buf, cap, KV_PREFIX "%llu/%s", (unsigned long long)job, group);
  /* A name of digits, ':' and ',' (the cache's) never starts with '#'. */
  if (n < 0 || n > SL__CP_MAX_NAME)
    snprintf(buf, cap, KV_PREFIX "%llu/#%016llx", (unsigned long long)job,
             (unsigned long long)hash_name(group));
  return SL_OK;
}

/* ---- communicators ----------------------------------------------------- */

static void comm_free(sl__dev_comm *c) {
  if (!c) return;
  pthread_mutex_destroy(&c->state_mu);
  sl__free(c->name);
  sl__free(c->ranks);
  sl__free(c->devices);
  sl__free(c->local_of);
  sl__free(c->h);
  sl__free(c);
}

static sl_status check_desc(const sl__dev_comm_desc *d) {
  const char *name = d->name && d->name[0] ? d->name : NULL;
  if (!name) return sl__fail(SL_EINVAL, "device group: no name");
  if (d->nranks < 1 || d->nranks > SL__DEV_COLL_MAX_RANKS)
    return sl__fail(SL_EINVAL, "device group '%s': %d ranks (1 to %d)", name,
                    d->nranks, SL__DEV_COLL_MAX_RANKS);
  if (d->nlocal < 1 || d->nlocal > d->nranks || !d->ranks || !d->devices)
    return sl__fail(SL_EINVAL,
                    "device group '%s': %d local ranks of %d, ranks and "
                    "devices %s",
                    name, d->nlocal, d->nranks,
                    d->ranks && d->devices ? "given" : "missing");
  for (int i = 0; i < d->nlocal; i++) {
    if (d->ranks[i] < 0 || d->ranks[i] >= d->nranks)
      return sl__fail(SL_EINVAL, "device group '%s': rank %d out of range",
                      name, d->ranks[i]);
    if (d->devices[i] < 0)
      return sl__fail(SL_EINVAL, "device group '%s': rank %d on device %d",
                      name, d->ranks[i], d->devices[i]);
    for (int j = 0; j < i; j++) {
      if (d->ranks[j] == d->ranks[i])
        return sl__fail(SL_EINVAL, "device group '%s': rank %d given twice",
                        name, d->ranks[i]);
      /* NCCL refuses (or hangs on) one device as two ranks. */
      if (d->devices[j] == d->devices[i])
        return sl__fail(SL_EINVAL,
                        "device group '%s': ranks %d and %d on the same "
                        "device %d",
                        name, d->ranks[j], d->ranks[i], d->devices[i]);
    }
  }
  if (d->nlocal < d->nranks && (!d->kv || !d->kv->put || !d->kv->get))
    return sl__fail(SL_EINVAL,
                    "device group '%s': %d of its %d ranks are in other "
                    "processes, and no key-value store for the unique id",
                    name, d->nranks - d->nlocal, d->nranks);
  return SL_OK;
}

/* The id rank 0 made: made here, or taken from the store. */
static sl_status get_id(sl__dev_coll *e, const sl__dev_comm_desc *d,
                        const sl__dev_comm *c, uint8_t *id) {
  size_t idb = e->vt->id_bytes;
  bool cross = d->nlocal < d->nranks;
  char key[SL__CP_MAX_NAME + 1];
  if (cross) SL_CHECK(sl__dev_coll_key(d->job, d->name, key, sizeof key));
  if (c->local_of[0] >= 0) {
    sl_status st = e->vt->unique_id(e->ctx, id);
    if (st != SL_OK)
      return cross ? sl__fail_context(st,
                                      "device group '%s': making the unique "
                                      "id for '%s': ",
                                      d->name, key)
                   : sl__fail_context(st, "device group '%s': ", d->name);
    if (!cross) return SL_OK;
    st = d->kv->put(d->kv->ctx, key, id, idb);
    if (st != SL_OK)
      return sl__fail_context(st,
                              "device group '%s': putting the unique id "
                              "under '%s': ",
                              d->name, key);
    return SL_OK;
  }
  uint64_t wait = d->timeout_ms ? d->timeout_ms : DEFAULT_TIMEOUT_MS;
  uint8_t *bytes = NULL;
  size_t len = 0;
  sl_status st = SL_ETIMEOUT;
  /* With a cancel callback the wait goes in slices, asking between them. */
  uint64_t slice = d->cancelled ? SL__DEV_COLL_CANCEL_POLL_MS : wait;
  for (uint64_t waited = 0; st == SL_ETIMEOUT && waited < wait;
       waited += slice) {
    if (d->cancelled) {
      sl_status why = d->cancelled(d->cancel_arg);
      if (why != SL_OK)
        return sl__fail_context(why,
                                "device group '%s': stopped waiting for the "
                                "unique id under '%s': ",
                                d->name, key);
    }
    st =
        d->kv->get(d->kv->ctx, key, SL_MIN(slice, wait - waited), &bytes, &len);
  }
  if (st == SL_ETIMEOUT)
    return sl__fail(SL_ETIMEOUT,
                    "device group '%s': no unique id under '%s' after %llu "
                    "ms (has the process holding rank 0 created the group?)",
                    d->name, key, (unsigned long long)wait);
  if (st != SL_OK)
    return sl__fail_context(st,
                            "device group '%s': getting the unique id "
                            "under '%s': ",
                            d->name, key);
  if (len != idb) {
    sl__free(bytes);
    return sl__fail(SL_EINVAL,
                    "device group '%s': the value under '%s' has %zu bytes, "
                    "not a %s unique id of %zu",
                    d->name, key, len, sl__dev_coll_backend_name(e), idb);
  }
  memcpy(id, bytes, idb);
  sl__free(bytes);
  return SL_OK;
}

sl_status sl__dev_comm_create(sl__dev_coll *e, const sl__dev_comm_desc *d,
                              sl__dev_comm **out) {
  if (out) *out = NULL;
  if (!e || !d || !out)
    return sl__fail(SL_EINVAL, "device group: NULL argument");
  SL_CHECK(check_desc(d));
  sl_status st = SL_OK;
  sl__dev_comm *c;
  if (SL_NEW(c) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&c->state_mu, NULL);
  c->e = e;
  c->nranks = d->nranks;
  c->nlocal = d->nlocal;
  c->name = sl__strdup(d->name);
  c->ranks = sl__calloc((size_t)d->nlocal, sizeof *c->ranks);
  c->devices = sl__calloc((size_t)d->nlocal, sizeof *c->devices);
  c->local_of = sl__calloc((size_t)d->nranks, sizeof *c->local_of);
  c->h = sl__calloc((size_t)d->nlocal, sizeof *c->h);
  if (!c->name || !c->ranks || !c->devices || !c->local_of || !c->h) {
    comm_free(c);
    return SL_ENOMEM;
  }
  for (int r = 0; r < d->nranks; r++)
    c->local_of[r] = -1;
  for (int i = 0; i < d->nlocal; i++) {
    c->ranks[i] = d->ranks[i];
    c->devices[i] = d->devices[i];
    c->local_of[d->ranks[i]] = i;
  }
  uint8_t id[SL__DEV_COLL_ID_MAX];
  SL_CHECK_GOTO(get_id(e, d, c, id), st, fail);
  const sl__dev_coll_vtable *vt = e->vt;
  /* Across processes a failed init names the id's key: the other
   * processes' errors name it too. */
  char where[SL__CP_MAX_NAME + 32] = "";
  if (d->nlocal < d->nranks) {
    char key[SL__CP_MAX_NAME + 1];
    if (sl__dev_coll_key(d->job, d->name, key, sizeof key) == SL_OK)
      snprintf(where, sizeof where, ", id under '%s'", key);
  }
  st = vt->group_start(e->ctx);
  if (st != SL_OK) {
    sl__fail_context(st, "device group '%s': ", d->name);
    goto fail;
  }
  for (int i = 0; i < c->nlocal && st == SL_OK; i++) {
    st = vt->comm_init(e->ctx, c->nranks, id, c->ranks[i], c->devices[i],
                       &c->h[i]);
    if (st != SL_OK)
      sl__fail_context(st,
                       "device group '%s' (%s, %d ranks%s): rank %d on "
                       "device %d: ",
                       d->name, vt->name, c->nranks, where, c->ranks[i],
                       c->devices[i]);
  }
  char first[1024] = ""; /* the first failure's message is the one kept */
  if (st != SL_OK) snprintf(first, sizeof first, "%s", sl_last_error());
  sl_status end = vt->group_end(e->ctx);
  if (st != SL_OK)
    sl__fail(st, "%s", first);
  else if (end != SL_OK)
    st = sl__fail_context(end, "device group '%s' (%s, %d ranks%s): ", d->name,
                          vt->name, c->nranks, where);
  if (st != SL_OK) {
    for (int i = 0; i < c->nlocal; i++)
      if (c->h[i]) (void)vt->comm_abort(e->ctx, c->h[i]);
    goto fail;
  }
  *out = c;
  return SL_OK;
fail:
  comm_free(c);
  return st;
}

sl_status sl__dev_comm_create_local(sl__dev_coll *e, const char *name, int n,
                                    const int *devices, sl__dev_comm **out) {
  if (out) *out = NULL;
  if (n < 1 || n > SL__DEV_COLL_MAX_RANKS)
    return sl__fail(SL_EINVAL, "device group '%s': %d ranks (1 to %d)",
                    name ? name : "?", n, SL__DEV_COLL_MAX_RANKS);
  int *ranks = sl__calloc((size_t)n, sizeof *ranks);
  if (!ranks) return SL_ENOMEM;
  for (int k = 0; k < n; k++)
    ranks[k] = k;
  sl__dev_comm_desc d = {.name = name,
                         .nranks = n,
                         .nlocal = n,
                         .ranks = ranks,
                         .devices = devices};
  sl_status st = sl__dev_comm_create(e, &d, out);
  sl__free(ranks);
  return st;
}

/* Records the thread's current error as the reason c is unusable. */
static void poison(sl__dev_comm *c, sl_status st) {
  pthread_mutex_lock(&c->state_mu);
  if (c->failed == SL_OK) {
    c->failed = st;
    snprintf(c->why, sizeof c->why, "%s", sl_last_error());
  }
  pthread_mutex_unlock(&c->state_mu);
}

void sl__dev_comm_destroy(sl__dev_comm *c) {
  if (!c) return;
  const sl__dev_coll_vtable *vt = c->e->vt;
  void *ctx = c->e->ctx;
  if (!c->aborted) {
    /* NCCL: one thread finalising several ranks does it in one group. */
    if (vt->comm_finalize) {
      sl_status st = vt->group_start(ctx);
      for (int i = 0; i < c->nlocal && st == SL_OK; i++)
        st = vt->comm_finalize(ctx, c->h[i]);
      if (vt->group_end(ctx) != SL_OK || st != SL_OK)
        SL_WARN("device group '%s': finalize: %s", c->name, sl_last_error());
    }
    for (int i = 0; i < c->nlocal; i++)
      if (vt->comm_destroy(ctx, c->h[i]) != SL_OK)
        SL_WARN("device group '%s': destroy rank %d: %s", c->name, c->ranks[i],
                sl_last_error());
  }
  comm_free(c);
}

void sl__dev_comm_abort(sl__dev_comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->e->launch_mu);
  if (!c->aborted) {
    for (int i = 0; i < c->nlocal; i++)
      (void)c->e->vt->comm_abort(c->e->ctx, c->h[i]);
    c->aborted = true;
    sl__fail(SL_EABORTED, "aborted");
    poison(c, SL_EABORTED);
  }
  pthread_mutex_unlock(&c->e->launch_mu);
}

sl_status sl__dev_comm_check(sl__dev_comm *c) {
  if (!c) return sl__fail(SL_EINVAL, "device group: NULL");
  pthread_mutex_lock(&c->state_mu);
  sl_status st = c->failed;
  char why[sizeof c->why];
  memcpy(why, c->why, sizeof why);
  pthread_mutex_unlock(&c->state_mu);
  if (st != SL_OK)
    return sl__fail(st, "device group '%s' failed: %s", c->name, why);
  if (!c->e->vt->comm_async_error) return SL_OK;
  pthread_mutex_lock(&c->e->launch_mu);
  for (int i = 0; i < c->nlocal && st == SL_OK && !c->aborted; i++) {
    st = c->e->vt->comm_async_error(c->e->ctx, c->h[i]);
    if (st != SL_OK)
      sl__fail_context(st, "device group '%s', rank %d: ", c->name,
                       c->ranks[i]);
  }
  pthread_mutex_unlock(&c->e->launch_mu);
  return st;
}

const char *sl__dev_comm_name(const sl__dev_comm *c) { return c->name; }
int sl__dev_comm_nranks(const sl__dev_comm *c) { return c->nranks; }
int sl__dev_comm_nlocal(const sl__dev_comm *c) { return c->nlocal; }
int sl__dev_comm_rank(const sl__dev_comm *c, int i) {
  return i >= 0 && i < c->nlocal ? c->ranks[i] : -1;
}
int sl__dev_comm_device(const sl__dev_comm *c, int i) {
  return i >= 0 && i < c->nlocal ? c->devices[i] : -1;
}

/* ---- launching --------------------------------------------------------- */

typedef struct launch {
  sl__dev_comm *c;
  const sl__dev_coll_desc *d;
  sl__dev_type t;
  sl__dev_redop r;
  size_t es;
  char what[200]; /* "all_reduce 'x' (f32, 10 elements) on group ..." */
} launch;

static sl_status bad(const launch *L, const char *fmt, int a, int b) {
  char why[160];
  snprintf(why, sizeof why, fmt, a, b);
  return sl__fail(SL_EINVAL, "device collective %s: %s", L->what, why);
}

/* Whether the sizes of the sends from local a to local b pair up with the
 * receives at b from a, in order (else NCCL would hang or truncate). */
static bool pairs_match(const launch *L, const sl__dev_rank_args *ranks, int a,
                        int b) {
  const sl__dev_rank_args *A = &ranks[a], *B = &ranks[b];
  int ra = L->c->ranks[a], rb = L->c->ranks[b], i = 0, j = 0;
  for (;;) {
    while (i < A->n_send && (A->send[i].peer != rb || !A->send[i].bytes))
      i++;
    while (j < B->n_recv && (B->recv[j].peer != ra || !B->recv[j].bytes))
      j++;
    if (i == A->n_send || j == B->n_recv)
      return i == A->n_send && j == B->n_recv;
    if (A->send[i++].bytes != B->recv[j++].bytes) return false;
  }
}

static sl_status check_exchange(const launch *L,
                                const sl__dev_rank_args *ranks) {
  const sl__dev_comm *c = L->c;
  for (int i = 0; i < c->nlocal; i++) {
    const sl__dev_rank_args *a = &ranks[i];
    if (a->n_send < 0 || a->n_recv < 0 || (a->n_send && !a->send) ||
        (a->n_recv && !a->recv))
      return bad(L, "rank %d: bad send or receive list", c->ranks[i], 0);
    for (int k = 0; k < a->n_send; k++)
      if (a->send[k].peer < 0 || a->send[k].peer >= c->nranks ||
          (a->send[k].bytes && !a->send[k].buf))
        return bad(L, "rank %d: send %d to no rank or from no buffer",
                   c->ranks[i], k);
    for (int k = 0; k < a->n_recv; k++)
      if (a->recv[k].peer < 0 || a->recv[k].peer >= c->nranks ||
          (a->recv[k].bytes && !a->recv[k].buf))
        return bad(L, "rank %d: receive %d from no rank or into no buffer",
                   c->ranks[i], k);
  }
  for (int a = 0; a < c->nlocal; a++)
    for (int b = 0; b < c->nlocal; b++)
      if (!pairs_match(L, ranks, a, b))
        return bad(L,
                   "the sends from rank %d to rank %d do not pair up with "
                   "the receives (count and bytes, in order)",
                   c->ranks[a], c->ranks[b]);
  return SL_OK;
}

static sl_status check_args(launch *L, const sl__dev_rank_args *ranks) {
  const sl__dev_comm *c = L->c;
  const sl__dev_coll_desc *d = L->d;
  size_t n = (size_t)c->nranks, in = 0, out = 0;
  if (d->op != SL__DEV_EXCHANGE) {
    size_t big = n * d->count;
    if (d->count && (big / d->count != n || big > SIZE_MAX / L->es))
      return bad(L, "%d ranks of the count overflow a size", c->nranks, 0);
  }
  switch (d->op) {
  case SL__DEV_ALL_REDUCE: in = out = d->count; break;
  case SL__DEV_REDUCE_SCATTER: in = n * d->count, out = d->count; break;
  case SL__DEV_ALL_GATHER: in = d->count, out = n * d->count; break;
  case SL__DEV_ALL_TO_ALL: in = out = n * d->count; break;
  case SL__DEV_EXCHANGE: break;
  }
  for (int i = 0; i < c->nlocal; i++) {
    const sl__dev_rank_args *a = &ranks[i];
    if (!a->stream) return bad(L, "rank %d: no stream", c->ranks[i], 0);
    if (in && !a->in) return bad(L, "rank %d: no input", c->ranks[i], 0);
    if (out && !a->out) return bad(L, "rank %d: no output", c->ranks[i], 0);
    if (d->op == SL__DEV_ALL_TO_ALL && in) {
      const char *p = a->in, *q = a->out;
      size_t bytes = in * L->es;
      if (p < q + bytes && q < p + bytes)
        return bad(L, "rank %d: input and output overlap", c->ranks[i], 0);
    }
  }
  return d->op == SL__DEV_EXCHANGE ? check_exchange(L, ranks) : SL_OK;
}

/* Issues local rank i's part; called between group_start and group_end. */
static sl_status issue(const launch *L, int i, const sl__dev_rank_args *a) {
  const sl__dev_coll_vtable *vt = L->c->e->vt;
  void *ctx = L->c->e->ctx, *h = L->c->h[i];
  size_t count = L->d->count;
  switch (L->d->op) {
  case SL__DEV_ALL_REDUCE:
    return vt->all_reduce(ctx, h, a->in, a->out, count, L->t, L->r, a->stream);
  case SL__DEV_REDUCE_SCATTER:
    return vt->reduce_scatter(ctx, h, a->in, a->out, count, L->t, L->r,
                              a->stream);
  case SL__DEV_ALL_GATHER:
    return vt->all_gather(ctx, h, a->in, a->out, count, L->t, a->stream);
  case SL__DEV_ALL_TO_ALL: {
    if (!count) return SL_OK; /* the same on every rank */
    size_t part = count * L->es;
    for (int j = 0; j < L->c->nranks; j++) {
      SL_CHECK(vt->send(ctx, h, (const char *)a->in + (size_t)j * part, count,
                        L->t, j, a->stream));
      SL_CHECK(vt->recv(ctx, h, (char *)a->out + (size_t)j * part, count, L->t,
                        j, a->stream));
    }
    return SL_OK;
  }
  case SL__DEV_EXCHANGE:
    /* Zero-byte entries are skipped on both sides, so they still pair. */
    for (int k = 0; k < a->n_send; k++)
      if (a->send[k].bytes)
        SL_CHECK(vt->send(ctx, h, a->send[k].buf, a->send[k].bytes,
                          SL__DEV_UINT8, a->send[k].peer, a->stream));
    for (int k = 0; k < a->n_recv; k++)
      if (a->recv[k].bytes)
        SL_CHECK(vt->recv(ctx, h, a->recv[k].buf, a->recv[k].bytes,
                          SL__DEV_UINT8, a->recv[k].peer, a->stream));
    return SL_OK;
  }
  return SL_EINTERNAL;
}

sl_status sl__dev_comm_launch(sl__dev_comm *c, const sl__dev_coll_desc *d,
                              const sl__dev_rank_args *ranks) {
  if (!c || !d || !ranks)
    return sl__fail(SL_EINVAL, "device collective: NULL argument");
  launch L = {.c = c, .d = d, .t = SL__DEV_UINT8, .r = SL__DEV_SUM, .es = 1};
  bool exchange = d->op == SL__DEV_EXCHANGE;
  const char *opname = sl__dev_coll_op_name(d->op);
  char shape[64] = "";
  if (!exchange)
    snprintf(shape, sizeof shape, " (%s, %zu elements)",
             sl_dtype_name(d->dtype), d->count);
  snprintf(L.what, sizeof L.what, "%s '%s'%s on group '%s' (%s, %d ranks)",
           opname, d->name ? d->name : "", shape, c->name, c->e->vt->name,
           c->nranks);
  if (strcmp(opname, "?") == 0) return bad(&L, "unknown op %d", (int)d->op, 0);
  if (!exchange) {
    bool reduces =
        d->op == SL__DEV_ALL_REDUCE || d->op == SL__DEV_REDUCE_SCATTER;
    sl_status st =
        sl__dev_coll_map(c->e, d->dtype, reduces, d->reduce, &L.t, &L.r);
    if (st != SL_OK)
      return sl__fail_context(st, "device collective %s: ", L.what);
    L.es = sl_dtype_size(d->dtype);
  }
  SL_CHECK(check_args(&L, ranks));

  const sl__dev_coll_vtable *vt = c->e->vt;
  pthread_mutex_lock(&c->e->launch_mu);
  pthread_mutex_lock(&c->state_mu);
  sl_status st = c->failed;
  if (st != SL_OK)
    sl__fail(st, "device collective %s: the group failed earlier: %s", L.what,
             c->why);
  pthread_mutex_unlock(&c->state_mu);
  if (st == SL_OK) {
    st = vt->group_start(c->e->ctx);
    if (st != SL_OK) {
      /* Nothing was issued: the group is still usable. */
      sl__fail_context(st, "device collective %s: ", L.what);
      pthread_mutex_unlock(&c->e->launch_mu);
      return st;
    }
    for (int i = 0; i < c->nlocal && st == SL_OK; i++) {
      st = issue(&L, i, &ranks[i]);
      if (st != SL_OK)
        sl__fail_context(st, "device collective %s: rank %d: ", L.what,
                         c->ranks[i]);
    }
    /* Always closed, also after a failure inside: group calls nest. The
     * first failure's message is the one kept. */
    char first[1024] = "";
    if (st != SL_OK) snprintf(first, sizeof first, "%s", sl_last_error());
    sl_status end = vt->group_end(c->e->ctx);
    if (st != SL_OK)
      sl__fail(st, "%s", first);
    else if (end != SL_OK)
      st = sl__fail_context(end, "device collective %s: ", L.what);
    if (st != SL_OK) poison(c, st);
  }
  pthread_mutex_unlock(&c->e->launch_mu);
  return st;
}

/* ---- the cache --------------------------------------------------------- */

typedef struct cache_entry {
  struct cache_entry *next;
  char *name; /* "<node>:<device>,..." */
  bool creating;
  sl__dev_comm *comm;
  sl_status st;
  char why[512];
} cache_entry;

struct sl__dev_comm_cache {
  sl__dev_comm_cache_config cfg;
  sl__dev_kv kv;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cache_entry *head;
};

sl_status sl__dev_comm_cache_create(const sl__dev_comm_cache_config *cfg,
                                    sl__dev_comm_cache **out) {
  if (out) *out = NULL;
  if (!cfg || !cfg->engine || !out || cfg->node < 0)
    return sl__fail(SL_EINVAL, "device group cache: %s",
                    cfg && cfg->node < 0 ? "negative node" : "NULL argument");
  sl__dev_comm_cache *cc;
  if (SL_NEW(cc) != SL_OK) return SL_ENOMEM;
  cc->cfg = *cfg;
  if (cfg->kv) {
    cc->kv = *cfg->kv;
    cc->cfg.kv = &cc->kv;
  }
  pthread_mutex_init(&cc->mu, NULL);
  if (sl__cond_init(&cc->cv) != SL_OK) {
    pthread_mutex_destroy(&cc->mu);
    sl__free(cc);
    return SL_EINTERNAL;
  }
  *out = cc;
  return SL_OK;
}

static char *group_name(int n, const sl__dev_member *m) {
  size_t cap = (size_t)n * 24 + 1, len = 0;
  char *s = sl__malloc(cap);
  if (!s) return NULL;
  s[0] = '\0';
  for (int k = 0; k < n; k++)
    len += (size_t)snprintf(s + len, cap - len, "%s%d:%d", k ? "," : "",
                            m[k].node, m[k].device);
  return s;
}

static sl_status cache_make(sl__dev_comm_cache *cc, const char *name, int n,
                            const sl__dev_member *m, sl__dev_comm **out) {
  int *ranks = sl__calloc((size_t)n, sizeof *ranks);
  int *devices = sl__calloc((size_t)n, sizeof *devices);
  sl_status st = SL_ENOMEM;
  if (ranks && devices) {
    int nlocal = 0;
    for (int k = 0; k < n; k++)
      if (m[k].node == cc->cfg.node) {
        ranks[nlocal] = k;
        devices[nlocal++] = m[k].device;
      }
    sl__dev_comm_desc d = {.name = name,
                           .nranks = n,
                           .nlocal = nlocal,
                           .ranks = ranks,
                           .devices = devices,
                           .kv = cc->cfg.kv,
                           .job = cc->cfg.job,
                           .timeout_ms = cc->cfg.timeout_ms};
    st = sl__dev_comm_create(cc->cfg.engine, &d, out);
  }
  sl__free(ranks);
  sl__free(devices);
  return st;
}

sl_status sl__dev_comm_cache_get(sl__dev_comm_cache *cc, int n,
                                 const sl__dev_member *members,
                                 sl__dev_comm **out) {
  if (out) *out = NULL;
  if (!cc || !members || !out || n < 1 || n > SL__DEV_COLL_MAX_RANKS)
    return sl__fail(SL_EINVAL,
                    "device group cache: bad arguments (%d "
                    "members)",
                    n);
  bool local = false;
  for (int k = 0; k < n; k++) {
    if (members[k].node < 0 || members[k].device < 0)
      return sl__fail(SL_EINVAL, "device group: member %d is %d:%d", k,
                      members[k].node, members[k].device);
    local |= members[k].node == cc->cfg.node;
    for (int j = 0; j < k; j++)
      if (members[j].node == members[k].node &&
          members[j].device == members[k].device)
        return sl__fail(SL_EINVAL, "device group: %d:%d is members %d and %d",
                        members[k].node, members[k].device, j, k);
  }
  char *name = group_name(n, members);
  if (!name) return SL_ENOMEM;
  if (!local) {
    sl_status st = sl__fail(SL_EINVAL,
                            "device group '%s': no member on node "
                            "%d",
                            name, cc->cfg.node);
    sl__free(name);
    return st;
  }
  pthread_mutex_lock(&cc->mu);
  cache_entry *e = cc->head;
  while (e && strcmp(e->name, name) != 0)
    e = e->next;
  if (e) {
    sl__free(name);
  } else if (SL_NEW(e) == SL_OK) {
    e->name = name;
    e->creating = true;
    e->next = cc->head;
    cc->head = e;
    pthread_mutex_unlock(&cc->mu);
    sl__dev_comm *comm = NULL;
    sl_status st = cache_make(cc, name, n, members, &comm);
    pthread_mutex_lock(&cc->mu);
    e->creating = false;
    e->comm = comm;
    e->st = st;
    if (st != SL_OK) snprintf(e->why, sizeof e->why, "%s", sl_last_error());
    pthread_cond_broadcast(&cc->cv);
  } else {
    pthread_mutex_unlock(&cc->mu);
    sl__free(name);
    return SL_ENOMEM;
  }
  while (e->creating)
    pthread_cond_wait(&cc->cv, &cc->mu);
  sl__dev_comm *comm = e->comm;
  sl_status st = e->st;
  char why[sizeof e->why];
  memcpy(why, e->why, sizeof why);
  pthread_mutex_unlock(&cc->mu);
  if (st != SL_OK) return sl__fail(st, "%s", why);
  *out = comm;
  return SL_OK;
}

int sl__dev_comm_cache_count(sl__dev_comm_cache *cc) {
  int n = 0;
  pthread_mutex_lock(&cc->mu);
  for (cache_entry *e = cc->head; e; e = e->next)
    n += e->comm != NULL;
  pthread_mutex_unlock(&cc->mu);
  return n;
}

void sl__dev_comm_cache_abort(sl__dev_comm_cache *cc) {
  if (!cc) return;
  pthread_mutex_lock(&cc->mu);
  for (cache_entry *e = cc->head; e; e = e->next)
    sl__dev_comm_abort(e->comm);
  pthread_mutex_unlock(&cc->mu);
}

void sl__dev_comm_cache_destroy(sl__dev_comm_cache *cc) {
  if (!cc) return;
  while (cc->head) {
    cache_entry *e = cc->head;
    cc->head = e->next;
    sl__dev_comm_destroy(e->comm);
    sl__free(e->name);
    sl__free(e);
  }
  pthread_cond_destroy(&cc->cv);
  pthread_mutex_destroy(&cc->mu);
  sl__free(cc);
}
