/* The CPU device: host memory, and streams that run each operation when it
 * is queued. Since nothing is ever pending, events complete when recorded,
 * synchronisation returns at once and a stream callback runs on the caller's
 * thread before sl__device_stream_add_callback returns.
 *
 * Streams and events are small tagged structs rather than dummy pointers so
 * that handing a CPU device another device's handle (or a freed one) is an
 * SL_EINVAL with a message instead of silent success. */
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "device_iface.h"

/* 256 bytes: what cudaMalloc guarantees, so code tested on the CPU device
 * makes no alignment assumption the CUDA device would break; also a multiple
 * of every cache line and vector width. */
#define CPU_ALIGN 256

#define STREAM_MAGIC 0x43505553u /* "CPUS" */
#define EVENT_MAGIC 0x43505545u  /* "CPUE" */
#define DEAD_MAGIC 0xdeadu

struct sl__stream {
  uint32_t magic;
};

struct sl__event {
  uint32_t magic;
};

typedef struct cpu_dev {
  int index;
} cpu_dev;

static sl_status bad_handle(const cpu_dev *c, const char *what) {
  return sl__fail(SL_EINVAL, "cpu:%d: %s is not a live handle of a CPU device",
                  c->index, what);
}

#define CHECK_STREAM(c, s)                                                     \
  do {                                                                         \
    if ((s)->magic != STREAM_MAGIC) return bad_handle((c), "stream");          \
  } while (0)
#define CHECK_EVENT(c, e)                                                      \
  do {                                                                         \
    if ((e)->magic != EVENT_MAGIC) return bad_handle((c), "event");            \
  } while (0)

static sl_status cpu_alloc(void *ctx, size_t bytes, void **out) {
  cpu_dev *c = ctx;
  *out = NULL;
  if (bytes == 0) return SL_OK;
  /* Round up so aligned_alloc's size-multiple rule holds; the check keeps
   * the rounding from wrapping. */
  if (bytes > SIZE_MAX - (CPU_ALIGN - 1))
    return sl__fail(SL_ENOMEM, "cpu:%d: cannot allocate %zu bytes", c->index,
                    bytes);
  size_t rounded = (bytes + CPU_ALIGN - 1) & ~(size_t)(CPU_ALIGN - 1);
  void *p = aligned_alloc(CPU_ALIGN, rounded);
  if (!p)
    return sl__fail(SL_ENOMEM, "cpu:%d: cannot allocate %zu bytes", c->index,
                    bytes);
  *out = p;
  return SL_OK;
}

static sl_status cpu_free(void *ctx, void *p) {
  free(p);
  return SL_OK;
}

static sl_status cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes,
                            sl__copy_kind kind, sl__stream *s) {
  CHECK_STREAM((cpu_dev *)ctx, s);
  memcpy(dst, src, bytes);
  return SL_OK;
}

static sl_status cpu_memset(void *ctx, void *dst, int value, size_t bytes,
                            sl__stream *s) {
  CHECK_STREAM((cpu_dev *)ctx, s);
  memset(dst, value, bytes);
  return SL_OK;
}

static sl_status cpu_stream_create(void *ctx, sl__stream **out) {
  sl__stream *s;
  if (SL_NEW(s) != SL_OK) return SL_ENOMEM;
  s->magic = STREAM_MAGIC;
  *out = s;
  return SL_OK;
}

static sl_status cpu_stream_destroy(void *ctx, sl__stream *s) {
  CHECK_STREAM((cpu_dev *)ctx, s);
  s->magic = DEAD_MAGIC;
  sl__free(s);
  return SL_OK;
}

static sl_status cpu_stream_synchronize(void *ctx, sl__stream *s) {
  CHECK_STREAM((cpu_dev *)ctx, s);
  return SL_OK;
}

static sl_status cpu_stream_wait_event(void *ctx, sl__stream *s, sl__event *e) {
  CHECK_STREAM((cpu_dev *)ctx, s);
  CHECK_EVENT((cpu_dev *)ctx, e);
  return SL_OK;
}

static sl_status cpu_event_create(void *ctx, sl__event **out) {
  sl__event *e;
  if (SL_NEW(e) != SL_OK) return SL_ENOMEM;
  e->magic = EVENT_MAGIC;
  *out = e;
  return SL_OK;
}

static sl_status cpu_event_destroy(void *ctx, sl__event *e) {
  CHECK_EVENT((cpu_dev *)ctx, e);
  e->magic = DEAD_MAGIC;
  sl__free(e);
  return SL_OK;
}

static sl_status cpu_event_record(void *ctx, sl__event *e, sl__stream *s) {
  CHECK_EVENT((cpu_dev *)ctx, e);
  CHECK_STREAM((cpu_dev *)ctx, s);
  return SL_OK;
}

static sl_status cpu_event_query(void *ctx, sl__event *e, bool *done) {
  CHECK_EVENT((cpu_dev *)ctx, e);
  *done = true;
  return SL_OK;
}

static sl_status cpu_event_synchronize(void *ctx, sl__event *e) {
  CHECK_EVENT((cpu_dev *)ctx, e);
  return SL_OK;
}

static sl_status cpu_stream_add_callback(void *ctx, sl__stream *s,
                                         sl__stream_fn fn, void *arg) {
  CHECK_STREAM((cpu_dev *)ctx, s);
  fn(arg, SL_OK);
  return SL_OK;
}

static void cpu_close(void *ctx) { sl__free(ctx); }

static const sl__device_vtable cpu_vtable = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    /* Host memory is what the CPU device computes on already. */
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .memcpy_async = cpu_memcpy,
    .memset_async = cpu_memset,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_wait_event = cpu_stream_wait_event,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
    .stream_add_callback = cpu_stream_add_callback,
    .close = cpu_close,
};

sl_status sl__device_cpu_open(int index, sl__device **out) {
  if (out) *out = NULL;
  /* CPU devices are logical (cpu:0-3 runs on any number of cores), so any
   * non-negative index is valid. */
  if (!out || index < 0)
    return sl__fail(SL_EINVAL, "cpu device %d: bad index", index);
  cpu_dev *c;
  if (SL_NEW(c) != SL_OK) return SL_ENOMEM;
  c->index = index;
  sl_status st =
      sl__device_wrap(&cpu_vtable, c, SL_DEVICE_CPU, index, NULL, out);
  if (st != SL_OK) sl__free(c);
  return st;
}
