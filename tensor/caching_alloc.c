/* The caching allocator (caching_alloc.h has the policy). Structures:
 *
 *   pool     one per (stream, small|large): size-class bins of free blocks
 *            and the segments the pool owns;
 *   segment  one raw allocation, tiled by blocks in address order;
 *   block    a piece of a segment, allocated or free; free blocks sit in
 *            their pool's bin for their size;
 *   index    an open-addressing hash map from a block's address to the
 *            block, for free() and for telling foreign pointers apart.
 *
 * Block headers live outside the memory they describe (it may be device
 * memory the CPU cannot touch). Headers released by merges are kept on a
 * spare list, so a steady state of alloc/free calls no malloc either. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "caching_alloc.h"
#include "core_int.h"

#define NBINS 256
#define BITMAP_WORDS (NBINS / 64)

typedef struct pool pool;
typedef struct segment segment;
typedef struct block block;

struct block {
  uintptr_t addr;
  size_t size;
  block *prev, *next;   /* neighbours in the segment, address order */
  block *fprev, *fnext; /* the bin list, while free */
  segment *seg;
  size_t requested; /* while allocated: bytes asked for */
  int bin;          /* while free: its bin */
  bool allocated;
};

struct segment {
  uintptr_t base;
  size_t size;
  pool *pool;
  block *first; /* the block at base; merges never remove it */
  segment *prev, *next;
};

struct pool {
  const void *stream;
  bool small;
  block *bins[NBINS];
  uint64_t nonempty[BITMAP_WORDS]; /* bit i: bins[i] has a block */
  segment *segments;
  pool *next;
};

typedef struct ptr_index {
  uintptr_t *keys; /* 0: empty slot (no block starts at address 0) */
  block **vals;
  size_t cap; /* power of two */
  size_t n;
} ptr_index;

struct sl__caching_alloc {
  sl__raw_allocator raw;
  char name[64];
  size_t gran, small_max, small_segment, large_round, medium_segment, limit;
  pthread_mutex_t mu;
  pool *pools;
  ptr_index index;
  block *spare;
  sl__caching_alloc_stats st;
};

/* ---- helpers ------------------------------------------------------------ */

static const char *size_text(size_t bytes, char *buf, size_t n) {
  if (bytes >= ((size_t)1 << 30))
    snprintf(buf, n, "%.1f GiB", (double)bytes / (double)((size_t)1 << 30));
  else if (bytes >= ((size_t)1 << 20))
    snprintf(buf, n, "%.1f MiB", (double)bytes / (double)((size_t)1 << 20));
  else if (bytes >= 1024)
    snprintf(buf, n, "%.1f KiB", (double)bytes / 1024.0);
  else
    snprintf(buf, n, "%zu bytes", bytes);
  return buf;
}

/* Rounds up to a multiple of m (a power of two); false on overflow. */
static bool round_up(size_t x, size_t m, size_t *out) {
  if (x > SIZE_MAX - (m - 1)) return false;
  *out = (x + m - 1) & ~(m - 1);
  return true;
}

static int floor_log2(uint64_t x) { return 63 - __builtin_clzll(x); }

/* Size classes over units of the granularity: units 1..7 get a bin each,
 * and every power-of-two range above is cut into four (the two bits below
 * the leading one), so a bin's sizes differ by at most 25% and the bins
 * are ordered by size. 7 + 4 * 61 bins cover every 64-bit unit count. */
static int bin_of(const sl__caching_alloc *a, size_t size) {
  uint64_t u = size / a->gran;
  if (u < 8) return (int)u - 1;
  int msb = floor_log2(u);
  return 7 + (msb - 3) * 4 + (int)((u >> (msb - 2)) & 3);
}

static void bin_insert(sl__caching_alloc *a, pool *p, block *b) {
  int i = bin_of(a, b->size);
  b->bin = i;
  b->fprev = NULL;
  b->fnext = p->bins[i];
  if (p->bins[i]) p->bins[i]->fprev = b;
  p->bins[i] = b;
  p->nonempty[i / 64] |= (uint64_t)1 << (i % 64);
  a->st.free_blocks++;
}

static void bin_remove(sl__caching_alloc *a, pool *p, block *b) {
  int i = b->bin;
  if (b->fprev)
    b->fprev->fnext = b->fnext;
  else
    p->bins[i] = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  if (!p->bins[i]) p->nonempty[i / 64] &= ~((uint64_t)1 << (i % 64));
  b->fprev = b->fnext = NULL;
  b->bin = -1;
  a->st.free_blocks--;
}

/* The first non-empty bin at or after i, or -1. */
static int next_bin(const pool *p, int i) {
  for (int w = i / 64; w < BITMAP_WORDS; w++) {
    uint64_t bits = p->nonempty[w];
    if (w == i / 64) bits &= ~(uint64_t)0 << (i % 64);
    if (bits) return w * 64 + __builtin_ctzll(bits);
  }
  return -1;
}

/* Best fit: every block in a later bin is larger than every block of bin
 * i, so the smallest fitting block of the first bin that has one is the
 * smallest fitting block overall. */
static block *find_fit(const sl__caching_alloc *a, const pool *p, size_t size) {
  for (int i = next_bin(p, bin_of(a, size)); i >= 0; i = next_bin(p, i + 1)) {
    block *best = NULL;
    for (block *b = p->bins[i]; b; b = b->fnext)
      if (b->size >= size && (!best || b->size < best->size ||
                              (b->size == best->size && b->addr < best->addr)))
        best = b;
    if (best) return best;
  }
  return NULL;
}

/* ---- the address index --------------------------------------------------- */

static size_t slot_of(const ptr_index *ix, uintptr_t key) {
  return (size_t)sl__mix64((uint64_t)key) & (ix->cap - 1);
}

static block *index_get(const ptr_index *ix, uintptr_t key) {
  if (ix->cap == 0) return NULL;
  for (size_t i = slot_of(ix, key);; i = (i + 1) & (ix->cap - 1)) {
    if (ix->keys[i] == key) return ix->vals[i];
    if (ix->keys[i] == 0) return NULL;
  }
}

static void index_put_nogrow(ptr_index *ix, uintptr_t key, block *b) {
  size_t i = slot_of(ix, key);
  while (ix->keys[i] != 0 && ix->keys[i] != key)
    i = (i + 1) & (ix->cap - 1);
  if (ix->keys[i] == 0) ix->n++;
  ix->keys[i] = key;
  ix->vals[i] = b;
}

/* Keeps the load at most one half so probe sequences stay short. */
static sl_status index_put(ptr_index *ix, uintptr_t key, block *b) {
  if ((ix->n + 1) * 2 > ix->cap) {
    size_t cap = ix->cap ? ix->cap * 2 : 64;
    uintptr_t *keys = sl__calloc(cap, sizeof *keys);
    block **vals = sl__calloc(cap, sizeof *vals);
    if (!keys || !vals) {
      sl__free(keys);
      sl__free(vals);
      return SL_ENOMEM;
    }
    ptr_index grown = {.keys = keys, .vals = vals, .cap = cap, .n = 0};
    for (size_t i = 0; i < ix->cap; i++)
      if (ix->keys[i]) index_put_nogrow(&grown, ix->keys[i], ix->vals[i]);
    sl__free(ix->keys);
    sl__free(ix->vals);
    *ix = grown;
  }
  index_put_nogrow(ix, key, b);
  return SL_OK;
}

/* Linear probing with backward-shift deletion: later entries of the probe
 * run move into the hole, so no tombstones accumulate. */
static void index_del(ptr_index *ix, uintptr_t key) {
  size_t mask = ix->cap - 1;
  size_t i = slot_of(ix, key);
  while (ix->keys[i] != key) {
    if (ix->keys[i] == 0) return;
    i = (i + 1) & mask;
  }
  ix->keys[i] = 0;
  ix->n--;
  for (size_t j = (i + 1) & mask; ix->keys[j] != 0; j = (j + 1) & mask) {
    size_t home = slot_of(ix, ix->keys[j]);
    /* Entry j may fill hole i when its home is not in (i, j]. */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    ix->keys[i] = ix->keys[j];
    ix->vals[i] = ix->vals[j];
    ix->keys[j] = 0;
    i = j;
  }
}

/* ---- block headers --------------------------------------------------------
 */

static block *block_new(sl__caching_alloc *a) {
  block *b = a->spare;
  if (b)
    a->spare = b->next;
  else if (!(b = sl__malloc(sizeof *b)))
    return NULL;
  memset(b, 0, sizeof *b);
  b->bin = -1;
  return b;
}

static void block_release(sl__caching_alloc *a, block *b) {
  b->next = a->spare;
  a->spare = b;
}

/* ---- creation ------------------------------------------------------------ */

static bool pow2(size_t x) { return x && !(x & (x - 1)); }

sl_status sl__caching_alloc_create(sl__raw_allocator raw,
                                   const sl__caching_alloc_config *cfg,
                                   sl__caching_alloc **out) {
  if (out) *out = NULL;
  if (!out || !raw.vt || !raw.vt->alloc || !raw.vt->free)
    return sl__fail(SL_EINVAL, "caching allocator: missing raw allocator");
  sl__caching_alloc_config c = cfg ? *cfg : (sl__caching_alloc_config){0};
  const char *name = c.name ? c.name : "caching allocator";
  if (!c.granularity) c.granularity = 512;
  if (!c.small_max) c.small_max = (size_t)1 << 20;
  if (!c.small_segment) c.small_segment = (size_t)2 << 20;
  if (!c.large_round) c.large_round = (size_t)2 << 20;
  if (!c.medium_segment) c.medium_segment = (size_t)20 << 20;
  size_t g = c.granularity;
  if (!pow2(g) || c.small_max % g || c.small_segment % g || c.large_round % g ||
      c.small_max > c.small_segment || c.medium_segment % c.large_round)
    return sl__fail(SL_EINVAL,
                    "%s: bad config (granularity %zu must be a power of two "
                    "dividing small_max %zu, small_segment %zu and "
                    "large_round %zu; small_max <= small_segment; "
                    "medium_segment %zu a multiple of large_round)",
                    name, g, c.small_max, c.small_segment, c.large_round,
                    c.medium_segment);
  sl__caching_alloc *a;
  if (SL_NEW(a) != SL_OK) return SL_ENOMEM;
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    sl__free(a);
    return sl__fail(SL_EINTERNAL, "%s: pthread_mutex_init failed", name);
  }
  a->raw = raw;
  snprintf(a->name, sizeof a->name, "%s", name);
  a->gran = g;
  a->small_max = c.small_max;
  a->small_segment = c.small_segment;
  a->large_round = c.large_round;
  a->medium_segment = c.medium_segment;
  a->limit = c.limit;
  *out = a;
  return SL_OK;
}

/* ---- segments -------------------------------------------------------------
 */

static void segment_release(sl__caching_alloc *a, segment *s) {
  pool *p = s->pool;
  if (s->prev)
    s->prev->next = s->next;
  else
    p->segments = s->next;
  if (s->next) s->next->prev = s->prev;
  a->st.segments--;
  a->st.reserved -= s->size;
  sl__free(s);
}

/* Gives back a segment that is one free block. On a raw free error the
 * segment stays as it was. */
static sl_status segment_free(sl__caching_alloc *a, segment *s) {
  block *b = s->first;
  sl_status st = a->raw.vt->free(a->raw.ctx, (void *)s->base);
  if (st != SL_OK) return st;
  a->st.raw_frees++;
  bin_remove(a, s->pool, b);
  index_del(&a->index, b->addr);
  block_release(a, b);
  segment_release(a, s);
  return SL_OK;
}

static bool segment_idle(const segment *s) {
  return !s->first->allocated && s->first->size == s->size;
}

/* Releases every idle segment and counts them in *released (may be NULL);
 * the first raw error is returned, the other segments are still tried. */
static sl_status flush(sl__caching_alloc *a, size_t *released) {
  sl_status first = SL_OK;
  size_t n = 0;
  for (pool *p = a->pools; p; p = p->next) {
    segment *next;
    for (segment *s = p->segments; s; s = next) {
      next = s->next;
      if (!segment_idle(s)) continue;
      sl_status st = segment_free(a, s);
      if (st == SL_OK)
        n++;
      else if (first == SL_OK)
        first = st;
    }
  }
  if (released) *released = n;
  return first;
}

/* One raw allocation of `size` bytes as a new segment of p, with one free
 * block spanning it (not yet in a bin). */
static sl_status segment_new(sl__caching_alloc *a, pool *p, size_t size,
                             block **out) {
  if (a->limit &&
      (a->st.reserved > a->limit || size > a->limit - a->st.reserved)) {
    char l[32], r[32];
    a->st.raw_failures++;
    return sl__fail(SL_ENOMEM, "limit of %s reached (%s reserved)",
                    size_text(a->limit, l, sizeof l),
                    size_text(a->st.reserved, r, sizeof r));
  }
  segment *s = sl__calloc(1, sizeof *s);
  block *b = block_new(a);
  if (!s || !b) {
    sl__free(s);
    if (b) block_release(a, b);
    return SL_ENOMEM;
  }
  void *base = NULL;
  sl_status st = a->raw.vt->alloc(a->raw.ctx, size, &base);
  if (st == SL_OK && !base)
    st = sl__fail(SL_EINTERNAL, "raw allocator returned NULL for %zu bytes",
                  size);
  if (st == SL_OK && (st = index_put(&a->index, (uintptr_t)base, b)) != SL_OK)
    (void)a->raw.vt->free(a->raw.ctx, base);
  if (st != SL_OK) {
    a->st.raw_failures++;
    sl__free(s);
    block_release(a, b);
    return st;
  }
  a->st.raw_allocs++;
  s->base = (uintptr_t)base;
  s->size = size;
  s->pool = p;
  s->first = b;
  s->next = p->segments;
  if (p->segments) p->segments->prev = s;
  p->segments = s;
  b->addr = s->base;
  b->size = size;
  b->seg = s;
  a->st.segments++;
  a->st.reserved += size;
  if (a->st.reserved > a->st.peak_reserved)
    a->st.peak_reserved = a->st.reserved;
  *out = b;
  return SL_OK;
}

/* A new segment for a request of `size` that no free block fits. The
 * preferred size first; when that fails, release the cache and retry, then
 * fall back to the smallest segment the request can use. */
static sl_status grow(sl__caching_alloc *a, pool *p, size_t size, block **out) {
  size_t want, least;
  if (p->small) {
    want = least = a->small_segment;
  } else {
    if (!round_up(size, a->large_round, &least))
      return sl__fail(SL_ENOMEM, "size %zu cannot be represented", size);
    want = size < a->medium_segment / 2 ? a->medium_segment : least;
  }
  sl_status st = segment_new(a, p, want, out);
  if (st == SL_OK) return SL_OK;
  size_t released = 0;
  (void)flush(a, &released);
  if (released > 0) {
    a->st.cache_flushes++;
    st = segment_new(a, p, want, out);
    if (st == SL_OK) return SL_OK;
  }
  if (least < want) st = segment_new(a, p, least, out);
  return st;
}

static sl_status pool_get(sl__caching_alloc *a, const void *stream, bool small,
                          pool **out) {
  for (pool *p = a->pools; p; p = p->next)
    if (p->stream == stream && p->small == small) {
      *out = p;
      return SL_OK;
    }
  pool *p = sl__calloc(1, sizeof *p);
  if (!p) return SL_ENOMEM;
  p->stream = stream;
  p->small = small;
  p->next = a->pools;
  a->pools = p;
  *out = p;
  return SL_OK;
}

/* ---- alloc and free -------------------------------------------------------
 */

/* Takes free block b (not in a bin) for a request of `size` rounded bytes,
 * splitting off a tail another request of the pool could use. */
static sl_status take(sl__caching_alloc *a, pool *p, block *b, size_t size,
                      size_t requested) {
  size_t min_split = p->small ? a->gran : a->small_max + a->gran;
  if (b->size - size >= min_split) {
    block *t = block_new(a);
    if (!t) return SL_ENOMEM;
    t->addr = b->addr + size;
    t->size = b->size - size;
    t->seg = b->seg;
    if (index_put(&a->index, t->addr, t) != SL_OK) {
      block_release(a, t);
      return SL_ENOMEM;
    }
    t->prev = b;
    t->next = b->next;
    if (b->next) b->next->prev = t;
    b->next = t;
    b->size = size;
    bin_insert(a, p, t);
    a->st.splits++;
  }
  b->allocated = true;
  b->requested = requested;
  a->st.allocated += b->size;
  a->st.requested += requested;
  a->st.allocs++;
  a->st.live_blocks++;
  if (a->st.allocated > a->st.peak_allocated)
    a->st.peak_allocated = a->st.allocated;
  return SL_OK;
}

sl_status sl__caching_alloc_alloc(sl__caching_alloc *a, size_t bytes,
                                  const void *stream, void **out) {
  if (out) *out = NULL;
  if (!a || !out) return sl__fail(SL_EINVAL, "caching alloc: NULL argument");
  size_t size;
  if (!round_up(bytes ? bytes : 1, a->gran, &size))
    return sl__fail(SL_ENOMEM, "%s: %zu bytes cannot be represented", a->name,
                    bytes);
  bool small = size <= a->small_max;
  pthread_mutex_lock(&a->mu);
  pool *p;
  sl_status st = pool_get(a, stream, small, &p);
  block *b = NULL;
  if (st == SL_OK) {
    b = find_fit(a, p, size);
    if (b)
      bin_remove(a, p, b);
    else
      st = grow(a, p, size, &b);
  }
  if (st == SL_OK && (st = take(a, p, b, size, bytes)) != SL_OK)
    bin_insert(a, p, b);
  if (st == SL_OK) *out = (void *)b->addr;
  sl__caching_alloc_stats s = a->st;
  pthread_mutex_unlock(&a->mu);
  if (st != SL_OK) {
    char rq[32], rs[32], al[32];
    return sl__fail_context(st,
                            "%s: cannot allocate %s (%s reserved, %s "
                            "allocated): ",
                            a->name, size_text(bytes, rq, sizeof rq),
                            size_text(s.reserved, rs, sizeof rs),
                            size_text(s.allocated, al, sizeof al));
  }
  return SL_OK;
}

/* The live block at p, or NULL with the reason recorded. Lock held. */
static block *live_block(sl__caching_alloc *a, const void *p, const char *op,
                         sl_status *st) {
  block *b = index_get(&a->index, (uintptr_t)p);
  if (!b) {
    *st = sl__fail(SL_EINVAL,
                   "%s: %s of %p, which it did not allocate (a foreign "
                   "pointer, or one already freed)",
                   a->name, op, p);
    return NULL;
  }
  if (!b->allocated) {
    *st = sl__fail(SL_EINVAL,
                   "%s: %s of %p, which is already free (double "
                   "free)",
                   a->name, op, p);
    return NULL;
  }
  return b;
}

/* Absorbs n, b's next neighbour (out of any bin), into b. */
static void absorb(sl__caching_alloc *a, block *b, block *n) {
  index_del(&a->index, n->addr);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  block_release(a, n);
  a->st.merges++;
}

sl_status sl__caching_alloc_free(sl__caching_alloc *a, void *p) {
  if (!a) return sl__fail(SL_EINVAL, "caching free: NULL allocator");
  if (!p) return SL_OK;
  sl_status st = SL_OK;
  pthread_mutex_lock(&a->mu);
  block *b = live_block(a, p, "free", &st);
  if (b) {
    b->allocated = false;
    a->st.allocated -= b->size;
    a->st.requested -= b->requested;
    b->requested = 0;
    a->st.frees++;
    a->st.live_blocks--;
    pool *pl = b->seg->pool;
    if (b->next && !b->next->allocated) {
      block *n = b->next;
      bin_remove(a, pl, n);
      absorb(a, b, n);
    }
    if (b->prev && !b->prev->allocated) {
      block *prev = b->prev;
      bin_remove(a, pl, prev);
      absorb(a, prev, b);
      b = prev;
    }
    bin_insert(a, pl, b);
  }
  pthread_mutex_unlock(&a->mu);
  return st;
}

sl_status sl__caching_alloc_block_size(sl__caching_alloc *a, const void *p,
                                       size_t *out) {
  if (out) *out = 0;
  if (!a || !out)
    return sl__fail(SL_EINVAL, "caching block size: NULL argument");
  sl_status st = SL_OK;
  pthread_mutex_lock(&a->mu);
  block *b = live_block(a, p, "size query", &st);
  if (b) *out = b->size;
  pthread_mutex_unlock(&a->mu);
  return st;
}

sl_status sl__caching_alloc_empty_cache(sl__caching_alloc *a) {
  if (!a) return sl__fail(SL_EINVAL, "empty cache: NULL allocator");
  pthread_mutex_lock(&a->mu);
  sl_status st = flush(a, NULL);
  pthread_mutex_unlock(&a->mu);
  return st == SL_OK ? SL_OK
                     : sl__fail_context(st, "%s: empty cache: ", a->name);
}

void sl__caching_alloc_get_stats(sl__caching_alloc *a,
                                 sl__caching_alloc_stats *out) {
  pthread_mutex_lock(&a->mu);
  *out = a->st;
  pthread_mutex_unlock(&a->mu);
}

void sl__caching_alloc_reset_peaks(sl__caching_alloc *a) {
  pthread_mutex_lock(&a->mu);
  a->st.peak_allocated = a->st.allocated;
  a->st.peak_reserved = a->st.reserved;
  pthread_mutex_unlock(&a->mu);
}

void sl__caching_alloc_destroy(sl__caching_alloc *a) {
  if (!a) return;
  if (a->st.live_blocks)
    SL_WARN("%s: destroyed with %zu blocks (%zu bytes) still allocated",
            a->name, a->st.live_blocks, a->st.allocated);
  pool *pn;
  for (pool *p = a->pools; p; p = pn) {
    pn = p->next;
    segment *sn;
    for (segment *s = p->segments; s; s = sn) {
      sn = s->next;
      block *bn;
      for (block *b = s->first; b; b = bn) {
        bn = b->next;
        sl__free(b);
      }
      if (a->raw.vt->free(a->raw.ctx, (void *)s->base) != SL_OK)
        SL_WARN("%s: raw free of a segment failed: %s", a->name,
                sl_last_error());
      sl__free(s);
    }
    sl__free(p);
  }
  while (a->spare) {
    block *b = a->spare;
    a->spare = b->next;
    sl__free(b);
  }
  sl__free(a->index.keys);
  sl__free(a->index.vals);
  pthread_mutex_destroy(&a->mu);
  sl__free(a);
}

/* ---- invariants -----------------------------------------------------------
 */

#define BROKEN(...) (st = sl__fail(SL_EINTERNAL, __VA_ARGS__))

static sl_status check_locked(sl__caching_alloc *a) {
  sl_status st = SL_OK;
  size_t allocated = 0, requested = 0, reserved = 0, segments = 0;
  size_t live = 0, nfree = 0, binned = 0;
  for (pool *p = a->pools; p && st == SL_OK; p = p->next) {
    for (int i = 0; i < NBINS && st == SL_OK; i++) {
      bool bit = (p->nonempty[i / 64] >> (i % 64)) & 1;
      if (bit != (p->bins[i] != NULL))
        BROKEN("bin %d: bitmap says %d", i, (int)bit);
      for (block *b = p->bins[i]; b && st == SL_OK; b = b->fnext) {
        binned++;
        if (b->allocated || b->bin != i || bin_of(a, b->size) != i ||
            b->seg->pool != p || (b->fnext && b->fnext->fprev != b))
          BROKEN("block %#lx in bin %d of the wrong kind, bin or pool",
                 (unsigned long)b->addr, i);
      }
    }
    for (segment *s = p->segments; s && st == SL_OK; s = s->next) {
      segments++;
      reserved += s->size;
      uintptr_t at = s->base;
      block *prev = NULL;
      for (block *b = s->first; b && st == SL_OK; prev = b, b = b->next) {
        if (b->addr != at || b->prev != prev || b->seg != s || !b->size ||
            b->size % a->gran)
          BROKEN("segment %#lx: block %#lx does not continue the tiling",
                 (unsigned long)s->base, (unsigned long)b->addr);
        else if (index_get(&a->index, b->addr) != b)
          BROKEN("block %#lx missing from the index", (unsigned long)b->addr);
        else if (prev && !prev->allocated && !b->allocated)
          BROKEN("blocks %#lx and %#lx are free neighbours",
                 (unsigned long)prev->addr, (unsigned long)b->addr);
        at += b->size;
        if (b->allocated) {
          live++;
          allocated += b->size;
          requested += b->requested;
          if (b->requested > b->size) BROKEN("block smaller than its request");
        } else {
          nfree++;
          if (b->bin < 0)
            BROKEN("free block %#lx in no bin", (unsigned long)b->addr);
        }
      }
      if (st == SL_OK && at != s->base + s->size)
        BROKEN("segment %#lx: blocks cover %lu of %zu bytes",
               (unsigned long)s->base, (unsigned long)(at - s->base), s->size);
    }
  }
  if (st != SL_OK) return st;
  const sl__caching_alloc_stats *S = &a->st;
  if (binned != nfree || a->index.n != live + nfree)
    return BROKEN("%zu free blocks, %zu in bins, %zu indexed, %zu blocks",
                  nfree, binned, a->index.n, live + nfree);
  if (S->allocated != allocated || S->requested != requested ||
      S->reserved != reserved || S->segments != segments ||
      S->live_blocks != live || S->free_blocks != nfree)
    return BROKEN("stats disagree with the blocks: allocated %zu/%zu "
                  "requested %zu/%zu reserved %zu/%zu segments %zu/%zu live "
                  "%zu/%zu free %zu/%zu",
                  S->allocated, allocated, S->requested, requested, S->reserved,
                  reserved, S->segments, segments, S->live_blocks, live,
                  S->free_blocks, nfree);
  if (S->peak_allocated < S->allocated || S->peak_reserved < S->reserved ||
      S->allocated > S->reserved ||
      S->raw_allocs - S->raw_frees != (uint64_t)S->segments ||
      S->allocs - S->frees != (uint64_t)S->live_blocks)
    return BROKEN("stats inconsistent with themselves");
  if (a->limit && S->reserved > a->limit)
    return BROKEN("reserved %zu above the limit %zu", S->reserved, a->limit);
  return SL_OK;
}

sl_status sl__caching_alloc_check(sl__caching_alloc *a) {
  if (!a) return sl__fail(SL_EINVAL, "check: NULL allocator");
  pthread_mutex_lock(&a->mu);
  sl_status st = check_locked(a);
  pthread_mutex_unlock(&a->mu);
  if (st != SL_OK) return sl__fail_context(st, "%s: ", a->name);
  return SL_OK;
}

/* ---- device memory as raw allocators --------------------------------------
 */

static sl_status dev_alloc(void *ctx, size_t bytes, void **out) {
  return sl__device_alloc(ctx, bytes, out);
}
static sl_status dev_free(void *ctx, void *p) {
  return sl__device_free(ctx, p);
}
static sl_status pinned_alloc(void *ctx, size_t bytes, void **out) {
  return sl__device_host_alloc(ctx, bytes, out);
}
static sl_status pinned_free(void *ctx, void *p) {
  return sl__device_host_free(ctx, p);
}

static const sl__raw_alloc_vtable device_memory_vt = {dev_alloc, dev_free};
static const sl__raw_alloc_vtable device_pinned_vt = {pinned_alloc,
                                                      pinned_free};

sl__raw_allocator sl__device_raw_memory(sl__device *d) {
  return (sl__raw_allocator){.vt = &device_memory_vt, .ctx = d};
}

sl__raw_allocator sl__device_raw_pinned(sl__device *d) {
  return (sl__raw_allocator){.vt = &device_pinned_vt, .ctx = d};
}
