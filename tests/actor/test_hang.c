/* Hang diagnosis: a real hang is reported with who waits on what; slow
 * kernels, slow deferred work and slow remote nodes are not hangs; a
 * deferred firing that waits for another firing (a collective's member,
 * sl_completion_waiting) is a hang when that firing never comes, and not
 * while it is on its way. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "actor_helpers.h"

static sl_status act_sum(sl_act *a) {
  int64_t *acc = a->out[0]->data;
  int64_t v = *(const int64_t *)a->in[0]->data;
  *acc = a->step == 0 ? v : *acc + v;
  return SL_OK;
}

/* src (2 registers) feeds both an accumulate of 4 and a join that also
 * reads the accumulate. The join holds both of src's registers while it
 * waits for the accumulate, which waits for a third piece from src, which
 * waits for a free register: a hang the static check cannot see (there is
 * no loop; the counting actor needs more registers than the edge has).
 * Nodes: src on `src_node`, the others on `rest_node`. */
static sl_actor_graph *hang_plan(uint32_t src_node, uint32_t rest_node) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, src_node, 0, 0, NULL, NULL, 8);
  sl_actor_id acc = add_actor(p, "acc", SL_ACTOR_ACCUMULATE, rest_node, 1, 0,
                              act_sum, NULL, 4);
  sl_actor_id join =
      add_actor(p, "join", SL_ACTOR_KERNEL, rest_node, 2, 0, NULL, NULL, 0);
  int32_t s_out = add_out(p, src, 2, 8);
  connect_to(p, s_out, acc);
  connect_to(p, s_out, join);                 /* join input 0 */
  connect_to(p, add_out(p, acc, 1, 8), join); /* join input 1 */
  connect_to(
      p, add_out(p, join, 1, 8),
      add_actor(p, "sink", SL_ACTOR_SINK, rest_node, 0, 1, NULL, NULL, 0));
  assert_int_equal(sl_actor_graph_check(p), SL_OK);
  return p;
}

static void expect_in(const char *text, const char *needle) {
  if (!strstr(text, needle)) fail_msg("'%s' not in:\n%s", needle, text);
}

static void test_hang_report(void **state) {
  sl_actor_graph *p = hang_plan(0, 0);
  sl_job_config cfg = SL_JOB_CONFIG(.hang_timeout_ms = 200);
  sl_job *job;
  sl_logging_set_level(SL_LOGGING_OFF); /* the report is also logged */
  assert_int_equal(run_plan(p, &cfg, &job), SL_EHANG);
  expect_in(sl_last_error(), "hang on node 0: for 200 ms no actor could fire");
  const char *r = sl_job_hang_report(job);
  printf("%s", r);
  expect_in(r, "4 of 4 actors are blocked");
  expect_in(r, "'src' (source, node 0, device 0, stream 0): produced 2 of 8 "
               "pieces; waits for a free register of output 0 'src.out0' (2 of "
               "2 in flight: #0 (piece 0) held by 'join'; #1 (piece 1) held by "
               "'join')");
  expect_in(r,
            "'acc' (accumulate, node 0, device 1, stream 0): waits for input "
            "0 'src.out0' from 'src' (none ready); at step 2 of 4");
  expect_in(r, "'join' (kernel, node 0, device 2, stream 0): waits for input 1 "
               "'acc.out0' from 'acc' (none ready); has 2 ready on input 0");
  expect_in(r, "'sink' (sink, node 0, device 0, stream 1): waits for input 0 "
               "'join.out0' from 'join' (none ready)");
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.messages_left, 0);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
  sl_logging_set_level(SL_LOGGING_WARN);
}

/* The same hang split over two nodes: both report their own actors. */
static void test_hang_across_nodes(void **state) {
  sl_actor_graph *p = hang_plan(0, 1);
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < 2; n++) {
    sl_job_config cfg = SL_JOB_CONFIG(.node = n, .hang_timeout_ms = 200,
                                      .transport = sl_loopback_transport(lb));
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  sl_logging_set_level(SL_LOGGING_OFF);
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_wait(jobs[n]), SL_EHANG);
  const char *r0 = sl_job_hang_report(jobs[0]),
             *r1 = sl_job_hang_report(jobs[1]);
  printf("%s%s", r0, r1);
  expect_in(r0, "on node 0");
  expect_in(
      r0, "'src' (source, node 0, device 0, stream 0): produced 2 of 8 pieces");
  expect_in(r0, "held by 'join'");
  expect_in(r1, "on node 1");
  expect_in(r1,
            "'join' (kernel, node 1, device 2, stream 0): waits for input 1");
  expect_in(r1, "'acc' (accumulate, node 1");
  for (int n = 0; n < 2; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(p);
  sl_logging_set_level(SL_LOGGING_WARN);
}

/* ---- no false positives ----------------------------------------------------
 */

static sl_status act_slow(sl_act *a) {
  sl__sleep_ns(300 * 1000000ull); /* 3x the hang timeout */
  return SL_OK;
}

typedef struct slow_job {
  sl_completion *c;
} slow_job;

static void *complete_slowly(void *arg) {
  sl_completion *c = arg;
  sl__sleep_ns(300 * 1000000ull);
  sl_completion_done(c, SL_OK);
  return NULL;
}

static sl_status act_slow_async(sl_act *a) {
  sl_completion *c = sl_act_defer(a);
  pthread_t t;
  if (pthread_create(&t, NULL, complete_slowly, c) != 0) return SL_EINTERNAL;
  pthread_detach(t);
  return SL_OK;
}

/* src -> slow -> sink, with `slow` on node `slow_node` (a second node when
 * 1, so node 0 sits idle while node 1 works). */
static void run_slow(sl_act_fn slow, uint32_t slow_node) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id s = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 2);
  sl_actor_id k =
      add_actor(p, "slow", SL_ACTOR_KERNEL, slow_node, 1, 0, slow, NULL, 0);
  connect_to(p, add_out(p, s, 1, 8), k);
  connect_to(p, add_out(p, k, 1, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 2, 0, NULL, NULL, 0));
  uint32_t nodes = slow_node + 1;
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(nodes, &lb), SL_OK);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < nodes; n++) {
    sl_job_config cfg = SL_JOB_CONFIG(.node = n, .hang_timeout_ms = 100,
                                      .transport = sl_loopback_transport(lb));
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  for (uint32_t n = 0; n < nodes; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  for (uint32_t n = 0; n < nodes; n++) {
    sl_status st = sl_job_wait(jobs[n]);
    if (st != SL_OK) fail_msg("node %u: %s", n, sl_last_error());
  }
  for (uint32_t n = 0; n < nodes; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(p);
}

static void test_slow_kernel_is_not_a_hang(void **state) {
  run_slow(act_slow, 0);
}

static void test_slow_deferred_work_is_not_a_hang(void **state) {
  run_slow(act_slow_async, 0);
}

static void test_slow_remote_node_is_not_a_hang(void **state) {
  run_slow(act_slow, 1);
  run_slow(act_slow_async, 1);
}

/* A transport without `quiescent` cannot tell a hang across nodes from a
 * slow peer, so it never declares one: here the job is aborted instead. */
static sl_transport inner;
static sl_status fwd_send(void *ctx, uint32_t node, const sl_msg *m,
                          const void *payload, size_t n) {
  return inner.vt->send(inner.ctx, node, m, payload, n);
}
static const sl_transport_vtable no_quiescent = {fwd_send, NULL};

static void *abort_later(void *arg) {
  sl__sleep_ns(600 * 1000000ull); /* 6x the hang timeout */
  sl_job_abort(arg, SL_ETIMEOUT);
  return NULL;
}

static void test_no_quiescent_no_hang_across_nodes(void **state) {
  sl_actor_graph *p = hang_plan(0, 1);
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  inner = sl_loopback_transport(lb);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < 2; n++) {
    sl_job_config cfg = SL_JOB_CONFIG(.node = n, .hang_timeout_ms = 100,
                                      .transport = {&no_quiescent, NULL});
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, abort_later, jobs[0]), 0);
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_wait(jobs[n]), SL_ETIMEOUT);
  pthread_join(t, NULL);
  for (int n = 0; n < 2; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(p);
}

/* ---- collective members waiting for their peers ---------------------------
 */

/* Two members of one collective per piece of src, as an in-process engine
 * runs them: `early` arrives, defers and waits for its peer; `late` (on
 * another device) arrives second, begins the round (early no longer
 * waits), does the work (slowly: 3x the hang timeout) and completes
 * early. */
static _Atomic(sl_completion *) g_early;

static sl_status act_early(sl_act *a) {
  sl_completion *c = sl_act_defer(a);
  sl_completion_waiting(c, true);
  atomic_store(&g_early, c);
  return SL_OK;
}

static sl_status act_late(sl_act *a) {
  sl_completion *c;
  while (!(c = atomic_exchange(&g_early, NULL)))
    sched_yield();
  sl_completion_waiting(c, false);
  sl__sleep_ns(300 * 1000000ull);
  sl_completion_done(c, SL_OK);
  return SL_OK;
}

/* src -> early -> sink, and src -> late -> sink when with_late. */
static sl_actor_graph *members_plan(bool with_late) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 2);
  int32_t s_out = add_out(p, src, 2, 8);
  sl_actor_id early =
      add_actor(p, "early", SL_ACTOR_KERNEL, 0, 1, 0, act_early, NULL, 0);
  connect_to(p, s_out, early);
  connect_to(p, add_out(p, early, 1, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 0, 1, NULL, NULL, 0));
  if (with_late) {
    sl_actor_id late =
        add_actor(p, "late", SL_ACTOR_KERNEL, 0, 2, 0, act_late, NULL, 0);
    connect_to(p, s_out, late);
    connect_to(p, add_out(p, late, 1, 8),
               add_actor(p, "sink2", SL_ACTOR_SINK, 0, 0, 1, NULL, NULL, 0));
  }
  assert_int_equal(sl_actor_graph_check(p), SL_OK);
  return p;
}

/* What an engine's abort does for a member still waiting: completes it. */
static void *complete_after_abort(void *arg) {
  sl_job *job = arg;
  while (sl_job_failure_origin(job) < 0)
    sl__sleep_ns(1000000);
  sl_completion *c;
  while (!(c = atomic_exchange(&g_early, NULL)))
    sl__sleep_ns(1000000);
  sl_completion_done(c, SL_EABORTED);
  return NULL;
}

/* The peer never comes: early waits with every stream asleep. Without
 * sl_completion_waiting this deferred firing would count as work and the
 * job would wait for it forever. */
static void test_member_without_peer_is_a_hang(void **state) {
  sl_actor_graph *p = members_plan(false);
  sl_job_config cfg = SL_JOB_CONFIG(.hang_timeout_ms = 200);
  sl_job *job;
  assert_int_equal(sl_job_create(p, &cfg, &job), SL_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, complete_after_abort, job), 0);
  sl_logging_set_level(SL_LOGGING_OFF);
  assert_int_equal(sl_job_run(job), SL_EHANG);
  pthread_join(t, NULL);
  const char *r = sl_job_hang_report(job);
  printf("%s", r);
  expect_in(r, "'early' (kernel, node 0, device 1, stream 0): deferred, "
               "waiting for other firings");
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
  sl_logging_set_level(SL_LOGGING_WARN);
}

/* The peer is slow: while it works, early's wait is no hang. */
static void test_member_with_slow_peer_is_not_a_hang(void **state) {
  sl_actor_graph *p = members_plan(true);
  sl_job_config cfg = SL_JOB_CONFIG(.hang_timeout_ms = 100);
  sl_status st = run_plan(p, &cfg, NULL);
  if (st != SL_OK) fail_msg("%s", sl_last_error());
  sl_actor_graph_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hang_report),
      cmocka_unit_test(test_hang_across_nodes),
      cmocka_unit_test(test_slow_kernel_is_not_a_hang),
      cmocka_unit_test(test_slow_deferred_work_is_not_a_hang),
      cmocka_unit_test(test_slow_remote_node_is_not_a_hang),
      cmocka_unit_test(test_no_quiescent_no_hang_across_nodes),
      cmocka_unit_test(test_member_without_peer_is_a_hang),
      cmocka_unit_test(test_member_with_slow_peer_is_not_a_hang),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
