/* The remote session (docs/cluster.md): with SLUICE_MASTER set, the program
 * joins the cluster as a client, submits its plan (no graph: the plan
 * says all a daemon runs) to every daemon, and takes part in the job as
 * the driver node (data-plane rank nnodes): its actors are the tick
 * sources, the feeds and the fetches, so ticks and fed shards go out and
 * fetched shards come in as plain registers over the data plane, and steps run
 * exactly as in the embedded session. A watcher thread waits for the program's
 * share of the job; a failure anywhere (a kernel on a daemon, a lost node) ends
 * it with the node's or actor's name, and the job is stopped on the control
 * plane so every daemon gives up and serves the next job. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "job_blob.h"
#include "session_int.h"

extern char **environ;

#define CONNECT_MS 60000u
#define CALL_MS 30000u
#define READY_MS 120000u
/* sl__remote_end: how often it looks whether every tick source parked. */
#define TICK_POLL_NS 1000000ull

struct sl__remote {
  sl_session *s;
  sl__cp_client *cp;
  pthread_t monitor;
  bool monitor_started;
  atomic_bool done;
  sl__dp_endpoint *ep;
  uint64_t job;
  bool submitted, started, attached;
  pthread_t watcher;
  bool watcher_started, joined;
  sl_status job_st;
  char job_msg[1400];
  int64_t requests; /* requests to the daemons in this job */
};

bool sl__remote_wanted(const sl_session_config *c) {
  if (c->kind == SL_SESSION_REMOTE || (c->master && c->master[0])) return true;
  const char *m = getenv("SLUICE_MASTER");
  return m && m[0];
}

/* Completes the ticks parked for steps never released with st: an
 * aborted job waits for its deferred firings. A tick source may be inside
 * its act as the job aborts (it checked the job's stop flag just before):
 * `ending`, set before any tick's lock is taken, keeps it from parking a
 * firing after this, which nobody would complete (the monitor releases
 * once, the job's ABORT goes out once) and the watcher would wait for
 * forever. */
static void release_parked(sl_session *s, sl_status st) {
  atomic_store(&s->ending, true);
  for (int32_t i = 0; i < s->n_ticks; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_lock(&d->lock);
    sl_completion *c = d->parked;
    d->parked = NULL;
    pthread_mutex_unlock(&d->lock);
    if (c) sl_completion_done(c, st);
  }
}

/* The data plane's transport, watching for the program's own ABORT going
 * out (a lost peer, a failed feed or fetch). */
static sl_status rm_send(void *ctx, uint32_t node, const sl_msg *m,
                         const void *payload, size_t nbytes) {
  sl_session *s = ctx;
  if (m->kind == SL_MSG_CMD && m->cmd == SL_CMD_ABORT)
    release_parked(s, SL_EABORTED);
  return sl__dp_endpoint_send(s->rm->ep, node, m, payload, nbytes);
}

static bool rm_quiescent(void *ctx, uint32_t self, uint64_t *progress) {
  sl_session *s = ctx;
  return sl__dp_endpoint_quiescent(s->rm->ep, self, progress);
}

static const sl_transport_vtable rm_transport = {rm_send, rm_quiescent};

/* Follows the job on the control plane: a node that failed it or was
 * lost ends the program's share at once, whatever the data plane saw. */
static void *monitor_main(void *arg) {
  sl__remote *rm = arg;
  while (!atomic_load(&rm->done)) {
    sl__cp_job_info info;
    sl_status st =
        sl__cp_job_status(rm->cp, rm->job, SL__CP_JOB_SUCCEEDED, 500, &info);
    if (st != SL_OK) {
      if (st != SL_ETIMEOUT && sl__cp_client_health(rm->cp) != SL_OK) {
        sl_job_abort_msg(rm->s->job, SL_ECOMM,
                         "remote session: lost the master");
        release_parked(rm->s, SL_ECOMM);
        return NULL;
      }
      continue;
    }
    if (info.state == SL__CP_JOB_FAILED || info.state == SL__CP_JOB_STOPPED) {
      sl_status why = info.status != SL_OK ? info.status : SL_EABORTED;
      sl__session_wait_held_abort(rm->s, &rm->done);
      sl__session_abort_collectives(rm->s, why, info.message);
      sl_job_abort_msg(rm->s->job, why, info.message);
      release_parked(rm->s, why);
      return NULL;
    }
    if (info.state == SL__CP_JOB_SUCCEEDED) return NULL;
  }
  return NULL;
}

static void *watcher_main(void *arg) {
  sl_session *s = arg;
  sl__remote *rm = s->rm;
  sl_status st = sl_job_wait(s->job);
  snprintf(rm->job_msg, sizeof rm->job_msg, "%s",
           st == SL_OK ? "" : sl_last_error());
  /* A node that failed before its share ran (creating the job's device
   * communicators) reports only to the control plane; the other nodes'
   * aborts then reach this job without a reason ("aborted by another
   * node"). A failure the control plane has already recorded came first:
   * its report is the cause. */
  sl__cp_job_info info;
  /* A failure that began on a daemon: its report names the cause (this
   * program's part may not know the actor); wait a while for it. */
  int64_t origin = st != SL_OK ? sl_job_failure_origin(s->job) : -1;
  bool follow = origin >= 0 && origin != (int64_t)s->self_node;
  if (st != SL_OK &&
      sl__cp_job_status(
          rm->cp, rm->job, follow ? SL__CP_JOB_SUCCEEDED : SL__CP_JOB_NONE,
          follow ? SL__DAEMON_FOLLOW_MS : CALL_MS, &info) == SL_OK &&
      info.state == SL__CP_JOB_FAILED && info.message[0]) {
    st = info.status != SL_OK ? info.status : st;
    snprintf(rm->job_msg, sizeof rm->job_msg, "%s", info.message);
  }
  rm->job_st = st;
  if (st != SL_OK) {
    /* Every daemon gives up at once (their monitors see the stop). */
    sl__cp_job_stop(rm->cp, rm->job, rm->job_msg, CALL_MS);
    sl__session_fail(s, st);
  }
  return NULL;
}

/* "host:port" of the program's data-plane endpoint. */
static void self_addr(const char *bind, uint16_t port, char *buf, size_t n) {
  if (strchr(bind, ':'))
    snprintf(buf, n, "[%s]:%u", bind, (unsigned)port);
  else
    snprintf(buf, n, "%s:%u", bind, (unsigned)port);
}

static uint64_t next_job(sl__cp_client *cp) {
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
  return last + 1;
}

static sl_status connect_cluster(sl_session *s, sl__cp_env *env) {
  sl__remote *rm = s->rm;
  SL_CHECK(sl__cp_env_parse_given(environ, s->cfg.master, s->cfg.token, env));
  sl__cp_client_opts co;
  memset(&co, 0, sizeof co);
  co.master = env->master;
  co.token = env->token;
  co.role = SL__CP_CLIENT;
  co.node_rank = SL__CP_RANK_ANY;
  co.wait_all = true;
  SL_CHECK(sl__cp_client_connect(&co, CONNECT_MS, &rm->cp));
  int nn = sl__cp_client_nnodes(rm->cp);
  if (s->pp->machines > (uint32_t)nn)
    return sl__fail(SL_EUNSUPPORTED,
                    "the graph is placed on %u nodes; the cluster at %s has "
                    "%d",
                    s->pp->machines, env->master, nn);
  sl__dp_config dc;
  memset(&dc, 0, sizeof dc);
  dc.node = (uint32_t)nn;
  dc.nnodes = (uint32_t)nn + 1;
  dc.listen_host = env->bind;
  dc.token = env->token ? env->token : "";
  dc.token_len = strlen(dc.token);
  if (!dc.token_len)
    return sl__fail(SL_EAUTH, "remote session: no token (set SLUICE_TOKEN "
                              "or the session config's token)");
  return sl__dp_endpoint_create(&dc, &rm->ep);
}

static sl_status submit(sl_session *s, const sl__cp_env *env) {
  sl__remote *rm = s->rm;
  int nn = sl__cp_client_nnodes(rm->cp);
  uint8_t *plan = NULL;
  char *starts = NULL;
  size_t pl = 0;
  char addr[300];
  self_addr(env->bind, sl__dp_endpoint_port(rm->ep), addr, sizeof addr);
  rm->job = next_job(rm->cp);
  sl_status st = SL_OK;
  /* A .npy source travels as its path: the daemons open the same file. */
  for (int32_t i = 0; i < s->pp->n_nodes && st == SL_OK; i++) {
    const sl__pnode *n = &s->pp->nodes[i];
    if (strcmp(n->op, "npy_read") == 0 && !n->file)
      st = sl__fail(SL_EIO,
                    "remote session: node '%s': its .npy file's path no "
                    "longer resolves, so the daemons cannot open it",
                    n->name);
  }
  if (st == SL_OK) st = sl__handoff_starts(s, rm->cp, rm->job, &starts);
  /* Each daemon gets its machine's part of the plan, and nothing else. */
  uint8_t **blobs = sl__calloc((size_t)nn, sizeof *blobs);
  size_t *lens = sl__calloc((size_t)nn, sizeof *lens);
  if (st == SL_OK && (!blobs || !lens)) st = SL_ENOMEM;
  for (int r = 0; st == SL_OK && r < nn; r++) {
    sl__pplan *part = NULL;
    st = sl__pplan_part(s->whole, r, &part);
    if (st == SL_OK) st = sl__pplan_pack(part, &plan, &pl);
    sl__pplan_destroy(part);
    sl__job_blob b = {.driver_addr = addr,
                      .nnodes = (uint32_t)nn,
                      .hang_timeout_ms = s->cfg.hang_timeout_ms,
                      .plan = plan,
                      .plan_len = pl,
                      .trace = s->trace_path != NULL,
                      .base_step = s->base,
                      .starts = starts,
                      .cpu_threads = s->cfg.cpu_threads,
                      .cpu_pin = s->cfg.cpu_pin,
                      .spin_us = s->cfg.spin_us};
    if (st == SL_OK) st = sl__job_blob_pack(&b, &blobs[r], &lens[r]);
    sl__free(plan);
    plan = NULL;
  }
  if (st == SL_OK)
    st = sl__cp_plan_submit(rm->cp, rm->job, nn, (const uint8_t **)blobs, lens,
                            CALL_MS);
  if (st == SL_OK) {
    rm->submitted = true;
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, rm->job);
    st = sl__cp_kv_put(rm->cp, SL__DAEMON_LAST_JOB_KEY, v, strlen(v), CALL_MS);
  }
  for (int r = 0; blobs && r < nn; r++)
    sl__free(blobs[r]);
  sl__free(blobs);
  sl__free(lens);
  sl__free(starts);
  return st;
}

/* Every daemon attached its job (or says why it could not). */
static sl_status wait_ready(sl_session *s) {
  sl__remote *rm = s->rm;
  int nn = sl__cp_client_nnodes(rm->cp);
  for (int r = 0; r < nn; r++) {
    char key[128];
    sl__daemon_ready_key(rm->job, r, key, sizeof key);
    uint8_t *v = NULL;
    size_t n = 0;
    sl_status st = sl__cp_kv_get(rm->cp, key, true, READY_MS, &v, &n);
    if (st != SL_OK) {
      char why[1024];
      snprintf(why, sizeof why, "%s", sl_last_error());
      return sl__fail(st, "node %d did not take job %" PRIu64 ": %s", r,
                      rm->job, why);
    }
    if (n > 0 && v[0] == 'E') {
      /* "E", the daemon's status, a space, its message. */
      size_t k = 1;
      int code = 0;
      while (k < n && k < 4 && v[k] >= '0' && v[k] <= '9')
        code = code * 10 + (v[k++] - '0');
      if (k < n && v[k] == ' ') k++;
      st = code > SL_OK && code <= SL_ENOTFOUND ? (sl_status)code : SL_EINVAL;
      st = sl__fail(st, "node %d refused job %" PRIu64 ": %.*s", r, rm->job,
                    (int)(n - k), (const char *)v + k);
      sl__free(v);
      return st;
    }
    sl__free(v);
  }
  return SL_OK;
}

sl_status sl__remote_start(sl_session *s) {
  sl__remote *rm;
  if (SL_NEW(rm) != SL_OK) return SL_ENOMEM;
  s->rm = rm;
  rm->s = s;
  atomic_init(&rm->done, false);
  s->remote = true;
  sl__cp_env env;
  memset(&env, 0, sizeof env);
  sl_status st = connect_cluster(s, &env);
  if (st != SL_OK) goto out;
  int nn = sl__cp_client_nnodes(rm->cp);
  s->driver = (uint32_t)nn;
  s->self_node = (uint32_t)nn;
  /* The program runs its part: the ticks, feeds and fetches. */
  if (!s->whole) {
    s->whole = s->pp;
    s->pp = NULL;
    SL_CHECK_GOTO(sl__pplan_part(s->whole, -1, &s->pp), st, out);
  }
  SL_CHECK_GOTO(sl__session_build(s), st, out);
  SL_CHECK_GOTO(submit(s, &env), st, out);
  SL_CHECK_GOTO(wait_ready(s), st, out);
  /* The table of now: every daemon has taken the job (one restarted since
   * this program joined has a new address). */
  SL_CHECK_GOTO(sl__daemon_set_peers(rm->cp, rm->ep), st, out);
  sl_job_config jc = sl_job_config_default();
  jc.node = s->self_node;
  jc.hang_timeout_ms = s->cfg.hang_timeout_ms;
  /* This share's trace goes to "<stem>.node<nnodes><ext>" first;
   * sl__remote_traces merges it with the daemons'. */
  jc.trace_path = s->trace_path ? s->trace_path : "";
  jc.device_name = sl__dev_name; /* "cuda:1" in messages, traces */
  jc.transport = (sl_transport){&rm_transport, s};
  sl__session_job_memory(s, &jc);
  sl__session_job_spin(s, &jc);
  SL_CHECK_GOTO(sl_job_create(s->plan, &jc, &s->job), st, out);
  SL_CHECK_GOTO(
      sl__dp_endpoint_attach_hooked(rm->ep, s->job, sl__session_hold_abort, s),
      st, out);
  rm->attached = true;
  /* The daemons start their shares when the job is RUNNING: after this
   * attach, so nothing they send first is dropped. */
  SL_CHECK_GOTO(sl__cp_job_start(rm->cp, rm->job, CALL_MS), st, out);
  rm->started = true;
  SL_CHECK_GOTO(sl_job_start(s->job), st, out);
  if (pthread_create(&rm->watcher, NULL, watcher_main, s) != 0) {
    sl_job_abort(s->job, SL_EINTERNAL);
    release_parked(s, SL_EINTERNAL);
    sl_job_wait(s->job);
    st = sl__fail(SL_EINTERNAL, "remote session: no watcher thread");
    goto out;
  }
  rm->watcher_started = true;
  if (pthread_create(&rm->monitor, NULL, monitor_main, rm) == 0)
    rm->monitor_started = true;
out:
  /* Every daemon took the written values, or will not. */
  if (rm->submitted) sl__handoff_forget(s, rm->cp, rm->job);
  if (st != SL_OK && rm->submitted && rm->cp) {
    char why[1400];
    snprintf(why, sizeof why, "%s", sl_last_error());
    sl__cp_job_stop(rm->cp, rm->job, why, CALL_MS);
    sl__fail(st, "%s", why);
  }
  sl__cp_env_free(&env);
  return st;
}

/* ---- requests between steps (daemon_requests.c) ---------------------------
 */

/* How long the program waits for a node's answer (a save of a large
 * model included). */
#define ANSWER_MS 1800000u

uint64_t sl__remote_job(const sl_session *s) { return s->rm ? s->rm->job : 0; }

sl_status sl__remote_ask(sl_session *s, const char *req, int64_t *seq) {
  sl__remote *rm = s->rm;
  *seq = 0;
  char key[SL__CP_MAX_NAME];
  sl__daemon_req_key(rm->job, rm->requests + 1, key, sizeof key);
  /* The daemons take requests in order: a number is used once it is out. */
  SL_CHECK(sl__cp_kv_put(rm->cp, key, req, strlen(req), CALL_MS));
  *seq = ++rm->requests;
  return SL_OK;
}

sl_status sl__remote_answer(sl_session *s, int64_t seq, int rank, char *ans,
                            size_t n) {
  sl__remote *rm = s->rm;
  char key[SL__CP_MAX_NAME];
  sl__daemon_ans_key(rm->job, seq, rank, -1, key, sizeof key);
  uint8_t *v = NULL;
  size_t len = 0;
  sl_status st = SL_ETIMEOUT;
  for (uint32_t waited = 0; waited < ANSWER_MS && st == SL_ETIMEOUT;
       waited += 1000) {
    if (atomic_load(&s->failed) != SL_OK)
      return sl__fail(SL_EABORTED, "node %d: the job failed before it answered",
                      rank);
    st = sl__cp_kv_get(rm->cp, key, true, 1000, &v, &len);
  }
  if (st != SL_OK)
    return sl__fail(st, "node %d did not answer: %s", rank, sl_last_error());
  size_t k = len < n - 1 ? len : n - 1;
  memcpy(ans, v, k);
  ans[k] = '\0';
  sl__free(v);
  if (ans[0] == 'E') return sl__fail(SL_EIO, "%s", ans + 1);
  return SL_OK;
}

sl_status sl__remote_answer_data(sl_session *s, int64_t seq, int rank,
                                 void *buf, size_t bytes) {
  char prefix[SL__CP_MAX_NAME];
  sl__daemon_ans_key(s->rm->job, seq, rank, -1, prefix, sizeof prefix);
  sl_status st = sl__kv_get_chunks(s->rm->cp, prefix, buf, bytes, CALL_MS);
  sl__kv_empty_chunks(s->rm->cp, prefix, bytes);
  return st;
}

void sl__remote_forget(sl_session *s, int64_t seq) {
  sl__remote *rm = s->rm;
  char key[SL__CP_MAX_NAME];
  for (uint32_t r = 0; r < s->driver; r++) {
    sl__daemon_ans_key(rm->job, seq, (int)r, -1, key, sizeof key);
    sl__cp_kv_put(rm->cp, key, "", 0, CALL_MS);
  }
  sl__daemon_req_key(rm->job, seq, key, sizeof key);
  sl__cp_kv_put(rm->cp, key, "", 0, CALL_MS);
}

sl_status sl__remote_hold(sl_session *s, int64_t version) {
  char req[64];
  snprintf(req, sizeof req, "hold %lld", (long long)version);
  int64_t seq = 0;
  SL_CHECK(sl__remote_ask(s, req, &seq));
  sl_status st = SL_OK;
  for (uint32_t r = 0; r < s->driver; r++) {
    char ans[1400];
    sl_status rs = sl__remote_answer(s, seq, (int)r, ans, sizeof ans);
    if (st == SL_OK) st = rs; /* every answer, so none is left behind */
  }
  sl__remote_forget(s, seq);
  return st;
}

void sl__remote_pump(sl_session *s) {
  int64_t rel = atomic_load(&s->released);
  for (int32_t i = 0; i < s->n_ticks; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_lock(&d->lock);
    sl_completion *c = NULL;
    if (d->parked && d->sent < rel) {
      c = d->parked;
      d->parked = NULL;
    }
    pthread_mutex_unlock(&d->lock);
    if (c) sl_completion_done(c, SL_OK);
  }
}

/* Whether every tick source has parked its firing for the first step not
 * released (a source fires the released steps, then parks the next). */
static bool ticks_all_parked(sl_session *s) {
  bool all = true;
  for (int32_t i = 0; i < s->n_ticks && all; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_lock(&d->lock);
    all = d->parked != NULL;
    pthread_mutex_unlock(&d->lock);
  }
  return all;
}

void sl__remote_end(sl_session *s) {
  if (!s->job) return;
  /* Every device must run the same steps: a collective whose member's
   * device stopped a step earlier waits for it forever (the daemon, then
   * the program, never finish). A parked tick still goes out when
   * completed (the runtime cannot drop a deferred source firing), and a
   * source that is not parked, waiting for a register to come back, would
   * see the stop first, or fire freely before it once `ending` is set. So
   * wait until every source has parked its firing for the first step not
   * released, then stop them all and complete those: each sends exactly
   * one tick more than released, the daemons run that one step on every
   * device, and nobody reads it. Each source gets there as the daemons
   * finish the released steps and return its registers; nothing signals
   * that here, hence the short timed waits (a failure wakes them at once,
   * and an abort completes the parked ticks itself and sets `ending`). */
  for (;;) {
    if (atomic_load(&s->ending) || ticks_all_parked(s)) break;
    pthread_mutex_lock(&s->lock);
    if (atomic_load(&s->failed) == SL_OK)
      sl__cond_wait_ns(&s->cond, &s->lock, TICK_POLL_NS);
    pthread_mutex_unlock(&s->lock);
    if (atomic_load(&s->failed) != SL_OK) break;
  }
  /* STOP goes into each source's queue ahead of its completion, so the
   * source stops right after the parked firing instead of firing again. */
  atomic_store(&s->ending, true);
  sl_job_stop(s->job);
  for (int32_t i = 0; i < s->n_ticks; i++) {
    drv_tick *d = &s->ticks[i];
    pthread_mutex_lock(&d->lock);
    sl_completion *c = d->parked;
    d->parked = NULL;
    pthread_mutex_unlock(&d->lock);
    if (c) sl_completion_done(c, SL_OK);
  }
}

sl_status sl__remote_wait(sl_session *s) {
  sl__remote *rm = s->rm;
  if (!rm->joined && rm->watcher_started) {
    pthread_join(rm->watcher, NULL);
    rm->joined = true;
    atomic_store(&rm->done, true);
    if (rm->monitor_started) pthread_join(rm->monitor, NULL);
    rm->monitor_started = false;
    if (rm->job_st == SL_OK) {
      /* The program's share ended; the daemons' reports say the rest. */
      sl__cp_job_info info;
      sl_status st = sl__cp_job_status(rm->cp, rm->job, SL__CP_JOB_SUCCEEDED,
                                       CALL_MS, &info);
      if (st != SL_OK) {
        rm->job_st = st;
        snprintf(rm->job_msg, sizeof rm->job_msg, "job %" PRIu64 ": %s",
                 rm->job, sl_last_error());
      } else if (info.state != SL__CP_JOB_SUCCEEDED) {
        rm->job_st = info.status != SL_OK ? info.status : SL_EABORTED;
        snprintf(rm->job_msg, sizeof rm->job_msg, "%s", info.message);
      }
    }
    if (rm->attached) sl__dp_endpoint_detach(rm->ep);
    rm->attached = false;
  }
  if (rm->job_st != SL_OK) return sl__fail(rm->job_st, "%s", rm->job_msg);
  return SL_OK;
}

/* The events of one node's trace: what is between its first '[' and its
 * last ']' (actor/trace.c writes {"traceEvents":[...],...}). */
static bool trace_events(const uint8_t *t, size_t n, const uint8_t **at,
                         size_t *len) {
  const uint8_t *a = memchr(t, '[', n), *b = NULL;
  for (size_t i = n; i > 0 && !b; i--)
    if (t[i - 1] == ']') b = t + i - 1;
  if (!a || !b || b <= a) return false;
  *at = a + 1;
  *len = (size_t)(b - a - 1);
  return true;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *d = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (d = sl__malloc((size_t)n + 1)) &&
      fread(d, 1, (size_t)n, f) != (size_t)n) {
    sl__free(d);
    d = NULL;
  }
  fclose(f);
  *len = d ? (size_t)n : 0;
  return d;
}

sl_status sl__remote_traces(sl_session *s) {
  sl__remote *rm = s->rm;
  if (!s->trace_path || !rm || !rm->cp || !s->job) return SL_OK;
  int nn = sl__cp_client_nnodes(rm->cp);
  uint8_t **part = sl__calloc((size_t)nn + 1, sizeof *part);
  size_t *plen = sl__calloc((size_t)nn + 1, sizeof *plen);
  if (!part || !plen) {
    sl__free(part);
    sl__free(plen);
    return SL_ENOMEM;
  }
  /* Node r's trace from the store: a daemon puts it there before it
   * reports the job, and the wait saw every report of a job that
   * succeeded, so nothing needs waiting for (a node lost in a failed job
   * has none); the program's own share (node nn) from its job's file. */
  for (int r = 0; r < nn && rm->submitted; r++) {
    char key[128];
    sl__daemon_trace_key(rm->job, r, key, sizeof key);
    if (sl__cp_kv_get(rm->cp, key, false, CALL_MS, &part[r], &plen[r]) !=
        SL_OK) {
      SL_WARN("session: no trace from node %d: %s", r, sl_last_error());
      continue;
    }
    /* the store keeps no copy of it */
    sl__cp_kv_put(rm->cp, key, "", 0, CALL_MS);
    if (plen[r] && part[r][0] == 'E') {
      SL_WARN("session: no trace from node %d: %.*s", r, (int)plen[r] - 1,
              (const char *)part[r] + 1);
      plen[r] = 0;
    }
  }
  const char *own = sl_job_trace_path(s->job);
  if (own) {
    part[nn] = read_file(own, &plen[nn]);
    remove(own);
  }
  sl_status st = SL_OK;
  FILE *f = fopen(s->trace_path, "w");
  if (!f) {
    st = sl__fail(SL_EIO, "trace '%s': %s", s->trace_path, strerror(errno));
  } else {
    /* One file, one process per node (every event carries its node as
     * pid); each node's times count from its own start of the job. */
    fputs("{\"traceEvents\":[", f);
    bool first = true;
    for (int r = 0; r <= nn; r++) {
      const uint8_t *ev;
      size_t len;
      if (!part[r] || !trace_events(part[r], plen[r], &ev, &len)) continue;
      if (!first) fputc(',', f);
      fwrite(ev, 1, len, f);
      first = false;
    }
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
      st = sl__fail(SL_EIO, "trace '%s': write failed", s->trace_path);
  }
  for (int r = 0; r <= nn; r++)
    sl__free(part[r]);
  sl__free(part);
  sl__free(plen);
  return st;
}

void sl__remote_destroy(sl_session *s) {
  sl__remote *rm = s->rm;
  if (!rm) return;
  if (rm->watcher_started && !rm->joined) {
    sl_job_abort(s->job, SL_EABORTED);
    release_parked(s, SL_EABORTED);
    pthread_join(rm->watcher, NULL);
    rm->joined = true;
  }
  atomic_store(&rm->done, true);
  if (rm->monitor_started) pthread_join(rm->monitor, NULL);
  rm->monitor_started = false;
  if (rm->attached) sl__dp_endpoint_detach(rm->ep);
  rm->attached = false;
}

sl_status sl__remote_can_roll_back(sl_session *s, int64_t version) {
  sl__remote *rm = s->rm;
  if (s->final == SL_ECOMM) return sl__fail(SL_ECOMM, "a node was lost");
  for (uint32_t r = 0; r < s->driver; r++) {
    char key[SL__CP_MAX_NAME];
    sl__daemon_versions_key(rm->job, (int)r, key, sizeof key);
    uint8_t *v = NULL;
    size_t n = 0;
    SL_CHECK(sl__cp_kv_get(rm->cp, key, true, CALL_MS, &v, &n));
    char list[256];
    size_t k = n < sizeof list - 1 ? n : sizeof list - 1;
    memcpy(list, v, k);
    list[k] = '\0';
    sl__free(v);
    sl__cp_kv_put(rm->cp, key, "", 0, CALL_MS);
    bool held = false;
    char *save = NULL, has[160] = "";
    size_t hn = 0;
    for (char *t = strtok_r(list, " ", &save); t;
         t = strtok_r(NULL, " ", &save)) {
      if (*t == '-') continue;
      int64_t has_v = strtoll(t, NULL, 10);
      held = held || has_v == version;
      if (hn < sizeof has - 24)
        hn += (size_t)snprintf(has + hn, sizeof has - hn, "%s%lld",
                               hn ? ", " : "", (long long)(s->base + has_v));
    }
    /* Which versions the node does hold says how far its job got. */
    if (!held)
      return sl__fail(SL_ESTATE,
                      "node %u's variables no longer hold their values before "
                      "step %lld (%s%s): an update was written or under way",
                      r, (long long)(s->base + version),
                      hn ? "they hold those before step " : "",
                      hn ? has : "no step's values are whole there");
  }
  return SL_OK;
}

void sl__remote_release(sl_session *s) {
  sl__remote *rm = s->rm;
  if (!rm || !rm->submitted) return;
  char key[SL__CP_MAX_NAME];
  sl__daemon_release_key(rm->job, key, sizeof key);
  if (sl__cp_kv_put(rm->cp, key, "1", 1, CALL_MS) != SL_OK)
    SL_WARN("remote session: the daemons keep job %" PRIu64
            "'s variables until the next job: %s",
            rm->job, sl_last_error());
}

void sl__remote_free(sl_session *s) {
  sl__remote *rm = s->rm;
  if (!rm) return;
  sl__dp_endpoint_destroy(rm->ep);
  sl__cp_client_destroy(rm->cp);
  sl__free(rm);
  s->rm = NULL;
}
