/* examples/mlp: 10 training steps under single, dp and tp on 1-4 devices
 * and hybrid on 2 and 4 give the single-device losses (bit for bit where
 * no float sum is reordered, else within 1e-4 relative); tensor parallelism
 * needs one forward all-reduce per column/row pair; .npy data; Adam. Sizes
 * are small and uneven (batch 10, hidden 18, 5 classes) so splits on 3 and
 * 4 devices are uneven. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/npy.h"
#include "graph_int.h"
#include "inv.h"
#include "mlp/model.h"

static ex_mlp_config small(void) {
  ex_mlp_config c = ex_mlp_defaults();
  c.batch = 10;
  c.in = 12;
  c.hidden = 18;
  c.classes = 5;
  c.layers = 4;
  c.seed = 7;
  c.opt = sl_optimizer_sgd(0.1, 0.9);
  return c;
}

static sl_status build_mlp(sl_graph *g, ex_layout layout, const char *placement,
                           const void *ctx) {
  ex_mlp_config c = *(const ex_mlp_config *)ctx;
  c.layout = layout;
  c.placement = placement;
  return ex_mlp_build(g, &c);
}

static void test_invariance_sgd(void **state) {
  ex_mlp_config c = small();
  inv_check_matrix("mlp (sgd, momentum 0.9)", build_mlp, &c);
}

static void test_invariance_adam(void **state) {
  ex_mlp_config c = small();
  c.layers = 3; /* odd: the head is row-split under tp */
  c.opt = sl_optimizer_adam(0.01);
  inv_check_matrix("mlp (adam, 3 layers)", build_mlp, &c);
}

/* Megatron: the forward pass of L hidden layers plus head has one
 * all-reduce per row-split matmul, floor((L + 1) / 2), and nothing else;
 * data parallelism moves nothing forward and all-reduces each of the
 * 2 (L + 1) gradients once. */
static void test_collectives(void **state) {
  for (int layers = 3; layers <= 4; layers++) {
    ex_mlp_config c = small();
    c.layers = layers;
    const struct {
      ex_layout l;
      int devices, fwd, all_reduce_total;
    } want[] = {
        {EX_LAYOUT_TP, 3, (layers + 1) / 2, -1},
        {EX_LAYOUT_TP, 4, (layers + 1) / 2, -1},
        {EX_LAYOUT_DP, 3, 0, 2 * (layers + 1)},
        {EX_LAYOUT_SINGLE, 3, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
      char dev[16], placement[64];
      snprintf(dev, sizeof dev, "cpu:%d", want[i].devices);
      INV_OK(ex_layout_placement(want[i].l, dev, placement, sizeof placement));
      sl_graph *g;
      INV_OK(sl_graph_create(&g));
      c.layout = want[i].l;
      c.placement = placement;
      INV_OK(ex_mlp_build(g, &c));
      INV_OK(sl__graph_compile(g));
      int fwd, all, fwd_ar, all_ar;
      inv_count_boxing(g, -1, &fwd, &all);
      inv_count_boxing(g, SL_BOXING_ALL_REDUCE, &fwd_ar, &all_ar);
      printf("mlp %d layers, %s on %d: %d forward collectives (%d "
             "all-reduce), %d in all (%d all-reduce)\n",
             layers, ex_layout_name(want[i].l), want[i].devices, fwd, fwd_ar,
             all, all_ar);
      if (fwd != want[i].fwd || fwd_ar != want[i].fwd) {
        static char buf[1 << 17];
        sl_graph_print(g, buf, sizeof buf);
        fputs(buf, stdout);
        fail_msg("%s: %d forward collectives (%d all-reduces), want %d "
                 "all-reduces (the graph is listed above)",
                 ex_layout_name(want[i].l), fwd, fwd_ar, want[i].fwd);
      }
      if (want[i].all_reduce_total >= 0) {
        assert_int_equal(all, want[i].all_reduce_total);
        assert_int_equal(all_ar, want[i].all_reduce_total);
      }
      sl_graph_destroy(g);
    }
  }
}

/* The same data from .npy files (each device reads its rows) under every
 * layout gives the same losses; the files' rows wrap around. */
static void test_npy_data(void **state) {
  char dir[] = "/tmp/sluice_mlp_npyXXXXXX";
  assert_non_null(mkdtemp(dir));
  char xp[128], yp[128];
  snprintf(xp, sizeof xp, "%s/x.npy", dir);
  snprintf(yp, sizeof yp, "%s/y.npy", dir);
  enum { N = 23, IN = 7, CLASSES = 3 };
  float x[N * IN];
  int32_t y[N];
  sl_rng r = {99};
  for (int i = 0; i < N; i++) {
    y[i] = (int32_t)sl__rng_below(&r, CLASSES);
    for (int j = 0; j < IN; j++)
      x[i * IN + j] = (float)((double)(sl__rng_next(&r) >> 11) * 0x1.0p-53) -
                      0.5f + (j % CLASSES == y[i] ? 1.0f : 0.0f);
  }
  sl_shape xs = SL_SHAPE(N, IN), ys = SL_SHAPE(N);
  INV_OK(sl__npy_write(xp, SL_DTYPE_F32, &xs, x));
  INV_OK(sl__npy_write(yp, SL_DTYPE_I32, &ys, y));
  ex_mlp_config c = small();
  c.data = EX_MLP_DATA_NPY;
  c.npy_x = xp;
  c.npy_labels = yp;
  c.in = 999; /* ignored: the file says 7 */
  c.classes = CLASSES;
  c.batch = 9;
  inv_check_matrix("mlp (.npy data)", build_mlp, &c);
  unlink(xp);
  unlink(yp);
  rmdir(dir);
}

/* The matrix on cuda devices (inv.h). */
static void test_cuda_fake(void **state) {
  ex_mlp_config c = small();
  inv_check_cuda_fake("mlp", build_mlp, &c);
}

static void test_cuda_gpu(void **state) {
  ex_mlp_config c = small();
  inv_check_cuda_gpu("mlp", build_mlp, &c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_invariance_sgd),
      cmocka_unit_test(test_invariance_adam),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_cuda_fake),
      cmocka_unit_test(test_cuda_gpu),
      cmocka_unit_test(test_npy_data),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
