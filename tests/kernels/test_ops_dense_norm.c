/* layer_norm, embedding and their gradients: values against double
 * references (odd widths, one-element rows, empty tensors), gradients
 * against finite differences of the forward kernels, the row offsets of a
 * split table (embedding) or gradient (embedding_grad), and every bad-input
 * error. */
#include "test_ops_dense.h"

static uint64_t g_seed;

static sl__attrs eps_attr(double eps) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  assert_int_equal(sl__attrs_set_float(&at, "eps", eps), SL_OK);
  return at;
}

/* ---- layer_norm -------------------------------------------------------- */

static const int64_t ln_shapes[][4] = {
    {2, 5, 33}, {3, 2, 3, 16}, {2, 1, 1},    {2, 0, 7},
    {1, 7},     {2, 3, 1000},  {3, 2, 0, 5},
};

static void test_layer_norm_values(void **state) {
  sl_rng r = {g_seed};
  for (size_t si = 0; si < SL_ARRAY_LEN(ln_shapes); si++) {
    int nd = (int)ln_shapes[si][0];
    sl_shape s = dt_shape(nd, &ln_shapes[si][1]);
    int64_t d = s.dims[nd - 1];
    sl_shape vs = dt_shape(1, &d);
    sl_host_tensor *in[3] = {dt_rand(&r, &s, -3, 5), dt_rand(&r, &vs, 0.5f, 2),
                             dt_rand(&r, &vs, -1, 1)};
    double eps = si % 2 ? 1e-5 : 1e-3;
    sl__attrs at = eps_attr(eps);
    sl_host_tensor *out[3];
    dt_run_ok("layer_norm", &at, 3, in, 0, out);
    int64_t n = dt_numel(in[0]), rows = d ? n / d : 0;
    sl_shape rs = dt_shape(nd - 1, &ln_shapes[si][1]);
    assert_true(sl_shape_equal(sl_host_tensor_shape(out[0]), &s));
    assert_true(sl_shape_equal(sl_host_tensor_shape(out[1]), &rs));
    assert_true(sl_shape_equal(sl_host_tensor_shape(out[2]), &rs));
    double *y = malloc((size_t)(n + 1) * sizeof *y);
    double *mu = malloc((size_t)(rows + 1) * sizeof *mu);
    double *rstd = malloc((size_t)(rows + 1) * sizeof *rstd);
    const float *x = dt_f(in[0]), *g = dt_f(in[1]), *b = dt_f(in[2]);
    for (int64_t i = 0; i < rows; i++) {
      double m = 0, v = 0;
      for (int64_t j = 0; j < d; j++)
        m += x[i * d + j];
      m /= (double)d;
      for (int64_t j = 0; j < d; j++)
        v += (x[i * d + j] - m) * (x[i * d + j] - m);
      v /= (double)d;
      mu[i] = m;
      rstd[i] = 1.0 / sqrt(v + (double)(float)eps);
      for (int64_t j = 0; j < d; j++)
        y[i * d + j] = (x[i * d + j] - m) * rstd[i] * g[j] + b[j];
    }
    dt_check("layer_norm y", dt_f(out[0]), y, n, 1e-5, 1e-5);
    dt_check("layer_norm mean", dt_f(out[1]), mu, rows, 1e-6, 1e-6);
    dt_check("layer_norm rstd", dt_f(out[2]), rstd, rows, 0, 1e-5);
    free(y);
    free(mu);
    free(rstd);
    dt_free(3, in);
    dt_free(3, out);
  }
}

/* dx, dgamma, dbeta of sum(dy * y) against finite differences of the
 * forward kernel, and against their formulas in double on larger shapes
 * (where finite differences would be slow). */
static void test_layer_norm_grad(void **state) {
  sl_rng r = {g_seed + 1};
  for (size_t si = 0; si < SL_ARRAY_LEN(ln_shapes); si++) {
    int nd = (int)ln_shapes[si][0];
    sl_shape s = dt_shape(nd, &ln_shapes[si][1]);
    int64_t d = s.dims[nd - 1], n = sl_shape_numel(&s), rows = d ? n / d : 0;
    sl_shape vs = dt_shape(1, &d);
    sl_host_tensor *in[3] = {dt_rand(&r, &s, -2, 2), dt_rand(&r, &vs, 0.5f, 2),
                             dt_rand(&r, &vs, -1, 1)};
    sl__attrs at = eps_attr(1e-3);
    sl_host_tensor *fwd[3];
    dt_run_ok("layer_norm", &at, 3, in, 0, fwd);
    sl_host_tensor *dy = dt_rand(&r, &s, -1, 1);
    sl_host_tensor *gin[5] = {dy, in[0], in[1], fwd[1], fwd[2]}, *gout[3];
    dt_run_ok("layer_norm_grad", &at, 5, gin, 0, gout);
    if (n <= 200) {
      for (int w = 0; w < 3; w++)
        dt_check_fd("layer_norm", &at, 3, in, 0, dt_f(dy), w, dt_f(gout[w]),
                    1e-2f, 5e-4, 5e-3);
    }
    /* Formulas in double. */
    const float *x = dt_f(in[0]), *g = dt_f(in[1]), *e = dt_f(dy);
    const float *mu = dt_f(fwd[1]), *rs = dt_f(fwd[2]);
    double *dx = malloc((size_t)(n + 1) * sizeof *dx);
    double *dg = calloc((size_t)d + 1, sizeof *dg),
           *db = calloc((size_t)d + 1, sizeof *db);
    for (int64_t i = 0; i < rows; i++) {
      double a = 0, b = 0;
      for (int64_t j = 0; j < d; j++) {
        double xh = (x[i * d + j] - mu[i]) * (double)rs[i];
        a += g[j] * (double)e[i * d + j];
        b += g[j] * (double)e[i * d + j] * xh;
        dg[j] += e[i * d + j] * xh;
        db[j] += e[i * d + j];
      }
      a /= (double)d;
      b /= (double)d;
      for (int64_t j = 0; j < d; j++) {
        double xh = (x[i * d + j] - mu[i]) * (double)rs[i];
        dx[i * d + j] = rs[i] * (g[j] * (double)e[i * d + j] - a - xh * b);
      }
    }
    dt_check("layer_norm_grad dx", dt_f(gout[0]), dx, n, 1e-5, 1e-4);
    dt_check("layer_norm_grad dgamma", dt_f(gout[1]), dg, d, 1e-5, 1e-5);
    dt_check("layer_norm_grad dbeta", dt_f(gout[2]), db, d, 1e-5, 1e-5);
    free(dx);
    free(dg);
    free(db);
    sl_host_tensor_destroy(dy);
    dt_free(3, in);
    dt_free(3, fwd);
    dt_free(3, gout);
  }
}

static void test_layer_norm_errors(void **state) {
  sl__attrs at = eps_attr(1e-5);
  sl_shape s = dt_shape(2, (int64_t[]){3, 4}), v4 = dt_shape(1, (int64_t[]){4}),
           v5 = dt_shape(1, (int64_t[]){5}),
           s0 = dt_shape(2, (int64_t[]){3, 0}),
           v0 = dt_shape(1, (int64_t[]){0}), sc = dt_shape(0, NULL),
           r3 = dt_shape(1, (int64_t[]){3}), r2 = dt_shape(1, (int64_t[]){2});
  const sl_dtype f = SL_DTYPE_F32;
  sl_host_tensor *in[3] = {dt_new(f, &s), dt_new(f, &v5), dt_new(f, &v4)};
  dt_expect_infer_error("layer_norm", &at, 3, in,
                        "x [3,4] and gamma [5]: want gamma [4]");
  dt_free(3, in);
  in[0] = dt_new(f, &s), in[1] = dt_new(f, &v4),
  in[2] = dt_new(SL_DTYPE_F64, &v4);
  dt_expect_infer_error("layer_norm", &at, 3, in, "beta: dtype f64, want f32");
  dt_free(3, in);
  in[0] = dt_new(f, &s0), in[1] = dt_new(f, &v0), in[2] = dt_new(f, &v0);
  dt_expect_infer_error("layer_norm", &at, 3, in,
                        "x [3,0]: the normalised dim is empty");
  dt_free(3, in);
  in[0] = dt_new(f, &sc), in[1] = dt_new(f, &v4), in[2] = dt_new(f, &v4);
  dt_expect_infer_error("layer_norm", &at, 3, in, "x is a scalar");
  dt_free(3, in);
  in[0] = dt_new(f, &s), in[1] = dt_new(f, &v4), in[2] = dt_new(f, &v4);
  sl__attrs bad = eps_attr(-1.0);
  dt_expect_infer_error("layer_norm", &bad, 3, in,
                        "eps -1: want a finite value >= 0");
  dt_expect_infer_error("layer_norm", &at, 2, in, "2 inputs, want 3");
  /* The gradient: dy like x, mean and rstd like x without its last dim. */
  sl_host_tensor *dy = dt_new(f, &s), *m3 = dt_new(f, &r3),
                 *m2 = dt_new(f, &r2), *dyb = dt_new(f, &v4);
  sl_host_tensor *g[5] = {dy, in[0], in[1], m3, m2};
  dt_expect_infer_error("layer_norm_grad", &at, 5, g,
                        "x [3,4] and rstd [2]: want rstd [3]");
  g[3] = m2;
  g[4] = m3;
  dt_expect_infer_error("layer_norm_grad", &at, 5, g,
                        "x [3,4] and mean [2]: want mean [3]");
  g[0] = dyb;
  g[3] = m3;
  dt_expect_infer_error("layer_norm_grad", &at, 5, g,
                        "dy [4] and x [3,4]: shapes differ");
  sl_host_tensor_destroy(dy);
  sl_host_tensor_destroy(dyb);
  sl_host_tensor_destroy(m3);
  sl_host_tensor_destroy(m2);
  dt_free(3, in);
}

/* ---- embedding --------------------------------------------------------- */

static sl__attrs vocab_attr(int64_t v) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  assert_int_equal(sl__attrs_set_int(&at, "vocab", v), SL_OK);
  return at;
}

static const int64_t emb_ids[][4] = {
    {2, 3, 4}, {0}, {1, 0}, {1, 50}, {3, 2, 1, 3}};

static void test_embedding_values(void **state) {
  sl_rng r = {g_seed + 2};
  for (int it = 0; it < 2; it++)
    for (size_t si = 0; si < SL_ARRAY_LEN(emb_ids); si++) {
      sl_dtype idt = it ? SL_DTYPE_I64 : SL_DTYPE_I32;
      int64_t vocab = 7, d = si == 2 ? 0 : 5 + (int64_t)si;
      int ni = (int)emb_ids[si][0];
      sl_shape ts = dt_shape(2, (int64_t[]){vocab, d}),
               is = dt_shape(ni, &emb_ids[si][1]);
      sl_host_tensor *in[2] = {dt_rand(&r, &ts, -1, 1),
                               dt_ids(&r, idt, &is, vocab)};
      sl__attrs at;
      memset(&at, 0, sizeof at);
      sl_host_tensor *out[1];
      dt_run_ok("embedding", &at, 2, in, 0, out);
      const sl_shape *os = sl_host_tensor_shape(out[0]);
      assert_int_equal(os->ndim, ni + 1);
      assert_int_equal(os->dims[ni], d);
      int64_t n = dt_numel(in[1]);
      for (int64_t p = 0; p < n; p++) {
        int64_t id = (int64_t)sl_host_tensor_get(in[1], p);
        assert_memory_equal(dt_f(out[0]) + p * d, dt_f(in[0]) + id * d,
                            (size_t)d * sizeof(float));
      }
      /* The gradient: a scatter-add of dy rows, in double. */
      sl_shape ds = *os;
      sl_host_tensor *g[2] = {dt_rand(&r, &ds, -1, 1), in[1]}, *dt[1];
      sl__attrs va = vocab_attr(vocab);
      dt_run_ok("embedding_grad", &va, 2, g, 0, dt);
      assert_true(sl_shape_equal(sl_host_tensor_shape(dt[0]), &ts));
      double *want = calloc((size_t)(vocab * d) + 1, sizeof *want);
      for (int64_t p = 0; p < n; p++) {
        int64_t id = (int64_t)sl_host_tensor_get(in[1], p);
        for (int64_t j = 0; j < d; j++)
          want[id * d + j] += dt_f(g[0])[p * d + j];
      }
      dt_check("embedding_grad", dt_f(dt[0]), want, vocab * d, 1e-6, 1e-6);
      /* And against finite differences of the lookup. */
      if (n * d < 400)
        dt_check_fd("embedding", &at, 2, in, 0, dt_f(g[0]), 0, dt_f(dt[0]),
                    1e-2f, 1e-4, 1e-3);
      free(want);
      dt_free(1, g);
      dt_free(1, dt);
      dt_free(2, in);
      dt_free(1, out);
    }
}

/* A table split by rows (the S(0), B -> P signature): each part writes its
 * rows and zeros elsewhere, so the parts sum to the lookup. And the
 * gradient split by rows (B, B -> S(0)): each part holds exactly its rows. */
static void test_embedding_row_parts(void **state) {
  sl_rng r = {g_seed + 3};
  const int64_t vocab = 11, d = 6;
  sl_shape ts = dt_shape(2, (int64_t[]){vocab, d}),
           is = dt_shape(2, (int64_t[]){4, 5}),
           os = dt_shape(3, (int64_t[]){4, 5, d});
  sl_host_tensor *in[2] = {dt_rand(&r, &ts, -1, 1),
                           dt_ids(&r, SL_DTYPE_I64, &is, vocab)};
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl_host_tensor *full[1], *gfull[1];
  dt_run_ok("embedding", &at, 2, in, 0, full);
  sl_host_tensor *g[2] = {dt_rand(&r, &os, -1, 1), in[1]};
  sl__attrs va = vocab_attr(vocab);
  dt_run_ok("embedding_grad", &va, 2, g, 0, gfull);
  for (int parts = 1; parts <= 4; parts++) {
    double sum[4 * 5 * 6] = {0};
    for (int p = 0; p < parts; p++) {
      int64_t r0, nr;
      sl_split_range(vocab, parts, p, &r0, &nr);
      sl_shape ls = dt_shape(2, (int64_t[]){nr, d});
      sl_host_tensor *loc = dt_new(SL_DTYPE_F32, &ls),
                     *out = dt_new(SL_DTYPE_F32, &os);
      memcpy(dt_f(loc), dt_f(in[0]) + r0 * d, (size_t)(nr * d) * sizeof(float));
      for (int64_t i = 0; i < dt_numel(out); i++)
        dt_f(out)[i] = NAN;
      sl_host_tensor *lin[2] = {loc, in[1]};
      sl__kernel_ctx k;
      dt_ctx(&k, &at, 2, lin, 1, &out, 0);
      k.in_global[0] = ts;
      k.in_slice[0].start[0] = r0;
      k.in_partial[0] = false;
      k.out_partial[0] = true;
      assert_int_equal(sl__op_run_cpu(dt_op("embedding"), &k), SL_OK);
      for (int64_t i = 0; i < dt_numel(out); i++)
        sum[i] += dt_f(out)[i];
      /* The gradient's rows [r0, r0 + nr). */
      sl_host_tensor *gl = dt_new(SL_DTYPE_F32, &ls);
      for (int64_t i = 0; i < dt_numel(gl); i++)
        dt_f(gl)[i] = NAN;
      dt_ctx(&k, &va, 2, g, 1, &gl, 0);
      k.out_global[0] = ts;
      k.out_slice[0].start[0] = r0;
      assert_int_equal(sl__op_run_cpu(dt_op("embedding_grad"), &k), SL_OK);
      assert_memory_equal(dt_f(gl), dt_f(gfull[0]) + r0 * d,
                          (size_t)(nr * d) * sizeof(float));
      sl_host_tensor_destroy(gl);
      sl_host_tensor_destroy(loc);
      sl_host_tensor_destroy(out);
    }
    for (int64_t i = 0; i < dt_numel(full[0]); i++)
      assert_true(sum[i] == dt_f(full[0])[i]);
  }
  dt_free(1, g);
  dt_free(2, in);
  dt_free(1, full);
  dt_free(1, gfull);
}

static void test_embedding_errors(void **state) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  const sl_dtype f = SL_DTYPE_F32;
  sl_shape ts = dt_shape(2, (int64_t[]){7, 3}),
           is = dt_shape(2, (int64_t[]){2, 3}),
           t3 = dt_shape(3, (int64_t[]){7, 3, 1}),
           ds = dt_shape(3, (int64_t[]){2, 3, 3}),
           dbad = dt_shape(3, (int64_t[]){3, 2, 3});
  for (int i = 0; i < 2; i++) {
    sl_dtype idt = i ? SL_DTYPE_I64 : SL_DTYPE_I32;
    sl_host_tensor *in[2] = {dt_new(f, &ts), dt_new(idt, &is)}, *out[1];
    sl_host_tensor_set(in[1], 3, 7); /* [1,0] */
    dt_expect_einval(dt_run("embedding", &at, 2, in, 0, out),
                     "id 7 at position [1,0] out of range [0, 7)");
    sl_host_tensor_set(in[1], 3, 0);
    sl_host_tensor_set(in[1], 5, -2); /* [1,2] */
    dt_expect_einval(dt_run("embedding", &at, 2, in, 0, out),
                     "id -2 at position [1,2] out of range [0, 7)");
    sl__attrs va = vocab_attr(7);
    sl_host_tensor *g[2] = {dt_new(f, &ds), in[1]};
    dt_expect_einval(dt_run("embedding_grad", &va, 2, g, 0, out),
                     "id -2 at position [1,2] out of range [0, 7)");
    sl_host_tensor_destroy(g[0]);
    dt_free(2, in);
  }
  sl_host_tensor *in[2] = {dt_new(f, &t3), dt_new(SL_DTYPE_I32, &is)};
  dt_expect_infer_error("embedding", &at, 2, in, "table [7,3,1]: want 2 dims");
  dt_free(2, in);
  in[0] = dt_new(f, &ts), in[1] = dt_new(f, &is);
  dt_expect_infer_error("embedding", &at, 2, in,
                        "ids: dtype f32, want i32 or i64");
  dt_free(2, in);
  in[0] = dt_new(f, &dbad), in[1] = dt_new(SL_DTYPE_I32, &is);
  sl__attrs va = vocab_attr(7);
  dt_expect_infer_error("embedding_grad", &va, 2, in,
                        "dy [3,2,3] and ids [2,3]: want dy [ids..., dim]");
  dt_free(2, in);
  in[0] = dt_new(f, &ds), in[1] = dt_new(SL_DTYPE_I32, &is);
  dt_expect_infer_error("embedding_grad", &at, 2, in, "attribute vocab -1");
  dt_free(2, in);
}

int main(void) {
  g_seed = dt_seed("dense norm/embedding");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layer_norm_values),
      cmocka_unit_test(test_layer_norm_grad),
      cmocka_unit_test(test_layer_norm_errors),
      cmocka_unit_test(test_embedding_values),
      cmocka_unit_test(test_embedding_row_parts),
      cmocka_unit_test(test_embedding_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
