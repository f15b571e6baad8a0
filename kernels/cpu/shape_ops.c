/* Shape ops: reshape, transpose, broadcast_to, slice, concat. All move data
 * without arithmetic, so they take every dtype and are exact under every
 * signature; partial inputs of any kind pass through (moving the parts
 * moves their sum, max or min).
 *
 * Signatures keep a split only where the split axis survives whole:
 * - reshape: S(i) -> S(j) when the dims before i and before j have the same
 *   product. Then each rank's part of each outer block is one contiguous run
 *   of memory in both shapes: the same run when dims[i] == new dims[j], even
 *   for uneven splits; otherwise (a merged or split axis: [B,S,H*hd] <->
 *   [B,S,H,hd]) only when both axes are cut into equal parts, so those
 *   signatures are `even` (kernels/op.h).
 * - transpose: S(i) -> S(j) for perm[j] == i.
 * - broadcast_to: S(i) -> S(j) on axes that are not broadcast, and B ->
 *   S(j) on broadcast (or new) axes: every output slice repeats the whole
 *   input there.
 * - slice: S on every axis but the sliced one (each rank needs the whole
 *   sliced axis to find its range).
 * - concat: S on every axis but the concatenation axis, all inputs alike. */
#include <string.h>

#include "cpu/kernel_util.h"

/* P, P(max), P(min) -> the same, for ops that only move data. */
static void partial_passthrough(sl__sig_list *l, int n_in) {
  static const sl_reduce_op ops[3] = {SL_REDUCE_SUM, SL_REDUCE_MAX,
                                      SL_REDUCE_MIN};
  for (int k = 0; k < 3; k++) {
    sl__sbp_sig *s = sl__sig_begin(l);
    for (int i = 0; i < n_in; i++)
      s->in[i] = sl_sbp_partial(ops[k]);
    s->out[0] = sl_sbp_partial(ops[k]);
    sl__sig_commit(l);
  }
}

/* ---- reshape
 * --------------------------------------------------------------------- */

/* The target shape from the `shape` attribute, with one -1 inferred. */
static sl_status reshape_target(const sl__attrs *at, const sl_shape *x,
                                sl_shape *out) {
  int n;
  const int64_t *v = sl__attr_ints(at, "shape", &n);
  memset(out, 0, sizeof *out);
  if (!v)
    return sl__fail(SL_EINVAL, "attribute 'shape' (a list of extents) missing");
  int infer_at = -1;
  int64_t known = 1;
  out->ndim = n;
  for (int i = 0; i < n; i++) {
    if (v[i] == -1) {
      if (infer_at >= 0)
        return sl__fail(SL_EINVAL, "shape: -1 given twice (dims %d and %d)",
                        infer_at, i);
      infer_at = i;
      continue;
    }
    if (v[i] < 0)
      return sl__fail(SL_EINVAL, "shape: extent %lld is negative",
                      (long long)v[i]);
    if (v[i] > 0 && known > INT64_MAX / v[i])
      return sl__fail(SL_EINVAL, "shape: element count overflows");
    known *= v[i];
    out->dims[i] = v[i];
  }
  int64_t numel = sl_shape_numel(x);
  if (infer_at >= 0) {
    if (known == 0)
      return sl__fail(SL_EINVAL,
                      "shape: -1 is ambiguous when another extent is 0");
    if (numel % known != 0)
      return sl__fail(SL_EINVAL,
                      "cannot reshape %s (%lld elements) to a multiple of "
                      "%lld elements",
                      sl__shape_text(x).s, (long long)numel, (long long)known);
    out->dims[infer_at] = numel / known;
    known = numel;
  }
  if (known != numel) {
    sl_shape given = *out;
    return sl__fail(SL_EINVAL, "cannot reshape %s (%lld elements) to %s (%lld)",
                    sl__shape_text(x).s, (long long)numel,
                    sl__shape_text(&given).s, (long long)known);
  }
  return SL_OK;
}

static sl_status reshape_infer(const sl__attrs *at, int n_in,
                               const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  out[0].dtype = in[0].dtype;
  return reshape_target(at, &in[0].shape, &out[0].shape);
}

static int reshape_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                        sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  sl_shape to;
  if (n_in != 1 || reshape_target(at, &in[0].shape, &to) != SL_OK) return 0;
  const sl_shape *x = &in[0].shape;
  int64_t pi = 1;
  for (int i = 0; i < x->ndim; pi *= x->dims[i], i++) {
    int64_t pj = 1;
    for (int j = 0; j < to.ndim; pj *= to.dims[j], j++) {
      bool same = x->dims[i] == to.dims[j];
      /* An axis of extent 1 is never cut into equal parts of a mesh. */
      if (pi != pj || (!same && (x->dims[i] < 2 || to.dims[j] < 2))) continue;
      sl__sbp_sig *s = sl__sig_begin(&l);
      s->in[0] = sl__S(i);
      s->out[0] = sl__S(j);
      s->even = !same;
      sl__sig_commit(&l);
    }
  }
  partial_passthrough(&l, 1);
  return l.n;
}

static sl_status reshape_cpu(const sl__kernel_ctx *k) {
  int64_t n = sl_shape_numel(&k->out_meta[0].shape);
  if (n != sl_shape_numel(&k->in_meta[0].shape))
    return sl__fail(SL_EINVAL, "local shards %s and %s differ in size",
                    sl__shape_text(&k->in_meta[0].shape).s,
                    sl__shape_text(&k->out_meta[0].shape).s);
  if (n && k->out[0] != k->in[0])
    memcpy(k->out[0], k->in[0], (size_t)n * sl_dtype_size(k->in_meta[0].dtype));
  return SL_OK;
}

const sl__op_def sl__op_reshape = {
    .name = "reshape",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = reshape_infer,
    .signatures = reshape_sigs,
    .cpu = reshape_cpu,
    .inplace = true, /* a copy, or nothing when given its input's bytes */
};

/* ---- transpose
 * ------------------------------------------------------------------- */

static sl_status transpose_perm(const sl__attrs *at, int ndim, int *perm) {
  int n;
  const int64_t *v = sl__attr_ints(at, "perm", &n);
  if (!v)
    return sl__fail(SL_EINVAL, "attribute 'perm' (a list of axes) missing");
  if (n != ndim)
    return sl__fail(SL_EINVAL, "perm has %d entries for a %d-dim input", n,
                    ndim);
  unsigned seen = 0;
  for (int j = 0; j < n; j++) {
    SL_CHECK(sl__axis_norm("perm entry", v[j], ndim, &perm[j]));
    if (seen & (1u << perm[j]))
      return sl__fail(SL_EINVAL, "perm lists axis %d twice", perm[j]);
    seen |= 1u << perm[j];
  }
  return SL_OK;
}

static sl_status transpose_infer(const sl__attrs *at, int n_in,
                                 const sl__meta *in, sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  int perm[SL_MAX_DIMS];
  SL_CHECK(transpose_perm(at, in[0].shape.ndim, perm));
  out[0] = in[0];
  for (int j = 0; j < in[0].shape.ndim; j++)
    out[0].shape.dims[j] = in[0].shape.dims[perm[j]];
  return SL_OK;
}

static int transpose_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  int perm[SL_MAX_DIMS];
  if (n_in != 1 || transpose_perm(at, in[0].shape.ndim, perm) != SL_OK)
    return 0;
  for (int j = 0; j < in[0].shape.ndim; j++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = sl__S(perm[j]);
    s->out[0] = sl__S(j);
    sl__sig_commit(&l);
  }
  partial_passthrough(&l, 1);
  return l.n;
}

/* A transpose's copy, its output's first axis cut over the device's team:
 * part [b, e) of that axis is a strided copy of its own. */
typedef struct transpose_run {
  size_t es;
  const sl_shape *out;
  const int64_t *ss; /* the input's strides, in the output's axis order */
  int64_t out_row;   /* output elements per index of axis 0 */
  char *dst;
  const char *src;
} transpose_run;

static void transpose_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const transpose_run *r = arg;
  int64_t dims[SL_MAX_DIMS];
  memcpy(dims, r->out->dims, sizeof dims);
  dims[0] = e - b;
  sl__copy_strided(r->es, r->out->ndim, dims,
                   r->dst + (size_t)(b * r->out_row) * r->es,
                   r->src + (size_t)(b * r->ss[0]) * r->es, r->ss);
}

static sl_status transpose_cpu(const sl__kernel_ctx *k) {
  const sl_shape *x = &k->in_meta[0].shape, *y = &k->out_meta[0].shape;
  int perm[SL_MAX_DIMS];
  SL_CHECK(transpose_perm(k->attrs, x->ndim, perm));
  int64_t xs[SL_MAX_DIMS], ss[SL_MAX_DIMS];
  sl_shape_strides(x, xs);
  for (int j = 0; j < x->ndim; j++)
    ss[j] = xs[perm[j]];
  size_t es = sl_dtype_size(k->in_meta[0].dtype);
  int64_t numel = sl_shape_numel(y);
  if (x->ndim == 0 || numel == 0) {
    sl__copy_strided(es, x->ndim, y->dims, k->out[0], k->in[0], ss);
    return SL_OK;
  }
  transpose_run r = {es, y, ss, numel / y->dims[0], k->out[0], k->in[0]};
  sl__team_for(k->team, y->dims[0], SL__GRAIN_ELEMS / r.out_row + 1,
               transpose_part, &r);
  return SL_OK;
}

const sl__op_def sl__op_transpose = {
    .name = "transpose",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = transpose_infer,
    .signatures = transpose_sigs,
    .cpu = transpose_cpu,
};

/* ---- broadcast_to
 * ---------------------------------------------------------------- */

static sl_status bto_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  sl_shape to;
  SL_CHECK(sl__attr_shape(at, "shape", &to));
  if (!sl__broadcasts_to(&in[0].shape, &to))
    return sl__fail(SL_EINVAL, "cannot broadcast %s to %s",
                    sl__shape_text(&in[0].shape).s, sl__shape_text(&to).s);
  out[0].dtype = in[0].dtype;
  out[0].shape = to;
  return SL_OK;
}

static int bto_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                    sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  sl_shape to;
  if (n_in != 1 || sl__attr_shape(at, "shape", &to) != SL_OK ||
      !sl__broadcasts_to(&in[0].shape, &to))
    return 0;
  int off = to.ndim - in[0].shape.ndim;
  for (int j = 0; j < to.ndim; j++) {
    int i = j - off;
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = i >= 0 && in[0].shape.dims[i] == to.dims[j] ? sl__S(i) : sl__B();
    s->out[0] = sl__S(j);
    sl__sig_commit(&l);
  }
  partial_passthrough(&l, 1);
  return l.n;
}

#define FILL_ROWS(T)                                                           \
  do {                                                                         \
    sl__iter_pos p;                                                            \
    sl__iter_seek(&it, 0, &p);                                                 \
    for (int64_t r = 0; r < it.rows; r++, sl__iter_next(&it, &p)) {            \
      T *o = (T *)k->out[0] + p.off[0];                                        \
      const T *x = (const T *)k->in[0] + p.off[1];                             \
      if (s == 0) {                                                            \
        T v = x[0];                                                            \
        for (int64_t j = 0; j < it.len; j++)                                   \
          o[j] = v;                                                            \
      } else {                                                                 \
        memcpy(o, x, (size_t)it.len * sizeof(T));                              \
      }                                                                        \
    }                                                                          \
  } while (0)

static sl_status bto_cpu(const sl__kernel_ctx *k) {
  const sl_shape *xs[1] = {&k->in_meta[0].shape};
  if (!sl__broadcasts_to(xs[0], &k->out_meta[0].shape))
    return sl__fail(SL_EINVAL, "local shard %s does not broadcast to %s",
                    sl__shape_text(xs[0]).s,
                    sl__shape_text(&k->out_meta[0].shape).s);
  sl__iter it;
  sl__iter_init(&it, &k->out_meta[0].shape, 1, xs);
  if (it.empty) return SL_OK;
  int64_t s = it.strides[1][it.ndim - 1];
  switch (sl_dtype_size(k->in_meta[0].dtype)) {
  case 1: FILL_ROWS(uint8_t); break;
  case 2: FILL_ROWS(uint16_t); break;
  case 4: FILL_ROWS(uint32_t); break;
  default: FILL_ROWS(uint64_t); break;
  }
  return SL_OK;
}

const sl__op_def sl__op_broadcast_to = {
    .name = "broadcast_to",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = bto_infer,
    .signatures = bto_sigs,
    .cpu = bto_cpu,
};

/* ---- slice
 * ----------------------------------------------------------------------- */

/* axis, start, end from the attributes, negative values counted from the
 * end (Python style), checked against the axis's extent. */
static sl_status slice_range(const sl__attrs *at, const sl_shape *x, int *axis,
                             int64_t *start, int64_t *end) {
  *start = *end = 0;
  SL_CHECK(sl__axis_norm("axis", sl__attr_int(at, "axis", 0), x->ndim, axis));
  if (!sl__attr_has(at, "start") || !sl__attr_has(at, "end"))
    return sl__fail(SL_EINVAL, "attributes 'start' and 'end' are required");
  int64_t len = x->dims[*axis];
  int64_t s = sl__attr_int(at, "start", 0), e = sl__attr_int(at, "end", 0);
  int64_t s2 = s < 0 ? s + len : s, e2 = e < 0 ? e + len : e;
  if (s2 < 0 || e2 > len || s2 > e2)
    return sl__fail(SL_EINVAL,
                    "slice [%lld, %lld) out of range for axis %d of extent "
                    "%lld",
                    (long long)s, (long long)e, *axis, (long long)len);
  *start = s2;
  *end = e2;
  return SL_OK;
}

static sl_status slice_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                             sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  int axis;
  int64_t s, e;
  SL_CHECK(slice_range(at, &in[0].shape, &axis, &s, &e));
  out[0] = in[0];
  out[0].shape.dims[axis] = e - s;
  return SL_OK;
}

static int slice_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                      sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  int axis;
  int64_t s, e;
  if (n_in != 1 || slice_range(at, &in[0].shape, &axis, &s, &e) != SL_OK)
    return 0;
  for (int i = 0; i < in[0].shape.ndim; i++) {
    if (i == axis) continue;
    sl__sbp_sig *g = sl__sig_begin(&l);
    g->in[0] = g->out[0] = sl__S(i);
    sl__sig_commit(&l);
  }
  partial_passthrough(&l, 1);
  return l.n;
}

static sl_status slice_cpu(const sl__kernel_ctx *k) {
  const sl_shape *x = &k->in_meta[0].shape;
  int axis;
  int64_t s, e;
  /* The sliced axis is never split, so the global range applies to the
   * local shard. */
  SL_CHECK(slice_range(k->attrs, &k->in_global[0], &axis, &s, &e));
  if (x->dims[axis] != k->in_global[0].dims[axis])
    return sl__fail(SL_EINVAL, "axis %d is split; slice needs it whole", axis);
  size_t es = sl_dtype_size(k->in_meta[0].dtype);
  int64_t xs[SL_MAX_DIMS];
  sl_shape_strides(x, xs);
  if (sl_shape_numel(&k->out_meta[0].shape) == 0) return SL_OK;
  sl__copy_strided(es, x->ndim, k->out_meta[0].shape.dims, k->out[0],
                   (const char *)k->in[0] + (size_t)(s * xs[axis]) * es, xs);
  return SL_OK;
}

const sl__op_def sl__op_slice = {
    .name = "slice",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = slice_infer,
    .signatures = slice_sigs,
    .cpu = slice_cpu,
};

/* ---- concat
 * ---------------------------------------------------------------------- */

static sl_status concat_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                              sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 2, SL_OP_MAX_INPUTS));
  SL_CHECK(sl__check_same_dtype(n_in, in));
  int axis;
  SL_CHECK(sl__axis_norm("axis", sl__attr_int(at, "axis", 0), in[0].shape.ndim,
                         &axis));
  out[0] = in[0];
  for (int i = 1; i < n_in; i++) {
    const sl_shape *a = &in[0].shape, *b = &in[i].shape;
    bool ok = a->ndim == b->ndim;
    for (int d = 0; ok && d < a->ndim; d++)
      ok = d == axis || a->dims[d] == b->dims[d];
    if (!ok)
      return sl__fail(SL_EINVAL, "inputs 0 %s and %d %s differ outside axis %d",
                      sl__shape_text(a).s, i, sl__shape_text(b).s, axis);
    out[0].shape.dims[axis] += b->dims[axis];
  }
  return SL_OK;
}

static int concat_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                       sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, n_in, 1);
  sl__meta out[SL_OP_MAX_OUTPUTS];
  if (concat_infer(at, n_in, in, out) != SL_OK) return 0;
  int axis;
  sl__axis_norm("axis", sl__attr_int(at, "axis", 0), in[0].shape.ndim, &axis);
  for (int d = 0; d < in[0].shape.ndim; d++) {
    if (d == axis) continue;
    sl__sbp_sig *s = sl__sig_begin(&l);
    for (int i = 0; i < n_in; i++)
      s->in[i] = sl__S(d);
    s->out[0] = sl__S(d);
    sl__sig_commit(&l);
  }
  partial_passthrough(&l, n_in);
  return l.n;
}

static sl_status concat_cpu(const sl__kernel_ctx *k) {
  const sl_shape *o = &k->out_meta[0].shape;
  int axis;
  SL_CHECK(
      sl__axis_norm("axis", sl__attr_int(k->attrs, "axis", 0), o->ndim, &axis));
  size_t es = sl_dtype_size(k->out_meta[0].dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++)
    outer *= o->dims[d];
  for (int d = axis + 1; d < o->ndim; d++)
    inner *= o->dims[d];
  /* Each input fills a run of its axis extent * inner elements in every
   * outer row of the output. */
  size_t orow = (size_t)(o->dims[axis] * inner) * es;
  size_t at = 0;
  for (int i = 0; i < k->n_in; i++) {
    size_t run = (size_t)(k->in_meta[i].shape.dims[axis] * inner) * es;
    const char *src = k->in[i];
    char *dst = (char *)k->out[0] + at;
    if (run)
      for (int64_t r = 0; r < outer; r++)
        memcpy(dst + (size_t)r * orow, src + (size_t)r * run, run);
    at += run;
  }
  return SL_OK;
}

const sl__op_def sl__op_concat = {
    .name = "concat",
    .min_in = 2,
    .max_in = SL_OP_MAX_INPUTS,
    .n_out = 1,
    .infer = concat_infer,
    .signatures = concat_sigs,
    .cpu = concat_cpu,
};
