/* The α-β cost model: a message of b bytes costs α + b/β on its link, with
 * separate intra-node and inter-node figures. docs/boxing.md gives the
 * formulas for every step kind. */
#include <math.h>

#include "sbp_int.h"

sl_boxing_cost sl_boxing_cost_default(sl_device_type t) {
  /* CPU: shared memory inside a node, ~25 GbE between nodes.
   * CUDA: NVLink-class links inside a node, 100 Gb/s InfiniBand between. */
  sl_boxing_cost cpu = {10.0, 1.0, 3.0, 30.0};
  sl_boxing_cost cuda = {150.0, 5.0, 12.5, 10.0};
  return t == SL_DEVICE_CUDA ? cuda : cpu;
}

sl_status sl__cost_check(const sl_boxing_cost *c) {
  const double v[4] = {c->intra_bandwidth_gbps, c->intra_latency_us,
                       c->inter_bandwidth_gbps, c->inter_latency_us};
  static const char *names[4] = {"intra_bandwidth_gbps", "intra_latency_us",
                                 "inter_bandwidth_gbps", "inter_latency_us"};
  for (int i = 0; i < 4; i++) {
    bool bandwidth = i % 2 == 0;
    if (!isfinite(v[i]) || v[i] < 0 || (bandwidth && v[i] == 0))
      return sl__fail(SL_EINVAL, "boxing cost: %s = %g must be %s", names[i],
                      v[i], bandwidth ? "positive" : "non-negative");
  }
  return SL_OK;
}

/* GB/s is 1e9 bytes per second, i.e. 1e3 bytes per µs. */
static double transfer_us(double gbps, int64_t bytes) {
  return (double)bytes / (gbps * 1e3);
}

double sl__cost_message(const sl_boxing_cost *c, bool inter, int64_t bytes) {
  if (inter)
    return c->inter_latency_us + transfer_us(c->inter_bandwidth_gbps, bytes);
  return c->intra_latency_us + transfer_us(c->intra_bandwidth_gbps, bytes);
}

double sl__cost_ring(const sl_boxing_cost *c, bool inter, int steps,
                     int64_t max_bytes) {
  if (steps <= 0) return 0.0;
  double alpha = inter ? c->inter_latency_us : c->intra_latency_us;
  double beta = inter ? c->inter_bandwidth_gbps : c->intra_bandwidth_gbps;
  return steps * alpha + transfer_us(beta, max_bytes);
}

/* All-reduce between n nodes over inter-node links (comm/coll/net_coll.c runs
 * these). A message that is not cut into chunks is received whole before
 * it is checked and reduced, which on a CPU costs about what moving it
 * did: such hops count their bytes twice. The ring pipelines its chunks,
 * so its checks and reductions hide behind the transfers. */
double sl__cost_all_reduce(const sl_boxing_cost *c, sl__all_reduce_algo a,
                           int n, int64_t bytes) {
  if (n <= 1) return 0.0;
  double alpha = c->inter_latency_us;
  double per_byte = transfer_us(c->inter_bandwidth_gbps, bytes);
  int depth = 0; /* ceil(log2 n): the tree's height */
  while ((1 << depth) < n)
    depth++;
  switch (a) {
  case SL__ALL_REDUCE_RING:
    return 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * per_byte;
  case SL__ALL_REDUCE_EXCHANGE: /* one hop, (n-1) whole buffers each way */
    return alpha + 2.0 * (n - 1) * per_byte;
  case SL__ALL_REDUCE_TREE: /* reduce up, broadcast down: 2 x depth hops */
    return 2.0 * depth * (alpha + 2.0 * per_byte);
  default: return INFINITY;
  }
}

sl__all_reduce_algo sl__cost_all_reduce_best(const sl_boxing_cost *c, int n,
                                             int64_t bytes, double *us) {
  sl__all_reduce_algo best = SL__ALL_REDUCE_RING;
  double t = sl__cost_all_reduce(c, best, n, bytes);
  for (int a = SL__ALL_REDUCE_RING + 1; a < SL__ALL_REDUCE_COUNT; a++) {
    double ta = sl__cost_all_reduce(c, (sl__all_reduce_algo)a, n, bytes);
    if (ta < t) { /* strictly: ties go to the earlier, simpler one */
      t = ta;
      best = (sl__all_reduce_algo)a;
    }
  }
  if (us) *us = t;
  return best;
}
