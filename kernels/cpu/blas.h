/* sluice kernels — the CPU matrix multiply: OpenBLAS loaded at run time with
 * the kernel set chosen from the CPU, and a blocked C sgemm when no OpenBLAS
 * can be loaded. Internal to libsluice (tests and benchmarks use it too). */
#ifndef SLUICE_KERNELS_CPU_BLAS_H
#define SLUICE_KERNELS_CPU_BLAS_H

#include <stdbool.h>
#include <stdint.h>

#include "core_int.h"
#include "core_team.h"

/* ---- CPU features ------------------------------------------------------ */

/* The raw cpuid/xgetbv words the decisions below read, so that the decoding
 * and the choice can be tested on synthetic CPUs. Leaves the CPU does not
 * report (above max_leaf) must be zero; xcr0 is zero when OSXSAVE is off. */
typedef struct sl__cpuid_regs {
  uint32_t max_leaf;  /* leaf 0 EAX */
  uint32_t vendor[3]; /* leaf 0 EBX, EDX, ECX: "GenuineIntel" in that order */
  uint32_t l1_ecx;    /* leaf 1 ECX */
  uint32_t l7_ebx;    /* leaf 7 subleaf 0 EBX */
  uint32_t l7s1_eax;  /* leaf 7 subleaf 1 EAX */
  uint64_t xcr0;      /* XGETBV(0): the register state the OS saves */
} sl__cpuid_regs;

typedef enum sl__cpu_vendor {
  SL__CPU_VENDOR_OTHER = 0,
  SL__CPU_VENDOR_INTEL = 1,
  SL__CPU_VENDOR_AMD = 2,
} sl__cpu_vendor;

/* What the CPU can run: an instruction set counts only when the CPU has it
 * AND the OS saves its registers across context switches (XCR0). */
typedef struct sl__cpu_features {
  sl__cpu_vendor vendor;
  bool avx;    /* AVX with YMM state enabled */
  bool fma;    /* FMA3, usable (needs AVX state) */
  bool avx2;   /* AVX2, usable */
  bool avx512; /* AVX-512 F, BW, DQ and VL with opmask/ZMM state enabled */
  bool avx512_bf16; /* and AVX512_BF16 (vdpbf16ps: bf16 pair dot products) */
} sl__cpu_features;

/* Pure: decodes raw cpuid words into usable features. */
void sl__cpu_features_decode(const sl__cpuid_regs *regs, sl__cpu_features *out);

/* Reads this CPU (all zero on non-x86 machines). */
void sl__cpuid_read(sl__cpuid_regs *out);

/* This CPU's features, read once and cached. Thread-safe. */
const sl__cpu_features *sl__cpu_features_get(void);

/* Pure: the OpenBLAS kernel set (an OPENBLAS_CORETYPE name) for a CPU with
 * these features, or NULL to let OpenBLAS detect the CPU itself. */
const char *sl__blas_coretype_choose(const sl__cpu_features *f);

/* Pure: how wide the sgemm kernels of an OpenBLAS kernel set are, to tell
 * when the kernels running are narrower than the CPU allows: 3 for AVX-512
 * sets (SkylakeX, Cooperlake, SapphireRapids), 2 for AVX2+FMA sets
 * (Haswell, Zen, Excavator), 1 for any other name, 0 for NULL. Case is
 * ignored (OpenBLAS reports "SkylakeX", takes "SKYLAKEX"). */
int sl__blas_coretype_rank(const char *name);

/* ---- sgemm ------------------------------------------------------------- */

/* C = alpha * op(A) * op(B) + beta * C, row-major, single precision.
 * op(A) is m x k (A is k x m when trans_a), op(B) is k x n (B is n x k when
 * trans_b), C is m x n; lda, ldb, ldc are row strides in elements, at least
 * the stored width and at least 1. Sizes may be zero: with k == 0 or
 * alpha == 0 only C = beta * C is done. As in BLAS, C is not read when
 * beta == 0 (NaN there is overwritten). Loads the BLAS on first use; when
 * none can be loaded it runs the C sgemm below (see sl__blas_name).
 * SL_EINVAL for negative sizes, short strides or NULL matrices;
 * SL_ENOMEM if the C sgemm cannot allocate its packing buffers. */
sl_status sl__blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c,
                         int64_t ldc);

/* The fewest multiply-adds worth a thread of a product: below that, waking
 * a team member costs more than it saves. */
#define SL__BLAS_TEAM_MIN_FMAS (1 << 20)

/* The same product cut over a CPU device's threads (core_team.h): the
 * longer of m and n is cut into one block of rows or columns per member,
 * each an sl__blas_sgemm of its own, so every element is computed as one
 * thread would (the same bits on any team). Products too small to be worth
 * the threads run on the caller alone; a NULL team is one thread. */
sl_status sl__blas_sgemm_team(sl__team *team, bool trans_a, bool trans_b,
                              int64_t m, int64_t n, int64_t k, float alpha,
                              const float *a, int64_t lda, const float *b,
                              int64_t ldb, float beta, float *c, int64_t ldc);

/* Loads the BLAS if not yet done (thread-safe, once per process). SL_OK when
 * OpenBLAS is in use; SL_ENOTFOUND when sluice runs its C sgemm instead, with
 * the reason (dlerror's messages) as the thread's last error. */
sl_status sl__blas_load(void);

/* "openblas" or "c" (the C sgemm). Loads the BLAS if not yet done. */
const char *sl__blas_name(void);

/* One line for `sluice info`: library, version, kernel set and who chose it,
 * or why the C sgemm runs ("C sgemm (avx512 kernel): no OpenBLAS: ..."). */
const char *sl__blas_describe(void);

/* The kernel set OpenBLAS runs ("SkylakeX", "Haswell"), NULL for the C sgemm.
 */
const char *sl__blas_coretype(void);

/* Threads each BLAS call may use, process-wide (OpenBLAS has no per-call
 * setting). sluice runs one thread per CPU device, so an OpenBLAS sluice
 * loads starts at 1; one the program had loaded keeps the program's count.
 * Call it before device threads run matmuls: OpenBLAS does not allow a
 * change while calls are in flight. The C sgemm is single-threaded and
 * ignores it. SL_EINVAL unless 1 <= n <= 1024. */
sl_status sl__blas_set_threads(int n);
int sl__blas_get_threads(void);

/* How a chunked OpenBLAS call splits m, n and k: cblas takes int, sluice
 * int64_t. Exposed with the limit as a parameter so tests can check the
 * splitting with small matrices; sl__blas_sgemm uses INT_MAX. */
sl_status sl__blas_sgemm_chunked(bool trans_a, bool trans_b, int64_t m,
                                 int64_t n, int64_t k, float alpha,
                                 const float *a, int64_t lda, const float *b,
                                 int64_t ldb, float beta, float *c, int64_t ldc,
                                 int64_t limit);

/* ---- the C sgemm (fallback) -------------------------------------------- */

/* A register-tile micro-kernel: out[r * ldo + j] += sum_p ap[p * mr + r] *
 * bp[p * nr + j] for r < mr, j < nr, over kc packed columns. */
typedef void (*sl__sgemm_micro_fn)(int64_t kc, const float *ap, const float *bp,
                                   float *out, int64_t ldo);

typedef struct sl__sgemm_kernel {
  const char *name; /* "generic", "avx2", "avx512" */
  int mr, nr;       /* register tile */
  sl__sgemm_micro_fn fn;
  bool (*usable)(const sl__cpu_features *f);
} sl__sgemm_kernel;

/* The micro-kernels built into this library, most capable last; the first
 * one ("generic") runs everywhere. */
int sl__sgemm_c_kernel_count(void);
const sl__sgemm_kernel *sl__sgemm_c_kernel(int i);

/* The best kernel this CPU can run. */
const sl__sgemm_kernel *sl__sgemm_c_kernel_best(void);

/* Kernels from instruction-set files (x86: avx2, avx512); CMake picks the
 * file for the target. Returns how many, *out points at them. */
int sl__sgemm_isa_kernels(const sl__sgemm_kernel **out);

/* The C sgemm with the best kernel; same contract as sl__blas_sgemm. */
sl_status sl__sgemm_c(bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c,
                      int64_t ldc);

/* The C sgemm with a given kernel (tests run every kernel the CPU can). */
sl_status sl__sgemm_c_with(const sl__sgemm_kernel *kern, bool trans_a,
                           bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float beta, float *c,
                           int64_t ldc);

/* Checks gemm arguments (sgemm's and bgemm's: only NULL-ness of the
 * matrices is read); SL_EINVAL with a message naming the bad one. */
sl_status sl__sgemm_check(bool trans_a, bool trans_b, int64_t m, int64_t n,
                          int64_t k, const void *a, int64_t lda, const void *b,
                          int64_t ldb, const void *c, int64_t ldc);

/* C = beta * C over m x n (C not read when beta == 0). */
void sl__sgemm_scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc);

/* ---- bf16 gemm -------------------------------------------------------- */

/* C = alpha * op(A) * op(B) + beta * C with A and B bf16 (their bits, as
 * uint16_t), C f32, products summed in f32: sl__blas_sgemm's contract
 * otherwise. Used by matmul for bf16 inputs only where this CPU has
 * AVX512_BF16 (sl__blas_bgemm_name says which gemm runs); elsewhere bf16
 * is widened to f32 for sgemm, which is faster than any bf16 gemm without
 * the instruction. vdpbf16ps treats bf16 subnormal inputs and f32
 * subnormal results as zero, so results may differ from the widened
 * product in the last bits and below FLT_MIN. SL_EUNSUPPORTED without a
 * bf16 gemm. */
sl_status sl__blas_bgemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const uint16_t *a, int64_t lda,
                         const uint16_t *b, int64_t ldb, float beta, float *c,
                         int64_t ldc);

/* The same cut over a team, as sl__blas_sgemm_team. */
sl_status sl__blas_bgemm_team(sl__team *team, bool trans_a, bool trans_b,
                              int64_t m, int64_t n, int64_t k, float alpha,
                              const uint16_t *a, int64_t lda, const uint16_t *b,
                              int64_t ldb, float beta, float *c, int64_t ldc);

/* Which bf16 gemm sl__blas_bgemm runs: "sluice avx512bf16" (sl__bgemm_c),
 * "openblas sbgemm" (SLUICE_BGEMM=openblas, and the loaded OpenBLAS
 * exports cblas_sbgemm with a vdpbf16ps kernel set), or NULL where this
 * CPU has no AVX512_BF16 or SLUICE_BGEMM=off. */
const char *sl__blas_bgemm_name(void);

/* sluice's own bf16 gemm (bgemm_c.c); SL_EUNSUPPORTED unless
 * sl__bgemm_c_usable(). */
bool sl__bgemm_c_usable(void);
sl_status sl__bgemm_c(bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const uint16_t *a, int64_t lda,
                      const uint16_t *b, int64_t ldb, float beta, float *c,
                      int64_t ldc);

#endif
