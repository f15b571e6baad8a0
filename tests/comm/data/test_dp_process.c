/* Two processes on 127.0.0.1: this test is node 0, and runs itself again
 * (fork, then exec of /proc/self/exe --child ...) as node 1. They swap
 * ports over pipes, run one plan across the two, and: finish normally;
 * or node 1 is killed (SIGKILL) mid-job, and node 0's job fails naming
 * node 1 at once; or node 1 is frozen (SIGSTOP), and node 0's job fails
 * naming node 1 when its liveness timeout passes. Every wait is bounded. */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "dp_helpers.h"

enum { PIECES = 200, BYTES = 4096 + 17 };

static unsigned char pattern(int64_t piece, size_t i) {
  return (unsigned char)(piece * 29 + (int64_t)i * 3);
}

static sl_status act_fill(sl_act *a) {
  unsigned char *d = a->out[0]->data;
  for (size_t i = 0; i < a->out[0]->bytes; i++)
    d[i] = pattern(a->piece, i);
  return SL_OK;
}

typedef struct child_ctx {
  int fd_out;
  bool block; /* at piece 5: tell the parent, then wait (bounded) */
} child_ctx;

static sl_status act_relay(sl_act *a) {
  child_ctx *c = a->ctx;
  const unsigned char *s = a->in[0]->data;
  for (size_t i = 0; i < a->in[0]->bytes; i++)
    if (s[i] != pattern(a->piece, i))
      return sl_act_fail(a, SL_EMISMATCH, "piece %lld byte %zu",
                         (long long)a->piece, i);
  if (c->block && a->piece == 5) {
    char b = 'B';
    if (write(c->fd_out, &b, 1) != 1) return SL_EIO;
    sl__sleep_ns(60ull * 1000000000ull); /* the parent ends this process */
  }
  memcpy(a->out[0]->data, s, a->in[0]->bytes);
  return SL_OK;
}

typedef struct seen {
  int64_t n, bad;
} seen;

static sl_status act_sink(sl_act *a) {
  seen *s = a->ctx;
  const unsigned char *d = a->in[0]->data;
  if (a->in[0]->piece != s->n) s->bad++;
  for (size_t i = 0; i < a->in[0]->bytes; i++)
    if (d[i] != pattern(s->n, i)) {
      s->bad++;
      break;
    }
  s->n++;
  return SL_OK;
}

/* src and sink on node 0, the relay on node 1. */
static sl_actor_graph *make_plan(child_ctx *c, seen *s) {
  sl_actor_graph *p = NULL;
  sl_actor_id src, relay, sink;
  int32_t r1, r2;
  if (sl_actor_graph_create(&p) != SL_OK ||
      sl_actor_graph_add_actor(p,
                               &(sl_actor_desc){.name = "src",
                                                .kind = SL_ACTOR_SOURCE,
                                                .act = act_fill,
                                                .count = PIECES},
                               &src) != SL_OK ||
      sl_actor_graph_add_actor(p,
                               &(sl_actor_desc){.name = "relay",
                                                .kind = SL_ACTOR_KERNEL,
                                                .node = 1,
                                                .act = act_relay,
                                                .ctx = c},
                               &relay) != SL_OK ||
      sl_actor_graph_add_actor(p,
                               &(sl_actor_desc){.name = "sink",
                                                .kind = SL_ACTOR_SINK,
                                                .stream = 1,
                                                .act = act_sink,
                                                .ctx = s},
                               &sink) != SL_OK ||
      sl_actor_graph_add_output(
          p, src, &(sl_regst_desc){.count = 3, .bytes = BYTES, .device = -1},
          &r1) != SL_OK ||
      sl_actor_graph_connect(p, r1, relay) != SL_OK ||
      sl_actor_graph_add_output(
          p, relay, &(sl_regst_desc){.count = 3, .bytes = BYTES, .device = -1},
          &r2) != SL_OK ||
      sl_actor_graph_connect(p, r2, sink) != SL_OK) {
    fprintf(stderr, "plan: %s\n", sl_last_error());
    sl_actor_graph_destroy(p);
    return NULL;
  }
  return p;
}

/* ---- pipes -----------------------------------------------------------------
 */

static bool pipe_read(int fd, void *buf, size_t n, int64_t ms) {
  return fake_read(fd, buf, n, ms) == (ssize_t)n;
}

static bool pipe_write(int fd, const void *buf, size_t n) {
  return fake_write_all(fd, buf, n);
}

/* ---- node 1: the child process
 * ------------------------------------------------ */

static int child_main(const char *mode, int fd_in, int fd_out) {
  child_ctx c = {.fd_out = fd_out, .block = strcmp(mode, "ok") != 0};
  seen unused = {0};
  sl__dp_config cfg = dp_cfg(1, 2);
  sl__dp_endpoint *ep = NULL;
  sl_actor_graph *p = make_plan(&c, &unused);
  if (!p || sl__dp_endpoint_create(&cfg, &ep) != SL_OK) return 2;
  uint16_t port = sl__dp_endpoint_port(ep), peer = 0;
  if (!pipe_write(fd_out, &port, sizeof port) ||
      !pipe_read(fd_in, &peer, sizeof peer, SOON_MS))
    return 3;
  sl_job *job = NULL;
  sl_job_config jc =
      SL_JOB_CONFIG(.node = 1, .transport = sl__dp_endpoint_transport(ep));
  if (sl__dp_endpoint_set_peer(ep, 0, "127.0.0.1", peer) != SL_OK ||
      sl_job_create(p, &jc, &job) != SL_OK ||
      sl__dp_endpoint_attach(ep, job) != SL_OK)
    return 4;
  char go = 'R';
  if (!pipe_write(fd_out, &go, 1) || !pipe_read(fd_in, &go, 1, SOON_MS) ||
      go != 'G')
    return 5;
  int32_t st = (int32_t)sl_job_run(job);
  pipe_write(fd_out, &st, sizeof st);
  sl__dp_endpoint_detach(ep);
  sl_job_destroy(job);
  sl__dp_endpoint_destroy(ep);
  sl_actor_graph_destroy(p);
  return 0;
}

/* ---- node 0: the test
 * ------------------------------------------------------------- */

typedef struct child {
  pid_t pid;
  int to, from; /* pipe ends */
} child;

static child spawn(const char *mode) {
  int p2c[2], c2p[2];
  assert_int_equal(pipe(p2c), 0);
  assert_int_equal(pipe(c2p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(p2c[1]);
    close(c2p[0]);
    char in[16], out[16];
    snprintf(in, sizeof in, "%d", p2c[0]);
    snprintf(out, sizeof out, "%d", c2p[1]);
    char *argv[] = {
        "test_comm_dp_process", "--child", (char *)mode, in, out, NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(p2c[0]);
  close(c2p[1]);
  return (child){pid, p2c[1], c2p[0]};
}

/* Waits (bounded) for the child to exit; its exit code, or -signal. */
static int reap(child *c) {
  int status = 0;
  for (int i = 0; i < SOON_MS; i++) {
    pid_t r = waitpid(c->pid, &status, WNOHANG);
    if (r == c->pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    sl__sleep_ns(1000000);
  }
  kill(c->pid, SIGKILL);
  waitpid(c->pid, &status, 0);
  fail_msg("node 1 (pid %d) did not exit", (int)c->pid);
  return -1;
}

typedef struct node0 {
  sl__dp_endpoint *ep;
  sl_actor_graph *plan;
  sl_job *job;
  seen s;
  child_ctx unused;
} node0;

/* Node 0 up to the start of both jobs. */
static void start_both(node0 *n, child *c, const sl__dp_config *cfg) {
  memset(&n->s, 0, sizeof n->s);
  n->plan = make_plan(&n->unused, &n->s);
  assert_non_null(n->plan);
  n->ep = dp_make(cfg);
  uint16_t port = sl__dp_endpoint_port(n->ep), peer = 0;
  assert_true(pipe_read(c->from, &peer, sizeof peer, SOON_MS));
  assert_true(pipe_write(c->to, &port, sizeof port));
  assert_int_equal(sl__dp_endpoint_set_peer(n->ep, 1, "127.0.0.1", peer),
                   SL_OK);
  sl_job_config jc =
      SL_JOB_CONFIG(.node = 0, .transport = sl__dp_endpoint_transport(n->ep));
  assert_int_equal(sl_job_create(n->plan, &jc, &n->job), SL_OK);
  assert_int_equal(sl__dp_endpoint_attach(n->ep, n->job), SL_OK);
  char r = 0;
  assert_true(pipe_read(c->from, &r, 1, SOON_MS));
  assert_int_equal(r, 'R');
  r = 'G';
  assert_true(pipe_write(c->to, &r, 1));
  assert_int_equal(sl_job_start(n->job), SL_OK);
}

static void stop_node0(node0 *n, child *c) {
  sl__dp_endpoint_detach(n->ep);
  sl_job_destroy(n->job);
  sl__dp_endpoint_destroy(n->ep);
  sl_actor_graph_destroy(n->plan);
  close(c->to);
  close(c->from);
}

static void test_two_processes(void **state) {
  (void)state;
  child c = spawn("ok");
  node0 n;
  sl__dp_config cfg = dp_cfg(0, 2);
  start_both(&n, &c, &cfg);
  sl_status st = wait_bounded(n.job);
  if (st != SL_OK) fail_msg("node 0: %s", sl_last_error());
  assert_int_equal(n.s.n, PIECES);
  assert_int_equal(n.s.bad, 0);
  int32_t child_st = -1;
  assert_true(pipe_read(c.from, &child_st, sizeof child_st, SOON_MS));
  assert_int_equal(child_st, SL_OK);
  assert_int_equal(reap(&c), 0);
  sl__dp_stats s;
  sl__dp_endpoint_get_stats(n.ep, &s);
  assert_int_equal(s.messages_received, s.messages_sent);
  assert_int_equal(s.payload_bytes_sent, (uint64_t)PIECES * BYTES);
  assert_int_equal(s.payload_bytes_received, (uint64_t)PIECES * BYTES);
  /* comm_dp_process_shm: the two processes share a segment */
  if (getenv("SLUICE_DP_SHM_BYTES")) {
    assert_int_equal(s.shm_connections, 1);
    assert_true(s.payload_bytes_shm > 0);
  } else {
    assert_int_equal(s.payload_bytes_shm, 0);
  }
  stop_node0(&n, &c);
}

/* Node 1 dies (or freezes) while node 0's job needs it. */
static void lose_node1(int sig) {
  child c = spawn("block");
  node0 n;
  sl__dp_config cfg = dp_cfg(0, 2);
  cfg.ping_interval_ms = 100;
  cfg.dead_timeout_ms = 500;
  start_both(&n, &c, &cfg);
  char b = 0;
  assert_true(pipe_read(c.from, &b, 1, SOON_MS));
  assert_int_equal(b, 'B');
  uint64_t t0 = sl__now_ns();
  assert_int_equal(kill(c.pid, sig), 0);
  sl_status st = wait_bounded(n.job);
  const char *msg = sl_last_error();
  printf("node 0 after %s of node 1 (%.0f ms): %s\n",
         sig == SIGKILL ? "SIGKILL" : "SIGSTOP",
         (double)(sl__now_ns() - t0) / 1e6, msg);
  assert_int_equal(st, SL_ECOMM);
  if (!strstr(msg, "node 0: node 1 (127.0.0.1:") || !strstr(msg, "lost"))
    fail_msg("'%s' does not name the lost node", msg);
  if (sig == SIGSTOP) {
    assert_non_null(strstr(msg, "nothing received for 500 ms"));
    kill(c.pid, SIGKILL);
  }
  assert_int_equal(reap(&c), -SIGKILL);
  assert_true(n.s.n <= 5);
  stop_node0(&n, &c);
}

static void test_peer_killed(void **state) {
  (void)state;
  lose_node1(SIGKILL);
}

static void test_peer_frozen(void **state) {
  (void)state;
  lose_node1(SIGSTOP);
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 5 && strcmp(argv[1], "--child") == 0)
    return child_main(argv[2], atoi(argv[3]), atoi(argv[4]));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_processes),
      cmocka_unit_test(test_peer_killed),
      cmocka_unit_test(test_peer_frozen),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
