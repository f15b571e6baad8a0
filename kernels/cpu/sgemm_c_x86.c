/* AVX2 and AVX-512 micro-kernels for the C sgemm (x86-64 only; CMake picks
 * sgemm_c_noisa.c elsewhere). Compiled with target attributes rather than
 * -m flags so the library still runs on any x86-64; sgemm_c.c calls one
 * only when cpuid says the CPU and OS support it. */
#include "cpu/blas.h"
#include "cpu/sgemm_micro.h"

/* 6 x 16: 12 YMM accumulators + 2 for B + 1 broadcast = 15 of 16. */
SL__SGEMM_MICRO(micro_avx2, __attribute__((target("avx2,fma"))), 6, 2, 8)
/* 12 x 32: 24 ZMM accumulators + 2 for B + 1 broadcast = 27 of 32. */
SL__SGEMM_MICRO(micro_avx512, __attribute__((target("avx512f,avx2,fma"))), 12,
                2, 16)

static bool usable_avx2(const sl__cpu_features *f) { return f->avx2 && f->fma; }
static bool usable_avx512(const sl__cpu_features *f) { return f->avx512; }

static const sl__sgemm_kernel kernels[] = {
    {"avx2", 6, 16, micro_avx2, usable_avx2},
    {"avx512", 12, 32, micro_avx512, usable_avx512},
};

int sl__sgemm_isa_kernels(const sl__sgemm_kernel **out) {
  *out = kernels;
  return (int)SL_ARRAY_LEN(kernels);
}
