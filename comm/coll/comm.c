/* The communicator: worker threads, collectives and their rounds.
 *
 * Why arrivals never wait: the actor runtime fires actors in data order, so
 * rank 0 may reach collective A and then B while rank 1 reaches B first. A
 * blocking collective (each rank's thread waiting inside it for its peers)
 * deadlocks there: rank 0 waits in A for rank 1, rank 1 waits in B for rank
 * 0. The alternative, one global order of every collective chained on every
 * rank, would serialise independent collectives (a gradient all-reduce
 * behind another layer's) and needs the order agreed in advance. Here an
 * arrival records its buffers and returns; the member's actor defers its
 * firing; the round runs once everyone is there, on threads that only ever
 * wait for work (the workers) or run work they were handed. A collective
 * whose members are not all present holds no thread, so any interleaving of
 * arrivals makes progress. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_int.h"
#include "core_team.h"

#define DEFAULT_DIRECT_MAX (64 * 1024)
#define MAX_WORKERS 4096

typedef struct worker {
  sl__comm *comm;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  coll_task *head, *tail; /* under lock */
  bool stop;              /* under lock */
  sl__thread thread;
} worker;

struct sl__comm {
  int n_workers;
  worker *workers;
  int64_t direct_max;
  pthread_mutex_t lock; /* the list of collectives, abort status */
  sl__coll *colls;
  atomic_int aborted; /* sl_status, SL_OK while running */
  atomic_uint_least64_t rounds_direct, rounds_parallel, rounds_aborted, posted;
};

/* ---- rounds ----------------------------------------------------------------
 */

/* Takes the callbacks of the members present and resets the round. Under
 * x->lock. out holds x->n entries; returns how many. */
static int take_members(sl__coll *x, pending_done *out) {
  int k = 0;
  for (int i = 0; i < x->n; i++) {
    coll_member *m = &x->m[i];
    if (!m->present) continue;
    out[k++] = (pending_done){m->done, m->arg};
    m->present = false;
    m->early = false;
    m->in = NULL;
    m->out = NULL;
  }
  x->arrived = 0;
  x->state = COLL_IDLE;
  return k;
}

/* The round is done: reset it, then tell every member. The reset comes
 * first, so a member may arrive for the next round from its callback; the
 * list stays valid because the next round cannot finish before every
 * member, the last one called here included, has arrived again. */
static void finish_round(sl__coll *x) {
  pthread_mutex_lock(&x->lock);
  int k = take_members(x, x->done_round);
  pthread_mutex_unlock(&x->lock);
  for (int i = 0; i < k; i++)
    x->done_round[i].done(x->done_round[i].arg, SL_OK);
}

static void post(worker *w, coll_task *t) {
  t->next = NULL;
  pthread_mutex_lock(&w->lock);
  if (w->tail)
    w->tail->next = t;
  else
    w->head = t;
  w->tail = t;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

static void task_done(sl__coll *x) {
  if (atomic_fetch_sub_explicit(&x->remaining, 1, memory_order_acq_rel) == 1)
    finish_round(x);
}

/* Starts a round whose members are all present, on the last arriver's
 * thread: a direct round runs there; a parallel one is handed to the
 * members' workers, the last arriver's own part too, since that thread is
 * usually a device's compute thread with kernels to get back to. */
static void run_round(sl__coll *x) {
  sl__comm *c = x->comm;
  if (x->algo == SL__COLL_DIRECT) {
    for (int k = 0; k < x->n; k++)
      sl__coll_run_task(x, k);
    atomic_fetch_add(&c->rounds_direct, 1);
    finish_round(x);
    return;
  }
  atomic_fetch_add(&c->rounds_parallel, 1);
  int work = 0;
  for (int k = 0; k < x->n; k++)
    work += sl__coll_task_has_work(x, k);
  if (work == 0) {
    finish_round(x);
    return;
  }
  /* One count for the poster, so the round cannot finish (and be reset)
   * while tasks are still being queued. */
  atomic_store(&x->remaining, work + 1);
  for (int k = 0; k < x->n; k++) {
    if (!sl__coll_task_has_work(x, k)) continue;
    atomic_fetch_add(&c->posted, 1);
    post(&c->workers[x->workers[k]], &x->tasks[k]);
  }
  task_done(x);
}

sl_status sl__coll_arrive(sl__coll *x, int member, const void *in,
                          size_t in_bytes, void *out, size_t out_bytes,
                          sl__coll_done_fn done, void *arg) {
  if (!x || !done) return sl__fail(SL_EINVAL, "collective: NULL argument");
  if (member < 0 || member >= x->n)
    return sl__fail(SL_EINVAL, "collective '%s': member %d of %d", x->name,
                    member, x->n);
  coll_member *m = &x->m[member];
  if (in_bytes != m->in_bytes || out_bytes != m->out_bytes ||
      (in_bytes && !in) || (out_bytes && !out))
    return sl__fail(SL_EINVAL,
                    "collective '%s' (%s): member %d hands in %zu and %zu "
                    "bytes, expected %zu and %zu",
                    x->name, sl__coll_op_name(x->op), member, in_bytes,
                    out_bytes, m->in_bytes, m->out_bytes);
  sl__comm *c = x->comm;
  pthread_mutex_lock(&x->lock);
  sl_status ab = (sl_status)atomic_load(&c->aborted);
  if (ab != SL_OK) {
    pthread_mutex_unlock(&x->lock);
    sl__fail(ab, "collective '%s': the communicator was aborted", x->name);
    done(arg, ab);
    return SL_OK;
  }
  if (m->present || x->state == COLL_RUNNING) {
    pthread_mutex_unlock(&x->lock);
    return sl__fail(SL_ESTATE,
                    "collective '%s': member %d arrived twice in one round",
                    x->name, member);
  }
  m->present = true;
  m->in = in;
  m->out = out;
  m->done = done;
  m->arg = arg;
  /* A direct round runs every share on its last arriver: the part of this
   * member's share that needs only its own buffers is done now, on its own
   * thread (under the lock: a small copy, and the round cannot start
   * before it is done). */
  if (x->algo == SL__COLL_DIRECT) sl__coll_early_part(x, member);
  bool last = ++x->arrived == x->n;
  x->state = last ? COLL_RUNNING : COLL_GATHERING;
  if (x->waiting && !last) x->waiting(arg, true);
  for (int k = 0; x->waiting && last && k < x->n; k++)
    if (k != member) x->waiting(x->m[k].arg, false);
  pthread_mutex_unlock(&x->lock);
  if (last) run_round(x);
  return SL_OK;
}

void sl__comm_abort(sl__comm *c, sl_status st) {
  if (!c) return;
  if (st == SL_OK) st = SL_EABORTED;
  int expect = SL_OK;
  atomic_compare_exchange_strong(&c->aborted, &expect, (int)st);
  st = (sl_status)atomic_load(&c->aborted);
  pthread_mutex_lock(&c->lock);
  for (sl__coll *x = c->colls; x; x = x->next_in_comm) {
    pthread_mutex_lock(&x->lock);
    int k = 0;
    if (x->state == COLL_GATHERING) {
      atomic_fetch_add(&c->rounds_aborted, 1);
      k = take_members(x, x->done_abort);
    }
    pthread_mutex_unlock(&x->lock);
    for (int i = 0; i < k; i++) {
      sl__fail(st, "collective '%s': aborted while waiting for its members",
               x->name);
      x->done_abort[i].done(x->done_abort[i].arg, st);
    }
  }
  pthread_mutex_unlock(&c->lock);
}

void sl__coll_abort(sl__coll *x, sl_status st) { sl__comm_abort(x->comm, st); }

/* ---- workers ----------------------------------------------------------------
 */

static void *worker_main(void *arg) {
  worker *w = arg;
  sl_clear_error();
  pthread_mutex_lock(&w->lock);
  for (;;) {
    while (!w->head && !w->stop)
      pthread_cond_wait(&w->cond, &w->lock);
    coll_task *t = w->head;
    if (!t) break; /* stopping and drained */
    w->head = t->next;
    if (!w->head) w->tail = NULL;
    pthread_mutex_unlock(&w->lock);
    sl__coll_run_task(t->coll, t->member);
    task_done(t->coll);
    pthread_mutex_lock(&w->lock);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

static void stop_workers(sl__comm *c, int started) {
  for (int i = 0; i < started; i++) {
    worker *w = &c->workers[i];
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
  }
  for (int i = 0; i < started; i++)
    sl__thread_join(&c->workers[i].thread);
}

sl_status sl__comm_create(const sl__comm_config *cfg, sl__comm **out) {
  *out = NULL;
  if (!cfg || cfg->workers < 1 || cfg->workers > MAX_WORKERS)
    return sl__fail(SL_EINVAL, "communicator: %d workers (1 to %d)",
                    cfg ? cfg->workers : 0, MAX_WORKERS);
  sl__comm *c;
  if (SL_NEW(c) != SL_OK) return SL_ENOMEM;
  c->direct_max = cfg->direct_max_bytes;
  if (c->direct_max == 0) {
    const char *e = getenv("SLUICE_COMM_DIRECT_MAX");
    c->direct_max = e && e[0] ? strtoll(e, NULL, 0) : DEFAULT_DIRECT_MAX;
    if (c->direct_max == 0) c->direct_max = -1;
  }
  pthread_mutex_init(&c->lock, NULL);
  atomic_init(&c->aborted, SL_OK);
  c->workers = sl__calloc((size_t)cfg->workers, sizeof *c->workers);
  if (!c->workers) {
    pthread_mutex_destroy(&c->lock);
    sl__free(c);
    return SL_ENOMEM;
  }
  c->n_workers = cfg->workers;
  int started = 0;
  sl_status st = SL_OK;
  for (; started < c->n_workers; started++) {
    worker *w = &c->workers[started];
    w->comm = c;
    pthread_mutex_init(&w->lock, NULL);
    st = sl__cond_init(&w->cond);
    if (st != SL_OK) {
      pthread_mutex_destroy(&w->lock);
      break;
    }
    char name[32];
    snprintf(name, sizeof name, "sl-comm%d", started);
    st = sl__thread_start(&w->thread, worker_main, w, name);
    if (st != SL_OK) {
      pthread_cond_destroy(&w->cond);
      pthread_mutex_destroy(&w->lock);
      break;
    }
    int cpu = cfg->worker_cpu ? cfg->worker_cpu[started] : -1;
    if (cpu >= 0 && !sl__pin_thread(w->thread.handle, cpu))
      SL_DEBUG("communicator: could not pin worker %d to CPU %d", started, cpu);
  }
  if (st != SL_OK) {
    c->n_workers = started;
    sl__comm_destroy(c);
    return st;
  }
  *out = c;
  return SL_OK;
}

static void coll_free(sl__coll *x) {
  if (!x) return;
  pthread_mutex_destroy(&x->lock);
  sl__free(x->name);
  sl__free(x->workers);
  sl__free(x->m);
  sl__free(x->tasks);
  sl__free(x->done_round);
  sl__free(x->done_abort);
  sl__free(x->has_in);
  sl__free(x->has_out);
  sl__free(x->in_slice);
  sl__free(x->out_slice);
  sl__free(x->fill);
  sl__free(x->by_dst);
  sl__free(x);
}

void sl__comm_destroy(sl__comm *c) {
  if (!c) return;
  sl__comm_abort(c, SL_EABORTED);
  stop_workers(c, c->n_workers);
  for (int i = 0; i < c->n_workers; i++) {
    pthread_cond_destroy(&c->workers[i].cond);
    pthread_mutex_destroy(&c->workers[i].lock);
  }
  sl__coll *x = c->colls;
  while (x) {
    sl__coll *next = x->next_in_comm;
    coll_free(x);
    x = next;
  }
  sl__free(c->workers);
  pthread_mutex_destroy(&c->lock);
  sl__free(c);
}

/* ---- collectives --------------------------------------------------------- */

sl_status sl__coll_create(sl__comm *c, const sl__coll_desc *d, sl__coll **out) {
  *out = NULL;
  if (!c || !d) return sl__fail(SL_EINVAL, "collective: NULL argument");
  const char *name = d->name ? d->name : "?";
  if (d->n < 1 || d->n > MAX_WORKERS * 16 || !d->workers)
    return sl__fail(SL_EINVAL, "collective '%s': %d members", name, d->n);
  if ((int)d->op < 0 || d->op > SL__COLL_EXCHANGE)
    return sl__fail(SL_EINVAL, "collective '%s': unknown op %d", name,
                    (int)d->op);
  size_t es = sl_dtype_size(d->dtype);
  if (es == 0)
    return sl__fail(SL_EINVAL, "collective '%s': unknown dtype %d", name,
                    (int)d->dtype);
  if (d->block.ndim < 0 || d->block.ndim > SL_MAX_DIMS)
    return sl__fail(SL_EINVAL, "collective '%s': block of %d dims", name,
                    d->block.ndim);
  for (int i = 0; i < d->block.ndim; i++)
    if (d->block.dims[i] < 0)
      return sl__fail(SL_EINVAL, "collective '%s': negative extent", name);
  sl__coll *x;
  if (SL_NEW(x) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&x->lock, NULL);
  atomic_init(&x->remaining, 0);
  x->comm = c;
  x->op = d->op;
  x->dtype = d->dtype;
  x->es = es;
  x->reduce = d->reduce;
  x->n = d->n;
  x->ndim = d->block.ndim;
  memcpy(x->block, d->block.dims, sizeof x->block);
  x->in_axis = d->in_axis;
  x->out_axis = d->out_axis;
  x->root = d->root;
  x->name = sl__strdup(name);
  x->workers = sl__calloc((size_t)x->n, sizeof *x->workers);
  x->m = sl__calloc((size_t)x->n, sizeof *x->m);
  x->tasks = sl__calloc((size_t)x->n, sizeof *x->tasks);
  x->done_round = sl__calloc((size_t)x->n, sizeof *x->done_round);
  x->done_abort = sl__calloc((size_t)x->n, sizeof *x->done_abort);
  sl_status st = SL_OK;
  if (!x->name || !x->workers || !x->m || !x->tasks || !x->done_round ||
      !x->done_abort) {
    st = SL_ENOMEM;
    goto fail;
  }
  for (int k = 0; k < x->n; k++) {
    if (d->workers[k] < 0 || d->workers[k] >= c->n_workers) {
      st = sl__fail(SL_EINVAL, "collective '%s': member %d on worker %d of %d",
                    name, k, d->workers[k], c->n_workers);
      goto fail;
    }
    x->workers[k] = d->workers[k];
    x->tasks[k] = (coll_task){NULL, x, k};
  }
  SL_CHECK_GOTO(sl__coll_geometry(x, d), st, fail);
  x->algo = d->algo;
  x->waiting = d->waiting;
  if (x->algo == SL__COLL_AUTO) {
    size_t big = 0;
    for (int k = 0; k < x->n; k++)
      big = SL_MAX(big, SL_MAX(x->m[k].in_bytes, x->m[k].out_bytes));
    x->algo = x->n == 1 || (c->direct_max >= 0 && (int64_t)big <= c->direct_max)
                  ? SL__COLL_DIRECT
                  : SL__COLL_PARALLEL;
  } else if (x->algo != SL__COLL_DIRECT && x->algo != SL__COLL_PARALLEL) {
    st = sl__fail(SL_EINVAL, "collective '%s': unknown algorithm %d", name,
                  (int)x->algo);
    goto fail;
  }
  pthread_mutex_lock(&c->lock);
  x->next_in_comm = c->colls;
  c->colls = x;
  pthread_mutex_unlock(&c->lock);
  *out = x;
  return SL_OK;
fail:
  coll_free(x);
  return st;
}

size_t sl__coll_in_bytes(const sl__coll *x, int member) {
  return member >= 0 && member < x->n ? x->m[member].in_bytes : 0;
}

size_t sl__coll_out_bytes(const sl__coll *x, int member) {
  return member >= 0 && member < x->n ? x->m[member].out_bytes : 0;
}

sl__coll_algo sl__coll_algo_of(const sl__coll *x) { return x->algo; }

int sl__coll_members(const sl__coll *x) { return x->n; }

const char *sl__coll_name(const sl__coll *x) { return x->name; }

void sl__comm_get_stats(sl__comm *c, sl__comm_stats *out) {
  out->rounds_direct = atomic_load(&c->rounds_direct);
  out->rounds_parallel = atomic_load(&c->rounds_parallel);
  out->rounds_aborted = atomic_load(&c->rounds_aborted);
  out->tasks_posted = atomic_load(&c->posted);
}
