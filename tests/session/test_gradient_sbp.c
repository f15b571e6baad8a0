/* sl_gradient_sbp: a gradient built in the layout the program asks for.
 * A two-layer data-parallel MLP on cpu:0-1 with the hidden activation's
 * gradient asked broadcast (inference builds it split, as its forward
 * value) and the first weight's gradient asked split over its rows
 * (inference all-reduces it to B): the ops that make them produce those
 * layouts, and training gives the unconstrained losses and weights within
 * 1e-5. Bad requests are refused with the graph's error. */
#include <sluice/boxing.h>
#include <sluice/graph.h>

#include "session_helpers.h"

#define ROWS 16
#define IN 6
#define HID 10
#define OUT 4
#define STEPS 4

static sl_graph *build(bool constrained) {
  sl_graph *g;
  ST_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(ROWS, IN), ys = SL_SHAPE(ROWS, OUT),
           w1s = SL_SHAPE(IN, HID), w2s = SL_SHAPE(HID, OUT);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0-1", "S(0)");
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, "cpu:0-1", "S(0)");
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_normal(0, 0.5, 1), "cpu:0-1", NULL);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_normal(0, 0.5, 2), "cpu:0-1", NULL);
  sl_tensor h = sl_name(sl_tanh(sl_matmul(x, w1, false, false)), "h");
  if (constrained) {
    sl_gradient_sbp(h, "B");
    sl_gradient_sbp(w1, "S(0)");
  }
  sl_tensor loss = sl_mse_loss(sl_matmul(h, w2, false, false), y);
  ST_OK(sl_minimize(loss, &(sl_optimizer){.kind = SL_OPTIMIZER_SGD, .lr = 0.2}));
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail_msg("building: %s", sl_graph_error(g));
  return g;
}

static void train(sl_graph *g, float *losses, float *w1) {
  float x[ROWS * IN], y[ROWS * OUT];
  for (int i = 0; i < ROWS * IN; i++)
    x[i] = (float)((i * 37 % 23) - 11) / 8.0f;
  for (int i = 0; i < ROWS * OUT; i++)
    y[i] = (float)((i * 13 % 17) - 8) / 8.0f;
  sl_session *s;
  ST_OK(sl_session_create(g, NULL, &s));
  ST_OK(sl_session_feed(s, "x", x, sizeof x));
  ST_OK(sl_session_feed(s, "y", y, sizeof y));
  for (int k = 0; k < STEPS; k++) {
    ST_OK(sl_session_run(s, 1));
    ST_OK(sl_session_fetch(s, "loss", &losses[k], sizeof losses[k]));
  }
  ST_OK(sl_session_read_variable(s, "w1", w1, sizeof(float) * IN * HID));
  sl_session_destroy(s);
}

/* Input k of a node as its producer made it (before a boxing node). */
static int32_t made(const sl_graph *g, const sl__node *consumer, int k) {
  int32_t v = consumer->in[k];
  const sl__node *p = sl__graph_node(g, sl__graph_value(g, v)->producer);
  return p->kind == SL__NODE_BOXING ? p->in[0] : v;
}

static void producer_sbp(const sl_graph *g, const sl__node *consumer, int k,
                         char *buf, size_t n) {
  sl_nd_sbp_print(&sl__graph_value(g, made(g, consumer, k))->sbp, buf, n);
}

static void test_layouts_and_values(void **state) {
  (void)state;
  float base[STEPS], got[STEPS], w_base[IN * HID], w_got[IN * HID];
  sl_graph *g = build(false);
  train(g, base, w_base);
  sl_graph_destroy(g);
  g = build(true);
  train(g, got, w_got);
  char dh[32] = "", dw1[32] = "";
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind != SL__NODE_OP) continue;
    if (strcmp(n->op->name, "tanh_grad") == 0)
      producer_sbp(g, n, 0, dh, sizeof dh);
    if (n->op->weight_update &&
        made(g, n, 0) == sl__graph_node(g, sl__graph_find(g, "w1"))->out[0])
      producer_sbp(g, n, 1, dw1, sizeof dw1);
  }
  double rel = 0;
  for (int k = 0; k < STEPS; k++)
    rel = fmax(rel, fabs((double)got[k] - base[k]) / fabs((double)base[k]));
  for (int i = 0; i < IN * HID; i++)
    rel = fmax(rel, fabs((double)w_got[i] - w_base[i]));
  printf("  gradient of h built %s, of w1 %s; losses %.6f .. %.6f, largest "
         "difference to the unconstrained run %.1e\n",
         dh, dw1, (double)got[0], (double)got[STEPS - 1], rel);
  assert_string_equal(dh, "B");
  assert_string_equal(dw1, "S(0)");
  assert_true(rel <= 1e-5);
  sl_graph_destroy(g);
}

static void expect_error(sl_graph *g, const char *want) {
  if (sl_graph_status(g) == SL_OK || !strstr(sl_graph_error(g), want))
    fail_msg("want an error with \"%s\", got: %s", want,
             sl_graph_status(g) == SL_OK ? "none" : sl_graph_error(g));
}

static void test_refusals(void **state) {
  (void)state;
  const char *bad[] = {"S(2)", "X", NULL};
  const char *want[] = {"axis 2", "X", "no SBP given"};
  for (int i = 0; i < 3; i++) {
    sl_graph *g;
    ST_OK(sl_graph_create(&g));
    sl_shape s = SL_SHAPE(4, 3);
    sl_tensor w = sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_zeros(),
                              "cpu:0-1", NULL);
    sl_gradient_sbp(w, bad[i]);
    expect_error(g, want[i]);
    sl_graph_destroy(g);
  }
  sl_graph *g = build(false);
  sl_tensor x = {g, 0}; /* the first value: input x */
  sl_gradient_sbp(x, "B");
  expect_error(g, "after sl_minimize");
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts_and_values),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
