/* sl_checkpoint_convert: any checkpoint as one standard safetensors file,
 * each tensor whole under its name, streamed box by box (never a whole
 * tensor in memory). */
#include <stdio.h>
#include <string.h>

#include "ckpt_int.h"

#define CHUNK (4u << 20)

/* Tensor i into w, in boxes of at most CHUNK bytes (one row of the
 * outermost dimension whose inner block fits, several when they fit), each
 * contiguous in the row-major output. */
static sl_status copy_tensor(const sl_checkpoint *c, int32_t i,
                             const sl_checkpoint_tensor *t, unsigned char *buf,
                             sl__wfile *w) {
  size_t es = t->dtype_known ? sl_dtype_size(t->dtype) : 0;
  if (es == 0) {
    /* A dtype sluice does not know: only a plain file has one, its
     * single piece copied byte for byte. */
    for (int64_t off = 0; off < t->bytes;) {
      size_t n = (size_t)SL_MIN((int64_t)CHUNK, t->bytes - off);
      SL_CHECK(sl__checkpoint_read_raw(c, i, off, buf, n));
      SL_CHECK(sl__wfile_write(w, buf, n));
      off += (int64_t)n;
    }
    return SL_OK;
  }
  const sl_shape *s = &t->shape;
  int nd = s->ndim;
  if (sl_shape_numel(s) == 0) return SL_OK;
  if (nd == 0) {
    SL_CHECK(sl_checkpoint_read(c, i, NULL, buf, es));
    return sl__wfile_write(w, buf, es);
  }
  int64_t inner[SL_MAX_DIMS];
  inner[nd - 1] = 1;
  for (int d = nd - 1; d > 0; d--)
    inner[d - 1] = inner[d] * s->dims[d];
  int cd = 0;
  while (inner[cd] * (int64_t)es > (int64_t)CHUNK)
    cd++;
  int64_t rows = (int64_t)CHUNK / (inner[cd] * (int64_t)es);
  sl_slice box = {.ndim = nd};
  for (int d = 0; d < nd; d++)
    box.extent[d] = d < cd ? 1 : s->dims[d];
  for (;;) {
    box.extent[cd] = SL_MIN(rows, s->dims[cd] - box.start[cd]);
    size_t n = (size_t)(sl_slice_numel(&box) * (int64_t)es);
    SL_CHECK(sl_checkpoint_read(c, i, &box, buf, n));
    SL_CHECK(sl__wfile_write(w, buf, n));
    box.start[cd] += box.extent[cd];
    if (box.start[cd] < s->dims[cd]) continue;
    box.start[cd] = 0;
    int d = cd - 1;
    while (d >= 0 && ++box.start[d] == s->dims[d])
      box.start[d--] = 0;
    if (d < 0) break;
  }
  return SL_OK;
}

sl_status sl_checkpoint_convert(const char *path, const char *out_path) {
  if (!path || !out_path)
    return sl__fail(SL_EINVAL, "sl_checkpoint_convert: a path is NULL");
  sl_checkpoint *c = NULL;
  SL_CHECK(sl_checkpoint_open(path, &c));
  sl_status st = SL_OK;
  int32_t n = sl_checkpoint_tensor_count(c);
  sl__st_out *e = sl__calloc((size_t)n + 1, sizeof *e);
  sl_checkpoint_tensor *ts = sl__calloc((size_t)n + 1, sizeof *ts);
  const char **mk = NULL, **mv = NULL;
  unsigned char *buf = sl__malloc(CHUNK);
  sl__jbuf hdr = {0};
  sl__wfile w = {.fd = -1};
  bool opened = false;
  if (!e || !ts || !buf) {
    st = SL_ENOMEM;
    goto done;
  }
  for (int32_t k = 0; k < n; k++) {
    SL_CHECK_GOTO(sl_checkpoint_get_tensor(c, k, &ts[k]), st, done);
    e[k].key = ts[k].name;
    e[k].dtype_name = ts[k].dtype_name;
    e[k].ndim = ts[k].shape.ndim;
    e[k].dims = ts[k].shape.dims;
    e[k].bytes = ts[k].bytes;
  }
  /* __metadata__: the step, then the checkpoint's own metadata. */
  int32_t n_meta = 0;
  int64_t step = sl_checkpoint_step(c);
  bool add_step = sl_checkpoint_is_sharded(c) || step >= 0;
  int32_t total = sl_checkpoint_metadata_count(c);
  mk = sl__calloc((size_t)total + 2, sizeof *mk);
  mv = sl__calloc((size_t)total + 2, sizeof *mv);
  if (!mk || !mv) {
    st = SL_ENOMEM;
    goto done;
  }
  char stepbuf[24];
  snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
  if (add_step) {
    mk[n_meta] = "step";
    mv[n_meta++] = stepbuf;
  }
  for (int32_t k = 0; k < total; k++) {
    const char *key, *value;
    sl_checkpoint_metadata_get(c, k, &key, &value);
    if (add_step && strcmp(key, "step") == 0) continue;
    mk[n_meta] = key;
    mv[n_meta++] = value;
  }
  SL_CHECK_GOTO(sl__st_header_build(n, e, n_meta, mk, mv, 8, &hdr), st, done);
  SL_CHECK_GOTO(sl__wfile_open(out_path, false, &w), st, done);
  opened = true;
  SL_CHECK_GOTO(sl__wfile_write(&w, hdr.data, hdr.len), st, done);
  for (int32_t k = 0; k < n; k++)
    SL_CHECK_GOTO(copy_tensor(c, k, &ts[k], buf, &w), st, done);
  opened = false;
  st = sl__wfile_finish(&w);
done:
  if (opened) sl__wfile_abort(&w);
  sl__jbuf_free(&hdr);
  sl__free(buf);
  sl__free(mk);
  sl__free(mv);
  sl__free(ts);
  sl__free(e);
  sl_checkpoint_close(c);
  return st;
}
