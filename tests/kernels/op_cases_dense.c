/* Invariance cases for the dense op family (kernels/ops_dense.def): one
 * op_case per op (see op_harness.h). test_op_signatures fails for any
 * registered op without an entry here or in op_cases_pointwise.c. */
#include <stddef.h>

#include "op_harness.h"

static const op_case cases[] = {
    {NULL, NULL, {0, 0}, 0}, /* placeholder: C forbids an empty array */
};

const op_case *op_cases_dense(int *n) {
  *n = (int)(sizeof cases / sizeof cases[0]) - 1;
  return cases;
}
