/* Hang diagnosis: a real hang is reported with who waits on what; slow
 * kernels, slow deferred work and slow remote nodes are not hangs. */
#include <pthread.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hang_report),
      cmocka_unit_test(test_hang_across_nodes),
      cmocka_unit_test(test_slow_kernel_is_not_a_hang),
      cmocka_unit_test(test_slow_deferred_work_is_not_a_hang),
      cmocka_unit_test(test_slow_remote_node_is_not_a_hang),
      cmocka_unit_test(test_no_quiescent_no_hang_across_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
