/* sluice tensor — a caching allocator over a raw allocator (device memory,
 * pinned host memory, or anything with alloc/free). In short:
 *
 * - Sizes are rounded up to a granularity (512 bytes). Requests up to
 *   small_max (1 MiB) come from a small pool of 2 MiB segments; larger ones
 *   from a large pool, where requests below half of medium_segment (20 MiB)
 *   share segments of that size and bigger ones get a segment of their size
 *   rounded to 2 MiB. So a step that allocates the same sizes as the one
 *   before reuses its blocks and never calls the raw allocator (cudaMalloc
 *   synchronises the device; cudaHostAlloc is slower still).
 * - Each (stream, pool) has its own free lists: a block freed on a stream
 *   is handed out again only for that stream, whose order makes the reuse
 *   safe without synchronisation. Memory used on another stream must be
 *   synchronised with its owning stream before it is freed.
 * - Best fit: the smallest free block that fits (lowest address on ties),
 *   found through size-class bins; the rest of the block is split off when
 *   another request of the pool could use it. A freed block merges with
 *   free neighbours of its segment, so a segment whose blocks are all free
 *   is one block again.
 * - Segments are returned to the raw allocator only by empty_cache, by
 *   destroy, and when a raw allocation fails (or would pass `limit`): then
 *   the cached segments are released and the allocation retried once, and
 *   a large request falls back from a shared segment to its own size.
 * - free() of a pointer it did not hand out, or of one already freed, is
 *   SL_EINVAL with a message, never a crash. All calls are thread-safe (one
 *   mutex: an alloc/free pair is tens of nanoseconds uncontended, small
 *   next to the kernels that use the memory). */
#ifndef SLUICE_CACHING_ALLOC_H
#define SLUICE_CACHING_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device_iface.h"

/* ---- raw allocators ----------------------------------------------------- */

/* What the cache gets memory from. alloc never receives 0 bytes. */
typedef struct sl__raw_alloc_vtable {
  sl_status (*alloc)(void *ctx, size_t bytes, void **out);
  sl_status (*free)(void *ctx, void *p);
} sl__raw_alloc_vtable;

typedef struct sl__raw_allocator {
  const sl__raw_alloc_vtable *vt;
  void *ctx;
} sl__raw_allocator;

/* A device's memory (sl__device_alloc) and its pinned host memory
 * (sl__device_host_alloc) as raw allocators; d must outlive their users. */
sl__raw_allocator sl__device_raw_memory(sl__device *d);
sl__raw_allocator sl__device_raw_pinned(sl__device *d);

/* ---- the caching allocator ---------------------------------------------- */

/* Zero fields take the defaults in brackets. Sizes must be multiples of the
 * granularity, which must be a power of two; small_max <= small_segment;
 * medium_segment a multiple of large_round. */
typedef struct sl__caching_alloc_config {
  const char *name;      /* in messages ["caching allocator"] */
  size_t granularity;    /* block sizes are multiples of it [512] */
  size_t small_max;      /* requests up to it use the small pool [1 MiB] */
  size_t small_segment;  /* the small pool's segment size [2 MiB] */
  size_t large_round;    /* large segments are multiples of it [2 MiB] */
  size_t medium_segment; /* shared by large requests below half of it
                            [20 MiB] */
  size_t limit;          /* most bytes reserved at once [0: no limit] */
} sl__caching_alloc_config;

typedef struct sl__caching_alloc_stats {
  size_t allocated;      /* bytes in blocks handed out (rounded sizes, plus
                            tails too small to split off) */
  size_t requested;      /* bytes the live allocations asked for */
  size_t reserved;       /* bytes held from the raw allocator */
  size_t peak_allocated; /* maxima since creation or reset_peaks */
  size_t peak_reserved;
  uint64_t allocs, frees;         /* successful alloc / free calls */
  uint64_t raw_allocs, raw_frees; /* successful raw allocator calls */
  uint64_t raw_failures;          /* failed raw allocations (limit included) */
  uint64_t cache_flushes;         /* allocations that released the cache to
                                     retry */
  uint64_t splits, merges;
  size_t segments;    /* raw allocations held */
  size_t live_blocks; /* allocated blocks */
  size_t free_blocks; /* cached blocks */
} sl__caching_alloc_stats;

typedef struct sl__caching_alloc sl__caching_alloc;

/* Creates an allocator over raw (whose table and ctx must outlive it).
 * cfg may be NULL. SL_EINVAL for an inconsistent config, SL_ENOMEM. */
sl_status sl__caching_alloc_create(sl__raw_allocator raw,
                                   const sl__caching_alloc_config *cfg,
                                   sl__caching_alloc **out);
/* Returns every segment to the raw allocator, live blocks included (a
 * warning is logged when any are left). NULL is a no-op. */
void sl__caching_alloc_destroy(sl__caching_alloc *a);

/* A block of at least `bytes` bytes (0 gives one granule) for use on
 * `stream` (any key; NULL is a stream too), aligned to the granularity
 * relative to the raw allocator's alignment. SL_ENOMEM when the size cannot
 * be represented or the limit is reached; otherwise the raw allocator's
 * status (SL_ENOMEM, SL_ECUDA) with its message and the allocator's state.
 * *out is NULL on failure. */
sl_status sl__caching_alloc_alloc(sl__caching_alloc *a, size_t bytes,
                                  const void *stream, void **out);
/* Returns a block to its stream's cache. NULL is a no-op. SL_EINVAL for a
 * pointer this allocator did not hand out or already took back. */
sl_status sl__caching_alloc_free(sl__caching_alloc *a, void *p);
/* The usable size of a live block (its rounded size). SL_EINVAL as free. */
sl_status sl__caching_alloc_block_size(sl__caching_alloc *a, const void *p,
                                       size_t *out);

/* Releases every segment with nothing allocated in it. Returns the first
 * raw free error (that segment stays held), SL_OK otherwise. */
sl_status sl__caching_alloc_empty_cache(sl__caching_alloc *a);

void sl__caching_alloc_get_stats(sl__caching_alloc *a,
                                 sl__caching_alloc_stats *out);
/* Sets the peaks to the current values. */
void sl__caching_alloc_reset_peaks(sl__caching_alloc *a);

/* Verifies the internal invariants (every segment tiled by its blocks, no
 * two free neighbours, free lists and the pointer index consistent with the
 * blocks, statistics equal to what the blocks add up to). SL_EINTERNAL with
 * the first violation. For tests; O(blocks). */
sl_status sl__caching_alloc_check(sl__caching_alloc *a);

#endif
