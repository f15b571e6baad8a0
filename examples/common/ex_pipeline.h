/* sluice examples — pipelines (docs/pipeline.md): splitting the devices
 * into stages, balancing layers over them, and the graph settings the
 * examples share (micro-batches, schedule, moving activations to the next
 * stage). */
#ifndef SLUICE_EXAMPLES_PIPELINE_H
#define SLUICE_EXAMPLES_PIPELINE_H

#include <sluice/graph.h>

#include "ex_flags.h"

#define EX_MAX_STAGES 64

/* The flags both examples take for where they run: --devices, --layout
 * (strings), --pp, --micro (int64_t) and --schedule (string), as entries
 * of an ex_flag table. */
/* clang-format off */
#define EX_PARALLEL_FLAGS(devices, layout, pp, micro, schedule)              \
  {"devices", EX_FLAG_STRING, &(devices),                                    \
   "cpu:N or a placement (cpu:0-3)", 0},                                     \
  {"layout", EX_FLAG_STRING, &(layout), "single | dp | tp | hybrid", 0},     \
  {"pp", EX_FLAG_INT, &(pp),                                                 \
   "pipeline stages: the devices split into that many groups, each laid "    \
   "out by --layout", 1},                                                    \
  {"micro", EX_FLAG_INT, &(micro),                                           \
   "micro-batches per step (the step's batch is cut into that many)", 1},    \
  {"schedule", EX_FLAG_STRING, &(schedule),                                  \
   "1f1b | gpipe | interleaved | zero-bubble (default 1f1b)", 0}
/* clang-format on */

/* The placements of `pp` pipeline stages (1..EX_MAX_STAGES) over `devices`
 * (as ex_layout_placement takes them), each laid out for the layout:
 * several nodes are split by node, one node's devices into equal groups.
 * stages[s] receives stage s's text. SL_EINVAL with the reason (devices or
 * nodes not divisible by pp, a group hybrid cannot lay out). */
sl_status ex_stage_placements(ex_layout l, const char *devices, int pp,
                              char (*stages)[512]);

/* The stage of part j of n (layers, in order) over pp stages: balanced,
 * the first stages taking one part fewer when n is not a multiple. */
int ex_stage_of(int j, int n, int pp);

/* Checks pipelining flags before anything is built: the schedule is one
 * the library knows and micro divides batch. SL_EINVAL with the reason. */
sl_status ex_pipeline_check(int micro, int64_t batch, const char *schedule);

/* Sets g's micro-batches (when micro > 1) and schedule (when not NULL) and
 * divides *batch, the step's batch, into the micro-batch the graph is
 * built for. SL_EINVAL naming prog when micro does not divide it, or the
 * graph's setters' errors. */
sl_status ex_pipeline_setup(sl_graph *g, const char *prog, int micro,
                            const char *schedule, int64_t *batch);

/* Moves t to the stage on `placement`: the placement becomes g's default
 * and t goes there with nd-SBP sbp. */
sl_tensor ex_enter_stage(sl_graph *g, const char *placement, sl_tensor t,
                         const char *sbp);

#endif
