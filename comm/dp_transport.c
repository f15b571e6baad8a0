/* The data plane as an sl_transport: `send` queues a frame for the loop
 * thread (its payload CRC computed here, on the sending stream thread,
 * so that work is spread over the senders; not at all when the peer takes
 * payloads through shared memory, where the loop thread computes it only
 * for a payload that finds its ring full), and `quiescent` answers the
 * job's hang detector from the last probe replies of every other node.
 *
 * Quiescence across processes (docs/dataplane.md): every node counts the
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
  dp_fifo_push(&p->inbox, o);
  ep->job_sent++;
  if (!p->dirty) {
    p->dirty = true;
    p->next_dirty = ep->dirty;
    ep->dirty = p;
  }
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

static sl_status send_coll(sl__dp_endpoint *ep, uint32_t node,
                           const sl__dp_frame *f, const void *payload,
                           uint64_t len, uint32_t crc, bool crc_pending,
                           void *token) {
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
  o->next = NULL;
  dp_peer *p = &ep->peers[node];
  pthread_mutex_lock(&ep->lock);
  sl_status refused = refuse_if_closed(ep, p);
  if (refused != SL_OK) {
    sl__free(o);
    return refused;
  }
  dp_fifo_push(&p->inbox, o);
  if (!p->dirty) {
    p->dirty = true;
    p->next_dirty = ep->dirty;
    ep->dirty = p;
  }
  bool wake = !ep->woken;
  ep->woken = true;
  pthread_mutex_unlock(&ep->lock);
  if (wake) uv_async_send(&ep->wake);
  return SL_OK;
}

sl_status sl__dp_endpoint_send_coll(sl__dp_endpoint *ep, uint32_t node,
                                    const sl__dp_frame *f, const void *payload,
                                    uint64_t len, void *token) {
  if (node < ep->cfg.nnodes && len && shm_may_take(ep, &ep->peers[node], len))
    return send_coll(ep, node, f, payload, len, 0, true, token);
  uint32_t crc = len ? sl__crc32c(0, payload, (size_t)len) : 0;
  return send_coll(ep, node, f, payload, len, crc, false, token);
}

sl_status sl__dp_endpoint_send_coll_crc(sl__dp_endpoint *ep, uint32_t node,
                                        const sl__dp_frame *f,
                                        const void *payload, uint64_t len,
                                        uint32_t crc, void *token) {
  return send_coll(ep, node, f, payload, len, crc, false, token);
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
