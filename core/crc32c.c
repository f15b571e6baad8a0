/* CRC32C (Castagnoli) for the data plane's frame checks and checkpoint
 * files: a checksum against corruption, not a defence against an attacker
 * (the data plane's handshake HMAC is).
 *
 * Three implementations of the same function, the fastest the CPU has:
 *   - carry-less multiplication folding with VPCLMULQDQ and AVX-512 (four
 *     128-bit lanes per instruction, 256 bytes a round), for 1 KiB and
 *     more: Gopal et al., "Fast CRC Computation for Generic Polynomials
 *     Using PCLMULQDQ Instruction" (Intel, 2009). About 4x the crc32
 *     chains here (67 vs 17 GB/s in cache, 38 vs 7 GB/s from memory);
 *     the 128-bit PCLMULQDQ version measured no faster than the chains in
 *     cache, so CPUs without AVX-512 keep the chains;
 *   - the SSE4.2 crc32 instruction, run as three independent chains over
 *     three adjacent blocks so its 3-cycle latency is hidden, the chains
 *     then joined by the linearity of the CRC register (below);
 *   - tables, eight bytes per step ("slicing by 8": eight 256-entry tables,
 *     table k giving the register's contribution of a byte k positions
 *     back), for any CPU.
 *
 * The register r represents the polynomial sum of bit_i(r) x^(31-i)
 * ("reflected"), and feeding n bytes D to register r gives
 *   raw(r, D) = r * x^(8n) + raw(0, D)        (mod P),
 * so three chains started at r, 0 and 0 over blocks A, B, C of B bytes
 * each combine as ((c_A * x^(8B) + c_B) * x^(8B)) + c_C. Multiplying a
 * register by the constant x^(8B) is linear in its bits, so it is four
 * table lookups, one per byte (shift_table). The public CRC is
 * ~raw(~crc, D), the usual pre- and post-inversion.
 *
 * Folding. raw(0, D) = D(x) x^32 mod P depends on D only modulo P, so a
 * 128-bit accumulator X (16 bytes of the stream, reflected: bit k is the
 * x^(127-k) term) followed by more data can be replaced by
 * X x^F mod P placed F bits later. With X = A x^64 + B (A: the low
 * quadword, which comes first in the stream), X x^F = A x^(64+F) + B x^F,
 * and each half is one 64x32-bit carry-less product with a constant
 * x^(64+F) mod P or x^F mod P. A reflected carry-less product of two
 * 64-bit operands comes out multiplied by x (bit k of the product is the
 * x^(126-k) term), so the constants are taken one power lower
 * (fold_const). The register r enters as an XOR into the first four bytes;
 * the last accumulator is fed to the crc32 instruction as 16 bytes of
 * stream (same residue, so same CRC), then the tail. */
#include <pthread.h>
#include <string.h>

#include "crc32c.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define POLY 0x82f63b78u /* x^32 mod P, reflected */
#define BLOCK 1024u      /* bytes per chain per round of the 3-way loop */

static uint32_t tables[8][256];
static uint32_t shift_table[4][256]; /* r -> r * x^(8*BLOCK) mod P */
static bool have_hw, have_vclmul;
/* Fold constants (fold_const) for distances of 128, 512 and 2048 bits. */
static uint64_t k128[2], k512[2], k2048[2];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* a * b mod P, both reflected: bit k of the loop is the x^k term of a. */
static uint32_t gf_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int k = 0; k < 32; k++) {
    if (a & (1u << (31 - k))) p ^= b;
    b = (b >> 1) ^ ((b & 1u) ? POLY : 0u);
  }
  return p;
}

/* x^e mod P, in the usual (not reflected) bit order: bit d is x^d. */
static uint32_t xpow_mod(uint32_t e) {
  uint32_t r = 1;
  while (e--)
    r = (r << 1) ^ ((r & 0x80000000u) ? 0x1edc6f41u : 0u);
  return r;
}

/* A polynomial of degree < 32 as the reflected 64-bit operand of a
 * carry-less product: x^d is bit 63-d. */
static uint64_t refl64(uint32_t m) {
  uint64_t v = 0;
  for (int d = 0; d < 32; d++)
    if (m & (1u << d)) v |= 1ull << (63 - d);
  return v;
}

/* Constants folding an accumulator forward by f bits: for its low
 * quadword x^(64+f) mod P, for its high one x^f mod P, each divided by x
 * (see the file comment). */
static void fold_const(uint32_t f, uint64_t k[2]) {
  k[0] = refl64(xpow_mod(64 + f - 1));
  k[1] = refl64(xpow_mod(f - 1));
}

static void init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t r = i;
    for (int k = 0; k < 8; k++)
      r = (r >> 1) ^ ((r & 1u) ? POLY : 0u);
    tables[0][i] = r;
  }
  for (int k = 1; k < 8; k++)
    for (uint32_t i = 0; i < 256; i++)
      tables[k][i] =
          (tables[k - 1][i] >> 8) ^ tables[0][tables[k - 1][i] & 0xffu];
  uint32_t xn = 1u << 31; /* x^0 */
  for (uint32_t i = 0; i < 8 * BLOCK; i++)
    xn = (xn >> 1) ^ ((xn & 1u) ? POLY : 0u);
  for (int j = 0; j < 4; j++)
    for (uint32_t v = 0; v < 256; v++)
      shift_table[j][v] = gf_mul(xn, v << (8 * j));
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_hw = __builtin_cpu_supports("sse4.2");
  have_vclmul = have_hw && __builtin_cpu_supports("pclmul") &&
                __builtin_cpu_supports("avx512f") &&
                __builtin_cpu_supports("vpclmulqdq");
#endif
  fold_const(128, k128);
  fold_const(512, k512);
  fold_const(2048, k2048);
}

static inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v); /* little-endian hosts (x86-64, aarch64) */
  return v;
}

static uint32_t raw_sw(uint32_t r, const uint8_t *p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v = load64(p) ^ r;
    r = tables[7][v & 0xff] ^ tables[6][(v >> 8) & 0xff] ^
        tables[5][(v >> 16) & 0xff] ^ tables[4][(v >> 24) & 0xff] ^
        tables[3][(v >> 32) & 0xff] ^ tables[2][(v >> 40) & 0xff] ^
        tables[1][(v >> 48) & 0xff] ^ tables[0][v >> 56];
  }
  for (; n > 0; n--, p++)
    r = (r >> 8) ^ tables[0][(r ^ *p) & 0xffu];
  return r;
}

static inline uint32_t shift_block(uint32_t r) {
  return shift_table[0][r & 0xff] ^ shift_table[1][(r >> 8) & 0xff] ^
         shift_table[2][(r >> 16) & 0xff] ^ shift_table[3][r >> 24];
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
raw_hw(uint32_t r, const uint8_t *p, size_t n) {
  while (n >= 3 * BLOCK) {
    uint64_t c0 = r, c1 = 0, c2 = 0;
    for (size_t i = 0; i < BLOCK; i += 8) {
      c0 = _mm_crc32_u64(c0, load64(p + i));
      c1 = _mm_crc32_u64(c1, load64(p + BLOCK + i));
      c2 = _mm_crc32_u64(c2, load64(p + 2 * BLOCK + i));
    }
    r = shift_block(shift_block((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
    p += 3 * BLOCK;
    n -= 3 * BLOCK;
  }
  uint64_t c = r;
  for (; n >= 8; n -= 8, p += 8)
    c = _mm_crc32_u64(c, load64(p));
  r = (uint32_t)c;
  for (; n > 0; n--, p++)
    r = _mm_crc32_u8(r, *p);
  return r;
}

#define VCLMUL_MIN 1024u /* shorter: the crc32 chains */

__attribute__((target("sse4.2,pclmul"))) static inline __m128i
fold128(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                     _mm_clmulepi64_si128(x, k, 0x11)),
                       next);
}

/* The last accumulator and the tail: the accumulator is 16 bytes of
 * stream with the same residue. */
__attribute__((target("sse4.2,pclmul"))) static uint32_t
finish(__m128i x, const uint8_t *p, size_t n) {
  uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
  c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
  return raw_hw((uint32_t)c, p, n);
}

#define VCLMUL_TARGET "sse4.2,pclmul,avx512f,vpclmulqdq"

__attribute__((target(VCLMUL_TARGET))) static inline __m512i
fold512(__m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                   0x96); /* a ^ b ^ c */
}

/* Four 512-bit accumulators (16 lanes of 128 bits), 256 bytes a round.
 * n >= 256. */
__attribute__((target(VCLMUL_TARGET))) static uint32_t
raw_vclmul(uint32_t r, const uint8_t *p, size_t n) {
  __m512i x0 = _mm512_xor_si512(
      _mm512_loadu_si512(p), _mm512_castsi128_si512(_mm_cvtsi32_si128((int)r)));
  __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128),
          x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  __m512i k = _mm512_broadcast_i32x4(
      _mm_set_epi64x((long long)k2048[1], (long long)k2048[0]));
  for (; n >= 256; n -= 256, p += 256) {
    x0 = fold512(x0, k, _mm512_loadu_si512(p));
    x1 = fold512(x1, k, _mm512_loadu_si512(p + 64));
    x2 = fold512(x2, k, _mm512_loadu_si512(p + 128));
    x3 = fold512(x3, k, _mm512_loadu_si512(p + 192));
  }
  k = _mm512_broadcast_i32x4(
      _mm_set_epi64x((long long)k512[1], (long long)k512[0]));
  x1 = fold512(x0, k, x1);
  x2 = fold512(x1, k, x2);
  x3 = fold512(x2, k, x3);
  /* the four lanes of x3 are consecutive 16-byte slots */
  __m128i kk = _mm_set_epi64x((long long)k128[1], (long long)k128[0]);
  __m128i y = _mm512_extracti32x4_epi32(x3, 0);
  y = fold128(y, kk, _mm512_extracti32x4_epi32(x3, 1));
  y = fold128(y, kk, _mm512_extracti32x4_epi32(x3, 2));
  y = fold128(y, kk, _mm512_extracti32x4_epi32(x3, 3));
  for (; n >= 16; n -= 16, p += 16)
    y = fold128(y, kk, _mm_loadu_si128((const __m128i *)(const void *)p));
  /* Legacy-SSE code after this (memcpy, the reductions) must not run with
   * dirty upper register halves: that costs more than the folding saves
   * (GCC emits no vzeroupper before the tail call). */
  _mm256_zeroupper();
  return finish(y, p, n);
}

static uint32_t raw_fast(uint32_t r, const uint8_t *p, size_t n) {
  if (have_vclmul && n >= VCLMUL_MIN) return raw_vclmul(r, p, n);
  return have_hw ? raw_hw(r, p, n) : raw_sw(r, p, n);
}
#else
static uint32_t raw_hw(uint32_t r, const uint8_t *p, size_t n) {
  return raw_sw(r, p, n);
}
static uint32_t raw_fast(uint32_t r, const uint8_t *p, size_t n) {
  return raw_sw(r, p, n);
}
#endif

uint32_t sl__crc32c(uint32_t crc, const void *p, size_t n) {
  pthread_once(&once, init);
  return ~raw_fast(~crc, p, n);
}

uint32_t sl__crc32c_sw(uint32_t crc, const void *p, size_t n) {
  pthread_once(&once, init);
  return ~raw_sw(~crc, p, n);
}

bool sl__crc32c_hw(void) {
  pthread_once(&once, init);
  return have_hw;
}
