/* matmul and batch_matmul: every transpose combination, leading dims,
 * several row, column and contraction axes, non-divisible and empty
 * extents against a double-precision reference; the declared signatures;
 * every bad-input error. */
#include <float.h>

#include "cpu/blas.h"
#include "test_ops_dense.h"

static uint64_t g_seed;

static const int64_t extents[] = {0, 1, 5, 17, 67};

static sl__attrs flags(int ta, int tb) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  assert_int_equal(sl__attrs_set_int(&at, "trans_a", ta), SL_OK);
  assert_int_equal(sl__attrs_set_int(&at, "trans_b", tb), SL_OK);
  return at;
}

/* C[i, j] = sum_p op(A)[i, p] op(B)[p, j] over `batch` matrix pairs, with
 * the bound 2 (k + 2) eps sum |a||b| per element (Higham, "Accuracy and
 * Stability of Numerical Algorithms", 2nd ed., section 3.5). */
static void ref_products(int ta, int tb, int64_t batch, int64_t m, int64_t n,
                         int64_t k, const float *a, const float *b,
                         int64_t b_stride, double *want, double *bound) {
  for (int64_t q = 0; q < batch; q++) {
    const float *aq = a + q * m * k, *bq = b + q * b_stride;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, abs = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = ta ? aq[p * m + i] : aq[i * k + p];
          double y = tb ? bq[j * k + p] : bq[p * n + j];
          s += x * y;
          abs += fabs(x * y);
        }
        want[(q * m + i) * n + j] = s;
        bound[(q * m + i) * n + j] = 2.0 * (double)(k + 2) * FLT_EPSILON * abs;
      }
  }
}

static void check_bounded(const char *what, const float *got,
                          const double *want, const double *bound, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= bound[i] + 1e-30))
      fail_msg("%s: element %" PRId64 ": got %.9g, want %.9g (bound %.3g)",
               what, i, got[i], want[i], bound[i]);
}

/* One matmul case: a has `lead` leading dims (of extents l0, l1) before m. */
static void matmul_case(sl_rng *r, int ta, int tb, int nlead, int64_t m,
                        int64_t n, int64_t k) {
  int64_t ad[4], nd = 0, rows = m;
  const int64_t lead[2] = {3, 2};
  for (int i = 0; i < nlead; i++)
    ad[nd++] = lead[i], rows *= lead[i];
  if (ta) {
    ad[nd++] = k;
    ad[nd++] = m;
  } else {
    ad[nd++] = m;
    ad[nd++] = k;
  }
  sl_shape as = dt_shape((int)nd, ad);
  sl_shape bs = dt_shape(2, tb ? (int64_t[]){n, k} : (int64_t[]){k, n});
  sl_host_tensor *in[2] = {dt_rand(r, &as, -1, 1), dt_rand(r, &bs, -1, 1)};
  sl__attrs at = flags(ta, tb);
  sl_host_tensor *out[1];
  dt_run_ok("matmul", &at, 2, in, 0, out);
  const sl_shape *os = sl_host_tensor_shape(out[0]);
  assert_int_equal(os->ndim, nd);
  for (int i = 0; i < nlead; i++)
    assert_int_equal(os->dims[i], lead[i]);
  assert_int_equal(os->dims[nd - 2], m);
  assert_int_equal(os->dims[nd - 1], n);
  size_t cnt = (size_t)(rows * n) + 1;
  double *want = malloc(cnt * sizeof *want),
         *bound = malloc(cnt * sizeof *bound);
  ref_products(ta, tb, 1, rows, n, k, dt_f(in[0]), dt_f(in[1]), 0, want, bound);
  char what[96];
  snprintf(what, sizeof what, "matmul ta=%d tb=%d lead=%d m=%lld n=%lld k=%lld",
           ta, tb, nlead, (long long)m, (long long)n, (long long)k);
  check_bounded(what, dt_f(out[0]), want, bound, rows * n);
  free(want);
  free(bound);
  dt_free(2, in);
  dt_free(1, out);
}

/* A matmul with `contract` contraction axes: rows, cols and ks give the
 * extents of a's rows, b's columns and the contraction axes (nr, nc, c of
 * them), stored as the flags say. Against the flattened product. */
static void matmul_nd_case(sl_rng *r, int ta, int tb, int nr,
                           const int64_t *rows, int nc, const int64_t *cols,
                           int c, const int64_t *ks) {
  int64_t ad[8], bd[8], m = 1, n = 1, k = 1;
  int na = 0, nb = 0;
  for (int i = 0; i < nr; i++)
    m *= rows[i];
  for (int j = 0; j < nc; j++)
    n *= cols[j];
  for (int t = 0; t < c; t++)
    k *= ks[t];
  for (int pass = 0; pass < 2; pass++) { /* a: rows then ks, or ks then rows */
    bool ks_now = (pass == 0) == (ta != 0);
    for (int i = 0; i < (ks_now ? c : nr); i++)
      ad[na++] = ks_now ? ks[i] : rows[i];
  }
  for (int pass = 0; pass < 2; pass++) { /* b: ks then cols, or cols then ks */
    bool ks_now = (pass == 0) == (tb == 0);
    for (int j = 0; j < (ks_now ? c : nc); j++)
      bd[nb++] = ks_now ? ks[j] : cols[j];
  }
  sl_shape as = dt_shape(na, ad), bs = dt_shape(nb, bd);
  sl_host_tensor *in[2] = {dt_rand(r, &as, -1, 1), dt_rand(r, &bs, -1, 1)};
  sl__attrs at = flags(ta, tb);
  assert_int_equal(sl__attrs_set_int(&at, "contract", c), SL_OK);
  sl_host_tensor *out[1];
  dt_run_ok("matmul", &at, 2, in, 0, out);
  const sl_shape *os = sl_host_tensor_shape(out[0]);
  assert_int_equal(os->ndim, nr + nc);
  for (int i = 0; i < nr; i++)
    assert_int_equal(os->dims[i], rows[i]);
  for (int j = 0; j < nc; j++)
    assert_int_equal(os->dims[nr + j], cols[j]);
  size_t cnt = (size_t)(m * n) + 1;
  double *want = malloc(cnt * sizeof *want),
         *bound = malloc(cnt * sizeof *bound);
  ref_products(ta, tb, 1, m, n, k, dt_f(in[0]), dt_f(in[1]), 0, want, bound);
  char what[96];
  snprintf(what, sizeof what, "matmul ta=%d tb=%d contract=%d m=%lld n=%lld",
           ta, tb, c, (long long)m, (long long)n);
  check_bounded(what, dt_f(out[0]), want, bound, m * n);
  free(want);
  free(bound);
  dt_free(2, in);
  dt_free(1, out);
}

static void test_matmul_values(void **state) {
  sl_rng r = {g_seed};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t i = 0; i < SL_ARRAY_LEN(extents); i++)
        for (size_t j = 0; j < SL_ARRAY_LEN(extents); j++)
          for (size_t q = 0; q < SL_ARRAY_LEN(extents); q++)
            matmul_case(&r, ta, tb, 0, extents[i], extents[j], extents[q]);
  /* Leading dims flatten into m. */
  for (int tb = 0; tb < 2; tb++)
    for (int lead = 1; lead <= 2; lead++) {
      matmul_case(&r, 0, tb, lead, 7, 9, 13);
      matmul_case(&r, 0, tb, lead, 0, 9, 13);
      matmul_case(&r, 0, tb, lead, 7, 9, 0);
    }
  /* Big enough for OpenBLAS's blocked paths. */
  matmul_case(&r, 0, 1, 0, 130, 257, 300);
  matmul_case(&r, 1, 0, 0, 257, 130, 300);
  /* Several row, column and contraction axes, every flag: attention's
   * [B,S,D] x [D,H,hd] and [B,S,H,hd] x [H,hd,D], and their gradients'
   * forms; with an empty axis too. */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      matmul_nd_case(&r, ta, tb, 2, (int64_t[]){3, 5}, 2, (int64_t[]){4, 2}, 1,
                     (int64_t[]){6});
      matmul_nd_case(&r, ta, tb, 2, (int64_t[]){3, 5}, 1, (int64_t[]){6}, 2,
                     (int64_t[]){4, 2});
      matmul_nd_case(&r, ta, tb, 1, (int64_t[]){7}, 1, (int64_t[]){3}, 3,
                     (int64_t[]){2, 3, 5});
      matmul_nd_case(&r, ta, tb, 1, (int64_t[]){7}, 2, (int64_t[]){0, 3}, 2,
                     (int64_t[]){2, 3});
      matmul_nd_case(&r, ta, tb, 2, (int64_t[]){2, 3}, 1, (int64_t[]){4}, 2,
                     (int64_t[]){0, 5});
    }
}

static void bmm_case(sl_rng *r, int ta, int tb, int nbatch, int64_t m,
                     int64_t n, int64_t k) {
  int64_t ad[4], bd[4], nd = 0, batch = 1;
  const int64_t bdims[2] = {2, 3};
  for (int i = 0; i < nbatch; i++)
    ad[nd] = bd[nd] = bdims[i], batch *= bdims[i], nd++;
  ad[nd] = ta ? k : m;
  ad[nd + 1] = ta ? m : k;
  bd[nd] = tb ? n : k;
  bd[nd + 1] = tb ? k : n;
  nd += 2;
  sl_shape as = dt_shape((int)nd, ad), bs = dt_shape((int)nd, bd);
  sl_host_tensor *in[2] = {dt_rand(r, &as, -1, 1), dt_rand(r, &bs, -1, 1)};
  sl__attrs at = flags(ta, tb);
  sl_host_tensor *out[1];
  dt_run_ok("batch_matmul", &at, 2, in, 0, out);
  const sl_shape *os = sl_host_tensor_shape(out[0]);
  assert_int_equal(os->ndim, nd);
  assert_int_equal(os->dims[nd - 2], m);
  assert_int_equal(os->dims[nd - 1], n);
  size_t cnt = (size_t)(batch * m * n) + 1;
  double *want = malloc(cnt * sizeof *want),
         *bound = malloc(cnt * sizeof *bound);
  ref_products(ta, tb, batch, m, n, k, dt_f(in[0]), dt_f(in[1]), k * n, want,
               bound);
  char what[96];
  snprintf(what, sizeof what,
           "batch_matmul ta=%d tb=%d batch=%lld m=%lld n=%lld k=%lld", ta, tb,
           (long long)batch, (long long)m, (long long)n, (long long)k);
  check_bounded(what, dt_f(out[0]), want, bound, batch * m * n);
  free(want);
  free(bound);
  dt_free(2, in);
  dt_free(1, out);
}

static void test_batch_matmul_values(void **state) {
  sl_rng r = {g_seed + 1};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int nb = 0; nb <= 2; nb++)
        for (size_t i = 0; i < SL_ARRAY_LEN(extents); i += 2)
          for (size_t j = 0; j < SL_ARRAY_LEN(extents); j++)
            for (size_t q = 0; q < SL_ARRAY_LEN(extents); q += 2)
              bmm_case(&r, ta, tb, nb, extents[i], extents[j], extents[q]);
}

/* 16-bit inputs (bf16 or f16, either or both, or one of each): the
 * products of the widened values, accumulated in f32. */
static sl_host_tensor *to_half(const sl_host_tensor *t, sl_dtype dt) {
  sl_host_tensor *h = dt_new(dt, sl_host_tensor_shape(t));
  uint16_t *p = sl_host_tensor_data(h);
  const float *f = sl_host_tensor_cdata(t);
  for (int64_t i = 0; i < dt_numel(h); i++)
    p[i] = dt == SL_DTYPE_F16 ? sl_f32_to_f16(f[i]) : sl_f32_to_bf16(f[i]);
  return h;
}

static void test_half_inputs(void **state) {
  sl_rng r = {g_seed + 2};
  const char *ops[2] = {"matmul", "batch_matmul"};
  /* a's and b's 16-bit dtype: bf16, f16, or bf16 with f16 */
  const sl_dtype kinds[3][2] = {{SL_DTYPE_BF16, SL_DTYPE_BF16},
                                {SL_DTYPE_F16, SL_DTYPE_F16},
                                {SL_DTYPE_BF16, SL_DTYPE_F16}};
  for (int o = 0; o < 2; o++)
    for (int kind = 0; kind < 3; kind++)
      for (int mask = kind == 2 ? 3 : 1; mask < 4; mask++)
        for (int f = 0; f < 4; f++) {
          int ta = f >> 1, tb = f & 1;
          int64_t m = 13, n = 7, k = 37, batch = o ? 3 : 1;
          int64_t ad[3] = {batch, ta ? k : m, ta ? m : k},
                  bd[3] = {batch, tb ? n : k, tb ? k : n};
          sl_shape as = o ? dt_shape(3, ad) : dt_shape(2, ad + 1);
          sl_shape bs = o ? dt_shape(3, bd) : dt_shape(2, bd + 1);
          sl_host_tensor *f32[2] = {dt_rand(&r, &as, -1, 1),
                                    dt_rand(&r, &bs, -1, 1)};
          sl_host_tensor *in[2], *wide[2];
          for (int i = 0; i < 2; i++) {
            in[i] = mask >> i & 1 ? to_half(f32[i], kinds[kind][i]) : f32[i];
            wide[i] = dt_new(SL_DTYPE_F32, sl_host_tensor_shape(f32[i]));
            for (int64_t j = 0; j < dt_numel(wide[i]); j++)
              dt_f(wide[i])[j] = (float)sl_host_tensor_get(in[i], j);
          }
          sl__attrs at = flags(ta, tb);
          sl_host_tensor *out[1];
          dt_run_ok(ops[o], &at, 2, in, 0, out);
          assert_int_equal(sl_host_tensor_dtype(out[0]), SL_DTYPE_F32);
          size_t cnt = (size_t)(batch * m * n);
          double *want = malloc(cnt * sizeof *want),
                 *bound = malloc(cnt * sizeof *bound);
          ref_products(ta, tb, batch, m, n, k, dt_f(wide[0]), dt_f(wide[1]),
                       k * n, want, bound);
          check_bounded("16-bit inputs", dt_f(out[0]), want, bound,
                        (int64_t)cnt);
          free(want);
          free(bound);
          for (int i = 0; i < 2; i++)
            if (in[i] != f32[i]) sl_host_tensor_destroy(in[i]);
          dt_free(2, f32);
          dt_free(2, wide);
          dt_free(1, out);
        }
}

/* Two bf16 inputs go to the bf16 gemm as they are (no widened copies in
 * the workspace) where this CPU has one; any other 16-bit pair is widened. */
static void test_bf16_gemm_path(void **state) {
  const char *ops[2] = {"matmul", "batch_matmul"};
  const sl_dtype kinds[3][2] = {{SL_DTYPE_BF16, SL_DTYPE_BF16},
                                {SL_DTYPE_BF16, SL_DTYPE_F32},
                                {SL_DTYPE_F16, SL_DTYPE_F16}};
  print_message("bf16 gemm: %s\n",
                sl__blas_bgemm_name() ? sl__blas_bgemm_name() : "(none)");
  for (int o = 0; o < 2; o++)
    for (int kind = 0; kind < 3; kind++) {
      const sl__op_def *op = sl__op_find(ops[o]);
      sl__kernel_ctx k;
      memset(&k, 0, sizeof k);
      sl__attrs at = flags(0, 0);
      k.attrs = &at;
      k.n_in = 2;
      k.n_out = 1;
      for (int i = 0; i < 2; i++) {
        k.in_meta[i].dtype = kinds[kind][i];
        k.in_meta[i].shape = dt_shape(o ? 3 : 2, (int64_t[]){2, 64, 64} + !o);
      }
      size_t ws = op->workspace(&k);
      bool direct = kind == 0 && sl__blas_bgemm_name();
      size_t widened = (size_t)(o ? 2 : 1) * 64 * 64 * sizeof(float);
      assert_int_equal(ws, direct ? 0 : kind == 1 ? widened : 2 * widened);
    }
}

/* ---- signatures -------------------------------------------------------- */

static void sig_text(const sl__sbp_sig *s, int n_in, int n_out, char *buf,
                     size_t size) {
  size_t len = 0;
  for (int i = 0; i < n_in + n_out; i++) {
    char t[16];
    sl_sbp_print(i < n_in ? s->in[i] : s->out[i - n_in], t, sizeof t);
    len += (size_t)snprintf(buf + len, size - len, "%s%s",
                            i == 0 ? "" : (i == n_in ? "->" : ","), t);
  }
}

/* The op's signatures for these inputs, joined by " ". */
static void sigs_of(const char *name, const sl__attrs *at, int n_in,
                    sl_host_tensor *const *in, char *buf, size_t size) {
  const sl__op_def *op = dt_op(name);
  sl__meta m[SL_OP_MAX_INPUTS];
  for (int i = 0; i < n_in; i++) {
    m[i].dtype = sl_host_tensor_dtype(in[i]);
    m[i].shape = *sl_host_tensor_shape(in[i]);
  }
  sl__sbp_sig sigs[SL_OP_MAX_SIGNATURES];
  int n = op->signatures(at, n_in, m, sigs, SL_OP_MAX_SIGNATURES);
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    char t[128];
    sig_text(&sigs[i], n_in, op->n_out, t, sizeof t);
    len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? " " : "", t);
  }
}

static void expect_sigs(const char *name, int ta, int tb, int na,
                        const int64_t *ad, int nb, const int64_t *bd,
                        const char *want) {
  sl_shape as = dt_shape(na, ad), bs = dt_shape(nb, bd);
  sl_host_tensor *in[2] = {dt_new(SL_DTYPE_F32, &as),
                           dt_new(SL_DTYPE_F32, &bs)};
  sl__attrs at = flags(ta, tb);
  char got[1024];
  sigs_of(name, &at, 2, in, got, sizeof got);
  if (strcmp(got, want) != 0)
    fail_msg("%s: got\n  %s\nwant\n  %s", name, got, want);
  dt_free(2, in);
}

static void test_signatures(void **state) {
  expect_sigs("matmul", 0, 0, 2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3},
              "S(0),B->S(0) B,S(1)->S(1) S(1),S(0)->P P,B->P B,P->P");
  expect_sigs("matmul", 1, 0, 2, (int64_t[]){7, 5}, 2, (int64_t[]){7, 3},
              "S(1),B->S(0) B,S(1)->S(1) S(0),S(0)->P P,B->P B,P->P");
  expect_sigs("matmul", 0, 1, 3, (int64_t[]){2, 5, 7}, 2, (int64_t[]){3, 7},
              "S(0),B->S(0) S(1),B->S(1) B,S(0)->S(2) S(2),S(1)->P P,B->P "
              "B,P->P");
  /* b [7, 3, 4]: two column axes */
  expect_sigs("matmul", 0, 0, 3, (int64_t[]){2, 5, 7}, 3, (int64_t[]){7, 3, 4},
              "S(0),B->S(0) S(1),B->S(1) B,S(1)->S(2) B,S(2)->S(3) "
              "S(2),S(0)->P P,B->P B,P->P");
  expect_sigs("batch_matmul", 0, 0, 4, (int64_t[]){2, 3, 5, 7}, 4,
              (int64_t[]){2, 3, 7, 4},
              "S(0),S(0)->S(0) S(1),S(1)->S(1) S(2),B->S(2) B,S(3)->S(3) "
              "S(3),S(2)->P P,B->P B,P->P");
  expect_sigs("batch_matmul", 1, 1, 3, (int64_t[]){2, 7, 5}, 3,
              (int64_t[]){2, 4, 7},
              "S(0),S(0)->S(0) S(2),B->S(1) B,S(1)->S(2) S(1),S(2)->P P,B->P "
              "B,P->P");
}

/* ---- errors ------------------------------------------------------------ */

static void expect_error(const char *name, int ta, int tb, sl_dtype da, int na,
                         const int64_t *ad, sl_dtype db, int nb,
                         const int64_t *bd, const char *needle) {
  sl_shape as = dt_shape(na, ad), bs = dt_shape(nb, bd);
  sl_host_tensor *in[2] = {dt_new(da, &as), dt_new(db, &bs)};
  sl__attrs at = flags(ta, tb);
  dt_expect_infer_error(name, &at, 2, in, needle);
  dt_free(2, in);
}

static void test_errors(void **state) {
  const sl_dtype f = SL_DTYPE_F32;
  expect_error("matmul", 0, 0, f, 1, (int64_t[]){5}, f, 2, (int64_t[]){5, 3},
               "a [5]: want at least 2 dims");
  expect_error("matmul", 0, 0, f, 2, (int64_t[]){4, 5}, f, 1, (int64_t[]){5},
               "b [5]: want at least 2 dims");
  expect_error("matmul", 0, 0, f, 2, (int64_t[]){4, 5}, f, 3,
               (int64_t[]){1, 5, 3},
               "contraction extents differ (5 vs 1; b's first axis is "
               "contracted, batch_matmul multiplies batches)");
  expect_error("matmul", 1, 0, f, 3, (int64_t[]){2, 4, 5}, f, 2,
               (int64_t[]){4, 3}, "contraction extents differ (2 vs 4)");
  expect_error("matmul", 0, 0, f, 2, (int64_t[]){4, 5}, f, 2, (int64_t[]){6, 3},
               "contraction extents differ (5 vs 6)");
  expect_error("matmul", 0, 1, f, 2, (int64_t[]){4, 5}, f, 2, (int64_t[]){5, 3},
               "contraction extents differ (5 vs 3)");
  expect_error("matmul", 0, 0, SL_DTYPE_I32, 2, (int64_t[]){4, 5}, f, 2,
               (int64_t[]){5, 3}, "a: dtype i32, want f32, bf16 or f16");
  expect_error("matmul", 0, 0, f, 2, (int64_t[]){4, 5}, SL_DTYPE_F64, 2,
               (int64_t[]){5, 3}, "b: dtype f64, want f32");
  expect_error("matmul", 2, 0, f, 2, (int64_t[]){4, 5}, f, 2, (int64_t[]){5, 3},
               "trans_a 2: want 0 or 1");
  expect_error("batch_matmul", 0, 0, f, 3, (int64_t[]){2, 4, 5}, f, 2,
               (int64_t[]){5, 3}, "want the same number of dims");
  expect_error("batch_matmul", 0, 0, f, 3, (int64_t[]){2, 4, 5}, f, 3,
               (int64_t[]){3, 5, 3}, "batch dim 0 differs");
  expect_error("batch_matmul", 0, 1, f, 3, (int64_t[]){2, 4, 5}, f, 3,
               (int64_t[]){2, 5, 3}, "contraction extents differ (5 vs 3)");
  expect_error("batch_matmul", 0, 0, f, 1, (int64_t[]){4}, f, 1, (int64_t[]){4},
               "at least 2");
  /* Wrong arity. */
  sl_shape s = dt_shape(2, (int64_t[]){2, 2});
  sl_host_tensor *one[1] = {dt_new(f, &s)};
  sl__attrs at = flags(0, 0);
  dt_expect_infer_error("matmul", &at, 1, one, "1 inputs, want 2");
  dt_free(1, one);
  /* contract: 1 to the axes both operands can spare */
  sl_shape as = dt_shape(2, (int64_t[]){4, 5}),
           bs = dt_shape(2, (int64_t[]){5, 3});
  sl_host_tensor *in[2] = {dt_new(f, &as), dt_new(f, &bs)};
  for (int c = 0; c <= 2; c += 2) {
    sl__attrs ca = flags(0, 0);
    assert_int_equal(sl__attrs_set_int(&ca, "contract", c), SL_OK);
    char want[96];
    snprintf(want, sizeof want, "contract %d wants 1 to 1 axes", c);
    dt_expect_infer_error("matmul", &ca, 2, in, want);
  }
  dt_free(2, in);
}

int main(void) {
  g_seed = dt_seed("dense matmul");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_values),
      cmocka_unit_test(test_batch_matmul_values),
      cmocka_unit_test(test_half_inputs),
      cmocka_unit_test(test_bf16_gemm_path),
      cmocka_unit_test(test_signatures),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
