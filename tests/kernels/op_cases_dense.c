/* Invariance cases for the dense op family (kernels/ops_dense.def): how to
 * make random valid inputs for each op (see op_harness.h), so that
 * test_op_signatures runs every signature these ops declare. Extents go up
 * to 5 (uneven over 2, 3 and 4 ranks; the 2x2 mesh leaves some shards
 * empty) and are sometimes 0, except where an op needs a non-empty axis
 * (classes, the normalised dim, the vocabulary). Values from oph_random are
 * multiples of 1/8, so matmul's partial sums are exact; ops that reorder
 * float sums under a P signature (gradients' partial dy, dgamma, dbeta)
 * get a tolerance. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "op_harness.h"

static int below(sl_rng *r, int n) {
  return (int)sl__rng_below(r, (uint64_t)n);
}

static sl_shape rshape(sl_rng *r, int min_nd, int max_nd) {
  return oph_random_shape(r, min_nd + below(r, max_nd - min_nd + 1), 5, 0.06);
}

static sl_dtype index_dtype(sl_rng *r) {
  return below(r, 2) ? SL_DTYPE_I64 : SL_DTYPE_I32;
}

/* f32 mostly, bf16 or f16 storage sometimes (multiples of 1/8 in [-2, 2]
 * are exact in both). */
static sl_dtype mm_dtype(sl_rng *r) {
  int k = below(r, 6);
  return k < 4 ? SL_DTYPE_F32 : k == 4 ? SL_DTYPE_BF16 : SL_DTYPE_F16;
}

/* ---- matmul ------------------------------------------------------------ */

/* 1-2 contraction axes (absent attribute: 1), 1-3 row and 1-2 column
 * axes, every flag: a [rows..., k...] or [k..., rows...], b [k...,
 * cols...] or [cols..., k...]. */
static sl_status c_matmul(sl_rng *r, sl__attrs *at, int *n_in,
                          sl_host_tensor **in) {
  int c = 1 + below(r, 2), ta = below(r, 2), tb = below(r, 2);
  sl_shape rows = rshape(r, 1, 3), cols = rshape(r, 1, 2), ks = rshape(r, c, c);
  sl_shape a = {0}, b = {0};
  for (int pass = 0; pass < 2; pass++) {
    const sl_shape *pa = (pass == 0) == (ta != 0) ? &ks : &rows;
    const sl_shape *pb = (pass == 0) == (tb == 0) ? &ks : &cols;
    for (int i = 0; i < pa->ndim; i++)
      a.dims[a.ndim++] = pa->dims[i];
    for (int j = 0; j < pb->ndim; j++)
      b.dims[b.ndim++] = pb->dims[j];
  }
  SL_CHECK(sl__attrs_set_int(at, "trans_a", ta));
  SL_CHECK(sl__attrs_set_int(at, "trans_b", tb));
  if (c != 1) SL_CHECK(sl__attrs_set_int(at, "contract", c));
  in[0] = oph_random(r, mm_dtype(r), &a, -2, 2);
  in[1] = oph_random(r, mm_dtype(r), &b, -2, 2);
  *n_in = 2;
  return SL_OK;
}

static sl_status c_batch_matmul(sl_rng *r, sl__attrs *at, int *n_in,
                                sl_host_tensor **in) {
  sl_shape a = rshape(r, 2, 4), b = a;
  int ta = below(r, 2), tb = below(r, 2), nd = a.ndim;
  int64_t k = a.dims[ta ? nd - 2 : nd - 1], n = 1 + below(r, 5);
  b.dims[nd - 2] = tb ? n : k;
  b.dims[nd - 1] = tb ? k : n;
  SL_CHECK(sl__attrs_set_int(at, "trans_a", ta));
  SL_CHECK(sl__attrs_set_int(at, "trans_b", tb));
  in[0] = oph_random(r, mm_dtype(r), &a, -2, 2);
  in[1] = oph_random(r, mm_dtype(r), &b, -2, 2);
  *n_in = 2;
  return SL_OK;
}

/* ---- softmax ----------------------------------------------------------- */

static sl_shape with_axis(sl_rng *r, sl__attrs *at) {
  sl_shape s = rshape(r, 1, 4);
  /* Negative and positive spellings of every axis. */
  int axis = below(r, 2 * s.ndim) - s.ndim;
  sl__attrs_set_int(at, "axis", axis);
  return s;
}

static sl_status c_softmax(sl_rng *r, sl__attrs *at, int *n_in,
                           sl_host_tensor **in) {
  sl_shape s = with_axis(r, at);
  in[0] = oph_random(r, SL_DTYPE_F32, &s, -6, 6);
  *n_in = 1;
  return SL_OK;
}

static sl_status c_softmax_grad(sl_rng *r, sl__attrs *at, int *n_in,
                                sl_host_tensor **in) {
  sl_shape s = with_axis(r, at);
  in[0] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  in[1] = oph_random(r, SL_DTYPE_F32, &s, 0, 1);
  *n_in = 2;
  return SL_OK;
}

static sl_status c_log_softmax_grad(sl_rng *r, sl__attrs *at, int *n_in,
                                    sl_host_tensor **in) {
  sl_shape s = with_axis(r, at);
  in[0] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  in[1] = oph_random(r, SL_DTYPE_F32, &s, -4, 0);
  *n_in = 2;
  return SL_OK;
}

/* ---- cross-entropy ----------------------------------------------------- */

/* logits [..., C] with C >= 1 and labels [...] in [0, C). */
static void logits_labels(sl_rng *r, sl_host_tensor **logits,
                          sl_host_tensor **labels, sl_shape *ls) {
  sl_shape s = rshape(r, 1, 4);
  s.dims[s.ndim - 1] = 1 + below(r, 5);
  *ls = s;
  ls->dims[--ls->ndim] = 0;
  *logits = oph_random(r, SL_DTYPE_F32, &s, -6, 6);
  *labels =
      oph_random(r, index_dtype(r), ls, 0, (double)(s.dims[s.ndim - 1] - 1));
}

static sl_status c_ce(sl_rng *r, sl__attrs *at, int *n_in,
                      sl_host_tensor **in) {
  sl_shape ls;
  logits_labels(r, &in[0], &in[1], &ls);
  *n_in = 2;
  return SL_OK;
}

static sl_status c_ce_grad(sl_rng *r, sl__attrs *at, int *n_in,
                           sl_host_tensor **in) {
  sl_shape ls;
  logits_labels(r, &in[1], &in[2], &ls);
  in[0] = oph_random(r, SL_DTYPE_F32, &ls, -2, 2);
  *n_in = 3;
  return SL_OK;
}

/* Labels of 0-3 axes, 1-6 classes. */
static sl_status c_one_hot(sl_rng *r, sl__attrs *at, int *n_in,
                           sl_host_tensor **in) {
  int64_t classes = 1 + below(r, 6);
  sl_shape ls = rshape(r, 0, 3);
  SL_CHECK(sl__attrs_set_int(at, "classes", classes));
  in[0] = oph_random(r, index_dtype(r), &ls, 0, (double)(classes - 1));
  *n_in = 1;
  return SL_OK;
}

/* ---- layer norm -------------------------------------------------------- */

static sl_shape ln_shape(sl_rng *r, sl_shape *vs, sl_shape *rs) {
  sl_shape s = rshape(r, 1, 4);
  s.dims[s.ndim - 1] = 1 + below(r, 5);
  *vs = oph_shape(1, &s.dims[s.ndim - 1]);
  *rs = s;
  rs->dims[--rs->ndim] = 0;
  return s;
}

static sl_status c_layer_norm(sl_rng *r, sl__attrs *at, int *n_in,
                              sl_host_tensor **in) {
  sl_shape vs, rs, s = ln_shape(r, &vs, &rs);
  SL_CHECK(sl__attrs_set_float(at, "eps", below(r, 2) ? 1e-5 : 0.25));
  in[0] = oph_random(r, SL_DTYPE_F32, &s, -4, 4);
  in[1] = oph_random(r, SL_DTYPE_F32, &vs, -2, 2);
  in[2] = oph_random(r, SL_DTYPE_F32, &vs, -2, 2);
  *n_in = 3;
  return SL_OK;
}

/* mean and rstd from the forward op (eps 0.25 keeps rstd <= 2), so xhat
 * stays O(1) as in training and P(dy) parts round like real ones. */
static sl_status c_layer_norm_grad(sl_rng *r, sl__attrs *at, int *n_in,
                                   sl_host_tensor **in) {
  sl_shape vs, rs, s = ln_shape(r, &vs, &rs);
  sl__attrs fa;
  memset(&fa, 0, sizeof fa);
  SL_CHECK(sl__attrs_set_float(&fa, "eps", 0.25));
  sl_host_tensor *fin[3] = {oph_random(r, SL_DTYPE_F32, &s, -4, 4),
                            oph_random(r, SL_DTYPE_F32, &vs, -2, 2),
                            oph_random(r, SL_DTYPE_F32, &vs, -2, 2)};
  sl_host_tensor *fout[3] = {NULL, NULL, NULL};
  sl_status st =
      oph_run_single(sl__op_find("layer_norm"), &fa, 3, fin, 0, fout);
  sl_host_tensor_destroy(fin[2]);
  sl_host_tensor_destroy(fout[0]);
  in[0] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  in[1] = fin[0];
  in[2] = fin[1];
  in[3] = fout[1];
  in[4] = fout[2];
  *n_in = 5;
  return st;
}

/* ---- embedding --------------------------------------------------------- */

static sl_status c_embedding(sl_rng *r, sl__attrs *at, int *n_in,
                             sl_host_tensor **in) {
  int64_t vocab = 1 + below(r, 7), d = below(r, 6);
  sl_shape ts = oph_shape(2, (int64_t[]){vocab, d}), is = rshape(r, 0, 3);
  in[0] = oph_random(r, SL_DTYPE_F32, &ts, -4, 4);
  in[1] = oph_random(r, index_dtype(r), &is, 0, (double)(vocab - 1));
  *n_in = 2;
  return SL_OK;
}

static sl_status c_embedding_grad(sl_rng *r, sl__attrs *at, int *n_in,
                                  sl_host_tensor **in) {
  int64_t vocab = 1 + below(r, 7);
  sl_shape is = rshape(r, 0, 3), ds = is;
  ds.dims[ds.ndim++] = below(r, 6);
  SL_CHECK(sl__attrs_set_int(at, "vocab", vocab));
  in[0] = oph_random(r, SL_DTYPE_F32, &ds, -4, 4);
  in[1] = oph_random(r, index_dtype(r), &is, 0, (double)(vocab - 1));
  *n_in = 2;
  return SL_OK;
}

/* ---- optimizers -------------------------------------------------------- */

/* Sometimes a lazy update's row counts (0, or a lookup count) for a w of
 * at least one axis, and then sometimes loss scaling's skipped steps
 * after them (0: a case does not know its step; test_ops_dense_optim
 * checks the counting). */
static sl_status lazy_rows(sl_rng *r, const sl_shape *w, sl_host_tensor **in,
                           int *n_in) {
  if (w->ndim < 1 || below(r, 2)) return SL_OK;
  sl_shape rs = oph_shape(1, (int64_t[]){w->dims[0]});
  in[*n_in] = oph_random(r, SL_DTYPE_F32, &rs, 0, 0);
  for (int64_t i = 0; i < w->dims[0]; i++)
    sl_host_tensor_set(in[*n_in], i, below(r, 3));
  (*n_in)++;
  if (below(r, 2))
    in[(*n_in)++] = oph_random(r, SL_DTYPE_F32, &(sl_shape){0, {0}}, 0, 0);
  return SL_OK;
}

static sl_status c_sgd(sl_rng *r, sl__attrs *at, int *n_in,
                       sl_host_tensor **in) {
  sl_shape s = rshape(r, 0, 4);
  int mom = below(r, 3), nesterov = mom && below(r, 2);
  SL_CHECK(sl__attrs_set_float(at, "lr", 0.125));
  SL_CHECK(sl__attrs_set_float(at, "momentum", mom ? 0.5 * mom : 0.0));
  SL_CHECK(sl__attrs_set_float(at, "dampening",
                               nesterov ? 0.0 : 0.25 * below(r, 2)));
  SL_CHECK(sl__attrs_set_float(at, "weight_decay", 0.0625 * below(r, 2)));
  SL_CHECK(sl__attrs_set_int(at, "nesterov", nesterov));
  for (int i = 0; i < 3; i++)
    in[i] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  if (!mom && below(r, 2)) { /* the empty state of momentum-free SGD */
    sl_host_tensor_destroy(in[2]);
    in[2] = oph_random(r, SL_DTYPE_F32, &(sl_shape){1, {0}}, 0, 0);
  }
  *n_in = 3;
  return lazy_rows(r, &s, in, n_in);
}

static sl_status c_adam(sl_rng *r, sl__attrs *at, int *n_in,
                        sl_host_tensor **in) {
  sl_shape s = rshape(r, 0, 4);
  SL_CHECK(sl__attrs_set_float(at, "lr", 0.01));
  SL_CHECK(sl__attrs_set_float(at, "weight_decay", 0.05 * below(r, 2)));
  SL_CHECK(sl__attrs_set_int(at, "decoupled", below(r, 2)));
  for (int i = 0; i < 3; i++)
    in[i] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  in[3] = oph_random(r, SL_DTYPE_F32, &s, 0, 2);
  *n_in = 4;
  return lazy_rows(r, &s, in, n_in);
}

static sl_status c_global_norm_scale(sl_rng *r, sl__attrs *at, int *n_in,
                                     sl_host_tensor **in) {
  *n_in = 1 + below(r, 5);
  for (int i = 0; i < *n_in; i++) {
    sl_shape s = oph_shape(below(r, 2), (int64_t[]){1});
    in[i] = oph_random(r, SL_DTYPE_F32, &s, 0, 4);
  }
  return sl__attrs_set_float(at, "max_norm", 0.5 + below(r, 8));
}

/* A scale, a count of good steps, the check (0, or NaN sometimes) and a
 * count of skipped steps. */
static sl_status c_loss_scale_update(sl_rng *r, sl__attrs *at, int *n_in,
                                     sl_host_tensor **in) {
  sl_shape s = oph_shape(0, NULL);
  in[0] = oph_random(r, SL_DTYPE_F32, &s, 1, 8);
  in[1] = oph_random(r, SL_DTYPE_F32, &s, 0, 0);
  sl_host_tensor_set(in[1], 0, below(r, 3));
  in[2] = oph_random(r, SL_DTYPE_F32, &s, 0, 0);
  if (below(r, 2)) sl_host_tensor_set(in[2], 0, NAN);
  in[3] = oph_random(r, SL_DTYPE_F32, &s, 0, 0);
  sl_host_tensor_set(in[3], 0, below(r, 3));
  *n_in = 4;
  return sl__attrs_set_int(at, "window", 1 + below(r, 3));
}

#define EXACT                                                                  \
  { 0, 0 }

/* Eight random cases per op (the default is four): the dense ops have many
 * shape-dependent signatures, and a run takes milliseconds. */
static const op_case cases[] = {
    {"matmul", c_matmul, EXACT, 8},
    {"batch_matmul", c_batch_matmul, EXACT, 8},
    {"softmax", c_softmax, EXACT, 8},
    {"log_softmax", c_softmax, EXACT, 8},
    /* P(dy): each part's dot product is rounded on its own. */
    {"softmax_grad", c_softmax_grad, {1e-5, 1e-5}, 8},
    {"log_softmax_grad", c_log_softmax_grad, {1e-5, 1e-5}, 8},
    {"sparse_cross_entropy", c_ce, EXACT, 8},
    {"sparse_cross_entropy_grad", c_ce_grad, {1e-6, 1e-5}, 8},
    {"one_hot", c_one_hot, EXACT, 8},
    {"layer_norm", c_layer_norm, EXACT, 8},
    /* dgamma and dbeta sum over rows split between ranks. */
    {"layer_norm_grad", c_layer_norm_grad, {5e-5, 1e-5}, 8},
    {"embedding", c_embedding, EXACT, 8},
    {"embedding_grad", c_embedding_grad, EXACT, 8},
    {"sgd_update", c_sgd, EXACT, 8},
    {"adam_update", c_adam, EXACT, 8},
    {"global_norm_scale", c_global_norm_scale, EXACT, 8},
    {"loss_scale_update", c_loss_scale_update, EXACT, 8},
};

const op_case *op_cases_dense(int *n) {
  *n = (int)SL_ARRAY_LEN(cases);
  return cases;
}
