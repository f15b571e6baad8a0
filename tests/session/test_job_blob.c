/* The job blob: what a program packs is what every daemon unpacks, field
 * for field (the CPU devices' threads and pinning included), and a blob
 * cut short anywhere is refused, never read past its end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "job_blob.h"

static void test_round_trip(void **state) {
  (void)state;
  static const uint8_t plan[5] = {1, 2, 3, 4, 5};
  sl__job_blob b = {.driver_addr = "127.0.0.1:4000",
                    .nnodes = 3,
                    .hang_timeout_ms = 1234,
                    .plan = plan,
                    .plan_len = sizeof plan,
                    .trace = true,
                    .base_step = 7,
                    .starts = "w checkpoint /tmp/x",
                    .cpu_threads = 4,
                    .cpu_pin = -1,
                    .spin_us = 250};
  uint8_t *buf;
  size_t len;
  assert_int_equal(sl__job_blob_pack(&b, &buf, &len), SL_OK);
  char addr[256], *starts = malloc(SL__JOB_BLOB_STARTS);
  sl__job_blob o;
  assert_int_equal(sl__job_blob_unpack(buf, len, addr, starts, &o), SL_OK);
  assert_string_equal(o.driver_addr, b.driver_addr);
  assert_string_equal(o.starts, b.starts);
  assert_int_equal(o.nnodes, 3);
  assert_int_equal(o.hang_timeout_ms, 1234);
  assert_int_equal(o.base_step, 7);
  assert_true(o.trace);
  assert_int_equal(o.cpu_threads, 4);
  assert_int_equal(o.cpu_pin, -1);
  assert_int_equal(o.spin_us, 250);
  assert_int_equal(o.plan_len, sizeof plan);
  assert_memory_equal(o.plan, plan, sizeof plan);
  for (size_t cut = 0; cut < len; cut++)
    assert_int_equal(sl__job_blob_unpack(buf, cut, addr, starts, &o),
                     SL_EINVAL);
  free(starts);
  sl__free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
