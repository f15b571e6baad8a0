/* The stream-completion notifier, in both modes, over a fake device whose
 * streams "run" work for a given time: an event recorded on a stream
 * completes when the work queued before it would have ended, and stream
 * callbacks fire then from a timer thread (as CUDA's callback thread
 * would). So no GPU is needed to check that every watch calls back exactly
 * once, never early, in stream order, with device errors passed on; that
 * the poller backs off during long work and sleeps when idle; that destroy
 * waits for pending watches; that watches from many threads are safe (run
 * under TSan); and that an actor whose firing is completed through the
 * notifier sends its output only after its device work ended. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/actor.h>

#include "core_int.h"
#include "core_thread.h"
#include "device_notify.h"

/* ---- the fake device --------------------------------------------------------
 */

typedef struct fake_stream {
  uint64_t busy_until; /* when the work queued so far ends */
  bool broken;         /* work queued from now on faults */
} fake_stream;

typedef struct fake_event {
  uint64_t done_at;
  bool fail;
} fake_event;

typedef struct timer {
  uint64_t when, seq;
  sl__stream_fn fn;
  void *arg;
  bool fail;
} timer;

typedef struct fake_dev {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint_fast64_t queries;
  atomic_int live_events;
  bool fail_record, fail_callback;
  timer *timers;
  size_t n_timers, cap_timers;
  uint64_t seq;
  bool stop;
  sl__thread th;
} fake_dev;

static uint64_t fake_enqueue(fake_dev *f, fake_stream *s, uint64_t ns) {
  pthread_mutex_lock(&f->mu);
  uint64_t now = sl__now_ns();
  s->busy_until = SL_MAX(now, s->busy_until) + ns;
  uint64_t end = s->busy_until;
  pthread_mutex_unlock(&f->mu);
  return end;
}

static void fake_break(fake_dev *f, fake_stream *s, bool broken) {
  pthread_mutex_lock(&f->mu);
  s->broken = broken;
  pthread_mutex_unlock(&f->mu);
}

static sl_status f_event_create(void *ctx, sl__event **out) {
  fake_dev *f = ctx;
  fake_event *e = calloc(1, sizeof *e);
  if (!e) return SL_ENOMEM;
  atomic_fetch_add(&f->live_events, 1);
  *out = (sl__event *)e;
  return SL_OK;
}

static sl_status f_event_destroy(void *ctx, sl__event *e) {
  fake_dev *f = ctx;
  atomic_fetch_sub(&f->live_events, 1);
  free(e);
  return SL_OK;
}

static sl_status f_event_record(void *ctx, sl__event *ev, sl__stream *st) {
  fake_dev *f = ctx;
  fake_event *e = (fake_event *)ev;
  fake_stream *s = (fake_stream *)st;
  if (f->fail_record) return sl__fail(SL_ECUDA, "fake: record refused");
  pthread_mutex_lock(&f->mu);
  e->done_at = s->busy_until;
  e->fail = s->broken;
  pthread_mutex_unlock(&f->mu);
  return SL_OK;
}

static sl_status f_event_query(void *ctx, sl__event *ev, bool *done) {
  fake_dev *f = ctx;
  fake_event *e = (fake_event *)ev;
  atomic_fetch_add_explicit(&f->queries, 1, memory_order_relaxed);
  pthread_mutex_lock(&f->mu);
  *done = sl__now_ns() >= e->done_at;
  bool fail = e->fail;
  pthread_mutex_unlock(&f->mu);
  if (*done && fail) {
    *done = false;
    return sl__fail(SL_ECUDA, "fake device fault (event)");
  }
  return SL_OK;
}

static sl_status f_event_synchronize(void *ctx, sl__event *ev) {
  fake_dev *f = ctx;
  fake_event *e = (fake_event *)ev;
  pthread_mutex_lock(&f->mu);
  uint64_t at = e->done_at;
  bool fail = e->fail;
  pthread_mutex_unlock(&f->mu);
  uint64_t now = sl__now_ns();
  if (now < at) sl__sleep_ns(at - now);
  return fail ? sl__fail(SL_ECUDA, "fake device fault (sync)") : SL_OK;
}

static sl_status f_add_callback(void *ctx, sl__stream *st, sl__stream_fn fn,
                                void *arg) {
  fake_dev *f = ctx;
  fake_stream *s = (fake_stream *)st;
  if (f->fail_callback) return sl__fail(SL_ECUDA, "fake: callback refused");
  pthread_mutex_lock(&f->mu);
  if (f->n_timers == f->cap_timers) {
    f->cap_timers = f->cap_timers ? 2 * f->cap_timers : 64;
    f->timers = realloc(f->timers, f->cap_timers * sizeof *f->timers);
    if (!f->timers) abort();
  }
  f->timers[f->n_timers++] =
      (timer){s->busy_until, f->seq++, fn, arg, s->broken};
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
  return SL_OK;
}

/* Fires callbacks at their time, earliest first, ties in the order added
 * (so one stream's callbacks keep their order, as CUDA's do). */
static void *timer_main(void *arg) {
  fake_dev *f = arg;
  pthread_mutex_lock(&f->mu);
  for (;;) {
    if (f->n_timers == 0) {
      if (f->stop) break;
      pthread_cond_wait(&f->cv, &f->mu);
      continue;
    }
    size_t best = 0;
    for (size_t i = 1; i < f->n_timers; i++)
      if (f->timers[i].when < f->timers[best].when ||
          (f->timers[i].when == f->timers[best].when &&
           f->timers[i].seq < f->timers[best].seq))
        best = i;
    uint64_t now = sl__now_ns();
    if (f->timers[best].when > now) {
      (void)sl__cond_wait_ns(&f->cv, &f->mu, f->timers[best].when - now);
      continue;
    }
    timer t = f->timers[best];
    f->timers[best] = f->timers[--f->n_timers];
    pthread_mutex_unlock(&f->mu);
    sl_status st =
        t.fail ? sl__fail(SL_ECUDA, "fake device fault (callback)") : SL_OK;
    t.fn(t.arg, st);
    pthread_mutex_lock(&f->mu);
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static const sl__device_vtable fake_vt = {
    .name = "fake",
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_query = f_event_query,
    .event_synchronize = f_event_synchronize,
    .stream_add_callback = f_add_callback,
};

typedef struct fake {
  fake_dev f;
  sl__device *dev;
} fake;

static fake *fake_new(void) {
  fake *k = calloc(1, sizeof *k);
  assert_non_null(k);
  pthread_mutex_init(&k->f.mu, NULL);
  assert_int_equal(sl__cond_init(&k->f.cv), SL_OK);
  assert_int_equal(sl__thread_start(&k->f.th, timer_main, &k->f, "fake-timer"),
                   SL_OK);
  assert_int_equal(
      sl__device_wrap(&fake_vt, &k->f, SL_DEVICE_CUDA, 0, "fake:0", &k->dev),
      SL_OK);
  return k;
}

static void fake_delete(fake *k) {
  pthread_mutex_lock(&k->f.mu);
  k->f.stop = true;
  pthread_cond_signal(&k->f.cv);
  pthread_mutex_unlock(&k->f.mu);
  sl__thread_join(&k->f.th);
  assert_int_equal(atomic_load(&k->f.live_events), 0); /* the pool was freed */
  sl__device_close(k->dev);
  free(k->f.timers);
  pthread_cond_destroy(&k->f.cv);
  pthread_mutex_destroy(&k->f.mu);
  free(k);
}

static sl__notifier *notifier(sl__device *d, sl__notify_mode mode) {
  sl__notifier_config c = {.mode = mode};
  sl__notifier *n = NULL;
  sl_status st = sl__notifier_create(d, &c, &n);
  if (st != SL_OK) fail_msg("notifier: %s", sl_last_error());
  return n;
}

/* ---- what the callbacks record
 * ------------------------------------------------ */

typedef struct rec {
  int stream, seq;
  uint64_t done_at;
  _Atomic uint64_t called_at;
  atomic_int calls;
  _Atomic sl_status st;
  char msg[160];
  atomic_int *next_seq; /* of its stream: checks the order */
  atomic_int *order_errors;
  atomic_int *total;
} rec;

static void on_done(void *arg, sl_status st) {
  rec *r = arg;
  atomic_store(&r->called_at, sl__now_ns());
  if (st != SL_OK) snprintf(r->msg, sizeof r->msg, "%s", sl_last_error());
  atomic_store(&r->st, st);
  if (r->next_seq && atomic_fetch_add(r->next_seq, 1) != r->seq)
    atomic_fetch_add(r->order_errors, 1);
  atomic_fetch_add(&r->calls, 1);
  if (r->total) atomic_fetch_add(r->total, 1);
}

static void wait_total(atomic_int *total, int want) {
  uint64_t deadline = sl__now_ns() + 20ull * 1000 * 1000 * 1000;
  while (atomic_load(total) < want && sl__now_ns() < deadline)
    sl__sleep_ns(200 * 1000);
  assert_int_equal(atomic_load(total), want);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ---- order, timing, errors --------------------------------------------------
 */

enum { NS = 8, PER = 40 };

static void run_streams(sl__notify_mode mode) {
  fake *k = fake_new();
  sl__notifier *n = notifier(k->dev, mode);
  fake_stream streams[NS] = {{0}};
  static rec R[NS][PER];
  atomic_int next[NS], order_errors = 0, total = 0;
  memset(R, 0, sizeof R);
  for (int s = 0; s < NS; s++)
    atomic_init(&next[s], 0);
  sl_rng g = {42};
  for (int j = 0; j < PER; j++)
    for (int s = 0; s < NS; s++) {
      rec *r = &R[s][j];
      r->stream = s;
      r->seq = j;
      r->next_seq = &next[s];
      r->order_errors = &order_errors;
      r->total = &total;
      /* Zero-length work too: already complete when watched. */
      r->done_at =
          fake_enqueue(&k->f, &streams[s], sl__rng_below(&g, 300) * 1000);
      assert_int_equal(
          sl__notifier_watch(n, (sl__stream *)&streams[s], on_done, r), SL_OK);
    }
  wait_total(&total, NS * PER);
  uint64_t lat[NS * PER];
  for (int s = 0; s < NS; s++)
    for (int j = 0; j < PER; j++) {
      rec *r = &R[s][j];
      assert_int_equal(atomic_load(&r->calls), 1);
      assert_int_equal(atomic_load(&r->st), SL_OK);
      uint64_t at = atomic_load(&r->called_at);
      assert_true(at >= r->done_at); /* never before the work ended */
      lat[s * PER + j] = at - r->done_at;
    }
  assert_int_equal(atomic_load(&order_errors), 0);
  qsort(lat, NS * PER, sizeof lat[0], cmp_u64);
  printf("%s: %d watches on %d streams; latency after the work ended: median "
         "%.1f us, p99 %.1f us, max %.1f us\n",
         sl__notify_mode_name(mode), NS * PER, NS, lat[NS * PER / 2] / 1e3,
         lat[NS * PER * 99 / 100] / 1e3, lat[NS * PER - 1] / 1e3);
  /* A generous bound: a notification that got lost and was found by a
   * timeout would take far longer. */
  assert_true(lat[NS * PER - 1] < 2000ull * 1000 * 1000);
  sl__notifier_stats st;
  sl__notifier_get_stats(n, &st);
  assert_int_equal(st.watches, NS * PER);
  assert_int_equal(st.completions, NS * PER);
  assert_int_equal(st.failures, 0);
  if (mode == SL__NOTIFY_POLL) {
    assert_true(st.events >= 1 && st.events <= NS * PER);
    assert_true(st.queries >= NS * PER);
    /* Sequential watches reuse the pool: no new events. */
    uint64_t events = st.events;
    for (int j = 0; j < 10; j++) {
      rec r1 = {.total = &total};
      fake_enqueue(&k->f, &streams[0], 10000);
      assert_int_equal(
          sl__notifier_watch(n, (sl__stream *)&streams[0], on_done, &r1),
          SL_OK);
      wait_total(&total, NS * PER + j + 1);
    }
    sl__notifier_get_stats(n, &st);
    assert_int_equal(st.events, events);
  } else {
    assert_int_equal(st.queries, 0);
    assert_int_equal(st.events, 0);
  }
  sl__notifier_destroy(n);
  fake_delete(k);
}

static void test_poll_order_and_timing(void **state) {
  run_streams(SL__NOTIFY_POLL);
}
static void test_callback_order_and_timing(void **state) {
  run_streams(SL__NOTIFY_CALLBACK);
}

static void run_errors(sl__notify_mode mode) {
  fake *k = fake_new();
  sl__notifier *n = notifier(k->dev, mode);
  fake_stream good = {0}, bad = {0};
  rec R[6];
  memset(R, 0, sizeof R);
  atomic_int total = 0;
  for (int i = 0; i < 6; i++) {
    R[i].total = &total;
    fake_stream *s = i % 2 ? &bad : &good;
    if (i == 1) fake_break(&k->f, &bad, true); /* faults from here on */
    R[i].done_at = fake_enqueue(&k->f, s, 2000);
    assert_int_equal(sl__notifier_watch(n, (sl__stream *)s, on_done, &R[i]),
                     SL_OK);
  }
  wait_total(&total, 6);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(atomic_load(&R[i].calls), 1);
    if (i % 2) {
      assert_int_equal(atomic_load(&R[i].st), SL_ECUDA);
      /* The device's message reached the callback's thread. */
      assert_non_null(strstr(R[i].msg, "fake device fault"));
    } else {
      assert_int_equal(atomic_load(&R[i].st), SL_OK);
    }
  }
  sl__notifier_stats st;
  sl__notifier_get_stats(n, &st);
  assert_int_equal(st.failures, 3);
  assert_int_equal(st.completions, 6);
  sl__notifier_destroy(n);
  fake_delete(k);
}

static void test_poll_errors(void **state) { run_errors(SL__NOTIFY_POLL); }
static void test_callback_errors(void **state) {
  run_errors(SL__NOTIFY_CALLBACK);
}

/* ---- the poller's back-off and idle sleep
 * ------------------------------------ */

static void test_poll_backoff(void **state) {
  fake *k = fake_new();
  sl__notifier *n = notifier(k->dev, SL__NOTIFY_POLL);
  fake_stream s = {0};
  rec r = {0};
  atomic_int total = 0;
  r.total = &total;
  r.done_at = fake_enqueue(&k->f, &s, 50ull * 1000 * 1000); /* 50 ms */
  assert_int_equal(sl__notifier_watch(n, (sl__stream *)&s, on_done, &r), SL_OK);
  wait_total(&total, 1);
  sl__notifier_stats st;
  sl__notifier_get_stats(n, &st);
  uint64_t late = atomic_load(&r.called_at) - r.done_at;
  printf("50 ms of work: %llu queries, %llu sleeps, notified %.1f us late\n",
         (unsigned long long)st.queries, (unsigned long long)st.sleeps,
         late / 1e3);
  /* Busy polling would query millions of times in 50 ms; with sleeps
   * doubling to 100 us it is about 500 plus the initial spin. */
  assert_true(st.queries < 5000);
  assert_true(st.sleeps >= 10); /* it slept rather than spun */
  assert_true(late < 50ull * 1000 * 1000);
  sl__notifier_destroy(n);
  fake_delete(k);
}

static void test_poll_idle(void **state) {
  fake *k = fake_new();
  sl__notifier *n = notifier(k->dev, SL__NOTIFY_POLL);
  sl__sleep_ns(30ull * 1000 * 1000);
  sl__notifier_stats st;
  sl__notifier_get_stats(n, &st);
  assert_int_equal(st.queries, 0);
  assert_true(st.idle_waits >= 1);
  fake_stream s = {0};
  rec r = {0};
  atomic_int total = 0;
  r.total = &total;
  fake_enqueue(&k->f, &s, 1000);
  assert_int_equal(sl__notifier_watch(n, (sl__stream *)&s, on_done, &r), SL_OK);
  wait_total(&total, 1);
  sl__sleep_ns(5ull * 1000 * 1000); /* let it go back to sleep */
  sl__notifier_get_stats(n, &st);
  uint64_t q = atomic_load(&k->f.queries);
  assert_int_equal(st.queries, q);
  sl__sleep_ns(30ull * 1000 * 1000);
  assert_int_equal(atomic_load(&k->f.queries), q); /* idle again: no polling */
  sl__notifier_destroy(n);
  fake_delete(k);
}

/* ---- destroy, threads, refusals
 * ---------------------------------------------- */

static void run_destroy_waits(sl__notify_mode mode) {
  fake *k = fake_new();
  sl__notifier *n = notifier(k->dev, mode);
  fake_stream s[4] = {{0}};
  rec R[16];
  memset(R, 0, sizeof R);
  atomic_int total = 0;
  uint64_t last = 0;
  for (int i = 0; i < 16; i++) {
    R[i].total = &total;
    R[i].done_at = fake_enqueue(&k->f, &s[i % 4], 5ull * 1000 * 1000);
    last = SL_MAX(last, R[i].done_at);
    assert_int_equal(
        sl__notifier_watch(n, (sl__stream *)&s[i % 4], on_done, &R[i]), SL_OK);
  }
  sl__notifier_destroy(n);
  assert_int_equal(atomic_load(&total), 16);
  assert_true(sl__now_ns() >= last);
  fake_delete(k);
}

static void test_poll_destroy_waits(void **state) {
  run_destroy_waits(SL__NOTIFY_POLL);
}
static void test_callback_destroy_waits(void **state) {
  run_destroy_waits(SL__NOTIFY_CALLBACK);
}

typedef struct watcher {
  fake *k;
  sl__notifier *n;
  fake_stream s;
  rec *R;
  atomic_int next, order_errors, *total;
  int id;
  sl_status st;
} watcher;

enum { WT = 4, WPER = 300 };

static void *watcher_main(void *arg) {
  watcher *w = arg;
  sl_rng g = {(uint64_t)w->id + 1};
  for (int j = 0; j < WPER; j++) {
    rec *r = &w->R[j];
    r->seq = j;
    r->next_seq = &w->next;
    r->order_errors = &w->order_errors;
    r->total = w->total;
    r->done_at = fake_enqueue(&w->k->f, &w->s, sl__rng_below(&g, 50) * 1000);
    sl_status st = sl__notifier_watch(w->n, (sl__stream *)&w->s, on_done, r);
    if (st != SL_OK) w->st = st;
    if (j % 50 == 0) sl__sleep_ns(sl__rng_below(&g, 500) * 1000);
  }
  return NULL;
}

static void run_threads(sl__notify_mode mode) {
  fake *k = fake_new();
  sl__notifier *n = notifier(k->dev, mode);
  static rec R[WT][WPER];
  memset(R, 0, sizeof R);
  static watcher W[WT];
  atomic_int total = 0;
  pthread_t th[WT];
  for (int i = 0; i < WT; i++) {
    memset(&W[i], 0, sizeof W[i]);
    W[i].k = k;
    W[i].n = n;
    W[i].R = R[i];
    W[i].total = &total;
    W[i].id = i;
    assert_int_equal(pthread_create(&th[i], NULL, watcher_main, &W[i]), 0);
  }
  for (int i = 0; i < WT; i++)
    pthread_join(th[i], NULL);
  wait_total(&total, WT * WPER);
  for (int i = 0; i < WT; i++) {
    assert_int_equal(W[i].st, SL_OK);
    assert_int_equal(atomic_load(&W[i].order_errors), 0);
    for (int j = 0; j < WPER; j++) {
      assert_int_equal(atomic_load(&R[i][j].calls), 1);
      assert_true(atomic_load(&R[i][j].called_at) >= R[i][j].done_at);
    }
  }
  sl__notifier_destroy(n);
  fake_delete(k);
}

static void test_poll_threads(void **state) { run_threads(SL__NOTIFY_POLL); }
static void test_callback_threads(void **state) {
  run_threads(SL__NOTIFY_CALLBACK);
}

static void test_refusals(void **state) {
  fake *k = fake_new();
  sl__notifier *n = (sl__notifier *)&n;
  sl__notifier_config c = {.mode = (sl__notify_mode)9};
  assert_int_equal(sl__notifier_create(k->dev, &c, &n), SL_EINVAL);
  assert_null(n);
  c = (sl__notifier_config){.min_sleep_ns = 5000, .max_sleep_ns = 1000};
  assert_int_equal(sl__notifier_create(k->dev, &c, &n), SL_EINVAL);
  assert_int_equal(sl__notifier_create(NULL, NULL, &n), SL_EINVAL);

  /* A device without events cannot be polled; without callbacks it cannot
   * call back. */
  static const sl__device_vtable no_events = {
      .name = "noev", .stream_add_callback = f_add_callback};
  static const sl__device_vtable no_callbacks = {.name = "nocb",
                                                 .event_create = f_event_create,
                                                 .event_destroy =
                                                     f_event_destroy,
                                                 .event_record = f_event_record,
                                                 .event_query = f_event_query};
  sl__device *d;
  assert_int_equal(
      sl__device_wrap(&no_events, &k->f, SL_DEVICE_CUDA, 0, NULL, &d), SL_OK);
  assert_int_equal(sl__notifier_create(d, NULL, &n), SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "no events"));
  sl__device_close(d);
  assert_int_equal(
      sl__device_wrap(&no_callbacks, &k->f, SL_DEVICE_CUDA, 0, NULL, &d),
      SL_OK);
  c = (sl__notifier_config){.mode = SL__NOTIFY_CALLBACK};
  assert_int_equal(sl__notifier_create(d, &c, &n), SL_EUNSUPPORTED);
  sl__device_close(d);

  /* A watch the device refuses: an error, and no callback ever. */
  for (int m = 0; m < 2; m++) {
    sl__notifier *nn = notifier(k->dev, (sl__notify_mode)m);
    fake_stream s = {0};
    rec r = {0};
    k->f.fail_record = k->f.fail_callback = true;
    assert_int_equal(sl__notifier_watch(nn, (sl__stream *)&s, on_done, &r),
                     SL_ECUDA);
    assert_non_null(strstr(sl_last_error(), "refused"));
    assert_int_equal(sl__notifier_watch(nn, NULL, on_done, &r), SL_EINVAL);
    assert_int_equal(sl__notifier_watch(nn, (sl__stream *)&s, NULL, &r),
                     SL_EINVAL);
    assert_int_equal(sl__notifier_watch_completion(nn, (sl__stream *)&s, NULL),
                     SL_EINVAL);
    k->f.fail_record = k->f.fail_callback = false;
    sl__notifier_destroy(nn);
    assert_int_equal(atomic_load(&r.calls), 0);
  }
  sl__notifier_destroy(NULL);
  fake_delete(k);
}

/* The CPU device: events are complete when recorded, callbacks run inline. */
static void test_cpu_device(void **state) {
  sl__device *d;
  assert_int_equal(sl__device_open(SL_DEVICE_CPU, 0, &d), SL_OK);
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  for (int m = 0; m < 2; m++) {
    sl__notifier *n = notifier(d, (sl__notify_mode)m);
    atomic_int total = 0;
    rec r = {0};
    r.total = &total;
    assert_int_equal(sl__notifier_watch(n, s, on_done, &r), SL_OK);
    if (m == SL__NOTIFY_CALLBACK) assert_int_equal(atomic_load(&total), 1);
    wait_total(&total, 1);
    assert_int_equal(atomic_load(&r.st), SL_OK);
    sl__notifier_destroy(n);
  }
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

/* ---- an actor completed through the notifier
 * ------------------------------------ */

typedef struct kern {
  fake *k;
  sl__notifier *n;
  fake_stream s;
  int64_t break_at; /* from this piece on the stream faults; -1 never */
} kern;

static sl_status act_source(sl_act *a) {
  *(int64_t *)a->out[0]->data = a->piece;
  return SL_OK;
}

/* What a CUDA actor does: queue the kernel (2 ms of fake work), write what
 * it will produce, defer the firing and let the notifier complete it. */
static sl_status act_kernel(sl_act *a) {
  kern *kc = a->ctx;
  if (a->piece == kc->break_at) fake_break(&kc->k->f, &kc->s, true);
  uint64_t done_at = fake_enqueue(&kc->k->f, &kc->s, 2ull * 1000 * 1000);
  memcpy(a->out[0]->data, &done_at, sizeof done_at);
  sl_completion *c = sl_act_defer(a);
  sl_status st = sl__notifier_watch_completion(kc->n, (sl__stream *)&kc->s, c);
  /* Deferred already: a failed watch completes the firing itself. */
  if (st != SL_OK) sl_completion_done(c, st);
  return SL_OK;
}

typedef struct sink {
  atomic_int pieces, early;
} sink;

static sl_status act_sink(sl_act *a) {
  sink *s = a->ctx;
  uint64_t done_at;
  memcpy(&done_at, a->in[0]->data, sizeof done_at);
  if (sl__now_ns() < done_at) atomic_fetch_add(&s->early, 1);
  atomic_fetch_add(&s->pieces, 1);
  return SL_OK;
}

static sl_status run_job(sl__notify_mode mode, int64_t break_at, sink *out,
                         uint64_t *elapsed) {
  fake *k = fake_new();
  kern kc = {.k = k, .n = notifier(k->dev, mode), .break_at = break_at};
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src, ker, snk;
  sl_actor_desc d1 = {
      .name = "src", .kind = SL_ACTOR_SOURCE, .act = act_source, .count = 20};
  sl_actor_desc d2 = {.name = "kern",
                      .kind = SL_ACTOR_KERNEL,
                      .device = 1,
                      .act = act_kernel,
                      .ctx = &kc};
  sl_actor_desc d3 = {.name = "sink",
                      .kind = SL_ACTOR_SINK,
                      .device = 1,
                      .stream = SL_STREAM_COPY,
                      .act = act_sink,
                      .ctx = out};
  assert_int_equal(sl_actor_graph_add_actor(p, &d1, &src), SL_OK);
  assert_int_equal(sl_actor_graph_add_actor(p, &d2, &ker), SL_OK);
  assert_int_equal(sl_actor_graph_add_actor(p, &d3, &snk), SL_OK);
  sl_regst_desc r = {.count = 2, .bytes = 8, .device = -1};
  int32_t r1, r2;
  assert_int_equal(sl_actor_graph_add_output(p, src, &r, &r1), SL_OK);
  assert_int_equal(sl_actor_graph_connect(p, r1, ker), SL_OK);
  assert_int_equal(sl_actor_graph_add_output(p, ker, &r, &r2), SL_OK);
  assert_int_equal(sl_actor_graph_connect(p, r2, snk), SL_OK);
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  uint64_t t0 = sl__now_ns();
  sl_status st = sl_job_run(job);
  *elapsed = sl__now_ns() - t0;
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
  sl__notifier_destroy(kc.n);
  fake_delete(k);
  return st;
}

static void run_actor(sl__notify_mode mode) {
  sink s = {0};
  uint64_t ns;
  assert_int_equal(run_job(mode, -1, &s, &ns), SL_OK);
  assert_int_equal(atomic_load(&s.pieces), 20);
  assert_int_equal(atomic_load(&s.early), 0); /* never before the work ended */
  assert_true(ns >= 20ull * 2 * 1000 * 1000); /* one stream: 20 x 2 ms */
  printf("%s: 20 firings of 2 ms device work in %.1f ms\n",
         sl__notify_mode_name(mode), ns / 1e6);

  sink e = {0};
  sl_status st = run_job(mode, 5, &e, &ns);
  assert_int_equal(st, SL_ECUDA);
  const char *msg = sl_last_error();
  assert_non_null(strstr(msg, "kern"));
  assert_non_null(strstr(msg, "fake device fault"));
  assert_true(atomic_load(&e.pieces) <= 5);
  assert_int_equal(atomic_load(&e.early), 0);
}

/* The CPU device in callback mode completes the firing inside the act,
 * before it returns: the runtime must take that too. */
typedef struct cpu_kern {
  sl__notifier *n;
  sl__stream *s;
} cpu_kern;

static sl_status act_cpu_kernel(sl_act *a) {
  cpu_kern *kc = a->ctx;
  uint64_t now = sl__now_ns();
  memcpy(a->out[0]->data, &now, sizeof now);
  sl_completion *c = sl_act_defer(a);
  sl_status st = sl__notifier_watch_completion(kc->n, kc->s, c);
  if (st != SL_OK) sl_completion_done(c, st);
  return SL_OK;
}

static void test_cpu_device_actor(void **state) {
  sl__device *d;
  assert_int_equal(sl__device_open(SL_DEVICE_CPU, 1, &d), SL_OK);
  for (int m = 0; m < 2; m++) {
    cpu_kern kc = {.n = notifier(d, (sl__notify_mode)m)};
    assert_int_equal(sl__device_stream_create(d, &kc.s), SL_OK);
    sink out = {0};
    sl_actor_graph *p;
    assert_int_equal(sl_actor_graph_create(&p), SL_OK);
    sl_actor_id src, ker, snk;
    sl_actor_desc d1 = {
        .name = "src", .kind = SL_ACTOR_SOURCE, .act = act_source, .count = 50};
    sl_actor_desc d2 = {.name = "kern",
                        .kind = SL_ACTOR_KERNEL,
                        .device = 1,
                        .act = act_cpu_kernel,
                        .ctx = &kc};
    sl_actor_desc d3 = {
        .name = "sink", .kind = SL_ACTOR_SINK, .act = act_sink, .ctx = &out};
    assert_int_equal(sl_actor_graph_add_actor(p, &d1, &src), SL_OK);
    assert_int_equal(sl_actor_graph_add_actor(p, &d2, &ker), SL_OK);
    assert_int_equal(sl_actor_graph_add_actor(p, &d3, &snk), SL_OK);
    sl_regst_desc r = {.count = 2, .bytes = 8, .device = -1};
    int32_t r1, r2;
    assert_int_equal(sl_actor_graph_add_output(p, src, &r, &r1), SL_OK);
    assert_int_equal(sl_actor_graph_connect(p, r1, ker), SL_OK);
    assert_int_equal(sl_actor_graph_add_output(p, ker, &r, &r2), SL_OK);
    assert_int_equal(sl_actor_graph_connect(p, r2, snk), SL_OK);
    sl_job *job;
    assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
    sl_status st = sl_job_run(job);
    if (st != SL_OK)
      fail_msg("%s: %s", sl__notify_mode_name((sl__notify_mode)m),
               sl_last_error());
    assert_int_equal(atomic_load(&out.pieces), 50);
    sl_job_destroy(job);
    sl_actor_graph_destroy(p);
    sl__notifier_destroy(kc.n);
    assert_int_equal(sl__device_stream_destroy(d, kc.s), SL_OK);
  }
  sl__device_close(d);
}

static void test_poll_actor(void **state) { run_actor(SL__NOTIFY_POLL); }
static void test_callback_actor(void **state) {
  run_actor(SL__NOTIFY_CALLBACK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_poll_order_and_timing),
      cmocka_unit_test(test_callback_order_and_timing),
      cmocka_unit_test(test_poll_errors),
      cmocka_unit_test(test_callback_errors),
      cmocka_unit_test(test_poll_backoff),
      cmocka_unit_test(test_poll_idle),
      cmocka_unit_test(test_poll_destroy_waits),
      cmocka_unit_test(test_callback_destroy_waits),
      cmocka_unit_test(test_poll_threads),
      cmocka_unit_test(test_callback_threads),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_cpu_device),
      cmocka_unit_test(test_poll_actor),
      cmocka_unit_test(test_callback_actor),
      cmocka_unit_test(test_cpu_device_actor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
