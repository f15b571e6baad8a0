/* Gradient rules of shape ops and reductions: reshape, transpose, slice
 * (zero padding built from fill + concat), concat (slices), broadcast_to
 * and reduce_sum_like (each other's transpose), reduce_sum / reduce_mean
 * (broadcast_to back), reduce_max (the indicator of the maxima). */
#include "grad.h"

static const sl_shape *shape_of(sl_graph *g, sl_tensor t) {
  return &sl__g_meta(g, t)->shape;
}

static sl_status g_reshape(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                           const bool *need, sl_tensor *dx) {
  dx[0] = sl_reshape(dy[0], shape_of(g, sl__g_in(g, n, 0)));
  return sl__g_status(g);
}

static sl_status g_transpose(sl_graph *g, const sl__node *n,
                             const sl_tensor *dy, const bool *need,
                             sl_tensor *dx) {
  int np = 0;
  const int64_t *perm = sl__attr_ints(&n->attrs, "perm", &np);
  int inv[SL_MAX_DIMS];
  for (int i = 0; i < np; i++)
    inv[perm[i]] = i;
  dx[0] = sl_transpose(dy[0], np, inv);
  return sl__g_status(g);
}

/* Zeros of `like`'s dtype with shape s, on the current placement. */
static sl_tensor zeros(sl_graph *g, sl_tensor like, const sl_shape *s) {
  sl__attrs at = {0};
  sl__attrs_set_ints(&at, "shape", s->ndim, s->dims);
  sl__attrs_set_int(&at, "dtype", sl__g_meta(g, like)->dtype);
  sl__attrs_set_float(&at, "value", 0.0);
  return sl__g_source(g, "fill", &at, NULL, g->force_placement, NULL);
}

/* dy padded with zeros before and after on the sliced axis. */
static sl_status g_slice(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                         const bool *need, sl_tensor *dx) {
  const sl_shape *xs = shape_of(g, sl__g_in(g, n, 0));
  int axis = (int)sl__attr_int(&n->attrs, "axis", 0);
  int64_t len = xs->dims[axis];
  int64_t s0 = sl__attr_int(&n->attrs, "start", 0);
  if (s0 < 0) s0 += len;
  sl_shape cs = *shape_of(g, dy[0]);
  int64_t after = len - s0 - cs.dims[axis];
  sl_tensor parts[3];
  int k = 0;
  if (s0 > 0) {
    sl_shape zs = cs;
    zs.dims[axis] = s0;
    parts[k++] = zeros(g, dy[0], &zs);
  }
  parts[k++] = dy[0];
  if (after > 0) {
    sl_shape zs = cs;
    zs.dims[axis] = after;
    parts[k++] = zeros(g, dy[0], &zs);
  }
  dx[0] = k > 1 ? sl_concat(k, parts, axis) : dy[0];
  return sl__g_status(g);
}

static sl_status g_concat(sl_graph *g, const sl__node *n, const sl_tensor *dy,
                          const bool *need, sl_tensor *dx) {
  int axis = (int)sl__attr_int(&n->attrs, "axis", 0);
  int64_t off = 0;
  for (int i = 0; i < n->n_in; i++) {
    const sl_shape *xs = shape_of(g, sl__g_in(g, n, i));
    if (need[i]) dx[i] = sl_slice_of(dy[0], axis, off, off + xs->dims[axis]);
    off += xs->dims[axis];
  }
  return sl__g_status(g);
}

static sl_status g_broadcast_to(sl_graph *g, const sl__node *n,
                                const sl_tensor *dy, const bool *need,
                                sl_tensor *dx) {
  dx[0] = sl__g_unbroadcast(g, dy[0], sl__g_in(g, n, 0));
  return sl__g_status(g);
}

static sl_status g_reduce_sum_like(sl_graph *g, const sl__node *n,
                                   const sl_tensor *dy, const bool *need,
                                   sl_tensor *dx) {
  if (need[0]) dx[0] = sl_broadcast_to(dy[0], shape_of(g, sl__g_in(g, n, 0)));
  return sl__g_status(g);
}

/* dy with the reduced axes restored (extent 1), broadcast to the input;
 * scaled by 1/N for the mean. */
static sl_tensor unreduce(sl_graph *g, const sl__node *n, sl_tensor dy,
                          bool mean) {
  const sl_shape *xs = shape_of(g, sl__g_in(g, n, 0));
  int na = 0;
  const int64_t *axes = sl__attr_ints(&n->attrs, "axes", &na);
  sl_shape keep = *xs;
  int64_t count = 1;
  for (int i = 0; i < na; i++) {
    count *= xs->dims[axes[i]];
    keep.dims[axes[i]] = 1;
  }
  if (!sl__attr_int(&n->attrs, "keepdims", 0)) dy = sl_reshape(dy, &keep);
  if (mean && count > 0) dy = sl_mul_scalar(dy, 1.0 / (double)count);
  return sl_broadcast_to(dy, xs);
}

static sl_status g_reduce_sum(sl_graph *g, const sl__node *n,
                              const sl_tensor *dy, const bool *need,
                              sl_tensor *dx) {
  dx[0] = unreduce(g, n, dy[0], false);
  return sl__g_status(g);
}

static sl_status g_reduce_mean(sl_graph *g, const sl__node *n,
                               const sl_tensor *dy, const bool *need,
                               sl_tensor *dx) {
  dx[0] = unreduce(g, n, dy[0], true);
  return sl__g_status(g);
}

/* d max / dx is the indicator of the maximal elements; ties share the
 * gradient equally (numpy/PyTorch amax). The indicator is built exactly
 * from relu_grad: max - x is 0 at a maximum and positive elsewhere, so
 * 1 - relu_grad(1, max - x) marks the maxima. */
static sl_status g_reduce_max(sl_graph *g, const sl__node *n,
                              const sl_tensor *dy, const bool *need,
                              sl_tensor *dx) {
  sl_tensor x = sl__g_in(g, n, 0);
  const sl_shape *xs = shape_of(g, x);
  int na = 0;
  const int64_t *axes = sl__attr_ints(&n->attrs, "axes", &na);
  int ax[SL_MAX_DIMS];
  sl_shape keep = *xs;
  for (int i = 0; i < na; i++) {
    ax[i] = (int)axes[i];
    keep.dims[axes[i]] = 1;
  }
  bool keepdims = sl__attr_int(&n->attrs, "keepdims", 0) != 0;
  sl_tensor y = sl__g_out(g, n, 0), d = dy[0];
  if (!keepdims) {
    y = sl_reshape(y, &keep);
    d = sl_reshape(d, &keep);
  }
  sl_tensor gap = sl_sub(sl_broadcast_to(y, xs), x);
  sl_tensor below =
      sl__g_op(g, "relu_grad", 2,
               (sl_tensor[]){sl__g_full_like(g, x, 1.0), gap}, NULL, NULL);
  sl_tensor mask = sl_add_scalar(sl_neg(below), 1.0);
  sl_tensor count = sl_reduce_sum(mask, na, ax, true);
  dx[0] = sl_mul(mask, sl_broadcast_to(sl_div(d, count), xs));
  return sl__g_status(g);
}

const sl__grad_rule sl__grad_rules_shape[] = {
    {"reshape", g_reshape},
    {"transpose", g_transpose},
    {"slice", g_slice},
    {"concat", g_concat},
    {"broadcast_to", g_broadcast_to},
    {"reduce_sum_like", g_reduce_sum_like},
    {"reduce_sum", g_reduce_sum},
    {"reduce_mean", g_reduce_mean},
    {"reduce_max", g_reduce_max},
    {NULL, NULL},
};
