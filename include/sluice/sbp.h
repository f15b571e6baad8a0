/* sluice — SBP signatures and local shards of global tensors.
 *
 * S(a) splits tensor axis a across a mesh axis, B broadcasts (every rank
 * holds the whole value), P / P(max) / P(min) hold partial values whose
 * sum / max / min is the logical value. An nd-SBP has one SBP per mesh axis:
 * "(S(0),B)". Splits are balanced and may be uneven: splitting extent L in n
 * parts gives the first L mod n parts one extra element, so parts may be
 * empty. Splits apply mesh axis by mesh axis: axis 0 splits the global
 * tensor, axis 1 splits each of those parts, and so on. */
#ifndef SLUICE_SBP_H
#define SLUICE_SBP_H

#include <sluice/core.h>
#include <sluice/placement.h>
#include <sluice/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_sbp_kind {
  SL_SBP_SPLIT = 0,
  SL_SBP_BROADCAST = 1,
  SL_SBP_PARTIAL = 2,
} sl_sbp_kind;

typedef enum sl_reduce_op {
  SL_REDUCE_SUM = 0,
  SL_REDUCE_MAX = 1,
  SL_REDUCE_MIN = 2,
} sl_reduce_op;

/* "sum", "max", "min". */
SL_API const char *sl_reduce_op_name(sl_reduce_op op);

/* One SBP: axis is meaningful for SPLIT, reduce for PARTIAL. */
typedef struct sl_sbp {
  sl_sbp_kind kind;
  int axis;
  sl_reduce_op reduce;
} sl_sbp;

typedef struct sl_nd_sbp {
  int ndim;
  sl_sbp sbp[SL_MAX_MESH_AXES];
} sl_nd_sbp;

SL_API sl_sbp sl_sbp_split(int axis);
SL_API sl_sbp sl_sbp_broadcast(void);
SL_API sl_sbp sl_sbp_partial(sl_reduce_op op);
SL_API bool sl_sbp_equal(sl_sbp a, sl_sbp b);
SL_API bool sl_nd_sbp_equal(const sl_nd_sbp *a, const sl_nd_sbp *b);

/* Parses "S(0)", "B", "P", "P(sum)", "P(max)", "P(min)". Whitespace is
 * allowed around tokens. SL_EINVAL naming the bad token otherwise. */
SL_API sl_status sl_sbp_parse(const char *text, sl_sbp *out);
/* Parses "(S(0),B)" or a single SBP (a 1-axis nd-SBP). */
SL_API sl_status sl_nd_sbp_parse(const char *text, sl_nd_sbp *out);
/* "S(0)", "B", "P", "P(max)", "P(min)" into buf like snprintf. */
SL_API int sl_sbp_print(sl_sbp s, char *buf, size_t size);
/* "(S(0),B)"; a 1-axis nd-SBP prints as its single SBP. */
SL_API int sl_nd_sbp_print(const sl_nd_sbp *s, char *buf, size_t size);

/* Checks that an nd-SBP fits a tensor on a placement: one entry per mesh
 * axis, split axes within the shape's rank, and partial entries all of the
 * same reduce op (a mix has no single logical value). SL_EINVAL with the
 * reason otherwise. */
SL_API sl_status sl_nd_sbp_check(const sl_nd_sbp *s, const sl_placement *p,
                                 const sl_shape *shape);

/* A box inside a tensor: start and extent per dimension. */
typedef struct sl_slice {
  int ndim;
  int64_t start[SL_MAX_DIMS];
  int64_t extent[SL_MAX_DIMS];
} sl_slice;

/* The part [start, start+extent) of extent L that part i of n gets under a
 * balanced split. */
SL_API void sl_split_range(int64_t len, int n, int i, int64_t *start,
                           int64_t *extent);

/* The slice of the global tensor that rank holds (for B and P entries the
 * whole extent of the current part). Its extents are the local shard's
 * shape. Arguments must have passed sl_nd_sbp_check. */
SL_API sl_status sl_local_slice(const sl_shape *global, const sl_placement *p,
                                const sl_nd_sbp *s, int rank, sl_slice *out);

/* Intersection of two slices of the same tensor. Returns false (and an
 * empty *out) when they do not overlap or either is empty. */
SL_API bool sl_slice_intersect(const sl_slice *a, const sl_slice *b,
                               sl_slice *out);
SL_API int64_t sl_slice_numel(const sl_slice *s);

#ifdef __cplusplus
}
#endif
#endif
