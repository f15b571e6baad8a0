/* Arenas: alignment, zeroing, large requests, overflow; checked and aligned
 * allocation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core_int.h"

static void test_arena_alloc(void **state) {
  sl_arena *a;
  assert_int_equal(sl__arena_create(256, &a), SL_OK);
  unsigned char *prev = NULL;
  for (int i = 1; i < 200; i++) {
    unsigned char *p = sl__arena_alloc(a, (size_t)i);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 16, 0);
    for (int j = 0; j < i; j++) assert_int_equal(p[j], 0);
    memset(p, 0xab, (size_t)i);
    if (prev) assert_int_equal(prev[0], 0xab); /* earlier data untouched */
    prev = p;
  }
  /* Larger than a block: gets its own, and small ones keep working. */
  unsigned char *big = sl__arena_alloc(a, 10000);
  assert_non_null(big);
  memset(big, 1, 10000);
  char *s = sl__arena_strdup(a, "placement");
  assert_string_equal(s, "placement");
  assert_true(sl__arena_bytes_used(a) >= 10000);
  assert_null(sl__arena_calloc(a, SIZE_MAX / 2, 4));
  assert_non_null(strstr(sl_last_error(), "overflows"));
  sl__arena_destroy(a);
  sl__arena_destroy(NULL);
}

static void test_checked_alloc(void **state) {
  assert_null(sl__reallocarray(NULL, SIZE_MAX / 2, 8));
  assert_non_null(strstr(sl_last_error(), "overflows"));
  char *d = sl__strdup("abc");
  assert_string_equal(d, "abc");
  sl__free(d);
  sl__free(NULL);
  int *x;
  assert_int_equal(SL_NEW(x), SL_OK);
  assert_int_equal(*x, 0);
  sl__free(x);
  /* Aligned arrays: the start on the boundary, every byte zero. */
  for (size_t align = sizeof(void *); align <= 4096; align *= 4) {
    unsigned char *p = sl__calloc_aligned(3, 100, align);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % align, 0);
    for (int i = 0; i < 300; i++)
      assert_int_equal(p[i], 0);
    sl__free(p);
  }
  assert_null(sl__calloc_aligned(SIZE_MAX / 2, 8, 64));
  assert_non_null(strstr(sl_last_error(), "overflows"));
}

static void test_rng_is_deterministic(void **state) {
  sl_rng a = {42}, b = {42};
  for (int i = 0; i < 100; i++) assert_true(sl__rng_next(&a) == sl__rng_next(&b));
  sl_rng c = {43};
  assert_true(sl__rng_next(&a) != sl__rng_next(&c));
  for (int i = 0; i < 1000; i++) assert_true(sl__rng_below(&a, 7) < 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arena_alloc),
      cmocka_unit_test(test_checked_alloc),
      cmocka_unit_test(test_rng_is_deterministic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
