/* Helpers shared by the graph tests: cmocka includes, a test seed, random
 * host data, running a graph through the reference interpreter, and the
 * finite-difference gradient check. */
#ifndef SLUICE_TESTS_GRAPH_TEST_H
#define SLUICE_TESTS_GRAPH_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include <sluice/graph.h>

#include "graph_int.h"

/* Asserts st == SL_OK, printing sl_last_error() otherwise. */
#define GT_OK(call)                                                            \
  do {                                                                         \
    sl_status gt_st_ = (call);                                                 \
    if (gt_st_ != SL_OK)                                                       \
      fail_msg("%s -> %s: %s", #call, sl_status_str(gt_st_), sl_last_error()); \
  } while (0)

/* Asserts the graph has no error, printing it otherwise. */
#define GT_GRAPH_OK(g)                                                         \
  do {                                                                         \
    if (sl_graph_status(g) != SL_OK)                                           \
      fail_msg("graph error: %s", sl_graph_error(g));                          \
  } while (0)

/* The seed for randomised tests: SLUICE_TEST_SEED or a fixed default;
 * printed once per test with its name. */
uint64_t gt_seed(const char *test);

/* Fills n floats uniform in [lo, hi). */
void gt_fill_f32(sl_rng *r, float *x, int64_t n, double lo, double hi);

/* Whether every op in the NULL-terminated list is registered; when not,
 * the name of the first missing one goes to *missing. */
bool gt_ops_present(const char *const *ops, const char **missing);

/* Skips the calling test, saying why, unless every op named (a NULL-
 * terminated list) is registered: tests that need another engineer's op
 * run once it lands. */
#define GT_REQUIRE_OPS(...)                                                    \
  do {                                                                         \
    const char *gt_ops_[] = {__VA_ARGS__, NULL}, *gt_missing_ = NULL;          \
    if (!gt_ops_present(gt_ops_, &gt_missing_)) {                              \
      printf("[ skipped  ] %s: op '%s' is not registered yet\n", __func__,     \
             gt_missing_);                                                     \
      skip();                                                                  \
    }                                                                          \
  } while (0)

/* ---- gradient checks ---------------------------------------------------- */

typedef enum gt_range {
  GT_ANY = 0,      /* uniform in [-1, 1) */
  GT_POSITIVE = 1, /* uniform in [0.5, 2) */
  GT_AWAY0 = 2,    /* |x| uniform in [0.2, 1), random sign (kinks at 0) */
  GT_INDEX = 3,    /* integers in [0, index_hi) (labels, ids) */
  GT_SPREAD = 4,   /* distinct values 0.05 apart, shuffled (no near-ties
                      within the finite-difference step: max, sorting) */
} gt_range;

typedef struct gt_input {
  sl_shape shape;
  sl_dtype dt;
  gt_range range;
  int64_t index_hi; /* GT_INDEX */
} gt_input;

/* Builds the op under test from the graph's inputs. */
typedef sl_tensor (*gt_build)(sl_graph *g, const sl_tensor *in);

/* Checks d(sum(y * r))/d(input), the sum in f64, for every float input
 * against central finite differences (Richardson-extrapolated) through the
 * interpreter, r a random tensor of y's shape (so dy = r). Skips with a
 * message when an op in `ops` (NULL-terminated) is not registered yet. */
void gt_grad_check(const char *name, int n_in, const gt_input *in,
                   gt_build build, const char *const *ops);

#endif
