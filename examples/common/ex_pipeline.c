/* Pipelines in the examples (see ex_pipeline.h). */
#include "ex_pipeline.h"

#include <stdio.h>
#include <string.h>

#include <sluice/placement.h>

#include "ex_util.h"

/* Appends ",id" (or "id" first) to buf. */
static void put_id(char *buf, size_t size, int id) {
  size_t len = strlen(buf);
  snprintf(buf + len, size - len, "%s%d", len ? "," : "", id);
}

sl_status ex_stage_placements(ex_layout l, const char *devices, int pp,
                              char (*stages)[512]) {
  if (pp < 1 || pp > EX_MAX_STAGES)
    return sl_set_error(SL_EINVAL, "pp %d: want 1 to %d stages", pp,
                        EX_MAX_STAGES);
  if (pp == 1) return ex_layout_placement(l, devices, stages[0], 512);
  char flat[512];
  EX_CHECK(ex_layout_placement(EX_LAYOUT_DP, devices, flat, sizeof flat));
  sl_placement *p = NULL;
  EX_CHECK(sl_placement_parse(flat, &p));
  int nodes = sl_placement_node_count(p), n = sl_placement_size(p);
  int per_node = n / nodes;
  const char *type =
      sl_placement_device_type(p) == SL_DEVICE_CUDA ? "cuda" : "cpu";
  sl_status st = SL_OK;
  bool by_node = nodes > 1; /* several nodes: whole nodes per stage */
  int parts = by_node ? nodes : per_node;
  if (parts % pp != 0) {
    st = sl_set_error(SL_EINVAL,
                      "%d pipeline stages do not divide the %d %s of '%s'", pp,
                      parts, by_node ? "nodes" : "devices", devices);
    goto out;
  }
  int k = parts / pp;
  for (int s = 0; s < pp && st == SL_OK; s++) {
    char nl[256] = "", dl[256] = "", text[512];
    int node = 0, dev = 0;
    if (by_node) {
      for (int i = s * k; i < (s + 1) * k; i++) {
        sl_placement_rank_device(p, i * per_node, &node, &dev);
        put_id(nl, sizeof nl, node);
      }
      for (int d = 0; d < per_node; d++) {
        sl_placement_rank_device(p, d, &node, &dev);
        put_id(dl, sizeof dl, dev);
      }
    } else {
      for (int i = s * k; i < (s + 1) * k; i++) {
        sl_placement_rank_device(p, i, &node, &dev);
        put_id(dl, sizeof dl, dev);
      }
      snprintf(nl, sizeof nl, "%d", node);
    }
    snprintf(text, sizeof text, "%s:%s/%s", type, nl, dl);
    st = ex_layout_placement(l, text, stages[s], 512);
    if (st != SL_OK) sl_add_error_context(st, "stage %d: ", s);
  }
out:
  sl_placement_destroy(p);
  return st;
}

int ex_stage_of(int j, int n, int pp) {
  /* Stage s takes parts [s*n/pp, (s+1)*n/pp). */
  for (int s = 0; s < pp; s++)
    if (j < (int)((int64_t)(s + 1) * n / pp)) return s;
  return pp - 1;
}

sl_status ex_pipeline_check(int micro, int64_t batch, const char *schedule) {
  if (micro > 1 && batch % micro != 0)
    return sl_set_error(SL_EINVAL,
                        "flag '--micro': batch %lld is not a multiple of %d "
                        "micro-batches",
                        (long long)batch, micro);
  if (!schedule) return SL_OK;
  sl_graph *g = NULL; /* the library's list of schedules decides */
  EX_CHECK(sl_graph_create(&g));
  sl_status st = sl_graph_set_schedule(g, schedule);
  sl_graph_destroy(g);
  if (st != SL_OK) sl_add_error_context(st, "flag '--schedule': ");
  return st;
}

sl_status ex_pipeline_setup(sl_graph *g, const char *prog, int micro,
                            const char *schedule, int64_t *batch) {
  if (micro > 1) {
    if (*batch % micro != 0)
      return sl_set_error(SL_EINVAL,
                          "%s: batch %lld is not a multiple of the %d "
                          "micro-batches",
                          prog, (long long)*batch, micro);
    *batch /= micro;
    EX_CHECK(sl_graph_set_micro_batches(g, micro));
  }
  if (schedule) EX_CHECK(sl_graph_set_schedule(g, schedule));
  return SL_OK;
}

sl_tensor ex_enter_stage(sl_graph *g, const char *placement, sl_tensor t,
                         const char *sbp) {
  sl_graph_set_default_placement(g, placement);
  return sl_to_global(t, placement, sbp);
}
