/* bench_zero_recompute: ZeRO stages (sl_optimizer.zero_stage,
 * docs/zero.md) and recomputation (every block a region,
 * sl_graph_push_recompute) on a GPT shaped like GPT-2 small, scaled to a
 * small machine: 4 blocks, hidden 256, 4 heads, seq 128, vocab 8192, batch
 * 8, untied head, Adam, data parallel on --devices CPU devices (default
 * 4). One row per setting (zero 0, 1, 2, 3; recompute on with zero 0, 2
 * and 3):
 * the planned memory of the device with the largest allocation, by what
 * it holds, and the step time, beside zero 0 without recompute. The rows run
 * `--rounds` times, one after the other in each round, so that all meet the
 * same drift in machine load; a row's step time is the median over rounds of
 * its mean.
 *
 * The OneFlow paper's figures for its ZeRO-1 (GPT-2, data parallel), as
 * issue 21 quotes them: DeepSpeed stage 0 -> 1: -7.7% memory, -1.4%
 * throughput; OneFlow: -15.5% memory, -1.7% throughput.
 *
 * Targets (issue 21): ZeRO-1 optimizer-state bytes per device = total / n
 * (rounding aside); ZeRO-3 weights + gradients + state per device <=
 * total / n + two layers' gathered weights; ZeRO-1 throughput >= 0.95x
 * zero 0; recomputation cuts the activations at the peak by >= 50% for
 * <= 40% more step time.
 *
 * Usage: bench_zero_recompute [--devices N] [--steps N] [--rounds R]
 *        (--help) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/session.h>

#include "bench_util.h"
#include "common/ex_run.h"
#include "gpt/model.h"

#define ROWS 7
#define MAX_ROUNDS 16
#define MIB (1024.0 * 1024.0)

typedef struct row {
  int zero;
  bool recompute;
  sl_memory_stats mem; /* the device with the largest allocation */
  int64_t state;       /* the optimizer state's bytes, all devices */
  int64_t weights;     /* the trained weights' bytes, all devices */
  int64_t largest;     /* the largest trained weight's bytes */
  double ms[MAX_ROUNDS];
  int n_ms;
} row;

static sl_status build(sl_graph *g, int devices, const row *r, char *placement,
                       size_t n) {
  char dev[32];
  snprintf(dev, sizeof dev, "cpu:%d", devices);
  sl_status st = ex_layout_placement(EX_LAYOUT_DP, dev, placement, n);
  if (st != SL_OK) return st;
  ex_gpt_config c = ex_gpt_defaults();
  c.layers = 4;
  c.hidden = 256;
  c.heads = 4;
  c.seq = 128;
  c.vocab = 8192;
  c.batch = 8;
  c.opt = sl_optimizer_adam(3e-3);
  c.opt.zero_stage = r->zero;
  c.recompute = r->recompute;
  c.layout = EX_LAYOUT_DP;
  c.placement = placement;
  return ex_gpt_build(g, &c);
}

static void fail(const char *what, sl_graph *g) {
  fprintf(stderr, "bench_zero_recompute: %s: %s\n", what,
          g && sl_graph_status(g) ? sl_graph_error(g) : sl_last_error());
  exit(1);
}

static void run_row(int devices, int steps, row *r) {
  char placement[256];
  sl_graph *g;
  ex_run *run = NULL;
  ex_run_opts ro = {.engine = EX_ENGINE_SESSION};
  ex_train_result res = {0};
  if (sl_graph_create(&g) != SL_OK) fail("graph", NULL);
  if (build(g, devices, r, placement, sizeof placement) != SL_OK)
    fail("building the model", g);
  if (ex_run_create(g, &ro, &run) != SL_OK) fail("the session", g);
  if (ex_train(run, 2, 8, "loss", NULL, NULL, NULL) != SL_OK ||
      ex_train(run, steps + 1, 8, "loss", NULL, NULL, &res) != SL_OK)
    fail("training", g);
  sl_session *s = ex_run_session(run);
  memset(&r->mem, 0, sizeof r->mem);
  for (int32_t i = 0; i < sl_session_memory_device_count(s); i++) {
    sl_memory_stats m;
    if (sl_session_get_memory(s, i, &m) != SL_OK) fail("memory", g);
    if (m.allocated > r->mem.allocated) r->mem = m;
  }
  r->state = r->weights = r->largest = 0;
  for (int32_t i = 0; i < sl_session_variable_count(s); i++) {
    sl_variable_info v;
    if (sl_session_get_variable(s, i, &v) != SL_OK) fail("variables", g);
    int64_t b = sl_shape_numel(&v.shape) * 4;
    if (v.optimizer) {
      r->state += b;
    } else {
      r->weights += b;
      if (b > r->largest) r->largest = b;
    }
  }
  r->ms[r->n_ms++] = res.ms_per_step;
  ex_run_destroy(run);
  sl_graph_destroy(g);
}

static int usage(FILE *f, int code) {
  fprintf(f, "usage: bench_zero_recompute [--devices N] [--steps N] "
             "[--rounds R]\n"
             "ZeRO stages 0 to 3 and recomputation on a GPT (4 blocks of "
             "256, seq 128,\nvocab 8192, Adam) data parallel on N CPU devices "
             "(default 4): planned memory\nper device and step time, one "
             "table (bench/README.md).\n");
  return code;
}

int main(int argc, char **argv) {
  int devices = 4, steps = 10, rounds = 3;
  const bench_int_flag flags[] = {{"devices", &devices, 2, 1 << 10},
                                  {"steps", &steps, 1, 1 << 20},
                                  {"rounds", &rounds, 1, MAX_ROUNDS}};
  int rc = bench_int_flags(argc, argv, "bench_zero_recompute", flags, 3);
  if (rc) return usage(rc == 1 ? stdout : stderr, rc == 1 ? 0 : 2);
  row rows[ROWS] = {{.zero = 0},
                    {.zero = 1},
                    {.zero = 2},
                    {.zero = 3},
                    {.zero = 0, .recompute = true},
                    {.zero = 2, .recompute = true},
                    {.zero = 3, .recompute = true}};
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < ROWS; i++)
      run_row(devices, steps, &rows[i]);
  printf("GPT (4 blocks of 256, 4 heads, seq 128, vocab 8192, batch 8, Adam), "
         "dp on cpu:%d; planned memory of the largest device (MiB), median "
         "of %d rounds of %d steps\n",
         devices, rounds, steps);
  printf("| zero | recompute | peak | weights | optimizer | gradients | "
         "activations | communication | memory vs zero 0 | ms/step | "
         "throughput vs zero 0 |\n|---|---|---|---|---|---|---|---|---|---|"
         "---|\n");
  double ms0 = bench_median(rows[0].ms, rows[0].n_ms);
  for (int i = 0; i < ROWS; i++) {
    const sl_memory_stats *m = &rows[i].mem;
    double ms = bench_median(rows[i].ms, rows[i].n_ms);
    printf("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %+.1f%% | "
           "%.2f | %.3fx |\n",
           rows[i].zero, rows[i].recompute ? "on" : "off", m->peak / MIB,
           m->category[SL_MEMORY_WEIGHTS] / MIB,
           m->category[SL_MEMORY_OPTIMIZER] / MIB,
           m->category[SL_MEMORY_GRADIENTS] / MIB,
           m->category[SL_MEMORY_ACTIVATIONS] / MIB,
           m->category[SL_MEMORY_COMMUNICATION] / MIB,
           100.0 * ((double)m->peak / (double)rows[0].mem.peak - 1), ms,
           ms0 / ms);
  }
  printf("\nThe OneFlow paper (GPT-2, stage 0 -> 1): DeepSpeed -7.7%% memory, "
         "-1.4%% throughput; OneFlow -15.5%%, -1.7%%.\n");
  double share = (double)rows[1].mem.category[SL_MEMORY_OPTIMIZER] /
                 ((double)rows[1].state / devices);
  printf("zero 1: optimizer state on the largest device %.0f bytes = %.4f x "
         "total / %d (target 1, rounding aside); throughput %.3fx zero 0 "
         "(target >= 0.95)\n",
         (double)rows[1].mem.category[SL_MEMORY_OPTIMIZER], share, devices,
         ms0 / bench_median(rows[1].ms, rows[1].n_ms));
  /* ZeRO-3: weights, gradients and state at the peak against a 1/n share
   * of the model's (weights, gradients and state: the state is all
   * optimizer variables) plus two of its largest weights gathered. */
  const sl_memory_stats *m3 = &rows[3].mem;
  double held = (double)(m3->category[SL_MEMORY_WEIGHTS] +
                         m3->category[SL_MEMORY_GRADIENTS] +
                         m3->category[SL_MEMORY_OPTIMIZER]);
  double third = (2.0 * rows[3].weights + rows[3].state) / devices;
  printf("zero 3: weights + gradients + state on the largest device %.2f MiB "
         "against total / %d = %.2f MiB plus two gathered weights %.2f MiB "
         "(target: at most their sum); gathered weights and other "
         "communication buffers at the peak %.2f MiB; throughput %.3fx zero "
         "0\n",
         held / MIB, devices, third / MIB, 2.0 * rows[3].largest / MIB,
         m3->category[SL_MEMORY_COMMUNICATION] / MIB,
         ms0 / bench_median(rows[3].ms, rows[3].n_ms));
  printf("recompute (zero 0): activations at the peak %.1f%% lower (target "
         ">= 50%%), step time %.3fx (target <= 1.40)\n",
         100.0 * (1 - (double)rows[4].mem.category[SL_MEMORY_ACTIVATIONS] /
                          (double)rows[0].mem.category[SL_MEMORY_ACTIVATIONS]),
         bench_median(rows[4].ms, rows[4].n_ms) / ms0);
  return 0;
}
