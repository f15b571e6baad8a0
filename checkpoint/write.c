/* Writing a checkpoint directory (ckpt_write.h): the node files and the
 * atomic index commit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_int.h"

#define WBUF_SIZE (1u << 20)

/* ---- sl__wfile ---------------------------------------------------------- */

static char *path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = sl__malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

sl_status sl__fsync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? sl__malloc((size_t)(slash - path) + 2) : NULL;
  if (slash && !dir) return SL_ENOMEM;
  if (dir) {
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
  }
  int fd = open(dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  sl_status st = SL_OK;
  if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
    st = sl__fail(SL_EIO, "checkpoint '%s': fsync of its directory: %s", path,
                  strerror(errno));
  if (fd >= 0) close(fd);
  sl__free(dir);
  return st;
}

sl_status sl__wfile_open(const char *path, bool direct, sl__wfile *w) {
  memset(w, 0, sizeof *w);
  w->fd = -1;
  size_t n = strlen(path);
  w->path = sl__strdup(path);
  w->tmp = sl__malloc(n + 5);
  w->buf = sl__malloc_aligned(WBUF_SIZE, SL__CKPT_DATA_ALIGN);
  if (!w->path || !w->tmp || !w->buf) {
    sl__wfile_abort(w);
    return SL_ENOMEM;
  }
  memcpy(w->tmp, path, n);
  memcpy(w->tmp + n, ".tmp", 5);
  w->buf_cap = WBUF_SIZE;
  int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  w->fd = direct ? open(w->tmp, flags | O_DIRECT, 0644) : -1;
  w->direct = w->fd >= 0;
  /* tmpfs and some network file systems refuse O_DIRECT (EINVAL) */
  if (w->fd < 0) w->fd = open(w->tmp, flags, 0644);
  if (w->fd < 0) {
    sl_status st = sl__fail(SL_EIO, "checkpoint '%s': cannot create: %s",
                            w->tmp, strerror(errno));
    sl__free(w->path);
    sl__free(w->tmp);
    sl__free(w->buf);
    memset(w, 0, sizeof *w);
    w->fd = -1;
    return st;
  }
  return SL_OK;
}

static sl_status write_all(sl__wfile *w, const unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t r = write(w->fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return sl__fail(SL_EIO, "checkpoint '%s': write: %s", w->tmp,
                      strerror(errno));
    p += r;
    n -= (size_t)r;
  }
  return SL_OK;
}

#define ALIGN_DOWN(n) ((n) & ~(size_t)(SL__CKPT_DATA_ALIGN - 1))

/* Writes the buffer's whole blocks (direct) or all of it; a partial block
 * moves to the buffer's start. */
static sl_status flush(sl__wfile *w) {
  size_t n = w->direct ? ALIGN_DOWN(w->buf_len) : w->buf_len;
  sl_status st = write_all(w, w->buf, n);
  memmove(w->buf, w->buf + n, w->buf_len - n);
  w->buf_len -= n;
  return st;
}

sl_status sl__wfile_write(sl__wfile *w, const void *data, size_t n) {
  const unsigned char *p = data;
  w->crc = sl__crc32c(w->crc, p, n);
  w->bytes += (int64_t)n;
  while (n > 0) {
    /* Straight from the caller: a write of a buffer or more, or, direct,
     * the whole blocks of block-aligned memory at a block boundary of the
     * file (after what is buffered). */
    bool aligned = ((uintptr_t)p & (SL__CKPT_DATA_ALIGN - 1)) == 0;
    size_t whole = !w->direct ? (n >= w->buf_cap ? n : 0)
                   : aligned  ? ALIGN_DOWN(n)
                              : 0;
    if (whole > 0 && w->buf_len > 0 &&
        (!w->direct || w->buf_len % SL__CKPT_DATA_ALIGN == 0))
      SL_CHECK(flush(w));
    if (whole > 0 && w->buf_len == 0) {
      SL_CHECK(write_all(w, p, whole));
      p += whole;
      n -= whole;
      continue;
    }
    size_t take = SL_MIN(n, w->buf_cap - w->buf_len);
    memcpy(w->buf + w->buf_len, p, take);
    w->buf_len += take;
    p += take;
    n -= take;
    if (w->buf_len == w->buf_cap) SL_CHECK(flush(w));
  }
  return SL_OK;
}

static void wfile_free(sl__wfile *w) {
  sl__free(w->path);
  sl__free(w->tmp);
  sl__free(w->buf);
  memset(w, 0, sizeof *w);
  w->fd = -1;
}

void sl__wfile_abort(sl__wfile *w) {
  if (w->fd >= 0) close(w->fd);
  if (w->tmp && w->fd >= 0) unlink(w->tmp);
  wfile_free(w);
}

sl_status sl__wfile_finish(sl__wfile *w) {
  sl_status st = flush(w);
  /* The last partial block, through the page cache (O_DIRECT writes whole
   * blocks only). */
  if (st == SL_OK && w->buf_len > 0 && w->direct) {
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) != 0)
      st = sl__fail(SL_EIO, "checkpoint '%s': fcntl: %s", w->tmp,
                    strerror(errno));
    w->direct = false;
    if (st == SL_OK) st = flush(w);
  }
  if (st == SL_OK && fsync(w->fd) != 0)
    st =
        sl__fail(SL_EIO, "checkpoint '%s': fsync: %s", w->tmp, strerror(errno));
  int fd = w->fd;
  w->fd = -1;
  if (close(fd) != 0 && st == SL_OK)
    st =
        sl__fail(SL_EIO, "checkpoint '%s': close: %s", w->tmp, strerror(errno));
  if (st == SL_OK && rename(w->tmp, w->path) != 0)
    st = sl__fail(SL_EIO, "checkpoint '%s': rename to '%s': %s", w->tmp,
                  w->path, strerror(errno));
  if (st == SL_OK)
    st = sl__fsync_parent(w->path);
  else
    unlink(w->tmp);
  wfile_free(w);
  return st;
}

/* ---- node files --------------------------------------------------------- */

struct sl__ckpt_file {
  sl__wfile w;
  int32_t n, next;
  sl__ckpt_piece *pieces; /* copies, strings owned */
  char **keys;
  int64_t *sizes;
  char name[128];
};

int sl__ckpt_file_name(int64_t step, uint32_t node, char *buf, size_t size) {
  return snprintf(buf, size, "step-%06lld.node%u.safetensors", (long long)step,
                  (unsigned)node);
}

static void pieces_free(int32_t n, sl__ckpt_piece *p, char **keys) {
  for (int32_t k = 0; p && k < n; k++) {
    sl__free((char *)p[k].tensor);
    sl__free((char *)p[k].placement);
    sl__free((char *)p[k].sbp);
  }
  for (int32_t k = 0; keys && k < n; k++)
    sl__free(keys[k]);
  sl__free(p);
  sl__free(keys);
}

static bool whole(const sl__ckpt_piece *p) {
  for (int d = 0; d < p->shape.ndim; d++)
    if (p->box.start[d] != 0 || p->box.extent[d] != p->shape.dims[d])
      return false;
  return true;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Copies the pieces and gives them keys; checks what one file can check. */
static sl_status pieces_copy(const char *path, int32_t n,
                             const sl__ckpt_piece *in, sl__ckpt_file *f) {
  f->pieces = sl__calloc((size_t)n + 1, sizeof *f->pieces);
  f->keys = sl__calloc((size_t)n + 1, sizeof *f->keys);
  f->sizes = sl__calloc((size_t)n + 1, sizeof *f->sizes);
  if (!f->pieces || !f->keys || !f->sizes) return SL_ENOMEM;
  for (int32_t k = 0; k < n; k++) {
    const sl__ckpt_piece *p = &in[k];
    if (!p->tensor || !p->tensor[0] || !p->placement || !p->sbp ||
        strcmp(p->tensor, "__metadata__") == 0)
      return sl__fail(SL_EINVAL,
                      "checkpoint '%s': piece %d: a tensor name (not "
                      "\"__metadata__\"), placement and sbp are needed",
                      path, (int)k);
    if (!sl__st_dtype_name(p->dtype) || p->shape.ndim < 0 ||
        p->shape.ndim > SL_MAX_DIMS)
      return sl__fail(SL_EINVAL,
                      "checkpoint '%s': tensor '%s': invalid dtype or shape",
                      path, p->tensor);
    const sl_slice *box = &p->box;
    sl_status st = box->ndim == p->shape.ndim ? SL_OK : SL_EINVAL;
    for (int d = 0; st == SL_OK && d < box->ndim; d++)
      if (box->start[d] < 0 || box->extent[d] < 0 ||
          box->start[d] > p->shape.dims[d] - box->extent[d])
        st = SL_EINVAL;
    if (st != SL_OK)
      return sl__fail(SL_EINVAL,
                      "checkpoint '%s': tensor '%s': piece %d lies outside "
                      "the tensor",
                      path, p->tensor, (int)k);
    int64_t bytes;
    if (__builtin_mul_overflow(sl_slice_numel(box),
                               (int64_t)sl_dtype_size(p->dtype), &bytes))
      return sl__fail(SL_EINVAL, "checkpoint '%s': tensor '%s': too big", path,
                      p->tensor);
    f->sizes[k] = bytes;
    f->pieces[k] = *p;
    f->pieces[k].tensor = sl__strdup(p->tensor);
    f->pieces[k].placement = sl__strdup(p->placement);
    f->pieces[k].sbp = sl__strdup(p->sbp);
    f->n = k + 1;
    if (!f->pieces[k].tensor || !f->pieces[k].placement || !f->pieces[k].sbp)
      return SL_ENOMEM;
    int32_t nth = 0;
    for (int32_t j = 0; j < k; j++)
      nth += strcmp(in[j].tensor, p->tensor) == 0;
    char num[16];
    snprintf(num, sizeof num, "#%d", (int)nth);
    size_t len = strlen(p->tensor);
    f->keys[k] = sl__malloc(len + sizeof num);
    if (!f->keys[k]) return SL_ENOMEM;
    memcpy(f->keys[k], p->tensor, len + 1);
    if (!whole(p)) strcat(f->keys[k], num);
  }
  /* "a#0" may be a tensor's name as well as a piece's key. */
  char **sorted = sl__calloc((size_t)n + 1, sizeof *sorted);
  if (!sorted) return SL_ENOMEM;
  memcpy(sorted, f->keys, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
  sl_status st = SL_OK;
  for (int32_t k = 1; k < n && st == SL_OK; k++)
    if (strcmp(sorted[k - 1], sorted[k]) == 0)
      st = sl__fail(SL_EINVAL, "checkpoint '%s': two pieces have the key '%s'",
                    path, sorted[k]);
  sl__free(sorted);
  return st;
}

sl_status sl__ckpt_file_create(const char *dir, const char *name, int64_t step,
                               int32_t n, const sl__ckpt_piece *pieces,
                               bool direct, sl__ckpt_file **out) {
  *out = NULL;
  sl_status st;
  sl__ckpt_file *f;
  char *path = NULL;
  sl__jbuf hdr = {0};
  sl__st_out *e = NULL;
  if (!dir || !name || n < 0 || (n > 0 && !pieces) || !name[0] ||
      strchr(name, '/') || strlen(name) >= sizeof f->name)
    return sl__fail(SL_EINVAL,
                    "checkpoint file: bad arguments (dir '%s', "
                    "name '%s', %d pieces)",
                    dir ? dir : "(null)", name ? name : "(null)", (int)n);
  if (SL_NEW(f) != SL_OK) return SL_ENOMEM;
  f->w.fd = -1;
  snprintf(f->name, sizeof f->name, "%s", name);
  path = path_join(dir, name);
  if (!path) {
    st = SL_ENOMEM;
    goto fail;
  }
  SL_CHECK_GOTO(pieces_copy(path, n, pieces, f), st, fail);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    st = sl__fail(SL_EIO, "checkpoint '%s': cannot create the directory: %s",
                  dir, strerror(errno));
    goto fail;
  }
  e = sl__calloc((size_t)n + 1, sizeof *e);
  if (!e) {
    st = SL_ENOMEM;
    goto fail;
  }
  for (int32_t k = 0; k < n; k++) {
    e[k].key = f->keys[k];
    e[k].dtype_name = sl__st_dtype_name(f->pieces[k].dtype);
    e[k].ndim = f->pieces[k].box.ndim;
    e[k].dims = f->pieces[k].box.extent;
    e[k].bytes = f->sizes[k];
  }
  char stepbuf[24];
  snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
  const char *mk[] = {"format", "step"}, *mv[] = {"sluice", stepbuf};
  SL_CHECK_GOTO(sl__st_header_build(n, e, 2, mk, mv, SL__CKPT_DATA_ALIGN, &hdr),
                st, fail);
  SL_CHECK_GOTO(sl__wfile_open(path, direct, &f->w), st, fail);
  SL_CHECK_GOTO(sl__wfile_write(&f->w, hdr.data, hdr.len), st, fail);
  sl__free(e);
  sl__free(path);
  sl__jbuf_free(&hdr);
  *out = f;
  return SL_OK;
fail:
  sl__free(e);
  sl__free(path);
  sl__jbuf_free(&hdr);
  sl__ckpt_file_abort(f);
  return st;
}

sl_status sl__ckpt_file_write(sl__ckpt_file *f, const void *data,
                              size_t bytes) {
  if (f->next >= f->n)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': all %d pieces were already written",
                    f->w.path, (int)f->n);
  if ((int64_t)bytes != f->sizes[f->next] || (bytes && !data))
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s': piece '%s' is %lld bytes, "
                    "not %zu",
                    f->w.path, f->pieces[f->next].tensor, f->keys[f->next],
                    (long long)f->sizes[f->next], bytes);
  SL_CHECK(sl__wfile_write(&f->w, data, bytes));
  f->next++;
  return SL_OK;
}

void sl__ckpt_file_abort(sl__ckpt_file *f) {
  if (!f) return;
  sl__wfile_abort(&f->w);
  pieces_free(f->n, f->pieces, f->keys);
  sl__free(f->sizes);
  sl__free(f);
}

sl_status sl__ckpt_file_close(sl__ckpt_file *f, uint32_t node,
                              sl__ckpt_file_done *out) {
  memset(out, 0, sizeof *out);
  if (f->next != f->n) {
    sl_status st =
        sl__fail(SL_EINVAL, "checkpoint '%s': closed after %d of its %d pieces",
                 f->w.path, (int)f->next, (int)f->n);
    sl__ckpt_file_abort(f);
    return st;
  }
  uint32_t crc = f->w.crc;
  int64_t bytes = f->w.bytes;
  sl_status st = sl__wfile_finish(&f->w);
  if (st != SL_OK) {
    sl__ckpt_file_abort(f);
    return st;
  }
  memcpy(out->name, f->name, sizeof out->name);
  out->node = node;
  out->bytes = bytes;
  out->crc32c = crc;
  out->n = f->n;
  out->keys = f->keys;
  out->pieces = f->pieces;
  sl__free(f->sizes);
  sl__free(f);
  return SL_OK;
}

void sl__ckpt_file_done_free(sl__ckpt_file_done *d) {
  if (!d) return;
  pieces_free(d->n, d->pieces, d->keys);
  memset(d, 0, sizeof *d);
}

sl_status sl__ckpt_file_describe(const char *name, uint32_t node, int64_t bytes,
                                 uint32_t crc32c, int32_t n,
                                 const sl__ckpt_piece *pieces,
                                 sl__ckpt_file_done *out) {
  memset(out, 0, sizeof *out);
  if (!name || strlen(name) >= sizeof out->name || n < 0 || (n && !pieces))
    return sl__fail(SL_EINVAL, "checkpoint file: bad description");
  sl__ckpt_file f;
  memset(&f, 0, sizeof f);
  sl_status st = pieces_copy(name, n, pieces, &f);
  sl__free(f.sizes);
  if (st != SL_OK) {
    pieces_free(f.n, f.pieces, f.keys);
    return st;
  }
  snprintf(out->name, sizeof out->name, "%s", name);
  out->node = node;
  out->bytes = bytes;
  out->crc32c = crc32c;
  out->n = f.n;
  out->keys = f.keys;
  out->pieces = f.pieces;
  return SL_OK;
}
