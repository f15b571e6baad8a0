/* Shapes: construction, parsing ("8,6", "8x6", "[8,6]"), printing, element
 * counts and strides. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"
#include "tensor_int.h"

/* Every shape sluice builds keeps all partial products of its non-zero
 * extents within int64, not just the total: a [2^62, 2^62, 0] tensor has no
 * elements, but a split or a stride over its first two axes would overflow,
 * and no real tensor needs such extents. */
static bool extents_fit(int ndim, const int64_t *dims) {
  int64_t prod = 1;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] == 0) continue;
    if (__builtin_mul_overflow(prod, dims[i], &prod)) return false;
  }
  return true;
}

sl_status sl_shape_make(int ndim, const int64_t *dims, sl_shape *out) {
  memset(out, 0, sizeof *out);
  if (ndim < 0 || ndim > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "shape: %d dims (must be 0 to %d)", ndim,
                    SL_MAX_DIMS);
  if (ndim > 0 && !dims) return sl__fail(SL_EINVAL, "shape: no extents");
  for (int i = 0; i < ndim; i++)
    if (dims[i] < 0)
      return sl__fail(SL_EINVAL, "shape: extent %lld of dim %d is negative",
                      (long long)dims[i], i);
  if (!extents_fit(ndim, dims))
    return sl__fail(SL_EINVAL, "shape: element count overflows int64");
  out->ndim = ndim;
  if (ndim > 0) /* dims may be NULL for a scalar; memcpy wants non-NULL */
    memcpy(out->dims, dims, (size_t)ndim * sizeof dims[0]);
  return SL_OK;
}

/* [b, e) trimmed of ASCII white space. */
static void trim(const char **b, const char **e) {
  while (*b < *e && isspace((unsigned char)**b))
    (*b)++;
  while (*e > *b && isspace((unsigned char)(*e)[-1]))
    (*e)--;
}

/* Parses the token [b, e) as a non-negative decimal extent. */
static sl_status parse_extent(const char *text, const char *b, const char *e,
                              int64_t *out) {
  int len = (int)(e - b);
  if (b == e) return sl__fail(SL_EINVAL, "shape '%s': empty extent", text);
  if (*b == '-') {
    bool digits = e - b > 1;
    for (const char *p = b + 1; p < e; p++)
      digits = digits && isdigit((unsigned char)*p);
    if (digits)
      return sl__fail(SL_EINVAL, "shape '%s': extent '%.*s' is negative", text,
                      len, b);
  }
  int64_t v = 0;
  for (const char *p = b; p < e; p++) {
    if (!isdigit((unsigned char)*p))
      return sl__fail(SL_EINVAL,
                      "shape '%s': extent '%.*s' is not a non-negative "
                      "integer",
                      text, len, b);
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, *p - '0', &v))
      return sl__fail(SL_EINVAL, "shape '%s': extent '%.*s' overflows int64",
                      text, len, b);
  }
  *out = v;
  return SL_OK;
}

sl_status sl_shape_parse(const char *text, sl_shape *out) {
  memset(out, 0, sizeof *out);
  if (!text) return sl__fail(SL_EINVAL, "shape: no text");
  const char *b = text, *e = text + strlen(text);
  trim(&b, &e);
  if (b < e && (*b == '[' || e[-1] == ']')) {
    if (e - b < 2 || *b != '[' || e[-1] != ']')
      return sl__fail(SL_EINVAL, "shape '%s': unbalanced '[' ']'", text);
    b++, e--;
    trim(&b, &e);
  }
  if (b == e) return SL_OK; /* "" and "[]": a scalar */
  /* One separator per shape: "8,6x2" is more likely a typo than a shape. */
  char sep = 0;
  for (const char *p = b; p < e; p++) {
    if (*p != ',' && *p != 'x') continue;
    if (sep && *p != sep)
      return sl__fail(SL_EINVAL, "shape '%s': mixes ',' and 'x' separators",
                      text);
    sep = *p;
  }
  sl_shape s = {0};
  const char *tok = b;
  for (;;) {
    const char *end = tok;
    while (end < e && *end != sep)
      end++;
    if (s.ndim == SL_MAX_DIMS)
      return sl__fail(SL_EINVAL, "shape '%s': more than %d dims", text,
                      SL_MAX_DIMS);
    const char *tb = tok, *te = end;
    trim(&tb, &te);
    SL_CHECK(parse_extent(text, tb, te, &s.dims[s.ndim]));
    s.ndim++;
    if (end == e) break;
    tok = end + 1;
  }
  if (!extents_fit(s.ndim, s.dims))
    return sl__fail(SL_EINVAL, "shape '%s': element count overflows int64",
                    text);
  *out = s;
  return SL_OK;
}

int sl_shape_print(const sl_shape *s, char *buf, size_t size) {
  size_t len = 0;
  char tmp[24];
  /* Appends like snprintf would: counts everything, writes what fits. */
#define PUT(str)                                                               \
  do {                                                                         \
    size_t n_ = strlen(str);                                                   \
    if (len < size) {                                                          \
      size_t k_ = SL_MIN(n_, size - 1 - len);                                  \
      memcpy(buf + len, str, k_);                                              \
      buf[len + k_] = '\0';                                                    \
    }                                                                          \
    len += n_;                                                                 \
  } while (0)
  if (size) buf[0] = '\0';
  PUT("[");
  int ndim = SL_MAX(0, SL_MIN(s->ndim, SL_MAX_DIMS));
  for (int i = 0; i < ndim; i++) {
    snprintf(tmp, sizeof tmp, "%s%lld", i ? "," : "", (long long)s->dims[i]);
    PUT(tmp);
  }
  PUT("]");
#undef PUT
  return (int)len;
}

int64_t sl_shape_numel(const sl_shape *s) {
  /* A shape that sl_shape_make or sl_shape_parse did not vet could overflow;
   * -1 says "not a valid shape" instead of wrapping around. */
  if (s->ndim < 0 || s->ndim > SL_MAX_DIMS) return -1;
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) {
    if (s->dims[i] < 0) return -1;
    if (s->dims[i] == 0) n = 0;
  }
  if (n == 0) return 0;
  for (int i = 0; i < s->ndim; i++)
    if (__builtin_mul_overflow(n, s->dims[i], &n)) return -1;
  return n;
}

bool sl_shape_equal(const sl_shape *a, const sl_shape *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim && i < SL_MAX_DIMS; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

void sl_shape_strides(const sl_shape *s, int64_t *strides) {
  int64_t st = 1;
  for (int i = SL_MIN(s->ndim, SL_MAX_DIMS) - 1; i >= 0; i--) {
    strides[i] = st;
    /* Wraps only for shapes that failed validation; stay defined there. */
    st = (int64_t)((uint64_t)st * (uint64_t)s->dims[i]);
  }
}
