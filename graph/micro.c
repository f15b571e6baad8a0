/* Pipelining in the logical graph: micro-batches, stages and passes
 * (DESIGN.md section 7; docs/pipeline.md).
 *
 * A graph with m micro-batches is built for one micro-batch. Every node
 * that depends on an input or a data source computes that micro-batch
 * (micro 0); the rest runs once per step (micro -1: variables, what only
 * variables and constants feed, the optimizer). Unrolling copies the
 * per-micro-batch nodes, forward and backward, for micro-batches 1..m-1
 * ("<name>.mb<k>"), so each micro-batch has its own tasks and registers
 * in the plan; the gradients are summed in micro-batch order and scaled
 * by 1/m before the optimizer, which is the step on the whole batch.
 * Which task runs when is the schedule's business (schedule.c), decided
 * per device from each node's stage, micro-batch and pass. */
#include <string.h>

#include "cpu/npy.h"
#include "graph_priv.h"

/* Micro-batch counts beyond this would make plans of millions of tasks. */
#define MAX_MICRO_BATCHES 65536

static const char *const schedule_names[SL__SCHEDULE_COUNT] = {
    "1f1b", "gpipe", "interleaved", "zero-bubble"};

const char *sl__schedule_name(sl__schedule s) {
  return (int)s >= 0 && (int)s < SL__SCHEDULE_COUNT ? schedule_names[s] : "?";
}

bool sl__schedule_parse(const char *name, sl__schedule *out) {
  for (int i = 0; name && i < SL__SCHEDULE_COUNT; i++)
    if (strcmp(name, schedule_names[i]) == 0) {
      *out = (sl__schedule)i;
      return true;
    }
  return false;
}

int32_t sl__graph_micro_batches(const sl_graph *g) {
  return g->micro_batches > 1 ? g->micro_batches : 1;
}

sl__schedule sl__graph_schedule(const sl_graph *g) { return g->schedule; }

sl_status sl_graph_set_micro_batches(sl_graph *g, int m) {
  if (!g) return sl__fail(SL_EINVAL, "set_micro_batches: NULL graph");
  if (g->frozen || g->minimized)
    return sl__fail(SL_ESTATE,
                    "set_micro_batches: the graph is already %s; set "
                    "micro-batches before sl_minimize",
                    g->frozen ? "compiled" : "minimized");
  if (m < 1 || m > MAX_MICRO_BATCHES)
    return sl__fail(SL_EINVAL, "set_micro_batches: %d is outside [1, %d]", m,
                    MAX_MICRO_BATCHES);
  g->micro_batches = m;
  return SL_OK;
}

sl_status sl_graph_set_schedule(sl_graph *g, const char *schedule) {
  if (!g) return sl__fail(SL_EINVAL, "set_schedule: NULL graph");
  if (g->frozen)
    return sl__fail(SL_ESTATE, "set_schedule: the graph is already compiled");
  if (!sl__schedule_parse(schedule, &g->schedule))
    return sl__fail(SL_EINVAL,
                    "set_schedule: unknown schedule '%s' (known: 1f1b, gpipe, "
                    "interleaved, zero-bubble)",
                    schedule ? schedule : "(null)");
  return SL_OK;
}

void sl_graph_push_stage(sl_graph *g, int stage) {
  if (!g) return;
  char name[32];
  snprintf(name, sizeof name, "%d", stage);
  if (stage < 0) {
    sl__g_error(g, SL_EINVAL, "stage", name, NULL, "a stage is >= 0");
    return;
  }
  if (g->stage_depth == (int)SL_ARRAY_LEN(g->stages)) {
    sl__g_error(g, SL_EINVAL, "stage", name, NULL, "more than %d nested stages",
                (int)SL_ARRAY_LEN(g->stages));
    return;
  }
  g->stages[g->stage_depth++] = stage;
}

void sl_graph_pop_stage(sl_graph *g) {
  if (g && g->stage_depth > 0) g->stage_depth--;
}

/* ---- stages ---------------------------------------------------------------
 */

/* A node that brings a new micro-batch's data: an input with rows (a 0-d
 * input is a value for the whole step), or a data source whose value
 * changes each step. */
static bool micro_source(const sl_graph *g, const sl__node *n) {
  if (n->kind == SL__NODE_INPUT)
    return g->values[n->out[0]]->meta.shape.ndim > 0;
  return n->kind == SL__NODE_OP && n->n_in == 0 && n->op->per_step &&
         sl__attr_int(&n->attrs, "per_step", 1) != 0;
}

void sl__g_assign_stages(sl_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sl__node *n = &g->nodes[i]->n;
    if (n->micro != SL__MICRO_UNSET) continue;
    bool per = micro_source(g, n);
    int32_t stage = 0;
    for (int k = 0; k < n->n_in; k++) {
      const sl__node *p = &g->nodes[g->values[n->in[k]]->producer]->n;
      if (p->micro < 0) continue;
      per = true;
      stage = SL_MAX(stage, p->stage + (p->placement != n->placement));
    }
    if (per && g->unrolled && !micro_source(g, n)) {
      sl__g_error(g, SL_EINVAL, "op", n->name, n->op ? n->op->name : NULL,
                  "built after sl_minimize on a tensor of each "
                  "micro-batch: with micro-batches, build every op on "
                  "the batch before sl_minimize (fetches are fine)");
      n->micro = -1;
      continue;
    }
    n->micro = per ? 0 : -1;
    if (!per)
      n->stage = -1;
    else if (n->stage < 0)
      n->stage = stage;
  }
}

void sl__g_assign_phases(sl_graph *g) {
  /* In reverse order, so that every consumer is seen before its producer:
   * a backward node is B when a backward node of an earlier stage, or a B
   * node, reads one of its outputs. */
  bool *need = sl__calloc((size_t)g->n_values + 1, sizeof *need);
  if (!need) return; /* phases stay B: a correct, less overlapped order */
  for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
    sl__node *n = &g->nodes[i]->n;
    if (n->micro < 0 || !n->backward) continue;
    bool is_b = false;
    for (int j = 0; j < n->n_out; j++)
      is_b = is_b || need[n->out[j]];
    n->phase = is_b ? SL__PHASE_B : SL__PHASE_W;
    for (int k = 0; k < n->n_in; k++) {
      const sl__node *p = &g->nodes[g->values[n->in[k]]->producer]->n;
      if (p->backward && p->micro == n->micro)
        need[n->in[k]] = need[n->in[k]] || is_b || n->stage < p->stage;
    }
  }
  sl__free(need);
}

/* ---- unrolling ------------------------------------------------------------
 */

/* The copy of node i for micro-batch k (1..m-1). */
static sl_status copy_node(sl_graph *g, int32_t i, int32_t k) {
  int32_t nv = g->n_copied, m = g->micro_batches;
  sl__gnode *src = g->nodes[i];
  const sl__node *n = &src->n;
  int32_t in[SL_OP_MAX_INPUTS];
  sl__meta out[SL_OP_MAX_OUTPUTS];
  for (int j = 0; j < n->n_in; j++)
    in[j] = g->copy[(size_t)k * nv + n->in[j]];
  for (int j = 0; j < n->n_out; j++)
    out[j] = g->values[n->out[j]]->meta;
  char name[300];
  snprintf(name, sizeof name, "%.240s.mb%d", n->name, (int)k);
  sl__gnode *c = sl__g_new_node(g, n->kind, name, n->op ? n->op->name : NULL,
                                n->placement, n->n_in, in, n->n_out, out);
  if (!c) return g->err;
  /* sl__g_new_node may have moved g->nodes: src stays valid (arena). */
  c->n.op = n->op;
  c->n.attrs = n->attrs;
  c->n.backward = n->backward;
  c->n.optimizer = n->optimizer;
  c->n.recompute = n->recompute;
  c->n.micro = k;
  c->n.micro_of = i;
  c->n.stage = n->stage;
  c->n.phase = n->phase;
  c->trainable = src->trainable;
  for (int j = 0; j < n->n_out; j++) {
    const sl__value *ov = g->values[n->out[j]];
    sl__value *cv = g->values[c->n.out[j]];
    cv->sbp = ov->sbp;
    cv->sbp_fixed = ov->sbp_fixed;
    g->copy[(size_t)k * nv + n->out[j]] = c->n.out[j];
  }
  if (src->npy_id >= 0) { /* its own handle: each node releases its own */
    char path[4096];
    SL_CHECK(sl__npy_path(src->npy_id, path, sizeof path));
    SL_CHECK(sl__npy_open(path, &c->npy_id));
    SL_CHECK(sl__attrs_set_int(&c->n.attrs, "file", c->npy_id));
  }
  if (n->op && n->op->by_position) {
    SL_CHECK(sl__attrs_set_int(&c->n.attrs, "micro", k));
    SL_CHECK(sl__attrs_set_int(&c->n.attrs, "micro_batches", m));
  }
  return SL_OK;
}

/* Moves node i to the end of the node list (a fetch whose input is built
 * after it), renumbering the nodes after it. */
static void move_to_end(sl_graph *g, int32_t i) {
  sl__gnode *x = g->nodes[i];
  for (int32_t j = i; j + 1 < g->n_nodes; j++) {
    g->nodes[j] = g->nodes[j + 1];
    g->nodes[j]->index = j;
    for (int o = 0; o < g->nodes[j]->n.n_out; o++)
      g->values[g->nodes[j]->n.out[o]]->producer = j;
  }
  g->nodes[g->n_nodes - 1] = x;
  x->index = g->n_nodes - 1;
  for (int o = 0; o < x->n.n_out; o++)
    g->values[x->n.out[o]]->producer = x->index;
}

/* A node built over all micro-batches: it runs once per step. */
static sl_tensor once_per_step(sl_graph *g, sl_tensor t) {
  if (t.id >= 0) {
    sl__node *n = &g->nodes[g->values[t.id]->producer]->n;
    n->micro = -1;
    n->stage = -1;
  }
  return t;
}

/* x0 + x1 + ... in micro-batch order, then times 1/m: each add belongs to
 * the micro-batch it adds (and to that copy's stage and pass). */
static sl_tensor micro_mean(sl_graph *g, int32_t v) {
  int32_t nv = g->n_copied, m = g->micro_batches;
  sl_placement *saved = g->force_placement;
  g->force_placement = g->values[v]->placement;
  sl_tensor acc = sl__g_tensor(g, v);
  for (int32_t k = 1; k < m && acc.id >= 0; k++) {
    sl_tensor x = sl__g_tensor(g, g->copy[(size_t)k * nv + v]);
    const sl__node *xn = &g->nodes[g->values[x.id]->producer]->n;
    acc = sl_add(acc, x);
    if (acc.id < 0) break;
    sl__node *an = &g->nodes[g->values[acc.id]->producer]->n;
    an->micro = k;
    an->stage = xn->stage;
    an->phase = xn->phase;
    an->backward = xn->backward;
  }
  if (acc.id >= 0) acc = once_per_step(g, sl_mul_scalar(acc, 1.0 / m));
  g->force_placement = saved;
  return acc;
}

/* The axis-0 concatenation of v's copies (in groups of the op's most
 * inputs). */
static sl_tensor micro_concat(sl_graph *g, int32_t v) {
  int32_t nv = g->n_copied, m = g->micro_batches;
  sl_tensor *xs = sl__calloc((size_t)m, sizeof *xs);
  if (!xs) return sl__g_fail_op(g, "concat", "out of memory");
  for (int32_t k = 0; k < m; k++)
    xs[k] = sl__g_tensor(g, g->copy[(size_t)k * nv + v]);
  int32_t n = m;
  while (n > 1) {
    int32_t out = 0;
    for (int32_t i = 0; i < n; i += SL_OP_MAX_INPUTS) {
      int32_t c = SL_MIN(SL_OP_MAX_INPUTS, n - i);
      xs[out++] =
          c == 1 ? xs[i] : once_per_step(g, sl_concat((int)c, xs + i, 0));
    }
    n = out;
  }
  sl_tensor r = xs[0];
  sl__free(xs);
  return r;
}

int32_t sl__g_fetch_value(sl_graph *g, int32_t v) {
  if (!g->copy || v >= g->n_copied) return v;
  const sl__value *val = g->values[v];
  const sl__node *p = &g->nodes[val->producer]->n;
  if (p->micro != 0) return v;
  /* Built once, found again by name. */
  char name[300];
  snprintf(name, sizeof name, "%.240s.merged%d", p->name, (int)val->index);
  sl__gnode *done = sl__g_find(g, name);
  if (done) return done->n.out[0];
  bool mean = sl_shape_numel(&val->meta.shape) == 1 &&
              sl_dtype_is_float(val->meta.dtype);
  if (!mean && val->meta.shape.ndim == 0) {
    sl__g_error(g, SL_EINVAL, "fetch", p->name, NULL,
                "a 0-d %s tensor of each micro-batch has no merge over "
                "micro-batches (a float is averaged, others concatenated "
                "along axis 0)",
                sl_dtype_name(val->meta.dtype));
    return -1;
  }
  char saved[sizeof g->scope];
  memcpy(saved, g->scope, sizeof saved);
  g->scope[0] = '\0';
  sl__mark mark = g->mark;
  g->mark = SL__MARK_FORWARD;
  sl_tensor r = mean ? micro_mean(g, v) : micro_concat(g, v);
  if (r.id >= 0) r = sl_name(r, name);
  g->mark = mark;
  memcpy(g->scope, saved, sizeof saved);
  return r.id;
}

sl_status sl__g_unroll(sl_graph *g, int n, sl_tensor *grads) {
  if (g->err) return g->err;
  sl__g_assign_stages(g);
  if (g->err || g->unrolled || g->micro_batches <= 1) return g->err;
  g->unrolled = true;
  int32_t m = g->micro_batches, nv = g->n_values, nn = g->n_nodes;
  g->copy = sl__calloc((size_t)m * nv + 1, sizeof *g->copy);
  if (!g->copy)
    return sl__g_error(g, SL_ENOMEM, "micro-batches", "unroll", NULL,
                       "out of memory");
  g->n_copied = nv;
  for (int32_t k = 0; k < m; k++)
    for (int32_t v = 0; v < nv; v++)
      g->copy[(size_t)k * nv + v] = v;
  char saved[sizeof g->scope];
  memcpy(saved, g->scope, sizeof saved);
  g->scope[0] = '\0';
  sl__mark mark = g->mark;
  sl_status st = SL_OK;
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    sl__node *nd = &g->nodes[i]->n;
    if (nd->micro != 0 || nd->kind == SL__NODE_FETCH) continue;
    if (nd->op && nd->op->by_position) {
      st = sl__attrs_set_int(&nd->attrs, "micro", 0);
      if (st == SL_OK) st = sl__attrs_set_int(&nd->attrs, "micro_batches", m);
    }
    for (int32_t k = 1; k < m && st == SL_OK; k++)
      st = copy_node(g, i, k);
  }
  memcpy(g->scope, saved, sizeof saved);
  if (st != SL_OK)
    return g->err ? g->err
                  : sl__g_error_last(g, st, "micro-batches", "unroll", NULL);
  /* Gradients: the mean over micro-batches, in the backward pass. */
  g->mark = SL__MARK_BACKWARD;
  for (int i = 0; i < n && !g->err; i++) {
    const sl__node *p = &g->nodes[g->values[grads[i].id]->producer]->n;
    if (p->micro == 0) grads[i] = micro_mean(g, grads[i].id);
  }
  g->mark = mark;
  /* Fetches made before: of their micro-batches' merge. */
  for (int32_t i = 0; i < nn && !g->err; i++) {
    sl__node *f = &g->nodes[i]->n;
    if (f->kind != SL__NODE_FETCH || f->micro != 0) continue;
    int32_t v = sl__g_fetch_value(g, f->in[0]);
    if (v < 0) break;
    f->in[0] = v;
    f->micro = -1;
    f->stage = -1;
    move_to_end(g, i--);
    nn--;
  }
  sl__g_assign_stages(g);
  return g->err;
}

/* ---- kernels --------------------------------------------------------------
 */

void sl__graph_micro_shift(const sl_graph *g, const sl__node *n,
                           sl__kernel_ctx *k) {
  (void)g;
  if (n->kind != SL__NODE_OP || !n->op->by_position || n->micro < 0) return;
  int64_t m = sl__attr_int(&n->attrs, "micro_batches", 1);
  int64_t mb = sl__attr_int(&n->attrs, "micro", 0);
  if (m <= 1 || k->out_global[0].ndim < 1) return;
  int64_t rows = k->out_global[0].dims[0];
  k->out_global[0].dims[0] = rows * m;
  k->out_slice[0].start[0] += rows * mb;
}
