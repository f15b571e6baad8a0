/* Gradient rules of the pointwise family: broadcasting binary ops, scalar
 * ops, activations and elementwise functions, cast, identity, dropout and
 * the causal mask. Broadcast inputs get their gradient summed back to
 * their shape with reduce_sum_like. */
#include "grad.h"

/* ---- binary (broadcasting) --------------------------------------------- */

static sl_status g_add(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  for (int i = 0; i < 2; i++)
    if (need[i]) dx[i] = sl__g_unbroadcast(g, dy[0], sl__g_in(g, n, i));
  return sl__g_status(g);
}

static sl_status g_sub(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  if (need[0]) dx[0] = sl__g_unbroadcast(g, dy[0], sl__g_in(g, n, 0));
  if (need[1]) dx[1] = sl__g_unbroadcast(g, sl_neg(dy[0]), sl__g_in(g, n, 1));
  return sl__g_status(g);
}

static sl_status g_mul(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  sl_tensor a = sl__g_in(g, n, 0), b = sl__g_in(g, n, 1);
  if (need[0]) dx[0] = sl__g_unbroadcast(g, sl_mul(dy[0], b), a);
  if (need[1]) dx[1] = sl__g_unbroadcast(g, sl_mul(dy[0], a), b);
  return sl__g_status(g);
}

/* y = a / b: da = dy / b, db = -dy * y / b. */
static sl_status g_div(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  sl_tensor a = sl__g_in(g, n, 0), b = sl__g_in(g, n, 1);
  sl_tensor y = sl__g_out(g, n, 0);
  sl_tensor q = sl_div(dy[0], b);
  if (need[0]) dx[0] = sl__g_unbroadcast(g, q, a);
  if (need[1]) dx[1] = sl__g_unbroadcast(g, sl_neg(sl_mul(q, y)), b);
  return sl__g_status(g);
}

/* ---- one input ---------------------------------------------------------- */

static sl_status g_identity(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                            const bool *need, sl_tensor *dx) {
  /* Back to the input's placement; its SBP is the compiler's choice. */
  const sl__value *in = sl__g_value(g, n->in[0]);
  if (in->placement == n->placement)
    dx[0] = dy[0];
  else
    dx[0] = sl_to_global_p(dy[0], in->placement, NULL);
  return sl__g_status(g);
}

static sl_status g_neg(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  dx[0] = sl_neg(dy[0]);
  return sl__g_status(g);
}

static sl_status g_scalar_add(sl_graph *g, const sl__node *n,
                              const sl_tensor *dy, const bool *need,
                              sl_tensor *dx) {
  dx[0] = dy[0];
  return sl__g_status(g);
}

static sl_status g_scalar_mul(sl_graph *g, const sl__node *n,
                              const sl_tensor *dy, const bool *need,
                              sl_tensor *dx) {
  dx[0] = sl_mul_scalar(dy[0], sl__attr_float(&n->attrs, "value", 1.0));
  return sl__g_status(g);
}

/* The activations' derivatives have kernels: relu_grad(dy, y),
 * gelu_grad(dy, x). */
static sl_status g_relu(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                        const bool *need, sl_tensor *dx) {
  sl_tensor in[2] = {dy[0], sl__g_out(g, n, 0)};
  dx[0] = sl__g_op(g, "relu_grad", 2, in, NULL, NULL);
  return sl__g_status(g);
}

static sl_status g_gelu(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                        const bool *need, sl_tensor *dx) {
  sl_tensor in[2] = {dy[0], sl__g_in(g, n, 0)};
  dx[0] = sl__g_op(g, "gelu_grad", 2, in, NULL, NULL);
  return sl__g_status(g);
}

/* tanh_grad(dy, y) = dy (1 - y^2); sigmoid_grad(dy, y) = dy y (1 - y). */
static sl_status g_tanh(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                        const bool *need, sl_tensor *dx) {
  sl_tensor in[2] = {dy[0], sl__g_out(g, n, 0)};
  dx[0] = sl__g_op(g, "tanh_grad", 2, in, NULL, NULL);
  return sl__g_status(g);
}

static sl_status g_sigmoid(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                           const bool *need, sl_tensor *dx) {
  sl_tensor in[2] = {dy[0], sl__g_out(g, n, 0)};
  dx[0] = sl__g_op(g, "sigmoid_grad", 2, in, NULL, NULL);
  return sl__g_status(g);
}

static sl_status g_square(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                          const bool *need, sl_tensor *dx) {
  dx[0] = sl_mul(dy[0], sl_mul_scalar(sl__g_in(g, n, 0), 2.0));
  return sl__g_status(g);
}

/* sqrt' = 1 / (2 y). */
static sl_status g_sqrt(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                        const bool *need, sl_tensor *dx) {
  dx[0] = sl_div(sl_mul_scalar(dy[0], 0.5), sl__g_out(g, n, 0));
  return sl__g_status(g);
}

static sl_status g_exp(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  dx[0] = sl_mul(dy[0], sl__g_out(g, n, 0));
  return sl__g_status(g);
}

static sl_status g_log(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                       const bool *need, sl_tensor *dx) {
  dx[0] = sl_div(dy[0], sl__g_in(g, n, 0));
  return sl__g_status(g);
}

static sl_status g_cast(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                        const bool *need, sl_tensor *dx) {
  dx[0] = sl_cast(dy[0], sl__g_meta(g, sl__g_in(g, n, 0))->dtype);
  return sl__g_status(g);
}

/* The same mask (seed, step, index) and scale applied to dy. */
static sl_status g_dropout(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                           const bool *need, sl_tensor *dx) {
  dx[0] = sl__g_op(g, "dropout_grad", 1, dy, &n->attrs, NULL);
  return sl__g_status(g);
}

/* Masking with 0 is linear: causal_mask(dy, fill = 0) is the gradient. */
static sl_status g_causal_mask(sl_graph *g, const sl__node *n,
                               const sl_tensor *dy, const bool *need,
                               sl_tensor *dx) {
  sl__attrs at = n->attrs;
  sl__attrs_set_float(&at, "fill", 0.0);
  dx[0] = sl__g_op(g, "causal_mask", 1, dy, &at, NULL);
  return sl__g_status(g);
}

const sl__grad_rule sl__grad_rules_pointwise[] = {
    {"add", g_add},
    {"sub", g_sub},
    {"mul", g_mul},
    {"div", g_div},
    {"identity", g_identity},
    {"neg", g_neg},
    {"scalar_add", g_scalar_add},
    {"scalar_mul", g_scalar_mul},
    {"relu", g_relu},
    {"gelu", g_gelu},
    {"tanh", g_tanh},
    {"sigmoid", g_sigmoid},
    {"square", g_square},
    {"sqrt", g_sqrt},
    {"exp", g_exp},
    {"log", g_log},
    {"cast", g_cast},
    {"dropout", g_dropout},
    {"causal_mask", g_causal_mask},
    {NULL, NULL},
};
