/* Actor plans across data-plane endpoints in one process: each "node" has
 * its own endpoint and loop thread on a 127.0.0.1 ephemeral port, and its
 * own job (like tests/actor/test_loopback.c, over TCP). Bytes arrive
 * intact and in order, large registers are read straight into the reader's
 * register, credit windows bound what is in flight, a kernel error on one
 * node aborts the others with the actor's name, a lost peer or a bad frame
 * fails the job naming the node, and the hang detector works across
 * nodes through the probes — for a collective whose members live on
 * several nodes too. */
#include <stdatomic.h>

#include "dp_helpers.h"
#include "dp_int.h"
#include "net_coll.h"
#include "span_coll.h"

enum { BYTES = 1000 };

static sl_actor_id add_actor(sl_actor_graph *p, const char *name,
                             sl_actor_kind kind, uint32_t node, uint32_t device,
                             uint32_t stream, sl_act_fn act, void *ctx,
                             int64_t count) {
  sl_actor_desc d = {name, kind, node, device, stream, act, ctx, count};
  sl_actor_id id = 0;
  if (sl_actor_graph_add_actor(p, &d, &id) != SL_OK)
    fail_msg("add_actor %s: %s", name, sl_last_error());
  return id;
}

static int32_t add_out(sl_actor_graph *p, sl_actor_id producer, int32_t count,
                       size_t bytes) {
  sl_regst_desc d = {NULL, count, bytes, -1, 0, NULL, NULL};
  int32_t r = -1;
  if (sl_actor_graph_add_output(p, producer, &d, &r) != SL_OK)
    fail_msg("add_out: %s", sl_last_error());
  return r;
}

static void connect_to(sl_actor_graph *p, int32_t desc, sl_actor_id consumer) {
  if (sl_actor_graph_connect(p, desc, consumer) != SL_OK)
    fail_msg("connect: %s", sl_last_error());
}

static void expect_in(const char *text, const char *needle) {
  if (!strstr(text, needle)) fail_msg("'%s' not in:\n%s", needle, text);
}

/* ---- acts: a byte pattern per piece, checked at every hop ------------------
 */

static unsigned char pattern(int64_t piece, size_t i) {
  return (unsigned char)(piece * 31 + (int64_t)i * 7 + (int64_t)(i >> 9));
}

static sl_status act_fill(sl_act *a) {
  unsigned char *d = a->out[0]->data;
  for (size_t i = 0; i < a->out[0]->bytes; i++)
    d[i] = pattern(a->piece, i);
  return SL_OK;
}

static sl_status act_copy_check(sl_act *a) {
  const unsigned char *s = a->in[0]->data;
  for (size_t i = 0; i < a->in[0]->bytes; i++)
    if (s[i] != pattern(a->piece, i))
      return sl_act_fail(a, SL_EMISMATCH, "piece %lld byte %zu",
                         (long long)a->piece, i);
  memcpy(a->out[0]->data, s, a->in[0]->bytes);
  return SL_OK;
}

typedef struct seen {
  int64_t n, bad;
} seen;

/* Pieces must come in order, each with its bytes. */
static sl_status act_sink_check(sl_act *a) {
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

/* ---- a cluster of endpoints and jobs
 * ------------------------------------------ */

typedef struct cluster {
  uint32_t n;
  sl__dp_endpoint *eps[4];
  sl_job *jobs[4];
  sl_status st[4];
  char msg[4][1024];
} cluster;

static void cluster_up(cluster *c, uint32_t n, const sl__dp_config *cfgs) {
  memset(c, 0, sizeof *c);
  c->n = n;
  dp_mesh(c->eps, n, cfgs);
}

static void cluster_load(cluster *c, sl_actor_graph *p, int64_t hang_ms) {
  for (uint32_t i = 0; i < c->n; i++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = i, .hang_timeout_ms = hang_ms,
                      .transport = sl__dp_endpoint_transport(c->eps[i]));
    if (sl_job_create(p, &cfg, &c->jobs[i]) != SL_OK)
      fail_msg("node %u: %s", i, sl_last_error());
    assert_int_equal(sl__dp_endpoint_attach(c->eps[i], c->jobs[i]), SL_OK);
  }
}

static void cluster_wait(cluster *c) {
  for (uint32_t i = 0; i < c->n; i++) {
    if (!c->jobs[i]) continue;
    c->st[i] = wait_bounded(c->jobs[i]);
    snprintf(c->msg[i], sizeof c->msg[i], "%s",
             c->st[i] == SL_OK ? "" : sl_last_error());
  }
}

static void cluster_run(cluster *c, sl_actor_graph *p, int64_t hang_ms) {
  cluster_load(c, p, hang_ms);
  for (uint32_t i = 0; i < c->n; i++)
    assert_int_equal(sl_job_start(c->jobs[i]), SL_OK);
  cluster_wait(c);
}

static void cluster_down(cluster *c) {
  for (uint32_t i = 0; i < c->n; i++)
    if (c->eps[i]) sl__dp_endpoint_detach(c->eps[i]);
  for (uint32_t i = 0; i < c->n; i++) {
    sl_job_destroy(c->jobs[i]);
    c->jobs[i] = NULL;
  }
  for (uint32_t i = 0; i < c->n; i++)
    sl__dp_endpoint_destroy(c->eps[i]);
}

static void expect_ok(cluster *c) {
  for (uint32_t i = 0; i < c->n; i++)
    if (c->st[i] != SL_OK)
      fail_msg("node %u: %s: %s", i, sl_status_str(c->st[i]), c->msg[i]);
}

/* Every message sent was received, and nothing is left in the jobs. */
static void expect_drained(cluster *c) {
  uint64_t sent = 0, recv = 0;
  for (uint32_t i = 0; i < c->n; i++) {
    sl__dp_stats s;
    sl__dp_endpoint_get_stats(c->eps[i], &s);
    sent += s.messages_sent;
    recv += s.messages_received;

    assert_int_equal(s.bad_frames, 0);
    assert_int_equal(s.messages_discarded, 0);
    sl_job_stats js;
    assert_int_equal(sl_job_get_stats(c->jobs[i], &js), SL_OK);
    assert_int_equal(js.in_flight, 0);
    assert_int_equal(js.messages_left, 0);
  }
  assert_int_equal(sent, recv);
}

/* ---- bytes and order
 * ------------------------------------------------------------ */

/* src (node 0) -> a (node 1) -> b (node 2) -> c (node 1) -> sink0 (node 0);
 * a's output is also read by sink2 on node 2. */
static sl_actor_graph *chain_plan(seen *s0, seen *s2, size_t bytes,
                                  int64_t pieces, int32_t regs,
                                  sl_act_fn b_act) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, pieces);
  sl_actor_id a =
      add_actor(p, "a", SL_ACTOR_KERNEL, 1, 0, 0, act_copy_check, NULL, 0);
  sl_actor_id b = add_actor(p, "b", SL_ACTOR_KERNEL, 2, 0, 0, b_act, NULL, 0);
  sl_actor_id c =
      add_actor(p, "c", SL_ACTOR_KERNEL, 1, 1, 2, act_copy_check, NULL, 0);
  sl_actor_id z0 =
      add_actor(p, "sink0", SL_ACTOR_SINK, 0, 1, 0, act_sink_check, s0, 0);
  sl_actor_id z2 =
      add_actor(p, "sink2", SL_ACTOR_SINK, 2, 0, 1, act_sink_check, s2, 0);
  connect_to(p, add_out(p, src, regs, bytes), a);
  int32_t ra = add_out(p, a, regs, bytes);
  connect_to(p, ra, b);
  connect_to(p, ra, z2);
  connect_to(p, add_out(p, b, regs, bytes), c);
  connect_to(p, add_out(p, c, regs, bytes), z0);
  return p;
}

static void test_chain_three_nodes(void **state) {
  (void)state;
  seen s0 = {0}, s2 = {0};
  sl_actor_graph *p = chain_plan(&s0, &s2, BYTES, 300, 2, act_copy_check);
  cluster c;
  cluster_up(&c, 3, NULL);
  cluster_run(&c, p, 0);
  expect_ok(&c);
  assert_int_equal(s0.n, 300);
  assert_int_equal(s0.bad, 0);
  assert_int_equal(s2.n, 300);
  assert_int_equal(s2.bad, 0);
  expect_drained(&c);
  sl__dp_stats s;
  sl__dp_endpoint_get_stats(c.eps[0], &s);
  /* src -> a: 300 READY with their bytes; c -> sink0 comes back. */
  assert_true(s.payload_bytes_sent >= 300ull * BYTES);
  assert_true(s.payload_bytes_received >= 300ull * BYTES);
  cluster_down(&c);
  sl_actor_graph_destroy(p);
}

/* Registers larger than the staging buffer: most bytes are read straight
 * into the reader's register. Odd sizes, three registers per edge. */
static void test_large_registers(void **state) {
  (void)state;
  size_t sizes[] = {(1u << 20) + 13, 16 * 1024 + 1, 3 * 1024 * 1024};
  for (size_t k = 0; k < SL_ARRAY_LEN(sizes); k++) {
    seen s0 = {0}, s2 = {0};
    sl_actor_graph *p = chain_plan(&s0, &s2, sizes[k], 12, 3, act_copy_check);
    cluster c;
    cluster_up(&c, 3, NULL);
    cluster_run(&c, p, 0);
    expect_ok(&c);
    assert_int_equal(s0.n, 12);
    assert_int_equal(s0.bad, 0);
    assert_int_equal(s2.n, 12);
    assert_int_equal(s2.bad, 0);
    expect_drained(&c);
    uint64_t direct = 0, received = 0, shm = 0;
    for (uint32_t i = 0; i < 3; i++) {
      sl__dp_stats s;
      sl__dp_endpoint_get_stats(c.eps[i], &s);
      direct += s.payload_bytes_direct;
      received += s.payload_bytes_received;
      shm += s.payload_bytes_shm;
    }
    printf("registers of %zu bytes: %.1f%% of %llu payload bytes read "
           "straight into registers\n",
           sizes[k], 100.0 * (double)direct / (double)received,
           (unsigned long long)received);
    /* src->a, a->b, a->sink2, b->c, c->sink0 cross nodes. */
    assert_int_equal(received, 5ull * 12 * sizes[k]);
    /* Smaller payloads often arrive whole in the staging buffer. Larger
     * ones are read into the register from the socket, or, with shared
     * memory (comm_dp_plan_shm: a 1 MiB ring), pass through the ring
     * when they fit (once the connection has its segment: the first
     * ones may not). */
    const char *ring = getenv("SLUICE_DP_SHM_BYTES");
    uint64_t ring_bytes = ring ? strtoull(ring, NULL, 10) : 0;
    if (sizes[k] <= ring_bytes)
      assert_true(shm > 0);
    else if (sizes[k] > 64 * 1024)
      assert_true(direct > 0);
    if (!ring) assert_int_equal(shm, 0);
    cluster_down(&c);
    sl_actor_graph_destroy(p);
  }
}

/* Two nodes sending to each other from the first moment, without any
 * connection opened beforehand: both dial at once; one connection wins. */
static void test_both_ways_at_once(void **state) {
  (void)state;
  for (int it = 0; it < 10; it++) {
    sl_actor_graph *p;
    assert_int_equal(sl_actor_graph_create(&p), SL_OK);
    seen s[2] = {{0}, {0}};
    for (uint32_t n = 0; n < 2; n++) {
      char name[16];
      snprintf(name, sizeof name, "src%u", n);
      sl_actor_id src =
          add_actor(p, name, SL_ACTOR_SOURCE, n, 0, 0, act_fill, NULL, 50);
      snprintf(name, sizeof name, "sink%u", 1 - n);
      sl_actor_id z = add_actor(p, name, SL_ACTOR_SINK, 1 - n, 0, 1,
                                act_sink_check, &s[1 - n], 0);
      connect_to(p, add_out(p, src, 2, 100 + it), z);
    }
    cluster c;
    cluster_up(&c, 2, NULL);
    cluster_run(&c, p, 0);
    expect_ok(&c);
    for (int n = 0; n < 2; n++) {
      assert_int_equal(s[n].n, 50);
      assert_int_equal(s[n].bad, 0);
    }
    expect_drained(&c);
    sl__dp_stats s0, s1;
    sl__dp_endpoint_get_stats(c.eps[0], &s0);
    sl__dp_endpoint_get_stats(c.eps[1], &s1);
    assert_int_equal(s0.connections_opened, 1);
    assert_int_equal(s1.connections_opened, 1);
    cluster_down(&c);
    sl_actor_graph_destroy(p);
  }
}

/* The same endpoints run several jobs one after another. */
static void test_jobs_in_sequence(void **state) {
  (void)state;
  cluster c;
  cluster_up(&c, 3, NULL);
  for (int it = 0; it < 3; it++) {
    seen s0 = {0}, s2 = {0};
    sl_actor_graph *p =
        chain_plan(&s0, &s2, 100 + (size_t)it, 40, 2, act_copy_check);
    cluster_run(&c, p, 0);
    expect_ok(&c);
    assert_int_equal(s0.n, 40);
    assert_int_equal(s2.n, 40);
    assert_int_equal(s0.bad + s2.bad, 0);
    for (uint32_t i = 0; i < 3; i++) {
      sl__dp_endpoint_detach(c.eps[i]);
      sl_job_destroy(c.jobs[i]);
      c.jobs[i] = NULL;
    }
    sl_actor_graph_destroy(p);
  }
  /* Connections were opened once and reused: at most one per peer. */
  for (uint32_t i = 0; i < 3; i++) {
    sl__dp_stats s;
    sl__dp_endpoint_get_stats(c.eps[i], &s);
    assert_true(s.connections_opened >= 1 && s.connections_opened <= 2);
  }
  cluster_down(&c);
}

/* ---- credits
 * ------------------------------------------------------------------- */

static void test_credit_window(void **state) {
  (void)state;
  sl__dp_config cfgs[2] = {dp_cfg(0, 2), dp_cfg(1, 2)};
  for (int i = 0; i < 2; i++) {
    cfgs[i].window_frames = 2;
    cfgs[i].window_bytes = 2048;
  }
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  seen s1 = {0}, s1b = {0};
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 200);
  sl_actor_id src2 =
      add_actor(p, "src2", SL_ACTOR_SOURCE, 0, 1, 0, act_fill, NULL, 200);
  sl_actor_id z =
      add_actor(p, "sink", SL_ACTOR_SINK, 1, 0, 0, act_sink_check, &s1, 0);
  sl_actor_id z2 =
      add_actor(p, "sink2", SL_ACTOR_SINK, 1, 1, 0, act_sink_check, &s1b, 0);
  connect_to(p, add_out(p, src, 4, 1500), z);
  connect_to(p, add_out(p, src2, 4, 16), z2);
  cluster c;
  cluster_up(&c, 2, cfgs);
  cluster_run(&c, p, 0);
  expect_ok(&c);
  assert_int_equal(s1.n, 200);
  assert_int_equal(s1b.n, 200);
  assert_int_equal(s1.bad + s1b.bad, 0);
  expect_drained(&c);
  for (int i = 0; i < 2; i++) {
    sl__dp_stats s;
    sl__dp_endpoint_get_stats(c.eps[i], &s);
    printf("node %d: %llu credit stalls, at most %llu messages and %llu "
           "bytes unacknowledged\n",
           i, (unsigned long long)s.credit_stalls,
           (unsigned long long)s.peak_window_frames,
           (unsigned long long)s.peak_window_bytes);
    assert_true(s.peak_window_frames <= 2);
    assert_true(s.peak_window_bytes <= 2048);
    if (i == 0) assert_true(s.credit_stalls > 0);
  }
  cluster_down(&c);
  sl_actor_graph_destroy(p);
}

/* ---- failures
 * ------------------------------------------------------------------ */

static sl_status act_fail_at_37(sl_act *a) {
  if (a->piece == 37)
    return sl_act_fail(a, SL_EMISMATCH, "injected failure at piece %lld",
                       (long long)a->piece);
  return act_copy_check(a);
}

static void test_kernel_error_aborts_all(void **state) {
  (void)state;
  seen s0 = {0}, s2 = {0};
  sl_actor_graph *p = chain_plan(&s0, &s2, BYTES, 300, 2, act_fail_at_37);
  cluster c;
  cluster_up(&c, 3, NULL);
  cluster_run(&c, p, 0);
  for (uint32_t i = 0; i < 3; i++) {
    printf("node %u: %s\n", i, c.msg[i]);
    assert_int_equal(c.st[i], SL_EMISMATCH);
    expect_in(c.msg[i], "actor 'b' (node 2, device 0, stream 0)");
  }
  expect_in(c.msg[2], "injected failure at piece 37");
  expect_in(c.msg[0], "reported by node 2");
  expect_in(c.msg[1], "reported by node 2");
  assert_true(s0.n <= 37);
  cluster_down(&c);
  sl_actor_graph_destroy(p);
}

/* A transport that forwards to an endpoint until the test takes it away
 * (to destroy that endpoint while its job still runs). */
typedef struct switchable {
  _Atomic(sl__dp_endpoint *) ep;
} switchable;

static sl_status sw_send(void *ctx, uint32_t node, const sl_msg *m,
                         const void *payload, size_t n) {
  switchable *s = ctx;
  sl__dp_endpoint *ep = atomic_load(&s->ep);
  if (!ep) return sl__fail(SL_ECOMM, "test: this node's endpoint is gone");
  sl_transport t = sl__dp_endpoint_transport(ep);
  return t.vt->send(t.ctx, node, m, payload, n);
}

static const sl_transport_vtable sw_vtable = {sw_send, NULL};

typedef struct gate {
  atomic_int blocked, release;
  int64_t at; /* the piece it blocks at */
} gate;

/* Blocks at piece g->at until released (bounded). */
static sl_status act_block(sl_act *a) {
  gate *g = a->ctx;
  if (a->piece == g->at) {
    atomic_store(&g->blocked, 1);
    for (int i = 0; i < SOON_MS && !atomic_load(&g->release); i++)
      sl__sleep_ns(1000000);
  }
  memcpy(a->out[0]->data, a->in[0]->data, a->in[0]->bytes);
  return SL_OK;
}

/* Node 1's endpoint is destroyed while its job runs: node 0's job fails
 * naming node 1. With `after_a_job`, the two first run a job to its end
 * (node 1 then said DONE), and node 1 is lost in the next job before it
 * sent node 0 anything: that is a failure again. */
static void peer_lost(bool after_a_job) {
  gate g = {.at = after_a_job ? 0 : 5};
  seen s0 = {0};
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 100);
  sl_actor_id k = add_actor(p, "k", SL_ACTOR_KERNEL, 1, 0, 0, act_block, &g, 0);
  sl_actor_id z =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, act_sink_check, &s0, 0);
  connect_to(p, add_out(p, src, 2, 64), k);
  connect_to(p, add_out(p, k, 2, 64), z);
  cluster c;
  cluster_up(&c, 2, NULL);
  if (after_a_job) {
    seen s1 = {0};
    cluster pair = c;
    /* A two-node job: src (0) -> k (1) -> sink (0), k not blocking. */
    sl_actor_graph *q;
    assert_int_equal(sl_actor_graph_create(&q), SL_OK);
    sl_actor_id qs =
        add_actor(q, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 20);
    sl_actor_id qk =
        add_actor(q, "k", SL_ACTOR_KERNEL, 1, 0, 0, act_copy_check, NULL, 0);
    sl_actor_id qz =
        add_actor(q, "sink", SL_ACTOR_SINK, 0, 1, 0, act_sink_check, &s1, 0);
    connect_to(q, add_out(q, qs, 2, 64), qk);
    connect_to(q, add_out(q, qk, 2, 64), qz);
    cluster_run(&pair, q, 0);
    expect_ok(&pair);
    assert_int_equal(s1.n, 20);
    for (uint32_t i = 0; i < 2; i++) {
      sl__dp_endpoint_detach(c.eps[i]);
      sl_job_destroy(pair.jobs[i]);
    }
    sl_actor_graph_destroy(q);
  }
  switchable sw;
  atomic_init(&sw.ep, c.eps[1]);
  sl_job_config cfg0 =
      SL_JOB_CONFIG(.node = 0,
                    .transport = sl__dp_endpoint_transport(c.eps[0]));
  sl_job_config cfg1 = SL_JOB_CONFIG(.node = 1, .hang_timeout_ms = -1,
                                     .transport = {&sw_vtable, &sw});
  assert_int_equal(sl_job_create(p, &cfg0, &c.jobs[0]), SL_OK);
  assert_int_equal(sl_job_create(p, &cfg1, &c.jobs[1]), SL_OK);
  assert_int_equal(sl__dp_endpoint_attach(c.eps[0], c.jobs[0]), SL_OK);
  assert_int_equal(sl__dp_endpoint_attach(c.eps[1], c.jobs[1]), SL_OK);
  assert_int_equal(sl_job_start(c.jobs[0]), SL_OK);
  assert_int_equal(sl_job_start(c.jobs[1]), SL_OK);
  for (int i = 0; i < SOON_MS && !atomic_load(&g.blocked); i++)
    sl__sleep_ns(1000000);
  assert_true(atomic_load(&g.blocked));
  /* Node 1 "dies": its endpoint goes away with its job still attached. */
  atomic_store(&sw.ep, NULL);
  sl__dp_endpoint_destroy(c.eps[1]);
  c.eps[1] = NULL;
  sl_status st = wait_bounded(c.jobs[0]);
  const char *msg = sl_last_error();
  printf("node 0: %s\n", msg);
  assert_int_equal(st, SL_ECOMM);
  expect_in(msg, "node 0: node 1 (127.0.0.1:");
  expect_in(msg, "lost");
  atomic_store(&g.release, 1);
  /* Node 1's next send fails: its job ends too. */
  assert_int_not_equal(wait_bounded(c.jobs[1]), SL_OK);
  cluster_down(&c);
  sl_actor_graph_destroy(p);
}

static void test_peer_lost_mid_job(void **state) {
  (void)state;
  peer_lost(false);
}

static void test_peer_lost_in_second_job(void **state) {
  (void)state;
  peer_lost(true);
}

/* The daemon's case (session/daemon.c): node 1 is a program, a new process
 * with a new address for every job. The previous one said DONE and then
 * closed its endpoint, but node 0 read that close only after it had
 * attached the next job: the close was taken for the loss of node 1 in
 * the new job ("node 1 lost"). A fake node 1 plays the previous process
 * and closes exactly then; node 0's new job must run with the new node 1,
 * and nothing is reported. */
static void test_previous_process_closes_late(void **state) {
  (void)state;
  errlog e;
  errlog_init(&e);
  sl__dp_config c0 = dp_cfg(0, 2);
  c0.on_error = errlog_cb;
  c0.on_error_ctx = &e;
  sl__dp_endpoint *a = dp_make(&c0);
  uint16_t old_port;
  int old_ls = fake_listen(&old_port);
  assert_int_equal(sl__dp_endpoint_set_peer(a, 1, "127.0.0.1", old_port),
                   SL_OK);
  /* The previous node 1: connected, its job ended (DONE, acknowledged). */
  int s = fake_client_open(sl__dp_endpoint_port(a), 1, 0, 2);
  sl__dp_frame f = {.version = SL__DP_VERSION,
                    .kind = SL__DP_DONE,
                    .flags = SL__DP_FLAG_QUIESCENT};
  fake_frame(s, &f, NULL);
  for (bool acked = false; !acked;) {
    uint8_t in[SL__DP_HDR_BYTES];
    sl__dp_frame g;
    assert_int_equal(fake_read(s, in, sizeof in, SOON_MS), sizeof in);
    assert_int_equal(sl__dp_frame_decode(in, 0, &g), SL_OK);
    acked = g.kind == SL__DP_DONE_ACK;
  }
  /* The next node 1, at its own address; node 0 learns it and attaches
   * the next job before it reads the previous process's close. */
  sl__dp_config c1 = dp_cfg(1, 2);
  sl__dp_endpoint *b = dp_make(&c1);
  assert_int_equal(
      sl__dp_endpoint_set_peer(b, 0, "127.0.0.1", sl__dp_endpoint_port(a)),
      SL_OK);
  assert_int_equal(
      sl__dp_endpoint_set_peer(a, 1, "127.0.0.1", sl__dp_endpoint_port(b)),
      SL_OK);
  seen s0 = {0};
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 20);
  sl_actor_id k =
      add_actor(p, "k", SL_ACTOR_KERNEL, 1, 0, 0, act_copy_check, NULL, 0);
  sl_actor_id z =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, act_sink_check, &s0, 0);
  connect_to(p, add_out(p, src, 2, 64), k);
  connect_to(p, add_out(p, k, 2, 64), z);
  cluster c = {.n = 2, .eps = {a, b}};
  cluster_load(&c, p, 0);
  /* The previous process closes now. Either node 0 closed that connection
   * already, or it reads the end of stream and closes it then: once the
   * fake sees the close, node 0 has done whatever it does with it. */
  shutdown(s, SHUT_WR);
  assert_true(fake_sees_close(s, SOON_MS));
  close(s);
  close(old_ls);
  for (uint32_t i = 0; i < 2; i++)
    assert_int_equal(sl_job_start(c.jobs[i]), SL_OK);
  cluster_wait(&c);
  if (e.n) fail_msg("node 0 reported: %s", e.msgs);
  expect_ok(&c);
  assert_int_equal(s0.n, 20);
  assert_int_equal(s0.bad, 0);
  cluster_down(&c);
  sl_actor_graph_destroy(p);
  errlog_fini(&e);
}

/* A "node 1" that passes the handshake and then sends frames: a valid one
 * is delivered to node 0's sink; then a corrupt one, or one that does not
 * fit the plan, fails node 0's job naming node 1. */
static void test_bad_frame_fails_job(void **state) {
  (void)state;
  const char *want[] = {"payload checksum mismatch", "does not fit the plan",
                        "header checksum mismatch"};
  for (int k = 0; k < 3; k++) {
    sl_actor_graph *p;
    assert_int_equal(sl_actor_graph_create(&p), SL_OK);
    seen s0 = {0};
    sl_actor_id src =
        add_actor(p, "src", SL_ACTOR_SOURCE, 1, 0, 0, act_fill, NULL, 10);
    sl_actor_id z =
        add_actor(p, "sink", SL_ACTOR_SINK, 0, 0, 0, act_sink_check, &s0, 0);
    int32_t r = add_out(p, src, 2, 64);
    connect_to(p, r, z);
    sl__dp_config cfg = dp_cfg(0, 2);
    sl__dp_endpoint *ep = dp_make(&cfg);
    sl_job_config jc =
        SL_JOB_CONFIG(.node = 0, .transport = sl__dp_endpoint_transport(ep));
    sl_job *job;
    assert_int_equal(sl_job_create(p, &jc, &job), SL_OK);
    assert_int_equal(sl__dp_endpoint_attach(ep, job), SL_OK);
    assert_int_equal(sl_job_start(job), SL_OK);
    int s = fake_client_open(sl__dp_endpoint_port(ep), 1, 0, 2);
    uint8_t data[64];
    for (size_t i = 0; i < sizeof data; i++)
      data[i] = pattern(0, i);
    sl_msg m = {.dst = z,
                .src = src,
                .piece = 0,
                .desc = r,
                .index = 0,
                .slot = 0,
                .kind = SL_MSG_READY,
                .origin_node = 1};
    sl__dp_frame f;
    sl__dp_frame_from_msg(&m, sizeof data, &f);
    f.payload_crc = sl__crc32c(0, data, sizeof data);
    fake_frame(s, &f, data);
    /* Node 0's sink consumed it once its register comes back. */
    bool returned = false;
    while (!returned) {
      uint8_t in[SL__DP_HDR_BYTES];
      sl__dp_frame g;
      assert_int_equal(fake_read(s, in, sizeof in, SOON_MS), sizeof in);
      assert_int_equal(sl__dp_frame_decode(in, 0, &g), SL_OK);
      returned = g.kind == SL__DP_MSG && g.msg_kind == SL_MSG_RETURN;
    }
    m.piece = 1;
    m.index = 1;
    for (size_t i = 0; i < sizeof data; i++)
      data[i] = pattern(1, i);
    sl__dp_frame_from_msg(&m, sizeof data, &f);
    f.payload_crc = sl__crc32c(0, data, sizeof data);
    if (k == 0) f.payload_crc ^= 0x100;
    if (k == 1) f.dst = sl_actor_id_make(0, 0, 0, 9);
    uint8_t hdr[SL__DP_HDR_BYTES];
    sl__dp_frame_encode(&f, hdr);
    if (k == 2) hdr[30] ^= 1;
    fake_write_all(s, hdr, sizeof hdr);
    fake_write_all(s, data, sizeof data);
    sl_status st = wait_bounded(job);
    const char *msg = sl_last_error();
    printf("case %d: %s\n", k, msg);
    assert_int_equal(st, SL_ECOMM);
    expect_in(msg, "node 0: node 1 (127.0.0.1:");
    expect_in(msg, want[k]);
    assert_int_equal(s0.n, 1); /* the valid one went through */
    assert_int_equal(s0.bad, 0);
    assert_true(fake_sees_close(s, SOON_MS));
    close(s);
    sl__dp_endpoint_detach(ep);
    sl_job_destroy(job);
    sl__dp_endpoint_destroy(ep);
    sl_actor_graph_destroy(p);
  }
}

/* ---- hang detection across nodes
 * ------------------------------------------------ */

static sl_status act_sum(sl_act *a) { return SL_OK; }

/* src (node 0, 2 registers) feeds an accumulate of 4 and a join that also
 * reads the accumulate (both on node 1): the join holds both registers
 * while the accumulate waits for a third piece (tests/actor/test_hang.c). */
static void test_hang_across_nodes(void **state) {
  (void)state;
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 8);
  sl_actor_id acc =
      add_actor(p, "acc", SL_ACTOR_ACCUMULATE, 1, 1, 0, act_sum, NULL, 4);
  sl_actor_id join =
      add_actor(p, "join", SL_ACTOR_KERNEL, 1, 2, 0, NULL, NULL, 0);
  int32_t s_out = add_out(p, src, 2, 8);
  connect_to(p, s_out, acc);
  connect_to(p, s_out, join);
  connect_to(p, add_out(p, acc, 1, 8), join);
  connect_to(p, add_out(p, join, 1, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 1, 0, 1, NULL, NULL, 0));
  cluster c;
  cluster_up(&c, 2, NULL);
  sl_logging_set_level(SL_LOGGING_OFF); /* the reports are logged too */
  cluster_run(&c, p, 300);
  sl_logging_set_level(SL_LOGGING_WARN);
  for (int n = 0; n < 2; n++) {
    printf("node %d: %s\n", n, c.msg[n]);
    assert_int_equal(c.st[n], SL_EHANG);
  }
  const char *r0 = sl_job_hang_report(c.jobs[0]),
             *r1 = sl_job_hang_report(c.jobs[1]);
  printf("%s%s", r0, r1);
  expect_in(r0, "'src' (source, node 0, device 0, stream 0): produced 2 of 8 "
                "pieces");
  expect_in(r1,
            "'join' (kernel, node 1, device 2, stream 0): waits for input 1");
  cluster_down(&c);
  sl_actor_graph_destroy(p);
}

static sl_status act_slow(sl_act *a) {
  if (a->piece == 3) sl__sleep_ns(1500 * 1000000ull); /* 7x the timeout */
  memcpy(a->out[0]->data, a->in[0]->data, a->in[0]->bytes);
  return SL_OK;
}

/* A slow kernel on another node is not a hang. */
static void test_slow_remote_is_not_a_hang(void **state) {
  (void)state;
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  seen s0 = {0};
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 8);
  sl_actor_id k =
      add_actor(p, "slow", SL_ACTOR_KERNEL, 1, 0, 0, act_slow, NULL, 0);
  sl_actor_id z =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, act_sink_check, &s0, 0);
  connect_to(p, add_out(p, src, 2, 32), k);
  connect_to(p, add_out(p, k, 2, 32), z);
  cluster c;
  cluster_up(&c, 2, NULL);
  cluster_run(&c, p, 200);
  expect_ok(&c);
  assert_int_equal(s0.n, 8);
  assert_int_equal(s0.bad, 0);
  sl__dp_stats s;
  sl__dp_endpoint_get_stats(c.eps[1], &s);
  assert_true(s.probes_answered > 0); /* node 0 asked while it waited */
  cluster_down(&c);
  sl_actor_graph_destroy(p);
}

/* ---- a collective across nodes and the hang detector
 * ---------------------------- */

enum { AR_COUNT = 256 };

/* One member of a two-member all-reduce (member k on node k): the firing
 * defers, arrives at its node's span and completes with the round, as a
 * session's collective actor does (session/acts.c). */
typedef struct member {
  sl__span *span;
  int k;
  int64_t slow_piece; /* sleeps before arriving for this piece (-1: none) */
} member;

static float member_value(int k, int64_t piece, size_t i) {
  return (float)((k ? 10 : 1) * (piece + 1) + (int64_t)(i % 7));
}

static void member_done(void *arg, sl_status st) {
  sl_completion_done(arg, st);
}

static void member_waiting(void *arg, bool on) {
  sl_completion_waiting(arg, on);
}

static sl_status act_member(sl_act *a) {
  member *m = a->ctx;
  if (a->piece == m->slow_piece)
    sl__sleep_ns(1500 * 1000000ull); /* 7x the timeout */
  float *in = a->out[0]->data;
  for (size_t i = 0; i < AR_COUNT; i++)
    in[i] = member_value(m->k, a->piece, i);
  sl_completion *c = sl_act_defer(a);
  /* in place: the output register is both (the span reduces into it) */
  sl_status st = sl__span_arrive(m->span, m->k, in, AR_COUNT * sizeof(float),
                                 in, AR_COUNT * sizeof(float), member_done, c);
  if (st != SL_OK) sl_completion_done(c, st);
  return SL_OK;
}

/* Every element is the sum of both members' values. */
static sl_status act_sink_sum(sl_act *a) {
  seen *s = a->ctx;
  const float *d = a->in[0]->data;
  for (size_t i = 0; i < AR_COUNT; i++)
    if (d[i] != member_value(0, a->in[0]->piece, i) +
                    member_value(1, a->in[0]->piece, i)) {
      s->bad++;
      break;
    }
  s->n++;
  return SL_OK;
}

typedef struct span_nodes {
  sl__net_coll *nc[2];
  sl__comm *comm[2];
  sl__span *span[2];
  member m[2];
} span_nodes;

/* Node k's span of one all-reduce of AR_COUNT floats over members 0 (node
 * 0) and 1 (node 1), telling the completions when members wait. */
static void span_nodes_up(span_nodes *o, cluster *c) {
  static const int workers[2] = {0, 1};
  static const uint32_t node_of[2] = {0, 1};
  sl__coll_desc d;
  memset(&d, 0, sizeof d);
  d.name = "grad";
  d.op = SL__COLL_ALL_REDUCE;
  d.dtype = SL_DTYPE_F32;
  d.reduce = SL_REDUCE_SUM;
  d.n = 2;
  d.workers = workers;
  d.block.ndim = 1;
  d.block.dims[0] = AR_COUNT;
  sl__comm_config cc = {2, 0, NULL};
  for (uint32_t k = 0; k < 2; k++) {
    sl__coll *geo;
    assert_int_equal(sl__net_coll_create(c->eps[k], NULL, &o->nc[k]), SL_OK);
    assert_int_equal(sl__comm_create(&cc, &o->comm[k]), SL_OK);
    assert_int_equal(sl__coll_create(o->comm[k], &d, &geo), SL_OK);
    sl__span_desc sd = {geo, node_of, k, o->nc[k], 0xa11ull, member_waiting};
    assert_int_equal(sl__span_create(&sd, &o->span[k]), SL_OK);
    o->m[k] = (member){o->span[k], (int)k, -1};
  }
}

/* After cluster_down (no frame can arrive any more). */
static void span_nodes_down(span_nodes *o) {
  for (int k = 0; k < 2; k++) {
    sl__span_destroy(o->span[k]);
    sl__net_coll_destroy(o->nc[k]);
    sl__comm_destroy(o->comm[k]);
  }
}

/* src (node k, `pieces[k]` pieces) -> the member -> a sink checking sums. */
static sl_actor_graph *all_reduce_graph(span_nodes *o, const int64_t *pieces,
                                        seen *sinks) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  static const char *names[2][3] = {{"src0", "grad0", "sink0"},
                                    {"src1", "grad1", "sink1"}};
  for (uint32_t k = 0; k < 2; k++) {
    sl_actor_id src = add_actor(p, names[k][0], SL_ACTOR_SOURCE, k, 0, 0, NULL,
                                NULL, pieces[k]);
    sl_actor_id m = add_actor(p, names[k][1], SL_ACTOR_KERNEL, k, 0, 0,
                              act_member, &o->m[k], 0);
    connect_to(p, add_out(p, src, 1, 8), m);
    connect_to(p, add_out(p, m, 2, AR_COUNT * sizeof(float)),
               add_actor(p, names[k][2], SL_ACTOR_SINK, k, 0, 1, act_sink_sum,
                         &sinks[k], 0));
  }
  return p;
}

/* What a session does when its job fails (sl__session_abort_collectives):
 * the rounds between nodes end, completing the members that wait. */
typedef struct abort_watch {
  sl_job *job;
  sl__net_coll *nc;
} abort_watch;

static void *abort_rounds_on_failure(void *arg) {
  abort_watch *w = arg;
  uint64_t end = sl__now_ns() + (uint64_t)SOON_MS * 1000000ull;
  while (sl_job_failure_origin(w->job) < 0 && sl__now_ns() < end)
    sl__sleep_ns(1000000);
  sl__net_coll_abort(w->nc, SL_EABORTED, "the job failed");
  return NULL;
}

/* Node 1 runs one piece, node 0 two: node 0's member of the second round
 * waits for a peer that never comes. It is a hang, reported on node 0
 * with the member waiting, not a firing executing forever. */
static void test_collective_hang_across_nodes(void **state) {
  (void)state;
  cluster c;
  cluster_up(&c, 2, NULL);
  span_nodes o;
  span_nodes_up(&o, &c);
  seen sinks[2] = {{0}};
  sl_actor_graph *p = all_reduce_graph(&o, (const int64_t[]){2, 1}, sinks);
  sl_logging_set_level(SL_LOGGING_OFF); /* the report is logged too */
  cluster_load(&c, p, 300);
  abort_watch w = {c.jobs[0], o.nc[0]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, abort_rounds_on_failure, &w), 0);
  for (uint32_t i = 0; i < c.n; i++)
    assert_int_equal(sl_job_start(c.jobs[i]), SL_OK);
  cluster_wait(&c);
  pthread_join(t, NULL);
  sl_logging_set_level(SL_LOGGING_WARN);
  printf("node 0: %s\n", c.msg[0]);
  assert_int_equal(c.st[0], SL_EHANG);
  assert_int_equal(c.st[1], SL_OK);
  assert_int_equal(sinks[0].n, 1); /* the first round went through */
  assert_int_equal(sinks[1].n, 1);
  assert_int_equal(sinks[0].bad + sinks[1].bad, 0);
  const char *r0 = sl_job_hang_report(c.jobs[0]);
  printf("%s", r0);
  expect_in(r0, "'grad0' (kernel, node 0, device 0, stream 0)");
  expect_in(r0, "deferred, waiting for other firings");
  cluster_down(&c);
  span_nodes_down(&o);
  sl_actor_graph_destroy(p);
}

/* A member whose peer on the other node is slow to arrive (a long kernel
 * there) waits, and that is not a hang. */
static void test_slow_collective_peer_is_not_a_hang(void **state) {
  (void)state;
  cluster c;
  cluster_up(&c, 2, NULL);
  span_nodes o;
  span_nodes_up(&o, &c);
  o.m[1].slow_piece = 1;
  seen sinks[2] = {{0}};
  sl_actor_graph *p = all_reduce_graph(&o, (const int64_t[]){3, 3}, sinks);
  cluster_run(&c, p, 200);
  expect_ok(&c);
  for (int k = 0; k < 2; k++) {
    assert_int_equal(sinks[k].n, 3);
    assert_int_equal(sinks[k].bad, 0);
  }
  /* No register crosses between the nodes, yet the hang check counted
   * frames in transit: the collective's, one each way per round at least,
   * every one of them handled. */
  uint64_t sent = 0, received = 0;
  for (int k = 0; k < 2; k++) {
    bool q;
    uint64_t progress, s, r;
    sl__dp_local_state(c.eps[k], &q, &progress, &s, &r);
    sent += s;
    received += r;
  }
  printf("frames counted in transit: %llu sent, %llu received\n",
         (unsigned long long)sent, (unsigned long long)received);
  assert_true(sent >= 6);
  assert_int_equal(sent, received);
  cluster_down(&c);
  span_nodes_down(&o);
  sl_actor_graph_destroy(p);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_three_nodes),
      cmocka_unit_test(test_large_registers),
      cmocka_unit_test(test_both_ways_at_once),
      cmocka_unit_test(test_jobs_in_sequence),
      cmocka_unit_test(test_credit_window),
      cmocka_unit_test(test_kernel_error_aborts_all),
      cmocka_unit_test(test_peer_lost_mid_job),
      cmocka_unit_test(test_peer_lost_in_second_job),
      cmocka_unit_test(test_previous_process_closes_late),
      cmocka_unit_test(test_bad_frame_fails_job),
      cmocka_unit_test(test_hang_across_nodes),
      cmocka_unit_test(test_slow_remote_is_not_a_hang),
      cmocka_unit_test(test_collective_hang_across_nodes),
      cmocka_unit_test(test_slow_collective_peer_is_not_a_hang),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
