/* The kernels' side of the CUDA module (tensor/cuda_module.h): each op's
 * CUDA kernel looked up in the module's table, running an op on a CUDA
 * stream, and the box moves and test kernels the module holds. Nothing
 * here calls CUDA; asking for any of it loads the module. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "box.h"
#include "caching_alloc.h"
#include "core_int.h"
#include "cuda/fill.h"
#include "cuda_module.h"
#include "op.h"

/* The module's kernels by op, matched by name once and then found by the
 * op's address (sl__op_run_cuda runs on every firing): an open-addressing
 * table at most half full. */
#define KERNEL_SLOTS 256
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const sl__op_def *slot_op[KERNEL_SLOTS];
static const sl__cuda_kernel *slot_kernel[KERNEL_SLOTS];

static size_t slot_of(const sl__op_def *op) {
  size_t h = (size_t)((uintptr_t)op >> 4) % KERNEL_SLOTS;
  while (slot_op[h] && slot_op[h] != op)
    h = (h + 1) % KERNEL_SLOTS;
  return h;
}

static void index_kernels(void) {
  const sl__cuda_module *m;
  if (sl__cuda_module_get(&m) != SL_OK) return;
  SL_ASSERT(2 * sl__op_count() <= KERNEL_SLOTS);
  for (int i = 0; i < sl__op_count(); i++)
    for (int j = 0; j < m->n_kernels; j++)
      if (strcmp(m->kernels[j].op, sl__op_at(i)->name) == 0) {
        size_t h = slot_of(sl__op_at(i));
        slot_op[h] = sl__op_at(i);
        slot_kernel[h] = m->kernels[j].kernel;
      }
}

const sl__cuda_kernel *sl__op_cuda(const sl__op_def *op) {
  const sl__cuda_module *m;
  if (sl__cuda_module_get(&m) != SL_OK) return NULL;
  pthread_once(&once, index_kernels);
  return slot_kernel[slot_of(op)];
}

/* The CPU kernel into host buffers of the outputs' sizes, then each output
 * copied to the device on s. */
static sl_status run_from_host(const sl__op_def *op, sl__kernel_ctx *k,
                               const sl__cuda_module *m, sl__stream *s) {
  sl__kernel_ctx hk = *k;
  void *host[SL_OP_MAX_OUTPUTS] = {0};
  size_t bytes[SL_OP_MAX_OUTPUTS] = {0};
  sl_status st = SL_OK;
  for (int i = 0; i < k->n_out && st == SL_OK; i++) {
    bytes[i] = (size_t)sl_shape_numel(&k->out_meta[i].shape) *
               sl_dtype_size(k->out_meta[i].dtype);
    host[i] = sl__malloc(bytes[i] ? bytes[i] : 1);
    if (!host[i])
      st = sl__fail(SL_ENOMEM, "op %s: %zu bytes of host staging", op->name,
                    bytes[i]);
    hk.out[i] = host[i];
  }
  if (st == SL_OK) st = sl__op_run_cpu(op, &hk);
  for (int i = 0; i < k->n_out && st == SL_OK; i++)
    st = m->upload(k->out[i], host[i], bytes[i], s);
  for (int i = 0; i < k->n_out; i++)
    sl__free(host[i]);
  return st;
}

sl_status sl__op_run_cuda(const sl__op_def *op, sl__kernel_ctx *k,
                          sl__caching_alloc *mem, sl__stream *s) {
  const sl__cuda_module *m;
  sl_status st = sl__cuda_module_get(&m);
  if (st != SL_OK) return sl__fail_context(st, "op %s: ", op->name);
  if (!s) return sl__fail(SL_EINVAL, "op %s: no CUDA stream", op->name);
  if (op->cuda_from_host) return run_from_host(op, k, m, s);
  const sl__cuda_kernel *kern = sl__op_cuda(op);
  if (!kern)
    return sl__fail(SL_EUNSUPPORTED, "op %s has no CUDA kernel", op->name);
  size_t ws = kern->workspace ? kern->workspace(k) : 0;
  void *buf = NULL;
  if (ws) {
    if (!mem)
      return sl__fail(SL_EINVAL,
                      "op %s: needs %zu bytes of CUDA workspace and no "
                      "allocator was given",
                      op->name, ws);
    SL_CHECK(sl__caching_alloc_alloc(mem, ws, s, &buf));
    k->workspace = buf;
    k->workspace_bytes = ws;
  }
  st = kern->run(k, s);
  k->workspace = NULL;
  k->workspace_bytes = 0;
  /* Queued work still uses buf; the stream's order protects it (op.h). */
  if (buf) {
    sl_status fst = sl__caching_alloc_free(mem, buf);
    if (st == SL_OK) st = fst;
  }
  return st;
}

sl_status sl__cuda_box(const sl__box_op *b, sl__stream *s) {
  const sl__cuda_module *m;
  sl_status st = sl__cuda_module_get(&m);
  if (st != SL_OK) return sl__fail_context(st, "box on a CUDA device: ");
  return m->box(b, s);
}

sl_status sl__cuda_fill_f32(float *dst, float value, int64_t n, sl__stream *s) {
  const sl__cuda_module *m;
  SL_CHECK(sl__cuda_module_get(&m));
  return m->fill_f32(dst, value, n, s);
}

sl_status sl__cuda_add_f32(float *out, const float *a, const float *b,
                           int64_t n, sl__stream *s) {
  const sl__cuda_module *m;
  SL_CHECK(sl__cuda_module_get(&m));
  return m->add_f32(out, a, b, n, s);
}
