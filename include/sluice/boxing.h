/* sluice — the boxing planner: how a global tensor moves from one
 * (placement, nd-SBP) to another, what it costs, and a reference executor
 * that checks a plan on real data.
 *
 * A plan is an ordered list of steps. All steps of a plan index devices by
 * the plan's ranks: the source placement's ranks first, then the target
 * placement's devices that the source does not have, in target rank order.
 * When source and target placements are equal, plan ranks are placement
 * ranks. Between placements of different device types (cpu and cuda) no
 * device is shared: the target's ranks all follow the source's. */
#ifndef SLUICE_BOXING_H
#define SLUICE_BOXING_H

#include <sluice/core.h>
#include <sluice/placement.h>
#include <sluice/sbp.h>
#include <sluice/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_boxing_op {
  SL_BOXING_ALL_REDUCE = 0,
  SL_BOXING_REDUCE_SCATTER = 1,
  SL_BOXING_ALL_GATHER = 2,
  SL_BOXING_ALL_TO_ALL = 3,
  SL_BOXING_SLICE = 4,
  SL_BOXING_ZERO = 5,
  SL_BOXING_SEND_RECV = 6,
  SL_BOXING_COPY = 7,
} sl_boxing_op;

/* "all_reduce", "reduce_scatter", ... as in DESIGN.md. */
SL_API const char *sl_boxing_op_name(sl_boxing_op op);

/* α-β cost model: a message of b bytes over a link costs
 * latency_us + b / bandwidth. Links between devices of one node use the
 * intra-node figures, links between nodes the inter-node ones. */
typedef struct sl_boxing_cost {
  double intra_bandwidth_gbps; /* GB/s (1e9 bytes per second) */
  double intra_latency_us;
  double inter_bandwidth_gbps;
  double inter_latency_us;
} sl_boxing_cost;

/* Default figures for a device type (docs/boxing.md lists them). */
SL_API sl_boxing_cost sl_boxing_cost_default(sl_device_type t);

typedef struct sl_boxing_route sl_boxing_route;

/* Plans the conversion of a tensor of the given shape and dtype from
 * (src, src_sbp) to (dst, dst_sbp). cost may be NULL for the source device
 * type's defaults. SL_EINVAL when either side fails sl_nd_sbp_check. The
 * device types may differ: the plan then moves every shard between devices
 * (copy or send_recv). */
SL_API sl_status sl_boxing_route_create(
    const sl_shape *shape, sl_dtype dt, const sl_placement *src,
    const sl_nd_sbp *src_sbp, const sl_placement *dst, const sl_nd_sbp *dst_sbp,
    const sl_boxing_cost *cost, sl_boxing_route **out);
SL_API void sl_boxing_route_destroy(sl_boxing_route *plan);

/* Plan ranks (see the top of this file). */
SL_API int sl_boxing_route_rank_count(const sl_boxing_route *plan);
SL_API void sl_boxing_route_rank_device(const sl_boxing_route *plan, int rank,
                                        int *node, int *device);
/* The device type of a plan rank (its side's; the source's for a bad rank). */
SL_API sl_device_type
sl_boxing_route_rank_device_type(const sl_boxing_route *plan, int rank);
/* Totals over all steps: bytes each plan rank sends (rank_count entries) and
 * the predicted time, the sum of the steps' times. */
SL_API const int64_t *sl_boxing_route_bytes_sent(const sl_boxing_route *plan);
SL_API double sl_boxing_route_predicted_us(const sl_boxing_route *plan);

SL_API int sl_boxing_route_step_count(const sl_boxing_route *plan);
SL_API sl_boxing_op sl_boxing_step_op(const sl_boxing_route *plan, int step);
/* The reduce op of all_reduce / reduce_scatter / send_recv of partial
 * values / zero (whose fill is that op's identity); false when the step
 * reduces nothing. */
SL_API bool sl_boxing_step_reduce(const sl_boxing_route *plan, int step,
                                  sl_reduce_op *op);
/* The mesh axis whose sub-groups the step runs on, or -1 for steps over
 * whole placements (send_recv, copy). */
SL_API int sl_boxing_step_mesh_axis(const sl_boxing_route *plan, int step);
/* The layout before and after the step. A step between placements goes
 * from the source placement to the target one. A B -> P(max)/P(min) change
 * moves no data and emits no step: it shows only as a difference between
 * one step's `to` and the next step's `from` (or the plan's target). */
SL_API void sl_boxing_step_layout(const sl_boxing_route *plan, int step,
                                  sl_nd_sbp *from, sl_nd_sbp *to);
/* The step's device groups, as lists of plan ranks: the sub-groups along
 * the step's mesh axis, or for send_recv and copy one group of every plan
 * rank. */
SL_API int sl_boxing_step_group_count(const sl_boxing_route *plan, int step);
SL_API int sl_boxing_step_group(const sl_boxing_route *plan, int step,
                                int group, const int **ranks);
/* Bytes each plan rank sends in this step (rank_count entries). */
SL_API const int64_t *sl_boxing_step_bytes_sent(const sl_boxing_route *plan,
                                                int step);
SL_API double sl_boxing_step_predicted_us(const sl_boxing_route *plan,
                                          int step);

/* The point-to-point pieces of a send_recv or copy step (0 for other
 * steps). Piece i moves the part *slice (global coordinates) of plan rank
 * *src's shard to plan rank *dst, which reduces it into its buffer with the
 * step's reduce op when *reduce is true (partial sources) and stores it
 * otherwise. Out-parameters may be NULL. SL_EINVAL for an index out of
 * range. */
SL_API int sl_boxing_step_piece_count(const sl_boxing_route *plan, int step);
SL_API sl_status sl_boxing_step_piece(const sl_boxing_route *plan, int step,
                                      int piece, int *src, int *dst,
                                      sl_slice *slice, bool *reduce);
/* Whether a send_recv step first fills plan rank's target buffer with the
 * identity of *op (receivers of partial pieces, and the members of a
 * partial target that receive nothing); false otherwise. */
SL_API bool sl_boxing_step_fill(const sl_boxing_route *plan, int step, int rank,
                                sl_reduce_op *op);

/* Reference executor: runs the plan on in-memory shards. src_shards[r] is
 * source rank r's local shard (shape from sl_local_slice), dst_shards[r] a
 * caller-allocated buffer of target rank r's shard size, which it fills.
 * Steps move data between per-rank buffers exactly as the collectives
 * would, so a wrong plan gives wrong shards. */
SL_API sl_status sl_boxing_execute(const sl_boxing_route *plan,
                                   const void *const *src_shards,
                                   void *const *dst_shards);

/* What sl_boxing_verify found at its first mismatch. */
typedef struct sl_boxing_mismatch {
  int rank;        /* target placement rank */
  int64_t index;   /* flat index into that rank's shard */
  double expected; /* the logical value there */
  double got;      /* what the shards reduce to there */
} sl_boxing_mismatch;

/* Fills a random integer-valued logical tensor from seed, builds the source
 * shards from it (partial shards: random parts that reduce to the value),
 * runs the plan, and checks each target rank's shard against the logical
 * tensor (for partial targets: the reduction over the partial group).
 * SL_OK when every value matches, SL_EMISMATCH with *mismatch filled at the
 * first difference (mismatch may be NULL). */
SL_API sl_status sl_boxing_verify(const sl_boxing_route *plan, uint64_t seed,
                                  sl_boxing_mismatch *mismatch);

#ifdef __cplusplus
}
#endif
#endif
