// Helpers every CUDA kernel family shares (kernels/cuda/*.cu): launch
// shapes, launch-error mapping, group reductions, the dense family's exp
// and the pointwise family's libm-free math, the counter-based random
// stream, and global positions of a local shard.
//
// The .cu files are compiled with --fmad=false (kernels/CMakeLists.txt): the
// CPU kernels are ISO C and never contract a * b + c into an FMA, so the
// same expressions here round the same way and elementwise results
// (activations, optimizer updates, exp of the dense ops, random values) are
// bit-identical to the CPU's. Where a function below ports a CPU one, keep
// the operations and their order exactly as there.
#ifndef SLUICE_KERNELS_CUDA_UTIL_CUH
#define SLUICE_KERNELS_CUDA_UTIL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "cpu/kernel_util.h"
#include "cuda_kernels.h"
}

namespace slc {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU many times over; grid-stride loops
// do the rest, so one launch shape covers any size.
constexpr int64_t kMaxBlocks = 65535;

inline cudaStream_t stream_of(sl__stream *s) { return (cudaStream_t)s; }

inline unsigned blocks_for(int64_t n, int per_block = kThreads) {
  int64_t b = (n + per_block - 1) / per_block;
  return (unsigned)(b < 1 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

// A launch error (bad configuration, no kernel image for this GPU) shows in
// cudaGetLastError, which also clears it.
inline sl_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return SL_OK;
  return sl__fail(SL_ECUDA, "cuda %s: launch failed: %s (%s)", what,
                  cudaGetErrorString(e), cudaGetErrorName(e));
}

// A runtime call's status (copies, memsets queued by the kernels).
inline sl_status cuda_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return SL_OK;
  cudaGetLastError(); // clear the sticky copy of a non-sticky error
  return sl__fail(SL_ECUDA, "cuda %s: %s (%s)", what, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

// Whether every pointer is aligned to `a` bytes (vectorised loads).
inline bool aligned(uintptr_t a, const void *p) {
  return ((uintptr_t)p & (a - 1)) == 0;
}
template <typename... P>
inline bool aligned(uintptr_t a, const void *p, P... rest) {
  return aligned(a, p) && aligned(a, rest...);
}

__device__ inline int64_t thread_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ inline int64_t thread_count() {
  return (int64_t)gridDim.x * blockDim.x;
}

// ---- group reductions --------------------------------------------------

// Sum over the 16 lanes of a half-warp in the CPU dense family's order
// (dense_util.h, sl__dense_lanes_sum): t[l] += t[l + w] for w = 8, 4, 2, 1,
// then lane 0's value, given to every lane. A row whose lane l has summed
// elements l, l + 16, ... in order therefore gets the CPU's bits.
template <typename T> __device__ inline T lanes16_sum(T v) {
  const unsigned full = 0xffffffffu;
  for (int w = 8; w >= 1; w /= 2)
    v += __shfl_down_sync(full, v, w, 16);
  return __shfl_sync(full, v, 0, 16);
}

// Max over the 16 lanes (exact in any order but NaN, see lanes16_sum).
__device__ inline float lanes16_max(float v) {
  const unsigned full = 0xffffffffu;
  for (int w = 8; w >= 1; w /= 2) {
    float o = __shfl_down_sync(full, v, w, 16);
    v = o > v ? o : v;
  }
  return __shfl_sync(full, v, 0, 16);
}

struct op_sum {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct op_max { // the dense family's max: a NaN may be skipped
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

template <typename T, typename Op> __device__ inline T warp_reduce(T v, Op op) {
  for (int o = 16; o >= 1; o /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduction over the TPR threads of a block row (threadIdx.x; TPR a
// multiple of 32, blockDim.y == 1), the result given to every thread. smem
// holds TPR / 32 values. Every thread of the block must call it.
template <int TPR, typename T, typename Op>
__device__ inline T block_reduce(T v, Op op, T *smem) {
  v = warp_reduce(v, op);
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads(); // the previous call's readers are done with smem
  if (lane == 0) smem[w] = v;
  __syncthreads();
  // Every thread combines the partials itself, in warp order: no third
  // barrier, and the same result everywhere.
  T r = smem[0];
  for (int i = 1; i < TPR / 32; i++)
    r = op(r, smem[i]);
  return r;
}

// ---- rows of the dense family -------------------------------------------

// The dense family's row kernels run TPR threads per row: 16 (blockDim (16,
// 16), a row per half-warp) for rows of up to kRowLanesMax elements, whose
// sums then follow the CPU's lanes exactly (thread l sums elements l,
// l + 16, ... in order, lanes16_sum combines them as the CPU's tree does:
// bit-identical sums), and a block of 256 or 1024 threads for longer rows
// (sums in another order, within a tolerance of the CPU's). The choice
// depends only on the row length, so as on the CPU a row's result never
// depends on where it sits in a shard.
constexpr int64_t kRowLanesMax = 4096;
constexpr int64_t kRow256Max = 32768;

template <int TPR> struct row_group {
  static constexpr int rows_per_block = TPR == 16 ? 16 : 1;
  static constexpr int smem = TPR >= 64 ? TPR / 32 : 1;
  __device__ static float sum(float v, float *sm) {
    if constexpr (TPR == 16)
      return lanes16_sum(v);
    else
      return block_reduce<TPR>(v, op_sum{}, sm);
  }
  __device__ static double sumd(double v, double *sm) {
    if constexpr (TPR == 16)
      return lanes16_sum(v);
    else
      return block_reduce<TPR>(v, op_sum{}, sm);
  }
  __device__ static float max(float v, float *sm) {
    if constexpr (TPR == 16)
      return lanes16_max(v);
    else
      return block_reduce<TPR>(v, op_max{}, sm);
  }
};

inline dim3 row_block(int tpr) { return tpr == 16 ? dim3(16, 16) : dim3(tpr); }
inline unsigned row_grid(int64_t rows, int tpr) {
  return blocks_for(rows, tpr == 16 ? 16 : 1);
}

// A block's rows: for (r0 = row_first<TPR>(); r0 < rows; r0 += row_step<TPR>())
// with row r0 + threadIdx.y. Every thread of a block runs the same
// iterations (the shuffles and barriers need all of them): a thread whose
// row is past the end works on the last row and does not write.
template <int TPR> __device__ inline int64_t row_first() {
  return (int64_t)blockIdx.x * row_group<TPR>::rows_per_block;
}
template <int TPR> __device__ inline int64_t row_step() {
  return (int64_t)gridDim.x * row_group<TPR>::rows_per_block;
}

// ---- the CPU kernels' math, operation for operation --------------------

// exp, tanh, sigmoid and the random stream are cpu/kernel_util.h's own
// (SL__HD): the same definitions, so the same bits, on both backends.

// ---- global positions ---------------------------------------------------

// Maps a local shard's flat element index to the global flat index of the
// element (sl__slice_row_global's rule, element by element).
struct global_map {
  int nd;
  int64_t ext[SL_MAX_DIMS]; // local extents
  int64_t mul[SL_MAX_DIMS]; // global row-major strides
  int64_t base;             // global flat index of the shard's first element
};

// From the shard's slice and the global shape (host side). A 0-dim shard
// is one element at index 0.
inline global_map global_map_make(const sl_slice *slice, const sl_shape *g) {
  global_map m;
  memset(&m, 0, sizeof m);
  m.nd = slice->ndim;
  int64_t mul = 1;
  for (int d = m.nd - 1; d >= 0; d--) {
    m.ext[d] = slice->extent[d];
    m.mul[d] = mul;
    m.base += slice->start[d] * mul;
    mul *= g->dims[d];
  }
  return m;
}

__device__ inline int64_t global_index(const global_map &m, int64_t i) {
  int64_t flat = m.base;
  for (int d = m.nd - 1; d > 0; d--) {
    int64_t e = m.ext[d];
    flat += (i % e) * m.mul[d];
    i /= e;
  }
  if (m.nd > 0) flat += i * m.mul[0];
  return flat;
}

} // namespace slc

#endif
