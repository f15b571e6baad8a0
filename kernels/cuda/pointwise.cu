// CUDA kernels of the pointwise family's elementwise ops
// (kernels/ops_pointwise.def): identity, the unary activations and scalar
// ops, the broadcasting binary ops and the activation gradients, cast and
// causal_mask. The CPU kernels are cpu/pointwise_unary.c,
// cpu/pointwise_binary.c, cpu/cast.c and cpu/mask.c; every function here
// computes what its CPU twin computes, with the same expression in the same
// order (no FMA contraction, cuda_util.cuh), so f32 results are
// bit-identical: the f32 transcendental functions are the CPU's libm-free
// polynomials, sqrt and division are IEEE in both. Only f64 gelu, tanh,
// sigmoid, exp and log, and f32 log (CUDA's logf, 1 ulp) call CUDA's libm,
// whose last bit may differ from glibc's.
//
// Grid-stride loops throughout; contiguous operands whose pointers are
// 16-byte aligned are read and written 16 bytes at a time.
#include "cuda_util.cuh"
#include "dtype_bits.h"

namespace {

using namespace slc;

// ---- elementwise launchers ---------------------------------------------

template <typename T> struct alignas(16) vec16 {
  static constexpr int W = 16 / sizeof(T);
  T v[W];
};

template <typename T, typename F>
__global__ void map1_k(T *o, const T *x, int64_t n, F f) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    o[i] = f(x[i]);
}

template <typename T, typename F>
__global__ void map1_vec_k(T *o, const T *x, int64_t n, F f) {
  constexpr int W = vec16<T>::W;
  int64_t nv = n / W;
  const vec16<T> *xv = reinterpret_cast<const vec16<T> *>(x);
  vec16<T> *ov = reinterpret_cast<vec16<T> *>(o);
  for (int64_t i = thread_index(); i < nv; i += thread_count()) {
    vec16<T> a = xv[i], b;
#pragma unroll
    for (int l = 0; l < W; l++)
      b.v[l] = f(a.v[l]);
    ov[i] = b;
  }
  for (int64_t i = nv * W + thread_index(); i < n; i += thread_count())
    o[i] = f(x[i]);
}

template <typename T, typename F>
sl_status map1(T *o, const T *x, int64_t n, F f, sl__stream *s,
               const char *what) {
  if (n == 0) return SL_OK;
  if (aligned(16, o, x) && n >= vec16<T>::W)
    map1_vec_k<<<blocks_for(n / vec16<T>::W), kThreads, 0, stream_of(s)>>>(
        o, x, n, f);
  else
    map1_k<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(o, x, n, f);
  return launched(what);
}

// ---- unary ops (cpu/pointwise_unary.c) ----------------------------------

// Wrapping integer arithmetic, as the CPU's WADD/WMUL.
__device__ inline int32_t wadd(int32_t a, int32_t b) {
  return (int32_t)((uint32_t)a + (uint32_t)b);
}
__device__ inline int64_t wadd(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a + (uint64_t)b);
}
__device__ inline int32_t wsub(int32_t a, int32_t b) {
  return (int32_t)((uint32_t)a - (uint32_t)b);
}
__device__ inline int64_t wsub(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a - (uint64_t)b);
}
__device__ inline int32_t wmul(int32_t a, int32_t b) {
  return (int32_t)((uint32_t)a * (uint32_t)b);
}
__device__ inline int64_t wmul(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a * (uint64_t)b);
}

struct u_relu {
  __device__ float operator()(float a) const { return a > 0 ? a : 0.f; }
  __device__ double operator()(double a) const { return a > 0 ? a : 0.0; }
  __device__ int32_t operator()(int32_t a) const { return a > 0 ? a : 0; }
  __device__ int64_t operator()(int64_t a) const { return a > 0 ? a : 0; }
};
struct u_gelu {
  __device__ float operator()(float a) const { return sl__geluf(a); }
  __device__ double operator()(double a) const { return sl__gelu(a); }
};
struct u_tanh {
  __device__ float operator()(float a) const { return sl__tanhf(a); }
  __device__ double operator()(double a) const { return tanh(a); }
};
struct u_sigmoid {
  __device__ float operator()(float a) const { return sl__sigmoidf(a); }
  __device__ double operator()(double a) const { return 1.0 / (1.0 + exp(-a)); }
};
struct u_square {
  __device__ float operator()(float a) const { return a * a; }
  __device__ double operator()(double a) const { return a * a; }
  __device__ int32_t operator()(int32_t a) const { return wmul(a, a); }
  __device__ int64_t operator()(int64_t a) const { return wmul(a, a); }
};
struct u_sqrt {
  __device__ float operator()(float a) const { return sqrtf(a); }
  __device__ double operator()(double a) const { return sqrt(a); }
};
struct u_exp {
  __device__ float operator()(float a) const { return sl__expf(a); }
  __device__ double operator()(double a) const { return exp(a); }
};
struct u_log {
  __device__ float operator()(float a) const { return logf(a); }
  __device__ double operator()(double a) const { return log(a); }
};
struct u_neg {
  __device__ float operator()(float a) const { return -a; }
  __device__ double operator()(double a) const { return -a; }
  __device__ int32_t operator()(int32_t a) const { return wmul(a, -1); }
  __device__ int64_t operator()(int64_t a) const {
    return wmul(a, (int64_t)-1);
  }
};
// The scalar ops take `value` converted as the CPU converts it: (float)v,
// v, (int32_t)v, (int64_t)v (infer checked an integer tensor's value).
struct u_sadd {
  float f;
  double d;
  int32_t i;
  int64_t l;
  __device__ float operator()(float a) const { return a + f; }
  __device__ double operator()(double a) const { return a + d; }
  __device__ int32_t operator()(int32_t a) const { return wadd(a, i); }
  __device__ int64_t operator()(int64_t a) const { return wadd(a, l); }
};
struct u_smul {
  float f;
  double d;
  int32_t i;
  int64_t l;
  __device__ float operator()(float a) const { return a * f; }
  __device__ double operator()(double a) const { return a * d; }
  __device__ int32_t operator()(int32_t a) const { return wmul(a, i); }
  __device__ int64_t operator()(int64_t a) const { return wmul(a, l); }
};

template <typename F>
sl_status unary_float(const sl__kernel_ctx *k, sl__stream *s, F f,
                      const char *what) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  switch (k->in_meta[0].dtype) {
  case SL_DTYPE_F32:
    return map1((float *)k->out[0], (const float *)k->in[0], n, f, s, what);
  case SL_DTYPE_F64:
    return map1((double *)k->out[0], (const double *)k->in[0], n, f, s, what);
  default: return sl__check_dtype("input 0", k->in_meta[0].dtype, SL__DT_FLOAT);
  }
}

template <typename F>
sl_status unary_num(const sl__kernel_ctx *k, sl__stream *s, F f,
                    const char *what) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  switch (k->in_meta[0].dtype) {
  case SL_DTYPE_I32:
    return map1((int32_t *)k->out[0], (const int32_t *)k->in[0], n, f, s, what);
  case SL_DTYPE_I64:
    return map1((int64_t *)k->out[0], (const int64_t *)k->in[0], n, f, s, what);
  case SL_DTYPE_F32:
  case SL_DTYPE_F64: return unary_float(k, s, f, what);
  default: return sl__check_dtype("input 0", k->in_meta[0].dtype, SL__DT_NUM);
  }
}

sl_status identity_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n == 0 || k->out[0] == k->in[0]) return SL_OK;
  return cuda_check(
      cudaMemcpyAsync(k->out[0], k->in[0],
                      (size_t)n * sl_dtype_size(k->in_meta[0].dtype),
                      cudaMemcpyDeviceToDevice, stream_of(s)),
      "identity: cudaMemcpyAsync");
}

double attr_value(const sl__kernel_ctx *k) {
  double v = 0;
  sl__attr_number(k->attrs, "value", &v);
  return v;
}

template <typename F> F scalar_functor(double v) {
  F f;
  f.f = (float)v;
  f.d = v;
  /* Integer tensors only (infer checked the value fits); the float
   * conversions are not read then, and these are not either for floats. */
  f.i = v >= -2147483648.0 && v < 2147483648.0 ? (int32_t)v : 0;
  f.l =
      v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? (int64_t)v : 0;
  return f;
}

sl_status relu_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_num(k, s, u_relu{}, "relu");
}
sl_status gelu_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_float(k, s, u_gelu{}, "gelu");
}
sl_status tanh_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_float(k, s, u_tanh{}, "tanh");
}
sl_status sigmoid_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_float(k, s, u_sigmoid{}, "sigmoid");
}
sl_status square_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_num(k, s, u_square{}, "square");
}
sl_status sqrt_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_float(k, s, u_sqrt{}, "sqrt");
}
sl_status exp_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_float(k, s, u_exp{}, "exp");
}
sl_status log_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_float(k, s, u_log{}, "log");
}
sl_status neg_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_num(k, s, u_neg{}, "neg");
}
sl_status scalar_add_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_num(k, s, scalar_functor<u_sadd>(attr_value(k)), "scalar_add");
}
sl_status scalar_mul_run(const sl__kernel_ctx *k, sl__stream *s) {
  return unary_num(k, s, scalar_functor<u_smul>(attr_value(k)), "scalar_mul");
}

// ---- binary ops (cpu/pointwise_binary.c) --------------------------------

// Propagates NaN from either side, like numpy's maximum (the CPU's MAXIMUM).
template <typename T> __device__ inline T maximum(T x, T y) {
  return x > y || x != x ? x : y;
}

struct b_add {
  __device__ float operator()(float x, float y) const { return x + y; }
  __device__ double operator()(double x, double y) const { return x + y; }
  __device__ int32_t operator()(int32_t x, int32_t y) const {
    return wadd(x, y);
  }
  __device__ int64_t operator()(int64_t x, int64_t y) const {
    return wadd(x, y);
  }
};
struct b_sub {
  __device__ float operator()(float x, float y) const { return x - y; }
  __device__ double operator()(double x, double y) const { return x - y; }
  __device__ int32_t operator()(int32_t x, int32_t y) const {
    return wsub(x, y);
  }
  __device__ int64_t operator()(int64_t x, int64_t y) const {
    return wsub(x, y);
  }
};
struct b_mul {
  __device__ float operator()(float x, float y) const { return x * y; }
  __device__ double operator()(double x, double y) const { return x * y; }
  __device__ int32_t operator()(int32_t x, int32_t y) const {
    return wmul(x, y);
  }
  __device__ int64_t operator()(int64_t x, int64_t y) const {
    return wmul(x, y);
  }
};
struct b_div {
  __device__ float operator()(float x, float y) const { return x / y; }
  __device__ double operator()(double x, double y) const { return x / y; }
};
struct b_maximum {
  template <typename T> __device__ T operator()(T x, T y) const {
    return maximum(x, y);
  }
};

// Gradients: x is dy, y the saved forward value (gelu: its input).
struct b_relu_grad {
  __device__ float operator()(float x, float y) const {
    return y > 0 ? x : 0.f;
  }
  __device__ double operator()(double x, double y) const {
    return y > 0 ? x : 0.0;
  }
};
struct b_gelu_grad {
  __device__ float operator()(float x, float y) const {
    return x * sl__gelu_gradf(y);
  }
  __device__ double operator()(double x, double y) const {
    return x * sl__gelu_grad(y);
  }
};
struct b_tanh_grad {
  __device__ float operator()(float x, float y) const {
    return x * (1.f - y * y);
  }
  __device__ double operator()(double x, double y) const {
    return x * (1.0 - y * y);
  }
};
struct b_sigmoid_grad {
  __device__ float operator()(float x, float y) const {
    return x * y * (1.f - y);
  }
  __device__ double operator()(double x, double y) const {
    return x * y * (1.0 - y);
  }
};

// The merged broadcasting iteration (sl__iter) for the device: the output
// is contiguous, so element i of it reads a at sum_d c_d sa[d] and b at
// sum_d c_d sb[d], c the coordinates of i over dims.
struct bin_iter {
  int nd;
  int64_t dims[SL_MAX_DIMS];
  int64_t sa[SL_MAX_DIMS], sb[SL_MAX_DIMS];
};

template <typename T, typename I, typename F>
__global__ void map2_bcast_k(T *o, const T *a, const T *b, int64_t n,
                             bin_iter it, F f) {
  for (int64_t i0 = thread_index(); i0 < n; i0 += thread_count()) {
    I i = (I)i0, oa = 0, ob = 0;
    for (int d = it.nd - 1; d >= 0; d--) {
      I e = (I)it.dims[d], c = i % e;
      i /= e;
      oa += c * (I)it.sa[d];
      ob += c * (I)it.sb[d];
    }
    o[i0] = f(a[oa], b[ob]);
  }
}

// Same-shape operands (one merged row of unit strides).
template <typename T, typename F>
__global__ void map2_vec_k(T *o, const T *a, const T *b, int64_t n, F f) {
  constexpr int W = vec16<T>::W;
  int64_t nv = n / W;
  const vec16<T> *av = reinterpret_cast<const vec16<T> *>(a);
  const vec16<T> *bv = reinterpret_cast<const vec16<T> *>(b);
  vec16<T> *ov = reinterpret_cast<vec16<T> *>(o);
  for (int64_t i = thread_index(); i < nv; i += thread_count()) {
    vec16<T> x = av[i], y = bv[i], r;
#pragma unroll
    for (int l = 0; l < W; l++)
      r.v[l] = f(x.v[l], y.v[l]);
    ov[i] = r;
  }
  for (int64_t i = nv * W + thread_index(); i < n; i += thread_count())
    o[i] = f(a[i], b[i]);
}

template <typename T, typename F>
sl_status map2(const sl__kernel_ctx *k, F f, sl__stream *s, const char *what) {
  const sl_shape *shapes[2] = {&k->in_meta[0].shape, &k->in_meta[1].shape};
  if (!sl__broadcasts_to(shapes[0], &k->out_meta[0].shape) ||
      !sl__broadcasts_to(shapes[1], &k->out_meta[0].shape))
    return sl__fail(SL_EINVAL, "local shards %s and %s do not broadcast to %s",
                    sl__shape_text(shapes[0]).s, sl__shape_text(shapes[1]).s,
                    sl__shape_text(&k->out_meta[0].shape).s);
  sl__iter it;
  sl__iter_init(&it, &k->out_meta[0].shape, 2, shapes);
  if (it.empty) return SL_OK;
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  T *o = (T *)k->out[0];
  const T *a = (const T *)k->in[0], *b = (const T *)k->in[1];
  cudaStream_t cs = stream_of(s);
  if (it.ndim == 1 && it.strides[1][0] == 1 && it.strides[2][0] == 1 &&
      aligned(16, o, a, b) && n >= vec16<T>::W) {
    map2_vec_k<<<blocks_for(n / vec16<T>::W), kThreads, 0, cs>>>(o, a, b, n, f);
    return launched(what);
  }
  bin_iter bi;
  memset(&bi, 0, sizeof bi);
  bi.nd = it.ndim;
  for (int d = 0; d < it.ndim; d++) {
    bi.dims[d] = it.dims[d];
    bi.sa[d] = it.strides[1][d];
    bi.sb[d] = it.strides[2][d];
  }
  if (n < INT32_MAX)
    map2_bcast_k<T, int32_t>
        <<<blocks_for(n), kThreads, 0, cs>>>(o, a, b, n, bi, f);
  else
    map2_bcast_k<T, int64_t>
        <<<blocks_for(n), kThreads, 0, cs>>>(o, a, b, n, bi, f);
  return launched(what);
}

template <typename F>
sl_status binary_float(const sl__kernel_ctx *k, sl__stream *s, F f,
                       const char *what) {
  switch (k->out_meta[0].dtype) {
  case SL_DTYPE_F32: return map2<float>(k, f, s, what);
  case SL_DTYPE_F64: return map2<double>(k, f, s, what);
  default:
    return sl__check_dtype("input 0", k->out_meta[0].dtype, SL__DT_FLOAT);
  }
}

template <typename F>
sl_status binary_num(const sl__kernel_ctx *k, sl__stream *s, F f,
                     const char *what) {
  switch (k->out_meta[0].dtype) {
  case SL_DTYPE_I32: return map2<int32_t>(k, f, s, what);
  case SL_DTYPE_I64: return map2<int64_t>(k, f, s, what);
  case SL_DTYPE_F32:
  case SL_DTYPE_F64: return binary_float(k, s, f, what);
  default: return sl__check_dtype("input 0", k->out_meta[0].dtype, SL__DT_NUM);
  }
}

sl_status add_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_num(k, s, b_add{}, "add");
}
sl_status sub_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_num(k, s, b_sub{}, "sub");
}
sl_status mul_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_num(k, s, b_mul{}, "mul");
}
sl_status div_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_float(k, s, b_div{}, "div");
}
sl_status maximum_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_num(k, s, b_maximum{}, "maximum");
}
sl_status relu_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_float(k, s, b_relu_grad{}, "relu_grad");
}
sl_status gelu_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_float(k, s, b_gelu_grad{}, "gelu_grad");
}
sl_status tanh_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_float(k, s, b_tanh_grad{}, "tanh_grad");
}
sl_status sigmoid_grad_run(const sl__kernel_ctx *k, sl__stream *s) {
  return binary_float(k, s, b_sigmoid_grad{}, "sigmoid_grad");
}

// ---- cast (cpu/cast.c, with sl_load_element / sl_store_element) --------

// The 16-bit conversions are tensor/dtype_bits.h's (the CPU's own).

// sl_load_element.
__device__ inline double load_d(sl_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case SL_DTYPE_F32: return ((const float *)p)[i];
  case SL_DTYPE_F64: return ((const double *)p)[i];
  case SL_DTYPE_I8: return ((const int8_t *)p)[i];
  case SL_DTYPE_I32: return ((const int32_t *)p)[i];
  case SL_DTYPE_I64: return (double)((const int64_t *)p)[i];
  case SL_DTYPE_U8: return ((const uint8_t *)p)[i];
  case SL_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
  case SL_DTYPE_F16: return sl__f16_to_f32_bits(((const uint16_t *)p)[i]);
  default: return sl__bf16_to_f32_bits(((const uint16_t *)p)[i]);
  }
}

// A double to an integer: truncation toward zero, saturating, NaN -> 0.
__device__ inline int64_t sat_int(double v, double lo, double hi_excl,
                                  int64_t imin, int64_t imax) {
  if (v != v) return 0;
  if (v < lo) return imin;
  if (v >= hi_excl) return imax;
  return (int64_t)v;
}

// sl_store_element.
__device__ inline void store_d(sl_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
  case SL_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case SL_DTYPE_F64: ((double *)p)[i] = v; break;
  case SL_DTYPE_F16: ((uint16_t *)p)[i] = sl__narrow_double(v, 5, 10); break;
  case SL_DTYPE_BF16: ((uint16_t *)p)[i] = sl__narrow_double(v, 8, 7); break;
  case SL_DTYPE_I8:
    ((int8_t *)p)[i] = (int8_t)sat_int(v, -128.0, 128.0, INT8_MIN, INT8_MAX);
    break;
  case SL_DTYPE_U8:
    ((uint8_t *)p)[i] = (uint8_t)sat_int(v, 0.0, 256.0, 0, UINT8_MAX);
    break;
  case SL_DTYPE_I32:
    ((int32_t *)p)[i] =
        (int32_t)sat_int(v, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX);
    break;
  case SL_DTYPE_I64:
    ((int64_t *)p)[i] = sat_int(v, -9223372036854775808.0,
                                9223372036854775808.0, INT64_MIN, INT64_MAX);
    break;
  default: ((uint8_t *)p)[i] = v != 0.0; break; // bool
  }
}

// cast.c's load_int / store_int (integer <-> integer).
__device__ inline int64_t load_int(sl_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case SL_DTYPE_I8: return ((const int8_t *)p)[i];
  case SL_DTYPE_I32: return ((const int32_t *)p)[i];
  case SL_DTYPE_I64: return ((const int64_t *)p)[i];
  case SL_DTYPE_U8: return ((const uint8_t *)p)[i];
  default: return ((const uint8_t *)p)[i] != 0; // bool
  }
}
__device__ inline void store_int(sl_dtype dt, void *p, int64_t i, int64_t v) {
  switch (dt) {
  case SL_DTYPE_I8:
    ((int8_t *)p)[i] =
        (int8_t)(v < INT8_MIN ? INT8_MIN : (v > INT8_MAX ? INT8_MAX : v));
    break;
  case SL_DTYPE_I32:
    ((int32_t *)p)[i] =
        (int32_t)(v < INT32_MIN ? INT32_MIN : (v > INT32_MAX ? INT32_MAX : v));
    break;
  case SL_DTYPE_I64: ((int64_t *)p)[i] = v; break;
  case SL_DTYPE_U8:
    ((uint8_t *)p)[i] = (uint8_t)(v < 0 ? 0 : (v > UINT8_MAX ? UINT8_MAX : v));
    break;
  default: ((uint8_t *)p)[i] = v != 0; break; // bool
  }
}

// The pairs cast.c converts directly (cast_fast), as functors.
struct c_f32_f64 {
  __device__ double operator()(float a) const { return (double)a; }
};
struct c_f64_f32 {
  __device__ float operator()(double a) const { return (float)a; }
};
struct c_f32_f16 {
  __device__ uint16_t operator()(float a) const { return sl__f16_from_f32(a); }
};
struct c_f16_f32 {
  __device__ float operator()(uint16_t a) const {
    return sl__f16_to_f32_bits(a);
  }
};
struct c_f32_bf16 {
  __device__ uint16_t operator()(float a) const { return sl__bf16_from_f32(a); }
};
struct c_bf16_f32 {
  __device__ float operator()(uint16_t a) const {
    return sl__bf16_to_f32_bits(a);
  }
};
template <typename From, typename To> struct c_plain {
  __device__ To operator()(From a) const { return (To)a; }
};
struct c_f32_i32 {
  __device__ int32_t operator()(float a) const {
    return (int32_t)sat_int(a, -2147483648.0, 2147483648.0, INT32_MIN,
                            INT32_MAX);
  }
};
struct c_f32_i64 {
  __device__ int64_t operator()(float a) const {
    return sat_int(a, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN,
                   INT64_MAX);
  }
};

template <typename From, typename To, typename F>
__global__ void convert_k(To *o, const From *x, int64_t n, F f) {
  for (int64_t i = thread_index(); i < n; i += thread_count())
    o[i] = f(x[i]);
}

// Every other pair: integers through int64, integer -> f32 directly, the
// rest through double (cast_cpu's order of cases).
__global__ void cast_generic_k(void *o, const void *x, int64_t n, sl_dtype from,
                               sl_dtype to) {
  bool from_int = !(from == SL_DTYPE_F32 || from == SL_DTYPE_F64 ||
                    from == SL_DTYPE_F16 || from == SL_DTYPE_BF16);
  bool to_int = !(to == SL_DTYPE_F32 || to == SL_DTYPE_F64 ||
                  to == SL_DTYPE_F16 || to == SL_DTYPE_BF16);
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    if (from_int && to_int)
      store_int(to, o, i, load_int(from, x, i));
    else if (from_int && to == SL_DTYPE_F32)
      ((float *)o)[i] = (float)load_int(from, x, i);
    else
      store_d(to, o, i, load_d(from, x, i));
  }
}

template <typename From, typename To, typename F>
sl_status convert(const sl__kernel_ctx *k, int64_t n, F f, sl__stream *s) {
  convert_k<From, To><<<blocks_for(n), kThreads, 0, stream_of(s)>>>(
      (To *)k->out[0], (const From *)k->in[0], n, f);
  return launched("cast");
}

sl_status cast_run(const sl__kernel_ctx *k, sl__stream *s) {
  sl_dtype from = k->in_meta[0].dtype, to = k->out_meta[0].dtype;
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n == 0) return SL_OK;
  if (from == to) {
    if (k->out[0] == k->in[0]) return SL_OK;
    return cuda_check(cudaMemcpyAsync(k->out[0], k->in[0],
                                      (size_t)n * sl_dtype_size(from),
                                      cudaMemcpyDeviceToDevice, stream_of(s)),
                      "cast: cudaMemcpyAsync");
  }
#define PAIR(a, b) ((int)(a)*SL_DTYPE_COUNT + (int)(b))
  switch (PAIR(from, to)) {
  case PAIR(SL_DTYPE_F32, SL_DTYPE_F64):
    return convert<float, double>(k, n, c_f32_f64{}, s);
  case PAIR(SL_DTYPE_F64, SL_DTYPE_F32):
    return convert<double, float>(k, n, c_f64_f32{}, s);
  case PAIR(SL_DTYPE_F32, SL_DTYPE_F16):
    return convert<float, uint16_t>(k, n, c_f32_f16{}, s);
  case PAIR(SL_DTYPE_F16, SL_DTYPE_F32):
    return convert<uint16_t, float>(k, n, c_f16_f32{}, s);
  case PAIR(SL_DTYPE_F32, SL_DTYPE_BF16):
    return convert<float, uint16_t>(k, n, c_f32_bf16{}, s);
  case PAIR(SL_DTYPE_BF16, SL_DTYPE_F32):
    return convert<uint16_t, float>(k, n, c_bf16_f32{}, s);
  case PAIR(SL_DTYPE_I32, SL_DTYPE_F32):
    return convert<int32_t, float>(k, n, c_plain<int32_t, float>{}, s);
  case PAIR(SL_DTYPE_I64, SL_DTYPE_F32):
    return convert<int64_t, float>(k, n, c_plain<int64_t, float>{}, s);
  case PAIR(SL_DTYPE_I32, SL_DTYPE_F64):
    return convert<int32_t, double>(k, n, c_plain<int32_t, double>{}, s);
  case PAIR(SL_DTYPE_I64, SL_DTYPE_F64):
    return convert<int64_t, double>(k, n, c_plain<int64_t, double>{}, s);
  case PAIR(SL_DTYPE_I32, SL_DTYPE_I64):
    return convert<int32_t, int64_t>(k, n, c_plain<int32_t, int64_t>{}, s);
  case PAIR(SL_DTYPE_F32, SL_DTYPE_I32):
    return convert<float, int32_t>(k, n, c_f32_i32{}, s);
  case PAIR(SL_DTYPE_F32, SL_DTYPE_I64):
    return convert<float, int64_t>(k, n, c_f32_i64{}, s);
  default: break;
  }
#undef PAIR
  if ((unsigned)from >= SL_DTYPE_COUNT || (unsigned)to >= SL_DTYPE_COUNT)
    return sl__fail(SL_EINVAL, "cast: bad dtypes %d -> %d", (int)from, (int)to);
  cast_generic_k<<<blocks_for(n), kThreads, 0, stream_of(s)>>>(
      k->out[0], k->in[0], n, from, to);
  return launched("cast");
}

// ---- causal_mask (cpu/mask.c) -------------------------------------------

// Element (row r, column j) of the local [rows, n] view: its global query
// position is q0 + (r mod qn), its key position k0 + j; keys after the
// query are masked.
template <typename T>
__global__ void mask_k(T *o, const T *x, int64_t total, int64_t n, int64_t qn,
                       int64_t q0, int64_t k0, T fill) {
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    int64_t r = i / n, j = i - r * n;
    int64_t q = q0 + r % qn;
    o[i] = k0 + j > q ? fill : x[i];
  }
}

sl_status causal_mask_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *sh = &k->in_meta[0].shape;
  int nd = sh->ndim;
  int64_t total = sl_shape_numel(sh);
  if (total == 0) return SL_OK;
  if (nd < 2 || k->in_slice[0].ndim != nd)
    return sl__fail(SL_EINVAL,
                    "causal_mask: input %s needs [..., q, k] and "
                    "its slice",
                    sl__shape_text(sh).s);
  double fill = 0;
  sl__attr_number(k->attrs, "fill", &fill);
  int64_t n = sh->dims[nd - 1], qn = sh->dims[nd - 2];
  int64_t q0 = k->in_slice[0].start[nd - 2], k0 = k->in_slice[0].start[nd - 1];
  cudaStream_t cs = stream_of(s);
  if (k->in_meta[0].dtype == SL_DTYPE_F32)
    mask_k<float><<<blocks_for(total), kThreads, 0, cs>>>(
        (float *)k->out[0], (const float *)k->in[0], total, n, qn, q0, k0,
        (float)fill);
  else if (k->in_meta[0].dtype == SL_DTYPE_F64)
    mask_k<double><<<blocks_for(total), kThreads, 0, cs>>>(
        (double *)k->out[0], (const double *)k->in[0], total, n, qn, q0, k0,
        fill);
  else
    return sl__check_dtype("input 0", k->in_meta[0].dtype, SL__DT_FLOAT);
  return launched("causal_mask");
}

} // namespace

#define KERNEL(NAME)                                                           \
  extern "C" const sl__cuda_kernel sl__cuda_##NAME = {NAME##_run, NULL};

KERNEL(identity)
KERNEL(relu)
KERNEL(gelu)
KERNEL(tanh)
KERNEL(sigmoid)
KERNEL(square)
KERNEL(sqrt)
KERNEL(exp)
KERNEL(log)
KERNEL(neg)
KERNEL(scalar_add)
KERNEL(scalar_mul)
KERNEL(add)
KERNEL(sub)
KERNEL(mul)
KERNEL(div)
KERNEL(maximum)
KERNEL(relu_grad)
KERNEL(gelu_grad)
KERNEL(tanh_grad)
KERNEL(sigmoid_grad)
KERNEL(cast)
KERNEL(causal_mask)
