/* bench_kernels_vs_torch: sluice's CUDA op kernels against PyTorch on the
 * same GPU, one kernel at a time, in one table (the targets: matmul
 * >= 0.95x PyTorch, memory-bound kernels >= 85% of the device's copy
 * bandwidth). docs/cuda.md, "Benchmarks on a GPU", has the commands.
 *
 * sluice's side calls each op through the registry as the conformance test
 * does (tests/kernels/test_cuda_conformance.c): sl__op_find(name), a kernel
 * context of whole tensors (local shard = global tensor, slices from 0, no
 * partial flags), sl__op_run_cuda on a stream of cuda:0 with a caching
 * allocator for the workspace. PyTorch's side (bench/peers/kernels_torch.py)
 * runs the same operation on the same shapes and dtypes, after sluice has
 * finished and given its memory back, so the two never share the GPU.
 *
 * Timing, the same on both sides: warm-up runs, then --iters runs, each one
 * preceded by a memset of a buffer at least twice the L2 cache (so every run
 * reads its inputs from device memory, as in a training step, and an
 * output that fits in L2 is not measured at L2 speed) and bracketed by two
 * CUDA events that time only the kernel. The table shows the median run.
 *
 * Rates: matmul TFLOP/s = 2 m n k / time; memory-bound GB/s (10^9 bytes) =
 * (bytes read + bytes written) / time, counted the same for both sides from
 * the op's inputs and outputs: softmax 8 bytes per element; layer_norm x
 * and y plus gamma, beta, mean and rstd; adam_update 28 bytes per parameter
 * (w, g, m, v read; w, m, v written — PyTorch's fused Adam updates in place,
 * the same traffic); add 12 bytes per element. The device's copy bandwidth
 * is sluice's cudaMemcpyAsync D2D of 1 GiB, counted as 2 GiB moved; "% copy"
 * is a kernel's GB/s over it.
 *
 * f32 matmuls are true f32 on both sides: sluice's cublasSgemm runs in
 * cuBLAS's default math mode (no TF32; kernels/cuda/matmul.cu), and the
 * peer sets torch.backends.cuda.matmul.allow_tf32 = False. bf16 matmuls
 * take bf16 operands, accumulate in f32 and write f32 (sluice:
 * cublasGemmEx with CUBLAS_COMPUTE_32F; PyTorch: torch.mm(a, b,
 * out_dtype=torch.float32), or a bf16 output where that does not exist,
 * which the notes then say).
 *
 * Before anything is timed, each sluice kernel's output is checked: no NaN
 * or Inf anywhere, and samples against a CPU recomputation in double
 * (matmul: 48 dot products, within a bound that a TF32 product would
 * exceed; softmax and layer_norm: 16 whole rows; adam_update, add and the
 * copy: 16 blocks of 256 elements, add and copy exactly). A failed check
 * prints the reason in place of the row's numbers, and the exit status is
 * 1; so is it when the peer fails (unless --no-torch). A missed target is
 * a result, not a failure.
 *
 * Without CUDA in the build, or without a GPU, it prints why and exits 0.
 *
 * Usage: bench_kernels_vs_torch [--iters N] [--warmup N] [--python PATH]
 *        [--no-torch] [--only TEXT] [--flush-mb N]   (--help) */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sluice/build.h>

#include "caching_alloc.h"
#include "core_int.h"
#include "device_iface.h"
#include "op.h"

#include "bench_util.h"

#ifndef KERNELS_TORCH_PEER
#define KERNELS_TORCH_PEER "bench/peers/kernels_torch.py"
#endif

#define PROG "bench_kernels_vs_torch"

enum {
  SAMPLES = 48,   /* matmul dot products checked */
  ROWS = 16,      /* softmax / layer_norm rows checked */
  BLOCKS = 16,    /* adam / add / copy blocks checked */
  BLOCK = 256,    /* elements per block */
  ADAM_STEP = 10, /* the kernel context's step (bias correction t = 11) */
  MAX_CASES = 32,
};

#define HOST_BYTES ((size_t)64 << 20) /* the pinned staging buffer */
#define MATMUL_TARGET 0.95            /* x PyTorch */
#define COPY_TARGET 0.85              /* of the D2D copy bandwidth */

/* ---- CUDA event timing ---------------------------------------------------
 * The device interface's events carry no timestamps (cudaEventDisableTiming,
 * the cheap kind the runtime needs), so the timing events come from the
 * CUDA runtime itself: CMake defines KVT_CUDART and links cudart in a CUDA
 * build. A build without CUDA never gets here (opening cuda:0 fails first),
 * so its versions of these only say so. */
#ifdef KVT_CUDART
#include <cuda_runtime_api.h>

typedef cudaEvent_t kvt_event;

static sl_status cu_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return SL_OK;
  (void)cudaGetLastError(); /* so a later, unrelated check does not see it */
  return sl__fail(SL_ECUDA, "%s: %s (%s)", what, cudaGetErrorString(e),
                  cudaGetErrorName(e));
}

static sl_status event_create(kvt_event *e) {
  return cu_check(cudaEventCreate(e), "cudaEventCreate");
}

static void event_destroy(kvt_event e) {
  if (e) cudaEventDestroy(e);
}

static sl_status event_record(kvt_event e, sl__stream *s) {
  /* An sl__stream * of the CUDA device is its cudaStream_t. */
  return cu_check(cudaEventRecord(e, (cudaStream_t)s), "cudaEventRecord");
}

static sl_status event_ms(kvt_event a, kvt_event b, double *ms) {
  float f = 0;
  SL_CHECK(cu_check(cudaEventElapsedTime(&f, a, b), "cudaEventElapsedTime"));
  *ms = f;
  return SL_OK;
}

/* The current device's L2 cache size in bytes (0 when unknown). */
static size_t device_l2_bytes(void) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v > 0 ? (size_t)v : 0;
}
#else
typedef void *kvt_event;

static sl_status no_cudart(void) {
  return sl__fail(SL_EUNSUPPORTED, "this build has no CUDA runtime");
}
static sl_status event_create(kvt_event *e) {
  *e = NULL;
  return no_cudart();
}
static void event_destroy(kvt_event e) { (void)e; }
static sl_status event_record(kvt_event e, sl__stream *s) {
  (void)e;
  (void)s;
  return no_cudart();
}
static sl_status event_ms(kvt_event a, kvt_event b, double *ms) {
  (void)a;
  (void)b;
  *ms = NAN;
  return no_cudart();
}
static size_t device_l2_bytes(void) { return 0; }
#endif

/* ---- options ------------------------------------------------------------ */

typedef struct opts {
  int iters, warmup;
  const char *python;
  const char *only; /* run the kernels whose label contains it */
  int64_t flush_mb;
  bool no_torch;
} opts;

static const char usage[] =
    "usage: " PROG " [flags]\n"
    "sluice's CUDA kernels (matmul f32/bf16, softmax, layer_norm, "
    "adam_update,\nadd) against PyTorch on the same GPU; see the source's "
    "header and\ndocs/cuda.md, \"Benchmarks on a GPU\".\n"
    "  --iters N       timed runs per kernel [50]\n"
    "  --warmup N      untimed runs first [5]\n"
    "  --python PATH   the PyTorch peer's interpreter [/usr/bin/python3]\n"
    "  --no-torch      sluice only\n"
    "  --only TEXT     only the kernels whose label contains TEXT (the copy\n"
    "                  always runs)\n"
    "  --flush-mb N    the L2 flush buffer, at least 2x the L2 cache [256]\n";

/* 0: parsed; 1: --help; 2: bad flags (printed). */
static int opts_parse(int argc, char **argv, opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if (!strcmp(a, "--no-torch")) {
      o->no_torch = true;
    } else if ((!strcmp(a, "--iters") || !strcmp(a, "--warmup") ||
                !strcmp(a, "--flush-mb")) &&
               has_value) {
      char *end;
      errno = 0;
      long long v = strtoll(argv[++i], &end, 10);
      long long lo = !strcmp(a, "--warmup") ? 0 : 1;
      if (errno || *end || end == argv[i] || v < lo || v > 1000000) {
        fprintf(stderr, PROG ": %s: '%s' is not an integer in [%lld, 1e6]\n", a,
                argv[i], lo);
        return 2;
      }
      if (!strcmp(a, "--iters"))
        o->iters = (int)v;
      else if (!strcmp(a, "--warmup"))
        o->warmup = (int)v;
      else
        o->flush_mb = v;
    } else if (!strcmp(a, "--python") && has_value) {
      o->python = argv[++i];
    } else if (!strcmp(a, "--only") && has_value) {
      o->only = argv[++i];
    } else {
      fprintf(stderr, PROG ": unknown flag or missing value: '%s' (--help)\n",
              a);
      return 2;
    }
  }
  return 0;
}

/* ---- the kernels -------------------------------------------------------- */

typedef enum kind {
  K_COPY = 0,
  K_MATMUL,
  K_SOFTMAX,
  K_LAYER_NORM,
  K_ADAM,
  K_ADD,
} kind;

typedef struct bcase {
  char label[48];
  char shape[48];
  char spec[80]; /* the peer's name of the case (kernels_torch.py) */
  kind kind;
  sl_dtype dt;     /* matmul operands; f32 otherwise */
  int64_t m, n, k; /* matmul m, n, k; softmax/layer_norm rows m, cols n;
                      copy/adam/add n elements */
  bool ta, tb;
  double work; /* FLOP (matmul) or bytes read + written */
  /* sluice */
  bool ran, failed;
  double ms, ms_min;
  char why[256]; /* the failure */
  /* PyTorch */
  bool t_ran;
  double t_ms, t_min;
  char t_note[160];
} bcase;

static bool is_matmul(const bcase *c) { return c->kind == K_MATMUL; }

static bcase *case_add(bcase *cs, int *n, kind k, const char *label) {
  if (*n >= MAX_CASES) {
    fprintf(stderr, PROG ": too many cases\n");
    exit(1);
  }
  bcase *c = &cs[(*n)++];
  memset(c, 0, sizeof *c);
  c->kind = k;
  c->dt = SL_DTYPE_F32;
  c->ms = c->ms_min = c->t_ms = c->t_min = NAN;
  snprintf(c->label, sizeof c->label, "%s", label);
  return c;
}

static void add_matmul(bcase *cs, int *n, const char *what, sl_dtype dt,
                       int64_t m, int64_t nn, int64_t k, bool ta, bool tb) {
  char label[48];
  snprintf(label, sizeof label, "matmul %s %s", sl_dtype_name(dt), what);
  bcase *c = case_add(cs, n, K_MATMUL, label);
  c->dt = dt;
  c->m = m;
  c->n = nn;
  c->k = k;
  c->ta = ta;
  c->tb = tb;
  c->work = 2.0 * (double)m * (double)nn * (double)k;
  snprintf(c->shape, sizeof c->shape, "[%lld,%lld]%s x [%lld,%lld]%s",
           (long long)(ta ? k : m), (long long)(ta ? m : k), ta ? "^T" : "",
           (long long)(tb ? nn : k), (long long)(tb ? k : nn), tb ? "^T" : "");
  snprintf(c->spec, sizeof c->spec, "matmul:%s:%lld:%lld:%lld:%d:%d",
           sl_dtype_name(dt), (long long)m, (long long)nn, (long long)k,
           (int)ta, (int)tb);
}

/* The table's kernels: the list, with GPT-2 small's shapes (12
 * layers, hidden 768, 12 heads, vocab 50257, batch 8 x 1024 tokens). */
static int cases_default(bcase *cs) {
  int n = 0;
  const sl_dtype dts[2] = {SL_DTYPE_F32, SL_DTYPE_BF16};
  const int64_t tok = 8 * 1024, d = 768, vocab = 50257;
  for (int i = 0; i < 2; i++)
    add_matmul(cs, &n, "4096^3", dts[i], 4096, 4096, 4096, false, false);
  for (int i = 0; i < 2; i++) {
    add_matmul(cs, &n, "gpt2 qkv", dts[i], tok, 3 * d, d, false, false);
    add_matmul(cs, &n, "gpt2 fc1", dts[i], tok, 4 * d, d, false, false);
    add_matmul(cs, &n, "gpt2 fc2", dts[i], tok, d, 4 * d, false, false);
    /* fc1's weight gradient x^T dy, and the tied head x wte^T. */
    add_matmul(cs, &n, "gpt2 fc1 dW", dts[i], d, 4 * d, tok, true, false);
    add_matmul(cs, &n, "gpt2 head", dts[i], tok, vocab, d, false, true);
  }
  bcase *c = case_add(cs, &n, K_COPY, "copy D2D (cudaMemcpy)");
  c->n = (int64_t)1 << 28;
  c->work = 2.0 * (double)c->n * 4;
  snprintf(c->shape, sizeof c->shape, "1 GiB");
  snprintf(c->spec, sizeof c->spec, "copy:%lld", (long long)c->n);

  c = case_add(cs, &n, K_SOFTMAX, "softmax f32 (last axis)");
  c->m = 8 * 12 * 1024; /* batch x heads x queries */
  c->n = 1024;          /* keys */
  c->work = 2.0 * (double)c->m * (double)c->n * 4;
  snprintf(c->shape, sizeof c->shape, "[%lld,%lld]", (long long)c->m,
           (long long)c->n);
  snprintf(c->spec, sizeof c->spec, "softmax:%lld:%lld", (long long)c->m,
           (long long)c->n);

  c = case_add(cs, &n, K_LAYER_NORM, "layer_norm f32");
  c->m = tok;
  c->n = d;
  c->work = (2.0 * (double)c->m * (double)c->n + 2.0 * (double)c->n +
             2.0 * (double)c->m) *
            4;
  snprintf(c->shape, sizeof c->shape, "[%lld,%lld]", (long long)c->m,
           (long long)c->n);
  snprintf(c->spec, sizeof c->spec, "layer_norm:%lld:%lld", (long long)c->m,
           (long long)c->n);

  c = case_add(cs, &n, K_ADAM, "adam_update f32");
  c->n = 124439808; /* GPT-2 small's parameters (tied head) */
  c->work = 7.0 * (double)c->n * 4;
  snprintf(c->shape, sizeof c->shape, "[%lld] (GPT-2 small)", (long long)c->n);
  snprintf(c->spec, sizeof c->spec, "adam:%lld", (long long)c->n);

  c = case_add(cs, &n, K_ADD, "add f32");
  c->n = (int64_t)1 << 28;
  c->work = 3.0 * (double)c->n * 4;
  snprintf(c->shape, sizeof c->shape, "[%lld] + [%lld]", (long long)c->n,
           (long long)c->n);
  snprintf(c->spec, sizeof c->spec, "add:%lld", (long long)c->n);
  return n;
}

/* ---- inputs --------------------------------------------------------------
 * Input element i of input j of a case is a pure function of (case, j, i),
 * so the checks recompute any element without keeping the inputs. */

static float uniform_pm1(uint64_t seed, int64_t i) {
  uint64_t h = sl__mix64(sl__mix64(seed) ^ (uint64_t)i);
  /* 24 random bits: k / 2^23 - 1, exactly representable, in [-1, 1). */
  return (float)((double)(h >> 40) * 0x1.0p-23 - 1.0);
}

static float in_value(const bcase *c, int input, int64_t i) {
  uint64_t seed = 1000u * (uint64_t)c->kind + 17u * (uint64_t)input +
                  (uint64_t)(c->m ^ c->n ^ c->k);
  float x = uniform_pm1(seed, i);
  switch (c->kind) {
  case K_MATMUL:
    return c->dt == SL_DTYPE_BF16 ? sl_bf16_to_f32(sl_f32_to_bf16(x)) : x;
  case K_SOFTMAX: return 4.0f * x; /* logits in [-4, 4) */
  case K_LAYER_NORM:
    if (input == 1) return 1.0f + 0.5f * x; /* gamma */
    if (input == 2) return 0.5f * x;        /* beta */
    return 3.0f * x + 1.0f;                 /* rows off zero mean */
  case K_ADAM:
    if (input == 2) return 0.1f * x;              /* m */
    if (input == 3) return 1e-4f + 1e-2f * x * x; /* v > 0 */
    return x;                                     /* w, g */
  case K_COPY:
  case K_ADD: return x;
  }
  return x;
}

/* ---- the device --------------------------------------------------------- */

typedef struct gpu {
  sl__device *dev;
  sl__stream *s;
  sl__caching_alloc *mem;
  char *host; /* HOST_BYTES of pinned memory */
  void *flush;
  size_t flush_bytes;
  int n_ev;
  kvt_event *ev; /* 2 per timed run */
} gpu;

static void gpu_close(gpu *g) {
  if (!g->dev) return;
  for (int i = 0; i < g->n_ev; i++)
    event_destroy(g->ev[i]);
  free(g->ev);
  if (g->flush) sl__device_free(g->dev, g->flush);
  if (g->host) sl__device_host_free(g->dev, g->host);
  sl__caching_alloc_destroy(g->mem);
  sl__device_stream_destroy(g->dev, g->s);
  sl__device_close(g->dev);
  memset(g, 0, sizeof *g);
}

static sl_status gpu_setup(gpu *g, const opts *o) {
  SL_CHECK(sl__device_stream_create(g->dev, &g->s));
  SL_CHECK(
      sl__caching_alloc_create(sl__device_raw_memory(g->dev), NULL, &g->mem));
  SL_CHECK(sl__device_host_alloc(g->dev, HOST_BYTES, (void **)&g->host));
  size_t l2 = device_l2_bytes();
  g->flush_bytes = (size_t)o->flush_mb << 20;
  if (g->flush_bytes < 2 * l2) g->flush_bytes = 2 * l2;
  SL_CHECK(sl__device_alloc(g->dev, g->flush_bytes, &g->flush));
  g->ev = calloc((size_t)(2 * o->iters), sizeof *g->ev);
  if (!g->ev) return sl__fail(SL_ENOMEM, "out of memory");
  g->n_ev = 2 * o->iters;
  for (int i = 0; i < g->n_ev; i++)
    SL_CHECK(event_create(&g->ev[i]));
  return SL_OK;
}

static sl_status gpu_sync(gpu *g) {
  return sl__device_stream_synchronize(g->dev, g->s);
}

/* Device memory from the caching allocator, for the bench's stream. */
static sl_status dalloc(gpu *g, size_t bytes, void **out) {
  return sl__caching_alloc_alloc(g->mem, bytes, g->s, out);
}

/* Copies bytes at device address src to host dst and waits. */
static sl_status fetch(gpu *g, void *dst, const void *src, size_t bytes) {
  SL_CHECK(sl__device_memcpy_d2h(g->dev, g->host, src, bytes, g->s));
  SL_CHECK(gpu_sync(g));
  memcpy(dst, g->host, bytes);
  return SL_OK;
}

/* Writes input `input` of c (n elements of dtype dt) to device memory p. */
static sl_status fill_input(gpu *g, const bcase *c, int input, sl_dtype dt,
                            void *p, int64_t n) {
  size_t es = sl_dtype_size(dt);
  int64_t chunk = (int64_t)(HOST_BYTES / es);
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    int64_t cnt = SL_MIN(chunk, n - i0);
    if (dt == SL_DTYPE_BF16) {
      uint16_t *h = (uint16_t *)g->host;
      for (int64_t i = 0; i < cnt; i++)
        h[i] = sl_f32_to_bf16(in_value(c, input, i0 + i));
    } else {
      float *h = (float *)g->host;
      for (int64_t i = 0; i < cnt; i++)
        h[i] = in_value(c, input, i0 + i);
    }
    SL_CHECK(sl__device_memcpy_h2d(g->dev, (char *)p + (size_t)i0 * es, g->host,
                                   (size_t)cnt * es, g->s));
    SL_CHECK(gpu_sync(g)); /* the staging buffer is reused */
  }
  return SL_OK;
}

/* ---- one kernel's run ---------------------------------------------------- */

typedef struct rig {
  const sl__op_def *op; /* NULL: the copy */
  sl__attrs at;
  sl__kernel_ctx k;
  void *in[SL_OP_MAX_INPUTS], *out[SL_OP_MAX_OUTPUTS];
  size_t out_bytes[SL_OP_MAX_OUTPUTS];
  int n_in, n_out;
} rig;

static sl__meta meta2(sl_dtype dt, int64_t a, int64_t b) {
  sl__meta m;
  memset(&m, 0, sizeof m);
  m.dtype = dt;
  m.shape.ndim = 2;
  m.shape.dims[0] = a;
  m.shape.dims[1] = b;
  return m;
}

static sl__meta meta1(sl_dtype dt, int64_t a) {
  sl__meta m;
  memset(&m, 0, sizeof m);
  m.dtype = dt;
  m.shape.ndim = 1;
  m.shape.dims[0] = a;
  return m;
}

/* The whole tensor as its own shard. */
static sl_slice whole(const sl_shape *s) {
  sl_slice sl;
  memset(&sl, 0, sizeof sl);
  sl.ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++)
    sl.extent[d] = s->dims[d];
  return sl;
}

static void rig_close(gpu *g, rig *r) {
  for (int i = 0; i < SL_OP_MAX_INPUTS; i++)
    if (r->in[i]) sl__caching_alloc_free(g->mem, r->in[i]);
  for (int i = 0; i < SL_OP_MAX_OUTPUTS; i++)
    if (r->out[i]) sl__caching_alloc_free(g->mem, r->out[i]);
  memset(r->in, 0, sizeof r->in);
  memset(r->out, 0, sizeof r->out);
  /* Give the memory back before the next kernel (and the peer). */
  sl__caching_alloc_empty_cache(g->mem);
}

/* Builds the kernel context of c on whole tensors, with its inputs on the
 * device, as the conformance test's run_layout does for one rank of one. */
static sl_status rig_open(gpu *g, const bcase *c, rig *r) {
  memset(r, 0, sizeof *r);
  sl__meta in[SL_OP_MAX_INPUTS], out[SL_OP_MAX_OUTPUTS];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  const char *name = NULL;
  switch (c->kind) {
  case K_COPY:
    r->n_in = r->n_out = 1;
    in[0] = out[0] = meta1(SL_DTYPE_F32, c->n);
    break;
  case K_MATMUL:
    name = "matmul";
    r->n_in = 2;
    in[0] = c->ta ? meta2(c->dt, c->k, c->m) : meta2(c->dt, c->m, c->k);
    in[1] = c->tb ? meta2(c->dt, c->n, c->k) : meta2(c->dt, c->k, c->n);
    SL_CHECK(sl__attrs_set_int(&r->at, "trans_a", c->ta));
    SL_CHECK(sl__attrs_set_int(&r->at, "trans_b", c->tb));
    break;
  case K_SOFTMAX:
    name = "softmax";
    r->n_in = 1;
    in[0] = meta2(SL_DTYPE_F32, c->m, c->n);
    SL_CHECK(sl__attrs_set_int(&r->at, "axis", -1));
    break;
  case K_LAYER_NORM:
    name = "layer_norm";
    r->n_in = 3;
    in[0] = meta2(SL_DTYPE_F32, c->m, c->n);
    in[1] = in[2] = meta1(SL_DTYPE_F32, c->n);
    SL_CHECK(sl__attrs_set_float(&r->at, "eps", 1e-5));
    break;
  case K_ADAM:
    name = "adam_update";
    r->n_in = 4;
    for (int i = 0; i < 4; i++)
      in[i] = meta1(SL_DTYPE_F32, c->n);
    SL_CHECK(sl__attrs_set_float(&r->at, "lr", 1e-3));
    SL_CHECK(sl__attrs_set_float(&r->at, "beta1", 0.9));
    SL_CHECK(sl__attrs_set_float(&r->at, "beta2", 0.999));
    SL_CHECK(sl__attrs_set_float(&r->at, "eps", 1e-8));
    break;
  case K_ADD:
    name = "add";
    r->n_in = 2;
    in[0] = in[1] = meta1(SL_DTYPE_F32, c->n);
    break;
  }
  if (name) {
    r->op = sl__op_find(name);
    if (!r->op)
      return sl__fail(SL_ENOTFOUND, "no op '%s' in the registry", name);
    if (!sl__op_cuda(r->op) && !r->op->cuda_from_host)
      return sl__fail(SL_EUNSUPPORTED, "op '%s' has no CUDA kernel", name);
    SL_CHECK(r->op->infer(&r->at, r->n_in, in, out));
    r->n_out = r->op->n_out;
  }
  /* What the checks read: f32 outputs of the expected shapes. */
  int64_t want0 = c->kind == K_MATMUL ? c->m * c->n
                  : c->kind == K_SOFTMAX || c->kind == K_LAYER_NORM
                      ? c->m * c->n
                      : c->n;
  if (out[0].dtype != SL_DTYPE_F32 || sl_shape_numel(&out[0].shape) != want0)
    return sl__fail(SL_EINTERNAL,
                    "%s: output 0 is %s of %lld elements, want "
                    "f32 of %lld",
                    c->label, sl_dtype_name(out[0].dtype),
                    (long long)sl_shape_numel(&out[0].shape), (long long)want0);
  sl__kernel_ctx *k = &r->k;
  k->attrs = &r->at;
  k->n_in = r->n_in;
  k->n_out = r->n_out;
  k->step = c->kind == K_ADAM ? ADAM_STEP : 0;
  for (int i = 0; i < r->n_in; i++) {
    size_t bytes =
        (size_t)sl_shape_numel(&in[i].shape) * sl_dtype_size(in[i].dtype);
    SL_CHECK(dalloc(g, bytes, &r->in[i]));
    SL_CHECK(fill_input(g, c, i, in[i].dtype, r->in[i],
                        sl_shape_numel(&in[i].shape)));
    k->in[i] = r->in[i];
    k->in_meta[i] = in[i];
    k->in_slice[i] = whole(&in[i].shape);
    k->in_global[i] = in[i].shape;
  }
  for (int o = 0; o < r->n_out; o++) {
    r->out_bytes[o] =
        (size_t)sl_shape_numel(&out[o].shape) * sl_dtype_size(out[o].dtype);
    SL_CHECK(dalloc(g, r->out_bytes[o], &r->out[o]));
    /* NaN bytes, so an element the kernel does not write fails the check. */
    SL_CHECK(sl__device_memset(g->dev, r->out[o], 0xff, r->out_bytes[o], g->s));
    k->out[o] = r->out[o];
    k->out_meta[o] = out[o];
    k->out_slice[o] = whole(&out[o].shape);
    k->out_global[o] = out[o].shape;
  }
  return gpu_sync(g);
}

static sl_status rig_run(gpu *g, rig *r) {
  if (!r->op)
    return sl__device_memcpy_d2d(g->dev, r->out[0], r->in[0], r->out_bytes[0],
                                 g->s);
  return sl__op_run_cuda(r->op, &r->k, g->mem, g->s);
}

/* ---- the checks ------------------------------------------------------------
 * Each returns SL_OK or SL_EINTERNAL with what differs. */

static sl_status check_finite(gpu *g, const bcase *c, rig *r) {
  for (int o = 0; o < r->n_out; o++) {
    size_t n = r->out_bytes[o] / sizeof(float), chunk = HOST_BYTES / 4;
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
      size_t cnt = SL_MIN(chunk, n - i0);
      SL_CHECK(sl__device_memcpy_d2h(g->dev, g->host,
                                     (const float *)r->out[o] + i0,
                                     cnt * sizeof(float), g->s));
      SL_CHECK(gpu_sync(g));
      const float *h = (const float *)g->host;
      for (size_t i = 0; i < cnt; i++)
        if (!isfinite(h[i]))
          return sl__fail(SL_EINTERNAL, "%s: output %d element %zu is %g",
                          c->label, o, i0 + i, (double)h[i]);
    }
  }
  return SL_OK;
}

static bool close_to(double got, double want, double tol) {
  return fabs(got - want) <= tol; /* false for NaN */
}

static sl_status check_matmul(gpu *g, const bcase *c, rig *r) {
  sl_rng rng = {(uint64_t)c->m * 31u + (uint64_t)c->n};
  bool bf16 = c->dt == SL_DTYPE_BF16;
  /* cuBLAS's f32 sums differ from double by about sqrt(k) ulps of the
   * partial sums; TF32's 10-bit operands miss by about 2^-11 sqrt(k) of the
   * products' scale: 4e-6 of sum |a b| lies well between the two. */
  double rel = bf16 ? 1e-5 : 4e-6;
  for (int s = 0; s < SAMPLES; s++) {
    int64_t i, j;
    if (s < 4) { /* the corners */
      i = s & 1 ? c->m - 1 : 0;
      j = s & 2 ? c->n - 1 : 0;
    } else {
      i = (int64_t)sl__rng_below(&rng, (uint64_t)c->m);
      j = (int64_t)sl__rng_below(&rng, (uint64_t)c->n);
    }
    double want = 0, mag = 0;
    for (int64_t p = 0; p < c->k; p++) {
      double a = in_value(c, 0, c->ta ? p * c->m + i : i * c->k + p);
      double b = in_value(c, 1, c->tb ? j * c->k + p : p * c->n + j);
      want += a * b;
      mag += fabs(a * b);
    }
    float got;
    SL_CHECK(
        fetch(g, &got, (const float *)r->out[0] + (i * c->n + j), sizeof got));
    double tol = rel * mag + 1e-30;
    if (!close_to(got, want, tol))
      return sl__fail(SL_EINTERNAL,
                      "%s: out[%lld,%lld] = %.9g, want %.9g (tolerance %.3g%s)",
                      c->label, (long long)i, (long long)j, (double)got, want,
                      tol, bf16 ? "" : "; TF32, or a wrong kernel");
  }
  return SL_OK;
}

static int64_t sample_row(sl_rng *rng, const bcase *c, int s) {
  if (s == 0) return 0;
  if (s == 1) return c->m - 1;
  return (int64_t)sl__rng_below(rng, (uint64_t)c->m);
}

static sl_status check_softmax(gpu *g, const bcase *c, rig *r) {
  sl_rng rng = {7};
  float *row = malloc((size_t)c->n * sizeof *row);
  if (!row) return sl__fail(SL_ENOMEM, "out of memory");
  sl_status st = SL_OK;
  for (int s = 0; s < ROWS && st == SL_OK; s++) {
    int64_t i = sample_row(&rng, c, s);
    st = fetch(g, row, (const float *)r->out[0] + i * c->n,
               (size_t)c->n * sizeof *row);
    if (st != SL_OK) break;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c->n; j++)
      mx = fmax(mx, in_value(c, 0, i * c->n + j));
    for (int64_t j = 0; j < c->n; j++)
      sum += exp(in_value(c, 0, i * c->n + j) - mx);
    for (int64_t j = 0; j < c->n; j++) {
      double want = exp(in_value(c, 0, i * c->n + j) - mx) / sum;
      if (!close_to(row[j], want, 5e-5 * want + 1e-12)) {
        st = sl__fail(SL_EINTERNAL, "%s: y[%lld,%lld] = %.9g, want %.9g",
                      c->label, (long long)i, (long long)j, (double)row[j],
                      want);
        break;
      }
    }
  }
  free(row);
  return st;
}

static sl_status check_layer_norm(gpu *g, const bcase *c, rig *r) {
  sl_rng rng = {11};
  float *row = malloc((size_t)c->n * sizeof *row);
  if (!row) return sl__fail(SL_ENOMEM, "out of memory");
  sl_status st = SL_OK;
  for (int s = 0; s < ROWS && st == SL_OK; s++) {
    int64_t i = sample_row(&rng, c, s);
    float mean_got, rstd_got;
    st = fetch(g, row, (const float *)r->out[0] + i * c->n,
               (size_t)c->n * sizeof *row);
    if (st == SL_OK)
      st = fetch(g, &mean_got, (const float *)r->out[1] + i, sizeof(float));
    if (st == SL_OK)
      st = fetch(g, &rstd_got, (const float *)r->out[2] + i, sizeof(float));
    if (st != SL_OK) break;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c->n; j++)
      mean += in_value(c, 0, i * c->n + j);
    mean /= (double)c->n;
    for (int64_t j = 0; j < c->n; j++) {
      double d = in_value(c, 0, i * c->n + j) - mean;
      var += d * d;
    }
    var /= (double)c->n; /* biased, as PyTorch */
    double rstd = 1.0 / sqrt(var + 1e-5);
    if (!close_to(mean_got, mean, 1e-5 * (1 + fabs(mean))) ||
        !close_to(rstd_got, rstd, 1e-5 * rstd)) {
      st = sl__fail(SL_EINTERNAL,
                    "%s: row %lld: mean %.9g rstd %.9g, want %.9g and %.9g",
                    c->label, (long long)i, (double)mean_got, (double)rstd_got,
                    mean, rstd);
      break;
    }
    for (int64_t j = 0; j < c->n; j++) {
      double want =
          (in_value(c, 0, i * c->n + j) - mean) * rstd * in_value(c, 1, j) +
          in_value(c, 2, j);
      if (!close_to(row[j], want, 2e-5 * (1 + fabs(want)))) {
        st = sl__fail(SL_EINTERNAL, "%s: y[%lld,%lld] = %.9g, want %.9g",
                      c->label, (long long)i, (long long)j, (double)row[j],
                      want);
        break;
      }
    }
  }
  free(row);
  return st;
}

/* Adam as optim.c states it (PyTorch's formulas), in double. */
static sl_status check_adam(gpu *g, const bcase *c, rig *r) {
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, t = ADAM_STEP + 1.0;
  sl_rng rng = {13};
  float got[3][BLOCK];
  for (int s = 0; s < BLOCKS; s++) {
    int64_t i0 = s == 0 ? 0
                 : s == 1
                     ? c->n - BLOCK
                     : (int64_t)sl__rng_below(&rng, (uint64_t)(c->n - BLOCK));
    for (int o = 0; o < 3; o++)
      SL_CHECK(fetch(g, got[o], (const float *)r->out[o] + i0, sizeof got[o]));
    for (int64_t e = 0; e < BLOCK; e++) {
      int64_t i = i0 + e;
      double w = in_value(c, 0, i), gr = in_value(c, 1, i),
             m = in_value(c, 2, i), v = in_value(c, 3, i);
      double m1 = m + (1 - b1) * (gr - m);
      double v1 = b2 * v + (1 - b2) * gr * gr;
      double upd =
          lr / (1 - pow(b1, t)) * m1 / (sqrt(v1) / sqrt(1 - pow(b2, t)) + eps);
      double w1 = w - upd;
      if (!close_to(got[1][e], m1, 1e-6 * (fabs(m) + fabs(gr)) + 1e-12) ||
          !close_to(got[2][e], v1, 1e-6 * (v + gr * gr) + 1e-12) ||
          !close_to(got[0][e], w1, 1e-6 * fabs(w) + 1e-4 * fabs(upd) + 1e-12))
        return sl__fail(SL_EINTERNAL,
                        "%s: element %lld: w, m, v = %.9g %.9g %.9g, want "
                        "%.9g %.9g %.9g",
                        c->label, (long long)i, (double)got[0][e],
                        (double)got[1][e], (double)got[2][e], w1, m1, v1);
    }
  }
  return SL_OK;
}

/* add and the copy: exact. */
static sl_status check_exact(gpu *g, const bcase *c, rig *r) {
  sl_rng rng = {17};
  float got[BLOCK];
  for (int s = 0; s < BLOCKS; s++) {
    int64_t i0 = s == 0 ? 0
                 : s == 1
                     ? c->n - BLOCK
                     : (int64_t)sl__rng_below(&rng, (uint64_t)(c->n - BLOCK));
    SL_CHECK(fetch(g, got, (const float *)r->out[0] + i0, sizeof got));
    for (int64_t e = 0; e < BLOCK; e++) {
      float a = in_value(c, 0, i0 + e);
      float want = c->kind == K_ADD ? a + in_value(c, 1, i0 + e) : a;
      if (got[e] != want)
        return sl__fail(SL_EINTERNAL, "%s: element %lld = %.9g, want %.9g",
                        c->label, (long long)(i0 + e), (double)got[e],
                        (double)want);
    }
  }
  return SL_OK;
}

static sl_status check(gpu *g, const bcase *c, rig *r) {
  SL_CHECK(check_finite(g, c, r));
  switch (c->kind) {
  case K_MATMUL: return check_matmul(g, c, r);
  case K_SOFTMAX: return check_softmax(g, c, r);
  case K_LAYER_NORM: return check_layer_norm(g, c, r);
  case K_ADAM: return check_adam(g, c, r);
  case K_COPY:
  case K_ADD: return check_exact(g, c, r);
  }
  return SL_OK;
}

/* ---- timing -------------------------------------------------------------- */

/* Pushes the inputs out of L2 (a memset bigger than it). */
static sl_status flush_l2(gpu *g, int i) {
  return sl__device_memset(g->dev, g->flush, i & 0xff, g->flush_bytes, g->s);
}

static sl_status time_case(gpu *g, const opts *o, bcase *c, rig *r) {
  for (int w = 0; w < o->warmup; w++) {
    SL_CHECK(flush_l2(g, w));
    SL_CHECK(rig_run(g, r));
  }
  for (int i = 0; i < o->iters; i++) {
    SL_CHECK(flush_l2(g, i));
    SL_CHECK(event_record(g->ev[2 * i], g->s));
    SL_CHECK(rig_run(g, r));
    SL_CHECK(event_record(g->ev[2 * i + 1], g->s));
  }
  SL_CHECK(gpu_sync(g));
  double *t = malloc((size_t)o->iters * sizeof *t);
  if (!t) return sl__fail(SL_ENOMEM, "out of memory");
  sl_status st = SL_OK;
  for (int i = 0; i < o->iters && st == SL_OK; i++)
    st = event_ms(g->ev[2 * i], g->ev[2 * i + 1], &t[i]);
  if (st == SL_OK) {
    c->ms = bench_median(t, o->iters);
    c->ms_min = t[0]; /* sorted by bench_median() */
    if (!(c->ms > 0))
      st = sl__fail(SL_EINTERNAL, "%s: measured %g ms", c->label, c->ms);
  }
  free(t);
  return st;
}

/* Builds, checks and times one kernel; a failure is recorded in c. */
static void run_case(gpu *g, const opts *o, bcase *c) {
  fprintf(stderr, PROG ": %s %s ...\n", c->label, c->shape);
  rig r;
  sl_status st = rig_open(g, c, &r);
  if (st == SL_OK) st = rig_run(g, &r);
  if (st == SL_OK) st = gpu_sync(g);
  if (st == SL_OK) st = check(g, c, &r);
  if (st == SL_OK) st = time_case(g, o, c, &r);
  if (st == SL_OK) {
    c->ran = true;
  } else {
    c->failed = true;
    snprintf(c->why, sizeof c->why, "%s: %s", sl_status_str(st),
             sl_last_error());
    /* The stream may hold the error; later kernels start clean. */
    (void)gpu_sync(g);
  }
  rig_close(g, &r);
}

/* ---- the PyTorch peer ------------------------------------------------------
 * Runs kernels_torch.py with one argument per case; it prints "info ..."
 * lines, then "result SPEC MEDIAN_MS MIN_MS NOTE..." per case (NOTE "ok",
 * possibly with a remark, or "FAILED: why"). */

static bcase *case_by_spec(bcase *cs, int n, const char *spec) {
  for (int i = 0; i < n; i++)
    if (!strcmp(cs[i].spec, spec)) return &cs[i];
  return NULL;
}

/* Parses one line of the peer's output into cs; prints info lines under
 * the header. */
static void peer_line(char *line, bcase *cs, int n) {
  line[strcspn(line, "\r\n")] = 0;
  if (!strncmp(line, "info ", 5)) {
    printf("  peer: %s\n", line + 5);
    return;
  }
  if (strncmp(line, "result ", 7) != 0) {
    printf("  peer says: %s\n", line);
    return;
  }
  char spec[96];
  int used = 0;
  if (sscanf(line + 7, "%95s %n", spec, &used) != 1) return;
  bcase *c = case_by_spec(cs, n, spec);
  if (!c) {
    printf("  peer: a result for an unknown case: %s\n", line);
    return;
  }
  char *p = line + 7 + used, *end;
  double med = strtod(p, &end);
  if (end == p) return;
  p = end;
  double mn = strtod(p, &end);
  if (end == p) return;
  p = end;
  while (*p == ' ')
    p++;
  snprintf(c->t_note, sizeof c->t_note, "%s", p);
  c->t_ms = med;
  c->t_min = mn;
  c->t_ran = !strncmp(p, "ok", 2) && med > 0;
}

/* Runs the peer on `device` ("cuda", or "cpu" to try it without a GPU).
 * false when it could not run or did not answer every case. */
static bool peer_run(const opts *o, const char *device, size_t flush_bytes,
                     bcase *cs, int n) {
  char iters[16], warmup[16], flush[32];
  snprintf(iters, sizeof iters, "%d", o->iters);
  snprintf(warmup, sizeof warmup, "%d", o->warmup);
  snprintf(flush, sizeof flush, "%zu", flush_bytes);
  const char *argv[16 + MAX_CASES];
  int a = 0;
  argv[a++] = o->python;
  argv[a++] = KERNELS_TORCH_PEER;
  argv[a++] = "--device";
  argv[a++] = device;
  argv[a++] = "--iters";
  argv[a++] = iters;
  argv[a++] = "--warmup";
  argv[a++] = warmup;
  argv[a++] = "--flush-bytes";
  argv[a++] = flush;
  for (int i = 0; i < n; i++)
    argv[a++] = cs[i].spec;
  argv[a] = NULL;
  bench_peer p;
  char why[256];
  if (!bench_peer_start(argv, &p, why, sizeof why)) {
    fprintf(stderr, PROG ": peer: %s\n", why);
    return false;
  }
  char line[1024];
  while (fgets(line, sizeof line, p.out))
    peer_line(line, cs, n);
  int status = bench_peer_wait(&p);
  bool ok = status == 0;
  if (!ok)
    printf("  peer: %s %s failed (exit status %d; its messages "
           "are above)\n",
           o->python, KERNELS_TORCH_PEER, status);
  for (int i = 0; i < n; i++)
    if (!cs[i].t_ran) ok = false;
  return ok;
}

/* ---- the table -------------------------------------------------------- */

static void rate_text(const bcase *c, double ms, char *buf, size_t size) {
  if (!(ms > 0)) {
    snprintf(buf, size, "-");
    return;
  }
  if (is_matmul(c))
    snprintf(buf, size, "%.1f TFLOP/s", c->work / (ms * 1e-3) / 1e12);
  else
    snprintf(buf, size, "%.0f GB/s", c->work / (ms * 1e-3) / 1e9);
}

static void ms_text(double ms, char *buf, size_t size) {
  if (ms > 0)
    snprintf(buf, size, "%.3f", ms);
  else
    snprintf(buf, size, "-");
}

/* Prints the table; returns how many targets were missed (*met: met). */
static int print_table(const bcase *cs, int n, const opts *o, int *met) {
  const bcase *copy = NULL;
  for (int i = 0; i < n; i++)
    if (cs[i].kind == K_COPY && cs[i].ran) copy = &cs[i];
  double copy_gbs = copy ? copy->work / (copy->ms * 1e-3) / 1e9 : NAN;
  printf("\n%-26s %-30s %9s %14s %9s %14s %8s %7s %-7s %s\n", "kernel", "shape",
         "sluice ms", "sluice rate", "torch ms", "torch rate", "x torch",
         "% copy", "target", "check");
  int missed = 0;
  *met = 0;
  for (int i = 0; i < n; i++) {
    const bcase *c = &cs[i];
    char sms[16], srate[32], tms[16], trate[32], ratio[16] = "-",
                                                 frac[16] = "-";
    const char *target = "-";
    ms_text(c->ran ? c->ms : NAN, sms, sizeof sms);
    rate_text(c, c->ran ? c->ms : NAN, srate, sizeof srate);
    ms_text(c->t_ran ? c->t_ms : NAN, tms, sizeof tms);
    rate_text(c, c->t_ran ? c->t_ms : NAN, trate, sizeof trate);
    double x = c->ran && c->t_ran ? c->t_ms / c->ms : NAN;
    if (x > 0) snprintf(ratio, sizeof ratio, "%.3f", x);
    double fr = NAN;
    if (!is_matmul(c) && c->ran && copy_gbs > 0) {
      fr = c->work / (c->ms * 1e-3) / 1e9 / copy_gbs;
      snprintf(frac, sizeof frac, "%.1f", 100 * fr);
    }
    if (c->kind == K_COPY) {
      target = "-";
    } else if (is_matmul(c) && x > 0) {
      target = x >= MATMUL_TARGET ? "ok" : "MISS";
    } else if (!is_matmul(c) && fr > 0) {
      target = fr >= COPY_TARGET ? "ok" : "MISS";
    }
    if (!strcmp(target, "ok")) (*met)++;
    if (!strcmp(target, "MISS")) missed++;
    printf("%-26s %-30s %9s %14s %9s %14s %8s %7s %-7s %s\n", c->label,
           c->shape, sms, srate, tms, trate, ratio, frac, target,
           c->failed ? "FAILED"
           : c->ran  ? "ok"
                     : "-");
  }
  printf("\n  sluice ms, torch ms: median of %d runs (CUDA events around the "
         "kernel alone,\n  the L2 cache flushed before each run). Rates: "
         "matmul 2mnk/time; others\n  (bytes read + bytes written)/time, "
         "the same byte count for both sides.\n",
         o->iters);
  printf("  x torch: PyTorch's time over sluice's (> 1: sluice is faster). "
         "%% copy: the\n  kernel's GB/s over the copy row's (the device's "
         "D2D bandwidth, %.0f GB/s).\n",
         copy_gbs);
  printf("  targets: matmul >= %.2fx PyTorch; memory-bound kernels >= %.0f%% "
         "of the copy\n  bandwidth (ok / MISS; - when not measured).\n",
         MATMUL_TARGET, 100 * COPY_TARGET);
  bool notes = false;
  for (int i = 0; i < n; i++) {
    const bcase *c = &cs[i];
    bool t_remark = c->t_note[0] && strcmp(c->t_note, "ok") != 0;
    if (!c->failed && !t_remark) continue;
    if (!notes) printf("\nnotes:\n");
    notes = true;
    if (c->failed) printf("  %s: sluice FAILED: %s\n", c->label, c->why);
    if (t_remark) printf("  %s: torch: %s\n", c->label, c->t_note);
  }
  return missed;
}

int main(int argc, char **argv) {
  opts o = {50, 5, "/usr/bin/python3", NULL, 256, false};
  switch (opts_parse(argc, argv, &o)) {
  case 1: return 0;
  case 2: return 2;
  default: break;
  }
  signal(SIGPIPE, SIG_IGN);
  gpu g;
  memset(&g, 0, sizeof g);
  if (sl__device_open(SL_DEVICE_CUDA, 0, &g.dev) != SL_OK) {
    printf(PROG ": skipped: %s\n", sl_last_error());
    return 0;
  }
  if (gpu_setup(&g, &o) != SL_OK) {
    fprintf(stderr, PROG ": %s\n", sl_last_error());
    gpu_close(&g);
    return 1;
  }
  bcase all[MAX_CASES], cs[MAX_CASES];
  int n_all = cases_default(all), n = 0;
  for (int i = 0; i < n_all; i++)
    if (all[i].kind == K_COPY || !o.only || strstr(all[i].label, o.only))
      cs[n++] = all[i];

  sl_cuda_device_info info;
  const char *rt = sl_build_cuda_runtime_version(),
             *drv = sl_build_cuda_driver_version();
  size_t l2 = device_l2_bytes();
  if (sl_build_cuda_device_info(0, &info) != SL_OK)
    snprintf(info.name, sizeof info.name, "? (%s)", sl_last_error());
  printf(PROG ": sluice's CUDA kernels vs PyTorch on %s (%s)\n", g.dev->name,
         info.name);
  printf("  %.1f GiB, compute capability %d.%d, %d SMs, L2 %.1f MiB; CUDA "
         "runtime %s, driver %s\n",
         (double)info.total_memory / (1 << 30), info.compute_major,
         info.compute_minor, info.multiprocessors, (double)l2 / (1 << 20),
         rt ? rt : "?", drv ? drv : "?");
  printf("  %d timed runs per kernel after %d warm-up, L2 flushed before each "
         "(%.0f MiB memset)\n",
         o.iters, o.warmup, (double)g.flush_bytes / (1 << 20));
  printf("  f32 matmuls: true f32 on both sides (sluice: cublasSgemm in "
         "cuBLAS's default math\n  mode, no TF32; torch: allow_tf32 = False), "
         "checked within a bound TF32 would exceed;\n  bf16 matmuls: bf16 "
         "operands, f32 accumulation, f32 output\n");
  const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
  if (tf32) printf("  NVIDIA_TF32_OVERRIDE=%s in the environment\n", tf32);
  printf("  targets: matmul >= %.2fx PyTorch; memory-bound >= %.0f%% of the "
         "device's D2D\n  copy bandwidth\n",
         MATMUL_TARGET, 100 * COPY_TARGET);
  fflush(stdout);

  for (int i = 0; i < n; i++)
    run_case(&g, &o, &cs[i]);
  size_t flush_bytes = g.flush_bytes;
  /* Everything back to the driver before PyTorch takes the GPU. */
  gpu_close(&g);

  bool peer_ok = true;
  if (!o.no_torch) {
    printf("\nPyTorch peer: %s %s\n", o.python, KERNELS_TORCH_PEER);
    peer_ok = peer_run(&o, "cuda", flush_bytes, cs, n);
  }
  int met = 0, missed = print_table(cs, n, &o, &met);
  int failed = 0;
  for (int i = 0; i < n; i++)
    if (cs[i].failed) failed++;
  printf("\ntargets: %d met, %d missed%s; %d kernel%s failed the output "
         "check\n",
         met, missed, o.no_torch ? " (PyTorch not run: --no-torch)" : "",
         failed, failed == 1 ? "" : "s");
  if (!peer_ok)
    printf(PROG ": the PyTorch peer did not measure every kernel (see "
                "above)\n");
  return failed || !peer_ok ? 1 : 0;
}
