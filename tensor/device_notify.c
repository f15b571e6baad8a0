/* Stream-completion notification (device_notify.h has the contract).
 *
 * Poll mode: watchers append {event, stream, callback} to an incoming list
 * under the mutex; the poller moves them into one FIFO per stream, which
 * only it touches, and each pass queries the head of every FIFO. Events of
 * one stream complete in the order they were recorded, so a head that is
 * not done means nothing behind it is: a pass costs one query per busy
 * stream, not one per watch. Callbacks run outside the mutex. Events are
 * pooled (creating a CUDA event costs microseconds; a training step makes
 * one watch per kernel actor). */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"
#include "core_thread.h"
#include "device_notify.h"

typedef struct item item;
struct item {
  sl__event *ev; /* poll mode */
  sl__stream *s;
  sl__stream_fn fn;
  void *arg;
  sl__notifier *n; /* callback mode: the trampoline's way back */
  item *next;
};

typedef struct stream_fifo {
  sl__stream *s;
  item *head, *tail;
} stream_fifo;

struct sl__notifier {
  sl__device *dev;
  sl__notify_mode mode;
  uint64_t spin_ns, min_sleep_ns, max_sleep_ns;

  pthread_mutex_t mu;
  pthread_cond_t cv; /* poller: new watch or stop; destroy: outstanding 0 */
  item *in_head, *in_tail;
  atomic_size_t n_in; /* lets the spinning poller skip the mutex */
  bool stop;
  item *spare;
  sl__event **events; /* the pool */
  size_t n_events, cap_events;
  uint64_t outstanding; /* callback mode: watches not yet called back */
  sl__thread thread;

  /* The poller's own: FIFOs per stream. */
  stream_fifo *fifos;
  size_t n_fifos, cap_fifos;

  atomic_uint_fast64_t watches, completions, failures, queries, sleeps,
      idle_waits, events_made;
};

const char *sl__notify_mode_name(sl__notify_mode m) {
  switch (m) {
  case SL__NOTIFY_POLL: return "poll";
  case SL__NOTIFY_CALLBACK: return "callback";
  }
  return "?";
}

sl__notify_mode sl__notifier_mode(const sl__notifier *n) { return n->mode; }

static void bump(atomic_uint_fast64_t *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Lock held. */
static item *item_get(sl__notifier *n) {
  item *it = n->spare;
  if (it)
    n->spare = it->next;
  else if (!(it = sl__malloc(sizeof *it)))
    return NULL;
  memset(it, 0, sizeof *it);
  return it;
}

/* Lock held. */
static void item_put(sl__notifier *n, item *it) {
  it->next = n->spare;
  n->spare = it;
}

/* Lock held. An event that does not fit back in the pool is destroyed. */
static void event_put(sl__notifier *n, sl__event *ev) {
  if (n->n_events == n->cap_events) {
    size_t cap = n->cap_events ? n->cap_events * 2 : 16;
    sl__event **grown = sl__reallocarray(n->events, cap, sizeof *grown);
    if (!grown) {
      (void)sl__device_event_destroy(n->dev, ev);
      return;
    }
    n->events = grown;
    n->cap_events = cap;
  }
  n->events[n->n_events++] = ev;
}

/* ---- the poller ------------------------------------------------------------
 */

static sl_status fifo_push(sl__notifier *n, item *it) {
  stream_fifo *f = NULL, *idle = NULL;
  for (size_t i = 0; i < n->n_fifos && !f; i++) {
    if (n->fifos[i].s == it->s) f = &n->fifos[i];
    if (!idle && !n->fifos[i].head) idle = &n->fifos[i];
  }
  /* A stream that was destroyed leaves an empty FIFO behind; reusing empty
   * ones keeps the array as small as the number of busy streams. */
  if (!f && idle) {
    f = idle;
    f->s = it->s;
  }
  if (!f) {
    if (n->n_fifos == n->cap_fifos) {
      size_t cap = n->cap_fifos ? n->cap_fifos * 2 : 8;
      stream_fifo *grown = sl__reallocarray(n->fifos, cap, sizeof *grown);
      if (!grown) return SL_ENOMEM;
      n->fifos = grown;
      n->cap_fifos = cap;
    }
    f = &n->fifos[n->n_fifos++];
    *f = (stream_fifo){.s = it->s};
  }
  it->next = NULL;
  if (f->tail)
    f->tail->next = it;
  else
    f->head = it;
  f->tail = it;
  return SL_OK;
}

/* Queries the head of every FIFO and calls back what has completed.
 * Completed items go onto *done for recycling under the mutex. Returns the
 * number of callbacks made. */
static size_t poll_pass(sl__notifier *n, item **done) {
  size_t made = 0;
  for (size_t i = 0; i < n->n_fifos; i++) {
    stream_fifo *f = &n->fifos[i];
    while (f->head) {
      item *it = f->head;
      bool ok = false;
      sl_status st = sl__device_event_query(n->dev, it->ev, &ok);
      bump(&n->queries);
      if (st == SL_OK && !ok) break;
      f->head = it->next;
      if (!f->head) f->tail = NULL;
      if (st != SL_OK) bump(&n->failures);
      /* Right after the query, so the callback sees the query's message as
       * this thread's last error. */
      it->fn(it->arg, st);
      bump(&n->completions);
      it->next = *done;
      *done = it;
      made++;
    }
  }
  return made;
}

static void *poller_main(void *arg) {
  sl__notifier *n = arg;
  /* Linux lets a timed sleep overrun by the thread's timer slack, 50 us by
   * default: every back-off sleep would last at least that long, and it is
   * added to the notification latency. 1 us keeps the sleeps as asked. */
  (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  size_t pending = 0;
  uint64_t sleep_ns = n->min_sleep_ns;
  uint64_t active_at = sl__now_ns();
  for (;;) {
    if (pending == 0 ||
        atomic_load_explicit(&n->n_in, memory_order_acquire) > 0) {
      pthread_mutex_lock(&n->mu);
      while (!n->in_head && pending == 0 && !n->stop) {
        bump(&n->idle_waits);
        pthread_cond_wait(&n->cv, &n->mu);
      }
      if (!n->in_head && pending == 0) { /* stop, and nothing left */
        pthread_mutex_unlock(&n->mu);
        break;
      }
      item *in = n->in_head;
      n->in_head = n->in_tail = NULL;
      atomic_store_explicit(&n->n_in, 0, memory_order_relaxed);
      pthread_mutex_unlock(&n->mu);
      while (in) {
        item *next = in->next;
        if (fifo_push(n, in) != SL_OK) {
          /* Out of memory for the FIFO array: wait for this event here
           * rather than lose the watch. */
          sl_status st = sl__device_event_synchronize(n->dev, in->ev);
          if (st != SL_OK) bump(&n->failures);
          in->fn(in->arg, st);
          bump(&n->completions);
          pthread_mutex_lock(&n->mu);
          event_put(n, in->ev);
          item_put(n, in);
          pthread_mutex_unlock(&n->mu);
        } else {
          pending++;
        }
        in = next;
      }
      active_at = sl__now_ns();
      sleep_ns = n->min_sleep_ns;
    }
    item *done = NULL;
    size_t made = poll_pass(n, &done);
    if (made > 0) {
      pending -= made;
      pthread_mutex_lock(&n->mu);
      while (done) {
        item *next = done->next;
        event_put(n, done->ev);
        item_put(n, done);
        done = next;
      }
      pthread_mutex_unlock(&n->mu);
      active_at = sl__now_ns();
      sleep_ns = n->min_sleep_ns;
      continue;
    }
    if (pending == 0) continue;
    /* Work that just started often ends within microseconds (small
     * kernels, copies): spin on it first, then back off so a long kernel
     * costs a few thousand queries a second, not millions. */
    if (sl__now_ns() - active_at < n->spin_ns) {
      sl__cpu_relax();
      continue;
    }
    pthread_mutex_lock(&n->mu);
    if (!n->in_head) {
      bump(&n->sleeps);
      (void)sl__cond_wait_ns(&n->cv, &n->mu, sleep_ns);
    }
    pthread_mutex_unlock(&n->mu);
    sleep_ns = SL_MIN(sleep_ns * 2, n->max_sleep_ns);
  }
  return NULL;
}

/* ---- creation and destruction -----------------------------------------------
 */

sl_status sl__notifier_create(sl__device *dev, const sl__notifier_config *cfg,
                              sl__notifier **out) {
  if (out) *out = NULL;
  if (!dev || !out) return sl__fail(SL_EINVAL, "notifier: NULL argument");
  sl__notifier_config c = cfg ? *cfg : (sl__notifier_config){0};
  if (c.mode != SL__NOTIFY_POLL && c.mode != SL__NOTIFY_CALLBACK)
    return sl__fail(SL_EINVAL, "notifier on %s: unknown mode %d", dev->name,
                    (int)c.mode);
  if (!c.spin_ns) c.spin_ns = 20000;
  if (!c.min_sleep_ns) c.min_sleep_ns = 2000;
  if (!c.max_sleep_ns) c.max_sleep_ns = 100000;
  if (c.min_sleep_ns > c.max_sleep_ns)
    return sl__fail(SL_EINVAL,
                    "notifier on %s: min sleep %llu ns above max %llu",
                    dev->name, (unsigned long long)c.min_sleep_ns,
                    (unsigned long long)c.max_sleep_ns);
  if (c.mode == SL__NOTIFY_POLL &&
      (!dev->vt->event_query || !dev->vt->event_record ||
       !dev->vt->event_create || !dev->vt->event_destroy))
    return sl__fail(SL_EUNSUPPORTED, "notifier on %s: the device has no events",
                    dev->name);
  if (c.mode == SL__NOTIFY_CALLBACK && !dev->vt->stream_add_callback)
    return sl__fail(SL_EUNSUPPORTED,
                    "notifier on %s: the device has no stream callbacks",
                    dev->name);
  sl__notifier *n;
  if (SL_NEW(n) != SL_OK) return SL_ENOMEM;
  n->dev = dev;
  n->mode = c.mode;
  n->spin_ns = c.spin_ns;
  n->min_sleep_ns = c.min_sleep_ns;
  n->max_sleep_ns = c.max_sleep_ns;
  if (pthread_mutex_init(&n->mu, NULL) != 0) {
    sl__free(n);
    return sl__fail(SL_EINTERNAL, "notifier: pthread_mutex_init failed");
  }
  sl_status st = sl__cond_init(&n->cv);
  if (st != SL_OK) {
    pthread_mutex_destroy(&n->mu);
    sl__free(n);
    return st;
  }
  if (c.mode == SL__NOTIFY_POLL) {
    char name[40]; /* sl__thread_start keeps the first 15 characters */
    snprintf(name, sizeof name, "sl-ntfy-%s", dev->name);
    st = sl__thread_start(&n->thread, poller_main, n, name);
    if (st != SL_OK) {
      pthread_cond_destroy(&n->cv);
      pthread_mutex_destroy(&n->mu);
      sl__free(n);
      return st;
    }
  }
  *out = n;
  return SL_OK;
}

void sl__notifier_destroy(sl__notifier *n) {
  if (!n) return;
  pthread_mutex_lock(&n->mu);
  n->stop = true;
  pthread_cond_broadcast(&n->cv);
  while (n->mode == SL__NOTIFY_CALLBACK && n->outstanding > 0)
    pthread_cond_wait(&n->cv, &n->mu);
  pthread_mutex_unlock(&n->mu);
  sl__thread_join(&n->thread); /* the poller leaves once nothing is pending */
  for (size_t i = 0; i < n->n_events; i++)
    if (sl__device_event_destroy(n->dev, n->events[i]) != SL_OK)
      SL_WARN("notifier on %s: %s", n->dev->name, sl_last_error());
  sl__free(n->events);
  while (n->spare) {
    item *it = n->spare;
    n->spare = it->next;
    sl__free(it);
  }
  sl__free(n->fifos);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  sl__free(n);
}

/* ---- watching
 * ---------------------------------------------------------------- */

static void callback_trampoline(void *arg, sl_status st) {
  item *it = arg;
  sl__notifier *n = it->n;
  if (st != SL_OK) bump(&n->failures);
  it->fn(it->arg, st);
  bump(&n->completions);
  pthread_mutex_lock(&n->mu);
  item_put(n, it);
  if (--n->outstanding == 0) pthread_cond_broadcast(&n->cv);
  pthread_mutex_unlock(&n->mu);
}

static sl_status watch_callback(sl__notifier *n, sl__stream *s,
                                sl__stream_fn fn, void *arg) {
  pthread_mutex_lock(&n->mu);
  item *it = item_get(n);
  if (it) {
    *it = (item){.s = s, .fn = fn, .arg = arg, .n = n};
    n->outstanding++;
  }
  pthread_mutex_unlock(&n->mu);
  if (!it) return SL_ENOMEM;
  /* Counted first: the CPU device calls back before add_callback returns,
   * and completions must never exceed watches. */
  bump(&n->watches);
  sl_status st =
      sl__device_stream_add_callback(n->dev, s, callback_trampoline, it);
  if (st != SL_OK) {
    atomic_fetch_sub_explicit(&n->watches, 1, memory_order_relaxed);
    pthread_mutex_lock(&n->mu);
    item_put(n, it);
    if (--n->outstanding == 0) pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
  }
  return st;
}

static sl_status watch_poll(sl__notifier *n, sl__stream *s, sl__stream_fn fn,
                            void *arg) {
  sl__event *ev = NULL;
  pthread_mutex_lock(&n->mu);
  item *it = item_get(n);
  if (n->n_events) ev = n->events[--n->n_events];
  pthread_mutex_unlock(&n->mu);
  sl_status st = it ? SL_OK : SL_ENOMEM;
  if (st == SL_OK && !ev) {
    st = sl__device_event_create(n->dev, &ev);
    if (st == SL_OK) bump(&n->events_made);
  }
  /* Recorded on the caller's thread, right after the work it follows:
   * the event marks exactly the work queued so far. */
  if (st == SL_OK) st = sl__device_event_record(n->dev, ev, s);
  if (st == SL_OK) bump(&n->watches); /* before the poller can complete it */
  pthread_mutex_lock(&n->mu);
  if (st == SL_OK) {
    *it = (item){.ev = ev, .s = s, .fn = fn, .arg = arg};
    if (n->in_tail)
      n->in_tail->next = it;
    else
      n->in_head = it;
    n->in_tail = it;
    atomic_fetch_add_explicit(&n->n_in, 1, memory_order_release);
    pthread_cond_signal(&n->cv);
  } else {
    if (ev) event_put(n, ev);
    if (it) item_put(n, it);
  }
  pthread_mutex_unlock(&n->mu);
  return st;
}

sl_status sl__notifier_watch(sl__notifier *n, sl__stream *s, sl__stream_fn fn,
                             void *arg) {
  if (!n || !s || !fn)
    return sl__fail(SL_EINVAL, "notifier watch: NULL argument");
  return n->mode == SL__NOTIFY_POLL ? watch_poll(n, s, fn, arg)
                                    : watch_callback(n, s, fn, arg);
}

static void complete_fn(void *arg, sl_status st) {
  sl_completion_done(arg, st);
}

sl_status sl__notifier_watch_completion(sl__notifier *n, sl__stream *s,
                                        sl_completion *c) {
  if (!c) return sl__fail(SL_EINVAL, "notifier watch: NULL completion");
  return sl__notifier_watch(n, s, complete_fn, c);
}

void sl__notifier_get_stats(sl__notifier *n, sl__notifier_stats *out) {
  *out = (sl__notifier_stats){
      .watches = atomic_load(&n->watches),
      .completions = atomic_load(&n->completions),
      .failures = atomic_load(&n->failures),
      .queries = atomic_load(&n->queries),
      .sleeps = atomic_load(&n->sleeps),
      .idle_waits = atomic_load(&n->idle_waits),
      .events = atomic_load(&n->events_made),
  };
}
