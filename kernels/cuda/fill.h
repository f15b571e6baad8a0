/* sluice kernels — the first CUDA kernels: fill and elementwise add on f32
 * (kernels/cuda/fill.cu). Present only in builds with CUDA; they run on a
 * stream of the CUDA device (tensor/device_iface.h), asynchronously, and
 * return once the kernel is queued. */
#ifndef SLUICE_KERNELS_CUDA_FILL_H
#define SLUICE_KERNELS_CUDA_FILL_H

#include <stdint.h>

#include "core_int.h"
#include "device_iface.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = value for i < n. dst is device memory of the stream's device.
 * SL_EINVAL for n < 0 or a NULL pointer with n > 0, SL_ECUDA with the
 * runtime's message when the launch fails. n == 0 queues nothing. */
sl_status sl__cuda_fill_f32(float *dst, float value, int64_t n, sl__stream *s);

/* out[i] = a[i] + b[i] for i < n (out may alias a or b). As fill. */
sl_status sl__cuda_add_f32(float *out, const float *a, const float *b,
                           int64_t n, sl__stream *s);

#ifdef __cplusplus
}
#endif
#endif
