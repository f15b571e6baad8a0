/* sluice core — thread teams: the threads one CPU device owns, for the
 * intra-op parallelism of its kernels. Not installed.
 *
 * A team of n threads is its leader (the thread that calls sl__team_for:
 * the device's compute stream thread) and n - 1 workers it starts. A
 * parallel loop cuts [0, count) into at most n contiguous parts of at least
 * `grain` items, always the same way for the same (count, grain, n), and
 * the members take the parts as they come (the leader runs them all when
 * the workers are slow to wake): a kernel whose parts write disjoint
 * outputs and never combine partial results computes the same bits on any
 * team. Workers spin
 * briefly after a loop (the next kernel usually follows within
 * microseconds) and then sleep. */
#ifndef SLUICE_CORE_TEAM_H
#define SLUICE_CORE_TEAM_H

#include <pthread.h>
#include <stdint.h>

#include "core_int.h"

typedef struct sl__team sl__team;

/* One member's part of a loop: items [begin, end), member `part`. */
typedef void (*sl__team_fn)(void *arg, int64_t begin, int64_t end, int part);

/* Starts a team of `threads` (1..SL__TEAM_MAX) threads named
 * "<name>/<member>". cpus: NULL (threads float) or `threads` CPU numbers,
 * member i pinned to cpus[i] (the leader when it first leads a loop).
 * SL_EINVAL for a bad count, SL_EINTERNAL when a thread cannot start,
 * SL_ENOMEM. */
#define SL__TEAM_MAX 256
sl_status sl__team_create(int threads, const int *cpus, const char *name,
                          sl__team **out);
/* Stops and joins the workers; NULL is a no-op. No loop may be running. */
void sl__team_destroy(sl__team *t);

/* Members, leader included; 1 for NULL. */
int sl__team_size(const sl__team *t);

/* How many parts sl__team_for cuts count items into: min(size,
 * ceil(count / grain)), at least 1 (grain < 1 counts as 1). */
int sl__team_parts(const sl__team *t, int64_t count, int64_t grain);

/* Runs fn over [0, count) in sl__team_parts parts, part p = [count * p /
 * parts, count * (p + 1) / parts), each on one member (the caller among
 * them), and returns when every part is done. One loop at a time per team
 * (the device's compute thread is its only caller); a NULL team runs
 * fn(arg, 0, count, 0) on the caller. count <= 0 calls nothing. */
void sl__team_for(sl__team *t, int64_t count, int64_t grain, sl__team_fn fn,
                  void *arg);

/* Pins a thread (sl__pin_self: the calling one) to one CPU (best effort:
 * false when the system refuses, e.g. a CPU outside the process's
 * affinity). */
bool sl__pin_thread(pthread_t thread, int cpu);
bool sl__pin_self(int cpu);

/* The CPUs this process may run on, in increasing order, at most max of
 * them; returns how many were written (at least 1: CPU 0 when the
 * affinity cannot be read). */
int sl__cpu_list(int *cpus, int max);

/* Those CPUs as text, ranges joined by commas ("0-3,6"), like snprintf
 * into buf. */
void sl__cpu_list_text(char *buf, size_t size);

#endif
