/* sluice actor — the module's private structures: the plan as built, and a
 * job's runtime state (stream threads, actors, slots, registers). */
#ifndef SLUICE_ACTOR_INT_H
#define SLUICE_ACTOR_INT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>

#include <sluice/actor.h>

#include "core_int.h"
#include "core_thread.h"

/* ---- plan ---------------------------------------------------------------- */

typedef struct plan_actor {
  sl_actor_desc d; /* d.name points into the plan's arena */
  sl_actor_id id;
  const char *mark; /* sl_actor_graph_set_mark (arena), or NULL */
  /* Descriptor of each input and output slot; -1: a slot this plan does
   * not hold (only a proxy's may be missing). */
  int32_t *in;
  int32_t n_in, cap_in;
  int32_t *out;
  int32_t n_out, cap_out;
  bool proxy; /* another node's actor in a node's part
                 (sl_actor_graph_add_proxy) */
} plan_actor;

typedef struct plan_consumer {
  int32_t actor;    /* plan index of the reader */
  int32_t slot;     /* its input slot */
  int32_t position; /* its place among the descriptor's readers */
} plan_consumer;

typedef struct plan_regst {
  sl_regst_desc d;  /* d.name points into the plan's arena */
  int32_t wire;     /* its number in messages (sl_actor_graph_add_output_at) */
  int32_t producer; /* plan index */
  int32_t out_slot; /* producer's output slot */
  plan_consumer *cons;
  int32_t n_cons, cap_cons;
  int32_t block; /* sl_actor_graph_place: its block (0: memory of its own) */
  size_t offset;
} plan_regst;

/* Open addressing from a 64-bit key to an int32 (keys != UINT64_MAX). */
typedef struct sl__u64map {
  uint64_t *keys;
  int32_t *vals;
  size_t cap, n;
} sl__u64map;

typedef struct plan_block {
  uint32_t node;
  int32_t device;
  size_t bytes;
} plan_block;

struct sl_actor_graph {
  sl_arena *arena;
  plan_block *blocks; /* block k is blocks[k - 1] */
  int32_t n_blocks, cap_blocks;
  plan_actor *actors;
  int32_t n_actors, cap_actors;
  plan_regst *regsts;
  int32_t n_regsts, cap_regsts;
  sl__u64map by_id;      /* actor id -> plan index */
  sl__u64map next_index; /* (node, device, stream) key -> next index */
  uint32_t n_nodes;      /* 1 + the highest node used */
  atomic_int frozen;     /* a job was created from it */
};

/* Plan index of an actor id, -1 if none. */
int32_t sl__plan_find(const sl_actor_graph *p, sl_actor_id id);

/* ---- job runtime -----------------------------------------------------------
 */

/* Internal message kind: a deferred firing completed (never on the wire). */
#define SL__MSG_COMPLETE 5

typedef struct rt_regst {
  sl_register pub;
  int32_t pending; /* readers yet to return it (producer's thread) */
  uint8_t *held;   /* per reader: 1 while it holds it (for hang reports) */
  bool shared;     /* lives in a plan block (memory other registers reuse) */
  uint64_t sum;    /* SLUICE_MEMCHECK: its bytes' checksum when published */
  atomic_int readers_left; /* SLUICE_MEMCHECK: readers yet to finish */
} rt_regst;

typedef struct in_slot {
  int32_t desc, wire; /* the plan's descriptor, and its number in messages */
  sl_actor_id producer;
  uint16_t producer_slot;
  uint16_t consumer; /* our position among the descriptor's readers */
  bool remote;       /* producer on another node: regs is our mirror */
  bool eod;
  rt_regst *regs; /* the descriptor's registers, by index */
  int32_t *fifo;  /* ready register indices, oldest first */
  uint32_t head, len, cap;
} in_slot;

typedef struct out_slot {
  int32_t desc, wire;
  int32_t count;
  rt_regst *regs;
  int32_t *free_fifo; /* free register indices */
  uint32_t fhead, flen;
  int32_t n_cons;
  sl_actor_id *cons_id;
  uint16_t *cons_slot;
  int32_t cur; /* register taken by the firing in progress, -1 */
  int32_t in_flight, peak;
} out_slot;

struct sl_completion {
  struct rt_actor *actor;
  atomic_bool waiting; /* counted in the job's async_waiting */
  /* What sl_completion_waiting said last, kept past the completion for
   * the hang report (an abort completes a waiting collective member). */
  atomic_bool said_waiting;
  sl_status st;
  char *detail; /* heap, set by a failing sl_completion_done */
};

typedef enum actor_mode {
  MODE_ONE,     /* kernel, source, sink: one firing per piece */
  MODE_FAN_OUT, /* repeat, unpack: k firings per input piece */
  MODE_FAN_IN,  /* accumulate, pack: k firings per output piece */
} actor_mode;

typedef struct rt_actor {
  const plan_actor *pa;
  sl_actor_id id;
  struct stream *st;
  sl_actor_kind kind;
  actor_mode mode;
  sl_act_fn act;
  int32_t n_in, n_out;
  in_slot *in;
  out_slot *out;
  sl_register **in_view, **out_view;
  sl_act a;           /* the firing record handed to act */
  int64_t limit;      /* SOURCE: pieces to produce */
  int64_t fired;      /* SOURCE: firings so far */
  int64_t next_piece; /* piece id of the next output */
  int64_t pieces;     /* stats: output pieces (sinks: input pieces) */
  int32_t k, step;
  int32_t eod_in; /* input slots that saw end-of-data */
  bool stopped, finished, busy, stop_requested, deferred;
  uint64_t firings;
  uint64_t trace_t0;
  sl_completion completion;
} rt_actor;

typedef struct trace_event {
  uint32_t actor; /* index within the stream */
  bool deferred;  /* the act deferred: t1 is its completion */
  int64_t piece;
  uint64_t t0, t1;
} trace_event;

/* One per (device, stream) of a job. The first part is set before the
 * threads start and then only read (other threads read `q` to push, the
 * watchdog reads `handled_pub` and `exited`); the second is written by the
 * stream's own thread on every message, so it starts a cache line of its
 * own, and the array of streams is cache-line aligned: a thread's stores
 * never move a line that another stream's thread keeps reading. */
typedef struct stream {
  struct sl_job *job;
  uint32_t device, stream, ordinal;
  rt_actor *actors; /* by index within the stream */
  int32_t n_actors;
  sl__mpsc *q; /* messages from other threads and nodes */
  sl__thread thread;
  int32_t spin;    /* polls of an empty queue before sleeping; 0: none */
  int64_t spin_ns; /* the longest spin */
  bool trace_on;
  char name[64];
  atomic_uint_least64_t handled_pub; /* published before sleeping */
  atomic_int exited;

  /* thread-owned */
  alignas(SL__CACHE_LINE) int32_t live;
  bool started;
  sl_msg *lq; /* messages between this thread's actors */
  uint32_t lhead, llen, lmask;
  uint64_t handled;       /* messages handled */
  uint64_t waiting_since; /* start of a wait slept through; 0: none */
  bool spin_missed;       /* this wait spun its whole window in vain */
  uint32_t long_waits;    /* of recent waits, the share that were long */
  /* stats, read after join */
  uint64_t firings, msgs_local, msgs_cross, msgs_remote, discarded;
  uint64_t dropped; /* popped but not handled because the job aborted */
  uint64_t spins_caught, spins_missed, sleeps;
  trace_event *tev;
  size_t n_tev, cap_tev;
} stream;

enum job_state { JOB_CREATED, JOB_STARTED, JOB_WAITED };

typedef struct mem_block {
  int32_t device;
  void *p;
} mem_block;

struct sl_job {
  sl_actor_graph *plan;
  sl_job_config cfg;
  uint32_t node, S;
  sl__queue_kind qkind;
  sl_arena *arena;

  stream *streams;
  uint32_t n_streams;
  stream **by_slot; /* device * S + stream -> stream, NULL if none */
  uint32_t n_slots;
  rt_actor **by_plan; /* plan index -> local actor, NULL if remote */
  out_slot **out_of;  /* descriptor -> producer's out slot if local */
  mem_block *mem;
  uint32_t n_mem, cap_mem;
  unsigned char **block_base; /* plan block k -> its memory (k - 1), this
                                 node's only */
  bool memcheck; /* SLUICE_MEMCHECK=1 with host registers (fire.c) */
  uint64_t n_registers, register_bytes;
  bool has_remote; /* some edge crosses to another node */

  pthread_mutex_t lock;
  pthread_cond_t cond;
  enum job_state state;
  atomic_int stop;         /* abort: threads leave at once */
  atomic_int status;       /* first failure */
  char errmsg[1024];       /* its message, under lock */
  uint32_t failure_origin; /* the node where it began, under lock */
  atomic_int accepting;    /* sl_job_deliver allowed */
  /* The outcome when accepting was cleared (written before it): senders
   * that find the job gone learn why, so an abort's cause wins over their
   * own "no longer accepts" failure. */
  sl_status ended_status;
  atomic_int started;
  atomic_int done;      /* every stream thread exited */
  atomic_int stop_sent; /* sl_job_stop was called */
  int threads_live;     /* under lock */
  atomic_long async_pending;
  atomic_long async_waiting; /* of them, waiting for other firings */
  int64_t hang_timeout_ms;
  sl__thread watchdog;
  /* The watchdog's own condition (under lock), signalled only to make it
   * exit: cond is broadcast whenever the deferred firings in flight drop
   * to none, dozens of times a step, and the watchdog woken each time
   * would take a core from the compute threads. */
  pthread_cond_t watchdog_cond;
  bool watchdog_exit; /* under lock */
  char *hang_report;
  bool hang_here; /* this job's watchdog declared the hang */
  uint64_t t_start, t_end;
  uint64_t messages_left; /* counted once the threads are joined */
  char *trace_path;
};

/* stream.c: the thread of one stream, and message routing. */
void *sl__stream_main(void *arg);
/* Sends m on behalf of stream `from` (NULL: not a stream thread). For a
 * READY to another node, payload is the register. Failures abort the job. */
void sl__route(sl_job *job, stream *from, const sl_msg *m,
               const rt_regst *payload);
/* Looks up a local actor by id, NULL when it is not one of this job's. */
rt_actor *sl__job_actor(const sl_job *job, sl_actor_id id);

/* Grows a stream's local queue when full (stream.c); false (and the job
 * aborted) when out of memory. */
bool sl__lq_grow(stream *s);

/* The hot path of sl__route: a message between two actors of the same
 * stream thread goes to that thread's local queue, with no synchronisation. */
static inline void sl__send(stream *s, const sl_msg *m, const rt_regst *r) {
  const struct sl_job *job = s->job;
  sl_actor_id d = m->dst;
  if (sl_actor_id_node(d) == job->node &&
      job->by_slot[sl_actor_id_device(d) * job->S + sl_actor_id_stream(d)] ==
          s) {
    if (s->llen == s->lmask + 1 && !sl__lq_grow(s)) return;
    s->lq[(s->lhead + s->llen) & s->lmask] = *m;
    s->llen++;
    s->msgs_local++;
    return;
  }
  sl__route((struct sl_job *)job, s, m, r);
}

/* fire.c: the firing rule and the actor kinds. */
void sl__actor_start(stream *s, rt_actor *a);
void sl__actor_on_ready(stream *s, rt_actor *a, const sl_msg *m);
void sl__actor_on_return(stream *s, rt_actor *a, const sl_msg *m);
void sl__actor_on_eod(stream *s, rt_actor *a, const sl_msg *m);
void sl__actor_on_complete(stream *s, rt_actor *a);
void sl__actor_request_stop(stream *s, rt_actor *a);

/* job.c */
/* The transport's and memory's tables are called through these only. */
sl_status sl__transport_send(sl_job *job, uint32_t node, const sl_msg *m,
                             const void *payload, size_t nbytes);
/* False when the transport has no `quiescent`. */
bool sl__transport_quiescent(sl_job *job, uint64_t *progress);
/* Records the first failure and stops the job; `who` (may be NULL) names
 * the actor, detail (may be NULL or "") says what happened. Broadcasts to
 * other nodes when `broadcast`. */
void sl__job_abort(sl_job *job, sl_status st, sl_actor_id who, bool has_who,
                   const char *detail, bool broadcast);
/* sl__job_abort of a firing of actor `who` for piece `piece` that failed,
 * broadcast: the ABORT other nodes receive carries the piece (sl_msg.piece;
 * -1 in other ABORTs), so that an embedder may let its node finish the
 * earlier pieces first. */
void sl__job_abort_firing(sl_job *job, sl_status st, sl_actor_id who,
                          const char *detail, int64_t piece);
/* A device's name by the job's device_name, else "device <id>". */
void sl__job_device_name(const sl_job *job, uint32_t device, char *buf,
                         size_t n);
/* "'name' (node n, device d, stream s)" into buf. */
void sl__actor_label(const sl_job *job, sl_actor_id id, char *buf, size_t n);

/* hang.c */
sl_status sl__watchdog_start(sl_job *job);
void sl__watchdog_stop(sl_job *job);
/* Builds job->hang_report from the frozen state (threads joined). */
void sl__hang_report_build(sl_job *job);
bool sl__job_local_quiescent(const sl_job *job, uint64_t *progress);

/* trace.c */
void sl__trace_record(stream *s, rt_actor *a, int64_t piece, uint64_t t0,
                      uint64_t t1, bool deferred);
sl_status sl__trace_write(sl_job *job);

/* check.c: kind arity and default-act requirements of one actor. */
sl_status sl__check_actor(const sl_actor_graph *p, int32_t i);

#endif
