/* SBP inference and boxing insertion: data parallel, Megatron tensor
 * parallel, 2-D meshes, reshape splits that need even cuts, user
 * constraints, sources that follow their consumers, placement changes,
 * idempotence, and the interpreter giving the same values before and after
 * compilation. */
#include <math.h>
#include <stdlib.h>

#include "graph_test.h"

static sl_nd_sbp sbp_of(sl_graph *g, sl_tensor t) {
  return sl__graph_value(g, t.id)->sbp;
}

static void assert_sbp(sl_graph *g, sl_tensor t, const char *want) {
  sl_nd_sbp w, got = sbp_of(g, t);
  GT_OK(sl_nd_sbp_parse(want, &w));
  if (!sl_nd_sbp_equal(&w, &got)) {
    char buf[64];
    sl_nd_sbp_print(&got, buf, sizeof buf);
    fail_msg("'%s': SBP %s, want %s", sl_tensor_name(t), buf, want);
  }
}

/* Boxing nodes of the graph that move data (some rank sends bytes); with
 * `forward_only`, those not created by autodiff or minimize. */
static int count_boxing(sl_graph *g, bool forward_only) {
  int n = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING ||
        (forward_only && (nd->backward || nd->optimizer)))
      continue;
    const int64_t *sent = sl_boxing_route_bytes_sent(nd->boxing);
    bool moves = false;
    for (int r = 0; r < sl_boxing_route_rank_count(nd->boxing); r++)
      moves = moves || sent[r] > 0;
    n += moves;
  }
  return n;
}

/* Fails with the graph's listing. */
static void dump_fail(sl_graph *g, const char *why) {
  static char buf[1 << 16];
  sl_graph_print(g, buf, sizeof buf);
  fail_msg("%s\n%s", why, buf);
}

/* The boxing node feeding input k of the node producing t, or NULL. */
static const sl__node *boxing_into(sl_graph *g, const sl__node *consumer,
                                   int k) {
  const sl__value *v = sl__graph_value(g, consumer->in[k]);
  const sl__node *p = sl__graph_node(g, v->producer);
  return p->kind == SL__NODE_BOXING ? p : NULL;
}

static const sl__node *node_of(sl_graph *g, sl_tensor t) {
  return sl__graph_node(g, sl__graph_value(g, t.id)->producer);
}

/* Every op node's inputs now have exactly the SBP and placement it needs. */
static void assert_consistent(sl_graph *g) {
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    for (int k = 0; k < nd->n_in; k++) {
      const sl__value *v = sl__graph_value(g, nd->in[k]);
      assert_true(v->producer < i); /* topological */
      if (nd->kind != SL__NODE_OP) continue;
      assert_true(v->placement == nd->placement);
      assert_true(sl_nd_sbp_equal(&v->sbp, &nd->in_sbp[k]));
    }
    for (int j = 0; j < nd->n_out; j++) {
      const sl__value *v = sl__graph_value(g, nd->out[j]);
      assert_int_equal(v->producer, i);
      assert_int_equal(v->sbp.ndim, sl_placement_mesh_ndim(v->placement));
      GT_OK(sl_nd_sbp_check(&v->sbp, v->placement, &v->meta.shape));
    }
    if (nd->kind == SL__NODE_VARIABLE && nd->update >= 0) {
      const sl__value *var = sl__graph_value(g, nd->out[0]);
      const sl__value *u = sl__graph_value(g, nd->update);
      assert_true(var->placement == u->placement);
      assert_true(sl_nd_sbp_equal(&var->sbp, &u->sbp));
    }
  }
}

/* A data-parallel MLP: activations stay S(0), weight gradients are partial
 * and all-reduced before the update; nothing else moves. */
static void data_parallel_mlp(bool clip) {
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_set_default_placement(g, "cpu:0-3"));
  sl_shape xs = SL_SHAPE(18, 6), w1s = SL_SHAPE(6, 10), bs = SL_SHAPE(10),
           w2s = SL_SHAPE(10, 5), ls = SL_SHAPE(18);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor labels = sl_input(g, "labels", &ls, SL_DTYPE_I32, NULL, "S(0)");
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_kaiming_uniform(1.4, 1), NULL, NULL);
  sl_tensor b1 =
      sl_variable(g, "b1", &bs, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 2), NULL, NULL);
  sl_tensor h =
      sl_name(sl_relu(sl_add(sl_matmul(x, w1, false, false), b1)), "h");
  sl_tensor logits = sl_name(sl_matmul(h, w2, false, false), "logits");
  sl_tensor loss = sl_name(sl_cross_entropy(logits, labels), "loss");
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0.9);
  if (clip) opt.clip_norm = 1.0;
  GT_OK(sl_minimize(loss, &opt));
  GT_OK(sl_fetch(loss, "loss_out"));
  GT_OK(sl__graph_compile(g));
  assert_consistent(g);
  assert_sbp(g, h, "S(0)");
  assert_sbp(g, logits, "S(0)");
  assert_sbp(g, loss, "P");
  assert_int_equal(count_boxing(g, true), 0);
  /* Each weight's update consumes an all-reduced (P -> B) gradient. */
  const char *weights[] = {"w1", "b1", "w2"};
  for (size_t i = 0; i < SL_ARRAY_LEN(weights) && !clip; i++) {
    const sl__node *w = sl__graph_node(g, sl__graph_find(g, weights[i]));
    const sl__node *up =
        sl__graph_node(g, sl__graph_value(g, w->update)->producer);
    assert_string_equal(up->op->name, "sgd_update");
    assert_true(up->optimizer);
    const sl__node *box = boxing_into(g, up, 1);
    if (!box) fail_msg("no boxing into %s's gradient", weights[i]);
    assert_int_equal(sl_boxing_route_step_count(box->boxing), 1);
    assert_int_equal(sl_boxing_step_op(box->boxing, 0), SL_BOXING_ALL_REDUCE);
    char in[16], out[16];
    sl_nd_sbp_print(&box->in_sbp[0], in, sizeof in);
    sl_nd_sbp_print(&box->out_sbp[0], out, sizeof out);
    assert_string_equal(in, "P");
    assert_string_equal(out, "B");
  }
  /* Three all-reduces in the whole graph, one per weight (clipping reuses
   * the all-reduced gradients). */
  if (count_boxing(g, false) != 3)
    dump_fail(g, "want 3 boxings that move data");
  sl_graph_destroy(g);
}

static void test_data_parallel_mlp(void **state) {
  GT_REQUIRE_OPS("matmul", "relu", "relu_grad", "sparse_cross_entropy",
                 "sparse_cross_entropy_grad", "reduce_mean", "sgd_update",
                 "fill", "broadcast_to", "reshape", "add", "reduce_sum_like",
                 "global_norm_scale", "square", "reduce_sum", "mul",
                 "identity");
  data_parallel_mlp(false);
  data_parallel_mlp(true);
}

/* Megatron-style block: column-split then row-split matmul; the only
 * conversion of the forward pass is one all-reduce of the block output. */
static void test_megatron_block(void **state) {
  GT_REQUIRE_OPS("matmul", "gelu", "add");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_set_default_placement(g, "cpu:0-3"));
  sl_shape xs = SL_SHAPE(6, 16), w1s = SL_SHAPE(16, 36), w2s = SL_SHAPE(36, 16);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "B");
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_normal(0, 0.1, 1), NULL, "S(1)");
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_normal(0, 0.1, 2), NULL, "S(0)");
  sl_tensor h = sl_name(sl_gelu(sl_matmul(x, w1, false, false)), "h");
  sl_tensor y = sl_name(sl_matmul(h, w2, false, false), "y");
  sl_tensor out = sl_name(sl_add(y, x), "residual");
  GT_OK(sl_fetch(out, "out"));
  GT_OK(sl__graph_compile(g));
  assert_consistent(g);
  assert_sbp(g, h, "S(1)");
  assert_sbp(g, y, "P");
  assert_sbp(g, out, "B");
  assert_int_equal(count_boxing(g, true), 1);
  const sl__node *box = boxing_into(g, node_of(g, out), 0);
  assert_non_null(box);
  assert_int_equal(sl_boxing_route_step_count(box->boxing), 1);
  assert_int_equal(sl_boxing_step_op(box->boxing, 0), SL_BOXING_ALL_REDUCE);
  sl_graph_destroy(g);
}

/* A 2-D mesh: data parallel on axis 0, tensor parallel on axis 1. */
static void test_hybrid_mesh(void **state) {
  GT_REQUIRE_OPS("matmul", "relu");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_set_default_placement(g, "cpu:0-5[2,3]"));
  sl_shape xs = SL_SHAPE(7, 5), ws = SL_SHAPE(5, 8);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "(S(0),B)");
  sl_tensor w =
      sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_zeros(), NULL, "(B,S(1))");
  sl_tensor y = sl_relu(sl_matmul(x, w, false, false));
  GT_OK(sl_fetch(y, "y"));
  GT_OK(sl__graph_compile(g));
  assert_consistent(g);
  assert_sbp(g, y, "(S(0),S(1))");
  assert_int_equal(count_boxing(g, false), 0);
  sl_graph_destroy(g);
}

/* User constraints win over what inference would pick. */
/* Attention's heads from a column-split projection, [B,S,H*hd] S(2) ->
 * [B,S,H,hd]: the split passes through the reshape (layout `want`) only
 * where the mesh cuts the heads into equal parts (an uneven cut would give
 * each rank other elements in the two shapes); elsewhere (`moves`) the
 * compiler moves data and the heads are not laid out `want`. */
static void reshape_heads(const char *placement, const char *x_sbp,
                          const char *w_sbp, int64_t heads, const char *want,
                          bool moves) {
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_set_default_placement(g, placement));
  int64_t d = 2 * heads;
  sl_shape xs = SL_SHAPE(4, 3, d), ws = SL_SHAPE(d, d),
           hs = SL_SHAPE(4, 3, heads, 2);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, x_sbp);
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_normal(0, 0.1, 1), NULL, w_sbp);
  sl_tensor q = sl_name(sl_matmul(x, w, false, false), "q");
  sl_tensor h = sl_name(sl_reshape(q, &hs), "heads");
  GT_OK(sl_fetch(sl_relu(h), "y"));
  GT_OK(sl__graph_compile(g));
  assert_consistent(g);
  if (moves) {
    sl_nd_sbp split;
    GT_OK(sl_nd_sbp_parse(want, &split));
    sl_nd_sbp got = sbp_of(g, h);
    if (sl_nd_sbp_equal(&split, &got)) dump_fail(g, "heads cut unevenly");
  } else {
    assert_sbp(g, h, want);
  }
  if ((count_boxing(g, true) > 0) != moves)
    dump_fail(g, moves ? "expected boxing" : "unexpected boxing");
  sl_graph_destroy(g);
}

static void test_reshape_even_split(void **state) {
  GT_REQUIRE_OPS("matmul", "reshape", "relu");
  reshape_heads("cpu:0-1", "B", "S(1)", 4, "S(2)", false);
  reshape_heads("cpu:0-3", "B", "S(1)", 4, "S(2)", false);
  reshape_heads("cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", 2, "(S(0),S(2))",
                false);
  /* 3 heads over 2 ranks, 2 heads over 4: uneven. */
  reshape_heads("cpu:0-1", "B", "S(1)", 3, "S(2)", true);
  reshape_heads("cpu:0-3", "B", "S(1)", 2, "S(2)", true);
}

static void test_user_constraints(void **state) {
  GT_REQUIRE_OPS("relu", "identity", "neg");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(9, 4);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-2", "S(0)");
  sl_tensor r = sl_relu(x);
  sl_tensor b = sl_name(sl_to_global(r, NULL, "B"), "gathered");
  sl_tensor n = sl_neg(b);
  sl_tensor s1 = sl_to_global(n, NULL, "S(1)");
  GT_OK(sl_fetch(s1, "out"));
  GT_OK(sl__graph_compile(g));
  assert_consistent(g);
  assert_sbp(g, x, "S(0)");
  assert_sbp(g, r, "S(0)");
  assert_sbp(g, b, "B");
  assert_sbp(g, n, "B");
  assert_sbp(g, s1, "S(1)");
  /* relu -> B: all_gather; B -> S(1): a slice. */
  const sl__node *box = boxing_into(g, node_of(g, b), 0);
  assert_non_null(box);
  assert_int_equal(sl_boxing_step_op(box->boxing, 0), SL_BOXING_ALL_GATHER);
  box = boxing_into(g, node_of(g, s1), 0);
  assert_non_null(box);
  assert_int_equal(sl_boxing_step_op(box->boxing, 0), SL_BOXING_SLICE);
  sl_graph_destroy(g);
}

/* A source given no SBP follows its first consumer; one nothing decides
 * is B. Moving between placements is a send_recv. */
static void test_sources_and_placements(void **state) {
  GT_REQUIRE_OPS("add", "random_uniform", "fill", "identity", "neg",
                 "broadcast_to");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_set_default_placement(g, "cpu:0-1"));
  sl_shape xs = SL_SHAPE(5, 3);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(1)");
  sl_tensor noise =
      sl_data_random_uniform(g, &xs, SL_DTYPE_F32, 0, 1, 7, NULL, NULL);
  sl_tensor lone = sl_fill(g, &xs, SL_DTYPE_F32, 2.0, NULL, NULL);
  /* An op of broadcast inputs that can compute a split of its output
   * follows its consumer too, where one splits it: the add's. */
  sl_shape cs = SL_SHAPE(5, 1);
  sl_tensor col = sl_input(g, "col", &cs, SL_DTYPE_F32, NULL, NULL);
  sl_tensor spread = sl_broadcast_to(col, &xs);
  sl_tensor kept = sl_broadcast_to(col, &xs);
  sl_tensor y = sl_add(sl_add(x, noise), spread);
  sl_tensor moved = sl_to_global(y, "cpu:2-3", NULL);
  sl_tensor z = sl_neg(moved);
  GT_OK(sl_fetch(z, "z"));
  GT_OK(sl_fetch(lone, "lone"));
  GT_OK(sl_fetch(kept, "kept"));
  GT_OK(sl__graph_compile(g));
  assert_consistent(g);
  assert_sbp(g, spread, "S(1)");
  assert_sbp(g, kept, "B");
  assert_null(boxing_into(g, node_of(g, y), 1));
  assert_sbp(g, noise, "S(1)");
  assert_sbp(g, y, "S(1)");
  assert_sbp(g, lone, "B");
  assert_sbp(g, moved, "S(1)");
  const sl__node *box = boxing_into(g, node_of(g, moved), 0);
  assert_non_null(box);
  /* Same mesh and SBP on both sides: rank i sends its shard to rank i. */
  assert_int_equal(sl_boxing_step_op(box->boxing, 0), SL_BOXING_COPY);
  int n = sl__graph_node_count(g);
  GT_OK(sl__graph_compile(g)); /* idempotent */
  assert_int_equal(sl__graph_node_count(g), n);
  sl_graph_destroy(g);
}

/* The interpreter gives identical values on the graph before and after
 * compilation (boxing nodes are copies there), step after step. */
static void test_interpreter_before_after(void **state) {
  GT_REQUIRE_OPS("matmul", "tanh", "tanh_grad", "reduce_mean", "square", "sub",
                 "sgd_update", "fill", "broadcast_to", "reshape", "mul",
                 "scalar_mul");
  float losses[2][4];
  for (int pass = 0; pass < 2; pass++) {
    sl_graph *g;
    GT_OK(sl_graph_create(&g));
    GT_OK(sl_graph_set_default_placement(g, "cpu:0-2"));
    sl_shape xs = SL_SHAPE(7, 4), ws = SL_SHAPE(4, 3), ys = SL_SHAPE(7, 3);
    sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
    sl_tensor t = sl_input(g, "t", &ys, SL_DTYPE_F32, NULL, "S(0)");
    sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                              sl_init_normal(0, 0.5, 4), NULL, NULL);
    sl_tensor loss = sl_mse_loss(sl_tanh(sl_matmul(x, w, false, false)), t);
    sl_optimizer opt = sl_optimizer_sgd(0.5, 0.5);
    GT_OK(sl_minimize(loss, &opt));
    GT_OK(sl_fetch(loss, "loss"));
    if (pass == 1) GT_OK(sl__graph_compile(g));
    sl__interp *it;
    GT_OK(sl__interp_create(g, &it));
    sl_rng r = {99};
    float xv[28], tv[21];
    gt_fill_f32(&r, xv, 28, -1, 1);
    gt_fill_f32(&r, tv, 21, -1, 1);
    GT_OK(sl__interp_feed(it, "x", xv, sizeof xv));
    GT_OK(sl__interp_feed(it, "t", tv, sizeof tv));
    for (int s = 0; s < 4; s++) {
      GT_OK(sl__interp_step(it));
      const void *d;
      GT_OK(sl__interp_fetch(it, "loss", &d, NULL));
      losses[pass][s] = *(const float *)d;
    }
    sl__interp_destroy(it);
    sl_graph_destroy(g);
  }
  for (int s = 0; s < 4; s++)
    assert_true(losses[0][s] == losses[1][s]);
  assert_true(losses[0][3] < losses[0][0]); /* it trains */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_data_parallel_mlp),
      cmocka_unit_test(test_megatron_block),
      cmocka_unit_test(test_hybrid_mesh),
      cmocka_unit_test(test_reshape_even_split),
      cmocka_unit_test(test_user_constraints),
      cmocka_unit_test(test_sources_and_placements),
      cmocka_unit_test(test_interpreter_before_after),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
