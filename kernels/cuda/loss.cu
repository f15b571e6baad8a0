// CUDA kernels of sparse cross-entropy and its gradient (cpu/loss.c):
//   loss    = log(sum exp(logits - max)) - (logits[label] - max)
//   dlogits = dloss * (softmax(logits) - onehot(label))
// and of one_hot (cpu/one_hot.c), the labels' other op.
// one row (a sample's C logits) per thread group as in softmax.cu, with the
// CPU's exp and, up to kRowLanesMax classes, its summation order.
//
// The CPU kernel checks every label first and fails with SL_EINVAL naming
// the first one out of [0, C). The labels live on the device here, and a
// status cannot come back without synchronising the stream, so a sample
// whose label is out of range gets a NaN loss (and a NaN gradient row)
// instead: the NaN reaches the loss the program fetches.
#include "cuda_util.cuh"

namespace {

using namespace slc;

__device__ inline int64_t label_at(const void *lab, bool i64, int64_t r) {
  return i64 ? ((const int64_t *)lab)[r] : (int64_t)((const int32_t *)lab)[r];
}

// GRAD false: loss[r]; true: dx rows from dloss[r].
template <int TPR, bool GRAD>
__global__ void __launch_bounds__(TPR == 16 ? 256 : TPR)
    ce_k(const float *x, const void *lab, bool lab_i64, const float *dloss,
         float *out, int64_t rows, int64_t classes) {
  using G = row_group<TPR>;
  __shared__ float sm[G::smem];
  const int lane = threadIdx.x;
  for (int64_t r0 = row_first<TPR>(); r0 < rows; r0 += row_step<TPR>()) {
    int64_t r = r0 + threadIdx.y;
    bool valid = r < rows;
    if (!valid) r = rows - 1;
    const float *xr = x + r * classes;
    int64_t c = label_at(lab, lab_i64, r);
    bool bad = c < 0 || c >= classes;
    float m = xr[0];
    for (int64_t j = lane; j < classes; j += TPR)
      m = xr[j] > m ? xr[j] : m;
    m = G::max(m, sm);
    float acc = 0.0f;
    for (int64_t j = lane; j < classes; j += TPR)
      acc += sl__dense_exp(xr[j] - m);
    float s = G::sum(acc, sm);
    if (!valid) continue;
    if constexpr (!GRAD) {
      if (lane == 0)
        out[r] = bad ? __int_as_float(0x7fc00000) : logf(s) - (xr[c] - m);
    } else {
      float g = dloss[r], scale = g / s;
      float *o = out + r * classes;
      for (int64_t j = lane; j < classes; j += TPR) {
        float v = sl__dense_exp(xr[j] - m) * scale;
        o[j] = bad ? __int_as_float(0x7fc00000) : (j == c ? v - g : v);
      }
    }
  }
}

template <bool GRAD>
void ce_launch(const float *x, const void *lab, bool i64, const float *dloss,
               float *out, int64_t rows, int64_t classes, cudaStream_t cs) {
  if (classes <= kRowLanesMax)
    ce_k<16, GRAD><<<row_grid(rows, 16), row_block(16), 0, cs>>>(
        x, lab, i64, dloss, out, rows, classes);
  else if (classes <= kRow256Max)
    ce_k<256, GRAD><<<row_grid(rows, 256), row_block(256), 0, cs>>>(
        x, lab, i64, dloss, out, rows, classes);
  else
    ce_k<1024, GRAD><<<row_grid(rows, 1024), row_block(1024), 0, cs>>>(
        x, lab, i64, dloss, out, rows, classes);
}

// Rows and classes of logits input `li`; its labels are input `li + 1`.
sl_status ce_dims(const sl__kernel_ctx *k, int li, int64_t *rows,
                  int64_t *classes) {
  const sl_shape *s = &k->in_meta[li].shape;
  if (s->ndim < 1)
    return sl__fail(SL_EINVAL, "logits is a scalar: want [..., classes]");
  *classes = s->dims[s->ndim - 1];
  *rows = sl_shape_numel(s) / (*classes ? *classes : 1);
  if (*classes == 0) *rows = 0;
  sl_dtype dt = k->in_meta[li + 1].dtype;
  if (dt != SL_DTYPE_I32 && dt != SL_DTYPE_I64)
    return sl__fail(SL_EINVAL, "labels: dtype %s, want i32 or i64",
                    sl_dtype_name(dt));
  return SL_OK;
}

sl_status ce_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t rows, classes;
  SL_CHECK(ce_dims(k, 0, &rows, &classes));
  if (rows == 0) return SL_OK;
  ce_launch<false>((const float *)k->in[0], k->in[1],
                   k->in_meta[1].dtype == SL_DTYPE_I64, NULL,
                   (float *)k->out[0], rows, classes, stream_of(s));
  return launched("sparse_cross_entropy");
}

sl_status ce_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t rows, classes;
  SL_CHECK(ce_dims(k, 1, &rows, &classes));
  if (rows == 0) return SL_OK;
  ce_launch<true>((const float *)k->in[1], k->in[2],
                  k->in_meta[2].dtype == SL_DTYPE_I64, (const float *)k->in[0],
                  (float *)k->out[0], rows, classes, stream_of(s));
  return launched("sparse_cross_entropy_grad");
}

// one_hot: element (r, j) of the local [rows, n] view holds class c0 + j.
// A row whose label is out of range is NaN (see the file comment).
__global__ void one_hot_k(float *o, const void *lab, bool i64, int64_t total,
                          int64_t n, int64_t c0, int64_t classes) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    int64_t r = i / n, j = i - r * n;
    int64_t c = label_at(lab, i64, r);
    bool bad = c < 0 || c >= classes;
    o[i] = bad ? __int_as_float(0x7fc00000) : (c == c0 + j ? 1.0f : 0.0f);
  }
}

sl_status one_hot_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *os = &k->out_meta[0].shape;
  int64_t total = sl_shape_numel(os);
  if (total == 0) return SL_OK;
  sl_dtype dt = k->in_meta[0].dtype;
  if (dt != SL_DTYPE_I32 && dt != SL_DTYPE_I64)
    return sl__fail(SL_EINVAL, "labels: dtype %s, want i32 or i64",
                    sl_dtype_name(dt));
  int last = os->ndim - 1;
  one_hot_k<<<blocks_for(total), kThreads, 0, stream_of(s)>>>(
      (float *)k->out[0], k->in[0], dt == SL_DTYPE_I64, total, os->dims[last],
      k->out_slice[0].start[last], k->out_global[0].dims[last]);
  return launched("one_hot");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_sparse_cross_entropy = {ce_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_sparse_cross_entropy_grad = {
    ce_grad_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_one_hot = {one_hot_run, NULL};
