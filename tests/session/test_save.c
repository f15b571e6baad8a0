/* Checkpoints of a session (session/save.c): save after 5 steps, restore
 * into a new session, 5 more steps give the losses of 10 straight — bit
 * for bit on the same layout for every optimizer, within the invariance
 * tolerance on another layout and device count; weights loaded alone;
 * errors naming the file and tensor; a saving process killed at random
 * points always leaves a checkpoint that resumes exactly. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "session_helpers.h"

enum { BATCH = 16, IN = 12, HID = 16, CLASSES = 5 };

/* A classifier whose data comes from random sources (a new batch every
 * step, positioned by the step), laid out as `layout` says: "single",
 * "dp2", "tp4", "hybrid" (2x2 mesh: dp on axis 0, tp on axis 1). */
static sl_graph *model(const char *layout, const sl_optimizer *o, bool extra) {
  const char *pl = "cpu:0", *data = "B", *w1s = "B", *w2s = "B";
  if (strcmp(layout, "dp2") == 0) pl = "cpu:0-1", data = "S(0)";
  if (strcmp(layout, "tp4") == 0) pl = "cpu:0-3", w1s = "S(1)", w2s = "S(0)";
  if (strcmp(layout, "hybrid") == 0)
    pl = "cpu:0-3[2,2]", data = "(S(0),B)", w1s = "(B,S(1))", w2s = "(B,S(0))";
  if (strcmp(layout, "cuda_dp2") == 0) pl = "cuda:0-1", data = "S(0)";
  if (strcmp(layout, "cuda_tp2") == 0)
    pl = "cuda:0-1", w1s = "S(1)", w2s = "S(0)";
  sl_graph *g = st_graph(pl);
  const char *bs = strcmp(layout, "hybrid") == 0 ? "(B,B)" : "B";
  sl_tensor x = sl_data_random_uniform(g, &SL_SHAPE(BATCH, IN), SL_DTYPE_F32,
                                       -1, 1, 11, NULL, data);
  sl_tensor y = sl_data_random_int(g, &SL_SHAPE(BATCH), SL_DTYPE_I32, 0,
                                   CLASSES, 12, NULL, data);
  sl_tensor w1 = sl_variable(g, "w1", &SL_SHAPE(IN, HID), SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 3), NULL, w1s);
  sl_tensor b1 = sl_variable(g, "b1", &SL_SHAPE(HID), SL_DTYPE_F32,
                             sl_init_zeros(), NULL, bs);
  sl_tensor w2 = sl_variable(g, "w2", &SL_SHAPE(HID, CLASSES), SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 4), NULL, w2s);
  sl_tensor h = sl_relu(sl_add(sl_matmul(x, w1, false, false), b1));
  if (extra)
    h = sl_mul(h, sl_variable(g, "gain", &SL_SHAPE(HID), SL_DTYPE_F32,
                              sl_init_constant(1), NULL, bs));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_fetch(loss, "loss");
  sl_minimize(loss, o);
  st_check_graph(g);
  return g;
}

static sl_session *open_model(sl_graph *g) {
  sl_session *s = NULL;
  if (sl_session_create(g, NULL, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  return s;
}

static float step_loss(sl_session *s) {
  if (sl_session_run(s, 1) != SL_OK) fail_msg("run: %s", sl_last_error());
  float l;
  assert_int_equal(sl_session_fetch(s, "loss", &l, sizeof l), SL_OK);
  return l;
}

static sl_optimizer optimizer(int k) {
  switch (k) {
  case 0: return sl_optimizer_sgd(0.1, 0);
  case 1: return sl_optimizer_sgd(0.1, 0.9);
  case 2: return sl_optimizer_adam(0.01);
  default: return sl_optimizer_adamw(0.01, 0.1);
  }
}

static char dir_template[] = "/tmp/sluice_save_XXXXXX";
static char *tmp;

static int setup(void **state) {
  (void)state;
  tmp = mkdtemp(dir_template);
  return tmp ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  return system(cmd) == 0 ? 0 : -1;
}

/* 10 straight steps against 5, save, restore into a new session, 5 more:
 * the same losses bit for bit, for every optimizer; sl_session_steps
 * continues from 5. */
static void test_resume_exact(void **state) {
  (void)state;
  const char *layouts[] = {"single", "dp2", "tp4", "hybrid"};
  for (int l = 0; l < 4; l++)
    for (int k = 0; k < 4; k++) {
      sl_optimizer o = optimizer(k);
      char dir[512];
      snprintf(dir, sizeof dir, "%s/exact_%d_%d", tmp, l, k);
      sl_graph *ga = model(layouts[l], &o, false);
      sl_session *a = open_model(ga);
      float want[10];
      for (int i = 0; i < 10; i++)
        want[i] = step_loss(a);
      sl_session_destroy(a);
      sl_graph_destroy(ga);

      sl_graph *gb = model(layouts[l], &o, false);
      sl_session *b = open_model(gb);
      for (int i = 0; i < 5; i++)
        step_loss(b);
      if (sl_session_save(b, dir) != SL_OK)
        fail_msg("save: %s", sl_last_error());
      sl_session_destroy(b);
      sl_graph_destroy(gb);

      sl_graph *gc = model(layouts[l], &o, false);
      sl_session *c = open_model(gc);
      if (sl_session_restore(c, dir) != SL_OK)
        fail_msg("restore: %s", sl_last_error());
      assert_int_equal(sl_session_steps(c), 5);
      for (int i = 5; i < 10; i++) {
        float got = step_loss(c);
        if (memcmp(&got, &want[i], sizeof got) != 0)
          fail_msg("%s, optimizer %d, step %d: %.9g after restore, %.9g "
                   "straight",
                   layouts[l], k, i, got, want[i]);
      }
      assert_int_equal(sl_session_steps(c), 10);
      sl_session_destroy(c);
      sl_graph_destroy(gc);
    }
}

/* Saved on tp over 4 devices, restored on dp over 2, saved again and
 * restored on one device, and from there on the 2x2 hybrid mesh: each
 * continues the straight run within the invariance tolerance. */
static void test_reshard(void **state) {
  (void)state;
  sl_optimizer o = sl_optimizer_adam(0.01);
  sl_graph *ga = model("single", &o, false);
  sl_session *a = open_model(ga);
  float want[12];
  for (int i = 0; i < 12; i++)
    want[i] = step_loss(a);
  sl_session_destroy(a);
  sl_graph_destroy(ga);
  const char *chain[] = {"tp4", "dp2", "single", "hybrid"};
  char dir[512];
  for (int c = 0; c < 4; c++) {
    sl_graph *g = model(chain[c], &o, false);
    sl_session *s = open_model(g);
    if (c > 0 && sl_session_restore(s, dir) != SL_OK)
      fail_msg("restore into %s: %s", chain[c], sl_last_error());
    assert_int_equal(sl_session_steps(s), 3 * c);
    for (int i = 3 * c; i < 3 * c + 3; i++) {
      float got = step_loss(s);
      printf("%-6s step %2d: %.7f (straight %.7f)\n", chain[c], i, got,
             want[i]);
      assert_true(fabsf(got - want[i]) <= 1e-4f * fabsf(want[i]));
    }
    snprintf(dir, sizeof dir, "%s/reshard_%d", tmp, c);
    if (sl_session_save(s, dir) != SL_OK) fail_msg("save: %s", sl_last_error());
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
}

/* sl_session_load takes weights only; restore refuses a checkpoint that
 * lacks a trained variable or holds another shape, naming file and
 * tensor; a constant the checkpoint lacks keeps its value. */
static void test_load_and_errors(void **state) {
  (void)state;
  sl_optimizer o = sl_optimizer_adam(0.01);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/load", tmp);
  sl_graph *ga = model("single", &o, false);
  sl_session *a = open_model(ga);
  for (int i = 0; i < 4; i++)
    step_loss(a);
  assert_int_equal(sl_session_save(a, dir), SL_OK);
  float w1a[IN * HID];
  assert_int_equal(sl_session_read_variable(a, "w1", w1a, sizeof w1a), SL_OK);

  sl_graph *gb = model("tp4", &o, false);
  sl_session *b = open_model(gb);
  int32_t loaded = -1;
  assert_int_equal(sl_session_load(b, dir, &loaded), SL_OK);
  assert_int_equal(loaded, 3); /* w1, b1, w2 */
  assert_int_equal(sl_session_steps(b), 0);
  float w1b[IN * HID], m[IN * HID], zero[IN * HID] = {0};
  assert_int_equal(sl_session_read_variable(b, "w1", w1b, sizeof w1b), SL_OK);
  assert_memory_equal(w1a, w1b, sizeof w1a);
  assert_int_equal(sl_session_read_variable(b, "w1.m", m, sizeof m), SL_OK);
  assert_memory_equal(m, zero, sizeof m);
  sl_session_destroy(b);
  sl_graph_destroy(gb);

  /* A graph with a trained variable the checkpoint lacks. */
  sl_graph *gc = model("single", &o, true);
  sl_session *c = open_model(gc);
  assert_int_equal(sl_session_restore(c, dir), SL_EINVAL);
  printf("%s\n", sl_last_error());
  assert_non_null(strstr(sl_last_error(), "'gain'"));
  assert_non_null(strstr(sl_last_error(), dir));
  /* The session is untouched and still trains. */
  assert_int_equal(sl_session_steps(c), 0);
  step_loss(c);
  sl_session_destroy(c);
  sl_graph_destroy(gc);

  /* Another shape: a model with more hidden units is refused. */
  sl_graph *gd = st_graph("cpu:0");
  sl_tensor w1 = sl_variable(gd, "w1", &SL_SHAPE(IN, HID + 1), SL_DTYPE_F32,
                             sl_init_zeros(), NULL, NULL);
  sl_fetch(w1, "w1_value");
  st_check_graph(gd);
  sl_session *d = open_model(gd);
  assert_int_equal(sl_session_load(d, dir, NULL), SL_EINVAL);
  printf("%s\n", sl_last_error());
  fflush(stdout);
  assert_non_null(strstr(sl_last_error(), "'w1'"));
  assert_non_null(strstr(sl_last_error(), "[12,17]"));
  /* A missing checkpoint. */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/none", tmp);
  assert_int_not_equal(sl_session_restore(d, missing), SL_OK);
  assert_non_null(strstr(sl_last_error(), missing));
  sl_session_destroy(d);
  sl_graph_destroy(gd);
  sl_session_destroy(a);
  sl_graph_destroy(ga);
}

/* sl_variable_load: a graph whose weights start from a checkpoint trains
 * as the saved session does from there (weights only: the optimizer state
 * starts at zero, so compare against a load); bad files are graph errors
 * naming the path and tensor. */
static void test_variable_load(void **state) {
  (void)state;
  sl_optimizer o = sl_optimizer_sgd(0.1, 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/varload", tmp);
  sl_graph *ga = model("single", &o, false);
  sl_session *a = open_model(ga);
  for (int i = 0; i < 3; i++)
    step_loss(a);
  assert_int_equal(sl_session_save(a, dir), SL_OK);
  float w2a[HID * CLASSES];
  assert_int_equal(sl_session_read_variable(a, "w2", w2a, sizeof w2a), SL_OK);
  sl_session_destroy(a);
  sl_graph_destroy(ga);
  /* tp over 4: each rank reads its own columns and rows of the pieces. */
  sl_graph *gb = model("tp4", &o, false);
  sl_graph *gc = model("single", &o, false);
  const char *names[] = {"w1", "b1", "w2"};
  for (int k = 0; k < 3; k++) {
    int32_t nb = sl__graph_find(gb, names[k]),
            nc = sl__graph_find(gc, names[k]);
    sl_tensor tb = {gb, sl__graph_node(gb, nb)->out[0]};
    sl_tensor tc = {gc, sl__graph_node(gc, nc)->out[0]};
    assert_true(sl_tensor_ok(sl_variable_load(tb, dir, NULL)));
    assert_true(sl_tensor_ok(sl_variable_load(tc, dir, names[k])));
  }
  sl_session *b = open_model(gb), *c = open_model(gc);
  float w2b[HID * CLASSES];
  assert_int_equal(sl_session_read_variable(b, "w2", w2b, sizeof w2b), SL_OK);
  assert_memory_equal(w2a, w2b, sizeof w2a);
  for (int i = 0; i < 3; i++) {
    float lb = step_loss(b), lc = step_loss(c);
    assert_true(fabsf(lb - lc) <= 1e-5f * fabsf(lc));
  }
  sl_session_destroy(b);
  sl_session_destroy(c);
  sl_graph_destroy(gb);
  sl_graph_destroy(gc);
  /* errors */
  sl_graph *gd = model("single", &o, false);
  int32_t nd = sl__graph_find(gd, "w1");
  sl_tensor td = {gd, sl__graph_node(gd, nd)->out[0]};
  assert_false(sl_tensor_ok(sl_variable_load(td, dir, "w2")));
  assert_non_null(strstr(sl_graph_error(gd), "'w2'"));
  assert_non_null(strstr(sl_graph_error(gd), dir));
  sl_graph_destroy(gd);
  sl_graph *ge = model("single", &o, false);
  int32_t ne = sl__graph_find(ge, "w1");
  sl_tensor te = {ge, sl__graph_node(ge, ne)->out[0]};
  assert_false(sl_tensor_ok(sl_variable_load(te, "/nonexistent/ck", NULL)));
  assert_non_null(strstr(sl_graph_error(ge), "/nonexistent/ck"));
  sl_graph_destroy(ge);
}

/* A background save holds the state of its step while training goes on;
 * a failure to write comes from sl_session_save_wait. */
static void test_background_save(void **state) {
  (void)state;
  sl_optimizer o = sl_optimizer_adam(0.01);
  sl_graph *ga = model("dp2", &o, false);
  sl_session *a = open_model(ga);
  float want[9];
  char dir[512];
  snprintf(dir, sizeof dir, "%s/background", tmp);
  for (int i = 0; i < 9; i++) {
    want[i] = step_loss(a);
    if (i == 4) assert_int_equal(sl_session_save_async(a, dir), SL_OK);
  }
  assert_int_equal(sl_session_save_wait(a), SL_OK);
  assert_int_equal(sl_session_save_wait(a), SL_OK); /* none left */
  /* Saving the same step twice keeps the first file until the second
   * index is in place (another file name), then removes it. */
  char twice[600], f1[700], f2[700];
  snprintf(twice, sizeof twice, "%s_twice", dir);
  assert_int_equal(sl_session_save(a, twice), SL_OK);
  assert_int_equal(sl_session_save(a, twice), SL_OK);
  snprintf(f1, sizeof f1, "%s/step-000009.node0.safetensors", twice);
  snprintf(f2, sizeof f2, "%s/step-000009-2.node0.safetensors", twice);
  assert_int_not_equal(access(f1, F_OK), 0);
  assert_int_equal(access(f2, F_OK), 0);
  /* unwritable: under a regular file */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/background/index.json/sub", tmp);
  assert_int_equal(sl_session_save_async(a, bad), SL_OK);
  /* Its failure waits for sl_session_save_wait: other saves go on. */
  char other[600];
  snprintf(other, sizeof other, "%s_other", dir);
  assert_int_equal(sl_session_save(a, other), SL_OK);
  assert_int_not_equal(sl_session_save_wait(a), SL_OK);
  assert_non_null(strstr(sl_last_error(), bad));
  assert_int_equal(sl_session_save_wait(a), SL_OK);
  sl_session_destroy(a);
  sl_graph_destroy(ga);
  sl_graph *gb = model("single", &o, false);
  sl_session *b = open_model(gb);
  assert_int_equal(sl_session_restore(b, dir), SL_OK);
  assert_int_equal(sl_session_steps(b), 5);
  for (int i = 5; i < 9; i++)
    assert_true(fabsf(step_loss(b) - want[i]) <= 1e-4f * fabsf(want[i]));
  sl_session_destroy(b);
  sl_graph_destroy(gb);
}

/* On (fake) CUDA devices: shards come from device memory and go back to
 * it; saved on GPUs, restored on CPUs and the other way round; a failed
 * step rolled back on GPUs. */
static void test_cuda(void **state) {
  (void)state;
  fake_cuda_install();
  sl_optimizer o = sl_optimizer_adam(0.01);
  sl_graph *ga = model("dp2", &o, false);
  sl_session *a = open_model(ga);
  float want[9];
  for (int i = 0; i < 9; i++)
    want[i] = step_loss(a);
  sl_session_destroy(a);
  sl_graph_destroy(ga);
  const char *chain[] = {"cuda_dp2", "tp4", "cuda_tp2"};
  char dir[512];
  for (int c = 0; c < 3; c++) {
    sl_graph *g = model(chain[c], &o, false);
    sl_session *s = open_model(g);
    if (c > 0 && sl_session_restore(s, dir) != SL_OK)
      fail_msg("restore into %s: %s", chain[c], sl_last_error());
    for (int i = 3 * c; i < 3 * c + 3; i++) {
      float got = step_loss(s);
      assert_true(fabsf(got - want[i]) <= 1e-4f * fabsf(want[i]));
    }
    snprintf(dir, sizeof dir, "%s/cuda_%d", tmp, c);
    if (sl_session_save(s, dir) != SL_OK) fail_msg("save: %s", sl_last_error());
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
  fake_cuda_uninstall();
}

/* A child trains and saves after every step into one directory; the
 * parent kills it at random moments. Each time, the directory restores
 * into a session whose next steps equal the straight run's from the
 * saved step. */
static void test_killed_while_saving(void **state) {
  (void)state;
  uint64_t seed = st_seed(7, "killed while saving");
  sl_rng r = {seed};
  sl_optimizer o = sl_optimizer_sgd(0.1, 0.9);
  enum { STEPS = 400 };
  sl_graph *ga = model("dp2", &o, false);
  sl_session *a = open_model(ga);
  static float want[STEPS + 3];
  for (int i = 0; i < STEPS + 3; i++)
    want[i] = step_loss(a);
  sl_session_destroy(a);
  sl_graph_destroy(ga);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/killed", tmp);
  int resumed = 0;
  for (int round = 0; round < 6; round++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      sl_graph *g = model("dp2", &o, false);
      sl_session *s = NULL;
      if (sl_session_create(g, NULL, &s) != SL_OK) _exit(3);
      for (int i = 0; i < STEPS; i++)
        if (sl_session_run(s, 1) != SL_OK || sl_session_save(s, dir) != SL_OK)
          _exit(4);
      _exit(0);
    }
    usleep((useconds_t)(20000 + sl__rng_next(&r) % 150000));
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    sl_graph *g = model("dp2", &o, false);
    sl_session *s = open_model(g);
    sl_status st = sl_session_restore(s, dir);
    if (st == SL_ENOTFOUND) { /* killed before the first save committed */
      sl_session_destroy(s);
      sl_graph_destroy(g);
      continue;
    }
    if (st != SL_OK) fail_msg("round %d: restore: %s", round, sl_last_error());
    int64_t at = sl_session_steps(s);
    assert_true(at >= 1 && at <= STEPS);
    for (int64_t i = at; i < at + 3; i++) {
      float got = step_loss(s);
      assert_memory_equal(&got, &want[i], sizeof got);
    }
    printf("round %d: resumed at step %lld\n", round, (long long)at);
    resumed++;
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
  assert_true(resumed >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resume_exact),
      cmocka_unit_test(test_reshard),
      cmocka_unit_test(test_load_and_errors),
      cmocka_unit_test(test_variable_load),
      cmocka_unit_test(test_background_save),
      cmocka_unit_test(test_cuda),
      cmocka_unit_test(test_killed_while_saving),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
