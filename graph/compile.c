/* Compilation: SBP inference in topological order, its refinement, then
 * boxing insertion.
 *
 * Inference: each op takes, per mesh axis of its placement, the 1-D
 * signature (the op's list, with all-B first) that matches the most
 * producers' SBPs on that axis; ties go to the cheapest boxing of the
 * mismatching inputs (the planner's predicted time) plus, for partial
 * outputs, the reduction they will need, then to the earlier signature. A value
 * whose SBP the user fixed (inputs, variables, sl_to_global outputs, sources
 * given an SBP) keeps it: an op producing one only considers signatures giving
 * it. A source op (no inputs) given no SBP stays open until its first consumer
 * decides: it matches any SBP it can produce, and takes what that consumer
 * chose (B if it cannot, or if nothing consumes it). So does, on the mesh
 * axes where its inputs are B or small partial sums, an op that could as
 * well produce a split of its output from whole inputs (deferrable): no
 * device then builds a whole value only for its consumer to slice it.
 *
 * Refinement: each op again, now that every reader's choice is known, may
 * take a signature whose boxings are predicted cheaper (see below).
 *
 * Boxing insertion: wherever a consumer needs (placement, nd-SBP) other
 * than its producer's, a BOXING node holding the planner's plan is put just
 * before the consumer (one per distinct need of a value, shared by its
 * consumers); a variable's update is boxed to the variable's layout. */
#include <math.h>
#include <string.h>

#include "graph_priv.h"

typedef struct infer_ctx {
  sl_graph *g;
  /* Per value, the mesh axes whose SBP its first consumer decides (bit m:
   * axis m): every axis of a source given none, the axes a deferred op's
   * inputs leave free (deferrable); 0: decided. */
  uint8_t *open;
} infer_ctx;

static sl_nd_sbp nd_all_b(int ndim) {
  sl_nd_sbp s;
  memset(&s, 0, sizeof s);
  s.ndim = ndim;
  for (int m = 0; m < ndim; m++)
    s.sbp[m] = sl_sbp_broadcast();
  return s;
}

/* What a boxing moves between devices: its steps that do (not a local
 * slice or zeroing), and the bytes of the value they move, summed. */
typedef struct exchange_count {
  int steps;
  int64_t bytes;
} exchange_count;

static bool needs_boxing(const sl__value *v, const sl_placement *p,
                         const sl_nd_sbp *want) {
  return v->placement != p || !sl_nd_sbp_equal(&v->sbp, want);
}

/* Predicted µs of boxing value v to (p, want); HUGE_VAL when no plan.
 * Adds what it exchanges to *ex (NULL: not wanted). */
static double boxing_cost(const sl__value *v, const sl_placement *p,
                          const sl_nd_sbp *want, exchange_count *ex) {
  if (!needs_boxing(v, p, want)) return 0;
  if (sl_nd_sbp_check(want, p, &v->meta.shape) != SL_OK) return HUGE_VAL;
  sl_boxing_route *plan = NULL;
  if (sl_boxing_route_create(&v->meta.shape, v->meta.dtype, v->placement,
                             &v->sbp, p, want, NULL, &plan) != SL_OK)
    return HUGE_VAL;
  double t = sl_boxing_route_predicted_us(plan);
  int64_t bytes =
      sl_shape_numel(&v->meta.shape) * (int64_t)sl_dtype_size(v->meta.dtype);
  for (int s = 0; ex && s < sl_boxing_route_step_count(plan); s++) {
    sl_boxing_op op = sl_boxing_step_op(plan, s);
    if (op == SL_BOXING_SLICE || op == SL_BOXING_ZERO) continue;
    ex->steps++;
    ex->bytes += bytes;
  }
  sl_boxing_route_destroy(plan);
  return t;
}

/* Whether every axis of a layout fits the tensor: split axes in range. */
static bool sig_fits(const sl__sbp_sig *s, const sl__node *n,
                     const sl_graph *g) {
  for (int i = 0; i < n->n_in; i++) {
    const sl__value *v = g->values[n->in[i]];
    if (s->in[i].kind == SL_SBP_SPLIT &&
        (s->in[i].axis < 0 || s->in[i].axis >= v->meta.shape.ndim))
      return false;
  }
  for (int j = 0; j < n->n_out; j++) {
    const sl__value *v = g->values[n->out[j]];
    if (s->out[j].kind == SL_SBP_SPLIT &&
        (s->out[j].axis < 0 || s->out[j].axis >= v->meta.shape.ndim))
      return false;
  }
  return true;
}

/* Whether n may take sig on mesh axis m, its layouts on the axes before m
 * being in_nd and out_nd: an even signature only where its splits are even
 * (kernels/op.h). */
static bool sig_even_holds(const sl_graph *g, const sl__node *n,
                           const sl__sbp_sig *sig, const sl_nd_sbp *in_nd,
                           const sl_nd_sbp *out_nd, int m) {
  if (!sig->even) return true;
  sl__meta in[SL_OP_MAX_INPUTS], out[SL_OP_MAX_OUTPUTS];
  for (int i = 0; i < n->n_in; i++)
    in[i] = g->values[n->in[i]]->meta;
  for (int j = 0; j < n->n_out; j++)
    out[j] = g->values[n->out[j]]->meta;
  int mesh[SL_MAX_MESH_AXES];
  for (int k = 0; k <= m; k++)
    mesh[k] = sl_placement_mesh_dim(n->placement, k);
  return sl__sig_even_holds(sig, n->n_in, in, in_nd, n->n_out, out, out_nd,
                            mesh, m);
}

/* The 1-D signatures op node n may take, into cand (room for
 * SL_OP_MAX_SIGNATURES + 1): all-B first, then the op's own that fit its
 * tensors. Returns how many. */
static int op_candidates(const sl_graph *g, const sl__node *n,
                         sl__sbp_sig *cand) {
  sl__meta metas[SL_OP_MAX_INPUTS];
  for (int i = 0; i < n->n_in; i++)
    metas[i] = g->values[n->in[i]]->meta;
  memset(&cand[0], 0, sizeof cand[0]);
  for (int i = 0; i < n->n_in; i++)
    cand[0].in[i] = sl_sbp_broadcast();
  for (int j = 0; j < n->n_out; j++)
    cand[0].out[j] = sl_sbp_broadcast();
  int nc = 1;
  if (n->op->signatures) {
    int k = n->op->signatures(&n->attrs, n->n_in, metas, cand + 1,
                              SL_OP_MAX_SIGNATURES);
    for (int i = 0; i < k; i++)
      if (sig_fits(&cand[1 + i], n, g)) cand[nc++] = cand[1 + i];
  }
  return nc;
}

/* Input value v as op node n reads it for inference: a ZeRO-3 weight is
 * kept as its shard, but its readers other than its update take it in
 * the layout it had before ZeRO (graph/minimize.c), which compile then
 * gathers for them; tmp holds that view. */
static const sl__value *read_view(const sl_graph *g, const sl__node *n,
                                  int32_t v, sl__value *tmp) {
  const sl__value *val = g->values[v];
  const sl__gnode *p = g->nodes[val->producer];
  if (p->n.kind != SL__NODE_VARIABLE || !p->zero3 || n->op->weight_update)
    return val;
  *tmp = *val;
  tmp->sbp = p->zero3_read;
  return tmp;
}

/* Whether the open value of op node src can take 1-D SBP s: a source's
 * output any SBP it can produce; a deferred op's (all its inputs B) one
 * of its signatures with every input B gives. */
static bool open_accepts(const sl_graph *g, const sl__node *src, sl_sbp s) {
  if (src->n_in == 0) return sl__g_source_accepts(src->op, &src->attrs, s);
  if (s.kind == SL_SBP_BROADCAST) return true;
  sl__sbp_sig cand[SL_OP_MAX_SIGNATURES + 1];
  int nc = op_candidates(g, src, cand);
  for (int k = 1; k < nc; k++) {
    bool all_b = true;
    for (int i = 0; i < src->n_in; i++)
      all_b = all_b && cand[k].in[i].kind == SL_SBP_BROADCAST;
    if (all_b && sl_sbp_equal(cand[k].out[0], s)) return true;
  }
  return false;
}

/* Whether op node n could compute only a split of its single output from
 * broadcast inputs (broadcast_to, one_hot, ...) on a mesh axis where its
 * inputs are broadcast, or partial (sum, max, min) and smaller than the
 * output (broadcast_to of a partial [rows, 1]). On such axes it takes its
 * inputs whole (a partial one all-reduced while small) and lets its first
 * consumer choose its output's layout, as a source does; on the others an
 * input is split and a signature of the op fixes the output. No device
 * then builds the whole of a value that is then sliced (the gradient of a
 * mean, a broadcast_to of a scalar, consumed split), and no partial sum is
 * expanded to be reduced at the larger size (the gradient of a sum over
 * split classes). Fills n's in_sbp, the output's preset layout (B on the
 * open axes) and *open_axes. */
static bool deferrable(const infer_ctx *c, sl__node *n, sl_nd_sbp *out_sbp,
                       uint8_t *open_axes) {
  const sl_graph *g = c->g;
  if (n->n_out != 1 || g->values[n->out[0]]->sbp_fixed) return false;
  int M = sl_placement_mesh_ndim(n->placement);
  int64_t out = sl_shape_numel(&g->values[n->out[0]]->meta.shape);
  for (int i = 0; i < n->n_in; i++) {
    const sl__value *v = g->values[n->in[i]];
    if (c->open[n->in[i]] || v->placement != n->placement || v->sbp.ndim != M)
      return false;
  }
  sl__sbp_sig cand[SL_OP_MAX_SIGNATURES + 1];
  int nc = op_candidates(g, n, cand);
  sl_nd_sbp in[SL_OP_MAX_INPUTS];
  *out_sbp = nd_all_b(M);
  *open_axes = 0;
  bool useful = false;
  for (int m = 0; m < M; m++) {
    bool free = true; /* every input B or a small partial on axis m */
    for (int i = 0; i < n->n_in; i++) {
      const sl__value *v = g->values[n->in[i]];
      sl_sbp s = v->sbp.sbp[m];
      bool small_part =
          s.kind == SL_SBP_PARTIAL && sl_shape_numel(&v->meta.shape) < out;
      if (s.kind == SL_SBP_PARTIAL && !small_part) return false;
      free = free && s.kind != SL_SBP_SPLIT;
      in[i].ndim = M;
      in[i].sbp[m] = s.kind == SL_SBP_SPLIT ? s : sl_sbp_broadcast();
    }
    if (free) {
      *open_axes |= (uint8_t)(1u << m);
      useful = useful || sl_placement_mesh_dim(n->placement, m) > 1;
      continue;
    }
    int k = 1; /* the signature taking the inputs as they are split */
    for (; k < nc; k++) {
      bool same = true;
      for (int i = 0; i < n->n_in; i++)
        same = same && sl_sbp_equal(cand[k].in[i], in[i].sbp[m]);
      if (same) break;
    }
    if (k == nc) return false;
    out_sbp->sbp[m] = cand[k].out[0];
  }
  if (!useful) return false;
  bool splits = false;
  for (int a = 0; a < g->values[n->out[0]]->meta.shape.ndim && !splits; a++)
    splits = open_accepts(g, n, sl_sbp_split(a));
  if (!splits) return false;
  for (int i = 0; i < n->n_in; i++)
    n->in_sbp[i] = in[i];
  return true;
}

/* An open value's layout where nothing decides its open axes: B there;
 * a deferred op's preset layout on its other axes. */
static sl_nd_sbp open_default(const sl_graph *g, const sl__value *v) {
  if (g->nodes[v->producer]->n.n_in == 0)
    return nd_all_b(sl_placement_mesh_ndim(v->placement));
  return v->sbp;
}

static sl_status infer_op(infer_ctx *c, sl__gnode *gn) {
  sl_graph *g = c->g;
  sl__node *n = &gn->n;
  int M = sl_placement_mesh_ndim(n->placement);
  sl__value views[SL_OP_MAX_INPUTS];
  static _Thread_local sl__sbp_sig cand[SL_OP_MAX_SIGNATURES + 1];
  int nc = op_candidates(g, n, cand);
  sl_nd_sbp in_nd[SL_OP_MAX_INPUTS], out_nd[SL_OP_MAX_OUTPUTS];
  for (int i = 0; i < n->n_in; i++)
    in_nd[i] = nd_all_b(M);
  for (int j = 0; j < n->n_out; j++)
    out_nd[j] = nd_all_b(M);
  for (int m = 0; m < M; m++) {
    int best = -1, best_score = -1;
    double best_cost = HUGE_VAL;
    for (int s = 0; s < nc; s++) {
      const sl__sbp_sig *sig = &cand[s];
      bool ok = sig_even_holds(g, n, sig, in_nd, out_nd, m);
      for (int j = 0; j < n->n_out && ok; j++) {
        const sl__value *o = g->values[n->out[j]];
        if (o->sbp_fixed && !sl_sbp_equal(o->sbp.sbp[m], sig->out[j]))
          ok = false;
      }
      if (!ok) continue;
      int score = 0;
      bool mism[SL_OP_MAX_INPUTS] = {false};
      for (int i = 0; i < n->n_in; i++) {
        const sl__value *v = read_view(g, n, n->in[i], &views[i]);
        if (c->open[n->in[i]] >> m & 1) {
          const sl__node *src = &g->nodes[v->producer]->n;
          if (open_accepts(g, src, sig->in[i])) score++;
          continue;
        }
        if (v->sbp.ndim == M && sl_sbp_equal(v->sbp.sbp[m], sig->in[i]))
          score++;
        else
          mism[i] = true;
      }
      if (score < best_score) continue;
      double cost = 0;
      {
        for (int i = 0; i < n->n_in; i++) {
          if (!mism[i]) continue;
          const sl__value *v = read_view(g, n, n->in[i], &views[i]);
          sl_nd_sbp want = v->sbp.ndim == M ? v->sbp : nd_all_b(M);
          for (int k = 0; k < m; k++)
            want.sbp[k] = in_nd[i].sbp[k];
          want.sbp[m] = sig->in[i];
          cost += boxing_cost(v, n->placement, &want, NULL);
        }
      }
      /* A partial output must be reduced eventually (unless a consumer
       * takes it partial): count that reduction, so a tie does not defer
       * an all-reduce by turning other inputs partial for free. */
      for (int j = 0; j < n->n_out; j++) {
        if (sig->out[j].kind != SL_SBP_PARTIAL) continue;
        const sl__value *o = g->values[n->out[j]];
        if (o->sbp_fixed) continue;
        sl__value tmp = *o;
        tmp.placement = n->placement;
        tmp.sbp = nd_all_b(M);
        tmp.sbp.sbp[m] = sig->out[j];
        sl_nd_sbp b = nd_all_b(M);
        cost += boxing_cost(&tmp, n->placement, &b, NULL);
      }
      if (score > best_score || cost < best_cost) {
        best = s;
        best_score = score;
        best_cost = cost;
      }
    }
    if (best < 0) {
      char want[64];
      sl_nd_sbp_print(&g->values[n->out[0]]->sbp, want, sizeof want);
      return sl__g_error(g, SL_EINVAL, "op", n->name, n->op->name,
                         "no SBP signature of the op produces the requested "
                         "%s (mesh axis %d)",
                         want, m);
    }
    for (int i = 0; i < n->n_in; i++)
      in_nd[i].sbp[m] = cand[best].in[i];
    for (int j = 0; j < n->n_out; j++)
      out_nd[j].sbp[m] = cand[best].out[j];
  }
  for (int i = 0; i < n->n_in; i++) {
    n->in_sbp[i] = in_nd[i];
    sl__value *v = g->values[n->in[i]];
    if (!c->open[n->in[i]]) continue;
    /* The first consumer decides an open value's SBP on its open axes (B
     * where it cannot produce what the consumer takes). */
    sl__node *src = &g->nodes[v->producer]->n;
    sl_nd_sbp s = open_default(g, v);
    if (s.ndim == M)
      for (int m = 0; m < M; m++)
        if ((c->open[n->in[i]] >> m & 1) &&
            open_accepts(g, src, in_nd[i].sbp[m]))
          s.sbp[m] = in_nd[i].sbp[m];
    v->sbp = s;
    src->out_sbp[v->index] = s;
    c->open[n->in[i]] = 0;
  }
  for (int j = 0; j < n->n_out; j++) {
    sl__value *o = g->values[n->out[j]];
    n->out_sbp[j] = out_nd[j];
    if (!o->sbp_fixed) o->sbp = out_nd[j];
  }
  return SL_OK;
}

static sl_status infer(sl_graph *g) {
  int32_t nv = g->n_values; /* the values c.open has room for */
  infer_ctx c = {g, sl__calloc((size_t)nv + 1, sizeof(uint8_t))};
  if (!c.open) return SL_ENOMEM;
  sl_status st = SL_OK;
  for (int32_t i = 0; i < g->n_nodes && st == SL_OK; i++) {
    sl__gnode *gn = g->nodes[i];
    sl__node *n = &gn->n;
    sl_nd_sbp preset;
    uint8_t open_axes;
    switch (n->kind) {
    case SL__NODE_INPUT:
    case SL__NODE_VARIABLE: n->out_sbp[0] = g->values[n->out[0]]->sbp; break;
    case SL__NODE_OP:
      if (n->n_in == 0) {
        for (int j = 0; j < n->n_out; j++) {
          sl__value *v = g->values[n->out[j]];
          if (v->sbp_fixed)
            n->out_sbp[j] = v->sbp;
          else
            c.open[n->out[j]] = 0xff;
        }
      } else if (deferrable(&c, n, &preset, &open_axes)) {
        g->values[n->out[0]]->sbp = preset;
        c.open[n->out[0]] = open_axes;
      } else if (sl__g_class_split(g, n, c.open)) {
        /* Infer the expansion from its first op, now at index i. */
        st = sl__g_class_expand(g, i);
        uint8_t *open = st == SL_OK
                            ? sl__reallocarray(c.open, (size_t)g->n_values + 1,
                                               sizeof *open)
                            : NULL;
        if (open) {
          for (int32_t v = nv; v <= g->n_values; v++)
            open[v] = 0;
          c.open = open;
          nv = g->n_values;
          i--;
        } else if (st == SL_OK) {
          st = SL_ENOMEM;
        }
      } else {
        st = infer_op(&c, gn);
      }
      break;
    case SL__NODE_FETCH:
    case SL__NODE_BOXING: {
      sl__value *v = g->values[n->in[0]];
      if (c.open[n->in[0]]) {
        v->sbp = open_default(g, v);
        g->nodes[v->producer]->n.out_sbp[v->index] = v->sbp;
        c.open[n->in[0]] = 0;
      }
      n->in_sbp[0] = v->sbp;
      break;
    }
    }
  }
  /* Sources nothing decided: B. */
  for (int32_t v = 0; v < g->n_values && st == SL_OK; v++)
    if (c.open[v]) {
      sl__value *val = g->values[v];
      val->sbp = open_default(g, val);
      g->nodes[val->producer]->n.out_sbp[val->index] = val->sbp;
    }
  sl__free(c.open);
  return st;
}

/* ---- refinement ---------------------------------------------------------- */

/* Inference decides each op once, in order, seeing only its producers. It
 * can take a partial input as it stands and gather another input where a
 * later reader of the same partial value makes it whole anyway: tensor
 * parallelism's attention projection had its weight gradient gather every
 * head and reduce-scatter a partial product, while the partial output
 * gradient it read was all-reduced for the input gradient regardless.
 * Refinement revisits each op with every decision known: on the last mesh
 * axis it takes the signature whose boxings are predicted cheapest (of its
 * inputs, where no other reader needs the same boxing; of its outputs, to
 * what their readers take), when strictly cheaper than its own; the
 * predicted total falls at each change, so the sweeps end. The planner
 * predicts boxing, not compute or memory, and tiny boxings by their
 * latency alone; so a change must also move no more data in no more
 * exchanges, and never give every device the whole op's work where the
 * op was divided, nor add partial values (whole-sized on every device). */

typedef struct value_reader {
  int32_t node;
  int slot; /* input slot; -1: a variable reading its update */
} value_reader;

typedef struct refine_ctx {
  sl_graph *g;
  int32_t *first; /* value v's readers: rd[first[v] .. first[v + 1]) */
  value_reader *rd;
} refine_ctx;

/* Where and how reader r takes its value. */
static void reader_wants(const sl_graph *g, value_reader r,
                         const sl_placement **p, sl_nd_sbp *want) {
  const sl__node *n = &g->nodes[r.node]->n;
  if (r.slot < 0) {
    const sl__value *var = g->values[n->out[0]];
    *p = var->placement;
    *want = var->sbp;
  } else {
    *p = n->placement;
    *want = n->in_sbp[r.slot];
  }
}

static sl_status readers_index(refine_ctx *c) {
  sl_graph *g = c->g;
  int32_t nv = g->n_values;
  c->first = sl__calloc((size_t)nv + 2, sizeof *c->first);
  if (!c->first) return SL_ENOMEM;
  for (int pass = 0; pass < 2; pass++) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const sl__node *n = &g->nodes[i]->n;
      for (int k = -1; k < n->n_in; k++) {
        int32_t v =
            k < 0 ? (n->kind == SL__NODE_VARIABLE ? n->update : -1) : n->in[k];
        if (v < 0) continue;
        if (pass == 0)
          c->first[v + 2]++;
        else
          c->rd[c->first[v + 1]++] = (value_reader){i, k};
      }
    }
    if (pass == 0) {
      for (int32_t v = 0; v < nv; v++)
        c->first[v + 2] += c->first[v + 1];
      c->rd = sl__calloc((size_t)c->first[nv + 1] + 1, sizeof *c->rd);
      if (!c->rd) return SL_ENOMEM;
    }
  }
  return SL_OK;
}

/* Whether op node n may be refined: its outputs go only to ops and
 * variables (a fetch or a user's boxing took the layout it had), and no
 * input is a ZeRO-3 weight (read in another layout than its own). */
static bool refinable(const refine_ctx *c, const sl__node *n) {
  const sl_graph *g = c->g;
  if (n->kind != SL__NODE_OP || n->n_in == 0) return false;
  int M = sl_placement_mesh_ndim(n->placement);
  if (sl_placement_mesh_dim(n->placement, M - 1) < 2) return false;
  for (int i = 0; i < n->n_in; i++)
    if (g->nodes[g->values[n->in[i]]->producer]->zero3) return false;
  for (int j = 0; j < n->n_out; j++)
    for (int32_t e = c->first[n->out[j]]; e < c->first[n->out[j] + 1]; e++) {
      sl__node_kind k = g->nodes[c->rd[e].node]->n.kind;
      if (k != SL__NODE_OP && k != SL__NODE_VARIABLE) return false;
    }
  return true;
}

/* Predicted µs of the boxings op node `self` causes taking its inputs as
 * in_nd and giving its outputs as out_nd; *ex: what they exchange. */
static double local_cost(const refine_ctx *c, int32_t self,
                         const sl_nd_sbp *in_nd, const sl_nd_sbp *out_nd,
                         exchange_count *ex) {
  *ex = (exchange_count){0, 0};
  const sl_graph *g = c->g;
  const sl__node *n = &g->nodes[self]->n;
  double cost = 0;
  for (int i = 0; i < n->n_in; i++) {
    int32_t v = n->in[i];
    const sl__value *val = g->values[v];
    if (!needs_boxing(val, n->placement, &in_nd[i])) continue;
    bool shared = false;
    for (int k = 0; k < i && !shared; k++)
      shared = n->in[k] == v && sl_nd_sbp_equal(&in_nd[k], &in_nd[i]);
    for (int32_t e = c->first[v]; e < c->first[v + 1] && !shared; e++) {
      if (c->rd[e].node == self) continue;
      const sl_placement *p;
      sl_nd_sbp want;
      reader_wants(g, c->rd[e], &p, &want);
      shared = p == n->placement && sl_nd_sbp_equal(&want, &in_nd[i]);
    }
    if (!shared) cost += boxing_cost(val, n->placement, &in_nd[i], ex);
  }
  for (int j = 0; j < n->n_out; j++) {
    int32_t o = n->out[j];
    sl__value as = *g->values[o];
    as.sbp = out_nd[j];
    for (int32_t e = c->first[o]; e < c->first[o + 1]; e++) {
      const sl_placement *p;
      sl_nd_sbp want;
      reader_wants(g, c->rd[e], &p, &want);
      bool seen = false; /* readers taking it alike share one boxing */
      for (int32_t f = c->first[o]; f < e && !seen; f++) {
        const sl_placement *q;
        sl_nd_sbp w;
        reader_wants(g, c->rd[f], &q, &w);
        seen = q == p && sl_nd_sbp_equal(&w, &want);
      }
      if (!seen) cost += boxing_cost(&as, p, &want, ex);
    }
  }
  return cost;
}

/* How a signature lays an op out: whether every device does all of its
 * work (every input and output B), and how many of its inputs and outputs
 * are partial (each a whole-sized buffer on every device, to be reduced). */
static bool sig_whole(const sl__sbp_sig *s, const sl__node *n) {
  for (int i = 0; i < n->n_in; i++)
    if (s->in[i].kind != SL_SBP_BROADCAST) return false;
  for (int j = 0; j < n->n_out; j++)
    if (s->out[j].kind != SL_SBP_BROADCAST) return false;
  return true;
}

static int sig_partials(const sl__sbp_sig *s, const sl__node *n) {
  int k = 0;
  for (int i = 0; i < n->n_in; i++)
    k += s->in[i].kind == SL_SBP_PARTIAL;
  for (int j = 0; j < n->n_out; j++)
    k += s->out[j].kind == SL_SBP_PARTIAL;
  return k;
}

/* Revisits op node i (refinable); true if it took another signature. */
static bool refine_op(refine_ctx *c, int32_t i) {
  sl_graph *g = c->g;
  sl__node *n = &g->nodes[i]->n;
  int m = sl_placement_mesh_ndim(n->placement) - 1;
  static _Thread_local sl__sbp_sig cand[SL_OP_MAX_SIGNATURES + 1];
  int nc = op_candidates(g, n, cand);
  sl__sbp_sig cur;
  memset(&cur, 0, sizeof cur);
  for (int k = 0; k < n->n_in; k++)
    cur.in[k] = n->in_sbp[k].sbp[m];
  for (int j = 0; j < n->n_out; j++)
    cur.out[j] = n->out_sbp[j].sbp[m];
  bool whole = sig_whole(&cur, n);
  int partials = sig_partials(&cur, n);
  exchange_count ex_cur, ex;
  double best_cost = local_cost(c, i, n->in_sbp, n->out_sbp, &ex_cur);
  int best = -1;
  sl_nd_sbp in_nd[SL_OP_MAX_INPUTS], out_nd[SL_OP_MAX_OUTPUTS];
  for (int s = 0; s < nc && best_cost > 0; s++) {
    const sl__sbp_sig *sig = &cand[s];
    if ((!whole && sig_whole(sig, n)) || sig_partials(sig, n) > partials)
      continue;
    bool ok = true;
    for (int j = 0; j < n->n_out && ok; j++) {
      out_nd[j] = n->out_sbp[j];
      out_nd[j].sbp[m] = sig->out[j];
      const sl__value *o = g->values[n->out[j]];
      ok = !o->sbp_fixed || sl_sbp_equal(o->sbp.sbp[m], sig->out[j]);
    }
    for (int k = 0; k < n->n_in; k++) {
      in_nd[k] = n->in_sbp[k];
      in_nd[k].sbp[m] = sig->in[k];
    }
    if (!ok || !sig_even_holds(g, n, sig, in_nd, out_nd, m)) continue;
    double cost = local_cost(c, i, in_nd, out_nd, &ex);
    /* No more exchanges (each a wait on the other devices), of no more
     * data, and strictly cheaper, by more than rounding. */
    if (ex.steps <= ex_cur.steps && ex.bytes <= ex_cur.bytes &&
        cost < best_cost - 1e-6 * (1 + best_cost)) {
      best = s;
      best_cost = cost;
    }
  }
  if (best < 0) return false;
  for (int k = 0; k < n->n_in; k++)
    n->in_sbp[k].sbp[m] = cand[best].in[k];
  for (int j = 0; j < n->n_out; j++) {
    n->out_sbp[j].sbp[m] = cand[best].out[j];
    sl__value *o = g->values[n->out[j]];
    if (!o->sbp_fixed) o->sbp = n->out_sbp[j];
  }
  return true;
}

static sl_status refine(sl_graph *g) {
  refine_ctx c = {g, NULL, NULL};
  sl_status st = readers_index(&c);
  /* Each change lowers the predicted total; a few sweeps settle it. */
  for (int sweep = 0; st == SL_OK && sweep < 4; sweep++) {
    bool changed = false;
    for (int32_t i = 0; i < g->n_nodes; i++)
      if (refinable(&c, &g->nodes[i]->n)) changed = refine_op(&c, i) || changed;
    if (!changed) break;
  }
  sl__free(c.first);
  sl__free(c.rd);
  return st;
}

/* ---- boxing insertion -------------------------------------------------- */

typedef struct box_key {
  int32_t value;
  const sl_placement *place;
  sl_nd_sbp sbp;
  int32_t use; /* which readers share it (use_of) */
  int32_t boxed; /* the boxed value */
} box_key;

/* Readers of a value share one boxing of it, except those of a ZeRO-3
 * weight (graph/minimize.c): its forward readers share one gather and its
 * backward readers (recomputed forward ops among them) another, per
 * micro-batch, so that no gathered weight lives from the forward pass to
 * the backward pass. */
static int32_t use_of(const sl_graph *g, int32_t v, const sl__node *reader) {
  if (!g->nodes[g->values[v]->producer]->zero3) return 0;
  bool backward = reader->backward || reader->recompute;
  return 1 + backward + 2 * (reader->micro < 0 ? 0 : reader->micro);
}

typedef struct box_ctx {
  sl_graph *g;
  sl__gnode **order; /* the new node order */
  int32_t n_order;
  box_key *keys;
  int32_t n_keys, cap_keys;
  int64_t counter;
} box_ctx;

/* The value v as (p, want): an existing boxing or a new one appended to
 * the order. Returns the value id or -1 (error recorded). */
static int32_t boxed(box_ctx *b, int32_t v, sl_placement *p,
                     const sl_nd_sbp *want, const sl__node *consumer) {
  sl_graph *g = b->g;
  int32_t use = use_of(g, v, consumer);
  for (int32_t k = 0; k < b->n_keys; k++)
    if (b->keys[k].value == v && b->keys[k].place == p &&
        b->keys[k].use == use && sl_nd_sbp_equal(&b->keys[k].sbp, want))
      return b->keys[k].boxed;
  const sl__value *val = g->values[v];
  const char *pname = g->nodes[val->producer]->n.name;
  char name[300];
  snprintf(name, sizeof name, "%.200s.boxing%lld", pname,
           (long long)b->counter++);
  sl_boxing_route *plan = NULL;
  sl_status st =
      sl_boxing_route_create(&val->meta.shape, val->meta.dtype, val->placement,
                             &val->sbp, p, want, NULL, &plan);
  if (st != SL_OK) {
    sl__g_error_last(g, st, "boxing", name, NULL);
    sl__fail_context(st, "(for '%s') ", consumer->name);
    return -1;
  }
  /* New nodes are created outside any scope and mark. */
  char saved[sizeof g->scope];
  memcpy(saved, g->scope, sizeof saved);
  g->scope[0] = '\0';
  sl__gnode *gn =
      sl__g_new_node(g, SL__NODE_BOXING, name, NULL, p, 1, &v, 1, &val->meta);
  memcpy(g->scope, saved, sizeof saved);
  if (!gn) {
    sl_boxing_route_destroy(plan);
    return -1;
  }
  /* sl__g_new_node appended it to g->nodes; the order array gets it too. */
  gn->n.boxing = plan;
  gn->n.in_sbp[0] = val->sbp;
  gn->n.out_sbp[0] = *want;
  sl__node *src = &g->nodes[val->producer]->n;
  /* A ZeRO-3 weight's gather belongs to its readers' pass. */
  gn->n.backward = use_of(g, v, consumer) ? consumer->backward : src->backward;
  gn->n.optimizer = src->optimizer;
  /* A conversion runs where its consumer does: its micro-batch, stage and
   * pass (a value computed once, boxed for every micro-batch, stays once
   * per step). */
  gn->n.micro = src->micro < 0 ? -1 : consumer->micro;
  gn->n.stage = src->micro < 0 ? -1 : consumer->stage;
  gn->n.phase = consumer->phase;
  int32_t out = gn->n.out[0];
  g->values[out]->sbp = *want;
  g->values[out]->sbp_fixed = true;
  b->order[b->n_order++] = gn;
  if (b->n_keys == b->cap_keys) {
    int32_t cap = b->cap_keys ? b->cap_keys * 2 : 32;
    box_key *nk = sl__reallocarray(b->keys, (size_t)cap, sizeof *nk);
    if (!nk) {
      sl__g_error(g, SL_ENOMEM, "boxing", name, NULL, "out of memory");
      return -1;
    }
    b->keys = nk;
    b->cap_keys = cap;
  }
  b->keys[b->n_keys++] = (box_key){v, p, *want, use, out};
  return out;
}

static sl_status insert_boxing(sl_graph *g) {
  int32_t n0 = g->n_nodes;
  /* At most one boxing per (node input) plus one per variable. */
  size_t cap = (size_t)n0 * (SL_OP_MAX_INPUTS + 2) + 1;
  box_ctx b = {g, sl__calloc(cap, sizeof(sl__gnode *)), 0, NULL, 0, 0, 0};
  if (!b.order) return SL_ENOMEM;
  sl_status st = SL_OK;
  for (int32_t i = 0; i < n0 && st == SL_OK; i++) {
    sl__gnode *gn = g->nodes[i];
    sl__node *n = &gn->n;
    if (n->kind == SL__NODE_OP)
      for (int k = 0; k < n->n_in; k++) {
        const sl__value *v = g->values[n->in[k]];
        if (!needs_boxing(v, n->placement, &n->in_sbp[k])) continue;
        int32_t nv = boxed(&b, n->in[k], n->placement, &n->in_sbp[k], n);
        if (nv < 0) {
          st = g->err ? g->err : SL_EINTERNAL;
          break;
        }
        n->in[k] = nv;
      }
    b.order[b.n_order++] = gn;
  }
  /* Variables' updates take the variable's layout. */
  for (int32_t i = 0; i < n0 && st == SL_OK; i++) {
    sl__node *n = &g->nodes[i]->n;
    if (n->kind != SL__NODE_VARIABLE || n->update < 0) continue;
    const sl__value *var = g->values[n->out[0]];
    const sl__value *u = g->values[n->update];
    if (!needs_boxing(u, var->placement, &var->sbp)) continue;
    int32_t nv = boxed(&b, n->update, var->placement, &var->sbp, n);
    if (nv < 0) {
      st = g->err ? g->err : SL_EINTERNAL;
      break;
    }
    n->update = nv;
  }
  if (st == SL_OK) {
    SL_ASSERT(b.n_order == g->n_nodes);
    if (b.n_order) /* b.order is NULL for an empty graph */
      memcpy(g->nodes, b.order, (size_t)b.n_order * sizeof *g->nodes);
    for (int32_t i = 0; i < g->n_nodes; i++) {
      sl__gnode *gn = g->nodes[i];
      gn->index = i;
      for (int j = 0; j < gn->n.n_out; j++)
        g->values[gn->n.out[j]]->producer = i;
    }
  }
  sl__free(b.order);
  sl__free(b.keys);
  return st;
}

/* A variable's update must have its shape and dtype. */
static sl_status check_updates(sl_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__node *n = &g->nodes[i]->n;
    if (n->kind != SL__NODE_VARIABLE || n->update < 0) continue;
    const sl__value *var = g->values[n->out[0]], *u = g->values[n->update];
    if (!sl_shape_equal(&var->meta.shape, &u->meta.shape) ||
        var->meta.dtype != u->meta.dtype)
      return sl__g_error(g, SL_EINTERNAL, "variable", n->name, NULL,
                         "its update has another shape or dtype");
  }
  return SL_OK;
}

sl_status sl__graph_compile(sl_graph *g) {
  if (!g) return sl__fail(SL_EINVAL, "compile: NULL graph");
  if (g->err) return sl__fail(g->err, "%s", g->err_msg);
  if (g->frozen) return SL_OK;
  sl_status st;
  /* A graph without sl_minimize is unrolled here (micro.c). */
  SL_CHECK_GOTO(sl__g_unroll(g, 0, NULL), st, fail);
  sl__g_assign_phases(g);
  SL_CHECK_GOTO(check_updates(g), st, fail);
  SL_CHECK_GOTO(infer(g), st, fail);
  SL_CHECK_GOTO(refine(g), st, fail);
  SL_CHECK_GOTO(insert_boxing(g), st, fail);
  g->frozen = true;
  return SL_OK;
fail:
  if (!g->err) sl__g_error_last(g, st, "graph", "compile", NULL);
  return st;
}
