/* sluice examples — two helpers every example file uses. */
#ifndef SLUICE_EXAMPLES_UTIL_H
#define SLUICE_EXAMPLES_UTIL_H

#include <sluice/sluice.h>

/* Returns the status of a failed call (its message stays the thread's last
 * error). */
#define EX_CHECK(call)                                                         \
  do {                                                                         \
    sl_status ex_st_ = (call);                                                 \
    if (ex_st_ != SL_OK) return ex_st_;                                        \
  } while (0)

#define EX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
