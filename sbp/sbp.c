/* SBP and nd-SBP values: constructors, comparison, parsing, printing and the
 * fit check against a placement and a shape. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sbp_int.h"

const char *sl_reduce_op_name(sl_reduce_op op) {
  switch (op) {
  case SL_REDUCE_SUM: return "sum";
  case SL_REDUCE_MAX: return "max";
  case SL_REDUCE_MIN: return "min";
  }
  return "?";
}

static bool valid_reduce(sl_reduce_op op) {
  return op == SL_REDUCE_SUM || op == SL_REDUCE_MAX || op == SL_REDUCE_MIN;
}

sl_sbp sl_sbp_split(int axis) {
  sl_sbp s = {SL_SBP_SPLIT, axis, SL_REDUCE_SUM};
  return s;
}

sl_sbp sl_sbp_broadcast(void) {
  sl_sbp s = {SL_SBP_BROADCAST, 0, SL_REDUCE_SUM};
  return s;
}

sl_sbp sl_sbp_partial(sl_reduce_op op) {
  sl_sbp s = {SL_SBP_PARTIAL, 0, op};
  return s;
}

/* Fields that the kind does not use are ignored. */
bool sl_sbp_equal(sl_sbp a, sl_sbp b) {
  if (a.kind != b.kind) return false;
  if (a.kind == SL_SBP_SPLIT) return a.axis == b.axis;
  if (a.kind == SL_SBP_PARTIAL) return a.reduce == b.reduce;
  return true;
}

bool sl_nd_sbp_equal(const sl_nd_sbp *a, const sl_nd_sbp *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim && i < SL_MAX_MESH_AXES; i++)
    if (!sl_sbp_equal(a->sbp[i], b->sbp[i])) return false;
  return true;
}

/* ---- parsing ----------------------------------------------------------- */

typedef struct parser {
  const char *text; /* the whole input, for messages */
  const char *p;
  const char *what; /* "SBP" or "nd-SBP" */
} parser;

static void skip_space(parser *ps) {
  while (*ps->p && isspace((unsigned char)*ps->p))
    ps->p++;
}

static bool word_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '+';
}

/* The token at the cursor, quoted, for messages: a word, one punctuation
 * character, or "end of text". */
static const char *token_at(const char *p, char *buf, size_t size) {
  if (!*p) return "end of text";
  int n = 1;
  if (word_char(*p))
    while (word_char(p[n]) && n < 32)
      n++;
  snprintf(buf, size, "'%.*s'", n, p);
  return buf;
}

static sl_status parse_fail(parser *ps, const char *expected) {
  char tok[48];
  return sl__fail(SL_EINVAL, "%s '%.80s': expected %s, got %s", ps->what,
                  ps->text, expected, token_at(ps->p, tok, sizeof tok));
}

static bool accept(parser *ps, char c) {
  skip_space(ps);
  if (*ps->p != c) return false;
  ps->p++;
  return true;
}

static sl_status expect(parser *ps, char c, const char *expected) {
  if (accept(ps, c)) return SL_OK;
  return parse_fail(ps, expected);
}

static sl_status parse_axis(parser *ps, int *axis) {
  skip_space(ps);
  const char *start = ps->p;
  if (!isdigit((unsigned char)*start))
    return parse_fail(ps, "a split axis (a non-negative integer)");
  long v = 0;
  while (isdigit((unsigned char)*ps->p)) {
    if (v < 1000) v = v * 10 + (*ps->p - '0');
    ps->p++;
  }
  if (word_char(*ps->p)) {
    ps->p = start;
    return parse_fail(ps, "a split axis (a non-negative integer)");
  }
  if (v >= SL_MAX_DIMS)
    return sl__fail(SL_EINVAL,
                    "%s '%.80s': split axis '%.*s' out of range "
                    "[0, %d]",
                    ps->what, ps->text, (int)(ps->p - start), start,
                    SL_MAX_DIMS - 1);
  *axis = (int)v;
  return SL_OK;
}

static sl_status parse_reduce(parser *ps, sl_reduce_op *op) {
  skip_space(ps);
  static const struct {
    const char *name;
    sl_reduce_op op;
  } ops[] = {
      {"sum", SL_REDUCE_SUM}, {"max", SL_REDUCE_MAX}, {"min", SL_REDUCE_MIN}};
  int n = 0;
  while (word_char(ps->p[n]))
    n++;
  for (size_t i = 0; i < SL_ARRAY_LEN(ops); i++)
    if (n == (int)strlen(ops[i].name) && strncmp(ps->p, ops[i].name, n) == 0) {
      ps->p += n;
      *op = ops[i].op;
      return SL_OK;
    }
  if (n == 0) return parse_fail(ps, "a reduce op (sum, max or min)");
  return sl__fail(SL_EINVAL,
                  "%s '%.80s': unknown reduce op '%.*s' (expected "
                  "sum, max or min)",
                  ps->what, ps->text, n > 32 ? 32 : n, ps->p);
}

static sl_status parse_one(parser *ps, sl_sbp *out) {
  skip_space(ps);
  char c = *ps->p;
  /* Letters must stand alone: "Bx" or "Split" is an unknown token. */
  if ((c == 'S' || c == 'B' || c == 'P') && !word_char(ps->p[1])) {
    ps->p++;
    if (c == 'B') {
      *out = sl_sbp_broadcast();
      return SL_OK;
    }
    if (c == 'S') {
      int axis = 0;
      SL_CHECK(expect(ps, '(', "'(' after 'S'"));
      SL_CHECK(parse_axis(ps, &axis));
      SL_CHECK(expect(ps, ')', "')' after the split axis"));
      *out = sl_sbp_split(axis);
      return SL_OK;
    }
    sl_reduce_op op = SL_REDUCE_SUM;
    if (accept(ps, '(')) {
      SL_CHECK(parse_reduce(ps, &op));
      SL_CHECK(expect(ps, ')', "')' after the reduce op"));
    }
    *out = sl_sbp_partial(op);
    return SL_OK;
  }
  if (!word_char(c))
    return parse_fail(ps, "an SBP (S(axis), B, P, P(max) or P(min))");
  char tok[48];
  return sl__fail(SL_EINVAL,
                  "%s '%.80s': unknown SBP %s (expected S(axis), B, "
                  "P, P(max) or P(min))",
                  ps->what, ps->text, token_at(ps->p, tok, sizeof tok));
}

static sl_status parse_end(parser *ps) {
  skip_space(ps);
  if (!*ps->p) return SL_OK;
  return parse_fail(ps, "end of text");
}

sl_status sl_sbp_parse(const char *text, sl_sbp *out) {
  sl_sbp zero = {0};
  *out = zero;
  if (!text) return sl__fail(SL_EINVAL, "SBP: NULL text");
  parser ps = {text, text, "SBP"};
  skip_space(&ps);
  if (!*ps.p) return sl__fail(SL_EINVAL, "SBP '%.80s': empty", text);
  sl_sbp s;
  SL_CHECK(parse_one(&ps, &s));
  SL_CHECK(parse_end(&ps));
  *out = s;
  return SL_OK;
}

sl_status sl_nd_sbp_parse(const char *text, sl_nd_sbp *out) {
  sl_nd_sbp zero = {0};
  *out = zero;
  if (!text) return sl__fail(SL_EINVAL, "nd-SBP: NULL text");
  parser ps = {text, text, "nd-SBP"};
  skip_space(&ps);
  if (!*ps.p) return sl__fail(SL_EINVAL, "nd-SBP '%.80s': empty", text);
  sl_nd_sbp s = {0};
  if (!accept(&ps, '(')) {
    SL_CHECK(parse_one(&ps, &s.sbp[0]));
    s.ndim = 1;
  } else {
    if (accept(&ps, ')'))
      return sl__fail(SL_EINVAL, "nd-SBP '%.80s': no entries", text);
    do {
      if (s.ndim == SL_MAX_MESH_AXES)
        return sl__fail(SL_EINVAL,
                        "nd-SBP '%.80s': more than %d entries (one "
                        "per mesh axis)",
                        text, SL_MAX_MESH_AXES);
      SL_CHECK(parse_one(&ps, &s.sbp[s.ndim]));
      s.ndim++;
    } while (accept(&ps, ','));
    SL_CHECK(expect(&ps, ')', "',' or ')'"));
  }
  SL_CHECK(parse_end(&ps));
  *out = s;
  return SL_OK;
}

/* ---- printing ---------------------------------------------------------- */

int sl_sbp_print(sl_sbp s, char *buf, size_t size) {
  switch (s.kind) {
  case SL_SBP_SPLIT: return snprintf(buf, size, "S(%d)", s.axis);
  case SL_SBP_BROADCAST: return snprintf(buf, size, "B");
  case SL_SBP_PARTIAL:
    if (s.reduce == SL_REDUCE_SUM) return snprintf(buf, size, "P");
    return snprintf(buf, size, "P(%s)", sl_reduce_op_name(s.reduce));
  }
  return snprintf(buf, size, "?");
}

int sl_nd_sbp_print(const sl_nd_sbp *s, char *buf, size_t size) {
  if (s->ndim == 1) return sl_sbp_print(s->sbp[0], buf, size);
  /* At most 4 entries of at most 8 characters ("P(max)", "S(7)"). */
  char text[96];
  size_t len = 0;
  int n = s->ndim < 0 ? 0 : SL_MIN(s->ndim, SL_MAX_MESH_AXES);
  text[len++] = '(';
  for (int i = 0; i < n; i++) {
    if (i) text[len++] = ',';
    int k = sl_sbp_print(s->sbp[i], text + len, sizeof text - len);
    len += (size_t)k;
  }
  text[len++] = ')';
  text[len] = '\0';
  return snprintf(buf, size, "%s", text);
}

/* ---- fit check --------------------------------------------------------- */

sl_status sl_nd_sbp_check(const sl_nd_sbp *s, const sl_placement *p,
                          const sl_shape *shape) {
  if (!s || !p || !shape)
    return sl__fail(SL_EINVAL, "nd-SBP check: NULL argument");
  if (s->ndim < 1 || s->ndim > SL_MAX_MESH_AXES)
    return sl__fail(SL_EINVAL, "nd-SBP: %d entries; an nd-SBP has 1 to %d",
                    s->ndim, SL_MAX_MESH_AXES);
  char text[128], ptext[128], stext[96];
  sl_nd_sbp_print(s, text, sizeof text);
  int mesh_ndim = sl_placement_mesh_ndim(p);
  if (s->ndim != mesh_ndim) {
    sl_placement_print(p, ptext, sizeof ptext);
    return sl__fail(SL_EINVAL,
                    "nd-SBP '%s' has %d %s but placement '%s' has "
                    "a %d-axis mesh",
                    text, s->ndim, s->ndim == 1 ? "entry" : "entries", ptext,
                    mesh_ndim);
  }
  bool have_partial = false;
  sl_reduce_op partial = SL_REDUCE_SUM;
  for (int i = 0; i < s->ndim; i++) {
    sl_sbp e = s->sbp[i];
    switch (e.kind) {
    case SL_SBP_BROADCAST: break;
    case SL_SBP_SPLIT:
      if (e.axis < 0 || e.axis >= shape->ndim) {
        sl_shape_print(shape, stext, sizeof stext);
        return sl__fail(SL_EINVAL,
                        "nd-SBP '%s': split axis %d out of range "
                        "for the %d-dim shape %s",
                        text, e.axis, shape->ndim, stext);
      }
      break;
    case SL_SBP_PARTIAL:
      if (!valid_reduce(e.reduce))
        return sl__fail(SL_EINVAL,
                        "nd-SBP '%s': entry %d has unknown reduce "
                        "op %d",
                        text, i, (int)e.reduce);
      if (have_partial && e.reduce != partial)
        return sl__fail(SL_EINVAL,
                        "nd-SBP '%s' mixes partial %s and partial "
                        "%s: a mix has no single logical value",
                        text, sl_reduce_op_name(partial),
                        sl_reduce_op_name(e.reduce));
      have_partial = true;
      partial = e.reduce;
      break;
    default:
      return sl__fail(SL_EINVAL, "nd-SBP: entry %d has unknown kind %d", i,
                      (int)e.kind);
    }
  }
  return SL_OK;
}
