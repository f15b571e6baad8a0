/* ZeRO (sl_optimizer.zero_stage, docs/zero.md): a data-parallel weight's
 * update and optimizer state sharded over its data-parallel mesh axes.
 * Nothing is summed in another order (the reduce-scatter adds members in
 * the all-reduce's order; the update is elementwise), so mlp (SGD with
 * momentum) and gpt (Adam) give the zero-0 losses bit for bit on dp over
 * 2 and 3 devices (uneven shards) and hybrid [2,2] (strided shards of
 * row-parallel weights). Clipping by global norm sums the squares shard
 * by shard, so with it the losses agree within the invariance tolerance.
 * The plan reduce-scatters every gradient and all-gathers every weight,
 * with no all-reduce; each device holds 1/n of the optimizer state, and
 * the peak memory drops; stage 2 keeps fewer full-size gradients than
 * stage 1; stage 3 (the same losses bit for bit) keeps a quarter of the
 * weights on each device and gathers them for their readers. */
#include <stdlib.h>
#include <string.h>

#include <sluice/boxing.h>
#include <sluice/session.h>

#include "common/ex_pipeline.h"
#include "gpt/model.h"
#include "graph_int.h"
#include "inv.h"
#include "mlp/model.h"

#define STEPS 3

typedef sl_status (*build_fn)(sl_graph *g, ex_layout layout,
                              const char *placement, int zero);

static double clip_norm; /* the mlp's: 0 none */

static sl_status build_mlp(sl_graph *g, ex_layout layout, const char *placement,
                           int zero) {
  ex_mlp_config c = ex_mlp_defaults();
  c.batch = 48;
  c.in = 64;
  c.hidden = 96;
  c.layers = 2;
  c.opt = sl_optimizer_sgd(0.05, 0.9);
  c.opt.clip_norm = clip_norm;
  c.opt.zero_stage = zero;
  c.layout = layout;
  c.placement = placement;
  return ex_mlp_build(g, &c);
}

static sl_status build_gpt(sl_graph *g, ex_layout layout, const char *placement,
                           int zero) {
  ex_gpt_config c = ex_gpt_defaults();
  c.batch = 6;
  c.opt = sl_optimizer_adam(3e-3);
  c.opt.zero_stage = zero;
  c.layout = layout;
  c.placement = placement;
  return ex_gpt_build(g, &c);
}

/* Trains STEPS steps; the session's memory of device 0 when mem is set. */
static void train(build_fn build, ex_layout layout, const char *devices,
                  int zero, float *losses, sl_memory_stats *mem,
                  sl_graph **g_out) {
  char placement[256];
  INV_OK(ex_layout_placement(layout, devices, placement, sizeof placement));
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build(g, layout, placement, zero));
  inv_session_train(g, STEPS, losses, mem);
  if (g_out)
    *g_out = g;
  else
    sl_graph_destroy(g);
}

static void check_losses(const char *name, build_fn build) {
  static const struct {
    ex_layout layout;
    const char *devices;
  } cases[] = {{EX_LAYOUT_DP, "cpu:2"},
               {EX_LAYOUT_DP, "cpu:3"},
               {EX_LAYOUT_HYBRID, "cpu:4"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float base[STEPS], got[STEPS];
    train(build, cases[c].layout, cases[c].devices, 0, base, NULL, NULL);
    for (int zero = 1; zero <= 3; zero++) {
      train(build, cases[c].layout, cases[c].devices, zero, got, NULL, NULL);
      if (clip_norm > 0 ? inv_max_rel(got, base, STEPS) > INV_RTOL
                        : !inv_identical(got, base, STEPS))
        fail_msg("%s %s on %s: zero %d gives other losses than zero 0 "
                 "(max rel %.3g)",
                 name, ex_layout_name(cases[c].layout), cases[c].devices, zero,
                 inv_max_rel(got, base, STEPS));
    }
  }
}

static void test_mlp_losses(void **state) {
  (void)state;
  check_losses("mlp", build_mlp);
  clip_norm = 1.0;
  check_losses("mlp (clipped)", build_mlp);
  clip_norm = 0;
}

static void test_gpt_losses(void **state) {
  (void)state;
  check_losses("gpt", build_gpt);
}

/* The optimizer state's bytes over all devices: Adam keeps two tensors of
 * every weight's shape. */
static int64_t state_bytes(const sl_graph *g) {
  int64_t n = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind == SL__NODE_VARIABLE && nd->optimizer)
      n += sl_shape_numel(&sl__graph_value(g, nd->out[0])->meta.shape) * 4;
  }
  return n;
}

static void test_plan(void **state) {
  (void)state;
  float losses[STEPS];
  sl_memory_stats m0, m1;
  sl_graph *g0, *g1;
  train(build_gpt, EX_LAYOUT_DP, "cpu:4", 0, losses, &m0, &g0);
  train(build_gpt, EX_LAYOUT_DP, "cpu:4", 1, losses, &m1, &g1);
  int fw, ar0, ar1, rs1, ag1, trained = 0;
  inv_count_boxing(g0, SL_BOXING_ALL_REDUCE, &fw, &ar0);
  inv_count_boxing(g1, SL_BOXING_ALL_REDUCE, &fw, &ar1);
  inv_count_boxing(g1, SL_BOXING_REDUCE_SCATTER, &fw, &rs1);
  inv_count_boxing(g1, SL_BOXING_ALL_GATHER, &fw, &ag1);
  for (int32_t i = 0; i < sl__graph_node_count(g1); i++) {
    const sl__node *nd = sl__graph_node(g1, i);
    trained +=
        nd->kind == SL__NODE_VARIABLE && nd->update >= 0 && !nd->optimizer;
  }
  print_message("gpt dp on 4: %d weights; zero 0: %d all-reduces; zero 1: "
                "%d all-reduces, %d reduce-scatters, %d all-gathers\n",
                trained, ar0, ar1, rs1, ag1);
  assert_true(ar0 >= trained);
  assert_int_equal(rs1, trained);
  assert_int_equal(ag1, trained);
  assert_int_equal(ar1, ar0 - trained);
  /* A quarter of the state on each device; rounding aside (each register
   * takes whole 64-byte lines). */
  int64_t total = state_bytes(g1);
  print_message("optimizer state %lld bytes in all; on device 0: zero 0 "
                "%lld, zero 1 %lld; peak %lld -> %lld\n",
                (long long)total, (long long)m0.category[SL_MEMORY_OPTIMIZER],
                (long long)m1.category[SL_MEMORY_OPTIMIZER], (long long)m0.peak,
                (long long)m1.peak);
  assert_true(m0.category[SL_MEMORY_OPTIMIZER] >= total);
  assert_true(m1.category[SL_MEMORY_OPTIMIZER] >= total / 4);
  assert_true(m1.category[SL_MEMORY_OPTIMIZER] <= total / 4 + 2 * 64 * trained);
  assert_true(m1.peak < m0.peak);
  sl_graph_destroy(g0);
  sl_graph_destroy(g1);
}

/* The mlp (SGD with momentum) on 2 devices: stage 2 frees each full-size
 * gradient once reduce-scattered, stage 1 keeps them as zero 0 does. */
static void test_stage2_gradients(void **state) {
  (void)state;
  float losses[STEPS];
  sl_memory_stats m[3];
  for (int z = 0; z < 3; z++)
    train(build_mlp, EX_LAYOUT_DP, "cpu:2", z, losses, &m[z], NULL);
  print_message("mlp dp on 2: gradients at the peak %lld, %lld, %lld bytes; "
                "peak %lld, %lld, %lld (zero 0, 1, 2)\n",
                (long long)m[0].category[SL_MEMORY_GRADIENTS],
                (long long)m[1].category[SL_MEMORY_GRADIENTS],
                (long long)m[2].category[SL_MEMORY_GRADIENTS],
                (long long)m[0].peak, (long long)m[1].peak,
                (long long)m[2].peak);
  assert_true(m[2].category[SL_MEMORY_GRADIENTS] <
              m[1].category[SL_MEMORY_GRADIENTS]);
  assert_true(m[2].peak < m[1].peak);
  assert_true(m[1].peak < m[0].peak);
}

/* ZeRO-3 on gpt dp over 4: every weight is kept as its quarter (the
 * weights on a device are a quarter of the model's, rounding aside), is
 * gathered before its forward readers (and again before its backward
 * ones, where it has some: a bias's gradient does not read it), never
 * all-reduced, its gradient reduce-scattered; no update's new weight is
 * gathered (the update writes the shard kept); at most about two gathered
 * weights are live at once; the peak is below stage 2's. */
static void test_stage3(void **state) {
  (void)state;
  float losses[STEPS];
  sl_memory_stats m2, m3;
  sl_graph *g3;
  train(build_gpt, EX_LAYOUT_DP, "cpu:4", 2, losses, &m2, NULL);
  train(build_gpt, EX_LAYOUT_DP, "cpu:4", 3, losses, &m3, &g3);
  int fw, ar, rs, ag, fwd_ag, trained = 0;
  int64_t weights = 0, largest = 0;
  inv_count_boxing(g3, SL_BOXING_ALL_REDUCE, &fw, &ar);
  inv_count_boxing(g3, SL_BOXING_REDUCE_SCATTER, &fw, &rs);
  inv_count_boxing(g3, SL_BOXING_ALL_GATHER, &fwd_ag, &ag);
  for (int32_t i = 0; i < sl__graph_node_count(g3); i++) {
    const sl__node *nd = sl__graph_node(g3, i);
    if (nd->kind == SL__NODE_VARIABLE && nd->update >= 0 && !nd->optimizer) {
      trained++;
      int64_t b =
          sl_shape_numel(&sl__graph_value(g3, nd->out[0])->meta.shape) * 4;
      weights += b;
      largest = b > largest ? b : largest;
    }
  }
  print_message("gpt dp on 4, zero 3: %d weights (%lld bytes); %d "
                "all-reduces, %d reduce-scatters, %d all-gathers (%d "
                "forward); device 0 holds %lld bytes of weights, %lld of "
                "communication (the largest weight: %lld); peak %lld (zero "
                "2: %lld)\n",
                trained, (long long)weights, ar, rs, ag, fwd_ag,
                (long long)m3.category[SL_MEMORY_WEIGHTS],
                (long long)m3.category[SL_MEMORY_COMMUNICATION],
                (long long)largest, (long long)m3.peak, (long long)m2.peak);
  assert_int_equal(ar, 0);
  assert_int_equal(rs, trained);
  assert_int_equal(fwd_ag, trained);
  assert_true(ag > trained && ag <= 2 * trained);
  assert_true(m3.category[SL_MEMORY_WEIGHTS] >= weights / 4);
  assert_true(m3.category[SL_MEMORY_WEIGHTS] <= weights / 4 + 64 * trained);
  /* Two gathered weights at a time (and smaller buffers), not all. */
  assert_true(m3.category[SL_MEMORY_COMMUNICATION] <= 3 * largest);
  assert_true(m3.peak < m2.peak);
  sl_graph_destroy(g3);
}

/* ZeRO-3 under a pipeline schedule (gpt dp on 4 devices in 2 stages, 2
 * micro-batches, each schedule): the zero-0 losses bit for bit, and the
 * gathers ordered into the schedule keep the peak below zero 0's. */
static void test_stage3_pipelined(void **state) {
  (void)state;
  static char placement[256], stages[EX_MAX_STAGES][512];
  INV_OK(
      ex_layout_placement(EX_LAYOUT_DP, "cpu:4", placement, sizeof placement));
  INV_OK(ex_stage_placements(EX_LAYOUT_DP, "cpu:4", 2, stages));
  const char *schedules[] = {"1f1b", "gpipe", "zero-bubble"};
  for (size_t k = 0; k < SL_ARRAY_LEN(schedules); k++) {
    float losses[2][STEPS];
    sl_memory_stats m[2];
    for (int z = 0; z < 2; z++) {
      ex_gpt_config c = ex_gpt_defaults();
      c.batch = 8;
      c.opt = sl_optimizer_adam(3e-3);
      c.opt.zero_stage = 3 * z;
      c.layout = EX_LAYOUT_DP;
      c.placement = placement;
      c.pp = 2;
      c.micro = 2;
      c.schedule = schedules[k];
      for (int s = 0; s < 2; s++)
        c.stage_placement[s] = stages[s];
      sl_graph *g;
      INV_OK(sl_graph_create(&g));
      INV_OK(ex_gpt_build(g, &c));
      inv_session_train(g, STEPS, losses[z], &m[z]);
      sl_graph_destroy(g);
    }
    print_message("gpt dp on 4, 2 stages, %s: peak %lld with zero 0, %lld "
                  "with zero 3\n",
                  schedules[k], (long long)m[0].peak, (long long)m[1].peak);
    assert_true(inv_identical(losses[1], losses[0], STEPS));
    assert_true(m[1].peak < m[0].peak);
  }
}

/* A two-layer model, dp on cpu:0-1 with Adam: opt_zero for the optimizer,
 * zero[0] and zero[1] for w1 and w2 (-1: the optimizer's). */
static sl_graph *build_pair(int opt_zero, const int *zero) {
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(16, 8), ys = SL_SHAPE(16, 4), s1 = SL_SHAPE(8, 8),
           s2 = SL_SHAPE(8, 4);
  sl_tensor x =
      sl_data_random_normal(g, &xs, SL_DTYPE_F32, 0, 1, 5, "cpu:0-1", "S(0)");
  sl_tensor y =
      sl_data_random_normal(g, &ys, SL_DTYPE_F32, 0, 1, 6, "cpu:0-1", "S(0)");
  sl_tensor w[2] = {sl_variable(g, "w1", &s1, SL_DTYPE_F32,
                                sl_init_normal(0, 0.5, 1), "cpu:0-1", NULL),
                    sl_variable(g, "w2", &s2, SL_DTYPE_F32,
                                sl_init_normal(0, 0.5, 2), "cpu:0-1", NULL)};
  for (int i = 0; i < 2; i++)
    if (zero[i] >= 0) sl_variable_set_zero_stage(w[i], zero[i]);
  sl_tensor h = sl_tanh(sl_matmul(x, w[0], false, false));
  sl_tensor loss = sl_mse_loss(sl_matmul(h, w[1], false, false), y);
  sl_optimizer opt = sl_optimizer_adam(1e-2);
  opt.zero_stage = opt_zero;
  INV_OK(sl_minimize(loss, &opt));
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail_msg("%s", sl_graph_error(g));
  return g;
}

/* The nd-SBP of variable `name` of a compiled graph. */
static void var_sbp(const sl_graph *g, const char *name, char *buf, size_t n) {
  const sl__node *v = sl__graph_node(g, sl__graph_find(g, name));
  sl_nd_sbp_print(&sl__graph_value(g, v->out[0])->sbp, buf, n);
}

/* sl_variable_set_zero_stage: each weight takes its own stage, over or in
 * place of the optimizer's, with the zero-0 losses bit for bit. */
static void test_per_variable_stage(void **state) {
  (void)state;
  static const struct {
    int opt_zero, zero[2];
    const char *w1, *w1_m, *w2_m;
  } cases[] = {{0, {-1, -1}, "B", "B", "B"},
               {0, {3, 1}, "S(0)", "S(0)", "S(0)"},
               {2, {-1, 0}, "B", "S(0)", "B"},
               {3, {-1, 0}, "S(0)", "S(0)", "B"}};
  float base[STEPS], got[STEPS];
  for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
    sl_graph *g = build_pair(cases[c].opt_zero, cases[c].zero);
    inv_session_train(g, STEPS, c ? got : base, NULL);
    char w1[32], w1m[32], w2m[32];
    var_sbp(g, "w1", w1, sizeof w1);
    var_sbp(g, "w1.m", w1m, sizeof w1m);
    var_sbp(g, "w2.m", w2m, sizeof w2m);
    print_message("optimizer zero %d, w1 %d, w2 %d: w1 %s, w1.m %s, w2.m %s\n",
                  cases[c].opt_zero, cases[c].zero[0], cases[c].zero[1], w1,
                  w1m, w2m);
    assert_string_equal(w1, cases[c].w1);
    assert_string_equal(w1m, cases[c].w1_m);
    assert_string_equal(w2m, cases[c].w2_m);
    if (c) assert_true(inv_identical(got, base, STEPS));
    sl_graph_destroy(g);
  }
  /* Refused: a stage out of range, a tensor that is no variable, after
   * sl_minimize. */
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  sl_shape s = SL_SHAPE(2);
  sl_tensor w =
      sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  sl_variable_set_zero_stage(w, 4);
  if (!strstr(sl_graph_error(g), "want a stage from 0 to 3 (got 4)"))
    fail_msg("%s", sl_graph_error(g));
  sl_graph_destroy(g);
  g = build_pair(0, (int[]){-1, -1});
  sl_variable_set_zero_stage((sl_tensor){g, 0}, 1);
  if (sl_graph_status(g) == SL_OK) fail_msg("a non-variable was accepted");
  sl_graph_destroy(g);
}

static void test_bad_stage(void **state) {
  (void)state;
  for (int zero = -1; zero <= 4; zero += 5) {
    sl_graph *g;
    INV_OK(sl_graph_create(&g));
    assert_int_equal(build_mlp(g, EX_LAYOUT_DP, "cpu:0-1", zero), SL_EINVAL);
    char want[32];
    snprintf(want, sizeof want, "zero stage %d", zero);
    if (!strstr(sl_graph_error(g), want))
      fail_msg("zero_stage %d: %s", zero, sl_graph_error(g));
    sl_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_losses),
      cmocka_unit_test(test_gpt_losses),
      cmocka_unit_test(test_plan),
      cmocka_unit_test(test_stage2_gradients),
      cmocka_unit_test(test_stage3),
      cmocka_unit_test(test_stage3_pipelined),
      cmocka_unit_test(test_per_variable_stage),
      cmocka_unit_test(test_bad_stage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
