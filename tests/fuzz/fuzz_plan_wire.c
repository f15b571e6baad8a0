/* The physical plan's decoder (graph/plan_pb.c) on any bytes: what
 * `sluice plan prog.pb` reads and what a program submits with a job. A
 * rejected input is an SL_EINVAL saying why and leaves no plan; an
 * accepted one passes its own validation, prints as text and DOT, simulates
 * (or names its deadlock), and packs
 * to bytes that unpack again and pack identically (the decoder and encoder
 * agree). */
#include "fuzz_common.h"
#include "lower_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  sl__pplan *p = (sl__pplan *)buf; /* must come back NULL on failure */
  sl_clear_error();
  sl_status st = sl__pplan_unpack(buf, size, &p);
  if (st != SL_OK) {
    FUZZ_CHECK(p == NULL, "failure left a plan");
    /* "plan file: ..." from the decoder, "plan: ..." from the checks
     * every plan passes (sl__pplan_validate). */
    FUZZ_CHECK(st == SL_EINVAL && strstr(sl_last_error(), "plan") != NULL,
               "status %d, message '%s'", (int)st, sl_last_error());
    free(buf);
    return 0;
  }
  FUZZ_CHECK(p != NULL, "accepted but no plan");
  FILE *devnull = fopen("/dev/null", "w");
  if (devnull) {
    sl__pplan_write_text(p, -1, devnull);
    sl__pplan_write_dot(p, -1, devnull);
    /* One machine's part: the filters walk the same tables. */
    int last = (int)p->machines - 1;
    sl__pplan_write_text(p, last, devnull);
    sl__pplan_write_dot(p, last, devnull);
    sl__pplan_write_memory(p, last, devnull);
    /* A step simulated: it finishes, or a deadlock is named (a plan read
     * from bytes may have one); never a hang or a crash. */
    sl_simulation r;
    sl_status ss = sl__pplan_simulate(p, NULL, &r, devnull);
    FUZZ_CHECK(ss == SL_OK || (ss == SL_EINVAL &&
                               strstr(sl_last_error(), "deadlocks") != NULL),
               "simulate: status %d, '%s'", (int)ss, sl_last_error());
    fclose(devnull);
  }
  uint8_t *a = NULL, *b = NULL;
  size_t alen = 0, blen = 0;
  FUZZ_CHECK(sl__pplan_pack(p, &a, &alen) == SL_OK, "pack: %s",
             sl_last_error());
  sl__pplan *q = NULL;
  FUZZ_CHECK(sl__pplan_unpack(a, alen, &q) == SL_OK,
             "its own encoding does not unpack: %s", sl_last_error());
  FUZZ_CHECK(sl__pplan_pack(q, &b, &blen) == SL_OK, "pack again: %s",
             sl_last_error());
  FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0,
             "re-encoding changed (%zu vs %zu bytes)", alen, blen);
  sl__free(a);
  sl__free(b);
  sl__pplan_destroy(q);
  sl__pplan_destroy(p);
  free(buf);
  return 0;
}
