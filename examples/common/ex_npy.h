/* sluice examples — checks of .npy data files made at start, before the
 * graph is built, so that a file the run would read step by step fails at
 * once with exit status 2 (sl_data_npy itself reads only the header while
 * building, and a bad value only when a step reaches it). */
#ifndef SLUICE_EXAMPLES_COMMON_EX_NPY_H
#define SLUICE_EXAMPLES_COMMON_EX_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* `path` is a .npy file (format 1, 2 or 3, C order) of integer ids, '<i4'
 * or '<i8', of shape [N, cols] with N >= min_rows, whose every value lies
 * in [0, bound) (the whole file is read). *rows gets N. On failure writes
 * "flag '--FLAG': PATH: REASON" into err (the reason names the shape,
 * dtype or the first bad value and its row and column) and returns false
 * with *rows 0. */
bool ex_npy_check_ids(const char *flag, const char *path, int64_t cols,
                      int64_t min_rows, int64_t bound, int64_t *rows, char *err,
                      size_t errsize);

#endif
