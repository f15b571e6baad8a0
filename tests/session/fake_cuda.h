/* A stand-in for CUDA devices, so sessions on cuda placements run on a
 * machine without a GPU: fake_cuda_install() makes every session open
 * "cuda:k" as a fake device until fake_cuda_uninstall().
 *
 * What it keeps of a GPU:
 * - Streams are asynchronous: each has its own worker thread that runs the
 *   queued copies, memsets and kernels in order, later than the call that
 *   queued them; events complete when their stream reaches them.
 * - Device memory is not host-addressable: a device pointer is a host
 *   pointer with bit 63 set (non-canonical on x86-64 and AArch64), so any
 *   host access to device memory crashes instead of silently working.
 * Kernels are the ops' CPU kernels, run by the stream's worker on the
 * translated pointers, so a session on fake cuda:k computes exactly what
 * one on cpu:k does. Its "NCCL" does all-reduces like NCCL: a launch for
 * all ranks in one group call, each rank's stream blocked until all ranks
 * reached the collective, members reduced in rank order. */
#ifndef SLUICE_TESTS_FAKE_CUDA_H
#define SLUICE_TESTS_FAKE_CUDA_H

#include <stdint.h>

typedef struct fake_cuda_stats {
  uint64_t kernels, h2d, d2h, d2d, memsets; /* work items run */
  uint64_t live_allocs; /* device allocations not yet freed */
  uint64_t all_reduces; /* ranks' all-reduces launched (fake NCCL) */
} fake_cuda_stats;

void fake_cuda_install(void);
void fake_cuda_uninstall(void);
/* Totals since install. */
void fake_cuda_get_stats(fake_cuda_stats *out);

#endif
