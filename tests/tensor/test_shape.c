/* Shapes: make, parse (accepted forms and every rejection, with the bad
 * token in the message), print (snprintf contract, round trip), numel,
 * equality, strides. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"
#include "tensor_int.h"

static void test_make(void **state) {
  sl_shape s;
  int64_t d[] = {8, 6, 0, 1};
  assert_int_equal(sl_shape_make(2, d, &s), SL_OK);
  assert_int_equal(s.ndim, 2);
  assert_int_equal(s.dims[0], 8);
  assert_int_equal(s.dims[1], 6);
  assert_int_equal(sl_shape_make(0, NULL, &s), SL_OK);
  assert_int_equal(s.ndim, 0);
  assert_int_equal(sl_shape_make(4, d, &s), SL_OK);
  assert_int_equal(sl_shape_numel(&s), 0);
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_int_equal(sl_shape_make(8, nine, &s), SL_OK);
  assert_int_equal(sl_shape_make(9, nine, &s), SL_EINVAL);
  assert_int_equal(s.ndim, 0); /* cleared on failure */
  assert_non_null(strstr(sl_last_error(), "9 dims"));
  assert_int_equal(sl_shape_make(-1, nine, &s), SL_EINVAL);
  assert_int_equal(sl_shape_make(2, NULL, &s), SL_EINVAL);
  int64_t neg[] = {3, -2};
  assert_int_equal(sl_shape_make(2, neg, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "-2"));
  int64_t big[] = {INT64_C(1) << 32, (INT64_C(1) << 31) - 1};
  assert_int_equal(sl_shape_make(2, big, &s), SL_OK);
  big[1] = INT64_C(1) << 31; /* 2^63: one past INT64_MAX */
  assert_int_equal(sl_shape_make(2, big, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "overflow"));
}

static void expect_parse(const char *text, int ndim, const int64_t *dims) {
  sl_shape s;
  sl_status st = sl_shape_parse(text, &s);
  if (st != SL_OK) fail_msg("'%s' rejected: %s", text, sl_last_error());
  if (s.ndim != ndim) fail_msg("'%s': ndim %d, want %d", text, s.ndim, ndim);
  for (int i = 0; i < ndim; i++)
    if (s.dims[i] != dims[i])
      fail_msg("'%s': dim %d is %lld, want %lld", text, i, (long long)s.dims[i],
               (long long)dims[i]);
}

static void test_parse_accepts(void **state) {
  const int64_t d86[] = {8, 6};
  expect_parse("8,6", 2, d86);
  expect_parse("8x6", 2, d86);
  expect_parse("[8,6]", 2, d86);
  expect_parse("[8x6]", 2, d86);
  expect_parse(" [ 8 , 6 ] ", 2, d86);
  expect_parse("8 x 6", 2, d86);
  expect_parse("008,06", 2, d86);
  expect_parse("", 0, NULL);
  expect_parse("[]", 0, NULL);
  expect_parse("  ", 0, NULL);
  expect_parse("[ ]", 0, NULL);
  const int64_t d0[] = {0};
  expect_parse("0", 1, d0);
  expect_parse("[0]", 1, d0);
  const int64_t d8[] = {1, 2, 3, 4, 5, 6, 7, 8};
  expect_parse("1,2,3,4,5,6,7,8", 8, d8);
  const int64_t dmax[] = {INT64_MAX};
  expect_parse("9223372036854775807", 1, dmax);
  const int64_t dbig[] = {INT64_C(4611686018427387903), 2};
  expect_parse("4611686018427387903,2", 2, dbig);
  /* 'x' is a separator, so a hex literal is two extents. */
  const int64_t dhex[] = {0, 10};
  expect_parse("0x10", 2, dhex);
}

static void expect_reject(const char *text, const char *needle) {
  sl_shape s;
  memset(&s, 0x55, sizeof s);
  sl_clear_error();
  sl_status st = sl_shape_parse(text, &s);
  if (st != SL_EINVAL) fail_msg("'%s' accepted (status %d)", text, st);
  assert_int_equal(s.ndim, 0);
  const char *msg = sl_last_error();
  if (!strstr(msg, needle))
    fail_msg("'%s': message '%s' does not name '%s'", text, msg, needle);
  if (!strstr(msg, "shape"))
    fail_msg("'%s': message '%s' does not say 'shape'", text, msg);
}

static void test_parse_rejects(void **state) {
  expect_reject("-1", "'-1'");
  expect_reject("8,-6", "'-6'");
  expect_reject("8,a", "'a'");
  expect_reject("8,6a", "'6a'");
  expect_reject("1e3", "'1e3'");
  expect_reject("+8", "'+8'");
  expect_reject("8 6", "'8 6'");
  expect_reject("8.5", "'8.5'");
  expect_reject("-", "'-'");
  expect_reject("8,,6", "empty");
  expect_reject("8,", "empty");
  expect_reject(",8", "empty");
  expect_reject("x", "empty");
  expect_reject("[8,6", "unbalanced");
  expect_reject("8,6]", "unbalanced");
  expect_reject("[", "unbalanced");
  expect_reject("]", "unbalanced");
  expect_reject("[[8]]", "'[8]'");
  expect_reject("8,6x2", "mixes");
  expect_reject("1,2,3,4,5,6,7,8,9", "more than 8");
  expect_reject("99999999999999999999", "'99999999999999999999'");
  expect_reject("9223372036854775808", "overflows");
  expect_reject("4611686018427387904,2", "overflow");
  expect_reject("3037000500,3037000500", "overflow");
  /* Stricter than the total: a zero does not excuse overflowing partial
   * products, which a split or stride would compute. */
  expect_reject("0,4611686018427387904,4", "overflow");
  sl_shape s;
  assert_int_equal(sl_shape_parse(NULL, &s), SL_EINVAL);
}

static void test_print(void **state) {
  sl_shape s;
  char buf[64];
  assert_int_equal(sl_shape_parse("8x6", &s), SL_OK);
  assert_int_equal(sl_shape_print(&s, buf, sizeof buf), 5);
  assert_string_equal(buf, "[8,6]");
  assert_int_equal(sl_shape_parse("", &s), SL_OK);
  assert_int_equal(sl_shape_print(&s, buf, sizeof buf), 2);
  assert_string_equal(buf, "[]");
  /* snprintf contract: truncates, terminates, returns the full length. */
  assert_int_equal(sl_shape_parse("123,4", &s), SL_OK);
  memset(buf, 'z', sizeof buf);
  assert_int_equal(sl_shape_print(&s, buf, 4), 7);
  assert_string_equal(buf, "[12");
  assert_int_equal(buf[4], 'z');
  assert_int_equal(sl_shape_print(&s, NULL, 0), 7);
  assert_int_equal(sl_shape_print(&s, buf, 1), 7);
  assert_string_equal(buf, "");
  /* Round trip through the printed form. */
  const char *texts[] = {
      "0",      "[1,2,3,4,5,6,7,8]", "9223372036854775807", "[]", "7x0x3",
      " [ 5 ] "};
  for (size_t i = 0; i < SL_ARRAY_LEN(texts); i++) {
    sl_shape a, b;
    assert_int_equal(sl_shape_parse(texts[i], &a), SL_OK);
    int n = sl_shape_print(&a, buf, sizeof buf);
    assert_int_equal((int)strlen(buf), n);
    assert_int_equal(sl_shape_parse(buf, &b), SL_OK);
    assert_true(sl_shape_equal(&a, &b));
  }
}

static void test_numel_equal_strides(void **state) {
  sl_shape s, t;
  assert_int_equal(sl_shape_parse("2,3,4", &s), SL_OK);
  assert_int_equal(sl_shape_numel(&s), 24);
  int64_t st[SL_MAX_DIMS];
  sl_shape_strides(&s, st);
  assert_int_equal(st[0], 12);
  assert_int_equal(st[1], 4);
  assert_int_equal(st[2], 1);
  assert_int_equal(sl_shape_parse("[]", &t), SL_OK);
  assert_int_equal(sl_shape_numel(&t), 1);
  assert_false(sl_shape_equal(&s, &t));
  assert_int_equal(sl_shape_parse("2x3x4", &t), SL_OK);
  assert_true(sl_shape_equal(&s, &t));
  t.dims[2] = 5;
  assert_false(sl_shape_equal(&s, &t));
  /* Entries past ndim do not matter. */
  assert_int_equal(sl_shape_parse("2,3", &s), SL_OK);
  assert_int_equal(sl_shape_parse("2,3", &t), SL_OK);
  t.dims[5] = 99;
  assert_true(sl_shape_equal(&s, &t));
  assert_int_equal(sl_shape_parse("5,0,3", &s), SL_OK);
  assert_int_equal(sl_shape_numel(&s), 0);
  sl_shape_strides(&s, st);
  assert_int_equal(st[0], 0);
  assert_int_equal(st[1], 3);
  assert_int_equal(st[2], 1);
  /* Hand-filled invalid shapes: -1 rather than a wrapped count. */
  sl_shape bad = {.ndim = 2, .dims = {INT64_C(1) << 40, INT64_C(1) << 40}};
  assert_int_equal(sl_shape_numel(&bad), -1);
  bad.dims[1] = -3;
  assert_int_equal(sl_shape_numel(&bad), -1);
  bad.ndim = 9;
  assert_int_equal(sl_shape_numel(&bad), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_make),
      cmocka_unit_test(test_parse_accepts),
      cmocka_unit_test(test_parse_rejects),
      cmocka_unit_test(test_print),
      cmocka_unit_test(test_numel_equal_strides),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
