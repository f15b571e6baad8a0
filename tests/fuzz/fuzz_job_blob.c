/* The job blob's decoder (session/job_blob.c) on any bytes: a daemon
 * receives a blob from the control plane for every job. A rejected input
 * says why with SL_EINVAL; an accepted one points only inside the input,
 * its parts add up to it, and packing it again gives the input back (the
 * format has one encoding per blob). */
#include "fuzz_common.h"
#include "job_blob.h"

#include "core_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly `size` bytes, so AddressSanitizer sees any read
   * past the end. */
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  char addr[256];
  static char starts[SL__JOB_BLOB_STARTS];
  sl__job_blob b;
  sl_clear_error();
  sl_status st = sl__job_blob_unpack(buf, size, addr, starts, &b);
  if (st != SL_OK) {
    FUZZ_CHECK(st == SL_EINVAL, "status %d", (int)st);
    FUZZ_CHECK(strstr(sl_last_error(), "job blob") != NULL, "message '%s'",
               sl_last_error());
    free(buf);
    return 0;
  }
  FUZZ_CHECK(b.driver_addr == addr && strlen(addr) < sizeof addr, "address");
  FUZZ_CHECK(b.starts == starts && strlen(starts) < sizeof starts, "starts");
  FUZZ_CHECK(b.plan >= buf && b.plan + b.plan_len == buf + size, "plan");
  uint8_t *again = NULL;
  size_t len = 0;
  FUZZ_CHECK(sl__job_blob_pack(&b, &again, &len) == SL_OK, "pack");
  FUZZ_CHECK(len == size && memcmp(again, buf, size) == 0,
             "repacked %zu bytes differ from the %zu accepted", len, size);
  sl__free(again);
  free(buf);
  return 0;
}
