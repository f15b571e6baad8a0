/* The CUDA device: the device interface on the CUDA runtime. Compiled only
 * into the CUDA module (cuda/CMakeLists.txt); libsluice reaches it through
 * sl__device_cuda_open in cuda_module.c.
 *
 * Handles are the runtime's own: an sl__stream * is a cudaStream_t and an
 * sl__event * a cudaEvent_t, so kernels launch on a stream without a lookup.
 * Streams are created non-blocking (no implicit synchronisation with the
 * legacy default stream, which sluice never uses) and events without timing
 * (cheaper to record and query). Every CUDA error becomes SL_ECUDA with
 * cudaGetErrorString's text and the device, e.g. "cuda:0: cudaMalloc(1.0
 * GiB): out of memory (cudaErrorMemoryAllocation)". */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#include "core_int.h"
#include "device_iface.h"

typedef struct cuda_dev {
  int ordinal;
} cuda_dev;

/* Clears the runtime's per-thread last error, so a later unrelated
 * cudaGetLastError does not report this one again, and records ours. */
static sl_status cuda_fail(const cuda_dev *c, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return sl__fail(SL_ECUDA, "cuda:%d: %s: %s (%s)", c->ordinal, what,
                  cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU(c, call, what)                                                      \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) return cuda_fail((c), e_, (what));                  \
  } while (0)

/* Allocations, streams and events belong to the calling thread's current
 * device. Stream threads may serve several devices' actors, so each call
 * makes this one current; cudaGetDevice is a thread-local read, cheaper
 * than an unconditional cudaSetDevice. */
static sl_status use(const cuda_dev *c) {
  int cur = -1;
  CU(c, cudaGetDevice(&cur), "cudaGetDevice");
  if (cur != c->ordinal) CU(c, cudaSetDevice(c->ordinal), "cudaSetDevice");
  return SL_OK;
}

static sl_status cuda_make_current(void *ctx) { return use(ctx); }

static const char *size_text(size_t bytes, char *buf, size_t n) {
  if (bytes >= ((size_t)1 << 30))
    snprintf(buf, n, "%.1f GiB", (double)bytes / (double)((size_t)1 << 30));
  else if (bytes >= ((size_t)1 << 20))
    snprintf(buf, n, "%.1f MiB", (double)bytes / (double)((size_t)1 << 20));
  else
    snprintf(buf, n, "%zu bytes", bytes);
  return buf;
}

static sl_status cuda_alloc(void *ctx, size_t bytes, void **out) {
  cuda_dev *c = ctx;
  *out = NULL;
  if (bytes == 0) return SL_OK;
  SL_CHECK(use(c));
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    char what[64], sz[32];
    snprintf(what, sizeof what, "cudaMalloc(%s)",
             size_text(bytes, sz, sizeof sz));
    return cuda_fail(c, e, what);
  }
  *out = p;
  return SL_OK;
}

static sl_status cuda_free(void *ctx, void *p) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaFree(p), "cudaFree");
  return SL_OK;
}

static sl_status cuda_host_alloc(void *ctx, size_t bytes, void **out) {
  cuda_dev *c = ctx;
  *out = NULL;
  if (bytes == 0) return SL_OK;
  SL_CHECK(use(c));
  void *p = NULL;
  /* Portable: pinned for every device's copy engines, so one pinned pool
   * can stage copies for any GPU of the process. */
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    char what[64], sz[32];
    snprintf(what, sizeof what, "cudaHostAlloc(%s)",
             size_text(bytes, sz, sizeof sz));
    return cuda_fail(c, e, what);
  }
  *out = p;
  return SL_OK;
}

static sl_status cuda_host_free(void *ctx, void *p) {
  cuda_dev *c = ctx;
  CU(c, cudaFreeHost(p), "cudaFreeHost");
  return SL_OK;
}

static sl_status cuda_memcpy(void *ctx, void *dst, const void *src,
                             size_t bytes, sl__copy_kind kind, sl__stream *s) {
  static const enum cudaMemcpyKind kinds[] = {
      [SL__COPY_H2D] = cudaMemcpyHostToDevice,
      [SL__COPY_D2H] = cudaMemcpyDeviceToHost,
      [SL__COPY_D2D] = cudaMemcpyDeviceToDevice,
  };
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaMemcpyAsync(dst, src, bytes, kinds[kind], (cudaStream_t)s),
     "cudaMemcpyAsync");
  return SL_OK;
}

static sl_status cuda_memset(void *ctx, void *dst, int value, size_t bytes,
                             sl__stream *s) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaMemsetAsync(dst, value, bytes, (cudaStream_t)s), "cudaMemsetAsync");
  return SL_OK;
}

static sl_status cuda_stream_create(void *ctx, sl__stream **out) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  cudaStream_t s = NULL;
  CU(c, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
     "cudaStreamCreateWithFlags");
  *out = (sl__stream *)s;
  return SL_OK;
}

static sl_status cuda_stream_destroy(void *ctx, sl__stream *s) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy");
  return SL_OK;
}

static sl_status cuda_stream_synchronize(void *ctx, sl__stream *s) {
  cuda_dev *c = ctx;
  CU(c, cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize");
  return SL_OK;
}

static sl_status cuda_stream_wait_event(void *ctx, sl__stream *s,
                                        sl__event *e) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0),
     "cudaStreamWaitEvent");
  return SL_OK;
}

static sl_status cuda_event_create(void *ctx, sl__event **out) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  cudaEvent_t e = NULL;
  CU(c, cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
     "cudaEventCreateWithFlags");
  *out = (sl__event *)e;
  return SL_OK;
}

static sl_status cuda_event_destroy(void *ctx, sl__event *e) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaEventDestroy((cudaEvent_t)e), "cudaEventDestroy");
  return SL_OK;
}

static sl_status cuda_event_record(void *ctx, sl__event *e, sl__stream *s) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  CU(c, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
  return SL_OK;
}

/* The poller's hot call: no cudaSetDevice (queries work from any current
 * device), and "not ready" is an answer, not an error. */
static sl_status cuda_event_query(void *ctx, sl__event *e, bool *done) {
  cudaError_t r = cudaEventQuery((cudaEvent_t)e);
  if (r == cudaSuccess) {
    *done = true;
    return SL_OK;
  }
  *done = false;
  if (r == cudaErrorNotReady) return SL_OK;
  return cuda_fail(ctx, r, "cudaEventQuery");
}

static sl_status cuda_event_synchronize(void *ctx, sl__event *e) {
  CU((cuda_dev *)ctx, cudaEventSynchronize((cudaEvent_t)e),
     "cudaEventSynchronize");
  return SL_OK;
}

/* cudaStreamAddCallback rather than cudaLaunchHostFunc: host functions are
 * not called at all after a device error, which would leave a deferred
 * firing waiting forever; stream callbacks run exactly once and receive the
 * error. The record carries the caller's function across. */
typedef struct callback_rec {
  sl__stream_fn fn;
  void *arg;
  int ordinal;
} callback_rec;

static void CUDART_CB callback_trampoline(cudaStream_t s, cudaError_t status,
                                          void *p) {
  callback_rec r = *(callback_rec *)p;
  sl__free(p);
  sl_status st = SL_OK;
  if (status != cudaSuccess)
    st = sl__fail(SL_ECUDA, "cuda:%d: stream callback: %s (%s)", r.ordinal,
                  cudaGetErrorString(status), cudaGetErrorName(status));
  r.fn(r.arg, st);
}

static sl_status cuda_stream_add_callback(void *ctx, sl__stream *s,
                                          sl__stream_fn fn, void *arg) {
  cuda_dev *c = ctx;
  SL_CHECK(use(c));
  callback_rec *r = sl__malloc(sizeof *r);
  if (!r) return SL_ENOMEM;
  *r = (callback_rec){.fn = fn, .arg = arg, .ordinal = c->ordinal};
  cudaError_t e =
      cudaStreamAddCallback((cudaStream_t)s, callback_trampoline, r, 0);
  if (e != cudaSuccess) {
    sl__free(r);
    return cuda_fail(c, e, "cudaStreamAddCallback");
  }
  return SL_OK;
}

static void cuda_close(void *ctx) { sl__free(ctx); }

static const sl__device_vtable cuda_vtable = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .memcpy_async = cuda_memcpy,
    .memset_async = cuda_memset,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .stream_add_callback = cuda_stream_add_callback,
    .make_current = cuda_make_current,
    .close = cuda_close,
};

sl_status sl__device_cuda_open(int index, sl__device **out) {
  if (out) *out = NULL;
  if (!out || index < 0)
    return sl__fail(SL_EINVAL, "cuda device %d: bad index", index);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return sl__fail(SL_ECUDA, "no CUDA device: %s", cudaGetErrorString(e));
  }
  if (n == 0)
    return sl__fail(SL_ECUDA, "no CUDA device: the CUDA runtime sees none");
  if (index >= n)
    return sl__fail(SL_EINVAL, "cuda:%d: the process sees %d CUDA device%s",
                    index, n, n == 1 ? "" : "s");
  cuda_dev *c;
  if (SL_NEW(c) != SL_OK) return SL_ENOMEM;
  c->ordinal = index;
  sl_status st = use(c);
  /* cudaFree(NULL) creates the device's primary context now, so a broken
   * device fails here, at open, rather than at the first allocation. */
  if (st == SL_OK && (e = cudaFree(NULL)) != cudaSuccess)
    st = cuda_fail(c, e, "creating the context");
  if (st == SL_OK)
    st = sl__device_wrap(&cuda_vtable, c, SL_DEVICE_CUDA, index, NULL, out);
  if (st != SL_OK) sl__free(c);
  return st;
}
