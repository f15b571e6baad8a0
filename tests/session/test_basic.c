/* First checks of the embedded session: a matmul data parallel, a pure
 * data movement, and stepping one step at a time. */
#include "session_helpers.h"

static void test_matmul_dp(void **state) {
  sl_graph *g = st_graph("cpu:0-1");
  sl_shape xs = SL_SHAPE(6, 4), ws = SL_SHAPE(4, 3);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 5), NULL, NULL);
  sl_fetch(sl_matmul(x, w, false, false), "y");
  st_run_vs_interp(g, 3, 1e-5, st_seed(1, "matmul_dp"), 0, NULL);
  sl_graph_destroy(g);
}

static void test_movement(void **state) {
  sl_graph *g = st_graph("cpu:0-3");
  sl_shape xs = SL_SHAPE(7, 5);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_fetch(sl_to_global(x, NULL, "B"), "xb");
  sl_fetch(sl_to_global(x, NULL, "S(1)"), "x1");
  sl_fetch(x, "x0");
  st_run_vs_interp(g, 2, 0, st_seed(2, "movement"), 0, NULL);
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_dp),
      cmocka_unit_test(test_movement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
