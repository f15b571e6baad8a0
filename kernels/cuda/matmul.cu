// CUDA kernels of matmul and batch_matmul (cpu/matmul.c), on cuBLAS.
//
// Row-major C [m, n] = A [m, k] B [k, n] is column-major C^T = B^T A^T, so
// every product is one cublasSgemm (batch_matmul: one strided-batched call)
// with the operands swapped and the transposes passed as flags, reading the
// shards where they lie. bf16 and f16 inputs (storage, as on the CPU): when
// both are of one 16-bit dtype the product is one cublasGemmEx /
// cublasGemmStridedBatchedEx with 16-bit operands, f32 output and
// CUBLAS_COMPUTE_32F (f32 accumulation); a 16-bit operand next to one of
// another dtype is widened to f32 in the workspace (exactly) and goes
// through Sgemm. k = 0 gives zeros.
//
// cuBLAS runs in its default math mode, so f32 products are full f32 (no
// TF32 unless NVIDIA_TF32_OVERRIDE asks for it); the summation order is
// cuBLAS's, not OpenBLAS's, so results agree with the CPU within float
// rounding of the dot products.
//
// A cuBLAS handle belongs to the thread and device that use it: each
// thread keeps one per device (created on first use, destroyed when the
// thread exits) and points it at the call's stream.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "cuda_util.cuh"

namespace {

using namespace slc;

// ---- handles ----------------------------------------------------------------

sl_status cublas_check(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS) return SL_OK;
  return sl__fail(SL_ECUDA, "cuda %s: %s (%s)", what, cublasGetStatusString(st),
                  cublasGetStatusName(st));
}

constexpr int kMaxDevices = 64;

struct handles {
  cublasHandle_t h[kMaxDevices] = {};
  ~handles() {
    for (int i = 0; i < kMaxDevices; i++)
      if (h[i]) cublasDestroy(h[i]); // at thread exit; nothing to report to
  }
};

sl_status handle_for(cudaStream_t cs, cublasHandle_t *out) {
  static thread_local handles hs;
  *out = NULL;
  int dev = 0;
  SL_CHECK(cuda_check(cudaGetDevice(&dev), "matmul: cudaGetDevice"));
  if (dev < 0 || dev >= kMaxDevices)
    return sl__fail(SL_EUNSUPPORTED, "matmul: device %d: at most %d devices",
                    dev, kMaxDevices);
  if (!hs.h[dev])
    SL_CHECK(cublas_check(cublasCreate(&hs.h[dev]), "matmul: cublasCreate"));
  SL_CHECK(
      cublas_check(cublasSetStream(hs.h[dev], cs), "matmul: cublasSetStream"));
  *out = hs.h[dev];
  return SL_OK;
}

// ---- shapes (matmul's: sl__matmul_dims; batch_matmul's as in matmul.c) ----

struct mm_dims {
  int64_t batch, m, n, k;
};

sl_status bmm_dims(bool ta, bool tb, const sl_shape *as, const sl_shape *bs,
                   mm_dims *d) {
  int na = as->ndim;
  if (na < 2 || bs->ndim != na)
    return sl__fail(SL_EINVAL, "batch_matmul: a %s and b %s do not fit",
                    sl__shape_text(as).s, sl__shape_text(bs).s);
  d->batch = 1;
  for (int i = 0; i < na - 2; i++) {
    if (as->dims[i] != bs->dims[i])
      return sl__fail(SL_EINVAL, "batch_matmul: batch dim %d differs", i);
    d->batch *= as->dims[i];
  }
  d->m = as->dims[ta ? na - 1 : na - 2];
  d->k = as->dims[ta ? na - 2 : na - 1];
  d->n = bs->dims[tb ? na - 2 : na - 1];
  if (bs->dims[tb ? na - 1 : na - 2] != d->k)
    return sl__fail(SL_EINVAL,
                    "batch_matmul: contraction extents differ "
                    "(%lld vs %lld)",
                    (long long)d->k, (long long)bs->dims[tb ? na - 1 : na - 2]);
  return SL_OK;
}

// ---- 16-bit widening
// ------------------------------------------------------------

bool half(sl_dtype dt) { return dt == SL_DTYPE_BF16 || dt == SL_DTYPE_F16; }

__global__ void widen_k(float *o, const uint16_t *h, bool f16, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    o[i] = f16 ? __half2float(__ushort_as_half(h[i]))
               : __uint_as_float((uint32_t)h[i] << 16);
}

// Workspace: an f32 copy of a 16-bit input whose partner has another
// dtype (two of one 16-bit dtype go to cuBLAS as they are).
bool needs_widen(const sl__kernel_ctx *k, int i) {
  return half(k->in_meta[i].dtype) &&
         k->in_meta[1 - i].dtype != k->in_meta[i].dtype;
}

size_t mm_ws(const sl__kernel_ctx *k) {
  size_t b = 0;
  for (int i = 0; i < 2; i++)
    if (needs_widen(k, i))
      b +=
          ((size_t)sl_shape_numel(&k->in_meta[i].shape) * sizeof(float) + 255) &
          ~(size_t)255;
  return b;
}

// ---- the product
// ---------------------------------------------------------------

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

// C = A B for `batch` row-major products (strides in elements), through
// cuBLAS in column-major terms: C^T = B^T A^T.
sl_status gemm(const sl__kernel_ctx *k, bool ta, bool tb, const mm_dims &d,
               sl__stream *s, const char *what) {
  float *c = (float *)k->out[0];
  cudaStream_t cs = stream_of(s);
  if (d.batch == 0 || d.m == 0 || d.n == 0) return SL_OK;
  if (d.k == 0)
    return cuda_check(
        cudaMemsetAsync(c, 0, (size_t)(d.batch * d.m * d.n) * sizeof(float),
                        cs),
        "matmul: cudaMemsetAsync");
  if (!fits_int(d.m) || !fits_int(d.n) || !fits_int(d.k))
    return sl__fail(SL_EUNSUPPORTED,
                    "cuda %s: m %lld, n %lld, k %lld: cuBLAS takes extents "
                    "below 2^31",
                    what, (long long)d.m, (long long)d.n, (long long)d.k);
  // f32 views: the shards, or widened 16-bit ones in the workspace.
  const void *ab[2] = {k->in[0], k->in[1]};
  bool both_half =
      half(k->in_meta[0].dtype) && k->in_meta[0].dtype == k->in_meta[1].dtype;
  cudaDataType_t ht =
      k->in_meta[0].dtype == SL_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
  char *ws = (char *)k->workspace;
  if (mm_ws(k) && (!ws || k->workspace_bytes < mm_ws(k)))
    return sl__fail(SL_EINVAL,
                    "cuda %s: no workspace for a 16-bit input (run "
                    "it with sl__op_run_cuda)",
                    what);
  for (int i = 0; i < 2; i++) {
    if (!needs_widen(k, i)) continue;
    int64_t n = sl_shape_numel(&k->in_meta[i].shape);
    widen_k<<<blocks_for(n), kThreads, 0, cs>>>(
        (float *)ws, (const uint16_t *)k->in[i],
        k->in_meta[i].dtype == SL_DTYPE_F16, n);
    SL_CHECK(launched(what));
    ab[i] = ws;
    ws += ((size_t)n * sizeof(float) + 255) & ~(size_t)255;
  }
  cublasHandle_t h;
  SL_CHECK(handle_for(cs, &h));
  int m = (int)d.m, n = (int)d.n, kk = (int)d.k;
  int lda = ta ? m : kk, ldb = tb ? kk : n;
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one = 1.0f, zero = 0.0f;
  long long sa = (long long)(d.m * d.k), sb = (long long)(d.k * d.n),
            sc = (long long)(d.m * d.n);
  // cuBLAS counts batches in an int: more go in several calls.
  for (int64_t b0 = 0; b0 < d.batch; b0 += INT32_MAX) {
    int nb = (int)(d.batch - b0 < INT32_MAX ? d.batch - b0 : INT32_MAX);
    size_t es = both_half ? 2 : 4;
    const char *a = (const char *)ab[0] + (size_t)(b0 * sa) * es;
    const char *b = (const char *)ab[1] + (size_t)(b0 * sb) * es;
    float *cc = c + b0 * sc;
    cublasStatus_t st;
    if (both_half)
      st = nb == 1 ? cublasGemmEx(h, opb, opa, n, m, kk, &one, b, ht, ldb, a,
                                  ht, lda, &zero, cc, CUDA_R_32F, n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                   : cublasGemmStridedBatchedEx(
                         h, opb, opa, n, m, kk, &one, b, ht, ldb, sb, a, ht,
                         lda, sa, &zero, cc, CUDA_R_32F, n, sc, nb,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
      st = nb == 1 ? cublasSgemm(h, opb, opa, n, m, kk, &one, (const float *)b,
                                 ldb, (const float *)a, lda, &zero, cc, n)
                   : cublasSgemmStridedBatched(
                         h, opb, opa, n, m, kk, &one, (const float *)b, ldb, sb,
                         (const float *)a, lda, sa, &zero, cc, n, sc, nb);
    SL_CHECK(cublas_check(st, what));
  }
  return SL_OK;
}

sl_status matmul_run(const sl__kernel_ctx *k, sl__stream *s) {
  bool ta = sl__attr_int(k->attrs, "trans_a", 0),
       tb = sl__attr_int(k->attrs, "trans_b", 0);
  mm_dims d;
  d.batch = 1;
  SL_CHECK(sl__matmul_dims(ta, tb, sl__attr_int(k->attrs, "contract", 1),
                           &k->in_meta[0].shape, &k->in_meta[1].shape, &d.m,
                           &d.n, &d.k));
  return gemm(k, ta, tb, d, s, "matmul");
}

sl_status bmm_run(const sl__kernel_ctx *k, sl__stream *s) {
  bool ta = sl__attr_int(k->attrs, "trans_a", 0),
       tb = sl__attr_int(k->attrs, "trans_b", 0);
  mm_dims d;
  SL_CHECK(bmm_dims(ta, tb, &k->in_meta[0].shape, &k->in_meta[1].shape, &d));
  return gemm(k, ta, tb, d, s, "batch_matmul");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_matmul = {matmul_run, mm_ws};
extern "C" const sl__cuda_kernel sl__cuda_batch_matmul = {bmm_run, mm_ws};
