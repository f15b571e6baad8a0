/* softmax, log_softmax, sparse_cross_entropy and their gradients: values
 * against double references on every axis, non-multiple-of-16 rows, empty
 * tensors and extreme inputs; gradients against finite differences of the
 * forward kernels; rows bit-identical wherever they sit in a shard; the
 * exp polynomial; every bad-input error. */
#include <float.h>

#include "cpu/dense_util.h"
#include "test_ops_dense.h"

static uint64_t g_seed;

static sl__attrs axis_attr(int64_t axis) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  assert_int_equal(sl__attrs_set_int(&at, "axis", axis), SL_OK);
  return at;
}

/* outer, len, inner of s around axis (already normalised). */
static void split3(const sl_shape *s, int axis, int64_t *o, int64_t *l,
                   int64_t *in) {
  *o = *in = 1;
  for (int i = 0; i < axis; i++)
    *o *= s->dims[i];
  for (int i = axis + 1; i < s->ndim; i++)
    *in *= s->dims[i];
  *l = s->dims[axis];
}

/* want = softmax or log_softmax of x along axis, in double. */
static void ref_softmax(bool log, const sl_shape *s, int axis, const float *x,
                        double *want) {
  int64_t outer, len, inner;
  split3(s, axis, &outer, &len, &inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      const float *xc = x + o * len * inner + j;
      double *wc = want + o * len * inner + j;
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < len; c++)
        m = fmax(m, xc[c * inner]);
      for (int64_t c = 0; c < len; c++)
        sum += exp(xc[c * inner] - m);
      for (int64_t c = 0; c < len; c++)
        wc[c * inner] = log ? (xc[c * inner] - m) - log1p(sum - 1.0)
                            : exp(xc[c * inner] - m) / sum;
    }
}

static const int64_t shapes[][4] = {
    /* ndim, dims... */
    {1, 1},         {1, 33},       {2, 4, 16}, {2, 3, 300}, {3, 3, 5, 7},
    {3, 2, 3, 600}, {3, 3, 17, 2}, {2, 0, 5},  {2, 3, 0},   {3, 2, 0, 3},
};

static sl_shape shape_at(size_t i) {
  return dt_shape((int)shapes[i][0], &shapes[i][1]);
}

static void test_softmax_values(void **state) {
  sl_rng r = {g_seed};
  for (int log = 0; log < 2; log++)
    for (size_t si = 0; si < SL_ARRAY_LEN(shapes); si++) {
      sl_shape s = shape_at(si);
      for (int axis = -1; axis < s.ndim; axis++) {
        sl_host_tensor *in[1] = {dt_rand(&r, &s, -8, 8)};
        sl__attrs at = axis_attr(axis);
        sl_host_tensor *out[1];
        dt_run_ok(log ? "log_softmax" : "softmax", &at, 1, in, 0, out);
        assert_true(sl_shape_equal(sl_host_tensor_shape(out[0]), &s));
        int64_t n = dt_numel(in[0]);
        double *want = malloc((size_t)(n + 1) * sizeof *want);
        ref_softmax(log, &s, axis < 0 ? s.ndim - 1 : axis, dt_f(in[0]), want);
        char what[64];
        snprintf(what, sizeof what, "%s shape %zu axis %d",
                 log ? "log_softmax" : "softmax", si, axis);
        dt_check(what, dt_f(out[0]), want, n, log ? 2e-6 : 1e-7, 4e-6);
        free(want);
        dt_free(1, in);
        dt_free(1, out);
      }
    }
}

/* Huge spreads, -inf and equal values: no overflow, no NaN. */
static void test_softmax_extremes(void **state) {
  const float x[] = {1000.0f, 0.0f,  -1000.0f, -INFINITY,
                     1000.0f, 88.0f, -88.0f};
  const int n = (int)SL_ARRAY_LEN(x);
  sl_shape s = dt_shape(1, (int64_t[]){n});
  sl_host_tensor *in[1] = {dt_new(SL_DTYPE_F32, &s)};
  memcpy(dt_f(in[0]), x, sizeof x);
  sl__attrs at = axis_attr(0);
  sl_host_tensor *out[1];
  dt_run_ok("softmax", &at, 1, in, 0, out);
  const double want[] = {0.5, 0, 0, 0, 0.5, 0, 0};
  dt_check("softmax extremes", dt_f(out[0]), want, n, 1e-7, 1e-6);
  dt_free(1, out);
  dt_run_ok("log_softmax", &at, 1, in, 0, out);
  const float *y = dt_f(out[0]);
  const double lwant[] = {-log(2.0), -1000 - log(2.0),     -2000 - log(2.0), 0,
                          -log(2.0), 88 - 1000 - log(2.0), -1088 - log(2.0)};
  for (int i = 0; i < n; i++)
    if (i == 3)
      assert_true(isinf(y[i]) && y[i] < 0);
    else
      dt_check("log_softmax extremes", &y[i], &lwant[i], 1, 1e-5, 1e-6);
  dt_free(1, out);
  dt_free(1, in);
}

/* The same row gives the same bits at any position and alignment, and a
 * column block gives the same bits whatever other columns sit beside it:
 * what a split on another axis does to a shard. */
static void test_softmax_bits_independent_of_shard(void **state) {
  sl_rng r = {g_seed + 7};
  const char *ops[2] = {"softmax", "log_softmax"};
  for (int o = 0; o < 2; o++) {
    /* Rows (axis last): the whole tensor vs rows 1.. at an odd offset. */
    sl_shape s = dt_shape(2, (int64_t[]){5, 45});
    sl_host_tensor *in[1] = {dt_rand(&r, &s, -5, 5)}, *out[1];
    sl__attrs at = axis_attr(-1);
    dt_run_ok(ops[o], &at, 1, in, 0, out);
    float *xb = calloc(4 * 45 + 3, sizeof(float)),
          *yb = calloc(4 * 45 + 3, sizeof(float));
    memcpy(xb + 3, dt_f(in[0]) + 45, 4 * 45 * sizeof(float));
    sl__kernel_ctx k;
    dt_ctx(&k, &at, 1, in, 1, out, 0);
    k.in[0] = xb + 3;
    k.out[0] = yb + 1;
    k.in_meta[0].shape.dims[0] = k.out_meta[0].shape.dims[0] = 4;
    assert_int_equal(sl__op_run_cpu(dt_op(ops[o]), &k), SL_OK);
    assert_memory_equal(yb + 1, dt_f(out[0]) + 45, 4 * 45 * sizeof(float));
    free(xb);
    free(yb);
    dt_free(1, in);
    dt_free(1, out);
    /* Columns (axis 0 of [9, 300]): columns 7..37 on their own. */
    s = dt_shape(2, (int64_t[]){9, 300});
    in[0] = dt_rand(&r, &s, -5, 5);
    at = axis_attr(0);
    dt_run_ok(ops[o], &at, 1, in, 0, out);
    sl_shape cs = dt_shape(2, (int64_t[]){9, 30});
    sl_host_tensor *cin[1] = {dt_new(SL_DTYPE_F32, &cs)}, *cout[1];
    for (int c = 0; c < 9; c++)
      memcpy(dt_f(cin[0]) + c * 30, dt_f(in[0]) + c * 300 + 7,
             30 * sizeof(float));
    dt_run_ok(ops[o], &at, 1, cin, 0, cout);
    for (int c = 0; c < 9; c++)
      assert_memory_equal(dt_f(cout[0]) + c * 30, dt_f(out[0]) + c * 300 + 7,
                          30 * sizeof(float));
    dt_free(1, cin);
    dt_free(1, cout);
    dt_free(1, in);
    dt_free(1, out);
  }
}

/* softmax_grad / log_softmax_grad against finite differences of the
 * forward ops: the gradient of sum(dy * y) with respect to x. */
static void test_softmax_grads_fd(void **state) {
  sl_rng r = {g_seed + 11};
  const char *fwd[2] = {"softmax", "log_softmax"};
  const char *bwd[2] = {"softmax_grad", "log_softmax_grad"};
  const int64_t cases[][4] = {{2, 3, 19}, {3, 2, 5, 3}, {1, 7}, {2, 4, 1}};
  for (int o = 0; o < 2; o++)
    for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
      sl_shape s = dt_shape((int)cases[c][0], &cases[c][1]);
      for (int axis = 0; axis < s.ndim; axis++) {
        sl__attrs at = axis_attr(axis);
        sl_host_tensor *x[1] = {dt_rand(&r, &s, -2, 2)}, *y[1];
        dt_run_ok(fwd[o], &at, 1, x, 0, y);
        sl_host_tensor *g[2] = {dt_rand(&r, &s, -1, 1), y[0]}, *dx[1];
        dt_run_ok(bwd[o], &at, 2, g, 0, dx);
        dt_check_fd(fwd[o], &at, 1, x, 0, dt_f(g[0]), 0, dt_f(dx[0]), 1e-2f,
                    3e-4, 3e-3);
        dt_free(1, x);
        dt_free(2, g);
        dt_free(1, dx);
      }
    }
}

/* The gradients on a non-last axis, long rows and empty tensors against
 * their formulas in double. */
static void test_softmax_grads_values(void **state) {
  sl_rng r = {g_seed + 12};
  for (int log = 0; log < 2; log++)
    for (size_t si = 0; si < SL_ARRAY_LEN(shapes); si++) {
      sl_shape s = shape_at(si);
      for (int axis = 0; axis < s.ndim; axis++) {
        sl__attrs at = axis_attr(axis);
        sl_host_tensor *x[1] = {dt_rand(&r, &s, -3, 3)}, *y[1];
        dt_run_ok(log ? "log_softmax" : "softmax", &at, 1, x, 0, y);
        sl_host_tensor *g[2] = {dt_rand(&r, &s, -1, 1), y[0]}, *dx[1];
        dt_run_ok(log ? "log_softmax_grad" : "softmax_grad", &at, 2, g, 0, dx);
        int64_t outer, len, inner, n = dt_numel(x[0]);
        split3(&s, axis, &outer, &len, &inner);
        double *want = malloc((size_t)(n + 1) * sizeof *want);
        const float *dy = dt_f(g[0]), *yy = dt_f(y[0]);
        for (int64_t o = 0; o < outer; o++)
          for (int64_t j = 0; j < inner; j++) {
            int64_t base = o * len * inner + j;
            double acc = 0;
            for (int64_t c = 0; c < len; c++)
              acc += log ? dy[base + c * inner]
                         : (double)dy[base + c * inner] * yy[base + c * inner];
            for (int64_t c = 0; c < len; c++) {
              int64_t i = base + c * inner;
              want[i] = log ? dy[i] - exp(yy[i]) * acc : yy[i] * (dy[i] - acc);
            }
          }
        dt_check(log ? "log_softmax_grad" : "softmax_grad", dt_f(dx[0]), want,
                 n, 1e-5, 1e-4);
        free(want);
        dt_free(1, x);
        dt_free(2, g);
        dt_free(1, dx);
      }
    }
}

static void test_softmax_errors(void **state) {
  sl_shape s = dt_shape(2, (int64_t[]){3, 4}),
           s2 = dt_shape(2, (int64_t[]){3, 5}), sc = dt_shape(0, NULL);
  sl_host_tensor *x[1] = {dt_new(SL_DTYPE_F32, &s)};
  sl__attrs at = axis_attr(2);
  dt_expect_infer_error("softmax", &at, 1, x,
                        "axis 2 out of range for a 2-d tensor");
  at = axis_attr(-3);
  dt_expect_infer_error("log_softmax", &at, 1, x, "axis -3 out of range");
  at = axis_attr(-2);
  sl__meta om[SL_OP_MAX_OUTPUTS];
  assert_int_equal(dt_infer("softmax", &at, 1, x, om), SL_OK); /* -2 is 0 */
  sl_host_tensor *xi[1] = {dt_new(SL_DTYPE_I32, &s)};
  dt_expect_infer_error("softmax", &at, 1, xi, "x: dtype i32, want f32");
  sl_host_tensor *xs[1] = {dt_new(SL_DTYPE_F32, &sc)};
  dt_expect_infer_error("softmax", &at, 1, xs, "scalar");
  sl_host_tensor *g[2] = {dt_new(SL_DTYPE_F32, &s), dt_new(SL_DTYPE_F32, &s2)};
  at = axis_attr(-1);
  dt_expect_infer_error("softmax_grad", &at, 2, g,
                        "dy [3,4] and y [3,5]: shapes differ");
  dt_expect_infer_error("log_softmax_grad", &at, 1, g, "1 inputs, want 2");
  dt_free(1, x);
  dt_free(1, xi);
  dt_free(1, xs);
  dt_free(2, g);
}

/* ---- exp --------------------------------------------------------------- */

static void test_exp(void **state) {
  sl_rng r = {g_seed + 3};
  double worst = 0;
  for (int i = 0; i < 200000; i++) {
    float x = dt_uniform(&r, -87.3f, 88.0f);
    double want = exp((double)x), got = sl__dense_exp(x);
    worst = fmax(worst, fabs(got - want) / want);
  }
  printf("  exp: worst relative error %.3g (%.2f ulp)\n", worst,
         worst / FLT_EPSILON);
  assert_true(worst < 4 * FLT_EPSILON);
  assert_true(sl__dense_exp(0.0f) == 1.0f);
  assert_true(sl__dense_exp(-88.0f) == 0.0f);
  assert_true(sl__dense_exp(-INFINITY) == 0.0f);
  assert_true(isnan(sl__dense_exp(NAN)));
}

/* Every vector table this CPU runs gives the bits of the scalar exp and of
 * the 16-byte table, for every length (tails of 1..15) and alignment: the
 * ops' results do not depend on the instruction set. */
static void test_rows_tables_agree(void **state) {
  sl_rng r = {g_seed + 4};
  const sl__cpu_features *f = sl__cpu_features_get();
  const sl__dense_rows *ref = sl__dense_rows_at(0);
  assert_string_equal(ref->name, "sse");
  float *x = malloc(1100 * sizeof(float)), *y = malloc(1100 * sizeof(float)),
        *z = malloc(1100 * sizeof(float)), *o1 = malloc(1100 * sizeof(float)),
        *o2 = malloc(1100 * sizeof(float)), *a1 = malloc(1100 * sizeof(float)),
        *a2 = malloc(1100 * sizeof(float));
  int checked = 0;
  for (int t = 0; t < sl__dense_rows_count(); t++) {
    const sl__dense_rows *v = sl__dense_rows_at(t);
    if (!v->usable(f)) {
      printf("  dense rows: %s not usable on this CPU\n", v->name);
      continue;
    }
    checked++;
    for (int64_t n = 1; n <= 1030; n += n < 70 ? 1 : 137) {
      int off = (int)sl__rng_below(&r, 16);
      float *xs = x + off, *ys = y + off;
      for (int64_t i = 0; i < n; i++) {
        xs[i] = dt_uniform(&r, -30, 30);
        ys[i] = dt_uniform(&r, -100, 5);
        z[i] = dt_uniform(&r, -2, 2);
      }
      ys[0] = -INFINITY;
      float m = v->row_max(xs, n);
      assert_true(m == ref->row_max(xs, n));
      float s1 = v->row_expsum(xs, n, m, o1),
            s2 = ref->row_expsum(xs, n, m, o2);
      assert_memory_equal(&s1, &s2, sizeof s1);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
      for (int64_t i = 0; i < n; i++) {
        float e = sl__dense_exp(xs[i] - m);
        assert_memory_equal(&e, &o1[i], sizeof e);
      }
      s1 = v->row_expsum(xs, n, m, NULL);
      assert_memory_equal(&s1, &s2, sizeof s1);
      s1 = v->row_sum(ys + 1, n - 1), s2 = ref->row_sum(ys + 1, n - 1);
      assert_memory_equal(&s1, &s2, sizeof s1);
      s1 = v->row_dot(xs, z, n), s2 = ref->row_dot(xs, z, n);
      assert_memory_equal(&s1, &s2, sizeof s1);
      s1 = v->row_sqdev(xs, n, 0.25f), s2 = ref->row_sqdev(xs, n, 0.25f);
      assert_memory_equal(&s1, &s2, sizeof s1);
      float g1, g2, h1, h2;
      v->row_ln_grad_sums(z, xs, ys + 1, 0.5f, 1.5f, n - 1, &g1, &h1);
      ref->row_ln_grad_sums(z, xs, ys + 1, 0.5f, 1.5f, n - 1, &g2, &h2);
      assert_memory_equal(&g1, &g2, sizeof g1);
      assert_memory_equal(&h1, &h2, sizeof h1);
      for (int64_t i = 0; i < n; i++)
        a1[i] = a2[i] = z[i];
      v->exp_cols(ys, z, o1, a1, n);
      ref->exp_cols(ys, z, o2, a2, n);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
      assert_memory_equal(a1, a2, (size_t)n * sizeof(float));
      v->exp_mul_sub(z, ys, xs, 1, o1, n);
      ref->exp_mul_sub(z, ys, xs, 1, o2, n);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
      v->exp_mul_sub(z, ys, &m, 0, o1, n);
      ref->exp_mul_sub(z, ys, &m, 0, o2, n);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
      v->row_affine(xs, o1, n, 0.75f, 1.5f, -2.0f);
      ref->row_affine(xs, o2, n, 0.75f, 1.5f, -2.0f);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
      for (int64_t i = 0; i < n; i++) { /* its identities are exact */
        float y1 = (xs[i] - 0.0f) * 1.5f - 0.0f,
              y2 = (xs[i] - 0.5f) * 1.0f - 3.0f;
        assert_true(y1 == xs[i] * 1.5f && y2 == (xs[i] - 0.5f) - 3.0f);
      }
      /* The plain loops: layer_norm_grad rows, sgd and adam chunks. */
      double dg1[1100], db1[1100], dg2[1100], db2[1100];
      for (int64_t i = 0; i < n; i++)
        dg1[i] = dg2[i] = 0.5 * i, db1[i] = db2[i] = -0.25 * i;
      v->ln_grad_row(z, xs, ys + 1, 0.5f, 1.5f, 0.25f, -0.5f, o1, dg1, db1,
                     n - 1);
      ref->ln_grad_row(z, xs, ys + 1, 0.5f, 1.5f, 0.25f, -0.5f, o2, dg2, db2,
                       n - 1);
      assert_memory_equal(o1, o2, (size_t)(n - 1) * sizeof(float));
      assert_memory_equal(dg1, dg2, (size_t)(n - 1) * sizeof(double));
      assert_memory_equal(db1, db2, (size_t)(n - 1) * sizeof(double));
      for (int variant = 0; variant < 8; variant++) {
        sl__dense_sgd sc = {0.1f,        variant & 1 ? 0.9f : 0.0f,
                            0.75f,       0.01f,
                            variant & 2, variant & 4,
                            variant & 1, variant & 1};
        v->sgd_chunk(&sc, xs, z, ys + 1, o1, a1, n - 1);
        ref->sgd_chunk(&sc, xs, z, ys + 1, o2, a2, n - 1);
        assert_memory_equal(o1, o2, (size_t)(n - 1) * sizeof(float));
        assert_memory_equal(a1, a2, (size_t)(n - 1) * sizeof(float));
        sl__dense_adam ac = {0.99f,       variant & 2 ? 0.01f : 0.0f,
                             0.1f,        0.999f,
                             0.001f,      0.3f,
                             1e-8f,       0.01f,
                             variant & 1, variant & 2};
        float vl1[1100], vl2[1100], vin[1100];
        for (int64_t i = 0; i < n; i++)
          vin[i] = fabsf(ys[i]) * 1e-3f;
        v->adam_chunk(&ac, xs, z, ys + 1, vin, o1, a1, vl1, n - 1);
        ref->adam_chunk(&ac, xs, z, ys + 1, vin, o2, a2, vl2, n - 1);
        assert_memory_equal(o1, o2, (size_t)(n - 1) * sizeof(float));
        assert_memory_equal(a1, a2, (size_t)(n - 1) * sizeof(float));
        assert_memory_equal(vl1, vl2, (size_t)(n - 1) * sizeof(float));
      }
      /* sgd_plain has sgd_chunk's bits without momentum or decay, into
       * another buffer and in place. */
      sl__dense_sgd plain = {0.1f,  0.0f,  1.0f,  0.0f,
                             false, false, false, false};
      ref->sgd_chunk(&plain, xs, z, z, o2, a2, n);
      v->sgd_plain(0.1f, xs, z, o1, n);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
      memcpy(o1, xs, (size_t)n * sizeof(float));
      v->sgd_plain(0.1f, o1, z, o1, n);
      assert_memory_equal(o1, o2, (size_t)n * sizeof(float));
    }
  }
  printf("  dense rows: %d tables checked, %s in use\n", checked,
         sl__dense_rows_get()->name);
  assert_true(sl__dense_rows_get()->usable(f));
  free(x), free(y), free(z), free(o1), free(o2), free(a1), free(a2);
}

/* ---- sparse cross-entropy ---------------------------------------------- */

/* loss = logsumexp(row) - row[label], in double. */
static void ref_ce(int64_t rows, int64_t classes, const float *x,
                   const sl_host_tensor *labels, double *want) {
  for (int64_t i = 0; i < rows; i++) {
    const float *xr = x + i * classes;
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < classes; c++)
      m = fmax(m, xr[c]);
    for (int64_t c = 0; c < classes; c++)
      s += exp(xr[c] - m);
    int64_t lab = (int64_t)sl_host_tensor_get(labels, i);
    want[i] = m + log(s) - xr[lab];
  }
}

static void ce_case(sl_rng *r, sl_dtype ldt, int ndim, const int64_t *dims,
                    float spread) {
  sl_shape s = dt_shape(ndim, dims), ls = dt_shape(ndim - 1, dims);
  int64_t classes = dims[ndim - 1], rows = sl_shape_numel(&ls);
  sl_host_tensor *in[2] = {dt_rand(r, &s, -spread, spread),
                           dt_ids(r, ldt, &ls, classes)};
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl_host_tensor *out[1];
  dt_run_ok("sparse_cross_entropy", &at, 2, in, 0, out);
  assert_true(sl_shape_equal(sl_host_tensor_shape(out[0]), &ls));
  double *want = malloc((size_t)(rows + 1) * sizeof *want);
  ref_ce(rows, classes, dt_f(in[0]), in[1], want);
  dt_check("sparse_cross_entropy", dt_f(out[0]), want, rows, 2e-5, 2e-6);
  /* The gradient against dloss * (softmax - onehot) in double. */
  sl_host_tensor *g[3] = {dt_rand(r, &ls, -1, 1), in[0], in[1]}, *dx[1];
  dt_run_ok("sparse_cross_entropy_grad", &at, 3, g, 0, dx);
  int64_t n = rows * classes;
  double *gw = malloc((size_t)(n + 1) * sizeof *gw);
  const float *x = dt_f(in[0]);
  for (int64_t i = 0; i < rows; i++) {
    double m = -INFINITY, sum = 0;
    for (int64_t c = 0; c < classes; c++)
      m = fmax(m, x[i * classes + c]);
    for (int64_t c = 0; c < classes; c++)
      sum += exp(x[i * classes + c] - m);
    int64_t lab = (int64_t)sl_host_tensor_get(in[1], i);
    for (int64_t c = 0; c < classes; c++)
      gw[i * classes + c] =
          dt_f(g[0])[i] * (exp(x[i * classes + c] - m) / sum - (c == lab));
  }
  dt_check("sparse_cross_entropy_grad", dt_f(dx[0]), gw, n, 1e-7, 1e-5);
  free(gw);
  free(want);
  dt_free(1, g);
  dt_free(1, dx);
  dt_free(2, in);
  dt_free(1, out);
}

static void test_ce_values(void **state) {
  sl_rng r = {g_seed + 5};
  for (int i = 0; i < 2; i++) {
    sl_dtype dt = i ? SL_DTYPE_I64 : SL_DTYPE_I32;
    ce_case(&r, dt, 2, (int64_t[]){7, 13}, 4);
    ce_case(&r, dt, 3, (int64_t[]){2, 3, 17}, 4);
    ce_case(&r, dt, 2, (int64_t[]){5, 1}, 4); /* one class: loss 0 */
    ce_case(&r, dt, 1, (int64_t[]){40}, 4);   /* scalar loss */
    ce_case(&r, dt, 2, (int64_t[]){0, 4}, 4); /* no rows */
    ce_case(&r, dt, 2, (int64_t[]){3, 1000}, 4);
    ce_case(&r, dt, 2, (int64_t[]){9, 33}, 500); /* large spread */
  }
}

static void test_ce_grad_fd(void **state) {
  sl_rng r = {g_seed + 6};
  sl_shape s = dt_shape(3, (int64_t[]){2, 3, 7}),
           ls = dt_shape(2, (int64_t[]){2, 3});
  sl_host_tensor *in[2] = {dt_rand(&r, &s, -2, 2),
                           dt_ids(&r, SL_DTYPE_I64, &ls, 7)};
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl_host_tensor *g[3] = {dt_rand(&r, &ls, -1, 1), in[0], in[1]}, *dx[1];
  dt_run_ok("sparse_cross_entropy_grad", &at, 3, g, 0, dx);
  dt_check_fd("sparse_cross_entropy", &at, 2, in, 0, dt_f(g[0]), 0, dt_f(dx[0]),
              1e-2f, 3e-4, 3e-3);
  dt_free(1, g);
  dt_free(1, dx);
  dt_free(2, in);
}

static void test_ce_errors(void **state) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl_shape s = dt_shape(3, (int64_t[]){2, 3, 5}),
           ls = dt_shape(2, (int64_t[]){2, 3}),
           bad = dt_shape(2, (int64_t[]){3, 2}),
           s0 = dt_shape(2, (int64_t[]){2, 0}),
           l0 = dt_shape(1, (int64_t[]){2}), sc = dt_shape(0, NULL);
  /* Labels out of range: the label and its position. */
  for (int i = 0; i < 2; i++) {
    sl_dtype dt = i ? SL_DTYPE_I64 : SL_DTYPE_I32;
    sl_host_tensor *in[2] = {dt_new(SL_DTYPE_F32, &s), dt_new(dt, &ls)};
    sl_host_tensor_set(in[1], 5, 5); /* [1,2] */
    sl_host_tensor *out[1];
    dt_expect_einval(dt_run("sparse_cross_entropy", &at, 2, in, 0, out),
                     "label 5 at position [1,2] out of range [0, 5)");
    sl_host_tensor_set(in[1], 5, 0);
    sl_host_tensor_set(in[1], 1, -1); /* [0,1] */
    dt_expect_einval(dt_run("sparse_cross_entropy", &at, 2, in, 0, out),
                     "label -1 at position [0,1]");
    sl_host_tensor *g[3] = {dt_new(SL_DTYPE_F32, &ls), in[0], in[1]};
    dt_expect_einval(dt_run("sparse_cross_entropy_grad", &at, 3, g, 0, out),
                     "label -1 at position [0,1]");
    dt_free(1, g);
    dt_free(2, in);
  }
  sl_host_tensor *in[2] = {dt_new(SL_DTYPE_F32, &s), dt_new(SL_DTYPE_F32, &ls)};
  dt_expect_infer_error("sparse_cross_entropy", &at, 2, in,
                        "labels: dtype f32, want i32 or i64");
  dt_free(2, in);
  in[0] = dt_new(SL_DTYPE_F32, &s);
  in[1] = dt_new(SL_DTYPE_I32, &bad);
  dt_expect_infer_error("sparse_cross_entropy", &at, 2, in,
                        "logits [2,3,5] and labels [3,2]: want labels [2,3]");
  sl_host_tensor *g[3] = {dt_new(SL_DTYPE_F32, &bad), in[0],
                          dt_new(SL_DTYPE_I32, &ls)};
  dt_expect_infer_error("sparse_cross_entropy_grad", &at, 3, g,
                        "dloss [3,2] and labels [2,3]: shapes differ");
  dt_free(1, g);
  sl_host_tensor_destroy(g[2]);
  dt_free(2, in);
  in[0] = dt_new(SL_DTYPE_F32, &s0);
  in[1] = dt_new(SL_DTYPE_I32, &l0);
  dt_expect_infer_error("sparse_cross_entropy", &at, 2, in, "no classes");
  dt_free(2, in);
  in[0] = dt_new(SL_DTYPE_F32, &sc);
  in[1] = dt_new(SL_DTYPE_I32, &sc);
  dt_expect_infer_error("sparse_cross_entropy", &at, 2, in,
                        "logits is a scalar");
  dt_free(2, in);
}

/* one_hot: a 1 at each label's class on one device; labels out of range
 * and bad attributes refused. (Its class-split signature is checked by
 * test_op_signatures.) */
static void test_one_hot(void **state) {
  sl_rng r = {g_seed + 7};
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl__attrs_set_int(&at, "classes", 9);
  sl_shape ls = dt_shape(2, (int64_t[]){3, 4});
  for (int i = 0; i < 2; i++) {
    sl_host_tensor *in[1] = {
        dt_ids(&r, i ? SL_DTYPE_I64 : SL_DTYPE_I32, &ls, 9)};
    sl_host_tensor *out[1];
    dt_run_ok("one_hot", &at, 1, in, 0, out);
    const sl_shape *os = sl_host_tensor_shape(out[0]);
    assert_int_equal(os->ndim, 3);
    assert_int_equal(os->dims[2], 9);
    for (int64_t p = 0; p < 12; p++)
      for (int64_t c = 0; c < 9; c++)
        assert_true(dt_f(out[0])[p * 9 + c] ==
                    (c == (int64_t)sl_host_tensor_get(in[0], p) ? 1.0f : 0.0f));
    dt_free(1, out);
    sl_host_tensor_set(in[0], 6, 9); /* [1,2] */
    dt_expect_einval(dt_run("one_hot", &at, 1, in, 0, out),
                     "label 9 at position [1,2] out of range [0, 9)");
    dt_free(1, in);
  }
  sl_host_tensor *in[1] = {dt_new(SL_DTYPE_F32, &ls)};
  dt_expect_infer_error("one_hot", &at, 1, in,
                        "labels: dtype f32, want i32 or i64");
  dt_free(1, in);
  in[0] = dt_new(SL_DTYPE_I32, &ls);
  sl__attrs_set_int(&at, "classes", 0);
  dt_expect_infer_error("one_hot", &at, 1, in, "classes 0: want at least 1");
  dt_free(1, in);
}

int main(void) {
  g_seed = dt_seed("dense softmax/loss");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax_values),
      cmocka_unit_test(test_softmax_extremes),
      cmocka_unit_test(test_softmax_bits_independent_of_shard),
      cmocka_unit_test(test_softmax_grads_fd),
      cmocka_unit_test(test_softmax_grads_values),
      cmocka_unit_test(test_softmax_errors),
      cmocka_unit_test(test_exp),
      cmocka_unit_test(test_rows_tables_agree),
      cmocka_unit_test(test_ce_values),
      cmocka_unit_test(test_ce_grad_fd),
      cmocka_unit_test(test_ce_errors),
      cmocka_unit_test(test_one_hot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
