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
 * one on cpu:k does. Its "NCCL" does all-reduces, all-gathers and
 * reduce-scatters like NCCL: communicators
 * found by their unique id, so daemons in one test process share them as
 * NCCL's processes do; a collective init; each rank's stream blocked in a
 * collective until all ranks reached it (past a 20 s wait, where NCCL
 * would hang, the stream fails naming the collective); members reduced in
 * rank order; an abort frees only its own rank. And sends and receives
 * (exchanges, all-to-alls): one rank's of a group call are one part on its
 * stream; the k-th send from a to b fills the k-th receive at b from a,
 * of the same size (else both streams fail: NCCL would corrupt memory); a
 * send completes once received; the same 20 s waits.
 * Box moves and fills (kernels/box.h) run the host's on the stream. */
#ifndef SLUICE_TESTS_FAKE_CUDA_H
#define SLUICE_TESTS_FAKE_CUDA_H

#include <stdbool.h>
#include <stdint.h>

struct sl__session_backend;

typedef struct fake_cuda_stats {
  uint64_t kernels, h2d, d2h, d2d, memsets; /* work items queued */
  uint64_t live_allocs; /* device allocations not yet freed */
  /* Ranks' all-reduces launched (fake NCCL) on communicators inside one
   * process, and on communicators across processes (daemons). */
  uint64_t all_reduces, cross_all_reduces;
  /* The same for all-gathers and reduce-scatters. */
  uint64_t all_gathers, cross_all_gathers, reduce_scatters,
      cross_reduce_scatters;
  uint64_t comm_aborts; /* ranks' communicators aborted */
  /* Processes (each daemon's session) that launched on communicators
   * across processes, closed without an abort: checked that they launched
   * round by round in the order they created those communicators; and of
   * them, the ones that did not (a message on stderr says where). */
  uint64_t order_checks, order_errors;
  /* Ranks' parts of group calls of sends and receives (exchanges,
   * all-to-alls) launched on communicators inside one process and across
   * processes, and the bytes their receives got. */
  uint64_t exchanges, cross_exchanges, p2p_bytes;
  uint64_t boxes; /* box moves and fills queued */
} fake_cuda_stats;

void fake_cuda_install(void);
/* Waits (10 s at most) until no fake device memory or communicator is
 * left: a daemon frees a job it kept for a restart once the program
 * releases it (a poll away) or a failed job once it has cleaned up, on
 * its own thread. Whether none is left. */
bool fake_cuda_settle(void);
void fake_cuda_uninstall(void);
/* Totals since install. */
void fake_cuda_get_stats(fake_cuda_stats *out);
/* Kernels wait a random 0..us microseconds before running (0: no wait;
 * install resets it), so work finishes in varying orders. */
void fake_cuda_set_jitter(unsigned us);
/* Kernels on cuda:device (of every process) wait us microseconds more
 * (device < 8; install resets it). */
void fake_cuda_set_device_delay(int device, unsigned us);
/* Every group call initialising ranks (a communicator's creation) takes
 * ms milliseconds more (0: none; install resets it): a daemon's session
 * then connects its device groups long after the program's feeds came. */
void fake_cuda_set_init_delay(unsigned ms);
/* The next n unique ids asked for fail (install resets it). */
void fake_cuda_fail_unique_ids(int n);
/* The part of rank `rank` in collective number seq (counting from 0) of
 * the next communicator across processes to get there fails its stream
 * (a fault inside the collective), once every other rank has reached it;
 * it never joins, so the others wait until they are aborted. Once; rank
 * -1 cancels; install resets it. Collectives only: sends and receives
 * neither count nor fail. */
void fake_cuda_fail_collective(int rank, uint64_t seq);
/* Communicators with a rank still initialised or a part still queued: 0
 * once every session is gone. */
int fake_cuda_live_comms(void);
/* Every wait of the fake NCCL (inits, collectives, sends and receives)
 * gives up after ms milliseconds, failing as NCCL would hang (0: the
 * default, 20 s; install resets it). Set it once the communicators are
 * made, as their init waits too. */
void fake_cuda_set_wait_ms(unsigned ms);
/* The session backend fake_cuda_install() installs (session_int.h): its
 * devices, kernels, collectives (coll_open: one "process" per call) and
 * boxes, for tests that drive them directly. */
const struct sl__session_backend *fake_cuda_backend(void);

#endif
