/* Control plane: joining. Ranks and member tables with 1-4 nodes joining
 * at once, explicit ranks, ranks taken and freed, clients, refusals (wrong
 * or missing token, other protocol versions) after which the master keeps
 * serving, a port in use, an unreachable master, nodes that never come. */
#include <unistd.h>

#include "cp_helpers.h"

typedef struct joiner {
  sl__cp_server *s;
  int want_rank; /* SL__CP_RANK_ANY or a rank */
  int index;     /* the devices string names it */
  sl__cp_client *c;
  sl_status st;
  char err[512];
} joiner;

static void *join_thread(void *arg) {
  joiner *j = arg;
  char addr[64], dev[32], data[32];
  master_addr(j->s, addr, sizeof addr);
  snprintf(dev, sizeof dev, "cpu:0-%d", j->index);
  snprintf(data, sizeof data, "127.0.0.1:%d", 41000 + j->index);
  sl__cp_client_opts o = {0};
  o.master = addr;
  o.token = TOKEN;
  o.role = SL__CP_NODE;
  o.node_rank = j->want_rank;
  o.devices = dev;
  o.data_addr = data;
  o.wait_all = true;
  j->st = sl__cp_client_connect(&o, LONG_MS, &j->c);
  snprintf(j->err, sizeof j->err, "%s", sl_last_error());
  return NULL;
}

/* n nodes join at once; every one gets a distinct rank and all see the
 * same table, in which each node's entry is what it sent. */
static void join_all(int n, bool explicit_ranks) {
  sl__cp_server *s = start_master(n, 5000);
  joiner js[4] = {0};
  sl__thread t[4] = {0};
  for (int i = 0; i < n; i++) {
    js[i].s = s;
    js[i].index = i;
    /* explicit: a permutation, so a rank is not just the arrival order */
    js[i].want_rank = explicit_ranks ? (i + 1) % n : SL__CP_RANK_ANY;
    spawn(&t[i], join_thread, &js[i]);
  }
  for (int i = 0; i < n; i++)
    sl__thread_join(&t[i]);
  bool seen[4] = {false};
  for (int i = 0; i < n; i++) {
    if (js[i].st != SL_OK)
      fail_msg("joiner %d: %s: %s", i, sl_status_str(js[i].st), js[i].err);
    int r = sl__cp_client_rank(js[i].c);
    assert_true(r >= 0 && r < n);
    if (explicit_ranks) assert_int_equal(r, js[i].want_rank);
    assert_false(seen[r]);
    seen[r] = true;
    assert_int_equal(sl__cp_client_nnodes(js[i].c), n);
  }
  const sl__cp_members *t0 = sl__cp_client_members(js[0].c);
  assert_int_equal(t0->n, n);
  for (int i = 0; i < n; i++) {
    const sl__cp_members *ti = sl__cp_client_members(js[i].c);
    assert_int_equal(ti->n, n);
    for (int r = 0; r < n; r++) {
      assert_int_equal(ti->m[r].rank, r);
      assert_int_equal(ti->m[r].state, SL__CP_MEMBER_LIVE);
      assert_string_equal(ti->m[r].devices, t0->m[r].devices);
      assert_string_equal(ti->m[r].data_addr, t0->m[r].data_addr);
    }
    char dev[32], data[32];
    snprintf(dev, sizeof dev, "cpu:0-%d", i);
    snprintf(data, sizeof data, "127.0.0.1:%d", 41000 + i);
    int r = sl__cp_client_rank(js[i].c);
    assert_string_equal(ti->m[r].devices, dev);
    assert_string_equal(ti->m[r].data_addr, data);
  }
  assert_int_equal(stats_of(s).live_nodes, n);
  for (int i = 0; i < n; i++)
    sl__cp_client_destroy(js[i].c);
  /* Destroy said goodbye: nobody is live, the ranks are free. */
  sl__cp_members tab;
  sl__cp_client *late = join_client(s, false);
  CHECK_OK(sl__cp_members_get(late, false, LONG_MS, &tab));
  for (int r = 0; r < n; r++)
    assert_int_equal(tab.m[r].state, SL__CP_MEMBER_LEFT);
  sl__cp_members_free(&tab);
  sl__cp_client_destroy(late);
  assert_int_equal(stats_of(s).live_nodes, 0);
  sl__cp_server_destroy(s);
}

static void test_join_1_to_4(void **state) {
  (void)state;
  for (int n = 1; n <= 4; n++) {
    join_all(n, false);
    join_all(n, true);
  }
}

static void test_ranks_taken_and_freed(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 1);
  assert_int_equal(sl__cp_client_rank(a), 1);
  sl__cp_client *x = NULL;
  CHECK_FAILS(join_as(s, SL__CP_NODE, 1, TOKEN, false, LONG_MS, &x), SL_ESTATE,
              "rank 1 is held by a live node");
  assert_null(x);
  CHECK_FAILS(join_as(s, SL__CP_NODE, 2, TOKEN, false, LONG_MS, &x), SL_EINVAL,
              "rank 2 is outside 0..1");
  sl__cp_client *b = join_node(s, SL__CP_RANK_ANY);
  assert_int_equal(sl__cp_client_rank(b), 0);
  CHECK_FAILS(
      join_as(s, SL__CP_NODE, SL__CP_RANK_ANY, TOKEN, false, LONG_MS, &x),
      SL_ESTATE, "all 2 ranks are held");
  /* Clients hold no rank and do not count. */
  sl__cp_client *prog = join_client(s, true);
  assert_int_equal(sl__cp_client_rank(prog), -1);
  assert_int_equal(stats_of(s).live_nodes, 2);
  /* A rank that was left is free for the next node. */
  sl__cp_client_destroy(a);
  sl__cp_client *a2 = join_node(s, SL__CP_RANK_ANY);
  assert_int_equal(sl__cp_client_rank(a2), 1);
  sl__cp_members tab;
  CHECK_OK(sl__cp_members_get(prog, true, LONG_MS, &tab));
  assert_int_equal(tab.n, 2);
  assert_int_equal(tab.m[1].state, SL__CP_MEMBER_LIVE);
  sl__cp_members_free(&tab);
  sl__cp_client_destroy(a2);
  sl__cp_client_destroy(b);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

/* Refused joins are logged and counted, the master keeps serving, and a
 * node with the right token joins afterwards. */
static void test_bad_tokens(void **state) {
  (void)state;
  sl__cp_server *s = start_master(1, 5000);
  sl__cp_client *x = NULL;
  CHECK_FAILS(join_as(s, SL__CP_NODE, 0, "not-the-token", false, LONG_MS, &x),
              SL_EAUTH, "credentials do not match");
  assert_null(x);
  CHECK_FAILS(join_as(s, SL__CP_NODE, 0, NULL, false, LONG_MS, &x), SL_EAUTH,
              "no credentials");
  CHECK_FAILS(join_as(s, SL__CP_CLIENT, -1, "", false, LONG_MS, &x), SL_EAUTH,
              "no credentials");
  /* A token that is a prefix of the right one is just as wrong. */
  CHECK_FAILS(join_as(s, SL__CP_NODE, 0, "test-token", false, LONG_MS, &x),
              SL_EAUTH, "credentials do not match");
  sl__cp_server_stats st = stats_of(s);
  assert_int_equal(st.auth_refused, 4);
  assert_int_equal(st.live_nodes, 0);
  sl__cp_client *good = join_node(s, 0);
  assert_int_equal(sl__cp_client_rank(good), 0);
  assert_int_equal(stats_of(s).live_nodes, 1);
  sl__cp_client_destroy(good);
  sl__cp_server_destroy(s);
}

static void test_version_mismatch(void **state) {
  (void)state;
  sl__cp_server *s = start_master(1, 5000);
  char addr[64];
  master_addr(s, addr, sizeof addr);
  sl__cp_client_opts o = {0};
  o.master = addr;
  o.token = TOKEN;
  o.role = SL__CP_NODE;
  o.node_rank = 0;
  o.protocol = SL__CP_PROTOCOL + 1;
  sl__cp_client *x = NULL;
  CHECK_FAILS(sl__cp_client_connect(&o, LONG_MS, &x), SL_EUNSUPPORTED,
              "version mismatch");
  assert_non_null(strstr(sl_last_error(), "speaks control protocol 1"));
  assert_null(x);
  /* Nodes that disagree with the master about the cluster's size. */
  o.protocol = 0;
  o.nnodes = 3;
  CHECK_FAILS(sl__cp_client_connect(&o, LONG_MS, &x), SL_EINVAL,
              "runs 1 nodes, this process expects 3");
  assert_null(x);
  o.nnodes = 1;
  CHECK_OK(sl__cp_client_connect(&o, LONG_MS, &x));
  sl__cp_client_destroy(x);
  sl__cp_client *good = join_node(s, 0);
  sl__cp_client_destroy(good);
  sl__cp_server_destroy(s);
}

static void test_port_in_use(void **state) {
  (void)state;
  sl__cp_server *a = start_master(1, 5000);
  char addr[64];
  master_addr(a, addr, sizeof addr);
  sl__cp_server_opts o = {0};
  o.listen = addr;
  o.nnodes = 1;
  o.token = TOKEN;
  sl__cp_server *b = NULL;
  CHECK_FAILS(sl__cp_server_create(&o, &b), SL_ECOMM, "Address already in use");
  assert_null(b);
  assert_non_null(strstr(sl_last_error(), addr));
  /* The first master is unharmed. */
  sl__cp_client *c = join_node(a, 0);
  sl__cp_client_destroy(c);
  sl__cp_server_destroy(a);
}

static void test_bad_server_options(void **state) {
  (void)state;
  sl__cp_server *s = NULL;
  sl__cp_server_opts o = {0};
  o.nnodes = 1;
  CHECK_FAILS(sl__cp_server_create(&o, &s), SL_EINVAL, "needs a token");
  o.token = TOKEN;
  o.nnodes = 0;
  CHECK_FAILS(sl__cp_server_create(&o, &s), SL_EINVAL, "nnodes 0");
  o.nnodes = 1;
  o.listen = "127.0.0.1";
  CHECK_FAILS(sl__cp_server_create(&o, &s), SL_EINVAL, "expected host:port");
  o.listen = "127.0.0.1:70000";
  CHECK_FAILS(sl__cp_server_create(&o, &s), SL_EINVAL, "not 0..65535");
  assert_null(s);
}

/* A port nothing listens on: the connect waits for the master up to its
 * deadline, then says it could not reach it. */
static void test_unreachable_master(void **state) {
  (void)state;
  sl__cp_server *gone = start_master(1, 5000);
  char addr[64];
  master_addr(gone, addr, sizeof addr);
  sl__cp_server_destroy(gone);
  sl__cp_client_opts o = {0};
  o.master = addr;
  o.token = TOKEN;
  o.role = SL__CP_NODE;
  o.node_rank = SL__CP_RANK_ANY;
  sl__cp_client *x = NULL;
  CHECK_FAILS(sl__cp_client_connect(&o, SHORT_MS, &x), SL_ETIMEOUT,
              "could not reach the master");
  assert_non_null(strstr(sl_last_error(), addr));
  o.master = "127.0.0.1";
  CHECK_FAILS(sl__cp_client_connect(&o, SHORT_MS, &x), SL_EINVAL,
              "expected host:port");
  o.master = NULL;
  CHECK_FAILS(sl__cp_client_connect(&o, SHORT_MS, &x), SL_EINVAL,
              "SLUICE_MASTER");
  assert_null(x);
}

/* A master that comes up after its nodes started is found. */
static void *late_master(void *arg) {
  sl__cp_server_opts *o = arg;
  sl__sleep_ns(200 * 1000000ull);
  sl__cp_server *s = NULL;
  CHECK_OK(sl__cp_server_create(o, &s));
  return s;
}

static void test_master_starts_late(void **state) {
  (void)state;
  /* Find a free port, then let it go for the master to take. */
  sl__cp_server *probe = start_master(1, 5000);
  char addr[64];
  master_addr(probe, addr, sizeof addr);
  sl__cp_server_destroy(probe);
  sl__cp_server_opts so = {0};
  so.listen = addr;
  so.nnodes = 1;
  so.token = TOKEN;
  sl__thread t;
  spawn(&t, late_master, &so);
  sl__cp_client_opts o = {0};
  o.master = addr;
  o.token = TOKEN;
  o.role = SL__CP_NODE;
  o.node_rank = 0;
  o.wait_all = true;
  sl__cp_client *c = NULL;
  sl_status st = sl__cp_client_connect(&o, LONG_MS, &c);
  void *ret = NULL;
  pthread_join(t.handle, &ret);
  if (st != SL_OK) fail_msg("%s: %s", sl_status_str(st), sl_last_error());
  assert_int_equal(sl__cp_client_rank(c), 0);
  sl__cp_client_destroy(c);
  sl__cp_server_destroy(ret);
}

/* wait_all with a node missing: the deadline passes, the message names the
 * missing rank, and the rank the waiter took is given back. */
static void test_nodes_missing(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *x = NULL;
  /* Long enough for Hello and Join on a loaded machine; the wait for node
   * 1 is what runs out. */
  CHECK_FAILS(join_as(s, SL__CP_NODE, 0, TOKEN, true, 2000, &x), SL_ETIMEOUT,
              "missing: 1");
  assert_null(x);
  assert_int_equal(stats_of(s).live_nodes, 0);
  sl__cp_client *a = join_node(s, 0);
  sl__cp_members tab;
  CHECK_FAILS(sl__cp_members_get(a, true, SHORT_MS, &tab), SL_ETIMEOUT,
              "Members");
  assert_null(tab.m);
  CHECK_OK(sl__cp_members_get(a, false, LONG_MS, &tab));
  assert_int_equal(tab.m[0].state, SL__CP_MEMBER_LIVE);
  assert_int_equal(tab.m[1].state, SL__CP_MEMBER_EMPTY);
  sl__cp_members_free(&tab);
  sl__cp_client_destroy(a);
  sl__cp_server_destroy(s);
}

/* Every server and client, failed ones included, gave gRPC back. */
static int no_grpc_users(void **state) {
  (void)state;
  assert_int_equal(sl__cp_grpc_users(), 0);
  return 0;
}

#define T(f) cmocka_unit_test_teardown(f, no_grpc_users)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_join_1_to_4),        T(test_ranks_taken_and_freed),
      T(test_bad_tokens),         T(test_version_mismatch),
      T(test_port_in_use),        T(test_bad_server_options),
      T(test_unreachable_master), T(test_master_starts_late),
      T(test_nodes_missing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
