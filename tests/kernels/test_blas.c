/* sgemm on every backend against a double-precision reference: the loaded
 * BLAS, each C micro-kernel this CPU can run, and the int-size chunking.
 * All four transposes, odd sizes, strides wider than the rows, alpha/beta,
 * zero sizes, bad arguments, and concurrent callers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cpu/blas.h"
#include "sgemm_ref.h"

static uint64_t g_seed;

typedef enum { B_BLAS, B_C_KERNEL, B_CHUNKED } backend_kind;
typedef struct backend {
  backend_kind kind;
  const sl__sgemm_kernel *kern; /* B_C_KERNEL */
  int64_t limit;                /* B_CHUNKED */
} backend;

static sl_status run(const backend *be, bool ta, bool tb, int64_t m, int64_t n,
                     int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c,
                     int64_t ldc) {
  switch (be->kind) {
  case B_BLAS:
    return sl__blas_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  case B_C_KERNEL:
    return sl__sgemm_c_with(be->kern, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                            beta, c, ldc);
  case B_CHUNKED:
    return sl__blas_sgemm_chunked(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta,
                                  c, ldc, be->limit);
  }
  return SL_EINTERNAL;
}

static const char *backend_name(const backend *be) {
  static char buf[64];
  switch (be->kind) {
  case B_BLAS: return sl__blas_name();
  case B_C_KERNEL:
    snprintf(buf, sizeof buf, "c/%s", be->kern->name);
    return buf;
  case B_CHUNKED:
    snprintf(buf, sizeof buf, "chunked/%lld", (long long)be->limit);
    return buf;
  }
  return "?";
}

#define SENTINEL 12345.0f

/* One product, checked element by element; the padding of C (columns n ..
 * ldc) must come back bit-for-bit, and the padding of A and B is NaN so a
 * kernel that reads it poisons its result. */
static void check_case(const backend *be, sl_rng *rng, bool ta, bool tb,
                       int64_t m, int64_t n, int64_t k, float alpha, float beta,
                       int64_t pad) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = SL_MAX(ac, 1) + pad, ldb = SL_MAX(bc, 1) + pad,
          ldc = SL_MAX(n, 1) + pad;
  float *a = ref_matrix(rng, ar, ac, lda, NAN);
  float *b = ref_matrix(rng, br, bc, ldb, NAN);
  float *c = ref_output(rng, m, n, ldc, beta, SENTINEL);
  size_t mn = (size_t)(m * n) + 1;
  double *want = malloc(mn * sizeof *want), *bound = malloc(mn * sizeof *bound);
  ref_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, want, bound);

  sl_status st = run(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != SL_OK) {
    print_error("%s: %s\n", backend_name(be), sl_last_error());
    fail();
  }
  int64_t i, j;
  if (!ref_check_c(c, m, n, ldc, want, bound, SENTINEL, &i, &j)) {
    print_error("%s ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g "
                "pad=%lld: C[%lld][%lld] = %.9g, want %.9g (seed %llu)\n",
                backend_name(be), ta, tb, (long long)m, (long long)n,
                (long long)k, alpha, beta, (long long)pad, (long long)i,
                (long long)j, c[i * ldc + j],
                j < n ? want[i * n + j] : SENTINEL, (unsigned long long)g_seed);
    fail();
  }
  free(a);
  free(b);
  free(c);
  free(want);
  free(bound);
}

/* Every size in {1, 7, 33, 129}^3 (1: a single row/column; 7 and 33: not a
 * multiple of any tile; 129: crosses the 128-row block), 4 transposes,
 * cycling through alpha/beta pairs and padded strides. */
static void sweep(const backend *be) {
  static const int64_t sizes[] = {1, 7, 33, 129};
  static const float ab[][2] = {{1, 0}, {0.5f, 1}, {-2, 0.25f}, {1, 1}};
  sl_rng rng = {g_seed};
  int cnt = 0;
  for (int t = 0; t < 4; t++)
    for (size_t im = 0; im < 4; im++)
      for (size_t in = 0; in < 4; in++)
        for (size_t ik = 0; ik < 4; ik++, cnt++)
          check_case(be, &rng, t & 1, t & 2, sizes[im], sizes[in], sizes[ik],
                     ab[cnt % 4][0], ab[cnt % 4][1], (cnt / 4) % 2 ? 3 : 0);
}

/* Sizes past every block: m crosses MC, n crosses NC, k crosses KC twice. */
static void large(const backend *be) {
  sl_rng rng = {g_seed + 1};
  check_case(be, &rng, false, false, 130, 1030, 520, 1.0f, 0.0f, 1);
  check_case(be, &rng, true, true, 130, 1030, 520, 0.75f, 0.5f, 0);
}

/* Zero sizes: nothing happens to an empty C; an empty sum (k = 0) or
 * alpha = 0 gives C = beta C without reading A or B (NaN or NULL there). */
static void zero_sizes(const backend *be) {
  float c[6], nan_ab[6];
  for (int i = 0; i < 6; i++)
    nan_ab[i] = NAN;
  for (int i = 0; i < 6; i++)
    c[i] = (float)i;
  assert_int_equal(
      run(be, false, false, 0, 3, 2, 1, nan_ab, 2, nan_ab, 3, 0, c, 3), SL_OK);
  assert_int_equal(
      run(be, true, false, 2, 0, 2, 1, nan_ab, 2, nan_ab, 1, 0, c, 1), SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == (float)i);
  assert_int_equal(
      run(be, false, true, 0, 0, 0, 1, NULL, 1, NULL, 1, 1, NULL, 1), SL_OK);
  /* k = 0: C = 2 C, and beta = 0 overwrites even NaN. */
  assert_int_equal(run(be, false, false, 2, 3, 0, 1, NULL, 1, NULL, 3, 2, c, 3),
                   SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == 2.0f * (float)i);
  c[4] = NAN;
  assert_int_equal(run(be, false, false, 2, 3, 0, 1, NULL, 1, NULL, 3, 0, c, 3),
                   SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == 0.0f);
  /* alpha = 0: A and B are not read. */
  for (int i = 0; i < 6; i++)
    c[i] = (float)i;
  assert_int_equal(
      run(be, false, false, 2, 3, 2, 0, nan_ab, 2, nan_ab, 3, 0.5f, c, 3),
      SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == 0.5f * (float)i);
}

static void all_checks(const backend *be) {
  sweep(be);
  large(be);
  zero_sizes(be);
}

static void test_blas_sgemm(void **state) {
  sl_status st = sl__blas_load();
  print_message("BLAS: %s\n", sl__blas_describe());
  if (st != SL_OK) print_message("(load status %s)\n", sl_status_str(st));
  backend be = {B_BLAS, NULL, 0};
  all_checks(&be);
}

/* The C sgemm with one micro-kernel, named by the test's state. */
static void test_c_kernel(void **state) {
  const char *name = *state;
  const sl__sgemm_kernel *kern = NULL;
  for (int i = 0; i < sl__sgemm_c_kernel_count(); i++)
    if (strcmp(sl__sgemm_c_kernel(i)->name, name) == 0)
      kern = sl__sgemm_c_kernel(i);
  if (!kern) {
    print_message("kernel %s is not built for this target\n", name);
    skip();
  }
  if (!kern->usable(sl__cpu_features_get())) {
    print_message("this CPU cannot run the %s kernel\n", name);
    skip();
  }
  backend be = {B_C_KERNEL, kern, 0};
  all_checks(&be);
}

/* sl__sgemm_c picks the most capable kernel the CPU runs. */
static void test_c_best(void **state) {
  const sl__sgemm_kernel *best = sl__sgemm_c_kernel_best();
  const sl__cpu_features *f = sl__cpu_features_get();
  const sl__sgemm_kernel *last_usable = NULL;
  for (int i = 0; i < sl__sgemm_c_kernel_count(); i++)
    if (sl__sgemm_c_kernel(i)->usable(f)) last_usable = sl__sgemm_c_kernel(i);
  assert_ptr_equal(best, last_usable);
  print_message("C sgemm kernel: %s\n", best->name);
  assert_string_equal(sl__sgemm_c_kernel(0)->name, "generic");
  assert_null(sl__sgemm_c_kernel(sl__sgemm_c_kernel_count()));
  assert_null(sl__sgemm_c_kernel(-1));
}

/* The int-size splitting, with tiny limits so every piece boundary is hit:
 * beta must apply once, to the first k piece only. */
static void test_chunked(void **state) {
  static const int64_t limits[] = {1, 5, 32};
  for (size_t i = 0; i < SL_ARRAY_LEN(limits); i++) {
    backend be = {B_CHUNKED, NULL, limits[i]};
    sl_rng rng = {g_seed + 2};
    for (int t = 0; t < 4; t++) {
      check_case(&be, &rng, t & 1, t & 2, 7, 9, 11, 1.5f, 0.5f, 2);
      check_case(&be, &rng, t & 1, t & 2, 33, 7, 40, -1.0f, 0.0f, 0);
    }
    zero_sizes(&be);
  }
  float x = 1;
  assert_int_equal(sl__blas_sgemm_chunked(false, false, 1, 1, 1, 1, &x, 1, &x,
                                          1, 0, &x, 1, 0),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "chunk limit"));
}

/* Cut over a team, a product gives the bits of the uncut one, for both
 * cuts (rows when m >= n, columns otherwise: through each member's buffer),
 * all transposes, strides wider than the rows (the columns past n kept),
 * beta 0 and not, and sizes not a multiple of the block. */
static void test_team_bits(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {
      {301, 97, 83},   {97, 301, 83},   {256, 1024, 64}, {33, 17, 5000},
      {1, 4096, 1024}, {4096, 1, 1024}, {40, 40, 2000}};
  sl_rng rng = {g_seed + 3};
  for (int size = 2; size <= 3; size++) {
    sl__team *team;
    assert_int_equal(sl__team_create(size, NULL, "gemm", &team), SL_OK);
    for (size_t i = 0; i < SL_ARRAY_LEN(shapes); i++)
      for (int t = 0; t < 8; t++) {
        bool ta = t & 1, tb = t & 2;
        float beta = t & 4 ? 0.0f : 2.0f;
        int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
        size_t na = (size_t)((ta ? k : m) * lda),
               nb = (size_t)((tb ? n : k) * ldb), nc = (size_t)(m * ldc);
        float *a = malloc(na * 4), *b = malloc(nb * 4), *c1 = malloc(nc * 4),
              *c2 = malloc(nc * 4);
        assert_non_null(a && b && c1 && c2);
        for (size_t j = 0; j < na; j++)
          a[j] = (float)((int)sl__rng_below(&rng, 2048) - 1024) / 1023.0f;
        for (size_t j = 0; j < nb; j++)
          b[j] = (float)((int)sl__rng_below(&rng, 2048) - 1024) / 1023.0f;
        for (size_t j = 0; j < nc; j++)
          c1[j] = c2[j] = (float)j;
        assert_int_equal(sl__blas_sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb,
                                        beta, c1, ldc),
                         SL_OK);
        assert_int_equal(sl__blas_sgemm_team(team, ta, tb, m, n, k, 0.5f, a,
                                             lda, b, ldb, beta, c2, ldc),
                         SL_OK);
        assert_memory_equal(c1, c2, nc * 4);
        free(a), free(b), free(c1), free(c2);
      }
    sl__team_destroy(team);
  }
}

/* Bad arguments give SL_EINVAL with a message naming the argument, on every
 * entry point, before anything is touched. */
static void test_bad_arguments(void **state) {
  float abuf[16] = {0}, bbuf[16] = {0}, cbuf[16] = {0};
  typedef sl_status (*fn_t)(bool, bool, int64_t, int64_t, int64_t, float,
                            const float *, int64_t, const float *, int64_t,
                            float, float *, int64_t);
  fn_t fns[] = {sl__blas_sgemm, sl__sgemm_c};
  for (size_t f = 0; f < SL_ARRAY_LEN(fns); f++) {
    fn_t g = fns[f];
    /* The valid call each bad one below differs from in one argument. */
    assert_int_equal(g(false, false, 3, 2, 4, 1, abuf, 4, bbuf, 2, 0, cbuf, 2),
                     SL_OK);
    assert_int_equal(g(false, false, -1, 2, 2, 1, abuf, 2, bbuf, 2, 0, cbuf, 2),
                     SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "negative"));
    /* A is 3 x 4 (lda >= 4) untransposed, 4 x 3 (lda >= 3) transposed. */
    assert_int_equal(g(false, false, 3, 2, 4, 1, abuf, 3, bbuf, 2, 0, cbuf, 2),
                     SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "ldA = 3"));
    assert_int_equal(g(true, false, 3, 2, 4, 1, abuf, 3, bbuf, 2, 0, cbuf, 2),
                     SL_OK);
    assert_int_equal(g(true, false, 3, 2, 4, 1, abuf, 2, bbuf, 2, 0, cbuf, 2),
                     SL_EINVAL);
    /* B is 4 x 2 untransposed, 2 x 4 transposed. */
    assert_int_equal(g(false, true, 3, 2, 4, 1, abuf, 4, bbuf, 2, 0, cbuf, 2),
                     SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "ldB = 2"));
    assert_int_equal(g(false, false, 3, 2, 4, 1, abuf, 4, bbuf, 2, 0, cbuf, 1),
                     SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "ldC = 1"));
    /* Stride 0 is short even for an empty matrix (BLAS: ld >= max(1, n)). */
    assert_int_equal(g(false, false, 0, 0, 0, 1, NULL, 0, NULL, 1, 0, NULL, 1),
                     SL_EINVAL);
    assert_int_equal(g(false, false, 3, 2, 4, 1, NULL, 4, bbuf, 2, 0, cbuf, 2),
                     SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "A is NULL"));
    assert_int_equal(g(false, false, 3, 2, 4, 1, abuf, 4, NULL, 2, 0, cbuf, 2),
                     SL_EINVAL);
    assert_int_equal(g(false, false, 3, 2, 4, 1, abuf, 4, bbuf, 2, 0, NULL, 2),
                     SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "C is NULL"));
    /* A stride whose last-row offset overflows. */
    assert_int_equal(
        g(false, false, 3, 2, 4, 1, abuf, INT64_MAX / 2, bbuf, 2, 0, cbuf, 2),
        SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "overflows"));
  }
}

static void test_threads(void **state) {
  assert_int_equal(sl__blas_set_threads(0), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "not in 1..1024"));
  assert_int_equal(sl__blas_set_threads(1025), SL_EINVAL);
  assert_int_equal(sl__blas_get_threads(), 1); /* one thread per device */
  assert_int_equal(sl__blas_set_threads(2), SL_OK);
  /* OpenBLAS takes the setting; the C sgemm is single-threaded. */
  assert_int_equal(sl__blas_get_threads(),
                   strcmp(sl__blas_name(), "openblas") == 0 ? 2 : 1);
  backend be = {B_BLAS, NULL, 0};
  large(&be);
  assert_int_equal(sl__blas_set_threads(1), SL_OK);
  assert_int_equal(sl__blas_get_threads(), 1);
}

/* Device threads call sgemm at the same time; each must get its own
 * correct result. */
typedef struct {
  backend be;
  uint64_t seed;
  int failures;
} worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  sl_rng rng = {w->seed};
  for (int rep = 0; rep < 4; rep++) {
    int64_t m = 40 + rep, n = 70, k = 300;
    float *a = ref_matrix(&rng, m, k, k, 0), *b = ref_matrix(&rng, k, n, n, 0);
    float *c = calloc((size_t)(m * n), sizeof *c);
    double *want = malloc((size_t)(m * n) * sizeof *want);
    double *bound = malloc((size_t)(m * n) * sizeof *bound);
    ref_sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n, want, bound);
    if (run(&w->be, false, false, m, n, k, 1, a, k, b, n, 0, c, n) != SL_OK)
      w->failures++;
    for (int64_t i = 0; i < m * n; i++)
      if (!(fabs(c[i] - want[i]) <= bound[i])) w->failures++;
    free(a);
    free(b);
    free(c);
    free(want);
    free(bound);
  }
  return NULL;
}

static void test_concurrent_callers(void **state) {
  enum { N = 4 };
  for (int kind = 0; kind < 2; kind++) {
    pthread_t t[N];
    worker_arg w[N];
    for (int i = 0; i < N; i++) {
      w[i] = (worker_arg){
          {kind ? B_C_KERNEL : B_BLAS, sl__sgemm_c_kernel_best(), 0},
          g_seed + 10 + (uint64_t)i,
          0};
      assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
    }
    for (int i = 0; i < N; i++) {
      pthread_join(t[i], NULL);
      assert_int_equal(w[i].failures, 0);
    }
  }
}

int main(void) {
  const char *s = getenv("SLUICE_TEST_SEED");
  g_seed = s ? strtoull(s, NULL, 0) : sl__now_ns();
  printf("SLUICE_TEST_SEED=%llu\n", (unsigned long long)g_seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blas_sgemm),
      cmocka_unit_test_prestate(test_c_kernel, "generic"),
      cmocka_unit_test_prestate(test_c_kernel, "avx2"),
      cmocka_unit_test_prestate(test_c_kernel, "avx512"),
      cmocka_unit_test(test_c_best),
      cmocka_unit_test(test_chunked),
      cmocka_unit_test(test_team_bits),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_concurrent_callers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
