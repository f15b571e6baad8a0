/* Checked allocation: failures set SL_ENOMEM's message instead of aborting. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_int.h"

void *sl__malloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) sl__fail(SL_ENOMEM, "out of memory allocating %zu bytes", size);
  return p;
}

void *sl__calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    sl__fail(SL_ENOMEM, "out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

void *sl__realloc(void *p, size_t size) {
  void *q = realloc(p, size ? size : 1);
  if (!q) sl__fail(SL_ENOMEM, "out of memory reallocating to %zu bytes", size);
  return q;
}

void *sl__reallocarray(void *p, size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) {
    sl__fail(SL_ENOMEM, "allocation of %zu x %zu bytes overflows", n, size);
    return NULL;
  }
  return sl__realloc(p, n * size);
}

void *sl__malloc_aligned(size_t size, size_t align) {
  void *p = NULL;
  if (posix_memalign(&p, align, size ? size : 1) != 0) {
    sl__fail(SL_ENOMEM, "out of memory allocating %zu bytes aligned to %zu",
             size, align);
    return NULL;
  }
  return p;
}

void *sl__calloc_aligned(size_t n, size_t size, size_t align) {
  if (size && n > SIZE_MAX / size) {
    sl__fail(SL_ENOMEM, "allocation of %zu x %zu bytes overflows", n, size);
    return NULL;
  }
  void *p = sl__malloc_aligned(n * size, align);
  return p ? memset(p, 0, n * size) : NULL;
}

void sl__free(void *p) { free(p); }

char *sl__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = sl__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

uint64_t sl__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
