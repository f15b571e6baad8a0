/* Shard geometry: balanced split ranges, the slice each rank holds, slice
 * intersection, and the mesh walks the planner and verifier share. */
#include <string.h>

#include "sbp_int.h"

void sl_split_range(int64_t len, int n, int i, int64_t *start,
                    int64_t *extent) {
  if (len <= 0 || n <= 0 || i < 0 || i >= n) {
    *start = 0;
    *extent = 0;
    return;
  }
  /* The first len % n parts get one extra element. */
  int64_t q = len / n, rem = len % n;
  *start = (int64_t)i * q + (i < rem ? i : rem);
  *extent = q + (i < rem ? 1 : 0);
}

int sl__split_part_of(int64_t len, int n, int64_t x) {
  int64_t q = len / n, rem = len % n;
  int64_t big = rem * (q + 1); /* elements held by the larger parts */
  if (x < big) return (int)(x / (q + 1));
  return (int)(rem + (x - big) / q); /* q > 0 here since x < len */
}

unsigned sl__nd_sbp_mask(const sl_nd_sbp *s, sl_sbp_kind kind) {
  unsigned m = 0;
  for (int i = 0; i < s->ndim; i++)
    if (s->sbp[i].kind == kind) m |= 1u << i;
  return m;
}

bool sl__nd_sbp_partial_op(const sl_nd_sbp *s, sl_reduce_op *op) {
  for (int i = 0; i < s->ndim; i++)
    if (s->sbp[i].kind == SL_SBP_PARTIAL) {
      *op = s->sbp[i].reduce;
      return true;
    }
  return false;
}

bool sl__nd_sbp_fetch_rank(const sl_placement *p, const sl_nd_sbp *s,
                           int rank) {
  int coord[SL_MAX_MESH_AXES];
  sl_placement_rank_coord(p, rank, coord);
  for (int m = 0; m < s->ndim; m++)
    if (s->sbp[m].kind == SL_SBP_BROADCAST && coord[m] != 0) return false;
  return true;
}

int sl__mesh_stride(const sl_placement *p, int axis) {
  int stride = 1;
  for (int k = sl_placement_mesh_ndim(p) - 1; k > axis; k--)
    stride *= sl_placement_mesh_dim(p, k);
  return stride;
}

int sl__mesh_ranks(const sl_placement *p, int rank, unsigned free_mask,
                   int *out) {
  int ndim = sl_placement_mesh_ndim(p);
  int coord[SL_MAX_MESH_AXES], dim[SL_MAX_MESH_AXES], stride[SL_MAX_MESH_AXES];
  sl_placement_rank_coord(p, rank, coord);
  int base = rank, count = 1;
  for (int k = 0; k < ndim; k++) {
    dim[k] = sl_placement_mesh_dim(p, k);
    stride[k] = sl__mesh_stride(p, k);
    if (free_mask & (1u << k)) {
      base -= coord[k] * stride[k];
      count *= dim[k];
    }
  }
  /* Odometer over the free axes, the last one fastest (row-major). */
  int idx[SL_MAX_MESH_AXES] = {0};
  for (int n = 0; n < count; n++) {
    int r = base;
    for (int k = 0; k < ndim; k++)
      r += idx[k] * stride[k];
    out[n] = r;
    for (int k = ndim - 1; k >= 0; k--) {
      if (!(free_mask & (1u << k))) continue;
      if (++idx[k] < dim[k]) break;
      idx[k] = 0;
    }
  }
  return count;
}

void sl__local_slice(const sl_shape *global, const sl_placement *p,
                     const sl_nd_sbp *s, int rank, sl_slice *out) {
  memset(out, 0, sizeof *out);
  out->ndim = global->ndim;
  for (int d = 0; d < global->ndim; d++)
    out->extent[d] = global->dims[d];
  int coord[SL_MAX_MESH_AXES];
  sl_placement_rank_coord(p, rank, coord);
  /* Mesh axis by mesh axis: each split divides the current part. */
  for (int k = 0; k < s->ndim; k++) {
    if (s->sbp[k].kind != SL_SBP_SPLIT) continue;
    int a = s->sbp[k].axis;
    int64_t st, ext;
    sl_split_range(out->extent[a], sl_placement_mesh_dim(p, k), coord[k], &st,
                   &ext);
    out->start[a] += st;
    out->extent[a] = ext;
  }
}

sl_status sl_local_slice(const sl_shape *global, const sl_placement *p,
                         const sl_nd_sbp *s, int rank, sl_slice *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!global || !p || !s || !out)
    return sl__fail(SL_EINVAL, "local slice: NULL argument");
  if (rank < 0 || rank >= sl_placement_size(p))
    return sl__fail(SL_EINVAL, "local slice: rank %d out of range [0, %d)",
                    rank, sl_placement_size(p));
  if (global->ndim < 0 || global->ndim > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "local slice: shape has %d dims", global->ndim);
  if (s->ndim != sl_placement_mesh_ndim(p))
    return sl__fail(SL_EINVAL,
                    "local slice: nd-SBP has %d entries for a "
                    "%d-axis mesh",
                    s->ndim, sl_placement_mesh_ndim(p));
  for (int k = 0; k < s->ndim; k++)
    if (s->sbp[k].kind == SL_SBP_SPLIT &&
        (s->sbp[k].axis < 0 || s->sbp[k].axis >= global->ndim))
      return sl__fail(SL_EINVAL,
                      "local slice: split axis %d out of range for "
                      "a %d-dim shape",
                      s->sbp[k].axis, global->ndim);
  sl__local_slice(global, p, s, rank, out);
  return SL_OK;
}

int64_t sl_slice_numel(const sl_slice *s) {
  int64_t n = 1;
  for (int d = 0; d < s->ndim; d++)
    n *= s->extent[d];
  return n;
}

bool sl_slice_intersect(const sl_slice *a, const sl_slice *b, sl_slice *out) {
  sl_slice r;
  memset(&r, 0, sizeof r);
  r.ndim = a->ndim;
  bool overlap = a->ndim == b->ndim;
  for (int d = 0; overlap && d < a->ndim; d++) {
    int64_t lo = SL_MAX(a->start[d], b->start[d]);
    int64_t hi = SL_MIN(a->start[d] + a->extent[d], b->start[d] + b->extent[d]);
    if (hi <= lo) overlap = false;
    r.start[d] = lo;
    r.extent[d] = hi - lo;
  }
  if (!overlap) {
    memset(&r, 0, sizeof r);
    r.ndim = a->ndim;
  }
  *out = r;
  return overlap;
}
