/* The engines behind ex_run agree on what a fetch returns: a variable's
 * value after the step's update, a split value assembled, a partial value
 * reduced — the sharded engine on 1-4 devices against the interpreter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inv.h"

enum { N = 7 };

/* w [N] trained towards t by SGD on mean((w - t)^2); fetches w, the loss
 * (partial when w is split) and 2w (split like w). */
static sl_graph *rig(const char *placement, const char *sbp) {
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(sl_graph_set_default_placement(g, placement));
  sl_shape s = SL_SHAPE(N);
  sl_tensor w = sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_uniform(-1, 1, 5),
                            NULL, sbp);
  sl_tensor t = sl_input(g, "t", &s, SL_DTYPE_F32, NULL, sbp);
  sl_tensor loss = sl_mse_loss(w, t);
  sl_optimizer opt = sl_optimizer_sgd(0.25, 0);
  INV_OK(sl_minimize(loss, &opt));
  INV_OK(sl_fetch(loss, "loss"));
  INV_OK(sl_fetch(w, "w_out"));
  INV_OK(sl_fetch(sl_mul_scalar(w, 2), "w2"));
  return g;
}

/* The rig on `placement` under opts o, its target fed. */
static ex_run *open_rig(const char *placement, const char *sbp,
                        const ex_run_opts *o, sl_graph **g) {
  *g = rig(placement, sbp);
  ex_run *r;
  INV_OK(ex_run_create(*g, o, &r));
  float t[N];
  for (int i = 0; i < N; i++)
    t[i] = 0.25f * (float)i - 0.5f;
  INV_OK(ex_run_feed(r, "t", t, sizeof t));
  return r;
}

static void run3(const char *placement, const char *sbp, ex_engine e, float *w,
                 float *w2, float *loss) {
  sl_graph *g;
  ex_run_opts o = {.engine = e, .check_replicas = e == EX_ENGINE_SHARDED};
  ex_run *r = open_rig(placement, sbp, &o, &g);
  for (int s = 0; s < 3; s++) {
    INV_OK(ex_run_step(r));
    INV_OK(ex_run_fetch(r, "w_out", w + s * N, N * sizeof *w));
    INV_OK(ex_run_fetch(r, "w2", w2 + s * N, N * sizeof *w2));
    INV_OK(ex_run_fetch(r, "loss", loss + s, sizeof *loss));
  }
  ex_run_destroy(r);
  sl_graph_destroy(g);
}

static void test_fetch_semantics(void **state) {
  float rw[3 * N], rw2[3 * N], rl[3];
  run3("cpu:0", "B", EX_ENGINE_INTERP, rw, rw2, rl);
  /* After step 0's update w moved towards t: the fetched w is the updated
   * one, the fetched 2w the step's (pre-update) value. */
  assert_true(fabsf(rw2[0] - 2 * rw[0]) > 1e-6f);
  const char *layouts[][2] = {{"cpu:0", "B"},
                              {"cpu:0-1", "S(0)"},
                              {"cpu:0-2", "S(0)"},
                              {"cpu:0-3", "S(0)"},
                              {"cpu:0-2", "B"}};
  ex_engine engines[2] = {EX_ENGINE_SHARDED, EX_ENGINE_SESSION};
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0] * 2; k++) {
    size_t i = k % (sizeof layouts / sizeof layouts[0]);
    ex_engine e = engines[k / (sizeof layouts / sizeof layouts[0])];
    float w[3 * N], w2[3 * N], l[3];
    run3(layouts[i][0], layouts[i][1], e, w, w2, l);
    printf("%s %s (%s): loss %.7f %.7f %.7f (interpreter %.7f %.7f %.7f)\n",
           layouts[i][0], layouts[i][1], ex_engine_name(e), (double)l[0],
           (double)l[1], (double)l[2], (double)rl[0], (double)rl[1],
           (double)rl[2]);
    /* Elementwise updates of split shards are exact; the loss is a sum. */
    assert_memory_equal(w, rw, sizeof w);
    assert_memory_equal(w2, rw2, sizeof w2);
    assert_true(inv_max_rel(l, rl, 3) <= 1e-6);
  }
}

/* The hook sees the session between steps: nothing started past the
 * step it is called after. */
static sl_status hook_between_steps(void *ctx, int64_t steps_done) {
  ex_run *r = ctx;
  int64_t at = sl_session_steps(ex_run_session(r));
  if (at != steps_done)
    return sl_set_error(SL_EINTERNAL, "hook after step %lld: %lld started",
                        (long long)steps_done - 1, (long long)at);
  printf("hook after %lld steps\n", (long long)steps_done);
  return SL_OK;
}

/* The training loop (ex_train_range) of the session engine runs steps
 * ahead of the losses it reads: twice on one run (3 steps then 40, as the
 * benchmarks warm up: the second loop's step 0 is the session's step 3),
 * then 20 more from step 43 with a hook every 5 steps, it gives the
 * losses of one step at a time (--profile) bit for bit, and the
 * interpreter's. */
static void train_loop(ex_engine e, bool profile, float *losses) {
  sl_graph *g;
  ex_run_opts o = {.engine = e, .profile = profile};
  ex_run *r = open_rig("cpu:0-1", "S(0)", &o, &g);
  INV_OK(ex_train(r, 3, 1, "loss", NULL, losses, NULL));
  ex_train_result res;
  INV_OK(ex_train(r, 40, 1, "loss", NULL, losses + 3, &res));
  assert_int_equal(res.timed_steps, 39);
  bool session = e == EX_ENGINE_SESSION;
  INV_OK(ex_train_range(r, 43, 63, 1, "loss", NULL, losses + 43, NULL,
                        session ? hook_between_steps : NULL, r, 5));
  ex_run_destroy(r);
  sl_graph_destroy(g);
}

static void test_training_loop(void **state) {
  (void)state;
  float ref[63], sync[63], ahead[63];
  train_loop(EX_ENGINE_INTERP, false, ref);
  train_loop(EX_ENGINE_SESSION, true, sync);
  train_loop(EX_ENGINE_SESSION, false, ahead);
  assert_memory_equal(ahead, sync, sizeof ahead);
  assert_true(inv_max_rel(ahead, ref, 63) <= 1e-6);
}

/* --trace writes a Chrome trace: every op of every rank, named rows. */
static void test_trace(void **state) {
  char path[] = "/tmp/sluice_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  sl_graph *g = rig("cpu:0-2", "S(0)");
  ex_run_opts o = {.engine = EX_ENGINE_SHARDED, .trace_path = path};
  ex_run *r;
  INV_OK(ex_run_create(g, &o, &r));
  float t[N] = {0};
  INV_OK(ex_run_feed(r, "t", t, sizeof t));
  INV_OK(ex_run_step(r));
  INV_OK(ex_run_step(r));
  ex_run_destroy(r);
  sl_graph_destroy(g);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(path);
  assert_true(
      strncmp(buf, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 37) == 0);
  assert_non_null(strstr(buf, "\"cat\":\"sgd_update\""));
  assert_non_null(strstr(buf, "\"tid\":2,"));
  assert_non_null(strstr(buf, "\"args\":{\"name\":\"rank 2\"}"));
  assert_non_null(strstr(buf, "\"args\":{\"step\":1}"));
  assert_true(n > 4 && strcmp(buf + n - 4, "\n]}\n") == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fetch_semantics),
      cmocka_unit_test(test_trace),
      cmocka_unit_test(test_training_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
