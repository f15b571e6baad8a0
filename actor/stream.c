/* Stream threads: each owns the actors of one (device, stream), drains its
 * queues and dispatches messages to them; and the routing of messages to
 * the same thread, another thread of the job, or another node. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "actor_int.h"

#define BATCH 64

bool sl__lq_grow(stream *s) {
  uint32_t cap = s->lmask + 1;
  sl_msg *q = sl__reallocarray(NULL, (size_t)cap * 2, sizeof *q);
  if (!q) {
    sl__job_abort(s->job, SL_ENOMEM, 0, false, sl_last_error(), true);
    return false;
  }
  for (uint32_t i = 0; i < s->llen; i++)
    q[i] = s->lq[(s->lhead + i) & s->lmask];
  sl__free(s->lq);
  s->lq = q;
  s->lhead = 0;
  s->lmask = cap * 2 - 1;
  return true;
}

void sl__route(sl_job *job, stream *from, const sl_msg *m,
               const rt_regst *payload) {
  uint32_t node = sl_actor_id_node(m->dst);
  if (node != job->node) {
    sl_msg w = *m;
    w.origin_node = (uint16_t)job->node;
    const void *data = NULL;
    size_t n = 0;
    if (m->kind == SL_MSG_READY && payload) {
      data = payload->pub.data;
      n = payload->pub.bytes;
    }
    if (from) from->msgs_remote++;
    sl_status st = sl__transport_send(job, node, &w, data, n);
    if (st != SL_OK) {
      char detail[1100];
      snprintf(detail, sizeof detail, "sending to node %u: %s", node,
               sl_last_error());
      sl__job_abort(job, st, m->src, true, detail, true);
    }
    return;
  }
  stream *t = job->by_slot[sl_actor_id_device(m->dst) * job->S +
                           sl_actor_id_stream(m->dst)];
  if (t == from) {
    if (from->llen == from->lmask + 1 && !sl__lq_grow(from)) return;
    from->lq[(from->lhead + from->llen) & from->lmask] = *m;
    from->llen++;
    from->msgs_local++;
    return;
  }
  if (!sl__mpsc_push(t->q, m)) {
    char detail[128];
    snprintf(detail, sizeof detail, "the queue of stream %s is full (a bug)",
             t->name);
    sl__job_abort(job, SL_EINTERNAL, m->src, true, detail, true);
    return;
  }
  if (from) from->msgs_cross++;
}

static void handle(stream *s, const sl_msg *m) {
  s->handled++;
  if (m->kind == SL_MSG_CMD) {
    if (m->cmd == SL_CMD_START && !s->started) {
      s->started = true;
      for (int32_t i = 0; i < s->n_actors; i++)
        if (s->actors[i].pa) sl__actor_start(s, &s->actors[i]);
    } else if (m->cmd == SL_CMD_STOP) {
      for (int32_t i = 0; i < s->n_actors; i++)
        if (s->actors[i].kind == SL_ACTOR_SOURCE && s->actors[i].pa)
          sl__actor_request_stop(s, &s->actors[i]);
    }
    return;
  }
  rt_actor *a = &s->actors[sl_actor_id_index(m->dst)];
  switch (m->kind) {
  case SL_MSG_READY: sl__actor_on_ready(s, a, m); break;
  case SL_MSG_RETURN: sl__actor_on_return(s, a, m); break;
  case SL_MSG_EOD: sl__actor_on_eod(s, a, m); break;
  case SL__MSG_COMPLETE: sl__actor_on_complete(s, a); break;
  default: SL_ASSERT(!"unknown message kind");
  }
}

static void thread_exit(stream *s) {
  sl_job *job = s->job;
  atomic_store(&s->handled_pub, s->handled);
  atomic_store(&s->exited, 1);
  pthread_mutex_lock(&job->lock);
  if (--job->threads_live == 0) {
    job->t_end = sl__now_ns();
    atomic_store(&job->done, 1);
    pthread_cond_broadcast(&job->cond);
  }
  pthread_mutex_unlock(&job->lock);
}

/* Spinning on an empty queue saves a wake-up (microseconds) when the next
 * message comes soon, and burns a CPU that another thread may need when it
 * does not: on a machine with more busy threads than cores, a stream that
 * spins through every wait (its producer waiting for a collective, say)
 * slows the whole job. So a stream spins only while at least half of its
 * recent waits were short, and never longer than s->spin_ns (20 us unless
 * the job says otherwise). A wait the spin catches is short without
 * reading the clock (a read costs half a message between threads); one
 * the spin missed is long: spinning through it was wasted (a copy stream
 * whose fetch comes once a step would otherwise spin most of every step
 * for the cores the compute threads need). One slept through without a
 * spin is timed from its start, long only past twice the window: the
 * time includes the wake-up. */
#define WAITS_ALL 1024 /* long_waits is a fraction of this */

/* The share of long waits moves 1/8 of the way towards this wait's. */
static void wait_ended(stream *s, bool is_long) {
  int32_t now = is_long ? WAITS_ALL : 0, old = (int32_t)s->long_waits;
  s->long_waits = (uint32_t)(old + (now - old) / 8);
}

/* Polls the empty queue up to s->spin times, yielding the CPU every 64
 * polls in case the producer shares it; 0 when nothing came. Also after a
 * wake-up: a push may be announced before it can be popped. */
static size_t spin_poll(stream *s, sl_msg *batch) {
  if (s->spin <= 0 || s->long_waits > WAITS_ALL / 2) return 0;
  uint64_t t0 = 0;
  for (int32_t i = 1; i <= s->spin; i++) {
    if (i % 64 == 0) {
      uint64_t t = sl__now_ns();
      if (!t0) t0 = t;
      if (t - t0 > (uint64_t)s->spin_ns) break;
      sched_yield();
    } else {
      sl__cpu_relax();
    }
    size_t n = sl__mpsc_pop(s->q, batch, BATCH);
    if (n) {
      s->spins_caught++;
      return n;
    }
  }
  s->spins_missed++;
  s->spin_missed = true;
  /* The wait began before the spin; under load the spin's yields can take
   * up most of it, so timing from the sleep would call a long wait short. */
  if (!s->waiting_since) s->waiting_since = t0;
  return 0;
}

void *sl__stream_main(void *arg) {
  stream *s = arg;
  sl_job *job = s->job;
  sl_msg batch[BATCH];
  sl_clear_error();
  for (;;) {
    if (atomic_load_explicit(&job->stop, memory_order_relaxed)) break;
    if (s->llen) {
      sl_msg m = s->lq[s->lhead];
      s->lhead = (s->lhead + 1) & s->lmask;
      s->llen--;
      handle(s, &m);
      continue;
    }
    if (s->started && s->live == 0) break;
    size_t n = sl__mpsc_pop(s->q, batch, BATCH);
    bool waited = n == 0;
    if (waited) n = spin_poll(s, batch);
    if (n) {
      if (s->waiting_since) {
        wait_ended(s, s->spin_missed || sl__now_ns() - s->waiting_since >
                                            2 * (uint64_t)s->spin_ns);
        s->waiting_since = 0;
        s->spin_missed = false;
      } else if (waited) {
        wait_ended(s, false);
      }
      size_t i = 0;
      for (; i < n; i++) {
        if (atomic_load_explicit(&job->stop, memory_order_relaxed)) break;
        handle(s, &batch[i]);
      }
      s->dropped += n - i;
      continue;
    }
    /* Published before the consumer announces it sleeps, so the watchdog,
     * which reads "sleeping" first, sees this count or a later one. */
    atomic_store_explicit(&s->handled_pub, s->handled, memory_order_relaxed);
    if (!s->waiting_since) s->waiting_since = sl__now_ns();
    s->sleeps++;
    sl__mpsc_wait(s->q, 0);
  }
  thread_exit(s);
  return NULL;
}
