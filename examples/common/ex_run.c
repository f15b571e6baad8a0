/* Engines behind one interface, the Chrome trace and per-op profiles. */
#include "ex_run.h"

#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "ex_shard.h"
#include "graph_int.h"

/* The session engine lives in ex_run_session.c, compiled when the tree has
 * include/sluice/session.h (EX_HAVE_SESSION). */
#ifdef EX_HAVE_SESSION
sl_status ex__session_create(sl_graph *g, const char *trace_path, void **out);
void ex__session_destroy(void *s);
sl_status ex__session_feed(void *s, const char *name, const void *data,
                           size_t bytes);
sl_status ex__session_step(void *s);
sl_status ex__session_fetch(void *s, const char *name, void *out, size_t bytes);
sl_status ex__session_memory_print(void *s, FILE *out);
#endif

typedef struct prof_entry {
  const char *kind; /* op name, "boxing", or "step" */
  double ns;
  int64_t calls;
} prof_entry;

struct ex_run {
  sl_graph *g;
  ex_engine engine;
  ex_run_opts opts;
  ex_shard *shard;
  sl__interp *interp;
  void *session;
  FILE *trace;
  bool trace_first;
  uint64_t ranks_seen; /* trace rows used by ranks 0..63 */
  uint64_t t_origin;
  int64_t step;
  prof_entry *prof;
  int nprof, capprof;
};

static const char *const engine_names[] = {"auto", "session", "sharded",
                                           "interp"};

const char *ex_engine_name(ex_engine e) {
  return (unsigned)e < SL_ARRAY_LEN(engine_names) ? engine_names[e] : "?";
}

sl_status ex_engine_parse(const char *text, ex_engine *out) {
  for (size_t i = 0; i < SL_ARRAY_LEN(engine_names); i++)
    if (text && strcmp(text, engine_names[i]) == 0) {
      *out = (ex_engine)i;
      return SL_OK;
    }
  return sl__fail(SL_EINVAL,
                  "unknown engine '%s' (auto, session, sharded, interp)",
                  text ? text : "(null)");
}

bool ex_engine_have_session(void) {
#ifdef EX_HAVE_SESSION
  return true;
#else
  return false;
#endif
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

static void shard_hook(void *ctx, const sl__node *n, int rank, uint64_t t0,
                       uint64_t t1) {
  ex_run *r = ctx;
  const char *kind = n->kind == SL__NODE_BOXING ? "boxing" : n->op->name;
  if (r->opts.profile) prof_add(r, kind, t1 - t0);
  /* Boxing runs every rank at once: shown on a row of its own. */
  trace_event(r, n->name, kind, rank < 0 ? 1000 : rank, t0, t1);
}

/* ---- the engines -------------------------------------------------------- */

sl_status ex_run_create(sl_graph *g, const ex_run_opts *opts, ex_run **out) {
  *out = NULL;
  ex_run *r = calloc(1, sizeof *r);
  if (!r) return sl__fail(SL_ENOMEM, "ex_run: out of memory");
  sl_status st = SL_OK;
  r->g = g;
  if (opts) r->opts = *opts;
  r->engine = r->opts.engine;
  if (r->engine == EX_ENGINE_AUTO)
    r->engine =
        ex_engine_have_session() ? EX_ENGINE_SESSION : EX_ENGINE_SHARDED;
  r->t_origin = sl__now_ns();
  if (r->opts.trace_path && r->engine != EX_ENGINE_SESSION) {
    if (!(r->trace = fopen(r->opts.trace_path, "w"))) {
      st = sl__fail(SL_EIO, "trace '%s': cannot open for writing",
                    r->opts.trace_path);
      goto fail;
    }
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", r->trace);
    r->trace_first = true;
  }
  switch (r->engine) {
  case EX_ENGINE_SHARDED: {
    ex_shard_opts so = {.check_replicas = r->opts.check_replicas,
                        .hook_ctx = r,
                        .out_of_place_updates = r->opts.out_of_place_updates};
    if (r->trace || r->opts.profile) so.hook = shard_hook;
    SL_CHECK_GOTO(ex_shard_create(g, &so, &r->shard), st, fail);
    break;
  }
  case EX_ENGINE_INTERP:
    SL_CHECK_GOTO(sl__graph_compile(g), st, fail);
    SL_CHECK_GOTO(sl__interp_create(g, &r->interp), st, fail);
    break;
  case EX_ENGINE_SESSION:
#ifdef EX_HAVE_SESSION
    SL_CHECK_GOTO(ex__session_create(g, r->opts.trace_path, &r->session), st,
                  fail);
    break;
#else
    st = sl__fail(SL_EUNSUPPORTED,
                  "engine 'session': this build has no embedded session yet "
                  "(use --engine sharded or interp)");
    goto fail;
#endif
  case EX_ENGINE_AUTO: break;
  }
  *out = r;
  return SL_OK;
fail:
  ex_run_destroy(r);
  return st;
}

void ex_run_destroy(ex_run *r) {
  if (!r) return;
  ex_shard_destroy(r->shard);
  sl__interp_destroy(r->interp);
#ifdef EX_HAVE_SESSION
  ex__session_destroy(r->session);
#endif
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
  return r->engine == EX_ENGINE_SESSION ? r->session : NULL;
}

sl_status ex_run_feed(ex_run *r, const char *name, const void *data,
                      size_t bytes) {
  switch (r->engine) {
  case EX_ENGINE_SHARDED: return ex_shard_feed(r->shard, name, data, bytes);
  case EX_ENGINE_INTERP: return sl__interp_feed(r->interp, name, data, bytes);
#ifdef EX_HAVE_SESSION
  case EX_ENGINE_SESSION:
    return ex__session_feed(r->session, name, data, bytes);
#endif
  default: return sl__fail(SL_ESTATE, "ex_run: no engine");
  }
}

sl_status ex_run_step(ex_run *r) {
  uint64_t t0 = sl__now_ns();
  sl_status st;
  switch (r->engine) {
  case EX_ENGINE_SHARDED: st = ex_shard_step(r->shard); break;
  case EX_ENGINE_INTERP: st = sl__interp_step(r->interp); break;
#ifdef EX_HAVE_SESSION
  case EX_ENGINE_SESSION: st = ex__session_step(r->session); break;
#endif
  default: st = sl__fail(SL_ESTATE, "ex_run: no engine"); break;
  }
  uint64_t t1 = sl__now_ns();
  if (r->opts.profile) prof_add(r, "step", t1 - t0);
  trace_event(r, "step", "step", 2000, t0, t1);
  r->step++;
  return st;
}

sl_status ex_run_fetch(ex_run *r, const char *name, void *out, size_t bytes) {
  switch (r->engine) {
  case EX_ENGINE_SHARDED: return ex_shard_fetch(r->shard, name, out, bytes);
  case EX_ENGINE_INTERP: {
    const void *data;
    sl__meta meta;
    SL_CHECK(sl__interp_fetch(r->interp, name, &data, &meta));
    size_t want =
        (size_t)sl_shape_numel(&meta.shape) * sl_dtype_size(meta.dtype);
    if (bytes != want)
      return sl__fail(SL_EINVAL, "fetch '%s': %zu bytes, the value has %zu",
                      name, bytes, want);
    if (bytes) memcpy(out, data, bytes);
    return SL_OK;
  }
#ifdef EX_HAVE_SESSION
  case EX_ENGINE_SESSION:
    return ex__session_fetch(r->session, name, out, bytes);
#endif
  default: return sl__fail(SL_ESTATE, "ex_run: no engine");
  }
}

sl_status ex_run_memory_print(const ex_run *r, FILE *out) {
#ifdef EX_HAVE_SESSION
  if (r->engine == EX_ENGINE_SESSION)
    return ex__session_memory_print(r->session, out);
#endif
  (void)out;
  return sl__fail(SL_EUNSUPPORTED,
                  "--memory reports the session engine's plan; the %s engine "
                  "has none",
                  ex_engine_name(r->engine));
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
  return ex_train_range(r, 0, steps, batch, loss, out, losses, res, NULL, NULL);
}

sl_status ex_train_range(ex_run *r, int64_t first, int64_t last, int64_t batch,
                         const char *loss, FILE *out, float *losses,
                         ex_train_result *res, ex_train_hook hook, void *ctx) {
  int64_t steps = last > first ? last - first : 0;
  uint64_t t_start = 0, hook_ns = 0;
  for (int64_t i = 0; i < steps; i++) {
    int64_t s = first + i;
    if (i == 1 || steps == 1) {
      t_start = sl__now_ns();
      hook_ns = 0;
    }
    sl_status st = ex_run_step(r);
    if (st != SL_OK) return sl__fail_context(st, "step %lld: ", (long long)s);
    float l = 0;
    SL_CHECK(ex_run_fetch(r, loss, &l, sizeof l));
    if (losses) losses[i] = l;
    if (out) {
      fprintf(out, "step %lld loss %.6f\n", (long long)s, (double)l);
      fflush(out);
    }
    if (hook) {
      uint64_t h0 = sl__now_ns();
      SL_CHECK(hook(ctx, s + 1));
      hook_ns += sl__now_ns() - h0;
    }
  }
  uint64_t t_end = sl__now_ns();
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
  fprintf(out,
          "throughput: %.1f samples/s, %.3f ms/step (%d timed steps; layout "
          "%s on %s, engine %s)\n",
          res->samples_per_s, res->ms_per_step, res->timed_steps, layout,
          placement, ex_engine_name(ex_run_engine(r)));
}
