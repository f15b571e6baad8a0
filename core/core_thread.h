/* sluice core — threads, sleeping, and the multi-producer single-consumer
 * queues that stream threads drain. Not installed.
 *
 * Two queue implementations share one interface so they can be measured
 * against each other (bench/actor_chain.c prints both):
 *   SL__QUEUE_MUTEX     a ring under a mutex, the consumer sleeps on a condvar;
 *   SL__QUEUE_LOCKFREE  a bounded ring with per-cell sequence numbers (the
 *                       classic bounded MPMC array queue used with a single
 *                       consumer); producers claim cells with one CAS and the
 *                       consumer sleeps only after announcing it.
 * Both are bounded: push reports a full queue instead of blocking, and the
 * caller sizes the queue from what it knows can be outstanding. */
#ifndef SLUICE_CORE_THREAD_H
#define SLUICE_CORE_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core_int.h"

/* ---- threads ----------------------------------------------------------- */

typedef struct sl__thread {
  pthread_t handle;
  bool started;
} sl__thread;

/* Starts fn(arg) on a new thread. name (may be NULL) is shown by debuggers
 * and truncated to 15 characters. SL_EINTERNAL with the reason on failure. */
sl_status sl__thread_start(sl__thread *t, void *(*fn)(void *), void *arg,
                           const char *name);
/* Joins a thread started by sl__thread_start; a no-op for one never started. */
void sl__thread_join(sl__thread *t);

/* Sleeps for ns nanoseconds (restarting after signals). */
void sl__sleep_ns(uint64_t ns);

/* Initialises a condition variable that waits on CLOCK_MONOTONIC, so
 * sl__cond_wait_ns is not disturbed by wall-clock changes. */
sl_status sl__cond_init(pthread_cond_t *c);
/* Waits at most ns nanoseconds (the mutex is held on entry and return).
 * Returns false on timeout. */
bool sl__cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns);

/* A hint inside spin loops. */
static inline void sl__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Number of CPUs this process may run on (at least 1). */
int sl__cpu_count(void);

/* The calling thread's scratch buffers, one per use, kept between calls and
 * grown to the largest asked for, so that a step's kernels do not map and
 * unmap fresh pages (and fault them in) every call; freed when the thread
 * exits. A use must not call anything that takes the same slot while it
 * holds its buffer. */
typedef enum sl__scratch_slot {
  SL__SCRATCH_OP_WORKSPACE = 0, /* sl__op_run_cpu: a kernel's workspace */
  SL__SCRATCH_GEMM_PART = 1,    /* a team member's part of a product */
  SL__SCRATCH_SLOTS = 2
} sl__scratch_slot;

/* At least `bytes`, 64-byte aligned, its contents undefined; NULL when out
 * of memory. */
void *sl__thread_scratch(sl__scratch_slot slot, size_t bytes);

/* ---- multi-producer single-consumer queues ----------------------------- */

typedef enum sl__queue_kind {
  SL__QUEUE_MUTEX = 1,
  SL__QUEUE_LOCKFREE = 2,
} sl__queue_kind;

typedef struct sl__mpsc sl__mpsc;

/* Creates a queue of fixed-size elements holding at least `capacity` of them
 * (rounded up to a power of two). SL_EINVAL for a zero size or an unknown
 * kind, SL_ENOMEM. */
sl_status sl__mpsc_create(sl__queue_kind kind, size_t elem_size,
                          size_t capacity, sl__mpsc **out);
void sl__mpsc_destroy(sl__mpsc *q);

/* Any thread: copies one element in. Returns false, changing nothing, when
 * the queue is full. Wakes the consumer if it sleeps in sl__mpsc_wait. */
bool sl__mpsc_push(sl__mpsc *q, const void *elem);

/* Consumer thread only: copies up to max elements, oldest first, into out
 * and returns how many. Never blocks. Elements pushed by one producer come
 * out in the order it pushed them. */
size_t sl__mpsc_pop(sl__mpsc *q, void *out, size_t max);

/* Consumer thread only: sleeps until the queue is non-empty, sl__mpsc_wake
 * was called since the last wait, or timeout_ns passes (0: no timeout).
 * Returns at once in the first two cases. */
void sl__mpsc_wait(sl__mpsc *q, uint64_t timeout_ns);

/* Any thread: makes the consumer's current or next sl__mpsc_wait return,
 * for conditions kept outside the queue (a stop flag). */
void sl__mpsc_wake(sl__mpsc *q);

/* Any thread: true while the consumer sleeps in sl__mpsc_wait. A push or a
 * wake clears it before the consumer runs again. */
bool sl__mpsc_sleeping(const sl__mpsc *q);

/* Consumer thread, or any thread once producers and consumer have stopped:
 * the number of elements queued. */
size_t sl__mpsc_count(sl__mpsc *q);

/* Capacity after rounding. */
size_t sl__mpsc_capacity(const sl__mpsc *q);

const char *sl__queue_kind_name(sl__queue_kind kind);

#endif
