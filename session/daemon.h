/* sluice session — daemons (docs/cluster.md): a node's service loop over
 * the control plane (jobs, plans, reports) and the data plane (actor
 * messages), and the job blob a remote session submits to every node.
 * Internal: `sluice daemon` and the remote session use it. */
#ifndef SLUICE_SESSION_DAEMON_H
#define SLUICE_SESSION_DAEMON_H

#include <stdatomic.h>
#include <stdio.h>

#include "cp.h"
#include "dp.h"
#include "job_blob.h"
#include "net_coll.h"

/* How long a process whose job failed because another node's did waits
 * for that node's report of the cause before it reports (and, in the
 * program, before it takes its own, shorter message). */
#define SL__DAEMON_FOLLOW_MS 5000u

/* The control plane's keys of the job protocol. */
#define SL__DAEMON_LAST_JOB_KEY "sluice/last_job"
/* "sluice/job/<job>/ready/<rank>": the node attached the job. */
void sl__daemon_ready_key(uint64_t job, int rank, char *buf, size_t n);
/* "sluice/job/<job>/trace/<rank>": the node's Chrome trace of the job, or
 * "E" and why there is none; put before the node reports the job. */
void sl__daemon_trace_key(uint64_t job, int rank, char *buf, size_t n);
/* Requests between steps (daemon_requests.c):
 * "sluice/job/<job>/req/<seq>": the program's request number seq (1, 2,
 * ...) of the job; "sluice/job/<job>/ans/<seq>/<rank>": node rank's
 * answer, and with chunk >= 0 ".../<chunk>" the bytes that come with it. */
void sl__daemon_req_key(uint64_t job, int64_t seq, char *buf, size_t n);
void sl__daemon_ans_key(uint64_t job, int64_t seq, int rank, int chunk,
                        char *buf, size_t n);
/* "sluice/job/<job>/value/<node>": the whole value the program wrote for
 * graph node `node`, which job <job> starts with (handoff.c). */
void sl__daemon_value_key(uint64_t job, int32_t node, char *buf, size_t n);
/* "sluice/job/<job>/versions/<rank>": after job <job> failed, the
 * versions node rank's variables all still hold ("0 1 ", or "-"). */
void sl__daemon_versions_key(uint64_t job, int rank, char *buf, size_t n);
/* "sluice/job/<job>/release": the program no longer restarts from job
 * <job>; its nodes free what they kept of it. */
void sl__daemon_release_key(uint64_t job, char *buf, size_t n);

/* Bytes through the store, in chunks of at most SL__KV_CHUNK bytes under
 * "<prefix>/0", "<prefix>/1", ... (a value may be larger than a message).
 * get waits up to wait_ms for each chunk and checks its size; empty
 * overwrites them with nothing (the store has no delete). */
#define SL__KV_CHUNK ((size_t)16 << 20)
sl_status sl__kv_put_chunks(sl__cp_client *cp, const char *prefix,
                            const void *data, size_t bytes);
sl_status sl__kv_get_chunks(sl__cp_client *cp, const char *prefix, void *data,
                            size_t bytes, uint64_t wait_ms);
void sl__kv_empty_chunks(sl__cp_client *cp, const char *prefix, size_t bytes);

/* A daemon's server of the program's requests for one job (a thread of
 * job_run, until *done). */
typedef struct sl__daemon_requests {
  sl__cp_client *cp;
  struct sl_session *s;
  uint64_t job;
  int rank;
  atomic_bool *done;
} sl__daemon_requests;
void *sl__daemon_requests_main(void *arg);

typedef struct sl__daemon_opts {
  sl__cp_client *cp;   /* joined as a node */
  sl__dp_endpoint *dp; /* rank = the cp rank, nnodes = the cluster's + 1 */
  sl__net_coll *nc;    /* dp's collectives between nodes: boxing whose
                          members span nodes; NULL: such jobs fail */
  atomic_bool *stop;   /* set: return after the current job; may be NULL */
  int64_t max_jobs;    /* return after this many jobs; <= 0: no limit */
  FILE *log;           /* one line per job; NULL: stderr */
} sl__daemon_opts;

/* Serves jobs until *stop, max_jobs, or the master is gone: waits for the
 * next job's plan, rebuilds the graph and actor plan, runs this node's
 * share on the data plane, reports the outcome (a failure names this node
 * and the actor) and logs "job J: succeeded|failed: ..." Returns SL_OK
 * when stopped or done, SL_ECOMM when the master is unreachable. */
sl_status sl__daemon_serve(const sl__daemon_opts *o);

/* A whole daemon, as `sluice daemon` runs it: the master's service too
 * when host_master (on the master address's port, bound to listen), a
 * data-plane endpoint on listen (an ephemeral port), the control-plane
 * join as node `rank`, then sl__daemon_serve. */
typedef struct sl__daemon_run_opts {
  const char *master; /* "host:port" */
  int rank, nnodes;
  const char *devices; /* told to the master, e.g. "cpu:2" */
  const char *listen;  /* host to bind; NULL: "127.0.0.1" */
  const char *token;
  uint32_t heartbeat_timeout_ms; /* the master's, when hosting it; 0 */
  bool host_master;
  atomic_bool *stop;
  int64_t max_jobs;
  FILE *log;
} sl__daemon_run_opts;

/* SL_OK when stopped; the failure of a step otherwise (the master
 * unreachable: SL_ETIMEOUT / SL_ECOMM; a port in use: SL_EIO / SL_ECOMM;
 * a wrong token: SL_EAUTH). */
sl_status sl__daemon_run(const sl__daemon_run_opts *o);

/* Sets ep's peers (every LIVE node but itself) from the master's member
 * table of now. SL_EINVAL for a bad address, the call's failure. */
sl_status sl__daemon_set_peers(sl__cp_client *cp, sl__dp_endpoint *ep);

/* Shared registers (shared_regs.c). open: before the job is made, a pool
 * for its host registers when nnodes > 1 and SLUICE_SHARED_REGISTERS is
 * not 0 (none, with a warning, when it cannot be made). connect: once
 * every node runs the job, the two rounds through the store (each wait at
 * most wait_ms, ended early by an abort of s->nc), then the collectives'
 * map; a node without a pool takes part as one nobody maps. close: the
 * collectives forget the pools and the peers' are unmapped (this node's goes
 * after the job). */
typedef struct sl_session sl_session;
void sl__shared_regs_open(sl_session *s, int nnodes);
sl_status sl__shared_regs_connect(sl_session *s, sl__cp_client *cp, int nnodes,
                                  uint64_t wait_ms);
void sl__shared_regs_close(sl_session *s);

/* Splits "host:port" (IPv6 in brackets) into host and port. SL_EINVAL. */
sl_status sl__daemon_split_addr(const char *addr, char *host, size_t n,
                                uint16_t *port);

#endif
