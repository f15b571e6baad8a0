/* Control plane: the key-value store (blocking get) and named barriers. */
#include <stdatomic.h>

#include "cp_helpers.h"

typedef struct getter {
  sl__cp_client *c;
  const char *key;
  uint64_t timeout_ms;
  sl_status st;
  uint8_t *value;
  size_t len;
  char err[512];
} getter;

static void *get_thread(void *arg) {
  getter *g = arg;
  g->st = sl__cp_kv_get(g->c, g->key, true, g->timeout_ms, &g->value, &g->len);
  snprintf(g->err, sizeof g->err, "%s", sl_last_error());
  return NULL;
}

static void test_kv(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 0), *b = join_node(s, 1);
  /* Binary values, zero bytes included, and an empty one. */
  uint8_t v[5] = {1, 0, 2, 0, 255};
  CHECK_OK(sl__cp_kv_put(a, "nccl/id/0", v, sizeof v, LONG_MS));
  CHECK_OK(sl__cp_kv_put(a, "empty", NULL, 0, LONG_MS));
  uint8_t *got;
  size_t len;
  CHECK_OK(sl__cp_kv_get(b, "nccl/id/0", false, LONG_MS, &got, &len));
  assert_int_equal(len, sizeof v);
  assert_memory_equal(got, v, sizeof v);
  sl__free(got);
  CHECK_OK(sl__cp_kv_get(b, "empty", false, LONG_MS, &got, &len));
  assert_int_equal(len, 0);
  sl__free(got);
  /* A put replaces. */
  CHECK_OK(sl__cp_kv_put(b, "nccl/id/0", "xy", 2, LONG_MS));
  CHECK_OK(sl__cp_kv_get(a, "nccl/id/0", true, LONG_MS, &got, &len));
  assert_int_equal(len, 2);
  assert_memory_equal(got, "xy", 2);
  sl__free(got);
  CHECK_FAILS(sl__cp_kv_get(a, "absent", false, LONG_MS, &got, &len),
              SL_ENOTFOUND, "no key 'absent'");
  assert_null(got);
  /* Waiting for a key that never comes ends at the deadline. */
  CHECK_FAILS(sl__cp_kv_get(a, "absent", true, SHORT_MS, &got, &len),
              SL_ETIMEOUT, "KvGet");
  /* Bad keys are refused before they leave. */
  CHECK_FAILS(sl__cp_kv_put(a, "", "x", 1, LONG_MS), SL_EINVAL, "key: empty");
  CHECK_FAILS(sl__cp_kv_put(a, "a\nb", "x", 1, LONG_MS), SL_EINVAL,
              "control character");
  char longkey[SL__CP_MAX_NAME + 2];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = '\0';
  CHECK_FAILS(sl__cp_kv_put(a, longkey, "x", 1, LONG_MS), SL_EINVAL,
              "longer than");
  /* A value of a megabyte. */
  size_t big_len = 1u << 20;
  uint8_t *big = malloc(big_len);
  for (size_t i = 0; i < big_len; i++)
    big[i] = (uint8_t)(i * 7 + 3);
  CHECK_OK(sl__cp_kv_put(a, "big", big, big_len, LONG_MS));
  CHECK_OK(sl__cp_kv_get(b, "big", false, LONG_MS, &got, &len));
  assert_int_equal(len, big_len);
  assert_memory_equal(got, big, big_len);
  sl__free(got);
  free(big);
  sl__cp_client_destroy(a);
  sl__cp_client_destroy(b);
  sl__cp_server_destroy(s);
}

/* Gets parked on the master are released by a later put, from any member;
 * several waiters on one key all get it; another key stays parked. */
static void test_kv_blocking_get(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 0), *b = join_node(s, 1);
  sl__cp_client *prog = join_client(s, false);
  getter g[3] = {{.c = a, .key = "late", .timeout_ms = LONG_MS},
                 {.c = b, .key = "late", .timeout_ms = LONG_MS},
                 {.c = prog, .key = "other", .timeout_ms = SHORT_MS}};
  sl__thread t[3];
  for (int i = 0; i < 3; i++)
    spawn(&t[i], get_thread, &g[i]);
  /* The put comes after the gets were sent (they may or may not be parked
   * yet: both orders must work). */
  sl__sleep_ns(50 * 1000000ull);
  CHECK_OK(sl__cp_kv_put(prog, "late", "value", 5, LONG_MS));
  for (int i = 0; i < 3; i++)
    sl__thread_join(&t[i]);
  for (int i = 0; i < 2; i++) {
    if (g[i].st != SL_OK)
      fail_msg("getter %d: %s: %s", i, sl_status_str(g[i].st), g[i].err);
    assert_int_equal(g[i].len, 5);
    assert_memory_equal(g[i].value, "value", 5);
    sl__free(g[i].value);
  }
  assert_int_equal(g[2].st, SL_ETIMEOUT);
  assert_null(g[2].value);
  sl__cp_client_destroy(a);
  sl__cp_client_destroy(b);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

/* ---- barriers ---------------------------------------------------------- */

#define ROUNDS 5

typedef struct barrier_arg {
  sl__cp_client *c;
  atomic_int *before; /* arrivals so far, over all rounds */
  int n;
  sl_status st;
  int violations; /* left a round before everyone had entered it */
  char err[512];
} barrier_arg;

static void *barrier_thread(void *arg) {
  barrier_arg *b = arg;
  for (int k = 0; k < ROUNDS; k++) {
    atomic_fetch_add(b->before, 1);
    b->st = sl__cp_barrier(b->c, "step", LONG_MS);
    if (b->st != SL_OK) {
      snprintf(b->err, sizeof b->err, "%s", sl_last_error());
      return NULL;
    }
    /* Everyone entered round k before anyone leaves it. */
    if (atomic_load(b->before) < b->n * (k + 1)) b->violations++;
  }
  return NULL;
}

static void test_barrier_rounds(void **state) {
  (void)state;
  enum { N = 3 };
  sl__cp_server *s = start_master(N, 5000);
  sl__cp_client *c[N];
  for (int i = 0; i < N; i++)
    c[i] = join_node(s, i);
  atomic_int before = 0;
  barrier_arg a[N];
  sl__thread t[N];
  for (int i = 0; i < N; i++) {
    a[i] = (barrier_arg){c[i], &before, N, SL_OK, 0, ""};
    spawn(&t[i], barrier_thread, &a[i]);
  }
  for (int i = 0; i < N; i++)
    sl__thread_join(&t[i]);
  for (int i = 0; i < N; i++) {
    if (a[i].st != SL_OK)
      fail_msg("node %d: %s: %s", i, sl_status_str(a[i].st), a[i].err);
    assert_int_equal(a[i].violations, 0);
  }
  assert_int_equal(atomic_load(&before), N * ROUNDS);
  for (int i = 0; i < N; i++)
    sl__cp_client_destroy(c[i]);
  sl__cp_server_destroy(s);
}

typedef struct one_barrier {
  sl__cp_client *c;
  const char *name;
  uint64_t timeout_ms;
  sl_status st;
  char err[512];
} one_barrier;

static void *one_barrier_thread(void *arg) {
  one_barrier *b = arg;
  b->st = sl__cp_barrier(b->c, b->name, b->timeout_ms);
  snprintf(b->err, sizeof b->err, "%s", sl_last_error());
  return NULL;
}

/* An arrival whose deadline passed is withdrawn: it must not complete a
 * later round on its own. Clients take no part; a node that is not there
 * fails the barrier at once. */
static void test_barrier_timeouts(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 0);
  CHECK_FAILS(sl__cp_barrier(a, "x", LONG_MS), SL_ECOMM,
              "node 1 is not connected");
  sl__cp_client *b = join_node(s, 1);
  CHECK_FAILS(sl__cp_barrier(a, "x", SHORT_MS), SL_ETIMEOUT, "Barrier");
  CHECK_FAILS(sl__cp_barrier(a, "x", SHORT_MS), SL_ETIMEOUT, "Barrier");
  one_barrier ob = {a, "x", LONG_MS, SL_OK, ""};
  sl__thread t;
  spawn(&t, one_barrier_thread, &ob);
  CHECK_OK(sl__cp_barrier(b, "x", LONG_MS));
  sl__thread_join(&t);
  if (ob.st != SL_OK) fail_msg("%s: %s", sl_status_str(ob.st), ob.err);
  /* Names are independent. */
  one_barrier o2 = {a, "y", SHORT_MS, SL_OK, ""};
  spawn(&t, one_barrier_thread, &o2);
  CHECK_FAILS(sl__cp_barrier(b, "z", SHORT_MS), SL_ETIMEOUT, "Barrier");
  sl__thread_join(&t);
  assert_int_equal(o2.st, SL_ETIMEOUT);
  sl__cp_client *prog = join_client(s, false);
  CHECK_FAILS(sl__cp_barrier(prog, "x", LONG_MS), SL_EINVAL,
              "only nodes take part");
  CHECK_FAILS(sl__cp_barrier(a, "", LONG_MS), SL_EINVAL, "name: empty");
  sl__cp_client_destroy(prog);
  sl__cp_client_destroy(a);
  sl__cp_client_destroy(b);
  sl__cp_server_destroy(s);
}

/* A node that leaves while another waits at a barrier fails it, naming the
 * node. */
static void test_barrier_node_leaves(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 0), *b = join_node(s, 1);
  one_barrier ob = {a, "x", LONG_MS, SL_OK, ""};
  sl__thread t;
  spawn(&t, one_barrier_thread, &ob);
  sl__sleep_ns(50 * 1000000ull);
  sl__cp_client_destroy(b);
  sl__thread_join(&t);
  assert_int_equal(ob.st, SL_ECOMM);
  /* Parked when b left, or arrived after: either way node 1 is named. */
  if (!strstr(ob.err, "node 1 left") && !strstr(ob.err, "node 1 is left"))
    fail_msg("message: %s", ob.err);
  sl__cp_client_destroy(a);
  sl__cp_server_destroy(s);
}

/* Many threads over several clients at once: each puts its own keys and
 * waits for its neighbour's, some with deadlines that pass (their parked
 * calls are withdrawn while others are answered). Every value arrives
 * intact. */
enum { N_CLIENTS = 3, PER_CLIENT = 3, ITERS = 30 };

typedef struct worker {
  sl__cp_client *c;
  int id, n;
  int bad;
  sl_status st;
  char err[512];
} worker;

static void *worker_thread(void *arg) {
  worker *w = arg;
  for (int k = 0; k < ITERS; k++) {
    char key[64], val[64];
    snprintf(key, sizeof key, "w%d/%d", w->id, k);
    snprintf(val, sizeof val, "value of w%d at %d", w->id, k);
    if ((w->st = sl__cp_kv_put(w->c, key, val, strlen(val), LONG_MS)) != SL_OK)
      break;
    int nb = (w->id + 1) % w->n;
    snprintf(key, sizeof key, "w%d/%d", nb, k);
    snprintf(val, sizeof val, "value of w%d at %d", nb, k);
    uint8_t *v;
    size_t len;
    if ((w->st = sl__cp_kv_get(w->c, key, true, LONG_MS, &v, &len)) != SL_OK)
      break;
    w->bad += len != strlen(val) || memcmp(v, val, len) != 0;
    sl__free(v);
    if (k % 5 == 0) {
      /* A key nobody puts: the deadline passes, the call is withdrawn. */
      snprintf(key, sizeof key, "never/%d/%d", w->id, k);
      sl_status st = sl__cp_kv_get(w->c, key, true, 20, &v, &len);
      w->bad += st != SL_ETIMEOUT;
    }
  }
  if (w->st != SL_OK) snprintf(w->err, sizeof w->err, "%s", sl_last_error());
  return NULL;
}

static void test_concurrent_clients(void **state) {
  (void)state;
  sl__cp_server *s = start_master(N_CLIENTS, 5000);
  sl__cp_client *c[N_CLIENTS];
  for (int i = 0; i < N_CLIENTS; i++)
    c[i] = join_node(s, i);
  enum { N = N_CLIENTS * PER_CLIENT };
  worker w[N];
  sl__thread t[N];
  for (int i = 0; i < N; i++) {
    w[i] = (worker){.c = c[i % N_CLIENTS], .id = i, .n = N};
    spawn(&t[i], worker_thread, &w[i]);
  }
  for (int i = 0; i < N; i++)
    sl__thread_join(&t[i]);
  for (int i = 0; i < N; i++) {
    if (w[i].st != SL_OK)
      fail_msg("worker %d: %s: %s", i, sl_status_str(w[i].st), w[i].err);
    assert_int_equal(w[i].bad, 0);
  }
  /* Nothing was refused: the counters of concurrent calls from one client
   * all fell inside the replay window. */
  assert_int_equal(stats_of(s).auth_refused, 0);
  for (int i = 0; i < N_CLIENTS; i++)
    sl__cp_client_destroy(c[i]);
  sl__cp_server_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kv),
      cmocka_unit_test(test_kv_blocking_get),
      cmocka_unit_test(test_barrier_rounds),
      cmocka_unit_test(test_barrier_timeouts),
      cmocka_unit_test(test_barrier_node_leaves),
      cmocka_unit_test(test_concurrent_clients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
