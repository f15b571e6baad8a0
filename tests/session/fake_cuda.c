/* The fake CUDA device of fake_cuda.h. */
#include "fake_cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sbp_int.h"
#include "session_int.h"

#define DEVICE_BIT ((uintptr_t)1 << 63)

static void *to_host(const void *p) {
  return p ? (void *)((uintptr_t)p & ~DEVICE_BIT) : NULL;
}
static void *to_device(void *p) {
  return p ? (void *)((uintptr_t)p | DEVICE_BIT) : NULL;
}

static struct {
  atomic_uint_least64_t kernels, h2d, d2h, d2d, memsets;
  atomic_uint_least64_t all_reduces;
  atomic_int_least64_t live_allocs;
} stats;

/* ---- streams: a worker thread each ----------------------------------------
 */

typedef enum item_kind {
  ITEM_COPY,
  ITEM_SET,
  ITEM_KERNEL,
  ITEM_COLL
} item_kind;

/* One all-reduce launch: every rank's stream runs its part, which waits
 * (blocking that stream, as an NCCL kernel does) until all ranks are there;
 * the last one reduces in rank order, as the host collectives do. */
typedef struct round {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int n, arrived, left;
  bool done;
  sl_dtype dt;
  sl_reduce_op op;
  size_t count;
  const void **in;
  void **out;
} round;

typedef struct item {
  item_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  const sl__op_def *op;
  sl__kernel_ctx k;
  round *r; /* ITEM_COLL */
  struct item *next;
} item;

typedef struct fstream {
  pthread_mutex_t m;
  pthread_cond_t cv;
  item *head, *tail;
  uint64_t queued, done; /* items queued and run so far */
  sl_status failed;      /* a kernel's failure: the stream is broken */
  bool quit;
  pthread_t thread;
} fstream;

typedef struct fevent {
  fstream *s;
  uint64_t seq; /* complete once s->done reaches it */
} fevent;

static void run_round(round *r) {
  pthread_mutex_lock(&r->m);
  if (++r->arrived == r->n) {
    size_t bytes = r->count * sl_dtype_size(r->dt);
    void *acc = malloc(bytes ? bytes : 1);
    if (bytes) memcpy(acc, r->in[0], bytes);
    for (int i = 1; i < r->n; i++)
      sl__elem_reduce(r->dt, r->op, acc, r->in[i], (int64_t)r->count);
    for (int i = 0; i < r->n; i++)
      if (bytes) memcpy(r->out[i], acc, bytes);
    free(acc);
    r->done = true;
    pthread_cond_broadcast(&r->cv);
  }
  while (!r->done)
    pthread_cond_wait(&r->cv, &r->m);
  bool last = --r->left == 0;
  pthread_mutex_unlock(&r->m);
  if (!last) return;
  pthread_mutex_destroy(&r->m);
  pthread_cond_destroy(&r->cv);
  free(r->in);
  free(r->out);
  free(r);
}

static void run_item(item *it, fstream *s) {
  sl_status st = SL_OK;
  switch (it->kind) {
  case ITEM_COPY: memcpy(it->dst, it->src, it->bytes); break;
  case ITEM_SET: memset(it->dst, it->value, it->bytes); break;
  case ITEM_KERNEL: st = sl__op_run_cpu(it->op, &it->k); break;
  case ITEM_COLL: run_round(it->r); break;
  }
  if (st != SL_OK) {
    pthread_mutex_lock(&s->m);
    if (s->failed == SL_OK) s->failed = st;
    pthread_mutex_unlock(&s->m);
  }
}

static void *stream_main(void *arg) {
  fstream *s = arg;
  pthread_mutex_lock(&s->m);
  for (;;) {
    while (!s->head && !s->quit)
      pthread_cond_wait(&s->cv, &s->m);
    if (!s->head) break;
    item *it = s->head;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->m);
    run_item(it, s);
    free(it);
    pthread_mutex_lock(&s->m);
    s->done++;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->m);
  return NULL;
}

static sl_status enqueue(fstream *s, item *it) {
  pthread_mutex_lock(&s->m);
  if (s->tail)
    s->tail->next = it;
  else
    s->head = it;
  s->tail = it;
  s->queued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->m);
  return SL_OK;
}

static item *new_item(item_kind kind) {
  item *it = calloc(1, sizeof *it);
  if (it) it->kind = kind;
  return it;
}

/* ---- the device table ------------------------------------------------------
 */

static sl_status f_alloc(void *ctx, size_t bytes, void **out) {
  void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) return sl__fail(SL_ENOMEM, "fake cuda: out of memory");
  atomic_fetch_add(&stats.live_allocs, 1);
  *out = to_device(p);
  return SL_OK;
}

static sl_status f_free(void *ctx, void *p) {
  if (p) atomic_fetch_sub(&stats.live_allocs, 1);
  free(to_host(p));
  return SL_OK;
}

static sl_status f_host_alloc(void *ctx, size_t bytes, void **out) {
  *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
  return *out ? SL_OK : sl__fail(SL_ENOMEM, "fake cuda: out of host memory");
}

static sl_status f_host_free(void *ctx, void *p) {
  free(p);
  return SL_OK;
}

static sl_status f_memcpy(void *ctx, void *dst, const void *src, size_t bytes,
                          sl__copy_kind kind, sl__stream *s) {
  /* The direction must match the pointers: a host pointer where device
   * memory is expected (or back) is a bug in the caller. */
  bool dst_dev = (uintptr_t)dst & DEVICE_BIT,
       src_dev = (uintptr_t)src & DEVICE_BIT;
  bool ok = kind == SL__COPY_H2D   ? dst_dev && !src_dev
            : kind == SL__COPY_D2H ? !dst_dev && src_dev
                                   : dst_dev && src_dev;
  if (!ok)
    return sl__fail(SL_EINVAL,
                    "fake cuda: copy kind %d from %p to %p: the wrong kind of "
                    "memory",
                    (int)kind, src, dst);
  item *it = new_item(ITEM_COPY);
  if (!it) return SL_ENOMEM;
  it->dst = to_host(dst);
  it->src = to_host(src);
  it->bytes = bytes;
  atomic_fetch_add(kind == SL__COPY_H2D   ? &stats.h2d
                   : kind == SL__COPY_D2H ? &stats.d2h
                                          : &stats.d2d,
                   1);
  return enqueue((fstream *)s, it);
}

static sl_status f_memset(void *ctx, void *dst, int value, size_t bytes,
                          sl__stream *s) {
  if (!((uintptr_t)dst & DEVICE_BIT))
    return sl__fail(SL_EINVAL, "fake cuda: memset of host memory");
  item *it = new_item(ITEM_SET);
  if (!it) return SL_ENOMEM;
  it->dst = to_host(dst);
  it->value = value;
  it->bytes = bytes;
  atomic_fetch_add(&stats.memsets, 1);
  return enqueue((fstream *)s, it);
}

static sl_status f_stream_create(void *ctx, sl__stream **out) {
  fstream *s = calloc(1, sizeof *s);
  if (!s) return SL_ENOMEM;
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return sl__fail(SL_EINTERNAL, "fake cuda: no stream thread");
  }
  *out = (sl__stream *)s;
  return SL_OK;
}

static sl_status f_stream_destroy(void *ctx, sl__stream *st) {
  fstream *s = (fstream *)st;
  pthread_mutex_lock(&s->m);
  s->quit = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->m);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->m);
  pthread_cond_destroy(&s->cv);
  free(s);
  return SL_OK;
}

static sl_status f_stream_sync(void *ctx, sl__stream *st) {
  fstream *s = (fstream *)st;
  pthread_mutex_lock(&s->m);
  while (s->done < s->queued)
    pthread_cond_wait(&s->cv, &s->m);
  sl_status failed = s->failed;
  pthread_mutex_unlock(&s->m);
  return failed == SL_OK ? SL_OK
                         : sl__fail(failed, "fake cuda: a kernel failed");
}

static sl_status f_event_create(void *ctx, sl__event **out) {
  fevent *e = calloc(1, sizeof *e);
  if (!e) return SL_ENOMEM;
  *out = (sl__event *)e;
  return SL_OK;
}

static sl_status f_event_destroy(void *ctx, sl__event *e) {
  free(e);
  return SL_OK;
}

static sl_status f_event_record(void *ctx, sl__event *ev, sl__stream *st) {
  fevent *e = (fevent *)ev;
  fstream *s = (fstream *)st;
  pthread_mutex_lock(&s->m);
  e->s = s;
  e->seq = s->queued;
  pthread_mutex_unlock(&s->m);
  return SL_OK;
}

static sl_status f_event_query(void *ctx, sl__event *ev, bool *done) {
  fevent *e = (fevent *)ev;
  if (!e->s) {
    *done = true;
    return SL_OK;
  }
  pthread_mutex_lock(&e->s->m);
  *done = e->s->done >= e->seq;
  sl_status failed = *done ? e->s->failed : SL_OK;
  pthread_mutex_unlock(&e->s->m);
  /* As CUDA: a failed kernel is reported by the queries after it. */
  return failed == SL_OK ? SL_OK
                         : sl__fail(failed, "fake cuda: a kernel failed");
}

static sl_status f_event_sync(void *ctx, sl__event *ev) {
  fevent *e = (fevent *)ev;
  if (!e->s) return SL_OK;
  pthread_mutex_lock(&e->s->m);
  while (e->s->done < e->seq)
    pthread_cond_wait(&e->s->cv, &e->s->m);
  pthread_mutex_unlock(&e->s->m);
  return SL_OK;
}

static const sl__device_vtable fake_vt = {
    .name = "cuda",
    .alloc = f_alloc,
    .free = f_free,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .memcpy_async = f_memcpy,
    .memset_async = f_memset,
    .stream_create = f_stream_create,
    .stream_destroy = f_stream_destroy,
    .stream_synchronize = f_stream_sync,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_query = f_event_query,
    .event_synchronize = f_event_sync,
};

static sl_status fake_open(int index, sl__device **out) {
  char name[24];
  snprintf(name, sizeof name, "cuda:%d", index);
  return sl__device_wrap(&fake_vt, NULL, SL_DEVICE_CUDA, index, name, out);
}

/* Queues the op's CPU kernel on the stream, on host views of its tensors. */
static sl_status fake_run_op(const sl__op_def *op, sl__kernel_ctx *k,
                             sl__caching_alloc *mem, sl__stream *s) {
  item *it = new_item(ITEM_KERNEL);
  if (!it) return SL_ENOMEM;
  it->op = op;
  it->k = *k;
  for (int i = 0; i < k->n_in; i++) {
    if (k->in[i] && !((uintptr_t)k->in[i] & DEVICE_BIT)) {
      free(it);
      return sl__fail(SL_EINVAL, "fake cuda: op '%s' input %d is host memory",
                      op->name, i);
    }
    it->k.in[i] = to_host(k->in[i]);
  }
  for (int j = 0; j < k->n_out; j++) {
    if (k->out[j] && !((uintptr_t)k->out[j] & DEVICE_BIT)) {
      free(it);
      return sl__fail(SL_EINVAL, "fake cuda: op '%s' output %d is host memory",
                      op->name, j);
    }
    it->k.out[j] = to_host(k->out[j]);
  }
  atomic_fetch_add(&stats.kernels, 1);
  return enqueue((fstream *)s, it);
}

/* ---- collectives: all-reduce between fake devices --------------------------
 */

typedef struct fcomm {
  int nranks, rank;
} fcomm;

typedef struct pending_op {
  fcomm *c;
  const void *in;
  void *out;
  size_t count;
  sl__dev_type t;
  sl__dev_redop op;
  fstream *s;
} pending_op;

/* Group calls are per thread, as NCCL's. */
static _Thread_local pending_op pending[64];
static _Thread_local int n_pending;
static atomic_uint_least64_t id_counter;

static sl_status fc_unique_id(void *ctx, uint8_t *id) {
  uint64_t v = atomic_fetch_add(&id_counter, 1);
  memcpy(id, &v, sizeof v);
  return SL_OK;
}

static sl_status fc_comm_init(void *ctx, int nranks, const uint8_t *id,
                              int rank, int device, void **comm) {
  fcomm *c = calloc(1, sizeof *c);
  if (!c) return SL_ENOMEM;
  c->nranks = nranks;
  c->rank = rank;
  *comm = c;
  return SL_OK;
}

static sl_status fc_comm_free(void *ctx, void *comm) {
  free(comm);
  return SL_OK;
}

static sl_status fc_group_start(void *ctx) {
  n_pending = 0;
  return SL_OK;
}

static sl_dtype fc_dtype(sl__dev_type t) {
  switch (t) {
  case SL__DEV_FLOAT64: return SL_DTYPE_F64;
  case SL__DEV_INT32: return SL_DTYPE_I32;
  case SL__DEV_INT64: return SL_DTYPE_I64;
  default: return SL_DTYPE_F32;
  }
}

/* Every rank of one launch gets its part of one round on its stream. */
static sl_status fc_group_end(void *ctx) {
  int n = n_pending;
  n_pending = 0;
  if (n == 0) return SL_OK;
  if (n != pending[0].c->nranks)
    return sl__fail(SL_EINVAL, "fake nccl: %d of %d ranks in one launch", n,
                    pending[0].c->nranks);
  round *r = calloc(1, sizeof *r);
  if (!r) return SL_ENOMEM;
  pthread_mutex_init(&r->m, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->n = r->left = n;
  r->dt = fc_dtype(pending[0].t);
  r->op = pending[0].op == SL__DEV_MAX   ? SL_REDUCE_MAX
          : pending[0].op == SL__DEV_MIN ? SL_REDUCE_MIN
                                         : SL_REDUCE_SUM;
  r->count = pending[0].count;
  r->in = calloc((size_t)n, sizeof *r->in);
  r->out = calloc((size_t)n, sizeof *r->out);
  for (int i = 0; i < n; i++) {
    const pending_op *p = &pending[i];
    r->in[p->c->rank] = to_host(p->in);
    r->out[p->c->rank] = to_host(p->out);
  }
  for (int i = 0; i < n; i++) {
    item *it = new_item(ITEM_COLL);
    it->r = r;
    enqueue(pending[i].s, it);
  }
  return SL_OK;
}

static sl_status fc_all_reduce(void *ctx, void *comm, const void *in, void *out,
                               size_t count, sl__dev_type t, sl__dev_redop op,
                               sl__stream *s) {
  if (n_pending == (int)SL_ARRAY_LEN(pending))
    return sl__fail(SL_EINVAL, "fake nccl: too many operations in a group");
  if ((in && !((uintptr_t)in & DEVICE_BIT)) ||
      (out && !((uintptr_t)out & DEVICE_BIT)))
    return sl__fail(SL_EINVAL, "fake nccl: all_reduce on host memory");
  atomic_fetch_add(&stats.all_reduces, 1);
  pending[n_pending++] =
      (pending_op){comm, in, out, count, t, op, (fstream *)s};
  return SL_OK;
}

static sl_status fc_only_all_reduce(void) {
  return sl__fail(SL_EUNSUPPORTED, "fake nccl: only all_reduce");
}
static sl_status fc_reduce_scatter(void *ctx, void *comm, const void *in,
                                   void *out, size_t count, sl__dev_type t,
                                   sl__dev_redop op, sl__stream *s) {
  return fc_only_all_reduce();
}
static sl_status fc_all_gather(void *ctx, void *comm, const void *in, void *out,
                               size_t count, sl__dev_type t, sl__stream *s) {
  return fc_only_all_reduce();
}
static sl_status fc_send(void *ctx, void *comm, const void *buf, size_t count,
                         sl__dev_type t, int peer, sl__stream *s) {
  return fc_only_all_reduce();
}
static sl_status fc_recv(void *ctx, void *comm, void *buf, size_t count,
                         sl__dev_type t, int peer, sl__stream *s) {
  return fc_only_all_reduce();
}

static const sl__dev_coll_vtable fake_coll_vt = {
    .name = "fake-nccl",
    .id_bytes = 8,
    .types = SL__DEV_TYPE_BIT(SL__DEV_FLOAT32) |
             SL__DEV_TYPE_BIT(SL__DEV_FLOAT64) |
             SL__DEV_TYPE_BIT(SL__DEV_INT32) | SL__DEV_TYPE_BIT(SL__DEV_INT64),
    .unique_id = fc_unique_id,
    .comm_init = fc_comm_init,
    .comm_destroy = fc_comm_free,
    .comm_abort = fc_comm_free,
    .group_start = fc_group_start,
    .group_end = fc_group_end,
    .all_reduce = fc_all_reduce,
    .reduce_scatter = fc_reduce_scatter,
    .all_gather = fc_all_gather,
    .send = fc_send,
    .recv = fc_recv,
};

static sl_status fake_coll_open(sl__dev_coll **out) {
  return sl__dev_coll_create(&fake_coll_vt, NULL, out);
}

static const sl__session_backend fake_backend = {fake_open, fake_run_op,
                                                 fake_coll_open};

void fake_cuda_install(void) {
  memset(&stats, 0, sizeof stats);
  sl__session_set_backend(&fake_backend);
}

void fake_cuda_uninstall(void) { sl__session_set_backend(NULL); }

void fake_cuda_get_stats(fake_cuda_stats *out) {
  out->kernels = atomic_load(&stats.kernels);
  out->h2d = atomic_load(&stats.h2d);
  out->d2h = atomic_load(&stats.d2h);
  out->d2d = atomic_load(&stats.d2d);
  out->memsets = atomic_load(&stats.memsets);
  out->live_allocs = (uint64_t)atomic_load(&stats.live_allocs);
  out->all_reduces = atomic_load(&stats.all_reduces);
}
