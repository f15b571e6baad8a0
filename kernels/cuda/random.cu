// CUDA kernels of the pointwise family's sources and random ops
// (cpu/random.c): fill, random_uniform, random_normal, random_int, dropout
// and dropout_grad.
//
// The values are the CPU's: element e of the output gets SplitMix64 output
// number (global flat index of e) from the key sl__rand_key(seed, step')
// (computed on the host, as there), the global index coming from
// out_slice / out_global, so a value depends only on the seed, the step and
// its position in the global tensor, on either device. The arithmetic on
// the bits is the CPU's (no FMA contraction, cuda_util.cuh): uniform,
// integer, dropout and normal values are bit-identical (random_normal's
// Box-Muller uses kernel_util.h's own log and cos, not libm's or CUDA's).
#include <math.h>

#include "cuda_util.cuh"

namespace {

using namespace slc;

double attr_num(const sl__attrs *at, const char *name, double dflt) {
  double v = dflt;
  sl__attr_number(at, name, &v);
  return v;
}

uint64_t stream_key(const sl__kernel_ctx *k, bool always_step) {
  bool per_step = always_step || sl__attr_int(k->attrs, "per_step", 0) != 0;
  return sl__rand_key(sl__attr_int(k->attrs, "seed", 0),
                      per_step ? k->step : 0);
}

// The output's element count and its global positions; false when empty.
bool out_map(const sl__kernel_ctx *k, int64_t *n, global_map *m) {
  *n = sl_shape_numel(&k->out_meta[0].shape);
  if (*n == 0) return false;
  *m = global_map_make(&k->out_slice[0], &k->out_global[0]);
  return true;
}

// A shard's slice must describe its shape (the global index comes from it).
sl_status check_slice(const sl__kernel_ctx *k, const char *what) {
  const sl_slice *sl = &k->out_slice[0];
  const sl_shape *sh = &k->out_meta[0].shape;
  bool ok = sl->ndim == sh->ndim && k->out_global[0].ndim == sh->ndim;
  for (int d = 0; ok && d < sh->ndim; d++)
    ok = sl->extent[d] == sh->dims[d];
  if (ok) return SL_OK;
  return sl__fail(SL_EINVAL, "%s: output slice does not match the shard %s",
                  what, sl__shape_text(sh).s);
}

// ---- fill ---------------------------------------------------------------

template <typename E> __global__ void fill_k(E *o, int64_t n, E v) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    o[i] = v;
}

sl_status fill_run(const sl__kernel_ctx *k, sl__stream *s) {
  sl_dtype dt = k->out_meta[0].dtype;
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n == 0) return SL_OK;
  // Converted once on the host with the library's rules, then the bytes
  // repeated (cpu/random.c's fill_cpu).
  unsigned char one[8] = {0};
  sl_store_element(dt, one, 0, attr_num(k->attrs, "value", 0));
  cudaStream_t cs = stream_of(s);
  switch (sl_dtype_size(dt)) {
  case 1:
    return cuda_check(cudaMemsetAsync(k->out[0], one[0], (size_t)n, cs),
                      "fill: cudaMemsetAsync");
  case 2: {
    uint16_t v;
    memcpy(&v, one, 2);
    fill_k<<<blocks_for(n), kThreads, 0, cs>>>((uint16_t *)k->out[0], n, v);
    break;
  }
  case 4: {
    uint32_t v;
    memcpy(&v, one, 4);
    fill_k<<<blocks_for(n), kThreads, 0, cs>>>((uint32_t *)k->out[0], n, v);
    break;
  }
  default: {
    uint64_t v;
    memcpy(&v, one, 8);
    fill_k<<<blocks_for(n), kThreads, 0, cs>>>((uint64_t *)k->out[0], n, v);
    break;
  }
  }
  return launched("fill");
}

// ---- random_uniform -----------------------------------------------------

// [low, high): a rounded value that lands on high steps below it.
__global__ void uniform_f32_k(float *o, int64_t n, global_map m, uint64_t key,
                              double lo, double w, float top, float below_top,
                              bool nonempty) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    uint64_t g = (uint64_t)global_index(m, i);
    double u = sl__rand_unit_f64(sl__rand_bits(key, g));
    float v = (float)(lo + w * u);
    o[i] = v >= top && nonempty ? below_top : v;
  }
}

__global__ void uniform_f64_k(double *o, int64_t n, global_map m, uint64_t key,
                              double lo, double w, double hi, double below_hi,
                              bool nonempty) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    uint64_t g = (uint64_t)global_index(m, i);
    double u = sl__rand_unit_f64(sl__rand_bits(key, g));
    double v = lo + w * u;
    o[i] = v >= hi && nonempty ? below_hi : v;
  }
}

sl_status random_uniform_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n;
  global_map m;
  if (!out_map(k, &n, &m)) return SL_OK;
  SL_CHECK(check_slice(k, "random_uniform"));
  uint64_t key = stream_key(k, false);
  double lo = attr_num(k->attrs, "low", 0), hi = attr_num(k->attrs, "high", 1);
  double w = hi - lo;
  cudaStream_t cs = stream_of(s);
  if (k->out_meta[0].dtype == SL_DTYPE_F32) {
    float top = (float)hi;
    uniform_f32_k<<<blocks_for(n), kThreads, 0, cs>>>(
        (float *)k->out[0], n, m, key, lo, w, top, nextafterf(top, -INFINITY),
        lo < hi);
  } else if (k->out_meta[0].dtype == SL_DTYPE_F64) {
    uniform_f64_k<<<blocks_for(n), kThreads, 0, cs>>>(
        (double *)k->out[0], n, m, key, lo, w, hi, nextafter(hi, -INFINITY),
        lo < hi);
  } else {
    return sl__check_dtype("output", k->out_meta[0].dtype, SL__DT_FLOAT);
  }
  return launched("random_uniform");
}

// ---- random_normal ------------------------------------------------------

template <typename T>
__global__ void normal_k(T *o, int64_t n, global_map m, uint64_t key,
                         double mean, double sd) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    uint64_t g = (uint64_t)global_index(m, i);
    double v = mean + sd * sl__normal_at(key, g);
    o[i] = (T)v;
  }
}

sl_status random_normal_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n;
  global_map m;
  if (!out_map(k, &n, &m)) return SL_OK;
  SL_CHECK(check_slice(k, "random_normal"));
  uint64_t key = stream_key(k, false);
  double mean = attr_num(k->attrs, "mean", 0),
         sd = attr_num(k->attrs, "std", 1);
  cudaStream_t cs = stream_of(s);
  if (k->out_meta[0].dtype == SL_DTYPE_F32)
    normal_k<float><<<blocks_for(n), kThreads, 0, cs>>>((float *)k->out[0], n,
                                                        m, key, mean, sd);
  else if (k->out_meta[0].dtype == SL_DTYPE_F64)
    normal_k<double><<<blocks_for(n), kThreads, 0, cs>>>((double *)k->out[0], n,
                                                         m, key, mean, sd);
  else
    return sl__check_dtype("output", k->out_meta[0].dtype, SL__DT_FLOAT);
  return launched("random_normal");
}

// ---- random_int ---------------------------------------------------------

// Lemire's multiply-shift: the high 64 bits of bits * range.
template <typename T>
__global__ void int_k(T *o, int64_t n, global_map m, uint64_t key, int64_t lo,
                      uint64_t range) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    uint64_t b = sl__rand_bits(key, (uint64_t)global_index(m, i));
    uint64_t off = __umul64hi(b, range);
    o[i] = (T)(int64_t)((uint64_t)lo + off);
  }
}

sl_status random_int_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n;
  global_map m;
  if (!out_map(k, &n, &m)) return SL_OK;
  SL_CHECK(check_slice(k, "random_int"));
  uint64_t key = stream_key(k, false);
  int64_t lo = sl__attr_int(k->attrs, "low", 0);
  uint64_t range = (uint64_t)sl__attr_int(k->attrs, "high", 0) - (uint64_t)lo;
  cudaStream_t cs = stream_of(s);
  if (k->out_meta[0].dtype == SL_DTYPE_I32)
    int_k<int32_t><<<blocks_for(n), kThreads, 0, cs>>>((int32_t *)k->out[0], n,
                                                       m, key, lo, range);
  else if (k->out_meta[0].dtype == SL_DTYPE_I64)
    int_k<int64_t><<<blocks_for(n), kThreads, 0, cs>>>((int64_t *)k->out[0], n,
                                                       m, key, lo, range);
  else
    return sl__check_dtype("output", k->out_meta[0].dtype, SL__DT_INT);
  return launched("random_int");
}

// ---- dropout, dropout_grad ----------------------------------------------

// Keeps an element when the top 53 bits of its draw are >= t = ceil(p 2^53)
// (u >= p), scaling kept ones by 1 / (1 - p): random.c's DROP_ROW.
template <typename T>
__global__ void drop_k(T *o, const T *x, int64_t n, global_map m, uint64_t key,
                       uint64_t t, T scale) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    uint64_t b = sl__rand_bits(key, (uint64_t)global_index(m, i));
    o[i] = (b >> 11) >= t ? x[i] * scale : (T)0;
  }
}

sl_status dropout_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n;
  global_map m;
  if (!out_map(k, &n, &m)) return SL_OK;
  SL_CHECK(check_slice(k, "dropout"));
  uint64_t key = stream_key(k, true);
  double p = attr_num(k->attrs, "p", 0);
  uint64_t t = (uint64_t)ceil(p * 0x1.0p53);
  double scale = 1.0 / (1.0 - p);
  cudaStream_t cs = stream_of(s);
  if (k->out_meta[0].dtype == SL_DTYPE_F32)
    drop_k<float><<<blocks_for(n), kThreads, 0, cs>>>(
        (float *)k->out[0], (const float *)k->in[0], n, m, key, t,
        (float)scale);
  else if (k->out_meta[0].dtype == SL_DTYPE_F64)
    drop_k<double><<<blocks_for(n), kThreads, 0, cs>>>(
        (double *)k->out[0], (const double *)k->in[0], n, m, key, t, scale);
  else
    return sl__check_dtype("input 0", k->out_meta[0].dtype, SL__DT_FLOAT);
  return launched("dropout");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_fill = {fill_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_random_uniform = {random_uniform_run,
                                                            NULL};
extern "C" const sl__cuda_kernel sl__cuda_random_normal = {random_normal_run,
                                                           NULL};
extern "C" const sl__cuda_kernel sl__cuda_random_int = {random_int_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_dropout = {dropout_run, NULL};
// dropout's gradient applies the same mask and scale to dy.
extern "C" const sl__cuda_kernel sl__cuda_dropout_grad = {dropout_run, NULL};
