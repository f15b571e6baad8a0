/* sluice graph — the protobuf plan's parts kept apart from plan_pb.c
 * (plan_pb_coll.c: the boxing steps' collective specs; plan_pb_node.c:
 * what the runtime reads of the nodes). Not installed. */
#ifndef SLUICE_PLAN_PB_INT_H
#define SLUICE_PLAN_PB_INT_H

#include "lower_int.h"
#include "plan.pb-c.h"

/* The messages of a plan's specs while it is packed: they point into the
 * plan, which must outlive them. */
typedef struct sl__plan_pb_colls {
  Sluice__Collective *colls, **collp;
  Sluice__CollectiveMember *members, **memberp;
  Sluice__CollectivePiece *pieces, **piecep;
  Sluice__Box *boxes;
} sl__plan_pb_colls;

/* Fills k with p's specs (k->collp: p->n_colls messages). SL_ENOMEM. */
sl_status sl__plan_pb_colls_pack(const sl__pplan *p, sl__plan_pb_colls *k);
void sl__plan_pb_colls_free(sl__plan_pb_colls *k);

/* Reads m's specs into p, whose tasks are read already, and checks every
 * field and every task's reference to them. SL_EINVAL, SL_ENOMEM. */
sl_status sl__plan_pb_colls_unpack(const Sluice__Plan *m, sl__pplan *p);

/* The messages of what the runtime reads of p's nodes while it is packed:
 * attributes, values, initializers and kernel arguments, pointing into the
 * plan, which must outlive them. */
typedef struct sl__plan_pb_nodes {
  Sluice__Attr *attrs, **attrp;
  Sluice__Tensor *values;
  Sluice__Initializer *inits;
  char *text; /* values' placements and nd-SBPs */
  Sluice__KernelArg *args, **argp;
  int64_t *dims;
} sl__plan_pb_nodes;

/* Adds them to the node and task messages (nodes[i] is p->nodes[i]'s,
 * tasks[i] p->tasks[i]'s). SL_ENOMEM (free k in either case). */
sl_status sl__plan_pb_nodes_pack(const sl__pplan *p, Sluice__Node *nodes,
                                 Sluice__Task *tasks, sl__plan_pb_nodes *k);
void sl__plan_pb_nodes_free(sl__plan_pb_nodes *k);

/* Reads them into p, whose nodes and tasks are read already; looks up
 * ops by name. SL_EINVAL for a count out of bounds or a text that does not
 * parse, SL_ENOMEM. */
sl_status sl__plan_pb_nodes_unpack(const Sluice__Plan *m, sl__pplan *p);

#endif
