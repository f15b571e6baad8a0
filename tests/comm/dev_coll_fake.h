/* A device-collective backend for tests (tests/comm/coll/test_dev_coll.c): host
 * memory, in-process, recording what it is asked. It behaves like NCCL where
 * the layer above depends on it: group calls are per thread; the k-th
 * collective of each rank is matched with the k-th of the others (a
 * disagreement in op, count, type or reduction is counted: NCCL would
 * hang) and runs once all ranks posted it; the k-th send from a to b meets
 * the k-th receive at b from a (a size disagreement is counted). Also an
 * in-memory key-value store with blocking gets, and the host reductions
 * the tests compare with. */
#ifndef SLUICE_TEST_DEV_COLL_FAKE_H
#define SLUICE_TEST_DEV_COLL_FAKE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_thread.h"
#include "dev_coll.h"
#include "mem_kv.h"

#define FMAX 16

static uint64_t seed_of(uint64_t dflt, const char *what) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t s = e && e[0] ? strtoull(e, NULL, 0) : dflt;
  printf("%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", what,
         (unsigned long long)s, (unsigned long long)s);
  return s;
}

/* ---- host reductions (the fake's and the GPU test's reference) --------- */

static size_t tsize(sl__dev_type t) {
  switch (t) {
  case SL__DEV_INT8:
  case SL__DEV_UINT8: return 1;
  case SL__DEV_FLOAT16:
  case SL__DEV_BFLOAT16: return 2;
  case SL__DEV_INT32:
  case SL__DEV_FLOAT32: return 4;
  default: return 8;
  }
}

#define RED(T)                                                                 \
  do {                                                                         \
    T *d = dst;                                                                \
    const T *s = src;                                                          \
    for (size_t k = 0; k < n; k++)                                             \
      d[k] = op == SL__DEV_SUM   ? (T)(d[k] + s[k])                            \
             : op == SL__DEV_MAX ? (s[k] > d[k] ? s[k] : d[k])                 \
                                 : (s[k] < d[k] ? s[k] : d[k]);                \
  } while (0)

static void host_reduce(sl__dev_type t, sl__dev_redop op, void *dst,
                        const void *src, size_t n) {
  switch (t) {
  case SL__DEV_INT8: RED(int8_t); break;
  case SL__DEV_UINT8: RED(uint8_t); break;
  case SL__DEV_INT32: RED(int32_t); break;
  case SL__DEV_INT64: RED(int64_t); break;
  case SL__DEV_FLOAT32: RED(float); break;
  case SL__DEV_FLOAT64: RED(double); break;
  default: fail_msg("host_reduce: type %d", (int)t);
  }
}

/* ---- the fake backend -------------------------------------------------- */

enum { K_AR, K_RS, K_AG };

typedef struct fop {
  int kind, t, r;
  size_t count;
  const void *in;
  void *out;
} fop;

typedef struct fslot {
  fop op[FMAX];
  bool has[FMAX];
  int posted;
} fslot;

typedef struct fp2p {
  int src, dst;
  bool is_send;
  const void *sbuf;
  void *rbuf;
  size_t bytes;
} fp2p;

typedef struct clique {
  struct clique *next;
  uint8_t id[SL__DEV_COLL_ID_MAX];
  int n;
  bool taken[FMAX];
  int nseq[FMAX];
  fslot *slots;
  int nslots;
  fp2p *pend;
  int npend;
  int *log[FMAX]; /* per rank: the tag of every op it issued, in order */
  int nlog[FMAX];
} clique;

typedef struct fcomm {
  clique *q;
  int rank;
} fcomm;

typedef struct fake {
  pthread_mutex_t mu;
  clique *cliques;
  uint64_t ids;
  int mismatches, outside_group, inits, finalizes, destroys, aborts;
  int group_starts, collectives, p2p;
  bool yield, async_error;
  const char *fail_entry;
  int fail_nth, fail_calls;
} fake;

static _Thread_local int t_depth; /* the calling thread's group depth */

static sl_status fake_entry(fake *f, const char *entry) {
  if (f->yield) sched_yield();
  bool fail = f->fail_entry && strcmp(f->fail_entry, entry) == 0 &&
              ++f->fail_calls == f->fail_nth;
  return fail ? sl__fail(SL_ENCCL, "fake: injected %s failure", entry) : SL_OK;
}

static void grow(void **p, int n, size_t es) {
  *p = realloc(*p, (size_t)(n + 1) * es);
  assert_non_null(*p);
}

static void add_log(clique *q, int rank, int tag) {
  grow((void **)&q->log[rank], q->nlog[rank], sizeof(int));
  q->log[rank][q->nlog[rank]++] = tag;
}

static sl_status fake_unique_id(void *ctx, uint8_t *id) {
  fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  memset(id, 0, SL__DEV_COLL_ID_MAX);
  uint64_t v = ++f->ids;
  memcpy(id, &v, sizeof v);
  pthread_mutex_unlock(&f->mu);
  return SL_OK;
}

static sl_status fake_comm_init(void *ctx, int nranks, const uint8_t *id,
                                int rank, int device, void **comm) {
  fake *f = ctx;
  (void)device;
  pthread_mutex_lock(&f->mu);
  sl_status st = fake_entry(f, "comm_init");
  clique *q = f->cliques;
  while (q && memcmp(q->id, id, SL__DEV_COLL_ID_MAX) != 0)
    q = q->next;
  if (st == SL_OK && !q) {
    q = calloc(1, sizeof *q);
    memcpy(q->id, id, SL__DEV_COLL_ID_MAX);
    q->n = nranks;
    q->next = f->cliques;
    f->cliques = q;
  }
  if (st == SL_OK && (q->n != nranks || nranks > FMAX || q->taken[rank]))
    st = sl__fail(SL_ENCCL, "fake: rank %d of %d does not fit", rank, nranks);
  if (st == SL_OK) {
    fcomm *c = calloc(1, sizeof *c);
    c->q = q;
    c->rank = rank;
    q->taken[rank] = true;
    f->inits++;
    *comm = c;
  }
  pthread_mutex_unlock(&f->mu);
  return st;
}

static sl_status fake_comm_finalize(void *ctx, void *comm) {
  fake *f = ctx;
  (void)comm;
  pthread_mutex_lock(&f->mu);
  f->finalizes++;
  pthread_mutex_unlock(&f->mu);
  return SL_OK;
}

static sl_status fake_comm_free(fake *f, void *comm, int *counter) {
  pthread_mutex_lock(&f->mu);
  (*counter)++;
  free(comm);
  pthread_mutex_unlock(&f->mu);
  return SL_OK;
}
static sl_status fake_comm_destroy(void *ctx, void *comm) {
  return fake_comm_free(ctx, comm, &((fake *)ctx)->destroys);
}
static sl_status fake_comm_abort(void *ctx, void *comm) {
  return fake_comm_free(ctx, comm, &((fake *)ctx)->aborts);
}
static sl_status fake_async(void *ctx, void *comm) {
  (void)comm;
  return ((fake *)ctx)->async_error
             ? sl__fail(SL_ENCCL, "fake: a remote rank was lost")
             : SL_OK;
}

static sl_status fake_group_start(void *ctx) {
  fake *f = ctx;
  pthread_mutex_lock(&f->mu);
  f->group_starts++;
  sl_status st = fake_entry(f, "group_start");
  pthread_mutex_unlock(&f->mu);
  if (st == SL_OK) t_depth++;
  return st;
}

static sl_status fake_group_end(void *ctx) {
  fake *f = ctx;
  if (t_depth == 0) return sl__fail(SL_ENCCL, "fake: group end outside");
  t_depth--;
  pthread_mutex_lock(&f->mu);
  sl_status st = fake_entry(f, "group_end");
  pthread_mutex_unlock(&f->mu);
  return st;
}

/* Runs slot s of q once every rank posted it (as NCCL's kernels would). */
static void run_slot(clique *q, fslot *s) {
  fop *o = &s->op[0];
  size_t es = tsize((sl__dev_type)o->t), n = (size_t)q->n;
  size_t in = o->kind == K_AR   ? o->count
              : o->kind == K_RS ? n * o->count
                                : o->count;
  unsigned char *acc = calloc(n * (in + 1), es);
  if (o->kind == K_AG) {
    for (int r = 0; r < q->n; r++)
      memcpy(acc + (size_t)r * in * es, s->op[r].in, in * es);
    for (int r = 0; r < q->n; r++)
      memcpy(s->op[r].out, acc, n * in * es);
  } else {
    memcpy(acc, s->op[0].in, in * es);
    for (int r = 1; r < q->n; r++)
      host_reduce((sl__dev_type)o->t, (sl__dev_redop)o->r, acc, s->op[r].in,
                  in);
    for (int r = 0; r < q->n; r++)
      if (o->kind == K_AR)
        memcpy(s->op[r].out, acc, in * es);
      else
        memcpy(s->op[r].out, acc + (size_t)r * o->count * es, o->count * es);
  }
  free(acc);
}

static sl_status fake_coll(void *ctx, void *comm, int kind, const void *in,
                           void *out, size_t count, sl__dev_type t, int r,
                           const char *entry) {
  fake *f = ctx;
  fcomm *c = comm;
  clique *q = c->q;
  pthread_mutex_lock(&f->mu);
  sl_status st = fake_entry(f, entry);
  if (st != SL_OK) goto out;
  f->collectives++;
  if (t_depth == 0) f->outside_group++;
  int seq = q->nseq[c->rank]++;
  while (q->nslots <= seq) {
    grow((void **)&q->slots, q->nslots, sizeof(fslot));
    memset(&q->slots[q->nslots++], 0, sizeof(fslot));
  }
  fslot *s = &q->slots[seq];
  fop o = {kind, (int)t, r, count, in, out};
  for (int k = 0; k < q->n; k++)
    if (s->has[k] && (s->op[k].kind != kind || s->op[k].count != count ||
                      s->op[k].t != (int)t || s->op[k].r != r))
      f->mismatches++;
  s->op[c->rank] = o;
  s->has[c->rank] = true;
  add_log(q, c->rank, kind * 1000003 + (int)count);
  if (++s->posted == q->n) run_slot(q, s);
out:
  pthread_mutex_unlock(&f->mu);
  return st;
}

static sl_status fake_all_reduce(void *ctx, void *comm, const void *in,
                                 void *out, size_t count, sl__dev_type t,
                                 sl__dev_redop op, sl__stream *s) {
  assert_non_null(s);
  return fake_coll(ctx, comm, K_AR, in, out, count, t, op, "all_reduce");
}
static sl_status fake_reduce_scatter(void *ctx, void *comm, const void *in,
                                     void *out, size_t count, sl__dev_type t,
                                     sl__dev_redop op, sl__stream *s) {
  assert_non_null(s);
  return fake_coll(ctx, comm, K_RS, in, out, count, t, op, "reduce_scatter");
}
static sl_status fake_all_gather(void *ctx, void *comm, const void *in,
                                 void *out, size_t count, sl__dev_type t,
                                 sl__stream *s) {
  assert_non_null(s);
  return fake_coll(ctx, comm, K_AG, in, out, count, t, 0, "all_gather");
}

/* The first pending op of the other direction between the same ranks. */
static sl_status fake_p2p(void *ctx, void *comm, bool is_send, const void *sb,
                          void *rb, size_t count, sl__dev_type t, int peer) {
  fake *f = ctx;
  fcomm *c = comm;
  clique *q = c->q;
  pthread_mutex_lock(&f->mu);
  sl_status st = fake_entry(f, is_send ? "send" : "recv");
  if (st != SL_OK) goto out;
  f->p2p++;
  if (t_depth == 0) f->outside_group++;
  add_log(q, c->rank, (is_send ? 2000000 : 3000000) + peer);
  fp2p me = {
      is_send ? c->rank : peer, is_send ? peer : c->rank, is_send, sb, rb,
      count * tsize(t)};
  int k = 0;
  while (k < q->npend && (q->pend[k].is_send == is_send ||
                          q->pend[k].src != me.src || q->pend[k].dst != me.dst))
    k++;
  if (k == q->npend) {
    grow((void **)&q->pend, q->npend, sizeof(fp2p));
    q->pend[q->npend++] = me;
    goto out;
  }
  fp2p other = q->pend[k];
  memmove(&q->pend[k], &q->pend[k + 1], (size_t)(q->npend - k - 1) * sizeof me);
  q->npend--;
  if (other.bytes != me.bytes)
    f->mismatches++;
  else
    memcpy(is_send ? other.rbuf : rb, is_send ? sb : other.sbuf, me.bytes);
out:
  pthread_mutex_unlock(&f->mu);
  return st;
}

static sl_status fake_send(void *ctx, void *comm, const void *buf, size_t count,
                           sl__dev_type t, int peer, sl__stream *s) {
  assert_non_null(s);
  return fake_p2p(ctx, comm, true, buf, NULL, count, t, peer);
}
static sl_status fake_recv(void *ctx, void *comm, void *buf, size_t count,
                           sl__dev_type t, int peer, sl__stream *s) {
  assert_non_null(s);
  return fake_p2p(ctx, comm, false, NULL, buf, count, t, peer);
}

/* No f16/bf16: the host reference does not reduce them. */
static const sl__dev_coll_vtable fake_vt = {
    .name = "fake",
    .id_bytes = SL__DEV_COLL_ID_MAX,
    .types = SL__DEV_TYPE_BIT(SL__DEV_INT8) | SL__DEV_TYPE_BIT(SL__DEV_UINT8) |
             SL__DEV_TYPE_BIT(SL__DEV_INT32) | SL__DEV_TYPE_BIT(SL__DEV_INT64) |
             SL__DEV_TYPE_BIT(SL__DEV_FLOAT32) |
             SL__DEV_TYPE_BIT(SL__DEV_FLOAT64),
    .unique_id = fake_unique_id,
    .comm_init = fake_comm_init,
    .comm_finalize = fake_comm_finalize,
    .comm_destroy = fake_comm_destroy,
    .comm_abort = fake_comm_abort,
    .comm_async_error = fake_async,
    .group_start = fake_group_start,
    .group_end = fake_group_end,
    .all_reduce = fake_all_reduce,
    .reduce_scatter = fake_reduce_scatter,
    .all_gather = fake_all_gather,
    .send = fake_send,
    .recv = fake_recv,
};

static fake *fake_new(void) {
  fake *f = calloc(1, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  return f;
}

static void fake_free(fake *f) {
  while (f->cliques) {
    clique *q = f->cliques;
    f->cliques = q->next;
    for (int r = 0; r < FMAX; r++)
      free(q->log[r]);
    free(q->slots);
    free(q->pend);
    free(q);
  }
  pthread_mutex_destroy(&f->mu);
  free(f);
}

static sl__dev_coll *engine(fake *f) {
  sl__dev_coll *e = NULL;
  if (sl__dev_coll_create(&fake_vt, f, &e)) fail_msg("%s", sl_last_error());
  return e;
}

static sl__dev_comm *local_comm(sl__dev_coll *e, const char *name, int n) {
  int dev[FMAX];
  for (int k = 0; k < n; k++)
    dev[k] = k;
  sl__dev_comm *c = NULL;
  if (sl__dev_comm_create_local(e, name, n, dev, &c))
    fail_msg("%s", sl_last_error());
  return c;
}

/* Stand-ins for streams: the fake only checks they are there. */
static int g_streams[FMAX];
#define STREAM(k) ((sl__stream *)&g_streams[k])

static inline sl__dev_rank_args rargs(const void *in, void *out,
                                      sl__stream *s) {
  sl__dev_rank_args a = {.in = in, .out = out, .stream = s};
  return a;
}

#endif
