/* Status names, the thread-local error message, log level parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>

#include "core_int.h"

static void test_status_names(void **state) {
  assert_string_equal(sl_status_str(SL_OK), "SL_OK");
  assert_string_equal(sl_status_str(SL_EINVAL), "SL_EINVAL");
  assert_string_equal(sl_status_str(SL_ENOTFOUND), "SL_ENOTFOUND");
  assert_string_equal(sl_status_str((sl_status)999), "SL_E?");
  /* Append-only: the numbers are part of the ABI. */
  assert_int_equal(SL_EINVAL, 1);
  assert_int_equal(SL_EHANG, 9);
}

static void test_fail_sets_message(void **state) {
  sl_clear_error();
  assert_string_equal(sl_last_error(), "");
  assert_int_equal(sl__fail(SL_EINVAL, "shape '%s': bad", "x"), SL_EINVAL);
  assert_string_equal(sl_last_error(), "shape 'x': bad");
  assert_int_equal(sl__fail_context(SL_EINVAL, "op '%s': ", "mm"), SL_EINVAL);
  assert_string_equal(sl_last_error(), "op 'mm': shape 'x': bad");
}

static void *other_thread(void *arg) {
  (void)arg;
  sl__fail(SL_EIO, "from the other thread");
  return NULL;
}

static void test_message_is_thread_local(void **state) {
  sl__fail(SL_EINVAL, "mine");
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
  pthread_join(t, NULL);
  assert_string_equal(sl_last_error(), "mine");
}

static void test_log_level_parse(void **state) {
  sl_logging_level lv;
  assert_int_equal(sl_logging_level_parse("debug", &lv), SL_OK);
  assert_int_equal(lv, SL_LOGGING_DEBUG);
  assert_int_equal(sl_logging_level_parse("off", &lv), SL_OK);
  assert_int_equal(lv, SL_LOGGING_OFF);
  assert_int_equal(sl_logging_level_parse("loud", &lv), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "loud"));
  sl_logging_set_level(SL_LOGGING_ERROR);
  assert_int_equal(sl_logging_get_level(), SL_LOGGING_ERROR);
}

static void test_version(void **state) {
  assert_true(strlen(sl_version()) >= 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_names),
      cmocka_unit_test(test_fail_sets_message),
      cmocka_unit_test(test_message_is_thread_local),
      cmocka_unit_test(test_log_level_parse),
      cmocka_unit_test(test_version),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
