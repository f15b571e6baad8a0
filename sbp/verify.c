/* sl_boxing_verify: builds source shards of a random integer-valued logical
 * tensor, runs the plan with the reference executor and checks what the
 * target shards reduce to. Values stay small (|v| <= 8, partial parts in
 * [-3, 3]) so that every sum is exact in every dtype, bf16 included, for
 * partial groups of up to 32 ranks. */
#include <string.h>

#include "sbp_int.h"

typedef struct vctx {
  const sl_boxing_route *plan;
  sl_dtype dt;
  size_t es;
  sl_rng rng;
  double *logical;
  int64_t strides[SL_MAX_DIMS];
} vctx;

static bool is_unsigned(sl_dtype dt) {
  return dt == SL_DTYPE_U8 || dt == SL_DTYPE_BOOL;
}

static double rnd(vctx *v, int lo, int hi) {
  return lo + (double)sl__rng_below(&v->rng, (uint64_t)(hi - lo + 1));
}

static double random_value(vctx *v) {
  if (v->dt == SL_DTYPE_BOOL) return rnd(v, 0, 1);
  if (v->dt == SL_DTYPE_U8) return rnd(v, 0, 16);
  return rnd(v, -8, 8);
}

/* n parts whose reduction with op (in the dtype) is value. */
static void random_parts(vctx *v, sl_reduce_op op, double value, int n,
                         double *parts) {
  bool boolean = v->dt == SL_DTYPE_BOOL;
  int holder = (int)sl__rng_below(&v->rng, (uint64_t)n);
  if (op == SL_REDUCE_SUM && boolean) op = SL_REDUCE_MAX; /* sum is or */
  switch (op) {
  case SL_REDUCE_SUM:
    if (is_unsigned(v->dt)) {
      /* Non-negative parts, the remainder on the holder. */
      double left = value;
      for (int k = 0; k < n; k++) {
        parts[k] = k == holder ? 0 : rnd(v, 0, (int)left);
        left -= parts[k];
      }
      parts[holder] = left;
    } else {
      double sum = 0;
      for (int k = 0; k < n; k++) {
        parts[k] = k == holder ? 0 : rnd(v, -3, 3);
        sum += parts[k];
      }
      parts[holder] = value - sum;
    }
    break;
  case SL_REDUCE_MAX:
    for (int k = 0; k < n; k++) {
      double below =
          boolean ? (value ? rnd(v, 0, 1) : 0) : value - rnd(v, 0, 3);
      parts[k] =
          k == holder ? value : (below < 0 && is_unsigned(v->dt) ? 0 : below);
    }
    break;
  case SL_REDUCE_MIN:
    for (int k = 0; k < n; k++) {
      double above =
          boolean ? (value ? 1 : rnd(v, 0, 1)) : value + rnd(v, 0, 3);
      parts[k] = k == holder ? value : above;
    }
    break;
  }
}

static int64_t global_index(const vctx *v, const sl_slice *sl, int64_t local) {
  int64_t g = 0;
  for (int d = sl->ndim - 1; d >= 0; d--) {
    int64_t i = local % sl->extent[d];
    local /= sl->extent[d];
    g += (sl->start[d] + i) * v->strides[d];
  }
  return g;
}

/* Fills the source shards: plain values, or for a partial source random
 * parts spread over each partial group (whose members share a slice). */
static sl_status build_sources(vctx *v, void **shards) {
  const sl_placement *p = v->plan->place[0];
  const sl_nd_sbp *s = &v->plan->sbp[0];
  int n = sl_placement_size(p);
  unsigned pmask = sl__nd_sbp_mask(s, SL_SBP_PARTIAL);
  unsigned bmask = sl__nd_sbp_mask(s, SL_SBP_BROADCAST);
  sl_reduce_op op = SL_REDUCE_SUM;
  sl__nd_sbp_partial_op(s, &op);
  int *members = sl__malloc((size_t)n * 2 * sizeof(int));
  int *copies = members ? members + n : NULL;
  double *parts = sl__malloc((size_t)n * sizeof(double));
  sl_status st = members && parts ? SL_OK : SL_ENOMEM;
  for (int r = 0; r < n && st == SL_OK; r++) {
    sl_slice sl;
    sl__local_slice(&v->plan->shape, p, s, r, &sl);
    int64_t cnt = sl_slice_numel(&sl);
    shards[r] = sl__malloc(cnt ? (size_t)cnt * v->es : 1);
    if (!shards[r]) st = SL_ENOMEM;
  }
  for (int r = 0; r < n && st == SL_OK; r++) {
    /* Ranks that differ only on partial axes hold parts, those that differ
     * only on broadcast axes hold copies: r's shard is written while
     * visiting the rank with 0 on both kinds of axes. */
    int k = sl__mesh_ranks(p, r, pmask | bmask, members);
    if (members[0] != r) continue;
    k = sl__mesh_ranks(p, r, pmask, members);
    sl_slice sl;
    sl__local_slice(&v->plan->shape, p, s, r, &sl);
    int64_t cnt = sl_slice_numel(&sl);
    for (int64_t i = 0; i < cnt; i++) {
      double value = v->logical[global_index(v, &sl, i)];
      if (pmask)
        random_parts(v, op, value, k, parts);
      else
        parts[0] = value;
      for (int j = 0; j < k; j++) {
        int nc = sl__mesh_ranks(p, members[j], bmask, copies);
        for (int c = 0; c < nc; c++)
          sl_store_element(v->dt, shards[copies[c]], i, parts[j]);
      }
    }
  }
  sl__free(members);
  sl__free(parts);
  return st;
}

static double reduce2(sl_dtype dt, sl_reduce_op op, double a, double b) {
  if (dt == SL_DTYPE_BOOL && op == SL_REDUCE_SUM) op = SL_REDUCE_MAX;
  switch (op) {
  case SL_REDUCE_SUM: return a + b;
  case SL_REDUCE_MAX: return b > a ? b : a;
  case SL_REDUCE_MIN: return b < a ? b : a;
  }
  return a;
}

/* Every target element, reduced over the ranks that differ from its rank
 * only on partial axes, must be the logical value. */
static sl_status check_targets(vctx *v, void **shards, sl_boxing_mismatch *mm) {
  const sl_placement *p = v->plan->place[1];
  const sl_nd_sbp *s = &v->plan->sbp[1];
  int n = sl_placement_size(p);
  unsigned pmask = sl__nd_sbp_mask(s, SL_SBP_PARTIAL);
  sl_reduce_op op = SL_REDUCE_SUM;
  sl__nd_sbp_partial_op(s, &op);
  int *members = sl__malloc((size_t)n * sizeof(int));
  if (!members) return SL_ENOMEM;
  sl_status st = SL_OK;
  for (int r = 0; r < n && st == SL_OK; r++) {
    int k = sl__mesh_ranks(p, r, pmask, members);
    sl_slice sl;
    sl__local_slice(&v->plan->shape, p, s, r, &sl);
    int64_t cnt = sl_slice_numel(&sl);
    for (int64_t i = 0; i < cnt; i++) {
      double got = sl_load_element(v->dt, shards[members[0]], i);
      for (int j = 1; j < k; j++)
        got = reduce2(v->dt, op, got,
                      sl_load_element(v->dt, shards[members[j]], i));
      double want = v->logical[global_index(v, &sl, i)];
      if (got != want) {
        if (mm) {
          mm->rank = r;
          mm->index = i;
          mm->expected = want;
          mm->got = got;
        }
        st = sl__fail(SL_EMISMATCH,
                      "boxing verify: target rank %d, element "
                      "%lld: expected %g, got %g",
                      r, (long long)i, want, got);
        break;
      }
    }
  }
  sl__free(members);
  return st;
}

sl_status sl_boxing_verify(const sl_boxing_route *plan, uint64_t seed,
                           sl_boxing_mismatch *mismatch) {
  if (mismatch) memset(mismatch, 0, sizeof *mismatch);
  if (!plan) return sl__fail(SL_EINVAL, "boxing verify: NULL plan");
  vctx v = {0};
  v.plan = plan;
  v.dt = plan->dtype;
  v.es = sl_dtype_size(plan->dtype);
  v.rng.state = seed;
  sl_shape_strides(&plan->shape, v.strides);
  int64_t numel = sl_shape_numel(&plan->shape);
  int ns = sl_placement_size(plan->place[0]);
  int nt = sl_placement_size(plan->place[1]);
  void **src = sl__calloc((size_t)ns, sizeof(void *));
  void **dst = sl__calloc((size_t)nt, sizeof(void *));
  v.logical = sl__malloc((size_t)(numel ? numel : 1) * sizeof(double));
  sl_status st = SL_OK;
  if (!src || !dst || !v.logical) {
    st = SL_ENOMEM;
    goto out;
  }
  for (int64_t i = 0; i < numel; i++)
    v.logical[i] = random_value(&v);
  SL_CHECK_GOTO(build_sources(&v, src), st, out);
  for (int t = 0; t < nt; t++) {
    sl_slice sl;
    sl__local_slice(&plan->shape, plan->place[1], &plan->sbp[1], t, &sl);
    int64_t cnt = sl_slice_numel(&sl);
    dst[t] = sl__calloc(cnt ? (size_t)cnt : 1, v.es);
    if (!dst[t]) {
      st = SL_ENOMEM;
      goto out;
    }
  }
  SL_CHECK_GOTO(sl_boxing_execute(plan, (const void *const *)src, dst), st,
                out);
  st = check_targets(&v, dst, mismatch);
out:
  for (int r = 0; src && r < ns; r++)
    sl__free(src[r]);
  for (int t = 0; dst && t < nt; t++)
    sl__free(dst[t]);
  sl__free(src);
  sl__free(dst);
  sl__free(v.logical);
  return st;
}
