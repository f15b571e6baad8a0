/* The CUDA probe of a CUDA build: asks the runtime, the driver and NCCL.
 * A machine without a GPU or driver reports zero devices, never an error. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

#include <sluice/build.h>

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
