/* Several nodes in one process over the loopback transport: register bytes
 * cross nodes, messages that do not fit the plan are refused. */
#include "actor_helpers.h"

enum { BYTES = 1000 };

static sl_status act_fill(sl_act *a) {
  unsigned char *d = a->out[0]->data;
  for (int i = 0; i < BYTES; i++)
    d[i] = (unsigned char)(a->piece * 31 + i);
  return SL_OK;
}

static sl_status act_copy_check(sl_act *a) {
  const unsigned char *s = a->in[0]->data;
  for (int i = 0; i < BYTES; i++)
    if (s[i] != (unsigned char)(a->piece * 31 + i))
      return sl_act_fail(a, SL_EMISMATCH, "piece %lld byte %d",
                         (long long)a->piece, i);
  memcpy(a->out[0]->data, s, BYTES);
  return SL_OK;
}

typedef struct seen {
  int64_t n, bad;
} seen;

static sl_status act_sink_check(sl_act *a) {
  seen *s = a->ctx;
  const unsigned char *d = a->in[0]->data;
  if (a->in[0]->piece != s->n) s->bad++;
  for (int i = 0; i < BYTES; i++)
    if (d[i] != (unsigned char)(s->n * 31 + i)) {
      s->bad++;
      break;
    }
  s->n++;
  return SL_OK;
}

typedef struct cluster {
  sl_loopback *lb;
  sl_job *jobs[8];
  uint32_t n;
} cluster;

/* n nodes, node i running plans[i] (one plan for all: plans[0]). */
static void cluster_create_parts(cluster *c, sl_actor_graph *const *plans,
                                 bool one, uint32_t n) {
  c->n = n;
  assert_int_equal(sl_loopback_create(n, &c->lb), SL_OK);
  for (uint32_t i = 0; i < n; i++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = i, .transport = sl_loopback_transport(c->lb));
    if (sl_job_create(plans[one ? 0 : i], &cfg, &c->jobs[i]) != SL_OK)
      fail_msg("node %u: %s", i, sl_last_error());
    assert_int_equal(sl_loopback_attach(c->lb, i, c->jobs[i]), SL_OK);
  }
}

static void cluster_create(cluster *c, sl_actor_graph *p, uint32_t n) {
  cluster_create_parts(c, &p, true, n);
}

/* Starts every node's job and waits for all of them. */
static void cluster_run(cluster *c) {
  for (uint32_t i = 0; i < c->n; i++)
    assert_int_equal(sl_job_start(c->jobs[i]), SL_OK);
  for (uint32_t i = 0; i < c->n; i++)
    if (sl_job_wait(c->jobs[i]) != SL_OK)
      fail_msg("node %u: %s", i, sl_last_error());
}

static void cluster_destroy(cluster *c) {
  for (uint32_t i = 0; i < c->n; i++)
    sl_job_destroy(c->jobs[i]);
  sl_loopback_destroy(c->lb);
}

/* src (node 0) -> a (node 1) -> b (node 2) -> c (node 1) -> sink (node 0);
 * a's output is also read by a second sink on node 2. */
static void test_chain_across_nodes(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  seen s0 = {0}, s2 = {0};
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 300);
  sl_actor_id a =
      add_actor(p, "a", SL_ACTOR_KERNEL, 1, 0, 0, act_copy_check, NULL, 0);
  sl_actor_id b =
      add_actor(p, "b", SL_ACTOR_KERNEL, 2, 0, 0, act_copy_check, NULL, 0);
  sl_actor_id c =
      add_actor(p, "c", SL_ACTOR_KERNEL, 1, 1, 2, act_copy_check, NULL, 0);
  sl_actor_id z0 =
      add_actor(p, "sink0", SL_ACTOR_SINK, 0, 1, 0, act_sink_check, &s0, 0);
  sl_actor_id z2 =
      add_actor(p, "sink2", SL_ACTOR_SINK, 2, 0, 0, act_sink_check, &s2, 0);
  connect_to(p, add_out(p, src, 2, BYTES), a);
  int32_t ao = add_out(p, a, 2, BYTES);
  connect_to(p, ao, b);
  connect_to(p, ao, z2);
  connect_to(p, add_out(p, b, 1, BYTES), c);
  connect_to(p, add_out(p, c, 3, BYTES), z0);
  cluster cl;
  cluster_create(&cl, p, 3);
  cluster_run(&cl);
  assert_int_equal(s0.n, 300);
  assert_int_equal(s0.bad, 0);
  assert_int_equal(s2.n, 300);
  assert_int_equal(s2.bad, 0);
  for (uint32_t i = 0; i < 3; i++) {
    sl_job_stats st;
    assert_int_equal(sl_job_get_stats(cl.jobs[i], &st), SL_OK);
    assert_true(st.messages_remote > 0);
    assert_int_equal(st.in_flight, 0);
    assert_int_equal(st.messages_left, 0);
  }
  /* Node 1 mirrors src's 2 registers for a, and b's 1 for c. */
  sl_job_stats st1;
  assert_int_equal(sl_job_get_stats(cl.jobs[1], &st1), SL_OK);
  assert_int_equal(st1.registers, 2 + 3 + 2 + 1);
  cluster_destroy(&cl);
  sl_actor_graph_destroy(p);
}

/* One node's part: add (proxy or not) an actor at an index, an output at a
 * wire number and slot, a reader at its slot and position. */
static sl_actor_id part_actor(sl_actor_graph *p, bool proxy, const char *name,
                              sl_actor_kind kind, uint32_t node,
                              uint32_t device, uint32_t stream, uint32_t index,
                              sl_act_fn act, void *ctx, int64_t count) {
  sl_actor_desc d = {name, kind, node, device, stream, act, ctx, count};
  sl_actor_id id = 0;
  sl_status st = proxy ? sl_actor_graph_add_proxy(p, &d, index, &id)
                       : sl_actor_graph_add_actor_at(p, &d, index, &id);
  if (st != SL_OK) fail_msg("%s: %s", name, sl_last_error());
  return id;
}

static int32_t part_out(sl_actor_graph *p, sl_actor_id producer, int32_t count,
                        int32_t wire) {
  sl_regst_desc d = {NULL, count, BYTES, -1, 0, NULL, NULL};
  int32_t r = -1;
  if (sl_actor_graph_add_output_at(p, producer, &d, wire, 0, &r) != SL_OK)
    fail_msg("output %d: %s", (int)wire, sl_last_error());
  return r;
}

static void part_connect(sl_actor_graph *p, int32_t desc, sl_actor_id consumer,
                         uint16_t position) {
  if (sl_actor_graph_connect_at(p, desc, consumer, 0, position) != SL_OK)
    fail_msg("connect: %s", sl_last_error());
}

/* The chain of test_chain_across_nodes, each node given only its part:
 * its actors, the other nodes' actors it exchanges registers with as
 * proxies, and numbers (indices, descriptor numbers, readers' positions)
 * other than the order the parts are built in. */
static void test_parts_across_nodes(void **state) {
  enum { SRC = 10, A = 20, B = 30, C = 40 }; /* descriptors on the wire */
  seen s0 = {0}, s2 = {0};
  sl_actor_graph *p[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(sl_actor_graph_create(&p[i]), SL_OK);
  /* node 0: src, sink0; proxies a, c */
  sl_actor_id src = part_actor(p[0], false, "src", SL_ACTOR_SOURCE, 0, 0, 0, 5,
                               act_fill, NULL, 300);
  sl_actor_id z0 = part_actor(p[0], false, "sink0", SL_ACTOR_SINK, 0, 1, 0, 4,
                              act_sink_check, &s0, 0);
  sl_actor_id a0 =
      part_actor(p[0], true, "a", SL_ACTOR_KERNEL, 1, 0, 0, 3, NULL, NULL, 0);
  sl_actor_id c0 =
      part_actor(p[0], true, "c", SL_ACTOR_KERNEL, 1, 1, 2, 2, NULL, NULL, 0);
  part_connect(p[0], part_out(p[0], src, 2, SRC), a0, 0);
  part_connect(p[0], part_out(p[0], c0, 3, C), z0, 0);
  /* node 1: a, c; proxies src, b, sink2, sink0 */
  sl_actor_id c1 = part_actor(p[1], false, "c", SL_ACTOR_KERNEL, 1, 1, 2, 2,
                              act_copy_check, NULL, 0);
  sl_actor_id a1 = part_actor(p[1], false, "a", SL_ACTOR_KERNEL, 1, 0, 0, 3,
                              act_copy_check, NULL, 0);
  sl_actor_id src1 =
      part_actor(p[1], true, "src", SL_ACTOR_SOURCE, 0, 0, 0, 5, NULL, NULL, 0);
  sl_actor_id b1 =
      part_actor(p[1], true, "b", SL_ACTOR_KERNEL, 2, 0, 0, 7, NULL, NULL, 0);
  sl_actor_id z21 =
      part_actor(p[1], true, "sink2", SL_ACTOR_SINK, 2, 0, 0, 1, NULL, NULL, 0);
  sl_actor_id z01 =
      part_actor(p[1], true, "sink0", SL_ACTOR_SINK, 0, 1, 0, 4, NULL, NULL, 0);
  part_connect(p[1], part_out(p[1], src1, 2, SRC), a1, 0);
  int32_t ao = part_out(p[1], a1, 2, A);
  part_connect(p[1], ao, b1, 1); /* b reads second, sink2 first */
  part_connect(p[1], ao, z21, 0);
  part_connect(p[1], part_out(p[1], b1, 1, B), c1, 0);
  part_connect(p[1], part_out(p[1], c1, 3, C), z01, 0);
  /* node 2: b, sink2; proxies a, c */
  sl_actor_id z2 = part_actor(p[2], false, "sink2", SL_ACTOR_SINK, 2, 0, 0, 1,
                              act_sink_check, &s2, 0);
  sl_actor_id b2 = part_actor(p[2], false, "b", SL_ACTOR_KERNEL, 2, 0, 0, 7,
                              act_copy_check, NULL, 0);
  sl_actor_id a2 =
      part_actor(p[2], true, "a", SL_ACTOR_KERNEL, 1, 0, 0, 3, NULL, NULL, 0);
  sl_actor_id c2 =
      part_actor(p[2], true, "c", SL_ACTOR_KERNEL, 1, 1, 2, 2, NULL, NULL, 0);
  int32_t ao2 = part_out(p[2], a2, 2, A);
  part_connect(p[2], ao2, z2, 0);
  part_connect(p[2], ao2, b2, 1);
  part_connect(p[2], part_out(p[2], b2, 1, B), c2, 0);
  cluster cl;
  cluster_create_parts(&cl, p, false, 3);
  cluster_run(&cl);
  assert_int_equal(s0.n, 300);
  assert_int_equal(s0.bad, 0);
  assert_int_equal(s2.n, 300);
  assert_int_equal(s2.bad, 0);
  cluster_destroy(&cl);
  for (int i = 0; i < 3; i++)
    sl_actor_graph_destroy(p[i]);

  /* What a part must hold: every reader position of what its actors
   * produce, every slot of its actors; proxies only for other nodes. */
  sl_actor_graph *q;
  assert_int_equal(sl_actor_graph_create(&q), SL_OK);
  sl_actor_id qs = part_actor(q, false, "src", SL_ACTOR_SOURCE, 0, 0, 0, 0,
                              act_fill, NULL, 3);
  sl_actor_id qk =
      part_actor(q, true, "k", SL_ACTOR_SINK, 1, 0, 0, 0, NULL, NULL, 0);
  part_connect(q, part_out(q, qs, 1, 0), qk, 1); /* reader 0 missing */
  assert_int_equal(sl_actor_graph_check(q), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "positions"));
  sl_actor_desc d = {"k", SL_ACTOR_SINK, 1, 0, 0, NULL, NULL, 0};
  sl_actor_id id;
  assert_int_equal(sl_actor_graph_add_actor_at(q, &d, 0, &id), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "taken"));
  sl_actor_graph_destroy(q);
  assert_int_equal(sl_actor_graph_create(&q), SL_OK);
  sl_actor_id qs2 = part_actor(q, false, "src", SL_ACTOR_SOURCE, 0, 0, 0, 0,
                               act_fill, NULL, 3);
  sl_actor_id qk2 =
      part_actor(q, true, "k", SL_ACTOR_SINK, 0, 0, 0, 1, NULL, NULL, 0);
  part_connect(q, part_out(q, qs2, 1, 0), qk2, 0);
  sl_job *j = NULL;
  assert_int_equal(sl_job_create(q, NULL, &j), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "a proxy on node 0"));
  sl_actor_graph_destroy(q);
}

static void test_bad_messages(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 3);
  sl_actor_id k = add_actor(p, "k", SL_ACTOR_SINK, 1, 0, 0, NULL, NULL, 0);
  int32_t d = add_out(p, src, 2, 16);
  connect_to(p, d, k);
  cluster cl;
  cluster_create(&cl, p, 2);
  sl_job *j1 = cl.jobs[1];
  unsigned char payload[16] = {0};
  sl_msg ok = {.dst = k,
               .src = src,
               .piece = 0,
               .desc = d,
               .index = 0,
               .slot = 0,
               .kind = SL_MSG_READY,
               .origin_node = 0};
  struct {
    sl_msg m;
    size_t n;
    const char *why;
  } bad[8];
  for (int i = 0; i < 8; i++) {
    bad[i].m = ok;
    bad[i].n = 16;
  }
  bad[0].m.dst = src;
  bad[0].why = "no such actor here";
  bad[1].m.dst = sl_actor_id_make(1, 0, 0, 9);
  bad[1].why = "no such actor here";
  bad[2].m.slot = 3;
  bad[2].why = "no such input slot";
  bad[3].m.index = 2;
  bad[3].why = "no such register";
  bad[4].n = 15;
  bad[4].why = "payload size";
  bad[5].m.src = k;
  bad[5].why = "does not match the sender";
  bad[6].m.kind = 99;
  bad[6].why = "unknown message kind";
  bad[7].m.kind = SL_MSG_CMD;
  bad[7].m.cmd = SL_CMD_ABORT;
  bad[7].m.index = 0;
  bad[7].why = "invalid status";
  for (int i = 0; i < 8; i++) {
    assert_int_equal(sl_job_deliver(j1, &bad[i].m, payload, bad[i].n),
                     SL_EINVAL);
    if (!strstr(sl_last_error(), bad[i].why))
      fail_msg("case %d: '%s' lacks '%s'", i, sl_last_error(), bad[i].why);
  }
  sl_msg ret = {.dst = src,
                .src = src,
                .desc = d,
                .index = 0,
                .slot = 0,
                .consumer = 0,
                .kind = SL_MSG_RETURN};
  assert_int_equal(sl_job_deliver(cl.jobs[0], &ret, NULL, 0), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "readers"));
  /* The job still runs normally. */
  for (uint32_t i = 0; i < 2; i++)
    assert_int_equal(sl_job_start(cl.jobs[i]), SL_OK);
  for (uint32_t i = 0; i < 2; i++)
    assert_int_equal(sl_job_wait(cl.jobs[i]), SL_OK);
  assert_int_equal(sl_job_deliver(j1, &ok, payload, 16), SL_ESTATE);
  cluster_destroy(&cl);

  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(0, &lb), SL_EINVAL);
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  assert_int_equal(sl_loopback_attach(lb, 2, NULL), SL_EINVAL);
  sl_loopback_destroy(lb);
  sl_loopback_destroy(NULL);
  sl_actor_graph_destroy(p);
}

/* A node with no job behind it: the send fails and the job says so. */
static void test_unattached_node(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 3);
  connect_to(p, add_out(p, src, 2, 16),
             add_actor(p, "far", SL_ACTOR_SINK, 1, 0, 0, NULL, NULL, 0));
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  sl_job_config cfg =
      SL_JOB_CONFIG(.node = 0, .transport = sl_loopback_transport(lb));
  sl_job *job;
  assert_int_equal(sl_job_create(p, &cfg, &job), SL_OK);
  assert_int_equal(sl_loopback_attach(lb, 0, job), SL_OK);
  assert_int_equal(sl_loopback_attach(lb, 0, job), SL_ESTATE);
  assert_int_equal(sl_job_run(job), SL_ECOMM);
  assert_non_null(strstr(sl_last_error(), "actor 'src'"));
  assert_non_null(strstr(sl_last_error(), "node 1 has no job attached"));
  sl_job_destroy(job);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(p);
}

/* A frame that passes validation but breaks the protocol (a register sent
 * again while the reader still holds it): the jobs stop with SL_ECOMM and
 * nothing is corrupted. The reader also waits for a local source, so it
 * cannot consume the first copy before the second arrives. */
static void test_forged_ready(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 1000);
  sl_actor_id local =
      add_actor(p, "local", SL_ACTOR_SOURCE, 1, 0, 1, NULL, NULL, 1000);
  sl_actor_id k =
      add_actor(p, "far_kernel", SL_ACTOR_KERNEL, 1, 0, 0, NULL, NULL, 0);
  int32_t d = add_out(p, src, 1, 16);
  connect_to(p, d, k);
  connect_to(p, add_out(p, local, 1, 16), k);
  connect_to(p, add_out(p, k, 1, 16),
             add_actor(p, "sink", SL_ACTOR_SINK, 1, 0, 0, NULL, NULL, 0));
  cluster cl;
  cluster_create(&cl, p, 2);
  unsigned char payload[16] = {0};
  sl_msg forged = {.dst = k,
                   .src = src,
                   .piece = 0,
                   .desc = d,
                   .index = 0,
                   .slot = 0,
                   .kind = SL_MSG_READY,
                   .origin_node = 0};
  sl_logging_set_level(SL_LOGGING_OFF);
  for (int i = 0; i < 2; i++)
    assert_int_equal(sl_job_deliver(cl.jobs[1], &forged, payload, 16), SL_OK);
  for (uint32_t i = 0; i < 2; i++)
    assert_int_equal(sl_job_start(cl.jobs[i]), SL_OK);
  for (uint32_t i = 0; i < 2; i++) {
    sl_clear_error();
    sl_status st = sl_job_wait(cl.jobs[i]);
    if (st != SL_ECOMM || !strstr(sl_last_error(), "far_kernel"))
      fail_msg("node %u: %s: %s", i, sl_status_str(st), sl_last_error());
  }
  assert_int_equal(sl_job_wait(cl.jobs[1]), SL_ECOMM);
  assert_non_null(strstr(sl_last_error(), "more ready registers than exist"));
  sl_logging_set_level(SL_LOGGING_WARN);
  cluster_destroy(&cl);
  sl_actor_graph_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_across_nodes),
      cmocka_unit_test(test_parts_across_nodes),
      cmocka_unit_test(test_bad_messages),
      cmocka_unit_test(test_unattached_node),
      cmocka_unit_test(test_forged_ready),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
