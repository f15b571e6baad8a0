/* Variables between steps (docs/checkpoint.md): their values read from the
 * registers that hold them, new values taken by restarting the job, and
 * the roll-back of a failed step.
 *
 * A variable updated by the steps lives in its registers (graph/lower.c):
 * after k steps of the current job, version k is the register whose piece
 * is k — a variable updated in place has one register, one in an update
 * loop two. Between runs no producer of a variable can fire (each reads
 * the tick, and the driver released no step beyond those complete), so
 * the program's thread reads them without locks. A variable no step
 * updates is a const task's initial shard.
 *
 * Writing cannot go into the running job: readers of a variable that need
 * no tick (a cast of a weight, a boxing that gathers it) may already have
 * used the old value for the next step. So a new value restarts the job:
 * the old one is drained and freed, and a new job is built from the same
 * plan, every variable starting at its current value (its shards carried
 * over), a written value, or a checkpoint's, and the job's piece k being
 * step `base + k`. */
#include <stdlib.h>
#include <string.h>

#include "sbp_int.h"
#include "session_int.h"

/* ---- lookup ---------------------------------------------------------------
 */

static int32_t variable_named(const sl_session *s, const char *name) {
  int32_t i = sl__pplan_find_node(s->pp, name);
  return i >= 0 && sl__session_is_variable(s, i) ? i : -1;
}

size_t sl__session_value_bytes(const sl__ptensor *v) {
  return (size_t)sl_shape_numel(&v->meta.shape) * sl_dtype_size(v->meta.dtype);
}

int32_t sl_session_variable_count(const sl_session *s) {
  if (!s) return 0;
  int32_t n = 0;
  for (int32_t i = 0; i < s->pp->n_nodes; i++)
    n += sl__session_is_variable(s, i);
  return n;
}

sl_status sl_session_get_variable(const sl_session *s, int32_t i,
                                  sl_variable_info *out) {
  if (!s || !out) return sl__fail(SL_EINVAL, "variable: NULL argument");
  memset(out, 0, sizeof *out);
  for (int32_t k = 0, seen = 0; k < s->pp->n_nodes; k++) {
    if (!sl__session_is_variable(s, k) || seen++ != i) continue;
    const sl__pnode *n = &s->pp->nodes[k];
    const sl__ptensor *v = sl__session_var_value(s, k);
    out->name = n->name;
    out->shape = v->meta.shape;
    out->dtype = v->meta.dtype;
    out->trained = n->trained;
    out->optimizer = n->optimizer;
    return SL_OK;
  }
  return sl__fail(SL_ENOTFOUND, "variable: no variable %d (the graph has %d)",
                  (int)i, (int)sl_session_variable_count(s));
}

/* ---- current values ---------------------------------------------------------
 */

/* Rank `rank`'s shard of variable `node`, version `version` of the
 * current job, into buf. */
/* buf NULL: *host gets the shard's host memory instead of a copy, when it
 * has one (otherwise *host stays NULL: call again with a buffer). */
static sl_status shard_at(const sl_session *s, int32_t node, int rank,
                          int64_t version, void *buf, size_t bytes,
                          const void **host) {
  const sl__pplan *pp = s->pp;
  const sl__pnode *n = &s->pp->nodes[node];
  if (!n->trained) {
    /* No step changes it: the const task's initial shard. */
    for (int32_t t = 0; t < s->n_tasks; t++) {
      const task_rt *rt = &s->rt[t];
      if (rt->t->kind == SL__TASK_CONST && rt->t->node == node &&
          rt->t->rank == rank && rt->bytes == bytes) {
        if (!buf)
          *host = rt->init;
        else
          memcpy(buf, rt->init, bytes);
        return SL_OK;
      }
    }
    return sl__fail(SL_EINTERNAL, "variable '%s': rank %d has no const task",
                    n->name, rank);
  }
  for (int32_t r = 0; r < pp->n_regsts; r++) {
    const sl__regst *g = &pp->regsts[r];
    if (g->var_node != node || g->rank != rank) continue;
    if ((size_t)g->bytes != bytes || g->initial != 1)
      return sl__fail(SL_EINTERNAL,
                      "variable '%s': rank %d: %lld bytes, %d initial", n->name,
                      rank, (long long)g->bytes, (int)g->initial);
    /* Version k is in register k mod count: the initial version in
     * register 0, each next one in the only free register (a loop of two)
     * or in place (one). Not from the registers' pieces: the producer
     * sets those after the step counts as done (acts.c), so they may still
     * be changing. */
    void *data;
    SL_CHECK(sl_job_register_data(s->job, s->actor_desc[r],
                                  (int32_t)(version % g->count), &data));
    if (bytes == 0) return SL_OK;
    sess_dev *d = sl__session_dev(s, g->device);
    if (d && !buf) return SL_OK; /* device memory: no host pointer */
    if (d) return sl__dev_download(d, buf, data, bytes);
    if (!buf) {
      *host = data;
      return SL_OK;
    }
    memcpy(buf, data, bytes);
    return SL_OK;
  }
  return sl__fail(SL_EINTERNAL, "variable '%s': rank %d has no register",
                  n->name, rank);
}

sl_status sl__session_job_shard(const sl_session *s, int32_t node, int rank,
                                int64_t version, void *buf, size_t bytes) {
  return shard_at(s, node, rank, version, buf, bytes, NULL);
}

const void *sl__session_job_shard_host(const sl_session *s, int32_t node,
                                       int rank, int64_t version,
                                       size_t bytes) {
  const void *host = NULL;
  return shard_at(s, node, rank, version, NULL, bytes, &host) == SL_OK ? host
                                                                       : NULL;
}

/* The value a rank starts with in the next job: its source, else the
 * graph's initializer. */
sl_status sl__session_var_shard(const sl_session *s, int32_t node, int rank,
                                void *buf, size_t bytes) {
  const sl__var_src *src = s->var_src ? &s->var_src[node] : NULL;
  if (!src || (!src->logical && !src->shards && !src->ck))
    return sl__pplan_variable_init(s->pp, node, rank, buf);
  if (bytes == 0) return SL_OK; /* an empty variable: no memory at all */
  const sl__ptensor *v = sl__session_var_value(s, node);
  sl_slice box;
  SL_CHECK(sl_local_slice(&v->meta.shape, v->placement, &v->sbp, rank, &box));
  if (src->shards) {
    if (!src->shards[rank]) /* carried over only where it runs */
      return sl__fail(SL_EINTERNAL, "variable '%s': rank %d is not run here",
                      s->pp->nodes[node].name, rank);
    memcpy(buf, src->shards[rank], bytes);
    return SL_OK;
  }
  if (src->ck)
    return sl_checkpoint_read(src->ck, src->tensor, &box, buf, bytes);
  int64_t zero[SL_MAX_DIMS] = {0};
  sl__box_move(v->meta.dtype, box.ndim, buf, box.extent, zero, src->logical,
               v->meta.shape.dims, box.start, box.extent, false, SL_REDUCE_SUM);
  return SL_OK;
}

bool sl__session_stores_rank(const sl__ptensor *v, int r) {
  int coord[SL_MAX_DIMS] = {0};
  sl_placement_rank_coord(v->placement, r, coord);
  for (int a = 0; a < v->sbp.ndim; a++)
    if (v->sbp.sbp[a].kind == SL_SBP_BROADCAST && coord[a] != 0) return false;
  return true;
}

sl_status sl__session_rank_box(const sl__ptensor *v, int r, sl_slice *box,
                               size_t *bytes) {
  SL_CHECK(sl_local_slice(&v->meta.shape, v->placement, &v->sbp, r, box));
  *bytes = (size_t)sl_slice_numel(box) * sl_dtype_size(v->meta.dtype);
  return SL_OK;
}

bool sl__session_rank_on_node(const sl__ptensor *v, int r, uint32_t node) {
  int n = 0, d = 0;
  return sl_placement_rank_device(v->placement, r, &n, &d) == SL_OK &&
         (uint32_t)n == node;
}

sl_status sl__remote_read(sl_session *s, int32_t node, int64_t version,
                          void *data) {
  const sl__ptensor *v = sl__session_var_value(s, node);
  int nr = sl_placement_size(v->placement);
  char req[64];
  snprintf(req, sizeof req, "read %lld %d", (long long)version, (int)node);
  int64_t seq = 0;
  SL_CHECK(sl__remote_ask(s, req, &seq));
  sl_status st = SL_OK;
  int64_t zero[SL_MAX_DIMS] = {0};
  for (uint32_t n = 0; n < s->driver; n++) {
    /* Node n's answer: its stored ranks' shards, in rank order. */
    size_t total = 0, b = 0;
    sl_slice box;
    for (int r = 0; r < nr && st == SL_OK; r++)
      if (sl__session_stores_rank(v, r) && sl__session_rank_on_node(v, r, n) &&
          (st = sl__session_rank_box(v, r, &box, &b)) == SL_OK)
        total += b;
    char ans[1400];
    sl_status as = sl__remote_answer(s, seq, (int)n, ans, sizeof ans);
    if (st == SL_OK) st = as;
    long long got = -1;
    if (st == SL_OK &&
        (sscanf(ans, "ok %lld", &got) != 1 || (size_t)got != total))
      st = sl__fail(SL_EINTERNAL, "node %u answered '%s' for %zu bytes", n, ans,
                    total);
    if (st != SL_OK || total == 0) continue;
    uint8_t *buf = sl__malloc(total + 64);
    if (!buf) {
      st = SL_ENOMEM;
      continue;
    }
    st = sl__remote_answer_data(s, seq, (int)n, buf, total);
    size_t off = 0;
    for (int r = 0; r < nr && st == SL_OK; r++) {
      if (!sl__session_stores_rank(v, r) || !sl__session_rank_on_node(v, r, n))
        continue;
      st = sl__session_rank_box(v, r, &box, &b);
      if (st == SL_OK)
        sl__box_move(v->meta.dtype, v->meta.shape.ndim, data,
                     v->meta.shape.dims, box.start, buf + off, box.extent, zero,
                     box.extent, false, SL_REDUCE_SUM);
      off += b;
    }
    sl__free(buf);
  }
  sl__remote_forget(s, seq);
  if (st != SL_OK)
    sl__fail_context(st, "read of variable '%s': ", s->pp->nodes[node].name);
  return st;
}

/* Assembles variable `node`'s logical value (version `version` of the
 * current job) into data. Every rank writes its box; broadcast copies
 * write the same values. */
static sl_status job_value(const sl_session *s, int32_t node, int64_t version,
                           void *data) {
  const sl__ptensor *v = sl__session_var_value(s, node);
  int nr = sl_placement_size(v->placement);
  int nd = v->meta.shape.ndim;
  int64_t zero[SL_MAX_DIMS] = {0};
  sl_status st = SL_OK;
  void *buf = NULL;
  for (int r = 0; r < nr && st == SL_OK; r++) {
    sl_slice box;
    size_t b = 0;
    if ((st = sl__session_rank_box(v, r, &box, &b)) != SL_OK) break;
    sl__free(buf);
    if (!(buf = sl__malloc(b + 64))) {
      st = SL_ENOMEM;
      break;
    }
    st = sl__session_job_shard(s, node, r, version, buf, b);
    if (st == SL_OK)
      sl__box_move(v->meta.dtype, nd, data, v->meta.shape.dims, box.start, buf,
                   box.extent, zero, box.extent, false, SL_REDUCE_SUM);
  }
  sl__free(buf);
  return st;
}

sl_status sl__session_check_usable(sl_session *s, const char *what) {
  if (!s->job)
    return sl__fail(SL_ESTATE, "%s: the session runs nothing (an empty plan)",
                    what);
  sl_status st = sl__session_settle(s);
  if (st != SL_OK) return sl__fail_context(st, "%s: ", what);
  if (atomic_load(&s->failed) != SL_OK || s->finished)
    return sl__fail(SL_ESTATE, "%s: the session %s", what,
                    s->finished ? "was finished" : "failed");
  return SL_OK;
}

static sl_status lookup(sl_session *s, const char *name, size_t bytes,
                        const char *what, int32_t *node) {
  if (!s || !name) return sl__fail(SL_EINVAL, "%s: NULL argument", what);
  *node = variable_named(s, name);
  if (*node < 0)
    return sl__fail(SL_ENOTFOUND, "%s: the graph has no variable '%s'", what,
                    name);
  const sl__ptensor *v = sl__session_var_value(s, *node);
  if (bytes != sl__session_value_bytes(v)) {
    char shape[128];
    sl_shape_print(&v->meta.shape, shape, sizeof shape);
    return sl__fail(SL_EINVAL,
                    "%s '%s': %zu bytes, the variable has %zu (%s %s)", what,
                    name, bytes, sl__session_value_bytes(v),
                    sl_dtype_name(v->meta.dtype), shape);
  }
  return sl__session_check_usable(s, what);
}

sl_status sl_session_read_variable(sl_session *s, const char *name, void *data,
                                   size_t bytes) {
  int32_t node;
  SL_CHECK(lookup(s, name, bytes, "read of variable", &node));
  if (bytes && !data)
    return sl__fail(SL_EINVAL, "read of variable '%s': NULL data", name);
  const sl__var_src *src = s->var_src ? &s->var_src[node] : NULL;
  if (src && src->logical && s->var_dirty) {
    if (bytes) memcpy(data, src->logical, bytes);
    return SL_OK;
  }
  if (s->remote) return sl__remote_read(s, node, s->steps - s->base, data);
  return job_value(s, node, s->steps - s->base, data);
}

sl__var_src *sl__session_sources(sl_session *s) {
  if (!s->var_src)
    s->var_src = sl__calloc((size_t)s->pp->n_nodes + 1, sizeof *s->var_src);
  return s->var_src;
}

static void clear_source(sl__var_src *src, int nr) {
  sl__free(src->logical);
  for (int r = 0; src->shards && r < nr; r++)
    sl__free(src->shards[r]);
  sl__free(src->shards);
  memset(src, 0, sizeof *src);
}

static void clear_sources(sl_session *s) {
  for (int32_t i = 0; s->var_src && i < s->pp->n_nodes; i++)
    if (sl__session_is_variable(s, i))
      clear_source(&s->var_src[i],
                   sl_placement_size(sl__session_var_value(s, i)->placement));
  s->var_dirty = false;
}

sl_status sl_session_write_variable(sl_session *s, const char *name,
                                    const void *data, size_t bytes) {
  int32_t node;
  SL_CHECK(lookup(s, name, bytes, "write of variable", &node));
  if (bytes && !data)
    return sl__fail(SL_EINVAL, "write of variable '%s': NULL data", name);
  if (!sl__session_sources(s)) return SL_ENOMEM;
  sl__var_src *src = &s->var_src[node];
  void *copy = sl__malloc(bytes + 64);
  if (!copy) return SL_ENOMEM;
  if (bytes) memcpy(copy, data, bytes);
  clear_source(src,
               sl_placement_size(sl__session_var_value(s, node)->placement));
  src->logical = copy;
  s->var_dirty = true;
  return SL_OK;
}

/* ---- restarts ---------------------------------------------------------------
 */

sl_status sl__session_read_sources(sl_session *s) {
  sl_status st = SL_OK;
  int32_t nn = s->pp->n_nodes;
  for (int32_t i = 0; i < nn && st == SL_OK && s->var_src; i++) {
    sl__var_src *src = &s->var_src[i];
    if (!src->ck) continue;
    const sl__ptensor *v = sl__session_var_value(s, i);
    int nr = sl_placement_size(v->placement);
    if (!(src->shards = sl__calloc((size_t)nr, sizeof *src->shards))) {
      st = SL_ENOMEM;
      break;
    }
    for (int r = 0; r < nr && st == SL_OK; r++) {
      sl_slice box;
      size_t b = 0;
      st = sl__session_rank_box(v, r, &box, &b);
      if (st == SL_OK && !(src->shards[r] = sl__malloc(b + 64))) st = SL_ENOMEM;
      if (st == SL_OK && b)
        st = sl_checkpoint_read(src->ck, src->tensor, &box, src->shards[r], b);
    }
    src->ck = NULL;
  }
  if (st != SL_OK) clear_sources(s);
  return st;
}

bool sl__session_rank_here(const sl_session *s, int32_t node, int r) {
  return !s->remote || sl__session_rank_on_node(sl__session_var_value(s, node),
                                                r, s->self_node);
}

bool sl__session_has_version(const sl_session *s, int32_t node, int rank,
                             int64_t version) {
  if (!s->pp->nodes[node].trained) return true; /* a const */
  for (int32_t r = 0; r < s->pp->n_regsts; r++) {
    const sl__regst *g = &s->pp->regsts[r];
    if (g->var_node != node || (rank >= 0 && g->rank != rank)) continue;
    bool found = false;
    for (int32_t k = 0; k < g->count && !found; k++) {
      sl_register reg;
      found = sl_job_get_register(s->job, s->actor_desc[r], k, &reg) == SL_OK &&
              reg.piece == version;
    }
    if (!found) return false;
  }
  return true;
}

sl_status sl__session_carry(sl_session *to, sl_session *from, int64_t version,
                            bool check) {
  bool held = from->held && from->held_version == version;
  for (int32_t i = 0; i < to->pp->n_nodes; i++) {
    if (!sl__session_is_variable(to, i)) continue;
    sl__var_src *src = &to->var_src[i];
    if (src->logical || src->ck || src->shards) continue;
    const sl__ptensor *v = sl__session_var_value(to, i);
    int nr = sl_placement_size(v->placement);
    if (!(src->shards = sl__calloc((size_t)nr, sizeof *src->shards)))
      return SL_ENOMEM;
    for (int r = 0; r < nr; r++) {
      if (!sl__session_rank_here(to, i, r)) continue;
      if (held && from->held[i]) {
        src->shards[r] = from->held[i][r]; /* taken over */
        from->held[i][r] = NULL;
        continue;
      }
      if (check && !sl__session_has_version(from, i, r, version))
        return sl__fail(SL_ESTATE,
                        "variable '%s' no longer holds its value before step "
                        "%lld: an update of it was written or under way",
                        to->pp->nodes[i].name,
                        (long long)(from->base + version));
      sl_slice box;
      size_t b = 0;
      SL_CHECK(sl__session_rank_box(v, r, &box, &b));
      if (!(src->shards[r] = sl__malloc(b + 64))) return SL_ENOMEM;
      SL_CHECK(sl__session_job_shard(from, i, r, version, src->shards[r], b));
    }
  }
  return SL_OK;
}

/* Frees the job and everything built for it, keeping the fed inputs
 * (returned in *feeds, n_feeds entries). The job must have ended. */
static void tear_down(sl_session *s, feed_rt **feeds, int32_t *n_feeds) {
  sl_job_destroy(s->job);
  s->job = NULL;
  sl__comm_destroy(s->comm);
  s->comm = NULL;
  sl_actor_graph_destroy(s->plan);
  s->plan = NULL;
  *feeds = s->feeds;
  *n_feeds = s->n_feeds;
  s->feeds = NULL;
  s->n_feeds = 0;
  sl__session_free_build(s);
  s->rt = NULL;
  s->n_tasks = s->n_counted = s->n_fetches = s->n_ticks = 0;
  s->fetches = NULL;
  s->ticks = NULL;
  s->actor_desc = NULL;
  s->var_inits = NULL;
}

/* A new job's counters: its piece 0 is step `steps`. */
static void reset_counters(sl_session *s, int64_t steps) {
  atomic_store(&s->released, 0);
  s->completed = 0;
  s->held_abort.piece = -1;
  for (int i = 0; i < SL__STEP_RING; i++)
    atomic_store(&s->ring[i], 0);
  atomic_store(&s->failed, SL_OK);
  atomic_store(&s->ending, false);
  s->waited = false;
  s->final = SL_OK;
  s->errmsg[0] = '\0';
  s->base = s->steps = steps;
}

/* The fed inputs the job before had (same plan, same order). */
static void refeed(sl_session *s, feed_rt *old, int32_t n_old) {
  for (int32_t i = 0; i < n_old && i < s->n_feeds; i++) {
    memcpy(s->feeds[i].data, old[i].data, s->feeds[i].bytes);
    s->feeds[i].fed = old[i].fed;
  }
}

static void free_feeds(feed_rt *old, int32_t n_old) {
  for (int32_t i = 0; i < n_old; i++)
    sl__free(old[i].data);
  sl__free(old);
}

/* Records a restart's failure: the session reports it from then on. */
static void restart_failed(sl_session *s, sl_status st) {
  snprintf(s->errmsg, sizeof s->errmsg, "%s", sl_last_error());
  s->final = st;
  s->waited = true;
  atomic_store(&s->failed, st);
}

/* Ends the job (no step runs at its end): first, so that any failure
 * after it leaves a job that was waited for. */
static sl_status end_job(sl_session *s) {
  if (s->waited) return SL_OK;
  s->waited = true;
  if (s->remote) {
    sl__remote_end(s);
    return sl__remote_wait(s);
  }
  sl__driver_end(s);
  return sl_job_wait(s->job);
}

/* Builds and starts the next job, its piece 0 step `steps`: this
 * process's, or a remote session's (its daemons' variables starting as
 * s->next says). */
static sl_status start_job(sl_session *s, int64_t steps, feed_rt *old,
                           int32_t n_old) {
  if (s->remote) sl__remote_free(s);
  reset_counters(s, steps);
  sl_status st;
  if (s->remote) {
    st = sl__remote_start(s); /* builds, submits and starts */
  } else {
    st = sl__session_build(s);
    if (st == SL_OK) st = sl__session_start_job(s);
  }
  /* Feeds are read only for steps released later. */
  if (st == SL_OK) refeed(s, old, n_old);
  return st;
}

/* Restarts the job at step `steps`, variables from their sources, those
 * without one carried over at version `version` of the current job
 * (checked to hold it after a failure); a remote session's daemons also
 * take s->next. A failure leaves the session failed. */
static sl_status restart(sl_session *s, int64_t version, int64_t steps,
                         bool failed) {
  if (!sl__session_sources(s)) return SL_ENOMEM;
  sl_status st = SL_OK;
  bool unread = false; /* the end's extra step changes nothing */
  if (s->remote) {
    /* The daemons keep the job's variables until the next job takes them:
     * a copy at `version` (the end runs one step more, which nobody
     * reads), or after a failure the registers as the failure left them. */
    sl__session_save_join(s); /* its daemons' writes are requests too */
    if (!s->next.restore) {
      s->next.carry = true;
      s->next.carry_job = sl__remote_job(s);
      s->next.carry_version = version;
      if (!failed) st = sl__remote_hold(s, version);
    }
    unread = !failed && st == SL_OK;
  }
  if (st == SL_OK) {
    /* The next job starts from the checkpoint (a restore) or from the
     * copies the hold made once every daemon had completed the released
     * steps, so a kernel failing now failed in the step the end runs
     * unread (its data may be bad: the next batch) or in a step the
     * restore discards. A lost node is still a failure. */
    sl_status end = end_job(s);
    if (end != SL_OK && unread && end != SL_ECOMM)
      SL_DEBUG("session: the unread step at the end of the job failed, "
               "which changes nothing: %s",
               sl_last_error());
    else
      st = end;
  }
  if (st == SL_OK && !s->remote) st = sl__session_carry(s, s, version, false);
  feed_rt *old = NULL;
  int32_t n_old = 0;
  if (st == SL_OK) {
    if (s->remote) sl__remote_destroy(s);
    tear_down(s, &old, &n_old);
    st = start_job(s, steps, old, n_old);
    if (st != SL_OK)
      sl__fail_context(st,
                       "session: continuing at step %lld: ", (long long)steps);
  }
  memset(&s->next, 0, sizeof s->next);
  free_feeds(old, n_old);
  clear_sources(s);
  if (st != SL_OK) restart_failed(s, st);
  return st;
}

sl_status sl__session_restart_remote(sl_session *s, const char *path,
                                     bool restore, int64_t steps) {
  memset(&s->next, 0, sizeof s->next);
  if (restore)
    s->next.restore = path;
  else
    s->next.load = path;
  return restart(s, s->steps - s->base, steps, false);
}

sl_status sl__session_restart(sl_session *s, int64_t steps) {
  return restart(s, s->steps - s->base, steps, false);
}

sl_status sl__session_apply_writes(sl_session *s) {
  if (!s->var_dirty) return SL_OK;
  return restart(s, s->steps - s->base, s->steps, false);
}

sl_status sl__session_roll_back(sl_session *s) {
  if (!s->job) return sl__fail(SL_ESTATE, "the session has no job");
  /* Steps before the failed one are complete; the variables' values before
   * it are version `completed` of the job (written values not yet taken
   * stay written). */
  int64_t done = s->completed;
  if (s->remote) {
    if (s->n_counted == 0)
      return sl__fail(SL_ESTATE,
                      "the program feeds and fetches nothing, so it cannot "
                      "tell which steps completed");
    SL_CHECK(sl__remote_can_roll_back(s, done));
    return restart(s, done, s->base + done, true);
  }
  /* A check first, so a failure to roll back leaves the state as the
   * failure left it. */
  for (int32_t i = 0; i < s->pp->n_nodes; i++) {
    if (!sl__session_is_variable(s, i)) continue;
    const sl__var_src *src = s->var_src ? &s->var_src[i] : NULL;
    if (src && src->logical) continue;
    if (!sl__session_has_version(s, i, -1, done))
      return sl__fail(SL_ESTATE,
                      "variable '%s' no longer holds its value before step "
                      "%lld: an update of it was written or under way",
                      s->pp->nodes[i].name, (long long)(s->base + done));
  }
  return restart(s, done, s->base + done, false);
}

void sl__session_drop_sources(sl_session *s) {
  sl__session_close_files(s);
  clear_sources(s);
}

void sl__session_free_state(sl_session *s) {
  sl__session_drop_sources(s);
  sl__free(s->var_src);
  s->var_src = NULL;
  sl__session_free_held(s);
  sl__free(s->cwd);
  s->cwd = NULL;
}

/* ---- variables loaded from files (sl_variable_load) -------------------------
 */

sl_status sl__session_open_files(sl_session *s) {
  int32_t nn = s->pp->n_nodes;
  for (int32_t i = 0; i < nn; i++) {
    const char *path = s->pp->nodes[i].load;
    const char *tensor = s->pp->nodes[i].tensor;
    if (!path) continue;
    if (!sl__session_sources(s)) return SL_ENOMEM;
    sl_checkpoint *ck = NULL;
    for (int32_t k = 0; k < s->n_files && !ck; k++)
      if (strcmp(s->file_paths[k], path) == 0) ck = s->files[k];
    if (!ck) {
      sl_checkpoint **f =
          sl__realloc(s->files, ((size_t)s->n_files + 1) * sizeof *s->files);
      if (!f) return SL_ENOMEM;
      s->files = f;
      const char **p = sl__realloc(s->file_paths, ((size_t)s->n_files + 1) *
                                                      sizeof *s->file_paths);
      if (!p) return SL_ENOMEM;
      s->file_paths = p;
      /* A daemon opens a relative path where the program runs. */
      char full[8192];
      snprintf(full, sizeof full, "%s%s%s",
               s->cwd && path[0] != '/' ? s->cwd : "",
               s->cwd && path[0] != '/' ? "/" : "", path);
      SL_CHECK(sl_checkpoint_open(full, &ck));
      s->files[s->n_files] = ck;
      s->file_paths[s->n_files++] = path;
    }
    s->var_src[i].ck = ck;
    s->var_src[i].tensor = sl_checkpoint_find(ck, tensor);
    if (s->var_src[i].tensor < 0)
      return sl__fail(SL_EINVAL, "'%s' no longer has tensor '%s'", path,
                      tensor);
  }
  return SL_OK;
}

void sl__session_close_files(sl_session *s) {
  for (int32_t i = 0; s->var_src && i < s->pp->n_nodes; i++)
    s->var_src[i].ck = NULL;
  for (int32_t k = 0; k < s->n_files; k++)
    sl_checkpoint_close(s->files[k]);
  sl_checkpoint_close(s->restore_ck);
  s->restore_ck = NULL;
  sl__free(s->files);
  sl__free(s->file_paths);
  s->files = NULL;
  s->file_paths = NULL;
  s->n_files = 0;
}
