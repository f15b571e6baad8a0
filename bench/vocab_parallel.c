/* bench_vocab_parallel: the two ends of a model split over its vocabulary
 * (or classes) on --devices CPU devices (default 4), one table each.
 *
 * The loss. A classifier whose weight is split over the classes
 * (InsightFace's model-parallel softmax; Megatron's vocabulary-parallel
 * head), x [64, 128] @ w [128, C] (C = --classes, default 20000) then
 * sl_cross_entropy, SGD. Rows:
 *
 *   one device   w whole on cpu:0
 *   gathered     w S(1), the logits all-gathered before the loss
 *                (sl_to_global(logits, NULL, "B")): what the loss cost
 *                before it was class-parallel, at the least
 *   class-split  w S(1), sl_cross_entropy on the split logits
 *                (graph/class_parallel.c, docs/vocab_parallel.md)
 *
 * Per row: the bytes every boxing node of the compiled plan sends in one
 * step (all ranks; and the most any one rank sends), the planned peak
 * memory of the largest device, and the step time (median over --rounds of
 * each row's mean, the rows interleaved in each round).
 *
 * The embedding. A table [10000, 64] split over its rows, looked up by 256
 * ids a step split with the batch, an MSE loss, SGD: the bytes the
 * backward pass sends per device, against the looked-up rows' gradient
 * bytes and against reduce-scattering a dense [10000, 64] gradient (what
 * the plan did before the table's gradient took the table's layout: the
 * reduce-scatter's bytes, computed).
 *
 * Targets (issue 21): the class-split plan moves <= 1% of the bytes the
 * gathered one does; the embedding's gradient bytes per step <= 2x the
 * looked-up rows' bytes.
 *
 * Usage: bench_vocab_parallel [--devices N] [--steps N] [--rounds R]
 *        [--classes C] (--help) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/boxing.h>
#include <sluice/session.h>

#include "bench_util.h"
#include "graph_int.h"

#define ROWS 3
#define MAX_ROUNDS 16
#define BATCH 64
#define DIM 128
#define MIB (1024.0 * 1024.0)

typedef struct row {
  const char *name;
  bool split, gather;
  int64_t bytes, rank_bytes; /* sent per step: all ranks, the most of one */
  int64_t peak;
  double ms[MAX_ROUNDS];
  int n_ms;
} row;

static void fail(const char *what, sl_graph *g) {
  fprintf(stderr, "bench_vocab_parallel: %s: %s\n", what,
          g && sl_graph_status(g) ? sl_graph_error(g) : sl_last_error());
  exit(1);
}

static sl_graph *build(const row *r, int devices, int64_t classes) {
  char placement[32];
  snprintf(placement, sizeof placement, r->split ? "cpu:0-%d" : "cpu:0",
           devices - 1);
  sl_graph *g;
  if (sl_graph_create(&g) != SL_OK) fail("graph", NULL);
  sl_shape xs = SL_SHAPE(BATCH, DIM), ls = SL_SHAPE(BATCH),
           ws = SL_SHAPE(DIM, classes);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, placement, "B");
  sl_tensor labels = sl_input(g, "labels", &ls, SL_DTYPE_I32, placement, "B");
  sl_tensor w =
      sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_normal(0, 0.05, 1),
                  placement, r->split ? "S(1)" : "B");
  sl_tensor logits = sl_matmul(x, w, false, false);
  if (r->gather) logits = sl_to_global(logits, NULL, "B");
  sl_tensor loss = sl_cross_entropy(logits, labels);
  if (sl_minimize(loss, &(sl_optimizer){.kind = SL_OPTIMIZER_SGD, .lr = 0.1}) !=
      SL_OK)
    fail("minimize", g);
  sl_fetch(loss, "loss");
  if (sl_graph_status(g) != SL_OK) fail("building", g);
  return g;
}

/* Bytes the compiled plan's boxing nodes (only the backward pass's when
 * backward is set) send per step: all ranks into *all, the most one rank
 * sends into *most. */
static void plan_bytes(const sl_graph *g, bool backward, int64_t *all,
                       int64_t *most) {
  int64_t per_rank[64] = {0};
  *all = *most = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING || (backward && !nd->backward)) continue;
    const int64_t *sent = sl_boxing_route_bytes_sent(nd->boxing);
    for (int k = 0; k < sl_boxing_route_rank_count(nd->boxing) && k < 64; k++) {
      *all += sent[k];
      per_rank[k] += sent[k];
    }
  }
  for (int k = 0; k < 64; k++)
    if (per_rank[k] > *most) *most = per_rank[k];
}

static void run_row(int devices, int64_t classes, int steps, row *r) {
  sl_graph *g = build(r, devices, classes);
  sl_session *s;
  if (sl_session_create(g, NULL, &s) != SL_OK) fail("the session", g);
  float *x = malloc(sizeof(float) * BATCH * DIM);
  int32_t labels[BATCH];
  if (!x) fail("out of memory", NULL);
  for (int i = 0; i < BATCH * DIM; i++)
    x[i] = (float)((i * 37 % 23) - 11) / 8.0f;
  for (int i = 0; i < BATCH; i++)
    labels[i] = (int32_t)((i * 7919) % classes);
  if (sl_session_feed(s, "x", x, sizeof(float) * BATCH * DIM) != SL_OK ||
      sl_session_feed(s, "labels", labels, sizeof labels) != SL_OK ||
      sl_session_run(s, 2) != SL_OK)
    fail("warm-up", g);
  uint64_t t0 = sl__now_ns();
  if (sl_session_run(s, steps) != SL_OK) fail("training", g);
  float loss;
  if (sl_session_fetch(s, "loss", &loss, sizeof loss) != SL_OK)
    fail("fetch", g);
  r->ms[r->n_ms++] = (double)(sl__now_ns() - t0) / 1e6 / steps;
  r->peak = 0;
  for (int32_t i = 0; i < sl_session_memory_device_count(s); i++) {
    sl_memory_stats m;
    if (sl_session_get_memory(s, i, &m) != SL_OK) fail("memory", g);
    if (m.peak > r->peak) r->peak = m.peak;
  }
  plan_bytes(g, false, &r->bytes, &r->rank_bytes);
  free(x);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

/* ---- the embedding ------------------------------------------------------ */

#define VOCAB 10000
#define EDIM 64
#define LOOKUPS 256

/* The table split over its rows on cpu:0-(devices-1), the ids and targets
 * with the batch; compiled by a session that trains `steps` steps. The
 * most bytes one device sends in the backward pass into *sent. */
static void embedding_run(int devices, int steps, int64_t *sent) {
  char placement[32];
  snprintf(placement, sizeof placement, "cpu:0-%d", devices - 1);
  sl_graph *g;
  if (sl_graph_create(&g) != SL_OK) fail("graph", NULL);
  sl_shape is = SL_SHAPE(LOOKUPS), ts = SL_SHAPE(VOCAB, EDIM),
           ys = SL_SHAPE(LOOKUPS, EDIM);
  sl_tensor ids = sl_input(g, "ids", &is, SL_DTYPE_I32, placement, "S(0)");
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_F32, placement, "S(0)");
  sl_tensor table =
      sl_variable(g, "table", &ts, SL_DTYPE_F32, sl_init_normal(0, 1, 5),
                  placement, "S(0)");
  sl_tensor loss = sl_mse_loss(sl_embedding(table, ids), y);
  if (sl_minimize(loss, &(sl_optimizer){.kind = SL_OPTIMIZER_SGD, .lr = 1}) !=
      SL_OK)
    fail("minimize", g);
  sl_fetch(loss, "loss");
  sl_session *s;
  if (sl_graph_status(g) != SL_OK || sl_session_create(g, NULL, &s) != SL_OK)
    fail("the embedding's session", g);
  static int32_t idv[LOOKUPS];
  static float yv[LOOKUPS * EDIM];
  for (int i = 0; i < LOOKUPS; i++)
    idv[i] = (int32_t)((i * 7919) % VOCAB);
  if (sl_session_feed(s, "ids", idv, sizeof idv) != SL_OK ||
      sl_session_feed(s, "y", yv, sizeof yv) != SL_OK ||
      sl_session_run(s, steps) != SL_OK)
    fail("training the embedding", g);
  int64_t all;
  plan_bytes(g, true, &all, sent);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

static int usage(FILE *f, int code) {
  fprintf(f, "usage: bench_vocab_parallel [--devices N] [--steps N] "
             "[--rounds R] [--classes C]\n"
             "A classifier [64, 128] x [128, C] (default C 20000) with its "
             "weight split over\nthe classes on N CPU devices (default 4): "
             "bytes sent per step, peak memory\nand step time with the "
             "logits gathered and class-parallel; then the bytes\nthe "
             "gradient of a [10000, 64] embedding split over its rows sends "
             "(bench/README.md).\n");
  return code;
}

int main(int argc, char **argv) {
  int devices = 4, steps = 10, rounds = 3, classes = 20000;
  const bench_int_flag flags[] = {{"devices", &devices, 2, 64},
                                  {"steps", &steps, 1, 1 << 20},
                                  {"rounds", &rounds, 1, MAX_ROUNDS},
                                  {"classes", &classes, 1, 1 << 24}};
  int rc = bench_int_flags(argc, argv, "bench_vocab_parallel", flags, 4);
  if (rc) return usage(rc == 1 ? stdout : stderr, rc == 1 ? 0 : 2);
  row rows[ROWS] = {{.name = "one device"},
                    {.name = "gathered", .split = true, .gather = true},
                    {.name = "class-split", .split = true}};
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < ROWS; i++)
      run_row(devices, classes, steps, &rows[i]);
  printf("classifier [%d, %d] x [%d, %d], sl_cross_entropy, SGD; w split "
         "over the classes on cpu:0-%d; median of %d rounds of %d steps\n",
         BATCH, DIM, DIM, classes, devices - 1, rounds, steps);
  printf("| layout | bytes sent per step (all ranks) | most by one rank | "
         "peak memory per device (MiB) | ms/step |\n|---|---|---|---|---|\n");
  for (int i = 0; i < ROWS; i++)
    printf("| %s | %lld | %lld | %.2f | %.2f |\n", rows[i].name,
           (long long)rows[i].bytes, (long long)rows[i].rank_bytes,
           rows[i].peak / MIB, bench_median(rows[i].ms, rows[i].n_ms));
  printf("\nclass-split / gathered: bytes %.4f%% (target <= 1%%), step time "
         "%.3fx; class-split vs one device: %.3fx the step time\n",
         100.0 * (double)rows[2].bytes / (double)rows[1].bytes,
         bench_median(rows[2].ms, rows[2].n_ms) /
             bench_median(rows[1].ms, rows[1].n_ms),
         bench_median(rows[2].ms, rows[2].n_ms) /
             bench_median(rows[0].ms, rows[0].n_ms));
  int64_t sent, looked_up = (int64_t)LOOKUPS * EDIM * 4,
                dense = (int64_t)(devices - 1) * (VOCAB / devices) * EDIM * 4;
  embedding_run(devices, steps, &sent);
  printf("\nembedding [%d, %d] split over its rows on cpu:0-%d, %d ids a "
         "step split with the batch; bytes one device sends in the backward "
         "pass\n",
         VOCAB, EDIM, devices - 1, LOOKUPS);
  printf("| gradient | bytes per device per step | vs the looked-up rows' "
         "%lld |\n|---|---|---|\n",
         (long long)looked_up);
  printf("| dense, reduce-scattered (computed) | %lld | %.2fx |\n",
         (long long)dense, (double)dense / (double)looked_up);
  printf("| the table's layout (the plan) | %lld | %.2fx (target <= 2) |\n",
         (long long)sent, (double)sent / (double)looked_up);
  return 0;
}
