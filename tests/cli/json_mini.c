/* A strict recursive-descent JSON reader (see json_mini.h). */
#include "json_mini.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jv {
  jv_kind kind;
  bool b;
  double num;
  char *str;
  int len;
  jv **items;
  char **keys; /* objects only */
};

typedef struct reader {
  const char *text, *p;
  char *err;
  size_t err_size;
  bool failed;
  int depth;
} reader;

static jv *fail(reader *r, const char *fmt, ...) {
  if (r->failed) return NULL;
  r->failed = true;
  char msg[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (r->err_size)
    snprintf(r->err, r->err_size, "%s at byte %ld", msg,
             (long)(r->p - r->text));
  return NULL;
}

static void ws(reader *r) {
  while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')
    r->p++;
}

static jv *new_value(jv_kind k) {
  jv *v = calloc(1, sizeof *v);
  if (v) v->kind = k;
  return v;
}

static bool push(jv *v, jv *item, char *key) {
  jv **items = realloc(v->items, (size_t)(v->len + 1) * sizeof *items);
  if (!items) return false;
  v->items = items;
  if (v->kind == JV_OBJECT) {
    char **keys = realloc(v->keys, (size_t)(v->len + 1) * sizeof *keys);
    if (!keys) return false;
    v->keys = keys;
    v->keys[v->len] = key;
  }
  v->items[v->len++] = item;
  return true;
}

static void put_utf8(char **o, unsigned cp) {
  char *q = *o;
  if (cp < 0x80) {
    *q++ = (char)cp;
  } else if (cp < 0x800) {
    *q++ = (char)(0xc0 | (cp >> 6));
    *q++ = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *q++ = (char)(0xe0 | (cp >> 12));
    *q++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *q++ = (char)(0x80 | (cp & 0x3f));
  } else {
    *q++ = (char)(0xf0 | (cp >> 18));
    *q++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *q++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *q++ = (char)(0x80 | (cp & 0x3f));
  }
  *o = q;
}

static bool hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    unsigned d = isdigit((unsigned char)c) ? (unsigned)(c - '0')
                 : (c >= 'a' && c <= 'f')  ? (unsigned)(c - 'a' + 10)
                 : (c >= 'A' && c <= 'F')  ? (unsigned)(c - 'A' + 10)
                                           : 16u;
    if (d == 16) return false;
    v = v * 16 + d;
  }
  *out = v;
  return true;
}

/* r->p is at the opening quote. The decoded text is never longer than the
 * escaped one, so one allocation of the raw length suffices. */
static char *parse_string(reader *r) {
  const char *start = ++r->p;
  while (*r->p && *r->p != '"')
    r->p += (*r->p == '\\' && r->p[1]) ? 2 : 1;
  if (*r->p != '"') return (fail(r, "unterminated string"), NULL);
  size_t raw = (size_t)(r->p - start);
  char *s = malloc(raw + 1), *o = s;
  if (!s) return (fail(r, "out of memory"), NULL);
  for (const char *q = start; q < r->p; q++) {
    unsigned char c = (unsigned char)*q;
    if (c < 0x20) {
      free(s);
      r->p = q;
      return (fail(r, "raw control character in string"), NULL);
    }
    if (c != '\\') {
      *o++ = (char)c;
      continue;
    }
    q++;
    switch (*q) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp;
      if (q + 4 >= r->p || !hex4(q + 1, &cp)) {
        free(s);
        return (fail(r, "bad \\u escape"), NULL);
      }
      q += 4;
      put_utf8(&o, cp); /* surrogates pass through unpaired: tests only */
      break;
    }
    default:
      free(s);
      r->p = q;
      return (fail(r, "bad escape"), NULL);
    }
  }
  *o = '\0';
  r->p++;
  return s;
}

/* RFC 8259 number grammar, checked before strtod (which accepts more). */
static jv *parse_number(reader *r) {
  const char *p = r->p;
  if (*p == '-') p++;
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    while (isdigit((unsigned char)*p))
      p++;
  } else {
    return fail(r, "bad number");
  }
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return fail(r, "bad fraction");
    while (isdigit((unsigned char)*p))
      p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (!isdigit((unsigned char)*p)) return fail(r, "bad exponent");
    while (isdigit((unsigned char)*p))
      p++;
  }
  jv *v = new_value(JV_NUMBER);
  if (!v) return fail(r, "out of memory");
  v->num = strtod(r->p, NULL);
  r->p = p;
  return v;
}

static jv *parse_value(reader *r);

static jv *parse_container(reader *r, bool object) {
  char close = object ? '}' : ']';
  jv *v = new_value(object ? JV_OBJECT : JV_ARRAY);
  if (!v) return fail(r, "out of memory");
  r->p++;
  ws(r);
  if (*r->p == close) {
    r->p++;
    return v;
  }
  for (;;) {
    char *key = NULL;
    ws(r);
    if (object) {
      if (*r->p != '"') {
        fail(r, "expected a key");
        break;
      }
      key = parse_string(r);
      if (!key) break;
      ws(r);
      if (*r->p != ':') {
        free(key);
        fail(r, "expected ':'");
        break;
      }
      r->p++;
    }
    jv *item = parse_value(r);
    if (!item || !push(v, item, key)) {
      free(key);
      jv_free(item);
      fail(r, "out of memory");
      break;
    }
    ws(r);
    if (*r->p == ',') {
      r->p++;
      continue;
    }
    if (*r->p == close) {
      r->p++;
      return v;
    }
    fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
    break;
  }
  jv_free(v);
  return NULL;
}

static jv *parse_value(reader *r) {
  ws(r);
  if (++r->depth > 64) return fail(r, "nested too deeply");
  jv *v = NULL;
  switch (*r->p) {
  case '{': v = parse_container(r, true); break;
  case '[': v = parse_container(r, false); break;
  case '"': {
    char *s = parse_string(r);
    if (s && !(v = new_value(JV_STRING))) free(s);
    if (v) v->str = s;
    break;
  }
  case 't':
  case 'f':
  case 'n': {
    const char *words[] = {"true", "false", "null"};
    for (int i = 0; i < 3 && !v; i++) {
      size_t n = strlen(words[i]);
      if (strncmp(r->p, words[i], n) != 0) continue;
      v = new_value(i == 2 ? JV_NULL : JV_BOOL);
      if (v) v->b = i == 0;
      r->p += n;
    }
    if (!v) fail(r, "bad literal");
    break;
  }
  default: v = parse_number(r); break;
  }
  r->depth--;
  return v;
}

jv *jv_parse(const char *text, char *err, size_t err_size) {
  reader r = {text, text, err, err_size, false, 0};
  if (err_size) err[0] = '\0';
  jv *v = parse_value(&r);
  if (v) {
    ws(&r);
    if (*r.p) {
      jv_free(v);
      return fail(&r, "text after the value");
    }
  }
  return v;
}

void jv_free(jv *v) {
  if (!v) return;
  for (int i = 0; i < v->len; i++) {
    jv_free(v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
  free(v);
}

jv_kind jv_type(const jv *v) { return v ? v->kind : JV_NULL; }
int jv_len(const jv *v) {
  return v && (v->kind == JV_ARRAY || v->kind == JV_OBJECT) ? v->len : 0;
}
const jv *jv_at(const jv *v, int i) {
  return v && v->kind == JV_ARRAY && i >= 0 && i < v->len ? v->items[i] : NULL;
}
const jv *jv_get(const jv *v, const char *key) {
  if (!v || v->kind != JV_OBJECT) return NULL;
  for (int i = 0; i < v->len; i++)
    if (strcmp(v->keys[i], key) == 0) return v->items[i];
  return NULL;
}
const char *jv_key(const jv *v, int i) {
  return v && v->kind == JV_OBJECT && i >= 0 && i < v->len ? v->keys[i] : NULL;
}
double jv_num(const jv *v) { return v && v->kind == JV_NUMBER ? v->num : 0; }
bool jv_bool(const jv *v) { return v && v->kind == JV_BOOL && v->b; }
const char *jv_str(const jv *v) {
  return v && v->kind == JV_STRING ? v->str : NULL;
}
