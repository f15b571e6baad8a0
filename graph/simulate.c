/* The static check of a plan: one step replayed as a discrete-event
 * simulation (DESIGN.md section 7; docs/pipeline.md, "Checking a plan
 * before it runs").
 *
 * Every task is an event on its stream (machine, device, stream), which
 * runs one task at a time in the order tasks become ready; a task is
 * ready once the tasks it reads from — registers, the plan's control
 * edges, the other members of its boxing group — are done. Costs come
 * from a model (matmul FLOPs at a rate, other kernels and copies by the
 * bytes they move, boxing steps by the planner's alpha-beta prediction)
 * or, where given, from a trace of a real run: each task's median firing
 * time (a boxing group's members take their quickest member's: the
 * others' firings include waiting for it). The result: the step's predicted
 * time, each device's busy time and bubble, its planned memory, its order of
 * passes, and a deadlock (tasks that never become ready) named task by task. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/session.h>

#include "lower_int.h"

#define MODEL_GFLOPS 50.0 /* a device's matmul rate, GFLOP/s */
#define MODEL_GBPS 10.0   /* bytes moved by other kernels and copies, GB/s */

/* ---- costs ----------------------------------------------------------------
 */

static int64_t numel_of(const sl__regst *r) {
  return sl_shape_numel(&r->shape);
}

static int64_t task_bytes(const sl__pplan *p, const sl__task *t) {
  int64_t b = 0;
  for (int32_t i = 0; i < t->n_in; i++)
    if (i != t->tick_slot) b += p->regsts[t->in[i]].bytes;
  for (int32_t i = 0; i < t->n_out; i++)
    b += p->regsts[t->out[i]].bytes;
  return b;
}

/* Multiply-adds of a matmul-like task from its shards' shapes: out is
 * [..., m, n] and input 0 holds [..., m, k] (transposed or not). */
static double matmul_flops(const sl__pplan *p, const sl__task *t) {
  if (t->n_in < 2 || t->n_out < 1) return 0;
  const sl__regst *a = &p->regsts[t->in[0]], *o = &p->regsts[t->out[0]];
  int64_t on = numel_of(o),
          n = o->shape.ndim ? o->shape.dims[o->shape.ndim - 1] : 1;
  if (on <= 0 || n <= 0) return 0;
  double rows = (double)on / (double)n; /* batch x m */
  double k = (double)numel_of(a) / rows;
  return 2.0 * (double)on * k;
}

static double model_us(const sl__pplan *p, const sl__task *t,
                       const sl_sim_config *c) {
  const sl__pnode *n =
      t->node >= 0 && t->node < p->n_nodes ? &p->nodes[t->node] : NULL;
  double bytes_us = (double)task_bytes(p, t) / (c->copy_gbps * 1e3);
  switch (t->kind) {
  case SL__TASK_TICK: return 0;
  case SL__TASK_COLL:
  case SL__TASK_XCHG:
    if (n && t->step >= 0 && t->step < n->n_steps)
      return n->steps[t->step].predicted_us;
    return bytes_us;
  case SL__TASK_OP:
    if (n &&
        (strcmp(n->op, "matmul") == 0 || strcmp(n->op, "batch_matmul") == 0))
      return matmul_flops(p, t) / (c->gflops * 1e3) + bytes_us;
    return bytes_us;
  default: return bytes_us;
  }
}

/* Every firing of a Chrome trace written by a session (actor/trace.c: one
 * event per line). */
typedef struct firing {
  char *name;
  int64_t piece;
  int64_t thread; /* pid << 32 | tid */
  double ts, dur;
  double prev_end; /* end of the previous firing on its thread, or -1 */
} firing;

static int by_thread_time(const void *a, const void *b) {
  const firing *x = a, *y = b;
  if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
  return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static int by_name_piece(const void *a, const void *b) {
  const firing *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->piece < y->piece ? -1 : x->piece > y->piece;
}

static double field(const char *line, const char *key) {
  const char *p = strstr(line, key);
  return p ? strtod(p + strlen(key), NULL) : 0;
}

static void free_firings(firing *f, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    free(f[i].name);
  sl__free(f);
}

/* The trace's firings, sorted by name and piece, each with the end of the
 * firing before it on its thread. */
static sl_status read_trace(const char *path, firing **out, int32_t *n_out) {
  *out = NULL;
  *n_out = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return sl__fail(SL_EIO, "simulate: costs '%s': %s", path, strerror(errno));
  int32_t n = 0, cap = 0;
  firing *m = NULL;
  char line[8192];
  sl_status st = SL_OK;
  while (fgets(line, sizeof line, f)) {
    char *nm = strstr(line, "{\"name\":\"");
    if (!nm || !strstr(line, "\"ph\":\"X\"") || !strstr(line, "\"dur\":"))
      continue;
    int64_t pid = (int64_t)field(line, "\"pid\":");
    int64_t tid = (int64_t)field(line, "\"tid\":");
    firing x = {NULL,
                (int64_t)field(line, "\"piece\":"),
                pid << 32 | tid,
                field(line, "\"ts\":"),
                field(line, "\"dur\":"),
                -1};
    nm += 9;
    char *end = strchr(nm, '"');
    if (!end) continue;
    *end = '\0';
    if (n == cap) {
      cap = cap ? 2 * cap : 1024;
      firing *y = sl__reallocarray(m, (size_t)cap, sizeof *m);
      if (!y) {
        st = SL_ENOMEM;
        break;
      }
      m = y;
    }
    if (!(x.name = strdup(nm))) {
      st = SL_ENOMEM;
      break;
    }
    m[n++] = x;
  }
  fclose(f);
  if (st == SL_OK && n == 0)
    st = sl__fail(SL_EINVAL,
                  "simulate: costs '%s' has no firings (a Chrome trace a "
                  "session wrote with SLUICE_TRACE)",
                  path);
  if (st != SL_OK) {
    free_firings(m, n);
    return st;
  }
  qsort(m, (size_t)n, sizeof *m, by_thread_time);
  for (int32_t i = 1; i < n; i++)
    if (m[i].thread == m[i - 1].thread)
      m[i].prev_end = m[i - 1].ts + m[i - 1].dur;
  qsort(m, (size_t)n, sizeof *m, by_name_piece);
  *out = m;
  *n_out = n;
  return SL_OK;
}

/* The firings of task `name`: [*lo, *hi) of f. */
static void firings_of(const firing *f, int32_t n, const char *name,
                       int32_t *lo, int32_t *hi) {
  int32_t a = 0, b = n;
  while (a < b) { /* first >= name */
    int32_t mid = a + (b - a) / 2;
    if (strcmp(f[mid].name, name) < 0)
      a = mid + 1;
    else
      b = mid;
  }
  *lo = a;
  while (a < n && strcmp(f[a].name, name) == 0)
    a++;
  *hi = a;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts it); 0 for none. */
static double median(double *v, int32_t n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, by_double);
  return v[n / 2];
}

/* ---- the simulation -------------------------------------------------------
 */

typedef struct sim {
  const sl__pplan *p;
  double *cost, *ready, *start, *finish;
  bool *woken; /* its latest input came from another stream */
  int32_t *indeg;
  int32_t *off, *to; /* successors, CSR */
  int32_t *heap, n_heap;
} sim;

static bool before(const sim *s, int32_t a, int32_t b) {
  return s->ready[a] < s->ready[b] || (s->ready[a] == s->ready[b] && a < b);
}

static void push(sim *s, int32_t t) {
  int32_t i = s->n_heap++;
  s->heap[i] = t;
  while (i > 0 && before(s, s->heap[i], s->heap[(i - 1) / 2])) {
    int32_t q = (i - 1) / 2, x = s->heap[i];
    s->heap[i] = s->heap[q];
    s->heap[q] = x;
    i = q;
  }
}

static int32_t pop(sim *s) {
  int32_t t = s->heap[0];
  s->heap[0] = s->heap[--s->n_heap];
  for (int32_t i = 0;;) {
    int32_t l = 2 * i + 1, m = i;
    if (l < s->n_heap && before(s, s->heap[l], s->heap[m])) m = l;
    if (l + 1 < s->n_heap && before(s, s->heap[l + 1], s->heap[m])) m = l + 1;
    if (m == i) break;
    int32_t x = s->heap[i];
    s->heap[i] = s->heap[m];
    s->heap[m] = x;
    i = m;
  }
  return t;
}

/* Edges within a step: registers (not a variable's last version), the
 * plan's control edges but the closing ones, and boxing groups. */
static sl_status build_edges(sim *s) {
  const sl__pplan *p = s->p;
  int32_t n = p->n_tasks, *ge = NULL, ng = 0;
  SL_CHECK(sl__schedule_group_edges(p, &ge, &ng));
  for (int pass = 0; pass < 2; pass++) {
    int32_t *fill = pass ? sl__calloc((size_t)n + 1, sizeof *fill) : NULL;
    if (pass && !fill) {
      sl__free(ge);
      return SL_ENOMEM;
    }
#define EDGE(u, v)                                                             \
  do {                                                                         \
    if (pass)                                                                  \
      s->to[s->off[u] + fill[u]++] = (v);                                      \
    else                                                                       \
      s->off[(u) + 1]++;                                                       \
  } while (0)
    for (int32_t r = 0; r < p->n_regsts; r++) {
      const sl__regst *g = &p->regsts[r];
      if (g->initial) continue;
      for (int32_t c = 0; c < g->n_cons; c++)
        if (g->cons[c] != g->producer) EDGE(g->producer, g->cons[c]);
    }
    for (int32_t c = 0; c < p->n_ctrl; c++)
      if (!p->ctrl[c].closing) EDGE(p->ctrl[c].from, p->ctrl[c].to);
    for (int32_t i = 0; i < ng; i++)
      EDGE(ge[2 * i], ge[2 * i + 1]);
#undef EDGE
    if (!pass) {
      for (int32_t t = 0; t < n; t++)
        s->off[t + 1] += s->off[t];
      s->to = sl__calloc((size_t)s->off[n] + 1, sizeof *s->to);
      if (!s->to) {
        sl__free(ge);
        return SL_ENOMEM;
      }
    }
    sl__free(fill);
  }
  sl__free(ge);
  for (int32_t t = 0; t < n; t++)
    for (int32_t e = s->off[t]; e < s->off[t + 1]; e++)
      s->indeg[s->to[e]]++;
  return SL_OK;
}

/* A stream: the tasks of one (machine, device, stream) run one by one. */
typedef struct lane {
  uint32_t machine, device, stream;
  double free_at, busy;
} lane;

/* A collective member's firing only deposits its buffers, whichever
 * stream its actor is on (a CPU device's compute stream): the round's
 * work is the engine's, modelled as the device's collective lane. */
static int32_t lane_of(lane *l, int32_t *nl, const sl__task *t) {
  uint32_t stream =
      t->kind == SL__TASK_COLL ? (uint32_t)SL_STREAM_COLLECTIVE : t->stream;
  for (int32_t i = 0; i < *nl; i++)
    if (l[i].machine == t->machine && l[i].device == t->device &&
        l[i].stream == stream)
      return i;
  l[*nl] = (lane){t->machine, t->device, stream, 0, 0};
  return (*nl)++;
}

/* The tasks that never ran, and one thing each waits for. */
static sl_status report_stuck(const sim *s) {
  const sl__pplan *p = s->p;
  char msg[2048];
  size_t len = (size_t)snprintf(msg, sizeof msg,
                                "simulate: the step deadlocks: no task can "
                                "run and these never do:");
  int shown = 0;
  for (int32_t t = 0; t < p->n_tasks && shown < 6 && len < sizeof msg; t++) {
    if (s->finish[t] >= 0) continue;
    int32_t wait = -1;
    for (int32_t u = 0; u < p->n_tasks && wait < 0; u++) {
      if (s->finish[u] >= 0) continue;
      for (int32_t e = s->off[u]; e < s->off[u + 1]; e++)
        if (s->to[e] == t) wait = u;
    }
    len += (size_t)snprintf(
        msg + len, sizeof msg - len, "%s '%s'%s%s%s", shown ? ";" : "",
        p->tasks[t].name, wait >= 0 ? " waits for '" : "",
        wait >= 0 ? p->tasks[wait].name : "", wait >= 0 ? "'" : "");
    shown++;
  }
  return sl__fail(SL_EINVAL, "%s", msg);
}

static const char *human(double bytes, char *buf, size_t n) {
  if (bytes >= 10.0 * 1024 * 1024)
    snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024.0));
  else if (bytes >= 10.0 * 1024)
    snprintf(buf, n, "%.1f KiB", bytes / 1024.0);
  else
    snprintf(buf, n, "%.0f B", bytes);
  return buf;
}

static int by_start(const void *a, const void *b, void *ctx) {
  const double *start = ctx;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (start[x] != start[y]) return start[x] < start[y] ? -1 : 1;
  return (x > y) - (x < y);
}

static sl_status report_to(const sl__pplan *p, const sl_sim_config *c,
                           const sl_simulation *r, const double *start,
                           const lane *lanes, int32_t nl, FILE *f) {
  fprintf(f, "simulation of one step: %d micro-batch%s", (int)p->micro_batches,
          p->micro_batches == 1 ? "" : "es");
  if (p->micro_batches > 1)
    fprintf(f, ", schedule %s", sl__schedule_name(p->schedule));
  fprintf(f,
          "\ncosts: matmuls at %g GFLOP/s, other kernels and copies at %g "
          "GB/s, boxing steps by the planner's alpha-beta model",
          c->gflops, c->copy_gbps);
  if (c->costs)
    fprintf(f, "; measured for %d of %d tasks (%s)", (int)r->tasks_measured,
            (int)p->n_tasks, c->costs);
  if (r->handoff_us > 0)
    fprintf(f, "; %.1f us from a task's end to another stream's start",
            r->handoff_us);
  fprintf(f, "\npredicted step time: %.3f ms\n\n", r->step_us / 1e3);
  fprintf(f, "%-16s %12s %8s %12s %12s %9s\n", "device", "busy", "bubble",
          "peak", "allocated", "registers");
  int32_t *order = sl__calloc((size_t)p->n_tasks + 1, sizeof *order);
  if (!order) return SL_ENOMEM;
  for (int32_t m = 0; m < p->n_mem; m++) {
    const sl__pmem *pm = &p->mem[m];
    double busy = 0;
    for (int32_t i = 0; i < nl; i++)
      if (lanes[i].machine == pm->machine && lanes[i].device == pm->device &&
          lanes[i].stream == SL_STREAM_COMPUTE)
        busy = lanes[i].busy;
    int32_t regs = 0;
    for (int32_t i = 0; i < p->n_regsts; i++)
      if (p->regsts[i].machine == pm->machine &&
          p->regsts[i].device == pm->device)
        regs += p->regsts[i].count;
    char name[64], pk[32], al[32];
    sl__pmem_name(p, m, name, sizeof name);
    fprintf(f, "%-16s %9.3f ms %7.1f%% %12s %12s %9d\n", name, busy / 1e3,
            r->step_us > 0 ? 100.0 * (1.0 - busy / r->step_us) : 0.0,
            human((double)pm->peak, pk, sizeof pk),
            human((double)sl__pmem_allocated(pm), al, sizeof al), (int)regs);
  }
  if (p->micro_batches > 1) {
    fprintf(f, "\norder of passes (stage, F/B/W, micro-batch) per device:\n");
    for (int32_t m = 0; m < p->n_mem; m++) {
      const sl__pmem *pm = &p->mem[m];
      int32_t k = 0;
      for (int32_t t = 0; t < p->n_tasks; t++) {
        const sl__task *task = &p->tasks[t];
        const sl__pnode *n = task->node >= 0 && task->node < p->n_nodes
                                 ? &p->nodes[task->node]
                                 : NULL;
        if (task->machine == pm->machine && task->device == pm->device &&
            sl__task_in_device_order(task) && n && n->micro >= 0)
          order[k++] = t;
      }
      if (!k) continue;
      qsort_r(order, (size_t)k, sizeof *order, by_start, (void *)start);
      char name[64];
      sl__pmem_name(p, m, name, sizeof name);
      fprintf(f, "  %s:", name);
      char last[32] = "";
      for (int32_t i = 0; i < k; i++) {
        char pass[32];
        sl__pass_label(p, order[i], pass, sizeof pass);
        if (strcmp(pass, last) == 0) continue;
        fprintf(f, " %s", pass);
        memcpy(last, pass, sizeof last);
      }
      fputc('\n', f);
    }
  }
  sl__free(order);
  return ferror(f) ? sl__fail(SL_EIO, "simulate: writing the report failed")
                   : SL_OK;
}

static sl_status group_costs(const sl__pplan *p, double *cost) {
  double *best = sl__calloc((size_t)p->n_colls + 1, sizeof *best);
  if (!best) return SL_ENOMEM;
  for (int32_t c = 0; c < p->n_colls; c++)
    best[c] = INFINITY;
  for (int32_t t = 0; t < p->n_tasks; t++) {
    const sl__task *a = &p->tasks[t];
    if ((a->kind == SL__TASK_COLL || a->kind == SL__TASK_XCHG) &&
        a->coll >= 0 && a->coll < p->n_colls)
      best[a->coll] = fmin(best[a->coll], cost[t]);
  }
  for (int32_t t = 0; t < p->n_tasks; t++) {
    const sl__task *a = &p->tasks[t];
    if ((a->kind == SL__TASK_COLL || a->kind == SL__TASK_XCHG) &&
        a->coll >= 0 && a->coll < p->n_colls)
      cost[t] = best[a->coll];
  }
  sl__free(best);
  return SL_OK;
}

/* The latency from a task finishing on one stream to a task it readies
 * starting on another (a thread's wake-up and the message between them):
 * the median over the trace's firings that waited for a producer on
 * another stream of the same machine — their own stream free and every
 * same-stream producer done before — of start minus that producer's
 * end. */
static sl_status estimate_handoff(const sim *s, const firing *fir,
                                  const int32_t *flo, const int32_t *fhi,
                                  const int32_t *lane_ix, int32_t n_fir,
                                  double *out) {
  const sl__pplan *p = s->p;
  int32_t n = p->n_tasks;
  int32_t *roff = sl__calloc((size_t)n + 2, sizeof *roff);
  int32_t *rto = sl__calloc((size_t)s->off[n] + 1, sizeof *rto);
  double *gaps = sl__calloc((size_t)n_fir + 1, sizeof *gaps);
  sl_status st = SL_ENOMEM;
  if (!roff || !rto || !gaps) goto out;
  for (int32_t e = 0; e < s->off[n]; e++)
    roff[s->to[e] + 1]++;
  for (int32_t t = 0; t < n; t++)
    roff[t + 1] += roff[t];
  for (int32_t t = 0; t < n; t++) /* roff[v] moves to v's end */
    for (int32_t e = s->off[t]; e < s->off[t + 1]; e++)
      rto[roff[s->to[e]]++] = t;
  for (int32_t t = n; t > 0; t--) /* back to starts */
    roff[t] = roff[t - 1];
  roff[0] = 0;
  int32_t ng = 0;
  for (int32_t v = 0; v < n; v++) {
    if (lane_ix[v] < 0) continue;
    for (int32_t i = flo[v]; i < fhi[v]; i++) {
      double cross = -1, same = -1;
      for (int32_t e = roff[v]; e < roff[v + 1]; e++) {
        int32_t u = rto[e];
        if (lane_ix[u] < 0 || p->tasks[u].machine != p->tasks[v].machine)
          continue;
        int32_t a = flo[u], b = fhi[u]; /* u's firing of the same piece */
        while (a < b) {
          int32_t mid = a + (b - a) / 2;
          if (fir[mid].piece < fir[i].piece)
            a = mid + 1;
          else
            b = mid;
        }
        if (a == fhi[u] || fir[a].piece != fir[i].piece) continue;
        double end = fir[a].ts + fir[a].dur;
        if (lane_ix[u] != lane_ix[v])
          cross = SL_MAX(cross, end);
        else
          same = SL_MAX(same, end);
      }
      if (cross >= 0 && cross > same && cross > fir[i].prev_end &&
          fir[i].ts >= cross)
        gaps[ng++] = fir[i].ts - cross;
    }
  }
  *out = median(gaps, ng);
  st = SL_OK;
out:
  sl__free(roff);
  sl__free(rto);
  sl__free(gaps);
  return st;
}

sl_status sl__pplan_simulate(const sl__pplan *p, const sl_sim_config *cfg,
                             sl_simulation *res, FILE *report) {
  sl_sim_config c = cfg ? *cfg : sl_sim_config_default();
  if (!(c.gflops > 0)) c.gflops = MODEL_GFLOPS;
  if (!(c.copy_gbps > 0)) c.copy_gbps = MODEL_GBPS;
  memset(res, 0, sizeof *res);
  int32_t n = p->n_tasks, n_fir = 0, matched = 0;
  firing *fir = NULL;
  if (c.costs) SL_CHECK(read_trace(c.costs, &fir, &n_fir));
  sim s = {.p = p};
  s.cost = sl__calloc((size_t)n + 1, sizeof *s.cost);
  s.ready = sl__calloc((size_t)n + 1, sizeof *s.ready);
  s.start = sl__calloc((size_t)n + 1, sizeof *s.start);
  s.finish = sl__calloc((size_t)n + 1, sizeof *s.finish);
  s.indeg = sl__calloc((size_t)n + 1, sizeof *s.indeg);
  s.off = sl__calloc((size_t)n + 2, sizeof *s.off);
  s.heap = sl__calloc((size_t)n + 1, sizeof *s.heap);
  s.woken = sl__calloc((size_t)n + 1, sizeof *s.woken);
  lane *lanes = sl__calloc((size_t)n + 1, sizeof *lanes);
  int32_t *lane_ix = sl__calloc((size_t)n + 1, sizeof *lane_ix);
  int32_t *flo = sl__calloc((size_t)n + 1, sizeof *flo);
  int32_t *fhi = sl__calloc((size_t)n + 1, sizeof *fhi);
  double *durs = sl__calloc((size_t)n_fir + 1, sizeof *durs);
  int32_t nl = 0;
  double handoff = c.handoff_us > 0 ? c.handoff_us : 0;
  sl_status st = SL_OK;
  if (!s.cost || !s.ready || !s.start || !s.finish || !s.indeg || !s.off ||
      !s.heap || !s.woken || !lanes || !lane_ix || !flo || !fhi || !durs) {
    st = SL_ENOMEM;
    goto out;
  }
  SL_CHECK_GOTO(build_edges(&s), st, out);
  for (int32_t t = 0; t < n; t++) {
    const sl__task *task = &p->tasks[t];
    s.cost[t] = model_us(p, task, &c);
    if (fir) { /* each task's median firing */
      firings_of(fir, n_fir, task->name, &flo[t], &fhi[t]);
      for (int32_t i = flo[t]; i < fhi[t]; i++)
        durs[i - flo[t]] = fir[i].dur;
      if (fhi[t] > flo[t]) {
        s.cost[t] = median(durs, fhi[t] - flo[t]);
        matched++;
      }
    }
    s.finish[t] = -1;
    lane_ix[t] = task->kind == SL__TASK_TICK ? -1 : lane_of(lanes, &nl, task);
  }
  /* A boxing member's firing also waits for its peers: the group's cost
   * is its quickest member's, the one that arrived last. */
  if (fir) SL_CHECK_GOTO(group_costs(p, s.cost), st, out);
  if (fir && !(c.handoff_us > 0))
    SL_CHECK_GOTO(estimate_handoff(&s, fir, flo, fhi, lane_ix, n_fir, &handoff),
                  st, out);
  res->handoff_us = handoff;
  for (int32_t t = 0; t < n; t++)
    if (!s.indeg[t]) push(&s, t);
  int32_t done = 0;
  while (s.n_heap) {
    int32_t t = pop(&s);
    lane *l = lane_ix[t] >= 0 ? &lanes[lane_ix[t]] : NULL;
    /* A stream that sat idle until another stream readied t is woken. */
    s.start[t] = !l ? s.ready[t]
                 : l->free_at > s.ready[t]
                     ? l->free_at
                     : s.ready[t] + (s.woken[t] ? handoff : 0);
    s.finish[t] = s.start[t] + s.cost[t];
    if (l) {
      l->free_at = s.finish[t];
      l->busy += s.cost[t];
    }
    done++;
    for (int32_t e = s.off[t]; e < s.off[t + 1]; e++) {
      int32_t v = s.to[e];
      if (s.finish[t] >= s.ready[v]) {
        s.ready[v] = s.finish[t];
        s.woken[v] = lane_ix[v] != lane_ix[t];
      }
      if (--s.indeg[v] == 0) push(&s, v);
    }
  }
  if (done != n) {
    st = report_stuck(&s);
    goto out;
  }
  for (int32_t t = 0; t < n; t++)
    res->step_us = SL_MAX(res->step_us, s.finish[t]);
  res->tasks_measured = matched;
  /* Devices: their compute lanes' busy time and bubble. */
  for (int32_t i = 0; i < nl; i++)
    if (lanes[i].stream == SL_STREAM_COMPUTE && lanes[i].busy > 0) {
      double idle = res->step_us > 0 ? 1.0 - lanes[i].busy / res->step_us : 0;
      res->bubble = SL_MAX(res->bubble, idle);
      res->devices++;
    }
  if (report) st = report_to(p, &c, res, s.start, lanes, nl, report);
out:
  free_firings(fir, n_fir);
  sl__free(flo);
  sl__free(fhi);
  sl__free(durs);
  sl__free(s.cost);
  sl__free(s.ready);
  sl__free(s.start);
  sl__free(s.finish);
  sl__free(s.indeg);
  sl__free(s.off);
  sl__free(s.to);
  sl__free(s.heap);
  sl__free(s.woken);
  sl__free(lanes);
  sl__free(lane_ix);
  return st;
}
