/* Chrome-trace output (open in Perfetto or chrome://tracing): every firing
 * is a complete event, process = node, thread = stream, name = actor,
 * args.piece = the piece, args.pass = the actor's mark (a pipeline pass).
 * A deferred firing spans until its completion, while its stream's thread
 * goes on with other firings, so it goes on a row of its own under the
 * stream's ("cpu:0/compute (deferred)"): on one row the two would overlap
 * without nesting, which the viewers cannot draw.
 * Events are kept per stream thread in memory and written when the job is
 * waited for, so tracing costs a clock read per firing when on and one untaken
 * branch when off. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "actor_int.h"

void sl__trace_record(stream *s, rt_actor *a, int64_t piece, uint64_t t0,
                      uint64_t t1, bool deferred) {
  if (s->n_tev == s->cap_tev) {
    size_t cap = s->cap_tev ? s->cap_tev * 2 : 1024;
    trace_event *e = sl__reallocarray(s->tev, cap, sizeof *e);
    if (!e) {
      s->trace_on = false;
      SL_WARN("trace: out of memory on stream %s; its later firings are "
              "not traced",
              s->name);
      return;
    }
    s->tev = e;
    s->cap_tev = cap;
  }
  s->tev[s->n_tev++] =
      (trace_event){sl_actor_id_index(a->id), deferred, piece, t0, t1};
}

static void put_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static double us_since(uint64_t t, uint64_t origin) {
  return t >= origin ? (double)(t - origin) / 1e3 : 0.0;
}

sl_status sl__trace_write(sl_job *job) {
  FILE *f = fopen(job->trace_path, "w");
  if (!f)
    return sl__fail(SL_EIO, "trace '%s': %s", job->trace_path, strerror(errno));
  fprintf(f, "{\"traceEvents\":[\n");
  fprintf(f,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":0,"
          "\"args\":{\"name\":\"node %u\"}}",
          job->node, job->node);
  for (uint32_t i = 0; i < job->n_streams; i++) {
    const stream *s = &job->streams[i];
    bool deferred = false;
    for (size_t k = 0; k < s->n_tev && !deferred; k++)
      deferred = s->tev[k].deferred;
    for (int row = 0; row < 1 + deferred; row++) {
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,"
              "\"tid\":%u,\"args\":{\"name\":",
              job->node, s->ordinal + (row ? job->n_streams : 0));
      char name[160];
      snprintf(name, sizeof name, "%s%s", s->name, row ? " (deferred)" : "");
      put_json_string(f, name);
      fprintf(f, "}}");
    }
  }
  for (uint32_t i = 0; i < job->n_streams; i++) {
    const stream *s = &job->streams[i];
    for (size_t k = 0; k < s->n_tev; k++) {
      const trace_event *e = &s->tev[k];
      fprintf(f, ",\n{\"name\":");
      put_json_string(f, s->actors[e->actor].pa->d.name);
      double ts = us_since(e->t0, job->t_start);
      double dur = e->t1 >= e->t0 ? (double)(e->t1 - e->t0) / 1e3 : 0.0;
      const char *mark = s->actors[e->actor].pa->mark;
      fprintf(f,
              ",\"cat\":\"actor\",\"ph\":\"X\",\"pid\":%u,\"tid\":%u,"
              "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"piece\":%lld",
              job->node, s->ordinal + (e->deferred ? job->n_streams : 0), ts,
              dur, (long long)e->piece);
      if (mark) {
        fprintf(f, ",\"pass\":");
        put_json_string(f, mark);
      }
      fprintf(f, "}}");
    }
  }
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = true;
  if (bad) return sl__fail(SL_EIO, "trace '%s': write failed", job->trace_path);
  return SL_OK;
}
