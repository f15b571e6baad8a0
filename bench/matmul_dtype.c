/* bench_matmul_dtype: mixed precision's matmul on the CPU (docs/api.md,
 * "Mixed precision"), one thread, GFLOP/s side by side in one run, for
 * gemm_shapes.h's products (bench_sgemm's); f32 products and output
 * throughout:
 *   f32            the matmul op with f32 inputs (OpenBLAS sgemm);
 *   bf16 widened   both operands widened to f32, then the same sgemm (what
 *                  matmul does on CPUs without AVX512_BF16);
 *   bf16 sluice    sluice's AVX512_BF16 gemm (kernels/cpu/bgemm_c.c);
 *   bf16 OpenBLAS  OpenBLAS's cblas_sbgemm: Debian's OpenBLAS has none, so
 *                  the bench builds Debian's source with BUILD_BFLOAT16
 *                  (bench/peers/install.sh openblas-bf16, once, into the
 *                  build folder) and every column runs on that library;
 *                  --no-openblas keeps the system's and leaves it out;
 *   f16            the matmul op with f16 inputs (widened).
 * A cell's time is the best of at least 5 runs and 0.3 s.
 * Usage: bench_matmul_dtype [--no-openblas] (--help) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/graph.h>

#include "cpu/blas.h"
#include "cpu/kernel_util.h"
#include "gemm_shapes.h"
#include "op.h"

typedef enum way {
  F32_OP,
  BF16_WIDENED,
  BF16_SLUICE,
  BF16_OPENBLAS,
  F16_OP
} way;

/* Fills n elements of dtype dt with values in [-1, 1). */
static void fill(void *p, sl_dtype dt, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    float v = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    if (dt == SL_DTYPE_F32)
      ((float *)p)[i] = v;
    else if (dt == SL_DTYPE_BF16)
      ((uint16_t *)p)[i] = sl_f32_to_bf16(v);
    else
      ((uint16_t *)p)[i] = sl_f32_to_f16(v);
  }
}

static void *alloc_or_die(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
  if (!p) {
    fprintf(stderr, "bench_matmul_dtype: out of memory\n");
    exit(1);
  }
  return p;
}

static void check(sl_status st) {
  if (st != SL_OK) {
    fprintf(stderr, "bench_matmul_dtype: %s\n", sl_last_error());
    exit(1);
  }
}

/* One product of shape s the given way. */
typedef struct run_ctx {
  const shape *s;
  way w;
  sl__kernel_ctx *k; /* the op's, for F32_OP and F16_OP */
  const void *a, *b;
  float *c, *wa, *wb; /* wa, wb: widened operands */
} run_ctx;

static void once(const run_ctx *r) {
  const shape *s = r->s;
  int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
  switch (r->w) {
  case F32_OP:
  case F16_OP: check(sl__op_run_cpu(sl__op_find("matmul"), r->k)); break;
  case BF16_WIDENED:
    sl__half_convert(NULL, SL_DTYPE_BF16, SL_DTYPE_F32, r->wa, r->a,
                     s->m * s->k);
    sl__half_convert(NULL, SL_DTYPE_BF16, SL_DTYPE_F32, r->wb, r->b,
                     s->k * s->n);
    check(sl__blas_sgemm(s->ta, s->tb, s->m, s->n, s->k, 1, r->wa, lda, r->wb,
                         ldb, 0, r->c, s->n));
    break;
  case BF16_SLUICE:
    check(sl__bgemm_c(s->ta, s->tb, s->m, s->n, s->k, 1, r->a, lda, r->b, ldb,
                      0, r->c, s->n));
    break;
  case BF16_OPENBLAS:
    check(sl__blas_bgemm(s->ta, s->tb, s->m, s->n, s->k, 1, r->a, lda, r->b,
                         ldb, 0, r->c, s->n));
    break;
  }
}

/* GFLOP/s of shape s computed way w. */
static double run(const shape *s, way w) {
  sl_dtype dt = w == F32_OP   ? SL_DTYPE_F32
                : w == F16_OP ? SL_DTYPE_F16
                              : SL_DTYPE_BF16;
  size_t es = sl_dtype_size(dt);
  run_ctx r = {.s = s, .w = w};
  void *a = alloc_or_die((size_t)(s->m * s->k) * es);
  void *b = alloc_or_die((size_t)(s->k * s->n) * es);
  r.a = a;
  r.b = b;
  r.c = alloc_or_die((size_t)(s->m * s->n) * sizeof(float));
  r.wa = alloc_or_die((size_t)(s->m * s->k) * sizeof(float));
  r.wb = alloc_or_die((size_t)(s->k * s->n) * sizeof(float));
  fill(a, dt, s->m * s->k, 1);
  fill(b, dt, s->k * s->n, 2);
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "trans_a", s->ta);
  sl__attrs_set_int(&at, "trans_b", s->tb);
  k.attrs = &at;
  k.n_in = 2;
  k.n_out = 1;
  k.in_meta[0].dtype = k.in_meta[1].dtype = dt;
  k.in_meta[0].shape = s->ta ? SL_SHAPE(s->k, s->m) : SL_SHAPE(s->m, s->k);
  k.in_meta[1].shape = s->tb ? SL_SHAPE(s->n, s->k) : SL_SHAPE(s->k, s->n);
  k.out_meta[0].dtype = SL_DTYPE_F32;
  k.out_meta[0].shape = SL_SHAPE(s->m, s->n);
  k.in[0] = a;
  k.in[1] = b;
  k.out[0] = r.c;
  r.k = &k;
  double best = 1e30, total = 0;
  for (int i = 0; i < 5 || total < 0.3; i++) {
    uint64_t t0 = sl__now_ns();
    once(&r);
    double t = (double)(sl__now_ns() - t0) / 1e9;
    total += t;
    if (t < best) best = t;
  }
  free(a), free(b), free(r.c), free(r.wa), free(r.wb);
  return 2.0 * (double)s->m * (double)s->n * (double)s->k / best / 1e9;
}

static void cell(double v, bool have) {
  if (have)
    printf(" %.1f |", v);
  else
    printf(" - |");
}

/* Builds (once) and selects OpenBLAS with cblas_sbgemm for this process:
 * every BLAS call below goes to it, and sl__blas_bgemm to its sbgemm. */
static void use_openblas_bf16(void) {
  char cmd[1024], line[1024], lib[1024] = "";
  snprintf(cmd, sizeof cmd, "sh %s/install.sh openblas-bf16 %s", BENCH_PEERS,
           BENCH_OPENBLAS_BF16);
  FILE *p = popen(cmd, "r");
  while (p && fgets(line, sizeof line, p)) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "openblas-bf16 ", 14) == 0)
      snprintf(lib, sizeof lib, "%s", line + 14);
  }
  if (!p || pclose(p) != 0 || !lib[0]) {
    fprintf(stderr,
            "bench_matmul_dtype: building OpenBLAS with bf16 failed (%s); "
            "--no-openblas leaves it out\n",
            cmd);
    exit(1);
  }
  setenv("SLUICE_BLAS_LIBRARY", lib, 1);
  setenv("SLUICE_BGEMM", "openblas", 1);
}

int main(int argc, char **argv) {
  bool want_openblas = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-openblas") == 0) {
      want_openblas = false;
      continue;
    }
    FILE *f = strcmp(argv[i], "--help") == 0 ? stdout : stderr;
    fprintf(f,
            "usage: bench_matmul_dtype [--no-openblas]\nThe CPU matmul on "
            "one thread, GFLOP/s in one table (bench/README.md): f32,\nbf16 "
            "widened for sgemm, sluice's bf16 gemm, OpenBLAS's cblas_sbgemm "
            "and f16.\nDebian's OpenBLAS has no sbgemm: the bench builds "
            "Debian's source with\nBUILD_BFLOAT16 into the build folder once "
            "(a few minutes) and runs every\ncolumn on it.\n"
            "  --no-openblas  keep the system's OpenBLAS; no OpenBLAS bf16 "
            "column\n");
    return f == stdout ? 0 : 2;
  }
  /* The peer is built for Cooperlake's kernels: only a CPU with
   * AVX512_BF16 runs it (and has a bf16 gemm to compare). */
  want_openblas = want_openblas && sl__bgemm_c_usable();
  if (want_openblas) use_openblas_bf16();
  (void)sl__blas_load();
  const char *chosen = sl__blas_bgemm_name();
  bool sluice = sl__bgemm_c_usable();
  bool openblas = chosen && strcmp(chosen, "openblas sbgemm") == 0;
  printf("matmul, one thread, GFLOP/s (f32 products and output)\n");
  printf("| shape | f32 | bf16 widened | bf16 sluice | bf16 OpenBLAS | "
         "sluice / OpenBLAS | best bf16 / f32 | f16 |\n"
         "|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < NSHAPES; i++) {
    const shape *s = &shapes[i];
    double f32 = run(s, F32_OP), wid = run(s, BF16_WIDENED);
    double own = sluice ? run(s, BF16_SLUICE) : 0;
    double ob = openblas ? run(s, BF16_OPENBLAS) : 0;
    double f16 = run(s, F16_OP);
    double best = SL_MAX(wid, SL_MAX(own, ob));
    printf("| %s | %.1f | %.1f |", s->label, f32, wid);
    cell(own, sluice);
    cell(ob, openblas);
    if (sluice && openblas)
      printf(" %.3f |", own / ob);
    else
      printf(" - |");
    printf(" %.3f | %.1f |\n", best / f32, f16);
  }
  printf("\nBLAS: %s\n", sl__blas_describe());
  if (!sluice)
    printf("No AVX512_BF16 on this CPU: matmul widens bf16 for sgemm.\n");
  else
    printf(
        "matmul's bf16 gemm by default: sluice's (SLUICE_BGEMM=openblas picks "
        "OpenBLAS's where the library has one).\n");
  if (want_openblas && !openblas)
    printf("OpenBLAS bf16 column empty: the library built has no vdpbf16ps "
           "sbgemm.\n");
  return 0;
}
