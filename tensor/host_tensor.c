/* Host tensors: contiguous row-major buffers, and element access through
 * double for every dtype. */
#include <math.h>
#include <string.h>

#include "core_int.h"
#include "tensor_int.h"

struct sl_host_tensor {
  sl_dtype dtype;
  sl_shape shape;
  size_t nbytes;
  void *data;
};

sl_status sl_host_tensor_create(sl_dtype dt, const sl_shape *shape,
                                sl_host_tensor **out) {
  *out = NULL;
  size_t esize = sl_dtype_size(dt);
  if (!esize) return sl__fail(SL_EINVAL, "host tensor: invalid dtype %d", dt);
  if (!shape) return sl__fail(SL_EINVAL, "host tensor: no shape");
  /* Re-validate: the shape is a plain struct the caller may have filled. */
  sl_shape s;
  SL_CHECK(sl_shape_make(shape->ndim, shape->dims, &s));
  int64_t numel = sl_shape_numel(&s);
  if (numel < 0 || (uint64_t)numel > SIZE_MAX / esize)
    return sl__fail(SL_ENOMEM,
                    "host tensor: %lld elements of %zu bytes "
                    "do not fit in memory",
                    (long long)numel, esize);
  sl_host_tensor *t;
  if (SL_NEW(t) != SL_OK) return SL_ENOMEM;
  t->dtype = dt;
  t->shape = s;
  t->nbytes = (size_t)numel * esize;
  t->data = sl__calloc(t->nbytes ? t->nbytes : 1, 1);
  if (!t->data) {
    sl__free(t);
    return SL_ENOMEM;
  }
  *out = t;
  return SL_OK;
}

void sl_host_tensor_destroy(sl_host_tensor *t) {
  if (!t) return;
  sl__free(t->data);
  sl__free(t);
}

sl_dtype sl_host_tensor_dtype(const sl_host_tensor *t) { return t->dtype; }
const sl_shape *sl_host_tensor_shape(const sl_host_tensor *t) {
  return &t->shape;
}
void *sl_host_tensor_data(sl_host_tensor *t) { return t->data; }
const void *sl_host_tensor_cdata(const sl_host_tensor *t) { return t->data; }
size_t sl_host_tensor_nbytes(const sl_host_tensor *t) { return t->nbytes; }

double sl_host_tensor_get(const sl_host_tensor *t, int64_t flat) {
  return sl_load_element(t->dtype, t->data, flat);
}

void sl_host_tensor_set(sl_host_tensor *t, int64_t flat, double v) {
  sl_store_element(t->dtype, t->data, flat, v);
}

/* Loads go through memcpy so that buffers need no particular alignment
 * (shards are often sub-ranges of byte buffers). */
#define LOAD(type)                                                             \
  do {                                                                         \
    type x_;                                                                   \
    memcpy(&x_, (const char *)buf + flat * (int64_t)sizeof x_, sizeof x_);     \
    return (double)x_;                                                         \
  } while (0)

double sl_load_element(sl_dtype dt, const void *buf, int64_t flat) {
  switch (dt) {
  case SL_DTYPE_F32: LOAD(float);
  case SL_DTYPE_F64: LOAD(double);
  case SL_DTYPE_I8: LOAD(int8_t);
  case SL_DTYPE_I32: LOAD(int32_t);
  case SL_DTYPE_I64: LOAD(int64_t);
  case SL_DTYPE_U8: LOAD(uint8_t);
  case SL_DTYPE_BOOL: return ((const uint8_t *)buf)[flat] ? 1.0 : 0.0;
  case SL_DTYPE_F16:
  case SL_DTYPE_BF16: {
    uint16_t h;
    memcpy(&h, (const char *)buf + flat * 2, sizeof h);
    return dt == SL_DTYPE_F16 ? (double)sl_f16_to_f32(h)
                              : (double)sl_bf16_to_f32(h);
  }
  }
  return NAN;
}
#undef LOAD

/* double -> integer like a C cast (truncating toward zero) but saturating
 * at the type's range and mapping NaN to 0, because an out-of-range cast is
 * undefined behaviour and values here can come from anywhere. lo and hi_excl
 * are exact doubles (-2^k and 2^k for signed types): every v in
 * [lo, hi_excl) truncates to a value the type holds. */
static int64_t to_int(double v, double lo, double hi_excl, int64_t imin,
                      int64_t imax) {
  if (isnan(v)) return 0;
  if (v < lo) return imin;
  if (v >= hi_excl) return imax;
  return (int64_t)v;
}

#define STORE(type, expr)                                                      \
  do {                                                                         \
    type x_ = (type)(expr);                                                    \
    memcpy((char *)buf + flat * (int64_t)sizeof x_, &x_, sizeof x_);           \
    return;                                                                    \
  } while (0)

void sl_store_element(sl_dtype dt, void *buf, int64_t flat, double v) {
  switch (dt) {
  case SL_DTYPE_F32: STORE(float, v);
  case SL_DTYPE_F64: STORE(double, v);
  case SL_DTYPE_F16: STORE(uint16_t, sl__f64_to_f16(v));
  case SL_DTYPE_BF16: STORE(uint16_t, sl__f64_to_bf16(v));
  case SL_DTYPE_I8: STORE(int8_t, to_int(v, -128.0, 128.0, INT8_MIN, INT8_MAX));
  case SL_DTYPE_U8: STORE(uint8_t, to_int(v, 0.0, 256.0, 0, UINT8_MAX));
  case SL_DTYPE_I32:
    STORE(int32_t,
          to_int(v, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX));
  case SL_DTYPE_I64:
    STORE(int64_t, to_int(v, -9223372036854775808.0, 9223372036854775808.0,
                          INT64_MIN, INT64_MAX));
  case SL_DTYPE_BOOL: STORE(uint8_t, v != 0.0);
  }
}
#undef STORE
