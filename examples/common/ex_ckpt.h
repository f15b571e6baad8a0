/* sluice examples — the checkpoint flags that mlp and gpt share:
 *
 *   --save DIR        save a checkpoint (sl_session_save) at the end
 *   --save-every N    also after every N-th step, into the same DIR
 *   --load PATH       weights only: a sluice checkpoint or safetensors file
 *                     (sl_session_load, by name), or a safetensors file of
 *                     the PyTorch peer's state_dict (bench/peers), mapped by
 *                     the model's ex_torch_map_fn
 *   --resume PATH     everything (sl_session_restore): weights, optimizer
 *                     state, the step and the data position
 *
 * --steps counts total steps: a run resumed at step 5 with --steps 10 runs
 * steps 5..9, so it ends where the same command line would have ended
 * without the interruption. The calls below need the session engine. */
#ifndef SLUICE_EXAMPLES_CKPT_H
#define SLUICE_EXAMPLES_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ex_run.h"

/* How a PyTorch tensor holds a sluice variable's numbers. */
typedef enum ex_torch_layout {
  EX_TORCH_SAME = 0,   /* the same shape, the same order */
  EX_TORCH_LINEAR = 1, /* nn.Linear's [out, in] for sluice's [in, out] */
  /* the same numbers in the same order, sluice's last two axes merged into
   * one ([D, H*hd] for [D, H, hd]) or its first two ([H*hd, D] for
   * [H, hd, D]): attention weights with a head axis */
  EX_TORCH_MERGE_LAST = 2,
  EX_TORCH_MERGE_FIRST = 3,
} ex_torch_layout;

/* A model's mapping: the PyTorch name of sluice variable `var` (written to
 * name, size bytes) and its layout; false when the PyTorch model has no
 * such tensor (the variable keeps its value). */
typedef bool (*ex_torch_map_fn)(const void *ctx, const char *var, char *name,
                                size_t size, ex_torch_layout *layout);

typedef struct ex_ckpt_flags {
  const char *save;   /* --save DIR (NULL: none) */
  int64_t save_every; /* --save-every N (0: at the end only) */
  const char *load;   /* --load PATH */
  const char *resume; /* --resume PATH */
} ex_ckpt_flags;

/* Checks the flags before anything is built: --save-every needs --save,
 * --load and --resume exclude each other, --save's directory can be
 * written (or created), and --load's and --resume's path opens as a
 * checkpoint (sl_checkpoint_open, which reads and checks it). false with
 * a message naming the flag and the path in err. */
bool ex_ckpt_check(const ex_ckpt_flags *f, char *err, size_t errsize);

/* Whether any checkpoint flag is set. */
bool ex_ckpt_any(const ex_ckpt_flags *f);

typedef struct ex_ckpt {
  ex_ckpt_flags flags;
  ex_run *run;
  FILE *out;          /* the "loaded", "resumed" and "saved" lines */
  int64_t saved_step; /* the step last saved, -1: none */
} ex_ckpt;

/* Readies a run for the flags: loads (--load) or restores (--resume), and
 * sets *first_step to the step the run is at (0, or the checkpoint's).
 * Prints "loaded N tensors from PATH" (" (PyTorch names)" when mapped by
 * `map`, which may be NULL) or "resumed from PATH at step N". Errors:
 * SL_EUNSUPPORTED for an engine other than the session; the session's and
 * the checkpoint's errors; SL_EINVAL for a PyTorch file that does not fit
 * the model (a tensor missing, of another shape or dtype, or one the model
 * has no place for), naming the tensor. */
sl_status ex_ckpt_begin(ex_ckpt *ck, const ex_ckpt_flags *f, ex_run *run,
                        ex_torch_map_fn map, const void *map_ctx, FILE *out,
                        int64_t *first_step);

/* An ex_train_hook (ctx: the ex_ckpt) for hook_every = --save-every: saves
 * to --save, printing "saved step N to DIR". */
sl_status ex_ckpt_hook(void *ctx, int64_t steps_done);

/* At the end of the run: saves to --save unless its last step was saved
 * already. */
sl_status ex_ckpt_end(ex_ckpt *ck);

#endif
