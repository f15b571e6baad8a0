/* Asynchronous dispatch (sl_session_start, sl_session_wait,
 * sl_session_fetch_step): a program that starts step k + 1 before reading
 * step k, and feeds the next batch meanwhile, trains exactly as one that
 * runs a step at a time; a failure in a started step is reported and
 * rolled back; calls between steps wait for the steps started. */
#include <sluice/checkpoint.h>

#include "session_helpers.h"

enum { BATCH = 8, IN = 6, HID = 10, CLASSES = 4, STEPS = 8 };

/* A 2-layer classifier on fed data x [8, 6], labels [8], trained with
 * Adam, laid out by `layout` (single, dp, tp) over cpu:0-1. */
static sl_graph *classifier(const char *layout) {
  bool single = strcmp(layout, "single") == 0;
  bool tp = strcmp(layout, "tp") == 0;
  sl_graph *g = st_graph(single ? "cpu:0" : "cpu:0-1");
  const char *xs = tp || single ? "B" : "S(0)";
  sl_tensor x = sl_input(g, "x", &SL_SHAPE(BATCH, IN), SL_DTYPE_F32, NULL, xs);
  sl_tensor y = sl_input(g, "y", &SL_SHAPE(BATCH), SL_DTYPE_I32, NULL, xs);
  sl_tensor w1 =
      sl_variable(g, "w1", &SL_SHAPE(IN, HID), SL_DTYPE_F32,
                  sl_init_xavier_uniform(1, 3), NULL, tp ? "S(1)" : "B");
  sl_tensor w2 =
      sl_variable(g, "w2", &SL_SHAPE(HID, CLASSES), SL_DTYPE_F32,
                  sl_init_xavier_uniform(1, 4), NULL, tp ? "S(0)" : "B");
  sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_fetch(loss, "loss");
  sl_fetch(w2, "w2_out");
  sl_optimizer adam = sl_optimizer_adam(0.01);
  sl_minimize(loss, &adam);
  st_check_graph(g);
  return g;
}

/* Batch i of the run (a different one every step), labels in range or,
 * with bad, one out of range. */
static void batch(int i, float *x, int32_t *y, bool bad) {
  sl_rng r = {1000 + (uint64_t)i};
  for (int k = 0; k < BATCH * IN; k++)
    x[k] = (float)((double)(sl__rng_next(&r) >> 11) * 0x1.0p-53 - 0.5);
  for (int k = 0; k < BATCH; k++)
    y[k] = (int32_t)(sl__rng_next(&r) % CLASSES);
  if (bad) y[3] = CLASSES + 2;
}

static void feed_batch(sl_session *s, int i, bool bad) {
  float x[BATCH * IN];
  int32_t y[BATCH];
  batch(i, x, y, bad);
  ST_OK(sl_session_feed(s, "x", x, sizeof x));
  ST_OK(sl_session_feed(s, "y", y, sizeof y));
}

static sl_session *open_session(sl_graph *g) {
  sl_session *s = NULL;
  if (sl_session_create(g, NULL, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  return s;
}

/* The reference: one step at a time, batch i fed before step i (with
 * fixed, batch 0 before step 0 only). */
static void run_sync(const char *layout, int steps, bool fixed, float *loss,
                     float *w2) {
  sl_graph *g = classifier(layout);
  sl_session *s = open_session(g);
  for (int i = 0; i < steps; i++) {
    if (!fixed || i == 0) feed_batch(s, i, false);
    ST_OK(sl_session_run(s, 1));
    ST_OK(sl_session_fetch(s, "loss", &loss[i], sizeof loss[i]));
  }
  ST_OK(sl_session_read_variable(s, "w2", w2, HID * CLASSES * sizeof *w2));
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

static const char *const layouts[] = {"single", "dp", "tp"};

/* Step i + 1 is started, with its batch fed while step i runs, before
 * step i's loss is read: the losses and the weights after the run are
 * those of the one-step-at-a-time program, bit for bit. Feeding batch
 * i + 1 while step i is under way must not change what step i reads. */
static void test_one_step_ahead(void **state) {
  (void)state;
  for (int l = 0; l < 3; l++) {
    float want[STEPS], want_w2[HID * CLASSES];
    run_sync(layouts[l], STEPS, false, want, want_w2);
    sl_graph *g = classifier(layouts[l]);
    sl_session *s = open_session(g);
    feed_batch(s, 0, false);
    ST_OK(sl_session_start(s, 1));
    for (int i = 0; i < STEPS; i++) {
      if (i + 1 < STEPS) {
        feed_batch(s, i + 1, false); /* waits for step i's read only */
        ST_OK(sl_session_start(s, 1));
        assert_int_equal(sl_session_steps(s), i + 2);
      }
      float l1;
      ST_OK(sl_session_fetch_step(s, "loss", i, &l1, sizeof l1));
      assert_memory_equal(&l1, &want[i], sizeof l1);
    }
    ST_OK(sl_session_wait(s));
    float w2[HID * CLASSES], fetched[HID * CLASSES];
    ST_OK(sl_session_read_variable(s, "w2", w2, sizeof w2));
    assert_memory_equal(w2, want_w2, sizeof w2);
    /* A fetched variable: its value after the step's update. */
    ST_OK(
        sl_session_fetch_step(s, "w2_out", STEPS - 1, fetched, sizeof fetched));
    assert_memory_equal(fetched, want_w2, sizeof fetched);
    ST_OK(sl_session_finish(s));
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
}

/* Only the last two steps started can be fetched (the default depth); a
 * step not started is refused; sl_session_fetch reads the last step
 * started, waiting for it. */
static void test_fetch_step_range(void **state) {
  (void)state;
  float want[3], want_w2[HID * CLASSES];
  run_sync("dp", 1, false, want, want_w2);
  sl_graph *g = classifier("dp");
  sl_session *s = open_session(g);
  float l;
  feed_batch(s, 0, false);
  assert_int_equal(sl_session_fetch_step(s, "loss", 0, &l, sizeof l),
                   SL_ESTATE); /* nothing started */
  ST_OK(sl_session_start(s, 3));
  assert_int_equal(sl_session_steps(s), 3);
  assert_int_equal(sl_session_fetch_step(s, "loss", 3, &l, sizeof l),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "step 3 was not started"));
  assert_int_equal(sl_session_fetch_step(s, "loss", 0, &l, sizeof l),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "only the last 2 steps"));
  ST_OK(sl_session_fetch_step(s, "loss", 1, &l, sizeof l));
  float last, again;
  ST_OK(sl_session_fetch(s, "loss", &last, sizeof last));
  ST_OK(sl_session_fetch_step(s, "loss", 2, &again, sizeof again));
  assert_memory_equal(&last, &again, sizeof last);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  /* The first step's loss, fetched while it may still run. */
  g = classifier("dp");
  s = open_session(g);
  feed_batch(s, 0, false);
  ST_OK(sl_session_start(s, 1));
  ST_OK(sl_session_fetch_step(s, "loss", 0, &l, sizeof l));
  assert_memory_equal(&l, &want[0], sizeof l);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

/* With fetch_depth 16, a program that starts 20 steps at once reads the
 * losses of the last 16, those of one step at a time; a negative depth
 * is refused. */
static void test_fetch_depth(void **state) {
  (void)state;
  enum { N = 20, DEPTH = 16 };
  float want[N], want_w2[HID * CLASSES];
  run_sync("tp", N, true, want, want_w2);
  sl_graph *g = classifier("tp");
  sl_session *s = NULL;
  sl_session_config bad = SL_SESSION_CONFIG(.fetch_depth = -1);
  assert_int_equal(sl_session_create(g, &bad, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "fetch_depth -1"));

  sl_session_config cfg = SL_SESSION_CONFIG(.fetch_depth = DEPTH);
  ST_OK(sl_session_create(g, &cfg, &s));
  feed_batch(s, 0, false);
  ST_OK(sl_session_start(s, N));
  float l, w2[HID * CLASSES];
  assert_int_equal(
      sl_session_fetch_step(s, "loss", N - DEPTH - 1, &l, sizeof l), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "only the last 16 steps"));
  for (int i = N - DEPTH; i < N; i++) {
    ST_OK(sl_session_fetch_step(s, "loss", i, &l, sizeof l));
    assert_memory_equal(&l, &want[i], sizeof l);
  }
  ST_OK(sl_session_fetch_step(s, "w2_out", N - 1, w2, sizeof w2));
  assert_memory_equal(w2, want_w2, sizeof w2);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

/* A step started with a bad label fails when the program next waits for
 * it — by sl_session_wait or by fetching it — naming the op, rolled back
 * with the step started after it; fed good data, training continues as if
 * the bad batch had never come. */
static void test_failure_in_a_started_step(void **state) {
  (void)state;
  for (int l = 0; l < 3; l++) {
    float want[6], want_w2[HID * CLASSES];
    run_sync(layouts[l], 6, false, want, want_w2);
    for (int by_fetch = 0; by_fetch < 2; by_fetch++) {
      sl_graph *g = classifier(layouts[l]);
      sl_session *s = open_session(g);
      feed_batch(s, 0, false);
      ST_OK(sl_session_start(s, 1));
      feed_batch(s, 1, false);
      ST_OK(sl_session_start(s, 1));
      feed_batch(s, 2, true);
      ST_OK(sl_session_start(s, 1));
      sl_status st;
      if (by_fetch) {
        float bad;
        st = sl_session_fetch_step(s, "loss", 2, &bad, sizeof bad);
      } else {
        st = sl_session_wait(s);
      }
      assert_int_equal(st, SL_EINVAL);
      const char *msg = sl_last_error();
      printf("%s (%s): %s\n", layouts[l], by_fetch ? "fetch" : "wait", msg);
      assert_non_null(strstr(msg, "sparse_cross_entropy"));
      assert_non_null(strstr(msg, "step 2 was rolled back"));
      assert_int_equal(sl_session_steps(s), 2);
      float l1;
      /* The rolled-back job restarted at step 2: earlier values are gone. */
      assert_int_equal(sl_session_fetch_step(s, "loss", 1, &l1, sizeof l1),
                       SL_ESTATE);
      assert_non_null(strstr(sl_last_error(), "since the session restarted"));
      for (int i = 2; i < 6; i++) {
        feed_batch(s, i, false);
        ST_OK(sl_session_start(s, 1));
        ST_OK(sl_session_fetch_step(s, "loss", i, &l1, sizeof l1));
        assert_memory_equal(&l1, &want[i], sizeof l1);
      }
      assert_int_equal(sl_session_fetch_step(s, "loss", 1, &l1, sizeof l1),
                       SL_EINVAL);
      assert_non_null(strstr(sl_last_error(), "restarted at step 2"));
      float w2[HID * CLASSES];
      ST_OK(sl_session_read_variable(s, "w2", w2, sizeof w2));
      assert_memory_equal(w2, want_w2, sizeof w2);
      sl_session_destroy(s);
      sl_graph_destroy(g);
    }
  }
}

/* More steps than the job takes at once (60): start returns once all are
 * released; a read of a variable, a save and finish wait for them. */
static void test_many_steps_then_state(void **state) {
  (void)state;
  enum { N = 150 };
  static float want[N];
  float want_w2[HID * CLASSES];
  run_sync("dp", N, true, want, want_w2);
  sl_graph *g = classifier("dp");
  sl_session *s = open_session(g);
  feed_batch(s, 0, false);
  ST_OK(sl_session_start(s, N));
  float w2[HID * CLASSES];
  ST_OK(sl_session_read_variable(s, "w2", w2, sizeof w2));
  assert_memory_equal(w2, want_w2, sizeof w2);
  float l;
  ST_OK(sl_session_fetch_step(s, "loss", N - 1, &l, sizeof l));
  assert_memory_equal(&l, &want[N - 1], sizeof l);

  char dir[] = "/tmp/sluice_async_XXXXXX";
  assert_non_null(mkdtemp(dir));
  ST_OK(sl_session_start(s, 2));
  ST_OK(sl_session_save(s, dir));
  sl_checkpoint *ck = NULL;
  ST_OK(sl_checkpoint_open(dir, &ck));
  assert_int_equal(sl_checkpoint_step(ck), N + 2);
  sl_checkpoint_close(ck);

  ST_OK(sl_session_start(s, 3));
  ST_OK(sl_session_finish(s));
  sl_session_stats stats;
  ST_OK(sl_session_get_stats(s, &stats));
  assert_int_equal(stats.steps, N + 5);
  assert_int_equal(stats.in_flight, 0);
  ST_OK(sl_session_fetch_step(s, "loss", N + 4, &l, sizeof l));
  sl_session_destroy(s);
  sl_graph_destroy(g);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_step_ahead),
      cmocka_unit_test(test_fetch_step_range),
      cmocka_unit_test(test_fetch_depth),
      cmocka_unit_test(test_failure_in_a_started_step),
      cmocka_unit_test(test_many_steps_then_state),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
