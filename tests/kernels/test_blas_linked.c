/* A host program that links OpenBLAS itself (run by ctest with
 * OPENBLAS_CORETYPE=HASWELL, so its load-time kernel set is Haswell while
 * sluice would choose another on AVX-512 CPUs): sluice must use that
 * library and report its kernels, not load a second copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blas.h"

/* OpenBLAS's own API; declared here so the link really needs the library. */
char *openblas_get_corename(void);
int openblas_get_num_threads(void);

static void test_linked(void **state) {
  const char *host_core = openblas_get_corename();
  unsetenv("OPENBLAS_CORETYPE"); /* what sluice reports must not come from it */
  assert_int_equal(sl__blas_load(), SL_OK);
  print_message("host links %s; sluice: %s\n", host_core, sl__blas_describe());
  assert_string_equal(sl__blas_name(), "openblas");
  assert_string_equal(sl__blas_coretype(), host_core);
  assert_string_equal(sl__blas_coretype(), "Haswell");
  assert_non_null(strstr(sl__blas_describe(), "already loaded by the program"));
  /* The host's thread count is the host's: sluice reports, not resets it. */
  assert_int_equal(sl__blas_get_threads(), openblas_get_num_threads());
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4];
  assert_int_equal(sl__blas_sgemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2),
                   SL_OK);
  assert_true(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_linked)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
