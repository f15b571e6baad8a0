/* Helpers shared by the comm tests: seeds, a completion counter, and a
 * naive element-by-element model of every collective (written with
 * sl_load_element/sl_store_element and index arithmetic only, independent
 * of the box moves the implementation uses). */
#ifndef SLUICE_TEST_COMM_HELPERS_H
#define SLUICE_TEST_COMM_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_int.h"
#include "core_thread.h"

static inline uint64_t test_seed(uint64_t dflt, const char *what) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t s = e && e[0] ? strtoull(e, NULL, 0) : dflt;
  printf("%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", what,
         (unsigned long long)s, (unsigned long long)s);
  fflush(stdout);
  return s;
}

/* Counts callbacks; waits for a number of them. */
typedef struct waiter {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int done, failed;
  sl_status last;
  char msg[512]; /* the last failure's message */
} waiter;

static inline void waiter_init(waiter *w) {
  memset(w, 0, sizeof *w);
  pthread_mutex_init(&w->m, NULL);
  sl__cond_init(&w->cv);
}

static inline void waiter_fini(waiter *w) {
  pthread_mutex_destroy(&w->m);
  pthread_cond_destroy(&w->cv);
}

static inline void waiter_cb(void *arg, sl_status st) {
  waiter *w = arg;
  pthread_mutex_lock(&w->m);
  w->done++;
  if (st != SL_OK) {
    w->failed++;
    w->last = st;
    snprintf(w->msg, sizeof w->msg, "%s", sl_last_error());
  }
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->m);
}

/* Waits for n callbacks in all, at most ms: fails the test when fewer
 * came (a hang shows as a failure, not as ctest's timeout). */
static inline void waiter_wait_within(waiter *w, int n, int ms) {
  uint64_t end = sl__now_ns() + (uint64_t)ms * 1000000ull;
  pthread_mutex_lock(&w->m);
  while (w->done < n) {
    uint64_t now = sl__now_ns();
    if (now >= end || !sl__cond_wait_ns(&w->cv, &w->m, end - now)) break;
  }
  int done = w->done;
  pthread_mutex_unlock(&w->m);
  if (done < n)
    fail_msg("only %d of %d callbacks came within %d ms", done, n, ms);
}

static inline void waiter_wait(waiter *w, int n) {
  waiter_wait_within(w, n, 60000);
}

static inline int64_t dims_numel(int nd, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= d[i];
  return n;
}

/* Flat index -> coordinate, row-major. */
static inline void unflat(int nd, const int64_t *dims, int64_t f, int64_t *c) {
  for (int d = nd - 1; d >= 0; d--) {
    c[d] = dims[d] ? f % dims[d] : 0;
    f = dims[d] ? f / dims[d] : 0;
  }
}

static inline int64_t flat(int nd, const int64_t *dims, const int64_t *c) {
  int64_t f = 0;
  for (int d = 0; d < nd; d++)
    f = f * dims[d] + c[d];
  return f;
}

/* A small random value every dtype holds exactly, and whose sums over up to
 * 8 members stay exact: |v| <= 8, non-negative for u8, 0/1 for bool. */
static inline double small_value(sl_dtype dt, uint64_t r) {
  if (dt == SL_DTYPE_BOOL) return (double)(r & 1);
  if (dt == SL_DTYPE_U8) return (double)(r % 9);
  return (double)((int)(r % 17) - 8);
}

static inline double ref_reduce(sl_dtype dt, sl_reduce_op op, double a,
                                double b) {
  switch (op) {
  case SL_REDUCE_SUM: return dt == SL_DTYPE_BOOL ? (a != 0 || b != 0) : a + b;
  case SL_REDUCE_MAX: return a > b ? a : b;
  case SL_REDUCE_MIN: return a < b ? a : b;
  }
  return 0;
}

/* Copies part `part` of n along axis of src (dims) into dst (a fresh
 * allocation); writes the part's dims into pd. */
static inline void *take_part(sl_dtype dt, int nd, const int64_t *dims,
                              const void *src, int axis, int n, int part,
                              int64_t *pd) {
  int64_t st, ext;
  sl_split_range(dims[axis], n, part, &st, &ext);
  memcpy(pd, dims, sizeof(int64_t) * SL_MAX_DIMS);
  pd[axis] = ext;
  int64_t cnt = dims_numel(nd, pd);
  void *dst = calloc((size_t)(cnt ? cnt : 1), sl_dtype_size(dt));
  for (int64_t f = 0; f < cnt; f++) {
    int64_t c[SL_MAX_DIMS];
    unflat(nd, pd, f, c);
    c[axis] += st;
    sl_store_element(dt, dst, f, sl_load_element(dt, src, flat(nd, dims, c)));
  }
  return dst;
}

/* Compares n elements; fails with the position on the first difference. */
static inline void expect_equal(sl_dtype dt, const void *got, const void *want,
                                int64_t n, const char *what, int member) {
  for (int64_t i = 0; i < n; i++) {
    double g = sl_load_element(dt, got, i), w = sl_load_element(dt, want, i);
    if (g != w)
      fail_msg("%s: member %d element %lld: got %g, want %g", what, member,
               (long long)i, g, w);
  }
}

typedef struct ccase {
  sl__coll_op op;
  sl_dtype dt;
  sl_reduce_op red;
  int n;
  int nd;
  int64_t block[SL_MAX_DIMS];
  int in_axis, out_axis, root;
  sl__coll_algo algo;
} ccase;

static inline void *rand_tensor(sl_dtype dt, int64_t cnt, sl_rng *rng) {
  void *p = calloc((size_t)(cnt ? cnt : 1), sl_dtype_size(dt));
  for (int64_t i = 0; i < cnt; i++)
    sl_store_element(dt, p, i, small_value(dt, sl__rng_next(rng)));
  return p;
}

#define CASE_MAX 8

/* One round of a case: random inputs, the expected outputs, and a
 * collective description (desc.workers points into the struct). */
typedef struct case_data {
  ccase c;
  void *in[CASE_MAX], *out[CASE_MAX], *want[CASE_MAX];
  size_t inb[CASE_MAX], outb[CASE_MAX];
  int workers[CASE_MAX];
  sl__coll_desc desc;
} case_data;

static inline void *dup_bytes(const void *p, size_t n) {
  void *q = malloc(n ? n : 1);
  memcpy(q, p, n);
  return q;
}

/* Fills cd for c: inputs from rng, the expected outputs from the naive
 * model, output buffers poisoned with 0x5a. */
static inline void case_data_make(const ccase *c, sl_rng *rng, int n_workers,
                                  case_data *cd) {
  memset(cd, 0, sizeof *cd);
  cd->c = *c;
  int n = c->n, nd = c->nd;
  sl_dtype dt = c->dt;
  size_t es = sl_dtype_size(dt);
  void *block = NULL;
  int64_t idims[CASE_MAX][SL_MAX_DIMS], odims[CASE_MAX][SL_MAX_DIMS];
  int64_t bn = dims_numel(nd, c->block);
  size_t bb = (size_t)bn * es;
  for (int k = 0; k < n; k++) {
    memcpy(idims[k], c->block, sizeof idims[k]);
    memcpy(odims[k], c->block, sizeof odims[k]);
  }
  switch (c->op) {
  case SL__COLL_ALL_REDUCE:
  case SL__COLL_REDUCE_SCATTER:
    for (int k = 0; k < n; k++)
      cd->in[k] = rand_tensor(dt, bn, rng);
    block = calloc((size_t)(bn ? bn : 1), es);
    for (int64_t i = 0; i < bn; i++) {
      double v = sl_load_element(dt, cd->in[0], i);
      for (int k = 1; k < n; k++)
        v = ref_reduce(dt, c->red, v, sl_load_element(dt, cd->in[k], i));
      sl_store_element(dt, block, i, v);
    }
    for (int k = 0; k < n; k++)
      cd->want[k] =
          c->op == SL__COLL_ALL_REDUCE
              ? dup_bytes(block, bb)
              : take_part(dt, nd, c->block, block, c->out_axis, n, k, odims[k]);
    break;
  case SL__COLL_ALL_GATHER:
  case SL__COLL_ALL_TO_ALL:
    block = rand_tensor(dt, bn, rng);
    for (int k = 0; k < n; k++) {
      cd->in[k] =
          take_part(dt, nd, c->block, block, c->in_axis, n, k, idims[k]);
      cd->want[k] =
          c->op == SL__COLL_ALL_GATHER
              ? dup_bytes(block, bb)
              : take_part(dt, nd, c->block, block, c->out_axis, n, k, odims[k]);
    }
    break;
  case SL__COLL_BROADCAST:
    block = rand_tensor(dt, bn, rng);
    for (int k = 0; k < n; k++) {
      cd->want[k] = dup_bytes(block, bb);
      if (k == c->root) cd->in[k] = dup_bytes(block, bb);
    }
    break;
  default: fail_msg("op %d", (int)c->op); break;
  }
  free(block);
  for (int k = 0; k < n; k++) {
    cd->workers[k] = (int)sl__rng_below(rng, (uint64_t)n_workers);
    cd->inb[k] = cd->in[k] ? (size_t)dims_numel(nd, idims[k]) * es : 0;
    cd->outb[k] = (size_t)dims_numel(nd, odims[k]) * es;
    cd->out[k] = malloc(cd->outb[k] ? cd->outb[k] : 1);
    memset(cd->out[k], 0x5a, cd->outb[k]);
  }
  sl__coll_desc *d = &cd->desc;
  d->name = "t";
  d->op = c->op;
  d->dtype = dt;
  d->reduce = c->red;
  d->n = n;
  d->workers = cd->workers;
  d->block.ndim = nd;
  memcpy(d->block.dims, c->block, sizeof d->block.dims);
  d->in_axis = c->in_axis;
  d->out_axis = c->out_axis;
  d->root = c->root;
  d->algo = c->algo;
}

/* Compares every member's output with the expected one, then poisons the
 * outputs again for the next round. */
static inline void case_data_check(case_data *cd, const char *what) {
  size_t es = sl_dtype_size(cd->c.dt);
  for (int k = 0; k < cd->c.n; k++) {
    expect_equal(cd->c.dt, cd->out[k], cd->want[k], (int64_t)(cd->outb[k] / es),
                 what, k);
    memset(cd->out[k], 0x5a, cd->outb[k]);
  }
}

static inline void case_data_free(case_data *cd) {
  for (int k = 0; k < cd->c.n; k++) {
    free(cd->in[k]);
    free(cd->out[k]);
    free(cd->want[k]);
  }
}

/* A collective of n members over a 1-d block of len elements (workers:
 * n entries), every other field zero. */
static inline sl__coll_desc coll_desc_1d(const char *name, sl__coll_op op,
                                         sl_dtype dt, int n, const int *workers,
                                         int64_t len) {
  sl__coll_desc d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.op = op;
  d.dtype = dt;
  d.n = n;
  d.workers = workers;
  d.block.ndim = 1;
  d.block.dims[0] = len;
  return d;
}

#endif
