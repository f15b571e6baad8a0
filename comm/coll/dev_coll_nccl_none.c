/* The NCCL backend in a build without CUDA: opening it says why not. */
#include "dev_coll.h"

sl_status sl__dev_coll_nccl_open(sl__dev_coll **out) {
  if (out) *out = NULL;
  return sl__fail(SL_EUNSUPPORTED,
                  "nccl: this build of sluice is built without CUDA/NCCL "
                  "(configured with SLUICE_CUDA=OFF or without nvcc)");
}
