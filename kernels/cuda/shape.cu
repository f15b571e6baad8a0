// CUDA kernels of the shape ops (cpu/shape_ops.c): reshape, transpose,
// broadcast_to, slice, concat. They move bytes only, so they take every
// dtype (by element size) and are exact.
//
// transpose, broadcast_to and slice are one strided gather: the output is
// contiguous and element i reads the input at the offset its coordinates
// give under the input's strides, the dims merged first where every
// operand stays contiguous (sl__iter_init_strided, as on the CPU). A
// transpose whose innermost output dim reads with a stride while another
// dim reads contiguously goes through 32 x 32 tiles in shared memory, so
// both the reads and the writes are coalesced. concat copies each input's
// run of every outer row.
#include "cuda_util.cuh"

namespace {

using namespace slc;

template <int ES> struct elem;
template <> struct elem<1> { using type = uint8_t; };
template <> struct elem<2> { using type = uint16_t; };
template <> struct elem<4> { using type = uint32_t; };
template <> struct elem<8> { using type = uint64_t; };

// ---- the strided gather -------------------------------------------------

struct gather_plan {
  int nd;
  int64_t dims[SL_MAX_DIMS];
  int64_t str[SL_MAX_DIMS]; // the input's element strides
};

template <typename E, typename I>
__global__ void gather_k(E *o, const E *x, int64_t n, gather_plan p) {
  for (int64_t i0 = thread_index(); i0 < n; i0 += thread_count()) {
    I i = (I)i0, off = 0;
    for (int d = p.nd - 1; d >= 0; d--) {
      I e = (I)p.dims[d], c = i % e;
      i /= e;
      off += c * (I)p.str[d];
    }
    o[i0] = x[off];
  }
}

// The tiled transpose: dims k (read contiguously, written with stride ok)
// and the last (read with stride xl, written contiguously), the other dims
// in `rest` (their output and input strides).
struct tile_plan {
  int64_t dk, dl, ok, xl;
  int nrest;
  int64_t rdims[SL_MAX_DIMS], rostr[SL_MAX_DIMS], rxstr[SL_MAX_DIMS];
  int64_t tiles_k, tiles_l, tiles; // tiles per plane, in all
};

template <typename E> __global__ void tile_k(E *o, const E *x, tile_plan p) {
  __shared__ E t[32][33];
  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    int64_t plane = tile / (p.tiles_k * p.tiles_l);
    int64_t rem = tile - plane * p.tiles_k * p.tiles_l;
    int64_t i0 = (rem / p.tiles_l) * 32, j0 = (rem % p.tiles_l) * 32;
    int64_t o0 = 0, x0 = 0, r = plane;
    for (int d = p.nrest - 1; d >= 0; d--) {
      int64_t c = r % p.rdims[d];
      r /= p.rdims[d];
      o0 += c * p.rostr[d];
      x0 += c * p.rxstr[d];
    }
    // Read: threadIdx.x walks the contiguous dim k.
    for (int jj = threadIdx.y; jj < 32; jj += blockDim.y) {
      int64_t i = i0 + threadIdx.x, j = j0 + jj;
      if (i < p.dk && j < p.dl) t[jj][threadIdx.x] = x[x0 + i + j * p.xl];
    }
    __syncthreads();
    // Write: threadIdx.x walks the last dim.
    for (int ii = threadIdx.y; ii < 32; ii += blockDim.y) {
      int64_t i = i0 + ii, j = j0 + threadIdx.x;
      if (i < p.dk && j < p.dl) o[o0 + i * p.ok + j] = t[threadIdx.x][ii];
    }
    __syncthreads();
  }
}

// Whether the merged iteration is a transpose worth tiling (the CPU's
// copy_tiled test), and its tile plan.
bool tile_plan_make(const sl__iter *it, tile_plan *p) {
  int last = it->ndim - 1, k = -1;
  for (int d = 0; d < last; d++)
    if (it->strides[1][d] == 1) k = d;
  if (k < 0 || it->strides[1][last] == 1 || it->len < 8 || it->dims[k] < 8)
    return false;
  memset(p, 0, sizeof *p);
  p->dk = it->dims[k];
  p->dl = it->len;
  p->ok = it->strides[0][k];
  p->xl = it->strides[1][last];
  for (int d = 0; d < last; d++) {
    if (d == k) continue;
    p->rdims[p->nrest] = it->dims[d];
    p->rostr[p->nrest] = it->strides[0][d];
    p->rxstr[p->nrest++] = it->strides[1][d];
  }
  p->tiles_k = (p->dk + 31) / 32;
  p->tiles_l = (p->dl + 31) / 32;
  p->tiles = it->rows / p->dk * p->tiles_k * p->tiles_l;
  return true;
}

template <typename E>
sl_status gather_es(void *o, const void *x, const sl__iter &it, int64_t n,
                    cudaStream_t cs) {
  tile_plan tp;
  if (tile_plan_make(&it, &tp)) {
    tile_k<E><<<blocks_for(tp.tiles, 1), dim3(32, 8), 0, cs>>>(
        (E *)o, (const E *)x, tp);
    return launched("transpose");
  }
  gather_plan p;
  memset(&p, 0, sizeof p);
  p.nd = it.ndim;
  for (int d = 0; d < it.ndim; d++) {
    p.dims[d] = it.dims[d];
    p.str[d] = it.strides[1][d];
  }
  // 32-bit index arithmetic when every output index and input offset fits
  // (a slice may read far into a larger input).
  int64_t last = 0;
  for (int d = 0; d < it.ndim; d++)
    last += (it.dims[d] - 1) * it.strides[1][d];
  if (n < INT32_MAX && last < INT32_MAX)
    gather_k<E, int32_t>
        <<<blocks_for(n), kThreads, 0, cs>>>((E *)o, (const E *)x, n, p);
  else
    gather_k<E, int64_t>
        <<<blocks_for(n), kThreads, 0, cs>>>((E *)o, (const E *)x, n, p);
  return launched("strided copy");
}

// dst (contiguous, shape `out`) = the view of src with element strides
// sstride over out's dims.
sl_status gather(size_t es, const sl_shape *out, void *dst, const void *src,
                 const int64_t *sstride, sl__stream *s) {
  int64_t n = sl_shape_numel(out);
  if (n == 0) return SL_OK;
  sl__iter it;
  const int64_t *strides[1] = {sstride};
  sl__iter_init_strided(&it, out, 1, strides);
  cudaStream_t cs = stream_of(s);
  if (it.ndim == 1 && it.strides[1][0] == 1)
    return cuda_check(
        cudaMemcpyAsync(dst, src, (size_t)n * es, cudaMemcpyDeviceToDevice, cs),
        "strided copy: cudaMemcpyAsync");
  switch (es) {
  case 1: return gather_es<uint8_t>(dst, src, it, n, cs);
  case 2: return gather_es<uint16_t>(dst, src, it, n, cs);
  case 4: return gather_es<uint32_t>(dst, src, it, n, cs);
  case 8: return gather_es<uint64_t>(dst, src, it, n, cs);
  default: return sl__fail(SL_EINVAL, "strided copy: element size %zu", es);
  }
}

// ---- reshape --------------------------------------------------------------

sl_status reshape_run(const sl__kernel_ctx *k, sl__stream *s) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n != sl_shape_numel(&k->in_meta[0].shape))
    return sl__fail(SL_EINVAL, "local shards %s and %s differ in size",
                    sl__shape_text(&k->in_meta[0].shape).s,
                    sl__shape_text(&k->out_meta[0].shape).s);
  if (n == 0 || k->out[0] == k->in[0]) return SL_OK;
  return cuda_check(
      cudaMemcpyAsync(k->out[0], k->in[0],
                      (size_t)n * sl_dtype_size(k->in_meta[0].dtype),
                      cudaMemcpyDeviceToDevice, stream_of(s)),
      "reshape: cudaMemcpyAsync");
}

// ---- transpose --------------------------------------------------------------

sl_status transpose_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *x = &k->in_meta[0].shape;
  int n;
  const int64_t *v = sl__attr_ints(k->attrs, "perm", &n);
  if (!v || n != x->ndim)
    return sl__fail(SL_EINVAL, "transpose: perm does not fit a %d-dim input",
                    x->ndim);
  int64_t xs[SL_MAX_DIMS], ss[SL_MAX_DIMS];
  sl_shape_strides(x, xs);
  for (int j = 0; j < x->ndim; j++) {
    int p;
    SL_CHECK(sl__axis_norm("perm entry", v[j], x->ndim, &p));
    ss[j] = xs[p];
  }
  return gather(sl_dtype_size(k->in_meta[0].dtype), &k->out_meta[0].shape,
                k->out[0], k->in[0], ss, s);
}

// ---- broadcast_to -----------------------------------------------------------

sl_status broadcast_to_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *x = &k->in_meta[0].shape, *o = &k->out_meta[0].shape;
  if (!sl__broadcasts_to(x, o))
    return sl__fail(SL_EINVAL, "local shard %s does not broadcast to %s",
                    sl__shape_text(x).s, sl__shape_text(o).s);
  // Strides of x over o's dims: 0 where x repeats (missing or extent 1).
  int64_t ss[SL_MAX_DIMS], st = 1;
  int off = o->ndim - x->ndim;
  for (int d = o->ndim - 1; d >= 0; d--) {
    int xd = d - off;
    if (xd < 0 || x->dims[xd] == 1) {
      ss[d] = 0;
    } else {
      ss[d] = st;
      st *= x->dims[xd];
    }
  }
  return gather(sl_dtype_size(k->in_meta[0].dtype), o, k->out[0], k->in[0], ss,
                s);
}

// ---- slice ----------------------------------------------------------------

sl_status slice_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *x = &k->in_meta[0].shape;
  const sl_shape *g = &k->in_global[0];
  int axis;
  SL_CHECK(
      sl__axis_norm("axis", sl__attr_int(k->attrs, "axis", 0), g->ndim, &axis));
  // The sliced axis is never split: the global range applies to the shard.
  int64_t len = g->dims[axis];
  int64_t a = sl__attr_int(k->attrs, "start", 0);
  int64_t start = a < 0 ? a + len : a;
  if (x->ndim != g->ndim || x->dims[axis] != len)
    return sl__fail(SL_EINVAL, "axis %d is split; slice needs it whole", axis);
  if (start < 0 || start > len)
    return sl__fail(SL_EINVAL, "slice start %lld out of range for extent %lld",
                    (long long)a, (long long)len);
  int64_t xs[SL_MAX_DIMS];
  sl_shape_strides(x, xs);
  size_t es = sl_dtype_size(k->in_meta[0].dtype);
  if (sl_shape_numel(&k->out_meta[0].shape) == 0) return SL_OK;
  return gather(es, &k->out_meta[0].shape, k->out[0],
                (const char *)k->in[0] + (size_t)(start * xs[axis]) * es, xs,
                s);
}

// ---- concat -----------------------------------------------------------------

// Output row r (of `outer`), element c of its row_len: input t with
// cum[t] <= c < cum[t + 1], its element r * (cum[t + 1] - cum[t]) + c -
// cum[t].
struct concat_plan {
  int n;
  const void *src[SL_OP_MAX_INPUTS];
  int64_t cum[SL_OP_MAX_INPUTS + 1];
  int64_t row_len, total;
};

template <typename E> __global__ void concat_k(E *o, concat_plan p) {
  for (int64_t i = thread_index(); i < p.total; i += thread_count()) {
    int64_t r = i / p.row_len, c = i - r * p.row_len;
    int t = 0;
    while (c >= p.cum[t + 1])
      t++;
    int64_t run = p.cum[t + 1] - p.cum[t];
    o[i] = ((const E *)p.src[t])[r * run + (c - p.cum[t])];
  }
}

sl_status concat_run(const sl__kernel_ctx *k, sl__stream *s) {
  const sl_shape *o = &k->out_meta[0].shape;
  int axis;
  SL_CHECK(
      sl__axis_norm("axis", sl__attr_int(k->attrs, "axis", 0), o->ndim, &axis));
  if (k->n_in < 1 || k->n_in > SL_OP_MAX_INPUTS)
    return sl__fail(SL_EINVAL, "concat: %d inputs", k->n_in);
  concat_plan p;
  memset(&p, 0, sizeof p);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++)
    outer *= o->dims[d];
  for (int d = axis + 1; d < o->ndim; d++)
    inner *= o->dims[d];
  p.n = k->n_in;
  for (int i = 0; i < k->n_in; i++) {
    p.src[i] = k->in[i];
    p.cum[i + 1] = p.cum[i] + k->in_meta[i].shape.dims[axis] * inner;
  }
  p.row_len = p.cum[k->n_in];
  if (p.row_len != o->dims[axis] * inner)
    return sl__fail(SL_EINVAL, "concat: inputs do not fill the output %s",
                    sl__shape_text(o).s);
  p.total = outer * p.row_len;
  if (p.total == 0) return SL_OK;
  cudaStream_t cs = stream_of(s);
  unsigned b = blocks_for(p.total);
  switch (sl_dtype_size(k->out_meta[0].dtype)) {
  case 1:
    concat_k<uint8_t><<<b, kThreads, 0, cs>>>((uint8_t *)k->out[0], p);
    break;
  case 2:
    concat_k<uint16_t><<<b, kThreads, 0, cs>>>((uint16_t *)k->out[0], p);
    break;
  case 4:
    concat_k<uint32_t><<<b, kThreads, 0, cs>>>((uint32_t *)k->out[0], p);
    break;
  default:
    concat_k<uint64_t><<<b, kThreads, 0, cs>>>((uint64_t *)k->out[0], p);
    break;
  }
  return launched("concat");
}

} // namespace

#define KERNEL(NAME)                                                           \
  extern "C" const sl__cuda_kernel sl__cuda_##NAME = {NAME##_run, NULL};

KERNEL(reshape)
KERNEL(transpose)
KERNEL(broadcast_to)
KERNEL(slice)
KERNEL(concat)
