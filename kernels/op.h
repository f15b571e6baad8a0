/* sluice kernels — op definitions: what every op declares to the compiler.
 *
 * An op definition gives its arity, attributes, shape/dtype inference, the
 * 1-D SBP signatures it accepts (all-B is implied and never listed), and its
 * kernels. Kernels see only local shards and never communicate: all
 * communication is boxing, which the compiler inserts. Gradient rules live
 * in graph/ (they build graphs of other ops, and graph/ is the layer that
 * can build graphs); the backward kernels they use are ordinary ops here.
 *
 * nd-SBP: the compiler picks one 1-D signature per mesh axis; a kernel run
 * on the resulting local shards must give, after boxing the outputs, the
 * same logical result as on one device. Every signature listed here is
 * checked that way by tests/kernels/test_op_signatures.c. */
#ifndef SLUICE_KERNELS_OP_H
#define SLUICE_KERNELS_OP_H

#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "caching_alloc.h"
#include "core_int.h"
#include "core_team.h"
#include "device_iface.h"

#define SL_OP_MAX_INPUTS 16
#define SL_OP_MAX_OUTPUTS 4
#define SL_OP_MAX_ATTRS 12
#define SL_OP_MAX_SIGNATURES 64

/* ---- attributes --------------------------------------------------------- */

typedef enum sl__attr_kind {
  SL__ATTR_INT = 0,
  SL__ATTR_FLOAT = 1,
  SL__ATTR_INTS = 2, /* up to SL_MAX_DIMS values */
} sl__attr_kind;

typedef struct sl__attr {
  const char *name; /* a string literal or owned by the graph's arena */
  sl__attr_kind kind;
  int n; /* INTS: count */
  int64_t i;
  double f;
  int64_t ints[SL_MAX_DIMS];
} sl__attr;

/* A small named set, copied by value. */
typedef struct sl__attrs {
  int n;
  sl__attr a[SL_OP_MAX_ATTRS];
} sl__attrs;

/* Setters replace an attribute of the same name. SL_EINVAL when full. */
sl_status sl__attrs_set_int(sl__attrs *at, const char *name, int64_t v);
sl_status sl__attrs_set_float(sl__attrs *at, const char *name, double v);
sl_status sl__attrs_set_ints(sl__attrs *at, const char *name, int n,
                             const int64_t *v);
/* Getters return dflt (ints: NULL with *n = 0) when the attribute is absent
 * or of another kind. */
int64_t sl__attr_int(const sl__attrs *at, const char *name, int64_t dflt);
double sl__attr_float(const sl__attrs *at, const char *name, double dflt);
const int64_t *sl__attr_ints(const sl__attrs *at, const char *name, int *n);
bool sl__attr_has(const sl__attrs *at, const char *name);
/* "axis=1 trans_a=0 shape=[2,3]" for plans and messages. */
int sl__attrs_print(const sl__attrs *at, char *buf, size_t size);

/* ---- metas, signatures, kernel calls ------------------------------------ */

typedef struct sl__meta {
  sl_shape shape;
  sl_dtype dtype;
} sl__meta;

/* A 1-D signature: one SBP per input, one per output. An `even` signature
 * gives the single-device result only where every split it names cuts its
 * axis into equal parts: reshape's S(i) -> S(j) between axes of different
 * extents, where an uneven split would cut the two shapes' memory at
 * different places. The compiler takes one only where sl__sig_even_holds. */
typedef struct sl__sbp_sig {
  sl_sbp in[SL_OP_MAX_INPUTS];
  sl_sbp out[SL_OP_MAX_OUTPUTS];
  bool even;
} sl__sbp_sig;

/* Whether signature s, taken on mesh axis m, may be: true unless s is even
 * and some axis it splits is not cut into equal parts, that is unless the
 * sizes of the mesh axes k <= m splitting that tensor axis (in_nd and
 * out_nd on k < m, s on m) multiply to a number that does not divide the
 * axis's extent. mesh: the mesh's sizes; in/out: the global metas. */
bool sl__sig_even_holds(const sl__sbp_sig *s, int n_in, const sl__meta *in,
                        const sl_nd_sbp *in_nd, int n_out, const sl__meta *out,
                        const sl_nd_sbp *out_nd, const int *mesh, int m);

/* One kernel call on one rank. Shapes in `in`/`out` are the LOCAL shard
 * shapes; `in_slice`/`out_slice` place each shard in its global tensor
 * (start and extent per dim; for B and P entries the whole extent of the
 * enclosing part), `in_global`/`out_global` are the global shapes. Kernels
 * that depend on global positions (random ops keyed by global index, causal
 * masks, mean over a split axis, embedding rows of a split table) use
 * them. */
typedef struct sl__kernel_ctx {
  const sl__attrs *attrs;
  int n_in, n_out;
  const void *in[SL_OP_MAX_INPUTS];
  void *out[SL_OP_MAX_OUTPUTS];
  sl__meta in_meta[SL_OP_MAX_INPUTS];
  sl__meta out_meta[SL_OP_MAX_OUTPUTS];
  sl_slice in_slice[SL_OP_MAX_INPUTS];
  sl_slice out_slice[SL_OP_MAX_OUTPUTS];
  sl_shape in_global[SL_OP_MAX_INPUTS];
  sl_shape out_global[SL_OP_MAX_OUTPUTS];
  /* The 1-D SBP of each input/output on each mesh axis is summarised as:
   * out_partial[i] true when output i is partial on some axis (a kernel
   * producing a partial-sum output from a split input, e.g. embedding with
   * a split table, may need to know). */
  bool in_partial[SL_OP_MAX_INPUTS];
  bool out_partial[SL_OP_MAX_OUTPUTS];
  int64_t step;    /* the training step (piece id): random ops and
                      optimizers key on it */
  void *workspace; /* op->workspace bytes, 64-byte aligned, or NULL;
                      for a CUDA run op->cuda->workspace bytes of
                      device memory, 256-byte aligned */
  size_t workspace_bytes;
  /* The CPU device's threads (core_team.h): a CPU kernel may cut its work
   * into sl__team_for parts, each writing outputs no other part writes,
   * so that the result does not depend on the team's size. NULL: one
   * thread. */
  sl__team *team;
} sl__kernel_ctx;

/* An optimizer update's sharded signature (ZeRO, docs/zero.md) reads its
 * weight (input 0) broadcast over the mesh axes its outputs are split
 * over, so the block the outputs hold differs from the weight's local
 * block along one tensor axis: in the weight's buffer it is `rows` runs of
 * `inner` elements, `stride` apart, from `offset` (one run at `offset`
 * when the update is not sharded). */
typedef struct sl__shard_view {
  int64_t offset, rows, inner, stride;
} sl__shard_view;

static inline sl__shard_view sl__kernel_shard_view(const sl__kernel_ctx *k) {
  const sl_shape *in = &k->in_meta[0].shape, *out = &k->out_meta[0].shape;
  int64_t n = sl_shape_numel(out);
  sl__shard_view v = {0, 1, n, n};
  int a = -1;
  for (int d = 0; d < in->ndim && a < 0; d++)
    if (in->dims[d] != out->dims[d] ||
        k->in_slice[0].start[d] != k->out_slice[0].start[d])
      a = d;
  if (a < 0) return v;
  int64_t below = 1; /* the input's elements per index of axis a */
  for (int d = a + 1; d < in->ndim; d++)
    below *= in->dims[d];
  for (int d = 0; d < a; d++)
    v.rows *= out->dims[d];
  v.inner = out->dims[a] * below;
  v.stride = in->dims[a] * below;
  v.offset = (k->out_slice[0].start[a] - k->in_slice[0].start[a]) * below;
  return v;
}

/* An op's CUDA kernel (kernels/cuda/, one .cu per family). `run` queues
 * the op on stream s of the CUDA device that holds every in/out pointer of
 * k (and its workspace) and returns once the work is queued: the outputs
 * exist when s reaches that point. The context follows the CPU kernel's
 * conventions (local shards, slices, global shapes, step); attrs, metas
 * and slices are host memory, the tensors device memory. Computes what the
 * CPU kernel computes (docs/cuda.md lists where the last bits may
 * differ), handles empty shards by launching nothing, and returns SL_ECUDA
 * (or the cuBLAS error) with the library's message when a launch fails.
 * What only the device sees cannot come back as a status without
 * synchronising the stream: an id or label out of range makes the affected
 * outputs NaN instead of the CPU kernel's SL_EINVAL. */
typedef struct sl__cuda_kernel {
  sl_status (*run)(const sl__kernel_ctx *k, sl__stream *s);
  /* Device workspace bytes a call needs (NULL: none); sl__op_run_cuda
   * allocates it (256-byte aligned) before run. */
  size_t (*workspace)(const sl__kernel_ctx *k);
} sl__cuda_kernel;

typedef struct sl__op_def {
  const char *name;
  int min_in, max_in; /* inputs; max_in <= SL_OP_MAX_INPUTS */
  int n_out;
  /* Output metas from the input metas (global shapes) and attrs. Returns
   * SL_EINVAL with a message that does not name the op (the graph prefixes
   * "op 'NAME' (matmul): "). */
  sl_status (*infer)(const sl__attrs *at, int n_in, const sl__meta *in,
                     sl__meta *out);
  /* Writes the 1-D signatures this op accepts for these global input metas
   * (all-B excluded), at most max; returns how many. NULL: all-B only. */
  int (*signatures)(const sl__attrs *at, int n_in, const sl__meta *in,
                    sl__sbp_sig *sigs, int max);
  /* Workspace bytes a call needs (NULL: none). */
  size_t (*workspace)(const sl__kernel_ctx *k);
  /* The CPU kernel. Must handle empty shards. SL_EINVAL etc. with a
   * message; never aborts. */
  sl_status (*cpu)(const sl__kernel_ctx *k);
  /* On a CUDA device the op runs its CPU kernel into host memory and
   * copies the result up (a source that reads files: npy_read); every
   * other op has a CUDA kernel in the CUDA module (sl__op_cuda). */
  bool cuda_from_host;
  /* A source op (no inputs) whose value changes each step (data, random):
   * the compiler does not fold or cache it. */
  bool per_step;
  /* Elementwise in memory order: the kernels (CPU and CUDA) read element i
   * of each input before writing element i of output 0, in the same
   * thread, so output 0 may be computed into an input of its own dtype and
   * element count (the memory planner's in-place reuse, graph/memory.c):
   * the elementwise ops, and reshape, whose output is its input's elements
   * in the same order. */
  bool inplace;
  /* Draws from each element's global position (random data, dropout,
   * .npy rows): a micro-batch's copy is shown its rows of the step's whole
   * batch (sl__graph_micro_shift), so micro-batching changes no value. */
  bool by_position;
  /* An optimizer update: input 0 the weight, input 1 its gradient, output
   * 0 the weight's next version. Under ZeRO it may read the weight whole
   * and write the shard its outputs hold (sl__kernel_shard_offset); the
   * memory planner orders such updates (graph/memory.c). */
  bool weight_update;
} sl__op_def;

/* The registry: every op, looked up by name. */
const sl__op_def *sl__op_find(const char *name);
int sl__op_count(void);
const sl__op_def *sl__op_at(int i);

/* Runs the op's kernel with its workspace: the calling thread's, reused
 * from call to call (one kernel at a time per thread). */
sl_status sl__op_run_cpu(const sl__op_def *op, sl__kernel_ctx *k);

/* The op's CUDA kernel, from the CUDA module (tensor/cuda_module.h), which
 * asking loads; NULL when the module cannot be loaded (the reason in
 * sl_last_error()) and for an op that runs from the host
 * (cuda_from_host). */
const sl__cuda_kernel *sl__op_cuda(const sl__op_def *op);

/* Queues the op on stream s (a stream of the CUDA device holding k's
 * tensors): its CUDA kernel, with its workspace from mem, a caching
 * allocator over that device's memory (sl__device_raw_memory): the block
 * is taken for s and handed back once the kernel is queued, which is safe
 * because the allocator gives a block freed on a stream only to that
 * stream again, whose order puts the next user after this kernel. mem may
 * be NULL for an op that needs no workspace. An op that runs from the host
 * runs its CPU kernel into host memory and copies the outputs up.
 * SL_EUNSUPPORTED when the CUDA module cannot be loaded (every op in a
 * build without CUDA), SL_EINVAL for a NULL stream or a missing allocator,
 * the allocator's or the kernel's status otherwise. k->workspace is
 * restored to NULL on return. */
sl_status sl__op_run_cuda(const sl__op_def *op, sl__kernel_ctx *k,
                          sl__caching_alloc *mem, sl__stream *s);

#endif
