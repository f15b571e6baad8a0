/* sluice kernels — box moves and fills on a device: what a boxing step on
 * GPUs does between its NCCL calls (comm/coll/dev_xchg.c): pack a piece of a
 * shard into a contiguous buffer, unpack (or reduce) a received piece into
 * its place, fill an output with a reduction's identity.
 *
 * They compute what the host's sl__box_move and sl__elem_fill_identity
 * (sbp/sbp_int.h) compute, bit for bit: integers wrap, f16/bf16 reduce
 * through float and round back, bool sums and maxima are logical or and
 * minima logical and, max/min keep the old value unless the new one
 * compares greater/smaller (so a NaN arriving never replaces a number). */
#ifndef SLUICE_KERNELS_BOX_H
#define SLUICE_KERNELS_BOX_H

#include <stdbool.h>
#include <stdint.h>

#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "core_int.h"
#include "device_iface.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One operation on row-major buffers of ndim (0..SL_MAX_DIMS) dims.
 * With src: the box ext at src_off of src (shape src_dims) goes to dst
 * (shape dst_dims) at dst_off, stored, or reduced into dst with op when
 * reduce is set. Without src (NULL): the box ext at dst_off of dst is
 * filled with op's identity. A box with an extent of 0 does nothing. dst
 * and src must not overlap. */
typedef struct sl__box_op {
  sl_dtype dtype;
  int ndim;
  void *dst;
  int64_t dst_dims[SL_MAX_DIMS], dst_off[SL_MAX_DIMS];
  const void *src;
  int64_t src_dims[SL_MAX_DIMS], src_off[SL_MAX_DIMS];
  int64_t ext[SL_MAX_DIMS];
  bool reduce;
  sl_reduce_op op;
} sl__box_op;

/* Checks a box operation (dims, boxes inside their buffers, a known dtype
 * and op): SL_EINVAL saying what is wrong. Both implementations call it. */
sl_status sl__box_op_check(const sl__box_op *b);

/* Runs b on host memory (sl__box_move / sl__elem_fill_identity). */
sl_status sl__box_op_run_host(const sl__box_op *b);

/* Queues b on stream s of the CUDA device holding dst and src (the
 * thread's current device) and returns; done when s gets there. SL_EINVAL
 * from sl__box_op_check, SL_ECUDA with the runtime's message when the
 * launch fails, SL_EUNSUPPORTED in a build without CUDA. */
sl_status sl__cuda_box(const sl__box_op *b, sl__stream *s);

#ifdef __cplusplus
}
#endif
#endif
