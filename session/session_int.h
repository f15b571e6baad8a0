/* sluice session — the embedded session's private structures, shared by
 * session.c (the API), build.c (plan -> actors), acts.c (what each actor
 * does) and driver.c (the program's side of the job: ticks, abort, step
 * completion). docs/plan.md, "The embedded session", walks through it. */
#ifndef SLUICE_SESSION_INT_H
#define SLUICE_SESSION_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <sluice/actor.h>
#include <sluice/checkpoint.h>
#include <sluice/session.h>

#include "box.h"
#include "caching_alloc.h"
#include "comm_int.h"
#include "dev_boxing.h"
#include "dev_coll.h"
#include "device_notify.h"
#include "engine.h"
#include "span_coll.h"
#include "core_thread.h"
#include "lower_int.h"

/* Steps whose completion is counted at once: the driver never releases
 * more than RING - 4 steps beyond the last complete one, and no actor runs
 * more than one step beyond the released ticks, so slots never collide. */
#define SL__STEP_RING 64
#define SL__STEP_WINDOW (SL__STEP_RING - 4)

typedef struct sl_session sl_session;

/* How a session opens CUDA devices and runs ops on them: the CUDA runtime
 * and sl__op_run_cuda, unless a test substitutes its own (a fake device
 * whose kernels are the CPU ones: tests/session/fake_cuda.h). */
typedef struct sl__session_backend {
  sl_status (*open)(int index, sl__device **out);
  sl_status (*run_op)(const sl__op_def *op, sl__kernel_ctx *k,
                      sl__caching_alloc *mem, sl__stream *s);
  /* The collectives between those devices (NCCL). */
  sl_status (*coll_open)(sl__dev_coll **out);
  /* A box move or fill on a device's memory, queued on s (kernels/box.h:
   * sl__cuda_box), for boxing steps between NCCL calls. */
  sl_status (*box)(const sl__box_op *b, sl__stream *s);
} sl__session_backend;

/* One CUDA device of this node's tasks (devices.c). */
typedef struct sess_dev {
  int index; /* cuda:index */
  const sl__session_backend *be;
  sl__device *dev;
  sl__caching_alloc *mem;    /* device memory: registers, workspaces */
  sl__caching_alloc *pinned; /* its host side's registers */
  sl__stream *stream[SL_STREAMS_DEFAULT]; /* per actor stream kind */
  sl__notifier *notify;
  sl__dev_handle boxing; /* the device as its boxing groups see it */
} sess_dev;

/* An actor's view of its task: one per plan task, the actor's ctx. */
typedef struct task_rt {
  sl_session *s;
  const sl__task *t;
  int32_t id;
  sl_actor_id actor;
  int64_t fired;     /* firings completed: the step of the next one */
  int32_t *slot_of;  /* task input -> actor input slot (duplicate
                        inputs share one); -1 - j: output j's register,
                        a variable updated in place */
  int32_t tick_slot; /* actor input slot of the tick, -1 */
  /* OP */
  const sl__pnode *node;
  sl__kernel_ctx k; /* filled at build; pointers set per firing */
  /* FEED / FETCH: index into s->feeds / s->fetches; FETCH: rank slot */
  int32_t io, io_slot;
  sl_slice slice; /* FEED / FETCH / LOCAL: the shard's box */
  /* CONST: the variable's initial shard (on a CUDA device: init_dev) */
  void *init, *init_dev;
  size_t bytes;
  /* Tasks on a CUDA device: the device; COPY: host to device, or back */
  sess_dev *dev;
  bool copy_h2d;
  /* COLL / XCHG: the engine of its collective (s->engines) and this
   * task's member */
  const sl__coll_engine *engine;
  sl__dxchg *local; /* LOCAL on a GPU: its program (comm/coll/dev_xchg.c) */
  int member;
  sl_completion *pending;
  /* LOCAL: slice (keep part `member` of n along axis) or zero */
  sl_boxing_op local_op;
  int local_n, local_axis;
  bool local_from_b; /* zero: from B (member 0 keeps) or from S */
  sl_reduce_op local_reduce;
  int64_t in_dims[SL_MAX_DIMS], out_dims[SL_MAX_DIMS];
  sl_dtype dtype;
  int ndim;
} task_rt;

/* An input: the logical value the program fed, read by feed actors. */
typedef struct feed_rt {
  const char *name;
  int32_t node;
  sl__meta meta;
  size_t bytes;
  void *data; /* the whole tensor, 64-byte aligned */
  bool fed;
  /* Its feed tasks, and their firings so far in this job: a new value may
   * replace `data` once every step started has read it. */
  int32_t n_readers;
  atomic_int_least64_t reads;
} feed_rt;

/* A fetch: shards staged by fetch actors, `depth` pieces deep. */
typedef struct fetch_rt {
  const char *name;
  int32_t node;
  sl__meta meta;
  size_t bytes;
  bool of_variable; /* the value is a variable with an update: its
                       pieces are versions, the wanted one is `steps` */
  bool partial;
  sl_reduce_op reduce;
  int n_ranks;      /* fetch tasks */
  int32_t *ranks;   /* their placement ranks */
  sl_slice *slices; /* their boxes */
  size_t *shard_bytes;
  int depth, slots; /* pieces kept; rank slots allocated */
  void **stage;     /* [(piece % depth) * slots + rank slot] */
  int64_t *staged;  /* the piece each holds, -1 none (under s->lock) */
} fetch_rt;

static inline int sl__fetch_at(const fetch_rt *f, int64_t piece, int slot) {
  return (int)(piece % f->depth) * f->slots + slot;
}

/* An npy_read node's file as this session opened it (a plan read from
 * bytes names it by path), and the node's attributes naming its id. */
typedef struct sess_npy {
  int32_t node, id;
  sl__attrs attrs;
} sess_npy;

/* A tick source emulated by the driver: its registers and readers. */
typedef struct drv_tick {
  pthread_mutex_t lock;
  sl_actor_id actor;
  int32_t desc;
  int32_t count;
  int32_t n_cons;
  sl_actor_id *cons;
  uint16_t *cons_slot;
  int32_t *pending; /* per register: readers yet to return it */
  int32_t *free_q;  /* free register indices (count entries) */
  int32_t n_free;
  int64_t sent; /* pieces sent */
  /* Remote sessions: the tick is a real source actor of the program's job
   * whose firing for a step not yet released is deferred until it is. */
  sl_completion *parked;
} drv_tick;

typedef struct sl__remote sl__remote;
typedef struct sl__save sl__save;
typedef struct sl__cp_client sl__cp_client;

/* state.c: what a variable starts as when the next job is built, instead
 * of its initializer: a value the program wrote (whole), its shards
 * carried over from the job before (by placement rank), or a checkpoint's
 * tensor. At most one is set. */
typedef struct sl__var_src {
  void *logical;
  void **shards;
  const sl_checkpoint *ck;
  int32_t tensor;
} sl__var_src;

/* What a remote session's next job starts its variables from, beside
 * the values the program wrote (handoff.c): a checkpoint (restore: every
 * variable; load: the weights it names), and the other variables carried
 * over from version carry_version of job carry_job. */
typedef struct sl__next_start {
  const char *restore, *load;
  bool carry;
  uint64_t carry_job;
  int64_t carry_version;
} sl__next_start;

/* A session runs its plan: after lowering, nothing in it reads the graph
 * (DESIGN.md section 5 step 7), so a daemon's session needs none. */
struct sl_session {
  sl_session_config cfg;
  /* The plan this process runs: the whole plan (embedded), or its
   * machine's part (over daemons: graph/plan_part.c). A remote program
   * keeps the whole plan too, to give every daemon its part. */
  sl__pplan *pp;
  sl__pplan *whole;
  sl_actor_graph *plan;
  sl_job *job;
  sl__comm *comm;
  /* Daemons: this node's collectives between nodes (borrowed), the job
   * (it names the collectives' instances) and the collectives spanning
   * nodes that this node takes part in. */
  sl__net_coll *nc;
  uint64_t job_id;
  /* Daemons: the pool this node's host registers come from, and the other
   * nodes' pools mapped here (shared_regs.c); NULL without. */
  sl__shm_pool *pool;
  sl__shm_view *views;
  uint32_t n_views;
  /* The engines of this node's collectives (comm/coll/engine.h), one per
   * boxing step's group. */
  int32_t n_engines;
  sl__coll_engine *engines;
  uint32_t driver; /* the driver's node id */
  /* Remote sessions (remote.c) and daemons (daemon.c) build the whole
   * actor plan in every process: feeds, fetches and ticks are actors of
   * the driver (the program, data-plane rank nnodes); each process runs
   * the job of its own node, self_node. Embedded: false, 0. */
  bool remote;
  uint32_t self_node;
  sl__remote *rm;
  char *trace_path; /* as asked; the job writes it with ".node0" */
  int32_t n_tasks;
  task_rt *rt;
  int32_t n_counted;   /* actors counted for step completion */
  int32_t *actor_desc; /* plan register -> actor plan descriptor */
  void *var_inits;     /* per register: a variable's init context */
  int32_t n_npy;
  sess_npy *npy;
  int32_t n_feeds, n_fetches;
  feed_rt *feeds;
  fetch_rt *fetches;
  int32_t n_ticks;
  drv_tick *ticks;
  int32_t n_workers;
  int n_devices;
  int32_t n_devs; /* CUDA devices open for this node's tasks */
  sess_dev *devs;
  sl__dev_coll *dcoll; /* their collectives, once a group needs them */
  /* The CPU devices of this node's ops and their threads (cpu_teams.c) */
  struct {
    int index;
    sl__team *team;
    int cpu; /* its collective worker's CPU (its compute thread's, where
                the teams are pinned and take every CPU), else -1 */
  } * cpu_teams;
  int32_t n_cpu_teams;
  int cpu_threads; /* per CPU device */
  bool cpu_pinned;
  int spin_us;    /* the job's longest spin; negative: none */
  sl__dseq *dseq; /* the groups spanning nodes, once there is one */

  pthread_mutex_t lock;
  pthread_cond_t cond;
  atomic_int_least64_t released; /* ticks released */
  int64_t completed;             /* steps complete (under lock) */
  atomic_int ring[SL__STEP_RING];
  /* Kernels' failures held back until this node completed the steps
   * before the earliest of them, and another node's ABORT for such a
   * failure (acts.c, under lock; held_abort.piece < 0: none). */
  struct sl__held_failure *held_failures;
  sl_msg held_abort;
  atomic_int failed;   /* sl_status of the job's failure */
  atomic_bool waiting; /* the program waits inside a call */
  atomic_bool ending;  /* remote: finishing or aborted; ticks no longer
                          park */
  atomic_uint_least64_t driver_msgs;
  int64_t steps; /* steps run (program's thread), counted from the start
                    of the run or the restored checkpoint's step */
  /* The step at which the current job started (state.c restarts jobs):
   * its piece k is step base + k. */
  int64_t base;
  sl__var_src *var_src; /* per graph node; NULL until a restart needs it */
  bool var_dirty;       /* a written value waits for the next restart */
  sl__save *bg_save;    /* a background save in progress (save.c) */
  sl_status bg_status;  /* the first background save that failed, and why */
  char bg_msg[1024];
  /* Files variables start from (sl_variable_load), open while the first
   * job is built. */
  int32_t n_files;
  sl_checkpoint **files;
  const char **file_paths; /* the graph's strings */
  /* Daemons: the checkpoint a restored or loading job's variables start
   * from. */
  sl_checkpoint *restore_ck;
  /* Remote: how the daemons' next job starts its variables (state.c sets
   * it for a restart, handoff.c tells the daemons). */
  sl__next_start next;
  /* Daemons: the program's working directory (for relative paths), and a
   * copy of this node's shards of every variable, by graph node and
   * placement rank, at version held_version of the job (handoff.c). */
  char *cwd;
  void ***held;
  int64_t held_version;
  bool started, finished, waited;
  /* Programs waiting in sl_session_fetch for a staged piece (under lock):
   * a fetch actor wakes them only if there are some, so that staging a
   * value does not also wake a program waiting for its step (a wake-up
   * costs the waking thread microseconds on a virtual machine). */
  int fetch_waiters;
  /* What the waiting program waits for (under lock): a step's end wakes
   * it only once `completed` reaches wake_completed, and a fetch actor
   * only once it stages piece fetch_want or later, so that steps run
   * ahead (sl_session_start) do not wake a program waiting for a later
   * one: the wake-up costs the waking device microseconds, and the woken
   * program takes a core from the devices while they run. 0: every step
   * wakes the waiters (a daemon's request threads). */
  int64_t wake_completed, fetch_want;
  /* Programs waiting in sl_session_feed for the started steps to read an
   * input (feed actors wake them only if there are some). */
  atomic_int feed_waiters;
  sl_status final;
  char errmsg[1400];
  sl_session_stats stats;
};

/* build.c: the actor plan, task contexts, collectives, feeds and fetches. */
sl_status sl__session_build(sl_session *s);
void sl__session_free_build(sl_session *s);
/* Ends every collective of this node's job with st: members waiting for
 * peers (in this process or on other nodes) complete with it, and so does
 * every later arrival; failures held back (acts.c) fail now. Any thread. */
void sl__session_abort_collectives(sl_session *s, sl_status st,
                                   const char *msg);
/* acts.c: fails the firings whose failures were held back and delivers
 * the ABORT held back, if any. Any thread, s->lock not held. */
void sl__session_release_failure(sl_session *s);
/* acts.c, the data plane's abort hook (comm/data/dp.h; ctx: the session):
 * another node's ABORT for a firing of step k that failed is held until
 * this node has completed the steps before k, for the reason a failure
 * here is (op_failed). */
bool sl__session_hold_abort(void *ctx, const sl_msg *m);
/* Waits while an ABORT is held (until this node has completed the steps
 * before the failed one) or until *stop. The monitors of the control
 * plane's job state call it before ending the job themselves, so that a
 * failure the master announces first does not cut the steps short. */
void sl__session_wait_held_abort(sl_session *s, const atomic_bool *stop);

/* acts.c: the act of each task kind on a CPU device (or a CUDA device's
 * host side), or on a CUDA device; sl__act_for picks one (NULL: none). */
sl_act_fn sl__act_for(sl__task_kind kind, bool on_cuda);
/* A remote session's tick source: fires for released steps, defers the
 * firing of the next one until the program releases it. */
sl_status sl__act_tick(sl_act *a);
/* The collectives' waiting hook, in-process and between nodes (acts.c);
 * arg is a task_rt. */
void sl__coll_member_waiting(void *arg, bool waiting);
/* Counts task rt's firing for its step (every actor calls it once per
 * firing, when its work is done). */
void sl__step_done(task_rt *rt);

/* cpu_teams.c */
/* SL_EINVAL naming the field for a bad cpu_threads, cpu_pin or spin_us. */
sl_status sl__session_cpu_config_check(const sl_session_config *c);
/* Starts a thread team for each CPU device this node's ops run on. */
sl_status sl__session_open_cpu_teams(sl_session *s);
/* The job's spin (s->spin_us, set by sl__session_open_cpu_teams). */
void sl__session_job_spin(const sl_session *s, sl_job_config *jc);
/* After the job is destroyed: stops them. */
void sl__session_close_cpu_teams(sl_session *s);
/* The team of a CPU device; NULL for other devices. */
sl__team *sl__session_cpu_team(const sl_session *s, uint32_t device);
/* The CPU to pin the collective worker of `device` to, or -1 (not a CPU
 * device of this node's, or none: see cpu_teams.c). */
int sl__session_worker_cpu(const sl_session *s, uint32_t device);

/* devices.c */
/* Tests: how CUDA devices open and run ops, process-wide; NULL restores
 * the CUDA runtime. Set it while no session exists. */
void sl__session_set_backend(const sl__session_backend *b);
/* Opens every CUDA device that this node's tasks use (s->devs). */
sl_status sl__session_open_devices(sl_session *s);
/* After the job is destroyed: frees what the devices hold and closes them. */
void sl__session_close_devices(sl_session *s);
/* The open device behind a CUDA device id or its host side; NULL for a CPU
 * device or one not open in this process. */
sess_dev *sl__session_dev(const sl_session *s, uint32_t id);
/* Points the job's register memory at the session's devices (when any). */
void sl__session_job_memory(sl_session *s, sl_job_config *jc);

/* Daemons, before starting the job: sl__dseq_connect for s's groups that
 * span nodes, through kv. */
sl_status sl__session_connect_dgroups(sl_session *s, const sl__dev_kv *kv);

/* Copies host bytes to the device, or device bytes to the host, and waits
 * (set-up, and state read between steps). */
sl_status sl__dev_upload(sess_dev *d, void *dst, const void *src, size_t bytes);
sl_status sl__dev_download(sess_dev *d, void *dst, const void *src,
                           size_t bytes);

/* session.c: creates and starts the job of s->plan (built). */
sl_status sl__session_start_job(sl_session *s);
/* Waits until every step the program started is complete: SL_OK, or the
 * failure of one of them as sl_session_run reports it (rolled back where
 * possible). */
sl_status sl__session_settle(sl_session *s);

/* state.c */
/* Whether plan node `node` is a variable, and its value. */
static inline bool sl__session_is_variable(const sl_session *s, int32_t node) {
  return node >= 0 && node < s->pp->n_nodes &&
         strcmp(s->pp->nodes[node].kind, "variable") == 0;
}
static inline const sl__ptensor *sl__session_var_value(const sl_session *s,
                                                       int32_t node) {
  return &s->pp->nodes[node].value;
}
/* SL_ESTATE without a job, after a failure or finish; `what` starts the
 * message. Waits for the steps started first (sl__session_settle): the
 * calls that need it read or change the state between steps. */
sl_status sl__session_check_usable(sl_session *s, const char *what);
/* Rank `rank`'s shard of variable `node` as version `version` of the
 * current job (idle between steps) holds it, into buf. */
sl_status sl__session_job_shard(const sl_session *s, int32_t node, int rank,
                                int64_t version, void *buf, size_t bytes);
/* The same shard's host memory when it is in host memory (read it only
 * while the job stays idle), else NULL. */
const void *sl__session_job_shard_host(const sl_session *s, int32_t node,
                                       int rank, int64_t version, size_t bytes);
/* v's whole bytes. */
size_t sl__session_value_bytes(const sl__ptensor *v);
/* Whether rank r's shard of v is one a save stores: coordinate 0 on
 * every mesh axis v is broadcast along (the others hold copies). */
bool sl__session_stores_rank(const sl__ptensor *v, int r);
/* Rank r's box of v's shape, and its bytes. */
sl_status sl__session_rank_box(const sl__ptensor *v, int r, sl_slice *box,
                               size_t *bytes);
/* Whether placement rank r of v is on node `node`. */
bool sl__session_rank_on_node(const sl__ptensor *v, int r, uint32_t node);
/* The sources by graph node (allocated on first use; NULL: SL_ENOMEM). */
sl__var_src *sl__session_sources(sl_session *s);
/* Restarts the job at step `steps` (sl_session_steps then says so), each
 * variable from its source or, without one, at its current value; then
 * clears the sources. A failure leaves the session failed. */
sl_status sl__session_restart(sl_session *s, int64_t steps);
/* Fills buf with placement rank `rank`'s shard of variable node `node` as
 * the job being built starts it: its source (above) or its initializer. */
sl_status sl__session_var_shard(const sl_session *s, int32_t node, int rank,
                                void *buf, size_t bytes);
/* Before a step or a save: a restart taking the written values, when
 * there are any. */
sl_status sl__session_apply_writes(sl_session *s);
/* After the job failed in a step (joined, s->final set): restarts it from
 * the variables' values before that step. SL_OK when the session can run
 * again; otherwise why not (the message says). */
sl_status sl__session_roll_back(sl_session *s);
/* Before the first job is built: sources for the variables that start
 * from files (sl_variable_load), the files opened once each; closed (and
 * the sources forgotten) by sl__session_close_files once the job took
 * them. */
sl_status sl__session_open_files(sl_session *s);
void sl__session_close_files(sl_session *s);
/* save.c: for a daemon's job that continues from a checkpoint: its
 * variables' sources (s->restore_ck, closed by sl__session_close_files). */
sl_status sl__session_restore_sources(sl_session *s, const char *path,
                                      int64_t step);
/* A daemon's job that loads weights: the variables `path` names take
 * their values from it (s->restore_ck). */
sl_status sl__session_load_sources(sl_session *s, const char *path);
/* A background save's writer runs at this nice value: training comes
 * first, the writer takes the cores the stream threads leave (Linux gives
 * each thread its own nice value). writer_nice sets the calling thread's
 * and returns the one it had. */
#define SL__WRITER_NICE 10
int sl__session_writer_nice(int nice);
/* Waits for a background save in progress (its outcome kept for
 * sl_session_save_wait). */
void sl__session_save_join(sl_session *s);
/* Every variable of `to` without a source takes its shards (the ranks run
 * here) from version `version` of from's job: from->held when it holds
 * that version (taken over), else its registers (checked to hold it when
 * `check`). to and from may be the same session. */
sl_status sl__session_carry(sl_session *to, sl_session *from, int64_t version,
                            bool check);
/* Reads every checkpoint source into shards by rank now (the checkpoint
 * may be closed then). On failure the sources read so far are dropped. */
sl_status sl__session_read_sources(sl_session *s);
/* The pieces this node stores of a save (0: it holds no variable), -1 on
 * failure. */
int32_t sl__session_save_pieces(const sl_session *s);
/* A daemon: writes its node's file of the program's save (version
 * `version` of its job, step `step`, from s->held when it holds that
 * version) into dir; its name, size, CRC32C. */
sl_status sl__session_save_node(sl_session *s, const char *dir, int64_t step,
                                int64_t version, char *name, size_t n,
                                int64_t *bytes, uint32_t *crc);
/* state.c: a remote session's new job at step `steps`, its daemons'
 * variables from checkpoint `path` (restore: all of them; otherwise the
 * weights it names, the others at their current values). A failure
 * leaves the session failed. */
sl_status sl__session_restart_remote(sl_session *s, const char *path,
                                     bool restore, int64_t steps);
/* Whether variable node's registers (rank `rank`'s; every rank's for -1)
 * of the job hold version `version` (no update of it written or under
 * way since). */
bool sl__session_has_version(const sl_session *s, int32_t node, int rank,
                             int64_t version);
/* Whether placement rank r of variable node is this process's to run. */
bool sl__session_rank_here(const sl_session *s, int32_t node, int r);
/* Frees the sources and closes their files (once the job took them). */
void sl__session_drop_sources(sl_session *s);

/* handoff.c: variables from one job to the next over daemons. */
/* The program: the starts text of the job `job` being submitted (*text
 * malloc'd), the written values put in the control plane's store. */
sl_status sl__handoff_starts(sl_session *s, sl__cp_client *cp, uint64_t job,
                             char **text);
/* A daemon, building job `job`: its variables' sources from the starts
 * text, carrying over from kept (the job before on this node, or NULL). */
sl_status sl__handoff_take(sl_session *s, const char *text, sl_session *kept,
                           sl__cp_client *cp, uint64_t job);
/* The program, once the daemons took the job: the values put for it are
 * emptied from the store. */
void sl__handoff_forget(sl_session *s, sl__cp_client *cp, uint64_t job);
/* A daemon: copies this node's shards of every variable at version
 * `version` of its job (s->held), or frees them. */
sl_status sl__session_hold(sl_session *s, int64_t version);
void sl__session_free_held(sl_session *s);
/* Frees the sources (sl_session_destroy). */
void sl__session_free_state(sl_session *s);

/* driver.c */
extern const sl_transport_vtable sl__driver_transport;
/* Sends ticks up to s->released on every tick source that has a free
 * register. Any thread. */
void sl__driver_pump(sl_session *s);
/* End-of-data on every tick edge (finish). */
void sl__driver_end(sl_session *s);
/* Records a failure (the first one wins), aborts waiting collectives and
 * wakes the program. Any thread. */
void sl__session_fail(sl_session *s, sl_status st);

/* remote.c: the program's side over daemons (SLUICE_MASTER set). */
/* Whether this session should use daemons (cfg or SLUICE_MASTER). */
bool sl__remote_wanted(const sl_session_config *c);
/* After lowering: connects, builds, submits the job and starts the
 * program's share of it. */
sl_status sl__remote_start(sl_session *s);
/* Waits for the program's job to end (joining its watcher) and for the
 * daemons' outcome; sets s->final and s->errmsg. */
sl_status sl__remote_wait(sl_session *s);
/* After the wait, with a trace asked for: every node's trace (the
 * daemons' through the store) merged into the session's trace_path.
 * SL_EIO when it cannot be written; a node without one is warned about. */
sl_status sl__remote_traces(sl_session *s);
/* The job's id on the control plane (0 before one was submitted). */
uint64_t sl__remote_job(const sl_session *s);
/* Requests to the daemons between steps (daemon_requests.c lists them):
 * ask sends one to every daemon (its number in *seq); answer waits for
 * node rank's answer text (an "E" answer is the failure it names);
 * answer_data reads the bytes that came with it; forget empties the
 * request's keys once every node answered. */
sl_status sl__remote_ask(sl_session *s, const char *req, int64_t *seq);
sl_status sl__remote_answer(sl_session *s, int64_t seq, int rank, char *ans,
                            size_t n);
sl_status sl__remote_answer_data(sl_session *s, int64_t seq, int rank,
                                 void *buf, size_t bytes);
void sl__remote_forget(sl_session *s, int64_t seq);
/* Every daemon copies its shards of every variable at version `version`
 * of the job (for the next job, or a background save to write). */
sl_status sl__remote_hold(sl_session *s, int64_t version);
/* Variable node's logical value at version `version` of the job, from the
 * daemons that store its shards. */
sl_status sl__remote_read(sl_session *s, int32_t node, int64_t version,
                          void *data);
/* After the job failed: whether every daemon's variables still hold
 * version `version` (what a roll-back carries over); SL_ECOMM when a
 * node was lost. */
sl_status sl__remote_can_roll_back(sl_session *s, int64_t version);
/* The session is done with its job: its daemons may free what they kept
 * of it for a restart. */
void sl__remote_release(sl_session *s);
/* Completes the ticks parked for released steps (remote pump). */
void sl__remote_pump(sl_session *s);
/* Ends the job: no more ticks after those released. */
void sl__remote_end(sl_session *s);
/* Before the job is destroyed: joins the watcher (aborting a job still
 * running) and detaches. */
void sl__remote_destroy(sl_session *s);
/* After: frees the endpoint and leaves the cluster. */
void sl__remote_free(sl_session *s);

#endif
