/* Typed element operations for the reference executor: identity fills,
 * elementwise reductions in the tensor's own dtype, and box moves between
 * row-major buffers. */
#include <math.h>
#include <string.h>

#include "sbp_int.h"

void sl__elem_fill_identity(sl_dtype dt, sl_reduce_op op, void *dst,
                            int64_t n) {
  size_t es = sl_dtype_size(dt);
  if (n <= 0 || es == 0) return;
  if (op == SL_REDUCE_SUM) {
    memset(dst, 0, (size_t)n * es);
    return;
  }
  bool hi = op == SL_REDUCE_MIN; /* min's identity is the highest value */
  union {
    float f32;
    double f64;
    uint16_t u16;
    int8_t i8;
    int32_t i32;
    int64_t i64;
    uint8_t u8;
  } v;
  switch (dt) {
  case SL_DTYPE_F32: v.f32 = hi ? INFINITY : -INFINITY; break;
  case SL_DTYPE_F64: v.f64 = hi ? INFINITY : -INFINITY; break;
  case SL_DTYPE_F16: v.u16 = hi ? 0x7c00 : 0xfc00; break;
  case SL_DTYPE_BF16: v.u16 = hi ? 0x7f80 : 0xff80; break;
  case SL_DTYPE_I8: v.i8 = hi ? INT8_MAX : INT8_MIN; break;
  case SL_DTYPE_I32: v.i32 = hi ? INT32_MAX : INT32_MIN; break;
  case SL_DTYPE_I64: v.i64 = hi ? INT64_MAX : INT64_MIN; break;
  case SL_DTYPE_U8: v.u8 = hi ? UINT8_MAX : 0; break;
  case SL_DTYPE_BOOL: v.u8 = hi ? 1 : 0; break;
  }
  unsigned char *d = dst;
  for (int64_t k = 0; k < n; k++)
    memcpy(d + (size_t)k * es, &v, es);
}

/* d may be a (in place) but neither may overlap b otherwise. */
#define REDUCE_LOOP(T, SUM)                                                    \
  do {                                                                         \
    T *d = dst;                                                                \
    const T *x = a, *restrict y = b;                                           \
    switch (op) {                                                              \
    case SL_REDUCE_SUM:                                                        \
      for (int64_t k = 0; k < n; k++)                                          \
        d[k] = SUM(x[k], y[k]);                                                \
      break;                                                                   \
    case SL_REDUCE_MAX:                                                        \
      for (int64_t k = 0; k < n; k++)                                          \
        d[k] = y[k] > x[k] ? y[k] : x[k];                                      \
      break;                                                                   \
    case SL_REDUCE_MIN:                                                        \
      for (int64_t k = 0; k < n; k++)                                          \
        d[k] = y[k] < x[k] ? y[k] : x[k];                                      \
      break;                                                                   \
    }                                                                          \
  } while (0)

/* Integer sums wrap like the hardware's (no signed-overflow UB). */
#define ADD(a, b) ((a) + (b))
#define ADD_I8(a, b) ((int8_t)(uint8_t)((uint8_t)(a) + (uint8_t)(b)))
#define ADD_U8(a, b) ((uint8_t)((a) + (b)))
#define ADD_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_I64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define OR_BOOL(a, b) ((uint8_t)((a) || (b)))

static void reduce_half(bool bf16, sl_reduce_op op, uint16_t *d,
                        const uint16_t *x, const uint16_t *s, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    float a = bf16 ? sl_bf16_to_f32(x[k]) : sl_f16_to_f32(x[k]);
    float b = bf16 ? sl_bf16_to_f32(s[k]) : sl_f16_to_f32(s[k]);
    float r = op == SL_REDUCE_SUM   ? a + b
              : op == SL_REDUCE_MAX ? (b > a ? b : a)
                                    : (b < a ? b : a);
    d[k] = bf16 ? sl_f32_to_bf16(r) : sl_f32_to_f16(r);
  }
}

void sl__elem_reduce(sl_dtype dt, sl_reduce_op op, void *dst, const void *src,
                     int64_t n) {
  sl__elem_reduce_into(dt, op, dst, dst, src, n);
}

void sl__elem_reduce_into(sl_dtype dt, sl_reduce_op op, void *dst,
                          const void *a, const void *b, int64_t n) {
  switch (dt) {
  case SL_DTYPE_F32: REDUCE_LOOP(float, ADD); break;
  case SL_DTYPE_F64: REDUCE_LOOP(double, ADD); break;
  case SL_DTYPE_F16: reduce_half(false, op, dst, a, b, n); break;
  case SL_DTYPE_BF16: reduce_half(true, op, dst, a, b, n); break;
  case SL_DTYPE_I8: REDUCE_LOOP(int8_t, ADD_I8); break;
  case SL_DTYPE_I32: REDUCE_LOOP(int32_t, ADD_I32); break;
  case SL_DTYPE_I64: REDUCE_LOOP(int64_t, ADD_I64); break;
  case SL_DTYPE_U8: REDUCE_LOOP(uint8_t, ADD_U8); break;
  /* Bool values are 0/1: max is or, min is and, and a sum saturates to or. */
  case SL_DTYPE_BOOL: REDUCE_LOOP(uint8_t, OR_BOOL); break;
  }
}

/* Element k is read from both inputs before it is written to either
 * output, so an output may be its own input. The pragma tells the
 * vectoriser so; it would otherwise test the pointers for overlap and,
 * finding them equal in place, run the scalar loop. */
void sl__elem_sum2_f32(float *o0, float *o1, const float *a, const float *b,
                       int64_t n) {
#pragma GCC ivdep
  for (int64_t k = 0; k < n; k++) {
    float s = a[k] + b[k];
    o0[k] = s;
    o1[k] = s;
  }
}

void sl__box_move(sl_dtype dt, int ndim, void *dst, const int64_t *dst_dims,
                  const int64_t *dst_off, const void *src,
                  const int64_t *src_dims, const int64_t *src_off,
                  const int64_t *ext, bool reduce, sl_reduce_op op) {
  size_t es = sl_dtype_size(dt);
  for (int d = 0; d < ndim; d++)
    if (ext[d] <= 0) return;
  int64_t run = ndim ? ext[ndim - 1] : 1;
  int64_t idx[SL_MAX_DIMS] = {0}; /* position in the box, last dim unused */
  for (;;) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < ndim; d++) {
      int64_t i = d == ndim - 1 ? 0 : idx[d];
      so = so * src_dims[d] + src_off[d] + i;
      dof = dof * dst_dims[d] + dst_off[d] + i;
    }
    unsigned char *dp = (unsigned char *)dst + (size_t)dof * es;
    const unsigned char *sp = (const unsigned char *)src + (size_t)so * es;
    if (reduce)
      sl__elem_reduce(dt, op, dp, sp, run);
    else
      memcpy(dp, sp, (size_t)run * es);
    /* Odometer over every dim but the last. */
    int d = ndim - 2;
    for (; d >= 0; d--) {
      if (++idx[d] < ext[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}
