/* sluice examples — command-line flags, layouts and device lists shared by
 * the example programs (examples/mlp, examples/gpt), their tests and the
 * benchmarks.
 *
 * Flags are `--name value` or `--name=value`; booleans take no value.
 * Errors are returned as a message, never printed here, so tests can check
 * them; the programs print "PROG: MESSAGE" and exit 2. */
#ifndef SLUICE_EXAMPLES_FLAGS_H
#define SLUICE_EXAMPLES_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sluice/core.h>
#include <sluice/graph.h>
#include <sluice/tensor.h>

/* What each kind accepts: the whole value, in decimal, no leading blanks
 * or trailing characters. A value out of range is an error naming the flag,
 * never clamped. */
typedef enum ex_flag_kind {
  EX_FLAG_INT = 0,      /* int64_t in [min, 2^31 - 1] */
  EX_FLAG_DOUBLE = 1,   /* double: finite, >= min */
  EX_FLAG_STRING = 2,   /* const char * (points into argv) */
  EX_FLAG_BOOL = 3,     /* bool, set to true when present */
  EX_FLAG_INT64 = 4,    /* int64_t in [min, 2^63 - 1] (seeds) */
  EX_FLAG_POSITIVE = 5, /* double: finite, > 0 (learning rates) */
  EX_FLAG_FRACTION = 6, /* double: finite, in [0, 1) (momentum) */
} ex_flag_kind;

typedef struct ex_flag {
  const char *name; /* without the dashes */
  ex_flag_kind kind;
  void *value;      /* where the value goes; holds the default */
  const char *help; /* one line */
  int64_t min;      /* EX_FLAG_INT, _INT64, _DOUBLE: smallest accepted */
} ex_flag;

typedef enum ex_flags_result {
  EX_FLAGS_OK = 0,
  EX_FLAGS_HELP = 1,  /* --help or -h: usage printed to `help_out` */
  EX_FLAGS_ERROR = 2, /* err holds the reason */
} ex_flags_result;

/* Parses argv[1..argc) against n flags. --help prints `usage` (a summary
 * line) and every flag with its default to help_out. On EX_FLAGS_ERROR,
 * err (size errsize) names the problem: "unknown flag '--x'", "flag
 * '--steps' needs a value", "flag '--steps': 'abc' is not an integer",
 * "flag '--lr': 'nan' is not a finite number", "flag '--lr': -1 is not
 * above 0", "flag '--layers': 99999999999 is above the maximum
 * 2147483647". */
ex_flags_result ex_flags_parse(int argc, char **argv, const char *usage,
                               const ex_flag *flags, int n, FILE *help_out,
                               char *err, size_t errsize);

/* ---- paths -------------------------------------------------------------- */
/* Checks made at start, before anything is built, so that a path the run
 * would write or read only at its end (a trace, a checkpoint) fails at
 * once. On failure they write "flag '--NAME': PATH: REASON" into err and
 * return false. */

/* `path` can be opened for writing as a file (it is created and removed
 * again when missing; an existing file is left as it is). */
bool ex_path_check_file_writable(const char *flag, const char *path, char *err,
                                 size_t errsize);

/* `path` is a directory this process can create files in, or can be
 * created as one (it is created and removed again to find out). */
bool ex_path_check_dir_writable(const char *flag, const char *path, char *err,
                                size_t errsize);

/* `path` exists and is readable (a file or a directory). */
bool ex_path_check_readable(const char *flag, const char *path, char *err,
                            size_t errsize);

/* ---- layouts ------------------------------------------------------------ */

typedef enum ex_layout {
  EX_LAYOUT_SINGLE = 0, /* every tensor broadcast (on one device: plain) */
  EX_LAYOUT_DP = 1,     /* batch split S(0), weights broadcast */
  EX_LAYOUT_TP = 2,     /* Megatron: column- then row-split weights */
  EX_LAYOUT_HYBRID = 3, /* 2-D mesh [N/2, 2]: dp on axis 0, tp on axis 1 */
} ex_layout;

/* "single", "dp", "tp", "hybrid". */
const char *ex_layout_name(ex_layout l);

/* Parses a layout name. SL_EINVAL with "unknown layout 'x' (single, dp, tp,
 * hybrid)" as the last error. */
sl_status ex_layout_parse(const char *text, ex_layout *out);

/* Parses --dtype, the matmuls' compute dtype (sl_graph_set_compute_dtype):
 * "f32", "bf16" or "f16". SL_EINVAL with "unknown dtype 'x' (f32, bf16,
 * f16)" as the last error. */
sl_status ex_dtype_parse(const char *text, sl_dtype *out);

/* The memory and precision flags both examples take: --dtype,
 * --reduce-dtype, --loss-scale and --zero, as entries of an ex_flag table
 * over an ex_train_flags (initialise with EX_TRAIN_FLAGS_INIT). */
typedef struct ex_train_flags {
  const char *dtype, *reduce_dtype;
  double loss_scale;
  int64_t zero;
} ex_train_flags;
#define EX_TRAIN_FLAGS_INIT                                                    \
  { "f32", "f32", 0, 0 }
/* clang-format off */
#define EX_TRAIN_FLAGS(f)                                                    \
  {"dtype", EX_FLAG_STRING, &(f).dtype,                                      \
   "f32 | bf16 | f16: the matmuls' inputs (mixed precision: f32 "            \
   "products, outputs, weights and the rest)", 0},                           \
  {"reduce-dtype", EX_FLAG_STRING, &(f).reduce_dtype,                        \
   "f32 | bf16: the dtype gradients are reduced between devices in", 0},     \
  {"loss-scale", EX_FLAG_DOUBLE, &(f).loss_scale,                            \
   "dynamic loss scaling from this scale (for --dtype f16; 0: off)", 0},     \
  {"zero", EX_FLAG_INT, &(f).zero,                                           \
   "ZeRO stage: 1 shards the optimizer state and update over the "           \
   "data-parallel devices, 2 also frees each full gradient once "            \
   "reduce-scattered, 3 also keeps each weight sharded, gathered just "      \
   "before use (docs/zero.md)", 0}
/* clang-format on */

/* The compute dtype (--dtype) into *dtype and the optimizer's fields
 * (--reduce-dtype, --loss-scale, --zero) into *opt. SL_EINVAL with the
 * reason as the last error for an unknown dtype. */
sl_status ex_train_flags_apply(const ex_train_flags *f, sl_dtype *dtype,
                               sl_optimizer *opt);

/* The placement text for a layout on `devices`: "cpu:N" (a bare count)
 * means devices 0..N-1; anything else is a placement text ("cpu:0-3",
 * "cpu:0,2"). Hybrid needs an even device count and gets the mesh
 * [N/2, 2] unless the placement already has a 2-D mesh. Writes into buf;
 * SL_EINVAL with the reason (malformed placement, odd count for hybrid). */
sl_status ex_layout_placement(ex_layout l, const char *devices, char *buf,
                              size_t size);

/* The nd-SBP text of a tensor under a layout: `data_axis` is the tensor
 * axis that data parallelism splits (the batch axis; -1: none), `model_axis`
 * the axis tensor parallelism splits (-1: none). single: B; dp: S(data)
 * or B; tp: S(model) or B; hybrid: (S(data) or B, S(model) or B).
 * Returns a pointer to buf. */
const char *ex_layout_sbp(ex_layout l, int data_axis, int model_axis, char *buf,
                          size_t size);

/* Whether the layout splits weights across devices (tp, hybrid). */
bool ex_layout_is_tensor_parallel(ex_layout l);

#endif
