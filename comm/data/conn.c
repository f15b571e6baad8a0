/* Data-plane connections, all on the loop thread: dialing with a timeout
 * and retries, the handshake on both sides (and which of two simultaneous
 * dials survives), reading frames (headers and small payloads through a
 * staging buffer, large payloads straight into the register), writing
 * them (header and register as two buffers of one uv_write), credits,
 * liveness, and turning every failure into a clear message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>

#include "dp_int.h"

typedef struct dp_wreq {
  uv_write_t req;
  dp_conn *c;
  dp_out *frames;     /* freed when written */
  uint32_t n_payload; /* of them, carrying a register */
} dp_wreq;

typedef struct dp_hsreq {
  uv_write_t req;
  dp_conn *c;
  uint8_t buf[SL__DP_PROOF_BYTES];
} dp_hsreq;

static uint64_t ms_ns(int64_t ms) { return (uint64_t)ms * 1000000ull; }

static void conn_lost(dp_conn *c, const char *why);
static void flush_queues(dp_conn *c);

/* ---- lifetime ---------------------------------------------------------------
 */

static void on_closed(uv_handle_t *h) {
  dp_conn *c = h->data;
  sl__dp_endpoint *ep = c->ep;
  if (c->prev)
    c->prev->next = c->next;
  else
    ep->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  dp_out *o;
  while ((o = dp_fifo_pop(&c->ctl)))
    sl__free(o);
  sl__dp_shm_destroy(c->shm);
  sl__free(c->stg);
  sl__free(c);
  sl__dp_check_detach(ep);
  sl__dp_check_shutdown(ep);
}

/* Incoming connections count against DP_MAX_HANDSHAKING until they open
 * or close. */
static void hs_uncount(dp_conn *c) {
  if (!c->hs_counted) return;
  c->hs_counted = false;
  c->ep->handshaking--;
}

void sl__dp_conn_close(dp_conn *c) {
  if (c->state == DP_CLOSING) return;
  sl__dp_endpoint *ep = c->ep;
  hs_uncount(c);
  dp_peer *p = c->peer;
  if (p && p->conn == c) {
    p->conn = NULL;
    atomic_store(&p->shm, false);
    pthread_mutex_lock(&ep->lock);
    p->open = false;
    p->tx_idle = false; /* before the socket goes */
    p->tx_conn = NULL;
    pthread_cond_broadcast(&ep->cond);
    pthread_mutex_unlock(&ep->lock);
  }
  if (p && p->dial == c) p->dial = NULL;
  c->state = DP_CLOSING;
  c->in_payload = false;
  c->target = NULL;
  uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static dp_conn *new_conn(sl__dp_endpoint *ep) {
  dp_conn *c = sl__calloc(1, sizeof *c);
  if (!c) return NULL;
  c->stg = sl__malloc(DP_STAGING);
  if (!c->stg || uv_tcp_init(&ep->loop, &c->tcp) != 0) {
    sl__free(c->stg);
    sl__free(c);
    return NULL;
  }
  c->tcp.data = c;
  c->ep = ep;
  c->next = ep->conns;
  if (ep->conns) ep->conns->prev = c;
  ep->conns = c;
  c->last_rx_ns = c->last_tx_ns = sl__now_ns();
  return c;
}

static void remote_text(dp_conn *c) {
  struct sockaddr_storage sa;
  int len = sizeof sa;
  char host[INET6_ADDRSTRLEN] = "?";
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&sa, &len) != 0) {
    snprintf(c->addr, sizeof c->addr, "?");
  } else if (sa.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&sa, host, sizeof host);
    snprintf(c->addr, sizeof c->addr, "[%s]:%u", host,
             ntohs(((struct sockaddr_in6 *)&sa)->sin6_port));
  } else {
    uv_ip4_name((struct sockaddr_in *)&sa, host, sizeof host);
    snprintf(c->addr, sizeof c->addr, "%s:%u", host,
             ntohs(((struct sockaddr_in *)&sa)->sin_port));
  }
}

/* ---- writing
 * ------------------------------------------------------------------
 */

static void on_written(uv_write_t *req, int status) {
  dp_wreq *w = req->data;
  dp_conn *c = w->c;
  sl__dp_endpoint *ep = c->ep;
  ep->activity++;
  c->writes--;
  c->payload_writes -= w->n_payload;
  dp_out *o = w->frames;
  while (o) {
    dp_out *n = o->next;
    sl__dp_out_free(ep, o, status < 0 ? SL_ECOMM : SL_OK);
    o = n;
  }
  uint32_t npay = w->n_payload;
  sl__free(w);
  if (status < 0 && status != UV_ECANCELED && c->state == DP_OPEN)
    conn_lost(c, uv_strerror(status));
  else if (!c->writes)
    sl__dp_tx_idle_update(c);
  if (npay) sl__dp_check_detach(ep);
  sl__dp_check_shutdown(ep);
}

/* One uv_write of a list of frames: each frame's header, and its register
 * as a second buffer, so the bytes go from the register to the socket. */
static bool submit(dp_conn *c, dp_out *list) {
  sl__dp_endpoint *ep = c->ep;
  uv_buf_t bufs[2 * DP_BATCH];
  unsigned nb = 0;
  uint32_t npay = 0;
  uint64_t nframes = 0, nmsg = 0, bytes = 0, shm_bytes = 0;
  for (dp_out *o = list; o; o = o->next) {
    if (o->raw) { /* counted when its first bytes went out */
      bufs[nb].base = (char *)o->raw;
      bufs[nb++].len = o->raw_len;
      continue;
    }
    o->f.credit_frames = c->rx_frames;
    o->f.credit_bytes = c->rx_bytes;
    bool in_shm =
        o->f.len && c->shm_tx && sl__dp_shm_put(c->shm, o->payload, o->f.len);
    if (in_shm) {
      o->f.flags |= SL__DP_FLAG_SHM;
      o->f.payload_crc = 0;
      shm_bytes += o->f.len;
    } else if (o->crc_pending) {
      o->f.payload_crc = sl__crc32c(0, o->payload, (size_t)o->f.len);
    }
    sl__dp_frame_encode(&o->f, o->hdr);
    bufs[nb].base = (char *)o->hdr;
    bufs[nb++].len = SL__DP_HDR_BYTES;
    if (o->f.len) {
      if (!in_shm) {
        bufs[nb].base = (char *)o->payload;
        bufs[nb++].len = (size_t)o->f.len;
      }
      npay += o->payload != NULL;
      bytes += o->f.len;
    }
    nframes++;
    nmsg += o->f.kind == SL__DP_MSG;
  }
  c->credited_frames = c->rx_frames;
  c->credited_bytes = c->rx_bytes;
  /* Counted before the write: the receiver may count them before
   * uv_write returns here. */
  dp_count(&ep->stats.frames_sent, nframes);
  dp_count(&ep->stats.messages_sent, nmsg);
  dp_count(&ep->stats.payload_bytes_sent, bytes);
  dp_count(&ep->stats.payload_bytes_shm, shm_bytes);
  dp_wreq *w = sl__malloc(sizeof *w);
  int rc = w ? uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, nb, on_written)
             : UV_ENOMEM;
  if (rc) {
    atomic_fetch_sub(&ep->stats.frames_sent, nframes);
    atomic_fetch_sub(&ep->stats.messages_sent, nmsg);
    atomic_fetch_sub(&ep->stats.payload_bytes_sent, bytes);
    atomic_fetch_sub(&ep->stats.payload_bytes_shm, shm_bytes);
    sl__free(w);
    while (list) {
      dp_out *n = list->next;
      sl__dp_out_free(ep, list, SL_ECOMM);
      list = n;
    }
    conn_lost(c, uv_strerror(rc));
    return false;
  }
  w->req.data = w;
  w->c = c;
  w->frames = list;
  w->n_payload = npay;
  c->writes++;
  c->payload_writes += npay;
  c->last_tx_ns = sl__now_ns();
  return true;
}

void sl__dp_send_ctl(dp_conn *c, unsigned kind, const sl__dp_frame *f) {
  dp_out *o = sl__calloc(1, sizeof *o);
  if (!o) {
    conn_lost(c, "out of memory for a control frame");
    return;
  }
  if (f) o->f = *f;
  o->f.version = SL__DP_VERSION;
  o->f.kind = (uint8_t)kind;
  o->f.len = 0;
  o->f.payload_crc = 0;
  dp_fifo_push(&c->ctl, o);
}

/* Takes up to DP_BATCH frames off q into a list; for messages, only while
 * the credit window has room. */
static dp_out *take(dp_conn *c, dp_fifo *q, bool credit) {
  sl__dp_endpoint *ep = c->ep;
  dp_out *head = NULL, *tail = NULL;
  for (int n = 0; n < DP_BATCH && q->head; n++) {
    dp_out *o = q->head;
    if (credit && !o->raw &&
        (o->f.kind == SL__DP_MSG || o->f.kind == SL__DP_COLL)) {
      uint64_t of = dp_load(&c->tx_frames) - dp_load(&c->acked_frames);
      uint64_t ob = dp_load(&c->tx_bytes) - dp_load(&c->acked_bytes);
      if (of >= ep->cfg.window_frames ||
          (ob > 0 && ob + o->f.len > ep->cfg.window_bytes)) {
        if (!c->stalled) dp_count(&ep->stats.credit_stalls, 1);
        c->stalled = true;
        break;
      }
      dp_count(&c->tx_frames, 1);
      dp_count(&c->tx_bytes, o->f.len);
      dp_peak(&ep->stats.peak_window_frames, of + 1);
      dp_peak(&ep->stats.peak_window_bytes, ob + o->f.len);
    }
    dp_fifo_pop(q);
    if (tail)
      tail->next = o;
    else
      head = o;
    tail = o;
  }
  return head;
}

/* Senders only ever clear tx_idle (queueing, which wakes the loop to
 * write what they queued), so the loop takes the lock only to change what
 * it last published: nothing on the read path of an idle connection. */
static void publish_idle(dp_conn *c, bool idle) {
  sl__dp_endpoint *ep = c->ep;
  dp_peer *p = c->peer;
  uv_os_fd_t fd = -1;
  if (idle && uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) idle = false;
  if (idle == c->idle_published) return;
  pthread_mutex_lock(&ep->lock);
  p->tx_idle = idle && !p->inbox.head;
  p->tx_fd = fd;
  p->tx_conn = c;
  c->idle_published = p->tx_idle;
  pthread_mutex_unlock(&ep->lock);
}

void sl__dp_tx_idle_update(dp_conn *c) {
  dp_peer *p = c->peer;
  if (!p || p->conn != c) return;
  publish_idle(c, c->state == DP_OPEN && !c->writes && !c->ctl.head &&
                      !p->pending.head && !c->stalled);
}

void sl__dp_flush(dp_conn *c) {
  if (c->state != DP_OPEN) return;
  dp_peer *p = c->peer;
  /* No sender writes inline from here until the loop's writes are done. */
  if (c->ctl.head || p->pending.head) publish_idle(c, false);
  flush_queues(c);
  sl__dp_tx_idle_update(c);
}

static void flush_queues(dp_conn *c) {
  dp_peer *p = c->peer;
  for (;;) {
    dp_out *l = take(c, &c->ctl, false);
    if (!l) break;
    if (!submit(c, l)) return;
  }
  while (p->pending.head && !c->stalled) {
    dp_out *l = take(c, &p->pending, true);
    if (!l) break;
    if (!submit(c, l)) return;
  }
  if (c->stalled && !c->credit_requested) {
    /* The receiver may be holding back a credit below its threshold. */
    c->credit_requested = true;
    sl__dp_send_ctl(c, SL__DP_CREDIT_REQ, NULL);
    dp_out *l = take(c, &c->ctl, false);
    if (l) submit(c, l);
  }
}

/* ---- failures
 * -------------------------------------------------------------------
 */

static void fail_peer(dp_conn *c, sl_status st, const char *fmt, ...)
    SL__PRINTF(3, 4);
static void fail_peer(dp_conn *c, sl_status st, const char *fmt, ...) {
  char why[400], msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  snprintf(msg, sizeof msg, "data plane: node %u: node %u (%s): %s",
           c->ep->cfg.node, c->peer->node, c->addr, why);
  sl__dp_peer_fail(c->ep, c->peer, st, msg);
}

/* A frame that failed a check: the connection is closed and the pair
 * fails (the job with it). */
static void bad_frame(dp_conn *c, const char *fmt, ...) SL__PRINTF(2, 3);
static void bad_frame(dp_conn *c, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  dp_count(&c->ep->stats.bad_frames, 1);
  fail_peer(c, SL_ECOMM, "%s; connection closed", why);
}

/* An outgoing attempt failed: retry after a growing delay (or, when the
 * peer is dialing this node itself, once its attempt has had time to
 * succeed or fail), or give up. */
static void dial_failed_after(dp_conn *c, const char *why, uint64_t wait_ns) {
  sl__dp_endpoint *ep = c->ep;
  dp_peer *p = c->peer;
  bool mine = p->dial == c;
  sl__dp_conn_close(c);
  if (!mine || p->conn || ep->shutting_down) return;
  if (p->attempts <= ep->cfg.connect_retries) {
    uint64_t delay = wait_ns ? wait_ns
                             : ms_ns(ep->cfg.retry_delay_ms)
                                   << SL_MIN(p->attempts - 1, 16);
    p->retry_at_ns = sl__now_ns() + SL_MAX(delay, 1);
    SL_DEBUG("data plane: node %u: attempt %d to reach node %u (%s) failed: "
             "%s; retrying",
             ep->cfg.node, p->attempts, p->node, c->addr, why);
    return;
  }
  fail_peer(c, SL_ECOMM, "unreachable: %s (%d attempt%s)", why, p->attempts,
            p->attempts == 1 ? "" : "s");
}

static void dial_failed(dp_conn *c, const char *why) {
  dial_failed_after(c, why, 0);
}

static void conn_lost(dp_conn *c, const char *why) {
  sl__dp_endpoint *ep = c->ep;
  if (c->state == DP_CLOSING) return;
  if (c->outgoing && c->state != DP_OPEN) {
    dial_failed(c, why);
    return;
  }
  if (c->state != DP_OPEN) {
    SL_DEBUG("data plane: node %u: connection from %s closed during the "
             "handshake: %s",
             ep->cfg.node, c->addr, why);
    sl__dp_conn_close(c);
    return;
  }
  dp_peer *p = c->peer;
  if (p->departed || ep->shutting_down) {
    SL_DEBUG("data plane: node %u: node %u (%s) closed its connection after "
             "its job ended",
             ep->cfg.node, p->node, c->addr);
    sl__dp_conn_close(c);
    if (ep->coll.closed && !ep->shutting_down) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "data plane: node %u: node %u (%s) closed its connection",
               ep->cfg.node, p->node, c->addr);
      ep->coll.closed(ep->coll_ctx, p->node, msg);
    }
    return;
  }
  if (c->in_payload)
    fail_peer(c, SL_ECOMM,
              "lost: %s in the middle of a frame (%llu of %llu payload bytes "
              "received)",
              why, (unsigned long long)c->got, (unsigned long long)c->cur.len);
  else if (c->stg_len)
    fail_peer(c, SL_ECOMM,
              "lost: %s in the middle of a frame (%zu of %u header bytes "
              "received)",
              why, c->stg_len, SL__DP_HDR_BYTES);
  else
    fail_peer(c, SL_ECOMM, "lost: %s", why);
}

/* ---- dialing
 * ------------------------------------------------------------------
 */

static void hs_written(uv_write_t *req, int status) {
  dp_hsreq *h = req->data;
  dp_conn *c = h->c;
  c->writes--;
  sl__free(h);
  if (status < 0 && status != UV_ECANCELED && c->state != DP_CLOSING)
    conn_lost(c, uv_strerror(status));
  sl__dp_check_shutdown(c->ep);
}

static bool hs_write(dp_conn *c, const sl__dp_hs *m) {
  dp_hsreq *h = sl__malloc(sizeof *h);
  if (!h) {
    conn_lost(c, "out of memory");
    return false;
  }
  size_t n = sl__dp_hs_encode(m, h->buf);
  uv_buf_t b = {.base = (char *)h->buf, .len = n};
  h->c = c;
  h->req.data = h;
  int rc = uv_write(&h->req, (uv_stream_t *)&c->tcp, &b, 1, hs_written);
  if (rc) {
    sl__free(h);
    conn_lost(c, uv_strerror(rc));
    return false;
  }
  c->writes++;
  c->last_tx_ns = sl__now_ns();
  return true;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static bool start_reading(dp_conn *c) {
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc) {
    conn_lost(c, uv_strerror(rc));
    return false;
  }
  return true;
}

static void on_connect(uv_connect_t *req, int status) {
  dp_conn *c = req->data;
  if (c->state == DP_CLOSING) return;
  if (status < 0) {
    dial_failed(c, uv_strerror(status));
    return;
  }
  c->state = DP_HS_HELLO;
  c->deadline_ns = sl__now_ns() + ms_ns(c->ep->cfg.handshake_timeout_ms);
  c->last_rx_ns = sl__now_ns();
  start_reading(c);
}

void sl__dp_dial(sl__dp_endpoint *ep, dp_peer *p) {
  char text[80];
  struct sockaddr_storage sa;
  pthread_mutex_lock(&ep->lock);
  bool has = p->has_addr;
  sa = p->addr;
  snprintf(text, sizeof text, "%s", p->addr_text);
  pthread_mutex_unlock(&ep->lock);
  char msg[320];
  if (!has) {
    snprintf(msg, sizeof msg,
             "data plane: node %u: no address known for node %u", ep->cfg.node,
             p->node);
    sl__dp_peer_fail(ep, p, SL_ECOMM, msg);
    return;
  }
  dp_conn *c = new_conn(ep);
  if (!c) {
    snprintf(msg, sizeof msg,
             "data plane: node %u: out of memory connecting to node %u",
             ep->cfg.node, p->node);
    sl__dp_peer_fail(ep, p, SL_ENOMEM, msg);
    return;
  }
  c->outgoing = true;
  c->peer = p;
  p->dial = c;
  p->attempts++;
  snprintf(c->addr, sizeof c->addr, "%s", text);
  c->state = DP_CONNECTING;
  c->deadline_ns = sl__now_ns() + ms_ns(ep->cfg.connect_timeout_ms);
  c->creq.data = c;
  uv_tcp_nodelay(&c->tcp, 1);
  int rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&sa,
                          on_connect);
  if (rc) dial_failed(c, uv_strerror(rc));
}

/* ---- shared memory (shm.c)
 * --------------------------------------------------
 * Once open, the dialer offers a segment; the acceptor takes it when it
 * can open it (same host, same user) and its MAC, the token's HMAC over
 * this connection's nonces with role 'M', verifies. Each side sends
 * payloads through it from the moment it took it (acceptor) or learned
 * that (dialer); until then, and whenever a ring is full, over TCP. */

static void shm_use(dp_conn *c) {
  c->shm_tx = true;
  atomic_store(&c->peer->shm, true);
  dp_count(&c->ep->stats.shm_connections, 1);
  SL_DEBUG("data plane: node %u: payloads to and from node %u go through "
           "shared memory",
           c->ep->cfg.node, c->peer->node);
}

static void shm_offer(dp_conn *c) {
  sl__dp_endpoint *ep = c->ep;
  uint8_t mac[SL__DP_MAC_BYTES], id[SL__DP_SHM_ID_BYTES];
  if (sl__dp_mac(ep->token, ep->cfg.token_len, 'M', c->ns, c->nc, ep->cfg.node,
                 c->peer->node, ep->cfg.nnodes, mac) != SL_OK ||
      sl__dp_shm_create((uint64_t)ep->cfg.shm_bytes, mac, id, &c->shm) !=
          SL_OK) {
    SL_DEBUG("data plane: node %u: no shared memory with node %u: %s",
             ep->cfg.node, c->peer->node, sl_last_error());
    return;
  }
  sl__dp_frame f = {0};
  memcpy(&f.src, id, 8);
  memcpy(&f.dst, id + 8, 8);
  f.piece = ep->cfg.shm_bytes;
  sl__dp_send_ctl(c, SL__DP_SHM_OFFER, &f);
}

static void shm_offered(dp_conn *c, const sl__dp_frame *f) {
  sl__dp_endpoint *ep = c->ep;
  sl__dp_frame r = {0};
  /* Rings up to this end's own size: a peer does not choose how much
   * memory this process maps. */
  if (ep->cfg.shm_bytes > 0 && f->piece > 0 && f->piece <= ep->cfg.shm_bytes) {
    uint8_t id[SL__DP_SHM_ID_BYTES];
    memcpy(id, &f->src, 8);
    memcpy(id + 8, &f->dst, 8);
    sl__dp_shm *s = NULL;
    sl_status st = sl__dp_shm_open(id, (uint64_t)f->piece, &s);
    if (st == SL_OK &&
        !sl__dp_mac_verify(ep->token, ep->cfg.token_len, 'M', c->ns, c->nc,
                           c->peer->node, ep->cfg.node, ep->cfg.nnodes,
                           sl__dp_shm_mac(s))) {
      sl__dp_shm_destroy(s);
      s = NULL;
      SL_WARN("data plane: node %u: the shared memory node %u (%s) offered "
              "does not carry its proof of the token; not used",
              ep->cfg.node, c->peer->node, c->addr);
    } else if (st != SL_OK) {
      SL_DEBUG("data plane: node %u: shared memory with node %u not taken: "
               "%s",
               ep->cfg.node, c->peer->node, sl_last_error());
    }
    if (s) {
      c->shm = s;
      r.desc = 1;
      shm_use(c);
    }
  }
  sl__dp_send_ctl(c, SL__DP_SHM_REPLY, &r);
}

static void shm_replied(dp_conn *c, const sl__dp_frame *f) {
  sl__dp_shm_withdraw(c->shm);
  if (f->desc == 1) {
    shm_use(c);
    return;
  }
  dp_count(&c->ep->stats.shm_refused, 1);
  SL_DEBUG("data plane: node %u: node %u did not take the shared memory "
           "(another host?); payloads go over TCP",
           c->ep->cfg.node, c->peer->node);
  sl__dp_shm_destroy(c->shm);
  c->shm = NULL;
}

/* ---- the handshake
 * ------------------------------------------------------------
 */

static void conn_open(dp_conn *c) {
  sl__dp_endpoint *ep = c->ep;
  dp_peer *p = c->peer;
  hs_uncount(c);
  if (p->dial == c) p->dial = NULL;
  if (p->conn) {
    /* The pairing rule makes this unreachable; keep the older one. */
    SL_WARN("data plane: node %u: a second connection with node %u; closing "
            "it",
            ep->cfg.node, p->node);
    c->state = DP_HS_REFUSING;
    sl__dp_conn_close(c);
    return;
  }
  c->state = DP_OPEN;
  p->conn = c;
  /* DONE was said on an earlier connection, by a process that has closed
   * it since: this one's peer has said nothing yet. */
  p->departed = false;
  p->attempts = 0;
  p->retry_at_ns = 0;
  c->last_rx_ns = c->last_tx_ns = sl__now_ns();
  dp_count(&ep->stats.connections_opened, 1);
  if (c->outgoing) dp_count(&ep->stats.connections_dialed, 1);
  pthread_mutex_lock(&ep->lock);
  p->open = true;
  p->failed = false;
  pthread_cond_broadcast(&ep->cond);
  pthread_mutex_unlock(&ep->lock);
  SL_DEBUG("data plane: node %u: connection with node %u (%s) open (%s)",
           ep->cfg.node, p->node, c->addr, c->outgoing ? "dialed" : "accepted");
  if (c->outgoing && ep->cfg.shm_bytes > 0) shm_offer(c);
  sl__dp_flush(c);
}

/* Client: a handshake failure that retrying cannot fix. */
static void hs_fatal(dp_conn *c, sl_status st, const char *why) {
  fail_peer(c, st, "%s", why);
}

static void client_hello(dp_conn *c, const uint8_t *in) {
  sl__dp_endpoint *ep = c->ep;
  dp_peer *p = c->peer;
  sl__dp_hs h;
  char why[400];
  sl_status st = sl__dp_hs_decode(in, SL__DP_HELLO_BYTES, SL__DP_HS_HELLO, &h);
  if (st != SL_OK) {
    snprintf(why, sizeof why, "%s%s",
             st == SL_EUNSUPPORTED ? "" : "bad handshake: ", sl_last_error());
    hs_fatal(c, SL_ECOMM, why);
    return;
  }
  if (h.rank != p->node || h.nnodes != ep->cfg.nnodes) {
    snprintf(why, sizeof why,
             "answered as node %u of %u nodes, but this node dialed node %u "
             "of %u (wrong address?)",
             h.rank, h.nnodes, p->node, ep->cfg.nnodes);
    hs_fatal(c, SL_ECOMM, why);
    return;
  }
  memcpy(c->ns, h.nonce, SL__DP_NONCE_BYTES);
  sl__dp_hs m = {.version = SL__DP_VERSION,
                 .type = SL__DP_HS_PROOF,
                 .rank = ep->cfg.node,
                 .peer_rank = p->node,
                 .nnodes = ep->cfg.nnodes};
  if (sl__dp_random(c->nc, sizeof c->nc) != SL_OK ||
      sl__dp_mac(ep->token, ep->cfg.token_len, 'C', c->ns, c->nc, ep->cfg.node,
                 p->node, ep->cfg.nnodes, m.mac) != SL_OK) {
    hs_fatal(c, SL_EINTERNAL, sl_last_error());
    return;
  }
  memcpy(m.nonce, c->nc, SL__DP_NONCE_BYTES);
  if (hs_write(c, &m)) c->state = DP_HS_RESULT;
}

static void client_result(dp_conn *c, const uint8_t *in) {
  sl__dp_endpoint *ep = c->ep;
  dp_peer *p = c->peer;
  sl__dp_hs h;
  char why[400];
  sl_status st =
      sl__dp_hs_decode(in, SL__DP_RESULT_BYTES, SL__DP_HS_RESULT, &h);
  if (st != SL_OK) {
    snprintf(why, sizeof why, "%s%s",
             st == SL_EUNSUPPORTED ? "" : "bad handshake: ", sl_last_error());
    hs_fatal(c, SL_ECOMM, why);
    return;
  }
  switch (h.code) {
  case SL__DP_HS_OK:
    if (h.rank != p->node ||
        !sl__dp_mac_verify(ep->token, ep->cfg.token_len, 'S', c->ns, c->nc,
                           ep->cfg.node, p->node, ep->cfg.nnodes, h.mac)) {
      hs_fatal(c, SL_EAUTH,
               "could not prove it holds this cluster's token (the tokens "
               "differ); connection refused");
      return;
    }
    conn_open(c);
    return;
  case SL__DP_HS_DUPLICATE:
    /* It is opening this pair's connection itself (the lower rank's dial
     * wins); if that never comes, dial again. */
    dial_failed_after(c, "the peer is opening the connection itself",
                      ms_ns(ep->cfg.connect_timeout_ms) +
                          ms_ns(ep->cfg.handshake_timeout_ms));
    return;
  case SL__DP_HS_AUTH:
    hs_fatal(c, SL_EAUTH,
             "refused the connection: wrong token (the nodes hold different "
             "tokens)");
    return;
  case SL__DP_HS_VERSION:
    snprintf(why, sizeof why,
             "refused the connection: version mismatch (this build speaks "
             "data-plane version %u)",
             SL__DP_VERSION);
    hs_fatal(c, SL_ECOMM, why);
    return;
  default:
    snprintf(why, sizeof why,
             "refused the connection: %s (this node is %u of %u)",
             sl__dp_hs_code_str(h.code), ep->cfg.node, ep->cfg.nnodes);
    hs_fatal(c, SL_ECOMM, why);
    return;
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  dp_conn *c = req->data;
  (void)status;
  sl__dp_conn_close(c);
}

/* Server: answers with a refusal, closes after it is written, and reports
 * (a duplicate is not a failure and is not reported). */
static void refuse(dp_conn *c, unsigned code, uint32_t claimed, sl_status st,
                   const char *why) {
  sl__dp_endpoint *ep = c->ep;
  sl__dp_hs m = {.version = SL__DP_VERSION,
                 .type = SL__DP_HS_RESULT,
                 .code = (uint8_t)code,
                 .rank = ep->cfg.node};
  if (code == SL__DP_HS_DUPLICATE) {
    dp_count(&ep->stats.duplicates_refused, 1);
  } else {
    char msg[640];
    dp_count(&ep->stats.handshakes_refused, 1);
    if (claimed != UINT32_MAX)
      snprintf(msg, sizeof msg,
               "data plane: node %u: refused a connection from %s claiming to "
               "be node %u: %s",
               ep->cfg.node, c->addr, claimed, why);
    else
      snprintf(msg, sizeof msg,
               "data plane: node %u: refused a connection from %s: %s",
               ep->cfg.node, c->addr, why);
    sl__dp_report(ep, UINT32_MAX, st, msg);
  }
  if (!hs_write(c, &m)) return;
  c->state = DP_HS_REFUSING;
  c->deadline_ns = sl__now_ns() + ms_ns(ep->cfg.handshake_timeout_ms);
  c->sreq.data = c;
  if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
    sl__dp_conn_close(c);
}

static void server_proof(dp_conn *c, const uint8_t *in) {
  sl__dp_endpoint *ep = c->ep;
  uint32_t self = ep->cfg.node, n = ep->cfg.nnodes;
  sl__dp_hs h;
  char why[400];
  sl_status st = sl__dp_hs_decode(in, SL__DP_PROOF_BYTES, SL__DP_HS_PROOF, &h);
  if (st == SL_EUNSUPPORTED) {
    refuse(c, SL__DP_HS_VERSION, UINT32_MAX, SL_ECOMM, sl_last_error());
    return;
  }
  if (st != SL_OK) {
    char msg[640];
    snprintf(msg, sizeof msg,
             "data plane: node %u: closed a connection from %s: %s", self,
             c->addr, sl_last_error());
    dp_count(&ep->stats.handshakes_refused, 1);
    sl__dp_report(ep, UINT32_MAX, SL_ECOMM, msg);
    sl__dp_conn_close(c);
    return;
  }
  if (h.peer_rank != self || h.nnodes != n || h.rank >= n || h.rank == self) {
    snprintf(why, sizeof why,
             "it dialed node %u of %u nodes as node %u, but this is node %u "
             "of %u",
             h.peer_rank, h.nnodes, h.rank, self, n);
    refuse(c, SL__DP_HS_RANK, UINT32_MAX, SL_ECOMM, why);
    return;
  }
  if (!sl__dp_mac_verify(ep->token, ep->cfg.token_len, 'C', c->ns, h.nonce,
                         h.rank, self, n, h.mac)) {
    refuse(c, SL__DP_HS_AUTH, h.rank, SL_EAUTH,
           "wrong token (its proof does not verify)");
    return;
  }
  dp_peer *p = &ep->peers[h.rank];
  /* One connection per pair. When both dial at once, the lower rank's
   * attempt wins: the lower rank refuses the higher one's, the higher one
   * accepts the lower one's and abandons its own. */
  if (p->conn || (p->dial && self < h.rank)) {
    refuse(c, SL__DP_HS_DUPLICATE, h.rank, SL_OK, NULL);
    return;
  }
  memcpy(c->nc, h.nonce, SL__DP_NONCE_BYTES);
  sl__dp_hs m = {.version = SL__DP_VERSION,
                 .type = SL__DP_HS_RESULT,
                 .code = SL__DP_HS_OK,
                 .rank = self};
  if (sl__dp_mac(ep->token, ep->cfg.token_len, 'S', c->ns, c->nc, h.rank, self,
                 n, m.mac) != SL_OK) {
    SL_ERROR("data plane: node %u: %s", self, sl_last_error());
    sl__dp_conn_close(c);
    return;
  }
  c->peer = p;
  if (!hs_write(c, &m)) return;
  if (p->dial) sl__dp_conn_close(p->dial);
  p->dial = NULL;
  p->retry_at_ns = 0;
  conn_open(c);
}

void sl__dp_on_connection(uv_stream_t *server, int status) {
  sl__dp_endpoint *ep = server->data;
  if (status < 0) {
    SL_WARN("data plane: node %u: accept: %s", ep->cfg.node,
            uv_strerror(status));
    return;
  }
  dp_conn *c = new_conn(ep);
  if (!c) {
    SL_ERROR("data plane: node %u: out of memory accepting a connection",
             ep->cfg.node);
    return;
  }
  c->state = DP_HS_PROOF;
  ep->handshaking++;
  c->hs_counted = true;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    sl__dp_conn_close(c);
    return;
  }
  remote_text(c);
  if (ep->handshaking > DP_MAX_HANDSHAKING || ep->shutting_down) {
    SL_WARN("data plane: node %u: too many connections in their handshake; "
            "closed %s",
            ep->cfg.node, c->addr);
    sl__dp_conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  c->deadline_ns = sl__now_ns() + ms_ns(ep->cfg.handshake_timeout_ms);
  sl__dp_hs m = {.version = SL__DP_VERSION,
                 .type = SL__DP_HS_HELLO,
                 .rank = ep->cfg.node,
                 .nnodes = ep->cfg.nnodes};
  if (sl__dp_random(c->ns, sizeof c->ns) != SL_OK) {
    SL_ERROR("data plane: node %u: %s", ep->cfg.node, sl_last_error());
    sl__dp_conn_close(c);
    return;
  }
  memcpy(m.nonce, c->ns, SL__DP_NONCE_BYTES);
  if (hs_write(c, &m)) start_reading(c);
}

/* ---- reading
 * -----------------------------------------------------------------
 */

/* After the job has the message: until then it is in transit for the
 * hang check (sl__dp_count_received), and the credit too. */
static void count_in(dp_conn *c, uint64_t len, bool delivered) {
  sl__dp_endpoint *ep = c->ep;
  c->rx_frames++;
  c->rx_bytes += len;
  if (!delivered) dp_count(&ep->stats.messages_discarded, 1);
  sl__dp_count_received(ep, 1);
}

static void deliver(dp_conn *c) {
  sl__dp_endpoint *ep = c->ep;
  uint64_t len = c->cur.len;
  bool delivered = false;
  /* The stats count it before the job sees it: the job may finish on this
   * message and its owner read the stats before this thread gets back. */
  dp_count(&ep->stats.messages_received, 1);
  dp_count(&ep->stats.payload_bytes_received, len);
  bool abort = c->msg.kind == SL_MSG_CMD && c->msg.cmd == SL_CMD_ABORT;
  if (ep->job && abort && ep->abort_hook &&
      ep->abort_hook(ep->abort_ctx, &c->msg)) {
    delivered = true; /* the embedder delivers it later */
  } else if (ep->job && (c->target || len == 0)) {
    sl_status st = sl_job_deliver(ep->job, &c->msg, c->target, (size_t)len);
    if (st == SL_OK) {
      delivered = true;
    } else if (st != SL_ESTATE && !sl_job_ended(ep->job)) {
      atomic_fetch_sub(&ep->stats.messages_received, 1);
      atomic_fetch_sub(&ep->stats.payload_bytes_received, len);
      bad_frame(c, "a message that does not fit the plan: %s", sl_last_error());
      return;
    }
  }
  if (!delivered)
    SL_DEBUG("data plane: node %u: discarded a message from node %u (no job "
             "takes it)",
             ep->cfg.node, c->peer->node);
  count_in(c, len, delivered);
}

static void payload_bytes(dp_conn *c, const uint8_t *p, uint64_t n,
                          bool direct) {
  c->crc = sl__crc32c(c->crc, p, (size_t)n);
  if (!direct && c->target) memcpy(c->target + c->got, p, (size_t)n);
  if (direct) dp_count(&c->ep->stats.payload_bytes_direct, n);
  c->got += n;
}

/* A collective chunk is complete: handed to the hook, then counted for the
 * credit and, as a job message is, out of transit for the hang check. */
static void coll_deliver(dp_conn *c) {
  sl__dp_endpoint *ep = c->ep;
  c->rx_frames++;
  c->rx_bytes += c->cur.len;
  dp_count(&ep->stats.payload_bytes_received, c->cur.len);
  if (ep->coll.received)
    ep->coll.received(ep->coll_ctx, c->peer->node, &c->cur, c->target);
  c->target = NULL;
  sl__dp_count_received(ep, 1);
}

static void payload_end(dp_conn *c) {
  c->in_payload = false;
  if (c->crc != c->cur.payload_crc) {
    bad_frame(c,
              "bad frame: payload checksum mismatch (%llu bytes, 0x%08x in "
              "the frame, 0x%08x computed)",
              (unsigned long long)c->cur.len, c->cur.payload_crc, c->crc);
    return;
  }
  if (c->cur.kind == SL__DP_COLL) {
    coll_deliver(c);
    return;
  }
  deliver(c);
  c->target = NULL;
}

/* Where a flagged frame's payload lies in the peer's ring (*p, until
 * sl__dp_shm_release); false when the pair failed. */
static bool shm_take(dp_conn *c, const uint8_t **p) {
  if (!c->shm) {
    bad_frame(c, "bad frame: a payload in shared memory, but this connection "
                 "has none");
    return false;
  }
  if (sl__dp_shm_take(c->shm, c->cur.len, p) != SL_OK) {
    bad_frame(c, "%s", sl_last_error());
    return false;
  }
  return true;
}

static void frame_begin(dp_conn *c, const uint8_t *hdr) {
  sl__dp_endpoint *ep = c->ep;
  sl__dp_frame f;
  if (sl__dp_frame_decode(hdr, ep->cfg.max_frame_bytes, &f) != SL_OK) {
    bad_frame(c, "%s", sl_last_error());
    return;
  }
  dp_count(&ep->stats.frames_received, 1);
  uint64_t tx_frames = dp_load(&c->tx_frames), tx_bytes = dp_load(&c->tx_bytes);
  uint64_t acked_frames = dp_load(&c->acked_frames);
  uint64_t acked_bytes = dp_load(&c->acked_bytes);
  if (f.credit_frames < acked_frames || f.credit_frames > tx_frames ||
      f.credit_bytes < acked_bytes || f.credit_bytes > tx_bytes) {
    bad_frame(c,
              "bad frame: credit for %llu messages (%llu bytes), but %llu "
              "(%llu bytes) were sent and %llu (%llu) acknowledged",
              (unsigned long long)f.credit_frames,
              (unsigned long long)f.credit_bytes, (unsigned long long)tx_frames,
              (unsigned long long)tx_bytes, (unsigned long long)acked_frames,
              (unsigned long long)acked_bytes);
    return;
  }
  if (f.credit_frames != acked_frames || f.credit_bytes != acked_bytes)
    c->credit_requested = c->stalled = false; /* flushed after this read */
  atomic_store_explicit(&c->acked_frames, f.credit_frames,
                        memory_order_relaxed);
  atomic_store_explicit(&c->acked_bytes, f.credit_bytes, memory_order_relaxed);
  dp_peer *p = c->peer;
  c->cur = f;
  switch (f.kind) {
  case SL__DP_MSG:
    sl__dp_frame_to_msg(&f, &c->msg);
    if (c->msg.origin_node != p->node) {
      bad_frame(c, "bad frame: a message from node %u on node %u's connection",
                c->msg.origin_node, p->node);
      return;
    }
    p->departed = false;
    c->target = NULL;
    if (f.len == 0) {
      deliver(c);
      return;
    }
    if (ep->job) {
      void *t = NULL;
      sl_status st = sl_job_payload_target(ep->job, &c->msg, (size_t)f.len, &t);
      if (st == SL_OK) {
        c->target = t;
      } else if (st != SL_ESTATE && !sl_job_ended(ep->job)) {
        bad_frame(c, "a register-ready that does not fit the plan: %s",
                  sl_last_error());
        return;
      }
    }
    if (f.flags & SL__DP_FLAG_SHM) {
      const uint8_t *in;
      if (!shm_take(c, &in)) return;
      if (c->target) memcpy(c->target, in, (size_t)f.len);
      sl__dp_shm_release(c->shm);
      deliver(c);
      c->target = NULL;
      return;
    }
    c->in_payload = true;
    c->got = 0;
    c->crc = 0;
    return;
  case SL__DP_COLL: {
    /* in shared memory: offered to the hook in place */
    const uint8_t *in = NULL;
    if ((f.flags & SL__DP_FLAG_SHM) && !shm_take(c, &in)) return;
    c->target = NULL;
    if (ep->coll.target) {
      void *t = (void *)in;
      if (ep->coll.target(ep->coll_ctx, p->node, &f, &t) != SL_OK) {
        bad_frame(c, "a collective chunk that fits no collective: %s",
                  sl_last_error());
        return;
      }
      c->target = t;
    }
    if (in) {
      if (c->target && c->target != in) memcpy(c->target, in, (size_t)f.len);
      coll_deliver(c);
      sl__dp_shm_release(c->shm);
      return;
    }
    if (f.len == 0) {
      coll_deliver(c);
      return;
    }
    c->in_payload = true;
    c->got = 0;
    c->crc = 0;
    return;
  }
  case SL__DP_CREDIT_REQ: sl__dp_send_ctl(c, SL__DP_CREDIT, NULL); return;
  case SL__DP_SHM_OFFER:
    if (c->outgoing || c->shm)
      bad_frame(c, "bad frame: a shared-memory offer from the %s",
                c->outgoing ? "acceptor" : "dialer, twice");
    else
      shm_offered(c, &f);
    return;
  case SL__DP_SHM_REPLY:
    if (!c->outgoing || !c->shm || c->shm_tx)
      bad_frame(c, "bad frame: a shared-memory reply to no offer");
    else
      shm_replied(c, &f);
    return;
  case SL__DP_PROBE: {
    bool q;
    uint64_t progress, sent, received;
    sl__dp_local_state(ep, &q, &progress, &sent, &received);
    sl__dp_frame r = {0};
    r.desc = f.desc;
    r.flags = q ? SL__DP_FLAG_QUIESCENT : 0;
    r.src = progress;
    r.dst = sent;
    r.piece = (int64_t)received;
    sl__dp_send_ctl(c, SL__DP_PROBE_REPLY, &r);
    dp_count(&ep->stats.probes_answered, 1);
    return;
  }
  case SL__DP_PROBE_REPLY: sl__dp_peer_reply(ep, p, &f); return;
  case SL__DP_DONE:
    p->departed = true;
    sl__dp_peer_reply(ep, p, &f);
    sl__dp_send_ctl(c, SL__DP_DONE_ACK, NULL);
    return;
  case SL__DP_DONE_ACK:
    if (c->done_unacked) {
      c->done_unacked = false;
      sl__dp_check_detach(ep);
    }
    return;
  default: return; /* CREDIT, PING: the header said it all */
  }
}

/* A handshake message may be recognised as another version's after five
 * bytes (magic and version); otherwise it is complete at its size. */
static size_t hs_need(const dp_conn *c) {
  switch (c->state) {
  case DP_HS_HELLO: return SL__DP_HELLO_BYTES;
  case DP_HS_RESULT: return SL__DP_RESULT_BYTES;
  case DP_HS_PROOF: return SL__DP_PROOF_BYTES;
  default: return 0;
  }
}

static void hs_message(dp_conn *c, const uint8_t *in) {
  switch (c->state) {
  case DP_HS_HELLO: client_hello(c, in); break;
  case DP_HS_RESULT: client_result(c, in); break;
  case DP_HS_PROOF: server_proof(c, in); break;
  default: break;
  }
}

static bool other_version(const uint8_t *in, size_t n) {
  static const uint8_t magic[4] = {'S', 'L', 'H', 'S'};
  return n >= 5 && memcmp(in, magic, 4) == 0 && in[4] != SL__DP_VERSION;
}

/* Parses what the staging buffer holds. */
static void process(dp_conn *c) {
  size_t off = 0;
  while (c->state != DP_CLOSING) {
    size_t avail = c->stg_len - off;
    const uint8_t *in = c->stg + off;
    if (c->state == DP_HS_REFUSING) {
      off = c->stg_len; /* whatever it says now is not read */
      break;
    }
    size_t need = hs_need(c);
    if (need) {
      if (avail < need && !other_version(in, avail)) break;
      if (avail < need) {
        /* Decoded from a full-size copy: the version check comes first. */
        uint8_t tmp[SL__DP_PROOF_BYTES] = {0};
        memcpy(tmp, in, avail);
        off = c->stg_len;
        hs_message(c, tmp);
        break;
      }
      off += need;
      hs_message(c, in);
      continue;
    }
    if (c->state != DP_OPEN) break;
    if (c->in_payload) {
      uint64_t take = SL_MIN((uint64_t)avail, c->cur.len - c->got);
      if (!take) break;
      payload_bytes(c, in, take, false);
      off += take;
      if (c->got == c->cur.len) payload_end(c);
      continue;
    }
    if (avail < SL__DP_HDR_BYTES) break;
    off += SL__DP_HDR_BYTES;
    frame_begin(c, in);
  }
  if (c->state == DP_CLOSING) {
    c->stg_len = 0;
    return;
  }
  if (off) memmove(c->stg, c->stg + off, c->stg_len - off);
  c->stg_len -= off;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  dp_conn *c = h->data;
  (void)suggested;
  if (c->state == DP_OPEN && c->in_payload && c->target && c->stg_len == 0 &&
      c->cur.len - c->got >= DP_DIRECT_MIN) {
    buf->base = (char *)c->target + c->got;
    buf->len = (size_t)SL_MIN(c->cur.len - c->got, (uint64_t)1 << 30);
    c->direct = true;
  } else {
    buf->base = (char *)c->stg + c->stg_len;
    buf->len = DP_STAGING - c->stg_len;
    c->direct = false;
  }
}

static void maybe_credit(dp_conn *c) {
  const sl__dp_config *cfg = &c->ep->cfg;
  uint64_t f = c->rx_frames - c->credited_frames;
  uint64_t b = c->rx_bytes - c->credited_bytes;
  if (f >= SL_MAX(cfg->window_frames / 2, 1u) ||
      b >= SL_MAX(cfg->window_bytes / 2, 1u)) {
    bool queued = false;
    for (dp_out *o = c->ctl.head; o; o = o->next)
      queued |= o->f.kind == SL__DP_CREDIT;
    if (!queued) sl__dp_send_ctl(c, SL__DP_CREDIT, NULL);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  dp_conn *c = s->data;
  (void)buf;
  if (c->state == DP_CLOSING || nread == 0) return;
  c->ep->activity++;
  if (nread < 0) {
    conn_lost(c, nread == UV_EOF ? "connection closed by the peer"
                                 : uv_strerror((int)nread));
    return;
  }
  c->last_rx_ns = sl__now_ns();
  if (c->direct) {
    c->direct = false;
    payload_bytes(c, c->target + c->got, (uint64_t)nread, true);
    if (c->got == c->cur.len) payload_end(c);
  } else {
    c->stg_len += (size_t)nread;
    process(c);
  }
  if (c->state == DP_OPEN) {
    maybe_credit(c);
    sl__dp_flush(c);
  }
}

/* ---- the tick ---------------------------------------------------------------
 */

void sl__dp_conns_tick(sl__dp_endpoint *ep, uint64_t now) {
  const sl__dp_config *cfg = &ep->cfg;
  char why[160];
  for (dp_conn *c = ep->conns, *next; c; c = next) {
    next = c->next; /* closing frees nothing before the close callback */
    switch (c->state) {
    case DP_CONNECTING:
    case DP_HS_HELLO:
    case DP_HS_RESULT:
      if (now < c->deadline_ns) break;
      snprintf(why, sizeof why, "%s timed out after %d ms",
               c->state == DP_CONNECTING ? "connect" : "handshake",
               c->state == DP_CONNECTING ? cfg->connect_timeout_ms
                                         : cfg->handshake_timeout_ms);
      dial_failed(c, why);
      break;
    case DP_HS_PROOF:
      if (now < c->deadline_ns) break;
      {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "data plane: node %u: closed a connection from %s: no "
                 "handshake (token proof) within %d ms",
                 cfg->node, c->addr, cfg->handshake_timeout_ms);
        dp_count(&ep->stats.handshakes_refused, 1);
        sl__dp_report(ep, UINT32_MAX, SL_EAUTH, msg);
        sl__dp_conn_close(c);
      }
      break;
    case DP_HS_REFUSING:
      if (now >= c->deadline_ns) sl__dp_conn_close(c);
      break;
    case DP_OPEN:
      if (cfg->dead_timeout_ms > 0 &&
          now - c->last_rx_ns >= ms_ns(cfg->dead_timeout_ms)) {
        snprintf(why, sizeof why, "nothing received for %d ms",
                 cfg->dead_timeout_ms);
        conn_lost(c, why);
      } else if (now - c->last_tx_ns >= ms_ns(cfg->ping_interval_ms)) {
        sl__dp_send_ctl(c, SL__DP_PING, NULL);
        sl__dp_flush(c);
      }
      break;
    default: break;
    }
  }
}
