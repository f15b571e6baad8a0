// CUDA kernels of layer normalisation over the last dim and its gradient
// (cpu/norm.c):
//   layer_norm       mean = sum x / D, var = sum (x - mean)^2 / D,
//                    rstd = 1 / sqrt(var + eps),
//                    y = (x - mean) rstd gamma + beta
//   layer_norm_grad  xhat = (x - mean) rstd, g = gamma dy,
//                    dx = rstd (g - mean(g) - xhat mean(g xhat)),
//                    dgamma = sum over rows of dy xhat, dbeta = sum of dy
// Rows go to thread groups as in softmax.cu (the CPU's lanes up to
// kRowLanesMax: bit-identical row sums). Rows of up to kRowStageMax
// elements in 16-byte pieces are staged in shared memory (ln_staged_k). dgamma
// and dbeta are column sums in double as on the CPU: a thread per column walks
// a chunk of rows in order, 8 threads share a column's chunk, and for many rows
// the chunks' partials go to the workspace and are added in chunk order, so the
// result is deterministic and within rounding of the CPU's row-order double
// sums (the same float after rounding but for rare ties).
#include <type_traits>

#include "cuda_util.cuh"

namespace {

using namespace slc;

template <int TPR>
__global__ void __launch_bounds__(TPR == 16 ? 256 : TPR)
    ln_k(const float *x, const float *gamma, const float *beta, float *y,
         float *mean, float *rstd, int64_t rows, int64_t d, float inv_d,
         float eps) {
  using G = row_group<TPR>;
  __shared__ float sm[G::smem];
  const int lane = threadIdx.x;
  for (int64_t r0 = row_first<TPR>(); r0 < rows; r0 += row_step<TPR>()) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    const float *xr = x + r * d;
    float acc = 0.0f;
    for (int64_t j = lane; j < d; j += TPR)
      acc += xr[j];
    float mu = G::sum(acc, sm) * inv_d;
    acc = 0.0f;
    for (int64_t j = lane; j < d; j += TPR) {
      float c = xr[j] - mu;
      acc += c * c;
    }
    float rs = 1.0f / sqrtf(G::sum(acc, sm) * inv_d + eps);
    if (!valid) continue;
    float *yr = y + r * d;
    for (int64_t j = lane; j < d; j += TPR)
      yr[j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx rows (row_ln_grad_sums, then ln_grad_row's dx).
template <int TPR>
__global__ void __launch_bounds__(TPR == 16 ? 256 : TPR)
    ln_grad_dx_k(const float *dy, const float *x, const float *gamma,
                 const float *mean, const float *rstd, float *dx, int64_t rows,
                 int64_t d, float inv_d) {
  using G = row_group<TPR>;
  __shared__ float sm[G::smem];
  const int lane = threadIdx.x;
  for (int64_t r0 = row_first<TPR>(); r0 < rows; r0 += row_step<TPR>()) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    const float *dyr = dy + r * d, *xr = x + r * d;
    float mu = mean[r], rs = rstd[r];
    float sa = 0.0f, sb = 0.0f;
    for (int64_t j = lane; j < d; j += TPR) {
      float g = gamma[j] * dyr[j];
      sa += g;
      sb += g * ((xr[j] - mu) * rs);
    }
    float a = G::sum(sa, sm) * inv_d;
    float b = G::sum(sb, sm) * inv_d;
    if (!valid) continue;
    float *o = dx + r * d;
    for (int64_t j = lane; j < d; j += TPR) {
      float xh = (xr[j] - mu) * rs, e = dyr[j];
      o[j] = rs * ((gamma[j] * e - a) - xh * b);
    }
  }
}

// Staged rows: a block of kStageRows half-warps copies its rows (x, and dy
// for the gradient) into shared memory with 16-byte loads, each lane then
// works on elements l, l + 16, ... of its row there, in the same order and
// with the same operations as ln_k<16> and ln_grad_dx_k<16> (the same bits),
// and the results leave with 16-byte stores. Memory is read once, in whole
// lines: on an H100, bench_kernels_vs_torch's layer_norm over [8192, 768]
// took 31 us this way, 40 us with ln_k<16>'s three passes over memory, and
// 42 us holding the row in registers with 4-byte loads (bench/README.md). A row
// occupies `stride` floats, its length rounded so that the two half-warps of a
// warp, on neighbouring rows, read different banks.
constexpr int kStageRows = 4;
constexpr int64_t kRowStageMax = 1024;
constexpr int64_t kStageRowFloats = kRowStageMax + 32;

int64_t stage_stride(int64_t d) { return d + ((16 - d % 32) + 32) % 32; }

template <typename... P> bool stageable(int64_t d, P... rows) {
  return d <= kRowStageMax && d % 4 == 0 && aligned(16, rows...);
}

// A row's d floats between memory and shared memory, by the 16 lanes of its
// half-warp in 16-byte pieces.
__device__ inline void copy_row(float *dst, const float *src, int64_t d,
                                int lane) {
  const float4 *s4 = (const float4 *)src;
  float4 *d4 = (float4 *)dst;
  for (int64_t q = lane; q < d / 4; q += 16)
    d4[q] = s4[q];
}

__global__ void __launch_bounds__(16 * kStageRows)
    ln_staged_k(const float *x, const float *gamma, const float *beta, float *y,
                float *mean, float *rstd, int64_t rows, int64_t d,
                int64_t stride, float inv_d, float eps) {
  __shared__ __align__(16) float sm[kStageRows * kStageRowFloats];
  const int lane = threadIdx.x;
  float *row = sm + threadIdx.y * stride;
  for (int64_t r0 = (int64_t)blockIdx.x * kStageRows; r0 < rows;
       r0 += (int64_t)gridDim.x * kStageRows) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    copy_row(row, x + r * d, d, lane);
    __syncwarp();
    float acc = 0.0f;
    for (int64_t j = lane; j < d; j += 16)
      acc += row[j];
    float mu = lanes16_sum(acc) * inv_d;
    acc = 0.0f;
    for (int64_t j = lane; j < d; j += 16) {
      float c = row[j] - mu;
      acc += c * c;
    }
    float rs = 1.0f / sqrtf(lanes16_sum(acc) * inv_d + eps);
    for (int64_t j = lane; j < d; j += 16)
      row[j] = (row[j] - mu) * rs * gamma[j] + beta[j];
    __syncwarp();
    if (valid) {
      copy_row(y + r * d, row, d, lane);
      if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
      }
    }
    __syncwarp(); // the row is read out before the next one lands
  }
}

__global__ void __launch_bounds__(16 * kStageRows)
    ln_grad_dx_staged_k(const float *dy, const float *x, const float *gamma,
                        const float *mean, const float *rstd, float *dx,
                        int64_t rows, int64_t d, int64_t stride, float inv_d) {
  __shared__ __align__(16) float sm[2 * kStageRows * kStageRowFloats];
  const int lane = threadIdx.x;
  float *er = sm + threadIdx.y * stride;
  float *xr = sm + (kStageRows + threadIdx.y) * stride;
  for (int64_t r0 = (int64_t)blockIdx.x * kStageRows; r0 < rows;
       r0 += (int64_t)gridDim.x * kStageRows) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    copy_row(er, dy + r * d, d, lane);
    copy_row(xr, x + r * d, d, lane);
    float mu = mean[r], rs = rstd[r];
    __syncwarp();
    float sa = 0.0f, sb = 0.0f;
    for (int64_t j = lane; j < d; j += 16) {
      float g = gamma[j] * er[j];
      sa += g;
      sb += g * ((xr[j] - mu) * rs);
    }
    float a = lanes16_sum(sa) * inv_d;
    float b = lanes16_sum(sb) * inv_d;
    for (int64_t j = lane; j < d; j += 16) {
      float xh = (xr[j] - mu) * rs, e = er[j];
      er[j] = rs * ((gamma[j] * e - a) - xh * b);
    }
    __syncwarp();
    if (valid) copy_row(dx + r * d, er, d, lane);
    __syncwarp();
  }
}

// Column sums: blockDim (32, 8), threadIdx.x a column, threadIdx.y every
// 8th row of the chunk blockIdx.y. One chunk: dgamma, dbeta; several: the
// partials ws[(chunk * 2 + 0/1) * d + j].
__global__ void ln_grad_cols_k(const float *dy, const float *x,
                               const float *mean, const float *rstd,
                               float *dgamma, float *dbeta, double *ws,
                               int64_t rows, int64_t d) {
  __shared__ double pg[8][33], pb[8][33];
  int64_t per = (rows + gridDim.y - 1) / gridDim.y;
  int64_t ra = (int64_t)blockIdx.y * per;
  int64_t rb = ra + per < rows ? ra + per : rows;
  for (int64_t j0 = (int64_t)blockIdx.x * 32; j0 < d;
       j0 += (int64_t)gridDim.x * 32) {
    int64_t j = j0 + threadIdx.x;
    double sg = 0.0, sbv = 0.0;
    if (j < d)
      for (int64_t r = ra + threadIdx.y; r < rb; r += 8) {
        float e = dy[r * d + j];
        float xh = (x[r * d + j] - mean[r]) * rstd[r];
        sg += (double)(e * xh);
        sbv += (double)e;
      }
    pg[threadIdx.y][threadIdx.x] = sg;
    pb[threadIdx.y][threadIdx.x] = sbv;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
      double g = pg[0][threadIdx.x], b = pb[0][threadIdx.x];
      for (int t = 1; t < 8; t++) {
        g += pg[t][threadIdx.x];
        b += pb[t][threadIdx.x];
      }
      if (gridDim.y == 1) {
        dgamma[j] = (float)g;
        dbeta[j] = (float)b;
      } else {
        ws[((int64_t)blockIdx.y * 2) * d + j] = g;
        ws[((int64_t)blockIdx.y * 2 + 1) * d + j] = b;
      }
    }
    __syncthreads();
  }
}

__global__ void ln_grad_chunks_k(const double *ws, float *dgamma, float *dbeta,
                                 int64_t d, int chunks) {
  for (int64_t j = thread_index(); j < d; j += thread_count()) {
    double g = ws[j], b = ws[d + j];
    for (int c = 1; c < chunks; c++) {
      g += ws[((int64_t)c * 2) * d + j];
      b += ws[((int64_t)c * 2 + 1) * d + j];
    }
    dgamma[j] = (float)g;
    dbeta[j] = (float)b;
  }
}

// Rows of a chunk: enough that few columns still fill the GPU.
constexpr int64_t kChunkRows = 1024, kMaxChunks = 64;

int ln_chunks(int64_t rows) {
  int64_t c = rows / kChunkRows;
  return (int)(c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c));
}

int64_t rows_of(const sl_shape *s, int64_t *d) {
  *d = s->ndim ? s->dims[s->ndim - 1] : 1;
  return *d ? sl_shape_numel(s) / *d : 0;
}

template <typename L> void by_length(int64_t d, L launch) {
  if (d <= kRowLanesMax)
    launch(std::integral_constant<int, 16>{});
  else if (d <= kRow256Max)
    launch(std::integral_constant<int, 256>{});
  else
    launch(std::integral_constant<int, 1024>{});
}

sl_status ln_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t d, rows = rows_of(&k->in_meta[0].shape, &d);
  if (d == 0 || rows == 0) return SL_OK;
  float eps = (float)sl__attr_float(k->attrs, "eps", 1e-5);
  float inv_d = 1.0f / (float)d;
  cudaStream_t cs = stream_of(s);
  const float *x = (const float *)k->in[0], *gamma = (const float *)k->in[1],
              *beta = (const float *)k->in[2];
  float *y = (float *)k->out[0], *mean = (float *)k->out[1],
        *rstd = (float *)k->out[2];
  if (stageable(d, x, y)) {
    ln_staged_k<<<blocks_for(rows, kStageRows), dim3(16, kStageRows), 0, cs>>>(
        x, gamma, beta, y, mean, rstd, rows, d, stage_stride(d), inv_d, eps);
    return launched("layer_norm");
  }
  by_length(d, [&](auto tpr) {
    constexpr int TPR = decltype(tpr)::value;
    ln_k<TPR><<<row_grid(rows, TPR), row_block(TPR), 0, cs>>>(
        x, gamma, beta, y, mean, rstd, rows, d, inv_d, eps);
  });
  return launched("layer_norm");
}

size_t lng_ws(const sl__kernel_ctx *k) {
  int64_t d, rows = rows_of(&k->in_meta[1].shape, &d);
  int c = ln_chunks(rows);
  if (d == 0 || rows == 0 || c <= 1) return 0;
  return (size_t)c * 2 * (size_t)d * sizeof(double);
}

sl_status lng_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t d, rows = rows_of(&k->in_meta[1].shape, &d);
  if (d == 0) return SL_OK;
  const float *dy = (const float *)k->in[0], *x = (const float *)k->in[1],
              *gamma = (const float *)k->in[2], *mean = (const float *)k->in[3],
              *rstd = (const float *)k->in[4];
  float *dx = (float *)k->out[0], *dgamma = (float *)k->out[1],
        *dbeta = (float *)k->out[2];
  cudaStream_t cs = stream_of(s);
  if (rows == 0) { // no rows: the sums are 0
    SL_CHECK(
        cuda_check(cudaMemsetAsync(dgamma, 0, (size_t)d * sizeof(float), cs),
                   "layer_norm_grad: cudaMemsetAsync"));
    return cuda_check(cudaMemsetAsync(dbeta, 0, (size_t)d * sizeof(float), cs),
                      "layer_norm_grad: cudaMemsetAsync");
  }
  float inv_d = 1.0f / (float)d;
  int chunks = ln_chunks(rows);
  double *ws = (double *)k->workspace;
  if (chunks > 1 && (!ws || k->workspace_bytes < lng_ws(k)))
    return sl__fail(SL_EINVAL, "layer_norm_grad: no workspace (run it with "
                               "sl__op_run_cuda)");
  if (stageable(d, dy, x, dx))
    ln_grad_dx_staged_k<<<blocks_for(rows, kStageRows), dim3(16, kStageRows), 0,
                          cs>>>(dy, x, gamma, mean, rstd, dx, rows, d,
                                stage_stride(d), inv_d);
  else
    by_length(d, [&](auto tpr) {
      constexpr int TPR = decltype(tpr)::value;
      ln_grad_dx_k<TPR><<<row_grid(rows, TPR), row_block(TPR), 0, cs>>>(
          dy, x, gamma, mean, rstd, dx, rows, d, inv_d);
    });
  SL_CHECK(launched("layer_norm_grad"));
  dim3 grid(blocks_for(d, 32), (unsigned)chunks);
  ln_grad_cols_k<<<grid, dim3(32, 8), 0, cs>>>(dy, x, mean, rstd, dgamma, dbeta,
                                               ws, rows, d);
  if (chunks > 1) {
    SL_CHECK(launched("layer_norm_grad"));
    ln_grad_chunks_k<<<blocks_for(d), kThreads, 0, cs>>>(ws, dgamma, dbeta, d,
                                                         chunks);
  }
  return launched("layer_norm_grad");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_layer_norm = {ln_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_layer_norm_grad = {lng_run, lng_ws};
