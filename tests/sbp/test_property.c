/* Property test: random conversions (shapes with uneven and empty parts,
 * 1-D and 2-D meshes of 1-8 ranks, every SBP kind including P(max) and
 * P(min), same and different placements, every dtype), each planned and
 * checked with sl_boxing_verify. Prints its seed; SLUICE_TEST_SEED replays
 * a run and SLUICE_SBP_CASES changes the case count (default 10000). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbp_int.h"

typedef struct tcase {
  sl_shape shape;
  sl_dtype dt;
  sl_placement *src, *dst;
  sl_nd_sbp ssbp, dsbp;
} tcase;

static int below(sl_rng *r, int n) {
  return (int)sl__rng_below(r, (uint64_t)n);
}

/* n distinct ids from [0, range), in random order. */
static void pick_ids(sl_rng *r, int n, int range, int *ids) {
  int pool[16];
  for (int i = 0; i < range; i++)
    pool[i] = i;
  for (int i = 0; i < n; i++) {
    int j = i + below(r, range - i);
    int t = pool[i];
    pool[i] = pool[j];
    pool[j] = t;
    ids[i] = pool[i];
  }
}

/* A 1-D mesh, or a random 2-D factorisation of size. */
static int pick_mesh(sl_rng *r, int size, int *mesh) {
  if (below(r, 2) == 0) {
    mesh[0] = size;
    return 1;
  }
  int divs[8], n = 0;
  for (int d = 1; d <= size; d++)
    if (size % d == 0) divs[n++] = d;
  mesh[0] = divs[below(r, n)];
  mesh[1] = size / mesh[0];
  return 2;
}

static sl_placement *make_placement(sl_rng *r, sl_device_type type) {
  int nnodes = 1 + below(r, 2);
  int ndev = 1 + below(r, 8 / nnodes);
  int nodes[2], devs[8], mesh[2];
  pick_ids(r, nnodes, 3, nodes);
  pick_ids(r, ndev, 8, devs);
  int mesh_ndim = pick_mesh(r, nnodes * ndev, mesh);
  sl_placement *p = NULL;
  if (sl_placement_create(type, nnodes, nodes, ndev, devs, mesh_ndim, mesh,
                          &p) != SL_OK)
    fail_msg("placement: %s", sl_last_error());
  return p;
}

/* The same devices in another order or another mesh. */
static sl_placement *reshuffle(sl_rng *r, const sl_placement *p) {
  int nnodes = sl_placement_node_count(p);
  int ndev = sl_placement_size(p) / nnodes;
  int nodes[2], devs[8], mesh[2], perm[8];
  for (int i = 0; i < nnodes; i++)
    sl_placement_rank_device(p, i * ndev, &nodes[i], &devs[0]);
  pick_ids(r, ndev, ndev, perm);
  for (int i = 0; i < ndev; i++) {
    int node;
    sl_placement_rank_device(p, perm[i], &node, &devs[i]);
  }
  int mesh_ndim = pick_mesh(r, sl_placement_size(p), mesh);
  sl_placement *q = NULL;
  if (sl_placement_create(sl_placement_device_type(p), nnodes, nodes, ndev,
                          devs, mesh_ndim, mesh, &q) != SL_OK)
    fail_msg("placement: %s", sl_last_error());
  return q;
}

static sl_nd_sbp make_sbp(sl_rng *r, const sl_placement *p, int ndim) {
  sl_nd_sbp s = {0};
  s.ndim = sl_placement_mesh_ndim(p);
  sl_reduce_op op = (sl_reduce_op)below(r, 3);
  for (int k = 0; k < s.ndim; k++) {
    int kind = below(r, ndim ? 3 : 2);
    if (kind == 0)
      s.sbp[k] = sl_sbp_broadcast();
    else if (kind == 1)
      s.sbp[k] = sl_sbp_partial(op);
    else
      s.sbp[k] = sl_sbp_split(below(r, ndim));
  }
  return s;
}

static void make_case(uint64_t seed, tcase *c) {
  sl_rng r = {seed};
  c->shape.ndim = below(&r, 20) == 0 ? 0 : 1 + below(&r, 4);
  for (int d = 0; d < c->shape.ndim; d++)
    c->shape.dims[d] = below(&r, 8) == 0 ? 0 : 1 + below(&r, 9);
  c->dt = (sl_dtype)below(&r, SL_DTYPE_COUNT);
  sl_device_type type = below(&r, 2) ? SL_DEVICE_CPU : SL_DEVICE_CUDA;
  c->src = make_placement(&r, type);
  int how = below(&r, 10);
  if (how < 5)
    sl_placement_copy(c->src, &c->dst);
  else if (how < 7)
    c->dst = reshuffle(&r, c->src);
  else
    c->dst = make_placement(&r, type);
  c->ssbp = make_sbp(&r, c->src, c->shape.ndim);
  c->dsbp = make_sbp(&r, c->dst, c->shape.ndim);
}

static void describe(const tcase *c, char *buf, size_t size) {
  char sh[64], sp[64], dp[64], ss[64], ds[64];
  sl_shape_print(&c->shape, sh, sizeof sh);
  sl_placement_print(c->src, sp, sizeof sp);
  sl_placement_print(c->dst, dp, sizeof dp);
  sl_nd_sbp_print(&c->ssbp, ss, sizeof ss);
  sl_nd_sbp_print(&c->dsbp, ds, sizeof ds);
  snprintf(buf, size, "%s %s: %s %s -> %s %s", sl_dtype_name(c->dt), sh, sp, ss,
           dp, ds);
}

/* b is a, or a with B where b has P(max)/P(min), or a with anything on a
 * mesh axis of extent 1: the relabellings that move no data and emit no
 * step. */
static bool same_or_relabel(const sl_placement *p, const sl_nd_sbp *a,
                            const sl_nd_sbp *b) {
  if (a->ndim != b->ndim) return false;
  for (int k = 0; k < a->ndim; k++) {
    if (sl_sbp_equal(a->sbp[k], b->sbp[k])) continue;
    if (sl_placement_mesh_dim(p, k) == 1) continue;
    if (a->sbp[k].kind == SL_SBP_BROADCAST &&
        b->sbp[k].kind == SL_SBP_PARTIAL && b->sbp[k].reduce != SL_REDUCE_SUM)
      continue;
    return false;
  }
  return true;
}

/* The table's ops for a 1-D conversion on one placement. */
static const char *table_ops(sl_sbp a, sl_sbp b) {
  if (sl_sbp_equal(a, b)) return "";
  switch (a.kind) {
  case SL_SBP_PARTIAL:
    if (b.kind == SL_SBP_BROADCAST) return "all_reduce";
    if (b.kind == SL_SBP_SPLIT) return "reduce_scatter";
    return b.reduce == SL_REDUCE_SUM ? "all_reduce,zero" : "all_reduce";
  case SL_SBP_SPLIT:
    if (b.kind == SL_SBP_BROADCAST) return "all_gather";
    if (b.kind == SL_SBP_SPLIT) return "all_to_all";
    return "zero";
  case SL_SBP_BROADCAST:
    if (b.kind == SL_SBP_SPLIT) return "slice";
    return b.reduce == SL_REDUCE_SUM ? "zero" : "";
  }
  return "?";
}

/* Same-placement plans: collectives only, one mesh axis per step, layouts
 * chaining from the source to the target; 1-D plans are the table's. */
static void check_chain(const sl_boxing_route *plan, const tcase *c,
                        const char *what) {
  sl_nd_sbp cur = c->ssbp;
  char ops[128] = "";
  for (int i = 0; i < sl_boxing_route_step_count(plan); i++) {
    sl_nd_sbp f, t;
    sl_boxing_step_layout(plan, i, &f, &t);
    int m = sl_boxing_step_mesh_axis(plan, i);
    if (m < 0) fail_msg("%s: step %d is not a collective", what, i);
    if (!same_or_relabel(c->src, &cur, &f))
      fail_msg("%s: step %d does not start where the last ended", what, i);
    for (int k = 0; k < f.ndim; k++)
      if ((k == m) == sl_sbp_equal(f.sbp[k], t.sbp[k]))
        fail_msg("%s: step %d changes more than mesh axis %d", what, i, m);
    cur = t;
    if (i) strcat(ops, ",");
    strcat(ops, sl_boxing_op_name(sl_boxing_step_op(plan, i)));
  }
  if (!same_or_relabel(c->src, &cur, &c->dsbp))
    fail_msg("%s: the last step does not reach the target", what);
  if (c->ssbp.ndim == 1 && sl_placement_size(c->src) == 1 && ops[0])
    fail_msg("%s: a single rank needs no step, plan has '%s'", what, ops);
  if (c->ssbp.ndim == 1 && sl_placement_size(c->src) > 1 &&
      strcmp(ops, table_ops(c->ssbp.sbp[0], c->dsbp.sbp[0])) != 0)
    fail_msg("%s: 1-D plan '%s', table says '%s'", what, ops,
             table_ops(c->ssbp.sbp[0], c->dsbp.sbp[0]));
}

/* Structural invariants every plan keeps. */
static void check_plan(const sl_boxing_route *plan, const tcase *c,
                       const char *what) {
  int n = sl_boxing_route_rank_count(plan),
      steps = sl_boxing_route_step_count(plan);
  const int64_t *total = sl_boxing_route_bytes_sent(plan);
  double us = 0;
  int64_t sum[16] = {0};
  bool same = sl_placement_equal(c->src, c->dst);
  if (steps == 0 && !same) fail_msg("%s: no steps across placements", what);
  for (int i = 0; i < steps; i++) {
    const int64_t *b = sl_boxing_step_bytes_sent(plan, i);
    for (int r = 0; r < n; r++) {
      if (b[r] < 0) fail_msg("%s: negative bytes", what);
      sum[r] += b[r];
    }
    us += sl_boxing_step_predicted_us(plan, i);
    for (int g = 0; g < sl_boxing_step_group_count(plan, i); g++) {
      const int *ranks;
      int gn = sl_boxing_step_group(plan, i, g, &ranks);
      for (int k = 0; k < gn; k++)
        if (ranks[k] < 0 || ranks[k] >= n) fail_msg("%s: bad group", what);
    }
    sl_boxing_op op = sl_boxing_step_op(plan, i);
    bool p2p = op == SL_BOXING_SEND_RECV || op == SL_BOXING_COPY;
    if (!p2p && !same) fail_msg("%s: collective across placements", what);
    if (p2p != (sl_boxing_step_mesh_axis(plan, i) < 0))
      fail_msg("%s: mesh axis of %s", what, sl_boxing_op_name(op));
  }
  for (int r = 0; r < n; r++)
    if (sum[r] != total[r]) fail_msg("%s: totals differ from the steps", what);
  if (same) check_chain(plan, c, what);
  if (fabs(us - sl_boxing_route_predicted_us(plan)) > 1e-9 * (1 + us))
    fail_msg("%s: predicted time differs from the steps", what);
}

static void test_random_conversions(void **state) {
  uint64_t seed;
  const char *env = getenv("SLUICE_TEST_SEED");
  seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ sl__now_ns();
  const char *cenv = getenv("SLUICE_SBP_CASES");
  int cases = cenv ? atoi(cenv) : 10000;
  printf("sbp property: seed %" PRIu64 " (SLUICE_TEST_SEED), %d cases\n", seed,
         cases);
  int per_op[8] = {0}, empty = 0, multi = 0;
  for (int i = 0; i < cases; i++) {
    uint64_t cs = sl__mix64(sl__mix64(seed) + (uint64_t)i);
    tcase c;
    make_case(cs, &c);
    char what[512], desc[400];
    describe(&c, desc, sizeof desc);
    snprintf(what, sizeof what, "case %d (seed %" PRIu64 "): %s", i, seed,
             desc);
    sl_boxing_route *plan = NULL;
    if (sl_boxing_route_create(&c.shape, c.dt, c.src, &c.ssbp, c.dst, &c.dsbp,
                               NULL, &plan) != SL_OK)
      fail_msg("%s: plan: %s", what, sl_last_error());
    check_plan(plan, &c, what);
    sl_boxing_mismatch mm;
    sl_status st = sl_boxing_verify(plan, cs, &mm);
    if (st != SL_OK) {
      for (int s = 0; s < sl_boxing_route_step_count(plan); s++) {
        sl_nd_sbp f, t;
        char fs[64], ts[64];
        sl_boxing_step_layout(plan, s, &f, &t);
        sl_nd_sbp_print(&f, fs, sizeof fs);
        sl_nd_sbp_print(&t, ts, sizeof ts);
        printf("  step %d: %s axis %d %s -> %s\n", s,
               sl_boxing_op_name(sl_boxing_step_op(plan, s)),
               sl_boxing_step_mesh_axis(plan, s), fs, ts);
      }
      fail_msg("%s: verify: %s", what, sl_last_error());
    }
    int steps = sl_boxing_route_step_count(plan);
    if (steps == 0) empty++;
    if (steps > 1) multi++;
    for (int s = 0; s < steps; s++)
      per_op[sl_boxing_step_op(plan, s)]++;
    sl_boxing_route_destroy(plan);
    sl_placement_destroy(c.src);
    sl_placement_destroy(c.dst);
  }
  printf("sbp property: %d plans verified: %d empty, %d multi-step; steps:",
         cases, empty, multi);
  for (int op = 0; op < 8; op++)
    printf(" %s %d", sl_boxing_op_name((sl_boxing_op)op), per_op[op]);
  printf("\n");
  /* Coverage: a run of the default size reaches every step kind. */
  if (cases >= 10000)
    for (int op = 0; op < 8; op++)
      if (per_op[op] == 0)
        fail_msg("no plan used %s", sl_boxing_op_name((sl_boxing_op)op));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_conversions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
