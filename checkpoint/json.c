/* The checkpoint module's JSON reader and writer (json.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

typedef struct parser {
  const char *p, *end, *start;
  sl_arena *arena;
} parser;

static sl_status perr(parser *ps, const char *what) {
  return sl__fail(SL_EINVAL, "at byte %zu: %s", (size_t)(ps->p - ps->start),
                  what);
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end &&
         (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(parser *ps, uint32_t *out) {
  if (ps->end - ps->p < 4) return false;
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(ps->p[k]);
    if (h < 0) return false;
    v = v << 4 | (uint32_t)h;
  }
  ps->p += 4;
  *out = v;
  return true;
}

/* The length of the UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing past U+10FFFF), 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n) return 0;
  for (size_t k = 1; k < n; k++) {
    if ((p[k] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[k] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* At the opening quote. The decoded text is never longer than the quoted
 * text, so one allocation of that size holds it. */
static sl_status parse_string(parser *ps, const char **out) {
  ps->p++;
  const char *q = ps->p;
  while (q < ps->end && *q != '"') {
    if (*q == '\\' && q + 1 < ps->end) q++;
    q++;
  }
  if (q >= ps->end) return perr(ps, "unterminated string");
  char *o = sl__arena_alloc(ps->arena, (size_t)(q - ps->p) + 1);
  if (!o) return SL_ENOMEM;
  char *w = o;
  while (*ps->p != '"') {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) return perr(ps, "control character in a string");
    if (c != '\\') {
      size_t n = utf8_len((const unsigned char *)ps->p,
                          (const unsigned char *)ps->end);
      if (n == 0) return perr(ps, "invalid UTF-8 in a string");
      memcpy(w, ps->p, n);
      w += n;
      ps->p += n;
      continue;
    }
    ps->p++;
    char e = *ps->p++;
    switch (e) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '/': *w++ = '/'; break;
    case 'b': *w++ = '\b'; break;
    case 'f': *w++ = '\f'; break;
    case 'n': *w++ = '\n'; break;
    case 'r': *w++ = '\r'; break;
    case 't': *w++ = '\t'; break;
    case 'u': {
      uint32_t cp;
      if (!read_hex4(ps, &cp)) return perr(ps, "bad \\u escape");
      if (cp >= 0xdc00 && cp <= 0xdfff)
        return perr(ps, "lone low surrogate in \\u escape");
      if (cp >= 0xd800 && cp <= 0xdbff) {
        uint32_t lo;
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
          return perr(ps, "high surrogate without its low half");
        ps->p += 2;
        if (!read_hex4(ps, &lo) || lo < 0xdc00 || lo > 0xdfff)
          return perr(ps, "high surrogate without its low half");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp == 0) return perr(ps, "\\u0000 in a string");
      w += put_utf8(w, cp);
      break;
    }
    default: ps->p--; return perr(ps, "unknown escape in a string");
    }
  }
  ps->p++;
  *w = '\0';
  *out = o;
  return SL_OK;
}

static sl_status parse_int(parser *ps, int64_t *out) {
  bool neg = false;
  if (*ps->p == '-') {
    neg = true;
    ps->p++;
  }
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
    return perr(ps, "expected a digit");
  if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' &&
      ps->p[1] <= '9')
    return perr(ps, "leading zero in a number");
  /* Accumulate negatively so that INT64_MIN fits. */
  int64_t v = 0;
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    int d = *ps->p - '0';
    if (v < (INT64_MIN + d) / 10) return perr(ps, "integer out of range");
    v = v * 10 - d;
    ps->p++;
  }
  if (ps->p < ps->end && (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'))
    return perr(ps, "only integers are accepted");
  if (!neg) {
    if (v == INT64_MIN) return perr(ps, "integer out of range");
    v = -v;
  }
  *out = v;
  return SL_OK;
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(**(const char *const *const *)a,
                **(const char *const *const *)b);
}

static sl_status parse_value(parser *ps, sl__json *v, int depth);

/* Items of an array or object, collected in a malloc'd vector, then copied
 * into the arena. */
static sl_status parse_container(parser *ps, sl__json *v, int depth,
                                 bool object) {
  sl_status st = SL_OK;
  sl__json *items = NULL;
  const char **keys = NULL;
  const char ***sorted = NULL;
  int32_t n = 0, cap = 0;
  char close = object ? '}' : ']';
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    goto done;
  }
  for (;;) {
    if (n == cap) {
      if (cap >= INT32_MAX / 2) {
        st = perr(ps, "too many items");
        goto fail;
      }
      cap = cap ? cap * 2 : 8;
      sl__json *ni = sl__reallocarray(items, (size_t)cap, sizeof *ni);
      if (!ni) {
        st = SL_ENOMEM;
        goto fail;
      }
      items = ni;
      if (object) {
        const char **nk = sl__reallocarray(keys, (size_t)cap, sizeof *nk);
        if (!nk) {
          st = SL_ENOMEM;
          goto fail;
        }
        keys = nk;
      }
    }
    skip_ws(ps);
    if (object) {
      if (ps->p >= ps->end || *ps->p != '"') {
        st = perr(ps, "expected a string key");
        goto fail;
      }
      SL_CHECK_GOTO(parse_string(ps, &keys[n]), st, fail);
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') {
        st = perr(ps, "expected ':'");
        goto fail;
      }
      ps->p++;
    }
    memset(&items[n], 0, sizeof items[n]);
    SL_CHECK_GOTO(parse_value(ps, &items[n], depth + 1), st, fail);
    n++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      break;
    }
    st = perr(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    goto fail;
  }
  if (object && n > 1) {
    sorted = sl__reallocarray(NULL, (size_t)n, sizeof *sorted);
    if (!sorted) {
      st = SL_ENOMEM;
      goto fail;
    }
    for (int32_t k = 0; k < n; k++)
      sorted[k] = &keys[k];
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_keys);
    for (int32_t k = 1; k < n; k++)
      if (strcmp(*sorted[k - 1], *sorted[k]) == 0) {
        st = sl__fail(SL_EINVAL, "at byte %zu: duplicate key '%.200s'",
                      (size_t)(ps->p - ps->start), *sorted[k]);
        goto fail;
      }
  }
done:
  v->kind = object ? SL__JSON_OBJECT : SL__JSON_ARRAY;
  v->n = n;
  if (n > 0) {
    v->items = sl__arena_alloc(ps->arena, (size_t)n * sizeof *items);
    if (!v->items) {
      st = SL_ENOMEM;
      goto fail;
    }
    memcpy(v->items, items, (size_t)n * sizeof *items);
    if (object) {
      v->keys = sl__arena_alloc(ps->arena, (size_t)n * sizeof *keys);
      if (!v->keys) {
        st = SL_ENOMEM;
        goto fail;
      }
      memcpy(v->keys, keys, (size_t)n * sizeof *keys);
    }
  }
fail:
  sl__free(sorted);
  sl__free(items);
  sl__free(keys);
  return st;
}

static bool literal(parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
    return false;
  ps->p += n;
  return true;
}

static sl_status parse_value(parser *ps, sl__json *v, int depth) {
  if (depth > SL__JSON_MAX_DEPTH) return perr(ps, "nested too deeply");
  skip_ws(ps);
  if (ps->p >= ps->end) return perr(ps, "unexpected end of text");
  char c = *ps->p;
  if (c == '{' || c == '[') return parse_container(ps, v, depth, c == '{');
  if (c == '"') {
    v->kind = SL__JSON_STRING;
    return parse_string(ps, &v->s);
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    v->kind = SL__JSON_INT;
    return parse_int(ps, &v->i);
  }
  if (literal(ps, "true")) {
    v->kind = SL__JSON_BOOL;
    v->b = true;
    return SL_OK;
  }
  if (literal(ps, "false")) {
    v->kind = SL__JSON_BOOL;
    return SL_OK;
  }
  if (literal(ps, "null")) {
    v->kind = SL__JSON_NULL;
    return SL_OK;
  }
  return perr(ps, "expected a value");
}

sl_status sl__json_parse(const char *text, size_t len, sl_arena *a,
                         const sl__json **out) {
  *out = NULL;
  parser ps = {text, text + len, text, a};
  sl__json *v = sl__arena_alloc(a, sizeof *v);
  if (!v) return SL_ENOMEM;
  sl_status st = parse_value(&ps, v, 0);
  if (st != SL_OK) return st;
  skip_ws(&ps);
  if (ps.p != ps.end) return perr(&ps, "text after the value");
  *out = v;
  return SL_OK;
}

const sl__json *sl__json_get(const sl__json *v, const char *key) {
  if (!v || v->kind != SL__JSON_OBJECT) return NULL;
  for (int32_t k = 0; k < v->n; k++)
    if (strcmp(v->keys[k], key) == 0) return &v->items[k];
  return NULL;
}

/* ---- writer ------------------------------------------------------------ */

void sl__jbuf_free(sl__jbuf *b) {
  sl__free(b->data);
  memset(b, 0, sizeof *b);
}

static bool reserve(sl__jbuf *b, size_t n) {
  if (b->failed) return false;
  if (b->len + n + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + n + 1) {
    if (cap > SIZE_MAX / 2) {
      b->failed = true;
      return false;
    }
    cap *= 2;
  }
  char *d = sl__realloc(b->data, cap);
  if (!d) {
    b->failed = true;
    return false;
  }
  b->data = d;
  b->cap = cap;
  return true;
}

void sl__jbuf_append(sl__jbuf *b, const void *p, size_t n) {
  if (!reserve(b, n)) return;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void sl__jbuf_puts(sl__jbuf *b, const char *s) {
  sl__jbuf_append(b, s, strlen(s));
}

void sl__jbuf_printf(sl__jbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void sl__jbuf_string(sl__jbuf *b, const char *s) {
  sl__jbuf_append(b, "\"", 1);
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      sl__jbuf_append(b, e, 2);
    } else if (c < 0x20) {
      sl__jbuf_printf(b, "\\u%04x", c);
    } else {
      sl__jbuf_append(b, p, 1);
    }
  }
  sl__jbuf_append(b, "\"", 1);
}

void sl__jbuf_int(sl__jbuf *b, int64_t v) {
  sl__jbuf_printf(b, "%lld", (long long)v);
}

void sl__jbuf_ints(sl__jbuf *b, int n, const int64_t *v) {
  sl__jbuf_append(b, "[", 1);
  for (int k = 0; k < n; k++) {
    if (k) sl__jbuf_append(b, ", ", 2);
    sl__jbuf_int(b, v[k]);
  }
  sl__jbuf_append(b, "]", 1);
}

sl_status sl__jbuf_status(const sl__jbuf *b) {
  return b->failed ? sl__fail(SL_ENOMEM, "out of memory building JSON text")
                   : SL_OK;
}
