/* Dynamic loss scaling (sl_optimizer.loss_scale, graph/loss_scale.c) with
 * f16 matmuls: a linear model trained 6 steps with a planted overflow at
 * step 2 (inputs of 1e5, beyond f16's 65504, so the product is inf). That
 * step, and only that one, changes neither the weight nor its momentum,
 * and halves the scale; with window 2 the scale doubles after every two
 * good steps. Before the overflow the weights are those of the unscaled
 * run bit for bit: scaling by a power of two rounds nothing. On dp over 2
 * devices the same. A skipped step does not count as a step, as in
 * PyTorch (GradScaler skips optimizer.step()): with the overflow at step 0
 * or 2, SGD with momentum and Adam end where the unscaled run ends with
 * that step left out, bit for bit. Bad settings are refused. */
#include <sluice/boxing.h>
#include <sluice/graph.h>

#include "session_helpers.h"

#define ROWS 8
#define IN 4
#define OUT 3
#define STEPS 6
#define BAD_STEP 2

typedef enum optim { SGD, ADAM } optim;

static sl_graph *build_with(const char *placement, const char *sbp,
                            double scale, optim kind) {
  sl_graph *g;
  ST_OK(sl_graph_create(&g));
  ST_OK(sl_graph_set_compute_dtype(g, SL_DTYPE_F16));
  sl_shape xs = SL_SHAPE(ROWS, IN), ys = SL_SHAPE(ROWS, OUT),
           ws = SL_SHAPE(IN, OUT);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, placement, sbp);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, placement, sbp);
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_normal(0, 0.5, 3), placement, NULL);
  sl_tensor loss = sl_mse_loss(sl_matmul(x, w, false, false), y);
  sl_optimizer opt =
      kind == ADAM ? sl_optimizer_adam(0.05) : sl_optimizer_sgd(0.1, 0.9);
  opt.loss_scale = scale;
  opt.loss_scale_window = 2;
  ST_OK(sl_minimize(loss, &opt));
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail_msg("building: %s", sl_graph_error(g));
  return g;
}

static sl_graph *build(const char *placement, const char *sbp, double scale) {
  return build_with(placement, sbp, scale, SGD);
}

typedef struct trace {
  float w[STEPS + 1][IN * OUT], m[STEPS + 1][IN * OUT];
  float scale[STEPS + 1], good[STEPS + 1], skipped[STEPS + 1];
} trace;

/* Trains `steps` steps, the inputs 1e5 at bad_step (-1: never), reading
 * the state (`state`: the optimizer's first state variable) before the
 * first step and after each. */
static void train_steps(sl_graph *g, int bad_step, int steps, bool scaled,
                        const char *state, trace *t) {
  float x[ROWS * IN], big[ROWS * IN], y[ROWS * OUT];
  for (int i = 0; i < ROWS * IN; i++) {
    x[i] = (float)((i * 37 % 23) - 11) / 8.0f;
    big[i] = 1e5f;
  }
  for (int i = 0; i < ROWS * OUT; i++)
    y[i] = (float)((i * 13 % 17) - 8) / 8.0f;
  sl_session *s;
  ST_OK(sl_session_create(g, NULL, &s));
  ST_OK(sl_session_feed(s, "y", y, sizeof y));
  for (int k = 0; k <= steps; k++) {
    if (k > 0) {
      ST_OK(sl_session_feed(s, "x", k - 1 == bad_step ? big : x, sizeof x));
      ST_OK(sl_session_run(s, 1));
    }
    ST_OK(sl_session_read_variable(s, "w", t->w[k], sizeof t->w[k]));
    ST_OK(sl_session_read_variable(s, state, t->m[k], sizeof t->m[k]));
    if (scaled) {
      ST_OK(sl_session_read_variable(s, "loss_scale", &t->scale[k],
                                  sizeof t->scale[k]));
      ST_OK(sl_session_read_variable(s, "loss_scale.good_steps", &t->good[k],
                                  sizeof t->good[k]));
      ST_OK(sl_session_read_variable(s, "loss_scale.skipped_steps",
                                     &t->skipped[k], sizeof t->skipped[k]));
    }
  }
  sl_session_destroy(s);
}

static void train(sl_graph *g, int bad_step, bool scaled, trace *t) {
  train_steps(g, bad_step, STEPS, scaled, "w.momentum", t);
}

static bool same(const float *a, const float *b) {
  return memcmp(a, b, sizeof(float) * IN * OUT) == 0;
}

static void check_run(const char *placement, const char *sbp) {
  static trace plain, t;
  sl_graph *g = build(placement, sbp, 0);
  train(g, -1, false, &plain);
  sl_graph_destroy(g);
  g = build(placement, sbp, 1024);
  train(g, BAD_STEP, true, &t);
  sl_graph_destroy(g);
  /* 1024, two good steps: 2048; the overflow: 1024; then 2048 again. */
  const float want_scale[STEPS + 1] = {1024, 1024, 2048, 1024,
                                       1024, 2048, 2048};
  const float want_good[STEPS + 1] = {0, 1, 0, 0, 1, 0, 1};
  for (int k = 1; k <= STEPS; k++) {
    bool kept = same(t.w[k], t.w[k - 1]) && same(t.m[k], t.m[k - 1]);
    printf("  %s step %d: scale %g, good steps %g, weights %s\n", placement,
           k - 1, (double)t.scale[k], (double)t.good[k],
           kept ? "kept" : "updated");
    if (kept != (k - 1 == BAD_STEP))
      fail_msg("%s step %d: the weights were %s", placement, k - 1,
               kept ? "kept" : "updated");
    assert_true(t.scale[k] == want_scale[k]);
    assert_true(t.good[k] == want_good[k]);
    assert_true(t.skipped[k] == (k - 1 >= BAD_STEP ? 1.0f : 0.0f));
  }
  for (int k = 0; k <= BAD_STEP; k++)
    if (!same(t.w[k], plain.w[k]))
      fail_msg("%s: after step %d the scaled run's weights differ from the "
               "unscaled run's",
               placement, k - 1);
}

static void test_skips_the_overflow(void **state) {
  (void)state;
  check_run("cpu:0", "B");
  check_run("cpu:0-1", "S(0)");
}

/* The skipped step leaves no trace: STEPS steps with an overflow end
 * where STEPS - 1 unscaled steps without it end, and the count says 1. */
static void test_skipped_steps_do_not_count(void **state) {
  (void)state;
  static const char *const names[2] = {"SGD with momentum", "Adam"};
  static trace plain, t;
  for (int kind = SGD; kind <= ADAM; kind++)
    for (int bad = 0; bad <= BAD_STEP; bad += BAD_STEP) {
      const char *st = kind == ADAM ? "w.m" : "w.momentum";
      sl_graph *g = build_with("cpu:0", "B", 0, (optim)kind);
      train_steps(g, -1, STEPS - 1, false, st, &plain);
      sl_graph_destroy(g);
      g = build_with("cpu:0", "B", 1024, (optim)kind);
      train_steps(g, bad, STEPS, true, st, &t);
      sl_graph_destroy(g);
      assert_true(t.skipped[STEPS] == 1);
      printf("  %s, overflow at step %d: weights %s the unscaled run's "
             "without it\n",
             names[kind], bad,
             same(t.w[STEPS], plain.w[STEPS - 1]) ? "equal" : "differ from");
      if (!same(t.w[STEPS], plain.w[STEPS - 1]) ||
          !same(t.m[STEPS], plain.m[STEPS - 1]))
        fail_msg("%s, overflow at step %d: the skipped step counted",
                 names[kind], bad);
    }
}

static void test_refusals(void **state) {
  (void)state;
  const double scales[2] = {-1, INFINITY};
  for (int i = 0; i < 3; i++) {
    sl_graph *g;
    ST_OK(sl_graph_create(&g));
    sl_shape s = SL_SHAPE(2);
    sl_tensor w =
        sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
    sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
    if (i < 2)
      opt.loss_scale = scales[i];
    else
      opt.loss_scale_window = -3;
    assert_int_equal(
        sl_minimize(sl_reduce_sum(sl_square(w), 0, NULL, false), &opt),
        SL_EINVAL);
    const char *want = i < 2 ? "loss scale" : "loss scale window -3";
    if (!strstr(sl_graph_error(g), want))
      fail_msg("want \"%s\": %s", want, sl_graph_error(g));
    sl_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_skips_the_overflow),
      cmocka_unit_test(test_skipped_steps_do_not_count),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
