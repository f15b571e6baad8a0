/* Op attributes: a small named set carried by value. */
#include <stdio.h>
#include <string.h>

#include "op.h"

static sl__attr *slot(sl__attrs *at, const char *name) {
  for (int i = 0; i < at->n; i++)
    if (strcmp(at->a[i].name, name) == 0) return &at->a[i];
  if (at->n == SL_OP_MAX_ATTRS) {
    sl__fail(SL_EINVAL, "more than %d attributes (adding '%s')",
             SL_OP_MAX_ATTRS, name);
    return NULL;
  }
  sl__attr *a = &at->a[at->n++];
  memset(a, 0, sizeof *a);
  a->name = name;
  return a;
}

static const sl__attr *find(const sl__attrs *at, const char *name,
                            sl__attr_kind kind) {
  for (int i = 0; at && i < at->n; i++)
    if (strcmp(at->a[i].name, name) == 0)
      return at->a[i].kind == kind ? &at->a[i] : NULL;
  return NULL;
}

sl_status sl__attrs_set_int(sl__attrs *at, const char *name, int64_t v) {
  sl__attr *a = slot(at, name);
  if (!a) return SL_EINVAL;
  a->kind = SL__ATTR_INT;
  a->i = v;
  return SL_OK;
}

sl_status sl__attrs_set_float(sl__attrs *at, const char *name, double v) {
  sl__attr *a = slot(at, name);
  if (!a) return SL_EINVAL;
  a->kind = SL__ATTR_FLOAT;
  a->f = v;
  return SL_OK;
}

sl_status sl__attrs_set_ints(sl__attrs *at, const char *name, int n,
                             const int64_t *v) {
  if (n < 0 || n > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "attribute '%s': %d values, at most %d", name,
                    n, SL_MAX_DIMS);
  sl__attr *a = slot(at, name);
  if (!a) return SL_EINVAL;
  a->kind = SL__ATTR_INTS;
  a->n = n;
  if (n) memcpy(a->ints, v, (size_t)n * sizeof *v);
  return SL_OK;
}

int64_t sl__attr_int(const sl__attrs *at, const char *name, int64_t dflt) {
  const sl__attr *a = find(at, name, SL__ATTR_INT);
  return a ? a->i : dflt;
}

double sl__attr_float(const sl__attrs *at, const char *name, double dflt) {
  const sl__attr *a = find(at, name, SL__ATTR_FLOAT);
  return a ? a->f : dflt;
}

const int64_t *sl__attr_ints(const sl__attrs *at, const char *name, int *n) {
  const sl__attr *a = find(at, name, SL__ATTR_INTS);
  *n = a ? a->n : 0;
  return a ? a->ints : NULL;
}

bool sl__attr_has(const sl__attrs *at, const char *name) {
  for (int i = 0; at && i < at->n; i++)
    if (strcmp(at->a[i].name, name) == 0) return true;
  return false;
}

int sl__attrs_print(const sl__attrs *at, char *buf, size_t size) {
  int len = 0;
  if (size) buf[0] = '\0';
#define PUT(...)                                                               \
  do {                                                                         \
    size_t room = (size_t)len < size ? size - (size_t)len : 0;                 \
    int w = snprintf(room ? buf + len : NULL, room, __VA_ARGS__);              \
    if (w > 0) len += w;                                                       \
  } while (0)
  for (int i = 0; i < at->n; i++) {
    const sl__attr *a = &at->a[i];
    PUT("%s%s=", i ? " " : "", a->name);
    switch (a->kind) {
    case SL__ATTR_INT: PUT("%lld", (long long)a->i); break;
    case SL__ATTR_FLOAT: PUT("%g", a->f); break;
    case SL__ATTR_INTS:
      PUT("[");
      for (int j = 0; j < a->n; j++) PUT("%s%lld", j ? "," : "", (long long)a->ints[j]);
      PUT("]");
      break;
    }
  }
#undef PUT
  return len;
}
