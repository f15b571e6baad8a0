/* sluice comm — in-process collectives between the devices of one process
 * (DESIGN.md section 8; docs/plan.md, "Collectives", explains the design).
 *
 * A communicator (sl__comm) owns one worker thread per worker index (the
 * session uses one per device). A collective (sl__coll) is one operation on
 * a fixed group of members with a fixed geometry, run once per round: every
 * member hands in its buffers with sl__coll_arrive and gets a callback when
 * the round is complete. Nothing ever blocks waiting for a peer:
 *
 *   - an arrival only records the member's buffers under the collective's
 *     lock and returns; the caller (an actor) defers its firing;
 *   - the last arrival starts the work: small collectives are done by that
 *     thread at once ("direct"), large ones are cut into one task per member
 *     (each member reduces or assembles its own chunk, the reduce-scatter /
 *     all-gather decomposition a ring performs), queued to the members'
 *     workers, so the arriving thread (a device's compute thread) goes
 *     back to its kernels at once;
 *   - when the last task is done, every member's callback is called.
 *
 * So ranks may reach different collectives in any order: a collective whose
 * members are not all there simply waits, holding no thread. Results do not
 * depend on the algorithm or on arrival order: reductions always combine
 * members in member order (member 0's value, then 1's, ...), exactly as the
 * reference executor (sl_boxing_execute) does, so parallel and direct runs
 * are bit-identical. Not installed; used by the session. */
#ifndef SLUICE_COMM_INT_H
#define SLUICE_COMM_INT_H

#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "core_int.h"

typedef struct sl__comm sl__comm;
typedef struct sl__coll sl__coll;

typedef enum sl__coll_op {
  /* every member: in = out = the block; out = reduce(in of all members) */
  SL__COLL_ALL_REDUCE = 0,
  /* in = the block; member k's out = part k (along out_axis) of the
   * reduction */
  SL__COLL_REDUCE_SCATTER = 1,
  /* member k's in = part k of the block along in_axis; out = the block */
  SL__COLL_ALL_GATHER = 2,
  /* member k's in = part k along in_axis, out = part k along out_axis; out
   * gets part k (along out_axis) of every member's in, in member order */
  SL__COLL_ALL_TO_ALL = 3,
  /* the root's in = the block (others hand in nothing); out = the block */
  SL__COLL_BROADCAST = 4,
  /* point-to-point pieces between members (boxing's send_recv and copy):
   * each member may hold an input box and/or an output box of a global
   * tensor; each output is filled, then every piece aimed at it is copied
   * (or reduced) in from its source member, in piece order */
  SL__COLL_EXCHANGE = 5,
} sl__coll_op;

/* "all_reduce", ..., "exchange". */
const char *sl__coll_op_name(sl__coll_op op);

typedef enum sl__coll_algo {
  SL__COLL_AUTO = 0,     /* direct at or below the communicator's threshold */
  SL__COLL_DIRECT = 1,   /* the last arriver does all of it */
  SL__COLL_PARALLEL = 2, /* one task per member on the members' workers */
} sl__coll_algo;

/* A piece of an exchange: the box `slice` (global coordinates) of member
 * src's input goes to member dst's output. */
typedef struct sl__coll_piece {
  int src, dst;
  sl_slice slice;
} sl__coll_piece;

#define SL__COLL_FILL_ZERO (-1)

typedef struct sl__coll_desc {
  const char *name; /* for messages; copied */
  sl__coll_op op;
  sl_dtype dtype;
  sl_reduce_op reduce; /* ALL_REDUCE, REDUCE_SCATTER, EXCHANGE with
                          piece_reduce */
  int n;               /* members, >= 1 */
  const int *workers;  /* n entries: the worker that runs member k's task */
  /* Group ops: the block the members hold together. EXCHANGE: the global
   * shape the slices are boxes of. */
  sl_shape block;
  int in_axis;  /* ALL_GATHER, ALL_TO_ALL */
  int out_axis; /* REDUCE_SCATTER, ALL_TO_ALL */
  int root;     /* BROADCAST */
  /* EXCHANGE only, n entries each: whether member k holds an input / an
   * output, their boxes, and the fill of each output (SL__COLL_FILL_ZERO or
   * an sl_reduce_op whose identity fills it). */
  const bool *has_in, *has_out;
  const sl_slice *in_slice, *out_slice;
  const int8_t *fill;
  int piece_count;
  const sl__coll_piece *pieces;
  bool piece_reduce; /* pieces are reduced into their target with reduce */
  sl__coll_algo algo;
  /* Optional, with a member's done-arg, under the collective's lock: the
   * member arrived before the others and waits for them (true), or the
   * round it waited for begins (false). Not called for a member the round
   * never began for (an abort completes it). */
  void (*waiting)(void *arg, bool waiting);
} sl__coll_desc;

typedef struct sl__comm_config {
  int workers; /* worker threads, >= 1 */
  /* Collectives whose largest member buffer has at most this many bytes
   * run direct. 0: SLUICE_COMM_DIRECT_MAX or 65536; negative: never. */
  int64_t direct_max_bytes;
  /* NULL, or per worker the CPU it is pinned to (-1: not pinned): where
   * the CPU devices' threads take every core, the session pins a device's
   * worker beside its compute thread, so that the parts of a large round
   * run on the cores of their devices, not where the scheduler puts them
   * (all on the core of the thread that posted them, lacking an idle
   * one). */
  const int *worker_cpu;
} sl__comm_config;

/* Starts the workers. SL_EINVAL (workers < 1 or > 4096), SL_ENOMEM,
 * SL_EINTERNAL (threads). */
sl_status sl__comm_create(const sl__comm_config *cfg, sl__comm **out);

/* Aborts waiting rounds (sl__comm_abort with SL_EABORTED), lets running
 * ones finish, joins the workers and frees every collective. NULL: no-op. */
void sl__comm_destroy(sl__comm *c);

/* Completes every member of every round still waiting for peers with st
 * (not SL_OK); from now on every arrival completes at once with st. Rounds
 * already running finish normally. Any thread. */
void sl__comm_abort(sl__comm *c, sl_status st);

/* Creates a collective owned by c (freed with it). Geometry is checked here
 * (axes, root, workers, pieces inside their boxes), so arrivals only check
 * sizes. SL_EINVAL with the collective's name, SL_ENOMEM. */
sl_status sl__coll_create(sl__comm *c, const sl__coll_desc *d, sl__coll **out);

/* Bytes member k hands in and gets back. */
size_t sl__coll_in_bytes(const sl__coll *x, int member);
size_t sl__coll_out_bytes(const sl__coll *x, int member);
/* The algorithm the collective runs (never SL__COLL_AUTO). */
sl__coll_algo sl__coll_algo_of(const sl__coll *x);
const char *sl__coll_name(const sl__coll *x);
int sl__coll_members(const sl__coll *x);

/* Called exactly once per successful arrival, from the thread that
 * completed the round (a worker or an arriving member, possibly the caller
 * before sl__coll_arrive returns). On failure the calling thread's
 * sl_last_error() holds the detail. */
typedef void (*sl__coll_done_fn)(void *arg, sl_status st);

/* Member `member` joins the current round with its buffers (in may be NULL
 * when in_bytes is 0, likewise out). in and out must not overlap each other
 * or other members' buffers — except that an all_reduce's out may be its
 * own in (in place) — and stay valid until done is called. Returns
 * SL_OK when done will be called; otherwise (bad member, sizes that do not
 * match, a member arriving twice in one round) an error, and done is not
 * called. */
sl_status sl__coll_arrive(sl__coll *x, int member, const void *in,
                          size_t in_bytes, void *out, size_t out_bytes,
                          sl__coll_done_fn done, void *arg);

/* Aborts the communicator x belongs to (sl__comm_abort): a failing job
 * gives up every collective of its communicator, not one. */
void sl__coll_abort(sl__coll *x, sl_status st);

typedef struct sl__comm_stats {
  uint64_t rounds_direct, rounds_parallel, rounds_aborted;
  uint64_t tasks_posted; /* tasks handed to workers */
} sl__comm_stats;

void sl__comm_get_stats(sl__comm *c, sl__comm_stats *out);

#endif
