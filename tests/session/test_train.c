/* Training a small MLP with the session under the four layouts of the
 * examples — single, dp, tp (Megatron: column- then row-split), hybrid
 * (data x tensor on a 2x2 mesh) — step by step against the interpreter;
 * the job never runs ahead of the steps asked for; many steps per run
 * call; registers within quota; the gradient all-reduce shows in a trace
 * overlapping backward compute. */
#include <unistd.h>

#include "session_helpers.h"
#include "session_int.h"

/* The examples' optimizer: SGD with momentum. */
#define SGD sl_optimizer_sgd(0.1, 0.9)

static const st_mlp_layout mlp_layouts[] = {
    {"single", "cpu:0", "B", "B", "B"},
    {"dp", "cpu:0-3", "S(0)", "B", "B"},
    {"dp3", "cpu:0-2", "S(0)", "B", "B"},
    {"tp", "cpu:0-3", "B", "S(1)", "S(0)"},
    {"tp2", "cpu:0-1", "B", "S(1)", "S(0)"},
    {"hybrid", "cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))"},
};

static void test_mlp_layouts(void **state) {
  uint64_t seed = st_seed(21, "mlp");
  for (size_t i = 0; i < SL_ARRAY_LEN(mlp_layouts); i++) {
    printf("  %s on %s\n", mlp_layouts[i].name, mlp_layouts[i].placement);
    sl_graph *g = st_mlp(&mlp_layouts[i], 16, 20, SGD);
    st_run_vs_interp(g, 10, 1e-5, seed, 7, NULL);
    sl_graph_destroy(g);
  }
}

/* Many steps in one call give the same as one call per step, and the
 * feeds/updates/sources fired exactly once per step asked: nothing ran
 * ahead, not even the updates of weights, which only depend on data the
 * program already gave. */
static void test_steps_and_no_run_ahead(void **state) {
  const st_mlp_layout *l = &mlp_layouts[1];
  float loss_a = 0, loss_b = 0, w_a[12 * 20], w_b[12 * 20];
  st_feeds f;
  for (int mode = 0; mode < 2; mode++) {
    sl_graph *g = st_mlp(l, 16, 20, SGD);
    sl_session *s;
    assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
    st_feeds_make(g, 5, 7, &f);
    for (int k = 0; k < f.n; k++)
      assert_int_equal(sl_session_feed(s, f.name[k], f.data[k], f.bytes[k]),
                       SL_OK);
    st_feeds_free(&f);
    if (mode == 0) {
      assert_int_equal(sl_session_run(s, 5), SL_OK);
    } else {
      for (int k = 0; k < 5; k++)
        assert_int_equal(sl_session_run(s, 1), SL_OK);
    }
    assert_int_equal(sl_session_steps(s), 5);
    float *loss = mode ? &loss_b : &loss_a, *w = mode ? w_b : w_a;
    assert_int_equal(sl_session_fetch(s, "loss", loss, sizeof *loss), SL_OK);
    assert_int_equal(sl_session_fetch(s, "w1_out", w, sizeof w_a), SL_OK);
    /* Let the job idle: had it any tick left, it would use it now. */
    usleep(20000);
    for (int32_t t = 0; t < s->n_tasks; t++) {
      const task_rt *rt = &s->rt[t];
      if (rt->t->kind == SL__TASK_TICK) continue;
      const sl__node *n = sl__graph_node(g, rt->t->node);
      if (rt->t->kind == SL__TASK_FEED ||
          (n->optimizer && n->kind == SL__NODE_OP))
        if (rt->fired != 5)
          fail_msg("task '%s' fired %lld times after 5 steps", rt->t->name,
                   (long long)rt->fired);
    }
    assert_int_equal(sl_session_finish(s), SL_OK);
    sl_session_stats st;
    assert_int_equal(sl_session_get_stats(s, &st), SL_OK);
    assert_int_equal(st.over_quota, 0);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.messages_left, 0);
    assert_true(st.firings > 0);
    /* fetch still works after finish; run does not */
    float again = 0;
    assert_int_equal(sl_session_fetch(s, "loss", &again, sizeof again), SL_OK);
    assert_true(again == *loss);
    assert_int_equal(sl_session_run(s, 1), SL_ESTATE);
    assert_int_equal(sl_session_finish(s), SL_OK);
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
  assert_true(loss_a == loss_b);
  assert_memory_equal(w_a, w_b, sizeof w_a);
}

/* With a trace, the dp MLP's gradient all-reduces (deferred firings of
 * the compute stream, spanning from the deposit to the round's end, on
 * that stream's "(deferred)" row) overlap the backward matmuls of earlier
 * layers on the compute stream of the same device. */
static void test_trace_shows_overlap(void **state) {
  char path[] = "/tmp/sluice_session_trace_XXXXXX.json";
  int fd = mkstemps(path, 5);
  assert_true(fd >= 0);
  close(fd);
  const st_mlp_layout l = {"dp", "cpu:0-1", "S(0)", "B", "B"};
  sl_graph *g = st_mlp(&l, 64, 256, SGD);
  sl_session_config cfg = sl_session_config_default();
  cfg.trace_path = path;
  cfg.comm_direct_max_bytes = -1;
  sl_session *s;
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_OK);
  st_feeds f;
  st_feeds_make(g, 9, 7, &f);
  for (int k = 0; k < f.n; k++)
    assert_int_equal(sl_session_feed(s, f.name[k], f.data[k], f.bytes[k]),
                     SL_OK);
  st_feeds_free(&f);
  assert_int_equal(sl_session_run(s, 6), SL_OK);
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  FILE *tf = fopen(path, "r");
  assert_non_null(tf);
  /* Parse the events we need: thread names (device, stream) and firings
   * (name, tid, ts, dur). */
  typedef struct ev {
    char name[160];
    int tid;
    double ts, dur;
  } ev;
  static ev evs[20000];
  int n = 0, dev_of[64], compute[64];
  for (int i = 0; i < 64; i++)
    dev_of[i] = compute[i] = -1;
  char line[1024];
  while (fgets(line, sizeof line, tf) && n < 20000) {
    const char *t = strstr(line, "\"tid\":");
    if (!t) continue;
    int tid = atoi(t + 6);
    /* rows are named "cpu:<device>/<kind>", deferred firings
     * "cpu:<device>/<kind> (deferred)" */
    const char *th = strstr(line, "\"args\":{\"name\":\"cpu:");
    if (strstr(line, "thread_name") && th && tid >= 0 && tid < 64) {
      dev_of[tid] = atoi(th + 21);
      compute[tid] = strstr(th, "/compute\"") != NULL;
      continue;
    }
    const char *nm = strstr(line, "{\"name\":\"");
    const char *ts = strstr(line, "\"ts\":");
    const char *du = strstr(line, "\"dur\":");
    if (!nm || !ts || !du || !strstr(line, "\"ph\":\"X\"")) continue;
    ev *e = &evs[n++];
    const char *q = nm + 9, *end = strchr(q, '"');
    snprintf(e->name, sizeof e->name, "%.*s", (int)(end - q), q);
    e->tid = tid;
    e->ts = atof(ts + 5);
    e->dur = atof(du + 6);
  }
  fclose(tf);
  unlink(path);
  assert_true(n > 0);
  /* Compute firings of the same device that start while one of its
   * gradient all-reduces (deferred boxing firings) is in flight. */
  int overlaps = 0, collectives = 0;
  for (int i = 0; i < n; i++) {
    const ev *c = &evs[i];
    if (!strstr(c->name, ".boxing") || c->tid < 0 || c->tid >= 64 ||
        compute[c->tid] != 0)
      continue;
    collectives++;
    for (int j = 0; j < n; j++) {
      const ev *k = &evs[j];
      if (k->tid >= 0 && k->tid < 64 && compute[k->tid] == 1 &&
          dev_of[k->tid] == dev_of[c->tid] && k->ts > c->ts &&
          k->ts < c->ts + c->dur)
        overlaps++;
    }
  }
  printf("  %d events, %d collective firings, %d compute firings of the same "
         "device inside them\n",
         n, collectives, overlaps);
  assert_true(collectives > 0);
  assert_true(overlaps > 0);
}

/* Weights kept on one device of the devices that read them: a product data
 * parallel on cpu:0-1 reads w1 from cpu:0 and w2 from cpu:1 (broadcast to
 * both), and their gradients are summed onto their device. Each weight's
 * broadcast has a sending member, which reads the weight, and a receiving
 * one, which reads only the step's tick; the weight has one version more
 * than the steps (its first), so both members must be gated by the tick,
 * or the sender sends the last version to a receiver that never comes and
 * sl_session_finish waits forever. Trains as the interpreter does (the
 * loss and both weights after every step), then finishes with nothing
 * left over. */
static void test_weights_on_one_device(void **state) {
  uint64_t seed = st_seed(23, "weights on one device");
  for (int steps = 1; steps <= 4; steps += 3) {
    sl_graph *g = st_graph("cpu:0-1");
    sl_shape xs = SL_SHAPE(8, 6), ys = SL_SHAPE(8, 3);
    sl_shape w1s = SL_SHAPE(6, 5), w2s = SL_SHAPE(5, 3);
    sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
    sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, NULL, "S(0)");
    sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                               sl_init_normal(0, 0.5, 3), "cpu:0", "B");
    sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                               sl_init_normal(0, 0.5, 4), "cpu:1", "B");
    sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
    sl_tensor loss = sl_mse_loss(sl_matmul(h, w2, false, false), y);
    assert_int_equal(sl_fetch(w1, "w1_out"), SL_OK);
    assert_int_equal(sl_fetch(w2, "w2_out"), SL_OK);
    sl_optimizer opt = SGD;
    assert_int_equal(sl_minimize(loss, &opt), SL_OK);
    assert_int_equal(sl_fetch(loss, "loss"), SL_OK);
    st_run_vs_interp(g, steps, 1e-5, seed, 7, NULL);
    sl_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_layouts),
      cmocka_unit_test(test_steps_and_no_run_ahead),
      cmocka_unit_test(test_trace_shows_overlap),
      cmocka_unit_test(test_weights_on_one_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
