/* The embedded session's API: create (compile, lower, build, start one
 * long-lived job), feed, run (release ticks, wait for the steps), fetch
 * (assemble the logical value from staged shards), finish, destroy, and
 * plan dumps. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sbp_int.h"
#include "session_int.h"

static const char *env_or(const char *v, const char *env) {
  if (v) return v;
  const char *e = getenv(env);
  return e && e[0] ? e : NULL;
}

sl_plan_format sl_plan_format_for_path(const char *path) {
  size_t n = path ? strlen(path) : 0;
  if (n >= 3 && strcmp(path + n - 3, ".pb") == 0) return SL_PLAN_PROTOBUF;
  if (n >= 4 && strcmp(path + n - 4, ".dot") == 0) return SL_PLAN_DOT;
  return SL_PLAN_TEXT;
}

static sl_status check_format(sl_plan_format f) {
  if ((int)f < SL_PLAN_TEXT || f > SL_PLAN_MEMORY)
    return sl__fail(SL_EINVAL, "plan: unknown format %d", (int)f);
  return SL_OK;
}

sl_status sl_graph_write_plan(sl_graph *g, sl_plan_format format,
                              const char *path) {
  if (!g || !path) return sl__fail(SL_EINVAL, "plan: NULL argument");
  SL_CHECK(check_format(format));
  SL_CHECK(sl__graph_compile(g));
  sl__pplan *pp = NULL;
  SL_CHECK(sl__lower(g, &pp));
  sl_status st = sl__pplan_write_file(pp, (int)format, -1, path);
  sl__pplan_destroy(pp);
  return st;
}

sl_status sl_plan_file_convert(const char *pb_path, sl_plan_format format,
                               const char *out_path) {
  return sl_plan_file_convert_node(pb_path, format, -1, out_path);
}

sl_status sl_plan_file_convert_node(const char *pb_path, sl_plan_format format,
                                    int node, const char *out_path) {
  if (!pb_path || !out_path) return sl__fail(SL_EINVAL, "plan: NULL argument");
  SL_CHECK(check_format(format));
  sl__pplan *pp = NULL;
  SL_CHECK(sl__pplan_read_file(pb_path, &pp));
  sl_status st = sl__pplan_write_file(pp, (int)format, node, out_path);
  sl__pplan_destroy(pp);
  return st;
}

static sl_status simulate(const sl__pplan *pp, const sl_sim_config *cfg,
                          sl_simulation *out, const char *report_path) {
  sl_sim_config c = sl_sim_config_default();
  if (cfg)
    SL_CHECK(
        sl__config_copy(&c, sizeof c, cfg, "sl_sim_config", "SL_SIM_CONFIG"));
  FILE *f = NULL;
  if (report_path) {
    f = strcmp(report_path, "-") == 0 ? stdout : fopen(report_path, "w");
    if (!f)
      return sl__fail(SL_EIO, "simulate: '%s': %s", report_path,
                      strerror(errno));
  }
  sl_status st = sl__pplan_simulate(pp, &c, out, f);
  if (f && f != stdout && fclose(f) != 0 && st == SL_OK)
    st = sl__fail(SL_EIO, "simulate: writing '%s' failed", report_path);
  if (f == stdout) fflush(stdout);
  return st;
}

/* The whole job's plan: a remote program runs only its part of it. */
static const sl__pplan *whole_plan(const sl_session *s) {
  return s->whole ? s->whole : s->pp;
}

sl_status sl_session_simulate(const sl_session *s, const sl_sim_config *cfg,
                              sl_simulation *out, const char *report_path) {
  if (!s || !out) return sl__fail(SL_EINVAL, "simulate: NULL argument");
  return simulate(whole_plan(s), cfg, out, report_path);
}

sl_status sl_plan_file_simulate(const char *pb_path, const sl_sim_config *cfg,
                                sl_simulation *out, const char *report_path) {
  if (!pb_path || !out) return sl__fail(SL_EINVAL, "simulate: NULL argument");
  sl__pplan *pp = NULL;
  SL_CHECK(sl__pplan_read_file(pb_path, &pp));
  sl_status st = simulate(pp, cfg, out, report_path);
  sl__pplan_destroy(pp);
  return st;
}

sl_status sl_session_write_plan(const sl_session *s, sl_plan_format format,
                                const char *path) {
  if (!s || !path) return sl__fail(SL_EINVAL, "plan: NULL argument");
  SL_CHECK(check_format(format));
  return sl__pplan_write_file(whole_plan(s), (int)format, -1, path);
}

/* ---- create ----------------------------------------------------------------
 */

static sl_status check_devices(const sl_session *s) {
  if (s->remote) return SL_OK; /* remote.c checks the nodes */
  if (s->pp->machines != 1)
    return sl__fail(SL_EUNSUPPORTED,
                    "session: the graph spans %u nodes; the embedded session "
                    "runs node 0 only",
                    s->pp->machines);
  for (int32_t i = 0; i < s->pp->n_tasks; i++)
    if (s->pp->tasks[i].machine != 0)
      return sl__fail(SL_EUNSUPPORTED,
                      "session: task '%s' is on node %u; the embedded session "
                      "runs node 0 only",
                      s->pp->tasks[i].name, s->pp->tasks[i].machine);
  return SL_OK;
}

void sl_session_destroy(sl_session *s);

sl_status sl__session_start_job(sl_session *s) {
  sl_job_config jc = sl_job_config_default();
  jc.node = 0;
  jc.hang_timeout_ms = s->cfg.hang_timeout_ms;
  jc.trace_path = s->trace_path ? s->trace_path : "";
  jc.device_name = sl__dev_name; /* "cuda:1" in messages, traces */
  jc.transport = (sl_transport){&sl__driver_transport, s};
  sl__session_job_memory(s, &jc);
  sl__session_job_spin(s, &jc);
  SL_CHECK(sl_job_create(s->plan, &jc, &s->job));
  return sl_job_start(s->job);
}

sl_status sl_session_create(sl_graph *g, const sl_session_config *cfg,
                            sl_session **out) {
  if (out) *out = NULL;
  if (!g || !out) return sl__fail(SL_EINVAL, "session: NULL argument");
  sl_session_config c = sl_session_config_default();
  if (cfg)
    SL_CHECK(sl__config_copy(&c, sizeof c, cfg, "sl_session_config",
                             "SL_SESSION_CONFIG"));
  if (c.kind != SL_SESSION_LOCAL && c.kind != SL_SESSION_REMOTE)
    return sl__fail(SL_EINVAL, "session: unknown kind %d", (int)c.kind);
  SL_CHECK(sl__session_cpu_config_check(&c));
  SL_CHECK(sl__graph_compile(g));
  sl_session *s;
  if (SL_NEW(s) != SL_OK) return SL_ENOMEM;
  s->cfg = c;
  pthread_mutex_init(&s->lock, NULL);
  sl_status st = sl__cond_init(&s->cond);
  if (st != SL_OK) {
    pthread_mutex_destroy(&s->lock);
    sl__free(s);
    return st;
  }
  atomic_init(&s->released, 0);
  atomic_init(&s->failed, SL_OK);
  s->held_abort.piece = -1;
  atomic_init(&s->waiting, false);
  atomic_init(&s->driver_msgs, 0);
  for (int i = 0; i < SL__STEP_RING; i++)
    atomic_init(&s->ring[i], 0);
  s->remote = sl__remote_wanted(&c);
  SL_CHECK_GOTO(sl__lower(g, &s->pp), st, fail);
  SL_CHECK_GOTO(check_devices(s), st, fail);
  const char *dump = env_or(c.plan_dump_path, "SLUICE_PLAN_DUMP");
  if (dump)
    SL_CHECK_GOTO(sl__pplan_write_file(
                      s->pp, (int)sl_plan_format_for_path(dump), -1, dump),
                  st, fail);
  const char *trace = env_or(c.trace_path, "SLUICE_TRACE");
  if (trace && !(s->trace_path = sl__strdup(trace))) {
    st = SL_ENOMEM;
    goto fail;
  }
  if (s->remote) {
    SL_CHECK_GOTO(sl__session_open_files(s), st, fail); /* refuses */
    SL_CHECK_GOTO(sl__remote_start(s), st, fail);
    s->started = true;
    *out = s;
    return SL_OK;
  }
  SL_CHECK_GOTO(sl__session_open_files(s), st, fail);
  SL_CHECK_GOTO(sl__session_build(s), st, fail);
  if (s->pp->n_tasks == 0) { /* an empty graph: nothing to run */
    s->started = true;
    *out = s;
    return SL_OK;
  }
  SL_CHECK_GOTO(sl__session_start_job(s), st, fail);
  sl__session_close_files(s);
  s->started = true;
  *out = s;
  return SL_OK;
fail:
  sl__fail_context(st, "session: ");
  sl_session_destroy(s);
  return st;
}

/* ---- feed, run, fetch ---------------------------------------------------- */

/* Joins the job: its status, with the message in sl_last_error(). */
static sl_status job_wait(sl_session *s) {
  if (s->remote) return sl__remote_wait(s);
  return sl_job_wait(s->job);
}

static sl_status refuse_after_failure(sl_session *s, const char *what) {
  sl_status st = (sl_status)atomic_load(&s->failed);
  if (st != SL_OK || s->waited) {
    if (!s->waited) {
      /* The job stopped: join it to get its message. */
      s->final = job_wait(s);
      snprintf(s->errmsg, sizeof s->errmsg, "%s", sl_last_error());
      s->waited = true;
    }
    if (s->final != SL_OK)
      return sl__fail(SL_ESTATE, "session: %s after the session failed: %s",
                      what, s->errmsg);
    return sl__fail(SL_ESTATE, "session: %s after sl_session_finish", what);
  }
  return SL_OK;
}

static const feed_rt *feed_named(const sl_session *s, const char *name) {
  for (int32_t i = 0; i < s->n_feeds; i++)
    if (strcmp(s->feeds[i].name, name) == 0) return &s->feeds[i];
  return NULL;
}

static fetch_rt *fetch_named(const sl_session *s, const char *name) {
  for (int32_t i = 0; i < s->n_fetches; i++)
    if (strcmp(s->fetches[i].name, name) == 0) return &s->fetches[i];
  return NULL;
}

/* After the job failed: joins it and returns its status and message. */
static sl_status failure(sl_session *s) {
  if (!s->waited) {
    s->final = job_wait(s);
    if (s->final == SL_OK) s->final = (sl_status)atomic_load(&s->failed);
    snprintf(s->errmsg, sizeof s->errmsg, "%s", sl_last_error());
    s->waited = true;
  }
  return sl__fail(s->final, "%s", s->errmsg);
}

/* A step failed: the failure's status and message, after rolling the
 * step back when possible (state.c). */
static sl_status run_failed(sl_session *s) {
  failure(s);
  sl_status st = s->final;
  char why[sizeof s->errmsg];
  snprintf(why, sizeof why, "%s", s->errmsg);
  int64_t step = s->base + s->completed;
  sl_status rb = sl__session_roll_back(s);
  if (rb == SL_OK) {
    s->steps = step;
    return sl__fail(st, "%s; step %lld was rolled back", why, (long long)step);
  }
  snprintf(s->errmsg, sizeof s->errmsg,
           "%.900s; step %lld could not be rolled back: %.400s", why,
           (long long)step, sl_last_error());
  s->final = st;
  atomic_store(&s->failed, st);
  return sl__fail(st, "%s", s->errmsg);
}

/* Whether steps the program started are not known to be complete: a
 * session that counts none (nothing fed or fetched over daemons, an empty
 * plan) never knows, and never waits. */
static bool steps_owed(sl_session *s) {
  if (s->n_counted == 0) return false;
  pthread_mutex_lock(&s->lock);
  bool owed = s->completed < s->steps - s->base;
  pthread_mutex_unlock(&s->lock);
  return owed;
}

/* Releases the job's steps through `target` as the step window lets, and
 * with `done` also waits until they are complete. False when the job
 * failed. */
static bool advance(sl_session *s, int64_t target, bool done) {
  atomic_store(&s->waiting, true);
  pthread_mutex_lock(&s->lock);
  for (;;) {
    if (atomic_load(&s->failed) != SL_OK || s->completed >= target) break;
    if (s->n_counted == 0) {
      /* Remote, nothing fed or fetched: release the steps, wait for none. */
      if (s->remote) {
        atomic_store(&s->released, target);
        pthread_mutex_unlock(&s->lock);
        sl__remote_pump(s);
        pthread_mutex_lock(&s->lock);
      }
      break;
    }
    int64_t rel = SL_MIN(target, s->completed + SL__STEP_WINDOW);
    if (rel > atomic_load(&s->released)) {
      atomic_store(&s->released, rel);
      pthread_mutex_unlock(&s->lock);
      if (s->remote)
        sl__remote_pump(s);
      else
        sl__driver_pump(s);
      pthread_mutex_lock(&s->lock);
      continue;
    }
    if (!done && rel == target) break;
    /* Woken when the window has room for more steps, or they are done. */
    s->wake_completed =
        rel < target ? atomic_load(&s->released) - SL__STEP_WINDOW + 1 : target;
    pthread_cond_wait(&s->cond, &s->lock);
    s->wake_completed = 0;
  }
  pthread_mutex_unlock(&s->lock);
  atomic_store(&s->waiting, false);
  return atomic_load(&s->failed) == SL_OK;
}

/* Whether a step the program started failed and was not yet reported:
 * the next call that waits reports it (run_failed), rolled back. */
static bool failed_unreported(sl_session *s) {
  return atomic_load(&s->failed) != SL_OK && steps_owed(s);
}

sl_status sl__session_settle(sl_session *s) {
  if (!steps_owed(s)) return SL_OK;
  if (!advance(s, s->steps - s->base, true)) return run_failed(s);
  return SL_OK;
}

/* Waits until the steps started have read input f: each reads the value
 * fed before it was started, at its start (feed tasks read only the
 * tick). False when the job failed first. */
static bool feed_read(sl_session *s, feed_rt *f) {
  int64_t want = (int64_t)f->n_readers * (s->steps - s->base);
  if (atomic_load(&f->reads) >= want) return true;
  atomic_store(&s->waiting, true);
  pthread_mutex_lock(&s->lock);
  atomic_fetch_add(&s->feed_waiters, 1);
  s->wake_completed = INT64_MAX; /* the feed actors wake it */
  while (atomic_load(&f->reads) < want && atomic_load(&s->failed) == SL_OK)
    pthread_cond_wait(&s->cond, &s->lock);
  s->wake_completed = 0;
  atomic_fetch_sub(&s->feed_waiters, 1);
  pthread_mutex_unlock(&s->lock);
  atomic_store(&s->waiting, false);
  return atomic_load(&s->failed) == SL_OK;
}

sl_status sl_session_feed(sl_session *s, const char *name, const void *data,
                          size_t bytes) {
  if (!s || !name) return sl__fail(SL_EINVAL, "feed: NULL argument");
  feed_rt *f = (feed_rt *)feed_named(s, name);
  if (!f)
    return sl__fail(SL_ENOTFOUND, "feed: the graph has no input '%s'", name);
  if (bytes != f->bytes) {
    char shape[128];
    sl_shape_print(&f->meta.shape, shape, sizeof shape);
    return sl__fail(
        SL_EINVAL, "feed of input '%s': %zu bytes, the input needs %zu (%s %s)",
        name, bytes, f->bytes, sl_dtype_name(f->meta.dtype), shape);
  }
  if (bytes && !data)
    return sl__fail(SL_EINVAL, "feed of input '%s': NULL data", name);
  if (failed_unreported(s)) return run_failed(s);
  SL_CHECK(refuse_after_failure(s, "feed"));
  if (!feed_read(s, f)) return run_failed(s);
  if (bytes) memcpy(f->data, data, bytes);
  f->fed = true;
  return SL_OK;
}

static sl_status start_steps(sl_session *s, int64_t steps, const char *what) {
  if (!s) return sl__fail(SL_EINVAL, "%s: NULL session", what);
  if (steps < 1)
    return sl__fail(SL_EINVAL, "%s: %lld steps", what, (long long)steps);
  /* A step started earlier failed: say so now, rolled back. */
  if (failed_unreported(s)) return run_failed(s);
  SL_CHECK(refuse_after_failure(s, what));
  for (int32_t i = 0; i < s->n_feeds; i++)
    if (!s->feeds[i].fed)
      return sl__fail(SL_ESTATE, "%s: input '%s' was never fed", what,
                      s->feeds[i].name);
  SL_CHECK(sl__session_apply_writes(s));
  /* The job counts its own steps (state.c restarts it at step base). */
  int64_t target = s->steps - s->base + steps;
  s->steps += steps;
  if (!advance(s, target, false)) return run_failed(s);
  return SL_OK;
}

sl_status sl_session_start(sl_session *s, int64_t steps) {
  return start_steps(s, steps, "start");
}

sl_status sl_session_wait(sl_session *s) {
  if (!s) return sl__fail(SL_EINVAL, "wait: NULL session");
  if (atomic_load(&s->failed) != SL_OK && !steps_owed(s))
    return refuse_after_failure(s, "wait");
  return sl__session_settle(s);
}

sl_status sl_session_run(sl_session *s, int64_t steps) {
  SL_CHECK(start_steps(s, steps, "run"));
  return sl__session_settle(s);
}

int64_t sl_session_steps(const sl_session *s) { return s ? s->steps : 0; }

sl_status sl_session_fetch_info(const sl_session *s, const char *name,
                                sl_shape *shape, sl_dtype *dtype) {
  if (!s || !name) return sl__fail(SL_EINVAL, "fetch: NULL argument");
  const fetch_rt *f = fetch_named(s, name);
  if (!f)
    return sl__fail(SL_ENOTFOUND, "fetch: the graph has no fetch '%s'", name);
  if (shape) *shape = f->meta.shape;
  if (dtype) *dtype = f->meta.dtype;
  return SL_OK;
}

/* A fetch after the job failed: the failure of a step started and not yet
 * reported, else SL_ESTATE with the failure. */
static sl_status fetch_failed(sl_session *s, const char *name) {
  if (steps_owed(s)) return run_failed(s);
  failure(s);
  return sl__fail(SL_ESTATE, "fetch '%s' after the session failed: %s", name,
                  s->errmsg);
}

/* The value of `step` (counted as sl_session_steps counts) is staged by
 * the fetch actors of job piece step - base, f->depth pieces deep: only
 * the last f->depth steps started can still be fetched. */
sl_status sl_session_fetch_step(sl_session *s, const char *name, int64_t step,
                                void *data, size_t bytes) {
  if (!s || !name) return sl__fail(SL_EINVAL, "fetch: NULL argument");
  fetch_rt *f = fetch_named(s, name);
  if (!f)
    return sl__fail(SL_ENOTFOUND, "fetch: the graph has no fetch '%s'", name);
  if (bytes != f->bytes)
    return sl__fail(SL_EINVAL, "fetch '%s': %zu bytes, the value has %zu", name,
                    bytes, f->bytes);
  if (bytes && !data) return sl__fail(SL_EINVAL, "fetch '%s': NULL data", name);
  if (atomic_load(&s->failed) != SL_OK) return fetch_failed(s, name);
  int64_t started = s->steps - s->base; /* steps of the current job */
  if (started == 0)
    return sl__fail(SL_ESTATE, "fetch '%s': no step has run%s", name,
                    s->base ? " since the session restarted" : "");
  if (step >= s->steps)
    return sl__fail(SL_EINVAL,
                    "fetch '%s': step %lld was not started (%lld steps were)",
                    name, (long long)step, (long long)s->steps);
  int64_t piece = step - s->base;
  if (piece < 0)
    return sl__fail(SL_EINVAL,
                    "fetch '%s': step %lld ran before the session restarted "
                    "at step %lld",
                    name, (long long)step, (long long)s->base);
  if (piece < started - f->depth)
    return sl__fail(SL_EINVAL,
                    "fetch '%s': step %lld's value is gone: only the last %d "
                    "steps started (%lld to %lld) can be fetched "
                    "(sl_session_config.fetch_depth)",
                    name, (long long)step, f->depth,
                    (long long)(s->steps - f->depth),
                    (long long)(s->steps - 1));
  /* A variable's pieces are its versions: after step k, version k + 1. */
  int64_t want = f->of_variable ? piece + 1 : piece;
  bool ok = true;
  atomic_store(&s->waiting, true);
  pthread_mutex_lock(&s->lock);
  for (int r = 0; r < f->n_ranks; r++) {
    int at = sl__fetch_at(f, want, r);
    while (f->staged[at] < want && atomic_load(&s->failed) == SL_OK &&
           !s->waited) {
      s->fetch_waiters++;
      s->fetch_want = want;
      s->wake_completed = INT64_MAX; /* the fetch actors wake it */
      pthread_cond_wait(&s->cond, &s->lock);
      s->wake_completed = 0;
      s->fetch_waiters--;
    }
    if (f->staged[at] != want) ok = false;
  }
  pthread_mutex_unlock(&s->lock);
  atomic_store(&s->waiting, false);
  if (atomic_load(&s->failed) != SL_OK) return fetch_failed(s, name);
  if (!ok)
    return sl__fail(SL_EINTERNAL, "fetch '%s': step %lld's value never arrived",
                    name, (long long)step);
  /* Every element of the logical value is held by exactly one fetch rank,
   * or, for partial values, by every member of its partial group: reduce
   * those in rank order from the identity. */
  int nd = f->meta.shape.ndim;
  int64_t numel = sl_shape_numel(&f->meta.shape);
  if (f->partial) sl__elem_fill_identity(f->meta.dtype, f->reduce, data, numel);
  int64_t zero[SL_MAX_DIMS] = {0};
  for (int r = 0; r < f->n_ranks; r++) {
    const sl_slice *sl = &f->slices[r];
    sl__box_move(f->meta.dtype, nd, data, f->meta.shape.dims, sl->start,
                 f->stage[sl__fetch_at(f, want, r)], sl->extent, zero,
                 sl->extent, f->partial, f->reduce);
  }
  return SL_OK;
}

sl_status sl_session_fetch(sl_session *s, const char *name, void *data,
                           size_t bytes) {
  return sl_session_fetch_step(s, name, s ? s->steps - 1 : 0, data, bytes);
}

/* ---- finish, stats, destroy ---------------------------------------------- */

/* The job writes "<stem>.node0<ext>" because the driver counts as a node;
 * the program asked for the path itself. */
static void rename_trace(const sl_session *s) {
  if (!s->trace_path) return;
  const char *tp = s->trace_path;
  size_t n = strlen(tp) + 32;
  char *got = sl__malloc(n);
  if (!got) return;
  const char *dot = strrchr(tp, '.'), *slash = strrchr(tp, '/');
  if (dot && slash && dot < slash) dot = NULL;
  if (dot)
    snprintf(got, n, "%.*s.node0%s", (int)(dot - tp), tp, dot);
  else
    snprintf(got, n, "%s.node0", tp);
  if (rename(got, tp) != 0 && errno != ENOENT)
    SL_WARN("session: trace '%s' -> '%s': %s", got, tp, strerror(errno));
  sl__free(got);
}

static void collect_stats(sl_session *s) {
  sl_session_stats *o = &s->stats;
  if (!s->job) return;
  sl_job_stats js;
  if (sl_job_get_stats(s->job, &js) == SL_OK) {
    o->threads = js.threads;
    o->actors = js.actors;
    o->registers = js.registers;
    o->register_bytes = js.register_bytes;
    o->firings = js.firings;
    o->in_flight = js.in_flight;
    o->messages_left = js.messages_left;
    o->run_ms = js.run_ms;
  }
  for (int32_t r = 0; r < s->pp->n_regsts; r++) {
    const sl__regst *g = &s->pp->regsts[r];
    if (s->pp->tasks[g->producer].kind == SL__TASK_TICK) continue;
    sl_regst_stats rs;
    if (sl_job_get_regst_stats(s->job, s->actor_desc[r], &rs) == SL_OK &&
        rs.peak_in_flight > rs.count)
      o->over_quota++;
  }
}

sl_status sl_session_finish(sl_session *s) {
  if (!s) return sl__fail(SL_EINVAL, "finish: NULL session");
  if (s->finished) {
    if (s->final != SL_OK) return sl__fail(s->final, "%s", s->errmsg);
    return SL_OK;
  }
  if (!s->started)
    return sl__fail(SL_ESTATE, "finish: the session never started");
  if (!s->waited && s->job) {
    if (steps_owed(s)) advance(s, s->steps - s->base, true); /* started */
    atomic_store(&s->waiting, true);
    if (atomic_load(&s->failed) == SL_OK) {
      if (s->remote)
        sl__remote_end(s);
      else
        sl__driver_end(s);
    }
    s->final = job_wait(s);
    if (s->final == SL_OK) s->final = (sl_status)atomic_load(&s->failed);
    snprintf(s->errmsg, sizeof s->errmsg, "%s", sl_last_error());
    s->waited = true;
    atomic_store(&s->waiting, false);
  }
  s->finished = true;
  /* Wake fetches waiting for pieces that will not come. */
  pthread_mutex_lock(&s->lock);
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  collect_stats(s);
  if (!s->remote) {
    rename_trace(s);
  } else if (s->job) {
    sl_status tst = sl__remote_traces(s);
    if (tst != SL_OK && s->final == SL_OK) {
      s->final = tst;
      snprintf(s->errmsg, sizeof s->errmsg, "%s", sl_last_error());
    }
  }
  if (s->final != SL_OK) return sl__fail(s->final, "%s", s->errmsg);
  return SL_OK;
}

sl_status sl_session_get_stats(const sl_session *s, sl_session_stats *out) {
  if (!s || !out) return sl__fail(SL_EINVAL, "stats: NULL argument");
  *out = s->stats;
  out->steps = s->steps;
  out->devices = (uint32_t)s->n_devices;
  out->cpu_threads = s->n_cpu_teams ? (uint32_t)s->cpu_threads : 0;
  out->cpu_pinned = s->n_cpu_teams && s->cpu_pinned;
  out->spin_us = s->spin_us;
  if (s->comm) {
    sl__comm_stats cs;
    sl__comm_get_stats(s->comm, &cs);
    out->collective_rounds_direct = cs.rounds_direct;
    out->collective_rounds_parallel = cs.rounds_parallel;
  }
  return SL_OK;
}

int32_t sl_session_memory_device_count(const sl_session *s) {
  return s && s->pp ? whole_plan(s)->n_mem : 0;
}

sl_status sl_session_get_memory(const sl_session *s, int32_t device,
                                sl_memory_stats *out) {
  if (!s || !out) return sl__fail(SL_EINVAL, "memory: NULL argument");
  memset(out, 0, sizeof *out);
  const sl__pplan *pp = s->pp ? whole_plan(s) : NULL;
  if (!pp || device < 0 || device >= pp->n_mem)
    return sl__fail(SL_ENOTFOUND, "memory: no device %d (the plan has %d)",
                    (int)device, (int)sl_session_memory_device_count(s));
  const sl__pmem *m = &pp->mem[device];
  sl__pmem_name(pp, device, out->device, sizeof out->device);
  out->allocated = sl__pmem_allocated(m);
  out->peak = m->peak;
  memcpy(out->category, m->category, sizeof out->category);
  out->unshared = m->unshared;
  out->shared_registers = m->n_shared;
  out->control_edges = m->n_ctrl;
  return SL_OK;
}

void sl_session_destroy(sl_session *s) {
  if (!s) return;
  if ((s->bg_save || s->bg_status) && sl_session_save_wait(s) != SL_OK)
    SL_WARN("session: background save: %s", sl_last_error());
  if (s->started && !s->finished) sl_session_finish(s);
  sl__remote_destroy(s);
  sl__remote_release(s); /* the daemons may free what they kept of it */
  sl_job_destroy(s->job);
  sl__remote_free(s);
  sl__comm_destroy(s->comm);
  sl_actor_graph_destroy(s->plan);
  sl__session_free_build(s);
  sl__session_free_state(s);
  sl__pplan_destroy(s->pp);
  sl__pplan_destroy(s->whole);
  sl__free(s->trace_path);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  sl__free(s);
}
