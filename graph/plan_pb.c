/* The physical plan as a protobuf-c message (graph/plan.proto): packing,
 * and unpacking with every field checked, so a corrupt or hostile file is
 * an SL_EINVAL, never an index out of range later. */
#include <errno.h>
#include <string.h>

#include "plan_pb_int.h"

#define PLAN_VERSION 2
#define MAX_PLAN_FILE (1u << 30)

static char *mstr(const char *s) { return (char *)(s ? s : ""); }

sl_status sl__pplan_pack(const sl__pplan *p, uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  Sluice__Plan plan = SLUICE__PLAN__INIT;
  plan.version = PLAN_VERSION;
  plan.machines = p->machines;
  plan.driver = p->driver;
  plan.micro_batches = (uint32_t)p->micro_batches;
  plan.schedule = mstr(sl__schedule_name(p->schedule));
  plan.part = (uint32_t)(p->part + 1);
  Sluice__Node *nodes = sl__calloc((size_t)p->n_nodes + 1, sizeof *nodes);
  Sluice__Node **nodep = sl__calloc((size_t)p->n_nodes + 1, sizeof *nodep);
  Sluice__Task *tasks = sl__calloc((size_t)p->n_tasks + 1, sizeof *tasks);
  Sluice__Task **taskp = sl__calloc((size_t)p->n_tasks + 1, sizeof *taskp);
  Sluice__Register *regs = sl__calloc((size_t)p->n_regsts + 1, sizeof *regs);
  Sluice__Register **regp = sl__calloc((size_t)p->n_regsts + 1, sizeof *regp);
  int32_t n_steps = 0;
  for (int32_t i = 0; i < p->n_nodes; i++)
    n_steps += p->nodes[i].n_steps;
  Sluice__BoxingStep *steps = sl__calloc((size_t)n_steps + 1, sizeof *steps);
  Sluice__BoxingStep **stepp = sl__calloc((size_t)n_steps + 1, sizeof *stepp);
  int64_t *shapes =
      sl__calloc((size_t)p->n_regsts * SL_MAX_DIMS + 1, sizeof *shapes);
  Sluice__Control *ctrl = sl__calloc((size_t)p->n_ctrl + 1, sizeof *ctrl);
  Sluice__Control **ctrlp = sl__calloc((size_t)p->n_ctrl + 1, sizeof *ctrlp);
  Sluice__DeviceMemory *mem = sl__calloc((size_t)p->n_mem + 1, sizeof *mem);
  Sluice__DeviceMemory **memp = sl__calloc((size_t)p->n_mem + 1, sizeof *memp);
  sl__plan_pb_colls colls;
  sl__plan_pb_nodes extra;
  memset(&extra, 0, sizeof extra);
  sl_status st = sl__plan_pb_colls_pack(p, &colls);
  if (st != SL_OK) goto out;
  if (!nodes || !nodep || !tasks || !taskp || !regs || !regp || !steps ||
      !stepp || !shapes || !ctrl || !ctrlp || !mem || !memp) {
    st = SL_ENOMEM;
    goto out;
  }
  int32_t k = 0;
  for (int32_t i = 0; i < p->n_nodes; i++) {
    const sl__pnode *pn = &p->nodes[i];
    Sluice__Node *n = &nodes[i];
    sluice__node__init(n);
    n->name = mstr(pn->name);
    n->kind = mstr(pn->kind);
    n->op = mstr(pn->op);
    n->placement = mstr(pn->placement);
    n->sbp = mstr(pn->sbp);
    n->shape = mstr(pn->shape);
    n->dtype = mstr(pn->dtype);
    n->backward = pn->backward;
    n->optimizer = pn->optimizer;
    n->recompute = pn->recompute;
    n->micro = (uint32_t)(pn->micro + 1);
    n->stage = (uint32_t)(pn->stage + 1);
    n->phase = (uint32_t)pn->phase;
    n->n_steps = (size_t)pn->n_steps;
    n->steps = stepp + k;
    for (int32_t s = 0; s < pn->n_steps; s++, k++) {
      const sl__pstep *ps = &pn->steps[s];
      Sluice__BoxingStep *b = &steps[k];
      sluice__boxing_step__init(b);
      b->op = mstr(ps->op);
      b->reduce = mstr(ps->reduce);
      b->mesh_axis = ps->mesh_axis;
      b->from = mstr(ps->from);
      b->to = mstr(ps->to);
      b->bytes = ps->bytes;
      b->predicted_us = ps->predicted_us;
      stepp[k] = b;
    }
    nodep[i] = n;
  }
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    Sluice__Task *x = &tasks[i];
    sluice__task__init(x);
    x->kind = (Sluice__TaskKind)t->kind;
    x->name = mstr(t->name);
    x->node = t->node;
    x->rank = t->rank;
    x->step = t->step;
    x->group = t->group;
    x->member = t->member;
    x->machine = t->machine;
    x->device = t->device;
    x->stream = t->stream;
    x->n_inputs = (size_t)t->n_in;
    x->inputs = t->in;
    x->n_outputs = (size_t)t->n_out;
    x->outputs = t->out;
    x->tick_slot = t->tick_slot;
    x->engine = (int32_t)t->engine;
    x->collective = t->coll + 1;
    x->n_input_slots = x->n_input_positions = (size_t)t->n_in;
    x->input_slots = t->in_slot;
    x->input_positions = t->in_pos;
    x->depth = t->depth;
    x->proxy = t->proxy;
    x->actor_index = t->actor_index;
    taskp[i] = x;
  }
  SL_CHECK_GOTO(sl__plan_pb_nodes_pack(p, nodes, tasks, &extra), st, out);
  for (int32_t i = 0; i < p->n_regsts; i++) {
    const sl__regst *r = &p->regsts[i];
    Sluice__Register *x = &regs[i];
    sluice__register__init(x);
    x->name = mstr(r->name);
    x->producer = r->producer;
    x->out_slot = r->out_slot;
    x->value = r->value;
    x->rank = r->rank;
    x->n_shape = (size_t)r->shape.ndim;
    x->shape = shapes + (size_t)i * SL_MAX_DIMS;
    memcpy(x->shape, r->shape.dims, sizeof(int64_t) * (size_t)r->shape.ndim);
    x->dtype = (char *)sl_dtype_name(r->dtype);
    x->bytes = r->bytes;
    x->machine = r->machine;
    x->device = r->device;
    x->count = r->count;
    x->initial = r->initial;
    x->var_node = r->var_node;
    x->block = r->mem + 1;
    x->offset = r->offset;
    x->category = (int32_t)r->category;
    x->wire = r->wire;
    regp[i] = x;
  }
  for (int32_t i = 0; i < p->n_ctrl; i++) {
    sluice__control__init(&ctrl[i]);
    ctrl[i].from = p->ctrl[i].from;
    ctrl[i].to = p->ctrl[i].to;
    ctrl[i].closing = p->ctrl[i].closing;
    ctrlp[i] = &ctrl[i];
  }
  for (int32_t i = 0; i < p->n_mem; i++) {
    const sl__pmem *m = &p->mem[i];
    Sluice__DeviceMemory *x = &mem[i];
    sluice__device_memory__init(x);
    x->machine = m->machine;
    x->device = m->device;
    x->block = m->block;
    x->own = m->own;
    x->mirrors = m->mirrors;
    x->workspace = m->workspace;
    x->unshared = m->unshared;
    x->peak = m->peak;
    x->n_category = SL_MEMORY_CATEGORIES;
    x->category = (int64_t *)m->category;
    x->shared_registers = m->n_shared;
    x->control_edges = m->n_ctrl;
    memp[i] = x;
  }
  plan.n_controls = (size_t)p->n_ctrl;
  plan.controls = ctrlp;
  plan.n_memory = (size_t)p->n_mem;
  plan.memory = memp;
  plan.n_nodes = (size_t)p->n_nodes;
  plan.nodes = nodep;
  plan.n_tasks = (size_t)p->n_tasks;
  plan.tasks = taskp;
  plan.n_registers = (size_t)p->n_regsts;
  plan.registers = regp;
  plan.n_collectives = (size_t)p->n_colls;
  plan.collectives = colls.collp;
  size_t n = sluice__plan__get_packed_size(&plan);
  *buf = sl__malloc(n ? n : 1);
  if (!*buf) {
    st = SL_ENOMEM;
    goto out;
  }
  *len = sluice__plan__pack(&plan, *buf);
out:
  sl__plan_pb_colls_free(&colls);
  sl__plan_pb_nodes_free(&extra);
  sl__free(nodes);
  sl__free(nodep);
  sl__free(tasks);
  sl__free(taskp);
  sl__free(regs);
  sl__free(regp);
  sl__free(steps);
  sl__free(stepp);
  sl__free(shapes);
  sl__free(ctrl);
  sl__free(ctrlp);
  sl__free(mem);
  sl__free(memp);
  return st;
}

static const char *adup(sl__pplan *p, const char *s) {
  return sl__arena_strdup(p->arena, s ? s : "");
}

static sl_status bad(const char *what, size_t i) {
  return sl__fail(SL_EINVAL, "plan file: %s %zu is malformed", what, i);
}

/* Control edges and device memory; the registers' places in the blocks
 * are checked against the blocks' sizes here too. */
static sl_status copy_memory(const Sluice__Plan *m, sl__pplan *p) {
  if (m->n_controls > INT32_MAX / 2 || m->n_memory > INT32_MAX / 2)
    return sl__fail(SL_EINVAL, "plan file: too many entries");
  p->ctrl = sl__calloc(m->n_controls + 1, sizeof *p->ctrl);
  p->mem = sl__calloc(m->n_memory + 1, sizeof *p->mem);
  if (!p->ctrl || !p->mem) return SL_ENOMEM;
  for (size_t i = 0; i < m->n_controls; i++) {
    const Sluice__Control *x = m->controls[i];
    if (x->from < 0 || x->from >= p->n_tasks || x->to < 0 ||
        x->to >= p->n_tasks || x->from == x->to)
      return bad("control edge", i);
    p->ctrl[p->n_ctrl++] = (sl__ctrl){x->from, x->to, x->closing};
  }
  for (size_t i = 0; i < m->n_memory; i++) {
    const Sluice__DeviceMemory *x = m->memory[i];
    if (x->n_category != SL_MEMORY_CATEGORIES || x->block < 0 || x->own < 0 ||
        x->mirrors < 0 || x->workspace < 0 || x->unshared < 0 || x->peak < 0 ||
        x->shared_registers < 0 || x->control_edges < 0)
      return bad("device memory", i);
    sl__pmem *pm = &p->mem[p->n_mem++];
    pm->machine = x->machine;
    pm->device = x->device;
    pm->block = x->block;
    pm->own = x->own;
    pm->mirrors = x->mirrors;
    pm->workspace = x->workspace;
    pm->unshared = x->unshared;
    pm->peak = x->peak;
    for (int c = 0; c < SL_MEMORY_CATEGORIES; c++) {
      if (x->category[c] < 0) return bad("device memory", i);
      pm->category[c] = x->category[c];
    }
    pm->n_shared = x->shared_registers;
    pm->n_ctrl = x->control_edges;
  }
  for (int32_t i = 0; i < p->n_regsts; i++) {
    const sl__regst *r = &p->regsts[i];
    if (r->mem < 0) continue;
    const sl__pmem *pm = &p->mem[r->mem];
    int64_t stride = (int64_t)sl_register_stride((size_t)r->bytes);
    if (stride < r->bytes || r->count != 1 || r->offset % SL_REGISTER_ALIGN ||
        r->machine != pm->machine || r->device != pm->device ||
        r->offset > pm->block || stride > pm->block - r->offset)
      return bad("register", (size_t)i);
  }
  return SL_OK;
}

static sl_status copy_plan(const Sluice__Plan *m, sl__pplan *p) {
  if (m->version != PLAN_VERSION)
    return sl__fail(SL_EINVAL,
                    "plan file: version %u (this sluice reads %d: write the "
                    "plan again with this build)",
                    m->version, PLAN_VERSION);
  if (m->n_nodes > INT32_MAX / 2 || m->n_tasks > INT32_MAX / 2 ||
      m->n_registers > INT32_MAX / 2)
    return sl__fail(SL_EINVAL, "plan file: too many entries");
  p->machines = m->machines;
  p->driver = m->driver;
  if (m->part > SL_ACTOR_MAX_NODES)
    return sl__fail(SL_EINVAL, "plan file: part of machine %u", m->part - 1);
  p->part = (int32_t)m->part - 1;
  p->micro_batches = m->micro_batches > 1 ? (int32_t)m->micro_batches : 1;
  if (m->micro_batches > (1u << 16) ||
      (m->schedule[0] && !sl__schedule_parse(m->schedule, &p->schedule)))
    return sl__fail(SL_EINVAL,
                    "plan file: bad micro-batches %u or schedule '%s'",
                    (unsigned)m->micro_batches, m->schedule);
  p->n_nodes = (int32_t)m->n_nodes;
  p->nodes = sl__arena_calloc(p->arena, m->n_nodes + 1, sizeof *p->nodes);
  if (!p->nodes) return SL_ENOMEM;
  for (size_t i = 0; i < m->n_nodes; i++) {
    const Sluice__Node *n = m->nodes[i];
    sl__pnode *pn = &p->nodes[i];
    pn->name = adup(p, n->name);
    pn->kind = adup(p, n->kind);
    pn->op = adup(p, n->op);
    pn->placement = adup(p, n->placement);
    pn->sbp = adup(p, n->sbp);
    pn->shape = adup(p, n->shape);
    pn->dtype = adup(p, n->dtype);
    pn->backward = n->backward;
    pn->optimizer = n->optimizer;
    pn->recompute = n->recompute;
    if (n->n_steps > 64 || n->micro > (uint32_t)p->micro_batches ||
        n->stage > (1u << 20) || n->phase > SL__PHASE_W)
      return bad("node", i);
    pn->micro = (int32_t)n->micro - 1;
    pn->stage = (int32_t)n->stage - 1;
    pn->phase = (int32_t)n->phase;
    pn->n_steps = (int32_t)n->n_steps;
    pn->steps = sl__arena_calloc(p->arena, n->n_steps + 1, sizeof *pn->steps);
    if (!pn->steps) return SL_ENOMEM;
    for (size_t s = 0; s < n->n_steps; s++) {
      const Sluice__BoxingStep *b = n->steps[s];
      sl__pstep *ps = &pn->steps[s];
      ps->op = adup(p, b->op);
      ps->reduce = adup(p, b->reduce);
      ps->mesh_axis = b->mesh_axis;
      ps->from = adup(p, b->from);
      ps->to = adup(p, b->to);
      ps->bytes = b->bytes;
      ps->predicted_us = b->predicted_us;
    }
  }
  for (size_t i = 0; i < m->n_tasks; i++) {
    const Sluice__Task *x = m->tasks[i];
    sl__task *t = sl__pplan_add_task(p);
    if (!t) return SL_ENOMEM;
    if ((int)x->kind < 0 || (int)x->kind >= SL__TASK_KIND_COUNT ||
        x->node < -1 || x->node >= p->n_nodes || x->n_inputs > 4096 ||
        x->n_outputs > 4096 ||
        /* a tick is its one register (plan_text and sessions read out[0]) */
        ((int)x->kind == SL__TASK_TICK && x->n_outputs != 1))
      return bad("task", i);
    t->kind = (sl__task_kind)x->kind;
    t->name = adup(p, x->name);
    t->node = x->node;
    t->rank = x->rank;
    t->step = x->step;
    t->group = x->group;
    t->member = x->member;
    t->machine = x->machine;
    t->device = x->device;
    t->stream = x->stream;
    t->n_in = (int32_t)x->n_inputs;
    t->n_out = (int32_t)x->n_outputs;
    t->in = sl__arena_calloc(p->arena, x->n_inputs + 1, sizeof *t->in);
    t->out = sl__arena_calloc(p->arena, x->n_outputs + 1, sizeof *t->out);
    if (!t->in || !t->out) return SL_ENOMEM;
    if (x->n_inputs) memcpy(t->in, x->inputs, x->n_inputs * sizeof *t->in);
    if (x->n_outputs) memcpy(t->out, x->outputs, x->n_outputs * sizeof *t->out);
    t->tick_slot = x->tick_slot;
    if (x->engine < 0 || x->engine >= SL__ENGINE_COUNT || x->collective < 0 ||
        (size_t)x->collective > m->n_collectives)
      return bad("task", i);
    t->engine = (sl__engine)x->engine;
    t->coll = x->collective - 1;
    /* Slots and positions: the actor runtime refuses ones that disagree
     * (a slot taken twice or missing, positions not 0 to n-1). */
    if (x->n_input_slots != x->n_inputs ||
        x->n_input_positions != x->n_inputs || x->depth < 0 ||
        (x->proxy && p->part < 0) || x->actor_index < -1 ||
        x->actor_index >= (int32_t)SL_ACTOR_MAX_INDEX - 1 ||
        (p->part >= 0) != (x->actor_index >= 0))
      return bad("task", i);
    t->in_slot = sl__arena_calloc(p->arena, x->n_inputs + 1, sizeof(int32_t));
    t->in_pos = sl__arena_calloc(p->arena, x->n_inputs + 1, sizeof(int32_t));
    if (!t->in_slot || !t->in_pos) return SL_ENOMEM;
    for (size_t k = 0; k < x->n_inputs; k++) {
      /* A proxy holds only some of its inputs, never its own output. */
      int32_t slot = x->input_slots[k], pos = x->input_positions[k];
      int32_t most = x->proxy ? UINT16_MAX - 1 : (int32_t)x->n_inputs - 1;
      if (slot < -(int32_t)x->n_outputs || slot > most ||
          (slot < 0) != (pos < 0) || pos >= UINT16_MAX ||
          (slot < 0 && (x->proxy || x->outputs[-1 - slot] != x->inputs[k])))
        return bad("task", i);
      t->in_slot[k] = slot;
      t->in_pos[k] = pos;
    }
    t->depth = x->depth;
    t->proxy = x->proxy;
    t->actor_index = x->actor_index;
  }
  int64_t held = 0; /* bytes * count over all registers */
  for (size_t i = 0; i < m->n_registers; i++) {
    const Sluice__Register *x = m->registers[i];
    sl__regst *r = sl__pplan_add_regst(p);
    if (!r) return SL_ENOMEM;
    /* The text form adds up bytes * count per device and in all (a
     * negative bytes or count fails sl__pplan_validate). */
    int64_t h;
    if (x->bytes >= 0 && x->count >= 1 &&
        (__builtin_mul_overflow(x->bytes, (int64_t)x->count, &h) ||
         __builtin_add_overflow(held, h, &held)))
      return sl__fail(SL_EINVAL,
                      "plan file: registers 0 to %zu hold more than 2^63 "
                      "bytes in all",
                      i);
    sl_dtype dt;
    if (x->n_shape > SL_MAX_DIMS || sl_dtype_parse(x->dtype, &dt) != SL_OK ||
        x->var_node < -1 || x->var_node >= p->n_nodes ||
        (x->var_node >= 0 &&
         strcmp(p->nodes[x->var_node].kind, "variable") != 0))
      return bad("register", i);
    r->name = adup(p, x->name);
    r->producer = x->producer;
    r->out_slot = x->out_slot;
    r->value = x->value;
    r->rank = x->rank;
    r->shape.ndim = (int)x->n_shape;
    for (size_t d = 0; d < x->n_shape; d++) {
      if (x->shape[d] < 0) return bad("register", i);
      r->shape.dims[d] = x->shape[d];
    }
    r->dtype = dt;
    r->bytes = x->bytes;
    r->machine = x->machine;
    r->device = x->device;
    r->count = x->count;
    r->initial = x->initial;
    r->var_node = x->var_node;
    if (x->block < 0 || (size_t)x->block > m->n_memory || x->offset < 0 ||
        x->category < 0 || x->category >= SL_MEMORY_CATEGORIES)
      return bad("register", i);
    r->mem = x->block - 1;
    r->offset = x->offset;
    if (x->wire < 0) return bad("register", i);
    r->wire = x->wire;
    r->category = (sl_memory_category)x->category;
  }
  SL_CHECK(sl__plan_pb_nodes_unpack(m, p));
  SL_CHECK(copy_memory(m, p));
  SL_CHECK(sl__plan_pb_colls_unpack(m, p));
  SL_CHECK(sl__pplan_validate(p));
  return sl__pplan_check_runtime(p);
}

sl_status sl__pplan_unpack(const uint8_t *buf, size_t len, sl__pplan **out) {
  *out = NULL;
  Sluice__Plan *m = sluice__plan__unpack(NULL, len, buf);
  if (!m)
    return sl__fail(SL_EINVAL, "plan file: not a sluice plan (protobuf "
                               "decoding failed)");
  sl__pplan *p = NULL;
  sl_status st = sl__pplan_create(&p);
  if (st == SL_OK) st = copy_plan(m, p);
  sluice__plan__free_unpacked(m, NULL);
  if (st != SL_OK) {
    sl__pplan_destroy(p);
    return st;
  }
  *out = p;
  return SL_OK;
}

sl_status sl__pplan_read_file(const char *path, sl__pplan **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return sl__fail(SL_EIO, "plan file '%s': %s", path, strerror(errno));
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  sl_status st = SL_OK;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 65536;
      if (cap > MAX_PLAN_FILE) {
        st = sl__fail(SL_EINVAL, "plan file '%s': larger than 1 GiB", path);
        break;
      }
      uint8_t *b = sl__realloc(buf, cap);
      if (!b) {
        st = SL_ENOMEM;
        break;
      }
      buf = b;
    }
    size_t k = fread(buf + len, 1, cap - len, f);
    len += k;
    if (k == 0) {
      if (ferror(f)) st = sl__fail(SL_EIO, "plan file '%s': read error", path);
      break;
    }
  }
  fclose(f);
  if (st == SL_OK) {
    st = sl__pplan_unpack(buf, len, out);
    if (st != SL_OK) sl__fail_context(st, "'%s': ", path);
  }
  sl__free(buf);
  return st;
}
