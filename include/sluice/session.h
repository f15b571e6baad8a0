/* sluice — sessions: compile a graph, lower it to a plan of actors and run
 * training or inference steps (DESIGN.md sections 1, 5, 7; docs/api.md,
 * "Sessions"; docs/plan.md for plans).
 *
 * The local (embedded) session runs in this process: one stream thread per
 * device and stream used (compute, copy, collective), collectives between
 * devices in shared memory. A session is one long-lived job: steps are
 * released one tick at a time, so sl_session_run(s, 1) runs exactly one
 * step — the program can read the loss after each step and no weight is
 * updated beyond the steps asked for.
 *
 * A session is used from one thread at a time. */
#ifndef SLUICE_SESSION_H
#define SLUICE_SESSION_H

#include <stdio.h>

#include <sluice/core.h>
#include <sluice/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_session sl_session;

typedef enum sl_session_kind {
  SL_SESSION_LOCAL = 0, /* embedded: every device in this process */
  /* Daemons of a cluster (docs/cluster.md): the master and token from the
   * config, else from SLUICE_MASTER (or MASTER_ADDR/MASTER_PORT, Slurm)
   * and SLUICE_TOKEN. A master in the config or SLUICE_MASTER set makes
   * the session remote. */
  SL_SESSION_REMOTE = 1,
} sl_session_kind;

/* Sized: `size` is sizeof(sl_session_config) of the header the program was
 * built with, so a newer library reads an older program's struct (the
 * fields it lacks take their defaults). Initialise with
 * sl_session_config_default() or SL_SESSION_CONFIG(.field = value, ...). */
typedef struct sl_session_config {
  size_t size;
  sl_session_kind kind;
  /* Chrome trace of every firing, written when the session is finished or
   * destroyed. NULL: SLUICE_TRACE (unset or "": no trace). */
  const char *trace_path;
  /* The plan, written when the session is created: ".pb" protobuf, ".dot"
   * Graphviz, anything else text. NULL: SLUICE_PLAN_DUMP. */
  const char *plan_dump_path;
  /* No progress for this long inside a run is a hang (SL_EHANG with a
   * report). 0: SLUICE_HANG_TIMEOUT_MS or 10 s; negative: never. */
  int64_t hang_timeout_ms;
  /* Collectives whose largest buffer is at most this many bytes run on
   * one thread ("direct"), larger ones in parallel, one chunk per device.
   * 0: SLUICE_COMM_DIRECT_MAX or 64 KiB; negative: always parallel. */
  int64_t comm_direct_max_bytes;
  /* Threads of each CPU device (intra-op parallelism: docs/cpu.md).
   * 0: SLUICE_CPU_THREADS, or the CPUs this process may use shared out
   * evenly between the CPU devices this node's ops run on (at least 1). */
  int cpu_threads;
  /* Pin each thread of the CPU devices to a CPU of its own (device 0's
   * threads on the first CPUs this process may use, then device 1's, ...,
   * round robin past the last): 1 yes, -1 no, 0: SLUICE_CPU_PIN, else yes
   * when all the threads fit in the CPUs this process may use. */
  int cpu_pin;
  /* How long a thread of the job spins waiting for its next message
   * before it sleeps, in microseconds. 0: SLUICE_SPIN_US, else 1000 when
   * the CPU devices' threads fit in the CPUs this process may use (a
   * sleeping thread woken by a collective's end can then wait a scheduler
   * tick behind another thread), else 20; negative: never spin. */
  int spin_us;
  /* The cluster's master, "host:port" (read while the session is created);
   * setting it makes the session remote. NULL: from the environment, as
   * above. */
  const char *master;
  /* The cluster's token (read while the session is created). NULL:
   * SLUICE_TOKEN. */
  const char *token;
  /* How many steps' values each fetch keeps: sl_session_fetch_step reads
   * any of the last fetch_depth steps started (each kept value costs the
   * fetch's bytes). 0: 2. */
  int32_t fetch_depth;
} sl_session_config;

/* The defaults (every field zero) with the size set. */
#define SL_SESSION_CONFIG(...)                                                 \
  ((sl_session_config){.size = sizeof(sl_session_config), __VA_ARGS__})
static inline sl_session_config sl_session_config_default(void) {
  return SL_SESSION_CONFIG(.kind = SL_SESSION_LOCAL);
}

/* Compiles g (SBP inference, boxing), lowers it, builds one actor per task
 * and starts the job, which waits for the first step. The graph must
 * outlive the session; it is frozen. cfg may be NULL (defaults).
 * Returns the graph's error for a graph with one, SL_EINVAL (bad config),
 * SL_EUNSUPPORTED (e.g. CUDA placements in this build), SL_ENOMEM, SL_EIO
 * (plan dump). */
SL_API sl_status sl_session_create(sl_graph *g, const sl_session_config *cfg,
                                   sl_session **out);

/* Gives input `name` its logical (global) value: a row-major buffer of
 * exactly the input's shape and dtype, copied. It is used by every step
 * run or started after this call until fed again (steps already started
 * keep the value before: the feed waits until they have read it, at their
 * start). SL_ENOTFOUND (no such input),
 * SL_EINVAL naming the input and both sizes for a wrong size, SL_ESTATE
 * after a failure. */
SL_API sl_status sl_session_feed(sl_session *s, const char *name,
                                 const void *data, size_t bytes);

/* Runs `steps` steps (>= 1) and returns when they are done. SL_ESTATE when
 * an input was never fed or the session failed earlier; otherwise a
 * kernel's error naming the actor and op ("actor 'fc1@r2' (node 0, device
 * 2, stream 0): op 'fc1' (matmul): ..."), SL_EHANG with the hang report.
 * A failed step is rolled back: the steps before it stay done, no
 * variable keeps a partial update, and the session can run again (the
 * message ends "; step N was rolled back"). Where that is impossible (a
 * session over daemons; an update the failed step already applied in
 * place) the message says so and the session only reports the failure
 * from then on. */
SL_API sl_status sl_session_run(sl_session *s, int64_t steps);

/* Asynchronous dispatch: starts `steps` steps (>= 1) and returns without
 * waiting for them, so the program can feed the next input or read an
 * earlier step's fetches while they run. Started steps are counted by
 * sl_session_steps; a step's failure is returned by the next call that
 * waits for it (sl_session_wait, a fetch of it, a feed, or another start)
 * as sl_session_run returns it, rolled back with every step after it.
 * Calls that read or change state between steps (save, restore, load,
 * read or write a variable, finish) first wait for the started steps. At
 * most 60 steps are released to the job at a time: beyond that start
 * waits for the oldest to complete. SL_ESTATE as for sl_session_run. */
SL_API sl_status sl_session_start(sl_session *s, int64_t steps);

/* Waits until every started step is complete: SL_OK, or a failure as
 * sl_session_run returns it. */
SL_API sl_status sl_session_wait(sl_session *s);

/* Copies fetch `name`'s logical value into data (bytes must equal its
 * size): the value of the last step run — for a fetched variable, its
 * value after that step's update. Shards are assembled from the devices
 * (partial values reduced in rank order). SL_ENOTFOUND, SL_EINVAL for a
 * wrong size, SL_ESTATE before the first step or after a failure. */
SL_API sl_status sl_session_fetch(sl_session *s, const char *name, void *data,
                                  size_t bytes);

/* Fetch `name`'s value of step `step` (counted as sl_session_steps counts:
 * after step k has run, sl_session_steps returns k + 1), waiting until it
 * is complete. Only the last fetch_depth steps started can be fetched
 * (sl_session_config; 2 by default): SL_EINVAL for an older step (its
 * value was overwritten) or one not started, and otherwise as
 * sl_session_fetch. With sl_session_start this overlaps the program and
 * the job: start steps k + 1.., then read step k. */
SL_API sl_status sl_session_fetch_step(sl_session *s, const char *name,
                                       int64_t step, void *data, size_t bytes);

/* The shape and dtype of fetch `name`. SL_ENOTFOUND. Either out may be
 * NULL. */
SL_API sl_status sl_session_fetch_info(const sl_session *s, const char *name,
                                       sl_shape *shape, sl_dtype *dtype);

/* Steps run so far, those started (sl_session_start) included. */
SL_API int64_t sl_session_steps(const sl_session *s);

typedef struct sl_session_stats {
  int64_t steps;
  uint32_t devices, threads, actors;
  uint64_t registers, register_bytes;
  uint64_t firings;
  /* After sl_session_finish: registers still in flight, messages never
   * handled, and descriptors whose peak exceeded their quota (all 0 in a
   * healthy run). */
  uint64_t in_flight, messages_left, over_quota;
  uint64_t collective_rounds_direct, collective_rounds_parallel;
  double run_ms; /* job start to finish */
  /* Threads of each CPU device of this node's ops (0: none) and whether
   * they are pinned (sl_session_config.cpu_threads, cpu_pin). */
  uint32_t cpu_threads;
  bool cpu_pinned;
  int32_t spin_us; /* the job's threads' longest spin (config.spin_us) */
} sl_session_stats;

/* Ends the job: the steps run are complete, the threads drain and stop,
 * the trace is written. Returns the session's final status (SL_OK or the
 * failure). Later runs return SL_ESTATE; fetch still works. Idempotent. */
SL_API sl_status sl_session_finish(sl_session *s);

/* Statistics; the job's counters are complete after sl_session_finish.
 * SL_EINVAL for NULL. */
SL_API sl_status sl_session_get_stats(const sl_session *s,
                                      sl_session_stats *out);

/* Finishes (if needed) and frees the session. NULL is a no-op. */
SL_API void sl_session_destroy(sl_session *s);

/* ---- memory ------------------------------------------------------------- */

/* What a device's bytes hold (docs/plan.md, "Memory"). */
typedef enum sl_memory_category {
  SL_MEMORY_WEIGHTS = 0,       /* variables' values (and their copies) */
  SL_MEMORY_OPTIMIZER = 1,     /* optimizer state and the optimizer's ops */
  SL_MEMORY_GRADIENTS = 2,     /* outputs of backward ops */
  SL_MEMORY_ACTIVATIONS = 3,   /* feeds and outputs of forward ops */
  SL_MEMORY_COMMUNICATION = 4, /* boxing steps' outputs, copies between a
                                  device and its host side, mirrors of
                                  other machines' registers */
  SL_MEMORY_WORKSPACE = 5,     /* the largest kernel workspace */
} sl_memory_category;
#define SL_MEMORY_CATEGORIES 6

/* "weights", "optimizer", "gradients", "activations", "communication",
 * "workspace"; "?" for anything else. */
SL_API const char *sl_memory_category_name(sl_memory_category c);

/* One device's memory as the plan lays it out. Registers whose lifetimes
 * within a step the plan orders share one block per device; the rest
 * (variables, registers with more than one buffer, those read on other
 * machines) have their own. */
typedef struct sl_memory_stats {
  char device[48];   /* "cpu:0", "cuda:1", "cuda:1/host"; with several
                        machines "n1/cpu:0" */
  int64_t allocated; /* bytes the device holds for the job: the shared
                        block, registers of their own, mirrors of other
                        machines' registers and the largest workspace */
  int64_t peak;      /* the most of them live at once, in the order the
                        plan gives the device's tasks */
  int64_t category[SL_MEMORY_CATEGORIES]; /* peak, by what it holds */
  int64_t unshared;         /* what the registers would take with no sharing */
  int32_t shared_registers; /* descriptors placed in the shared block */
  int32_t control_edges;    /* edges added to order the device's tasks */
} sl_memory_stats;

/* Devices with memory in the session's plan, and their stats by index
 * 0..count-1 (the order `sluice plan --memory` prints). SL_ENOTFOUND for
 * an index out of range; *out is zeroed then. */
SL_API int32_t sl_session_memory_device_count(const sl_session *s);
SL_API sl_status sl_session_get_memory(const sl_session *s, int32_t device,
                                       sl_memory_stats *out);

/* ---- variables, checkpoints and failed steps ---------------------------- */
/* docs/checkpoint.md. Every call here runs between steps. Values are
 * logical (global) tensors, row-major, whatever the layout. A session over
 * daemons saves and restores (the directory must be the same path on
 * every node: a shared file system); the other calls return
 * SL_EUNSUPPORTED there for now. */

/* A variable of the session's graph: a weight, a constant the program
 * made (sl_variable_set_trainable false), or optimizer state, which
 * sl_minimize names "<weight>.momentum" (SGD), "<weight>.m" and
 * "<weight>.v" (Adam, AdamW). Strings are the graph's. */
typedef struct sl_variable_info {
  const char *name;
  sl_shape shape;
  sl_dtype dtype;
  bool trained;   /* updated by every step (weights and optimizer state) */
  bool optimizer; /* optimizer state */
} sl_variable_info;

/* Variables, in graph order, by index 0..count-1. SL_ENOTFOUND for an
 * index out of range (*out zeroed). */
SL_API int32_t sl_session_variable_count(const sl_session *s);
SL_API sl_status sl_session_get_variable(const sl_session *s, int32_t i,
                                         sl_variable_info *out);

/* Copies variable `name`'s value after the steps run so far (or as last
 * written) into data; bytes must be its size. SL_ENOTFOUND, SL_EINVAL
 * naming both sizes, SL_ESTATE after an unrecoverable failure. */
SL_API sl_status sl_session_read_variable(sl_session *s, const char *name,
                                          void *data, size_t bytes);

/* Sets variable `name` to a logical value (copied): the next step reads
 * it. The session takes the new value when it next runs, saves or
 * restores, by restarting its job with every variable's current value
 * (docs/checkpoint.md, "Restarts"). Same errors as the read. */
SL_API sl_status sl_session_write_variable(sl_session *s, const char *name,
                                           const void *data, size_t bytes);

/* Writes a checkpoint of every variable (weights, optimizer state) and the
 * step into directory `dir` (created when missing): each distinct shard
 * once, in this node's safetensors file, then index.json renamed into
 * place — a save killed at any point leaves the previous checkpoint in
 * `dir` loadable. SL_EIO naming the path, SL_ESTATE. */
SL_API sl_status sl_session_save(sl_session *s, const char *dir);

/* sl_session_save in the background: every shard is copied to host memory
 * now (the state after the steps run so far) and written by a thread of
 * the session while the program runs more steps. One at a time: a second
 * call, a save, restore, load or destroy first waits for the one before.
 * Returns the snapshot's errors; the write's come from
 * sl_session_save_wait (a failure is kept until it is asked for). Takes
 * host memory for a copy of the state. Embedded sessions only for now. */
SL_API sl_status sl_session_save_async(sl_session *s, const char *dir);

/* Waits for the background save, if any, and returns the first failure of
 * the background saves since it was last called (SL_OK when none). */
SL_API sl_status sl_session_save_wait(sl_session *s);

/* Continues from a checkpoint: every trained variable (and every constant
 * the checkpoint holds) takes its saved value, resharded from the saved
 * layout into this session's by reading only the stored pieces each shard
 * intersects; the step becomes the saved one (sl_session_steps), so Adam's
 * bias correction, random data, dropout and .npy readers continue where
 * the saved run was. Errors name the file and tensor: a tensor missing,
 * of another shape or dtype (SL_EINVAL), a corrupt file (SL_EINVAL,
 * SL_EIO); they leave the session as it was, since every shard is read
 * before the job restarts. Over daemons the daemons read the checkpoint
 * in the new job: one that cannot (another directory, SL_EINVAL naming
 * the node) leaves the session failed. */
SL_API sl_status sl_session_restore(sl_session *s, const char *path);

/* Loads weights by name from a checkpoint or a plain safetensors file:
 * every variable that is not optimizer state and has a tensor of the same
 * name takes its value (shape and dtype must match: SL_EINVAL naming
 * both); the others, the optimizer state and the step are unchanged.
 * *loaded (may be NULL) gets the number of variables set. */
SL_API sl_status sl_session_load(sl_session *s, const char *path,
                                 int32_t *loaded);

/* ---- plans -------------------------------------------------------------- */

typedef enum sl_plan_format {
  SL_PLAN_TEXT = 0,     /* per machine, device, stream: tasks, registers */
  SL_PLAN_DOT = 1,      /* Graphviz, boxing tasks marked */
  SL_PLAN_PROTOBUF = 2, /* graph/plan.proto, for `sluice plan FILE.pb` */
  SL_PLAN_MEMORY = 3,   /* the per-device memory table */
} sl_plan_format;

/* The format a path's extension asks for: ".pb" protobuf, ".dot" DOT,
 * anything else text. */
SL_API sl_plan_format sl_plan_format_for_path(const char *path);

/* Writes the session's plan to path ("-": stdout). SL_EIO, SL_EINVAL. */
SL_API sl_status sl_session_write_plan(const sl_session *s,
                                       sl_plan_format format, const char *path);

/* Compiles g (it becomes frozen, as sl_session_create would) and writes
 * its plan without running anything. Returns the graph's error, SL_EIO,
 * SL_EINVAL. */
SL_API sl_status sl_graph_write_plan(sl_graph *g, sl_plan_format format,
                                     const char *path);

/* Reads a protobuf plan file and writes it in another format to out_path
 * ("-": stdout). SL_EIO, SL_EINVAL for a file that is not a valid plan. */
SL_API sl_status sl_plan_file_convert(const char *pb_path,
                                      sl_plan_format format,
                                      const char *out_path);
/* The same for one machine's part of the plan: what node `node` runs —
 * its devices' tasks with their registers and memory, the ticks that gate
 * them, the boxing steps it takes part in; inputs another node produces
 * name that node and task. node -1 is the whole plan. SL_PLAN_PROTOBUF
 * writes the part node's daemon receives (docs/plan.md, "Parts"; the
 * driver's number: the program's part). SL_EINVAL also for a node the
 * plan does not have. */
SL_API sl_status sl_plan_file_convert_node(const char *pb_path,
                                           sl_plan_format format, int node,
                                           const char *out_path);

/* ---- simulation (docs/pipeline.md) ----------------------------------------
 */

/* Costs for simulating a step. Zero fields take the model's defaults.
 * Sized like sl_session_config: SL_SIM_CONFIG(.field = value, ...) or
 * sl_sim_config_default(). */
typedef struct sl_sim_config {
  size_t size;       /* sizeof(sl_sim_config) */
  double gflops;     /* a device's matmul rate (default 50 GFLOP/s) */
  double copy_gbps;  /* other kernels and copies move bytes at this
                        rate (default 10 GB/s) */
  const char *costs; /* a Chrome trace of a run (SLUICE_TRACE): each task's
                        median firing time there replaces the model's;
                        NULL: the model alone */
  double handoff_us; /* latency from a task's end to a task it readies
                        starting on another stream (a thread's wake-up);
                        0: measured from `costs` when given, else none */
} sl_sim_config;

#define SL_SIM_CONFIG(...)                                                     \
  ((sl_sim_config){.size = sizeof(sl_sim_config), __VA_ARGS__})
static inline sl_sim_config sl_sim_config_default(void) {
  return SL_SIM_CONFIG(.gflops = 0);
}

typedef struct sl_simulation {
  double step_us;         /* predicted time of one step */
  double bubble;          /* the largest idle fraction of a device's
                             compute stream over the step */
  int32_t devices;        /* devices with compute work */
  int32_t tasks_measured; /* tasks whose cost came from the trace */
  double handoff_us;      /* the hand-off latency the simulation used */
} sl_simulation;

/* Replays one step of the session's plan as a discrete-event simulation:
 * each stream runs one task at a time, a task runs once what it reads is
 * done (registers, the plan's order, its boxing group). Fills out and,
 * when report_path is not NULL ("-": stdout), writes the report `sluice
 * plan --simulate` prints: predicted step time, each device's busy time,
 * bubble, planned memory and registers, and its order of pipeline passes.
 * SL_EINVAL naming the tasks of a deadlock, SL_EIO. */
SL_API sl_status sl_session_simulate(const sl_session *s,
                                     const sl_sim_config *cfg,
                                     sl_simulation *out,
                                     const char *report_path);
/* The same for a protobuf plan file. */
SL_API sl_status sl_plan_file_simulate(const char *pb_path,
                                       const sl_sim_config *cfg,
                                       sl_simulation *out,
                                       const char *report_path);

#ifdef __cplusplus
}
#endif
#endif
