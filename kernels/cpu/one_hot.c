/* one_hot(labels [...] i32/i64; classes C) -> [..., C] f32: 1 at each
 * label's class, 0 elsewhere.
 *
 * Signatures: (S(i) -> S(i)) for each axis i of labels, and (B -> S(last)):
 * a rank holding classes [c0, c0 + n) (from out_slice) writes only those
 * columns, so a tensor split over the classes is built where it is used
 * (the class-parallel cross-entropy, graph/class_parallel.c).
 * A label outside [0, C) is SL_EINVAL naming the label and its global
 * position, checked before anything is written (on every rank: each sees
 * all its rows' labels, whatever classes it holds). */
#include "cpu/dense_util.h"

#define S sl__dense_S
#define B sl__dense_B

static sl_status oh_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 1));
  SL_CHECK(sl__dense_want_index(&in[0], "labels"));
  int64_t classes = sl__attr_int(at, "classes", 0);
  if (classes < 1)
    return sl__fail(SL_EINVAL, "classes %lld: want at least 1",
                    (long long)classes);
  if (in[0].shape.ndim + 1 > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "labels: %d dims, at most %d",
                    in[0].shape.ndim, SL_MAX_DIMS - 1);
  out[0].dtype = SL_DTYPE_F32;
  out[0].shape = in[0].shape;
  out[0].shape.dims[out[0].shape.ndim++] = classes;
  return SL_OK;
}

static int oh_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                         sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 1) return 0;
  int nd = in[0].shape.ndim;
  for (int i = 0; i < nd; i++)
    n = sl__dense_sig_add(sigs, n, max, 1, (sl_sbp[]){S(i)}, 1,
                          (sl_sbp[]){S(i)});
  return sl__dense_sig_add(sigs, n, max, 1, (sl_sbp[]){B()}, 1,
                           (sl_sbp[]){S(nd)});
}

static sl_status oh_cpu(const sl__kernel_ctx *k) {
  const sl_shape *os = &k->out_meta[0].shape;
  int64_t n, rows = sl__dense_rows_of(os, &n);
  if (rows == 0) return SL_OK;
  int64_t classes = k->out_global[0].dims[os->ndim - 1];
  int64_t c0 = k->out_slice[0].start[os->ndim - 1];
  const void *lab = k->in[0];
  sl_dtype dt = k->in_meta[0].dtype;
  for (int64_t r = 0; r < rows; r++) {
    int64_t c = sl__dense_index(lab, dt, r);
    if (c < 0 || c >= classes) {
      char pos[160];
      sl__dense_global_pos(&k->in_slice[0], r, pos, sizeof pos);
      return sl__fail(SL_EINVAL,
                      "label %lld at position %s out of range [0, %lld)",
                      (long long)c, pos, (long long)classes);
    }
  }
  float *o = k->out[0];
  memset(o, 0, (size_t)(rows * n) * sizeof *o);
  for (int64_t r = 0; r < rows; r++) {
    int64_t c = sl__dense_index(lab, dt, r) - c0;
    if (c >= 0 && c < n) o[r * n + c] = 1.0f;
  }
  return SL_OK;
}

const sl__op_def sl__op_one_hot = {
    .name = "one_hot",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = oh_infer,
    .signatures = oh_signatures,
    .cpu = oh_cpu,
};
