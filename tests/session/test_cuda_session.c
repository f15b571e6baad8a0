/* Sessions on CUDA placements (docs/cuda.md, "Sessions on CUDA
 * placements"), on the fake device of fake_cuda.h — asynchronous streams,
 * device memory the host cannot touch, the ops' CPU kernels — so the whole
 * path runs without a GPU: register memory on the device, kernels queued on
 * streams with messages sent once the stream got there, copies between a
 * device and its host side for feeds, fetches and boxing, placements mixing
 * cpu and cuda, all-reduces between the GPUs through the device
 * collectives (the fake's NCCL). Each model trains step by step against
 * the interpreter.
 * The last test runs on a real GPU and skips without one. */
#include <sluice/build.h>

#include "fake_cuda.h"
#include "session_helpers.h"
#include "session_int.h"

static const st_mlp_layout layouts[] = {
    {"single", "cuda:0", "B", "B", "B"},
    {"dp", "cuda:0-1", "S(0)", "B", "B"},
    {"tp", "cuda:0-2", "B", "S(1)", "S(0)"},
    {"hybrid", "cuda:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))"},
};

static sl_graph *mlp(const st_mlp_layout *l, int batch, int hidden) {
  return st_mlp(l, batch, hidden, sl_optimizer_adam(0.01));
}

static int count_tasks(const sl_session *s, sl__task_kind kind) {
  int n = 0;
  for (int32_t i = 0; i < s->pp->n_tasks; i++)
    n += s->pp->tasks[i].kind == kind;
  return n;
}

static void test_layouts(void **state) {
  uint64_t seed = st_seed(61, "cuda layouts");
  fake_cuda_install();
  for (size_t i = 0; i < SL_ARRAY_LEN(layouts); i++) {
    printf("  %s on %s\n", layouts[i].name, layouts[i].placement);
    sl_graph *g = mlp(&layouts[i], 16, 20);
    st_run_vs_interp(g, 6, 1e-5, seed, 7, NULL);
    sl_graph_destroy(g);
    fake_cuda_stats fs;
    fake_cuda_get_stats(&fs);
    /* The work ran on the device: kernels, feeds copied up, fetches down;
     * and the session gave every byte of device memory back. */
    assert_true(fs.kernels > 0);
    assert_true(fs.h2d > 0);
    assert_true(fs.d2h > 0);
    assert_int_equal(fs.live_allocs, 0);
    /* dp's gradient all-reduce ran between the devices, not the hosts */
    if (i >= 1) assert_true(fs.all_reduces > 0);
  }
  fake_cuda_uninstall();
}

/* cpu -> cuda -> cpu in one graph: the boxing between device types is
 * lowered to copy tasks around host-side exchanges. */
static void test_mixed_placements(void **state) {
  uint64_t seed = st_seed(62, "mixed");
  fake_cuda_install();
  sl_graph *g = st_graph("cpu:0");
  sl_shape xs = SL_SHAPE(10, 6), ws = SL_SHAPE(6, 5);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  sl_tensor w = sl_input(g, "w", &ws, SL_DTYPE_F32, NULL, NULL);
  sl_tensor xg = sl_to_global(x, "cuda:0-1", "S(0)");
  sl_tensor wg = sl_to_global(w, "cuda:0-1", "B");
  sl_tensor h = sl_tanh(sl_matmul(xg, wg, false, false));
  sl_tensor back = sl_to_global(h, "cpu:0-2", "S(1)");
  sl_fetch(sl_relu(back), "r");
  sl_fetch(h, "h");
  st_check_graph(g);
  sl_session *s = NULL;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  /* x, w: fed on cpu:0, moved with exchanges on the host sides and copied
   * up; h: copied down for the exchange to cpu:0-2 and for its fetch. */
  assert_true(count_tasks(s, SL__TASK_COPY) >= 4);
  sl_session_destroy(s);
  st_run_vs_interp(g, 3, 1e-6, seed, 0, NULL);
  sl_graph_destroy(g);
  fake_cuda_uninstall();
}

/* A kernel failing on the device (labels out of range): the step fails
 * with the device's error and nothing hangs. */
static void test_device_failure(void **state) {
  fake_cuda_install();
  sl_graph *g = mlp(&layouts[1], 8, 6);
  sl_session *s = NULL;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  float x[8 * 12] = {0};
  int32_t y[8] = {0, 1, 2, 3, 99, 5, 6, 0};
  assert_int_equal(sl_session_feed(s, "x", x, sizeof x), SL_OK);
  assert_int_equal(sl_session_feed(s, "y", y, sizeof y), SL_OK);
  sl_status st = sl_session_run(s, 1);
  if (st == SL_OK) {
    float loss;
    st = sl_session_fetch(s, "loss", &loss, sizeof loss);
  }
  print_message("failure: %s\n", sl_last_error());
  assert_int_not_equal(st, SL_OK);
  assert_non_null(strstr(sl_last_error(), "fake cuda"));
  sl_session_destroy(s);
  sl_graph_destroy(g);
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.live_allocs, 0);
  fake_cuda_uninstall();
}

/* The real thing: the same models on the GPUs this machine has. */
static void test_real_gpu(void **state) {
  int n = sl_device_count(SL_DEVICE_CUDA);
  if (n < 1) {
    print_message("no CUDA device here (%s build): skipped\n",
                  sl_build_has_cuda() ? "CUDA" : "CPU-only");
    skip();
  }
  uint64_t seed = st_seed(63, "gpu");
  for (size_t i = 0; i < SL_ARRAY_LEN(layouts); i++) {
    st_mlp_layout l = layouts[i];
    if (i > 0 && n < 2) break;
    if (n < 4) l.placement = i == 0 ? "cuda:0" : "cuda:0-1";
    if (n < 4 && i == 3) l.placement = "cuda:0-1[1,2]";
    printf("  %s on %s\n", l.name, l.placement);
    sl_graph *g = mlp(&l, 16, 20);
    /* Reordered float sums and fused-multiply-free but differently
     * blocked matmuls: a small relative tolerance. */
    st_run_vs_interp(g, 6, 1e-4, seed, 7, NULL);
    sl_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts),
      cmocka_unit_test(test_mixed_placements),
      cmocka_unit_test(test_device_failure),
      cmocka_unit_test(test_real_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
