/* CPU vs CUDA conformance of every op (kernels/cuda/, docs/cuda.md): for
 * each op in the registry, random valid inputs are run through the CPU
 * kernel and the CUDA kernel on the same local shards, and the outputs
 * must agree within the op's tolerance (tols[] below; most ops are exact).
 *
 * Inputs come from two sources: the invariance cases of op_cases_*.c
 * (extents up to 5, sometimes 0), run on whole tensors and, under every
 * signature the op declares, as the shards of every rank of 2 to 4 (so
 * shards are uneven or empty and position-dependent kernels see real
 * slices, global shapes and partial flags), and larger cases written here
 * (extents that divide by nothing, rows past the half-warp and block
 * thresholds, broadcasts, every cast pair with NaN, inf and overflowing
 * values) on whole tensors and one random shard. A quarter of the runs
 * place every device tensor one element off 16-byte alignment, so both
 * the vectorised and the scalar paths run. Device outputs sit between
 * guard bytes that must stay untouched, and inputs must come back
 * unchanged.
 *
 * Without a GPU (or in a build without CUDA) the comparison skips, saying
 * why; the coverage check runs anyway: in a CUDA build every op must have a
 * CUDA kernel, so coverage cannot drop silently.
 *
 * Prints its seed; SLUICE_TEST_SEED replays a run, SLUICE_TEST_OP=name
 * checks one op, SLUICE_CONFORMANCE_TRIALS=n sets the cases per op and
 * source (default 4; 1 keeps a compute-sanitizer run short). */
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
#include <unistd.h>

#include <sluice/build.h>

#include "caching_alloc.h"
#include "cpu/npy.h"
#include "device_iface.h"
#include "op_harness.h"

enum { GUARD = 256, PATTERN = 0x5a };

static uint64_t g_seed;

static int below(sl_rng *r, int n) {
  return (int)sl__rng_below(r, (uint64_t)n);
}

/* ---- tolerances ------------------------------------------------------------
 */

/* CPU vs CUDA, for f32 and for f64 outputs; other dtypes compare exactly.
 * Exact where the CUDA kernel does the CPU's operations in the CPU's order
 * (docs/cuda.md); a tolerance where CUDA's libm (f64 transcendental
 * functions, logf) or a reordered sum (long rows, reductions, cuBLAS) may
 * move the last bits. */
typedef struct tol_entry {
  const char *op;
  oph_tol f32, f64;
} tol_entry;

#define EXACT                                                                  \
  { 0, 0 }
#define ULPS                                                                   \
  { 1e-7, 4e-7 }
#define ULPS64                                                                 \
  { 1e-15, 1e-14 }
#define SUMS                                                                   \
  { 1e-5, 1e-5 }
#define SUMS64                                                                 \
  { 1e-12, 1e-12 }

static const tol_entry tols[] = {
    {"gelu", ULPS, ULPS64},
    {"tanh", ULPS, ULPS64},
    {"sigmoid", ULPS, ULPS64},
    {"exp", ULPS, ULPS64},
    {"log", ULPS, ULPS64},
    {"gelu_grad", ULPS, ULPS64},
    {"reduce_sum", SUMS, SUMS64},
    {"reduce_mean", SUMS, SUMS64},
    {"reduce_sum_like", SUMS, SUMS64},
    /* Box-Muller through CUDA's double log and cos. */
    {"random_normal", {1e-6, 1e-6}, {1e-13, 1e-13}},
    {"matmul", SUMS, SUMS64},
    {"batch_matmul", SUMS, SUMS64},
    {"softmax", SUMS, SUMS64},
    {"log_softmax", SUMS, SUMS64},
    {"softmax_grad", SUMS, SUMS64},
    {"log_softmax_grad", SUMS, SUMS64},
    {"sparse_cross_entropy", SUMS, SUMS64},
    {"sparse_cross_entropy_grad", SUMS, SUMS64},
    {"layer_norm", SUMS, SUMS64},
    {"layer_norm_grad", {5e-5, 5e-5}, SUMS64},
};

static oph_tol tol_for(const char *op, sl_dtype dt) {
  for (size_t i = 0; i < SL_ARRAY_LEN(tols); i++)
    if (strcmp(tols[i].op, op) == 0)
      return dt == SL_DTYPE_F32   ? tols[i].f32
             : dt == SL_DTYPE_F64 ? tols[i].f64
                                  : (oph_tol)EXACT;
  return (oph_tol)EXACT;
}

/* ---- the device ------------------------------------------------------------
 */

/* Where the kernels under test run: the CUDA device with the ops' CUDA
 * kernels, or (to check this harness without a GPU) the CPU device with a
 * stand-in for them. */
typedef struct gpu gpu;
struct gpu {
  sl__device *dev;
  sl__stream *s;
  sl__caching_alloc *mem;
  sl_status (*run)(const gpu *g, const sl__op_def *op, sl__kernel_ctx *k);
};

static sl_status run_cuda(const gpu *g, const sl__op_def *op,
                          sl__kernel_ctx *k) {
  return sl__op_run_cuda(op, k, g->mem, g->s);
}

/* false (after printing why) when there is no such device to run on. */
static bool gpu_open(gpu *g, sl_device_type type) {
  memset(g, 0, sizeof *g);
  g->run = run_cuda;
  if (sl__device_open(type, 0, &g->dev) != SL_OK) {
    printf("skipped: %s\n", sl_last_error());
    return false;
  }
  if (sl__device_stream_create(g->dev, &g->s) != SL_OK ||
      sl__caching_alloc_create(sl__device_raw_memory(g->dev), NULL, &g->mem) !=
          SL_OK)
    fail_msg("%s: %s", g->dev->name, sl_last_error());
  return true;
}

static void gpu_close(gpu *g) {
  sl__caching_alloc_destroy(g->mem);
  sl__device_stream_destroy(g->dev, g->s);
  sl__device_close(g->dev);
}

/* A device tensor between guard bytes: p = base + GUARD (+ one element
 * when misaligned), the rest of the allocation PATTERN. */
typedef struct dbuf {
  char *base;
  char *p;
  size_t bytes, total;
} dbuf;

static sl_status dbuf_make(gpu *g, size_t bytes, size_t shift, dbuf *b) {
  b->bytes = bytes;
  b->total = bytes + 2 * GUARD + 16;
  SL_CHECK(sl__device_alloc(g->dev, b->total, (void **)&b->base));
  b->p = b->base + GUARD + shift;
  return sl__device_memset(g->dev, b->base, PATTERN, b->total, g->s);
}

static void dbuf_free(gpu *g, dbuf *b) {
  if (b->base) sl__device_free(g->dev, b->base);
  b->base = NULL;
}

/* ---- shards ----------------------------------------------------------------
 */

/* The part of a global tensor of shape gs that rank `rank` of n holds under
 * the 1-D SBP s (B and P: the whole tensor). */
static sl_slice sbp_slice(const sl_shape *gs, sl_sbp s, int n, int rank) {
  sl_slice sl;
  memset(&sl, 0, sizeof sl);
  sl.ndim = gs->ndim;
  for (int d = 0; d < gs->ndim; d++)
    sl.extent[d] = gs->dims[d];
  if (s.kind == SL_SBP_SPLIT && s.axis >= 0 && s.axis < gs->ndim)
    sl_split_range(gs->dims[s.axis], n, rank, &sl.start[s.axis],
                   &sl.extent[s.axis]);
  return sl;
}

static sl_shape slice_shape(const sl_slice *sl) {
  sl_shape s;
  memset(&s, 0, sizeof s);
  s.ndim = sl->ndim;
  for (int d = 0; d < sl->ndim; d++)
    s.dims[d] = sl->extent[d];
  return s;
}

/* A contiguous copy of slice sl of t (malloc'd, at least 1 byte). */
static void *slice_copy(const sl_host_tensor *t, const sl_slice *sl) {
  size_t es = sl_dtype_size(sl_host_tensor_dtype(t));
  int64_t n = sl_slice_numel(sl), gs[SL_MAX_DIMS];
  sl_shape_strides(sl_host_tensor_shape(t), gs);
  char *dst = malloc((size_t)n * es + 1);
  if (!dst) fail_msg("out of memory");
  const char *src = sl_host_tensor_cdata(t);
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i, off = 0;
    for (int d = sl->ndim - 1; d >= 0; d--) {
      int64_t c = rest % sl->extent[d];
      rest /= sl->extent[d];
      off += (sl->start[d] + c) * gs[d];
    }
    memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
  }
  return dst;
}

/* ---- one run ---------------------------------------------------------------
 */

typedef struct tcase {
  sl__attrs at;
  int n_in;
  sl_host_tensor *in[SL_OP_MAX_INPUTS];
  int64_t step;
} tcase;

static void tcase_free(tcase *c) {
  for (int i = 0; i < c->n_in; i++)
    sl_host_tensor_destroy(c->in[i]);
  memset(c, 0, sizeof *c);
}

/* n ranks under the 1-D signature sig, seen from rank `rank`; n == 1 is
 * the whole tensors (sig ignored). */
typedef struct layout {
  int n, rank;
  sl__sbp_sig sig;
  bool misaligned;
} layout;

static void layout_text(const sl__op_def *op, int n_in, const layout *l,
                        char *buf, size_t size) {
  if (l->n == 1) {
    snprintf(buf, size, "whole tensors%s", l->misaligned ? ", misaligned" : "");
    return;
  }
  size_t len = (size_t)snprintf(buf, size, "rank %d of %d, (", l->rank, l->n);
  for (int i = 0; i < n_in + op->n_out && len < size; i++) {
    sl_sbp s = i < n_in ? l->sig.in[i] : l->sig.out[i - n_in];
    char t[24];
    if (s.kind == SL_SBP_SPLIT)
      snprintf(t, sizeof t, "S(%d)", s.axis);
    else
      snprintf(t, sizeof t, "%s", s.kind == SL_SBP_BROADCAST ? "B" : "P");
    len += (size_t)snprintf(buf + len, size - len, "%s%s%s",
                            i == n_in ? " -> " : (i ? ", " : ""), t,
                            i + 1 == n_in + op->n_out ? ")" : "");
  }
  if (l->misaligned && len < size)
    snprintf(buf + len, size - len, ", misaligned");
}

/* Runs op on the CPU and on the GPU for one layout and compares. SL_OK, or
 * a failure with the op, the layout and the first difference in
 * sl_last_error(). */
static sl_status run_layout(gpu *g, const sl__op_def *op, const tcase *c,
                            const layout *l) {
  char where[256];
  layout_text(op, c->n_in, l, where, sizeof where);
  sl__meta gin[SL_OP_MAX_INPUTS], gout[SL_OP_MAX_OUTPUTS];
  memset(gout, 0, sizeof gout);
  for (int i = 0; i < c->n_in; i++) {
    gin[i].shape = *sl_host_tensor_shape(c->in[i]);
    gin[i].dtype = sl_host_tensor_dtype(c->in[i]);
  }
  sl_status st = op->infer(&c->at, c->n_in, gin, gout);
  if (st != SL_OK) return sl__fail_context(st, "op %s: infer: ", op->name);

  sl__kernel_ctx kc, kd;
  memset(&kc, 0, sizeof kc);
  kc.attrs = &c->at;
  kc.n_in = c->n_in;
  kc.n_out = op->n_out;
  kc.step = c->step;
  void *hin[SL_OP_MAX_INPUTS] = {0}, *hout[SL_OP_MAX_OUTPUTS] = {0};
  dbuf din[SL_OP_MAX_INPUTS], dout[SL_OP_MAX_OUTPUTS];
  memset(din, 0, sizeof din);
  memset(dout, 0, sizeof dout);
  char *back = NULL;
  sl_host_tensor *got = NULL, *want = NULL;
  for (int i = 0; i < c->n_in; i++) {
    sl_sbp s = l->n == 1 ? sl_sbp_broadcast() : l->sig.in[i];
    kc.in_slice[i] = sbp_slice(&gin[i].shape, s, l->n, l->rank);
    kc.in_global[i] = gin[i].shape;
    kc.in_partial[i] = s.kind == SL_SBP_PARTIAL;
    kc.in_meta[i].dtype = gin[i].dtype;
    kc.in_meta[i].shape = slice_shape(&kc.in_slice[i]);
    hin[i] = slice_copy(c->in[i], &kc.in_slice[i]);
    kc.in[i] = hin[i];
  }
  for (int o = 0; o < op->n_out; o++) {
    sl_sbp s = l->n == 1 ? sl_sbp_broadcast() : l->sig.out[o];
    kc.out_slice[o] = sbp_slice(&gout[o].shape, s, l->n, l->rank);
    kc.out_global[o] = gout[o].shape;
    kc.out_partial[o] = s.kind == SL_SBP_PARTIAL;
    kc.out_meta[o].dtype = gout[o].dtype;
    kc.out_meta[o].shape = slice_shape(&kc.out_slice[o]);
    size_t bytes = (size_t)sl_shape_numel(&kc.out_meta[o].shape) *
                   sl_dtype_size(gout[o].dtype);
    hout[o] = malloc(bytes + 1);
    if (!hout[o]) fail_msg("out of memory");
    memset(hout[o], PATTERN, bytes + 1);
    kc.out[o] = hout[o];
  }
  kd = kc;

  /* The CPU reference. */
  SL_CHECK_GOTO(sl__op_run_cpu(op, &kc), st, cpu_fail);

  /* The device run. */
  for (int i = 0; i < c->n_in; i++) {
    size_t es = sl_dtype_size(gin[i].dtype);
    size_t bytes = (size_t)sl_shape_numel(&kd.in_meta[i].shape) * es;
    SL_CHECK_GOTO(dbuf_make(g, bytes, l->misaligned ? es : 0, &din[i]), st,
                  fail);
    SL_CHECK_GOTO(sl__device_memcpy_h2d(g->dev, din[i].p, hin[i], bytes, g->s),
                  st, fail);
    kd.in[i] = din[i].p;
  }
  for (int o = 0; o < op->n_out; o++) {
    size_t es = sl_dtype_size(gout[o].dtype);
    size_t bytes = (size_t)sl_shape_numel(&kd.out_meta[o].shape) * es;
    SL_CHECK_GOTO(dbuf_make(g, bytes, l->misaligned ? es : 0, &dout[o]), st,
                  fail);
    kd.out[o] = dout[o].p;
  }
  SL_CHECK_GOTO(g->run(g, op, &kd), st, fail);
  SL_CHECK_GOTO(sl__device_stream_synchronize(g->dev, g->s), st, fail);

  /* Outputs within tolerance, guards untouched. */
  for (int o = 0; o < op->n_out; o++) {
    back = malloc(dout[o].total);
    if (!back) fail_msg("out of memory");
    SL_CHECK_GOTO(
        sl__device_memcpy_d2h(g->dev, back, dout[o].base, dout[o].total, g->s),
        st, fail);
    SL_CHECK_GOTO(sl__device_stream_synchronize(g->dev, g->s), st, fail);
    size_t lo = (size_t)(dout[o].p - dout[o].base), hi = lo + dout[o].bytes;
    for (size_t b = 0; b < dout[o].total; b++)
      if ((b < lo || b >= hi) && (unsigned char)back[b] != PATTERN) {
        st = sl__fail(SL_EMISMATCH,
                      "output %d: byte %lld %s the tensor written (%zu "
                      "bytes)",
                      o, b < lo ? (long long)(lo - b) : (long long)(b - hi + 1),
                      b < lo ? "before" : "after", dout[o].bytes);
        goto fail;
      }
    SL_CHECK_GOTO(
        sl_host_tensor_create(gout[o].dtype, &kd.out_meta[o].shape, &got), st,
        fail);
    SL_CHECK_GOTO(
        sl_host_tensor_create(gout[o].dtype, &kd.out_meta[o].shape, &want), st,
        fail);
    memcpy(sl_host_tensor_data(got), back + lo, dout[o].bytes);
    memcpy(sl_host_tensor_data(want), hout[o], dout[o].bytes);
    char what[32];
    snprintf(what, sizeof what, "output %d", o);
    SL_CHECK_GOTO(
        oph_compare(what, got, want, tol_for(op->name, gout[o].dtype)), st,
        fail);
    sl_host_tensor_destroy(got);
    sl_host_tensor_destroy(want);
    got = want = NULL;
    free(back);
    back = NULL;
  }
  /* Inputs unchanged. */
  for (int i = 0; i < c->n_in; i++) {
    back = malloc(din[i].bytes + 1);
    if (!back) fail_msg("out of memory");
    SL_CHECK_GOTO(
        sl__device_memcpy_d2h(g->dev, back, din[i].p, din[i].bytes, g->s), st,
        fail);
    SL_CHECK_GOTO(sl__device_stream_synchronize(g->dev, g->s), st, fail);
    if (memcmp(back, hin[i], din[i].bytes) != 0) {
      st = sl__fail(SL_EMISMATCH, "input %d was written to", i);
      goto fail;
    }
    free(back);
    back = NULL;
  }
  st = SL_OK;
  goto done;
cpu_fail:
  sl__fail_context(st, "(the CPU kernel failed) ");
fail:
  sl__fail_context(st, "op %s, %s, step %" PRId64 ": ", op->name, where,
                   c->step);
done:
  sl_host_tensor_destroy(got);
  sl_host_tensor_destroy(want);
  free(back);
  for (int i = 0; i < c->n_in; i++) {
    free(hin[i]);
    dbuf_free(g, &din[i]);
  }
  for (int o = 0; o < op->n_out; o++) {
    free(hout[o]);
    dbuf_free(g, &dout[o]);
  }
  return st;
}

/* Whole tensors, then `per_sig` shards (every rank when per_sig < 0) of
 * each declared signature, or of `max_sigs` random ones. */
static void run_case(gpu *g, sl_rng *r, const sl__op_def *op, const tcase *c,
                     bool every_rank, int max_sigs, int *runs) {
  layout l;
  memset(&l, 0, sizeof l);
  l.n = 1;
  l.misaligned = below(r, 4) == 0;
  if (run_layout(g, op, c, &l) != SL_OK) fail_msg("%s", sl_last_error());
  (*runs)++;
  if (!op->signatures) return;
  sl__meta gin[SL_OP_MAX_INPUTS];
  for (int i = 0; i < c->n_in; i++) {
    gin[i].shape = *sl_host_tensor_shape(c->in[i]);
    gin[i].dtype = sl_host_tensor_dtype(c->in[i]);
  }
  sl__meta gout[SL_OP_MAX_OUTPUTS];
  if (op->infer(&c->at, c->n_in, gin, gout) != SL_OK)
    fail_msg("%s", sl_last_error());
  sl__sbp_sig sigs[SL_OP_MAX_SIGNATURES];
  int ns = op->signatures(&c->at, c->n_in, gin, sigs, SL_OP_MAX_SIGNATURES);
  for (int k = 0; k < ns && k < max_sigs; k++) {
    int pick = max_sigs >= ns ? k : below(r, ns);
    l.sig = sigs[pick];
    l.n = 2 + below(r, 3);
    /* An even signature only where its splits are even (kernels/op.h). */
    sl_nd_sbp none[SL_OP_MAX_INPUTS + SL_OP_MAX_OUTPUTS] = {0};
    if (!sl__sig_even_holds(&l.sig, c->n_in, gin, none, op->n_out, gout, none,
                            &l.n, 0))
      continue;
    int first = every_rank ? 0 : below(r, l.n);
    int last = every_rank ? l.n : first + 1;
    for (l.rank = first; l.rank < last; l.rank++) {
      l.misaligned = below(r, 4) == 0;
      if (run_layout(g, op, c, &l) != SL_OK) fail_msg("%s", sl_last_error());
      (*runs)++;
    }
  }
}

/* ---- larger cases ----------------------------------------------------------
 */

static sl_shape shape_of(int nd, const int64_t *dims) {
  return oph_shape(nd, dims);
}

#define SHAPE(...)                                                             \
  shape_of((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),          \
           (int64_t[]){__VA_ARGS__})
#define PICK_DT(r, ...)                                                        \
  ((const sl_dtype[]){__VA_ARGS__}[below(                                      \
      r, (int)(sizeof((const sl_dtype[]){__VA_ARGS__}) / sizeof(sl_dtype)))])

/* Elementwise shapes: prime and odd extents, a 5-d one, an empty one. */
static sl_shape big_shape(sl_rng *r) {
  switch (below(r, 7)) {
  case 0: return SHAPE(100003);
  case 1: return SHAPE(37, 1031);
  case 2: return SHAPE(3, 5, 7, 331);
  case 3: return SHAPE(2, 1, 4099);
  case 4: return SHAPE(3, 129, 1, 257);
  case 5: return SHAPE(2, 3, 4, 5, 67);
  default: return SHAPE(129, 0);
  }
}

/* Floats that test the edges: NaN, infinities, huge, tiny, values that
 * overflow f16 or round to an even neighbour. */
static void inject_specials(sl_rng *r, sl_host_tensor *t) {
  static const double sp[] = {NAN,     INFINITY, -INFINITY, 1e30,  -1e30,
                              65520.0, 65519.0,  -65504.0,  1e-40, -0.0,
                              0.0,     3e38,     1e-7,      2.5,   -3.5};
  if (!sl_dtype_is_float(sl_host_tensor_dtype(t))) return;
  int64_t n = sl_shape_numel(sl_host_tensor_shape(t));
  for (int k = 0; k < 64 && n > 0; k++)
    sl_host_tensor_set(t, (int64_t)sl__rng_below(r, (uint64_t)n),
                       sp[below(r, (int)SL_ARRAY_LEN(sp))]);
}

static sl_status big_unary(sl_rng *r, const char *name, tcase *c) {
  sl_shape s = big_shape(r);
  bool any = strcmp(name, "identity") == 0;
  bool num = strcmp(name, "relu") == 0 || strcmp(name, "square") == 0 ||
             strcmp(name, "neg") == 0 || strncmp(name, "scalar_", 7) == 0;
  bool pos = strcmp(name, "sqrt") == 0 || strcmp(name, "log") == 0;
  sl_dtype dt =
      any ? PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_F16, SL_DTYPE_BF16,
                    SL_DTYPE_I8, SL_DTYPE_I32, SL_DTYPE_I64, SL_DTYPE_U8,
                    SL_DTYPE_BOOL)
      : num ? PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32, SL_DTYPE_I64)
            : PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64);
  c->in[0] = oph_random(r, dt, &s, pos ? 0.125 : -6, pos ? 100 : 6);
  if (!any && below(r, 2)) inject_specials(r, c->in[0]);
  if (strncmp(name, "scalar_", 7) == 0)
    SL_CHECK(sl__attrs_set_float(&c->at, "value",
                                 (double)(below(r, 9) - 4) /
                                     (sl_dtype_is_float(dt) ? 4 : 1)));
  c->n_in = 1;
  return SL_OK;
}

static sl_status big_binary(sl_rng *r, const char *name, tcase *c) {
  bool grad = strstr(name, "_grad") != NULL;
  bool is_div = strcmp(name, "div") == 0;
  sl_dtype dt = grad || is_div ? PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64)
                               : PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64,
                                         SL_DTYPE_I32, SL_DTYPE_I64);
  sl_shape o = big_shape(r), a = o, b = o;
  if (!grad) { /* numpy broadcasting: dropped leading dims, extents of 1 */
    sl_shape *ab[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
      int drop = below(r, 3) == 0 ? below(r, o.ndim + 1) : 0;
      memset(ab[k], 0, sizeof *ab[k]);
      ab[k]->ndim = o.ndim - drop;
      for (int d = 0; d < ab[k]->ndim; d++)
        ab[k]->dims[d] = below(r, 3) == 0 ? 1 : o.dims[d + drop];
    }
  }
  c->in[0] = oph_random(r, dt, &a, -6, 6);
  c->in[1] = oph_random(r, dt, &b, is_div ? 0.25 : -6, is_div ? 4 : 6);
  c->n_in = 2;
  return SL_OK;
}

static sl_shape reduce_shape(sl_rng *r) {
  switch (below(r, 6)) {
  case 0: return SHAPE(517, 1029);
  case 1: return SHAPE(29, 131, 67);
  case 2: return SHAPE(3, 70001);
  case 3: return SHAPE(70001, 3);
  case 4: return SHAPE(5, 1, 2049);
  default: return SHAPE(2, 3000, 7);
  }
}

static sl_status big_reduce(sl_rng *r, const char *name, tcase *c) {
  sl_shape s = reduce_shape(r);
  bool like = strcmp(name, "reduce_sum_like") == 0;
  bool mean = strcmp(name, "reduce_mean") == 0;
  sl_dtype dt =
      mean ? PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64)
           : PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_I32, SL_DTYPE_I64);
  if (like) {
    int drop = below(r, s.ndim + 1);
    int64_t to[SL_MAX_DIMS];
    for (int d = drop; d < s.ndim; d++)
      to[d - drop] = below(r, 2) ? 1 : s.dims[d];
    SL_CHECK(sl__attrs_set_ints(&c->at, "shape", s.ndim - drop, to));
  } else {
    int64_t axes[SL_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < s.ndim; d++)
      if (below(r, 2)) axes[n++] = below(r, 3) == 0 ? d - s.ndim : d;
    if (n || below(r, 2)) SL_CHECK(sl__attrs_set_ints(&c->at, "axes", n, axes));
    SL_CHECK(sl__attrs_set_int(&c->at, "keepdims", below(r, 2)));
  }
  c->in[0] = oph_random(r, dt, &s, -4, 4);
  c->n_in = 1;
  return SL_OK;
}

static sl_dtype any_dtype(sl_rng *r) {
  return PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_F16, SL_DTYPE_BF16,
                 SL_DTYPE_I8, SL_DTYPE_I32, SL_DTYPE_I64, SL_DTYPE_U8,
                 SL_DTYPE_BOOL);
}

static sl_status big_shape_op(sl_rng *r, const char *name, tcase *c) {
  sl_dtype dt = any_dtype(r);
  c->n_in = 1;
  if (strcmp(name, "reshape") == 0) {
    sl_shape s = below(r, 2) ? SHAPE(36, 1030) : SHAPE(6, 35, 3, 101);
    int64_t t[SL_MAX_DIMS];
    for (int d = 0; d < s.ndim; d++) /* the extents reversed */
      t[d] = s.dims[s.ndim - 1 - d];
    if (below(r, 2)) t[below(r, s.ndim)] = -1;
    SL_CHECK(sl__attrs_set_ints(&c->at, "shape", s.ndim, t));
    c->in[0] = oph_random(r, dt, &s, -100, 100);
  } else if (strcmp(name, "transpose") == 0) {
    sl_shape s = below(r, 3) == 0   ? SHAPE(1031, 517)
                 : below(r, 2) == 0 ? SHAPE(33, 65, 127)
                                    : SHAPE(4, 5, 6, 7, 9);
    int64_t perm[SL_MAX_DIMS];
    for (int i = 0; i < s.ndim; i++)
      perm[i] = i;
    for (int i = s.ndim - 1; i > 0; i--) {
      int j = below(r, i + 1);
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
    SL_CHECK(sl__attrs_set_ints(&c->at, "perm", s.ndim, perm));
    c->in[0] = oph_random(r, dt, &s, -100, 100);
  } else if (strcmp(name, "broadcast_to") == 0) {
    sl_shape t = below(r, 2) ? SHAPE(129, 517) : SHAPE(3, 41, 517), x;
    int drop = below(r, t.ndim + 1);
    memset(&x, 0, sizeof x);
    x.ndim = t.ndim - drop;
    for (int d = 0; d < x.ndim; d++)
      x.dims[d] = below(r, 2) ? 1 : t.dims[d + drop];
    SL_CHECK(sl__attrs_set_ints(&c->at, "shape", t.ndim, t.dims));
    c->in[0] = oph_random(r, dt, &x, -100, 100);
  } else if (strcmp(name, "slice") == 0) {
    sl_shape s = below(r, 2) ? SHAPE(129, 517) : SHAPE(7, 100, 33);
    int axis = below(r, s.ndim);
    int64_t len = s.dims[axis];
    int64_t a = (int64_t)sl__rng_below(r, (uint64_t)len + 1);
    int64_t b = a + (int64_t)sl__rng_below(r, (uint64_t)(len - a) + 1);
    SL_CHECK(sl__attrs_set_int(&c->at, "axis", axis));
    SL_CHECK(sl__attrs_set_int(&c->at, "start", a));
    SL_CHECK(sl__attrs_set_int(&c->at, "end", b));
    c->in[0] = oph_random(r, dt, &s, -100, 100);
  } else { /* concat */
    sl_shape s = below(r, 2) ? SHAPE(129, 257) : SHAPE(5, 7, 300);
    int axis = below(r, s.ndim);
    c->n_in = 2 + below(r, 5);
    for (int i = 0; i < c->n_in; i++) {
      sl_shape si = s;
      si.dims[axis] = below(r, 4) == 0 ? 0 : 1 + below(r, (int)s.dims[axis]);
      c->in[i] = oph_random(r, dt, &si, -100, 100);
    }
    SL_CHECK(sl__attrs_set_int(&c->at, "axis", axis));
  }
  return SL_OK;
}

static sl_status big_cast(sl_rng *r, tcase *c) {
  sl_dtype from = any_dtype(r), to = any_dtype(r);
  sl_shape s = below(r, 2) ? SHAPE(100003) : SHAPE(3, 1031);
  bool fl = sl_dtype_is_float(from);
  c->in[0] = oph_random(r, from, &s, fl ? -70000 : -300, fl ? 70000 : 300);
  inject_specials(r, c->in[0]);
  SL_CHECK(sl__attrs_set_int(&c->at, "dtype", to));
  c->n_in = 1;
  return SL_OK;
}

static sl_status big_source(sl_rng *r, const char *name, tcase *c) {
  sl_shape s = big_shape(r);
  SL_CHECK(sl__attrs_set_ints(&c->at, "shape", s.ndim, s.dims));
  SL_CHECK(sl__attrs_set_int(&c->at, "seed", (int64_t)sl__rng_next(r)));
  SL_CHECK(sl__attrs_set_int(&c->at, "per_step", below(r, 2)));
  c->n_in = 0;
  if (strcmp(name, "fill") == 0) {
    SL_CHECK(sl__attrs_set_int(&c->at, "dtype", any_dtype(r)));
    SL_CHECK(sl__attrs_set_float(&c->at, "value",
                                 (double)(below(r, 401) - 200) / 8));
  } else if (strcmp(name, "random_int") == 0) {
    SL_CHECK(sl__attrs_set_int(&c->at, "dtype",
                               PICK_DT(r, SL_DTYPE_I32, SL_DTYPE_I64)));
    int64_t lo = below(r, 2001) - 1000;
    SL_CHECK(sl__attrs_set_int(&c->at, "low", lo));
    SL_CHECK(sl__attrs_set_int(&c->at, "high",
                               lo + 1 + (int64_t)sl__rng_below(r, 1u << 30)));
  } else {
    SL_CHECK(sl__attrs_set_int(&c->at, "dtype",
                               PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64)));
    double lo = below(r, 7) - 3;
    if (strcmp(name, "random_uniform") == 0) {
      SL_CHECK(sl__attrs_set_float(&c->at, "low", lo));
      SL_CHECK(sl__attrs_set_float(&c->at, "high", lo + below(r, 5)));
    } else {
      SL_CHECK(sl__attrs_set_float(&c->at, "mean", lo));
      SL_CHECK(sl__attrs_set_float(&c->at, "std", (double)below(r, 5) / 2));
    }
  }
  return SL_OK;
}

static sl_status big_dropout(sl_rng *r, tcase *c) {
  static const double ps[] = {0, 0.1, 0.5, 0.9};
  SL_CHECK(sl__attrs_set_float(&c->at, "p", ps[below(r, 4)]));
  SL_CHECK(sl__attrs_set_int(&c->at, "seed", (int64_t)sl__rng_next(r)));
  sl_shape s = big_shape(r);
  c->in[0] = oph_random(r, PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64), &s, -6, 6);
  c->n_in = 1;
  return SL_OK;
}

static sl_status big_mask(sl_rng *r, tcase *c) {
  static const double fills[] = {0, -INFINITY, -1e9, 3.5};
  SL_CHECK(sl__attrs_set_float(&c->at, "fill", fills[below(r, 4)]));
  sl_shape s = below(r, 2) ? SHAPE(3, 129, 257) : SHAPE(2, 2, 300, 300);
  c->in[0] = oph_random(r, PICK_DT(r, SL_DTYPE_F32, SL_DTYPE_F64), &s, -4, 4);
  c->n_in = 1;
  return SL_OK;
}

static sl_dtype mm_dtype(sl_rng *r) {
  return below(r, 3) ? SL_DTYPE_F32 : SL_DTYPE_BF16;
}

static sl_status big_matmul(sl_rng *r, const char *name, tcase *c) {
  static const int64_t ms[] = {1, 129, 257}, ks[] = {1, 67, 1025},
                       ns[] = {1, 45, 130};
  int64_t m = ms[below(r, 3)], k = ks[below(r, 3)], n = ns[below(r, 3)];
  int ta = below(r, 2), tb = below(r, 2);
  sl_shape a, b;
  if (strcmp(name, "matmul") == 0) {
    if (!ta && below(r, 2))
      a = SHAPE(3, m, k);
    else
      a = ta ? SHAPE(k, m) : SHAPE(m, k);
    b = tb ? SHAPE(n, k) : SHAPE(k, n);
  } else {
    int64_t bt = 1 + below(r, 7);
    a = ta ? SHAPE(bt, k, m) : SHAPE(bt, m, k);
    b = tb ? SHAPE(bt, n, k) : SHAPE(bt, k, n);
  }
  SL_CHECK(sl__attrs_set_int(&c->at, "trans_a", ta));
  SL_CHECK(sl__attrs_set_int(&c->at, "trans_b", tb));
  c->in[0] = oph_random(r, mm_dtype(r), &a, -2, 2);
  c->in[1] = oph_random(r, mm_dtype(r), &b, -2, 2);
  c->n_in = 2;
  return SL_OK;
}

/* Row lengths on both sides of the half-warp and block thresholds. */
static int64_t row_len(sl_rng *r) {
  static const int64_t lens[] = {1, 17, 1000, 4096, 4097, 33000};
  return lens[below(r, (int)SL_ARRAY_LEN(lens))];
}

static sl_status big_softmax(sl_rng *r, const char *name, tcase *c) {
  int64_t len = row_len(r);
  sl_shape s;
  if (below(r, 3) == 0) { /* the axis not last */
    s = SHAPE(7, len < 1000 ? len : 300, 33);
    SL_CHECK(sl__attrs_set_int(&c->at, "axis", below(r, 2)));
  } else {
    s = SHAPE(len > 4096 ? 3 : 130, len);
    SL_CHECK(sl__attrs_set_int(&c->at, "axis", -1));
  }
  if (strcmp(name, "softmax") == 0 || strcmp(name, "log_softmax") == 0) {
    c->in[0] = oph_random(r, SL_DTYPE_F32, &s, -8, 8);
    c->n_in = 1;
  } else {
    bool log = strcmp(name, "log_softmax_grad") == 0;
    c->in[0] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
    c->in[1] = oph_random(r, SL_DTYPE_F32, &s, log ? -6 : 0, log ? 0 : 1);
    c->n_in = 2;
  }
  return SL_OK;
}

static sl_status big_ce(sl_rng *r, const char *name, tcase *c) {
  static const int64_t cls[] = {1, 1000, 4097, 50000};
  int64_t classes = cls[below(r, 4)], rows = classes > 4097 ? 5 : 300;
  sl_shape s = SHAPE(rows, classes), ls = SHAPE(rows);
  sl_dtype idt = below(r, 2) ? SL_DTYPE_I64 : SL_DTYPE_I32;
  bool grad = strcmp(name, "sparse_cross_entropy_grad") == 0;
  int at = grad ? 1 : 0;
  c->in[at] = oph_random(r, SL_DTYPE_F32, &s, -8, 8);
  c->in[at + 1] = oph_random(r, idt, &ls, 0, (double)(classes - 1));
  if (grad) c->in[0] = oph_random(r, SL_DTYPE_F32, &ls, -2, 2);
  c->n_in = grad ? 3 : 2;
  return SL_OK;
}

static sl_status big_norm(sl_rng *r, const char *name, tcase *c) {
  static const int64_t ds[] = {1, 768, 4097, 9000};
  int64_t d = ds[below(r, 4)], rows = d > 4096 ? 7 : (below(r, 2) ? 1 : 2600);
  sl_shape s = SHAPE(rows, d), vs = SHAPE(d);
  if (strcmp(name, "layer_norm") == 0) {
    SL_CHECK(sl__attrs_set_float(&c->at, "eps", below(r, 2) ? 1e-5 : 0.25));
    c->in[0] = oph_random(r, SL_DTYPE_F32, &s, -4, 4);
    c->in[1] = oph_random(r, SL_DTYPE_F32, &vs, -2, 2);
    c->in[2] = oph_random(r, SL_DTYPE_F32, &vs, -2, 2);
    c->n_in = 3;
    return SL_OK;
  }
  /* mean and rstd from the CPU forward, as in training. */
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
  c->in[0] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  c->in[1] = fin[0];
  c->in[2] = fin[1];
  c->in[3] = fout[1];
  c->in[4] = fout[2];
  c->n_in = 5;
  return st;
}

static sl_status big_embedding(sl_rng *r, const char *name, tcase *c) {
  static const int64_t vs[] = {1, 50, 5000}, dims[] = {1, 3, 129, 768};
  int64_t vocab = vs[below(r, 3)], d = dims[below(r, 4)];
  sl_shape is = below(r, 2) ? SHAPE(37, 11) : SHAPE(300);
  sl_dtype idt = below(r, 2) ? SL_DTYPE_I64 : SL_DTYPE_I32;
  c->n_in = 2;
  if (strcmp(name, "embedding") == 0) {
    sl_shape ts = SHAPE(vocab, d);
    c->in[0] = oph_random(r, SL_DTYPE_F32, &ts, -4, 4);
  } else {
    sl_shape ds = is;
    ds.dims[ds.ndim++] = d;
    SL_CHECK(sl__attrs_set_int(&c->at, "vocab", vocab));
    c->in[0] = oph_random(r, SL_DTYPE_F32, &ds, -4, 4);
  }
  c->in[1] = oph_random(r, idt, &is, 0, (double)(vocab - 1));
  return SL_OK;
}

static sl_status big_optim(sl_rng *r, const char *name, tcase *c) {
  sl_shape s = below(r, 2) ? SHAPE(100003) : SHAPE(37, 1031);
  if (strcmp(name, "sgd_update") == 0) {
    int mom = below(r, 3), nesterov = mom && below(r, 2);
    SL_CHECK(sl__attrs_set_float(&c->at, "lr", 0.1));
    SL_CHECK(sl__attrs_set_float(&c->at, "momentum", mom ? 0.45 * mom : 0.0));
    SL_CHECK(sl__attrs_set_float(&c->at, "dampening",
                                 nesterov ? 0.0 : 0.3 * below(r, 2)));
    SL_CHECK(sl__attrs_set_float(&c->at, "weight_decay", 0.01 * below(r, 2)));
    SL_CHECK(sl__attrs_set_int(&c->at, "nesterov", nesterov));
    for (int i = 0; i < 3; i++)
      c->in[i] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
    if (!mom && below(r, 2)) {
      sl_host_tensor_destroy(c->in[2]);
      c->in[2] = oph_random(r, SL_DTYPE_F32, &(sl_shape){1, {0}}, 0, 0);
    }
    c->n_in = 3;
    return SL_OK;
  }
  SL_CHECK(sl__attrs_set_float(&c->at, "lr", 0.003));
  SL_CHECK(sl__attrs_set_float(&c->at, "weight_decay", 0.05 * below(r, 2)));
  SL_CHECK(sl__attrs_set_int(&c->at, "decoupled", below(r, 2)));
  for (int i = 0; i < 3; i++)
    c->in[i] = oph_random(r, SL_DTYPE_F32, &s, -2, 2);
  c->in[3] = oph_random(r, SL_DTYPE_F32, &s, 0, 2);
  c->n_in = 4;
  return SL_OK;
}

static sl_status big_npy(sl_rng *r, tcase *c) {
  static const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_I32, SL_DTYPE_I64};
  sl_dtype dt = dts[below(r, 3)];
  sl_shape s = below(r, 2) ? SHAPE(1000, 33) : SHAPE(777, 3, 5);
  sl_host_tensor *data = oph_random(r, dt, &s, -1000, 1000);
  char path[] = "/tmp/sluice_cuda_conf_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) fail_msg("mkstemp failed");
  close(fd);
  int32_t id = -1;
  sl_status st = sl__npy_write(path, dt, &s, sl_host_tensor_cdata(data));
  if (st == SL_OK) st = sl__npy_open(path, &id);
  unlink(path);
  sl_host_tensor_destroy(data);
  SL_CHECK(st);
  SL_CHECK(sl__attrs_set_int(&c->at, "file", id));
  SL_CHECK(sl__attrs_set_int(&c->at, "batch", 1 + below(r, 1500)));
  c->n_in = 0;
  return SL_OK;
}

/* A larger case for op `name`; SL_ENOTFOUND for an op with none here (its
 * small cases cover it: global_norm_scale). */
static sl_status big_case(sl_rng *r, const char *name, tcase *c) {
  static const char *unary[] = {
      "identity", "relu", "gelu", "tanh", "sigmoid",    "square",
      "sqrt",     "exp",  "log",  "neg",  "scalar_add", "scalar_mul"};
  static const char *binary[] = {"add",       "sub",       "mul",
                                 "div",       "maximum",   "relu_grad",
                                 "gelu_grad", "tanh_grad", "sigmoid_grad"};
  for (size_t i = 0; i < SL_ARRAY_LEN(unary); i++)
    if (strcmp(name, unary[i]) == 0) return big_unary(r, name, c);
  for (size_t i = 0; i < SL_ARRAY_LEN(binary); i++)
    if (strcmp(name, binary[i]) == 0) return big_binary(r, name, c);
  if (strncmp(name, "reduce_", 7) == 0) return big_reduce(r, name, c);
  if (strcmp(name, "reshape") == 0 || strcmp(name, "transpose") == 0 ||
      strcmp(name, "broadcast_to") == 0 || strcmp(name, "slice") == 0 ||
      strcmp(name, "concat") == 0)
    return big_shape_op(r, name, c);
  if (strcmp(name, "cast") == 0) return big_cast(r, c);
  if (strcmp(name, "causal_mask") == 0) return big_mask(r, c);
  if (strcmp(name, "fill") == 0 || strncmp(name, "random_", 7) == 0)
    return big_source(r, name, c);
  if (strncmp(name, "dropout", 7) == 0) return big_dropout(r, c);
  if (strstr(name, "matmul")) return big_matmul(r, name, c);
  if (strstr(name, "softmax")) return big_softmax(r, name, c);
  if (strncmp(name, "sparse_cross_entropy", 20) == 0) return big_ce(r, name, c);
  if (strncmp(name, "layer_norm", 10) == 0) return big_norm(r, name, c);
  if (strncmp(name, "embedding", 9) == 0) return big_embedding(r, name, c);
  if (strcmp(name, "sgd_update") == 0 || strcmp(name, "adam_update") == 0)
    return big_optim(r, name, c);
  if (strcmp(name, "npy_read") == 0) return big_npy(r, c);
  return SL_ENOTFOUND;
}

/* ---- the tests
 * ---------------------------------------------------------------
 */

static const op_case *(*const tables[])(int *n) = {
    op_cases_pointwise, op_cases_dense, op_cases_data};

static const op_case *find_case(const char *name) {
  for (size_t f = 0; f < SL_ARRAY_LEN(tables); f++) {
    int n;
    const op_case *t = tables[f](&n);
    for (int i = 0; i < n; i++)
      if (strcmp(t[i].op, name) == 0) return &t[i];
  }
  return NULL;
}

/* In a CUDA build every op in the registry has a CUDA kernel in the CUDA
 * module or runs from the host (so coverage cannot drop without this
 * failing); in a build without CUDA none has, and asking says why. No GPU
 * needed. */
static void test_every_op_has_a_cuda_kernel(void **state) {
  (void)state;
  if (!sl_build_has_cuda()) {
    for (int i = 0; i < sl__op_count(); i++)
      if (sl__op_cuda(sl__op_at(i)))
        fail_msg("op %s has a CUDA kernel in a build without CUDA",
                 sl__op_at(i)->name);
    assert_non_null(strstr(sl_last_error(), "has no CUDA"));
    printf("skipped: this build of sluice has no CUDA (SLUICE_CUDA=OFF or "
           "no nvcc), so no op has a CUDA kernel\n");
    skip();
  }
  int missing = 0, from_host = 0;
  for (int i = 0; i < sl__op_count(); i++) {
    const sl__op_def *op = sl__op_at(i);
    const sl__cuda_kernel *kern = sl__op_cuda(op);
    if (op->cuda_from_host) {
      assert_null(kern); /* one way to run, not two */
      from_host++;
    } else if (!kern || !kern->run) {
      printf("op %s has no CUDA kernel: %s\n", op->name, sl_last_error());
      missing++;
    }
  }
  printf("%d ops, all with a CUDA kernel (%d of them run from the host)\n",
         sl__op_count() - missing, from_host);
  assert_int_equal(missing, 0);
  assert_true(from_host >= 1); /* npy_read */
}

/* sl__op_run_cuda's refusals, which need no GPU. */
static void test_run_cuda_refusals(void **state) {
  (void)state;
  char fake;
  sl__stream *s = (sl__stream *)&fake; /* never launched on */
  const sl__op_def *relu = sl__op_find("relu");
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  if (!sl_build_has_cuda()) {
    assert_int_equal(sl__op_run_cuda(relu, &k, NULL, s), SL_EUNSUPPORTED);
    assert_non_null(strstr(sl_last_error(), "op relu: cuda: this build of "
                                            "sluice has no CUDA"));
    return;
  }
  assert_int_equal(sl__op_run_cuda(relu, &k, NULL, NULL), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no CUDA stream"));
  /* A reduction over many rows into few outputs needs a workspace: without
   * an allocator it is refused before anything is queued. */
  const sl__op_def *sum = sl__op_find("reduce_sum");
  sl__attrs at;
  memset(&at, 0, sizeof at);
  assert_int_equal(sl__attrs_set_ints(&at, "axes", 1, (int64_t[]){0}), SL_OK);
  k.attrs = &at;
  k.n_in = k.n_out = 1;
  k.in_meta[0] = oph_meta(SL_DTYPE_F32, 2, (int64_t[]){100000, 3});
  k.out_meta[0] = oph_meta(SL_DTYPE_F32, 1, (int64_t[]){3});
  k.in_global[0] = k.in_meta[0].shape;
  k.out_global[0] = k.out_meta[0].shape;
  assert_true(sl__op_cuda(sum)->workspace(&k) > 0);
  assert_int_equal(sl__op_run_cuda(sum, &k, NULL, s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "workspace"));
}

static int trials_env(void) {
  const char *e = getenv("SLUICE_CONFORMANCE_TRIALS");
  int t = e && *e ? atoi(e) : 4;
  return t < 1 ? 1 : t;
}

/* Every op (or SLUICE_TEST_OP), `trials` small and large cases each, on
 * g against the CPU kernels. */
static void sweep(gpu *g, int trials) {
  const char *only = getenv("SLUICE_TEST_OP");
  int ops = 0, total = 0;
  for (int i = 0; i < sl__op_count(); i++) {
    const sl__op_def *op = sl__op_at(i);
    if (only && *only && strcmp(only, op->name) != 0) continue;
    const op_case *oc = find_case(op->name);
    if (!oc) fail_msg("op %s has no entry in op_cases_*.c", op->name);
    sl_rng r = {g_seed ^ (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull};
    int runs = 0;
    for (int t = 0; t < trials; t++) {
      tcase c;
      memset(&c, 0, sizeof c);
      c.step = below(&r, 4);
      if (oc->make(&r, &c.at, &c.n_in, c.in) != SL_OK)
        fail_msg("op %s: case: %s", op->name, sl_last_error());
      run_case(g, &r, op, &c, true, SL_OP_MAX_SIGNATURES, &runs);
      tcase_free(&c);
      c.step = below(&r, 4);
      sl_status st = big_case(&r, op->name, &c);
      if (st == SL_ENOTFOUND) continue;
      if (st != SL_OK) fail_msg("op %s: case: %s", op->name, sl_last_error());
      run_case(g, &r, op, &c, false, 1, &runs);
      tcase_free(&c);
    }
    printf("  %-26s %5d runs\n", op->name, runs);
    ops++;
    total += runs;
  }
  printf("%d ops, %d runs: %s and the CPU kernels agree\n", ops, total,
         g->dev->name);
}

/* Every op, CPU against CUDA (skips without a GPU). */
static void test_conformance(void **state) {
  (void)state;
  if (!sl_build_has_cuda()) {
    printf("skipped: this build of sluice has no CUDA\n");
    skip();
  }
  gpu g;
  if (!gpu_open(&g, SL_DEVICE_CUDA)) skip();
  for (int i = 0; i < sl__op_count(); i++)
    if (!sl__op_cuda(sl__op_at(i)) && !sl__op_at(i)->cuda_from_host)
      fail_msg("op %s has no CUDA kernel", sl__op_at(i)->name);
  sweep(&g, trials_env());
  gpu_close(&g);
}

/* ---- the harness itself, without a GPU -----------------------------------
 */

/* The CPU kernels run as the "device" kernels on the CPU device: every
 * case generator makes valid inputs, every shard layout runs, and the
 * comparison, guards and input checks pass where nothing differs. */
static sl_status run_cpu_kernel(const gpu *g, const sl__op_def *op,
                                sl__kernel_ctx *k) {
  return sl__op_run_cpu(op, k);
}

static void test_harness_on_the_cpu_device(void **state) {
  (void)state;
  gpu g;
  if (!gpu_open(&g, SL_DEVICE_CPU)) fail_msg("%s", sl_last_error());
  g.run = run_cpu_kernel;
  sweep(&g, 1);
  gpu_close(&g);
}

/* Stand-ins that get one thing wrong, each of which must be caught. */
static sl_status run_overrun(const gpu *g, const sl__op_def *op,
                             sl__kernel_ctx *k) {
  SL_CHECK(sl__op_run_cpu(op, k));
  size_t bytes = (size_t)sl_shape_numel(&k->out_meta[0].shape) *
                 sl_dtype_size(k->out_meta[0].dtype);
  ((char *)k->out[0])[bytes] = 0; /* one byte past the end */
  return SL_OK;
}
static sl_status run_underrun(const gpu *g, const sl__op_def *op,
                              sl__kernel_ctx *k) {
  SL_CHECK(sl__op_run_cpu(op, k));
  ((char *)k->out[0])[-1] = 0;
  return SL_OK;
}
static sl_status run_wrong_value(const gpu *g, const sl__op_def *op,
                                 sl__kernel_ctx *k) {
  SL_CHECK(sl__op_run_cpu(op, k));
  ((float *)k->out[0])[sl_shape_numel(&k->out_meta[0].shape) - 1] += 0.5f;
  return SL_OK;
}
static sl_status run_unwritten(const gpu *g, const sl__op_def *op,
                               sl__kernel_ctx *k) {
  return SL_OK; /* leaves the outputs as they were */
}
static sl_status run_writes_input(const gpu *g, const sl__op_def *op,
                                  sl__kernel_ctx *k) {
  SL_CHECK(sl__op_run_cpu(op, k));
  ((unsigned char *)k->in[0])[0] ^= 1; /* whatever the value was */
  return SL_OK;
}

static void test_harness_catches_bad_kernels(void **state) {
  (void)state;
  static const struct {
    sl_status (*run)(const gpu *, const sl__op_def *, sl__kernel_ctx *);
    const char *needle;
  } bad[] = {
      {run_overrun, "after the tensor written"},
      {run_underrun, "before the tensor written"},
      {run_wrong_value, "element [2,3]"},
      {run_unwritten, "element [0,0]"},
      {run_writes_input, "input 0 was written to"},
  };
  gpu g;
  if (!gpu_open(&g, SL_DEVICE_CPU)) fail_msg("%s", sl_last_error());
  const sl__op_def *op = sl__op_find("sigmoid");
  tcase c;
  memset(&c, 0, sizeof c);
  sl_rng r = {g_seed};
  sl_shape s = SHAPE(3, 4);
  c.in[0] = oph_random(&r, SL_DTYPE_F32, &s, -2, 2);
  c.n_in = 1;
  layout l;
  memset(&l, 0, sizeof l);
  l.n = 1;
  for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
    g.run = bad[i].run;
    assert_int_equal(run_layout(&g, op, &c, &l), SL_EMISMATCH);
    if (!strstr(sl_last_error(), bad[i].needle))
      fail_msg("case %zu: '%s' lacks '%s'", i, sl_last_error(), bad[i].needle);
  }
  g.run = run_cpu_kernel;
  assert_int_equal(run_layout(&g, op, &c, &l), SL_OK);
  tcase_free(&c);
  gpu_close(&g);
}

int main(void) {
  g_seed = oph_seed("kernels_cuda_conformance");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_has_a_cuda_kernel),
      cmocka_unit_test(test_run_cuda_refusals),
      cmocka_unit_test(test_harness_catches_bad_kernels),
      cmocka_unit_test(test_harness_on_the_cpu_device),
      cmocka_unit_test(test_conformance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
