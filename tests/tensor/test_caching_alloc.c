/* The caching allocator, over a host-memory raw allocator that counts its
 * calls (and can be told to fail): rounding and pools, reuse per stream,
 * best fit, splitting and coalescing, empty_cache, the limit and the retry
 * after releasing the cache, bad frees, the training-loop property (raw
 * allocations only in the first step), statistics and their invariants,
 * and the CPU device's memory as the raw allocator. No GPU needed: the
 * allocator only ever sees the raw allocator's table. Random sequences and
 * threads: test_caching_alloc_random.c. */
#include "caching_alloc_test.h"

/* ---- configuration and rounding
 * ----------------------------------------------- */

static void test_config(void **state) {
  counting_raw *r = raw_new();
  sl__raw_allocator raw = {&counting_vt, r};
  sl__caching_alloc *a = (sl__caching_alloc *)&a;
  sl__caching_alloc_config c = small_cfg;
  c.granularity = 384; /* not a power of two */
  assert_int_equal(sl__caching_alloc_create(raw, &c, &a), SL_EINVAL);
  assert_null(a);
  assert_non_null(strstr(sl_last_error(), "test: bad config"));
  c = small_cfg;
  c.small_max = 32768; /* above the small segment */
  assert_int_equal(sl__caching_alloc_create(raw, &c, &a), SL_EINVAL);
  c = small_cfg;
  c.medium_segment = 40000; /* not a multiple of large_round */
  assert_int_equal(sl__caching_alloc_create(raw, &c, &a), SL_EINVAL);
  c = small_cfg;
  c.small_segment = 16000; /* not a multiple of the granularity */
  assert_int_equal(sl__caching_alloc_create(raw, &c, &a), SL_EINVAL);
  sl__raw_allocator none = {NULL, NULL};
  assert_int_equal(sl__caching_alloc_create(none, NULL, &a), SL_EINVAL);
  /* NULL config: the defaults. */
  assert_int_equal(sl__caching_alloc_create(raw, NULL, &a), SL_OK);
  void *p = alloc_ok(a, 100, NULL);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.allocated, 512);
  assert_int_equal(s.reserved, 2 << 20);      /* one small segment */
  void *q = alloc_ok(a, (1 << 20) + 1, NULL); /* large, below 10 MiB */
  assert_int_equal(stats(a).reserved, (2 << 20) + (20 << 20));
  /* On another stream, so it cannot use the shared segment's free part:
   * its own segment, a 2 MiB multiple. */
  int sbig;
  void *big = alloc_ok(a, (11 << 20) + 5, &sbig);
  assert_int_equal(stats(a).reserved, (2 << 20) + (20 << 20) + (12 << 20));
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, big), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  sl__caching_alloc_destroy(NULL);
  raw_delete(r);
}

static void test_rounding_and_pools(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  size_t sz;
  struct {
    size_t ask, block;
  } cases[] = {{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {4096, 4096}};
  void *ps[5];
  for (int i = 0; i < 5; i++) {
    ps[i] = alloc_ok(a, cases[i].ask, NULL);
    assert_int_equal(sl__caching_alloc_block_size(a, ps[i], &sz), SL_OK);
    assert_int_equal(sz, cases[i].block);
  }
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.segments, 1); /* all small: one 16 KiB segment */
  assert_int_equal(s.reserved, 16384);
  assert_int_equal(s.allocated, 512 + 512 + 512 + 1024 + 4096);
  assert_int_equal(s.requested, 0 + 1 + 512 + 513 + 4096);
  /* 4097 is large: a shared 64 KiB segment; 40000 is at least half of it,
   * so gets its own, rounded to 16 KiB. */
  void *l1 = alloc_ok(a, 4097, NULL);
  assert_int_equal(stats(a).reserved, 16384 + 65536);
  void *l2 = alloc_ok(a, 5000, NULL); /* shares l1's segment */
  assert_int_equal(stats(a).reserved, 16384 + 65536);
  int s3; /* another stream: l1's segment has room, but not for s3 */
  void *l3 = alloc_ok(a, 40000, &s3);
  assert_int_equal(stats(a).reserved, 16384 + 65536 + 49152);
  assert_int_equal(sl__caching_alloc_block_size(a, l3, &sz), SL_OK);
  /* 40448 rounded; the 8704-byte tail could serve a large request (4 KiB
   * + 512 or more), so it is split off. */
  assert_int_equal(sz, 40448);
  assert_int_equal(stats(a).segments, 3);
  for (int i = 0; i < 5; i++)
    assert_int_equal(sl__caching_alloc_free(a, ps[i]), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, l1), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, l2), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, l3), SL_OK);
  check(a);
  s = stats(a);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.requested, 0);
  assert_int_equal(s.free_blocks, 3); /* each segment one block again */
  /* Best fit over what is cached: 40000 bytes on the default stream fit
   * in the shared segment, so nothing new is reserved. */
  void *l4 = alloc_ok(a, 40000, NULL);
  assert_int_equal(stats(a).raw_allocs, 3);
  assert_int_equal(sl__caching_alloc_free(a, l4), SL_OK);
  /* Too big to round: refused before touching the raw allocator. */
  void *p = (void *)&p;
  assert_int_equal(sl__caching_alloc_alloc(a, SIZE_MAX - 3, NULL, &p),
                   SL_ENOMEM);
  assert_null(p);
  assert_int_equal(stats(a).raw_allocs, 3);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

/* A large-pool tail shorter than the smallest large request stays with
 * the block (no useless sliver), and counts as allocated. */
static void test_large_tail_not_split(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  void *p = alloc_ok(a, 16384 - 2048, NULL); /* in a shared 64 KiB segment */
  size_t sz;
  assert_int_equal(sl__caching_alloc_block_size(a, p, &sz), SL_OK);
  assert_int_equal(sz, 14336);
  void *q = alloc_ok(a, 65536 - 14336 - 1024, NULL); /* leaves 1 KiB */
  assert_int_equal(sl__caching_alloc_block_size(a, q, &sz), SL_OK);
  assert_int_equal(sz, 65536 - 14336); /* took the 1 KiB tail too */
  assert_int_equal(stats(a).segments, 1);
  assert_int_equal(stats(a).free_blocks, 0);
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

/* ---- reuse, streams, best fit, coalescing -----------------------------------
 */

static void test_reuse_per_stream(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  int s1, s2; /* any distinct addresses are stream keys */
  void *p = alloc_ok(a, 1000, &s1);
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  void *q = alloc_ok(a, 1000, &s1);
  assert_ptr_equal(p, q); /* same stream: the cached block */
  void *o = alloc_ok(a, 1000, &s2);
  assert_ptr_not_equal(o, q); /* another stream never gets s1's memory */
  assert_ptr_not_equal(raw_find(r, o, 1), raw_find(r, q, 1));
  assert_int_equal(stats(a).raw_allocs, 2);
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  void *o2 = alloc_ok(a, 1000, &s2); /* s1's free block is not used */
  assert_ptr_not_equal(o2, q);
  assert_int_equal(stats(a).raw_allocs, 2);
  assert_int_equal(sl__caching_alloc_free(a, o), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, o2), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

static void test_best_fit(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  /* Carved from the front of one segment, in order. */
  char *A = alloc_ok(a, 1024, NULL);
  char *B = alloc_ok(a, 2048, NULL);
  char *C = alloc_ok(a, 512, NULL);
  char *D = alloc_ok(a, 1024, NULL);
  char *E = alloc_ok(a, 512, NULL);
  assert_ptr_equal(B, A + 1024);
  assert_ptr_equal(C, B + 2048);
  assert_ptr_equal(D, C + 512);
  assert_ptr_equal(E, D + 1024);
  assert_int_equal(sl__caching_alloc_free(a, B), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, D), SL_OK);
  /* Free: B (2048), D (1024) and the tail (16384 - 5120). */
  assert_ptr_equal(alloc_ok(a, 1000, NULL), D); /* the exact fit */
  char *b2 = alloc_ok(a, 1500, NULL);           /* 1536: B, split */
  assert_ptr_equal(b2, B);
  assert_int_equal(stats(a).free_blocks, 2); /* B's 512 tail, segment tail */
  assert_ptr_equal(alloc_ok(a, 300, NULL), B + 1536); /* the 512 tail */
  assert_int_equal(stats(a).free_blocks, 1);
  check(a);
  sl__caching_alloc_destroy(a); /* live blocks: freed with the segments */
  assert_int_equal(r->n, 0);
  raw_delete(r);
}

static void test_coalescing(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  void *p[8];
  for (int i = 0; i < 8; i++)
    p[i] = alloc_ok(a, 2048, NULL); /* fills 16 KiB */
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.segments, 1);
  assert_int_equal(s.free_blocks, 0);
  /* Free 1, 3, 5: three separate holes. */
  for (int i = 1; i < 7; i += 2)
    assert_int_equal(sl__caching_alloc_free(a, p[i]), SL_OK);
  assert_int_equal(stats(a).free_blocks, 3);
  uint64_t merges = stats(a).merges;
  /* Freeing 2 joins 1, 2, 3 (two merges); 4 then joins that and 5. */
  assert_int_equal(sl__caching_alloc_free(a, p[2]), SL_OK);
  assert_int_equal(stats(a).free_blocks, 2);
  assert_int_equal(stats(a).merges, merges + 2);
  assert_int_equal(sl__caching_alloc_free(a, p[4]), SL_OK);
  assert_int_equal(stats(a).free_blocks, 1);
  check(a);
  /* The joined hole serves a 4 KiB request and a 5 KiB one... the small
   * pool stops at 4 KiB; two 4 KiB requests fit in its 10 KiB. */
  char *x = alloc_ok(a, 4096, NULL);
  char *y = alloc_ok(a, 4096, NULL);
  assert_ptr_equal(x, p[1]);
  assert_ptr_equal(y, (char *)p[1] + 4096);
  assert_int_equal(stats(a).raw_allocs, 1);
  assert_int_equal(sl__caching_alloc_free(a, x), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, y), SL_OK);
  for (int i = 0; i < 8; i += 7)
    assert_int_equal(sl__caching_alloc_free(a, p[i]), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, p[6]), SL_OK);
  s = stats(a);
  assert_int_equal(s.free_blocks, 1); /* the whole segment, one block */
  assert_int_equal(s.allocated, 0);
  check(a);
  assert_int_equal(sl__caching_alloc_empty_cache(a), SL_OK);
  s = stats(a);
  assert_int_equal(s.segments, 0);
  assert_int_equal(s.reserved, 0);
  assert_int_equal(s.raw_frees, 1);
  assert_int_equal(r->n, 0);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

static void test_empty_cache_keeps_used_segments(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  int s1, s2;
  void *keep = alloc_ok(a, 1024, &s1);
  void *drop1 = alloc_ok(a, 1024, &s2);
  void *drop2 = alloc_ok(a, 50000, &s2);
  assert_int_equal(stats(a).segments, 3);
  assert_int_equal(sl__caching_alloc_free(a, drop1), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, drop2), SL_OK);
  assert_int_equal(sl__caching_alloc_empty_cache(a), SL_OK);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.segments, 1);
  assert_int_equal(s.reserved, 16384);
  assert_int_equal(s.raw_frees, 2);
  assert_non_null(raw_find(r, keep, 1024));
  memset(keep, 1, 1024); /* still ours */
  assert_int_equal(sl__caching_alloc_free(a, keep), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

/* ---- errors
 * ------------------------------------------------------------------- */

static void test_bad_frees(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  char *p = alloc_ok(a, 1000, NULL);
  char *q = alloc_ok(a, 1000, NULL);
  char *t = alloc_ok(a, 1000, NULL);
  sl__caching_alloc_stats before = stats(a);
  int local;
  assert_int_equal(sl__caching_alloc_free(a, &local), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "did not allocate"));
  assert_int_equal(sl__caching_alloc_free(a, p + 512),
                   SL_EINVAL); /* interior */
  size_t sz = 7;
  assert_int_equal(sl__caching_alloc_block_size(a, p + 512, &sz), SL_EINVAL);
  assert_int_equal(sz, 0);
  assert_int_equal(sl__caching_alloc_free(a, NULL), SL_OK);
  sl__caching_alloc_stats mid = stats(a);
  assert_memory_equal(&before, &mid, sizeof before);
  /* q's neighbours are allocated, so after its free it is a free block
   * of its own: freeing it again is named a double free. */
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, q), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "double free"));
  /* t merges into q's hole: its address no longer starts a block. */
  assert_int_equal(sl__caching_alloc_free(a, t), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, t), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "already freed"));
  check(a);
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  assert_int_equal(sl__caching_alloc_free(NULL, p), SL_EINVAL);
  void *x;
  assert_int_equal(sl__caching_alloc_alloc(NULL, 1, NULL, &x), SL_EINVAL);
  assert_int_equal(sl__caching_alloc_alloc(a, 1, NULL, NULL), SL_EINVAL);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

static void test_raw_failure(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  r->fail_next = 1;
  void *p = (void *)&p;
  assert_int_equal(sl__caching_alloc_alloc(a, 100, NULL, &p), SL_ENOMEM);
  assert_null(p);
  const char *msg = sl_last_error();
  assert_non_null(strstr(msg, "test: cannot allocate 100 bytes"));
  assert_non_null(strstr(msg, "injected failure"));
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.raw_failures, 1);
  assert_int_equal(s.segments, 0);
  check(a);
  p = alloc_ok(a, 100, NULL); /* the next try works */
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

/* When the raw allocator refuses, idle segments (of any stream) are
 * released and the allocation retried. */
static void test_retry_after_flush(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  int s1, s2;
  void *p = alloc_ok(a, 1024, &s1);
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK); /* cached, idle */
  r->fail_next = 1;
  void *q = alloc_ok(a, 1024, &s2);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.cache_flushes, 1);
  assert_int_equal(s.raw_failures, 1);
  assert_int_equal(s.raw_frees, 1);
  assert_int_equal(s.segments, 1);
  /* Nothing idle to release: the failure is reported. */
  r->fail_next = 2;
  void *x = (void *)&x;
  assert_int_equal(sl__caching_alloc_alloc(a, 1024, &s1, &x), SL_ENOMEM);
  assert_null(x);
  assert_int_equal(stats(a).cache_flushes, 1);
  r->fail_next = 0;
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

static void test_limit(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc_config c = small_cfg;
  c.limit = 65536 + 16384;
  sl__caching_alloc *a = make(r, &c);
  int s1, s2;
  void *p = alloc_ok(a, 5000, &s1); /* a shared 64 KiB segment */
  /* Another stream's 5000 bytes would take another 64 KiB: over the limit,
   * nothing idle, so it falls back to a 16 KiB segment of its own. */
  void *q = alloc_ok(a, 5000, &s2);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.reserved, 65536 + 16384);
  assert_int_equal(s.raw_failures, 1);
  /* Now nothing fits at all. */
  void *x = (void *)&x;
  assert_int_equal(sl__caching_alloc_alloc(a, 20000, &s2, &x), SL_ENOMEM);
  assert_null(x);
  assert_non_null(strstr(sl_last_error(), "limit of 80.0 KiB reached"));
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  /* s1's segment is idle now: released, and s2 gets its 20000 bytes. */
  x = alloc_ok(a, 20000, &s2);
  assert_true(stats(a).reserved <= c.limit);
  assert_int_equal(stats(a).cache_flushes, 1);
  assert_int_equal(sl__caching_alloc_free(a, x), SL_OK);
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

/* ---- the training loop: raw allocations in the first step only
 * --------------- */

static void test_training_loop(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, NULL); /* the real defaults */
  int compute, copy;
  /* Activation sizes of a small MLP/transformer step, bytes. */
  static const size_t act[] = {4 << 10, 64 << 10,        (1 << 20) + 4096,
                               3 << 20, 12 << 20,        700 << 10,
                               256,     (6 << 20) + 100, 48 << 10};
  enum { NACT = sizeof act / sizeof act[0] };
  uint64_t raw_after_first = 0;
  size_t peak_after_first = 0;
  uint64_t t1 = 0;
  for (int step = 0; step < 100; step++) {
    if (step == 1) t1 = sl__now_ns();
    void *in = alloc_ok(a, 2 << 20, &copy); /* the batch, on the copy stream */
    void *acts[NACT], *grads[NACT];
    for (int i = 0; i < NACT; i++)
      acts[i] = alloc_ok(a, act[i], &compute);
    /* Backward: gradients appear as activations die, in reverse. */
    for (int i = NACT - 1; i >= 0; i--) {
      grads[i] = alloc_ok(a, act[i], &compute);
      void *tmp = alloc_ok(a, act[i] / 2 + 1, &compute); /* workspace */
      assert_int_equal(sl__caching_alloc_free(a, tmp), SL_OK);
      assert_int_equal(sl__caching_alloc_free(a, acts[i]), SL_OK);
    }
    for (int i = 0; i < NACT; i++)
      assert_int_equal(sl__caching_alloc_free(a, grads[i]), SL_OK);
    assert_int_equal(sl__caching_alloc_free(a, in), SL_OK);
    sl__caching_alloc_stats s = stats(a);
    assert_int_equal(s.allocated, 0);
    if (step == 0) {
      raw_after_first = s.raw_allocs;
      peak_after_first = s.peak_reserved;
      assert_true(raw_after_first > 0);
    } else {
      assert_int_equal(s.raw_allocs, raw_after_first);
      assert_int_equal(s.raw_frees, 0);
      assert_int_equal(s.peak_reserved, peak_after_first);
    }
  }
  double ns = (double)(sl__now_ns() - t1);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.allocs, 100 * (1 + 3 * NACT));
  assert_int_equal(s.frees, s.allocs);
  printf("training loop: %llu raw allocations (%zu bytes reserved) for %llu "
         "allocations; %.0f ns per alloc+free after the first step\n",
         (unsigned long long)s.raw_allocs, s.reserved,
         (unsigned long long)s.allocs, ns / (99.0 * (1 + 3 * NACT)));
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

static void test_peaks(void **state) {
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  void *p = alloc_ok(a, 3000, NULL);
  void *q = alloc_ok(a, 40000, NULL);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.peak_allocated, 3072 + 40448);
  assert_int_equal(s.peak_reserved, 16384 + 49152);
  assert_int_equal(sl__caching_alloc_free(a, q), SL_OK);
  assert_int_equal(sl__caching_alloc_empty_cache(a), SL_OK);
  s = stats(a);
  assert_int_equal(s.allocated, 3072);
  assert_int_equal(s.peak_allocated, 3072 + 40448); /* peaks stay */
  assert_int_equal(s.reserved, 16384);
  assert_int_equal(s.peak_reserved, 16384 + 49152);
  sl__caching_alloc_reset_peaks(a);
  s = stats(a);
  assert_int_equal(s.peak_allocated, 3072);
  assert_int_equal(s.peak_reserved, 16384);
  assert_int_equal(sl__caching_alloc_free(a, p), SL_OK);
  check(a);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

/* ---- over the CPU device's memory
 * ----------------------------------------------- */

static void test_over_cpu_device(void **state) {
  sl__device *d;
  assert_int_equal(sl__device_open(SL_DEVICE_CPU, 0, &d), SL_OK);
  sl__caching_alloc *dev = NULL, *pinned = NULL;
  sl__caching_alloc_config c = {.name = "cpu:0 memory"};
  assert_int_equal(sl__caching_alloc_create(sl__device_raw_memory(d), &c, &dev),
                   SL_OK);
  c.name = "cpu:0 pinned";
  assert_int_equal(
      sl__caching_alloc_create(sl__device_raw_pinned(d), &c, &pinned), SL_OK);
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  void *vsrc = NULL, *vdst = NULL;
  assert_int_equal(sl__caching_alloc_alloc(pinned, 5000, s, &vsrc), SL_OK);
  assert_int_equal(sl__caching_alloc_alloc(dev, 5000, s, &vdst), SL_OK);
  char *src = vsrc, *dst = vdst;
  for (int i = 0; i < 5000; i++)
    src[i] = (char)i;
  assert_int_equal(sl__device_memcpy_h2d(d, dst, src, 5000, s), SL_OK);
  assert_memory_equal(dst, src, 5000);
  assert_int_equal(sl__caching_alloc_free(dev, dst), SL_OK);
  assert_int_equal(sl__caching_alloc_free(pinned, src), SL_OK);
  assert_int_equal(sl__caching_alloc_empty_cache(dev), SL_OK);
  assert_int_equal(stats(dev).reserved, 0);
  check(dev);
  check(pinned);
  sl__caching_alloc_destroy(dev);
  sl__caching_alloc_destroy(pinned);
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_rounding_and_pools),
      cmocka_unit_test(test_large_tail_not_split),
      cmocka_unit_test(test_reuse_per_stream),
      cmocka_unit_test(test_best_fit),
      cmocka_unit_test(test_coalescing),
      cmocka_unit_test(test_empty_cache_keeps_used_segments),
      cmocka_unit_test(test_bad_frees),
      cmocka_unit_test(test_raw_failure),
      cmocka_unit_test(test_retry_after_flush),
      cmocka_unit_test(test_limit),
      cmocka_unit_test(test_training_loop),
      cmocka_unit_test(test_peaks),
      cmocka_unit_test(test_over_cpu_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
