/* sluice comm — the control plane (DESIGN.md section 8,
 * docs/cluster.md): one gRPC service on the master daemon, written on
 * the gRPC C core API with protobuf-c bodies (comm/control/control.proto).
 *
 *   server  sl__cp_server_*: the master's service. One completion-queue
 *           thread owns all of the master's state (members, key-value store,
 *           barriers, plans, jobs, results, heartbeats); blocking calls are
 *           parked there and answered when their condition holds or their
 *           deadline passes, so they hold no thread.
 *   client  sl__cp_client_* and the calls below: blocking calls, each with a
 *           deadline (timeout_ms from the call), safe from any thread; one
 *           heartbeat thread per client.
 *   env     sl__cp_env_parse: SLUICE_* / torchrun-style / Slurm bootstrap.
 *
 * Auth: the token never crosses the wire. A joiner answers the master's
 * single-use nonce with HMAC-SHA256(token, ...); both sides then derive a
 * per-member session key with HKDF and every later request and reply
 * carries an HMAC under it with a counter (replays are refused).
 *
 * Errors: every call maps the outcome to an sl_status with the master's
 * message in sl_last_error(): SL_ETIMEOUT (deadline passed), SL_EAUTH
 * (refused), SL_ECOMM (master unreachable or gone, a node lost),
 * SL_ENOTFOUND, SL_EINVAL (a bad argument or malformed message), SL_ESTATE
 * (not allowed now), SL_EUNSUPPORTED (protocol versions differ), SL_EABORTED
 * (the job failed or was stopped). Internal (sl__): the session API wraps
 * it. */
#ifndef SLUICE_CP_H
#define SLUICE_CP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core_int.h"

/* The wire protocol's version: Hello and Join refuse any other. */
#define SL__CP_PROTOCOL 1u
/* A node asking for any free rank. */
#define SL__CP_RANK_ANY (-1)
#define SL__CP_DEFAULT_PORT 29610
#define SL__CP_DEFAULT_HEARTBEAT_TIMEOUT_MS 5000u
#define SL__CP_DEFAULT_MAX_MESSAGE (64u << 20)
/* Key, barrier and result names: at most this many bytes. */
#define SL__CP_MAX_NAME 256
#define SL__CP_MAX_NODES 4096

typedef struct sl__cp_server sl__cp_server;
typedef struct sl__cp_client sl__cp_client;

/* ---- server ------------------------------------------------------------ */

typedef struct sl__cp_server_opts {
  const char *listen;            /* "host:port"; NULL: "127.0.0.1:0" */
  int nnodes;                    /* ranks of the cluster, 1..SL__CP_MAX_NODES */
  const char *token;             /* shared secret, non-empty; copied */
  uint32_t heartbeat_timeout_ms; /* 0: SL__CP_DEFAULT_HEARTBEAT_TIMEOUT_MS */
  size_t max_message;            /* 0: SL__CP_DEFAULT_MAX_MESSAGE */
} sl__cp_server_opts;

/* Starts the master's service listening on opts->listen (port 0 picks a free
 * port: sl__cp_server_port tells which). SL_EINVAL for bad options or an
 * address that does not parse, SL_ECOMM when the port cannot be bound (the
 * message names the address and the reason, e.g. "Address already in use"),
 * SL_ENOMEM. */
sl_status sl__cp_server_create(const sl__cp_server_opts *opts,
                               sl__cp_server **out);
/* The bound port. */
int sl__cp_server_port(const sl__cp_server *s);
/* Stops the service: parked calls are answered UNAVAILABLE, the thread is
 * joined, everything is freed. NULL is a no-op. */
void sl__cp_server_destroy(sl__cp_server *s);

typedef struct sl__cp_server_stats {
  uint64_t calls;        /* calls answered */
  uint64_t auth_refused; /* joins and calls refused for credentials */
  uint64_t malformed;    /* calls refused for a malformed message */
  uint64_t nodes_lost;   /* members declared lost (heartbeat timeout) */
  uint64_t jobs_failed;  /* jobs that ended FAILED */
  int live_nodes;        /* nodes LIVE now */
} sl__cp_server_stats;

/* A snapshot of the counters (any thread). */
void sl__cp_server_stats_get(sl__cp_server *s, sl__cp_server_stats *out);

/* ---- client ------------------------------------------------------------ */

typedef enum sl__cp_role {
  SL__CP_NODE = 0,   /* a daemon: holds a rank */
  SL__CP_CLIENT = 1, /* a program: submits plans, starts jobs */
} sl__cp_role;

typedef struct sl__cp_client_opts {
  const char *master; /* "host:port" of the master */
  const char *token;  /* NULL or "": joins without credentials (refused) */
  sl__cp_role role;
  int node_rank;         /* nodes: SL__CP_RANK_ANY or 0..nnodes-1 */
  const char *devices;   /* nodes: device list, e.g. "cpu:0-3"; may be NULL */
  const char *data_addr; /* nodes: data-plane "host:port"; may be NULL */
  int nnodes;            /* 0: any; else the master must run this many */
  bool wait_all;         /* connect returns once every node is LIVE */
  uint32_t protocol;     /* 0: SL__CP_PROTOCOL (tests claim others) */
} sl__cp_client_opts;

typedef enum sl__cp_member_state {
  SL__CP_MEMBER_EMPTY = 0,
  SL__CP_MEMBER_LIVE = 1,
  SL__CP_MEMBER_LOST = 2,
  SL__CP_MEMBER_LEFT = 3,
} sl__cp_member_state;

typedef struct sl__cp_member {
  int rank;
  sl__cp_member_state state;
  char *devices, *data_addr, *host; /* never NULL */
} sl__cp_member;

typedef struct sl__cp_members {
  int n; /* nnodes */
  sl__cp_member *m;
} sl__cp_members;

void sl__cp_members_free(sl__cp_members *t);
const char *sl__cp_member_state_name(sl__cp_member_state s);

/* Connects to the master, proves the token, joins (a node takes a rank), and
 * starts the heartbeat thread; with opts->wait_all, waits until every node
 * is LIVE. The whole of it must finish within timeout_ms, which also covers
 * waiting for a master that is not up yet. SL_EAUTH (token refused, or the
 * master could not prove it knows the token), SL_EUNSUPPORTED (protocol
 * versions differ), SL_ESTATE (rank taken), SL_EINVAL (also: the master
 * runs another number of nodes than opts->nnodes), SL_ETIMEOUT (master
 * unreachable or nodes missing when the deadline passed), SL_ECOMM. */
sl_status sl__cp_client_connect(const sl__cp_client_opts *opts,
                                uint64_t timeout_ms, sl__cp_client **out);
/* Leaves (telling the master, within a short deadline), stops the heartbeat
 * thread and frees the client. NULL is a no-op. Not concurrent with other
 * calls on the same client. */
void sl__cp_client_destroy(sl__cp_client *c);

int sl__cp_client_rank(const sl__cp_client *c); /* -1 for clients */
int sl__cp_client_nnodes(const sl__cp_client *c);
/* The member table as of connect (immutable; owned by the client). */
const sl__cp_members *sl__cp_client_members(const sl__cp_client *c);
/* SL_OK while heartbeats get through; otherwise the status of the last
 * failure (e.g. SL_ECOMM "master declared this node lost"), with the
 * message in sl_last_error(). */
sl_status sl__cp_client_health(sl__cp_client *c);

/* The current member table; with wait_all, blocks until every node is LIVE.
 * *out is the caller's (sl__cp_members_free). */
sl_status sl__cp_members_get(sl__cp_client *c, bool wait_all,
                             uint64_t timeout_ms, sl__cp_members *out);

/* Key-value store. put copies the value (it replaces an older one); get
 * returns a copy in *value (sl__free it), blocking until the key is present
 * when wait is set (SL_ETIMEOUT when the deadline passes first), else
 * SL_ENOTFOUND. Keys are non-empty, at most SL__CP_MAX_NAME bytes. */
sl_status sl__cp_kv_put(sl__cp_client *c, const char *key, const void *value,
                        size_t len, uint64_t timeout_ms);
sl_status sl__cp_kv_get(sl__cp_client *c, const char *key, bool wait,
                        uint64_t timeout_ms, uint8_t **value, size_t *len);

/* A named barrier over all nodes (clients may not take part): returns when
 * every node has arrived. SL_ECOMM naming the node when one is lost while
 * others wait. A name may be reused once a barrier of it completed. */
sl_status sl__cp_barrier(sl__cp_client *c, const char *name,
                         uint64_t timeout_ms);

/* ---- jobs -------------------------------------------------------------- */

typedef enum sl__cp_job_state {
  SL__CP_JOB_NONE = 0,
  SL__CP_JOB_SUBMITTED = 1,
  SL__CP_JOB_RUNNING = 2,
  SL__CP_JOB_SUCCEEDED = 3, /* terminal states from here on */
  SL__CP_JOB_FAILED = 4,
  SL__CP_JOB_STOPPED = 5,
} sl__cp_job_state;

const char *sl__cp_job_state_name(sl__cp_job_state s);

typedef struct sl__cp_job_info {
  uint64_t job;
  sl__cp_job_state state;
  sl_status status;  /* SL_OK unless FAILED or STOPPED */
  int failed_node;   /* the first node that failed or was lost; -1 */
  int reported;      /* nodes that reported success */
  char message[512]; /* why it failed ("node 2 lost: ..."), or "" */
} sl__cp_job_info;

/* Submits job `job` with one plan blob per node (n must be nnodes); the
 * master copies them. A job id still SUBMITTED or RUNNING is SL_ESTATE; a
 * finished one is replaced. */
sl_status sl__cp_plan_submit(sl__cp_client *c, uint64_t job, int n,
                             const uint8_t *const *plans, const size_t *lens,
                             uint64_t timeout_ms);
/* Node `node`'s plan of job `job` in *plan (sl__free it); blocks until the
 * job is submitted. */
sl_status sl__cp_plan_fetch(sl__cp_client *c, uint64_t job, int node,
                            uint64_t timeout_ms, uint8_t **plan, size_t *len);

/* SUBMITTED -> RUNNING. SL_ECOMM naming the node when a node is not LIVE;
 * SL_ESTATE when the job is not SUBMITTED; SL_ENOTFOUND. */
sl_status sl__cp_job_start(sl__cp_client *c, uint64_t job, uint64_t timeout_ms);
/* SUBMITTED or RUNNING -> STOPPED (status SL_EABORTED, the reason in the
 * message). A finished job stays as it is. */
sl_status sl__cp_job_stop(sl__cp_client *c, uint64_t job, const char *reason,
                          uint64_t timeout_ms);
/* A node's outcome of a RUNNING job: st == SL_OK means done; anything else
 * fails the job (the first failure wins and names the node). The job is
 * SUCCEEDED once every node reported SL_OK. Reports on a finished job are
 * accepted and change nothing. */
sl_status sl__cp_job_report(sl__cp_client *c, uint64_t job, sl_status st,
                            const char *message, uint64_t timeout_ms);
/* The job's state; blocks until it reaches `until` (SUCCEEDED: any terminal
 * state; NONE: answer now). The call succeeds whatever the job's outcome:
 * look at out->state and out->status. */
sl_status sl__cp_job_status(sl__cp_client *c, uint64_t job,
                            sl__cp_job_state until, uint64_t timeout_ms,
                            sl__cp_job_info *out);

/* Results of a job, by key: put copies; get blocks until the key is there.
 * get fails with the job's status and message (e.g. SL_EABORTED "node 1
 * lost") when the job ends without the key, SL_ENOTFOUND when it succeeded
 * without it or does not exist. */
sl_status sl__cp_result_put(sl__cp_client *c, uint64_t job, const char *key,
                            const void *value, size_t len, uint64_t timeout_ms);
sl_status sl__cp_result_get(sl__cp_client *c, uint64_t job, const char *key,
                            uint64_t timeout_ms, uint8_t **value, size_t *len);

/* ---- bootstrap from the environment ------------------------------------ */

typedef struct sl__cp_env {
  char *master;  /* "host:port" */
  int node_rank; /* SL__CP_RANK_ANY when unset */
  int nnodes;    /* 0 when unset */
  char *token;   /* NULL when unset */
  char *bind;    /* the host daemons listen on; "127.0.0.1" unless told */
  uint32_t heartbeat_timeout_ms; /* SL__CP_DEFAULT_HEARTBEAT_TIMEOUT_MS */
  const char *master_from;       /* which variables named the master, static */
} sl__cp_env;

/* Reads the bootstrap settings from envp ("NAME=value" strings, NULL-ended;
 * pass `environ`). In order of precedence:
 *   master     SLUICE_MASTER=host:port; MASTER_ADDR + MASTER_PORT; Slurm's
 *              first host of SLURM_STEP_NODELIST (then SLURM_JOB_NODELIST,
 *              SLURM_NODELIST) with port SLUICE_MASTER_PORT, MASTER_PORT or
 *              SL__CP_DEFAULT_PORT
 *   node rank  SLUICE_NODE_RANK, NODE_RANK, SLURM_NODEID
 *   nnodes     SLUICE_NNODES, NNODES, SLURM_NNODES (SLURM_JOB_NUM_NODES)
 *   token      SLUICE_TOKEN
 *   bind       SLUICE_BIND (default 127.0.0.1)
 *   timeout    SLUICE_HEARTBEAT_TIMEOUT_MS
 * SL_EINVAL naming the variable for a malformed value, a rank at or above
 * nnodes, variables that disagree (SLUICE_NODE_RANK=1 but NODE_RANK=2),
 * MASTER_ADDR without MASTER_PORT, or no master at all. *out is the
 * caller's (sl__cp_env_free) and zeroed on failure. */
sl_status sl__cp_env_parse(char *const *envp, sl__cp_env *out);
/* The same, with a master ("host:port") and token the caller was given (a
 * session's config) ahead of the variables; NULL: from envp. A bad master
 * is named "the session's master". */
sl_status sl__cp_env_parse_given(char *const *envp, const char *master,
                                 const char *token, sl__cp_env *out);
void sl__cp_env_free(sl__cp_env *e);

/* The first host of a Slurm host list ("node[07-09,12],gpu1" -> "node07"),
 * malloc'd into *out. SL_EINVAL for a malformed list. */
sl_status sl__cp_slurm_first_host(const char *list, char **out);

#endif
