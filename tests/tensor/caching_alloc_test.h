/* Shared by the caching allocator's tests: a host-memory raw allocator
 * that counts its calls and can be told to fail, small pool sizes that
 * reach every path with few bytes, and helpers that assert. */
#ifndef SLUICE_TEST_CACHING_ALLOC_H
#define SLUICE_TEST_CACHING_ALLOC_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caching_alloc.h"
#include "core_int.h"

/* ---- a counting raw allocator -----------------------------------------------
 */

#define RAW_MAX 4096

typedef struct raw_seg {
  uintptr_t base;
  size_t size;
} raw_seg;

typedef struct counting_raw {
  pthread_mutex_t mu;
  uint64_t allocs, frees;
  int fail_next; /* the next n allocations fail */
  size_t live_bytes;
  int n;
  raw_seg segs[RAW_MAX];
} counting_raw;

static inline sl_status raw_alloc(void *ctx, size_t bytes, void **out) {
  counting_raw *r = ctx;
  *out = NULL;
  pthread_mutex_lock(&r->mu);
  sl_status st = SL_OK;
  if (bytes == 0) {
    st = sl__fail(SL_EINTERNAL, "raw: asked for 0 bytes");
  } else if (r->fail_next > 0) {
    r->fail_next--;
    st = sl__fail(SL_ENOMEM, "raw: injected failure for %zu bytes", bytes);
  } else if (r->n == RAW_MAX) {
    st = sl__fail(SL_ENOMEM, "raw: table full");
  } else {
    void *p = NULL;
    if (posix_memalign(&p, 512, bytes) != 0)
      st = sl__fail(SL_ENOMEM, "raw: posix_memalign(%zu)", bytes);
    else {
      r->segs[r->n++] = (raw_seg){(uintptr_t)p, bytes};
      r->allocs++;
      r->live_bytes += bytes;
      *out = p;
    }
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

static inline sl_status raw_free(void *ctx, void *p) {
  counting_raw *r = ctx;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->n; i++)
    if (r->segs[i].base == (uintptr_t)p) {
      r->live_bytes -= r->segs[i].size;
      r->segs[i] = r->segs[--r->n];
      r->frees++;
      pthread_mutex_unlock(&r->mu);
      free(p);
      return SL_OK;
    }
  pthread_mutex_unlock(&r->mu);
  return sl__fail(SL_EINVAL, "raw: free of %p, not a segment", p);
}

static const sl__raw_alloc_vtable counting_vt = {raw_alloc, raw_free};

static inline counting_raw *raw_new(void) {
  counting_raw *r = calloc(1, sizeof *r);
  assert_non_null(r);
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

static inline void raw_delete(counting_raw *r) {
  assert_int_equal(r->n, 0); /* everything went back */
  pthread_mutex_destroy(&r->mu);
  free(r);
}

/* The segment holding [p, p+n), or NULL. */
static inline const raw_seg *raw_find(counting_raw *r, const void *p,
                                      size_t n) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < r->n; i++)
    if (a >= r->segs[i].base && a + n <= r->segs[i].base + r->segs[i].size)
      return &r->segs[i];
  return NULL;
}

/* Small sizes so tests reach every path with few bytes: small pool up to 4
 * KiB in 16 KiB segments; large requests below 32 KiB share 64 KiB
 * segments, bigger ones get multiples of 16 KiB. */
static const sl__caching_alloc_config small_cfg = {
    .name = "test",
    .granularity = 512,
    .small_max = 4096,
    .small_segment = 16384,
    .large_round = 16384,
    .medium_segment = 65536,
};

static inline sl__caching_alloc *make(counting_raw *r,
                                      const sl__caching_alloc_config *c) {
  sl__caching_alloc *a = NULL;
  sl__raw_allocator raw = {&counting_vt, r};
  assert_int_equal(sl__caching_alloc_create(raw, c, &a), SL_OK);
  return a;
}

static inline sl__caching_alloc_stats stats(sl__caching_alloc *a) {
  sl__caching_alloc_stats s;
  sl__caching_alloc_get_stats(a, &s);
  return s;
}

static inline void *alloc_ok(sl__caching_alloc *a, size_t n,
                             const void *stream) {
  void *p = NULL;
  assert_int_equal(sl__caching_alloc_alloc(a, n, stream, &p), SL_OK);
  assert_non_null(p);
  return p;
}

static inline void check(sl__caching_alloc *a) {
  sl_status st = sl__caching_alloc_check(a);
  if (st != SL_OK) fail_msg("invariant: %s", sl_last_error());
}

static inline uint64_t test_seed(uint64_t dflt, const char *what) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t s = e && e[0] ? strtoull(e, NULL, 0) : dflt;
  printf("%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", what,
         (unsigned long long)s, (unsigned long long)s);
  fflush(stdout);
  return s;
}

#endif
