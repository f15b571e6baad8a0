/* Variables between steps (session/state.c): reading a variable's logical
 * value on every layout, writing one (the job restarts), and a failed step
 * rolled back so that training continues as if it never ran. */
#include "session_helpers.h"

enum { BATCH = 8, IN = 6, HID = 10, CLASSES = 4 };

/* A 2-layer classifier on fed data x [8, 6], labels [8]: w1 [6, 10],
 * w2 [10, 4] laid out by `layout` ("single", "dp", "tp") over `devices`
 * (not single), optimizer o. */
static sl_graph *classifier_on(const char *devices, const char *layout,
                               const sl_optimizer *o) {
  bool single = strcmp(layout, "single") == 0;
  bool tp = strcmp(layout, "tp") == 0;
  sl_graph *g = st_graph(single ? "cpu:0" : devices);
  const char *xs = tp || single ? "B" : "S(0)";
  sl_tensor x = sl_input(g, "x", &SL_SHAPE(BATCH, IN), SL_DTYPE_F32, NULL, xs);
  sl_tensor y =
      sl_input(g, "y", &SL_SHAPE(BATCH), SL_DTYPE_I32, NULL, tp ? "B" : xs);
  sl_tensor w1 =
      sl_variable(g, "w1", &SL_SHAPE(IN, HID), SL_DTYPE_F32,
                  sl_init_xavier_uniform(1, 3), NULL, tp ? "S(1)" : "B");
  sl_tensor w2 =
      sl_variable(g, "w2", &SL_SHAPE(HID, CLASSES), SL_DTYPE_F32,
                  sl_init_xavier_uniform(1, 4), NULL, tp ? "S(0)" : "B");
  sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_fetch(loss, "loss");
  sl_minimize(loss, o);
  st_check_graph(g);
  return g;
}

static sl_graph *classifier(const char *layout, const sl_optimizer *o) {
  return classifier_on("cpu:0-1", layout, o);
}

static float xs[BATCH * IN];
static int32_t good[BATCH], bad[BATCH];

static void make_data(void) {
  sl_rng r = {42};
  for (int i = 0; i < BATCH * IN; i++)
    xs[i] = (float)((double)(sl__rng_next(&r) >> 11) * 0x1.0p-53 - 0.5);
  for (int i = 0; i < BATCH; i++) {
    good[i] = (int32_t)(sl__rng_next(&r) % CLASSES);
    bad[i] = good[i];
  }
  bad[5] = CLASSES + 3; /* out of range */
}

static sl_session *open_session(sl_graph *g) {
  sl_session *s = NULL;
  if (sl_session_create(g, NULL, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  assert_int_equal(sl_session_feed(s, "x", xs, sizeof xs), SL_OK);
  assert_int_equal(sl_session_feed(s, "y", good, sizeof good), SL_OK);
  return s;
}

static float step_loss(sl_session *s) {
  if (sl_session_run(s, 1) != SL_OK) fail_msg("run: %s", sl_last_error());
  float l;
  assert_int_equal(sl_session_fetch(s, "loss", &l, sizeof l), SL_OK);
  return l;
}

static const char *const layouts[] = {"single", "dp", "tp"};

static sl_optimizer optimizer(int k) {
  switch (k) {
  case 0: return sl_optimizer_sgd(0.1, 0.9);
  case 1: return sl_optimizer_adam(0.01);
  default: return sl_optimizer_adamw(0.01, 0.1);
  }
}

/* A variable reads the same logical value on every layout, before and
 * after steps; the state variables are listed with their kind. */
static void test_read_every_layout(void **state) {
  (void)state;
  float ref[2][IN * HID];
  for (int l = 0; l < 3; l++) {
    sl_optimizer o = optimizer(1);
    sl_graph *g = classifier(layouts[l], &o);
    sl_session *s = open_session(g);
    float w1[IN * HID];
    assert_int_equal(sl_session_read_variable(s, "w1", w1, sizeof w1), SL_OK);
    if (l == 0) memcpy(ref[0], w1, sizeof w1);
    assert_memory_equal(w1, ref[0], sizeof w1); /* the initializer's value */
    for (int i = 0; i < 3; i++)
      step_loss(s);
    float m[IN * HID];
    assert_int_equal(sl_session_read_variable(s, "w1.m", m, sizeof m), SL_OK);
    assert_int_equal(sl_session_read_variable(s, "w1", w1, sizeof w1), SL_OK);
    if (l == 0) memcpy(ref[1], w1, sizeof w1);
    for (int i = 0; i < IN * HID; i++)
      assert_true(fabsf(w1[i] - ref[1][i]) <= 1e-5f * (1 + fabsf(ref[1][i])));
    bool seen_m = false;
    for (int32_t i = 0; i < sl_session_variable_count(s); i++) {
      sl_variable_info vi;
      assert_int_equal(sl_session_get_variable(s, i, &vi), SL_OK);
      if (strcmp(vi.name, "w1.m") == 0) {
        seen_m = true;
        assert_true(vi.optimizer && vi.trained);
      }
      if (strcmp(vi.name, "w1") == 0) assert_false(vi.optimizer);
    }
    assert_true(seen_m);
    assert_int_equal(sl_session_read_variable(s, "w1", w1, 4), SL_EINVAL);
    assert_int_equal(sl_session_read_variable(s, "nope", w1, 4), SL_ENOTFOUND);
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
}

/* Writing every variable of one session into another gives the same
 * training from there, bit for bit; a written value reads back at once. */
static void test_write_continues(void **state) {
  (void)state;
  for (int l = 0; l < 3; l++) {
    sl_optimizer o = sl_optimizer_sgd(0.1, 0.9);
    sl_graph *ga = classifier(layouts[l], &o), *gb = classifier(layouts[l], &o);
    sl_session *a = open_session(ga), *b = open_session(gb);
    for (int i = 0; i < 3; i++) {
      step_loss(a);
      step_loss(b);
    }
    /* Perturb b, then write a's values into b: b continues as a. */
    float w[IN * HID] = {0};
    assert_int_equal(sl_session_write_variable(b, "w1", w, sizeof w), SL_OK);
    float back[IN * HID];
    assert_int_equal(sl_session_read_variable(b, "w1", back, sizeof back),
                     SL_OK);
    assert_memory_equal(back, w, sizeof w);
    for (int32_t i = 0; i < sl_session_variable_count(a); i++) {
      sl_variable_info vi;
      assert_int_equal(sl_session_get_variable(a, i, &vi), SL_OK);
      size_t n = (size_t)sl_shape_numel(&vi.shape) * sl_dtype_size(vi.dtype);
      void *buf = calloc(1, n + 8);
      assert_int_equal(sl_session_read_variable(a, vi.name, buf, n), SL_OK);
      assert_int_equal(sl_session_write_variable(b, vi.name, buf, n), SL_OK);
      free(buf);
    }
    for (int i = 0; i < 4; i++) {
      float la = step_loss(a), lb = step_loss(b);
      assert_memory_equal(&la, &lb, sizeof la);
    }
    assert_int_equal(sl_session_steps(b), 7);
    sl_session_destroy(a);
    sl_session_destroy(b);
    sl_graph_destroy(ga);
    sl_graph_destroy(gb);
  }
}

/* A step with a label out of range fails naming the op and the label, is
 * rolled back, and the next steps give the losses of a run that never saw
 * the bad batch: bit for bit, on every layout and optimizer. */
static void test_failed_step_rolls_back(void **state) {
  (void)state;
  for (int l = 0; l < 3; l++)
    for (int k = 0; k < 3; k++) {
      sl_optimizer o = optimizer(k);
      sl_graph *ga = classifier(layouts[l], &o),
               *gb = classifier(layouts[l], &o);
      sl_session *a = open_session(ga), *b = open_session(gb);
      float want[6];
      for (int i = 0; i < 6; i++)
        want[i] = step_loss(a);
      for (int i = 0; i < 3; i++)
        step_loss(b);
      assert_int_equal(sl_session_feed(b, "y", bad, sizeof bad), SL_OK);
      sl_status st = sl_session_run(b, 2);
      assert_int_equal(st, SL_EINVAL);
      const char *msg = sl_last_error();
      printf("%s/%d: %s\n", layouts[l], k, msg);
      assert_non_null(strstr(msg, "sparse_cross_entropy"));
      assert_non_null(strstr(msg, "step 3 was rolled back"));
      assert_int_equal(sl_session_steps(b), 3);
      assert_int_equal(sl_session_feed(b, "y", good, sizeof good), SL_OK);
      for (int i = 3; i < 6; i++) {
        float lb = step_loss(b);
        assert_memory_equal(&lb, &want[i], sizeof lb);
      }
      sl_session_destroy(a);
      sl_session_destroy(b);
      sl_graph_destroy(ga);
      sl_graph_destroy(gb);
    }
}

/* The labels file at path: [good, bad], one batch each, the bad one out
 * of range on three of the four devices. */
static void write_labels(const char *path) {
  int32_t y[2 * BATCH];
  memcpy(y, good, sizeof good);
  memcpy(y + BATCH, bad, sizeof bad);
  y[BATCH + 1] = y[BATCH + 7] = CLASSES + 1;
  st_write_npy_i32(path, y, 2 * BATCH);
}

/* The classifier on 4 devices of dp with AdamW, its labels read from the
 * file (step 0 good, step 1 bad). */
static sl_graph *file_classifier(const char *labels) {
  sl_optimizer o = optimizer(2);
  sl_graph *g = st_graph("cpu:0-3");
  sl_tensor x =
      sl_input(g, "x", &SL_SHAPE(BATCH, IN), SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor y = sl_data_npy(g, labels, BATCH, NULL, "S(0)");
  sl_tensor w1 = sl_variable(g, "w1", &SL_SHAPE(IN, HID), SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 3), NULL, "B");
  sl_tensor w2 = sl_variable(g, "w2", &SL_SHAPE(HID, CLASSES), SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 4), NULL, "B");
  sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
  sl_minimize(sl_cross_entropy(sl_matmul(h, w2, false, false), y), &o);
  st_check_graph(g);
  return g;
}

/* A failed step that runs right behind a good one (sl_session_run(s, 2)),
 * on 4 devices of dp on a 2-core machine: the device holding the bad
 * label starts step 1 as soon as its own update of step 0 is done, while
 * another device's update of step 0 may still be waiting to run. The
 * failures (on three devices) must not abort the job before that update,
 * or the variable would be left between versions and the step could not
 * be rolled back.
 * Each of many tries is rolled back to step 1, whose variables are
 * exactly those of a run of step 0 alone. */
static void test_failed_step_behind_a_good_one(void **state) {
  (void)state;
  enum { TRIES = 40 };
  char dir[256], labels[300], ckpt[300];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/sluice-state-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  assert_non_null(mkdtemp(dir));
  snprintf(labels, sizeof labels, "%s/labels.npy", dir);
  snprintf(ckpt, sizeof ckpt, "%s/start", dir);
  write_labels(labels);
  sl_graph *ga = file_classifier(labels), *gb = file_classifier(labels);
  sl_session *a = NULL, *b = NULL;
  assert_int_equal(sl_session_create(ga, NULL, &a), SL_OK);
  assert_int_equal(sl_session_create(gb, NULL, &b), SL_OK);
  assert_int_equal(sl_session_feed(a, "x", xs, sizeof xs), SL_OK);
  assert_int_equal(sl_session_feed(b, "x", xs, sizeof xs), SL_OK);
  assert_int_equal(sl_session_save(b, ckpt), SL_OK);
  assert_int_equal(sl_session_run(a, 1), SL_OK);
  float wa[IN * HID + HID * CLASSES], wb[IN * HID + HID * CLASSES];
  assert_int_equal(sl_session_read_variable(a, "w1", wa, IN * HID * 4), SL_OK);
  assert_int_equal(
      sl_session_read_variable(a, "w2", wa + IN * HID, HID * CLASSES * 4),
      SL_OK);
  for (int i = 0; i < TRIES; i++) {
    assert_int_equal(sl_session_restore(b, ckpt), SL_OK);
    assert_int_equal(sl_session_run(b, 2), SL_EINVAL);
    if (!strstr(sl_last_error(), "step 1 was rolled back"))
      fail_msg("try %d: %s", i, sl_last_error());
    assert_int_equal(sl_session_steps(b), 1);
    assert_int_equal(sl_session_read_variable(b, "w1", wb, IN * HID * 4),
                     SL_OK);
    assert_int_equal(
        sl_session_read_variable(b, "w2", wb + IN * HID, HID * CLASSES * 4),
        SL_OK);
    assert_memory_equal(wa, wb, sizeof wa);
  }
  sl_session_destroy(a);
  sl_session_destroy(b);
  sl_graph_destroy(ga);
  sl_graph_destroy(gb);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  make_data();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_every_layout),
      cmocka_unit_test(test_write_continues),
      cmocka_unit_test(test_failed_step_rolls_back),
      cmocka_unit_test(test_failed_step_behind_a_good_one),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
