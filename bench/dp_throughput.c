/* The data plane between two endpoints in one process over 127.0.0.1 (two
 * loop threads, two jobs, real TCP): throughput of register-ready messages
 * from a source on node 0 to a sink on node 1, 4 KiB to 64 MiB, and the
 * round trip of a 4 KiB (and 8-byte) message. The numbers include the
 * actor runtime on both sides, the CRC32C of every payload on both sides,
 * and the returns travelling back; docs/cluster.md has a run.
 *
 *   bench_dp_throughput [--quick] [--reps N]
 *
 * For reference, CRC32C speed on one thread and the raw loopback TCP speed
 * (one socket pair, 4 MiB writes, no framing) are printed first: the
 * ceiling for one connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core_thread.h"
#include "dp.h"
#include "bench_util.h"

static const char token[] = "bench-token";

static sl__dp_endpoint *make_ep(uint32_t node) {
  sl__dp_config c = {
      .node = node, .nnodes = 2, .token = token, .token_len = sizeof token - 1};
  sl__dp_endpoint *ep;
  if (sl__dp_endpoint_create(&c, &ep) != SL_OK) {
    fprintf(stderr, "endpoint: %s\n", sl_last_error());
    exit(1);
  }
  return ep;
}

static void die(const char *what) {
  fprintf(stderr, "%s: %s\n", what, sl_last_error());
  exit(1);
}

/* Runs plan on both endpoints; seconds from start to the last wait. */
static double run(sl__dp_endpoint **eps, sl_actor_graph *p) {
  sl_job *jobs[2];
  for (uint32_t i = 0; i < 2; i++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = i,
                      .transport = sl__dp_endpoint_transport(eps[i]));
    if (sl_job_create(p, &cfg, &jobs[i]) != SL_OK) die("job");
    if (sl__dp_endpoint_attach(eps[i], jobs[i]) != SL_OK) die("attach");
  }
  uint64_t t0 = sl__now_ns();
  for (int i = 0; i < 2; i++)
    if (sl_job_start(jobs[i]) != SL_OK) die("start");
  for (int i = 0; i < 2; i++)
    if (sl_job_wait(jobs[i]) != SL_OK) die("wait");
  double s = (double)(sl__now_ns() - t0) / 1e9;
  for (int i = 0; i < 2; i++) {
    sl__dp_endpoint_detach(eps[i]);
    sl_job_destroy(jobs[i]);
  }
  return s;
}

static sl_actor_id actor(sl_actor_graph *p, const char *name,
                         sl_actor_kind kind, uint32_t node, uint32_t stream,
                         sl_act_fn act, int64_t count) {
  sl_actor_id id;
  sl_actor_desc d = {.name = name,
                     .kind = kind,
                     .node = node,
                     .stream = stream,
                     .act = act,
                     .count = count};
  if (sl_actor_graph_add_actor(p, &d, &id) != SL_OK) die("actor");
  return id;
}

static void edge(sl_actor_graph *p, sl_actor_id from, sl_actor_id to,
                 int32_t count, size_t bytes) {
  int32_t r;
  sl_regst_desc d = {.count = count, .bytes = bytes, .device = -1};
  if (sl_actor_graph_add_output(p, from, &d, &r) != SL_OK ||
      sl_actor_graph_connect(p, r, to) != SL_OK)
    die("edge");
}

/* src (node 0) -> sink (node 1), `regs` registers of `bytes`. */
static double throughput(sl__dp_endpoint **eps, size_t bytes, int64_t pieces,
                         int32_t regs) {
  sl_actor_graph *p;
  if (sl_actor_graph_create(&p) != SL_OK) die("plan");
  sl_actor_id src = actor(p, "src", SL_ACTOR_SOURCE, 0, 0, NULL, pieces);
  sl_actor_id sink = actor(p, "sink", SL_ACTOR_SINK, 1, 0, NULL, 0);
  edge(p, src, sink, regs, bytes);
  double s = run(eps, p);
  sl_actor_graph_destroy(p);
  return (double)bytes * (double)pieces / s / 1e9;
}

static sl_status act_copy(sl_act *a) {
  memcpy(a->out[0]->data, a->in[0]->data, a->in[0]->bytes);
  return SL_OK;
}

/* src (node 0) -> echo (node 1) -> sink (node 0), one register per edge:
 * each piece waits for the previous one's round trip. Microseconds per
 * round trip. */
static double round_trip(sl__dp_endpoint **eps, size_t bytes, int64_t pieces) {
  sl_actor_graph *p;
  if (sl_actor_graph_create(&p) != SL_OK) die("plan");
  sl_actor_id src = actor(p, "src", SL_ACTOR_SOURCE, 0, 0, NULL, pieces);
  sl_actor_id echo = actor(p, "echo", SL_ACTOR_KERNEL, 1, 0, act_copy, 0);
  sl_actor_id sink = actor(p, "sink", SL_ACTOR_SINK, 0, 1, NULL, 0);
  edge(p, src, echo, 1, bytes);
  edge(p, echo, sink, 1, bytes);
  double s = run(eps, p);
  sl_actor_graph_destroy(p);
  return s / (double)pieces * 1e6;
}

/* ---- references
 * --------------------------------------------------------------- */

static double crc_speed(void) {
  size_t n = 64u << 20;
  unsigned char *b = malloc(n);
  if (!b) exit(1);
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(i * 131);
  volatile uint32_t sink = 0;
  double best = 0;
  for (int r = 0; r < 5; r++) {
    uint64_t t0 = sl__now_ns();
    sink ^= sl__crc32c(0, b, n);
    double gbs = (double)n / ((double)(sl__now_ns() - t0) / 1e9) / 1e9;
    if (gbs > best) best = gbs;
  }
  free(b);
  (void)sink;
  return best;
}

typedef struct raw_peer {
  int fd;
  size_t total;
} raw_peer;

static void *raw_reader(void *arg) {
  raw_peer *r = arg;
  size_t cap = 4u << 20, got = 0;
  char *buf = malloc(cap);
  while (buf && got < r->total) {
    ssize_t k = read(r->fd, buf, cap);
    if (k <= 0) break;
    got += (size_t)k;
  }
  free(buf);
  return NULL;
}

/* One TCP connection over 127.0.0.1, 4 MiB writes, a reader thread. */
static double raw_tcp(size_t total) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &len))
    return 0;
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, (struct sockaddr *)&a, sizeof a)) return 0;
  int s = accept(ls, NULL, NULL);
  raw_peer r = {s, total};
  sl__thread t = {0};
  if (sl__thread_start(&t, raw_reader, &r, "raw") != SL_OK) return 0;
  size_t cap = 4u << 20, sent = 0;
  char *buf = calloc(1, cap);
  uint64_t t0 = sl__now_ns();
  while (buf && sent < total) {
    ssize_t k = write(c, buf, SL_MIN(cap, total - sent));
    if (k <= 0) break;
    sent += (size_t)k;
  }
  sl__thread_join(&t);
  double gbs = (double)sent / ((double)(sl__now_ns() - t0) / 1e9) / 1e9;
  free(buf);
  close(c);
  close(s);
  close(ls);
  return gbs;
}

int main(int argc, char **argv) {
  bool quick = false;
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = true;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 99) reps = 3;
  printf("CRC32C (%s, one thread): %.1f GB/s\n",
         sl__crc32c_hw() ? "SSE4.2" : "tables", crc_speed());
  double raw[9];
  for (int r = 0; r < reps; r++)
    raw[r] = raw_tcp(quick ? (256u << 20) : (2048u << 20));
  printf("raw loopback TCP, one connection, 4 MiB writes: %.2f GB/s (median "
         "of %d)\n\n",
         bench_median(raw, reps), reps);

  sl__dp_endpoint *eps[2] = {make_ep(0), make_ep(1)};
  for (uint32_t i = 0; i < 2; i++)
    if (sl__dp_endpoint_set_peer(eps[i], 1 - i, "127.0.0.1",
                                 sl__dp_endpoint_port(eps[1 - i])) != SL_OK)
      die("peer");
  if (sl__dp_endpoint_connect(eps[0], 1) != SL_OK ||
      sl__dp_endpoint_wait_connected(eps[0], 1, 10000) != SL_OK)
    die("connect");

  printf("| message | registers | messages | GB/s (median of %d) | min-max |\n"
         "|---|---|---|---|---|\n",
         reps);
  size_t sizes[] = {4u << 10, 64u << 10, 1u << 20,
                    4u << 20, 16u << 20, 64u << 20};
  /* First 4 KiB with only 4 registers: bound by round trips. */
  for (int k = -1; k < (int)SL_ARRAY_LEN(sizes); k++) {
    size_t b = sizes[k < 0 ? 0 : k];
    /* About 1 GiB per run (256 MiB quick), at least 16 messages. Enough
     * registers for about 8 MiB in flight: a message's register comes back
     * only after a round trip, so fewer would measure the quota, not the
     * data plane (bench_dp_throughput's first rows show it). */
    int64_t pieces =
        (int64_t)SL_MAX((quick ? (256u << 20) : (1u << 30)) / b, (size_t)16);
    int32_t regs = (int32_t)SL_MIN(SL_MAX((8u << 20) / b, (size_t)2), 256);
    if (k < 0) regs = 4;
    double v[9];
    for (int r = 0; r < reps; r++)
      v[r] = throughput(eps, b, pieces, regs);
    double lo = v[0], hi = v[0];
    for (int r = 1; r < reps; r++) {
      lo = SL_MIN(lo, v[r]);
      hi = SL_MAX(hi, v[r]);
    }
    char name[32];
    if (b >= (1u << 20))
      snprintf(name, sizeof name, "%zu MiB", b >> 20);
    else
      snprintf(name, sizeof name, "%zu KiB", b >> 10);
    printf("| %s | %d | %lld | **%.2f** | %.2f-%.2f |\n", name, regs,
           (long long)pieces, bench_median(v, reps), lo, hi);
    fflush(stdout);
  }

  printf("\n| round trip (one register per edge) | messages | us (median of "
         "%d) | min-max |\n|---|---|---|---|\n",
         reps);
  size_t rt[] = {8, 4u << 10};
  for (size_t k = 0; k < SL_ARRAY_LEN(rt); k++) {
    double v[9];
    int64_t pieces = quick ? 2000 : 20000;
    for (int r = 0; r < reps; r++)
      v[r] = round_trip(eps, rt[k], pieces);
    double lo = v[0], hi = v[0];
    for (int r = 1; r < reps; r++) {
      lo = SL_MIN(lo, v[r]);
      hi = SL_MAX(hi, v[r]);
    }
    printf("| %zu bytes | %lld | **%.1f** | %.1f-%.1f |\n", rt[k],
           (long long)pieces, bench_median(v, reps), lo, hi);
    fflush(stdout);
  }
  sl__dp_stats s;
  sl__dp_endpoint_get_stats(eps[1], &s);
  printf("\nnode 1 read %.1f%% of its payload bytes straight into registers\n",
         100.0 * (double)s.payload_bytes_direct /
             (double)SL_MAX(s.payload_bytes_received, 1));
  sl__dp_endpoint_destroy(eps[0]);
  sl__dp_endpoint_destroy(eps[1]);
  return 0;
}
