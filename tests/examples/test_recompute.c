/* Recomputation (sl_graph_push_recompute): gpt with every block a region
 * gives the same losses bit for bit on single, dp, tp, hybrid and 2
 * pipeline stages with micro-batches (the backward pass reads the same
 * values, computed again by the same kernels), its plan holds the
 * recomputed ops, and the planned activation memory falls by more than
 * half (the blocks' attention scores and MLP activations are no longer
 * kept from the forward pass to the backward). A push after sl_minimize
 * is refused. */
#include <stdlib.h>
#include <string.h>

#include <sluice/session.h>

#include "gpt/model.h"
#include "graph_int.h"
#include "inv.h"

#define STEPS 3

static sl_status build(sl_graph *g, ex_layout layout, const char *devices,
                       int pp, bool recompute) {
  static char placement[256], stages[EX_MAX_STAGES][512];
  sl_status st =
      ex_layout_placement(layout, devices, placement, sizeof placement);
  if (st == SL_OK) st = ex_stage_placements(layout, devices, pp, stages);
  if (st != SL_OK) return st;
  ex_gpt_config c = ex_gpt_defaults();
  c.seq = 64;
  c.layers = 2;
  c.layout = layout;
  c.placement = placement;
  c.recompute = recompute;
  c.pp = pp;
  c.micro = pp > 1 ? 2 : 1;
  for (int s = 0; s < pp; s++)
    c.stage_placement[s] = stages[s];
  return ex_gpt_build(g, &c);
}

/* Trains STEPS steps; device 0's memory when mem is set; the number of
 * recomputed nodes. */
static int train(ex_layout layout, const char *devices, int pp, bool recompute,
                 float *losses, sl_memory_stats *mem) {
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build(g, layout, devices, pp, recompute));
  inv_session_train(g, STEPS, losses, mem);
  int n = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++)
    n += sl__graph_node(g, i)->recompute;
  sl_graph_destroy(g);
  return n;
}

static void test_losses(void **state) {
  (void)state;
  static const struct {
    ex_layout layout;
    const char *devices;
    int pp;
  } cases[] = {{EX_LAYOUT_SINGLE, "cpu:1", 1},
               {EX_LAYOUT_DP, "cpu:2", 1},
               {EX_LAYOUT_TP, "cpu:2", 1},
               {EX_LAYOUT_HYBRID, "cpu:4", 1},
               {EX_LAYOUT_DP, "cpu:4", 2}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float base[STEPS], got[STEPS];
    assert_int_equal(train(cases[c].layout, cases[c].devices, cases[c].pp,
                           false, base, NULL),
                     0);
    int n =
        train(cases[c].layout, cases[c].devices, cases[c].pp, true, got, NULL);
    assert_true(n > 0);
    if (!inv_identical(got, base, STEPS))
      fail_msg("gpt %s on %s (pp %d): recomputed, other losses (max rel "
               "%.3g)",
               ex_layout_name(cases[c].layout), cases[c].devices, cases[c].pp,
               inv_max_rel(got, base, STEPS));
  }
}

static void test_memory(void **state) {
  (void)state;
  float losses[STEPS];
  sl_memory_stats m0, m1;
  train(EX_LAYOUT_SINGLE, "cpu:1", 1, false, losses, &m0);
  int n = train(EX_LAYOUT_SINGLE, "cpu:1", 1, true, losses, &m1);
  print_message("%d recomputed nodes; activations %lld -> %lld bytes, peak "
                "%lld -> %lld\n",
                n, (long long)m0.category[SL_MEMORY_ACTIVATIONS],
                (long long)m1.category[SL_MEMORY_ACTIVATIONS],
                (long long)m0.peak, (long long)m1.peak);
  assert_true(2 * m1.category[SL_MEMORY_ACTIVATIONS] <
              m0.category[SL_MEMORY_ACTIVATIONS]);
  assert_true(m1.peak < m0.peak);
}

static void test_after_minimize(void **state) {
  (void)state;
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build(g, EX_LAYOUT_SINGLE, "cpu:1", 1, false));
  sl_graph_push_recompute(g);
  assert_int_equal(sl_graph_status(g), SL_ESTATE);
  assert_non_null(strstr(sl_graph_error(g), "before sl_minimize"));
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_losses),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_after_minimize),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
