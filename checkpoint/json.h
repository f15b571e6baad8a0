/* A small, strict JSON reader and writer, just big enough for checkpoint
 * indexes and safetensors headers (docs/checkpoint.md).
 *
 * The reader takes objects, arrays, strings (every escape, \u surrogate
 * pairs, UTF-8 checked), integers that fit int64, true, false and null. It
 * rejects fractions and exponents, duplicate object keys, a NUL inside a
 * string, nesting deeper than SL__JSON_MAX_DEPTH and trailing text other
 * than whitespace. Everything lives in an arena; bad input is an error
 * naming the byte offset, never a crash. */
#ifndef SLUICE_CKPT_JSON_H
#define SLUICE_CKPT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core_int.h"

#define SL__JSON_MAX_DEPTH 32

typedef enum sl__json_kind {
  SL__JSON_NULL = 0,
  SL__JSON_BOOL,
  SL__JSON_INT,
  SL__JSON_STRING,
  SL__JSON_ARRAY,
  SL__JSON_OBJECT,
} sl__json_kind;

typedef struct sl__json sl__json;
struct sl__json {
  sl__json_kind kind;
  bool b;
  int64_t i;
  const char *s;     /* STRING: NUL-terminated (no NUL inside) */
  int32_t n;         /* ARRAY, OBJECT: number of items */
  sl__json *items;   /* ARRAY, OBJECT: the values */
  const char **keys; /* OBJECT: the keys, in document order */
};

/* Parses text[0..len) into the arena. SL_EINVAL with "at byte N: ..." as
 * the message, SL_ENOMEM. *out is NULL on failure. */
sl_status sl__json_parse(const char *text, size_t len, sl_arena *a,
                         const sl__json **out);

/* The value of key in an object, NULL when absent or v is no object. */
const sl__json *sl__json_get(const sl__json *v, const char *key);

/* A growing text buffer. Errors are sticky: after an allocation failure
 * every append is a no-op and sl__jbuf_status says SL_ENOMEM. */
typedef struct sl__jbuf {
  char *data;
  size_t len, cap;
  bool failed;
} sl__jbuf;

void sl__jbuf_free(sl__jbuf *b);
void sl__jbuf_append(sl__jbuf *b, const void *p, size_t n);
void sl__jbuf_puts(sl__jbuf *b, const char *s);
void sl__jbuf_printf(sl__jbuf *b, const char *fmt, ...) SL__PRINTF(2, 3);
/* s as a JSON string literal, quotes included. */
void sl__jbuf_string(sl__jbuf *b, const char *s);
void sl__jbuf_int(sl__jbuf *b, int64_t v);
/* "[d0, d1, ...]" */
void sl__jbuf_ints(sl__jbuf *b, int n, const int64_t *v);
sl_status sl__jbuf_status(const sl__jbuf *b);

#endif
