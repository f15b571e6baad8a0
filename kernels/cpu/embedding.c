/* Embedding lookup (gather of table rows) and its gradient (scatter-add).
 *
 * embedding(table [V, D] f32, ids [...] i32/i64) -> out [..., D],
 *   out[p, :] = table[ids[p], :].
 *   Signatures: (B, S(i) -> S(i)) for each axis i of ids;
 *   (S(1), B -> S(last)); (S(0), B -> P): a rank holding table rows
 *   [r0, r0 + n) (from in_slice) writes those rows and zeros elsewhere, so
 *   the partial sum is the lookup.
 * embedding_grad(dy [..., D] f32, ids [...]; vocab V) -> dtable [V, D],
 *   dtable[v, :] = sum of dy[p, :] over the positions p with ids[p] = v.
 *   Signatures: (S(i), S(i) -> P) for each axis i of ids;
 *   (S(last), B -> S(1)); (B, B -> S(0)): each rank accumulates only the
 *   rows it holds (from out_slice).
 * An id outside [0, V) is SL_EINVAL naming the id and its global position;
 * ids are checked before anything is written. */
#include "cpu/dense_util.h"

#define S sl__dense_S
#define B sl__dense_B
#define P sl__dense_P

static sl_status emb_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 2));
  SL_CHECK(sl__dense_want_f32(&in[0], "table"));
  SL_CHECK(sl__dense_want_index(&in[1], "ids"));
  char st[96];
  if (in[0].shape.ndim != 2)
    return sl__fail(SL_EINVAL, "table %s: want 2 dims [vocab, dim]",
                    SL__DENSE_SHAPE_STR(st, &in[0].shape));
  if (in[1].shape.ndim + 1 > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "ids: %d dims, at most %d", in[1].shape.ndim,
                    SL_MAX_DIMS - 1);
  out[0].dtype = SL_DTYPE_F32;
  out[0].shape = in[1].shape;
  out[0].shape.dims[out[0].shape.ndim++] = in[0].shape.dims[1];
  return SL_OK;
}

static int emb_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 2) return 0;
  int ni = in[1].shape.ndim;
  for (int i = 0; i < ni; i++)
    n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){B(), S(i)}, 1,
                          (sl_sbp[]){S(i)});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(1), B()}, 1,
                        (sl_sbp[]){S(ni)});
  return sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(0), B()}, 1,
                           (sl_sbp[]){P()});
}

/* Every id of input `in` (n of them) in [0, vocab). */
static sl_status check_ids(const sl__kernel_ctx *k, int in, int64_t n,
                           int64_t vocab) {
  const void *ids = k->in[in];
  sl_dtype dt = k->in_meta[in].dtype;
  for (int64_t p = 0; p < n; p++) {
    int64_t v = sl__dense_index(ids, dt, p);
    if (v < 0 || v >= vocab) {
      char pos[160];
      sl__dense_global_pos(&k->in_slice[in], p, pos, sizeof pos);
      return sl__fail(SL_EINVAL,
                      "id %lld at position %s out of range [0, %lld)",
                      (long long)v, pos, (long long)vocab);
    }
  }
  return SL_OK;
}

static sl_status emb_cpu(const sl__kernel_ctx *k) {
  const sl_shape *ts = &k->in_meta[0].shape;
  if (k->in_global[0].ndim != 2 || k->in_slice[0].ndim != 2)
    return sl__fail(SL_EINVAL, "embedding: the table's global shape and slice "
                               "are missing");
  int64_t vocab = k->in_global[0].dims[0];
  int64_t row0 = k->in_slice[0].start[0], nrows = ts->dims[0], d = ts->dims[1];
  int64_t n = sl_shape_numel(&k->in_meta[1].shape);
  SL_CHECK(check_ids(k, 1, n, vocab));
  const float *table = k->in[0];
  const void *ids = k->in[1];
  sl_dtype dt = k->in_meta[1].dtype;
  float *out = k->out[0];
  if (d == 0) return SL_OK;
  for (int64_t p = 0; p < n; p++) {
    int64_t v = sl__dense_index(ids, dt, p) - row0;
    if (v >= 0 && v < nrows)
      memcpy(out + p * d, table + v * d, (size_t)d * sizeof *out);
    else
      memset(out + p * d, 0, (size_t)d * sizeof *out);
  }
  return SL_OK;
}

const sl__op_def sl__op_embedding = {
    .name = "embedding",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = emb_infer,
    .signatures = emb_signatures,
    .cpu = emb_cpu,
};

/* ---- embedding_grad ----------------------------------------------------- */

static sl_status embg_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 2));
  SL_CHECK(sl__dense_want_f32(&in[0], "dy"));
  SL_CHECK(sl__dense_want_index(&in[1], "ids"));
  int64_t vocab = sl__attr_int(at, "vocab", -1);
  if (vocab < 0)
    return sl__fail(SL_EINVAL,
                    "attribute vocab %lld: want the table's row "
                    "count (>= 0)",
                    (long long)vocab);
  sl_shape want = sl__dense_drop_last(&in[0].shape);
  if (in[0].shape.ndim < 1 || !sl_shape_equal(&want, &in[1].shape)) {
    char sd[96], si[96];
    return sl__fail(SL_EINVAL, "dy %s and ids %s: want dy [ids..., dim]",
                    SL__DENSE_SHAPE_STR(sd, &in[0].shape),
                    SL__DENSE_SHAPE_STR(si, &in[1].shape));
  }
  out[0].dtype = SL_DTYPE_F32;
  out[0].shape.ndim = 2;
  out[0].shape.dims[0] = vocab;
  out[0].shape.dims[1] = in[0].shape.dims[in[0].shape.ndim - 1];
  for (int i = 2; i < SL_MAX_DIMS; i++)
    out[0].shape.dims[i] = 0;
  return SL_OK;
}

static int embg_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__sbp_sig *sigs, int max) {
  int n = 0;
  if (n_in != 2) return 0;
  int ni = in[1].shape.ndim;
  for (int i = 0; i < ni; i++)
    n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(i), S(i)}, 1,
                          (sl_sbp[]){P()});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(ni), B()}, 1,
                        (sl_sbp[]){S(1)});
  return sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){B(), B()}, 1,
                           (sl_sbp[]){S(0)});
}

static sl_status embg_cpu(const sl__kernel_ctx *k) {
  const sl_shape *os = &k->out_meta[0].shape;
  if (k->out_global[0].ndim != 2 || k->out_slice[0].ndim != 2)
    return sl__fail(SL_EINVAL, "embedding_grad: the table's global shape and "
                               "slice are missing");
  int64_t vocab = k->out_global[0].dims[0];
  int64_t row0 = k->out_slice[0].start[0], nrows = os->dims[0], d = os->dims[1];
  int64_t n = sl_shape_numel(&k->in_meta[1].shape);
  SL_CHECK(check_ids(k, 1, n, vocab));
  const float *dy = k->in[0];
  const void *ids = k->in[1];
  sl_dtype dt = k->in_meta[1].dtype;
  float *out = k->out[0];
  if (nrows == 0 || d == 0) return SL_OK;
  memset(out, 0, (size_t)(nrows * d) * sizeof *out);
  for (int64_t p = 0; p < n; p++) {
    int64_t v = sl__dense_index(ids, dt, p) - row0;
    if (v < 0 || v >= nrows) continue;
    float *o = out + v * d;
    const float *g = dy + p * d;
    for (int64_t j = 0; j < d; j++)
      o[j] += g[j];
  }
  return SL_OK;
}

const sl__op_def sl__op_embedding_grad = {
    .name = "embedding_grad",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = embg_infer,
    .signatures = embg_signatures,
    .cpu = embg_cpu,
};
