/* Collectives between nodes over the data plane (comm/coll/net_coll.h): 2 to 4
 * endpoints in this process on 127.0.0.1 ephemeral ports. Every op on
 * every dtype with every reduce op (all-reduce by ring and by exchange,
 * reduce-scatter, all-gather, all-to-all), sizes 0, 1, uneven and 1 MiB,
 * against a reference computed here; instances of several groups at once;
 * chunks that arrive before their member started are staged; a lost peer fails
 * the collective instead of hanging it; members that disagree on sizes
 * fail with the reason. Every wait is bounded (SOON_MS). */
#include <time.h>

#include "dp_helpers.h"
#include "net_coll.h"
#include "net_hier.h"

/* ---- a mesh of endpoints with their collectives ------------------------- */

#define MESH_MAX 6

typedef struct mesh {
  uint32_t n;
  sl__dp_endpoint *ep[MESH_MAX];
  sl__net_coll *nc[MESH_MAX];
} mesh;

/* algo: every member's all-reduce algorithm (NULL: the cost model's). */
static void mesh_up_algo(mesh *m, uint32_t n, uint64_t chunk,
                         const char *algo) {
  memset(m, 0, sizeof *m);
  m->n = n;
  dp_mesh(m->ep, n, NULL);
  sl__net_coll_config cfg = {.chunk_bytes = chunk,
                             .all_reduce = algo ? algo : "auto"};
  for (uint32_t i = 0; i < n; i++)
    assert_int_equal(sl__net_coll_create(m->ep[i], &cfg, &m->nc[i]), SL_OK);
}

static void mesh_up(mesh *m, uint32_t n, uint64_t chunk) {
  mesh_up_algo(m, n, chunk, NULL);
}

static void mesh_down(mesh *m) {
  /* endpoints first: their queued chunks' sent hooks need the collectives */
  for (uint32_t i = 0; i < m->n; i++)
    sl__dp_endpoint_destroy(m->ep[i]);
  for (uint32_t i = 0; i < m->n; i++)
    sl__net_coll_destroy(m->nc[i]);
}

/* ---- values and the reference ------------------------------------------- */

static double value(sl_dtype dt, uint32_t member, size_t i, uint64_t salt) {
  uint64_t r = sl__mix64(salt * 1000003u + member * 7919u + i);
  if (dt == SL_DTYPE_BOOL) return (double)(r & 1);
  if (dt == SL_DTYPE_U8) return (double)(r % 9);
  return (double)((int)(r % 17) - 8); /* sums of 6 fit every dtype exactly */
}

static double ref_op(sl_dtype dt, sl_reduce_op op, double a, double b) {
  switch (op) {
  case SL_REDUCE_SUM: return dt == SL_DTYPE_BOOL ? (a != 0 || b != 0) : a + b;
  case SL_REDUCE_MAX: return a > b ? a : b;
  case SL_REDUCE_MIN: return a < b ? a : b;
  }
  return 0;
}

static void *fill(sl_dtype dt, uint32_t member, size_t count, uint64_t salt) {
  void *p = calloc(count ? count : 1, sl_dtype_size(dt));
  for (size_t i = 0; i < count; i++)
    sl_store_element(dt, p, (int64_t)i, value(dt, member, i, salt));
  return p;
}

static double reduced(sl_dtype dt, sl_reduce_op op, uint32_t n, size_t i,
                      uint64_t salt) {
  double v = value(dt, 0, i, salt);
  for (uint32_t k = 1; k < n; k++)
    v = ref_op(dt, op, v, value(dt, k, i, salt));
  return v;
}

static void check_value(const char *what, sl_dtype dt, const void *buf,
                        size_t i, double want, uint32_t member) {
  double got = sl_load_element(dt, buf, (int64_t)i);
  if (got != want)
    fail_msg("%s %s: member %u element %zu: got %g, want %g", what,
             sl_dtype_name(dt), member, i, got, want);
}

/* OP_ARO: all-reduce out of place on even members (in unchanged), in
 * place on odd ones, in one instance. */
enum { OP_AR, OP_AG, OP_RS, OP_A2A, OP_ARO };

/* One instance of `op` on every member of the mesh (group = all nodes),
 * checked against the reference. counts: member k's part. */
static void run_case(mesh *m, int op, sl_dtype dt, sl_reduce_op rop,
                     const size_t *counts, uint64_t seq) {
  uint32_t n = m->n, nodes[MESH_MAX];
  for (uint32_t i = 0; i < n; i++)
    nodes[i] = i;
  sl__net_group g = {.id = 1, .nodes = nodes, .n = n};
  size_t total = 0, start[MESH_MAX];
  for (uint32_t k = 0; k < n; k++) {
    start[k] = total;
    total += counts[k];
  }
  size_t es = sl_dtype_size(dt);
  void *in[MESH_MAX], *out[MESH_MAX];
  waiter w;
  waiter_init(&w);
  for (uint32_t k = 0; k < n; k++) {
    /* all-to-all: counts[0] elements per pair, n parts */
    if (op == OP_A2A) total = counts[0] * n;
    in[k] = fill(dt, k, op == OP_AG ? counts[k] : total, seq);
    out[k] = calloc(total ? total : 1, es);
  }
  for (uint32_t k = 0; k < n; k++) {
    sl_status st;
    if (op == OP_AR)
      st = sl__net_all_reduce(m->nc[k], &g, seq, in[k], total, dt, rop,
                              waiter_cb, &w);
    else if (op == OP_ARO && k % 2 == 0)
      st = sl__net_all_reduce_into(m->nc[k], &g, seq, in[k], out[k], total, dt,
                                   rop, waiter_cb, &w);
    else if (op == OP_ARO) {
      memcpy(out[k], in[k], total * es);
      st = sl__net_all_reduce_into(m->nc[k], &g, seq, out[k], out[k], total, dt,
                                   rop, waiter_cb, &w);
    } else if (op == OP_A2A)
      st = sl__net_all_to_all(m->nc[k], &g, seq, in[k], out[k], counts[0], dt,
                              waiter_cb, &w);
    else if (op == OP_AG)
      st = sl__net_all_gather(m->nc[k], &g, seq, in[k], out[k], counts, dt,
                              waiter_cb, &w);
    else
      st = sl__net_reduce_scatter(m->nc[k], &g, seq, in[k], out[k], counts, dt,
                                  rop, waiter_cb, &w);
    if (st != SL_OK) fail_msg("start member %u: %s", k, sl_last_error());
  }
  waiter_wait_within(&w, (int)n, SOON_MS);
  if (w.failed) fail_msg("a member failed: %s", w.msg);
  for (uint32_t k = 0; k < n; k++) {
    if (op == OP_AR) {
      for (size_t i = 0; i < total; i++)
        check_value("all_reduce", dt, in[k], i, reduced(dt, rop, n, i, seq), k);
    } else if (op == OP_ARO) {
      for (size_t i = 0; i < total; i++) {
        check_value("all_reduce_into", dt, out[k], i,
                    reduced(dt, rop, n, i, seq), k);
        check_value("all_reduce_into input", dt, in[k], i, value(dt, k, i, seq),
                    k);
      }
    } else if (op == OP_A2A) {
      /* part j of member k's out is part k of member j's in */
      for (uint32_t j = 0; j < n; j++)
        for (size_t i = 0; i < counts[0]; i++)
          check_value("all_to_all", dt, out[k], j * counts[0] + i,
                      value(dt, j, k * counts[0] + i, seq), k);
    } else if (op == OP_AG) {
      for (uint32_t j = 0; j < n; j++)
        for (size_t i = 0; i < counts[j]; i++)
          check_value("all_gather", dt, out[k], start[j] + i,
                      value(dt, j, i, seq), k);
    } else {
      for (size_t i = 0; i < counts[k]; i++)
        check_value("reduce_scatter", dt, out[k], i,
                    reduced(dt, rop, n, start[k] + i, seq), k);
      /* in is left as it was */
      for (size_t i = 0; i < total; i++)
        check_value("reduce_scatter input", dt, in[k], i, value(dt, k, i, seq),
                    k);
    }
  }
  for (uint32_t k = 0; k < n; k++) {
    free(in[k]);
    free(out[k]);
  }
  waiter_fini(&w);
}

/* Sizes: 0, 1 (one member has it), uneven, about 1 MiB in all. */
static void sizes_for(uint32_t n, size_t es, int which, size_t *counts) {
  for (uint32_t k = 0; k < n; k++) {
    switch (which) {
    case 0: counts[k] = 0; break;
    case 1: counts[k] = k == n - 1; break;
    case 2: counts[k] = (k * 5 + 3) % 7; break; /* 3, 1, 6, 4 */
    default: counts[k] = (1u << 20) / es / n + k; break;
    }
  }
}

/* algo: the all-reduce's algorithm for every size ("ring", "exchange",
 * "tree"; NULL: the cost model's, so the small sizes use the exchange).
 * ar_only: the all-reduces alone (the other ops do not depend on it). */
static void matrix(uint32_t n, const char *algo, bool ar_only) {
  mesh m;
  /* small chunks, so 1 MiB runs many lanes */
  mesh_up_algo(&m, n, 4096, algo);
  uint64_t seq = 0, others = 0;
  for (int op = OP_AR; op <= OP_ARO; op++)
    for (int dt = 0; dt < SL_DTYPE_COUNT; dt++)
      for (int rop = SL_REDUCE_SUM; rop <= SL_REDUCE_MIN; rop++) {
        if ((op == OP_AG || op == OP_A2A) && rop != SL_REDUCE_SUM) continue;
        if (ar_only && op != OP_AR && op != OP_ARO) continue;
        for (int which = 0; which < 4; which++) {
          size_t counts[MESH_MAX];
          sizes_for(n, sl_dtype_size((sl_dtype)dt), which, counts);
          if (op == OP_A2A) /* per pair: 0, 1, 2-3, ~1 MiB / n in all */
            counts[0] = which == 1 ? 1 : (counts[0] + counts[n - 1]) / 2;
          if (op == OP_AR || op == OP_ARO) {
            /* all-reduce takes the total and splits it evenly */
            size_t total = 0;
            for (uint32_t k = 0; k < n; k++)
              total += counts[k];
            for (uint32_t k = 0; k < n; k++)
              counts[k] = total * (k + 1) / n - total * k / n;
          }
          run_case(&m, op, (sl_dtype)dt, (sl_reduce_op)rop, counts, seq++);
          others += op != OP_AR && op != OP_ARO;
        }
      }
  sl__net_coll_stats s;
  sl__net_coll_get_stats(m.nc[0], &s);
  assert_int_equal(s.started, seq);
  assert_int_equal(s.completed, seq);
  assert_int_equal(s.failed, 0);
  /* comm_net_coll_shm: chunks went through the rings (connections open
   * lazily: the tree's root talks only to its children; a tree's whole
   * buffer may not fit its ring and go over TCP) */
  sl__dp_stats d;
  sl__dp_endpoint_get_stats(m.ep[0], &d);
  if (getenv("SLUICE_DP_SHM_BYTES")) {
    assert_true(d.shm_connections >= 1 && d.shm_connections <= n - 1);
    assert_true(d.payload_bytes_shm > 0);
  } else {
    assert_int_equal(d.payload_bytes_shm, 0);
  }
  /* Every instance counted under the algorithm it ran: the all-reduces
   * under the configured one (the model's: the exchange for the small
   * sizes, the ring for ~1 MiB), the rest under the ring but the
   * all-to-alls (4 sizes x 9 dtypes), pairwise. */
  uint64_t a2a = ar_only ? 0 : 4 * SL_DTYPE_COUNT;
  assert_int_equal(s.by_algo[SL__NET_ALGO_PAIRWISE], a2a);
  uint64_t ar = seq - others;
  if (algo) {
    sl__net_algo want = !strcmp(algo, "tree")       ? SL__NET_ALGO_TREE
                        : !strcmp(algo, "exchange") ? SL__NET_ALGO_EXCHANGE
                                                    : SL__NET_ALGO_RING;
    uint64_t rest = want == SL__NET_ALGO_RING ? others - a2a : 0;
    assert_int_equal(s.by_algo[want], ar + rest);
  } else {
    assert_true(s.by_algo[SL__NET_ALGO_EXCHANGE] > 0);
    assert_true(s.by_algo[SL__NET_ALGO_RING] > others - a2a);
    assert_int_equal(s.by_algo[SL__NET_ALGO_EXCHANGE] +
                         s.by_algo[SL__NET_ALGO_RING],
                     seq - a2a);
  }
  mesh_down(&m);
}

/* The choice the all-reduce makes, as the query reports it: the cheapest
 * by the cost model (sbp/cost.c) with the configured figures, unless an
 * algorithm is configured; and what ran is counted under that name. With
 * the CPU defaults (30 µs, 3 GB/s) two nodes cross from the exchange to
 * the ring at α·β = 90000 bytes; the tree wins only with many nodes. */
static void test_algo_choice(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 2, 0);
  sl__net_coll *nc = m.nc[0];
  assert_int_equal(sl__net_all_reduce_algo(nc, 2, 22499, SL_DTYPE_F32),
                   SL__NET_ALGO_EXCHANGE);
  assert_int_equal(sl__net_all_reduce_algo(nc, 2, 22501, SL_DTYPE_F32),
                   SL__NET_ALGO_RING);
  assert_int_equal(sl__net_all_reduce_algo(nc, 1, 1, SL_DTYPE_F32),
                   SL__NET_ALGO_RING);
  /* 16 nodes: the tree between ~45 and ~140 KB */
  assert_int_equal(sl__net_all_reduce_algo(nc, 16, 1000, SL_DTYPE_F32),
                   SL__NET_ALGO_EXCHANGE);
  assert_int_equal(sl__net_all_reduce_algo(nc, 16, 16384, SL_DTYPE_F32),
                   SL__NET_ALGO_TREE);
  assert_int_equal(sl__net_all_reduce_algo(nc, 16, 65536, SL_DTYPE_F32),
                   SL__NET_ALGO_RING);
  assert_string_equal(sl__net_algo_name(SL__NET_ALGO_RING), "ring");
  assert_string_equal(sl__net_algo_name(SL__NET_ALGO_EXCHANGE), "exchange");
  assert_string_equal(sl__net_algo_name(SL__NET_ALGO_TREE), "tree");
  assert_string_equal(sl__net_algo_name(SL__NET_ALGO_PAIRWISE), "pairwise");
  assert_string_equal(sl__net_algo_name(SL__NET_ALGO_COUNT), "?");
  size_t small[2] = {512, 512}, big[2] = {20000, 20000};
  run_case(&m, OP_AR, SL_DTYPE_F32, SL_REDUCE_SUM, small, 1);
  sl__net_coll_stats s;
  sl__net_coll_get_stats(nc, &s);
  assert_int_equal(s.by_algo[SL__NET_ALGO_EXCHANGE], 1);
  assert_int_equal(s.by_algo[SL__NET_ALGO_RING], 0);
  run_case(&m, OP_AR, SL_DTYPE_F32, SL_REDUCE_SUM, big, 2);
  sl__net_coll_get_stats(nc, &s);
  assert_int_equal(s.by_algo[SL__NET_ALGO_EXCHANGE], 1);
  assert_int_equal(s.by_algo[SL__NET_ALGO_RING], 1);
  mesh_down(&m);

  /* Other figures move the crossing: with α = 1 ms it is at 3 MB. */
  dp_mesh(m.ep, 1, NULL);
  sl__net_coll_config slow = {.latency_us = 1000};
  assert_int_equal(sl__net_coll_create(m.ep[0], &slow, &nc), SL_OK);
  assert_int_equal(sl__net_all_reduce_algo(nc, 2, 700000, SL_DTYPE_F32),
                   SL__NET_ALGO_EXCHANGE);
  assert_int_equal(sl__net_all_reduce_algo(nc, 2, 800000, SL_DTYPE_F32),
                   SL__NET_ALGO_RING);
  sl__dp_endpoint_destroy(m.ep[0]);
  sl__net_coll_destroy(nc);
  /* Forced, and refused when unknown or the figures are bad. */
  dp_mesh(m.ep, 1, NULL);
  sl__net_coll_config tree = {.all_reduce = "tree"};
  assert_int_equal(sl__net_coll_create(m.ep[0], &tree, &nc), SL_OK);
  assert_int_equal(sl__net_all_reduce_algo(nc, 2, 1 << 24, SL_DTYPE_F32),
                   SL__NET_ALGO_TREE);
  sl__net_coll_destroy(nc);
  sl__net_coll_config bad = {.all_reduce = "butterfly"};
  assert_int_equal(sl__net_coll_create(m.ep[0], &bad, &nc), SL_EINVAL);
  if (!strstr(sl_last_error(), "butterfly"))
    fail_msg("message: %s", sl_last_error());
  bad = (sl__net_coll_config){.bandwidth_gbps = -2};
  assert_int_equal(sl__net_coll_create(m.ep[0], &bad, &nc), SL_EINVAL);
  sl__dp_endpoint_destroy(m.ep[0]);
}

static void test_two_nodes(void **state) {
  (void)state;
  matrix(2, "ring", false);
  matrix(2, NULL, false);
  matrix(2, "tree", true);
}

static void test_three_nodes(void **state) {
  (void)state;
  matrix(3, "ring", false);
  matrix(3, NULL, false);
  matrix(3, "tree", true);
}

/* The tree's shapes: 4 (a full binomial tree), 5 and 6 (the root's last
 * child has children of its own, or not). */
static void test_tree(void **state) {
  (void)state;
  for (uint32_t n = 4; n <= 6; n++)
    matrix(n, "tree", true);
}

/* Members configured with different algorithms: every member fails with
 * the reason, none waits, and the pairs carry the next instance. */
static void test_algo_mismatch(void **state) {
  (void)state;
  mesh m;
  memset(&m, 0, sizeof m);
  m.n = 3;
  dp_mesh(m.ep, 3, NULL);
  static const char *const algo[3] = {"tree", "ring", "tree"};
  for (uint32_t i = 0; i < 3; i++) {
    sl__net_coll_config cfg = {.all_reduce = algo[i]};
    assert_int_equal(sl__net_coll_create(m.ep[i], &cfg, &m.nc[i]), SL_OK);
  }
  uint32_t nodes[3] = {0, 1, 2};
  sl__net_group g = {.id = 9, .nodes = nodes, .n = 3};
  float *bufs[3];
  waiter w;
  waiter_init(&w);
  for (uint32_t k = 0; k < 3; k++) {
    bufs[k] = fill(SL_DTYPE_F32, k, 100, 4);
    assert_int_equal(sl__net_all_reduce(m.nc[k], &g, 0, bufs[k], 100,
                                        SL_DTYPE_F32, SL_REDUCE_SUM, waiter_cb,
                                        &w),
                     SL_OK);
  }
  waiter_wait_within(&w, 3, SOON_MS);
  assert_int_equal(w.failed, 3);
  if (!strstr(w.msg, "collective 9/0")) fail_msg("message: %s", w.msg);
  for (uint32_t k = 0; k < 3; k++)
    free(bufs[k]);
  waiter_fini(&w);
  mesh_down(&m);
}

static void test_four_nodes(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 4, 0); /* the default chunk */
  size_t counts[4];
  sizes_for(4, 4, 3, counts);
  counts[2] += 12345; /* uneven and several chunks */
  run_case(&m, OP_AR, SL_DTYPE_F32, SL_REDUCE_SUM, counts, 1);
  run_case(&m, OP_AG, SL_DTYPE_I32, SL_REDUCE_SUM, counts, 2);
  run_case(&m, OP_RS, SL_DTYPE_F64, SL_REDUCE_MAX, counts, 3);
  run_case(&m, OP_A2A, SL_DTYPE_I64, SL_REDUCE_SUM, counts, 4);
  mesh_down(&m);
}

/* Independent groups and sequence numbers in flight at once: the whole
 * mesh, a pair that reverses the order, another pair; several instances
 * each, started in an order that differs between members. */
static void test_concurrent(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 4, 8192);
  enum { SEQS = 4, COUNT = 50000 };
  uint32_t all[4] = {0, 1, 2, 3}, b[2] = {3, 1}, c[2] = {2, 0};
  sl__net_group groups[3] = {
      {.id = 10, .nodes = all, .n = 4},
      {.id = 11, .nodes = b, .n = 2},
      {.id = 12, .nodes = c, .n = 2},
  };
  float *bufs[3][SEQS][4] = {{{0}}};
  waiter w;
  waiter_init(&w);
  int expected = 0;
  for (int member_pass = 0; member_pass < 4; member_pass++) {
    /* members start in the order 3, 2, 1, 0 */
    uint32_t node = 3 - (uint32_t)member_pass;
    for (int gi = 0; gi < 3; gi++) {
      const sl__net_group *g = &groups[gi];
      for (uint32_t k = 0; k < g->n; k++) {
        if (g->nodes[k] != node) continue;
        for (int s = 0; s < SEQS; s++) {
          /* later sequence numbers first on odd nodes */
          int sq = node % 2 ? SEQS - 1 - s : s;
          float *p = malloc(COUNT * sizeof *p);
          for (int i = 0; i < COUNT; i++)
            p[i] = (float)value(SL_DTYPE_F32, k, (size_t)i,
                                (uint64_t)(gi * 100 + sq));
          bufs[gi][sq][k] = p;
          assert_int_equal(sl__net_all_reduce(m.nc[node], g, (uint64_t)sq, p,
                                              COUNT, SL_DTYPE_F32,
                                              SL_REDUCE_SUM, waiter_cb, &w),
                           SL_OK);
          expected++;
        }
      }
    }
  }
  waiter_wait_within(&w, expected, SOON_MS);
  if (w.failed) fail_msg("a member failed: %s", w.msg);
  for (int gi = 0; gi < 3; gi++)
    for (int s = 0; s < SEQS; s++)
      for (uint32_t k = 0; k < groups[gi].n; k++) {
        for (int i = 0; i < COUNT; i++)
          check_value("concurrent", SL_DTYPE_F32, bufs[gi][s][k], (size_t)i,
                      reduced(SL_DTYPE_F32, SL_REDUCE_SUM, groups[gi].n,
                              (size_t)i, (uint64_t)(gi * 100 + s)),
                      k);
        free(bufs[gi][s][k]);
      }
  waiter_fini(&w);
  mesh_down(&m);
}

/* Member 1 starts only after member 0's first chunks reached it: they are
 * staged and consumed at the start. */
static void test_early_chunks_staged(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 2, 1024);
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 5, .nodes = nodes, .n = 2};
  enum { COUNT = 4096 };
  int32_t *a = fill(SL_DTYPE_I32, 0, COUNT, 9),
          *b = fill(SL_DTYPE_I32, 1, COUNT, 9);
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, a, COUNT, SL_DTYPE_I32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  sl__net_coll_stats s = {0};
  uint64_t t0 = sl__now_ns();
  while (sl__now_ns() - t0 < (uint64_t)SOON_MS * 1000000u) {
    sl__net_coll_get_stats(m.nc[1], &s);
    if (s.chunks_staged > 0) break;
    usleep(1000);
  }
  assert_true(s.chunks_staged > 0);
  assert_int_equal(sl__net_all_reduce(m.nc[1], &g, 0, b, COUNT, SL_DTYPE_I32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  waiter_wait_within(&w, 2, SOON_MS);
  assert_int_equal(w.failed, 0);
  for (size_t i = 0; i < COUNT; i++) {
    double want = reduced(SL_DTYPE_I32, SL_REDUCE_SUM, 2, i, 9);
    check_value("staged", SL_DTYPE_I32, a, i, want, 0);
    check_value("staged", SL_DTYPE_I32, b, i, want, 1);
  }
  /* a second start of the same instance is refused */
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 1, a, COUNT, SL_DTYPE_I32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 1, a, COUNT, SL_DTYPE_I32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_EINVAL);
  assert_int_equal(sl__net_all_reduce(m.nc[1], &g, 1, b, COUNT, SL_DTYPE_I32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  waiter_wait_within(&w, 4, SOON_MS);
  assert_int_equal(w.failed, 0);
  free(a);
  free(b);
  waiter_fini(&w);
  mesh_down(&m);
}

/* A member whose peer goes away completes with an error naming it. */
static void test_peer_lost(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 2, 0);
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 6, .nodes = nodes, .n = 2};
  float *a = fill(SL_DTYPE_F32, 0, 1000, 1);
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__dp_endpoint_connect(m.ep[0], 1), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(m.ep[0], 1, SOON_MS), SL_OK);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, a, 1000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  sl__dp_endpoint_destroy(m.ep[1]);
  m.ep[1] = NULL;
  waiter_wait_within(&w, 1, SOON_MS);
  assert_int_equal(w.failed, 1);
  assert_int_equal(w.last, SL_ECOMM);
  if (!strstr(w.msg, "node 1")) fail_msg("message: %s", w.msg);
  /* a later start with that peer fails: at once, or when redialing it
   * fails (it left in order, so it may come back) */
  sl_status st = sl__net_all_reduce(m.nc[0], &g, 1, a, 1000, SL_DTYPE_F32,
                                    SL_REDUCE_SUM, waiter_cb, &w);
  if (st == SL_OK) {
    waiter_wait_within(&w, 2, SOON_MS);
    assert_int_equal(w.failed, 2);
  } else {
    assert_int_equal(st, SL_ECOMM);
  }
  free(a);
  waiter_fini(&w);
  mesh_down(&m);
}

/* Members that disagree on the size: the chunk does not fit, both
 * members complete with an error naming the sizes. */
static void test_size_mismatch(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 2, 0);
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 7, .nodes = nodes, .n = 2};
  float *a = fill(SL_DTYPE_F32, 0, 1000, 1), *b = fill(SL_DTYPE_F32, 1, 999, 1);
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, a, 1000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__net_all_reduce(m.nc[1], &g, 0, b, 999, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  waiter_wait_within(&w, 2, SOON_MS);
  assert_int_equal(w.failed, 2);
  free(a);
  free(b);
  waiter_fini(&w);
  mesh_down(&m);
}

/* Three members, one with another size: every member fails (none waits
 * for a chunk that never comes), the pairs stay up, and the next instance
 * works. */
static void test_size_mismatch_three(void **state) {
  (void)state;
  mesh m;
  mesh_up_algo(&m, 3, 1024, "ring");
  uint32_t nodes[3] = {0, 1, 2};
  sl__net_group g = {.id = 8, .nodes = nodes, .n = 3};
  enum { COUNT = 3000 };
  float *bufs[3];
  waiter w;
  waiter_init(&w);
  for (uint32_t k = 0; k < 3; k++) {
    bufs[k] = fill(SL_DTYPE_F32, k, COUNT, 2);
    size_t count = k == 2 ? COUNT - 300 : COUNT;
    assert_int_equal(sl__net_all_reduce(m.nc[k], &g, 0, bufs[k], count,
                                        SL_DTYPE_F32, SL_REDUCE_SUM, waiter_cb,
                                        &w),
                     SL_OK);
  }
  waiter_wait_within(&w, 3, SOON_MS);
  assert_int_equal(w.failed, 3);
  if (!strstr(w.msg, "collective 8/0")) fail_msg("message: %s", w.msg);
  for (uint32_t k = 0; k < 3; k++) {
    free(bufs[k]);
    bufs[k] = fill(SL_DTYPE_F32, k, COUNT, 3);
    assert_int_equal(sl__net_all_reduce(m.nc[k], &g, 1, bufs[k], COUNT,
                                        SL_DTYPE_F32, SL_REDUCE_SUM, waiter_cb,
                                        &w),
                     SL_OK);
  }
  waiter_wait_within(&w, 6, SOON_MS);
  assert_int_equal(w.failed, 3);
  for (uint32_t k = 0; k < 3; k++) {
    for (size_t i = 0; i < COUNT; i++)
      check_value("after a mismatch", SL_DTYPE_F32, bufs[k], i,
                  reduced(SL_DTYPE_F32, SL_REDUCE_SUM, 3, i, 3), k);
    free(bufs[k]);
  }
  waiter_fini(&w);
  mesh_down(&m);
}

/* Two nodes with three members each: reduce inside each node, all-reduce
 * between the leaders, broadcast inside; three rounds, small (exchange)
 * and large (ring) sizes. */
static void test_hierarchical(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 2, 16384);
  enum { LOCAL = 3 };
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 20, .nodes = nodes, .n = 2};
  int workers[LOCAL] = {0, 1, 2};
  size_t sizes[2] = {100, 70001};
  for (int si = 0; si < 2; si++) {
    size_t count = sizes[si];
    sl__comm *comm[2];
    sl__net_hier *h[2];
    for (int nd = 0; nd < 2; nd++) {
      sl__comm_config cc = {.workers = LOCAL};
      assert_int_equal(sl__comm_create(&cc, &comm[nd]), SL_OK);
      sl__net_hier_desc d = {.name = "hier",
                             .comm = comm[nd],
                             .workers = workers,
                             .local_members = LOCAL,
                             .nc = m.nc[nd],
                             .group = &g,
                             .dtype = SL_DTYPE_F32,
                             .op = SL_REDUCE_SUM,
                             .count = count};
      g.id = 20 + (uint64_t)si; /* the same on both nodes */
      if (sl__net_hier_create(&d, &h[nd]) != SL_OK)
        fail_msg("hier: %s", sl_last_error());
    }
    for (int round = 0; round < 3; round++) {
      uint64_t salt = (uint64_t)(si * 10 + round);
      void *in[2][LOCAL], *out[2][LOCAL];
      waiter w;
      waiter_init(&w);
      for (int nd = 0; nd < 2; nd++)
        for (int k = 0; k < LOCAL; k++) {
          in[nd][k] =
              fill(SL_DTYPE_F32, (uint32_t)(nd * LOCAL + k), count, salt);
          out[nd][k] = calloc(count, sizeof(float));
        }
      /* node 1's members first, in reverse */
      for (int nd = 1; nd >= 0; nd--)
        for (int k = LOCAL - 1; k >= 0; k--)
          if (sl__net_hier_arrive(h[nd], k, in[nd][k], out[nd][k], waiter_cb,
                                  &w) != SL_OK)
            fail_msg("arrive: %s", sl_last_error());
      waiter_wait_within(&w, 2 * LOCAL, SOON_MS);
      if (w.failed) fail_msg("a member failed: %s", w.msg);
      for (int nd = 0; nd < 2; nd++)
        for (int k = 0; k < LOCAL; k++) {
          for (size_t i = 0; i < count; i++)
            check_value(
                "hierarchical", SL_DTYPE_F32, out[nd][k], i,
                reduced(SL_DTYPE_F32, SL_REDUCE_SUM, 2 * LOCAL, i, salt),
                (uint32_t)(nd * LOCAL + k));
          free(in[nd][k]);
          free(out[nd][k]);
        }
      waiter_fini(&w);
    }
    for (int nd = 0; nd < 2; nd++) {
      sl__comm_destroy(comm[nd]);
      sl__net_hier_destroy(h[nd]);
    }
  }
  mesh_down(&m);
}

/* All-to-all with a different count for every ordered pair (zero
 * included) on 3 nodes: member k's out part j is exactly member j's in
 * part k. */
static void test_all_to_allv(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 3, 0);
  uint32_t nodes[3] = {2, 0, 1}; /* ring order need not be node order */
  sl__net_group g = {.id = 11, .nodes = nodes, .n = 3};
  size_t cnt[3][3]; /* cnt[from][to] elements */
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      cnt[a][b] = (size_t)((a * 3 + b) % 4) * 1000 + (a == b ? 1 : 0);
  cnt[0][2] = 0;
  waiter w;
  waiter_init(&w);
  int32_t *in[3], *out[3];
  size_t sendc[3][3], recvc[3][3];
  for (int k = 0; k < 3; k++) {
    size_t ti = 0, to = 0;
    for (int j = 0; j < 3; j++) {
      sendc[k][j] = cnt[k][j];
      recvc[k][j] = cnt[j][k];
      ti += cnt[k][j];
      to += cnt[j][k];
    }
    in[k] = calloc(ti + 1, sizeof(int32_t));
    out[k] = calloc(to + 1, sizeof(int32_t));
    size_t o = 0;
    for (int j = 0; j < 3; j++)
      for (size_t i = 0; i < cnt[k][j]; i++)
        in[k][o++] = (int32_t)(k * 1000000 + j * 100000 + (int)i);
  }
  for (int k = 2; k >= 0; k--) /* members start in another order */
    assert_int_equal(sl__net_all_to_allv(m.nc[nodes[k]], &g, 0, in[k], sendc[k],
                                         out[k], recvc[k], SL_DTYPE_I32,
                                         waiter_cb, &w),
                     SL_OK);
  waiter_wait_within(&w, 3, SOON_MS);
  assert_int_equal(w.failed, 0);
  for (int k = 0; k < 3; k++) {
    size_t o = 0;
    for (int j = 0; j < 3; j++)
      for (size_t i = 0; i < cnt[j][k]; i++, o++)
        if (out[k][o] != (int32_t)(j * 1000000 + k * 100000 + (int)i))
          fail_msg("member %d part %d element %zu: %d", k, j, i, out[k][o]);
    free(in[k]);
    free(out[k]);
  }
  waiter_fini(&w);
  mesh_down(&m);
}

/* A member whose job ends while its collective waits for a peer that
 * never starts: sl__net_coll_abort completes it with the reason, later
 * starts fail at once, and after sl__net_coll_reset the pair works again
 * (the peer's chunks of the abandoned instance are dropped, not kept). */
static void test_abort_and_reset(void **state) {
  (void)state;
  mesh m;
  mesh_up_algo(&m, 2, 4096, "ring");
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 12, .nodes = nodes, .n = 2};
  float *a = fill(SL_DTYPE_F32, 0, 100000, 3);
  float *b = fill(SL_DTYPE_F32, 1, 100000, 3);
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, a, 100000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  sl__net_coll_abort(m.nc[0], SL_EABORTED, "job 3 was stopped");
  waiter_wait_within(&w, 1, SOON_MS);
  assert_int_equal(w.failed, 1);
  assert_int_equal(w.last, SL_EABORTED);
  if (!strstr(w.msg, "job 3 was stopped")) fail_msg("message: %s", w.msg);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 1, a, 100000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_EABORTED);
  /* the peer aborts as well (its job was stopped too), then both reset */
  sl__net_coll_abort(m.nc[1], SL_EABORTED, "job 3 was stopped");
  sl__net_coll_reset(m.nc[0]);
  sl__net_coll_reset(m.nc[1]);
  for (int i = 0; i < 100000; i++) {
    a[i] = 1.0f;
    b[i] = 2.0f;
  }
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 2, a, 100000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__net_all_reduce(m.nc[1], &g, 2, b, 100000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  waiter_wait_within(&w, 3, SOON_MS);
  assert_int_equal(w.failed, 1);
  for (int i = 0; i < 100000; i++)
    if (a[i] != 3.0f || b[i] != 3.0f)
      fail_msg("element %d: %g %g", i, a[i], b[i]);
  free(a);
  free(b);
  waiter_fini(&w);
  mesh_down(&m);
}

static void test_bad_args(void **state) {
  (void)state;
  mesh m;
  mesh_up(&m, 2, 0);
  uint32_t nodes[2] = {0, 1}, dup[2] = {1, 1}, other[1] = {1};
  float x[4] = {0};
  waiter w;
  waiter_init(&w);
  sl__net_group g = {.id = 1, .nodes = dup, .n = 2};
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, x, 4, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_EINVAL);
  g.nodes = other;
  g.n = 1;
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, x, 4, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_EINVAL);
  g.nodes = nodes;
  g.n = 2;
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, x, 4, (sl_dtype)99,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_EINVAL);
  /* a group of one completes before start returns */
  g.nodes = nodes;
  g.n = 1;
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, x, 4, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(w.done, 1);
  /* out of place: overlapping buffers are refused; a group of one copies */
  float y[6] = {1, 2, 3, 4, 5, 6}, z[4] = {0};
  g.n = 2;
  assert_int_equal(sl__net_all_reduce_into(m.nc[0], &g, 1, y, y + 2, 4,
                                           SL_DTYPE_F32, SL_REDUCE_SUM,
                                           waiter_cb, &w),
                   SL_EINVAL);
  g.n = 1;
  assert_int_equal(sl__net_all_reduce_into(m.nc[0], &g, 2, y, z, 4,
                                           SL_DTYPE_F32, SL_REDUCE_SUM,
                                           waiter_cb, &w),
                   SL_OK);
  assert_int_equal(w.done, 2);
  assert_memory_equal(y, z, sizeof z);
  waiter_fini(&w);
  mesh_down(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_nodes),
      cmocka_unit_test(test_three_nodes),
      cmocka_unit_test(test_four_nodes),
      cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_algo_choice),
      cmocka_unit_test(test_tree),
      cmocka_unit_test(test_algo_mismatch),
      cmocka_unit_test(test_early_chunks_staged),
      cmocka_unit_test(test_peer_lost),
      cmocka_unit_test(test_size_mismatch),
      cmocka_unit_test(test_size_mismatch_three),
      cmocka_unit_test(test_hierarchical),
      cmocka_unit_test(test_all_to_allv),
      cmocka_unit_test(test_abort_and_reset),
      cmocka_unit_test(test_bad_args),
  };
  signal(SIGPIPE, SIG_IGN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
