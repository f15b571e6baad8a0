/* libsluice-cuda.so's entry (tensor/cuda_module.h): the probe of the CUDA
 * runtime, the driver and NCCL, the table of the ops' CUDA kernels, and
 * the few libsluice functions the module's code calls, forwarded to the
 * host so that errors land in libsluice's per-thread message.
 *
 * A machine without a GPU or driver reports zero devices, never an error. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "box.h"
#include "core_int.h"
#include "cuda/fill.h"
#include "cuda_kernels.h"
#include "cuda_module.h"
#include "dev_coll.h"

/* ---- the host's functions -------------------------------------------- */

static const sl__cuda_host *host;

sl_status sl__fail(sl_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = host->failv(st, fmt, ap);
  va_end(ap);
  return st;
}

void sl__assert_fail(const char *expr, const char *file, int line) {
  host->assert_fail(expr, file, line);
}

sl_status sl__device_wrap(const sl__device_vtable *vt, void *ctx,
                          sl_device_type type, int index, const char *name,
                          sl__device **out) {
  return host->device_wrap(vt, ctx, type, index, name, out);
}

/* ---- the probe --------------------------------------------------------- */

static int device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky "no device" error */
    return 0;
  }
  return n;
}

static const char *format_version(int v, char *buf, size_t n) {
  snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

static const char *runtime_version(void) {
  static char buf[32];
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return NULL;
  return format_version(v, buf, sizeof buf);
}

static const char *driver_version(void) {
  static char buf[32];
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess || v == 0) return NULL;
  return format_version(v, buf, sizeof buf);
}

static const char *nccl_version(void) {
  static char buf[32];
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return NULL;
  /* NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH. */
  snprintf(buf, sizeof buf, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  return buf;
}

static sl_status device_info(int device, sl_cuda_device_info *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!out) return sl__fail(SL_EINVAL, "cuda device info: NULL output");
  int n = device_count();
  if (device < 0 || device >= n)
    return sl__fail(SL_EINVAL, "cuda:%d: the process sees %d CUDA device%s",
                    device, n, n == 1 ? "" : "s");
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return sl__fail(SL_ECUDA, "cuda:%d: cudaGetDeviceProperties: %s (%s)",
                    device, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->total_memory = p.totalGlobalMem;
  out->compute_major = p.major;
  out->compute_minor = p.minor;
  out->multiprocessors = p.multiProcessorCount;
  out->pci_domain = p.pciDomainID;
  out->pci_bus = p.pciBusID;
  out->pci_device = p.pciDeviceID;
  return SL_OK;
}

/* A pageable copy: cudaMemcpyAsync from pageable memory returns once the
 * bytes are staged (the runtime waits for the stream first), so src may be
 * freed on return. */
static sl_status upload(void *dst, const void *src, size_t bytes,
                        sl__stream *s) {
  if (bytes == 0) return SL_OK;
  cudaError_t e =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)s);
  if (e == cudaSuccess) return SL_OK;
  (void)cudaGetLastError();
  return sl__fail(SL_ECUDA, "cudaMemcpyAsync of %zu bytes to the device: %s",
                  bytes, cudaGetErrorString(e));
}

/* ---- the tables -------------------------------------------------------- */

static const sl__cuda_kernel_entry kernels[] = {
#define SL_OP(name) {#name, &sl__cuda_##name},
#include "ops_pointwise.def"
#include "ops_dense.def"
#undef SL_OP
};

static const sl__cuda_module cuda_module = {
    .size = sizeof(sl__cuda_module),
    .version = SLUICE_VERSION_STRING,
    .device_count = device_count,
    .runtime_version = runtime_version,
    .driver_version = driver_version,
    .nccl_version = nccl_version,
    .device_info = device_info,
    .device_open = sl__device_cuda_open,
    .box = sl__cuda_box,
    .upload = upload,
    .fill_f32 = sl__cuda_fill_f32,
    .add_f32 = sl__cuda_add_f32,
    .nccl = &sl__dev_coll_nccl_vtable,
    .kernels = kernels,
    .n_kernels = (int)(sizeof kernels / sizeof kernels[0]),
};

/* The one exported symbol (cuda/module.map). A host of another layout is
 * refused before any of its functions is called. */
__attribute__((visibility("default"))) const sl__cuda_module *
sluice_cuda_module_open(const sl__cuda_host *h) {
  if (!h || h->size != sizeof(sl__cuda_host) || !h->version ||
      strcmp(h->version, SLUICE_VERSION_STRING) != 0)
    return &cuda_module; /* libsluice compares versions and says which */
  host = h;
  return &cuda_module;
}
