/* Control plane: plans, jobs and results. Plan distribution (a node's
 * fetch waits for the submission), a job's life (start, reports, the first
 * failure naming its node, stop), waiting for a job's state, results. */
#include "cp_helpers.h"

typedef struct fetcher {
  sl__cp_client *c;
  uint64_t job;
  int node;
  sl_status st;
  uint8_t *plan;
  size_t len;
  char err[512];
} fetcher;

static void *fetch_thread(void *arg) {
  fetcher *f = arg;
  f->st = sl__cp_plan_fetch(f->c, f->job, f->node, LONG_MS, &f->plan, &f->len);
  snprintf(f->err, sizeof f->err, "%s", sl_last_error());
  return NULL;
}

typedef struct waiter {
  sl__cp_client *c;
  uint64_t job;
  sl__cp_job_state until;
  sl_status st;
  sl__cp_job_info info;
  char err[512];
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  w->st = sl__cp_job_status(w->c, w->job, w->until, LONG_MS, &w->info);
  snprintf(w->err, sizeof w->err, "%s", sl_last_error());
  return NULL;
}

static void submit(sl__cp_client *c, uint64_t job, int n, const char *tag) {
  char bufs[4][32];
  const uint8_t *plans[4];
  size_t lens[4];
  for (int i = 0; i < n; i++) {
    snprintf(bufs[i], sizeof bufs[i], "%s plan for node %d", tag, i);
    plans[i] = (const uint8_t *)bufs[i];
    lens[i] = strlen(bufs[i]);
  }
  CHECK_OK(sl__cp_plan_submit(c, job, n, plans, lens, LONG_MS));
}

static void check_plan(const uint8_t *plan, size_t len, const char *tag,
                       int node) {
  char want[32];
  snprintf(want, sizeof want, "%s plan for node %d", tag, node);
  assert_int_equal(len, strlen(want));
  assert_memory_equal(plan, want, len);
}

static sl__cp_job_info status_now(sl__cp_client *c, uint64_t job) {
  sl__cp_job_info info;
  CHECK_OK(sl__cp_job_status(c, job, SL__CP_JOB_NONE, LONG_MS, &info));
  assert_int_equal(info.job, job);
  return info;
}

static void test_plan_distribution(void **state) {
  (void)state;
  sl__cp_server *s = start_master(3, 5000);
  sl__cp_client *n[3];
  for (int i = 0; i < 3; i++)
    n[i] = join_node(s, i);
  sl__cp_client *prog = join_client(s, true);
  /* Nodes ask for their plans before the client submits them. */
  fetcher f[3];
  sl__thread t[3];
  for (int i = 0; i < 3; i++) {
    f[i] = (fetcher){n[i], 7, i, SL_OK, NULL, 0, ""};
    spawn(&t[i], fetch_thread, &f[i]);
  }
  sl__sleep_ns(50 * 1000000ull);
  submit(prog, 7, 3, "seven");
  for (int i = 0; i < 3; i++) {
    sl__thread_join(&t[i]);
    if (f[i].st != SL_OK)
      fail_msg("node %d: %s: %s", i, sl_status_str(f[i].st), f[i].err);
    check_plan(f[i].plan, f[i].len, "seven", i);
    sl__free(f[i].plan);
  }
  /* Any member may read any node's plan once submitted. */
  uint8_t *p;
  size_t len;
  CHECK_OK(sl__cp_plan_fetch(prog, 7, 2, LONG_MS, &p, &len));
  check_plan(p, len, "seven", 2);
  sl__free(p);
  CHECK_FAILS(sl__cp_plan_fetch(prog, 7, 3, LONG_MS, &p, &len), SL_EINVAL,
              "node 3 is outside 0..2");
  CHECK_FAILS(sl__cp_plan_fetch(prog, 8, 0, SHORT_MS, &p, &len), SL_ETIMEOUT,
              "PlanFetch");
  /* One plan per node, no more, no less. */
  const uint8_t *two[2] = {(const uint8_t *)"a", (const uint8_t *)"b"};
  size_t two_len[2] = {1, 1};
  CHECK_FAILS(sl__cp_plan_submit(prog, 9, 2, two, two_len, LONG_MS), SL_EINVAL,
              "2 plans for 3 nodes");
  /* A job not yet finished cannot be replaced. */
  CHECK_FAILS(sl__cp_plan_submit(
                  prog, 7, 3, (const uint8_t *const[]){two[0], two[0], two[0]},
                  (size_t[]){1, 1, 1}, LONG_MS),
              SL_ESTATE, "job 7 is submitted");
  for (int i = 0; i < 3; i++)
    sl__cp_client_destroy(n[i]);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

static void test_job_lifecycle(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 0), *b = join_node(s, 1);
  sl__cp_client *prog = join_client(s, true);
  sl__cp_job_info info;

  CHECK_FAILS(sl__cp_job_start(prog, 1, LONG_MS), SL_ENOTFOUND, "no job 1");
  CHECK_FAILS(sl__cp_job_status(prog, 1, SL__CP_JOB_NONE, LONG_MS, &info),
              SL_ENOTFOUND, "no job 1");
  /* A wait for a job that is not submitted yet waits for it. */
  waiter started = {a, 1, SL__CP_JOB_RUNNING, SL_OK, {0}, ""};
  waiter done = {prog, 1, SL__CP_JOB_SUCCEEDED, SL_OK, {0}, ""};
  sl__thread ts, td;
  spawn(&ts, wait_thread, &started);
  spawn(&td, wait_thread, &done);
  submit(prog, 1, 2, "one");
  info = status_now(prog, 1);
  assert_int_equal(info.state, SL__CP_JOB_SUBMITTED);
  CHECK_FAILS(sl__cp_job_report(a, 1, SL_OK, "", LONG_MS), SL_ESTATE,
              "has not started");
  CHECK_OK(sl__cp_job_start(prog, 1, LONG_MS));
  sl__thread_join(&ts);
  assert_int_equal(started.st, SL_OK);
  assert_int_equal(started.info.state, SL__CP_JOB_RUNNING);
  CHECK_FAILS(sl__cp_job_start(prog, 1, LONG_MS), SL_ESTATE, "is running");
  CHECK_FAILS(sl__cp_job_report(prog, 1, SL_OK, "", LONG_MS), SL_EINVAL,
              "only nodes report");
  CHECK_OK(sl__cp_result_put(a, 1, "loss", "0.25", 4, LONG_MS));
  CHECK_OK(sl__cp_job_report(a, 1, SL_OK, "", LONG_MS));
  /* Reporting twice counts once. */
  CHECK_OK(sl__cp_job_report(a, 1, SL_OK, "", LONG_MS));
  info = status_now(prog, 1);
  assert_int_equal(info.state, SL__CP_JOB_RUNNING);
  assert_int_equal(info.reported, 1);
  CHECK_OK(sl__cp_job_report(b, 1, SL_OK, "", LONG_MS));
  sl__thread_join(&td);
  if (done.st != SL_OK) fail_msg("%s: %s", sl_status_str(done.st), done.err);
  assert_int_equal(done.info.state, SL__CP_JOB_SUCCEEDED);
  assert_int_equal(done.info.status, SL_OK);
  assert_int_equal(done.info.failed_node, -1);
  assert_int_equal(done.info.reported, 2);
  uint8_t *v;
  size_t len;
  CHECK_OK(sl__cp_result_get(prog, 1, "loss", LONG_MS, &v, &len));
  assert_int_equal(len, 4);
  assert_memory_equal(v, "0.25", 4);
  sl__free(v);
  CHECK_FAILS(sl__cp_result_get(prog, 1, "acc", LONG_MS, &v, &len),
              SL_ENOTFOUND, "succeeded without a result 'acc'");

  /* Job 2: node 1 fails; the first failure wins and names the node; a
   * later success report changes nothing. */
  submit(prog, 2, 2, "two");
  CHECK_OK(sl__cp_job_start(prog, 2, LONG_MS));
  CHECK_OK(
      sl__cp_job_report(b, 2, SL_EINVAL, "matmul 'mm': bad shape", LONG_MS));
  CHECK_OK(sl__cp_job_report(a, 2, SL_EIO, "disk full", LONG_MS));
  CHECK_OK(sl__cp_job_report(a, 2, SL_OK, "", LONG_MS));
  CHECK_OK(sl__cp_job_status(prog, 2, SL__CP_JOB_SUCCEEDED, LONG_MS, &info));
  assert_int_equal(info.state, SL__CP_JOB_FAILED);
  assert_int_equal(info.status, SL_EINVAL);
  assert_int_equal(info.failed_node, 1);
  assert_non_null(strstr(info.message, "node 1 failed"));
  assert_non_null(strstr(info.message, "bad shape"));
  assert_null(strstr(info.message, "disk full"));
  /* A result that never came: the get reports the job's failure. */
  CHECK_FAILS(sl__cp_result_get(prog, 2, "loss", LONG_MS, &v, &len), SL_EINVAL,
              "bad shape");

  /* Job 3: stopped by the client. */
  submit(prog, 3, 2, "three");
  CHECK_OK(sl__cp_job_start(prog, 3, LONG_MS));
  CHECK_OK(sl__cp_job_stop(prog, 3, "user pressed ^C", LONG_MS));
  info = status_now(a, 3);
  assert_int_equal(info.state, SL__CP_JOB_STOPPED);
  assert_int_equal(info.status, SL_EABORTED);
  assert_non_null(strstr(info.message, "user pressed ^C"));
  /* Stopping a finished job leaves it as it is. */
  CHECK_OK(sl__cp_job_stop(prog, 1, "late", LONG_MS));
  assert_int_equal(status_now(prog, 1).state, SL__CP_JOB_SUCCEEDED);

  /* A finished job's id can be used again. */
  submit(prog, 2, 2, "again");
  uint8_t *p;
  CHECK_OK(sl__cp_plan_fetch(b, 2, 1, LONG_MS, &p, &len));
  check_plan(p, len, "again", 1);
  sl__free(p);
  assert_int_equal(status_now(prog, 2).state, SL__CP_JOB_SUBMITTED);
  assert_int_equal(stats_of(s).jobs_failed, 1);

  sl__cp_client_destroy(a);
  sl__cp_client_destroy(b);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

typedef struct result_waiter {
  sl__cp_client *c;
  uint64_t job;
  const char *key;
  sl_status st;
  uint8_t *v;
  size_t len;
  char err[512];
} result_waiter;

static void *result_thread(void *arg) {
  result_waiter *r = arg;
  r->st = sl__cp_result_get(r->c, r->job, r->key, LONG_MS, &r->v, &r->len);
  snprintf(r->err, sizeof r->err, "%s", sl_last_error());
  return NULL;
}

/* A result get waits for the put, or for the job to end without it. */
static void test_results_wait(void **state) {
  (void)state;
  sl__cp_server *s = start_master(1, 5000);
  sl__cp_client *a = join_node(s, 0);
  sl__cp_client *prog = join_client(s, true);
  submit(prog, 5, 1, "five");
  CHECK_OK(sl__cp_job_start(prog, 5, LONG_MS));
  result_waiter r1 = {prog, 5, "logits", SL_OK, NULL, 0, ""};
  result_waiter r2 = {prog, 5, "never", SL_OK, NULL, 0, ""};
  sl__thread t1, t2;
  spawn(&t1, result_thread, &r1);
  spawn(&t2, result_thread, &r2);
  sl__sleep_ns(50 * 1000000ull);
  CHECK_OK(sl__cp_result_put(a, 5, "logits", "abc", 3, LONG_MS));
  sl__thread_join(&t1);
  if (r1.st != SL_OK) fail_msg("%s: %s", sl_status_str(r1.st), r1.err);
  assert_int_equal(r1.len, 3);
  assert_memory_equal(r1.v, "abc", 3);
  sl__free(r1.v);
  CHECK_OK(sl__cp_job_report(a, 5, SL_ECOMM, "peer vanished", LONG_MS));
  sl__thread_join(&t2);
  assert_int_equal(r2.st, SL_ECOMM);
  assert_non_null(strstr(r2.err, "peer vanished"));
  CHECK_FAILS(sl__cp_result_put(a, 6, "x", "y", 1, LONG_MS), SL_ENOTFOUND,
              "no job 6");
  sl__cp_client_destroy(a);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

/* A job cannot start while a node is missing; a client that goes away
 * stops the jobs it submitted. */
static void test_job_needs_nodes(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, 5000);
  sl__cp_client *a = join_node(s, 0);
  sl__cp_client *prog = join_client(s, false);
  submit(prog, 1, 2, "one");
  CHECK_FAILS(sl__cp_job_start(prog, 1, LONG_MS), SL_ECOMM,
              "node 1 is not connected");
  sl__cp_client *b = join_node(s, 1);
  CHECK_OK(sl__cp_job_start(prog, 1, LONG_MS));
  sl__cp_client_destroy(prog);
  sl__cp_job_info info = status_now(a, 1);
  assert_int_equal(info.state, SL__CP_JOB_STOPPED);
  assert_non_null(strstr(info.message, "client that submitted it is gone"));
  sl__cp_client_destroy(a);
  sl__cp_client_destroy(b);
  sl__cp_server_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_distribution),
      cmocka_unit_test(test_job_lifecycle),
      cmocka_unit_test(test_results_wait),
      cmocka_unit_test(test_job_needs_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
