/* Memory planning: which registers of a device can share bytes, and where
 * each lives (DESIGN.md section 5 step 6; docs/plan.md, "Memory").
 *
 * Sharing is justified by happens-before in the plan, never by timing:
 *
 * 1. Each device's compute tasks (its compute stream's kernels, not the
 *    feeds, fetches and collective members that share a CPU device's
 *    compute stream) get one
 *    order, a restriction of one topological order of the whole plan,
 *    made binding by control edges
 *    t1 -> t2 -> ... -> tn (0-byte registers of count 1, skipped where a
 *    data edge already orders the pair) and a closing edge t1 -> tn: t1
 *    fires again only once tn handed that register back, so t1 of step
 *    k+1 fires after tn of step k. The device's compute tasks then run as
 *    t1(k) .. tn(k) t1(k+1) ..., and since every edge goes forward in one
 *    topological order, no cycle without a free register appears (the
 *    runtime's liveness rule, actor/check.c).
 * 2. A register's lifetime in a step runs from its producer's firing to the
 *    end of its last reader's. On a scale where task i of the order starts
 *    at 4i+1 and ends at 4i+3: a producer in the order writes from 4i+1; a
 *    producer outside it (a boxing step on another stream, a device
 *    exchange) writes after the latest task of the order that reaches it,
 *    at 4s+4. A reader in the order frees the register at 4i+3; a reader
 *    outside it frees it before the earliest task of the order it reaches,
 *    at 4j. A register whose producer is reached by no task of the order,
 *    or with a reader that reaches none, has no bounded lifetime.
 * 3. Two registers whose lifetimes do not overlap are ordered by the plan
 *    in every step (the closing edge bounds each step's lifetimes between
 *    t1's start and tn's end), so they may share bytes: the registers of
 *    count 1 with bounded lifetimes are placed in one block per device,
 *    largest first, each at the lowest offset free for its lifetime.
 * 4. In place: an elementwise op or a reshape (sl__op_def.inplace), or an
 *    all-reduce of the in-process engine, writes its output into an input
 *    of its dtype and element count whose last reader it is; the two form
 *    one class that takes the same bytes.
 *
 * 5. ZeRO's sharded updates (docs/zero.md) get edges of their own
 *    (zero_edges): a new shard's all-gather completes before the device's
 *    next sharded update, and with stages 2 and 3 a full-size gradient's
 *    reduce-scatter before the task after the next gradient's producer,
 *    so that one or two of each are live at a time rather than all; with
 *    stage 3 each weight's gather waits for the last reader of the gather
 *    two before it (zero3_edges), so two gathered weights at most are.
 *
 * Everything else keeps memory of its own: variables, registers with
 * several buffers (feeds, update loops, ticks), registers without a
 * bounded lifetime, and the mirrors a machine keeps of registers produced
 * on another. */
#include <stdlib.h>
#include <string.h>

#include <sluice/actor.h>

#include "lower_int.h"
#include "op.h"

#define NONE_BEFORE (-1)
#define NONE_AFTER INT32_MAX

static int64_t stride_of(int64_t bytes) {
  return (int64_t)sl_register_stride((size_t)bytes);
}

const char *sl_memory_category_name(sl_memory_category c) {
  static const char *const names[SL_MEMORY_CATEGORIES] = {
      "weights",     "optimizer",     "gradients",
      "activations", "communication", "workspace"};
  return (int)c >= 0 && (int)c < SL_MEMORY_CATEGORIES ? names[c] : "?";
}

/* ---- what a register holds ---------------------------------------------- */

static sl_memory_category category_of(const sl__pplan *p, const sl__regst *r) {
  const sl__task *t = &p->tasks[r->producer];
  const sl__pnode *n =
      t->node >= 0 && t->node < p->n_nodes ? &p->nodes[t->node] : NULL;
  if (r->var_node >= 0) {
    const sl__pnode *v = r->var_node < p->n_nodes ? &p->nodes[r->var_node] : n;
    return v && v->optimizer ? SL_MEMORY_OPTIMIZER : SL_MEMORY_WEIGHTS;
  }
  switch (t->kind) {
  case SL__TASK_CONST:
  case SL__TASK_VAR_COPY: return SL_MEMORY_WEIGHTS;
  case SL__TASK_COLL:
  case SL__TASK_LOCAL:
  case SL__TASK_XCHG:
  case SL__TASK_COPY: return SL_MEMORY_COMMUNICATION;
  case SL__TASK_OP:
    /* A sharded update's new weight shard, before its all-gather. */
    if (n && n->def && n->def->weight_update && t->n_out > 0 &&
        t->out[0] == (int32_t)(r - p->regsts))
      return SL_MEMORY_WEIGHTS;
    if (n && n->optimizer) return SL_MEMORY_OPTIMIZER;
    if (n && n->recompute) return SL_MEMORY_ACTIVATIONS;
    if (n && n->backward) return SL_MEMORY_GRADIENTS;
    return SL_MEMORY_ACTIVATIONS;
  default: return SL_MEMORY_ACTIVATIONS;
  }
}

/* ---- the order of the whole plan ----------------------------------------- */

/* Edges within a step: producer -> reader for every register that is not
 * a variable's (a variable's readers read the version the last step
 * wrote), and reader -> producer for a variable updated in place (one
 * register: its update fires once every reader returned the version it
 * replaces). CSR by task. */
typedef struct dag {
  int32_t *off, *to; /* successors of t: to[off[t] .. off[t+1]) */
  int32_t *rev_off, *rev_to;
} dag;

/* Calls edge(u, v, ctx) for every edge within a step. */
static void each_edge(const sl__pplan *p,
                      void (*edge)(int32_t, int32_t, void *), void *ctx) {
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const sl__regst *g = &p->regsts[r];
    bool replaced = g->initial > 0 && g->count == g->initial;
    if (g->initial && !replaced) continue;
    for (int32_t c = 0; c < g->n_cons; c++) {
      if (g->cons[c] == g->producer) continue;
      if (replaced)
        edge(g->cons[c], g->producer, ctx);
      else
        edge(g->producer, g->cons[c], ctx);
    }
  }
}

static void dag_free(dag *d) {
  sl__free(d->off);
  sl__free(d->to);
  sl__free(d->rev_off);
  sl__free(d->rev_to);
}

typedef struct dag_fill {
  dag *d;
  int32_t *fill, *rfill; /* NULL: count */
} dag_fill;

static void dag_edge(int32_t u, int32_t v, void *ctx) {
  dag_fill *x = ctx;
  if (!x->fill) {
    x->d->off[u + 1]++;
    x->d->rev_off[v + 1]++;
    return;
  }
  x->d->to[x->d->off[u] + x->fill[u]++] = v;
  x->d->rev_to[x->d->rev_off[v] + x->rfill[v]++] = u;
}

/* The plan's edges within a step, and n_extra more: extra[2i] ->
 * extra[2i+1] (a schedule's order, schedule.c). */
static sl_status dag_build(const sl__pplan *p, dag *d, const int32_t *extra,
                           int32_t n_extra) {
  memset(d, 0, sizeof *d);
  int32_t n = p->n_tasks;
  d->off = sl__calloc((size_t)n + 2, sizeof *d->off);
  d->rev_off = sl__calloc((size_t)n + 2, sizeof *d->rev_off);
  if (!d->off || !d->rev_off) return SL_ENOMEM;
  dag_fill x = {d, NULL, NULL};
  each_edge(p, dag_edge, &x);
  for (int32_t i = 0; i < n_extra; i++)
    dag_edge(extra[2 * i], extra[2 * i + 1], &x);
  for (int32_t t = 0; t < n; t++) {
    d->off[t + 1] += d->off[t];
    d->rev_off[t + 1] += d->rev_off[t];
  }
  size_t e = (size_t)d->off[n];
  d->to = sl__calloc(e + 1, sizeof *d->to);
  d->rev_to = sl__calloc(e + 1, sizeof *d->rev_to);
  x.fill = sl__calloc((size_t)n + 1, sizeof *x.fill);
  x.rfill = sl__calloc((size_t)n + 1, sizeof *x.rfill);
  sl_status st = SL_ENOMEM;
  if (d->to && d->rev_to && x.fill && x.rfill) {
    each_edge(p, dag_edge, &x);
    for (int32_t i = 0; i < n_extra; i++)
      dag_edge(extra[2 * i], extra[2 * i + 1], &x);
    st = SL_OK;
  }
  sl__free(x.fill);
  sl__free(x.rfill);
  return st;
}

/* A data edge from -> to (of count 1 only, when `single`). */
static bool data_edge(const sl__pplan *p, int32_t from, int32_t to,
                      bool single) {
  const sl__task *t = &p->tasks[from];
  for (int32_t j = 0; j < t->n_out; j++) {
    const sl__regst *r = &p->regsts[t->out[j]];
    if (r->initial || (single && r->count != 1)) continue;
    for (int32_t c = 0; c < r->n_cons; c++)
      if (r->cons[c] == to) return true;
  }
  return false;
}

/* A schedule's order that contradicts the data: a cycle among the tasks a
 * topological sort left (indeg > 0), found by walking back from one of
 * them to a task seen before, and named task by task. */
static sl_status report_cycle(const sl__pplan *p, const dag *d,
                              const int32_t *indeg) {
  int32_t n = p->n_tasks, u = -1, len = 0;
  int32_t *seen = sl__calloc((size_t)n + 1, sizeof *seen); /* step + 1 */
  int32_t *walk = sl__calloc((size_t)n + 1, sizeof *walk);
  bool *by_order = sl__calloc((size_t)n + 1, sizeof *by_order);
  if (!seen || !walk || !by_order) {
    sl__free(seen);
    sl__free(walk);
    sl__free(by_order);
    return SL_ENOMEM;
  }
  for (int32_t t = 0; t < n && u < 0; t++)
    if (indeg[t] > 0) u = t;
  while (u >= 0 && !seen[u]) {
    seen[u] = ++len;
    walk[len - 1] = u;
    int32_t next = -1;
    for (int32_t e = d->rev_off[u]; e < d->rev_off[u + 1] && next < 0; e++)
      if (indeg[d->rev_to[e]] > 0) next = d->rev_to[e];
    u = next;
  }
  sl_status st;
  if (u < 0) {
    st = sl__fail(SL_EINTERNAL, "memory planning: a cycle it cannot name");
  } else {
    int32_t first = seen[u] - 1, k = len - first;
    for (int32_t i = 0; i < k; i++) {
      int32_t a = walk[first + i], b = walk[first + (i + 1) % k];
      /* Not a register: a device's order, or the exchange of a group
       * (members on different devices or streams). */
      const sl__task *ta = &p->tasks[a], *tb = &p->tasks[b];
      by_order[i] = !data_edge(p, b, a, false) && ta->machine == tb->machine &&
                    ta->device == tb->device && sl__task_in_device_order(ta) &&
                    sl__task_in_device_order(tb);
    }
    st = sl__schedule_deadlock(p, walk + first, by_order, k);
  }
  sl__free(seen);
  sl__free(walk);
  sl__free(by_order);
  return st;
}

/* A topological order, smallest task id first among the ready ones
 * (lowering creates tasks in the graph's order: forward, backward, then
 * the optimizer, which keeps each device's compute order close to what
 * the program wrote). */
static sl_status topo_order(const sl__pplan *p, const dag *d, int32_t *order) {
  int32_t n = p->n_tasks, out = 0;
  int32_t *indeg = sl__calloc((size_t)n + 1, sizeof *indeg);
  if (!indeg) return SL_ENOMEM;
  for (int32_t t = 0; t < n; t++)
    indeg[t] = d->rev_off[t + 1] - d->rev_off[t];
  sl_status st = sl__topo_smallest_first(n, d->off, d->to, indeg, order, &out);
  if (st != SL_OK) {
    sl__free(indeg);
    return st;
  }
  if (out != n && sl__pplan_scheduled(p))
    st = report_cycle(p, d, indeg);
  else if (out != n) /* lowering never makes a cycle within a step */
    st = sl__fail(SL_EINTERNAL,
                  "memory planning: the plan's tasks form a cycle within a "
                  "step (%d of %d ordered)",
                  (int)out, (int)n);
  sl__free(indeg);
  return st;
}

/* ---- devices ---------------------------------------------------------------
 */

static int32_t mem_index(sl__pplan *p, uint32_t machine, uint32_t device,
                         int32_t *cap) {
  for (int32_t i = 0; i < p->n_mem; i++)
    if (p->mem[i].machine == machine && p->mem[i].device == device) return i;
  if (p->n_mem == *cap) {
    int32_t c = *cap ? *cap * 2 : 8;
    sl__pmem *m = sl__reallocarray(p->mem, (size_t)c, sizeof *m);
    if (!m) return -1;
    p->mem = m;
    *cap = c;
  }
  sl__pmem *m = &p->mem[p->n_mem];
  memset(m, 0, sizeof *m);
  m->machine = machine;
  m->device = device;
  return p->n_mem++;
}

bool sl__task_in_device_order(const sl__task *t) {
  return t->stream == SL_STREAM_COMPUTE && t->kind != SL__TASK_FEED &&
         t->kind != SL__TASK_FETCH && t->kind != SL__TASK_TICK &&
         t->kind != SL__TASK_COLL;
}

/* The largest workspace any op task of device m asks for. */
static int64_t workspace_of(const sl__pplan *p, const sl__pmem *m) {
  int64_t most = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind != SL__TASK_OP || t->machine != m->machine ||
        t->device != m->device)
      continue;
    const sl__op_def *def = p->nodes[t->node].def;
    /* A CUDA kernel's workspace comes from the CUDA module; where it cannot
     * be loaded (planning for GPUs on a machine without them), none is
     * counted. */
    const sl__cuda_kernel *cuda = NULL;
    if (sl__dev_class_of(t->device) == SL__DEV_CLASS_CUDA)
      cuda = sl__op_cuda(def);
    size_t (*ws)(const sl__kernel_ctx *) =
        sl__dev_class_of(t->device) == SL__DEV_CLASS_CUDA
            ? (cuda ? cuda->workspace : NULL)
            : def->workspace;
    if (!ws) continue;
    sl__kernel_ctx k;
    sl__pplan_kernel_ctx(p, t, &k);
    most = SL_MAX(most, (int64_t)ws(&k));
  }
  return most;
}

/* ---- lifetimes and placement ----------------------------------------------
 */

/* A register with a bounded lifetime, or a class of them computed in place
 * one into the next (their lifetimes meet inside the firing that reads one
 * and writes the other, so they take the same bytes). */
typedef struct life {
  int32_t reg;   /* a member; for a class, the first */
  int32_t up;    /* union-find parent (an index into the lives) */
  int64_t w, f;  /* written from, freed at (the 4i scale above) */
  int64_t bytes; /* rounded up to the register alignment */
  int64_t offset;
} life;

static int32_t root(life *l, int32_t i) {
  while (l[i].up != i)
    i = l[i].up = l[l[i].up].up;
  return i;
}

static int by_size(const void *a, const void *b) {
  const life *x = *(const life *const *)a, *y = *(const life *const *)b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  if (x->w != y->w) return x->w < y->w ? -1 : 1;
  return x->reg - y->reg;
}

typedef struct span {
  int64_t lo, hi;
} span;

static int by_lo(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Greedy by size (largest first, lowest offset free of the placed classes
 * whose lifetimes overlap): sets each class's offset, returns the block's
 * size. */
static sl_status place(life **c, int32_t n, int64_t *block) {
  qsort(c, (size_t)n, sizeof *c, by_size);
  span *busy = sl__calloc((size_t)n + 1, sizeof *busy);
  if (!busy) return SL_ENOMEM;
  int64_t top = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t nb = 0;
    for (int32_t j = 0; j < i; j++)
      if (c[j]->w <= c[i]->f && c[i]->w <= c[j]->f)
        busy[nb++] = (span){c[j]->offset, c[j]->offset + c[j]->bytes};
    qsort(busy, (size_t)nb, sizeof *busy, by_lo);
    int64_t at = 0;
    for (int32_t j = 0; j < nb && busy[j].lo < at + c[i]->bytes; j++)
      at = SL_MAX(at, busy[j].hi);
    c[i]->offset = at;
    top = SL_MAX(top, at + c[i]->bytes);
  }
  sl__free(busy);
  *block = top;
  return SL_OK;
}

/* A point of the sweep below: member k starts (end false) or its class
 * ends (end true: at f + 1, the first point it is no longer live). */
typedef struct event {
  int64_t t;
  int32_t k;
  bool end;
} event;

static int by_time(const void *a, const void *b) {
  const event *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (int)y->end - (int)x->end; /* ends first */
}

/* The most bytes live at once — each class by its lifetime, counted in
 * the category of its member live then — plus what is always there. A
 * sweep over the members' starts and the classes' ends. */
static sl_status peak_of(const sl__pplan *p, life *l, int32_t n,
                         const int64_t *always, sl__pmem *m) {
  event *ev = sl__calloc(2 * (size_t)n + 1, sizeof *ev);
  int *now = sl__calloc((size_t)n + 1, sizeof *now); /* class -> category */
  if (!ev || !now) {
    sl__free(ev);
    sl__free(now);
    return SL_ENOMEM;
  }
  int32_t ne = 0;
  for (int32_t k = 0; k < n; k++) {
    ev[ne++] = (event){l[k].w, k, false};
    if (root(l, k) == k) ev[ne++] = (event){l[k].f + 1, k, true};
    now[k] = -1;
  }
  qsort(ev, (size_t)ne, sizeof *ev, by_time);
  int64_t live = 0, best = 0;
  int64_t cat[SL_MEMORY_CATEGORIES] = {0}, best_cat[SL_MEMORY_CATEGORIES] = {0};
  for (int32_t i = 0; i < ne; i++) {
    int32_t r = root(l, ev[i].k);
    int64_t b = l[r].bytes;
    if (now[r] >= 0) { /* leaves its category: ends or is replaced */
      cat[now[r]] -= b;
      live -= b;
    }
    now[r] = ev[i].end ? -1 : (int)p->regsts[l[ev[i].k].reg].category;
    if (now[r] >= 0) {
      cat[now[r]] += b;
      live += b;
    }
    if (live > best && (i + 1 == ne || ev[i + 1].t != ev[i].t)) {
      best = live;
      memcpy(best_cat, cat, sizeof cat);
    }
  }
  sl__free(ev);
  sl__free(now);
  m->peak = 0;
  for (int k = 0; k < SL_MEMORY_CATEGORIES; k++) {
    m->category[k] = best_cat[k] + always[k];
    m->peak += m->category[k];
  }
  return SL_OK;
}

typedef struct planner {
  sl__pplan *p;
  dag d;
  int32_t *order;  /* topological order of all tasks */
  int32_t *pos;    /* task -> position in its device's order, -1 */
  int32_t *dev_of; /* task -> its device's mem index if ordered, -1 */
  int32_t *before; /* per task: latest ordered task reaching it */
  int32_t *after;  /* per task: earliest ordered task it reaches */
  int32_t **seq;   /* per mem index: its ordered tasks */
  int32_t *n_seq;
  int32_t cap_ctrl;
  bool share; /* SLUICE_MEMORY_SHARING is not 0 */
} planner;

/* before[] and after[] for the order of device m (positions of its own
 * tasks only). */
static void reach(planner *P, int32_t m) {
  const sl__pplan *p = P->p;
  int32_t n = p->n_tasks;
  for (int32_t k = 0; k < n; k++) {
    int32_t t = P->order[k];
    int32_t b = P->dev_of[t] == m ? P->pos[t] : NONE_BEFORE;
    for (int32_t e = P->d.rev_off[t]; e < P->d.rev_off[t + 1]; e++)
      b = SL_MAX(b, P->before[P->d.rev_to[e]]);
    P->before[t] = b;
  }
  for (int32_t k = n - 1; k >= 0; k--) {
    int32_t t = P->order[k];
    int32_t a = P->dev_of[t] == m ? P->pos[t] : NONE_AFTER;
    for (int32_t e = P->d.off[t]; e < P->d.off[t + 1]; e++)
      a = SL_MIN(a, P->after[P->d.to[e]]);
    P->after[t] = a;
  }
}

static sl_status add_ctrl(planner *P, int32_t from, int32_t to, bool closing) {
  sl__pplan *p = P->p;
  if (p->n_ctrl == P->cap_ctrl) {
    int32_t c = P->cap_ctrl ? P->cap_ctrl * 2 : 64;
    sl__ctrl *x = sl__reallocarray(p->ctrl, (size_t)c, sizeof *x);
    if (!x) return SL_ENOMEM;
    p->ctrl = x;
    P->cap_ctrl = c;
  }
  p->ctrl[p->n_ctrl++] = (sl__ctrl){from, to, closing};
  return SL_OK;
}

/* The device's order made binding. */
static sl_status order_device(planner *P, int32_t m) {
  int32_t n = P->n_seq[m];
  const int32_t *s = P->seq[m];
  if (n < 2) return SL_OK;
  int32_t before = P->p->n_ctrl;
  for (int32_t i = 0; i + 1 < n; i++)
    if (!data_edge(P->p, s[i], s[i + 1], false))
      SL_CHECK(add_ctrl(P, s[i], s[i + 1], false));
  if (!data_edge(P->p, s[0], s[n - 1], true) &&
      (n > 2 || !data_edge(P->p, s[0], s[1], false)))
    SL_CHECK(add_ctrl(P, s[0], s[n - 1], true));
  P->p->mem[m].n_ctrl = P->p->n_ctrl - before;
  return SL_OK;
}

/* ---- ZeRO's order ----------------------------------------------------------
 */

/* A sharded update: an optimizer update that reads its weight whole and
 * writes a smaller shard of it, or (ZeRO-3) updates the shard the weight
 * is kept as. */
static bool sharded_update(const sl__pplan *p, const sl__task *t) {
  return t->kind == SL__TASK_OP && p->nodes[t->node].def->weight_update &&
         t->n_in >= 2 && t->n_out >= 1 &&
         (sl_shape_numel(&p->regsts[t->in[0]].shape) !=
              sl_shape_numel(&p->regsts[t->out[0]].shape) ||
          sl__attr_int(&p->nodes[t->node].attrs, "zero", 0) == 3);
}

/* Appends the edge from -> to to *e (pairs), growing it. */
static sl_status push_edge(int32_t **e, int32_t *n, int32_t *cap, int32_t from,
                           int32_t to) {
  if (*n == *cap) {
    int32_t c = *cap ? *cap * 2 : 32;
    int32_t *x = sl__reallocarray(*e, (size_t)c * 2, sizeof *x);
    if (!x) return SL_ENOMEM;
    *e = x;
    *cap = c;
  }
  (*e)[2 * *n] = from;
  (*e)[2 * *n + 1] = to;
  (*n)++;
  return SL_OK;
}

/* The position in device m's order of the compute task a boxing task's
 * data comes from (through earlier boxing steps); -1: none. */
static int32_t source_pos(const planner *P, int32_t m, int32_t t) {
  const sl__pplan *p = P->p;
  for (int depth = 0; depth < 16; depth++) {
    if (P->dev_of[t] == m) return P->pos[t];
    if (p->tasks[t].n_in < 1) return -1;
    t = p->regsts[p->tasks[t].in[0]].producer;
  }
  return -1;
}

/* The edges of point 5 for device m, in the current order. Under stage 2
 * (the update's attribute zero), reduce-scatter i (by its gradient's
 * position) completes before the task after gradient i + 1's producer: it
 * overlaps that gradient's computation, and no more than two full-size
 * gradients are live; the backward pass then waits for each. An
 * all-gather completes before the next sharded update that comes after
 * every reader of its weight on the device (which the all-gather waits
 * for: the weight has one register), so the edge cannot close a cycle. */
static sl_status zero_edges_of(const planner *P, int32_t m, int32_t **e,
                               int32_t *n, int32_t *cap) {
  const sl__pplan *p = P->p;
  int32_t ns = P->n_seq[m], nu = 0;
  const int32_t *s = P->seq[m];
  int32_t *u = sl__calloc((size_t)ns + 1, sizeof *u);
  int32_t *rs = sl__calloc((size_t)ns + 1, sizeof *rs);
  int32_t *key = sl__calloc((size_t)ns + 1, sizeof *key);
  sl_status st = u && rs && key ? SL_OK : SL_ENOMEM;
  for (int32_t i = 0; i < ns && st == SL_OK; i++)
    if (sharded_update(p, &p->tasks[s[i]])) u[nu++] = s[i];
  /* Reduce-scatters by their gradient's position (insertion sort). */
  int32_t nr = 0;
  for (int32_t i = 0; i < nu && st == SL_OK; i++) {
    const sl__task *t = &p->tasks[u[i]];
    if (sl__attr_int(&p->nodes[t->node].attrs, "zero", 0) < 2) continue;
    int32_t r = p->regsts[t->in[1]].producer;
    int32_t k = P->dev_of[r] == m ? -1 : source_pos(P, m, r);
    if (k < 0) continue;
    int32_t at = nr++;
    for (; at > 0 && key[at - 1] > k; at--) {
      key[at] = key[at - 1];
      rs[at] = rs[at - 1];
    }
    key[at] = k;
    rs[at] = r;
  }
  for (int32_t i = 0; i + 1 < nr && st == SL_OK; i++)
    if (key[i + 1] + 1 < ns)
      st = push_edge(e, n, cap, rs[i], s[key[i + 1] + 1]);
  for (int32_t i = 0; i + 1 < nu && st == SL_OK; i++) {
    const sl__regst *shard = &p->regsts[p->tasks[u[i]].out[0]];
    for (int32_t c = 0; c < shard->n_cons && st == SL_OK; c++) {
      int32_t ag = shard->cons[c];
      const sl__task *t = &p->tasks[ag];
      if (P->dev_of[ag] == m || t->n_out < 1) continue;
      const sl__regst *w = &p->regsts[t->out[0]];
      if (w->var_node < 0) continue; /* not the weight's all-gather */
      int32_t last = P->pos[u[i]];
      for (int32_t k = 0; k < w->n_cons; k++)
        if (P->dev_of[w->cons[k]] == m) last = SL_MAX(last, P->pos[w->cons[k]]);
      for (int32_t j = i + 1; j < nu; j++)
        if (P->pos[u[j]] > last) {
          st = push_edge(e, n, cap, ag, u[j]);
          break;
        }
    }
  }
  sl__free(u);
  sl__free(rs);
  sl__free(key);
  return st;
}

/* Whether task t gathers a ZeRO-3 weight: a boxing step that reads the
 * register of a variable whose attribute zero is 3 into one of its own. */
static bool weight_gather(const sl__pplan *p, const sl__task *t) {
  if (t->kind != SL__TASK_COLL && t->kind != SL__TASK_LOCAL &&
      t->kind != SL__TASK_XCHG)
    return false;
  if (t->n_in < 1 || t->n_out < 1 || p->regsts[t->out[0]].var_node >= 0)
    return false;
  int32_t v = p->regsts[t->in[0]].var_node;
  return v >= 0 && v < p->n_nodes &&
         sl__attr_int(&p->nodes[v].attrs, "zero", 0) == 3;
}

/* The first and last positions in device m's order of the tasks reading
 * what task t writes, following further boxing steps (a gather may take
 * several); false when none is on m. */
static bool reader_span(const planner *P, int32_t m, int32_t t, int32_t *first,
                        int32_t *last) {
  const sl__pplan *p = P->p;
  int32_t stack[16], n = 0;
  *first = INT32_MAX;
  *last = -1;
  stack[n++] = t;
  while (n > 0) {
    int32_t u = stack[--n];
    for (int j = 0; j < p->tasks[u].n_out; j++) {
      const sl__regst *r = &p->regsts[p->tasks[u].out[j]];
      for (int32_t c = 0; c < r->n_cons; c++) {
        int32_t x = r->cons[c];
        if (P->dev_of[x] == m) {
          *first = SL_MIN(*first, P->pos[x]);
          *last = SL_MAX(*last, P->pos[x]);
        } else if (P->dev_of[x] < 0 && n < 16) {
          stack[n++] = x;
        }
      }
    }
  }
  return *last >= 0;
}

/* ZeRO-3's edges for device m (point 5): its weights' gathers, by their
 * first reader in the order, each wait for the last reader of the gather
 * two before, so that a device holds at most two gathered weights at a
 * time, the next one's gather overlapping the current one's readers.
 * Where the two spans overlap (one weight read in several places) no edge
 * is added: it could close a cycle. */
static sl_status zero3_edges_of(const planner *P, int32_t m, int32_t **e,
                                int32_t *n, int32_t *cap) {
  const sl__pplan *p = P->p;
  int32_t ng = 0;
  int32_t *gt = sl__calloc((size_t)p->n_tasks + 1, sizeof *gt);
  int32_t *first = sl__calloc((size_t)p->n_tasks + 1, sizeof *first);
  int32_t *last = sl__calloc((size_t)p->n_tasks + 1, sizeof *last);
  sl_status st = gt && first && last ? SL_OK : SL_ENOMEM;
  for (int32_t t = 0; t < p->n_tasks && st == SL_OK; t++) {
    int32_t f, l;
    if (!weight_gather(p, &p->tasks[t]) || !reader_span(P, m, t, &f, &l))
      continue;
    int32_t at = ng++; /* insertion sort by the first reader */
    for (; at > 0 && first[at - 1] > f; at--) {
      gt[at] = gt[at - 1];
      first[at] = first[at - 1];
      last[at] = last[at - 1];
    }
    gt[at] = t;
    first[at] = f;
    last[at] = l;
  }
  for (int32_t k = 2; k < ng && st == SL_OK; k++)
    if (last[k - 2] < first[k])
      st = push_edge(e, n, cap, P->seq[m][last[k - 2]], gt[k]);
  sl__free(gt);
  sl__free(first);
  sl__free(last);
  return st;
}

/* A reader's end on device m's scale: 4i+3 for task i of the order, else
 * 4j for the earliest task j of the order it reaches; INT64_MAX: none. */
static int64_t read_end(const planner *P, int32_t m, int32_t t) {
  int32_t cp = P->dev_of[t] == m ? P->pos[t] : -1;
  return cp >= 0                     ? 4 * (int64_t)cp + 3
         : P->after[t] != NONE_AFTER ? 4 * (int64_t)P->after[t]
                                     : INT64_MAX;
}

/* The lifetime of register r on device m's scale; false when unbounded. */
static bool lifetime(const planner *P, int32_t m, const sl__regst *r,
                     int64_t *w, int64_t *f) {
  const sl__pplan *p = P->p;
  if (r->count != 1 || r->initial || r->var_node >= 0 || r->bytes <= 0)
    return false;
  const sl__task *prod = &p->tasks[r->producer];
  if (prod->kind == SL__TASK_FEED || prod->kind == SL__TASK_TICK ||
      prod->machine != r->machine || prod->device != r->device)
    return false;
  int32_t pp = P->dev_of[r->producer] == m ? P->pos[r->producer] : -1;
  if (pp >= 0) {
    *w = 4 * (int64_t)pp + 1;
  } else if (P->before[r->producer] != NONE_BEFORE) {
    *w = 4 * (int64_t)P->before[r->producer] + 4;
  } else {
    return false;
  }
  *f = pp >= 0 ? 4 * (int64_t)pp + 3 : -1;
  if (pp < 0 && r->n_cons == 0) return false; /* when would it end? */
  for (int32_t c = 0; c < r->n_cons; c++) {
    int32_t t = r->cons[c];
    if (p->tasks[t].machine != r->machine) return false; /* a mirror */
    int64_t e = read_end(P, m, t);
    if (e == INT64_MAX) return false;
    *f = SL_MAX(*f, e);
  }
  return *w < *f;
}

static bool sharing_off(void) {
  const char *e = getenv("SLUICE_MEMORY_SHARING");
  return e && strcmp(e, "0") == 0;
}

/* Whether task t writes output 0 in place into an input: an elementwise
 * op or a reshape (sl__op_def.inplace), or an all-reduce member of the
 * in-process engine (comm/coll/coll.c reads each tile of every input before
 * writing it).
 */
static bool writes_in_place(const planner *P, const sl__task *t) {
  if (t->n_out < 1) return false;
  if (t->kind == SL__TASK_COLL) {
    const sl__pnode *n = t->node >= 0 ? &P->p->nodes[t->node] : NULL;
    return t->engine == SL__ENGINE_INPROC && n && t->step >= 0 &&
           t->step < n->n_steps &&
           strcmp(n->steps[t->step].op, "all_reduce") == 0;
  }
  return t->kind == SL__TASK_OP && P->p->nodes[t->node].def->inplace;
}

/* In-place reuse: output 0 of a task that writes in place takes the bytes
 * of an input of its dtype and element count whose last reader it is: in the
 * order, every other reader ends before it fires; outside it (an all-reduce),
 * it is the input's only reader. idx: register -> life, -1. */
static void join_in_place(const planner *P, int32_t m, life *l,
                          const int32_t *idx) {
  const sl__pplan *p = P->p;
  const sl__pmem *pm = &p->mem[m];
  for (int32_t t = 0; t < p->n_tasks; t++) {
    const sl__task *task = &p->tasks[t];
    if (task->machine != pm->machine || task->device != pm->device ||
        !writes_in_place(P, task) || idx[task->out[0]] < 0)
      continue;
    int32_t b = idx[task->out[0]];
    const sl__regst *rb = &p->regsts[task->out[0]];
    bool ordered = P->dev_of[t] == m;
    int64_t end = ordered ? 4 * (int64_t)P->pos[t] + 3 : read_end(P, m, t);
    for (int32_t k = 0; k < task->n_in; k++) {
      int32_t a = idx[task->in[k]];
      const sl__regst *ra = &p->regsts[task->in[k]];
      if (a < 0 || root(l, a) == root(l, b) || l[a].f != end ||
          ra->dtype != rb->dtype ||
          sl_shape_numel(&ra->shape) != sl_shape_numel(&rb->shape) ||
          (!ordered && ra->n_cons != 1))
        continue;
      bool last = true; /* in a class, a member is someone's input once */
      for (int32_t c = 0; c < ra->n_cons && last; c++)
        last = ra->cons[c] == t || read_end(P, m, ra->cons[c]) < end;
      for (int32_t j = 0; j < task->n_in && last; j++)
        last = j == k || task->in[j] != task->in[k];
      if (!last) continue;
      int32_t ka = root(l, a), kb = root(l, b);
      l[kb].up = ka;
      l[ka].w = SL_MIN(l[ka].w, l[kb].w);
      l[ka].f = SL_MAX(l[ka].f, l[kb].f);
      break;
    }
  }
}

static sl_status plan_device(planner *P, int32_t m) {
  sl__pplan *p = P->p;
  sl__pmem *pm = &p->mem[m];
  reach(P, m);
  life *l = sl__calloc((size_t)p->n_regsts + 1, sizeof *l);
  life **c = sl__calloc((size_t)p->n_regsts + 1, sizeof *c);
  int32_t *idx = sl__calloc((size_t)p->n_regsts + 1, sizeof *idx);
  if (!l || !c || !idx) {
    sl__free(l);
    sl__free(c);
    sl__free(idx);
    return SL_ENOMEM;
  }
  int32_t n = 0, nc = 0;
  int64_t always[SL_MEMORY_CATEGORIES] = {0};
  for (int32_t i = 0; i < p->n_regsts; i++) {
    sl__regst *r = &p->regsts[i];
    idx[i] = -1;
    if (r->machine != pm->machine || r->device != pm->device) continue;
    int64_t all = stride_of(r->bytes) * r->count;
    pm->unshared += all;
    int64_t w, f;
    if (P->share && lifetime(P, m, r, &w, &f)) {
      idx[i] = n;
      l[n] = (life){i, n, w, f, stride_of(r->bytes), 0};
      n++;
    } else {
      pm->own += all;
      always[r->category] += all;
    }
  }
  join_in_place(P, m, l, idx);
  /* Each class's lifetime lives in its root (join_in_place keeps it). */
  for (int32_t i = 0; i < n; i++)
    if (root(l, i) == i) c[nc++] = &l[i];
  sl_status st = place(c, nc, &pm->block);
  if (st == SL_OK) {
    for (int32_t i = 0; i < n; i++) {
      sl__regst *r = &p->regsts[l[i].reg];
      r->mem = m;
      r->offset = l[root(l, i)].offset;
    }
    pm->n_shared = n;
    pm->workspace = workspace_of(p, pm);
    always[SL_MEMORY_COMMUNICATION] += pm->mirrors;
    always[SL_MEMORY_WORKSPACE] += pm->workspace;
    st = peak_of(p, l, n, always, pm);
  }
  sl__free(l);
  sl__free(c);
  sl__free(idx);
  return st;
}

/* Mirrors: a machine keeps a copy of each register another machine
 * produces and one of its tasks reads, on the register's device id. */
static sl_status count_mirrors(sl__pplan *p, int32_t *cap) {
  for (int32_t i = 0; i < p->n_regsts; i++) {
    const sl__regst *r = &p->regsts[i];
    for (int32_t c = 0; c < r->n_cons; c++) {
      uint32_t mach = p->tasks[r->cons[c]].machine;
      if (mach == r->machine || p->tasks[r->cons[c]].kind == SL__TASK_TICK)
        continue;
      bool seen = false; /* one mirror per machine */
      for (int32_t d = 0; d < c && !seen; d++)
        seen = p->tasks[r->cons[d]].machine == mach;
      if (seen) continue;
      int32_t m = mem_index(p, mach, r->device, cap);
      if (m < 0) return SL_ENOMEM;
      p->mem[m].mirrors += stride_of(r->bytes) * r->count;
    }
  }
  return SL_OK;
}

/* Each device's compute tasks in P->order: seq, pos and dev_of. */
static sl_status device_orders(planner *P) {
  const sl__pplan *p = P->p;
  int32_t n = p->n_tasks;
  for (int32_t m = 0; m < p->n_mem; m++)
    P->n_seq[m] = 0;
  for (int32_t k = 0; k < n; k++) {
    int32_t t = P->order[k];
    const sl__task *task = &p->tasks[t];
    P->pos[t] = P->dev_of[t] = -1;
    if (!sl__task_in_device_order(task)) continue;
    for (int32_t m = 0; m < p->n_mem; m++)
      if (p->mem[m].machine == task->machine &&
          p->mem[m].device == task->device) {
        P->dev_of[t] = m;
        break;
      }
    if (P->dev_of[t] < 0) continue; /* a device without registers */
    int32_t m = P->dev_of[t];
    if (!P->seq[m] && !(P->seq[m] = sl__calloc((size_t)n + 1, sizeof(int32_t))))
      return SL_ENOMEM;
    P->pos[t] = P->n_seq[m];
    P->seq[m][P->n_seq[m]++] = t;
  }
  return SL_OK;
}

sl_status sl__pplan_plan_memory(sl__pplan *p) {
  planner P;
  memset(&P, 0, sizeof P);
  P.p = p;
  p->n_ctrl = p->n_mem = 0;
  int32_t cap_mem = 0, n = p->n_tasks, *ze = NULL, n_ze = 0, cap_ze = 0;
  int32_t *se = NULL, n_se = 0; /* a schedule's edges, then ZeRO's too */
  sl_status st = SL_OK;
  for (int32_t i = 0; i < p->n_regsts; i++) {
    p->regsts[i].mem = -1;
    p->regsts[i].offset = 0;
    p->regsts[i].category = category_of(p, &p->regsts[i]);
  }
  /* Devices: every (machine, device) holding registers, in task order. */
  for (int32_t i = 0; i < n; i++) {
    const sl__task *t = &p->tasks[i];
    for (int32_t j = 0; j < t->n_out; j++) {
      const sl__regst *r = &p->regsts[t->out[j]];
      if (r->bytes > 0 && mem_index(p, r->machine, r->device, &cap_mem) < 0)
        return SL_ENOMEM;
    }
  }
  SL_CHECK(count_mirrors(p, &cap_mem));
  SL_CHECK_GOTO(dag_build(p, &P.d, NULL, 0), st, out);
  P.order = sl__calloc((size_t)n + 1, sizeof *P.order);
  P.pos = sl__calloc((size_t)n + 1, sizeof *P.pos);
  P.dev_of = sl__calloc((size_t)n + 1, sizeof *P.dev_of);
  P.before = sl__calloc((size_t)n + 1, sizeof *P.before);
  P.after = sl__calloc((size_t)n + 1, sizeof *P.after);
  P.seq = sl__calloc((size_t)p->n_mem + 1, sizeof *P.seq);
  P.n_seq = sl__calloc((size_t)p->n_mem + 1, sizeof *P.n_seq);
  if (!P.order || !P.pos || !P.dev_of || !P.before || !P.after || !P.seq ||
      !P.n_seq) {
    st = SL_ENOMEM;
    goto out;
  }
  SL_CHECK_GOTO(topo_order(p, &P.d, P.order), st, out);
  /* A pipeline schedule: each device's passes in its order, an order of
   * the plan's tasks that all of the below keeps. */
  if (sl__pplan_scheduled(p)) {
    SL_CHECK_GOTO(sl__schedule_edges(p, P.order, &se, &n_se), st, out);
    dag_free(&P.d);
    st = dag_build(p, &P.d, se, n_se);
    if (st == SL_OK) st = topo_order(p, &P.d, P.order);
    if (st != SL_OK) goto out;
  }
  SL_CHECK_GOTO(device_orders(&P), st, out);
  /* SLUICE_MEMORY_SHARING=0: no order (a pipeline schedule's excepted) and
   * every register on its own (mirrors and workspaces still counted), to tell
   * sharing's effect. */
  P.share = !sharing_off();
  /* ZeRO's edges join the plan's (and a schedule's), and the order is
   * taken again. A schedule fixes when each pass's gradients are made, so
   * it gets ZeRO-3's gather edges only. */
  if (P.share) {
    for (int32_t m = 0; m < p->n_mem && st == SL_OK; m++) {
      if (!sl__pplan_scheduled(p))
        st = zero_edges_of(&P, m, &ze, &n_ze, &cap_ze);
      if (st == SL_OK) st = zero3_edges_of(&P, m, &ze, &n_ze, &cap_ze);
    }
    if (st == SL_OK && n_ze) {
      int32_t *all =
          sl__reallocarray(se, (size_t)(n_se + n_ze) * 2 + 1, sizeof *all);
      if (!all) {
        st = SL_ENOMEM;
        goto out;
      }
      se = all;
      memcpy(se + 2 * n_se, ze, (size_t)n_ze * 2 * sizeof *se);
      dag_free(&P.d);
      st = dag_build(p, &P.d, se, n_se + n_ze);
      if (st == SL_OK) st = topo_order(p, &P.d, P.order);
      if (st == SL_OK) st = device_orders(&P);
    }
  }
  for (int32_t m = 0; m < p->n_mem && st == SL_OK; m++) {
    if (P.share || sl__pplan_scheduled(p)) st = order_device(&P, m);
    if (st == SL_OK) st = plan_device(&P, m);
  }
  for (int32_t i = 0; i < n_ze && st == SL_OK; i++) {
    int32_t from = ze[2 * i], to = ze[2 * i + 1];
    if (data_edge(p, from, to, false)) continue;
    st = add_ctrl(&P, from, to, false);
    /* Counted on the ordered end's device (ZeRO-3's edges end at a
     * gather, outside every order). */
    p->mem[P.dev_of[to] >= 0 ? P.dev_of[to] : P.dev_of[from]].n_ctrl++;
  }
out:
  sl__free(ze);
  sl__free(se);
  dag_free(&P.d);
  for (int32_t m = 0; P.seq && m < p->n_mem; m++)
    sl__free(P.seq[m]);
  sl__free(P.seq);
  sl__free(P.n_seq);
  sl__free(P.order);
  sl__free(P.pos);
  sl__free(P.dev_of);
  sl__free(P.before);
  sl__free(P.after);
  return st;
}

/* ---- reports ----------------------------------------------------------------
 */

int64_t sl__pmem_allocated(const sl__pmem *m) {
  return m->block + m->own + m->mirrors + m->workspace;
}

void sl__pmem_name(const sl__pplan *p, int32_t i, char *buf, size_t n) {
  const sl__pmem *m = &p->mem[i];
  char dev[32];
  sl__dev_name(m->device, dev, sizeof dev);
  if (p->machines > 1)
    snprintf(buf, n, "n%u/%s", m->machine, dev);
  else
    snprintf(buf, n, "%s", dev);
}

/* "512 B", "40.0 KiB", "16.1 MiB", "20.26 GiB". */
static const char *human(int64_t b, char *buf, size_t n) {
  double x = (double)b;
  if (b >= (int64_t)1 << 30)
    snprintf(buf, n, "%.2f GiB", x / (1 << 30));
  else if (b >= (int64_t)1 << 20)
    snprintf(buf, n, "%.1f MiB", x / (1 << 20));
  else if (b >= 1 << 10)
    snprintf(buf, n, "%.1f KiB", x / (1 << 10));
  else
    snprintf(buf, n, "%lld B", (long long)b);
  return buf;
}

sl_status sl__pplan_write_memory(const sl__pplan *p, int node, FILE *f) {
  SL_CHECK(sl__pplan_check_node(p, node));
  static const char *const head[] = {"device",   "allocated", "peak",
                                     "unshared", "block",     "own",
                                     "mirrors",  "workspace"};
  for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
    fprintf(f, i ? " %11s" : "%-14s", head[i]);
  for (int c = 0; c < SL_MEMORY_WORKSPACE; c++)
    fprintf(f, " %13s", sl_memory_category_name((sl_memory_category)c));
  fprintf(f, " %7s %7s\n", "shared", "control");
  for (int32_t i = 0; i < p->n_mem; i++) {
    const sl__pmem *m = &p->mem[i];
    if (node >= 0 && m->machine != (uint32_t)node) continue;
    char name[64], b[32];
    sl__pmem_name(p, i, name, sizeof name);
    fprintf(f, "%-14s", name);
    int64_t cols[] = {sl__pmem_allocated(m),
                      m->peak,
                      m->unshared,
                      m->block,
                      m->own,
                      m->mirrors,
                      m->workspace};
    for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++)
      fprintf(f, " %11s", human(cols[k], b, sizeof b));
    for (int c = 0; c < SL_MEMORY_WORKSPACE; c++)
      fprintf(f, " %13s", human(m->category[c], b, sizeof b));
    fprintf(f, " %7d %7d\n", (int)m->n_shared, (int)m->n_ctrl);
  }
  fprintf(f, "allocated: the shared block, registers with memory of their own, "
             "mirrors of\nother machines' registers and the largest kernel "
             "workspace; peak: the most of\nit live at once; unshared: the "
             "registers with none shared; weights ..\ncommunication: the peak "
             "by what it holds; shared: registers in the block;\ncontrol: "
             "edges added to order the device's compute tasks.\n");
  return ferror(f) ? sl__fail(SL_EIO, "plan: cannot write the memory table")
                   : SL_OK;
}
