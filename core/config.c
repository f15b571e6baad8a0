/* Config structs that carry their own size (sl_session_config,
 * sl_job_config, sl_sim_config): how the library reads one a program
 * passes, whichever header version the program was built against. */
#include <stddef.h>
#include <string.h>

#include "core_int.h"

sl_status sl__config_copy(void *dst, size_t want, const void *src,
                          const char *type, const char *macro) {
  memset(dst, 0, want);
  size_t have;
  memcpy(&have, src, sizeof have); /* every config starts with its size */
  if (have < sizeof have)
    return sl__fail(SL_EINVAL,
                    "%s: size %zu: initialise it with %s_default() or "
                    "%s(...), which set the size",
                    type, have, type, macro);
  if (have > want)
    return sl__fail(SL_EINVAL,
                    "%s: size %zu, larger than this library's %zu (the "
                    "program was built against a newer header)",
                    type, have, want);
  memcpy(dst, src, have);
  memcpy(dst, &want, sizeof want); /* the copy has this library's size */
  return SL_OK;
}
