/* From the physical plan to the actor plan: one actor per task (node 0 for
 * real tasks, the driver for ticks), one descriptor per register, edges
 * in slot order; each actor's context (kernel calls prefilled with local
 * shapes, slices and global shapes), the collectives of every boxing step,
 * and the feeds and fetches the program talks to. */
#include <stdlib.h>
#include <string.h>

#include "cpu/npy.h"
#include "sbp_int.h"
#include "session_int.h"

typedef struct var_init {
  const sl_session *s;
  int32_t node;
  int rank;
  sess_dev *dev; /* the register is on this CUDA device */
} var_init;

static sl_status var_init_fn(void *ctx, sl_register *r) {
  const var_init *v = ctx;
  if (!v->dev)
    return sl__session_var_shard(v->s, v->node, v->rank, r->data, r->bytes);
  void *host = sl__calloc(1, r->bytes + 64);
  if (!host) return SL_ENOMEM;
  sl_status st = sl__session_var_shard(v->s, v->node, v->rank, host, r->bytes);
  if (st == SL_OK) st = sl__dev_upload(v->dev, r->data, host, r->bytes);
  sl__free(host);
  return st;
}

static void slice_dims(const sl_slice *s, int64_t *dims) {
  for (int d = 0; d < SL_MAX_DIMS; d++)
    dims[d] = d < s->ndim ? s->extent[d] : 0;
}

/* ---- kernel contexts -------------------------------------------------------
 */

/* The id this session reads npy_read node n's file by: the lowering
 * process's (attribute "file"), or, in a plan read from bytes, its own
 * open of the path (s->npy, released with the build). *attrs: the
 * attributes naming it. */
static sl_status npy_attrs(sl_session *s, int32_t n, const sl__attrs **attrs) {
  const sl__pnode *pn = &s->pp->nodes[n];
  *attrs = &pn->attrs;
  if (!pn->file || sl__attr_int(&pn->attrs, "file", -1) >= 0) return SL_OK;
  if (!s->npy) {
    int32_t k = 0;
    for (int32_t i = 0; i < s->pp->n_nodes; i++)
      k += s->pp->nodes[i].file != NULL;
    s->npy = sl__calloc((size_t)k + 1, sizeof *s->npy);
    if (!s->npy) return SL_ENOMEM;
  }
  sess_npy *f = NULL;
  for (int32_t i = 0; i < s->n_npy && !f; i++)
    if (s->npy[i].node == n) f = &s->npy[i];
  if (!f) {
    int32_t id;
    SL_CHECK(sl__npy_open(pn->file, &id));
    f = &s->npy[s->n_npy++];
    *f = (sess_npy){n, id, pn->attrs};
    SL_CHECK(sl__attrs_set_int(&f->attrs, "file", id));
  }
  *attrs = &f->attrs;
  return SL_OK;
}

static sl_status setup_op(sl_session *s, task_rt *rt) {
  rt->node = &s->pp->nodes[rt->t->node];
  sl__pplan_kernel_ctx(s->pp, rt->t, &rt->k);
  rt->k.team = sl__session_cpu_team(s, rt->t->device);
  if (rt->t->machine != s->self_node || !rt->node->file) return SL_OK;
  /* The file this process opened must be the one the plan was made for. */
  SL_CHECK(npy_attrs(s, rt->t->node, &rt->k.attrs));
  return sl__task_check_shapes(rt->t, rt->node->def, rt->k.attrs);
}

/* ---- boxing ----------------------------------------------------------------
 */

/* The spec of a boxing task (graph/lower_coll.c). */
static const sl__pcoll *coll_of(const sl_session *s, const sl__task *t) {
  return t->coll >= 0 && t->coll < s->pp->n_colls ? &s->pp->colls[t->coll]
                                                  : NULL;
}

/* Appends an engine to s->engines (sized for one per spec at build). */
static const sl__coll_engine *
add_engine(sl_session *s, const sl__coll_engine_i *i, void *ctx) {
  sl__coll_engine *e = &s->engines[s->n_engines++];
  *e = (sl__coll_engine){i, ctx};
  return e;
}

/* The device collective op of a spec's realization on GPUs. */
static sl__dev_coll_op dev_op_of(sl__pcoll_op op) {
  switch (op) {
  case SL__PCOLL_ALL_REDUCE: return SL__DEV_ALL_REDUCE;
  case SL__PCOLL_ALL_GATHER: return SL__DEV_ALL_GATHER;
  case SL__PCOLL_REDUCE_SCATTER: return SL__DEV_REDUCE_SCATTER;
  default: return SL__DEV_EXCHANGE;
  }
}

/* A boxing step's group between GPUs (lowering keeps a boxing whose ranks
 * are all CUDA devices on them): its device group on the spec's members in
 * member order, with NCCL's collective or an exchange of the spec's
 * pieces. A group with members on other nodes waits for its communicator
 * until sl__session_connect_dgroups (creating it is collective, and every
 * node must be ready first). */
static sl_status make_dgroup(sl_session *s, const sl__pcoll *pc, task_rt *rt,
                             sl__dgroup **out) {
  const sl__task *t = rt->t;
  int gn = pc->geom.n;
  int *ranks = sl__calloc((size_t)gn + 1, sizeof *ranks);
  const sl__dev_handle **devs = sl__calloc((size_t)gn + 1, sizeof *devs);
  if (!ranks || !devs) {
    sl__free(ranks);
    sl__free(devs);
    return SL_ENOMEM;
  }
  int nlocal = 0;
  sl_status st = SL_OK;
  for (int k = 0; k < gn && st == SL_OK; k++) {
    if (pc->machine[k] != s->self_node) continue;
    sess_dev *d = sl__session_dev(s, pc->device[k]);
    if (!d)
      st =
          sl__fail(SL_EINTERNAL, "boxing '%s': member %d's cuda:%d is not open",
                   pc->name, k, sl__dev_index(pc->device[k]));
    else {
      ranks[nlocal] = k;
      devs[nlocal++] = &d->boxing;
    }
  }
  sl__dev_coll_op op = dev_op_of(pc->device_op);
  size_t count = (size_t)pc->device_count;
  if (st == SL_OK && !s->dcoll) st = rt->dev->be->coll_open(&s->dcoll);
  if (st == SL_OK && nlocal == gn) {
    st = sl__dgroup_create(s->dcoll, pc->name, gn, devs, op, pc->dtype,
                           pc->reduce, count, out);
  } else if (st == SL_OK) {
    int32_t order[4] = {t->depth, t->node, t->step, t->group};
    if (st == SL_OK && !s->dseq) st = sl__dseq_create(&s->dseq);
    if (st == SL_OK)
      st = sl__dgroup_create_span(s->dseq, pc->name, gn, nlocal, ranks, devs,
                                  op, pc->dtype, pc->reduce, count, order, out);
  }
  if (st == SL_OK) add_engine(s, &sl__coll_engine_device, *out);
  /* An exchange: every local member's program of the spec's pieces. */
  for (int i = 0; op == SL__DEV_EXCHANGE && i < nlocal && st == SL_OK; i++) {
    sl__dxchg *x = NULL;
    st = sl__dxchg_create(devs[i], &pc->geom, ranks[i], &x);
    if (st == SL_OK) st = sl__dgroup_set_program(*out, ranks[i], x);
  }
  sl__free(ranks);
  sl__free(devs);
  return st;
}

sl_status sl__session_connect_dgroups(sl_session *s, const sl__dev_kv *kv) {
  if (!s->dseq) return SL_OK;
  return sl__dseq_connect(s->dseq, s->dcoll, kv, s->job_id);
}

/* A boxing step's group on the hosts: the in-process collective of its
 * spec, with the node of every member (*mnode, n entries, sl__free) for a
 * span. n_dw: dev_worker's entries (device id -> worker). */
static sl_status host_coll(sl_session *s, const sl__pcoll *pc,
                           const int *dev_worker, uint32_t n_dw, sl__coll **out,
                           uint32_t **mnode) {
  const sl__xgeom *g = &pc->geom;
  int n = g->n;
  int *workers = sl__calloc((size_t)n + 1, sizeof *workers);
  uint32_t *nodes = sl__calloc((size_t)n + 1, sizeof *nodes);
  int8_t *fill = sl__calloc((size_t)n + 1, sizeof *fill);
  sl__coll_piece *pieces = sl__calloc((size_t)g->n_pieces + 1, sizeof *pieces);
  sl_status st = SL_OK;
  if (!workers || !nodes || !fill || !pieces) st = SL_ENOMEM;
  for (int k = 0; k < n && st == SL_OK; k++) {
    /* Another node's member runs there (the span's); any worker will do. */
    workers[k] = pc->machine[k] != s->self_node ? 0
                 : pc->device[k] < n_dw         ? dev_worker[pc->device[k]]
                                                : -1;
    nodes[k] = pc->machine[k];
    fill[k] = g->fill[k] ? (int8_t)pc->reduce : SL__COLL_FILL_ZERO;
  }
  bool reduce = false;
  for (int i = 0; i < g->n_pieces && st == SL_OK; i++) {
    pieces[i] =
        (sl__coll_piece){g->pieces[i].src, g->pieces[i].dst, g->pieces[i].box};
    reduce |= g->pieces[i].reduce;
  }
  sl__coll_desc d;
  memset(&d, 0, sizeof d);
  d.name = pc->name;
  d.dtype = pc->dtype;
  d.reduce = pc->reduce;
  d.n = n;
  d.workers = workers;
  d.block = pc->block;
  d.in_axis = SL_MAX(pc->in_axis, 0);
  d.out_axis = SL_MAX(pc->out_axis, 0);
  switch (pc->op) {
  case SL__PCOLL_ALL_REDUCE: d.op = SL__COLL_ALL_REDUCE; break;
  case SL__PCOLL_REDUCE_SCATTER: d.op = SL__COLL_REDUCE_SCATTER; break;
  case SL__PCOLL_ALL_GATHER: d.op = SL__COLL_ALL_GATHER; break;
  case SL__PCOLL_ALL_TO_ALL: d.op = SL__COLL_ALL_TO_ALL; break;
  case SL__PCOLL_EXCHANGE:
    d.op = SL__COLL_EXCHANGE;
    d.has_in = g->has_in;
    d.has_out = g->has_out;
    d.in_slice = g->in_box;
    d.out_slice = g->out_box;
    d.fill = fill;
    d.piece_count = g->n_pieces;
    d.pieces = pieces;
    d.piece_reduce = reduce;
    break;
  default:
    if (st == SL_OK)
      st = sl__fail(SL_EINTERNAL, "boxing '%s' is no collective (%s)", pc->name,
                    sl__pcoll_op_name(pc->op));
  }
  /* A span's collective is arrived at by the span, not by the tasks. */
  if (pc->engine == SL__ENGINE_INPROC) d.waiting = sl__coll_member_waiting;
  if (st == SL_OK) st = sl__coll_create(s->comm, &d, out);
  if (st == SL_OK) {
    *mnode = nodes;
    nodes = NULL;
  }
  sl__free(workers);
  sl__free(nodes);
  sl__free(fill);
  sl__free(pieces);
  return st;
}

/* The same on every node, different for every group of every job. */
static uint64_t span_id(uint64_t job, int32_t node, int32_t step,
                        int32_t group) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the four numbers */
  uint64_t v[4] = {job, (uint64_t)(uint32_t)node, (uint64_t)(uint32_t)step,
                   (uint64_t)(uint32_t)group};
  for (int i = 0; i < 4; i++)
    for (int b = 0; b < 8; b++) {
      h ^= (v[i] >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  return h;
}

/* For a task whose members live on several nodes (SL__ENGINE_NODES): the
 * span collective that this node's members arrive at instead of c. */
static sl_status make_span(sl_session *s, const sl__task *t,
                           const sl__pcoll *pc, sl__coll *c,
                           const uint32_t *mnode, sl__span **out) {
  *out = NULL;
  int n = sl__coll_members(c);
  uint32_t other = mnode[0];
  for (int k = 0; k < n && other == mnode[0]; k++)
    other = mnode[k];
  if (!s->nc)
    return sl__fail(SL_EUNSUPPORTED,
                    "boxing '%s' has members on nodes %u and %u: "
                    "collectives between nodes need daemons",
                    pc->name, mnode[0], other);
  sl__span_desc d = {c,
                     mnode,
                     s->self_node,
                     s->nc,
                     span_id(s->job_id, t->node, t->step, t->group),
                     sl__coll_member_waiting};
  return sl__span_create(&d, out);
}

void sl__session_abort_collectives(sl_session *s, sl_status st,
                                   const char *msg) {
  if (s->comm) sl__comm_abort(s->comm, st);
  sl__session_release_failure(s);
  for (int32_t i = 0; i < s->n_engines; i++)
    sl__coll_engine_abort(&s->engines[i], st, msg);
  /* Rounds already between nodes end when their net collectives do. */
  if (s->nc) sl__net_coll_abort(s->nc, st, msg);
}

/* A slice or zero step on the host: the spec's one member. */
static sl_status setup_local(const sl__pcoll *pc, task_rt *rt) {
  rt->local_op = pc->op == SL__PCOLL_SLICE ? SL_BOXING_SLICE : SL_BOXING_ZERO;
  rt->local_n = pc->local_n;
  rt->member = rt->t->member;
  rt->dtype = pc->dtype;
  rt->ndim = pc->block.ndim;
  slice_dims(&pc->geom.in_box[0], rt->in_dims);
  slice_dims(&pc->geom.out_box[0], rt->out_dims);
  rt->local_reduce = pc->reduce;
  rt->local_from_b = pc->local_from_b;
  rt->local_axis = pc->op == SL__PCOLL_SLICE ? pc->out_axis : pc->in_axis;
  return SL_OK;
}

/* ---- feeds and fetches --------------------------------------------------- */

/* The feeds (one per input that is not another's micro-batch: its copies
 * cut their rows from the same feed) and fetches, and the boxes their
 * tasks cut and assemble. */
static sl_status setup_io(sl_session *s) {
  const sl__pplan *pp = s->pp;
  /* Those this process runs (a daemon's part has none: the program feeds
   * and fetches). */
  bool *here = sl__calloc((size_t)pp->n_nodes + 1, sizeof *here);
  if (!here) return SL_ENOMEM;
  for (int32_t t = 0; t < pp->n_tasks; t++) {
    const sl__task *task = &pp->tasks[t];
    if (task->proxy) continue;
    if (task->kind == SL__TASK_FEED) here[pp->nodes[task->node].feed] = true;
    if (task->kind == SL__TASK_FETCH) here[task->node] = true;
  }
  for (int32_t i = 0; i < pp->n_nodes; i++) {
    const sl__pnode *n = &pp->nodes[i];
    if (here[i] && n->feed == i) s->n_feeds++;
    if (here[i] && strcmp(n->kind, "fetch") == 0) s->n_fetches++;
  }
  s->feeds = sl__calloc((size_t)s->n_feeds + 1, sizeof *s->feeds);
  s->fetches = sl__calloc((size_t)s->n_fetches + 1, sizeof *s->fetches);
  if (!s->feeds || !s->fetches) {
    sl__free(here);
    return SL_ENOMEM;
  }
  int32_t fi = 0, ti = 0;
  for (int32_t i = 0; i < pp->n_nodes; i++) {
    const sl__pnode *n = &pp->nodes[i];
    if (!here[i]) continue;
    if (n->feed == i) {
      feed_rt *f = &s->feeds[fi++];
      f->name = n->name;
      f->node = i;
      f->meta.dtype = n->value.meta.dtype;
      f->meta.shape = n->value.meta.shape; /* its tasks' fed shape below */
    } else if (strcmp(n->kind, "fetch") == 0) {
      fetch_rt *f = &s->fetches[ti++];
      f->name = n->name;
      f->node = i;
      f->meta = n->value.meta;
      f->bytes =
          (size_t)sl_shape_numel(&f->meta.shape) * sl_dtype_size(f->meta.dtype);
      f->of_variable = n->of_variable;
      f->partial = sl__nd_sbp_partial_op(&n->value.sbp, &f->reduce);
      int nr = sl_placement_size(n->value.placement);
      f->ranks = sl__calloc((size_t)nr, sizeof *f->ranks);
      f->slices = sl__calloc((size_t)nr, sizeof *f->slices);
      f->shard_bytes = sl__calloc((size_t)nr, sizeof *f->shard_bytes);
      f->depth = s->cfg.fetch_depth > 0 ? s->cfg.fetch_depth : 2;
      f->slots = nr;
      f->stage = sl__calloc((size_t)(f->depth * nr), sizeof *f->stage);
      f->staged = sl__calloc((size_t)(f->depth * nr), sizeof *f->staged);
      if (!f->ranks || !f->slices || !f->shard_bytes || !f->stage ||
          !f->staged) {
        sl__free(here);
        return SL_ENOMEM;
      }
    }
  }
  sl__free(here);
  /* Fetch tasks, in plan order, are the ranks each fetch assembles from. */
  for (int32_t t = 0; t < s->n_tasks; t++) {
    task_rt *rt = &s->rt[t];
    const sl__task *task = rt->t;
    if ((task->kind != SL__TASK_FEED && task->kind != SL__TASK_FETCH) ||
        task->proxy)
      continue;
    rt->slice = task->args[0].box;
    if (task->kind == SL__TASK_FEED) {
      for (int32_t k = 0; k < s->n_feeds; k++)
        if (s->feeds[k].node == pp->nodes[task->node].feed) rt->io = k;
      feed_rt *f = &s->feeds[rt->io];
      f->n_readers++;
      f->meta.shape = task->args[0].global; /* every micro-batch's rows */
      rt->dtype = f->meta.dtype;
      rt->ndim = f->meta.shape.ndim;
      slice_dims(&rt->slice, rt->out_dims);
      continue;
    }
    for (int32_t k = 0; k < s->n_fetches; k++)
      if (s->fetches[k].node == task->node) rt->io = k;
    fetch_rt *f = &s->fetches[rt->io];
    rt->io_slot = f->n_ranks++;
    f->ranks[rt->io_slot] = task->rank;
    f->slices[rt->io_slot] = rt->slice;
    size_t sb =
        (size_t)sl_slice_numel(&rt->slice) * sl_dtype_size(f->meta.dtype);
    f->shard_bytes[rt->io_slot] = sb;
    for (int b = 0; b < f->depth; b++) {
      int at = b * f->slots + rt->io_slot;
      f->stage[at] = sl__malloc(sb + 64);
      f->staged[at] = -1;
      if (!f->stage[at]) return SL_ENOMEM;
    }
  }
  /* Each feed's buffer: the fed tensor its tasks cut from. */
  for (int32_t k = 0; k < s->n_feeds; k++) {
    feed_rt *f = &s->feeds[k];
    f->bytes =
        (size_t)sl_shape_numel(&f->meta.shape) * sl_dtype_size(f->meta.dtype);
    f->data = sl__calloc(1, f->bytes + 64);
    if (!f->data) return SL_ENOMEM;
  }
  return SL_OK;
}

/* ---- the actor plan ------------------------------------------------------ */

static sl_status add_actors(sl_session *s) {
  const sl__pplan *pp = s->pp;
  bool part = pp->part >= 0;
  for (int32_t i = 0; i < pp->n_tasks; i++) {
    const sl__task *t = &pp->tasks[i];
    task_rt *rt = &s->rt[i];
    rt->s = s;
    rt->t = t;
    rt->id = i;
    rt->tick_slot = -1;
    rt->io = rt->io_slot = -1;
    bool tick = t->kind == SL__TASK_TICK;
    sl_actor_desc d;
    memset(&d, 0, sizeof d);
    d.name = t->name;
    d.kind = tick ? SL_ACTOR_SOURCE : SL_ACTOR_KERNEL;
    /* A part (over daemons): the program runs ticks, feeds and fetches.
     * The whole plan (embedded): ticks are the driver's, emulated here. */
    uint32_t runner = part ? sl__task_runner(pp, t) : t->machine;
    d.node = tick || (part && runner == pp->driver) ? s->driver : runner;
    d.device = t->device;
    d.stream = t->stream;
    char mark[48]; /* the pipeline pass the trace shows */
    sl__pass_label(pp, i, mark, sizeof mark);
    bool cuda = sl__dev_class_of(t->device) == SL__DEV_CLASS_CUDA;
    d.act = t->proxy ? NULL
            : tick   ? (s->remote ? sl__act_tick : NULL)
                     : sl__act_for(t->kind, cuda);
    if (!tick && !t->proxy && cuda && t->machine == s->self_node) {
      rt->dev = sl__session_dev(s, t->device);
      if (!d.act || !rt->dev)
        return sl__fail(SL_EINTERNAL,
                        "session: task '%s' (%s) has no way to run on "
                        "cuda:%d",
                        t->name, sl__task_kind_name(t->kind),
                        sl__dev_index(t->device));
    }
    d.ctx = rt;
    d.count = tick ? INT64_MAX : 0;
    uint32_t index = (uint32_t)t->actor_index; /* a part's, as numbered */
    SL_CHECK(t->proxy ? sl_actor_graph_add_proxy(s->plan, &d, index, &rt->actor)
             : part
                 ? sl_actor_graph_add_actor_at(s->plan, &d, index, &rt->actor)
                 : sl_actor_graph_add_actor(s->plan, &d, &rt->actor));
    if (mark[0]) SL_CHECK(sl_actor_graph_set_mark(s->plan, rt->actor, mark));
    /* Steps are counted by the actors of this process's node. */
    if (!tick && !t->proxy && d.node == s->self_node) s->n_counted++;
  }
  return SL_OK;
}

static sl_status add_registers(sl_session *s) {
  const sl__pplan *pp = s->pp;
  var_init *vi = sl__calloc((size_t)pp->n_regsts + 1, sizeof *vi);
  s->actor_desc = sl__calloc((size_t)pp->n_regsts + 1, sizeof *s->actor_desc);
  if (!vi || !s->actor_desc) {
    sl__free(vi);
    return SL_ENOMEM;
  }
  s->var_inits = vi;
  for (int32_t i = 0; i < pp->n_tasks; i++) {
    const sl__task *t = &pp->tasks[i];
    for (int32_t j = 0; j < t->n_out; j++) {
      const sl__regst *r = &pp->regsts[t->out[j]];
      sl_regst_desc d;
      memset(&d, 0, sizeof d);
      d.name = r->name;
      d.count = r->count;
      d.bytes = (size_t)r->bytes;
      d.device = (int32_t)r->device; /* a copy task's is not its own */
      d.initial = r->initial;
      if (r->var_node >= 0 && !t->proxy) {
        var_init *v = &vi[t->out[j]];
        v->s = s;
        v->node = r->var_node;
        v->rank = r->rank;
        if (r->machine == s->self_node &&
            sl__dev_class_of(r->device) == SL__DEV_CLASS_CUDA)
          v->dev = sl__session_dev(s, r->device);
        d.init = var_init_fn;
        d.init_ctx = v;
      }
      int32_t *desc = &s->actor_desc[t->out[j]];
      /* A part's registers carry the whole plan's numbers. */
      SL_CHECK(
          pp->part >= 0
              ? sl_actor_graph_add_output_at(s->plan, s->rt[i].actor, &d,
                                             r->wire, (uint16_t)r->out_slot,
                                             desc)
              : sl_actor_graph_add_output(s->plan, s->rt[i].actor, &d, desc));
    }
  }
  return SL_OK;
}

/* The memory plan (graph/memory.c): one block per device for the
 * registers placed in it, and the control edges that order each device's
 * compute tasks, as 0-byte descriptors after the tasks' data slots. */
static sl_status add_memory(sl_session *s) {
  const sl__pplan *pp = s->pp;
  int32_t *block = sl__calloc((size_t)pp->n_mem + 1, sizeof *block);
  if (!block) return SL_ENOMEM;
  sl_status st = SL_OK;
  for (int32_t m = 0; m < pp->n_mem && st == SL_OK; m++)
    if (pp->mem[m].block > 0)
      st = sl_actor_graph_add_block(s->plan, pp->mem[m].machine,
                                    (int32_t)pp->mem[m].device,
                                    (size_t)pp->mem[m].block, &block[m]);
  for (int32_t r = 0; r < pp->n_regsts && st == SL_OK; r++)
    if (pp->regsts[r].mem >= 0)
      st = sl_actor_graph_place(s->plan, s->actor_desc[r],
                                block[pp->regsts[r].mem],
                                (size_t)pp->regsts[r].offset);
  sl__free(block);
  for (int32_t i = 0; i < pp->n_ctrl && st == SL_OK; i++) {
    const sl__ctrl *c = &pp->ctrl[i];
    char name[256];
    snprintf(name, sizeof name, "%s.then", pp->tasks[c->from].name);
    sl_regst_desc d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.count = 1;
    d.device = -1;
    int32_t desc;
    st = sl_actor_graph_add_output(s->plan, s->rt[c->from].actor, &d, &desc);
    if (st == SL_OK)
      st = sl_actor_graph_connect(s->plan, desc, s->rt[c->to].actor);
  }
  return st;
}

static drv_tick *tick_of_regst(sl_session *s, int32_t reg) {
  for (int32_t i = 0; i < s->n_ticks; i++)
    if (s->ticks[i].desc == s->actor_desc[reg]) return &s->ticks[i];
  return NULL;
}

static sl_status setup_ticks(sl_session *s) {
  const sl__pplan *pp = s->pp;
  int32_t n = 0;
  for (int32_t i = 0; i < pp->n_tasks; i++)
    n += pp->tasks[i].kind == SL__TASK_TICK;
  s->ticks = sl__calloc((size_t)n + 1, sizeof *s->ticks);
  if (!s->ticks) return SL_ENOMEM;
  for (int32_t i = 0; i < pp->n_tasks; i++) {
    const sl__task *t = &pp->tasks[i];
    if (t->kind != SL__TASK_TICK || t->proxy) continue;
    const sl__regst *r = &pp->regsts[t->out[0]];
    drv_tick *d = &s->ticks[s->n_ticks++];
    pthread_mutex_init(&d->lock, NULL);
    d->actor = s->rt[i].actor;
    d->desc = s->actor_desc[t->out[0]];
    d->count = r->count;
    d->cons = sl__calloc((size_t)r->n_cons + 1, sizeof *d->cons);
    d->cons_slot = sl__calloc((size_t)r->n_cons + 1, sizeof *d->cons_slot);
    d->pending = sl__calloc((size_t)r->count, sizeof *d->pending);
    d->free_q = sl__calloc((size_t)r->count, sizeof *d->free_q);
    if (!d->cons || !d->cons_slot || !d->pending || !d->free_q)
      return SL_ENOMEM;
    for (int32_t j = r->count - 1; j >= 0; j--)
      d->free_q[d->n_free++] = j;
  }
  return SL_OK;
}

/* Every task's inputs at the slots and positions the plan gives them. */
static sl_status connect_all(sl_session *s) {
  const sl__pplan *pp = s->pp;
  for (int32_t i = 0; i < pp->n_tasks; i++) {
    const sl__task *t = &pp->tasks[i];
    task_rt *rt = &s->rt[i];
    rt->slot_of = sl__calloc((size_t)t->n_in + 1, sizeof *rt->slot_of);
    if (!rt->slot_of) return SL_ENOMEM;
    /* The plan's slots and reader positions (graph/plan_part.c): a
     * variable updated in place (one register, lower.c) is read through
     * its output register, which the runtime hands the task once every
     * reader returned the version it replaces; a register read twice is
     * read once. */
    for (int32_t k = 0; k < t->n_in; k++) {
      int32_t slot = t->in_slot[k], dup = -1;
      for (int32_t j = 0; j < k && dup < 0 && slot >= 0; j++)
        if (t->in[j] == t->in[k]) dup = j;
      rt->slot_of[k] = slot;
      if (slot < 0 || dup >= 0) continue;
      SL_CHECK(sl_actor_graph_connect_at(s->plan, s->actor_desc[t->in[k]],
                                         rt->actor, (uint16_t)slot,
                                         (uint16_t)t->in_pos[k]));
      drv_tick *d = tick_of_regst(s, t->in[k]);
      if (d) {
        d->cons[d->n_cons] = rt->actor;
        d->cons_slot[d->n_cons] = (uint16_t)slot;
        d->n_cons++;
      }
    }
    rt->tick_slot = t->tick_slot >= 0 ? rt->slot_of[t->tick_slot] : -1;
  }
  return SL_OK;
}

sl_status sl__session_build(sl_session *s) {
  const sl__pplan *pp = s->pp;
  s->n_tasks = pp->n_tasks;
  if (!s->remote) s->driver = pp->driver; /* remote: the cluster's size */
  s->rt = sl__calloc((size_t)pp->n_tasks + 1, sizeof *s->rt);
  if (!s->rt) return SL_ENOMEM;
  /* Workers: one per device id used. */
  uint32_t max_dev = 0;
  for (int32_t i = 0; i < pp->n_tasks; i++)
    max_dev = SL_MAX(max_dev, pp->tasks[i].device);
  int *dev_worker = sl__calloc((size_t)max_dev + 1, sizeof *dev_worker);
  if (!dev_worker) return SL_ENOMEM;
  for (uint32_t d = 0; d <= max_dev; d++)
    dev_worker[d] = -1;
  s->n_workers = 0;
  for (int32_t i = 0; i < pp->n_tasks; i++) {
    uint32_t d = pp->tasks[i].device;
    if (pp->tasks[i].kind != SL__TASK_TICK && !pp->tasks[i].proxy &&
        dev_worker[d] < 0)
      dev_worker[d] = s->n_workers++;
  }
  s->n_devices = s->n_workers;
  sl_status st = SL_OK;
  /* Where to pin each worker (cpu_teams.c): filled once the teams open. */
  int *worker_cpu = sl__calloc((size_t)s->n_workers + 1, sizeof *worker_cpu);
  sl__comm_config cc = {SL_MAX(s->n_workers, 1), s->cfg.comm_direct_max_bytes,
                        worker_cpu};
  /* The engine of each spec, once one of its members is here. */
  const sl__coll_engine **by_coll =
      sl__calloc((size_t)pp->n_colls + 1, sizeof *by_coll);
  s->engines = sl__calloc((size_t)pp->n_colls + 1, sizeof *s->engines);
  if (!by_coll || !s->engines || !worker_cpu) {
    st = SL_ENOMEM;
    goto out;
  }
  SL_CHECK_GOTO(sl__session_open_devices(s), st, out);
  SL_CHECK_GOTO(sl__session_open_cpu_teams(s), st, out);
  worker_cpu[0] = -1; /* the one worker of a session without devices */
  for (uint32_t d = 0; d <= max_dev; d++)
    if (dev_worker[d] >= 0)
      worker_cpu[dev_worker[d]] = sl__session_worker_cpu(s, d);
  SL_CHECK_GOTO(sl__comm_create(&cc, &s->comm), st, out);
  SL_CHECK_GOTO(sl_actor_graph_create(&s->plan), st, out);
  SL_CHECK_GOTO(add_actors(s), st, out);
  SL_CHECK_GOTO(add_registers(s), st, out);
  SL_CHECK_GOTO(setup_ticks(s), st, out);
  SL_CHECK_GOTO(connect_all(s), st, out);
  SL_CHECK_GOTO(add_memory(s), st, out);
  SL_CHECK_GOTO(setup_io(s), st, out);
  for (int32_t i = 0; i < pp->n_tasks && st == SL_OK; i++) {
    task_rt *rt = &s->rt[i];
    const sl__task *t = rt->t;
    if (t->proxy) continue; /* another node's */
    const sl__pcoll *pc = coll_of(s, t);
    switch (t->kind) {
    case SL__TASK_OP: st = setup_op(s, rt); break;
    case SL__TASK_CONST:
    case SL__TASK_VAR_COPY: {
      const sl__regst *r = &pp->regsts[t->out[0]];
      rt->bytes = (size_t)r->bytes;
      /* Another node's constant is that node's to make (this process
       * may hold only its own ranks' values: state.c). */
      if (t->kind == SL__TASK_CONST && t->machine == s->self_node) {
        rt->init = sl__calloc(1, rt->bytes + 64);
        if (!rt->init) {
          st = SL_ENOMEM;
          break;
        }
        st = sl__session_var_shard(s, t->node, t->rank, rt->init, rt->bytes);
        if (st == SL_OK && rt->dev)
          st = sl__caching_alloc_alloc(rt->dev->mem, rt->bytes, NULL,
                                       &rt->init_dev);
        if (st == SL_OK && rt->dev)
          st = sl__dev_upload(rt->dev, rt->init_dev, rt->init, rt->bytes);
      }
      break;
    }
    case SL__TASK_COPY:
      rt->copy_h2d =
          sl__dev_class_of(pp->regsts[t->in[0]].device) != SL__DEV_CLASS_CUDA;
      break;
    case SL__TASK_LOCAL:
      if (!pc) {
        st = sl__fail(SL_EINTERNAL, "a local boxing task without its spec");
        break;
      }
      st = rt->dev
               ? sl__dxchg_create(&rt->dev->boxing, &pc->geom, 0, &rt->local)
               : setup_local(pc, rt);
      break;
    case SL__TASK_COLL:
    case SL__TASK_XCHG: {
      if (t->machine != s->self_node) break; /* another node's member */
      if (!pc) {
        st = sl__fail(SL_EINTERNAL, "a boxing task without its spec");
        break;
      }
      if (!by_coll[t->coll] && pc->engine == SL__ENGINE_DEVICE) {
        sl__dgroup *dg = NULL;
        st = make_dgroup(s, pc, rt, &dg);
        if (st != SL_OK) break;
        by_coll[t->coll] = &s->engines[s->n_engines - 1];
      }
      if (!by_coll[t->coll]) {
        sl__coll *c = NULL;
        sl__span *sp = NULL;
        uint32_t *mnode = NULL;
        st = host_coll(s, pc, dev_worker, max_dev + 1, &c, &mnode);
        if (st == SL_OK && pc->engine == SL__ENGINE_NODES)
          st = make_span(s, t, pc, c, mnode, &sp);
        sl__free(mnode);
        if (st != SL_OK) break;
        by_coll[t->coll] = sp ? add_engine(s, &sl__coll_engine_nodes, sp)
                              : add_engine(s, &sl__coll_engine_inproc, c);
      }
      rt->engine = by_coll[t->coll];
      rt->member = t->member;
      break;
    }
    default: break;
    }
    if (st != SL_OK && t->node >= 0)
      sl__fail_context(st, "task '%s': ", t->name);
  }
out:
  sl__free(by_coll);
  sl__free(dev_worker);
  sl__free(worker_cpu);
  return st;
}

void sl__session_free_build(sl_session *s) {
  /* Device groups before their devices and sequencer (close_devices). */
  for (int32_t i = 0; i < s->n_engines; i++)
    sl__coll_engine_destroy(&s->engines[i]);
  sl__free(s->engines);
  s->engines = NULL;
  s->n_engines = 0;
  for (int32_t i = 0; s->rt && i < s->n_tasks; i++) {
    sl__free(s->rt[i].slot_of);
    sl__free(s->rt[i].init);
    sl__dxchg_destroy(s->rt[i].local);
    if (s->rt[i].init_dev)
      sl__caching_alloc_free(s->rt[i].dev->mem, s->rt[i].init_dev);
  }
  sl__session_close_devices(s);
  sl__session_close_cpu_teams(s);
  for (int32_t i = 0; i < s->n_npy; i++)
    sl__npy_release(s->npy[i].id);
  sl__free(s->npy);
  s->npy = NULL;
  s->n_npy = 0;
  sl__free(s->rt);
  for (int32_t i = 0; s->feeds && i < s->n_feeds; i++)
    sl__free(s->feeds[i].data);
  sl__free(s->feeds);
  for (int32_t i = 0; s->fetches && i < s->n_fetches; i++) {
    fetch_rt *f = &s->fetches[i];
    for (int k = 0; f->stage && k < f->depth * f->slots; k++)
      sl__free(f->stage[k]);
    sl__free(f->stage);
    sl__free(f->staged);
    sl__free(f->ranks);
    sl__free(f->slices);
    sl__free(f->shard_bytes);
  }
  sl__free(s->fetches);
  for (int32_t i = 0; s->ticks && i < s->n_ticks; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_destroy(&d->lock);
    sl__free(d->cons);
    sl__free(d->cons_slot);
    sl__free(d->pending);
    sl__free(d->free_q);
  }
  sl__free(s->ticks);
  sl__free(s->actor_desc);
  sl__free(s->var_inits);
}
