/* Helpers shared by the data-plane tests: endpoints on 127.0.0.1
 * ephemeral ports, an error-callback recorder, and a "fake peer" made of
 * plain blocking sockets with timeouts, which speaks the protocol byte by
 * byte (correctly or not) through the codec functions. Every wait here is
 * bounded. */
#ifndef SLUICE_TEST_DP_HELPERS_H
#define SLUICE_TEST_DP_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "comm_helpers.h" /* test_seed, the waiter */
#include "core_thread.h"
#include "dp.h"

#define TOKEN "test-token-0123456789"
/* Generous bound for anything that should happen "soon": a test that
 * needs it has failed, and says so instead of hanging. */
#define SOON_MS 30000

/* ---- error callbacks -------------------------------------------------------
 */

typedef struct errlog {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int n;
  sl_status last;
  uint32_t last_node;
  char msgs[4096]; /* every message, one per line */
} errlog;

static inline void errlog_init(errlog *e) {
  memset(e, 0, sizeof *e);
  pthread_mutex_init(&e->m, NULL);
  sl__cond_init(&e->cv);
}

static inline void errlog_fini(errlog *e) {
  pthread_mutex_destroy(&e->m);
  pthread_cond_destroy(&e->cv);
}

static inline void errlog_cb(void *ctx, uint32_t node, sl_status st,
                             const char *msg) {
  errlog *e = ctx;
  pthread_mutex_lock(&e->m);
  e->n++;
  e->last = st;
  e->last_node = node;
  size_t used = strlen(e->msgs);
  if (used + strlen(msg) + 2 < sizeof e->msgs)
    snprintf(e->msgs + used, sizeof e->msgs - used, "%s\n", msg);
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->m);
}

/* Waits until at least n errors were recorded or ms passed; the count. */
static inline int errlog_wait(errlog *e, int n, int64_t ms) {
  uint64_t end = sl__now_ns() + (uint64_t)ms * 1000000ull;
  pthread_mutex_lock(&e->m);
  while (e->n < n) {
    uint64_t now = sl__now_ns();
    if (now >= end) break;
    sl__cond_wait_ns(&e->cv, &e->m, end - now);
  }
  int got = e->n;
  pthread_mutex_unlock(&e->m);
  return got;
}

static inline bool errlog_has(errlog *e, const char *needle) {
  pthread_mutex_lock(&e->m);
  bool r = strstr(e->msgs, needle) != NULL;
  pthread_mutex_unlock(&e->m);
  return r;
}

/* ---- bounded waits for jobs -------------------------------------------------
 */

typedef struct wait_guard {
  sl_job *job;
  pthread_mutex_t m;
  pthread_cond_t cv;
  bool done;
} wait_guard;

static inline void *wait_guard_main(void *arg) {
  wait_guard *g = arg;
  uint64_t end = sl__now_ns() + (uint64_t)SOON_MS * 1000000ull;
  pthread_mutex_lock(&g->m);
  while (!g->done) {
    uint64_t now = sl__now_ns();
    if (now >= end) break;
    sl__cond_wait_ns(&g->cv, &g->m, end - now);
  }
  bool late = !g->done;
  pthread_mutex_unlock(&g->m);
  if (late)
    sl_job_abort_msg(g->job, SL_ETIMEOUT,
                     "test: the job did not end within SOON_MS");
  return NULL;
}

/* sl_job_wait, but a job still running after SOON_MS is aborted with
 * SL_ETIMEOUT, so a failure to detect a failure fails instead of hanging.
 * The message stays in sl_last_error(). */
static inline sl_status wait_bounded(sl_job *job) {
  wait_guard g = {.job = job};
  pthread_mutex_init(&g.m, NULL);
  sl__cond_init(&g.cv);
  sl__thread t = {0};
  if (sl__thread_start(&t, wait_guard_main, &g, "guard") != SL_OK)
    fail_msg("guard thread: %s", sl_last_error());
  sl_status st = sl_job_wait(job);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", sl_last_error());
  pthread_mutex_lock(&g.m);
  g.done = true;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.m);
  sl__thread_join(&t);
  pthread_mutex_destroy(&g.m);
  pthread_cond_destroy(&g.cv);
  if (st != SL_OK) return sl__fail(st, "%s", msg);
  return SL_OK;
}

/* ---- endpoints -------------------------------------------------------------
 */

/* Payloads go over TCP unless SLUICE_DP_SHM_BYTES is set (the *_shm runs
 * of these tests set it). */
static inline sl__dp_config dp_cfg(uint32_t node, uint32_t nnodes) {
  sl__dp_config c = {0};
  c.node = node;
  c.nnodes = nnodes;
  c.shm_bytes = getenv("SLUICE_DP_SHM_BYTES") ? 0 : -1;
  c.token = TOKEN;
  c.token_len = strlen(TOKEN);
  return c;
}

static inline sl__dp_endpoint *dp_make(const sl__dp_config *c) {
  sl__dp_endpoint *ep = NULL;
  if (sl__dp_endpoint_create(c, &ep) != SL_OK)
    fail_msg("endpoint for node %u: %s", c->node, sl_last_error());
  return ep;
}

/* n endpoints that know each other's ports; cfgs may be NULL. */
static inline void dp_mesh(sl__dp_endpoint **eps, uint32_t n,
                           const sl__dp_config *cfgs) {
  for (uint32_t i = 0; i < n; i++) {
    sl__dp_config c = cfgs ? cfgs[i] : dp_cfg(i, n);
    eps[i] = dp_make(&c);
  }
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < n; j++)
      if (i != j)
        assert_int_equal(sl__dp_endpoint_set_peer(eps[i], j, "127.0.0.1",
                                                  sl__dp_endpoint_port(eps[j])),
                         SL_OK);
}

/* A port nothing listens on (bound, then closed). */
static inline uint16_t dead_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(s, (struct sockaddr *)&a, &len);
  close(s);
  return ntohs(a.sin_port);
}

/* ---- the fake peer: blocking sockets with timeouts --------------------------
 */

static inline int fake_connect(uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0)
    fail_msg("connect to 127.0.0.1:%u: %s", port, strerror(errno));
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return s;
}

/* A listening socket on an ephemeral port. */
static inline int fake_listen(uint16_t *port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(s, 8), 0);
  socklen_t len = sizeof a;
  getsockname(s, (struct sockaddr *)&a, &len);
  *port = ntohs(a.sin_port);
  return s;
}

/* Accepts one connection within ms; -1 on timeout. */
static inline int fake_accept(int ls, int64_t ms) {
  struct pollfd p = {.fd = ls, .events = POLLIN};
  if (poll(&p, 1, (int)ms) != 1) return -1;
  return accept(ls, NULL, NULL);
}

/* Reads exactly n bytes within ms: n, 0 at end of stream, -1 on timeout
 * or error. */
static inline ssize_t fake_read(int s, void *buf, size_t n, int64_t ms) {
  size_t got = 0;
  uint64_t end = sl__now_ns() + (uint64_t)ms * 1000000ull;
  while (got < n) {
    uint64_t now = sl__now_ns();
    if (now >= end) return -1;
    struct pollfd p = {.fd = s, .events = POLLIN};
    int r = poll(&p, 1, (int)((end - now) / 1000000ull) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t k = read(s, (char *)buf + got, n - got);
    if (k == 0) return 0;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno == ECONNRESET ? 0 : -1;
    }
    got += (size_t)k;
  }
  return (ssize_t)n;
}

/* True when the peer closes the socket within ms (reading and dropping
 * whatever comes first). */
static inline bool fake_sees_close(int s, int64_t ms) {
  uint64_t end = sl__now_ns() + (uint64_t)ms * 1000000ull;
  char buf[4096];
  for (;;) {
    uint64_t now = sl__now_ns();
    if (now >= end) return false;
    struct pollfd p = {.fd = s, .events = POLLIN};
    int r = poll(&p, 1, (int)((end - now) / 1000000ull) + 1);
    if (r <= 0) continue;
    ssize_t k = read(s, buf, sizeof buf);
    if (k == 0 || (k < 0 && errno == ECONNRESET)) return true;
  }
}

/* False when the peer closed first (tests ignore SIGPIPE). */
static inline bool fake_write_all(int s, const void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = write(s, (const char *)buf + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += (size_t)k;
  }
  return true;
}

static inline void fake_write(int s, const void *buf, size_t n) {
  if (!fake_write_all(s, buf, n))
    fail_msg("fake peer write: %s", strerror(errno));
}

/* The client side of a correct handshake with the endpoint listening on
 * `port` (node `server` of nnodes), as node `self`: returns the socket,
 * open for frames, or fails the test. */
static inline int fake_client_open(uint16_t port, uint32_t self,
                                   uint32_t server, uint32_t nnodes) {
  int s = fake_connect(port);
  uint8_t buf[SL__DP_PROOF_BYTES];
  sl__dp_hs hello, res;
  assert_int_equal(fake_read(s, buf, SL__DP_HELLO_BYTES, SOON_MS),
                   SL__DP_HELLO_BYTES);
  assert_int_equal(
      sl__dp_hs_decode(buf, SL__DP_HELLO_BYTES, SL__DP_HS_HELLO, &hello),
      SL_OK);
  sl__dp_hs proof = {.version = SL__DP_VERSION,
                     .type = SL__DP_HS_PROOF,
                     .rank = self,
                     .peer_rank = server,
                     .nnodes = nnodes};
  assert_int_equal(sl__dp_random(proof.nonce, SL__DP_NONCE_BYTES), SL_OK);
  assert_int_equal(sl__dp_mac(TOKEN, strlen(TOKEN), 'C', hello.nonce,
                              proof.nonce, self, server, nnodes, proof.mac),
                   SL_OK);
  fake_write(s, buf, sl__dp_hs_encode(&proof, buf));
  assert_int_equal(fake_read(s, buf, SL__DP_RESULT_BYTES, SOON_MS),
                   SL__DP_RESULT_BYTES);
  assert_int_equal(
      sl__dp_hs_decode(buf, SL__DP_RESULT_BYTES, SL__DP_HS_RESULT, &res),
      SL_OK);
  assert_int_equal(res.code, SL__DP_HS_OK);
  assert_true(sl__dp_mac_verify(TOKEN, strlen(TOKEN), 'S', hello.nonce,
                                proof.nonce, self, server, nnodes, res.mac));
  return s;
}

/* Writes one frame (header encoded here, then the payload unless it is
 * NULL). A bad frame may be refused before it is all written, so write
 * errors are not failures here. */
static inline void fake_frame(int s, const sl__dp_frame *f,
                              const void *payload) {
  uint8_t hdr[SL__DP_HDR_BYTES];
  sl__dp_frame_encode(f, hdr);
  if (fake_write_all(s, hdr, sizeof hdr) && f->len && payload)
    fake_write_all(s, payload, (size_t)f->len);
}

#endif
