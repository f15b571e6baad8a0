/* Boxing steps between GPUs (graph/lower.c keeps a boxing whose ranks are
 * all CUDA devices on them; docs/cuda.md, "Sessions on CUDA placements").
 * One device group per step's group, with its communicator
 * (dev_coll.h: NCCL) and its one launch: NCCL's collective where NCCL
 * computes the step as it stands, every round the same op on the same
 * counts; otherwise an exchange, each local member's program
 * (dev_xchg.c) queued around one grouped send/receive call.
 *
 * In-process groups (every member in this process): each member's actor
 * arrives with its registers and defers; the last to arrive launches the
 * collective for every member at once — one group call under the
 * process's launch lock, so every device sees launches in the same order
 * and no two groups can deadlock — and each member's firing completes once
 * its collective stream has passed the collective.
 *
 * Groups spanning nodes (daemons): this process holds some of the members
 * and launches for those, on one communicator across the processes (its
 * unique id through the control plane's store). The launch lock orders one
 * process's launches, not two processes': if P issues group A before B on
 * a device's collective stream and Q issues B before A, P's stream waits
 * in A for Q and Q's in B for P, forever (a collective holds its stream
 * until every rank has reached it). So every spanning group has a place in
 * one order of the job, (depth, boxing node, step, group), computed from
 * the plan and so the same on every node (session/build.c's task_depths: the
 * longest chain of the step's tasks before the group), and a sequencer
 * (sl__dseq) makes each process launch its spanning groups round by round
 * in that order: a group whose local members have all arrived launches
 * only once every group before it has launched this round; its members
 * wait, deferred, until then. Depth first puts a model's last gradient
 * first, as the devices produce them. Why that cannot deadlock:
 *  - On the devices, every stream of every process is issued collectives
 *    in one order, (round, then the job's order). The first collective in
 *    that order that has not completed has every earlier collective of its
 *    ranks' streams completed, so every rank gets to it: it completes.
 *    In-process groups have no place in the order, and need none: each is
 *    one launch for all its ranks, so the processes' sequences still merge
 *    into one order with it anywhere.
 *  - On the hosts, a group waits for earlier groups of its round, and
 *    those never wait for it: the order is a dependency order (a group
 *    reading, in the same step, what another group produced is deeper
 *    than it: depth grows along every edge within a step, a group's
 *    members counting as one task), so no input of a group in round r
 *    comes from a later group of round r, and rounds only read earlier
 *    rounds (variables). Each member actor fires once per step, so a
 *    group's k-th launch is round k everywhere.
 *  - Creating a communicator is collective too: every process creates its
 *    spanning groups in the same order (sl__dseq_connect), which the same
 *    argument makes safe. Each gets a one-element warm-up all-reduce at
 *    creation, because NCCL connects to peers lazily, inside the first
 *    launch: later launches then only queue work and never wait for a peer
 *    while holding the launch lock.
 *    Nothing of the job launches before every spanning group of the
 *    process is connected and warmed up: a daemon's actors fire on the
 *    program's feeds while it connects, and a boxing right after an input
 *    (an all-gather of a fed activation) has members arriving then; they
 *    wait, deferred, and launch in the job's order once connected.
 * An abort (a lost node, a failing kernel) completes the members waiting
 * here with the failure and aborts the spanning communicators, so members
 * already launched, held on their streams by peers that will not come, get
 * free too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_boxing.h"

struct sl__dgroup {
  pthread_mutex_t m; /* in-process groups (spanning: the sequencer's) */
  sl__dev_comm *comm;
  sl__dev_coll_desc desc;
  char name[160];
  int nranks;                 /* members in all */
  int n, arrived;             /* members in this process, arrived of them */
  int *local_of;              /* member index -> local index (nranks) */
  int *ranks, *devices;       /* local index -> member index, device */
  const sl__dev_handle **dev; /* by local index */
  /* by local index, while it waits: what completes it */
  sl__coll_done_fn *done;
  void **done_arg;
  sl__dev_rank_args *args; /* by local index */
  /* An exchange (dev_xchg.c): each local member's program. NULL for a
   * collective. */
  sl__dxchg **prog;
  sl_status aborted; /* SL_OK, or why every arrival now fails */
  /* Spanning groups: the sequencer and the place in the job's order. */
  sl__dseq *seq;
  int32_t order[4];
};

struct sl__dseq {
  pthread_mutex_t m;
  int n;
  sl__dgroup **g; /* in the job's order once connected */
  int next;       /* the group whose turn it is in this round */
  int64_t round;
  /* Every group has its communicator, warmed up: launches may start. A
   * member can arrive before (a daemon's actors fire on the program's
   * feeds while it still connects): it waits, deferred. */
  bool connected;
  sl_status aborted;
  char why[512];
};

static sl_status group_new(const char *name, int nranks, int nlocal,
                           const int *ranks, const sl__dev_handle *const *devs,
                           sl__dev_coll_op coll, sl_dtype dt, sl_reduce_op op,
                           size_t count, sl__dgroup **out) {
  *out = NULL;
  sl__dgroup *g;
  if (SL_NEW(g) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&g->m, NULL);
  snprintf(g->name, sizeof g->name, "%s", name);
  g->nranks = nranks;
  g->n = nlocal;
  g->desc = (sl__dev_coll_desc){
      .name = g->name, .op = coll, .dtype = dt, .reduce = op, .count = count};
  g->local_of = sl__calloc((size_t)nranks, sizeof *g->local_of);
  g->ranks = sl__calloc((size_t)nlocal, sizeof *g->ranks);
  g->devices = sl__calloc((size_t)nlocal, sizeof *g->devices);
  g->dev = sl__calloc((size_t)nlocal, sizeof *g->dev);
  g->done = sl__calloc((size_t)nlocal, sizeof *g->done);
  g->done_arg = sl__calloc((size_t)nlocal, sizeof *g->done_arg);
  g->args = sl__calloc((size_t)nlocal, sizeof *g->args);
  if (!g->local_of || !g->ranks || !g->devices || !g->dev || !g->done ||
      !g->done_arg || !g->args) {
    sl__dgroup_destroy(g);
    return SL_ENOMEM;
  }
  for (int k = 0; k < nranks; k++)
    g->local_of[k] = -1;
  for (int i = 0; i < nlocal; i++) {
    g->ranks[i] = ranks[i];
    g->dev[i] = devs[i];
    g->devices[i] = devs[i]->index;
    g->local_of[ranks[i]] = i;
  }
  *out = g;
  return SL_OK;
}

sl_status sl__dgroup_create(sl__dev_coll *e, const char *name, int n,
                            const sl__dev_handle *const *devs,
                            sl__dev_coll_op coll, sl_dtype dt, sl_reduce_op op,
                            size_t count, sl__dgroup **out) {
  *out = NULL;
  int *ranks = sl__calloc((size_t)n, sizeof *ranks);
  if (!ranks) return SL_ENOMEM;
  for (int k = 0; k < n; k++)
    ranks[k] = k;
  sl__dgroup *g = NULL;
  sl_status st = group_new(name, n, n, ranks, devs, coll, dt, op, count, &g);
  sl__free(ranks);
  if (st == SL_OK)
    st = sl__dev_comm_create_local(e, name, n, g->devices, &g->comm);
  if (st != SL_OK) {
    sl__dgroup_destroy(g);
    return st;
  }
  *out = g;
  return SL_OK;
}

void sl__dgroup_destroy(sl__dgroup *g) {
  if (!g) return;
  sl__dev_comm_destroy(g->comm);
  for (int i = 0; g->prog && i < g->n; i++)
    sl__dxchg_destroy(g->prog[i]);
  sl__free(g->prog);
  pthread_mutex_destroy(&g->m);
  sl__free(g->local_of);
  sl__free(g->ranks);
  sl__free(g->devices);
  sl__free(g->dev);
  sl__free(g->done);
  sl__free(g->done_arg);
  sl__free(g->args);
  sl__free(g);
}

sl_status sl__dgroup_set_program(sl__dgroup *g, int member, sl__dxchg *x) {
  if (!g->prog) g->prog = sl__calloc((size_t)g->n, sizeof *g->prog);
  int k = member >= 0 && member < g->nranks ? g->local_of[member] : -1;
  if (!g->prog || k < 0 || g->prog[k]) {
    sl__dxchg_destroy(x);
    return g->prog ? sl__fail(SL_EINTERNAL,
                              "device group '%s': member %d is not one of this "
                              "process's, or has a program",
                              g->name, member)
                   : SL_ENOMEM;
  }
  g->prog[k] = x;
  return SL_OK;
}

/* Completes every waiting member of g with st (under the group's lock:
 * completing queues a message or watches a stream, it never re-enters the
 * group). */
static void fail_waiting(sl__dgroup *g, sl_status st, const char *why) {
  for (int i = 0; i < g->n; i++) {
    sl__coll_done_fn done = g->done[i];
    if (!done) continue;
    g->done[i] = NULL;
    sl__fail(st, "device collective '%s': %s", g->name,
             why && why[0] ? why : sl_status_str(st));
    done(g->done_arg[i], st);
  }
  g->arrived = 0;
}

/* Launches g's round for its arrived members and completes them: each
 * once its stream has passed the collective, or at once with the launch's
 * failure. */
static sl_status launch(sl__dgroup *g) {
  sl_status st = SL_OK;
  /* An exchange's members keep the buffers they arrived with in args. */
  for (int i = 0; g->prog && i < g->n && st == SL_OK; i++) {
    sl__dev_rank_args *a = &g->args[i];
    st = sl__dxchg_before(g->prog[i], a->in, a->out, a->stream, a);
  }
  if (st == SL_OK) st = sl__dev_comm_launch(g->comm, &g->desc, g->args);
  for (int i = 0; g->prog && i < g->n && st == SL_OK; i++) {
    sl__dev_rank_args *a = &g->args[i];
    st = sl__dxchg_after(g->prog[i], a->in, a->out, a->stream);
  }
  char why[512];
  snprintf(why, sizeof why, "%s", st == SL_OK ? "" : sl_last_error());
  for (int i = 0; i < g->n; i++) {
    sl__coll_done_fn done = g->done[i];
    g->done[i] = NULL;
    /* Complete once the member's stream has passed the round. */
    sl_status w = st == SL_OK
                      ? sl__notifier_watch(g->dev[i]->notify, g->args[i].stream,
                                           done, g->done_arg[i])
                      : st;
    if (w != SL_OK) {
      sl__fail(w, "device collective '%s': %s", g->name,
               st != SL_OK ? why : sl_last_error());
      done(g->done_arg[i], w);
    }
  }
  g->arrived = 0;
  if (st != SL_OK) sl__fail(st, "%s", why);
  return st;
}

/* ---- spanning groups: the sequencer --------------------------------------
 */

sl_status sl__dseq_create(sl__dseq **out) {
  *out = NULL;
  sl__dseq *q;
  if (SL_NEW(q) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&q->m, NULL);
  *out = q;
  return SL_OK;
}

void sl__dseq_destroy(sl__dseq *q) {
  if (!q) return;
  pthread_mutex_destroy(&q->m);
  sl__free(q->g);
  sl__free(q);
}

sl_status sl__dgroup_create_span(sl__dseq *q, const char *name, int nranks,
                                 int nlocal, const int *ranks,
                                 const sl__dev_handle *const *devs,
                                 sl__dev_coll_op coll, sl_dtype dt,
                                 sl_reduce_op op, size_t count,
                                 const int32_t order[4], sl__dgroup **out) {
  *out = NULL;
  sl__dgroup **list = sl__reallocarray(q->g, (size_t)q->n + 1, sizeof *list);
  if (!list) return SL_ENOMEM;
  q->g = list;
  SL_CHECK(
      group_new(name, nranks, nlocal, ranks, devs, coll, dt, op, count, out));
  (*out)->seq = q;
  memcpy((*out)->order, order, sizeof(*out)->order);
  q->g[q->n++] = *out;
  return SL_OK;
}

/* Under q->m: fails every waiting member of every spanning group. */
static void seq_fail_all(sl__dseq *q) {
  for (int i = 0; i < q->n; i++)
    fail_waiting(q->g[i], q->aborted, q->why);
}

/* Under q->m: launches groups in the job's order for as long as the group
 * whose turn it is has all its local members. Nothing before the groups
 * are connected: a launch between two groups' creations and warm-ups
 * would put this process's launches out of the job's order (another
 * process may be warming up the later group, waiting for this one). */
static void seq_pump(sl__dseq *q) {
  while (q->n > 0 && q->aborted == SL_OK && q->connected) {
    sl__dgroup *g = q->g[q->next];
    if (g->arrived < g->n) return;
    sl_status st = launch(g);
    if (st != SL_OK) {
      /* Its ranks may now disagree on what was issued: nothing more of
       * this job goes out (the job aborts on the members' failure). */
      q->aborted = st;
      snprintf(q->why, sizeof q->why, "%s", sl_last_error());
      seq_fail_all(q);
      return;
    }
    if (++q->next == q->n) {
      q->next = 0;
      q->round++;
    }
  }
}

void sl__dseq_abort(sl__dseq *q, sl_status st, const char *msg) {
  if (!q) return;
  if (st == SL_OK) st = SL_EABORTED;
  pthread_mutex_lock(&q->m);
  if (q->aborted == SL_OK) {
    q->aborted = st;
    snprintf(q->why, sizeof q->why, "%s", msg && msg[0] ? msg : "aborted");
  }
  seq_fail_all(q);
  /* Members already launched wait on their streams for peers that may
   * never come: aborting the communicators lets those collectives end. */
  for (int i = 0; i < q->n; i++)
    sl__dev_comm_abort(q->g[i]->comm);
  pthread_mutex_unlock(&q->m);
}

/* sl__dev_comm_desc.cancelled: the job was given up while a group waited
 * for its unique id. */
static sl_status seq_cancelled(void *arg) {
  sl__dseq *q = arg;
  pthread_mutex_lock(&q->m);
  sl_status st = q->aborted;
  if (st != SL_OK) sl__fail(st, "the job was aborted: %s", q->why);
  pthread_mutex_unlock(&q->m);
  return st;
}

static int order_cmp(const void *a, const void *b) {
  const sl__dgroup *x = *(sl__dgroup *const *)a, *y = *(sl__dgroup *const *)b;
  for (int i = 0; i < 4; i++)
    if (x->order[i] != y->order[i]) return x->order[i] < y->order[i] ? -1 : 1;
  return 0;
}

/* One element all-reduced on every local rank's collective stream, waited
 * for: NCCL sets up its connections to the peers here, not in the job. */
static sl_status warm_up(sl__dgroup *g) {
  sl_status st = SL_OK;
  int n = g->n;
  void **buf = sl__calloc((size_t)n, sizeof *buf);
  sl__dev_rank_args *a = sl__calloc((size_t)n, sizeof *a);
  const sl__dev_handle **dev = g->dev;
  if (!buf || !a) st = SL_ENOMEM;
  for (int i = 0; i < n && st == SL_OK; i++) {
    sl__stream *cs = dev[i]->coll_stream;
    /* An exchange: a byte to and from every peer of its rounds (NCCL
     * connects each pair of ranks at their first send/recv). */
    size_t bytes = g->prog ? sl__dxchg_warm_bytes(g->prog[i]) : sizeof(float);
    st = sl__device_make_current(dev[i]->dev);
    if (st == SL_OK)
      st = sl__caching_alloc_alloc(dev[i]->mem, bytes, NULL, &buf[i]);
    if (st == SL_OK) st = sl__device_memset(dev[i]->dev, buf[i], 0, bytes, cs);
    a[i] = (sl__dev_rank_args){.in = buf[i], .out = buf[i], .stream = cs};
    if (st == SL_OK && g->prog)
      sl__dxchg_warm_args(g->prog[i], buf[i], cs, &a[i]);
  }
  sl__dev_coll_desc d = {.name = "warm-up",
                         .op = g->prog ? SL__DEV_EXCHANGE : SL__DEV_ALL_REDUCE,
                         .dtype = SL_DTYPE_F32,
                         .reduce = SL_REDUCE_SUM,
                         .count = 1};
  if (st == SL_OK) st = sl__dev_comm_launch(g->comm, &d, a);
  /* An abort (the job given up elsewhere) ends a wait for peers. */
  for (int i = 0; i < n; i++) {
    if (!buf[i]) continue;
    sl_status w =
        sl__device_stream_synchronize(dev[i]->dev, dev[i]->coll_stream);
    if (st == SL_OK && w != SL_OK) st = w;
    sl__caching_alloc_free(dev[i]->mem, buf[i]);
  }
  if (st == SL_OK) st = sl__dev_comm_check(g->comm);
  sl__free(buf);
  sl__free(a);
  return st;
}

sl_status sl__dseq_connect(sl__dseq *q, sl__dev_coll *e, const sl__dev_kv *kv,
                           uint64_t job) {
  if (!q || q->n == 0) return SL_OK;
  /* The job's order: the same list on every node (a group's place comes
   * from the plan), so every process creates in one order. Under q->m:
   * an abort may walk the list meanwhile. */
  pthread_mutex_lock(&q->m);
  qsort(q->g, (size_t)q->n, sizeof *q->g, order_cmp);
  pthread_mutex_unlock(&q->m);
  for (int i = 0; i < q->n; i++) {
    sl__dgroup *g = q->g[i];
    sl__dev_comm_desc d = {.name = g->name,
                           .nranks = g->nranks,
                           .nlocal = g->n,
                           .ranks = g->ranks,
                           .devices = g->devices,
                           .kv = kv,
                           .job = job,
                           .cancelled = seq_cancelled,
                           .cancel_arg = q};
    sl__dev_comm *c = NULL;
    sl_status st = seq_cancelled(q);
    if (st != SL_OK)
      return sl__fail_context(st, "device group '%s': not created: ", g->name);
    SL_CHECK(sl__dev_comm_create(e, &d, &c));
    pthread_mutex_lock(&q->m);
    g->comm = c;
    sl_status ab = q->aborted;
    pthread_mutex_unlock(&q->m);
    /* An abort that came while it was being made did not see it. */
    if (ab != SL_OK) sl__dev_comm_abort(c);
    st = warm_up(g);
    if (st != SL_OK)
      return sl__fail_context(st, "device group '%s': warm-up: ", g->name);
  }
  /* Members that arrived early launch now, in the job's order. */
  pthread_mutex_lock(&q->m);
  q->connected = true;
  seq_pump(q);
  pthread_mutex_unlock(&q->m);
  return SL_OK;
}

void sl__dgroup_abort(sl__dgroup *g, sl_status st) {
  if (g->seq) {
    sl__dseq_abort(g->seq, st, NULL);
    return;
  }
  if (st == SL_OK) st = SL_EABORTED;
  pthread_mutex_lock(&g->m);
  if (g->aborted == SL_OK) g->aborted = st;
  fail_waiting(g, g->aborted, NULL);
  pthread_mutex_unlock(&g->m);
}

sl_status sl__dgroup_arrive(sl__dgroup *g, int member, const void *in,
                            void *out, sl__stream *stream,
                            sl__coll_done_fn done, void *arg) {
  int k = member >= 0 && member < g->nranks ? g->local_of[member] : -1;
  if (k < 0)
    return sl__fail(SL_EINTERNAL,
                    "device group '%s': member %d is not one of this "
                    "process's",
                    g->name, member);
  pthread_mutex_t *m = g->seq ? &g->seq->m : &g->m;
  pthread_mutex_lock(m);
  g->done[k] = done;
  g->done_arg[k] = arg;
  g->args[k] = (sl__dev_rank_args){.in = in, .out = out, .stream = stream};
  g->arrived++;
  if (g->seq) {
    if (g->seq->aborted != SL_OK)
      fail_waiting(g, g->seq->aborted, g->seq->why);
    else
      seq_pump(g->seq);
  } else if (g->aborted != SL_OK) {
    fail_waiting(g, g->aborted, NULL);
  } else if (g->arrived == g->n) {
    /* The last member launches for all; no member fires its next round
     * before this one's firings complete. */
    (void)launch(g);
  }
  pthread_mutex_unlock(m);
  return SL_OK;
}
