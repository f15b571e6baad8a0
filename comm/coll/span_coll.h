/* sluice comm — a boxing collective whose members live on several nodes
 * (docs/cluster.md, "Boxing across nodes"). Every node that has
 * members builds the same one from the same description, and its local
 * members arrive exactly as they would at an in-process collective
 * (sl__coll_arrive's contract): nothing blocks, done is called once per
 * arrival when the round is complete.
 *
 * Per round, once every local member has arrived:
 *   - all-reduce: the local members' inputs are reduced (member order)
 *     into the first local member's output, the nodes all-reduce that
 *     buffer over the data plane (ring or one-hop exchange by size,
 *     comm/coll/net_coll.h), and it is copied to the other local outputs;
 *   - every other op (reduce-scatter, all-gather, all-to-all, exchange):
 *     each node sends every other node exactly the boxes of its members'
 *     inputs that the receiver's members read (one all-to-all with a byte
 *     count per pair), places what arrives into copies of the remote
 *     members' inputs, and then runs the in-process collective's own
 *     per-member task for each local member — so the result is the same,
 *     bit for bit, as if the group lived in one process.
 * Both phases run without a thread waiting: the local part on the last
 * arriving member's thread, the rest on the data plane's loop thread.
 * Not installed. */
#ifndef SLUICE_COMM_SPAN_COLL_H
#define SLUICE_COMM_SPAN_COLL_H

#include "comm_int.h"
#include "net_coll.h"

typedef struct sl__span sl__span;

typedef struct sl__span_desc {
  /* The collective as if every member were local (its geometry and its
   * per-member tasks are used; nobody arrives at it). Not owned. */
  sl__coll *geo;
  const uint32_t *member_node; /* the node of each of geo's members */
  uint32_t self;               /* this node; it has at least one member */
  sl__net_coll *nc;            /* this node's collectives between nodes */
  uint64_t id;                 /* the same on every node, unique per group */
  /* Optional: told (with the member's done arg) when a local member
   * starts and stops waiting for the others — from its arrival until what
   * the other nodes send is in — so the hang detector does not take a
   * member whose peers never come for work (docs/actor.md). */
  void (*waiting)(void *arg, bool on);
} sl__span_desc;

/* SL_EINVAL (no local member, a bad node), SL_ENOMEM. */
sl_status sl__span_create(const sl__span_desc *d, sl__span **out);
/* NULL is a no-op; no round may be running. */
void sl__span_destroy(sl__span *x);

/* A local member joins the current round; as sl__coll_arrive. */
sl_status sl__span_arrive(sl__span *x, int member, const void *in,
                          size_t in_bytes, void *out, size_t out_bytes,
                          sl__coll_done_fn done, void *arg);

/* Completes the local members waiting for their peers with st, and every
 * later arrival at once. A round already between nodes ends when its
 * net collective does (sl__net_coll_abort ends those). */
void sl__span_abort(sl__span *x, sl_status st);

#endif
