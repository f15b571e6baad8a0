/* Reads cpuid and XCR0 on x86-64 (CMake compiles cpuid_none.c elsewhere). */
#include <cpuid.h>
#include <string.h>

#include "cpu/blas.h"

/* XGETBV by opcode so the file needs no -mxsave; only executed when cpuid
 * says OSXSAVE, as the instruction faults otherwise. */
static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

void sl__cpuid_read(sl__cpuid_regs *out) {
  memset(out, 0, sizeof *out);
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  out->max_leaf = a;
  out->vendor[0] = b;
  out->vendor[1] = d;
  out->vendor[2] = c;
  if (a >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
    out->l1_ecx = c;
    if (c & (1u << 27)) out->xcr0 = xgetbv0();
  }
  if (out->max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    out->l7_ebx = b;
    /* Leaf 7 EAX is the highest subleaf: subleaf 1 exists when it is >= 1. */
    unsigned max_sub = a;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
      out->l7s1_eax = a;
  }
}
