/* sl__env_with: an environment for a child or a load, built from another
 * without writing either. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core_int.h"

static void test_replaces_and_keeps(void **state) {
  (void)state;
  char *base[] = {"PATH=/bin", "TOKEN=old", "TOKENS=other", "MASTER=a:1",
                  "HOME=/root", NULL};
  const char *set[] = {"TOKEN=new", "MASTER="};
  char **env = sl__env_with(base, set, 2);
  assert_non_null(env);
  /* the settings first, then base without the names they replace; a
   * longer name that starts the same (TOKENS) is another variable */
  const char *want[] = {"TOKEN=new", "MASTER=", "PATH=/bin", "TOKENS=other",
                        "HOME=/root"};
  for (size_t i = 0; i < SL_ARRAY_LEN(want); i++)
    assert_string_equal(env[i], want[i]);
  assert_null(env[SL_ARRAY_LEN(want)]);
  /* the strings are shared, base is untouched */
  assert_ptr_equal(env[2], base[0]);
  assert_string_equal(base[1], "TOKEN=old");
  sl__free(env);
}

static void test_empty(void **state) {
  (void)state;
  char **env = sl__env_with(NULL, NULL, 0);
  assert_non_null(env);
  assert_null(env[0]);
  sl__free(env);
  char *none[] = {NULL};
  const char *set[] = {"A=1"};
  env = sl__env_with(none, set, 1);
  assert_string_equal(env[0], "A=1");
  assert_null(env[1]);
  sl__free(env);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replaces_and_keeps),
      cmocka_unit_test(test_empty),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
