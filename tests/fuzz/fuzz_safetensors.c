/* A safetensors file from any bytes: sl__st_parse_memory, and, for what it
 * accepts, the header rebuilt by sl__st_header_build parses back to the same
 * entries and metadata, and the file opens and reads through
 * sl_checkpoint_open and sl_checkpoint_read (pread of row runs). */
#include <fcntl.h>
#include <unistd.h>

#include "ckpt_int.h"
#include "fuzz_common.h"

static char path[64];

static void check_entries(const sl__st_header *h) {
  for (int32_t k = 0; k < h->n; k++) {
    const sl__st_entry *e = &h->entries[k];
    if (k) FUZZ_CHECK(strcmp(h->entries[k - 1].key, e->key) < 0, "unsorted");
    FUZZ_CHECK(e->begin >= 0 && e->begin <= e->end && e->end <= h->data_bytes,
               "'%s': [%lld, %lld) outside %lld bytes", e->key,
               (long long)e->begin, (long long)e->end,
               (long long)h->data_bytes);
    if (e->esize)
      FUZZ_CHECK(e->end - e->begin ==
                     sl_shape_numel(&e->shape) * (int64_t)e->esize,
                 "'%s': size", e->key);
  }
}

/* The accepted header rebuilt from its entries parses to the same. */
static void round_trip(const sl__st_header *h) {
  sl__st_out *o = calloc((size_t)h->n + 1, sizeof *o);
  int64_t total = 0;
  for (int32_t k = 0; k < h->n; k++) {
    const sl__st_entry *e = &h->entries[k];
    o[k] = (sl__st_out){e->key, e->dtype_name, e->shape.ndim, e->shape.dims,
                        e->end - e->begin};
    total += e->end - e->begin;
  }
  sl__jbuf b;
  FUZZ_CHECK(sl__st_header_build(h->n, o, h->n_meta, h->meta_keys,
                                 h->meta_values, SL__CKPT_DATA_ALIGN,
                                 &b) == SL_OK,
             "build: %s", sl_last_error());
  FUZZ_CHECK(b.len % SL__CKPT_DATA_ALIGN == 0, "header of %zu bytes", b.len);
  sl__st_header *g;
  FUZZ_CHECK(
      sl__st_header_parse(b.data + 8, b.len - 8, total, "rebuilt", &g) == SL_OK,
      "the rebuilt header does not parse: %s\n%s", sl_last_error(), b.data + 8);
  FUZZ_CHECK(g->n == h->n && g->n_meta == h->n_meta, "counts differ");
  for (int32_t k = 0; k < h->n; k++) {
    FUZZ_CHECK(strcmp(g->entries[k].key, h->entries[k].key) == 0, "key");
    FUZZ_CHECK(strcmp(g->entries[k].dtype_name, h->entries[k].dtype_name) == 0,
               "dtype");
    FUZZ_CHECK(sl_shape_equal(&g->entries[k].shape, &h->entries[k].shape),
               "shape");
  }
  for (int32_t k = 0; k < h->n_meta; k++)
    FUZZ_CHECK(strcmp(g->meta_keys[k], h->meta_keys[k]) == 0 &&
                   strcmp(g->meta_values[k], h->meta_values[k]) == 0,
               "metadata");
  sl__st_header_free(g);
  sl__jbuf_free(&b);
  free(o);
}

static void open_and_read(const uint8_t *data, size_t size) {
  if (!path[0]) {
    snprintf(path, sizeof path, "/tmp/sluice-fuzz-st-%d.safetensors",
             (int)getpid());
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return;
  ssize_t w = write(fd, data, size);
  close(fd);
  if (w != (ssize_t)size) return;
  sl_checkpoint *c;
  FUZZ_CHECK(sl_checkpoint_open(path, &c) == SL_OK,
             "parsed from memory but not from a file: %s", sl_last_error());
  for (int32_t i = 0; i < sl_checkpoint_tensor_count(c); i++) {
    sl_checkpoint_tensor t;
    FUZZ_CHECK(sl_checkpoint_get_tensor(c, i, &t) == SL_OK, "get %d", i);
    if (!t.dtype_known) continue;
    void *buf = malloc((size_t)t.bytes + 1);
    FUZZ_CHECK(sl_checkpoint_read(c, i, NULL, buf, (size_t)t.bytes) == SL_OK,
               "read '%s': %s", t.name, sl_last_error());
    /* A box: the second half of the first dimension. */
    if (t.shape.ndim > 0 && t.shape.dims[0] > 1) {
      sl_slice b = {.ndim = t.shape.ndim};
      memcpy(b.extent, t.shape.dims, sizeof b.extent);
      b.start[0] = t.shape.dims[0] / 2;
      b.extent[0] = t.shape.dims[0] - b.start[0];
      size_t n = (size_t)sl_slice_numel(&b) * sl_dtype_size(t.dtype);
      FUZZ_CHECK(sl_checkpoint_read(c, i, &b, buf, n) == SL_OK, "box read");
    }
    free(buf);
  }
  sl_checkpoint_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly size bytes, so ASan sees a read past the end. */
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  sl__st_header *h;
  sl_clear_error();
  if (sl__st_parse_memory(copy, size, "fuzz", &h) != SL_OK) {
    FUZZ_CHECK(h == NULL, "rejected but *out set");
    FUZZ_CHECK(sl_last_error()[0] != '\0', "rejected without a message");
    free(copy);
    return 0;
  }
  check_entries(h);
  round_trip(h);
  sl__st_header_free(h);
  open_and_read(copy, size);
  free(copy);
  return 0;
}
