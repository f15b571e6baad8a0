/* sgd_update, adam_update and global_norm_scale against scalar references
 * of PyTorch's formulas (torch.optim.SGD, Adam, AdamW;
 * torch.nn.utils.clip_grad_norm_) in double over several steps, outputs
 * written over their inputs, signatures, and every bad-input error. */
#include "test_ops_dense.h"

static uint64_t g_seed;

typedef struct sgd_cfg {
  double lr, momentum, dampening, weight_decay;
  int nesterov;
} sgd_cfg;

typedef struct adam_cfg {
  double lr, beta1, beta2, eps, weight_decay;
  int decoupled;
} adam_cfg;

static sl__attrs sgd_attrs(const sgd_cfg *c) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl__attrs_set_float(&at, "lr", c->lr);
  sl__attrs_set_float(&at, "momentum", c->momentum);
  sl__attrs_set_float(&at, "dampening", c->dampening);
  sl__attrs_set_float(&at, "weight_decay", c->weight_decay);
  sl__attrs_set_int(&at, "nesterov", c->nesterov);
  return at;
}

static sl__attrs adam_attrs(const adam_cfg *c) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl__attrs_set_float(&at, "lr", c->lr);
  sl__attrs_set_float(&at, "beta1", c->beta1);
  sl__attrs_set_float(&at, "beta2", c->beta2);
  sl__attrs_set_float(&at, "eps", c->eps);
  sl__attrs_set_float(&at, "weight_decay", c->weight_decay);
  sl__attrs_set_int(&at, "decoupled", c->decoupled);
  return at;
}

/* torch.optim.SGD.step for one element; buf_exists: PyTorch's momentum
 * buffer is not None. */
static void ref_sgd(const sgd_cfg *c, bool buf_exists, double *w, double g,
                    double *buf) {
  double d = g;
  if (c->weight_decay != 0) d += c->weight_decay * *w;
  if (c->momentum != 0) {
    *buf = buf_exists ? c->momentum * *buf + (1 - c->dampening) * d : d;
    d = c->nesterov ? d + c->momentum * *buf : *buf;
  }
  *w -= c->lr * d;
}

/* torch.optim.Adam / AdamW (non-amsgrad) for one element at step t >= 1. */
static void ref_adam(const adam_cfg *c, double t, double *w, double g,
                     double *m, double *v) {
  if (c->decoupled)
    *w *= 1 - c->lr * c->weight_decay;
  else if (c->weight_decay != 0)
    g += c->weight_decay * *w;
  *m = c->beta1 * *m + (1 - c->beta1) * g;
  *v = c->beta2 * *v + (1 - c->beta2) * g * g;
  double bc1 = 1 - pow(c->beta1, t), bc2 = 1 - pow(c->beta2, t);
  *w -= (c->lr / bc1) * *m / (sqrt(*v) / sqrt(bc2) + c->eps);
}

static const int64_t opt_shapes[][3] = {{1, 37}, {2, 3, 5}, {1, 0}, {0}};

static void test_sgd(void **state) {
  sl_rng r = {g_seed};
  const sgd_cfg cfgs[] = {
      {0.1, 0, 0, 0, 0},
      {0.05, 0.9, 0, 0.01, 0},
      {0.05, 0.9, 0.1, 0, 0},
      {0.02, 0.8, 0, 1e-3, 1},
  };
  for (size_t ci = 0; ci < SL_ARRAY_LEN(cfgs); ci++)
    for (size_t si = 0; si < SL_ARRAY_LEN(opt_shapes); si++) {
      const sgd_cfg *c = &cfgs[ci];
      sl_shape s = dt_shape((int)opt_shapes[si][0], &opt_shapes[si][1]);
      int64_t n = sl_shape_numel(&s);
      sl__attrs at = sgd_attrs(c);
      sl_host_tensor *w = dt_rand(&r, &s, -1, 1), *m = dt_rand(&r, &s, -1, 1);
      double *rw = malloc((size_t)n * sizeof *rw + 8),
             *rm = malloc((size_t)n * sizeof *rm + 8);
      for (int64_t i = 0; i < n; i++)
        rw[i] = dt_f(w)[i], rm[i] = dt_f(m)[i];
      for (int64_t step = 0; step < 6; step++) {
        sl_host_tensor *g = dt_rand(&r, &s, -1, 1);
        sl_host_tensor *in[3] = {w, g, m}, *out[2];
        dt_run_ok("sgd_update", &at, 3, in, step, out);
        for (int64_t i = 0; i < n; i++)
          ref_sgd(c, step > 0, &rw[i], dt_f(g)[i], &rm[i]);
        char what[64];
        snprintf(what, sizeof what, "sgd cfg %zu step %lld w", ci,
                 (long long)step);
        dt_check(what, dt_f(out[0]), rw, n, 1e-6, 1e-6);
        if (c->momentum == 0) /* the state passes through */
          assert_memory_equal(dt_f(out[1]), dt_f(m), (size_t)n * sizeof(float));
        else
          dt_check(what, dt_f(out[1]), rm, n, 1e-6, 1e-6);
        sl_host_tensor_destroy(g);
        dt_free(1, &w);
        dt_free(1, &m);
        w = out[0];
        m = out[1];
      }
      free(rw);
      free(rm);
      sl_host_tensor_destroy(w);
      sl_host_tensor_destroy(m);
    }
}

static void test_adam(void **state) {
  sl_rng r = {g_seed + 1};
  const adam_cfg cfgs[] = {
      {1e-3, 0.9, 0.999, 1e-8, 0, 0},
      {1e-2, 0.9, 0.999, 1e-8, 0.01, 0},
      {1e-2, 0.9, 0.999, 1e-8, 0.05, 1},
      {5e-3, 0.8, 0.95, 1e-6, 0, 1},
  };
  for (size_t ci = 0; ci < SL_ARRAY_LEN(cfgs); ci++)
    for (size_t si = 0; si < SL_ARRAY_LEN(opt_shapes); si++)
      for (int64_t start = 0; start <= 3; start += 3) {
        const adam_cfg *c = &cfgs[ci];
        sl_shape s = dt_shape((int)opt_shapes[si][0], &opt_shapes[si][1]);
        int64_t n = sl_shape_numel(&s);
        sl__attrs at = adam_attrs(c);
        sl_host_tensor *w = dt_rand(&r, &s, -1, 1),
                       *m = dt_new(SL_DTYPE_F32, &s),
                       *v = dt_new(SL_DTYPE_F32, &s);
        if (start) /* a restart: state from earlier steps */
          for (int64_t i = 0; i < n; i++)
            dt_f(m)[i] = dt_uniform(&r, -0.1f, 0.1f),
            dt_f(v)[i] = dt_uniform(&r, 0, 0.01f);
        size_t bytes = (size_t)n * sizeof(double) + 8;
        double *rw = malloc(bytes), *rm = malloc(bytes), *rv = malloc(bytes);
        for (int64_t i = 0; i < n; i++)
          rw[i] = dt_f(w)[i], rm[i] = dt_f(m)[i], rv[i] = dt_f(v)[i];
        for (int64_t step = start; step < start + 6; step++) {
          sl_host_tensor *g = dt_rand(&r, &s, -1, 1);
          sl_host_tensor *in[4] = {w, g, m, v}, *out[3];
          dt_run_ok("adam_update", &at, 4, in, step, out);
          for (int64_t i = 0; i < n; i++)
            ref_adam(c, (double)step + 1, &rw[i], dt_f(g)[i], &rm[i], &rv[i]);
          char what[64];
          snprintf(what, sizeof what, "adam cfg %zu step %lld", ci,
                   (long long)step);
          dt_check(what, dt_f(out[0]), rw, n, 1e-6, 1e-6);
          dt_check(what, dt_f(out[1]), rm, n, 1e-7, 1e-5);
          dt_check(what, dt_f(out[2]), rv, n, 1e-9, 1e-5);
          sl_host_tensor_destroy(g);
          dt_free(1, &w);
          dt_free(1, &m);
          dt_free(1, &v);
          w = out[0], m = out[1], v = out[2];
        }
        free(rw);
        free(rm);
        free(rv);
        sl_host_tensor_destroy(w);
        sl_host_tensor_destroy(m);
        sl_host_tensor_destroy(v);
      }
}

/* Without momentum m may be an empty placeholder: the same w_new, and an
 * empty m_new. */
static void test_sgd_without_state(void **state) {
  sl_rng r = {g_seed + 3};
  sgd_cfg c = {0.1, 0, 0, 0.01, 0};
  sl__attrs at = sgd_attrs(&c);
  sl_shape s = dt_shape(2, (int64_t[]){7, 9}), e = dt_shape(1, (int64_t[]){0});
  sl_host_tensor *in[3] = {dt_rand(&r, &s, -1, 1), dt_rand(&r, &s, -1, 1),
                           dt_rand(&r, &s, -1, 1)};
  sl_host_tensor *full[2], *none[2];
  dt_run_ok("sgd_update", &at, 3, in, 3, full);
  sl_host_tensor_destroy(in[2]);
  in[2] = dt_new(SL_DTYPE_F32, &e);
  dt_run_ok("sgd_update", &at, 3, in, 3, none);
  assert_memory_equal(dt_f(none[0]), dt_f(full[0]), 63 * sizeof(float));
  assert_true(sl_shape_equal(sl_host_tensor_shape(none[1]), &e));
  /* Its signatures keep the placeholder B. */
  sl__meta m[3];
  for (int i = 0; i < 3; i++)
    m[i].dtype = SL_DTYPE_F32, m[i].shape = *sl_host_tensor_shape(in[i]);
  sl__sbp_sig sigs[SL_OP_MAX_SIGNATURES];
  int n =
      dt_op("sgd_update")->signatures(&at, 3, m, sigs, SL_OP_MAX_SIGNATURES);
  assert_int_equal(n, 2);
  for (int i = 0; i < n; i++) {
    assert_true(sl_sbp_equal(sigs[i].in[0], sl_sbp_split(i)));
    assert_true(sl_sbp_equal(sigs[i].in[2], sl_sbp_broadcast()));
    assert_true(sl_sbp_equal(sigs[i].out[1], sl_sbp_broadcast()));
  }
  /* ZeRO's updates (attribute zero) add w whole, the gradient and w_new
   * split on each axis. */
  sl__attrs_set_int(&at, "zero", 1);
  n = dt_op("sgd_update")->signatures(&at, 3, m, sigs, SL_OP_MAX_SIGNATURES);
  assert_int_equal(n, 4);
  for (int i = 2; i < n; i++) {
    assert_true(sl_sbp_equal(sigs[i].in[0], sl_sbp_broadcast()));
    assert_true(sl_sbp_equal(sigs[i].in[1], sl_sbp_split(i - 2)));
    assert_true(sl_sbp_equal(sigs[i].out[0], sl_sbp_split(i - 2)));
  }
  /* With momentum the state must be w's shape. */
  c.momentum = 0.9;
  at = sgd_attrs(&c);
  dt_expect_infer_error("sgd_update", &at, 3, in,
                        "w [7,9] and m [0]: shapes differ");
  dt_free(3, in);
  dt_free(2, full);
  dt_free(2, none);
}

/* Outputs written over their inputs give the same values. */
static void test_updates_in_place(void **state) {
  sl_rng r = {g_seed + 2};
  sl_shape s = dt_shape(1, (int64_t[]){101});
  const char *ops[2] = {"sgd_update", "adam_update"};
  sgd_cfg sc = {0.1, 0.9, 0, 0.01, 1};
  adam_cfg ac = {1e-2, 0.9, 0.999, 1e-8, 0.05, 1};
  for (int o = 0; o < 2; o++) {
    sl__attrs at = o ? adam_attrs(&ac) : sgd_attrs(&sc);
    int n_in = o ? 4 : 3, n_out = n_in - 1;
    sl_host_tensor *in[4], *out[3];
    for (int i = 0; i < n_in; i++)
      in[i] = dt_rand(&r, &s, 0, 1);
    dt_run_ok(ops[o], &at, n_in, in, 2, out);
    sl__kernel_ctx k;
    sl_host_tensor *alias[3] = {in[0], in[2], o ? in[3] : NULL};
    dt_ctx(&k, &at, n_in, in, n_out, alias, 2);
    assert_int_equal(sl__op_run_cpu(dt_op(ops[o]), &k), SL_OK);
    for (int i = 0; i < n_out; i++)
      assert_memory_equal(dt_f(alias[i]), dt_f(out[i]), 101 * sizeof(float));
    dt_free(n_in, in);
    dt_free(n_out, out);
  }
}

/* A lazy update (a rows input): rows counted 0 keep their weight and
 * state bit for bit, the others are the dense update's, for SGD with
 * momentum and weight decay (which would move every row) and AdamW, in
 * place and not, on a [7, 5] weight with rows 1, 2, 4 and 6 untouched. */
static void test_lazy_rows(void **state) {
  sl_rng r = {g_seed + 3};
  sl_shape s = dt_shape(2, (int64_t[]){7, 5}), rs = dt_shape(1, (int64_t[]){7});
  const float counts[7] = {1, 0, 0, 3, 0, 2, 0};
  const char *ops[2] = {"sgd_update", "adam_update"};
  sgd_cfg sc = {0.1, 0.9, 0, 0.05, 0};
  adam_cfg ac = {1e-2, 0.9, 0.999, 1e-8, 0.05, 1};
  for (int o = 0; o < 2; o++)
    for (int place = 0; place < 2; place++) {
      sl__attrs at = o ? adam_attrs(&ac) : sgd_attrs(&sc);
      int n_state = o ? 4 : 3, n_out = n_state - 1;
      sl_host_tensor *in[5], *dense[3], *lazy[3];
      for (int i = 0; i < n_state; i++)
        in[i] = dt_rand(&r, &s, 0, 1);
      in[n_state] = dt_new(SL_DTYPE_F32, &rs);
      memcpy(dt_f(in[n_state]), counts, sizeof counts);
      dt_run_ok(ops[o], &at, n_state, in, 1, dense);
      if (place) { /* the outputs are the inputs' buffers */
        sl_host_tensor *copy[3];
        for (int i = 0; i < n_out; i++) {
          int src = i == 0 ? 0 : i + 1;
          copy[i] = dt_new(SL_DTYPE_F32, &s);
          memcpy(dt_f(copy[i]), dt_f(in[src]), 35 * sizeof(float));
        }
        sl__kernel_ctx k;
        sl_host_tensor *alias[3] = {in[0], in[2], o ? in[3] : NULL};
        dt_ctx(&k, &at, n_state + 1, in, n_out, alias, 1);
        assert_int_equal(sl__op_run_cpu(dt_op(ops[o]), &k), SL_OK);
        for (int i = 0; i < n_out; i++) {
          lazy[i] = dt_new(SL_DTYPE_F32, &s);
          memcpy(dt_f(lazy[i]), dt_f(alias[i]), 35 * sizeof(float));
          memcpy(dt_f(alias[i]), dt_f(copy[i]), 35 * sizeof(float));
        }
        dt_free(n_out, copy);
      } else {
        dt_run_ok(ops[o], &at, n_state + 1, in, 1, lazy);
      }
      for (int i = 0; i < n_out; i++) {
        const float *before = dt_f(in[i == 0 ? 0 : i + 1]);
        for (int row = 0; row < 7; row++) {
          const float *want =
              (counts[row] != 0 ? dt_f(dense[i]) : before) + row * 5;
          if (memcmp(dt_f(lazy[i]) + row * 5, want, 5 * sizeof(float)))
            fail_msg("%s (%s) output %d row %d: not the %s", ops[o],
                     place ? "in place" : "apart", i, row,
                     counts[row] != 0 ? "dense update" : "input");
        }
      }
      dt_free(n_state + 1, in);
      dt_free(n_out, dense);
      dt_free(n_out, lazy);
    }
}

/* loss_scale_update: with window 2, two finite steps double the scale, a
 * non-finite one (NaN or inf in the check) halves it, zeroes the count,
 * says not to keep the step and counts it skipped. */
static void test_loss_scale_update(void **state) {
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl__attrs_set_int(&at, "window", 2);
  sl_shape sc = dt_shape(0, NULL);
  const float checks[6] = {0, 0, NAN, 0, INFINITY, 0};
  const float want_scale[6] = {8, 16, 8, 8, 4, 4};
  const float want_good[6] = {1, 0, 0, 1, 0, 1};
  const float want_skipped[6] = {0, 0, 1, 1, 2, 2};
  float scale = 8, good = 0, skipped = 0;
  for (int k = 0; k < 6; k++) {
    sl_host_tensor *in[4];
    for (int i = 0; i < 4; i++)
      in[i] = dt_new(SL_DTYPE_F32, &sc);
    dt_f(in[0])[0] = scale;
    dt_f(in[1])[0] = good;
    dt_f(in[2])[0] = checks[k];
    dt_f(in[3])[0] = skipped;
    sl_host_tensor *out[4];
    dt_run_ok("loss_scale_update", &at, 4, in, k, out);
    scale = dt_f(out[0])[0];
    good = dt_f(out[1])[0];
    skipped = dt_f(out[3])[0];
    assert_true(scale == want_scale[k]);
    assert_true(good == want_good[k]);
    assert_true(skipped == want_skipped[k]);
    bool finite = checks[k] - checks[k] == 0;
    assert_true(dt_f(out[2])[0] == (finite ? 1.0f : 0.0f));
    dt_free(4, in);
    dt_free(4, out);
  }
}

/* Skipped steps: an update at step s with `skipped` = j gives the bits of
 * the update at step s - j without it (Adam's bias correction; SGD's
 * first step, which takes the gradient as the momentum buffer, with a
 * dampening that would tell it apart); j past s or fractional is an
 * error. */
static void test_skipped_steps(void **state) {
  sl_rng r = {g_seed + 5};
  sl_shape s = dt_shape(2, (int64_t[]){4, 3}), rs = dt_shape(1, (int64_t[]){4});
  sl_shape sc = dt_shape(0, NULL);
  const char *ops[2] = {"sgd_update", "adam_update"};
  sgd_cfg sg = {0.1, 0.9, 0.5, 0.01, 0};
  adam_cfg ac = {1e-2, 0.9, 0.999, 1e-8, 0.05, 1};
  const int64_t cases[][2] = {{3, 3}, {5, 2}, {7, 0}, {1, 1}};
  for (int o = 0; o < 2; o++)
    for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
      sl__attrs at = o ? adam_attrs(&ac) : sgd_attrs(&sg);
      int n_state = o ? 4 : 3, n_out = n_state - 1;
      int64_t step = cases[c][0], skipped = cases[c][1];
      sl_host_tensor *in[6], *plain[3], *counted[3];
      for (int i = 0; i < n_state; i++)
        in[i] = dt_rand(&r, &s, 0, 1);
      in[n_state] = dt_new(SL_DTYPE_F32, &rs);
      for (int i = 0; i < 4; i++)
        dt_f(in[n_state])[i] = 1.0f;
      in[n_state + 1] = dt_new(SL_DTYPE_F32, &sc);
      dt_f(in[n_state + 1])[0] = (float)skipped;
      dt_run_ok(ops[o], &at, n_state + 1, in, step - skipped, plain);
      dt_run_ok(ops[o], &at, n_state + 2, in, step, counted);
      for (int i = 0; i < n_out; i++)
        assert_memory_equal(dt_f(plain[i]), dt_f(counted[i]),
                            12 * sizeof(float));
      dt_free(n_out, plain);
      dt_free(n_out, counted);
      const float bad[2] = {(float)step + 1.0f, 0.5f};
      for (int b = 0; b < 2; b++) {
        dt_f(in[n_state + 1])[0] = bad[b];
        dt_expect_einval(dt_run(ops[o], &at, n_state + 2, in, step, plain),
                         "skipped steps");
      }
      dt_free(n_state + 2, in);
    }
}

static void test_optim_signatures(void **state) {
  sl_shape s = dt_shape(2, (int64_t[]){3, 5});
  sl__meta m[4];
  for (int i = 0; i < 4; i++)
    m[i].dtype = SL_DTYPE_F32, m[i].shape = s;
  sl__sbp_sig sigs[SL_OP_MAX_SIGNATURES];
  sgd_cfg sc = {0.1, 0, 0, 0, 0};
  sl__attrs at = sgd_attrs(&sc);
  const char *ops[2] = {"sgd_update", "adam_update"};
  for (int o = 0; o < 2; o++) {
    const sl__op_def *op = dt_op(ops[o]);
    int n = op->signatures(&at, op->min_in, m, sigs, SL_OP_MAX_SIGNATURES);
    assert_int_equal(n, 2);
    for (int a = 0; a < 2; a++) {
      for (int i = 0; i < op->min_in; i++)
        assert_true(sl_sbp_equal(sigs[a].in[i], sl_sbp_split(a)));
      for (int i = 0; i < op->n_out; i++)
        assert_true(sl_sbp_equal(sigs[a].out[i], sl_sbp_split(a)));
    }
  }
  assert_null(dt_op("global_norm_scale")->signatures); /* all-B only */
}

static void test_optim_errors(void **state) {
  sl_shape s = dt_shape(2, (int64_t[]){3, 5}),
           t = dt_shape(2, (int64_t[]){5, 3});
  const sl_dtype f = SL_DTYPE_F32;
  sgd_cfg sc = {0.1, 0.9, 0, 0, 0};
  sl__attrs at = sgd_attrs(&sc);
  sl_host_tensor *in[4] = {dt_new(f, &s), dt_new(f, &t), dt_new(f, &s),
                           dt_new(f, &s)};
  dt_expect_infer_error("sgd_update", &at, 3, in,
                        "w [3,5] and g [5,3]: shapes differ");
  dt_expect_infer_error("adam_update", &at, 4, in,
                        "w [3,5] and g [5,3]: shapes differ");
  sl_host_tensor_destroy(in[1]);
  in[1] = dt_new(f, &s);
  sl_host_tensor_destroy(in[2]);
  in[2] = dt_new(SL_DTYPE_F64, &s);
  dt_expect_infer_error("sgd_update", &at, 3, in, "m: dtype f64, want f32");
  sl_host_tensor_destroy(in[2]);
  in[2] = dt_new(f, &s);
  dt_expect_infer_error("sgd_update", &at, 4, in,
                        "rows [3,5] for w [3,5]: want one count per row of w");
  sgd_cfg bad[] = {{-0.1, 0, 0, 0, 0},
                   {0.1, -0.5, 0, 0, 0},
                   {0.1, 0, 0, -1, 0},
                   {0.1, 0, 0, 0, 1},
                   {0.1, 0.9, 0.1, 0, 1}};
  const char *msgs[] = {"lr -0.1: want a value in [0, inf)", "momentum -0.5",
                        "weight_decay -1", "nesterov momentum needs",
                        "nesterov momentum needs"};
  for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
    sl__attrs b = sgd_attrs(&bad[i]);
    dt_expect_infer_error("sgd_update", &b, 3, in, msgs[i]);
  }
  adam_cfg abad[] = {{1e-3, 1.0, 0.999, 1e-8, 0, 0},
                     {1e-3, 0.9, -0.1, 1e-8, 0, 0},
                     {1e-3, 0.9, 0.999, -1, 0, 0},
                     {1e-3, 0.9, 0.999, 1e-8, 0, 2},
                     {NAN, 0.9, 0.999, 1e-8, 0, 0}};
  const char *amsgs[] = {"beta1 1: want a value in [0, 1)", "beta2 -0.1",
                         "eps -1", "decoupled 2: want 0 (Adam) or 1 (AdamW)",
                         "lr nan"};
  for (size_t i = 0; i < SL_ARRAY_LEN(abad); i++) {
    sl__attrs b = adam_attrs(&abad[i]);
    dt_expect_infer_error("adam_update", &b, 4, in, amsgs[i]);
  }
  /* A negative step has no bias correction. */
  adam_cfg ac = {1e-3, 0.9, 0.999, 1e-8, 0, 0};
  sl__attrs a = adam_attrs(&ac);
  sl_host_tensor *out[3];
  dt_expect_einval(dt_run("adam_update", &a, 4, in, -1, out),
                   "step -1 is negative");
  dt_free(4, in);
}

/* ---- global_norm_scale ------------------------------------------------- */

static float gns(int n, const double *sums, int scalar_ndim, double max_norm) {
  sl_shape s = dt_shape(scalar_ndim, (int64_t[]){1});
  sl_host_tensor *in[SL_OP_MAX_INPUTS], *out[1];
  for (int i = 0; i < n; i++) {
    in[i] = dt_new(SL_DTYPE_F32, &s);
    dt_f(in[i])[0] = (float)sums[i];
  }
  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl__attrs_set_float(&at, "max_norm", max_norm);
  dt_run_ok("global_norm_scale", &at, n, in, 0, out);
  assert_int_equal(sl_host_tensor_shape(out[0])->ndim, 0);
  float v = dt_f(out[0])[0];
  dt_free(n, in);
  dt_free(1, out);
  return v;
}

static void test_global_norm_scale(void **state) {
  /* clip_coef = max_norm / (total_norm + 1e-6), clamped to 1. */
  const double a[] = {4.0, 5.0};
  assert_float_equal(gns(2, a, 0, 1.0), 1.0 / (3.0 + 1e-6), 1e-7);
  assert_float_equal(gns(2, a, 1, 1.5), 1.5 / (3.0 + 1e-6), 1e-7);
  assert_true(gns(2, a, 0, 10.0) == 1.0f);
  assert_true(gns(2, a, 0, 3.0) ==
              3.0f / (3.0f + 1e-6f)); /* in f32, as torch */
  const double z[] = {0.0};
  assert_true(gns(1, z, 0, 1.0) == 1.0f);
  double many[SL_OP_MAX_INPUTS];
  for (int i = 0; i < SL_OP_MAX_INPUTS; i++)
    many[i] = 0.25 * (i + 1);
  /* sum = 0.25 * 136 = 34 */
  assert_float_equal(gns(SL_OP_MAX_INPUTS, many, 0, 2.0), 2.0 / sqrt(34.0),
                     1e-6);
  const double nan_in[] = {1.0, NAN};
  assert_true(isnan(gns(2, nan_in, 0, 1.0)));

  sl__attrs at;
  memset(&at, 0, sizeof at);
  sl_shape s = dt_shape(0, NULL), v2 = dt_shape(1, (int64_t[]){2});
  sl_host_tensor *in[2] = {dt_new(SL_DTYPE_F32, &s), dt_new(SL_DTYPE_F32, &v2)};
  dt_expect_infer_error("global_norm_scale", &at, 1, in,
                        "max_norm nan: want a finite value > 0");
  sl__attrs_set_float(&at, "max_norm", 0.0);
  dt_expect_infer_error("global_norm_scale", &at, 1, in, "max_norm 0");
  sl__attrs_set_float(&at, "max_norm", 1.0);
  dt_expect_infer_error("global_norm_scale", &at, 2, in,
                        "input 1 [2]: want a scalar");
  dt_expect_infer_error("global_norm_scale", &at, 0, in, "no inputs");
  sl_host_tensor_destroy(in[1]);
  in[1] = dt_new(SL_DTYPE_F64, &s);
  dt_expect_infer_error("global_norm_scale", &at, 2, in,
                        "input 1: dtype f64, want f32");
  dt_free(2, in);
}

int main(void) {
  g_seed = dt_seed("dense optimizers");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_sgd_without_state),
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_updates_in_place),
      cmocka_unit_test(test_lazy_rows),
      cmocka_unit_test(test_loss_scale_update),
      cmocka_unit_test(test_skipped_steps),
      cmocka_unit_test(test_optim_signatures),
      cmocka_unit_test(test_optim_errors),
      cmocka_unit_test(test_global_norm_scale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
