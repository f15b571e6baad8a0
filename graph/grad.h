/* sluice graph — gradient rules (private to graph/).
 *
 * A rule builds the input gradients of one forward node from its output
 * gradients, out of ordinary ops (through the public builder), while
 * autodiff has set the graph to place new ops on the forward node's
 * placement and mark them backward. One table per op family:
 * grad_pointwise.c, grad_shape.c, grad_dense.c. */
#ifndef SLUICE_GRAPH_GRAD_H
#define SLUICE_GRAPH_GRAD_H

#include "graph_priv.h"

/* dy[j]: gradient of output j (id < 0: none, i.e. zero). need[i]: whether
 * input i's gradient is wanted; the rule writes dx[i] for those (a rule may
 * leave an input it cannot differentiate, e.g. integer ids, at id < 0).
 * Returns SL_OK, or the graph's error. */
typedef sl_status (*sl__grad_fn)(sl_graph *g, const sl__node *n,
                                 const sl_tensor *dy, const bool *need,
                                 sl_tensor *dx);

typedef struct sl__grad_rule {
  const char *op;
  sl__grad_fn fn;
} sl__grad_rule;

/* The families' tables, each ended by {NULL, NULL}. */
extern const sl__grad_rule sl__grad_rules_pointwise[];
extern const sl__grad_rule sl__grad_rules_shape[];
extern const sl__grad_rule sl__grad_rules_dense[];

/* The rule for an op, or NULL when it has none (not differentiable). */
const sl__grad_rule *sl__grad_find(const char *op);

/* Helpers for rules. */
static inline sl_tensor sl__g_in(sl_graph *g, const sl__node *n, int i) {
  return sl__g_tensor(g, n->in[i]);
}
static inline sl_tensor sl__g_out(sl_graph *g, const sl__node *n, int j) {
  return sl__g_tensor(g, n->out[j]);
}
static inline const sl__meta *sl__g_meta(sl_graph *g, sl_tensor t) {
  return &sl__g_value(g, t.id)->meta;
}
/* A tensor of value's shape and dtype filled with v, on the placement new
 * ops currently get. */
sl_tensor sl__g_full_like(sl_graph *g, sl_tensor like, double v);
/* x summed down to like's shape when broadcasting made them differ. */
sl_tensor sl__g_unbroadcast(sl_graph *g, sl_tensor x, sl_tensor like);
/* SL_EINVAL (recorded for node kind `what`) unless loss is a float tensor
 * of one element. */
sl_status sl__g_check_loss(sl_graph *g, sl_tensor loss, const char *what);
/* sl__graph_gradients; with zeros_for_missing false, a tensor the loss
 * does not depend on gets a poisoned (id < 0) gradient, no error. */
sl_status sl__g_gradients(sl_tensor loss, int n, const sl_tensor *wrt,
                          sl_tensor *grads, bool zeros_for_missing);
/* The graph's status as the rule's return value. */
/* Optimizer state (minimize.c): variable `name` outside any scope, not
 * trainable, marked as the optimizer's. */
sl_tensor sl__g_state_variable(sl_graph *g, const char *name,
                               const sl_shape *shape, sl_dtype dt, sl_init init,
                               const sl_placement *p, const sl_nd_sbp *sbp);

/* Dynamic loss scaling (loss_scale.c): _begin makes the scale variable
 * (into *scale) and returns loss * scale, the loss to differentiate; _end
 * divides the n gradients by it in place, updates the scale and returns
 * keep, a scalar: 0 when a gradient overflowed (the updates then change
 * nothing), else 1; *skipped is the count of steps skipped before this
 * one, which the updates leave out of their step count. Errors are the
 * graph's. */
sl_tensor sl__g_loss_scale_begin(sl_graph *g, sl_tensor loss,
                                 const sl_optimizer *o, sl_tensor *scale);
sl_tensor sl__g_loss_scale_end(sl_graph *g, int n, sl_tensor *grads,
                               sl_tensor scale, const sl_optimizer *o,
                               sl_tensor *skipped);

static inline sl_status sl__g_status(const sl_graph *g) {
  return g->err ? g->err : SL_OK;
}

#endif
