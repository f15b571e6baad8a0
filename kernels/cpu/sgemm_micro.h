/* The C sgemm's register-tile micro-kernel, written once with GCC/Clang
 * vector extensions and instantiated per instruction set (sgemm_c.c for the
 * generic one, sgemm_c_x86.c for AVX2 and AVX-512), so one source gives
 * every width without intrinsics. Private to the C sgemm files. */
#ifndef SLUICE_KERNELS_CPU_SGEMM_MICRO_H
#define SLUICE_KERNELS_CPU_SGEMM_MICRO_H

#include <stdint.h>
#include <string.h>

/* An MR x (NV * VW) tile of C kept in MR * NV vector registers: per packed
 * column p, NV vectors of B are loaded once and each of the MR values of A
 * is broadcast against them (an outer-product update; Goto & van de Geijn,
 * "Anatomy of high-performance matrix multiplication", TOMS 2008). The
 * packed panels are contiguous, so every load is unit-stride. memcpy is
 * how C says "unaligned vector load"; it compiles to one instruction. */
#define SL__SGEMM_MICRO(NAME, ATTR, MR, NV, VW)                               \
  ATTR static void NAME(int64_t kc, const float *restrict ap,                 \
                        const float *restrict bp, float *restrict out,        \
                        int64_t ldo) {                                        \
    typedef float vec __attribute__((vector_size((VW) * sizeof(float))));    \
    vec acc[MR][NV];                                                          \
    for (int r = 0; r < (MR); r++)                                            \
      for (int v = 0; v < (NV); v++) acc[r][v] = (vec){0};                    \
    for (int64_t p = 0; p < kc; p++) {                                        \
      vec bv[NV];                                                             \
      for (int v = 0; v < (NV); v++)                                          \
        memcpy(&bv[v], bp + p * ((NV) * (VW)) + v * (VW), sizeof(vec));       \
      for (int r = 0; r < (MR); r++) {                                        \
        vec av = (vec){0} + ap[p * (MR) + r];                                 \
        for (int v = 0; v < (NV); v++) acc[r][v] += av * bv[v];               \
      }                                                                       \
    }                                                                         \
    for (int r = 0; r < (MR); r++)                                            \
      for (int v = 0; v < (NV); v++) {                                        \
        vec o;                                                                \
        memcpy(&o, out + r * ldo + v * (VW), sizeof o);                       \
        o += acc[r][v];                                                       \
        memcpy(out + r * ldo + v * (VW), &o, sizeof o);                       \
      }                                                                       \
  }

#endif
