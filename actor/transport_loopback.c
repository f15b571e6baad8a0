/* The in-process loopback transport: node n's messages are delivered
 * straight into the job attached as node n, on the sending thread. Several
 * nodes then run in one process, which is how the tests simulate a
 * cluster. It implements `quiescent` by asking every other job, and nothing
 * is ever in transit: delivery happens inside send. */
#include <stdatomic.h>

#include "actor_int.h"

struct sl_loopback {
  uint32_t n;
  _Atomic(sl_job *) *jobs;
};

static sl_status lb_send(void *ctx, uint32_t node, const sl_msg *msg,
                         const void *payload, size_t nbytes) {
  sl_loopback *lb = ctx;
  if (node >= lb->n)
    return sl__fail(SL_ECOMM, "loopback: no node %u (there are %u)", node,
                    lb->n);
  sl_job *job = atomic_load(&lb->jobs[node]);
  if (!job)
    return sl__fail(SL_ECOMM, "loopback: node %u has no job attached", node);
  return sl_job_deliver(job, msg, payload, nbytes);
}

static bool lb_quiescent(void *ctx, uint32_t self, uint64_t *progress) {
  sl_loopback *lb = ctx;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < lb->n; i++) {
    if (i == self) continue;
    sl_job *job = atomic_load(&lb->jobs[i]);
    if (!job) return false;
    uint64_t p = 0;
    if (!sl_job_quiescent(job, &p)) return false;
    sum += p;
  }
  *progress = sum;
  return true;
}

static const sl_transport_vtable loopback_vtable = {lb_send, lb_quiescent};

sl_status sl_loopback_create(uint32_t nodes, sl_loopback **out) {
  *out = NULL;
  if (nodes == 0 || nodes > SL_ACTOR_MAX_NODES)
    return sl__fail(SL_EINVAL, "loopback: %u nodes", nodes);
  sl_loopback *lb;
  if (SL_NEW(lb) != SL_OK) return SL_ENOMEM;
  lb->jobs = sl__calloc(nodes, sizeof *lb->jobs);
  if (!lb->jobs) {
    sl__free(lb);
    return SL_ENOMEM;
  }
  for (uint32_t i = 0; i < nodes; i++)
    atomic_init(&lb->jobs[i], NULL);
  lb->n = nodes;
  *out = lb;
  return SL_OK;
}

void sl_loopback_destroy(sl_loopback *lb) {
  if (!lb) return;
  sl__free(lb->jobs);
  sl__free(lb);
}

sl_transport sl_loopback_transport(sl_loopback *lb) {
  return (sl_transport){&loopback_vtable, lb};
}

sl_status sl_loopback_attach(sl_loopback *lb, uint32_t node, sl_job *job) {
  if (node >= lb->n)
    return sl__fail(SL_EINVAL, "loopback: node %u out of range (%u nodes)",
                    node, lb->n);
  sl_job *expected = NULL;
  if (!atomic_compare_exchange_strong(&lb->jobs[node], &expected, job))
    return sl__fail(SL_ESTATE, "loopback: node %u already has a job", node);
  return SL_OK;
}
