/* Dtypes: table lookups and parsing for every dtype; f16 / bf16 conversion
 * checked exhaustively (every 16-bit pattern round-trips, every midpoint
 * between neighbours rounds to the even one) and against an independent
 * double-based rounding on random f32 patterns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_int.h"
#include "tensor_int.h"

static const struct {
  sl_dtype dt;
  const char *name;
  size_t size;
  bool is_float;
} all[] = {
    {SL_DTYPE_F32, "f32", 4, true},    {SL_DTYPE_F16, "f16", 2, true},
    {SL_DTYPE_BF16, "bf16", 2, true},  {SL_DTYPE_F64, "f64", 8, true},
    {SL_DTYPE_I8, "i8", 1, false},     {SL_DTYPE_I32, "i32", 4, false},
    {SL_DTYPE_I64, "i64", 8, false},   {SL_DTYPE_U8, "u8", 1, false},
    {SL_DTYPE_BOOL, "bool", 1, false},
};

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void test_table(void **state) {
  assert_int_equal(SL_ARRAY_LEN(all), SL_DTYPE_COUNT);
  for (size_t i = 0; i < SL_ARRAY_LEN(all); i++) {
    assert_int_equal(sl_dtype_size(all[i].dt), all[i].size);
    assert_string_equal(sl_dtype_name(all[i].dt), all[i].name);
    assert_int_equal(sl_dtype_is_float(all[i].dt), all[i].is_float);
    sl_dtype got = (sl_dtype)-1;
    assert_int_equal(sl_dtype_parse(all[i].name, &got), SL_OK);
    assert_int_equal(got, all[i].dt);
  }
  /* Values outside the enum, as a cast from a file or a wire could give. */
  sl_dtype bad[] = {(sl_dtype)-1, (sl_dtype)SL_DTYPE_COUNT, (sl_dtype)1000};
  for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
    assert_int_equal(sl_dtype_size(bad[i]), 0);
    assert_string_equal(sl_dtype_name(bad[i]), "?");
    assert_false(sl_dtype_is_float(bad[i]));
  }
}

static void test_parse_errors(void **state) {
  const char *bad[] = {"float32", "F32", "", " f32", "f32 ", "f", "bf", "?"};
  for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
    sl_dtype dt;
    sl_clear_error();
    assert_int_equal(sl_dtype_parse(bad[i], &dt), SL_EINVAL);
    char want[64];
    snprintf(want, sizeof want, "'%s'", bad[i]);
    assert_non_null(strstr(sl_last_error(), want));
  }
  sl_dtype dt;
  assert_int_equal(sl_dtype_parse(NULL, &dt), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "dtype"));
}

static void test_f16_known(void **state) {
  struct {
    float f;
    uint16_t h;
  } k[] = {
      {0.0f, 0x0000},      {-0.0f, 0x8000},         {1.0f, 0x3c00},
      {-2.0f, 0xc000},     {0.5f, 0x3800},          {65504.0f, 0x7bff},
      {0.1f, 0x2e66},      {1.0f / 3, 0x3555},      {0x1p-14f, 0x0400},
      {0x1p-24f, 0x0001},  {0x1.ff8p-15f, 0x03ff},  {65519.0f, 0x7bff},
      {65520.0f, 0x7c00},  {1e10f, 0x7c00},         {-1e10f, 0xfc00},
      {0x1p-25f, 0x0000},  {0x1.0002p-25f, 0x0001}, {0x1.8p-24f, 0x0002},
      {FLT_MIN, 0x0000},   {-FLT_MIN / 4, 0x8000},  {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00}, {1.0009765625f, 0x3c01},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(k); i++) {
    uint16_t got = sl_f32_to_f16(k[i].f);
    if (got != k[i].h)
      fail_msg("f32 %a -> f16 0x%04x, want 0x%04x", (double)k[i].f, got,
               k[i].h);
    assert_int_equal(sl__f64_to_f16(k[i].f), k[i].h);
  }
  uint16_t n = sl_f32_to_f16(NAN);
  assert_int_equal(n & 0x7c00, 0x7c00);
  assert_true(n & 0x03ff);
  assert_true(isnan(sl_f16_to_f32(n)));
  /* A NaN whose payload is only in the low bits must not become inf. */
  float low_nan = bits_f32(0x7f800001);
  assert_true(isnan(low_nan));
  assert_true(isnan(sl_f16_to_f32(sl_f32_to_f16(low_nan))));
  assert_int_equal(sl_f32_to_f16(-NAN) & 0x8000, 0x8000);
  assert_true(isnan(sl_f16_to_f32(sl__f64_to_f16(NAN))));
  assert_true(sl_f16_to_f32(0x7c00) == INFINITY);
  assert_true(sl_f16_to_f32(0xfc00) == -INFINITY);
  assert_true(sl_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(signbit(sl_f16_to_f32(0x8000)));
}

/* Every f16 pattern -> f32 -> f16 is the identity (NaNs stay NaN), and the
 * f32 value is what the format defines. */
static void test_f16_roundtrip_all(void **state) {
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float f = sl_f16_to_f32((uint16_t)h);
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double want = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
    if (h & 0x8000) want = -want;
    if (e == 0x1f) {
      assert_true(m ? isnan(f) : isinf(f));
      if (m) {
        assert_true(isnan(sl_f16_to_f32(sl_f32_to_f16(f))));
        continue;
      }
    } else if ((double)f != want) {
      fail_msg("f16 0x%04x -> %a, want %a", h, (double)f, want);
    }
    assert_int_equal(sl_f32_to_f16(f), h);
  }
}

/* Between each pair of neighbouring finite f16 values a and b: the exact
 * midpoint rounds to the one with an even mantissa, anything below to a,
 * anything above to b. The pair (65504, inf) uses 65520, the point where
 * IEEE rounding overflows. */
static void test_f16_ties_to_even(void **state) {
  for (uint32_t h = 0; h < 0x7c00; h++) {
    double a = sl_f16_to_f32((uint16_t)h);
    double b = h + 1 == 0x7c00 ? 65536.0 : sl_f16_to_f32((uint16_t)(h + 1));
    float mid = (float)((a + b) / 2); /* exact: 12 significant bits */
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    for (int s = 0; s < 2; s++) {
      float sg = s ? -1.0f : 1.0f;
      uint16_t sb = s ? 0x8000 : 0;
      assert_int_equal(sl_f32_to_f16(sg * mid), sb | even);
      assert_int_equal(sl_f32_to_f16(sg * nextafterf(mid, 0)), sb | h);
      assert_int_equal(sl_f32_to_f16(sg * nextafterf(mid, INFINITY)),
                       sb | (h + 1));
      assert_int_equal(sl__f64_to_f16(sg * (double)mid), sb | even);
      assert_int_equal(sl__f64_to_f16(sg * nextafter(mid, 0)), sb | h);
      assert_int_equal(sl__f64_to_f16(sg * nextafter(mid, INFINITY)),
                       sb | (h + 1));
    }
  }
}

static void test_bf16_known(void **state) {
  struct {
    float f;
    uint16_t h;
  } k[] = {
      {0.0f, 0x0000},      {-0.0f, 0x8000},       {1.0f, 0x3f80},
      {-2.0f, 0xc000},     {3.14159265f, 0x4049}, {0.1f, 0x3dcd},
      {FLT_MAX, 0x7f80},   {-FLT_MAX, 0xff80},    {0x1.fep127f, 0x7f7f},
      {INFINITY, 0x7f80},  {FLT_MIN, 0x0080},     {0x1p-133f, 0x0001},
      {0x1p-134f, 0x0000}, {0x1.01p0f, 0x3f80},   {0x1.03p0f, 0x3f82},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(k); i++) {
    uint16_t got = sl_f32_to_bf16(k[i].f);
    if (got != k[i].h)
      fail_msg("f32 %a -> bf16 0x%04x, want 0x%04x", (double)k[i].f, got,
               k[i].h);
    assert_int_equal(sl__f64_to_bf16(k[i].f), k[i].h);
  }
  assert_true(isnan(sl_bf16_to_f32(sl_f32_to_bf16(NAN))));
  /* Low-bit-only payloads must stay NaN, not collapse to inf. */
  assert_true(isnan(sl_bf16_to_f32(sl_f32_to_bf16(bits_f32(0x7f800001)))));
  assert_true(isnan(sl_bf16_to_f32(sl_f32_to_bf16(bits_f32(0xffffffff)))));
  assert_true(sl_bf16_to_f32(0x3f80) == 1.0f);
}

static void test_bf16_all(void **state) {
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float f = sl_bf16_to_f32((uint16_t)h);
    assert_int_equal(f32_bits(f), h << 16); /* bf16 is f32's top half */
    if (isnan(f))
      assert_true(isnan(sl_bf16_to_f32(sl_f32_to_bf16(f))));
    else
      assert_int_equal(sl_f32_to_bf16(f), h);
  }
  for (uint32_t h = 0; h < 0x7f80; h++) {
    double a = sl_bf16_to_f32((uint16_t)h);
    double b = h + 1 == 0x7f80 ? 0x1p128 : sl_bf16_to_f32((uint16_t)(h + 1));
    float mid = (float)((a + b) / 2);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    assert_int_equal(sl_f32_to_bf16(mid), even);
    assert_int_equal(sl_f32_to_bf16(-mid), 0x8000 | even);
    assert_int_equal(sl_f32_to_bf16(nextafterf(mid, 0)), h);
    assert_int_equal(sl_f32_to_bf16(nextafterf(mid, INFINITY)), h + 1);
    assert_int_equal(sl__f64_to_bf16(mid), even);
  }
}

/* The bit-level f32 paths against the value-level double path on random
 * f32 patterns: two independent implementations of one rounding rule. */
static void test_random_cross_check(void **state) {
  const char *env = getenv("SLUICE_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  printf("seed %llu (SLUICE_TEST_SEED)\n", (unsigned long long)seed);
  sl_rng rng = {seed};
  for (int i = 0; i < 2000000; i++) {
    float f = bits_f32((uint32_t)sl__rng_next(&rng));
    uint16_t a = sl_f32_to_f16(f), b = sl__f64_to_f16(f);
    uint16_t c = sl_f32_to_bf16(f), d = sl__f64_to_bf16(f);
    if (isnan(f)) {
      assert_true(isnan(sl_f16_to_f32(a)) && isnan(sl_f16_to_f32(b)));
      assert_true(isnan(sl_bf16_to_f32(c)) && isnan(sl_bf16_to_f32(d)));
      continue;
    }
    if (a != b)
      fail_msg("f16 of %a: bits 0x%04x, value 0x%04x", (double)f, a, b);
    if (c != d)
      fail_msg("bf16 of %a: bits 0x%04x, value 0x%04x", (double)f, c, d);
  }
}

/* Going through float first would round twice: 1 + 2^-11 + 2^-40 is just
 * above the f16 midpoint between 1 and 1 + 2^-10, but as a float it is the
 * midpoint itself, which would then round down to even. */
static void test_double_rounds_once(void **state) {
  double v = 1.0 + 0x1p-11 + 0x1p-40;
  assert_int_equal(sl_f32_to_f16((float)v), 0x3c00);
  assert_int_equal(sl__f64_to_f16(v), 0x3c01);
  double w = 1.0 + 0x1p-8 + 0x1p-40; /* the same for bf16 */
  assert_int_equal(sl_f32_to_bf16((float)w), 0x3f80);
  assert_int_equal(sl__f64_to_bf16(w), 0x3f81);
  assert_int_equal(sl__f64_to_f16(1e300), 0x7c00);
  assert_int_equal(sl__f64_to_bf16(-1e300), 0xff80);
  assert_int_equal(sl__f64_to_f16(1e-300), 0x0000);
  assert_int_equal(sl__f64_to_f16(-1e-300), 0x8000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_f16_known),
      cmocka_unit_test(test_f16_roundtrip_all),
      cmocka_unit_test(test_f16_ties_to_even),
      cmocka_unit_test(test_bf16_known),
      cmocka_unit_test(test_bf16_all),
      cmocka_unit_test(test_random_cross_check),
      cmocka_unit_test(test_double_rounds_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
