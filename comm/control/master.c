/* The master's state machine: members (nodes by rank, clients), the auth
 * checks of every call, heartbeats and loss, dispatch, and parked calls.
 *
 * All of it runs on the server's completion-queue thread, one call at a
 * time, so the state needs no locks (only the statistics, which other
 * threads read, have one). A blocking call (KvGet, Members with wait_all,
 * Barrier, PlanFetch, JobStatus, ResultGet) that cannot be answered yet is
 * parked on a wait list; whatever changes what it waits on re-runs it
 * (sl__cp_wake), and the tick answers it SL_ETIMEOUT at its deadline if the
 * caller has not given up first. A parked call holds no thread. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cp_int.h"

#define NONCE_LIFETIME_NS (120ull * 1000000000ull)

void sl__cp_master_count(sl__cp_master *m, uint64_t *field, int64_t add) {
  pthread_mutex_lock(&m->stats_lock);
  *field += (uint64_t)add;
  pthread_mutex_unlock(&m->stats_lock);
}

static void update_live(sl__cp_master *m) {
  int live = 0;
  for (int r = 0; r < m->nnodes; r++)
    live += m->nodes[r] && m->nodes[r]->state == SL__CP_MEMBER_LIVE;
  pthread_mutex_lock(&m->stats_lock);
  m->stats.live_nodes = live;
  pthread_mutex_unlock(&m->stats_lock);
}

sl_status sl__cp_master_init(sl__cp_master *m, int nnodes, const char *token,
                             uint32_t timeout_ms, size_t max_message) {
  memset(m, 0, sizeof *m);
  m->nnodes = nnodes;
  m->timeout_ms = timeout_ms;
  /* Four beats per timeout: one late or lost beat is not a loss. */
  m->heartbeat_ms = timeout_ms / 4 ? timeout_ms / 4 : 1;
  m->max_message = max_message;
  m->next_member = 1;
  m->token = sl__strdup(token);
  m->nodes = sl__calloc((size_t)nnodes, sizeof *m->nodes);
  if (!m->token || !m->nodes) {
    sl__free(m->token);
    sl__free(m->nodes);
    return SL_ENOMEM;
  }
  sl__cp_kv_init(&m->kv);
  pthread_mutex_init(&m->stats_lock, NULL);
  return SL_OK;
}

static void member_free(cp_member *x) {
  if (!x) return;
  explicit_bzero(x->key, sizeof x->key);
  sl__free(x->devices);
  sl__free(x->data_addr);
  sl__free(x->host);
  sl__free(x->version);
  sl__free(x);
}

void sl__cp_master_free(sl__cp_master *m) {
  for (int r = 0; r < m->nnodes; r++)
    member_free(m->nodes[r]);
  while (m->clients) {
    cp_member *x = m->clients;
    m->clients = x->next;
    member_free(x);
  }
  sl__free(m->nodes);
  if (m->token) explicit_bzero(m->token, strlen(m->token));
  sl__free(m->token);
  sl__cp_kv_free(&m->kv);
  sl__cp_barriers_free(m);
  sl__cp_jobs_free(m);
  pthread_mutex_destroy(&m->stats_lock);
}

static cp_member *find_member(sl__cp_master *m, uint32_t id) {
  for (int r = 0; r < m->nnodes; r++)
    if (m->nodes[r] && m->nodes[r]->id == id) return m->nodes[r];
  for (cp_member *x = m->clients; x; x = x->next)
    if (x->id == id) return x;
  return NULL;
}

static const char *who_str(const cp_member *x, char *buf, size_t n) {
  if (x->role == SL__CP_NODE)
    snprintf(buf, n, "node %d", x->rank);
  else
    snprintf(buf, n, "client %u", (unsigned)x->id);
  return buf;
}

/* ---- parking ----------------------------------------------------------- */

void sl__cp_park(sl__cp_master *m, sl__cp_call *c, int wait) {
  SL_ASSERT(c->wait < 0);
  c->wait = wait;
  c->wprev = NULL;
  c->wnext = m->waits[wait];
  if (c->wnext) c->wnext->wprev = c;
  m->waits[wait] = c;
}

void sl__cp_unpark(sl__cp_master *m, sl__cp_call *c) {
  if (c->wait < 0) return;
  if (c->wprev)
    c->wprev->wnext = c->wnext;
  else
    m->waits[c->wait] = c->wnext;
  if (c->wnext) c->wnext->wprev = c->wprev;
  c->wnext = c->wprev = NULL;
  c->wait = -1;
}

static bool do_members(sl__cp_master *m, sl__cp_call *c);

/* Runs a parked call's method again; true when it was answered. */
static bool retry(sl__cp_master *m, sl__cp_call *c) {
  switch (c->method) {
  case SL__CP_MEMBERS: return do_members(m, c);
  case SL__CP_KV_GET: return sl__cp_do_kv_get(m, c);
  case SL__CP_BARRIER: return sl__cp_try_barrier(m, c);
  case SL__CP_PLAN_FETCH: return sl__cp_do_plan_fetch(m, c);
  case SL__CP_JOB_STATUS: return sl__cp_do_job_status(m, c);
  case SL__CP_RESULT_GET: return sl__cp_do_result_get(m, c);
  default: SL_ASSERT(!"parked call of a non-blocking method"); return true;
  }
}

void sl__cp_wake(sl__cp_master *m, int wait) {
  sl__cp_call *next;
  for (sl__cp_call *c = m->waits[wait]; c; c = next) {
    next = c->wnext;
    /* An answer unparks c (sl__cp_call_reply / _fail); answering never
     * touches another parked call, so next stays valid. */
    retry(m, c);
  }
}

void sl__cp_master_cancel(sl__cp_master *m, sl__cp_call *c) {
  if (c->wait < 0) return;
  if (c->method == SL__CP_BARRIER) sl__cp_barrier_cancel(m, c);
  sl__cp_unpark(m, c);
}

void sl__cp_master_shutdown(sl__cp_master *m) {
  for (int w = 0; w < CP_N_WAITS; w++)
    while (m->waits[w])
      sl__cp_call_fail(m->waits[w], SL_ECOMM, "%s: the master is shutting down",
                       sl__cp_methods[m->waits[w]->method].name);
}

/* ---- loss -------------------------------------------------------------- */

static void member_gone(sl__cp_master *m, cp_member *x,
                        sl__cp_member_state state, const char *why) {
  x->state = state;
  sl__cp_job_member_gone(m, x, why);
  sl__cp_store_member_gone(m, x, why);
  if (x->role == SL__CP_CLIENT) {
    for (cp_member **p = &m->clients; *p; p = &(*p)->next)
      if (*p == x) {
        *p = x->next;
        break;
      }
    member_free(x);
  }
  update_live(m);
}

void sl__cp_master_tick(sl__cp_master *m, uint64_t now) {
  uint64_t limit = (uint64_t)m->timeout_ms * 1000000ull;
  char who[48], why[256];
  for (int r = 0; r < m->nnodes; r++) {
    cp_member *x = m->nodes[r];
    if (!x || x->state != SL__CP_MEMBER_LIVE || now - x->last_seen_ns <= limit)
      continue;
    snprintf(why, sizeof why,
             "node %d lost: no heartbeat for %llu ms (timeout %u ms; host "
             "'%s', data plane '%s')",
             r, (unsigned long long)((now - x->last_seen_ns) / 1000000),
             m->timeout_ms, x->host, x->data_addr);
    SL_WARN("control plane: %s", why);
    sl__cp_master_count(m, &m->stats.nodes_lost, 1);
    member_gone(m, x, SL__CP_MEMBER_LOST, why);
  }
  cp_member *next;
  for (cp_member *x = m->clients; x; x = next) {
    next = x->next;
    if (now - x->last_seen_ns <= limit) continue;
    snprintf(why, sizeof why, "%s lost: no heartbeat for %llu ms (host '%s')",
             who_str(x, who, sizeof who),
             (unsigned long long)((now - x->last_seen_ns) / 1000000), x->host);
    SL_WARN("control plane: %s", why);
    member_gone(m, x, SL__CP_MEMBER_LOST, why);
  }
  for (int w = 0; w < CP_N_WAITS; w++) {
    sl__cp_call *cn;
    for (sl__cp_call *c = m->waits[w]; c; c = cn) {
      cn = c->wnext;
      if (now >= c->deadline_ns) {
        if (c->method == SL__CP_BARRIER) sl__cp_barrier_cancel(m, c);
        sl__cp_call_fail(c, SL_ETIMEOUT,
                         "%s: the deadline passed while the "
                         "master waited",
                         sl__cp_methods[c->method].name);
      }
    }
  }
}

/* ---- refusals ---------------------------------------------------------- */

static void refuse(sl__cp_master *m, sl__cp_call *c, const char *fmt, ...)
    SL__PRINTF(3, 4);
static void refuse(sl__cp_master *m, sl__cp_call *c, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  SL_WARN("control plane: refused %s from %s: %s",
          sl__cp_methods[c->method].name, c->peer, msg);
  sl__cp_master_count(m, &m->stats.auth_refused, 1);
  sl__cp_call_fail(c, SL_EAUTH, "%s refused: %s",
                   sl__cp_methods[c->method].name, msg);
}

/* After sl__cp_decode failed: its message says what was wrong. */
static void malformed(sl__cp_master *m, sl__cp_call *c) {
  SL_WARN("control plane: %s from %s: %s", sl__cp_methods[c->method].name,
          c->peer, sl_last_error());
  sl__cp_master_count(m, &m->stats.malformed, 1);
  sl__cp_call_fail(c, SL_EINVAL, "%s: %s", sl__cp_methods[c->method].name,
                   sl_last_error());
}

static void version_mismatch(sl__cp_master *m, sl__cp_call *c,
                             uint32_t protocol, const char *version) {
  SL_WARN("control plane: %s from %s: protocol %u (sluice %s), this master "
          "speaks %u",
          sl__cp_methods[c->method].name, c->peer, (unsigned)protocol,
          version[0] ? version : "?", (unsigned)SL__CP_PROTOCOL);
  sl__cp_call_fail(
      c, SL_EUNSUPPORTED,
      "%s: version mismatch: the master (sluice %s) speaks control "
      "protocol %u, this process (sluice %s) speaks %u",
      sl__cp_methods[c->method].name, SLUICE_VERSION_STRING,
      (unsigned)SL__CP_PROTOCOL, version[0] ? version : "?",
      (unsigned)protocol);
}

/* ---- Hello and Join ---------------------------------------------------- */

static void do_hello(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__HelloRequest *q = (const void *)c->body;
  if (q->protocol != SL__CP_PROTOCOL) {
    version_mismatch(m, c, q->protocol, q->version);
    return;
  }
  cp_nonce *n = &m->nonces[m->next_nonce++ % CP_MAX_NONCES];
  if (sl__cp_random(n->nonce, sizeof n->nonce) != SL_OK) {
    sl__cp_call_fail(c, SL_EINTERNAL, "Hello: %s", sl_last_error());
    return;
  }
  n->issued_ns = sl__now_ns();
  n->used = false;
  Sluice__Cp__HelloReply r = SLUICE__CP__HELLO_REPLY__INIT;
  r.protocol = SL__CP_PROTOCOL;
  r.version = (char *)SLUICE_VERSION_STRING;
  r.nonce.data = n->nonce;
  r.nonce.len = sizeof n->nonce;
  r.nnodes = (uint32_t)m->nnodes;
  sl__cp_call_reply(c, &r.base);
}

/* Spends a nonce this master issued; false when it is unknown, spent or
 * stale. */
static bool spend_nonce(sl__cp_master *m, const uint8_t *nonce) {
  uint64_t now = sl__now_ns();
  for (size_t i = 0; i < CP_MAX_NONCES; i++) {
    cp_nonce *n = &m->nonces[i];
    if (n->issued_ns == 0 || n->used ||
        memcmp(n->nonce, nonce, SL__CP_NONCE_BYTES) != 0)
      continue;
    n->used = true;
    return now - n->issued_ns < NONCE_LIFETIME_NS;
  }
  return false;
}

static int pick_rank(sl__cp_master *m) {
  for (int r = 0; r < m->nnodes; r++)
    if (!m->nodes[r]) return r;
  for (int r = 0; r < m->nnodes; r++)
    if (m->nodes[r]->state != SL__CP_MEMBER_LIVE) return r;
  return -1;
}

static void do_join(sl__cp_master *m, sl__cp_call *c,
                    const Sluice__Cp__Envelope *env) {
  if (env->mac.len == 0) {
    refuse(m, c, "no credentials (the joiner has no token: set SLUICE_TOKEN)");
    return;
  }
  if (!sl__cp_mac_ok((const uint8_t *)m->token, strlen(m->token),
                     SL__CP_MAC_JOIN, SL__CP_JOIN, 0, 0, env->body.data,
                     env->body.len, env->mac.data, env->mac.len)) {
    refuse(m, c, "credentials do not match (wrong token?)");
    return;
  }
  ProtobufCMessage *body;
  if (sl__cp_decode(&sluice__cp__join_request__descriptor, env->body.data,
                    env->body.len, &body) != SL_OK) {
    malformed(m, c);
    return;
  }
  c->body = body;
  const Sluice__Cp__JoinRequest *q = (const void *)body;
  if (q->protocol != SL__CP_PROTOCOL) {
    version_mismatch(m, c, q->protocol, q->version);
    return;
  }
  if (!spend_nonce(m, q->server_nonce.data)) {
    refuse(m, c, "the nonce is unknown, spent or stale (a replayed join?)");
    return;
  }
  int rank = -1;
  bool node = q->role == SLUICE__CP__ROLE__NODE;
  if (node) {
    if (q->rank >= m->nnodes) {
      sl__cp_call_fail(c, SL_EINVAL,
                       "Join: rank %d is outside 0..%d (the master was "
                       "started for %d nodes)",
                       (int)q->rank, m->nnodes - 1, m->nnodes);
      return;
    }
    rank = q->rank >= 0 ? q->rank : pick_rank(m);
    if (rank < 0) {
      sl__cp_call_fail(c, SL_ESTATE,
                       "Join: all %d ranks are held by live nodes", m->nnodes);
      return;
    }
    cp_member *old = m->nodes[rank];
    if (old && old->state == SL__CP_MEMBER_LIVE) {
      sl__cp_call_fail(c, SL_ESTATE,
                       "Join: rank %d is held by a live node (host '%s', "
                       "data plane '%s')",
                       rank, old->host, old->data_addr);
      return;
    }
  }
  cp_member *x;
  if (SL_NEW(x) != SL_OK) {
    sl__cp_call_fail(c, SL_ENOMEM, "Join: out of memory");
    return;
  }
  x->id = m->next_member++;
  if (m->next_member == 0) m->next_member = 1;
  x->role = node ? SL__CP_NODE : SL__CP_CLIENT;
  x->rank = rank;
  x->state = SL__CP_MEMBER_LIVE;
  x->last_seen_ns = sl__now_ns();
  x->devices = sl__strdup(q->devices);
  x->data_addr = sl__strdup(q->data_addr);
  x->host = sl__strdup(q->host);
  x->version = sl__strdup(q->version);
  if (!x->devices || !x->data_addr || !x->host || !x->version ||
      sl__cp_session_key(m->token, q->server_nonce.data, q->client_nonce.data,
                         x->id, rank, x->key) != SL_OK) {
    member_free(x);
    sl__cp_call_fail(c, SL_EINTERNAL, "Join: cannot set up the session");
    return;
  }
  if (node) {
    member_free(m->nodes[rank]);
    m->nodes[rank] = x;
  } else {
    x->next = m->clients;
    m->clients = x;
  }
  char who[48];
  SL_INFO("control plane: %s joined from %s (host '%s', devices '%s', data "
          "plane '%s')",
          who_str(x, who, sizeof who), c->peer, x->host, x->devices,
          x->data_addr);
  update_live(m);
  c->member = x->id;
  c->rank = rank;
  c->counter = 0;
  memcpy(c->key, x->key, sizeof c->key);
  c->keyed = true;
  Sluice__Cp__JoinReply r = SLUICE__CP__JOIN_REPLY__INIT;
  r.member = x->id;
  r.rank = rank;
  r.nnodes = (uint32_t)m->nnodes;
  r.heartbeat_ms = m->heartbeat_ms;
  r.timeout_ms = m->timeout_ms;
  sl__cp_call_reply(c, &r.base);
  sl__cp_wake(m, CP_WAIT_MEMBERS);
}

/* ---- Members, Heartbeat, Leave ----------------------------------------- */

static bool do_members(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__MembersRequest *q = (const void *)c->body;
  if (q->wait_all)
    for (int r = 0; r < m->nnodes; r++)
      if (!m->nodes[r] || m->nodes[r]->state != SL__CP_MEMBER_LIVE)
        return false;
  Sluice__Cp__Member *mem = sl__calloc((size_t)m->nnodes, sizeof *mem);
  Sluice__Cp__Member **memp = sl__calloc((size_t)m->nnodes, sizeof *memp);
  if (!mem || !memp) {
    sl__free(mem);
    sl__free(memp);
    sl__cp_call_fail(c, SL_ENOMEM, "Members: out of memory");
    return true;
  }
  for (int r = 0; r < m->nnodes; r++) {
    sluice__cp__member__init(&mem[r]);
    memp[r] = &mem[r];
    mem[r].rank = r;
    const cp_member *x = m->nodes[r];
    if (!x) continue;
    mem[r].state = (Sluice__Cp__MemberState)x->state;
    mem[r].devices = x->devices;
    mem[r].data_addr = x->data_addr;
    mem[r].host = x->host;
  }
  Sluice__Cp__MembersReply rep = SLUICE__CP__MEMBERS_REPLY__INIT;
  rep.n_members = (size_t)m->nnodes;
  rep.members = memp;
  sl__cp_call_reply(c, &rep.base);
  sl__free(mem);
  sl__free(memp);
  return true;
}

static void do_heartbeat(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__HeartbeatRequest *q = (const void *)c->body;
  uint32_t *lost = sl__calloc((size_t)m->nnodes, sizeof *lost);
  if (!lost) {
    sl__cp_call_fail(c, SL_ENOMEM, "Heartbeat: out of memory");
    return;
  }
  Sluice__Cp__HeartbeatReply r = SLUICE__CP__HEARTBEAT_REPLY__INIT;
  r.sent_ns = q->sent_ns;
  r.lost = lost;
  for (int k = 0; k < m->nnodes; k++)
    if (m->nodes[k] && m->nodes[k]->state == SL__CP_MEMBER_LOST)
      lost[r.n_lost++] = (uint32_t)k;
  sl__cp_call_reply(c, &r.base);
  sl__free(lost);
}

static void do_leave(sl__cp_master *m, sl__cp_call *c, cp_member *x) {
  const Sluice__Cp__LeaveRequest *q = (const void *)c->body;
  char who[48], why[384];
  who_str(x, who, sizeof who);
  snprintf(why, sizeof why, "%s left%s%s", who, q->reason[0] ? ": " : "",
           q->reason);
  SL_INFO("control plane: %s", why);
  /* State first, answer second: the answer may reach the caller before
   * this thread moves on, and what it does next must see the change. (x
   * may be freed here; the reply needs only the call's copy of the key.) */
  member_gone(m, x, SL__CP_MEMBER_LEFT, why);
  Sluice__Cp__Empty r = SLUICE__CP__EMPTY__INIT;
  sl__cp_call_reply(c, &r.base);
}

/* ---- dispatch ---------------------------------------------------------- */

void sl__cp_master_dispatch(sl__cp_master *m, sl__cp_call *c) {
  c->wait = -1;
  c->rank = -1;
  sl__cp_master_count(m, &m->stats.calls, 1);
  ProtobufCMessage *em;
  if (sl__cp_decode(&sluice__cp__envelope__descriptor, c->req, c->req_len,
                    &em) != SL_OK) {
    malformed(m, c);
    return;
  }
  Sluice__Cp__Envelope *env = (void *)em;
  if (c->method == SL__CP_HELLO) {
    if (sl__cp_decode(sl__cp_methods[c->method].request, env->body.data,
                      env->body.len, &c->body) != SL_OK)
      malformed(m, c);
    else
      do_hello(m, c);
    sl__cp_msg_free(em);
    return;
  }
  if (c->method == SL__CP_JOIN) {
    do_join(m, c, env);
    sl__cp_msg_free(em);
    return;
  }
  cp_member *x = find_member(m, env->member);
  char who[48];
  if (!x) {
    refuse(m, c, "member %u is unknown (join first)", (unsigned)env->member);
  } else if (env->mac.len == 0) {
    refuse(m, c, "no credentials");
  } else if (!sl__cp_mac_ok(x->key, sizeof x->key, SL__CP_MAC_CALL, c->method,
                            env->member, env->counter, env->body.data,
                            env->body.len, env->mac.data, env->mac.len)) {
    refuse(m, c, "credentials of %s do not match", who_str(x, who, sizeof who));
  } else if (x->state != SL__CP_MEMBER_LIVE) {
    refuse(m, c, "%s was declared %s; join again", who_str(x, who, sizeof who),
           sl__cp_member_state_name(x->state));
  } else if (!sl__cp_replay_accept(&x->replay, env->counter)) {
    refuse(m, c, "call %llu of %s was already seen or is too old (replayed?)",
           (unsigned long long)env->counter, who_str(x, who, sizeof who));
  } else {
    c->member = x->id;
    c->rank = x->rank;
    c->counter = env->counter;
    memcpy(c->key, x->key, sizeof c->key);
    c->keyed = true;
    x->last_seen_ns = sl__now_ns();
    if (sl__cp_decode(sl__cp_methods[c->method].request, env->body.data,
                      env->body.len, &c->body) != SL_OK) {
      malformed(m, c);
    } else {
      switch (c->method) {
      case SL__CP_MEMBERS:
        if (!do_members(m, c)) sl__cp_park(m, c, CP_WAIT_MEMBERS);
        break;
      case SL__CP_HEARTBEAT: do_heartbeat(m, c); break;
      case SL__CP_LEAVE: do_leave(m, c, x); break;
      case SL__CP_KV_PUT: sl__cp_do_kv_put(m, c); break;
      case SL__CP_KV_GET:
        if (!sl__cp_do_kv_get(m, c)) sl__cp_park(m, c, CP_WAIT_KV);
        break;
      case SL__CP_BARRIER: sl__cp_do_barrier(m, c); break;
      case SL__CP_PLAN_SUBMIT: sl__cp_do_plan_submit(m, c); break;
      case SL__CP_PLAN_FETCH:
        if (!sl__cp_do_plan_fetch(m, c)) sl__cp_park(m, c, CP_WAIT_PLAN);
        break;
      case SL__CP_JOB_START: sl__cp_do_job_start(m, c); break;
      case SL__CP_JOB_STOP: sl__cp_do_job_stop(m, c); break;
      case SL__CP_JOB_REPORT: sl__cp_do_job_report(m, c); break;
      case SL__CP_JOB_STATUS:
        if (!sl__cp_do_job_status(m, c)) sl__cp_park(m, c, CP_WAIT_JOB);
        break;
      case SL__CP_RESULT_PUT: sl__cp_do_result_put(m, c); break;
      case SL__CP_RESULT_GET:
        if (!sl__cp_do_result_get(m, c)) sl__cp_park(m, c, CP_WAIT_RESULT);
        break;
      default: SL_ASSERT(!"unhandled method");
      }
    }
  }
  sl__cp_msg_free(em);
}

const char *sl__cp_member_state_name(sl__cp_member_state s) {
  switch (s) {
  case SL__CP_MEMBER_EMPTY: return "empty";
  case SL__CP_MEMBER_LIVE: return "live";
  case SL__CP_MEMBER_LOST: return "lost";
  case SL__CP_MEMBER_LEFT: return "left";
  }
  return "?";
}
