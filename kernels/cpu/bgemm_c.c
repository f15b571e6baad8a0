/* sluice's bf16 gemm for CPUs with AVX512_BF16: C (f32) = alpha * op(A) *
 * op(B) + beta * C with A and B bf16. vdpbf16ps multiplies pairs of bf16
 * values and adds both products to an f32 lane, so the contraction axis is
 * walked two at a time: packing puts each line's (k, k+1) pair in one
 * 32-bit word, A's broadcast to every lane, B's 16 columns to a vector. The
 * blocking is the C sgemm's (sgemm_c.c), with bf16 panels: half the bytes per
 * block. */
#include <stdlib.h>
#include <string.h>

#include "cpu/blas.h"

/* Register tile MR x NR: 12 x 32 is 24 ZMM accumulators, 2 for B and 1
 * broadcast, 27 of 32. KC values of k (KC / 2 pairs): each block of k
 * reads and writes all of C once, so KC is long, which large products
 * need (2048^3 ran 6% faster with 1024 than with 512, the other shapes
 * of bench_matmul_dtype the same); a B panel (KC x NR bf16, 64 KiB)
 * streams from L2 with an MC x KC block of A (240 KiB); KC x NC of B
 * (1 MiB) in L2/L3. */
enum { MR = 12, NR = 32, KC = 1024, MC = 120, NC = 512 };

bool sl__bgemm_c_usable(void) { return sl__cpu_features_get()->avx512_bf16; }

#if defined(__x86_64__)
#include <immintrin.h>

/* out[r * ldo + j] += alpha * sum over kp pairs q of the dot products of
 * words ap[q * MR + r] and bp[q * NR + j], for r < ROWS (the panel's rows
 * that exist: MR but at its bottom edge) and j < NR; with `store`, out is
 * not read but set to that (the first block of k when beta is 0: C is then
 * written once, not zeroed, read and written). One function per ROWS, so
 * that an edge panel costs its rows, not MR. */
#define SL__BGEMM_MICRO(ROWS)                                                  \
  __attribute__((target("avx512f,avx512bf16"))) static void micro_##ROWS(      \
      int64_t kp, const uint32_t *restrict ap, const uint32_t *restrict bp,    \
      float alpha, bool store, float *restrict out, int64_t ldo) {             \
    __m512 acc[ROWS][2];                                                       \
    for (int r = 0; r < (ROWS); r++)                                           \
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();                             \
    for (int64_t q = 0; q < kp; q++) {                                         \
      __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * NR);                 \
      __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + q * NR + 16);            \
      for (int r = 0; r < (ROWS); r++) {                                       \
        __m512bh a = (__m512bh)_mm512_set1_epi32((int)ap[q * MR + r]);         \
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);                        \
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);                        \
      }                                                                        \
    }                                                                          \
    __m512 va = _mm512_set1_ps(alpha);                                         \
    for (int r = 0; r < (ROWS); r++)                                           \
      for (int v = 0; v < 2; v++) {                                            \
        float *o = out + r * ldo + v * 16;                                     \
        _mm512_storeu_ps(                                                      \
            o, store ? _mm512_mul_ps(acc[r][v], va)                            \
                     : _mm512_fmadd_ps(acc[r][v], va, _mm512_loadu_ps(o)));    \
      }                                                                        \
  }
SL__BGEMM_MICRO(1)
SL__BGEMM_MICRO(2)
SL__BGEMM_MICRO(3)
SL__BGEMM_MICRO(4)
SL__BGEMM_MICRO(5)
SL__BGEMM_MICRO(6)
SL__BGEMM_MICRO(7)
SL__BGEMM_MICRO(8)
SL__BGEMM_MICRO(9)
SL__BGEMM_MICRO(10)
SL__BGEMM_MICRO(11)
SL__BGEMM_MICRO(12)

typedef void (*micro_fn)(int64_t, const uint32_t *, const uint32_t *, float,
                         bool, float *, int64_t);
/* micro_by_rows[r]: the kernel for r rows (1 .. MR). */
static const micro_fn micro_by_rows[MR + 1] = {
    NULL,    micro_1, micro_2, micro_3,  micro_4,  micro_5, micro_6,
    micro_7, micro_8, micro_9, micro_10, micro_11, micro_12};
#else
typedef void (*micro_fn)(int64_t, const uint32_t *, const uint32_t *, float,
                         bool, float *, int64_t);
static const micro_fn micro_by_rows[MR + 1];
#endif

/* Packing. A panel of width W (MR rows of op(A), or NR columns of op(B))
 * over kc values of k is kp = ceil(kc / 2) groups of W words: word
 * dst[t*W + r] holds line r's values at k = 2t (low half) and 2t + 1 (high
 * half; zero past kc), and lines past `lines` are zero. Both operands pack
 * the same way; which primitive depends on whether k is contiguous. */

#if defined(__x86_64__)
/* 16 words of up to 16 lines (lines past `lines` zero), from words t0 on,
 * transposed into dst[(t0 + t) * w + r] for t < 16, r < n: a 16 x 16
 * transpose of 32-bit words in registers (unpacks of 32 and 64 bits, then
 * two rounds of 128-bit lane shuffles), 16 stores instead of 256. */
__attribute__((target("avx512f"))) static void
transpose16(const uint16_t *src, int64_t ld, int64_t lines, int64_t t0, int w,
            int n, uint32_t *restrict dst) {
  __m512i x[16], y[16];
  for (int r = 0; r < 16; r++)
    x[r] = r < lines ? _mm512_loadu_si512(src + r * ld + 2 * t0)
                     : _mm512_setzero_si512();
  for (int r = 0; r < 16; r += 2) {
    y[r] = _mm512_unpacklo_epi32(x[r], x[r + 1]);
    y[r + 1] = _mm512_unpackhi_epi32(x[r], x[r + 1]);
  }
  for (int r = 0; r < 16; r += 4)
    for (int h = 0; h < 2; h++) {
      x[r + 2 * h] = _mm512_unpacklo_epi64(y[r + h], y[r + 2 + h]);
      x[r + 2 * h + 1] = _mm512_unpackhi_epi64(y[r + h], y[r + 2 + h]);
    }
  /* Now x[4g + i] holds, in each 128-bit lane l, words t = 4l + i of lines
   * 4g .. 4g+3. Gather lane l of the four groups into one vector. */
  for (int i = 0; i < 4; i++) {
    __m512i a = _mm512_shuffle_i32x4(x[i], x[4 + i], 0x88);
    __m512i b = _mm512_shuffle_i32x4(x[i], x[4 + i], 0xdd);
    __m512i c = _mm512_shuffle_i32x4(x[8 + i], x[12 + i], 0x88);
    __m512i d = _mm512_shuffle_i32x4(x[8 + i], x[12 + i], 0xdd);
    y[i] = _mm512_shuffle_i32x4(a, c, 0x88);      /* lane 0: t = i */
    y[4 + i] = _mm512_shuffle_i32x4(b, d, 0x88);  /* lane 1: t = 4 + i */
    y[8 + i] = _mm512_shuffle_i32x4(a, c, 0xdd);  /* lane 2: t = 8 + i */
    y[12 + i] = _mm512_shuffle_i32x4(b, d, 0xdd); /* lane 3: t = 12 + i */
  }
  __mmask16 keep = (__mmask16)((1u << n) - 1);
  for (int t = 0; t < 16; t++)
    _mm512_mask_storeu_epi32(dst + (t0 + t) * w, keep, y[t]);
}
#endif

/* k contiguous: line r starts at src + r * ld (A as stored, B transposed):
 * each word is two adjacent values, read as one. */
static void pack_k_contiguous(const uint16_t *src, int64_t ld, int64_t lines,
                              int64_t kc, int w, uint32_t *restrict dst) {
  int64_t pairs = kc / 2, kp = (kc + 1) / 2, done = 0;
#if defined(__x86_64__)
  /* Whole blocks of 16 words by transposes; w is 12 (A) or 32 (B). */
  done = pairs / 16 * 16;
  for (int64_t r0 = 0; r0 < lines; r0 += 16)
    for (int64_t t0 = 0; t0 < done; t0 += 16)
      transpose16(src + r0 * ld, ld, SL_MIN(lines - r0, (int64_t)16), t0, w,
                  SL_MIN(w - (int)r0, 16), dst + r0);
#endif
  for (int64_t r = 0; r < lines; r++) {
    const uint16_t *s = src + r * ld;
    for (int64_t t = done; t < pairs; t++) {
      uint32_t word;
      memcpy(&word, s + 2 * t, sizeof word);
      dst[t * w + r] = word;
    }
    /* An odd last value: its pair's other half may lie past the matrix. */
    if (kc & 1) dst[pairs * w + r] = s[kc - 1];
  }
  for (int64_t t = 0; t < kp; t++)
    for (int64_t r = lines; r < w; r++)
      dst[t * w + r] = 0;
}

/* k strided: line r's value at k = p is src[p * ld + r] (A transposed, B as
 * stored): rows 2t and 2t + 1 interleave, a loop that vectorises. */
static void pack_k_strided(const uint16_t *src, int64_t ld, int64_t lines,
                           int64_t kc, int w, uint32_t *restrict dst) {
  int64_t kp = (kc + 1) / 2;
  for (int64_t t = 0; t < kp; t++) {
    const uint16_t *lo = src + 2 * t * ld;
    uint32_t *d = dst + t * w;
    if (2 * t + 1 < kc) {
      const uint16_t *hi = lo + ld;
      for (int64_t r = 0; r < lines; r++)
        d[r] = lo[r] | (uint32_t)hi[r] << 16;
    } else {
      for (int64_t r = 0; r < lines; r++)
        d[r] = lo[r];
    }
    for (int64_t r = lines; r < w; r++)
      d[r] = 0;
  }
}

/* op(A)[i0 .. i0+mc) x [p0 .. p0+kc) into panels of MR rows. */
static void pack_a(bool trans, const uint16_t *a, int64_t lda, int64_t i0,
                   int64_t p0, int64_t mc, int64_t kc, uint32_t *ap) {
  int64_t kp = (kc + 1) / 2;
  for (int64_t ir = 0; ir < mc; ir += MR) {
    int64_t i = i0 + ir, rows = SL_MIN((int64_t)MR, mc - ir);
    if (trans)
      pack_k_strided(a + p0 * lda + i, lda, rows, kc, MR, ap + ir * kp);
    else
      pack_k_contiguous(a + i * lda + p0, lda, rows, kc, MR, ap + ir * kp);
  }
}

/* op(B)[p0 .. p0+kc) x [j0 .. j0+nc) into panels of NR columns. */
static void pack_b(bool trans, const uint16_t *b, int64_t ldb, int64_t p0,
                   int64_t j0, int64_t kc, int64_t nc, uint32_t *bp) {
  int64_t kp = (kc + 1) / 2;
  for (int64_t jr = 0; jr < nc; jr += NR) {
    int64_t j = j0 + jr, cols = SL_MIN((int64_t)NR, nc - jr);
    if (trans)
      pack_k_contiguous(b + j * ldb + p0, ldb, cols, kc, NR, bp + jr * kp);
    else
      pack_k_strided(b + p0 * ldb + j, ldb, cols, kc, NR, bp + jr * kp);
  }
}

static void *alloc_packed(size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, bytes);
  if (!p) sl__fail(SL_ENOMEM, "bgemm: out of memory packing %zu bytes", bytes);
  return p;
}

sl_status sl__bgemm_c(bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const uint16_t *a, int64_t lda,
                      const uint16_t *b, int64_t ldb, float beta, float *c,
                      int64_t ldc) {
  SL_CHECK(sl__sgemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc));
  if (!sl__bgemm_c_usable())
    return sl__fail(SL_EUNSUPPORTED,
                    "bgemm: this CPU has no AVX512_BF16 (vdpbf16ps)");
  if (m == 0 || n == 0) return SL_OK;
  if (k == 0 || alpha == 0.0f) {
    sl__sgemm_scale_c(m, n, beta, c, ldc);
    return SL_OK;
  }
  /* beta 0: the first block of k stores into C (BLAS: C is not read). */
  if (beta != 0.0f) sl__sgemm_scale_c(m, n, beta, c, ldc);

  const int64_t mc_max = SL_MIN((m + MR - 1) / MR * MR, (int64_t)MC);
  const int64_t nc_max = SL_MIN((n + NR - 1) / NR * NR, (int64_t)NC);
  const int64_t kc_max = SL_MIN(k + (k & 1), (int64_t)KC);
  uint32_t *ap = alloc_packed((size_t)(mc_max * kc_max / 2) * sizeof *ap);
  uint32_t *bp = alloc_packed((size_t)(nc_max * kc_max / 2) * sizeof *bp);
  if (!ap || !bp) {
    free(ap);
    free(bp);
    return SL_ENOMEM;
  }
  _Alignas(64) float tile[MR * NR];

  for (int64_t jc = 0; jc < n; jc += nc_max) {
    int64_t nc = SL_MIN(nc_max, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_max) {
      int64_t kc = SL_MIN(kc_max, k - pc), kp = (kc + 1) / 2;
      pack_b(trans_b, b, ldb, pc, jc, kc, nc, bp);
      for (int64_t ic = 0; ic < m; ic += mc_max) {
        int64_t mc = SL_MIN(mc_max, m - ic);
        pack_a(trans_a, a, lda, ic, pc, mc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          int64_t cols = SL_MIN((int64_t)NR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += MR) {
            int64_t rows = SL_MIN((int64_t)MR, mc - ir);
            float *cp = c + (ic + ir) * ldc + jc + jr;
            const uint32_t *at = ap + ir * kp;
            const uint32_t *bt = bp + jr * kp;
            micro_fn micro = micro_by_rows[rows];
            bool store = pc == 0 && beta == 0.0f;
            if (cols == NR) {
              micro(kp, at, bt, alpha, store, cp, ldc);
              continue;
            }
            /* Right edge: the kernel writes NR columns, so into a scratch
             * tile; only the part inside C goes there (C past its edge may
             * be another tensor). */
            micro(kp, at, bt, alpha, true, tile, NR);
            for (int64_t r = 0; r < rows; r++)
              for (int64_t j = 0; j < cols; j++)
                cp[r * ldc + j] = store ? tile[r * NR + j]
                                        : cp[r * ldc + j] + tile[r * NR + j];
          }
        }
      }
    }
  }
  free(ap);
  free(bp);
  return SL_OK;
}
