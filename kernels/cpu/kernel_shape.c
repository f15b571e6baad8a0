/* The helpers the CPU and CUDA kernels share that need only core and
 * tensor (kernel_util.h declares them): shape text, argument checks,
 * broadcasting, the strided iterator and matmul's dims. The CUDA module
 * compiles this file too (cuda/CMakeLists.txt), so it must not grow
 * dependencies on the layers above tensor. */
#include <stdio.h>
#include <string.h>

#include "cpu/dense_util.h"
#include "cpu/kernel_util.h"

sl__shape_txt sl__shape_text(const sl_shape *s) {
  sl__shape_txt t;
  sl_shape_print(s, t.s, sizeof t.s);
  return t;
}

/* ---- argument checks ------------------------------------------------------
 */

sl_status sl__check_dtype(const char *what, sl_dtype dt, unsigned allowed) {
  if ((unsigned)dt < SL_DTYPE_COUNT && (allowed & SL__DT(dt))) return SL_OK;
  char list[128] = "";
  size_t len = 0;
  for (int d = 0; d < SL_DTYPE_COUNT; d++)
    if (allowed & SL__DT(d))
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                              len ? ", " : "", sl_dtype_name((sl_dtype)d));
  return sl__fail(SL_EINVAL, "%s: dtype %s not supported (%s)", what,
                  sl_dtype_name(dt), list);
}

sl_status sl__check_same_dtype(int n, const sl__meta *in) {
  for (int i = 1; i < n; i++)
    if (in[i].dtype != in[0].dtype)
      return sl__fail(SL_EINVAL, "inputs 0 and %d: dtypes %s and %s differ", i,
                      sl_dtype_name(in[0].dtype), sl_dtype_name(in[i].dtype));
  return SL_OK;
}

sl_status sl__check_arity(int n_in, int min, int max) {
  if (n_in >= min && n_in <= max) return SL_OK;
  if (min == max)
    return sl__fail(SL_EINVAL, "%d inputs given, takes %d", n_in, min);
  return sl__fail(SL_EINVAL, "%d inputs given, takes %d to %d", n_in, min, max);
}

sl_status sl__axis_norm(const char *what, int64_t axis, int ndim, int *out) {
  *out = 0;
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    return sl__fail(SL_EINVAL, "%s %lld out of range for a %d-dim input", what,
                    (long long)axis, ndim);
  *out = (int)a;
  return SL_OK;
}

bool sl__attr_number(const sl__attrs *at, const char *name, double *out) {
  for (int i = 0; at && i < at->n; i++) {
    if (strcmp(at->a[i].name, name) != 0) continue;
    if (at->a[i].kind == SL__ATTR_FLOAT) {
      *out = at->a[i].f;
      return true;
    }
    if (at->a[i].kind == SL__ATTR_INT) {
      *out = (double)at->a[i].i;
      return true;
    }
    return false;
  }
  return false;
}

sl_status sl__broadcast_shapes(const sl_shape *a, const sl_shape *b,
                               sl_shape *out) {
  memset(out, 0, sizeof *out);
  int n = SL_MAX(a->ndim, b->ndim);
  out->ndim = n;
  for (int i = 0; i < n; i++) {
    int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
    int64_t ea = ia >= 0 ? a->dims[ia] : 1, eb = ib >= 0 ? b->dims[ib] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      sl_status st =
          sl__fail(SL_EINVAL,
                   "shapes %s and %s do not broadcast (axis %d: %lld vs %lld)",
                   sl__shape_text(a).s, sl__shape_text(b).s, i, (long long)ea,
                   (long long)eb);
      memset(out, 0, sizeof *out);
      return st;
    }
    out->dims[i] = ea == 1 ? eb : ea;
  }
  return SL_OK;
}

bool sl__broadcasts_to(const sl_shape *from, const sl_shape *to) {
  if (from->ndim > to->ndim) return false;
  int off = to->ndim - from->ndim;
  for (int i = 0; i < from->ndim; i++)
    if (from->dims[i] != 1 && from->dims[i] != to->dims[i + off]) return false;
  return true;
}

/* ---- iteration ------------------------------------------------------------
 */

/* Merges dim d into d+1 wherever every operand is contiguous across the
 * pair (stride[d] == stride[d+1] * dims[d+1]), and drops extent-1 dims,
 * whose strides never matter. */
static void iter_merge(sl__iter *it) {
  int nd = 0;
  int64_t dims[SL_MAX_DIMS], st[SL__ITER_MAX_OPS][SL_MAX_DIMS];
  for (int d = 0; d < it->ndim; d++) {
    if (it->dims[d] == 1) continue;
    if (nd > 0) {
      bool ok = true;
      for (int k = 0; k < it->nops && ok; k++)
        ok = st[k][nd - 1] == it->strides[k][d] * it->dims[d];
      if (ok) {
        dims[nd - 1] *= it->dims[d];
        for (int k = 0; k < it->nops; k++)
          st[k][nd - 1] = it->strides[k][d];
        continue;
      }
    }
    dims[nd] = it->dims[d];
    for (int k = 0; k < it->nops; k++)
      st[k][nd] = it->strides[k][d];
    nd++;
  }
  if (nd == 0) { /* a scalar or all extent-1: one element */
    dims[0] = 1;
    for (int k = 0; k < it->nops; k++)
      st[k][0] = 0;
    nd = 1;
  }
  it->ndim = nd;
  memcpy(it->dims, dims, sizeof dims);
  memcpy(it->strides, st, sizeof st);
  it->len = dims[nd - 1];
  it->rows = 1;
  for (int d = 0; d < nd - 1; d++)
    it->rows *= dims[d];
}

static void iter_setup(sl__iter *it, const sl_shape *out, int n_in) {
  SL_ASSERT(n_in + 1 <= SL__ITER_MAX_OPS);
  memset(it, 0, sizeof *it);
  it->nops = n_in + 1;
  it->ndim = out->ndim;
  int64_t s = 1;
  for (int d = out->ndim - 1; d >= 0; d--) {
    it->dims[d] = out->dims[d];
    it->strides[0][d] = s;
    s *= out->dims[d];
    if (out->dims[d] == 0) it->empty = true;
  }
}

void sl__iter_init(sl__iter *it, const sl_shape *out, int n_in,
                   const sl_shape *const *in) {
  iter_setup(it, out, n_in);
  for (int k = 0; k < n_in; k++) {
    const sl_shape *x = in[k];
    int off = out->ndim - x->ndim;
    int64_t s = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
      int xd = d - off;
      if (xd < 0 || x->dims[xd] == 1) {
        it->strides[k + 1][d] = 0;
      } else {
        it->strides[k + 1][d] = s;
        s *= x->dims[xd];
      }
    }
  }
  iter_merge(it);
}

void sl__iter_init_strided(sl__iter *it, const sl_shape *out, int n_in,
                           const int64_t *const *in_strides) {
  iter_setup(it, out, n_in);
  for (int k = 0; k < n_in; k++)
    for (int d = 0; d < out->ndim; d++)
      it->strides[k + 1][d] = in_strides[k][d];
  iter_merge(it);
}

void sl__iter_seek(const sl__iter *it, int64_t r, sl__iter_pos *p) {
  for (int k = 0; k < it->nops; k++)
    p->off[k] = 0;
  for (int d = it->ndim - 2; d >= 0; d--) {
    int64_t e = it->dims[d], i = e ? r % e : 0; /* e == 0: an empty view */
    r = e ? r / e : 0;
    p->idx[d] = i;
    for (int k = 0; k < it->nops; k++)
      p->off[k] += i * it->strides[k][d];
  }
}

/* ---- matmul ---------------------------------------------------------------
 */

sl_status sl__matmul_axes(bool ta, bool tb, int64_t c, const sl_shape *as,
                          const sl_shape *bs, sl__mm_axes *x) {
  char sa[96], sb[96];
  int na = as->ndim, nb = bs->ndim;
  if (na < 2 || nb < 2)
    return sl__fail(
        SL_EINVAL, "%s %s: want at least 2 dims", na < 2 ? "a" : "b",
        na < 2 ? SL__DENSE_SHAPE_STR(sa, as) : SL__DENSE_SHAPE_STR(sb, bs));
  if (c < 1 || c >= na || c >= nb)
    return sl__fail(SL_EINVAL,
                    "a %s and b %s: contract %lld wants 1 to %d axes (each "
                    "operand keeps at least one axis of its own)",
                    SL__DENSE_SHAPE_STR(sa, as), SL__DENSE_SHAPE_STR(sb, bs),
                    (long long)c, (na < nb ? na : nb) - 1);
  x->c = (int)c;
  x->rows = na - x->c;
  x->cols = nb - x->c;
  x->a_k0 = ta ? 0 : x->rows;
  x->a_row0 = ta ? x->c : 0;
  x->b_k0 = tb ? x->cols : 0;
  x->b_col0 = tb ? 0 : x->c;
  for (int t = 0; t < x->c; t++)
    if (as->dims[x->a_k0 + t] != bs->dims[x->b_k0 + t])
      return sl__fail(
          SL_EINVAL,
          "a %s%s and b %s%s: contraction extents differ (%lld vs %lld%s)",
          SL__DENSE_SHAPE_STR(sa, as), ta ? " (transposed)" : "",
          SL__DENSE_SHAPE_STR(sb, bs), tb ? " (transposed)" : "",
          (long long)as->dims[x->a_k0 + t], (long long)bs->dims[x->b_k0 + t],
          nb > 2 && x->c == 1 && !tb
              ? "; b's first axis is contracted, batch_matmul multiplies "
                "batches"
              : "");
  return SL_OK;
}

static int64_t extent(const sl_shape *s, int from, int n) {
  int64_t e = 1;
  for (int i = from; i < from + n; i++)
    e *= s->dims[i];
  return e;
}

sl_status sl__matmul_dims(bool ta, bool tb, int64_t contract,
                          const sl_shape *as, const sl_shape *bs, int64_t *m,
                          int64_t *n, int64_t *k) {
  sl__mm_axes x;
  SL_CHECK(sl__matmul_axes(ta, tb, contract, as, bs, &x));
  *m = extent(as, x.a_row0, x.rows);
  *n = extent(bs, x.b_col0, x.cols);
  *k = extent(as, x.a_k0, x.c);
  return SL_OK;
}
