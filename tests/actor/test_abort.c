/* Abort: a failing kernel (or completion, or the caller) stops every actor
 * and the caller gets the status with the failing actor's name. */
#include <pthread.h>
#include <stdatomic.h>

#include "actor_helpers.h"

typedef struct fail_at {
  int64_t piece; /* fail when firing this piece; -1 never */
  sl_status st;
  _Atomic int64_t fired;
} fail_at;

static sl_status act_maybe_fail(sl_act *a) {
  fail_at *f = a->ctx;
  atomic_fetch_add(&f->fired, 1);
  if (a->piece == f->piece)
    return sl_act_fail(a, f->st, "injected failure at piece %lld",
                       (long long)a->piece);
  for (int i = 0; i < a->n_out; i++)
    if (a->out[i]->bytes >= 8) *(int64_t *)a->out[i]->data = a->piece;
  return SL_OK;
}

/* src -> k0 -> k1 -> k2 -> sink, actor `which` fails at `piece`. */
static sl_status run_failing_chain(int which, int64_t piece, bool spread,
                                   fail_at *fa, sl_job **job_out,
                                   sl_actor_graph **plan_out) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  for (int i = 0; i < 5; i++) {
    fa[i].piece = i == which ? piece : -1;
    fa[i].st = SL_EIO;
    atomic_store(&fa[i].fired, 0);
  }
  const char *names[5] = {"src", "k0", "k1", "k2", "sink"};
  sl_actor_kind kinds[5] = {SL_ACTOR_SOURCE, SL_ACTOR_KERNEL, SL_ACTOR_KERNEL,
                            SL_ACTOR_KERNEL, SL_ACTOR_SINK};
  sl_actor_id prev = 0;
  for (int i = 0; i < 5; i++) {
    sl_actor_id id =
        add_actor(p, names[i], kinds[i], 0, spread ? (uint32_t)i : 0, 0,
                  act_maybe_fail, &fa[i], 100);
    if (i > 0) connect_to(p, add_out(p, prev, 2, 8), id);
    prev = id;
  }
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  sl_status st = sl_job_run(job);
  if (job_out) {
    *job_out = job; /* the plan must outlive the job: handed over too */
    *plan_out = p;
  } else {
    sl_job_destroy(job);
    sl_actor_graph_destroy(p);
  }
  return st;
}

static void test_kernel_error_stops_job(void **state) {
  const char *names[5] = {"src", "k0", "k1", "k2", "sink"};
  for (int spread = 0; spread < 2; spread++)
    for (int which = 0; which < 5; which++) {
      fail_at fa[5];
      sl_status st = run_failing_chain(which, 37, spread, fa, NULL, NULL);
      assert_int_equal(st, SL_EIO);
      char want[64];
      snprintf(want, sizeof want, "actor '%s' (node 0", names[which]);
      if (!strstr(sl_last_error(), want) ||
          !strstr(sl_last_error(), "injected failure at piece 37"))
        fail_msg("message '%s'", sl_last_error());
      /* Nothing downstream got past the failing piece. */
      for (int i = which + 1; i < 5; i++)
        assert_true(atomic_load(&fa[i].fired) <= 37);
      /* Upstream is bounded by the quotas: 2 registers per edge. */
      for (int i = 0; i < which; i++)
        assert_true(atomic_load(&fa[i].fired) <= 38 + 2 * (which - i));
    }
}

static void test_wait_twice_and_stats_after_abort(void **state) {
  fail_at fa[5];
  sl_job *job;
  sl_actor_graph *p;
  assert_int_equal(run_failing_chain(2, 5, true, fa, &job, &p), SL_EIO);
  assert_int_equal(sl_job_wait(job), SL_EIO);
  assert_non_null(strstr(sl_last_error(), "'k1'"));
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_true(s.firings < 500);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- failure of a deferred firing
 * -------------------------------------------- */

typedef struct deferred {
  sl_completion *c;
  bool fail;
} deferred;

static void *complete_later(void *arg) {
  deferred *d = arg;
  sl__sleep_ns(2000000);
  sl_completion *c = d->c;
  bool f = d->fail;
  free(d);
  if (f) {
    sl_act_fail(NULL, SL_ECUDA, "device reported an illegal address");
    sl_completion_done(c, SL_ECUDA);
  } else {
    sl_completion_done(c, SL_OK);
  }
  return NULL;
}

static sl_status act_defer_fail_at_3(sl_act *a) {
  deferred *d = malloc(sizeof *d);
  if (!d) return SL_ENOMEM;
  d->c = sl_act_defer(a);
  d->fail = a->piece == 3;
  pthread_t t;
  if (pthread_create(&t, NULL, complete_later, d) != 0) return SL_EINTERNAL;
  pthread_detach(t);
  return SL_OK;
}

static void test_async_failure(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id s = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 10);
  sl_actor_id g = add_actor(p, "gpu_op", SL_ACTOR_KERNEL, 0, 1, 0,
                            act_defer_fail_at_3, NULL, 0);
  connect_to(p, add_out(p, s, 2, 8), g);
  connect_to(p, add_out(p, g, 2, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 2, 0, NULL, NULL, 0));
  assert_int_equal(run_plan(p, NULL, NULL), SL_ECUDA);
  assert_non_null(strstr(sl_last_error(), "actor 'gpu_op'"));
  assert_non_null(strstr(sl_last_error(), "illegal address"));
  sl_actor_graph_destroy(p);
}

/* An act that defers and then fails: the job aborts at once, and waiting
 * still waits for the completion that is due. */
static sl_status act_defer_then_fail(sl_act *a) {
  deferred *d = malloc(sizeof *d);
  if (!d) return SL_ENOMEM;
  d->c = sl_act_defer(a);
  d->fail = false;
  pthread_t t;
  if (pthread_create(&t, NULL, complete_later, d) != 0) return SL_EINTERNAL;
  pthread_detach(t);
  return sl_act_fail(a, SL_EINVAL, "bad launch");
}

static void test_defer_then_fail(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id s = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 10);
  sl_actor_id g = add_actor(p, "launcher", SL_ACTOR_KERNEL, 0, 1, 0,
                            act_defer_then_fail, NULL, 0);
  connect_to(p, add_out(p, s, 2, 8), g);
  connect_to(p, add_out(p, g, 2, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 2, 0, NULL, NULL, 0));
  assert_int_equal(run_plan(p, NULL, NULL), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "'launcher'"));
  assert_non_null(strstr(sl_last_error(), "bad launch"));
  sl_actor_graph_destroy(p);
}

/* ---- abort from outside
 * ------------------------------------------------------ */

typedef struct aborter {
  sl_job *job;
  _Atomic int64_t *fired;
} aborter;

static void *abort_soon(void *arg) {
  aborter *a = arg;
  while (atomic_load(a->fired) < 1000)
    sched_yield();
  sl_job_abort(a->job, SL_ETIMEOUT);
  return NULL;
}

static sl_status act_count(sl_act *a) {
  atomic_fetch_add((_Atomic int64_t *)a->ctx, 1);
  return SL_OK;
}

static void test_abort_from_outside(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  _Atomic int64_t fired = 0;
  sl_actor_id s =
      add_actor(p, "endless", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, INT64_MAX);
  sl_actor_id k =
      add_actor(p, "k", SL_ACTOR_SINK, 0, 1, 0, act_count, &fired, 0);
  connect_to(p, add_out(p, s, 2, 8), k);
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  aborter ab = {job, &fired};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, abort_soon, &ab), 0);
  assert_int_equal(sl_job_run(job), SL_ETIMEOUT);
  assert_non_null(strstr(sl_last_error(), "aborted by the caller"));
  pthread_join(t, NULL);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- an error on another node
 * ------------------------------------------------- */

static void test_error_on_other_node(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  fail_at fa = {.piece = 20, .st = SL_EMISMATCH};
  sl_actor_id s =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 100);
  sl_actor_id k = add_actor(p, "remote_k", SL_ACTOR_KERNEL, 1, 0, 0,
                            act_maybe_fail, &fa, 0);
  sl_actor_id z = add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, NULL, NULL, 0);
  connect_to(p, add_out(p, s, 2, 8), k);
  connect_to(p, add_out(p, k, 2, 8), z);
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < 2; n++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = n, .transport = sl_loopback_transport(lb));
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  for (int n = 0; n < 2; n++) {
    assert_int_equal(sl_job_wait(jobs[n]), SL_EMISMATCH);
    if (!strstr(sl_last_error(), "actor 'remote_k' (node 1"))
      fail_msg("node %d: '%s'", n, sl_last_error());
  }
  assert_int_equal(sl_job_wait(jobs[1]), SL_EMISMATCH);
  assert_non_null(strstr(sl_last_error(), "injected failure at piece 20"));
  assert_int_equal(sl_job_wait(jobs[0]), SL_EMISMATCH);
  assert_non_null(strstr(sl_last_error(), "reported by node 1"));
  for (int n = 0; n < 2; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_error_stops_job),
      cmocka_unit_test(test_wait_twice_and_stats_after_abort),
      cmocka_unit_test(test_async_failure),
      cmocka_unit_test(test_defer_then_fail),
      cmocka_unit_test(test_abort_from_outside),
      cmocka_unit_test(test_error_on_other_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
