/* bench_class_parallel: a classifier whose weight is split over the classes
 * (InsightFace's model-parallel softmax; Megatron's vocabulary-parallel
 * head), x [64, 128] @ w [128, 20000] then sl_cross_entropy, SGD, on
 * --devices CPU devices (default 4). Rows:
 *
 *   one device   w whole on cpu:0
 *   gathered     w S(1), the logits all-gathered before the loss
 *                (sl_to_global(logits, NULL, "B")): what the loss cost
 *                before it was class-parallel, at the least
 *   class-split  w S(1), sl_cross_entropy on the split logits
 *                (graph/class_parallel.c, docs/class_parallel.md)
 *
 * Per row: the bytes every boxing node of the compiled plan sends in one
 * step (all ranks; and the most any one rank sends), the planned peak
 * memory of the largest device, and the step time (median over --rounds of
 * each row's mean, the rows interleaved in each round).
 *
 * Target (issue 21): the class-split plan moves <= 1% of the bytes the
 * gathered one does.
 *
 * Usage: bench_class_parallel [--devices N] [--steps N] [--rounds R]
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
  fprintf(stderr, "bench_class_parallel: %s: %s\n", what,
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

/* Bytes the compiled plan's boxing nodes send per step. */
static void plan_bytes(const sl_graph *g, row *r) {
  int64_t per_rank[64] = {0};
  r->bytes = r->rank_bytes = 0;
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING) continue;
    const int64_t *sent = sl_boxing_route_bytes_sent(nd->boxing);
    for (int k = 0; k < sl_boxing_route_rank_count(nd->boxing) && k < 64; k++) {
      r->bytes += sent[k];
      per_rank[k] += sent[k];
    }
  }
  for (int k = 0; k < 64; k++)
    if (per_rank[k] > r->rank_bytes) r->rank_bytes = per_rank[k];
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
  plan_bytes(g, r);
  free(x);
  sl_session_destroy(s);
  sl_graph_destroy(g);
}

static int usage(FILE *f, int code) {
  fprintf(f, "usage: bench_class_parallel [--devices N] [--steps N] "
             "[--rounds R] [--classes C]\n"
             "A classifier [64, 128] x [128, C] (default C 20000) with its "
             "weight split over\nthe classes on N CPU devices (default 4): "
             "bytes sent per step, peak memory\nand step time with the "
             "logits gathered and class-parallel (bench/README.md).\n");
  return code;
}

int main(int argc, char **argv) {
  int devices = 4, steps = 10, rounds = 3, classes = 20000;
  for (int i = 1; i < argc; i++) {
    int *v = NULL;
    if (strcmp(argv[i], "--help") == 0) return usage(stdout, 0);
    if (strcmp(argv[i], "--devices") == 0) v = &devices;
    if (strcmp(argv[i], "--steps") == 0) v = &steps;
    if (strcmp(argv[i], "--rounds") == 0) v = &rounds;
    if (strcmp(argv[i], "--classes") == 0) v = &classes;
    if (!v || i + 1 == argc) {
      fprintf(stderr,
              "bench_class_parallel: unknown flag or missing value: %s\n",
              argv[i]);
      return usage(stderr, 2);
    }
    *v = atoi(argv[++i]);
    if (*v < 1 || (v == &rounds && *v > MAX_ROUNDS) ||
        (v == &devices && (*v < 2 || *v > 64))) {
      fprintf(stderr, "bench_class_parallel: %s %s is out of range\n",
              argv[i - 1], argv[i]);
      return usage(stderr, 2);
    }
  }
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
  return 0;
}
