/* sluice — reference runs: a graph run op by op in the calling thread, to
 * check what a session computes and to find which op or layout decision
 * makes a result differ.
 *
 * SL_REFERENCE_SHARDED runs the graph the way its devices would, one local
 * shard per rank, but serially: every op's CPU kernel once per rank on
 * that rank's shard (with the slices, global shapes and partial flags a
 * device's kernel sees), boxing by the boxing reference executor
 * (sl_boxing_execute), variables initialised per rank, inputs sliced per
 * rank and fetches assembled into logical tensors. It checks the
 * compiler's SBP choices, boxing and every kernel's handling of shards
 * without the actor runtime. With check_replicas, after every node ranks
 * holding the same slice of a non-partial value must hold identical bytes
 * (a kernel that reads more than its shard, or a wrong signature, shows up
 * as differing replicas: SL_EMISMATCH naming the node).
 *
 * SL_REFERENCE_LOGICAL runs it on whole tensors, ignoring placement and
 * SBP: what the graph means.
 *
 * Both compute on the host whatever the placement's device type. */
#ifndef SLUICE_REFERENCE_H
#define SLUICE_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sl_reference_kind {
  SL_REFERENCE_SHARDED = 0,
  SL_REFERENCE_LOGICAL = 1,
} sl_reference_kind;

/* Called after each kernel or boxing run of a sharded run with the node's
 * name, its kind (the op's name, or "boxing"), the rank (-1 for boxing,
 * which runs every rank at once) and its start and end on the monotonic
 * clock, in ns. */
typedef void (*sl_reference_hook)(void *ctx, const char *node, const char *kind,
                                  int rank, uint64_t t0_ns, uint64_t t1_ns);

/* Sized like every config (SL_REFERENCE_CONFIG(...) or
 * sl_reference_config_default()); zero is a sharded
 * run without checks. */
typedef struct sl_reference_config {
  size_t size;
  sl_reference_kind kind;
  bool check_replicas; /* sharded: compare replicas after every node */
  /* Sharded: optimizer updates into a buffer of their own, then swapped
   * with the variable's, instead of in place (to measure what in place
   * saves). */
  bool out_of_place_updates;
  sl_reference_hook hook; /* sharded; NULL: none */
  void *hook_ctx;
} sl_reference_config;

#define SL_REFERENCE_CONFIG(...)                                               \
  ((sl_reference_config){.size = sizeof(sl_reference_config), __VA_ARGS__})
static inline sl_reference_config sl_reference_config_default(void) {
  return SL_REFERENCE_CONFIG(.kind = SL_REFERENCE_SHARDED);
}

typedef struct sl_reference sl_reference;

/* Compiles g if needed and allocates every value. g must outlive the run.
 * cfg may be NULL (sharded, no checks). SL_EINVAL for a bad config,
 * SL_ENOMEM, or the graph's error. */
SL_API sl_status sl_reference_create(sl_graph *g,
                                     const sl_reference_config *cfg,
                                     sl_reference **out);
SL_API void sl_reference_destroy(sl_reference *r);

/* Input `name` gets the logical tensor data (bytes its logical size),
 * used by every later step until fed again. SL_ENOTFOUND, or SL_EINVAL
 * naming the input and both sizes. */
SL_API sl_status sl_reference_feed(sl_reference *r, const char *name,
                                   const void *data, size_t bytes);
/* Runs one step, then applies the variables' updates. SL_ESTATE when an
 * input was never fed; kernel errors name the node (and rank). */
SL_API sl_status sl_reference_step(sl_reference *r);
/* Copies the last step's logical value of fetch `name` (bytes its logical
 * size). SL_ENOTFOUND, SL_ESTATE before a step, SL_EINVAL for a wrong
 * size. */
SL_API sl_status sl_reference_fetch(sl_reference *r, const char *name,
                                    void *out, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
