/* All-reduces between the GPUs of one process (graph/lower.c keeps a
 * boxing of all-reduces on the devices when each group stays on one
 * machine; docs/cuda.md, "Sessions on CUDA placements"). One device group
 * per boxing collective, with its communicator (comm/dev_coll.h: NCCL).
 * Each member's actor arrives with its registers and defers; the last to
 * arrive launches the collective for every member at once — one group call
 * under the process's launch lock, so every device sees launches in the
 * same order and no two groups can deadlock — and each member's firing
 * completes once its collective stream has passed the collective. */
#include <stdio.h>
#include <string.h>

#include "session_int.h"

struct sl__dgroup {
  pthread_mutex_t m;
  sl__dev_comm *comm;
  sl__dev_coll_desc desc;
  char name[160];
  int n, arrived;
  task_rt **member;        /* by member index, while it waits */
  sl__dev_rank_args *args; /* by member index */
  sl_status aborted;       /* SL_OK, or why every arrival now fails */
};

sl_status sl__dgroup_create(sl__dev_coll *e, const char *name, int n,
                            const int *devices, sl_dtype dt, sl_reduce_op op,
                            size_t count, sl__dgroup **out) {
  *out = NULL;
  sl__dgroup *g;
  if (SL_NEW(g) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&g->m, NULL);
  snprintf(g->name, sizeof g->name, "%s", name);
  g->n = n;
  g->desc = (sl__dev_coll_desc){.name = g->name,
                                .op = SL__DEV_ALL_REDUCE,
                                .dtype = dt,
                                .reduce = op,
                                .count = count};
  g->member = sl__calloc((size_t)n, sizeof *g->member);
  g->args = sl__calloc((size_t)n, sizeof *g->args);
  sl_status st = g->member && g->args ? SL_OK : SL_ENOMEM;
  if (st == SL_OK)
    st = sl__dev_comm_create_local(e, name, n, devices, &g->comm);
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
  pthread_mutex_destroy(&g->m);
  sl__free(g->member);
  sl__free(g->args);
  sl__free(g);
}

/* Completes every waiting member with st (under g->m: completing queues
 * a message or watches a stream, it never re-enters the group). */
static void fail_waiting(sl__dgroup *g, sl_status st) {
  for (int i = 0; i < g->n; i++) {
    task_rt *rt = g->member[i];
    if (!rt) continue;
    g->member[i] = NULL;
    sl_completion *c = rt->pending;
    rt->pending = NULL;
    sl__fail(st, "device collective '%s': %s", g->name, sl_status_str(st));
    sl_completion_done(c, st);
  }
  g->arrived = 0;
}

void sl__dgroup_abort(sl__dgroup *g, sl_status st) {
  if (st == SL_OK) st = SL_EABORTED;
  pthread_mutex_lock(&g->m);
  if (g->aborted == SL_OK) g->aborted = st;
  fail_waiting(g, g->aborted);
  pthread_mutex_unlock(&g->m);
}

sl_status sl__dgroup_arrive(sl__dgroup *g, task_rt *rt, const void *in,
                            void *out) {
  int k = rt->member;
  pthread_mutex_lock(&g->m);
  g->member[k] = rt;
  g->args[k] = (sl__dev_rank_args){
      .in = in, .out = out, .stream = rt->dev->stream[rt->t->stream]};
  g->arrived++;
  if (g->aborted != SL_OK) {
    fail_waiting(g, g->aborted);
  } else if (g->arrived == g->n) {
    /* The last member launches for all; no member fires its next round
     * before this one's firings complete. */
    sl_status st = sl__dev_comm_launch(g->comm, &g->desc, g->args);
    char why[512];
    snprintf(why, sizeof why, "%s", st == SL_OK ? "" : sl_last_error());
    for (int i = 0; i < g->n; i++) {
      task_rt *m = g->member[i];
      g->member[i] = NULL;
      if (st != SL_OK) sl__fail(st, "%s", why); /* each member's own prefix */
      sl__complete_on_stream(m, st);
    }
    g->arrived = 0;
  }
  pthread_mutex_unlock(&g->m);
  return SL_OK;
}
