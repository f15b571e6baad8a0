/* sluice graph — the protobuf plan's parts kept apart from plan_pb.c
 * (plan_pb_coll.c: the boxing steps' collective specs). Not installed. */
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

#endif
