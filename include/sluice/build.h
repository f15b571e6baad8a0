/* sluice — what this build of the library was compiled with. */
#ifndef SLUICE_BUILD_H
#define SLUICE_BUILD_H

#include <sluice/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when the library was built with CUDA: its CUDA kernels, devices
 * and NCCL collectives are in the CUDA module, libsluice-cuda.so, which is
 * opened the first time CUDA is asked for (docs/building.md). */
SL_API bool sl_build_has_cuda(void);
/* True when the library was built with NCCL collectives (with CUDA). */
SL_API bool sl_build_has_nccl(void);
/* Opens the CUDA module if that has not happened yet and sets *path (may
 * be NULL) to the file it was loaded from. SL_EUNSUPPORTED saying why it
 * cannot be: a build without CUDA, the module not found (and where it was
 * looked for), a library it needs missing, or a module of another sluice
 * version. A program that never calls this nor uses a CUDA device maps no
 * CUDA library. */
SL_API sl_status sl_build_cuda_module(const char **path);
/* The BLAS the CPU matmul uses: "openblas" (opened at first use, with the
 * kernel set chosen from the CPU) or "c" (sluice's own sgemm, when no
 * OpenBLAS can be loaded). Loads it if that has not happened yet. */
SL_API const char *sl_build_blas(void);
/* One line on that BLAS: library, version, kernel set and why it was
 * chosen, threads per call, and which bf16 gemm matmul uses. */
SL_API const char *sl_build_blas_detail(void);
/* Versions of the CUDA runtime, the driver and NCCL as "X.Y" / "X.Y.Z";
 * NULL when not built in, the CUDA module cannot be loaded, or no driver
 * is present. Each opens the CUDA module. */
SL_API const char *sl_build_cuda_runtime_version(void);
SL_API const char *sl_build_cuda_driver_version(void);
SL_API const char *sl_build_nccl_version(void);

/* One GPU as the CUDA runtime describes it. */
typedef struct sl_cuda_device_info {
  char name[256];      /* "NVIDIA H100 80GB HBM3" */
  size_t total_memory; /* bytes of device memory */
  int compute_major;   /* compute capability, e.g. 9.0 */
  int compute_minor;
  int multiprocessors;
  int pci_domain, pci_bus, pci_device;
} sl_cuda_device_info;

/* Describes CUDA device `device`, 0 .. sl_device_count(SL_DEVICE_CUDA)-1.
 * SL_EUNSUPPORTED in a build without CUDA or without its module, SL_EINVAL for
 * an index the process cannot see, SL_ECUDA with the runtime's message. *out is
 * zeroed on failure. */
SL_API sl_status sl_build_cuda_device_info(int device,
                                           sl_cuda_device_info *out);

#ifdef __cplusplus
}
#endif
#endif
