/* Sessions on CUDA placements (docs/cuda.md, "Sessions on CUDA
 * placements"), on the fake device of fake_cuda.h — asynchronous streams,
 * device memory the host cannot touch, the ops' CPU kernels — so the whole
 * path runs without a GPU: register memory on the device, kernels queued on
 * streams with messages sent once the stream got there, copies between a
 * device and its host side for feeds, fetches and boxing, placements mixing
 * cpu and cuda, all-reduces between the GPUs through the device
 * collectives (the fake's NCCL): all-reduces, and all-gathers and
 * reduce-scatters in NCCL's layout, and every other boxing step as grouped
 * sends and receives with packing on the devices, bit for bit the cpu run. Each
 * model trains step by step against the interpreter. The last test runs on a
 * real GPU and skips without one. */
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

/* ---- all-gathers and reduce-scatters between the GPUs -------------------
 * A boxing of all-gathers / reduce-scatters whose members' parts are
 * contiguous equal blocks (axis 0, an extent the group divides) is NCCL's
 * collective; any other is an exchange (comm/coll/dev_xchg.c). Both must
 * compute bit for bit what the same graph does on cpu placements (the
 * fake NCCL reduces in rank order, as comm/coll/coll.c does). */

typedef struct split_case {
  const char *name;
  const char *mesh;    /* "0-3", "0-3[2,2]": cuda:<mesh> against cpu:<mesh> */
  int rows;            /* axis 0 of x and of the matmul's output */
  const char *xs, *xb; /* x's nd-SBP, then the layout it is boxed to */
  const char *ps;      /* the partial matmul's output boxed to this */
  /* Device collectives the fake must count (at least; 0: none at all). */
  int gathers, scatters;
} split_case;

static const split_case split_cases[] = {
    /* S(0) -> B: an all-gather; P -> S(0): a reduce-scatter. */
    {"1d", "0-3", 8, "S(0)", "B", "S(0)", 1, 1},
    /* Two steps each, chained through the first step's register:
     * (S(0),S(0)) -> (B,B) gathers on both mesh axes, (P,P) -> (S(0),S(0))
     * scatters on both. */
    {"2d", "0-3[2,2]", 8, "(S(0),S(0))", "(B,B)", "(S(0),S(0))", 2, 2},
    /* A mesh axis gathered, the other all-reduced, in one boxing. */
    {"mixed", "0-3[2,2]", 8, "(S(0),B)", "(B,B)", "(S(0),B)", 1, 1},
    /* 6 rows on 4 ranks: parts of 2 and 1 rows, no NCCL layout: grouped
     * sends and receives (test_exchanges). */
    {"uneven", "0-3", 6, "S(0)", "B", "S(0)", 0, 0},
    /* Split on axis 1: parts are strided, packed on the devices. */
    {"axis1", "0-1", 4, "S(1)", "B", "S(1)", 0, 0},
};

/* x [rows, 8] boxed from c->xs to c->xb, then tanh; a [rows, 6] S(1)-ish
 * times w [6, 4] S(0)-ish: a partial sum, boxed to c->ps. On placement
 * "<dev>:<mesh>"; the partial layout is P on every mesh axis. */
static sl_graph *split_graph(const split_case *c, const char *dev) {
  char pl[64];
  snprintf(pl, sizeof pl, "%s:%s", dev, c->mesh);
  bool two = strchr(c->mesh, '[') != NULL;
  sl_graph *g = st_graph(pl);
  sl_shape xs = SL_SHAPE(c->rows, 8), as = SL_SHAPE(c->rows, 6),
           ws = SL_SHAPE(6, 4);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, c->xs);
  sl_tensor a =
      sl_input(g, "a", &as, SL_DTYPE_F32, NULL, two ? "(S(1),S(1))" : "S(1)");
  sl_tensor w =
      sl_input(g, "w", &ws, SL_DTYPE_F32, NULL, two ? "(S(0),S(0))" : "S(0)");
  sl_tensor xb = sl_to_global(x, pl, c->xb);
  sl_fetch(sl_tanh(xb), "gathered");
  sl_tensor p = sl_matmul(a, w, false, false); /* partial on every axis */
  sl_tensor ps = sl_to_global(p, pl, c->ps);
  sl_fetch(sl_tanh(ps), "scattered");
  st_check_graph(g);
  return g;
}

/* One step of g with the feeds of seed; fetches names[0..n) into out[]
 * (malloc'ed). *boxing_copies (may be NULL): the plan's copy tasks of
 * boxings, between a GPU and its host side. */
static void run_once(sl_graph *g, uint64_t seed, int n,
                     const char *const *names, void **out, int *boxing_copies) {
  sl_session *s = NULL;
  if (sl_session_create(g, NULL, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  if (boxing_copies) *boxing_copies = 0;
  for (int32_t i = 0; boxing_copies && i < s->pp->n_tasks; i++)
    if (s->pp->tasks[i].kind == SL__TASK_COPY &&
        strstr(s->pp->tasks[i].name, "@p"))
      ++*boxing_copies;
  st_feeds f;
  st_feeds_make(g, seed, 0, &f);
  for (int k = 0; k < f.n; k++)
    if (sl_session_feed(s, f.name[k], f.data[k], f.bytes[k]) != SL_OK)
      fail_msg("feed %s: %s", f.name[k], sl_last_error());
  st_feeds_free(&f);
  if (sl_session_run(s, 1) != SL_OK) fail_msg("run: %s", sl_last_error());
  for (int i = 0; i < n; i++) {
    const sl__node *nd = NULL;
    for (int32_t j = 0; j < sl__graph_node_count(g) && !nd; j++)
      if (strcmp(sl__graph_node(g, j)->name, names[i]) == 0)
        nd = sl__graph_node(g, j);
    assert_non_null(nd);
    size_t bytes = st_value_bytes(sl__graph_value(g, nd->in[0]));
    out[i] = malloc(bytes + 8);
    if (sl_session_fetch(s, names[i], out[i], bytes) != SL_OK)
      fail_msg("fetch %s: %s", names[i], sl_last_error());
  }
  sl_session_destroy(s);
}

static void test_gather_scatter(void **state) {
  uint64_t seed = st_seed(64, "cuda all-gathers, reduce-scatters");
  fake_cuda_install();
  for (size_t i = 0; i < SL_ARRAY_LEN(split_cases); i++) {
    const split_case *c = &split_cases[i];
    printf("  %s on cuda:%s\n", c->name, c->mesh);
    sl_graph *gc = split_graph(c, "cpu"), *gg = split_graph(c, "cuda");
    fake_cuda_stats f0, f1;
    fake_cuda_get_stats(&f0);
    void *want[2], *got[2];
    static const char *const names[2] = {"gathered", "scattered"};
    run_once(gc, seed + i, 2, names, want, NULL);
    run_once(gg, seed + i, 2, names, got, NULL);
    fake_cuda_get_stats(&f1);
    /* Bit for bit the cpu run, and near the interpreter's. */
    st_compare(SL_DTYPE_F32, got[0], want[0], (int64_t)c->rows * 8, 0,
               "gathered: cuda against cpu");
    st_compare(SL_DTYPE_F32, got[1], want[1], (int64_t)c->rows * 4, 0,
               "scattered: cuda against cpu");
    st_run_vs_interp(gg, 2, 1e-5, seed + i, 0, NULL);
    for (int k = 0; k < 2; k++) {
      free(want[k]);
      free(got[k]);
    }
    /* Each device all-gather / reduce-scatter counted once per rank: one
     * step of 4 ranks, per boxing step. */
    uint64_t ag = f1.all_gathers - f0.all_gathers,
             rs = f1.reduce_scatters - f0.reduce_scatters;
    printf("    device all-gathers %llu, reduce-scatters %llu\n",
           (unsigned long long)ag, (unsigned long long)rs);
    if (c->gathers == 0) {
      assert_int_equal(ag, 0);
      assert_int_equal(rs, 0);
    } else {
      assert_int_equal(ag, (uint64_t)c->gathers * 4);
      assert_int_equal(rs, (uint64_t)c->scatters * 4);
    }
    sl_graph_destroy(gc);
    sl_graph_destroy(gg);
  }
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.live_allocs, 0);
  fake_cuda_uninstall();
}

/* ---- every other boxing step on the GPUs ---------------------------------
 * All-to-alls, uneven and strided gathers and scatters, send_recv between
 * placements (also of partial values), slice and zero: grouped sends and
 * receives with packing on the devices (comm/coll/dev_xchg.c), never the
 * host sides. Bit for bit the cpu run. */

typedef struct xchg_case {
  const char *name;
  const char *from_pl, *from; /* x's placement mesh ("0-3") and nd-SBP */
  const char *to_pl, *to;     /* boxed to this */
  int rows, cols;
  bool partial; /* x is the partial sum a @ w instead of an input */
} xchg_case;

static const xchg_case xchg_cases[] = {
    {"all-to-all", "0-3", "S(0)", "0-3", "S(1)", 6, 10, false},
    {"uneven gather", "0-3", "S(0)", "0-3", "B", 6, 5, false},
    {"axis-1 gather", "0-2", "S(1)", "0-2", "B", 4, 7, false},
    {"uneven scatter", "0-3", "P", "0-3", "S(0)", 7, 3, true},
    {"axis-1 scatter", "0-1", "P", "0-1", "S(1)", 4, 5, true},
    {"slice", "0-2", "B", "0-2", "S(1)", 5, 7, false},
    {"zero", "0-1", "S(0)", "0-1", "P", 5, 3, false},
    {"zero from B", "0-2", "B", "0-2", "P", 4, 3, false},
    {"send_recv", "0-1", "S(0)", "2-3", "S(1)", 5, 6, false},
    {"send_recv partial", "0-1", "P", "2-4", "B", 4, 3, true},
    {"copy", "0", "B", "1", "B", 3, 4, false},
    {"2d", "0-3[2,2]", "(S(0),S(1))", "0-3[2,2]", "(S(1),B)", 7, 6, false},
    {"2d partial", "0-3[2,2]", "(P,S(0))", "0-3[2,2]", "(S(1),B)", 6, 5, true},
};

/* x [rows, cols] on <dev>:<from_pl> as c->from (a partial one: a @ w, a
 * split on its inner axis), boxed to c->to on <dev>:<to_pl> and fetched. */
static sl_graph *xchg_graph(const xchg_case *c, const char *dev) {
  char from_pl[64], to_pl[64];
  snprintf(from_pl, sizeof from_pl, "%s:%s", dev, c->from_pl);
  snprintf(to_pl, sizeof to_pl, "%s:%s", dev, c->to_pl);
  sl_graph *g = st_graph(from_pl);
  sl_shape xs = SL_SHAPE(c->rows, c->cols);
  sl_tensor x;
  if (c->partial) {
    /* P on the mesh axes where c->from says P, the rest as c->from. */
    bool two = strchr(c->from_pl, '[') != NULL;
    sl_shape as = SL_SHAPE(c->rows, 8), ws = SL_SHAPE(8, c->cols);
    sl_tensor a =
        sl_input(g, "a", &as, SL_DTYPE_F32, NULL, two ? "(S(1),S(0))" : "S(1)");
    sl_tensor w =
        sl_input(g, "w", &ws, SL_DTYPE_F32, NULL, two ? "(S(0),B)" : "S(0)");
    x = sl_to_global(sl_matmul(a, w, false, false), from_pl, c->from);
  } else {
    x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, c->from);
  }
  sl_fetch(sl_to_global(x, to_pl, c->to), "y");
  st_check_graph(g);
  return g;
}

static void test_exchanges(void **state) {
  uint64_t seed = st_seed(65, "cuda exchanges");
  fake_cuda_install();
  for (size_t i = 0; i < SL_ARRAY_LEN(xchg_cases); i++) {
    const xchg_case *c = &xchg_cases[i];
    printf("  %s: cuda:%s %s -> cuda:%s %s\n", c->name, c->from_pl, c->from,
           c->to_pl, c->to);
    sl_graph *gc = xchg_graph(c, "cpu"), *gg = xchg_graph(c, "cuda");
    fake_cuda_stats f0, f1;
    fake_cuda_get_stats(&f0);
    static const char *const y[1] = {"y"};
    int copies_g = -1;
    void *want, *got;
    run_once(gc, seed + i, 1, y, &want, NULL);
    run_once(gg, seed + i, 1, y, &got, &copies_g);
    fake_cuda_get_stats(&f1);
    st_compare(SL_DTYPE_F32, got, want, (int64_t)c->rows * c->cols, 0,
               "cuda against cpu");
    free(want);
    free(got);
    st_run_vs_interp(gg, 2, 1e-5, seed + i, 0, NULL);
    /* On the devices: no boxing copy to or from a host side, and box
     * kernels or grouped sends and receives did the work. */
    uint64_t boxes = f1.boxes - f0.boxes, xchg = f1.exchanges - f0.exchanges;
    printf("    box ops %llu, exchange launches %llu\n",
           (unsigned long long)boxes, (unsigned long long)xchg);
    assert_int_equal(copies_g, 0);
    assert_true(boxes + xchg > 0);
    sl_graph_destroy(gc);
    sl_graph_destroy(gg);
  }
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
      cmocka_unit_test(test_gather_scatter),
      cmocka_unit_test(test_exchanges),
      cmocka_unit_test(test_real_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
