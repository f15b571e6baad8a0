/* sluice — the graph builder: global-tensor programs.
 *
 * A program builds a graph of ops on global tensors. A tensor is a small
 * value (graph, id) naming one output of one node; it is never freed on its
 * own. Every tensor has a logical shape and dtype, a placement (the devices
 * it lives on) and, after compilation, an nd-SBP.
 *
 * Errors are sticky: a builder call that fails records the first error on
 * the graph and returns a poisoned tensor (id < 0); every later call that
 * receives a poisoned tensor, or any call after the first error, returns a
 * poisoned tensor too and records nothing. A program checks once, after
 * building, with sl_graph_status() / sl_graph_error(). Messages name the op:
 *   "op 'fc1' (matmul): inner dims 64 and 32 differ".
 *
 * Names: every node has a unique name. Ops get "<op>_<n>" unless renamed
 * with sl_name(); inputs, variables and fetches take the name they are
 * given. Name scopes (sl_graph_push_scope) prefix "<scope>/" to every name
 * created inside them.
 *
 * Placements and SBPs are given as text ("cpu:0-3", "S(0)", "(S(0),B)") or,
 * in the *_p variants, as parsed objects (copied; the caller keeps
 * ownership). A NULL placement means the graph's default placement; a NULL
 * SBP means B for inputs and variables and "let the compiler choose" for
 * data sources and conversions.
 *
 * Ops take the placement of their inputs (of the first input when they
 * differ: different placements between producer and consumer are converted
 * by boxing, inserted by the compiler). Use sl_to_global to move a tensor
 * to another placement or fix its SBP.
 *
 * A graph is not thread-safe: build it from one thread at a time. Builder
 * calls on a compiled graph (a session compiles it) fail with SL_ESTATE. */
#ifndef SLUICE_GRAPH_H
#define SLUICE_GRAPH_H

#include <sluice/core.h>
#include <sluice/placement.h>
#include <sluice/sbp.h>
#include <sluice/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_graph sl_graph;

/* A global tensor in a graph: a value, copied freely. id < 0: poisoned (a
 * builder call failed). */
typedef struct sl_tensor {
  sl_graph *graph;
  int32_t id;
} sl_tensor;

/* A shape literal: SL_SHAPE(64, 784) is the 2-D shape [64, 784]; 1 to
 * SL_MAX_DIMS extents (a scalar shape is (sl_shape){0}). */
#define SL__SHAPE_N(...) SL__SHAPE_N_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define SL__SHAPE_N_(a, b, c, d, e, f, g, h, n, ...) n
#define SL_SHAPE(...)                                                          \
  ((sl_shape){.ndim = SL__SHAPE_N(__VA_ARGS__), .dims = {__VA_ARGS__}})

/* ---- graphs ----------------------------------------------------------- */

/* Creates an empty graph. SL_ENOMEM. Free with sl_graph_destroy. */
SL_API sl_status sl_graph_create(sl_graph **out);

/* Frees the graph and everything it owns. NULL is a no-op. Tensors of the
 * graph become invalid. */
SL_API void sl_graph_destroy(sl_graph *g);

/* The graph's first error (SL_OK when none). */
SL_API sl_status sl_graph_status(const sl_graph *g);

/* The first error's message ("op 'fc1' (matmul): ..."), "" when none. Valid
 * as long as the graph. */
SL_API const char *sl_graph_error(const sl_graph *g);

/* Sets the placement used by inputs, variables and data sources given no
 * placement (initially "cpu:0"). Parsed/copied; the caller keeps p.
 * SL_EINVAL for a malformed placement (also recorded on the graph),
 * SL_ESTATE after compilation. */
SL_API sl_status sl_graph_set_default_placement(sl_graph *g,
                                                const char *placement);
SL_API sl_status sl_graph_set_default_placement_p(sl_graph *g,
                                                  const sl_placement *p);

/* Mixed precision: matrix products built from now on (sl_matmul,
 * sl_tensordot, sl_batch_matmul, attention, and the backward pass's
 * products, which sl_minimize builds) take their f32 operands cast to dt,
 * SL_DTYPE_BF16 or SL_DTYPE_F16, and accumulate and output f32; weights,
 * gradients, optimizer state and every other op stay f32 (docs/api.md,
 * "Mixed precision"). SL_DTYPE_F32 (the default) turns it off. SL_EINVAL
 * for another dtype, SL_ESTATE after compilation. */
SL_API sl_status sl_graph_set_compute_dtype(sl_graph *g, sl_dtype dt);

/* Name scopes: names created until the matching pop are prefixed with
 * "<scope>/" (nested scopes join with '/'). Push copies the string. */
SL_API void sl_graph_push_scope(sl_graph *g, const char *scope);
SL_API void sl_graph_pop_scope(sl_graph *g);

/* ---- pipelining (docs/pipeline.md) ------------------------------------ */

/* Micro-batches per step (default 1). With m > 1 the graph is built for
 * one micro-batch: inputs and data sources are declared with the
 * micro-batch's rows on axis 0, and each step feeds m times as many
 * (sl_session_feed takes the step's whole batch, which is cut into m
 * micro-batches along axis 0; data sources read the step's m micro-batches
 * in turn). Forward and backward run per micro-batch, gradients are
 * summed over micro-batches in order and divided by m, and the optimizer
 * updates once per step: the step of a run without micro-batches on the
 * whole batch. A fetched scalar is the mean over micro-batches; any other
 * fetched tensor that depends on the batch is its micro-batches'
 * values concatenated along axis 0. Set it before sl_minimize (and before
 * compilation). SL_EINVAL for m < 1, SL_ESTATE once sl_minimize ran or
 * after compilation. */
SL_API sl_status sl_graph_set_micro_batches(sl_graph *g, int m);

/* The pipeline schedule: each device's order of forward (F), backward (B)
 * and, for "zero-bubble", weight-gradient (W) passes over micro-batches,
 * made binding by the plan: "1f1b" (default), "gpipe", "interleaved"
 * (several stages per device, Megatron's interleaved 1F1B; needs the
 * micro-batches to be a multiple of the stages per chunk) or "zero-bubble"
 * (ZB-H1). SL_EINVAL naming the known ones for another name, SL_ESTATE
 * after compilation. */
SL_API sl_status sl_graph_set_schedule(sl_graph *g, const char *schedule);

/* Pipeline stages. Ops created until the matching pop belong to stage
 * `stage` (>= 0); without it a forward op's stage is derived from its
 * placement: the largest stage among its inputs', plus one where the
 * input comes from another placement. Backward ops take their forward
 * op's stage. Stages only order work: where the ops run is their
 * placement. */
SL_API void sl_graph_push_stage(sl_graph *g, int stage);
SL_API void sl_graph_pop_stage(sl_graph *g);

/* Recomputation (docs/api.md, "Recomputation"): the forward ops created
 * until the matching pop form a region, whose internal values (those no
 * forward op outside the region, and no fetch, reads) are not kept for
 * the backward pass: sl_minimize makes the backward ops read them
 * computed again from the region's inputs, just before they are needed.
 * Activation memory then holds each region's inputs and outputs, not
 * what lies between; the losses are the same bit for bit. Nested pushes
 * make regions of their own (at most 32 deep). Push before sl_minimize
 * (SL_ESTATE in the graph otherwise). */
SL_API void sl_graph_push_recompute(sl_graph *g);
SL_API void sl_graph_pop_recompute(sl_graph *g);

/* Number of nodes (ops, inputs, variables, fetches) the graph holds. */
SL_API int sl_graph_node_count(const sl_graph *g);

/* Writes a one-line-per-node text listing of the graph (name, kind or op,
 * attributes, input names, shape, dtype, placement and, once compiled,
 * nd-SBP) into buf like snprintf; returns the length it needed. */
SL_API int sl_graph_print(const sl_graph *g, char *buf, size_t size);

/* ---- tensors ---------------------------------------------------------- */

/* True when t is not poisoned. */
SL_API bool sl_tensor_ok(sl_tensor t);

/* t's logical shape / dtype. SL_EINVAL (zeroed shape, F32) for a poisoned
 * tensor. */
SL_API sl_status sl_tensor_shape(sl_tensor t, sl_shape *out);
SL_API sl_dtype sl_tensor_dtype(sl_tensor t);

/* The name of the node producing t; "" for a poisoned tensor. Valid as long
 * as the graph. */
SL_API const char *sl_tensor_name(sl_tensor t);

/* Renames the node producing t (copying name) and returns t. A duplicate or
 * empty name is an error. On the poisoned result of the call that caused
 * the graph's first error, it names that op in the error message instead,
 * so `sl_name(sl_matmul(x, w, false, false), "fc1")` reports "op 'fc1'". */
SL_API sl_tensor sl_name(sl_tensor t, const char *name);

/* ---- inputs, variables, data sources ---------------------------------- */

/* A tensor fed by the program at every step, under `name`. sbp NULL: B.
 * Partial SBPs are refused. */
SL_API sl_tensor sl_input(sl_graph *g, const char *name, const sl_shape *shape,
                          sl_dtype dt, const char *placement, const char *sbp);
SL_API sl_tensor sl_input_p(sl_graph *g, const char *name,
                            const sl_shape *shape, sl_dtype dt,
                            const sl_placement *placement,
                            const sl_nd_sbp *sbp);

/* Variable initializers. Random ones use a counter-based generator keyed
 * by (seed, global element index): the values never depend on placement or
 * SBP. Fans for the scaled kinds: a 1-D shape [n] has fan_in = fan_out = n;
 * otherwise fan_out is the last extent and fan_in the product of the
 * others (weights are [in, out]). */
typedef enum sl_init_kind {
  SL_INIT_ZEROS = 0,
  SL_INIT_CONSTANT = 1,        /* a */
  SL_INIT_UNIFORM = 2,         /* in [a, b) */
  SL_INIT_NORMAL = 3,          /* mean a, standard deviation b */
  SL_INIT_XAVIER_UNIFORM = 4,  /* ±a·sqrt(6 / (fan_in + fan_out)) */
  SL_INIT_XAVIER_NORMAL = 5,   /* std a·sqrt(2 / (fan_in + fan_out)) */
  SL_INIT_KAIMING_UNIFORM = 6, /* ±a·sqrt(3 / fan_in) */
  SL_INIT_KAIMING_NORMAL = 7,  /* std a / sqrt(fan_in) */
} sl_init_kind;

typedef struct sl_init {
  sl_init_kind kind;
  double a, b; /* see the kinds; a is the gain of the scaled kinds */
  uint64_t seed;
} sl_init;

/* Initializer constructors. */
static inline sl_init sl_init_zeros(void) {
  sl_init i = {SL_INIT_ZEROS, 0, 0, 0};
  return i;
}
static inline sl_init sl_init_constant(double v) {
  sl_init i = {SL_INIT_CONSTANT, v, 0, 0};
  return i;
}
static inline sl_init sl_init_uniform(double lo, double hi, uint64_t seed) {
  sl_init i = {SL_INIT_UNIFORM, lo, hi, seed};
  return i;
}
static inline sl_init sl_init_normal(double mean, double std, uint64_t seed) {
  sl_init i = {SL_INIT_NORMAL, mean, std, seed};
  return i;
}
/* gain 1 is the Glorot/Xavier scale; sqrt(2) the He/Kaiming one for relu. */
static inline sl_init sl_init_xavier_uniform(double gain, uint64_t seed) {
  sl_init i = {SL_INIT_XAVIER_UNIFORM, gain, 0, seed};
  return i;
}
static inline sl_init sl_init_xavier_normal(double gain, uint64_t seed) {
  sl_init i = {SL_INIT_XAVIER_NORMAL, gain, 0, seed};
  return i;
}
static inline sl_init sl_init_kaiming_uniform(double gain, uint64_t seed) {
  sl_init i = {SL_INIT_KAIMING_UNIFORM, gain, 0, seed};
  return i;
}
static inline sl_init sl_init_kaiming_normal(double gain, uint64_t seed) {
  sl_init i = {SL_INIT_KAIMING_NORMAL, gain, 0, seed};
  return i;
}

/* Persistent state named `name`, initialised once by `init`, trained by
 * sl_minimize (unless made constant with sl_variable_set_trainable).
 * sbp NULL: B. Partial SBPs are refused. */
SL_API sl_tensor sl_variable(sl_graph *g, const char *name,
                             const sl_shape *shape, sl_dtype dt, sl_init init,
                             const char *placement, const char *sbp);
SL_API sl_tensor sl_variable_p(sl_graph *g, const char *name,
                               const sl_shape *shape, sl_dtype dt, sl_init init,
                               const sl_placement *placement,
                               const sl_nd_sbp *sbp);

/* Whether sl_minimize updates variable v (default true). Returns v; an
 * error when v is not a variable. */
SL_API sl_tensor sl_variable_set_trainable(sl_tensor v, bool trainable);

/* The ZeRO stage (0 to 3, docs/zero.md) of variable v's update, in place
 * of sl_optimizer.zero_stage for it. Returns v; an error when v is not a
 * variable, for a stage out of range, or after sl_minimize. */
SL_API sl_tensor sl_variable_set_zero_stage(sl_tensor v, int stage);

/* Makes variable v start from tensor `tensor` (NULL: v's own name) of a
 * checkpoint directory or a plain safetensors file (docs/checkpoint.md)
 * instead of its initializer: when the session starts, each rank reads
 * only the stored pieces its shard intersects. The file is checked now: a
 * missing or corrupt file, no such tensor, another shape or dtype is a
 * graph error naming the path and tensor. Strings are copied. Returns v.
 * Embedded sessions only for now. */
SL_API sl_tensor sl_variable_load(sl_tensor v, const char *path,
                                  const char *tensor);

/* A tensor filled with value, fixed across steps. sbp NULL: chosen by the
 * compiler to suit its consumers. */
SL_API sl_tensor sl_fill(sl_graph *g, const sl_shape *shape, sl_dtype dt,
                         double value, const char *placement, const char *sbp);

/* Synthetic data, new at every step: element i of step k depends only on
 * (seed, k, i), never on the layout. Uniform in [lo, hi) (float dtypes),
 * normal(mean, std), or integers uniform in [lo, hi) (integer dtypes, for
 * labels and ids). sbp NULL: chosen by the compiler. */
SL_API sl_tensor sl_data_random_uniform(sl_graph *g, const sl_shape *shape,
                                        sl_dtype dt, double lo, double hi,
                                        uint64_t seed, const char *placement,
                                        const char *sbp);
SL_API sl_tensor sl_data_random_normal(sl_graph *g, const sl_shape *shape,
                                       sl_dtype dt, double mean, double std,
                                       uint64_t seed, const char *placement,
                                       const char *sbp);
SL_API sl_tensor sl_data_random_int(sl_graph *g, const sl_shape *shape,
                                    sl_dtype dt, int64_t lo, int64_t hi,
                                    uint64_t seed, const char *placement,
                                    const char *sbp);

/* Rows of a .npy file (format v1, v2 or v3; C order; '<f4', '<i4' or
 * '<i8'; shape [N, ...]), `batch` per step: step k yields rows
 * [k*batch, (k+1)*batch) modulo N, shape [batch, ...]. Each device reads
 * only its own slice of the file, as the SBP splits it. The header is read
 * now: a missing file or a bad header is a graph error naming the path.
 * sbp NULL: chosen by the compiler (S or B; never P). */
SL_API sl_tensor sl_data_npy(sl_graph *g, const char *path, int64_t batch,
                             const char *placement, const char *sbp);
SL_API sl_tensor sl_data_npy_p(sl_graph *g, const char *path, int64_t batch,
                               const sl_placement *placement,
                               const sl_nd_sbp *sbp);

/* ---- conversions ------------------------------------------------------ */

/* t on `placement` (NULL: t's own) with nd-SBP `sbp` (NULL: chosen by the
 * compiler; the SBP is fixed otherwise). An identity op; the compiler
 * inserts the boxing that produces it. */
SL_API sl_tensor sl_to_global(sl_tensor t, const char *placement,
                              const char *sbp);
SL_API sl_tensor sl_to_global_p(sl_tensor t, const sl_placement *placement,
                                const sl_nd_sbp *sbp);

/* The gradient of t as autodiff builds it (sl_minimize) in nd-SBP `sbp` on
 * t's placement: a backward layout inference would not choose, such as a
 * gradient kept split where it would replicate it, or the reverse. The
 * op that makes the gradient produces that layout where it can (else it
 * is converted). Call before sl_minimize; returns t. */
SL_API sl_tensor sl_gradient_sbp(sl_tensor t, const char *sbp);

/* ---- ops -------------------------------------------------------------- */
/* Each returns its output (poisoned on error). Axes may be negative
 * (counted from the end). Binary ops broadcast numpy-style. */

SL_API sl_tensor sl_add(sl_tensor a, sl_tensor b);
SL_API sl_tensor sl_sub(sl_tensor a, sl_tensor b);
SL_API sl_tensor sl_mul(sl_tensor a, sl_tensor b);
SL_API sl_tensor sl_div(sl_tensor a, sl_tensor b);

/* x + s, x * s, -x (elementwise with a constant). */
SL_API sl_tensor sl_add_scalar(sl_tensor x, double s);
SL_API sl_tensor sl_mul_scalar(sl_tensor x, double s);
SL_API sl_tensor sl_neg(sl_tensor x);

/* Elementwise functions. gelu is the tanh approximation. */
SL_API sl_tensor sl_relu(sl_tensor x);
SL_API sl_tensor sl_gelu(sl_tensor x);
SL_API sl_tensor sl_tanh(sl_tensor x);
SL_API sl_tensor sl_sigmoid(sl_tensor x);
SL_API sl_tensor sl_square(sl_tensor x);
SL_API sl_tensor sl_sqrt(sl_tensor x);
SL_API sl_tensor sl_exp(sl_tensor x);
SL_API sl_tensor sl_log(sl_tensor x);

/* x converted to dtype dt; x itself when it already has dtype dt. */
SL_API sl_tensor sl_cast(sl_tensor x, sl_dtype dt);

/* Reductions over naxes axes (naxes 0: every axis), keeping them as extent
 * 1 when keepdims. reduce_max of a split axis gives P(max). */
SL_API sl_tensor sl_reduce_sum(sl_tensor x, int naxes, const int *axes,
                               bool keepdims);
SL_API sl_tensor sl_reduce_mean(sl_tensor x, int naxes, const int *axes,
                                bool keepdims);
SL_API sl_tensor sl_reduce_max(sl_tensor x, int naxes, const int *axes,
                               bool keepdims);
/* x broadcast to shape; x summed down to like's shape (the inverse). */
SL_API sl_tensor sl_broadcast_to(sl_tensor x, const sl_shape *shape);
SL_API sl_tensor sl_reduce_sum_like(sl_tensor x, sl_tensor like);

/* Shape ops. reshape keeps the element count (one extent may be -1);
 * transpose permutes axes (perm has ndim entries); slice_of keeps
 * [start, end) of one axis (negative positions count from the end);
 * concat joins n tensors along axis. */
SL_API sl_tensor sl_reshape(sl_tensor x, const sl_shape *shape);
SL_API sl_tensor sl_transpose(sl_tensor x, int n, const int *perm);
SL_API sl_tensor sl_slice_of(sl_tensor x, int axis, int64_t start, int64_t end);
SL_API sl_tensor sl_concat(int n, const sl_tensor *xs, int axis);

/* Inverted dropout: zeroes each element with probability p and scales the
 * rest by 1/(1-p); the mask depends on (seed, step, global index). */
SL_API sl_tensor sl_dropout(sl_tensor x, double p, uint64_t seed);
/* Sets x[..., i, j] to -inf where j > i (the last two axes). */
SL_API sl_tensor sl_causal_mask(sl_tensor x);

/* op(a)·op(b), op = transpose when the flag is set: a [..., m, k] (its
 * leading axes are rows too) or [k, m...] transposed, b [k, n...] or
 * [n..., k] transposed; out [..., m, n...]. */
SL_API sl_tensor sl_matmul(sl_tensor a, sl_tensor b, bool trans_a,
                           bool trans_b);
/* numpy.tensordot(a, b, axes): the sum over a's last `axes` axes and b's
 * first `axes` (the same extents in the same order); out [a's other axes,
 * b's other axes], each operand keeping at least one. One matrix product
 * in memory, so a split of any axis stays one (a split contraction axis
 * gives a partial sum). sl_matmul(a, b, false, false) is axes = 1. */
SL_API sl_tensor sl_tensordot(sl_tensor a, sl_tensor b, int axes);
/* The same over leading batch axes: a [..., m, k], b [..., k, n]. */
SL_API sl_tensor sl_batch_matmul(sl_tensor a, sl_tensor b, bool trans_a,
                                 bool trans_b);
SL_API sl_tensor sl_softmax(sl_tensor x, int axis);
SL_API sl_tensor sl_log_softmax(sl_tensor x, int axis);
/* Per-row loss -log softmax(logits)[label]: logits [..., C], integer
 * labels [...]; the result has labels' shape. */
SL_API sl_tensor sl_sparse_cross_entropy(sl_tensor logits, sl_tensor labels);
/* Integer labels [...] as f32 [..., classes]: 1 at each label, else 0. A
 * label outside [0, classes) fails the step (NaN rows on CUDA). */
SL_API sl_tensor sl_one_hot(sl_tensor labels, int64_t classes);
/* Normalises over the last axis: (x - mean) / sqrt(var + eps) * gamma +
 * beta, gamma and beta of the last axis' extent. */
SL_API sl_tensor sl_layer_norm(sl_tensor x, sl_tensor gamma, sl_tensor beta,
                               double eps);
/* Rows of table [V, D] picked by integer ids [...]: [..., D]. */
SL_API sl_tensor sl_embedding(sl_tensor table, sl_tensor ids);

/* Composite ops, built from the ones above. */
/* softmax(q·kᵀ / sqrt(d) [+ causal mask]) · v over [..., s, d] tensors,
 * f32 out. q, k, v may be bf16 (the matmuls' inputs; the scores and the
 * softmax stay f32, the probabilities are cast to bf16 when v is). */
SL_API sl_tensor sl_scaled_dot_product_attention(sl_tensor q, sl_tensor k,
                                                 sl_tensor v, bool causal);
/* mean((pred - target)^2), a scalar. */
SL_API sl_tensor sl_mse_loss(sl_tensor pred, sl_tensor target);
/* mean of sparse_cross_entropy(logits, labels), a scalar. */
SL_API sl_tensor sl_cross_entropy(sl_tensor logits, sl_tensor labels);

/* ---- training --------------------------------------------------------- */

typedef enum sl_optimizer_kind {
  SL_OPTIMIZER_SGD = 0,   /* with momentum when momentum > 0 */
  SL_OPTIMIZER_ADAM = 1,  /* weight_decay added to the gradient (L2) */
  SL_OPTIMIZER_ADAMW = 2, /* weight_decay decoupled */
} sl_optimizer_kind;

typedef struct sl_optimizer {
  sl_optimizer_kind kind;
  double lr;
  double momentum;          /* SGD */
  double beta1, beta2, eps; /* Adam, AdamW */
  double weight_decay;
  double clip_norm; /* > 0: gradients scaled so their global L2
                       norm is at most clip_norm */
  /* ZeRO (docs/zero.md): 0 off; 1: a data-parallel weight's update and
   * optimizer state are sharded over its data-parallel mesh axes, its
   * gradient reduce-scattered and the new weight all-gathered; 2: also no
   * full-size gradient kept once reduce-scattered (the backward pass
   * waits for the reduce-scatters); 3: also the weight itself kept as
   * its shard, all-gathered before its forward and its backward readers
   * and freed after them (at most two gathered at a time per device). */
  int zero_stage;
  /* Lazy updates (TensorFlow's LazyAdam): a weight read only as the table
   * of sl_embedding lookups changes, with its optimizer state, only at the
   * rows the step looked up; its other rows' state does not decay. */
  bool lazy_embeddings;
  /* Dynamic loss scaling, for f16 mixed precision (PyTorch's GradScaler):
   * > 0, the first scale. The backward pass starts from loss * scale, the
   * gradients are divided by it; a step in which a gradient holds an inf
   * or NaN changes no weight and no state and halves the scale; after
   * loss_scale_window steps without (0: 2000) it doubles. The scale is
   * the variable "loss_scale". 0: off. */
  double loss_scale;
  int loss_scale_window;
  /* SL_DTYPE_BF16: every gradient is rounded to bf16 before it is reduced
   * between devices (all-reduced, or reduce-scattered under ZeRO), which
   * halves the bytes, and widened back for clipping and the update (as
   * DDP's bf16 compression hook). 0 (SL_DTYPE_F32): reduced as computed. */
  sl_dtype reduce_dtype;
} sl_optimizer;

/* Optimizer descriptions with the usual defaults (Adam: 0.9, 0.999, 1e-8;
 * no weight decay, no clipping). */
static inline sl_optimizer sl_optimizer_sgd(double lr, double momentum) {
  sl_optimizer o = {.kind = SL_OPTIMIZER_SGD, .lr = lr, .momentum = momentum};
  return o;
}
static inline sl_optimizer sl_optimizer_adam(double lr) {
  sl_optimizer o = {.kind = SL_OPTIMIZER_ADAM,
                    .lr = lr,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .eps = 1e-8};
  return o;
}
static inline sl_optimizer sl_optimizer_adamw(double lr, double weight_decay) {
  sl_optimizer o = {.kind = SL_OPTIMIZER_ADAMW,
                    .lr = lr,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .eps = 1e-8,
                    .weight_decay = weight_decay};
  return o;
}

/* Adds the backward pass of the scalar `loss` and, for every trainable
 * variable it depends on, the optimizer's update (state variables such as
 * momentum and Adam's m, v are created with the weight's placement and
 * SBP). Call once per graph. Returns the graph's status (SL_EINVAL for a
 * non-scalar loss, a bad optimizer or a graph error; SL_ESTATE when called
 * twice or after compilation). */
SL_API sl_status sl_minimize(sl_tensor loss, const sl_optimizer *opt);

/* Returns t to the program at every step, as a logical tensor, under
 * `name` (a node of its own). Returns the graph's status. */
SL_API sl_status sl_fetch(sl_tensor t, const char *name);

#ifdef __cplusplus
}
#endif
#endif
