/* Targets without instruction-set kernels: the C sgemm uses its generic
 * kernel only. */
#include <stddef.h>

#include "cpu/blas.h"

int sl__sgemm_isa_kernels(const sl__sgemm_kernel **out) {
  *out = NULL;
  return 0;
}
