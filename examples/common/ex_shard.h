/* sluice examples — a sharded reference executor: runs a compiled graph
 * the way N devices would, one local shard per rank, but serially in the
 * calling thread.
 *
 * Every value has one buffer per rank of its placement holding that rank's
 * local shard (sl_local_slice of its nd-SBP). Op nodes call their CPU
 * kernel once per rank on the local shards, with the slices, global shapes
 * and partial flags the kernel context describes; boxing nodes run their
 * plan with the boxing reference executor (sl_boxing_execute), which
 * combines partial members in member order, as the session's collectives
 * do; variables are initialised per rank (sl__graph_variable_init); inputs
 * are fed as logical tensors and sliced per rank; fetches are converted to
 * the logical tensor by a plan to all-B. So it checks the compiler's SBP
 * choices, boxing insertion and every kernel's handling of shards without
 * the actor runtime, and is the layout-aware reference for the session.
 *
 * With `check_replicas`, after every node it checks that ranks holding the
 * same slice of a non-partial value hold identical bytes (a kernel that
 * depends on something other than its shard, or a wrong signature, shows
 * up as differing replicas). */
#ifndef SLUICE_EXAMPLES_SHARD_H
#define SLUICE_EXAMPLES_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/graph.h>

#include "graph_int.h"

typedef struct ex_shard ex_shard;

/* Called after each kernel or boxing run: node, rank (-1 for a boxing node,
 * which runs all ranks at once), start and end times (sl__now_ns). */
typedef void (*ex_shard_hook)(void *ctx, const sl__node *n, int rank,
                              uint64_t t0, uint64_t t1);

typedef struct ex_shard_opts {
  bool check_replicas;
  ex_shard_hook hook; /* may be NULL */
  void *hook_ctx;
  /* Optimizer updates into a buffer of their own, then swapped with the
   * variable's, instead of in place (to measure what in place saves). */
  bool out_of_place_updates;
} ex_shard_opts;

/* Compiles g if needed (sl__graph_compile) and allocates every shard.
 * The graph must outlive the executor. SL_ENOMEM, or the graph's error. */
sl_status ex_shard_create(sl_graph *g, const ex_shard_opts *opts,
                          ex_shard **out);
void ex_shard_destroy(ex_shard *x);

/* Copies the logical tensor for input `name` (bytes must equal its logical
 * size); used by every later step until fed again. SL_ENOTFOUND, or
 * SL_EINVAL naming the input and both sizes. */
sl_status ex_shard_feed(ex_shard *x, const char *name, const void *data,
                        size_t bytes);

/* Runs one step on every rank, then applies variable updates. SL_ESTATE
 * when an input was never fed; kernel errors name the node and rank;
 * SL_EMISMATCH for differing replicas (check_replicas). */
sl_status ex_shard_step(ex_shard *x);

/* Copies the last step's logical value of fetch `name` into out (bytes
 * must equal its logical size). SL_ENOTFOUND, SL_ESTATE before a step,
 * SL_EINVAL for a wrong size. */
sl_status ex_shard_fetch(ex_shard *x, const char *name, void *out,
                         size_t bytes);

/* Rank `rank`'s shard of value `value` (tests), with its slice; NULL when
 * out of range. */
const void *ex_shard_value(const ex_shard *x, int32_t value, int rank,
                           sl_slice *slice);

#endif
