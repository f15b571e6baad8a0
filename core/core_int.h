/* sluice core — the module interface shared by every folder of the library.
 * Not installed; code outside libsluice uses include/sluice/ only. */
#ifndef SLUICE_CORE_INT_H
#define SLUICE_CORE_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/core.h>

#if defined(__GNUC__)
#define SL__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SL__PRINTF(f, a)
#endif

/* ---- errors ------------------------------------------------------------ */

/* Records a formatted message as the thread's last error and returns st, so
 * failures read `return sl__fail(SL_EINVAL, "shape '%s': ...", s);`. The
 * public sl_set_error (core.h) under the name the library uses. */
#define sl__fail sl_set_error

/* Reads a caller's config struct (type `type`, first member `size_t size`)
 * into dst, this library's struct of `want` bytes: the fields the caller's
 * size covers, zero (each field's default) after them, so a struct built
 * against an older, smaller header still works. SL_EINVAL naming the type
 * (and `macro`, its initialiser) when the size is 0 (never initialised) or
 * larger than this library's (a newer header). core/config.c. */
sl_status sl__config_copy(void *dst, size_t want, const void *src,
                          const char *type, const char *macro);

/* Prefixes the thread's current error message with context ("op 'mm': ").
 * Returns st unchanged. The public sl_add_error_context. */
#define sl__fail_context sl_add_error_context

/* One cleanup label per function (NCCL's NCCLCHECKGOTO). */
#define SL_CHECK_GOTO(call, st, label)                                         \
  do {                                                                         \
    (st) = (call);                                                             \
    if ((st) != SL_OK) goto label;                                             \
  } while (0)

#define SL_CHECK(call)                                                         \
  do {                                                                         \
    sl_status sl__st = (call);                                                 \
    if (sl__st != SL_OK) return sl__st;                                        \
  } while (0)

/* For true invariants only: a failure is a bug in sluice, never bad input. */
void sl__assert_fail(const char *expr, const char *file, int line);
#define SL_ASSERT(e) ((e) ? (void)0 : sl__assert_fail(#e, __FILE__, __LINE__))

/* ---- logging ----------------------------------------------------------- */

void sl__log(sl_logging_level level, const char *file, int line,
             const char *fmt, ...) SL__PRINTF(4, 5);
#define SL_LOG(level, ...)                                                     \
  do {                                                                         \
    if ((level) >= sl_logging_get_level())                                     \
      sl__log((level), __FILE__, __LINE__, __VA_ARGS__);                       \
  } while (0)
#define SL_DEBUG(...) SL_LOG(SL_LOGGING_DEBUG, __VA_ARGS__)
#define SL_INFO(...) SL_LOG(SL_LOGGING_INFO, __VA_ARGS__)
#define SL_WARN(...) SL_LOG(SL_LOGGING_WARN, __VA_ARGS__)
#define SL_ERROR(...) SL_LOG(SL_LOGGING_ERROR, __VA_ARGS__)

/* ---- allocation -------------------------------------------------------- */

/* malloc/calloc/realloc that record SL_ENOMEM with the size on failure and
 * return NULL; callers return SL_ENOMEM. sl__free(NULL) is a no-op. Sizes are
 * checked for overflow (n * size). */
void *sl__malloc(size_t size);
void *sl__calloc(size_t n, size_t size);
void *sl__realloc(void *p, size_t size);
void *sl__reallocarray(void *p, size_t n, size_t size);
/* A zeroed array whose start is aligned to `align` (a power of two, at
 * least sizeof(void *)), for objects that declare a larger alignment than
 * malloc's; freed by sl__free. */
void *sl__calloc_aligned(size_t n, size_t size, size_t align);
/* As sl__calloc_aligned for `size` bytes, not zeroed (large buffers about
 * to be overwritten whole). */
void *sl__malloc_aligned(size_t size, size_t align);
void sl__free(void *p);
char *sl__strdup(const char *s);

/* ---- environments ------------------------------------------------------ */

/* A copy of `base` (NULL-ended "NAME=value" strings, e.g. environ) with the
 * n entries of `set` ("NAME=value") first and in place of any variable of
 * their names: the environment of a child's exec or of one dlopen, made
 * without writing the process's own (core/environ.c says why). Only the
 * array is new (sl__free it); its strings are base's and set's, which must
 * outlive it. NULL when out of memory. */
char **sl__env_with(char *const *base, const char *const *set, size_t n);

/* What threads writing different objects should not share, so that one
 * thread's stores do not move a line another thread keeps reading. */
#define SL__CACHE_LINE 64

/* Allocates a zeroed T into *ptr, returning SL_ENOMEM on failure. */
#define SL_NEW(ptr) (((ptr) = sl__calloc(1, sizeof *(ptr))) ? SL_OK : SL_ENOMEM)

/* ---- arenas ------------------------------------------------------------ */

/* A bump allocator for objects that live and die together (a graph, a plan).
 * Allocations are 16-byte aligned and zeroed; everything is freed at once by
 * sl__arena_destroy. */
typedef struct sl_arena sl_arena;

sl_status sl__arena_create(size_t block_size, sl_arena **out);
void sl__arena_destroy(sl_arena *a);
void *sl__arena_alloc(sl_arena *a, size_t size);
void *sl__arena_calloc(sl_arena *a, size_t n, size_t size);
char *sl__arena_strdup(sl_arena *a, const char *s);
size_t sl__arena_bytes_used(const sl_arena *a);

/* ---- small utilities --------------------------------------------------- */

/* Monotonic time in nanoseconds. */
uint64_t sl__now_ns(void);

/* Functions the CPU and the CUDA kernels share, so that both compute the
 * same bits from one definition (nvcc compiles them for host and device;
 * kernels/CMakeLists.txt turns off FMA contraction for the device). */
#ifdef __CUDACC__
#define SL__HD __host__ __device__
#else
#define SL__HD
#endif

/* SplitMix64: the counter-based mixer behind every seeded random stream. */
static inline SL__HD uint64_t sl__mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* A small sequential generator for tests and planners (not for ops: ops key
 * their randomness by (seed, global index) with sl__mix64). */
typedef struct sl_rng {
  uint64_t state;
} sl_rng;
static inline uint64_t sl__rng_next(sl_rng *r) {
  r->state += 0x9e3779b97f4a7c15ull;
  return sl__mix64(r->state);
}
/* Uniform in [0, n); n > 0. */
static inline uint64_t sl__rng_below(sl_rng *r, uint64_t n) {
  return sl__rng_next(r) % n;
}

#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
