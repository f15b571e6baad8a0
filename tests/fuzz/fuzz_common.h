/* Shared helpers of the libFuzzer targets: inputs as C strings, and a check
 * that turns a broken property into a crash libFuzzer reports. */
#ifndef SLUICE_FUZZ_COMMON_H
#define SLUICE_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parsers take C strings: the input up to its first NUL, copied so that
 * AddressSanitizer sees a read past the end. NULL when out of memory. */
static inline char *fuzz_cstring(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return NULL;
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* A property that does not hold is a bug: abort so libFuzzer keeps the
 * input, with the reason on stderr. */
#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "property failed: %s: ", #cond);                         \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif
