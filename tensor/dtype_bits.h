/* The 16-bit float formats' conversions, one definition for the host
 * (tensor/dtype.c's public sl_f32_to_f16 and friends, and every CPU kernel
 * through them) and the CUDA kernels (SL__HD: host and device under nvcc),
 * so that a cast gives the same bits on either device. Round to nearest,
 * ties to even; NaN stays NaN (quiet); overflow rounds to infinity. */
#ifndef SLUICE_TENSOR_DTYPE_BITS_H
#define SLUICE_TENSOR_DTYPE_BITS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core_int.h"

static inline SL__HD uint32_t sl__f32_bits(float f) {
  union {
    float f;
    uint32_t u;
  } v;
  v.f = f;
  return v.u;
}

static inline SL__HD float sl__bits_f32(uint32_t u) {
  union {
    float f;
    uint32_t u;
  } v;
  v.u = u;
  return v.f;
}

/* Rounds m >> shift to nearest, ties to even. shift is in [1, 31]. */
static inline SL__HD uint32_t sl__shift_rne(uint32_t m, int shift) {
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return q;
}

static inline SL__HD uint16_t sl__f16_from_f32(float f) {
  uint32_t u = sl__f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  int exp = (int)((u >> 23) & 0xff);
  uint32_t mant = u & 0x7fffff;
  if (exp == 0xff) {
    /* NaN stays NaN: keep the top payload bits and set the quiet bit so a
     * payload living only in the low bits cannot turn into infinity. */
    if (mant) return (uint16_t)(sign | 0x7e00 | (mant >> 13));
    return (uint16_t)(sign | 0x7c00);
  }
  int e = exp - 127 + 15; /* rebias */
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    /* f16 subnormal (or zero): its unit is 2^-24. f32 subnormals are far
     * below half of that, so exp == 0 always rounds to zero. */
    if (exp == 0) return sign;
    int shift = 14 - e;          /* = 126 - exp */
    if (shift > 24) return sign; /* below half the smallest subnormal */
    /* A carry out of the mantissa lands on 0x400, the smallest normal. */
    return (uint16_t)(sign | sl__shift_rne(mant | 0x800000, shift));
  }
  /* A carry out of the mantissa bumps the exponent; from e == 30 that gives
   * exactly 0x7c00, infinity, which is the correctly rounded result. */
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static inline SL__HD float sl__f16_to_f32_bits(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return sl__bits_f32(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    /* Subnormal: mant * 2^-24 is exact in f32. */
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  return sl__bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

static inline SL__HD uint16_t sl__bf16_from_f32(float f) {
  uint32_t u = sl__f32_bits(f);
  if ((u & 0x7fffffff) > 0x7f800000) /* NaN: truncate, keep it quiet */
    return (uint16_t)((u >> 16) | 0x0040);
  /* bf16 is the top half of f32, so rounding is adding just under half an
   * ulp plus the kept lsb (the tie breaker); a carry into the exponent
   * is the correct rounding, including up to infinity. */
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static inline SL__HD float sl__bf16_to_f32_bits(uint16_t h) {
  return sl__bits_f32((uint32_t)h << 16);
}

/* Double -> a binary format with ebits exponent and mbits mantissa bits,
 * rounded once (converting through float first would round twice and can
 * be off by one ulp). Works on the value, not on bits, so it is independent
 * of the bit-level f32 paths above, which the tests compare it with. */
static inline SL__HD uint16_t sl__narrow_double(double v, int ebits,
                                                int mbits) {
  uint16_t sign = signbit(v) ? (uint16_t)(1u << (ebits + mbits)) : 0;
  uint16_t inf = (uint16_t)(((1u << ebits) - 1) << mbits);
  if (isnan(v)) return (uint16_t)(sign | inf | (1u << (mbits - 1)));
  if (isinf(v)) return (uint16_t)(sign | inf);
  double a = fabs(v);
  if (a == 0) return sign;
  int bias = (1 << (ebits - 1)) - 1;
  int emin = 1 - bias;
  int e2;
  frexp(a, &e2);  /* a = m * 2^e2, m in [0.5, 1) */
  int x = e2 - 1; /* a = 1.f * 2^x */
  bool subnormal = x < emin;
  /* n counts quanta (ulps) of the target format at a's exponent: exact in
   * double because it is a scaling by a power of two. */
  double n = ldexp(a, (subnormal ? emin : x) * -1 + mbits);
  double fl = floor(n);
  double frac = n - fl;
  uint32_t q = (uint32_t)fl;
  if (frac > 0.5 || (frac == 0.5 && (q & 1))) q++;
  if (subnormal) return (uint16_t)(sign | q); /* q == 2^mbits: min normal */
  if (q == (1u << (mbits + 1))) {
    q >>= 1;
    x++;
  }
  int biased = x + bias;
  if (biased >= (1 << ebits) - 1) return (uint16_t)(sign | inf);
  return (uint16_t)(sign | ((uint32_t)biased << mbits) | (q - (1u << mbits)));
}

#endif
