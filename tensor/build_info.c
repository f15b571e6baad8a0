/* Build facts that do not depend on CUDA. */
#include <sluice/build.h>

const char *sl_build_blas(void) { return "none"; }
