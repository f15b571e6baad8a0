/* Box operations (kernels/box.h): the argument check, the host
 * implementation against a naive reference written here (coordinates of
 * every element of the box, one element at a time), and the CUDA one
 * against the host's, byte for byte, on every dtype and every operation
 * (store, reduce sum/max/min, fill with the identity of sum/max/min).
 *
 * Inputs are random with special values mixed in (NaN quiet and
 * signalling, of either sign, infinities, -0, subnormals, extremes). Where
 * the box pairs a NaN in dst with a NaN in src, src's is replaced: which of
 * two NaNs a sum keeps is the host compiler's choice of operand order.
 *
 * The CUDA part skips, saying why, without a GPU or in a build without
 * CUDA. Prints its seed; SLUICE_TEST_SEED replays a run. */
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

#include <sluice/build.h>

#include "box.h"
#include "device_iface.h"

static uint64_t g_seed;

static const sl_dtype dtypes[] = {
    SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_F16, SL_DTYPE_BF16, SL_DTYPE_I8,
    SL_DTYPE_I32, SL_DTYPE_I64, SL_DTYPE_U8,  SL_DTYPE_BOOL,
};

/* The operations: a store, a reduce or a fill (with op). */
typedef enum { STORE, REDUCE, FILL } mode;
typedef struct box_mode {
  mode m;
  sl_reduce_op op;
  const char *name;
} box_mode;

static const box_mode modes[] = {
    {STORE, SL_REDUCE_SUM, "store"},    {REDUCE, SL_REDUCE_SUM, "sum"},
    {REDUCE, SL_REDUCE_MAX, "max"},     {REDUCE, SL_REDUCE_MIN, "min"},
    {FILL, SL_REDUCE_SUM, "fill(sum)"}, {FILL, SL_REDUCE_MAX, "fill(max)"},
    {FILL, SL_REDUCE_MIN, "fill(min)"},
};

typedef struct box_case {
  const char *name;
  int ndim;
  int64_t dst_dims[SL_MAX_DIMS], src_dims[SL_MAX_DIMS];
  int64_t dst_off[SL_MAX_DIMS], src_off[SL_MAX_DIMS], ext[SL_MAX_DIMS];
} box_case;

static const box_case small_cases[] = {
    {"scalar", 0, {0}, {0}, {0}, {0}, {0}},
    {"1-d", 1, {10}, {7}, {3}, {1}, {5}},
    {"1-d whole", 1, {9}, {9}, {0}, {0}, {9}},
    {"3-d rows", 3, {4, 5, 6}, {3, 7, 6}, {1, 2, 0}, {0, 4, 0}, {2, 3, 6}},
    {"3-d whole", 3, {3, 4, 5}, {3, 4, 5}, {0}, {0}, {3, 4, 5}},
    {"3-d inner", 3, {4, 5, 9}, {3, 6, 8}, {1, 0, 2}, {0, 1, 3}, {3, 5, 4}},
    {"4-d",
     4,
     {3, 4, 5, 6},
     {2, 6, 5, 7},
     {1, 0, 1, 1},
     {0, 2, 0, 0},
     {2, 3, 4, 5}},
    {"4-d unit dims",
     4,
     {5, 1, 4, 8},
     {2, 3, 4, 8},
     {3, 0, 0, 0},
     {1, 2, 0, 0},
     {1, 1, 4, 8}},
    {"column", 2, {6, 8}, {6, 3}, {0, 5}, {0, 2}, {6, 1}},
    {"src column", 2, {8, 1}, {8, 4}, {0, 0}, {0, 0}, {8, 1}},
    {"dst column", 2, {8, 3}, {8, 1}, {0, 2}, {0, 0}, {8, 1}},
    {"16-byte rows", 2, {5, 32}, {4, 48}, {1, 16}, {0, 0}, {4, 16}},
    /* Rows that start 16-byte aligned in one buffer only. */
    {"odd src rows", 2, {4, 16}, {4, 18}, {0, 8}, {0, 0}, {4, 8}},
    {"odd dst rows", 2, {4, 18}, {4, 16}, {0, 0}, {0, 8}, {4, 8}},
    {"empty", 2, {4, 4}, {4, 4}, {4, 1}, {2, 0}, {0, 3}},
    {"empty 4-d", 4, {2, 3, 4, 5}, {2, 3, 4, 5}, {0}, {0}, {2, 0, 4, 5}},
};

/* More than 2^20 elements: whole rows (merged, 16 bytes at a time) and odd
 * rows (per element). */
static const box_case large_cases[] = {
    {"large rows",
     3,
     {3, 600, 1000},
     {2, 700, 1000},
     {1, 20, 0},
     {0, 100, 0},
     {2, 550, 1000}},
    {"large odd",
     3,
     {2, 1100, 1001},
     {3, 1051, 1000},
     {1, 3, 1},
     {2, 0, 1},
     {1, 1050, 999}},
};

/* ---- buffers and values ---------------------------------------------- */

static uint64_t rnd(uint64_t *st) {
  sl_rng r = {*st};
  uint64_t v = sl__rng_next(&r);
  *st = r.state;
  return v;
}

static int64_t numel(int ndim, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    n *= dims[d];
  return n;
}

static void put_f32(unsigned char *p, float v) { memcpy(p, &v, 4); }
static void put_f64(unsigned char *p, double v) { memcpy(p, &v, 8); }

/* One random element of dt at p: mostly small exact values, one in eight
 * special. */
static void rand_elem(sl_dtype dt, unsigned char *p, uint64_t *st) {
  uint64_t r = rnd(st);
  bool special = r % 8 == 0;
  int k = (int)((r >> 8) % 9);
  double small = (double)((int64_t)((r >> 16) % 2001) - 1000) / 8;
  switch (dt) {
  case SL_DTYPE_F32: {
    static const uint32_t sp[9] = {0x7fc00000, 0x7f800001, 0xffc00123,
                                   0x7f800000, 0xff800000, 0x80000000,
                                   0x00000001, 0x7f7fffff, 0x00400000};
    if (special)
      memcpy(p, &sp[k], 4);
    else
      put_f32(p, (float)small);
    break;
  }
  case SL_DTYPE_F64: {
    static const uint64_t sp[9] = {
        0x7ff8000000000000, 0x7ff0000000000001, 0xfff8000000000123,
        0x7ff0000000000000, 0xfff0000000000000, 0x8000000000000000,
        0x0000000000000001, 0x7fefffffffffffff, 0x0008000000000000};
    if (special)
      memcpy(p, &sp[k], 8);
    else
      put_f64(p, small);
    break;
  }
  case SL_DTYPE_F16:
  case SL_DTYPE_BF16: { /* any bits: NaNs, infinities, subnormals */
    uint16_t v = (uint16_t)(r >> 32);
    if (!special)
      v = dt == SL_DTYPE_F16 ? sl_f32_to_f16((float)small)
                             : sl_f32_to_bf16((float)small);
    memcpy(p, &v, 2);
    break;
  }
  case SL_DTYPE_BOOL: *p = (unsigned char)(r >> 40) & 1; break;
  default: /* integers: any bits, so sums wrap */
    memcpy(p, &r, sl_dtype_size(dt));
    break;
  }
}

static bool is_nan(sl_dtype dt, const unsigned char *p) {
  switch (dt) {
  case SL_DTYPE_F32: {
    float v;
    memcpy(&v, p, 4);
    return isnan(v);
  }
  case SL_DTYPE_F64: {
    double v;
    memcpy(&v, p, 8);
    return isnan(v);
  }
  case SL_DTYPE_F16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return isnan(sl_f16_to_f32(v));
  }
  case SL_DTYPE_BF16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return isnan(sl_bf16_to_f32(v));
  }
  default: return false;
  }
}

/* ---- the naive reference ---------------------------------------------- */

/* Flat indices in dst and src of element k of the box (row-major). */
static void box_index(const sl__box_op *b, int64_t k, int64_t *di,
                      int64_t *si) {
  int64_t c[SL_MAX_DIMS];
  for (int d = b->ndim - 1; d >= 0; d--) {
    c[d] = k % b->ext[d];
    k /= b->ext[d];
  }
  *di = *si = 0;
  for (int d = 0; d < b->ndim; d++) {
    *di = *di * b->dst_dims[d] + b->dst_off[d] + c[d];
    if (b->src) *si = *si * b->src_dims[d] + b->src_off[d] + c[d];
  }
}

static void identity(sl_dtype dt, sl_reduce_op op, unsigned char *p) {
  bool mx = op == SL_REDUCE_MAX, mn = op == SL_REDUCE_MIN;
  union {
    float f32;
    double f64;
    uint16_t h;
    int8_t i8;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
  } v;
  memset(&v, 0, sizeof v);
  if (mx || mn) {
    switch (dt) {
    case SL_DTYPE_F32: v.f32 = mx ? -INFINITY : INFINITY; break;
    case SL_DTYPE_F64: v.f64 = mx ? -INFINITY : INFINITY; break;
    case SL_DTYPE_F16: v.h = mx ? 0xfc00 : 0x7c00; break;
    case SL_DTYPE_BF16: v.h = mx ? 0xff80 : 0x7f80; break;
    case SL_DTYPE_I8: v.i8 = mx ? INT8_MIN : INT8_MAX; break;
    case SL_DTYPE_I32: v.i32 = mx ? INT32_MIN : INT32_MAX; break;
    case SL_DTYPE_I64: v.i64 = mx ? INT64_MIN : INT64_MAX; break;
    case SL_DTYPE_U8: v.u8 = mx ? 0 : UINT8_MAX; break;
    case SL_DTYPE_BOOL: v.u8 = mn; break; /* and's identity; or's is 0 */
    }
  }
  memcpy(p, &v, sl_dtype_size(dt));
}

/* x = op(x, y): y wins a max (min) only when greater (smaller). */
#define REF_OP(T, SUM)                                                         \
  do {                                                                         \
    T x, y;                                                                    \
    memcpy(&x, d, sizeof x);                                                   \
    memcpy(&y, s, sizeof y);                                                   \
    x = op == SL_REDUCE_SUM   ? SUM                                            \
        : op == SL_REDUCE_MAX ? (y > x ? y : x)                                \
                              : (y < x ? y : x);                               \
    memcpy(d, &x, sizeof x);                                                   \
  } while (0)

static float half_get(bool bf, uint16_t v) {
  return bf ? sl_bf16_to_f32(v) : sl_f16_to_f32(v);
}

static void ref_reduce(sl_dtype dt, sl_reduce_op op, unsigned char *d,
                       const unsigned char *s) {
  switch (dt) {
  case SL_DTYPE_F32: REF_OP(float, x + y); break;
  case SL_DTYPE_F64: REF_OP(double, x + y); break;
  case SL_DTYPE_I8:
    REF_OP(int8_t, (int8_t)(uint8_t)((uint8_t)x + (uint8_t)y));
    break;
  case SL_DTYPE_I32:
    REF_OP(int32_t, (int32_t)((uint32_t)x + (uint32_t)y));
    break;
  case SL_DTYPE_I64:
    REF_OP(int64_t, (int64_t)((uint64_t)x + (uint64_t)y));
    break;
  case SL_DTYPE_U8: REF_OP(uint8_t, (uint8_t)(x + y)); break;
  case SL_DTYPE_BOOL: /* or, or, and */
    *d = op == SL_REDUCE_MIN ? (*d && *s) : (*d || *s);
    break;
  case SL_DTYPE_F16:
  case SL_DTYPE_BF16: {
    bool bf = dt == SL_DTYPE_BF16;
    uint16_t xh, yh;
    memcpy(&xh, d, 2);
    memcpy(&yh, s, 2);
    float x = half_get(bf, xh), y = half_get(bf, yh);
    float r = op == SL_REDUCE_SUM   ? x + y
              : op == SL_REDUCE_MAX ? (y > x ? y : x)
                                    : (y < x ? y : x);
    xh = bf ? sl_f32_to_bf16(r) : sl_f32_to_f16(r);
    memcpy(d, &xh, 2);
    break;
  }
  }
}

static void ref_run(const sl__box_op *b, bool fill, bool reduce) {
  size_t es = sl_dtype_size(b->dtype);
  int64_t n = numel(b->ndim, b->ext), di, si;
  unsigned char id[8];
  identity(b->dtype, b->op, id);
  for (int64_t k = 0; k < n; k++) {
    box_index(b, k, &di, &si);
    unsigned char *d = (unsigned char *)b->dst + di * es;
    if (fill) {
      memcpy(d, id, es);
      continue;
    }
    const unsigned char *s = (const unsigned char *)b->src + si * es;
    if (reduce)
      ref_reduce(b->dtype, b->op, d, s);
    else
      memcpy(d, s, es);
  }
}

/* ---- one case ------------------------------------------------------------ */

/* The host buffers of one run: random dst and src, b pointing at them. */
typedef struct run {
  sl__box_op b;
  unsigned char *dst, *src;
  size_t dbytes, sbytes;
} run;

static void run_make(run *r, const box_case *c, sl_dtype dt, const box_mode *m,
                     uint64_t *st) {
  memset(r, 0, sizeof *r);
  sl__box_op *b = &r->b;
  b->dtype = dt;
  b->ndim = c->ndim;
  b->reduce = m->m == REDUCE;
  b->op = m->op;
  memcpy(b->dst_dims, c->dst_dims, sizeof b->dst_dims);
  memcpy(b->src_dims, c->src_dims, sizeof b->src_dims);
  memcpy(b->dst_off, c->dst_off, sizeof b->dst_off);
  memcpy(b->src_off, c->src_off, sizeof b->src_off);
  memcpy(b->ext, c->ext, sizeof b->ext);
  size_t es = sl_dtype_size(dt);
  r->dbytes = (size_t)numel(c->ndim, c->dst_dims) * es;
  r->sbytes = (size_t)numel(c->ndim, c->src_dims) * es;
  r->dst = malloc(r->dbytes + 1);
  r->src = malloc(r->sbytes + 1);
  assert_non_null(r->dst);
  assert_non_null(r->src);
  for (size_t i = 0; i < r->dbytes; i += es)
    rand_elem(dt, r->dst + i, st);
  for (size_t i = 0; i < r->sbytes; i += es)
    rand_elem(dt, r->src + i, st);
  /* No NaN meets a NaN (see the top of the file). */
  int64_t n = numel(c->ndim, c->ext), di, si;
  b->src = r->src;
  for (int64_t k = 0; k < n; k++) {
    box_index(b, k, &di, &si);
    if (is_nan(dt, r->dst + di * es) && is_nan(dt, r->src + si * es))
      memset(r->src + si * es, 0, es);
  }
  b->dst = r->dst;
  b->src = m->m == FILL ? NULL : r->src;
}

static void run_free(run *r) {
  free(r->dst);
  free(r->src);
}

static void fail_run(const char *what, const box_case *c, sl_dtype dt,
                     const box_mode *m, size_t at) {
  fail_msg("%s: case '%s', %s %s: byte %zu differs (seed %" PRIu64 ")", what,
           c->name, sl_dtype_name(dt), m->name, at, g_seed);
}

static size_t first_diff(const unsigned char *a, const unsigned char *b,
                         size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return i;
  return n;
}

/* ---- the argument check ---------------------------------------------- */

static sl__box_op valid_op(void *dst, const void *src) {
  sl__box_op b;
  memset(&b, 0, sizeof b);
  b.dtype = SL_DTYPE_F32;
  b.ndim = 2;
  b.dst = dst;
  b.src = src;
  b.dst_dims[0] = 4, b.dst_dims[1] = 5;
  b.src_dims[0] = 3, b.src_dims[1] = 6;
  b.dst_off[0] = 1, b.dst_off[1] = 2;
  b.src_off[0] = 0, b.src_off[1] = 3;
  b.ext[0] = 3, b.ext[1] = 3;
  b.reduce = true;
  b.op = SL_REDUCE_MAX;
  return b;
}

static void refused(const sl__box_op *b, const char *what) {
  sl_status st = sl__box_op_check(b);
  if (st != SL_EINVAL)
    fail_msg("%s: %s, not refused (%s)", what, sl_status_str(st),
             sl_last_error());
  assert_int_equal(sl__box_op_run_host(b), SL_EINVAL);
}

static void test_check_refuses(void **state) {
  (void)state;
  float dst[20] = {0}, src[18] = {0};
  sl__box_op b = valid_op(dst, src);
  assert_int_equal(sl__box_op_check(&b), SL_OK);
  refused(NULL, "no operation");
  b.ndim = -1;
  refused(&b, "ndim -1");
  b.ndim = SL_MAX_DIMS + 1;
  refused(&b, "ndim past SL_MAX_DIMS");
  b = valid_op(dst, src), b.dst_off[1] = 3;
  refused(&b, "past dst's end");
  b = valid_op(dst, src), b.dst_off[0] = -1;
  refused(&b, "before dst's start");
  b = valid_op(dst, src), b.dst_dims[1] = -5;
  refused(&b, "negative dst dim");
  b = valid_op(dst, src), b.src_off[1] = 4;
  refused(&b, "past src's end");
  b = valid_op(dst, src), b.src_off[0] = -2;
  refused(&b, "before src's start");
  b = valid_op(dst, src), b.ext[0] = -1;
  refused(&b, "negative extent");
  b = valid_op(dst, src), b.dtype = (sl_dtype)SL_DTYPE_COUNT;
  refused(&b, "unknown dtype");
  b = valid_op(dst, src), b.op = (sl_reduce_op)7;
  refused(&b, "unknown reduce op");
  b = valid_op(dst, NULL), b.op = (sl_reduce_op)-1;
  refused(&b, "unknown fill op");
  b = valid_op(NULL, src);
  refused(&b, "no dst");
  b = valid_op(NULL, NULL);
  refused(&b, "no dst for a fill");
}

static void test_check_accepts_empty(void **state) {
  (void)state;
  float dst[20] = {0}, src[18] = {0};
  sl__box_op b = valid_op(dst, src);
  b.ext[1] = 0; /* empty even at the end of the buffers */
  b.dst_off[1] = 5, b.src_off[1] = 6;
  assert_int_equal(sl__box_op_check(&b), SL_OK);
  b.dst = NULL, b.src = NULL; /* nothing to touch: no buffers needed */
  assert_int_equal(sl__box_op_check(&b), SL_OK);
  assert_int_equal(sl__box_op_run_host(&b), SL_OK);
  b.ndim = 0; /* a scalar is one element, never empty */
  assert_int_equal(sl__box_op_check(&b), SL_EINVAL);
  b.dst = dst;
  assert_int_equal(sl__box_op_check(&b), SL_OK);
  /* The CUDA entry checks first and queues nothing for an empty box, so
   * neither needs a GPU (no stream); without CUDA it is unsupported. */
  b = valid_op(NULL, NULL), b.ext[0] = 0;
  sl__box_op bad = valid_op(dst, src);
  bad.ext[1] = 9;
  if (sl_build_has_cuda()) {
    assert_int_equal(sl__cuda_box(&b, NULL), SL_OK);
    assert_int_equal(sl__cuda_box(&bad, NULL), SL_EINVAL);
  } else {
    assert_int_equal(sl__cuda_box(&b, NULL), SL_EUNSUPPORTED);
  }
}

/* ---- the host implementation ------------------------------------------- */

static void host_case(const box_case *c, sl_dtype dt, const box_mode *m,
                      uint64_t *st) {
  run r;
  run_make(&r, c, dt, m, st);
  unsigned char *want = malloc(r.dbytes + 1), *src0 = malloc(r.sbytes + 1);
  memcpy(want, r.dst, r.dbytes);
  memcpy(src0, r.src, r.sbytes);
  sl__box_op rb = r.b;
  rb.dst = want;
  ref_run(&rb, m->m == FILL, m->m == REDUCE);
  if (sl__box_op_run_host(&r.b) != SL_OK)
    fail_msg("case '%s': %s", c->name, sl_last_error());
  size_t at = first_diff(r.dst, want, r.dbytes);
  if (at < r.dbytes) fail_run("host vs reference", c, dt, m, at);
  if (memcmp(r.src, src0, r.sbytes)) fail_run("src changed", c, dt, m, 0);
  free(want);
  free(src0);
  run_free(&r);
}

static void test_host_against_reference(void **state) {
  (void)state;
  uint64_t st = g_seed;
  int runs = 0;
  for (size_t ci = 0; ci < SL_ARRAY_LEN(small_cases); ci++)
    for (size_t di = 0; di < SL_ARRAY_LEN(dtypes); di++)
      for (size_t mi = 0; mi < SL_ARRAY_LEN(modes); mi++, runs++)
        host_case(&small_cases[ci], dtypes[di], &modes[mi], &st);
  printf("%d host runs agree with the reference\n", runs);
}

/* ---- CUDA against the host ---------------------------------------------- */

typedef struct gpu {
  sl__device *dev;
  sl__stream *s;
} gpu;

/* false (after printing why) when there is no GPU to run on. */
static bool gpu_open(gpu *g) {
  memset(g, 0, sizeof *g);
  if (!sl_build_has_cuda()) {
    printf("skipped: this build of sluice has no CUDA\n");
    return false;
  }
  if (sl__device_open(SL_DEVICE_CUDA, 0, &g->dev) != SL_OK) {
    printf("skipped: %s\n", sl_last_error());
    return false;
  }
  if (sl__device_make_current(g->dev) != SL_OK ||
      sl__device_stream_create(g->dev, &g->s) != SL_OK)
    fail_msg("%s: %s", g->dev->name, sl_last_error());
  return true;
}

static void gpu_close(gpu *g) {
  sl__device_stream_destroy(g->dev, g->s);
  sl__device_close(g->dev);
}

#define GPU_OK(call)                                                           \
  do {                                                                         \
    if ((call) != SL_OK) fail_msg("%s: %s", #call, sl_last_error());           \
  } while (0)

/* One run on the GPU, dst and src each `shift` elements past a 16-byte
 * boundary (shift 1: only the element's alignment, so no 16-byte path). */
static void gpu_case(gpu *g, const box_case *c, sl_dtype dt, const box_mode *m,
                     const size_t shift[2], uint64_t *st) {
  run r;
  run_make(&r, c, dt, m, st);
  size_t es = sl_dtype_size(dt), dsh = shift[0] * es, ssh = shift[1] * es;
  char *dd = NULL, *ds = NULL;
  GPU_OK(sl__device_alloc(g->dev, r.dbytes + 16, (void **)&dd));
  GPU_OK(sl__device_alloc(g->dev, r.sbytes + 16, (void **)&ds));
  GPU_OK(sl__device_memcpy_h2d(g->dev, dd + dsh, r.dst, r.dbytes, g->s));
  GPU_OK(sl__device_memcpy_h2d(g->dev, ds + ssh, r.src, r.sbytes, g->s));
  sl__box_op db = r.b;
  db.dst = dd + dsh;
  db.src = r.b.src ? ds + ssh : NULL;
  if (sl__cuda_box(&db, g->s) != SL_OK)
    fail_msg("case '%s': %s", c->name, sl_last_error());
  unsigned char *got = malloc(r.dbytes + 1), *gsrc = malloc(r.sbytes + 1);
  GPU_OK(sl__device_memcpy_d2h(g->dev, got, dd + dsh, r.dbytes, g->s));
  GPU_OK(sl__device_memcpy_d2h(g->dev, gsrc, ds + ssh, r.sbytes, g->s));
  GPU_OK(sl__device_stream_synchronize(g->dev, g->s));
  GPU_OK(sl__box_op_run_host(&r.b));
  size_t at = first_diff(got, r.dst, r.dbytes);
  if (at < r.dbytes) fail_run("cuda vs host", c, dt, m, at);
  if (memcmp(gsrc, r.src, r.sbytes)) fail_run("src changed", c, dt, m, 0);
  free(got);
  free(gsrc);
  GPU_OK(sl__device_free(g->dev, dd));
  GPU_OK(sl__device_free(g->dev, ds));
  run_free(&r);
}

static void test_cuda_against_host(void **state) {
  (void)state;
  gpu g;
  if (!gpu_open(&g)) skip();
  /* Both aligned, dst off alignment, src off alignment. */
  static const size_t shifts[3][2] = {{0, 0}, {1, 0}, {0, 1}};
  uint64_t st = g_seed ^ 0x5bd1e995;
  int runs = 0;
  for (size_t ci = 0; ci < SL_ARRAY_LEN(small_cases); ci++)
    for (size_t di = 0; di < SL_ARRAY_LEN(dtypes); di++)
      for (size_t mi = 0; mi < SL_ARRAY_LEN(modes); mi++)
        for (size_t sh = 0; sh < 3; sh++, runs++)
          gpu_case(&g, &small_cases[ci], dtypes[di], &modes[mi], shifts[sh],
                   &st);
  /* Aligned only: the small cases cover the unaligned paths. */
  for (size_t ci = 0; ci < SL_ARRAY_LEN(large_cases); ci++)
    for (size_t di = 0; di < SL_ARRAY_LEN(dtypes); di++)
      for (size_t mi = 0; mi < SL_ARRAY_LEN(modes); mi++, runs++)
        gpu_case(&g, &large_cases[ci], dtypes[di], &modes[mi], shifts[0], &st);
  printf("%d runs: %s and the host agree\n", runs, g.dev->name);
  gpu_close(&g);
}

/* NaN against numbers, one element each way, for max and min of every
 * float dtype: a NaN arriving never replaces a number, a NaN in place
 * stays (the host's rule, box.h); the sum propagates it, and inf - inf
 * gives the host's own NaN. */
static void test_cuda_nan(void **state) {
  (void)state;
  gpu g;
  if (!gpu_open(&g)) skip();
  static const sl_dtype fl[] = {SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_F16,
                                SL_DTYPE_BF16};
  for (size_t i = 0; i < SL_ARRAY_LEN(fl); i++)
    for (sl_reduce_op op = SL_REDUCE_SUM; op <= SL_REDUCE_MIN; op++) {
      size_t es = sl_dtype_size(fl[i]);
      unsigned char hd[4 * 8], hs[4 * 8], got[4 * 8];
      double dv[4] = {NAN, 1.5, INFINITY, -2.0};
      double sv[4] = {-3.0, -NAN, -INFINITY, 0.0};
      for (int k = 0; k < 4; k++) {
        unsigned char *a = hd + k * es, *b = hs + k * es;
        switch (fl[i]) {
        case SL_DTYPE_F32:
          put_f32(a, (float)dv[k]), put_f32(b, (float)sv[k]);
          break;
        case SL_DTYPE_F64: put_f64(a, dv[k]), put_f64(b, sv[k]); break;
        default: {
          bool bf = fl[i] == SL_DTYPE_BF16;
          uint16_t x =
              bf ? sl_f32_to_bf16((float)dv[k]) : sl_f32_to_f16((float)dv[k]);
          uint16_t y =
              bf ? sl_f32_to_bf16((float)sv[k]) : sl_f32_to_f16((float)sv[k]);
          memcpy(a, &x, 2), memcpy(b, &y, 2);
        }
        }
      }
      sl__box_op b;
      memset(&b, 0, sizeof b);
      b.dtype = fl[i], b.ndim = 1, b.reduce = true, b.op = op;
      b.dst_dims[0] = b.src_dims[0] = b.ext[0] = 4;
      char *dd = NULL, *ds = NULL;
      GPU_OK(sl__device_alloc(g.dev, 4 * es, (void **)&dd));
      GPU_OK(sl__device_alloc(g.dev, 4 * es, (void **)&ds));
      GPU_OK(sl__device_memcpy_h2d(g.dev, dd, hd, 4 * es, g.s));
      GPU_OK(sl__device_memcpy_h2d(g.dev, ds, hs, 4 * es, g.s));
      b.dst = dd, b.src = ds;
      GPU_OK(sl__cuda_box(&b, g.s));
      GPU_OK(sl__device_memcpy_d2h(g.dev, got, dd, 4 * es, g.s));
      GPU_OK(sl__device_stream_synchronize(g.dev, g.s));
      b.dst = hd, b.src = hs;
      GPU_OK(sl__box_op_run_host(&b));
      assert_memory_equal(got, hd, 4 * es);
      if (op != SL_REDUCE_SUM) {
        assert_true(is_nan(fl[i], got));       /* NaN in place stays */
        assert_false(is_nan(fl[i], got + es)); /* NaN arriving is lost */
      }
      sl__device_free(g.dev, dd);
      sl__device_free(g.dev, ds);
    }
  gpu_close(&g);
}

int main(void) {
  const char *env = getenv("SLUICE_TEST_SEED");
  g_seed = env ? strtoull(env, NULL, 0) : 20240611;
  printf("[ seed     ] kernels_cuda_box: SLUICE_TEST_SEED=%" PRIu64 "\n",
         g_seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_check_refuses),
      cmocka_unit_test(test_check_accepts_empty),
      cmocka_unit_test(test_host_against_reference),
      cmocka_unit_test(test_cuda_against_host),
      cmocka_unit_test(test_cuda_nan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
