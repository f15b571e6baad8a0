/* The test harness itself (tests/abort_on_failure.c): an assertion failing
 * on a thread other than the test's prints its message and stops the
 * executable, instead of cmocka longjmping into the test from that thread
 * and exiting with nothing printed. This executable fails on purpose;
 * ctest passes it when the message is in its output
 * (tests/core/CMakeLists.txt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>

static void *helper(void *arg) {
  (void)arg;
  fail_msg("the helper thread's assertion");
  return NULL;
}

static void test_helper_thread_fails(void **state) {
  (void)state;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, helper, NULL), 0);
  pthread_join(t, NULL);
}

static void test_never_reached(void **state) {
  (void)state;
  printf("the case after the failure ran\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_helper_thread_fails),
      cmocka_unit_test(test_never_reached),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
