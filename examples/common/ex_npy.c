/* Checks of .npy data files (see ex_npy.h). The format: the magic
 * "\x93NUMPY", a major and a minor version byte, the header's length
 * (2 bytes little-endian in version 1, 4 in versions 2 and 3), then the
 * header, a Python dict literal with the keys 'descr', 'fortran_order'
 * and 'shape', then the elements (numpy's NEP 1, "format.py"). */
#include "ex_npy.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ex_util.h"

static bool npy_fail(char *err, size_t size, const char *flag, const char *path,
                     const char *fmt, ...) SL_PRINTF_LIKE(5, 6);

static bool npy_fail(char *err, size_t size, const char *flag, const char *path,
                     const char *fmt, ...) {
  if (!size) return false;
  int n = snprintf(err, size, "flag '--%s': %s: ", flag, path);
  if (n >= 0 && (size_t)n < size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, size - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return false;
}

/* The text after "'key':" (or "\"key\":") in the header, spaces skipped;
 * NULL when the key is absent. */
static const char *header_value(const char *h, const char *key) {
  size_t klen = strlen(key);
  for (const char *p = h; (p = strstr(p, key)); p += klen) {
    if (p == h || (p[-1] != '\'' && p[-1] != '"') || p[klen] != p[-1]) continue;
    const char *v = p + klen + 1;
    while (isspace((unsigned char)*v))
      v++;
    if (*v != ':') continue;
    v++;
    while (isspace((unsigned char)*v))
      v++;
    return v;
  }
  return NULL;
}

/* The shape tuple at `v` ("(12, 8)", "(12,)", "()") into dims; the number
 * of dims, or -1 when it is not a tuple of at most `max` non-negative
 * integers below 2^40 (larger ones could overflow the byte counts). */
static int parse_shape(const char *v, int64_t *dims, int max) {
  if (*v++ != '(') return -1;
  int n = 0;
  for (;;) {
    while (isspace((unsigned char)*v))
      v++;
    if (*v == ')') return n;
    if (!isdigit((unsigned char)*v) || n == max) return -1;
    char *end;
    errno = 0;
    long long d = strtoll(v, &end, 10);
    if (errno || d >= (1LL << 40)) return -1;
    dims[n++] = d;
    v = end;
    while (isspace((unsigned char)*v))
      v++;
    if (*v == ',')
      v++;
    else if (*v != ')')
      return -1;
  }
}

bool ex_npy_check_ids(const char *flag, const char *path, int64_t cols,
                      int64_t min_rows, int64_t bound, int64_t *rows, char *err,
                      size_t errsize) {
  *rows = 0;
  if (!*path) return npy_fail(err, errsize, flag, "''", "empty path");
  FILE *f = fopen(path, "rb");
  if (!f) return npy_fail(err, errsize, flag, path, "%s", strerror(errno));
  bool ok = false;
  char *h = NULL;
  void *buf = NULL;
  unsigned char pre[12];
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    npy_fail(err, errsize, flag, path, "not a regular file");
    goto done;
  }
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 ||
      pre[6] < 1 || pre[6] > 3) {
    npy_fail(err, errsize, flag, path,
             "not a .npy file (no \\x93NUMPY magic of version 1 to 3)");
    goto done;
  }
  size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8, off = 10;
  if (pre[6] > 1) {
    if (fread(pre + 10, 1, 2, f) != 2) {
      npy_fail(err, errsize, flag, path, "truncated header");
      goto done;
    }
    hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    off = 12;
  }
  if (hlen > (1u << 20) || !(h = malloc(hlen + 1)) ||
      fread(h, 1, hlen, f) != hlen) {
    npy_fail(err, errsize, flag, path, "truncated or oversized header");
    goto done;
  }
  h[hlen] = '\0';
  off += hlen;
  const char *descr = header_value(h, "descr");
  const char *order = header_value(h, "fortran_order");
  const char *shape = header_value(h, "shape");
  if (!descr || !order || !shape) {
    npy_fail(err, errsize, flag, path,
             "header lacks 'descr', 'fortran_order' or 'shape'");
    goto done;
  }
  size_t elem;
  if (!strncmp(descr, "'<i8'", 5) || !strncmp(descr, "\"<i8\"", 5)) {
    elem = 8;
  } else if (!strncmp(descr, "'<i4'", 5) || !strncmp(descr, "\"<i4\"", 5)) {
    elem = 4;
  } else {
    npy_fail(err, errsize, flag, path,
             "dtype %.*s: want integer ids, '<i4' or '<i8'",
             (int)strcspn(descr, ",}"), descr);
    goto done;
  }
  if (strncmp(order, "False", 5) != 0) {
    npy_fail(err, errsize, flag, path, "Fortran order: want C order");
    goto done;
  }
  int64_t dims[8];
  int nd = parse_shape(shape, dims, 8);
  if (nd != 2 || dims[1] != cols || dims[0] < min_rows) {
    char got[64] = "?";
    if (nd >= 0) {
      int n = snprintf(got, sizeof got, "[");
      for (int i = 0; i < nd && n < (int)sizeof got; i++)
        n += snprintf(got + n, sizeof got - (size_t)n, "%s%" PRId64,
                      i ? ", " : "", dims[i]);
      if (n < (int)sizeof got) snprintf(got + n, sizeof got - (size_t)n, "]");
    }
    npy_fail(err, errsize, flag, path,
             "shape %s: want [N, %" PRId64 "] with N >= %" PRId64, got, cols,
             min_rows);
    goto done;
  }
  int64_t n = dims[0] * dims[1];
  if ((uint64_t)sb.st_size < off + (uint64_t)n * elem) {
    npy_fail(err, errsize, flag, path,
             "%lld bytes, too short for its shape [%" PRId64 ", %" PRId64
             "] (%zu bytes of data after a %zu-byte header)",
             (long long)sb.st_size, dims[0], dims[1], (size_t)n * elem, off);
    goto done;
  }
  enum { CHUNK = 1 << 14 };
  if (!(buf = malloc(CHUNK * elem))) {
    npy_fail(err, errsize, flag, path, "out of memory");
    goto done;
  }
  for (int64_t p = 0; p < n;) {
    size_t want = (size_t)(n - p < CHUNK ? n - p : CHUNK);
    if (fread(buf, elem, want, f) != want) {
      npy_fail(err, errsize, flag, path, "read error at element %" PRId64, p);
      goto done;
    }
    for (size_t i = 0; i < want; i++, p++) {
      int64_t v;
      if (elem == 8) {
        memcpy(&v, (const char *)buf + i * 8, 8);
      } else {
        int32_t v32;
        memcpy(&v32, (const char *)buf + i * 4, 4);
        v = v32;
      }
      if (v < 0 || v >= bound) {
        npy_fail(err, errsize, flag, path,
                 "id %" PRId64 " at row %" PRId64 ", column %" PRId64
                 " is outside [0, %" PRId64 ")",
                 v, p / cols, p % cols, bound);
        goto done;
      }
    }
  }
  *rows = dims[0];
  ok = true;
done:
  free(buf);
  free(h);
  fclose(f);
  return ok;
}
