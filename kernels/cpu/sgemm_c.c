/* The C sgemm: sluice's own matrix multiply for when no OpenBLAS can be
 * loaded. Goto-style blocking: a KC x NC block of op(B) and an MC x KC block
 * of op(A) are packed (A pre-scaled by alpha, both zero-padded to whole
 * register tiles) so the micro-kernel streams contiguous memory from L1/L2
 * whatever the transposes and strides were. */
#include <stdlib.h>
#include <string.h>

#include "cpu/blas.h"
#include "cpu/sgemm_micro.h"

/* Block sizes: KC x NR of B (32 KiB at NR = 32) stays in L1 while a tile
 * runs; MC x KC of A (~128 KiB) in L2; KC x NC of B (1 MiB) in L2/L3. */
enum { KC = 256, MC_TARGET = 128, NC_TARGET = 1024, MAX_TILE = 1024 };

/* 4 x 8: 8 accumulators + 2 for B + 1 broadcast fits the 16 SSE or NEON
 * registers every 64-bit target has. */
SL__SGEMM_MICRO(micro_generic, , 4, 2, 4)

static bool usable_always(const sl__cpu_features *f) { return true; }

static const sl__sgemm_kernel generic = {"generic", 4, 8, micro_generic,
                                         usable_always};

int sl__sgemm_c_kernel_count(void) {
  const sl__sgemm_kernel *isa;
  return 1 + sl__sgemm_isa_kernels(&isa);
}

const sl__sgemm_kernel *sl__sgemm_c_kernel(int i) {
  const sl__sgemm_kernel *isa;
  int n = sl__sgemm_isa_kernels(&isa);
  if (i == 0) return &generic;
  if (i < 0 || i > n) return NULL;
  return &isa[i - 1];
}

const sl__sgemm_kernel *sl__sgemm_c_kernel_best(void) {
  const sl__cpu_features *f = sl__cpu_features_get();
  const sl__sgemm_kernel *best = &generic;
  for (int i = 1; i < sl__sgemm_c_kernel_count(); i++) {
    const sl__sgemm_kernel *kern = sl__sgemm_c_kernel(i);
    if (kern->usable(f)) best = kern;
  }
  return best;
}

/* Whether (rows - 1) * ld + cols elements are addressable: a stride that
 * passes the width check can still overflow the offset of the last row. */
static bool extent_fits(int64_t rows, int64_t cols, int64_t ld) {
  int64_t last;
  if (rows == 0 || cols == 0) return true;
  return !__builtin_mul_overflow(rows - 1, ld, &last) &&
         last <= INT64_MAX / (int64_t)sizeof(float) - cols;
}

static sl_status check_matrix(const char *name, const void *p, int64_t rows,
                              int64_t cols, int64_t ld, bool used) {
  int64_t min_ld = cols > 1 ? cols : 1;
  if (ld < min_ld)
    return sl__fail(SL_EINVAL,
                    "sgemm: ld%s = %lld is less than the %lld columns of %s",
                    name, (long long)ld, (long long)min_ld, name);
  if (!extent_fits(rows, cols, ld))
    return sl__fail(SL_EINVAL,
                    "sgemm: %s of %lld rows with ld%s = %lld "
                    "overflows an offset",
                    name, (long long)rows, name, (long long)ld);
  if (used && p == NULL) return sl__fail(SL_EINVAL, "sgemm: %s is NULL", name);
  return SL_OK;
}

sl_status sl__sgemm_check(bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, const void *a, int64_t lda, const void *b,
                          int64_t ldb, const void *c, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0)
    return sl__fail(SL_EINVAL, "sgemm: negative size m=%lld n=%lld k=%lld",
                    (long long)m, (long long)n, (long long)k);
  /* A and B are read only when the product has terms; C whenever it has
   * elements. */
  bool product = m > 0 && n > 0 && k > 0;
  SL_CHECK(
      check_matrix("A", a, trans_a ? k : m, trans_a ? m : k, lda, product));
  SL_CHECK(
      check_matrix("B", b, trans_b ? n : k, trans_b ? k : n, ldb, product));
  SL_CHECK(check_matrix("C", c, m, n, ldc, m > 0 && n > 0));
  return SL_OK;
}

void sl__sgemm_scale_c(int64_t m, int64_t n, float beta, float *c,
                       int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t i = 0; i < m; i++) {
    float *row = c + i * ldc;
    if (beta == 0.0f)
      memset(row, 0, (size_t)n * sizeof *row); /* BLAS: C not read */
    else
      for (int64_t j = 0; j < n; j++)
        row[j] *= beta;
  }
}

/* op(A)[i0 .. i0+mc) x [p0 .. p0+kc), times alpha, into panels of mr rows:
 * panel q holds ap[q*mr*kc + p*mr + r] = alpha * op(A)[i0 + q*mr + r][p0+p],
 * zero past row mc. Each branch reads A along its contiguous direction. */
static void pack_a(bool trans, const float *a, int64_t lda, int64_t i0,
                   int64_t p0, int64_t mc, int64_t kc, float alpha, int mr,
                   float *restrict ap) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    float *panel = ap + ir * kc;
    int64_t rows = SL_MIN((int64_t)mr, mc - ir);
    if (!trans) {
      for (int64_t r = 0; r < rows; r++) {
        const float *src = a + (i0 + ir + r) * lda + p0;
        for (int64_t p = 0; p < kc; p++)
          panel[p * mr + r] = alpha * src[p];
      }
    } else {
      for (int64_t p = 0; p < kc; p++) {
        const float *src = a + (p0 + p) * lda + i0 + ir;
        for (int64_t r = 0; r < rows; r++)
          panel[p * mr + r] = alpha * src[r];
      }
    }
    for (int64_t r = rows; r < mr; r++)
      for (int64_t p = 0; p < kc; p++)
        panel[p * mr + r] = 0.0f;
  }
}

/* op(B)[p0 .. p0+kc) x [j0 .. j0+nc) into panels of nr columns:
 * bp[q*nr*kc + p*nr + c] = op(B)[p0 + p][j0 + q*nr + c], zero past nc. */
static void pack_b(bool trans, const float *b, int64_t ldb, int64_t p0,
                   int64_t j0, int64_t kc, int64_t nc, int nr,
                   float *restrict bp) {
  for (int64_t jr = 0; jr < nc; jr += nr) {
    float *panel = bp + jr * kc;
    int64_t cols = SL_MIN((int64_t)nr, nc - jr);
    if (!trans) {
      for (int64_t p = 0; p < kc; p++) {
        const float *src = b + (p0 + p) * ldb + j0 + jr;
        float *dst = panel + p * nr;
        for (int64_t c = 0; c < cols; c++)
          dst[c] = src[c];
        for (int64_t c = cols; c < nr; c++)
          dst[c] = 0.0f;
      }
    } else {
      for (int64_t c = 0; c < cols; c++) {
        const float *src = b + (j0 + jr + c) * ldb + p0;
        for (int64_t p = 0; p < kc; p++)
          panel[p * nr + c] = src[p];
      }
      for (int64_t c = cols; c < nr; c++)
        for (int64_t p = 0; p < kc; p++)
          panel[p * nr + c] = 0.0f;
    }
  }
}

static int64_t round_up(int64_t x, int64_t to) {
  return (x + to - 1) / to * to;
}

static float *alloc_floats(int64_t n) {
  /* 64-byte alignment: one cache line, and whole ZMM loads never split. */
  size_t bytes = (size_t)round_up(n * (int64_t)sizeof(float), 64);
  float *p = aligned_alloc(64, bytes);
  if (!p) sl__fail(SL_ENOMEM, "sgemm: out of memory packing %zu bytes", bytes);
  return p;
}

sl_status sl__sgemm_c_with(const sl__sgemm_kernel *kern, bool trans_a,
                           bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float beta, float *c,
                           int64_t ldc) {
  SL_CHECK(sl__sgemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc));
  SL_ASSERT(kern->mr * kern->nr <= MAX_TILE);
  if (m == 0 || n == 0) return SL_OK;
  sl__sgemm_scale_c(m, n, beta, c, ldc);
  if (k == 0 || alpha == 0.0f) return SL_OK;

  const int mr = kern->mr, nr = kern->nr;
  const int64_t mc_max = SL_MIN(round_up(m, mr), MC_TARGET / mr * mr);
  const int64_t nc_max = SL_MIN(round_up(n, nr), NC_TARGET / nr * nr);
  const int64_t kc_max = SL_MIN(k, (int64_t)KC);
  float *ap = alloc_floats(mc_max * kc_max);
  float *bp = alloc_floats(nc_max * kc_max);
  if (!ap || !bp) {
    free(ap);
    free(bp);
    return SL_ENOMEM;
  }
  _Alignas(64) float tile[MAX_TILE];

  for (int64_t jc = 0; jc < n; jc += nc_max) {
    int64_t nc = SL_MIN(nc_max, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_max) {
      int64_t kc = SL_MIN(kc_max, k - pc);
      pack_b(trans_b, b, ldb, pc, jc, kc, nc, nr, bp);
      for (int64_t ic = 0; ic < m; ic += mc_max) {
        int64_t mc = SL_MIN(mc_max, m - ic);
        pack_a(trans_a, a, lda, ic, pc, mc, kc, alpha, mr, ap);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          int64_t cols = SL_MIN((int64_t)nr, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += mr) {
            int64_t rows = SL_MIN((int64_t)mr, mc - ir);
            float *cp = c + (ic + ir) * ldc + jc + jr;
            if (rows == mr && cols == nr) {
              kern->fn(kc, ap + ir * kc, bp + jr * kc, cp, ldc);
              continue;
            }
            /* Edge tile: the kernel always writes a whole tile, so it
             * writes into a scratch one and only the part inside C is
             * added; C past its edge may be another tensor. */
            memset(tile, 0, sizeof(float) * (size_t)(mr * nr));
            kern->fn(kc, ap + ir * kc, bp + jr * kc, tile, nr);
            for (int64_t r = 0; r < rows; r++)
              for (int64_t j = 0; j < cols; j++)
                cp[r * ldc + j] += tile[r * nr + j];
          }
        }
      }
    }
  }
  free(ap);
  free(bp);
  return SL_OK;
}

sl_status sl__sgemm_c(bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c,
                      int64_t ldc) {
  return sl__sgemm_c_with(sl__sgemm_c_kernel_best(), trans_a, trans_b, m, n, k,
                          alpha, a, lda, b, ldb, beta, c, ldc);
}
