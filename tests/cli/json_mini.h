/* A small strict JSON reader for the CLI tests: parses a whole document
 * into a tree and rejects anything RFC 8259 does not allow (trailing
 * commas, leading zeros, NaN, raw control characters, trailing text), so
 * the tests check both that the output is valid JSON and what it says. */
#ifndef SLUICE_TEST_JSON_MINI_H
#define SLUICE_TEST_JSON_MINI_H

#include <stdbool.h>
#include <stddef.h>

typedef enum jv_kind {
  JV_NULL,
  JV_BOOL,
  JV_NUMBER,
  JV_STRING,
  JV_ARRAY,
  JV_OBJECT
} jv_kind;

typedef struct jv jv;

/* The tree of text, or NULL with a message (and byte offset) in err. */
jv *jv_parse(const char *text, char *err, size_t err_size);
void jv_free(jv *v);

jv_kind jv_type(const jv *v);
/* Array / object entry count (0 for other kinds). */
int jv_len(const jv *v);
/* Array element i, or NULL. */
const jv *jv_at(const jv *v, int i);
/* Object member by key, or NULL (also NULL when v is not an object). */
const jv *jv_get(const jv *v, const char *key);
/* Object key i, or NULL. */
const char *jv_key(const jv *v, int i);
double jv_num(const jv *v);
bool jv_bool(const jv *v);
const char *jv_str(const jv *v);

#endif
