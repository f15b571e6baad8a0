/* Helpers for the examples' parallel-invariance tests: build a model under
 * a layout, train it a few steps on an engine, compare the losses with the
 * single-device reference, count the collectives the compiler inserted. */
#ifndef SLUICE_TESTS_EXAMPLES_INV_H
#define SLUICE_TESTS_EXAMPLES_INV_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include <sluice/graph.h>
#include <sluice/session.h>

#include "common/ex_flags.h"
#include "common/ex_run.h"

#define INV_STEPS 10
#define INV_RTOL 1e-4

/* Asserts st == SL_OK, printing sl_last_error() otherwise. */
#define INV_OK(call)                                                           \
  do {                                                                         \
    sl_status inv_st_ = (call);                                                \
    if (inv_st_ != SL_OK)                                                      \
      fail_msg("%s -> %s: %s", #call, sl_status_str(inv_st_),                  \
               sl_last_error());                                               \
  } while (0)

/* Builds a model into an empty graph for a layout on a placement (text
 * from ex_layout_placement). */
typedef sl_status (*inv_build_fn)(sl_graph *g, ex_layout layout,
                                  const char *placement, const void *ctx);

/* One layout on n devices. */
typedef struct inv_case {
  ex_layout layout;
  int devices;
} inv_case;

/* The matrix of the issue: single, dp and tp on 1-4 devices, hybrid on 2
 * and 4. Returns the count; cases gets at most 16. */
int inv_cases(inv_case *cases);

/* Builds and trains `steps` steps of the model under (layout, devices) on
 * `engine`, writing the losses. The sharded engine checks replicas after
 * every node. Fails the test on any error. When g_out is non-NULL the
 * compiled graph is returned there (the caller destroys it). */
void inv_train(inv_build_fn build, const void *ctx, ex_layout layout,
               int devices, ex_engine engine, int steps, float *losses,
               sl_graph **g_out);

/* inv_train on devices of another type ("cpu", "cuda"). */
void inv_train_on(const char *type, inv_build_fn build, const void *ctx,
                  ex_layout layout, int devices, ex_engine engine, int steps,
                  float *losses, sl_graph **g_out);

/* Every case of the matrix on CUDA devices, in a session, against the same
 * case on cpu (sharded reference). _fake: on the fake device of
 * tests/session/fake_cuda.h (asynchronous streams, the CPU kernels), up to
 * 4 devices, the same bits. _gpu: on the GPUs present, within 1e-3 relative
 * (their own kernels and sum orders); skips the test without one. */
void inv_check_cuda_fake(const char *model, inv_build_fn build,
                         const void *ctx);
void inv_check_cuda_gpu(const char *model, inv_build_fn build, const void *ctx);

/* Trains a built graph `steps` steps in a session, writing the losses of
 * its "loss" fetch; device 0's planned memory too when mem is set. */
void inv_session_train(sl_graph *g, int steps, float *losses,
                       sl_memory_stats *mem);

/* Largest |a - b| / |b| over n values. */
double inv_max_rel(const float *a, const float *b, int n);
/* Whether the n values are bit-identical. */
bool inv_identical(const float *a, const float *b, int n);

/* Boxing nodes of a compiled graph that move data (some rank sends bytes),
 * forward ones (neither backward nor optimizer) and all of them; `op`
 * (may be -1) counts only plans whose every step is that boxing op. */
void inv_count_boxing(const sl_graph *g, int op, int *forward, int *all);
/* The same for boxing nodes of values of at least min_numel elements. */
void inv_count_boxing_min(const sl_graph *g, int op, int64_t min_numel,
                          int *forward, int *all);
/* Bytes the boxing nodes' routes send between devices in a step, all
 * ranks together: those serving the forward pass, and all. */
void inv_bytes_sent(const sl_graph *g, int64_t *forward, int64_t *all);

/* Runs the whole matrix for a model: the interpreter reference, the
 * sharded single-device run (bit-identical to it), then every case on the
 * sharded engine (single layouts bit-identical, others within INV_RTOL)
 * and, when the build has it, on the session (bit-identical to the sharded
 * run of the same case). Prints a table of the losses. */
void inv_check_matrix(const char *model, inv_build_fn build, const void *ctx);

#endif
