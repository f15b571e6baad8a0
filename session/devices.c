/* The CUDA devices of a session (docs/cuda.md, "Sessions on CUDA
 * placements"): each device this node's tasks use is opened once per
 * session, with one device stream per actor stream kind, a caching
 * allocator over its memory (registers, kernel workspaces, constants), one
 * over its pinned host memory (its host side's registers, so copies are
 * asynchronous) and a stream-completion notifier. Actors on a CUDA device
 * queue their work on their stream and defer; the notifier completes the
 * firing once the stream has reached that point, so no CPU thread waits on
 * the device and messages leave only after the work is done. */
#include <string.h>

#include "session_int.h"

static sl_status cuda_open(int index, sl__device **out) {
  return sl__device_open(SL_DEVICE_CUDA, index, out);
}

static const sl__session_backend cuda_backend = {
    cuda_open, sl__op_run_cuda, sl__dev_coll_nccl_open, sl__cuda_box};
static _Atomic(const sl__session_backend *) backend = &cuda_backend;

void sl__session_set_backend(const sl__session_backend *b) {
  atomic_store(&backend, b ? b : &cuda_backend);
}

sess_dev *sl__session_dev(const sl_session *s, uint32_t id) {
  if (sl__dev_class_of(id) == SL__DEV_CLASS_CPU) return NULL;
  int index = sl__dev_index(id);
  for (int32_t i = 0; i < s->n_devs; i++)
    if (s->devs[i].index == index) return &s->devs[i];
  return NULL;
}

static void close_one(sess_dev *d) {
  sl__notifier_destroy(d->notify);
  for (uint32_t k = 0; k < SL_STREAMS_DEFAULT && d->dev; k++)
    sl__device_stream_destroy(d->dev, d->stream[k]);
  sl__caching_alloc_destroy(d->mem);
  sl__caching_alloc_destroy(d->pinned);
  sl__device_close(d->dev);
  memset(d, 0, sizeof *d);
}

static sl_status open_one(sess_dev *d, int index) {
  d->index = index;
  d->be = atomic_load(&backend);
  SL_CHECK(d->be->open(index, &d->dev));
  char name[48];
  snprintf(name, sizeof name, "%s memory", d->dev->name);
  sl__caching_alloc_config mc = {.name = name};
  SL_CHECK(
      sl__caching_alloc_create(sl__device_raw_memory(d->dev), &mc, &d->mem));
  snprintf(name, sizeof name, "%s pinned memory", d->dev->name);
  sl__caching_alloc_config pc = {.name = name};
  SL_CHECK(
      sl__caching_alloc_create(sl__device_raw_pinned(d->dev), &pc, &d->pinned));
  for (uint32_t k = 0; k < SL_STREAMS_DEFAULT; k++)
    SL_CHECK(sl__device_stream_create(d->dev, &d->stream[k]));
  SL_CHECK(sl__notifier_create(d->dev, NULL, &d->notify));
  d->boxing = (sl__dev_handle){.index = index,
                               .dev = d->dev,
                               .mem = d->mem,
                               .coll_stream = d->stream[SL_STREAM_COLLECTIVE],
                               .notify = d->notify,
                               .box = d->be->box};
  return SL_OK;
}

sl_status sl__session_open_devices(sl_session *s) {
  const sl__pplan *pp = s->pp;
  for (int32_t i = 0; i < pp->n_tasks; i++) {
    const sl__task *t = &pp->tasks[i];
    if (t->kind == SL__TASK_TICK || t->proxy || t->machine != s->self_node ||
        sl__dev_class_of(t->device) != SL__DEV_CLASS_CUDA ||
        sl__session_dev(s, t->device))
      continue;
    sess_dev *d = sl__reallocarray(s->devs, (size_t)s->n_devs + 1, sizeof *d);
    if (!d) return SL_ENOMEM;
    s->devs = d;
    d = &s->devs[s->n_devs++];
    memset(d, 0, sizeof *d);
    sl_status st = open_one(d, sl__dev_index(t->device));
    if (st != SL_OK)
      return sl__fail_context(st, "task '%s' on cuda:%d: ", t->name,
                              sl__dev_index(t->device));
  }
  return SL_OK;
}

void sl__session_close_devices(sl_session *s) {
  sl__dseq_destroy(s->dseq);
  s->dseq = NULL;
  sl__dev_coll_destroy(s->dcoll);
  s->dcoll = NULL;
  for (int32_t i = 0; i < s->n_devs; i++)
    close_one(&s->devs[i]);
  sl__free(s->devs);
  s->devs = NULL;
  s->n_devs = 0;
}

/* ---- register memory -------------------------------------------------------
 * CPU devices: zeroed host memory, as the job's default (a daemon's
 * from its shared pool while that has room). A CUDA device: its
 * memory, zeroed once. A host side: the device's pinned memory when the
 * device is open here, plain host memory otherwise (the program's feeds and
 * fetches in a remote session). */

static sl_status mem_alloc(void *ctx, int32_t device, size_t bytes,
                           void **out) {
  sl_session *sess = ctx;
  sess_dev *d = sl__session_dev(sess, (uint32_t)device);
  if (!d && sess->pool && (*out = sl__shm_pool_alloc(sess->pool, bytes)))
    return SL_OK; /* zeroed */
  if (!d) return sl_regst_host_memory.alloc(NULL, device, bytes, out);
  if (sl__dev_class_of((uint32_t)device) == SL__DEV_CLASS_HOST) {
    SL_CHECK(sl__caching_alloc_alloc(d->pinned, bytes, NULL, out));
    memset(*out, 0, bytes);
    return SL_OK;
  }
  SL_CHECK(sl__caching_alloc_alloc(d->mem, bytes, NULL, out));
  sl__stream *s = d->stream[SL_STREAM_COPY];
  sl_status st = sl__device_memset(d->dev, *out, 0, bytes, s);
  if (st == SL_OK) st = sl__device_stream_synchronize(d->dev, s);
  if (st != SL_OK) {
    sl__caching_alloc_free(d->mem, *out);
    *out = NULL;
  }
  return st;
}

static void mem_free(void *ctx, int32_t device, void *p) {
  sl_session *s = ctx;
  sess_dev *d = sl__session_dev(s, (uint32_t)device);
  uint64_t off;
  if (!d && sl__shm_pool_offset(s->pool, p, 1, &off))
    return; /* the pool goes as a whole, after the job */
  if (!d) {
    sl_regst_host_memory.free(NULL, device, p);
    return;
  }
  bool host = sl__dev_class_of((uint32_t)device) == SL__DEV_CLASS_HOST;
  sl__caching_alloc_free(host ? d->pinned : d->mem, p);
}

const sl_regst_memory_vtable sl__session_memory = {mem_alloc, mem_free};

void sl__session_job_memory(sl_session *s, sl_job_config *jc) {
  if (s->n_devs == 0 && !s->pool) return; /* the job's own host memory */
  jc->memory = &sl__session_memory;
  jc->memory_ctx = s;
}

/* ---- synchronous copies (set-up only) --------------------------------------
 */

sl_status sl__dev_upload(sess_dev *d, void *dst, const void *src,
                         size_t bytes) {
  sl__stream *s = d->stream[SL_STREAM_COPY];
  SL_CHECK(sl__device_memcpy_h2d(d->dev, dst, src, bytes, s));
  return sl__device_stream_synchronize(d->dev, s);
}

sl_status sl__dev_download(sess_dev *d, void *dst, const void *src,
                           size_t bytes) {
  sl__stream *s = d->stream[SL_STREAM_COPY];
  SL_CHECK(sl__device_memcpy_d2h(d->dev, dst, src, bytes, s));
  return sl__device_stream_synchronize(d->dev, s);
}
