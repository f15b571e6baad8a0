/* sluice comm — what net_coll.c shares with the shared all-reduce
 * (net_shared.c): the instances, the collectives' state and the helpers
 * both use. Every field is under nc->lock. Not installed. */
#ifndef SLUICE_COMM_NET_COLL_INT_H
#define SLUICE_COMM_NET_COLL_INT_H

#include <pthread.h>

#include "dp_int.h"
#include "net_coll.h"
#include "sbp_int.h"
#include "shm_pool.h"

/* Scratch buffers kept for reuse (nc->spare): at most this many. */
#define NC_SPARES 8

/* OP_EXCHANGE and OP_TREE are the all-reduces for small buffers.
 * Exchange: every member sends its whole buffer to every other one (one
 * hop instead of the ring's 2(n-1)), and each reduces all of them in member
 * order. Tree: a binomial tree rooted at member 0 — member r's children
 * are r + 2^j for 2^j below r's lowest set bit (all 2^j < n for the root),
 * its parent r - lowbit(r); each member reduces its children's buffers
 * into its own in the order of j and sends the result up (step 0), the
 * root sends the total down (step 1), which every member forwards to its
 * children, largest subtree first: 2 ceil(log2 n) hops of the whole
 * buffer. Both give every member the same bits. OP_SHARED: net_shared.c. */
enum {
  OP_ALL_REDUCE = 1,
  OP_ALL_GATHER = 2,
  OP_REDUCE_SCATTER = 3,
  OP_EXCHANGE = 4,
  OP_ALL_TO_ALL = 5, /* pairwise: member k's part j goes to member j */
  OP_TREE = 6,
  OP_SHARED = 7 /* all-reduce through the members' shared registers */
};
enum { TREE_UP = 0, TREE_DOWN = 1 }; /* a tree frame's step */

/* A chunk that arrived before its instance could take it. */
typedef struct staged {
  struct staged *next;
  uint32_t node;
  sl__dp_frame f;
  void *buf; /* f.len bytes, owned */
  bool complete;
} staged;

typedef struct inst {
  struct inst *next;
  uint64_t group, seq;
  bool started;
  bool failed;   /* no more sends; done once the sends drain */
  bool finished; /* done was called: a tombstone that drops late chunks */
  sl_status fail_st;
  char fail_msg[600];
  staged *sq, *sq_tail;

  int op;
  sl_dtype dt;
  sl_reduce_op rop;
  size_t esize;
  uint32_t n, r, right, left;
  uint32_t *nodes;
  uint64_t *seg_start, *seg_cnt;   /* elements; all-to-all: out's parts */
  uint64_t *send_start, *send_cnt; /* all-to-all: in's parts */
  uint32_t lanes, steps, rs_steps;
  uint8_t *base; /* the buffer the steps work on */
  /* all-reduce: this member's own values; base when in place, else
   * unchanged (step 0 sends from it, reductions start from it) */
  const uint8_t *src;
  uint8_t *scratch;       /* lanes * piece_max bytes: reduce-scatter receives */
  uint64_t scratch_bytes; /* its size (a spare may be larger) */
  uint64_t piece_max;
  uint64_t total_bytes;
  uint8_t *work;     /* reduce-scatter: owned copy of in */
  const uint8_t *in; /* all-to-all: the parts to send */
  uint8_t *out;      /* reduce-scatter: where segment r ends up */
  uint64_t recv_total, recv_done, send_issued, send_done;
  uint32_t kids, kids_in; /* tree: children, and those whose sums are in */
  /* shared: the phase each member's next frame must be in, where its
   * values are when it lent them (NULL: they came in scratch), and how
   * many members have been heard in each phase */
  uint8_t *phase_in;
  const uint8_t **lent;
  uint32_t ready_in, reduced_in;
  sl__net_coll_done_fn done;
  void *arg;
} inst;

struct sl__net_coll {
  sl__dp_endpoint *ep;
  uint32_t node, nnodes;
  uint64_t chunk;
  bool ar_auto;         /* the cost model picks the all-reduce's algorithm */
  sl__net_algo ar_algo; /* else this one */
  sl_boxing_cost cost;  /* the model's figures (the inter-node ones) */
  pthread_mutex_t lock;
  inst *insts;
  bool *node_failed; /* nnodes */
  sl_status *node_st;
  char (*node_msg)[320];
  /* scratch buffers kept for later instances: a model's gradients are
   * all-reduced as several instances at once, each needing its own, and
   * a fresh buffer costs a page fault per 4 KiB on first touch (on the
   * loop thread, as the kernel copies received chunks into it) and an
   * munmap when freed */
  uint8_t *spare[NC_SPARES];
  uint64_t spare_bytes[NC_SPARES];
  sl__net_coll_stats stats;
  /* sl__net_coll_set_shared: this node's register pool (NULL: none), the
   * peers' pools mapped here (n_views; borrowed), which node maps whose
   * ([i * nnodes + j]: node i maps node j's; NULL: none), and the
   * smallest all-reduce that goes through them */
  const sl__shm_pool *pool;
  const sl__shm_view *views;
  uint32_t n_views;
  uint8_t *maps;
  uint64_t shared_min;
  /* sl__net_coll_abort: later starts fail with this until the reset */
  bool aborted;
  sl_status abort_st;
  char abort_msg[320];
};

/* A callback to make once the lock is released. */
typedef struct pending_done {
  sl__net_coll_done_fn fn;
  void *arg;
  sl_status st;
  char msg[600];
} pending_done;

/* net_coll.c's helpers, with nc->lock held. */
void sl__nc_fail(inst *x, sl_status st, const char *msg);
/* A scratch buffer of at least bytes into x->scratch: SL_ENOMEM. */
sl_status sl__nc_scratch(sl__net_coll *nc, inst *x, uint64_t bytes);
int sl__nc_member_of(const inst *x, uint32_t node);
/* A frame of instance x: its group, seq, op and dtype, with desc (the
 * step or phase) and index (the lane or member). */
sl__dp_frame sl__nc_frame(const inst *x, int32_t desc, int32_t index);
/* Sends f with its payload to node, counted in x's sends; a failure to
 * queue it fails x. */
void sl__nc_send(sl__net_coll *nc, inst *x, uint32_t node,
                 const sl__dp_frame *f, const void *payload, uint64_t len);

/* net_shared.c: the shared all-reduce. */
bool sl__nc_shared_fits(const sl__net_coll *nc, const sl__net_group *g,
                        uint64_t bytes);
sl_status sl__nc_shared_init(inst *x);
void sl__nc_shared_start(sl__net_coll *nc, inst *x);
sl_status sl__nc_shared_check(const sl__net_coll *nc, const inst *x,
                              uint32_t node, const sl__dp_frame *f);
sl_status sl__nc_shared_target(sl__net_coll *nc, inst *x, const sl__dp_frame *f,
                               void **buf);
void sl__nc_shared_take(sl__net_coll *nc, inst *x, uint32_t node,
                        const sl__dp_frame *f, const void *buf);

#endif
