/* sluice comm — private structures shared by the communicator (comm.c) and
 * the collectives' geometry and tasks (coll.c). */
#ifndef SLUICE_COLL_INT_H
#define SLUICE_COLL_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "comm_int.h"
#include "core_thread.h"

/* One member's share of a parallel round, queued on a worker. */
typedef struct coll_task {
  struct coll_task *next;
  struct sl__coll *coll;
  int member;
} coll_task;

typedef struct coll_member {
  const void *in;
  void *out;
  sl__coll_done_fn done;
  void *arg;
  bool present;
  bool early; /* its share's own part done as it arrived (early_part) */
  /* geometry, fixed at creation */
  size_t in_bytes, out_bytes;
  int64_t in_dims[SL_MAX_DIMS], out_dims[SL_MAX_DIMS];
  int64_t part_start, part_extent; /* ALL_REDUCE: flat chunk; others: this
                                      member's part along the split axis */
  int32_t first_piece;             /* EXCHANGE: pieces aimed at this member */
  int32_t n_pieces;                /* are by_dst[first..first+n) */
} coll_member;

typedef struct pending_done {
  sl__coll_done_fn done;
  void *arg;
} pending_done;

enum coll_state { COLL_IDLE, COLL_GATHERING, COLL_RUNNING };

struct sl__coll {
  struct sl__coll *next_in_comm;
  sl__comm *comm;
  char *name;
  sl__coll_op op;
  sl_dtype dtype;
  size_t es;
  sl_reduce_op reduce;
  int n;
  int ndim;
  int64_t block[SL_MAX_DIMS];
  int in_axis, out_axis, root;
  sl__coll_algo algo;
  void (*waiting)(void *arg, bool waiting); /* the desc's */
  int *workers;
  coll_member *m;
  coll_task *tasks;
  pending_done *done_round, *done_abort; /* n entries each: callbacks taken
                                            out of a finished / aborted
                                            round (abort: under comm lock) */
  /* EXCHANGE */
  bool *has_in, *has_out;
  sl_slice *in_slice, *out_slice;
  int8_t *fill;
  sl__coll_piece *by_dst; /* pieces grouped by target member, in order */
  bool piece_reduce;

  pthread_mutex_t lock;
  enum coll_state state; /* under lock */
  int arrived;           /* under lock */
  atomic_int remaining;  /* tasks of the running round not yet done */
};

/* coll.c: geometry checks and sizes, filled into x (members allocated). */
sl_status sl__coll_geometry(sl__coll *x, const sl__coll_desc *d);
/* Member k's share of the current round. Touches only what that share
 * owns, so shares run in parallel. */
void sl__coll_run_task(sl__coll *x, int k);
/* The part of member k's share that reads only its own buffers, done as k
 * arrives in a direct round (comm.c): an all-gather's own block into its
 * output and, with two members summing, a reduce-scatter's own chunk
 * (the round adds the other's: a + b is b + a). Sets m->early, which the
 * task then skips and the round's reset clears. */
void sl__coll_early_part(sl__coll *x, int k);
/* Whether member k's share has anything to do (parallel rounds skip empty
 * ones). */
bool sl__coll_task_has_work(const sl__coll *x, int k);

#endif
