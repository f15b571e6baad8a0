/* sluice comm — the data plane's private structures, shared by
 * endpoint.c, conn.c and transport.c.
 *
 * Threads: the loop thread owns every libuv handle, every connection and
 * the fields marked (loop). Other threads (stream threads sending, the
 * job's watchdog asking for quiescence, the owner attaching and
 * detaching) touch only the fields marked (lock), under ep->lock, and
 * reach the loop thread through ep->wake. */
#ifndef SLUICE_COMM_DP_INT_H
#define SLUICE_COMM_DP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include <uv.h>

#include "core_thread.h"
#include "dp.h"

/* Messages and control frames written in one uv_write. */
#define DP_BATCH 64
/* Per-connection read buffer: headers, handshake messages and small
 * payloads are read here; payloads with at least DP_DIRECT_MIN bytes still
 * to come are read straight into the register. */
#define DP_STAGING (64u * 1024u)
#define DP_DIRECT_MIN (16u * 1024u)
/* Incoming connections still in their handshake; more are closed at once. */
#define DP_MAX_HANDSHAKING 64
/* A COLL frame with at most this many payload bytes may be written by the
 * sending thread itself when its connection is idle (transport.c). */
#define DP_INLINE_MAX (16u * 1024u)

/* One frame waiting to be written (header and the register's bytes). */
typedef struct dp_out {
  struct dp_out *next;
  sl__dp_frame f;      /* credit fields are filled when it is written */
  const void *payload; /* READY: the sending job's register, not owned */
  void *token;         /* COLL: handed to the sent hook */
  bool crc_pending;    /* payload_crc is computed if it goes over TCP */
  /* The rest of a frame another thread began writing (transport.c):
   * these bytes go out as they are, first, and nothing is charged for
   * them again. Points into the peer's `spill`. */
  const uint8_t *raw;
  size_t raw_len;
  uint8_t hdr[SL__DP_HDR_BYTES];
} dp_out;

typedef struct dp_fifo {
  dp_out *head, *tail;
  size_t n;
} dp_fifo;

enum dp_conn_state {
  DP_CONNECTING,  /* outgoing, TCP connect in progress */
  DP_HS_HELLO,    /* outgoing, waiting for the server's HELLO */
  DP_HS_RESULT,   /* outgoing, PROOF sent, waiting for RESULT */
  DP_HS_PROOF,    /* incoming, HELLO sent, waiting for PROOF */
  DP_HS_REFUSING, /* incoming, refusal written, closing after it */
  DP_OPEN,        /* frames flow */
  DP_CLOSING,     /* uv_close called; freed in its callback */
};

struct dp_peer;

typedef struct dp_conn {
  uv_tcp_t tcp; /* tcp.data = this */
  uv_connect_t creq;
  uv_shutdown_t sreq;
  struct sl__dp_endpoint *ep;
  struct dp_peer *peer; /* outgoing: from the start; incoming: once proved */
  struct dp_conn *next, *prev; /* ep->conns */
  enum dp_conn_state state;
  bool outgoing;
  bool hs_counted;      /* incoming, counted in ep->handshaking */
  char addr[80];        /* the remote address, "127.0.0.1:40123" */
  uint64_t deadline_ns; /* connect or handshake deadline */
  uint64_t last_rx_ns, last_tx_ns;
  uint8_t ns[SL__DP_NONCE_BYTES], nc[SL__DP_NONCE_BYTES];

  /* reading */
  uint8_t *stg; /* DP_STAGING bytes */
  size_t stg_len;
  bool direct; /* the last buffer handed to libuv was the register */
  bool in_payload;
  sl__dp_frame cur; /* the frame whose payload is being read */
  sl_msg msg;
  uint8_t *target; /* where the payload goes; NULL: discarded */
  uint64_t got;
  uint32_t crc;

  /* writing */
  dp_fifo ctl;           /* control frames, written before messages */
  size_t writes;         /* uv_write requests in flight */
  size_t payload_writes; /* frames carrying a job's register, in flight */
  bool stalled;          /* the credit window is full */
  bool done_unacked;     /* a detach's DONE awaits its DONE_ACK */
  bool credit_requested; /* a CREDIT_REQ is out, no credit came since */
  bool idle_published;   /* what the loop last set peer->tx_idle to */

  /* credits: cumulative messages and payload bytes. The tx and acked
   * counts are atomic because a sending thread writing inline (while the
   * loop has nothing to write, transport.c) reads and adds to them as
   * the loop thread reads them; credited_* it only reads then, when the
   * loop is not writing them. */
  atomic_uint_least64_t tx_frames, tx_bytes;       /* written */
  atomic_uint_least64_t acked_frames, acked_bytes; /* consumed, as it said */
  uint64_t rx_frames, rx_bytes;                    /* consumed here */
  uint64_t credited_frames, credited_bytes;        /* told the peer */

  /* shared memory with a peer on this host (shm.c) */
  sl__dp_shm *shm; /* dialer: from its offer; acceptor: once taken */
  bool shm_tx;     /* payloads may go through it */
} dp_conn;

typedef struct dp_peer {
  uint32_t node;
  /* (lock) */
  bool has_addr;
  struct sockaddr_storage addr;
  char addr_text[80];
  dp_fifo inbox; /* from send(), moved to `pending` by the loop */
  bool dirty;    /* on ep->dirty */
  struct dp_peer *next_dirty;
  bool failed; /* sends fail at once until attach/connect/reconnect */
  sl_status fail_st;
  char fail_msg[320];
  bool open; /* mirrors conn != NULL, for waiters */
  /* The loop has nothing queued or being written for this peer, so a
   * sender may write a small COLL frame to tx_conn's socket (tx_fd) itself,
   * holding the lock (transport.c). Set by the loop after a flush or a
   * write; cleared by the loop before it writes, by a sender that queues,
   * and before the connection closes. */
  bool tx_idle;
  int tx_fd;
  struct dp_conn *tx_conn;
  uint8_t *spill; /* DP_INLINE_MAX + header bytes: an inline write's rest */
  /* the last probe reply or DONE (lock) */
  bool have_reply, reply_quiescent;
  uint32_t reply_seq;
  uint64_t reply_progress, reply_sent, reply_received;

  /* (loop) */
  dp_fifo pending;
  dp_conn *conn; /* the open connection */
  dp_conn *dial; /* our connection attempt in progress */
  int32_t attempts;
  uint64_t retry_at_ns;      /* 0: none scheduled */
  struct dp_peer *next_work; /* the wake handler's list */
  bool departed;             /* it sent DONE: closing is not a failure */
  /* Its open connection sends payloads through shared memory, so senders
   * leave the payload CRC to the loop thread (needed only on TCP). */
  atomic_bool shm;
} dp_peer;

/* A request run on the loop thread for another thread, which waits. */
typedef struct dp_call {
  struct dp_call *next;
  void (*fn)(struct sl__dp_endpoint *ep, struct dp_call *c);
  sl_job *job;
  sl__dp_abort_hook abort_hook; /* attach */
  void *abort_ctx;
  uint32_t node;
  sl_status st;
  char err[320];
  bool done; /* (lock) */
} dp_call;

typedef struct dp_counters {
  atomic_uint_least64_t frames_sent, frames_received, frames_inline,
      frames_inline_part, messages_sent, messages_received, payload_bytes_sent,
      payload_bytes_received, payload_bytes_direct, payload_bytes_shm,
      shm_connections, shm_refused, messages_discarded, connections_opened,
      connections_dialed, duplicates_refused, handshakes_refused, bad_frames,
      credit_stalls, peak_window_frames, peak_window_bytes, probes_answered;
} dp_counters;

struct sl__dp_endpoint {
  sl__dp_config cfg; /* defaults resolved; token points to `token` */
  uint8_t *token;
  uint64_t tick_ms;
  uint16_t port;
  char listen_text[80];

  uv_loop_t loop;
  uv_async_t wake;
  uv_tcp_t listener;
  uv_timer_t tick;
  sl__thread thread;
  bool loop_init, listener_init, wake_init, tick_init;

  dp_peer *peers; /* nnodes of them */

  pthread_mutex_t lock;
  pthread_cond_t cond;
  /* (lock) */
  bool closing; /* destroy began: sends fail */
  bool woken;   /* an async wake is pending */
  dp_peer *dirty;
  dp_call *calls;
  bool probe_wanted;
  uint32_t probe_seq;
  bool has_job; /* a job is attached (mirror of `job` for other threads) */
  /* per-job message counts for quiescence: sent = handed to send(),
   * received = delivered, discarded or dropped (no longer in transit) */
  uint64_t job_sent, job_received;

  /* (loop) */
  sl_job *job;
  sl__dp_abort_hook abort_hook; /* the job's embedder's (may be NULL) */
  void *abort_ctx;
  bool job_ended; /* a job was detached since the last attach */
  dp_conn *conns; /* every live connection */
  int32_t handshaking;
  dp_call *detaching; /* a detach waiting for payload writes or acks */
  bool detach_acks;   /* DONE sent: waiting for the acknowledgements */
  uint64_t detach_deadline_ns;
  bool shutting_down;
  uint64_t shutdown_deadline_ns;
  dp_call *shutdown_call;

  sl__dp_coll_hooks coll; /* set before traffic; all NULL: none */
  void *coll_ctx;

  dp_counters stats;
  uint64_t activity; /* (loop) bumped by every callback that did work */
  uint64_t spin_ns;
};

/* ---- endpoint.c ---- */
/* A failure of the pair with `p` (unreachable, lost, a bad frame): the
 * connection and any attempt are closed, queued messages dropped, sends
 * fail from now on, the attached job aborts with msg, the error callback
 * and the log get it. Loop thread. */
void sl__dp_peer_fail(sl__dp_endpoint *ep, dp_peer *p, sl_status st,
                      const char *msg);
/* Opens (or schedules) a connection to p if none is open or coming. */
void sl__dp_peer_want(sl__dp_endpoint *ep, dp_peer *p);
/* Per-job message count of frames taken out of transit. */
void sl__dp_count_received(sl__dp_endpoint *ep, uint64_t n);
/* The callback and the log for failures not tied to a proved peer. */
void sl__dp_report(sl__dp_endpoint *ep, uint32_t node, sl_status st,
                   const char *msg);
/* Stores a peer's probe reply or DONE. */
void sl__dp_peer_reply(sl__dp_endpoint *ep, dp_peer *p, const sl__dp_frame *f);
/* The reply this node gives a probe: its job's state and counts. */
void sl__dp_local_state(sl__dp_endpoint *ep, bool *quiescent,
                        uint64_t *progress, uint64_t *sent, uint64_t *received);
/* Called when a payload write finishes, a DONE_ACK arrives or a
 * connection closes, to move a waiting detach on. */
void sl__dp_check_detach(sl__dp_endpoint *ep);
/* Called when a write finishes during shutdown. */
void sl__dp_check_shutdown(sl__dp_endpoint *ep);

/* Frees a queued frame; a COLL frame's sent hook gets st. */
void sl__dp_out_free(sl__dp_endpoint *ep, dp_out *o, sl_status st);

/* ---- conn.c ---- */
void sl__dp_on_connection(uv_stream_t *server, int status);
/* Starts an outgoing connection attempt to p (p->dial). */
void sl__dp_dial(sl__dp_endpoint *ep, dp_peer *p);
/* Writes what p's connection may write now: control frames, then queued
 * messages as credits allow. */
void sl__dp_flush(dp_conn *c);
/* Queues a control frame of `kind` on c (fields from f when not NULL). */
void sl__dp_send_ctl(dp_conn *c, unsigned kind, const sl__dp_frame *f);
/* Publishes whether senders may write to c themselves (tx_idle). */
void sl__dp_tx_idle_update(dp_conn *c);
/* Closes c (idempotent); it is freed in the close callback. */
void sl__dp_conn_close(dp_conn *c);
/* Deadlines, pings and liveness of every connection; run by the tick. */
void sl__dp_conns_tick(sl__dp_endpoint *ep, uint64_t now);

/* fifo helpers */
static inline void dp_fifo_push(dp_fifo *q, dp_out *o) {
  o->next = NULL;
  if (q->tail)
    q->tail->next = o;
  else
    q->head = o;
  q->tail = o;
  q->n++;
}
static inline dp_out *dp_fifo_pop(dp_fifo *q) {
  dp_out *o = q->head;
  if (!o) return NULL;
  q->head = o->next;
  if (!q->head) q->tail = NULL;
  q->n--;
  o->next = NULL;
  return o;
}
/* Appends all of `from` to `to`, leaving `from` empty. */
static inline void dp_fifo_splice(dp_fifo *to, dp_fifo *from) {
  if (!from->head) return;
  if (to->tail)
    to->tail->next = from->head;
  else
    to->head = from->head;
  to->tail = from->tail;
  to->n += from->n;
  *from = (dp_fifo){0};
}

static inline void dp_count(atomic_uint_least64_t *c, uint64_t n) {
  atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
static inline uint64_t dp_load(atomic_uint_least64_t *c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}
static inline void dp_peak(atomic_uint_least64_t *c, uint64_t v) {
  if (v > atomic_load_explicit(c, memory_order_relaxed))
    atomic_store_explicit(c, v, memory_order_relaxed);
}

#endif
