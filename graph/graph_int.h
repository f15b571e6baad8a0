/* sluice graph — the logical graph IR shared by the builder, autodiff, SBP
 * inference and boxing insertion (graph helper's files) and by lowering,
 * register planning and the sessions (the files that turn it into actors).
 *
 * A graph is a list of nodes in topological order (a node's inputs are
 * produced by earlier nodes). Every node output is a value. After
 * sl__graph_compile, every value has a placement and nd-SBP, every op node
 * has the nd-SBP of each input it needs (equal to its producer's: boxing
 * nodes were inserted wherever they differed), and the graph is final. */
#ifndef SLUICE_GRAPH_INT_H
#define SLUICE_GRAPH_INT_H

#include <sluice/boxing.h>
#include <sluice/graph.h>

#include "core_int.h"
#include "op.h"

typedef enum sl__node_kind {
  SL__NODE_OP = 0,       /* an op from the registry (op != NULL) */
  SL__NODE_INPUT = 1,    /* a tensor fed by the program at each step */
  SL__NODE_VARIABLE = 2, /* persistent state: initialised once, then
                            replaced each step by its update node's output
                            (update >= 0) or constant (update < 0) */
  SL__NODE_BOXING = 3,   /* converts in[0] to out[0]'s placement/nd-SBP by
                            boxing->plan; inserted by compile */
  SL__NODE_FETCH = 4,    /* returns in[0] to the program each step, as the
                            logical (global) tensor */
} sl__node_kind;

typedef struct sl__value {
  int32_t producer;        /* node index */
  int32_t index;           /* which output of the producer */
  sl__meta meta;           /* global shape and dtype */
  sl_placement *placement; /* NULL until placed; owned by the graph */
  sl_nd_sbp sbp;
  bool sbp_fixed; /* the user constrained it (sl_to_global, inputs,
                     variables): inference must not change it */
  /* sl_gradient_sbp: the layout autodiff gives its gradient (ndim 0:
   * inference chooses). */
  sl_nd_sbp grad_sbp;
  /* Its cast to the compute dtype for matrix products, made once and
   * shared by every product reading it (value id + 1; 0: none yet). */
  int32_t compute_cast;
  /* A class-parallel cross-entropy over it (class_parallel.c): its rows'
   * max and sum of exp (value ids + 1; 0: none), which the gradient's
   * expansion reuses rather than reducing them again. */
  int32_t class_max, class_sum;
} sl__value;

typedef struct sl__node {
  const char *name; /* unique in the graph */
  sl__node_kind kind;
  const sl__op_def *op; /* SL__NODE_OP */
  sl__attrs attrs;
  int n_in, n_out;
  int32_t in[SL_OP_MAX_INPUTS];   /* value ids */
  int32_t out[SL_OP_MAX_OUTPUTS]; /* value ids */
  sl_placement *placement;        /* where it runs (owned by the graph) */
  /* The chosen signature: nd-SBP of each input as this node consumes it
   * and of each output. For OP nodes after compile in_sbp[i] equals the
   * sbp of value in[i]. */
  sl_nd_sbp in_sbp[SL_OP_MAX_INPUTS];
  sl_nd_sbp out_sbp[SL_OP_MAX_OUTPUTS];
  sl_boxing_route *boxing; /* SL__NODE_BOXING: owned by the node */
  int32_t update;          /* SL__NODE_VARIABLE: value id of the next
                              version, or -1 */
  bool backward;           /* created by autodiff (for plans/traces) */
  bool optimizer;          /* created by minimize */
  bool recompute;          /* a forward op's copy computed again in the
                              backward pass (graph/recompute.c) */
  /* Pipelining (graph/micro.c). micro: the micro-batch the node computes,
   * or -1 for a node that runs once per step (variables, what depends on
   * no input or data source, the optimizer); micro_of: for a copy made
   * for micro-batch micro > 0, the node of micro-batch 0 it copies, else
   * -1; stage: the pipeline stage of a per-micro-batch node, else -1;
   * phase: its pass (sl__phase). */
  int32_t micro, micro_of, stage;
  int32_t phase;
} sl__node;

/* The pass of a per-micro-batch node: forward, backward to the input
 * gradients (what the previous stage waits for), or backward to weight
 * gradients only (zero-bubble schedules move it to fill bubbles). */
typedef enum sl__phase {
  SL__PHASE_F = 0,
  SL__PHASE_B = 1,
  SL__PHASE_W = 2,
} sl__phase;

typedef enum sl__schedule {
  SL__SCHEDULE_1F1B = 0,
  SL__SCHEDULE_GPIPE = 1,
  SL__SCHEDULE_INTERLEAVED = 2,
  SL__SCHEDULE_ZERO_BUBBLE = 3,
} sl__schedule;
#define SL__SCHEDULE_COUNT 4

/* "1f1b", "gpipe", "interleaved", "zero-bubble"; parse: false for another
 * name. */
const char *sl__schedule_name(sl__schedule s);
bool sl__schedule_parse(const char *name, sl__schedule *out);

/* The IR accessors lowering and sessions use; the builder owns the
 * storage (arena-allocated, stable pointers until the graph is freed).
 * Value ids are the ids of sl_tensor. Node indices are positions in the
 * topological order: compile inserts boxing nodes, so indices taken before
 * sl__graph_compile may change; after it they are final. Out-of-range
 * indices give NULL. */
int32_t sl__graph_node_count(const sl_graph *g);
const sl__node *sl__graph_node(const sl_graph *g, int32_t i);
int32_t sl__graph_value_count(const sl_graph *g);
const sl__value *sl__graph_value(const sl_graph *g, int32_t v);
/* The index of the node named name (inputs, variables and fetches by the
 * name the program gave), or -1. */
int32_t sl__graph_find(const sl_graph *g, const char *name);
/* The node named name if it is of that kind (an input, a fetch, ...), else
 * NULL (also for a NULL name). */
const sl__node *sl__graph_find_kind(const sl_graph *g, const char *name,
                                    sl__node_kind kind);
/* Micro-batches per step and the pipeline schedule (sl_graph_set_*). */
int32_t sl__graph_micro_batches(const sl_graph *g);
sl__schedule sl__graph_schedule(const sl_graph *g);
/* A copy of a per-micro-batch op that draws from global positions (random
 * data, dropout, .npy rows: sl__op_def.by_position) sees the step's whole
 * batch: its output's global shape has micro_batches times the rows on
 * axis 0 and its slice starts at its micro-batch's rows. Applied to a
 * kernel context built from the node's own values. */
void sl__graph_micro_shift(const sl_graph *g, const sl__node *n,
                           sl__kernel_ctx *k);
/* Whether sl__graph_compile has run (the graph no longer changes). */
bool sl__graph_frozen(const sl_graph *g);
/* "op", "input", "variable", "boxing", "fetch". */
const char *sl__graph_kind_name(sl__node_kind k);
/* Variables' initial values: fills rank `rank`'s local shard of variable
 * node `node` (its value's placement/nd-SBP) into buf. The value depends
 * only on the initializer and the global index, never on the layout. */
/* The checkpoint or safetensors file variable `node` starts from
 * (sl_variable_load) and, in *tensor, the tensor's name; NULL when it
 * starts from its initializer. */
const char *sl__graph_variable_file(const sl_graph *g, int32_t node,
                                    const char **tensor);
sl_status sl__graph_variable_init(const sl_graph *g, int32_t node, int rank,
                                  void *buf);

/* SBP inference and boxing insertion (idempotent; sl_session_create calls
 * it). After it the graph is frozen: builder calls return SL_ESTATE.
 * Returns the graph's status when it already has an error. After it:
 * every value has sbp (ndim = its placement's mesh ndim); OP nodes have
 * in_sbp/out_sbp; INPUT/VARIABLE nodes out_sbp[0]; FETCH nodes in_sbp[0]
 * (the producer's, never boxed); a variable's update value has the
 * variable's placement and nd-SBP (a boxing node is inserted if needed). */
sl_status sl__graph_compile(sl_graph *g);

/* ---- autodiff ------------------------------------------------------------ */

/* Gradients of the scalar `loss` with respect to n tensors: grads[i] is a
 * tensor of wrt[i]'s shape (zeros when loss does not depend on it).
 * Backward nodes are marked backward. Errors are the graph's (sticky). */
sl_status sl__graph_gradients(sl_tensor loss, int n, const sl_tensor *wrt,
                              sl_tensor *grads);

/* ---- the reference interpreter ------------------------------------------- */

/* Runs a graph on the host with whole logical tensors: no placement, every
 * value one full host buffer, each op's CPU kernel called once with the
 * whole tensor as its slice (boxing nodes copy). Variables persist across
 * steps and take their update after each step. The single-device reference
 * for tests. The graph must outlive the interpreter and not change while it
 * runs (compiled or not). */
typedef struct sl__interp sl__interp;

sl_status sl__interp_create(const sl_graph *g, sl__interp **out);
void sl__interp_destroy(sl__interp *it);
/* Copies the logical tensor for input `name` (bytes must equal the input's
 * size), used by every later step until fed again. SL_ENOTFOUND, SL_EINVAL
 * naming the input for a wrong size. */
sl_status sl__interp_feed(sl__interp *it, const char *name, const void *data,
                          size_t bytes);
/* Runs one step (the kernels see step = the number of steps run before,
 * unless set) and then applies variable updates. SL_ESTATE when an input
 * was never fed; kernel errors name the node. */
sl_status sl__interp_step(sl__interp *it);
/* The step number the next sl__interp_step passes to kernels. */
void sl__interp_set_step(sl__interp *it, int64_t step);
/* The last step's value of fetch `name` (data valid until the next step or
 * destroy). SL_ENOTFOUND, SL_ESTATE before any step. */
sl_status sl__interp_fetch(const sl__interp *it, const char *name,
                           const void **data, sl__meta *meta);
/* A variable's current value, writable (tests set weights through it). */
sl_status sl__interp_variable(sl__interp *it, const char *name, void **data,
                              sl__meta *meta);
/* Any value of the last step by id (NULL before a step or out of range). */
const void *sl__interp_value(const sl__interp *it, int32_t value);

/* topo.c: a topological order of n items, item t's successors to[off[t]
 * .. off[t + 1]), the smallest ready index first, so that an order already
 * topological is kept. Consumes indeg (what is left > 0 lies on a cycle);
 * *count: the items ordered (n without a cycle). SL_ENOMEM. */
sl_status sl__topo_smallest_first(int32_t n, const int32_t *off,
                                  const int32_t *to, int32_t *indeg,
                                  int32_t *order, int32_t *count);

#endif
