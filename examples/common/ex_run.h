/* sluice examples — running a built graph: one interface over the engines
 * that can execute it, a Chrome trace, per-op profiles and the training
 * loop the examples share.
 *
 * Engines:
 *   session  the embedded session (<sluice/session.h>): the plan on the
 *            actor runtime, one thread per CPU device; the default
 *   sharded  the sharded reference run (<sluice/reference.h>): every
 *            rank's kernels and the boxing reference executor, serially in
 *            this thread; honours placement and SBP exactly like the
 *            session
 *   interp   the logical reference run (whole tensors, placement and SBP
 *            ignored): the single-device reference
 * Like the rest of examples/, it uses only the public API. */
#ifndef SLUICE_EXAMPLES_RUN_H
#define SLUICE_EXAMPLES_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sluice/graph.h>

typedef enum ex_engine {
  EX_ENGINE_AUTO = 0, /* the session */
  EX_ENGINE_SESSION = 1,
  EX_ENGINE_SHARDED = 2,
  EX_ENGINE_INTERP = 3,
} ex_engine;

/* "auto", "session", "sharded", "interp". */
const char *ex_engine_name(ex_engine e);
/* SL_EINVAL "unknown engine 'x' (auto, session, sharded, interp)". */
sl_status ex_engine_parse(const char *text, ex_engine *out);

typedef struct ex_run_opts {
  ex_engine engine;
  const char *trace_path;    /* Chrome trace of every op run (NULL: none) */
  bool profile;              /* collect per-op times (ex_run_profile_print) */
  bool check_replicas;       /* sharded: compare replicas after every node */
  bool out_of_place_updates; /* sharded: see sl_reference_config */
  int cpu_threads;           /* session: sl_session_config.cpu_threads */
} ex_run_opts;

typedef struct ex_run ex_run;

/* Compiles g and readies the engine. g must outlive the run. SL_EUNSUPPORTED
 * for the session engine in a build without it; the graph's error; the
 * engine's errors. */
sl_status ex_run_create(sl_graph *g, const ex_run_opts *opts, ex_run **out);
/* Writes the trace (if any) and frees everything. NULL is a no-op. */
void ex_run_destroy(ex_run *r);

/* The engine actually used (never AUTO). */
ex_engine ex_run_engine(const ex_run *r);

/* Whether the run's engine is `engine` when a flag (`what`, used) needs
 * it; false after printing "PROG: WHAT needs the ENGINE engine, not X". */
bool ex_run_needs(const ex_run *r, const char *prog, bool used,
                  const char *what, ex_engine engine);

/* The session of the session engine (include/sluice/session.h), for what
 * only it has: variables and checkpoints (ex_ckpt.h). NULL for the other
 * engines. */
struct sl_session;
struct sl_session *ex_run_session(const ex_run *r);

/* Feeds input `name` its logical tensor; bytes must be its logical size
 * (SL_EINVAL naming the input otherwise; SL_ENOTFOUND for no such input). */
sl_status ex_run_feed(ex_run *r, const char *name, const void *data,
                      size_t bytes);
/* Runs one training step. */
sl_status ex_run_step(ex_run *r);
/* Copies the last step's logical value of fetch `name` (bytes must match). */
sl_status ex_run_fetch(ex_run *r, const char *name, void *out, size_t bytes);

/* Per-op profile (opts.profile; sharded and interp report whole steps only
 * for interp): the `top` node kinds by total time, with calls and ms per
 * step over `steps` steps. */
void ex_run_profile_print(const ex_run *r, FILE *out, int top, int steps);
/* Total kernel time of op kind `op` ("matmul") per step, in ms. */
double ex_run_profile_ms(const ex_run *r, const char *op, int steps);

/* The session engine's memory, one line per device:
 * "memory DEVICE peak N bytes (weights W, optimizer O, gradients G,
 * activations A, communication C, workspace K); allocated M bytes"
 * (sl_session_get_memory). SL_EUNSUPPORTED for the other engines. */
sl_status ex_run_memory_print(const ex_run *r, FILE *out);

/* ---- the training loop -------------------------------------------------- */

typedef struct ex_train_result {
  double ms_per_step; /* mean over the timed steps */
  double samples_per_s;
  int timed_steps; /* steps after the first (warm-up), or all if 1 */
} ex_train_result;

/* Steps the training loop of the session engine keeps started ahead of
 * the loss it prints: up to two chunks (ex_train_range). */
enum { EX_CHUNK = 8 };

/* Runs `steps` steps, fetching the scalar f32 fetch `loss` after each; when
 * out is non-NULL prints "step N loss X" lines to it. losses (may be NULL)
 * gets steps values. Throughput counts `batch` samples per step and leaves
 * out the first step when there are more than one. */
sl_status ex_train(ex_run *r, int64_t steps, int64_t batch, const char *loss,
                   FILE *out, float *losses, ex_train_result *res);

/* Called with the number of steps done (a step's index + 1) after every
 * `hook_every` steps, between two steps (the next one not started); an
 * error stops the loop and is returned. Its time is left out of the
 * throughput. */
typedef sl_status (*ex_train_hook)(void *ctx, int64_t steps_done);

/* ex_train for a run that has done `first` steps already (a resumed one):
 * runs steps first..last-1, printing them under their own numbers; losses
 * gets last - first values. Nothing to run (first >= last) is SL_OK with
 * a zeroed result. hook may be NULL; hook_every 0: never called. */
sl_status ex_train_range(ex_run *r, int64_t first, int64_t last, int64_t batch,
                         const char *loss, FILE *out, float *losses,
                         ex_train_result *res, ex_train_hook hook, void *ctx,
                         int64_t hook_every);

/* Prints the final line: "throughput: S samples/s, M ms/step (...)". */
void ex_train_print(FILE *out, const ex_train_result *res, const ex_run *r,
                    const char *layout, const char *placement);

#endif
