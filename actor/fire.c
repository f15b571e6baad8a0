/* The firing rule and the actor kinds.
 *
 * An actor fires when every input slot has a ready register and every
 * output slot a free one. After the act, each output register goes to its
 * readers (register-ready) and each consumed input goes back to its
 * producer (register-return); an output register is free again once every
 * reader returned it. Counting actors differ only in when inputs are
 * consumed and outputs sent:
 *   MODE_ONE      every firing consumes one piece per input and writes one
 *                 piece per output (kernel, source, sink);
 *   MODE_FAN_OUT  the input is held for k firings, each writing one output
 *                 piece (repeat, unpack);
 *   MODE_FAN_IN   each firing consumes one input piece; the output register
 *                 is held for k firings and sent after the last (accumulate,
 *                 pack).
 * Everything here runs on the actor's own stream thread. */
#include <stdio.h>
#include <string.h>

#include "actor_int.h"

static void try_fire(stream *s, rt_actor *a);

/* ---- SLUICE_MEMCHECK ------------------------------------------------------
 */

/* A register's bytes are summed when it is published, and checked when
 * each reader fires and again when it hands the register back; a register
 * in a plan block is overwritten with 0xff (NaN as floats) once every
 * reader returned it. A plan that lets two live registers share bytes, or
 * a reader that reads after returning, then fails the job naming both. */
static uint64_t memcheck_sum(const sl_register *r) {
  const unsigned char *p = r->data;
  uint64_t h = 0x9e3779b97f4a7c15u ^ r->bytes;
  size_t i = 0;
  for (; i + 8 <= r->bytes; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdu;
    h ^= h >> 29;
  }
  for (; i < r->bytes; i++)
    h = (h ^ p[i]) * 0x100000001b3u;
  return h;
}

static void fail(stream *s, rt_actor *a, sl_status st, const char *detail);

/* False (and the job failed) when input i's register changed. */
static bool memcheck_input(stream *s, rt_actor *a, int32_t i,
                           const char *when) {
  const in_slot *sl = &a->in[i];
  const rt_regst *r = &sl->regs[sl->fifo[sl->head]];
  if (sl->remote || !r->pub.data || memcheck_sum(&r->pub) == r->sum)
    return true;
  char detail[400];
  snprintf(detail, sizeof detail,
           "memcheck: register %d of '%s' (piece %lld) changed after its "
           "producer wrote it, %s this reader (another register sharing its "
           "memory while it is live?)",
           (int)r->pub.index, s->job->plan->regsts[sl->desc].d.name,
           (long long)r->pub.piece, when);
  fail(s, a, SL_EINTERNAL, detail);
  return false;
}

/* A reader is done with input i (the oldest ready register): checked once
 * more, and the last reader of a register in a block poisons it. */
static void memcheck_done(stream *s, rt_actor *a, int32_t i) {
  const in_slot *sl = &a->in[i];
  rt_regst *r = &sl->regs[sl->fifo[sl->head]];
  if (sl->remote || !r->pub.data) return;
  /* Computed in place: an output of this firing now lives in its bytes. */
  for (int32_t o = 0; o < a->n_out; o++)
    if (a->out[o].cur >= 0 &&
        a->out[o].regs[a->out[o].cur].pub.data == r->pub.data)
      return;
  if (!memcheck_input(s, a, i, "when it was handed back by")) return;
  if (atomic_fetch_sub(&r->readers_left, 1) == 1 && r->shared)
    memset(r->pub.data, 0xff, r->pub.bytes);
}

static inline void release(out_slot *o, rt_regst *r) {
  uint32_t pos = o->fhead + o->flen;
  if (pos >= (uint32_t)o->count) pos -= (uint32_t)o->count;
  o->free_fifo[pos] = r->pub.index;
  o->flen++;
  o->in_flight--;
}

/* Sends register r of output o to every reader. */
static void publish(stream *s, rt_actor *a, out_slot *o, rt_regst *r) {
  if (s->job->memcheck && r->pub.data) {
    r->sum = memcheck_sum(&r->pub);
    atomic_store(&r->readers_left, o->n_cons);
    if (o->n_cons == 0 && r->shared) memset(r->pub.data, 0xff, r->pub.bytes);
  }
  if (o->n_cons == 0) {
    release(o, r);
    return;
  }
  r->pending = o->n_cons;
  memset(r->held, 1, (size_t)o->n_cons);
  sl_msg m;
  memset(&m, 0, sizeof m);
  m.kind = SL_MSG_READY;
  m.src = a->id;
  m.piece = r->pub.piece;
  m.desc = o->wire;
  m.index = r->pub.index;
  for (int32_t c = 0; c < o->n_cons; c++) {
    m.dst = o->cons_id[c];
    m.slot = o->cons_slot[c];
    m.consumer = (uint16_t)c;
    sl__send(s, &m, r);
  }
}

static void send_output(stream *s, rt_actor *a, int32_t i) {
  out_slot *o = &a->out[i];
  rt_regst *r = &o->regs[o->cur];
  o->cur = -1;
  r->pub.piece = a->next_piece;
  publish(s, a, o, r);
}

static void send_outputs(stream *s, rt_actor *a) {
  for (int32_t i = 0; i < a->n_out; i++)
    send_output(s, a, i);
  a->next_piece++;
  a->pieces++;
}

/* Pops the oldest ready register of input i and returns it. */
static void consume(stream *s, rt_actor *a, int32_t i) {
  in_slot *sl = &a->in[i];
  int32_t idx = sl->fifo[sl->head];
  if (++sl->head == sl->cap) sl->head = 0;
  sl->len--;
  sl_msg m;
  memset(&m, 0, sizeof m);
  m.kind = SL_MSG_RETURN;
  m.dst = sl->producer;
  m.src = a->id;
  m.desc = sl->wire;
  m.index = idx;
  m.slot = sl->producer_slot;
  m.consumer = sl->consumer;
  sl__send(s, &m, NULL);
}

static bool holds_output(const rt_actor *a) {
  return a->mode == MODE_FAN_IN && a->step > 0;
}

static bool can_fire(const rt_actor *a) {
  if (a->stopped || a->busy) return false;
  if (a->kind == SL_ACTOR_SOURCE) {
    if (a->fired >= a->limit || a->stop_requested) return false;
  } else {
    for (int32_t i = 0; i < a->n_in; i++)
      if (a->in[i].len == 0) return false;
  }
  if (holds_output(a)) return true;
  for (int32_t i = 0; i < a->n_out; i++)
    if (a->out[i].flen == 0) return false;
  return true;
}

static sl_status default_act(rt_actor *a) {
  const sl_act *x = &a->a;
  switch (a->kind) {
  case SL_ACTOR_REPEAT:
    for (int32_t o = 0; o < x->n_out; o++)
      if (x->out[o]->bytes && x->in[0]->bytes)
        memcpy(x->out[o]->data, x->in[0]->data,
               SL_MIN(x->out[o]->bytes, x->in[0]->bytes));
    break;
  case SL_ACTOR_UNPACK:
    for (int32_t o = 0; o < x->n_out; o++)
      if (x->out[o]->bytes)
        memcpy(x->out[o]->data,
               (const unsigned char *)x->in[0]->data +
                   (size_t)x->step * x->out[o]->bytes,
               x->out[o]->bytes);
    break;
  case SL_ACTOR_PACK:
    if (x->in[0]->bytes)
      memcpy((unsigned char *)x->out[0]->data +
                 (size_t)x->step * x->in[0]->bytes,
             x->in[0]->data, x->in[0]->bytes);
    break;
  default: break;
  }
  return SL_OK;
}

static void fail(stream *s, rt_actor *a, sl_status st, const char *detail) {
  sl__job_abort_firing(s->job, st, a->id, detail, a->a.piece);
  sl_clear_error();
}

/* The bookkeeping after an act: what is sent and consumed. */
/* SLUICE_MEMCHECK: a reader's inputs are checked (and the last reader's
 * poisoned) before it sends anything, so that the poison lands before
 * whatever the plan orders after this firing. */
static void memcheck_inputs(stream *s, rt_actor *a, int32_t n) {
  if (s->job->memcheck)
    for (int32_t i = 0; i < n; i++)
      memcheck_done(s, a, i);
}

static void finish(stream *s, rt_actor *a) {
  a->firings++;
  s->firings++;
  switch (a->mode) {
  case MODE_ONE:
    memcheck_inputs(s, a, a->n_in);
    send_outputs(s, a);
    for (int32_t i = 0; i < a->n_in; i++)
      consume(s, a, i);
    a->fired++;
    break;
  case MODE_FAN_OUT:
    if (a->step + 1 == a->k) memcheck_inputs(s, a, 1);
    send_outputs(s, a);
    if (++a->step == a->k) {
      a->step = 0;
      consume(s, a, 0);
    }
    break;
  case MODE_FAN_IN:
    memcheck_inputs(s, a, 1);
    consume(s, a, 0);
    if (++a->step == a->k) {
      a->step = 0;
      send_outputs(s, a);
    }
    break;
  }
}

static void fire(stream *s, rt_actor *a) {
  for (int32_t i = 0; i < a->n_in; i++) {
    in_slot *sl = &a->in[i];
    a->in_view[i] = &sl->regs[sl->fifo[sl->head]].pub;
  }
  if (!holds_output(a)) {
    for (int32_t i = 0; i < a->n_out; i++) {
      out_slot *o = &a->out[i];
      o->cur = o->free_fifo[o->fhead];
      /* Being written: no piece until published (sl_job_get_register). */
      o->regs[o->cur].pub.piece = -1;
      if (++o->fhead == (uint32_t)o->count) o->fhead = 0;
      o->flen--;
      if (++o->in_flight > o->peak) o->peak = o->in_flight;
    }
  }
  for (int32_t i = 0; i < a->n_out; i++)
    a->out_view[i] = &a->out[i].regs[a->out[i].cur].pub;
  a->a.piece = a->next_piece;
  a->a.step = a->step;
  a->deferred = false;
  if (s->job->memcheck)
    for (int32_t i = 0; i < a->n_in; i++)
      if (!memcheck_input(s, a, i, "before the firing of")) return;
  uint64_t t0 = s->trace_on ? sl__now_ns() : 0;
  sl_status st = a->act ? a->act(&a->a) : default_act(a);
  if (st != SL_OK) {
    fail(s, a, st, sl_last_error());
    return;
  }
  if (a->deferred) {
    a->busy = true;
    a->trace_t0 = t0;
    return;
  }
  if (s->trace_on) sl__trace_record(s, a, a->a.piece, t0, sl__now_ns(), false);
  finish(s, a);
}

static void check_finished(stream *s, rt_actor *a) {
  if (a->finished || !a->stopped || a->busy || a->eod_in < a->n_in) return;
  for (int32_t i = 0; i < a->n_out; i++)
    if (a->out[i].in_flight > 0) return;
  a->finished = true;
  s->live--;
}

/* An actor stops when it can never fire again: a source that produced its
 * pieces (or was told to stop), any other actor once an input has ended
 * and holds nothing. It then hands back what it still holds, tells its
 * readers end-of-data, and finishes when its inputs have all ended and its
 * outputs have all come back. */
static void check_stop(stream *s, rt_actor *a) {
  if (a->stopped || a->busy) return;
  bool end = false;
  if (a->kind == SL_ACTOR_SOURCE) {
    end = a->fired >= a->limit || a->stop_requested;
  } else {
    for (int32_t i = 0; i < a->n_in && !end; i++)
      end = a->in[i].eod && a->in[i].len == 0;
  }
  if (!end) return;
  if (holds_output(a)) { /* a partial accumulation is the last piece */
    a->step = 0;
    send_outputs(s, a);
  }
  a->stopped = true;
  for (int32_t i = 0; i < a->n_in; i++)
    while (a->in[i].len) {
      consume(s, a, i);
      s->discarded++;
    }
  sl_msg m;
  memset(&m, 0, sizeof m);
  m.kind = SL_MSG_EOD;
  m.src = a->id;
  for (int32_t i = 0; i < a->n_out; i++) {
    out_slot *o = &a->out[i];
    m.desc = o->wire;
    for (int32_t c = 0; c < o->n_cons; c++) {
      m.dst = o->cons_id[c];
      m.slot = o->cons_slot[c];
      sl__send(s, &m, NULL);
    }
  }
  check_finished(s, a);
}

static void try_fire(stream *s, rt_actor *a) {
  while (can_fire(a)) {
    fire(s, a);
    if (atomic_load_explicit(&s->job->stop, memory_order_relaxed)) return;
  }
  check_stop(s, a);
}

void sl__actor_start(stream *s, rt_actor *a) {
  /* Variables: their initial registers are ready before anything fires. */
  for (int32_t i = 0; i < a->n_out; i++) {
    out_slot *o = &a->out[i];
    int32_t initial = s->job->plan->regsts[o->desc].d.initial;
    for (int32_t k = 0; k < initial; k++)
      publish(s, a, o, &o->regs[k]);
  }
  try_fire(s, a);
}

/* A message that breaks the protocol (a register sent twice, returned by a
 * reader that does not hold it): a bug here, or a corrupt frame from
 * another node. Either way the job stops with a clear error. */
static void protocol_error(stream *s, rt_actor *a, const sl_msg *m,
                           int32_t desc, const char *what) {
  char detail[200];
  snprintf(detail, sizeof detail, "%s (register %d of '%s', from node %u)",
           what, (int)m->index, s->job->plan->regsts[desc].d.name,
           m->origin_node);
  sl__job_abort(s->job, SL_ECOMM, a->id, true, detail, true);
}

void sl__actor_on_ready(stream *s, rt_actor *a, const sl_msg *m) {
  in_slot *sl = &a->in[m->slot];
  if (sl->len == sl->cap || sl->eod) {
    protocol_error(s, a, m, sl->desc,
                   sl->eod ? "a piece after end-of-data"
                           : "more ready registers than exist");
    return;
  }
  uint32_t pos = sl->head + sl->len;
  if (pos >= sl->cap) pos -= sl->cap;
  sl->fifo[pos] = m->index;
  sl->len++;
  if (a->stopped) { /* nothing will read it: hand it straight back */
    consume(s, a, m->slot);
    s->discarded++;
    return;
  }
  try_fire(s, a);
}

void sl__actor_on_return(stream *s, rt_actor *a, const sl_msg *m) {
  out_slot *o = &a->out[m->slot];
  rt_regst *r = &o->regs[m->index];
  if (r->pending <= 0 || !r->held[m->consumer]) {
    protocol_error(s, a, m, o->desc,
                   "a register returned by a reader not holding it");
    return;
  }
  r->held[m->consumer] = 0;
  if (--r->pending == 0) release(o, r);
  if (a->stopped)
    check_finished(s, a);
  else
    try_fire(s, a);
}

void sl__actor_on_eod(stream *s, rt_actor *a, const sl_msg *m) {
  in_slot *sl = &a->in[m->slot];
  if (!sl->eod) {
    sl->eod = true;
    a->eod_in++;
  }
  if (a->stopped)
    check_finished(s, a);
  else
    try_fire(s, a);
}

void sl__actor_on_complete(stream *s, rt_actor *a) {
  if (!a->busy) return; /* the act failed after deferring: already aborted */
  a->busy = false;
  sl_completion *c = &a->completion;
  if (c->st != SL_OK) {
    fail(s, a, c->st, c->detail);
    return;
  }
  if (s->trace_on)
    sl__trace_record(s, a, a->a.piece, a->trace_t0, sl__now_ns(), true);
  finish(s, a);
  try_fire(s, a);
}

void sl__actor_request_stop(stream *s, rt_actor *a) {
  a->stop_requested = true;
  check_stop(s, a);
}

/* ---- the act API -----------------------------------------------------------
 */

sl_status sl_act_fail(sl_act *a, sl_status st, const char *fmt, ...) {
  char buf[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return sl__fail(st, "%s", buf);
}

sl_completion *sl_act_defer(sl_act *x) {
  rt_actor *a = x->internal_;
  if (!a->deferred) {
    a->deferred = true;
    a->completion.st = SL_OK;
    atomic_store(&a->completion.said_waiting, false);
    atomic_fetch_add(&a->st->job->async_pending, 1);
  }
  return &a->completion;
}

static void count_waiting(sl_completion *c, bool waiting) {
  if (atomic_exchange(&c->waiting, waiting) != waiting)
    atomic_fetch_add(&c->actor->st->job->async_waiting, waiting ? 1 : -1);
}

void sl_completion_waiting(sl_completion *c, bool waiting) {
  atomic_store(&c->said_waiting, waiting);
  count_waiting(c, waiting);
}

void sl_completion_done(sl_completion *c, sl_status st) {
  rt_actor *a = c->actor;
  sl_job *job = a->st->job;
  count_waiting(c, false);
  c->st = st;
  if (st != SL_OK) {
    sl__free(c->detail);
    c->detail = sl__strdup(sl_last_error());
  }
  sl_msg m;
  memset(&m, 0, sizeof m);
  m.kind = SL__MSG_COMPLETE;
  m.dst = a->id;
  if (!sl__mpsc_push(a->st->q, &m))
    sl__job_abort(job, SL_EINTERNAL, a->id, true,
                  "completion: the stream queue is full (completed twice?)",
                  true);
  /* After the push: until then the deferred firing still counts as
   * executing, so the hang detector never sees a gap. The last one goes
   * under the job's lock: sl_job_wait returns, and the job may be freed,
   * as soon as it sees none pending, so the count must not reach zero
   * while this thread still has the job's lock and condition to touch. */
  long v = atomic_load(&job->async_pending);
  while (v > 1 &&
         !atomic_compare_exchange_weak(&job->async_pending, &v, v - 1)) {
  }
  if (v <= 1) {
    pthread_mutex_lock(&job->lock);
    atomic_fetch_sub(&job->async_pending, 1);
    pthread_cond_broadcast(&job->cond);
    pthread_mutex_unlock(&job->lock);
  }
}
