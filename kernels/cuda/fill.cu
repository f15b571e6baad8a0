// Fill and elementwise add on f32: the smallest real kernels, so that the
// CUDA build path (nvcc, architectures, linking into libsluice) is
// exercised by every CUDA build. Grid-stride loops: one launch shape
// covers any n, and the grid is capped so a huge n does not make a huge
// grid.
#include <cuda_runtime.h>

extern "C" {
#include "fill.h"
}

namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; the
// grid-stride loop does the rest.
constexpr int64_t kMaxBlocks = 65535;

__global__ void fill_f32(float *dst, float value, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = value;
}

__global__ void add_f32(float *out, const float *a, const float *b, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = a[i] + b[i];
}

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b < kMaxBlocks ? b : kMaxBlocks);
}

// A launch error (bad configuration, no kernel image for this GPU) shows
// in cudaGetLastError, which also clears it.
sl_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return SL_OK;
  return sl__fail(SL_ECUDA, "%s: launch failed: %s (%s)", what,
                  cudaGetErrorString(e), cudaGetErrorName(e));
}

} // namespace

extern "C" sl_status sl__cuda_fill_f32(float *dst, float value, int64_t n,
                                       sl__stream *s) {
  if (n < 0 || (n > 0 && !dst) || !s)
    return sl__fail(SL_EINVAL, "cuda fill: bad arguments (n %lld)",
                    (long long)n);
  if (n == 0) return SL_OK;
  fill_f32<<<blocks_for(n), kThreads, 0, (cudaStream_t)s>>>(dst, value, n);
  return launched("cuda fill");
}

extern "C" sl_status sl__cuda_add_f32(float *out, const float *a,
                                      const float *b, int64_t n,
                                      sl__stream *s) {
  if (n < 0 || (n > 0 && (!out || !a || !b)) || !s)
    return sl__fail(SL_EINVAL, "cuda add: bad arguments (n %lld)",
                    (long long)n);
  if (n == 0) return SL_OK;
  add_f32<<<blocks_for(n), kThreads, 0, (cudaStream_t)s>>>(out, a, b, n);
  return launched("cuda add");
}
