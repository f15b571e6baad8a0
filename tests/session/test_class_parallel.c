/* Class-parallel softmax and cross-entropy (graph/class_parallel.c): a
 * linear classifier whose weight is split over the classes trains as on one
 * device (the losses and weights within 1e-5, the sums being reordered)
 * through sl_cross_entropy, log_softmax and softmax, on 4 devices (uneven
 * class shards), on 3, and on a [2,2] mesh with the batch split too; what
 * crosses devices is per-row values only, never the [rows, classes]
 * logits or their gradient. The same holds for log_softmax written out
 * by hand, whose backward broadcasts partial per-row sums (SBP inference
 * reduces them before broadcasting, on the [2,2] mesh too, where the rows
 * stay split on the other axis). A label out of range still fails the
 * step. */
#include <sluice/boxing.h>
#include <sluice/graph.h>

#include "session_helpers.h"

#define ROWS 12
#define DIM 10
#define CLASSES 29
#define STEPS 4

typedef enum loss_kind {
  LOSS_CROSS_ENTROPY = 0, /* sl_cross_entropy */
  LOSS_LOG_SOFTMAX = 1,   /* -mean(sum(log_softmax * one_hot)) */
  LOSS_SOFTMAX = 2,       /* mean(softmax * r) */
  LOSS_BY_HAND = 3,       /* log_softmax written out, its sums made B */
} loss_kind;

static const char *const kind_names[] = {"cross_entropy", "log_softmax",
                                         "softmax", "by hand"};

typedef struct layout {
  const char *placement, *x_sbp, *w_sbp;
} layout;

static const layout single = {"cpu:0", "B", "B"};
static const layout splits[] = {
    {"cpu:0-3", "B", "S(1)"},
    {"cpu:0-2", "B", "S(1)"},
    {"cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))"},
};

static sl_graph *build(const layout *l, loss_kind kind) {
  sl_graph *g;
  ST_OK(sl_graph_create(&g));
  sl_shape xs = SL_SHAPE(ROWS, DIM), ls = SL_SHAPE(ROWS),
           ws = SL_SHAPE(DIM, CLASSES), rs = SL_SHAPE(ROWS, CLASSES);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, l->placement, l->x_sbp);
  sl_tensor labels =
      sl_input(g, "labels", &ls, SL_DTYPE_I32, l->placement, l->x_sbp);
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_normal(0, 0.5, 7), l->placement, l->w_sbp);
  sl_tensor logits = sl_name(sl_matmul(x, w, false, false), "logits");
  sl_tensor loss;
  switch (kind) {
  case LOSS_CROSS_ENTROPY: loss = sl_cross_entropy(logits, labels); break;
  case LOSS_LOG_SOFTMAX:
    loss = sl_mul_scalar(
        sl_reduce_mean(sl_mul(sl_log_softmax(logits, -1),
                              sl_one_hot(labels, CLASSES)),
                       0, NULL, false),
        -(double)CLASSES);
    break;
  case LOSS_BY_HAND: { /* the inference, not an expansion, keeps it split */
    int a = 1;
    sl_tensor m = sl_to_global(sl_reduce_max(logits, 1, &a, true), NULL, NULL);
    sl_tensor z = sl_sub(logits, m);
    sl_tensor sum = sl_reduce_sum(sl_exp(z), 1, &a, true);
    loss = sl_mul_scalar(sl_reduce_mean(sl_mul(sl_sub(z, sl_log(sum)),
                                               sl_one_hot(labels, CLASSES)),
                                        0, NULL, false),
                         -(double)CLASSES);
    break;
  }
  case LOSS_SOFTMAX: {
    sl_tensor r = sl_input(g, "r", &rs, SL_DTYPE_F32, l->placement, NULL);
    loss = sl_reduce_mean(sl_mul(sl_softmax(logits, 1), r), 0, NULL, false);
    break;
  }
  }
  ST_OK(sl_minimize(loss, &(sl_optimizer){.kind = SL_OPTIMIZER_SGD, .lr = 0.5}));
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail_msg("building: %s", sl_graph_error(g));
  return g;
}

/* Trains STEPS steps on fixed data; the losses and the final weight out. */
static sl_status train(sl_graph *g, loss_kind kind, int bad_label,
                       float *losses, float *w) {
  float x[ROWS * DIM], r[ROWS * CLASSES];
  int32_t labels[ROWS];
  for (int i = 0; i < ROWS * DIM; i++)
    x[i] = (float)((i * 37 % 23) - 11) / 8.0f;
  for (int i = 0; i < ROWS * CLASSES; i++)
    r[i] = (float)((i * 13 % 17) - 8) / 4.0f;
  for (int i = 0; i < ROWS; i++)
    labels[i] = (i * 11 + 3) % CLASSES;
  if (bad_label) labels[5] = bad_label;
  sl_session *s;
  ST_OK(sl_session_create(g, NULL, &s));
  ST_OK(sl_session_feed(s, "x", x, sizeof x));
  ST_OK(sl_session_feed(s, "labels", labels, sizeof labels));
  if (kind == LOSS_SOFTMAX) ST_OK(sl_session_feed(s, "r", r, sizeof r));
  sl_status st = SL_OK;
  for (int k = 0; k < STEPS && st == SL_OK; k++) {
    st = sl_session_run(s, 1);
    if (st == SL_OK)
      st = sl_session_fetch(s, "loss", &losses[k], sizeof losses[k]);
  }
  if (st == SL_OK)
    st = sl_session_read_variable(s, "w", w, sizeof(float) * DIM * CLASSES);
  if (st != SL_OK) fprintf(stderr, "  %s\n", sl_last_error());
  sl_session_destroy(s);
  return st;
}

static double max_rel(const float *a, const float *b, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), 1e-3);
    if (!(d <= m)) m = d;
  }
  return m;
}

/* The largest value any boxing node of g moves (elements), the weight's
 * gradient (all-reduced over the rows' mesh axis on [2,2]) aside, and how
 * many reduce a partial max (the rows' maxima). */
static int64_t largest_boxing(const sl_graph *g, int *max_reduced) {
  int64_t largest = 0;
  *max_reduced = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING) continue;
    const int64_t *sent = sl_boxing_route_bytes_sent(nd->boxing);
    bool moves = false;
    for (int r = 0; r < sl_boxing_route_rank_count(nd->boxing); r++)
      moves = moves || sent[r] > 0;
    if (!moves) continue;
    const sl_shape *s = &sl__graph_value(g, nd->in[0])->meta.shape;
    sl_shape ws = SL_SHAPE(DIM, CLASSES);
    if (sl_shape_equal(s, &ws)) continue;
    if (sl_shape_numel(s) > largest) largest = sl_shape_numel(s);
    for (int m = 0; m < nd->in_sbp[0].ndim; m++)
      if (nd->in_sbp[0].sbp[m].kind == SL_SBP_PARTIAL &&
          nd->in_sbp[0].sbp[m].reduce == SL_REDUCE_MAX)
        ++*max_reduced;
  }
  return largest;
}

static void test_trains_as_one_device(void **state) {
  (void)state;
  for (int kind = 0; kind < 4; kind++) {
    float base[STEPS], w0[DIM * CLASSES];
    sl_graph *g = build(&single, kind);
    ST_OK(train(g, kind, 0, base, w0));
    sl_graph_destroy(g);
    for (size_t l = 0; l < SL_ARRAY_LEN(splits); l++) {
      float got[STEPS], w[DIM * CLASSES];
      g = build(&splits[l], kind);
      ST_OK(train(g, kind, 0, got, w));
      int max_reduced;
      int64_t largest = largest_boxing(g, &max_reduced);
      double rl = max_rel(got, base, STEPS),
             rw = max_rel(w, w0, DIM * CLASSES);
      printf("  %-13s w %-9s on %-12s: losses %.6f .. %.6f (max rel %.1e), "
             "w max rel %.1e; largest boxing %lld elements\n",
             kind_names[kind], splits[l].w_sbp, splits[l].placement,
             (double)got[0], (double)got[STEPS - 1], rl, rw,
             (long long)largest);
      if (rl > 1e-5 || rw > 1e-5)
        fail_msg("%s on %s: losses or weights differ from one device's",
                 kind_names[kind], splits[l].placement);
      /* Per-row values only: at most one per row, never the logits; the
       * rows' maxima reduced, once a step where sluice expands the loss
       * (the cross-entropy's gradient reuses its forward's). */
      bool maxima = kind == LOSS_BY_HAND ? max_reduced >= 1 : max_reduced == 1;
      if (largest > ROWS || !maxima) {
        static char buf[1 << 17];
        sl_graph_print(g, buf, sizeof buf);
        fail_msg("%s on %s: a boxing of %lld elements (want at most %d, one "
                 "per row) and %d max reductions\n%s",
                 kind_names[kind], splits[l].placement, (long long)largest,
                 ROWS, max_reduced, buf);
      }
      sl_graph_destroy(g);
    }
  }
}

/* Every rank sees every label, so a bad one fails the step as on one
 * device, with its position. */
static void test_bad_label(void **state) {
  (void)state;
  float losses[STEPS], w[DIM * CLASSES];
  sl_graph *g = build(&splits[0], LOSS_CROSS_ENTROPY);
  assert_int_not_equal(train(g, LOSS_CROSS_ENTROPY, CLASSES + 3, losses, w),
                       SL_OK);
  if (!strstr(sl_last_error(), "label 32 at position [5] out of range [0, 29)"))
    fail_msg("unexpected error: %s", sl_last_error());
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trains_as_one_device),
      cmocka_unit_test(test_bad_label),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
