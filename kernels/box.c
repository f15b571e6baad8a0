/* Box operations: the argument check both implementations share and the
 * host one (kernels/box.h; the CUDA one is cuda/box.cu). */
#include "box.h"

#include "sbp_int.h"

static bool known_dtype(sl_dtype dt) {
  switch (dt) {
  case SL_DTYPE_F32:
  case SL_DTYPE_F64:
  case SL_DTYPE_F16:
  case SL_DTYPE_BF16:
  case SL_DTYPE_I8:
  case SL_DTYPE_I32:
  case SL_DTYPE_I64:
  case SL_DTYPE_U8:
  case SL_DTYPE_BOOL: return true;
  }
  return false;
}

/* Whether the box ext at off lies inside dims (an empty box always does). */
static bool box_inside(int ndim, const int64_t *dims, const int64_t *off,
                       const int64_t *ext) {
  bool empty = false;
  for (int d = 0; d < ndim; d++) {
    if (dims[d] < 0 || ext[d] < 0) return false;
    empty |= ext[d] == 0;
  }
  if (empty) return true;
  for (int d = 0; d < ndim; d++)
    if (off[d] < 0 || off[d] > dims[d] - ext[d]) return false;
  return true;
}

sl_status sl__box_op_check(const sl__box_op *b) {
  if (!b) return sl__fail(SL_EINVAL, "box: no operation");
  if (b->ndim < 0 || b->ndim > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "box: %d dims (at most %d)", b->ndim,
                    SL_MAX_DIMS);
  if (!known_dtype(b->dtype))
    return sl__fail(SL_EINVAL, "box: unknown dtype %d", (int)b->dtype);
  if ((b->reduce || !b->src) &&
      (b->op < SL_REDUCE_SUM || b->op > SL_REDUCE_MIN))
    return sl__fail(SL_EINVAL, "box: unknown reduce op %d", (int)b->op);
  if (!box_inside(b->ndim, b->dst_dims, b->dst_off, b->ext))
    return sl__fail(SL_EINVAL, "box: the box does not fit the destination");
  if (b->src && !box_inside(b->ndim, b->src_dims, b->src_off, b->ext))
    return sl__fail(SL_EINVAL, "box: the box does not fit the source");
  int64_t n = 1;
  for (int d = 0; d < b->ndim; d++)
    n *= b->ext[d];
  if (n > 0 && !b->dst)
    return sl__fail(SL_EINVAL, "box: no destination buffer");
  return SL_OK;
}

sl_status sl__box_op_run_host(const sl__box_op *b) {
  SL_CHECK(sl__box_op_check(b));
  if (b->src) {
    sl__box_move(b->dtype, b->ndim, b->dst, b->dst_dims, b->dst_off, b->src,
                 b->src_dims, b->src_off, b->ext, b->reduce, b->op);
    return SL_OK;
  }
  /* A fill: identity rows of the box's last dim. */
  int64_t n = 1;
  for (int d = 0; d < b->ndim; d++)
    n *= b->ext[d];
  if (n == 0) return SL_OK;
  size_t es = sl_dtype_size(b->dtype);
  int64_t run = b->ndim ? b->ext[b->ndim - 1] : 1;
  int64_t idx[SL_MAX_DIMS] = {0};
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < b->ndim; d++)
      off = off * b->dst_dims[d] + b->dst_off[d] +
            (d == b->ndim - 1 ? 0 : idx[d]);
    sl__elem_fill_identity(b->dtype, b->op, (char *)b->dst + (size_t)off * es,
                           run);
    int d = b->ndim - 2;
    for (; d >= 0; d--) {
      if (++idx[d] < b->ext[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return SL_OK;
  }
}
