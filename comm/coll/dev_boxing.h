/* sluice comm — boxing steps between GPUs (docs/cuda.md, "Sessions on CUDA
 * placements"): a device group per step's group, launching NCCL's
 * collective where NCCL computes the step as it stands and an exchange
 * otherwise (dev_group.c), the exchanges' per-member programs (dev_xchg.c),
 * and the sequencer that launches the groups spanning processes in one
 * order of the job. Actors reach a group through the collective engine
 * table (engine.h); the session makes groups from its plan's boxing tasks.
 * Not installed. */
#ifndef SLUICE_DEV_BOXING_H
#define SLUICE_DEV_BOXING_H

#include "box.h"
#include "caching_alloc.h"
#include "comm_int.h"
#include "dev_coll.h"
#include "device_notify.h"
#include "sbp_int.h"

/* A CUDA device as a group's member uses it: its index (cuda:index), the
 * device, the memory staging and warm-up buffers come from, the stream
 * warm-ups run on, the notifier that completes a member once its stream
 * has passed the member's work, and the box kernel (kernels/box.h)
 * exchanges pack and unpack with. The owner (a session's open device)
 * keeps it alive and in place while its groups exist. */
typedef struct sl__dev_handle {
  int index;
  sl__device *dev;
  sl__caching_alloc *mem;
  sl__stream *coll_stream;
  sl__notifier *notify;
  sl_status (*box)(const sl__box_op *b, sl__stream *s);
} sl__dev_handle;

typedef struct sl__dgroup sl__dgroup;
typedef struct sl__dseq sl__dseq;
typedef struct sl__dxchg sl__dxchg;

/* ---- groups (dev_group.c) ------------------------------------------------
 * coll is SL__DEV_ALL_REDUCE, SL__DEV_ALL_GATHER or SL__DEV_REDUCE_SCATTER,
 * count as dev_coll.h counts it (per member: an all-gather's input, a
 * reduce-scatter's output), or SL__DEV_EXCHANGE with a program per member
 * (sl__dgroup_set_program; dt, op and count unused). */

/* Every member in this process: rank k on devs[k], its communicator made
 * now. */
sl_status sl__dgroup_create(sl__dev_coll *e, const char *name, int n,
                            const sl__dev_handle *const *devs,
                            sl__dev_coll_op coll, sl_dtype dt, sl_reduce_op op,
                            size_t count, sl__dgroup **out);
/* Members on other nodes too (daemons): nranks members, of which this
 * process holds nlocal (ranks: their member indexes, devs: their devices);
 * order is its place in the job's order of spanning groups, compared
 * element by element, the same on every node and a dependency order
 * ((depth, boxing node, step, group): session/build.c). Joins q, whose
 * sl__dseq_connect makes the communicator later. */
sl_status sl__dgroup_create_span(sl__dseq *q, const char *name, int nranks,
                                 int nlocal, const int *ranks,
                                 const sl__dev_handle *const *devs,
                                 sl__dev_coll_op coll, sl_dtype dt,
                                 sl_reduce_op op, size_t count,
                                 const int32_t order[4], sl__dgroup **out);
/* Frees g and its communicator (after sl__dgroup_abort: only frees). */
void sl__dgroup_destroy(sl__dgroup *g);
/* A group made with coll SL__DEV_EXCHANGE: the program of its member
 * `member`, one of this process's; g owns x from now on, also on failure
 * (SL_ENOMEM, SL_EINTERNAL). Each local member needs one before the group
 * is connected or launched. */
sl_status sl__dgroup_set_program(sl__dgroup *g, int member, sl__dxchg *x);
/* Member `member` arrives with its buffers and the stream its work goes
 * on; the last local arrival launches the round for all local members (a
 * spanning group: once the groups before it in the job's order have
 * launched this round). done(arg, st) runs once the member's stream has
 * passed the round, or at once with a failure. SL_OK: done will run. */
sl_status sl__dgroup_arrive(sl__dgroup *g, int member, const void *in,
                            void *out, sl__stream *stream,
                            sl__coll_done_fn done, void *arg);
/* Completes waiting members with st, and every later arrival; for a
 * spanning group, those of its whole sequencer, whose communicators are
 * aborted (sl__dseq_abort). */
void sl__dgroup_abort(sl__dgroup *g, sl_status st);

/* The spanning groups of this process's share of a job, launched in the
 * job's order (dev_group.c's header says why that keeps them from
 * deadlocking). Groups are freed by sl__dgroup_destroy, q by
 * sl__dseq_destroy (NULL: no-op) after them. */
sl_status sl__dseq_create(sl__dseq **out);
void sl__dseq_destroy(sl__dseq *q);
/* Makes every group's communicator, in the job's order, through kv under
 * job's keys, each with a warm-up all-reduce on its devices; before the
 * job starts on this node. Collective: every node's call must run at
 * about the same time. An abort (sl__dseq_abort) ends a wait for a unique
 * id. The first failure, naming the group (and the key across processes);
 * SL_OK with no group. */
sl_status sl__dseq_connect(sl__dseq *q, sl__dev_coll *e, const sl__dev_kv *kv,
                           uint64_t job);
/* Completes every waiting member with st (msg: why, for their messages),
 * and every later arrival, and aborts the communicators. Any thread;
 * repeated calls keep the first reason. NULL: no-op. */
void sl__dseq_abort(sl__dseq *q, sl_status st, const char *msg);

/* ---- exchange programs (dev_xchg.c) -------------------------------------
 * A step as pieces (sbp_int.h, sl__xgeom) moved by grouped NCCL sends and
 * receives (all-to-all, uneven or non-axis-0 gathers and scatters,
 * send_recv, copy) or on the device alone (slice, zero). */

/* Member me's program on device dev (its staging memory taken now). */
sl_status sl__dxchg_create(const sl__dev_handle *dev, const sl__xgeom *g,
                           int me, sl__dxchg **out);
void sl__dxchg_destroy(sl__dxchg *x);
/* One round on stream s: before the NCCL call (fills, packing; *a gets
 * the stream and the sends and receives, valid until the next call, its in
 * and out untouched), and after it (unpacking, own pieces, in piece
 * order). Device errors of queueing. */
sl_status sl__dxchg_before(sl__dxchg *x, const void *in, void *out,
                           sl__stream *s, sl__dev_rank_args *a);
sl_status sl__dxchg_after(sl__dxchg *x, const void *in, void *out,
                          sl__stream *s);
/* A warm-up launch: one byte to and from every peer of a round, in buf
 * (sl__dxchg_warm_bytes bytes of device memory). */
size_t sl__dxchg_warm_bytes(const sl__dxchg *x);
void sl__dxchg_warm_args(sl__dxchg *x, void *buf, sl__stream *s,
                         sl__dev_rank_args *a);

#endif
