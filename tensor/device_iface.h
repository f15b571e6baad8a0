/* sluice tensor — the device interface: memory, streams, events and copies
 * of one device (DESIGN.md section 9).
 *
 * A device backend is a static const table of function pointers plus a ctx
 * (STYLE.md, "Pluggable parts"). The CPU backend (device_cpu.c) works on host
 * memory and its streams are synchronous: an operation has completed when the
 * call returns, so events are always complete. The CUDA backend
 * (device_cuda.c, only in builds with CUDA) maps each entry to the CUDA
 * runtime and every CUDA error to SL_ECUDA with cudaGetErrorString's text.
 *
 * Code outside the backends calls the sl__device_* wrappers below, never the
 * table: they check arguments once for every backend (NULL handles, missing
 * entries) so a backend only does the work. Streams and events are opaque
 * handles owned by the device that created them; for the CUDA backend an
 * sl__stream * is its cudaStream_t and an sl__event * its cudaEvent_t, so
 * CUDA kernels (kernels/cuda/) launch on them without a lookup. */
#ifndef SLUICE_DEVICE_IFACE_H
#define SLUICE_DEVICE_IFACE_H

#include <stdbool.h>
#include <stddef.h>

#include <sluice/tensor.h>

typedef struct sl__stream sl__stream;
typedef struct sl__event sl__event;

/* Direction of a copy. The CPU backend treats them alike; CUDA needs the
 * direction for pageable host memory and for its copy engines. */
typedef enum sl__copy_kind {
  SL__COPY_H2D = 0,
  SL__COPY_D2H = 1,
  SL__COPY_D2D = 2,
} sl__copy_kind;

/* A function a stream calls once the work queued before it has completed.
 * st is SL_OK, or the device's error (with the thread's sl_last_error set)
 * when the device failed meanwhile. Runs on a thread of the backend's
 * choosing and must not call the device (CUDA forbids API calls there). */
typedef void (*sl__stream_fn)(void *arg, sl_status st);

typedef struct sl__device_vtable {
  const char *name; /* "cpu", "cuda" */
  /* Device memory; alloc of 0 bytes gives NULL. free(NULL) is a no-op. */
  sl_status (*alloc)(void *ctx, size_t bytes, void **out);
  sl_status (*free)(void *ctx, void *p);
  /* Host memory the device copies from and to asynchronously (pinned for
   * CUDA; plain host memory for the CPU). Same conventions as alloc. */
  sl_status (*host_alloc)(void *ctx, size_t bytes, void **out);
  sl_status (*host_free)(void *ctx, void *p);
  /* Queued on s; bytes > 0 and pointers non-NULL (the wrappers skip empty
   * copies). */
  sl_status (*memcpy_async)(void *ctx, void *dst, const void *src, size_t bytes,
                            sl__copy_kind kind, sl__stream *s);
  sl_status (*memset_async)(void *ctx, void *dst, int value, size_t bytes,
                            sl__stream *s);
  sl_status (*stream_create)(void *ctx, sl__stream **out);
  sl_status (*stream_destroy)(void *ctx, sl__stream *s);
  /* Blocks the calling thread until everything queued on s has completed. */
  sl_status (*stream_synchronize)(void *ctx, sl__stream *s);
  /* Work queued on s after this call waits for e's recorded work. */
  sl_status (*stream_wait_event)(void *ctx, sl__stream *s, sl__event *e);
  sl_status (*event_create)(void *ctx, sl__event **out);
  sl_status (*event_destroy)(void *ctx, sl__event *e);
  /* e completes when the work queued on s so far has completed. */
  sl_status (*event_record)(void *ctx, sl__event *e, sl__stream *s);
  /* Never blocks: *done = whether e has completed (an event never recorded
   * counts as completed, as in CUDA). A device error is returned. */
  sl_status (*event_query)(void *ctx, sl__event *e, bool *done);
  sl_status (*event_synchronize)(void *ctx, sl__event *e);
  /* Calls fn(arg, st) once the work queued on s so far has completed; fn
   * is called exactly once when this returns SL_OK, also after a device
   * error (with that error). May be NULL: the backend has no callbacks. */
  sl_status (*stream_add_callback)(void *ctx, sl__stream *s, sl__stream_fn fn,
                                   void *arg);
  /* Makes this device the calling thread's current one, for work queued on
   * its streams by code outside the table (CUDA kernels, cuBLAS). May be
   * NULL: the backend has no such notion. */
  sl_status (*make_current)(void *ctx);
  /* Frees ctx (sl__device_close). */
  void (*close)(void *ctx);
} sl__device_vtable;

/* One opened device. */
typedef struct sl__device {
  const sl__device_vtable *vt;
  void *ctx;
  sl_device_type type;
  int index;     /* ordinal within its type */
  char name[24]; /* "cpu:0", "cuda:1" for messages */
} sl__device;

/* Opens device `index` of a type: SL_EINVAL for a negative index or one the
 * process cannot see, SL_EUNSUPPORTED for CUDA in a build without it,
 * SL_ECUDA ("no CUDA device: <reason>") when CUDA is built in but the
 * runtime sees no GPU, SL_ENOMEM. *out is NULL on failure. */
sl_status sl__device_open(sl_device_type type, int index, sl__device **out);
/* Backend constructors behind sl__device_open. The CUDA one opens the CUDA
 * module (cuda_module.c) and returns SL_EUNSUPPORTED saying why when it
 * cannot be loaded (in a build without CUDA, always). */
sl_status sl__device_cpu_open(int index, sl__device **out);
sl_status sl__device_cuda_open(int index, sl__device **out);
/* Closes a device; NULL is a no-op. Its streams, events and memory must have
 * been released. */
void sl__device_close(sl__device *d);

/* Builds a device from a caller's table (tests use fake devices this way;
 * sl__device_close then calls vt->close(ctx) if set). name may be NULL. */
sl_status sl__device_wrap(const sl__device_vtable *vt, void *ctx,
                          sl_device_type type, int index, const char *name,
                          sl__device **out);

/* ---- the wrappers code outside the backends calls ----------------------
 * Every one returns SL_EINVAL for a NULL device or handle where one is
 * required and SL_EUNSUPPORTED for an entry the backend lacks; otherwise
 * the backend's status. Outputs are NULL on failure. */

sl_status sl__device_alloc(sl__device *d, size_t bytes, void **out);
sl_status sl__device_free(sl__device *d, void *p);
sl_status sl__device_host_alloc(sl__device *d, size_t bytes, void **out);
sl_status sl__device_host_free(sl__device *d, void *p);

/* Asynchronous on s: the copy has happened once s has reached it. A copy of
 * 0 bytes does nothing (NULL pointers are then allowed). For CUDA, host
 * memory from sl__device_host_alloc makes the copy truly asynchronous;
 * pageable host memory works but may block the caller. */
sl_status sl__device_memcpy_h2d(sl__device *d, void *dst, const void *src,
                                size_t bytes, sl__stream *s);
sl_status sl__device_memcpy_d2h(sl__device *d, void *dst, const void *src,
                                size_t bytes, sl__stream *s);
sl_status sl__device_memcpy_d2d(sl__device *d, void *dst, const void *src,
                                size_t bytes, sl__stream *s);
/* Sets bytes bytes at dst to (unsigned char)value, asynchronously on s. */
sl_status sl__device_memset(sl__device *d, void *dst, int value, size_t bytes,
                            sl__stream *s);

sl_status sl__device_stream_create(sl__device *d, sl__stream **out);
/* NULL s is a no-op. Work still queued on s completes first. */
sl_status sl__device_stream_destroy(sl__device *d, sl__stream *s);
sl_status sl__device_stream_synchronize(sl__device *d, sl__stream *s);
sl_status sl__device_stream_wait_event(sl__device *d, sl__stream *s,
                                       sl__event *e);
sl_status sl__device_stream_add_callback(sl__device *d, sl__stream *s,
                                         sl__stream_fn fn, void *arg);

sl_status sl__device_event_create(sl__device *d, sl__event **out);
/* NULL e is a no-op. */
sl_status sl__device_event_destroy(sl__device *d, sl__event *e);
sl_status sl__device_event_record(sl__device *d, sl__event *e, sl__stream *s);
sl_status sl__device_event_query(sl__device *d, sl__event *e, bool *done);
sl_status sl__device_event_synchronize(sl__device *d, sl__event *e);
/* Before launching kernels on d's streams from a thread: SL_OK at once for
 * a backend without make_current. */
sl_status sl__device_make_current(sl__device *d);

#endif
