/* The same-placement planner: converts an nd-SBP mesh axis by mesh axis.
 *
 * Each step changes one mesh axis m from a to b with a 1-D conversion (the
 * table in docs/boxing.md) on the sub-groups along m. That is valid when no
 * later mesh axis k > m splits the tensor axis that a or b splits: earlier
 * axes only fix the block a group shares, but a later split of the same
 * tensor axis would cut each member's part differently once a or b changes
 * it (splits are uneven). A Dijkstra search over the nd-SBP states whose
 * entries are the source's, the target's or B finds the cheapest valid
 * sequence by predicted time (ties: fewer steps). */
#include <math.h>
#include <string.h>

#include "sbp_int.h"

#define MAX_CAND 3
#define MAX_STATES 81 /* MAX_CAND ^ SL_MAX_MESH_AXES */

/* A 1-D conversion that moves no data and emits no step: copies of a value
 * are valid max/min partials. */
#define OP_RELABEL (-2)
#define OP_NONE (-1)

typedef struct search {
  sl_boxing_route *plan;
  const sl_placement *p;
  int ndim;
  int ncand[SL_MAX_MESH_AXES];
  sl_sbp cand[SL_MAX_MESH_AXES][MAX_CAND];
} search;

/* The 1-D operation converting a to b, OP_RELABEL or OP_NONE. */
static int axis_op(sl_sbp a, sl_sbp b) {
  if (sl_sbp_equal(a, b)) return OP_NONE;
  switch (a.kind) {
  case SL_SBP_PARTIAL:
    if (b.kind == SL_SBP_BROADCAST) return SL_BOXING_ALL_REDUCE;
    if (b.kind == SL_SBP_SPLIT) return SL_BOXING_REDUCE_SCATTER;
    return OP_NONE; /* P(x) -> P(y) goes through B */
  case SL_SBP_SPLIT:
    if (b.kind == SL_SBP_BROADCAST) return SL_BOXING_ALL_GATHER;
    if (b.kind == SL_SBP_SPLIT) return SL_BOXING_ALL_TO_ALL;
    return SL_BOXING_ZERO; /* zero-pad in place */
  case SL_SBP_BROADCAST:
    if (b.kind == SL_SBP_SPLIT) return SL_BOXING_SLICE;
    return b.reduce == SL_REDUCE_SUM ? SL_BOXING_ZERO : OP_RELABEL;
  }
  return OP_NONE;
}

/* The operation changing axis m of s to b. On a mesh axis of extent 1 every
 * change is a relabel: the single member already holds the whole block, as
 * a split, a broadcast or a partial of any kind. */
static int axis_step_op(const search *se, const sl_nd_sbp *s, int m, sl_sbp b) {
  if (sl_sbp_equal(s->sbp[m], b)) return OP_NONE;
  if (sl_placement_mesh_dim(se->p, m) == 1) return OP_RELABEL;
  return axis_op(s->sbp[m], b);
}

/* Whether changing axis m of s to b is a valid 1-D step (see the top). */
static bool step_valid(const search *se, const sl_nd_sbp *s, int m, sl_sbp b) {
  sl_sbp a = s->sbp[m];
  int op = axis_step_op(se, s, m, b);
  if (op == OP_NONE) return false;
  for (int k = m + 1; k < s->ndim && op != OP_RELABEL; k++) {
    if (s->sbp[k].kind != SL_SBP_SPLIT) continue;
    int j = s->sbp[k].axis;
    if ((a.kind == SL_SBP_SPLIT && a.axis == j) ||
        (b.kind == SL_SBP_SPLIT && b.axis == j))
      return false;
  }
  /* The new state must not mix partial kinds. */
  if (b.kind == SL_SBP_PARTIAL)
    for (int k = 0; k < s->ndim; k++)
      if (k != m && s->sbp[k].kind == SL_SBP_PARTIAL &&
          s->sbp[k].reduce != b.reduce)
        return false;
  return true;
}

static int ring_rounds(sl_boxing_op op, int n) {
  switch (op) {
  case SL_BOXING_ALL_REDUCE: return 2 * (n - 1);
  case SL_BOXING_REDUCE_SCATTER:
  case SL_BOXING_ALL_GATHER:
  case SL_BOXING_ALL_TO_ALL: return n - 1;
  default: return 0; /* slice and zero are local */
  }
}

/* Bytes each member k of a group of n sends, for a group block g (the part
 * of the tensor the group holds together). Ring algorithms: all_gather
 * member k sends every chunk but chunk k+1; reduce_scatter (member k ends
 * with chunk k) every chunk but chunk k; all_reduce is the two of them on
 * a balanced split of the flat buffer; all_to_all sends each other member
 * the intersection of its own part with theirs. Even splits reduce to the
 * table's 2T(n-1)/n, T(n-1)/n and T(n-1)/n^2. */
static int64_t member_bytes(sl_boxing_op op, sl_sbp a, sl_sbp b,
                            const sl_slice *g, int n, int k, size_t es) {
  if (n <= 1) return 0;
  int64_t numel = sl_slice_numel(g), total = numel * (int64_t)es;
  int64_t st, e1, e2;
  switch (op) {
  case SL_BOXING_ALL_REDUCE:
    sl_split_range(numel, n, k, &st, &e1);
    sl_split_range(numel, n, (k + 1) % n, &st, &e2);
    return 2 * total - (e1 + e2) * (int64_t)es;
  case SL_BOXING_REDUCE_SCATTER:
  case SL_BOXING_ALL_GATHER: {
    int axis = op == SL_BOXING_ALL_GATHER ? a.axis : b.axis;
    int chunk = op == SL_BOXING_ALL_GATHER ? (k + 1) % n : k;
    int64_t other = 1;
    for (int d = 0; d < g->ndim; d++)
      if (d != axis) other *= g->extent[d];
    sl_split_range(g->extent[axis], n, chunk, &st, &e1);
    return total - other * e1 * (int64_t)es;
  }
  case SL_BOXING_ALL_TO_ALL: {
    int i = a.axis, j = b.axis;
    int64_t other = 1;
    for (int d = 0; d < g->ndim; d++)
      if (d != i && d != j) other *= g->extent[d];
    sl_split_range(g->extent[i], n, k, &st, &e1);
    sl_split_range(g->extent[j], n, k, &st, &e2);
    /* |src_k ∩ dst_l| summed over l != k. */
    return other * e1 * (g->extent[j] - e2) * (int64_t)es;
  }
  default: return 0;
  }
}

/* Evaluates the step changing axis m of s to b with op: bytes per rank into
 * bytes (may be NULL) and the predicted time, the slowest group's. */
static double eval_step(const search *se, const sl_nd_sbp *s, int m, sl_sbp b,
                        sl_boxing_op op, int64_t *bytes) {
  const sl_boxing_route *plan = se->plan;
  int size = sl_placement_size(se->p);
  int n = sl_placement_mesh_dim(se->p, m), stride = sl__mesh_stride(se->p, m);
  size_t es = sl_dtype_size(plan->dtype);
  sl_nd_sbp blk = *s;
  blk.sbp[m] = sl_sbp_broadcast();
  int rounds = ring_rounds(op, n);
  double worst = 0.0;
  for (int r = 0; r < size; r++) {
    if ((r / stride) % n != 0) continue; /* r is its group's first member */
    sl_slice g;
    sl__local_slice(&plan->shape, se->p, &blk, r, &g);
    int64_t most = 0;
    bool inter = false;
    for (int k = 0; k < n; k++) {
      int rk = r + k * stride;
      int64_t v = member_bytes(op, s->sbp[m], b, &g, n, k, es);
      if (bytes) bytes[rk] = v;
      most = SL_MAX(most, v);
      if (plan->rank_node[rk] != plan->rank_node[r]) inter = true;
    }
    worst = fmax(worst, sl__cost_ring(&plan->cost, inter, rounds, most));
  }
  return worst;
}

/* ---- states ------------------------------------------------------------ */

static void decode(const search *se, int id, sl_nd_sbp *s) {
  memset(s, 0, sizeof *s);
  s->ndim = se->ndim;
  for (int m = 0; m < se->ndim; m++, id /= MAX_CAND)
    s->sbp[m] = se->cand[m][id % MAX_CAND];
}

static int encode(const search *se, const sl_nd_sbp *s) {
  int id = 0;
  for (int m = se->ndim - 1; m >= 0; m--) {
    int c = 0;
    while (c < se->ncand[m] && !sl_sbp_equal(se->cand[m][c], s->sbp[m]))
      c++;
    id = id * MAX_CAND + c;
  }
  return id;
}

static bool better(double t1, int s1, double t2, int s2) {
  if (isinf(t2)) return !isinf(t1);
  double eps = 1e-9 * fmax(1.0, fmax(fabs(t1), fabs(t2)));
  if (t1 < t2 - eps) return true;
  if (t1 > t2 + eps) return false;
  return s1 < s2;
}

static sl_status emit_step(search *se, const sl_nd_sbp *s, int m, sl_sbp b,
                           int op) {
  sl_boxing_route *plan = se->plan;
  sl__step *st = sl__plan_add_step(plan);
  if (!st) return SL_ENOMEM;
  st->op = (sl_boxing_op)op;
  st->mesh_axis = m;
  st->from = *s;
  st->to = *s;
  st->to.sbp[m] = b;
  if (op == SL_BOXING_ALL_REDUCE || op == SL_BOXING_REDUCE_SCATTER) {
    st->has_reduce = true;
    st->reduce = s->sbp[m].reduce;
  } else if (op == SL_BOXING_ZERO) {
    st->has_reduce = true;
    st->reduce = b.reduce;
  }
  st->predicted_us = eval_step(se, s, m, b, st->op, st->bytes_sent);

  int size = sl_placement_size(se->p);
  int n = sl_placement_mesh_dim(se->p, m), stride = sl__mesh_stride(se->p, m);
  st->group_count = size / n;
  st->group_off =
      sl__arena_calloc(plan->arena, (size_t)st->group_count + 1, sizeof(int));
  st->group_ranks = sl__arena_calloc(plan->arena, (size_t)size, sizeof(int));
  if (!st->group_off || !st->group_ranks) return SL_ENOMEM;
  int g = 0;
  for (int r = 0; r < size; r++) {
    if ((r / stride) % n != 0) continue;
    st->group_off[g] = g * n;
    for (int k = 0; k < n; k++)
      st->group_ranks[g * n + k] = r + k * stride;
    g++;
  }
  st->group_off[g] = g * n;
  return SL_OK;
}

sl_status sl__plan_same_placement(sl_boxing_route *plan) {
  search se = {0};
  se.plan = plan;
  se.p = plan->place[0];
  se.ndim = plan->sbp[0].ndim;
  for (int m = 0; m < se.ndim; m++) {
    sl_sbp c[3] = {plan->sbp[0].sbp[m], plan->sbp[1].sbp[m],
                   sl_sbp_broadcast()};
    for (int i = 0; i < 3; i++) {
      bool dup = false;
      for (int j = 0; j < se.ncand[m]; j++)
        dup = dup || sl_sbp_equal(se.cand[m][j], c[i]);
      if (!dup) se.cand[m][se.ncand[m]++] = c[i];
    }
  }

  int nstates = 1;
  for (int m = 0; m < se.ndim; m++)
    nstates *= MAX_CAND;
  double dist[MAX_STATES];
  int nsteps[MAX_STATES], prev[MAX_STATES], prev_axis[MAX_STATES];
  bool done[MAX_STATES];
  for (int i = 0; i < nstates; i++) {
    dist[i] = INFINITY;
    nsteps[i] = 0;
    prev[i] = -1;
    prev_axis[i] = -1;
    done[i] = false;
  }
  int start = encode(&se, &plan->sbp[0]), goal = encode(&se, &plan->sbp[1]);
  dist[start] = 0;

  /* O(V^2) Dijkstra: at most 81 states of 8 edges. */
  for (;;) {
    int u = -1;
    for (int i = 0; i < nstates; i++)
      if (!done[i] && isfinite(dist[i]) &&
          (u < 0 || better(dist[i], nsteps[i], dist[u], nsteps[u])))
        u = i;
    if (u < 0 || u == goal) break;
    done[u] = true;
    sl_nd_sbp s;
    decode(&se, u, &s);
    for (int m = 0; m < se.ndim; m++) {
      for (int c = 0; c < se.ncand[m]; c++) {
        sl_sbp b = se.cand[m][c];
        if (!step_valid(&se, &s, m, b)) continue;
        int op = axis_step_op(&se, &s, m, b);
        double w = op == OP_RELABEL
                       ? 0.0
                       : eval_step(&se, &s, m, b, (sl_boxing_op)op, NULL);
        sl_nd_sbp t = s;
        t.sbp[m] = b;
        int v = encode(&se, &t);
        int sv = nsteps[u] + (op == OP_RELABEL ? 0 : 1);
        if (!done[v] && better(dist[u] + w, sv, dist[v], nsteps[v])) {
          dist[v] = dist[u] + w;
          nsteps[v] = sv;
          prev[v] = u;
          prev_axis[v] = m;
        }
      }
    }
  }
  if (!isfinite(dist[goal])) return sl__plan_send_recv(plan);

  int path[MAX_STATES], len = 0;
  for (int v = goal; v != start; v = prev[v])
    path[len++] = v;
  sl_nd_sbp s = plan->sbp[0];
  for (int i = len - 1; i >= 0; i--) {
    sl_nd_sbp t;
    decode(&se, path[i], &t);
    int m = prev_axis[path[i]];
    int op = axis_step_op(&se, &s, m, t.sbp[m]);
    if (op != OP_RELABEL) SL_CHECK(emit_step(&se, &s, m, t.sbp[m], op));
    s = t;
  }
  return SL_OK;
}
