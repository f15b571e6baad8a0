/* Engines behind one interface, the Chrome trace and per-op profiles, on
 * the public API: the session (<sluice/session.h>) and the reference runs
 * (<sluice/reference.h>). */
#include "ex_run.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sluice/sluice.h>

#include "ex_util.h"

typedef struct prof_entry {
  const char *kind; /* op name, "boxing", or "step" */
  double ns;
  int64_t calls;
} prof_entry;

struct ex_run {
  sl_graph *g;
  ex_engine engine;
  ex_run_opts opts;
  sl_reference *ref; /* the sharded and interp engines */
  sl_session *session;
  FILE *trace;
  bool trace_first;
  uint64_t ranks_seen; /* trace rows used by ranks 0..63 */
  uint64_t t_origin;
  int64_t step;
  prof_entry *prof;
  int nprof, capprof;
};

/* The monotonic clock the reference runs' hook reports, in ns. */
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *const engine_names[] = {"auto", "session", "sharded",
                                           "interp"};

const char *ex_engine_name(ex_engine e) {
  return (unsigned)e < EX_ARRAY_LEN(engine_names) ? engine_names[e] : "?";
}

sl_status ex_engine_parse(const char *text, ex_engine *out) {
  for (size_t i = 0; i < EX_ARRAY_LEN(engine_names); i++)
    if (text && strcmp(text, engine_names[i]) == 0) {
      *out = (ex_engine)i;
      return SL_OK;
    }
  return sl_set_error(SL_EINVAL,
                      "unknown engine '%s' (auto, session, sharded, interp)",
                      text ? text : "(null)");
}

/* ---- trace and profile -------------------------------------------------- */

static void prof_add(ex_run *r, const char *kind, uint64_t ns) {
  for (int i = 0; i < r->nprof; i++)
    if (strcmp(r->prof[i].kind, kind) == 0) {
      r->prof[i].ns += (double)ns;
      r->prof[i].calls++;
      return;
    }
  if (r->nprof == r->capprof) {
    int cap = r->capprof ? 2 * r->capprof : 32;
    prof_entry *p = realloc(r->prof, (size_t)cap * sizeof *p);
    if (!p) return; /* a profile is best effort */
    r->prof = p;
    r->capprof = cap;
  }
  r->prof[r->nprof++] = (prof_entry){kind, (double)ns, 1};
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void trace_event(ex_run *r, const char *name, const char *cat, int tid,
                        uint64_t t0, uint64_t t1) {
  if (!r->trace) return;
  if (tid >= 0 && tid < 64) r->ranks_seen |= 1ull << tid;
  fputs(r->trace_first ? "\n" : ",\n", r->trace);
  r->trace_first = false;
  fputs("{\"name\":", r->trace);
  json_string(r->trace, name);
  fputs(",\"cat\":", r->trace);
  json_string(r->trace, cat);
  fprintf(r->trace,
          ",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
          "\"args\":{\"step\":%lld}}",
          tid, (double)(t0 - r->t_origin) / 1e3, (double)(t1 - t0) / 1e3,
          (long long)r->step);
}

static void shard_hook(void *ctx, const char *node, const char *kind, int rank,
                       uint64_t t0, uint64_t t1) {
  ex_run *r = ctx;
  if (r->opts.profile) prof_add(r, kind, t1 - t0);
  /* Boxing runs every rank at once: shown on a row of its own. */
  trace_event(r, node, kind, rank < 0 ? 1000 : rank, t0, t1);
}

/* ---- the engines -------------------------------------------------------- */

sl_status ex_run_create(sl_graph *g, const ex_run_opts *opts, ex_run **out) {
  *out = NULL;
  ex_run *r = calloc(1, sizeof *r);
  if (!r) return sl_set_error(SL_ENOMEM, "ex_run: out of memory");
  sl_status st = SL_OK;
  r->g = g;
  if (opts) r->opts = *opts;
  r->engine = r->opts.engine;
  if (r->engine == EX_ENGINE_AUTO) r->engine = EX_ENGINE_SESSION;
  r->t_origin = now_ns();
  if (r->opts.trace_path && r->engine != EX_ENGINE_SESSION) {
    if (!(r->trace = fopen(r->opts.trace_path, "w"))) {
      st = sl_set_error(SL_EIO, "trace '%s': cannot open for writing",
                        r->opts.trace_path);
      goto fail;
    }
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", r->trace);
    r->trace_first = true;
  }
  if (r->engine == EX_ENGINE_SESSION) {
    sl_session_config cfg =
        SL_SESSION_CONFIG(.trace_path = r->opts.trace_path,
                          .cpu_threads = r->opts.cpu_threads,
                          .fetch_depth = 2 * EX_CHUNK);
    st = sl_session_create(g, &cfg, &r->session);
  } else {
    sl_reference_config cfg =
        SL_REFERENCE_CONFIG(.kind = r->engine == EX_ENGINE_SHARDED
                                        ? SL_REFERENCE_SHARDED
                                        : SL_REFERENCE_LOGICAL,
                            .check_replicas = r->opts.check_replicas,
                            .out_of_place_updates =
                                r->opts.out_of_place_updates,
                            .hook =
                                r->trace || r->opts.profile ? shard_hook : NULL,
                            .hook_ctx = r);
    st = sl_reference_create(g, &cfg, &r->ref);
  }
  if (st != SL_OK) goto fail;
  *out = r;
  return SL_OK;
fail:
  ex_run_destroy(r);
  return st;
}

void ex_run_destroy(ex_run *r) {
  if (!r) return;
  sl_reference_destroy(r->ref);
  sl_session_destroy(r->session);
  if (r->trace) {
    /* Row names: one per rank, then boxing (all ranks at once) and steps. */
    for (int t = 0; t < 64; t++)
      if (r->ranks_seen >> t & 1)
        fprintf(r->trace,
                ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,"
                "\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                t, t);
    if (!r->trace_first)
      fputs(",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":"
            "1000,\"args\":{\"name\":\"boxing (every rank)\"}},\n"
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":2000,"
            "\"args\":{\"name\":\"steps\"}}",
            r->trace);
    fputs("\n]}\n", r->trace);
    fclose(r->trace);
  }
  free(r->prof);
  free(r);
}

ex_engine ex_run_engine(const ex_run *r) { return r->engine; }

bool ex_run_needs(const ex_run *r, const char *prog, bool used,
                  const char *what, ex_engine engine) {
  if (!used || ex_run_engine(r) == engine) return true;
  fprintf(stderr, "%s: %s need%s the %s engine, not %s\n", prog, what,
          strchr(what, ' ') ? "" : "s", ex_engine_name(engine),
          ex_engine_name(ex_run_engine(r)));
  return false;
}

struct sl_session *ex_run_session(const ex_run *r) {
  return r->session;
}

sl_status ex_run_feed(ex_run *r, const char *name, const void *data,
                      size_t bytes) {
  return r->session ? sl_session_feed(r->session, name, data, bytes)
                    : sl_reference_feed(r->ref, name, data, bytes);
}

sl_status ex_run_step(ex_run *r) {
  uint64_t t0 = now_ns();
  sl_status st =
      r->session ? sl_session_run(r->session, 1) : sl_reference_step(r->ref);
  uint64_t t1 = now_ns();
  if (r->opts.profile) prof_add(r, "step", t1 - t0);
  trace_event(r, "step", "step", 2000, t0, t1);
  r->step++;
  return st;
}

sl_status ex_run_fetch(ex_run *r, const char *name, void *out, size_t bytes) {
  return r->session ? sl_session_fetch(r->session, name, out, bytes)
                    : sl_reference_fetch(r->ref, name, out, bytes);
}

sl_status ex_run_memory_print(const ex_run *r, FILE *out) {
  if (!r->session)
    return sl_set_error(SL_EUNSUPPORTED,
                        "--memory reports the session engine's plan; the %s "
                        "engine has none",
                        ex_engine_name(r->engine));
  for (int32_t i = 0; i < sl_session_memory_device_count(r->session); i++) {
    sl_memory_stats m;
    sl_status st = sl_session_get_memory(r->session, i, &m);
    if (st != SL_OK) return st;
    fprintf(out, "memory %s peak %" PRId64 " bytes (", m.device, m.peak);
    for (int c = 0; c < SL_MEMORY_CATEGORIES; c++)
      fprintf(out, "%s%s %" PRId64, c ? ", " : "",
              sl_memory_category_name((sl_memory_category)c), m.category[c]);
    fprintf(out, "); allocated %" PRId64 " bytes\n", m.allocated);
  }
  return SL_OK;
}

static int prof_cmp(const void *a, const void *b) {
  double x = ((const prof_entry *)a)->ns, y = ((const prof_entry *)b)->ns;
  return x < y ? 1 : x > y ? -1 : 0;
}

void ex_run_profile_print(const ex_run *r, FILE *out, int top, int steps) {
  if (!r->nprof || steps < 1) return;
  prof_entry *p = malloc((size_t)r->nprof * sizeof *p);
  if (!p) return;
  memcpy(p, r->prof, (size_t)r->nprof * sizeof *p);
  qsort(p, (size_t)r->nprof, sizeof *p, prof_cmp);
  fprintf(out, "%-28s %10s %12s\n", "op", "calls/step", "ms/step");
  for (int i = 0; i < r->nprof && i < top; i++)
    fprintf(out, "%-28s %10.1f %12.3f\n", p[i].kind, (double)p[i].calls / steps,
            p[i].ns / 1e6 / steps);
  free(p);
}

double ex_run_profile_ms(const ex_run *r, const char *op, int steps) {
  for (int i = 0; i < r->nprof; i++)
    if (strcmp(r->prof[i].kind, op) == 0) return r->prof[i].ns / 1e6 / steps;
  return 0;
}

/* ---- the training loop -------------------------------------------------- */

sl_status ex_train(ex_run *r, int64_t steps, int64_t batch, const char *loss,
                   FILE *out, float *losses, ex_train_result *res) {
  return ex_train_range(r, 0, steps, batch, loss, out, losses, res, NULL, NULL,
                        0);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The index of the first step at or after step index i (of a loop from
 * step `first`) after which the hook runs; steps when none. */
static int64_t next_hook(int64_t first, int64_t i, int64_t steps,
                         ex_train_hook hook, int64_t every) {
  if (!hook || every <= 0) return steps;
  return i + (every - (first + i + 1) % every) % every;
}

sl_status ex_train_range(ex_run *r, int64_t first, int64_t last, int64_t batch,
                         const char *loss, FILE *out, float *losses,
                         ex_train_result *res, ex_train_hook hook, void *ctx,
                         int64_t hook_every) {
  int64_t steps = last > first ? last - first : 0;
  uint64_t t_start = 0, hook_ns = 0;
  /* The session engine runs ahead (sl_session_start): it keeps up to two
   * chunks of steps started and waits for a chunk's last step before
   * reading the chunk's losses, so the program wakes once a chunk and the
   * devices always have the next steps queued. Waking the program every
   * step costs the devices more than the program's work: on a machine
   * whose cores the devices' threads take, it runs on one of them.
   * Never past a step the hook runs after (it wants the session between
   * steps), and step 0 alone (the throughput's clock starts after it);
   * --profile times each step, one at a time. */
  bool ahead = r->session && !r->opts.profile;
  int64_t started = 0, done = 0; /* loop indices started, known complete */
  int64_t base = ahead ? sl_session_steps(r->session) : 0; /* step of i = 0 */
  for (int64_t i = 0; i < steps; i++) {
    int64_t s = first + i;
    if (i == 1 || steps == 1) {
      t_start = now_ns();
      hook_ns = 0;
    }
    sl_status st = SL_OK;
    float l = 0;
    if (!ahead) {
      st = ex_run_step(r);
      if (st == SL_OK) st = ex_run_fetch(r, loss, &l, sizeof l);
    } else {
      if (i >= done) {
        int64_t upto = i == 0 ? 1 : min64(steps, i + 2 * EX_CHUNK);
        upto = min64(upto, next_hook(first, i, steps, hook, hook_every) + 1);
        if (upto > started) {
          st = sl_session_start(r->session, upto - started);
          r->step += upto - started;
          started = upto;
        }
        done = min64(i + EX_CHUNK, started); /* wait for done - 1 */
        if (st == SL_OK)
          st = sl_session_fetch_step(r->session, loss, base + done - 1, &l,
                                     sizeof l);
      }
      if (st == SL_OK)
        st = sl_session_fetch_step(r->session, loss, base + i, &l, sizeof l);
    }
    if (st != SL_OK)
      return sl_add_error_context(st, "step %lld: ", (long long)s);
    if (losses) losses[i] = l;
    if (out) {
      fprintf(out, "step %lld loss %.6f\n", (long long)s, (double)l);
      fflush(out);
    }
    if (next_hook(first, i, steps, hook, hook_every) == i) {
      uint64_t h0 = now_ns();
      EX_CHECK(hook(ctx, s + 1));
      hook_ns += now_ns() - h0;
    }
  }
  uint64_t t_end = now_ns();
  if (res) {
    memset(res, 0, sizeof *res);
    res->timed_steps = steps > 1 ? (int)(steps - 1) : (int)steps;
    if (res->timed_steps > 0 && t_end > t_start + hook_ns) {
      double ms = (double)(t_end - t_start - hook_ns) / 1e6 / res->timed_steps;
      res->ms_per_step = ms;
      res->samples_per_s = (double)batch / (ms / 1e3);
    }
  }
  return SL_OK;
}

void ex_train_print(FILE *out, const ex_train_result *res, const ex_run *r,
                    const char *layout, const char *placement) {
  /* The session engine gives each CPU device its threads: say how many. */
  char threads[48] = "";
  sl_session_stats st;
  if (r->session && sl_session_get_stats(r->session, &st) == SL_OK &&
      st.cpu_threads > 0)
    snprintf(threads, sizeof threads, ", %u thread%s per device%s",
             st.cpu_threads, st.cpu_threads == 1 ? "" : "s",
             st.cpu_pinned ? " (pinned)" : "");
  fprintf(out,
          "throughput: %.1f samples/s, %.3f ms/step (%d timed steps; layout "
          "%s on %s%s, engine %s)\n",
          res->samples_per_s, res->ms_per_step, res->timed_steps, layout,
          placement, threads, ex_engine_name(ex_run_engine(r)));
}
