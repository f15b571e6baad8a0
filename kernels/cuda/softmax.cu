// CUDA kernels of softmax, log_softmax and their gradients over one axis
// (cpu/softmax.c):
//   softmax           y = exp(x - max) / sum exp(x - max)
//   log_softmax       y = (x - max) - log sum exp(x - max)
//   softmax_grad      dx = y (dy - sum(dy y))
//   log_softmax_grad  dx = dy - exp(y) sum(dy)
//
// The tensor is [outer, len, inner] around the axis. With the axis last
// (inner = 1) each row is reduced by a group of threads (cuda_util.cuh's
// row_group: a half-warp whose sums reproduce the CPU's lanes bit for bit
// up to kRowLanesMax elements, a block beyond); rows of up to kRowRegsMax
// are held in the half-warp's registers, read once. Otherwise a thread takes
// one (outer, inner) column and walks the axis in order, which is exactly
// the CPU's column path. exp is the CPU's polynomial (dense_exp), so every
// output equals the CPU's except where a long row's sum is reordered and
// where CUDA's logf differs from glibc's in the last bit.
#include <type_traits>

#include "cuda_util.cuh"

namespace {

using namespace slc;

enum sm_kind {
  SM_SOFTMAX = 0,
  SM_LOG_SOFTMAX = 1,
  SM_SOFTMAX_GRAD = 2,
  SM_LOG_SOFTMAX_GRAD = 3,
};

// Rows of len along the last axis; x is dy for the gradients, y their y.
template <int TPR, int KIND>
__global__ void __launch_bounds__(TPR == 16 ? 256 : TPR)
    rows_k(const float *x, const float *y, float *out, int64_t rows,
           int64_t len) {
  using G = row_group<TPR>;
  __shared__ float sm[G::smem];
  const int lane = threadIdx.x;
  for (int64_t r0 = row_first<TPR>(); r0 < rows; r0 += row_step<TPR>()) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    const float *xr = x + r * len;
    float *o = out + r * len;
    if constexpr (KIND == SM_SOFTMAX || KIND == SM_LOG_SOFTMAX) {
      // The max starts from x[0] as the CPU's (a NaN may be skipped; the
      // exp sum then carries it to the whole row).
      float m = xr[0];
      for (int64_t j = lane; j < len; j += TPR)
        m = xr[j] > m ? xr[j] : m;
      m = G::max(m, sm);
      float acc = 0.0f;
      for (int64_t j = lane; j < len; j += TPR)
        acc += sl__dense_exp(xr[j] - m);
      float s = G::sum(acc, sm);
      if constexpr (KIND == SM_SOFTMAX) {
        float inv = 1.0f / s;
        if (valid)
          for (int64_t j = lane; j < len; j += TPR)
            o[j] = sl__dense_exp(xr[j] - m) * inv;
      } else {
        float lse = logf(s);
        if (valid)
          for (int64_t j = lane; j < len; j += TPR)
            o[j] = (xr[j] - m) - lse;
      }
    } else {
      const float *yr = y + r * len;
      float acc = 0.0f;
      for (int64_t j = lane; j < len; j += TPR)
        acc += KIND == SM_SOFTMAX_GRAD ? xr[j] * yr[j] : xr[j];
      float s = G::sum(acc, sm);
      if (valid)
        for (int64_t j = lane; j < len; j += TPR)
          o[j] = KIND == SM_SOFTMAX_GRAD ? yr[j] * (xr[j] - s)
                                         : xr[j] - sl__dense_exp(yr[j]) * s;
    }
  }
}

// Rows of up to kRowRegsMax elements are read from memory once: the
// half-warp of a row (blockDim (16, 16), as rows_k<16>) holds it in
// registers, lane l elements l, l + 16, ..., l + 16 (K - 1), so its sums keep
// the CPU's lane order and bits. A lane reads through its own pointer
// (row + lane) at constant offsets 16 k and tests them against n = len -
// lane, so the registers go to the elements, not to index arithmetic. On
// an H100, softmax over [98304, 1024] ran at 96% of a device copy's
// bandwidth this way and at 40% with rows_k<16>'s three passes over memory
// (bench/README.md, "Kernels"). No minimum of blocks per SM in __launch_bounds__: capping
// the registers at 128 made the same kernel three times slower.
constexpr int64_t kRowRegsMax = 1024;

// Elements a lane holds for rows of len (a few sizes, so a row wastes
// little and there are few kernels): calls launch(integral_constant<K>).
template <typename L> void by_row_regs(int64_t len, L launch) {
  if (len <= 64)
    launch(std::integral_constant<int, 4>{});
  else if (len <= 256)
    launch(std::integral_constant<int, 16>{});
  else if (len <= 512)
    launch(std::integral_constant<int, 32>{});
  else if (len <= 768)
    launch(std::integral_constant<int, 48>{});
  else
    launch(std::integral_constant<int, 64>{});
}

__device__ inline bool row_has(int k, int64_t n) { return 16 * k < n; }

// The lane's elements of a row (0 past its end), p = row + lane; all K
// loads are independent, so they are in flight together.
template <int K>
__device__ inline void row_load(float (&v)[K], const float *p, int64_t n) {
#pragma unroll
  for (int k = 0; k < K; k++)
    v[k] = row_has(k, n) ? p[16 * k] : 0.0f;
}

// Rows of up to 16 K elements, held in registers (row_load): the same
// operations in the same order as rows_k<16>, each element read once and
// exp taken once.
template <int K, int KIND>
__global__ void __launch_bounds__(256)
    rows_regs_k(const float *x, const float *y, float *out, int64_t rows,
                int64_t len) {
  const int lane = threadIdx.x;
  const int64_t n = len - lane;
  for (int64_t r0 = row_first<16>(); r0 < rows; r0 += row_step<16>()) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    float a[K];
    row_load(a, x + r * len + lane, n);
    float *o = out + r * len + lane;
    if constexpr (KIND == SM_SOFTMAX || KIND == SM_LOG_SOFTMAX) {
      // The max starts from x[0] (lane 0's first element), as the CPU's.
      float m = __shfl_sync(0xffffffffu, a[0], 0, 16);
#pragma unroll
      for (int k = 0; k < K; k++)
        if (row_has(k, n)) m = a[k] > m ? a[k] : m;
      m = lanes16_max(m);
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < K; k++)
        if (row_has(k, n)) {
          float e = sl__dense_exp(a[k] - m);
          acc += e;
          if constexpr (KIND == SM_SOFTMAX) a[k] = e;
        }
      float s = lanes16_sum(acc);
      if (!valid) continue;
      if constexpr (KIND == SM_SOFTMAX) {
        float inv = 1.0f / s;
#pragma unroll
        for (int k = 0; k < K; k++)
          if (row_has(k, n)) o[16 * k] = a[k] * inv;
      } else {
        float lse = logf(s);
#pragma unroll
        for (int k = 0; k < K; k++)
          if (row_has(k, n)) o[16 * k] = (a[k] - m) - lse;
      }
    } else {
      float b[K];
      row_load(b, y + r * len + lane, n);
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < K; k++)
        if (row_has(k, n)) acc += KIND == SM_SOFTMAX_GRAD ? a[k] * b[k] : a[k];
      float s = lanes16_sum(acc);
      if (!valid) continue;
#pragma unroll
      for (int k = 0; k < K; k++)
        if (row_has(k, n))
          o[16 * k] = KIND == SM_SOFTMAX_GRAD ? b[k] * (a[k] - s)
                                              : a[k] - sl__dense_exp(b[k]) * s;
    }
  }
}

// One thread per (outer, inner) column, the axis walked in order (the
// CPU's cols_run, column by column).
template <int KIND>
__global__ void cols_k(const float *x, const float *y, float *out,
                       int64_t outer, int64_t len, int64_t inner) {
  int64_t total = outer * inner;
  for (int64_t t = thread_index(); t < total; t += thread_count()) {
    int64_t oi = t / inner, c = t - oi * inner;
    int64_t base = oi * len * inner + c;
    const float *xc = x + base;
    float *oc = out + base;
    if constexpr (KIND == SM_SOFTMAX || KIND == SM_LOG_SOFTMAX) {
      float a = xc[0];
      for (int64_t i = 1; i < len; i++) {
        float e = xc[i * inner];
        a = e > a ? e : a;
      }
      float b = 0.0f;
      for (int64_t i = 0; i < len; i++)
        b += sl__dense_exp(xc[i * inner] - a);
      if constexpr (KIND == SM_SOFTMAX) {
        b = 1.0f / b;
        for (int64_t i = 0; i < len; i++)
          oc[i * inner] = sl__dense_exp(xc[i * inner] - a) * b;
      } else {
        b = logf(b);
        for (int64_t i = 0; i < len; i++)
          oc[i * inner] = (xc[i * inner] - a) - b;
      }
    } else {
      const float *yc = y + base;
      float a = 0.0f;
      for (int64_t i = 0; i < len; i++)
        a += KIND == SM_SOFTMAX_GRAD ? xc[i * inner] * yc[i * inner]
                                     : xc[i * inner];
      for (int64_t i = 0; i < len; i++)
        oc[i * inner] = KIND == SM_SOFTMAX_GRAD
                            ? yc[i * inner] * (xc[i * inner] - a)
                            : xc[i * inner] - sl__dense_exp(yc[i * inner]) * a;
    }
  }
}

template <int KIND>
void launch_rows(const float *x, const float *y, float *out, int64_t rows,
                 int64_t len, cudaStream_t cs) {
  if (len <= kRowRegsMax)
    by_row_regs(len, [&](auto kk) {
      rows_regs_k<decltype(kk)::value, KIND>
          <<<row_grid(rows, 16), row_block(16), 0, cs>>>(x, y, out, rows, len);
    });
  else if (len <= kRowLanesMax)
    rows_k<16, KIND>
        <<<row_grid(rows, 16), row_block(16), 0, cs>>>(x, y, out, rows, len);
  else if (len <= kRow256Max)
    rows_k<256, KIND>
        <<<row_grid(rows, 256), row_block(256), 0, cs>>>(x, y, out, rows, len);
  else
    rows_k<1024, KIND><<<row_grid(rows, 1024), row_block(1024), 0, cs>>>(
        x, y, out, rows, len);
}

template <int KIND>
sl_status sm_run(const sl__kernel_ctx *k, sl__stream *s, const char *what) {
  const sl_shape *sh = &k->in_meta[0].shape;
  if (sh->ndim == 0)
    return sl__fail(SL_EINVAL, "x is a scalar: no axis to normalise");
  int axis;
  SL_CHECK(sl__axis_norm("axis", sl__attr_int(k->attrs, "axis", -1), sh->ndim,
                         &axis));
  int64_t outer = 1, inner = 1, len = sh->dims[axis];
  for (int i = 0; i < axis; i++)
    outer *= sh->dims[i];
  for (int i = axis + 1; i < sh->ndim; i++)
    inner *= sh->dims[i];
  if (outer == 0 || len == 0 || inner == 0) return SL_OK;
  const float *x = (const float *)k->in[0];
  const float *y = KIND >= SM_SOFTMAX_GRAD ? (const float *)k->in[1] : NULL;
  float *out = (float *)k->out[0];
  cudaStream_t cs = stream_of(s);
  if (axis == sh->ndim - 1)
    launch_rows<KIND>(x, y, out, outer, len, cs);
  else
    cols_k<KIND><<<blocks_for(outer * inner), kThreads, 0, cs>>>(
        x, y, out, outer, len, inner);
  return launched(what);
}

sl_status softmax_run(const sl__kernel_ctx *k, sl__stream *s) {
  return sm_run<SM_SOFTMAX>(k, s, "softmax");
}
sl_status log_softmax_run(const sl__kernel_ctx *k, sl__stream *s) {
  return sm_run<SM_LOG_SOFTMAX>(k, s, "log_softmax");
}
sl_status softmax_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  return sm_run<SM_SOFTMAX_GRAD>(k, s, "softmax_grad");
}
sl_status log_softmax_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  return sm_run<SM_LOG_SOFTMAX_GRAD>(k, s, "log_softmax_grad");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_softmax = {softmax_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_log_softmax = {log_softmax_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_softmax_grad = {softmax_grad_run,
                                                          NULL};
extern "C" const sl__cuda_kernel sl__cuda_log_softmax_grad = {
    log_softmax_grad_run, NULL};
