/* Host tensors: creation for every dtype, zero fill, sizes, element access
 * (exact values, saturation, NaN, rounding of the 16-bit floats), raw
 * buffer access at unaligned addresses, and rejected arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "core_int.h"
#include "tensor_int.h"

static void test_create_every_dtype(void **state) {
  sl_shape s;
  assert_int_equal(sl_shape_parse("3,4", &s), SL_OK);
  for (int d = 0; d < SL_DTYPE_COUNT; d++) {
    sl_host_tensor *t;
    assert_int_equal(sl_host_tensor_create((sl_dtype)d, &s, &t), SL_OK);
    assert_int_equal(sl_host_tensor_dtype(t), d);
    assert_true(sl_shape_equal(sl_host_tensor_shape(t), &s));
    assert_int_equal(sl_host_tensor_nbytes(t), 12 * sl_dtype_size((sl_dtype)d));
    const unsigned char *p = sl_host_tensor_cdata(t);
    assert_ptr_equal(p, sl_host_tensor_data(t));
    for (size_t i = 0; i < sl_host_tensor_nbytes(t); i++)
      assert_int_equal(p[i], 0);
    for (int64_t i = 0; i < 12; i++) {
      assert_true(sl_host_tensor_get(t, i) == 0.0);
      /* Small integers are exact in every dtype (bool: 0 and 1). */
      double v = d == SL_DTYPE_BOOL ? (double)(i & 1) : (double)(i - 5);
      if (d == SL_DTYPE_U8) v = (double)i;
      sl_host_tensor_set(t, i, v);
    }
    for (int64_t i = 0; i < 12; i++) {
      double v = d == SL_DTYPE_BOOL ? (double)(i & 1) : (double)(i - 5);
      if (d == SL_DTYPE_U8) v = (double)i;
      assert_true(sl_host_tensor_get(t, i) == v);
    }
    sl_host_tensor_destroy(t);
  }
  sl_host_tensor_destroy(NULL);
}

static void test_scalar_and_empty(void **state) {
  sl_shape s;
  sl_host_tensor *t;
  assert_int_equal(sl_shape_parse("[]", &s), SL_OK);
  assert_int_equal(sl_host_tensor_create(SL_DTYPE_F64, &s, &t), SL_OK);
  assert_int_equal(sl_host_tensor_nbytes(t), 8);
  sl_host_tensor_set(t, 0, 0.1);
  assert_true(sl_host_tensor_get(t, 0) == 0.1);
  sl_host_tensor_destroy(t);
  assert_int_equal(sl_shape_parse("5,0", &s), SL_OK);
  assert_int_equal(sl_host_tensor_create(SL_DTYPE_I32, &s, &t), SL_OK);
  assert_int_equal(sl_host_tensor_nbytes(t), 0);
  assert_non_null(sl_host_tensor_data(t));
  sl_host_tensor_destroy(t);
}

static void test_create_rejects(void **state) {
  sl_shape s;
  sl_host_tensor *t = (sl_host_tensor *)&s;
  assert_int_equal(sl_shape_parse("2", &s), SL_OK);
  assert_int_equal(sl_host_tensor_create((sl_dtype)SL_DTYPE_COUNT, &s, &t),
                   SL_EINVAL);
  assert_null(t);
  assert_non_null(strstr(sl_last_error(), "dtype"));
  t = (sl_host_tensor *)&s;
  assert_int_equal(sl_host_tensor_create(SL_DTYPE_F32, NULL, &t), SL_EINVAL);
  assert_null(t);
  sl_shape bad = {.ndim = 1, .dims = {-4}};
  assert_int_equal(sl_host_tensor_create(SL_DTYPE_F32, &bad, &t), SL_EINVAL);
  assert_null(t);
  bad.ndim = 12;
  assert_int_equal(sl_host_tensor_create(SL_DTYPE_F32, &bad, &t), SL_EINVAL);
  /* Element count fits int64 but the byte count does not fit size_t. */
  assert_int_equal(sl_shape_parse("4611686018427387903", &s), SL_OK);
  assert_int_equal(sl_host_tensor_create(SL_DTYPE_F64, &s, &t), SL_ENOMEM);
  assert_null(t);
}

static void test_integer_store(void **state) {
  int64_t i64;
  int32_t i32;
  int8_t i8;
  uint8_t u8;
  /* C-cast truncation toward zero inside the range... */
  sl_store_element(SL_DTYPE_I32, &i32, 0, 3.7);
  assert_int_equal(i32, 3);
  sl_store_element(SL_DTYPE_I32, &i32, 0, -3.7);
  assert_int_equal(i32, -3);
  /* ...and saturation outside it, NaN to 0 (a raw cast is undefined). */
  sl_store_element(SL_DTYPE_I8, &i8, 0, 1000);
  assert_int_equal(i8, 127);
  sl_store_element(SL_DTYPE_I8, &i8, 0, -1000);
  assert_int_equal(i8, -128);
  sl_store_element(SL_DTYPE_I8, &i8, 0, -128.9);
  assert_int_equal(i8, -128);
  sl_store_element(SL_DTYPE_I8, &i8, 0, NAN);
  assert_int_equal(i8, 0);
  sl_store_element(SL_DTYPE_U8, &u8, 0, -5);
  assert_int_equal(u8, 0);
  sl_store_element(SL_DTYPE_U8, &u8, 0, 255.5);
  assert_int_equal(u8, 255);
  sl_store_element(SL_DTYPE_U8, &u8, 0, 300);
  assert_int_equal(u8, 255);
  sl_store_element(SL_DTYPE_I32, &i32, 0, 2147483648.0);
  assert_int_equal(i32, INT32_MAX);
  sl_store_element(SL_DTYPE_I32, &i32, 0, -2147483648.0);
  assert_int_equal(i32, INT32_MIN);
  sl_store_element(SL_DTYPE_I32, &i32, 0, -INFINITY);
  assert_int_equal(i32, INT32_MIN);
  sl_store_element(SL_DTYPE_I64, &i64, 0, 1e300);
  assert_true(i64 == INT64_MAX);
  sl_store_element(SL_DTYPE_I64, &i64, 0, -9223372036854775808.0);
  assert_true(i64 == INT64_MIN);
  /* Exact up to 2^53. */
  sl_store_element(SL_DTYPE_I64, &i64, 0, 9007199254740992.0);
  assert_true(i64 == INT64_C(9007199254740992));
  assert_true(sl_load_element(SL_DTYPE_I64, &i64, 0) == 9007199254740992.0);
  i64 = INT64_MIN;
  assert_true(sl_load_element(SL_DTYPE_I64, &i64, 0) == -0x1p63);
  u8 = 200;
  assert_true(sl_load_element(SL_DTYPE_U8, &u8, 0) == 200.0);
  i8 = -7;
  assert_true(sl_load_element(SL_DTYPE_I8, &i8, 0) == -7.0);
}

static void test_bool(void **state) {
  uint8_t b[4];
  sl_store_element(SL_DTYPE_BOOL, b, 0, 0.0);
  sl_store_element(SL_DTYPE_BOOL, b, 1, 0.5);
  sl_store_element(SL_DTYPE_BOOL, b, 2, -2);
  sl_store_element(SL_DTYPE_BOOL, b, 3, -0.0);
  assert_int_equal(b[0], 0);
  assert_int_equal(b[1], 1);
  assert_int_equal(b[2], 1);
  assert_int_equal(b[3], 0);
  b[1] = 0x80; /* any non-zero byte reads as true */
  assert_true(sl_load_element(SL_DTYPE_BOOL, b, 1) == 1.0);
}

static void test_float_store(void **state) {
  uint16_t h;
  sl_store_element(SL_DTYPE_F16, &h, 0, 0.1);
  assert_int_equal(h, 0x2e66);
  assert_true(sl_load_element(SL_DTYPE_F16, &h, 0) ==
              (double)sl_f16_to_f32(0x2e66));
  sl_store_element(SL_DTYPE_F16, &h, 0, 1e6);
  assert_int_equal(h, 0x7c00);
  assert_true(isinf(sl_load_element(SL_DTYPE_F16, &h, 0)));
  sl_store_element(SL_DTYPE_F16, &h, 0, NAN);
  assert_true(isnan(sl_load_element(SL_DTYPE_F16, &h, 0)));
  /* One rounding from double, not two through float. */
  sl_store_element(SL_DTYPE_F16, &h, 0, 1.0 + 0x1p-11 + 0x1p-40);
  assert_int_equal(h, 0x3c01);
  sl_store_element(SL_DTYPE_BF16, &h, 0, 1.0 + 0x1p-8 + 0x1p-40);
  assert_int_equal(h, 0x3f81);
  sl_store_element(SL_DTYPE_BF16, &h, 0, -3.0);
  assert_true(sl_load_element(SL_DTYPE_BF16, &h, 0) == -3.0);
  float f;
  sl_store_element(SL_DTYPE_F32, &f, 0, 0.1);
  assert_true(f == 0.1f);
  sl_store_element(SL_DTYPE_F32, &f, 0, -INFINITY);
  assert_true(f == -INFINITY);
  double d;
  sl_store_element(SL_DTYPE_F64, &d, 0, -0.0);
  assert_true(signbit(sl_load_element(SL_DTYPE_F64, &d, 0)));
}

/* Shard buffers are sub-ranges of byte buffers: no alignment required. */
static void test_unaligned(void **state) {
  unsigned char raw[1 + 8 * 3];
  memset(raw, 0, sizeof raw);
  for (int d = 0; d < SL_DTYPE_COUNT; d++) {
    for (int64_t i = 0; i < 3; i++)
      sl_store_element((sl_dtype)d, raw + 1, i,
                       (double)(i + 1) * (d == SL_DTYPE_BOOL ? 0 : 1) +
                           (d == SL_DTYPE_BOOL));
    for (int64_t i = 0; i < 3; i++) {
      double want = d == SL_DTYPE_BOOL ? 1.0 : (double)(i + 1);
      assert_true(sl_load_element((sl_dtype)d, raw + 1, i) == want);
    }
  }
  assert_true(isnan(sl_load_element((sl_dtype)99, raw, 0)));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_every_dtype),
      cmocka_unit_test(test_scalar_and_empty),
      cmocka_unit_test(test_create_rejects),
      cmocka_unit_test(test_integer_store),
      cmocka_unit_test(test_bool),
      cmocka_unit_test(test_float_store),
      cmocka_unit_test(test_unaligned),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
