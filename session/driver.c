/* The driver: the program's side of the job, seen by the job as one more
 * node reached through a transport. It owns the tick sources — one per
 * device, two registers each — and sends a tick only for steps the program
 * released, so a step starts only when asked and the job never runs ahead.
 * Readers return ticks through the transport; a returned register carries
 * the next released tick at once. When the job aborts, its ABORT reaches
 * the driver here: the session records the failure, aborts the collectives
 * still waiting for members (their deferred firings must complete for the
 * job to end) and wakes the program.
 *
 * For hang detection the driver is quiescent exactly while the program
 * waits inside the session for the job: between calls the program may
 * take as long as it likes. */
#include <string.h>

#include "session_int.h"

/* Sends the released ticks this source has registers for. Under d->lock. */
static void pump_one(sl_session *s, drv_tick *d) {
  int64_t rel = atomic_load(&s->released);
  while (d->sent < rel && d->n_free > 0) {
    int32_t idx = d->free_q[--d->n_free];
    d->pending[idx] = d->n_cons;
    sl_msg m;
    memset(&m, 0, sizeof m);
    m.kind = SL_MSG_READY;
    m.src = d->actor;
    m.piece = d->sent;
    m.desc = d->desc;
    m.index = idx;
    m.origin_node = (uint16_t)s->driver;
    for (int32_t c = 0; c < d->n_cons; c++) {
      m.dst = d->cons[c];
      m.slot = d->cons_slot[c];
      m.consumer = (uint16_t)c;
      sl_status st = sl_job_deliver(s->job, &m, NULL, 0);
      if (st != SL_OK) {
        sl_job_abort(s->job, st);
        return;
      }
    }
    d->sent++;
    atomic_fetch_add(&s->driver_msgs, 1);
  }
}

void sl__driver_pump(sl_session *s) {
  for (int32_t i = 0; i < s->n_ticks; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_lock(&d->lock);
    pump_one(s, d);
    pthread_mutex_unlock(&d->lock);
  }
}

void sl__driver_end(sl_session *s) {
  for (int32_t i = 0; i < s->n_ticks; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_lock(&d->lock);
    sl_msg m;
    memset(&m, 0, sizeof m);
    m.kind = SL_MSG_EOD;
    m.src = d->actor;
    m.desc = d->desc;
    m.origin_node = (uint16_t)s->driver;
    for (int32_t c = 0; c < d->n_cons; c++) {
      m.dst = d->cons[c];
      m.slot = d->cons_slot[c];
      sl_status st = sl_job_deliver(s->job, &m, NULL, 0);
      if (st != SL_OK) sl_job_abort(s->job, st);
    }
    pthread_mutex_unlock(&d->lock);
  }
}

void sl__session_fail(sl_session *s, sl_status st) {
  if (st == SL_OK) st = SL_EABORTED;
  int expect = SL_OK;
  if (!atomic_compare_exchange_strong(&s->failed, &expect, (int)st)) return;
  sl__session_abort_collectives(s, st, sl_status_str(st));
  pthread_mutex_lock(&s->lock);
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

static drv_tick *tick_by_actor(sl_session *s, sl_actor_id id) {
  for (int32_t i = 0; i < s->n_ticks; i++)
    if (s->ticks[i].actor == id) return &s->ticks[i];
  return NULL;
}

/* Messages the job sends to the driver's node. */
static sl_status drv_send(void *ctx, uint32_t node, const sl_msg *m,
                          const void *payload, size_t nbytes) {
  sl_session *s = ctx;
  atomic_fetch_add(&s->driver_msgs, 1);
  if (node != s->driver)
    return sl__fail(SL_ECOMM,
                    "session: a message for node %u (the embedded "
                    "session has node 0 and the driver, node %u)",
                    node, s->driver);
  switch (m->kind) {
  case SL_MSG_CMD:
    if (m->cmd == SL_CMD_ABORT) sl__session_fail(s, (sl_status)m->index);
    return SL_OK;
  case SL_MSG_RETURN: {
    drv_tick *d = tick_by_actor(s, m->dst);
    if (!d)
      return sl__fail(SL_ECOMM,
                      "driver: a return for actor 0x%llx, which "
                      "is not a tick",
                      (unsigned long long)m->dst);
    pthread_mutex_lock(&d->lock);
    if (m->index < 0 || m->index >= d->count || d->pending[m->index] <= 0) {
      pthread_mutex_unlock(&d->lock);
      return sl__fail(SL_ECOMM,
                      "driver: tick register %d returned while "
                      "not held",
                      (int)m->index);
    }
    if (--d->pending[m->index] == 0) {
      d->free_q[d->n_free++] = m->index;
      pump_one(s, d);
    }
    pthread_mutex_unlock(&d->lock);
    return SL_OK;
  }
  case SL_MSG_EOD: return SL_OK;
  default:
    return sl__fail(SL_ECOMM, "driver: unexpected message kind %u", m->kind);
  }
}

static bool drv_quiescent(void *ctx, uint32_t self_node, uint64_t *progress) {
  sl_session *s = ctx;
  *progress = atomic_load(&s->driver_msgs);
  return atomic_load(&s->waiting);
}

const sl_transport_vtable sl__driver_transport = {drv_send, drv_quiescent};
