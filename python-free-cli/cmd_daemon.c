/* sluice daemon: one node of a cluster (docs/cluster.md). Settings come
 * from the flags, else from the environment (SLUICE_*, MASTER_ADDR /
 * MASTER_PORT / NODE_RANK / NNODES, Slurm). Node rank 0 hosts the master's
 * service on the master address's port unless --external-master says the
 * master runs elsewhere (sluice launch hosts it itself). Runs until
 * SIGTERM or SIGINT (after the job in progress). Built on
 * <sluice/cluster.h>. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/cluster.h>

#include "cli.h"

extern char **environ;

static sl_daemon *running;

static void on_signal(int sig) {
  (void)sig;
  sl_daemon_stop(running);
}

static const char usage[] =
    "usage: sluice daemon --master HOST:PORT --node-rank R --nnodes N\n"
    "                     --devices cpu:K [--listen ADDR] [--token-file F]\n"
    "                     [--external-master] [--max-jobs J]\n"
    "                     [--heartbeat-timeout-ms MS]\n\n"
    "Serves this node's share of the jobs that programs submit (a program\n"
    "whose SLUICE_MASTER names the master runs on the daemons). Logs one\n"
    "line per job with its outcome.\n\n"
    "  --master HOST:PORT   the control plane's master (SLUICE_MASTER,\n"
    "                       MASTER_ADDR + MASTER_PORT, Slurm)\n"
    "  --node-rank R        this node (SLUICE_NODE_RANK, NODE_RANK,\n"
    "                       SLURM_NODEID)\n"
    "  --nnodes N           nodes of the cluster (SLUICE_NNODES, NNODES,\n"
    "                       SLURM_NNODES)\n"
    "  --devices cpu:K      the devices this node offers\n"
    "  --listen ADDR        the address to bind (default 127.0.0.1, or\n"
    "                       SLUICE_BIND)\n"
    "  --token-file F       the shared secret's file (else SLUICE_TOKEN)\n"
    "  --external-master    rank 0 does not host the master\n"
    "  --max-jobs J         exit after J jobs\n"
    "  --heartbeat-timeout-ms MS  the hosted master's (default 5000)\n\n"
    "Data plane, from the environment: SLUICE_DP_SHM_BYTES (shared-memory\n"
    "ring per direction with nodes on this host, default 32M; 0: TCP only),\n"
    "SLUICE_NET_COLL_ALGO, SLUICE_NET_COLL_CHUNK (docs/cluster.md).\n\n"
    "Exit status: 0 stopped by a signal or after --max-jobs, 1 a failure,\n"
    "2 bad flags.\n";

static int bad(const char *fmt, const char *arg) {
  fprintf(stderr, "sluice daemon: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see 'sluice daemon --help')\n");
  return 2;
}

static bool parse_int(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || !*s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* The token file's first line, malloc'd; NULL with a message. */
static char *read_token(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "sluice daemon: cannot read token file '%s'\n", path);
    return NULL;
  }
  char buf[1024];
  char *line = fgets(buf, sizeof buf, f);
  fclose(f);
  if (!line) {
    fprintf(stderr, "sluice daemon: token file '%s' is empty\n", path);
    return NULL;
  }
  buf[strcspn(buf, "\r\n")] = '\0';
  if (!buf[0]) {
    fprintf(stderr, "sluice daemon: token file '%s' is empty\n", path);
    return NULL;
  }
  return strdup(buf);
}

int sl_cli_daemon(int argc, char **argv) {
  if (sl_cli_wants_help(argc, argv)) {
    fputs(usage, stdout);
    return 0;
  }
  const char *master = NULL, *devices = NULL, *listen = NULL,
             *token_file = NULL;
  long rank = -1, nnodes = 0, max_jobs = 0, hb = 0;
  bool external = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--external-master") == 0) {
      external = true;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) return bad("unexpected argument '%s'", a);
    if (!v) return bad("%s needs a value", a);
    i++;
    if (strcmp(a, "--master") == 0)
      master = v;
    else if (strcmp(a, "--devices") == 0)
      devices = v;
    else if (strcmp(a, "--listen") == 0)
      listen = v;
    else if (strcmp(a, "--token-file") == 0)
      token_file = v;
    else if (strcmp(a, "--node-rank") == 0) {
      if (!parse_int(v, 0, SL_CLUSTER_MAX_NODES - 1, &rank))
        return bad("--node-rank '%s': not a rank", v);
    } else if (strcmp(a, "--nnodes") == 0) {
      if (!parse_int(v, 1, SL_CLUSTER_MAX_NODES, &nnodes))
        return bad("--nnodes '%s': not a node count", v);
    } else if (strcmp(a, "--max-jobs") == 0) {
      if (!parse_int(v, 1, 1L << 40, &max_jobs))
        return bad("--max-jobs '%s': not a positive count", v);
    } else if (strcmp(a, "--heartbeat-timeout-ms") == 0) {
      if (!parse_int(v, 1, 3600000, &hb))
        return bad("--heartbeat-timeout-ms '%s': not a duration", v);
    } else
      return bad("unknown flag '%s'", a);
  }
  /* The environment fills what the flags left out. */
  sl_cluster_env env;
  memset(&env, 0, sizeof env);
  bool have_env = sl_cluster_env_read(environ, &env) == SL_OK;
  if (!have_env && !master) {
    fprintf(stderr, "sluice daemon: %s (or pass --master)\n", sl_last_error());
    return 2;
  }
  if (!master) master = env.master;
  if (rank < 0 && have_env && env.node_rank >= 0) rank = env.node_rank;
  if (nnodes == 0 && have_env) nnodes = env.nnodes;
  if (!listen && have_env) listen = env.bind;
  if (!hb && have_env) hb = env.heartbeat_timeout_ms;
  int rc = 2;
  char *token = NULL;
  if (rank < 0 || nnodes < 1 || !devices) {
    fprintf(stderr, "sluice daemon: --node-rank, --nnodes and --devices are "
                    "required (see 'sluice daemon --help')\n");
    goto out;
  }
  if (rank >= nnodes) {
    fprintf(stderr,
            "sluice daemon: --node-rank %ld is not below --nnodes %ld\n", rank,
            nnodes);
    goto out;
  }
  if (token_file) {
    if (!(token = read_token(token_file))) goto out;
  } else if (have_env && env.token) {
    token = strdup(env.token);
  } else if (getenv("SLUICE_TOKEN") && getenv("SLUICE_TOKEN")[0]) {
    token = strdup(getenv("SLUICE_TOKEN"));
  } else {
    fprintf(stderr,
            "sluice daemon: no token: pass --token-file or set SLUICE_TOKEN\n");
    goto out;
  }
  sl_daemon_config cfg =
      SL_DAEMON_CONFIG(.master = master, .node_rank = (int)rank,
                       .nnodes = (int)nnodes, .devices = devices,
                       .listen = listen, .token = token,
                       .host_master = rank == 0 && !external,
                       .heartbeat_timeout_ms = (uint32_t)hb,
                       .max_jobs = max_jobs, .log = stderr);
  sl_daemon *d;
  if (sl_daemon_create(&cfg, &d) != SL_OK) {
    fprintf(stderr, "sluice daemon %ld: %s\n", rank, sl_last_error());
    goto out;
  }
  running = d;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  sl_status st = sl_daemon_run(d);
  if (st != SL_OK) {
    fprintf(stderr, "sluice daemon %ld: %s: %s\n", rank, sl_status_str(st),
            sl_last_error());
    rc = 1;
  } else {
    fprintf(stderr, "sluice daemon %ld: stopped\n", rank);
    rc = 0;
  }
  /* A signal after this point stops nothing. */
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  running = NULL;
  sl_daemon_destroy(d);
out:
  free(token);
  sl_cluster_env_free(&env);
  return rc;
}
