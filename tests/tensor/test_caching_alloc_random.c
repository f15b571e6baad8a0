/* The caching allocator under random load: sequences of allocations,
 * frees, bad frees and empty_cache calls checked against a model after
 * every step (no overlap — tag bytes are checked —, blocks inside raw
 * segments, statistics equal to the model's and the raw allocator's
 * counts, the invariants), with and without a limit; and four threads at
 * once (run under TSan). Seeds print and SLUICE_TEST_SEED replays them. */
#include "caching_alloc_test.h"

/* ---- randomised against a model
 * ----------------------------------------------- */

typedef struct live {
  unsigned char *p;
  size_t n;
  const void *stream;
  unsigned char tag;
} live;

/* The first and last bytes and up to 64 in between carry the tag; a block
 * handed out twice, or overlapping another, breaks some tag. */
static void stamp(const live *l) {
  size_t n = l->n ? l->n : 1;
  for (size_t i = 0; i < n; i += 1 + n / 64)
    l->p[i] = l->tag;
  l->p[n - 1] = l->tag;
}

static bool intact(const live *l) {
  size_t n = l->n ? l->n : 1;
  for (size_t i = 0; i < n; i += 1 + n / 64)
    if (l->p[i] != l->tag) return false;
  return l->p[n - 1] == l->tag;
}

static void verify(const live *l) {
  if (!intact(l)) fail_msg("block %p was overwritten", (void *)l->p);
}

/* Worker threads cannot use cmocka's asserts (they jump to the main
 * thread's frame): a broken property aborts with the reason. */
static void must(bool ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "test_threads: %s (%s)\n", what, sl_last_error());
  abort();
}

static size_t random_size(sl_rng *g) {
  switch (sl__rng_below(g, 6)) {
  case 0: return (size_t)sl__rng_below(g, 600); /* tiny, 0 included */
  case 1:
  case 2: return 1 + (size_t)sl__rng_below(g, 4096);       /* small pool */
  case 3: return 4097 + (size_t)sl__rng_below(g, 28000);   /* shared large */
  case 4: return 32768 + (size_t)sl__rng_below(g, 100000); /* own segment */
  default: return (size_t)1 << sl__rng_below(g, 16);
  }
}

static void random_run(uint64_t seed, size_t limit, int ops) {
  counting_raw *r = raw_new();
  sl__caching_alloc_config c = small_cfg;
  c.limit = limit;
  sl__caching_alloc *a = make(r, &c);
  sl_rng g = {seed};
  static int streams[3];
  const void *keys[4] = {NULL, &streams[0], &streams[1], &streams[2]};
  enum { MAXLIVE = 300 };
  live *L = calloc(MAXLIVE, sizeof *L);
  assert_non_null(L);
  int n = 0, failures = 0;
  size_t requested = 0;
  for (int op = 0; op < ops; op++) {
    uint64_t k = sl__rng_below(&g, 100);
    if (k < 55 && n < MAXLIVE) {
      live l = {.n = random_size(&g),
                .stream = keys[sl__rng_below(&g, 4)],
                .tag = (unsigned char)(1 + op % 255)};
      void *p = NULL;
      sl_status st = sl__caching_alloc_alloc(a, l.n, l.stream, &p);
      if (st != SL_OK) {
        /* Only a limit makes this machine run out. */
        assert_true(limit > 0);
        assert_int_equal(st, SL_ENOMEM);
        assert_null(p);
        failures++;
        continue;
      }
      l.p = p;
      size_t bs;
      assert_int_equal(sl__caching_alloc_block_size(a, p, &bs), SL_OK);
      assert_true(bs >= l.n && bs % 512 == 0);
      const raw_seg *seg = raw_find(r, p, bs);
      if (!seg)
        fail_msg("op %d: block %p+%zu outside every segment", op, p, bs);
      assert_int_equal(((uintptr_t)p - seg->base) % 512, 0);
      for (int i = 0; i < n; i++) /* disjoint from every live block */
        if (!(l.p + bs <= L[i].p || L[i].p + (L[i].n ? L[i].n : 1) <= l.p))
          fail_msg("op %d: block %p overlaps live %p", op, p, (void *)L[i].p);
      stamp(&l);
      L[n++] = l;
      requested += l.n;
    } else if (k < 95 && n > 0) {
      int i = (int)sl__rng_below(&g, (uint64_t)n);
      verify(&L[i]);
      assert_int_equal(sl__caching_alloc_free(a, L[i].p), SL_OK);
      requested -= L[i].n;
      L[i] = L[--n];
    } else if (k < 97) {
      assert_int_equal(sl__caching_alloc_empty_cache(a), SL_OK);
    } else if (n > 0) { /* a bad free (inside a block) changes nothing */
      int i = (int)sl__rng_below(&g, (uint64_t)n);
      unsigned char *inside = L[i].p + 1 + sl__rng_below(&g, 511);
      assert_int_equal(sl__caching_alloc_free(a, inside), SL_EINVAL);
    }
    sl__caching_alloc_stats s = stats(a);
    assert_int_equal(s.requested, requested);
    assert_int_equal(s.live_blocks, (size_t)n);
    assert_int_equal(s.reserved, r->live_bytes);
    assert_int_equal(s.raw_allocs, r->allocs);
    assert_int_equal(s.raw_frees, r->frees);
    if (limit) assert_true(s.reserved <= limit);
    if (op % 16 == 0) check(a);
  }
  for (int i = 0; i < n; i++) {
    verify(&L[i]);
    assert_int_equal(sl__caching_alloc_free(a, L[i].p), SL_OK);
  }
  check(a);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.free_blocks, s.segments); /* all coalesced */
  printf("  %d ops: %llu allocs, %llu raw allocs, %llu splits, %llu merges, "
         "%d refused, peak reserved %zu\n",
         ops, (unsigned long long)s.allocs, (unsigned long long)s.raw_allocs,
         (unsigned long long)s.splits, (unsigned long long)s.merges, failures,
         s.peak_reserved);
  if (limit) assert_true(failures > 0); /* the limit was reached */
  assert_int_equal(sl__caching_alloc_empty_cache(a), SL_OK);
  assert_int_equal(r->n, 0);
  free(L);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

static void test_random_model(void **state) {
  uint64_t seed = test_seed(20240601, "test_random_model");
  for (int run = 0; run < 4; run++)
    random_run(seed + (uint64_t)run, 0, 4000);
}

static void test_random_with_limit(void **state) {
  uint64_t seed = test_seed(777, "test_random_with_limit");
  for (int run = 0; run < 3; run++)
    random_run(seed + (uint64_t)run, 512 * 1024, 4000);
}

/* ---- threads
 * -------------------------------------------------------------------- */

typedef struct worker {
  sl__caching_alloc *a;
  uint64_t seed;
  int id;
  int stream_key;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  sl_rng g = {w->seed};
  enum { KEEP = 32 };
  live L[KEEP];
  int n = 0;
  for (int op = 0; op < 6000; op++) {
    if (n < KEEP && (n == 0 || sl__rng_below(&g, 2))) {
      /* Half the allocations on the thread's stream, half on a shared one. */
      const void *stream =
          sl__rng_below(&g, 2) ? (const void *)&w->stream_key : NULL;
      live l = {.n = random_size(&g),
                .stream = stream,
                .tag = (unsigned char)(1 + w->id)};
      void *p = NULL;
      must(sl__caching_alloc_alloc(w->a, l.n, stream, &p) == SL_OK, "alloc");
      l.p = p;
      stamp(&l);
      L[n++] = l;
    } else {
      int i = (int)sl__rng_below(&g, (uint64_t)n);
      must(intact(&L[i]), "a live block was overwritten");
      must(sl__caching_alloc_free(w->a, L[i].p) == SL_OK, "free");
      L[i] = L[--n];
    }
    if (w->id == 0 && op % 500 == 0) {
      (void)sl__caching_alloc_empty_cache(w->a);
      sl__caching_alloc_stats s;
      sl__caching_alloc_get_stats(w->a, &s);
      must(s.allocated <= s.reserved, "allocated above reserved");
    }
  }
  for (int i = 0; i < n; i++) {
    must(intact(&L[i]), "a live block was overwritten");
    must(sl__caching_alloc_free(w->a, L[i].p) == SL_OK, "free");
  }
  return NULL;
}

static void test_threads(void **state) {
  uint64_t seed = test_seed(99, "test_threads");
  counting_raw *r = raw_new();
  sl__caching_alloc *a = make(r, &small_cfg);
  enum { T = 4 };
  pthread_t th[T];
  worker w[T];
  for (int i = 0; i < T; i++) {
    w[i] = (worker){.a = a, .seed = seed * 31 + (uint64_t)i, .id = i};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < T; i++)
    pthread_join(th[i], NULL);
  check(a);
  sl__caching_alloc_stats s = stats(a);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.allocs, s.frees);
  assert_int_equal(s.reserved, r->live_bytes);
  sl__caching_alloc_destroy(a);
  raw_delete(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_model),
      cmocka_unit_test(test_random_with_limit),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
