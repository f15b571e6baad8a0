/* matmul and batch_matmul: shape inference, SBP signatures and the CPU
 * kernels. Every product is one sl__blas_sgemm call per matrix pair, reading
 * f32 shards where they lie (transposes are sgemm flags, never copies).
 * Inputs may also be bf16 or f16 (storage only: mixed precision, docs/
 * api.md), products accumulating in f32: two bf16 shards go to the bf16
 * gemm where the CPU has one (cpu/blas.h, AVX512_BF16); otherwise 16-bit
 * shards are widened to f32 in the workspace first, exactly, for sgemm.
 *
 * matmul(a, b; trans_a, trans_b, contract = c, 1 when absent): the c
 *   contraction axes k... of a and of b, in the same order and extents,
 *   are summed over:
 *   a [rows..., k...], or [k..., rows...] with trans_a;
 *   b [k..., cols...], or [cols..., k...] with trans_b;
 *   out [rows..., cols...], at least one row axis and one column axis.
 *   In memory that is one [m, k] x [k, n] product (m, n, k the products of
 *   the rows', columns' and contraction axes' extents), so a split of any
 *   axis leaves each shard a product of the same form, even split
 *   unevenly: (S(row axis of a), B -> S(its axis in out));
 *   (B, S(column axis of b) -> S(its axis in out)); (S(t-th contraction
 *   axis of a), S(t-th of b) -> P); (P, B -> P); (B, P -> P).
 * batch_matmul(a, b; trans_a, trans_b):
 *   a [..., m, k] (or [..., k, m]), b [..., k, n] (or [..., n, k]) with the
 *   same batch dims. Out [..., m, n].
 *   (S(i), S(i) -> S(i)) for each batch axis; (S(m), B -> S(m));
 *   (B, S(n) -> S(n)); (S(k), S(k) -> P); (P, B -> P); (B, P -> P). */
#include <stdatomic.h>

#include "cpu/blas.h"
#include "cpu/dense_util.h"

#define S sl__dense_S
#define B sl__dense_B
#define P sl__dense_P

typedef struct mm_dims {
  int64_t batch, m, n, k;
  int a_m, a_k, b_k, b_n; /* axes of a and b holding m, k, k, n */
} mm_dims;

/* A 16-bit float stored input (bf16 or f16). */
static bool half(sl_dtype dt) {
  return dt == SL_DTYPE_BF16 || dt == SL_DTYPE_F16;
}

/* f32, bf16 or f16 inputs (16-bit storage, f32 products and output). */
static sl_status want_float_pair(const sl__meta *in) {
  const char *names[2] = {"a", "b"};
  for (int i = 0; i < 2; i++)
    if (in[i].dtype != SL_DTYPE_F32 && !half(in[i].dtype))
      return sl__fail(SL_EINVAL, "%s: dtype %s, want f32, bf16 or f16",
                      names[i], sl_dtype_name(in[i].dtype));
  return SL_OK;
}

/* Two bf16 inputs that the bf16 gemm multiplies as they are. */
static bool bgemm_inputs(const sl__kernel_ctx *k) {
  return k->in_meta[0].dtype == SL_DTYPE_BF16 &&
         k->in_meta[1].dtype == SL_DTYPE_BF16 && sl__blas_bgemm_name();
}

/* Workspace bytes: an f32 copy of each 16-bit input shard, 64-byte
 * aligned. */
static size_t widen_bytes(const sl__meta *m) {
  if (!half(m->dtype)) return 0;
  return ((size_t)sl_shape_numel(&m->shape) * sizeof(float) + 63) & ~(size_t)63;
}

static size_t mm_workspace(const sl__kernel_ctx *k) {
  if (bgemm_inputs(k)) return 0;
  return widen_bytes(&k->in_meta[0]) + widen_bytes(&k->in_meta[1]);
}

/* The f32 view of inputs a and b: the shards themselves, or 16-bit shards
 * widened into the workspace (bf16 is the top half of an f32; every f16
 * is an f32 too). */
static sl_status mm_operands(const sl__kernel_ctx *k, const float **ab) {
  char *ws = k->workspace;
  if (mm_workspace(k) > k->workspace_bytes || (mm_workspace(k) && !ws))
    return sl__fail(SL_EINVAL, "matmul: no workspace for 16-bit inputs (run "
                               "it with sl__op_run_cpu)");
  for (int i = 0; i < 2; i++) {
    if (!half(k->in_meta[i].dtype)) {
      ab[i] = k->in[i];
      continue;
    }
    const uint16_t *h = k->in[i];
    float *f = (float *)ws;
    int64_t n = sl_shape_numel(&k->in_meta[i].shape);
    sl__half_convert(k->team, k->in_meta[i].dtype, SL_DTYPE_F32, f, h, n);
    ab[i] = f;
    ws += widen_bytes(&k->in_meta[i]);
  }
  return SL_OK;
}

static sl_status want_flags(const sl__attrs *at) {
  const char *names[2] = {"trans_a", "trans_b"};
  for (int i = 0; i < 2; i++) {
    int64_t v = sl__attr_int(at, names[i], 0);
    if (v != 0 && v != 1)
      return sl__fail(SL_EINVAL, "%s %lld: want 0 or 1", names[i],
                      (long long)v);
  }
  return SL_OK;
}

/* ---- matmul ------------------------------------------------------------- */

static int64_t contract_of(const sl__attrs *at) {
  return sl__attr_int(at, "contract", 1);
}

static sl_status matmul_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                              sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 2));
  SL_CHECK(want_float_pair(in));
  SL_CHECK(want_flags(at));
  bool ta = sl__attr_int(at, "trans_a", 0), tb = sl__attr_int(at, "trans_b", 0);
  sl__mm_axes x;
  SL_CHECK(
      sl__matmul_axes(ta, tb, contract_of(at), &in[0].shape, &in[1].shape, &x));
  out[0].dtype = SL_DTYPE_F32;
  out[0].shape.ndim = x.rows + x.cols;
  for (int i = 0; i < x.rows; i++)
    out[0].shape.dims[i] = in[0].shape.dims[x.a_row0 + i];
  for (int j = 0; j < x.cols; j++)
    out[0].shape.dims[x.rows + j] = in[1].shape.dims[x.b_col0 + j];
  return SL_OK;
}

static int matmul_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                             sl__sbp_sig *sigs, int max) {
  bool ta = sl__attr_int(at, "trans_a", 0), tb = sl__attr_int(at, "trans_b", 0);
  sl__mm_axes x;
  if (n_in != 2 || sl__matmul_axes(ta, tb, contract_of(at), &in[0].shape,
                                   &in[1].shape, &x) != SL_OK)
    return 0;
  int n = 0;
  for (int i = 0; i < x.rows; i++)
    n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(x.a_row0 + i), B()}, 1,
                          (sl_sbp[]){S(i)});
  for (int j = 0; j < x.cols; j++)
    n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){B(), S(x.b_col0 + j)}, 1,
                          (sl_sbp[]){S(x.rows + j)});
  for (int t = 0; t < x.c; t++)
    n = sl__dense_sig_add(sigs, n, max, 2,
                          (sl_sbp[]){S(x.a_k0 + t), S(x.b_k0 + t)}, 1,
                          (sl_sbp[]){P()});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){P(), B()}, 1,
                        (sl_sbp[]){P()});
  return sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){B(), P()}, 1,
                           (sl_sbp[]){P()});
}

/* One sgemm over the whole shard: every operand is its axes' product in
 * row-major order, whichever axes are split. */
static sl_status matmul_cpu(const sl__kernel_ctx *k) {
  bool ta = sl__attr_int(k->attrs, "trans_a", 0),
       tb = sl__attr_int(k->attrs, "trans_b", 0);
  int64_t m, n, kk;
  SL_CHECK(sl__matmul_dims(ta, tb, contract_of(k->attrs), &k->in_meta[0].shape,
                           &k->in_meta[1].shape, &m, &n, &kk));
  float *c = k->out[0];
  if (m == 0 || n == 0) return SL_OK;
  if (kk == 0) {
    memset(c, 0, (size_t)(m * n) * sizeof *c);
    return SL_OK;
  }
  if (bgemm_inputs(k))
    return sl__blas_bgemm_team(k->team, ta, tb, m, n, kk, 1.0f, k->in[0],
                               ta ? m : kk, k->in[1], tb ? kk : n, 0.0f, c, n);
  const float *ab[2];
  SL_CHECK(mm_operands(k, ab));
  return sl__blas_sgemm_team(k->team, ta, tb, m, n, kk, 1.0f, ab[0],
                             ta ? m : kk, ab[1], tb ? kk : n, 0.0f, c, n);
}

const sl__op_def sl__op_matmul = {
    .name = "matmul",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = matmul_infer,
    .signatures = matmul_signatures,
    .workspace = mm_workspace,
    .cpu = matmul_cpu,
};

/* ---- batch_matmul ------------------------------------------------------- */

/* a's k extent (d->k, read at d->a_k) must equal b's at d->b_k. */
static sl_status check_contraction(bool ta, bool tb, const sl_shape *as,
                                   const sl_shape *bs, const mm_dims *d) {
  char sa[96], sb[96];
  if (bs->dims[d->b_k] == d->k) return SL_OK;
  return sl__fail(SL_EINVAL,
                  "a %s%s and b %s%s: contraction extents differ (%lld vs "
                  "%lld)",
                  SL__DENSE_SHAPE_STR(sa, as), ta ? " (transposed)" : "",
                  SL__DENSE_SHAPE_STR(sb, bs), tb ? " (transposed)" : "",
                  (long long)d->k, (long long)bs->dims[d->b_k]);
}

/* b split by columns gives out split by its last axis; a and b split along
 * k give partial sums; a partial operand times a broadcast one stays
 * partial. */
static int column_and_partial_sigs(const mm_dims *d, int na, sl__sbp_sig *sigs,
                                   int n, int max) {
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){B(), S(d->b_n)}, 1,
                        (sl_sbp[]){S(na - 1)});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(d->a_k), S(d->b_k)}, 1,
                        (sl_sbp[]){P()});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){P(), B()}, 1,
                        (sl_sbp[]){P()});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){B(), P()}, 1,
                        (sl_sbp[]){P()});
  return n;
}

static sl_status bmm_dims(bool ta, bool tb, const sl_shape *as,
                          const sl_shape *bs, mm_dims *d) {
  char sa[96], sb[96];
  int na = as->ndim;
  if (na < 2 || bs->ndim != na)
    return sl__fail(SL_EINVAL,
                    "a %s and b %s: want the same number of dims, at least 2",
                    SL__DENSE_SHAPE_STR(sa, as), SL__DENSE_SHAPE_STR(sb, bs));
  d->batch = 1;
  for (int i = 0; i < na - 2; i++) {
    if (as->dims[i] != bs->dims[i])
      return sl__fail(SL_EINVAL, "a %s and b %s: batch dim %d differs",
                      SL__DENSE_SHAPE_STR(sa, as), SL__DENSE_SHAPE_STR(sb, bs),
                      i);
    d->batch *= as->dims[i];
  }
  d->a_m = ta ? na - 1 : na - 2;
  d->a_k = ta ? na - 2 : na - 1;
  d->b_k = tb ? na - 1 : na - 2;
  d->b_n = tb ? na - 2 : na - 1;
  d->m = as->dims[d->a_m];
  d->k = as->dims[d->a_k];
  d->n = bs->dims[d->b_n];
  return check_contraction(ta, tb, as, bs, d);
}

static sl_status bmm_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  SL_CHECK(sl__dense_want_inputs(n_in, 2));
  SL_CHECK(want_float_pair(in));
  SL_CHECK(want_flags(at));
  bool ta = sl__attr_int(at, "trans_a", 0), tb = sl__attr_int(at, "trans_b", 0);
  mm_dims d = {0};
  SL_CHECK(bmm_dims(ta, tb, &in[0].shape, &in[1].shape, &d));
  int na = in[0].shape.ndim;
  out[0].dtype = SL_DTYPE_F32;
  out[0].shape = in[0].shape;
  out[0].shape.dims[na - 2] = d.m;
  out[0].shape.dims[na - 1] = d.n;
  return SL_OK;
}

static int bmm_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  bool ta = sl__attr_int(at, "trans_a", 0), tb = sl__attr_int(at, "trans_b", 0);
  mm_dims d = {0};
  if (n_in != 2 || bmm_dims(ta, tb, &in[0].shape, &in[1].shape, &d) != SL_OK)
    return 0;
  int na = in[0].shape.ndim, n = 0;
  for (int i = 0; i < na - 2; i++)
    n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(i), S(i)}, 1,
                          (sl_sbp[]){S(i)});
  n = sl__dense_sig_add(sigs, n, max, 2, (sl_sbp[]){S(d.a_m), B()}, 1,
                        (sl_sbp[]){S(na - 2)});
  return column_and_partial_sigs(&d, na, sigs, n, max);
}

/* Products [b, e) of a batch, on one member of the device's team: bf16
 * operands for the bf16 gemm, else f32 ones. */
typedef struct bmm_run {
  bool ta, tb, bf16;
  const mm_dims *d;
  const void *a, *b;
  float *c;
  _Atomic sl_status st; /* the first failure */
} bmm_run;

/* Product i of the batch, on the calling thread or cut over a team. */
static sl_status bmm_one(sl__team *team, const bmm_run *r, int64_t i) {
  const mm_dims *d = r->d;
  int64_t sa = d->m * d->k, sb = d->k * d->n, sc = d->m * d->n;
  int64_t lda = r->ta ? d->m : d->k, ldb = r->tb ? d->k : d->n;
  if (r->bf16)
    return sl__blas_bgemm_team(team, r->ta, r->tb, d->m, d->n, d->k, 1.0f,
                               (const uint16_t *)r->a + i * sa, lda,
                               (const uint16_t *)r->b + i * sb, ldb, 0.0f,
                               r->c + i * sc, d->n);
  return sl__blas_sgemm_team(
      team, r->ta, r->tb, d->m, d->n, d->k, 1.0f, (const float *)r->a + i * sa,
      lda, (const float *)r->b + i * sb, ldb, 0.0f, r->c + i * sc, d->n);
}

static void bmm_part(void *arg, int64_t b, int64_t e, int part) {
  (void)part;
  bmm_run *r = arg;
  for (int64_t i = b; i < e; i++) {
    sl_status st = bmm_one(NULL, r, i);
    sl_status ok = SL_OK;
    if (st != SL_OK) atomic_compare_exchange_strong(&r->st, &ok, st);
  }
}

static sl_status bmm_cpu(const sl__kernel_ctx *k) {
  bool ta = sl__attr_int(k->attrs, "trans_a", 0),
       tb = sl__attr_int(k->attrs, "trans_b", 0);
  mm_dims d = {0};
  SL_CHECK(bmm_dims(ta, tb, &k->in_meta[0].shape, &k->in_meta[1].shape, &d));
  float *c = k->out[0];
  int64_t sc = d.m * d.n;
  if (d.batch == 0 || sc == 0) return SL_OK;
  if (d.k == 0) {
    memset(c, 0, (size_t)(d.batch * sc) * sizeof *c);
    return SL_OK;
  }
  bmm_run r = {.ta = ta, .tb = tb, .d = &d, .c = c, .st = SL_OK};
  if (bgemm_inputs(k)) {
    r.bf16 = true;
    r.a = k->in[0];
    r.b = k->in[1];
  } else {
    const float *ab[2];
    SL_CHECK(mm_operands(k, ab));
    r.a = ab[0];
    r.b = ab[1];
  }
  /* Fewer products than threads: each is cut over the team. */
  if (d.batch < sl__team_size(k->team)) {
    for (int64_t i = 0; i < d.batch; i++)
      SL_CHECK(bmm_one(k->team, &r, i));
    return SL_OK;
  }
  double fmas = (double)d.m * (double)d.n * (double)d.k;
  sl__team_for(k->team, d.batch, (int64_t)(SL__BLAS_TEAM_MIN_FMAS / fmas) + 1,
               bmm_part, &r);
  sl_status st = atomic_load(&r.st);
  if (st != SL_OK)
    return sl__fail(st, "batch_matmul: a product on a team thread failed: %s",
                    st == SL_ENOMEM ? "out of memory for packing buffers"
                                    : sl_status_str(st));
  return SL_OK;
}

const sl__op_def sl__op_batch_matmul = {
    .name = "batch_matmul",
    .min_in = 2,
    .max_in = 2,
    .n_out = 1,
    .infer = bmm_infer,
    .signatures = bmm_signatures,
    .workspace = mm_workspace,
    .cpu = bmm_cpu,
};
