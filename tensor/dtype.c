/* Dtypes: sizes, names, and the conversions between f32 and the 16-bit float
 * formats (IEEE binary16 and bfloat16), rounding to nearest, ties to even. */
#include <math.h>
#include <string.h>

#include "core_int.h"
#include "dtype_bits.h"
#include "tensor_int.h"

static const struct {
  const char *name;
  size_t size;
  bool is_float;
} dtype_info[SL_DTYPE_COUNT] = {
    [SL_DTYPE_F32] = {"f32", 4, true},    [SL_DTYPE_F16] = {"f16", 2, true},
    [SL_DTYPE_BF16] = {"bf16", 2, true},  [SL_DTYPE_F64] = {"f64", 8, true},
    [SL_DTYPE_I8] = {"i8", 1, false},     [SL_DTYPE_I32] = {"i32", 4, false},
    [SL_DTYPE_I64] = {"i64", 8, false},   [SL_DTYPE_U8] = {"u8", 1, false},
    [SL_DTYPE_BOOL] = {"bool", 1, false},
};

/* The enum may hold any int when it comes from a cast, so compare as
 * unsigned to reject negatives as well. */
static bool dtype_valid(sl_dtype dt) {
  return (unsigned)dt < (unsigned)SL_DTYPE_COUNT;
}

size_t sl_dtype_size(sl_dtype dt) {
  return dtype_valid(dt) ? dtype_info[dt].size : 0;
}

const char *sl_dtype_name(sl_dtype dt) {
  return dtype_valid(dt) ? dtype_info[dt].name : "?";
}

bool sl_dtype_is_float(sl_dtype dt) {
  return dtype_valid(dt) && dtype_info[dt].is_float;
}

sl_status sl_dtype_parse(const char *text, sl_dtype *out) {
  for (int i = 0; text && i < SL_DTYPE_COUNT; i++) {
    if (strcmp(text, dtype_info[i].name) == 0) {
      *out = (sl_dtype)i;
      return SL_OK;
    }
  }
  *out = SL_DTYPE_F32;
  return sl__fail(SL_EINVAL,
                  "dtype '%s': unknown (expected f32, f16, bf16, f64, i8, "
                  "i32, i64, u8 or bool)",
                  text ? text : "(null)");
}

/* The conversions themselves are dtype_bits.h's, shared with the CUDA
 * kernels. */
uint16_t sl_f32_to_f16(float f) { return sl__f16_from_f32(f); }
float sl_f16_to_f32(uint16_t h) { return sl__f16_to_f32_bits(h); }
uint16_t sl_f32_to_bf16(float f) { return sl__bf16_from_f32(f); }
float sl_bf16_to_f32(uint16_t h) { return sl__bf16_to_f32_bits(h); }
uint16_t sl__f64_to_f16(double v) { return sl__narrow_double(v, 5, 10); }
uint16_t sl__f64_to_bf16(double v) { return sl__narrow_double(v, 8, 7); }
