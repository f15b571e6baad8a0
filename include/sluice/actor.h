/* sluice — the actor runtime: graphs of actors and registers, and the jobs
 * that run them (DESIGN.md section 7; docs/actor.md walks through it).
 *
 * An actor graph is what a session builds from a node's plan: actors (each
 * placed on a node, a device and a stream of that device) and register
 * descriptors (each owned by the actor that writes it, with a register count —
 * the quota —, a byte size and a device), plus edges from descriptors to the
 * actors that read them. The runtime is tensor-agnostic: a register is bytes.
 *
 * A job runs one node's share of an actor graph: it allocates every register
 * when it is created, starts one thread per (device, stream) that hosts actors,
 * and drives the actors by messages until end-of-data has reached every
 * actor, a kernel fails, or no progress is possible (a hang, reported with
 * who waits on what). Several nodes in one process talk through a
 * transport; sl_loopback_* is the in-process one. */
#ifndef SLUICE_ACTOR_H
#define SLUICE_ACTOR_H

#include <sluice/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- actor ids ---------------------------------------------------------- */

/* An actor id encodes where the actor runs, so routing a message is
 * arithmetic: bits 63..48 node, 47..32 device, 31..24 stream, 23..0 index of
 * the actor within its (node, device, stream). */
typedef uint64_t sl_actor_id;

#define SL_ACTOR_MAX_NODES 65536u
#define SL_ACTOR_MAX_DEVICES 65536u
#define SL_ACTOR_MAX_STREAMS 256u
#define SL_ACTOR_MAX_INDEX (1u << 24)

static inline sl_actor_id sl_actor_id_make(uint32_t node, uint32_t device,
                                           uint32_t stream, uint32_t index) {
  return ((uint64_t)(node & 0xffffu) << 48) |
         ((uint64_t)(device & 0xffffu) << 32) |
         ((uint64_t)(stream & 0xffu) << 24) | (uint64_t)(index & 0xffffffu);
}
static inline uint32_t sl_actor_id_node(sl_actor_id id) {
  return (uint32_t)(id >> 48);
}
static inline uint32_t sl_actor_id_device(sl_actor_id id) {
  return (uint32_t)(id >> 32) & 0xffffu;
}
static inline uint32_t sl_actor_id_stream(sl_actor_id id) {
  return (uint32_t)(id >> 24) & 0xffu;
}
static inline uint32_t sl_actor_id_index(sl_actor_id id) {
  return (uint32_t)id & 0xffffffu;
}

/* The streams of a device. A job has streams_per_device streams per device
 * (default 4, these four); an actor graph may use any stream below that number.
 */
typedef enum sl_stream_kind {
  SL_STREAM_COMPUTE = 0,
  SL_STREAM_COPY = 1,
  SL_STREAM_NETWORK = 2,
  SL_STREAM_COLLECTIVE = 3,
} sl_stream_kind;
#define SL_STREAMS_DEFAULT 4u

/* ---- registers and firings ---------------------------------------------- */

/* A register as an act sees it. The runtime owns it; an act may write the
 * data of its output registers and must only read its input registers. */
typedef struct sl_register {
  void *data;
  size_t bytes;
  int64_t piece;        /* piece id its producer gave it */
  sl_actor_id producer; /* the actor that wrote it */
  int32_t desc;         /* its register descriptor */
  int32_t index;        /* which of the descriptor's registers */
} sl_register;

typedef struct sl_act sl_act;
typedef struct sl_completion sl_completion;

/* What an actor does when it fires. Returning anything but SL_OK aborts the
 * job: every actor stops and sl_job_wait returns that status with the
 * actor's name and the message set with sl_act_fail. */
typedef sl_status (*sl_act_fn)(sl_act *a);

/* One firing, as passed to an act. Valid during the call (and, after
 * sl_act_defer, until the completion is signalled). */
struct sl_act {
  void *ctx;        /* the actor's ctx from its descriptor */
  const char *name; /* the actor's name */
  sl_actor_id actor;
  int64_t piece;       /* piece id of the output this firing writes
                          (sinks: of the piece consumed) */
  int32_t step, steps; /* counting actors: this is step `step` of
                          `steps` (k); 0 of 1 for the others */
  int32_t n_in, n_out;
  sl_register *const *in;  /* n_in ready input registers */
  sl_register *const *out; /* n_out free output registers */
  void *internal_;         /* the runtime's; do not touch */
};

/* Records a formatted detail for the failure an act is about to return:
 * `return sl_act_fail(a, SL_EIO, "read %d bytes", n);`. Returns st. It
 * sets the calling thread's message, so a thread about to call
 * sl_completion_done with a failure uses it too (a may then be NULL). */
SL_API sl_status sl_act_fail(sl_act *a, sl_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Makes the current firing asynchronous: called inside an act (which then
 * returns SL_OK), it keeps the firing's registers held and sends nothing
 * until sl_completion_done is called — from any thread, exactly once, even
 * if the job aborts meanwhile. Meant for device work: a CUDA actor enqueues
 * its kernel and records an event whose callback signals the completion.
 * The actor does not fire again before that; other actors keep firing.
 * Returns the handle, owned by the runtime. */
SL_API sl_completion *sl_act_defer(sl_act *a);

/* Completes a deferred firing with st. When st is not SL_OK, the calling
 * thread's sl_last_error() is kept as the failure's detail and the job
 * aborts as if the act had returned st. */
SL_API void sl_completion_done(sl_completion *c, sl_status st);

/* Tells the hang detector what a deferred firing is doing: waiting (true)
 * for other firings of this job — a collective member that arrived before
 * its peers — or working again (false). A waiting firing is not activity:
 * when no stream can fire, no message is in flight and every deferred
 * firing waits, nothing can complete it, and the job ends with SL_EHANG
 * and its report. A deferred firing starts out working;
 * sl_completion_done ends a wait. Any thread, while the firing is
 * deferred. */
SL_API void sl_completion_waiting(sl_completion *c, bool waiting);

/* ---- actor graphs -------------------------------------------------------- */

typedef enum sl_actor_kind {
  /* Fires once per piece when every input has a ready register and every
   * output a free one. act NULL: does nothing. */
  SL_ACTOR_KERNEL = 0,
  /* No inputs; fires `count` times, producing pieces 0..count-1. */
  SL_ACTOR_SOURCE = 1,
  /* No outputs; consumes every piece (act NULL: just counts them). */
  SL_ACTOR_SINK = 2,
  /* One input piece -> `count` output pieces (micro-batches). act NULL:
   * each output is a copy of the input. */
  SL_ACTOR_REPEAT = 3,
  /* `count` input pieces -> one output piece, reduced by act (required):
   * the same output register is passed for steps 0..count-1. */
  SL_ACTOR_ACCUMULATE = 4,
  /* `count` input pieces -> one output piece; act NULL: input i is copied
   * to bytes [i*in, (i+1)*in) of the output. */
  SL_ACTOR_PACK = 5,
  /* One input piece -> `count` output pieces; act NULL: output i is bytes
   * [i*out, (i+1)*out) of the input. */
  SL_ACTOR_UNPACK = 6,
} sl_actor_kind;

/* An actor: where it runs and what it does. Strings are copied. */
typedef struct sl_actor_desc {
  const char *name; /* required, unique within the actor graph */
  sl_actor_kind kind;
  uint32_t node, device, stream;
  sl_act_fn act; /* may be NULL where the kind has a default */
  void *ctx;     /* passed to act as a->ctx */
  int64_t count; /* SOURCE: pieces; REPEAT, ACCUMULATE, PACK, UNPACK:
                    k (>= 1); ignored otherwise */
} sl_actor_desc;

/* Fills an initial register of a variable (see sl_regst_desc.initial). */
typedef sl_status (*sl_regst_init_fn)(void *ctx, sl_register *r);

/* A register descriptor: `count` registers of `bytes` bytes each, written by
 * one actor (its producer) and read by the actors connected to it. */
typedef struct sl_regst_desc {
  const char *name; /* may be NULL: "<producer>.out<i>" */
  int32_t count;    /* the quota: registers in flight never exceed it */
  size_t bytes;
  /* Device of the memory; -1: the producer's. A reader on another node
   * gets its copy on the device with this id on its own node (-1: on the
   * reader's device). */
  int32_t device;
  /* Variables: registers 0..initial-1 start ready (piece 0..initial-1,
   * filled by init, zeros if NULL) and the producer's pieces continue from
   * there. A variable updated in a loop (its producer also consumes it)
   * needs count >= initial + 1: the next version is written into a free
   * register while the current one is read. */
  int32_t initial;
  sl_regst_init_fn init;
  void *init_ctx;
} sl_regst_desc;

typedef struct sl_actor_graph sl_actor_graph;

/* Creates an empty actor graph. SL_ENOMEM. */
SL_API sl_status sl_actor_graph_create(sl_actor_graph **out);
/* Frees an actor graph; NULL is a no-op. No job may still use it. */
SL_API void sl_actor_graph_destroy(sl_actor_graph *p);

/* Adds an actor and returns its id (index = next free one in its stream).
 * SL_EINVAL for a missing name, a bad kind or node/device/stream out of
 * range; SL_ESTATE once a job was created from the actor graph. */
SL_API sl_status sl_actor_graph_add_actor(sl_actor_graph *p,
                                          const sl_actor_desc *d,
                                          sl_actor_id *out);

/* Gives actor a a mark (copied) that the trace shows with each of its
 * firings (args.pass), e.g. a pipeline pass "s1 F3". SL_ENOTFOUND for an
 * actor the actor graph does not have, SL_ESTATE once a job was created. */
SL_API sl_status sl_actor_graph_set_mark(sl_actor_graph *p, sl_actor_id a,
                                         const char *mark);

/* Adds an output register descriptor to actor `producer` (its next output
 * slot) and returns the descriptor's number. SL_ENOTFOUND for an unknown
 * actor, SL_EINVAL for a bad count/initial, SL_ESTATE once frozen. */
SL_API sl_status sl_actor_graph_add_output(sl_actor_graph *p,
                                           sl_actor_id producer,
                                           const sl_regst_desc *d,
                                           int32_t *out);

/* Registers start on this boundary, and each takes its size rounded up to
 * it: what sl_actor_graph_place lays out back to back. */
#define SL_REGISTER_ALIGN 64
/* The bytes a register of `bytes` takes; 0 when rounding up overflows. */
static inline size_t sl_register_stride(size_t bytes) {
  return bytes > SIZE_MAX - (SL_REGISTER_ALIGN - 1)
             ? 0
             : (bytes + SL_REGISTER_ALIGN - 1) / SL_REGISTER_ALIGN *
                   SL_REGISTER_ALIGN;
}

/* Memory planned by a compiler. Adds a block of `bytes` bytes on device
 * `device` of node `node` that descriptors of actors on that node and
 * device can share (sl_actor_graph_place); *out is its number, >= 1. A job
 * allocates each block of its node once, with the job's register memory.
 * SL_EINVAL for a node or device out of range, SL_ESTATE once frozen. */
SL_API sl_status sl_actor_graph_add_block(sl_actor_graph *p, uint32_t node,
                                          int32_t device, size_t bytes,
                                          int32_t *out);

/* Places descriptor desc's registers at byte `offset` (a multiple of 64)
 * of block `block`, back to back, each rounded up to 64 bytes, instead of
 * memory of their own. The block must be on the producer's node and the
 * descriptor's device, and hold them. Whoever places registers promises
 * that registers sharing bytes of a block are never live at once: the
 * runtime does not check it (SLUICE_MEMCHECK=1 does, docs/plan.md).
 * SL_ENOTFOUND for an unknown descriptor or block, SL_EINVAL when they do
 * not fit, SL_ESTATE once frozen. */
SL_API sl_status sl_actor_graph_place(sl_actor_graph *p, int32_t desc,
                                      int32_t block, size_t offset);

/* Makes `consumer` read descriptor `desc` as its next input slot.
 * SL_ENOTFOUND for an unknown actor or descriptor, SL_EINVAL when the
 * consumer already reads desc, SL_ESTATE once frozen. */
SL_API sl_status sl_actor_graph_connect(sl_actor_graph *p, int32_t desc,
                                        sl_actor_id consumer);

/* ---- one node's part of a larger actor graph ---------------------------
 *
 * Every node may build the whole actor graph: each job runs its own node's
 * actors, and the numbers in the messages between nodes (actor ids,
 * descriptors, slots, readers' positions) agree because every node counts
 * them in the same order. A compiler that gives each node only its part
 * builds, per node, an actor graph of that node's actors and, as proxies, the
 * actors of other nodes they exchange registers with, and sets the
 * numbers the whole actor graph has with these calls:
 *
 *   sl_actor_graph_add_actor_at    an actor with index `index` of its stream
 *   sl_actor_graph_add_proxy        another node's actor, never run or checked
 *                           here: only its id and place matter
 *   sl_actor_graph_add_output_at   a descriptor numbered `wire` in messages, at
 *                           output slot `slot` of its producer
 *   sl_actor_graph_connect_at      a reader at its input slot `slot`, at place
 *                           `position` among the descriptor's readers
 *
 * Descriptors keep their local numbers (the return of add_output_at) in
 * every other call. A proxy may lack slots; an actor that runs must have
 * every input and output slot, and every descriptor it produces every
 * reader position (sl_actor_graph_check). SL_EINVAL for an index, slot or
 * position taken, SL_ENOTFOUND and SL_ESTATE as for the calls above. */
SL_API sl_status sl_actor_graph_add_actor_at(sl_actor_graph *p,
                                             const sl_actor_desc *d,
                                             uint32_t index, sl_actor_id *out);
SL_API sl_status sl_actor_graph_add_proxy(sl_actor_graph *p,
                                          const sl_actor_desc *d,
                                          uint32_t index, sl_actor_id *out);
SL_API sl_status sl_actor_graph_add_output_at(sl_actor_graph *p,
                                              sl_actor_id producer,
                                              const sl_regst_desc *d,
                                              int32_t wire, uint16_t slot,
                                              int32_t *out);
SL_API sl_status sl_actor_graph_connect_at(sl_actor_graph *p, int32_t desc,
                                           sl_actor_id consumer, uint16_t slot,
                                           uint16_t position);

/* Checks that an actor graph can run, without running it: kinds have the inputs
 * and outputs they need, every descriptor has >= 1 register, every actor is
 * reachable from a source (so end-of-data reaches it), and every loop holds
 * enough registers to make progress. SL_EINVAL with a message naming the
 * actor or descriptor at fault. sl_job_create runs it too. */
SL_API sl_status sl_actor_graph_check(const sl_actor_graph *p);

/* Numbers of actors and of register descriptors (descriptors are numbered
 * 0..count-1 in the order they were added). */
SL_API int32_t sl_actor_graph_actor_count(const sl_actor_graph *p);
SL_API int32_t sl_actor_graph_regst_count(const sl_actor_graph *p);
/* The name of an actor, NULL if unknown. Owned by the actor graph. */
SL_API const char *sl_actor_graph_actor_name(const sl_actor_graph *p,
                                             sl_actor_id id);

/* ---- messages and transports -------------------------------------------- */

typedef enum sl_msg_kind {
  SL_MSG_READY = 1,  /* producer -> consumer: register `index` holds piece */
  SL_MSG_RETURN = 2, /* consumer -> producer: done with register `index` */
  SL_MSG_EOD = 3,    /* producer -> consumer: no more pieces on this edge */
  SL_MSG_CMD = 4,    /* a command; cmd says which */
} sl_msg_kind;

typedef enum sl_cmd {
  SL_CMD_START = 1,
  SL_CMD_STOP = 2,  /* sources end early; the job drains and finishes */
  SL_CMD_ABORT = 3, /* stop everything; `status` says why */
} sl_cmd;

/* The fixed-size message every actor exchange is made of. */
typedef struct sl_msg {
  sl_actor_id dst;      /* receiving actor (CMD: unused) */
  sl_actor_id src;      /* sending actor (ABORT: the actor that failed) */
  int64_t piece;        /* READY: the register's piece id; ABORT: the failed
                           firing's piece, -1 when not a firing's */
  int32_t desc;         /* READY, RETURN, EOD: the register descriptor */
  int32_t index;        /* READY, RETURN: the register; ABORT: sl_status */
  uint16_t slot;        /* READY, EOD: consumer's input slot; RETURN:
                           producer's output slot */
  uint16_t consumer;    /* RETURN: consumer's position among desc's readers */
  uint8_t kind;         /* sl_msg_kind */
  uint8_t cmd;          /* sl_cmd */
  uint16_t origin_node; /* the node that sent it */
} sl_msg;

typedef struct sl_job sl_job;

/* How messages reach other nodes. A static const table plus a ctx. */
typedef struct sl_transport_vtable {
  /* Delivers msg to node `node` in order with earlier sends from the same
   * sender; for SL_MSG_READY, payload/nbytes are the register's bytes,
   * which the receiver writes into its copy of the register. Called from
   * stream threads concurrently. Must not block for long. */
  sl_status (*send)(void *ctx, uint32_t node, const sl_msg *msg,
                    const void *payload, size_t nbytes);
  /* Optional, for hang detection across nodes: true when every other node
   * is quiescent (sl_job_quiescent) and nothing is in transit; *progress
   * changes whenever any of them made progress. NULL: a job that waits on
   * other nodes never declares a hang (it cannot tell a hang from a slow
   * peer). */
  bool (*quiescent)(void *ctx, uint32_t self_node, uint64_t *progress);
} sl_transport_vtable;

typedef struct sl_transport {
  const sl_transport_vtable *vt;
  void *ctx;
} sl_transport;

/* Device memory for registers. A static const table plus a ctx. */
typedef struct sl_regst_memory_vtable {
  sl_status (*alloc)(void *ctx, int32_t device, size_t bytes, void **out);
  void (*free)(void *ctx, int32_t device, void *p);
} sl_regst_memory_vtable;

/* The default (memory NULL): host memory, 64-byte aligned, zeroed; ctx
 * unused. A table for other devices can hand host devices to it. */
SL_API extern const sl_regst_memory_vtable sl_regst_host_memory;

/* ---- jobs --------------------------------------------------------------- */

typedef enum sl_queue_kind {
  SL_QUEUE_DEFAULT = 0, /* the faster one here (bench/README.md) */
  SL_QUEUE_MUTEX = 1,
  SL_QUEUE_LOCKFREE = 2,
} sl_queue_kind;

/* Sized like sl_session_config: SL_JOB_CONFIG(.field = value, ...) or
 * sl_job_config_default(); zero fields take their defaults. */
typedef struct sl_job_config {
  size_t size;                 /* sizeof(sl_job_config) */
  uint32_t node;               /* which node of the actor graph this job runs */
  uint32_t streams_per_device; /* 0: SL_STREAMS_DEFAULT */
  sl_queue_kind queue;
  /* A hang is declared when, for this long, no actor could fire, none was
   * executing and no message was in flight. 0: SLUICE_HANG_TIMEOUT_MS or
   * 10000; negative: never. */
  int64_t hang_timeout_ms;
  /* Chrome-trace output; NULL: SLUICE_TRACE, unset or "" means off. With
   * several nodes, ".node<N>" goes before the extension. */
  const char *trace_path;
  /* Polls of an empty queue before a stream thread sleeps (yielding the
   * CPU every 64, for at most spin_us, and only while at least half of
   * the thread's recent waits were short: docs/actor.md). 0: the default
   * (2000, or no limit when spin_us is set); negative: sleep at once. */
  int32_t spin;
  /* The longest spin, in microseconds. 0: 20. A longer spin suits a
   * machine with a core for every busy thread, where a sleeping thread's
   * wake-up can wait a scheduler tick behind another thread. */
  int32_t spin_us;
  sl_transport transport; /* required when the actor graph spans nodes */
  const sl_regst_memory_vtable *memory; /* NULL: host memory */
  void *memory_ctx;
  /* Writes a device's name ("cuda:1") for messages, hang reports and
   * trace stream names. NULL: "device <id>" ("dev<id>" in traces). */
  void (*device_name)(uint32_t device, char *buf, size_t n);
} sl_job_config;

#define SL_JOB_CONFIG(...)                                                     \
  ((sl_job_config){.size = sizeof(sl_job_config), __VA_ARGS__})
static inline sl_job_config sl_job_config_default(void) {
  return SL_JOB_CONFIG(.node = 0);
}

/* Loads the node's share of an actor graph: checks the actor graph, allocates
 * every register (and calls variables' init), creates the stream threads, which
 * wait for sl_job_start. cfg may be NULL (node 0, defaults). The actor graph
 * must outlive the job and is frozen. SL_EINVAL (bad actor graph or config),
 * SL_ENOMEM, an init callback's status, SL_EINTERNAL (threads). */
SL_API sl_status sl_job_create(sl_actor_graph *graph, const sl_job_config *cfg,
                               sl_job **out);

/* Starts the job (the START command). SL_ESTATE if already started. */
SL_API sl_status sl_job_start(sl_job *job);

/* Asks the sources of this node to end early (the STOP command): the job
 * drains and finishes normally. SL_ESTATE if not started. */
SL_API sl_status sl_job_stop(sl_job *job);

/* Waits until every actor of the node has finished, or the job aborted, and
 * joins its threads. Returns SL_OK, the status of the first failure with a
 * message naming its actor (also for failures on other nodes), or SL_EHANG
 * with the beginning of the hang report (sl_job_hang_report has it all).
 * Deferred firings are waited for. Calling it again returns the same.
 * SL_ESTATE if never started. */
SL_API sl_status sl_job_wait(sl_job *job);

/* sl_job_start then sl_job_wait. */
SL_API sl_status sl_job_run(sl_job *job);

/* Aborts the job from outside with st (not SL_OK): actors stop, other nodes
 * are told, sl_job_wait returns st. */
SL_API void sl_job_abort(sl_job *job, sl_status st);

/* Frees the job; NULL is a no-op. If it was started, waits first. With
 * several nodes, every node's job must have been waited for before any is
 * destroyed. */
SL_API void sl_job_destroy(sl_job *job);

/* The full hang report after sl_job_wait returned SL_EHANG, else "". Owned
 * by the job. */
SL_API const char *sl_job_hang_report(const sl_job *job);

/* Delivers a message that arrived from another node (transports call it,
 * from any thread). For READY, payload holds the register's bytes.
 * SL_EINVAL for a message that does not fit this job's actor graph (wrong node,
 * unknown actor, slot or register, wrong size). Once the job was waited
 * for: the job's own failure status and message when it aborted (so the
 * sender's job fails with the cause, not with a closed door), else
 * SL_ESTATE. */
SL_API sl_status sl_job_deliver(sl_job *job, const sl_msg *msg,
                                const void *payload, size_t nbytes);

/* True once the job was waited for and takes no more messages. A
 * transport discards what still arrives for it (peers may go on sending
 * for a while after an abort) rather than treating it as a bad message. */
SL_API bool sl_job_ended(const sl_job *job);

/* The node where the job's failure began: this job's own node for a
 * failure here, another node's for an ABORT it sent (a part of an actor graph
 * may not know the actor that failed there: that node's report names
 * it); -1 while the job has not failed. */
SL_API int64_t sl_job_failure_origin(sl_job *job);

/* For transports that receive a READY's payload straight into the
 * register instead of handing sl_job_deliver a buffer to copy from: sets
 * *out to the register msg (a READY from another node) will be delivered
 * into, after the same checks sl_job_deliver makes (nbytes must be the
 * register's size). The transport writes the payload there, then calls
 * sl_job_deliver(job, msg, *out, nbytes), which then copies nothing. The
 * register is the reader's mirror of the producer's register msg->index,
 * which the producer sends again only after every reader returned it, so
 * nothing reads it meanwhile. SL_EINVAL for a message that does not fit the
 * actor graph; once the job was waited for, what sl_job_deliver returns then;
 * *out is then NULL. */
SL_API sl_status sl_job_payload_target(sl_job *job, const sl_msg *msg,
                                       size_t nbytes, void **out);

/* Like sl_job_abort, with msg (copied; NULL or "": the status name) as the
 * failure's message, for transports reporting a failure the job cannot see
 * itself ("data plane: node 0: node 1 (127.0.0.1:4000): lost: ..."). */
SL_API void sl_job_abort_msg(sl_job *job, sl_status st, const char *msg);

/* For transports: true when no actor of this job can fire, none executes
 * (a deferred firing waiting for others, sl_completion_waiting, does not)
 * and no message is queued (or the job finished); *progress (may be NULL)
 * grows with every message the job handled. False before start. */
SL_API bool sl_job_quiescent(const sl_job *job, uint64_t *progress);

typedef struct sl_job_stats {
  uint32_t actors, threads;
  uint64_t registers; /* local registers, mirrors of remote ones
                         included */
  uint64_t register_bytes;
  uint64_t firings;
  uint64_t messages_local;     /* between actors of one stream thread */
  uint64_t messages_cross;     /* between stream threads of this job */
  uint64_t messages_remote;    /* handed to the transport */
  uint64_t discarded;          /* ready registers returned unread at stop */
  uint64_t in_flight;          /* registers in flight now: 0 after a job
                                  that finished */
  uint64_t peak_in_flight_sum; /* sum over descriptors of their peaks */
  uint64_t messages_left;      /* queued and never handled (after abort) */
  double run_ms;               /* start to the end of the last actor */
  /* How the stream threads waited on empty queues (see `spin`): waits a
   * spin ended with a message, spins that ran out, and sleeps. */
  uint64_t spins_caught, spins_missed, sleeps;
} sl_job_stats;

/* Counters of a waited-for job. SL_ESTATE before sl_job_wait returned. */
SL_API sl_status sl_job_get_stats(const sl_job *job, sl_job_stats *out);

/* The file the job's trace goes to (after ".node<N>" was inserted), or
 * NULL when tracing is off. Written by sl_job_wait. */
SL_API const char *sl_job_trace_path(const sl_job *job);

typedef struct sl_regst_stats {
  int32_t count;          /* the quota */
  int32_t in_flight;      /* now */
  int32_t peak_in_flight; /* the most at once */
} sl_regst_stats;

/* Per descriptor produced on this job's node, after sl_job_wait.
 * SL_ENOTFOUND for another node's or an unknown descriptor, SL_ESTATE. */
SL_API sl_status sl_job_get_regst_stats(const sl_job *job, int32_t desc,
                                        sl_regst_stats *out);

/* The memory of register `index` (0..count-1) of descriptor desc,
 * produced on this job's node: fixed for the job's life, so a program can
 * read state between steps (a variable's current version, to save it)
 * when its own protocol orders the reads after the writes. SL_ENOTFOUND
 * for another node's or an unknown descriptor, or an index out of range. */
SL_API sl_status sl_job_register_data(const sl_job *job, int32_t desc,
                                      int32_t index, void **out);

/* The same register as an act saw it last (its memory, size and the piece
 * it holds), after sl_job_wait: piece -1 while a firing that took it to
 * write was still under way (or never finished) when the job ended.
 * SL_ESTATE before, SL_ENOTFOUND as above. */
SL_API sl_status sl_job_get_register(const sl_job *job, int32_t desc,
                                     int32_t index, sl_register *out);

typedef struct sl_actor_stats {
  uint64_t firings;
  int64_t pieces; /* output pieces written (inputs consumed for sinks) */
  bool finished;
} sl_actor_stats;

/* Per local actor, after sl_job_wait. SL_ENOTFOUND, SL_ESTATE. */
SL_API sl_status sl_job_get_actor_stats(const sl_job *job, sl_actor_id id,
                                        sl_actor_stats *out);

/* ---- in-process loopback transport --------------------------------------- */

/* Several nodes' jobs in one process: a message for node n is delivered
 * straight into the job attached as node n. */
typedef struct sl_loopback sl_loopback;

/* SL_EINVAL for nodes == 0, SL_ENOMEM. */
SL_API sl_status sl_loopback_create(uint32_t nodes, sl_loopback **out);
/* NULL is a no-op. Jobs attached to it must have been waited for. */
SL_API void sl_loopback_destroy(sl_loopback *lb);
/* The transport to put in each node's sl_job_config. */
SL_API sl_transport sl_loopback_transport(sl_loopback *lb);
/* Attaches node `node`'s job; every node's job must be attached before any
 * is started. SL_EINVAL for a node out of range, SL_ESTATE if taken. */
SL_API sl_status sl_loopback_attach(sl_loopback *lb, uint32_t node,
                                    sl_job *job);

#ifdef __cplusplus
}
#endif
#endif
