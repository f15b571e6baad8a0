/* The public API the CLI and the examples are built on, beyond sessions:
 * reference runs (<sluice/reference.h>), the cluster's environment,
 * master and daemon configs (<sluice/cluster.h>) and errors reported the
 * way sluice reports them (sl_set_error, sl_add_error_context). The daemon
 * itself runs in the CLI's tests (`sluice daemon` is built on it). */
#include <math.h>

#include <sluice/cluster.h>
#include <sluice/reference.h>

#include "session_helpers.h"

/* A least-squares fit, data parallel on two CPU devices. */
static sl_graph *fit(void) {
  sl_graph *g = st_graph("cpu:0-1");
  sl_shape xs = SL_SHAPE(8, 4), ts = SL_SHAPE(8, 2), ws = SL_SHAPE(4, 2);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor t = sl_input(g, "t", &ts, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 7), NULL, NULL);
  sl_tensor loss = sl_mse_loss(sl_matmul(x, w, false, false), t);
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  st_check_graph(g);
  return g;
}

typedef struct hook_log {
  int calls, boxing, ranks_seen;
  bool matmul;
} hook_log;

static void on_node(void *ctx, const char *node, const char *kind, int rank,
                    uint64_t t0, uint64_t t1) {
  hook_log *h = ctx;
  assert_non_null(node);
  assert_true(t1 >= t0);
  h->calls++;
  if (strcmp(kind, "boxing") == 0) {
    assert_int_equal(rank, -1);
    h->boxing++;
  } else {
    assert_true(rank == 0 || rank == 1);
    h->ranks_seen |= 1 << rank;
  }
  if (strcmp(kind, "matmul") == 0) h->matmul = true;
}

/* Three steps of kind k (and the session's for NULL): the losses. */
static void train(sl_graph *g, const sl_reference_config *cfg, float *loss) {
  float x[32], t[16];
  for (int i = 0; i < 32; i++)
    x[i] = (float)((i * 7) % 5) - 2.0f;
  for (int i = 0; i < 16; i++)
    t[i] = (float)((i * 3) % 4) - 1.5f;
  sl_reference *r = NULL;
  sl_session *s = NULL;
  if (cfg)
    assert_int_equal(sl_reference_create(g, cfg, &r), SL_OK);
  else
    assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  for (int step = 0; step < 3; step++) {
    if (r) {
      assert_int_equal(sl_reference_feed(r, "x", x, sizeof x), SL_OK);
      assert_int_equal(sl_reference_feed(r, "t", t, sizeof t), SL_OK);
      assert_int_equal(sl_reference_step(r), SL_OK);
      assert_int_equal(sl_reference_fetch(r, "loss", &loss[step], 4), SL_OK);
    } else {
      assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
      assert_int_equal(sl_session_feed(s, "t", t, sizeof t), SL_OK);
      assert_int_equal(sl_session_run(s, 1), SL_OK);
      assert_int_equal(sl_session_fetch(s, "loss", &loss[step], 4), SL_OK);
    }
  }
  sl_reference_destroy(r);
  if (s) {
    assert_int_equal(sl_session_finish(s), SL_OK);
    sl_session_destroy(s);
  }
}

/* The sharded run gives the session's bits (same kernels, same shards,
 * members reduced in the same order); the logical one agrees closely. */
static void test_reference_runs(void **state) {
  (void)state;
  sl_graph *g = fit();
  float sess[3], sharded[3], logical[3];
  train(g, NULL, sess);
  hook_log h = {0};
  sl_reference_config cfg =
      SL_REFERENCE_CONFIG(.kind = SL_REFERENCE_SHARDED, .check_replicas = true,
                          .hook = on_node, .hook_ctx = &h);
  train(g, &cfg, sharded);
  cfg = SL_REFERENCE_CONFIG(.kind = SL_REFERENCE_LOGICAL);
  train(g, &cfg, logical);
  for (int i = 0; i < 3; i++) {
    printf("step %d: session %.7f sharded %.7f logical %.7f\n", i,
           (double)sess[i], (double)sharded[i], (double)logical[i]);
    assert_memory_equal(&sess[i], &sharded[i], sizeof(float));
    assert_true(fabsf(logical[i] - sess[i]) <= 1e-5f * fabsf(sess[i]) + 1e-6f);
  }
  assert_true(sess[2] < sess[0]);
  assert_true(h.matmul && h.boxing > 0 && h.ranks_seen == 3);
  sl_graph_destroy(g);
}

static void test_reference_errors(void **state) {
  (void)state;
  sl_graph *g = fit();
  sl_reference *r = NULL;
  sl_reference_config dflt = sl_reference_config_default();
  assert_int_equal(dflt.size, sizeof dflt);
  assert_int_equal(dflt.kind, SL_REFERENCE_SHARDED);
  assert_true(sl_master_config_default().size == sizeof(sl_master_config));
  assert_true(sl_daemon_config_default().nnodes == 1);
  sl_reference_config cfg = SL_REFERENCE_CONFIG(.kind = 7);
  assert_int_equal(sl_reference_create(g, &cfg, &r), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "unknown kind 7"));
  cfg = SL_REFERENCE_CONFIG(.kind = SL_REFERENCE_SHARDED);
  cfg.size = 0;
  assert_int_equal(sl_reference_create(g, &cfg, &r), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "SL_REFERENCE_CONFIG"));
  assert_null(r);
  assert_int_equal(sl_reference_create(g, NULL, &r), SL_OK);
  float x[32] = {0}, l;
  assert_int_equal(sl_reference_feed(r, "x", x, 4), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "'x'"));
  assert_int_equal(sl_reference_feed(r, "nope", x, 4), SL_ENOTFOUND);
  assert_int_equal(sl_reference_fetch(r, "loss", &l, 4), SL_ESTATE);
  assert_int_equal(sl_reference_step(r), SL_ESTATE); /* x never fed */
  sl_reference_destroy(r);
  sl_graph_destroy(g);
}

static void test_errors_of_programs(void **state) {
  (void)state;
  assert_int_equal(sl_set_error(SL_EIO, "file '%s': gone", "a.npy"), SL_EIO);
  assert_string_equal(sl_last_error(), "file 'a.npy': gone");
  assert_int_equal(sl_add_error_context(SL_EIO, "step %d: ", 3), SL_EIO);
  assert_string_equal(sl_last_error(), "step 3: file 'a.npy': gone");
  sl_clear_error();
  assert_string_equal(sl_last_error(), "");
}

static void test_cluster_env(void **state) {
  (void)state;
  char *env[] = {"SLUICE_MASTER=127.0.0.1:1234", "SLUICE_NODE_RANK=1",
                 "SLUICE_NNODES=2", "SLUICE_TOKEN=secret", NULL};
  sl_cluster_env e;
  assert_int_equal(sl_cluster_env_read(env, &e), SL_OK);
  assert_string_equal(e.master, "127.0.0.1:1234");
  assert_int_equal(e.node_rank, 1);
  assert_int_equal(e.nnodes, 2);
  assert_string_equal(e.token, "secret");
  assert_string_equal(e.bind, "127.0.0.1");
  assert_non_null(e.master_from);
  sl_cluster_env_free(&e);
  assert_null(e.master);
  char *unset[] = {"SLUICE_NNODES=2", NULL};
  assert_int_equal(sl_cluster_env_read(unset, &e), SL_EINVAL);
  assert_null(e.master);
  char *no_rank[] = {"SLUICE_MASTER=127.0.0.1:1234", NULL};
  assert_int_equal(sl_cluster_env_read(no_rank, &e), SL_OK);
  assert_int_equal(e.node_rank, -1);
  assert_int_equal(e.nnodes, 0);
  sl_cluster_env_free(&e);
}

static void test_master_and_daemon_configs(void **state) {
  (void)state;
  sl_master *m = NULL;
  sl_master_config mc =
      SL_MASTER_CONFIG(.listen = "127.0.0.1:0", .nnodes = 1, .token = "secret");
  assert_int_equal(sl_master_create(&mc, &m), SL_OK);
  assert_true(sl_master_port(m) > 0);
  sl_master_destroy(m);
  mc.size = 0;
  assert_int_equal(sl_master_create(&mc, &m), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "SL_MASTER_CONFIG"));
  sl_daemon *d = NULL;
  sl_daemon_config dc =
      SL_DAEMON_CONFIG(.master = "127.0.0.1:1", .node_rank = 2, .nnodes = 2,
                       .devices = "cpu:1", .token = "secret");
  assert_int_equal(sl_daemon_create(&dc, &d), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "node rank 2 of 2 nodes"));
  dc.node_rank = 0;
  dc.token = "";
  assert_int_equal(sl_daemon_create(&dc, &d), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "a token"));
  dc.token = "secret";
  assert_int_equal(sl_daemon_create(&dc, &d), SL_OK);
  sl_daemon_stop(d);
  sl_daemon_destroy(d);
  sl_daemon_stop(NULL);
  sl_daemon_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_runs),
      cmocka_unit_test(test_reference_errors),
      cmocka_unit_test(test_errors_of_programs),
      cmocka_unit_test(test_cluster_env),
      cmocka_unit_test(test_master_and_daemon_configs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
