/* The op registry: every op definition, found by name. Each op family lists
 * its definitions in an X-macro file (ops_*.def) next to its kernels. */
#include <string.h>

#include "op.h"

#define SL_OP(name) extern const sl__op_def sl__op_##name;
#include "ops_pointwise.def"
#include "ops_dense.def"
#include "ops_data.def"
#undef SL_OP

static const sl__op_def *const registry[] = {
#define SL_OP(name) &sl__op_##name,
#include "ops_pointwise.def"
#include "ops_dense.def"
#include "ops_data.def"
#undef SL_OP
    NULL, /* keeps the array non-empty while families are being added */
};

int sl__op_count(void) { return (int)SL_ARRAY_LEN(registry) - 1; }

const sl__op_def *sl__op_at(int i) {
  return i >= 0 && i < sl__op_count() ? registry[i] : NULL;
}

const sl__op_def *sl__op_find(const char *name) {
  for (int i = 0; i < sl__op_count(); i++)
    if (strcmp(registry[i]->name, name) == 0) return registry[i];
  return NULL;
}

sl_status sl__op_run_cpu(const sl__op_def *op, sl__kernel_ctx *k) {
  if (!op->cpu) return sl__fail(SL_EUNSUPPORTED, "op %s has no CPU kernel", op->name);
  size_t ws = op->workspace ? op->workspace(k) : 0;
  void *buf = NULL;
  if (ws) {
    buf = sl__malloc(ws + 64);
    if (!buf) return SL_ENOMEM;
    k->workspace = (void *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    k->workspace_bytes = ws;
  }
  sl_status st = op->cpu(k);
  sl__free(buf);
  if (ws) {
    k->workspace = NULL;
    k->workspace_bytes = 0;
  }
  return st;
}

sl_status sl__op_run_cuda(const sl__op_def *op, sl__kernel_ctx *k,
                          sl__caching_alloc *mem, sl__stream *s) {
  if (!op->cuda)
    return sl__fail(SL_EUNSUPPORTED,
                    "op %s has no CUDA kernel (a build without CUDA has "
                    "none)",
                    op->name);
  if (!s) return sl__fail(SL_EINVAL, "op %s: no CUDA stream", op->name);
  size_t ws = op->cuda->workspace ? op->cuda->workspace(k) : 0;
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
  sl_status st = op->cuda->run(k, s);
  k->workspace = NULL;
  k->workspace_bytes = 0;
  /* Queued work still uses buf; the stream's order protects it (op.h). */
  if (buf) {
    sl_status fst = sl__caching_alloc_free(mem, buf);
    if (st == SL_OK) st = fst;
  }
  return st;
}
