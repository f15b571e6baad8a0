/* The .npy reader: header parsing, the table of open files and the
 * npy_read op, whose kernel preads only its own output slice. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"

typedef struct npy_file {
  char *path;
  int fd; /* -1 once released */
  sl__meta meta;
  int64_t data_offset;
} npy_file;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static npy_file *table;
static int32_t table_len, table_cap;

/* ---- header ------------------------------------------------------------- */

/* Finds 'key' in the header dict and returns the text after its colon. */
static const char *dict_value(const char *h, const char *key) {
  char quoted[32];
  for (int q = 0; q < 2; q++) {
    snprintf(quoted, sizeof quoted, q ? "\"%s\"" : "'%s'", key);
    const char *p = strstr(h, quoted);
    if (!p) continue;
    p += strlen(quoted);
    while (*p == ' ')
      p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ')
      p++;
    return p;
  }
  return NULL;
}

static sl_status parse_header(const char *path, const char *h, sl__meta *meta) {
  const char *d = dict_value(h, "descr");
  if (!d || (*d != '\'' && *d != '"'))
    return sl__fail(SL_EINVAL, "npy '%s': header has no 'descr'", path);
  char descr[16] = {0};
  size_t n = strcspn(d + 1, "'\"");
  if (n >= sizeof descr)
    return sl__fail(SL_EINVAL, "npy '%s': dtype descriptor too long", path);
  memcpy(descr, d + 1, n);
  if (strcmp(descr, "<f4") == 0)
    meta->dtype = SL_DTYPE_F32;
  else if (strcmp(descr, "<i4") == 0)
    meta->dtype = SL_DTYPE_I32;
  else if (strcmp(descr, "<i8") == 0)
    meta->dtype = SL_DTYPE_I64;
  else
    return sl__fail(SL_EINVAL,
                    "npy '%s': dtype '%s' unsupported (use '<f4', '<i4' or "
                    "'<i8')",
                    path, descr);
  const char *f = dict_value(h, "fortran_order");
  if (!f)
    return sl__fail(SL_EINVAL, "npy '%s': header has no 'fortran_order'", path);
  if (strncmp(f, "True", 4) == 0)
    return sl__fail(SL_EINVAL,
                    "npy '%s': Fortran order unsupported (save in C order)",
                    path);
  if (strncmp(f, "False", 5) != 0)
    return sl__fail(SL_EINVAL, "npy '%s': bad 'fortran_order' value", path);
  const char *s = dict_value(h, "shape");
  if (!s || *s != '(')
    return sl__fail(SL_EINVAL, "npy '%s': header has no 'shape' tuple", path);
  s++;
  meta->shape.ndim = 0;
  for (;;) {
    while (*s == ' ' || *s == ',')
      s++;
    if (*s == ')') break;
    if (*s < '0' || *s > '9')
      return sl__fail(SL_EINVAL, "npy '%s': malformed shape", path);
    if (meta->shape.ndim == SL_MAX_DIMS)
      return sl__fail(SL_EINVAL, "npy '%s': more than %d dimensions", path,
                      SL_MAX_DIMS);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || v < 0)
      return sl__fail(SL_EINVAL, "npy '%s': malformed shape", path);
    meta->shape.dims[meta->shape.ndim++] = v;
    s = end;
    while (*s == ' ' || *s == 'L')
      s++;
    if (*s != ',' && *s != ')')
      return sl__fail(SL_EINVAL, "npy '%s': malformed shape", path);
  }
  if (meta->shape.ndim == 0)
    return sl__fail(SL_EINVAL, "npy '%s': a 0-D array has no rows to batch",
                    path);
  if (meta->shape.dims[0] == 0)
    return sl__fail(SL_EINVAL, "npy '%s': the array has no rows", path);
  int64_t total = 1;
  for (int i = 0; i < meta->shape.ndim; i++) {
    if (meta->shape.dims[i] && total > INT64_MAX / 16 / meta->shape.dims[i])
      return sl__fail(SL_EINVAL, "npy '%s': shape too large", path);
    total *= meta->shape.dims[i];
  }
  return SL_OK;
}

static sl_status read_full(int fd, void *buf, size_t n, int64_t off) {
  char *p = buf;
  while (n) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? SL_EIO : SL_EINVAL;
    p += r;
    n -= (size_t)r;
    off += r;
  }
  return SL_OK;
}

static sl_status open_file(const char *path, npy_file *f) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sl__fail(SL_EIO, "npy '%s': %s", path, strerror(errno));
  sl_status st;
  char *h = NULL;
  unsigned char pre[12];
  if (read_full(fd, pre, 10, 0) != SL_OK || memcmp(pre, "\x93NUMPY", 6) != 0) {
    st = sl__fail(SL_EINVAL, "npy '%s': not a .npy file (bad magic)", path);
    goto fail;
  }
  int major = pre[6];
  int64_t hlen, hstart;
  if (major == 1) {
    hlen = pre[8] | (int64_t)pre[9] << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (read_full(fd, pre + 10, 2, 10) != SL_OK) {
      st = sl__fail(SL_EINVAL, "npy '%s': truncated header", path);
      goto fail;
    }
    hlen = pre[8] | (int64_t)pre[9] << 8 | (int64_t)pre[10] << 16 |
           (int64_t)pre[11] << 24;
    hstart = 12;
  } else {
    st = sl__fail(SL_EINVAL, "npy '%s': format version %d.%d unsupported", path,
                  major, pre[7]);
    goto fail;
  }
  if (hlen <= 0 || hlen > (1 << 24)) {
    st = sl__fail(SL_EINVAL, "npy '%s': header length %lld out of range", path,
                  (long long)hlen);
    goto fail;
  }
  if (!(h = sl__malloc((size_t)hlen + 1))) {
    st = SL_ENOMEM;
    goto fail;
  }
  if (read_full(fd, h, (size_t)hlen, hstart) != SL_OK) {
    st = sl__fail(SL_EINVAL, "npy '%s': truncated header", path);
    goto fail;
  }
  h[hlen] = '\0';
  if (strlen(h) != (size_t)hlen) {
    st = sl__fail(SL_EINVAL, "npy '%s': NUL byte in the header", path);
    goto fail;
  }
  SL_CHECK_GOTO(parse_header(path, h, &f->meta), st, fail);
  struct stat sb;
  int64_t need =
      hstart + hlen +
      sl_shape_numel(&f->meta.shape) * (int64_t)sl_dtype_size(f->meta.dtype);
  if (fstat(fd, &sb) != 0) {
    st = sl__fail(SL_EIO, "npy '%s': %s", path, strerror(errno));
    goto fail;
  }
  if ((int64_t)sb.st_size < need) {
    st = sl__fail(SL_EINVAL,
                  "npy '%s': file has %lld bytes, the header "
                  "promises %lld",
                  path, (long long)sb.st_size, (long long)need);
    goto fail;
  }
  sl__free(h);
  f->fd = fd;
  f->data_offset = hstart + hlen;
  return SL_OK;
fail:
  sl__free(h);
  close(fd);
  return st;
}

/* ---- the table ---------------------------------------------------------- */

sl_status sl__npy_open(const char *path, int32_t *id) {
  *id = -1;
  npy_file f = {0};
  SL_CHECK(open_file(path, &f));
  if (!(f.path = sl__strdup(path))) {
    close(f.fd);
    return SL_ENOMEM;
  }
  pthread_mutex_lock(&table_lock);
  if (table_len == table_cap) {
    int32_t cap = table_cap ? table_cap * 2 : 8;
    npy_file *t = sl__reallocarray(table, (size_t)cap, sizeof *t);
    if (!t) {
      pthread_mutex_unlock(&table_lock);
      close(f.fd);
      sl__free(f.path);
      return SL_ENOMEM;
    }
    table = t;
    table_cap = cap;
  }
  *id = table_len;
  table[table_len++] = f;
  pthread_mutex_unlock(&table_lock);
  return SL_OK;
}

void sl__npy_release(int32_t id) {
  pthread_mutex_lock(&table_lock);
  if (id >= 0 && id < table_len && table[id].fd >= 0) {
    close(table[id].fd);
    table[id].fd = -1;
    sl__free(table[id].path);
    table[id].path = NULL;
  }
  pthread_mutex_unlock(&table_lock);
}

sl_status sl__npy_path(int32_t id, char *buf, size_t n) {
  char *abs = NULL;
  pthread_mutex_lock(&table_lock);
  bool ok = id >= 0 && id < table_len && table[id].fd >= 0;
  if (ok) abs = realpath(table[id].path, NULL);
  int err = errno;
  pthread_mutex_unlock(&table_lock);
  if (!ok) return sl__fail(SL_ENOTFOUND, "npy: no open file %d", (int)id);
  if (!abs) return sl__fail(SL_EIO, "npy: file %d: %s", (int)id, strerror(err));
  size_t len = strlen(abs);
  sl_status st = SL_OK;
  if (len >= n)
    st = sl__fail(SL_EINVAL, "npy '%s': path longer than %zu bytes", abs, n);
  else
    memcpy(buf, abs, len + 1);
  free(abs);
  return st;
}

/* A copy of the entry (its fd stays open while the graph holds the id). */
static sl_status lookup(int32_t id, npy_file *out) {
  pthread_mutex_lock(&table_lock);
  bool ok = id >= 0 && id < table_len && table[id].fd >= 0;
  if (ok) *out = table[id];
  pthread_mutex_unlock(&table_lock);
  return ok ? SL_OK
            : sl__fail(SL_ENOTFOUND, "npy file id %d is not open", (int)id);
}

sl_status sl__npy_meta(int32_t id, sl__meta *out) {
  npy_file f;
  SL_CHECK(lookup(id, &f));
  *out = f.meta;
  return SL_OK;
}

/* ---- writing (tests, tools) --------------------------------------------- */

sl_status sl__npy_write(const char *path, sl_dtype dt, const sl_shape *shape,
                        const void *data) {
  const char *descr = dt == SL_DTYPE_F32   ? "<f4"
                      : dt == SL_DTYPE_I32 ? "<i4"
                      : dt == SL_DTYPE_I64 ? "<i8"
                                           : NULL;
  if (!descr)
    return sl__fail(SL_EINVAL, "npy '%s': cannot write dtype %s", path,
                    sl_dtype_name(dt));
  char dict[256];
  int len =
      snprintf(dict, sizeof dict,
               "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < shape->ndim; i++)
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld%s",
                    (long long)shape->dims[i],
                    shape->ndim == 1 ? "," : (i + 1 < shape->ndim ? ", " : ""));
  len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
  /* Pad with spaces so data starts 64-byte aligned; end with a newline. */
  int total = 10 + len + 1;
  int pad = (64 - total % 64) % 64;
  int hlen = len + pad + 1;
  FILE *fp = fopen(path, "wb");
  if (!fp) return sl__fail(SL_EIO, "npy '%s': %s", path, strerror(errno));
  unsigned char pre[10] = {0x93,
                           'N',
                           'U',
                           'M',
                           'P',
                           'Y',
                           1,
                           0,
                           (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  size_t bytes = (size_t)sl_shape_numel(shape) * sl_dtype_size(dt);
  bool ok = fwrite(pre, 1, 10, fp) == 10 &&
            fwrite(dict, 1, (size_t)len, fp) == (size_t)len;
  for (int i = 0; ok && i < pad; i++)
    ok = fputc(' ', fp) != EOF;
  ok = ok && fputc('\n', fp) != EOF;
  ok = ok && (bytes == 0 || fwrite(data, 1, bytes, fp) == bytes);
  ok = (fclose(fp) == 0) && ok;
  return ok ? SL_OK : sl__fail(SL_EIO, "npy '%s': write failed", path);
}

/* ---- the op -------------------------------------------------------------- */

static sl_status npy_infer(const sl__attrs *at, int n_in, const sl__meta *in,
                           sl__meta *out) {
  int64_t batch = sl__attr_int(at, "batch", 0);
  if (batch <= 0)
    return sl__fail(SL_EINVAL, "batch %lld must be positive", (long long)batch);
  sl__meta m;
  SL_CHECK(sl__npy_meta((int32_t)sl__attr_int(at, "file", -1), &m));
  m.shape.dims[0] = batch;
  out[0] = m;
  return SL_OK;
}

static int npy_signatures(const sl__attrs *at, int n_in, const sl__meta *in,
                          sl__sbp_sig *sigs, int max) {
  sl__meta m;
  if (sl__npy_meta((int32_t)sl__attr_int(at, "file", -1), &m) != SL_OK)
    return 0;
  int n = 0;
  for (int a = 0; a < m.shape.ndim && n < max; a++) {
    memset(&sigs[n], 0, sizeof sigs[n]);
    sigs[n++].out[0] = sl_sbp_split(a);
  }
  return n;
}

static sl_status npy_cpu(const sl__kernel_ctx *k) {
  npy_file f;
  SL_CHECK(lookup((int32_t)sl__attr_int(k->attrs, "file", -1), &f));
  int64_t batch = sl__attr_int(k->attrs, "batch", 0);
  const sl_slice *sl = &k->out_slice[0];
  const sl_shape *fs = &f.meta.shape;
  int nd = fs->ndim;
  size_t es = sl_dtype_size(f.meta.dtype);
  if (sl_slice_numel(sl) == 0) return SL_OK;
  int64_t fstride[SL_MAX_DIMS];
  sl_shape_strides(fs, fstride);
  /* The innermost run that is contiguous in the file: trailing axes the
   * slice covers whole, plus the extent of the next one. */
  int run_axis = nd - 1;
  int64_t run = sl->extent[nd - 1];
  while (run_axis > 0 && sl->start[run_axis] == 0 &&
         sl->extent[run_axis] == fs->dims[run_axis]) {
    run_axis--;
    run *= sl->extent[run_axis];
  }
  if (run_axis == 0) run = run / sl->extent[0]; /* one row's part */
  int outer = run_axis == 0 ? 1 : run_axis;     /* axes 1..outer-1 iterate */
  int64_t n_rows = fs->dims[0];
  /* Each step reads the next `rows` rows: the batch, or for a micro-batch's
   * copy the step's whole batch (sl__graph_micro_shift), of which its
   * slice is its part. */
  int64_t per_step = k->out_global[0].ndim ? k->out_global[0].dims[0] : batch;
  int64_t base = (k->step % n_rows) * (per_step % n_rows) % n_rows;
  if (base < 0) base += n_rows;
  char *dst = k->out[0];
  size_t run_bytes = (size_t)run * es;
  int64_t idx[SL_MAX_DIMS] = {0};
  for (int64_t r = 0; r < sl->extent[0];) {
    int64_t row = (base + sl->start[0] + r) % n_rows;
    if (run_axis == 0) {
      /* Whole rows: read up to the end of the file in one go. */
      int64_t rows = SL_MIN(sl->extent[0] - r, n_rows - row);
      size_t bytes = (size_t)rows * run_bytes;
      sl_status st = read_full(f.fd, dst, bytes,
                               f.data_offset + row * fstride[0] * (int64_t)es);
      if (st != SL_OK) return sl__fail(SL_EIO, "npy '%s': read failed", f.path);
      dst += bytes;
      r += rows;
      continue;
    }
    /* Iterate axes 1..run_axis-1 over the slice; run along run_axis... */
    for (int d = 1; d < outer; d++)
      idx[d] = 0;
    for (;;) {
      int64_t off = row * fstride[0];
      for (int d = 1; d < run_axis; d++)
        off += (sl->start[d] + idx[d]) * fstride[d];
      off += sl->start[run_axis] * fstride[run_axis];
      if (read_full(f.fd, dst, run_bytes, f.data_offset + off * (int64_t)es) !=
          SL_OK)
        return sl__fail(SL_EIO, "npy '%s': read failed", f.path);
      dst += run_bytes;
      int d = run_axis - 1;
      while (d >= 1 && ++idx[d] == sl->extent[d])
        idx[d--] = 0;
      if (d < 1) break;
    }
    r++;
  }
  return SL_OK;
}

const sl__op_def sl__op_npy_read = {
    .name = "npy_read",
    .min_in = 0,
    .max_in = 0,
    .n_out = 1,
    .infer = npy_infer,
    .signatures = npy_signatures,
    .cpu = npy_cpu,
    .cuda_from_host = true,
    .per_step = true,
    .by_position = true,
};
