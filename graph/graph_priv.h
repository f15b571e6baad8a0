/* sluice graph — private to graph/: the graph's body and the builder's
 * internal entry points used by the op wrappers, autodiff, minimize and
 * compile. Lowering and sessions use graph_int.h only. */
#ifndef SLUICE_GRAPH_PRIV_H
#define SLUICE_GRAPH_PRIV_H

#include <stdio.h>

#include "graph_int.h"

/* Poisoned tensor ids: the call that recorded the graph's first error
 * returns SL__POISON_ORIGIN (so sl_name can name it), all others
 * SL__POISON. */
#define SL__POISON (-1)
#define SL__POISON_ORIGIN (-2)

/* Which pass is creating nodes (sets sl__node.backward / .optimizer). */
typedef enum sl__mark {
  SL__MARK_FORWARD = 0,
  SL__MARK_BACKWARD = 1,
  SL__MARK_OPTIMIZER = 2,
} sl__mark;

/* A node with the builder's private data. sl__node comes first so the
 * public pointer converts back. */
typedef struct sl__gnode {
  sl__node n;
  int32_t index;           /* position in g->nodes */
  struct sl__gnode *hnext; /* name hash chain */
  sl_init init;            /* SL__NODE_VARIABLE */
  bool trainable;          /* SL__NODE_VARIABLE */
  /* SL__NODE_VARIABLE: starts from tensor load_tensor of the checkpoint or
   * safetensors file load_path instead of init (sl_variable_load). */
  const char *load_path, *load_tensor;
  int32_t npy_id;    /* npy_read nodes: the open file, else -1 */
  int32_t recompute; /* forward ops: their recompute region, 0: none */
  /* SL__NODE_VARIABLE under ZeRO-3 (graph/minimize.c): kept as its shard;
   * zero3_read is the layout its readers other than the update take it
   * in (its layout before ZeRO). */
  bool zero3;
  sl_nd_sbp zero3_read;
  /* SL__NODE_VARIABLE: 1 + the stage sl_variable_set_zero_stage gave it;
   * 0: the optimizer's. */
  int32_t zero_stage;
} sl__gnode;

#define SL__GNODE(node) ((sl__gnode *)(node))

struct sl_graph {
  sl_arena *arena;
  sl__gnode **nodes;
  int32_t n_nodes, cap_nodes;
  sl__value **values;
  int32_t n_values, cap_values;
  sl__gnode **buckets; /* name hash */
  uint32_t n_buckets;
  /* placements, interned: every node/value placement points here */
  sl_placement **places;
  int n_places, cap_places;
  sl_placement *default_placement;
  sl_placement *force_placement; /* autodiff: place new ops here */
  sl_dtype compute_dtype; /* matmuls' operands (sl_graph_set_compute_dtype);
                             0 (f32): as given */
  sl__mark mark;
  char scope[512];
  int scope_depth;
  int scope_len[32];
  int64_t serial; /* auto-name counter */
  /* Pipelining (micro.c): micro-batches, schedule, the stage stack of
   * sl_graph_push_stage, the stage autodiff gives new backward nodes
   * (-1: none), and once unrolled, copy[k * n_copied + v]: value v's copy
   * for micro-batch k (v itself for k = 0 and for values computed once). */
  int32_t micro_batches;
  sl__schedule schedule;
  int32_t stages[32];
  int stage_depth;
  int32_t force_stage, input_stage; /* on stage_place / input_place */
  /* Recomputation (recompute.c): the regions made so far and the stack of
   * sl_graph_push_recompute. */
  int32_t recompute_regions;
  int32_t recompute_stack[32];
  int recompute_depth;
  const sl_placement *stage_place, *input_place;
  bool unrolled;
  int32_t *copy, n_copied;
  bool frozen, minimized;
  /* The first error, in parts so sl_name can re-render it. */
  sl_status err;
  char err_what[16]; /* "op", "input", ... */
  char err_name[256];
  char err_type[64]; /* the op's name ("matmul"), or "" */
  char err_reason[1024];
  char err_msg[1400];
};

/* ---- errors ------------------------------------------------------------ */

/* Records the graph's first error (when none yet) for a node described by
 * what ("op", "input", ...), name and type (op name or NULL), and sets the
 * thread's last error to the full message. Returns st. */
sl_status sl__g_error(sl_graph *g, sl_status st, const char *what,
                      const char *name, const char *type, const char *fmt, ...)
    SL__PRINTF(6, 7);
/* sl__g_error with the thread's current last-error message as the reason. */
sl_status sl__g_error_last(sl_graph *g, sl_status st, const char *what,
                           const char *name, const char *type);
/* A poisoned tensor of g; origin: the one carrying SL__POISON_ORIGIN. */
sl_tensor sl__g_poison(sl_graph *g, bool origin);
/* Fails an op call before its node exists: records the error for the op's
 * would-be auto name and returns the origin poison. */
sl_tensor sl__g_fail_op(sl_graph *g, const char *op, const char *fmt, ...)
    SL__PRINTF(3, 4);

/* ---- names, placements ------------------------------------------------- */

/* "<scope>/<base>" into buf (size bytes). */
void sl__g_scoped(const sl_graph *g, const char *base, char *buf, size_t size);
/* The next auto name for an op of type `op` ("<scope>/<op>_<n>"); does not
 * consume the counter (sl__g_new_node does). */
void sl__g_auto_name(const sl_graph *g, const char *op, char *buf, size_t size);
sl__gnode *sl__g_find(const sl_graph *g, const char *name);
/* The graph's interned copy of p (SL_ENOMEM: NULL). */
sl_placement *sl__g_place(sl_graph *g, const sl_placement *p);
/* Parses text (NULL: the default placement) into an interned placement,
 * recording errors for the node (what, name). NULL on failure. */
sl_placement *sl__g_place_text(sl_graph *g, const char *text, const char *what,
                               const char *name);

/* ---- nodes and values -------------------------------------------------- */

/* Whether a builder call may go on: no error yet, not frozen, every tensor
 * valid and of g. Records SL_ESTATE / SL_EINVAL errors as needed. */
bool sl__g_usable(sl_graph *g, int n, const sl_tensor *ts, const char *op);

/* Appends a node of kind `kind` named `name` (NULL: the auto name of op
 * `type`), placed on p, with n_in inputs and n_out outputs of the given
 * metas. Inputs must exist. Returns NULL (error recorded) on a duplicate
 * name or SL_ENOMEM. */
sl__gnode *sl__g_new_node(sl_graph *g, sl__node_kind kind, const char *name,
                          const char *type, sl_placement *p, int n_in,
                          const int32_t *in, int n_out, const sl__meta *out);

/* Adds op `op` on inputs `in` with attributes `at` (copied), inferring
 * output metas. Placement: g->force_placement, else the first input's, else
 * the default. Writes every output tensor into outs (may be NULL) and
 * returns output 0 (poisoned on failure). */
sl_tensor sl__g_op(sl_graph *g, const char *op, int n_in, const sl_tensor *in,
                   const sl__attrs *at, sl_tensor *outs);
/* The same for an op with no inputs, placed on placement (NULL: the
 * default) with output SBP sbp (NULL: free). */
sl_tensor sl__g_source(sl_graph *g, const char *op, const sl__attrs *at,
                       const char *name, const sl_placement *placement,
                       const sl_nd_sbp *sbp);

static inline sl__node *sl__g_node(const sl_graph *g, int32_t i) {
  return &g->nodes[i]->n;
}
static inline sl__value *sl__g_value(const sl_graph *g, int32_t v) {
  return g->values[v];
}
/* The tensor for value id v. */
static inline sl_tensor sl__g_tensor(sl_graph *g, int32_t v) {
  sl_tensor t = {g, v};
  return t;
}
/* Normalises axis (negative: from the end) for an ndim-D tensor; false
 * when out of range. */
bool sl__g_axis(int *axis, int ndim);

/* Frees what nodes own outside the arena (boxing routes, npy files). */
void sl__g_release_nodes(sl_graph *g);

/* The matmul op with its flags and contraction count (kernels/cpu/matmul.c
 * says what they mean; sl_tensordot is the public face). */
sl_tensor sl__g_matmul(sl_tensor a, sl_tensor b, bool trans_a, bool trans_b,
                       int contract);

/* Whether 1-D SBP s is what output 0 of source op `op` (no inputs) can
 * produce: B, or an output of one of its signatures. */
bool sl__g_source_accepts(const sl__op_def *op, const sl__attrs *at, sl_sbp s);

/* ---- pipelining (micro.c) ----------------------------------------------- */

/* sl__node.micro of a node sl__g_assign_stages has not seen yet. */
#define SL__MICRO_UNSET (-2)

/* Gives every node created so far its micro (0 or -1) and, per micro-batch
 * nodes, its stage, where not set yet. Idempotent. */
void sl__g_assign_stages(sl_graph *g);
/* With micro_batches > 1 and not yet done: copies every per-micro-batch
 * node (forward and backward) for micro-batches 1..m-1, and replaces each
 * of the n gradients in grads (may be 0) by the sum of its copies in
 * micro-batch order divided by m; fetches made earlier fetch their
 * micro-batches' merge. Errors are the graph's. */
sl_status sl__g_unroll(sl_graph *g, int n, sl_tensor *grads);
/* recompute.c: after autodiff, backward ops read copies of the values
 * internal to recompute regions, computed again in the backward pass. */
sl_status sl__g_recompute(sl_graph *g);
/* The value a fetch of v returns: v, or once unrolled, for a per-micro-
 * batch v, the mean (one element) or axis-0 concatenation of its copies
 * (built on first use). -1 on error (recorded). */
int32_t sl__g_fetch_value(sl_graph *g, int32_t v);
/* Each per-micro-batch backward node's phase: B when a gradient an
 * earlier stage reads depends on it, else W. */
void sl__g_assign_phases(sl_graph *g);

/* ---- class-parallel softmax and cross-entropy (class_parallel.c) ------- */

/* Whether op node n is softmax, log_softmax, sparse_cross_entropy or a
 * gradient of one, with an input of the class axis' shape split over that
 * axis (open: per value, a source whose SBP is not decided, never split). */
bool sl__g_class_split(const sl_graph *g, const sl__node *n,
                       const uint8_t *open);
/* Expands such a node at index i into ops that keep the classes split: the
 * new ops take indices i.., the node itself (now their last op, with its
 * name and output) follows them. Errors are the graph's. */
sl_status sl__g_class_expand(sl_graph *g, int32_t i);

/* ---- initializers (init.c) --------------------------------------------- */

/* Fills the part `slice` of a tensor of global shape `global` initialised
 * by init into buf (row-major over the slice, dtype dt). */
sl_status sl__g_init_fill(const sl_init *init, const sl_shape *global,
                          sl_dtype dt, const sl_slice *slice, void *buf);
/* SL_EINVAL for a kind out of range, a non-finite parameter, a bad range
 * or a non-float dtype with a random kind. */
sl_status sl__g_init_check(const sl_init *init, sl_dtype dt);

#endif
