/* Running plans: the firing rule, ordering, quotas and back-pressure,
 * threads, both queue kinds, asynchronous completion, stop, job states. */
#include <pthread.h>
#include <stdatomic.h>

#include "actor_helpers.h"

/* ---- a chain whose data can be checked ----------------------------------- */

/* Source: writes the piece id. */
static sl_status act_source(sl_act *a) {
  *(int64_t *)a->out[0]->data = a->piece;
  return SL_OK;
}

/* Kernel: checks that its input is the piece it expects, adds 1. */
static sl_status act_inc(sl_act *a) {
  if (a->in[0]->piece != a->piece)
    return sl_act_fail(a, SL_EMISMATCH, "input piece %lld, expected %lld",
                       (long long)a->in[0]->piece, (long long)a->piece);
  for (int i = 0; i < a->n_out; i++)
    *(int64_t *)a->out[i]->data = *(const int64_t *)a->in[0]->data + 1;
  return SL_OK;
}

typedef struct sink_state {
  int64_t expect_add; /* value == piece + expect_add */
  int64_t next;       /* next piece expected */
  int64_t errors;
  _Atomic int64_t consumed;
} sink_state;

static sl_status act_sink(sl_act *a) {
  sink_state *s = a->ctx;
  int64_t v = *(const int64_t *)a->in[0]->data;
  if (a->in[0]->piece != s->next || v != s->next + s->expect_add) s->errors++;
  s->next++;
  atomic_fetch_add(&s->consumed, 1);
  return SL_OK;
}

/* src -> k0 -> ... -> k(n-1) -> sink, actor i placed by place(i). */
typedef void (*place_fn)(int i, uint32_t *dev, uint32_t *stream);

static sl_actor_graph *chain_plan(int n, int64_t pieces, int32_t count,
                                  place_fn place, sink_state *ss) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  uint32_t dev = 0, st = 0;
  if (place) place(0, &dev, &st);
  sl_actor_id prev = add_actor(p, "src", SL_ACTOR_SOURCE, 0, dev, st,
                               act_source, NULL, pieces);
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "k%d", i);
    dev = st = 0;
    if (place) place(i + 1, &dev, &st);
    sl_actor_id k =
        add_actor(p, name, SL_ACTOR_KERNEL, 0, dev, st, act_inc, NULL, 0);
    connect_to(p, add_out(p, prev, count, sizeof(int64_t)), k);
    prev = k;
  }
  dev = st = 0;
  if (place) place(n + 1, &dev, &st);
  ss->expect_add = n;
  sl_actor_id sink =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, dev, st, act_sink, ss, 0);
  connect_to(p, add_out(p, prev, count, sizeof(int64_t)), sink);
  return p;
}

static void expect_clean(sl_job *job, uint64_t firings) {
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.firings, firings);
  assert_int_equal(s.in_flight, 0);
  assert_int_equal(s.messages_left, 0);
  assert_int_equal(s.discarded, 0);
}

static void test_chain_one_thread(void **state) {
  sink_state ss = {0};
  sl_actor_graph *p = chain_plan(10, 1000, 2, NULL, &ss);
  sl_job *job;
  assert_int_equal(run_plan(p, NULL, &job), SL_OK);
  assert_int_equal(ss.next, 1000);
  assert_int_equal(ss.errors, 0);
  sl_job_stats s;
  expect_clean(job, 12 * 1000);
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.threads, 1);
  assert_int_equal(s.messages_cross, 0);
  /* Each edge carries pieces, returns and one end-of-data. */
  assert_int_equal(s.messages_local, 11 * (2 * 1000 + 1));
  for (int32_t d = 0; d < sl_actor_graph_regst_count(p); d++) {
    sl_regst_stats r;
    assert_int_equal(sl_job_get_regst_stats(job, d, &r), SL_OK);
    assert_int_equal(r.count, 2);
    assert_true(r.peak_in_flight >= 1 && r.peak_in_flight <= 2);
    assert_int_equal(r.in_flight, 0);
  }
  sl_actor_stats as;
  assert_int_equal(
      sl_job_get_actor_stats(job, sl_actor_id_make(0, 0, 0, 3), &as), SL_OK);
  assert_int_equal(as.firings, 1000);
  assert_true(as.finished);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

static void place_spread(int i, uint32_t *dev, uint32_t *stream) {
  *dev = (uint32_t)(i % 3);
  *stream = (uint32_t)((i / 3) % 4);
}

static void test_chain_many_threads_both_queues(void **state) {
  sl_queue_kind kinds[] = {SL_QUEUE_MUTEX, SL_QUEUE_LOCKFREE, SL_QUEUE_DEFAULT};
  for (size_t q = 0; q < SL_ARRAY_LEN(kinds); q++) {
    sink_state ss = {0};
    sl_actor_graph *p = chain_plan(23, 500, 1 + (int32_t)q, place_spread, &ss);
    sl_job_config cfg = SL_JOB_CONFIG(.queue = kinds[q]);
    sl_job *job;
    assert_int_equal(run_plan(p, &cfg, &job), SL_OK);
    assert_int_equal(ss.next, 500);
    assert_int_equal(ss.errors, 0);
    expect_clean(job, 25 * 500);
    sl_job_stats s;
    assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
    assert_int_equal(s.threads, 12);
    assert_true(s.messages_cross > 0);
    sl_job_destroy(job);
    sl_actor_graph_destroy(p);
  }
}

/* 64 devices x 2 streams = 128 threads on however few cores there are. */
static void place_wide(int i, uint32_t *dev, uint32_t *stream) {
  *dev = (uint32_t)(i % 64);
  *stream = (uint32_t)((i / 64) % 2);
}

static void test_threads_beyond_cores(void **state) {
  sink_state ss = {0};
  sl_actor_graph *p = chain_plan(126, 200, 2, place_wide, &ss);
  sl_job *job;
  assert_int_equal(run_plan(p, NULL, &job), SL_OK);
  assert_int_equal(ss.next, 200);
  assert_int_equal(ss.errors, 0);
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.threads, 128);
  expect_clean(job, 128 * 200);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- the firing rule with several inputs and outputs -----------------------
 */

static sl_status act_join(sl_act *a) {
  /* Fires only with a ready register on every input: same piece on both. */
  if (a->n_in != 2 || a->in[0]->piece != a->piece ||
      a->in[1]->piece != a->piece)
    return sl_act_fail(a, SL_EMISMATCH, "join got pieces %lld and %lld at %lld",
                       (long long)a->in[0]->piece, (long long)a->in[1]->piece,
                       (long long)a->piece);
  /* (p+1 + p+1) / 2: the sink checks p + 1. */
  *(int64_t *)a->out[0]->data =
      (*(const int64_t *)a->in[0]->data + *(const int64_t *)a->in[1]->data) / 2;
  return SL_OK;
}

/* src -> {a: +1, b: +1 with its output read twice} -> join -> sink. */
static void test_diamond(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_source, NULL, 300);
  sl_actor_id a = add_actor(p, "a", SL_ACTOR_KERNEL, 0, 1, 0, act_inc, NULL, 0);
  sl_actor_id b = add_actor(p, "b", SL_ACTOR_KERNEL, 0, 2, 0, act_inc, NULL, 0);
  sl_actor_id j =
      add_actor(p, "join", SL_ACTOR_KERNEL, 0, 0, 1, act_join, NULL, 0);
  int32_t s_out = add_out(p, src, 3, 8);
  connect_to(p, s_out, a);
  connect_to(p, s_out, b);
  connect_to(p, add_out(p, a, 1, 8), j);
  int32_t b_out = add_out(p, b, 2, 8);
  connect_to(p, b_out, j);
  /* b's output also goes to a sink of its own: one register, two readers. */
  sink_state side = {.expect_add = 1};
  connect_to(p, b_out,
             add_actor(p, "side", SL_ACTOR_SINK, 0, 3, 0, act_sink, &side, 0));
  sink_state ss = {.expect_add = 1};
  sl_actor_id sink =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 1, act_sink, &ss, 0);
  connect_to(p, add_out(p, j, 2, 8), sink);
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  assert_int_equal(sl_job_run(job), SL_OK);
  assert_int_equal(ss.next, 300);
  assert_int_equal(ss.errors, 0);
  assert_int_equal(side.next, 300);
  assert_int_equal(side.errors, 0);
  expect_clean(job, 6 * 300);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- back-pressure
 * ------------------------------------------------------------ */

typedef struct bp_state {
  sink_state *sink;
  int64_t max_lag;
} bp_state;

static sl_status act_bp_source(sl_act *a) {
  bp_state *b = a->ctx;
  int64_t lag = a->piece - atomic_load(&b->sink->consumed);
  if (lag > b->max_lag) b->max_lag = lag;
  *(int64_t *)a->out[0]->data = a->piece;
  return SL_OK;
}

static sl_status act_slow_sink(sl_act *a) {
  sl__sleep_ns(500000);
  return act_sink(a);
}

/* With quotas c1 (source) and c2 (kernel), when the source writes piece p
 * the sink has consumed at least p - c1 - c2 + 1 pieces: the source needs a
 * free register, which needs the kernel to have consumed piece p - c1,
 * which needed a free kernel register, which needs the sink to have
 * consumed piece p - c1 - c2. */
static void test_back_pressure(void **state) {
  for (int32_t c1 = 1; c1 <= 3; c1++)
    for (int32_t c2 = 1; c2 <= 2; c2++) {
      sl_actor_graph *p;
      assert_int_equal(sl_actor_graph_create(&p), SL_OK);
      sink_state ss = {.expect_add = 1};
      bp_state bp = {&ss, 0};
      sl_actor_id s =
          add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_bp_source, &bp, 60);
      sl_actor_id k =
          add_actor(p, "k", SL_ACTOR_KERNEL, 0, 1, 0, act_inc, NULL, 0);
      sl_actor_id z =
          add_actor(p, "sink", SL_ACTOR_SINK, 0, 2, 0, act_slow_sink, &ss, 0);
      int32_t d1 = add_out(p, s, c1, 8), d2 = add_out(p, k, c2, 8);
      connect_to(p, d1, k);
      connect_to(p, d2, z);
      sl_job *job;
      assert_int_equal(run_plan(p, NULL, &job), SL_OK);
      assert_int_equal(ss.next, 60);
      assert_int_equal(ss.errors, 0);
      if (bp.max_lag > c1 + c2 - 1)
        fail_msg("c1=%d c2=%d: source ran %lld pieces ahead of the sink",
                 (int)c1, (int)c2, (long long)bp.max_lag);
      /* The slow sink (0.5 ms a piece) makes the source wait at the bound. */
      assert_int_equal(bp.max_lag, c1 + c2 - 1);
      sl_regst_stats r;
      assert_int_equal(sl_job_get_regst_stats(job, d1, &r), SL_OK);
      assert_int_equal(r.peak_in_flight, c1);
      assert_int_equal(sl_job_get_regst_stats(job, d2, &r), SL_OK);
      assert_int_equal(r.peak_in_flight, c2);
      expect_clean(job, 180);
      sl_job_destroy(job);
      sl_actor_graph_destroy(p);
    }
}

/* ---- asynchronous completion ------------------------------------------------
 */

typedef struct async_state {
  _Atomic int other_fired;  /* firings of an actor sharing the stream */
  _Atomic int saw_progress; /* it fired while a deferred firing was out */
  _Atomic int deferred;
  pthread_t threads[64];
  int n_threads;
} async_state;

typedef struct async_job {
  async_state *as;
  sl_completion *c;
  sl_register *out;
  int64_t value;
  int before;
} async_job;

static void *completer(void *arg) {
  async_job *j = arg;
  /* Device work stand-in: wait until the other actor of the stream has
   * moved on (bounded, so a broken runtime fails instead of hanging). */
  for (int i = 0; i < 5000 && atomic_load(&j->as->other_fired) == j->before;
       i++)
    sl__sleep_ns(100000);
  if (atomic_load(&j->as->other_fired) != j->before)
    atomic_fetch_add(&j->as->saw_progress, 1);
  *(int64_t *)j->out->data = j->value; /* written by the "device" */
  sl_completion *c = j->c;
  free(j);
  sl_completion_done(c, SL_OK);
  return NULL;
}

static sl_status act_async_inc(sl_act *a) {
  async_state *as = a->ctx;
  async_job *j = malloc(sizeof *j);
  if (!j) return SL_ENOMEM;
  j->as = as;
  j->out = a->out[0];
  j->value = *(const int64_t *)a->in[0]->data + 1;
  j->before = atomic_load(&as->other_fired);
  j->c = sl_act_defer(a);
  if (sl_act_defer(a) != j->c) { /* idempotent within a firing */
    free(j);
    return sl_act_fail(a, SL_EINTERNAL, "a second defer gave another handle");
  }
  atomic_fetch_add(&as->deferred, 1);
  pthread_t t;
  if (pthread_create(&t, NULL, completer, j) != 0) return SL_EINTERNAL;
  pthread_detach(t);
  return SL_OK;
}

static sl_status act_count(sl_act *a) {
  async_state *as = a->ctx;
  atomic_fetch_add(&as->other_fired, 1);
  return act_inc(a);
}

typedef struct async_sink {
  sink_state s;
  sl_job *job;
} async_sink;

static sl_status act_async_sink(sl_act *a) {
  async_sink *as = a->ctx;
  sl_status st = act_sink(a);
  if (as->s.next == 20) st = sl_job_stop(as->job); /* ends "src2" too */
  return st;
}

/* src -> async (deferred) -> sink, and src2 -> other -> sink2 where "other"
 * shares the async actor's stream: it must keep firing while the async one
 * waits for its completion. src2 runs until the async chain is done. */
static void test_async_completion(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  async_state as = {0};
  async_sink s1 = {.s = {.expect_add = 1}};
  sink_state s2 = {.expect_add = 1};
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_source, NULL, 20);
  sl_actor_id src2 = add_actor(p, "src2", SL_ACTOR_SOURCE, 0, 2, 0, act_source,
                               NULL, INT64_MAX);
  sl_actor_id asy =
      add_actor(p, "async", SL_ACTOR_KERNEL, 0, 1, 0, act_async_inc, &as, 0);
  sl_actor_id oth =
      add_actor(p, "other", SL_ACTOR_KERNEL, 0, 1, 0, act_count, &as, 0);
  connect_to(p, add_out(p, src, 2, 8), asy);
  connect_to(p, add_out(p, src2, 2, 8), oth);
  connect_to(
      p, add_out(p, asy, 2, 8),
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 3, 0, act_async_sink, &s1, 0));
  connect_to(p, add_out(p, oth, 2, 8),
             add_actor(p, "sink2", SL_ACTOR_SINK, 0, 3, 1, act_sink, &s2, 0));
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  s1.job = job;
  assert_int_equal(sl_job_run(job), SL_OK);
  assert_int_equal(s1.s.next, 20);
  assert_int_equal(s1.s.errors, 0); /* the completer's writes were seen */
  assert_int_equal(s2.errors, 0);
  sl_actor_stats a2;
  assert_int_equal(sl_job_get_actor_stats(job, src2, &a2), SL_OK);
  assert_int_equal(s2.next, a2.pieces);
  assert_int_equal(atomic_load(&as.deferred), 20);
  assert_true(atomic_load(&as.saw_progress) >= 1);
  expect_clean(job, 20 * 3 + (uint64_t)a2.pieces * 3);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- stop, empty sources, unread outputs ----------------------------------
 */

typedef struct stop_state {
  sl_job *job;
  int64_t seen;
} stop_state;

static sl_status act_stopping_sink(sl_act *a) {
  stop_state *s = a->ctx;
  if (a->in[0]->piece != s->seen) return sl_act_fail(a, SL_EMISMATCH, "order");
  if (++s->seen == 100) return sl_job_stop(s->job);
  return SL_OK;
}

static void test_stop_command(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  stop_state ss = {0};
  sl_actor_id src = add_actor(p, "endless", SL_ACTOR_SOURCE, 0, 0, 0,
                              act_source, NULL, INT64_MAX);
  sl_actor_id k = add_actor(p, "k", SL_ACTOR_KERNEL, 0, 1, 0, act_inc, NULL, 0);
  sl_actor_id z =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 2, 0, act_stopping_sink, &ss, 0);
  connect_to(p, add_out(p, src, 2, 8), k);
  connect_to(p, add_out(p, k, 2, 8), z);
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  assert_int_equal(sl_job_stop(job), SL_ESTATE); /* not started */
  ss.job = job;
  assert_int_equal(sl_job_run(job), SL_OK);
  sl_actor_stats a;
  assert_int_equal(sl_job_get_actor_stats(job, src, &a), SL_OK);
  assert_true(ss.seen >= 100);
  assert_int_equal(a.pieces,
                   ss.seen); /* drained: everything produced arrived */
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.in_flight, 0);
  assert_int_equal(s.messages_left, 0);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

static void test_empty_source_and_unread_output(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sink_state ss = {.expect_add = 1};
  sl_actor_id s0 =
      add_actor(p, "nothing", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 0);
  connect_to(p, add_out(p, s0, 1, 8),
             add_actor(p, "idle", SL_ACTOR_SINK, 0, 0, 1, NULL, NULL, 0));
  sl_actor_id s1 =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_source, NULL, 50);
  sl_actor_id k = add_actor(p, "k", SL_ACTOR_KERNEL, 0, 0, 0, act_inc, NULL, 0);
  connect_to(p, add_out(p, s1, 1, 8), k);
  connect_to(p, add_out(p, k, 1, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 0, 0, act_sink, &ss, 0));
  add_out(p, k, 1, 8); /* nobody reads this one */
  sl_job *job;
  assert_int_equal(run_plan(p, NULL, &job), SL_OK);
  assert_int_equal(ss.next, 50);
  assert_int_equal(ss.errors, 0);
  expect_clean(job, 150);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- job states, register metadata, custom memory --------------------------
 */

static void test_job_states(void **state) {
  sink_state ss = {0};
  sl_actor_graph *p = chain_plan(2, 10, 1, NULL, &ss);
  sl_job *job;
  sl_job_stats s;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  assert_int_equal(sl_job_wait(job), SL_ESTATE);
  assert_int_equal(sl_job_get_stats(job, &s), SL_ESTATE);
  assert_int_equal(sl_job_start(job), SL_OK);
  assert_int_equal(sl_job_start(job), SL_ESTATE);
  assert_int_equal(sl_job_wait(job), SL_OK);
  assert_int_equal(sl_job_wait(job), SL_OK);
  assert_string_equal(sl_job_hang_report(job), "");
  sl_regst_stats r;
  assert_int_equal(sl_job_get_regst_stats(job, 99, &r), SL_ENOTFOUND);
  sl_actor_stats as;
  assert_int_equal(
      sl_job_get_actor_stats(job, sl_actor_id_make(0, 5, 0, 0), &as),
      SL_ENOTFOUND);
  sl_job_destroy(job);
  /* A started job destroyed without waiting is waited for. */
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  assert_int_equal(sl_job_start(job), SL_OK);
  sl_job_destroy(job);
  sl_job_destroy(NULL);
  sl_actor_graph_destroy(p);
}

static sl_status act_meta(sl_act *a) {
  sl_actor_id *src = a->ctx;
  const sl_register *r = a->in[0];
  if (r->producer != *src || r->desc != 0 || r->index < 0 || r->index >= 3 ||
      r->bytes != 24 || ((uintptr_t)r->data % 64) != 0)
    return sl_act_fail(a, SL_EMISMATCH, "bad register metadata");
  if (a->step != 0 || a->steps != 1 || a->n_in != 1 || a->n_out != 0 ||
      strcmp(a->name, "meta") != 0)
    return sl_act_fail(a, SL_EMISMATCH, "bad act record");
  return SL_OK;
}

typedef struct mem_count {
  int allocs, frees;
  size_t bytes;
} mem_count;

static sl_status count_alloc(void *ctx, int32_t device, size_t bytes,
                             void **out) {
  mem_count *m = ctx;
  *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!*out) return SL_ENOMEM;
  m->allocs++;
  m->bytes += bytes;
  return SL_OK;
}

static void count_free(void *ctx, int32_t device, void *p) {
  ((mem_count *)ctx)->frees++;
  free(p);
}

static const sl_regst_memory_vtable counting_memory = {count_alloc, count_free};

static void test_register_metadata_and_memory(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 40);
  sl_actor_id m =
      add_actor(p, "meta", SL_ACTOR_SINK, 0, 1, 0, act_meta, &src, 0);
  connect_to(p, add_out(p, src, 3, 24), m);
  mem_count mc = {0};
  sl_job_config cfg =
      SL_JOB_CONFIG(.memory = &counting_memory, .memory_ctx = &mc);
  sl_job *job;
  assert_int_equal(run_plan(p, &cfg, &job), SL_OK);
  assert_int_equal(mc.allocs, 1); /* all registers of a descriptor at load */
  assert_true(mc.bytes >= 3 * 24);
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.registers, 3);
  assert_int_equal(s.register_bytes, 72);
  sl_job_destroy(job);
  assert_int_equal(mc.frees, mc.allocs);
  sl_actor_graph_destroy(p);
}

/* ---- spinning backs off when waits are long ------------------------------ */

/* A source that takes 2 ms per piece, so its consumer's waits are long. */
static sl_status act_slow_source(sl_act *a) {
  sl__sleep_ns(2000000);
  *(int64_t *)a->out[0]->data = a->piece;
  return SL_OK;
}

/* A source that takes 1.5 ms per piece. */
static sl_status act_source_1500us(sl_act *a) {
  sl__sleep_ns(1500000);
  *(int64_t *)a->out[0]->data = a->piece;
  return SL_OK;
}

/* Runs 40 pieces from `source` (device 0) to a sink on device 1, under
 * cfg; the sink's stream's spin counts. */
static sl_job_stats spin_run(sl_act_fn source, const sl_job_config *cfg,
                             const char *label) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, source, NULL, 40);
  sink_state ss = {0};
  sl_actor_id sink =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, act_sink, &ss, 0);
  connect_to(p, add_out(p, src, 2, sizeof(int64_t)), sink);
  sl_job *job;
  assert_int_equal(run_plan(p, cfg, &job), SL_OK);
  assert_int_equal(ss.next, 40);
  assert_int_equal(ss.errors, 0);
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  print_message("%s: %llu caught, %llu missed, %llu sleeps\n", label,
                (unsigned long long)s.spins_caught,
                (unsigned long long)s.spins_missed,
                (unsigned long long)s.sleeps);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
  return s;
}

/* The sink on its own thread waits about 2 ms for every piece, a hundred
 * times the spin window. Spinning starts on (no waits seen) and turns off
 * once more than half of the recent waits were long (a moving share, 1/8
 * per wait): 6 long waits from the start, then at most about 2 more for
 * every wait a spin caught (under load the sink falls behind and finds its
 * pieces waiting). Without the back-off each of the 40 waits would be a
 * spin that ran out. docs/actor.md, "Threads and queues". */
static void test_spin_backs_off(void **state) {
  sl_job_config on = SL_JOB_CONFIG(.spin = 0), off = SL_JOB_CONFIG(.spin = -1);
  sl_job_stats s = spin_run(act_slow_source, &on, "spin on");
  assert_true(s.spins_missed <= 8 + 2 * s.spins_caught);
  s = spin_run(act_slow_source, &off, "spin off");
  assert_int_equal(s.spins_caught + s.spins_missed, 0);
}

/* With a spin window of 1 ms, the sink's waits of about 1.5 ms outlast
 * every spin but not twice the window. A wait the spin missed counts as
 * long, so after 6 misses spinning turns off; a wait then slept through
 * without a spin counts as short (its time includes a wake-up, so it is
 * long only past twice the window) and turns it on again: after the
 * first 6, at most every other wait spins in vain, where all 40 did when
 * a missed spin's wait was timed like a slept one. */
static void test_spin_backs_off_when_spins_miss(void **state) {
  (void)state;
  sl_job_config cfg = SL_JOB_CONFIG(.spin_us = 1000);
  sl_job_stats s = spin_run(act_source_1500us, &cfg, "spin 1 ms");
  assert_true(s.spins_missed <= 6 + 40 / 2 + 2 + 2 * s.spins_caught);
}

/* With a spin window ten times the source's 2 ms, the sink's waits are
 * short: its spins catch the pieces (a late one may be slept through
 * under load) and it rarely sleeps. */
static void test_spin_window(void **state) {
  (void)state;
  sl_job_config cfg = SL_JOB_CONFIG(.spin_us = 20000);
  sl_job_stats s = spin_run(act_slow_source, &cfg, "spin 20 ms");
  assert_true(s.spins_caught > s.spins_missed);
  assert_true(s.spins_caught >= 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_one_thread),
      cmocka_unit_test(test_chain_many_threads_both_queues),
      cmocka_unit_test(test_threads_beyond_cores),
      cmocka_unit_test(test_diamond),
      cmocka_unit_test(test_back_pressure),
      cmocka_unit_test(test_async_completion),
      cmocka_unit_test(test_stop_command),
      cmocka_unit_test(test_empty_source_and_unread_output),
      cmocka_unit_test(test_job_states),
      cmocka_unit_test(test_register_metadata_and_memory),
      cmocka_unit_test(test_spin_backs_off),
      cmocka_unit_test(test_spin_window),
      cmocka_unit_test(test_spin_backs_off_when_spins_miss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
