/* causal_mask(x; fill): over the last two dims [..., q, k] of x, elements
 * whose GLOBAL key position k is after the global query position q are set
 * to fill (-inf before a softmax in attention); the rest pass through.
 *
 * Positions come from in_slice, so a split on any axis (batch, heads,
 * queries or keys) masks the same elements as one device does. Partial
 * inputs are accepted only when fill == 0: then masking is linear (sum of
 * masked parts = masked sum), which also makes causal_mask(dy, fill=0) the
 * op's own gradient. With any other fill every part would carry it. */
#include <math.h>
#include <string.h>

#include "cpu/kernel_util.h"

static double fill_value(const sl__attrs *at) {
  double v = 0;
  sl__attr_number(at, "fill", &v);
  return v;
}

static sl_status mask_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                            sl__meta *out) {
  SL_CHECK(sl__check_arity(n_in, 1, 1));
  SL_CHECK(sl__check_dtype("input 0", in[0].dtype, SL__DT_FLOAT));
  if (in[0].shape.ndim < 2)
    return sl__fail(SL_EINVAL,
                    "input %s has %d dims; causal_mask needs [..., q, k]",
                    sl__shape_text(&in[0].shape).s, in[0].shape.ndim);
  if (!sl__attr_has(at, "fill"))
    return sl__fail(SL_EINVAL, "attribute 'fill' (a number) missing");
  out[0] = in[0];
  return SL_OK;
}

static int mask_sigs(const sl__attrs *at, int n_in, const sl__meta *in,
                     sl__sbp_sig *sigs, int max) {
  sl__sig_list l;
  sl__sig_list_init(&l, sigs, max, 1, 1);
  if (n_in != 1) return 0;
  for (int i = 0; i < in[0].shape.ndim; i++) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = s->out[0] = sl__S(i);
    sl__sig_commit(&l);
  }
  if (fill_value(at) == 0) {
    sl__sbp_sig *s = sl__sig_begin(&l);
    s->in[0] = s->out[0] = sl__P();
    sl__sig_commit(&l);
  }
  return l.n;
}

/* Per row (one global query position q): keys [k0, k0 + n) of the shard;
 * those with key > q are masked, i.e. the row keeps its first
 * clamp(q - k0 + 1, 0, n) elements. Rows [b, e); row r's query is the
 * shard's first plus r mod its query extent, stepped row by row (a
 * division per row cost more than masking a row of 32). */
#define MASK_ROWS(T)                                                           \
  do {                                                                         \
    const T *x = k->in[0];                                                     \
    T *o = k->out[0];                                                          \
    T f = (T)fill;                                                             \
    const sl_slice *sl = &k->in_slice[0];                                      \
    int64_t nq = sl->extent[nd - 2], iq = b % nq;                              \
    for (int64_t r = b; r < e; r++, iq = iq + 1 == nq ? 0 : iq + 1) {          \
      int64_t keep = sl->start[nd - 2] + iq - sl->start[nd - 1] + 1;           \
      keep = keep < 0 ? 0 : (keep > n ? n : keep);                             \
      const T *xr = x + r * n;                                                 \
      T *orow = o + r * n;                                                     \
      if (orow != xr) memcpy(orow, xr, (size_t)keep * sizeof(T));              \
      for (int64_t j = keep; j < n; j++)                                       \
        orow[j] = f;                                                           \
    }                                                                          \
  } while (0)

/* One call's rows, cut over the device's team (each row is one thread's,
 * so the result does not depend on the team). */
typedef struct mask_run {
  const sl__kernel_ctx *k;
  int nd;
  int64_t n;
  double fill;
} mask_run;

static void mask_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  const mask_run *m = arg;
  const sl__kernel_ctx *k = m->k;
  int nd = m->nd;
  int64_t n = m->n;
  double fill = m->fill;
  if (k->in_meta[0].dtype == SL_DTYPE_F32)
    MASK_ROWS(float);
  else
    MASK_ROWS(double);
}

static sl_status mask_cpu(const sl__kernel_ctx *k) {
  const sl_shape *s = &k->in_meta[0].shape;
  if (sl_shape_numel(s) == 0) return SL_OK;
  int64_t rows = sl__shape_rows(s);
  mask_run m = {k, s->ndim, sl__shape_len(s), fill_value(k->attrs)};
  sl__team_for(k->team, rows, SL__GRAIN_ELEMS / (m.n + 1) + 1, mask_part, &m);
  return SL_OK;
}

const sl__op_def sl__op_causal_mask = {
    .name = "causal_mask",
    .min_in = 1,
    .max_in = 1,
    .n_out = 1,
    .infer = mask_infer,
    .signatures = mask_sigs,
    .cpu = mask_cpu,
};
