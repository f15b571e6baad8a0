/* What the runtime reads of the logical nodes (DESIGN.md section 5 step 7,
 * docs/plan.md "What a session reads"): each node's description, an op's
 * definition and attributes, the values of inputs, variables and fetches,
 * a variable's initializer and file, and every op, feed and fetch task's
 * kernel arguments. Lowering computes them once from the graph; a plan
 * read from bytes has them checked here before anyone indexes with them;
 * a session builds and runs its job from them alone. */
#include <string.h>

#include "cpu/npy.h"
#include "graph_priv.h"
#include "lower_int.h"
#include "sbp_int.h"

/* ---- from the graph --------------------------------------------------------
 */

static bool any_partial(const sl_nd_sbp *s) {
  for (int m = 0; m < s->ndim; m++)
    if (s->sbp[m].kind == SL_SBP_PARTIAL) return true;
  return false;
}

/* Rank `rank`'s shard of value v. */
static sl_status karg_of(const sl_graph *g, int32_t v, int rank, sl__karg *a) {
  const sl__value *val = sl__graph_value(g, v);
  SL_CHECK(sl_local_slice(&val->meta.shape, val->placement, &val->sbp, rank,
                          &a->box));
  a->global = val->meta.shape;
  a->dtype = val->meta.dtype;
  a->partial = any_partial(&val->sbp);
  return SL_OK;
}

/* The tensor a feed takes from the program: input node n's value, with
 * every micro-batch's rows when n is micro-batched. */
static sl_shape fed_shape(const sl__pplan *p, const sl__pnode *n) {
  sl_shape s = n->value.meta.shape;
  if (n->micro >= 0 && p->micro_batches > 1 && s.ndim > 0)
    s.dims[0] *= p->micro_batches;
  return s;
}

static sl_status task_args(sl__pplan *p, const sl_graph *g, sl__task *t) {
  const sl__node *n = sl__graph_node(g, t->node);
  int32_t na = t->kind == SL__TASK_OP ? n->n_in + n->n_out : 1;
  t->args = sl__arena_calloc(p->arena, (size_t)na, sizeof *t->args);
  if (!t->args) return SL_ENOMEM;
  t->n_args = na;
  if (t->kind == SL__TASK_FETCH) return karg_of(g, n->in[0], t->rank, t->args);
  if (t->kind == SL__TASK_FEED) {
    /* Its micro-batch's rows of the fed batch. */
    SL_CHECK(karg_of(g, n->out[0], t->rank, t->args));
    if (n->micro > 0)
      t->args->box.start[0] += n->micro * t->args->global.dims[0];
    t->args->global = fed_shape(p, &p->nodes[t->node]);
    return SL_OK;
  }
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  k.n_out = n->n_out;
  for (int i = 0; i < n->n_in; i++)
    SL_CHECK(karg_of(g, n->in[i], t->rank, &t->args[i]));
  for (int j = 0; j < n->n_out; j++) {
    sl__karg *a = &t->args[n->n_in + j];
    SL_CHECK(karg_of(g, n->out[j], t->rank, a));
    k.out_global[j] = a->global;
    k.out_slice[j] = a->box;
  }
  /* A by-position op of a micro-batch sees the step's whole batch. */
  sl__graph_micro_shift(g, n, &k);
  for (int j = 0; j < n->n_out; j++) {
    t->args[n->n_in + j].global = k.out_global[j];
    t->args[n->n_in + j].box = k.out_slice[j];
  }
  return SL_OK;
}

static sl_status describe_node(sl__pplan *p, const sl_graph *g, int32_t i) {
  const sl__node *n = sl__graph_node(g, i);
  sl__pnode *pn = &p->nodes[i];
  char buf[256], sbp[128] = "";
  int32_t v = n->n_out ? n->out[0] : n->in[0];
  const sl__value *val = sl__graph_value(g, v);
  pn->name = sl__arena_strdup(p->arena, n->name);
  pn->kind = sl__graph_kind_name(n->kind);
  pn->op = n->op ? n->op->name : "";
  sl_placement_print(n->placement ? n->placement : val->placement, buf,
                     sizeof buf);
  pn->placement = sl__arena_strdup(p->arena, buf);
  if (val->sbp.ndim) sl_nd_sbp_print(&val->sbp, sbp, sizeof sbp);
  pn->sbp = sl__arena_strdup(p->arena, sbp);
  sl_shape_print(&val->meta.shape, buf, sizeof buf);
  pn->shape = sl__arena_strdup(p->arena, buf);
  pn->dtype = sl_dtype_name(val->meta.dtype);
  pn->backward = n->backward;
  pn->optimizer = n->optimizer;
  pn->recompute = n->recompute;
  pn->micro = n->micro;
  pn->stage = n->stage;
  pn->phase = n->phase;
  pn->feed = -1;
  if (!pn->name || !pn->placement || !pn->sbp || !pn->shape) return SL_ENOMEM;
  /* Ops' attributes, and a variable's (ZeRO-3's "zero", graph/memory.c). */
  pn->attrs = n->attrs;
  for (int a = 0; a < pn->attrs.n; a++)
    if (!(pn->attrs.a[a].name = sl__arena_strdup(p->arena, n->attrs.a[a].name)))
      return SL_ENOMEM;
  if (n->kind == SL__NODE_OP) {
    pn->def = n->op;
    /* A .npy source travels as its absolute path: a daemon opens the same
     * file (this machine, or a shared file system). */
    char path[4096];
    if (SL__GNODE(n)->npy_id >= 0) {
      if (sl__npy_path(SL__GNODE(n)->npy_id, path, sizeof path) == SL_OK)
        pn->file = sl__arena_strdup(p->arena, path);
      else
        sl_clear_error(); /* only another process would need it */
    }
  }
  if (n->kind == SL__NODE_INPUT || n->kind == SL__NODE_VARIABLE ||
      n->kind == SL__NODE_FETCH) {
    pn->value.meta = val->meta;
    pn->value.sbp = val->sbp;
    SL_CHECK(sl_placement_copy(val->placement, &pn->value.placement));
  }
  if (n->kind == SL__NODE_INPUT) pn->feed = n->micro_of >= 0 ? n->micro_of : i;
  if (n->kind == SL__NODE_VARIABLE) {
    const sl__gnode *gn = SL__GNODE(n);
    pn->trained = n->update >= 0;
    pn->init = gn->init;
    if (gn->load_path &&
        (!(pn->load = sl__arena_strdup(p->arena, gn->load_path)) ||
         !(pn->tensor = sl__arena_strdup(p->arena, gn->load_tensor))))
      return SL_ENOMEM;
  }
  if (n->kind == SL__NODE_FETCH) {
    const sl__node *prod = sl__graph_node(g, val->producer);
    pn->of_variable = prod->kind == SL__NODE_VARIABLE && prod->update >= 0;
  }
  if (n->kind != SL__NODE_BOXING) return SL_OK;
  pn->n_steps = sl_boxing_route_step_count(n->boxing);
  pn->steps =
      sl__arena_calloc(p->arena, (size_t)pn->n_steps + 1, sizeof *pn->steps);
  if (!pn->steps) return SL_ENOMEM;
  for (int s = 0; s < pn->n_steps; s++) {
    sl__pstep *ps = &pn->steps[s];
    sl_nd_sbp from, to;
    sl_reduce_op red;
    sl_boxing_step_layout(n->boxing, s, &from, &to);
    ps->op = sl_boxing_op_name(sl_boxing_step_op(n->boxing, s));
    ps->reduce =
        sl_boxing_step_reduce(n->boxing, s, &red) ? sl_reduce_op_name(red) : "";
    ps->mesh_axis = sl_boxing_step_mesh_axis(n->boxing, s);
    sl_nd_sbp_print(&from, buf, sizeof buf);
    ps->from = sl__arena_strdup(p->arena, buf);
    sl_nd_sbp_print(&to, buf, sizeof buf);
    ps->to = sl__arena_strdup(p->arena, buf);
    const int64_t *b = sl_boxing_step_bytes_sent(n->boxing, s);
    for (int q = 0; q < sl_boxing_route_rank_count(n->boxing); q++)
      ps->bytes = SL_MAX(ps->bytes, b[q]);
    ps->predicted_us = sl_boxing_step_predicted_us(n->boxing, s);
    if (!ps->from || !ps->to) return SL_ENOMEM;
  }
  return SL_OK;
}

sl_status sl__pplan_describe(sl__pplan *p, const sl_graph *g) {
  p->n_nodes = sl__graph_node_count(g);
  p->nodes =
      sl__arena_calloc(p->arena, (size_t)p->n_nodes + 1, sizeof *p->nodes);
  if (!p->nodes) return SL_ENOMEM;
  for (int32_t i = 0; i < p->n_nodes; i++)
    SL_CHECK(describe_node(p, g, i));
  for (int32_t i = 0; i < p->n_tasks; i++) {
    sl__task *t = &p->tasks[i];
    if (t->kind == SL__TASK_OP || t->kind == SL__TASK_FEED ||
        t->kind == SL__TASK_FETCH)
      SL_CHECK(task_args(p, g, t));
  }
  return SL_OK;
}

void sl__pplan_free_nodes(sl__pplan *p) {
  for (int32_t i = 0; p->nodes && i < p->n_nodes; i++)
    sl_placement_destroy(p->nodes[i].value.placement);
}

/* ---- for the session --------------------------------------------------------
 */

int32_t sl__task_data_inputs(const sl__task *t) {
  return t->n_in - (t->tick_slot >= 0 ? 1 : 0);
}

void sl__pplan_kernel_ctx(const sl__pplan *p, const sl__task *t,
                          sl__kernel_ctx *k) {
  const sl__pnode *n = &p->nodes[t->node];
  memset(k, 0, sizeof *k);
  k->attrs = &n->attrs;
  k->n_in = sl__task_data_inputs(t);
  k->n_out = t->n_out;
  for (int i = 0; i < t->n_args; i++) {
    const sl__karg *a = &t->args[i];
    bool in = i < k->n_in;
    int j = in ? i : i - k->n_in;
    sl__meta *m = in ? &k->in_meta[j] : &k->out_meta[j];
    m->dtype = a->dtype;
    m->shape.ndim = a->global.ndim;
    for (int d = 0; d < a->global.ndim; d++)
      m->shape.dims[d] = a->box.extent[d];
    (in ? k->in_slice : k->out_slice)[j] = a->box;
    (in ? k->in_global : k->out_global)[j] = a->global;
    (in ? k->in_partial : k->out_partial)[j] = a->partial;
  }
}

int32_t sl__pplan_find_node(const sl__pplan *p, const char *name) {
  for (int32_t i = 0; name && i < p->n_nodes; i++)
    if (strcmp(p->nodes[i].name, name) == 0) return i;
  return -1;
}

sl_status sl__pplan_variable_init(const sl__pplan *p, int32_t node, int rank,
                                  void *buf) {
  const sl__pnode *n = &p->nodes[node];
  const sl__ptensor *v = &n->value;
  sl_slice s;
  sl_status st =
      sl_local_slice(&v->meta.shape, v->placement, &v->sbp, rank, &s);
  if (st != SL_OK) return sl__fail_context(st, "variable '%s': ", n->name);
  return sl__g_init_fill(&n->init, &v->meta.shape, v->meta.dtype, &s, buf);
}

/* ---- checks of a plan read from bytes ---------------------------------------
 */

static sl_status bad_node(const sl__pnode *n, const char *why) {
  return sl__fail(SL_EINVAL, "plan: node '%s': %s", n->name, why);
}

static sl_status bad_task(const sl__task *t, const char *why) {
  return sl__fail(SL_EINVAL, "plan: task '%s': %s", t->name, why);
}

static bool is_kind(const sl__pnode *n, const char *kind) {
  return strcmp(n->kind, kind) == 0;
}

static sl_status check_node(const sl__pplan *p, const sl__pnode *n) {
  if (is_kind(n, "op")) {
    if (!n->def) return bad_node(n, "no op of its name in this sluice");
    for (int a = 0; a < n->attrs.n; a++) {
      const sl__attr *at = &n->attrs.a[a];
      if (!at->name || !at->name[0] || (int)at->kind < SL__ATTR_INT ||
          at->kind > SL__ATTR_INTS || at->n < 0 || at->n > SL_MAX_DIMS)
        return bad_node(n, "a malformed attribute");
    }
    return SL_OK;
  }
  bool valued =
      is_kind(n, "input") || is_kind(n, "variable") || is_kind(n, "fetch");
  if (!valued) return SL_OK;
  const sl__ptensor *v = &n->value;
  if (!v->placement) return bad_node(n, "no value");
  if (sl_nd_sbp_check(&v->sbp, v->placement, &v->meta.shape) != SL_OK ||
      sl_placement_size(v->placement) <= 0)
    return bad_node(n, "its value's nd-SBP does not fit its placement");
  if (is_kind(n, "input") &&
      (n->feed < 0 || n->feed >= p->n_nodes ||
       !is_kind(&p->nodes[n->feed], "input") ||
       p->nodes[n->feed].feed != n->feed ||
       p->nodes[n->feed].value.meta.dtype != v->meta.dtype))
    return bad_node(n, "its feed is no input");
  if (is_kind(n, "variable") && sl__g_init_check(&n->init, v->meta.dtype))
    return bad_node(n, "a bad initializer");
  return SL_OK;
}

/* a's box lies in its global shape, of rank shape's, and shape (a
 * register's, when not NULL) is its extent. */
static bool karg_fits(const sl__karg *a, const sl__regst *r) {
  int nd = a->global.ndim;
  if (nd < 0 || nd > SL_MAX_DIMS || a->box.ndim != nd || (int)a->dtype < 0 ||
      (int)a->dtype >= SL_DTYPE_COUNT)
    return false;
  for (int d = 0; d < nd; d++) {
    int64_t end;
    if (a->global.dims[d] < 0 || a->box.start[d] < 0 || a->box.extent[d] < 0 ||
        __builtin_add_overflow(a->box.start[d], a->box.extent[d], &end) ||
        end > a->global.dims[d])
      return false;
  }
  if (!r) return true;
  if (r->dtype != a->dtype || r->shape.ndim != nd) return false;
  for (int d = 0; d < nd; d++)
    if (r->shape.dims[d] != a->box.extent[d]) return false;
  return true;
}

/* Bytes of rank r's shard of v; -1 for a rank v does not have. */
static int64_t shard_bytes(const sl__ptensor *v, int32_t r) {
  sl_slice box;
  if (r < 0 || r >= sl_placement_size(v->placement) ||
      sl_local_slice(&v->meta.shape, v->placement, &v->sbp, r, &box) != SL_OK)
    return -1;
  return sl_slice_numel(&box) * (int64_t)sl_dtype_size(v->meta.dtype);
}

static sl_status check_op_task(const sl__pplan *p, const sl__task *t,
                               const sl__pnode *n) {
  if (!is_kind(n, "op")) return bad_task(t, "an op task of no op node");
  int32_t ni = sl__task_data_inputs(t);
  const sl__op_def *def = n->def;
  if (ni < def->min_in || ni > def->max_in || t->n_out != def->n_out ||
      t->n_args != ni + t->n_out || (t->tick_slot >= 0 && t->tick_slot < ni))
    return bad_task(t, "inputs and outputs other than its op's");
  for (int32_t i = 0; i < t->n_args; i++) {
    const sl__regst *r = &p->regsts[i < ni ? t->in[i] : t->out[i - ni]];
    if (!karg_fits(&t->args[i], r))
      return bad_task(t, "a shard that is not its register's");
  }
  /* An op reading a file knows its shapes once its session opened it. */
  return n->file ? SL_OK : sl__task_check_shapes(t, n->def, &n->attrs);
}

sl_status sl__task_check_shapes(const sl__task *t, const sl__op_def *def,
                                const sl__attrs *attrs) {
  int32_t ni = sl__task_data_inputs(t);
  sl__meta in[SL_OP_MAX_INPUTS], out[SL_OP_MAX_OUTPUTS];
  for (int32_t i = 0; i < ni; i++)
    in[i] = (sl__meta){t->args[i].global, t->args[i].dtype};
  /* The global shapes are what the op makes of its inputs (a micro-batch's
   * by-position op sees every micro-batch's rows). */
  if (def->infer(attrs, ni, in, out) != SL_OK) {
    sl_clear_error();
    return bad_task(t, "its op refuses its inputs");
  }
  int64_t m = def->by_position ? sl__attr_int(attrs, "micro_batches", 1) : 1;
  for (int32_t j = 0; j < t->n_out; j++) {
    const sl__karg *a = &t->args[ni + j];
    if (j == 0 && m > 1 && out[0].shape.ndim > 0) out[0].shape.dims[0] *= m;
    if (out[j].dtype != a->dtype || !sl_shape_equal(&out[j].shape, &a->global))
      return bad_task(t, "outputs other than its op makes of its inputs");
  }
  return SL_OK;
}

static sl_status check_task(const sl__pplan *p, const sl__task *t) {
  const sl__pnode *n = t->node >= 0 ? &p->nodes[t->node] : NULL;
  if (t->proxy) return SL_OK; /* another machine's: checked there */
  bool args = t->kind == SL__TASK_OP || t->kind == SL__TASK_FEED ||
              t->kind == SL__TASK_FETCH;
  if (!n && t->kind != SL__TASK_TICK) return bad_task(t, "no node");
  if (!args && t->n_args)
    return bad_task(t, "kernel arguments it has no use for");
  switch (t->kind) {
  case SL__TASK_TICK: return n ? bad_task(t, "a tick of a node") : SL_OK;
  case SL__TASK_OP: return check_op_task(p, t, n);
  case SL__TASK_FEED: {
    if (!is_kind(n, "input") || t->n_out != 1 || t->n_args != 1 ||
        !karg_fits(t->args, &p->regsts[t->out[0]]))
      return bad_task(t, "not a shard of its input");
    sl_shape fed = fed_shape(p, &p->nodes[n->feed]);
    if (!sl_shape_equal(&t->args->global, &fed) ||
        t->args->dtype != n->value.meta.dtype)
      return bad_task(t, "cuts another tensor than its feed");
    return SL_OK;
  }
  case SL__TASK_FETCH:
    if (!is_kind(n, "fetch") || sl__task_data_inputs(t) != 1 || t->n_out != 0 ||
        t->n_args != 1 ||
        !karg_fits(t->args, &p->regsts[t->in[t->tick_slot == 0 ? 1 : 0]]) ||
        !sl_shape_equal(&t->args->global, &n->value.meta.shape) ||
        t->args->dtype != n->value.meta.dtype)
      return bad_task(t, "not a shard of its fetch's value");
    return SL_OK;
  case SL__TASK_CONST:
  case SL__TASK_VAR_COPY:
    if (!is_kind(n, "variable") || t->n_out != 1 ||
        p->regsts[t->out[0]].bytes != shard_bytes(&n->value, t->rank))
      return bad_task(t, "not a shard of its variable");
    return SL_OK;
  case SL__TASK_COLL:
  case SL__TASK_XCHG:
  case SL__TASK_LOCAL: /* registers checked against the spec */
    return is_kind(n, "boxing") && t->coll >= 0
               ? SL_OK
               : bad_task(t, "a boxing task of no boxing step");
  case SL__TASK_COPY:
    if (sl__task_data_inputs(t) != 1 || t->n_out != 1 ||
        p->regsts[t->in[t->tick_slot == 0 ? 1 : 0]].bytes !=
            p->regsts[t->out[0]].bytes)
      return bad_task(t, "copies between registers of other sizes");
    return SL_OK;
  }
  return bad_task(t, "an unknown kind");
}

sl_status sl__pplan_check_runtime(const sl__pplan *p) {
  for (int32_t i = 0; i < p->n_nodes; i++)
    SL_CHECK(check_node(p, &p->nodes[i]));
  for (int32_t i = 0; i < p->n_tasks; i++)
    SL_CHECK(check_task(p, &p->tasks[i]));
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const sl__regst *x = &p->regsts[r];
    if (x->var_node >= 0 &&
        x->bytes != shard_bytes(&p->nodes[x->var_node].value, x->rank))
      return sl__fail(SL_EINVAL,
                      "plan: register '%s' is not a shard of its variable",
                      x->name);
  }
  return SL_OK;
}
