/* The master's gRPC server on the C core API: one completion queue and one
 * thread that drains it, runs the master (master.c) and ticks it.
 *
 * Methods are not registered: one outstanding grpc_server_request_call
 * takes any call, whose path picks the method (wire.c's table), and
 * whose single message is the request envelope. Each call then has two
 * batches in flight: RECV_MESSAGE, and RECV_CLOSE_ON_SERVER, which
 * completes when the call is over or the caller gave up (cancellation,
 * deadline, broken connection) - the latter takes a parked call off its
 * wait list. The answer is one batch (initial metadata, the reply message
 * and the status, or the status alone with an "sl-status" trailer). A call
 * is freed when no batch is outstanding, it is closed and it is not parked.
 *
 * Shutdown runs on the thread as well: parked calls are answered, the
 * server is shut down (calls still running after a second are cancelled),
 * and the queue is drained until gRPC reports it empty. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "core_thread.h"
#include "cp_int.h"

enum { T_NEW, T_RECV, T_SEND, T_CLOSE, T_SHUTDOWN };

typedef struct srv_call srv_call;
typedef struct srv_tag {
  int kind;
  srv_call *call;
} srv_tag;

struct srv_call {
  sl__cp_call pub; /* first: the master's view */
  sl__cp_server *srv;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array request_md;
  grpc_byte_buffer *recv, *send;
  int cancelled;
  int ops; /* batches outstanding */
  bool closed, answered;
  srv_tag t_new, t_recv, t_send, t_close;
  uint8_t *req;
  grpc_slice status_details;
  grpc_metadata trailer;
  char status_text[8];
};

struct sl__cp_server {
  grpc_server *server;
  grpc_completion_queue *cq;
  int port;
  char listen[272];
  sl__cp_master master;
  sl__thread thread;
  atomic_bool stop;
  uint64_t tick_ns;
  /* the thread's own */
  bool pending;   /* a grpc_server_request_call is outstanding */
  int live_calls; /* allocated srv_calls, the pending request included */
  bool shutting_down, shutdown_done, cancelled_all, cq_shut;
  uint64_t shutdown_started;
  srv_tag t_shutdown;
};

static srv_call *of(sl__cp_call *c) { return (srv_call *)c; }

static void call_free(srv_call *c) {
  sl__cp_server *s = c->srv;
  if (c->call) grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->request_md);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  if (c->send) grpc_byte_buffer_destroy(c->send);
  grpc_slice_unref(c->status_details);
  sl__cp_msg_free(c->pub.body);
  sl__free(c->req);
  sl__free(c);
  s->live_calls--;
}

static void maybe_free(srv_call *c) {
  if (c->ops == 0 && c->closed && c->pub.wait < 0) call_free(c);
}

static void request_new(sl__cp_server *s) {
  if (s->shutting_down) return;
  srv_call *c;
  if (SL_NEW(c) != SL_OK) {
    /* Without a pending request the server takes no more calls; the tick
     * tries again. */
    SL_ERROR("control plane: out of memory; not accepting calls");
    return;
  }
  c->srv = s;
  c->pub.wait = -1;
  c->pub.rank = -1;
  c->t_new = (srv_tag){T_NEW, c};
  c->t_recv = (srv_tag){T_RECV, c};
  c->t_send = (srv_tag){T_SEND, c};
  c->t_close = (srv_tag){T_CLOSE, c};
  c->status_details = grpc_empty_slice();
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->request_md);
  s->live_calls++;
  grpc_call_error e =
      grpc_server_request_call(s->server, &c->call, &c->details, &c->request_md,
                               s->cq, s->cq, &c->t_new);
  if (e != GRPC_CALL_OK) {
    SL_ERROR("control plane: grpc_server_request_call: %s",
             grpc_call_error_to_string(e));
    call_free(c);
    return;
  }
  s->pending = true;
}

/* The answer's batch; the status with details and, for failures, the
 * sl-status trailer. */
static void send_answer(srv_call *c, grpc_byte_buffer *msg,
                        grpc_status_code code, sl_status st, const char *text) {
  SL_ASSERT(!c->answered);
  sl__cp_unpark(&c->srv->master, &c->pub);
  c->answered = true;
  c->send = msg;
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (msg) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = msg;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  if (text) {
    c->status_details = grpc_slice_from_copied_string(text);
    ops[n].data.send_status_from_server.status_details = &c->status_details;
  }
  if (st != SL_OK) {
    snprintf(c->status_text, sizeof c->status_text, "%d", (int)st);
    c->trailer.key = grpc_slice_from_static_string("sl-status");
    c->trailer.value = grpc_slice_from_static_string(c->status_text);
    ops[n].data.send_status_from_server.trailing_metadata_count = 1;
    ops[n].data.send_status_from_server.trailing_metadata = &c->trailer;
  }
  n++;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_send, NULL);
  if (e == GRPC_CALL_OK)
    c->ops++;
  else
    SL_ERROR("control plane: cannot answer a call: %s",
             grpc_call_error_to_string(e));
}

void sl__cp_call_fail(sl__cp_call *pc, sl_status st, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  SL_DEBUG("control plane: %s from %s: %s: %s", sl__cp_methods[pc->method].name,
           pc->peer, sl_status_str(st), text);
  send_answer(of(pc), NULL, (grpc_status_code)sl__cp_status_to_grpc(st), st,
              text);
}

void sl__cp_call_reply(sl__cp_call *pc, const ProtobufCMessage *reply) {
  uint8_t *body = NULL, *env_buf = NULL;
  size_t body_len = 0, env_len = 0;
  uint8_t mac[SL__CP_MAC_BYTES];
  Sluice__Cp__Envelope env = SLUICE__CP__ENVELOPE__INIT;
  if (sl__cp_pack(reply, &body, &body_len) != SL_OK) goto fail;
  env.member = pc->member;
  env.counter = pc->counter;
  env.body.data = body;
  env.body.len = body_len;
  if (pc->keyed) {
    if (sl__cp_mac(pc->key, sizeof pc->key, SL__CP_MAC_REPLY, pc->method,
                   pc->member, pc->counter, body, body_len, mac) != SL_OK)
      goto fail;
    env.mac.data = mac;
    env.mac.len = sizeof mac;
  }
  if (sl__cp_pack(&env.base, &env_buf, &env_len) != SL_OK) goto fail;
  grpc_slice slice =
      grpc_slice_from_copied_buffer((const char *)env_buf, env_len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  sl__free(body);
  sl__free(env_buf);
  send_answer(of(pc), bb, GRPC_STATUS_OK, SL_OK, NULL);
  return;
fail:
  sl__free(body);
  sl__free(env_buf);
  sl__cp_call_fail(pc, SL_EINTERNAL, "%s: cannot build the reply: %s",
                   sl__cp_methods[pc->method].name, sl_last_error());
}

static uint64_t deadline_ns(gpr_timespec d) {
  d = gpr_convert_clock_type(d, GPR_CLOCK_MONOTONIC);
  if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
    return UINT64_MAX;
  gpr_timespec left = gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC));
  int64_t ns = left.tv_sec * 1000000000ll + left.tv_nsec;
  if (ns < 0) ns = 0;
  return sl__now_ns() + (uint64_t)ns;
}

static void on_new(sl__cp_server *s, srv_call *c, bool ok) {
  s->pending = false;
  if (!ok) { /* the server is shutting down */
    call_free(c);
    return;
  }
  request_new(s);
  char *peer = grpc_call_get_peer(c->call);
  snprintf(c->pub.peer, sizeof c->pub.peer, "%s", peer ? peer : "?");
  gpr_free(peer);
  c->pub.deadline_ns = deadline_ns(c->details.deadline);
  grpc_op recv = {0}, close = {0};
  recv.op = GRPC_OP_RECV_MESSAGE;
  recv.data.recv_message.recv_message = &c->recv;
  close.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  close.data.recv_close_on_server.cancelled = &c->cancelled;
  if (grpc_call_start_batch(c->call, &recv, 1, &c->t_recv, NULL) ==
      GRPC_CALL_OK)
    c->ops++;
  if (grpc_call_start_batch(c->call, &close, 1, &c->t_close, NULL) ==
      GRPC_CALL_OK)
    c->ops++;
  else
    c->closed = true;
  maybe_free(c);
}

static void on_recv(sl__cp_server *s, srv_call *c) {
  const char *path = (const char *)GRPC_SLICE_START_PTR(c->details.method);
  size_t path_len = GRPC_SLICE_LENGTH(c->details.method);
  int m = sl__cp_method_find(path, path_len);
  if (!c->recv) { /* the caller half-closed without a message */
    send_answer(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, SL_EINVAL,
                "the call carried no request message");
    return;
  }
  grpc_byte_buffer_reader r;
  grpc_slice all = grpc_empty_slice();
  if (grpc_byte_buffer_reader_init(&r, c->recv)) {
    all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
  }
  grpc_byte_buffer_destroy(c->recv);
  c->recv = NULL;
  size_t n = GRPC_SLICE_LENGTH(all);
  c->req = sl__malloc(n ? n : 1);
  if (!c->req) {
    grpc_slice_unref(all);
    send_answer(c, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, SL_ENOMEM,
                "out of memory");
    return;
  }
  if (n) memcpy(c->req, GRPC_SLICE_START_PTR(all), n);
  grpc_slice_unref(all);
  if (m < 0) {
    char text[320];
    snprintf(text, sizeof text, "no method '%.*s' (control protocol %u)",
             (int)SL_MIN(path_len, 200), path, (unsigned)SL__CP_PROTOCOL);
    SL_WARN("control plane: call from %s: %s", c->pub.peer, text);
    sl__cp_master_count(&s->master, &s->master.stats.malformed, 1);
    send_answer(c, NULL, GRPC_STATUS_UNIMPLEMENTED, SL_EUNSUPPORTED, text);
    return;
  }
  c->pub.method = (sl__cp_method)m;
  c->pub.req = c->req;
  c->pub.req_len = n;
  sl__cp_master_dispatch(&s->master, &c->pub);
}

static void handle(sl__cp_server *s, grpc_event ev) {
  srv_tag *t = ev.tag;
  if (t->kind == T_SHUTDOWN) {
    s->shutdown_done = true;
    return;
  }
  srv_call *c = t->call;
  switch (t->kind) {
  case T_NEW: on_new(s, c, ev.success); return;
  case T_RECV:
    c->ops--;
    /* A caller that is gone already gets no answer (nor a parked call). */
    if (!c->answered && !c->closed) on_recv(s, c);
    break;
  case T_SEND: c->ops--; break;
  case T_CLOSE:
    c->ops--;
    c->closed = true;
    /* Answered calls are off the lists already; a parked one is forgotten
     * without an answer, which nobody would read. */
    sl__cp_master_cancel(&s->master, &c->pub);
    break;
  }
  maybe_free(c);
}

static void *serve(void *arg) {
  sl__cp_server *s = arg;
  uint64_t next_tick = sl__now_ns() + s->tick_ns;
  for (;;) {
    gpr_timespec until =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_nanos((int64_t)s->tick_ns, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(s->cq, until, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) handle(s, ev);
    uint64_t now = sl__now_ns();
    if (!s->shutting_down && now >= next_tick) {
      if (!s->pending) request_new(s);
      sl__cp_master_tick(&s->master, now);
      next_tick = now + s->tick_ns;
    }
    if (!s->shutting_down && atomic_load(&s->stop)) {
      s->shutting_down = true;
      s->shutdown_started = now;
      sl__cp_master_shutdown(&s->master);
      grpc_server_shutdown_and_notify(s->server, s->cq, &s->t_shutdown);
    }
    if (s->shutting_down && !s->shutdown_done && !s->cancelled_all &&
        now - s->shutdown_started > 1000000000ull) {
      grpc_server_cancel_all_calls(s->server);
      s->cancelled_all = true;
    }
    if (s->shutdown_done && s->live_calls == 0 && !s->cq_shut) {
      grpc_completion_queue_shutdown(s->cq);
      s->cq_shut = true;
    }
  }
  return NULL;
}

/* Why a port would not bind, from a bind() of our own (gRPC reports only
 * that it failed). */
static void bind_reason(const char *host, int port, char *out, size_t n) {
  snprintf(out, n, "gRPC could not bind it");
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int rc = getaddrinfo(host, ps, &hints, &res);
  if (rc != 0) {
    snprintf(out, n, "%s", gai_strerror(rc));
    return;
  }
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0)
      snprintf(out, n, "%s", strerror(errno));
    close(fd);
  }
  freeaddrinfo(res);
}

sl_status sl__cp_server_create(const sl__cp_server_opts *opts,
                               sl__cp_server **out) {
  *out = NULL;
  const char *listen = opts->listen ? opts->listen : "127.0.0.1:0";
  if (opts->nnodes < 1 || opts->nnodes > SL__CP_MAX_NODES)
    return sl__fail(SL_EINVAL, "control plane: nnodes %d is outside 1..%d",
                    opts->nnodes, SL__CP_MAX_NODES);
  if (!opts->token || !opts->token[0])
    return sl__fail(SL_EINVAL,
                    "control plane: the master needs a token (SLUICE_TOKEN)");
  char host[256];
  int port;
  SL_CHECK(sl__cp_addr_split(listen, host, sizeof host, &port));
  uint32_t timeout = opts->heartbeat_timeout_ms
                         ? opts->heartbeat_timeout_ms
                         : SL__CP_DEFAULT_HEARTBEAT_TIMEOUT_MS;
  size_t max_message =
      opts->max_message ? opts->max_message : SL__CP_DEFAULT_MAX_MESSAGE;
  if (max_message > INT32_MAX)
    return sl__fail(SL_EINVAL, "control plane: max message %zu is above 2 GiB",
                    max_message);
  sl__cp_server *s;
  SL_CHECK(SL_NEW(s));
  sl_status st = sl__cp_master_init(&s->master, opts->nnodes, opts->token,
                                    timeout, max_message);
  if (st != SL_OK) {
    sl__free(s);
    return st;
  }
  snprintf(s->listen, sizeof s->listen, "%s", listen);
  s->tick_ns = SL_MIN(50000000ull, SL_MAX(1000000ull, timeout * 100000ull));
  s->t_shutdown = (srv_tag){T_SHUTDOWN, NULL};
  sl__cp_grpc_ref();
  s->cq = grpc_completion_queue_create_for_next(NULL);
  /* No SO_REUSEPORT: a second master on a port in use must fail, not share
   * the port's connections with the first. */
  grpc_arg args[] = {
      {GRPC_ARG_INTEGER,
       GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
       {.integer = (int)max_message}},
      {GRPC_ARG_INTEGER,
       GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
       {.integer = (int)max_message}},
      {GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}},
  };
  grpc_channel_args cargs = {SL_ARRAY_LEN(args), args};
  s->server = grpc_server_create(&cargs, NULL);
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  s->port = grpc_server_add_http2_port(s->server, listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port <= 0) {
    char why[256];
    bind_reason(host, port, why, sizeof why);
    st = sl__fail(SL_ECOMM, "control plane: cannot listen on %s: %s", listen,
                  why);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq,
                                      gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
               .type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    sl__cp_master_free(&s->master);
    sl__free(s);
    sl__cp_grpc_unref();
    return st;
  }
  grpc_server_start(s->server);
  request_new(s);
  st = sl__thread_start(&s->thread, serve, s, "sl-cp-server");
  if (st != SL_OK) {
    /* Nobody drains the queue: do the thread's shutdown here. */
    atomic_store(&s->stop, true);
    serve(s);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    sl__cp_master_free(&s->master);
    sl__free(s);
    sl__cp_grpc_unref();
    return st;
  }
  SL_INFO("control plane: master listening on %s (port %d, %d nodes, "
          "heartbeat timeout %u ms)",
          listen, s->port, opts->nnodes, timeout);
  *out = s;
  return SL_OK;
}

int sl__cp_server_port(const sl__cp_server *s) { return s->port; }

void sl__cp_server_destroy(sl__cp_server *s) {
  if (!s) return;
  atomic_store(&s->stop, true);
  sl__thread_join(&s->thread);
  grpc_server_destroy(s->server);
  grpc_completion_queue_destroy(s->cq);
  sl__cp_master_free(&s->master);
  sl__free(s);
  sl__cp_grpc_unref();
}

void sl__cp_server_stats_get(sl__cp_server *s, sl__cp_server_stats *out) {
  pthread_mutex_lock(&s->master.stats_lock);
  *out = s->master.stats;
  pthread_mutex_unlock(&s->master.stats_lock);
}
