/* Lowering and register planning: a compiled graph becomes tasks and
 * register descriptors (docs/plan.md).
 *
 *   op node        one task per rank of its placement (compute stream)
 *   input          one feed task per rank (compute), gated by the tick
 *   variable       no task when it has an update: its registers (2, the
 *                  first ready with the initial value) are written by the
 *                  task producing the update, which also reads them — the
 *                  update loop; a variable without update gets a const task
 *   boxing         per step, one task per plan rank: group collectives on
 *                  the collective stream, send_recv/copy as exchange tasks
 *                  and slice/zero as local tasks on the copy stream
 *   fetch          one task per rank holding a distinct part of the value
 *                  (coordinate 0 on every broadcast mesh axis), copy stream
 *   CUDA ranks     boxing steps, feeds and fetches run on the device's host
 *                  side (SL__DEV_HOST): a copy task (the device's copy
 *                  stream) moves each shard from the device before them
 *                  and onto the device after them; except a boxing of
 *                  all-reduces, which runs on the GPUs (collective
 *                  stream, NCCL; groups may span machines)
 *   tick           one per device, on the driver: every task that starts
 *                  from nothing reads it, and so do the producers of
 *                  variables, so nothing runs more than a step ahead of
 *                  the steps the program asked for.
 *
 * Register counts: 1, except variables (initial 1 + 1 free, for the loop),
 * feeds and ticks (2: the next step's data can be cut while this one
 * computes). */
#include <string.h>

#include "lower_int.h"
#include "sbp_int.h"

#define FEED_COUNT 2
#define TICK_COUNT 2
#define VAR_COUNT 2

const char *sl__task_kind_name(sl__task_kind k) {
  static const char *const names[] = {
      "op",         "feed",  "fetch",    "const", "var_copy",
      "collective", "local", "exchange", "tick",  "copy"};
  return (int)k >= 0 && (int)k < SL__TASK_KIND_COUNT ? names[k] : "?";
}

/* ---- plan storage -------------------------------------------------------- */

sl_status sl__pplan_create(sl__pplan **out) {
  *out = NULL;
  sl__pplan *p;
  if (SL_NEW(p) != SL_OK) return SL_ENOMEM;
  if (sl__arena_create(0, &p->arena) != SL_OK) {
    sl__free(p);
    return SL_ENOMEM;
  }
  p->micro_batches = 1;
  p->part = -1;
  *out = p;
  return SL_OK;
}

void sl__pplan_destroy(sl__pplan *p) {
  if (!p) return;
  sl__free(p->tasks);
  sl__free(p->regsts);
  sl__free(p->ctrl);
  sl__free(p->mem);
  sl__pplan_free_colls(p);
  sl__pplan_free_nodes(p);
  sl__arena_destroy(p->arena);
  sl__free(p);
}

sl__task *sl__pplan_add_task(sl__pplan *p) {
  if (p->n_tasks == p->cap_tasks) {
    int32_t cap = p->cap_tasks ? p->cap_tasks * 2 : 64;
    sl__task *t = sl__reallocarray(p->tasks, (size_t)cap, sizeof *t);
    if (!t) return NULL;
    p->tasks = t;
    p->cap_tasks = cap;
  }
  sl__task *t = &p->tasks[p->n_tasks++];
  memset(t, 0, sizeof *t);
  t->node = t->rank = t->step = t->group = t->member = t->tick_slot = -1;
  t->coll = t->actor_index = -1;
  return t;
}

sl__regst *sl__pplan_add_regst(sl__pplan *p) {
  if (p->n_regsts == p->cap_regsts) {
    int32_t cap = p->cap_regsts ? p->cap_regsts * 2 : 64;
    sl__regst *r = sl__reallocarray(p->regsts, (size_t)cap, sizeof *r);
    if (!r) return NULL;
    p->regsts = r;
    p->cap_regsts = cap;
  }
  sl__regst *r = &p->regsts[p->n_regsts++];
  memset(r, 0, sizeof *r);
  r->producer = r->out_slot = r->value = r->rank = r->var_node = r->mem = -1;
  r->count = 1;
  r->wire = p->n_regsts - 1;
  return r;
}

sl_status sl__pplan_validate(sl__pplan *p) {
  if (p->driver < p->machines || p->machines == 0 ||
      p->machines >= SL_ACTOR_MAX_NODES)
    return sl__fail(SL_EINVAL, "plan: %u machines, driver %u", p->machines,
                    p->driver);
  for (int32_t r = 0; r < p->n_regsts; r++) {
    sl__regst *g = &p->regsts[r];
    g->n_cons = 0;
    if (g->producer < 0 || g->producer >= p->n_tasks)
      return sl__fail(SL_EINVAL, "plan: register %d ('%s') has no producer",
                      (int)r, g->name ? g->name : "?");
    const sl__task *t = &p->tasks[g->producer];
    /* A proxy keeps only some outputs: out_slot is its slot in the whole
     * plan. */
    bool written = false;
    for (int32_t k = 0; t->proxy && k < t->n_out; k++)
      written |= t->out[k] == r;
    if (g->out_slot < 0 ||
        (t->proxy ? !written
                  : g->out_slot >= t->n_out || t->out[g->out_slot] != r))
      return sl__fail(SL_EINVAL,
                      "plan: register %d ('%s') is not output %d of task '%s'",
                      (int)r, g->name ? g->name : "?", (int)g->out_slot,
                      t->name ? t->name : "?");
    if (g->count < 1 || g->initial < 0 || g->initial >= g->count + 1 ||
        g->bytes < 0)
      return sl__fail(SL_EINVAL, "plan: register '%s': count %d, initial %d",
                      g->name ? g->name : "?", (int)g->count, (int)g->initial);
  }
  int32_t *ncons = sl__calloc((size_t)p->n_regsts + 1, sizeof *ncons);
  if (!ncons) return SL_ENOMEM;
  sl_status st = SL_OK;
  for (int32_t i = 0; i < p->n_tasks && st == SL_OK; i++) {
    const sl__task *t = &p->tasks[i];
    if (!t->name || (int)t->kind < 0 || t->kind >= SL__TASK_KIND_COUNT ||
        t->stream >= SL_STREAMS_DEFAULT || t->device >= SL_ACTOR_MAX_DEVICES ||
        t->machine >= p->machines || t->tick_slot < -1 ||
        t->tick_slot >= t->n_in) {
      st = sl__fail(SL_EINVAL, "plan: task %d ('%s') is malformed", (int)i,
                    t->name ? t->name : "?");
      break;
    }
    for (int32_t k = 0; k < t->n_in; k++) {
      if (t->in[k] < 0 || t->in[k] >= p->n_regsts) {
        st = sl__fail(SL_EINVAL, "plan: task '%s' reads register %d", t->name,
                      (int)t->in[k]);
        break;
      }
      ncons[t->in[k]]++;
    }
    for (int32_t k = 0; k < t->n_out && st == SL_OK; k++)
      if (t->out[k] < 0 || t->out[k] >= p->n_regsts ||
          p->regsts[t->out[k]].producer != i)
        st = sl__fail(SL_EINVAL, "plan: task '%s' writes register %d", t->name,
                      (int)t->out[k]);
  }
  for (int32_t r = 0; r < p->n_regsts && st == SL_OK; r++) {
    sl__regst *g = &p->regsts[r];
    g->cons = sl__arena_calloc(p->arena, (size_t)ncons[r] + 1, sizeof *g->cons);
    if (!g->cons) st = SL_ENOMEM;
  }
  for (int32_t i = 0; i < p->n_tasks && st == SL_OK; i++) {
    const sl__task *t = &p->tasks[i];
    for (int32_t k = 0; k < t->n_in; k++) {
      sl__regst *g = &p->regsts[t->in[k]];
      g->cons[g->n_cons++] = i;
    }
  }
  sl__free(ncons);
  return st;
}

/* ---- lowering --------------------------------------------------------------
 */

typedef struct tick_ref {
  uint32_t machine, device;
  int32_t reg;
} tick_ref;

typedef struct lower {
  const sl_graph *g;
  sl__pplan *p;
  int32_t **shard; /* per value: register of each placement rank */
  int32_t *var_of; /* per value: the variable node it is the direct
                      update of, else -1 */
  /* Per value: computed from updated variables alone, by tasks without
   * the tick. A variable has one version more than the steps (its first),
   * so such a value's tasks fire once more than the step's others. */
  bool *ungated;
  tick_ref *ticks; /* one per (machine, device) */
  int32_t n_ticks, cap_ticks;
} lower;

static const char *adup(lower *L, const char *fmt, ...) SL__PRINTF(2, 3);
static const char *adup(lower *L, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return sl__arena_strdup(L->p->arena, buf);
}

static int32_t *arena_ints(lower *L, int32_t n) {
  return sl__arena_calloc(L->p->arena, (size_t)n + 1, sizeof(int32_t));
}

void sl__dev_name(uint32_t id, char *buf, size_t n) {
  sl__dev_class c = sl__dev_class_of(id);
  snprintf(buf, n, "%s:%d%s", c == SL__DEV_CLASS_CPU ? "cpu" : "cuda",
           sl__dev_index(id), c == SL__DEV_CLASS_HOST ? "/host" : "");
}

/* Where placement rank r of p runs (a plan device id). */
static sl_status rank_where(const sl_placement *p, int r, uint32_t *machine,
                            uint32_t *device) {
  int node = 0, dev = 0;
  SL_CHECK(sl_placement_rank_device(p, r, &node, &dev));
  if (node < 0 || node >= (int)SL_ACTOR_MAX_NODES - 1 || dev < 0 ||
      dev >= (int)SL__DEV_CUDA)
    return sl__fail(SL_EUNSUPPORTED,
                    "lowering: device %s:%d of node %d is beyond the "
                    "runtime's ids (devices 0 to %u of each type)",
                    sl_device_type_name(sl_placement_device_type(p)), dev, node,
                    SL__DEV_CUDA - 1);
  *machine = (uint32_t)node;
  *device = (uint32_t)dev;
  if (sl_placement_device_type(p) == SL_DEVICE_CUDA) *device += SL__DEV_CUDA;
  return SL_OK;
}

/* A task with room for n_in inputs and n_out outputs (filled later). */
static sl__task *new_task(lower *L, sl__task_kind kind, const char *name,
                          int32_t node, int32_t rank, uint32_t machine,
                          uint32_t device, sl_stream_kind stream, int32_t n_in,
                          int32_t n_out) {
  sl__task *t = sl__pplan_add_task(L->p);
  if (!t || !name) return NULL;
  t->kind = kind;
  t->name = name;
  t->node = node;
  t->rank = rank;
  t->machine = machine;
  t->device = device;
  t->stream = (uint32_t)stream;
  t->in = arena_ints(L, n_in);
  t->out = arena_ints(L, n_out);
  if (!t->in || !t->out) return NULL;
  if (machine + 1 > L->p->machines) L->p->machines = machine + 1;
  return t;
}

static int32_t task_id(lower *L, const sl__task *t) {
  return (int32_t)(t - L->p->tasks);
}

/* A register for a shard of shape `shape` (count 1), not yet produced. */
static int32_t new_regst(lower *L, const char *name, const sl_shape *shape,
                         sl_dtype dt, uint32_t machine, uint32_t device) {
  sl__regst *r = sl__pplan_add_regst(L->p);
  if (!r || !name) return -1;
  r->name = name;
  r->shape = *shape;
  r->dtype = dt;
  r->bytes = sl_shape_numel(shape) * (int64_t)sl_dtype_size(dt);
  r->machine = machine;
  r->device = device;
  return (int32_t)(r - L->p->regsts);
}

static void set_output(lower *L, sl__task *t, int32_t slot, int32_t reg) {
  t->out[slot] = reg;
  sl__regst *r = &L->p->regsts[reg];
  r->producer = task_id(L, t);
  r->out_slot = slot;
}

static sl_shape slice_shape(const sl_slice *s) {
  sl_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++)
    sh.dims[d] = s->extent[d];
  return sh;
}

/* Copies register `from` to register `to` (-1: a new register on the host
 * side of from's CUDA device) with a copy task on the CUDA device's copy
 * stream; *out is `to`, *task (may be NULL) the task. */
static sl_status copy_task(lower *L, const char *name, int32_t node,
                           int32_t rank, int32_t from, int32_t to,
                           int32_t *task, int32_t *out) {
  const sl__regst *f = &L->p->regsts[from];
  uint32_t machine = f->machine;
  uint32_t cuda = sl__dev_class_of(f->device) == SL__DEV_CLASS_CUDA
                      ? f->device
                      : L->p->regsts[to].device;
  sl_shape shape = f->shape;
  sl_dtype dt = f->dtype;
  sl__task *t = new_task(L, SL__TASK_COPY, name, node, rank, machine, cuda,
                         SL_STREAM_COPY, 1, 1);
  if (!t) return SL_ENOMEM;
  int32_t id = task_id(L, t);
  if (to < 0)
    to = new_regst(L, name, &shape, dt, machine, sl__dev_host_side(cuda));
  if (to < 0) return SL_ENOMEM;
  t = &L->p->tasks[id];
  t->in[t->n_in++] = from;
  t->n_out = 1;
  set_output(L, t, 0, to);
  *out = to;
  if (task) *task = id;
  return SL_OK;
}

static bool on_cuda(lower *L, int32_t reg) {
  return sl__dev_class_of(L->p->regsts[reg].device) == SL__DEV_CLASS_CUDA;
}

/* The tick register of (machine, device), creating its task (which runs on
 * the driver; its `machine` is the machine it serves). The task array may
 * move: callers re-fetch task pointers after this. */
static sl_status tick_of(lower *L, uint32_t machine, uint32_t device,
                         int32_t *out) {
  for (int32_t i = 0; i < L->n_ticks; i++)
    if (L->ticks[i].machine == machine && L->ticks[i].device == device) {
      *out = L->ticks[i].reg;
      return SL_OK;
    }
  if (L->n_ticks == L->cap_ticks) {
    int32_t cap = L->cap_ticks ? L->cap_ticks * 2 : 8;
    tick_ref *t = sl__reallocarray(L->ticks, (size_t)cap, sizeof *t);
    if (!t) return SL_ENOMEM;
    L->ticks = t;
    L->cap_ticks = cap;
  }
  const char *name = adup(L, "tick@n%u.d%u", machine, device);
  sl__task *t = new_task(L, SL__TASK_TICK, name, -1, -1, machine, device,
                         SL_STREAM_COMPUTE, 0, 1);
  if (!t) return SL_ENOMEM;
  int32_t id = task_id(L, t);
  sl_shape none = {0};
  int32_t r = new_regst(L, name, &none, SL_DTYPE_U8, machine, device);
  if (r < 0) return SL_ENOMEM;
  L->p->regsts[r].bytes = 0;
  L->p->regsts[r].count = TICK_COUNT;
  t = &L->p->tasks[id];
  t->n_out = 1;
  set_output(L, t, 0, r);
  L->ticks[L->n_ticks++] = (tick_ref){machine, device, r};
  *out = r;
  return SL_OK;
}

/* Appends the device's tick as the task's last input. */
static sl_status add_tick(lower *L, int32_t task) {
  sl__task *t = &L->p->tasks[task];
  if (t->tick_slot >= 0) return SL_OK;
  uint32_t m = t->machine, d = t->device;
  int32_t reg;
  SL_CHECK(tick_of(L, m, d, &reg));
  t = &L->p->tasks[task];
  t->tick_slot = t->n_in;
  t->in[t->n_in++] = reg;
  return SL_OK;
}

static int32_t *shard_of(lower *L, int32_t v) {
  if (!L->shard[v]) {
    const sl__value *val = sl__graph_value(L->g, v);
    int n = sl_placement_size(val->placement);
    L->shard[v] = arena_ints(L, n);
    if (L->shard[v])
      for (int r = 0; r < n; r++)
        L->shard[v][r] = -1;
  }
  return L->shard[v];
}

static const char *value_label(lower *L, int32_t v) {
  const sl__value *val = sl__graph_value(L->g, v);
  const sl__node *n = sl__graph_node(L->g, val->producer);
  if (n->n_out > 1) return adup(L, "%s:%d", n->name, (int)val->index);
  return n->name;
}

/* A new register for rank r's shard of value v (or the variable's
 * register when v is the direct update of a variable). */
static sl_status value_regst(lower *L, int32_t v, int r, int32_t *out) {
  const sl__value *val = sl__graph_value(L->g, v);
  int32_t *sh = shard_of(L, v);
  if (!sh) return SL_ENOMEM;
  if (L->var_of[v] >= 0) {
    const sl__node *var = sl__graph_node(L->g, L->var_of[v]);
    *out = L->shard[var->out[0]][r];
    sh[r] = -1; /* readers of the update value itself: none (checked) */
    return SL_OK;
  }
  sl_slice s;
  SL_CHECK(sl_local_slice(&val->meta.shape, val->placement, &val->sbp, r, &s));
  uint32_t m, d;
  SL_CHECK(rank_where(val->placement, r, &m, &d));
  sl_shape shape = slice_shape(&s);
  int32_t reg = new_regst(L, adup(L, "%s@r%d", value_label(L, v), r), &shape,
                          val->meta.dtype, m, d);
  if (reg < 0) return SL_ENOMEM;
  sl__regst *rg = &L->p->regsts[reg];
  rg->value = v;
  rg->rank = r;
  sh[r] = reg;
  *out = reg;
  return SL_OK;
}

/* The input of an optimizer update whose buffer output j may be (its
 * kernel reads every chunk before writing it, kernels/cpu/optim.c), or -1:
 * sgd_update (w, g, m) -> (w', m'), adam_update (w, g, m, v) -> (w', m',
 * v'). */
static int inplace_input(const sl__node *p, int j) {
  if (p->kind != SL__NODE_OP || !p->op) return -1;
  if (strcmp(p->op->name, "sgd_update") == 0)
    return j == 0 ? 0 : j == 1 ? 2 : -1;
  if (strcmp(p->op->name, "adam_update") == 0)
    return j == 0 ? 0 : j <= 2 ? j + 1 : -1;
  return -1;
}

/* Variables with an update get their registers before anything reads
 * them. The update's producer writes them directly when the update value
 * has no other use; otherwise a var_copy task does (lowered at the end).
 *
 * Written directly, a variable is either updated in place — one register:
 * the optimizer update fires once every reader has returned the current
 * version, and computes the next one in that same register (the session
 * binds its input to its output) — or boxed into its layout (ZeRO's
 * all-gather of a sharded update), also into one register, which the
 * boxing fills once every reader has returned it: a second copy of the
 * weight would undo the memory sharding saves. Any other producer gets an
 * update loop of two registers: version k+1 goes into the free one while
 * version k is read. */
static sl_status plan_variables(lower *L, bool *needs_copy) {
  const sl_graph *g = L->g;
  int32_t nv = sl__graph_value_count(g), nn = sl__graph_node_count(g);
  int32_t *uses = sl__calloc((size_t)nv + 1, sizeof *uses);
  if (!uses) return SL_ENOMEM;
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *n = sl__graph_node(g, i);
    for (int k = 0; k < n->n_in; k++)
      uses[n->in[k]]++;
    if (n->kind == SL__NODE_VARIABLE && n->update >= 0) uses[n->update]++;
  }
  sl_status st = SL_OK;
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    const sl__node *n = sl__graph_node(g, i);
    needs_copy[i] = false;
    if (n->kind != SL__NODE_VARIABLE || n->update < 0) continue;
    const sl__value *var = sl__graph_value(g, n->out[0]);
    const sl__value *u = sl__graph_value(g, n->update);
    if (!sl_placement_equal(var->placement, u->placement) ||
        !sl_nd_sbp_equal(&var->sbp, &u->sbp)) {
      st = sl__fail(SL_EINTERNAL,
                    "lowering: variable '%s': its update has another layout",
                    n->name);
      break;
    }
    const sl__node *prod = sl__graph_node(g, u->producer);
    bool direct = uses[n->update] == 1 && L->var_of[n->update] < 0 &&
                  (prod->kind == SL__NODE_OP ||
                   (prod->kind == SL__NODE_BOXING &&
                    sl_boxing_route_step_count(prod->boxing) > 0));
    needs_copy[i] = !direct;
    if (direct) L->var_of[n->update] = i;
    int k = direct ? inplace_input(prod, u->index) : -1;
    bool in_place = k >= 0 && prod->in[k] == n->out[0];
    bool boxed = direct && prod->kind == SL__NODE_BOXING;
    int32_t *sh = shard_of(L, n->out[0]);
    if (!sh) {
      st = SL_ENOMEM;
      break;
    }
    for (int r = 0; r < sl_placement_size(var->placement) && st == SL_OK; r++) {
      sl_slice s;
      uint32_t m, d;
      st = sl_local_slice(&var->meta.shape, var->placement, &var->sbp, r, &s);
      if (st == SL_OK) st = rank_where(var->placement, r, &m, &d);
      if (st != SL_OK) break;
      sl_shape shape = slice_shape(&s);
      int32_t reg = new_regst(L, adup(L, "%s@r%d", n->name, r), &shape,
                              var->meta.dtype, m, d);
      if (reg < 0) {
        st = SL_ENOMEM;
        break;
      }
      sl__regst *rg = &L->p->regsts[reg];
      rg->value = n->out[0];
      rg->rank = r;
      rg->count = in_place || boxed ? 1 : VAR_COUNT;
      rg->initial = 1;
      rg->var_node = i;
      sh[r] = reg;
    }
  }
  sl__free(uses);
  return st;
}

static sl_status lower_input(lower *L, int32_t ni, const sl__node *n) {
  const sl__value *v = sl__graph_value(L->g, n->out[0]);
  for (int r = 0; r < sl_placement_size(v->placement); r++) {
    uint32_t m, d;
    SL_CHECK(rank_where(v->placement, r, &m, &d));
    sl__task_kind kind =
        n->kind == SL__NODE_INPUT ? SL__TASK_FEED : SL__TASK_CONST;
    /* A CUDA shard is fed on the device's host side, then copied. */
    bool via_host = kind == SL__TASK_FEED && sl__dev_host_side(d) != d;
    sl__task *t =
        new_task(L, kind, adup(L, "%s@r%d", n->name, r), ni, r, m,
                 via_host ? sl__dev_host_side(d) : d, SL_STREAM_COMPUTE, 1, 1);
    if (!t) return SL_ENOMEM;
    int32_t id = task_id(L, t), reg;
    SL_CHECK(value_regst(L, n->out[0], r, &reg));
    int32_t fed = reg;
    if (via_host) {
      sl_shape shape = L->p->regsts[reg].shape;
      const char *name = adup(L, "%s.h2d@r%d", n->name, r);
      fed = new_regst(L, name, &shape, v->meta.dtype, m, sl__dev_host_side(d));
      if (fed < 0) return SL_ENOMEM;
      SL_CHECK(copy_task(L, name, ni, r, fed, reg, NULL, &reg));
    }
    t = &L->p->tasks[id];
    t->n_out = 1;
    set_output(L, t, 0, fed);
    if (kind == SL__TASK_FEED) L->p->regsts[fed].count = FEED_COUNT;
    SL_CHECK(add_tick(L, id));
  }
  return SL_OK;
}

static sl_status lower_op(lower *L, int32_t ni, const sl__node *n) {
  int nr = sl_placement_size(n->placement);
  for (int k = 0; k < n->n_in; k++) {
    const sl__value *v = sl__graph_value(L->g, n->in[k]);
    if (!sl_placement_equal(v->placement, n->placement) ||
        !sl_nd_sbp_equal(&v->sbp, &n->in_sbp[k]) || !L->shard[n->in[k]])
      return sl__fail(SL_EINTERNAL,
                      "lowering: op '%s': input %d is not in the layout the "
                      "op consumes (compile should have boxed it)",
                      n->name, k);
  }
  /* A source and a variable's update read the tick (below); any other op
   * is as gated as its inputs. */
  bool ungated = n->n_in > 0;
  for (int k = 0; k < n->n_in; k++)
    ungated &= L->ungated[n->in[k]];
  for (int j = 0; j < n->n_out; j++)
    ungated &= L->var_of[n->out[j]] < 0;
  for (int j = 0; j < n->n_out; j++)
    L->ungated[n->out[j]] = ungated;
  for (int r = 0; r < nr; r++) {
    uint32_t m, d;
    SL_CHECK(rank_where(n->placement, r, &m, &d));
    sl__task *t = new_task(L, SL__TASK_OP, adup(L, "%s@r%d", n->name, r), ni, r,
                           m, d, SL_STREAM_COMPUTE, n->n_in + 1, n->n_out);
    if (!t) return SL_ENOMEM;
    int32_t id = task_id(L, t);
    for (int k = 0; k < n->n_in; k++) {
      int32_t reg = L->shard[n->in[k]][r];
      if (reg < 0)
        return sl__fail(SL_EINTERNAL,
                        "lowering: op '%s' reads a value with "
                        "no register",
                        n->name);
      t->in[t->n_in++] = reg;
    }
    bool var_out = false;
    for (int j = 0; j < n->n_out; j++) {
      int32_t reg;
      var_out |= L->var_of[n->out[j]] >= 0;
      SL_CHECK(value_regst(L, n->out[j], r, &reg));
      t = &L->p->tasks[id];
      t->n_out = j + 1;
      set_output(L, t, j, reg);
    }
    if (n->n_in == 0 || var_out) SL_CHECK(add_tick(L, id));
  }
  return SL_OK;
}

/* Whether a boxing runs on its GPUs: when every plan rank is a CUDA
 * device. Each step is then NCCL's collective where NCCL computes it as it
 * stands, and grouped NCCL sends and receives with packing on the devices
 * otherwise (comm/coll/dev_xchg.c); slice and zero steps are device work
 * alone. Anything touching a CPU rank runs on the host sides. */
static bool boxing_on_gpu(const sl_boxing_route *bp) {
  for (int q = 0; q < sl_boxing_route_rank_count(bp); q++)
    if (sl_boxing_route_rank_device_type(bp, q) != SL_DEVICE_CUDA) return false;
  return true;
}

/* Who runs a group of a boxing step (ranks NULL: plan ranks 0..n-1, an
 * exchange's): the devices on GPUs, else this process when every member
 * is on one machine, else the daemons' data plane. */
static sl__engine boxing_engine(const sl_boxing_route *bp, bool gpu, int n,
                                const int *ranks) {
  if (gpu) return SL__ENGINE_DEVICE;
  int first = -1;
  for (int k = 0; k < n; k++) {
    int node;
    sl_boxing_route_rank_device(bp, ranks ? ranks[k] : k, &node, NULL);
    if (first >= 0 && node != first) return SL__ENGINE_NODES;
    first = node;
  }
  return SL__ENGINE_INPROC;
}

/* After a boxing's tasks (from `first` on): a value with one version more
 * than the steps (ungated) may be boxed to a member that reads nothing but
 * the tick (a broadcast from the devices holding a weight to others), and
 * then that member runs once per step while the members reading the value
 * would run once more, into a collective whose other members never come
 * (sl_session_finish would wait for it forever). So when any task of the
 * boxing reads the tick, every task reading the value does too. */
static sl_status gate_boxing(lower *L, const sl__node *n, int32_t first) {
  bool ungated = L->ungated[n->in[0]], ticked = false;
  int32_t end = L->p->n_tasks;
  for (int32_t i = first; i < end; i++)
    ticked |= L->p->tasks[i].tick_slot >= 0;
  L->ungated[n->out[0]] = ungated && !ticked;
  if (!ungated || !ticked) return SL_OK;
  const int32_t *shard = L->shard[n->in[0]];
  int ns = sl_placement_size(sl__graph_value(L->g, n->in[0])->placement);
  for (int32_t i = first; i < end; i++)
    for (int32_t k = 0; k < L->p->tasks[i].n_in; k++)
      for (int r = 0; r < ns; r++)
        if (L->p->tasks[i].in[k] == shard[r]) SL_CHECK(add_tick(L, i));
  return SL_OK;
}

static sl_status lower_boxing(lower *L, int32_t ni, const sl__node *n) {
  const sl_boxing_route *bp = n->boxing;
  const sl__value *vin = sl__graph_value(L->g, n->in[0]);
  const sl__value *vout = sl__graph_value(L->g, n->out[0]);
  const sl_placement *ps = vin->placement, *pd = vout->placement;
  int R = sl_boxing_route_rank_count(bp), ns = sl_placement_size(ps),
      nt = sl_placement_size(pd), S = sl_boxing_route_step_count(bp);
  int32_t *cur = arena_ints(L, R), *next = arena_ints(L, R);
  int32_t *sh = shard_of(L, n->out[0]);
  if (!cur || !next || !sh || !L->shard[n->in[0]])
    return L->shard[n->in[0]] ? SL_ENOMEM : SL_EINTERNAL;
  for (int q = 0; q < R; q++)
    cur[q] = -1;
  for (int r = 0; r < ns; r++)
    cur[sl__boxing_plan_rank(bp, 0, r)] = L->shard[n->in[0]][r];
  if (S == 0) { /* a relabel: the same registers */
    for (int t = 0; t < nt; t++)
      sh[t] = cur[sl__boxing_plan_rank(bp, 1, t)];
    L->ungated[n->out[0]] = L->ungated[n->in[0]];
    return SL_OK;
  }
  int32_t first = L->p->n_tasks;
  sl_status st = SL_OK;
  bool gpu = boxing_on_gpu(bp);
  for (int q = 0; q < R && !gpu; q++)
    if (cur[q] >= 0 && on_cuda(L, cur[q]))
      SL_CHECK_GOTO(copy_task(L, adup(L, "%s.d2h@p%d", n->name, q), ni, q,
                              cur[q], -1, NULL, &cur[q]),
                    st, out);
  for (int s = 0; s < S; s++) {
    sl_boxing_op op = sl_boxing_step_op(bp, s);
    sl_nd_sbp from, to;
    sl_boxing_step_layout(bp, s, &from, &to);
    bool last = s == S - 1;
    bool p2p = op == SL_BOXING_SEND_RECV || op == SL_BOXING_COPY;
    int fs, ts; /* the sides holding the step's input and output shards */
    sl__boxing_step_sides(bp, s, &fs, &ts);
    for (int q = 0; q < R; q++)
      next[q] = -1;
    /* Tasks: (plan rank, group, member). */
    int ng = p2p ? 1 : sl_boxing_step_group_count(bp, s);
    bool local = op == SL_BOXING_SLICE || op == SL_BOXING_ZERO;
    for (int gi = 0; gi < ng; gi++) {
      const int *ranks = NULL;
      int gn = p2p ? R : sl_boxing_step_group(bp, s, gi, &ranks);
      sl__engine engine = boxing_engine(bp, gpu, gn, ranks);
      int32_t coll = -1;
      if (!local)
        SL_CHECK_GOTO(
            sl__lower_coll(L->p, bp,
                           p2p ? adup(L, "%s.s%d", n->name, s)
                               : adup(L, "%s.s%d.g%d", n->name, s, gi),
                           ni, s, p2p ? -1 : gi, engine, &coll),
            st, out);
      for (int k = 0; k < gn; k++) {
        int q = p2p ? k : ranks[k];
        int tr = sl__boxing_side_rank(bp, ts, q); /* after the step */
        bool has_in = cur[q] >= 0, has_out = tr >= 0;
        if (!has_in && !has_out) continue;
        int node, dev;
        sl_boxing_route_rank_device(bp, q, &node, &dev);
        sl__task_kind kind = p2p ? SL__TASK_XCHG
                             : (op == SL_BOXING_SLICE || op == SL_BOXING_ZERO)
                                 ? SL__TASK_LOCAL
                                 : SL__TASK_COLL;
        uint32_t mach, devu;
        int side = has_out ? ts : fs;
        SL_CHECK_GOTO(rank_where(sl__boxing_side_placement(bp, side),
                                 sl__boxing_side_rank(bp, side, q), &mach,
                                 &devu),
                      st, out);
        (void)node;
        (void)dev;
        bool cpu = sl__dev_host_side(devu) == devu;
        /* A CUDA shard's last step ends on the host side too: a copy
         * moves it onto the device after the loop. */
        bool final = last && (gpu || cpu);
        if (!gpu) devu = sl__dev_host_side(devu);
        /* On GPUs every NCCL call of a device goes on its one collective
         * stream: NCCL kernels of two streams may wait on each other. A
         * CPU device's in-process collective goes on its compute stream:
         * arriving costs that thread microseconds (the engine's workers do
         * a large round's work, the last arriver a small one's), where a
         * stream of its own would hand each collective to another thread
         * and back, and keep one more thread per device spinning for
         * cores the compute threads use. A CPU device's local step (a
         * slice, a zero) goes there too: a memcpy costs that thread less
         * than waking a copy stream's, which sleeps between steps. */
        sl_stream_kind stream =
            (kind == SL__TASK_COLL && cpu && engine == SL__ENGINE_INPROC) ||
                    (kind == SL__TASK_LOCAL && cpu)
                ? SL_STREAM_COMPUTE
            : kind == SL__TASK_COLL || (gpu && kind == SL__TASK_XCHG)
                ? SL_STREAM_COLLECTIVE
                : SL_STREAM_COPY;
        sl__task *t = new_task(L, kind, adup(L, "%s.s%d@p%d", n->name, s, q),
                               ni, q, mach, devu, stream, 2, 1);
        if (!t) {
          st = SL_ENOMEM;
          goto out;
        }
        int32_t id = task_id(L, t);
        t->step = s;
        t->group = p2p ? -1 : gi;
        t->member = p2p ? q : k;
        if (kind != SL__TASK_LOCAL) t->engine = engine;
        t->coll = coll;
        if (local)
          SL_CHECK_GOTO(sl__lower_local_coll(L->p, bp, t->name, ni, s, q, k,
                                             gpu, &t->coll),
                        st, out);
        if (has_in) t->in[t->n_in++] = cur[q];
        if (has_out) {
          int32_t reg;
          if (final) {
            SL_CHECK_GOTO(value_regst(L, n->out[0], tr, &reg), st, out);
            if (L->var_of[n->out[0]] >= 0)
              SL_CHECK_GOTO(add_tick(L, id), st, out);
          } else {
            sl_slice sl;
            sl__boxing_step_box(bp, s, q, true, &sl);
            sl_shape shape = slice_shape(&sl);
            reg = new_regst(L, adup(L, "%s.s%d@p%d", n->name, s, q), &shape,
                            vin->meta.dtype, mach, devu);
            if (reg < 0) {
              st = SL_ENOMEM;
              goto out;
            }
          }
          t = &L->p->tasks[id];
          t->n_out = 1;
          set_output(L, t, 0, reg);
          next[q] = reg;
        }
        if (!has_in) SL_CHECK_GOTO(add_tick(L, id), st, out);
      }
    }
    int32_t *tmp = cur;
    cur = next;
    next = tmp;
  }
  for (int t = 0; t < nt; t++) {
    uint32_t m, d;
    SL_CHECK_GOTO(rank_where(pd, t, &m, &d), st, out);
    if (gpu || sl__dev_host_side(d) == d) continue;
    int32_t q = sl__boxing_plan_rank(bp, 1, t), reg, id;
    SL_CHECK_GOTO(value_regst(L, n->out[0], t, &reg), st, out);
    SL_CHECK_GOTO(copy_task(L, adup(L, "%s.h2d@p%d", n->name, q), ni, q, cur[q],
                            reg, &id, &cur[q]),
                  st, out);
    if (L->var_of[n->out[0]] >= 0) SL_CHECK_GOTO(add_tick(L, id), st, out);
  }
  for (int t = 0; t < nt; t++)
    if (L->var_of[n->out[0]] < 0) sh[t] = cur[sl__boxing_plan_rank(bp, 1, t)];
  st = gate_boxing(L, n, first);
out:
  return st;
}

/* Fetch tasks on the ranks whose coordinate is 0 on every broadcast mesh
 * axis: together they hold every part of the value exactly once (partial
 * parts once per member, to be reduced). */
static sl_status lower_fetch(lower *L, int32_t ni, const sl__node *n) {
  const sl__value *v = sl__graph_value(L->g, n->in[0]);
  if (!L->shard[n->in[0]])
    return sl__fail(SL_EINTERNAL,
                    "lowering: fetch '%s' of a value with no "
                    "registers",
                    n->name);
  for (int r = 0; r < sl_placement_size(v->placement); r++) {
    if (!sl__nd_sbp_fetch_rank(v->placement, &v->sbp, r)) continue;
    uint32_t mach, d;
    SL_CHECK(rank_where(v->placement, r, &mach, &d));
    /* A CUDA shard is copied to the host side and fetched there, on the
     * copy stream. A CPU device's is fetched on its compute stream, as it
     * is fed: a stream of its own would be a thread that sleeps between
     * steps, whose wake-up costs the thread that produced the value
     * microseconds and delays the step's end (the examples' gpt in data
     * and tensor parallel on two one-thread devices: 2% a step). */
    int32_t reg = L->shard[n->in[0]][r];
    bool cuda = on_cuda(L, reg);
    if (cuda)
      SL_CHECK(copy_task(L, adup(L, "%s.d2h@r%d", n->name, r), ni, r, reg, -1,
                         NULL, &reg));
    sl__task *t = new_task(L, SL__TASK_FETCH, adup(L, "%s@r%d", n->name, r), ni,
                           r, mach, sl__dev_host_side(d),
                           cuda ? SL_STREAM_COPY : SL_STREAM_COMPUTE, 1, 0);
    if (!t) return SL_ENOMEM;
    t->in[t->n_in++] = reg;
  }
  return SL_OK;
}

static sl_status lower_var_copies(lower *L, const bool *needs_copy) {
  for (int32_t i = 0; i < sl__graph_node_count(L->g); i++) {
    if (!needs_copy[i]) continue;
    const sl__node *n = sl__graph_node(L->g, i);
    const sl__value *var = sl__graph_value(L->g, n->out[0]);
    int32_t *src = L->shard[n->update];
    if (!src)
      return sl__fail(SL_EINTERNAL,
                      "lowering: variable '%s': its update has "
                      "no registers",
                      n->name);
    for (int r = 0; r < sl_placement_size(var->placement); r++) {
      uint32_t m, d;
      SL_CHECK(rank_where(var->placement, r, &m, &d));
      sl__task *t =
          new_task(L, SL__TASK_VAR_COPY, adup(L, "%s.next@r%d", n->name, r), i,
                   r, m, d, SL_STREAM_COMPUTE, 2, 1);
      if (!t) return SL_ENOMEM;
      int32_t id = task_id(L, t);
      t->in[t->n_in++] = src[r];
      t->n_out = 1;
      set_output(L, t, 0, L->shard[n->out[0]][r]);
      SL_CHECK(add_tick(L, id));
    }
  }
  return SL_OK;
}

sl_status sl__lower(const sl_graph *g, sl__pplan **out) {
  *out = NULL;
  if (!g) return sl__fail(SL_EINVAL, "lowering: NULL graph");
  if (!sl__graph_frozen(g))
    return sl__fail(SL_ESTATE, "lowering: the graph is not compiled");
  lower L;
  memset(&L, 0, sizeof L);
  L.g = g;
  SL_CHECK(sl__pplan_create(&L.p));
  L.p->micro_batches = sl__graph_micro_batches(g);
  L.p->schedule = sl__graph_schedule(g);
  int32_t nv = sl__graph_value_count(g), nn = sl__graph_node_count(g);
  L.shard = sl__calloc((size_t)nv + 1, sizeof *L.shard);
  L.var_of = sl__calloc((size_t)nv + 1, sizeof *L.var_of);
  L.ungated = sl__calloc((size_t)nv + 1, sizeof *L.ungated);
  bool *needs_copy = sl__calloc((size_t)nn + 1, sizeof *needs_copy);
  sl_status st = SL_OK;
  if (!L.shard || !L.var_of || !L.ungated || !needs_copy) {
    st = SL_ENOMEM;
    goto out;
  }
  for (int32_t v = 0; v < nv; v++)
    L.var_of[v] = -1;
  SL_CHECK_GOTO(plan_variables(&L, needs_copy), st, out);
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    const sl__node *n = sl__graph_node(g, i);
    switch (n->kind) {
    case SL__NODE_INPUT: st = lower_input(&L, i, n); break;
    case SL__NODE_VARIABLE:
      if (n->update < 0) st = lower_input(&L, i, n);
      L.ungated[n->out[0]] = n->update >= 0;
      break;
    case SL__NODE_OP: st = lower_op(&L, i, n); break;
    case SL__NODE_BOXING: st = lower_boxing(&L, i, n); break;
    case SL__NODE_FETCH: st = lower_fetch(&L, i, n); break;
    }
    if (st != SL_OK) sl__fail_context(st, "node '%s': ", n->name);
  }
  if (st != SL_OK) goto out;
  SL_CHECK_GOTO(lower_var_copies(&L, needs_copy), st, out);
  /* The driver is the machine after the last real one. */
  if (L.p->machines == 0) L.p->machines = 1;
  L.p->driver = L.p->machines;
  SL_CHECK_GOTO(sl__pplan_describe(L.p, g), st, out);
  st = sl__pplan_validate(L.p);
  if (st != SL_OK) {
    sl__fail_context(SL_EINTERNAL, "lowering produced a bad plan: ");
    st = SL_EINTERNAL;
  }
  if (st == SL_OK) st = sl__pplan_plan_memory(L.p);
  if (st == SL_OK) st = sl__pplan_depths(L.p);
  if (st == SL_OK) st = sl__pplan_number_inputs(L.p);
out:
  sl__free(L.shard);
  sl__free(L.var_of);
  sl__free(L.ungated);
  sl__free(L.ticks);
  sl__free(needs_copy);
  if (st != SL_OK) {
    sl__pplan_destroy(L.p);
    return st;
  }
  *out = L.p;
  return SL_OK;
}
