/* Optimizers: SGD (momentum, weight decay), Adam and AdamW steps and
 * clipping by global norm, each against a hand computation in double;
 * state variables; sl_minimize's errors. */
#include <math.h>

#include "graph_priv.h"
#include "graph_test.h"

#define N 5

/* loss = mean((w - t)^2) over N elements: dloss/dw = 2 (w - t) / N. */
typedef struct rig {
  sl_graph *g;
  sl__interp *it;
  double t[N];
} rig;

static void rig_build(rig *r, const sl_optimizer *opt) {
  GT_OK(sl_graph_create(&r->g));
  GT_OK(sl_graph_set_default_placement(r->g, "cpu:0-1"));
  sl_shape s = SL_SHAPE(N);
  sl_tensor w = sl_variable(r->g, "w", &s, SL_DTYPE_F32,
                            sl_init_uniform(-1, 1, 5), NULL, "S(0)");
  sl_tensor t = sl_input(r->g, "t", &s, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor loss = sl_mse_loss(w, t);
  GT_OK(sl_minimize(loss, opt));
  GT_OK(sl_fetch(loss, "loss"));
  GT_OK(sl__graph_compile(r->g));
  GT_OK(sl__interp_create(r->g, &r->it));
  float tv[N];
  for (int i = 0; i < N; i++) {
    tv[i] = (float)(0.3 * i - 0.5);
    r->t[i] = tv[i];
  }
  GT_OK(sl__interp_feed(r->it, "t", tv, sizeof tv));
}

static void rig_weights(rig *r, double *w) {
  void *d;
  GT_OK(sl__interp_variable(r->it, "w", &d, NULL));
  for (int i = 0; i < N; i++)
    w[i] = ((float *)d)[i];
}

static void rig_destroy(rig *r) {
  sl__interp_destroy(r->it);
  sl_graph_destroy(r->g);
}

static void assert_close(const double *got, const double *want, double tol,
                         const char *what, int step) {
  for (int i = 0; i < N; i++)
    if (fabs(got[i] - want[i]) > tol * (1 + fabs(want[i])))
      fail_msg("%s step %d: w[%d] = %.8g, hand computation %.8g", what, step, i,
               got[i], want[i]);
}

static void test_sgd(void **state) {
  GT_REQUIRE_OPS("sgd_update", "sub", "square", "reduce_mean", "mul");
  const struct {
    double lr, mom, wd;
  } cases[] = {{0.1, 0, 0}, {0.05, 0.9, 0}, {0.2, 0.5, 0.01}};
  for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
    sl_optimizer opt = sl_optimizer_sgd(cases[c].lr, cases[c].mom);
    opt.weight_decay = cases[c].wd;
    rig r;
    rig_build(&r, &opt);
    double w[N], m[N] = {0}, got[N];
    rig_weights(&r, w);
    for (int step = 0; step < 4; step++) {
      GT_OK(sl__interp_step(r.it));
      for (int i = 0; i < N; i++) {
        double d = 2 * (w[i] - r.t[i]) / N + cases[c].wd * w[i];
        if (cases[c].mom > 0) {
          m[i] = step == 0 ? d : cases[c].mom * m[i] + d;
          d = m[i];
        }
        w[i] -= cases[c].lr * d;
      }
      rig_weights(&r, got);
      assert_close(got, w, 1e-5, "sgd", step);
    }
    /* The momentum buffer is a variable of the weight's layout; without
     * momentum it is an empty broadcast tensor (no state, as in PyTorch). */
    int32_t mi = sl__graph_find(r.g, "w.momentum");
    assert_true(mi >= 0);
    const sl__node *mn = sl__graph_node(r.g, mi);
    assert_int_equal(mn->kind, SL__NODE_VARIABLE);
    assert_true(mn->optimizer && mn->update >= 0);
    const sl__node *wn = sl__graph_node(r.g, sl__graph_find(r.g, "w"));
    const sl__value *mv = sl__graph_value(r.g, mn->out[0]);
    const sl__value *wv = sl__graph_value(r.g, wn->out[0]);
    assert_true(mv->placement == wv->placement);
    if (cases[c].mom > 0) {
      assert_true(sl_nd_sbp_equal(&mv->sbp, &wv->sbp));
      assert_true(sl_shape_equal(&mv->meta.shape, &wv->meta.shape));
    } else {
      assert_int_equal(sl_shape_numel(&mv->meta.shape), 0);
      for (int a = 0; a < mv->sbp.ndim; a++)
        assert_int_equal(mv->sbp.sbp[a].kind, SL_SBP_BROADCAST);
    }
    rig_destroy(&r);
  }
}

static void test_adam(void **state) {
  GT_REQUIRE_OPS("adam_update", "sub", "square", "reduce_mean", "mul");
  for (int decoupled = 0; decoupled < 2; decoupled++) {
    sl_optimizer opt =
        decoupled ? sl_optimizer_adamw(0.05, 0.1) : sl_optimizer_adam(0.05);
    if (!decoupled) opt.weight_decay = 0.02;
    rig r;
    rig_build(&r, &opt);
    double w[N], m[N] = {0}, v[N] = {0}, got[N];
    rig_weights(&r, w);
    for (int step = 0; step < 5; step++) {
      GT_OK(sl__interp_step(r.it));
      int t = step + 1;
      for (int i = 0; i < N; i++) {
        double g = 2 * (w[i] - r.t[i]) / N;
        if (decoupled)
          w[i] *= 1 - opt.lr * opt.weight_decay;
        else
          g += opt.weight_decay * w[i];
        m[i] = opt.beta1 * m[i] + (1 - opt.beta1) * g;
        v[i] = opt.beta2 * v[i] + (1 - opt.beta2) * g * g;
        double mh = m[i] / (1 - pow(opt.beta1, t));
        double vh = v[i] / (1 - pow(opt.beta2, t));
        w[i] -= opt.lr * mh / (sqrt(vh) + opt.eps);
      }
      rig_weights(&r, got);
      assert_close(got, w, 2e-5, decoupled ? "adamw" : "adam", step);
    }
    assert_true(sl__graph_find(r.g, "w.m") >= 0);
    assert_true(sl__graph_find(r.g, "w.v") >= 0);
    rig_destroy(&r);
  }
}

/* Two weights, clipped together: g_i * min(1, c / (||(g_1, g_2)|| + 1e-6)). */
static void test_clip(void **state) {
  GT_REQUIRE_OPS("sgd_update", "global_norm_scale", "reduce_sum", "square",
                 "mul", "add");
  const double clips[] = {0.05, 100};
  for (size_t c = 0; c < SL_ARRAY_LEN(clips); c++) {
    sl_graph *g;
    GT_OK(sl_graph_create(&g));
    sl_shape s3 = SL_SHAPE(3), s2 = SL_SHAPE(2);
    sl_tensor a =
        sl_variable(g, "a", &s3, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
    sl_tensor b =
        sl_variable(g, "b", &s2, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
    sl_tensor ca = sl_input(g, "ca", &s3, SL_DTYPE_F32, NULL, NULL);
    sl_tensor cb = sl_input(g, "cb", &s2, SL_DTYPE_F32, NULL, NULL);
    /* loss = sum(a * ca) + sum(b * cb): gradients ca and cb exactly. */
    sl_tensor loss = sl_add(sl_reduce_sum(sl_mul(a, ca), 0, NULL, false),
                            sl_reduce_sum(sl_mul(b, cb), 0, NULL, false));
    sl_optimizer opt = sl_optimizer_sgd(1.0, 0);
    opt.clip_norm = clips[c];
    GT_OK(sl_minimize(loss, &opt));
    sl__interp *it;
    GT_OK(sl__interp_create(g, &it));
    float av[3] = {0.3f, -0.4f, 0.5f}, bv[2] = {1.2f, -0.1f};
    GT_OK(sl__interp_feed(it, "ca", av, sizeof av));
    GT_OK(sl__interp_feed(it, "cb", bv, sizeof bv));
    GT_OK(sl__interp_step(it));
    double norm = 0;
    for (int i = 0; i < 3; i++)
      norm += (double)av[i] * av[i];
    for (int i = 0; i < 2; i++)
      norm += (double)bv[i] * bv[i];
    norm = sqrt(norm);
    double scale = fmin(1.0, clips[c] / (norm + 1e-6));
    void *d;
    GT_OK(sl__interp_variable(it, "a", &d, NULL));
    for (int i = 0; i < 3; i++)
      assert_true(fabs(((float *)d)[i] + scale * av[i]) < 1e-6);
    GT_OK(sl__interp_variable(it, "b", &d, NULL));
    for (int i = 0; i < 2; i++)
      assert_true(fabs(((float *)d)[i] + scale * bv[i]) < 1e-6);
    sl__interp_destroy(it);
    sl_graph_destroy(g);
  }
}

/* Frozen variables stay; only trainable ones the loss uses get updates. */
static void test_trainable(void **state) {
  GT_REQUIRE_OPS("sgd_update", "mul", "reduce_sum", "add");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_shape s = SL_SHAPE(4);
  sl_tensor w =
      sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_constant(1), NULL, NULL);
  sl_tensor frozen =
      sl_variable_set_trainable(sl_variable(g, "frozen", &s, SL_DTYPE_F32,
                                            sl_init_constant(2), NULL, NULL),
                                false);
  sl_tensor unused = sl_variable(g, "unused", &s, SL_DTYPE_F32,
                                 sl_init_constant(3), NULL, NULL);
  (void)unused;
  sl_tensor loss = sl_reduce_sum(sl_mul(w, frozen), 0, NULL, false);
  sl_optimizer opt = sl_optimizer_sgd(0.5, 0);
  GT_OK(sl_minimize(loss, &opt));
  assert_true(sl__graph_node(g, sl__graph_find(g, "w"))->update >= 0);
  assert_true(sl__graph_node(g, sl__graph_find(g, "frozen"))->update < 0);
  assert_true(sl__graph_node(g, sl__graph_find(g, "unused"))->update < 0);
  sl__interp *it;
  GT_OK(sl__interp_create(g, &it));
  GT_OK(sl__interp_step(it));
  void *d;
  GT_OK(sl__interp_variable(it, "w", &d, NULL));
  assert_true(((float *)d)[0] == 0.0f); /* 1 - 0.5 * 2 */
  GT_OK(sl__interp_variable(it, "frozen", &d, NULL));
  assert_true(((float *)d)[0] == 2.0f);
  /* A second minimize is refused. */
  assert_int_equal(sl_minimize(loss, &opt), SL_ESTATE);
  sl__interp_destroy(it);
  sl_graph_destroy(g);
}

static void test_minimize_errors(void **state) {
  GT_REQUIRE_OPS("mul", "reduce_sum");
  sl_shape s = SL_SHAPE(4);
  sl_optimizer bad[4] = {sl_optimizer_sgd(-1, 0), sl_optimizer_sgd(0.1, 1.5),
                         sl_optimizer_adam(0.1), sl_optimizer_adamw(0.1, -1)};
  bad[2].beta2 = 1.0;
  const char *why[4] = {"learning rate", "momentum", "betas", "weight decay"};
  for (int i = 0; i < 4; i++) {
    sl_graph *g;
    GT_OK(sl_graph_create(&g));
    sl_tensor w =
        sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
    sl_tensor loss =
        sl_name(sl_reduce_sum(sl_mul(w, w), 0, NULL, false), "loss");
    assert_int_equal(sl_minimize(loss, &bad[i]), SL_EINVAL);
    if (!strstr(sl_graph_error(g), why[i]) ||
        strncmp(sl_graph_error(g), "optimizer 'loss': ", 18) != 0)
      fail_msg("case %d: %s", i, sl_graph_error(g));
    sl_graph_destroy(g);
  }
  /* A non-scalar loss; a loss with no trainable variable. */
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_tensor w =
      sl_variable(g, "w", &s, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  assert_int_equal(sl_minimize(sl_mul(w, w), &opt), SL_EINVAL);
  assert_non_null(strstr(sl_graph_error(g), "one element"));
  sl_graph_destroy(g);
  GT_OK(sl_graph_create(&g));
  sl_tensor x = sl_input(g, "x", &s, SL_DTYPE_F32, NULL, NULL);
  assert_int_equal(
      sl_minimize(sl_reduce_sum(sl_mul(x, x), 0, NULL, false), &opt),
      SL_EINVAL);
  assert_non_null(strstr(sl_graph_error(g), "no trainable variable"));
  sl_graph_destroy(g);
}

/* Variable updates apply together, after the step: a variable whose new
 * value is another variable's (v <- w) gets w's old version even when w is
 * updated first. */
static void test_updates_read_old_versions(void **state) {
  GT_REQUIRE_OPS("scalar_add");
  sl_graph *g;
  GT_OK(sl_graph_create(&g));
  sl_graph_set_default_placement(g, "cpu:0");
  sl_shape sh = SL_SHAPE(3);
  sl_tensor w = sl_variable(g, "w", &sh, SL_DTYPE_F32, sl_init_constant(1),
                            "cpu:0", "B");
  sl_tensor v = sl_variable(g, "v", &sh, SL_DTYPE_F32, sl_init_constant(0),
                            "cpu:0", "B");
  sl_tensor w1 = sl_add_scalar(w, 1);
  assert_true(sl_tensor_ok(v));
  GT_GRAPH_OK(g);
  sl__g_find(g, "w")->n.update = w1.id;
  sl__g_find(g, "v")->n.update = w.id;
  sl__interp *it;
  GT_OK(sl__interp_create(g, &it));
  for (int step = 0; step < 3; step++) {
    GT_OK(sl__interp_step(it));
    void *wd, *vd;
    sl__meta meta;
    GT_OK(sl__interp_variable(it, "w", &wd, &meta));
    GT_OK(sl__interp_variable(it, "v", &vd, &meta));
    for (int i = 0; i < 3; i++) {
      assert_true(((float *)wd)[i] == (float)(step + 2));
      assert_true(((float *)vd)[i] == (float)(step + 1)); /* w before */
    }
  }
  sl__interp_destroy(it);
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_clip),
      cmocka_unit_test(test_trainable),
      cmocka_unit_test(test_minimize_errors),
      cmocka_unit_test(test_updates_read_old_versions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
