/* CPU features and the OpenBLAS kernel-set choice: pure functions of the
 * cpuid words, so the tests can feed them synthetic CPUs. */
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "cpu/blas.h"

/* Bit positions from the Intel SDM vol. 2A, CPUID (leaves 1 and 7) and
 * vol. 1 section 13.3 (XCR0 state components); AMD uses the same bits. */
enum {
  L1_ECX_FMA = 1u << 12,
  L1_ECX_OSXSAVE = 1u << 27,
  L1_ECX_AVX = 1u << 28,
  L7_EBX_AVX2 = 1u << 5,
  L7_EBX_AVX512F = 1u << 16,
  L7_EBX_AVX512DQ = 1u << 17,
  L7_EBX_AVX512BW = 1u << 30,
  L7_EBX_AVX512VL = 1u << 31,
  L7S1_EAX_AVX512_BF16 = 1u << 5,
};
#define XCR0_SSE_AVX 0x6ull /* XMM and upper-YMM state */
#define XCR0_AVX512 0xe0ull /* opmask, ZMM_Hi256, Hi16_ZMM state */

static bool vendor_is(const sl__cpuid_regs *r, const char *name) {
  char v[12];
  memcpy(v, &r->vendor[0], 4);
  memcpy(v + 4, &r->vendor[1], 4);
  memcpy(v + 8, &r->vendor[2], 4);
  return memcmp(v, name, 12) == 0;
}

void sl__cpu_features_decode(const sl__cpuid_regs *r, sl__cpu_features *out) {
  memset(out, 0, sizeof *out);
  if (vendor_is(r, "GenuineIntel"))
    out->vendor = SL__CPU_VENDOR_INTEL;
  else if (vendor_is(r, "AuthenticAMD"))
    out->vendor = SL__CPU_VENDOR_AMD;
  if (r->max_leaf < 1) return;
  /* XCR0 means nothing unless the OS turned XSAVE on: a CPU with AVX under
   * an OS that does not save YMM registers must not run AVX code. */
  uint64_t xcr0 = (r->l1_ecx & L1_ECX_OSXSAVE) ? r->xcr0 : 0;
  bool os_avx = (xcr0 & XCR0_SSE_AVX) == XCR0_SSE_AVX;
  bool os_avx512 = os_avx && (xcr0 & XCR0_AVX512) == XCR0_AVX512;
  out->avx = os_avx && (r->l1_ecx & L1_ECX_AVX);
  out->fma = out->avx && (r->l1_ecx & L1_ECX_FMA);
  if (r->max_leaf < 7) return; /* leaf 7 words are undefined then */
  uint32_t b = r->l7_ebx;
  out->avx2 = out->avx && (b & L7_EBX_AVX2);
  uint32_t need =
      L7_EBX_AVX512F | L7_EBX_AVX512DQ | L7_EBX_AVX512BW | L7_EBX_AVX512VL;
  out->avx512 = os_avx512 && out->avx2 && out->fma && (b & need) == need;
  out->avx512_bf16 = out->avx512 && (r->l7s1_eax & L7S1_EAX_AVX512_BF16);
}

/* OpenBLAS 0.3.21 (Debian 12) does not know newer CPUs, e.g. AMD family 1Ah
 * (Zen 5), and runs its Haswell kernels on them at half the sgemm rate of
 * its AVX-512 ones. The choice is therefore made from what the CPU can run,
 * not from its model number. SKYLAKEX's sgemm kernels need AVX-512 F, BW,
 * DQ and VL, which every AVX-512 CPU since Skylake-SP has. Below that,
 * HASWELL (Intel) and ZEN (AMD: the same kernels, AMD cache parameters)
 * keep an unknown AVX2 CPU off the SSE fallbacks. Anything else: OpenBLAS
 * knows better than a feature list. With AVX512_BF16, COOPERLAKE: the same
 * sgemm kernels as SKYLAKEX, and the only sets (with SAPPHIRERAPIDS, which
 * 0.3.21 lacks) whose sbgemm runs vdpbf16ps rather than generic C. */
const char *sl__blas_coretype_choose(const sl__cpu_features *f) {
  if (f->avx512_bf16) return "COOPERLAKE";
  if (f->avx512) return "SKYLAKEX";
  if (f->avx2 && f->fma) {
    if (f->vendor == SL__CPU_VENDOR_INTEL) return "HASWELL";
    if (f->vendor == SL__CPU_VENDOR_AMD) return "ZEN";
  }
  return NULL;
}

int sl__blas_coretype_rank(const char *name) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake",
                                       "SapphireRapids"};
  static const char *const avx2[] = {"Haswell", "Zen", "Excavator"};
  if (!name) return 0;
  for (size_t i = 0; i < SL_ARRAY_LEN(avx512); i++)
    if (strcasecmp(name, avx512[i]) == 0) return 3;
  for (size_t i = 0; i < SL_ARRAY_LEN(avx2); i++)
    if (strcasecmp(name, avx2[i]) == 0) return 2;
  return 1;
}

static sl__cpu_features g_features;
static pthread_once_t g_features_once = PTHREAD_ONCE_INIT;

static void features_init(void) {
  sl__cpuid_regs r;
  sl__cpuid_read(&r);
  sl__cpu_features_decode(&r, &g_features);
}

const sl__cpu_features *sl__cpu_features_get(void) {
  pthread_once(&g_features_once, features_init);
  return &g_features;
}
