/* The runtime's hooks for network transports: sl_job_payload_target (the
 * register a READY's payload may be received into, so sl_job_deliver
 * copies nothing) and sl_job_abort_msg (a failure the transport saw, with
 * its own message). A transport in this file delivers through the hook. */
#include <stdatomic.h>

#include "actor_helpers.h"

enum { BYTES = 256 };

static sl_status act_fill(sl_act *a) {
  unsigned char *d = a->out[0]->data;
  for (int i = 0; i < BYTES; i++)
    d[i] = (unsigned char)(a->piece * 13 + i);
  return SL_OK;
}

typedef struct seen {
  int64_t n, bad;
} seen;

static sl_status act_sink(sl_act *a) {
  seen *s = a->ctx;
  const unsigned char *d = a->in[0]->data;
  for (int i = 0; i < BYTES; i++)
    if (d[i] != (unsigned char)(a->piece * 13 + i)) {
      s->bad++;
      break;
    }
  s->n++;
  return SL_OK;
}

/* Two nodes; READY payloads are written into the target register by the
 * "transport", then delivered with the target as the payload. */
typedef struct hook_net {
  _Atomic(sl_job *) jobs[2];
  atomic_int received_in_place;
} hook_net;

static sl_status hook_send(void *ctx, uint32_t node, const sl_msg *m,
                           const void *payload, size_t n) {
  hook_net *net = ctx;
  sl_job *job = atomic_load(&net->jobs[node]);
  if (m->kind != SL_MSG_READY) return sl_job_deliver(job, m, payload, n);
  void *target = NULL;
  sl_status st = sl_job_payload_target(job, m, n, &target);
  if (st != SL_OK) return st;
  memcpy(target, payload, n); /* as a socket read would */
  atomic_fetch_add(&net->received_in_place, 1);
  return sl_job_deliver(job, m, target, n);
}

static const sl_transport_vtable hook_vtable = {hook_send, NULL};

static sl_actor_graph *two_node_plan(seen *s, sl_actor_id *src,
                                     sl_actor_id *sink, int32_t *desc) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  *src = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_fill, NULL, 50);
  *sink = add_actor(p, "sink", SL_ACTOR_SINK, 1, 0, 0, act_sink, s, 0);
  *desc = add_out(p, *src, 2, BYTES);
  connect_to(p, *desc, *sink);
  return p;
}

static void test_receive_in_place(void **state) {
  seen s = {0};
  sl_actor_id src, sink;
  int32_t desc;
  sl_actor_graph *p = two_node_plan(&s, &src, &sink, &desc);
  hook_net net;
  atomic_init(&net.received_in_place, 0);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < 2; n++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = n, .transport = {&hook_vtable, &net});
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    atomic_init(&net.jobs[n], jobs[n]);
  }
  /* The checks sl_job_deliver makes, before any byte is written. */
  void *t = (void *)1;
  sl_msg m = {.dst = sink,
              .src = src,
              .desc = desc,
              .index = 0,
              .kind = SL_MSG_READY,
              .origin_node = 0};
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t), SL_OK);
  assert_non_null(t);
  void *t1 = NULL;
  m.index = 1;
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t1), SL_OK);
  assert_ptr_not_equal(t, t1); /* one mirror register per index */
  m.index = 2;
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t), SL_EINVAL);
  assert_null(t);
  assert_non_null(strstr(sl_last_error(), "no such register"));
  m.index = 0;
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES - 1, &t),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "payload size"));
  m.kind = SL_MSG_RETURN;
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t), SL_EINVAL);
  m.kind = SL_MSG_READY;
  m.src = sink;
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t), SL_EINVAL);
  m.src = src;
  m.dst = src; /* not on node 1 */
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t), SL_EINVAL);
  assert_int_equal(sl_job_payload_target(jobs[0], &m, BYTES, &t), SL_EINVAL);

  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_wait(jobs[n]), SL_OK);
  assert_int_equal(s.n, 50);
  assert_int_equal(s.bad, 0);
  assert_int_equal(atomic_load(&net.received_in_place), 50);
  /* Once waited for, no target any more. */
  m.dst = sink;
  assert_int_equal(sl_job_payload_target(jobs[1], &m, BYTES, &t), SL_ESTATE);
  assert_null(t);
  for (int n = 0; n < 2; n++)
    sl_job_destroy(jobs[n]);
  sl_actor_graph_destroy(p);
}

static void test_abort_msg(void **state) {
  seen s = {0};
  sl_actor_id src, sink;
  int32_t desc;
  sl_actor_graph *p = two_node_plan(&s, &src, &sink, &desc);
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < 2; n++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = n, .transport = sl_loopback_transport(lb));
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  /* Aborted before start: both nodes end with the message's status. */
  sl_job_abort_msg(jobs[1], SL_ECOMM, "transport: lost node 0 (test)");
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  assert_int_equal(sl_job_wait(jobs[1]), SL_ECOMM);
  assert_string_equal(sl_last_error(), "transport: lost node 0 (test)");
  assert_int_equal(sl_job_wait(jobs[0]), SL_ECOMM);
  assert_non_null(strstr(sl_last_error(), "aborted by another node"));
  /* A second abort does not replace the first message. */
  sl_job_abort_msg(jobs[1], SL_EIO, "later");
  assert_int_equal(sl_job_wait(jobs[1]), SL_ECOMM);
  assert_string_equal(sl_last_error(), "transport: lost node 0 (test)");
  for (int n = 0; n < 2; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_receive_in_place),
      cmocka_unit_test(test_abort_msg),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
