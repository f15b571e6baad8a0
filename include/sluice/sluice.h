/* sluice — what a program needs: status and logging, tensors, placements,
 * SBP, boxing, checkpoints, graphs, sessions, reference runs and the
 * build's facts. Included on their own: <sluice/cluster.h> (running a
 * cluster's daemons and master) and <sluice/actor.h> (the actor runtime,
 * for programs that build and run plans of actors themselves). */
#ifndef SLUICE_SLUICE_H
#define SLUICE_SLUICE_H

#include <sluice/core.h>
#include <sluice/tensor.h>
#include <sluice/placement.h>
#include <sluice/sbp.h>
#include <sluice/checkpoint.h>
#include <sluice/boxing.h>
#include <sluice/graph.h>
#include <sluice/session.h>
#include <sluice/reference.h>
#include <sluice/build.h>

#endif
