/* Rows of 16-bit floats (f16, bf16) to f32 and back, for cast and for the
 * matmul's widened operands: the conversions of tensor/dtype_bits.h, bit
 * for bit, with the CPU's instructions where it has them.
 *
 * f16 uses VCVTPH2PS / VCVTPS2PH (AVX-512F; F16C, which every AVX2 CPU
 * has) with round to nearest even, which give dtype_bits.h's results for
 * every number; a block holding a NaN goes through dtype_bits.h, whose NaN
 * payloads are the reference (the instructions quiet a signalling NaN).
 * bf16 is plain integer arithmetic the compiler vectorises. */
#include "cpu/kernel_util.h"
#include "dtype_bits.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

SL__ATTR_AVX512 static void f16_widen_avx512(float *o, const uint16_t *h,
                                             int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256i x = _mm256_loadu_si256((const void *)(h + j));
    /* exponent all ones and a mantissa: a NaN */
    __m256i e = _mm256_and_si256(x, _mm256_set1_epi16(0x7fff));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi16(e, _mm256_set1_epi16(0x7c00))))
      for (int l = 0; l < 16; l++)
        o[j + l] = sl__f16_to_f32_bits(h[j + l]);
    else
      _mm512_storeu_ps(o + j, _mm512_cvtph_ps(x));
  }
  for (; j < n; j++)
    o[j] = sl__f16_to_f32_bits(h[j]);
}

SL__ATTR_AVX512 static void f16_narrow_avx512(uint16_t *o, const float *f,
                                              int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 x = _mm512_loadu_ps(f + j);
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
      for (int l = 0; l < 16; l++)
        o[j + l] = sl__f16_from_f32(f[j + l]);
    else
      _mm256_storeu_si256((void *)(o + j),
                          _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; j < n; j++)
    o[j] = sl__f16_from_f32(f[j]);
}

__attribute__((target("avx2,f16c"))) static void
f16_widen_avx2(float *o, const uint16_t *h, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m128i x = _mm_loadu_si128((const void *)(h + j));
    __m128i e = _mm_and_si128(x, _mm_set1_epi16(0x7fff));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(e, _mm_set1_epi16(0x7c00))))
      for (int l = 0; l < 8; l++)
        o[j + l] = sl__f16_to_f32_bits(h[j + l]);
    else
      _mm256_storeu_ps(o + j, _mm256_cvtph_ps(x));
  }
  for (; j < n; j++)
    o[j] = sl__f16_to_f32_bits(h[j]);
}

__attribute__((target("avx2,f16c"))) static void
f16_narrow_avx2(uint16_t *o, const float *f, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_loadu_ps(f + j);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
      for (int l = 0; l < 8; l++)
        o[j + l] = sl__f16_from_f32(f[j + l]);
    else
      _mm_storeu_si128((void *)(o + j),
                       _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; j < n; j++)
    o[j] = sl__f16_from_f32(f[j]);
}
#endif

void sl__f16_widen(float *o, const uint16_t *h, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (sl__isa_get()) {
  case SL__ISA_AVX512: f16_widen_avx512(o, h, n); return;
  case SL__ISA_AVX2: f16_widen_avx2(o, h, n); return;
  default: break;
  }
#endif
  for (int64_t j = 0; j < n; j++)
    o[j] = sl__f16_to_f32_bits(h[j]);
}

void sl__f16_narrow(uint16_t *o, const float *f, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (sl__isa_get()) {
  case SL__ISA_AVX512: f16_narrow_avx512(o, f, n); return;
  case SL__ISA_AVX2: f16_narrow_avx2(o, f, n); return;
  default: break;
  }
#endif
  for (int64_t j = 0; j < n; j++)
    o[j] = sl__f16_from_f32(f[j]);
}

SL__MULTIVERSION(bf16_widen_rows, (float *o, const uint16_t *h, int64_t n),
                 (o, h, n), {
                   for (int64_t j = 0; j < n; j++)
                     o[j] = sl__bf16_to_f32_bits(h[j]);
                 })

SL__MULTIVERSION(bf16_narrow_rows, (uint16_t * o, const float *f, int64_t n),
                 (o, f, n), {
                   for (int64_t j = 0; j < n; j++)
                     o[j] = sl__bf16_from_f32(f[j]);
                 })

void sl__bf16_widen(float *o, const uint16_t *h, int64_t n) {
  bf16_widen_rows(o, h, n);
}

void sl__bf16_narrow(uint16_t *o, const float *f, int64_t n) {
  bf16_narrow_rows(o, f, n);
}

/* sl__half_convert's parts. */
typedef struct half_run {
  sl_dtype from, to;
  void *o;
  const void *x;
} half_run;

static void half_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const half_run *r = arg;
  if (r->to == SL_DTYPE_F32) {
    float *o = (float *)r->o + b;
    const uint16_t *x = (const uint16_t *)r->x + b;
    if (r->from == SL_DTYPE_F16)
      sl__f16_widen(o, x, e - b);
    else
      sl__bf16_widen(o, x, e - b);
  } else {
    uint16_t *o = (uint16_t *)r->o + b;
    const float *x = (const float *)r->x + b;
    if (r->to == SL_DTYPE_F16)
      sl__f16_narrow(o, x, e - b);
    else
      sl__bf16_narrow(o, x, e - b);
  }
}

void sl__half_convert(sl__team *team, sl_dtype from, sl_dtype to, void *o,
                      const void *x, int64_t n) {
  half_run r = {from, to, o, x};
  sl__team_for(team, n, SL__GRAIN_ELEMS, half_part, &r);
}
