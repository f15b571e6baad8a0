/* The α-β cost model: default figures, ring collectives (intra- and
 * inter-node groups), point-to-point steps, custom figures and their
 * checks. The numbers are worked out by hand from docs/boxing.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "sbp_int.h"

static sl_boxing_route *mk(const char *shape, const char *src, const char *ssbp,
                           const char *dst, const char *dsbp,
                           const sl_boxing_cost *cost) {
  sl_shape sh;
  sl_nd_sbp a, b;
  sl_placement *ps = NULL, *pd = NULL;
  if (sl_shape_parse(shape, &sh) != SL_OK || sl_nd_sbp_parse(ssbp, &a) ||
      sl_nd_sbp_parse(dsbp, &b) || sl_placement_parse(src, &ps) ||
      sl_placement_parse(dst, &pd))
    fail_msg("bad test input: %s", sl_last_error());
  sl_boxing_route *plan = NULL;
  if (sl_boxing_route_create(&sh, SL_DTYPE_F32, ps, &a, pd, &b, cost, &plan))
    fail_msg("plan: %s", sl_last_error());
  sl_placement_destroy(ps);
  sl_placement_destroy(pd);
  return plan;
}

static void assert_us(double got, double want) {
  if (fabs(got - want) > 1e-9 * (1 + fabs(want)))
    fail_msg("predicted %.9f us, want %.9f", got, want);
}

static void test_defaults(void **state) {
  sl_boxing_cost c = sl_boxing_cost_default(SL_DEVICE_CPU);
  assert_true(c.intra_bandwidth_gbps == 10.0 && c.intra_latency_us == 1.0);
  assert_true(c.inter_bandwidth_gbps == 3.0 && c.inter_latency_us == 30.0);
  c = sl_boxing_cost_default(SL_DEVICE_CUDA);
  assert_true(c.intra_bandwidth_gbps == 150.0 && c.intra_latency_us == 5.0);
  assert_true(c.inter_bandwidth_gbps == 12.5 && c.inter_latency_us == 10.0);
  assert_int_equal(sl__cost_check(&c), SL_OK);
}

static void test_primitives(void **state) {
  sl_boxing_cost c = sl_boxing_cost_default(SL_DEVICE_CPU);
  /* 10 GB/s moves 1e4 bytes per µs. */
  assert_us(sl__cost_message(&c, false, 20000), 1.0 + 2.0);
  assert_us(sl__cost_message(&c, true, 3000), 30.0 + 1.0);
  assert_us(sl__cost_message(&c, false, 0), 1.0);
  assert_us(sl__cost_ring(&c, false, 3, 30000), 3.0 + 3.0);
  assert_us(sl__cost_ring(&c, true, 2, 6000), 60.0 + 2.0);
  assert_us(sl__cost_ring(&c, true, 0, 6000), 0.0);
}

/* The all-reduce algorithms between nodes (30 µs, 3 GB/s: 3000 bytes per
 * µs), and the cheapest of them by size and node count. */
static void test_all_reduce_between_nodes(void **state) {
  (void)state;
  sl_boxing_cost c = sl_boxing_cost_default(SL_DEVICE_CPU);
  /* 4 nodes, 6000 bytes (2 µs of transfer each). */
  assert_us(sl__cost_all_reduce(&c, SL__ALL_REDUCE_RING, 4, 6000),
            6 * 30.0 + 1.5 * 2.0);
  assert_us(sl__cost_all_reduce(&c, SL__ALL_REDUCE_EXCHANGE, 4, 6000),
            30.0 + 6 * 2.0);
  assert_us(sl__cost_all_reduce(&c, SL__ALL_REDUCE_TREE, 4, 6000),
            4 * (30.0 + 2 * 2.0));
  /* 5 nodes: a tree three levels deep */
  assert_us(sl__cost_all_reduce(&c, SL__ALL_REDUCE_TREE, 5, 6000),
            6 * (30.0 + 2 * 2.0));
  assert_us(sl__cost_all_reduce(&c, SL__ALL_REDUCE_TREE, 1, 6000), 0.0);
  double us;
  assert_int_equal(sl__cost_all_reduce_best(&c, 4, 6000, &us),
                   SL__ALL_REDUCE_EXCHANGE);
  assert_us(us, 42.0);
  /* two nodes: the exchange up to α·β = 90000 bytes, a tie there goes to
   * the ring */
  assert_int_equal(sl__cost_all_reduce_best(&c, 2, 89999, NULL),
                   SL__ALL_REDUCE_EXCHANGE);
  assert_int_equal(sl__cost_all_reduce_best(&c, 2, 90000, NULL),
                   SL__ALL_REDUCE_RING);
  /* 64 nodes, 64 KiB: the tree (12 hops) beats 126 ring hops and 63
   * buffers each way */
  assert_int_equal(sl__cost_all_reduce_best(&c, 64, 65536, NULL),
                   SL__ALL_REDUCE_TREE);
  assert_int_equal(sl__cost_all_reduce_best(&c, 64, 64 << 20, NULL),
                   SL__ALL_REDUCE_RING);
  /* the tree's first node count: 13 at α·β bytes, not 12 */
  assert_int_equal(sl__cost_all_reduce_best(&c, 13, 90000, NULL),
                   SL__ALL_REDUCE_TREE);
  for (int n = 2; n <= 12; n++)
    for (int64_t b = 1000; b <= (8 << 20); b *= 2)
      assert_int_not_equal(sl__cost_all_reduce_best(&c, n, b, NULL),
                           SL__ALL_REDUCE_TREE);
}

static void test_ring_collectives(void **state) {
  /* all_gather of 4 KiB in 4: 3 rounds, 3072 bytes. */
  sl_boxing_route *p = mk("1024", "cpu:0-3", "S(0)", "cpu:0-3", "B", NULL);
  assert_us(sl_boxing_step_predicted_us(p, 0), 3 * 1.0 + 3072 / 1e4);
  assert_us(sl_boxing_route_predicted_us(p), 3 * 1.0 + 3072 / 1e4);
  sl_boxing_route_destroy(p);
  /* The same group across two nodes uses the inter-node figures. */
  p = mk("1024", "cpu:0-1/0-1", "S(0)", "cpu:0-1/0-1", "B", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 3 * 30.0 + 3072 / 3e3);
  sl_boxing_route_destroy(p);
  /* On a [2,2] mesh over two nodes, axis 1 stays in a node, axis 0 does
   * not: 1 round of 2048 bytes each. */
  p = mk("1024", "cpu:0-1/0-1[2,2]", "(B,S(0))", "cpu:0-1/0-1[2,2]", "(B,B)",
         NULL);
  assert_int_equal(sl_boxing_step_mesh_axis(p, 0), 1);
  assert_us(sl_boxing_route_predicted_us(p), 1.0 + 2048 / 1e4);
  sl_boxing_route_destroy(p);
  p = mk("1024", "cpu:0-1/0-1[2,2]", "(S(0),B)", "cpu:0-1/0-1[2,2]", "(B,B)",
         NULL);
  assert_us(sl_boxing_route_predicted_us(p), 30.0 + 2048 / 3e3);
  sl_boxing_route_destroy(p);
  /* all_reduce on 8 GPUs: 14 rounds, 2T(n-1)/n bytes at 150 GB/s. */
  p = mk("1048576", "cuda:0-7", "P", "cuda:0-7", "B", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 14 * 5.0 + 7340032 / 150e3);
  sl_boxing_route_destroy(p);
  /* reduce_scatter and all_to_all: n-1 rounds. */
  p = mk("8,8", "cuda:0-3", "P", "cuda:0-3", "S(1)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 3 * 5.0 + 192 / 150e3);
  sl_boxing_route_destroy(p);
  p = mk("8,8", "cuda:0-3", "S(0)", "cuda:0-3", "S(1)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 3 * 5.0 + 48 / 150e3);
  sl_boxing_route_destroy(p);
  /* Uneven: the busiest rank sets the time. [10] in 4: 28,32,32,28. */
  p = mk("10", "cpu:0-3", "S(0)", "cpu:0-3", "B", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 3.0 + 32 / 1e4);
  sl_boxing_route_destroy(p);
  /* Local steps cost nothing. */
  p = mk("8,8", "cpu:0-3", "B", "cpu:0-3", "S(1)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 0.0);
  sl_boxing_route_destroy(p);
  p = mk("8,8", "cpu:0-3", "S(0)", "cpu:0-3", "P", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 0.0);
  sl_boxing_route_destroy(p);
}

static void test_custom_figures(void **state) {
  sl_boxing_cost c = {100.0, 2.0, 1.0, 50.0};
  sl_boxing_route *p = mk("1024", "cpu:0-3", "S(0)", "cpu:0-3", "B", &c);
  assert_us(sl_boxing_route_predicted_us(p), 3 * 2.0 + 3072 / 100e3);
  sl_boxing_route_destroy(p);
  p = mk("1024", "cpu:0-1/0-1", "S(0)", "cpu:0-1/0-1", "B", &c);
  assert_us(sl_boxing_route_predicted_us(p), 3 * 50.0 + 3072 / 1e3);
  sl_boxing_route_destroy(p);
}

static void test_point_to_point(void **state) {
  /* One source sends two 2000-byte pieces: its sends add up. */
  sl_boxing_route *p = mk("1000", "cpu:0", "B", "cpu:1-2", "S(0)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 2 * (1.0 + 2000 / 1e4));
  sl_boxing_route_destroy(p);
  /* Two sources, one receiver: its receives add up. */
  p = mk("1000", "cpu:0-1", "S(0)", "cpu:2", "B", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 2 * (1.0 + 2000 / 1e4));
  sl_boxing_route_destroy(p);
  /* copy: pairs in parallel; inter-node pairs use the inter figures. */
  p = mk("1000", "cpu:0-1", "S(0)", "cpu:2-3", "S(0)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 1.0 + 2000 / 1e4);
  sl_boxing_route_destroy(p);
  p = mk("1000", "cpu:0/0-1", "S(0)", "cpu:1/0-1", "S(0)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 30.0 + 2000 / 3e3);
  sl_boxing_route_destroy(p);
  /* A piece that stays on its device is free. */
  p = mk("1000", "cpu:0-1", "S(0)", "cpu:1,0", "S(0)", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 1.0 + 2000 / 1e4);
  sl_boxing_route_destroy(p);
  p = mk("1000", "cpu:0-1", "B", "cpu:1", "B", NULL);
  assert_us(sl_boxing_route_predicted_us(p), 0.0);
  assert_int_equal(sl_boxing_route_bytes_sent(p)[0], 0);
  assert_int_equal(sl_boxing_route_bytes_sent(p)[1], 0);
  sl_boxing_route_destroy(p);
}

/* The plan's time is the sum of its steps'. */
static void test_totals(void **state) {
  sl_boxing_route *p = mk("7,3", "cpu:0-1/0-1[2,2]", "(S(0),S(0))",
                          "cpu:0-1/0-1[2,2]", "(B,S(0))", NULL);
  assert_int_equal(sl_boxing_route_step_count(p), 3);
  double sum = 0;
  for (int i = 0; i < 3; i++)
    sum += sl_boxing_step_predicted_us(p, i);
  assert_us(sl_boxing_route_predicted_us(p), sum);
  assert_true(sum > 30.0); /* axis 0 crosses nodes */
  sl_boxing_route_destroy(p);
}

static void test_bad_figures(void **state) {
  sl_shape sh = {1, {4}};
  sl_nd_sbp b = {1, {{SL_SBP_BROADCAST, 0, SL_REDUCE_SUM}}};
  sl_placement *pl = NULL;
  assert_int_equal(sl_placement_parse("cpu:0-1", &pl), SL_OK);
  sl_boxing_cost bad[] = {
      {0.0, 1.0, 3.0, 30.0},
      {10.0, -1.0, 3.0, 30.0},
      {10.0, 1.0, NAN, 30.0},
      {10.0, 1.0, 3.0, INFINITY},
  };
  const char *names[] = {"intra_bandwidth_gbps", "intra_latency_us",
                         "inter_bandwidth_gbps", "inter_latency_us"};
  for (int i = 0; i < 4; i++) {
    sl_boxing_route *p = NULL;
    assert_int_equal(
        sl_boxing_route_create(&sh, SL_DTYPE_F32, pl, &b, pl, &b, &bad[i], &p),
        SL_EINVAL);
    assert_null(p);
    assert_non_null(strstr(sl_last_error(), names[i]));
  }
  /* Zero latency is allowed. */
  sl_boxing_cost ok = {10.0, 0.0, 3.0, 0.0};
  assert_int_equal(sl__cost_check(&ok), SL_OK);
  sl_placement_destroy(pl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_primitives),
      cmocka_unit_test(test_all_reduce_between_nodes),
      cmocka_unit_test(test_ring_collectives),
      cmocka_unit_test(test_custom_figures),
      cmocka_unit_test(test_point_to_point),
      cmocka_unit_test(test_totals),
      cmocka_unit_test(test_bad_figures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
