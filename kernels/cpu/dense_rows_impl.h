/* The dense family's vector loops, written once for a vector of DR_W floats
 * (4, 8 or 16) and instantiated per instruction set: dense_rows.c includes
 * it for 16-byte vectors (any SIMD target), dense_rows_x86.c for AVX2 and
 * AVX-512 under target attributes. Before including, define
 *   DR_W        floats per vector
 *   DR_ATTR     function attributes (a target attribute, or nothing)
 *   DR_FN(name) the instance's name for `name` (adds a suffix)
 *   DR_NAME     the table's name, DR_USABLE its usable() predicate
 * The result is a static const sl__dense_rows DR_FN(table).
 *
 * Every instance gives the same bits (see dense_util.h): a row reduction
 * keeps 16 lanes (lane l sums elements l, l + 16, ... in order) whatever
 * DR_W is, the lanes are combined by one scalar tree, and elementwise work
 * is the same IEEE operations in the same order (no FP contraction: these
 * files are ISO C, and no target enables FMA). */
#include "cpu/dense_util.h"

#if defined(__GNUC__) && !defined(__clang__)
/* Vectors travel only between static functions of one instance. */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define DR_Q (SL__DENSE_LANES / DR_W) /* vectors per 16-lane block */

typedef float DR_FN(vf) __attribute__((vector_size(DR_W * 4)));
typedef int32_t DR_FN(vi) __attribute__((vector_size(DR_W * 4)));
typedef uint32_t DR_FN(vu) __attribute__((vector_size(DR_W * 4)));
#define VF DR_FN(vf)
#define VI DR_FN(vi)

DR_ATTR static inline VF DR_FN(load)(const float *p) {
  VF v;
  memcpy(&v, p, sizeof v);
  return v;
}
DR_ATTR static inline void DR_FN(store)(float *p, VF v) {
  memcpy(p, &v, sizeof v);
}
DR_ATTR static inline VF DR_FN(splat)(float x) { return (VF){0} + x; }
DR_ATTR static inline VF DR_FN(select)(VI m, VF a, VF b) {
  return (VF)((m & (VI)a) | (~m & (VI)b));
}

/* sl__dense_exp, DR_W lanes at a time: the same operations. */
DR_ATTR static inline VF DR_FN(exp)(VF x) {
  const float lo = -87.33654f, hi = 88.0f, magic = 12582912.0f;
  VI below = x < lo;
  VF xc = DR_FN(select)(below, DR_FN(splat)(lo), x);
  xc = DR_FN(select)(xc > hi, DR_FN(splat)(hi), xc);
  VF t = xc * 1.44269504088896341f + magic;
  DR_FN(vu) n = (DR_FN(vu))t - 0x4B400000u;
  VF fn = t - magic;
  VF r = (xc - fn * 0.693145751953125f) - fn * 1.428606765330187e-6f;
  VF p = DR_FN(splat)(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  VF y = p * (VF)((n + 127u) << 23);
  return DR_FN(select)(below, DR_FN(splat)(0.0f), y);
}

/* A 16-lane block: DR_Q vectors. Tails go through a padded copy. */
typedef struct DR_FN(blk) {
  VF v[DR_Q];
} DR_FN(blk);
#define BLK DR_FN(blk)

DR_ATTR static inline BLK DR_FN(bload)(const float *p) {
  BLK b;
  for (int q = 0; q < DR_Q; q++)
    b.v[q] = DR_FN(load)(p + q * DR_W);
  return b;
}
/* The first n (< 16) of p, the other lanes `pad`. */
DR_ATTR static inline BLK DR_FN(bload_tail)(const float *p, int64_t n,
                                            float pad) {
  float t[SL__DENSE_LANES];
  for (int l = 0; l < SL__DENSE_LANES; l++)
    t[l] = l < n ? p[l] : pad;
  return DR_FN(bload)(t);
}
DR_ATTR static inline BLK DR_FN(bsplat)(float x) {
  BLK b;
  for (int q = 0; q < DR_Q; q++)
    b.v[q] = DR_FN(splat)(x);
  return b;
}

/* The 16 lanes in order, combined by the scalar tree. */
DR_ATTR static inline float DR_FN(bsum)(BLK b) {
  float t[SL__DENSE_LANES];
  for (int q = 0; q < DR_Q; q++)
    DR_FN(store)(t + q * DR_W, b.v[q]);
  return sl__dense_lanes_sum(t);
}
DR_ATTR static inline float DR_FN(bmax)(BLK b) {
  float t[SL__DENSE_LANES];
  for (int q = 0; q < DR_Q; q++)
    DR_FN(store)(t + q * DR_W, b.v[q]);
  return sl__dense_lanes_max(t);
}

/* ---- rows --------------------------------------------------------------- */

/* A max is exact in any order, so four vectors run side by side (short
 * dependency chains); the lanes only matter for sums. */
DR_ATTR static inline VF DR_FN(vmax)(VF a, VF b) {
  return DR_FN(select)(b > a, b, a);
}

DR_ATTR static float DR_FN(row_max)(const float *x, int64_t n) {
  VF acc[4];
  for (int q = 0; q < 4; q++)
    acc[q] = DR_FN(splat)(x[0]);
  int64_t j = 0;
  for (; j + 4 * DR_W <= n; j += 4 * DR_W)
    for (int q = 0; q < 4; q++)
      acc[q] = DR_FN(vmax)(acc[q], DR_FN(load)(x + j + q * DR_W));
  for (; j + DR_W <= n; j += DR_W)
    acc[0] = DR_FN(vmax)(acc[0], DR_FN(load)(x + j));
  float t[DR_W];
  for (int l = 0; l < DR_W; l++)
    t[l] = j + l < n ? x[j + l] : x[0];
  acc[1] = DR_FN(vmax)(acc[1], DR_FN(load)(t));
  BLK b;
  for (int q = 0; q < DR_Q; q++)
    b.v[q] = DR_FN(splat)(x[0]);
  for (int q = 0; q < 4; q++)
    b.v[0] = DR_FN(vmax)(b.v[0], acc[q]);
  return DR_FN(bmax)(b);
}

DR_ATTR static float DR_FN(row_expsum)(const float *x, int64_t n, float m,
                                       float *y) {
  BLK acc = DR_FN(bsplat)(0.0f);
  VF vm = DR_FN(splat)(m);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES)
    for (int q = 0; q < DR_Q; q++) {
      VF e = DR_FN(exp)(DR_FN(load)(x + j + q * DR_W) - vm);
      if (y) DR_FN(store)(y + j + q * DR_W, e);
      acc.v[q] += e;
    }
  if (j < n) {
    /* -inf pads: exp(-inf - m) = 0. */
    float t[SL__DENSE_LANES];
    BLK v = DR_FN(bload_tail)(x + j, n - j, -INFINITY);
    for (int q = 0; q < DR_Q; q++) {
      VF e = DR_FN(exp)(v.v[q] - vm);
      DR_FN(store)(t + q * DR_W, e);
      acc.v[q] += e;
    }
    if (y)
      for (int64_t l = 0; l < n - j; l++)
        y[j + l] = t[l];
  }
  return DR_FN(bsum)(acc);
}

DR_ATTR static float DR_FN(row_sum)(const float *x, int64_t n) {
  BLK acc = DR_FN(bsplat)(0.0f), v;
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES) {
    v = DR_FN(bload)(x + j);
    for (int q = 0; q < DR_Q; q++)
      acc.v[q] += v.v[q];
  }
  if (j < n) {
    v = DR_FN(bload_tail)(x + j, n - j, 0.0f);
    for (int q = 0; q < DR_Q; q++)
      acc.v[q] += v.v[q];
  }
  return DR_FN(bsum)(acc);
}

DR_ATTR static float DR_FN(row_dot)(const float *x, const float *y, int64_t n) {
  BLK acc = DR_FN(bsplat)(0.0f), a, b;
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES) {
    a = DR_FN(bload)(x + j);
    b = DR_FN(bload)(y + j);
    for (int q = 0; q < DR_Q; q++)
      acc.v[q] += a.v[q] * b.v[q];
  }
  if (j < n) {
    a = DR_FN(bload_tail)(x + j, n - j, 0.0f);
    b = DR_FN(bload_tail)(y + j, n - j, 0.0f);
    for (int q = 0; q < DR_Q; q++)
      acc.v[q] += a.v[q] * b.v[q];
  }
  return DR_FN(bsum)(acc);
}

/* sum (x - mu)^2; the tail pads with mu, adding 0. */
DR_ATTR static float DR_FN(row_sqdev)(const float *x, int64_t n, float mu) {
  BLK acc = DR_FN(bsplat)(0.0f), v;
  VF vm = DR_FN(splat)(mu);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES) {
    v = DR_FN(bload)(x + j);
    for (int q = 0; q < DR_Q; q++) {
      VF c = v.v[q] - vm;
      acc.v[q] += c * c;
    }
  }
  if (j < n) {
    v = DR_FN(bload_tail)(x + j, n - j, mu);
    for (int q = 0; q < DR_Q; q++) {
      VF c = v.v[q] - vm;
      acc.v[q] += c * c;
    }
  }
  return DR_FN(bsum)(acc);
}

/* *sg = sum g, *sgx = sum g * xhat with g = gamma * dy and xhat = (x - mu)
 * * rs; zero pads in gamma and dy give g = 0 and x pads of mu xhat = 0. */
DR_ATTR static void DR_FN(row_ln_grad_sums)(const float *gamma, const float *dy,
                                            const float *x, float mu, float rs,
                                            int64_t n, float *sg, float *sgx) {
  BLK a = DR_FN(bsplat)(0.0f), b = DR_FN(bsplat)(0.0f), vg, vd, vx;
  VF vm = DR_FN(splat)(mu), vr = DR_FN(splat)(rs);
  int64_t j = 0;
  for (; j + SL__DENSE_LANES <= n; j += SL__DENSE_LANES) {
    vg = DR_FN(bload)(gamma + j);
    vd = DR_FN(bload)(dy + j);
    vx = DR_FN(bload)(x + j);
    for (int q = 0; q < DR_Q; q++) {
      VF g = vg.v[q] * vd.v[q];
      a.v[q] += g;
      b.v[q] += g * ((vx.v[q] - vm) * vr);
    }
  }
  if (j < n) {
    vg = DR_FN(bload_tail)(gamma + j, n - j, 0.0f);
    vd = DR_FN(bload_tail)(dy + j, n - j, 0.0f);
    vx = DR_FN(bload_tail)(x + j, n - j, mu);
    for (int q = 0; q < DR_Q; q++) {
      VF g = vg.v[q] * vd.v[q];
      a.v[q] += g;
      b.v[q] += g * ((vx.v[q] - vm) * vr);
    }
  }
  *sg = DR_FN(bsum)(a);
  *sgx = DR_FN(bsum)(b);
}

/* ---- elementwise (any position gives the same bits) ---------------------- */

/* e = exp(x[j] - m[j]); y[j] = e when y != NULL; acc[j] += e; j < w. */
DR_ATTR static void DR_FN(exp_cols)(const float *x, const float *m, float *y,
                                    float *acc, int64_t w) {
  int64_t j = 0;
  for (; j + DR_W <= w; j += DR_W) {
    VF e = DR_FN(exp)(DR_FN(load)(x + j) - DR_FN(load)(m + j));
    if (y) DR_FN(store)(y + j, e);
    DR_FN(store)(acc + j, DR_FN(load)(acc + j) + e);
  }
  for (; j < w; j++) {
    float e = sl__dense_exp(x[j] - m[j]);
    if (y) y[j] = e;
    acc[j] += e;
  }
}

/* y[j] = (x[j] - a) * s - b, j < n (y may be x). */
DR_ATTR static void DR_FN(row_affine)(const float *x, float *y, int64_t n,
                                      float a, float s, float b) {
  int64_t j = 0;
  VF va = DR_FN(splat)(a), vs = DR_FN(splat)(s), vb = DR_FN(splat)(b);
  for (; j + DR_W <= n; j += DR_W)
    DR_FN(store)(y + j, (DR_FN(load)(x + j) - va) * vs - vb);
  for (; j < n; j++)
    y[j] = (x[j] - a) * s - b;
}

/* dx[j] = dy[j] - exp(y[j]) * s[j * s_step] (s_step 0: one s), j < n. */
DR_ATTR static void DR_FN(exp_mul_sub)(const float *dy, const float *y,
                                       const float *s, int64_t s_step,
                                       float *dx, int64_t n) {
  int64_t j = 0;
  for (; j + DR_W <= n; j += DR_W) {
    VF vs = s_step ? DR_FN(load)(s + j) : DR_FN(splat)(s[0]);
    DR_FN(store)
    (dx + j, DR_FN(load)(dy + j) - DR_FN(exp)(DR_FN(load)(y + j)) * vs);
  }
  for (; j < n; j++)
    dx[j] = dy[j] - sl__dense_exp(y[j]) * s[j * s_step];
}

/* wn[j] = w[j] - lr g[j], j < n (wn may be w): sgd_update without momentum
 * or weight decay, one pass over memory instead of sgd_chunk's copy. */
DR_ATTR static void DR_FN(sgd_plain)(float lr, const float *w, const float *g,
                                     float *wn, int64_t n) {
  int64_t j = 0;
  VF vl = DR_FN(splat)(lr);
  for (; j + DR_W <= n; j += DR_W)
    DR_FN(store)(wn + j, DR_FN(load)(w + j) - vl * DR_FN(load)(g + j));
  for (; j < n; j++)
    wn[j] = w[j] - lr * g[j];
}

/* ---- plain loops the compiler vectorises for the instance's target ------ */

DR_ATTR static void DR_FN(ln_grad_row)(const float *dy, const float *x,
                                       const float *gamma, float mu, float rs,
                                       float a, float b, float *restrict dx,
                                       double *restrict dg, double *restrict db,
                                       int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    float xh = (x[j] - mu) * rs, e = dy[j];
    dx[j] = rs * ((gamma[j] * e - a) - xh * b);
    dg[j] += (double)(e * xh);
    db[j] += (double)e;
  }
}

/* Every load unconditional, every choice a select on a flag: one
 * branch-free loop serves every variant. */
DR_ATTR static void DR_FN(sgd_chunk)(const sl__dense_sgd *c, const float *w,
                                     const float *g, const float *m,
                                     float *restrict wl, float *restrict ml,
                                     int64_t n) {
  float lr = c->lr, mom = c->mom, damp1 = c->damp1, wd = c->wd;
  bool has_wd = c->has_wd, first = c->first, nesterov = c->nesterov,
       use_mom = c->use_mom;
  for (int64_t i = 0; i < n; i++) {
    float wi = w[i], gi = g[i], mi = m[i];
    float d = has_wd ? gi + wd * wi : gi;
    float later = mi * mom + damp1 * d;
    float buf = first ? d : later;
    float nest = d + mom * buf;
    float dm = nesterov ? nest : buf;
    d = use_mom ? dm : d;
    ml[i] = buf;
    wl[i] = wi - lr * d;
  }
}

DR_ATTR static void DR_FN(adam_chunk)(const sl__dense_adam *c, const float *w,
                                      const float *g, const float *m,
                                      const float *v, float *restrict wl,
                                      float *restrict ml, float *restrict vl,
                                      int64_t n) {
  float decay = c->decay, l2 = c->l2, one_b1 = c->one_b1, b2 = c->b2,
        one_b2 = c->one_b2, bc2_sqrt = c->bc2_sqrt, eps = c->eps,
        step_size = c->step_size;
  bool has_decay = c->has_decay, has_l2 = c->has_l2;
  for (int64_t i = 0; i < n; i++) {
    float w0 = w[i], gi = g[i], m0 = m[i];
    float wi = has_decay ? w0 * decay : w0;
    float d = has_l2 ? gi + l2 * w0 : gi;
    float mi = m0 + one_b1 * (d - m0);
    float vi = v[i] * b2 + (one_b2 * d) * d; /* addcmul's order */
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    ml[i] = mi;
    vl[i] = vi;
    wl[i] = wi - step_size * (mi / denom);
  }
}

static const sl__dense_rows DR_FN(table) = {
    .name = DR_NAME,
    .usable = DR_USABLE,
    .row_max = DR_FN(row_max),
    .row_expsum = DR_FN(row_expsum),
    .row_sum = DR_FN(row_sum),
    .row_dot = DR_FN(row_dot),
    .row_sqdev = DR_FN(row_sqdev),
    .row_ln_grad_sums = DR_FN(row_ln_grad_sums),
    .exp_cols = DR_FN(exp_cols),
    .exp_mul_sub = DR_FN(exp_mul_sub),
    .row_affine = DR_FN(row_affine),
    .ln_grad_row = DR_FN(ln_grad_row),
    .sgd_chunk = DR_FN(sgd_chunk),
    .sgd_plain = DR_FN(sgd_plain),
    .adam_chunk = DR_FN(adam_chunk),
};

#undef DR_Q
#undef VF
#undef VI
#undef BLK
