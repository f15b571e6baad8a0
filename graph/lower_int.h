/* sluice graph — the physical plan: a compiled graph lowered to tasks (one
 * per device of a node's placement; one per plan rank of each boxing step)
 * and register descriptors (one per task output, with its byte size,
 * device and register count). DESIGN.md section 5 steps 5-7; docs/plan.md
 * describes it and its text, DOT and protobuf forms.
 *
 * Machines are the placements' node ids; one more machine, the driver, is
 * the program itself: it releases each step's tick, one register per
 * device that gates everything the step starts from nothing (feeds, data
 * sources, constants, variable updates), so a job never runs ahead of the
 * steps asked for. */
#ifndef SLUICE_LOWER_INT_H
#define SLUICE_LOWER_INT_H

#include <stdio.h>

#include <sluice/actor.h>
#include <sluice/session.h>

#include "graph_int.h"
#include "sbp_int.h"

typedef enum sl__task_kind {
  SL__TASK_OP = 0,       /* an op's kernel on one rank */
  SL__TASK_FEED = 1,     /* an input's shard, cut from the fed tensor */
  SL__TASK_FETCH = 2,    /* a fetched value's shard, handed to the program */
  SL__TASK_CONST = 3,    /* a variable without update: its value each step */
  SL__TASK_VAR_COPY = 4, /* a variable's next version copied from its
                            update value (when that value has other uses) */
  SL__TASK_COLL = 5,     /* a member of a group collective (boxing step) */
  SL__TASK_LOCAL = 6,    /* a local boxing step: slice or zero */
  SL__TASK_XCHG = 7,     /* a member of a send_recv or copy boxing step */
  SL__TASK_TICK = 8,     /* the step tick of one device, on the driver */
  SL__TASK_COPY = 9,     /* a shard copied between a CUDA device and its
                            host side (H2D or D2H by the registers' devices) */
} sl__task_kind;
#define SL__TASK_KIND_COUNT 10

/* Who runs a boxing task's collective or exchange (COLL and XCHG tasks;
 * NONE for every other task). Lowering decides, the session instantiates. */
typedef enum sl__engine {
  SL__ENGINE_NONE = 0,
  SL__ENGINE_INPROC = 1, /* comm/coll/coll.c: every member in this process */
  SL__ENGINE_NODES = 2,  /* members on several machines: the data plane
                            between daemons (comm/coll/span_coll.c) */
  SL__ENGINE_DEVICE = 3, /* CUDA devices: NCCL, or a device exchange */
} sl__engine;
#define SL__ENGINE_COUNT 4

/* "op", "feed", "fetch", "const", "var_copy", "collective", "local",
 * "exchange", "tick", "copy". */
const char *sl__task_kind_name(sl__task_kind k);

/* Device ids of tasks and registers (and of the actors built from them):
 * CPU device k is k; CUDA device k is SL__DEV_CUDA + k; SL__DEV_HOST + k is
 * the host side of CUDA device k: its pinned host memory and CPU threads,
 * where the device's boxing steps run and its feeds and fetches meet the
 * program, joined to the device by copy tasks. docs/cuda.md, "Sessions on
 * CUDA placements". */
#define SL__DEV_CUDA 4096u
#define SL__DEV_HOST 8192u
#define SL__DEV_END 12288u

typedef enum sl__dev_class {
  SL__DEV_CLASS_CPU = 0,
  SL__DEV_CLASS_CUDA = 1,
  SL__DEV_CLASS_HOST = 2, /* a CUDA device's host side */
} sl__dev_class;

static inline sl__dev_class sl__dev_class_of(uint32_t id) {
  return id >= SL__DEV_HOST   ? SL__DEV_CLASS_HOST
         : id >= SL__DEV_CUDA ? SL__DEV_CLASS_CUDA
                              : SL__DEV_CLASS_CPU;
}
/* The device's index within its type (a host side: its CUDA device's). */
static inline int sl__dev_index(uint32_t id) {
  return (int)(id % SL__DEV_CUDA);
}
/* A CUDA device's host side; any other device itself. */
static inline uint32_t sl__dev_host_side(uint32_t id) {
  return sl__dev_class_of(id) == SL__DEV_CLASS_CUDA
             ? id - SL__DEV_CUDA + SL__DEV_HOST
             : id;
}
/* "cpu:0", "cuda:1", "cuda:1/host" into buf. */
void sl__dev_name(uint32_t id, char *buf, size_t n);

/* What a boxing step's group computes: a group collective, pieces moved
 * between members (send_recv, copy; on GPUs also a group step NCCL does
 * not run as it stands), or one member's own slice or zero. */
typedef enum sl__pcoll_op {
  SL__PCOLL_ALL_REDUCE = 0,
  SL__PCOLL_REDUCE_SCATTER = 1,
  SL__PCOLL_ALL_GATHER = 2,
  SL__PCOLL_ALL_TO_ALL = 3,
  SL__PCOLL_EXCHANGE = 4,
  SL__PCOLL_SLICE = 5,
  SL__PCOLL_ZERO = 6,
} sl__pcoll_op;
#define SL__PCOLL_OP_COUNT 7

/* "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "exchange",
 * "slice", "zero". */
const char *sl__pcoll_op_name(sl__pcoll_op op);

/* The engine-neutral spec of one boxing step's group (DESIGN.md section 5
 * step 7): everything an engine needs to run it, computed once by lowering
 * from the boxing route (sbp/), so that the session instantiates engines
 * from the plan alone. Every COLL, XCHG and LOCAL task names its spec. */
typedef struct sl__pcoll {
  const char *name;          /* "<boxing>.s<step>[.g<group>]" (arena) */
  int32_t node, step, group; /* the boxing node, step, group (-1: none) */
  sl__pcoll_op op;           /* what the step computes */
  sl__engine engine;         /* who runs it (LOCAL: NONE) */
  sl_dtype dtype;
  sl_reduce_op reduce;       /* reductions, reduced pieces and fills */
  int32_t in_axis, out_axis; /* gather, all-to-all: in; scatter,
                                all-to-all: out; slice: out (the part
                                kept); zero from S: in; else -1 */
  sl_shape block;            /* group collectives: the block the members
                                hold together; else the global shape */
  int32_t local_n;           /* slice, zero: the group's size */
  bool local_from_b;         /* zero: from B (member 0 keeps its copy) */
  /* Device engine: NCCL's collective when NCCL computes the step as it
   * stands (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER) with its count per
   * member (a gather's input, a scatter's output), else EXCHANGE. */
  sl__pcoll_op device_op;
  int64_t device_count;
  /* Members: where each runs (a task's machine and device; a CUDA rank's
   * host side unless the engine is the device one), their global boxes
   * before and after, fills, and the pieces between them (sbp/exchange.c;
   * n = members). sl__calloc'd, freed with the plan. */
  uint32_t *machine, *device;
  sl__xgeom geom;
} sl__pcoll;

/* What a kernel sees of one input or output shard (graph/plan_node.c):
 * lowering computes it once per task, the session fills its kernel calls
 * from it. An op task has one per data input then one per output; a feed
 * task one, its shard of the fed tensor; a fetch task one, its shard of
 * the fetched value. */
typedef struct sl__karg {
  sl_slice box;    /* the shard in the global tensor: its shape is the
                      extent (B and P: the whole enclosing part) */
  sl_shape global; /* the global shape (a micro-batch's by-position op and
                      a feed: the step's whole batch) */
  sl_dtype dtype;
  bool partial; /* partial on some mesh axis */
} sl__karg;

typedef struct sl__task {
  sl__task_kind kind;
  const char *name; /* unique: "<node>@r<rank>", "<boxing>.s<step>@p<rank>",
                       "tick@n<machine>.d<device>" */
  int32_t node;     /* logical node index; -1 for ticks */
  int32_t rank;     /* placement rank; boxing tasks: plan rank; -1 ticks */
  int32_t step;     /* boxing step, else -1 */
  int32_t group;    /* COLL: the group within the step, else -1 */
  int32_t member;   /* COLL: index within the group; XCHG: the plan rank */
  uint32_t machine, device, stream; /* stream: sl_stream_kind. Ticks run on
                                       the driver; their machine is the one
                                       whose tasks they gate */
  int32_t n_in, n_out;
  int32_t *in, *out; /* register ids, in input / output slot order */
  int32_t tick_slot; /* the input slot holding the tick (not data), -1 */
  sl__engine engine;
  int32_t coll; /* COLL, XCHG, LOCAL: its spec in plan->colls, else -1 */
  int32_t n_args;
  sl__karg *args; /* OP, FEED, FETCH (arena), else NULL */
  /* The depth in the whole plan (plan_part.c), the same on every node:
   * spanning device groups launch in (depth, node, step, group) order. */
  int32_t depth;
  /* Per input (plan_part.c): the actor's input slot (-1 - j: output j's
   * register, a variable updated in place) and its position among the
   * register's readers, as the whole plan numbers them. */
  int32_t *in_slot, *in_pos;
  /* A node's part (plan_part.c): whether the task is another machine's (a
   * proxy: only its place, actor index and the registers it exchanges with
   * this machine's tasks are here), and its actor's index in its stream.
   * A whole plan: false, -1. */
  bool proxy;
  int32_t actor_index;
} sl__task;

typedef struct sl__regst {
  const char *name;
  int32_t producer; /* task id */
  int32_t out_slot;
  int32_t value;  /* the value whose shard it holds; -1: a boxing
                     intermediate or a tick */
  int32_t rank;   /* the placement rank of that shard, else -1 */
  sl_shape shape; /* the local shard's shape */
  sl_dtype dtype;
  int64_t bytes;
  uint32_t machine, device;
  int32_t count;    /* registers (the quota) */
  int32_t initial;  /* variables: 1 (version 0 starts ready), else 0 */
  int32_t var_node; /* variables: the node whose initializer fills the
                       initial register, else -1 */
  int32_t n_cons;
  int32_t *cons; /* consumer task ids, in the order they connect */
  int32_t wire;  /* its number in the whole plan (messages carry it) */
  /* Memory (memory.c): mem >= 0 puts the registers at `offset` of the
   * shared block of plan->mem[mem]; -1: memory of their own. */
  int32_t mem;
  int64_t offset;
  sl_memory_category category;
} sl__regst;

/* A control edge (memory.c): a 0-byte register of count 1 from `from` to
 * `to`, so that `to` fires after `from` in each step and, since `from`
 * needs the register back before it fires again, `from` of step k+1 fires
 * after `to` of step k. The closing edge of a device's order goes from its
 * first task to its last. */
typedef struct sl__ctrl {
  int32_t from, to;
  bool closing;
} sl__ctrl;

/* One device's memory, as planned (memory.c). */
typedef struct sl__pmem {
  uint32_t machine, device;
  int64_t block;     /* bytes of the block its shared registers live in */
  int64_t own;       /* its registers with memory of their own */
  int64_t mirrors;   /* its copies of registers other machines produce */
  int64_t workspace; /* the largest kernel workspace of its tasks */
  int64_t unshared;  /* what its registers would take, none shared */
  int64_t peak;      /* the most bytes live at once */
  int64_t category[SL_MEMORY_CATEGORIES]; /* of peak */
  int32_t n_shared;                       /* registers placed in the block */
  int32_t n_ctrl; /* control edges that order its tasks */
} sl__pmem;

/* What the plan keeps of a logical node, so that a plan read from a file
 * prints without its graph. */
typedef struct sl__pstep {
  const char *op;     /* sl_boxing_op_name */
  const char *reduce; /* "sum", "max", "min" or "" */
  int32_t mesh_axis;
  const char *from, *to;
  int64_t bytes; /* the most bytes any plan rank sends */
  double predicted_us;
} sl__pstep;

/* A global tensor as the runtime cuts and assembles it: variables' and
 * feeds' and fetches' values. */
typedef struct sl__ptensor {
  sl__meta meta;           /* global shape and dtype */
  sl_placement *placement; /* owned by the plan; NULL: not described */
  sl_nd_sbp sbp;
} sl__ptensor;

typedef struct sl__pnode {
  const char *name;
  const char *kind;      /* sl__graph_kind_name */
  const char *op;        /* op name, or "" */
  const char *placement; /* text */
  const char *sbp;       /* output 0's nd-SBP (boxing: target), text */
  const char *shape;     /* output 0's logical shape, text */
  const char *dtype;
  bool backward, optimizer;
  bool recompute; /* a forward op computed again for the backward pass */
  /* Pipelining (graph/micro.c): the micro-batch it computes (-1: once per
   * step), its stage (-1: none) and pass (sl__phase). */
  int32_t micro, stage, phase;
  int32_t n_steps;
  sl__pstep *steps; /* boxing nodes */
  /* What the runtime reads of the node (plan_node.c); sessions never read
   * the graph. Ops: their definition and attributes (names in the plan's
   * arena). Inputs, variables: their value; fetches: the fetched one. */
  const sl__op_def *def;
  sl__attrs attrs;
  sl__ptensor value;
  int32_t feed;       /* inputs: the node whose feed it cuts its
                         micro-batch from (itself or micro-batch 0's
                         copy), else -1 */
  bool trained;       /* variables: an update replaces it each step */
  sl_init init;       /* variables: the initializer */
  const char *load;   /* variables: the file it starts from
                         (sl_variable_load), else NULL */
  const char *tensor; /* ... and the tensor's name there */
  bool of_variable;   /* fetches: of a variable some step updates */
  /* npy_read ops: the file's absolute path (NULL when it no longer
   * resolves). Attribute "file" is the id of the lowering process's open
   * file; -1 in a plan read from bytes, whose session opens the path. */
  const char *file;
} sl__pnode;

typedef struct sl__pplan {
  sl_arena *arena;
  uint32_t machines; /* real machines: node ids 0..machines-1 */
  uint32_t driver;   /* the driver's machine id (= machines) */
  int32_t n_nodes, n_tasks, n_regsts;
  sl__pnode *nodes;
  sl__task *tasks;
  sl__regst *regsts;
  int32_t cap_tasks, cap_regsts; /* growth while lowering */
  int32_t n_ctrl, n_mem;         /* memory.c */
  sl__ctrl *ctrl;
  sl__pmem *mem;
  int32_t n_colls, cap_colls; /* the boxing steps' specs */
  sl__pcoll *colls;
  int32_t micro_batches; /* per step (1: none) */
  sl__schedule schedule; /* each device's order of passes (schedule.c) */
  /* A node's part (plan_part.c): the machine whose tasks it holds
   * (p->driver: the program's); -1: the whole plan. */
  int32_t part;
} sl__pplan;

/* Lowers a compiled graph (sl__graph_compile must have succeeded).
 * SL_ESTATE for a graph not compiled, SL_EUNSUPPORTED for a node or
 * device id beyond the actor runtime's limits, SL_EINTERNAL for an IR
 * that breaks compile's promises (a consumer on another placement or
 * nd-SBP than its input, a variable whose update has another layout),
 * SL_ENOMEM. */
sl_status sl__lower(const sl_graph *g, sl__pplan **out);
void sl__pplan_destroy(sl__pplan *p);

/* An empty plan to fill (the protobuf reader). */
sl_status sl__pplan_create(sl__pplan **out);
/* Appends a task / register (zeroed, arrays empty); NULL on SL_ENOMEM. */
sl__task *sl__pplan_add_task(sl__pplan *p);
sl__regst *sl__pplan_add_regst(sl__pplan *p);
/* Appends a spec that takes over geometry g (its n members: machine and
 * device allocated, the rest zeroed); NULL on SL_ENOMEM, g freed in either
 * case. */
sl__pcoll *sl__pplan_add_coll(sl__pplan *p, sl__xgeom *g);
/* Frees the specs (the plan's destructor). */
void sl__pplan_free_colls(sl__pplan *p);

/* lower_coll.c: the spec of group `group` of boxing step `step` (-1: the
 * step is a send_recv or copy, whose exchange has every plan rank as a
 * member) of the boxing route of graph node `node`, run by engine; and of
 * a local step's (slice, zero) member: placement rank `rank`, group
 * member `member`, on its CUDA device when on_devices. *out: its index in
 * p->colls. name is kept (arena). SL_ENOMEM, SL_EINTERNAL for a plan that
 * breaks sbp/'s promises. */
sl_status sl__lower_coll(sl__pplan *p, const sl_boxing_route *bp,
                         const char *name, int32_t node, int step, int group,
                         sl__engine engine, int32_t *out);
sl_status sl__lower_local_coll(sl__pplan *p, const sl_boxing_route *bp,
                               const char *name, int32_t node, int step,
                               int rank, int member, bool on_devices,
                               int32_t *out);
/* Checks that ids are in range and producers/consumers agree with tasks'
 * slots (what a file must satisfy before anyone indexes with it), and
 * fills every register's consumer list from the tasks. SL_EINVAL naming
 * the first bad task or register. */
sl_status sl__pplan_validate(sl__pplan *p);

/* ---- what the runtime reads of the nodes (plan_node.c) ---------------------
 */

/* Fills the nodes' descriptions and the op, feed and fetch tasks' kernel
 * arguments from the compiled graph the plan was lowered from. SL_ENOMEM,
 * sl_local_slice's errors. */
sl_status sl__pplan_describe(sl__pplan *p, const sl_graph *g);
/* Frees what the nodes own (the plan's destructor). */
void sl__pplan_free_nodes(sl__pplan *p);
/* Checks a validated plan read from bytes (a daemon runs the program's
 * plan as it is): every op node names an op of this build with well-formed
 * attributes; inputs', variables' and fetches' values fit their
 * placements; every op, feed and fetch task's kernel arguments are boxes
 * of their global shapes that their registers hold, with the global shapes
 * the op infers from its inputs (an npy_read's: once its file is open,
 * sl__task_check_shapes); every variable's register and task holds
 * its rank's shard. SL_EINVAL naming the first node or task at fault. */
sl_status sl__pplan_check_runtime(const sl__pplan *p);
/* Whether op task t's kernel arguments have the global shapes and dtypes
 * op def makes of its inputs with attrs (what the reader checks, and a
 * session once it opened an npy_read's file). SL_EINVAL naming t. */
sl_status sl__task_check_shapes(const sl__task *t, const sl__op_def *def,
                                const sl__attrs *attrs);
/* A task's inputs but the tick. */
int32_t sl__task_data_inputs(const sl__task *t);
/* The kernel call of op task t as its arguments say (no tensors, step
 * 0); attrs point into the plan. */
void sl__pplan_kernel_ctx(const sl__pplan *p, const sl__task *t,
                          sl__kernel_ctx *k);
/* The index of the node named name, or -1. */
int32_t sl__pplan_find_node(const sl__pplan *p, const char *name);
/* Rank `rank`'s shard of variable node `node` as its initializer makes it
 * (the same values for any layout) into buf. sl_local_slice's errors. */
sl_status sl__pplan_variable_init(const sl__pplan *p, int32_t node, int rank,
                                  void *buf);

/* ---- nodes' parts (plan_part.c) --------------------------------------------
 *
 * Over daemons each process receives only its machine's part of the plan:
 * its tasks, the registers they read and write, and as proxies the other
 * machines' tasks they exchange registers with, numbered as the whole
 * plan numbers them (actor indices, register wires, input slots and
 * positions) so that messages between the parts agree (DESIGN.md section
 * 5 step 7, docs/plan.md "Parts"). */

/* The machine whose process runs task t's actor over daemons: the driver
 * (the program) runs ticks, feeds and fetches. */
uint32_t sl__task_runner(const sl__pplan *p, const sl__task *t);
/* Fills every task's depth (lowering calls it). SL_ENOMEM. */
sl_status sl__pplan_depths(sl__pplan *p);
/* Fills every task's input slots and reader positions (lowering calls
 * it). SL_ENOMEM. */
sl_status sl__pplan_number_inputs(sl__pplan *p);
/* Machine `node`'s part of whole plan p, a plan of its own (node < 0:
 * the program's, whose tasks run on p->driver; a machine beyond p's gets
 * a part with nothing to run). SL_EINVAL for a p that is a part already,
 * SL_ENOMEM. */
sl_status sl__pplan_part(const sl__pplan *p, int node, sl__pplan **out);

/* ---- memory (memory.c) ------------------------------------------------------
 */

/* Plans the memory of a validated, described plan (DESIGN.md section 5
 * step 6, docs/plan.md "Memory"): orders each device's compute tasks by
 * control edges, finds each register's lifetime within a step from the
 * plan's happens-before relation, places registers whose lifetimes are
 * ordered in one block per device, and fills plan->mem. SL_ENOMEM. */
sl_status sl__pplan_plan_memory(sl__pplan *p);

/* The machine and device of plan->mem[i] as "cpu:0" (one machine) or
 * "n1/cuda:0" into buf. */
void sl__pmem_name(const sl__pplan *p, int32_t i, char *buf, size_t n);

/* Bytes a device allocates for the job: block, own registers, mirrors and
 * the largest workspace. */
int64_t sl__pmem_allocated(const sl__pmem *m);

/* Whether task t is in its device's one order of compute tasks (memory.c,
 * point 1): the compute stream's kernels, not its feeds, fetches, ticks
 * or collective members (whose firing only deposits their buffers). */
bool sl__task_in_device_order(const sl__task *t);

/* The per-device memory table (`sluice plan --memory`); node >= 0: only
 * that machine's devices. SL_EIO, SL_EINVAL for a machine the plan does
 * not have. */
sl_status sl__pplan_write_memory(const sl__pplan *p, int node, FILE *f);

/* ---- pipeline schedules (schedule.c) ---------------------------------------
 */

/* Whether the plan's devices order their passes by its schedule (more
 * than one micro-batch). */
bool sl__pplan_scheduled(const sl__pplan *p);
/* The edges (*edges[2i] -> *edges[2i+1], malloc'd) that chain each
 * device's compute tasks in the schedule's order of passes; order: a
 * topological order of the plan's tasks, which orders tasks within a pass
 * and the ones that run once per step. SL_EINVAL for stages the schedule
 * cannot lay out, SL_ENOMEM. */
sl_status sl__schedule_edges(const sl__pplan *p, const int32_t *order,
                             int32_t **edges, int32_t *n_edges);
/* The edges that say a boxing group's members meet in its engine: from
 * the producer of each member's input to every other member (malloc'd
 * pairs, as above). SL_ENOMEM. */
sl_status sl__schedule_group_edges(const sl__pplan *p, int32_t **edges,
                                   int32_t *n_edges);
/* simulate.c: one step of the plan as a discrete-event simulation with
 * cfg's costs (NULL: the model's); a report for `sluice plan --simulate`
 * into report when not NULL. SL_EINVAL naming the tasks of a deadlock,
 * SL_EIO for an unreadable costs trace, SL_ENOMEM. */
sl_status sl__pplan_simulate(const sl__pplan *p, const sl_sim_config *cfg,
                             sl_simulation *res, FILE *report);
/* Task t's pipeline pass as the plan's schedule runs it, "s<stage>
 * <F|B|W><micro-batch>" (W under zero-bubble only; other schedules run it
 * with B), into buf; false (buf "") for a task of no pass or a plan
 * without micro-batches. */
bool sl__pass_label(const sl__pplan *p, int32_t t, char *buf, size_t size);
/* SL_EINVAL naming the cycle[0..n) of tasks, each waiting for the next
 * (the last for the first) by its device's order (by_order[i]) or for its
 * data. */
sl_status sl__schedule_deadlock(const sl__pplan *p, const int32_t *cycle,
                                const bool *by_order, int32_t n);

/* ---- forms (plan_text.c, plan_pb.c) ---------------------------------------
 */

/* The plan as text: per machine, device and stream its tasks with their
 * input and output registers (shape, dtype, bytes, count), then totals.
 * These forms take node: -1 for the whole plan, or one machine's part (its
 * devices' tasks, the ticks that gate them, the boxing steps it takes part
 * in; each input another machine produces names that machine and task). */
sl_status sl__pplan_write_text(const sl__pplan *p, int node, FILE *f);
/* Graphviz DOT: a cluster per machine and device, a node per task (boxing
 * tasks marked), an edge per (register, consumer) labelled with bytes. */
sl_status sl__pplan_write_dot(const sl__pplan *p, int node, FILE *f);
/* The protobuf-c message (graph/plan.proto), packed into a malloc'd
 * buffer. */
sl_status sl__pplan_pack(const sl__pplan *p, uint8_t **buf, size_t *len);
/* Parses and validates a packed plan. SL_EINVAL for a malformed one. */
sl_status sl__pplan_unpack(const uint8_t *buf, size_t len, sl__pplan **out);

/* Writes the plan in the given form (sl_plan_format of session.h: 0 text,
 * 1 DOT, 2 protobuf, 3 memory) to path ("-": stdout), the whole plan (node
 * -1) or one machine's part (not protobuf). SL_EIO, SL_EINVAL. */
sl_status sl__pplan_write_file(const sl__pplan *p, int format, int node,
                               const char *path);
/* SL_EINVAL unless node is -1 (every machine) or one of p's machines. */
sl_status sl__pplan_check_node(const sl__pplan *p, int node);
/* Reads a protobuf plan file. SL_EIO, SL_EINVAL. */
sl_status sl__pplan_read_file(const char *path, sl__pplan **out);

#endif
