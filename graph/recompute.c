/* Recomputation (sl_graph_push_recompute; docs/api.md, "Recomputation").
 *
 * The forward ops created between a push and its pop form a region. A
 * value produced by a region's op is internal to the region when every
 * forward reader of it lies in the same region (a fetch, or an op of
 * another region or of none, makes it the region's output, kept as
 * usual). After autodiff, every backward op that reads an internal value
 * reads a copy made in the backward pass instead: its producer cloned,
 * with the producer's internal inputs cloned in turn and every other input
 * (the region's inputs, weights) read where it is. The forward value then
 * has no reader after its region's forward ops, so the memory planner
 * gives its bytes back there. The graph's nodes are then sorted again,
 * smallest index first among the ready ones, which puts each clone just
 * before the first backward op that reads it (and keeps every other node
 * where it was): the order compile and the memory planner follow. Same
 * kernels on the same inputs: the same bits. Sources (ops without inputs)
 * are never cloned: their values are kept. */
#include <stdio.h>
#include <string.h>

#include "grad.h"

void sl_graph_push_recompute(sl_graph *g) {
  if (!g) return;
  if (g->minimized || g->frozen) {
    sl__g_error(g, SL_ESTATE, "recompute", "push", NULL,
                "regions are made before sl_minimize and compilation");
    return;
  }
  if (g->recompute_depth == (int)SL_ARRAY_LEN(g->recompute_stack)) {
    sl__g_error(g, SL_EINVAL, "recompute", "push", NULL,
                "more than %d nested regions",
                (int)SL_ARRAY_LEN(g->recompute_stack));
    return;
  }
  g->recompute_stack[g->recompute_depth++] = ++g->recompute_regions;
}

void sl_graph_pop_recompute(sl_graph *g) {
  if (g && g->recompute_depth > 0) g->recompute_depth--;
}

typedef struct rc {
  sl_graph *g;
  int32_t nv;      /* values before the pass: only they can be internal */
  int32_t *region; /* value -> its producer's region, 0: none */
  bool *outside;   /* value -> read by a forward node outside its region */
  int32_t *clone;  /* value -> its copy, -1: none yet */
} rc;

static bool internal(const rc *r, int32_t v) {
  return v < r->nv && r->region[v] > 0 && !r->outside[v];
}

/* The copy of internal value v, cloning its producer (and what it needs)
 * the first time; -1 on a graph error. */
static int32_t clone_of(rc *r, int32_t v) {
  sl_graph *g = r->g;
  if (r->clone[v] >= 0) return r->clone[v];
  int32_t pi = g->values[v]->producer;
  sl__node orig = g->nodes[pi]->n; /* a copy: cloning grows g->nodes */
  sl_tensor in[SL_OP_MAX_INPUTS];
  for (int k = 0; k < orig.n_in; k++) {
    int32_t u = internal(r, orig.in[k]) ? clone_of(r, orig.in[k]) : orig.in[k];
    if (u < 0) return -1;
    in[k] = sl__g_tensor(g, u);
  }
  char scope[300];
  snprintf(scope, sizeof scope, "%.250s.recompute", orig.name);
  sl_placement *saved = g->force_placement;
  g->force_placement = orig.placement;
  sl_graph_push_scope(g, scope);
  sl_tensor outs[SL_OP_MAX_OUTPUTS];
  sl_tensor t = sl__g_op(g, orig.op->name, orig.n_in, in, &orig.attrs, outs);
  sl_graph_pop_scope(g);
  g->force_placement = saved;
  if (t.id < 0) return -1;
  sl__node *n = &g->nodes[g->values[t.id]->producer]->n;
  n->stage = orig.stage;
  n->recompute = true;
  for (int j = 0; j < orig.n_out; j++) {
    const sl__value *ov = g->values[orig.out[j]];
    sl__value *cv = g->values[outs[j].id];
    cv->sbp = ov->sbp;
    cv->sbp_fixed = ov->sbp_fixed;
    r->clone[orig.out[j]] = outs[j].id;
  }
  return r->clone[v];
}

/* Sorts g->nodes topologically, the smallest index first among the ready
 * nodes, and renumbers them. */
static sl_status resort(sl_graph *g) {
  int32_t n = g->n_nodes, done = 0;
  int32_t *indeg = sl__calloc((size_t)n + 1, sizeof *indeg);
  int32_t *off = sl__calloc((size_t)n + 2, sizeof *off);
  int32_t *to = sl__calloc((size_t)n * SL_OP_MAX_INPUTS + 1, sizeof *to);
  int32_t *order = sl__calloc((size_t)n + 1, sizeof *order);
  sl__gnode **nodes = sl__calloc((size_t)n + 1, sizeof *nodes);
  sl_status st = indeg && off && to && order && nodes ? SL_OK : SL_ENOMEM;
  /* Readers of each node's outputs, CSR by producer. */
  for (int32_t i = 0; i < n && st == SL_OK; i++)
    for (int k = 0; k < g->nodes[i]->n.n_in; k++) {
      off[g->values[g->nodes[i]->n.in[k]]->producer + 2]++;
      indeg[i]++;
    }
  for (int32_t i = 0; i < n && st == SL_OK; i++)
    off[i + 2] += off[i + 1];
  for (int32_t i = 0; i < n && st == SL_OK; i++)
    for (int k = 0; k < g->nodes[i]->n.n_in; k++)
      to[off[g->values[g->nodes[i]->n.in[k]]->producer + 1]++] = i;
  if (st == SL_OK)
    st = sl__topo_smallest_first(n, off, to, indeg, order, &done);
  if (st == SL_OK && done != n)
    st = sl__fail(SL_EINTERNAL, "recompute: the graph has a cycle");
  if (st == SL_OK) {
    for (int32_t i = 0; i < n; i++)
      nodes[i] = g->nodes[order[i]];
    memcpy(g->nodes, nodes, (size_t)n * sizeof *nodes);
    for (int32_t i = 0; i < n; i++) {
      g->nodes[i]->index = i;
      for (int j = 0; j < g->nodes[i]->n.n_out; j++)
        g->values[g->nodes[i]->n.out[j]]->producer = i;
    }
  }
  sl__free(indeg);
  sl__free(off);
  sl__free(to);
  sl__free(order);
  sl__free(nodes);
  return st;
}

sl_status sl__g_recompute(sl_graph *g) {
  if (g->recompute_regions == 0) return SL_OK;
  rc r = {g, g->n_values, NULL, NULL, NULL};
  int32_t nn = g->n_nodes;
  r.region = sl__calloc((size_t)r.nv + 1, sizeof *r.region);
  r.outside = sl__calloc((size_t)r.nv + 1, sizeof *r.outside);
  r.clone = sl__calloc((size_t)r.nv + 1, sizeof *r.clone);
  sl_status st = r.region && r.outside && r.clone ? SL_OK : SL_ENOMEM;
  for (int32_t v = 0; v < r.nv && st == SL_OK; v++) {
    const sl__gnode *p = g->nodes[g->values[v]->producer];
    r.region[v] = p->n.kind == SL__NODE_OP && p->n.n_in > 0 ? p->recompute : 0;
    r.clone[v] = -1;
  }
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    const sl__gnode *gn = g->nodes[i];
    if (gn->n.backward || gn->n.optimizer) continue;
    for (int k = 0; k < gn->n.n_in; k++) {
      int32_t v = gn->n.in[k];
      if (r.region[v] &&
          (gn->n.kind != SL__NODE_OP || gn->recompute != r.region[v]))
        r.outside[v] = true;
    }
  }
  sl__mark saved = g->mark;
  g->mark = SL__MARK_BACKWARD;
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    if (!g->nodes[i]->n.backward) continue;
    for (int k = 0; k < g->nodes[i]->n.n_in && st == SL_OK; k++) {
      int32_t v = g->nodes[i]->n.in[k];
      if (!internal(&r, v)) continue;
      int32_t c = clone_of(&r, v);
      if (c < 0)
        st = g->err ? g->err : SL_EINTERNAL;
      else
        g->nodes[i]->n.in[k] = c;
    }
  }
  g->mark = saved;
  if (st == SL_OK) st = resort(g);
  sl__free(r.region);
  sl__free(r.outside);
  sl__free(r.clone);
  return st;
}
