/* sluice — checkpoints: reading, inspecting and converting what
 * sl_session_save writes, and plain safetensors files from other
 * frameworks (docs/checkpoint.md).
 *
 * A checkpoint is a directory: one safetensors file per node holding that
 * node's pieces of every tensor (each distinct shard once), and
 * `index.json`, which gives every tensor's global shape, dtype, placement,
 * nd-SBP and the global box each stored piece covers, the step, and a
 * CRC32C per file. A plain `.safetensors` file (PyTorch, JAX, the
 * `safetensors` package) opens as a checkpoint whose tensors are each one
 * whole piece.
 *
 * Nothing here needs a session: `sluice ckpt` is built on these calls. */
#ifndef SLUICE_CHECKPOINT_H
#define SLUICE_CHECKPOINT_H

#include <sluice/core.h>
#include <sluice/sbp.h>
#include <sluice/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_checkpoint sl_checkpoint;

/* One logical tensor of a checkpoint. Strings are owned by the
 * checkpoint. */
typedef struct sl_checkpoint_tensor {
  const char *name;
  const char *dtype_name; /* as safetensors spells it: "F32", "BF16", ... */
  bool dtype_known;       /* dtype is one sluice has */
  sl_dtype dtype;         /* meaningful only when dtype_known */
  sl_shape shape;         /* global */
  const char *placement;  /* as saved ("cpu:0-3"); "" in a plain file */
  const char *sbp;        /* as saved ("(S(0))"); "" in a plain file */
  int32_t pieces;         /* stored pieces */
  int64_t bytes;          /* of the logical tensor (a dtype of unknown
                             element size: the bytes stored) */
} sl_checkpoint_tensor;

/* Opens a checkpoint directory (its index.json) or a plain .safetensors
 * file, and checks it: the index and every header parse, data offsets lie
 * inside their file, pieces lie inside their tensor and together cover it,
 * and every file's CRC32C matches the index. Errors name the file and,
 * where there is one, the tensor: SL_ENOTFOUND (no such path), SL_EIO,
 * SL_EINVAL (a malformed or corrupt file), SL_ENOMEM. */
SL_API sl_status sl_checkpoint_open(const char *path, sl_checkpoint **out);

/* NULL is a no-op. */
SL_API void sl_checkpoint_close(sl_checkpoint *c);

/* The training step the checkpoint was saved after; a plain file: its
 * "step" metadata when it has one, else -1. */
SL_API int64_t sl_checkpoint_step(const sl_checkpoint *c);

/* true for a sluice checkpoint directory, false for a plain file. */
SL_API bool sl_checkpoint_is_sharded(const sl_checkpoint *c);

/* A metadata value: the index's "metadata" object (a directory) or the
 * file's "__metadata__" (a plain file); NULL when absent. */
SL_API const char *sl_checkpoint_metadata(const sl_checkpoint *c,
                                          const char *key);

/* The metadata entries, in the order the checkpoint holds them: count,
 * and entry i (strings owned by the checkpoint). SL_ENOTFOUND for an
 * index out of range (*key and *value NULL). */
SL_API int32_t sl_checkpoint_metadata_count(const sl_checkpoint *c);
SL_API sl_status sl_checkpoint_metadata_get(const sl_checkpoint *c, int32_t i,
                                            const char **key,
                                            const char **value);

/* Tensors, sorted by name, by index 0..count-1. SL_ENOTFOUND for an index
 * out of range (*out zeroed). */
SL_API int32_t sl_checkpoint_tensor_count(const sl_checkpoint *c);
SL_API sl_status sl_checkpoint_get_tensor(const sl_checkpoint *c, int32_t i,
                                          sl_checkpoint_tensor *out);
/* The index of tensor `name`, -1 when there is none. */
SL_API int32_t sl_checkpoint_find(const sl_checkpoint *c, const char *name);

/* Copies box `box` (global coordinates; NULL: the whole tensor) of tensor
 * i into data, row-major in the box's shape; bytes must be its size. Only
 * the stored pieces that intersect the box are read, and only their
 * intersecting rows. A plain file's dtype that sluice lacks but whose
 * element size is known (U16, I16, F8_E4M3, ...) is copied as raw bytes.
 * SL_EINVAL for a box outside the tensor, a wrong size or an index out of
 * range, SL_EUNSUPPORTED for a dtype of unknown element size, SL_EIO
 * naming the file. */
SL_API sl_status sl_checkpoint_read(const sl_checkpoint *c, int32_t i,
                                    const sl_slice *box, void *data,
                                    size_t bytes);

/* Writes the checkpoint at `path` as one standard safetensors file (each
 * tensor whole, under its name; the step in __metadata__), written under
 * a temporary name and renamed into place. Readable by the `safetensors`
 * package and by numpy. SL_EIO, SL_EINVAL as sl_checkpoint_open. */
SL_API sl_status sl_checkpoint_convert(const char *path, const char *out_path);

#ifdef __cplusplus
}
#endif
#endif
