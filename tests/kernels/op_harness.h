/* The shared op test harness: runs an op on one device (the reference) and
 * distributed over a placement under an nd-signature, reassembles the
 * distributed outputs into global tensors and compares them with the
 * reference (DESIGN.md section 10, invariant 1).
 *
 * A distributed run builds each rank's input shards the way the runtime
 * would hold them: S entries slice the global tensor (sl_local_slice), B
 * entries copy it, and P entries split the value into random parts that
 * reduce to it (sum, max or min), so a kernel that treats a partial input as
 * if it were whole gives a wrong answer. It fills the kernel context's
 * slices, global shapes, partial flags and step, runs the op's CPU kernel on
 * each rank, then reassembles each output by its nd-SBP: S places slices, B
 * checks that every copy is identical, P reduces. Outputs start filled with
 * a random byte pattern, so an element a kernel forgets to write shows up.
 *
 * Typical use (see test_op_signatures.c):
 *   sl_host_tensor *ref[SL_OP_MAX_OUTPUTS];
 *   oph_run_single(op, &at, n, in, step, ref);
 *   oph_check_all(op, &at, n, in, ref, seed, step, tol, &stats);
 * Errors come back as a status plus sl_last_error(): the op, placement,
 * layout, output, element and values of the first difference. */
#ifndef SLUICE_TESTS_OP_HARNESS_H
#define SLUICE_TESTS_OP_HARNESS_H

#include <sluice/placement.h>
#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "op.h"

/* ---- test tensors ----------------------------------------------------------
 */

/* A tensor of random values in [lo, hi]: float dtypes get multiples of 1/8
 * (so sums and products of a few of them are exact in f32, and random
 * partial parts reassemble without rounding), integer dtypes integers, bool
 * 0/1 (lo, hi ignored). Aborts the test (cmocka fail) on allocation
 * failure. The caller destroys it. */
sl_host_tensor *oph_random(sl_rng *r, sl_dtype dt, const sl_shape *shape,
                           double lo, double hi);
/* A tensor from values (numel of them, converted through double). */
sl_host_tensor *oph_from(sl_dtype dt, const sl_shape *shape,
                         const double *values);
/* A shape from a list: oph_shape(3, (int64_t[]){2, 3, 4}). */
sl_shape oph_shape(int ndim, const int64_t *dims);
/* A random shape of ndim dims with extents in [0, max_extent]; extent 0
 * comes up with probability about p_empty per dim (so most cases are
 * non-empty, a few are), other extents are uniform in [1, max_extent] and
 * so are often not divisible by the mesh sizes. */
sl_shape oph_random_shape(sl_rng *r, int ndim, int64_t max_extent,
                          double p_empty);
/* Seed for randomised tests: SLUICE_TEST_SEED when set, else one from the
 * clock; printed with the test's name so any run can be replayed. */
uint64_t oph_seed(const char *test_name);

/* ---- runs ------------------------------------------------------------------
 */

typedef struct oph_tol {
  double atol, rtol; /* |got - want| <= atol + rtol * |want|; 0, 0: exact */
} oph_tol;

/* Infers the outputs and runs the kernel once on whole tensors: one device,
 * every input and output B. out[0 .. op->n_out) receive new tensors (the
 * caller destroys them; NULL on failure). Infer and kernel errors come back
 * as their status, with sl_last_error() prefixed by the op's name. */
sl_status oph_run_single(const sl__op_def *op, const sl__attrs *at, int n_in,
                         sl_host_tensor *const *in, int64_t step,
                         sl_host_tensor **out);

/* The thread team oph_run_single gives kernels from now on (NULL: none,
 * the default); the caller keeps it. */
void oph_set_team(sl__team *team);

/* oph_run_single on the op of that name; fails the test (cmocka) when no
 * op has the name or the run fails, printing the error. */
void oph_run(const char *name, const sl__attrs *at, int n_in,
             sl_host_tensor *const *in, int64_t step, sl_host_tensor **out);

/* A meta for infer-only tests. */
sl__meta oph_meta(sl_dtype dt, int ndim, const int64_t *dims);

/* Asserts (cmocka) that op `name`'s infer refuses these inputs with
 * SL_EINVAL and a message containing needle, and that the message does
 * not name the op (the graph prefixes it). */
void oph_expect_infer_error(const char *name, const sl__attrs *at, int n_in,
                            const sl__meta *in, const char *needle);

/* Runs the op on placement p with one 1-D signature per mesh axis
 * (axis_sigs[k] for mesh axis k; input i's nd-SBP is (axis_sigs[0].in[i],
 * axis_sigs[1].in[i], ...)), reassembles the outputs and compares them
 * with ref. Returns SL_OK when they match; SL_EMISMATCH with the first
 * difference (or a B copy that differs between ranks) in sl_last_error();
 * SL_EUNSUPPORTED when the combination mixes partial kinds (P and P(max)
 * on one tensor has no logical value: the compiler never forms it, callers
 * skip it); SL_EINVAL when a signature is malformed for these shapes; a
 * kernel's own error otherwise. seed drives the partial parts and the
 * output fill pattern. */
sl_status oph_check_layout(const sl__op_def *op, const sl__attrs *at, int n_in,
                           sl_host_tensor *const *in,
                           sl_host_tensor *const *ref, const sl_placement *p,
                           const sl__sbp_sig *axis_sigs, uint64_t seed,
                           int64_t step, oph_tol tol);

typedef struct oph_stats {
  int layouts; /* (placement, nd-signature) pairs checked */
  int skipped; /* combinations mixing partial kinds */
  int sigs;    /* 1-D signatures the op declared for these inputs */
} oph_stats;

/* oph_check_layout over every placement of 1 to 4 ranks on 1-D meshes and
 * the 2x2 mesh, with every 1-D signature the op declares for these inputs
 * (plus the implied all-B) on each mesh axis, in every combination. Also
 * checks the declared list itself: at most SL_OP_MAX_SIGNATURES, all-B not
 * listed, no duplicates, split axes in range. Stops at the first failure.
 * stats (may be NULL) accumulates counts. */
sl_status oph_check_all(const sl__op_def *op, const sl__attrs *at, int n_in,
                        sl_host_tensor *const *in, sl_host_tensor *const *ref,
                        uint64_t seed, int64_t step, oph_tol tol,
                        oph_stats *stats);

/* Compares two tensors like oph_check_layout compares an output: same
 * dtype and shape, values within tol (NaN matches NaN, inf matches an
 * equal inf). SL_EMISMATCH with the first difference otherwise; what
 * prefixes the message. */
sl_status oph_compare(const char *what, const sl_host_tensor *got,
                      const sl_host_tensor *want, oph_tol tol);

/* "(S(0),B)" for input or output `index` of axis_sigs over ndim mesh axes. */
int oph_nd_print(const sl__sbp_sig *axis_sigs, int ndim, bool output, int index,
                 char *buf, size_t size);

/* ---- per-op cases for the invariance test -----------------------------------
 */

/* One entry per op: how to make a random valid input for it. Every op in
 * the registry needs one (test_op_signatures fails on an op without one, so
 * no op goes untested). The pointwise family's table is in
 * op_cases_pointwise.c, the dense family's in op_cases_dense.c, the data
 * sources' (ops_data.def) in op_cases_data.c. */
typedef struct op_case {
  const char *op; /* the op's registry name */
  /* Fills attrs and creates inputs (oph_random etc.) for a random valid
   * call; sets *n_in. The caller destroys the inputs. Shapes should have
   * extents that do not divide by 2, 3 or 4 and sometimes 0 or 1, so
   * uneven and empty shards come up. */
  sl_status (*make)(sl_rng *r, sl__attrs *at, int *n_in, sl_host_tensor **in);
  oph_tol tol; /* between distributed and single-device results */
  int trials;  /* random cases per run; 0 means the default (8) */
} op_case;

/* Each returns its table and sets *n to its length. */
const op_case *op_cases_pointwise(int *n);
const op_case *op_cases_dense(int *n);
const op_case *op_cases_data(int *n);

#endif
