/* The CUDA probe of a CUDA build: asks the runtime, the driver and NCCL.
 * A machine without a GPU or driver reports zero devices, never an error. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include <sluice/build.h>

#include "core_int.h"
#include "tensor_int.h"

int sl__cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky "no device" error */
    return 0;
  }
  return n;
}

bool sl_build_has_cuda(void) { return true; }
bool sl_build_has_nccl(void) { return true; }

static const char *format_version(int v, char *buf, size_t n) {
  snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

const char *sl_build_cuda_runtime_version(void) {
  static char buf[32];
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return NULL;
  return format_version(v, buf, sizeof buf);
}

const char *sl_build_cuda_driver_version(void) {
  static char buf[32];
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess || v == 0) return NULL;
  return format_version(v, buf, sizeof buf);
}

const char *sl_build_nccl_version(void) {
  static char buf[32];
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return NULL;
  /* NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH. */
  snprintf(buf, sizeof buf, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  return buf;
}

sl_status sl_build_cuda_device_info(int device, sl_cuda_device_info *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!out) return sl__fail(SL_EINVAL, "cuda device info: NULL output");
  int n = sl__cuda_device_count();
  if (device < 0 || device >= n)
    return sl__fail(SL_EINVAL, "cuda:%d: the process sees %d CUDA device%s",
                    device, n, n == 1 ? "" : "s");
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return sl__fail(SL_ECUDA, "cuda:%d: cudaGetDeviceProperties: %s (%s)",
                    device, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->total_memory = p.totalGlobalMem;
  out->compute_major = p.major;
  out->compute_minor = p.minor;
  out->multiprocessors = p.multiProcessorCount;
  out->pci_domain = p.pciDomainID;
  out->pci_bus = p.pciBusID;
  out->pci_device = p.pciDeviceID;
  return SL_OK;
}
