/* Remote sessions against daemons in this process: a master on 127.0.0.1,
 * two daemon threads (each its own control-plane client and data-plane
 * endpoint, serving jobs with sl__daemon_serve), and the program's session
 * with the master in its config. The losses and weights equal the embedded
 * session's bit for bit; a kernel failing on a daemon fails the program
 * naming the node and actor and the daemons serve the next job. Models
 * whose boxing spans the nodes (data, tensor and both parallel over
 * cpu:0-1/0-1) train to the embedded session's losses on 4 devices; a
 * kernel failing on one node while the other waits for it inside a
 * collective between them fails the job (no hang) and the next job runs.
 * On the fake CUDA device, all-reduces, all-gathers and reduce-scatters
 * between the nodes stay on the devices. */
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#include <sluice/build.h>
#include <sluice/checkpoint.h>

#include "daemon.h"
#include "fake_cuda.h"
#include "session_helpers.h"

#define TOKEN "daemon-test-token"
#define NNODES 2
#define LONG_MS 60000u

typedef struct dthread {
  int rank;
  sl__cp_server *master;
  atomic_bool stop;
  pthread_t th;
  sl_status st;
  pthread_mutex_t log_m; /* the tests read the log while it grows */
  char log[32768];
  size_t log_len;
  _Atomic(sl__net_coll *) nc; /* while it serves: its collectives between
                                 nodes (the tests read their counts) */
} dthread;

/* The daemon's log FILE: appends to d->log (truncating at its end). */
static ssize_t log_write(void *cookie, const char *buf, size_t n) {
  dthread *d = cookie;
  pthread_mutex_lock(&d->log_m);
  size_t room = sizeof d->log - 1 - d->log_len;
  size_t k = n < room ? n : room;
  memcpy(d->log + d->log_len, buf, k);
  d->log_len += k;
  pthread_mutex_unlock(&d->log_m);
  return (ssize_t)n;
}

static void *daemon_main(void *arg) {
  dthread *d = arg;
  sl__dp_config dc = {0};
  dc.node = (uint32_t)d->rank;
  dc.nnodes = NNODES + 1;
  dc.token = TOKEN;
  dc.token_len = strlen(TOKEN);
  sl__dp_endpoint *ep = NULL;
  d->st = sl__dp_endpoint_create(&dc, &ep);
  if (d->st != SL_OK) return NULL;
  char master[64], data[64];
  snprintf(master, sizeof master, "127.0.0.1:%d",
           sl__cp_server_port(d->master));
  snprintf(data, sizeof data, "127.0.0.1:%u", sl__dp_endpoint_port(ep));
  sl__cp_client_opts co = {0};
  co.master = master;
  co.token = TOKEN;
  co.role = SL__CP_NODE;
  co.node_rank = d->rank;
  co.devices = "cpu:0-1";
  co.data_addr = data;
  sl__cp_client *cp = NULL;
  d->st = sl__cp_client_connect(&co, LONG_MS, &cp);
  if (d->st == SL_OK) {
    FILE *log =
        fopencookie(d, "w", (cookie_io_functions_t){.write = log_write});
    setvbuf(log, NULL, _IONBF, 0);
    sl__net_coll *nc = NULL;
    /* every all-reduce between the daemons through their shared registers,
     * however small (test_shared_registers) */
    sl__net_coll_config nc_cfg = {.shared_min_bytes = 1};
    d->st = sl__net_coll_create(ep, &nc_cfg, &nc);
    atomic_store(&d->nc, nc);
    sl__daemon_opts o = {cp, ep, nc, &d->stop, 0, log};
    if (d->st == SL_OK) d->st = sl__daemon_serve(&o);
    atomic_store(&d->nc, NULL);
    fclose(log);
    sl__cp_client_destroy(cp);
    sl__dp_endpoint_destroy(ep);
    sl__net_coll_destroy(nc);
    return NULL;
  }
  sl__cp_client_destroy(cp);
  sl__dp_endpoint_destroy(ep);
  return NULL;
}

static char g_master[64]; /* the master's "host:port" (setup) */

typedef struct cluster {
  sl__cp_server *master;
  dthread d[NNODES];
} cluster;

static int setup(void **state) {
  cluster *c = calloc(1, sizeof *c);
  sl__cp_server_opts so = {0};
  so.nnodes = NNODES;
  so.token = TOKEN;
  so.heartbeat_timeout_ms = 2000;
  if (sl__cp_server_create(&so, &c->master) != SL_OK) return -1;
  for (int r = 0; r < NNODES; r++) {
    c->d[r].rank = r;
    c->d[r].master = c->master;
    pthread_mutex_init(&c->d[r].log_m, NULL);
    atomic_init(&c->d[r].stop, false);
    pthread_create(&c->d[r].th, NULL, daemon_main, &c->d[r]);
  }
  snprintf(g_master, sizeof g_master, "127.0.0.1:%d",
           sl__cp_server_port(c->master));
  *state = c;
  return 0;
}

static int teardown(void **state) {
  cluster *c = *state;
  for (int r = 0; r < NNODES; r++)
    atomic_store(&c->d[r].stop, true);
  for (int r = 0; r < NNODES; r++) {
    pthread_join(c->d[r].th, NULL);
    printf("daemon %d (%s):\n%s", r, sl_status_str(c->d[r].st), c->d[r].log);
    pthread_mutex_destroy(&c->d[r].log_m);
  }
  sl__cp_server_destroy(c->master);
  free(c);
  return 0;
}

/* A remote session is told its master and token in its config: the test
 * never writes the environment, which the daemon threads (and gRPC's) read
 * at any time. */
static sl_session_config config(bool remote) {
  sl_session_config c = sl_session_config_default();
  if (remote) {
    c.master = g_master;
    c.token = TOKEN;
  }
  return c;
}

/* Two models, one on each node's two devices (data parallel inside a
 * node): node 0's trains, node 1's evaluates. */
static sl_graph *two_models(bool two_nodes) {
  sl_graph *g = st_graph(NULL);
  for (int k = 0; k < 2; k++) {
    char pl[32], nx[8], ny[8], nw[8], nl[8];
    snprintf(pl, sizeof pl, "cpu:%d/0-1", two_nodes ? k : 0);
    snprintf(nx, sizeof nx, "x%d", k);
    snprintf(ny, sizeof ny, "y%d", k);
    snprintf(nw, sizeof nw, "w%d", k);
    snprintf(nl, sizeof nl, "loss%d", k);
    sl_shape xs = SL_SHAPE(8, 6), ys = SL_SHAPE(8), ws = SL_SHAPE(6, 5);
    sl_tensor x = sl_input(g, nx, &xs, SL_DTYPE_F32, pl, "S(0)");
    sl_tensor y = sl_input(g, ny, &ys, SL_DTYPE_I32, pl, "S(0)");
    sl_tensor w = sl_variable(g, nw, &ws, SL_DTYPE_F32,
                              sl_init_uniform(-1, 1, 7 + (uint64_t)k), pl, "B");
    sl_tensor loss = sl_cross_entropy(sl_matmul(x, w, false, false), y);
    if (k == 0) { /* node 1's model only evaluates (one minimize) */
      sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
      sl_minimize(loss, &opt);
    }
    sl_fetch(loss, nl);
    char nwo[8];
    snprintf(nwo, sizeof nwo, "w%d_out", k);
    sl_fetch(w, nwo);
  }
  st_check_graph(g);
  return g;
}

static void feed_step(sl_session *s, int step, bool bad) {
  float x[48];
  int32_t y[8];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 48; i++)
      x[i] = (float)((i * 7 + step * 3 + k) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8; i++)
      y[i] = (i + step + k) % 5;
    if (bad && k == 1 && step == 2) y[3] = 99;
    char nx[8], ny[8];
    snprintf(nx, sizeof nx, "x%d", k);
    snprintf(ny, sizeof ny, "y%d", k);
    assert_int_equal(sl_session_feed(s, nx, x, sizeof x), SL_OK);
    assert_int_equal(sl_session_feed(s, ny, y, sizeof y), SL_OK);
  }
}

#define STEPS 5

static sl_status fetch_losses(sl_session *s, int step, float *losses) {
  sl_status st = SL_OK;
  for (int k = 0; k < 2 && st == SL_OK; k++) {
    char nl[8];
    snprintf(nl, sizeof nl, "loss%d", k);
    st = sl_session_fetch_step(s, nl, step, &losses[step * 2 + k],
                               sizeof(float));
  }
  return st;
}

/* Losses of every step and the weights after the last; with ahead, step
 * k + 1 is started (its batch fed while step k runs) before step k's
 * losses are read. */
static sl_status train(bool remote, bool bad, bool ahead, float *losses,
                       float *w) {
  sl_graph *g = two_models(remote); /* embedded: both on node 0 */
  sl_session *s = NULL;
  sl_session_config cfg = config(remote);
  sl_status st = sl_session_create(g, &cfg, &s);
  if (st != SL_OK) fail_msg("create: %s", sl_last_error());
  /* The whole job's memory (embedded: both models on cpu:0-1 of node 0),
   * also where this process runs only its part. */
  int devices = remote ? 4 : 2;
  assert_int_equal(sl_session_memory_device_count(s), devices);
  sl_memory_stats ms;
  assert_int_equal(sl_session_get_memory(s, devices - 1, &ms), SL_OK);
  assert_true(ms.allocated > 0);
  if (ahead) {
    feed_step(s, 0, bad);
    st = sl_session_start(s, 1);
  }
  for (int step = 0; step < STEPS && st == SL_OK; step++) {
    if (!ahead) {
      feed_step(s, step, bad);
      st = sl_session_run(s, 1);
    } else if (step + 1 < STEPS) {
      feed_step(s, step + 1, bad);
      st = sl_session_start(s, 1);
    }
    if (st == SL_OK) st = fetch_losses(s, step, losses);
  }
  if (ahead && st == SL_OK) st = sl_session_wait(s);
  for (int k = 0; k < 2 && st == SL_OK; k++) {
    char nw[8];
    snprintf(nw, sizeof nw, "w%d_out", k);
    st = sl_session_fetch(s, nw, w + 30 * k, 30 * sizeof(float));
  }
  char msg[1400];
  snprintf(msg, sizeof msg, "%s", sl_last_error());
  sl_status fst = sl_session_finish(s);
  if (st == SL_OK)
    st = fst;
  else
    sl__fail(st, "%s", msg);
  snprintf(msg, sizeof msg, "%s", sl_last_error());
  sl_session_destroy(s);
  sl_graph_destroy(g);
  if (st != SL_OK) sl__fail(st, "%s", msg);
  return st;
}

static void test_losses_equal_embedded(void **state) {
  (void)state;
  float la[STEPS * 2], lb[STEPS * 2], wa[60], wb[60];
  if (train(false, false, false, la, wa) != SL_OK)
    fail_msg("embedded: %s", sl_last_error());
  /* The daemons serve job after job; the third runs ahead of the program
   * (sl_session_start). */
  for (int rep = 0; rep < 3; rep++) {
    if (train(true, false, rep == 2, lb, wb) != SL_OK)
      fail_msg("remote: %s", sl_last_error());
    for (int i = 0; i < STEPS * 2; i++)
      printf("loss[%d] embedded %.7f remote %.7f\n", i, la[i], lb[i]);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(wa, wb, sizeof wa);
  }
}

static void test_kernel_failure_names_node(void **state) {
  (void)state;
  float l[STEPS * 2], w[60];
  sl_status st = train(true, true, false, l, w);
  assert_int_not_equal(st, SL_OK);
  printf("failure: %s: %s\n", sl_status_str(st), sl_last_error());
  /* The actor that failed, on node 1, with the kernel's reason or the
   * node that reported it. */
  assert_non_null(strstr(sl_last_error(), "sparse_cross_entropy"));
  assert_non_null(strstr(sl_last_error(), "node 1"));
  /* And the next job runs. */
  if (train(true, false, false, l, w) != SL_OK)
    fail_msg("after a failure: %s", sl_last_error());
}

/* One model on `pl` (4 ranks): 8x6 inputs, a 6x5 weight (from tensor
 * "w0" of file w_from when given), cross-entropy, SGD; the layout picks
 * the SBP of the input and the weight. */
static sl_graph *one_model_from(const char *pl, const char *layout,
                                const sl_optimizer *opt, const char *w_from) {
  sl_graph *g = st_graph(pl);
  bool hybrid = !strcmp(layout, "hybrid"), tp = !strcmp(layout, "tp");
  const char *xs_sbp = hybrid ? "(S(0),B)" : tp ? "B" : "S(0)";
  const char *w_sbp = hybrid ? "(B,S(1))" : tp ? "S(1)" : "B";
  sl_shape xs = SL_SHAPE(8, 6), ys = SL_SHAPE(8), ws = SL_SHAPE(6, 5);
  sl_tensor x = sl_input(g, "x0", &xs, SL_DTYPE_F32, NULL, xs_sbp);
  sl_tensor y = sl_input(g, "y0", &ys, SL_DTYPE_I32, NULL, xs_sbp);
  sl_tensor w = sl_variable(g, "w0", &ws, SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 11), NULL, w_sbp);
  if (w_from) w = sl_variable_load(w, w_from, "w0");
  sl_tensor loss = sl_cross_entropy(sl_matmul(x, w, false, false), y);
  sl_minimize(loss, opt);
  sl_fetch(loss, "loss0");
  sl_fetch(sl_to_global(w, NULL, hybrid ? "(B,B)" : "B"), "w0_out");
  st_check_graph(g);
  return g;
}

static sl_graph *one_model_opt(const char *pl, const char *layout,
                               const sl_optimizer *opt) {
  return one_model_from(pl, layout, opt, NULL);
}

static sl_graph *one_model(const char *pl, const char *layout) {
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  return one_model_opt(pl, layout, &opt);
}

/* Step `step`'s batch of one_model, and its loss. */
static float one_step(sl_session *s, int step) {
  float x[48], loss = NAN;
  int32_t y[8];
  for (int i = 0; i < 48; i++)
    x[i] = (float)((i * 7 + step * 3) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < 8; i++)
    y[i] = (i + step) % 5;
  if (sl_session_feed(s, "x0", x, sizeof x) != SL_OK ||
      sl_session_feed(s, "y0", y, sizeof y) != SL_OK ||
      sl_session_run(s, 1) != SL_OK ||
      sl_session_fetch(s, "loss0", &loss, sizeof loss) != SL_OK)
    fail_msg("step %d: %s", step, sl_last_error());
  return loss;
}

static sl_status train_one(const char *pl, const char *layout, bool remote,
                           bool bad, float *losses, float *w) {
  sl_graph *g = one_model(pl, layout);
  sl_session *s = NULL;
  sl_session_config cfg = config(remote);
  sl_status st = sl_session_create(g, &cfg, &s);
  if (st != SL_OK) {
    sl_graph_destroy(g);
    return st;
  }
  for (int step = 0; step < STEPS && st == SL_OK; step++) {
    float x[48];
    int32_t y[8];
    for (int i = 0; i < 48; i++)
      x[i] = (float)((i * 7 + step * 3) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8; i++)
      y[i] = (i + step) % 5;
    if (bad && step == 2) y[7] = 99; /* the last rank's shard: node 1 */
    st = sl_session_feed(s, "x0", x, sizeof x);
    if (st == SL_OK) st = sl_session_feed(s, "y0", y, sizeof y);
    if (st == SL_OK) st = sl_session_run(s, 1);
    if (st == SL_OK)
      st = sl_session_fetch(s, "loss0", &losses[step], sizeof(float));
  }
  if (st == SL_OK) st = sl_session_fetch(s, "w0_out", w, 30 * sizeof(float));
  char msg[1400];
  snprintf(msg, sizeof msg, "%s", sl_last_error());
  sl_status fst = sl_session_finish(s);
  if (st == SL_OK)
    st = fst;
  else
    sl__fail(st, "%s", msg);
  snprintf(msg, sizeof msg, "%s", sl_last_error());
  sl_session_destroy(s);
  sl_graph_destroy(g);
  if (st != SL_OK) sl__fail(st, "%s", msg);
  return st;
}

static void close_to(const char *what, const float *a, const float *b, int n) {
  for (int i = 0; i < n; i++) {
    double tol = 1e-5 * (1.0 + fabs((double)a[i]));
    if (fabs((double)a[i] - (double)b[i]) > tol)
      fail_msg("%s[%d]: embedded %.9g, remote %.9g", what, i, a[i], b[i]);
  }
}

/* The layout trains on the daemons (placement rem) as it does embedded
 * (placement emb): the same losses and weights. */
static void same_as_embedded(const char *emb, const char *rem,
                             const char *layout) {
  float la[STEPS], lb[STEPS], wa[30], wb[30];
  if (train_one(emb, layout, false, false, la, wa) != SL_OK)
    fail_msg("%s embedded on %s: %s", layout, emb, sl_last_error());
  if (train_one(rem, layout, true, false, lb, wb) != SL_OK)
    fail_msg("%s remote on %s: %s", layout, rem, sl_last_error());
  for (int k = 0; k < STEPS; k++)
    printf("%s loss[%d] embedded %.7f remote %.7f\n", layout, k, la[k], lb[k]);
  close_to("loss", la, lb, STEPS);
  close_to("w", wa, wb, 30);
}

static void test_boxing_across_nodes(void **state) {
  (void)state;
  static const char *const layouts[] = {"dp", "tp", "hybrid"};
  for (int i = 0; i < 3; i++) {
    const char *emb =
        !strcmp(layouts[i], "hybrid") ? "cpu:0-3[2,2]" : "cpu:0-3";
    const char *rem =
        !strcmp(layouts[i], "hybrid") ? "cpu:0-1/0-1[2,2]" : "cpu:0-1/0-1";
    same_as_embedded(emb, rem, layouts[i]);
  }
}

/* A scratch directory with two paths in it, for checkpoints. */
typedef struct scratch {
  char dir[64], a[300], b[300];
} scratch;

static void scratch_make(scratch *t, const char *a, const char *b) {
  snprintf(t->dir, sizeof t->dir, "/tmp/sluice_daemon_XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->a, sizeof t->a, "%s/%s", t->dir, a);
  snprintf(t->b, sizeof t->b, "%s/%s", t->dir, b);
}

static void scratch_remove(const scratch *t) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", t->dir);
  assert_int_equal(system(cmd), 0);
}

/* Checkpoints across daemons: a save in the middle of a remote run (every
 * daemon writes its node's file, the run goes on undisturbed), restored
 * embedded on one device, saved there, and restored on the daemons with
 * another layout: the losses follow a straight embedded run throughout.
 * Then a restore in the middle of a remote run starts a new job at the
 * saved step. */
static void test_checkpoints_across_daemons(void **state) {
  (void)state;
  sl_optimizer adam = sl_optimizer_adam(0.05);
  enum { N = 12 };
  float want[N];
  sl_graph *g = one_model_opt("cpu:0-3", "tp", &adam);
  sl_session *s = NULL;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  for (int i = 0; i < N; i++)
    want[i] = one_step(s, i);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  scratch t;
  scratch_make(&t, "remote", "embedded");
  const char *d1 = t.a, *d2 = t.b;
  sl_session_config rc = config(true);
  /* remote tp: 4 steps, save, 3 more */
  g = one_model_opt("cpu:0-1/0-1", "tp", &adam);
  assert_int_equal(sl_session_create(g, &rc, &s), SL_OK);
  for (int i = 0; i < 7; i++) {
    if (i == 4 && sl_session_save(s, d1) != SL_OK)
      fail_msg("remote save: %s", sl_last_error());
    float l = one_step(s, i);
    assert_true(fabsf(l - want[i]) <= 1e-5f * (1 + fabsf(want[i])));
  }
  /* ... and a restore of that save in the middle of the run. */
  assert_int_equal(sl_session_restore(s, d1), SL_OK);
  assert_int_equal(sl_session_steps(s), 4);
  for (int i = 4; i < 6; i++) {
    float l = one_step(s, i);
    assert_true(fabsf(l - want[i]) <= 1e-5f * (1 + fabsf(want[i])));
  }
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  sl_checkpoint *ck = NULL;
  assert_int_equal(sl_checkpoint_open(d1, &ck), SL_OK);
  assert_int_equal(sl_checkpoint_step(ck), 4);
  sl_checkpoint_close(ck);
  /* embedded on one device from step 4, saved at step 8 */
  g = one_model_opt("cpu:0", "dp", &adam);
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  if (sl_session_restore(s, d1) != SL_OK)
    fail_msg("embedded restore: %s", sl_last_error());
  for (int i = 4; i < 8; i++) {
    float l = one_step(s, i);
    assert_true(fabsf(l - want[i]) <= 1e-4f * (1 + fabsf(want[i])));
  }
  assert_int_equal(sl_session_save(s, d2), SL_OK);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  /* remote dp from step 8 */
  g = one_model_opt("cpu:0-1/0-1", "dp", &adam);
  assert_int_equal(sl_session_create(g, &rc, &s), SL_OK);
  if (sl_session_restore(s, d2) != SL_OK)
    fail_msg("remote restore: %s", sl_last_error());
  assert_int_equal(sl_session_steps(s), 8);
  for (int i = 8; i < N; i++) {
    float l = one_step(s, i);
    printf("remote dp after restore: step %d loss %.7f (straight %.7f)\n", i, l,
           want[i]);
    assert_true(fabsf(l - want[i]) <= 1e-4f * (1 + fabsf(want[i])));
  }
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_destroy(s);
  sl_graph_destroy(g);
  scratch_remove(&t);
}

static bool near(float a, float b) {
  return fabsf(a - b) <= 1e-5f * (1 + fabsf(b));
}

/* Step `step`'s loss of an embedded and a remote session side by side
 * (dp over 4 devices of one node and over 2 nodes: the gradients' sums
 * differ in order, so in the last bits). */
static float both_step(sl_session *e, sl_session *r, int step) {
  float le = one_step(e, step), lr = one_step(r, step);
  printf("step %d: embedded %.7f remote %.7f\n", step, le, lr);
  fflush(stdout);
  assert_true(near(lr, le));
  return lr;
}

static void same_variable(sl_session *e, sl_session *r, const char *name) {
  float we[30], wr[30];
  if (sl_session_read_variable(e, name, we, sizeof we) != SL_OK ||
      sl_session_read_variable(r, name, wr, sizeof wr) != SL_OK)
    fail_msg("read of '%s': %s", name, sl_last_error());
  for (int i = 0; i < 30; i++)
    if (!near(wr[i], we[i]))
      fail_msg("'%s'[%d]: embedded %.9g remote %.9g", name, i, we[i], wr[i]);
}

/* Variables over daemons, against the same calls embedded (dp over two
 * nodes, Adam): a read of the weight and of Adam's state, a written
 * weight (the next job takes it, Adam's state carried over), a load of
 * weights, a background save restored embedded, and a failed step rolled
 * back; the losses stay bit for bit those of the embedded session. */
static void test_variables_across_daemons(void **state) {
  (void)state;
  sl_optimizer adam = sl_optimizer_adam(0.05);
  sl_graph *ge = one_model_opt("cpu:0-3", "dp", &adam);
  sl_graph *gr = one_model_opt("cpu:0-1/0-1", "dp", &adam);
  sl_session_config rc = config(true);
  sl_session *e = NULL, *r = NULL;
  assert_int_equal(sl_session_create(ge, NULL, &e), SL_OK);
  assert_int_equal(sl_session_create(gr, &rc, &r), SL_OK);
  scratch t;
  scratch_make(&t, "weights", "background");
  const char *dw = t.a, *db = t.b;
  int step = 0;
  for (; step < 3; step++)
    both_step(e, r, step);
  same_variable(e, r, "w0");
  same_variable(e, r, "w0.m");
  same_variable(e, r, "w0.v");
  assert_int_equal(sl_session_save(e, dw), SL_OK);
  /* a written weight: half of what it is */
  float w[30];
  assert_int_equal(sl_session_read_variable(r, "w0", w, sizeof w), SL_OK);
  for (int i = 0; i < 30; i++)
    w[i] *= 0.5f;
  assert_int_equal(sl_session_write_variable(e, "w0", w, sizeof w), SL_OK);
  assert_int_equal(sl_session_write_variable(r, "w0", w, sizeof w), SL_OK);
  for (; step < 6; step++)
    both_step(e, r, step);
  same_variable(e, r, "w0.m");
  /* a background save while two steps run, restored embedded below */
  if (sl_session_save_async(r, db) != SL_OK)
    fail_msg("background save: %s", sl_last_error());
  int64_t saved = sl_session_steps(r);
  float after[2];
  for (int k = 0; k < 2; k++, step++)
    after[k] = both_step(e, r, step);
  if (sl_session_save_wait(r) != SL_OK)
    fail_msg("background save: %s", sl_last_error());
  /* the weights saved at step 3, loaded into both */
  int32_t loaded_e = 0, loaded_r = 0;
  assert_int_equal(sl_session_load(e, dw, &loaded_e), SL_OK);
  assert_int_equal(sl_session_load(r, dw, &loaded_r), SL_OK);
  assert_int_equal(loaded_r, loaded_e);
  assert_int_equal(loaded_r, 1);
  /* exactly the saved bytes (and below, what a graph loading them starts
   * with on the daemons) */
  float we[30], wr[30], wl[30];
  assert_int_equal(sl_session_read_variable(e, "w0", we, sizeof we), SL_OK);
  assert_int_equal(sl_session_read_variable(r, "w0", wr, sizeof wr), SL_OK);
  assert_memory_equal(we, wr, sizeof we);
  for (int k = 0; k < 2; k++, step++)
    both_step(e, r, step);
  /* a failed step: the daemons completed the step before it (a read
   * waits for that), the bad batch fails on node 1, the step is rolled
   * back on both and the next good steps match the embedded run's, which
   * never saw the bad batch */
  same_variable(e, r, "w0");
  float x[48];
  int32_t y[8];
  for (int i = 0; i < 48; i++)
    x[i] = 0.25f;
  for (int i = 0; i < 8; i++)
    y[i] = i == 7 ? 99 : 1;
  assert_int_equal(sl_session_feed(r, "x0", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_feed(r, "y0", y, sizeof y), SL_OK);
  sl_status st = sl_session_run(r, 1);
  printf("bad step: %s: %s\n", sl_status_str(st), sl_last_error());
  assert_int_equal(st, SL_EINVAL);
  /* "was rolled back", not "could not be rolled back" */
  assert_non_null(strstr(sl_last_error(), "was rolled back"));
  assert_int_equal(sl_session_steps(r), step);
  for (int k = 0; k < 2; k++, step++)
    both_step(e, r, step);
  same_variable(e, r, "w0.v");
  assert_int_equal(sl_session_finish(r), SL_OK);
  sl_session_destroy(r);
  sl_session_destroy(e);
  /* sl_variable_load on the daemons (one session at a time on a cluster) */
  sl_graph *gl = one_model_from("cpu:0-1/0-1", "tp", &adam, dw);
  sl_session *ls = NULL;
  if (sl_session_create(gl, &rc, &ls) != SL_OK)
    fail_msg("a graph loading '%s': %s", dw, sl_last_error());
  assert_int_equal(sl_session_read_variable(ls, "w0", wl, sizeof wl), SL_OK);
  assert_memory_equal(we, wl, sizeof we);
  sl_session_destroy(ls);
  sl_graph_destroy(gl);
  /* the background save: step `saved`, whose next steps the embedded
   * session (the same layout on one node) repeats exactly */
  sl_session *b = NULL;
  assert_int_equal(sl_session_create(ge, NULL, &b), SL_OK);
  if (sl_session_restore(b, db) != SL_OK)
    fail_msg("restore of the background save: %s", sl_last_error());
  assert_int_equal(sl_session_steps(b), saved);
  for (int k = 0; k < 2; k++) {
    float l = one_step(b, (int)saved + k);
    assert_memory_equal(&l, &after[k], sizeof l);
  }
  sl_session_destroy(b);
  sl_graph_destroy(ge);
  sl_graph_destroy(gr);
  scratch_remove(&t);
}

/* The daemons (threads of this process here, so the pools map through
 * /proc/self/fd) share their registers: the gradients' all-reduces between
 * them read each other's values in place, and the training matches the
 * embedded one. */
/* With SLUICE_SHARED_REGISTERS=0 (the session_daemon_unshared run) the
 * daemons keep their registers on the heap: no all-reduce reads in place,
 * and the training still matches. */
static void test_shared_registers(void **state) {
  cluster *c = *state;
  const char *env = getenv("SLUICE_SHARED_REGISTERS");
  bool off = env && !strcmp(env, "0");
  sl__net_coll_stats before[NNODES], after;
  for (int r = 0; r < NNODES; r++)
    sl__net_coll_get_stats(atomic_load(&c->d[r].nc), &before[r]);
  same_as_embedded("cpu:0-3", "cpu:0-1/0-1", "dp");
  for (int r = 0; r < NNODES; r++) {
    sl__net_coll_get_stats(atomic_load(&c->d[r].nc), &after);
    printf("node %d: %llu shared all-reduces, %llu bytes read in place\n", r,
           (unsigned long long)(after.by_algo[SL__NET_ALGO_SHARED] -
                                before[r].by_algo[SL__NET_ALGO_SHARED]),
           (unsigned long long)(after.bytes_read_shared -
                                before[r].bytes_read_shared));
    if (off) {
      assert_int_equal(after.by_algo[SL__NET_ALGO_SHARED],
                       before[r].by_algo[SL__NET_ALGO_SHARED]);
      assert_int_equal(after.bytes_read_shared, before[r].bytes_read_shared);
      continue;
    }
    assert_true(after.by_algo[SL__NET_ALGO_SHARED] >=
                before[r].by_algo[SL__NET_ALGO_SHARED] + STEPS);
    assert_true(after.bytes_read_shared > before[r].bytes_read_shared);
  }
}

/* Node 1's kernel fails at step 2 while node 0's members wait for node
 * 1's inside the gradient's all-reduce between them: the job fails naming
 * the node, nothing hangs, and the cluster runs the next job. */
static void test_failure_inside_collective(void **state) {
  (void)state;
  float l[STEPS], w[30];
  sl_status st = train_one("cpu:0-1/0-1", "dp", true, true, l, w);
  assert_int_not_equal(st, SL_OK);
  printf("failure: %s: %s\n", sl_status_str(st), sl_last_error());
  assert_non_null(strstr(sl_last_error(), "node 1"));
  if (train_one("cpu:0-1/0-1", "dp", true, false, l, w) != SL_OK)
    fail_msg("after a failure: %s", sl_last_error());
}

/* Collectives between nodes started so far, over both daemons. */
static uint64_t net_started(void **state) {
  cluster *c = *state;
  uint64_t n = 0;
  for (int r = 0; r < NNODES; r++) {
    sl__net_coll *nc = atomic_load(&c->d[r].nc);
    assert_non_null(nc);
    sl__net_coll_stats ns;
    sl__net_coll_get_stats(nc, &ns);
    n += ns.started;
  }
  return n;
}

/* The daemons free a failed job's devices after the program has heard of
 * the failure: wait (a bounded guard) until the fake's communicators and
 * device memory are all given back. */
static void wait_devices_freed(void) {
  fake_cuda_stats fs;
  for (int i = 0; i < 1000; i++) {
    fake_cuda_get_stats(&fs);
    if (fake_cuda_live_comms() == 0 && fs.live_allocs == 0) return;
    usleep(10 * 1000);
  }
  fail_msg("after 10 s: %d fake communicators, %llu device allocations left",
           fake_cuda_live_comms(), (unsigned long long)fs.live_allocs);
}

/* Whether node's log gets a line with text within 10 s (a bounded guard:
 * a daemon logs a job after the program has heard of its failure). */
static bool log_has(void **state, int node, const char *text) {
  dthread *d = &((cluster *)*state)->d[node];
  for (int i = 0; i < 1000; i++) {
    pthread_mutex_lock(&d->log_m);
    bool found = strstr(d->log, text) != NULL;
    pthread_mutex_unlock(&d->log_m);
    if (found) return true;
    usleep(10 * 1000);
  }
  pthread_mutex_lock(&d->log_m);
  printf("node %d's log:\n%s", node, d->log);
  pthread_mutex_unlock(&d->log_m);
  return false;
}

/* CUDA placements across nodes, on the fake device (fake_cuda.h): every
 * daemon opens its cuda devices, the program feeds and fetches on their
 * host sides, and the gradients' all-reduces between the nodes stay on the
 * devices: one fake-NCCL communicator across the two daemons per group
 * (dp: one group of 4 ranks, 2 per node; hybrid: two groups of 2, one rank
 * per node each), no collective between nodes on the hosts. The same
 * losses and weights as the embedded run on cpu devices. */
static void test_cuda_across_nodes(void **state) {
  fake_cuda_install();
  /* The counter read below does count host collectives between nodes. */
  float lc[STEPS], wc[30];
  uint64_t before = net_started(state);
  if (train_one("cpu:0-1/0-1", "dp", true, false, lc, wc) != SL_OK)
    fail_msg("dp remote on cpu: %s", sl_last_error());
  assert_true(net_started(state) > before);
  static const char *const layouts[] = {"dp", "hybrid"};
  for (int i = 0; i < 2; i++) {
    bool hybrid = !strcmp(layouts[i], "hybrid");
    float la[STEPS], lb[STEPS], wa[30], wb[30];
    if (train_one(hybrid ? "cpu:0-3[2,2]" : "cpu:0-3", layouts[i], false, false,
                  la, wa) != SL_OK)
      fail_msg("%s embedded: %s", layouts[i], sl_last_error());
    fake_cuda_stats f0, f1;
    fake_cuda_get_stats(&f0);
    before = net_started(state);
    if (train_one(hybrid ? "cuda:0-1/0-1[2,2]" : "cuda:0-1/0-1", layouts[i],
                  true, false, lb, wb) != SL_OK)
      fail_msg("%s remote on cuda: %s", layouts[i], sl_last_error());
    fake_cuda_get_stats(&f1);
    printf("%s: %llu all-reduce parts across the daemons, %llu collectives "
           "between nodes on the hosts\n",
           layouts[i],
           (unsigned long long)(f1.cross_all_reduces - f0.cross_all_reduces),
           (unsigned long long)(net_started(state) - before));
    /* 4 ranks x (STEPS + the one step finishing runs + the warm-up). */
    assert_int_equal(f1.cross_all_reduces - f0.cross_all_reduces,
                     4 * (STEPS + 2));
    assert_int_equal(net_started(state), before);
    close_to("loss", la, lb, STEPS);
    close_to("w", wa, wb, 30);
  }
  assert_true(fake_cuda_settle());
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_true(fs.kernels > 0);
  assert_int_equal(fs.live_allocs, 0);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* x [8, 8] boxed from xs to xb (all-gathers), a [8, 6] times w [6, 4]
 * split on the inner axis: a partial sum, boxed to ps (reduce-scatters);
 * both fetched through a tanh. On pl; "2d" for a [2,2] mesh. */
/* A session of g on pl (on the daemons when remote) and `steps` steps of
 * it with the feeds of seed + step. When remote, *f0 and *before get the
 * fake's counts and net_started once the session exists, before its first
 * step. */
static sl_session *run_steps(void **state, sl_graph *g, const char *pl,
                             bool remote, int steps, uint64_t seed,
                             fake_cuda_stats *f0, uint64_t *before) {
  sl_session *s = NULL;
  sl_session_config cfg = config(remote);
  sl_status st = sl_session_create(g, &cfg, &s);
  if (st != SL_OK) fail_msg("create on %s: %s", pl, sl_last_error());
  if (remote) {
    fake_cuda_get_stats(f0);
    *before = net_started(state);
  }
  for (int step = 0; step < steps; step++) {
    st_feeds f;
    st_feeds_make(g, seed + (uint64_t)step, 0, &f);
    for (int j = 0; j < f.n; j++)
      assert_int_equal(sl_session_feed(s, f.name[j], f.data[j], f.bytes[j]),
                       SL_OK);
    st_feeds_free(&f);
    if (sl_session_run(s, 1) != SL_OK)
      fail_msg("%s step %d: %s", pl, step, sl_last_error());
  }
  return s;
}

static sl_graph *gather_scatter(const char *pl, bool two) {
  sl_graph *g = st_graph(pl);
  sl_shape xs = SL_SHAPE(8, 8), as = SL_SHAPE(8, 6), ws = SL_SHAPE(6, 4);
  sl_tensor x =
      sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, two ? "(S(0),S(0))" : "S(0)");
  sl_tensor a =
      sl_input(g, "a", &as, SL_DTYPE_F32, NULL, two ? "(S(1),S(1))" : "S(1)");
  sl_tensor w =
      sl_input(g, "w", &ws, SL_DTYPE_F32, NULL, two ? "(S(0),S(0))" : "S(0)");
  sl_fetch(sl_tanh(sl_to_global(x, NULL, two ? "(B,B)" : "B")), "gathered");
  sl_tensor p = sl_matmul(a, w, false, false);
  sl_fetch(sl_tanh(sl_to_global(p, NULL, two ? "(S(0),S(0))" : "S(0)")),
           "scattered");
  st_check_graph(g);
  return g;
}

/* All-gathers and reduce-scatters in NCCL's layout (axis 0, divisible)
 * across nodes stay on the devices, as all-reduces do: spanning groups
 * (the 1d case's one group of 4; the 2d case's mesh axis 0, one rank per
 * node) on fake-NCCL communicators across the daemons, launched in the
 * job's order (the fake checks it), the 2d case's in-node groups (mesh
 * axis 1) in one process, each boxing's two steps chained; no collective
 * between nodes on the hosts; bit for bit the embedded run on cpu. The
 * members arriving before their daemon has connected its groups wait for
 * it (comm/coll/dev_group.c). */
static void test_cuda_gather_scatter_across_nodes(void **state) {
  enum { N = 3 };
  fake_cuda_install();
  fake_cuda_set_jitter(300);
  /* Slow communicator creation: the daemons' sessions connect long after
   * the program's feeds came, and x's all-gather right after its input
   * has members arriving before their group has a communicator. */
  fake_cuda_set_init_delay(150);
  for (int two = 0; two < 2; two++) {
    float got[2][2][8 * 8];
    fake_cuda_stats f0, f1;
    uint64_t before = 0;
    for (int k = 0; k < 2; k++) {
      const char *pl = k == 0 ? (two ? "cpu:0-3[2,2]" : "cpu:0-3")
                              : (two ? "cuda:0-1/0-1[2,2]" : "cuda:0-1/0-1");
      sl_graph *g = gather_scatter(pl, two);
      sl_session *s = run_steps(state, g, pl, k == 1, N, 71, &f0, &before);
      assert_int_equal(
          sl_session_fetch(s, "gathered", got[k][0], 64 * sizeof(float)),
          SL_OK);
      assert_int_equal(
          sl_session_fetch(s, "scattered", got[k][1], 32 * sizeof(float)),
          SL_OK);
      assert_int_equal(sl_session_finish(s), SL_OK);
      sl_session_destroy(s);
      sl_graph_destroy(g);
    }
    fake_cuda_get_stats(&f1);
    st_compare(SL_DTYPE_F32, got[1][0], got[0][0], 64, 0, "gathered");
    st_compare(SL_DTYPE_F32, got[1][1], got[0][1], 32, 0, "scattered");
    uint64_t xag = f1.cross_all_gathers - f0.cross_all_gathers,
             xrs = f1.cross_reduce_scatters - f0.cross_reduce_scatters,
             ag = f1.all_gathers - f0.all_gathers,
             rs = f1.reduce_scatters - f0.reduce_scatters;
    printf("%s: device all-gathers %llu across nodes, %llu in one; "
           "reduce-scatters %llu, %llu\n",
           two ? "2d" : "1d", (unsigned long long)xag, (unsigned long long)ag,
           (unsigned long long)xrs, (unsigned long long)rs);
    /* 4 ranks x (N steps + 1 finishing) per boxing step on each kind of
     * group: 1d one spanning step; 2d one spanning, one in-node. */
    assert_int_equal(xag, 4 * (N + 1));
    assert_int_equal(xrs, 4 * (N + 1));
    assert_int_equal(ag, two ? 4 * (N + 1) : 0);
    assert_int_equal(rs, two ? 4 * (N + 1) : 0);
    assert_int_equal(net_started(state), before);
  }
  assert_true(fake_cuda_settle());
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.order_checks, 4); /* both daemons, both jobs */
  assert_int_equal(fs.order_errors, 0);
  assert_int_equal(fs.live_allocs, 0);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* Boxings NCCL has no collective for, across nodes: an uneven all-to-all,
 * an all-gather along axis 1 and a send_recv to the second node's devices
 * (cpu: to cpu:2-3). */
static sl_graph *exchanges(const char *pl, const char *half) {
  sl_graph *g = st_graph(pl);
  sl_shape xs = SL_SHAPE(7, 6), ys = SL_SHAPE(5, 7), zs = SL_SHAPE(6, 3);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, NULL, "S(1)");
  sl_tensor z = sl_input(g, "z", &zs, SL_DTYPE_F32, NULL, "S(0)");
  sl_fetch(sl_tanh(sl_to_global(x, NULL, "S(1)")), "x2");
  sl_fetch(sl_tanh(sl_to_global(y, NULL, "B")), "y2");
  sl_fetch(sl_tanh(sl_to_global(z, half, "S(1)")), "z2");
  st_check_graph(g);
  return g;
}

/* Exchanges between GPUs across nodes (comm/coll/dev_xchg.c): grouped sends
 * and receives on communicators across the daemons, warmed up pair by
 * pair and launched in the job's order; bit for bit the embedded run on
 * cpu, no collective between nodes on the hosts. */
static void test_cuda_exchanges_across_nodes(void **state) {
  enum { N = 2 };
  static const char *names[3] = {"x2", "y2", "z2"};
  static const size_t sizes[3] = {7 * 6, 5 * 7, 6 * 3};
  fake_cuda_install();
  fake_cuda_set_jitter(300);
  fake_cuda_set_init_delay(50);
  float got[2][3][64];
  fake_cuda_stats f0, f1;
  uint64_t before = 0;
  for (int k = 0; k < 2; k++) {
    const char *pl = k == 0 ? "cpu:0-3" : "cuda:0-1/0-1";
    sl_graph *g = exchanges(pl, k == 0 ? "cpu:2-3" : "cuda:1/0-1");
    sl_session *s = run_steps(state, g, pl, k == 1, N, 73, &f0, &before);
    for (int i = 0; i < 3; i++)
      assert_int_equal(
          sl_session_fetch(s, names[i], got[k][i], sizes[i] * sizeof(float)),
          SL_OK);
    assert_int_equal(sl_session_finish(s), SL_OK);
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
  fake_cuda_get_stats(&f1);
  for (int i = 0; i < 3; i++)
    st_compare(SL_DTYPE_F32, got[1][i], got[0][i], (int64_t)sizes[i], 0,
               names[i]);
  uint64_t xx = f1.cross_exchanges - f0.cross_exchanges;
  printf("exchange launches across nodes: %llu\n", (unsigned long long)xx);
  assert_true(xx > 0);
  assert_int_equal(net_started(state), before);
  assert_true(fake_cuda_settle());
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.order_checks, 2); /* both daemons */
  assert_int_equal(fs.order_errors, 0);
  assert_int_equal(fs.live_allocs, 0);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* Three layers of data parallelism on pl: x and y split over the batch,
 * the weights broadcast, so each weight's gradient is one all-reduce over
 * every device (three groups on the same devices). */
static sl_graph *three_layers(const char *pl) {
  sl_graph *g = st_graph(pl);
  sl_shape xs = SL_SHAPE(16, 12), ys = SL_SHAPE(16);
  sl_shape w1s = SL_SHAPE(12, 10), w2s = SL_SHAPE(10, 9), w3s = SL_SHAPE(9, 5);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, "S(0)");
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_uniform(-0.5, 0.5, 21), NULL, "B");
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_uniform(-0.5, 0.5, 22), NULL, "B");
  sl_tensor w3 = sl_variable(g, "w3", &w3s, SL_DTYPE_F32,
                             sl_init_uniform(-0.5, 0.5, 23), NULL, "B");
  sl_tensor h = sl_tanh(sl_matmul(x, w1, false, false));
  h = sl_tanh(sl_matmul(h, w2, false, false));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w3, false, false), y);
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  sl_fetch(w1, "w1_out");
  st_check_graph(g);
  return g;
}

/* Each daemon launches its spanning groups round by round in the job's
 * order (comm/coll/dev_group.c), whatever order their members arrive in;
 * the fake checks every daemon's launches when its session closes
 * (fake_cuda_stats.order_*).
 * - Three gradients, so three groups spanning both nodes on the same
 *   devices, kernels of random length: the run equals the embedded one on
 *   4 cpu devices (a wrong order would leave the fake's streams waiting
 *   for each other, and fail).
 * - Hybrid on a 2x2 mesh: two groups of the same depth, one on each
 *   device of a node, and device 0's kernels slower, so its group's
 *   members arrive last though it comes first in the job's order. */
static void test_cuda_groups_in_order(void **state) {
  fake_cuda_install();
  fake_cuda_set_jitter(500);
  enum { N = 10 };
  float loss[2][N], w1[2][12 * 10];
  uint64_t before = 0;
  for (int k = 0; k < 2; k++) {
    sl_graph *g = three_layers(k ? "cuda:0-1/0-1" : "cpu:0-3");
    sl_session *s = NULL;
    sl_session_config cfg = config(k == 1);
    sl_status st = sl_session_create(g, &cfg, &s);
    if (st != SL_OK) fail_msg("create: %s", sl_last_error());
    if (k == 1) before = net_started(state);
    for (int step = 0; step < N; step++) {
      st_feeds f;
      st_feeds_make(g, 91 + (uint64_t)step, 5, &f);
      for (int j = 0; j < f.n; j++)
        assert_int_equal(sl_session_feed(s, f.name[j], f.data[j], f.bytes[j]),
                         SL_OK);
      st_feeds_free(&f);
      if (sl_session_run(s, 1) != SL_OK)
        fail_msg("%s step %d: %s", k ? "remote" : "embedded", step,
                 sl_last_error());
      assert_int_equal(
          sl_session_fetch(s, "loss", &loss[k][step], sizeof(float)), SL_OK);
    }
    assert_int_equal(sl_session_fetch(s, "w1_out", w1[k], sizeof w1[k]), SL_OK);
    assert_int_equal(sl_session_finish(s), SL_OK);
    sl_session_destroy(s);
    sl_graph_destroy(g);
  }
  close_to("loss", loss[0], loss[1], N);
  close_to("w1", w1[0], w1[1], 12 * 10);
  assert_true(fake_cuda_settle());
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  /* 3 groups x 4 ranks x (N steps + 1 finishing + 1 warm-up) */
  assert_int_equal(fs.cross_all_reduces, 3 * 4 * (N + 2));
  assert_int_equal(net_started(state), before);
  assert_int_equal(fs.order_checks, 2); /* both daemons */
  assert_int_equal(fs.order_errors, 0);

  fake_cuda_set_jitter(0);
  fake_cuda_set_device_delay(0, 3000);
  same_as_embedded("cpu:0-3[2,2]", "cuda:0-1/0-1[2,2]", "hybrid");
  assert_true(fake_cuda_settle()); /* the order is checked as they go */
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.order_checks, 4);
  assert_int_equal(fs.order_errors, 0);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* The device collective itself fails on node 1 (its rank 3's part, at step
 * 2, once the other three ranks are inside the all-reduce and hold their
 * streams): node 1's member fails, node 1 aborts, and node 0, whose
 * members wait on their streams for a rank that will never join, aborts
 * its communicator when the job fails; the program's run fails naming node
 * 1, nothing hangs, and the next job runs. */
static void test_cuda_failure_inside_collective(void **state) {
  fake_cuda_install();
  fake_cuda_fail_collective(3, 3); /* 0: the warm-up, 1: step 0 */
  float l[STEPS], w[30];
  uint64_t t0 = sl__now_ns();
  sl_status st = train_one("cuda:0-1/0-1", "dp", true, false, l, w);
  assert_int_not_equal(st, SL_OK);
  printf("failure: %s: %s\n", sl_status_str(st), sl_last_error());
  assert_non_null(strstr(sl_last_error(), "node 1"));
  assert_true(log_has(state, 1, "failed inside collective 3"));
  wait_devices_freed();
  double secs = (double)(sl__now_ns() - t0) / 1e9;
  printf("failed and freed after %.1f s\n", secs);
  /* A guard, not a measurement: the aborts freed the streams, not the
   * fake's 20 s limit on a wait in a collective. */
  assert_true(secs < 15);
  assert_true(fake_cuda_settle());
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_true(fs.cross_all_reduces > 0);
  assert_true(fs.comm_aborts > 0);
  if (train_one("cuda:0-1/0-1", "dp", true, false, l, w) != SL_OK)
    fail_msg("after a failure: %s", sl_last_error());
  assert_true(fake_cuda_settle());
  fake_cuda_uninstall();
}

/* Node 0, which holds rank 0 of the gradient's group, cannot make its
 * unique id: the job fails naming the group and its key, and node 1, which
 * waits for that id, gives up when the job fails instead of waiting out
 * its 60 s; the next job runs. */
static void test_cuda_group_creation_fails(void **state) {
  fake_cuda_install();
  fake_cuda_fail_unique_ids(1);
  float l[STEPS], w[30];
  uint64_t t0 = sl__now_ns();
  sl_status st = train_one("cuda:0-1/0-1", "dp", true, false, l, w);
  double secs = (double)(sl__now_ns() - t0) / 1e9;
  assert_int_not_equal(st, SL_OK);
  printf("failure after %.1f s: %s: %s\n", secs, sl_status_str(st),
         sl_last_error());
  assert_non_null(strstr(sl_last_error(), "device group '"));
  assert_non_null(strstr(sl_last_error(), ".boxing"));
  assert_non_null(strstr(sl_last_error(), "sluice/dev_coll/"));
  assert_non_null(strstr(sl_last_error(), "injected"));
  /* A guard, not a measurement: far below the id's 60 s timeout. */
  assert_true(secs < 30);
  wait_devices_freed();
  assert_true(log_has(state, 1, "stopped waiting for the unique id"));
  if (train_one("cuda:0-1/0-1", "dp", true, false, l, w) != SL_OK)
    fail_msg("after a failure: %s", sl_last_error());
  fake_cuda_uninstall();
}

/* A job one node refuses while another has built and attached its share:
 * the program's session fails naming the refusal, and the next job on the
 * same cluster runs. Node 1's share needs a CUDA device this build or
 * machine does not have (no fake installed); node 0's is on its CPU. */
static void test_job_refused_by_one_node(void **state) {
  (void)state;
  if (sl_device_count(SL_DEVICE_CUDA) > 0) {
    printf("skipped: this machine has a CUDA device, so node 1 would take "
           "the job\n");
    skip();
  }
  sl_graph *g = st_graph(NULL);
  sl_shape xs = SL_SHAPE(4, 3);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0/0", "B");
  sl_tensor y = sl_to_global(sl_relu(x), "cuda:1/0", "B");
  sl_fetch(sl_relu(y), "y");
  st_check_graph(g);
  sl_session *s = NULL;
  sl_session_config cfg = config(true);
  uint64_t t0 = sl__now_ns();
  sl_status st = sl_session_create(g, &cfg, &s);
  if (st == SL_OK) {
    float xv[12] = {0};
    assert_int_equal(sl_session_feed(s, "x", xv, sizeof xv), SL_OK);
    st = sl_session_run(s, 1);
    sl_session_destroy(s);
  }
  printf("refused after %.1f s: %s: %s\n", (double)(sl__now_ns() - t0) / 1e9,
         sl_status_str(st), sl_last_error());
  /* The refusing daemon's own status and message reach the program: no
   * device in a CUDA build, no CUDA in a CPU-only one. */
  assert_int_equal(st, sl_build_has_cuda() ? SL_ECUDA : SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "node 1 refused job"));
  assert_non_null(strstr(sl_last_error(), "cuda:0"));
  sl_graph_destroy(g);
  float l[STEPS], w[30];
  if (train_one("cpu:0-1/0-1", "dp", true, false, l, w) != SL_OK)
    fail_msg("the job after a refused one: %s", sl_last_error());
}

/* Labels [good, bad] for 8 rows a step, in a .npy file at path; the bad
 * batch has labels out of range on both nodes. */
static void write_labels(const char *path) {
  int32_t y[16];
  for (int i = 0; i < 16; i++)
    y[i] = i % 5;
  y[8 + 1] = y[8 + 7] = 99;
  st_write_npy_i32(path, y, 16);
}

/* one_model's shape, data parallel on pl, its labels read from the file. */
static sl_graph *file_model(const char *pl, const char *labels) {
  sl_optimizer adam = sl_optimizer_adam(0.05);
  sl_graph *g = st_graph(pl);
  sl_tensor x = sl_input(g, "x0", &SL_SHAPE(8, 6), SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor y = sl_data_npy(g, labels, 8, NULL, "S(0)");
  sl_tensor w = sl_variable(g, "w0", &SL_SHAPE(6, 5), SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 11), NULL, "B");
  sl_tensor loss = sl_cross_entropy(sl_matmul(x, w, false, false), y);
  sl_minimize(loss, &adam);
  sl_fetch(loss, "loss0");
  st_check_graph(g);
  return g;
}

/* A failed step right behind a good one (sl_session_run(s, 2)) over two
 * daemons, the bad labels on both nodes: each node holds its failure, or
 * the abort it hears of, until it has completed step 0, so every variable
 * is at its value before step 1 on both, and each of many tries (a new
 * session each) is rolled back to step 1 with the variables of an
 * embedded run of step 0. And a restore after step 0 works although the
 * step that ending the job runs unread on the daemons (step 1) fails. */
static void test_failed_step_behind_a_good_one_across_daemons(void **state) {
  (void)state;
  enum { TRIES = 12 };
  scratch t;
  scratch_make(&t, "labels.npy", "start");
  write_labels(t.a);
  float x[48];
  for (int i = 0; i < 48; i++)
    x[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
  sl_graph *ge = file_model("cpu:0-3", t.a);
  sl_session *e = NULL;
  assert_int_equal(sl_session_create(ge, NULL, &e), SL_OK);
  assert_int_equal(sl_session_feed(e, "x0", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_run(e, 1), SL_OK);
  sl_session_config rc = config(true);
  for (int i = 0; i < TRIES; i++) {
    sl_graph *gr = file_model("cpu:0-1/0-1", t.a);
    sl_session *r = NULL;
    assert_int_equal(sl_session_create(gr, &rc, &r), SL_OK);
    assert_int_equal(sl_session_feed(r, "x0", x, sizeof x), SL_OK);
    sl_status st = sl_session_run(r, 2);
    if (st != SL_EINVAL || !strstr(sl_last_error(), "step 1 was rolled back"))
      fail_msg("try %d: %s: %s", i, sl_status_str(st), sl_last_error());
    assert_int_equal(sl_session_steps(r), 1);
    same_variable(e, r, "w0");
    same_variable(e, r, "w0.v");
    sl_session_destroy(r);
    sl_graph_destroy(gr);
  }
  sl_graph *gr = file_model("cpu:0-1/0-1", t.a);
  sl_session *r = NULL;
  assert_int_equal(sl_session_create(gr, &rc, &r), SL_OK);
  assert_int_equal(sl_session_feed(r, "x0", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_save(r, t.b), SL_OK);
  assert_int_equal(sl_session_run(r, 1), SL_OK);
  if (sl_session_restore(r, t.b) != SL_OK)
    fail_msg("restore: %s", sl_last_error());
  assert_int_equal(sl_session_steps(r), 0);
  assert_int_equal(sl_session_run(r, 1), SL_OK);
  same_variable(e, r, "w0");
  sl_session_destroy(r);
  sl_graph_destroy(gr);
  sl_session_destroy(e);
  sl_graph_destroy(ge);
  scratch_remove(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_losses_equal_embedded),
      cmocka_unit_test(test_kernel_failure_names_node),
      cmocka_unit_test(test_boxing_across_nodes),
      cmocka_unit_test(test_failure_inside_collective),
      cmocka_unit_test(test_shared_registers),
      cmocka_unit_test(test_checkpoints_across_daemons),
      cmocka_unit_test(test_variables_across_daemons),
      cmocka_unit_test(test_failed_step_behind_a_good_one_across_daemons),
      cmocka_unit_test(test_cuda_across_nodes),
      cmocka_unit_test(test_cuda_gather_scatter_across_nodes),
      cmocka_unit_test(test_cuda_exchanges_across_nodes),
      cmocka_unit_test(test_cuda_groups_in_order),
      cmocka_unit_test(test_cuda_failure_inside_collective),
      cmocka_unit_test(test_cuda_group_creation_fails),
      cmocka_unit_test(test_job_refused_by_one_node),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
