/* sl_shape_parse on any text. Accepted shapes print to a form that parses
 * back to the same shape and prints identically; rejected ones leave a zero
 * shape and a message. */
#include <sluice/tensor.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstring(data, size);
  if (!text) return 0;
  sl_shape s;
  sl_clear_error();
  if (sl_shape_parse(text, &s) != SL_OK) {
    FUZZ_CHECK(s.ndim == 0, "rejected '%s' left ndim %d", text, s.ndim);
    FUZZ_CHECK(sl_last_error()[0] != '\0', "rejected '%s' without a message",
               text);
    free(text);
    return 0;
  }
  FUZZ_CHECK(s.ndim >= 0 && s.ndim <= SL_MAX_DIMS, "ndim %d", s.ndim);
  int64_t numel = sl_shape_numel(&s);
  FUZZ_CHECK(numel >= 0, "'%s' has numel %lld", text, (long long)numel);
  char buf[SL_MAX_DIMS * 21 + 3];
  int n = sl_shape_print(&s, buf, sizeof buf);
  FUZZ_CHECK(n > 0 && (size_t)n < sizeof buf && (size_t)n == strlen(buf),
             "print of '%s' returned %d for '%s'", text, n, buf);
  sl_shape t;
  FUZZ_CHECK(sl_shape_parse(buf, &t) == SL_OK,
             "'%s' printed as '%s' which "
             "does not parse: %s",
             text, buf, sl_last_error());
  FUZZ_CHECK(sl_shape_equal(&s, &t), "'%s' -> '%s' is another shape", text,
             buf);
  char again[sizeof buf];
  sl_shape_print(&t, again, sizeof again);
  FUZZ_CHECK(strcmp(buf, again) == 0, "'%s' prints as '%s' then '%s'", text,
             buf, again);
  /* Strides are the row-major products; with every partial product inside
   * int64 (which parse guarantees) none may be negative. */
  int64_t st[SL_MAX_DIMS];
  sl_shape_strides(&s, st);
  for (int i = 0; i < s.ndim; i++)
    FUZZ_CHECK(st[i] >= 0, "'%s': stride %d is %lld", text, i,
               (long long)st[i]);
  free(text);
  return 0;
}
