/* Bad input to the session gives clear errors, never a crash or a hang:
 * feeds of the wrong size (naming the input), unknown names, running with
 * an input never fed, fetching before a step, graphs with errors, devices
 * the embedded session cannot run, a config's master that does not parse;
 * a kernel failing on one rank while the others wait in collectives stops
 * the job with the actor and op named, and the session then only reports
 * it. */
#include <unistd.h>

#include "session_helpers.h"

static sl_graph *classifier(const char *placement, const char *x_sbp) {
  sl_graph *g = st_graph(placement);
  sl_shape xs = SL_SHAPE(8, 6), ys = SL_SHAPE(8), ws = SL_SHAPE(6, 3);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, x_sbp);
  sl_tensor y = sl_input(g, "labels", &ys, SL_DTYPE_I32, NULL, x_sbp);
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 3), NULL, NULL);
  sl_tensor loss = sl_cross_entropy(sl_matmul(x, w, false, false), y);
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  st_check_graph(g);
  return g;
}

static void test_feed_fetch_errors(void **state) {
  sl_graph *g = classifier("cpu:0-1", "S(0)");
  sl_session *s;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  float x[48] = {0};
  int32_t y[8] = {0};
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x - 4), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "'x'"));
  assert_non_null(strstr(sl_last_error(), "188 bytes, the input needs 192"));
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x + 4), SL_EINVAL);
  assert_int_equal(sl_session_feed(s, "images", x, sizeof x), SL_ENOTFOUND);
  assert_non_null(strstr(sl_last_error(), "'images'"));
  assert_int_equal(sl_session_feed(s, "x", NULL, sizeof x), SL_EINVAL);
  assert_int_equal(sl_session_feed(NULL, "x", x, sizeof x), SL_EINVAL);
  float loss;
  assert_int_equal(sl_session_fetch(s, "loss", &loss, sizeof loss), SL_ESTATE);
  assert_non_null(strstr(sl_last_error(), "no step has run"));
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_run(s, 1), SL_ESTATE);
  assert_non_null(strstr(sl_last_error(), "input 'labels' was never fed"));
  assert_int_equal(sl_session_run(s, 0), SL_EINVAL);
  assert_int_equal(sl_session_feed(s, "labels", y, sizeof y), SL_OK);
  assert_int_equal(sl_session_run(s, 2), SL_OK);
  assert_int_equal(sl_session_fetch(s, "loss", &loss, 8), SL_EINVAL);
  assert_non_null(
      strstr(sl_last_error(), "fetch 'loss': 8 bytes, the value has 4"));
  assert_int_equal(sl_session_fetch(s, "accuracy", &loss, 4), SL_ENOTFOUND);
  assert_int_equal(sl_session_fetch(s, "loss", &loss, sizeof loss), SL_OK);
  assert_true(isfinite(loss));
  sl_shape shape;
  sl_dtype dt;
  assert_int_equal(sl_session_fetch_info(s, "loss", &shape, &dt), SL_OK);
  assert_int_equal(shape.ndim, 0);
  assert_int_equal(dt, SL_DTYPE_F32);
  assert_int_equal(sl_session_fetch_info(s, "nope", NULL, NULL), SL_ENOTFOUND);
  sl_session_destroy(s); /* without finish: destroy finishes */
  sl_graph_destroy(g);
}

static void test_bad_graphs_and_devices(void **state) {
  /* a graph with an error: its first error, unchanged */
  sl_graph *g = st_graph("cpu:0");
  sl_shape a = SL_SHAPE(3, 4), b = SL_SHAPE(5, 6);
  sl_tensor x = sl_input(g, "x", &a, SL_DTYPE_F32, NULL, NULL);
  sl_tensor w = sl_input(g, "w", &b, SL_DTYPE_F32, NULL, NULL);
  sl_fetch(sl_name(sl_matmul(x, w, false, false), "fc1"), "y");
  sl_session *s = (sl_session *)&g; /* must be reset to NULL */
  assert_int_equal(sl_session_create(g, NULL, &s), SL_EINVAL);
  assert_null(s);
  assert_non_null(strstr(sl_last_error(), "op 'fc1' (matmul)"));
  sl_graph_destroy(g);
  /* CUDA devices this process cannot open: the build has no CUDA
   * (SL_EUNSUPPORTED) or the machine no GPU (SL_ECUDA), named */
  g = st_graph("cuda:0-1");
  sl_tensor c = sl_input(g, "c", &a, SL_DTYPE_F32, NULL, "S(0)");
  sl_fetch(sl_relu(c), "r");
  st_check_graph(g);
  if (sl_device_count(SL_DEVICE_CUDA) < 2) {
    sl_status st = sl_session_create(g, NULL, &s);
    print_message("cuda:0-1: %s\n", sl_last_error());
    assert_true(st == SL_EUNSUPPORTED || st == SL_ECUDA);
    assert_null(s);
    assert_non_null(strstr(sl_last_error(), "cuda:"));
  }
  sl_graph_destroy(g);
  /* other nodes: not for the embedded session */
  g = st_graph("cpu:0-1/0-1");
  c = sl_input(g, "c", &a, SL_DTYPE_F32, NULL, "S(0)");
  sl_fetch(sl_relu(c), "r");
  st_check_graph(g);
  assert_int_equal(sl_session_create(g, NULL, &s), SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "node"));
  sl_graph_destroy(g);
  /* bad arguments */
  g = st_graph("cpu:0");
  sl_fetch(sl_input(g, "x", &a, SL_DTYPE_F32, NULL, NULL), "x_out");
  sl_session_config cfg = sl_session_config_default();
  cfg.kind = (sl_session_kind)7;
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_EINVAL);
  assert_int_equal(sl_session_create(NULL, NULL, &s), SL_EINVAL);
  assert_int_equal(sl_session_create(g, NULL, NULL), SL_EINVAL);
  sl_session_destroy(NULL);
  /* a master in the config makes the session remote; one that does not
   * parse is named as the session's */
  const char *bad_masters[] = {"nohost", "h:0", "h:99999"};
  for (size_t i = 0; i < SL_ARRAY_LEN(bad_masters); i++) {
    cfg = sl_session_config_default();
    cfg.master = bad_masters[i];
    cfg.token = "t";
    assert_int_equal(sl_session_create(g, &cfg, &s), SL_EINVAL);
    assert_null(s);
    print_message("master '%s': %s\n", bad_masters[i], sl_last_error());
    assert_non_null(strstr(sl_last_error(), "the session's master"));
  }
  /* an unwritable trace: the job's status at finish */
  cfg = sl_session_config_default();
  cfg.trace_path = "/nonexistent/dir/trace.json";
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_OK);
  float xs[12] = {0};
  assert_int_equal(sl_session_feed(s, "x", xs, sizeof xs), SL_OK);
  assert_int_equal(sl_session_run(s, 1), SL_OK);
  assert_int_equal(sl_session_finish(s), SL_EIO);
  assert_non_null(strstr(sl_last_error(), "trace"));
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

/* Labels out of range on rank 2 only, at step 2: rank 2's cross-entropy
 * fails while ranks 0, 1, 3 go on into the gradient all-reduce and wait
 * there. The job stops, the waiting collectives are released, the run
 * returns the kernel's error naming the actor and the op, and the step is
 * rolled back (tests/session/test_state.c checks the values). */
static void test_kernel_failure_mid_run(void **state) {
  for (int algo = 0; algo < 2; algo++) {
    sl_graph *g = classifier("cpu:0-3", "S(0)");
    sl_session_config cfg = sl_session_config_default();
    cfg.comm_direct_max_bytes = algo ? -1 : 0;
    sl_session *s;
    assert_int_equal(sl_session_create(g, &cfg, &s), SL_OK);
    float x[48];
    int32_t y[8];
    for (int i = 0; i < 48; i++)
      x[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < 8; i++)
      y[i] = i % 3;
    assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
    assert_int_equal(sl_session_feed(s, "labels", y, sizeof y), SL_OK);
    assert_int_equal(sl_session_run(s, 2), SL_OK);
    y[5] = 7; /* row 5: rank 2 of 4 */
    assert_int_equal(sl_session_feed(s, "labels", y, sizeof y), SL_OK);
    assert_int_equal(sl_session_run(s, 3), SL_EINVAL);
    const char *msg = sl_last_error();
    assert_non_null(strstr(msg, "@r2"));
    assert_non_null(strstr(msg, "(sparse_cross_entropy)"));
    assert_non_null(strstr(msg, "label 7"));
    assert_non_null(strstr(msg, "step 2 was rolled back"));
    /* afterwards: the session runs again from step 2; the same batch fails
     * the same way, a good one trains */
    assert_int_equal(sl_session_steps(s), 2);
    float loss;
    assert_int_equal(sl_session_fetch(s, "loss", &loss, sizeof loss),
                     SL_ESTATE);
    assert_int_equal(sl_session_run(s, 1), SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "label 7"));
    y[5] = 1;
    assert_int_equal(sl_session_feed(s, "labels", y, sizeof y), SL_OK);
    assert_int_equal(sl_session_run(s, 2), SL_OK);
    assert_int_equal(sl_session_steps(s), 4);
    assert_int_equal(sl_session_fetch(s, "loss", &loss, sizeof loss), SL_OK);
    assert_true(isfinite(loss));
    assert_int_equal(sl_session_finish(s), SL_OK);
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
}

/* A degenerate graph: an input nobody reads. (A graph with no node at all
 * is not tried here: compile's boxing pass copies a NULL node list, which
 * UBSan reports; the session handles an empty plan.) */
static void test_degenerate_graphs(void **state) {
  sl_session *s;
  sl_graph *g = st_graph("cpu:0-1");
  sl_shape xs = SL_SHAPE(4);
  sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  float x[4] = {1, 2, 3, 4};
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_run(s, 2), SL_OK);
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_stats st;
  assert_int_equal(sl_session_get_stats(s, &st), SL_OK);
  assert_int_equal(st.steps, 2);
  assert_int_equal(st.in_flight, 0);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

/* The watchdog counts only time the program waits inside the session: a
 * program idle between calls for longer than the hang timeout is not a
 * hang. */
static void test_idle_program_is_not_a_hang(void **state) {
  sl_graph *g = classifier("cpu:0-1", "S(0)");
  sl_session_config cfg = sl_session_config_default();
  cfg.hang_timeout_ms = 100;
  sl_session *s;
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_OK);
  float x[48] = {0};
  int32_t y[8] = {0};
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_feed(s, "labels", y, sizeof y), SL_OK);
  usleep(400000);
  assert_int_equal(sl_session_run(s, 1), SL_OK);
  usleep(400000);
  assert_int_equal(sl_session_run(s, 2), SL_OK);
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

/* Config structs carry their size: one from an older, smaller header is
 * read up to its size (later fields take their defaults, whatever the
 * bytes after it hold); size 0 (never initialised) or a larger size (a
 * newer header) is refused naming the struct and its initialiser. The
 * same for sl_sim_config and sl_job_config. */
static void test_sized_configs(void **state) {
  sl_graph *g = st_graph("cpu:0");
  sl_shape a = SL_SHAPE(3);
  sl_fetch(sl_relu(sl_input(g, "x", &a, SL_DTYPE_F32, NULL, NULL)), "r");
  sl_session *s = NULL;
  /* An older header without `master` and `token`: the bytes there are
   * not read, so the session stays embedded and is created. */
  sl_session_config old = sl_session_config_default();
  old.size = offsetof(sl_session_config, master);
  old.master = "no-such-host:1";
  old.token = "t";
  assert_int_equal(sl_session_create(g, &old, &s), SL_OK);
  float x[3] = {-1, 0, 2}, r[3];
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_run(s, 1), SL_OK);
  assert_int_equal(sl_session_fetch(s, "r", r, sizeof r), SL_OK);
  assert_true(r[0] == 0 && r[2] == 2);
  sl_simulation sim;
  sl_sim_config sc = sl_sim_config_default();
  assert_int_equal(sl_session_simulate(s, &sc, &sim, NULL), SL_OK);
  sc.size = 0;
  assert_int_equal(sl_session_simulate(s, &sc, &sim, NULL), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "SL_SIM_CONFIG"));
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_destroy(s);
  const size_t bad[] = {0, sizeof(sl_session_config) + 8};
  for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
    sl_session_config c = sl_session_config_default();
    c.size = bad[i];
    s = NULL;
    assert_int_equal(sl_session_create(g, &c, &s), SL_EINVAL);
    assert_null(s);
    print_message("size %zu: %s\n", bad[i], sl_last_error());
    assert_non_null(strstr(sl_last_error(), "sl_session_config"));
    assert_non_null(
        strstr(sl_last_error(), bad[i] ? "newer header" : "SL_SESSION_CONFIG"));
  }
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_feed_fetch_errors),
      cmocka_unit_test(test_bad_graphs_and_devices),
      cmocka_unit_test(test_kernel_failure_mid_run),
      cmocka_unit_test(test_degenerate_graphs),
      cmocka_unit_test(test_idle_program_is_not_a_hang),
      cmocka_unit_test(test_sized_configs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
