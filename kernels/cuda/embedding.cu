// CUDA kernels of the embedding lookup and its gradient (cpu/embedding.c).
//
// embedding(table [V, D], ids [...]) -> out [..., D]: out[p, :] is table
//   row ids[p] when this rank holds it (rows [r0, r0 + n) of a table split
//   by rows, from in_slice), zeros otherwise, so the partial sums of a
//   split table add up to the lookup. One thread per element (16 bytes at
//   a time where D and the pointers allow).
// embedding_grad(dy [..., D], ids [...]; vocab) -> dtable [V, D]:
//   dtable[v, :] = the sum of dy[p, :] over the positions p with ids[p] =
//   v, for the rows v this rank's output slice holds. The positions are
//   sorted by their row with a stable radix sort (CUB), so each output
//   element adds its dy values in position order, starting from 0: the
//   CPU's order, hence the CPU's bits, and no atomics (deterministic).
//
// The CPU kernels check every id first and fail with SL_EINVAL naming the
// first one out of [0, V). That cannot come back as a status here without
// synchronising the stream: an out-of-range id makes its output row NaN
// (the lookup), or contributes nothing (the gradient; the forward lookup
// already turned the loss NaN).
#include <cub/device/device_radix_sort.cuh>

#include "cuda_util.cuh"

namespace {

using namespace slc;

__device__ inline int64_t id_at(const void *ids, bool i64, int64_t p) {
  return i64 ? ((const int64_t *)ids)[p] : (int64_t)((const int32_t *)ids)[p];
}

// ---- embedding ------------------------------------------------------------

// W floats at a time (W divides d and the pointers are 16-byte aligned
// when W is 4).
template <int W>
__global__ void lookup_k(float *out, const float *table, const void *ids,
                         bool i64, int64_t n, int64_t d, int64_t vocab,
                         int64_t row0, int64_t nrows) {
  struct alignas(4 * W) vec {
    float v[W];
  };
  int64_t dw = d / W, total = n * dw;
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    int64_t p = i / dw, jw = i - p * dw;
    int64_t id = id_at(ids, i64, p), v = id - row0;
    vec r;
    if (id < 0 || id >= vocab) {
#pragma unroll
      for (int l = 0; l < W; l++)
        r.v[l] = __int_as_float(0x7fc00000);
    } else if (v >= 0 && v < nrows) {
      r = ((const vec *)(table + v * d))[jw];
    } else {
#pragma unroll
      for (int l = 0; l < W; l++)
        r.v[l] = 0.0f;
    }
    ((vec *)(out + p * d))[jw] = r;
  }
}

sl_status emb_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *ts = &k->in_meta[0].shape;
  if (k->in_global[0].ndim != 2 || k->in_slice[0].ndim != 2 || ts->ndim != 2)
    return sl__fail(SL_EINVAL, "embedding: the table's global shape and slice "
                               "are missing");
  sl_dtype dt = k->in_meta[1].dtype;
  if (dt != SL_DTYPE_I32 && dt != SL_DTYPE_I64)
    return sl__fail(SL_EINVAL, "ids: dtype %s, want i32 or i64",
                    sl_dtype_name(dt));
  int64_t vocab = k->in_global[0].dims[0];
  int64_t row0 = k->in_slice[0].start[0], nrows = ts->dims[0], d = ts->dims[1];
  int64_t n = sl_shape_numel(&k->in_meta[1].shape);
  if (n == 0 || d == 0) return SL_OK;
  float *out = (float *)k->out[0];
  const float *table = (const float *)k->in[0];
  bool i64 = dt == SL_DTYPE_I64;
  cudaStream_t cs = stream_of(s);
  if (d % 4 == 0 && aligned(16, out, table))
    lookup_k<4><<<blocks_for(n * (d / 4)), kThreads, 0, cs>>>(
        out, table, k->in[1], i64, n, d, vocab, row0, nrows);
  else
    lookup_k<1><<<blocks_for(n * d), kThreads, 0, cs>>>(
        out, table, k->in[1], i64, n, d, vocab, row0, nrows);
  return launched("embedding");
}

// ---- embedding_grad ---------------------------------------------------------

// The workspace: sort keys and positions, in and out, then CUB's scratch.
struct grad_ws {
  size_t keys_in, keys_out, vals_in, vals_out, temp, temp_bytes, total;
};

size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

// Bits of a key: rows are 0 .. nrows - 1 and nrows marks "not this rank's".
int key_bits(int64_t nrows) {
  int b = 1;
  while (b < 31 && ((int64_t)1 << b) <= nrows)
    b++;
  return b;
}

sl_status grad_layout(int64_t n, int64_t nrows, grad_ws *w) {
  memset(w, 0, sizeof *w);
  if (n > INT32_MAX || nrows >= INT32_MAX)
    return sl__fail(SL_EUNSUPPORTED,
                    "embedding_grad: %lld ids or %lld rows: at most 2^31 - 1 "
                    "on CUDA",
                    (long long)n, (long long)nrows);
  size_t temp = 0;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(
      (void *)NULL, temp, (const uint32_t *)NULL, (uint32_t *)NULL,
      (const int32_t *)NULL, (int32_t *)NULL, (int)n, 0, key_bits(nrows));
  if (e != cudaSuccess) return cuda_check(e, "embedding_grad: cub sort size");
  size_t a = round256((size_t)n * sizeof(int32_t));
  w->keys_in = 0;
  w->keys_out = a;
  w->vals_in = 2 * a;
  w->vals_out = 3 * a;
  w->temp = 4 * a;
  w->temp_bytes = temp;
  w->total = 4 * a + round256(temp);
  return SL_OK;
}

// Key of position p: its row in this rank's slice, or nrows.
__global__ void keys_k(uint32_t *keys, int32_t *vals, const void *ids, bool i64,
                       int64_t n, int64_t vocab, int64_t row0, int64_t nrows) {
  for (int64_t p = thread_index(); p < n; p += thread_count()) {
    int64_t id = id_at(ids, i64, p), v = id - row0;
    bool mine = id >= 0 && id < vocab && v >= 0 && v < nrows;
    keys[p] = (uint32_t)(mine ? v : nrows);
    vals[p] = (int32_t)p;
  }
}

// First index of sorted keys[0, n) that is >= v.
__device__ inline int64_t lower_bound(const uint32_t *keys, int64_t n,
                                      int64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if ((int64_t)keys[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// A block per output row (grid-stride), its threads over the columns; each
// element adds its row's dy rows in position order.
__global__ void scatter_k(float *out, const float *dy, const uint32_t *keys,
                          const int32_t *pos, int64_t n, int64_t nrows,
                          int64_t d) {
  for (int64_t v = blockIdx.x; v < nrows; v += gridDim.x) {
    int64_t a = lower_bound(keys, n, v), b = lower_bound(keys, n, v + 1);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      float acc = 0.0f;
      for (int64_t t = a; t < b; t++)
        acc += dy[(int64_t)pos[t] * d + j];
      out[v * d + j] = acc;
    }
  }
}

bool grad_dims(const sl__kernel_ctx *k, int64_t *n, int64_t *nrows,
               int64_t *d) {
  const sl_shape *os = &k->out_meta[0].shape;
  if (os->ndim != 2) return false;
  *n = sl_shape_numel(&k->in_meta[1].shape);
  *nrows = os->dims[0];
  *d = os->dims[1];
  return true;
}

size_t embg_ws(const sl__kernel_ctx *k) {
  int64_t n, nrows, d;
  grad_ws w;
  if (!grad_dims(k, &n, &nrows, &d) || n == 0 || nrows == 0 || d == 0 ||
      grad_layout(n, nrows, &w) != SL_OK)
    return 0;
  return w.total;
}

sl_status embg_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n, nrows, d;
  if (!grad_dims(k, &n, &nrows, &d) || k->out_global[0].ndim != 2 ||
      k->out_slice[0].ndim != 2)
    return sl__fail(SL_EINVAL, "embedding_grad: the table's global shape and "
                               "slice are missing");
  sl_dtype dt = k->in_meta[1].dtype;
  if (dt != SL_DTYPE_I32 && dt != SL_DTYPE_I64)
    return sl__fail(SL_EINVAL, "ids: dtype %s, want i32 or i64",
                    sl_dtype_name(dt));
  if (nrows == 0 || d == 0) return SL_OK;
  float *out = (float *)k->out[0];
  cudaStream_t cs = stream_of(s);
  if (n == 0)
    return cuda_check(
        cudaMemsetAsync(out, 0, (size_t)(nrows * d) * sizeof(float), cs),
        "embedding_grad: cudaMemsetAsync");
  grad_ws w;
  SL_CHECK(grad_layout(n, nrows, &w));
  if (!k->workspace || k->workspace_bytes < w.total)
    return sl__fail(SL_EINVAL, "embedding_grad: no workspace (run it with "
                               "sl__op_run_cuda)");
  char *ws = (char *)k->workspace;
  uint32_t *keys_in = (uint32_t *)(ws + w.keys_in);
  uint32_t *keys_out = (uint32_t *)(ws + w.keys_out);
  int32_t *vals_in = (int32_t *)(ws + w.vals_in);
  int32_t *vals_out = (int32_t *)(ws + w.vals_out);
  keys_k<<<blocks_for(n), kThreads, 0, cs>>>(
      keys_in, vals_in, k->in[1], dt == SL_DTYPE_I64, n,
      k->out_global[0].dims[0], k->out_slice[0].start[0], nrows);
  SL_CHECK(launched("embedding_grad"));
  size_t temp = w.temp_bytes;
  SL_CHECK(cuda_check(cub::DeviceRadixSort::SortPairs(
                          (void *)(ws + w.temp), temp, keys_in, keys_out,
                          vals_in, vals_out, (int)n, 0, key_bits(nrows), cs),
                      "embedding_grad: cub radix sort"));
  int threads = d >= 256 ? 256 : (d >= 128 ? 128 : (d >= 64 ? 64 : 32));
  scatter_k<<<blocks_for(nrows, 1), threads, 0, cs>>>(
      out, (const float *)k->in[0], keys_out, vals_out, n, nrows, d);
  return launched("embedding_grad");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_embedding = {emb_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_embedding_grad = {embg_run, embg_ws};
