/* The bf16 gemm (bf16 A and B, f32 C) against a double-precision reference
 * of the same bf16 values: sluice's AVX512_BF16 kernel and whichever gemm
 * sl__blas_bgemm runs (OpenBLAS's cblas_sbgemm where the loaded library
 * has one). All four transposes, odd k (the pair packing's padding), every
 * block boundary, strides wider than the rows, alpha/beta, zero sizes, the
 * team cut, bad arguments. Skipped, with a message, on CPUs without
 * AVX512_BF16, where matmul widens bf16 for sgemm instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include <sluice/tensor.h>

#include "cpu/blas.h"
#include "sgemm_ref.h"

#define BF16_NAN 0x7fc0
#define SENTINEL 12345.0f

typedef sl_status (*bgemm_fn)(bool, bool, int64_t, int64_t, int64_t, float,
                              const uint16_t *, int64_t, const uint16_t *,
                              int64_t, float, float *, int64_t);

static void skip_without_bf16(void) {
  if (!sl__bgemm_c_usable()) {
    print_message("this CPU has no AVX512_BF16: no bf16 gemm (matmul widens "
                  "bf16 inputs for sgemm)\n");
    skip();
  }
}

/* A rows x cols bf16 matrix of values in [-1, 1), padded to ld with NaN
 * (a kernel reading the padding poisons its result), and its f32 values
 * (for the reference). */
static uint16_t *bf16_matrix(sl_rng *rng, int64_t rows, int64_t cols,
                             int64_t ld, float **values) {
  size_t n = ref_extent(rows, cols, ld);
  uint16_t *h = malloc(n ? n * sizeof *h : 1);
  float *f = malloc(n ? n * sizeof *f : 1);
  for (size_t i = 0; i < n; i++) {
    bool in = (int64_t)(i % (size_t)ld) < cols;
    float v = (float)((int)sl__rng_below(rng, 2048) - 1024) / 1024.0f;
    h[i] = in ? sl_f32_to_bf16(v) : BF16_NAN;
    f[i] = sl_bf16_to_f32(h[i]);
  }
  *values = f;
  return h;
}

/* One product, element by element within the f32 summation bound; C's
 * padding must come back bit for bit. */
static void check_case(bgemm_fn fn, const char *name, sl_rng *rng, bool ta,
                       bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       float beta, int64_t pad) {
  int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int64_t lda = SL_MAX(ac, 1) + pad, ldb = SL_MAX(bc, 1) + pad,
          ldc = SL_MAX(n, 1) + pad;
  float *af, *bf;
  uint16_t *a = bf16_matrix(rng, ar, ac, lda, &af);
  uint16_t *b = bf16_matrix(rng, br, bc, ldb, &bf);
  float *c = ref_output(rng, m, n, ldc, beta, SENTINEL);
  size_t mn = (size_t)(m * n) + 1;
  double *want = malloc(mn * sizeof *want), *bound = malloc(mn * sizeof *bound);
  ref_sgemm(ta, tb, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc, want,
            bound);
  sl_status st = fn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != SL_OK) {
    print_error("%s: %s\n", name, sl_last_error());
    fail();
  }
  int64_t i, j;
  if (!ref_check_c(c, m, n, ldc, want, bound, SENTINEL, &i, &j)) {
    print_error("%s ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g beta=%g "
                "pad=%lld: C[%lld][%lld] = %.9g, want %.9g\n",
                name, ta, tb, (long long)m, (long long)n, (long long)k, alpha,
                beta, (long long)pad, (long long)i, (long long)j,
                c[i * ldc + j], j < n ? want[i * n + j] : SENTINEL);
    fail();
  }
  free(a), free(b), free(af), free(bf), free(c), free(want), free(bound);
}

/* {1, 7, 33, 129}^2 x {1, 2, 7, 33, 129} (odd k leaves half a pair), four
 * transposes, alpha/beta pairs and padded strides; then sizes past every
 * block (m past MC = 120, n past NC = 512 twice, k past KC = 1024 twice,
 * odd). */
static void all_checks(bgemm_fn fn, const char *name) {
  static const int64_t sizes[] = {1, 7, 33, 129};
  static const int64_t ks[] = {1, 2, 7, 33, 129};
  static const float ab[][2] = {{1, 0}, {0.5f, 1}, {-2, 0.25f}, {1, 1}};
  sl_rng rng = {0x5eed};
  int cnt = 0;
  for (int t = 0; t < 4; t++)
    for (size_t im = 0; im < 4; im++)
      for (size_t in = 0; in < 4; in++)
        for (size_t ik = 0; ik < SL_ARRAY_LEN(ks); ik++, cnt++)
          check_case(fn, name, &rng, t & 1, t & 2, sizes[im], sizes[in], ks[ik],
                     ab[cnt % 4][0], ab[cnt % 4][1], (cnt / 4) % 2 ? 3 : 0);
  check_case(fn, name, &rng, false, false, 130, 1030, 2101, 1.0f, 0.0f, 1);
  check_case(fn, name, &rng, true, true, 130, 1030, 2100, 0.75f, 0.5f, 0);
  check_case(fn, name, &rng, false, true, 250, 70, 1500, 1.0f, 0.0f, 0);
}

/* Zero sizes: nothing happens to an empty C; k = 0 or alpha = 0 gives
 * C = beta C without reading A or B. */
static void zero_sizes(bgemm_fn fn) {
  float c[6];
  uint16_t nan_ab[6];
  for (int i = 0; i < 6; i++) {
    nan_ab[i] = BF16_NAN;
    c[i] = (float)i;
  }
  assert_int_equal(fn(false, false, 0, 3, 2, 1, nan_ab, 2, nan_ab, 3, 0, c, 3),
                   SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == (float)i);
  assert_int_equal(fn(false, false, 2, 3, 0, 1, NULL, 1, NULL, 3, 2, c, 3),
                   SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == 2.0f * (float)i);
  c[4] = NAN;
  assert_int_equal(fn(false, false, 2, 3, 2, 0, nan_ab, 2, nan_ab, 3, 0, c, 3),
                   SL_OK);
  for (int i = 0; i < 6; i++)
    assert_true(c[i] == 0.0f);
}

static void test_sluice_kernel(void **state) {
  skip_without_bf16();
  all_checks(sl__bgemm_c, "sluice avx512bf16");
  zero_sizes(sl__bgemm_c);
}

/* What matmul calls: sluice's unless SLUICE_BGEMM says otherwise (ctest
 * runs this file once per setting, and with a value it does not know,
 * which warns and keeps sluice's); OpenBLAS's only where the loaded
 * library exports cblas_sbgemm with a kernel set that runs vdpbf16ps. */
static void test_dispatch(void **state) {
  const char *want = getenv("SLUICE_BGEMM");
  const char *name = sl__blas_bgemm_name();
  print_message("BLAS: %s\nSLUICE_BGEMM=%s: bf16 gemm %s\n",
                sl__blas_describe(), want ? want : "",
                name ? name : "(none: widened)");
  if (want && strcmp(want, "off") == 0) {
    assert_null(name);
    uint16_t x = 0x3f80;
    float c;
    assert_int_equal(
        sl__blas_bgemm(false, false, 1, 1, 1, 1, &x, 1, &x, 1, 0, &c, 1),
        SL_EUNSUPPORTED);
    assert_non_null(strstr(sl_last_error(), "SLUICE_BGEMM=off"));
    return;
  }
  skip_without_bf16();
  assert_non_null(name);
  /* Asked for OpenBLAS's, a library without one leaves sluice's. */
  if (!(want && strcmp(want, "openblas") == 0))
    assert_string_equal(name, "sluice avx512bf16");
  all_checks(sl__blas_bgemm, name);
  zero_sizes(sl__blas_bgemm);
}

/* Cut over a team, a product gives the bits of the uncut one (sluice's
 * kernel; OpenBLAS's sbgemm does not promise it). */
static void test_team_bits(void **state) {
  skip_without_bf16();
  const char *name = sl__blas_bgemm_name();
  if (!name || strcmp(name, "sluice avx512bf16") != 0) {
    print_message("bf16 gemm is %s, not sluice's\n", name ? name : "off");
    skip();
  }
  static const int64_t shapes[][3] = {
      {301, 97, 83}, {97, 301, 83}, {256, 1024, 64}, {33, 17, 5001}};
  sl_rng rng = {7};
  sl__team *team;
  assert_int_equal(sl__team_create(3, NULL, "bgemm", &team), SL_OK);
  for (size_t i = 0; i < SL_ARRAY_LEN(shapes); i++)
    for (int t = 0; t < 4; t++) {
      bool ta = t & 1, tb = t & 2;
      int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
      int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
      float *af, *bf;
      uint16_t *a = bf16_matrix(&rng, ta ? k : m, ta ? m : k, lda, &af);
      uint16_t *b = bf16_matrix(&rng, tb ? n : k, tb ? k : n, ldb, &bf);
      size_t nc = (size_t)(m * ldc);
      float *c1 = malloc(nc * 4), *c2 = malloc(nc * 4);
      for (size_t j = 0; j < nc; j++)
        c1[j] = c2[j] = (float)j;
      assert_int_equal(
          sl__blas_bgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, 2.0f, c1, ldc),
          SL_OK);
      assert_int_equal(sl__blas_bgemm_team(team, ta, tb, m, n, k, 0.5f, a, lda,
                                           b, ldb, 2.0f, c2, ldc),
                       SL_OK);
      assert_memory_equal(c1, c2, nc * 4);
      free(a), free(b), free(af), free(bf), free(c1), free(c2);
    }
  sl__team_destroy(team);
}

/* Bad arguments: SL_EINVAL naming the argument; on a CPU without the
 * instruction, sluice's kernel says so. */
static void test_bad_arguments(void **state) {
  uint16_t x[4] = {0};
  float c[4];
  if (!sl__bgemm_c_usable()) {
    assert_int_equal(sl__bgemm_c(false, false, 1, 1, 1, 1, x, 1, x, 1, 0, c, 1),
                     SL_EUNSUPPORTED);
    assert_non_null(strstr(sl_last_error(), "AVX512_BF16"));
    assert_int_equal(
        sl__blas_bgemm(false, false, 1, 1, 1, 1, x, 1, x, 1, 0, c, 1),
        SL_EUNSUPPORTED);
    return;
  }
  assert_int_equal(sl__bgemm_c(false, false, 2, 2, 2, 1, x, 1, x, 2, 0, c, 2),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "ldA"));
  assert_int_equal(
      sl__blas_bgemm(false, false, -1, 2, 2, 1, x, 2, x, 2, 0, c, 2),
      SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "negative"));
  assert_int_equal(
      sl__blas_bgemm(false, false, 2, 2, 2, 1, NULL, 2, x, 2, 0, c, 2),
      SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "A is NULL"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sluice_kernel),
      cmocka_unit_test(test_dispatch),
      cmocka_unit_test(test_team_bits),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
