/* The control plane's client: connect (Hello, Join, heartbeats, the member
 * table), the blocking calls, and the heartbeat thread.
 *
 * Every call seals its request in an envelope under the session key with a
 * fresh counter and checks the reply's MAC and echoed counter before
 * believing it (auth.c). Calls are safe from any thread: the channel is
 * shared, each call has its own completion queue (rpc.c), and the
 * counter is atomic. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core_thread.h"
#include "cp_int.h"

struct sl__cp_client {
  char *target;
  grpc_channel *ch;
  size_t max_message;
  sl__cp_role role;
  uint32_t member;
  int rank, nnodes;
  uint8_t key[SL__CP_KEY_BYTES];
  atomic_uint_least64_t counter;
  sl__cp_members members;
  uint32_t heartbeat_ms, timeout_ms;

  pthread_mutex_t lock; /* what the heartbeat thread shares */
  pthread_cond_t cond;
  bool stop;
  sl_status health;
  char health_msg[512];
  sl__thread beat;
};

static uint64_t left_ms(uint64_t deadline_ns) {
  uint64_t now = sl__now_ns();
  return now >= deadline_ns ? 0 : (deadline_ns - now + 999999) / 1000000;
}

/* ---- calls ------------------------------------------------------------- */

sl_status sl__cp_client_rpc(sl__cp_client *c, const char *path,
                            const uint8_t *req, size_t len, uint64_t timeout_ms,
                            uint8_t **reply, size_t *reply_len) {
  return sl__cp_rpc(c->ch, c->target, path, path, req, len, timeout_ms, false,
                    reply, reply_len);
}

sl_status sl__cp_client_send(sl__cp_client *c, sl__cp_method m,
                             const uint8_t *body, size_t len, bool seal,
                             uint64_t timeout_ms, uint8_t **reply,
                             size_t *reply_len) {
  *reply = NULL;
  *reply_len = 0;
  const sl__cp_method_desc *md = &sl__cp_methods[m];
  if (!seal)
    return sl__cp_rpc(c->ch, c->target, md->path, md->name, body, len,
                      timeout_ms, false, reply, reply_len);
  uint64_t counter = atomic_fetch_add(&c->counter, 1) + 1;
  uint8_t mac[SL__CP_MAC_BYTES];
  SL_CHECK(sl__cp_mac(c->key, sizeof c->key, SL__CP_MAC_CALL, m, c->member,
                      counter, body, len, mac));
  Sluice__Cp__Envelope env = SLUICE__CP__ENVELOPE__INIT;
  env.member = c->member;
  env.counter = counter;
  env.mac.data = mac;
  env.mac.len = sizeof mac;
  env.body.data = (uint8_t *)body;
  env.body.len = len;
  uint8_t *req = NULL, *rep = NULL;
  size_t req_len, rep_len;
  ProtobufCMessage *em = NULL;
  sl_status st;
  SL_CHECK_GOTO(sl__cp_pack(&env.base, &req, &req_len), st, out);
  SL_CHECK_GOTO(sl__cp_rpc(c->ch, c->target, md->path, md->name, req, req_len,
                           timeout_ms, false, &rep, &rep_len),
                st, out);
  SL_CHECK_GOTO(
      sl__cp_decode(&sluice__cp__envelope__descriptor, rep, rep_len, &em), st,
      out);
  const Sluice__Cp__Envelope *re = (const void *)em;
  if (re->member != c->member || re->counter != counter ||
      !sl__cp_mac_ok(c->key, sizeof c->key, SL__CP_MAC_REPLY, m, re->member,
                     re->counter, re->body.data, re->body.len, re->mac.data,
                     re->mac.len)) {
    st = sl__fail(SL_EAUTH,
                  "%s: the master's reply does not carry this session's "
                  "credentials (forged or misrouted)",
                  md->name);
    goto out;
  }
  *reply = sl__malloc(re->body.len ? re->body.len : 1);
  if (!*reply) {
    st = SL_ENOMEM;
    goto out;
  }
  if (re->body.len) memcpy(*reply, re->body.data, re->body.len);
  *reply_len = re->body.len;
out:
  sl__cp_msg_free(em);
  sl__free(req);
  sl__free(rep);
  return st;
}

/* A sealed call with message bodies both ways; the request is checked
 * before it leaves (the master would refuse it anyway, less clearly). */
static sl_status call(sl__cp_client *c, sl__cp_method m,
                      const ProtobufCMessage *req, uint64_t timeout_ms,
                      ProtobufCMessage **reply) {
  *reply = NULL;
  sl_status st = sl__cp_check(req);
  if (st != SL_OK)
    return sl__fail_context(st,
                            "%s: invalid argument: ", sl__cp_methods[m].name);
  uint8_t *body = NULL, *rep = NULL;
  size_t len, rep_len;
  SL_CHECK_GOTO(sl__cp_pack(req, &body, &len), st, out);
  SL_CHECK_GOTO(
      sl__cp_client_send(c, m, body, len, true, timeout_ms, &rep, &rep_len), st,
      out);
  st = sl__cp_decode(sl__cp_methods[m].reply, rep, rep_len, reply);
  if (st != SL_OK)
    sl__fail_context(st, "%s: the master's reply: ", sl__cp_methods[m].name);
out:
  sl__free(body);
  sl__free(rep);
  return st;
}

/* An unsealed call (Hello, Join): the envelope carries no member, and a
 * MAC only when given. The reply envelope is returned whole. */
static sl_status call_open(sl__cp_client *c, sl__cp_method m,
                           const uint8_t *body, size_t len, const uint8_t *mac,
                           uint64_t timeout_ms, bool wait_ready,
                           Sluice__Cp__Envelope **reply) {
  *reply = NULL;
  Sluice__Cp__Envelope env = SLUICE__CP__ENVELOPE__INIT;
  env.body.data = (uint8_t *)body;
  env.body.len = len;
  if (mac) {
    env.mac.data = (uint8_t *)mac;
    env.mac.len = SL__CP_MAC_BYTES;
  }
  uint8_t *req = NULL, *rep = NULL;
  size_t req_len, rep_len;
  sl_status st;
  SL_CHECK_GOTO(sl__cp_pack(&env.base, &req, &req_len), st, out);
  SL_CHECK_GOTO(sl__cp_rpc(c->ch, c->target, sl__cp_methods[m].path,
                           sl__cp_methods[m].name, req, req_len, timeout_ms,
                           wait_ready, &rep, &rep_len),
                st, out);
  ProtobufCMessage *em;
  SL_CHECK_GOTO(
      sl__cp_decode(&sluice__cp__envelope__descriptor, rep, rep_len, &em), st,
      out);
  *reply = (void *)em;
out:
  sl__free(req);
  sl__free(rep);
  return st;
}

/* ---- heartbeats -------------------------------------------------------- */

static void *beat(void *arg) {
  sl__cp_client *c = arg;
  uint64_t every = (uint64_t)c->heartbeat_ms * 1000000ull;
  /* A beat may take up to two intervals before it counts as failed: one
   * slow beat is not yet a problem, the master allows four. */
  uint64_t rpc_ms = SL_MAX(2ull * c->heartbeat_ms, 100ull);
  pthread_mutex_lock(&c->lock);
  while (!c->stop) {
    sl__cond_wait_ns(&c->cond, &c->lock, every);
    if (c->stop) break;
    pthread_mutex_unlock(&c->lock);
    Sluice__Cp__HeartbeatRequest q = SLUICE__CP__HEARTBEAT_REQUEST__INIT;
    q.sent_ns = sl__now_ns();
    ProtobufCMessage *rep = NULL;
    sl_status st = call(c, SL__CP_HEARTBEAT, &q.base, rpc_ms, &rep);
    sl__cp_msg_free(rep);
    pthread_mutex_lock(&c->lock);
    if (st != SL_OK && c->health == SL_OK)
      SL_WARN("control plane: heartbeat failed: %s", sl_last_error());
    c->health = st;
    snprintf(c->health_msg, sizeof c->health_msg, "%s",
             st == SL_OK ? "" : sl_last_error());
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

void sl__cp_client_stop_heartbeat(sl__cp_client *c) {
  pthread_mutex_lock(&c->lock);
  c->stop = true;
  pthread_cond_signal(&c->cond);
  pthread_mutex_unlock(&c->lock);
  sl__thread_join(&c->beat);
  c->beat.started = false;
}

sl_status sl__cp_client_health(sl__cp_client *c) {
  pthread_mutex_lock(&c->lock);
  sl_status st = c->health;
  if (st != SL_OK) sl__fail(st, "%s", c->health_msg);
  pthread_mutex_unlock(&c->lock);
  return st;
}

/* ---- connect and destroy ----------------------------------------------- */

static sl_status members_from(const Sluice__Cp__MembersReply *r,
                              sl__cp_members *out) {
  out->n = 0;
  out->m = sl__calloc(r->n_members, sizeof *out->m);
  if (!out->m) return SL_ENOMEM;
  for (size_t i = 0; i < r->n_members; i++, out->n++) {
    const Sluice__Cp__Member *x = r->members[i];
    sl__cp_member *y = &out->m[i];
    y->rank = x->rank;
    y->state = (sl__cp_member_state)x->state;
    y->devices = sl__strdup(x->devices);
    y->data_addr = sl__strdup(x->data_addr);
    y->host = sl__strdup(x->host);
    if (!y->devices || !y->data_addr || !y->host) {
      out->n++;
      sl__cp_members_free(out);
      return SL_ENOMEM;
    }
  }
  return SL_OK;
}

void sl__cp_members_free(sl__cp_members *t) {
  if (!t || !t->m) return;
  for (int i = 0; i < t->n; i++) {
    sl__free(t->m[i].devices);
    sl__free(t->m[i].data_addr);
    sl__free(t->m[i].host);
  }
  sl__free(t->m);
  t->m = NULL;
  t->n = 0;
}

sl_status sl__cp_members_get(sl__cp_client *c, bool wait_all,
                             uint64_t timeout_ms, sl__cp_members *out) {
  memset(out, 0, sizeof *out);
  Sluice__Cp__MembersRequest q = SLUICE__CP__MEMBERS_REQUEST__INIT;
  q.wait_all = wait_all;
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_MEMBERS, &q.base, timeout_ms, &rep));
  sl_status st = members_from((const void *)rep, out);
  sl__cp_msg_free(rep);
  return st;
}

static sl_status hello(sl__cp_client *c, const sl__cp_client_opts *o,
                       uint64_t deadline, uint8_t nonce[SL__CP_NONCE_BYTES]) {
  Sluice__Cp__HelloRequest q = SLUICE__CP__HELLO_REQUEST__INIT;
  q.protocol = o->protocol ? o->protocol : SL__CP_PROTOCOL;
  q.version = (char *)SLUICE_VERSION_STRING;
  uint8_t *body;
  size_t len;
  SL_CHECK(sl__cp_pack(&q.base, &body, &len));
  Sluice__Cp__Envelope *env = NULL;
  ProtobufCMessage *rep = NULL;
  /* Waits for the master to come up, within the deadline. */
  sl_status st = call_open(c, SL__CP_HELLO, body, len, NULL, left_ms(deadline),
                           true, &env);
  sl__free(body);
  if (st != SL_OK) return st;
  st = sl__cp_decode(&sluice__cp__hello_reply__descriptor, env->body.data,
                     env->body.len, &rep);
  if (st != SL_OK) {
    sl__fail_context(st, "Hello: the master's reply: ");
  } else {
    const Sluice__Cp__HelloReply *r = (const void *)rep;
    if (r->protocol != q.protocol)
      st = sl__fail(SL_EUNSUPPORTED,
                    "Hello: version mismatch: the master at %s (sluice %s) "
                    "speaks control protocol %u, this process (sluice %s) "
                    "speaks %u",
                    c->target, r->version, (unsigned)r->protocol,
                    SLUICE_VERSION_STRING, (unsigned)q.protocol);
    else if (o->nnodes > 0 && (int)r->nnodes != o->nnodes)
      st = sl__fail(SL_EINVAL,
                    "Hello: the master at %s runs %u nodes, this process "
                    "expects %d (check SLUICE_NNODES and the master's "
                    "settings)",
                    c->target, (unsigned)r->nnodes, o->nnodes);
    else
      memcpy(nonce, r->nonce.data, SL__CP_NONCE_BYTES);
  }
  sl__cp_msg_free(rep);
  sl__cp_msg_free(&env->base);
  return st;
}

static sl_status join(sl__cp_client *c, const sl__cp_client_opts *o,
                      uint64_t deadline,
                      const uint8_t server_nonce[SL__CP_NONCE_BYTES]) {
  uint8_t client_nonce[SL__CP_NONCE_BYTES];
  SL_CHECK(sl__cp_random(client_nonce, sizeof client_nonce));
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  Sluice__Cp__JoinRequest q = SLUICE__CP__JOIN_REQUEST__INIT;
  q.protocol = o->protocol ? o->protocol : SL__CP_PROTOCOL;
  q.version = (char *)SLUICE_VERSION_STRING;
  q.server_nonce.data = (uint8_t *)server_nonce;
  q.server_nonce.len = SL__CP_NONCE_BYTES;
  q.client_nonce.data = client_nonce;
  q.client_nonce.len = SL__CP_NONCE_BYTES;
  q.role = o->role == SL__CP_CLIENT ? SLUICE__CP__ROLE__CLIENT
                                    : SLUICE__CP__ROLE__NODE;
  q.rank = o->role == SL__CP_CLIENT ? -1 : o->node_rank;
  q.devices = (char *)(o->devices ? o->devices : "");
  q.data_addr = (char *)(o->data_addr ? o->data_addr : "");
  q.host = host;
  sl_status st = sl__cp_check(&q.base);
  if (st != SL_OK) return sl__fail_context(st, "Join: invalid argument: ");
  uint8_t *body;
  size_t len;
  SL_CHECK(sl__cp_pack(&q.base, &body, &len));
  bool have_token = o->token && o->token[0];
  uint8_t mac[SL__CP_MAC_BYTES];
  if (have_token) {
    st = sl__cp_mac((const uint8_t *)o->token, strlen(o->token),
                    SL__CP_MAC_JOIN, SL__CP_JOIN, 0, 0, body, len, mac);
    if (st != SL_OK) {
      sl__free(body);
      return st;
    }
  }
  /* Without a token the join goes out without credentials: the master
   * refuses it and logs who tried, which a local refusal would not. */
  Sluice__Cp__Envelope *env = NULL;
  ProtobufCMessage *rep = NULL;
  st = call_open(c, SL__CP_JOIN, body, len, have_token ? mac : NULL,
                 left_ms(deadline), false, &env);
  sl__free(body);
  if (st != SL_OK) return st;
  st = sl__cp_decode(&sluice__cp__join_reply__descriptor, env->body.data,
                     env->body.len, &rep);
  if (st != SL_OK) {
    sl__fail_context(st, "Join: the master's reply: ");
    goto out;
  }
  const Sluice__Cp__JoinReply *r = (const void *)rep;
  if (!have_token) {
    st = sl__fail(SL_EAUTH, "Join: the master accepted a join without a "
                            "token; refusing to trust it");
    goto out;
  }
  if ((o->role == SL__CP_NODE) != (r->rank >= 0) ||
      (o->role == SL__CP_NODE && o->node_rank >= 0 &&
       r->rank != o->node_rank) ||
      env->member != r->member || env->counter != 0) {
    st = sl__fail(SL_EAUTH,
                  "Join: the master's reply does not match the "
                  "request (rank %d for %d)",
                  (int)r->rank, o->node_rank);
    goto out;
  }
  st = sl__cp_session_key(o->token, server_nonce, client_nonce, r->member,
                          r->rank, c->key);
  if (st != SL_OK) goto out;
  if (!sl__cp_mac_ok(c->key, sizeof c->key, SL__CP_MAC_REPLY, SL__CP_JOIN,
                     env->member, 0, env->body.data, env->body.len,
                     env->mac.data, env->mac.len)) {
    st = sl__fail(SL_EAUTH,
                  "Join: the master at %s could not prove that it knows the "
                  "token (another master, or a different token?)",
                  c->target);
    goto out;
  }
  c->member = r->member;
  c->rank = r->rank;
  c->nnodes = (int)r->nnodes;
  c->heartbeat_ms = r->heartbeat_ms;
  c->timeout_ms = r->timeout_ms;
out:
  explicit_bzero(client_nonce, sizeof client_nonce);
  sl__cp_msg_free(rep);
  if (env) sl__cp_msg_free(&env->base);
  return st;
}

static void leave(sl__cp_client *c, const char *reason, uint64_t timeout_ms) {
  Sluice__Cp__LeaveRequest q = SLUICE__CP__LEAVE_REQUEST__INIT;
  q.reason = (char *)reason;
  ProtobufCMessage *rep = NULL;
  if (call(c, SL__CP_LEAVE, &q.base, timeout_ms, &rep) != SL_OK)
    SL_DEBUG("control plane: leave: %s", sl_last_error());
  sl__cp_msg_free(rep);
}

static void client_free(sl__cp_client *c) {
  sl__cp_members_free(&c->members);
  sl__cp_channel_destroy(c->ch);
  if (c->ch) sl__cp_grpc_unref();
  explicit_bzero(c->key, sizeof c->key);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->cond);
  sl__free(c->target);
  sl__free(c);
}

sl_status sl__cp_client_connect(const sl__cp_client_opts *opts,
                                uint64_t timeout_ms, sl__cp_client **out) {
  *out = NULL;
  if (!opts->master || !opts->master[0])
    return sl__fail(SL_EINVAL, "control plane: no master address (set "
                               "SLUICE_MASTER=host:port)");
  if (opts->role != SL__CP_NODE && opts->role != SL__CP_CLIENT)
    return sl__fail(SL_EINVAL,
                    "control plane: role %d is neither node nor "
                    "client",
                    (int)opts->role);
  if (opts->role == SL__CP_NODE && (opts->node_rank < SL__CP_RANK_ANY ||
                                    opts->node_rank >= SL__CP_MAX_NODES))
    return sl__fail(SL_EINVAL,
                    "control plane: node rank %d is outside "
                    "-1..%d",
                    opts->node_rank, SL__CP_MAX_NODES - 1);
  uint64_t deadline = sl__now_ns() + timeout_ms * 1000000ull;
  sl__cp_client *c;
  SL_CHECK(SL_NEW(c));
  c->role = opts->role;
  c->rank = -1;
  c->max_message = SL__CP_DEFAULT_MAX_MESSAGE;
  pthread_mutex_init(&c->lock, NULL);
  sl_status st = sl__cond_init(&c->cond);
  if (st != SL_OK) {
    pthread_mutex_destroy(&c->lock);
    sl__free(c);
    return st;
  }
  c->target = sl__strdup(opts->master);
  if (!c->target) {
    client_free(c);
    return SL_ENOMEM;
  }
  sl__cp_grpc_ref();
  st = sl__cp_channel_create(opts->master, c->max_message, &c->ch);
  if (st != SL_OK) {
    sl__cp_grpc_unref();
    client_free(c);
    return st;
  }
  uint8_t nonce[SL__CP_NONCE_BYTES];
  SL_CHECK_GOTO(hello(c, opts, deadline, nonce), st, fail);
  SL_CHECK_GOTO(join(c, opts, deadline, nonce), st, fail);
  SL_CHECK_GOTO(sl__thread_start(&c->beat, beat, c, "sl-cp-beat"), st, gone);
  ProtobufCMessage *rep;
  Sluice__Cp__MembersRequest q = SLUICE__CP__MEMBERS_REQUEST__INIT;
  q.wait_all = opts->wait_all;
  st = call(c, SL__CP_MEMBERS, &q.base, left_ms(deadline), &rep);
  if (st != SL_OK) {
    if (st == SL_ETIMEOUT) {
      /* Say who is missing: the table as it is now. */
      sl__cp_members now;
      char missing[256] = "";
      size_t n = 0;
      char saved[1024];
      snprintf(saved, sizeof saved, "%s", sl_last_error());
      if (sl__cp_members_get(c, false, 1000, &now) == SL_OK) {
        for (int r = 0; r < now.n && n < sizeof missing - 16; r++)
          if (now.m[r].state != SL__CP_MEMBER_LIVE)
            n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d",
                                  n ? ", " : "", r);
        sl__cp_members_free(&now);
      }
      st = sl__fail(SL_ETIMEOUT,
                    "control plane: not every node joined within %llu ms "
                    "(missing: %s): %s",
                    (unsigned long long)timeout_ms, missing[0] ? missing : "?",
                    saved);
    }
    goto stop;
  }
  st = members_from((const void *)rep, &c->members);
  sl__cp_msg_free(rep);
  if (st != SL_OK) goto stop;
  SL_INFO("control plane: joined the master at %s as %s %d (member %u)",
          c->target, c->role == SL__CP_NODE ? "node" : "client",
          c->role == SL__CP_NODE ? c->rank : (int)c->member,
          (unsigned)c->member);
  *out = c;
  return SL_OK;
stop:
  sl__cp_client_stop_heartbeat(c);
gone : {
  /* Give the rank back at once rather than when the heartbeat lapses. */
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", sl_last_error());
  leave(c, "connect failed", 1000);
  sl__fail(st, "%s", saved);
}
fail:
  client_free(c);
  return st;
}

void sl__cp_client_destroy(sl__cp_client *c) {
  if (!c) return;
  sl__cp_client_stop_heartbeat(c);
  leave(c, "", SL_MAX(2ull * c->heartbeat_ms, 200ull));
  client_free(c);
}

int sl__cp_client_rank(const sl__cp_client *c) { return c->rank; }
int sl__cp_client_nnodes(const sl__cp_client *c) { return c->nnodes; }
const sl__cp_members *sl__cp_client_members(const sl__cp_client *c) {
  return &c->members;
}

/* ---- key-value store and barriers -------------------------------------- */

static sl_status take_value(ProtobufCMessage *rep, uint8_t **value,
                            size_t *len) {
  const Sluice__Cp__Value *v = (const void *)rep;
  uint8_t *b = sl__malloc(v->value.len ? v->value.len : 1);
  if (!b) {
    sl__cp_msg_free(rep);
    return SL_ENOMEM;
  }
  if (v->value.len) memcpy(b, v->value.data, v->value.len);
  *value = b;
  *len = v->value.len;
  sl__cp_msg_free(rep);
  return SL_OK;
}

sl_status sl__cp_kv_put(sl__cp_client *c, const char *key, const void *value,
                        size_t len, uint64_t timeout_ms) {
  Sluice__Cp__KvPut q = SLUICE__CP__KV_PUT__INIT;
  q.key = (char *)(key ? key : "");
  q.value.data = (uint8_t *)value;
  q.value.len = len;
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_KV_PUT, &q.base, timeout_ms, &rep));
  sl__cp_msg_free(rep);
  return SL_OK;
}

sl_status sl__cp_kv_get(sl__cp_client *c, const char *key, bool wait,
                        uint64_t timeout_ms, uint8_t **value, size_t *len) {
  *value = NULL;
  *len = 0;
  Sluice__Cp__KvGet q = SLUICE__CP__KV_GET__INIT;
  q.key = (char *)(key ? key : "");
  q.wait = wait;
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_KV_GET, &q.base, timeout_ms, &rep));
  return take_value(rep, value, len);
}

sl_status sl__cp_barrier(sl__cp_client *c, const char *name,
                         uint64_t timeout_ms) {
  Sluice__Cp__BarrierRequest q = SLUICE__CP__BARRIER_REQUEST__INIT;
  q.name = (char *)(name ? name : "");
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_BARRIER, &q.base, timeout_ms, &rep));
  sl__cp_msg_free(rep);
  return SL_OK;
}

/* ---- jobs -------------------------------------------------------------- */

sl_status sl__cp_plan_submit(sl__cp_client *c, uint64_t job, int n,
                             const uint8_t *const *plans, const size_t *lens,
                             uint64_t timeout_ms) {
  if (n < 1 || n > SL__CP_MAX_NODES)
    return sl__fail(SL_EINVAL, "PlanSubmit: %d plans", n);
  ProtobufCBinaryData *b = sl__calloc((size_t)n, sizeof *b);
  if (!b) return SL_ENOMEM;
  for (int i = 0; i < n; i++) {
    b[i].data = (uint8_t *)plans[i];
    b[i].len = lens[i];
  }
  Sluice__Cp__PlanSubmit q = SLUICE__CP__PLAN_SUBMIT__INIT;
  q.job = job;
  q.n_plans = (size_t)n;
  q.plans = b;
  ProtobufCMessage *rep = NULL;
  sl_status st = call(c, SL__CP_PLAN_SUBMIT, &q.base, timeout_ms, &rep);
  sl__cp_msg_free(rep);
  sl__free(b);
  return st;
}

sl_status sl__cp_plan_fetch(sl__cp_client *c, uint64_t job, int node,
                            uint64_t timeout_ms, uint8_t **plan, size_t *len) {
  *plan = NULL;
  *len = 0;
  if (node < 0) return sl__fail(SL_EINVAL, "PlanFetch: node %d", node);
  Sluice__Cp__PlanFetch q = SLUICE__CP__PLAN_FETCH__INIT;
  q.job = job;
  q.node = (uint32_t)node;
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_PLAN_FETCH, &q.base, timeout_ms, &rep));
  return take_value(rep, plan, len);
}

static void info_from(const Sluice__Cp__JobStatus *r, sl__cp_job_info *out) {
  out->job = r->job;
  out->state = (sl__cp_job_state)r->state;
  out->status = (sl_status)r->status;
  out->failed_node = r->failed_node;
  out->reported = (int)r->reported;
  snprintf(out->message, sizeof out->message, "%s", r->message);
}

static sl_status job_call(sl__cp_client *c, sl__cp_method m,
                          const ProtobufCMessage *q, uint64_t timeout_ms,
                          sl__cp_job_info *out) {
  ProtobufCMessage *rep;
  SL_CHECK(call(c, m, q, timeout_ms, &rep));
  if (out) info_from((const void *)rep, out);
  sl__cp_msg_free(rep);
  return SL_OK;
}

sl_status sl__cp_job_start(sl__cp_client *c, uint64_t job,
                           uint64_t timeout_ms) {
  Sluice__Cp__JobRequest q = SLUICE__CP__JOB_REQUEST__INIT;
  q.job = job;
  return job_call(c, SL__CP_JOB_START, &q.base, timeout_ms, NULL);
}

sl_status sl__cp_job_stop(sl__cp_client *c, uint64_t job, const char *reason,
                          uint64_t timeout_ms) {
  Sluice__Cp__JobRequest q = SLUICE__CP__JOB_REQUEST__INIT;
  q.job = job;
  q.reason = (char *)(reason ? reason : "");
  return job_call(c, SL__CP_JOB_STOP, &q.base, timeout_ms, NULL);
}

sl_status sl__cp_job_report(sl__cp_client *c, uint64_t job, sl_status st,
                            const char *message, uint64_t timeout_ms) {
  Sluice__Cp__JobReport q = SLUICE__CP__JOB_REPORT__INIT;
  q.job = job;
  q.status = (uint32_t)st;
  q.message = (char *)(message ? message : "");
  return job_call(c, SL__CP_JOB_REPORT, &q.base, timeout_ms, NULL);
}

sl_status sl__cp_job_status(sl__cp_client *c, uint64_t job,
                            sl__cp_job_state until, uint64_t timeout_ms,
                            sl__cp_job_info *out) {
  memset(out, 0, sizeof *out);
  out->failed_node = -1;
  Sluice__Cp__JobStatusRequest q = SLUICE__CP__JOB_STATUS_REQUEST__INIT;
  q.job = job;
  q.until =
      (Sluice__Cp__JobState)(until > SL__CP_JOB_SUCCEEDED ? SL__CP_JOB_SUCCEEDED
                                                          : until);
  return job_call(c, SL__CP_JOB_STATUS, &q.base, timeout_ms, out);
}

sl_status sl__cp_result_put(sl__cp_client *c, uint64_t job, const char *key,
                            const void *value, size_t len,
                            uint64_t timeout_ms) {
  Sluice__Cp__ResultPut q = SLUICE__CP__RESULT_PUT__INIT;
  q.job = job;
  q.key = (char *)(key ? key : "");
  q.value.data = (uint8_t *)value;
  q.value.len = len;
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_RESULT_PUT, &q.base, timeout_ms, &rep));
  sl__cp_msg_free(rep);
  return SL_OK;
}

sl_status sl__cp_result_get(sl__cp_client *c, uint64_t job, const char *key,
                            uint64_t timeout_ms, uint8_t **value, size_t *len) {
  *value = NULL;
  *len = 0;
  Sluice__Cp__ResultGet q = SLUICE__CP__RESULT_GET__INIT;
  q.job = job;
  q.key = (char *)(key ? key : "");
  ProtobufCMessage *rep;
  SL_CHECK(call(c, SL__CP_RESULT_GET, &q.base, timeout_ms, &rep));
  return take_value(rep, value, len);
}
