/* sluice comm — a pool of memory the other processes of this host can map
 * (docs/cluster.md, "Shared registers").
 *
 * A daemon allocates its job's host registers here, so that a collective
 * between daemons on one host reads its peers' registers where they lie
 * instead of copying them through the data plane (net_coll.c, the
 * "shared" all-reduce). The pool is an unnamed file on /dev/shm
 * (O_TMPFILE, mode 0600: nothing to remove when a process dies), as large
 * as the free room there, of which only what is allocated is reserved
 * (fallocate, after checking the free space: a full tmpfs fails the
 * allocation instead of raising SIGBUS at a later write). Another process
 * of the same user maps it read-only through /proc/PID/fd/FD, checking a
 * random 128-bit cookie in its header; a process that cannot (another
 * host, another PID namespace, a stricter ptrace policy) simply does not
 * share. Not installed. */
#ifndef SLUICE_COMM_SHM_POOL_H
#define SLUICE_COMM_SHM_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/core.h>

typedef struct sl__shm_pool sl__shm_pool;

/* A pool of at most max_bytes (0: as large as /dev/shm's free room).
 * SL_EIO with the reason when the file cannot be made (no /dev/shm, no
 * O_TMPFILE), SL_ENOMEM. */
sl_status sl__shm_pool_create(uint64_t max_bytes, sl__shm_pool **out);

/* Unmaps and closes it; mappings in other processes stay valid until they
 * unmap theirs. NULL is a no-op. */
void sl__shm_pool_destroy(sl__shm_pool *p);

/* bytes of zeroed memory, 64-byte aligned, reserved at once; NULL when the
 * pool or /dev/shm is full (the caller uses other memory). Not thread-safe:
 * one thread allocates (a job's registers are allocated as it is made). */
void *sl__shm_pool_alloc(sl__shm_pool *p, size_t bytes);

/* Where [ptr, ptr + bytes) lies in the pool: its offset from the pool's
 * start, or false when it is not wholly inside. */
bool sl__shm_pool_offset(const sl__shm_pool *p, const void *ptr, size_t bytes,
                         uint64_t *off);

/* How another process finds it: "PID FD BYTES COOKIE-HEX", NUL-terminated
 * in buf (SL__SHM_POOL_DESC_MAX bytes). */
#define SL__SHM_POOL_DESC_MAX 96
void sl__shm_pool_describe(const sl__shm_pool *p, char *buf, size_t n);

/* A read-only view of another process's pool. */
typedef struct sl__shm_view {
  const uint8_t *base;
  uint64_t bytes;
} sl__shm_view;

/* Maps the pool `desc` describes. SL_EINVAL for a malformed description,
 * SL_EIO with the reason when it cannot be opened or is not that pool
 * (owner, size or cookie differ); out is zeroed then. */
sl_status sl__shm_view_map(const char *desc, sl__shm_view *out);

void sl__shm_view_unmap(sl__shm_view *v);

#endif
