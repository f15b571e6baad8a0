/* The CUDA probe of a build without CUDA: no devices, no versions. */
#include <string.h>

#include <sluice/build.h>

#include "core_int.h"
#include "tensor_int.h"

int sl__cuda_device_count(void) { return 0; }
bool sl_build_has_cuda(void) { return false; }
bool sl_build_has_nccl(void) { return false; }
const char *sl_build_cuda_runtime_version(void) { return NULL; }
const char *sl_build_cuda_driver_version(void) { return NULL; }
const char *sl_build_nccl_version(void) { return NULL; }

sl_status sl_build_cuda_device_info(int device, sl_cuda_device_info *out) {
  if (out) memset(out, 0, sizeof *out);
  return sl__fail(SL_EUNSUPPORTED, "cuda:%d: this build of sluice has no CUDA",
                  device);
}
