/* The NCCL backend of the device collectives, in the CUDA module
 * (tensor/cuda_module.h; dev_coll.c opens it through there): each entry
 * is one NCCL call. Every NCCL error becomes SL_ENCCL with the call,
 * ncclGetErrorString's text and ncclGetLastError's detail; nothing aborts.
 * Communicators are blocking (NCCL's default config), so a call has done
 * its part when it returns (a collective: queued on its stream). */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <string.h>

#include "dev_coll.h"

/* The element types and reductions are NCCL's own values. */
_Static_assert(SL__DEV_INT8 == (int)ncclInt8, "ncclInt8");
_Static_assert(SL__DEV_UINT8 == (int)ncclUint8, "ncclUint8");
_Static_assert(SL__DEV_INT32 == (int)ncclInt32, "ncclInt32");
_Static_assert(SL__DEV_INT64 == (int)ncclInt64, "ncclInt64");
_Static_assert(SL__DEV_FLOAT16 == (int)ncclFloat16, "ncclFloat16");
_Static_assert(SL__DEV_FLOAT32 == (int)ncclFloat32, "ncclFloat32");
_Static_assert(SL__DEV_FLOAT64 == (int)ncclFloat64, "ncclFloat64");
_Static_assert(SL__DEV_BFLOAT16 == (int)ncclBfloat16, "ncclBfloat16");
_Static_assert(SL__DEV_SUM == (int)ncclSum, "ncclSum");
_Static_assert(SL__DEV_PROD == (int)ncclProd, "ncclProd");
_Static_assert(SL__DEV_MAX == (int)ncclMax, "ncclMax");
_Static_assert(SL__DEV_MIN == (int)ncclMin, "ncclMin");
_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "unique id");
_Static_assert(NCCL_UNIQUE_ID_BYTES <= SL__DEV_COLL_ID_MAX, "unique id size");

static sl_status nccl_fail(ncclResult_t r, const char *call, ncclComm_t comm) {
  const char *last = ncclGetLastError(comm);
  return sl__fail(SL_ENCCL, "%s: %s%s%s", call, ncclGetErrorString(r),
                  last && last[0] ? ": " : "", last ? last : "");
}

/* fn names the NCCL function for the message. */
#define NCCL_CALL(fn, args, comm)                                              \
  do {                                                                         \
    ncclResult_t r_ = fn args;                                                 \
    if (r_ != ncclSuccess) return nccl_fail(r_, #fn, (comm));                  \
  } while (0)

static sl_status cuda_fail(cudaError_t e, const char *call, int device) {
  (void)cudaGetLastError(); /* do not report it again later */
  return sl__fail(SL_ECUDA, "cuda:%d: %s: %s (%s)", device, call,
                  cudaGetErrorString(e), cudaGetErrorName(e));
}

static sl_status nccl_unique_id(void *ctx, uint8_t *id) {
  (void)ctx;
  ncclUniqueId u;
  NCCL_CALL(ncclGetUniqueId, (&u), NULL);
  memcpy(id, &u, sizeof u);
  return SL_OK;
}

static sl_status nccl_comm_init(void *ctx, int nranks, const uint8_t *id,
                                int rank, int device, void **comm) {
  (void)ctx;
  *comm = NULL;
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  /* NCCL binds the rank to the device current at the call; the caller's
   * current device is given back afterwards. */
  int prev = -1;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return cuda_fail(e, "cudaGetDevice", device);
  if (prev != device && (e = cudaSetDevice(device)) != cudaSuccess)
    return cuda_fail(e, "cudaSetDevice", device);
  ncclComm_t c = NULL;
  ncclResult_t r = ncclCommInitRank(&c, nranks, u, rank);
  if (prev != device) (void)cudaSetDevice(prev);
  if (r != ncclSuccess) return nccl_fail(r, "ncclCommInitRank", NULL);
  *comm = c;
  return SL_OK;
}

static sl_status nccl_comm_finalize(void *ctx, void *comm) {
  (void)ctx;
  NCCL_CALL(ncclCommFinalize, ((ncclComm_t)comm), (ncclComm_t)comm);
  return SL_OK;
}

static sl_status nccl_comm_destroy(void *ctx, void *comm) {
  (void)ctx;
  NCCL_CALL(ncclCommDestroy, ((ncclComm_t)comm), NULL);
  return SL_OK;
}

static sl_status nccl_comm_abort(void *ctx, void *comm) {
  (void)ctx;
  if (!comm) return SL_OK;
  NCCL_CALL(ncclCommAbort, ((ncclComm_t)comm), NULL);
  return SL_OK;
}

static sl_status nccl_comm_async_error(void *ctx, void *comm) {
  (void)ctx;
  ncclResult_t async = ncclSuccess;
  NCCL_CALL(ncclCommGetAsyncError, ((ncclComm_t)comm, &async),
            (ncclComm_t)comm);
  if (async != ncclSuccess && async != ncclInProgress)
    return nccl_fail(async, "ncclCommGetAsyncError", (ncclComm_t)comm);
  return SL_OK;
}

static sl_status nccl_group_start(void *ctx) {
  (void)ctx;
  NCCL_CALL(ncclGroupStart, (), NULL);
  return SL_OK;
}

static sl_status nccl_group_end(void *ctx) {
  (void)ctx;
  NCCL_CALL(ncclGroupEnd, (), NULL);
  return SL_OK;
}

static sl_status nccl_all_reduce(void *ctx, void *comm, const void *in,
                                 void *out, size_t count, sl__dev_type t,
                                 sl__dev_redop op, sl__stream *s) {
  (void)ctx;
  NCCL_CALL(ncclAllReduce,
            (in, out, count, (ncclDataType_t)t, (ncclRedOp_t)op,
             (ncclComm_t)comm, (cudaStream_t)s),
            (ncclComm_t)comm);
  return SL_OK;
}

static sl_status nccl_reduce_scatter(void *ctx, void *comm, const void *in,
                                     void *out, size_t count, sl__dev_type t,
                                     sl__dev_redop op, sl__stream *s) {
  (void)ctx;
  NCCL_CALL(ncclReduceScatter,
            (in, out, count, (ncclDataType_t)t, (ncclRedOp_t)op,
             (ncclComm_t)comm, (cudaStream_t)s),
            (ncclComm_t)comm);
  return SL_OK;
}

static sl_status nccl_all_gather(void *ctx, void *comm, const void *in,
                                 void *out, size_t count, sl__dev_type t,
                                 sl__stream *s) {
  (void)ctx;
  NCCL_CALL(
      ncclAllGather,
      (in, out, count, (ncclDataType_t)t, (ncclComm_t)comm, (cudaStream_t)s),
      (ncclComm_t)comm);
  return SL_OK;
}

static sl_status nccl_send(void *ctx, void *comm, const void *buf, size_t count,
                           sl__dev_type t, int peer, sl__stream *s) {
  (void)ctx;
  NCCL_CALL(
      ncclSend,
      (buf, count, (ncclDataType_t)t, peer, (ncclComm_t)comm, (cudaStream_t)s),
      (ncclComm_t)comm);
  return SL_OK;
}

static sl_status nccl_recv(void *ctx, void *comm, void *buf, size_t count,
                           sl__dev_type t, int peer, sl__stream *s) {
  (void)ctx;
  NCCL_CALL(
      ncclRecv,
      (buf, count, (ncclDataType_t)t, peer, (ncclComm_t)comm, (cudaStream_t)s),
      (ncclComm_t)comm);
  return SL_OK;
}

const sl__dev_coll_vtable sl__dev_coll_nccl_vtable = {
    .name = "nccl",
    .id_bytes = NCCL_UNIQUE_ID_BYTES,
    .types =
        SL__DEV_TYPE_BIT(SL__DEV_INT8) | SL__DEV_TYPE_BIT(SL__DEV_UINT8) |
        SL__DEV_TYPE_BIT(SL__DEV_INT32) | SL__DEV_TYPE_BIT(SL__DEV_INT64) |
        SL__DEV_TYPE_BIT(SL__DEV_FLOAT16) | SL__DEV_TYPE_BIT(SL__DEV_FLOAT32) |
        SL__DEV_TYPE_BIT(SL__DEV_FLOAT64) | SL__DEV_TYPE_BIT(SL__DEV_BFLOAT16),
    .unique_id = nccl_unique_id,
    .comm_init = nccl_comm_init,
    .comm_finalize = nccl_comm_finalize,
    .comm_destroy = nccl_comm_destroy,
    .comm_abort = nccl_comm_abort,
    .comm_async_error = nccl_comm_async_error,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .send = nccl_send,
    .recv = nccl_recv,
    .close = NULL,
};
