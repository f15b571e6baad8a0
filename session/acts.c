/* What each actor does when it fires, by task kind. Every act ends with
 * sl__step_done once its work is complete (a collective member: when its
 * round completes), which is how the program learns that a step is done. */
#include <string.h>

#include "sbp_int.h"
#include "session_int.h"

enum { FAILURE_MSG = 1024 };

/* A firing whose failure is held back (op_failed). */
typedef struct sl__held_failure {
  struct sl__held_failure *next;
  sl_completion *c;
  int64_t step;
  sl_status st;
  char msg[FAILURE_MSG];
} held_failure;

/* What was held back: this node's failed firings and another node's
 * ABORT (abort.piece < 0: none). */
typedef struct held_back {
  held_failure *failures;
  sl_msg abort;
} held_back;

/* Takes what was held back (s->lock held): all of it, or what waits for
 * steps this node has completed. */
static held_back take_held(sl_session *s, bool all) {
  held_back h = {.abort = {.piece = -1}};
  int64_t first = INT64_MAX;
  for (const held_failure *f = s->held_failures; f; f = f->next)
    first = SL_MIN(first, f->step);
  if (s->held_failures && (all || s->completed >= first)) {
    h.failures = s->held_failures;
    s->held_failures = NULL;
  }
  if (s->held_abort.piece >= 0 &&
      (all || s->completed >= s->held_abort.piece)) {
    h.abort = s->held_abort;
    s->held_abort.piece = -1;
  }
  return h;
}

/* Fails each firing (the first to arrive is the job's failure), then
 * hands the ABORT to the job. */
static void release(sl_session *s, held_back h) {
  while (h.failures) {
    held_failure *next = h.failures->next;
    sl__fail(h.failures->st, "%s", h.failures->msg);
    sl_completion_done(h.failures->c, h.failures->st);
    sl__free(h.failures);
    h.failures = next;
  }
  if (h.abort.piece >= 0) sl_job_deliver(s->job, &h.abort, NULL, 0);
}

void sl__session_release_failure(sl_session *s) {
  pthread_mutex_lock(&s->lock);
  held_back h = take_held(s, true);
  pthread_mutex_unlock(&s->lock);
  release(s, h);
}

bool sl__session_hold_abort(void *ctx, const sl_msg *m) {
  sl_session *s = ctx;
  pthread_mutex_lock(&s->lock);
  bool hold = m->piece >= 0 && s->completed < m->piece &&
              atomic_load(&s->failed) == SL_OK;
  /* One is enough to end the job: the earliest step's. */
  if (hold && (s->held_abort.piece < 0 || m->piece < s->held_abort.piece))
    s->held_abort = *m;
  pthread_mutex_unlock(&s->lock);
  return hold;
}

void sl__session_wait_held_abort(sl_session *s, const atomic_bool *stop) {
  pthread_mutex_lock(&s->lock);
  /* step_done broadcasts as steps complete; the timeout covers *stop */
  while (s->held_abort.piece >= 0 && !atomic_load(stop))
    sl__cond_wait_ns(&s->cond, &s->lock, 50 * 1000 * 1000);
  pthread_mutex_unlock(&s->lock);
}

void sl__step_done(task_rt *rt) {
  sl_session *s = rt->s;
  int64_t k = rt->fired++;
  atomic_int *slot = &s->ring[k % SL__STEP_RING];
  if (atomic_fetch_add(slot, 1) + 1 != s->n_counted) return;
  pthread_mutex_lock(&s->lock);
  /* Steps complete in order: an actor fires step k+1 only after step k. */
  while (atomic_load(&s->ring[s->completed % SL__STEP_RING]) == s->n_counted) {
    atomic_store(&s->ring[s->completed % SL__STEP_RING], 0);
    s->completed++;
  }
  held_back h = take_held(s, false);
  if (s->completed >= s->wake_completed || s->held_abort.piece >= 0)
    pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  release(s, h);
}

/* A kernel failed in step k. Other tasks of this node may still be
 * finishing earlier steps — another device's update of step k-1 waits for
 * its gradient's collective — and aborting the job now would leave that
 * variable between versions, so that the step could not be rolled back
 * (state.c). The failing firing is therefore deferred, and fails (aborting
 * the job) once this node has completed every step before k. That always
 * comes: no firing of a step before k waits for anything of step k (a
 * producer has published piece k only after its earlier pieces, and
 * control edges order tasks within a step and forward to the next), and a
 * failure elsewhere in the meantime fails it at once
 * (sl__session_abort_collectives). Several firings may fail so (bad rows
 * on several devices); all are held. */
static sl_status op_failed(sl_act *a, task_rt *rt, sl_status st) {
  sl_session *s = rt->s;
  char msg[FAILURE_MSG];
  snprintf(msg, sizeof msg, "op '%s' (%s): %s", rt->node->name,
           rt->node->def->name, sl_last_error());
  held_failure *h = sl__malloc(sizeof *h); /* none: fails at once */
  pthread_mutex_lock(&s->lock);
  bool hold = h && s->completed < rt->fired && atomic_load(&s->failed) == SL_OK;
  if (hold) {
    *h = (held_failure){s->held_failures, sl_act_defer(a), rt->fired, st, ""};
    snprintf(h->msg, sizeof h->msg, "%s", msg);
    s->held_failures = h;
  }
  pthread_mutex_unlock(&s->lock);
  if (hold) return SL_OK;
  sl__free(h);
  return sl_act_fail(a, st, "%s", msg);
}

/* The data input of an actor with at most one (the other may be a tick). */
static const sl_register *data_in(const sl_act *a, const task_rt *rt) {
  for (int32_t k = 0; k < rt->t->n_in; k++)
    if (k != rt->t->tick_slot) return a->in[rt->slot_of[k]];
  return NULL;
}

/* The kernel call's tensors for this firing. */
static sl__kernel_ctx *bind_op(sl_act *a, task_rt *rt) {
  sl__kernel_ctx *k = &rt->k;
  for (int i = 0; i < k->n_in; i++) {
    int32_t slot = rt->slot_of[i];
    k->in[i] = slot >= 0 ? a->in[slot]->data : a->out[-1 - slot]->data;
  }
  for (int j = 0; j < k->n_out; j++)
    k->out[j] = a->out[j]->data;
  k->step = rt->s->base + rt->fired; /* the job's piece k is step base + k */
  return k;
}

static sl_status act_op(sl_act *a) {
  task_rt *rt = a->ctx;
  sl__kernel_ctx *k = bind_op(a, rt);
  sl_clear_error();
  sl_status st = sl__op_run_cpu(rt->node->def, k);
  if (st != SL_OK) return op_failed(a, rt, st);
  sl__step_done(rt);
  return SL_OK;
}

/* This rank's shard of the fed logical tensor. */
static sl_status act_feed(sl_act *a) {
  task_rt *rt = a->ctx;
  sl_session *s = rt->s;
  feed_rt *f = &s->feeds[rt->io];
  if (a->out[0]->bytes) {
    int64_t zero[SL_MAX_DIMS] = {0};
    sl__box_move(rt->dtype, rt->ndim, a->out[0]->data, rt->out_dims, zero,
                 f->data, f->meta.shape.dims, rt->slice.start, rt->out_dims,
                 false, SL_REDUCE_SUM);
  }
  /* Counted before looking for a waiting program, which counts itself
   * before looking at the reads (sl_session_feed): one sees the other. */
  atomic_fetch_add(&f->reads, 1);
  if (atomic_load(&s->feed_waiters)) {
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
  }
  sl__step_done(rt);
  return SL_OK;
}

/* Stages this rank's shard for the program, f->depth pieces deep. */
static sl_status act_fetch(sl_act *a) {
  task_rt *rt = a->ctx;
  sl_session *s = rt->s;
  fetch_rt *f = &s->fetches[rt->io];
  const sl_register *in = a->in[rt->slot_of[0]];
  int at = sl__fetch_at(f, in->piece, rt->io_slot);
  if (in->bytes) memcpy(f->stage[at], in->data, in->bytes);
  pthread_mutex_lock(&s->lock);
  f->staged[at] = in->piece;
  if (s->fetch_waiters && in->piece >= s->fetch_want)
    pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  sl__step_done(rt);
  return SL_OK;
}

static sl_status act_const(sl_act *a) {
  task_rt *rt = a->ctx;
  if (rt->bytes) memcpy(a->out[0]->data, rt->init, rt->bytes);
  sl__step_done(rt);
  return SL_OK;
}

static sl_status act_var_copy(sl_act *a) {
  task_rt *rt = a->ctx;
  const sl_register *in = data_in(a, rt);
  if (rt->bytes) memcpy(a->out[0]->data, in->data, rt->bytes);
  sl__step_done(rt);
  return SL_OK;
}

/* slice: member k keeps part k of its copy along the target axis; zero
 * (docs/boxing.md section 3): from B member 0 keeps its copy and the others
 * become the identity, from S(i) the shard is padded with the identity to
 * its place in the group's block. */
static sl_status act_local(sl_act *a) {
  task_rt *rt = a->ctx;
  const sl_register *in = data_in(a, rt);
  void *out = a->out[0]->data;
  int64_t zero[SL_MAX_DIMS] = {0}, off[SL_MAX_DIMS] = {0}, st, ext;
  int64_t cnt = 1;
  for (int d = 0; d < rt->ndim; d++)
    cnt *= rt->out_dims[d];
  if (rt->local_op == SL_BOXING_SLICE) {
    sl_split_range(rt->in_dims[rt->local_axis], rt->local_n, rt->member, &st,
                   &ext);
    off[rt->local_axis] = st;
    sl__box_move(rt->dtype, rt->ndim, out, rt->out_dims, zero, in->data,
                 rt->in_dims, off, rt->out_dims, false, SL_REDUCE_SUM);
  } else if (rt->local_from_b) {
    if (rt->member == 0) {
      if (a->out[0]->bytes) memcpy(out, in->data, a->out[0]->bytes);
    } else {
      sl__elem_fill_identity(rt->dtype, rt->local_reduce, out, cnt);
    }
  } else {
    sl__elem_fill_identity(rt->dtype, rt->local_reduce, out, cnt);
    sl_split_range(rt->out_dims[rt->local_axis], rt->local_n, rt->member, &st,
                   &ext);
    off[rt->local_axis] = st;
    sl__box_move(rt->dtype, rt->ndim, out, rt->out_dims, off, in->data,
                 rt->in_dims, zero, rt->in_dims, false, SL_REDUCE_SUM);
  }
  sl__step_done(rt);
  return SL_OK;
}

/* A collective round or a device stream's work completed: the step is done
 * for this task, then the deferred firing completes (its registers go
 * out). */
static void deferred_done(void *arg, sl_status st) {
  task_rt *rt = arg;
  sl_completion *c = rt->pending;
  rt->pending = NULL;
  if (st == SL_OK) sl__step_done(rt);
  sl_completion_done(c, st);
}

/* The in-process and nodes engines' hook (sl__coll_desc.waiting,
 * sl__span_desc.waiting): a member that arrived before its peers waits for
 * them, which the hang detector must not take for work (a member whose
 * peers never come is a hang). */
void sl__coll_member_waiting(void *arg, bool waiting) {
  task_rt *rt = arg;
  sl_completion_waiting(rt->pending, waiting);
}

/* Collective and exchange members deposit their buffers at their engine
 * (comm/coll/engine.h) and defer: the round runs when every member is
 * there, on whichever thread completes it; on a GPU the member completes
 * once its stream has passed the round. The stream thread never waits for
 * peers. A member of a send_recv or copy step may have no input or no
 * output. */
static sl_status act_coll(sl_act *a) {
  task_rt *rt = a->ctx;
  const sl_register *in = data_in(a, rt);
  sl_register *out = rt->t->n_out ? a->out[0] : NULL;
  rt->pending = sl_act_defer(a);
  sl__coll_arrival arr = {
      .member = rt->member,
      .in = in ? in->data : NULL,
      .in_bytes = in ? in->bytes : 0,
      .out = out ? out->data : NULL,
      .out_bytes = out ? out->bytes : 0,
      .stream = rt->dev ? rt->dev->stream[rt->t->stream] : NULL,
      .done = deferred_done,
      .arg = rt,
  };
  sl_status st = sl__coll_engine_arrive(rt->engine, &arr);
  if (st != SL_OK) {
    sl_completion *c = rt->pending;
    rt->pending = NULL;
    sl__fail_context(st, "actor '%s': ", rt->t->name);
    sl_completion_done(c, st);
  }
  return SL_OK;
}

/* ---- tasks on a CUDA device ------------------------------------------------
 * Each queues its work on the device stream of its actor's stream kind and
 * defers; the device's notifier completes the firing once the stream has
 * got there (docs/cuda.md, "Sessions on CUDA placements"). */

/* After queueing (st: how that went) with the firing deferred in
 * rt->pending. */
static sl_status complete_on_stream(task_rt *rt, sl_status st) {
  sess_dev *d = rt->dev;
  if (st == SL_OK)
    st = sl__notifier_watch(d->notify, d->stream[rt->t->stream], deferred_done,
                            rt);
  if (st != SL_OK) {
    sl_completion *c = rt->pending;
    rt->pending = NULL;
    sl__fail_context(st, "actor '%s' on %s: ", rt->t->name, d->dev->name);
    sl_completion_done(c, st);
  }
  return SL_OK;
}

static sl_status act_op_cuda(sl_act *a) {
  task_rt *rt = a->ctx;
  sl__kernel_ctx *k = bind_op(a, rt);
  rt->pending = sl_act_defer(a);
  sl_clear_error();
  sess_dev *d = rt->dev;
  /* Kernels run on the thread's current device (stream threads of several
   * devices may share a CPU thread's history). */
  sl_status st = sl__device_make_current(d->dev);
  if (st == SL_OK)
    st = d->be->run_op(rt->node->def, k, d->mem, d->stream[rt->t->stream]);
  if (st != SL_OK)
    sl__fail_context(st, "op '%s' (%s): ", rt->node->name, rt->node->def->name);
  return complete_on_stream(rt, st);
}

/* Device to device: a constant from its device copy, or a variable's next
 * version from its update value. */
static sl_status act_d2d(sl_act *a) {
  task_rt *rt = a->ctx;
  const void *src =
      rt->t->kind == SL__TASK_CONST ? rt->init_dev : data_in(a, rt)->data;
  rt->pending = sl_act_defer(a);
  sess_dev *d = rt->dev;
  return complete_on_stream(
      rt, sl__device_memcpy_d2d(d->dev, a->out[0]->data, src, rt->bytes,
                                d->stream[rt->t->stream]));
}

/* A slice or zero step on a GPU: its own pieces (comm/coll/dev_xchg.c). */
static sl_status act_local_cuda(sl_act *a) {
  task_rt *rt = a->ctx;
  const void *in = data_in(a, rt)->data;
  void *out = a->out[0]->data;
  sl__stream *s = rt->dev->stream[rt->t->stream];
  sl__dev_rank_args unused;
  rt->pending = sl_act_defer(a);
  sl_status st = sl__dxchg_before(rt->local, in, out, s, &unused);
  if (st == SL_OK) st = sl__dxchg_after(rt->local, in, out, s);
  return complete_on_stream(rt, st);
}

/* A shard between the device and its host side. */
static sl_status act_copy(sl_act *a) {
  task_rt *rt = a->ctx;
  const sl_register *in = data_in(a, rt);
  sl_register *out = a->out[0];
  rt->pending = sl_act_defer(a);
  sess_dev *d = rt->dev;
  sl__stream *s = d->stream[rt->t->stream];
  return complete_on_stream(
      rt,
      rt->copy_h2d
          ? sl__device_memcpy_h2d(d->dev, out->data, in->data, out->bytes, s)
          : sl__device_memcpy_d2h(d->dev, out->data, in->data, out->bytes, s));
}

sl_status sl__act_tick(sl_act *a) {
  task_rt *rt = a->ctx;
  sl_session *s = rt->s;
  drv_tick *d = NULL;
  for (int32_t i = 0; i < s->n_ticks && !d; i++)
    if (s->ticks[i].actor == rt->actor) d = &s->ticks[i];
  if (!d) return sl_act_fail(a, SL_EINTERNAL, "tick: no tick source");
  pthread_mutex_lock(&d->lock);
  if (a->piece >= atomic_load(&s->released) && !atomic_load(&s->ending)) {
    d->parked = sl_act_defer(a);
    d->sent = a->piece; /* the piece waiting for its release */
  }
  pthread_mutex_unlock(&d->lock);
  return SL_OK;
}

sl_act_fn sl__act_for(sl__task_kind kind, bool on_cuda) {
  if (on_cuda) {
    switch (kind) {
    case SL__TASK_OP: return act_op_cuda;
    case SL__TASK_CONST:
    case SL__TASK_VAR_COPY: return act_d2d;
    case SL__TASK_COPY: return act_copy;
    case SL__TASK_COLL:
    case SL__TASK_XCHG: return act_coll;
    case SL__TASK_LOCAL: return act_local_cuda;
    default: return NULL; /* lowering runs the rest on the host side */
    }
  }
  switch (kind) {
  case SL__TASK_OP: return act_op;
  case SL__TASK_FEED: return act_feed;
  case SL__TASK_FETCH: return act_fetch;
  case SL__TASK_CONST: return act_const;
  case SL__TASK_VAR_COPY: return act_var_copy;
  case SL__TASK_COLL:
  case SL__TASK_XCHG: return act_coll;
  case SL__TASK_LOCAL: return act_local;
  case SL__TASK_TICK:
  case SL__TASK_COPY: return NULL;
  }
  return NULL;
}
