/* sluice — what this build of the library was compiled with. */
#ifndef SLUICE_BUILD_H
#define SLUICE_BUILD_H

#include <sluice/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when the library was built with CUDA kernels and devices. */
SL_API bool sl_build_has_cuda(void);
/* True when the library was built with NCCL collectives. */
SL_API bool sl_build_has_nccl(void);
/* The BLAS the CPU matmul uses: "openblas" (opened at first use, with the
 * kernel set chosen from the CPU) or "c" (sluice's own sgemm, when no
 * OpenBLAS can be loaded). Loads it if that has not happened yet. */
SL_API const char *sl_build_blas(void);
/* One line on that BLAS: library, version, kernel set and why it was
 * chosen, threads per call. */
SL_API const char *sl_build_blas_detail(void);
/* Versions of the CUDA runtime, the driver and NCCL as "X.Y" / "X.Y.Z";
 * NULL when not built in or no driver is present. */
SL_API const char *sl_build_cuda_runtime_version(void);
SL_API const char *sl_build_cuda_driver_version(void);
SL_API const char *sl_build_nccl_version(void);

#ifdef __cplusplus
}
#endif
#endif
