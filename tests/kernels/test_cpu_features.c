/* cpuid decoding and the OpenBLAS kernel-set choice on synthetic CPUs, and
 * the real CPU's decoding against what Linux reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "cpu/blas.h"

/* Leaf 1 ECX and leaf 7 EBX bits (Intel SDM vol. 2A, CPUID). */
#define FMA (1u << 12)
#define OSXSAVE (1u << 27)
#define AVX (1u << 28)
#define AVX2 (1u << 5)
#define AVX512F (1u << 16)
#define AVX512DQ (1u << 17)
#define AVX512CD (1u << 28)
#define AVX512ER (1u << 27)
#define AVX512PF (1u << 26)
#define AVX512BW (1u << 30)
#define AVX512VL (1u << 31)
#define AVX512_ALL (AVX512F | AVX512DQ | AVX512CD | AVX512BW | AVX512VL)
#define XCR0_AVX 0x7ull     /* x87, SSE, AVX */
#define XCR0_AVX512 0xe7ull /* + opmask, ZMM_Hi256, Hi16_ZMM */

#define AVX512_BF16 (1u << 5) /* leaf 7 subleaf 1 EAX */

static sl__cpuid_regs cpu(const char *vendor, uint32_t max_leaf,
                          uint32_t l1_ecx, uint32_t l7_ebx, uint64_t xcr0) {
  sl__cpuid_regs r;
  memset(&r, 0, sizeof r);
  r.max_leaf = max_leaf;
  memcpy(&r.vendor[0], vendor, 4); /* EBX, EDX, ECX order */
  memcpy(&r.vendor[1], vendor + 4, 4);
  memcpy(&r.vendor[2], vendor + 8, 4);
  r.l1_ecx = l1_ecx;
  r.l7_ebx = l7_ebx;
  r.xcr0 = xcr0;
  return r;
}

static const char *choose(sl__cpuid_regs r, sl__cpu_features *f) {
  sl__cpu_features_decode(&r, f);
  return sl__blas_coretype_choose(f);
}

static void assert_choice(const char *got, const char *want) {
  if (want == NULL)
    assert_null(got);
  else
    assert_string_equal(got, want);
}

static void test_avx512_machines(void **state) {
  sl__cpu_features f;
  /* AMD family 1Ah (Zen 5, this project's machine): OpenBLAS 0.3.21 does
   * not know it and would run Haswell kernels. */
  assert_choice(choose(cpu("AuthenticAMD", 0x10, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, XCR0_AVX512), &f), "SKYLAKEX");
  assert_true(f.avx512 && f.avx2 && f.fma && f.avx);
  assert_int_equal(f.vendor, SL__CPU_VENDOR_AMD);
  /* Intel Skylake-SP and later. */
  assert_choice(choose(cpu("GenuineIntel", 0x16, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, XCR0_AVX512), &f), "SKYLAKEX");
  assert_int_equal(f.vendor, SL__CPU_VENDOR_INTEL);
  /* A vendor sluice does not name, with AVX-512: the features decide. */
  assert_choice(choose(cpu("HygonGenuine", 0x10, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, XCR0_AVX512), &f), "SKYLAKEX");
  assert_false(f.avx512_bf16);
}

/* AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and 5): COOPERLAKE,
 * whose sbgemm runs vdpbf16ps; it needs the rest of AVX-512 usable. */
static void test_avx512_bf16(void **state) {
  sl__cpu_features f;
  sl__cpuid_regs r = cpu("AuthenticAMD", 0x10, OSXSAVE | AVX | FMA,
                         AVX2 | AVX512_ALL, XCR0_AVX512);
  r.l7s1_eax = AVX512_BF16;
  assert_choice(choose(r, &f), "COOPERLAKE");
  assert_true(f.avx512 && f.avx512_bf16);
  /* ZMM state off: neither. */
  r.xcr0 = XCR0_AVX;
  assert_choice(choose(r, &f), "ZEN");
  assert_false(f.avx512 || f.avx512_bf16);
}

static void test_avx512_not_usable(void **state) {
  sl__cpu_features f;
  /* The CPU has AVX-512 but the OS does not save ZMM/opmask state (XCR0
   * bits 5-7 clear; e.g. a kernel booted with AVX-512 off): running
   * SKYLAKEX kernels would fault, so AVX2 kernels. */
  assert_choice(choose(cpu("GenuineIntel", 0x16, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, XCR0_AVX), &f), "HASWELL");
  assert_false(f.avx512);
  assert_true(f.avx2);
  assert_choice(choose(cpu("AuthenticAMD", 0x10, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, XCR0_AVX), &f), "ZEN");
  /* Only part of the ZMM state enabled. */
  assert_choice(choose(cpu("GenuineIntel", 0x16, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, 0x67), &f), "HASWELL");
  /* Knights Landing: AVX-512 F/CD/ER/PF but no BW/DQ/VL, which the
   * SKYLAKEX sgemm kernels use. */
  assert_choice(choose(cpu("GenuineIntel", 0xd, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512F | AVX512CD | AVX512ER | AVX512PF,
                           XCR0_AVX512), &f), "HASWELL");
  assert_false(f.avx512);
  /* Each one of F, BW, DQ, VL missing. */
  uint32_t need[] = {AVX512F, AVX512BW, AVX512DQ, AVX512VL};
  for (size_t i = 0; i < 4; i++) {
    choose(cpu("GenuineIntel", 0x16, OSXSAVE | AVX | FMA,
               AVX2 | (AVX512_ALL & ~need[i]), XCR0_AVX512), &f);
    assert_false(f.avx512);
  }
}

static void test_avx2_and_older(void **state) {
  sl__cpu_features f;
  assert_choice(choose(cpu("GenuineIntel", 0xd, OSXSAVE | AVX | FMA, AVX2,
                           XCR0_AVX), &f), "HASWELL");
  assert_choice(choose(cpu("AuthenticAMD", 0xd, OSXSAVE | AVX | FMA, AVX2,
                           XCR0_AVX), &f), "ZEN");
  /* Another vendor with AVX2: OpenBLAS's own probe knows better. */
  assert_choice(choose(cpu("CentaurHauls", 0xd, OSXSAVE | AVX | FMA, AVX2,
                           XCR0_AVX), &f), NULL);
  assert_true(f.avx2);
  /* AVX2 without FMA (no such CPU, but the kernels need both). */
  assert_choice(choose(cpu("GenuineIntel", 0xd, OSXSAVE | AVX, AVX2, XCR0_AVX),
                       &f), NULL);
  /* Sandy Bridge: AVX only. */
  assert_choice(choose(cpu("GenuineIntel", 0xd, OSXSAVE | AVX, 0, XCR0_AVX), &f),
                NULL);
  assert_true(f.avx);
  assert_false(f.avx2);
}

static void test_os_and_leaf_limits(void **state) {
  sl__cpu_features f;
  /* OSXSAVE clear: XCR0 cannot be read (XGETBV faults), so whatever is in
   * the xcr0 word is ignored and nothing AVX is usable. */
  assert_choice(choose(cpu("GenuineIntel", 0x16, AVX | FMA, AVX2 | AVX512_ALL,
                           XCR0_AVX512), &f), NULL);
  assert_false(f.avx || f.fma || f.avx2 || f.avx512);
  /* OS saves SSE but not YMM state. */
  assert_choice(choose(cpu("GenuineIntel", 0x16, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, 0x3), &f), NULL);
  assert_false(f.avx);
  /* max_leaf < 7: the leaf-7 word is not defined and must be ignored. */
  assert_choice(choose(cpu("GenuineIntel", 6, OSXSAVE | AVX | FMA,
                           AVX2 | AVX512_ALL, XCR0_AVX512), &f), NULL);
  assert_true(f.avx && f.fma);
  assert_false(f.avx2 || f.avx512);
  /* No cpuid at all (non-x86 reads zeros). */
  sl__cpuid_regs zero;
  memset(&zero, 0, sizeof zero);
  assert_choice(choose(zero, &f), NULL);
  assert_int_equal(f.vendor, SL__CPU_VENDOR_OTHER);
  assert_false(f.avx);
}

static void test_coretype_rank(void **state) {
  assert_int_equal(sl__blas_coretype_rank("SkylakeX"), 3);
  assert_int_equal(sl__blas_coretype_rank("SKYLAKEX"), 3);
  assert_int_equal(sl__blas_coretype_rank("Cooperlake"), 3);
  assert_int_equal(sl__blas_coretype_rank("Haswell"), 2);
  assert_int_equal(sl__blas_coretype_rank("ZEN"), 2);
  assert_int_equal(sl__blas_coretype_rank("Sandybridge"), 1);
  assert_int_equal(sl__blas_coretype_rank("Prescott"), 1);
  assert_int_equal(sl__blas_coretype_rank(NULL), 0);
  /* Every choice sluice makes ranks as what it is. */
  sl__cpu_features f = {.vendor = SL__CPU_VENDOR_AMD,
                        .avx = true,
                        .fma = true,
                        .avx2 = true,
                        .avx512 = true};
  assert_int_equal(sl__blas_coretype_rank(sl__blas_coretype_choose(&f)), 3);
  f.avx512_bf16 = true;
  assert_int_equal(sl__blas_coretype_rank(sl__blas_coretype_choose(&f)), 3);
  f.avx512 = f.avx512_bf16 = false;
  assert_int_equal(sl__blas_coretype_rank(sl__blas_coretype_choose(&f)), 2);
  f.vendor = SL__CPU_VENDOR_INTEL;
  assert_int_equal(sl__blas_coretype_rank(sl__blas_coretype_choose(&f)), 2);
}

/* Whether a cpuinfo "flags" line lists flag as a whole word. */
static bool has_flag(const char *line, const char *flag) {
  size_t n = strlen(flag);
  for (const char *p = strstr(line, flag); p; p = strstr(p + 1, flag))
    if (p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
      return true;
  return false;
}

/* This machine: the cached features are the decoding of a fresh read, and
 * agree with the flags Linux reports (it clears AVX-512 flags when their
 * state is not enabled, the same rule as XCR0 here). */
static void test_this_cpu(void **state) {
  sl__cpuid_regs r;
  sl__cpuid_read(&r);
  sl__cpu_features f;
  sl__cpu_features_decode(&r, &f);
  const sl__cpu_features *g = sl__cpu_features_get();
  assert_memory_equal(&f, g, sizeof f);
  print_message("this CPU: avx=%d fma=%d avx2=%d avx512=%d avx512_bf16=%d -> "
                "%s\n",
                f.avx, f.fma, f.avx2, f.avx512, f.avx512_bf16,
                sl__blas_coretype_choose(&f) ? sl__blas_coretype_choose(&f)
                                             : "(OpenBLAS decides)");
  FILE *fp = fopen("/proc/cpuinfo", "r");
  if (!fp) {
    print_message("no /proc/cpuinfo to compare with\n");
    skip();
  }
  static char line[16384];
  bool found = false;
  while (fgets(line, sizeof line, fp))
    if (strncmp(line, "flags", 5) == 0) {
      found = true;
      break;
    }
  fclose(fp);
  if (!found) {
    print_message("/proc/cpuinfo has no x86 flags line\n");
    skip();
  }
  assert_int_equal(f.avx2, has_flag(line, "avx2"));
  assert_int_equal(f.fma, has_flag(line, "fma"));
  assert_int_equal(f.avx512, has_flag(line, "avx512f") &&
                                 has_flag(line, "avx512bw") &&
                                 has_flag(line, "avx512dq") &&
                                 has_flag(line, "avx512vl"));
  assert_int_equal(f.avx512_bf16, f.avx512 && has_flag(line, "avx512_bf16"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_avx512_machines),
      cmocka_unit_test(test_avx512_bf16),
      cmocka_unit_test(test_avx512_not_usable),
      cmocka_unit_test(test_avx2_and_older),
      cmocka_unit_test(test_os_and_leaf_limits),
      cmocka_unit_test(test_coretype_rank),
      cmocka_unit_test(test_this_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
