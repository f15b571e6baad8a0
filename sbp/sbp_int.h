/* sluice sbp — module interface: shard geometry helpers, the plan's body,
 * the cost model and typed element operations shared by the planner, the
 * reference executor and the verifier. */
#ifndef SLUICE_SBP_INT_H
#define SLUICE_SBP_INT_H

#include <sluice/boxing.h>
#include <sluice/sbp.h>

#include "core_int.h"

/* ---- geometry (shard.c) ------------------------------------------------ */

/* The part of a balanced split of len in n parts that holds element x
 * (0 <= x < len). */
int sl__split_part_of(int64_t len, int n, int64_t x);

/* Bit m set when mesh axis m of s has the given kind. */
unsigned sl__nd_sbp_mask(const sl_nd_sbp *s, sl_sbp_kind kind);

/* The reduce op of s's partial entries; false when it has none. */
bool sl__nd_sbp_partial_op(const sl_nd_sbp *s, sl_reduce_op *op);

/* Whether rank is one of those that assemble a value of layout s on p:
 * coordinate 0 on every broadcast mesh axis. Together they hold every
 * part once (a partial part once per member, to be reduced in rank
 * order): the session's fetch and the reference executor's agree. */
bool sl__nd_sbp_fetch_rank(const sl_placement *p, const sl_nd_sbp *s, int rank);

/* The ranks whose mesh coordinates equal rank's on every axis not in
 * free_mask, enumerated row-major over the free axes (so the first one has
 * rank's coordinates with 0 on every free axis). out holds the product of
 * the free axes' extents; returns that count. */
int sl__mesh_ranks(const sl_placement *p, int rank, unsigned free_mask,
                   int *out);

/* Row-major stride of mesh axis m (the product of the later extents). */
int sl__mesh_stride(const sl_placement *p, int axis);

/* sl_local_slice without argument checks (s must fit p and shape). */
void sl__local_slice(const sl_shape *global, const sl_placement *p,
                     const sl_nd_sbp *s, int rank, sl_slice *out);

/* ---- cost model (cost.c) ----------------------------------------------- */

/* One message of b bytes over an intra- or inter-node link, in µs. */
double sl__cost_message(const sl_boxing_cost *c, bool inter, int64_t bytes);
/* A ring collective of `steps` rounds whose busiest rank sends max_bytes:
 * steps * α + max_bytes / β. 0 when steps is 0 (a local operation). */
double sl__cost_ring(const sl_boxing_cost *c, bool inter, int steps,
                     int64_t max_bytes);
/* The all-reduce algorithms between nodes (comm/coll/net_coll.h runs them;
 * docs/boxing.md, section 6, gives their formulas). */
typedef enum sl__all_reduce_algo {
  SL__ALL_REDUCE_RING,     /* 2(n-1) pipelined hops of 1/n of the buffer */
  SL__ALL_REDUCE_EXCHANGE, /* one hop: every node sends everyone its buffer */
  SL__ALL_REDUCE_TREE,     /* binomial tree: reduce to node 0, broadcast */
  SL__ALL_REDUCE_COUNT
} sl__all_reduce_algo;
/* The predicted time of algorithm a for n nodes each holding `bytes`,
 * with the inter-node figures; 0 for one node. */
double sl__cost_all_reduce(const sl_boxing_cost *c, sl__all_reduce_algo a,
                           int n, int64_t bytes);
/* The cheapest algorithm (ties to the earlier one), its time into *us
 * (may be NULL). Every node computes the same answer from the same
 * figures, which is how the members of a collective agree on it. */
sl__all_reduce_algo sl__cost_all_reduce_best(const sl_boxing_cost *c, int n,
                                             int64_t bytes, double *us);
/* SL_EINVAL when a figure is negative, not finite or a bandwidth is 0. */
sl_status sl__cost_check(const sl_boxing_cost *c);

/* ---- plans (plan.c, search.c, sendrecv.c) ------------------------------ */

/* One piece of a send_recv or copy step: the part `slice` (global
 * coordinates) of plan rank src's shard goes to plan rank dst. */
typedef struct sl__piece {
  int src, dst;
  sl_slice slice;
} sl__piece;

#define SL__FILL_NONE (-1)

typedef struct sl__step {
  sl_boxing_op op;
  bool has_reduce;
  sl_reduce_op reduce;
  int mesh_axis;          /* -1 for send_recv and copy */
  int from_side, to_side; /* 0: the source placement, 1: the target one */
  sl_nd_sbp from, to;
  int group_count;
  int *group_off; /* group_count + 1 offsets into group_ranks */
  int *group_ranks;
  int64_t *bytes_sent; /* rank_count */
  double predicted_us;
  /* send_recv and copy only */
  int piece_count;
  sl__piece *pieces;
  bool piece_reduce; /* pieces are reduced into dst with `reduce` */
  /* per plan rank: SL__FILL_NONE, or the sl_reduce_op whose identity fills
   * the rank's target buffer before pieces arrive; NULL when all NONE */
  int8_t *fill;
} sl__step;

struct sl_boxing_route {
  sl_arena *arena;
  sl_shape shape;
  sl_dtype dtype;
  sl_placement *place[2]; /* source, target (owned copies) */
  sl_nd_sbp sbp[2];       /* source, target */
  sl_boxing_cost cost;
  int rank_count;
  int *rank_node, *rank_device; /* per plan rank */
  bool cross_type;   /* the sides' device types differ: no shared device */
  int *plan_rank[2]; /* placement rank -> plan rank, per side */
  int *side_rank[2]; /* plan rank -> placement rank, -1, per side */
  int step_count, step_cap;
  sl__step *steps;
  int64_t *bytes_sent;
  double predicted_us;
};

/* Appends a zeroed step with rank_count bytes and no groups. NULL on
 * SL_ENOMEM. */
sl__step *sl__plan_add_step(sl_boxing_route *plan);

/* Plans a conversion on one placement (plan ranks = placement ranks) by a
 * search over per-mesh-axis conversions; falls back to send_recv. */
sl_status sl__plan_same_placement(sl_boxing_route *plan);

/* Appends one send_recv step from side 0's layout to side 1's (both sides
 * may be the same placement). */
sl_status sl__plan_send_recv(sl_boxing_route *plan);

/* Appends one copy step: rank i of the source to rank i of the target
 * (same mesh and nd-SBP on both sides). */
sl_status sl__plan_copy(sl_boxing_route *plan);

/* The geometry of plan ranks, computed here once for everyone who lays a
 * plan out (lowering, the reference executor, the session's collectives
 * and device exchanges): side 0 is the source placement, side 1 the
 * target. The plan rank of rank r of a side; the rank of a side at plan
 * rank q, -1 where that side has no device; the sides whose placements
 * hold a step's input and output shards (a send_recv or copy moves them
 * from side 0 to side 1). */
int sl__boxing_plan_rank(const sl_boxing_route *plan, int side, int r);
int sl__boxing_side_rank(const sl_boxing_route *plan, int side, int q);
void sl__boxing_step_sides(const sl_boxing_route *plan, int step, int *from,
                           int *to);
/* The placement of a side. */
const sl_placement *sl__boxing_side_placement(const sl_boxing_route *plan,
                                              int side);
/* The box, in global coordinates, of plan rank q's shard before step
 * `step` (after false: on the step's from side, in its `from` layout) or
 * after it (after true: the to side, the `to` layout). False, and box
 * zeroed, where that side has no device at q. */
bool sl__boxing_step_box(const sl_boxing_route *plan, int step, int q,
                         bool after, sl_slice *box);

/* ---- a step's members and pieces (exchange.c) --------------------------- */

/* Group `group` of group step `step`: the layouts before and after, its
 * mesh axis and its plan ranks; SL_EINTERNAL when the plan has no such
 * group. */
typedef struct sl__group_step {
  sl_nd_sbp from, to;
  int axis, n;
  const int *ranks;
} sl__group_step;
sl_status sl__boxing_group_step(const sl_boxing_route *bp, int step, int group,
                                sl__group_step *out);

typedef struct sl__xpiece {
  int src, dst; /* members */
  sl_slice box; /* global coordinates */
  bool reduce;  /* reduced into dst's output with the step's op; stored
                   otherwise */
} sl__xpiece;

/* A step as pieces between its members, in the order each target applies
 * them. */
typedef struct sl__xgeom {
  int n;
  sl_dtype dtype;
  sl_reduce_op op;            /* reducing pieces, fills */
  bool *has_in, *has_out;     /* by member */
  sl_slice *in_box, *out_box; /* by member: the global box of its shard */
  bool *fill;                 /* by member: output first set to op's
                                 identity */
  int n_pieces;
  sl__xpiece *pieces;
} sl__xgeom;

/* Group `group` of group step `step`, members in group order; a send_recv
 * or copy step, members the plan ranks; a local step (slice, zero) of
 * placement rank `rank`, group member `member`, as one member. Each checks
 * that every output is covered (SL_EINTERNAL otherwise). Free with
 * sl__xgeom_free. */
sl_status sl__xgeom_group(const sl_boxing_route *bp, int step, int group,
                          sl__xgeom *g);
sl_status sl__xgeom_p2p(const sl_boxing_route *bp, int step, sl__xgeom *g);
sl_status sl__xgeom_local(const sl_boxing_route *bp, int step, int rank,
                          int member, sl__xgeom *g);
/* Zeroed arrays for n members and room for max_pieces pieces (n_pieces
 * 0). SL_ENOMEM. */
sl_status sl__xgeom_alloc(sl__xgeom *g, int n, int max_pieces);
void sl__xgeom_free(sl__xgeom *g);

/* Whether the ranks of a list span more than one node. */
bool sl__plan_ranks_inter(const sl_boxing_route *plan, int n, const int *ranks);

/* ---- typed elements (elem.c) ------------------------------------------- */

/* Fills n elements with the identity of op: 0 for sum, the lowest value
 * (-inf for floats) for max, the highest (+inf) for min. Bool: sum and max
 * are logical or (identity 0), min is logical and (identity 1). */
void sl__elem_fill_identity(sl_dtype dt, sl_reduce_op op, void *dst, int64_t n);
/* dst[k] = op(dst[k], src[k]) for n elements, computed in the dtype
 * (integers wrap, f16/bf16 through float). dst and src must not overlap
 * (the loops are vectorised on that promise). */
void sl__elem_reduce(sl_dtype dt, sl_reduce_op op, void *dst, const void *src,
                     int64_t n);
/* dst[k] = op(a[k], b[k]): the same values as copying a to dst and
 * reducing b into it, in one pass. dst may be a; b overlaps neither. */
void sl__elem_reduce_into(sl_dtype dt, sl_reduce_op op, void *dst,
                          const void *a, const void *b, int64_t n);

/* o0[k] = o1[k] = a[k] + b[k] for n floats, in one pass: the two-member
 * f32 all-reduce. o0 may be a and o1 may be b (in place); otherwise none
 * overlap. */
void sl__elem_sum2_f32(float *o0, float *o1, const float *a, const float *b,
                       int64_t n);

/* Moves the box `ext` at src_off of a row-major src of shape src_dims into
 * dst of shape dst_dims at dst_off: a plain copy when reduce is false,
 * dst = op(dst, src) otherwise. All arrays have ndim entries. */
void sl__box_move(sl_dtype dt, int ndim, void *dst, const int64_t *dst_dims,
                  const int64_t *dst_off, const void *src,
                  const int64_t *src_dims, const int64_t *src_off,
                  const int64_t *ext, bool reduce, sl_reduce_op op);

#endif
