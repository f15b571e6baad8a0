/* The op registry: every op definition, found by name. Each op family lists
 * its definitions in an X-macro file (ops_*.def) next to its kernels. */
#include <string.h>

#include "core_thread.h"
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

/* The parts tensor axis `axis` is cut into on mesh axes 0..m: layout on
 * k < m, `at` on m. */
static int64_t split_parts(const sl_nd_sbp *nd, sl_sbp at, int axis,
                           const int *mesh, int m) {
  int64_t parts = 1;
  for (int k = 0; k <= m; k++) {
    sl_sbp b = k < m ? nd->sbp[k] : at;
    if (b.kind == SL_SBP_SPLIT && b.axis == axis) parts *= mesh[k];
  }
  return parts;
}

static bool cut_evenly(const sl__meta *meta, const sl_nd_sbp *nd, sl_sbp at,
                       const int *mesh, int m) {
  if (at.kind != SL_SBP_SPLIT) return true;
  if (at.axis < 0 || at.axis >= meta->shape.ndim) return false;
  return meta->shape.dims[at.axis] % split_parts(nd, at, at.axis, mesh, m) == 0;
}

bool sl__sig_even_holds(const sl__sbp_sig *s, int n_in, const sl__meta *in,
                        const sl_nd_sbp *in_nd, int n_out, const sl__meta *out,
                        const sl_nd_sbp *out_nd, const int *mesh, int m) {
  if (!s->even) return true;
  for (int i = 0; i < n_in; i++)
    if (!cut_evenly(&in[i], &in_nd[i], s->in[i], mesh, m)) return false;
  for (int j = 0; j < n_out; j++)
    if (!cut_evenly(&out[j], &out_nd[j], s->out[j], mesh, m)) return false;
  return true;
}

sl_status sl__op_run_cpu(const sl__op_def *op, sl__kernel_ctx *k) {
  if (!op->cpu)
    return sl__fail(SL_EUNSUPPORTED, "op %s has no CPU kernel", op->name);
  size_t ws = op->workspace ? op->workspace(k) : 0;
  if (ws) {
    /* A kernel never runs another through sl__op_run_cpu, so one buffer
     * per thread suffices. */
    k->workspace = sl__thread_scratch(SL__SCRATCH_OP_WORKSPACE, ws);
    if (!k->workspace)
      return sl__fail(SL_ENOMEM,
                      "op %s: out of memory for a %zu-byte "
                      "workspace",
                      op->name, ws);
    k->workspace_bytes = ws;
  }
  sl_status st = op->cpu(k);
  if (ws) {
    k->workspace = NULL;
    k->workspace_bytes = 0;
  }
  return st;
}
