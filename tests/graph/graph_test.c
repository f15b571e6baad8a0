/* Graph test helpers: seeds, random data, and the finite-difference
 * gradient check through the reference interpreter. */
#include <math.h>
#include <stdlib.h>

#include "graph_test.h"

uint64_t gt_seed(const char *test) {
  const char *env = getenv("SLUICE_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : 20261121u;
  printf("[ seed     ] %s: SLUICE_TEST_SEED=%llu\n", test,
         (unsigned long long)seed);
  return seed;
}

void gt_fill_f32(sl_rng *r, float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++)
    x[i] =
        (float)(lo + (hi - lo) * (double)(sl__rng_next(r) >> 11) * 0x1.0p-53);
}

bool gt_ops_present(const char *const *ops, const char **missing) {
  for (; ops && *ops; ops++)
    if (!sl__op_find(*ops)) {
      *missing = *ops;
      return false;
    }
  return true;
}

static void fill_input(sl_rng *r, const gt_input *in, void *buf) {
  int64_t n = sl_shape_numel(&in->shape);
  if (in->range == GT_SPREAD) {
    int64_t *perm = malloc((size_t)n * sizeof *perm + 1);
    for (int64_t i = 0; i < n; i++)
      perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = (int64_t)sl__rng_below(r, (uint64_t)i + 1), t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++)
      sl_store_element(in->dt, buf, i,
                       0.05 * (double)perm[i] - 0.025 * (double)n);
    free(perm);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(sl__rng_next(r) >> 11) * 0x1.0p-53, v;
    switch (in->range) {
    case GT_POSITIVE: v = 0.5 + 1.5 * u; break;
    case GT_AWAY0: {
      double m = 0.2 + 0.8 * u;
      v = (sl__rng_next(r) & 1) ? m : -m;
      break;
    }
    case GT_INDEX: v = (double)sl__rng_below(r, (uint64_t)in->index_hi); break;
    default: v = -1.0 + 2.0 * u; break;
    }
    sl_store_element(in->dt, buf, i, v);
  }
}

static double loss_at(sl__interp *it) {
  const void *d;
  sl__meta m;
  sl__interp_set_step(it, 0);
  GT_OK(sl__interp_step(it));
  GT_OK(sl__interp_fetch(it, "loss", &d, &m));
  return sl_load_element(m.dtype, d, 0);
}

void gt_grad_check(const char *name, int n_in, const gt_input *in,
                   gt_build build, const char *const *ops) {
  const char *missing = NULL;
  if (!gt_ops_present(ops, &missing)) {
    printf("[ skipped  ] %s: op '%s' is not registered yet\n", name, missing);
    skip();
  }
  sl_rng rng = {gt_seed(name)};
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_tensor x[8];
  char nm[16];
  for (int i = 0; i < n_in; i++) {
    snprintf(nm, sizeof nm, "x%d", i);
    x[i] = sl_input(g, nm, &in[i].shape, in[i].dt, NULL, NULL);
  }
  sl_tensor y = build(g, x);
  GT_GRAPH_OK(g);
  sl_shape ys;
  GT_OK(sl_tensor_shape(y, &ys));
  /* The loss sums in f64, so its rounding does not swamp the differences. */
  sl_tensor r = sl_input(g, "r", &ys, SL_DTYPE_F64, NULL, NULL);
  sl_tensor loss =
      sl_reduce_sum(sl_mul(sl_cast(y, SL_DTYPE_F64), r), 0, NULL, false);
  GT_OK(sl_fetch(loss, "loss"));
  sl_tensor wrt[8], grads[8];
  int nw = 0, which[8];
  for (int i = 0; i < n_in; i++)
    if (in[i].dt == SL_DTYPE_F32) {
      which[nw] = i;
      wrt[nw++] = x[i];
    }
  GT_OK(sl__graph_gradients(loss, nw, wrt, grads));
  for (int k = 0; k < nw; k++) {
    snprintf(nm, sizeof nm, "g%d", k);
    GT_OK(sl_fetch(grads[k], nm));
  }
  GT_GRAPH_OK(g);

  sl__interp *it;
  GT_OK(sl__interp_create(g, &it));
  void *data[8];
  size_t bytes[8];
  for (int i = 0; i < n_in; i++) {
    bytes[i] = (size_t)sl_shape_numel(&in[i].shape) * sl_dtype_size(in[i].dt);
    data[i] = malloc(bytes[i] + 1);
    fill_input(&rng, &in[i], data[i]);
    snprintf(nm, sizeof nm, "x%d", i);
    GT_OK(sl__interp_feed(it, nm, data[i], bytes[i]));
  }
  int64_t nr = sl_shape_numel(&ys);
  double *rv = malloc((size_t)nr * sizeof *rv + 1);
  for (int64_t e = 0; e < nr; e++)
    rv[e] = -1 + 2 * (double)(sl__rng_next(&rng) >> 11) * 0x1.0p-53;
  GT_OK(sl__interp_feed(it, "r", rv, (size_t)nr * sizeof *rv));
  (void)loss_at(it);
  /* The analytic gradients at the unperturbed point, all saved first. */
  float *analytic[8];
  for (int k = 0; k < nw; k++) {
    int64_t n = sl_shape_numel(&in[which[k]].shape);
    const void *gd;
    sl__meta gm;
    snprintf(nm, sizeof nm, "g%d", k);
    GT_OK(sl__interp_fetch(it, nm, &gd, &gm));
    assert_true(sl_shape_equal(&gm.shape, &in[which[k]].shape));
    analytic[k] = malloc((size_t)n * sizeof(float) + 1);
    memcpy(analytic[k], gd, (size_t)n * sizeof(float));
  }
  double worst = 0;
  for (int k = 0; k < nw; k++) {
    int i = which[k];
    int64_t n = sl_shape_numel(&in[i].shape);
    float *xi = data[i];
    for (int64_t e = 0; e < n; e++) {
      const double h = 1e-2;
      float saved = xi[e];
      xi[e] = saved + (float)h;
      double xp = xi[e];
      snprintf(nm, sizeof nm, "x%d", i);
      GT_OK(sl__interp_feed(it, nm, xi, bytes[i]));
      double lp = loss_at(it);
      xi[e] = saved - (float)h;
      double xm = xi[e];
      GT_OK(sl__interp_feed(it, nm, xi, bytes[i]));
      double lm = loss_at(it);
      xi[e] = saved;
      GT_OK(sl__interp_feed(it, nm, xi, bytes[i]));
      /* Richardson: the h and h/2 central differences cancel the h^2
       * error term. */
      xi[e] = saved + (float)(h / 2);
      double xp2 = xi[e];
      GT_OK(sl__interp_feed(it, nm, xi, bytes[i]));
      double lp2 = loss_at(it);
      xi[e] = saved - (float)(h / 2);
      double xm2 = xi[e];
      GT_OK(sl__interp_feed(it, nm, xi, bytes[i]));
      double lm2 = loss_at(it);
      xi[e] = saved;
      GT_OK(sl__interp_feed(it, nm, xi, bytes[i]));
      double d1 = (lp - lm) / (xp - xm), d2 = (lp2 - lm2) / (xp2 - xm2);
      double num = (4 * d2 - d1) / 3, an = analytic[k][e];
      double err = fabs(num - an) / (3e-4 + 2e-3 * fabs(num));
      if (err > worst) worst = err;
      if (err > 1.0)
        fail_msg("%s: d loss / d x%d[%lld]: autodiff %.6g, finite "
                 "difference %.6g",
                 name, i, (long long)e, an, num);
    }
    free(analytic[k]);
  }
  printf("[ gradient ] %s: worst error %.3f of tolerance\n", name, worst);
  for (int i = 0; i < n_in; i++)
    free(data[i]);
  free(rv);
  sl__interp_destroy(it);
  sl_graph_destroy(g);
}
