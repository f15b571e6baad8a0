/* First checks of the embedded session: a matmul data parallel, a pure
 * data movement, and stepping one step at a time. */
#include <pthread.h>

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

/* Two sessions of one graph, each driven by its own thread at the same
 * time, give the same values (the graph is only read once compiled). */
typedef struct two_arg {
  sl_graph *g;
  float out[5 * 3];
  sl_status st;
} two_arg;

static void *drive(void *p) {
  two_arg *a = p;
  sl_session *s = NULL;
  a->st = sl_session_create(a->g, NULL, &s);
  float x[5 * 4];
  for (int i = 0; i < 20; i++)
    x[i] = (float)i * 0.25f - 2;
  if (a->st == SL_OK) a->st = sl_session_feed(s, "x", x, sizeof x);
  if (a->st == SL_OK) a->st = sl_session_run(s, 3);
  if (a->st == SL_OK) a->st = sl_session_fetch(s, "y", a->out, sizeof a->out);
  if (a->st == SL_OK) a->st = sl_session_finish(s);
  sl_session_destroy(s);
  return NULL;
}

static void test_two_sessions_one_graph(void **state) {
  sl_graph *g = st_graph("cpu:0-2");
  sl_shape xs = SL_SHAPE(5, 4), ws = SL_SHAPE(4, 3);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 5), NULL, "S(1)");
  sl_tensor y = sl_matmul(x, w, false, false);
  sl_minimize(sl_reduce_sum(sl_square(y), 0, NULL, false),
              &(sl_optimizer){.kind = SL_OPTIMIZER_SGD, .lr = 0.01});
  sl_fetch(y, "y");
  st_check_graph(g);
  assert_int_equal(sl__graph_compile(g), SL_OK); /* before the threads */
  two_arg a = {g, {0}, SL_OK}, b = {g, {0}, SL_OK};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, drive, &a);
  pthread_create(&tb, NULL, drive, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  assert_int_equal(a.st, SL_OK);
  assert_int_equal(b.st, SL_OK);
  assert_memory_equal(a.out, b.out, sizeof a.out);
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_dp),
      cmocka_unit_test(test_movement),
      cmocka_unit_test(test_two_sessions_one_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
