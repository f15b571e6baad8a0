/* The data plane as an sl_transport: `send` queues a frame for the loop
 * thread (its payload CRC computed here, on the sending stream thread,
 * so that work is spread over the senders; not at all when the peer takes
 * payloads through shared memory, where the loop thread computes it only
 * for a payload that finds its ring full), and `quiescent` answers the
 * job's hang detector from the last probe replies of every other node.
 *
 * Quiescence across processes (docs/cluster.md): every node counts the
 * messages its job handed to the transport (sent) and the ones taken out
 * of transit (received: delivered, discarded or dropped). The whole
 * cluster is quiescent, with nothing in transit, when every other node
 * reported itself quiescent and the sum of everyone's sent equals the sum
 * of everyone's received. The replies are not one snapshot, but the job's
 * watchdog declares a hang only after these answers (and the sum of the
 * counts and progress, which it compares) stayed the same for its whole
 * timeout, over many probe rounds: the counting termination test with
 * repeated rounds (Mattern, 1987). */
#include <string.h>

#include "dp_int.h"

/* With ep->lock held: SL_OK when peer p still takes frames (the lock stays
 * held); otherwise releases the lock and fails with why: the endpoint is
 * closing, or the peer's own failure. */
static sl_status refuse_if_closed(sl__dp_endpoint *ep, dp_peer *p) {
  if (!ep->closing && !p->failed) return SL_OK;
  char msg[sizeof p->fail_msg];
  sl_status st = ep->closing ? SL_ECOMM : p->fail_st;
  if (ep->closing)
    snprintf(msg, sizeof msg, "data plane: node %u: endpoint closing",
             ep->cfg.node);
  else
    snprintf(msg, sizeof msg, "%s", p->fail_msg);
  pthread_mutex_unlock(&ep->lock);
  return sl__fail(st, "%s", msg);
}

/* Queues o for p's loop (ep->lock held): no sender writes inline to p
 * until the loop has written it. */
static void queue(sl__dp_endpoint *ep, dp_peer *p, dp_out *o) {
  dp_fifo_push(&p->inbox, o);
  p->tx_idle = false;
  if (!p->dirty) {
    p->dirty = true;
    p->next_dirty = ep->dirty;
    ep->dirty = p;
  }
}

/* Whether a payload of len bytes to p may go through shared memory, so
 * that its CRC is left to the loop thread (which computes it only if the
 * ring turns out full); one larger than the ring never does, and gets its
 * CRC here, on the sending thread. */
static bool shm_may_take(const sl__dp_endpoint *ep, dp_peer *p, uint64_t len) {
  return atomic_load(&p->shm) && len <= (uint64_t)ep->cfg.shm_bytes;
}

static sl_status dp_send(void *ctx, uint32_t node, const sl_msg *m,
                         const void *payload, size_t nbytes) {
  sl__dp_endpoint *ep = ctx;
  if (node >= ep->cfg.nnodes || node == ep->cfg.node)
    return sl__fail(SL_ECOMM, "data plane: node %u: no peer %u (%u nodes)",
                    ep->cfg.node, node, ep->cfg.nnodes);
  if (nbytes > ep->cfg.max_frame_bytes)
    return sl__fail(SL_ECOMM,
                    "data plane: a register of %zu bytes exceeds the frame "
                    "limit of %llu bytes",
                    nbytes, (unsigned long long)ep->cfg.max_frame_bytes);
  dp_out *o = sl__malloc(sizeof *o);
  if (!o) return SL_ENOMEM;
  sl__dp_frame_from_msg(m, nbytes, &o->f);
  o->payload = nbytes ? payload : NULL;
  dp_peer *p = &ep->peers[node];
  o->raw = NULL;
  o->raw_len = 0;
  o->crc_pending = nbytes && shm_may_take(ep, p, nbytes);
  o->f.payload_crc =
      nbytes && !o->crc_pending ? sl__crc32c(0, payload, nbytes) : 0;
  o->next = NULL;
  pthread_mutex_lock(&ep->lock);
  sl_status refused = refuse_if_closed(ep, p);
  if (refused != SL_OK) {
    sl__free(o);
    return refused;
  }
  queue(ep, p, o);
  ep->job_sent++;
  bool wake = !ep->woken;
  ep->woken = true;
  pthread_mutex_unlock(&ep->lock);
  if (wake) uv_async_send(&ep->wake);
  return SL_OK;
}

static bool dp_quiescent(void *ctx, uint32_t self, uint64_t *progress) {
  sl__dp_endpoint *ep = ctx;
  (void)self;
  bool all = true;
  pthread_mutex_lock(&ep->lock);
  uint64_t sent = ep->job_sent, received = ep->job_received, sum = 0;
  for (uint32_t i = 0; i < ep->cfg.nnodes; i++) {
    const dp_peer *p = &ep->peers[i];
    if (i == ep->cfg.node) continue;
    if (!p->have_reply || !p->reply_quiescent) {
      all = false;
      continue;
    }
    sent += p->reply_sent;
    received += p->reply_received;
    sum += p->reply_progress;
  }
  /* Ask again for the next call. */
  ep->probe_wanted = true;
  ep->probe_seq++;
  bool wake = !ep->woken && !ep->closing;
  if (wake) ep->woken = true;
  pthread_mutex_unlock(&ep->lock);
  if (wake) uv_async_send(&ep->wake);
  *progress = sum + sent + received;
  return all && sent == received;
}

void sl__dp_endpoint_set_coll(sl__dp_endpoint *ep, const sl__dp_coll_hooks *h,
                              void *ctx) {
  ep->coll = h ? *h : (sl__dp_coll_hooks){0};
  ep->coll_ctx = ctx;
}

enum { INLINE_NONE, INLINE_PART, INLINE_ALL };

/* With ep->lock held and p->tx_idle: writes o to the connection's socket
 * from this thread, sparing the hand-off to the loop thread and its
 * wake-up, which are most of a small collective's latency. Safe because
 * the loop neither writes nor queues a write for this connection while
 * tx_idle holds (it clears it under the lock first), and closes the socket
 * only after clearing it; so the fields of the connection's writing side
 * (its ring's position, the credit it last gave) are this thread's until
 * the lock is released. The payload goes through the shared-memory ring
 * as the loop would put it there, else after the header.
 * INLINE_NONE: nothing was done (the credit window is full, or no memory
 * for the spill): queue o as usual. INLINE_ALL: all of it went out.
 * INLINE_PART: the socket took only part of it (or none, or failed, which
 * the loop then meets itself): the rest is in p->spill and o, queued,
 * carries it for the loop to write before anything else. */
static int write_inline(sl__dp_endpoint *ep, dp_peer *p, dp_out *o) {
  dp_conn *c = p->tx_conn;
  uint64_t len = o->f.len;
  uint64_t of = dp_load(&c->tx_frames) - dp_load(&c->acked_frames);
  uint64_t ob = dp_load(&c->tx_bytes) - dp_load(&c->acked_bytes);
  if (of >= ep->cfg.window_frames ||
      (ob > 0 && ob + len > ep->cfg.window_bytes))
    return INLINE_NONE;
  if (!p->spill && !(p->spill = sl__malloc(SL__DP_HDR_BYTES + DP_INLINE_MAX)))
    return INLINE_NONE;
  bool in_shm =
      len && atomic_load(&p->shm) && sl__dp_shm_put(c->shm, o->payload, len);
  if (in_shm) {
    o->f.flags |= SL__DP_FLAG_SHM;
    o->f.payload_crc = 0;
    dp_count(&ep->stats.payload_bytes_shm, len);
  } else if (o->crc_pending) {
    o->f.payload_crc = sl__crc32c(0, o->payload, (size_t)len);
  }
  o->crc_pending = false;
  /* What the loop last told the peer: never less than it has heard. */
  o->f.credit_frames = c->credited_frames;
  o->f.credit_bytes = c->credited_bytes;
  sl__dp_frame_encode(&o->f, o->hdr);
  size_t body = in_shm ? 0 : (size_t)len;
  /* Counted before the write: the peer's credit for the frame may come
   * back to the loop thread before sendmsg returns here. */
  dp_count(&c->tx_frames, 1);
  dp_count(&c->tx_bytes, len);
  dp_peak(&ep->stats.peak_window_frames, of + 1);
  dp_peak(&ep->stats.peak_window_bytes, ob + len);
  dp_count(&ep->stats.frames_sent, 1);
  dp_count(&ep->stats.frames_inline, 1);
  dp_count(&ep->stats.payload_bytes_sent, len);
  struct iovec iov[2] = {{o->hdr, SL__DP_HDR_BYTES},
                         {(void *)o->payload, body}};
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = body ? 2 : 1};
  /* MSG_NOSIGNAL: a stream thread must not take SIGPIPE for a lost peer. */
  ssize_t n = sendmsg(p->tx_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  size_t total = SL__DP_HDR_BYTES + body, at = n > 0 ? (size_t)n : 0, k = 0;
  if (at == total) return INLINE_ALL;
  dp_count(&ep->stats.frames_inline_part, 1);
  if (at < SL__DP_HDR_BYTES) {
    k = SL__DP_HDR_BYTES - at;
    memcpy(p->spill, o->hdr + at, k);
    at = SL__DP_HDR_BYTES;
  }
  if (total > at)
    memcpy(p->spill + k, (const uint8_t *)o->payload + (at - SL__DP_HDR_BYTES),
           total - at);
  o->raw = p->spill;
  o->raw_len = k + (total - at);
  o->payload = NULL;
  queue(ep, p, o);
  return INLINE_PART;
}

static sl_status send_coll(sl__dp_endpoint *ep, uint32_t node,
                           const sl__dp_frame *f, const void *payload,
                           uint64_t len, uint32_t crc, bool crc_pending,
                           void *token, bool *written) {
  if (node >= ep->cfg.nnodes || node == ep->cfg.node)
    return sl__fail(SL_ECOMM, "data plane: node %u: no peer %u (%u nodes)",
                    ep->cfg.node, node, ep->cfg.nnodes);
  if (len > ep->cfg.max_frame_bytes)
    return sl__fail(SL_ECOMM,
                    "data plane: a collective chunk of %llu bytes exceeds "
                    "the frame limit of %llu bytes",
                    (unsigned long long)len,
                    (unsigned long long)ep->cfg.max_frame_bytes);
  dp_out *o = sl__malloc(sizeof *o);
  if (!o) return SL_ENOMEM;
  o->f = *f;
  o->f.version = SL__DP_VERSION;
  o->f.kind = SL__DP_COLL;
  o->f.flags = 0;
  o->f.len = len;
  o->f.payload_crc = len ? crc : 0;
  o->crc_pending = len && crc_pending;
  o->payload = len ? payload : NULL;
  o->token = token;
  o->raw = NULL;
  o->raw_len = 0;
  o->next = NULL;
  if (written) *written = false;
  dp_peer *p = &ep->peers[node];
  pthread_mutex_lock(&ep->lock);
  sl_status refused = refuse_if_closed(ep, p);
  if (refused != SL_OK) {
    sl__free(o);
    return refused;
  }
  /* In transit for the hang check until the peer has handled it, as a
   * job message is: a collective whose frames are still moving is not
   * hung, however long its members wait. Counted before it is written. */
  ep->job_sent++;
  int done = written && p->tx_idle && len <= DP_INLINE_MAX
                 ? write_inline(ep, p, o)
                 : INLINE_NONE;
  if (done == INLINE_ALL) {
    pthread_mutex_unlock(&ep->lock);
    sl__free(o);
    *written = true;
    return SL_OK;
  }
  if (done == INLINE_NONE) queue(ep, p, o);
  bool wake = !ep->woken;
  ep->woken = true;
  pthread_mutex_unlock(&ep->lock);
  if (wake) uv_async_send(&ep->wake);
  return SL_OK;
}

sl_status sl__dp_endpoint_send_coll(sl__dp_endpoint *ep, uint32_t node,
                                    const sl__dp_frame *f, const void *payload,
                                    uint64_t len, void *token, bool *written) {
  if (node < ep->cfg.nnodes && len && shm_may_take(ep, &ep->peers[node], len))
    return send_coll(ep, node, f, payload, len, 0, true, token, written);
  uint32_t crc = len ? sl__crc32c(0, payload, (size_t)len) : 0;
  return send_coll(ep, node, f, payload, len, crc, false, token, written);
}

sl_status sl__dp_endpoint_send_coll_crc(sl__dp_endpoint *ep, uint32_t node,
                                        const sl__dp_frame *f,
                                        const void *payload, uint64_t len,
                                        uint32_t crc, void *token,
                                        bool *written) {
  return send_coll(ep, node, f, payload, len, crc, false, token, written);
}

static const sl_transport_vtable dp_vtable = {dp_send, dp_quiescent};

sl_transport sl__dp_endpoint_transport(sl__dp_endpoint *ep) {
  return (sl_transport){&dp_vtable, ep};
}

sl_status sl__dp_endpoint_send(sl__dp_endpoint *ep, uint32_t node,
                               const sl_msg *m, const void *payload,
                               size_t nbytes) {
  return dp_send(ep, node, m, payload, nbytes);
}

bool sl__dp_endpoint_quiescent(sl__dp_endpoint *ep, uint32_t self,
                               uint64_t *progress) {
  return dp_quiescent(ep, self, progress);
}
