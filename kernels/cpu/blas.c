/* The BLAS behind CPU matmul: OpenBLAS, opened with dlopen on first use so
 * that sluice picks its kernel set before OpenBLAS's load-time CPU probe
 * runs, or sluice's C sgemm when no OpenBLAS can be opened.
 *
 * Why not link OpenBLAS: a DYNAMIC_ARCH OpenBLAS reads OPENBLAS_CORETYPE
 * once, in its constructor. Linked, it loads before any sluice code runs;
 * opened here, sluice can set the variable first. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sluice/build.h>

#include "core_thread.h"
#include "cpu/blas.h"

extern char **environ; /* POSIX: the program may assign it */

/* CBLAS enum values, fixed by the CBLAS standard (cblas.h), so sluice needs
 * no BLAS header at build time. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* OpenBLAS's LP64 interface (Debian's libopenblas0): int sizes. */
typedef void (*cblas_sgemm_fn)(int order, int trans_a, int trans_b, int m,
                               int n, int k, float alpha, const float *a,
                               int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
/* OpenBLAS's bf16 gemm (built with BUILD_BFLOAT16): bf16 bits in, f32 out. */
typedef void (*cblas_sbgemm_fn)(int order, int trans_a, int trans_b, int m,
                                int n, int k, float alpha, const uint16_t *a,
                                int lda, const uint16_t *b, int ldb, float beta,
                                float *c, int ldc);

/* Tried in order when SLUICE_BLAS_LIBRARY is not set. The first is
 * whichever variant the system's alternatives point at; then Debian's
 * variants by path (pthread first: it is the one libopenblas-dev pulls in),
 * then other distributions' names (Fedora: p = pthread, o = OpenMP). */
static const char *const default_libraries[] = {
    "libopenblas.so.0",
    SLUICE_MULTIARCH_LIBDIR "/openblas-pthread/libopenblas.so.0",
    SLUICE_MULTIARCH_LIBDIR "/openblas-serial/libopenblas.so.0",
    SLUICE_MULTIARCH_LIBDIR "/openblas-openmp/libopenblas.so.0",
    "libopenblasp.so.0",
    "libopenblaso.so.0",
    "libopenblas.so",
};

static struct {
  void *handle;
  cblas_sgemm_fn sgemm;
  cblas_sbgemm_fn sbgemm; /* NULL when the library has none */
  void (*set_threads)(int);
  char *(*get_corename)(void);
  char *(*get_config)(void);
  int (*get_threads)(void);
  const char *name;  /* "openblas" or "c" */
  char coretype[64]; /* as OpenBLAS names it; "" for the C sgemm */
  char reason[1024]; /* why the C sgemm runs */
  char describe[1536];
  atomic_int threads;
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Appends to a fixed buffer, truncating: the reason is a diagnostic. */
static void append(char *buf, size_t size, const char *fmt, ...)
    SL__PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, size - used, fmt, ap);
  va_end(ap);
}

static const char *env_nonempty(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* Resolves the symbols sluice uses; false (reason appended) when the
 * library is not an OpenBLAS with CBLAS. */
static bool resolve(void *handle, const char *libname) {
  void *sym[2];
  static const char *const names[2] = {"cblas_sgemm",
                                       "openblas_set_num_threads"};
  for (int i = 0; i < 2; i++) {
    dlerror();
    sym[i] = dlsym(handle, names[i]);
    if (!sym[i]) {
      const char *err = dlerror();
      append(g.reason, sizeof g.reason, "%s%s: %s", g.reason[0] ? "; " : "",
             libname, err ? err : names[i]);
      return false;
    }
  }
  cblas_sgemm_fn sgemm = (cblas_sgemm_fn)sym[0];
  void (*set_threads)(int) = (void (*)(int))sym[1];
  g.handle = handle;
  g.sgemm = sgemm;
  g.set_threads = set_threads;
  g.sbgemm = (cblas_sbgemm_fn)dlsym(handle, "cblas_sbgemm");
  /* Optional: only for reporting. */
  g.get_corename = (char *(*)(void))dlsym(handle, "openblas_get_corename");
  g.get_config = (char *(*)(void))dlsym(handle, "openblas_get_config");
  g.get_threads = (int (*)(void))dlsym(handle, "openblas_get_num_threads");
  return true;
}

/* An OpenBLAS the program already has: linked by the host program (its
 * symbols are global) or opened by someone under one of the usual names.
 * Its kernel set was fixed when it loaded; sluice uses it as it is. */
static void *find_loaded(const char *const *names, size_t count, char *path,
                         size_t path_size) {
  Dl_info info;
  void *sym = dlsym(RTLD_DEFAULT, "openblas_get_config");
  if (sym && dladdr(sym, &info) && info.dli_fname) {
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      snprintf(path, path_size, "%s", info.dli_fname);
      return h;
    }
  }
  for (size_t i = 0; i < count; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h) {
      snprintf(path, path_size, "%s", names[i]);
      return h;
    }
  }
  dlerror(); /* the misses are expected, not errors */
  return NULL;
}

/* The real file a handle's cblas_sgemm lives in, for the report. */
static void library_path(char *out, size_t size, const char *fallback) {
  Dl_info info;
  if (g.sgemm && dladdr((void *)g.sgemm, &info) && info.dli_fname)
    snprintf(out, size, "%s", info.dli_fname);
  else
    snprintf(out, size, "%s", fallback);
}

/* Records what runs. `ours` is false for a library the program loaded
 * before sluice: its kernel set and thread count are the program's, and a
 * library does not reconfigure its host's BLAS behind its back. */
static void finish_openblas(const char *how, const char *asked, bool ours) {
  char path[512];
  library_path(path, sizeof path, "?");
  const char *core = g.get_corename ? g.get_corename() : NULL;
  snprintf(g.coretype, sizeof g.coretype, "%s", core ? core : "unknown");
  const char *config = g.get_config ? g.get_config() : "OpenBLAS";
  if (ours) {
    /* sluice runs one thread per CPU device: BLAS threads on top of those
     * would oversubscribe the cores. */
    g.set_threads(1);
    atomic_store(&g.threads, 1);
  } else {
    atomic_store(&g.threads, g.get_threads ? g.get_threads() : 1);
  }
  snprintf(g.describe, sizeof g.describe,
           "openblas: %s, %s, kernels %s (%s), %d thread%s per call", config,
           path, g.coretype, how, atomic_load(&g.threads),
           atomic_load(&g.threads) == 1 ? "" : "s");
  /* OpenBLAS falls back to its own probe when it does not know the name
   * (a build without that kernel set); say so rather than claim it. */
  if (asked && strcasecmp(asked, g.coretype) != 0)
    append(g.describe, sizeof g.describe,
           "; asked for %s, OpenBLAS chose otherwise", asked);
  /* A kernel set narrower than the CPU (a host program's, or one asked for
   * through SLUICE_BLAS_CORETYPE) halves sgemm on AVX-512 machines: say so
   * once. */
  const char *best = sl__blas_coretype_choose(sl__cpu_features_get());
  if (best &&
      sl__blas_coretype_rank(g.coretype) < sl__blas_coretype_rank(best)) {
    append(g.describe, sizeof g.describe,
           "; this CPU can run %s kernels, which sluice chooses by itself "
           "when SLUICE_BLAS_CORETYPE is unset",
           best);
    SL_WARN("BLAS: OpenBLAS runs %s kernels (%s); this CPU can run the faster "
            "%s ones",
            g.coretype, how, best);
  }
  g.name = "openblas";
}

/* The instruction sets behind sl__blas_coretype_choose's answer. */
static const char *isa_name(const sl__cpu_features *f) {
  if (f->avx512_bf16) return "AVX-512 F/BW/DQ/VL and BF16";
  return f->avx512 ? "AVX-512 F/BW/DQ/VL" : "AVX2+FMA";
}

static void blas_init(void) {
  const char *const *names = default_libraries;
  size_t count = SL_ARRAY_LEN(default_libraries);
  const char *user_lib = env_nonempty("SLUICE_BLAS_LIBRARY");
  g.reason[0] = '\0';
  if (user_lib && strcmp(user_lib, "none") == 0) {
    snprintf(g.reason, sizeof g.reason, "SLUICE_BLAS_LIBRARY=none");
    goto fallback;
  }
  if (user_lib) {
    names = &user_lib;
    count = 1;
  }

  char path[512];
  void *loaded = find_loaded(names, count, path, sizeof path);
  if (loaded) {
    if (resolve(loaded, path)) {
      finish_openblas("already loaded by the program; sluice did not choose",
                      NULL, false);
      return;
    }
    dlclose(loaded);
  }

  /* Which kernel set to ask for. SLUICE_BLAS_CORETYPE (a name, or auto-off
   * to let OpenBLAS probe) is an explicit choice and wins. Otherwise cpuid
   * decides, and OPENBLAS_CORETYPE is honoured only when it is at least as
   * wide as what the CPU can run: environments that pin an old kernel set
   * (Haswell on AVX-512 machines is common) would halve every matmul, and
   * the CPU backend must get the fast path by itself. */
  const char *user_core = env_nonempty("OPENBLAS_CORETYPE");
  const char *sluice_core = env_nonempty("SLUICE_BLAS_CORETYPE");
  const sl__cpu_features *f = sl__cpu_features_get();
  const char *best = sl__blas_coretype_choose(f);
  const char *asked = NULL;
  char how[256];
  if (sluice_core && strcmp(sluice_core, "auto-off") == 0) {
    asked = user_core;
    snprintf(how, sizeof how, "%s: SLUICE_BLAS_CORETYPE=auto-off",
             user_core ? "OPENBLAS_CORETYPE" : "OpenBLAS's own probe");
  } else if (sluice_core) {
    asked = sluice_core;
    snprintf(how, sizeof how, "SLUICE_BLAS_CORETYPE=%s", sluice_core);
  } else if (user_core && (!best || sl__blas_coretype_rank(user_core) >=
                                        sl__blas_coretype_rank(best))) {
    asked = user_core;
    snprintf(how, sizeof how, "set in the environment: OPENBLAS_CORETYPE=%s",
             user_core);
  } else if (best) {
    asked = best;
    if (user_core)
      snprintf(how, sizeof how,
               "chosen by sluice from cpuid (%s) over the narrower "
               "OPENBLAS_CORETYPE=%s; SLUICE_BLAS_CORETYPE=auto-off keeps it",
               isa_name(f), user_core);
    else
      snprintf(how, sizeof how, "chosen by sluice from cpuid: %s", isa_name(f));
  } else {
    asked = user_core;
    snprintf(how, sizeof how, "%s: no choice from cpuid",
             user_core ? "OPENBLAS_CORETYPE" : "OpenBLAS's own probe");
  }

  /* OpenBLAS reads the variable in the constructor dlopen runs. The
   * program's environment is never written (setenv could free the array
   * another thread's getenv is walking: a crash seen in CI): `environ`
   * points at a copy with the variable replaced for the load, and back.
   * Neither array is freed, so a getenv elsewhere reads one or the other,
   * each whole; the copy and its entry stay for the process's life, as a
   * getenv that began on them may still be reading. A setenv by another
   * thread inside the window is lost, as any setenv racing another is. */
  static char core_entry[96];
  static char **load_env;
  const char *prev = getenv("OPENBLAS_CORETYPE");
  if (asked && !(prev && strcmp(prev, asked) == 0)) {
    snprintf(core_entry, sizeof core_entry, "OPENBLAS_CORETYPE=%s", asked);
    const char *set = core_entry;
    load_env = sl__env_with(environ, &set, 1);
    if (!load_env) {
      asked = prev;
      snprintf(how, sizeof how, "%s: no memory to set OPENBLAS_CORETYPE",
               prev ? "OPENBLAS_CORETYPE" : "OpenBLAS's own probe");
    }
  }
  char **saved_env = environ;
  if (load_env) environ = load_env;
  bool ok = false;
  for (size_t i = 0; i < count && !ok; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *err = dlerror();
      append(g.reason, sizeof g.reason, "%s%s", g.reason[0] ? "; " : "",
             err ? err : names[i]);
      continue;
    }
    ok = resolve(h, names[i]);
    if (!ok) dlclose(h);
  }
  environ = saved_env;
  if (ok) {
    finish_openblas(how, asked, true);
    return;
  }

fallback:
  g.name = "c";
  g.coretype[0] = '\0';
  atomic_store(&g.threads, 1);
  snprintf(g.describe, sizeof g.describe,
           "c: sluice's C sgemm (%s kernel, 1 thread); no OpenBLAS: %s",
           sl__sgemm_c_kernel_best()->name, g.reason);
  SL_WARN("BLAS: no OpenBLAS could be loaded (%s); CPU matmul runs sluice's "
          "C sgemm",
          g.reason);
}

sl_status sl__blas_load(void) {
  pthread_once(&g_once, blas_init);
  if (g.sgemm) return SL_OK;
  return sl__fail(SL_ENOTFOUND, "no OpenBLAS loaded, using the C sgemm: %s",
                  g.reason);
}

const char *sl__blas_name(void) {
  pthread_once(&g_once, blas_init);
  return g.name;
}

const char *sl__blas_describe(void) {
  pthread_once(&g_once, blas_init);
  return g.describe;
}

const char *sl__blas_coretype(void) {
  pthread_once(&g_once, blas_init);
  return g.sgemm ? g.coretype : NULL;
}

sl_status sl__blas_set_threads(int n) {
  if (n < 1 || n > 1024)
    return sl__fail(SL_EINVAL, "BLAS threads: %d is not in 1..1024", n);
  pthread_once(&g_once, blas_init);
  /* The C sgemm is single-threaded: parallelism comes from devices. */
  if (!g.sgemm) return SL_OK;
  g.set_threads(n);
  atomic_store(&g.threads, n);
  return SL_OK;
}

int sl__blas_get_threads(void) {
  pthread_once(&g_once, blas_init);
  return atomic_load(&g.threads);
}

sl_status sl__blas_sgemm_chunked(bool trans_a, bool trans_b, int64_t m,
                                 int64_t n, int64_t k, float alpha,
                                 const float *a, int64_t lda, const float *b,
                                 int64_t ldb, float beta, float *c, int64_t ldc,
                                 int64_t limit) {
  SL_CHECK(sl__sgemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc));
  if (limit < 1)
    return sl__fail(SL_EINVAL, "sgemm: chunk limit %lld < 1", (long long)limit);
  pthread_once(&g_once, blas_init);
  /* Zero sizes are done here, not left to the BLAS, so every backend gives
   * BLAS semantics: nothing for an empty C, C = beta * C for an empty sum. */
  if (m == 0 || n == 0) return SL_OK;
  if (k == 0 || alpha == 0.0f) {
    sl__sgemm_scale_c(m, n, beta, c, ldc);
    return SL_OK;
  }
  /* cblas takes int strides, which cannot be split; such matrices (a row
   * stride over 2^31 elements) take the C sgemm. */
  bool cblas = g.sgemm && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
  if (cblas) limit = SL_MIN(limit, (int64_t)INT_MAX);

  /* Split m, n and k into pieces of at most limit; sums over k pieces
   * accumulate, so beta applies to the first piece only. */
  for (int64_t i0 = 0; i0 < m; i0 += limit) {
    int64_t mi = SL_MIN(limit, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += limit) {
      int64_t nj = SL_MIN(limit, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += limit) {
        int64_t kp = SL_MIN(limit, k - p0);
        const float *ap = trans_a ? a + p0 * lda + i0 : a + i0 * lda + p0;
        const float *bp = trans_b ? b + j0 * ldb + p0 : b + p0 * ldb + j0;
        float *cp = c + i0 * ldc + j0;
        float bt = p0 == 0 ? beta : 1.0f;
        if (cblas) {
          g.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                  trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)mi, (int)nj,
                  (int)kp, alpha, ap, (int)lda, bp, (int)ldb, bt, cp, (int)ldc);
        } else {
          SL_CHECK(sl__sgemm_c(trans_a, trans_b, mi, nj, kp, alpha, ap, lda, bp,
                               ldb, bt, cp, ldc));
        }
      }
    }
  }
  return SL_OK;
}

sl_status sl__blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float beta, float *c,
                         int64_t ldc) {
  return sl__blas_sgemm_chunked(trans_a, trans_b, m, n, k, alpha, a, lda, b,
                                ldb, beta, c, ldc, INT64_MAX);
}

/* One member's columns or rows of a team sgemm or bgemm. */
typedef struct team_gemm {
  bool ta, tb, by_rows, bf16; /* bf16: A and B are bf16 (bgemm) */
  int64_t m, n, k, lda, ldb, ldc;
  int64_t blocks; /* of TEAM_GEMM_BLOCK rows or columns */
  float alpha, beta;
  const void *a, *b;
  float *c;
  _Atomic sl_status st; /* the first failure */
} team_gemm;

/* Parts are whole blocks of this many rows or columns (the last part also
 * takes the rows past the last whole block), so that each runs full
 * register tiles (AVX-512 kernels are 16 wide) and none is so thin that
 * OpenBLAS would take another path for it (a single row goes to gemv,
 * which sums in another order). */
#define TEAM_GEMM_BLOCK 16

/* Copies rows x cols floats between two row-major matrices. */
static void copy_rows(float *dst, int64_t ldd, const float *src, int64_t lds,
                      int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    memcpy(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(float));
}

/* A member's columns of C go through a buffer of its own: written in place,
 * every row of C is cut between the members, and the hardware prefetcher
 * of the core writing a row's first part pulls in lines of the next part,
 * which the other core is writing, once per pass of the gemm over C (one
 * per block of k). On the 2-vCPU machine, at times (when its two vCPUs sat
 * far apart, it seems), two threads each writing half the columns of a
 * 256 x 1024 (k = 1024) product took 1.30 and 1.54 ms in place, 1.25 and
 * 1.28 through buffers, copies included; at other times 1.27 both ways.
 * Parts of rows are whole rows: they write C in place. */
static void team_gemm_part(void *arg, int64_t begin, int64_t end, int part) {
  (void)part;
  team_gemm *tg = arg;
  int64_t lo = begin * TEAM_GEMM_BLOCK;
  int64_t side = tg->by_rows ? tg->m : tg->n;
  int64_t hi = end == tg->blocks ? side : end * TEAM_GEMM_BLOCK;
  size_t es = tg->bf16 ? sizeof(uint16_t) : sizeof(float);
  const char *a = tg->a, *b = tg->b;
  float *c = tg->c, *own = NULL;
  int64_t m = tg->m, n = tg->n, ldc = tg->ldc;
  if (tg->by_rows) {
    a += (size_t)(tg->ta ? lo : lo * tg->lda) * es;
    c += lo * tg->ldc;
    m = hi - lo;
  } else {
    b += (size_t)(tg->tb ? lo * tg->ldb : lo) * es;
    c += lo;
    n = hi - lo;
    if (n < tg->n) /* a part of the columns, not all of them */
      own = sl__thread_scratch(SL__SCRATCH_GEMM_PART,
                               (size_t)m * (size_t)n * sizeof(float));
    if (own) {
      if (tg->beta != 0.0f) copy_rows(own, n, c, tg->ldc, m, n);
      ldc = n;
    }
  }
  float *out = own ? own : c;
  sl_status st =
      tg->bf16
          ? sl__blas_bgemm(tg->ta, tg->tb, m, n, tg->k, tg->alpha,
                           (const uint16_t *)a, tg->lda, (const uint16_t *)b,
                           tg->ldb, tg->beta, out, ldc)
          : sl__blas_sgemm(tg->ta, tg->tb, m, n, tg->k, tg->alpha,
                           (const float *)a, tg->lda, (const float *)b, tg->ldb,
                           tg->beta, out, ldc);
  if (own && st == SL_OK) copy_rows(c, tg->ldc, own, n, m, n);
  sl_status ok = SL_OK;
  if (st != SL_OK) atomic_compare_exchange_strong(&tg->st, &ok, st);
}

/* A team product of either kind: cut when worth the threads. */
static sl_status team_gemm_run(sl__team *team, bool bf16, bool trans_a,
                               bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const void *a, int64_t lda,
                               const void *b, int64_t ldb, float beta, float *c,
                               int64_t ldc) {
  double fmas = (double)m * (double)n * (double)k;
  if (sl__team_size(team) == 1 || fmas < 2.0 * SL__BLAS_TEAM_MIN_FMAS)
    return bf16 ? sl__blas_bgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b,
                                 ldb, beta, c, ldc)
                : sl__blas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b,
                                 ldb, beta, c, ldc);
  SL_CHECK(sl__sgemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc));
  /* Cutting m shares out A and has every member pack all of B; cutting n
   * the reverse: cut the longer side, so that the shared operand is the
   * smaller one. */
  int64_t side = SL_MAX(m, n), other = SL_MIN(m, n);
  int64_t blocks = SL_MAX(side / TEAM_GEMM_BLOCK, 1);
  team_gemm tg = {.ta = trans_a,
                  .tb = trans_b,
                  .by_rows = m >= n,
                  .bf16 = bf16,
                  .m = m,
                  .n = n,
                  .k = k,
                  .lda = lda,
                  .ldb = ldb,
                  .ldc = ldc,
                  .blocks = blocks,
                  .alpha = alpha,
                  .beta = beta,
                  .a = a,
                  .b = b,
                  .c = c,
                  .st = SL_OK};
  double block_fmas = (double)TEAM_GEMM_BLOCK * (double)other * (double)k;
  int64_t grain = (int64_t)(SL__BLAS_TEAM_MIN_FMAS / block_fmas) + 1;
  sl__team_for(team, blocks, grain, team_gemm_part, &tg);
  sl_status st = atomic_load(&tg.st);
  if (st != SL_OK)
    return sl__fail(st, "%s on %d threads: a part failed: %s",
                    bf16 ? "bgemm" : "sgemm", sl__team_size(team),
                    st == SL_ENOMEM ? "out of memory for packing buffers"
                                    : sl_status_str(st));
  return SL_OK;
}

sl_status sl__blas_sgemm_team(sl__team *team, bool trans_a, bool trans_b,
                              int64_t m, int64_t n, int64_t k, float alpha,
                              const float *a, int64_t lda, const float *b,
                              int64_t ldb, float beta, float *c, int64_t ldc) {
  return team_gemm_run(team, false, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                       ldb, beta, c, ldc);
}

sl_status sl__blas_bgemm_team(sl__team *team, bool trans_a, bool trans_b,
                              int64_t m, int64_t n, int64_t k, float alpha,
                              const uint16_t *a, int64_t lda, const uint16_t *b,
                              int64_t ldb, float beta, float *c, int64_t ldc) {
  return team_gemm_run(team, true, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                       ldb, beta, c, ldc);
}

/* ---- bf16 gemm ---------------------------------------------------------- */

/* OpenBLAS kernel sets whose sbgemm runs vdpbf16ps; any other set's is
 * generic C, slower than widening for sgemm. */
static bool coretype_has_bf16(const char *core) {
  return strcasecmp(core, "Cooperlake") == 0 ||
         strcasecmp(core, "SapphireRapids") == 0;
}

static const char *g_bgemm;   /* sl__blas_bgemm_name's answer */
static bool g_bgemm_openblas; /* it is OpenBLAS's cblas_sbgemm */
static pthread_once_t g_bgemm_once = PTHREAD_ONCE_INIT;

/* sluice's own by default: as fast as OpenBLAS's (bench_matmul_dtype), and
 * each element's sum is the same whatever m and n are, so a product cut
 * over a team or split over devices gives the uncut product's bits;
 * OpenBLAS's sbgemm takes another kernel for small products, whose k
 * blocking differs. SLUICE_BGEMM=openblas asks for OpenBLAS's, off for
 * widening. */
static void bgemm_init(void) {
  pthread_once(&g_once, blas_init);
  const char *want = env_nonempty("SLUICE_BGEMM");
  if (want && strcmp(want, "off") != 0 && strcmp(want, "sluice") != 0 &&
      strcmp(want, "openblas") != 0) {
    SL_WARN("SLUICE_BGEMM=%s: want sluice, openblas or off; using sluice's",
            want);
    want = NULL;
  }
  if (want && strcmp(want, "off") == 0) return;
  if (!sl__bgemm_c_usable()) return;
  if (want && strcmp(want, "openblas") == 0) {
    g_bgemm_openblas = g.sbgemm && coretype_has_bf16(g.coretype);
    if (!g_bgemm_openblas)
      SL_WARN("SLUICE_BGEMM=openblas: %s; using sluice's bf16 gemm",
              !g.sbgemm ? "the loaded BLAS exports no cblas_sbgemm"
                        : "its kernel set has no vdpbf16ps sbgemm");
  }
  g_bgemm = g_bgemm_openblas ? "openblas sbgemm" : "sluice avx512bf16";
}

const char *sl__blas_bgemm_name(void) {
  pthread_once(&g_bgemm_once, bgemm_init);
  return g_bgemm;
}

sl_status sl__blas_bgemm(bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const uint16_t *a, int64_t lda,
                         const uint16_t *b, int64_t ldb, float beta, float *c,
                         int64_t ldc) {
  SL_CHECK(sl__sgemm_check(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc));
  if (!sl__blas_bgemm_name())
    return sl__fail(SL_EUNSUPPORTED, "bgemm: no bf16 gemm on this CPU (no "
                                     "AVX512_BF16, or SLUICE_BGEMM=off)");
  /* cblas takes int sizes; larger products take sluice's kernel, which
   * this CPU can run whenever a bf16 gemm was chosen at all. */
  bool fits = m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX &&
              ldb <= INT_MAX && ldc <= INT_MAX;
  if (g_bgemm_openblas && fits && m > 0 && n > 0 && k > 0 && alpha != 0.0f) {
    g.sbgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
             trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)m, (int)n, (int)k,
             alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return SL_OK;
  }
  return sl__bgemm_c(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                     ldc);
}

const char *sl_build_blas(void) {
  (void)sl__blas_load();
  return sl__blas_name();
}

static char g_detail[sizeof g.describe + 96];
static pthread_once_t g_detail_once = PTHREAD_ONCE_INIT;

static void detail_init(void) {
  const char *bgemm = sl__blas_bgemm_name();
  snprintf(g_detail, sizeof g_detail, "%s; bf16 gemm: %s", sl__blas_describe(),
           bgemm ? bgemm : "none, bf16 is widened for sgemm");
}

const char *sl_build_blas_detail(void) {
  pthread_once(&g_detail_once, detail_init);
  return g_detail;
}
