/* sluice — dtypes, shapes, host tensors and devices. */
#ifndef SLUICE_TENSOR_H
#define SLUICE_TENSOR_H

#include <sluice/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtypes ------------------------------------------------------------ */

typedef enum sl_dtype {
  SL_DTYPE_F32 = 0,
  SL_DTYPE_F16 = 1,
  SL_DTYPE_BF16 = 2,
  SL_DTYPE_F64 = 3,
  SL_DTYPE_I8 = 4,
  SL_DTYPE_I32 = 5,
  SL_DTYPE_I64 = 6,
  SL_DTYPE_U8 = 7,
  SL_DTYPE_BOOL = 8,
} sl_dtype;
#define SL_DTYPE_COUNT 9

/* Bytes per element (bool is one byte); 0 for an invalid dtype. */
SL_API size_t sl_dtype_size(sl_dtype dt);
/* "f32", "bf16", ...; "?" for an invalid dtype. */
SL_API const char *sl_dtype_name(sl_dtype dt);
/* Parses a name as printed by sl_dtype_name. SL_EINVAL otherwise. */
SL_API sl_status sl_dtype_parse(const char *text, sl_dtype *out);
SL_API bool sl_dtype_is_float(sl_dtype dt);

/* Scalar conversions between float and the 16-bit float formats
 * (round-to-nearest-even). */
SL_API uint16_t sl_f32_to_f16(float f);
SL_API float sl_f16_to_f32(uint16_t h);
SL_API uint16_t sl_f32_to_bf16(float f);
SL_API float sl_bf16_to_f32(uint16_t h);

/* ---- shapes ------------------------------------------------------------ */

#define SL_MAX_DIMS 8

/* A shape is a plain value: ndim extents, each >= 0. ndim 0 is a scalar. */
typedef struct sl_shape {
  int ndim;
  int64_t dims[SL_MAX_DIMS];
} sl_shape;

/* Builds a shape from ndim extents; SL_EINVAL for ndim outside [0, 8] or a
 * negative extent. */
SL_API sl_status sl_shape_make(int ndim, const int64_t *dims, sl_shape *out);
/* Parses "8,6" (or "8x6", "[8,6]"; "" or "[]" is a scalar). Extents must be
 * non-negative integers and their product must fit in int64. */
SL_API sl_status sl_shape_parse(const char *text, sl_shape *out);
/* Writes "[8,6]" into buf like snprintf: returns the length it needed. */
SL_API int sl_shape_print(const sl_shape *s, char *buf, size_t size);
/* Number of elements (1 for a scalar). */
SL_API int64_t sl_shape_numel(const sl_shape *s);
SL_API bool sl_shape_equal(const sl_shape *a, const sl_shape *b);
/* Row-major strides in elements. */
SL_API void sl_shape_strides(const sl_shape *s, int64_t *strides);

/* ---- host tensors ------------------------------------------------------ */

/* A contiguous row-major tensor in host memory. */
typedef struct sl_host_tensor sl_host_tensor;

/* Allocates a zero-filled tensor. SL_ENOMEM, SL_EINVAL (bad dtype). */
SL_API sl_status sl_host_tensor_create(sl_dtype dt, const sl_shape *shape,
                                       sl_host_tensor **out);
SL_API void sl_host_tensor_destroy(sl_host_tensor *t);
SL_API sl_dtype sl_host_tensor_dtype(const sl_host_tensor *t);
SL_API const sl_shape *sl_host_tensor_shape(const sl_host_tensor *t);
SL_API void *sl_host_tensor_data(sl_host_tensor *t);
SL_API const void *sl_host_tensor_cdata(const sl_host_tensor *t);
SL_API size_t sl_host_tensor_nbytes(const sl_host_tensor *t);

/* Element access by flat (row-major) index, converting through double.
 * Exact for every value of every dtype except i64 beyond 2^53. */
SL_API double sl_host_tensor_get(const sl_host_tensor *t, int64_t flat);
SL_API void sl_host_tensor_set(sl_host_tensor *t, int64_t flat, double v);
/* The same on a raw buffer of a given dtype. */
SL_API double sl_load_element(sl_dtype dt, const void *buf, int64_t flat);
SL_API void sl_store_element(sl_dtype dt, void *buf, int64_t flat, double v);

/* ---- devices ----------------------------------------------------------- */

typedef enum sl_device_type {
  SL_DEVICE_CPU = 0,
  SL_DEVICE_CUDA = 1,
} sl_device_type;

/* "cpu", "cuda". */
SL_API const char *sl_device_type_name(sl_device_type t);
/* Devices of that type visible to this process: logical CPU cores for
 * SL_DEVICE_CPU, GPUs for SL_DEVICE_CUDA (0 when none or no CUDA build). */
SL_API int sl_device_count(sl_device_type t);

#ifdef __cplusplus
}
#endif
#endif
