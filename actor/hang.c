/* Hang diagnosis: a watchdog that declares a hang only when, for the whole
 * timeout, no stream thread was awake, no deferred firing was executing
 * (one waiting for other firings, sl_completion_waiting, is not), no
 * message was queued (or, across nodes, in transit) and no message was
 * handled; and the report of who waits on what, built once the threads are
 * joined and the state is frozen. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "actor_int.h"

bool sl__job_local_quiescent(const sl_job *job, uint64_t *progress) {
  if (progress) *progress = 0;
  if (!atomic_load(&job->started)) return false;
  bool done = atomic_load(&job->done);
  /* A deferred firing counts as activity unless it waits for others. */
  if (!done &&
      atomic_load(&job->async_pending) > atomic_load(&job->async_waiting))
    return false;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < job->n_streams; i++) {
    const stream *s = &job->streams[i];
    /* "sleeping" first: the thread publishes its count before it sleeps. */
    if (!done && !atomic_load(&s->exited) && !sl__mpsc_sleeping(s->q))
      return false;
    sum += atomic_load_explicit(&s->handled_pub, memory_order_relaxed);
  }
  if (progress) *progress = sum;
  return true;
}

static bool quiescent(sl_job *job, uint64_t *local, uint64_t *peers) {
  *peers = 0;
  if (!sl__job_local_quiescent(job, local)) return false;
  /* Other nodes matter when registers cross to them, and, in a job with a
   * transport, when a deferred firing waits: a collective member may wait
   * for members on other nodes while no edge crosses. */
  bool others = job->has_remote ||
                (job->cfg.transport.vt && atomic_load(&job->async_waiting) > 0);
  if (!others) return true;
  /* Without the transport's view it cannot tell a hang from a slow peer. */
  return sl__transport_quiescent(job, peers);
}

static void *watchdog_main(void *arg) {
  sl_job *job = arg;
  uint64_t timeout_ns = (uint64_t)job->hang_timeout_ms * 1000000ull;
  uint64_t interval = SL_MAX(timeout_ns / 10, 1000000ull);
  interval = SL_MIN(interval, 100000000ull);
  uint64_t quiet_since = 0, last_local = 0, last_peers = 0;
  pthread_mutex_lock(&job->lock);
  while (!job->watchdog_exit) {
    sl__cond_wait_ns(&job->watchdog_cond, &job->lock, interval);
    if (job->watchdog_exit) break;
    if (atomic_load(&job->done) || atomic_load(&job->stop)) continue;
    pthread_mutex_unlock(&job->lock);
    uint64_t local, peers;
    bool q = quiescent(job, &local, &peers);
    uint64_t now = sl__now_ns();
    bool hang = false;
    if (!q) {
      quiet_since = 0;
    } else if (quiet_since == 0 || local != last_local || peers != last_peers) {
      quiet_since = now;
      last_local = local;
      last_peers = peers;
    } else if (now - quiet_since >= timeout_ns) {
      hang = true;
    }
    if (hang) {
      job->hang_here = true;
      sl__job_abort(job, SL_EHANG, 0, false, "hang", true);
    }
    pthread_mutex_lock(&job->lock);
  }
  pthread_mutex_unlock(&job->lock);
  return NULL;
}

sl_status sl__watchdog_start(sl_job *job) {
  job->watchdog_exit = false;
  return sl__thread_start(&job->watchdog, watchdog_main, job, "sl-watchdog");
}

void sl__watchdog_stop(sl_job *job) {
  pthread_mutex_lock(&job->lock);
  job->watchdog_exit = true;
  pthread_cond_broadcast(&job->watchdog_cond);
  pthread_mutex_unlock(&job->lock);
  sl__thread_join(&job->watchdog);
}

/* ---- the report
 * --------------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) SL__PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k =
        vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = SL_MAX(b->cap * 2, b->n + (size_t)k + 256);
    char *q = sl__realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

static const char *actor_name(const sl_job *job, sl_actor_id id) {
  const char *n = sl_actor_graph_actor_name(job->plan, id);
  return n ? n : "?";
}

static const char *regst_name(const sl_job *job, int32_t desc) {
  return job->plan->regsts[desc].d.name;
}

static const char *kind_str(sl_actor_kind k) {
  static const char *names[] = {"kernel",     "source", "sink",  "repeat",
                                "accumulate", "pack",   "unpack"};
  return (unsigned)k < SL_ARRAY_LEN(names) ? names[k] : "?";
}

/* Who holds the registers of output o that are not free. */
static void describe_holders(sbuf *b, const sl_job *job, const rt_actor *a,
                             const out_slot *o) {
  const char *sep = "";
  for (int32_t r = 0; r < o->count; r++) {
    const rt_regst *g = &o->regs[r];
    if (g->pending > 0) {
      sb_printf(b, "%s#%d (piece %lld) held by", sep, (int)r,
                (long long)g->pub.piece);
      const char *s2 = " ";
      for (int32_t c = 0; c < o->n_cons; c++)
        if (g->held[c]) {
          sb_printf(b, "%s'%s'", s2, actor_name(job, o->cons_id[c]));
          s2 = ", ";
        }
      sep = "; ";
    } else if (r == o->cur) {
      sb_printf(b, "%s#%d held by '%s' itself (being written)", sep, (int)r,
                a->pa->d.name);
      sep = "; ";
    }
  }
}

static void describe_actor(sbuf *b, const sl_job *job, const rt_actor *a) {
  char dev[40];
  sl__job_device_name(job, a->st->device, dev, sizeof dev);
  sb_printf(b, "  '%s' (%s, node %u, %s, stream %u): ", a->pa->d.name,
            kind_str(a->kind), job->node, dev, a->st->stream);
  const char *sep = "";
  if (a->busy) {
    sb_printf(b, atomic_load(&a->completion.said_waiting)
                     ? "deferred, waiting for other firings\n"
                     : "executing a deferred firing\n");
    return;
  }
  if (a->stopped) {
    sb_printf(b, "stopped after %lld pieces; ", (long long)a->pieces);
    for (int32_t i = 0; i < a->n_in; i++)
      if (!a->in[i].eod) {
        sb_printf(b, "%swaits for end-of-data on input %d '%s' from '%s'", sep,
                  (int)i, regst_name(job, a->in[i].desc),
                  actor_name(job, a->in[i].producer));
        sep = "; ";
      }
    for (int32_t i = 0; i < a->n_out; i++)
      if (a->out[i].in_flight > 0) {
        sb_printf(b, "%swaits for output %d '%s' to come back: ", sep, (int)i,
                  regst_name(job, a->out[i].desc));
        describe_holders(b, job, a, &a->out[i]);
        sep = "; ";
      }
    sb_printf(b, "\n");
    return;
  }
  if (a->kind == SL_ACTOR_SOURCE) {
    sb_printf(b, "produced %lld of %lld pieces; ", (long long)a->fired,
              (long long)a->limit);
  } else {
    for (int32_t i = 0; i < a->n_in; i++) {
      const in_slot *sl = &a->in[i];
      if (sl->len > 0) continue;
      sb_printf(b, "%swaits for input %d '%s' from '%s' (none ready%s)", sep,
                (int)i, regst_name(job, sl->desc),
                actor_name(job, sl->producer), sl->eod ? ", and it ended" : "");
      sep = "; ";
    }
  }
  if (!(a->mode == MODE_FAN_IN && a->step > 0))
    for (int32_t i = 0; i < a->n_out; i++) {
      const out_slot *o = &a->out[i];
      if (o->flen > 0) continue;
      sb_printf(b,
                "%swaits for a free register of output %d '%s' (%d of %d "
                "in flight: ",
                sep, (int)i, regst_name(job, o->desc), (int)o->in_flight,
                (int)o->count);
      describe_holders(b, job, a, o);
      sb_printf(b, ")");
      sep = "; ";
    }
  if (a->mode != MODE_ONE)
    sb_printf(b, "%sat step %d of %d", sep, (int)a->step, (int)a->k);
  if (a->n_in > 0) {
    const char *s2 = "; has";
    for (int32_t i = 0; i < a->n_in; i++)
      if (a->in[i].len > 0) {
        sb_printf(b, "%s %u ready on input %d", s2, a->in[i].len, (int)i);
        s2 = ",";
      }
  }
  sb_printf(b, "\n");
}

void sl__hang_report_build(sl_job *job) {
  sbuf b = {0};
  int32_t unfinished = 0, total = 0;
  for (uint32_t i = 0; i < job->n_streams; i++)
    for (int32_t k = 0; k < job->streams[i].n_actors; k++) {
      const rt_actor *a = &job->streams[i].actors[k];
      if (!a->pa) continue;
      total++;
      if (!a->finished) unfinished++;
    }
  if (job->hang_here)
    sb_printf(&b,
              "hang on node %u: for %lld ms no actor could fire, none was "
              "executing and no message was in flight; %d of %d actors are "
              "blocked:\n",
              job->node, (long long)job->hang_timeout_ms, (int)unfinished,
              (int)total);
  else
    sb_printf(&b,
              "hang detected by another node; on node %u, %d of %d actors "
              "are blocked:\n",
              job->node, (int)unfinished, (int)total);
  for (uint32_t i = 0; i < job->n_streams; i++)
    for (int32_t k = 0; k < job->streams[i].n_actors; k++) {
      const rt_actor *a = &job->streams[i].actors[k];
      if (a->pa && !a->finished) describe_actor(&b, job, a);
    }
  /* errmsg is read under the lock by senders that find the job ended. */
  pthread_mutex_lock(&job->lock);
  if (b.oom || !b.p) {
    sl__free(b.p);
    snprintf(job->errmsg, sizeof job->errmsg,
             "hang on node %u (no memory for the report)", job->node);
    pthread_mutex_unlock(&job->lock);
    return;
  }
  sl__free(job->hang_report);
  job->hang_report = b.p;
  snprintf(job->errmsg, sizeof job->errmsg, "%s", b.p);
  pthread_mutex_unlock(&job->lock);
  SL_ERROR("%s", b.p);
}
