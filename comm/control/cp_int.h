/* sluice comm — the control plane's private interface, shared by the
 * files of comm/control/ (cp.h is what the rest of sluice uses;
 * docs/cluster.md is the design). Layers, bottom up:
 *
 *   wire.c    methods, message (de)serialization with every field
 *             checked (what tests/fuzz/fuzz_control.c drives), statuses
 *   auth.c    nonces, HMAC-SHA256, HKDF session keys, replay windows
 *   rpc.c     one unary gRPC call from the client side; gRPC set-up
 *   master.c  the master's state machine: members, auth, heartbeats,
 *             dispatch and parked calls
 *   store.c   the key-value store and barriers
 *   job.c     plans, jobs and results
 *   server.c  the gRPC server and its completion-queue thread
 *   client.c  the client, its calls and its heartbeat thread
 *   env.c     bootstrap from the environment */
#ifndef SLUICE_CP_INT_H
#define SLUICE_CP_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "control.pb-c.h"
#include "cp.h"

/* ---- wire (wire.c) -------------------------------------------------- */

typedef enum sl__cp_method {
  SL__CP_HELLO = 0,
  SL__CP_JOIN,
  SL__CP_MEMBERS,
  SL__CP_HEARTBEAT,
  SL__CP_LEAVE,
  SL__CP_KV_PUT,
  SL__CP_KV_GET,
  SL__CP_BARRIER,
  SL__CP_PLAN_SUBMIT,
  SL__CP_PLAN_FETCH,
  SL__CP_JOB_START,
  SL__CP_JOB_STOP,
  SL__CP_JOB_REPORT,
  SL__CP_JOB_STATUS,
  SL__CP_RESULT_PUT,
  SL__CP_RESULT_GET,
  SL__CP_N_METHODS
} sl__cp_method;

typedef struct sl__cp_method_desc {
  const char *name; /* "Join" */
  const char *path; /* "/sluice.cp.Control/Join" */
  const ProtobufCMessageDescriptor *request, *reply;
} sl__cp_method_desc;

extern const sl__cp_method_desc sl__cp_methods[SL__CP_N_METHODS];

/* The method of a gRPC path; -1 when none. */
int sl__cp_method_find(const char *path, size_t len);

/* Every message type of control.proto (the envelope first), for the fuzz
 * target and tests. */
extern const ProtobufCMessageDescriptor *const sl__cp_messages[];
extern const size_t sl__cp_n_messages;

/* Unpacks buf as a message of type d and checks every field (lengths of
 * nonces and MACs, names non-empty and bounded, enums in range, ranks and
 * statuses in range, sizes within limits): SL_EINVAL naming the message and
 * the field when anything is off. *out is freed with sl__cp_msg_free. */
sl_status sl__cp_decode(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                        size_t len, ProtobufCMessage **out);
/* The checks alone, for messages built in memory. */
sl_status sl__cp_check(const ProtobufCMessage *m);
void sl__cp_msg_free(ProtobufCMessage *m);
/* Serializes m into a new buffer (sl__free). SL_ENOMEM. */
sl_status sl__cp_pack(const ProtobufCMessage *m, uint8_t **buf, size_t *len);

/* sl_status <-> gRPC status code (grpc_status_code values; the C enum is
 * kept out of this header so the fuzz build needs no gRPC). */
int sl__cp_status_to_grpc(sl_status st);
sl_status sl__cp_status_from_grpc(int code);

/* ---- auth (auth.c) -------------------------------------------------- */

#define SL__CP_NONCE_BYTES 32
#define SL__CP_KEY_BYTES 32
#define SL__CP_MAC_BYTES 32

typedef enum sl__cp_mac_label {
  SL__CP_MAC_JOIN = 0,  /* a join, keyed by the token */
  SL__CP_MAC_CALL = 1,  /* a request, keyed by the session key */
  SL__CP_MAC_REPLY = 2, /* a reply, keyed by the session key */
} sl__cp_mac_label;

/* n bytes from OpenSSL's CSPRNG. SL_EINTERNAL if it fails. */
sl_status sl__cp_random(uint8_t *buf, size_t n);
/* HMAC-SHA256 over a length-prefixed encoding of (label, method, member,
 * counter, body), so no two different tuples share an input. */
sl_status sl__cp_mac(const uint8_t *key, size_t key_len, sl__cp_mac_label label,
                     sl__cp_method method, uint32_t member, uint64_t counter,
                     const uint8_t *body, size_t len,
                     uint8_t mac[SL__CP_MAC_BYTES]);
/* Computes the MAC and compares it in constant time. */
bool sl__cp_mac_ok(const uint8_t *key, size_t key_len, sl__cp_mac_label label,
                   sl__cp_method method, uint32_t member, uint64_t counter,
                   const uint8_t *body, size_t len, const uint8_t *mac,
                   size_t mac_len);
/* A member's session key: HKDF-SHA256 with the token as input key material,
 * both nonces as salt and the member id and rank in the info. */
sl_status sl__cp_session_key(const char *token, const uint8_t *server_nonce,
                             const uint8_t *client_nonce, uint32_t member,
                             int32_t rank, uint8_t key[SL__CP_KEY_BYTES]);

/* Accepts each counter at most once, in any order within the last
 * SL__CP_REPLAY_WINDOW counters (calls from several threads of one client
 * may overtake each other); older or repeated ones are refused. */
#define SL__CP_REPLAY_WINDOW 256
typedef struct sl__cp_replay {
  uint64_t top; /* highest counter accepted; 0 = none */
  uint64_t seen[SL__CP_REPLAY_WINDOW / 64];
} sl__cp_replay;
bool sl__cp_replay_accept(sl__cp_replay *w, uint64_t counter);

/* ---- client-side calls (rpc.c) -------------------------------------- */

/* grpc_init / grpc_shutdown, counted: sl__cp_grpc_users() is how many
 * servers and clients hold gRPC now (tests check that failures give their
 * reference back). */
void sl__cp_grpc_ref(void);
void sl__cp_grpc_unref(void);
int sl__cp_grpc_users(void);

typedef struct grpc_channel grpc_channel;

/* A channel to "host:port" with sluice's limits and reconnect backoff. */
sl_status sl__cp_channel_create(const char *target, size_t max_message,
                                grpc_channel **out);
void sl__cp_channel_destroy(grpc_channel *ch);

/* One unary call: sends req (len bytes) to path (`what` names it in
 * messages) and waits at most
 * timeout_ms for the reply, which lands in *reply (sl__free). wait_ready
 * waits for the channel to connect (within the deadline) instead of
 * failing at once when the master is not reachable. On failure the status
 * comes from the master's "sl-status" trailer or the gRPC code, and the
 * message is the master's, or says what the transport saw. */
sl_status sl__cp_rpc(grpc_channel *ch, const char *target, const char *path,
                     const char *what, const uint8_t *req, size_t len,
                     uint64_t timeout_ms, bool wait_ready, uint8_t **reply,
                     size_t *reply_len);

/* "host:port" -> host and port; [v6]:port too. SL_EINVAL. */
sl_status sl__cp_addr_split(const char *addr, char *host, size_t host_size,
                            int *port);

/* ---- the master (master.c, store.c, job.c) --------------------- */

/* One incoming call as the master sees it. The server fills the first part
 * and answers with sl__cp_call_reply / sl__cp_call_fail, exactly once; the
 * master may park the call (owning the list links) until then. */
typedef struct sl__cp_call sl__cp_call;
struct sl__cp_call {
  sl__cp_method method;
  const uint8_t *req; /* the request envelope's bytes */
  size_t req_len;
  uint64_t deadline_ns; /* sl__now_ns() clock; UINT64_MAX: none */
  char peer[64];        /* for log lines */

  /* filled by the master once the envelope passed its checks */
  ProtobufCMessage *body; /* the decoded request */
  uint32_t member;        /* 0: unauthenticated (Hello, Join) */
  int rank;               /* the sender's rank, -1 for clients */
  uint64_t counter;
  uint8_t key[SL__CP_KEY_BYTES];
  bool keyed; /* replies are sealed with key */

  /* parking */
  int wait;          /* wait list index, -1 when not parked */
  uint64_t wait_gen; /* barriers: the round this call arrived in */
  sl__cp_call *wnext, *wprev;
};

/* Implemented by the server (server.c). reply seals the message in an
 * envelope (MAC'd when the call is keyed); fail sends the status with the
 * message and logs refusals. Both take the call off any wait list. */
void sl__cp_call_reply(sl__cp_call *c, const ProtobufCMessage *reply);
void sl__cp_call_fail(sl__cp_call *c, sl_status st, const char *fmt, ...)
    SL__PRINTF(3, 4);

typedef struct cp_member cp_member;
struct cp_member {
  uint32_t id;
  sl__cp_role role;
  int rank; /* nodes */
  sl__cp_member_state state;
  uint8_t key[SL__CP_KEY_BYTES];
  sl__cp_replay replay;
  uint64_t last_seen_ns;
  char *devices, *data_addr, *host, *version;
  cp_member *next; /* clients list */
};

typedef struct cp_kv_entry cp_kv_entry;
typedef struct cp_kv {
  cp_kv_entry **buckets;
  size_t n_buckets, count, bytes;
} cp_kv;

typedef struct cp_barrier cp_barrier;
typedef struct cp_job cp_job;

enum {
  CP_WAIT_MEMBERS = 0,
  CP_WAIT_KV,
  CP_WAIT_BARRIER,
  CP_WAIT_PLAN,
  CP_WAIT_JOB,
  CP_WAIT_RESULT,
  CP_N_WAITS
};

typedef struct cp_nonce {
  uint8_t nonce[SL__CP_NONCE_BYTES];
  uint64_t issued_ns;
  bool used;
} cp_nonce;

#define CP_MAX_NONCES 1024
#define CP_MAX_FINISHED_JOBS 64

typedef struct sl__cp_master {
  int nnodes;
  char *token;
  uint32_t heartbeat_ms, timeout_ms;
  size_t max_message;
  uint32_t next_member;
  cp_member **nodes;  /* per rank: the current holder, NULL when EMPTY */
  cp_member *clients; /* live clients */
  cp_nonce nonces[CP_MAX_NONCES];
  size_t next_nonce;
  sl__cp_call *waits[CP_N_WAITS];
  cp_kv kv;
  cp_barrier *barriers;
  uint64_t barrier_seq; /* ids of barrier rounds */
  cp_job *jobs;
  uint64_t job_seq; /* order of finishing, for eviction */

  pthread_mutex_t stats_lock; /* the only state other threads read */
  sl__cp_server_stats stats;
} sl__cp_master;

/* All of these run on the server's completion-queue thread only. */
sl_status sl__cp_master_init(sl__cp_master *m, int nnodes, const char *token,
                             uint32_t timeout_ms, size_t max_message);
void sl__cp_master_free(sl__cp_master *m);
/* Handles a received call: checks its envelope and credentials, decodes the
 * body and runs the method, which answers or parks the call. */
void sl__cp_master_dispatch(sl__cp_master *m, sl__cp_call *c);
/* The caller of a parked call went away: forget it (no answer is sent). */
void sl__cp_master_cancel(sl__cp_master *m, sl__cp_call *c);
/* Periodic work: members silent for longer than the timeout are lost;
 * parked calls past their deadline are answered SL_ETIMEOUT. */
void sl__cp_master_tick(sl__cp_master *m, uint64_t now_ns);
/* Answers every parked call with SL_ECOMM "master shutting down". */
void sl__cp_master_shutdown(sl__cp_master *m);
void sl__cp_master_count(sl__cp_master *m, uint64_t *field, int64_t add);

/* Parking (master.c): wait lists are re-evaluated by the store and the
 * job code when what they wait on changes. */
void sl__cp_park(sl__cp_master *m, sl__cp_call *c, int wait);
void sl__cp_unpark(sl__cp_master *m, sl__cp_call *c);
/* Re-runs every parked call of a list through its method (which answers it
 * or leaves it parked). */
void sl__cp_wake(sl__cp_master *m, int wait);

/* A node or client is gone (lost or left): fails what depends on it. */
void sl__cp_store_member_gone(sl__cp_master *m, const cp_member *who,
                              const char *why);
void sl__cp_job_member_gone(sl__cp_master *m, const cp_member *who,
                            const char *why);

/* Methods (each answers or parks c). */
void sl__cp_do_kv_put(sl__cp_master *m, sl__cp_call *c);
bool sl__cp_do_kv_get(sl__cp_master *m, sl__cp_call *c);
void sl__cp_do_barrier(sl__cp_master *m, sl__cp_call *c);
bool sl__cp_try_barrier(sl__cp_master *m, sl__cp_call *c);
void sl__cp_barrier_cancel(sl__cp_master *m, sl__cp_call *c);
void sl__cp_do_plan_submit(sl__cp_master *m, sl__cp_call *c);
bool sl__cp_do_plan_fetch(sl__cp_master *m, sl__cp_call *c);
void sl__cp_do_job_start(sl__cp_master *m, sl__cp_call *c);
void sl__cp_do_job_stop(sl__cp_master *m, sl__cp_call *c);
void sl__cp_do_job_report(sl__cp_master *m, sl__cp_call *c);
bool sl__cp_do_job_status(sl__cp_master *m, sl__cp_call *c);
void sl__cp_do_result_put(sl__cp_master *m, sl__cp_call *c);
bool sl__cp_do_result_get(sl__cp_master *m, sl__cp_call *c);

/* The key-value table used by the store and by job results. */
void sl__cp_kv_init(cp_kv *t);
void sl__cp_kv_free(cp_kv *t);
/* NULL when absent; *len gets the length. */
const uint8_t *sl__cp_kv_find(const cp_kv *t, const char *key, size_t *len);
sl_status sl__cp_kv_set(cp_kv *t, const char *key, const uint8_t *value,
                        size_t len);

void sl__cp_barriers_free(sl__cp_master *m);
void sl__cp_jobs_free(sl__cp_master *m);

/* ---- client internals for tests (client.c) -------------------------- */

/* Sends body as method m's request: sealed in an authenticated envelope
 * (seal) or as the raw gRPC message (!seal). The reply's body lands in
 * *reply (sl__free), after its MAC was checked when sealed. */
sl_status sl__cp_client_send(sl__cp_client *c, sl__cp_method m,
                             const uint8_t *body, size_t len, bool seal,
                             uint64_t timeout_ms, uint8_t **reply,
                             size_t *reply_len);
/* A raw call to any path on the client's channel. */
sl_status sl__cp_client_rpc(sl__cp_client *c, const char *path,
                            const uint8_t *req, size_t len, uint64_t timeout_ms,
                            uint8_t **reply, size_t *reply_len);
/* Stops the heartbeat thread without telling the master (as a hung node
 * would); the client stays usable for calls. */
void sl__cp_client_stop_heartbeat(sl__cp_client *c);

#endif
