/* A daemon's service loop (docs/cluster.md). Each job: fetch this node's
 * blob, read the plan the program submitted and the compiled graph it was
 * made from (checked against each other, never lowered again), build the
 * whole actor plan with
 * build.c (the same code as the embedded session; feeds, fetches and
 * ticks are the program's actors), create this node's job on the data
 * plane, attach it and say so in the key-value store, run it, report the
 * outcome and detach. A monitor thread follows the job on the control
 * plane: when another node fails it, the program stops it or the master
 * declares a node lost, the local job is aborted at once, collectives
 * waiting for members included; a requests thread serves the program
 * between steps (daemon_requests.c). A job that ran is kept after it
 * ends, for the program to restart from (handoff.c), until the next job
 * took what it needs or the program releases it. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "session_int.h"

/* Waits inside the loop are sliced so that a stop request is seen. */
#define POLL_MS 500u
#define CALL_MS 30000u
#define READY_MS 120000

void sl__daemon_ready_key(uint64_t job, int rank, char *buf, size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/ready/%d", job, rank);
}

void sl__daemon_trace_key(uint64_t job, int rank, char *buf, size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/trace/%d", job, rank);
}

void sl__daemon_req_key(uint64_t job, int64_t seq, char *buf, size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/req/%lld", job, (long long)seq);
}

void sl__daemon_ans_key(uint64_t job, int64_t seq, int rank, int chunk,
                        char *buf, size_t n) {
  if (chunk < 0)
    snprintf(buf, n, "sluice/job/%" PRIu64 "/ans/%lld/%d", job, (long long)seq,
             rank);
  else
    snprintf(buf, n, "sluice/job/%" PRIu64 "/ans/%lld/%d/%d", job,
             (long long)seq, rank, chunk);
}

void sl__daemon_value_key(uint64_t job, int32_t node, char *buf, size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/value/%d", job, (int)node);
}

void sl__daemon_versions_key(uint64_t job, int rank, char *buf, size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/versions/%d", job, rank);
}

void sl__daemon_release_key(uint64_t job, char *buf, size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/release", job);
}

sl_status sl__daemon_split_addr(const char *addr, char *host, size_t n,
                                uint16_t *port) {
  const char *colon = addr ? strrchr(addr, ':') : NULL;
  if (!colon || colon == addr)
    return sl__fail(SL_EINVAL, "address '%s': expected host:port",
                    addr ? addr : "(null)");
  const char *h = addr;
  size_t hl = (size_t)(colon - addr);
  if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
    h++;
    hl -= 2;
  }
  char *end = NULL;
  long p = strtol(colon + 1, &end, 10);
  if (hl == 0 || hl >= n || !end || *end || p <= 0 || p > 65535)
    return sl__fail(SL_EINVAL, "address '%s': bad host or port", addr);
  memcpy(host, h, hl);
  host[hl] = '\0';
  *port = (uint16_t)p;
  return SL_OK;
}

sl_status sl__daemon_set_peers(sl__cp_client *cp, sl__dp_endpoint *ep) {
  uint32_t self = sl__dp_endpoint_node(ep);
  sl__cp_members mem;
  memset(&mem, 0, sizeof mem);
  SL_CHECK(sl__cp_members_get(cp, false, CALL_MS, &mem));
  sl_status st = SL_OK;
  char host[256];
  for (int r = 0; r < mem.n && st == SL_OK; r++) {
    if ((uint32_t)r == self || mem.m[r].state != SL__CP_MEMBER_LIVE ||
        !mem.m[r].data_addr[0])
      continue;
    uint16_t port = 0;
    st = sl__daemon_split_addr(mem.m[r].data_addr, host, sizeof host, &port);
    if (st == SL_OK) st = sl__dp_endpoint_set_peer(ep, (uint32_t)r, host, port);
  }
  sl__cp_members_free(&mem);
  return st;
}

/* ---- one job ------------------------------------------------------------- */

typedef struct djob {
  const sl__daemon_opts *o;
  sl_session *s;
  uint64_t id;
  atomic_bool done;
  pthread_t monitor, requests;
  bool monitor_started, requests_started;
  sl__daemon_requests rq;
  sl_session *kept;     /* the job before, until this one took what it needs */
  bool ran;             /* the job started: its variables may be carried */
  bool trace;           /* the program wants this node's trace */
  char trace_path[300]; /* where the job writes it first (a temp file) */
} djob;

/* The data plane's transport, watching for this node's own ABORT going
 * out: collectives waiting for members must give up too. */
static sl_status dj_send(void *ctx, uint32_t node, const sl_msg *m,
                         const void *payload, size_t nbytes) {
  djob *j = ctx;
  if (m->kind == SL_MSG_CMD && m->cmd == SL_CMD_ABORT)
    sl__session_abort_collectives(j->s, (sl_status)m->index,
                                  "this node aborted the job");
  return sl__dp_endpoint_send(j->o->dp, node, m, payload, nbytes);
}

static bool dj_quiescent(void *ctx, uint32_t self, uint64_t *progress) {
  djob *j = ctx;
  return sl__dp_endpoint_quiescent(j->o->dp, self, progress);
}

static const sl_transport_vtable dj_transport = {dj_send, dj_quiescent};

static void *monitor_main(void *arg) {
  djob *j = arg;
  while (!atomic_load(&j->done)) {
    sl__cp_job_info info;
    sl_status st = sl__cp_job_status(j->o->cp, j->id, SL__CP_JOB_SUCCEEDED,
                                     POLL_MS, &info);
    if (st == SL_ETIMEOUT) continue;
    if (st != SL_OK) {
      /* The master is gone: nobody can start or finish this job. */
      if (sl__cp_client_health(j->o->cp) != SL_OK) {
        sl__session_abort_collectives(j->s, SL_ECOMM,
                                      "daemon: lost the master");
        sl_job_abort_msg(j->s->job, SL_ECOMM,
                         "daemon: lost the master during the job");
        return NULL;
      }
      continue;
    }
    if (info.state == SL__CP_JOB_FAILED || info.state == SL__CP_JOB_STOPPED) {
      sl_status why = info.status != SL_OK ? info.status : SL_EABORTED;
      sl__session_wait_held_abort(j->s, &j->done);
      sl__session_abort_collectives(j->s, why, info.message);
      sl_job_abort_msg(j->s->job, why, info.message);
      return NULL;
    }
    if (info.state == SL__CP_JOB_SUCCEEDED) return NULL;
  }
  return NULL;
}

static sl_session *session_new(void) {
  sl_session *s;
  if (SL_NEW(s) != SL_OK) return NULL;
  pthread_mutex_init(&s->lock, NULL);
  if (sl__cond_init(&s->cond) != SL_OK) {
    pthread_mutex_destroy(&s->lock);
    sl__free(s);
    return NULL;
  }
  s->cfg = sl_session_config_default();
  atomic_init(&s->released, 0);
  atomic_init(&s->failed, SL_OK);
  s->held_abort.piece = -1;
  atomic_init(&s->waiting, false);
  atomic_init(&s->driver_msgs, 0);
  for (int i = 0; i < SL__STEP_RING; i++)
    atomic_init(&s->ring[i], 0);
  return s;
}

static void session_free(sl_session *s) {
  if (!s) return;
  sl__shared_regs_close(s);
  sl_job_destroy(s->job);
  sl__shm_pool_destroy(s->pool);
  sl__comm_destroy(s->comm);
  sl_actor_graph_destroy(s->plan);
  sl__session_free_build(s);
  sl__session_free_state(s);
  sl__pplan_destroy(s->pp);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  sl__free(s);
}

/* Builds the job the blob describes: plan (checked), variables'
 * starts (handoff.c, taking what it needs of the job before), actors. */
static sl_status job_from_blob(djob *j, const sl__job_blob *bp,
                               int64_t *hang_ms) {
  const sl__daemon_opts *o = j->o;
  const sl__job_blob b = *bp;
  char host[256];
  j->trace = b.trace;
  uint32_t self = sl__dp_endpoint_node(o->dp);
  int nn = sl__cp_client_nnodes(o->cp);
  if (b.nnodes != (uint32_t)nn)
    return sl__fail(SL_EINVAL, "the job is for %u nodes, this cluster has %d",
                    b.nnodes, nn);
  uint16_t port = 0;
  SL_CHECK(sl__daemon_split_addr(b.driver_addr, host, sizeof host, &port));
  SL_CHECK(sl__dp_endpoint_set_peer(o->dp, (uint32_t)nn, host, port));
  *hang_ms = b.hang_timeout_ms;
  SL_CHECK(sl__daemon_set_peers(o->cp, o->dp));
  sl_session *s = session_new();
  if (!s) return SL_ENOMEM;
  j->s = s;
  s->remote = true;
  s->self_node = self;
  s->driver = (uint32_t)nn;
  s->nc = o->nc;
  s->job_id = j->id;
  /* The program's plan is the contract: the daemon runs it as submitted,
   * with every fact checked on reading (sl__pplan_check_runtime); it
   * never sees the graph. */
  sl_status st = sl__pplan_unpack(b.plan, b.plan_len, &s->pp);
  if (st != SL_OK) return sl__fail_context(st, "the submitted plan: ");
  /* A continued run: its steps count from base_step, its variables start
   * as the program says (read by sl_job_create; dropped in job_prepare). */
  s->base = s->steps = b.base_step;
  s->cfg.cpu_threads = b.cpu_threads;
  s->cfg.cpu_pin = b.cpu_pin;
  s->cfg.spin_us = b.spin_us;
  SL_CHECK(sl__handoff_take(s, b.starts, j->kept, o->cp, j->id));
  /* The job before gave what it had to; what its collectives left goes,
   * and an abort of it no longer applies. */
  session_free(j->kept);
  j->kept = NULL;
  if (s->nc) sl__net_coll_reset(s->nc);
  return sl__session_build(s);
}

/* Rebuilds the job from its blob. */
static sl_status job_build(djob *j, const uint8_t *blob, size_t len,
                           int64_t *hang_ms) {
  char addr[256];
  char *starts = sl__malloc(SL__JOB_BLOB_STARTS);
  if (!starts) return SL_ENOMEM;
  sl__job_blob b;
  sl_status st = sl__job_blob_unpack(blob, len, addr, starts, &b);
  if (st == SL_OK) st = job_from_blob(j, &b, hang_ms);
  sl__free(starts);
  return st;
}

static sl_status wait_running(djob *j) {
  const sl__daemon_opts *o = j->o;
  for (int64_t waited = 0; waited < READY_MS; waited += POLL_MS) {
    if (o->stop && atomic_load(o->stop))
      return sl__fail(SL_EABORTED, "daemon stopped before the job started");
    sl__cp_job_info info;
    sl_status st =
        sl__cp_job_status(o->cp, j->id, SL__CP_JOB_RUNNING, POLL_MS, &info);
    if (st == SL_ETIMEOUT) continue;
    SL_CHECK(st);
    if (info.state == SL__CP_JOB_RUNNING || info.state == SL__CP_JOB_SUCCEEDED)
      return SL_OK;
    if (info.state >= SL__CP_JOB_FAILED)
      return sl__fail(info.status != SL_OK ? info.status : SL_EABORTED,
                      "job %" PRIu64 " ended before it started: %s", j->id,
                      info.message);
  }
  return sl__fail(SL_ETIMEOUT, "job %" PRIu64 " was never started", j->id);
}

static sl_status job_prepare(djob *j, const uint8_t *blob, size_t len) {
  int64_t hang_ms = 0;
  SL_CHECK(job_build(j, blob, len, &hang_ms));
  sl_session *s = j->s;
  sl_job_config jc = sl_job_config_default();
  jc.node = s->self_node;
  jc.hang_timeout_ms = hang_ms;
  jc.trace_path = "";
  if (j->trace) {
    /* The job inserts ".node<N>" before the extension. */
    const char *tmp = getenv("TMPDIR");
    snprintf(j->trace_path, sizeof j->trace_path,
             "%s/sluice-trace-%d-%" PRIu64 ".json",
             tmp && tmp[0] ? tmp : "/tmp", (int)getpid(), j->id);
    jc.trace_path = j->trace_path;
  }
  jc.device_name = sl__dev_name; /* "cuda:1" in messages, traces */
  jc.transport = (sl_transport){&dj_transport, j};
  sl__shared_regs_open(s, sl__cp_client_nnodes(j->o->cp));
  sl__session_job_memory(s, &jc);
  sl__session_job_spin(s, &jc);
  sl_status st = sl_job_create(s->plan, &jc, &s->job);
  sl__session_drop_sources(s);
  SL_CHECK(st);
  return sl__dp_endpoint_attach_hooked(j->o->dp, s->job, sl__session_hold_abort,
                                       s);
}

static sl_status job_run(djob *j, const uint8_t *blob, size_t len) {
  const sl__daemon_opts *o = j->o;
  char key[128];
  sl__daemon_ready_key(j->id, (int)sl__dp_endpoint_node(o->dp), key,
                       sizeof key);
  sl_status st = job_prepare(j, blob, len);
  if (st != SL_OK) {
    /* The program waits for this key: tell it why instead ("E", the
     * status's number, a space, the message). */
    char m[1400];
    int at = snprintf(m, sizeof m, "E%d ", (int)st);
    snprintf(m + at, sizeof m - (size_t)at, "%s", sl_last_error());
    sl__cp_kv_put(o->cp, key, m, strlen(m), CALL_MS);
    sl__dp_endpoint_detach(o->dp);
    return sl__fail(st, "%s", m + at);
  }
  sl_session *s = j->s;
  SL_CHECK_GOTO(sl__cp_kv_put(o->cp, key, "1", 1, CALL_MS), st, detach);
  if (pthread_create(&j->monitor, NULL, monitor_main, j) != 0) {
    st = sl__fail(SL_EINTERNAL, "daemon: cannot start the monitor thread");
    goto detach;
  }
  j->monitor_started = true;
  j->rq = (sl__daemon_requests){o->cp, s, j->id,
                                (int)sl__dp_endpoint_node(o->dp), &j->done};
  if (pthread_create(&j->requests, NULL, sl__daemon_requests_main, &j->rq) !=
      0) {
    st = sl__fail(SL_EINTERNAL, "daemon: cannot start the requests thread");
    goto detach;
  }
  j->requests_started = true;
  /* Start only once the program attached its share (it starts the job on
   * the control plane then): what this node sends at once, a variable's
   * initial version for a fetch, must find it. */
  st = wait_running(j);
  /* Every node is LIVE now: a node restarted since the build has its new
   * address. */
  if (st == SL_OK) st = sl__daemon_set_peers(o->cp, o->dp);
  if (st == SL_OK)
    st =
        sl__shared_regs_connect(s, o->cp, sl__cp_client_nnodes(o->cp), CALL_MS);
  /* Device groups spanning nodes get their communicators now, not while
   * building: creating one waits for every node holding a member, and a
   * node that refused the job would never come. The monitor runs, so a
   * job failed elsewhere ends a wait for a unique id. */
  if (st == SL_OK) {
    sl__dev_kv kv = sl__dev_kv_cp(o->cp);
    st = sl__session_connect_dgroups(s, &kv);
  }
  if (st == SL_OK) st = sl_job_start(s->job);
  j->ran = st == SL_OK;
  if (st == SL_OK) st = sl_job_wait(s->job);
detach:;
  char msg[1400];
  snprintf(msg, sizeof msg, "%s", st == SL_OK ? "" : sl_last_error());
  /* Communicators shared with other nodes are aborted, not finalized, after
   * a failure here: a peer may be inside a collective or an init with them. */
  if (st != SL_OK) sl__dseq_abort(s->dseq, st, msg);
  atomic_store(&j->done, true);
  if (j->monitor_started) pthread_join(j->monitor, NULL);
  if (j->requests_started) pthread_join(j->requests, NULL);
  sl__dp_endpoint_detach(o->dp);
  if (st != SL_OK) sl__fail(st, "%s", msg);
  return st;
}

/* The node's trace of the job into the store for the program (which
 * merges every node's into its file), the temp file removed; or "E" and
 * why there is none. Before the job is reported: the program asks for the
 * traces once every node has. */
static void publish_trace(djob *j) {
  if (!j->trace) return;
  int rank = sl__cp_client_rank(j->o->cp);
  char key[128];
  sl__daemon_trace_key(j->id, rank, key, sizeof key);
  const char *path = j->s && j->s->job ? sl_job_trace_path(j->s->job) : NULL;
  uint8_t *data = NULL;
  size_t len = 0;
  char why[400] = "the job did not run on this node";
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (f) {
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (data = sl__malloc((size_t)n + 1)) &&
        fread(data, 1, (size_t)n, f) == (size_t)n)
      len = (size_t)n;
    else
      snprintf(why, sizeof why, "cannot read '%s'", path);
    fclose(f);
    remove(path);
  } else if (path) {
    snprintf(why, sizeof why, "no trace was written to '%s'", path);
  }
  sl_status st =
      len ? sl__cp_kv_put(j->o->cp, key, data, len, CALL_MS) : SL_EIO;
  if (st != SL_OK && len)
    snprintf(why, sizeof why, "%zu bytes could not be stored: %s", len,
             sl_last_error());
  if (st != SL_OK) {
    char m[420];
    snprintf(m, sizeof m, "E%s", why);
    sl__cp_kv_put(j->o->cp, key, m, strlen(m), CALL_MS);
  }
  sl__free(data);
}

/* After a failed job: the versions this node's variables all still hold
 * ("V ..."), so that the program rolls back only to one every node has
 * (handoff.c carries it into the next job). A node refusing the next job
 * instead would leave the others attached to it. */
static void publish_versions(djob *j) {
  sl_session *s = j->s;
  char key[SL__CP_MAX_NAME], val[256] = "";
  size_t n = 0;
  for (int64_t v = SL_MAX(0, s ? s->completed - 2 : 0);
       j->ran && v <= s->completed + 1; v++) {
    bool all = true;
    for (int32_t i = 0; i < s->pp->n_nodes && all; i++) {
      if (!sl__session_is_variable(s, i)) continue;
      int nr = sl_placement_size(sl__session_var_value(s, i)->placement);
      for (int r = 0; r < nr && all; r++)
        all = !sl__session_rank_here(s, i, r) ||
              sl__session_has_version(s, i, r, v);
    }
    if (all && n < sizeof val - 24)
      n += (size_t)snprintf(val + n, sizeof val - n, "%lld ", (long long)v);
  }
  sl__daemon_versions_key(j->id, sl__cp_client_rank(j->o->cp), key, sizeof key);
  sl__cp_kv_put(j->o->cp, key, n ? val : "-", n ? n : 1, CALL_MS);
}

static void log_line(const sl__daemon_opts *o, const char *fmt, ...)
    SL__PRINTF(2, 3);
static void log_line(const sl__daemon_opts *o, const char *fmt, ...) {
  FILE *f = o->log ? o->log : stderr;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}

/* Whether the program released job `job` (sl_session_destroy). */
static bool released(sl__cp_client *cp, uint64_t job) {
  char key[SL__CP_MAX_NAME];
  sl__daemon_release_key(job, key, sizeof key);
  uint8_t *v = NULL;
  size_t n = 0;
  bool yes = sl__cp_kv_get(cp, key, false, CALL_MS, &v, &n) == SL_OK && n > 0;
  sl__free(v);
  return yes; /* the key stays: every node of the job reads it */
}

/* The first job id to wait for: one past the last the cluster started. */
static uint64_t next_job_id(sl__cp_client *cp) {
  uint8_t *v = NULL;
  size_t n = 0;
  uint64_t last = 0;
  if (sl__cp_kv_get(cp, SL__DAEMON_LAST_JOB_KEY, false, CALL_MS, &v, &n) ==
      SL_OK) {
    char tmp[32];
    size_t k = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
    memcpy(tmp, v, k);
    tmp[k] = '\0';
    last = strtoull(tmp, NULL, 10);
  }
  sl__free(v);
  /* A job submitted while this node was (re)joining is still its to take. */
  sl__cp_job_info info;
  if (last > 0 &&
      sl__cp_job_status(cp, last, SL__CP_JOB_NONE, CALL_MS, &info) == SL_OK &&
      info.state == SL__CP_JOB_SUBMITTED)
    return last;
  return last + 1;
}

sl_status sl__daemon_serve(const sl__daemon_opts *o) {
  if (!o || !o->cp || !o->dp)
    return sl__fail(SL_EINVAL, "daemon: NULL argument");
  int rank = sl__cp_client_rank(o->cp);
  uint64_t id = next_job_id(o->cp);
  int64_t served = 0;
  /* The last job, kept after it ended for the program to restart from
   * (handoff.c), until the next job or the program's release. */
  sl_session *kept = NULL;
  while (!(o->stop && atomic_load(o->stop)) &&
         (o->max_jobs <= 0 || served < o->max_jobs)) {
    uint8_t *blob = NULL;
    size_t len = 0;
    sl_status st = sl__cp_plan_fetch(o->cp, id, rank, POLL_MS, &blob, &len);
    if (st == SL_ETIMEOUT && kept && released(o->cp, kept->job_id)) {
      session_free(kept);
      kept = NULL;
    }
    if (st == SL_ETIMEOUT) {
      /* A program may have taken a later id (another one's job failed
       * before it was started); follow the cluster's counter. */
      uint64_t next = next_job_id(o->cp);
      if (next > id) id = next;
      continue;
    }
    if (st != SL_OK) {
      if (sl__cp_client_health(o->cp) != SL_OK) {
        log_line(o, "sluice daemon %d: lost the master: %s", rank,
                 sl_last_error());
        session_free(kept);
        return SL_ECOMM;
      }
      id++;
      continue;
    }
    djob j;
    memset(&j, 0, sizeof j);
    j.o = o;
    j.id = id;
    j.kept = kept;
    atomic_init(&j.done, false);
    st = job_run(&j, blob, len);
    session_free(j.kept); /* not taken: the new job did not need it */
    kept = NULL;
    sl__free(blob);
    publish_trace(&j);
    char msg[1400];
    snprintf(msg, sizeof msg, "%s", st == SL_OK ? "" : sl_last_error());
    /* A failure another node began: that node's report names its cause
     * (this node's part may not know the actor that failed), so it goes
     * first; this one follows once the job has ended, or after a while. */
    int64_t origin =
        st != SL_OK && j.s && j.s->job ? sl_job_failure_origin(j.s->job) : -1;
    if (origin >= 0 && origin != rank) {
      sl__cp_job_info info;
      sl__cp_job_status(o->cp, id, SL__CP_JOB_SUCCEEDED, SL__DAEMON_FOLLOW_MS,
                        &info);
      sl_clear_error();
    }
    sl_job_stats js;
    memset(&js, 0, sizeof js);
    if (j.s && j.s->job) sl_job_get_stats(j.s->job, &js);
    if (st != SL_OK) publish_versions(&j);
    if (j.ran)
      kept = j.s;
    else
      session_free(j.s);
    char rep[1500];
    snprintf(rep, sizeof rep, "node %d: %s", rank, msg);
    sl_status rst =
        sl__cp_job_report(o->cp, id, st, st == SL_OK ? "" : rep, CALL_MS);
    if (st == SL_OK)
      log_line(o,
               "sluice daemon %d: job %" PRIu64 ": succeeded (%u actors, "
               "%" PRIu64 " firings, %.1f ms)",
               rank, id, js.actors, js.firings, js.run_ms);
    else
      log_line(o, "sluice daemon %d: job %" PRIu64 ": failed: %s: %s", rank, id,
               sl_status_str(st), msg);
    if (rst != SL_OK && sl__cp_client_health(o->cp) != SL_OK) {
      log_line(o, "sluice daemon %d: lost the master: %s", rank,
               sl_last_error());
      session_free(kept);
      return SL_ECOMM;
    }
    served++;
    id++;
  }
  session_free(kept);
  return SL_OK;
}

sl_status sl__daemon_run(const sl__daemon_run_opts *o) {
  const char *listen = o->listen && o->listen[0] ? o->listen : "127.0.0.1";
  if (!o->token || !o->token[0])
    return sl__fail(SL_EAUTH, "daemon: no token (--token-file or "
                              "SLUICE_TOKEN)");
  char mhost[256], addr[300];
  uint16_t mport = 0;
  SL_CHECK(sl__daemon_split_addr(o->master, mhost, sizeof mhost, &mport));
  sl__cp_server *srv = NULL;
  sl__dp_endpoint *ep = NULL;
  sl__net_coll *nc = NULL;
  sl__cp_client *cp = NULL;
  sl_status st = SL_OK;
  if (o->host_master) {
    snprintf(addr, sizeof addr, strchr(listen, ':') ? "[%s]:%u" : "%s:%u",
             listen, (unsigned)mport);
    sl__cp_server_opts so;
    memset(&so, 0, sizeof so);
    so.listen = addr;
    so.nnodes = o->nnodes;
    so.token = o->token;
    so.heartbeat_timeout_ms = o->heartbeat_timeout_ms;
    SL_CHECK_GOTO(sl__cp_server_create(&so, &srv), st, out);
  }
  sl__dp_config dc;
  memset(&dc, 0, sizeof dc);
  dc.node = (uint32_t)o->rank;
  dc.nnodes = (uint32_t)o->nnodes + 1;
  dc.listen_host = listen;
  dc.token = o->token;
  dc.token_len = strlen(o->token);
  SL_CHECK_GOTO(sl__dp_endpoint_create(&dc, &ep), st, out);
  snprintf(addr, sizeof addr, strchr(listen, ':') ? "[%s]:%u" : "%s:%u", listen,
           (unsigned)sl__dp_endpoint_port(ep));
  sl__cp_client_opts co;
  memset(&co, 0, sizeof co);
  co.master = o->master;
  co.token = o->token;
  co.role = SL__CP_NODE;
  co.node_rank = o->rank;
  co.devices = o->devices;
  co.data_addr = addr;
  co.nnodes = o->nnodes;
  /* A restarted node waits for the master to declare its predecessor
   * lost (the rank is held until the heartbeat timeout). */
  for (int tries = 0;; tries++) {
    st = sl__cp_client_connect(&co, 60000, &cp);
    if (st != SL_ESTATE || tries >= 120 || (o->stop && atomic_load(o->stop)))
      break;
    if (tries == 0)
      log_line(&(sl__daemon_opts){NULL, NULL, NULL, NULL, 0, o->log},
               "sluice daemon %d: %s; retrying", o->rank, sl_last_error());
    usleep(500 * 1000);
  }
  if (st != SL_OK) goto out;
  SL_CHECK_GOTO(sl__net_coll_create(ep, NULL, &nc), st, out);
  sl__daemon_opts so2 = {cp, ep, nc, o->stop, o->max_jobs, o->log};
  char cpus[256];
  sl__cpu_list_text(cpus, sizeof cpus);
  log_line(&so2,
           "sluice daemon %d: node %d of %d, data plane %s, master %s%s, "
           "CPUs %s",
           o->rank, o->rank, o->nnodes, addr, o->master,
           o->host_master ? " (hosted here)" : "", cpus);
  st = sl__daemon_serve(&so2);
out:
  if (st != SL_OK) {
    char msg[1400];
    snprintf(msg, sizeof msg, "%s", sl_last_error());
    sl__cp_client_destroy(cp);
    sl__dp_endpoint_destroy(ep);
    sl__net_coll_destroy(nc); /* after the endpoint: no hook can run */
    sl__cp_server_destroy(srv);
    return sl__fail(st, "%s", msg);
  }
  sl__cp_client_destroy(cp);
  sl__dp_endpoint_destroy(ep);
  sl__net_coll_destroy(nc);
  sl__cp_server_destroy(srv);
  return SL_OK;
}
