/* Opening the CUDA backend module (cuda_module.h), and what libsluice asks
 * of it: device count, versions and device info (the public sl_build_*
 * calls) and opening a CUDA device.
 *
 * Where the module is looked for, first found wins:
 *   1. $SLUICE_CUDA_MODULE, a path, and then nowhere else;
 *   2. the folder of the file holding this code (libsluice.so, or the
 *      program when it links libsluice.a);
 *   3. the library folder sluice was configured to install to;
 *   4. the dynamic loader's own search (LD_LIBRARY_PATH, the program's
 *      run path, ld.so.cache).
 * A file that exists but does not load (a CUDA library it needs is
 * missing) stops the search with the loader's message. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_int.h"
#include "cuda_module.h"

#ifndef SLUICE_HAVE_CUDA
#define SLUICE_HAVE_CUDA 0
#endif
#ifndef SLUICE_MODULE_DIR
#define SLUICE_MODULE_DIR ""
#endif

static sl_status host_failv(sl_status st, const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return sl__fail(st, "%s", msg);
}

static const sl__cuda_host host = {
    .size = sizeof(sl__cuda_host),
    .version = SLUICE_VERSION_STRING,
    .failv = host_failv,
    .assert_fail = sl__assert_fail,
    .device_wrap = sl__device_wrap,
};

/* snprintf into a fixed buffer, truncating quietly: paths and messages
 * here are bounded by the buffers they end up in. */
static int put(char *dst, size_t cap, const char *fmt, ...) SL__PRINTF(3, 4);
static int put(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
  return n;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const sl__cuda_module *module;
static char module_path[PATH_MAX];
static char why[1024]; /* why it did not load */

/* Tries one path; true when the search should stop (loaded, or a file
 * that is there but failed). */
static bool try_path(const char *path, bool search, void **handle) {
  if (!search && access(path, F_OK) != 0) return false;
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (*handle) {
    put(module_path, sizeof module_path, "%s", path);
    return true;
  }
  const char *e = dlerror();
  /* On the loader's path, "FILE: cannot open shared object file" means
   * not there; any other failure is the module's own (a library it needs
   * is missing). */
  bool names_it = e && strncmp(e, path, strlen(path)) == 0;
  if (search && (!e || names_it)) return false;
  if (names_it)
    put(why, sizeof why, "%s", e);
  else
    put(why, sizeof why, "%s: %s", path, e ? e : "cannot be loaded");
  return true;
}

static void *find_module(char *looked, size_t cap) {
  void *h = NULL;
  const char *env = getenv("SLUICE_CUDA_MODULE");
  if (env && *env) {
    if (!try_path(env, false, &h))
      put(why, sizeof why, "SLUICE_CUDA_MODULE names %s, which does not exist",
          env);
    return h;
  }
  char dirs[2][PATH_MAX] = {"", SLUICE_MODULE_DIR};
  Dl_info info;
  if (dladdr((void *)&sl__cuda_module_get, &info) && info.dli_fname) {
    put(dirs[0], sizeof dirs[0], "%s", info.dli_fname);
    char *slash = strrchr(dirs[0], '/');
    if (slash)
      *slash = '\0';
    else
      dirs[0][0] = '\0';
  }
  size_t used = 0;
  for (int i = 0; i < 2; i++) {
    if (!dirs[i][0] || (i == 1 && strcmp(dirs[1], dirs[0]) == 0)) continue;
    char path[PATH_MAX + 32];
    put(path, sizeof path, "%s/%s", dirs[i], SL__CUDA_MODULE_FILE);
    used += (size_t)put(looked + used, used < cap ? cap - used : 0, "%s, ",
                        dirs[i]);
    if (used >= cap) used = cap - 1;
    if (try_path(path, false, &h)) return h;
  }
  put(looked + used, used < cap ? cap - used : 0, "the dynamic loader's path");
  if (try_path(SL__CUDA_MODULE_FILE, true, &h)) {
    /* The loader found it: record the file it opened. */
    Dl_info where;
    void *entry = dlsym(h, SL__CUDA_MODULE_ENTRY);
    if (entry && dladdr(entry, &where) && where.dli_fname)
      put(module_path, sizeof module_path, "%s", where.dli_fname);
  }
  return h;
}

static void open_module(void) {
  if (!SLUICE_HAVE_CUDA) {
    put(why, sizeof why,
        "this build of sluice has no CUDA (configured with "
        "SLUICE_CUDA=OFF or without nvcc)");
    return;
  }
  char looked[3 * PATH_MAX];
  void *h = find_module(looked, sizeof looked);
  if (!h) {
    if (!why[0])
      put(why, sizeof why,
          "the CUDA module " SL__CUDA_MODULE_FILE
          " was not found (looked in %s); install it next to "
          "libsluice or name it with SLUICE_CUDA_MODULE",
          looked);
    return;
  }
  sl__cuda_module_entry entry;
  *(void **)&entry = dlsym(h, SL__CUDA_MODULE_ENTRY);
  if (!entry) {
    put(why, sizeof why, "%s: no " SL__CUDA_MODULE_ENTRY, module_path);
    return;
  }
  sl_clear_error();
  const sl__cuda_module *m = entry(&host);
  if (!m) {
    put(why, sizeof why, "%s: %s", module_path, sl_last_error());
    return;
  }
  if (m->size != sizeof *m || !m->version ||
      strcmp(m->version, SLUICE_VERSION_STRING) != 0) {
    put(why, sizeof why,
        "%s is sluice %s's CUDA module, this is sluice %s: install the "
        "module built with this libsluice",
        module_path, m->version ? m->version : "(unknown)",
        SLUICE_VERSION_STRING);
    return;
  }
  module = m;
}

sl_status sl__cuda_module_get(const sl__cuda_module **out) {
  pthread_once(&once, open_module);
  *out = module;
  if (module) return SL_OK;
  return sl__fail(SL_EUNSUPPORTED, "cuda: %s", why);
}

const char *sl__cuda_module_path(void) { return module ? module_path : NULL; }

/* ---- what the public API and the device layer ask of it -------------- */

int sl__cuda_device_count(void) {
  const sl__cuda_module *m;
  return sl__cuda_module_get(&m) == SL_OK ? m->device_count() : 0;
}

bool sl_build_has_cuda(void) { return SLUICE_HAVE_CUDA; }
bool sl_build_has_nccl(void) { return SLUICE_HAVE_CUDA; }

sl_status sl_build_cuda_module(const char **path) {
  const sl__cuda_module *m;
  if (path) *path = NULL;
  sl_status st = sl__cuda_module_get(&m);
  if (st == SL_OK && path) *path = module_path;
  return st;
}

const char *sl_build_cuda_runtime_version(void) {
  const sl__cuda_module *m;
  return sl__cuda_module_get(&m) == SL_OK ? m->runtime_version() : NULL;
}

const char *sl_build_cuda_driver_version(void) {
  const sl__cuda_module *m;
  return sl__cuda_module_get(&m) == SL_OK ? m->driver_version() : NULL;
}

const char *sl_build_nccl_version(void) {
  const sl__cuda_module *m;
  return sl__cuda_module_get(&m) == SL_OK ? m->nccl_version() : NULL;
}

sl_status sl_build_cuda_device_info(int device, sl_cuda_device_info *out) {
  if (out) memset(out, 0, sizeof *out);
  const sl__cuda_module *m;
  sl_status st = sl__cuda_module_get(&m);
  if (st != SL_OK) return st;
  return m->device_info(device, out);
}

sl_status sl__device_cuda_open(int index, sl__device **out) {
  if (out) *out = NULL;
  const sl__cuda_module *m;
  sl_status st = sl__cuda_module_get(&m);
  if (st != SL_OK) return st;
  return m->device_open(index, out);
}
