/* Variable initializers: counter-based random values keyed by (seed,
 * global element index), so any shard of any layout holds the same values
 * as the whole tensor would. */
#include <math.h>
#include <string.h>

#include "graph_priv.h"

/* 53 random bits of element idx as a double in [0, 1); stream `lane`
 * separates the two uniforms a normal needs. */
static double unit(uint64_t seed, int64_t idx, int lane) {
  uint64_t key = sl__mix64(seed ^ 0x5be5b0a7d1f3c2e1ull);
  uint64_t bits = sl__mix64(key + (uint64_t)idx * 2u + (uint64_t)lane);
  return (double)(bits >> 11) * 0x1.0p-53;
}

/* Box-Muller from two uniforms; 1 - u keeps the log's argument in (0, 1]. */
static double normal01(uint64_t seed, int64_t idx) {
  double u1 = 1.0 - unit(seed, idx, 0), u2 = unit(seed, idx, 1);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

static void fans(const sl_shape *s, double *fan_in, double *fan_out) {
  if (s->ndim == 0) {
    *fan_in = *fan_out = 1;
  } else if (s->ndim == 1) {
    *fan_in = *fan_out = (double)s->dims[0];
  } else {
    *fan_out = (double)s->dims[s->ndim - 1];
    double in = 1;
    for (int i = 0; i < s->ndim - 1; i++)
      in *= (double)s->dims[i];
    *fan_in = in;
  }
  if (*fan_in < 1) *fan_in = 1;
  if (*fan_out < 1) *fan_out = 1;
}

sl_status sl__g_init_check(const sl_init *init, sl_dtype dt) {
  if ((int)init->kind < SL_INIT_ZEROS ||
      (int)init->kind > SL_INIT_KAIMING_NORMAL)
    return sl__fail(SL_EINVAL, "unknown initializer kind %d", (int)init->kind);
  if (!isfinite(init->a) || !isfinite(init->b))
    return sl__fail(SL_EINVAL, "initializer parameters must be finite");
  bool random = init->kind >= SL_INIT_UNIFORM;
  if (random && !sl_dtype_is_float(dt))
    return sl__fail(SL_EINVAL,
                    "a random initializer needs a float dtype, "
                    "not %s",
                    sl_dtype_name(dt));
  if (init->kind == SL_INIT_UNIFORM && !(init->a < init->b))
    return sl__fail(SL_EINVAL, "uniform range [%g, %g) is empty", init->a,
                    init->b);
  if (init->kind == SL_INIT_NORMAL && init->b < 0)
    return sl__fail(SL_EINVAL, "normal std %g is negative", init->b);
  if (init->kind >= SL_INIT_XAVIER_UNIFORM && init->a < 0)
    return sl__fail(SL_EINVAL, "gain %g is negative", init->a);
  return SL_OK;
}

sl_status sl__g_init_fill(const sl_init *init, const sl_shape *global,
                          sl_dtype dt, const sl_slice *slice, void *buf) {
  double fan_in, fan_out;
  fans(global, &fan_in, &fan_out);
  double lo = 0, hi = 0, mean = 0, std = 0;
  bool uniform = false, normal = false;
  switch (init->kind) {
  case SL_INIT_ZEROS: break;
  case SL_INIT_CONSTANT: lo = init->a; break;
  case SL_INIT_UNIFORM: lo = init->a, hi = init->b, uniform = true; break;
  case SL_INIT_NORMAL: mean = init->a, std = init->b, normal = true; break;
  case SL_INIT_XAVIER_UNIFORM:
    hi = init->a * sqrt(6.0 / (fan_in + fan_out)), lo = -hi, uniform = true;
    break;
  case SL_INIT_XAVIER_NORMAL:
    std = init->a * sqrt(2.0 / (fan_in + fan_out)), normal = true;
    break;
  case SL_INIT_KAIMING_UNIFORM:
    hi = init->a * sqrt(3.0 / fan_in), lo = -hi, uniform = true;
    break;
  case SL_INIT_KAIMING_NORMAL:
    std = init->a / sqrt(fan_in), normal = true;
    break;
  default:
    return sl__fail(SL_EINVAL, "unknown initializer kind %d", (int)init->kind);
  }
  int64_t n = sl_slice_numel(slice);
  if (n == 0) return SL_OK;
  int nd = global->ndim;
  int64_t gstride[SL_MAX_DIMS], idx[SL_MAX_DIMS] = {0};
  sl_shape_strides(global, gstride);
  for (int64_t i = 0; i < n; i++) {
    int64_t flat = 0;
    for (int d = 0; d < nd; d++)
      flat += (slice->start[d] + idx[d]) * gstride[d];
    double v = lo;
    if (uniform) v = lo + (hi - lo) * unit(init->seed, flat, 0);
    if (normal) v = mean + std * normal01(init->seed, flat);
    sl_store_element(dt, buf, i, v);
    for (int d = nd - 1; d >= 0 && ++idx[d] == slice->extent[d]; d--)
      idx[d] = 0;
  }
  return SL_OK;
}

sl_status sl__graph_variable_init(const sl_graph *g, int32_t node, int rank,
                                  void *buf) {
  if (node < 0 || node >= g->n_nodes ||
      g->nodes[node]->n.kind != SL__NODE_VARIABLE)
    return sl__fail(SL_EINVAL, "node %d is not a variable", (int)node);
  const sl__gnode *n = g->nodes[node];
  const sl__value *v = g->values[n->n.out[0]];
  if (rank < 0 || rank >= sl_placement_size(v->placement))
    return sl__fail(SL_EINVAL, "variable '%s': rank %d out of range", n->n.name,
                    rank);
  sl_slice s;
  sl_status st =
      sl_local_slice(&v->meta.shape, v->placement, &v->sbp, rank, &s);
  if (st != SL_OK) return sl__fail_context(st, "variable '%s': ", n->n.name);
  return sl__g_init_fill(&n->init, &v->meta.shape, v->meta.dtype, &s, buf);
}
