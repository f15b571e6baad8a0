/* The gradient of an embedding table split over its rows moves the rows
 * looked up, not the table (graph/grad_dense.c, g_embedding): a table of
 * 1001 rows split S(0) over 4 devices (uneven), looked up by 64 ids split
 * with the batch, trains as on one device, and the backward pass sends at
 * most 2x the looked-up rows' gradient bytes per device, where building
 * the dense gradient and reduce-scattering it would send 3/4 of the table;
 * the same on a [2,2] mesh with the table split on one axis. Lazy updates
 * (sl_optimizer.lazy_embeddings) change only the rows a step looks up. */
#include <sluice/boxing.h>
#include <sluice/graph.h>

#include "session_helpers.h"

#define VOCAB 1001
#define DIM 16
#define IDS 64
#define STEPS 4

typedef struct layout {
  const char *placement, *ids_sbp, *table_sbp;
} layout;

static const layout single = {"cpu:0", "B", "B"};
static const layout splits[] = {
    {"cpu:0-3", "S(0)", "S(0)"},
    {"cpu:0-3", "B", "S(0)"},
    {"cpu:0-3[2,2]", "(S(0),B)", "(B,S(0))"},
};

static sl_graph *build(const layout *l) {
  sl_graph *g;
  ST_OK(sl_graph_create(&g));
  sl_shape is = SL_SHAPE(IDS), ts = SL_SHAPE(VOCAB, DIM),
           ys = SL_SHAPE(IDS, DIM);
  sl_tensor ids = sl_input(g, "ids", &is, SL_DTYPE_I32, l->placement,
                           l->ids_sbp);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, l->placement, l->ids_sbp);
  sl_tensor table =
      sl_variable(g, "table", &ts, SL_DTYPE_F32, sl_init_normal(0, 1, 5),
                  l->placement, l->table_sbp);
  sl_tensor loss = sl_mse_loss(sl_embedding(table, ids), y);
  ST_OK(sl_minimize(loss, &(sl_optimizer){.kind = SL_OPTIMIZER_SGD, .lr = 2}));
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail_msg("building: %s", sl_graph_error(g));
  return g;
}

static void train(sl_graph *g, float *losses, float *table) {
  int32_t ids[IDS];
  float y[IDS * DIM];
  for (int i = 0; i < IDS; i++)
    ids[i] = (i * 389 + 17) % VOCAB;
  ids[7] = ids[3]; /* a row looked up twice: its gradients add */
  for (int i = 0; i < IDS * DIM; i++)
    y[i] = (float)((i * 13 % 17) - 8) / 4.0f;
  sl_session *s;
  ST_OK(sl_session_create(g, NULL, &s));
  ST_OK(sl_session_feed(s, "ids", ids, sizeof ids));
  ST_OK(sl_session_feed(s, "y", y, sizeof y));
  for (int k = 0; k < STEPS; k++) {
    ST_OK(sl_session_run(s, 1));
    ST_OK(sl_session_fetch(s, "loss", &losses[k], sizeof losses[k]));
  }
  ST_OK(sl_session_read_variable(s, "table", table,
                              sizeof(float) * VOCAB * DIM));
  sl_session_destroy(s);
}

/* The most bytes one rank sends in the backward pass's boxing nodes. */
static int64_t backward_bytes(const sl_graph *g) {
  int64_t per_rank[8] = {0}, most = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING || !nd->backward) continue;
    const int64_t *sent = sl_boxing_route_bytes_sent(nd->boxing);
    for (int r = 0; r < sl_boxing_route_rank_count(nd->boxing) && r < 8; r++)
      per_rank[r] += sent[r];
  }
  for (int r = 0; r < 8; r++)
    if (per_rank[r] > most) most = per_rank[r];
  return most;
}

static void test_touched_rows_only(void **state) {
  (void)state;
  static float base_t[VOCAB * DIM], t[VOCAB * DIM];
  float base[STEPS], got[STEPS];
  sl_graph *g = build(&single);
  train(g, base, base_t);
  sl_graph_destroy(g);
  const int64_t touched = (int64_t)IDS * DIM * 4;
  for (size_t l = 0; l < SL_ARRAY_LEN(splits); l++) {
    g = build(&splits[l]);
    train(g, got, t);
    int64_t sent = backward_bytes(g);
    double rel = 0;
    for (int i = 0; i < VOCAB * DIM; i++)
      rel = fmax(rel, fabs((double)t[i] - (double)base_t[i]));
    for (int k = 0; k < STEPS; k++)
      rel = fmax(rel, fabs((double)got[k] - (double)base[k]) /
                          fmax(fabs((double)base[k]), 1e-3));
    printf("  ids %-8s table %-8s on %-12s: losses %.6f .. %.6f, largest "
           "difference %.1e; backward sends at most %lld bytes per device "
           "(the looked-up rows: %lld)\n",
           splits[l].ids_sbp, splits[l].table_sbp, splits[l].placement,
           (double)got[0], (double)got[STEPS - 1], rel, (long long)sent,
           (long long)touched);
    if (rel > 1e-5)
      fail_msg("on %s: the losses or the table differ from one device's",
               splits[l].placement);
    if (sent > 2 * touched) {
      static char buf[1 << 16];
      sl_graph_print(g, buf, sizeof buf);
      fail_msg("on %s: the backward pass sends %lld bytes per device, more "
               "than 2x the looked-up rows' %lld\n%s",
               splits[l].placement, (long long)sent, (long long)touched, buf);
    }
    sl_graph_destroy(g);
  }
}

/* ---- lazy updates ------------------------------------------------------- */

#define LV 40
#define LD 4
#define LIDS 8

/* A table [40, 4] looked up by 8 ids, then a [4, 4] weight, Adam with
 * lazy_embeddings (or not). */
static sl_graph *build_lazy(const layout *l, bool lazy, int zero) {
  sl_graph *g;
  ST_OK(sl_graph_create(&g));
  sl_shape is = SL_SHAPE(LIDS), ts = SL_SHAPE(LV, LD), ws = SL_SHAPE(LD, LD),
           ys = SL_SHAPE(LIDS, LD);
  sl_tensor ids =
      sl_input(g, "ids", &is, SL_DTYPE_I32, l->placement, l->ids_sbp);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, l->placement, l->ids_sbp);
  sl_tensor table =
      sl_variable(g, "table", &ts, SL_DTYPE_F32, sl_init_normal(0, 1, 5),
                  l->placement, l->table_sbp);
  sl_tensor w = sl_variable(g, "w", &ws, SL_DTYPE_F32,
                            sl_init_normal(0, 0.5, 6), l->placement, NULL);
  sl_tensor loss =
      sl_mse_loss(sl_matmul(sl_embedding(table, ids), w, false, false), y);
  sl_optimizer opt = sl_optimizer_adamw(0.05, 0.1);
  opt.lazy_embeddings = lazy;
  opt.zero_stage = zero;
  ST_OK(sl_minimize(loss, &opt));
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail_msg("building: %s", sl_graph_error(g));
  return g;
}

/* The table before training and after each of 3 steps: step k looks up
 * rows 8k .. 8k + 7. */
static void train_lazy(sl_graph *g, float tables[4][LV * LD]) {
  float y[LIDS * LD];
  for (int i = 0; i < LIDS * LD; i++)
    y[i] = (float)((i * 13 % 17) - 8) / 4.0f;
  sl_session *s;
  ST_OK(sl_session_create(g, NULL, &s));
  ST_OK(sl_session_feed(s, "y", y, sizeof y));
  ST_OK(sl_session_read_variable(s, "table", tables[0], sizeof tables[0]));
  for (int k = 0; k < 3; k++) {
    int32_t ids[LIDS];
    for (int i = 0; i < LIDS; i++)
      ids[i] = 8 * k + (i * 3) % LIDS;
    ST_OK(sl_session_feed(s, "ids", ids, sizeof ids));
    ST_OK(sl_session_run(s, 1));
    ST_OK(sl_session_read_variable(s, "table", tables[k + 1],
                                sizeof tables[k + 1]));
  }
  sl_session_destroy(s);
}

static bool rows_equal(const float *a, const float *b, int row) {
  return memcmp(a + row * LD, b + row * LD, LD * sizeof(float)) == 0;
}

/* Lazy: a row changes only at the steps that look it up (rows 24-39
 * never; rows 0-7 not after step 0), where dense AdamW moves every row
 * (momentum and weight decay); the same on every layout and with ZeRO. */
static void test_lazy_updates(void **state) {
  (void)state;
  static float dense[4][LV * LD], base[4][LV * LD], got[4][LV * LD];
  sl_graph *g = build_lazy(&single, false, 0);
  train_lazy(g, dense);
  sl_graph_destroy(g);
  g = build_lazy(&single, true, 0);
  train_lazy(g, base);
  sl_graph_destroy(g);
  for (int row = 0; row < LV; row++) {
    int looked = row / 8; /* the step that looks it up */
    for (int k = 1; k <= 3; k++) {
      bool moved = !rows_equal(base[k], base[k - 1], row);
      if (moved != (looked == k - 1))
        fail_msg("lazy: row %d %s at step %d", row,
                 moved ? "changed" : "did not change", k - 1);
    }
    if (rows_equal(dense[3], dense[0], row))
      fail_msg("dense: row %d never changed", row);
  }
  /* The split layouts, then data parallelism with ZeRO 1 and 3 (the
   * update's sharded signatures: the counts split with the shard). */
  static const layout dp = {"cpu:0-3", "S(0)", "B"};
  for (size_t l = 0; l < SL_ARRAY_LEN(splits) + 2; l++) {
    const layout *lo = l < SL_ARRAY_LEN(splits) ? &splits[l] : &dp;
    int zero = l < SL_ARRAY_LEN(splits) ? 0 : l == SL_ARRAY_LEN(splits) ? 1 : 3;
    g = build_lazy(lo, true, zero);
    train_lazy(g, got);
    double d = 0;
    for (int i = 0; i < LV * LD; i++)
      d = fmax(d, fabs((double)got[3][i] - (double)base[3][i]));
    printf("  lazy AdamW, ids %-8s table %-8s on %-12s zero %d: largest "
           "difference to one device %.1e\n",
           lo->ids_sbp, lo->table_sbp, lo->placement, zero, d);
    if (d > 1e-5) fail_msg("lazy on %s differs", lo->placement);
    sl_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_touched_rows_only),
      cmocka_unit_test(test_lazy_updates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
