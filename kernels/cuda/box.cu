// CUDA box operations (kernels/box.h): a box of one row-major buffer stored
// or reduced into a box of another, or filled with a reduction's identity,
// with the bits the host's sl__box_move / sl__elem_fill_identity give.
//
// The box's dims are merged first: dims of extent 1 only move the start,
// and neighbours merge where both buffers step over the inner one
// contiguously, so a box spanning whole rows becomes one flat run (a
// contiguous store is then one cudaMemcpyAsync, a fill of equal bytes one
// cudaMemsetAsync). What remains is a grid-stride loop over the box's
// elements, offsets from their coordinates, in 32-bit arithmetic when every
// index fits. Where the innermost run, the strides and both pointers allow,
// a thread moves 16 bytes at once: stores and fills as wider elements,
// reductions as packs of elements reduced lane by lane.
#include "cuda_util.cuh"
#include "dtype_bits.h"

#include <math.h>

extern "C" {
#include "box.h"
#include "sbp_int.h"
}

namespace {

using namespace slc;

// The merged box: nd >= 1 dims, innermost last; strides count the kernel's
// elements; dst and src point at the box's first element.
struct box_plan {
  int nd;
  int64_t ext[SL_MAX_DIMS];
  int64_t dstr[SL_MAX_DIMS], sstr[SL_MAX_DIMS];
};

template <typename I>
__device__ inline void box_offsets(const box_plan &p, int64_t i0, I &od,
                                   I &os) {
  I i = (I)i0;
  od = 0;
  os = 0;
  for (int d = p.nd - 1; d > 0; d--) {
    I e = (I)p.ext[d], c = i % e;
    i /= e;
    od += c * (I)p.dstr[d];
    os += c * (I)p.sstr[d];
  }
  od += i * (I)p.dstr[0];
  os += i * (I)p.sstr[0];
}

// ---- store and fill: bytes, by element size ------------------------------

template <typename E, typename I, bool FILL>
__global__ void move_k(E *d, const E *s, E pat, int64_t n, box_plan p) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    I od, os;
    box_offsets<I>(p, i, od, os);
    d[od] = FILL ? pat : s[os];
  }
}

// ---- reductions: the host's REDUCE_LOOP (sbp/elem.c), x the old dst value
// and y the incoming one ----------------------------------------------------

// x + y with the NaN bits of the host's SSE addition, which the GPU's does
// not give (it returns its canonical NaN for any NaN result): a NaN operand
// comes out quieted, x's first, and a NaN the sum itself makes (inf - inf)
// is the host's default NaN, measured on the host (dn).
__device__ inline float quiet(float v) {
  return __uint_as_float(__float_as_uint(v) | 0x400000u);
}
__device__ inline double quiet(double v) {
  return __longlong_as_double(__double_as_longlong(v) | (1ll << 51));
}
template <typename T> __device__ inline T host_add(T x, T y, T dn) {
  if (x != x) return quiet(x);
  if (y != y) return quiet(y);
  T r = x + y;
  return r != r ? dn : r;
}

template <typename T> struct red_float {
  using type = T;
  sl_reduce_op op;
  T dn;
  __device__ T operator()(T x, T y) const {
    if (op == SL_REDUCE_SUM) return host_add(x, y, dn);
    if (op == SL_REDUCE_MAX) return y > x ? y : x;
    return y < x ? y : x;
  }
};

// f16 and bf16 through float and back, with the host's conversions
// (dtype_bits.h): even a max keeps no raw bits (a NaN comes back quiet).
template <bool BF16> struct red_half {
  using type = uint16_t;
  sl_reduce_op op;
  float dn;
  __device__ uint16_t operator()(uint16_t xh, uint16_t yh) const {
    float a = BF16 ? sl__bf16_to_f32_bits(xh) : sl__f16_to_f32_bits(xh);
    float b = BF16 ? sl__bf16_to_f32_bits(yh) : sl__f16_to_f32_bits(yh);
    float r = op == SL_REDUCE_SUM   ? host_add(a, b, dn)
              : op == SL_REDUCE_MAX ? (b > a ? b : a)
                                    : (b < a ? b : a);
    return BF16 ? sl__bf16_from_f32(r) : sl__f16_from_f32(r);
  }
};

// Integers: sums wrap through the unsigned type U. Bool (OR): the sum is
// logical or; max and min compare the bytes, as on the host.
template <typename T, typename U, bool OR = false> struct red_int {
  using type = T;
  sl_reduce_op op;
  __device__ T operator()(T x, T y) const {
    if (op == SL_REDUCE_SUM) return OR ? (T)(x || y) : (T)(U)((U)x + (U)y);
    if (op == SL_REDUCE_MAX) return y > x ? y : x;
    return y < x ? y : x;
  }
};

template <typename T, int V> struct alignas(sizeof(T) * V) pack { T v[V]; };

template <typename R, int V, typename I>
__global__ void reduce_k(typename R::type *d, const typename R::type *s,
                         int64_t n, box_plan p, R r) {
  using P = pack<typename R::type, V>;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    I od, os;
    box_offsets<I>(p, i, od, os);
    P a = ((P *)d)[od];
    const P b = ((const P *)s)[os];
#pragma unroll
    for (int k = 0; k < V; k++)
      a.v[k] = r(a.v[k], b.v[k]);
    ((P *)d)[od] = a;
  }
}

// ---- planning (host) ------------------------------------------------------

// The merged plan of b in elements; *dp and *sp get the box's first
// elements (*sp = *dp for a fill, whose plan follows dst alone).
box_plan plan_make(const sl__box_op *b, size_t es, char **dp, const char **sp) {
  int64_t dstr[SL_MAX_DIMS], sstr[SL_MAX_DIMS], dm = 1, sm = 1, db = 0, sb = 0;
  for (int d = b->ndim - 1; d >= 0; d--) {
    dstr[d] = dm;
    db += b->dst_off[d] * dm;
    dm *= b->dst_dims[d];
    sstr[d] = b->src ? sm : dstr[d];
    if (b->src) {
      sb += b->src_off[d] * sm;
      sm *= b->src_dims[d];
    }
  }
  *dp = (char *)b->dst + (size_t)db * es;
  *sp = b->src ? (const char *)b->src + (size_t)sb * es : *dp;
  box_plan p;
  memset(&p, 0, sizeof p);
  for (int d = 0; d < b->ndim; d++) {
    int64_t e = b->ext[d];
    if (e == 1) continue;
    int l = p.nd - 1;
    if (l >= 0 && p.dstr[l] == e * dstr[d] && p.sstr[l] == e * sstr[d]) {
      p.ext[l] *= e; // the outer dim steps over this one contiguously
      p.dstr[l] = dstr[d];
      p.sstr[l] = sstr[d];
      continue;
    }
    p.ext[p.nd] = e;
    p.dstr[p.nd] = dstr[d];
    p.sstr[p.nd++] = sstr[d];
  }
  if (p.nd == 0) { // one element
    p.nd = 1;
    p.ext[0] = p.dstr[0] = p.sstr[0] = 1;
  }
  return p;
}

bool contiguous(const box_plan &p) {
  return p.nd == 1 && p.dstr[0] == 1 && p.sstr[0] == 1;
}

// Regroups p's elements (es bytes) into units of k of them, when the
// innermost run is contiguous in both buffers, and every stride, the run
// and both pointers are whole units.
bool widen(box_plan *p, int64_t k, size_t es, const void *d, const void *s) {
  int l = p->nd - 1;
  if (p->dstr[l] != 1 || p->sstr[l] != 1 || p->ext[l] % k ||
      !aligned((uintptr_t)k * es, d, s))
    return false;
  for (int i = 0; i < l; i++)
    if (p->dstr[i] % k || p->sstr[i] % k) return false;
  p->ext[l] /= k;
  for (int i = 0; i < l; i++) {
    p->dstr[i] /= k;
    p->sstr[i] /= k;
  }
  return true;
}

int64_t plan_numel(const box_plan &p) {
  int64_t n = 1;
  for (int d = 0; d < p.nd; d++)
    n *= p.ext[d];
  return n;
}

// Whether every element count and offset of p fits 32-bit arithmetic.
bool fits32(const box_plan &p) {
  int64_t n = plan_numel(p), od = 0, os = 0;
  for (int d = 0; d < p.nd; d++) {
    od += (p.ext[d] - 1) * p.dstr[d];
    os += (p.ext[d] - 1) * p.sstr[d];
  }
  return n < INT32_MAX && od < INT32_MAX && os < INT32_MAX;
}

template <typename E>
sl_status move_launch(char *d, const char *s, const unsigned char *pat,
                      const box_plan &p, cudaStream_t cs) {
  E pe;
  memcpy(&pe, pat, sizeof pe);
  int64_t n = plan_numel(p);
  bool fill = s == nullptr, i32 = fits32(p);
  if (fill && i32)
    move_k<E, uint32_t, true>
        <<<blocks_for(n), kThreads, 0, cs>>>((E *)d, nullptr, pe, n, p);
  else if (fill)
    move_k<E, int64_t, true>
        <<<blocks_for(n), kThreads, 0, cs>>>((E *)d, nullptr, pe, n, p);
  else if (i32)
    move_k<E, uint32_t, false>
        <<<blocks_for(n), kThreads, 0, cs>>>((E *)d, (const E *)s, pe, n, p);
  else
    move_k<E, int64_t, false>
        <<<blocks_for(n), kThreads, 0, cs>>>((E *)d, (const E *)s, pe, n, p);
  return launched(fill ? "box fill" : "box store");
}

// A store (s set) or a fill with the es-byte pattern id (s NULL): through
// the widest element, 16 bytes down to es, that p allows.
sl_status box_move(box_plan p, size_t es, char *d, const char *s,
                   const unsigned char *id, cudaStream_t cs) {
  unsigned char pat[16] = {0};
  size_t w = 16;
  for (; w > es; w /= 2)
    if (widen(&p, (int64_t)(w / es), es, d, s ? s : d)) break;
  for (size_t k = 0; id && k < w; k++)
    pat[k] = id[k % es];
  switch (w) {
  case 1: return move_launch<uint8_t>(d, s, pat, p, cs);
  case 2: return move_launch<uint16_t>(d, s, pat, p, cs);
  case 4: return move_launch<uint32_t>(d, s, pat, p, cs);
  case 8: return move_launch<uint64_t>(d, s, pat, p, cs);
  default: return move_launch<uint4>(d, s, pat, p, cs);
  }
}

template <typename R, int V>
void reduce_launch(char *d, const char *s, const box_plan &p, R r,
                   cudaStream_t cs) {
  using T = typename R::type;
  int64_t n = plan_numel(p);
  if (fits32(p))
    reduce_k<R, V, uint32_t>
        <<<blocks_for(n), kThreads, 0, cs>>>((T *)d, (const T *)s, n, p, r);
  else
    reduce_k<R, V, int64_t>
        <<<blocks_for(n), kThreads, 0, cs>>>((T *)d, (const T *)s, n, p, r);
}

// Packs of 16 bytes where p allows, single elements otherwise.
template <typename R>
sl_status box_reduce(box_plan p, char *d, const char *s, R r, cudaStream_t cs) {
  constexpr int V = 16 / sizeof(typename R::type);
  if (widen(&p, V, sizeof(typename R::type), d, s))
    reduce_launch<R, V>(d, s, p, r, cs);
  else
    reduce_launch<R, 1>(d, s, p, r, cs);
  return launched("box reduce");
}

// The host's NaN for an invalid operation (x86: negative, ARM: positive),
// from a subtraction it really performs (volatile: no constant folding,
// whose NaN may differ).
template <typename T> T host_default_nan() {
  volatile T inf = (T)INFINITY;
  return inf - inf;
}

} // namespace

extern "C" sl_status sl__cuda_box(const sl__box_op *b, sl__stream *s) {
  SL_CHECK(sl__box_op_check(b));
  for (int d = 0; d < b->ndim; d++)
    if (b->ext[d] == 0) return SL_OK;
  size_t es = sl_dtype_size(b->dtype);
  char *d;
  const char *sp;
  box_plan p = plan_make(b, es, &d, &sp);
  cudaStream_t cs = stream_of(s);
  if (!b->src) {
    unsigned char id[8];
    sl__elem_fill_identity(b->dtype, b->op, id, 1);
    bool bytes_equal = true;
    for (size_t k = 1; k < es; k++)
      bytes_equal &= id[k] == id[0];
    if (contiguous(p) && bytes_equal)
      return cuda_check(cudaMemsetAsync(d, id[0], (size_t)p.ext[0] * es, cs),
                        "box fill: cudaMemsetAsync");
    return box_move(p, es, d, nullptr, id, cs);
  }
  if (!b->reduce) {
    if (contiguous(p))
      return cuda_check(cudaMemcpyAsync(d, sp, (size_t)p.ext[0] * es,
                                        cudaMemcpyDeviceToDevice, cs),
                        "box store: cudaMemcpyAsync");
    return box_move(p, es, d, sp, nullptr, cs);
  }
  sl_reduce_op op = b->op;
  switch (b->dtype) {
  case SL_DTYPE_F32:
    return box_reduce(p, d, sp, red_float<float>{op, host_default_nan<float>()},
                      cs);
  case SL_DTYPE_F64:
    return box_reduce(p, d, sp,
                      red_float<double>{op, host_default_nan<double>()}, cs);
  case SL_DTYPE_F16:
    return box_reduce(p, d, sp, red_half<false>{op, host_default_nan<float>()},
                      cs);
  case SL_DTYPE_BF16:
    return box_reduce(p, d, sp, red_half<true>{op, host_default_nan<float>()},
                      cs);
  case SL_DTYPE_I8:
    return box_reduce(p, d, sp, red_int<int8_t, uint8_t>{op}, cs);
  case SL_DTYPE_I32:
    return box_reduce(p, d, sp, red_int<int32_t, uint32_t>{op}, cs);
  case SL_DTYPE_I64:
    return box_reduce(p, d, sp, red_int<int64_t, uint64_t>{op}, cs);
  case SL_DTYPE_U8:
    return box_reduce(p, d, sp, red_int<uint8_t, uint8_t>{op}, cs);
  case SL_DTYPE_BOOL:
    return box_reduce(p, d, sp, red_int<uint8_t, uint8_t, true>{op}, cs);
  }
  return sl__fail(SL_EINVAL, "box: unknown dtype %d", (int)b->dtype);
}
