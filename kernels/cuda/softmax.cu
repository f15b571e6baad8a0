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
// up to kRowLanesMax elements, a block beyond). Otherwise a thread takes
// one (outer, inner) column and walks the axis in order, which is exactly
// the CPU's column path. exp is the CPU's polynomial (dense_exp), so every
// output equals the CPU's except where a long row's sum is reordered and
// where CUDA's logf differs from glibc's in the last bit.
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
  if (len <= kRowLanesMax)
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
