/* sluice — what a program needs: status and logging, tensors, placements,
 * SBP, boxing, checkpoints, graphs, sessions and the build's facts. The
 * actor runtime, for programs that build and run plans of actors
 * themselves, is <sluice/actor.h>, included on its own. */
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
#include <sluice/build.h>

#endif
