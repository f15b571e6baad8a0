/* Writing a checkpoint directory (docs/formats.md, "Checkpoints"): each node
 * writes its own safetensors file, then one process commits the index.
 *
 *   sl__ckpt_file_create   the node's file under a temporary name, its
 *                          header (every piece's key, dtype, shape and
 *                          data offsets) written first
 *   sl__ckpt_file_write    each piece's bytes, in the order declared
 *   sl__ckpt_file_close    fsync, rename to its final name, the file's
 *                          size and CRC32C
 *   sl__ckpt_commit        index.json under a temporary name, fsync,
 *                          renamed into place (the commit point), the
 *                          directory fsync'd; then files of earlier saves
 *                          that the new index no longer names are removed
 *
 * File names carry the step ("step-000500.node0.safetensors"), so a save
 * into a directory that holds a checkpoint never overwrites a file its
 * index names: a process killed at any point leaves the previous
 * checkpoint loadable. */
#ifndef SLUICE_CKPT_WRITE_H
#define SLUICE_CKPT_WRITE_H

#include <sluice/checkpoint.h>

/* One stored piece: part `box` (global coordinates) of logical tensor
 * `tensor`. Strings are copied. */
typedef struct sl__ckpt_piece {
  const char *tensor;
  sl_dtype dtype;
  sl_shape shape;        /* the logical tensor's global shape */
  const char *placement; /* printed placement of the saved layout */
  const char *sbp;       /* printed nd-SBP */
  sl_slice box;          /* what this piece covers */
} sl__ckpt_piece;

typedef struct sl__ckpt_file sl__ckpt_file;

/* A node file's data section starts at a multiple of this (the header is
 * padded with spaces), and a direct write moves whole blocks of it: the
 * page size, and a multiple of every disk's logical block. Memory that a
 * direct write should take without a copy is aligned to it. */
#define SL__CKPT_DATA_ALIGN 4096

/* The file name node `node` uses for a save after step `step`:
 * "step-<step, 6+ digits>.node<node>.safetensors" into buf (like
 * snprintf). */
int sl__ckpt_file_name(int64_t step, uint32_t node, char *buf, size_t size);

/* Creates dir when missing (one level) and "<dir>/<name>.tmp", and writes
 * the safetensors header for n pieces (n may be 0): keys are the tensor's
 * name when a piece covers the whole tensor, "<tensor>#<k>" (k counting
 * that tensor's pieces in this file) otherwise; __metadata__ holds
 * "format": "sluice", "step". `direct`: written with direct I/O where the
 * file system allows it, bypassing the page cache (less CPU for a writer
 * beside training); the whole blocks of a piece whose memory is aligned
 * to SL__CKPT_DATA_ALIGN and which starts at such an offset of the data
 * section go to the disk without a copy. SL_EIO naming the path,
 * SL_EINVAL. */
sl_status sl__ckpt_file_create(const char *dir, const char *name, int64_t step,
                               int32_t n, const sl__ckpt_piece *pieces,
                               bool direct, sl__ckpt_file **out);

/* The bytes of the next piece (bytes must be its size: numel of its box
 * times the dtype's size). SL_EIO, SL_EINVAL (out of order, wrong size). */
sl_status sl__ckpt_file_write(sl__ckpt_file *f, const void *data, size_t bytes);

/* What a closed file was: its name (in the directory), size, CRC32C of
 * every byte, and its pieces' keys (in declaration order). */
typedef struct sl__ckpt_file_done {
  char name[128];
  uint32_t node;
  int64_t bytes;
  uint32_t crc32c;
  int32_t n;
  char **keys;            /* owned: sl__ckpt_file_done_free */
  sl__ckpt_piece *pieces; /* copies of the declared pieces (strings owned) */
} sl__ckpt_file_done;

/* After every piece was written: fsync, close, rename into place.
 * Frees f (also on failure, removing the temporary file). */
sl_status sl__ckpt_file_close(sl__ckpt_file *f, uint32_t node,
                              sl__ckpt_file_done *out);
/* What sl__ckpt_file_close reports for a file another process wrote from
 * the same pieces (a daemon's, for the program committing the index): the
 * keys derived as sl__ckpt_file_create derives them. */
sl_status sl__ckpt_file_describe(const char *name, uint32_t node, int64_t bytes,
                                 uint32_t crc32c, int32_t n,
                                 const sl__ckpt_piece *pieces,
                                 sl__ckpt_file_done *out);
/* Removes the temporary file and frees f. NULL is a no-op. */
void sl__ckpt_file_abort(sl__ckpt_file *f);
void sl__ckpt_file_done_free(sl__ckpt_file_done *d);

/* A metadata entry of the index (both strings copied). */
typedef struct sl__ckpt_kv {
  const char *key, *value;
} sl__ckpt_kv;

/* Commits a save: index.json naming the n files (every node's, as their
 * writers reported them), the step and the metadata, written atomically
 * as the header describes; then removes "step-*.safetensors" files of the
 * directory the new index does not name, and stale "*.tmp" files.
 * SL_EIO naming the path. */
sl_status sl__ckpt_commit(const char *dir, int64_t step, int32_t n,
                          const sl__ckpt_file_done *files, int32_t n_kv,
                          const sl__ckpt_kv *kv);

/* Every file's CRC32C: core/crc32c.h. */
#include "crc32c.h"

#endif
