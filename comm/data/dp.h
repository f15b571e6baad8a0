/* sluice comm — the data plane: one libuv TCP connection per node pair,
 * opened lazily with a token handshake, carrying the actor runtime's
 * messages and register bytes as checksummed frames (DESIGN.md section 8;
 * docs/cluster.md explains the protocol and its choices).
 *
 * An endpoint is one process's end of the data plane: a listening socket,
 * one event-loop thread that owns every connection, a table of peer
 * addresses, and at most one attached job at a time. Its sl_transport
 * (sl__dp_endpoint_transport) goes into the job's sl_job_config; `send` only
 * enqueues to the loop thread, which writes frames header-and-register
 * without copying, reads large payloads straight into the receiving job's
 * register and delivers with sl_job_deliver.
 *
 * The pieces, one per file:
 *   frame.c      the frame header codec and its checks
 *   handshake.c  the handshake: HMAC-SHA256 challenge-response messages
 *   endpoint.c   the loop thread, peers, attach/detach, probes
 *   conn.c       connections: dialing, handshake, reading, writing,
 *                credits, failures
 *   transport.c  the sl_transport binding (send, quiescent)
 *   shm.c        the shared-memory rings of a pair on one host
 * Not installed: the control plane and the session use it. */
#ifndef SLUICE_COMM_DP_H
#define SLUICE_COMM_DP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice/actor.h>

#include "core_int.h"

/* ---- CRC32C: core/crc32c.h ---------------------------------------------- */
#include "crc32c.h"

/* ---- frames -------------------------------------------------------------- */

/* Every frame is a fixed 80-byte header followed by `len` payload bytes.
 * Integers are little-endian on the wire. Layout (offsets):
 *   0 magic "SLDP"   4 version   5 kind   6 flags
 *   8 src   16 dst   24 piece   32 desc   36 index   40 slot   42 consumer
 *   44 msg_kind   45 cmd   46 origin   48 len
 *   56 credit_frames   64 credit_bytes   72 payload CRC32C
 *   76 header CRC32C (of bytes 0..75)
 * Fields 8..47 are an sl_msg for SL__DP_MSG frames and reused by the
 * control kinds as documented below. */
#define SL__DP_MAGIC 0x50444c53u /* "SLDP" as little-endian bytes */
#define SL__DP_VERSION 2u
#define SL__DP_HDR_BYTES 80u

typedef enum sl__dp_kind {
  SL__DP_MSG = 1,         /* an actor message; READY carries the register */
  SL__DP_CREDIT = 2,      /* only the header's credit fields */
  SL__DP_CREDIT_REQ = 3,  /* "send me credit": the sender's window is full */
  SL__DP_PING = 4,        /* keeps an idle connection's liveness fresh */
  SL__DP_PROBE = 5,       /* quiescence probe; desc = sequence number */
  SL__DP_PROBE_REPLY = 6, /* desc = probe's sequence, src = progress,
                             dst = messages sent, piece = messages received,
                             flags & QUIESCENT */
  SL__DP_DONE = 7,        /* the sender's job ended (detach); fields as a
                             PROBE_REPLY with its final counts */
  SL__DP_DONE_ACK = 8,    /* DONE was received */
  SL__DP_COLL = 9,        /* a chunk of a collective between nodes
                             (comm/coll/net_coll.h): src = group, dst =
                             sequence, piece = byte offset, desc = step,
                             index = lane,
                             slot = op, consumer = dtype; may carry a
                             payload; counted in the credit window like a
                             message, but not in the job's message counts */
  SL__DP_SHM_OFFER = 10,  /* the dialer offers a shared-memory segment
                             (shm.c): src, dst = its 16-byte id (pid,
                             descriptor, cookie), piece =
                             bytes per ring */
  SL__DP_SHM_REPLY = 11,  /* the acceptor's answer: desc = 1 taken (payloads
                             may use the rings from now on), 0 refused */
} sl__dp_kind;
#define SL__DP_KIND_MAX 11

/* Flag bits; any other bit set is a malformed frame. */
#define SL__DP_FLAG_QUIESCENT 0x1u /* PROBE_REPLY, DONE */
/* A MSG or COLL frame's payload is in the sender's shared-memory ring, not
 * on the stream; its payload CRC is 0. */
#define SL__DP_FLAG_SHM 0x2u
#define SL__DP_FLAGS_KNOWN 0x3u

typedef struct sl__dp_frame {
  uint8_t version, kind;
  uint16_t flags;
  uint64_t src, dst;
  int64_t piece;
  int32_t desc, index;
  uint16_t slot, consumer;
  uint8_t msg_kind, cmd;
  uint16_t origin;
  uint64_t len;
  /* Cumulative count of frames (and their payload bytes) the sender of this
   * frame has consumed from its peer on this connection: the credit. */
  uint64_t credit_frames, credit_bytes;
  uint32_t payload_crc;
} sl__dp_frame;

/* Writes the 80-byte header of f (its header CRC computed here). */
void sl__dp_frame_encode(const sl__dp_frame *f, uint8_t out[SL__DP_HDR_BYTES]);

/* Parses and checks a header: magic, version, header CRC, kind, flags,
 * length (at most max_len; zero for every kind but a READY message), and
 * for messages a known message kind. SL_ECOMM with the failed check in
 * sl_last_error() ("bad frame: header checksum mismatch"); *out is then
 * zeroed. */
sl_status sl__dp_frame_decode(const uint8_t hdr[SL__DP_HDR_BYTES],
                              uint64_t max_len, sl__dp_frame *out);

/* The message of a SL__DP_MSG frame, and the frame of a message. */
void sl__dp_frame_to_msg(const sl__dp_frame *f, sl_msg *out);
void sl__dp_frame_from_msg(const sl_msg *m, uint64_t len, sl__dp_frame *out);

/* "msg", "credit", ... ("?" for others). */
const char *sl__dp_kind_name(unsigned kind);

/* ---- handshake ------------------------------------------------------------
 */

/* A connection opens with three fixed-size messages (magic "SLHS"; the
 * version byte sits at offset 4 in every version, so a peer speaking
 * another version is recognised and told so):
 *   server -> client  HELLO   its rank, the cluster size, nonce Ns
 *   client -> server  PROOF   its rank, the rank it dialed, the cluster
 *                             size, nonce Nc, HMAC-SHA256(token, "C"...)
 *   server -> client  RESULT  a code; for OK, HMAC-SHA256(token, "S"...)
 * Both MACs cover the label "sluice-dp-v1", a role byte, the version, Ns,
 * Nc, both ranks and the cluster size, so neither can be replayed,
 * reflected or moved to another pair of nodes, and the token never crosses
 * the wire. Verification uses CRYPTO_memcmp. */
#define SL__DP_HS_MAGIC 0x53484c53u /* "SLHS" */
#define SL__DP_NONCE_BYTES 32u
#define SL__DP_MAC_BYTES 32u
#define SL__DP_HELLO_BYTES 48u
#define SL__DP_PROOF_BYTES 88u
#define SL__DP_RESULT_BYTES 48u

typedef enum sl__dp_hs_type {
  SL__DP_HS_HELLO = 1,
  SL__DP_HS_PROOF = 2,
  SL__DP_HS_RESULT = 3,
} sl__dp_hs_type;

typedef enum sl__dp_hs_code {
  SL__DP_HS_OK = 0,
  SL__DP_HS_AUTH = 1,      /* the proof did not verify: wrong token */
  SL__DP_HS_VERSION = 2,   /* the client speaks another version */
  SL__DP_HS_RANK = 3,      /* wrong rank or cluster size */
  SL__DP_HS_DUPLICATE = 4, /* this pair already has (or is opening) its
                              connection the other way: use that one */
} sl__dp_hs_code;
#define SL__DP_HS_CODE_MAX 4

/* A decoded handshake message (fields a message type lacks are zero). */
typedef struct sl__dp_hs {
  uint8_t version, type, code;
  uint32_t rank;      /* HELLO, RESULT: the server's; PROOF: the client's */
  uint32_t peer_rank; /* PROOF: the rank the client dialed */
  uint32_t nnodes;    /* HELLO, PROOF */
  uint8_t nonce[SL__DP_NONCE_BYTES]; /* HELLO: Ns; PROOF: Nc */
  uint8_t mac[SL__DP_MAC_BYTES];     /* PROOF; RESULT with OK */
} sl__dp_hs;

/* Size of a message type's encoding (0 for an unknown type). */
size_t sl__dp_hs_size(unsigned type);
/* Encodes m (m->type says which) into out, which holds
 * sl__dp_hs_size(m->type) bytes; returns that size. */
size_t sl__dp_hs_encode(const sl__dp_hs *m, uint8_t *out);
/* Decodes a message of the expected type from exactly
 * sl__dp_hs_size(type) bytes: magic, type, reserved bytes, code. A
 * different version is not an error here: callers compare m->version
 * (the rest is decoded only when the version matches; SL_EUNSUPPORTED with
 * m->version set otherwise). SL_ECOMM for anything malformed. */
sl_status sl__dp_hs_decode(const uint8_t *in, size_t n, unsigned type,
                           sl__dp_hs *out);

/* Fills n bytes from OpenSSL's CSPRNG. SL_EINTERNAL on failure. */
sl_status sl__dp_random(void *p, size_t n);
/* HMAC-SHA256(token, label || role || version || Ns || Nc || client rank
 * || server rank || nnodes): role 'C' for the client's proof, 'S' for the
 * server's. SL_EINTERNAL when libcrypto fails. */
sl_status sl__dp_mac(const void *token, size_t token_len, char role,
                     const uint8_t ns[SL__DP_NONCE_BYTES],
                     const uint8_t nc[SL__DP_NONCE_BYTES], uint32_t client,
                     uint32_t server, uint32_t nnodes,
                     uint8_t out[SL__DP_MAC_BYTES]);
/* Recomputes the MAC and compares in constant time: true when it matches. */
bool sl__dp_mac_verify(const void *token, size_t token_len, char role,
                       const uint8_t ns[SL__DP_NONCE_BYTES],
                       const uint8_t nc[SL__DP_NONCE_BYTES], uint32_t client,
                       uint32_t server, uint32_t nnodes,
                       const uint8_t mac[SL__DP_MAC_BYTES]);
/* "ok", "wrong token", ... */
const char *sl__dp_hs_code_str(unsigned code);

/* ---- shared memory (shm.c) ---------------------------------------------
 * Two endpoints on one host move payloads through a segment of two rings
 * (one per direction) instead of the socket; the frames' headers still go
 * over TCP, in order. The loop thread of each end is the only user of its
 * side. */
#define SL__DP_SHM_ID_BYTES 16u

typedef struct sl__dp_shm sl__dp_shm;

/* True for a ring size the segment can have: a multiple of 4096 bytes,
 * from 4 KiB to 16 GiB. */
bool sl__dp_shm_ring_ok(uint64_t ring_bytes);
/* The dialer's side: creates an unnamed segment in /dev/shm (mode 0600,
 * its memory reserved at once) whose header carries mac (the acceptor
 * checks it), and fills id with where the acceptor finds it: this
 * process's id, the descriptor that holds it, a random cookie the header
 * repeats. No name exists, so nothing outlives the processes that map
 * it. SL_EINVAL, SL_EIO (also: no room in /dev/shm), SL_ENOMEM. */
sl_status sl__dp_shm_create(uint64_t ring_bytes,
                            const uint8_t mac[SL__DP_MAC_BYTES],
                            uint8_t id[SL__DP_SHM_ID_BYTES], sl__dp_shm **out);
/* The acceptor's side: maps the segment `id` offered with ring_bytes
 * (/proc/<pid>/fd/<fd>) after checking that it is a regular file of this
 * user of that size, and checks its header and cookie. SL_ENOTFOUND (no
 * such process or descriptor visible here: the dialer runs on another
 * host, or withdrew it), SL_EINVAL, SL_EIO. The caller verifies the
 * header's MAC (sl__dp_shm_mac). */
sl_status sl__dp_shm_open(const uint8_t id[SL__DP_SHM_ID_BYTES],
                          uint64_t ring_bytes, sl__dp_shm **out);
const uint8_t *sl__dp_shm_mac(const sl__dp_shm *s);
/* The dialer, once answered: closes the descriptor its offer named, so
 * that no other process can open the segment any more (the mappings
 * stay); idempotent; destroy does it too. */
void sl__dp_shm_withdraw(sl__dp_shm *s);
/* Unmaps (and withdraws); NULL is a no-op. */
void sl__dp_shm_destroy(sl__dp_shm *s);
/* Sender: copies len bytes into this end's ring and returns true, or
 * returns false when len is 0, larger than the ring, or finds no room
 * (the frame goes over the socket then). */
bool sl__dp_shm_put(sl__dp_shm *s, const void *p, uint64_t len);
/* Receiver: where the next payload of len bytes lies in the peer's ring
 * (*p); it stays there until sl__dp_shm_release. SL_ECOMM when the sender
 * did not write it (a broken peer). */
sl_status sl__dp_shm_take(sl__dp_shm *s, uint64_t len, const uint8_t **p);
/* Frees the space of every payload taken so far. */
void sl__dp_shm_release(sl__dp_shm *s);

/* ---- endpoints ------------------------------------------------------------
 */

typedef struct sl__dp_endpoint sl__dp_endpoint;

/* Called on the loop thread for every failure the endpoint sees: a peer
 * lost or unreachable (node = its rank), a bad frame, a refused handshake
 * (node = UINT32_MAX when the peer never proved who it is). msg names the
 * peer and the check; valid during the call. It must not call the
 * endpoint functions that wait for the loop thread (attach, detach,
 * connect, destroy). */
typedef void (*sl__dp_error_fn)(void *ctx, uint32_t node, sl_status st,
                                const char *msg);

typedef struct sl__dp_config {
  uint32_t node;           /* this endpoint's rank, < nnodes */
  uint32_t nnodes;         /* ranks 0..nnodes-1; >= 1 */
  const char *listen_host; /* numeric IPv4/IPv6; NULL: "127.0.0.1" */
  uint16_t listen_port;    /* 0: an ephemeral port (see _port) */
  const void *token;       /* required, copied: the shared secret */
  size_t token_len;
  /* Dialing: each attempt may take connect_timeout_ms; after a failed one
   * the next starts retry_delay_ms later, doubling each time, up to
   * connect_retries more attempts; then the peer is unreachable. 0 picks
   * the default (2000 ms, 4 retries, 50 ms); connect_retries < 0: none. */
  int32_t connect_timeout_ms;
  int32_t connect_retries;
  int32_t retry_delay_ms;
  int32_t handshake_timeout_ms; /* 0: 5000 */
  /* Liveness: a connection that sent nothing for ping_interval_ms sends a
   * PING; one that received nothing for dead_timeout_ms is lost. 0: 1000
   * and 10000; dead_timeout_ms < 0: never. */
  int32_t ping_interval_ms;
  int32_t dead_timeout_ms;
  /* After handling events the loop thread keeps polling (without
   * sleeping) for this long before it blocks, which can save a thread
   * wake-up per message where cores are spare; it costs CPU time, and on
   * a machine with fewer cores than busy threads it makes things slower
   * (docs/cluster.md). 0: SLUICE_DP_SPIN_US, else off; negative: off. */
  int32_t spin_us;
  /* Shared memory with peers on the same host: bytes per ring and
   * direction (rounded up to 4 KiB; the dialer's size, at most the
   * acceptor's). 0: SLUICE_DP_SHM_BYTES (bytes, or with K, M, G), else
   * 32 MiB; negative (or SLUICE_DP_SHM_BYTES=0): off, all on TCP. */
  int64_t shm_bytes;
  /* Credit window per connection: messages (and their payload bytes)
   * written but not yet consumed by the receiver. A message larger than
   * window_bytes still goes out, alone. 0: 1024 and 256 MiB. */
  uint32_t window_frames;
  uint64_t window_bytes;
  uint64_t max_frame_bytes; /* largest payload accepted; 0: 16 GiB */
  sl__dp_error_fn on_error;
  void *on_error_ctx;
} sl__dp_config;

/* Binds and listens (so a port in use fails here: SL_EIO
 * "127.0.0.1:PORT: address in use"), then starts the loop thread.
 * SL_EINVAL for a bad config (no token, node >= nnodes, bad address),
 * SL_EIO for socket errors, SL_ENOMEM, SL_EINTERNAL. */
sl_status sl__dp_endpoint_create(const sl__dp_config *cfg,
                                 sl__dp_endpoint **out);

/* Closes every connection (peers see this node lost unless it detached
 * its job first), stops and joins the loop thread and frees the endpoint;
 * NULL is a no-op. No job may still use its transport: wait for it (and
 * detach) first. */
void sl__dp_endpoint_destroy(sl__dp_endpoint *ep);

/* The port the endpoint listens on (the bound one when 0 was asked). */
uint16_t sl__dp_endpoint_port(const sl__dp_endpoint *ep);
uint32_t sl__dp_endpoint_node(const sl__dp_endpoint *ep);

/* Sets where node `node` listens (numeric IPv4/IPv6 or a host name,
 * resolved here). Any thread but the endpoint's loop thread (its hooks),
 * any time. A connection already open stays, except when the address
 * changes and the node said DONE on that connection: it belongs to the
 * node's previous process, and is closed (quietly, before this returns)
 * so that its later end of stream is not taken for a loss in the next
 * job. SL_EINVAL for a bad node or address. */
sl_status sl__dp_endpoint_set_peer(sl__dp_endpoint *ep, uint32_t node,
                                   const char *host, uint16_t port);

/* Starts opening the connection to `node` now instead of on the first
 * message (it is opened once per pair either way). SL_EINVAL, SL_ESTATE
 * (endpoint closing). */
sl_status sl__dp_endpoint_connect(sl__dp_endpoint *ep, uint32_t node);

/* Waits up to timeout_ms for an open connection to `node`. SL_OK,
 * SL_ETIMEOUT, or the peer's failure (SL_ECOMM, SL_EAUTH). */
sl_status sl__dp_endpoint_wait_connected(sl__dp_endpoint *ep, uint32_t node,
                                         int64_t timeout_ms);

/* The transport for the job's sl_job_config. Valid while the endpoint is. */
sl_transport sl__dp_endpoint_transport(sl__dp_endpoint *ep);

/* The transport's two calls, for transports that wrap this one (the
 * daemon's and the remote session's add their own steps around them). */
sl_status sl__dp_endpoint_send(sl__dp_endpoint *ep, uint32_t node,
                               const sl_msg *m, const void *payload,
                               size_t nbytes);
bool sl__dp_endpoint_quiescent(sl__dp_endpoint *ep, uint32_t self,
                               uint64_t *progress);

/* Makes incoming messages go to job (created with this endpoint's
 * transport, for this endpoint's node), and resets the per-job counters
 * and any earlier peer failure. Every node's job must be attached before
 * any is started (the control plane's barrier); messages arriving with no
 * job attached are discarded. SL_EINVAL (wrong node), SL_ESTATE (a job is
 * attached, or the endpoint is closing). */
sl_status sl__dp_endpoint_attach(sl__dp_endpoint *ep, sl_job *job);
/* An ABORT from another node, offered first to its embedder (the session
 * of the job attached): true when it has taken the message over, to hand
 * it to the job itself later (sl_job_deliver), false to have it delivered
 * now. Called on the endpoint's loop thread. */
typedef bool (*sl__dp_abort_hook)(void *ctx, const sl_msg *m);
/* sl__dp_endpoint_attach, ABORTs offered to hook(ctx, ...) until the
 * detach. */
sl_status sl__dp_endpoint_attach_hooked(sl__dp_endpoint *ep, sl_job *job,
                                        sl__dp_abort_hook hook, void *ctx);

/* Detaches the job after sl_job_wait returned: drops its register
 * payloads still queued (only an aborted job leaves any), waits for the
 * ones being written (at most dead_timeout_ms, then closes that
 * connection), and tells every connected peer this node's job is done, so
 * that closing the connection later is not a failure for them; returns
 * when they acknowledged it (within the same deadline). The job's memory
 * is then no longer referenced: sl_job_destroy may follow. A no-op
 * without a job. */
void sl__dp_endpoint_detach(sl__dp_endpoint *ep);

typedef struct sl__dp_stats {
  uint64_t frames_sent, frames_received; /* every kind */
  uint64_t frames_inline; /* of those sent, written by the sending thread */
  uint64_t frames_inline_part; /* of those, the loop wrote the rest */
  uint64_t messages_sent, messages_received;
  uint64_t payload_bytes_sent, payload_bytes_received;
  uint64_t payload_bytes_direct; /* read straight into registers */
  uint64_t payload_bytes_shm;    /* sent through a shared-memory ring */
  uint64_t shm_connections;      /* connections that took a segment */
  uint64_t shm_refused;          /* this end's offers the peer refused */
  uint64_t messages_discarded;   /* arrived with no job to take them */
  uint64_t connections_opened;   /* handshakes completed, both ways */
  uint64_t connections_dialed;   /* of those, opened by this endpoint */
  uint64_t duplicates_refused;   /* simultaneous dials resolved */
  uint64_t handshakes_refused;   /* wrong token, version, rank */
  uint64_t bad_frames;           /* frames that failed a check */
  uint64_t credit_stalls;        /* times a window was full */
  uint64_t peak_window_frames;   /* most messages unacknowledged at once */
  uint64_t peak_window_bytes;    /* most payload bytes unacknowledged */
  uint64_t probes_answered;
} sl__dp_stats;

/* A snapshot of the counters (any thread). */
void sl__dp_endpoint_get_stats(sl__dp_endpoint *ep, sl__dp_stats *out);

/* ---- collective chunks (SL__DP_COLL) ---------------------------------------
 * A second client of the connections besides the job: comm/coll/net_coll.c. Its
 * hooks run on the loop thread, never with the endpoint's lock held. */
typedef struct sl__dp_coll_hooks {
  /* A COLL frame from `node` begins: *buf gets where its f->len payload
   * bytes go (NULL: they are read and dropped). For a payload in shared
   * memory (f->flags & SL__DP_FLAG_SHM) *buf comes in pointing at the
   * bytes themselves, readable until `received` returns: leaving it there
   * reads them in place, without a copy. Another status makes it a bad
   * frame (the pair fails) with sl_last_error() as the reason. */
  sl_status (*target)(void *ctx, uint32_t node, const sl__dp_frame *f,
                      void **buf);
  /* Its payload arrived in *buf (checksum verified, or in shared memory). */
  void (*received)(void *ctx, uint32_t node, const sl__dp_frame *f, void *buf);
  /* A frame given to sl__dp_endpoint_send_coll is written (SL_OK) or
   * dropped (the pair failed, the endpoint closed): its payload is no
   * longer referenced. Called exactly once per accepted send. */
  void (*sent)(void *ctx, void *token, sl_status st);
  /* The pair with `node` failed (after its queued frames were dropped). */
  void (*failed)(void *ctx, uint32_t node, sl_status st, const char *msg);
  /* `node` closed its connection after saying its job ended (DONE), which
   * is no failure of the pair (it may come back), but ends whatever it
   * was part of. */
  void (*closed)(void *ctx, uint32_t node, const char *msg);
} sl__dp_coll_hooks;

/* Installs the hooks (copied); before any COLL frame is sent or can
 * arrive. Frames arriving with no hooks are dropped. */
void sl__dp_endpoint_set_coll(sl__dp_endpoint *ep, const sl__dp_coll_hooks *h,
                              void *ctx);

/* Queues a COLL frame (f's kind, version, length and checksum are set
 * here) with len payload bytes, written straight from payload, which must
 * stay unchanged until the sent hook is called with token. Any thread,
 * including the loop thread inside a hook. SL_OK: `sent` will be called,
 * unless *written says the frame is already out: with `written` not NULL,
 * a frame of at most 16 KiB of payload to a peer whose connection has
 * nothing else to write is written by this thread at once (sparing the
 * loop thread's wake-up), *written is true, and no `sent` follows (the
 * caller may hold a lock the hook takes). SL_ECOMM (no such peer, pair
 * failed, endpoint closing), SL_ENOMEM: neither. */
sl_status sl__dp_endpoint_send_coll(sl__dp_endpoint *ep, uint32_t node,
                                    const sl__dp_frame *f, const void *payload,
                                    uint64_t len, void *token, bool *written);
/* The same with the payload's CRC32C given (a chunk forwarded unchanged
 * keeps the CRC it arrived with, verified then). */
sl_status sl__dp_endpoint_send_coll_crc(sl__dp_endpoint *ep, uint32_t node,
                                        const sl__dp_frame *f,
                                        const void *payload, uint64_t len,
                                        uint32_t crc, void *token,
                                        bool *written);

#endif
