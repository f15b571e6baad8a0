/* A compiled graph packed for daemons (graph/graph_wire.c): the unpacked
 * graph lowers to a byte-identical plan, repacks to the same bytes, gives
 * every variable the same initial shards, placements of any length survive,
 * and malformed bytes, or op layouts no signature of the op gives, are
 * refused without crashing. */
#include "lower_int.h"
#include "session_helpers.h"

static sl_graph *mlp(const char *placement, const char *x_sbp,
                     const char *w1_sbp, const char *w2_sbp) {
  sl_graph *g = st_graph(placement);
  sl_shape xs = SL_SHAPE(16, 12), ys = SL_SHAPE(16), w1s = SL_SHAPE(12, 20),
           w2s = SL_SHAPE(20, 7);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, x_sbp);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, NULL);
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_uniform(-1, 1, 1), NULL, w1_sbp);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_normal(0, 0.5, 2), NULL, w2_sbp);
  sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_optimizer opt = sl_optimizer_adam(0.01);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  sl_fetch(w1, "w1_out");
  st_check_graph(g);
  return g;
}

static void pack_plan(sl_graph *g, uint8_t **buf, size_t *len) {
  sl__pplan *p = NULL;
  if (sl__lower(g, &p) != SL_OK) fail_msg("lower: %s", sl_last_error());
  if (sl__pplan_pack(p, buf, len) != SL_OK) fail_msg("pack plan");
  sl__pplan_destroy(p);
}

static void round_trip(const char *placement, const char *x_sbp,
                       const char *w1_sbp, const char *w2_sbp) {
  sl_graph *g = mlp(placement, x_sbp, w1_sbp, w2_sbp);
  if (sl__graph_compile(g) != SL_OK) fail_msg("compile: %s", sl_last_error());
  uint8_t *gb = NULL, *gb2 = NULL, *pa = NULL, *pb = NULL;
  size_t gl = 0, gl2 = 0, la = 0, lb = 0;
  assert_int_equal(sl__graph_pack(g, &gb, &gl), SL_OK);
  sl_graph *h = NULL;
  if (sl__graph_unpack(gb, gl, &h) != SL_OK)
    fail_msg("unpack (%s): %s", placement, sl_last_error());
  assert_true(sl__graph_frozen(h));
  assert_int_equal(sl__graph_node_count(h), sl__graph_node_count(g));
  assert_int_equal(sl__graph_value_count(h), sl__graph_value_count(g));
  assert_int_equal(sl__graph_find(h, "w1"), sl__graph_find(g, "w1"));
  assert_int_equal(sl__graph_pack(h, &gb2, &gl2), SL_OK);
  assert_int_equal(gl, gl2);
  assert_memory_equal(gb, gb2, gl);
  pack_plan(g, &pa, &la);
  pack_plan(h, &pb, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(pa, pb, la);
  /* Variables' initial shards, rank by rank. */
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind != SL__NODE_VARIABLE) continue;
    const sl__value *v = sl__graph_value(g, n->out[0]);
    for (int r = 0; r < sl_placement_size(v->placement); r++) {
      sl_slice sl;
      assert_int_equal(
          sl_local_slice(&v->meta.shape, v->placement, &v->sbp, r, &sl),
          SL_OK);
      size_t bytes =
          (size_t)sl_slice_numel(&sl) * sl_dtype_size(v->meta.dtype);
      void *a = calloc(1, bytes + 64), *b = calloc(1, bytes + 64);
      assert_int_equal(sl__graph_variable_init(g, i, r, a), SL_OK);
      assert_int_equal(sl__graph_variable_init(h, i, r, b), SL_OK);
      assert_memory_equal(a, b, bytes);
      free(a);
      free(b);
    }
  }
  /* Truncations and a flipped magic are refused. */
  for (size_t cut = 0; cut < gl; cut += 1 + gl / 97) {
    sl_graph *x = NULL;
    assert_int_equal(sl__graph_unpack(gb, cut, &x), SL_EINVAL);
    assert_null(x);
  }
  gb[0] ^= 0xff;
  sl_graph *x = NULL;
  assert_int_equal(sl__graph_unpack(gb, gl, &x), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "not a packed graph"));
  sl__free(gb);
  sl__free(gb2);
  sl__free(pa);
  sl__free(pb);
  sl_graph_destroy(h);
  sl_graph_destroy(g);
}

static void test_one_device(void **state) {
  (void)state;
  round_trip("cpu:0", "B", "B", "B");
}

static void test_data_parallel_two_nodes(void **state) {
  (void)state;
  round_trip("cpu:0-1/0", "S(0)", "B", "B");
}

static void test_hybrid_mesh(void **state) {
  (void)state;
  round_trip("cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))");
}

/* A placement whose text is longer than the encoder's stack buffer (1024
 * bytes): cut short, it would still parse, as a placement of fewer
 * devices. 300 devices, every other id, on one node. */
static void test_long_placement(void **state) {
  (void)state;
  char text[2048] = "cpu:0";
  size_t n = strlen(text);
  for (int d = 1; d < 300; d++)
    n += (size_t)snprintf(text + n, sizeof text - n, ",%d", 2 * d);
  assert_true(n > 1024 && n < sizeof text);
  round_trip(text, "S(0)", "B", "B");
}

static void test_not_compiled(void **state) {
  (void)state;
  sl_graph *g = mlp("cpu:0", "B", "B", "B");
  uint8_t *b = NULL;
  size_t n = 0;
  assert_int_equal(sl__graph_pack(g, &b, &n), SL_ESTATE);
  assert_null(b);
  sl_graph_destroy(g);
}

/* Packs g, whose node `node` was altered after compile, and expects the
 * unpack to refuse it with `why`. */
static void expect_refused(sl_graph *g, const char *why) {
  uint8_t *b = NULL;
  size_t n = 0;
  assert_int_equal(sl__graph_pack(g, &b, &n), SL_OK);
  sl_graph *h = NULL;
  assert_int_equal(sl__graph_unpack(b, n, &h), SL_EINVAL);
  assert_null(h);
  if (!strstr(sl_last_error(), why))
    fail_msg("error '%s' does not say '%s'", sl_last_error(), why);
  sl__free(b);
}

/* The first matmul of the data-parallel MLP: x S(0) times w1 B gives
 * S(0). Laid out otherwise in the packed bytes, it would have the kernels
 * multiply shards that do not pair up. */
static void test_layout_not_a_signature(void **state) {
  (void)state;
  sl_graph *g = mlp("cpu:0-1/0", "S(0)", "B", "B");
  if (sl__graph_compile(g) != SL_OK) fail_msg("compile: %s", sl_last_error());
  sl__node *mm = NULL;
  for (int32_t i = 0; i < sl__graph_node_count(g) && !mm; i++) {
    sl__node *n = (sl__node *)sl__graph_node(g, i);
    if (n->kind == SL__NODE_OP && strcmp(n->op->name, "matmul") == 0) mm = n;
  }
  assert_non_null(mm);
  sl__value *out = (sl__value *)sl__graph_value(g, mm->out[0]);
  assert_int_equal(mm->in_sbp[0].sbp[0].kind, SL_SBP_SPLIT);
  assert_int_equal(mm->out_sbp[0].sbp[0].kind, SL_SBP_SPLIT);
  assert_int_equal(mm->out_sbp[0].sbp[0].axis, 0);
  sl_nd_sbp saved = mm->out_sbp[0];

  /* Output S(1), a valid layout of its tensor, but (S(0), B) -> S(1) is
   * no signature of matmul. */
  mm->out_sbp[0].sbp[0].axis = 1;
  out->sbp = mm->out_sbp[0];
  expect_refused(g, "none of the op's SBP signatures");
  mm->out_sbp[0] = saved;
  out->sbp = saved;

  /* The node says its output is S(1); the value says S(0). */
  mm->out_sbp[0].sbp[0].axis = 1;
  expect_refused(g, "output 0 is not laid out as the op produces it");
  mm->out_sbp[0] = saved;

  /* The node says it consumes x as B; x is S(0). */
  sl_nd_sbp in0 = mm->in_sbp[0];
  mm->in_sbp[0].sbp[0] = sl_sbp_broadcast();
  expect_refused(g, "input 0 is not laid out as the op consumes it");
  mm->in_sbp[0] = in0;

  /* Restored, it unpacks again. */
  uint8_t *b = NULL;
  size_t n = 0;
  assert_int_equal(sl__graph_pack(g, &b, &n), SL_OK);
  sl_graph *h = NULL;
  if (sl__graph_unpack(b, n, &h) != SL_OK)
    fail_msg("unpack: %s", sl_last_error());
  sl_graph_destroy(h);
  sl__free(b);
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_device),
      cmocka_unit_test(test_data_parallel_two_nodes),
      cmocka_unit_test(test_hybrid_mesh),
      cmocka_unit_test(test_long_placement),
      cmocka_unit_test(test_not_compiled),
      cmocka_unit_test(test_layout_not_a_signature),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
