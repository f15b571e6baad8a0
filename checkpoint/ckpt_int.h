/* The checkpoint module's private interface: safetensors headers, the
 * parsed index, and the buffered file writer that the node files and
 * sl_checkpoint_convert share (docs/checkpoint.md). */
#ifndef SLUICE_CKPT_INT_H
#define SLUICE_CKPT_INT_H

#include <sluice/checkpoint.h>

#include "ckpt_write.h"
#include "core_int.h"
#include "json.h"

/* The safetensors reference reader's limit on the JSON header. */
#define SL__ST_HEADER_MAX (100ll << 20)
/* index.json is read whole. */
#define SL__CKPT_INDEX_MAX (256ll << 20)
/* Pieces of one tensor (checked pairwise for overlaps). */
#define SL__CKPT_MAX_PIECES 4096

/* ---- dtypes as safetensors names them ---------------------------------- */

/* "F32", "BF16", ... for a sluice dtype; NULL for an invalid one. */
const char *sl__st_dtype_name(sl_dtype dt);
/* The element size of a safetensors dtype name (sluice's and others like
 * U16, U32, U64, I16, F8_E4M3, F8_E5M2), 0 when unknown; *known and *dt
 * say whether sluice has it. */
size_t sl__st_dtype_size(const char *name, bool *known, sl_dtype *dt);

/* A JSON array of at most SL_MAX_DIMS non-negative integers whose product
 * fits int64, as a shape. false otherwise. */
bool sl__json_dims(const sl__json *v, sl_shape *out);

/* ---- safetensors headers ----------------------------------------------- */

typedef struct sl__st_entry {
  const char *key;
  const char *dtype_name;
  bool dtype_known;
  sl_dtype dtype;
  size_t esize; /* 0: a dtype of unknown size */
  sl_shape shape;
  int64_t begin, end; /* data_offsets, relative to the data section */
} sl__st_entry;

typedef struct sl__st_header {
  sl_arena *arena;
  int64_t data_start; /* 8 + N: where offset 0 lies in the file */
  int64_t data_bytes; /* file size - data_start */
  int32_t n;
  sl__st_entry *entries; /* sorted by key */
  int32_t n_meta;
  const char **meta_keys, **meta_values; /* __metadata__, document order */
} sl__st_header;

/* Parses the JSON header text[0..len) of a file whose data section holds
 * data_bytes bytes, checking every entry (dtype, shape, offsets in bounds,
 * size = numel * element size, no two entries overlapping). `what` names
 * the file in messages. SL_EINVAL, SL_ENOMEM. */
sl_status sl__st_header_parse(const char *text, size_t len, int64_t data_bytes,
                              const char *what, sl__st_header **out);
/* A whole safetensors file in memory (the fuzz target's entry). */
sl_status sl__st_parse_memory(const void *data, size_t size, const char *what,
                              sl__st_header **out);
/* Reads and parses the header of the open file fd of size `size`.
 * SL_EIO, SL_EINVAL, SL_ENOMEM; messages name `path`. */
sl_status sl__st_header_read(int fd, const char *path, int64_t size,
                             sl__st_header **out);
void sl__st_header_free(sl__st_header *h);
/* The entry named key, NULL when none. */
const sl__st_entry *sl__st_header_find(const sl__st_header *h, const char *key);
const char *sl__st_header_meta(const sl__st_header *h, const char *key);

/* One entry to write. */
typedef struct sl__st_out {
  const char *key;
  const char *dtype_name;
  int ndim;
  const int64_t *dims;
  int64_t bytes;
} sl__st_out;

/* The bytes of a safetensors header (length prefix, JSON, space padding to
 * a multiple of `align`, a power of two >= 8, where the data section
 * starts) for entries laid out in order from offset 0, with __metadata__
 * from the n_kv pairs (none: no __metadata__). */
sl_status sl__st_header_build(int32_t n, const sl__st_out *e, int32_t n_kv,
                              const char *const *keys,
                              const char *const *values, size_t align,
                              sl__jbuf *out);

/* ---- the index --------------------------------------------------------- */

typedef struct sl__ckpt_ref {
  int32_t file;
  const char *key;
  sl_slice box;
  const sl__st_entry *entry; /* set when the file's header is read */
} sl__ckpt_ref;

typedef struct sl__ckpt_tensor {
  const char *name, *dtype_name;
  bool dtype_known;
  sl_dtype dtype;
  size_t esize;
  sl_shape shape;
  const char *placement, *sbp;
  int32_t n_pieces;
  sl__ckpt_ref *pieces;
  int64_t bytes; /* of the logical tensor; stored bytes when esize is 0 */
} sl__ckpt_tensor;

typedef struct sl__ckpt_fileref {
  const char *name;
  uint32_t node;
  int64_t bytes;
  uint32_t crc32c;
} sl__ckpt_fileref;

typedef struct sl__ckpt_index {
  sl_arena *arena;
  int64_t step;
  int32_t n_meta;
  const char **meta_keys, **meta_values;
  int32_t n_files;
  sl__ckpt_fileref *files;
  int32_t n_tensors;
  sl__ckpt_tensor *tensors; /* sorted by name */
} sl__ckpt_index;

/* Parses and checks index.json text: its fields and types, file names,
 * every tensor's dtype and shape, pieces inside their tensor, not
 * overlapping and together covering it. What needs the files (keys,
 * sizes, CRCs) is sl_checkpoint_open's. `what` names the index in
 * messages. SL_EINVAL, SL_ENOMEM. */
sl_status sl__ckpt_index_parse(const char *text, size_t len, const char *what,
                               sl__ckpt_index **out);
void sl__ckpt_index_free(sl__ckpt_index *x);

/* Checks n boxes of a tensor of shape `shape`: each of its rank and inside
 * it, no two overlapping, together covering it. SL_EINVAL naming the
 * tensor and the box. */
sl_status sl__ckpt_check_cover(const char *tensor, const sl_shape *shape,
                               int32_t n, const sl_slice *const *boxes);

/* The raw stored bytes [off, off + n) of tensor i's first piece (convert
 * copies a plain file's tensors of unknown element size this way). */
sl_status sl__checkpoint_read_raw(const sl_checkpoint *c, int32_t i,
                                  int64_t off, void *data, size_t n);

/* ---- writing files ----------------------------------------------------- */

/* A file written under "<path>.tmp", buffered, with a running CRC32C and
 * byte count, and renamed into place by sl__wfile_finish.
 *
 * Direct (O_DIRECT where the file system has it): the bytes go from the
 * caller's memory to the disk without the page cache's copy and writeback
 * work, for a writer that runs beside training (a background save) and
 * should take as little CPU as it can. Whole SL__CKPT_DATA_ALIGN blocks of
 * a write whose memory and file offset are block-aligned go straight from
 * the caller's memory; the rest is copied through the (aligned) buffer,
 * and the file's last partial block is written without O_DIRECT. */
typedef struct sl__wfile {
  int fd;
  bool direct; /* fd has O_DIRECT */
  char *path, *tmp;
  unsigned char *buf;
  size_t buf_len, buf_cap;
  uint32_t crc;
  int64_t bytes;
} sl__wfile;

sl_status sl__wfile_open(const char *path, bool direct, sl__wfile *w);
sl_status sl__wfile_write(sl__wfile *w, const void *data, size_t n);
/* Flush, fsync, close, rename, fsync the directory; frees w's resources.
 * On failure the temporary file is removed. */
sl_status sl__wfile_finish(sl__wfile *w);
/* Closes and removes the temporary file; frees w's resources. */
void sl__wfile_abort(sl__wfile *w);
/* fsync of the directory holding path. */
sl_status sl__fsync_parent(const char *path);

/* Writes all n bytes at offset off / reads them; SL_EIO naming path. */
sl_status sl__pread_full(int fd, void *buf, size_t n, int64_t off,
                         const char *path);

#endif
