/* Nodes' parts of a plan (docs/plan.md "Parts"): over daemons each process
 * receives only what its machine runs. A part holds the machine's tasks,
 * the registers they read and write, and as proxies the other machines'
 * tasks they exchange registers with; every task carries the numbers the
 * whole plan gives it (its actor's index in its stream, each input's slot
 * and place among the register's readers, each register's wire number)
 * so that the messages between processes, each built from its own part,
 * agree. The program's part (the driver's) holds the ticks, feeds and
 * fetches. */
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"
#include "sbp_int.h"

uint32_t sl__task_runner(const sl__pplan *p, const sl__task *t) {
  return t->kind == SL__TASK_TICK || t->kind == SL__TASK_FEED ||
                 t->kind == SL__TASK_FETCH
             ? p->driver
             : t->machine;
}

/* ---- depths -----------------------------------------------------------------
 */

/* 1 + the deepest task producing one of its inputs, counting the members
 * of a group collective as one task (the deepest member's depth), so that
 * a group reading what another produced in the same step is deeper than
 * it. Inputs produced by later tasks are the previous step's (variables)
 * and do not count: lowering adds tasks in dependency order otherwise.
 * Spanning device groups launch in (depth, boxing node, step, group) order
 * (comm/coll/dev_group.c): a dependency order, close to the one the
 * devices get there in (a model's last gradient first), which keeps the
 * all-reduces overlapping the backward pass. */
sl_status sl__pplan_depths(sl__pplan *p) {
  for (int32_t t = 0; t < p->n_tasks; t++) {
    sl__task *task = &p->tasks[t];
    task->depth = 0;
    for (int32_t k = 0; k < task->n_in; k++) {
      int32_t q = p->regsts[task->in[k]].producer;
      if (q >= 0 && q < t)
        task->depth = SL_MAX(task->depth, p->tasks[q].depth + 1);
    }
    if (task->kind != SL__TASK_COLL && task->kind != SL__TASK_XCHG) continue;
    /* Every member of the group (of a send_recv or copy step: every task
     * of the step) takes the deepest member's depth. Lowering adds a
     * group's members one after the other (ticks may come between) and
     * before any reader of them. */
    int32_t first = t;
    for (int32_t m = t - 1; m >= 0; m--) {
      const sl__task *o = &p->tasks[m];
      if (o->kind == SL__TASK_TICK) continue;
      if (o->kind != task->kind || o->node != task->node ||
          o->step != task->step || o->group != task->group)
        break;
      task->depth = SL_MAX(task->depth, o->depth);
      first = m;
    }
    for (int32_t m = first; m < t; m++)
      if (p->tasks[m].kind == task->kind) p->tasks[m].depth = task->depth;
  }
  return SL_OK;
}

/* ---- the whole plan's numbers -----------------------------------------------
 */

typedef struct keyed {
  uint64_t key; /* (runner, device, stream) */
  int32_t task;
} keyed;

static int by_stream(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->task > y->task) - (x->task < y->task);
}

/* An input is the actor's next slot and the register's next reader, in
 * plan order, except a register the task also writes (a variable updated
 * in place: its output's, no slot) and one it reads twice (the first
 * read's). */
sl_status sl__pplan_number_inputs(sl__pplan *p) {
  int32_t *readers = sl__calloc((size_t)p->n_regsts + 1, sizeof *readers);
  if (!readers) return SL_ENOMEM;
  for (int32_t t = 0; t < p->n_tasks; t++) {
    sl__task *x = &p->tasks[t];
    x->in_slot =
        sl__arena_calloc(p->arena, (size_t)x->n_in + 1, sizeof(int32_t));
    x->in_pos =
        sl__arena_calloc(p->arena, (size_t)x->n_in + 1, sizeof(int32_t));
    if (!x->in_slot || !x->in_pos) {
      sl__free(readers);
      return SL_ENOMEM;
    }
    int32_t next = 0;
    for (int32_t k = 0; k < x->n_in; k++) {
      int32_t own = -1, dup = -1;
      for (int32_t j = 0; j < x->n_out && own < 0; j++)
        if (x->out[j] == x->in[k] && p->regsts[x->in[k]].count == 1) own = j;
      for (int32_t j = 0; j < k && dup < 0 && own < 0; j++)
        if (x->in[j] == x->in[k]) dup = j;
      x->in_slot[k] = own >= 0 ? -1 - own : dup >= 0 ? x->in_slot[dup] : next++;
      x->in_pos[k] = own >= 0   ? -1
                     : dup >= 0 ? x->in_pos[dup]
                                : readers[x->in[k]]++;
    }
  }
  sl__free(readers);
  return SL_OK;
}

/* Actors are numbered in plan order within their stream, as the nodes run
 * them (sl__task_runner). index: per task, malloc'd. */
static sl_status number_actors(const sl__pplan *p, int32_t **index) {
  int32_t nt = p->n_tasks;
  *index = sl__calloc((size_t)nt + 1, sizeof **index);
  keyed *order = sl__calloc((size_t)nt + 1, sizeof *order);
  if (!*index || !order) {
    sl__free(order);
    return SL_ENOMEM;
  }
  for (int32_t t = 0; t < nt; t++) {
    const sl__task *x = &p->tasks[t];
    order[t] = (keyed){(uint64_t)sl__task_runner(p, x) << 40 |
                           (uint64_t)x->device << 8 | x->stream,
                       t};
  }
  qsort(order, (size_t)nt, sizeof *order, by_stream);
  for (int32_t i = 0; i < nt; i++)
    (*index)[order[i].task] = i > 0 && order[i].key == order[i - 1].key
                                  ? (*index)[order[i - 1].task] + 1
                                  : 0;
  sl__free(order);
  return SL_OK;
}

/* ---- copies -----------------------------------------------------------------
 */

static const char *dup(sl__pplan *q, const char *s) {
  return s ? sl__arena_strdup(q->arena, s) : NULL;
}

static sl_status copy_nodes(const sl__pplan *p, sl__pplan *q) {
  q->n_nodes = p->n_nodes;
  q->nodes =
      sl__arena_calloc(q->arena, (size_t)p->n_nodes + 1, sizeof *q->nodes);
  if (!q->nodes) return SL_ENOMEM;
  for (int32_t i = 0; i < p->n_nodes; i++) {
    const sl__pnode *a = &p->nodes[i];
    sl__pnode *b = &q->nodes[i];
    *b = *a;
    b->value.placement = NULL;
    b->name = dup(q, a->name);
    b->kind = dup(q, a->kind);
    b->op = dup(q, a->op);
    b->placement = dup(q, a->placement);
    b->sbp = dup(q, a->sbp);
    b->shape = dup(q, a->shape);
    b->dtype = dup(q, a->dtype);
    b->load = dup(q, a->load);
    b->tensor = dup(q, a->tensor);
    b->file = dup(q, a->file);
    if (!b->name || !b->kind || !b->op || !b->placement || !b->sbp ||
        !b->shape || !b->dtype || (a->load && !b->load) ||
        (a->tensor && !b->tensor) || (a->file && !b->file))
      return SL_ENOMEM;
    for (int k = 0; k < a->attrs.n; k++)
      if (!(b->attrs.a[k].name = dup(q, a->attrs.a[k].name))) return SL_ENOMEM;
    if (a->value.placement)
      SL_CHECK(sl_placement_copy(a->value.placement, &b->value.placement));
    b->steps =
        sl__arena_calloc(q->arena, (size_t)a->n_steps + 1, sizeof *b->steps);
    if (!b->steps) return SL_ENOMEM;
    for (int32_t s = 0; s < a->n_steps; s++) {
      b->steps[s] = a->steps[s];
      b->steps[s].op = dup(q, a->steps[s].op);
      b->steps[s].reduce = dup(q, a->steps[s].reduce);
      b->steps[s].from = dup(q, a->steps[s].from);
      b->steps[s].to = dup(q, a->steps[s].to);
      if (!b->steps[s].op || !b->steps[s].reduce || !b->steps[s].from ||
          !b->steps[s].to)
        return SL_ENOMEM;
    }
  }
  return SL_OK;
}

static sl_status copy_coll(const sl__pcoll *a, sl__pplan *q, int32_t *out) {
  const sl__xgeom *g = &a->geom;
  sl__xgeom h;
  SL_CHECK(sl__xgeom_alloc(&h, g->n, g->n_pieces));
  h.dtype = g->dtype;
  h.op = g->op;
  size_t n = (size_t)g->n;
  memcpy(h.has_in, g->has_in, n * sizeof *h.has_in);
  memcpy(h.has_out, g->has_out, n * sizeof *h.has_out);
  memcpy(h.in_box, g->in_box, n * sizeof *h.in_box);
  memcpy(h.out_box, g->out_box, n * sizeof *h.out_box);
  memcpy(h.fill, g->fill, n * sizeof *h.fill);
  h.n_pieces = g->n_pieces;
  if (g->n_pieces)
    memcpy(h.pieces, g->pieces, (size_t)g->n_pieces * sizeof *h.pieces);
  sl__pcoll *c = sl__pplan_add_coll(q, &h);
  if (!c) return SL_ENOMEM;
  uint32_t *machine = c->machine, *device = c->device;
  sl__xgeom geom = c->geom;
  *c = *a;
  c->machine = machine;
  c->device = device;
  c->geom = geom;
  memcpy(machine, a->machine, n * sizeof *machine);
  memcpy(device, a->device, n * sizeof *device);
  c->name = dup(q, a->name);
  *out = q->n_colls - 1;
  return c->name ? SL_OK : SL_ENOMEM;
}

/* ---- parts ------------------------------------------------------------------
 */

typedef struct part {
  const sl__pplan *p;
  sl__pplan *q;
  int32_t *index;   /* per task: its actor's index in its stream */
  bool *local;      /* per task */
  int32_t *task_at; /* plan task -> part task, -1 */
  int32_t *reg_at;  /* plan register -> part register, -1 */
  int32_t *coll_at, *mem_at;
} part;

static bool read_here(const part *P, int32_t r) {
  const sl__regst *g = &P->p->regsts[r];
  for (int32_t c = 0; c < g->n_cons; c++)
    if (P->local[g->cons[c]]) return true;
  return false;
}

/* Which tasks and registers the part holds (runner: whose tasks are
 * local; -1: none's, a machine beyond the plan's). */
static void select_part(part *P, int64_t runner) {
  const sl__pplan *p = P->p;
  bool idle = true;
  for (int32_t t = 0; t < p->n_tasks; t++) {
    P->local[t] = sl__task_runner(p, &p->tasks[t]) == runner;
    idle &= !P->local[t];
  }
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const sl__regst *g = &p->regsts[r];
    bool mine = P->local[g->producer], read = read_here(P, r);
    if (!mine && !read) continue;
    P->reg_at[r] = 0; /* kept; numbered below */
    /* A proxy: the other end of a register crossing to or from here. */
    if (!mine) P->task_at[g->producer] = 0;
    for (int32_t c = 0; mine && c < g->n_cons; c++)
      if (!P->local[g->cons[c]]) P->task_at[g->cons[c]] = 0;
  }
  for (int32_t t = 0; t < p->n_tasks; t++) {
    if (P->local[t]) P->task_at[t] = 0;
    /* A machine with nothing to run still takes part in the job (its
     * actor plan may not be empty): it names the program's ticks. */
    if (idle && p->tasks[t].kind == SL__TASK_TICK)
      P->task_at[t] = P->reg_at[p->tasks[t].out[0]] = 0;
  }
}

static sl_status copy_task(part *P, int32_t t) {
  const sl__pplan *p = P->p;
  sl__pplan *q = P->q;
  const sl__task *a = &p->tasks[t];
  bool local = P->local[t];
  sl__task *b = sl__pplan_add_task(q);
  if (!b) return SL_ENOMEM;
  int32_t id = q->n_tasks - 1;
  *b = *a;
  b->proxy = !local;
  b->actor_index = P->index[t];
  b->name = dup(q, a->name);
  b->in = sl__arena_calloc(q->arena, (size_t)a->n_in + 1, sizeof *b->in);
  b->out = sl__arena_calloc(q->arena, (size_t)a->n_out + 1, sizeof *b->out);
  b->in_slot = sl__arena_calloc(q->arena, (size_t)a->n_in + 1, sizeof(int32_t));
  b->in_pos = sl__arena_calloc(q->arena, (size_t)a->n_in + 1, sizeof(int32_t));
  if (!b->name || !b->in || !b->out || !b->in_slot || !b->in_pos)
    return SL_ENOMEM;
  /* A proxy keeps only the registers it exchanges with this machine. */
  b->n_in = b->n_out = 0;
  for (int32_t k = 0; k < a->n_in; k++) {
    int32_t r = a->in[k];
    if (!local && !P->local[p->regsts[r].producer]) continue;
    b->in_slot[b->n_in] = a->in_slot[k];
    b->in_pos[b->n_in] = a->in_pos[k];
    b->in[b->n_in++] = P->reg_at[r];
  }
  for (int32_t k = 0; k < a->n_out; k++)
    if (P->reg_at[a->out[k]] >= 0) b->out[b->n_out++] = P->reg_at[a->out[k]];
  if (!local) {
    b->tick_slot = b->coll = -1;
    b->engine = SL__ENGINE_NONE;
    b->n_args = 0;
    b->args = NULL;
    return SL_OK;
  }
  if (a->n_args) {
    b->args = sl__arena_calloc(q->arena, (size_t)a->n_args, sizeof *b->args);
    if (!b->args) return SL_ENOMEM;
    memcpy(b->args, a->args, (size_t)a->n_args * sizeof *b->args);
  }
  if (a->coll >= 0) {
    if (P->coll_at[a->coll] < 0)
      SL_CHECK(copy_coll(&p->colls[a->coll], q, &P->coll_at[a->coll]));
    q->tasks[id].coll = P->coll_at[a->coll];
  }
  return SL_OK;
}

static sl_status copy_part(part *P, uint32_t node) {
  const sl__pplan *p = P->p;
  sl__pplan *q = P->q;
  q->machines = p->machines;
  q->driver = p->driver;
  q->micro_batches = p->micro_batches;
  q->schedule = p->schedule;
  q->part = (int32_t)node;
  SL_CHECK(copy_nodes(p, q));
  int32_t nr = 0, nm = 0;
  for (int32_t r = 0; r < p->n_regsts; r++)
    if (P->reg_at[r] >= 0) P->reg_at[r] = nr++;
  /* This machine's memory; the registers placed there are its own. */
  q->mem = sl__calloc((size_t)p->n_mem + 1, sizeof *q->mem);
  if (!q->mem) return SL_ENOMEM;
  for (int32_t m = 0; m < p->n_mem; m++)
    if (p->mem[m].machine == node) {
      P->mem_at[m] = nm;
      q->mem[nm++] = p->mem[m];
    }
  q->n_mem = nm;
  int32_t nt = 0;
  for (int32_t t = 0; t < p->n_tasks; t++)
    if (P->task_at[t] >= 0) P->task_at[t] = nt++;
  for (int32_t t = 0; t < p->n_tasks; t++)
    if (P->task_at[t] >= 0) SL_CHECK(copy_task(P, t));
  for (int32_t r = 0; r < p->n_regsts; r++) {
    if (P->reg_at[r] < 0) continue;
    const sl__regst *a = &p->regsts[r];
    sl__regst *b = sl__pplan_add_regst(q);
    if (!b) return SL_ENOMEM;
    *b = *a;
    b->name = dup(q, a->name);
    if (!b->name) return SL_ENOMEM;
    b->producer = P->task_at[a->producer];
    b->wire = a->wire;
    b->cons = NULL;
    b->n_cons = 0;
    b->mem = a->mem >= 0 && P->local[a->producer] ? P->mem_at[a->mem] : -1;
    if (b->mem < 0) b->offset = 0;
  }
  q->ctrl = sl__calloc((size_t)p->n_ctrl + 1, sizeof *q->ctrl);
  if (!q->ctrl) return SL_ENOMEM;
  for (int32_t i = 0; i < p->n_ctrl; i++) /* both ends on one device */
    if (P->local[p->ctrl[i].from])
      q->ctrl[q->n_ctrl++] =
          (sl__ctrl){P->task_at[p->ctrl[i].from], P->task_at[p->ctrl[i].to],
                     p->ctrl[i].closing};
  return sl__pplan_validate(q);
}

sl_status sl__pplan_part(const sl__pplan *p, int node, sl__pplan **out) {
  *out = NULL;
  if (p->part >= 0)
    return sl__fail(SL_EINVAL, "plan: already a part (of machine %d)",
                    (int)p->part);
  if (node >= (int)SL_ACTOR_MAX_NODES)
    return sl__fail(SL_EINVAL, "plan: no machine %d", node);
  /* The program runs the driver's tasks; a machine beyond the plan's none
   * (its number may be the driver's). */
  int64_t runner = node < 0                       ? (int64_t)p->driver
                   : (uint32_t)node < p->machines ? node
                                                  : -1;
  if (node < 0) node = (int)p->driver;
  part P;
  memset(&P, 0, sizeof P);
  P.p = p;
  int32_t nt = p->n_tasks, nr = p->n_regsts;
  P.local = sl__calloc((size_t)nt + 1, sizeof *P.local);
  P.task_at = sl__calloc((size_t)nt + 1, sizeof *P.task_at);
  P.reg_at = sl__calloc((size_t)nr + 1, sizeof *P.reg_at);
  P.coll_at = sl__calloc((size_t)p->n_colls + 1, sizeof *P.coll_at);
  P.mem_at = sl__calloc((size_t)p->n_mem + 1, sizeof *P.mem_at);
  sl_status st = SL_OK;
  if (!P.local || !P.task_at || !P.reg_at || !P.coll_at || !P.mem_at)
    st = SL_ENOMEM;
  if (st == SL_OK) st = number_actors(p, &P.index);
  if (st == SL_OK) st = sl__pplan_create(&P.q);
  if (st == SL_OK) {
    for (int32_t i = 0; i < nt; i++)
      P.task_at[i] = -1;
    for (int32_t i = 0; i < nr; i++)
      P.reg_at[i] = -1;
    for (int32_t i = 0; i < p->n_colls; i++)
      P.coll_at[i] = -1;
    for (int32_t i = 0; i < p->n_mem; i++)
      P.mem_at[i] = -1;
    select_part(&P, runner);
    st = copy_part(&P, (uint32_t)node);
    if (st != SL_OK) sl__fail_context(st, "plan: machine %d's part: ", node);
  }
  sl__free(P.index);
  sl__free(P.local);
  sl__free(P.task_at);
  sl__free(P.reg_at);
  sl__free(P.coll_at);
  sl__free(P.mem_at);
  if (st != SL_OK) {
    sl__pplan_destroy(P.q);
    return st;
  }
  *out = P.q;
  return SL_OK;
}
