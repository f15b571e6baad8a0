/* Shared helpers for op definitions and CPU kernels (see kernel_util.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "cpu/blas.h"
#include "cpu/kernel_util.h"

/* ---- instruction sets ------------------------------------------------------
 */

static atomic_int g_isa_forced = -1;

static sl__isa isa_cpu(void) {
  const sl__cpu_features *f = sl__cpu_features_get();
  return f->avx512 ? SL__ISA_AVX512 : f->avx2 ? SL__ISA_AVX2 : SL__ISA_SSE;
}

sl__isa sl__isa_get(void) {
  /* Cached: dispatchers call this once per row. */
  static atomic_int cached = -1;
  int forced = atomic_load_explicit(&g_isa_forced, memory_order_relaxed);
  int c = atomic_load_explicit(&cached, memory_order_relaxed);
  if (c < 0) {
    c = (int)isa_cpu();
    atomic_store_explicit(&cached, c, memory_order_relaxed);
  }
  return (sl__isa)(forced >= 0 && forced < c ? forced : c);
}

sl__isa sl__isa_force(int isa) {
  atomic_store(&g_isa_forced, isa < 0 ? -1 : isa);
  return sl__isa_get();
}

const char *sl__isa_name(sl__isa isa) {
  return isa == SL__ISA_AVX512 ? "avx512"
         : isa == SL__ISA_AVX2 ? "avx2"
                               : "sse";
}

/* ---- argument checks ------------------------------------------------------
 */

sl_status sl__attr_shape(const sl__attrs *at, const char *name, sl_shape *out) {
  memset(out, 0, sizeof *out);
  if (!sl__attr_has(at, name))
    return sl__fail(SL_EINVAL, "attribute '%s' (a list of extents) missing",
                    name);
  int n;
  const int64_t *v = sl__attr_ints(at, name, &n);
  if (!v)
    return sl__fail(SL_EINVAL, "attribute '%s' is not a list of extents", name);
  for (int i = 0; i < n; i++)
    if (v[i] < 0)
      return sl__fail(SL_EINVAL, "attribute '%s': extent %lld is negative",
                      name, (long long)v[i]);
  sl_status st = sl_shape_make(n, v, out);
  if (st != SL_OK)
    return sl__fail(st, "attribute '%s': not a valid shape", name);
  return SL_OK;
}

sl_status sl__attr_dtype(const sl__attrs *at, const char *name, sl_dtype dflt,
                         unsigned allowed, sl_dtype *out) {
  int64_t v = sl__attr_int(at, name, (int64_t)dflt);
  *out = dflt;
  if (v < 0 || v >= SL_DTYPE_COUNT)
    return sl__fail(SL_EINVAL, "attribute '%s': %lld is not a dtype", name,
                    (long long)v);
  char what[64];
  snprintf(what, sizeof what, "attribute '%s'", name);
  SL_CHECK(sl__check_dtype(what, (sl_dtype)v, allowed));
  *out = (sl_dtype)v;
  return SL_OK;
}

/* ---- signature lists ------------------------------------------------------
 */

void sl__sig_list_init(sl__sig_list *l, sl__sbp_sig *sigs, int max, int n_in,
                       int n_out) {
  memset(l, 0, sizeof *l);
  l->sigs = sigs;
  l->max = max < 0 ? 0 : max;
  l->n_in = n_in;
  l->n_out = n_out;
}

sl__sbp_sig *sl__sig_begin(sl__sig_list *l) {
  sl__sbp_sig *s = l->n < l->max ? &l->sigs[l->n] : &l->scratch;
  for (int i = 0; i < SL_OP_MAX_INPUTS; i++)
    s->in[i] = sl_sbp_broadcast();
  for (int i = 0; i < SL_OP_MAX_OUTPUTS; i++)
    s->out[i] = sl_sbp_broadcast();
  s->even = false;
  return s;
}

static bool sig_equal(const sl__sig_list *l, const sl__sbp_sig *a,
                      const sl__sbp_sig *b) {
  for (int i = 0; i < l->n_in; i++)
    if (!sl_sbp_equal(a->in[i], b->in[i])) return false;
  for (int i = 0; i < l->n_out; i++)
    if (!sl_sbp_equal(a->out[i], b->out[i])) return false;
  return true;
}

void sl__sig_commit(sl__sig_list *l) {
  if (l->n >= l->max) return; /* the scratch entry: dropped */
  const sl__sbp_sig *s = &l->sigs[l->n];
  bool all_b = true;
  for (int i = 0; i < l->n_in; i++)
    all_b = all_b && s->in[i].kind == SL_SBP_BROADCAST;
  for (int i = 0; i < l->n_out; i++)
    all_b = all_b && s->out[i].kind == SL_SBP_BROADCAST;
  if (all_b) return;
  for (int k = 0; k < l->n; k++)
    if (sig_equal(l, &l->sigs[k], s)) return;
  l->n++;
}

/* ---- data movement --------------------------------------------------------
 */

#define COPY_ROWS(T)                                                           \
  do {                                                                         \
    T *o = dst;                                                                \
    const T *x = src;                                                          \
    sl__iter_pos p;                                                            \
    sl__iter_seek(&it, 0, &p);                                                 \
    for (int64_t r = 0; r < it.rows; r++, sl__iter_next(&it, &p)) {            \
      T *op = o + p.off[0];                                                    \
      const T *xp = x + p.off[1];                                              \
      for (int64_t j = 0; j < n; j++)                                          \
        op[j] = xp[j * s];                                                     \
    }                                                                          \
  } while (0)

/* Transposes: the innermost output dim reads with a stride while another
 * dim k reads contiguously. Copying the (k, last) plane in square tiles
 * keeps the reads of a tile within a few cache lines per column instead
 * of one line per element. */
#define TILE 32
#define COPY_TILES(T)                                                          \
  do {                                                                         \
    T *o = dst;                                                                \
    const T *x = src;                                                          \
    for (int64_t i0 = 0; i0 < dk; i0 += TILE)                                  \
      for (int64_t j0 = 0; j0 < dl; j0 += TILE) {                              \
        int64_t i1 = SL_MIN(i0 + TILE, dk), j1 = SL_MIN(j0 + TILE, dl);        \
        for (int64_t i = i0; i < i1; i++)                                      \
          for (int64_t j = j0; j < j1; j++)                                    \
            o[o0 + i * ok + j] = x[x0 + i + j * xl];                           \
      }                                                                        \
  } while (0)

static bool copy_tiled(size_t es, const sl__iter *it, void *dst,
                       const void *src) {
  int last = it->ndim - 1, k = -1;
  for (int d = 0; d < last; d++)
    if (it->strides[1][d] == 1) k = d;
  if (k < 0 || it->strides[1][last] == 1 || it->len < 8 || it->dims[k] < 8 ||
      (es != 1 && es != 2 && es != 4 && es != 8))
    return false;
  int64_t dk = it->dims[k], dl = it->len;
  int64_t ok = it->strides[0][k], xl = it->strides[1][last];
  int64_t outer = it->rows / dk;
  for (int64_t r = 0; r < outer; r++) {
    /* Offsets of the other dims (all but k and the last), row-major. */
    int64_t o0 = 0, x0 = 0, rest = r;
    for (int d = last - 1; d >= 0; d--) {
      if (d == k) continue;
      int64_t i = rest % it->dims[d];
      rest /= it->dims[d];
      o0 += i * it->strides[0][d];
      x0 += i * it->strides[1][d];
    }
    switch (es) {
    case 1: COPY_TILES(uint8_t); break;
    case 2: COPY_TILES(uint16_t); break;
    case 4: COPY_TILES(uint32_t); break;
    default: COPY_TILES(uint64_t); break;
    }
  }
  return true;
}

void sl__copy_strided(size_t es, int ndim, const int64_t *dims, void *dst,
                      const void *src, const int64_t *sstride) {
  sl_shape shape;
  shape.ndim = ndim;
  for (int d = 0; d < ndim; d++)
    shape.dims[d] = dims[d];
  sl__iter it;
  const int64_t *strides[1] = {sstride};
  sl__iter_init_strided(&it, &shape, 1, strides);
  if (it.empty) return;
  int64_t n = it.len, s = it.strides[1][it.ndim - 1];
  if (s == 1) {
    sl__iter_pos p;
    sl__iter_seek(&it, 0, &p);
    for (int64_t r = 0; r < it.rows; r++, sl__iter_next(&it, &p))
      memcpy((char *)dst + (size_t)p.off[0] * es,
             (const char *)src + (size_t)p.off[1] * es, (size_t)n * es);
    return;
  }
  if (copy_tiled(es, &it, dst, src)) return;
  switch (es) {
  case 1: COPY_ROWS(uint8_t); break;
  case 2: COPY_ROWS(uint16_t); break;
  case 4: COPY_ROWS(uint32_t); break;
  case 8: COPY_ROWS(uint64_t); break;
  default: {
    sl__iter_pos p;
    sl__iter_seek(&it, 0, &p);
    for (int64_t r = 0; r < it.rows; r++, sl__iter_next(&it, &p))
      for (int64_t j = 0; j < n; j++)
        memcpy((char *)dst + (size_t)(p.off[0] + j) * es,
               (const char *)src + (size_t)(p.off[1] + j * s) * es, es);
  }
  }
}

/* ---- global positions -----------------------------------------------------
 */

int64_t sl__shape_rows(const sl_shape *s) {
  int64_t r = 1;
  for (int d = 0; d + 1 < s->ndim; d++)
    r *= s->dims[d];
  return r;
}

int64_t sl__shape_len(const sl_shape *s) {
  return s->ndim ? s->dims[s->ndim - 1] : 1;
}

int64_t sl__slice_row_global(const sl_slice *slice, const sl_shape *global,
                             int64_t r, int64_t *pos) {
  int nd = slice->ndim;
  int64_t p[SL_MAX_DIMS];
  if (nd == 0) return 0;
  p[nd - 1] = slice->start[nd - 1];
  for (int d = nd - 2; d >= 0; d--) {
    int64_t e = slice->extent[d];
    int64_t i = e ? r % e : 0;
    r = e ? r / e : 0;
    p[d] = slice->start[d] + i;
  }
  int64_t flat = 0;
  for (int d = 0; d < nd; d++)
    flat = flat * global->dims[d] + p[d];
  if (pos) memcpy(pos, p, (size_t)nd * sizeof *p);
  return flat;
}
