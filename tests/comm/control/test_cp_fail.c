/* Control plane: failures. A daemon that hangs (SIGSTOP) or dies (SIGKILL)
 * mid-job fails the job, naming the node, for the client and the other
 * daemons, fails the barrier they wait at, and the master takes a new node
 * in its place and runs the next job. Malformed, truncated and forged
 * messages are refused with a clear error while the master keeps serving. A
 * client whose master is gone learns it from its heartbeats. */
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include "cp_helpers.h"

extern char **environ;

/* Short, so the tests are quick; not so short that a heartbeat thread
 * starved on a loaded machine (sanitizers) loses a healthy node. */
#define HB_TIMEOUT_MS 1000

/* ---- helper daemons (tests/comm/control/cp_node_helper.c) ------------ */

static pid_t helpers[8];
static int n_helpers;

static pid_t start_helper(sl__cp_server *s, int rank, uint64_t first_job,
                          int njobs) {
  char addr[64], r[16], fj[32], nj[16];
  master_addr(s, addr, sizeof addr);
  snprintf(r, sizeof r, "%d", rank);
  snprintf(fj, sizeof fj, "%llu", (unsigned long long)first_job);
  snprintf(nj, sizeof nj, "%d", njobs);
  char *argv[] = {CP_NODE_HELPER, addr, TOKEN, r, fj, nj, NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, CP_NODE_HELPER, NULL, NULL, argv, environ);
  if (rc != 0) fail_msg("posix_spawn %s: %s", CP_NODE_HELPER, strerror(rc));
  helpers[n_helpers++] = pid;
  return pid;
}

static void kill_helper(pid_t pid) {
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  for (int i = 0; i < n_helpers; i++)
    if (helpers[i] == pid) helpers[i] = helpers[--n_helpers];
}

/* After a failed assertion: no helper outlives its test. */
static int kill_helpers(void **state) {
  (void)state;
  while (n_helpers)
    kill_helper(helpers[0]);
  return 0;
}

static void submit2(sl__cp_client *c, uint64_t job) {
  char p0[32], p1[32];
  snprintf(p0, sizeof p0, "job %llu node 0", (unsigned long long)job);
  snprintf(p1, sizeof p1, "job %llu node 1", (unsigned long long)job);
  const uint8_t *plans[2] = {(const uint8_t *)p0, (const uint8_t *)p1};
  size_t lens[2] = {strlen(p0), strlen(p1)};
  CHECK_OK(sl__cp_plan_submit(c, job, 2, plans, lens, LONG_MS));
}

/* Runs job `job` with node 0 here and a helper as node 1, to success. */
static void run_job_ok(sl__cp_client *prog, sl__cp_client *n0, uint64_t job) {
  submit2(prog, job);
  CHECK_OK(sl__cp_job_start(prog, job, LONG_MS));
  CHECK_OK(sl__cp_job_report(n0, job, SL_OK, "", LONG_MS));
  sl__cp_job_info info;
  CHECK_OK(sl__cp_job_status(prog, job, SL__CP_JOB_SUCCEEDED, LONG_MS, &info));
  if (info.state != SL__CP_JOB_SUCCEEDED)
    fail_msg("job %llu: %s: %s", (unsigned long long)job,
             sl__cp_job_state_name(info.state), info.message);
  uint8_t *v;
  size_t len;
  CHECK_OK(sl__cp_result_get(prog, job, "rank1", LONG_MS, &v, &len));
  char want[32];
  snprintf(want, sizeof want, "job %llu node 1", (unsigned long long)job);
  assert_int_equal(len, strlen(want));
  assert_memory_equal(v, want, len);
  sl__free(v);
}

/* The job failed because node 1 was lost, as everyone sees it. */
static void check_lost(sl__cp_client *c, uint64_t job) {
  sl__cp_job_info info;
  CHECK_OK(sl__cp_job_status(c, job, SL__CP_JOB_SUCCEEDED, LONG_MS, &info));
  assert_int_equal(info.state, SL__CP_JOB_FAILED);
  assert_int_equal(info.status, SL_ECOMM);
  assert_int_equal(info.failed_node, 1);
  if (!strstr(info.message, "node 1 lost"))
    fail_msg("job %llu: message '%s'", (unsigned long long)job, info.message);
}

/* Node 1 hangs in the middle of job 1: the job fails naming it, once its
 * heartbeats stop; a new node 1 joins and job 2 runs. */
static void test_node_hangs(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, HB_TIMEOUT_MS);
  sl__cp_client *n0 = join_node(s, 0);
  pid_t h = start_helper(s, 1, 2, 1); /* serves job 2, not job 1 */
  sl__cp_client *prog = join_client(s, true);
  submit2(prog, 1);
  CHECK_OK(sl__cp_job_start(prog, 1, LONG_MS));
  CHECK_OK(sl__cp_job_report(n0, 1, SL_OK, "", LONG_MS));
  kill(h, SIGSTOP);
  check_lost(prog, 1);
  check_lost(n0, 1);
  assert_int_equal(stats_of(s).nodes_lost, 1);
  /* The hung process's session is over, whatever it does next. */
  kill_helper(h);
  start_helper(s, 1, 2, 1);
  sl__cp_members tab;
  CHECK_OK(sl__cp_members_get(prog, true, LONG_MS, &tab));
  assert_int_equal(tab.m[1].state, SL__CP_MEMBER_LIVE);
  sl__cp_members_free(&tab);
  run_job_ok(prog, n0, 2);
  kill_helpers(NULL);
  sl__cp_client_destroy(n0);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

typedef struct barrier_wait {
  sl__cp_client *c;
  sl_status st;
  char err[512];
} barrier_wait;

static void *barrier_thread(void *arg) {
  barrier_wait *b = arg;
  b->st = sl__cp_barrier(b->c, "after-step", LONG_MS);
  snprintf(b->err, sizeof b->err, "%s", sl_last_error());
  return NULL;
}

/* Node 1 is killed while node 0 waits at a barrier during job 1: the
 * barrier and the job fail naming node 1; the master runs job 2 with a new
 * node 1. */
static void test_node_killed(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, HB_TIMEOUT_MS);
  sl__cp_client *n0 = join_node(s, 0);
  pid_t h = start_helper(s, 1, 2, 1);
  sl__cp_client *prog = join_client(s, true);
  submit2(prog, 1);
  CHECK_OK(sl__cp_job_start(prog, 1, LONG_MS));
  barrier_wait bw = {n0, SL_OK, ""};
  sl__thread t;
  spawn(&t, barrier_thread, &bw);
  kill_helper(h);
  sl__thread_join(&t);
  assert_int_equal(bw.st, SL_ECOMM);
  if (!strstr(bw.err, "node 1 lost") && !strstr(bw.err, "node 1 is lost"))
    fail_msg("barrier: %s", bw.err);
  check_lost(prog, 1);
  /* A job cannot start without node 1. */
  submit2(prog, 2);
  CHECK_FAILS(sl__cp_job_start(prog, 2, LONG_MS), SL_ECOMM, "node 1 is lost");
  start_helper(s, 1, 3, 1);
  sl__cp_members tab;
  CHECK_OK(sl__cp_members_get(prog, true, LONG_MS, &tab));
  sl__cp_members_free(&tab);
  run_job_ok(prog, n0, 3);
  kill_helpers(NULL);
  sl__cp_client_destroy(n0);
  sl__cp_client_destroy(prog);
  sl__cp_server_destroy(s);
}

/* A node whose heartbeats stop is declared lost; its later calls are
 * refused until it joins again. A client that goes silent stops the job it
 * submitted. */
static void test_silent_members(void **state) {
  (void)state;
  sl__cp_server *s = start_master(2, HB_TIMEOUT_MS);
  sl__cp_client *n0 = join_node(s, 0), *n1 = join_node(s, 1);
  sl__cp_client *prog = join_client(s, true);
  submit2(prog, 1);
  CHECK_OK(sl__cp_job_start(prog, 1, LONG_MS));
  sl__cp_client_stop_heartbeat(n1);
  check_lost(n0, 1);
  CHECK_FAILS(sl__cp_kv_put(n1, "k", "v", 1, LONG_MS), SL_EAUTH,
              "node 1 was declared lost");
  sl__cp_client_destroy(n1);
  n1 = join_node(s, 1);
  submit2(prog, 2);
  CHECK_OK(sl__cp_job_start(prog, 2, LONG_MS));
  sl__cp_client_stop_heartbeat(prog);
  sl__cp_job_info info;
  CHECK_OK(sl__cp_job_status(n0, 2, SL__CP_JOB_SUCCEEDED, LONG_MS, &info));
  assert_int_equal(info.state, SL__CP_JOB_STOPPED);
  assert_int_equal(info.status, SL_EABORTED);
  assert_non_null(strstr(info.message, "client that submitted it is gone"));
  assert_non_null(strstr(info.message, "lost"));
  sl__cp_client_destroy(prog);
  sl__cp_client_destroy(n0);
  sl__cp_client_destroy(n1);
  sl__cp_server_destroy(s);
}

/* The master goes away: the client's heartbeats notice, and calls fail
 * with a clear error rather than hanging. */
static void test_master_gone(void **state) {
  (void)state;
  sl__cp_server *s = start_master(1, HB_TIMEOUT_MS);
  sl__cp_client *n0 = join_node(s, 0);
  CHECK_OK(sl__cp_client_health(n0));
  sl__cp_server_destroy(s);
  sl_status h = SL_OK;
  for (int i = 0; i < LONG_MS / 10 && h == SL_OK; i++) {
    sl__sleep_ns(10 * 1000000ull);
    h = sl__cp_client_health(n0);
  }
  assert_int_not_equal(h, SL_OK);
  assert_non_null(strstr(sl_last_error(), "Heartbeat"));
  sl_status st = sl__cp_kv_put(n0, "k", "v", 1, SHORT_MS);
  assert_true(st == SL_ECOMM || st == SL_ETIMEOUT);
  sl__cp_client_destroy(n0);
}

/* ---- malformed and forged messages ------------------------------------- */

static void test_malformed(void **state) {
  (void)state;
  sl__cp_server *s = start_master(1, 5000);
  sl__cp_client *c = join_node(s, 0);
  uint8_t *rep = NULL;
  size_t rep_len;
  const sl__cp_method_desc *kv_get = &sl__cp_methods[SL__CP_KV_GET];

  /* Not an envelope at all. */
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12};
  CHECK_FAILS(sl__cp_client_rpc(c, kv_get->path, junk, sizeof junk, LONG_MS,
                                &rep, &rep_len),
              SL_EINVAL, "malformed Envelope");
  /* A truncated envelope: a body field promising more bytes than follow. */
  static const uint8_t cut[] = {0x08, 0x01, 0x22, 0x40, 'a', 'b'};
  CHECK_FAILS(sl__cp_client_rpc(c, kv_get->path, cut, sizeof cut, LONG_MS, &rep,
                                &rep_len),
              SL_EINVAL, "do not decode");
  /* An envelope whose MAC has the wrong length. */
  static const uint8_t short_mac[] = {0x08, 0x01, 0x1a, 0x02, 0x00, 0x00};
  CHECK_FAILS(sl__cp_client_rpc(c, kv_get->path, short_mac, sizeof short_mac,
                                LONG_MS, &rep, &rep_len),
              SL_EINVAL, "Envelope.mac: 2 bytes, expected 32");
  /* A valid envelope around a body that does not decode. */
  CHECK_FAILS(sl__cp_client_send(c, SL__CP_KV_GET, junk, sizeof junk, true,
                                 LONG_MS, &rep, &rep_len),
              SL_EINVAL, "malformed KvGet");
  /* ... or decodes to something out of range. */
  Sluice__Cp__JobStatusRequest bad = SLUICE__CP__JOB_STATUS_REQUEST__INIT;
  bad.job = 1;
  bad.until = (Sluice__Cp__JobState)9;
  uint8_t *body;
  size_t len;
  CHECK_OK(sl__cp_pack(&bad.base, &body, &len));
  CHECK_FAILS(sl__cp_client_send(c, SL__CP_JOB_STATUS, body, len, true, LONG_MS,
                                 &rep, &rep_len),
              SL_EINVAL, "JobStatusRequest.until: 9 is outside");
  sl__free(body);
  /* An empty message is an empty envelope: no credentials. */
  CHECK_FAILS(
      sl__cp_client_rpc(c, kv_get->path, NULL, 0, LONG_MS, &rep, &rep_len),
      SL_EAUTH, "unknown");
  /* ... and for Hello, protocol 0. */
  CHECK_FAILS(sl__cp_client_rpc(c, sl__cp_methods[SL__CP_HELLO].path, NULL, 0,
                                LONG_MS, &rep, &rep_len),
              SL_EUNSUPPORTED, "version mismatch");
  /* A method this protocol does not have. */
  CHECK_FAILS(sl__cp_client_rpc(c, "/sluice.cp.Control/Reboot", junk,
                                sizeof junk, LONG_MS, &rep, &rep_len),
              SL_EUNSUPPORTED, "no method '/sluice.cp.Control/Reboot'");
  assert_null(rep);
  assert_true(stats_of(s).malformed >= 6);

  /* Forged credentials: an unknown member, and a known member with a MAC
   * that is not its session's. (Member ids start at 1: c is member 1.) */
  Sluice__Cp__KvGet q = SLUICE__CP__KV_GET__INIT;
  q.key = "k";
  CHECK_OK(sl__cp_pack(&q.base, &body, &len));
  uint8_t mac[SL__CP_MAC_BYTES];
  memset(mac, 0x5a, sizeof mac);
  Sluice__Cp__Envelope env = SLUICE__CP__ENVELOPE__INIT;
  env.member = 99;
  env.counter = 1;
  env.mac.data = mac;
  env.mac.len = sizeof mac;
  env.body.data = body;
  env.body.len = len;
  uint8_t *ebuf;
  size_t elen;
  CHECK_OK(sl__cp_pack(&env.base, &ebuf, &elen));
  CHECK_FAILS(
      sl__cp_client_rpc(c, kv_get->path, ebuf, elen, LONG_MS, &rep, &rep_len),
      SL_EAUTH, "member 99 is unknown");
  sl__free(ebuf);
  env.member = 1;
  CHECK_OK(sl__cp_pack(&env.base, &ebuf, &elen));
  CHECK_FAILS(
      sl__cp_client_rpc(c, kv_get->path, ebuf, elen, LONG_MS, &rep, &rep_len),
      SL_EAUTH, "credentials of node 0 do not match");
  sl__free(ebuf);
  sl__free(body);
  /* A Join with made-up credentials and a nonce the master never issued. */
  Sluice__Cp__JoinRequest j = SLUICE__CP__JOIN_REQUEST__INIT;
  uint8_t nonce[SL__CP_NONCE_BYTES] = {1};
  j.protocol = SL__CP_PROTOCOL;
  j.server_nonce.data = j.client_nonce.data = nonce;
  j.server_nonce.len = j.client_nonce.len = sizeof nonce;
  CHECK_OK(sl__cp_pack(&j.base, &body, &len));
  CHECK_OK(sl__cp_mac((const uint8_t *)TOKEN, strlen(TOKEN), SL__CP_MAC_JOIN,
                      SL__CP_JOIN, 0, 0, body, len, mac));
  env = (Sluice__Cp__Envelope)SLUICE__CP__ENVELOPE__INIT;
  env.mac.data = mac;
  env.mac.len = sizeof mac;
  env.body.data = body;
  env.body.len = len;
  CHECK_OK(sl__cp_pack(&env.base, &ebuf, &elen));
  CHECK_FAILS(sl__cp_client_rpc(c, sl__cp_methods[SL__CP_JOIN].path, ebuf, elen,
                                LONG_MS, &rep, &rep_len),
              SL_EAUTH, "nonce is unknown");
  sl__free(ebuf);
  sl__free(body);
  assert_true(stats_of(s).auth_refused >= 4);

  /* Through all of it the master kept serving. */
  CHECK_OK(sl__cp_kv_put(c, "still", "here", 4, LONG_MS));
  uint8_t *v;
  CHECK_OK(sl__cp_kv_get(c, "still", false, LONG_MS, &v, &len));
  assert_memory_equal(v, "here", 4);
  sl__free(v);
  sl__cp_client *c2 = join_client(s, true);
  sl__cp_client_destroy(c2);
  sl__cp_client_destroy(c);
  sl__cp_server_destroy(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_node_hangs, kill_helpers),
      cmocka_unit_test_teardown(test_node_killed, kill_helpers),
      cmocka_unit_test(test_silent_members),
      cmocka_unit_test(test_master_gone),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
