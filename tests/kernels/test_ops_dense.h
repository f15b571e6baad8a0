/* Helpers for the dense op tests (test_ops_dense_*.c): seeded random
 * tensors, running an op on whole tensors the way one device would, and
 * tolerant comparisons against double-precision references. */
#ifndef SLUICE_TESTS_TEST_OPS_DENSE_H
#define SLUICE_TESTS_TEST_OPS_DENSE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "op.h"

/* ---- seeds ------------------------------------------------------------- */

/* SLUICE_TEST_SEED when set, else the clock; printed so a run replays. */
static inline uint64_t dt_seed(const char *what) {
  const char *env = getenv("SLUICE_TEST_SEED");
  uint64_t s = env && *env ? strtoull(env, NULL, 0)
                           : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
  printf("%s: seed %" PRIu64 " (SLUICE_TEST_SEED=%" PRIu64 " replays)\n", what,
         s, s);
  return s;
}

/* ---- tensors ----------------------------------------------------------- */

static inline sl_shape dt_shape(int ndim, const int64_t *dims) {
  sl_shape s;
  assert_int_equal(sl_shape_make(ndim, dims, &s), SL_OK);
  return s;
}

static inline sl_host_tensor *dt_new(sl_dtype dt, const sl_shape *s) {
  sl_host_tensor *t = NULL;
  assert_int_equal(sl_host_tensor_create(dt, s, &t), SL_OK);
  return t;
}

static inline float *dt_f(sl_host_tensor *t) { return sl_host_tensor_data(t); }
static inline int64_t dt_numel(const sl_host_tensor *t) {
  return sl_shape_numel(sl_host_tensor_shape(t));
}

/* Uniform in [lo, hi). */
static inline float dt_uniform(sl_rng *r, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(sl__rng_next(r) >> 40) * 0x1.0p-24);
}

static inline sl_host_tensor *dt_rand(sl_rng *r, const sl_shape *s, float lo,
                                      float hi) {
  sl_host_tensor *t = dt_new(SL_DTYPE_F32, s);
  float *p = dt_f(t);
  for (int64_t i = 0; i < dt_numel(t); i++)
    p[i] = dt_uniform(r, lo, hi);
  return t;
}

/* Integers in [0, n) of dtype dt (i32 or i64). */
static inline sl_host_tensor *dt_ids(sl_rng *r, sl_dtype dt, const sl_shape *s,
                                     int64_t n) {
  sl_host_tensor *t = dt_new(dt, s);
  for (int64_t i = 0; i < dt_numel(t); i++)
    sl_host_tensor_set(t, i, n > 0 ? (double)sl__rng_below(r, (uint64_t)n) : 0);
  return t;
}

static inline void dt_free(int n, sl_host_tensor **t) {
  for (int i = 0; i < n; i++) {
    sl_host_tensor_destroy(t[i]);
    t[i] = NULL;
  }
}

/* ---- running ops ------------------------------------------------------- */

static inline const sl__op_def *dt_op(const char *name) {
  const sl__op_def *op = sl__op_find(name);
  if (!op) fail_msg("op %s is not registered", name);
  return op;
}

static inline sl_slice dt_full_slice(const sl_shape *s) {
  sl_slice sl;
  memset(&sl, 0, sizeof sl);
  sl.ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++)
    sl.extent[d] = s->dims[d];
  return sl;
}

/* Infers the outputs of `name` on these inputs. */
static inline sl_status dt_infer(const char *name, const sl__attrs *at,
                                 int n_in, sl_host_tensor *const *in,
                                 sl__meta *out) {
  const sl__op_def *op = dt_op(name);
  sl__meta m[SL_OP_MAX_INPUTS];
  memset(m, 0, sizeof m);
  memset(out, 0, sizeof(sl__meta) * SL_OP_MAX_OUTPUTS);
  for (int i = 0; i < n_in; i++) {
    m[i].dtype = sl_host_tensor_dtype(in[i]);
    m[i].shape = *sl_host_tensor_shape(in[i]);
  }
  return op->infer(at, n_in, m, out);
}

/* Fills a kernel context for whole tensors on one device (every slice the
 * full tensor, global shapes = local ones). */
static inline void dt_ctx(sl__kernel_ctx *k, const sl__attrs *at, int n_in,
                          sl_host_tensor *const *in, int n_out,
                          sl_host_tensor *const *out, int64_t step) {
  memset(k, 0, sizeof *k);
  k->attrs = at;
  k->n_in = n_in;
  k->n_out = n_out;
  k->step = step;
  for (int i = 0; i < n_in; i++) {
    k->in[i] = sl_host_tensor_cdata(in[i]);
    k->in_meta[i].dtype = sl_host_tensor_dtype(in[i]);
    k->in_meta[i].shape = *sl_host_tensor_shape(in[i]);
    k->in_global[i] = k->in_meta[i].shape;
    k->in_slice[i] = dt_full_slice(&k->in_global[i]);
  }
  for (int i = 0; i < n_out; i++) {
    k->out[i] = sl_host_tensor_data(out[i]);
    k->out_meta[i].dtype = sl_host_tensor_dtype(out[i]);
    k->out_meta[i].shape = *sl_host_tensor_shape(out[i]);
    k->out_global[i] = k->out_meta[i].shape;
    k->out_slice[i] = dt_full_slice(&k->out_global[i]);
  }
}

/* Infers, allocates the outputs (filled with NaN so an unwritten element
 * shows), runs the kernel. On failure the outputs are freed and NULL. */
static inline sl_status dt_run(const char *name, const sl__attrs *at, int n_in,
                               sl_host_tensor *const *in, int64_t step,
                               sl_host_tensor **out) {
  const sl__op_def *op = dt_op(name);
  sl__meta om[SL_OP_MAX_OUTPUTS];
  sl_status st = dt_infer(name, at, n_in, in, om);
  for (int i = 0; i < op->n_out; i++)
    out[i] = NULL;
  if (st != SL_OK) return st;
  for (int i = 0; i < op->n_out; i++) {
    out[i] = dt_new(om[i].dtype, &om[i].shape);
    if (om[i].dtype == SL_DTYPE_F32)
      for (int64_t j = 0; j < dt_numel(out[i]); j++)
        dt_f(out[i])[j] = NAN;
  }
  sl__kernel_ctx k;
  dt_ctx(&k, at, n_in, in, op->n_out, out, step);
  st = sl__op_run_cpu(op, &k);
  if (st != SL_OK) dt_free(op->n_out, out);
  return st;
}

/* Runs and fails the test on an error. */
static inline void dt_run_ok(const char *name, const sl__attrs *at, int n_in,
                             sl_host_tensor *const *in, int64_t step,
                             sl_host_tensor **out) {
  if (dt_run(name, at, n_in, in, step, out) != SL_OK)
    fail_msg("%s: %s", name, sl_last_error());
}

/* Expects st (from infer or a run) to be SL_EINVAL with `needle` in the
 * message. */
static inline void dt_expect_einval(sl_status st, const char *needle) {
  if (st != SL_EINVAL)
    fail_msg("want SL_EINVAL (\"%s\"), got %s: %s", needle, sl_status_str(st),
             sl_last_error());
  if (!strstr(sl_last_error(), needle))
    fail_msg("message \"%s\" lacks \"%s\"", sl_last_error(), needle);
}

static inline void dt_expect_infer_error(const char *name, const sl__attrs *at,
                                         int n_in, sl_host_tensor *const *in,
                                         const char *needle) {
  sl__meta out[SL_OP_MAX_OUTPUTS];
  dt_expect_einval(dt_infer(name, at, n_in, in, out), needle);
}

/* ---- comparisons ------------------------------------------------------- */

/* |got - want| <= atol + rtol |want| for every element; NaN never passes.
 */
static inline void dt_check(const char *what, const float *got,
                            const double *want, int64_t n, double atol,
                            double rtol) {
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (!(fabs(g - w) <= atol + rtol * fabs(w)))
      fail_msg("%s: element %" PRId64 " of %" PRId64 ": got %.9g, want %.9g "
               "(diff %.3g)",
               what, i, n, g, w, fabs(g - w));
  }
}

/* The same with a float reference. */
static inline void dt_check_f(const char *what, const float *got,
                              const float *want, int64_t n, double atol,
                              double rtol) {
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (!(fabs(g - w) <= atol + rtol * fabs(w)))
      fail_msg("%s: element %" PRId64 " of %" PRId64 ": got %.9g, want %.9g",
               what, i, n, g, w);
  }
}

/* ---- finite differences ------------------------------------------------ */

/* sum_i w[i] * out[out_idx][i] of op `name` on these inputs, in double. */
static inline double dt_objective(const char *name, const sl__attrs *at,
                                  int n_in, sl_host_tensor *const *in,
                                  int out_idx, const float *w) {
  const sl__op_def *op = dt_op(name);
  sl_host_tensor *out[SL_OP_MAX_OUTPUTS];
  dt_run_ok(name, at, n_in, in, 0, out);
  double s = 0;
  const float *o = dt_f(out[out_idx]);
  for (int64_t i = 0; i < dt_numel(out[out_idx]); i++)
    s += (double)w[i] * o[i];
  dt_free(op->n_out, out);
  return s;
}

/* Checks grad (the analytic gradient of sum w * out[out_idx] with respect
 * to input wrt) against central differences of the forward op with step
 * h: |fd - grad| <= atol + rtol |fd| for every element. */
static inline void dt_check_fd(const char *name, const sl__attrs *at, int n_in,
                               sl_host_tensor *const *in, int out_idx,
                               const float *w, int wrt, const float *grad,
                               float h, double atol, double rtol) {
  float *x = dt_f(in[wrt]);
  for (int64_t i = 0; i < dt_numel(in[wrt]); i++) {
    float v = x[i];
    x[i] = v + h;
    double hi = dt_objective(name, at, n_in, in, out_idx, w);
    x[i] = v - h;
    double lo = dt_objective(name, at, n_in, in, out_idx, w);
    x[i] = v;
    /* The step actually taken, after float rounding of v +- h. */
    double step = (double)(v + h) - (double)(v - h);
    double fd = (hi - lo) / step;
    if (!(fabs(fd - grad[i]) <= atol + rtol * fabs(fd)))
      fail_msg("%s: d/d input %d [%" PRId64 "]: analytic %.7g, finite "
               "difference %.7g",
               name, wrt, i, grad[i], fd);
  }
}

#endif
