/* The builder: tensors, names, scopes, sticky errors naming the op,
 * placement and SBP checks, variables' initial values, freezing. */
#include <math.h>
#include <stdlib.h>

#include "graph_test.h"

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void test_sticky_error_names_op(void **state) {
  GT_REQUIRE_OPS("matmul", "relu", "softmax");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(8, 64), ws = SL_SHAPE(32, 10);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-3", "S(0)");
  sl_tensor w =
      sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  assert_true(sl_tensor_ok(x) && sl_tensor_ok(w));
  GT_GRAPH_OK(g);
  assert_string_equal(sl_graph_error(g), "");
  sl_tensor h = sl_name(sl_matmul(x, w, false, false), "fc1");
  assert_false(sl_tensor_ok(h));
  assert_int_equal(sl_graph_status(g), SL_EINVAL);
  const char *msg = sl_graph_error(g);
  if (!starts_with(msg, "op 'fc1' (matmul): ") || !strstr(msg, "64") ||
      !strstr(msg, "32"))
    fail_msg("unexpected message: %s", msg);
  /* Sticky: later calls return poison and keep the first error. */
  char first[512];
  snprintf(first, sizeof first, "%s", msg);
  sl_tensor r = sl_relu(h);
  assert_false(sl_tensor_ok(r));
  sl_tensor s = sl_softmax(x, 7); /* would be an error of its own */
  assert_false(sl_tensor_ok(s));
  assert_string_equal(sl_graph_error(g), first);
  assert_int_equal(sl_fetch(r, "r"), SL_EINVAL);
  assert_int_equal(sl__graph_compile(g), SL_EINVAL);
  sl_graph_destroy(g);
}

static void test_axis_out_of_range(void **state) {
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(4, 5);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  sl_tensor y = sl_softmax(x, 2);
  assert_false(sl_tensor_ok(y));
  const char *msg = sl_graph_error(g);
  if (!starts_with(msg, "op 'softmax_") || !strstr(msg, "(softmax): axis 2"))
    fail_msg("unexpected message: %s", msg);
  sl_graph_destroy(g);

  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  int axes[1] = {-3};
  y = sl_name(sl_reduce_sum(x, 1, axes, false), "total");
  assert_false(sl_tensor_ok(y));
  msg = sl_graph_error(g);
  if (!starts_with(msg, "op 'total' (reduce_sum): axis -3 out of range"))
    fail_msg("unexpected message: %s", msg);
  sl_graph_destroy(g);

  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  int perm[2] = {0, 0};
  y = sl_transpose(x, 2, perm);
  assert_false(sl_tensor_ok(y));
  assert_non_null(strstr(sl_graph_error(g), "(transpose): perm is not a "
                                            "permutation"));
  sl_graph_destroy(g);
}

static void test_sbp_errors(void **state) {
  sl_graph *g;
  sl_shape xs = SL_SHAPE(6, 4);
  /* A split axis the tensor does not have. */
  GT_OK(sl_graph_create(&g));
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-1", "S(2)");
  assert_false(sl_tensor_ok(x));
  assert_true(starts_with(sl_graph_error(g), "input 'x': "));
  sl_graph_destroy(g);
  /* An nd-SBP of 2 axes on a 1-D mesh. */
  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-1", "(S(0),B)");
  assert_false(sl_tensor_ok(x));
  assert_true(starts_with(sl_graph_error(g), "input 'x': "));
  sl_graph_destroy(g);
  /* Partial inputs and variables are refused. */
  GT_OK(sl_graph_create(&g));
  sl_tensor v =
      sl_variable(g, "w", &xs, SL_DTYPE_F32, sl_init_zeros(), "cpu:0-1", "P");
  assert_false(sl_tensor_ok(v));
  assert_non_null(strstr(sl_graph_error(g), "variable 'w': a partial SBP"));
  sl_graph_destroy(g);
  /* A malformed SBP and placement name the node. */
  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-1", "S(0");
  assert_false(sl_tensor_ok(x));
  assert_true(starts_with(sl_graph_error(g), "input 'x': "));
  sl_graph_destroy(g);
  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:3-1", NULL);
  assert_false(sl_tensor_ok(x));
  assert_true(starts_with(sl_graph_error(g), "input 'x': "));
  sl_graph_destroy(g);
  /* A conversion to an SBP that does not fit the tensor names the op. */
  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-1", "S(0)");
  sl_tensor y = sl_name(sl_to_global(x, "cpu:0-3", "S(5)"), "move");
  assert_false(sl_tensor_ok(y));
  if (!starts_with(sl_graph_error(g), "op 'move' (identity): "))
    fail_msg("unexpected message: %s", sl_graph_error(g));
  sl_graph_destroy(g);
}

static void test_names_and_scopes(void **state) {
  GT_REQUIRE_OPS("relu", "neg");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(3, 4);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  assert_string_equal(sl_tensor_name(x), "x");
  sl_graph_push_scope(g, "block0");
  sl_tensor y = sl_name(sl_relu(x), "act");
  sl_graph_push_scope(g, "inner");
  sl_tensor z = sl_neg(y);
  sl_graph_pop_scope(g);
  sl_graph_pop_scope(g);
  GT_GRAPH_OK(g);
  assert_string_equal(sl_tensor_name(y), "block0/act");
  assert_true(starts_with(sl_tensor_name(z), "block0/inner/neg_"));
  assert_int_equal(sl__graph_find(g, "block0/act"),
                   sl__graph_value(g, y.id)->producer);
  /* Renaming to a used name is an error naming it. */
  sl_tensor w = sl_name(sl_neg(x), "x");
  assert_false(sl_tensor_ok(w));
  assert_non_null(strstr(sl_graph_error(g), "'x'"));
  assert_non_null(strstr(sl_graph_error(g), "already used"));
  sl_graph_destroy(g);

  /* Fetch names are node names too. */
  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  GT_OK(sl_fetch(x, "out"));
  assert_int_equal(sl_fetch(x, "out"), SL_EINVAL);
  sl_graph_destroy(g);
}

static void test_shapes_and_print(void **state) {
  GT_REQUIRE_OPS("matmul", "relu");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_set_default_placement(g, "cpu:0-1"));
  sl_shape xs = SL_SHAPE(5, 3), ws = SL_SHAPE(3, 7);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_normal(0, 1, 3),
                            NULL, NULL);
  sl_tensor y = sl_name(sl_matmul(x, w, false, false), "fc");
  GT_GRAPH_OK(g);
  sl_shape s;
  GT_OK(sl_tensor_shape(y, &s));
  sl_shape want = SL_SHAPE(5, 7);
  assert_true(sl_shape_equal(&s, &want));
  assert_int_equal(sl_tensor_dtype(y), SL_DTYPE_F32);
  assert_int_equal(sl_graph_node_count(g), 3);
  GT_OK(sl__graph_compile(g));
  char buf[2048];
  int len = sl_graph_print(g, buf, sizeof buf);
  assert_true(len > 0 && len < (int)sizeof buf);
  if (!strstr(buf, "fc = matmul{trans_a=0 trans_b=0}(x, w) -> f32 [5,7] S(0) "
                   "@cpu:0-1"))
    fail_msg("listing:\n%s", buf);
  /* Frozen: the graph no longer changes. */
  sl_tensor z = sl_relu(y);
  assert_false(sl_tensor_ok(z));
  assert_int_equal(sl_graph_status(g), SL_ESTATE);
  sl_graph_destroy(g);
  sl_graph_destroy(NULL);
}

/* Every rank's shard of a variable equals the same slice of the whole
 * tensor, whatever the layout. */
static void test_variable_init_layout_free(void **state) {
  const sl_init inits[] = {
      sl_init_uniform(-2, 3, 7),      sl_init_normal(1, 0.5, 8),
      sl_init_xavier_uniform(1.0, 9), sl_init_kaiming_normal(1.4, 10),
      sl_init_constant(2.5),          sl_init_zeros(),
  };
  const char *layouts[][2] = {{"cpu:0", "B"},
                              {"cpu:0-2", "S(0)"},
                              {"cpu:0-3", "S(1)"},
                              {"cpu:0-3[2,2]", "(S(1),S(0))"},
                              {"cpu:0-1", "B"}};
  sl_shape shape = SL_SHAPE(7, 5);
  for (size_t k = 0; k < SL_ARRAY_LEN(inits); k++) {
    float whole[35];
    for (size_t l = 0; l < SL_ARRAY_LEN(layouts); l++) {
      sl_graph *g;
      GT_OK(sl_graph_create(&g));
      sl_tensor w = sl_variable(g, "w", &shape, SL_DTYPE_F32, inits[k],
                                layouts[l][0], layouts[l][1]);
      GT_GRAPH_OK(g);
      GT_OK(sl__graph_compile(g));
      int32_t node = sl__graph_find(g, "w");
      const sl__value *v = sl__graph_value(g, w.id);
      for (int rk = 0; rk < sl_placement_size(v->placement); rk++) {
        sl_slice s;
        GT_OK(sl_local_slice(&shape, v->placement, &v->sbp, rk, &s));
        float buf[35];
        GT_OK(sl__graph_variable_init(g, node, rk, buf));
        int64_t i = 0;
        for (int64_t r = 0; r < s.extent[0]; r++)
          for (int64_t c = 0; c < s.extent[1]; c++, i++) {
            int64_t flat = (s.start[0] + r) * 5 + s.start[1] + c;
            if (l == 0)
              whole[flat] = buf[i];
            else if (whole[flat] != buf[i])
              fail_msg("init %zu layout %s %s rank %d: [%lld] %g != %g", k,
                       layouts[l][0], layouts[l][1], rk, (long long)flat,
                       buf[i], whole[flat]);
          }
      }
      sl_graph_destroy(g);
    }
    /* The values follow the initializer's law (loosely: range / spread). */
    double mean = 0, mx = 0;
    for (int i = 0; i < 35; i++) {
      mean += whole[i] / 35.0;
      mx = fmax(mx, fabs(whole[i]));
    }
    switch (inits[k].kind) {
    case SL_INIT_UNIFORM:
      for (int i = 0; i < 35; i++)
        assert_true(whole[i] >= -2 && whole[i] < 3);
      break;
    case SL_INIT_XAVIER_UNIFORM:
      assert_true(mx <= sqrt(6.0 / 12.0) + 1e-6 && mx > 0.3);
      break;
    case SL_INIT_CONSTANT:
      assert_true(fabs(mean - 2.5) < 1e-9 && mx == 2.5);
      break;
    case SL_INIT_ZEROS: assert_true(mx == 0); break;
    case SL_INIT_NORMAL: assert_true(fabs(mean - 1) < 0.3); break;
    default: assert_true(mx > 0); break;
    }
  }
}

static void test_bad_arguments(void **state) {
  GT_REQUIRE_OPS("add");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape bad = {.ndim = 2, .dims = {3, -1}};
  sl_tensor x = sl_input(g, "x", &bad, SL_DTYPE_F32, NULL, NULL);
  assert_false(sl_tensor_ok(x));
  assert_true(starts_with(sl_graph_error(g), "input 'x': shape"));
  sl_graph_destroy(g);

  GT_OK(sl_graph_create(&g));
  sl_shape s = SL_SHAPE(4);
  sl_tensor v = sl_variable(g, "v", &s, SL_DTYPE_I32, sl_init_normal(0, 1, 1),
                            NULL, NULL);
  assert_false(sl_tensor_ok(v));
  assert_true(starts_with(sl_graph_error(g), "variable 'v': a random "));
  sl_graph_destroy(g);

  GT_OK(sl_graph_create(&g));
  x = sl_input(g, "x", &s, SL_DTYPE_F32, NULL, NULL);
  sl_tensor d = sl_dropout(x, 1.5, 1);
  assert_false(sl_tensor_ok(d));
  assert_true(strstr(sl_graph_error(g), "(dropout): p = 1.5") != NULL);
  sl_graph_destroy(g);

  /* A tensor of another graph. */
  sl_graph *g2;
  GT_OK(sl_graph_create(&g));
  GT_OK(sl_graph_create(&g2));
  x = sl_input(g, "x", &s, SL_DTYPE_F32, NULL, NULL);
  sl_tensor y = sl_input(g2, "y", &s, SL_DTYPE_F32, NULL, NULL);
  sl_tensor z = sl_add(x, y);
  assert_false(sl_tensor_ok(z));
  assert_non_null(strstr(sl_graph_error(g), "another graph"));
  GT_GRAPH_OK(g2);
  sl_graph_destroy(g);
  sl_graph_destroy(g2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sticky_error_names_op),
      cmocka_unit_test(test_axis_out_of_range),
      cmocka_unit_test(test_sbp_errors),
      cmocka_unit_test(test_names_and_scopes),
      cmocka_unit_test(test_shapes_and_print),
      cmocka_unit_test(test_variable_init_layout_free),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
