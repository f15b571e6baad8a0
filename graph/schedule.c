/* Pipeline schedules: each device's order of passes over micro-batches
 * (DESIGN.md section 7; docs/pipeline.md, "Schedules").
 *
 * A pass is (stage, micro-batch, F | B | W). Every device runs the passes
 * of the stages it holds in the order its schedule gives; within a pass,
 * its tasks keep the plan's topological order. Memory planning makes the
 * order binding with control edges (memory.c), so the schedule needs no
 * scheduler at run time, and since registers then share memory only along
 * that order, activation memory is what the schedule keeps in flight.
 *
 * Device d of a pipeline of P devices (V stages each, interleaved: stage
 * d + c·P is its chunk c), M micro-batches:
 *   gpipe        F0 .. F(M-1), B0 .. B(M-1)
 *   1f1b         w = min(P-1-d, M) forwards, then F(w+i) B(i) pairs, then
 *                the last w backwards
 *   interleaved  Megatron's order over the V·M passes of each kind: the
 *                k-th forward is chunk (k/P) mod V of micro-batch
 *                (k/(P·V))·P + k mod P (backwards take the chunks in
 *                reverse), with (P-1-d)·2 + (V-1)·P warm-up forwards
 *   zero-bubble  1f1b's order of F and B (ZB-H1), each W deferred while
 *                more than w are pending, one W after each cool-down B,
 *                the rest at the end: weight gradients fill the bubbles
 *                of the cool-down.
 * Other schedules than gpipe and zero-bubble run B and W as one pass. A
 * device holding several stages under a schedule other than interleaved
 * runs them as one stage: the lowest. */
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

bool sl__pplan_scheduled(const sl__pplan *p) { return p->micro_batches > 1; }

typedef struct dev_sched {
  uint32_t machine, device;
  int32_t stages[64]; /* the stages its tasks belong to, ascending */
  int32_t n_stages;
  int32_t *index; /* (chunk, micro, phase) -> position in its order */
} dev_sched;

static int32_t slot(int32_t chunk, int32_t micro, int32_t phase, int32_t m) {
  return (chunk * m + micro) * 3 + phase;
}

/* Appends a pass to dv's order (W also stands for B where merged). */
static void put(dev_sched *dv, int32_t m, int32_t *n, int32_t chunk,
                int32_t micro, int32_t phase, bool split_w) {
  if (phase == SL__PHASE_B && !split_w) {
    dv->index[slot(chunk, micro, SL__PHASE_W, m)] = *n;
  }
  dv->index[slot(chunk, micro, phase, m)] = (*n)++;
}

/* Fills dv->index: d its pipeline rank among p devices, v chunks. */
static void order_passes(sl__schedule s, dev_sched *dv, int32_t p, int32_t v,
                         int32_t d, int32_t m) {
  int32_t n = 0;
  bool zb = s == SL__SCHEDULE_ZERO_BUBBLE;
  int32_t w = SL_MIN(p - 1 - d, m);
  switch (s) {
  case SL__SCHEDULE_GPIPE:
    for (int32_t k = 0; k < m; k++)
      put(dv, m, &n, 0, k, SL__PHASE_F, false);
    for (int32_t k = 0; k < m; k++)
      put(dv, m, &n, 0, k, SL__PHASE_B, false);
    return;
  case SL__SCHEDULE_1F1B:
    for (int32_t k = 0; k < w; k++)
      put(dv, m, &n, 0, k, SL__PHASE_F, false);
    for (int32_t i = 0; i < m - w; i++) {
      put(dv, m, &n, 0, w + i, SL__PHASE_F, false);
      put(dv, m, &n, 0, i, SL__PHASE_B, false);
    }
    for (int32_t k = m - w; k < m; k++)
      put(dv, m, &n, 0, k, SL__PHASE_B, false);
    return;
  case SL__SCHEDULE_ZERO_BUBBLE: {
    int32_t next_w = 0; /* W passes are taken in micro-batch order */
    for (int32_t k = 0; k < w; k++)
      put(dv, m, &n, 0, k, SL__PHASE_F, zb);
    for (int32_t i = 0; i < m - w; i++) {
      put(dv, m, &n, 0, w + i, SL__PHASE_F, zb);
      put(dv, m, &n, 0, i, SL__PHASE_B, zb);
      if (i + 1 - next_w > w) put(dv, m, &n, 0, next_w++, SL__PHASE_W, zb);
    }
    for (int32_t k = m - w; k < m; k++) {
      put(dv, m, &n, 0, k, SL__PHASE_B, zb);
      put(dv, m, &n, 0, next_w++, SL__PHASE_W, zb);
    }
    while (next_w < m)
      put(dv, m, &n, 0, next_w++, SL__PHASE_W, zb);
    return;
  }
  case SL__SCHEDULE_INTERLEAVED: {
    int32_t total = m * v;
    int32_t warm = SL_MIN((p - 1 - d) * 2 + (v - 1) * p, total);
#define FWD(k) ((k) / p) % v, ((k) / (p * v)) * p + (k) % p
#define BWD(k) v - 1 - ((k) / p) % v, ((k) / (p * v)) * p + (k) % p
    for (int32_t k = 0; k < warm; k++)
      put(dv, m, &n, FWD(k), SL__PHASE_F, false);
    for (int32_t i = 0; i < total - warm; i++) {
      put(dv, m, &n, FWD(warm + i), SL__PHASE_F, false);
      put(dv, m, &n, BWD(i), SL__PHASE_B, false);
    }
    for (int32_t k = total - warm; k < total; k++)
      put(dv, m, &n, BWD(k), SL__PHASE_B, false);
#undef FWD
#undef BWD
    return;
  }
  }
}

static const sl__pnode *node_of(const sl__pplan *p, const sl__task *t) {
  return t->node >= 0 && t->node < p->n_nodes ? &p->nodes[t->node] : NULL;
}

static bool per_micro(const sl__pplan *p, const sl__task *t) {
  const sl__pnode *n = node_of(p, t);
  return n && n->micro >= 0 && n->stage >= 0;
}

/* Lays out each device's passes; SL_EINVAL for stages it cannot run. */
static sl_status plan_devices(const sl__pplan *p, dev_sched *devs, int32_t nd,
                              int32_t n_stages) {
  int32_t m = p->micro_batches;
  for (int32_t i = 0; i < nd; i++) {
    dev_sched *dv = &devs[i];
    if (!dv->n_stages) continue;
    int32_t v = dv->n_stages;
    char name[64];
    sl__dev_name(dv->device, name, sizeof name);
    if (p->schedule == SL__SCHEDULE_INTERLEAVED) {
      int32_t pp = n_stages / v, d = dv->stages[0];
      bool regular = n_stages % v == 0 && d < pp;
      for (int32_t c = 0; c < v && regular; c++)
        regular = dv->stages[c] == d + c * pp;
      if (!regular)
        return sl__fail(SL_EINVAL,
                        "pipeline: machine %u %s holds %d of %d stages, from "
                        "stage %d: the interleaved schedule needs device d of "
                        "P to hold stages d, d+P, d+2P, ... (the same number "
                        "on every device)",
                        (unsigned)dv->machine, name, (int)v, (int)n_stages,
                        (int)d);
      if (m % pp != 0)
        return sl__fail(SL_EINVAL,
                        "pipeline: the interleaved schedule needs the "
                        "micro-batches (%d) to be a multiple of the "
                        "pipeline's devices (%d)",
                        (int)m, (int)pp);
    }
    dv->index = sl__calloc((size_t)v * m * 3 + 1, sizeof *dv->index);
    if (!dv->index) return SL_ENOMEM;
    if (p->schedule == SL__SCHEDULE_INTERLEAVED)
      order_passes(p->schedule, dv, n_stages / v, v, dv->stages[0], m);
    else
      order_passes(p->schedule, dv, n_stages, 1, dv->stages[0], m);
  }
  return SL_OK;
}

static dev_sched *dev_find(dev_sched *devs, int32_t n, const sl__task *t) {
  for (int32_t i = 0; i < n; i++)
    if (devs[i].machine == t->machine && devs[i].device == t->device)
      return &devs[i];
  return NULL;
}

typedef struct keyed {
  int32_t dev, task;
  int64_t key, pos;
} keyed;

static int by_key(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Appends to *e (ne pairs, room for cap) an edge from the producer of
 * each input of a group member to every other member of its group. */
static sl_status add_group_edges(const sl__pplan *p, int32_t **e, int32_t *ne,
                                 int32_t *cap) {
  int32_t nc = p->n_colls, n = p->n_tasks;
  int32_t *off = sl__calloc((size_t)nc + 2, sizeof *off);
  int32_t *mem = sl__calloc((size_t)n + 1, sizeof *mem);
  sl_status st = SL_OK;
  if (!off || !mem) {
    st = SL_ENOMEM;
    goto out;
  }
  for (int32_t t = 0; t < n; t++)
    if (p->tasks[t].coll >= 0 && p->tasks[t].coll < nc &&
        p->tasks[t].kind != SL__TASK_LOCAL)
      off[p->tasks[t].coll + 1]++;
  for (int32_t c = 0; c < nc; c++)
    off[c + 1] += off[c];
  for (int32_t t = 0; t < n; t++) {
    const sl__task *a = &p->tasks[t];
    if (a->coll >= 0 && a->coll < nc && a->kind != SL__TASK_LOCAL)
      mem[off[a->coll]++] = t;
  }
  for (int32_t c = nc; c > 0; c--) /* back to starts */
    off[c] = off[c - 1];
  off[0] = 0;
  for (int32_t c = 0; c < nc; c++)
    for (int32_t i = off[c]; i < off[c + 1]; i++) {
      const sl__task *a = &p->tasks[mem[i]];
      for (int32_t j = 0; j < a->n_in; j++) {
        const sl__regst *r = &p->regsts[a->in[j]];
        if (r->initial) continue; /* last step's version */
        for (int32_t k = off[c]; k < off[c + 1]; k++) {
          if (k == i || mem[k] == r->producer) continue;
          if (*ne == *cap) {
            int32_t *x = sl__reallocarray(*e, 4 * (size_t)*cap, sizeof **e);
            if (!x) {
              st = SL_ENOMEM;
              goto out;
            }
            *e = x;
            *cap *= 2;
          }
          (*e)[2 * *ne] = r->producer;
          (*e)[2 * *ne + 1] = mem[k];
          (*ne)++;
        }
      }
    }
out:
  sl__free(off);
  sl__free(mem);
  return st;
}

sl_status sl__schedule_group_edges(const sl__pplan *p, int32_t **edges,
                                   int32_t *n_edges) {
  int32_t cap = p->n_tasks + 1, ne = 0;
  int32_t *e = sl__calloc(2 * (size_t)cap, sizeof *e);
  if (!e) return SL_ENOMEM;
  sl_status st = add_group_edges(p, &e, &ne, &cap);
  if (st != SL_OK) {
    sl__free(e);
    return st;
  }
  *edges = e;
  *n_edges = ne;
  return SL_OK;
}

sl_status sl__schedule_edges(const sl__pplan *p, const int32_t *order,
                             int32_t **edges, int32_t *n_edges) {
  *edges = NULL;
  *n_edges = 0;
  int32_t n = p->n_tasks, nd = 0, m = p->micro_batches, n_stages = 0;
  dev_sched *devs = sl__calloc((size_t)n + 1, sizeof *devs);
  bool *after = sl__calloc((size_t)n + 1, sizeof *after);
  keyed *ks = sl__calloc((size_t)n + 1, sizeof *ks);
  int32_t cap = n + 1;
  int32_t *e = sl__calloc(2 * (size_t)cap, sizeof *e);
  sl_status st = SL_OK;
  if (!devs || !after || !ks || !e) {
    st = SL_ENOMEM;
    goto out;
  }
  /* Devices and the stages each holds. */
  for (int32_t t = 0; t < n; t++) {
    const sl__task *task = &p->tasks[t];
    if (!sl__task_in_device_order(task) || !per_micro(p, task)) continue;
    dev_sched *dv = dev_find(devs, nd, task);
    if (!dv) {
      dv = &devs[nd++];
      dv->machine = task->machine;
      dv->device = task->device;
    }
    int32_t s = node_of(p, task)->stage;
    n_stages = SL_MAX(n_stages, s + 1);
    int32_t k = 0;
    while (k < dv->n_stages && dv->stages[k] < s)
      k++;
    if (k < dv->n_stages && dv->stages[k] == s) continue;
    if (dv->n_stages == (int32_t)SL_ARRAY_LEN(dv->stages)) {
      st = sl__fail(SL_EUNSUPPORTED,
                    "pipeline: a device holds more than %d stages",
                    (int)SL_ARRAY_LEN(dv->stages));
      goto out;
    }
    memmove(dv->stages + k + 1, dv->stages + k,
            (size_t)(dv->n_stages - k) * sizeof *dv->stages);
    dv->stages[k] = s;
    dv->n_stages++;
  }
  /* Other schedules run a device's stages as its lowest one. */
  if (p->schedule != SL__SCHEDULE_INTERLEAVED)
    for (int32_t i = 0; i < nd; i++)
      devs[i].n_stages = 1;
  SL_CHECK_GOTO(plan_devices(p, devs, nd, n_stages), st, out);
  /* Tasks that run once per step follow the passes when they depend on a
   * micro-batch (the gradients' mean, the optimizer) and precede them
   * otherwise. */
  int32_t nk = 0;
  for (int32_t k = 0; k < n; k++) {
    int32_t t = order[k];
    const sl__task *task = &p->tasks[t];
    for (int32_t j = 0; j < task->n_in && !after[t]; j++) {
      const sl__regst *r = &p->regsts[task->in[j]];
      if (r->initial) continue; /* last step's version */
      after[t] = per_micro(p, &p->tasks[r->producer]) || after[r->producer];
    }
    dev_sched *dv =
        sl__task_in_device_order(task) ? dev_find(devs, nd, task) : NULL;
    if (!dv) continue; /* a device without passes keeps the plan's order */
    int64_t key = after[t] ? INT64_MAX : -1;
    if (per_micro(p, task)) {
      const sl__pnode *pn = node_of(p, task);
      int32_t c = 0;
      while (c + 1 < dv->n_stages && dv->stages[c] != pn->stage)
        c++;
      key = dv->index[slot(c, pn->micro, pn->phase, m)];
    }
    ks[nk++] = (keyed){(int32_t)(dv - devs), t, key, k};
  }
  /* Each device's tasks in (pass, plan order), chained. */
  qsort(ks, (size_t)nk, sizeof *ks, by_key);
  int32_t ne = 0;
  for (int32_t i = 0; i + 1 < nk; i++)
    if (ks[i].dev == ks[i + 1].dev) {
      e[2 * ne] = ks[i].task;
      e[2 * ne + 1] = ks[i + 1].task;
      ne++;
    }
  /* A group's members meet in its engine, not through registers: none
   * finishes before every member's inputs are there. */
  SL_CHECK_GOTO(add_group_edges(p, &e, &ne, &cap), st, out);
  *edges = e;
  *n_edges = ne;
  e = NULL;
out:
  for (int32_t i = 0; devs && i < nd; i++)
    sl__free(devs[i].index);
  sl__free(devs);
  sl__free(after);
  sl__free(ks);
  sl__free(e);
  return st;
}

bool sl__pass_label(const sl__pplan *p, int32_t t, char *buf, size_t size) {
  const sl__pnode *n = node_of(p, &p->tasks[t]);
  buf[0] = '\0';
  if (!n || n->micro < 0 || n->stage < 0 || p->micro_batches <= 1) return false;
  char letter =
      n->phase == SL__PHASE_F ? 'F'
      : n->phase == SL__PHASE_W && p->schedule == SL__SCHEDULE_ZERO_BUBBLE
          ? 'W'
          : 'B';
  snprintf(buf, size, "s%d %c%d", (int)n->stage, letter, (int)n->micro);
  return true;
}

static int describe(const sl__pplan *p, int32_t t, char *buf, size_t size) {
  const sl__task *task = &p->tasks[t];
  char dev[64], pass[48];
  sl__dev_name(task->device, dev, sizeof dev);
  if (sl__pass_label(p, t, pass, sizeof pass))
    return snprintf(buf, size, "'%s' (machine %u %s, pass %s)", task->name,
                    (unsigned)task->machine, dev, pass);
  return snprintf(buf, size, "'%s' (machine %u %s)", task->name,
                  (unsigned)task->machine, dev);
}

sl_status sl__schedule_deadlock(const sl__pplan *p, const int32_t *cycle,
                                const bool *by_order, int32_t n) {
  char msg[3072];
  size_t len = (size_t)snprintf(
      msg, sizeof msg,
      "pipeline: schedule '%s' with %d micro-batches deadlocks:",
      sl__schedule_name(p->schedule), (int)p->micro_batches);
  /* The hops that make the cycle: each device's order, and data from
   * another device (a device's own chains of data are skipped). */
  for (int32_t i = 0; i < n && len < sizeof msg; i++) {
    const sl__task *a = &p->tasks[cycle[i]];
    const sl__task *b = &p->tasks[cycle[(i + 1) % n]];
    bool across = a->machine != b->machine || a->device != b->device;
    if (!by_order[i] && !across) continue;
    char x[400], y[400];
    describe(p, cycle[i], x, sizeof x);
    describe(p, cycle[(i + 1) % n], y, sizeof y);
    len += (size_t)snprintf(msg + len, sizeof msg - len, " %s %s %s;", x,
                            by_order[i] ? "runs after, by its device's order,"
                                        : "waits for data from",
                            y);
  }
  if (len < sizeof msg)
    snprintf(msg + len, sizeof msg - len,
             " which closes the cycle — check each op's stage "
             "(sl_graph_push_stage) against the order of its placements");
  return sl__fail(SL_EINVAL, "%s", msg);
}
