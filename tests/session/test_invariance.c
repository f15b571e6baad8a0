/* Parallel invariance (DESIGN.md section 10): graphs built with the
 * builder, run by the session on 1-4 CPU devices under different layouts,
 * give the reference interpreter's values after every step — exactly for
 * data movement, within 1e-5 relative where float sums are reordered. */
#include "session_helpers.h"

#define RTOL 1e-5

typedef struct layout {
  const char *placement;
  const char *sbp[3]; /* candidate SBPs for the inputs */
} layout;

static const layout layouts[] = {
    {"cpu:0", {"B", "B", "B"}},
    {"cpu:0-1", {"S(0)", "B", "S(1)"}},
    {"cpu:0-2", {"S(1)", "S(0)", "B"}},
    {"cpu:0-3", {"S(0)", "S(1)", "B"}},
    {"cpu:1,3", {"B", "S(0)", "S(1)"}},
    {"cpu:0-3[2,2]", {"(S(0),S(1))", "(B,S(0))", "(S(1),B)"}},
    {"cpu:0-5[3,2]", {"(S(0),B)", "(S(1),S(0))", "(B,B)"}},
};

/* Every conversion between layouts of a 7x5 tensor, on one placement and
 * between placements: pure data movement, so exact. Partial sources come
 * from a matmul contracting a split axis. */
static void test_conversions_exact(void **state) {
  uint64_t seed = st_seed(11, "conversions");
  static const char *const sbps1[] = {"S(0)", "S(1)", "B"};
  static const char *const places[] = {"cpu:0-1", "cpu:0-2", "cpu:0-3",
                                       "cpu:2-3"};
  for (size_t p = 0; p < SL_ARRAY_LEN(places); p++)
    for (size_t a = 0; a < 3; a++) {
      sl_graph *g = st_graph(places[p]);
      sl_shape xs = SL_SHAPE(7, 5);
      sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, sbps1[a]);
      char name[64];
      for (size_t b = 0; b < 3; b++) {
        snprintf(name, sizeof name, "to_%zu", b);
        sl_fetch(sl_to_global(x, NULL, sbps1[b]), name);
        for (size_t q = 0; q < SL_ARRAY_LEN(places); q++) {
          snprintf(name, sizeof name, "to_%zu_on_%zu", b, q);
          sl_fetch(sl_to_global(x, places[q], sbps1[b]), name);
        }
      }
      /* to partial layouts (zero / slice steps) and back */
      sl_tensor xp = sl_to_global(x, NULL, "P");
      sl_fetch(xp, "to_p");
      sl_fetch(sl_to_global(xp, NULL, "S(1)"), "p_to_s1");
      sl_fetch(sl_to_global(x, NULL, "P(max)"), "to_pmax");
      /* integer data through the same paths */
      sl_tensor k = sl_input(g, "k", &xs, SL_DTYPE_I32, NULL, sbps1[a]);
      sl_fetch(sl_to_global(k, "cpu:1-2", "S(1)"), "k_moved");
      st_run_vs_interp(g, 2, 0, seed + p * 3 + a, 100, NULL);
      sl_graph_destroy(g);
    }
  /* 2-D meshes and between meshes */
  static const char *const sbps2[] = {"(S(0),S(1))", "(B,S(0))", "(S(1),B)",
                                      "(S(0),S(0))", "(B,B)"};
  for (size_t a = 0; a < SL_ARRAY_LEN(sbps2); a++) {
    sl_graph *g = st_graph("cpu:0-3[2,2]");
    sl_shape xs = SL_SHAPE(7, 5);
    sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F64, NULL, sbps2[a]);
    char name[64];
    for (size_t b = 0; b < SL_ARRAY_LEN(sbps2); b++) {
      snprintf(name, sizeof name, "to_%zu", b);
      sl_fetch(sl_to_global(x, NULL, sbps2[b]), name);
    }
    sl_fetch(sl_to_global(x, "cpu:0-5[3,2]", "(S(1),S(0))"), "to_3x2");
    sl_tensor xp = sl_to_global(x, NULL, "(S(0),P)");
    sl_fetch(xp, "to_s0p");
    sl_fetch(sl_to_global(xp, NULL, "(B,S(1))"), "s0p_to_bs1");
    sl_fetch(sl_to_global(x, "cpu:4", "B"), "to_one");
    st_run_vs_interp(g, 2, 0, seed + 100 + a, 0, NULL);
    sl_graph_destroy(g);
  }
}

/* Partial values: a matmul contracting a split axis gives P; converting it
 * to B, S(0), S(1) reduces (reordered sums: tolerance), and fetching the
 * partial value directly is reduced by the fetch. */
static void test_partial_sums(void **state) {
  uint64_t seed = st_seed(12, "partial");
  for (int n = 1; n <= 4; n++) {
    char place[16];
    snprintf(place, sizeof place, n == 1 ? "cpu:0" : "cpu:0-%d", n - 1);
    sl_graph *g = st_graph(place);
    sl_shape as = SL_SHAPE(5, 9), bs = SL_SHAPE(9, 6);
    sl_tensor a = sl_input(g, "a", &as, SL_DTYPE_F32, NULL, "S(1)");
    sl_tensor b = sl_input(g, "b", &bs, SL_DTYPE_F32, NULL, "S(0)");
    sl_tensor p = sl_matmul(a, b, false, false); /* P */
    sl_fetch(p, "p");
    sl_fetch(sl_to_global(p, NULL, "B"), "p_b");
    sl_fetch(sl_to_global(p, NULL, "S(0)"), "p_s0");
    sl_fetch(sl_to_global(p, "cpu:1-2", "S(1)"), "p_moved");
    int ax = 1;
    sl_fetch(sl_reduce_max(sl_to_global(a, NULL, "S(1)"), 1, &ax, false),
             "amax");
    st_run_vs_interp(g, 2, RTOL, seed + (uint64_t)n, 0, NULL);
    sl_graph_destroy(g);
  }
}

/* Op graphs under every layout: elementwise with broadcasting, matmul in
 * its column/row-parallel forms, softmax, layer norm, reductions, shape
 * ops, embedding, losses, data sources and constants. */
static void build_ops(sl_graph *g, const layout *l) {
  sl_shape xs = SL_SHAPE(6, 8), ws = SL_SHAPE(8, 10), bs = SL_SHAPE(10);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, l->sbp[0]);
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_uniform(-0.5, 0.5, 3), NULL, l->sbp[1]);
  sl_tensor b = sl_variable(g, "b", &bs, SL_DTYPE_F32, sl_init_normal(0, 1, 4),
                            NULL, NULL);
  sl_tensor h = sl_add(sl_matmul(x, w, false, false), b);
  sl_fetch(h, "h");
  sl_fetch(sl_gelu(h), "gelu");
  sl_fetch(sl_softmax(h, 1), "softmax");
  sl_fetch(sl_log_softmax(h, 0), "log_softmax0");
  sl_shape gs = SL_SHAPE(10);
  sl_tensor gam = sl_variable(g, "gamma", &gs, SL_DTYPE_F32,
                              sl_init_uniform(0.5, 1.5, 5), NULL, NULL);
  sl_tensor bet = sl_variable(g, "beta", &gs, SL_DTYPE_F32,
                              sl_init_uniform(-0.1, 0.1, 6), NULL, NULL);
  sl_fetch(sl_layer_norm(h, gam, bet, 1e-5), "ln");
  int ax0 = 0, ax1 = 1;
  sl_fetch(sl_reduce_sum(h, 1, &ax0, false), "sum0");
  sl_fetch(sl_reduce_mean(h, 1, &ax1, true), "mean1");
  sl_fetch(sl_reduce_max(h, 0, NULL, false), "max_all");
  sl_fetch(sl_matmul(x, x, true, false), "xtx");
  sl_fetch(sl_matmul(h, w, false, true), "hwt");
  int perm[2] = {1, 0};
  sl_fetch(sl_transpose(h, 2, perm), "ht");
  sl_shape rs = SL_SHAPE(3, 2, 10);
  sl_fetch(sl_reshape(h, &rs), "h3");
  sl_fetch(sl_slice_of(h, 1, 2, 7), "hslice");
  sl_tensor parts[2] = {x, sl_mul_scalar(x, 2)};
  sl_fetch(sl_concat(2, parts, 1), "cat");
  sl_fetch(
      sl_tanh(sl_sub(sl_sigmoid(x), sl_div(x, sl_add_scalar(sl_square(x), 1)))),
      "pointwise");
  /* embedding: a table split either way, ids from an integer input */
  sl_shape ts = SL_SHAPE(11, 4), is = SL_SHAPE(6, 3);
  sl_tensor table = sl_variable(g, "table", &ts, SL_DTYPE_F32,
                                sl_init_uniform(-1, 1, 7), NULL, l->sbp[2]);
  sl_tensor ids = sl_input(g, "ids", &is, SL_DTYPE_I32, NULL, NULL);
  sl_fetch(sl_embedding(table, ids), "emb");
  /* losses against labels in [0, 10) */
  sl_shape ls = SL_SHAPE(6);
  sl_tensor labels = sl_input(g, "labels", &ls, SL_DTYPE_I32, NULL, NULL);
  sl_fetch(sl_cross_entropy(h, labels), "xent");
  sl_tensor t = sl_input(g, "t", &xs, SL_DTYPE_F32, NULL, l->sbp[1]);
  sl_fetch(sl_mse_loss(x, t), "mse");
  /* sources: new data each step, a constant */
  sl_tensor r =
      sl_data_random_uniform(g, &xs, SL_DTYPE_F32, -1, 1, 9, NULL, NULL);
  sl_fetch(sl_add(r, x), "rand_plus_x");
  sl_fetch(sl_mul(sl_fill(g, &xs, SL_DTYPE_F32, 3.0, NULL, NULL), x), "fill3x");
  sl_fetch(w, "w_fetched");
}

static void test_ops_every_layout(void **state) {
  uint64_t seed = st_seed(13, "ops");
  for (size_t i = 0; i < SL_ARRAY_LEN(layouts); i++) {
    sl_graph *g = st_graph(layouts[i].placement);
    build_ops(g, &layouts[i]);
    st_run_vs_interp(g, 2, RTOL, seed + i, 10, NULL);
    sl_graph_destroy(g);
  }
}

/* Backward and optimizer: a two-layer MLP trained for 4 steps with Adam
 * (bias correction keyed by the step) and clipping, every layout. The
 * fetched loss, gradients' effect on the weights and the weights must
 * follow the interpreter step by step. */
static void build_train(sl_graph *g, const layout *l) {
  sl_shape xs = SL_SHAPE(8, 6), w1s = SL_SHAPE(6, 12), w2s = SL_SHAPE(12, 5);
  sl_shape ys = SL_SHAPE(8);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, l->sbp[0]);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, NULL);
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 21), NULL, l->sbp[1]);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 22), NULL, l->sbp[2]);
  sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_optimizer opt = sl_optimizer_adam(0.01);
  opt.clip_norm = 0.5;
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  sl_fetch(w1, "w1_out");
  sl_fetch(w2, "w2_out");
}

static void test_training_every_layout(void **state) {
  uint64_t seed = st_seed(14, "train");
  for (size_t i = 0; i < SL_ARRAY_LEN(layouts); i++) {
    sl_graph *g = st_graph(layouts[i].placement);
    build_train(g, &layouts[i]);
    st_run_vs_interp(g, 4, RTOL, seed + i, 5, NULL);
    sl_graph_destroy(g);
  }
}

/* Extents smaller than the device count: empty shards on some devices in
 * data parallel (batch 3 on 4) and tensor parallel (hidden 3 on 4), and a
 * 2-D mesh where a whole mesh row holds nothing. */
static void test_empty_shards(void **state) {
  uint64_t seed = st_seed(15, "empty shards");
  static const layout tiny[] = {
      {"cpu:0-3", {"S(0)", "B", "B"}},
      {"cpu:0-3", {"B", "S(1)", "S(0)"}},
      {"cpu:0-5[3,2]", {"(S(0),B)", "(B,S(1))", "(B,S(0))"}},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(tiny); i++) {
    sl_graph *g = st_graph(tiny[i].placement);
    sl_shape xs = SL_SHAPE(3, 5), w1s = SL_SHAPE(5, 3), w2s = SL_SHAPE(3, 4),
             ys = SL_SHAPE(3);
    sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, tiny[i].sbp[0]);
    sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, NULL);
    sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                               sl_init_uniform(-1, 1, 8), NULL, tiny[i].sbp[1]);
    sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                               sl_init_uniform(-1, 1, 9), NULL, tiny[i].sbp[2]);
    sl_tensor h = sl_tanh(sl_matmul(x, w1, false, false));
    sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
    sl_optimizer opt = sl_optimizer_sgd(0.5, 0.5);
    sl_minimize(loss, &opt);
    sl_fetch(loss, "loss");
    sl_fetch(h, "h");
    sl_fetch(w1, "w1_out");
    st_run_vs_interp(g, 3, RTOL, seed + i, 4, NULL);
    sl_graph_destroy(g);
  }
}

/* Variables updated by something other than an optimizer: a value only the
 * update uses (a two-register loop), one with other readers (here: a
 * fetch) or another variable (var_copy tasks). Updates set through the IR (the
 * public builder only makes them with sl_minimize). */
static void test_variable_copies(void **state) {
  uint64_t seed = st_seed(16, "var copies");
  for (int split = 0; split < 2; split++) {
    sl_graph *g = st_graph(split ? "cpu:0-2" : "cpu:0");
    sl_shape ws = SL_SHAPE(5, 3);
    /* v first: the interpreter applies updates node by node, so v must
     * take w's value before w's own update overwrites it */
    sl_tensor v =
        sl_variable(g, "v", &ws, SL_DTYPE_F32, sl_init_uniform(-1, 1, 2), NULL,
                    split ? "S(0)" : NULL);
    sl_tensor w =
        sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_uniform(-1, 1, 1), NULL,
                    split ? "S(0)" : NULL);
    sl_tensor x =
        sl_input(g, "x", &ws, SL_DTYPE_F32, NULL, split ? "S(0)" : NULL);
    /* u <- u * 0.9 + x, read by nothing else: written directly by its op
     * through a two-register loop (not an optimizer: not in place) */
    sl_tensor u =
        sl_variable(g, "u", &ws, SL_DTYPE_F32, sl_init_uniform(-1, 1, 3), NULL,
                    split ? "S(0)" : NULL);
    sl_tensor unext = sl_add(sl_mul_scalar(u, 0.9), x);
    sl_fetch(u, "u_out");
    sl_tensor next = sl_add(sl_mul_scalar(w, 0.5), x); /* w <- w/2 + x */
    sl_fetch(next, "next");                            /* a second reader */
    sl_fetch(w, "w_out");
    sl_fetch(v, "v_out");
    st_check_graph(g);
    sl__node *wn = (sl__node *)sl__graph_node(g, sl__graph_find(g, "w"));
    sl__node *vn = (sl__node *)sl__graph_node(g, sl__graph_find(g, "v"));
    wn->update = next.id;
    ((sl__node *)sl__graph_node(g, sl__graph_find(g, "u")))->update = unext.id;
    vn->update = w.id; /* v <- the previous w */
    st_run_vs_interp(g, 4, 1e-6, seed + (uint64_t)split, 0, NULL);
    sl_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conversions_exact),
      cmocka_unit_test(test_partial_sums),
      cmocka_unit_test(test_ops_every_layout),
      cmocka_unit_test(test_training_every_layout),
      cmocka_unit_test(test_empty_shards),
      cmocka_unit_test(test_variable_copies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
