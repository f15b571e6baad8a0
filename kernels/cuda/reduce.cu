// CUDA kernels of the reductions (cpu/reduce.c): reduce_sum, reduce_mean,
// reduce_max over a set of axes, and reduce_sum_like.
//
// The local input is seen as [kept..., reduced...] through strides: the
// output element o (the kept axes in order, as the CPU lays them out) sums
// or maxes the input elements at kept_offset(o) + reduced_offset(q) for q
// in [0, R). Two shapes of work:
//   - the innermost input axis is reduced: a warp (R < 2048) or a block of
//     256 threads per output element walks q, so neighbouring threads read
//     neighbouring elements, and the threads combine by shuffles;
//   - otherwise neighbouring threads take neighbouring output elements (a
//     column sum reads whole rows at once), 8 threads share each output's
//     q range, and for few outputs over many rows the q range is also cut
//     into chunks whose partial results go to the workspace and are
//     combined in chunk order by a second kernel.
// Sums of floats therefore run in another order than the CPU's lanes
// (within a tolerance of the CPU result; integer sums wrap and are exact,
// maxima are exact). As on the CPU: an empty reduction gives 0, or -inf /
// the lowest integer for max, and reduce_mean divides by the GLOBAL count
// of reduced elements (in_global), the mean of nothing being NaN.
#include "cuda_util.cuh"

namespace {

using namespace slc;

// ---- plans --------------------------------------------------------------

struct red_plan {
  int nk, nr; // kept and reduced dims (extents > 1)
  int64_t kext[SL_MAX_DIMS], kstr[SL_MAX_DIMS];
  int64_t rext[SL_MAX_DIMS], rstr[SL_MAX_DIMS];
  int64_t O, R; // outputs, reduced elements per output
  bool inner;   // the innermost input axis is reduced
  int chunks;   // q-range chunks (outer shape; 1 = none)
};

constexpr int64_t kWarpMaxR = 2048, kChunkQ = 2048, kMaxChunks = 64;

// Adjacent dims whose strides chain (stride[d] == stride[d+1] * ext[d+1])
// become one.
void merge_dims(int *n, int64_t *ext, int64_t *str) {
  int m = 0;
  for (int d = 0; d < *n; d++) {
    if (m > 0 && str[m - 1] == str[d] * ext[d]) {
      ext[m - 1] *= ext[d];
      str[m - 1] = str[d];
      continue;
    }
    ext[m] = ext[d];
    str[m] = str[d];
    m++;
  }
  *n = m;
}

sl_status plan_make(const sl__kernel_ctx *k, unsigned mask, red_plan *p) {
  memset(p, 0, sizeof *p);
  const sl_shape *x = &k->in_meta[0].shape;
  int64_t xs[SL_MAX_DIMS];
  sl_shape_strides(x, xs);
  p->O = 1;
  p->R = 1;
  for (int i = 0; i < x->ndim; i++) {
    if (mask & (1u << i)) {
      p->R *= x->dims[i];
      if (x->dims[i] != 1) {
        p->rext[p->nr] = x->dims[i];
        p->rstr[p->nr++] = xs[i];
      }
    } else {
      p->O *= x->dims[i];
      if (x->dims[i] != 1) {
        p->kext[p->nk] = x->dims[i];
        p->kstr[p->nk++] = xs[i];
      }
    }
  }
  if (p->O != sl_shape_numel(&k->out_meta[0].shape))
    return sl__fail(SL_EINVAL, "local output %s does not fit input %s",
                    sl__shape_text(&k->out_meta[0].shape).s,
                    sl__shape_text(x).s);
  merge_dims(&p->nk, p->kext, p->kstr);
  merge_dims(&p->nr, p->rext, p->rstr);
  p->inner = p->nr > 0 && p->rstr[p->nr - 1] == 1;
  p->chunks = 1;
  if (!p->inner && p->O < 16384 && p->R >= 2 * kChunkQ) {
    int64_t c = p->R / kChunkQ;
    p->chunks = (int)(c < kMaxChunks ? c : kMaxChunks);
  }
  return SL_OK;
}

__device__ inline int64_t offset_of(int n, const int64_t *ext,
                                    const int64_t *str, int64_t idx) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    int64_t e = ext[d], c = idx % e;
    idx /= e;
    off += c * str[d];
  }
  return off;
}

// ---- what is reduced ----------------------------------------------------

// Accumulator types: floats in themselves (as the CPU), integers in the
// unsigned type, whose wrap-around is defined.
template <typename T> struct acc_of { using type = T; };
template <> struct acc_of<int32_t> { using type = uint32_t; };
template <> struct acc_of<int64_t> { using type = uint64_t; };

template <typename T, bool MAX> struct red {
  using A = typename acc_of<T>::type;
  __device__ static A identity() { return (A)0; }
  __device__ static A op(A a, A b) { return a + b; }
  __device__ static A load(T x) { return (A)x; }
};
// NaN wins, as in numpy's max (the CPU's MAX2).
template <typename T> __device__ inline T max2(T a, T b) {
  return b > a || b != b ? b : a;
}
template <typename T> struct red<T, true> {
  using A = T;
  __device__ static A identity();
  __device__ static A op(A a, A b) { return max2(a, b); }
  __device__ static A load(T x) { return x; }
};
template <> __device__ inline float red<float, true>::identity() {
  return -INFINITY;
}
template <> __device__ inline double red<double, true>::identity() {
  return -INFINITY;
}
template <> __device__ inline int32_t red<int32_t, true>::identity() {
  return INT32_MIN;
}
template <> __device__ inline int64_t red<int64_t, true>::identity() {
  return INT64_MIN;
}

template <typename T, bool MAX> struct red_op {
  __device__ typename red<T, MAX>::A
  operator()(typename red<T, MAX>::A a, typename red<T, MAX>::A b) const {
    return red<T, MAX>::op(a, b);
  }
};

// The mean's division (reduce_cpu): f32 multiplies by the rounded inverse
// of the count (divides by 0 for no elements), f64 divides.
struct mean_info {
  bool on;
  double count;
  float inv;
  float zero; // 0: x / 0 (NaN for an empty sum), spelled so nvcc allows it
};
template <typename T> __device__ inline T finish(T v, const mean_info &m) {
  return v;
}
template <> __device__ inline float finish<float>(float v, const mean_info &m) {
  if (!m.on) return v;
  return m.count == 0 ? v / m.zero : v * m.inv;
}
template <>
__device__ inline double finish<double>(double v, const mean_info &m) {
  return m.on ? v / m.count : v;
}

// ---- kernels ------------------------------------------------------------

// A warp per output (TPR 32, blockDim (32, 8)) or a block per output (TPR
// 256, blockDim (256, 1)); the innermost reduced dim has stride 1.
template <typename T, bool MAX, int TPR>
__global__ void __launch_bounds__(256)
    reduce_inner_k(T *out, const T *x, red_plan p, mean_info m) {
  using R = red<T, MAX>;
  using A = typename R::A;
  __shared__ A smem[TPR >= 64 ? TPR / 32 : 1];
  const int per_block = TPR == 32 ? (int)blockDim.y : 1;
  const int lane = threadIdx.x;
  for (int64_t o = (int64_t)blockIdx.x * per_block + threadIdx.y; o < p.O;
       o += (int64_t)gridDim.x * per_block) {
    const T *xo = x + offset_of(p.nk, p.kext, p.kstr, o);
    A acc = R::identity();
    for (int64_t q = lane; q < p.R; q += TPR)
      acc = R::op(acc, R::load(xo[offset_of(p.nr, p.rext, p.rstr, q)]));
    if constexpr (TPR == 32)
      acc = warp_reduce(acc, red_op<T, MAX>{});
    else
      acc = block_reduce<TPR>(acc, red_op<T, MAX>{}, smem);
    if (lane == 0) out[o] = finish((T)acc, m);
  }
}

// blockDim (32, 8): threadIdx.x picks the output, threadIdx.y every 8th q
// of the block's chunk (blockIdx.y). One chunk: the results; several: the
// partials, ws[chunk * O + o].
template <typename T, bool MAX>
__global__ void reduce_outer_k(T *out, typename red<T, MAX>::A *ws, const T *x,
                               red_plan p, mean_info m) {
  using R = red<T, MAX>;
  using A = typename R::A;
  __shared__ A part[8][33];
  int64_t qper = (p.R + gridDim.y - 1) / gridDim.y;
  int64_t q0 = (int64_t)blockIdx.y * qper;
  int64_t q1 = q0 + qper < p.R ? q0 + qper : p.R;
  for (int64_t o0 = (int64_t)blockIdx.x * 32; o0 < p.O;
       o0 += (int64_t)gridDim.x * 32) {
    int64_t o = o0 + threadIdx.x;
    A acc = R::identity();
    if (o < p.O) {
      const T *xo = x + offset_of(p.nk, p.kext, p.kstr, o);
      for (int64_t q = q0 + threadIdx.y; q < q1; q += 8)
        acc = R::op(acc, R::load(xo[offset_of(p.nr, p.rext, p.rstr, q)]));
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < p.O) {
      A r = part[0][threadIdx.x];
      for (int y = 1; y < 8; y++)
        r = R::op(r, part[y][threadIdx.x]);
      if (gridDim.y == 1)
        out[o] = finish((T)r, m);
      else
        ws[(int64_t)blockIdx.y * p.O + o] = r;
    }
    __syncthreads();
  }
}

// Combines the chunks' partials in chunk order.
template <typename T, bool MAX>
__global__ void reduce_chunks_k(T *out, const typename red<T, MAX>::A *ws,
                                int64_t O, int chunks, mean_info m) {
  using R = red<T, MAX>;
  for (int64_t o = thread_index(); o < O; o += thread_count()) {
    typename R::A r = ws[o];
    for (int c = 1; c < chunks; c++)
      r = R::op(r, ws[(int64_t)c * O + o]);
    out[o] = finish((T)r, m);
  }
}

template <typename T, bool MAX>
sl_status reduce_launch(const sl__kernel_ctx *k, const red_plan &p,
                        const mean_info &m, sl__stream *s) {
  T *out = (T *)k->out[0];
  const T *x = (const T *)k->in[0];
  cudaStream_t cs = stream_of(s);
  using A = typename red<T, MAX>::A;
  if (p.inner && p.R < kWarpMaxR) {
    reduce_inner_k<T, MAX, 32>
        <<<blocks_for(p.O, 8), dim3(32, 8), 0, cs>>>(out, x, p, m);
  } else if (p.inner) {
    reduce_inner_k<T, MAX, 256>
        <<<blocks_for(p.O, 1), 256, 0, cs>>>(out, x, p, m);
  } else {
    A *ws = (A *)k->workspace;
    if (p.chunks > 1 &&
        (!ws || k->workspace_bytes < (size_t)p.chunks * p.O * sizeof(A)))
      return sl__fail(SL_EINVAL, "reduction: no workspace (run it with "
                                 "sl__op_run_cuda)");
    dim3 grid(blocks_for(p.O, 32), (unsigned)p.chunks);
    reduce_outer_k<T, MAX><<<grid, dim3(32, 8), 0, cs>>>(out, ws, x, p, m);
    if (p.chunks > 1) {
      SL_CHECK(launched("reduction"));
      reduce_chunks_k<T, MAX>
          <<<blocks_for(p.O), kThreads, 0, cs>>>(out, ws, p.O, p.chunks, m);
    }
  }
  return launched("reduction");
}

// ---- the ops ------------------------------------------------------------

typedef enum red_kind { RED_SUM, RED_MEAN, RED_MAX, RED_LIKE } red_kind;

// reduce.c's axes_mask: the `axes` attribute (empty or absent: all).
sl_status axes_mask(const sl__attrs *at, int ndim, unsigned *mask) {
  int n;
  const int64_t *v = sl__attr_ints(at, "axes", &n);
  *mask = 0;
  if (n == 0) {
    *mask = (1u << ndim) - 1u;
    return SL_OK;
  }
  for (int i = 0; i < n; i++) {
    int a;
    SL_CHECK(sl__axis_norm("axis", v[i], ndim, &a));
    *mask |= 1u << a;
  }
  return SL_OK;
}

// reduce.c's like_mask: the leading axes `to` lacks and those where it has
// extent 1 and x not (on the global shapes).
unsigned like_mask(const sl_shape *x, const sl_shape *to) {
  unsigned m = 0;
  int off = x->ndim - to->ndim;
  for (int i = 0; i < x->ndim; i++)
    if (i < off || (to->dims[i - off] == 1 && x->dims[i] != 1)) m |= 1u << i;
  return m;
}

sl_status kind_mask(const sl__kernel_ctx *k, red_kind kind, unsigned *mask) {
  if (kind == RED_LIKE) {
    *mask = like_mask(&k->in_global[0], &k->out_global[0]);
    return SL_OK;
  }
  return axes_mask(k->attrs, k->in_meta[0].shape.ndim, mask);
}

size_t acc_size(sl_dtype dt) { return sl_dtype_size(dt); }

size_t reduce_workspace(const sl__kernel_ctx *k, red_kind kind) {
  unsigned mask;
  red_plan p;
  if (kind_mask(k, kind, &mask) != SL_OK || plan_make(k, mask, &p) != SL_OK)
    return 0;
  if (p.O == 0 || p.chunks <= 1) return 0;
  return (size_t)p.chunks * (size_t)p.O * acc_size(k->in_meta[0].dtype);
}

sl_status reduce_run(const sl__kernel_ctx *k, red_kind kind, sl__stream *s) {
  unsigned mask;
  SL_CHECK(kind_mask(k, kind, &mask));
  red_plan p;
  SL_CHECK(plan_make(k, mask, &p));
  if (p.O == 0) return SL_OK;
  mean_info m = {false, 0, 0, 0};
  if (kind == RED_MEAN) {
    // The global count: a split axis's ranks each hold part of the sum.
    double count = 1;
    for (int i = 0; i < k->in_global[0].ndim; i++)
      if (mask & (1u << i)) count *= (double)k->in_global[0].dims[i];
    m.on = true;
    m.count = count;
    m.inv = (float)(1.0 / count);
  }
  bool is_max = kind == RED_MAX;
  switch (k->in_meta[0].dtype) {
  case SL_DTYPE_F32:
    return is_max ? reduce_launch<float, true>(k, p, m, s)
                  : reduce_launch<float, false>(k, p, m, s);
  case SL_DTYPE_F64:
    return is_max ? reduce_launch<double, true>(k, p, m, s)
                  : reduce_launch<double, false>(k, p, m, s);
  case SL_DTYPE_I32:
    if (kind == RED_MEAN) break;
    return is_max ? reduce_launch<int32_t, true>(k, p, m, s)
                  : reduce_launch<int32_t, false>(k, p, m, s);
  case SL_DTYPE_I64:
    if (kind == RED_MEAN) break;
    return is_max ? reduce_launch<int64_t, true>(k, p, m, s)
                  : reduce_launch<int64_t, false>(k, p, m, s);
  default: break;
  }
  return sl__check_dtype("input 0", k->in_meta[0].dtype,
                         kind == RED_MEAN ? SL__DT_FLOAT : SL__DT_NUM);
}

#define REDUCE(NAME, KIND)                                                     \
  sl_status NAME##_run(const sl__kernel_ctx *k, sl__stream *s) {               \
    return reduce_run(k, KIND, s);                                             \
  }                                                                            \
  size_t NAME##_ws(const sl__kernel_ctx *k) {                                  \
    return reduce_workspace(k, KIND);                                          \
  }

REDUCE(reduce_sum, RED_SUM)
REDUCE(reduce_mean, RED_MEAN)
REDUCE(reduce_max, RED_MAX)
REDUCE(reduce_sum_like, RED_LIKE)

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_reduce_sum = {reduce_sum_run,
                                                        reduce_sum_ws};
extern "C" const sl__cuda_kernel sl__cuda_reduce_mean = {reduce_mean_run,
                                                         reduce_mean_ws};
extern "C" const sl__cuda_kernel sl__cuda_reduce_max = {reduce_max_run,
                                                        reduce_max_ws};
extern "C" const sl__cuda_kernel sl__cuda_reduce_sum_like = {
    reduce_sum_like_run, reduce_sum_like_ws};
