/* Opening and reading checkpoints (include/sluice/checkpoint.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_int.h"

#define CRC_CHUNK (1u << 20)

typedef struct ckpt_file {
  char *path;
  int fd;
  sl__st_header *hdr;
} ckpt_file;

struct sl_checkpoint {
  bool sharded;
  sl__ckpt_index *index; /* a plain file gets one built from its header */
  int32_t n_files;
  ckpt_file *files;
};

static sl_status open_file(const char *path, ckpt_file *f, int64_t *size) {
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0)
    return sl__fail(errno == ENOENT ? SL_ENOTFOUND : SL_EIO,
                    "checkpoint '%s': cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(f->fd, &sb) != 0)
    return sl__fail(SL_EIO, "checkpoint '%s': stat: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return sl__fail(SL_EINVAL, "checkpoint '%s': not a regular file", path);
  *size = (int64_t)sb.st_size;
  return SL_OK;
}

static sl_status check_crc(const ckpt_file *f, int64_t size, uint32_t want) {
  unsigned char *buf = sl__malloc(CRC_CHUNK);
  if (!buf) return SL_ENOMEM;
  uint32_t crc = 0;
  sl_status st = SL_OK;
  for (int64_t off = 0; off < size && st == SL_OK;) {
    size_t n = (size_t)SL_MIN((int64_t)CRC_CHUNK, size - off);
    st = sl__pread_full(f->fd, buf, n, off, f->path);
    crc = sl__crc32c(crc, buf, n);
    off += (int64_t)n;
  }
  sl__free(buf);
  if (st == SL_OK && crc != want)
    st = sl__fail(SL_EINVAL,
                  "checkpoint '%s': CRC32C %08x, the index says %08x (the "
                  "file is corrupt)",
                  f->path, (unsigned)crc, (unsigned)want);
  return st;
}

static sl_status read_index(const char *path, sl__ckpt_index **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT
               ? sl__fail(SL_ENOTFOUND,
                          "checkpoint '%s': no such file (no save was "
                          "committed here)",
                          path)
               : sl__fail(SL_EIO, "checkpoint '%s': cannot open: %s", path,
                          strerror(errno));
  struct stat sb;
  sl_status st = SL_OK;
  char *text = NULL;
  if (fstat(fd, &sb) != 0)
    st = sl__fail(SL_EIO, "checkpoint '%s': stat: %s", path, strerror(errno));
  else if (sb.st_size > SL__CKPT_INDEX_MAX)
    st = sl__fail(SL_EINVAL, "checkpoint '%s': %lld bytes, over the limit",
                  path, (long long)sb.st_size);
  else if (!(text = sl__malloc((size_t)sb.st_size + 1)))
    st = SL_ENOMEM;
  else
    st = sl__pread_full(fd, text, (size_t)sb.st_size, 0, path);
  if (st == SL_OK)
    st = sl__ckpt_index_parse(text, (size_t)sb.st_size, path, out);
  sl__free(text);
  close(fd);
  return st;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = sl__malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* Every piece's key names an entry of its file with the tensor's dtype and
 * the piece's extent as its shape. */
static sl_status bind_pieces(sl_checkpoint *c) {
  const sl__ckpt_index *x = c->index;
  for (int32_t t = 0; t < x->n_tensors; t++) {
    sl__ckpt_tensor *tn = &x->tensors[t];
    for (int32_t k = 0; k < tn->n_pieces; k++) {
      sl__ckpt_ref *r = &tn->pieces[k];
      const ckpt_file *f = &c->files[r->file];
      const sl__st_entry *e = sl__st_header_find(f->hdr, r->key);
      if (!e)
        return sl__fail(SL_EINVAL,
                        "checkpoint '%s': tensor '%s': the file has no key "
                        "'%s'",
                        f->path, tn->name, r->key);
      sl_shape ext = {.ndim = r->box.ndim};
      memcpy(ext.dims, r->box.extent, sizeof ext.dims);
      if (strcmp(e->dtype_name, tn->dtype_name) != 0 ||
          !sl_shape_equal(&e->shape, &ext)) {
        char a[SL_MAX_DIMS * 21 + 3], b[SL_MAX_DIMS * 21 + 3];
        sl_shape_print(&e->shape, a, sizeof a);
        sl_shape_print(&ext, b, sizeof b);
        return sl__fail(SL_EINVAL,
                        "checkpoint '%s': tensor '%s': key '%s' is %s %s, the "
                        "index says %s %s",
                        f->path, tn->name, r->key, e->dtype_name, a,
                        tn->dtype_name, b);
      }
      r->entry = e;
    }
  }
  return SL_OK;
}

static sl_status open_dir(const char *dir, sl_checkpoint *c) {
  char *ipath = join(dir, "index.json");
  if (!ipath) return SL_ENOMEM;
  sl_status st = read_index(ipath, &c->index);
  sl__free(ipath);
  SL_CHECK(st);
  const sl__ckpt_index *x = c->index;
  c->files = sl__calloc((size_t)x->n_files + 1, sizeof *c->files);
  if (!c->files) return SL_ENOMEM;
  for (int32_t k = 0; k < x->n_files; k++) {
    ckpt_file *f = &c->files[k];
    f->fd = -1;
    c->n_files = k + 1;
    f->path = join(dir, x->files[k].name);
    if (!f->path) return SL_ENOMEM;
    int64_t size;
    st = open_file(f->path, f, &size);
    if (st == SL_ENOTFOUND)
      st = sl__fail(SL_EINVAL,
                    "checkpoint '%s': the index names it but it is "
                    "missing",
                    f->path);
    SL_CHECK(st);
    if (size != x->files[k].bytes)
      return sl__fail(SL_EINVAL,
                      "checkpoint '%s': %lld bytes, the index says %lld (the "
                      "file is truncated or was replaced)",
                      f->path, (long long)size, (long long)x->files[k].bytes);
    SL_CHECK(sl__st_header_read(f->fd, f->path, size, &f->hdr));
    SL_CHECK(check_crc(f, size, x->files[k].crc32c));
  }
  return bind_pieces(c);
}

/* A plain file: an index whose tensors are the file's entries, whole. */
static sl_status open_plain(const char *path, sl_checkpoint *c) {
  c->files = sl__calloc(1, sizeof *c->files);
  if (!c->files) return SL_ENOMEM;
  ckpt_file *f = &c->files[0];
  f->fd = -1;
  c->n_files = 1;
  f->path = sl__strdup(path);
  if (!f->path) return SL_ENOMEM;
  int64_t size;
  SL_CHECK(open_file(path, f, &size));
  SL_CHECK(sl__st_header_read(f->fd, path, size, &f->hdr));
  sl__ckpt_index *x;
  if (SL_NEW(x) != SL_OK) return SL_ENOMEM;
  c->index = x;
  SL_CHECK(sl__arena_create(0, &x->arena));
  const sl__st_header *h = f->hdr;
  x->step = -1;
  const char *step = sl__st_header_meta(h, "step");
  if (step && step[0]) {
    char *end;
    errno = 0;
    long long v = strtoll(step, &end, 10);
    if (*end == '\0' && errno == 0) x->step = v;
  }
  x->n_meta = h->n_meta;
  x->meta_keys = h->meta_keys;
  x->meta_values = h->meta_values;
  x->n_tensors = h->n;
  x->tensors = sl__arena_calloc(x->arena, (size_t)h->n + 1, sizeof *x->tensors);
  if (!x->tensors) return SL_ENOMEM;
  for (int32_t k = 0; k < h->n; k++) {
    const sl__st_entry *e = &h->entries[k];
    sl__ckpt_tensor *t = &x->tensors[k];
    sl__ckpt_ref *r = sl__arena_calloc(x->arena, 1, sizeof *r);
    if (!r) return SL_ENOMEM;
    t->name = e->key;
    t->dtype_name = e->dtype_name;
    t->dtype_known = e->dtype_known;
    t->dtype = e->dtype;
    t->esize = e->esize;
    t->shape = e->shape;
    t->placement = "";
    t->sbp = "";
    t->n_pieces = 1;
    t->pieces = r;
    t->bytes = e->end - e->begin;
    r->file = 0;
    r->key = e->key;
    r->box.ndim = e->shape.ndim;
    memcpy(r->box.extent, e->shape.dims, sizeof r->box.extent);
    r->entry = e;
  }
  return SL_OK;
}

sl_status sl_checkpoint_open(const char *path, sl_checkpoint **out) {
  if (!out) return sl__fail(SL_EINVAL, "sl_checkpoint_open: out is NULL");
  *out = NULL;
  if (!path) return sl__fail(SL_EINVAL, "sl_checkpoint_open: path is NULL");
  struct stat sb;
  if (stat(path, &sb) != 0)
    return sl__fail(errno == ENOENT ? SL_ENOTFOUND : SL_EIO,
                    "checkpoint '%s': %s", path, strerror(errno));
  sl_checkpoint *c;
  if (SL_NEW(c) != SL_OK) return SL_ENOMEM;
  c->sharded = S_ISDIR(sb.st_mode);
  sl_status st = c->sharded ? open_dir(path, c) : open_plain(path, c);
  if (st != SL_OK) {
    sl_checkpoint_close(c);
    return st;
  }
  *out = c;
  return SL_OK;
}

void sl_checkpoint_close(sl_checkpoint *c) {
  if (!c) return;
  for (int32_t k = 0; k < c->n_files; k++) {
    if (c->files[k].fd >= 0) close(c->files[k].fd);
    sl__st_header_free(c->files[k].hdr);
    sl__free(c->files[k].path);
  }
  sl__free(c->files);
  sl__ckpt_index_free(c->index);
  sl__free(c);
}

int64_t sl_checkpoint_step(const sl_checkpoint *c) {
  return c ? c->index->step : -1;
}

bool sl_checkpoint_is_sharded(const sl_checkpoint *c) {
  return c && c->sharded;
}

const char *sl_checkpoint_metadata(const sl_checkpoint *c, const char *key) {
  if (!c || !key) return NULL;
  for (int32_t k = 0; k < c->index->n_meta; k++)
    if (strcmp(c->index->meta_keys[k], key) == 0)
      return c->index->meta_values[k];
  return NULL;
}

int32_t sl_checkpoint_tensor_count(const sl_checkpoint *c) {
  return c ? c->index->n_tensors : 0;
}

sl_status sl_checkpoint_get_tensor(const sl_checkpoint *c, int32_t i,
                                   sl_checkpoint_tensor *out) {
  if (!out) return sl__fail(SL_EINVAL, "sl_checkpoint_get_tensor: out is NULL");
  memset(out, 0, sizeof *out);
  if (!c || i < 0 || i >= c->index->n_tensors)
    return sl__fail(SL_ENOTFOUND, "checkpoint: no tensor %d (it has %d)",
                    (int)i, c ? (int)c->index->n_tensors : 0);
  const sl__ckpt_tensor *t = &c->index->tensors[i];
  out->name = t->name;
  out->dtype_name = t->dtype_name;
  out->dtype_known = t->dtype_known;
  out->dtype = t->dtype;
  out->shape = t->shape;
  out->placement = t->placement;
  out->sbp = t->sbp;
  out->pieces = t->n_pieces;
  out->bytes = t->bytes;
  return SL_OK;
}

int32_t sl_checkpoint_find(const sl_checkpoint *c, const char *name) {
  if (!c || !name) return -1;
  int32_t lo = 0, hi = c->index->n_tensors;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    int r = strcmp(c->index->tensors[mid].name, name);
    if (r == 0) return mid;
    if (r < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* Copies the part `s` of piece r (stored row-major in its box) into dst,
 * which is row-major in `box`: one pread per contiguous run. Trailing
 * dimensions that s spans whole in both the piece and the box join the
 * run. */
static sl_status read_part(const ckpt_file *f, const sl__ckpt_ref *r,
                           const sl_slice *box, const sl_slice *s, size_t es,
                           unsigned char *dst) {
  int nd = s->ndim;
  int64_t base = f->hdr->data_start + r->entry->begin;
  if (nd == 0) return sl__pread_full(f->fd, dst, es, base, f->path);
  int64_t pstr[SL_MAX_DIMS], bstr[SL_MAX_DIMS];
  pstr[nd - 1] = bstr[nd - 1] = 1;
  for (int d = nd - 1; d > 0; d--) {
    pstr[d - 1] = pstr[d] * r->box.extent[d];
    bstr[d - 1] = bstr[d] * box->extent[d];
  }
  int inner = nd - 1;
  int64_t run = s->extent[inner];
  while (inner > 0 && s->extent[inner] == r->box.extent[inner] &&
         s->extent[inner] == box->extent[inner]) {
    inner--;
    run *= s->extent[inner];
  }
  int64_t idx[SL_MAX_DIMS] = {0}; /* over dims [0, inner) */
  for (;;) {
    int64_t so = 0, doff = 0;
    for (int d = 0; d < nd; d++) {
      int64_t g = s->start[d] + (d < inner ? idx[d] : 0);
      so += (g - r->box.start[d]) * pstr[d];
      doff += (g - box->start[d]) * bstr[d];
    }
    SL_CHECK(sl__pread_full(f->fd, dst + (size_t)doff * es, (size_t)run * es,
                            base + so * (int64_t)es, f->path));
    int d = inner - 1;
    while (d >= 0 && ++idx[d] == s->extent[d])
      idx[d--] = 0;
    if (d < 0) break;
  }
  return SL_OK;
}

sl_status sl_checkpoint_read(const sl_checkpoint *c, int32_t i,
                             const sl_slice *box, void *data, size_t bytes) {
  if (!c || i < 0 || i >= c->index->n_tensors)
    return sl__fail(SL_EINVAL, "checkpoint: no tensor %d (it has %d)", (int)i,
                    c ? (int)c->index->n_tensors : 0);
  const sl__ckpt_tensor *t = &c->index->tensors[i];
  if (t->esize == 0)
    return sl__fail(SL_EUNSUPPORTED,
                    "checkpoint: tensor '%s': dtype '%s' has no known element "
                    "size",
                    t->name, t->dtype_name);
  sl_slice all = {.ndim = t->shape.ndim};
  memcpy(all.extent, t->shape.dims, sizeof all.extent);
  if (!box) box = &all;
  bool ok = box->ndim == t->shape.ndim;
  for (int d = 0; ok && d < box->ndim; d++)
    ok = box->start[d] >= 0 && box->extent[d] >= 0 &&
         box->start[d] <= t->shape.dims[d] - box->extent[d];
  if (!ok)
    return sl__fail(SL_EINVAL,
                    "checkpoint: tensor '%s': the box lies outside "
                    "the tensor",
                    t->name);
  int64_t need = sl_slice_numel(box) * (int64_t)t->esize;
  if ((int64_t)bytes != need || (need > 0 && !data))
    return sl__fail(SL_EINVAL,
                    "checkpoint: tensor '%s': the box needs %lld bytes, got "
                    "%zu",
                    t->name, (long long)need, bytes);
  for (int32_t k = 0; k < t->n_pieces; k++) {
    const sl__ckpt_ref *r = &t->pieces[k];
    sl_slice s;
    if (!sl_slice_intersect(box, &r->box, &s)) continue;
    sl_status st = read_part(&c->files[r->file], r, box, &s, t->esize, data);
    if (st != SL_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", sl_last_error());
      return sl__fail(st, "%s (reading tensor '%s')", msg, t->name);
    }
  }
  return SL_OK;
}

/* For sl_checkpoint_convert: the raw stored bytes of a plain file's entry
 * (dtypes of unknown element size are copied as they are). */
sl_status sl__checkpoint_read_raw(const sl_checkpoint *c, int32_t i,
                                  int64_t off, void *data, size_t n) {
  const sl__ckpt_tensor *t = &c->index->tensors[i];
  const ckpt_file *f = &c->files[t->pieces[0].file];
  return sl__pread_full(f->fd, data, n,
                        f->hdr->data_start + t->pieces[0].entry->begin + off,
                        f->path);
}

int32_t sl_checkpoint_metadata_count(const sl_checkpoint *c) {
  return c ? c->index->n_meta : 0;
}

sl_status sl_checkpoint_metadata_get(const sl_checkpoint *c, int32_t i,
                                     const char **key, const char **value) {
  if (key) *key = NULL;
  if (value) *value = NULL;
  if (!c || !key || !value || i < 0 || i >= c->index->n_meta)
    return sl__fail(SL_ENOTFOUND,
                    "checkpoint: no metadata entry %d (it has "
                    "%d)",
                    (int)i, c ? (int)c->index->n_meta : 0);
  *key = c->index->meta_keys[i];
  *value = c->index->meta_values[i];
  return SL_OK;
}
