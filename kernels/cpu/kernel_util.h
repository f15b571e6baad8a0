/* Helpers shared by op definitions and CPU kernels: argument checks with
 * uniform error messages, numpy broadcasting, signature lists, strided
 * iteration over local shards and their global positions, and the
 * counter-based random stream. Every op family may use them; keep them
 * general (no op-specific logic here). */
#ifndef SLUICE_KERNELS_CPU_KERNEL_UTIL_H
#define SLUICE_KERNELS_CPU_KERNEL_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "op.h"

/* The instruction-set instances must give identical bits, which needs every
 * a * b + c rounded twice. GCC does not contract in ISO C mode (-std=c11);
 * clang contracts within an expression by default, and AVX-512 has FMA. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- matmul's product (cpu/matmul.c, shared with its CUDA kernel) -------- */

/* Where a's and b's axes sit: the first row, column and contraction axis
 * of each, from the flags and the contraction count c. */
typedef struct sl__mm_axes {
  int c, rows, cols; /* how many contraction, row and column axes */
  int a_row0, a_k0;  /* a's first row and first contraction axis */
  int b_k0, b_col0;  /* b's first contraction and first column axis */
} sl__mm_axes;

/* Fills x for operand shapes a and b, the flags and contraction count c:
 * SL_EINVAL with a message when the shapes do not fit. */
sl_status sl__matmul_axes(bool trans_a, bool trans_b, int64_t c,
                          const sl_shape *a, const sl_shape *b, sl__mm_axes *x);

/* The one row-major [m, k] x [k, n] product matmul computes for operand
 * shapes a and b (global or local), its flags and contraction count (the
 * op's attributes; cpu/matmul.c says what they mean). SL_EINVAL with a
 * message when the shapes do not fit. */
sl_status sl__matmul_dims(bool trans_a, bool trans_b, int64_t contract,
                          const sl_shape *a, const sl_shape *b, int64_t *m,
                          int64_t *n, int64_t *k);

/* ---- intra-op parallelism ------------------------------------------------ */

/* The fewest elements worth a thread of a memory-bound loop (elementwise
 * ops, optimizer updates): 64 KiB of f32, some microseconds of work, well
 * above what waking a team member costs. */
#define SL__GRAIN_ELEMS 16384

/* ---- text for messages --------------------------------------------------- */

/* A shape as text ("[2,3]"), returned by value so it can sit inside a
 * printf argument list: sl__fail(..., "%s", sl__shape_text(&s).s). */
typedef struct sl__shape_txt {
  char s[200];
} sl__shape_txt;
sl__shape_txt sl__shape_text(const sl_shape *s);

/* ---- argument checks (messages never name the op; the graph adds it) ----- */

/* Dtype sets for sl__check_dtype. */
#define SL__DT(d) (1u << (unsigned)(d))
#define SL__DT_FLOAT (SL__DT(SL_DTYPE_F32) | SL__DT(SL_DTYPE_F64))
#define SL__DT_INT (SL__DT(SL_DTYPE_I32) | SL__DT(SL_DTYPE_I64))
#define SL__DT_NUM (SL__DT_FLOAT | SL__DT_INT)
#define SL__DT_ALL ((1u << SL_DTYPE_COUNT) - 1u)

/* SL_EINVAL "input 1: dtype i8 not supported (f32, f64)" unless dt is in
 * the set. what names the tensor ("input 1", "attribute dtype"). */
sl_status sl__check_dtype(const char *what, sl_dtype dt, unsigned allowed);
/* SL_EINVAL unless inputs [0, n) share one dtype. */
sl_status sl__check_same_dtype(int n, const sl__meta *in);
/* SL_EINVAL unless min <= n_in <= max. */
sl_status sl__check_arity(int n_in, int min, int max);
/* A possibly negative axis (-1 = last) of an ndim-dim tensor, checked:
 * SL_EINVAL "axis 3 out of range for a 2-dim input". what names the
 * attribute in the message. */
sl_status sl__axis_norm(const char *what, int64_t axis, int ndim, int *out);
/* A shape from an INTS attribute (an empty list is a scalar): SL_EINVAL
 * when absent, not a list, or an extent is negative. */
sl_status sl__attr_shape(const sl__attrs *at, const char *name, sl_shape *out);
/* A number attribute given as FLOAT or INT: false (and *out untouched)
 * when absent or a list. */
bool sl__attr_number(const sl__attrs *at, const char *name, double *out);
/* A dtype from an INT attribute (dflt when absent), checked against a set. */
sl_status sl__attr_dtype(const sl__attrs *at, const char *name, sl_dtype dflt,
                         unsigned allowed, sl_dtype *out);

/* numpy broadcasting: trailing alignment, extent-1 or missing dims repeat.
 * SL_EINVAL "shapes [2,3] and [4] do not broadcast (...)". */
sl_status sl__broadcast_shapes(const sl_shape *a, const sl_shape *b,
                               sl_shape *out);
/* Whether `from` broadcasts to exactly `to` (numpy rules, one way). */
bool sl__broadcasts_to(const sl_shape *from, const sl_shape *to);

/* ---- signature lists ----------------------------------------------------- */

/* Collects signatures for an op's `signatures` callback: drops duplicates
 * and anything past max (the caller returns l.n, never more than max). */
typedef struct sl__sig_list {
  sl__sbp_sig *sigs;
  int n, max;
  int n_in, n_out; /* entries compared when looking for duplicates */
  sl__sbp_sig scratch;
} sl__sig_list;

void sl__sig_list_init(sl__sig_list *l, sl__sbp_sig *sigs, int max, int n_in,
                       int n_out);
/* A fresh all-B signature to fill in; sl__sig_commit keeps it unless it
 * duplicates one already listed or is all-B (implied). */
sl__sbp_sig *sl__sig_begin(sl__sig_list *l);
void sl__sig_commit(sl__sig_list *l);

static inline sl_sbp sl__S(int axis) { return sl_sbp_split(axis); }
static inline sl_sbp sl__B(void) { return sl_sbp_broadcast(); }
static inline sl_sbp sl__P(void) { return sl_sbp_partial(SL_REDUCE_SUM); }
static inline sl_sbp sl__Pmax(void) { return sl_sbp_partial(SL_REDUCE_MAX); }

/* ---- broadcasting iteration ---------------------------------------------- */

#define SL__ITER_MAX_OPS 4

/* Iteration over a row-major output shape with each operand read through
 * broadcasting strides (0 on repeated dims). Adjacent dims that stay
 * contiguous for every operand are merged, so a same-shape operation is one
 * row and a bias add is rows of the bias length: the inner loops then see
 * unit or zero strides and vectorise. */
typedef struct sl__iter {
  int nops; /* operand 0 is the output */
  int ndim; /* >= 1 after merging */
  int64_t dims[SL_MAX_DIMS];
  int64_t strides[SL__ITER_MAX_OPS][SL_MAX_DIMS]; /* in elements */
  int64_t rows;                                   /* product of dims but last */
  int64_t len;                                    /* the last dim */
  bool empty;                                     /* some extent is 0 */
} sl__iter;

/* out: the output's shape (contiguous); in[k]: operand k+1's shape, which
 * must broadcast to out (numpy trailing alignment). */
void sl__iter_init(sl__iter *it, const sl_shape *out, int n_in,
                   const sl_shape *const *in);
/* Operands with explicit strides (in elements) over the dims of `out`:
 * transposes and strided views. */
void sl__iter_init_strided(sl__iter *it, const sl_shape *out, int n_in,
                           const int64_t *const *in_strides);
/* A row's position: its index along each dim but the last, and each
 * operand's element offset. Rows are visited by stepping it (sl__iter_next)
 * rather than by dividing a row number per dim, which for rows of a few
 * elements (a transpose of heads of 16) cost more than the copy itself. */
typedef struct sl__iter_pos {
  int64_t idx[SL_MAX_DIMS];
  int64_t off[SL__ITER_MAX_OPS];
} sl__iter_pos;

/* p at row r (0 <= r < rows). */
void sl__iter_seek(const sl__iter *it, int64_t r, sl__iter_pos *p);
/* p at the next row (past the last: back at row 0). */
static inline void sl__iter_next(const sl__iter *it, sl__iter_pos *p) {
  for (int d = it->ndim - 2; d >= 0; d--) {
    if (++p->idx[d] < it->dims[d]) {
      for (int k = 0; k < it->nops; k++)
        p->off[k] += it->strides[k][d];
      return;
    }
    p->idx[d] = 0;
    for (int k = 0; k < it->nops; k++)
      p->off[k] -= it->strides[k][d] * (it->dims[d] - 1);
  }
}

/* ---- data movement --------------------------------------------------------
 */

/* dst (contiguous, shape dims) = the strided view of src with element
 * strides sstride; es bytes per element. Handles empty shapes. */
void sl__copy_strided(size_t es, int ndim, const int64_t *dims, void *dst,
                      const void *src, const int64_t *sstride);

/* ---- global positions of a local shard ----------------------------------- */

/* For row r of a local shard (rows over every dim but the last, row-major)
 * placed at `slice` inside a tensor of shape `global`: the global flat index
 * of the row's first element, and optionally (pos != NULL) its global
 * coordinates. A 0-dim shard has one row of one element at index 0. */
int64_t sl__slice_row_global(const sl_slice *slice, const sl_shape *global,
                             int64_t r, int64_t *pos);
/* Rows and row length of a local shape (0-dim: 1 and 1). */
int64_t sl__shape_rows(const sl_shape *s);
int64_t sl__shape_len(const sl_shape *s);

/* ---- counter-based random numbers ---------------------------------------- */

/* The stream key for (seed, step): values are sl__rand_bits(key, global
 * flat index), so they depend on nothing but the seed, the step and the
 * element's position in the global tensor (never on placement or SBP). */
static inline uint64_t sl__rand_key(int64_t seed, int64_t step) {
  return sl__mix64(sl__mix64((uint64_t)seed) ^ (uint64_t)step);
}
/* Element idx's 64 random bits: SplitMix64's idx-th output from state key. */
static inline SL__HD uint64_t sl__rand_bits(uint64_t key, uint64_t idx) {
  return sl__mix64(key + idx * 0x9e3779b97f4a7c15ull);
}
/* Uniform in [0, 1) from the top 24 bits (every value an exact float). */
static inline SL__HD float sl__rand_unit_f32(uint64_t bits) {
  return (float)(bits >> 40) * 0x1.0p-24f;
}
/* Uniform in [0, 1) from the top 53 bits. */
static inline SL__HD double sl__rand_unit_f64(uint64_t bits) {
  return (double)(bits >> 11) * 0x1.0p-53;
}

/* Natural log of x, for x a positive normal double (no zero, subnormal,
 * infinity or NaN), branch-free so that loops calling it vectorise, and
 * the same bits on the host and a GPU. x = m 2^e with m in [sqrt(1/2),
 * sqrt(2)) (the bias added to x's bits moves that range's mantissas to
 * exponent 0), ln x = e ln2 + 2 atanh(s), s = (m - 1) / (m + 1), |s| <=
 * 0.1716: the odd series of atanh through s^21 (truncation below 3e-17
 * relative), ln2 in two parts, the first exact times any e. */
static inline SL__HD double sl__log_pos(double x) {
  union {
    double d;
    uint64_t u;
  } b, m;
  b.d = x;
  uint64_t t = b.u + 0x00095f619980c433ull;
  double e = (double)((int64_t)(t >> 52) - 1023);
  m.u = (t & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull;
  double s = (m.d - 1.0) / (m.d + 1.0), z = s * s;
  double p = 1.0 / 21;
  p = p * z + 1.0 / 19;
  p = p * z + 1.0 / 17;
  p = p * z + 1.0 / 15;
  p = p * z + 1.0 / 13;
  p = p * z + 1.0 / 11;
  p = p * z + 1.0 / 9;
  p = p * z + 1.0 / 7;
  p = p * z + 1.0 / 5;
  p = p * z + 1.0 / 3;
  p = p * z + 1.0;
  return e * 6.93147180369123816490e-01 +
         (e * 1.90821492927058770002e-10 + 2.0 * s * p);
}

/* cos(2 pi u) for 0 <= u < 2^49, branch-free, the same bits on the host
 * and a GPU: q = round(4u) (the 1.5 * 2^52 trick, which also leaves q mod
 * 4 in the low bits), x = 2 pi (u - q/4) in [-pi/4, pi/4] (u - q/4 is
 * exact for the multiples of 2^-53 the random ops pass), then cos or sin
 * of x by Taylor polynomials through x^16 and x^17 (truncation below
 * 1e-17), with the quadrant's sign. */
static inline SL__HD double sl__cos_2pi(double u) {
  union {
    double d;
    uint64_t u;
  } r;
  r.d = 4.0 * u + 0x1.8p52;
  double q = r.d - 0x1.8p52;
  uint64_t quad = r.u & 3;
  double x = (u - 0.25 * q) * 6.283185307179586, z = x * x;
  double c = 1.0 / 20922789888000.0;
  c = c * z - 1.0 / 87178291200.0;
  c = c * z + 1.0 / 479001600.0;
  c = c * z - 1.0 / 3628800.0;
  c = c * z + 1.0 / 40320.0;
  c = c * z - 1.0 / 720.0;
  c = c * z + 1.0 / 24.0;
  c = c * z - 0.5;
  c = c * z + 1.0;
  double n = 1.0 / 355687428096000.0;
  n = n * z - 1.0 / 1307674368000.0;
  n = n * z + 1.0 / 6227020800.0;
  n = n * z - 1.0 / 39916800.0;
  n = n * z + 1.0 / 362880.0;
  n = n * z - 1.0 / 5040.0;
  n = n * z + 1.0 / 120.0;
  n = n * z - 1.0 / 6.0;
  n = n * z + 1.0;
  n = n * x;
  /* quadrant 0: cos x, 1: -sin x, 2: -cos x, 3: sin x */
  double v = (quad & 1) ? n : c;
  return ((quad + 1) & 2) ? -v : v;
}

/* Element idx of a standard normal stream: Box-Muller on two independent
 * draws (counters 2 idx and 2 idx + 1), in double so f32 and f64 outputs
 * see the same numbers, and the CPU and CUDA kernels the same bits. */
static inline SL__HD double sl__normal_at(uint64_t key, uint64_t idx) {
  uint64_t b1 = sl__rand_bits(key, 2 * idx),
           b2 = sl__rand_bits(key, 2 * idx + 1);
  double u1 = ((double)(b1 >> 11) + 1.0) * 0x1.0p-53; /* (0, 1]: log finite */
  return sqrt(-2.0 * sl__log_pos(u1)) * sl__cos_2pi(sl__rand_unit_f64(b2));
}

/* ---- vector code: one instance per instruction set -------------------------
 */

/* The library is built for baseline x86-64 (16-byte SSE vectors), so each
 * hot loop is compiled three times, for SSE, AVX2 and AVX-512 (target
 * attributes, not -m flags, so the library still runs on any x86-64), and a
 * dispatcher calls the widest one the CPU and OS support. The instances
 * give identical bits: ISO C mode forbids contracting a*b+c into FMA (and
 * neither target enables FMA), and nothing is reassociated. Loops need
 * -fno-trapping-math to vectorise their selects (kernels/CMakeLists.txt).
 * Elsewhere the three instances are the same portable code. */
typedef enum sl__isa {
  SL__ISA_SSE = 0, /* baseline (any target) */
  SL__ISA_AVX2 = 1,
  SL__ISA_AVX512 = 2,
} sl__isa;

/* The instance dispatchers call: the widest this CPU runs (read once), or
 * the one sl__isa_force chose. */
sl__isa sl__isa_get(void);
/* For tests: later calls use instance isa (lowered to what the CPU runs);
 * -1 returns to the default. Returns the instance now in force. */
sl__isa sl__isa_force(int isa);
/* "sse", "avx2", "avx512". */
const char *sl__isa_name(sl__isa isa);

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define SL__ATTR_AVX2 __attribute__((target("avx2")))
#define SL__ATTR_AVX512                                                        \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))
#else
#define SL__ATTR_AVX2
#define SL__ATTR_AVX512
#endif

/* Defines `static void NAME PARAMS` from the body (the variadic argument)
 * three times, NAME_sse, NAME_avx2, NAME_avx512, and a dispatcher NAME that
 * calls one of them with ARGS. */
#define SL__MULTIVERSION(NAME, PARAMS, ARGS, ...)                              \
  static void NAME##_sse PARAMS __VA_ARGS__                                    \
      SL__ATTR_AVX2 static void NAME##_avx2 PARAMS __VA_ARGS__                 \
          SL__ATTR_AVX512 static void NAME##_avx512 PARAMS                     \
              __VA_ARGS__ static void NAME PARAMS {                            \
    switch (sl__isa_get()) {                                                   \
    case SL__ISA_AVX512: NAME##_avx512 ARGS; return;                           \
    case SL__ISA_AVX2: NAME##_avx2 ARGS; return;                               \
    default: NAME##_sse ARGS; return;                                          \
    }                                                                          \
  }

/* ---- 16-bit floats (half.c) ------------------------------------------------
 * n elements converted as tensor/dtype_bits.h does, bit for bit, with the
 * CPU's instructions where it has them. */
void sl__f16_widen(float *o, const uint16_t *h, int64_t n);
void sl__f16_narrow(uint16_t *o, const float *f, int64_t n);
void sl__bf16_widen(float *o, const uint16_t *h, int64_t n);
void sl__bf16_narrow(uint16_t *o, const float *f, int64_t n);
/* f32 to f16 or bf16, or back (from, to: one of those pairs), cut over
 * the device's team (NULL: the caller alone). */
void sl__half_convert(sl__team *team, sl_dtype from, sl_dtype to, void *o,
                      const void *x, int64_t n);

/* ---- fast math ------------------------------------------------------------
 */

/* exp(x) for float without libm calls, branch-free so loops calling it
 * vectorise. Cody-Waite reduction x = n ln2 + r (ln2 in two parts, the
 * first exact in float), a degree-7 Taylor polynomial for e^r on
 * |r| <= ln2/2 (truncation error below 6e-9), and 2^n applied as two
 * powers of two built in the exponent bits so that n from -150 to 128
 * (subnormal results, results near FLT_MAX) needs no special case. The
 * rounding of x/ln2 uses the 1.5 * 2^23 trick (round to nearest under the
 * default mode), which needs ISO float semantics: no -ffast-math. Overflow
 * gives +inf, underflow 0, NaN stays NaN. Relative error about 2 ulp. */
static inline SL__HD float sl__expf(float x) {
  /* Separate selects, each comparison always evaluated: a nested ?: would
   * evaluate the second comparison conditionally, which GCC will not
   * if-convert under -ftrapping-math, leaving a branchy scalar loop. */
  float xc = x > 88.7229f ? 88.7229f : x;
  xc = xc < -104.f ? -104.f : xc;
  xc = xc == xc ? xc : 0.f; /* NaN: keep the int conversion below defined */
  float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.f / 5040.f;
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  int32_t ni = (int32_t)n, h = ni / 2;
  union {
    uint32_t u;
    float f;
  } s1, s2, inf;
  s1.u = (uint32_t)(h + 127) << 23;
  s2.u = (uint32_t)(ni - h + 127) << 23;
  inf.u = 0x7f800000u; /* +inf, the same on host and device */
  float y = p * s1.f * s2.f;
  y = x > 88.72284f ? inf.f : y;
  y = x < -103.98f ? 0.f : y;
  return x != x ? x : y;
}

/* tanh without libm: 1 - 2 / (e^{2|x|} + 1) with the sign restored, and an
 * odd Taylor polynomial below |x| = 0.1 where that difference would lose
 * relative precision. Error about 1e-7 absolute, a few ulp relative. */
static inline SL__HD float sl__tanhf(float x) {
  float a = x < 0 ? -x : x;
  float t = 1.f - 2.f / (sl__expf(2.f * a) + 1.f);
  float a2 = a * a;
  float small =
      a * (1.f + a2 * (-1.f / 3.f + a2 * (2.f / 15.f + a2 * (-17.f / 315.f))));
  t = a < 0.1f ? small : t;
  return x < 0 ? -t : t;
}

/* The logistic function through sl__expf: 1 / (1 + e^-x). */
static inline SL__HD float sl__sigmoidf(float x) {
  return 1.f / (1.f + sl__expf(-x));
}

/* GPT-2's gelu, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its
 * derivative (d/dx of the same). For float it is computed as x s with
 * s = sigmoid(2u) = 1 / (1 + e^-2u), u the tanh's argument, since
 * 0.5 (1 + tanh u) = sigmoid(2u): one sl__expf and one division, no tanh
 * (its small-argument branch and sign handling cost as much again), and
 * no cancellation in 1 + tanh u for negative x. Double uses libm's tanh
 * (CUDA's on a GPU, whose last bit may differ). */
#define SL__GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define SL__GELU_K 0.044715

static inline SL__HD float sl__geluf(float x) {
  float u2 = (float)(2 * SL__GELU_C) * x * (1.f + (float)SL__GELU_K * x * x);
  return x / (1.f + sl__expf(-u2));
}

static inline SL__HD double sl__gelu(double x) {
  return 0.5 * x * (1.0 + tanh(SL__GELU_C * (x + SL__GELU_K * x * x * x)));
}

/* d/dx x s(2u) = s + 2 x s (1 - s) u', the same as the tanh form's
 * 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = 2s - 1. */
static inline SL__HD float sl__gelu_gradf(float x) {
  float x2 = x * x;
  float u2 = (float)(2 * SL__GELU_C) * x * (1.f + (float)SL__GELU_K * x2);
  /* e s is 1 - s without the cancellation near s = 1. Where -2u > 80 the
   * gradient is below 1e-30: 0, rather than e = inf making e s NaN. */
  float e = sl__expf(-u2), s = 1.f / (1.f + e);
  float du = (float)SL__GELU_C * (1.f + 3.f * (float)SL__GELU_K * x2);
  float g = s + 2.f * x * s * (e * s) * du;
  return -u2 > 80.f ? 0.f : g;
}

static inline SL__HD double sl__gelu_grad(double x) {
  double x2 = x * x;
  double t = tanh(SL__GELU_C * x * (1.0 + SL__GELU_K * x2));
  double du = SL__GELU_C * (1.0 + 3.0 * SL__GELU_K * x2);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

/* exp(x) for x <= 88 (the ops call it on x - max <= 0): 2^n * e^r with
 * n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 split in a
 * part exact in n * hi and a rest), e^r by its Taylor series to degree 7
 * (truncation below 1e-8 relative on that interval, about 1 ulp of float
 * rounding). Only +, *, compares and integer bit operations, so it
 * vectorises and gives the same bits in vector and scalar code. Returns 0
 * below -87.33 (where 2^n leaves the normal range) and NaN for NaN. */
static inline SL__HD float sl__dense_exp(float x) {
  const float lo = -87.33654f, hi = 88.0f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  /* Round to nearest by adding 1.5 * 2^23: the integer lands in the low
   * mantissa bits. */
  const float magic = 12582912.0f;
  float t = xc * 1.44269504088896341f + magic;
  uint32_t tb; /* unsigned: a NaN's bits wrap instead of overflowing */
  memcpy(&tb, &t, sizeof tb);
  uint32_t n = tb - 0x4B400000u;
  float fn = t - magic;
  float r = (xc - fn * 0.693145751953125f) - fn * 1.428606765330187e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t sb = (n + 127u) << 23;
  float s;
  memcpy(&s, &sb, sizeof s);
  float y = p * s;
  return x < lo ? 0.0f : y;
}

#endif
