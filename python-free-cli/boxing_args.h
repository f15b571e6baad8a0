/* Argument parsing for `sluice boxing`, kept apart from the command so that
 * tests and the libFuzzer target can drive it without a process exit or any
 * output. Uses only the public API. */
#ifndef SLUICE_CLI_BOXING_ARGS_H
#define SLUICE_CLI_BOXING_ARGS_H

#include <sluice/sluice.h>

typedef struct sl_cli_boxing_args {
  bool help;   /* --help / -h: nothing else is parsed or owned */
  bool json;   /* --json */
  bool verify; /* --verify */
  bool seed_given;
  uint64_t seed; /* --seed; 0 when not given (the command picks one) */
  sl_shape shape;
  sl_dtype dtype;          /* --dtype, default f32 */
  sl_placement *src_place; /* --from-placement (owned) */
  sl_placement *dst_place; /* --to-placement, or a copy of src */
  bool dst_place_given;
  sl_nd_sbp src_sbp, dst_sbp; /* --from, --to */
  sl_boxing_cost cost; /* the source device type's defaults, overridden by
                          --intra-bw and friends */
} sl_cli_boxing_args;

/* Parses argv[1..argc-1] (argv[0] is "boxing"). Flags take `--flag value` or
 * `--flag=value`. Beyond syntax it checks what makes a request meaningless:
 * required flags, each SBP against its placement and the shape
 * (sl_nd_sbp_check), equal device types on both sides, positive finite
 * bandwidths and non-negative finite latencies.
 * Returns SL_OK and fills *out (release with sl_cli_boxing_args_clear), or
 * SL_EINVAL / SL_ENOMEM with a one-line message in err (control characters
 * replaced, so input text cannot split it) and nothing owned in *out. */
sl_status sl_cli_boxing_args_parse(int argc, char *const *argv,
                                   sl_cli_boxing_args *out, char *err,
                                   size_t err_size);

/* Frees what *a owns and zeroes it. Safe on a zeroed or failed *a. */
void sl_cli_boxing_args_clear(sl_cli_boxing_args *a);

/* The `sluice boxing --help` text. */
extern const char sl_cli_boxing_usage[];

#endif
