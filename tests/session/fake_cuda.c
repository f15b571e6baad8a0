/* The fake CUDA device of fake_cuda.h. */
#include "fake_cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "box.h"
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
  atomic_uint_least64_t all_reduces, cross_all_reduces, comm_aborts;
  atomic_uint_least64_t all_gathers, cross_all_gathers, reduce_scatters,
      cross_reduce_scatters;
  atomic_uint_least64_t order_checks, order_errors;
  atomic_uint_least64_t exchanges, cross_exchanges, p2p_bytes, boxes;
  atomic_int_least64_t live_allocs;
} stats;

/* ---- streams: a worker thread each ----------------------------------------
 */

typedef enum item_kind {
  ITEM_COPY,
  ITEM_SET,
  ITEM_KERNEL,
  ITEM_COLL,
  ITEM_P2P,
  ITEM_BOX
} item_kind;

typedef struct fround fround; /* a collective (below) */
typedef struct fshared fshared;
typedef struct fp2p fp2p; /* a send or receive (below) */

typedef struct item {
  item_kind kind;
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  const sl__op_def *op;
  sl__kernel_ctx k;
  fshared *sh; /* ITEM_COLL, ITEM_P2P: the communicator, the rank */
  fround *r;   /* ITEM_COLL: the collective */
  int rank;
  fp2p *p2p; /* ITEM_P2P: the rank's sends and receives of a group call */
  int n_p2p;
  sl__box_op box; /* ITEM_BOX, on host views */
  struct item *next;
} item;

typedef struct fstream {
  pthread_mutex_t m;
  pthread_cond_t cv;
  item *head, *tail;
  uint64_t queued, done; /* items queued and run so far */
  sl_status failed;      /* a kernel's failure: the stream is broken */
  char why[512];         /* a collective's failure message */
  bool quit;
  pthread_t thread;
  int device;   /* its device's index */
  unsigned rng; /* jitter */
} fstream;

/* Kernels wait a random 0..jitter_us microseconds first (0: none), and
 * those on device d delay_us[d] more. */
static atomic_uint jitter_us;
static atomic_uint delay_us[8];
/* fake_cuda_set_init_delay: ms each group call initialising ranks takes. */
static atomic_uint init_delay_ms;

typedef struct fevent {
  fstream *s;
  uint64_t seq; /* complete once s->done reaches it */
} fevent;

static sl_status run_coll(item *it);
static sl_status run_p2p(item *it);

/* A kernel's wait: the jitter and its device's delay. */
static void kernel_delay(fstream *s) {
  unsigned j = atomic_load(&jitter_us), us = 0;
  if (j) us = (unsigned)rand_r(&s->rng) % j;
  if (s->device >= 0 && s->device < (int)SL_ARRAY_LEN(delay_us))
    us += atomic_load(&delay_us[s->device]);
  if (us) sl__sleep_ns((uint64_t)us * 1000u);
}

static void run_item(item *it, fstream *s) {
  sl_status st = SL_OK;
  switch (it->kind) {
  case ITEM_COPY: memcpy(it->dst, it->src, it->bytes); break;
  case ITEM_SET: memset(it->dst, it->value, it->bytes); break;
  case ITEM_KERNEL:
    kernel_delay(s);
    st = sl__op_run_cpu(it->op, &it->k);
    break;
  case ITEM_COLL: st = run_coll(it); break;
  case ITEM_P2P: st = run_p2p(it); break;
  case ITEM_BOX:
    /* A box is a kernel on a GPU: it waits as kernels do. */
    kernel_delay(s);
    st = sl__box_op_run_host(&it->box);
    break;
  }
  if (st != SL_OK) {
    pthread_mutex_lock(&s->m);
    if (s->failed == SL_OK) {
      s->failed = st;
      if (it->kind != ITEM_KERNEL)
        snprintf(s->why, sizeof s->why, "%s", sl_last_error());
    }
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

static sl_status stream_failure(fstream *s, sl_status failed) {
  pthread_mutex_lock(&s->m);
  char why[sizeof s->why];
  snprintf(why, sizeof why, "%s", s->why[0] ? s->why : "a kernel failed");
  pthread_mutex_unlock(&s->m);
  return sl__fail(failed, "fake cuda: %s", why);
}

static sl_status f_stream_create(void *ctx, sl__stream **out) {
  fstream *s = calloc(1, sizeof *s);
  if (!s) return SL_ENOMEM;
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->cv, NULL);
  static atomic_uint streams;
  s->rng = 0x9e3779b9u * (atomic_fetch_add(&streams, 1) + 1);
  s->device = (int)(intptr_t)ctx - 1;
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
  return failed == SL_OK ? SL_OK : stream_failure(s, failed);
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
  return failed == SL_OK ? SL_OK : stream_failure(e->s, failed);
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
  /* ctx: the index + 1, for the streams' delays */
  return sl__device_wrap(&fake_vt, (void *)(intptr_t)(index + 1),
                         SL_DEVICE_CUDA, index, name, out);
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

/* Queues a box move or fill (kernels/box.h) on the stream, on host views of
 * its buffers; the item keeps its own copy of the operation. */
static sl_status fake_box(const sl__box_op *b, sl__stream *s) {
  SL_CHECK(sl__box_op_check(b));
  int64_t n = 1;
  for (int d = 0; d < b->ndim; d++)
    n *= b->ext[d];
  if (n == 0) return SL_OK; /* nothing to move: nothing to queue */
  if (!((uintptr_t)b->dst & DEVICE_BIT))
    return sl__fail(SL_EINVAL, "fake cuda: box %s host memory",
                    b->src ? "into" : "fill of");
  if (b->src && !((uintptr_t)b->src & DEVICE_BIT))
    return sl__fail(SL_EINVAL, "fake cuda: box from host memory");
  item *it = new_item(ITEM_BOX);
  if (!it) return SL_ENOMEM;
  it->box = *b;
  it->box.dst = to_host(b->dst);
  it->box.src = to_host(b->src);
  atomic_fetch_add(&stats.boxes, 1);
  return enqueue((fstream *)s, it);
}

/* ---- collectives: NCCL-like communicators --------------------------------
 * A communicator is shared state found by its unique id (ids are unique in
 * the test process), so the daemons of one test process, each with its own
 * sl__dev_coll, meet in it as NCCL's processes do. Like NCCL:
 * - init is collective: the group call that initialises a process's ranks
 *   returns once every rank of the communicator has been initialised;
 * - the k-th collective of every rank is one collective; a rank's part runs
 *   when its stream gets there and holds that stream until every rank's
 *   stream has got there (the last reduces, in rank order, as the host
 *   collectives do, so results stay bit-identical);
 * - all-reduce, all-gather and reduce-scatter, with NCCL's counts
 *   (comm/coll/dev_coll.h): an all-gather puts rank j's count elements at part
 *   j of every output, a reduce-scatter gives rank i part i of the
 *   reduction of every rank's nranks * count elements;
 * - an abort frees only its own rank: that rank's waiting part ends, the
 *   others keep waiting until their own process aborts them;
 * - sends and receives (below, "point to point").
 * A part that waits longer than wait_ms() fails its stream, naming the
 * communicator and the collective — where NCCL would hang (ranks issuing
 * collectives in different orders, a process that never comes). */

/* fake_cuda_set_wait_ms: how long every wait of the fake NCCL lasts. */
#define WAIT_MS_DEFAULT 20000u
static atomic_uint wait_ms_v = WAIT_MS_DEFAULT;
static unsigned wait_ms(void) { return atomic_load(&wait_ms_v); }
static uint64_t wait_deadline(void) {
  return sl__now_ns() + (uint64_t)wait_ms() * 1000000u;
}

typedef struct fpair fpair;
typedef struct fmsg fmsg;

struct fround {
  fround *next;
  uint64_t seq;              /* the communicator's k-th collective */
  int posted, arrived, left; /* ranks launched, reached, gone past it */
  bool done;
  sl__dev_coll_op coll; /* ALL_REDUCE, ALL_GATHER or REDUCE_SCATTER */
  sl__dev_type t;
  sl__dev_redop op;
  size_t count;
  const void **in; /* by rank */
  void **out;
};

/* Point to point (below): a pair of ranks, a send published. */
struct fpair {
  fpair *next;
  int from, to;
  uint64_t sent, received; /* sequence numbers given so far */
};

/* A published send, removed by its sender's part. */
struct fmsg {
  fmsg *next;
  int from, to;
  uint64_t seq;
  const void *buf; /* host view */
  size_t bytes;
  bool consumed;
  size_t got; /* once consumed: the receive's size */
};

struct fshared {
  fshared *next;
  uint64_t id;
  int nranks, joined;
  int refs;         /* handles and queued parts */
  bool *gone;       /* by rank: its handle aborted or destroyed */
  bool broken;      /* a rank aborted: no collective writes outputs any more */
  bool cross;       /* its ranks were initialised by several group calls */
  uint64_t *posted; /* by rank: collectives launched */
  fround *rounds;
  fpair *pairs; /* point to point: sequence numbers by ordered pair */
  fmsg *msgs;   /* sends published, not yet removed by their sender */
};

/* One "process": an sl__dev_coll (each daemon's session opens its own).
 * It logs the communicators across processes in the order it created
 * them and in the order it launched on them, and checks when it closes
 * that after each one's first collective (the session's warm-up) it
 * launched on them round by round in creation order — the session's job
 * order (comm/coll/dev_group.c). */
typedef struct fproc {
  uint64_t *created, *launched;
  int n_created, n_launched, cap_created, cap_launched;
  bool aborted; /* a communicator was aborted: rounds end anywhere */
} fproc;

typedef struct fcomm {
  fshared *sh;
  int rank;
} fcomm;

/* Appends v to a log (under reg_m); false when out of memory. */
static bool log_add(uint64_t **a, int *n, int *cap, uint64_t v) {
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 64;
    uint64_t *g = realloc(*a, (size_t)nc * sizeof *g);
    if (!g) return false;
    *a = g;
    *cap = nc;
  }
  (*a)[(*n)++] = v;
  return true;
}

/* Everything shared: one lock (tests are small), one condition. */
static pthread_mutex_t reg_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static fshared *registry;
/* fake_cuda_fail_collective: the part to fail (rank -1: none). Only
 * collectives count and can fail: sends and receives never do. */
static int fail_rank = -1;
static uint64_t fail_seq;

static void reg_init(void) { sl__cond_init(&reg_cv); }

/* Under reg_m. */
static void shared_unref(fshared *sh) {
  if (--sh->refs > 0) return;
  fshared **p = &registry;
  while (*p != sh)
    p = &(*p)->next;
  *p = sh->next;
  while (sh->rounds) {
    fround *r = sh->rounds;
    sh->rounds = r->next;
    free(r->in);
    free(r->out);
    free(r);
  }
  while (sh->pairs) {
    fpair *q = sh->pairs;
    sh->pairs = q->next;
    free(q);
  }
  /* Senders remove their own messages; none should be left, but a freed
   * communicator holds nothing. */
  while (sh->msgs) {
    fmsg *m = sh->msgs;
    sh->msgs = m->next;
    free(m);
  }
  free(sh->gone);
  free(sh->posted);
  free(sh);
}

/* Waits on reg_cv until the deadline; false once it passed. */
static bool reg_wait(uint64_t deadline) {
  uint64_t now = sl__now_ns();
  if (now >= deadline) return false;
  sl__cond_wait_ns(&reg_cv, &reg_m, deadline - now);
  return true;
}

/* The element type's dtype (bool travels as uint8, reduced with max). */
static sl_dtype fc_dtype(sl__dev_type t) {
  switch (t) {
  case SL__DEV_FLOAT64: return SL_DTYPE_F64;
  case SL__DEV_FLOAT16: return SL_DTYPE_F16;
  case SL__DEV_BFLOAT16: return SL_DTYPE_BF16;
  case SL__DEV_INT8: return SL_DTYPE_I8;
  case SL__DEV_UINT8: return SL_DTYPE_U8;
  case SL__DEV_INT32: return SL_DTYPE_I32;
  case SL__DEV_INT64: return SL_DTYPE_I64;
  default: return SL_DTYPE_F32;
  }
}

static sl_reduce_op fc_op(sl__dev_redop op) {
  return op == SL__DEV_MAX   ? SL_REDUCE_MAX
         : op == SL__DEV_MIN ? SL_REDUCE_MIN
                             : SL_REDUCE_SUM;
}

/* A rank's part of a collective, on its stream's worker. */
static sl_status run_coll(item *it) {
  fshared *sh = it->sh;
  fround *r = it->r;
  sl_status st = SL_OK;
  uint64_t deadline = wait_deadline();
  pthread_mutex_lock(&reg_m);
  if (sh->cross && it->rank == fail_rank && r->seq == fail_seq) {
    /* A fault once every other rank is inside: this part never joins,
     * the others wait for it until their processes abort them. */
    fail_rank = -1;
    while (r->arrived < sh->nranks - 1 && !sh->gone[it->rank] &&
           reg_wait(deadline))
      ;
    st = sl__fail(SL_ENCCL,
                  "fake nccl: rank %d failed inside collective %llu of "
                  "communicator %llx (injected)",
                  it->rank, (unsigned long long)r->seq,
                  (unsigned long long)sh->id);
  } else if (++r->arrived < sh->nranks) {
    pthread_cond_broadcast(&reg_cv); /* an injected fault waits for it */
  } else if (!sh->broken) {
    /* The whole result first (outputs may overlap inputs: in place). */
    size_t es = sl_dtype_size(fc_dtype(r->t)), n = (size_t)sh->nranks;
    size_t part = r->count * es,
           total = r->coll == SL__DEV_ALL_REDUCE ? part : n * part;
    unsigned char *acc = malloc(total ? total : 1);
    if (r->coll == SL__DEV_ALL_GATHER) {
      for (size_t j = 0; j < n && part; j++)
        memcpy(acc + j * part, r->in[j], part);
    } else {
      if (total) memcpy(acc, r->in[0], total);
      for (size_t i = 1; i < n; i++)
        sl__elem_reduce(fc_dtype(r->t), fc_op(r->op), acc, r->in[i],
                        (int64_t)(total / es));
    }
    for (size_t i = 0; i < n && part; i++)
      if (r->coll == SL__DEV_REDUCE_SCATTER)
        memcpy(r->out[i], acc + i * part, part);
      else
        memcpy(r->out[i], acc, total);
    free(acc);
    r->done = true;
    pthread_cond_broadcast(&reg_cv);
  }
  while (st == SL_OK && !r->done && !sh->gone[it->rank])
    if (!reg_wait(deadline)) {
      st = sl__fail(SL_ETIMEOUT,
                    "fake nccl: rank %d of communicator %llx waited %u ms in "
                    "its collective %llu (%d of %d ranks there): NCCL would "
                    "hang (collectives issued in different orders? a "
                    "process that never launched it?)",
                    it->rank, (unsigned long long)sh->id, wait_ms(),
                    (unsigned long long)r->seq, r->arrived, sh->nranks);
      break;
    }
  if (++r->left == sh->nranks) {
    fround **p = &sh->rounds;
    while (*p != r)
      p = &(*p)->next;
    *p = r->next;
    free(r->in);
    free(r->out);
    free(r);
  }
  shared_unref(sh);
  pthread_mutex_unlock(&reg_m);
  return st;
}

/* ---- point to point ---------------------------------------------------------
 * Sends and receives, as NCCL's: posted inside a group call, where all of
 * one rank's sends and receives on a communicator become one part on its
 * stream (one stream per rank and group call). The k-th send from rank a
 * to rank b meets the k-th receive at b from a (sequence numbers per
 * ordered pair, given at group_end in call order; across group calls too),
 * and a rank may send to itself. When the part runs it publishes its
 * sends (host views of their buffers), fills each receive from its send
 * once that is published, then waits until its own sends were received: a
 * send completes only when delivered, so its buffer stays valid for the
 * receiver. A send and its receive of different sizes fail both streams
 * (NCCL would corrupt memory); a wait longer than wait_ms() fails the
 * stream where NCCL would hang. After an abort nothing is written, and the
 * part ends once its own rank is aborted, as a collective's. */

struct fp2p {
  bool send;
  int peer;
  void *buf; /* host view */
  size_t bytes;
  uint64_t seq;
  fmsg *m; /* a send's published message */
};

/* Under reg_m: the pair's counters, made on first use; NULL without
 * memory. */
static fpair *pair_get(fshared *sh, int from, int to) {
  fpair *q = sh->pairs;
  while (q && (q->from != from || q->to != to))
    q = q->next;
  if (!q && (q = calloc(1, sizeof *q))) {
    q->from = from;
    q->to = to;
    q->next = sh->pairs;
    sh->pairs = q;
  }
  return q;
}

static fmsg *msg_find(fshared *sh, int from, int to, uint64_t seq) {
  fmsg *m = sh->msgs;
  while (m && (m->from != from || m->to != to || m->seq != seq))
    m = m->next;
  return m;
}

/* A rank's sends and receives of one group call, on its stream's worker. */
static sl_status run_p2p(item *it) {
  fshared *sh = it->sh;
  int me = it->rank;
  unsigned long long id = (unsigned long long)sh->id;
  sl_status st = SL_OK;
  uint64_t deadline = wait_deadline();
  pthread_mutex_lock(&reg_m);
  for (int i = 0; i < it->n_p2p && !sh->gone[me]; i++) {
    fp2p *o = &it->p2p[i];
    if (!o->send) continue;
    fmsg *m = calloc(1, sizeof *m);
    if (!m) {
      st = sl__fail(SL_ENOMEM, "fake nccl: out of memory");
      break;
    }
    *m = (fmsg){sh->msgs, me, o->peer, o->seq, o->buf, o->bytes, false, 0};
    sh->msgs = m;
    o->m = m;
  }
  pthread_cond_broadcast(&reg_cv);
  for (int i = 0; i < it->n_p2p && st == SL_OK; i++) {
    fp2p *o = &it->p2p[i];
    if (o->send) continue;
    fmsg *m = NULL;
    /* A broken communicator writes nothing more: its parts wait for their
     * own abort. */
    while (!sh->gone[me]) {
      if (!sh->broken && (m = msg_find(sh, o->peer, me, o->seq))) break;
      if (!reg_wait(deadline)) {
        st = sl__fail(SL_ETIMEOUT,
                      "fake nccl: rank %d of communicator %llx waited %u ms "
                      "for its receive %llu from rank %d (%zu bytes): NCCL "
                      "would hang (a send never issued? sends and receives "
                      "issued in different orders? a process that never "
                      "launched it?)",
                      me, id, wait_ms(), (unsigned long long)o->seq, o->peer,
                      o->bytes);
        break;
      }
    }
    if (!m) break;
    m->consumed = true;
    m->got = o->bytes;
    pthread_cond_broadcast(&reg_cv);
    if (m->bytes != o->bytes) {
      st = sl__fail(SL_EINVAL,
                    "fake nccl: communicator %llx: rank %d's receive %llu "
                    "from rank %d has %zu bytes, the send has %zu: NCCL "
                    "would corrupt memory",
                    id, me, (unsigned long long)o->seq, o->peer, o->bytes,
                    m->bytes);
      break;
    }
    /* memmove: a rank sending to itself may use one buffer for both. */
    if (o->bytes) memmove(o->buf, m->buf, o->bytes);
    atomic_fetch_add(&stats.p2p_bytes, o->bytes);
  }
  /* A send completes once delivered (or its receiver got it wrong). */
  while (st == SL_OK && !sh->gone[me]) {
    fp2p *wait = NULL;
    for (int i = 0; i < it->n_p2p && st == SL_OK; i++) {
      fp2p *o = &it->p2p[i];
      if (!o->m) continue;
      if (!o->m->consumed) {
        if (!wait) wait = o;
      } else if (o->m->got != o->bytes) {
        st = sl__fail(SL_EINVAL,
                      "fake nccl: communicator %llx: rank %d's send %llu to "
                      "rank %d has %zu bytes, the receive has %zu: NCCL "
                      "would corrupt memory",
                      id, me, (unsigned long long)o->seq, o->peer, o->bytes,
                      o->m->got);
      }
    }
    if (st != SL_OK || !wait) break;
    if (!reg_wait(deadline))
      st = sl__fail(SL_ETIMEOUT,
                    "fake nccl: rank %d of communicator %llx waited %u ms for "
                    "rank %d to receive its send %llu (%zu bytes): NCCL would "
                    "hang (a receive never issued? sends and receives issued "
                    "in different orders? a process that never launched it?)",
                    me, id, wait_ms(), wait->peer,
                    (unsigned long long)wait->seq, wait->bytes);
  }
  /* Received or not, the sends go: the buffers are the caller's again. */
  for (int i = 0; i < it->n_p2p; i++) {
    fmsg *m = it->p2p[i].m;
    if (!m) continue;
    fmsg **p = &sh->msgs;
    while (*p != m)
      p = &(*p)->next;
    *p = m->next;
    free(m);
  }
  shared_unref(sh);
  pthread_mutex_unlock(&reg_m);
  free(it->p2p);
  return st;
}

/* Group calls are per thread, as NCCL's. */
typedef enum pending_kind { P_COLL, P_SEND, P_RECV } pending_kind;

typedef struct pending_op {
  pending_kind kind;
  sl__dev_coll_op coll; /* P_COLL */
  fcomm *c;
  const void *in; /* P_SEND: the buffer */
  void *out;      /* P_RECV: the buffer */
  size_t count;
  sl__dev_type t;
  sl__dev_redop op;
  int peer; /* P_SEND, P_RECV */
  fstream *s;
} pending_op;

/* An all-to-all posts 2 * nranks operations per local rank. */
static _Thread_local pending_op pending[256];
static _Thread_local int n_pending;
/* The first failure of an operation posted in this group call: as NCCL's
 * group_end then, the group call issues nothing and returns it. */
static _Thread_local sl_status pending_err;
static _Thread_local fcomm *pending_init[64];
static _Thread_local int n_init;
static atomic_uint_least64_t id_counter;
static atomic_int fail_ids; /* unique ids still to refuse */

static sl_status fc_unique_id(void *ctx, uint8_t *id) {
  int left = atomic_load(&fail_ids);
  while (left > 0 && !atomic_compare_exchange_weak(&fail_ids, &left, left - 1))
    ;
  if (left > 0) return sl__fail(SL_ENCCL, "fake nccl: no unique id (injected)");
  uint64_t v = atomic_fetch_add(&id_counter, 1) + 1;
  memcpy(id, &v, sizeof v);
  return SL_OK;
}

static sl_status fc_comm_init(void *ctx, int nranks, const uint8_t *id,
                              int rank, int device, void **comm) {
  *comm = NULL;
  if (n_init == (int)SL_ARRAY_LEN(pending_init))
    return sl__fail(SL_EINVAL, "fake nccl: too many inits in a group");
  uint64_t v;
  memcpy(&v, id, sizeof v);
  pthread_once(&reg_once, reg_init);
  fcomm *c = calloc(1, sizeof *c);
  if (!c) return SL_ENOMEM;
  pthread_mutex_lock(&reg_m);
  fshared *sh = registry;
  while (sh && sh->id != v)
    sh = sh->next;
  sl_status st = SL_OK;
  if (!sh && nranks > 0) {
    sh = calloc(1, sizeof *sh);
    bool *gone = calloc((size_t)nranks, sizeof *gone);
    uint64_t *posted = calloc((size_t)nranks, sizeof *posted);
    if (sh && gone && posted) {
      sh->id = v;
      sh->nranks = nranks;
      sh->gone = gone;
      sh->posted = posted;
      sh->next = registry;
      registry = sh;
    } else {
      free(sh);
      free(gone);
      free(posted);
      sh = NULL;
    }
  }
  if (!sh) {
    st = SL_ENOMEM;
  } else if (sh->nranks != nranks || rank < 0 || rank >= nranks) {
    st = sl__fail(SL_EINVAL,
                  "fake nccl: rank %d of %d on a communicator of %d ranks",
                  rank, nranks, sh->nranks);
  } else {
    sh->joined++;
    sh->refs++;
    c->sh = sh;
    c->rank = rank;
    pthread_cond_broadcast(&reg_cv);
  }
  pthread_mutex_unlock(&reg_m);
  if (st != SL_OK) {
    free(c);
    return st;
  }
  pending_init[n_init++] = c;
  *comm = c;
  return SL_OK;
}

/* Frees a handle: its rank is gone; an abort breaks the communicator. */
static sl_status fc_release(void *comm, bool abort) {
  fcomm *c = comm;
  pthread_mutex_lock(&reg_m);
  c->sh->gone[c->rank] = true;
  if (abort) {
    c->sh->broken = true;
    atomic_fetch_add(&stats.comm_aborts, 1);
  }
  pthread_cond_broadcast(&reg_cv);
  shared_unref(c->sh);
  pthread_mutex_unlock(&reg_m);
  free(c);
  return SL_OK;
}

static sl_status fc_comm_destroy(void *ctx, void *comm) {
  return fc_release(comm, false);
}

static sl_status fc_comm_abort(void *ctx, void *comm) {
  fproc *pr = ctx;
  pthread_mutex_lock(&reg_m);
  pr->aborted = true;
  pthread_mutex_unlock(&reg_m);
  return comm ? fc_release(comm, true) : SL_OK;
}

static sl_status fc_group_start(void *ctx) {
  n_pending = 0;
  n_init = 0;
  pending_err = SL_OK;
  return SL_OK;
}

/* The inits of this group call: done when every rank of their
 * communicators has joined. */
static sl_status end_inits(fproc *pr) {
  int n = n_init;
  n_init = 0;
  uint64_t deadline = wait_deadline();
  sl_status st = SL_OK;
  pthread_mutex_lock(&reg_m);
  for (int i = 0; i < n && st == SL_OK; i++) {
    fshared *sh = pending_init[i]->sh;
    int here = 0;
    for (int j = 0; j < n; j++)
      here += pending_init[j]->sh == sh;
    bool first = true; /* log each communicator once */
    for (int j = 0; j < i; j++)
      first &= pending_init[j]->sh != sh;
    if (here < sh->nranks) {
      sh->cross = true;
      if (first &&
          !log_add(&pr->created, &pr->n_created, &pr->cap_created, sh->id))
        st = SL_ENOMEM;
    }
    while (sh->joined < sh->nranks && st == SL_OK)
      if (!reg_wait(deadline))
        st = sl__fail(SL_ETIMEOUT,
                      "fake nccl: init of communicator %llx: %d of %d ranks "
                      "joined in %u ms",
                      (unsigned long long)sh->id, sh->joined, sh->nranks,
                      wait_ms());
  }
  pthread_mutex_unlock(&reg_m);
  return st;
}

/* What the fake does not take in a group call, before anything is issued:
 * collectives and sends or receives of one communicator together, and one
 * rank's sends and receives on several streams. */
static sl_status check_group(int n) {
  for (int i = 0; i < n; i++) {
    const pending_op *p = &pending[i];
    for (int j = 0; j < i; j++) {
      const pending_op *q = &pending[j];
      if (q->c->sh != p->c->sh) continue;
      if ((p->kind == P_COLL) != (q->kind == P_COLL))
        return sl__fail(SL_EUNSUPPORTED,
                        "fake nccl: communicator %llx: collectives and "
                        "sends or receives in one group call (not modelled)",
                        (unsigned long long)p->c->sh->id);
      if (p->kind != P_COLL && q->c->rank == p->c->rank && q->s != p->s)
        return sl__fail(SL_EINVAL,
                        "fake nccl: rank %d of communicator %llx: sends and "
                        "receives on two streams in one group call (NCCL "
                        "takes one stream per rank and group call)",
                        p->c->rank, (unsigned long long)p->c->sh->id);
    }
  }
  return SL_OK;
}

/* Under reg_m: the sends and receives of pending[i]'s rank and
 * communicator, from pending[i] on, as one part on its stream. */
static sl_status launch_p2p(int i, int n) {
  const pending_op *p = &pending[i];
  fshared *sh = p->c->sh;
  int me = p->c->rank, k = 0;
  for (int j = i; j < n; j++)
    k += pending[j].c->sh == sh && pending[j].c->rank == me;
  /* The pairs first: once sequence numbers are given, nothing fails. */
  for (int j = i; j < n; j++) {
    const pending_op *q = &pending[j];
    if (q->c->sh == sh && q->c->rank == me &&
        !pair_get(sh, q->kind == P_SEND ? me : q->peer,
                  q->kind == P_SEND ? q->peer : me))
      return SL_ENOMEM;
  }
  fp2p *ops = calloc((size_t)k, sizeof *ops);
  item *it = new_item(ITEM_P2P);
  if (!ops || !it) {
    free(ops);
    free(it);
    return SL_ENOMEM;
  }
  k = 0;
  for (int j = i; j < n; j++) {
    const pending_op *q = &pending[j];
    if (q->c->sh != sh || q->c->rank != me) continue;
    bool send = q->kind == P_SEND;
    fpair *pair = pair_get(sh, send ? me : q->peer, send ? q->peer : me);
    ops[k++] = (fp2p){send,
                      q->peer,
                      to_host(send ? q->in : q->out),
                      q->count * sl_dtype_size(fc_dtype(q->t)),
                      send ? pair->sent++ : pair->received++,
                      NULL};
  }
  it->sh = sh;
  it->rank = me;
  it->p2p = ops;
  it->n_p2p = k;
  sh->refs++;
  atomic_fetch_add(sh->cross ? &stats.cross_exchanges : &stats.exchanges, 1);
  return enqueue(p->s, it);
}

/* Each launched rank's part goes onto its stream: its next collective, or
 * its sends and receives of the group call. */
static sl_status fc_group_end(void *ctx) {
  fproc *pr = ctx;
  unsigned slow = atomic_load(&init_delay_ms);
  if (n_init && slow) sl__sleep_ns((uint64_t)slow * 1000000u);
  if (n_init) return end_inits(pr);
  int n = n_pending;
  n_pending = 0;
  sl_status st = pending_err;
  pending_err = SL_OK;
  if (st != SL_OK)
    return sl__fail(st, "fake nccl: an operation of the group call failed: "
                        "nothing issued");
  SL_CHECK(check_group(n));
  pthread_mutex_lock(&reg_m);
  for (int i = 0; i < n && st == SL_OK; i++) {
    const pending_op *p = &pending[i];
    fshared *sh = p->c->sh;
    bool first = true; /* log a launch once, not per local rank */
    for (int j = 0; j < i; j++)
      first &= pending[j].c->sh != sh;
    if (sh->cross && first &&
        !log_add(&pr->launched, &pr->n_launched, &pr->cap_launched, sh->id)) {
      st = SL_ENOMEM;
      break;
    }
    if (p->kind != P_COLL) {
      bool rank_first = true; /* one part per rank */
      for (int j = 0; j < i; j++)
        rank_first &=
            pending[j].c->sh != sh || pending[j].c->rank != p->c->rank;
      if (rank_first) st = launch_p2p(i, n);
      continue;
    }
    uint64_t seq = sh->posted[p->c->rank]++;
    fround *r = sh->rounds;
    while (r && r->seq != seq)
      r = r->next;
    if (!r) {
      r = calloc(1, sizeof *r);
      if (!r) {
        st = SL_ENOMEM;
        break;
      }
      r->seq = seq;
      r->coll = p->coll;
      r->t = p->t;
      r->op = p->op;
      r->count = p->count;
      r->in = calloc((size_t)sh->nranks, sizeof *r->in);
      r->out = calloc((size_t)sh->nranks, sizeof *r->out);
      r->next = sh->rounds;
      sh->rounds = r;
    } else if (r->coll != p->coll || r->t != p->t || r->op != p->op ||
               r->count != p->count) {
      /* NCCL would hang or corrupt memory. */
      st = sl__fail(SL_EINVAL,
                    "fake nccl: collective %llu of communicator %llx: rank "
                    "%d launched %s of %zu elements of type %d, op %d; "
                    "another rank %s of %zu, type %d, op %d",
                    (unsigned long long)seq, (unsigned long long)sh->id,
                    p->c->rank, sl__dev_coll_op_name(p->coll), p->count,
                    (int)p->t, (int)p->op, sl__dev_coll_op_name(r->coll),
                    r->count, (int)r->t, (int)r->op);
      break;
    }
    r->in[p->c->rank] = to_host(p->in);
    r->out[p->c->rank] = to_host(p->out);
    r->posted++;
    item *it = new_item(ITEM_COLL);
    if (!it) {
      st = SL_ENOMEM;
      break;
    }
    it->sh = sh;
    it->r = r;
    it->rank = p->c->rank;
    sh->refs++;
    atomic_fetch_add(
        p->coll == SL__DEV_ALL_GATHER
            ? (sh->cross ? &stats.cross_all_gathers : &stats.all_gathers)
        : p->coll == SL__DEV_REDUCE_SCATTER
            ? (sh->cross ? &stats.cross_reduce_scatters
                         : &stats.reduce_scatters)
        : sh->cross ? &stats.cross_all_reduces
                    : &stats.all_reduces,
        1);
    enqueue(p->s, it);
  }
  pthread_mutex_unlock(&reg_m);
  return st;
}

/* A failed post: the group call issues nothing. */
static sl_status post_failed(sl_status st) {
  if (pending_err == SL_OK) pending_err = st;
  return st;
}

/* Queues a rank's part for the group call (fc_group_end). */
static sl_status fc_post(sl__dev_coll_op coll, void *comm, const void *in,
                         void *out, size_t count, sl__dev_type t,
                         sl__dev_redop op, sl__stream *s) {
  if (n_pending == (int)SL_ARRAY_LEN(pending))
    return post_failed(
        sl__fail(SL_EINVAL, "fake nccl: too many operations in a group"));
  if ((in && !((uintptr_t)in & DEVICE_BIT)) ||
      (out && !((uintptr_t)out & DEVICE_BIT)))
    return post_failed(sl__fail(SL_EINVAL, "fake nccl: %s on host memory",
                                sl__dev_coll_op_name(coll)));
  pending[n_pending++] = (pending_op){.kind = P_COLL,
                                      .coll = coll,
                                      .c = comm,
                                      .in = in,
                                      .out = out,
                                      .count = count,
                                      .t = t,
                                      .op = op,
                                      .s = (fstream *)s};
  return SL_OK;
}

static sl_status fc_all_reduce(void *ctx, void *comm, const void *in, void *out,
                               size_t count, sl__dev_type t, sl__dev_redop op,
                               sl__stream *s) {
  return fc_post(SL__DEV_ALL_REDUCE, comm, in, out, count, t, op, s);
}
static sl_status fc_reduce_scatter(void *ctx, void *comm, const void *in,
                                   void *out, size_t count, sl__dev_type t,
                                   sl__dev_redop op, sl__stream *s) {
  return fc_post(SL__DEV_REDUCE_SCATTER, comm, in, out, count, t, op, s);
}
static sl_status fc_all_gather(void *ctx, void *comm, const void *in, void *out,
                               size_t count, sl__dev_type t, sl__stream *s) {
  return fc_post(SL__DEV_ALL_GATHER, comm, in, out, count, t, SL__DEV_SUM, s);
}

/* Queues a send or receive for the group call (fc_group_end). */
static sl_status fc_post_p2p(pending_kind kind, void *comm, void *buf,
                             size_t count, sl__dev_type t, int peer,
                             sl__stream *s) {
  fcomm *c = comm;
  const char *what = kind == P_SEND ? "send to" : "receive from";
  if (n_pending == (int)SL_ARRAY_LEN(pending))
    return post_failed(
        sl__fail(SL_EINVAL, "fake nccl: too many operations in a group"));
  if (peer < 0 || peer >= c->sh->nranks)
    return post_failed(sl__fail(SL_EINVAL,
                                "fake nccl: rank %d's %s rank %d: the "
                                "communicator has %d ranks",
                                c->rank, what, peer, c->sh->nranks));
  if ((buf && !((uintptr_t)buf & DEVICE_BIT)) || (count && !buf))
    return post_failed(sl__fail(SL_EINVAL,
                                "fake nccl: rank %d's %s rank %d: %s", c->rank,
                                what, peer, buf ? "host memory" : "no buffer"));
  if (count > SIZE_MAX / sl_dtype_size(fc_dtype(t)))
    return post_failed(sl__fail(SL_EINVAL,
                                "fake nccl: rank %d's %s rank %d: %zu "
                                "elements overflow a size",
                                c->rank, what, peer, count));
  pending[n_pending++] = (pending_op){.kind = kind,
                                      .c = c,
                                      .in = kind == P_SEND ? buf : NULL,
                                      .out = kind == P_RECV ? buf : NULL,
                                      .count = count,
                                      .t = t,
                                      .peer = peer,
                                      .s = (fstream *)s};
  return SL_OK;
}

static sl_status fc_send(void *ctx, void *comm, const void *buf, size_t count,
                         sl__dev_type t, int peer, sl__stream *s) {
  return fc_post_p2p(P_SEND, comm, (void *)buf, count, t, peer, s);
}
static sl_status fc_recv(void *ctx, void *comm, void *buf, size_t count,
                         sl__dev_type t, int peer, sl__stream *s) {
  return fc_post_p2p(P_RECV, comm, buf, count, t, peer, s);
}

/* The check of fproc's header, when the process closes. */
static void fc_close(void *ctx) {
  fproc *pr = ctx;
  int n = pr->n_created, k = 0;
  bool ok = true;
  if (n > 0 && !pr->aborted) {
    bool *warm = calloc((size_t)n, sizeof *warm);
    for (int i = 0; i < pr->n_launched && ok && warm; i++) {
      int c = 0;
      while (c < n && pr->created[c] != pr->launched[i])
        c++;
      if (c < n && !warm[c]) {
        warm[c] = true; /* its first: the warm-up */
        continue;
      }
      ok = c < n && c == k % n;
      if (!ok)
        fprintf(stderr,
                "fake nccl: launch %d of this process is on communicator "
                "%llx, but the job's order has %llx next\n",
                i, (unsigned long long)pr->launched[i],
                (unsigned long long)pr->created[k % n]);
      k++;
    }
    free(warm);
    atomic_fetch_add(&stats.order_checks, 1);
    if (!ok) atomic_fetch_add(&stats.order_errors, 1);
  }
  free(pr->created);
  free(pr->launched);
  free(pr);
}

static const sl__dev_coll_vtable fake_coll_vt = {
    .name = "fake-nccl",
    .id_bytes = 8,
    .types =
        SL__DEV_TYPE_BIT(SL__DEV_FLOAT32) | SL__DEV_TYPE_BIT(SL__DEV_FLOAT64) |
        SL__DEV_TYPE_BIT(SL__DEV_FLOAT16) | SL__DEV_TYPE_BIT(SL__DEV_BFLOAT16) |
        SL__DEV_TYPE_BIT(SL__DEV_INT8) | SL__DEV_TYPE_BIT(SL__DEV_UINT8) |
        SL__DEV_TYPE_BIT(SL__DEV_INT32) | SL__DEV_TYPE_BIT(SL__DEV_INT64),
    .unique_id = fc_unique_id,
    .comm_init = fc_comm_init,
    .comm_destroy = fc_comm_destroy,
    .comm_abort = fc_comm_abort,
    .group_start = fc_group_start,
    .group_end = fc_group_end,
    .all_reduce = fc_all_reduce,
    .reduce_scatter = fc_reduce_scatter,
    .all_gather = fc_all_gather,
    .send = fc_send,
    .recv = fc_recv,
    .close = fc_close,
};

static sl_status fake_coll_open(sl__dev_coll **out) {
  fproc *pr = calloc(1, sizeof *pr);
  if (!pr) return SL_ENOMEM;
  sl_status st = sl__dev_coll_create(&fake_coll_vt, pr, out);
  if (st != SL_OK) free(pr);
  return st;
}

static const sl__session_backend fake_backend = {fake_open, fake_run_op,
                                                 fake_coll_open, fake_box};

const struct sl__session_backend *fake_cuda_backend(void) {
  return &fake_backend;
}

bool fake_cuda_settle(void) {
  for (int i = 0; i < 10000 && (atomic_load(&stats.live_allocs) != 0 ||
                                fake_cuda_live_comms() != 0);
       i++)
    sl__sleep_ns(1000000);
  return atomic_load(&stats.live_allocs) == 0 && fake_cuda_live_comms() == 0;
}

void fake_cuda_install(void) {
  /* A daemon may still be freeing an earlier test's job on its own thread:
   * let it finish before the counters start again, which also orders its
   * last updates before the resets (TSan saw a memset here race with such
   * a free). */
  fake_cuda_settle();
  atomic_uint_least64_t *counters[] = {&stats.kernels,
                                       &stats.h2d,
                                       &stats.d2h,
                                       &stats.d2d,
                                       &stats.memsets,
                                       &stats.all_reduces,
                                       &stats.cross_all_reduces,
                                       &stats.comm_aborts,
                                       &stats.all_gathers,
                                       &stats.cross_all_gathers,
                                       &stats.reduce_scatters,
                                       &stats.cross_reduce_scatters,
                                       &stats.order_checks,
                                       &stats.order_errors,
                                       &stats.exchanges,
                                       &stats.cross_exchanges,
                                       &stats.p2p_bytes,
                                       &stats.boxes};
  for (size_t i = 0; i < SL_ARRAY_LEN(counters); i++)
    atomic_store(counters[i], 0);
  atomic_store(&stats.live_allocs, 0);
  atomic_store(&jitter_us, 0);
  for (size_t d = 0; d < SL_ARRAY_LEN(delay_us); d++)
    atomic_store(&delay_us[d], 0);
  atomic_store(&init_delay_ms, 0);
  atomic_store(&wait_ms_v, WAIT_MS_DEFAULT);
  atomic_store(&fail_ids, 0);
  fake_cuda_fail_collective(-1, 0);
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
  out->cross_all_reduces = atomic_load(&stats.cross_all_reduces);
  out->comm_aborts = atomic_load(&stats.comm_aborts);
  out->all_gathers = atomic_load(&stats.all_gathers);
  out->cross_all_gathers = atomic_load(&stats.cross_all_gathers);
  out->reduce_scatters = atomic_load(&stats.reduce_scatters);
  out->cross_reduce_scatters = atomic_load(&stats.cross_reduce_scatters);
  out->order_checks = atomic_load(&stats.order_checks);
  out->order_errors = atomic_load(&stats.order_errors);
  out->exchanges = atomic_load(&stats.exchanges);
  out->cross_exchanges = atomic_load(&stats.cross_exchanges);
  out->p2p_bytes = atomic_load(&stats.p2p_bytes);
  out->boxes = atomic_load(&stats.boxes);
}

void fake_cuda_set_device_delay(int device, unsigned us) {
  if (device >= 0 && device < (int)SL_ARRAY_LEN(delay_us))
    atomic_store(&delay_us[device], us);
}

void fake_cuda_set_jitter(unsigned us) { atomic_store(&jitter_us, us); }

void fake_cuda_fail_unique_ids(int n) { atomic_store(&fail_ids, n); }

void fake_cuda_fail_collective(int rank, uint64_t seq) {
  pthread_mutex_lock(&reg_m);
  fail_rank = rank;
  fail_seq = seq;
  pthread_mutex_unlock(&reg_m);
}

int fake_cuda_live_comms(void) {
  pthread_mutex_lock(&reg_m);
  int n = 0;
  for (fshared *sh = registry; sh; sh = sh->next)
    n++;
  pthread_mutex_unlock(&reg_m);
  return n;
}

void fake_cuda_set_init_delay(unsigned ms) { atomic_store(&init_delay_ms, ms); }

void fake_cuda_set_wait_ms(unsigned ms) {
  atomic_store(&wait_ms_v, ms ? ms : WAIT_MS_DEFAULT);
}
