// CUDA kernels of the optimizer updates and the clipping scale
// (cpu/optim.c): sgd_update (plain, momentum, Nesterov, weight decay),
// adam_update (Adam and AdamW) and global_norm_scale, with PyTorch's
// formulas in PyTorch's operation order.
//
// The updates are elementwise and use the scalars the CPU kernel forms
// (on the host, the same way), with the same float operations in the same
// order and no FMA contraction, so w_new, m_new and v_new are
// bit-identical to the CPU's. An output may be its input's very buffer
// (each thread reads its element before writing it). Contiguous 16-byte
// aligned tensors are processed four floats at a time. A lazy update's
// rows input (cpu/optim.c) leaves the rows it counts 0 as they were.
#include "cuda_util.cuh"

namespace {

using namespace slc;

// The block of w the outputs hold (cpu/optim.c's shard_of_w): where it
// lies in w, or copied into output 0 on the stream when strided there.
sl_status shard_of_w(const sl__kernel_ctx *k, sl__stream *s,
                     const float **out) {
  sl__shard_view v = sl__kernel_shard_view(k);
  const float *w = (const float *)k->in[0];
  if (v.offset) w += v.offset; // an empty w may lie at NULL
  *out = w;
  if (v.rows == 1 || v.inner == v.stride) return SL_OK;
  float *wn = (float *)k->out[0];
  size_t row = (size_t)v.inner * sizeof(float);
  *out = wn;
  return cuda_check(cudaMemcpy2DAsync(wn, row, w,
                                      (size_t)v.stride * sizeof(float), row,
                                      (size_t)v.rows, cudaMemcpyDeviceToDevice,
                                      stream_of(s)),
                    "optimizer update: the weight's shard");
}

// ---- sgd ------------------------------------------------------------------

// dense_util.h's sl__dense_sgd, by value.
struct sgd_args {
  float lr, mom, damp1, wd;
  bool has_wd, first, nesterov, use_mom;
  int64_t step; // with skipped steps, first is step - skipped == 0
};

// dense_rows_impl.h's sgd_chunk, one element.
__device__ inline void sgd_one(const sgd_args &c, float wi, float gi, float mi,
                               float *wl, float *ml) {
  float d = c.has_wd ? gi + c.wd * wi : gi;
  float later = mi * c.mom + c.damp1 * d;
  float buf = c.first ? d : later;
  float nest = d + c.mom * buf;
  float dm = c.nesterov ? nest : buf;
  d = c.use_mom ? dm : d;
  *ml = buf;
  *wl = wi - c.lr * d;
}

struct alignas(16) f4 {
  float v[4];
};

// A lazy update's row counts (cpu/optim.c): rows of `inner` elements
// whose count is 0 keep their inputs. skipped: loss scaling's count of
// skipped steps (the input after rows), read on the device, or NULL.
struct lazy_rows {
  const float *rows; // NULL: every row updated
  int64_t inner;
  const float *skipped;
};

__device__ inline bool skipped(const lazy_rows &l, int64_t i) {
  return l.rows && l.rows[i / l.inner] == 0.0f;
}

// The rows input of a lazy update with n_state state inputs.
lazy_rows rows_of(const sl__kernel_ctx *k, int n_state) {
  lazy_rows l = {NULL, 0, NULL};
  if (k->n_in > n_state + 1) l.skipped = (const float *)k->in[n_state + 1];
  if (k->n_in <= n_state) return l;
  int64_t rows = k->in_meta[n_state].shape.dims[0];
  if (rows <= 0) return l;
  l.rows = (const float *)k->in[n_state];
  l.inner = sl_shape_numel(&k->out_meta[0].shape) / rows;
  if (l.inner <= 0) l.rows = NULL;
  return l;
}

// The first step as optim.c's sgd_cpu counts it (skipped steps left out).
__device__ inline sgd_args sgd_counted(sgd_args c, const lazy_rows &l) {
  if (l.skipped) c.first = c.use_mom && c.step - (int64_t)l.skipped[0] == 0;
  return c;
}

// VEC: n / 4 groups of four, then the tail one by one (pointers 16-byte
// aligned; never for a lazy update). m may be g when there is no state
// (never read then: use_mom is false).
template <bool VEC>
__global__ void sgd_k(sgd_args c0, lazy_rows l, const float *w, const float *g,
                      const float *m, float *wn, float *mn, int64_t n) {
  const sgd_args c = sgd_counted(c0, l);
  int64_t start = 0;
  if constexpr (VEC) {
    int64_t nv = n / 4;
    for (int64_t i = thread_index(); i < nv; i += thread_count()) {
      f4 a = ((const f4 *)w)[i], b = ((const f4 *)g)[i];
      f4 mm = c.use_mom ? ((const f4 *)m)[i] : b;
      f4 wo, mo;
#pragma unroll
      for (int l = 0; l < 4; l++)
        sgd_one(c, a.v[l], b.v[l], mm.v[l], &wo.v[l], &mo.v[l]);
      ((f4 *)wn)[i] = wo;
      if (c.use_mom) ((f4 *)mn)[i] = mo;
    }
    start = nv * 4;
  }
  for (int64_t i = start + thread_index(); i < n; i += thread_count()) {
    float wo, mo;
    if (skipped(l, i)) {
      wn[i] = w[i];
      if (c.use_mom) mn[i] = m[i];
      continue;
    }
    sgd_one(c, w[i], g[i], c.use_mom ? m[i] : 0.0f, &wo, &mo);
    wn[i] = wo;
    if (c.use_mom) mn[i] = mo;
  }
}

sl_status sgd_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  const float *w, *g = (const float *)k->in[1], *m = (const float *)k->in[2];
  SL_CHECK(shard_of_w(k, s, &w));
  float *wn = (float *)k->out[0], *mn = (float *)k->out[1];
  sgd_args c;
  c.lr = (float)sl__attr_float(k->attrs, "lr", 0.0);
  c.mom = (float)sl__attr_float(k->attrs, "momentum", 0.0);
  c.damp1 = (float)(1.0 - sl__attr_float(k->attrs, "dampening", 0.0));
  c.wd = (float)sl__attr_float(k->attrs, "weight_decay", 0.0);
  c.nesterov = sl__attr_int(k->attrs, "nesterov", 0) != 0;
  c.has_wd = c.wd != 0.0f;
  c.use_mom = c.mom != 0.0f;
  c.first = c.use_mom && k->step == 0;
  c.step = k->step;
  bool no_state = sl_shape_numel(&k->in_meta[2].shape) != n;
  if (no_state) m = g; // never read
  cudaStream_t cs = stream_of(s);
  if (n == 0) return SL_OK;
  if (!c.use_mom && !no_state && mn != m)
    SL_CHECK(cuda_check(cudaMemcpyAsync(mn, m, (size_t)n * sizeof(float),
                                        cudaMemcpyDeviceToDevice, cs),
                        "sgd_update: cudaMemcpyAsync"));
  lazy_rows l = rows_of(k, 3);
  if (!l.rows && aligned(16, w, g, m, wn, mn) && n >= 4)
    sgd_k<true>
        <<<blocks_for(n / 4), kThreads, 0, cs>>>(c, l, w, g, m, wn, mn, n);
  else
    sgd_k<false><<<blocks_for(n), kThreads, 0, cs>>>(c, l, w, g, m, wn, mn, n);
  return launched("sgd_update");
}

// ---- adam -----------------------------------------------------------------

// dense_util.h's sl__dense_adam, by value.
struct adam_args {
  float decay, l2, one_b1, b2, one_b2, bc2_sqrt, eps, step_size;
  bool has_decay, has_l2;
  double lr, beta1, beta2; // to form the step's scalars on the device
  int64_t step;
};

// The step's scalars as adam_run (and optim.c's adam_cpu) forms them.
__host__ __device__ inline void adam_at(adam_args *c, double t) {
  c->step_size = (float)(c->lr / (1.0 - pow(c->beta1, t)));
  c->bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, t));
}

// With skipped steps (read on the device), t leaves them out.
__device__ inline adam_args adam_counted(adam_args c, const lazy_rows &l) {
  if (l.skipped) adam_at(&c, (double)(c.step - (int64_t)l.skipped[0]) + 1.0);
  return c;
}

// dense_rows_impl.h's adam_chunk, one element.
__device__ inline void adam_one(const adam_args &c, float w0, float gi,
                                float m0, float v0, float *wl, float *ml,
                                float *vl) {
  float wi = c.has_decay ? w0 * c.decay : w0;
  float d = c.has_l2 ? gi + c.l2 * w0 : gi;
  float mi = m0 + c.one_b1 * (d - m0);
  float vi = v0 * c.b2 + (c.one_b2 * d) * d;
  float denom = sqrtf(vi) / c.bc2_sqrt + c.eps;
  *ml = mi;
  *vl = vi;
  *wl = wi - c.step_size * (mi / denom);
}

template <bool VEC>
__global__ void adam_k(adam_args c0, lazy_rows l, const float *w,
                       const float *g, const float *m, const float *v,
                       float *wn, float *mn, float *vn, int64_t n) {
  const adam_args c = adam_counted(c0, l);
  int64_t start = 0;
  if constexpr (VEC) {
    int64_t nv = n / 4;
    for (int64_t i = thread_index(); i < nv; i += thread_count()) {
      f4 a = ((const f4 *)w)[i], b = ((const f4 *)g)[i],
         mm = ((const f4 *)m)[i], vv = ((const f4 *)v)[i], wo, mo, vo;
#pragma unroll
      for (int l = 0; l < 4; l++)
        adam_one(c, a.v[l], b.v[l], mm.v[l], vv.v[l], &wo.v[l], &mo.v[l],
                 &vo.v[l]);
      ((f4 *)wn)[i] = wo;
      ((f4 *)mn)[i] = mo;
      ((f4 *)vn)[i] = vo;
    }
    start = nv * 4;
  }
  for (int64_t i = start + thread_index(); i < n; i += thread_count()) {
    float wo, mo, vo;
    if (skipped(l, i)) {
      wn[i] = w[i];
      mn[i] = m[i];
      vn[i] = v[i];
      continue;
    }
    adam_one(c, w[i], g[i], m[i], v[i], &wo, &mo, &vo);
    wn[i] = wo;
    mn[i] = mo;
    vn[i] = vo;
  }
}

sl_status adam_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  const float *w, *g = (const float *)k->in[1], *m = (const float *)k->in[2],
              *v = (const float *)k->in[3];
  SL_CHECK(shard_of_w(k, s, &w));
  float *wn = (float *)k->out[0], *mn = (float *)k->out[1],
        *vn = (float *)k->out[2];
  double lr = sl__attr_float(k->attrs, "lr", 1e-3);
  double b1 = sl__attr_float(k->attrs, "beta1", 0.9);
  double b2 = sl__attr_float(k->attrs, "beta2", 0.999);
  float eps = (float)sl__attr_float(k->attrs, "eps", 1e-8);
  double wd = sl__attr_float(k->attrs, "weight_decay", 0.0);
  bool decoupled = sl__attr_int(k->attrs, "decoupled", 0) != 0;
  if (k->step < 0)
    return sl__fail(SL_EINVAL, "adam_update: step %lld is negative",
                    (long long)k->step);
  // The scalars exactly as optim.c's adam_cpu forms them.
  adam_args c;
  c.lr = lr;
  c.beta1 = b1;
  c.beta2 = b2;
  c.step = k->step;
  adam_at(&c, (double)k->step + 1.0);
  c.one_b1 = (float)(1.0 - b1);
  c.b2 = (float)b2;
  c.one_b2 = (float)(1.0 - b2);
  c.decay = decoupled ? (float)(1.0 - lr * wd) : 1.0f;
  c.l2 = decoupled ? 0.0f : (float)wd;
  c.eps = eps;
  c.has_l2 = c.l2 != 0.0f;
  c.has_decay = decoupled && wd != 0.0;
  if (n == 0) return SL_OK;
  cudaStream_t cs = stream_of(s);
  lazy_rows l = rows_of(k, 4);
  if (!l.rows && aligned(16, w, g, m, v, wn, mn, vn) && n >= 4)
    adam_k<true><<<blocks_for(n / 4), kThreads, 0, cs>>>(c, l, w, g, m, v, wn,
                                                          mn, vn, n);
  else
    adam_k<false>
        <<<blocks_for(n), kThreads, 0, cs>>>(c, l, w, g, m, v, wn, mn, vn, n);
  return launched("adam_update");
}

// ---- global_norm_scale ------------------------------------------------------

struct gns_args {
  int n;
  const float *in[SL_OP_MAX_INPUTS];
  float max_norm;
};

// One thread: the sum in input order, in double, then optim.c's gns_cpu.
__global__ void gns_k(gns_args a, float *out) {
  double sum = 0.0;
  for (int i = 0; i < a.n; i++)
    sum += a.in[i][0];
  float total = (float)sqrt(sum);
  float coef = a.max_norm / (total + 1e-6f);
  out[0] = coef < 1.0f ? coef : (coef == coef ? 1.0f : coef);
}

sl_status gns_run(const sl__kernel_ctx *k, sl__stream *s) {
  if (k->n_in < 1 || k->n_in > SL_OP_MAX_INPUTS)
    return sl__fail(SL_EINVAL, "global_norm_scale: %d inputs", k->n_in);
  gns_args a;
  memset(&a, 0, sizeof a);
  a.n = k->n_in;
  for (int i = 0; i < k->n_in; i++)
    a.in[i] = (const float *)k->in[i];
  a.max_norm = (float)sl__attr_float(k->attrs, "max_norm", NAN);
  gns_k<<<1, 1, 0, stream_of(s)>>>(a, (float *)k->out[0]);
  return launched("global_norm_scale");
}

// ---- loss_scale_update
// --------------------------------------------------------

// One thread: optim.c's lsu_cpu.
__global__ void lsu_k(const float *scale, const float *good, const float *check,
                      const float *skipped, float window, float *so, float *go,
                      float *keep, float *skipped_out) {
  float s = scale[0], g = good[0], c = check[0], sk = skipped[0];
  bool finite = c - c == 0.0f;
  g = finite ? g + 1.0f : 0.0f;
  if (!finite) s *= 0.5f;
  if (g >= window) s *= 2.0f, g = 0.0f;
  so[0] = s;
  go[0] = g;
  keep[0] = finite ? 1.0f : 0.0f;
  skipped_out[0] = finite ? sk : sk + 1.0f;
}

sl_status lsu_run(const sl__kernel_ctx *k, sl__stream *s) {
  lsu_k<<<1, 1, 0, stream_of(s)>>>(
      (const float *)k->in[0], (const float *)k->in[1], (const float *)k->in[2],
      (const float *)k->in[3], (float)sl__attr_int(k->attrs, "window", 1),
      (float *)k->out[0], (float *)k->out[1], (float *)k->out[2],
      (float *)k->out[3]);
  return launched("loss_scale_update");
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_sgd_update = {sgd_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_adam_update = {adam_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_global_norm_scale = {gns_run, NULL};
extern "C" const sl__cuda_kernel sl__cuda_loss_scale_update = {lsu_run, NULL};
