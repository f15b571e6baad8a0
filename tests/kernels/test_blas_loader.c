/* How the BLAS is found and which OpenBLAS kernel set runs. The choice is
 * made once per process, so each case is its own ctest run of this program
 * with the case name as argument (tests/kernels/CMakeLists.txt). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cpu/blas.h"
#include "sgemm_ref.h"

extern char **environ;

/* A product through whatever backend is loaded matches the reference. */
static void product_ok(void) {
  sl_rng rng = {7};
  enum { M = 5, N = 6, K = 7 };
  float *a = ref_matrix(&rng, M, K, K, 0), *b = ref_matrix(&rng, K, N, N, 0);
  float c[M * N];
  double want[M * N], bound[M * N];
  ref_sgemm(false, false, M, N, K, 1, a, K, b, N, 0, c, N, want, bound);
  assert_int_equal(sl__blas_sgemm(false, false, M, N, K, 1, a, K, b, N, 0, c, N),
                   SL_OK);
  for (int i = 0; i < M * N; i++) assert_true(fabs(c[i] - want[i]) <= bound[i]);
  free(a);
  free(b);
}

static void assert_contains(const char *s, const char *part) {
  if (!s || !strstr(s, part)) {
    print_error("'%s' does not contain '%s'\n", s ? s : "(null)", part);
    fail();
  }
}

/* Loads; skips when this machine has no OpenBLAS at all. */
static void load_or_skip(void) {
  sl_status st = sl__blas_load();
  print_message("BLAS: %s\n", sl__blas_describe());
  if (st != SL_OK) {
    print_message("no OpenBLAS on this machine: %s\n", sl_last_error());
    skip();
  }
  assert_string_equal(sl__blas_name(), "openblas");
}

/* Nothing set: sluice picks the kernel set from cpuid, and the process
 * environment is left as it was: the same array, never reallocated (glibc
 * would free the old one under another thread's getenv). */
static void test_auto(void **state) {
  char **env_before = environ;
  load_or_skip();
  assert_ptr_equal(environ, env_before);
  assert_int_equal(sl__blas_get_threads(), 1); /* one per device */
  assert_contains(sl__blas_describe(), "1 thread per call");
  const char *want = sl__blas_coretype_choose(sl__cpu_features_get());
  if (want) {
    assert_contains(sl__blas_describe(), "chosen by sluice from cpuid");
    if (strcasecmp(sl__blas_coretype(), want) != 0) {
      print_error("OpenBLAS runs %s, sluice chose %s\n", sl__blas_coretype(), want);
      fail();
    }
  } else {
    assert_contains(sl__blas_describe(), "OpenBLAS's own probe");
  }
  assert_null(getenv("OPENBLAS_CORETYPE"));
  product_ok();
}

/* An empty OPENBLAS_CORETYPE counts as unset, and is left empty. */
static void test_empty_coretype(void **state) {
  setenv("OPENBLAS_CORETYPE", "", 1);
  load_or_skip();
  const char *want = sl__blas_coretype_choose(sl__cpu_features_get());
  if (want) {
    assert_contains(sl__blas_describe(), "chosen by sluice from cpuid");
    assert_int_equal(strcasecmp(sl__blas_coretype(), want), 0);
  }
  assert_non_null(getenv("OPENBLAS_CORETYPE"));
  assert_string_equal(getenv("OPENBLAS_CORETYPE"), "");
  product_ok();
}

/* A narrower OPENBLAS_CORETYPE than the CPU can run is overridden by
 * sluice's choice (the fast path must not depend on the environment) for
 * the load alone: the program keeps the user's value. A set that is at
 * least as wide is honoured. */
static void test_user_coretype(void **state) {
  setenv("OPENBLAS_CORETYPE", "HASWELL", 1);
  load_or_skip();
  const char *best = sl__blas_coretype_choose(sl__cpu_features_get());
  if (best && sl__blas_coretype_rank(best) > sl__blas_coretype_rank("Haswell")) {
    assert_int_equal(strcasecmp(sl__blas_coretype(), best), 0);
    assert_contains(sl__blas_describe(), "over the narrower OPENBLAS_CORETYPE=HASWELL");
  } else {
    assert_string_equal(sl__blas_coretype(), "Haswell");
    assert_contains(sl__blas_describe(), "set in the environment: OPENBLAS_CORETYPE=HASWELL");
  }
  assert_null(strstr(sl__blas_describe(), "this CPU can run"));
  assert_string_equal(getenv("OPENBLAS_CORETYPE"), "HASWELL");
  product_ok();
}

/* SLUICE_BLAS_CORETYPE=auto-off keeps the user's OPENBLAS_CORETYPE even
 * when it is narrower, and says the CPU could do better. */
static void test_auto_off_keeps_user_coretype(void **state) {
  setenv("OPENBLAS_CORETYPE", "HASWELL", 1);
  setenv("SLUICE_BLAS_CORETYPE", "auto-off", 1);
  load_or_skip();
  assert_string_equal(sl__blas_coretype(), "Haswell");
  assert_contains(sl__blas_describe(), "OPENBLAS_CORETYPE: SLUICE_BLAS_CORETYPE=auto-off");
  assert_string_equal(getenv("OPENBLAS_CORETYPE"), "HASWELL");
  const char *best = sl__blas_coretype_choose(sl__cpu_features_get());
  if (best && sl__blas_coretype_rank(best) > sl__blas_coretype_rank("Haswell"))
    assert_contains(sl__blas_describe(), "this CPU can run");
  product_ok();
}

/* SLUICE_BLAS_CORETYPE=auto-off: OpenBLAS probes the CPU itself. */
static void test_auto_off(void **state) {
  setenv("SLUICE_BLAS_CORETYPE", "auto-off", 1);
  load_or_skip();
  assert_contains(sl__blas_describe(), "OpenBLAS's own probe");
  assert_null(getenv("OPENBLAS_CORETYPE"));
  product_ok();
}

/* SLUICE_BLAS_CORETYPE=<name> asks for that set. */
static void test_named_coretype(void **state) {
  setenv("SLUICE_BLAS_CORETYPE", "SANDYBRIDGE", 1);
  load_or_skip();
  assert_string_equal(sl__blas_coretype(), "Sandybridge");
  assert_contains(sl__blas_describe(), "SLUICE_BLAS_CORETYPE=SANDYBRIDGE");
  assert_null(getenv("OPENBLAS_CORETYPE"));
  product_ok();
}

/* No loadable library: the C sgemm runs, and says why with dlerror's
 * message, through sl__blas_load's status and the description. */
static void test_fallback(void **state) {
  setenv("SLUICE_BLAS_LIBRARY", "/nonexistent/libopenblas.so.0", 1);
  assert_int_equal(sl__blas_load(), SL_ENOTFOUND);
  assert_contains(sl_last_error(), "/nonexistent/libopenblas.so.0");
  assert_contains(sl_last_error(), "cannot open shared object file");
  assert_string_equal(sl__blas_name(), "c");
  assert_null(sl__blas_coretype());
  assert_contains(sl__blas_describe(), "sluice's C sgemm");
  assert_contains(sl__blas_describe(), sl__sgemm_c_kernel_best()->name);
  assert_contains(sl__blas_describe(), "cannot open shared object file");
  assert_int_equal(sl__blas_set_threads(4), SL_OK);
  assert_int_equal(sl__blas_get_threads(), 1); /* the C sgemm has one */
  product_ok();
  /* The status is reported to every thread that asks, not just the first. */
  sl_clear_error();
  assert_int_equal(sl__blas_load(), SL_ENOTFOUND);
  assert_contains(sl_last_error(), "cannot open shared object file");
}

/* A library without cblas_sgemm is rejected with dlsym's message. */
static void test_not_openblas(void **state) {
  setenv("SLUICE_BLAS_LIBRARY", "libm.so.6", 1);
  assert_int_equal(sl__blas_load(), SL_ENOTFOUND);
  assert_contains(sl_last_error(), "libm.so.6");
  assert_contains(sl_last_error(), "cblas_sgemm");
  assert_string_equal(sl__blas_name(), "c");
  product_ok();
}

static void test_none(void **state) {
  setenv("SLUICE_BLAS_LIBRARY", "none", 1);
  assert_int_equal(sl__blas_load(), SL_ENOTFOUND);
  assert_contains(sl_last_error(), "SLUICE_BLAS_LIBRARY=none");
  assert_string_equal(sl__blas_name(), "c");
  product_ok();
}

/* The program opened OpenBLAS itself, with Haswell kernels, before sluice:
 * sluice uses that one and reports its kernels instead of loading another. */
static void preloaded(int flags) {
  setenv("OPENBLAS_CORETYPE", "HASWELL", 1);
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | flags);
  unsetenv("OPENBLAS_CORETYPE");
  if (!h) {
    print_message("cannot open libopenblas.so.0: %s\n", dlerror());
    skip();
  }
  char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
  int (*threads)(void) = (int (*)(void))dlsym(h, "openblas_get_num_threads");
  void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  assert_non_null(corename);
  assert_non_null(threads);
  assert_non_null(set_threads);
  set_threads(3); /* the program's own setting, which sluice must keep */
  load_or_skip();
  assert_int_equal(threads(), 3);
  assert_int_equal(sl__blas_get_threads(), 3);
  assert_string_equal(sl__blas_coretype(), corename());
  assert_string_equal(sl__blas_coretype(), "Haswell");
  assert_contains(sl__blas_describe(), "already loaded by the program");
  product_ok();
  dlclose(h);
}

static void test_preloaded_local(void **state) { preloaded(RTLD_LOCAL); }
static void test_preloaded_global(void **state) { preloaded(RTLD_GLOBAL); }

int main(int argc, char **argv) {
  static const struct CMUnitTest all[] = {
      cmocka_unit_test(test_auto),
      cmocka_unit_test(test_empty_coretype),
      cmocka_unit_test(test_user_coretype),
      cmocka_unit_test(test_auto_off),
      cmocka_unit_test(test_auto_off_keeps_user_coretype),
      cmocka_unit_test(test_named_coretype),
      cmocka_unit_test(test_fallback),
      cmocka_unit_test(test_not_openblas),
      cmocka_unit_test(test_none),
      cmocka_unit_test(test_preloaded_local),
      cmocka_unit_test(test_preloaded_global),
  };
  /* The test controls the environment it starts from. */
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("SLUICE_BLAS_CORETYPE");
  unsetenv("SLUICE_BLAS_LIBRARY");
  const char *which = argc > 1 ? argv[1] : "auto";
  char name[64];
  snprintf(name, sizeof name, "test_%s", which);
  for (size_t i = 0; i < SL_ARRAY_LEN(all); i++)
    if (strcmp(all[i].name, name) == 0)
      return _cmocka_run_group_tests(which, &all[i], 1, NULL, NULL);
  fprintf(stderr, "unknown case '%s'\n", which);
  return 2;
}
