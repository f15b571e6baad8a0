/* The shared op test harness (see op_harness.h). */
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

#include "cpu/kernel_util.h"
#include "op_harness.h"
#include "sbp_int.h"

/* ---- test tensors ----------------------------------------------------------
 */

static bool is_float_dtype(sl_dtype dt) { return sl_dtype_is_float(dt); }

sl_shape oph_shape(int ndim, const int64_t *dims) {
  sl_shape s;
  if (sl_shape_make(ndim, dims, &s) != SL_OK)
    fail_msg("oph_shape: %s", sl_last_error());
  return s;
}

static double unit(sl_rng *r) {
  return (double)(sl__rng_next(r) >> 11) * 0x1.0p-53;
}

sl_shape oph_random_shape(sl_rng *r, int ndim, int64_t max_extent,
                          double p_empty) {
  sl_shape s;
  memset(&s, 0, sizeof s);
  s.ndim = ndim;
  for (int d = 0; d < ndim; d++)
    s.dims[d] = unit(r) < p_empty
                    ? 0
                    : 1 + (int64_t)sl__rng_below(r, (uint64_t)max_extent);
  return s;
}

static sl_host_tensor *make_tensor(sl_dtype dt, const sl_shape *shape) {
  sl_host_tensor *t = NULL;
  if (sl_host_tensor_create(dt, shape, &t) != SL_OK)
    fail_msg("tensor %s %s: %s", sl_dtype_name(dt), sl__shape_text(shape).s,
             sl_last_error());
  return t;
}

sl_host_tensor *oph_random(sl_rng *r, sl_dtype dt, const sl_shape *shape,
                           double lo, double hi) {
  sl_host_tensor *t = make_tensor(dt, shape);
  int64_t n = sl_shape_numel(shape);
  for (int64_t i = 0; i < n; i++) {
    double v;
    if (dt == SL_DTYPE_BOOL) {
      v = (double)sl__rng_below(r, 2);
    } else if (is_float_dtype(dt)) {
      /* Multiples of 1/8 in [lo, hi]. */
      int64_t a = (int64_t)ceil(lo * 8), b = (int64_t)floor(hi * 8);
      v = b < a
              ? lo
              : (double)(a + (int64_t)sl__rng_below(r, (uint64_t)(b - a + 1))) /
                    8;
    } else {
      int64_t a = (int64_t)ceil(lo), b = (int64_t)floor(hi);
      v = b < a
              ? lo
              : (double)(a + (int64_t)sl__rng_below(r, (uint64_t)(b - a + 1)));
    }
    sl_host_tensor_set(t, i, v);
  }
  return t;
}

sl_host_tensor *oph_from(sl_dtype dt, const sl_shape *shape,
                         const double *values) {
  sl_host_tensor *t = make_tensor(dt, shape);
  int64_t n = sl_shape_numel(shape);
  for (int64_t i = 0; i < n; i++)
    sl_host_tensor_set(t, i, values[i]);
  return t;
}

uint64_t oph_seed(const char *test_name) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t seed = e && *e ? strtoull(e, NULL, 0)
                          : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
  printf("%s: seed %" PRIu64 " (replay with SLUICE_TEST_SEED=%" PRIu64 ")\n",
         test_name, seed, seed);
  fflush(stdout);
  return seed;
}

/* ---- signatures as text
 * ------------------------------------------------------ */

int oph_nd_print(const sl__sbp_sig *axis_sigs, int ndim, bool output, int index,
                 char *buf, size_t size) {
  sl_nd_sbp nd;
  memset(&nd, 0, sizeof nd);
  nd.ndim = ndim;
  for (int k = 0; k < ndim; k++)
    nd.sbp[k] = output ? axis_sigs[k].out[index] : axis_sigs[k].in[index];
  return sl_nd_sbp_print(&nd, buf, size);
}

/* "in (S(0),B) (B,B) -> out (S(0),B)" for messages. */
static void layout_text(const sl__sbp_sig *sigs, int ndim, int n_in, int n_out,
                        char *buf, size_t size) {
  size_t len = (size_t)snprintf(buf, size, "in");
  for (int i = 0; i < n_in && len < size; i++) {
    char t[96];
    oph_nd_print(sigs, ndim, false, i, t, sizeof t);
    len += (size_t)snprintf(buf + len, size - len, " %s", t);
  }
  if (len < size) len += (size_t)snprintf(buf + len, size - len, " -> out");
  for (int i = 0; i < n_out && len < size; i++) {
    char t[96];
    oph_nd_print(sigs, ndim, true, i, t, sizeof t);
    len += (size_t)snprintf(buf + len, size - len, " %s", t);
  }
}

/* ---- comparison
 * ---------------------------------------------------------------- */

static sl_status compare_values(const char *what, sl_dtype dt,
                                const sl_shape *shape, const void *got,
                                const void *want, oph_tol tol) {
  int64_t n = sl_shape_numel(shape);
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    double g = sl_load_element(dt, got, i), w = sl_load_element(dt, want, i);
    if (dt == SL_DTYPE_I64) {
      int64_t gi, wi;
      memcpy(&gi, (const char *)got + i * 8, 8);
      memcpy(&wi, (const char *)want + i * 8, 8);
      ok = gi == wi;
    } else if (isnan(w) || isnan(g)) {
      ok = isnan(w) && isnan(g);
    } else {
      ok = g == w || fabs(g - w) <= tol.atol + tol.rtol * fabs(w);
    }
    if (!ok) {
      /* The element's coordinates, for a readable message. */
      char pos[160];
      size_t len = 0;
      int64_t rest = i, idx[SL_MAX_DIMS];
      for (int d = shape->ndim - 1; d >= 0; d--) {
        idx[d] = shape->dims[d] ? rest % shape->dims[d] : 0;
        rest = shape->dims[d] ? rest / shape->dims[d] : 0;
      }
      pos[0] = 0;
      for (int d = 0; d < shape->ndim; d++)
        len += (size_t)snprintf(pos + len, sizeof pos - len, "%s%" PRId64,
                                d ? "," : "", idx[d]);
      return sl__fail(SL_EMISMATCH,
                      "%s: element [%s] (flat %" PRId64
                      ") of %s %s: got %.9g, want %.9g (atol %g, rtol %g)",
                      what, pos, i, sl_dtype_name(dt), sl__shape_text(shape).s,
                      g, w, tol.atol, tol.rtol);
    }
  }
  return SL_OK;
}

sl_status oph_compare(const char *what, const sl_host_tensor *got,
                      const sl_host_tensor *want, oph_tol tol) {
  if (sl_host_tensor_dtype(got) != sl_host_tensor_dtype(want) ||
      !sl_shape_equal(sl_host_tensor_shape(got), sl_host_tensor_shape(want)))
    return sl__fail(SL_EMISMATCH, "%s: got %s %s, want %s %s", what,
                    sl_dtype_name(sl_host_tensor_dtype(got)),
                    sl__shape_text(sl_host_tensor_shape(got)).s,
                    sl_dtype_name(sl_host_tensor_dtype(want)),
                    sl__shape_text(sl_host_tensor_shape(want)).s);
  return compare_values(what, sl_host_tensor_dtype(got),
                        sl_host_tensor_shape(got), sl_host_tensor_cdata(got),
                        sl_host_tensor_cdata(want), tol);
}

/* ---- single-device runs
 * --------------------------------------------------------- */

static sl_status infer_outputs(const sl__op_def *op, const sl__attrs *at,
                               int n_in, sl_host_tensor *const *in,
                               sl__meta *in_meta, sl__meta *out_meta) {
  if (n_in < op->min_in || n_in > op->max_in)
    return sl__fail(SL_EINVAL, "op %s: %d inputs, takes %d to %d", op->name,
                    n_in, op->min_in, op->max_in);
  for (int i = 0; i < n_in; i++) {
    in_meta[i].shape = *sl_host_tensor_shape(in[i]);
    in_meta[i].dtype = sl_host_tensor_dtype(in[i]);
  }
  memset(out_meta, 0, sizeof *out_meta * SL_OP_MAX_OUTPUTS);
  sl_status st = op->infer(at, n_in, in_meta, out_meta);
  if (st != SL_OK) return sl__fail_context(st, "op %s: ", op->name);
  return SL_OK;
}

static sl_slice whole_slice(const sl_shape *s) {
  sl_slice sl;
  memset(&sl, 0, sizeof sl);
  sl.ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++)
    sl.extent[d] = s->dims[d];
  return sl;
}

static sl__team *g_team; /* oph_set_team */

void oph_set_team(sl__team *team) { g_team = team; }

sl_status oph_run_single(const sl__op_def *op, const sl__attrs *at, int n_in,
                         sl_host_tensor *const *in, int64_t step,
                         sl_host_tensor **out) {
  sl__meta in_meta[SL_OP_MAX_INPUTS], out_meta[SL_OP_MAX_OUTPUTS];
  for (int o = 0; o < op->n_out; o++)
    out[o] = NULL;
  SL_CHECK(infer_outputs(op, at, n_in, in, in_meta, out_meta));
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  k.attrs = at;
  k.n_in = n_in;
  k.n_out = op->n_out;
  k.step = step;
  k.team = g_team;
  for (int i = 0; i < n_in; i++) {
    k.in[i] = sl_host_tensor_cdata(in[i]);
    k.in_meta[i] = in_meta[i];
    k.in_slice[i] = whole_slice(&in_meta[i].shape);
    k.in_global[i] = in_meta[i].shape;
  }
  sl_status st = SL_OK;
  for (int o = 0; o < op->n_out; o++) {
    SL_CHECK_GOTO(
        sl_host_tensor_create(out_meta[o].dtype, &out_meta[o].shape, &out[o]),
        st, fail);
    k.out[o] = sl_host_tensor_data(out[o]);
    k.out_meta[o] = out_meta[o];
    k.out_slice[o] = whole_slice(&out_meta[o].shape);
    k.out_global[o] = out_meta[o].shape;
  }
  SL_CHECK_GOTO(sl__op_run_cpu(op, &k), st, fail);
  return SL_OK;
fail:
  sl__fail_context(st, "op %s: ", op->name);
  for (int o = 0; o < op->n_out; o++) {
    sl_host_tensor_destroy(out[o]);
    out[o] = NULL;
  }
  return st;
}

void oph_run(const char *name, const sl__attrs *at, int n_in,
             sl_host_tensor *const *in, int64_t step, sl_host_tensor **out) {
  const sl__op_def *op = sl__op_find(name);
  if (!op) fail_msg("no op named %s", name);
  if (oph_run_single(op, at, n_in, in, step, out) != SL_OK)
    fail_msg("%s", sl_last_error());
}

sl__meta oph_meta(sl_dtype dt, int ndim, const int64_t *dims) {
  sl__meta m;
  m.dtype = dt;
  m.shape = oph_shape(ndim, dims);
  return m;
}

void oph_expect_infer_error(const char *name, const sl__attrs *at, int n_in,
                            const sl__meta *in, const char *needle) {
  const sl__op_def *op = sl__op_find(name);
  if (!op) fail_msg("no op named %s", name);
  sl__meta out[SL_OP_MAX_OUTPUTS];
  memset(out, 0, sizeof out);
  sl_status st = op->infer(at, n_in, in, out);
  if (st != SL_EINVAL)
    fail_msg("op %s: infer returned %s, want SL_EINVAL (%s)", name,
             sl_status_str(st), needle);
  const char *msg = sl_last_error();
  if (!strstr(msg, needle))
    fail_msg("op %s: message \"%s\" lacks \"%s\"", name, msg, needle);
  char quoted[64];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  if (strstr(msg, quoted))
    fail_msg("op %s: message \"%s\" names the op", name, msg);
}

/* ---- distributed runs
 * ------------------------------------------------------------ */

/* One tensor spread over the ranks of a placement. */
typedef struct dist {
  sl_dtype dt;
  sl_shape global;
  sl_nd_sbp nd;
  bool partial;
  sl_reduce_op reduce;
  int nranks;
  sl_slice slice[64]; /* the harness's placements are small */
  unsigned char *shard[64];
} dist;

static void dist_free(dist *d) {
  for (int r = 0; r < d->nranks; r++) {
    free(d->shard[r]);
    d->shard[r] = NULL;
  }
}

/* Builds the nd-SBP of input/output `index` and checks it. SL_EUNSUPPORTED
 * for mixed partial kinds. */
static sl_status dist_init(dist *d, const sl_placement *p,
                           const sl__sbp_sig *sigs, bool output, int index,
                           sl_dtype dt, const sl_shape *global) {
  memset(d, 0, sizeof *d);
  d->dt = dt;
  d->global = *global;
  d->nranks = sl_placement_size(p);
  if (d->nranks > 64) return sl__fail(SL_EINVAL, "harness: at most 64 ranks");
  d->nd.ndim = sl_placement_mesh_ndim(p);
  for (int k = 0; k < d->nd.ndim; k++) {
    sl_sbp s = output ? sigs[k].out[index] : sigs[k].in[index];
    d->nd.sbp[k] = s;
    if (s.kind == SL_SBP_PARTIAL) {
      if (d->partial && d->reduce != s.reduce) return SL_EUNSUPPORTED;
      d->partial = true;
      d->reduce = s.reduce;
    }
  }
  sl_status st = sl_nd_sbp_check(&d->nd, p, global);
  if (st != SL_OK)
    return sl__fail_context(st, "%s %d: ", output ? "output" : "input", index);
  for (int r = 0; r < d->nranks; r++)
    sl__local_slice(global, p, &d->nd, r, &d->slice[r]);
  return SL_OK;
}

static size_t shard_bytes(const dist *d, int r) {
  return (size_t)sl_slice_numel(&d->slice[r]) * sl_dtype_size(d->dt);
}

/* The rank with rank's coordinates but 0 on every mesh axis in mask. */
static int rank_zeroed(const sl_placement *p, int rank, unsigned mask) {
  int c[SL_MAX_MESH_AXES];
  sl_placement_rank_coord(p, rank, c);
  for (int k = 0; k < sl_placement_mesh_ndim(p); k++)
    if (mask & (1u << k)) c[k] = 0;
  return sl_placement_coord_rank(p, c);
}

/* Random parts of value x for g ranks that reduce to x under op: part
 * `holder` carries the value, the others random amounts (sum: small
 * multiples of 1/4, so float parts stay exact; max/min: no more / no less
 * than x). */
static void make_parts(sl_rng *r, sl_dtype dt, sl_reduce_op op, double x, int g,
                       double *parts) {
  int holder = (int)sl__rng_below(r, (uint64_t)g);
  bool fl = sl_dtype_is_float(dt);
  double rest = 0;
  for (int m = 0; m < g; m++) {
    if (m == holder) continue;
    double v;
    if (dt == SL_DTYPE_BOOL) {
      /* Bool partials are logical or/and: others may only repeat x. */
      v = op == SL_REDUCE_MIN ? 1 : (x != 0 ? (double)sl__rng_below(r, 2) : 0);
    } else if (op == SL_REDUCE_SUM) {
      v = fl ? (double)((int64_t)sl__rng_below(r, 17) - 8) / 4
             : (double)((int64_t)sl__rng_below(r, 7) - 3);
      if (dt == SL_DTYPE_U8) v = 0; /* unsigned: keep parts in range */
    } else {
      double dv =
          fl ? (double)sl__rng_below(r, 9) / 4 : (double)sl__rng_below(r, 4);
      v = op == SL_REDUCE_MAX ? x - dv : x + dv;
    }
    parts[m] = v;
    rest += v;
  }
  parts[holder] = op == SL_REDUCE_SUM && dt != SL_DTYPE_BOOL ? x - rest : x;
}

/* Shards of a global input: slices, then partial parts where the nd-SBP has
 * P entries, identical copies along B axes. */
static sl_status dist_scatter(dist *d, const sl_placement *p, const void *src,
                              sl_rng *rng) {
  unsigned pmask = sl__nd_sbp_mask(&d->nd, SL_SBP_PARTIAL);
  unsigned bmask = sl__nd_sbp_mask(&d->nd, SL_SBP_BROADCAST);
  int64_t zero[SL_MAX_DIMS] = {0};
  for (int r = 0; r < d->nranks; r++) {
    d->shard[r] = malloc(shard_bytes(d, r) + 1);
    if (!d->shard[r]) return sl__fail(SL_ENOMEM, "harness: shard");
    sl__box_move(d->dt, d->global.ndim, d->shard[r], d->slice[r].extent, zero,
                 src, d->global.dims, d->slice[r].start, d->slice[r].extent,
                 false, SL_REDUCE_SUM);
  }
  if (!pmask) return SL_OK;
  int group[64];
  double parts[64];
  for (int r = 0; r < d->nranks; r++) {
    int canon = rank_zeroed(p, r, bmask);
    if (canon != r) { /* a B copy of a rank already done */
      memcpy(d->shard[r], d->shard[canon], shard_bytes(d, r));
      continue;
    }
    if (rank_zeroed(p, r, pmask) != r) continue; /* done by its group base */
    int g = sl__mesh_ranks(p, r, pmask, group);
    int64_t n = sl_slice_numel(&d->slice[r]);
    for (int64_t i = 0; i < n; i++) {
      make_parts(rng, d->dt, d->reduce, sl_load_element(d->dt, d->shard[r], i),
                 g, parts);
      for (int m = 0; m < g; m++)
        sl_store_element(d->dt, d->shard[group[m]], i, parts[m]);
    }
  }
  return SL_OK;
}

/* Reassembles a distributed output into dst (the global tensor): B copies
 * must be identical, P parts are reduced, S slices placed. */
static sl_status dist_gather(const dist *d, const sl_placement *p, void *dst,
                             const char *what) {
  unsigned bmask = sl__nd_sbp_mask(&d->nd, SL_SBP_BROADCAST);
  int64_t numel = sl_shape_numel(&d->global);
  int64_t zero[SL_MAX_DIMS] = {0};
  if (d->partial) sl__elem_fill_identity(d->dt, d->reduce, dst, numel);
  for (int r = 0; r < d->nranks; r++) {
    int canon = rank_zeroed(p, r, bmask);
    if (canon != r) {
      size_t nb = shard_bytes(d, r);
      if (memcmp(d->shard[r], d->shard[canon], nb) != 0) {
        int64_t n = sl_slice_numel(&d->slice[r]);
        size_t es = sl_dtype_size(d->dt);
        int64_t i = 0;
        while (i < n && memcmp(d->shard[r] + i * (int64_t)es,
                               d->shard[canon] + i * (int64_t)es, es) == 0)
          i++;
        return sl__fail(SL_EMISMATCH,
                        "%s: broadcast copies differ: rank %d has %.9g, rank "
                        "%d has %.9g at local element %" PRId64,
                        what, r, sl_load_element(d->dt, d->shard[r], i), canon,
                        sl_load_element(d->dt, d->shard[canon], i), i);
      }
      continue;
    }
    sl__box_move(d->dt, d->global.ndim, dst, d->global.dims, d->slice[r].start,
                 d->shard[r], d->slice[r].extent, zero, d->slice[r].extent,
                 d->partial, d->reduce);
  }
  return SL_OK;
}

sl_status oph_check_layout(const sl__op_def *op, const sl__attrs *at, int n_in,
                           sl_host_tensor *const *in,
                           sl_host_tensor *const *ref, const sl_placement *p,
                           const sl__sbp_sig *axis_sigs, uint64_t seed,
                           int64_t step, oph_tol tol) {
  sl__meta in_meta[SL_OP_MAX_INPUTS], out_meta[SL_OP_MAX_OUTPUTS];
  SL_CHECK(infer_outputs(op, at, n_in, in, in_meta, out_meta));
  int n_out = op->n_out, mesh_nd = sl_placement_mesh_ndim(p);
  sl_rng rng = {seed};
  char ptxt[64], ltxt[512];
  sl_placement_print(p, ptxt, sizeof ptxt);
  layout_text(axis_sigs, mesh_nd, n_in, n_out, ltxt, sizeof ltxt);

  dist *din = calloc((size_t)n_in + 1, sizeof *din);
  dist *dout = calloc((size_t)n_out, sizeof *dout);
  sl_host_tensor *got = NULL;
  sl_status st = SL_OK;
  if (!din || !dout) {
    st = sl__fail(SL_ENOMEM, "harness");
    goto done;
  }
  for (int i = 0; i < n_in; i++) {
    SL_CHECK_GOTO(dist_init(&din[i], p, axis_sigs, false, i, in_meta[i].dtype,
                            &in_meta[i].shape),
                  st, done);
  }
  for (int o = 0; o < n_out; o++)
    SL_CHECK_GOTO(dist_init(&dout[o], p, axis_sigs, true, o, out_meta[o].dtype,
                            &out_meta[o].shape),
                  st, done);
  for (int i = 0; i < n_in; i++)
    SL_CHECK_GOTO(dist_scatter(&din[i], p, sl_host_tensor_cdata(in[i]), &rng),
                  st, done);
  /* Outputs start as a random byte pattern: unwritten elements show. */
  unsigned char pattern = (unsigned char)(0x80 | sl__rng_below(&rng, 128));
  for (int o = 0; o < n_out; o++)
    for (int r = 0; r < dout[o].nranks; r++) {
      size_t nb = shard_bytes(&dout[o], r);
      dout[o].shard[r] = malloc(nb + 1);
      if (!dout[o].shard[r]) {
        st = sl__fail(SL_ENOMEM, "harness: shard");
        goto done;
      }
      memset(dout[o].shard[r], pattern, nb);
    }

  int nranks = sl_placement_size(p);
  for (int r = 0; r < nranks; r++) {
    sl__kernel_ctx k;
    memset(&k, 0, sizeof k);
    k.attrs = at;
    k.n_in = n_in;
    k.n_out = n_out;
    k.step = step;
    for (int i = 0; i < n_in; i++) {
      k.in[i] = din[i].shard[r];
      k.in_meta[i].dtype = in_meta[i].dtype;
      k.in_meta[i].shape =
          oph_shape(din[i].global.ndim, din[i].slice[r].extent);
      k.in_slice[i] = din[i].slice[r];
      k.in_global[i] = in_meta[i].shape;
      k.in_partial[i] = din[i].partial;
    }
    for (int o = 0; o < n_out; o++) {
      k.out[o] = dout[o].shard[r];
      k.out_meta[o].dtype = out_meta[o].dtype;
      k.out_meta[o].shape =
          oph_shape(dout[o].global.ndim, dout[o].slice[r].extent);
      k.out_slice[o] = dout[o].slice[r];
      k.out_global[o] = out_meta[o].shape;
      k.out_partial[o] = dout[o].partial;
    }
    st = sl__op_run_cpu(op, &k);
    if (st != SL_OK) {
      sl__fail_context(st, "op %s on %s, %s, rank %d: ", op->name, ptxt, ltxt,
                       r);
      goto done;
    }
  }

  for (int o = 0; o < n_out; o++) {
    char what[768];
    snprintf(what, sizeof what, "op %s on %s, %s: output %d", op->name, ptxt,
             ltxt, o);
    SL_CHECK_GOTO(
        sl_host_tensor_create(out_meta[o].dtype, &out_meta[o].shape, &got), st,
        done);
    SL_CHECK_GOTO(dist_gather(&dout[o], p, sl_host_tensor_data(got), what), st,
                  done);
    SL_CHECK_GOTO(oph_compare(what, got, ref[o], tol), st, done);
    sl_host_tensor_destroy(got);
    got = NULL;
  }

done:
  sl_host_tensor_destroy(got);
  for (int i = 0; din && i < n_in; i++)
    dist_free(&din[i]);
  for (int o = 0; dout && o < n_out; o++)
    dist_free(&dout[o]);
  free(din);
  free(dout);
  return st;
}

/* ---- every layout
 * ---------------------------------------------------------------- */

static const char *const placements[] = {
    "cpu:0", "cpu:0-1", "cpu:0-2", "cpu:0-3", "cpu:0-3[2,2]",
};

static sl_status check_declared(const sl__op_def *op, int n_in,
                                const sl__meta *in_meta, int n_out,
                                const sl__meta *out_meta,
                                const sl__sbp_sig *sigs, int n) {
  char t[96];
  for (int s = 0; s < n; s++) {
    bool all_b = true;
    for (int i = 0; i < n_in + n_out; i++) {
      bool isout = i >= n_in;
      int idx = isout ? i - n_in : i;
      sl_sbp b = isout ? sigs[s].out[idx] : sigs[s].in[idx];
      const sl_shape *sh = isout ? &out_meta[idx].shape : &in_meta[idx].shape;
      if (b.kind != SL_SBP_BROADCAST) all_b = false;
      if ((b.kind == SL_SBP_SPLIT && (b.axis < 0 || b.axis >= sh->ndim)) ||
          (unsigned)b.kind > SL_SBP_PARTIAL ||
          (b.kind == SL_SBP_PARTIAL && (unsigned)b.reduce > SL_REDUCE_MIN)) {
        sl_sbp_print(b, t, sizeof t);
        return sl__fail(
            SL_EINVAL, "op %s: signature %d: %s %d has %s on a %d-dim tensor",
            op->name, s, isout ? "output" : "input", idx, t, sh->ndim);
      }
    }
    if (all_b)
      return sl__fail(SL_EINVAL,
                      "op %s: signature %d is all-B (implied, never listed)",
                      op->name, s);
    for (int s2 = 0; s2 < s; s2++) {
      bool same = true;
      for (int i = 0; i < n_in && same; i++)
        same = sl_sbp_equal(sigs[s].in[i], sigs[s2].in[i]);
      for (int i = 0; i < n_out && same; i++)
        same = sl_sbp_equal(sigs[s].out[i], sigs[s2].out[i]);
      if (same)
        return sl__fail(SL_EINVAL, "op %s: signatures %d and %d are equal",
                        op->name, s2, s);
    }
  }
  return SL_OK;
}

/* Whether the compiler may take this layout: every even signature in it
 * cuts its axes into equal parts (kernels/op.h). */
static bool even_layout(const sl__op_def *op, int n_in, const sl__meta *in,
                        const sl__meta *out, const sl_placement *p,
                        const sl__sbp_sig *axis_sigs) {
  int nd = sl_placement_mesh_ndim(p), mesh[SL_MAX_MESH_AXES];
  sl_nd_sbp in_nd[SL_OP_MAX_INPUTS], out_nd[SL_OP_MAX_OUTPUTS];
  for (int k = 0; k < nd; k++) {
    mesh[k] = sl_placement_mesh_dim(p, k);
    for (int i = 0; i < n_in; i++)
      in_nd[i].sbp[k] = axis_sigs[k].in[i];
    for (int o = 0; o < op->n_out; o++)
      out_nd[o].sbp[k] = axis_sigs[k].out[o];
  }
  for (int m = 0; m < nd; m++)
    if (!sl__sig_even_holds(&axis_sigs[m], n_in, in, in_nd, op->n_out, out,
                            out_nd, mesh, m))
      return false;
  return true;
}

sl_status oph_check_all(const sl__op_def *op, const sl__attrs *at, int n_in,
                        sl_host_tensor *const *in, sl_host_tensor *const *ref,
                        uint64_t seed, int64_t step, oph_tol tol,
                        oph_stats *stats) {
  sl__meta in_meta[SL_OP_MAX_INPUTS], out_meta[SL_OP_MAX_OUTPUTS];
  SL_CHECK(infer_outputs(op, at, n_in, in, in_meta, out_meta));
  sl__sbp_sig *sigs = calloc(SL_OP_MAX_SIGNATURES + 1, sizeof *sigs);
  if (!sigs) return sl__fail(SL_ENOMEM, "harness");
  int n = op->signatures
              ? op->signatures(at, n_in, in_meta, sigs, SL_OP_MAX_SIGNATURES)
              : 0;
  sl_status st = SL_OK;
  if (n < 0 || n > SL_OP_MAX_SIGNATURES) {
    st = sl__fail(SL_EINVAL, "op %s: %d signatures (at most %d)", op->name, n,
                  SL_OP_MAX_SIGNATURES);
    goto done;
  }
  SL_CHECK_GOTO(check_declared(op, n_in, in_meta, op->n_out, out_meta, sigs, n),
                st, done);
  if (stats) stats->sigs += n;
  /* The implied all-B signature is checked too: the compiler may pick it on
   * any mesh axis. */
  for (int i = 0; i < SL_OP_MAX_INPUTS; i++)
    sigs[n].in[i] = sl_sbp_broadcast();
  for (int o = 0; o < SL_OP_MAX_OUTPUTS; o++)
    sigs[n].out[o] = sl_sbp_broadcast();
  int total = n + 1;
  uint64_t sub = seed;
  for (size_t pi = 0; pi < SL_ARRAY_LEN(placements); pi++) {
    sl_placement *p = NULL;
    SL_CHECK_GOTO(sl_placement_parse(placements[pi], &p), st, done);
    int nd = sl_placement_mesh_ndim(p);
    int count = nd == 1 ? total : total * total;
    for (int c = 0; c < count && st == SL_OK; c++) {
      sl__sbp_sig axis[2];
      axis[0] = sigs[nd == 1 ? c : c / total];
      if (nd == 2) axis[1] = sigs[c % total];
      sub = sl__mix64(sub);
      if (!even_layout(op, n_in, in_meta, out_meta, p, axis)) {
        if (stats) stats->skipped++;
        continue;
      }
      st = oph_check_layout(op, at, n_in, in, ref, p, axis, sub, step, tol);
      if (st == SL_EUNSUPPORTED) {
        st = SL_OK;
        if (stats) stats->skipped++;
      } else if (st == SL_OK && stats) {
        stats->layouts++;
      }
    }
    sl_placement_destroy(p);
    if (st != SL_OK) goto done;
  }
done:
  free(sigs);
  return st;
}
