/* Gradient rules of the dense family: matmul and batch_matmul (products
 * with transpose flags, no explicit transposes), and softmax, log_softmax,
 * sparse cross-entropy, layer norm and embedding through their _grad ops. */
#include "grad.h"

/* C = op(A) op(B). With dC, for each combination of flags (A, B 2-D):
 *   ta tb   dA                 dB
 *   0  0    dC Bᵀ  mm(dC,B,0,1)  Aᵀ dC  mm(A,dC,1,0)
 *   0  1    dC B   mm(dC,B,0,0)  dCᵀ A  mm(dC,A,1,0)
 *   1  0    B dCᵀ  mm(B,dC,0,1)  A dC   mm(A,dC,0,0)
 *   1  1    Bᵀ dCᵀ mm(B,dC,1,1)  dCᵀ Aᵀ mm(dC,A,1,1)
 * batch_matmul applies the same per batch element. */
static void products(sl_tensor (*mm)(sl_tensor, sl_tensor, bool, bool),
                     sl_tensor a, sl_tensor b, sl_tensor dc, bool ta, bool tb,
                     const bool *need, sl_tensor *dx) {
  if (need[0]) {
    if (!ta)
      dx[0] = tb ? mm(dc, b, false, false) : mm(dc, b, false, true);
    else
      dx[0] = tb ? mm(b, dc, true, true) : mm(b, dc, false, true);
  }
  if (need[1]) {
    if (!tb)
      dx[1] = ta ? mm(a, dc, false, false) : mm(a, dc, true, false);
    else
      dx[1] = ta ? mm(dc, a, true, true) : mm(dc, a, true, false);
  }
}

/* [..., r, c] as [prod(...) * r, c]. */
static sl_tensor flatten2(sl_graph *g, sl_tensor t) {
  const sl_shape *s = &sl__g_meta(g, t)->shape;
  if (s->ndim <= 2) return t;
  sl_shape f = {2, {1, s->dims[s->ndim - 1]}};
  for (int d = 0; d < s->ndim - 1; d++)
    f.dims[0] *= s->dims[d];
  return sl_reshape(t, &f);
}

static sl_status g_matmul(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                          const bool *need, sl_tensor *dx) {
  bool ta = sl__attr_int(&n->attrs, "trans_a", 0) != 0;
  bool tb = sl__attr_int(&n->attrs, "trans_b", 0) != 0;
  sl_tensor a = sl__g_in(g, n, 0), b = sl__g_in(g, n, 1);
  /* a may carry leading dims ([..., m, k], not transposed): dA keeps them
   * (dC has them too); dB contracts over them, so it works on 2-D views.
   * dA comes first, as the chain of input gradients is what a pipeline's
   * previous stage waits for; with leading dims dB does, because its view
   * of dC is a copy when dC has other readers (the residual stream's
   * gradient), and done first it is dead before dA, usually the larger, is
   * written. */
  bool b_first = sl__g_meta(g, a)->shape.ndim > 2;
  for (int pass = 0; pass < 2; pass++) {
    bool want_b = b_first == (pass == 0);
    if (!need[want_b ? 1 : 0]) continue;
    bool only[2] = {!want_b, want_b};
    if (want_b)
      products(sl_matmul, flatten2(g, a), b, flatten2(g, dy[0]), ta, tb, only,
               dx);
    else
      products(sl_matmul, a, b, dy[0], ta, tb, only, dx);
  }
  return sl__g_status(g);
}

static sl_status g_batch_matmul(sl_graph *g, const sl__node *n,
                                const sl_tensor *dy, const bool *need,
                                sl_tensor *dx) {
  bool ta = sl__attr_int(&n->attrs, "trans_a", 0) != 0;
  bool tb = sl__attr_int(&n->attrs, "trans_b", 0) != 0;
  products(sl_batch_matmul, sl__g_in(g, n, 0), sl__g_in(g, n, 1), dy[0], ta, tb,
           need, dx);
  return sl__g_status(g);
}

/* softmax_grad(dy, y; axis), log_softmax_grad(dy, y; axis). */
static sl_status axis_grad(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                           const char *op, sl_tensor *dx) {
  sl_tensor in[2] = {dy[0], sl__g_out(g, n, 0)};
  dx[0] = sl__g_op(g, op, 2, in, &n->attrs, NULL);
  return sl__g_status(g);
}

static sl_status g_softmax(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                           const bool *need, sl_tensor *dx) {
  return axis_grad(g, n, dy, "softmax_grad", dx);
}

static sl_status g_log_softmax(sl_graph *g, const sl__node *n,
                               const sl_tensor *dy, const bool *need,
                               sl_tensor *dx) {
  return axis_grad(g, n, dy, "log_softmax_grad", dx);
}

/* sparse_cross_entropy_grad(dloss, logits, labels) -> dlogits; labels are
 * integers (no gradient). */
static sl_status g_sparse_ce(sl_graph *g, const sl__node *n,
                             const sl_tensor *dy, const bool *need,
                             sl_tensor *dx) {
  if (!need[0]) return sl__g_status(g);
  sl_tensor in[3] = {dy[0], sl__g_in(g, n, 0), sl__g_in(g, n, 1)};
  dx[0] = sl__g_op(g, "sparse_cross_entropy_grad", 3, in, &n->attrs, NULL);
  return sl__g_status(g);
}

/* layer_norm_grad(dy, x, gamma, mean, rstd) -> dx, dgamma, dbeta, from the
 * forward node's saved mean and rstd (outputs 1 and 2). */
static sl_status g_layer_norm(sl_graph *g, const sl__node *n,
                              const sl_tensor *dy, const bool *need,
                              sl_tensor *dx) {
  if (dy[0].id < 0) return sl__g_status(g);
  sl_tensor in[5] = {dy[0], sl__g_in(g, n, 0), sl__g_in(g, n, 1),
                     sl__g_out(g, n, 1), sl__g_out(g, n, 2)};
  sl_tensor outs[SL_OP_MAX_OUTPUTS];
  sl_tensor r = sl__g_op(g, "layer_norm_grad", 5, in, &n->attrs, outs);
  if (r.id < 0) return sl__g_status(g);
  for (int i = 0; i < 3; i++)
    if (need[i]) dx[i] = outs[i];
  return sl__g_status(g);
}

/* embedding_grad(dy, ids; vocab) -> dtable. */
static sl_status g_embedding(sl_graph *g, const sl__node *n,
                             const sl_tensor *dy, const bool *need,
                             sl_tensor *dx) {
  if (!need[0]) return sl__g_status(g);
  sl_tensor table = sl__g_in(g, n, 0);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "vocab", sl__g_meta(g, table)->shape.dims[0]);
  sl_tensor in[2] = {dy[0], sl__g_in(g, n, 1)};
  dx[0] = sl__g_op(g, "embedding_grad", 2, in, &at, NULL);
  return sl__g_status(g);
}

const sl__grad_rule sl__grad_rules_dense[] = {
    {"matmul", g_matmul},
    {"batch_matmul", g_batch_matmul},
    {"softmax", g_softmax},
    {"log_softmax", g_log_softmax},
    {"sparse_cross_entropy", g_sparse_ce},
    {"layer_norm", g_layer_norm},
    {"embedding", g_embedding},
    {NULL, NULL},
};
