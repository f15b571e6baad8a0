/* bench_matmul_dtype: mixed precision's matmul on the CPU (docs/api.md,
 * "Mixed precision"): the matmul op's kernel on one thread with f32, bf16
 * and f16 inputs (f32 products and output), GFLOP/s side by side in one
 * run, for square sizes and the three products of an MLP layer (batch
 * 256, 1024 -> 1024). 16-bit inputs are widened to f32 and multiplied by
 * the same sgemm: the linked OpenBLAS may have a bf16 gemm (sbgemm, when
 * built with BUILD_BFLOAT16), and the table says whether it does. A
 * shape's time is the best of at least 5 runs and 0.3 s.
 * Usage: bench_matmul_dtype (--help) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/graph.h>

#include "op.h"

typedef struct shape {
  const char *label;
  int64_t m, n, k;
  bool ta, tb;
} shape;

static const shape shapes[] = {
    {"512^3", 512, 512, 512, false, false},
    {"1024^3", 1024, 1024, 1024, false, false},
    {"mlp fwd 256x1024x1024 NT", 256, 1024, 1024, false, true},
    {"mlp dx  256x1024x1024 NN", 256, 1024, 1024, false, false},
    {"mlp dW 1024x1024x256 TN", 1024, 1024, 256, true, false},
};

static const sl_dtype dtypes[3] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};

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

/* GFLOP/s of the matmul kernel on shape s with inputs of dtype dt. */
static double run(const shape *s, sl_dtype dt) {
  const sl__op_def *op = sl__op_find("matmul");
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
  size_t es = sl_dtype_size(dt);
  void *a = aligned_alloc(64, ((size_t)(s->m * s->k) * es + 63) & ~63ul);
  void *b = aligned_alloc(64, ((size_t)(s->k * s->n) * es + 63) & ~63ul);
  float *c = aligned_alloc(64, ((size_t)(s->m * s->n) * 4 + 63) & ~63ul);
  if (!a || !b || !c) {
    fprintf(stderr, "bench_matmul_dtype: out of memory\n");
    exit(1);
  }
  fill(a, dt, s->m * s->k, 1);
  fill(b, dt, s->k * s->n, 2);
  k.in[0] = a;
  k.in[1] = b;
  k.out[0] = c;
  double best = 1e30, total = 0;
  for (int r = 0; r < 5 || total < 0.3; r++) {
    uint64_t t0 = sl__now_ns();
    if (sl__op_run_cpu(op, &k) != SL_OK) {
      fprintf(stderr, "bench_matmul_dtype: %s\n", sl_last_error());
      exit(1);
    }
    double t = (double)(sl__now_ns() - t0) / 1e9;
    total += t;
    if (t < best) best = t;
  }
  free(a);
  free(b);
  free(c);
  return 2.0 * (double)s->m * (double)s->n * (double)s->k / best / 1e9;
}

int main(int argc, char **argv) {
  if (argc > 1) {
    FILE *f = strcmp(argv[1], "--help") == 0 ? stdout : stderr;
    fprintf(f, "usage: bench_matmul_dtype\nThe CPU matmul kernel on one "
               "thread with f32, bf16 and f16 inputs (f32\nproducts and "
               "output): GFLOP/s in one table (bench/README.md).\n");
    return f == stdout ? 0 : 2;
  }
  printf("matmul kernel, one thread, GFLOP/s (inputs f32, bf16, f16; f32 "
         "products and output)\n");
  printf("| shape | f32 | bf16 | bf16 / f32 | f16 | f16 / f32 |\n"
         "|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    double g[3];
    for (int d = 0; d < 3; d++)
      g[d] = run(&shapes[i], dtypes[d]);
    printf("| %s | %.1f | %.1f | %.3f | %.1f | %.3f |\n", shapes[i].label, g[0],
           g[1], g[1] / g[0], g[2], g[2] / g[0]);
  }
  /* Whether the OpenBLAS the kernel loaded has a bf16 gemm (asked after
   * the runs: loading it first would take the choice of its kernels from
   * sluice). */
  void *ob = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD);
  printf("\nOpenBLAS %s cblas_sbgemm: 16-bit inputs are widened to f32 and "
         "multiplied by sgemm.\n",
         !ob                         ? "(not loaded) has no"
         : dlsym(ob, "cblas_sbgemm") ? "has"
                                     : "has no");
  return 0;
}
