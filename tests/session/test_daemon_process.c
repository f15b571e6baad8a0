/* `sluice daemon` and `sluice launch` as processes, with the mlp example
 * as the program: under `sluice launch` it prints the embedded session's
 * losses, the launcher returns the program's status and prefixes the
 * daemons' logs; a daemon SIGKILLed in the middle of a job fails the
 * program with an error naming the node, and once it is restarted the
 * cluster runs the next program. Waits are bounded (the guards below only
 * stop a broken run; no test measures a duration). */
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_run.h"
#include "cp.h"
#include "session_helpers.h"

#define GUARD_S 120

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  char *buf = calloc(1, 1 << 20);
  size_t n = fread(buf, 1, (1 << 20) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Every process started, so that a failed test leaves none behind. */
static pid_t spawned[16];
static int n_spawned;

static int kill_spawned(void **state) {
  (void)state;
  for (int i = 0; i < n_spawned; i++)
    if (waitpid(spawned[i], NULL, WNOHANG) == 0) {
      kill(spawned[i], SIGKILL);
      waitpid(spawned[i], NULL, 0);
    }
  n_spawned = 0;
  return 0;
}

/* "NAME=value" settings the children started from now on get on top of
 * this process's environment, NULL-ended. They are put in the child after
 * the fork: this process (its control-plane threads read the environment
 * at any time) never writes its own. */
static const char *child_env[4];

static void child_env_set(const char *a, const char *b) {
  child_env[0] = a;
  child_env[1] = a ? b : NULL;
  child_env[2] = NULL;
}

/* In the child, before exec. */
static void child_env_put(void) {
  for (int i = 0; child_env[i]; i++)
    putenv((char *)child_env[i]);
}

/* Starts argv with stdout and stderr appended to path. */
static pid_t spawn(const char *const *argv, const char *path) {
  pid_t pid = fork();
  if (pid == 0) {
    child_env_put();
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  assert_true(pid > 0);
  if (n_spawned < 16) spawned[n_spawned++] = pid;
  return pid;
}

/* Waits for pid (at most GUARD_S); its status, 128+signal when killed;
 * -1, once it is killed, when it outlived the guard. */
static int wait_guarded(pid_t pid) {
  for (int i = 0; i < GUARD_S * 10; i++) {
    int ws;
    if (waitpid(pid, &ws, WNOHANG) == pid)
      return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    usleep(100 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

static int wait_for(pid_t pid) {
  int st = wait_guarded(pid);
  if (st < 0) fail_msg("process %d did not end within the guard", (int)pid);
  return st;
}

/* Runs argv to its end, as cli_run does, but at most GUARD_S: a run that
 * hangs (sluice launch waits for its program, which waits for the
 * daemons) fails the test with its output instead of outliving ctest's
 * timeout. Children of sluice launch die with it (PR_SET_PDEATHSIG). */
static void run_guarded(const char *const *argv, cli_result *r) {
  char out[] = "/tmp/sl-out-XXXXXX", err[] = "/tmp/sl-err-XXXXXX";
  int fo = mkstemp(out), fe = mkstemp(err);
  assert_true(fo >= 0 && fe >= 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    child_env_put();
    dup2(fo, 1);
    dup2(fe, 2);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fo);
  close(fe);
  assert_true(pid > 0);
  r->status = wait_guarded(pid);
  r->out = slurp(out);
  r->err = slurp(err);
  unlink(out);
  unlink(err);
  if (r->status < 0)
    fail_msg("%s did not end within the guard; stdout:\n%s\nstderr:\n%s",
             argv[0], r->out, r->err);
}

static bool wait_text(const char *path, const char *text) {
  for (int i = 0; i < GUARD_S * 10; i++) {
    char *s = slurp(path);
    bool found = strstr(s, text) != NULL;
    free(s);
    if (found) return true;
    usleep(100 * 1000);
  }
  return false;
}

/* The "step N loss X" lines of an output. */
static void losses(const char *out, char *buf, size_t n) {
  buf[0] = '\0';
  for (const char *p = strstr(out, "step "); p; p = strstr(p + 1, "step ")) {
    if (p != out && p[-1] != '\n') continue;
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p + 1) : strlen(p);
    strncat(buf, p, SL_MIN(len, n - strlen(buf) - 1));
  }
}

static void test_launch_mlp_equals_embedded(void **state) {
  (void)state;
  const char *mlp[] = {SLUICE_MLP_PATH, "--devices", "cpu:0/0-1", "--layout",
                       "dp", "--steps", "4", "--hidden", "64", NULL};
  cli_result a, b;
  run_guarded(mlp, &a);
  assert_int_equal(a.status, 0);
  const char *launch[] = {SLUICE_CLI_PATH, "launch", "--nnodes", "2",
                          "--devices", "cpu:2", "--", SLUICE_MLP_PATH,
                          "--devices", "cpu:0/0-1", "--layout", "dp",
                          "--steps", "4", "--hidden", "64", NULL};
  run_guarded(launch, &b);
  printf("launch stdout:\n%s\nlaunch stderr:\n%s\n", b.out, b.err);
  assert_int_equal(b.status, 0);
  char la[4096], lb[4096];
  losses(a.out, la, sizeof la);
  losses(b.out, lb, sizeof lb);
  assert_true(strlen(la) > 0);
  assert_string_equal(la, lb);
  assert_non_null(strstr(b.err, "[node 0] sluice daemon 0: job 1: succeeded"));
  assert_non_null(strstr(b.err, "[node 1] sluice daemon 1: job 1: succeeded"));
  assert_non_null(strstr(b.err, "[node 1] sluice daemon 1: stopped"));
  /* The daemons share the CPUs out: each names its own part (one range
   * where the part's CPUs are consecutive). */
  cpu_set_t all;
  assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
  int cpus[CPU_SETSIZE], n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &all)) cpus[n++] = c;
  for (int r = 0; r < 2 && n >= 2; r++) {
    int lo = n * r / 2, hi = n * (r + 1) / 2 - 1;
    char want[96], part[64];
    snprintf(want, sizeof want, "[node %d] sluice daemon %d: node %d of 2, ", r,
             r, r);
    if (hi == lo)
      snprintf(part, sizeof part, "CPUs %d\n", cpus[lo]);
    else
      snprintf(part, sizeof part, "CPUs %d-%d\n", cpus[lo], cpus[hi]);
    const char *line = strstr(b.err, want);
    assert_non_null(line);
    const char *got = strstr(line, "CPUs "), *end = strchr(line, '\n');
    assert_true(got && end && got < end);
    if (cpus[hi] - cpus[lo] == hi - lo)
      assert_memory_equal(got, part, strlen(part));
  }
  cli_result_free(&a);
  cli_result_free(&b);
}

static void test_launch_status_and_flags(void **state) {
  (void)state;
  cli_result r;
  const char *exit7[] = {SLUICE_CLI_PATH, "launch", "--nnodes", "1",
                         "--devices", "cpu:1", "--", "/bin/sh", "-c",
                         "test -n \"$SLUICE_MASTER\" && exit 7", NULL};
  run_guarded(exit7, &r);
  assert_int_equal(r.status, 7);
  cli_result_free(&r);
  const char *bad[] = {SLUICE_CLI_PATH, "launch", "--nnodes", "0",
                       "--devices", "cpu:1", "--", "/bin/true", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, bad, &r), 0);
  assert_int_equal(r.status, 2);
  cli_result_free(&r);
  const char *noprog[] = {SLUICE_CLI_PATH, "launch", "--nnodes", "1",
                          "--devices", "cpu:1", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, noprog, &r), 0);
  assert_int_equal(r.status, 2);
  cli_result_free(&r);
  const char *dbad[] = {SLUICE_CLI_PATH, "daemon", "--node-rank", "x", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, dbad, &r), 0);
  assert_int_equal(r.status, 2);
  cli_result_free(&r);
  const char *help[] = {SLUICE_CLI_PATH, "daemon", "--help", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, help, &r), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "--node-rank"));
  cli_result_free(&r);
}

static void test_daemon_killed_mid_job(void **state) {
  (void)state;
  char master[64], d0log[] = "/tmp/sl-d0-XXXXXX",
                             d1log[] = "/tmp/sl-d1-XXXXXX",
                             plog[] = "/tmp/sl-prog-XXXXXX";
  close(mkstemp(d0log));
  close(mkstemp(d1log));
  close(mkstemp(plog));
  /* The master in this process (as sluice launch hosts it), so that the
   * daemons may die in any order; --external-master tells rank 0. */
  sl__cp_server_opts so = {0};
  so.nnodes = 2;
  so.token = "process-test-token";
  so.heartbeat_timeout_ms = 2000;
  sl__cp_server *srv = NULL;
  assert_int_equal(sl__cp_server_create(&so, &srv), SL_OK);
  snprintf(master, sizeof master, "127.0.0.1:%d", sl__cp_server_port(srv));
  char master_env[80];
  snprintf(master_env, sizeof master_env, "SLUICE_MASTER=%s", master);
  child_env_set("SLUICE_TOKEN=process-test-token", NULL);
  const char *d0[] = {SLUICE_CLI_PATH, "daemon", "--master", master,
                      "--node-rank", "0", "--nnodes", "2", "--devices",
                      "cpu:2", "--external-master", NULL};
  const char *d1[] = {SLUICE_CLI_PATH, "daemon", "--master", master,
                      "--node-rank", "1", "--nnodes", "2", "--devices",
                      "cpu:2", NULL};
  pid_t p0 = spawn(d0, d0log), p1 = spawn(d1, d1log);
  child_env_set("SLUICE_TOKEN=process-test-token", master_env);
  /* A long job on node 1; node 1 is killed once steps are coming. */
  const char *prog[] = {SLUICE_MLP_PATH, "--devices", "cpu:1/0-1", "--layout",
                        "dp", "--steps", "100000000", "--hidden", "64", NULL};
  pid_t pp = spawn(prog, plog);
  assert_true(wait_text(plog, "step 3 "));
  kill(p1, SIGKILL);
  waitpid(p1, NULL, 0);
  int st = wait_for(pp);
  char *out = slurp(plog);
  printf("program (status %d):\n%s\n", st, out);
  assert_int_equal(st, 1);
  assert_non_null(strstr(out, "node 1"));
  free(out);
  /* Node 1 restarted (it waits for the master to declare the old one
   * lost); the next program runs on node 0 and finishes. */
  p1 = spawn(d1, d1log);
  const char *next[] = {SLUICE_MLP_PATH, "--devices", "cpu:0/0-1",
                        "--layout", "dp", "--steps", "3", "--hidden", "64",
                        NULL};
  cli_result r;
  run_guarded(next, &r);
  printf("next program (status %d):\n%s%s\n", r.status, r.out, r.err);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "step 2 loss"));
  cli_result_free(&r);
  child_env_set(NULL, NULL);
  kill(p1, SIGTERM);
  kill(p0, SIGTERM);
  int s1 = wait_for(p1), s0 = wait_for(p0);
  char *l0 = slurp(d0log), *l1 = slurp(d1log);
  printf("daemon 0 (status %d):\n%s\ndaemon 1 (status %d):\n%s\n", s0, l0,
         s1, l1);
  assert_int_equal(s1, 0);
  assert_int_equal(s0, 0);
  assert_non_null(strstr(l0, "job 2: succeeded"));
  assert_non_null(strstr(l1, "sluice daemon 1: job 2: succeeded"));
  free(l0);
  free(l1);
  unlink(d0log);
  unlink(d1log);
  unlink(plog);
  sl__cp_server_destroy(srv);
}

/* SLUICE_TRACE under `sluice launch`: one file at the path the program
 * asked for, with every node's firings (each daemon's through the control
 * plane, the program's own as node 2), and no part left beside it. */
static void test_launch_trace_merges_nodes(void **state) {
  (void)state;
  char path[] = "/tmp/sl-trace-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  char own[64];
  snprintf(own, sizeof own, "%s.node2", path);
  char trace_env[64];
  snprintf(trace_env, sizeof trace_env, "SLUICE_TRACE=%s", path);
  child_env_set(trace_env, NULL);
  const char *launch[] = {SLUICE_CLI_PATH, "launch", "--nnodes", "2",
                          "--devices", "cpu:1", "--", SLUICE_MLP_PATH,
                          "--devices", "cpu:0-1/0", "--layout", "dp",
                          "--steps", "2", "--hidden", "32", NULL};
  cli_result r;
  run_guarded(launch, &r);
  child_env_set(NULL, NULL);
  if (r.status != 0) fail_msg("launch: %s\n%s", r.out, r.err);
  char *t = slurp(path);
  for (int node = 0; node <= 2; node++) {
    char name[64], event[64];
    snprintf(name, sizeof name, "\"args\":{\"name\":\"node %d\"}", node);
    snprintf(event, sizeof event, "\"ph\":\"X\",\"pid\":%d,", node);
    if (!strstr(t, name) || !strstr(t, event))
      fail_msg("node %d missing from the trace:\n%.2000s", node, t);
  }
  assert_non_null(strstr(t, "\"name\":\"cpu:0/compute\""));
  assert_true(strncmp(t, "{\"traceEvents\":[", 16) == 0);
  assert_int_equal(access(own, F_OK), -1);
  free(t);
  cli_result_free(&r);
  unlink(path);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_launch_mlp_equals_embedded),
      cmocka_unit_test(test_launch_trace_merges_nodes),
      cmocka_unit_test(test_launch_status_and_flags),
      cmocka_unit_test_teardown(test_daemon_killed_mid_job, kill_spawned),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
