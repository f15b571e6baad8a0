/* Jobs: loading one node's share of a plan (registers, slots, queues,
 * threads), starting, waiting, aborting, statistics and remote delivery. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor_int.h"

/* The queue kind SL_QUEUE_DEFAULT picks. bench_actor_chain measures both;
 * bench/README.md, "Actor runtime", has the numbers behind this choice. */
#define DEFAULT_QUEUE SL__QUEUE_LOCKFREE
#define DEFAULT_HANG_TIMEOUT_MS 10000
/* Polls of an empty queue before sleeping, with a yield every 64: measured
 * with bench_actor_chain's fan-in rows, waking a sleeping thread costs far
 * more than this, with few or many threads per CPU. */
#define DEFAULT_SPIN 2000
#define DEFAULT_SPIN_US 20

/* ---- register memory ------------------------------------------------------
 */

static sl_status host_alloc(void *ctx, int32_t device, size_t bytes,
                            void **out) {
  size_t n = sl_register_stride(bytes);
  if (bytes && !n)
    return sl__fail(SL_ENOMEM, "registers of %zu bytes overflow", bytes);
  *out = aligned_alloc(SL_REGISTER_ALIGN, n ? n : SL_REGISTER_ALIGN);
  if (!*out)
    return sl__fail(SL_ENOMEM,
                    "out of memory allocating %zu bytes of registers", bytes);
  memset(*out, 0, n);
  return SL_OK;
}

static void host_free(void *ctx, int32_t device, void *p) { free(p); }

const sl_regst_memory_vtable sl_regst_host_memory = {host_alloc, host_free};

/* Thin wrappers: the tables are called from here only. */
sl_status sl__transport_send(sl_job *job, uint32_t node, const sl_msg *m,
                             const void *payload, size_t nbytes) {
  const sl_transport *t = &job->cfg.transport;
  return t->vt->send(t->ctx, node, m, payload, nbytes);
}

bool sl__transport_quiescent(sl_job *job, uint64_t *progress) {
  const sl_transport *t = &job->cfg.transport;
  *progress = 0;
  return t->vt->quiescent ? t->vt->quiescent(t->ctx, job->node, progress)
                          : false;
}

static void mem_free(sl_job *job, const mem_block *b) {
  job->cfg.memory->free(job->cfg.memory_ctx, b->device, b->p);
}

static sl_status mem_alloc(sl_job *job, int32_t device, size_t bytes,
                           void **out) {
  if (job->n_mem == job->cap_mem) {
    uint32_t c = job->cap_mem ? job->cap_mem * 2 : 16;
    mem_block *m = sl__reallocarray(job->mem, c, sizeof *m);
    if (!m) return SL_ENOMEM;
    job->mem = m;
    job->cap_mem = c;
  }
  SL_CHECK(job->cfg.memory->alloc(job->cfg.memory_ctx, device, bytes, out));
  job->mem[job->n_mem++] = (mem_block){device, *out};
  return SL_OK;
}

/* `count` registers of `bytes` each, data 64-byte aligned in one piece of
 * memory: a plan block's at `offset` when block > 0, else their own. */
static sl_status regs_alloc(sl_job *job, int32_t desc, int32_t count,
                            size_t bytes, int32_t device, int32_t block,
                            size_t offset, int32_t n_cons, sl_actor_id producer,
                            rt_regst **out) {
  rt_regst *r = sl__arena_calloc(job->arena, (size_t)count, sizeof *r);
  if (!r) return SL_ENOMEM;
  size_t stride = sl_register_stride(bytes);
  if ((bytes && !stride) || (count && stride > SIZE_MAX / (size_t)count))
    return sl__fail(SL_ENOMEM, "registers of %zu bytes overflow", bytes);
  unsigned char *base = NULL;
  bool shared = block > 0 && stride;
  if (shared)
    base = job->block_base[block - 1] + offset;
  else if (stride)
    SL_CHECK(mem_alloc(job, device, stride * (size_t)count, (void **)&base));
  for (int32_t i = 0; i < count; i++) {
    r[i].pub = (sl_register){
        base ? base + stride * (size_t)i : NULL, bytes, -1, producer, desc, i};
    r[i].shared = shared;
    if (n_cons > 0) {
      r[i].held = sl__arena_alloc(job->arena, (size_t)n_cons);
      if (!r[i].held) return SL_ENOMEM;
    }
  }
  job->n_registers += (uint64_t)count;
  if (!shared) job->register_bytes += (uint64_t)bytes * (uint64_t)count;
  *out = r;
  return SL_OK;
}

/* This node's plan blocks, each allocated once. */
static sl_status blocks_alloc(sl_job *job) {
  const sl_actor_graph *p = job->plan;
  job->block_base = sl__arena_calloc(job->arena, (size_t)p->n_blocks + 1,
                                     sizeof *job->block_base);
  if (!job->block_base) return SL_ENOMEM;
  for (int32_t b = 0; b < p->n_blocks; b++) {
    const plan_block *pb = &p->blocks[b];
    if (pb->node != job->node || !pb->bytes) continue;
    SL_CHECK(
        mem_alloc(job, pb->device, pb->bytes, (void **)&job->block_base[b]));
    job->register_bytes += pb->bytes;
  }
  return SL_OK;
}

/* ---- labels and failures ----------------------------------------------------
 */

void sl__job_device_name(const sl_job *job, uint32_t device, char *buf,
                         size_t n) {
  if (job->cfg.device_name)
    job->cfg.device_name(device, buf, n);
  else
    snprintf(buf, n, "device %u", device);
}

void sl__actor_label(const sl_job *job, sl_actor_id id, char *buf, size_t n) {
  const char *name = sl_actor_graph_actor_name(job->plan, id);
  char dev[40];
  sl__job_device_name(job, sl_actor_id_device(id), dev, sizeof dev);
  snprintf(buf, n, "'%s' (node %u, %s, stream %u)", name ? name : "?",
           sl_actor_id_node(id), dev, sl_actor_id_stream(id));
}

/* origin: the node where the failure began. */
static void job_abort(sl_job *job, sl_status st, sl_actor_id who, bool has_who,
                      const char *detail, bool broadcast, int64_t piece,
                      uint32_t origin) {
  if (st == SL_OK) st = SL_EABORTED;
  bool first = false;
  pthread_mutex_lock(&job->lock);
  if (!atomic_load(&job->done) && atomic_load(&job->status) == SL_OK) {
    first = true;
    atomic_store(&job->status, st);
    job->failure_origin = origin;
    char label[300] = "";
    if (has_who) sl__actor_label(job, who, label, sizeof label);
    if (has_who && detail && detail[0])
      snprintf(job->errmsg, sizeof job->errmsg, "actor %s: %s", label, detail);
    else if (has_who)
      snprintf(job->errmsg, sizeof job->errmsg, "actor %s: failed with %s",
               label, sl_status_str(st));
    else
      snprintf(job->errmsg, sizeof job->errmsg, "%s",
               detail && detail[0] ? detail : sl_status_str(st));
    atomic_store(&job->stop, 1);
    pthread_cond_broadcast(&job->cond);
  }
  pthread_mutex_unlock(&job->lock);
  if (!first) return;
  for (uint32_t i = 0; i < job->n_streams; i++)
    sl__mpsc_wake(job->streams[i].q);
  if (!broadcast || !job->cfg.transport.vt) return;
  sl_msg m = {0};
  m.kind = SL_MSG_CMD;
  m.cmd = SL_CMD_ABORT;
  m.index = (int32_t)st;
  m.piece = piece;
  m.src = has_who ? who : 0;
  m.desc = has_who ? 1 : 0;
  m.origin_node = (uint16_t)job->node;
  for (uint32_t n = 0; n < job->plan->n_nodes; n++)
    if (n != job->node) sl__transport_send(job, n, &m, NULL, 0);
}

void sl__job_abort(sl_job *job, sl_status st, sl_actor_id who, bool has_who,
                   const char *detail, bool broadcast) {
  job_abort(job, st, who, has_who, detail, broadcast, -1, job->node);
}

void sl__job_abort_firing(sl_job *job, sl_status st, sl_actor_id who,
                          const char *detail, int64_t piece) {
  job_abort(job, st, who, true, detail, true, piece, job->node);
}

/* ---- loading
 * ------------------------------------------------------------------ */

static sl_status resolve_config(sl_job *job, const sl_job_config *cfg) {
  job->cfg = sl_job_config_default();
  if (cfg)
    SL_CHECK(sl__config_copy(&job->cfg, sizeof job->cfg, cfg, "sl_job_config",
                             "SL_JOB_CONFIG"));
  sl_job_config *c = &job->cfg;
  if (c->node >= SL_ACTOR_MAX_NODES)
    return sl__fail(SL_EINVAL, "job: node %u out of range", c->node);
  job->node = c->node;
  job->S = c->streams_per_device ? c->streams_per_device : SL_STREAMS_DEFAULT;
  if (job->S > SL_ACTOR_MAX_STREAMS)
    return sl__fail(SL_EINVAL, "job: %u streams per device (at most %u)",
                    job->S, SL_ACTOR_MAX_STREAMS);
  switch (c->queue) {
  case SL_QUEUE_DEFAULT: job->qkind = DEFAULT_QUEUE; break;
  case SL_QUEUE_MUTEX: job->qkind = SL__QUEUE_MUTEX; break;
  case SL_QUEUE_LOCKFREE: job->qkind = SL__QUEUE_LOCKFREE; break;
  default:
    return sl__fail(SL_EINVAL, "job: unknown queue kind %d", (int)c->queue);
  }
  job->hang_timeout_ms = c->hang_timeout_ms;
  if (job->hang_timeout_ms == 0) {
    const char *e = getenv("SLUICE_HANG_TIMEOUT_MS");
    long long v = e && e[0] ? strtoll(e, NULL, 10) : 0;
    job->hang_timeout_ms = v != 0 ? v : DEFAULT_HANG_TIMEOUT_MS;
  }
  if (!c->memory) {
    c->memory = &sl_regst_host_memory;
    c->memory_ctx = NULL;
  }
  /* Checksums and poison need the registers' bytes in host memory. */
  const char *mc = getenv("SLUICE_MEMCHECK");
  job->memcheck =
      mc && mc[0] && strcmp(mc, "0") != 0 && c->memory == &sl_regst_host_memory;
  if (c->transport.vt && !c->transport.vt->send)
    return sl__fail(SL_EINVAL, "job: the transport has no send function");
  const char *tp = c->trace_path ? c->trace_path : getenv("SLUICE_TRACE");
  if (tp && tp[0]) {
    size_t n = strlen(tp) + 32;
    job->trace_path = sl__malloc(n);
    if (!job->trace_path) return SL_ENOMEM;
    const char *dot = strrchr(tp, '.'), *slash = strrchr(tp, '/');
    if (dot && slash && dot < slash) dot = NULL;
    if (job->plan->n_nodes <= 1)
      snprintf(job->trace_path, n, "%s", tp);
    else if (dot)
      snprintf(job->trace_path, n, "%.*s.node%u%s", (int)(dot - tp), tp,
               job->node, dot);
    else
      snprintf(job->trace_path, n, "%s.node%u", tp, job->node);
  }
  c->trace_path = NULL;
  return SL_OK;
}

/* Streams: one per (device, stream) hosting a local actor. */
static sl_status build_streams(sl_job *job) {
  const sl_actor_graph *p = job->plan;
  uint32_t max_dev = 0;
  bool any = false;
  for (int32_t i = 0; i < p->n_actors; i++) {
    const plan_actor *a = &p->actors[i];
    if (a->d.node != job->node) continue;
    if (a->proxy)
      return sl__fail(SL_EINVAL,
                      "actor '%s': a proxy on node %u, the job's own (a proxy "
                      "stands for another node's actor)",
                      a->d.name, job->node);
    if (a->d.stream >= job->S)
      return sl__fail(SL_EINVAL,
                      "actor '%s': stream %u, but the job has %u streams per "
                      "device",
                      a->d.name, a->d.stream, job->S);
    if (a->d.device > max_dev) max_dev = a->d.device;
    any = true;
  }
  job->by_plan = sl__arena_calloc(job->arena, (size_t)p->n_actors + 1,
                                  sizeof *job->by_plan);
  if (!job->by_plan) return SL_ENOMEM;
  if (!any) return SL_OK;
  job->n_slots = (max_dev + 1) * job->S;
  int32_t *n_in_slot = sl__calloc(job->n_slots, sizeof *n_in_slot);
  job->by_slot =
      sl__arena_calloc(job->arena, job->n_slots, sizeof *job->by_slot);
  if (!n_in_slot || !job->by_slot) {
    sl__free(n_in_slot);
    return SL_ENOMEM;
  }
  for (int32_t i = 0; i < p->n_actors; i++) {
    const plan_actor *a = &p->actors[i];
    if (a->d.node != job->node) continue;
    uint32_t slot = a->d.device * job->S + a->d.stream;
    int32_t idx = (int32_t)sl_actor_id_index(a->id);
    if (idx + 1 > n_in_slot[slot]) n_in_slot[slot] = idx + 1;
  }
  for (uint32_t s = 0; s < job->n_slots; s++)
    if (n_in_slot[s]) job->n_streams++;
  job->streams =
      sl__calloc_aligned(job->n_streams, sizeof *job->streams, alignof(stream));
  if (!job->streams) {
    job->n_streams = 0;
    sl__free(n_in_slot);
    return SL_ENOMEM;
  }
  uint32_t k = 0;
  for (uint32_t slot = 0; slot < job->n_slots; slot++) {
    if (!n_in_slot[slot]) continue;
    stream *s = &job->streams[k];
    s->job = job;
    s->ordinal = k++;
    s->device = slot / job->S;
    s->stream = slot % job->S;
    s->n_actors = n_in_slot[slot];
    s->actors =
        sl__arena_calloc(job->arena, (size_t)s->n_actors, sizeof *s->actors);
    if (!s->actors) {
      sl__free(n_in_slot);
      return SL_ENOMEM;
    }
    static const char *kinds[] = {"compute", "copy", "network", "collective"};
    char dev[40] = "";
    if (job->cfg.device_name)
      job->cfg.device_name(s->device, dev, sizeof dev);
    else
      snprintf(dev, sizeof dev, "dev%u", s->device);
    if (s->stream < 4)
      snprintf(s->name, sizeof s->name, "%s/%s", dev, kinds[s->stream]);
    else
      snprintf(s->name, sizeof s->name, "%s/stream%u", dev, s->stream);
    atomic_init(&s->handled_pub, 0);
    atomic_init(&s->exited, 0);
    job->by_slot[slot] = s;
  }
  sl__free(n_in_slot);
  return SL_OK;
}

static sl_status build_actors(sl_job *job) {
  const sl_actor_graph *p = job->plan;
  for (int32_t i = 0; i < p->n_actors; i++) {
    const plan_actor *pa = &p->actors[i];
    if (pa->d.node != job->node) continue;
    stream *s = job->by_slot[pa->d.device * job->S + pa->d.stream];
    rt_actor *a = &s->actors[sl_actor_id_index(pa->id)];
    job->by_plan[i] = a;
    a->pa = pa;
    a->id = pa->id;
    a->st = s;
    a->kind = pa->d.kind;
    a->act = pa->d.act;
    a->n_in = pa->n_in;
    a->n_out = pa->n_out;
    a->k = 1;
    a->mode = MODE_ONE;
    if (a->kind == SL_ACTOR_REPEAT || a->kind == SL_ACTOR_UNPACK) {
      a->mode = MODE_FAN_OUT;
      a->k = (int32_t)pa->d.count;
    } else if (a->kind == SL_ACTOR_ACCUMULATE || a->kind == SL_ACTOR_PACK) {
      a->mode = MODE_FAN_IN;
      a->k = (int32_t)pa->d.count;
    }
    a->limit = a->kind == SL_ACTOR_SOURCE ? pa->d.count : 0;
    a->in = sl__arena_calloc(job->arena, (size_t)a->n_in + 1, sizeof *a->in);
    a->out = sl__arena_calloc(job->arena, (size_t)a->n_out + 1, sizeof *a->out);
    a->in_view =
        sl__arena_calloc(job->arena, (size_t)a->n_in + 1, sizeof *a->in_view);
    a->out_view =
        sl__arena_calloc(job->arena, (size_t)a->n_out + 1, sizeof *a->out_view);
    if (!a->in || !a->out || !a->in_view || !a->out_view) return SL_ENOMEM;
    a->a = (sl_act){.ctx = pa->d.ctx,
                    .name = pa->d.name,
                    .actor = pa->id,
                    .steps = a->k,
                    .n_in = a->n_in,
                    .n_out = a->n_out,
                    .in = a->in_view,
                    .out = a->out_view,
                    .internal_ = a};
    a->completion.actor = a;
    atomic_init(&a->completion.waiting, false);
    atomic_init(&a->completion.said_waiting, false);
    s->live++;
  }
  return SL_OK;
}

static sl_status build_outputs(sl_job *job) {
  const sl_actor_graph *p = job->plan;
  job->out_of = sl__arena_calloc(job->arena, (size_t)p->n_regsts + 1,
                                 sizeof *job->out_of);
  if (!job->out_of) return SL_ENOMEM;
  for (int32_t ri = 0; ri < p->n_regsts; ri++) {
    const plan_regst *r = &p->regsts[ri];
    rt_actor *a = job->by_plan[r->producer];
    if (!a) continue;
    out_slot *o = &a->out[r->out_slot];
    job->out_of[ri] = o;
    o->desc = ri;
    o->wire = r->wire;
    o->count = r->d.count;
    o->cur = -1;
    o->n_cons = r->n_cons;
    SL_CHECK(regs_alloc(job, ri, o->count, r->d.bytes, r->d.device, r->block,
                        r->offset, r->n_cons, a->id, &o->regs));
    o->free_fifo =
        sl__arena_calloc(job->arena, (size_t)o->count, sizeof(int32_t));
    o->cons_id =
        sl__arena_calloc(job->arena, (size_t)r->n_cons + 1, sizeof *o->cons_id);
    o->cons_slot = sl__arena_calloc(job->arena, (size_t)r->n_cons + 1,
                                    sizeof *o->cons_slot);
    if (!o->free_fifo || !o->cons_id || !o->cons_slot) return SL_ENOMEM;
    for (int32_t c = 0; c < r->n_cons; c++) { /* by position */
      const plan_actor *ca = &p->actors[r->cons[c].actor];
      o->cons_id[r->cons[c].position] = ca->id;
      o->cons_slot[r->cons[c].position] = (uint16_t)r->cons[c].slot;
      if (ca->d.node != job->node) job->has_remote = true;
    }
    for (int32_t i = 0; i < r->d.initial; i++) {
      o->regs[i].pub.piece = i;
      if (r->d.init) {
        sl_status st = r->d.init(r->d.init_ctx, &o->regs[i].pub);
        if (st != SL_OK)
          return sl__fail_context(st, "register '%s' of actor '%s': init: ",
                                  r->d.name, a->pa->d.name);
      }
    }
    for (int32_t i = r->d.initial; i < o->count; i++)
      o->free_fifo[o->flen++] = i;
    o->in_flight = o->peak = r->d.initial;
    if (r->d.initial > a->next_piece) a->next_piece = r->d.initial;
  }
  return SL_OK;
}

static sl_status build_inputs(sl_job *job) {
  const sl_actor_graph *p = job->plan;
  for (int32_t i = 0; i < p->n_actors; i++) {
    rt_actor *a = job->by_plan[i];
    if (!a) continue;
    for (int32_t k = 0; k < a->n_in; k++) {
      int32_t ri = a->pa->in[k];
      const plan_regst *r = &p->regsts[ri];
      const plan_actor *prod = &p->actors[r->producer];
      in_slot *sl = &a->in[k];
      sl->desc = ri;
      sl->wire = r->wire;
      sl->producer = prod->id;
      sl->producer_slot = (uint16_t)r->out_slot;
      for (int32_t c = 0; c < r->n_cons; c++)
        if (r->cons[c].actor == i && r->cons[c].slot == k)
          sl->consumer = (uint16_t)r->cons[c].position;
      sl->cap = (uint32_t)r->d.count;
      sl->fifo = sl__arena_calloc(job->arena, sl->cap, sizeof *sl->fifo);
      if (!sl->fifo) return SL_ENOMEM;
      if (prod->d.node != job->node) {
        sl->remote = true;
        job->has_remote = true;
        /* The mirror is on the descriptor's device id (on this node),
         * else the reader's. */
        int32_t dev = r->d.device >= 0 ? r->d.device : (int32_t)a->pa->d.device;
        /* A mirror: the block is the producer node's. */
        SL_CHECK(regs_alloc(job, ri, r->d.count, r->d.bytes, dev, 0, 0, 0,
                            prod->id, &sl->regs));
      } else {
        sl->regs = job->out_of[ri]->regs;
      }
    }
  }
  if (job->has_remote && !job->cfg.transport.vt)
    return sl__fail(SL_EINVAL,
                    "job: node %u exchanges registers with other nodes but "
                    "has no transport",
                    job->node);
  return SL_OK;
}

/* Queue sizes. What can be queued for a stream is bounded by the plan: per
 * (descriptor, reader) edge at most `count` READY (one per register), at
 * most `count` RETURN and one EOD; per actor one COMPLETE; plus commands. */
static sl_status build_queues(sl_job *job) {
  const sl_actor_graph *p = job->plan;
  size_t *lcap = sl__calloc(job->n_streams + 1, sizeof *lcap);
  size_t *qcap = sl__calloc(job->n_streams + 1, sizeof *qcap);
  sl_status st = SL_OK;
  if (!lcap || !qcap) {
    st = SL_ENOMEM;
    goto done;
  }
  for (int32_t ri = 0; ri < p->n_regsts; ri++) {
    const plan_regst *r = &p->regsts[ri];
    rt_actor *pa = job->by_plan[r->producer];
    for (int32_t c = 0; c < r->n_cons; c++) {
      rt_actor *ca = job->by_plan[r->cons[c].actor];
      size_t cnt = (size_t)r->d.count;
      if (pa && ca && pa->st == ca->st) {
        lcap[pa->st->ordinal] += 2 * cnt + 1;
        continue;
      }
      if (ca) qcap[ca->st->ordinal] += cnt + 1;
      if (pa) qcap[pa->st->ordinal] += cnt;
    }
  }
  for (uint32_t i = 0; i < job->n_streams; i++) {
    stream *s = &job->streams[i];
    size_t q = qcap[i] + (size_t)s->n_actors + 8;
    SL_CHECK_GOTO(sl__mpsc_create(job->qkind, sizeof(sl_msg), q, &s->q), st,
                  done);
    size_t l = 16;
    while (l < lcap[i] + 1)
      l *= 2;
    s->lq = sl__reallocarray(NULL, l, sizeof *s->lq);
    if (!s->lq) {
      st = SL_ENOMEM;
      goto done;
    }
    s->lmask = (uint32_t)(l - 1);
    if (job->cfg.spin > 0)
      s->spin = job->cfg.spin;
    else if (job->cfg.spin == 0)
      s->spin = job->cfg.spin_us > 0 ? INT32_MAX : DEFAULT_SPIN;
    s->spin_ns = (job->cfg.spin_us > 0 ? job->cfg.spin_us : DEFAULT_SPIN_US) *
                 (int64_t)1000;
    s->trace_on = job->trace_path != NULL;
  }
done:
  sl__free(lcap);
  sl__free(qcap);
  return st;
}

static void stop_threads(sl_job *job) {
  atomic_store(&job->stop, 1);
  for (uint32_t i = 0; i < job->n_streams; i++)
    if (job->streams[i].q) sl__mpsc_wake(job->streams[i].q);
  for (uint32_t i = 0; i < job->n_streams; i++)
    sl__thread_join(&job->streams[i].thread);
}

sl_status sl_job_create(sl_actor_graph *plan, const sl_job_config *cfg,
                        sl_job **out) {
  *out = NULL;
  SL_CHECK(sl_actor_graph_check(plan));
  sl_job *job;
  if (SL_NEW(job) != SL_OK) return SL_ENOMEM;
  job->plan = plan;
  atomic_init(&job->stop, 0);
  atomic_init(&job->status, SL_OK);
  atomic_init(&job->accepting, 0);
  atomic_init(&job->started, 0);
  atomic_init(&job->done, 0);
  atomic_init(&job->stop_sent, 0);
  atomic_init(&job->async_pending, 0);
  atomic_init(&job->async_waiting, 0);
  pthread_mutex_init(&job->lock, NULL);
  sl_status st = sl__cond_init(&job->cond);
  if (st == SL_OK) {
    st = sl__cond_init(&job->watchdog_cond);
    if (st != SL_OK) pthread_cond_destroy(&job->cond);
  }
  if (st != SL_OK) {
    pthread_mutex_destroy(&job->lock);
    sl__free(job);
    return st;
  }
  job->hang_report = NULL;
  SL_CHECK_GOTO(sl__arena_create(0, &job->arena), st, fail);
  SL_CHECK_GOTO(resolve_config(job, cfg), st, fail);
  atomic_store(&plan->frozen, 1);
  SL_CHECK_GOTO(build_streams(job), st, fail);
  SL_CHECK_GOTO(build_actors(job), st, fail);
  SL_CHECK_GOTO(blocks_alloc(job), st, fail);
  SL_CHECK_GOTO(build_outputs(job), st, fail);
  SL_CHECK_GOTO(build_inputs(job), st, fail);
  SL_CHECK_GOTO(build_queues(job), st, fail);
  job->threads_live = (int)job->n_streams;
  for (uint32_t i = 0; i < job->n_streams; i++) {
    char name[72]; /* the system keeps the first 15 */
    snprintf(name, sizeof name, "sl-%s", job->streams[i].name);
    st = sl__thread_start(&job->streams[i].thread, sl__stream_main,
                          &job->streams[i], name);
    if (st != SL_OK) {
      pthread_mutex_lock(&job->lock);
      job->threads_live -= (int)(job->n_streams - i);
      pthread_mutex_unlock(&job->lock);
      goto fail;
    }
  }
  atomic_store(&job->accepting, 1);
  *out = job;
  return SL_OK;
fail:
  sl_job_destroy(job);
  return st;
}

/* ---- running ----------------------------------------------------------------
 */

sl_status sl_job_start(sl_job *job) {
  pthread_mutex_lock(&job->lock);
  if (job->state != JOB_CREATED) {
    pthread_mutex_unlock(&job->lock);
    return sl__fail(SL_ESTATE, "job: already started");
  }
  job->state = JOB_STARTED;
  job->t_start = sl__now_ns();
  if (job->threads_live == 0) {
    atomic_store(&job->done, 1);
    job->t_end = job->t_start;
  }
  pthread_mutex_unlock(&job->lock);
  atomic_store(&job->started, 1);
  if (job->hang_timeout_ms > 0) {
    sl_status st = sl__watchdog_start(job);
    if (st != SL_OK) {
      sl__job_abort(job, st, 0, false, sl_last_error(), true);
      return st;
    }
  }
  sl_msg m = {0};
  m.kind = SL_MSG_CMD;
  m.cmd = SL_CMD_START;
  m.origin_node = (uint16_t)job->node;
  for (uint32_t i = 0; i < job->n_streams; i++)
    if (!sl__mpsc_push(job->streams[i].q, &m))
      sl__job_abort(job, SL_EINTERNAL, 0, false, "job: a stream queue is full",
                    true);
  return SL_OK;
}

sl_status sl_job_stop(sl_job *job) {
  pthread_mutex_lock(&job->lock);
  bool ok = job->state != JOB_CREATED;
  pthread_mutex_unlock(&job->lock);
  if (!ok) return sl__fail(SL_ESTATE, "job: not started");
  /* One STOP per job: the queues are sized for that. */
  if (atomic_exchange(&job->stop_sent, 1)) return SL_OK;
  sl_msg m = {0};
  m.kind = SL_MSG_CMD;
  m.cmd = SL_CMD_STOP;
  m.origin_node = (uint16_t)job->node;
  for (uint32_t i = 0; i < job->n_streams; i++)
    sl__mpsc_push(job->streams[i].q, &m);
  return SL_OK;
}

void sl_job_abort(sl_job *job, sl_status st) {
  sl__job_abort(job, st, 0, false, "job: aborted by the caller", true);
}

/* After the threads are joined: actor messages never handled. Commands are
 * not counted: a STOP may reach a stream whose actors all finished. */
static uint64_t messages_left(sl_job *job) {
  uint64_t n = 0;
  sl_msg batch[64];
  for (uint32_t i = 0; i < job->n_streams; i++) {
    stream *s = &job->streams[i];
    n += s->llen + s->dropped;
    size_t k;
    while ((k = sl__mpsc_pop(s->q, batch, SL_ARRAY_LEN(batch))) > 0)
      for (size_t j = 0; j < k; j++)
        n += batch[j].kind != SL_MSG_CMD;
  }
  return n;
}

sl_status sl_job_wait(sl_job *job) {
  pthread_mutex_lock(&job->lock);
  if (job->state == JOB_CREATED) {
    pthread_mutex_unlock(&job->lock);
    return sl__fail(SL_ESTATE, "job: not started");
  }
  if (job->state == JOB_STARTED) {
    while (job->threads_live > 0)
      pthread_cond_wait(&job->cond, &job->lock);
    pthread_mutex_unlock(&job->lock);
    for (uint32_t i = 0; i < job->n_streams; i++)
      sl__thread_join(&job->streams[i].thread);
    sl__watchdog_stop(job);
    pthread_mutex_lock(&job->lock);
    /* Deferred firings still hold registers the device may write. */
    while (atomic_load(&job->async_pending) > 0)
      pthread_cond_wait(&job->cond, &job->lock);
    job->state = JOB_WAITED;
    pthread_mutex_unlock(&job->lock);
    job->messages_left = messages_left(job);
    job->ended_status = atomic_load(&job->status);
    atomic_store(&job->accepting, 0);
    sl_status st = atomic_load(&job->status);
    if (st == SL_EHANG) sl__hang_report_build(job);
    if (job->trace_path) {
      sl_status ts = sl__trace_write(job);
      if (ts != SL_OK && st == SL_OK) {
        atomic_store(&job->status, ts);
        pthread_mutex_lock(&job->lock);
        snprintf(job->errmsg, sizeof job->errmsg, "%s", sl_last_error());
        pthread_mutex_unlock(&job->lock);
      }
    }
    pthread_mutex_lock(&job->lock);
  }
  sl_status st = atomic_load(&job->status);
  pthread_mutex_unlock(&job->lock);
  if (st != SL_OK) return sl__fail(st, "%s", job->errmsg);
  return SL_OK;
}

sl_status sl_job_run(sl_job *job) {
  SL_CHECK(sl_job_start(job));
  return sl_job_wait(job);
}

void sl_job_destroy(sl_job *job) {
  if (!job) return;
  if (job->state == JOB_STARTED) sl_job_wait(job);
  stop_threads(job);
  for (uint32_t i = 0; i < job->n_streams; i++) {
    stream *s = &job->streams[i];
    sl__mpsc_destroy(s->q);
    sl__free(s->lq);
    sl__free(s->tev);
    for (int32_t k = 0; k < s->n_actors; k++)
      sl__free(s->actors[k].completion.detail);
  }
  for (uint32_t i = 0; i < job->n_mem; i++)
    mem_free(job, &job->mem[i]);
  sl__free(job->streams);
  sl__free(job->mem);
  sl__free(job->hang_report);
  sl__free(job->trace_path);
  sl__arena_destroy(job->arena);
  pthread_cond_destroy(&job->cond);
  pthread_cond_destroy(&job->watchdog_cond);
  pthread_mutex_destroy(&job->lock);
  sl__free(job);
}

const char *sl_job_hang_report(const sl_job *job) {
  return job->hang_report ? job->hang_report : "";
}

/* ---- lookups and remote delivery --------------------------------------------
 */

rt_actor *sl__job_actor(const sl_job *job, sl_actor_id id) {
  if (sl_actor_id_node(id) != job->node) return NULL;
  uint64_t slot =
      (uint64_t)sl_actor_id_device(id) * job->S + sl_actor_id_stream(id);
  if (sl_actor_id_stream(id) >= job->S || slot >= job->n_slots) return NULL;
  stream *s = job->by_slot[slot];
  if (!s || sl_actor_id_index(id) >= (uint32_t)s->n_actors) return NULL;
  rt_actor *a = &s->actors[sl_actor_id_index(id)];
  return a->pa ? a : NULL;
}

static sl_status bad_msg(const sl_job *job, const sl_msg *m, const char *why) {
  return sl__fail(SL_EINVAL,
                  "job on node %u: message (kind %u) from node %u for actor "
                  "0x%llx: %s",
                  job->node, m->kind, m->origin_node,
                  (unsigned long long)m->dst, why);
}

/* The failure for a message that reaches a job after it ended: the job's
 * own failure when it aborted (the sender's job then fails with that cause,
 * not with a message about a closed door), else SL_ESTATE. */
static sl_status ended(sl_job *job) {
  if (job->ended_status != SL_OK) {
    /* errmsg may still be written (the hang report): under the lock. */
    pthread_mutex_lock(&job->lock);
    sl_status st = sl__fail(job->ended_status, "job on node %u ended: %s",
                            job->node, job->errmsg);
    pthread_mutex_unlock(&job->lock);
    return st;
  }
  return sl__fail(SL_ESTATE, "job on node %u: no longer accepts messages",
                  job->node);
}

bool sl_job_ended(const sl_job *job) { return !atomic_load(&job->accepting); }

int64_t sl_job_failure_origin(sl_job *job) {
  pthread_mutex_lock(&job->lock);
  int64_t n =
      atomic_load(&job->status) == SL_OK ? -1 : (int64_t)job->failure_origin;
  pthread_mutex_unlock(&job->lock);
  return n;
}

sl_status sl_job_deliver(sl_job *job, const sl_msg *m, const void *payload,
                         size_t nbytes) {
  if (!atomic_load(&job->accepting)) return ended(job);
  if (m->kind == SL_MSG_CMD) {
    if (m->cmd != SL_CMD_ABORT)
      return bad_msg(job, m, "only ABORT commands cross nodes");
    sl_status st = (sl_status)m->index;
    if (st == SL_OK || !strcmp(sl_status_str(st), "SL_E?"))
      return bad_msg(job, m, "ABORT with an invalid status");
    char detail[64];
    snprintf(detail, sizeof detail, "failed with %s (reported by node %u)",
             sl_status_str(st), m->origin_node);
    bool has_who = m->desc == 1 && sl__plan_find(job->plan, m->src) >= 0;
    job_abort(job, st, m->src, has_who,
              has_who ? detail : "aborted by another node", false, -1,
              m->origin_node);
    return SL_OK;
  }
  rt_actor *a = sl__job_actor(job, m->dst);
  if (!a) return bad_msg(job, m, "no such actor here");
  switch (m->kind) {
  case SL_MSG_READY:
  case SL_MSG_EOD: {
    if (m->slot >= a->n_in) return bad_msg(job, m, "no such input slot");
    in_slot *sl = &a->in[m->slot];
    if (!sl->remote || sl->wire != m->desc || sl->producer != m->src)
      return bad_msg(job, m, "input slot does not match the sender");
    if (m->kind == SL_MSG_EOD) break;
    if (m->index < 0 || (uint32_t)m->index >= sl->cap)
      return bad_msg(job, m, "no such register");
    rt_regst *r = &sl->regs[m->index];
    if (nbytes != r->pub.bytes || (nbytes && !payload))
      return bad_msg(job, m, "payload size does not match the register");
    /* Transports that received into the register (sl_job_payload_target)
     * pass it as the payload: nothing to copy. */
    if (nbytes && payload != r->pub.data) memcpy(r->pub.data, payload, nbytes);
    r->pub.piece = m->piece;
    break;
  }
  case SL_MSG_RETURN: {
    if (m->slot >= a->n_out) return bad_msg(job, m, "no such output slot");
    out_slot *o = &a->out[m->slot];
    if (o->wire != m->desc || m->index < 0 || m->index >= o->count ||
        m->consumer >= o->n_cons || o->cons_id[m->consumer] != m->src ||
        sl_actor_id_node(m->src) == job->node)
      return bad_msg(job, m, "return does not match the register's readers");
    break;
  }
  default: return bad_msg(job, m, "unknown message kind");
  }
  if (!sl__mpsc_push(a->st->q, m))
    return sl__fail(SL_EINTERNAL, "job on node %u: queue of stream %s full",
                    job->node, a->st->name);
  return SL_OK;
}

sl_status sl_job_payload_target(sl_job *job, const sl_msg *m, size_t nbytes,
                                void **out) {
  *out = NULL;
  if (!atomic_load(&job->accepting)) return ended(job);
  if (m->kind != SL_MSG_READY)
    return bad_msg(job, m, "only register-ready messages carry a payload");
  rt_actor *a = sl__job_actor(job, m->dst);
  if (!a) return bad_msg(job, m, "no such actor here");
  if (m->slot >= a->n_in) return bad_msg(job, m, "no such input slot");
  in_slot *sl = &a->in[m->slot];
  if (!sl->remote || sl->wire != m->desc || sl->producer != m->src)
    return bad_msg(job, m, "input slot does not match the sender");
  if (m->index < 0 || (uint32_t)m->index >= sl->cap)
    return bad_msg(job, m, "no such register");
  rt_regst *r = &sl->regs[m->index];
  if (nbytes != r->pub.bytes)
    return bad_msg(job, m, "payload size does not match the register");
  *out = r->pub.data;
  return SL_OK;
}

void sl_job_abort_msg(sl_job *job, sl_status st, const char *msg) {
  sl__job_abort(job, st, 0, false, msg, true);
}

bool sl_job_quiescent(const sl_job *job, uint64_t *progress) {
  return sl__job_local_quiescent(job, progress);
}

/* ---- statistics
 * ------------------------------------------------------------------ */

static sl_status need_waited(const sl_job *job) {
  if (job->state != JOB_WAITED)
    return sl__fail(SL_ESTATE, "job: statistics need sl_job_wait first");
  return SL_OK;
}

const char *sl_job_trace_path(const sl_job *job) {
  return job ? job->trace_path : NULL;
}

sl_status sl_job_get_stats(const sl_job *job, sl_job_stats *out) {
  memset(out, 0, sizeof *out);
  SL_CHECK(need_waited(job));
  out->threads = job->n_streams;
  out->registers = job->n_registers;
  out->register_bytes = job->register_bytes;
  for (uint32_t i = 0; i < job->n_streams; i++) {
    const stream *s = &job->streams[i];
    out->actors += (uint32_t)s->n_actors;
    out->firings += s->firings;
    out->messages_local += s->msgs_local;
    out->messages_cross += s->msgs_cross;
    out->messages_remote += s->msgs_remote;
    out->discarded += s->discarded;
    out->spins_caught += s->spins_caught;
    out->spins_missed += s->spins_missed;
    out->sleeps += s->sleeps;
    for (int32_t k = 0; k < s->n_actors; k++) {
      const rt_actor *a = &s->actors[k];
      for (int32_t o = 0; o < a->n_out; o++) {
        out->in_flight += (uint64_t)a->out[o].in_flight;
        out->peak_in_flight_sum += (uint64_t)a->out[o].peak;
      }
    }
  }
  out->messages_left = job->messages_left;
  out->run_ms = (double)(job->t_end - job->t_start) / 1e6;
  return SL_OK;
}

sl_status sl_job_get_regst_stats(const sl_job *job, int32_t desc,
                                 sl_regst_stats *out) {
  memset(out, 0, sizeof *out);
  SL_CHECK(need_waited(job));
  if (desc < 0 || desc >= job->plan->n_regsts || !job->out_of[desc])
    return sl__fail(
        SL_ENOTFOUND,
        "job on node %u: register descriptor %d is not produced here",
        job->node, (int)desc);
  const out_slot *o = job->out_of[desc];
  out->count = o->count;
  out->in_flight = o->in_flight;
  out->peak_in_flight = o->peak;
  return SL_OK;
}

static sl_status find_register(const sl_job *job, int32_t desc, int32_t index,
                               const rt_regst **out) {
  *out = NULL;
  if (!job || desc < 0 || desc >= job->plan->n_regsts || !job->out_of[desc])
    return sl__fail(
        SL_ENOTFOUND,
        "job on node %u: register descriptor %d is not produced here",
        job ? job->node : 0u, (int)desc);
  const out_slot *o = job->out_of[desc];
  if (index < 0 || index >= o->count)
    return sl__fail(SL_ENOTFOUND,
                    "job on node %u: descriptor %d has %d registers, not %d",
                    job->node, (int)desc, (int)o->count, (int)index + 1);
  *out = &o->regs[index];
  return SL_OK;
}

sl_status sl_job_register_data(const sl_job *job, int32_t desc, int32_t index,
                               void **out) {
  *out = NULL;
  const rt_regst *r;
  SL_CHECK(find_register(job, desc, index, &r));
  *out = r->pub.data;
  return SL_OK;
}

sl_status sl_job_get_register(const sl_job *job, int32_t desc, int32_t index,
                              sl_register *out) {
  memset(out, 0, sizeof *out);
  const rt_regst *r;
  SL_CHECK(find_register(job, desc, index, &r));
  SL_CHECK(need_waited(job));
  *out = r->pub;
  return SL_OK;
}

sl_status sl_job_get_actor_stats(const sl_job *job, sl_actor_id id,
                                 sl_actor_stats *out) {
  memset(out, 0, sizeof *out);
  SL_CHECK(need_waited(job));
  const rt_actor *a = sl__job_actor(job, id);
  if (!a)
    return sl__fail(SL_ENOTFOUND, "job on node %u: no local actor 0x%llx",
                    job->node, (unsigned long long)id);
  out->firings = a->firings;
  out->pieces = a->pieces;
  out->finished = a->finished;
  return SL_OK;
}
