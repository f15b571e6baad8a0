/* index.json: parsing and checking what it says without the files
 * (docs/formats.md, "Checkpoints"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_int.h"

static void box_text(const sl_slice *b, char *buf, size_t size) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, size - o, "start [");
  for (int d = 0; d < b->ndim && o < size; d++)
    o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "",
                          (long long)b->start[d]);
  if (o < size) o += (size_t)snprintf(buf + o, size - o, "] extent [");
  for (int d = 0; d < b->ndim && o < size; d++)
    o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "",
                          (long long)b->extent[d]);
  if (o < size) snprintf(buf + o, size - o, "]");
}

sl_status sl__ckpt_check_cover(const char *tensor, const sl_shape *shape,
                               int32_t n, const sl_slice *const *boxes) {
  char a[400], b[400], sh[SL_MAX_DIMS * 21 + 3];
  sl_shape_print(shape, sh, sizeof sh);
  if (n > SL__CKPT_MAX_PIECES)
    return sl__fail(SL_EINVAL, "tensor '%s': %d pieces, over the limit of %d",
                    tensor, (int)n, SL__CKPT_MAX_PIECES);
  int64_t sum = 0;
  for (int32_t k = 0; k < n; k++) {
    const sl_slice *x = boxes[k];
    bool ok = x->ndim == shape->ndim;
    for (int d = 0; ok && d < x->ndim; d++)
      ok = x->start[d] >= 0 && x->extent[d] >= 0 &&
           x->start[d] <= shape->dims[d] - x->extent[d];
    if (!ok) {
      if (x->ndim >= 0 && x->ndim <= SL_MAX_DIMS)
        box_text(x, a, sizeof a);
      else
        snprintf(a, sizeof a, "of rank %d", x->ndim);
      return sl__fail(SL_EINVAL, "tensor '%s': piece %s lies outside %s",
                      tensor, a, sh);
    }
    sum += sl_slice_numel(x);
  }
  for (int32_t k = 0; k < n; k++)
    for (int32_t j = 0; j < k; j++) {
      sl_slice o;
      if (sl_slice_intersect(boxes[j], boxes[k], &o)) {
        box_text(boxes[j], a, sizeof a);
        box_text(boxes[k], b, sizeof b);
        return sl__fail(SL_EINVAL, "tensor '%s': pieces %s and %s overlap",
                        tensor, a, b);
      }
    }
  /* Inside and disjoint: they cover the tensor iff their sizes add up. */
  if (sum != sl_shape_numel(shape))
    return sl__fail(
        SL_EINVAL, "tensor '%s': pieces hold %lld of the %lld elements of %s",
        tensor, (long long)sum, (long long)sl_shape_numel(shape), sh);
  return SL_OK;
}

static bool valid_file_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n >= sizeof(((sl__ckpt_file_done *)0)->name)) return false;
  if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
  return strchr(s, '/') == NULL;
}

static bool parse_hex32(const char *s, uint32_t *out) {
  if (strlen(s) != 8) return false;
  uint32_t v = 0;
  for (int k = 0; k < 8; k++) {
    char c = s[k];
    int h = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (h < 0) return false;
    v = v << 4 | (uint32_t)h;
  }
  *out = v;
  return true;
}

static const char *str_field(const sl__json *o, const char *key) {
  const sl__json *v = sl__json_get(o, key);
  return v && v->kind == SL__JSON_STRING ? v->s : NULL;
}

static bool int_field(const sl__json *o, const char *key, int64_t *out) {
  const sl__json *v = sl__json_get(o, key);
  if (!v || v->kind != SL__JSON_INT) return false;
  *out = v->i;
  return true;
}

static sl_status parse_files(sl__ckpt_index *x, const sl__json *files) {
  if (!files || files->kind != SL__JSON_ARRAY)
    return sl__fail(SL_EINVAL, "\"files\" is not a list");
  x->n_files = files->n;
  x->files = sl__arena_calloc(x->arena, (size_t)files->n + 1, sizeof *x->files);
  if (!x->files) return SL_ENOMEM;
  for (int32_t k = 0; k < files->n; k++) {
    const sl__json *f = &files->items[k];
    sl__ckpt_fileref *r = &x->files[k];
    const char *crc = str_field(f, "crc32c");
    int64_t node, bytes;
    r->name = str_field(f, "name");
    if (f->kind != SL__JSON_OBJECT || !r->name || !valid_file_name(r->name) ||
        !int_field(f, "node", &node) || node < 0 || node > UINT32_MAX ||
        !int_field(f, "bytes", &bytes) || bytes < 0 || !crc ||
        !parse_hex32(crc, &r->crc32c))
      return sl__fail(SL_EINVAL,
                      "files[%d]: needs \"name\" (a file name in the "
                      "directory), \"node\", \"bytes\" (integers >= 0) and "
                      "\"crc32c\" (8 hex digits)",
                      (int)k);
    r->node = (uint32_t)node;
    r->bytes = bytes;
    for (int32_t j = 0; j < k; j++)
      if (strcmp(x->files[j].name, r->name) == 0)
        return sl__fail(SL_EINVAL, "files[%d]: '%s' is listed twice", (int)k,
                        r->name);
  }
  return SL_OK;
}

static bool json_box(const sl__json *start, const sl__json *extent, int ndim,
                     sl_slice *out) {
  memset(out, 0, sizeof *out);
  if (!start || !extent || start->kind != SL__JSON_ARRAY ||
      extent->kind != SL__JSON_ARRAY || start->n != ndim || extent->n != ndim)
    return false;
  out->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    if (start->items[d].kind != SL__JSON_INT ||
        extent->items[d].kind != SL__JSON_INT)
      return false;
    out->start[d] = start->items[d].i;
    out->extent[d] = extent->items[d].i;
  }
  return true;
}

static sl_status parse_tensor(sl__ckpt_index *x, const char *name,
                              const sl__json *v, sl__ckpt_tensor *t) {
  t->name = name;
  if (v->kind != SL__JSON_OBJECT)
    return sl__fail(SL_EINVAL, "tensor '%s': not an object", name);
  t->dtype_name = str_field(v, "dtype");
  t->placement = str_field(v, "placement");
  t->sbp = str_field(v, "sbp");
  if (!t->dtype_name || !t->placement || !t->sbp)
    return sl__fail(SL_EINVAL,
                    "tensor '%s': needs \"dtype\", \"placement\" and \"sbp\" "
                    "strings",
                    name);
  t->esize = sl__st_dtype_size(t->dtype_name, &t->dtype_known, &t->dtype);
  if (t->esize == 0)
    return sl__fail(SL_EINVAL, "tensor '%s': unknown dtype '%s'", name,
                    t->dtype_name);
  if (!sl__json_dims(sl__json_get(v, "shape"), &t->shape))
    return sl__fail(SL_EINVAL,
                    "tensor '%s': \"shape\" is not a list of at most %d "
                    "non-negative integers with an int64 product",
                    name, SL_MAX_DIMS);
  if (__builtin_mul_overflow(sl_shape_numel(&t->shape), (int64_t)t->esize,
                             &t->bytes))
    return sl__fail(SL_EINVAL, "tensor '%s': its size overflows int64", name);
  const sl__json *pieces = sl__json_get(v, "pieces");
  if (!pieces || pieces->kind != SL__JSON_ARRAY)
    return sl__fail(SL_EINVAL, "tensor '%s': \"pieces\" is not a list", name);
  if (pieces->n > SL__CKPT_MAX_PIECES)
    return sl__fail(SL_EINVAL, "tensor '%s': %d pieces, over the limit of %d",
                    name, (int)pieces->n, SL__CKPT_MAX_PIECES);
  t->n_pieces = pieces->n;
  t->pieces =
      sl__arena_calloc(x->arena, (size_t)pieces->n + 1, sizeof *t->pieces);
  const sl_slice **boxes =
      sl__arena_calloc(x->arena, (size_t)pieces->n + 1, sizeof *boxes);
  if (!t->pieces || !boxes) return SL_ENOMEM;
  for (int32_t k = 0; k < pieces->n; k++) {
    const sl__json *p = &pieces->items[k];
    sl__ckpt_ref *r = &t->pieces[k];
    int64_t file;
    r->key = str_field(p, "key");
    if (p->kind != SL__JSON_OBJECT || !r->key || !int_field(p, "file", &file) ||
        file < 0 || file >= x->n_files ||
        !json_box(sl__json_get(p, "start"), sl__json_get(p, "extent"),
                  t->shape.ndim, &r->box))
      return sl__fail(SL_EINVAL,
                      "tensor '%s': pieces[%d]: needs \"file\" (an index "
                      "into \"files\"), \"key\", and \"start\" and \"extent\" "
                      "of rank %d",
                      name, (int)k, t->shape.ndim);
    r->file = (int32_t)file;
    boxes[k] = &r->box;
  }
  return sl__ckpt_check_cover(name, &t->shape, t->n_pieces, boxes);
}

static int cmp_tensor(const void *a, const void *b) {
  return strcmp(((const sl__ckpt_tensor *)a)->name,
                ((const sl__ckpt_tensor *)b)->name);
}

sl_status sl__ckpt_index_parse(const char *text, size_t len, const char *what,
                               sl__ckpt_index **out) {
  *out = NULL;
  sl_status st;
  sl__ckpt_index *x;
  if (SL_NEW(x) != SL_OK) return SL_ENOMEM;
  SL_CHECK_GOTO(sl__arena_create(0, &x->arena), st, fail);
  const sl__json *root;
  st = sl__json_parse(text, len, x->arena, &root);
  if (st != SL_OK) {
    sl__fail_context(st, "checkpoint '%s': JSON ", what);
    goto fail;
  }
  const char *format = str_field(root, "format");
  int64_t version;
  if (root->kind != SL__JSON_OBJECT || !format ||
      strcmp(format, "sluice-checkpoint") != 0) {
    st = sl__fail(SL_EINVAL,
                  "checkpoint '%s': not a sluice checkpoint index (no "
                  "\"format\": \"sluice-checkpoint\")",
                  what);
    goto fail;
  }
  if (!int_field(root, "version", &version) || version != 1) {
    st = sl__fail(SL_EINVAL,
                  "checkpoint '%s': \"version\" must be 1 (this reader's); "
                  "a newer sluice may read it",
                  what);
    goto fail;
  }
  if (!int_field(root, "step", &x->step)) {
    st = sl__fail(SL_EINVAL, "checkpoint '%s': no integer \"step\"", what);
    goto fail;
  }
  const sl__json *meta = sl__json_get(root, "metadata");
  if (meta) {
    bool ok = meta->kind == SL__JSON_OBJECT;
    for (int32_t k = 0; ok && k < meta->n; k++)
      ok = meta->items[k].kind == SL__JSON_STRING;
    x->meta_values =
        sl__arena_calloc(x->arena, (size_t)meta->n + 1, sizeof(char *));
    if (!x->meta_values) {
      st = SL_ENOMEM;
      goto fail;
    }
    if (!ok) {
      st = sl__fail(SL_EINVAL,
                    "checkpoint '%s': \"metadata\" is not an object of "
                    "strings",
                    what);
      goto fail;
    }
    x->n_meta = meta->n;
    x->meta_keys = meta->keys;
    for (int32_t k = 0; k < meta->n; k++)
      x->meta_values[k] = meta->items[k].s;
  }
  st = parse_files(x, sl__json_get(root, "files"));
  if (st != SL_OK) {
    sl__fail_context(st, "checkpoint '%s': ", what);
    goto fail;
  }
  const sl__json *tensors = sl__json_get(root, "tensors");
  if (!tensors || tensors->kind != SL__JSON_OBJECT) {
    st = sl__fail(SL_EINVAL, "checkpoint '%s': \"tensors\" is not an object",
                  what);
    goto fail;
  }
  x->n_tensors = tensors->n;
  x->tensors =
      sl__arena_calloc(x->arena, (size_t)tensors->n + 1, sizeof *x->tensors);
  if (!x->tensors) {
    st = SL_ENOMEM;
    goto fail;
  }
  for (int32_t k = 0; k < tensors->n; k++) {
    st = parse_tensor(x, tensors->keys[k], &tensors->items[k], &x->tensors[k]);
    if (st != SL_OK) {
      sl__fail_context(st, "checkpoint '%s': ", what);
      goto fail;
    }
  }
  qsort(x->tensors, (size_t)x->n_tensors, sizeof *x->tensors, cmp_tensor);
  *out = x;
  return SL_OK;
fail:
  sl__ckpt_index_free(x);
  return st;
}

void sl__ckpt_index_free(sl__ckpt_index *x) {
  if (!x) return;
  sl__arena_destroy(x->arena);
  sl__free(x);
}
