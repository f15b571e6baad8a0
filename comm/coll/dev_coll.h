/* sluice comm — device collectives: the collectives of boxing steps on CUDA
 * groups, through NCCL (DESIGN.md section 8; docs/cuda.md, "NCCL
 * collectives").
 *
 * Three layers:
 *
 *   sl__dev_coll        a backend (STYLE.md, "Pluggable parts": a static
 *                       const sl__dev_coll_vtable plus a ctx) and the
 *                       process's launch lock. NCCL is one backend
 *                       (sl__dev_coll_nccl_open, CUDA builds only); the
 *                       tests plug a host-memory fake.
 *   sl__dev_comm        one communicator: the ranks of a device group this
 *                       process holds (all of them for an in-process group,
 *                       some for a group across processes). Cross-process
 *                       groups exchange the backend's unique id through a
 *                       key-value store (sl__dev_kv): rank 0's process puts
 *                       it, the others wait for it.
 *   sl__dev_comm_cache  one communicator per device group and job.
 *
 * Launch order. A device collective blocks its stream until every rank has
 * joined, so every rank must issue the collectives of a communicator in the
 * same order, and the collectives of different communicators sharing a
 * device in the same order too, or the GPUs wait on each other forever.
 * sl__dev_comm_launch issues one collective for every local rank inside
 * one group call, from the calling thread, under the sl__dev_coll's lock:
 * all launches of a process form one sequence that every device of the
 * process sees in the same order. So an in-process group cannot deadlock,
 * whatever order its members' actors arrive in. Across processes the
 * caller keeps the order: every process must issue the collectives of
 * communicators that share devices in one order (a session launches its
 * groups spanning nodes round by round in one order of the job:
 * comm/coll/dev_group.c).
 *
 * How a session uses it: one communicator per boxing collective's device
 * group, created before the first step (across processes: in the job's
 * order, once every node is ready); when the process's members of a round
 * have arrived, one sl__dev_comm_launch with their buffers and streams;
 * then sl__notifier_watch on each member's stream completes the members'
 * firings. Not installed. */
#ifndef SLUICE_DEV_COLL_H
#define SLUICE_DEV_COLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/sbp.h>
#include <sluice/tensor.h>

#include "core_int.h"
#include "cp.h"
#include "device_iface.h"

/* Unique ids are opaque bytes, at most this many (NCCL's are 128). */
#define SL__DEV_COLL_ID_MAX 128
/* Ranks of one communicator. */
#define SL__DEV_COLL_MAX_RANKS 4096

/* Element types a backend moves and reduces. The values are NCCL's
 * ncclDataType_t (dev_coll_nccl.c checks that at compile time). */
typedef enum sl__dev_type {
  SL__DEV_INT8 = 0,
  SL__DEV_UINT8 = 1,
  SL__DEV_INT32 = 2,
  SL__DEV_INT64 = 4,
  SL__DEV_FLOAT16 = 6,
  SL__DEV_FLOAT32 = 7,
  SL__DEV_FLOAT64 = 8,
  SL__DEV_BFLOAT16 = 9,
} sl__dev_type;
#define SL__DEV_TYPE_BIT(t) (1u << (unsigned)(t))

/* Reductions; the values are NCCL's ncclRedOp_t. */
typedef enum sl__dev_redop {
  SL__DEV_SUM = 0,
  SL__DEV_PROD = 1, /* no sl_reduce_op maps to it yet */
  SL__DEV_MAX = 2,
  SL__DEV_MIN = 3,
} sl__dev_redop;

/* A backend. Every entry but the optional ones is required. A backend
 * communicator is an opaque void * (an ncclComm_t). Failures return a
 * status with the backend's own message in sl_last_error(); the layer above
 * adds the collective and the group. Streams are the device layer's (for
 * CUDA an sl__stream * is the cudaStream_t). */
typedef struct sl__dev_coll_vtable {
  const char *name; /* "nccl" */
  size_t id_bytes;  /* unique-id size, 1..SL__DEV_COLL_ID_MAX */
  uint32_t types;   /* SL__DEV_TYPE_BIT of every type it handles */
  /* A new unique id (id_bytes bytes) for one communicator. */
  sl_status (*unique_id)(void *ctx, uint8_t *id);
  /* Rank `rank` of nranks on local device `device`. Called inside
   * group_start/group_end, one call per local rank; *comm is usable once
   * group_end succeeded. */
  sl_status (*comm_init)(void *ctx, int nranks, const uint8_t *id, int rank,
                         int device, void **comm);
  /* Optional: flushes a communicator before destroy; called for every
   * local rank inside one group (NCCL: ncclCommFinalize). */
  sl_status (*comm_finalize)(void *ctx, void *comm);
  sl_status (*comm_destroy)(void *ctx, void *comm);
  /* Frees the communicator without waiting for peers or queued work. */
  sl_status (*comm_abort)(void *ctx, void *comm);
  /* Optional: an error the communicator hit asynchronously (a peer lost, a
   * kernel fault), SL_OK if none. */
  sl_status (*comm_async_error)(void *ctx, void *comm);
  /* Group calls are per thread, as in NCCL: the operations between them
   * are issued as one. */
  sl_status (*group_start)(void *ctx);
  sl_status (*group_end)(void *ctx);
  /* count elements in and out; in == out is in place. */
  sl_status (*all_reduce)(void *ctx, void *comm, const void *in, void *out,
                          size_t count, sl__dev_type t, sl__dev_redop op,
                          sl__stream *s);
  /* in: nranks * count elements; out: count, part `rank` of the result. */
  sl_status (*reduce_scatter)(void *ctx, void *comm, const void *in, void *out,
                              size_t count, sl__dev_type t, sl__dev_redop op,
                              sl__stream *s);
  /* in: count elements; out: nranks * count, rank r's in at part r. */
  sl_status (*all_gather)(void *ctx, void *comm, const void *in, void *out,
                          size_t count, sl__dev_type t, sl__stream *s);
  /* Point to point; the k-th send from a to b meets the k-th receive at b
   * from a. A rank may send to itself within a group. */
  sl_status (*send)(void *ctx, void *comm, const void *buf, size_t count,
                    sl__dev_type t, int peer, sl__stream *s);
  sl_status (*recv)(void *ctx, void *comm, void *buf, size_t count,
                    sl__dev_type t, int peer, sl__stream *s);
  /* Optional: frees ctx (sl__dev_coll_destroy). */
  void (*close)(void *ctx);
} sl__dev_coll_vtable;

typedef struct sl__dev_coll sl__dev_coll;
typedef struct sl__dev_comm sl__dev_comm;
typedef struct sl__dev_comm_cache sl__dev_comm_cache;

/* ---- backends ---------------------------------------------------------- */

/* Wraps a backend (tests use fakes this way). The table must outlive the
 * result; ctx is closed with vt->close by sl__dev_coll_destroy when set.
 * SL_EINVAL for a table with a missing required entry (named) or a bad
 * id_bytes, SL_ENOMEM. */
sl_status sl__dev_coll_create(const sl__dev_coll_vtable *vt, void *ctx,
                              sl__dev_coll **out);
/* The NCCL backend, from the CUDA module (tensor/cuda_module.h), which
 * opening loads. SL_EUNSUPPORTED saying why when it cannot be loaded (a
 * build without CUDA: "built without CUDA/NCCL"). Opening needs no GPU;
 * creating a communicator does. */
sl_status sl__dev_coll_nccl_open(sl__dev_coll **out);
/* The NCCL backend's table, defined in the module (dev_coll_nccl.c). */
extern const sl__dev_coll_vtable sl__dev_coll_nccl_vtable;
/* Every communicator and cache made from e must be destroyed first. NULL:
 * no-op. */
void sl__dev_coll_destroy(sl__dev_coll *e);
const char *sl__dev_coll_backend_name(const sl__dev_coll *e);

/* What a collective on dtype dt with reduction op becomes: bool moves as
 * uint8 and reduces as max (or) for SUM and MAX and as min (and) for MIN,
 * the CPU collectives' rule; P(max) and P(min) become MAX and MIN. reduces
 * says whether op matters (all_gather, all-to-all and exchange ignore it).
 * e may be NULL (the mapping alone); otherwise a type the backend lacks is
 * refused too. SL_EUNSUPPORTED naming the dtype or op, with *t and *r
 * unchanged. */
sl_status sl__dev_coll_map(const sl__dev_coll *e, sl_dtype dt, bool reduces,
                           sl_reduce_op op, sl__dev_type *t, sl__dev_redop *r);

/* ---- the key-value store for unique ids -------------------------------- */

/* put copies the value; get waits up to wait_ms for the key and returns a
 * copy in *bytes (sl__free it), SL_ETIMEOUT when the wait ends first. */
typedef struct sl__dev_kv {
  sl_status (*put)(void *ctx, const char *key, const void *bytes, size_t len);
  sl_status (*get)(void *ctx, const char *key, uint64_t wait_ms,
                   uint8_t **bytes, size_t *len);
  void *ctx;
} sl__dev_kv;

/* The control plane's store through client c (sl__cp_kv_put/_get). */
sl__dev_kv sl__dev_kv_cp(sl__cp_client *c);

/* The key a group's unique id is stored under: "sluice/dev_coll/<job>/
 * <group>", where a group name too long for a key (SL__CP_MAX_NAME) is
 * replaced by a 64-bit hash of it. Different (job, group) pairs give
 * different keys (barring a hash collision for long names). SL_EINVAL for
 * an empty group or a buffer under SL__CP_MAX_NAME + 1 bytes. */
sl_status sl__dev_coll_key(uint64_t job, const char *group, char *buf,
                           size_t cap);

/* ---- communicators ----------------------------------------------------- */

typedef struct sl__dev_comm_desc {
  /* The group's name: in messages, and (across processes) in the id's key,
   * so every process of the group must give the same one; copied. */
  const char *name;
  int nranks;         /* 1..SL__DEV_COLL_MAX_RANKS */
  int nlocal;         /* ranks this process holds, 1..nranks */
  const int *ranks;   /* nlocal distinct ranks; local index i holds ranks[i] */
  const int *devices; /* nlocal distinct device indexes */
  /* Only for nlocal < nranks. kv is copied. */
  const sl__dev_kv *kv;
  uint64_t job;
  uint64_t timeout_ms; /* wait for rank 0's id; 0: 60 s */
  /* Optional: asked every SL__DEV_COLL_CANCEL_POLL_MS while waiting for
   * rank 0's id; a status other than SL_OK (with its message in
   * sl_last_error()) ends the wait with it — a job given up elsewhere need
   * not wait out the timeout. */
  sl_status (*cancelled)(void *arg);
  void *cancel_arg;
} sl__dev_comm_desc;
#define SL__DEV_COLL_CANCEL_POLL_MS 200u

/* Creates the communicator: the process holding rank 0 makes the unique id
 * (and puts it under sl__dev_coll_key(job, name) when other processes hold
 * ranks), the others wait for it; then every local rank is initialised in
 * one group call. Blocks until every rank of the group joined (a collective
 * call: processes must create communicators in the same order, or from
 * separate threads). SL_EINVAL for a bad description (named), SL_ETIMEOUT
 * (naming the key) when rank 0's id does not come, d->cancelled's status
 * when it ends the wait (naming the group and key), the backend's status
 * (with the group's name, and the key across processes) when init fails;
 * nothing is left behind. */
sl_status sl__dev_comm_create(sl__dev_coll *e, const sl__dev_comm_desc *d,
                              sl__dev_comm **out);
/* An in-process group: rank k on devices[k], k < n. */
sl_status sl__dev_comm_create_local(sl__dev_coll *e, const char *name, int n,
                                    const int *devices, sl__dev_comm **out);
/* Waits for queued work to flush and frees the communicator (after an
 * abort, only frees). NULL: no-op. */
void sl__dev_comm_destroy(sl__dev_comm *c);
/* Tears the backend communicators down without waiting for peers (a job
 * that failed); from now on launches fail with SL_EABORTED. Any thread;
 * waits for a launch in progress. */
void sl__dev_comm_abort(sl__dev_comm *c);
/* SL_OK, the failure that poisoned the communicator (a failed launch or an
 * abort), or the backend's asynchronous error. Never waits for the GPU,
 * only for a launch being issued. */
sl_status sl__dev_comm_check(sl__dev_comm *c);

const char *sl__dev_comm_name(const sl__dev_comm *c);
int sl__dev_comm_nranks(const sl__dev_comm *c);
int sl__dev_comm_nlocal(const sl__dev_comm *c);
/* The rank and device of local index i. */
int sl__dev_comm_rank(const sl__dev_comm *c, int i);
int sl__dev_comm_device(const sl__dev_comm *c, int i);

/* ---- launching --------------------------------------------------------- */

typedef enum sl__dev_coll_op {
  SL__DEV_ALL_REDUCE = 0,     /* in, out: count elements */
  SL__DEV_REDUCE_SCATTER = 1, /* in: nranks * count; out: count (part rank) */
  SL__DEV_ALL_GATHER = 2,     /* in: count; out: nranks * count */
  /* in, out: nranks * count; part j of in goes to rank j, part j of out
   * comes from rank j. Grouped sends and receives; in and out apart. */
  SL__DEV_ALL_TO_ALL = 3,
  /* Each rank's own lists of (peer, buffer, bytes); bytes move as uint8.
   * Grouped sends and receives: the k-th send from a to b fills the k-th
   * receive at b from a, and the two must have the same size. */
  SL__DEV_EXCHANGE = 4,
} sl__dev_coll_op;

/* "all_reduce", ..., "exchange". */
const char *sl__dev_coll_op_name(sl__dev_coll_op op);

typedef struct sl__dev_send {
  int peer;
  const void *buf;
  size_t bytes; /* 0: skipped (buf may be NULL) */
} sl__dev_send;

typedef struct sl__dev_recv {
  int peer;
  void *buf;
  size_t bytes;
} sl__dev_recv;

/* One local rank's part of a launch. */
typedef struct sl__dev_rank_args {
  const void *in; /* group ops; may be NULL when it holds 0 bytes */
  void *out;
  sl__stream *stream; /* required */
  int n_send, n_recv; /* EXCHANGE */
  const sl__dev_send *send;
  const sl__dev_recv *recv;
} sl__dev_rank_args;

typedef struct sl__dev_coll_desc {
  const char *name; /* the boxing step, for messages; may be NULL */
  sl__dev_coll_op op;
  sl_dtype dtype;      /* not EXCHANGE */
  sl_reduce_op reduce; /* ALL_REDUCE, REDUCE_SCATTER */
  size_t count;        /* elements, see sl__dev_coll_op */
} sl__dev_coll_desc;

/* Issues collective d for every local rank of c (ranks[i] for local index
 * i) in one group call, under the lock of c's sl__dev_coll, and returns
 * once it is queued on the streams (not done: watch the streams). Buffers
 * must stay valid until the streams have passed the collective. For an
 * in-process exchange, sends and receives are checked to pair up.
 * SL_EINVAL (bad arguments, nothing issued), SL_EUNSUPPORTED (dtype or
 * reduction), SL_EABORTED or SL_ESTATE once c has failed, the backend's
 * status otherwise; every failure names the collective and the group, and
 * a backend failure poisons c (its ranks may now disagree on the order). */
sl_status sl__dev_comm_launch(sl__dev_comm *c, const sl__dev_coll_desc *d,
                              const sl__dev_rank_args *ranks);

/* ---- one communicator per device group --------------------------------- */

typedef struct sl__dev_member {
  int node;   /* the process (daemon node) */
  int device; /* its device index */
} sl__dev_member;

typedef struct sl__dev_comm_cache_config {
  sl__dev_coll *engine;
  int node; /* this process's node */
  uint64_t job;
  const sl__dev_kv *kv; /* for groups spanning nodes; copied; may be NULL */
  uint64_t timeout_ms;  /* as in sl__dev_comm_desc */
} sl__dev_comm_cache_config;

sl_status sl__dev_comm_cache_create(const sl__dev_comm_cache_config *cfg,
                                    sl__dev_comm_cache **out);
/* The communicator of the device group members[0..n) (rank k =
 * members[k]): the same one for the same ordered list, created on first
 * use under the group name "<node>:<device>,..." (another order is another
 * group). Owned by the cache. Creation happens outside the cache's lock, so
 * several groups can be created at once from several threads; callers of a
 * group being created wait for it. SL_EINVAL (no member on this node, a
 * member twice), sl__dev_comm_create's failures — kept: a later call gets
 * the same status (a retry would reuse the group's key, whose id other
 * processes may already have taken). */
sl_status sl__dev_comm_cache_get(sl__dev_comm_cache *cc, int n,
                                 const sl__dev_member *members,
                                 sl__dev_comm **out);
int sl__dev_comm_cache_count(sl__dev_comm_cache *cc);
/* Aborts every communicator (sl__dev_comm_abort). */
void sl__dev_comm_cache_abort(sl__dev_comm_cache *cc);
/* Destroys every communicator. NULL: no-op. */
void sl__dev_comm_cache_destroy(sl__dev_comm_cache *cc);

#endif
