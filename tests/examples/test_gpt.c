/* examples/gpt: 10 training steps under single, dp and tp on 1-4 devices
 * and hybrid on 2 and 4 give the single-device losses (bit for bit where
 * no float sum is reordered, else within 1e-4 relative), with a separate
 * and a tied head; tensor parallelism needs one forward all-reduce per
 * attention and per MLP, and its vocabulary-split head moves only per-token
 * values. Sizes are small and uneven: batch 3 (an empty
 * shard on 4 devices), 4 heads (2,1,1 on 3 devices), fc1 width 64. */
#include <stdlib.h>
#include <string.h>

#include <sluice/boxing.h>

#include "gpt/model.h"
#include "graph_int.h"
#include "inv.h"

static ex_gpt_config small(void) {
  ex_gpt_config c = ex_gpt_defaults();
  c.batch = 3;
  c.seq = 8;
  c.vocab = 20;
  c.hidden = 16;
  c.heads = 4;
  c.layers = 2;
  c.seed = 3;
  c.opt = sl_optimizer_adam(1e-2);
  return c;
}

static sl_status build_gpt(sl_graph *g, ex_layout layout, const char *placement,
                           const void *ctx) {
  ex_gpt_config c = *(const ex_gpt_config *)ctx;
  c.layout = layout;
  c.placement = placement;
  return ex_gpt_build(g, &c);
}

static void test_invariance(void **state) {
  ex_gpt_config c = small();
  inv_check_matrix("gpt (untied head, adam)", build_gpt, &c);
}

static void test_invariance_tied(void **state) {
  ex_gpt_config c = small();
  c.tie = true;
  c.layers = 1;
  c.opt = sl_optimizer_sgd(0.3, 0.9);
  inv_check_matrix("gpt (tied head, sgd)", build_gpt, &c);
}

/* bf16 matmul inputs (--bf16): the same bits on every layout's shards,
 * so the matrix holds as in f32. */
static void test_invariance_bf16(void **state) {
  ex_gpt_config c = small();
  c.dtype = SL_DTYPE_BF16;
  inv_check_matrix("gpt (bf16 matmuls, adam)", build_gpt, &c);
}

/* Under --dtype bf16 or f16 every matmul, forward and backward, the
 * attention's included, takes inputs of that dtype only; under f32 none
 * does. Training 10 steps on one device gives f32's losses within 0.5%
 * (bf16 keeps 8 bits of mantissa, f16 11; the products and sums are f32,
 * and f16 needs no loss scaling at these gradients' sizes). */
static void test_compute_dtype(void **state) {
  const sl_dtype dts[3] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};
  float losses[3][INV_STEPS];
  for (int d = 0; d < 3; d++) {
    ex_gpt_config c = small();
    c.dtype = dts[d];
    c.layout = EX_LAYOUT_SINGLE;
    c.placement = "cpu:0";
    sl_graph *g;
    INV_OK(sl_graph_create(&g));
    INV_OK(ex_gpt_build(g, &c));
    INV_OK(sl__graph_compile(g));
    int matmuls = 0, forward = 0, narrow = 0;
    int32_t nv = sl__graph_value_count(g);
    int *casts = calloc((size_t)nv, sizeof *casts);
    assert_non_null(casts);
    for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
      const sl__node *nd = sl__graph_node(g, i);
      /* Each value is cast to the compute dtype once, whatever reads it,
       * and nothing is cast to the dtype it has. */
      if (nd->kind == SL__NODE_OP && strcmp(nd->op->name, "cast") == 0) {
        sl_dtype from = sl__graph_value(g, nd->in[0])->meta.dtype,
                 to = sl__graph_value(g, nd->out[0])->meta.dtype;
        assert_int_not_equal(from, to);
        if (to == dts[d] && ++casts[nd->in[0]] > 1)
          fail_msg("%s: value %d cast to %s twice", sl_dtype_name(dts[d]),
                   nd->in[0], sl_dtype_name(to));
      }
      if (nd->kind != SL__NODE_OP || (strcmp(nd->op->name, "matmul") &&
                                      strcmp(nd->op->name, "batch_matmul")))
        continue;
      matmuls++;
      forward += !nd->backward;
      for (int k = 0; k < 2; k++)
        narrow += sl__graph_value(g, nd->in[k])->meta.dtype == dts[d] &&
                  dts[d] != SL_DTYPE_F32;
    }
    /* per block q, k, v, o, two in the attention, fc1, fc2; the head */
    assert_int_equal(forward, 8 * c.layers + 1);
    assert_int_equal(narrow, d ? 2 * matmuls : 0);
    free(casts);
    sl_graph_destroy(g);
    inv_train(build_gpt, &c, EX_LAYOUT_SINGLE, 1, EX_ENGINE_SESSION, INV_STEPS,
              losses[d], NULL);
    double rel = inv_max_rel(losses[d], losses[0], INV_STEPS);
    printf("  %s: %d matmuls (%d forward); losses %.5f .. %.5f, max rel to "
           "f32 %.2e\n",
           sl_dtype_name(dts[d]), matmuls, forward, (double)losses[d][0],
           (double)losses[d][INV_STEPS - 1], rel);
    assert_true(rel <= 5e-3);
  }
}

/* Gradients reduced in bf16 (sl_optimizer.reduce_dtype), gpt dp on 2:
 * every gradient's all-reduce moves bf16 (one per trained weight, none in
 * f32), and the losses stay within 0.5% of those reduced in f32. */
static void test_reduce_dtype(void **state) {
  float losses[2][INV_STEPS];
  for (int bf = 0; bf < 2; bf++) {
    ex_gpt_config c = small();
    c.opt.reduce_dtype = bf ? SL_DTYPE_BF16 : SL_DTYPE_F32;
    sl_graph *g;
    inv_train(build_gpt, &c, EX_LAYOUT_DP, 2, EX_ENGINE_SESSION, INV_STEPS,
              losses[bf], &g);
    int weights = 0, low = 0, full = 0;
    for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
      const sl__node *nd = sl__graph_node(g, i);
      weights +=
          nd->kind == SL__NODE_VARIABLE && nd->update >= 0 && !nd->optimizer;
      if (nd->kind != SL__NODE_BOXING ||
          sl_boxing_route_step_count(nd->boxing) != 1 ||
          sl_boxing_step_op(nd->boxing, 0) != SL_BOXING_ALL_REDUCE)
        continue;
      sl_dtype dt = sl__graph_value(g, nd->out[0])->meta.dtype;
      low += dt == SL_DTYPE_BF16;
      full += dt == SL_DTYPE_F32;
    }
    double rel = inv_max_rel(losses[bf], losses[0], INV_STEPS);
    printf("  reduce in %s: %d weights, all-reduces in bf16 %d, in f32 %d; "
           "max rel to f32 %.2e\n",
           bf ? "bf16" : "f32", weights, low, full, rel);
    assert_int_equal(low, bf ? weights : 0);
    if (bf) assert_int_equal(full, 0);
    assert_true(rel <= 5e-3);
    sl_graph_destroy(g);
  }
}

/* Builds c laid out by l on cpu:devices and compiles it into *out. */
static void compile_gpt(const ex_gpt_config *c, ex_layout l, int devices,
                        sl_graph **out) {
  ex_gpt_config k = *c;
  char dev[16], placement[64];
  snprintf(dev, sizeof dev, "cpu:%d", devices);
  INV_OK(ex_layout_placement(l, dev, placement, sizeof placement));
  k.layout = l;
  k.placement = placement;
  INV_OK(sl_graph_create(out));
  INV_OK(ex_gpt_build(*out, &k));
  INV_OK(sl__graph_compile(*out));
}

/* Megatron: per block one all-reduce closes the attention and one the MLP,
 * and the loss over the vocabulary-split head reduces per-token values
 * only: nothing else of more than one element per token moves forward.
 * Data parallelism moves nothing forward. */
static void test_collectives(void **state) {
  const struct {
    ex_layout l;
    int devices, blocks; /* the all-reduces closing blocks */
  } want[] = {
      {EX_LAYOUT_TP, 3, 4}, {EX_LAYOUT_TP, 4, 4},     {EX_LAYOUT_HYBRID, 4, 4},
      {EX_LAYOUT_DP, 3, 0}, {EX_LAYOUT_SINGLE, 2, 0},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    ex_gpt_config c = small();
    c.megatron = true;
    sl_graph *g;
    compile_gpt(&c, want[i].l, want[i].devices, &g);
    int64_t tokens = c.batch * c.seq;
    int fwd, all, big, all_big, big_ar, all_big_ar;
    inv_count_boxing(g, -1, &fwd, &all);
    inv_count_boxing_min(g, -1, tokens + 1, &big, &all_big);
    inv_count_boxing_min(g, SL_BOXING_ALL_REDUCE, tokens + 1, &big_ar,
                         &all_big_ar);
    printf("gpt %d blocks, %s on %d: %d forward collectives, %d of them "
           "over more than one element per token (%d all-reduces)\n",
           c.layers, ex_layout_name(want[i].l), want[i].devices, fwd, big,
           big_ar);
    if (big != want[i].blocks || big_ar != want[i].blocks ||
        (want[i].blocks == 0 && fwd != 0)) {
      int len = sl_graph_print(g, NULL, 0);
      char *buf = malloc((size_t)len + 1);
      assert_non_null(buf);
      sl_graph_print(g, buf, (size_t)len + 1);
      fputs(buf, stdout);
      free(buf);
      fail_msg("%s: %d forward collectives, %d over more than a value per "
               "token (%d all-reduces), want %d all-reduces (the graph is "
               "listed above)",
               ex_layout_name(want[i].l), fwd, big, big_ar, want[i].blocks);
    }
    sl_graph_destroy(g);
  }
}

/* Whether value v comes out of a boxing that moves data. */
static bool boxed(const sl_graph *g, int32_t v) {
  const sl__node *p = sl__graph_node(g, sl__graph_value(g, v)->producer);
  if (p->kind != SL__NODE_BOXING) return false;
  const int64_t *sent = sl_boxing_route_bytes_sent(p->boxing);
  for (int r = 0; r < sl_boxing_route_rank_count(p->boxing); r++)
    if (sent[r] > 0) return true;
  return false;
}

/* Without --megatron the compiler picks how tensor parallelism's split
 * weights are used: at the benchmarks' sizes (the defaults, gpt-256) and
 * the tests' it splits the batch and gathers each weight's shard before
 * use, moving less in the forward pass than Megatron's plan, whose
 * activations cross devices at every block. */
static void test_compiler_choice(void **state) {
  ex_gpt_config wide = ex_gpt_defaults();
  wide.layers = 4;
  wide.hidden = 256;
  wide.seq = 128;
  const ex_gpt_config cfgs[] = {ex_gpt_defaults(), wide, small()};
  for (int i = 0; i < 3; i++)
    for (int l = 0; l < 2; l++) {
      ex_layout lay = l ? EX_LAYOUT_HYBRID : EX_LAYOUT_TP;
      int devices = l ? 4 : 2;
      int64_t fw[2], all[2];
      for (int m = 0; m < 2; m++) {
        ex_gpt_config c = cfgs[i];
        c.megatron = m;
        sl_graph *g;
        compile_gpt(&c, lay, devices, &g);
        inv_bytes_sent(g, &fw[m], &all[m]);
        sl_graph_destroy(g);
      }
      printf("gpt hidden %lld, %d blocks, %s on %d: bytes sent forward / in "
             "all %lld / %lld, with --megatron %lld / %lld\n",
             (long long)cfgs[i].hidden, cfgs[i].layers, ex_layout_name(lay),
             devices, (long long)fw[0], (long long)all[0], (long long)fw[1],
             (long long)all[1]);
      assert_true(fw[0] > 0);
      assert_true(fw[0] < fw[1]);
    }
}

/* Tensor parallelism's backward: the attention projection's weight
 * gradient reads its heads' activations as they are split and the output
 * gradient that the input gradient all-reduces anyway, so it comes out
 * split like the weight: no activation is gathered for it and no partial
 * gradient reduce-scattered (graph/compile.c, refinement); it trains as on
 * one device. */
static void test_tp_backward(void **state) {
  ex_gpt_config def = ex_gpt_defaults(); /* the sizes where it mattered */
  def.megatron = true;
  float base[INV_STEPS];
  inv_train(build_gpt, &def, EX_LAYOUT_SINGLE, 1, EX_ENGINE_SESSION, INV_STEPS,
            base, NULL);
  for (int devices = 2; devices <= 4; devices++) {
    sl_graph *g;
    compile_gpt(&def, EX_LAYOUT_TP, devices, &g);
    for (int l = 0; l < def.layers; l++) {
      char name[32];
      snprintf(name, sizeof name, "h%d.attn.wo", l);
      const sl__node *w = sl__graph_find_kind(g, name, SL__NODE_VARIABLE);
      assert_non_null(w);
      const sl__node *up =
          sl__graph_node(g, sl__graph_value(g, w->update)->producer);
      int32_t grad = up->in[1];
      const sl__node *mm =
          sl__graph_node(g, sl__graph_value(g, grad)->producer);
      bool moved = boxed(g, grad) || mm->kind != SL__NODE_OP ||
                   boxed(g, mm->in[0]) + boxed(g, mm->in[1]) != 1;
      printf("gpt tp on %d: %s's gradient from %s(%s%s, %s%s)\n", devices, name,
             mm->name, boxed(g, mm->in[0]) ? "boxed " : "",
             sl__graph_node(g, sl__graph_value(g, mm->in[0])->producer)->name,
             boxed(g, mm->in[1]) ? "boxed " : "",
             sl__graph_node(g, sl__graph_value(g, mm->in[1])->producer)->name);
      if (moved)
        fail_msg("tp on %d: %s's gradient is boxed, or its product reads "
                 "other than one boxed input (the all-reduced output "
                 "gradient)",
                 devices, name);
    }
    sl_graph_destroy(g);
    float got[INV_STEPS];
    inv_train(build_gpt, &def, EX_LAYOUT_TP, devices, EX_ENGINE_SESSION,
              INV_STEPS, got, NULL);
    double rel = inv_max_rel(got, base, INV_STEPS);
    printf("gpt tp on %d: losses within %.1e of one device's\n", devices, rel);
    assert_true(rel <= INV_RTOL);
  }
}

/* The matrix on cuda devices (inv.h). */
static void test_cuda_fake(void **state) {
  ex_gpt_config c = small();
  inv_check_cuda_fake("gpt", build_gpt, &c);
}

static void test_cuda_gpu(void **state) {
  ex_gpt_config c = small();
  inv_check_cuda_gpu("gpt", build_gpt, &c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_invariance),
      cmocka_unit_test(test_invariance_tied),
      cmocka_unit_test(test_invariance_bf16),
      cmocka_unit_test(test_compute_dtype),
      cmocka_unit_test(test_reduce_dtype),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_compiler_choice),
      cmocka_unit_test(test_tp_backward),
      cmocka_unit_test(test_cuda_fake),
      cmocka_unit_test(test_cuda_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
