/* Builder: the typed wrappers of every op, and the composite ops built
 * from them. Each wrapper checks what only it knows (axes against the
 * input's rank), sets the op's attributes and goes through sl__g_op, which
 * infers shapes with the op's own definition. Attribute names follow the
 * op definitions (docs/ops.md). */
#include <math.h>
#include <string.h>

#include "graph_priv.h"

static sl_tensor op1(const char *op, sl_tensor x, const sl__attrs *at) {
  return sl__g_op(x.graph, op, 1, &x, at, NULL);
}

static sl_tensor op2(const char *op, sl_tensor a, sl_tensor b,
                     const sl__attrs *at) {
  sl_tensor in[2] = {a, b};
  return sl__g_op(a.graph, op, 2, in, at, NULL);
}

/* The input's rank, or -1 (nothing recorded) when the call cannot go on. */
static int rank_of(sl_tensor x, const char *op) {
  if (!sl__g_usable(x.graph, 1, &x, op)) return -1;
  return sl__g_value(x.graph, x.id)->meta.shape.ndim;
}

/* ---- pointwise ---------------------------------------------------------- */

sl_tensor sl_add(sl_tensor a, sl_tensor b) { return op2("add", a, b, NULL); }
sl_tensor sl_sub(sl_tensor a, sl_tensor b) { return op2("sub", a, b, NULL); }
sl_tensor sl_mul(sl_tensor a, sl_tensor b) { return op2("mul", a, b, NULL); }
sl_tensor sl_div(sl_tensor a, sl_tensor b) { return op2("div", a, b, NULL); }

static sl_tensor scalar_op(const char *op, sl_tensor x, double s) {
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "value", s);
  return op1(op, x, &at);
}

sl_tensor sl_add_scalar(sl_tensor x, double s) {
  return scalar_op("scalar_add", x, s);
}
sl_tensor sl_mul_scalar(sl_tensor x, double s) {
  return scalar_op("scalar_mul", x, s);
}
sl_tensor sl_neg(sl_tensor x) { return op1("neg", x, NULL); }
sl_tensor sl_relu(sl_tensor x) { return op1("relu", x, NULL); }
sl_tensor sl_gelu(sl_tensor x) { return op1("gelu", x, NULL); }
sl_tensor sl_tanh(sl_tensor x) { return op1("tanh", x, NULL); }
sl_tensor sl_sigmoid(sl_tensor x) { return op1("sigmoid", x, NULL); }
sl_tensor sl_square(sl_tensor x) { return op1("square", x, NULL); }
sl_tensor sl_sqrt(sl_tensor x) { return op1("sqrt", x, NULL); }
sl_tensor sl_exp(sl_tensor x) { return op1("exp", x, NULL); }
sl_tensor sl_log(sl_tensor x) { return op1("log", x, NULL); }

sl_tensor sl_cast(sl_tensor x, sl_dtype dt) {
  if (rank_of(x, "cast") < 0) return sl__g_poison(x.graph, false);
  if (sl_dtype_size(dt) == 0)
    return sl__g_fail_op(x.graph, "cast", "invalid dtype %d", (int)dt);
  /* To its own dtype: x itself, not a copy (the gradient of a cast to a
   * product's dtype comes back in the dtype it already has). */
  if (sl__g_value(x.graph, x.id)->meta.dtype == dt) return x;
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "dtype", dt);
  return op1("cast", x, &at);
}

/* ---- reductions --------------------------------------------------------- */

static sl_tensor reduce(const char *op, sl_tensor x, int naxes, const int *axes,
                        bool keepdims) {
  int nd = rank_of(x, op);
  if (nd < 0) return sl__g_poison(x.graph, false);
  if (naxes < 0 || naxes > SL_MAX_DIMS || (naxes && !axes))
    return sl__g_fail_op(x.graph, op, "%d axes given", naxes);
  bool seen[SL_MAX_DIMS] = {false};
  int64_t list[SL_MAX_DIMS];
  int n = 0;
  if (naxes == 0)
    for (int a = 0; a < nd; a++)
      seen[a] = true;
  for (int i = 0; i < naxes; i++) {
    int a = axes[i];
    if (!sl__g_axis(&a, nd))
      return sl__g_fail_op(x.graph, op,
                           "axis %d out of range for a %d-d "
                           "tensor",
                           axes[i], nd);
    if (seen[a])
      return sl__g_fail_op(x.graph, op, "axis %d given twice", axes[i]);
    seen[a] = true;
  }
  for (int a = 0; a < nd; a++)
    if (seen[a]) list[n++] = a;
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "axes", n, list);
  sl__attrs_set_int(&at, "keepdims", keepdims);
  return op1(op, x, &at);
}

sl_tensor sl_reduce_sum(sl_tensor x, int naxes, const int *axes,
                        bool keepdims) {
  return reduce("reduce_sum", x, naxes, axes, keepdims);
}
sl_tensor sl_reduce_mean(sl_tensor x, int naxes, const int *axes,
                         bool keepdims) {
  return reduce("reduce_mean", x, naxes, axes, keepdims);
}
sl_tensor sl_reduce_max(sl_tensor x, int naxes, const int *axes,
                        bool keepdims) {
  return reduce("reduce_max", x, naxes, axes, keepdims);
}

static bool shape_ok(const sl_shape *s) {
  if (!s || s->ndim < 0 || s->ndim > SL_MAX_DIMS) return false;
  for (int i = 0; i < s->ndim; i++)
    if (s->dims[i] < -1) return false;
  return true;
}

sl_tensor sl_broadcast_to(sl_tensor x, const sl_shape *shape) {
  if (rank_of(x, "broadcast_to") < 0) return sl__g_poison(x.graph, false);
  if (!shape_ok(shape))
    return sl__g_fail_op(x.graph, "broadcast_to", "invalid target shape");
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "shape", shape->ndim, shape->dims);
  return op1("broadcast_to", x, &at);
}

sl_tensor sl_reduce_sum_like(sl_tensor x, sl_tensor like) {
  sl_tensor in[2] = {x, like};
  if (!sl__g_usable(x.graph, 2, in, "reduce_sum_like"))
    return sl__g_poison(x.graph, false);
  const sl_shape *s = &sl__g_value(x.graph, like.id)->meta.shape;
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "shape", s->ndim, s->dims);
  return op1("reduce_sum_like", x, &at);
}

/* ---- shape ops ---------------------------------------------------------- */

sl_tensor sl_reshape(sl_tensor x, const sl_shape *shape) {
  if (rank_of(x, "reshape") < 0) return sl__g_poison(x.graph, false);
  if (!shape_ok(shape))
    return sl__g_fail_op(x.graph, "reshape", "invalid target shape");
  sl_shape s = *shape;
  /* Resolve one -1 extent here, so the op always sees a full shape. */
  int infer = -1;
  int64_t known = 1,
          total = sl_shape_numel(&sl__g_value(x.graph, x.id)->meta.shape);
  for (int i = 0; i < s.ndim; i++) {
    if (s.dims[i] == -1) {
      if (infer >= 0)
        return sl__g_fail_op(x.graph, "reshape", "more than one -1 extent");
      infer = i;
    } else {
      known *= s.dims[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      return sl__g_fail_op(x.graph, "reshape",
                           "cannot infer the -1 extent: %lld elements into "
                           "parts of %lld",
                           (long long)total, (long long)known);
    s.dims[infer] = total / known;
  }
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "shape", s.ndim, s.dims);
  return op1("reshape", x, &at);
}

sl_tensor sl_transpose(sl_tensor x, int n, const int *perm) {
  int nd = rank_of(x, "transpose");
  if (nd < 0) return sl__g_poison(x.graph, false);
  if (n != nd || (n && !perm))
    return sl__g_fail_op(x.graph, "transpose",
                         "perm has %d entries for a %d-d tensor", n, nd);
  bool seen[SL_MAX_DIMS] = {false};
  int64_t p[SL_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    int a = perm[i];
    if (!sl__g_axis(&a, nd) || seen[a])
      return sl__g_fail_op(x.graph, "transpose",
                           "perm is not a permutation of the %d axes", nd);
    seen[a] = true;
    p[i] = a;
  }
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "perm", n, p);
  return op1("transpose", x, &at);
}

sl_tensor sl_slice_of(sl_tensor x, int axis, int64_t start, int64_t end) {
  int nd = rank_of(x, "slice");
  if (nd < 0) return sl__g_poison(x.graph, false);
  int a = axis;
  if (!sl__g_axis(&a, nd))
    return sl__g_fail_op(x.graph, "slice",
                         "axis %d out of range for a %d-d tensor", axis, nd);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "axis", a);
  sl__attrs_set_int(&at, "start", start);
  sl__attrs_set_int(&at, "end", end);
  return op1("slice", x, &at);
}

sl_tensor sl_concat(int n, const sl_tensor *xs, int axis) {
  if (n <= 0 || !xs) return sl__g_poison(NULL, false);
  sl_graph *g = xs[0].graph;
  if (n > SL_OP_MAX_INPUTS) {
    if (!sl__g_usable(g, 1, xs, "concat")) return sl__g_poison(g, false);
    return sl__g_fail_op(g, "concat", "%d inputs, at most %d", n,
                         SL_OP_MAX_INPUTS);
  }
  if (!sl__g_usable(g, n, xs, "concat")) return sl__g_poison(g, false);
  if (n == 1) return xs[0];
  int nd = sl__g_value(g, xs[0].id)->meta.shape.ndim;
  int a = axis;
  if (!sl__g_axis(&a, nd))
    return sl__g_fail_op(g, "concat", "axis %d out of range for a %d-d tensor",
                         axis, nd);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "axis", a);
  return sl__g_op(g, "concat", n, xs, &at, NULL);
}

/* ---- random, masks ------------------------------------------------------ */

sl_tensor sl_dropout(sl_tensor x, double p, uint64_t seed) {
  if (rank_of(x, "dropout") < 0) return sl__g_poison(x.graph, false);
  if (!(p >= 0 && p < 1))
    return sl__g_fail_op(x.graph, "dropout", "p = %g is outside [0, 1)", p);
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "p", p);
  sl__attrs_set_int(&at, "seed", (int64_t)seed);
  return op1("dropout", x, &at);
}

sl_tensor sl_causal_mask(sl_tensor x) {
  int nd = rank_of(x, "causal_mask");
  if (nd < 0) return sl__g_poison(x.graph, false);
  if (nd < 2)
    return sl__g_fail_op(x.graph, "causal_mask",
                         "needs at least 2 axes, the input has %d", nd);
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "fill", -INFINITY);
  return op1("causal_mask", x, &at);
}

/* ---- dense ops ---------------------------------------------------------- */

sl_tensor sl_matmul(sl_tensor a, sl_tensor b, bool trans_a, bool trans_b) {
  return sl__g_matmul(a, b, trans_a, trans_b, 1);
}

/* A matrix product's operand in the graph's compute dtype: an f32 one
 * cast to it (sl_graph_set_compute_dtype), once per value: the products
 * reading one activation (q, k and v of a layer norm's output) or one
 * output gradient (both gradients of a product) share its cast. */
static sl_tensor compute_operand(sl_tensor x) {
  sl_graph *g = x.graph;
  if (!g || x.id < 0 || g->compute_dtype == SL_DTYPE_F32 ||
      sl__g_value(g, x.id)->meta.dtype != SL_DTYPE_F32)
    return x;
  int32_t memo = sl__g_value(g, x.id)->compute_cast - 1;
  if (memo >= 0 && sl__g_value(g, memo)->meta.dtype == g->compute_dtype)
    return sl__g_tensor(g, memo);
  sl_tensor c = sl_cast(x, g->compute_dtype);
  if (c.id >= 0) sl__g_value(g, x.id)->compute_cast = c.id + 1;
  return c;
}

sl_tensor sl__g_matmul(sl_tensor a, sl_tensor b, bool trans_a, bool trans_b,
                       int contract) {
  a = compute_operand(a);
  b = compute_operand(b);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "trans_a", trans_a);
  sl__attrs_set_int(&at, "trans_b", trans_b);
  /* absent means 1: plans of one-axis products stay as they were */
  if (contract != 1) sl__attrs_set_int(&at, "contract", contract);
  return op2("matmul", a, b, &at);
}

sl_tensor sl_tensordot(sl_tensor a, sl_tensor b, int axes) {
  return sl__g_matmul(a, b, false, false, axes);
}

sl_tensor sl_batch_matmul(sl_tensor a, sl_tensor b, bool trans_a,
                          bool trans_b) {
  a = compute_operand(a);
  b = compute_operand(b);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "trans_a", trans_a);
  sl__attrs_set_int(&at, "trans_b", trans_b);
  return op2("batch_matmul", a, b, &at);
}

static sl_tensor axis_op(const char *op, sl_tensor x, int axis) {
  int nd = rank_of(x, op);
  if (nd < 0) return sl__g_poison(x.graph, false);
  int a = axis;
  if (!sl__g_axis(&a, nd))
    return sl__g_fail_op(x.graph, op, "axis %d out of range for a %d-d tensor",
                         axis, nd);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "axis", a);
  return op1(op, x, &at);
}

sl_tensor sl_softmax(sl_tensor x, int axis) {
  return axis_op("softmax", x, axis);
}

sl_tensor sl_log_softmax(sl_tensor x, int axis) {
  return axis_op("log_softmax", x, axis);
}

sl_tensor sl_sparse_cross_entropy(sl_tensor logits, sl_tensor labels) {
  return op2("sparse_cross_entropy", logits, labels, NULL);
}

sl_tensor sl_one_hot(sl_tensor labels, int64_t classes) {
  sl_graph *g = labels.graph;
  if (!sl__g_usable(g, 1, &labels, "one_hot")) return sl__g_poison(g, false);
  if (classes < 1)
    return sl__g_fail_op(g, "one_hot",
                         "classes = %lld: want at least 1",
                         (long long)classes);
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "classes", classes);
  return op1("one_hot", labels, &at);
}

sl_tensor sl_layer_norm(sl_tensor x, sl_tensor gamma, sl_tensor beta,
                        double eps) {
  sl_tensor in[3] = {x, gamma, beta};
  sl_graph *g = x.graph;
  if (!sl__g_usable(g, 3, in, "layer_norm")) return sl__g_poison(g, false);
  if (!(eps > 0) || !isfinite(eps))
    return sl__g_fail_op(g, "layer_norm", "eps = %g must be positive", eps);
  sl__attrs at = {0};
  sl__attrs_set_float(&at, "eps", eps);
  return sl__g_op(g, "layer_norm", 3, in, &at, NULL);
}

sl_tensor sl_embedding(sl_tensor table, sl_tensor ids) {
  return op2("embedding", table, ids, NULL);
}

/* ---- composites --------------------------------------------------------- */

/* Runs a composite inside a scope "<kind>_<n>" so its parts are grouped. */
static void composite_begin(sl_graph *g, const char *kind) {
  char base[64];
  snprintf(base, sizeof base, "%s_%lld", kind, (long long)g->serial++);
  sl_graph_push_scope(g, base);
}

sl_tensor sl_scaled_dot_product_attention(sl_tensor q, sl_tensor k, sl_tensor v,
                                          bool causal) {
  sl_tensor in[3] = {q, k, v};
  sl_graph *g = q.graph;
  if (!sl__g_usable(g, 3, in, "attention")) return sl__g_poison(g, false);
  const sl_shape *qs = &sl__g_value(g, q.id)->meta.shape;
  if (qs->ndim < 2)
    return sl__g_fail_op(g, "attention", "q has %d axes, want [..., seq, dim]",
                         qs->ndim);
  int64_t d = qs->dims[qs->ndim - 1];
  composite_begin(g, "attention");
  sl_tensor s = sl_batch_matmul(q, k, false, true);
  s = sl_mul_scalar(s, d > 0 ? 1.0 / sqrt((double)d) : 1.0);
  if (causal) s = sl_causal_mask(s);
  s = sl_softmax(s, -1);
  /* bf16 values: the probabilities meet them in bf16 too (both matmuls
   * then take bf16 inputs, as under autocast); the softmax stays f32. */
  if (sl__g_value(g, v.id)->meta.dtype == SL_DTYPE_BF16)
    s = sl_cast(s, SL_DTYPE_BF16);
  sl_tensor out = sl_batch_matmul(s, v, false, false);
  sl_graph_pop_scope(g);
  return out;
}

sl_tensor sl_mse_loss(sl_tensor pred, sl_tensor target) {
  sl_tensor in[2] = {pred, target};
  sl_graph *g = pred.graph;
  if (!sl__g_usable(g, 2, in, "mse_loss")) return sl__g_poison(g, false);
  composite_begin(g, "mse_loss");
  sl_tensor r = sl_reduce_mean(sl_square(sl_sub(pred, target)), 0, NULL, false);
  sl_graph_pop_scope(g);
  return r;
}

sl_tensor sl_cross_entropy(sl_tensor logits, sl_tensor labels) {
  sl_tensor in[2] = {logits, labels};
  sl_graph *g = logits.graph;
  if (!sl__g_usable(g, 2, in, "cross_entropy")) return sl__g_poison(g, false);
  composite_begin(g, "cross_entropy");
  sl_tensor r =
      sl_reduce_mean(sl_sparse_cross_entropy(logits, labels), 0, NULL, false);
  sl_graph_pop_scope(g);
  return r;
}
