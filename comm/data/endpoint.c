/* Data-plane endpoints: the listening socket and the event-loop thread,
 * the peer table, requests from other threads (attach, detach, connect,
 * shutdown), the periodic tick (dial retries, deadlines, pings, a waiting
 * detach), quiescence probes, and what happens when a pair fails. */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "dp_int.h"

#define DEF_CONNECT_TIMEOUT_MS 2000
#define DEF_CONNECT_RETRIES 4
#define DEF_RETRY_DELAY_MS 50
#define DEF_HANDSHAKE_TIMEOUT_MS 5000
#define DEF_PING_MS 1000
#define DEF_DEAD_MS 10000
#define DEF_WINDOW_FRAMES 1024u
#define DEF_WINDOW_BYTES (256ull << 20)
#define DEF_MAX_FRAME (16ull << 30)
#define DEF_SPIN_US 0 /* see spin_us in dp.h */
/* Per ring, so 64 MiB of /dev/shm a pair: a 64 MiB all-reduce between
 * two nodes puts 32 MiB in flight each way (5.2 GB/s here; 3.1 with 16). */
#define DEF_SHM_BYTES (32ll << 20)
/* How long destroy lets queued frames (a detach's DONE) drain. */
#define SHUTDOWN_LINGER_MS 2000

/* "4096", "16M", "1g": bytes, or KiB, MiB, GiB with the suffix; at most
 * 2^40. False for anything else. */
static bool parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || v < 0 || errno) return false;
  int shift = 0;
  switch (*end) {
  case 'k':
  case 'K': shift = 10; break;
  case 'm':
  case 'M': shift = 20; break;
  case 'g':
  case 'G': shift = 30; break;
  case 0: break;
  default: return false;
  }
  if (shift && end[1]) return false;
  if (v > ((long long)1 << (40 - shift))) return false;
  *out = (int64_t)v << shift;
  return true;
}

void sl__dp_out_free(sl__dp_endpoint *ep, dp_out *o, sl_status st) {
  if (o->f.kind == SL__DP_COLL && ep->coll.sent)
    ep->coll.sent(ep->coll_ctx, o->token, st);
  sl__free(o);
}

/* Whether the hang check counts o in transit from when it is queued
 * (job_sent) until the peer has handled it. */
static bool counted_in_transit(const dp_out *o) {
  return o->f.kind == SL__DP_MSG || o->f.kind == SL__DP_COLL;
}

/* Frees q's frames; returns how many were counted in transit. */
static size_t free_fifo(sl__dp_endpoint *ep, dp_fifo *q) {
  dp_out *o;
  size_t msgs = 0;
  while ((o = dp_fifo_pop(q))) {
    msgs += counted_in_transit(o);
    sl__dp_out_free(ep, o, SL_ECOMM);
  }
  return msgs;
}

/* ---- failures ------------------------------------------------------------ */

void sl__dp_report(sl__dp_endpoint *ep, uint32_t node, sl_status st,
                   const char *msg) {
  SL_WARN("%s", msg);
  if (ep->cfg.on_error) ep->cfg.on_error(ep->cfg.on_error_ctx, node, st, msg);
}

void sl__dp_count_received(sl__dp_endpoint *ep, uint64_t n) {
  pthread_mutex_lock(&ep->lock);
  ep->job_received += n;
  pthread_mutex_unlock(&ep->lock);
}

void sl__dp_peer_fail(sl__dp_endpoint *ep, dp_peer *p, sl_status st,
                      const char *msg) {
  if (p->conn) sl__dp_conn_close(p->conn);
  if (p->dial) sl__dp_conn_close(p->dial);
  p->conn = p->dial = NULL;
  p->retry_at_ns = 0;
  p->attempts = 0;
  size_t dropped = free_fifo(ep, &p->pending);
  pthread_mutex_lock(&ep->lock);
  /* Freed after unlocking: the sent hook may take its own lock. */
  dp_fifo inbox = p->inbox;
  p->inbox = (dp_fifo){0};
  for (dp_out *o = inbox.head; o; o = o->next)
    dropped += counted_in_transit(o);
  p->failed = true;
  p->fail_st = st;
  snprintf(p->fail_msg, sizeof p->fail_msg, "%s", msg);
  p->open = false;
  p->have_reply = false;
  ep->job_received += dropped; /* out of transit: they will never arrive */
  pthread_cond_broadcast(&ep->cond);
  pthread_mutex_unlock(&ep->lock);
  free_fifo(ep, &inbox);
  if (ep->job) sl_job_abort_msg(ep->job, st, msg);
  if (ep->coll.failed) ep->coll.failed(ep->coll_ctx, p->node, st, msg);
  sl__dp_report(ep, p->node, st, msg);
}

void sl__dp_peer_want(sl__dp_endpoint *ep, dp_peer *p) {
  if (p->conn || p->dial || ep->shutting_down) return;
  pthread_mutex_lock(&ep->lock);
  bool failed = p->failed;
  pthread_mutex_unlock(&ep->lock);
  if (failed) return;
  if (p->retry_at_ns) return; /* the tick dials when it is time */
  p->attempts = 0;
  sl__dp_dial(ep, p);
}

/* ---- probes ----------------------------------------------------------------
 */

void sl__dp_local_state(sl__dp_endpoint *ep, bool *quiescent,
                        uint64_t *progress, uint64_t *sent,
                        uint64_t *received) {
  *progress = 0;
  /* No job: quiescent once one ended here (it will do nothing more until
   * the next attach); not before, it may be about to start. */
  *quiescent = ep->job ? sl_job_quiescent(ep->job, progress) : ep->job_ended;
  pthread_mutex_lock(&ep->lock);
  *sent = ep->job_sent;
  *received = ep->job_received;
  pthread_mutex_unlock(&ep->lock);
}

void sl__dp_peer_reply(sl__dp_endpoint *ep, dp_peer *p, const sl__dp_frame *f) {
  pthread_mutex_lock(&ep->lock);
  p->have_reply = true;
  p->reply_quiescent = (f->flags & SL__DP_FLAG_QUIESCENT) != 0;
  p->reply_seq = (uint32_t)f->desc;
  p->reply_progress = f->src;
  p->reply_sent = f->dst;
  p->reply_received = (uint64_t)f->piece;
  pthread_mutex_unlock(&ep->lock);
}

static void send_probes(sl__dp_endpoint *ep, uint32_t seq) {
  sl__dp_frame f = {0};
  f.desc = (int32_t)seq;
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
    dp_peer *p = &ep->peers[i];
    if (i == ep->cfg.node) continue;
    if (p->conn && p->conn->state == DP_OPEN) {
      sl__dp_send_ctl(p->conn, SL__DP_PROBE, &f);
      sl__dp_flush(p->conn);
    } else if (!p->departed) {
      sl__dp_peer_want(ep, p);
    }
  }
}

/* ---- requests from other threads ----------------------------------------- */

static void call_done(sl__dp_endpoint *ep, dp_call *c) {
  pthread_mutex_lock(&ep->lock);
  c->done = true;
  pthread_cond_broadcast(&ep->cond);
  pthread_mutex_unlock(&ep->lock);
}

/* Runs fn on the loop thread and waits for it to call call_done. */
static sl_status call_loop(sl__dp_endpoint *ep, dp_call *c) {
  c->done = false;
  c->st = SL_OK;
  c->err[0] = '\0';
  pthread_mutex_lock(&ep->lock);
  c->next = ep->calls;
  ep->calls = c;
  bool wake = !ep->woken;
  ep->woken = true;
  pthread_mutex_unlock(&ep->lock);
  if (wake) uv_async_send(&ep->wake);
  pthread_mutex_lock(&ep->lock);
  while (!c->done)
    pthread_cond_wait(&ep->cond, &ep->lock);
  pthread_mutex_unlock(&ep->lock);
  if (c->st != SL_OK) return sl__fail(c->st, "%s", c->err);
  return SL_OK;
}

static void do_attach(sl__dp_endpoint *ep, dp_call *c) {
  if (ep->job || ep->shutting_down) {
    c->st = SL_ESTATE;
    snprintf(c->err, sizeof c->err, "data plane: node %u %s", ep->cfg.node,
             ep->job ? "already has a job attached" : "is closing");
    call_done(ep, c);
    return;
  }
  ep->job = c->job;
  ep->abort_hook = c->abort_hook;
  ep->abort_ctx = c->abort_ctx;
  ep->job_ended = false;
  /* A peer that said DONE for the last job runs this one too: losing it
   * is a failure again. */
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++)
    ep->peers[i].departed = false;
  pthread_mutex_lock(&ep->lock);
  ep->has_job = true;
  ep->job_sent = ep->job_received = 0;
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
    ep->peers[i].failed = false;
    ep->peers[i].have_reply = false;
  }
  pthread_mutex_unlock(&ep->lock);
  call_done(ep, c);
}

/* Tells every connected peer this node runs no job (any more): closing
 * the connection later is then not a failure for them. DONE goes behind
 * the messages still queued (returns, end-of-data), so the peer sees them
 * first; its counts let the peer's quiescence test account for this node
 * after it is gone. */
static void queue_done(sl__dp_endpoint *ep, bool want_ack) {
  bool q;
  uint64_t progress, sent, received;
  sl__dp_local_state(ep, &q, &progress, &sent, &received);
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
    dp_peer *p = &ep->peers[i];
    if (!p->conn || p->conn->state != DP_OPEN) continue;
    dp_out *o = sl__calloc(1, sizeof *o);
    if (!o) continue; /* the peer then sees a loss when we close */
    o->f.version = SL__DP_VERSION;
    o->f.kind = SL__DP_DONE;
    o->f.flags = SL__DP_FLAG_QUIESCENT;
    o->f.src = progress;
    o->f.dst = sent;
    o->f.piece = (int64_t)received;
    dp_fifo_push(&p->pending, o);
    p->conn->done_unacked = want_ack;
    sl__dp_flush(p->conn);
  }
}

/* A detach ends in two steps: once no payload of the job is being written
 * (its registers are free), the job is let go and DONE goes to every
 * connected peer; once each of them acknowledged it (or its connection
 * closed), the call returns. So when a node's detach has returned, its
 * peers know its job ended, and a later DONE cannot arrive after one of
 * them attached its next job (there is a barrier between the two) and
 * mark a node that is running that job as departed. Both steps end at the
 * detach deadline in any case. */
void sl__dp_check_detach(sl__dp_endpoint *ep) {
  if (!ep->detaching) return;
  if (!ep->detach_acks) {
    for (dp_conn *c = ep->conns; c; c = c->next)
      if (c->payload_writes) return;
    ep->job = NULL;
    ep->abort_hook = NULL;
    ep->job_ended = true;
    pthread_mutex_lock(&ep->lock);
    ep->has_job = false;
    pthread_mutex_unlock(&ep->lock);
    ep->detach_acks = true;
    queue_done(ep, true);
  }
  bool late = sl__now_ns() >= ep->detach_deadline_ns;
  for (dp_conn *c = ep->conns; c && !late; c = c->next)
    if (c->state == DP_OPEN && c->done_unacked) return;
  if (late)
    SL_WARN("data plane: node %u: detach: not every peer acknowledged the "
            "end of the job in time",
            ep->cfg.node);
  dp_call *c = ep->detaching;
  ep->detaching = NULL;
  ep->detach_acks = false;
  call_done(ep, c);
}

static void do_detach(sl__dp_endpoint *ep, dp_call *c) {
  if (!ep->job) {
    call_done(ep, c);
    return;
  }
  /* Payloads not yet handed to libuv point into the job's registers: only
   * an aborted job leaves any (a finished one has all its registers
   * back), and its peers no longer want them. */
  uint64_t dropped = 0;
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
    dp_fifo keep = {0};
    dp_out *o;
    while ((o = dp_fifo_pop(&ep->peers[i].pending))) {
      if (o->payload && o->f.kind == SL__DP_MSG) {
        sl__free(o);
        dropped++;
      } else {
        dp_fifo_push(&keep, o);
      }
    }
    ep->peers[i].pending = keep;
  }
  if (dropped) sl__dp_count_received(ep, dropped);
  ep->detaching = c;
  uint64_t wait_ms = ep->cfg.dead_timeout_ms > 0
                         ? (uint64_t)ep->cfg.dead_timeout_ms
                         : (uint64_t)DEF_DEAD_MS;
  ep->detach_deadline_ns = sl__now_ns() + wait_ms * 1000000ull;
  sl__dp_check_detach(ep);
}

static void do_connect(sl__dp_endpoint *ep, dp_call *c) {
  dp_peer *p = &ep->peers[c->node];
  pthread_mutex_lock(&ep->lock);
  p->failed = false;
  pthread_mutex_unlock(&ep->lock);
  sl__dp_peer_want(ep, p);
  call_done(ep, c);
}

/* Node c->node moved to another address: it is another process now (a
 * program runs as a new process, with a new port, for every job; a
 * restarted daemon too). A connection whose peer said DONE belongs to the
 * previous process, which ended its job and is going away: it is closed
 * here, quietly, so that its end of stream, which may come only after
 * the next job was attached (and `departed` cleared), is not taken for
 * the loss of the new process. A connection whose peer did not say DONE
 * stays: it may already be the new process's, and if it is the old
 * one's, its loss is a loss. */
static void do_readdress(sl__dp_endpoint *ep, dp_call *c) {
  dp_peer *p = &ep->peers[c->node];
  if (p->conn && p->departed && !ep->shutting_down) {
    SL_DEBUG("data plane: node %u: node %u moved; closing the connection "
             "(%s) of its previous process, whose job ended",
             ep->cfg.node, p->node, p->conn->addr);
    sl__dp_conn_close(p->conn);
  }
  /* What still waits for the previous process never reached it: its job's
   * messages (a job it never connected for, e.g. one another node
   * refused) must not reach the new process as if they were its job's,
   * and an attempt to dial the old address is given up; dialing starts
   * afresh at the new one. */
  dp_fifo keep = {0};
  dp_out *o;
  uint64_t dropped = 0;
  while ((o = dp_fifo_pop(&p->pending))) {
    if (o->f.kind == SL__DP_MSG) {
      sl__free(o);
      dropped++;
    } else {
      dp_fifo_push(&keep, o);
    }
  }
  p->pending = keep;
  if (dropped)
    SL_DEBUG("data plane: node %u: node %u moved; dropped %llu message%s "
             "queued for its previous process",
             ep->cfg.node, p->node, (unsigned long long)dropped,
             dropped == 1 ? "" : "s");
  if (p->dial && !ep->shutting_down) sl__dp_conn_close(p->dial);
  p->attempts = 0;
  call_done(ep, c);
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void close_all(sl__dp_endpoint *ep) {
  for (dp_conn *c = ep->conns; c; c = c->next)
    sl__dp_conn_close(c);
  if (ep->tick_init && !uv_is_closing((uv_handle_t *)&ep->tick))
    uv_close((uv_handle_t *)&ep->tick, on_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&ep->wake))
    uv_close((uv_handle_t *)&ep->wake, on_handle_closed);
  dp_call *c = ep->shutdown_call;
  ep->shutdown_call = NULL;
  if (c) call_done(ep, c);
}

void sl__dp_check_shutdown(sl__dp_endpoint *ep) {
  if (!ep->shutting_down || !ep->shutdown_call) return;
  bool drained = sl__now_ns() >= ep->shutdown_deadline_ns;
  if (!drained) {
    drained = true;
    for (uint32_t i = 0; i < ep->cfg.nnodes && drained; i++) {
      dp_peer *p = &ep->peers[i];
      if (p->conn && (p->pending.n || p->conn->ctl.n)) drained = false;
    }
    for (dp_conn *c = ep->conns; c && drained; c = c->next)
      if (c->state == DP_OPEN && c->writes) drained = false;
  }
  if (drained) close_all(ep);
}

static void do_shutdown(sl__dp_endpoint *ep, dp_call *c) {
  /* Destroyed with a job still attached, this node is lost to its peers
   * (as if its process had died): no DONE. */
  if (!ep->job) {
    ep->job_ended = true;
    queue_done(ep, false); /* ahead of the close on the same connection */
  }
  ep->shutting_down = true;
  ep->shutdown_call = c;
  ep->shutdown_deadline_ns = sl__now_ns() + SHUTDOWN_LINGER_MS * 1000000ull;
  if (!uv_is_closing((uv_handle_t *)&ep->listener))
    uv_close((uv_handle_t *)&ep->listener, on_handle_closed);
  /* Attempts still dialing have nothing to deliver. */
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
    dp_peer *p = &ep->peers[i];
    if (p->dial) sl__dp_conn_close(p->dial);
    p->dial = NULL;
    p->retry_at_ns = 0;
  }
  sl__dp_check_shutdown(ep);
}

/* ---- the loop thread -------------------------------------------------------
 */

static void on_wake(uv_async_t *h) {
  sl__dp_endpoint *ep = h->data;
  ep->activity++;
  pthread_mutex_lock(&ep->lock);
  ep->woken = false;
  /* next_dirty may be reused by a send as soon as `dirty` is cleared, so
   * the loop's own list goes through next_work. */
  dp_peer *work = NULL;
  for (dp_peer *p = ep->dirty; p; p = p->next_dirty) {
    p->dirty = false;
    dp_fifo_splice(&p->pending, &p->inbox);
    p->next_work = work;
    work = p;
  }
  ep->dirty = NULL;
  /* Oldest request first. */
  dp_call *calls = NULL;
  while (ep->calls) {
    dp_call *c = ep->calls;
    ep->calls = c->next;
    c->next = calls;
    calls = c;
  }
  bool probe = ep->probe_wanted;
  ep->probe_wanted = false;
  uint32_t seq = ep->probe_seq;
  pthread_mutex_unlock(&ep->lock);

  for (dp_peer *p = work; p; p = p->next_work) {
    if (ep->shutting_down) break;
    if (p->conn && p->conn->state == DP_OPEN)
      sl__dp_flush(p->conn);
    else if (p->pending.n)
      sl__dp_peer_want(ep, p);
  }
  while (calls) {
    dp_call *c = calls;
    calls = c->next;
    c->fn(ep, c);
  }
  if (probe && !ep->shutting_down) send_probes(ep, seq);
}

static void on_tick(uv_timer_t *t) {
  sl__dp_endpoint *ep = t->data;
  uint64_t now = sl__now_ns();
  if (!ep->shutting_down) {
    for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
      dp_peer *p = &ep->peers[i];
      if (p->retry_at_ns && now >= p->retry_at_ns) {
        p->retry_at_ns = 0;
        if (!p->conn && !p->dial) sl__dp_dial(ep, p);
      }
    }
  }
  sl__dp_conns_tick(ep, now);
  if (ep->detaching && ep->detach_acks) sl__dp_check_detach(ep);
  if (ep->detaching && !ep->detach_acks && now >= ep->detach_deadline_ns) {
    /* A peer that takes no bytes for this long is as good as lost; closing
     * cancels the writes, whose callbacks then complete the detach. */
    for (dp_conn *c = ep->conns; c; c = c->next)
      if (c->payload_writes) {
        SL_WARN("data plane: node %u: closing the connection to %s: a "
                "detached job's register is still being written",
                ep->cfg.node, c->addr);
        sl__dp_conn_close(c);
      }
  }
  sl__dp_check_shutdown(ep);
}

static void *loop_main(void *arg) {
  sl__dp_endpoint *ep = arg;
  /* libuv writes with writev, which raises SIGPIPE when the peer is gone;
   * blocked in this thread (where every write happens) it stays pending
   * and the write fails with EPIPE instead, without touching the
   * process's signal handling. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  while (uv_run(&ep->loop, UV_RUN_ONCE)) {
    /* Poll on while events keep coming, for up to spin_ns after the last
     * one: the next message then finds the thread awake. */
    uint64_t seen = ep->activity, last = sl__now_ns();
    while (ep->spin_ns && sl__now_ns() - last < ep->spin_ns) {
      if (!uv_run(&ep->loop, UV_RUN_NOWAIT)) return NULL;
      if (ep->activity != seen) {
        seen = ep->activity;
        last = sl__now_ns();
      }
    }
  }
  return NULL;
}

/* ---- create and destroy
 * ------------------------------------------------------
 */

static int32_t pick(int32_t v, int32_t dflt) { return v ? v : dflt; }

static sl_status parse_numeric(const char *host, uint16_t port,
                               struct sockaddr_storage *out) {
  memset(out, 0, sizeof *out);
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)out) == 0) return SL_OK;
  if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)out) == 0) return SL_OK;
  return sl__fail(SL_EINVAL, "data plane: '%s' is not a numeric address", host);
}

static void addr_text(const struct sockaddr_storage *a, char *buf, size_t n) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)a;
    uv_ip4_name(s, host, sizeof host);
    port = ntohs(s->sin_port);
    snprintf(buf, n, "%s:%d", host, port);
  } else if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;
    uv_ip6_name(s, host, sizeof host);
    port = ntohs(s->sin6_port);
    snprintf(buf, n, "[%s]:%d", host, port);
  } else {
    snprintf(buf, n, "?");
  }
}

static bool same_addr(const struct sockaddr_storage *a,
                      const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return false;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
    return x->sin_port == y->sin_port &&
           x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port &&
           !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) &&
           x->sin6_scope_id == y->sin6_scope_id;
  }
  return !memcmp(a, b, sizeof *a);
}

static sl_status uv_err(sl_status st, const char *what, int rc) {
  return sl__fail(st, "%s: %s", what, uv_strerror(rc));
}

static sl_status listen_on(sl__dp_endpoint *ep) {
  const char *host = ep->cfg.listen_host ? ep->cfg.listen_host : "127.0.0.1";
  struct sockaddr_storage sa;
  SL_CHECK(parse_numeric(host, ep->cfg.listen_port, &sa));
  snprintf(ep->listen_text, sizeof ep->listen_text,
           sa.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host,
           (unsigned)ep->cfg.listen_port);
  int rc = uv_tcp_init(&ep->loop, &ep->listener);
  if (rc) return uv_err(SL_EIO, "data plane: socket", rc);
  ep->listener_init = true;
  ep->listener.data = ep;
  rc = uv_tcp_bind(&ep->listener, (const struct sockaddr *)&sa, 0);
  /* libuv may report a port in use from bind or only from listen. */
  if (!rc)
    rc = uv_listen((uv_stream_t *)&ep->listener, 128, sl__dp_on_connection);
  if (rc == UV_EADDRINUSE)
    return sl__fail(SL_EIO, "%s: address in use", ep->listen_text);
  if (rc) return sl__fail(SL_EIO, "%s: %s", ep->listen_text, uv_strerror(rc));
  struct sockaddr_storage bound;
  int len = sizeof bound;
  rc = uv_tcp_getsockname(&ep->listener, (struct sockaddr *)&bound, &len);
  if (rc) return uv_err(SL_EIO, "data plane: getsockname", rc);
  ep->port = bound.ss_family == AF_INET6
                 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                 : ntohs(((struct sockaddr_in *)&bound)->sin_port);
  addr_text(&bound, ep->listen_text, sizeof ep->listen_text);
  return SL_OK;
}

static void release(sl__dp_endpoint *ep) {
  if (ep->loop_init) {
    /* Handles opened before the thread started (or after it stopped) are
     * closed here and the loop run until their callbacks have happened. */
    if (ep->listener_init && !uv_is_closing((uv_handle_t *)&ep->listener))
      uv_close((uv_handle_t *)&ep->listener, on_handle_closed);
    if (ep->wake_init && !uv_is_closing((uv_handle_t *)&ep->wake))
      uv_close((uv_handle_t *)&ep->wake, on_handle_closed);
    if (ep->tick_init && !uv_is_closing((uv_handle_t *)&ep->tick))
      uv_close((uv_handle_t *)&ep->tick, on_handle_closed);
    uv_run(&ep->loop, UV_RUN_DEFAULT);
    uv_loop_close(&ep->loop);
  }
  if (ep->peers)
    for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
      free_fifo(ep, &ep->peers[i].inbox);
      free_fifo(ep, &ep->peers[i].pending);
      sl__free(ep->peers[i].spill);
    }
  sl__free(ep->peers);
  if (ep->token) memset(ep->token, 0, ep->cfg.token_len);
  sl__free(ep->token);
  pthread_cond_destroy(&ep->cond);
  pthread_mutex_destroy(&ep->lock);
  sl__free(ep);
}

sl_status sl__dp_endpoint_create(const sl__dp_config *cfg,
                                 sl__dp_endpoint **out) {
  *out = NULL;
  if (!cfg) return sl__fail(SL_EINVAL, "data plane: no config");
  if (cfg->nnodes == 0 || cfg->nnodes > SL_ACTOR_MAX_NODES ||
      cfg->node >= cfg->nnodes)
    return sl__fail(SL_EINVAL, "data plane: node %u of %u nodes", cfg->node,
                    cfg->nnodes);
  if (!cfg->token || cfg->token_len == 0)
    return sl__fail(SL_EINVAL,
                    "data plane: a token is required (connections are opened "
                    "only between holders of the same token)");
  sl__dp_endpoint *ep;
  if (SL_NEW(ep) != SL_OK) return SL_ENOMEM;
  pthread_mutex_init(&ep->lock, NULL);
  sl_status st = sl__cond_init(&ep->cond);
  if (st != SL_OK) {
    pthread_mutex_destroy(&ep->lock);
    sl__free(ep);
    return st;
  }
  ep->cfg = *cfg;
  sl__dp_config *c = &ep->cfg;
  c->connect_timeout_ms = pick(c->connect_timeout_ms, DEF_CONNECT_TIMEOUT_MS);
  c->connect_retries = pick(c->connect_retries, DEF_CONNECT_RETRIES);
  if (c->connect_retries < 0) c->connect_retries = 0;
  c->retry_delay_ms = pick(c->retry_delay_ms, DEF_RETRY_DELAY_MS);
  c->handshake_timeout_ms =
      pick(c->handshake_timeout_ms, DEF_HANDSHAKE_TIMEOUT_MS);
  c->ping_interval_ms = pick(c->ping_interval_ms, DEF_PING_MS);
  c->dead_timeout_ms = pick(c->dead_timeout_ms, DEF_DEAD_MS);
  if (!c->window_frames) c->window_frames = DEF_WINDOW_FRAMES;
  if (!c->window_bytes) c->window_bytes = DEF_WINDOW_BYTES;
  if (!c->max_frame_bytes) c->max_frame_bytes = DEF_MAX_FRAME;
  if (!c->spin_us) {
    const char *e = getenv("SLUICE_DP_SPIN_US");
    c->spin_us = e && e[0] ? (int32_t)strtol(e, NULL, 10) : DEF_SPIN_US;
  }
  ep->spin_ns = c->spin_us > 0 ? (uint64_t)c->spin_us * 1000ull : 0;
  if (!c->shm_bytes) {
    const char *e = getenv("SLUICE_DP_SHM_BYTES");
    c->shm_bytes = DEF_SHM_BYTES;
    if (e && e[0] && !parse_size(e, &c->shm_bytes)) {
      release(ep);
      return sl__fail(
          SL_EINVAL,
          "data plane: SLUICE_DP_SHM_BYTES='%s': not a size (bytes, "
          "or a number with K, M or G)",
          e);
    }
    if (!c->shm_bytes) c->shm_bytes = -1;
  }
  if (c->shm_bytes > 0) {
    if (c->shm_bytes <= INT64_MAX - 4095)
      c->shm_bytes = (c->shm_bytes + 4095) / 4096 * 4096;
    if (!sl__dp_shm_ring_ok((uint64_t)c->shm_bytes)) {
      long long bytes = (long long)c->shm_bytes;
      release(ep);
      return sl__fail(SL_EINVAL,
                      "data plane: a shared-memory ring of %lld bytes (from 4 "
                      "KiB to 16 GiB, or 0 for none: SLUICE_DP_SHM_BYTES)",
                      bytes);
    }
  }
  if (c->connect_timeout_ms < 0 || c->retry_delay_ms < 0 ||
      c->handshake_timeout_ms < 0 || c->ping_interval_ms < 0) {
    release(ep);
    return sl__fail(SL_EINVAL, "data plane: negative timeout in the config");
  }
  ep->token = sl__malloc(cfg->token_len);
  ep->peers = sl__calloc(cfg->nnodes, sizeof *ep->peers);
  if (!ep->token || !ep->peers) {
    release(ep);
    return SL_ENOMEM;
  }
  memcpy(ep->token, cfg->token, cfg->token_len);
  c->token = ep->token;
  for (uint32_t i = 0; i < cfg->nnodes; i++)
    ep->peers[i].node = i;
  /* The tick resolves every deadline; a quarter of the shortest one keeps
   * them within 25% without waking an idle loop more than 200 times a
   * second. */
  int64_t t = SL_MIN(c->ping_interval_ms, c->connect_timeout_ms);
  t = SL_MIN(t, c->handshake_timeout_ms);
  if (c->dead_timeout_ms > 0) t = SL_MIN(t, c->dead_timeout_ms);
  t /= 4;
  ep->tick_ms = (uint64_t)SL_MAX(SL_MIN(t, 100), 5);

  int rc = uv_loop_init(&ep->loop);
  if (rc) {
    release(ep);
    return uv_err(SL_EINTERNAL, "data plane: uv_loop_init", rc);
  }
  ep->loop_init = true;
  ep->loop.data = ep;
  st = listen_on(ep);
  ep->cfg.listen_host = NULL; /* not ours to keep; listen_text has it */
  if (st != SL_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", sl_last_error());
    release(ep);
    return sl__fail(st, "%s", msg);
  }
  rc = uv_async_init(&ep->loop, &ep->wake, on_wake);
  if (!rc) {
    ep->wake_init = true;
    ep->wake.data = ep;
    rc = uv_timer_init(&ep->loop, &ep->tick);
  }
  if (!rc) {
    ep->tick_init = true;
    ep->tick.data = ep;
    rc = uv_timer_start(&ep->tick, on_tick, ep->tick_ms, ep->tick_ms);
  }
  if (rc) {
    release(ep);
    return uv_err(SL_EINTERNAL, "data plane: libuv handles", rc);
  }
  char name[16];
  snprintf(name, sizeof name, "sl-dp%u", cfg->node);
  st = sl__thread_start(&ep->thread, loop_main, ep, name);
  if (st != SL_OK) {
    release(ep);
    return st;
  }
  SL_DEBUG("data plane: node %u listens on %s", cfg->node, ep->listen_text);
  *out = ep;
  return SL_OK;
}

void sl__dp_endpoint_destroy(sl__dp_endpoint *ep) {
  if (!ep) return;
  pthread_mutex_lock(&ep->lock);
  ep->closing = true;
  pthread_mutex_unlock(&ep->lock);
  dp_call c = {.fn = do_shutdown};
  call_loop(ep, &c);
  sl__thread_join(&ep->thread);
  ep->listener_init = ep->wake_init = ep->tick_init = false;
  release(ep);
}

uint16_t sl__dp_endpoint_port(const sl__dp_endpoint *ep) { return ep->port; }

uint32_t sl__dp_endpoint_node(const sl__dp_endpoint *ep) {
  return ep->cfg.node;
}

sl_status sl__dp_endpoint_set_peer(sl__dp_endpoint *ep, uint32_t node,
                                   const char *host, uint16_t port) {
  if (node >= ep->cfg.nnodes)
    return sl__fail(SL_EINVAL, "data plane: no node %u (there are %u)", node,
                    ep->cfg.nnodes);
  if (!host || !host[0])
    return sl__fail(SL_EINVAL, "data plane: node %u: no host", node);
  struct sockaddr_storage sa;
  if (parse_numeric(host, port, &sa) != SL_OK) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res)
      return sl__fail(SL_EINVAL, "data plane: node %u: host '%s': %s", node,
                      host, rc ? gai_strerror(rc) : "no address");
    memset(&sa, 0, sizeof sa);
    memcpy(&sa, res->ai_addr, res->ai_addrlen);
    if (sa.ss_family == AF_INET)
      ((struct sockaddr_in *)&sa)->sin_port = htons(port);
    else
      ((struct sockaddr_in6 *)&sa)->sin6_port = htons(port);
    freeaddrinfo(res);
  }
  pthread_mutex_lock(&ep->lock);
  dp_peer *p = &ep->peers[node];
  bool moved = p->has_addr && !same_addr(&p->addr, &sa);
  p->addr = sa;
  p->has_addr = true;
  addr_text(&sa, p->addr_text, sizeof p->addr_text);
  bool closing = ep->closing;
  pthread_mutex_unlock(&ep->lock);
  if (moved && !closing && node != ep->cfg.node) {
    dp_call c = {.fn = do_readdress, .node = node};
    return call_loop(ep, &c);
  }
  return SL_OK;
}

static sl_status check_peer(sl__dp_endpoint *ep, uint32_t node) {
  if (node >= ep->cfg.nnodes || node == ep->cfg.node)
    return sl__fail(SL_EINVAL, "data plane: node %u: no peer %u (%u nodes)",
                    ep->cfg.node, node, ep->cfg.nnodes);
  return SL_OK;
}

sl_status sl__dp_endpoint_connect(sl__dp_endpoint *ep, uint32_t node) {
  SL_CHECK(check_peer(ep, node));
  pthread_mutex_lock(&ep->lock);
  bool closing = ep->closing;
  pthread_mutex_unlock(&ep->lock);
  if (closing) return sl__fail(SL_ESTATE, "data plane: endpoint closing");
  dp_call c = {.fn = do_connect, .node = node};
  return call_loop(ep, &c);
}

sl_status sl__dp_endpoint_wait_connected(sl__dp_endpoint *ep, uint32_t node,
                                         int64_t timeout_ms) {
  SL_CHECK(check_peer(ep, node));
  uint64_t end = sl__now_ns() + (uint64_t)SL_MAX(timeout_ms, 0) * 1000000ull;
  dp_peer *p = &ep->peers[node];
  pthread_mutex_lock(&ep->lock);
  for (;;) {
    if (p->open) break;
    if (p->failed) {
      sl_status st = p->fail_st;
      char msg[sizeof p->fail_msg];
      snprintf(msg, sizeof msg, "%s", p->fail_msg);
      pthread_mutex_unlock(&ep->lock);
      return sl__fail(st, "%s", msg);
    }
    uint64_t now = sl__now_ns();
    if (now >= end) {
      pthread_mutex_unlock(&ep->lock);
      return sl__fail(SL_ETIMEOUT,
                      "data plane: node %u: no connection to node %u after "
                      "%lld ms",
                      ep->cfg.node, node, (long long)timeout_ms);
    }
    sl__cond_wait_ns(&ep->cond, &ep->lock, end - now);
  }
  pthread_mutex_unlock(&ep->lock);
  return SL_OK;
}

sl_status sl__dp_endpoint_attach_hooked(sl__dp_endpoint *ep, sl_job *job,
                                        sl__dp_abort_hook hook, void *ctx) {
  if (!job) return sl__fail(SL_EINVAL, "data plane: no job");
  dp_call c = {
      .fn = do_attach, .job = job, .abort_hook = hook, .abort_ctx = ctx};
  return call_loop(ep, &c);
}

sl_status sl__dp_endpoint_attach(sl__dp_endpoint *ep, sl_job *job) {
  return sl__dp_endpoint_attach_hooked(ep, job, NULL, NULL);
}

void sl__dp_endpoint_detach(sl__dp_endpoint *ep) {
  dp_call c = {.fn = do_detach};
  call_loop(ep, &c);
}

void sl__dp_endpoint_get_stats(sl__dp_endpoint *ep, sl__dp_stats *o) {
  const dp_counters *s = &ep->stats;
#define LD(f) o->f = atomic_load_explicit(&s->f, memory_order_relaxed)
  LD(frames_sent);
  LD(frames_received);
  LD(frames_inline);
  LD(frames_inline_part);
  LD(messages_sent);
  LD(messages_received);
  LD(payload_bytes_sent);
  LD(payload_bytes_received);
  LD(payload_bytes_direct);
  LD(payload_bytes_shm);
  LD(shm_connections);
  LD(shm_refused);
  LD(messages_discarded);
  LD(connections_opened);
  LD(connections_dialed);
  LD(duplicates_refused);
  LD(handshakes_refused);
  LD(bad_frames);
  LD(credit_stalls);
  LD(peak_window_frames);
  LD(peak_window_bytes);
  LD(probes_answered);
#undef LD
}
