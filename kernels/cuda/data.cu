// The CUDA kernel of npy_read (cpu/npy.c): the file is read on the host,
// where it is, and the shard copied to the device.
//
// The CPU kernel preads exactly the output's slice into a host buffer of
// the shard's size; cudaMemcpyAsync from that pageable buffer returns once
// the bytes are staged (the CUDA runtime waits for the stream first), so
// the buffer is freed at once. A data source that reads files synchronises
// its stream that way; it runs ahead of the compute that consumes it.
#include <stdlib.h>

#include "cuda_util.cuh"

extern "C" {
#include "cpu/npy.h"
}

namespace {

using namespace slc;

sl_status npy_run(const sl__kernel_ctx *k, sl__stream *s) {
  size_t bytes = (size_t)sl_shape_numel(&k->out_meta[0].shape) *
                 sl_dtype_size(k->out_meta[0].dtype);
  if (bytes == 0) return SL_OK;
  void *host = malloc(bytes);
  if (!host)
    return sl__fail(SL_ENOMEM, "npy_read: %zu bytes of host staging", bytes);
  sl__kernel_ctx hk = *k;
  hk.out[0] = host;
  sl_status st = sl__op_npy_read.cpu(&hk);
  if (st == SL_OK)
    st = cuda_check(cudaMemcpyAsync(k->out[0], host, bytes,
                                    cudaMemcpyHostToDevice, stream_of(s)),
                    "npy_read: cudaMemcpyAsync");
  free(host);
  return st;
}

} // namespace

extern "C" const sl__cuda_kernel sl__cuda_npy_read = {npy_run, NULL};
