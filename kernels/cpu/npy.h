/* sluice kernels — the .npy reader: a process-wide table of opened files
 * and the per-step op `npy_read` that reads one device's slice of a batch.
 *
 * npy_read attrs: file (an id from sl__npy_open), batch. No inputs; one
 * output [batch, ...] of the file's dtype. Step k's batch is the file rows
 * [k*batch, (k+1)*batch) modulo N. The kernel preads exactly its output
 * slice from the file. Signatures: S(a) on any axis a (and B). */
#ifndef SLUICE_KERNELS_CPU_NPY_H
#define SLUICE_KERNELS_CPU_NPY_H

#include "op.h"

/* Opens path and parses its header (format v1, v2 or v3; C order; dtype
 * '<f4', '<i4' or '<i8'; at least one dimension, N >= 1 rows) and checks
 * that the file holds all the data. *id names the open file until
 * sl__npy_release. SL_EIO (cannot open or read), SL_EINVAL (bad header,
 * unsupported dtype, Fortran order, short file), SL_ENOMEM; messages name
 * the path. */
sl_status sl__npy_open(const char *path, int32_t *id);
/* Closes the file; id is never reused. Unknown ids are ignored. */
void sl__npy_release(int32_t id);
/* The path the file was opened with, made absolute (so another process on
 * this machine, or one sharing the file system, can open it too), into
 * buf of n bytes. SL_ENOTFOUND for an unknown id, SL_EIO when the path no
 * longer resolves, SL_EINVAL when it does not fit. */
sl_status sl__npy_path(int32_t id, char *buf, size_t n);
/* The whole file's shape and dtype. SL_ENOTFOUND for an unknown id. */
sl_status sl__npy_meta(int32_t id, sl__meta *out);

/* Writes a .npy file (format v1) of the given dtype and shape: for tests
 * and tools. SL_EIO, SL_EINVAL (dtype other than f32, i32, i64). */
sl_status sl__npy_write(const char *path, sl_dtype dt, const sl_shape *shape,
                        const void *data);

extern const sl__op_def sl__op_npy_read;

#endif
