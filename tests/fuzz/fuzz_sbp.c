/* sl_sbp_parse and sl_nd_sbp_parse on any text. Accepted values print to a
 * form that parses back equal and prints identically. */
#include <sluice/sbp.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstring(data, size);
  if (!text) return 0;
  char buf[128], again[128];
  sl_nd_sbp s, t;
  if (sl_nd_sbp_parse(text, &s) == SL_OK) {
    FUZZ_CHECK(s.ndim >= 1 && s.ndim <= SL_MAX_MESH_AXES, "ndim %d", s.ndim);
    int n = sl_nd_sbp_print(&s, buf, sizeof buf);
    FUZZ_CHECK(n > 0 && (size_t)n < sizeof buf, "print length %d", n);
    FUZZ_CHECK(sl_nd_sbp_parse(buf, &t) == SL_OK,
               "'%s' printed as '%s' which does not parse: %s", text, buf,
               sl_last_error());
    FUZZ_CHECK(sl_nd_sbp_equal(&s, &t), "'%s' -> '%s' differs", text, buf);
    sl_nd_sbp_print(&t, again, sizeof again);
    FUZZ_CHECK(strcmp(buf, again) == 0, "'%s' then '%s'", buf, again);
  } else {
    FUZZ_CHECK(sl_last_error()[0] != '\0', "'%s' rejected silently", text);
  }
  sl_sbp one, two;
  if (sl_sbp_parse(text, &one) == SL_OK) {
    int n = sl_sbp_print(one, buf, sizeof buf);
    FUZZ_CHECK(n > 0 && (size_t)n < sizeof buf, "print length %d", n);
    FUZZ_CHECK(sl_sbp_parse(buf, &two) == SL_OK && sl_sbp_equal(one, two),
               "'%s' -> '%s' differs", text, buf);
    /* A single SBP is also a one-axis nd-SBP. */
    FUZZ_CHECK(sl_nd_sbp_parse(text, &s) == SL_OK && s.ndim == 1 &&
                   sl_sbp_equal(s.sbp[0], one),
               "'%s' is an SBP but not a 1-axis nd-SBP", text);
  }
  free(text);
  return 0;
}
