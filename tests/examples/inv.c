/* Parallel-invariance helpers (see inv.h). */
#include "inv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/boxing.h>

#include "fake_cuda.h"
#include "graph_int.h"

int inv_cases(inv_case *cases) {
  int n = 0;
  const ex_layout flat[] = {EX_LAYOUT_SINGLE, EX_LAYOUT_DP, EX_LAYOUT_TP};
  for (size_t l = 0; l < sizeof flat / sizeof flat[0]; l++)
    for (int d = 1; d <= 4; d++)
      cases[n++] = (inv_case){flat[l], d};
  cases[n++] = (inv_case){EX_LAYOUT_HYBRID, 2};
  cases[n++] = (inv_case){EX_LAYOUT_HYBRID, 4};
  return n;
}

void inv_train(inv_build_fn build, const void *ctx, ex_layout layout,
               int devices, ex_engine engine, int steps, float *losses,
               sl_graph **g_out) {
  inv_train_on("cpu", build, ctx, layout, devices, engine, steps, losses,
               g_out);
}

void inv_train_on(const char *type, inv_build_fn build, const void *ctx,
                  ex_layout layout, int devices, ex_engine engine, int steps,
                  float *losses, sl_graph **g_out) {
  char dev[32], placement[256];
  snprintf(dev, sizeof dev, "%s:%d", type, devices);
  INV_OK(ex_layout_placement(layout, dev, placement, sizeof placement));
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  if (build(g, layout, placement, ctx) != SL_OK)
    fail_msg("%s on %s: building: %s", ex_layout_name(layout), placement,
             sl_graph_status(g) ? sl_graph_error(g) : sl_last_error());
  ex_run_opts o = {.engine = engine,
                   .check_replicas = engine == EX_ENGINE_SHARDED};
  ex_run *r;
  if (ex_run_create(g, &o, &r) != SL_OK)
    fail_msg("%s on %s, engine %s: %s", ex_layout_name(layout), placement,
             ex_engine_name(engine), sl_last_error());
  if (ex_train(r, steps, 1, "loss", NULL, losses, NULL) != SL_OK)
    fail_msg("%s on %s, engine %s: %s", ex_layout_name(layout), placement,
             ex_engine_name(engine), sl_last_error());
  ex_run_destroy(r);
  if (g_out)
    *g_out = g;
  else
    sl_graph_destroy(g);
}

double inv_max_rel(const float *a, const float *b, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) {
    double d =
        fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), 1e-30);
    if (!(d <= m)) m = d; /* NaN wins */
  }
  return m;
}

bool inv_identical(const float *a, const float *b, int n) {
  return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

void inv_count_boxing(const sl_graph *g, int op, int *forward, int *all) {
  inv_count_boxing_min(g, op, 0, forward, all);
}

/* Which nodes feed the backward pass or an update: a boxing node serves
 * the pass of its consumers (compile marks it after its producer), forward
 * when no consumer is backward or an update. Freed by the caller. */
static bool *feeds_backward(const sl_graph *g) {
  int32_t nn = sl__graph_node_count(g);
  bool *feeds_bw = calloc((size_t)nn + 1, sizeof *feeds_bw);
  assert_non_null(feeds_bw);
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (!nd->backward && !nd->optimizer) continue;
    for (int k = 0; k < nd->n_in; k++)
      feeds_bw[sl__graph_value(g, nd->in[k])->producer] = true;
  }
  return feeds_bw;
}

/* Bytes node nd's route sends between devices, all ranks together. */
static int64_t route_sent(const sl__node *nd) {
  const int64_t *sent = sl_boxing_route_bytes_sent(nd->boxing);
  int64_t total = 0;
  for (int r = 0; r < sl_boxing_route_rank_count(nd->boxing); r++)
    total += sent[r];
  return total;
}

void inv_count_boxing_min(const sl_graph *g, int op, int64_t min_numel,
                          int *forward, int *all) {
  *forward = *all = 0;
  bool *feeds_bw = feeds_backward(g);
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING ||
        sl_shape_numel(&sl__graph_value(g, nd->out[0])->meta.shape) <
            min_numel ||
        route_sent(nd) == 0)
      continue;
    if (op >= 0) {
      bool only = sl_boxing_route_step_count(nd->boxing) > 0;
      for (int s = 0; s < sl_boxing_route_step_count(nd->boxing); s++)
        only = only && (int)sl_boxing_step_op(nd->boxing, s) == op;
      if (!only) continue;
    }
    (*all)++;
    if (!nd->backward && !nd->optimizer && !feeds_bw[i]) (*forward)++;
  }
  free(feeds_bw);
}

void inv_bytes_sent(const sl_graph *g, int64_t *forward, int64_t *all) {
  *forward = *all = 0;
  bool *feeds_bw = feeds_backward(g);
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *nd = sl__graph_node(g, i);
    if (nd->kind != SL__NODE_BOXING) continue;
    int64_t sent = route_sent(nd);
    *all += sent;
    if (!nd->backward && !nd->optimizer && !feeds_bw[i]) *forward += sent;
  }
  free(feeds_bw);
}

static void print_losses(const char *label, const float *l, double rel,
                         const char *verdict) {
  printf("  %-22s", label);
  printf(" %.7f %.7f %.7f", (double)l[0], (double)l[INV_STEPS / 2],
         (double)l[INV_STEPS - 1]);
  printf("  %9.2e  %s\n", rel, verdict);
}

void inv_check_matrix(const char *model, inv_build_fn build, const void *ctx) {
  float ref[INV_STEPS], got[INV_STEPS], sess[INV_STEPS];
  inv_train(build, ctx, EX_LAYOUT_SINGLE, 1, EX_ENGINE_INTERP, INV_STEPS, ref,
            NULL);
  printf("%s: losses at steps 0, %d, %d; max relative difference to the "
         "interpreter\n",
         model, INV_STEPS / 2, INV_STEPS - 1);
  print_losses("interpreter", ref, 0, "reference");
  if (!(ref[INV_STEPS - 1] < ref[0]))
    fail_msg("%s: the loss does not fall (%g -> %g)", model, (double)ref[0],
             (double)ref[INV_STEPS - 1]);
  inv_case cases[16];
  int n = inv_cases(cases);
  for (int i = 0; i < n; i++) {
    inv_case c = cases[i];
    char label[64];
    snprintf(label, sizeof label, "%s on %d (sharded)",
             ex_layout_name(c.layout), c.devices);
    inv_train(build, ctx, c.layout, c.devices, EX_ENGINE_SHARDED, INV_STEPS,
              got, NULL);
    double rel = inv_max_rel(got, ref, INV_STEPS);
    /* Single keeps every tensor whole on every device: the same kernels on
     * the same data, no sum reordered, so the losses are the same bits. */
    bool exact = c.layout == EX_LAYOUT_SINGLE;
    bool same = inv_identical(got, ref, INV_STEPS);
    print_losses(label, got, rel,
                 same              ? "identical"
                 : rel <= INV_RTOL ? "within 1e-4"
                                   : "FAIL");
    if (exact && !same)
      fail_msg("%s %s: want the interpreter's losses bit for bit (max rel "
               "%.3g)",
               model, label, rel);
    if (!(rel <= INV_RTOL))
      fail_msg("%s %s: losses differ from one device by %.3g relative "
               "(step %d: %.9g vs %.9g)",
               model, label, rel, INV_STEPS - 1, (double)got[INV_STEPS - 1],
               (double)ref[INV_STEPS - 1]);
    snprintf(label, sizeof label, "%s on %d (session)",
             ex_layout_name(c.layout), c.devices);
    inv_train(build, ctx, c.layout, c.devices, EX_ENGINE_SESSION, INV_STEPS,
              sess, NULL);
    double srel = inv_max_rel(sess, ref, INV_STEPS);
    bool ssame = inv_identical(sess, got, INV_STEPS);
    print_losses(label, sess, srel,
                 ssame              ? "identical to sharded"
                 : srel <= INV_RTOL ? "within 1e-4"
                                    : "FAIL");
    if (!(srel <= INV_RTOL))
      fail_msg("%s %s: losses differ from one device by %.3g relative", model,
               label, srel);
    /* The session's collectives reduce members in rank order, like the
     * boxing reference executor, and run the same kernels on the same
     * shards: the same bits. */
    if (!ssame)
      fail_msg("%s %s: losses differ from the sharded reference's (max rel "
               "%.3g)",
               model, label, inv_max_rel(sess, got, INV_STEPS));
  }
}

static void check_cuda(const char *model, inv_build_fn build, const void *ctx,
                       int max_devices, double rtol) {
  float ref[INV_STEPS], got[INV_STEPS];
  printf("%s on cuda: losses at steps 0, %d, %d; max relative difference "
         "to the same case on cpu\n",
         model, INV_STEPS / 2, INV_STEPS - 1);
  inv_case cases[16];
  int n = inv_cases(cases);
  for (int i = 0; i < n; i++) {
    inv_case c = cases[i];
    if (c.devices > max_devices) continue;
    char label[64];
    inv_train(build, ctx, c.layout, c.devices, EX_ENGINE_SHARDED, INV_STEPS,
              ref, NULL);
    inv_train_on("cuda", build, ctx, c.layout, c.devices, EX_ENGINE_SESSION,
                 INV_STEPS, got, NULL);
    snprintf(label, sizeof label, "%s on %d cuda", ex_layout_name(c.layout),
             c.devices);
    double rel = inv_max_rel(got, ref, INV_STEPS);
    bool same = inv_identical(got, ref, INV_STEPS);
    print_losses(label, got, rel,
                 same          ? "identical"
                 : rel <= rtol ? "within tolerance"
                               : "FAIL");
    if (rtol == 0 ? !same : !(rel <= rtol))
      fail_msg("%s %s: losses differ from %d cpu by %.3g relative (allowed "
               "%.3g)",
               model, label, c.devices, rel, rtol);
  }
}

void inv_check_cuda_fake(const char *model, inv_build_fn build,
                         const void *ctx) {
  char label[128];
  snprintf(label, sizeof label, "%s (fake cuda)", model);
  fake_cuda_install();
  check_cuda(label, build, ctx, 4, 0);
  fake_cuda_uninstall();
}

void inv_check_cuda_gpu(const char *model, inv_build_fn build,
                        const void *ctx) {
  int n = sl_device_count(SL_DEVICE_CUDA);
  if (n < 1) {
    print_message("no CUDA device here: skipped\n");
    skip();
  }
  char label[128];
  snprintf(label, sizeof label, "%s (gpu)", model);
  check_cuda(label, build, ctx, n, 1e-3);
}

void inv_session_train(sl_graph *g, int steps, float *losses,
                       sl_memory_stats *mem) {
  ex_run_opts o = {.engine = EX_ENGINE_SESSION};
  ex_run *r;
  INV_OK(ex_run_create(g, &o, &r));
  INV_OK(ex_train(r, steps, 1, "loss", NULL, losses, NULL));
  if (mem) INV_OK(sl_session_get_memory(ex_run_session(r), 0, mem));
  ex_run_destroy(r);
}
