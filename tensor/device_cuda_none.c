/* The CUDA device in a build without CUDA: opening one says why not. */
#include "core_int.h"
#include "device_iface.h"

sl_status sl__device_cuda_open(int index, sl__device **out) {
  if (out) *out = NULL;
  return sl__fail(SL_EUNSUPPORTED,
                  "cuda:%d: this build of sluice has no CUDA (configured "
                  "with SLUICE_CUDA=OFF or without nvcc)",
                  index);
}
