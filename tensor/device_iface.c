/* The device interface's wrappers: argument checks shared by every backend,
 * then one call through the table. */
#include <stdio.h>
#include <string.h>

#include "core_int.h"
#include "device_iface.h"

sl_status sl__device_wrap(const sl__device_vtable *vt, void *ctx,
                          sl_device_type type, int index, const char *name,
                          sl__device **out) {
  if (out) *out = NULL;
  if (!vt || !out || index < 0)
    return sl__fail(SL_EINVAL, "device: missing table or bad index %d", index);
  sl__device *d;
  if (SL_NEW(d) != SL_OK) return SL_ENOMEM;
  d->vt = vt;
  d->ctx = ctx;
  d->type = type;
  d->index = index;
  if (name)
    snprintf(d->name, sizeof d->name, "%s", name);
  else
    snprintf(d->name, sizeof d->name, "%s:%d", vt->name ? vt->name : "?",
             index);
  *out = d;
  return SL_OK;
}

sl_status sl__device_open(sl_device_type type, int index, sl__device **out) {
  if (out) *out = NULL;
  if (!out) return sl__fail(SL_EINVAL, "device open: NULL output");
  switch (type) {
  case SL_DEVICE_CPU: return sl__device_cpu_open(index, out);
  case SL_DEVICE_CUDA: return sl__device_cuda_open(index, out);
  }
  return sl__fail(SL_EINVAL, "device open: unknown device type %d", (int)type);
}

void sl__device_close(sl__device *d) {
  if (!d) return;
  if (d->vt->close) d->vt->close(d->ctx);
  sl__free(d);
}

/* The checks every wrapper starts with. `entry` is the table slot, so a
 * backend without it reports which operation it lacks. */
#define DEV_CHECK(d, entry, what)                                              \
  do {                                                                         \
    if (!(d)) return sl__fail(SL_EINVAL, "%s: NULL device", what);             \
    if (!(d)->vt->entry)                                                       \
      return sl__fail(SL_EUNSUPPORTED, "%s: device %s has no %s", what,        \
                      (d)->name, #entry);                                      \
  } while (0)

#define NEED(x, d, what)                                                       \
  do {                                                                         \
    if (!(x))                                                                  \
      return sl__fail(SL_EINVAL, "%s on %s: NULL %s", what, (d)->name, #x);    \
  } while (0)

sl_status sl__device_alloc(sl__device *d, size_t bytes, void **out) {
  if (out) *out = NULL;
  DEV_CHECK(d, alloc, "device alloc");
  NEED(out, d, "device alloc");
  sl_status st = d->vt->alloc(d->ctx, bytes, out);
  if (st != SL_OK) *out = NULL;
  return st;
}

sl_status sl__device_free(sl__device *d, void *p) {
  DEV_CHECK(d, free, "device free");
  if (!p) return SL_OK;
  return d->vt->free(d->ctx, p);
}

sl_status sl__device_host_alloc(sl__device *d, size_t bytes, void **out) {
  if (out) *out = NULL;
  DEV_CHECK(d, host_alloc, "host alloc");
  NEED(out, d, "host alloc");
  sl_status st = d->vt->host_alloc(d->ctx, bytes, out);
  if (st != SL_OK) *out = NULL;
  return st;
}

sl_status sl__device_host_free(sl__device *d, void *p) {
  DEV_CHECK(d, host_free, "host free");
  if (!p) return SL_OK;
  return d->vt->host_free(d->ctx, p);
}

static sl_status copy(sl__device *d, void *dst, const void *src, size_t bytes,
                      sl__copy_kind kind, sl__stream *s) {
  static const char *const what[] = {"memcpy h2d", "memcpy d2h", "memcpy d2d"};
  DEV_CHECK(d, memcpy_async, what[kind]);
  NEED(s, d, what[kind]);
  if (bytes == 0) return SL_OK;
  NEED(dst, d, what[kind]);
  NEED(src, d, what[kind]);
  return d->vt->memcpy_async(d->ctx, dst, src, bytes, kind, s);
}

sl_status sl__device_memcpy_h2d(sl__device *d, void *dst, const void *src,
                                size_t bytes, sl__stream *s) {
  return copy(d, dst, src, bytes, SL__COPY_H2D, s);
}

sl_status sl__device_memcpy_d2h(sl__device *d, void *dst, const void *src,
                                size_t bytes, sl__stream *s) {
  return copy(d, dst, src, bytes, SL__COPY_D2H, s);
}

sl_status sl__device_memcpy_d2d(sl__device *d, void *dst, const void *src,
                                size_t bytes, sl__stream *s) {
  return copy(d, dst, src, bytes, SL__COPY_D2D, s);
}

sl_status sl__device_memset(sl__device *d, void *dst, int value, size_t bytes,
                            sl__stream *s) {
  DEV_CHECK(d, memset_async, "memset");
  NEED(s, d, "memset");
  if (bytes == 0) return SL_OK;
  NEED(dst, d, "memset");
  return d->vt->memset_async(d->ctx, dst, value, bytes, s);
}

sl_status sl__device_stream_create(sl__device *d, sl__stream **out) {
  if (out) *out = NULL;
  DEV_CHECK(d, stream_create, "stream create");
  NEED(out, d, "stream create");
  sl_status st = d->vt->stream_create(d->ctx, out);
  if (st != SL_OK) *out = NULL;
  return st;
}

sl_status sl__device_stream_destroy(sl__device *d, sl__stream *s) {
  DEV_CHECK(d, stream_destroy, "stream destroy");
  if (!s) return SL_OK;
  return d->vt->stream_destroy(d->ctx, s);
}

sl_status sl__device_stream_synchronize(sl__device *d, sl__stream *s) {
  DEV_CHECK(d, stream_synchronize, "stream synchronize");
  NEED(s, d, "stream synchronize");
  return d->vt->stream_synchronize(d->ctx, s);
}

sl_status sl__device_stream_wait_event(sl__device *d, sl__stream *s,
                                       sl__event *e) {
  DEV_CHECK(d, stream_wait_event, "stream wait event");
  NEED(s, d, "stream wait event");
  NEED(e, d, "stream wait event");
  return d->vt->stream_wait_event(d->ctx, s, e);
}

sl_status sl__device_stream_add_callback(sl__device *d, sl__stream *s,
                                         sl__stream_fn fn, void *arg) {
  DEV_CHECK(d, stream_add_callback, "stream callback");
  NEED(s, d, "stream callback");
  NEED(fn, d, "stream callback");
  return d->vt->stream_add_callback(d->ctx, s, fn, arg);
}

sl_status sl__device_event_create(sl__device *d, sl__event **out) {
  if (out) *out = NULL;
  DEV_CHECK(d, event_create, "event create");
  NEED(out, d, "event create");
  sl_status st = d->vt->event_create(d->ctx, out);
  if (st != SL_OK) *out = NULL;
  return st;
}

sl_status sl__device_event_destroy(sl__device *d, sl__event *e) {
  DEV_CHECK(d, event_destroy, "event destroy");
  if (!e) return SL_OK;
  return d->vt->event_destroy(d->ctx, e);
}

sl_status sl__device_event_record(sl__device *d, sl__event *e, sl__stream *s) {
  DEV_CHECK(d, event_record, "event record");
  NEED(e, d, "event record");
  NEED(s, d, "event record");
  return d->vt->event_record(d->ctx, e, s);
}

sl_status sl__device_event_query(sl__device *d, sl__event *e, bool *done) {
  if (done) *done = false;
  DEV_CHECK(d, event_query, "event query");
  NEED(e, d, "event query");
  NEED(done, d, "event query");
  return d->vt->event_query(d->ctx, e, done);
}

sl_status sl__device_make_current(sl__device *d) {
  if (!d) return sl__fail(SL_EINVAL, "make current: NULL device");
  return d->vt->make_current ? d->vt->make_current(d->ctx) : SL_OK;
}

sl_status sl__device_event_synchronize(sl__device *d, sl__event *e) {
  DEV_CHECK(d, event_synchronize, "event synchronize");
  NEED(e, d, "event synchronize");
  return d->vt->event_synchronize(d->ctx, e);
}
