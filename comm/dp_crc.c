/* CRC32C (Castagnoli) for the data plane's frame checks: a checksum against
 * corruption, not a defence against an attacker (the handshake's HMAC is).
 *
 * Two implementations of the same function:
 *   - tables, eight bytes per step ("slicing by 8": eight 256-entry tables,
 *     table k giving the register's contribution of a byte k positions
 *     back), for any CPU;
 *   - the SSE4.2 crc32 instruction, run as three independent chains over
 *     three adjacent blocks so its 3-cycle latency is hidden, the chains
 *     then joined by the linearity of the CRC register (below).
 *
 * The register r represents the polynomial sum of bit_i(r) x^(31-i)
 * ("reflected"), and feeding n bytes D to register r gives
 *   raw(r, D) = r * x^(8n) + raw(0, D)        (mod P),
 * so three chains started at r, 0 and 0 over blocks A, B, C of B bytes
 * each combine as ((c_A * x^(8B) + c_B) * x^(8B)) + c_C. Multiplying a
 * register by the constant x^(8B) is linear in its bits, so it is four
 * table lookups, one per byte (shift_table). The public CRC is
 * ~raw(~crc, D), the usual pre- and post-inversion. */
#include <pthread.h>
#include <string.h>

#include "dp.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#define POLY 0x82f63b78u /* x^32 mod P, reflected */
#define BLOCK 1024u      /* bytes per chain per round of the 3-way loop */

static uint32_t tables[8][256];
static uint32_t shift_table[4][256]; /* r -> r * x^(8*BLOCK) mod P */
static bool have_hw;
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
#endif
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
#else
static uint32_t raw_hw(uint32_t r, const uint8_t *p, size_t n) {
  return raw_sw(r, p, n);
}
#endif

uint32_t sl__crc32c(uint32_t crc, const void *p, size_t n) {
  pthread_once(&once, init);
  return have_hw ? ~raw_hw(~crc, p, n) : ~raw_sw(~crc, p, n);
}

uint32_t sl__crc32c_sw(uint32_t crc, const void *p, size_t n) {
  pthread_once(&once, init);
  return ~raw_sw(~crc, p, n);
}

bool sl__crc32c_hw(void) {
  pthread_once(&once, init);
  return have_hw;
}
