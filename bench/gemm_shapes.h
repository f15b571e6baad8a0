/* The matrix products the gemm benchmarks measure (bench_sgemm,
 * bench_matmul_dtype): square sizes, then one MLP layer (batch 256,
 * 1024 -> 1024) in its three products: forward y = x W^T, input gradient
 * dx = dy W, weight gradient dW = dy^T x. C [m, n] = op(A) [m, k] op(B)
 * [k, n]; ta, tb: A and B are stored transposed. */
#ifndef SLUICE_BENCH_GEMM_SHAPES_H
#define SLUICE_BENCH_GEMM_SHAPES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct shape {
  const char *label;
  int64_t m, n, k;
  bool ta, tb;
} shape;

static const shape shapes[] = {
    {"256^3", 256, 256, 256, false, false},
    {"512^3", 512, 512, 512, false, false},
    {"1024^3", 1024, 1024, 1024, false, false},
    {"2048^3", 2048, 2048, 2048, false, false},
    {"mlp fwd 256x1024x1024 NT", 256, 1024, 1024, false, true},
    {"mlp dx  256x1024x1024 NN", 256, 1024, 1024, false, false},
    {"mlp dW 1024x1024x256 TN", 1024, 1024, 256, true, false},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

#endif
