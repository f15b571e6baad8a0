/* The CUDA backend module: the contract between libsluice and
 * libsluice-cuda.so (docs/building.md, "The CUDA module").
 *
 * libsluice links no CUDA library. Everything that calls the CUDA runtime,
 * cuBLAS or NCCL (the CUDA device, the ops' CUDA kernels, box moves, the
 * NCCL backend of the device collectives) is built into libsluice-cuda.so,
 * which libsluice opens the first time a CUDA device, kernel or collective
 * is asked for: a program that never places anything on `cuda` maps no
 * CUDA library, and a machine without the CUDA toolkit runs it.
 *
 * The module exports one symbol, SL__CUDA_MODULE_ENTRY, called once with
 * the host table (the few libsluice functions whose state must be
 * libsluice's own: the thread's error message, device handles); it returns
 * its table or NULL with the reason in the host's error. Both tables begin
 * with their size and sluice version, and libsluice accepts only a module
 * of its own version: the two are built from one tree and installed
 * together. */
#ifndef SLUICE_TENSOR_CUDA_MODULE_H
#define SLUICE_TENSOR_CUDA_MODULE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/build.h>

#include "device_iface.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The file libsluice looks for, and the function it calls in it. */
#define SL__CUDA_MODULE_FILE "libsluice-cuda.so"
#define SL__CUDA_MODULE_ENTRY "sluice_cuda_module_open"

/* Defined by the layers above (kernels/op.h, kernels/box.h,
 * comm/coll/dev_coll.h); the module fills them, libsluice reads them. */
struct sl__cuda_kernel;
struct sl__box_op;
struct sl__dev_coll_vtable;

/* What libsluice gives the module. */
typedef struct sl__cuda_host {
  size_t size;
  const char *version; /* SLUICE_VERSION_STRING */
  sl_status (*failv)(sl_status st, const char *fmt, va_list ap);
  void (*assert_fail)(const char *expr, const char *file, int line);
  sl_status (*device_wrap)(const sl__device_vtable *vt, void *ctx,
                           sl_device_type type, int index, const char *name,
                           sl__device **out);
} sl__cuda_host;

/* One op's CUDA kernel, by the op's registry name. */
typedef struct sl__cuda_kernel_entry {
  const char *op;
  const struct sl__cuda_kernel *kernel;
} sl__cuda_kernel_entry;

/* What the module gives libsluice. */
typedef struct sl__cuda_module {
  size_t size;
  const char *version; /* SLUICE_VERSION_STRING it was built with */
  /* The process's CUDA devices; 0 without a GPU or driver, never an
   * error. */
  int (*device_count)(void);
  /* "X.Y" / "X.Y.Z", NULL when there is no driver. */
  const char *(*runtime_version)(void);
  const char *(*driver_version)(void);
  const char *(*nccl_version)(void);
  sl_status (*device_info)(int device, sl_cuda_device_info *out);
  /* Opens cuda:index as a device of the device interface. */
  sl_status (*device_open)(int index, sl__device **out);
  /* Queues a box move or fill (kernels/box.h) on stream s. */
  sl_status (*box)(const struct sl__box_op *b, sl__stream *s);
  /* Copies bytes of host memory to device memory, queued on s; returns
   * once src may be reused (a pageable copy). */
  sl_status (*upload)(void *dst, const void *src, size_t bytes, sl__stream *s);
  /* The device layer's test kernels (kernels/cuda/fill.h). */
  sl_status (*fill_f32)(float *dst, float value, int64_t n, sl__stream *s);
  sl_status (*add_f32)(float *out, const float *a, const float *b, int64_t n,
                       sl__stream *s);
  /* The NCCL backend of the device collectives. */
  const struct sl__dev_coll_vtable *nccl;
  /* The ops' CUDA kernels. */
  const sl__cuda_kernel_entry *kernels;
  int n_kernels;
} sl__cuda_module;

typedef const sl__cuda_module *(*sl__cuda_module_entry)(
    const sl__cuda_host *host);

/* The module, opened on first call (thread-safe; never closed). Fails with
 * SL_EUNSUPPORTED saying why: a build without CUDA, the module not found
 * (where it was looked for), a library it needs missing (the loader's
 * message), or a module of another version. */
sl_status sl__cuda_module_get(const sl__cuda_module **out);

/* Where the module was loaded from; NULL before it was. */
const char *sl__cuda_module_path(void);

#ifdef __cplusplus
}
#endif
#endif
