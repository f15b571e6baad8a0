/* sluice — running the parts of a cluster from a program: the per-node
 * daemon, the master's service, and the bootstrap settings the environment
 * names. `sluice daemon` and `sluice launch` are built on these; a program
 * that only trains needs none of it (sessions reach daemons through their
 * config: <sluice/session.h>). Included on its own. */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sluice/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most nodes a cluster may have. */
#define SL_CLUSTER_MAX_NODES 4096
/* The master's port when the environment names a host but no port. */
#define SL_CLUSTER_DEFAULT_PORT 29610

/* ---- the environment ----------------------------------------------------
 * The bootstrap settings, in order of precedence:
 *   master     SLUICE_MASTER=host:port; MASTER_ADDR + MASTER_PORT; Slurm's
 *              first host of SLURM_STEP_NODELIST (then SLURM_JOB_NODELIST,
 *              SLURM_NODELIST) with port SLUICE_MASTER_PORT, MASTER_PORT
 *              or SL_CLUSTER_DEFAULT_PORT
 *   node rank  SLUICE_NODE_RANK, NODE_RANK, SLURM_NODEID
 *   nnodes     SLUICE_NNODES, NNODES, SLURM_NNODES (SLURM_JOB_NUM_NODES)
 *   token      SLUICE_TOKEN
 *   bind       SLUICE_BIND (default 127.0.0.1)
 *   timeout    SLUICE_HEARTBEAT_TIMEOUT_MS */
typedef struct sl_cluster_env {
  char *master;                  /* "host:port" */
  int node_rank;                 /* -1 when unset */
  int nnodes;                    /* 0 when unset */
  char *token;                   /* NULL when unset */
  char *bind;                    /* the host daemons listen on */
  uint32_t heartbeat_timeout_ms; /* the default unless set */
  const char *master_from;       /* which variables named the master */
} sl_cluster_env;

/* Reads the settings from envp ("NAME=value" strings, NULL-ended; pass
 * `environ`). SL_EINVAL naming the variable for a malformed value, a rank
 * at or above nnodes, variables that disagree (SLUICE_NODE_RANK=1 but
 * NODE_RANK=2), MASTER_ADDR without MASTER_PORT, or no master at all.
 * *out is the caller's (sl_cluster_env_free) and zeroed on failure. */
SL_API sl_status sl_cluster_env_read(char *const *envp, sl_cluster_env *out);
SL_API void sl_cluster_env_free(sl_cluster_env *e);

/* ---- the master's service ---------------------------------------------- */

typedef struct sl_master sl_master;

/* Sized like every config: initialise with SL_MASTER_CONFIG(...) or
 * sl_master_config_default(). */
typedef struct sl_master_config {
  size_t size;
  const char *listen;            /* "host:port"; port 0 picks a free one */
  int nnodes;                    /* the cluster's nodes, 1..MAX_NODES */
  const char *token;             /* shared secret, non-empty; copied */
  uint32_t heartbeat_timeout_ms; /* 0: the default */
} sl_master_config;

#define SL_MASTER_CONFIG(...)                                                  \
  ((sl_master_config){.size = sizeof(sl_master_config), __VA_ARGS__})
static inline sl_master_config sl_master_config_default(void) {
  return SL_MASTER_CONFIG(.nnodes = 1);
}

/* Starts the service on its own thread. SL_EINVAL for a bad config or
 * address, SL_ECOMM when the port cannot be bound (naming the address and
 * the reason), SL_ENOMEM. */
SL_API sl_status sl_master_create(const sl_master_config *cfg, sl_master **out);
/* The port it listens on. */
SL_API int sl_master_port(const sl_master *m);
/* Stops the service and frees it. NULL: no-op. */
SL_API void sl_master_destroy(sl_master *m);

/* ---- the daemon --------------------------------------------------------- */

typedef struct sl_daemon sl_daemon;

/* Sized like every config: initialise with SL_DAEMON_CONFIG(...) or
 * sl_daemon_config_default(). */
typedef struct sl_daemon_config {
  size_t size;
  const char *master;  /* "host:port" of the master's service */
  int node_rank;       /* 0..nnodes-1 */
  int nnodes;          /* 1..SL_CLUSTER_MAX_NODES */
  const char *devices; /* this node's devices, e.g. "cpu:2" */
  const char *listen;  /* the host to bind; NULL: "127.0.0.1" */
  const char *token;   /* the cluster's shared secret */
  /* Node 0 hosts the master's service itself, on the master address's
   * port (false: it runs elsewhere, e.g. in `sluice launch`). */
  bool host_master;
  uint32_t heartbeat_timeout_ms; /* the hosted master's; 0: the default */
  int64_t max_jobs;              /* stop after this many jobs; 0: never */
  FILE *log;                     /* one line per event; NULL: stderr */
} sl_daemon_config;

#define SL_DAEMON_CONFIG(...)                                                  \
  ((sl_daemon_config){.size = sizeof(sl_daemon_config), __VA_ARGS__})
static inline sl_daemon_config sl_daemon_config_default(void) {
  return SL_DAEMON_CONFIG(.nnodes = 1);
}

/* A daemon for cfg (copied, with its strings), not yet running.
 * SL_EINVAL for a bad config, SL_ENOMEM. */
SL_API sl_status sl_daemon_create(const sl_daemon_config *cfg, sl_daemon **out);
/* Joins the cluster and runs the jobs the master hands out until stopped
 * (sl_daemon_stop) or max_jobs ran. SL_OK when stopped; the failure of a
 * step otherwise (the master unreachable: SL_ETIMEOUT / SL_ECOMM; a port
 * in use: SL_EIO / SL_ECOMM; a wrong token: SL_EAUTH). */
SL_API sl_status sl_daemon_run(sl_daemon *d);
/* Asks a running daemon to stop after the job in progress. Safe from a
 * signal handler and from any thread. */
SL_API void sl_daemon_stop(sl_daemon *d);
SL_API void sl_daemon_destroy(sl_daemon *d);

#ifdef __cplusplus
}
#endif
#endif
