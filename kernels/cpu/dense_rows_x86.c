/* AVX2 and AVX-512 instances of the dense family's vector loops (x86-64
 * only; CMake picks dense_rows_noisa.c elsewhere). Target attributes rather
 * than -m flags keep the library running on any x86-64: a table is used
 * only when cpuid says the CPU and OS support it. Neither target enables
 * FMA, so both give the bits of the 16-byte instance. */
#include "cpu/dense_util.h"

static bool usable_avx2(const sl__cpu_features *f) { return f->avx2; }
static bool usable_avx512(const sl__cpu_features *f) { return f->avx512; }

#define DR_W 8
#define DR_ATTR __attribute__((target("avx2")))
#define DR_FN(name) name##_avx2
#define DR_NAME "avx2"
#define DR_USABLE usable_avx2
#include "cpu/dense_rows_impl.h"
#undef DR_W
#undef DR_ATTR
#undef DR_FN
#undef DR_NAME
#undef DR_USABLE

#define DR_W 16
#define DR_ATTR __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#define DR_FN(name) name##_avx512
#define DR_NAME "avx512"
#define DR_USABLE usable_avx512
#include "cpu/dense_rows_impl.h"

static const sl__dense_rows *const tables[] = {&table_avx2, &table_avx512};

int sl__dense_rows_isa(const sl__dense_rows *const **out) {
  *out = tables;
  return (int)SL_ARRAY_LEN(tables);
}
