/* Gradients of every differentiable op against central finite differences,
 * through the reference interpreter, on shapes with odd extents. */
#include "graph_priv.h"
#include "graph_test.h"

#define F32(...)                                                               \
  { SL_SHAPE(__VA_ARGS__), SL_DTYPE_F32, GT_ANY, 0 }
#define POS(...)                                                               \
  { SL_SHAPE(__VA_ARGS__), SL_DTYPE_F32, GT_POSITIVE, 0 }
#define AWAY0(...)                                                             \
  { SL_SHAPE(__VA_ARGS__), SL_DTYPE_F32, GT_AWAY0, 0 }
#define SPREAD(...)                                                            \
  { SL_SHAPE(__VA_ARGS__), SL_DTYPE_F32, GT_SPREAD, 0 }
#define IDX(hi, ...)                                                           \
  { SL_SHAPE(__VA_ARGS__), SL_DTYPE_I32, GT_INDEX, hi }

#define CHECK(name, build, ...)                                                \
  do {                                                                         \
    const gt_input in_[] = {__VA_ARGS__};                                      \
    gt_grad_check(name, (int)SL_ARRAY_LEN(in_), in_, build, ops_);             \
  } while (0)

/* ---- broadcasting binary ops -------------------------------------------- */

static sl_tensor b_add(sl_graph *g, const sl_tensor *x) {
  return sl_add(x[0], x[1]);
}
static sl_tensor b_sub(sl_graph *g, const sl_tensor *x) {
  return sl_sub(x[0], x[1]);
}
static sl_tensor b_mul(sl_graph *g, const sl_tensor *x) {
  return sl_mul(x[0], x[1]);
}
static sl_tensor b_div(sl_graph *g, const sl_tensor *x) {
  return sl_div(x[0], x[1]);
}

static void test_binary(void **state) {
  const char *ops_[] = {"add",        "sub",  "mul", "div", "reduce_sum_like",
                        "reduce_sum", "fill", "neg", NULL};
  CHECK("add", b_add, F32(5, 3), F32(5, 3));
  CHECK("add broadcast row", b_add, F32(5, 3), F32(3));
  CHECK("add broadcast both", b_add, F32(5, 1), F32(1, 3));
  CHECK("sub broadcast", b_sub, F32(3), F32(4, 3));
  CHECK("mul broadcast", b_mul, F32(2, 5, 3), F32(5, 1));
  CHECK("div broadcast", b_div, F32(5, 3), POS(3));
  CHECK("div", b_div, F32(7), POS(7));
}

/* ---- one-input pointwise ------------------------------------------------- */

static sl_tensor u_neg(sl_graph *g, const sl_tensor *x) { return sl_neg(x[0]); }
static sl_tensor u_sadd(sl_graph *g, const sl_tensor *x) {
  return sl_add_scalar(x[0], 1.5);
}
static sl_tensor u_smul(sl_graph *g, const sl_tensor *x) {
  return sl_mul_scalar(x[0], -2.5);
}
static sl_tensor u_relu(sl_graph *g, const sl_tensor *x) {
  return sl_relu(x[0]);
}
static sl_tensor u_gelu(sl_graph *g, const sl_tensor *x) {
  return sl_gelu(x[0]);
}
static sl_tensor u_tanh(sl_graph *g, const sl_tensor *x) {
  return sl_tanh(x[0]);
}
static sl_tensor u_sigmoid(sl_graph *g, const sl_tensor *x) {
  return sl_sigmoid(x[0]);
}
static sl_tensor u_square(sl_graph *g, const sl_tensor *x) {
  return sl_square(x[0]);
}
static sl_tensor u_sqrt(sl_graph *g, const sl_tensor *x) {
  return sl_sqrt(x[0]);
}
static sl_tensor u_exp(sl_graph *g, const sl_tensor *x) { return sl_exp(x[0]); }
static sl_tensor u_log(sl_graph *g, const sl_tensor *x) { return sl_log(x[0]); }
static sl_tensor u_cast(sl_graph *g, const sl_tensor *x) {
  return sl_cast(
      sl_mul(sl_cast(x[0], SL_DTYPE_F64), sl_cast(x[0], SL_DTYPE_F64)),
      SL_DTYPE_F32);
}
static sl_tensor u_identity(sl_graph *g, const sl_tensor *x) {
  return sl_to_global(sl_square(x[0]), "cpu:1-2", "S(0)");
}

static void test_unary(void **state) {
  const char *ops_[] = {
      "neg",          "scalar_add", "scalar_mul", "relu",      "relu_grad",
      "gelu",         "gelu_grad",  "tanh",       "tanh_grad", "sigmoid",
      "sigmoid_grad", "square",     "sqrt",       "exp",       "log",
      "mul",          "div",        "reduce_sum", NULL};
  CHECK("neg", u_neg, F32(5, 3));
  CHECK("scalar_add", u_sadd, F32(7));
  CHECK("scalar_mul", u_smul, F32(3, 5));
  CHECK("relu", u_relu, AWAY0(5, 3));
  CHECK("gelu", u_gelu, F32(5, 3));
  CHECK("tanh", u_tanh, F32(5, 3));
  CHECK("sigmoid", u_sigmoid, F32(5, 3));
  CHECK("square", u_square, F32(5, 3));
  CHECK("sqrt", u_sqrt, POS(5, 3));
  CHECK("exp", u_exp, F32(5, 3));
  CHECK("log", u_log, POS(5, 3));
}

static void test_cast_identity(void **state) {
  const char *ops_[] = {"cast",     "mul",        "square",
                        "identity", "reduce_sum", NULL};
  CHECK("cast f32 -> f64 -> f32", u_cast, F32(5, 3));
  CHECK("to_global (identity)", u_identity, F32(5, 3));
}

/* ---- reductions and shapes ----------------------------------------------- */

static sl_tensor r_sum(sl_graph *g, const sl_tensor *x) {
  int axes[1] = {1};
  return sl_reduce_sum(x[0], 1, axes, false);
}
static sl_tensor r_sum_keep(sl_graph *g, const sl_tensor *x) {
  int axes[2] = {0, 2};
  return sl_reduce_sum(x[0], 2, axes, true);
}
static sl_tensor r_mean(sl_graph *g, const sl_tensor *x) {
  int axes[1] = {-1};
  return sl_reduce_mean(x[0], 1, axes, false);
}
static sl_tensor r_mean_all(sl_graph *g, const sl_tensor *x) {
  return sl_reduce_mean(x[0], 0, NULL, false);
}
static sl_tensor r_max(sl_graph *g, const sl_tensor *x) {
  int axes[1] = {1};
  return sl_reduce_max(x[0], 1, axes, false);
}
static sl_tensor r_max_keep(sl_graph *g, const sl_tensor *x) {
  int axes[2] = {0, 2};
  return sl_reduce_max(x[0], 2, axes, true);
}
/* Ties: the maximum of [x, x] is reached twice; each copy gets half. */
static sl_tensor r_max_tie(sl_graph *g, const sl_tensor *x) {
  sl_tensor parts[2] = {x[0], x[0]};
  int axes[1] = {1};
  return sl_reduce_max(sl_concat(2, parts, 1), 1, axes, false);
}
static sl_tensor r_sum_like(sl_graph *g, const sl_tensor *x) {
  return sl_reduce_sum_like(x[0], x[1]);
}
static sl_tensor s_bcast(sl_graph *g, const sl_tensor *x) {
  sl_shape s = SL_SHAPE(2, 5, 3);
  return sl_broadcast_to(x[0], &s);
}
static sl_tensor s_reshape(sl_graph *g, const sl_tensor *x) {
  sl_shape s = SL_SHAPE(3, -1);
  return sl_square(sl_reshape(x[0], &s));
}
static sl_tensor s_transpose(sl_graph *g, const sl_tensor *x) {
  int perm[3] = {2, 0, 1};
  return sl_square(sl_transpose(x[0], 3, perm));
}
static sl_tensor s_slice(sl_graph *g, const sl_tensor *x) {
  return sl_square(sl_slice_of(x[0], 1, 1, -1));
}
static sl_tensor s_slice0(sl_graph *g, const sl_tensor *x) {
  return sl_slice_of(x[0], 0, 0, 2);
}
static sl_tensor s_concat(sl_graph *g, const sl_tensor *x) {
  sl_tensor parts[3] = {x[0], sl_square(x[1]), x[0]};
  return sl_concat(3, parts, 1);
}

static void test_shape_and_reduce(void **state) {
  const char *ops_[] = {"reduce_sum",   "reduce_mean", "reduce_sum_like",
                        "reduce_max",   "relu_grad",   "div",
                        "sub",          "neg",         "scalar_add",
                        "broadcast_to", "reshape",     "transpose",
                        "slice",        "concat",      "fill",
                        "square",       "mul",         NULL};
  CHECK("reduce_sum", r_sum, F32(5, 3));
  CHECK("reduce_sum keepdims", r_sum_keep, F32(3, 2, 5));
  CHECK("reduce_mean", r_mean, F32(5, 7));
  CHECK("reduce_mean all", r_mean_all, F32(3, 5));
  CHECK("reduce_sum_like", r_sum_like, F32(4, 5, 3), F32(5, 1));
  CHECK("reduce_max", r_max, SPREAD(5, 7));
  CHECK("reduce_max keepdims", r_max_keep, SPREAD(3, 2, 5));
  CHECK("reduce_max tie", r_max_tie, SPREAD(4, 3));
  CHECK("broadcast_to", s_bcast, F32(5, 1));
  CHECK("reshape", s_reshape, F32(5, 3));
  CHECK("transpose", s_transpose, F32(2, 5, 3));
  CHECK("slice inner", s_slice, F32(3, 7));
  CHECK("slice start", s_slice0, F32(5, 3));
  CHECK("concat", s_concat, F32(3, 2), F32(3, 5));
}

/* ---- dense ops -------------------------------------------------------------
 */

static sl_tensor m_nn(sl_graph *g, const sl_tensor *x) {
  return sl_matmul(x[0], x[1], false, false);
}
static sl_tensor m_nt(sl_graph *g, const sl_tensor *x) {
  return sl_matmul(x[0], x[1], false, true);
}
static sl_tensor m_tn(sl_graph *g, const sl_tensor *x) {
  return sl_matmul(x[0], x[1], true, false);
}
static sl_tensor m_tt(sl_graph *g, const sl_tensor *x) {
  return sl_matmul(x[0], x[1], true, true);
}
static sl_tensor dot2(sl_graph *g, const sl_tensor *x) {
  return sl_tensordot(x[0], x[1], 2);
}
static sl_tensor m2_tt(sl_graph *g, const sl_tensor *x) {
  return sl__g_matmul(x[0], x[1], true, true, 2);
}
static sl_tensor m2_tn(sl_graph *g, const sl_tensor *x) {
  return sl__g_matmul(x[0], x[1], true, false, 2);
}
static sl_tensor bm_nn(sl_graph *g, const sl_tensor *x) {
  return sl_batch_matmul(x[0], x[1], false, false);
}
static sl_tensor bm_nt(sl_graph *g, const sl_tensor *x) {
  return sl_batch_matmul(x[0], x[1], false, true);
}
static sl_tensor bm_tn(sl_graph *g, const sl_tensor *x) {
  return sl_batch_matmul(x[0], x[1], true, false);
}
static sl_tensor bm_tt(sl_graph *g, const sl_tensor *x) {
  return sl_batch_matmul(x[0], x[1], true, true);
}

static void test_matmul(void **state) {
  const char *ops_[] = {"matmul", "batch_matmul", "reshape", NULL};
  CHECK("matmul", m_nn, F32(5, 3), F32(3, 7));
  CHECK("matmul trans_b", m_nt, F32(5, 3), F32(7, 3));
  CHECK("matmul trans_a", m_tn, F32(3, 5), F32(3, 7));
  CHECK("matmul trans_a trans_b", m_tt, F32(3, 5), F32(7, 3));
  CHECK("matmul leading dims", m_nn, F32(2, 5, 3), F32(3, 4));
  CHECK("matmul leading dims trans_b", m_nt, F32(2, 3, 3), F32(4, 3));
  /* several column and contraction axes, every flag */
  CHECK("matmul column axes", m_nn, F32(2, 3, 4), F32(4, 2, 3));
  CHECK("matmul column axes trans_b", m_nt, F32(5, 3), F32(2, 4, 3));
  CHECK("matmul row axes trans_a", m_tn, F32(3, 2, 5), F32(3, 4));
  CHECK("tensordot 2 axes", dot2, F32(2, 3, 4, 5), F32(4, 5, 3));
  CHECK("matmul 2 axes trans_a trans_b", m2_tt, F32(4, 5, 3), F32(2, 4, 5));
  CHECK("matmul 2 axes trans_a", m2_tn, F32(4, 5, 2, 3), F32(4, 5, 3));
  CHECK("batch_matmul", bm_nn, F32(2, 5, 3), F32(2, 3, 4));
  CHECK("batch_matmul trans_b", bm_nt, F32(3, 5, 3), F32(3, 4, 3));
  CHECK("batch_matmul trans_a", bm_tn, F32(2, 3, 5), F32(2, 3, 4));
  CHECK("batch_matmul trans_a trans_b", bm_tt, F32(2, 2, 3, 5),
        F32(2, 2, 4, 3));
}

static sl_tensor d_softmax(sl_graph *g, const sl_tensor *x) {
  return sl_softmax(x[0], -1);
}
static sl_tensor d_softmax0(sl_graph *g, const sl_tensor *x) {
  return sl_softmax(x[0], 0);
}
static sl_tensor d_lsm(sl_graph *g, const sl_tensor *x) {
  return sl_log_softmax(x[0], 1);
}
static sl_tensor d_lsm0(sl_graph *g, const sl_tensor *x) {
  return sl_log_softmax(x[0], 0);
}
static sl_tensor d_sce(sl_graph *g, const sl_tensor *x) {
  return sl_sparse_cross_entropy(x[0], x[1]);
}
static sl_tensor d_ce(sl_graph *g, const sl_tensor *x) {
  return sl_cross_entropy(x[0], x[1]);
}
static sl_tensor d_mse(sl_graph *g, const sl_tensor *x) {
  return sl_mse_loss(x[0], x[1]);
}
static sl_tensor d_ln(sl_graph *g, const sl_tensor *x) {
  return sl_layer_norm(x[0], x[1], x[2], 1e-5);
}
static sl_tensor d_emb(sl_graph *g, const sl_tensor *x) {
  return sl_embedding(x[0], x[1]);
}

static void test_dense(void **state) {
  const char *ops_[] = {"softmax",
                        "softmax_grad",
                        "log_softmax",
                        "log_softmax_grad",
                        "sparse_cross_entropy",
                        "sparse_cross_entropy_grad",
                        "reduce_mean",
                        "layer_norm",
                        "layer_norm_grad",
                        "embedding",
                        "embedding_grad",
                        "broadcast_to",
                        "reshape",
                        "sub",
                        "square",
                        NULL};
  CHECK("softmax", d_softmax, F32(5, 3));
  CHECK("softmax axis 0", d_softmax0, F32(5, 3));
  CHECK("log_softmax", d_lsm, F32(3, 5, 2));
  CHECK("log_softmax axis 0", d_lsm0, F32(5, 3));
  CHECK("sparse_cross_entropy", d_sce, F32(5, 7), IDX(7, 5));
  CHECK("cross_entropy", d_ce, F32(2, 3, 7), IDX(7, 2, 3));
  CHECK("mse_loss", d_mse, F32(5, 3), F32(5, 3));
  CHECK("layer_norm", d_ln, F32(5, 7), F32(7), F32(7));
  CHECK("layer_norm 3-d", d_ln, F32(2, 3, 5), F32(5), F32(5));
  CHECK("embedding", d_emb, F32(7, 3), IDX(7, 2, 5));
}

/* ---- random, masks, attention ---------------------------------------------
 */

static sl_tensor x_dropout(sl_graph *g, const sl_tensor *x) {
  return sl_dropout(x[0], 0.3, 11);
}
static sl_tensor x_mask(sl_graph *g, const sl_tensor *x) {
  return sl_softmax(sl_causal_mask(x[0]), -1);
}
static sl_tensor x_attention(sl_graph *g, const sl_tensor *x) {
  return sl_scaled_dot_product_attention(x[0], x[1], x[2], true);
}
static sl_tensor x_attention_nc(sl_graph *g, const sl_tensor *x) {
  return sl_scaled_dot_product_attention(x[0], x[1], x[2], false);
}

static void test_random_mask_attention(void **state) {
  const char *ops_[] = {
      "dropout",      "dropout_grad", "causal_mask", "softmax",
      "softmax_grad", "batch_matmul", "scalar_mul",  NULL};
  CHECK("dropout", x_dropout, F32(5, 7));
  CHECK("causal_mask", x_mask, F32(2, 5, 5));
  CHECK("attention causal", x_attention, F32(2, 5, 3), F32(2, 5, 3),
        F32(2, 5, 4));
  CHECK("attention", x_attention_nc, F32(2, 3, 2), F32(2, 5, 2), F32(2, 5, 3));
}

/* A value used twice gets the sum of both gradients. */
static sl_tensor x_reuse(sl_graph *g, const sl_tensor *x) {
  sl_tensor h = sl_tanh(x[0]);
  return sl_add(sl_mul(h, x[0]), sl_matmul(h, x[1], false, false));
}

static void test_accumulation(void **state) {
  const char *ops_[] = {"tanh", "tanh_grad", "mul", "add", "matmul", NULL};
  CHECK("reuse", x_reuse, F32(3, 3), F32(3, 3));
}

/* An op without a gradient rule on the path is an error naming it. */
static void test_no_gradient(void **state) {
  GT_REQUIRE_OPS("maximum", "reduce_sum");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape s = SL_SHAPE(3, 4);
  sl_tensor x = sl_input(g, "x", &s, SL_DTYPE_F32, NULL, NULL);
  sl_tensor m = sl__g_op(g, "maximum", 2, (sl_tensor[]){x, x}, NULL, NULL);
  m = sl_name(m, "peak");
  sl_tensor loss = sl_reduce_sum(m, 0, NULL, false);
  sl_tensor grad;
  assert_int_equal(sl__graph_gradients(loss, 1, &x, &grad), SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_graph_error(g), "op 'peak' (maximum)"));
  sl_graph_destroy(g);
  /* A non-scalar loss is refused. */
  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &s, SL_DTYPE_F32, NULL, NULL);
  assert_int_equal(sl__graph_gradients(x, 1, &x, &grad), SL_EINVAL);
  assert_non_null(strstr(sl_graph_error(g), "one element"));
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_cast_identity),
      cmocka_unit_test(test_shape_and_reduce),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_dense),
      cmocka_unit_test(test_random_mask_attention),
      cmocka_unit_test(test_accumulation),
      cmocka_unit_test(test_no_gradient),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
