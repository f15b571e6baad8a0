/* sluice comm — hierarchical all-reduce for CPU groups spanning nodes
 * with several members per node: reduce inside the node with
 * the in-process collectives (comm_int.h), all-reduce between the nodes'
 * leaders over the data plane (net_coll.h), broadcast inside the node.
 * Nothing blocks: each stage's callback starts the next one.
 *
 * Per round, member 0 of each node is the leader: its local result is
 * copied to a scratch buffer that the node-level all-reduce works on (the
 * in-process collectives want distinct in and out buffers), then
 * broadcast from there into every member's out. Rounds run one after the
 * other, like sl__coll rounds. Not installed. */
#ifndef SLUICE_COMM_NET_HIER_H
#define SLUICE_COMM_NET_HIER_H

#include "comm_int.h"
#include "net_coll.h"

typedef struct sl__net_hier sl__net_hier;

typedef struct sl__net_hier_desc {
  const char *name;
  sl__comm *comm;             /* this node's communicator */
  const int *workers;         /* local_members entries */
  int local_members;          /* >= 1 */
  sl__net_coll *nc;           /* this node's collectives between nodes */
  const sl__net_group *group; /* the leaders' nodes; id names the rounds */
  sl_dtype dtype;
  sl_reduce_op op;
  size_t count; /* elements per member, >= 1 */
} sl__net_hier_desc;

/* The collectives of one hierarchical all-reduce; freed with
 * sl__net_hier_destroy (its sl__coll objects belong to comm). SL_EINVAL,
 * SL_ENOMEM. */
sl_status sl__net_hier_create(const sl__net_hier_desc *d, sl__net_hier **out);
/* NULL is a no-op; no round may be running. */
void sl__net_hier_destroy(sl__net_hier *h);

/* Local member `member` hands in count elements (in) and gets the
 * reduction over every member of every node in out (distinct buffers,
 * valid until done). done is called once per successful arrival. */
sl_status sl__net_hier_arrive(sl__net_hier *h, int member, const void *in,
                              void *out, sl__net_coll_done_fn done, void *arg);

#endif
