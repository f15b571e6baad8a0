/* safetensors headers: reading and checking them, and building them
 * (docs/formats.md, "Checkpoints"). A file is an 8-byte
 * little-endian length N, N bytes of JSON, then the data section; each
 * entry's data_offsets are relative to the data section. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_int.h"

static const struct {
  const char *name;
  size_t size;
  int dt; /* sl_dtype, -1 when sluice has none */
} dtypes[] = {
    {"F64", 8, SL_DTYPE_F64},
    {"F32", 4, SL_DTYPE_F32},
    {"F16", 2, SL_DTYPE_F16},
    {"BF16", 2, SL_DTYPE_BF16},
    {"I64", 8, SL_DTYPE_I64},
    {"I32", 4, SL_DTYPE_I32},
    {"I8", 1, SL_DTYPE_I8},
    {"U8", 1, SL_DTYPE_U8},
    {"BOOL", 1, SL_DTYPE_BOOL},
    {"I16", 2, -1},
    {"U16", 2, -1},
    {"U32", 4, -1},
    {"U64", 8, -1},
    {"F8_E4M3", 1, -1},
    {"F8_E5M2", 1, -1},
    {"C64", 8, -1},
};

const char *sl__st_dtype_name(sl_dtype dt) {
  for (size_t k = 0; k < SL_ARRAY_LEN(dtypes); k++)
    if (dtypes[k].dt == (int)dt) return dtypes[k].name;
  return NULL;
}

size_t sl__st_dtype_size(const char *name, bool *known, sl_dtype *dt) {
  *known = false;
  *dt = SL_DTYPE_F32;
  for (size_t k = 0; k < SL_ARRAY_LEN(dtypes); k++)
    if (strcmp(dtypes[k].name, name) == 0) {
      if (dtypes[k].dt >= 0) {
        *known = true;
        *dt = (sl_dtype)dtypes[k].dt;
      }
      return dtypes[k].size;
    }
  return 0;
}

bool sl__json_dims(const sl__json *v, sl_shape *out) {
  memset(out, 0, sizeof *out);
  if (!v || v->kind != SL__JSON_ARRAY || v->n > SL_MAX_DIMS) return false;
  int64_t numel = 1;
  for (int32_t d = 0; d < v->n; d++) {
    if (v->items[d].kind != SL__JSON_INT || v->items[d].i < 0) return false;
    if (__builtin_mul_overflow(numel, v->items[d].i, &numel)) return false;
    out->dims[d] = v->items[d].i;
  }
  out->ndim = v->n;
  return true;
}

static int cmp_entry_key(const void *a, const void *b) {
  return strcmp(((const sl__st_entry *)a)->key, ((const sl__st_entry *)b)->key);
}

static int cmp_entry_begin(const void *a, const void *b) {
  const sl__st_entry *x = *(const sl__st_entry *const *)a;
  const sl__st_entry *y = *(const sl__st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static sl_status parse_entry(const char *what, const char *key,
                             const sl__json *v, int64_t data_bytes,
                             sl__st_entry *e) {
  char sh[SL_MAX_DIMS * 21 + 3];
  if (v->kind != SL__JSON_OBJECT)
    return sl__fail(SL_EINVAL, "checkpoint '%s': tensor '%s': not an object",
                    what, key);
  const sl__json *dt = sl__json_get(v, "dtype");
  const sl__json *shape = sl__json_get(v, "shape");
  const sl__json *off = sl__json_get(v, "data_offsets");
  if (!dt || dt->kind != SL__JSON_STRING)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s': no \"dtype\" string", what,
                    key);
  if (!sl__json_dims(shape, &e->shape))
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s': \"shape\" is not a list of "
                    "at most %d non-negative integers with an int64 product",
                    what, key, SL_MAX_DIMS);
  if (!off || off->kind != SL__JSON_ARRAY || off->n != 2 ||
      off->items[0].kind != SL__JSON_INT || off->items[1].kind != SL__JSON_INT)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s': \"data_offsets\" is not "
                    "two integers",
                    what, key);
  e->key = key;
  e->dtype_name = dt->s;
  e->begin = off->items[0].i;
  e->end = off->items[1].i;
  e->esize = sl__st_dtype_size(dt->s, &e->dtype_known, &e->dtype);
  if (e->begin < 0 || e->end < e->begin || e->end > data_bytes)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s': data_offsets [%lld, %lld) "
                    "outside the data section of %lld bytes",
                    what, key, (long long)e->begin, (long long)e->end,
                    (long long)data_bytes);
  if (e->esize) {
    int64_t need;
    if (__builtin_mul_overflow(sl_shape_numel(&e->shape), (int64_t)e->esize,
                               &need))
      need = -1;
    if (need != e->end - e->begin) {
      sl_shape_print(&e->shape, sh, sizeof sh);
      return sl__fail(SL_EINVAL,
                      "checkpoint '%s': tensor '%s': data_offsets [%lld, "
                      "%lld) hold %lld bytes, %s %s needs %lld",
                      what, key, (long long)e->begin, (long long)e->end,
                      (long long)(e->end - e->begin), e->dtype_name, sh,
                      (long long)need);
    }
  }
  return SL_OK;
}

sl_status sl__st_header_parse(const char *text, size_t len, int64_t data_bytes,
                              const char *what, sl__st_header **out) {
  *out = NULL;
  sl_status st;
  sl__st_header *h = NULL;
  const sl__st_entry **by_begin = NULL;
  if (SL_NEW(h) != SL_OK) return SL_ENOMEM;
  SL_CHECK_GOTO(sl__arena_create(0, &h->arena), st, fail);
  h->data_bytes = data_bytes;
  h->data_start = 8 + (int64_t)len;
  const sl__json *root;
  st = sl__json_parse(text, len, h->arena, &root);
  if (st != SL_OK) {
    sl__fail_context(st, "checkpoint '%s': header JSON ", what);
    goto fail;
  }
  if (root->kind != SL__JSON_OBJECT) {
    st = sl__fail(SL_EINVAL, "checkpoint '%s': the header is not an object",
                  what);
    goto fail;
  }
  h->entries =
      sl__arena_calloc(h->arena, (size_t)root->n + 1, sizeof *h->entries);
  if (!h->entries) {
    st = SL_ENOMEM;
    goto fail;
  }
  for (int32_t k = 0; k < root->n; k++) {
    const char *key = root->keys[k];
    const sl__json *v = &root->items[k];
    if (strcmp(key, "__metadata__") == 0) {
      if (v->kind != SL__JSON_OBJECT) {
        st = sl__fail(SL_EINVAL,
                      "checkpoint '%s': __metadata__ is not an object", what);
        goto fail;
      }
      h->meta_keys = v->keys;
      h->meta_values =
          sl__arena_calloc(h->arena, (size_t)v->n + 1, sizeof *h->meta_values);
      if (!h->meta_values) {
        st = SL_ENOMEM;
        goto fail;
      }
      for (int32_t m = 0; m < v->n; m++) {
        if (v->items[m].kind != SL__JSON_STRING) {
          st = sl__fail(SL_EINVAL,
                        "checkpoint '%s': __metadata__ '%s' is not a string",
                        what, v->keys[m]);
          goto fail;
        }
        h->meta_values[m] = v->items[m].s;
      }
      h->n_meta = v->n;
      continue;
    }
    SL_CHECK_GOTO(parse_entry(what, key, v, data_bytes, &h->entries[h->n]), st,
                  fail);
    h->n++;
  }
  qsort(h->entries, (size_t)h->n, sizeof *h->entries, cmp_entry_key);
  /* No two entries may share bytes (empty ones share none). */
  if (h->n > 1) {
    by_begin = sl__reallocarray(NULL, (size_t)h->n, sizeof *by_begin);
    if (!by_begin) {
      st = SL_ENOMEM;
      goto fail;
    }
    int32_t m = 0;
    for (int32_t k = 0; k < h->n; k++)
      if (h->entries[k].end > h->entries[k].begin)
        by_begin[m++] = &h->entries[k];
    qsort(by_begin, (size_t)m, sizeof *by_begin, cmp_entry_begin);
    for (int32_t k = 1; k < m; k++)
      if (by_begin[k]->begin < by_begin[k - 1]->end) {
        st = sl__fail(
            SL_EINVAL,
            "checkpoint '%s': tensors '%s' [%lld, %lld) and '%s' "
            "[%lld, %lld) overlap",
            what, by_begin[k - 1]->key, (long long)by_begin[k - 1]->begin,
            (long long)by_begin[k - 1]->end, by_begin[k]->key,
            (long long)by_begin[k]->begin, (long long)by_begin[k]->end);
        goto fail;
      }
  }
  sl__free(by_begin);
  *out = h;
  return SL_OK;
fail:
  sl__free(by_begin);
  sl__st_header_free(h);
  return st;
}

static uint64_t load_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--)
    v = v << 8 | p[k];
  return v;
}

/* The header length of a file of `size` bytes whose first 8 bytes are p. */
static sl_status header_len(const unsigned char *p, int64_t size,
                            const char *what, int64_t *out) {
  if (size < 8)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': %lld bytes, shorter than the 8-byte "
                    "header length",
                    what, (long long)size);
  uint64_t n = load_le64(p);
  if (n > (uint64_t)SL__ST_HEADER_MAX)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': header length %llu is over the limit of "
                    "%lld bytes",
                    what, (unsigned long long)n, (long long)SL__ST_HEADER_MAX);
  if ((int64_t)n > size - 8)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': header length %llu runs past the end of "
                    "the file (%lld bytes)",
                    what, (unsigned long long)n, (long long)size);
  *out = (int64_t)n;
  return SL_OK;
}

sl_status sl__st_parse_memory(const void *data, size_t size, const char *what,
                              sl__st_header **out) {
  *out = NULL;
  int64_t n;
  SL_CHECK(header_len(data, (int64_t)size, what, &n));
  return sl__st_header_parse((const char *)data + 8, (size_t)n,
                             (int64_t)size - 8 - n, what, out);
}

sl_status sl__pread_full(int fd, void *buf, size_t n, int64_t off,
                         const char *path) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return sl__fail(SL_EIO, "checkpoint '%s': read at byte %lld: %s", path,
                      (long long)off, strerror(errno));
    if (r == 0)
      return sl__fail(SL_EIO,
                      "checkpoint '%s': unexpected end of file at byte %lld",
                      path, (long long)off);
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return SL_OK;
}

sl_status sl__st_header_read(int fd, const char *path, int64_t size,
                             sl__st_header **out) {
  *out = NULL;
  unsigned char len8[8] = {0};
  if (size >= 8) SL_CHECK(sl__pread_full(fd, len8, 8, 0, path));
  int64_t n;
  SL_CHECK(header_len(len8, size, path, &n));
  char *text = sl__malloc((size_t)n + 1);
  if (!text) return SL_ENOMEM;
  sl_status st = sl__pread_full(fd, text, (size_t)n, 8, path);
  if (st == SL_OK)
    st = sl__st_header_parse(text, (size_t)n, size - 8 - n, path, out);
  sl__free(text);
  return st;
}

void sl__st_header_free(sl__st_header *h) {
  if (!h) return;
  sl__arena_destroy(h->arena);
  sl__free(h);
}

const sl__st_entry *sl__st_header_find(const sl__st_header *h,
                                       const char *key) {
  sl__st_entry probe = {.key = key};
  return bsearch(&probe, h->entries, (size_t)h->n, sizeof *h->entries,
                 cmp_entry_key);
}

const char *sl__st_header_meta(const sl__st_header *h, const char *key) {
  for (int32_t k = 0; k < h->n_meta; k++)
    if (strcmp(h->meta_keys[k], key) == 0) return h->meta_values[k];
  return NULL;
}

sl_status sl__st_header_build(int32_t n, const sl__st_out *e, int32_t n_kv,
                              const char *const *keys,
                              const char *const *values, size_t align,
                              sl__jbuf *out) {
  memset(out, 0, sizeof *out);
  sl__jbuf_append(out, "\0\0\0\0\0\0\0\0", 8);
  sl__jbuf_puts(out, "{");
  bool first = true;
  if (n_kv > 0) {
    sl__jbuf_puts(out, "\"__metadata__\":{");
    for (int32_t k = 0; k < n_kv; k++) {
      if (k) sl__jbuf_puts(out, ",");
      sl__jbuf_string(out, keys[k]);
      sl__jbuf_puts(out, ":");
      sl__jbuf_string(out, values[k]);
    }
    sl__jbuf_puts(out, "}");
    first = false;
  }
  int64_t off = 0;
  for (int32_t k = 0; k < n; k++) {
    if (!first) sl__jbuf_puts(out, ",");
    first = false;
    sl__jbuf_string(out, e[k].key);
    sl__jbuf_puts(out, ":{\"dtype\":");
    sl__jbuf_string(out, e[k].dtype_name);
    sl__jbuf_puts(out, ",\"shape\":");
    sl__jbuf_ints(out, e[k].ndim, e[k].dims);
    int64_t offs[2] = {off, off + e[k].bytes};
    sl__jbuf_puts(out, ",\"data_offsets\":");
    sl__jbuf_ints(out, 2, offs);
    sl__jbuf_puts(out, "}");
    off += e[k].bytes;
  }
  sl__jbuf_puts(out, "}");
  /* Spaces up to the alignment: 8 keeps every element aligned when the file
   * is mapped; a page lets a file be written with direct I/O. */
  while (!out->failed && out->len % align != 0)
    sl__jbuf_puts(out, " ");
  sl_status st = sl__jbuf_status(out);
  if (st != SL_OK) {
    sl__jbuf_free(out);
    return st;
  }
  uint64_t hn = (uint64_t)out->len - 8;
  for (int k = 0; k < 8; k++)
    out->data[k] = (char)(hn >> (8 * k) & 0xff);
  return SL_OK;
}
