/* Test helpers for sgemm: matrices sized exactly to their extent (so ASan
 * catches a read or write past them), a double-precision reference, and an
 * error bound that holds for any summation order. */
#ifndef SLUICE_TESTS_SGEMM_REF_H
#define SLUICE_TESTS_SGEMM_REF_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "core_int.h"

/* Elements a rows x cols matrix with row stride ld spans. */
static inline size_t ref_extent(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (size_t)((rows - 1) * ld + cols);
}

/* Values in [-1, 1) on a 1/1024 grid; padding (between width and stride)
 * gets `pad` so a kernel reading it shows up in the result. */
static inline float *ref_matrix(sl_rng *rng, int64_t rows, int64_t cols,
                                int64_t ld, float pad) {
  size_t n = ref_extent(rows, cols, ld);
  float *p = malloc(n ? n * sizeof(float) : 1);
  for (size_t i = 0; i < n; i++) {
    int64_t col = (int64_t)(i % (size_t)ld);
    p[i] = col < cols ? (float)((int)sl__rng_below(rng, 2048) - 1024) / 1024.0f
                      : pad;
  }
  return p;
}

/* C = alpha op(A) op(B) + beta C in double (C not read when beta == 0), and
 * per element the bound gamma * (|alpha| sum |a||b| + |beta c|) with
 * gamma = 2 (k + 2) FLT_EPSILON: Higham, "Accuracy and Stability of
 * Numerical Algorithms", 2nd ed., section 3.5 (inner products), doubled
 * for the float rounding of inputs and output. */
static inline void ref_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                             float alpha, const float *a, int64_t lda,
                             const float *b, int64_t ldb, float beta,
                             const float *c, int64_t ldc, double *want,
                             double *bound) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0, abs = 0;
      for (int64_t p = 0; p < k; p++) {
        double x = ta ? a[p * lda + i] : a[i * lda + p];
        double y = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += x * y;
        abs += fabs(x * y);
      }
      double cv = beta == 0.0f ? 0.0 : (double)beta * c[i * ldc + j];
      want[i * n + j] = alpha * s + cv;
      bound[i * n + j] =
          2.0 * (double)(k + 2) * FLT_EPSILON * (fabs(alpha) * abs + fabs(cv)) +
          1e-30;
    }
}

/* C for a product: values as ref_matrix's with padding `pad`, and NaN
 * inside when beta == 0 (BLAS does not read C then, so the NaN must
 * vanish). */
static inline float *ref_output(sl_rng *rng, int64_t m, int64_t n, int64_t ldc,
                                float beta, float pad) {
  float *c = ref_matrix(rng, m, n, ldc, pad);
  if (beta == 0.0f)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        c[i * ldc + j] = NAN;
  return c;
}

/* Whether C (m x n, row stride ldc) is right: every element within its
 * bound of want, and its padding (columns n .. ldc) still `pad`. When not,
 * the first bad element's place is in *bad_i, *bad_j. */
static inline bool ref_check_c(const float *c, int64_t m, int64_t n,
                               int64_t ldc, const double *want,
                               const double *bound, float pad, int64_t *bad_i,
                               int64_t *bad_j) {
  size_t extent = ref_extent(m, n, ldc);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < ldc && (size_t)(i * ldc + j) < extent; j++) {
      float got = c[i * ldc + j];
      if (j < n ? fabs(got - want[i * n + j]) <= bound[i * n + j] : got == pad)
        continue;
      *bad_i = i;
      *bad_j = j;
      return false;
    }
  return true;
}

#endif
