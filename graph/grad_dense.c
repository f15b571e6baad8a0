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
 * batch_matmul applies the same per batch element; matmul with c
 * contraction axes the same to its operands' axis groups: dA contracts
 * over C's column axes (as many as B has besides its c), dB over its row
 * axes (as many as A has besides its c), and each lands in its operand's
 * own axes and order. No reshape, so nothing is copied. */
static sl_tensor mm_n(bool batched, sl_tensor x, sl_tensor y, bool tx, bool ty,
                      int contract) {
  return batched ? sl_batch_matmul(x, y, tx, ty)
                 : sl__g_matmul(x, y, tx, ty, contract);
}

static void products(bool batched, sl_tensor a, sl_tensor b, sl_tensor dc,
                     bool ta, bool tb, int ca, int cb, const bool *need,
                     sl_tensor *dx) {
  if (need[0]) {
    if (!ta)
      dx[0] = tb ? mm_n(batched, dc, b, false, false, ca)
                 : mm_n(batched, dc, b, false, true, ca);
    else
      dx[0] = tb ? mm_n(batched, b, dc, true, true, ca)
                 : mm_n(batched, b, dc, false, true, ca);
  }
  if (need[1]) {
    if (!tb)
      dx[1] = ta ? mm_n(batched, a, dc, false, false, cb)
                 : mm_n(batched, a, dc, true, false, cb);
    else
      dx[1] = ta ? mm_n(batched, dc, a, true, true, cb)
                 : mm_n(batched, dc, a, true, false, cb);
  }
}

static sl_status g_matmul(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                          const bool *need, sl_tensor *dx) {
  bool ta = sl__attr_int(&n->attrs, "trans_a", 0) != 0;
  bool tb = sl__attr_int(&n->attrs, "trans_b", 0) != 0;
  int c = (int)sl__attr_int(&n->attrs, "contract", 1);
  sl_tensor a = sl__g_in(g, n, 0), b = sl__g_in(g, n, 1);
  const sl_shape *as = &sl__g_meta(g, a)->shape, *bs = &sl__g_meta(g, b)->shape;
  /* The smaller gradient first. A weight's gradient goes to its update
   * right away, so made before a larger dA it is gone when dA is written
   * (gpt's [B,S,4D] x [4D,D]); a smaller dA (a narrow batch through a wide
   * weight) goes first, which is also what a pipeline's previous stage
   * waits for. */
  bool b_first = sl_shape_numel(bs) < sl_shape_numel(as);
  for (int k = 0; k < 2; k++) {
    int which = b_first ? 1 - k : k;
    bool only[2] = {which == 0, which == 1};
    if (need[which])
      products(false, a, b, dy[0], ta, tb, bs->ndim - c, as->ndim - c, only,
               dx);
  }
  return sl__g_status(g);
}

static sl_status g_batch_matmul(sl_graph *g, const sl__node *n,
                                const sl_tensor *dy, const bool *need,
                                sl_tensor *dx) {
  bool ta = sl__attr_int(&n->attrs, "trans_a", 0) != 0;
  bool tb = sl__attr_int(&n->attrs, "trans_b", 0) != 0;
  products(true, sl__g_in(g, n, 0), sl__g_in(g, n, 1), dy[0], ta, tb, 1, 1,
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

/* Whether the table's layout is the user's and splits its rows. */
static bool rows_split(const sl__value *t) {
  for (int m = 0; t->sbp_fixed && m < t->sbp.ndim; m++)
    if (t->sbp.sbp[m].kind == SL_SBP_SPLIT && t->sbp.sbp[m].axis == 0)
      return true;
  return false;
}

/* embedding_grad(dy, ids; vocab) -> dtable. A table split over its rows
 * gets its gradient in its own layout: the compiler then gathers the
 * looked-up rows' gradients and ids (one row per id) to the devices and
 * each adds those of its rows (B, B -> S(0)), instead of building a dense
 * partial [vocab, dim] on every device and reduce-scattering it. The
 * bytes moved follow the rows looked up, not the table's size
 * (docs/ops.md, Embedding). */
static sl_status g_embedding(sl_graph *g, const sl__node *n,
                             const sl_tensor *dy, const bool *need,
                             sl_tensor *dx) {
  if (!need[0]) return sl__g_status(g);
  sl_tensor table = sl__g_in(g, n, 0);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "vocab", sl__g_meta(g, table)->shape.dims[0]);
  sl_tensor in[2] = {dy[0], sl__g_in(g, n, 1)};
  dx[0] = sl__g_op(g, "embedding_grad", 2, in, &at, NULL);
  const sl__value *t = sl__g_value(g, table.id);
  if (dx[0].id >= 0 && rows_split(t) &&
      sl__g_value(g, dx[0].id)->placement == t->placement) {
    sl__value *d = sl__g_value(g, dx[0].id);
    d->sbp = t->sbp;
    d->sbp_fixed = true;
  }
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
