/* bench_pipeline: pipeline schedules measured against the simulator and
 * the textbook, and examples/gpt on two stages against one device, in one
 * run (docs/pipeline.md).
 *
 * Table 1: a chain of P stages (cpu:0 .. cpu:P-1), each L layers
 * h = tanh(h W) with W [D, D], the micro-batch [b, D]; M micro-batches per
 * step, each schedule. Per row:
 *   measured   the median wall time of a step (sl_session_run of 1; 10)
 *   simulated  sl_session_simulate with the costs of the same run's trace
 *              (each task's median firing, the hand-off between
 *              streams), i.e. the plan's schedule and dependencies
 *              replayed with the times as measured
 *   textbook   (M + P - 1) / M x the busiest device's compute time: the
 *              1F1B / GPipe formula, bubble (P-1)/(M+P-1) (not given for
 *              interleaved and zero-bubble)
 *   bubble     the simulation's largest idle fraction of a device
 * Targets: measured within 10% of the simulator and of the formula; zero-
 * bubble's bubble below 1F1B's. On a machine with fewer cores than
 * stages, the stages' threads share cores: the measurement then runs
 * slower than either prediction, which assume one core per device.
 *
 * Table 2: examples/gpt (--layers 4 --hidden 256 --seq 128 --batch 16) on
 * two stages (cpu:0-1, 1F1B, M = 8) against the same model on one device:
 * the step speedup (target >= 1.6x; ideal 2 x 8/9 = 1.78x) and stage 0's
 * planned peak activation bytes under 1F1B and GPipe.
 *
 * PyTorch's torch.distributed.pipelining would be the peer; Debian's
 * python3-torch (1.13) does not have it, so the formula and the simulator
 * are the anchors.
 *
 * Usage: bench_pipeline [--quick] [--help]. Exit status 0, 1 when a run
 * fails, 2 for bad flags. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sluice/session.h>

#include "bench_util.h"
#include "gpt/model.h"
#include "session_int.h"

typedef struct row_cfg {
  int p, v, m; /* devices, stages per device, micro-batches */
  const char *schedule;
} row_cfg;

static int L = 2, D = 512, B = 64, STEPS = 10;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* P*V stages of L layers; stage s on cpu:(s mod P). */
static sl_graph *chain(const row_cfg *c) {
  sl_graph *g = NULL;
  if (sl_graph_create(&g) != SL_OK) return NULL;
  sl_graph_set_micro_batches(g, c->m);
  sl_graph_set_schedule(g, c->schedule);
  sl_shape xs = SL_SHAPE(B, D), ws = SL_SHAPE(D, D);
  sl_tensor h = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0", NULL);
  for (int s = 0; s < c->p * c->v; s++) {
    char place[16];
    snprintf(place, sizeof place, "cpu:%d", s % c->p);
    sl_graph_push_stage(g, s);
    h = sl_to_global(h, place, NULL);
    for (int l = 0; l < L; l++) {
      char name[32];
      snprintf(name, sizeof name, "w%d_%d", s, l);
      sl_tensor w = sl_variable(
          g, name, &ws, SL_DTYPE_F32,
          sl_init_xavier_uniform(1, (uint64_t)(s * L + l)), place, NULL);
      h = sl_tanh(sl_matmul(h, w, false, false));
    }
    sl_graph_pop_stage(g);
  }
  sl_tensor loss = sl_reduce_mean(sl_square(h), 0, NULL, false);
  sl_optimizer o = sl_optimizer_sgd(1e-3, 0);
  sl_minimize(loss, &o);
  sl_fetch(loss, "loss");
  return g;
}

/* Runs STEPS timed steps (after one warm-up) with a trace; fills the
 * measured median and the simulation with the trace's costs. */
static bool run_row(const row_cfg *c, double *measured, sl_simulation *sim) {
  char trace[] = "/tmp/bench_pipeline_XXXXXX";
  int fd = mkstemp(trace);
  if (fd < 0) return false;
  close(fd);
  sl_graph *g = chain(c);
  sl_session_config cfg = sl_session_config_default();
  cfg.trace_path = trace;
  sl_session *s = NULL;
  bool ok = g && sl_graph_status(g) == SL_OK &&
            sl_session_create(g, &cfg, &s) == SL_OK;
  float *x = calloc((size_t)B * D * c->m, sizeof *x);
  for (int i = 0; x && i < B * D * c->m; i++)
    x[i] = (float)sin(i * 0.37);
  ok = ok && x &&
       sl_session_feed(s, "x", x, (size_t)B * D * c->m * sizeof *x) == SL_OK &&
       sl_session_run(s, 1) == SL_OK;
  double t[64];
  for (int k = 0; ok && k < STEPS; k++) {
    double t0 = now_ms();
    ok = sl_session_run(s, 1) == SL_OK;
    t[k] = now_ms() - t0;
  }
  ok = ok && sl_session_finish(s) == SL_OK;
  if (ok) *measured = bench_median(t, STEPS);
  sl_sim_config sc = sl_sim_config_default();
  sc.costs = trace;
  ok = ok && sl_session_simulate(s, &sc, sim, NULL) == SL_OK;
  if (!ok)
    fprintf(stderr, "bench_pipeline: %s P=%d M=%d: %s\n", c->schedule, c->p,
            c->m, sl_last_error());
  sl_session_destroy(s);
  sl_graph_destroy(g);
  free(x);
  unlink(trace);
  return ok;
}

/* ---- gpt on two stages ----------------------------------------------------
 */

/* Stage 0's (cpu:0's) planned peak activation bytes. */
static double activations_cpu0(const sl_session *s) {
  const sl__pplan *pp = s->pp;
  for (int32_t m = 0; m < pp->n_mem; m++)
    if (pp->mem[m].machine == 0 && pp->mem[m].device == 0)
      return (double)pp->mem[m].category[SL_MEMORY_ACTIVATIONS];
  return -1;
}

static bool gpt_run(int pp, int micro, const char *schedule, double *ms,
                    double *act) {
  ex_gpt_config c = ex_gpt_defaults();
  c.layers = 4;
  c.hidden = 256;
  c.seq = 128;
  c.batch = 16;
  c.pp = pp;
  c.micro = micro;
  c.schedule = schedule;
  c.placement = "cpu:0";
  c.stage_placement[0] = "cpu:0";
  c.stage_placement[1] = "cpu:1";
  sl_graph *g = NULL;
  sl_session *s = NULL;
  bool ok = sl_graph_create(&g) == SL_OK && ex_gpt_build(g, &c) == SL_OK &&
            sl_session_create(g, NULL, &s) == SL_OK &&
            sl_session_run(s, 1) == SL_OK;
  double t[16];
  int n = STEPS < 16 ? STEPS : 16;
  for (int k = 0; ok && k < n; k++) {
    double t0 = now_ms();
    ok = sl_session_run(s, 1) == SL_OK;
    t[k] = now_ms() - t0;
  }
  if (ok) {
    *ms = bench_median(t, n);
    *act = activations_cpu0(s);
  } else {
    fprintf(stderr, "bench_pipeline: gpt pp %d: %s\n", pp,
            g && sl_graph_status(g) != SL_OK ? sl_graph_error(g)
                                             : sl_last_error());
  }
  sl_session_destroy(s);
  sl_graph_destroy(g);
  return ok;
}

int main(int argc, char **argv) {
  bool quick = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: bench_pipeline [--quick]\n\n"
             "Pipeline schedules on 2 and 4 CPU devices: measured step time,\n"
             "the simulator's prediction from the run's own trace, and the\n"
             "1F1B/GPipe formula; then examples/gpt on two stages against\n"
             "one device. --quick: smaller layers and fewer steps.\n");
      return 0;
    } else {
      fprintf(stderr, "bench_pipeline: unknown flag '%s' (see --help)\n",
              argv[i]);
      return 2;
    }
  }
  if (quick) {
    D = 128;
    B = 16;
    STEPS = 3;
  }
  printf("bench_pipeline: %d layers of [%d x %d] per stage, micro-batch %d, "
         "%d timed steps; %ld cores online\n\n",
         L, D, D, B, STEPS, sysconf(_SC_NPROCESSORS_ONLN));
  printf("%-2s %-2s %-3s %-12s %10s %10s %6s %10s %6s %7s %7s\n", "P", "V", "M",
         "schedule", "measured", "simulated", "ratio", "textbook", "ratio",
         "bubble", "formula");
  static const char *const scheds[] = {"gpipe", "1f1b", "zero-bubble",
                                       "interleaved"};
  static const int ms[] = {1, 4, 8, 16};
  int rc = 0;
  for (int p = 2; p <= 4; p += 2)
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
      for (size_t si = 0; si < sizeof scheds / sizeof *scheds; si++) {
        row_cfg c = {p, 1, ms[mi], scheds[si]};
        if (strcmp(c.schedule, "interleaved") == 0) {
          if (c.m % p != 0) continue;
          c.v = 2;
        }
        double meas = 0;
        sl_simulation sim;
        if (!run_row(&c, &meas, &sim)) {
          rc = 1;
          continue;
        }
        double busy = sim.step_us * (1.0 - sim.bubble) / 1e3;
        bool formula =
            strcmp(c.schedule, "gpipe") == 0 || strcmp(c.schedule, "1f1b") == 0;
        double text = busy * (c.m + p - 1) / c.m;
        double fb = (double)(p - 1) / (c.m + p - 1);
        char tb[16] = "-", tr[16] = "-", fbs[16] = "-";
        if (formula) {
          snprintf(tb, sizeof tb, "%.2f", text);
          snprintf(tr, sizeof tr, "%.2f", meas / text);
          snprintf(fbs, sizeof fbs, "%.3f", fb);
        }
        printf("%-2d %-2d %-3d %-12s %10.2f %10.2f %6.2f %10s %6s %7.3f %7s\n",
               p, c.v, c.m, c.schedule, meas, sim.step_us / 1e3,
               meas / (sim.step_us / 1e3), tb, tr, sim.bubble, fbs);
        fflush(stdout);
      }
  printf("\n(ms per step; ratio = measured / predicted; bubble: the "
         "simulation's largest idle fraction of a device)\n\n");
  double one = 0, two = 0, act_1f1b = 0, act_gpipe = 0, unused = 0;
  if (gpt_run(1, 1, NULL, &one, &unused) &&
      gpt_run(2, 8, "1f1b", &two, &act_1f1b) &&
      gpt_run(2, 8, "gpipe", &unused, &act_gpipe)) {
    printf("%-34s %10s %10s %8s %8s\n", "gpt 4x256, seq 128, batch 16",
           "1 device", "2 stages", "speedup", "ideal");
    printf("%-34s %10.2f %10.2f %7.2fx %7.2fx\n", "ms per step (1F1B, M = 8)",
           one, two, one / two, 2.0 * 8 / 9);
    printf("stage 0 planned activations: 1F1B %.1f MiB, GPipe %.1f MiB "
           "(%.2fx)\n",
           act_1f1b / 1048576.0, act_gpipe / 1048576.0,
           act_1f1b > 0 ? act_gpipe / act_1f1b : 0.0);
  } else {
    rc = 1;
  }
  return rc;
}
