/* sluice — the whole public API. */
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
#include <sluice/actor.h>
#include <sluice/build.h>

#endif
