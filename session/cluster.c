/* The public cluster API (<sluice/cluster.h>): the environment's settings,
 * the master's service and the daemon, over the control plane (comm/control)
 * and the daemon library (daemon.h). */
#include <stdatomic.h>
#include <string.h>

#include <sluice/cluster.h>

#include "core_int.h"
#include "cp.h"
#include "daemon.h"

_Static_assert(SL_CLUSTER_MAX_NODES == SL__CP_MAX_NODES, "max nodes");
_Static_assert(SL_CLUSTER_DEFAULT_PORT == SL__CP_DEFAULT_PORT, "port");

/* ---- the environment ---------------------------------------------------- */

sl_status sl_cluster_env_read(char *const *envp, sl_cluster_env *out) {
  if (!out) return sl__fail(SL_EINVAL, "cluster environment: NULL output");
  memset(out, 0, sizeof *out);
  sl__cp_env e;
  SL_CHECK(sl__cp_env_parse(envp, &e));
  /* The strings move to the public struct. */
  out->master = e.master;
  out->node_rank = e.node_rank == SL__CP_RANK_ANY ? -1 : e.node_rank;
  out->nnodes = e.nnodes;
  out->token = e.token;
  out->bind = e.bind;
  out->heartbeat_timeout_ms = e.heartbeat_timeout_ms;
  out->master_from = e.master_from;
  return SL_OK;
}

void sl_cluster_env_free(sl_cluster_env *e) {
  if (!e) return;
  sl__cp_env c = {.master = e->master, .token = e->token, .bind = e->bind};
  sl__cp_env_free(&c);
  memset(e, 0, sizeof *e);
}

/* ---- the master's service ---------------------------------------------- */

struct sl_master {
  sl__cp_server *srv;
};

sl_status sl_master_create(const sl_master_config *cfg, sl_master **out) {
  if (out) *out = NULL;
  if (!cfg || !out) return sl__fail(SL_EINVAL, "master: NULL config or output");
  sl_master_config c;
  SL_CHECK(sl__config_copy(&c, sizeof c, cfg, "sl_master_config",
                           "SL_MASTER_CONFIG"));
  sl__cp_server_opts o = {.listen = c.listen,
                          .nnodes = c.nnodes,
                          .token = c.token,
                          .heartbeat_timeout_ms = c.heartbeat_timeout_ms};
  sl_master *m;
  if (SL_NEW(m) != SL_OK) return SL_ENOMEM;
  sl_status st = sl__cp_server_create(&o, &m->srv);
  if (st != SL_OK) {
    sl__free(m);
    return st;
  }
  *out = m;
  return SL_OK;
}

int sl_master_port(const sl_master *m) {
  return m ? sl__cp_server_port(m->srv) : 0;
}

void sl_master_destroy(sl_master *m) {
  if (!m) return;
  sl__cp_server_destroy(m->srv);
  sl__free(m);
}

/* ---- the daemon -----------------------------------------------------------
 */

struct sl_daemon {
  sl__daemon_run_opts o;
  char *master, *devices, *listen, *token; /* the config's, copied */
  atomic_bool stop;
};

void sl_daemon_destroy(sl_daemon *d) {
  if (!d) return;
  sl__free(d->master);
  sl__free(d->devices);
  sl__free(d->listen);
  if (d->token) explicit_bzero(d->token, strlen(d->token));
  sl__free(d->token);
  sl__free(d);
}

sl_status sl_daemon_create(const sl_daemon_config *cfg, sl_daemon **out) {
  if (out) *out = NULL;
  if (!cfg || !out) return sl__fail(SL_EINVAL, "daemon: NULL config or output");
  sl_daemon_config c;
  SL_CHECK(sl__config_copy(&c, sizeof c, cfg, "sl_daemon_config",
                           "SL_DAEMON_CONFIG"));
  if (!c.master || !c.devices || !c.token || !c.token[0])
    return sl__fail(SL_EINVAL, "daemon: the config needs a master, devices "
                               "and a token");
  if (c.nnodes < 1 || c.nnodes > SL_CLUSTER_MAX_NODES || c.node_rank < 0 ||
      c.node_rank >= c.nnodes)
    return sl__fail(SL_EINVAL, "daemon: node rank %d of %d nodes (1 to %d)",
                    c.node_rank, c.nnodes, SL_CLUSTER_MAX_NODES);
  if (c.max_jobs < 0)
    return sl__fail(SL_EINVAL, "daemon: max_jobs %lld is negative",
                    (long long)c.max_jobs);
  sl_daemon *d;
  if (SL_NEW(d) != SL_OK) return SL_ENOMEM;
  d->master = sl__strdup(c.master);
  d->devices = sl__strdup(c.devices);
  d->listen = c.listen ? sl__strdup(c.listen) : NULL;
  d->token = sl__strdup(c.token);
  if (!d->master || !d->devices || (c.listen && !d->listen) || !d->token) {
    sl_daemon_destroy(d);
    return sl__fail(SL_ENOMEM, "daemon: copying the config");
  }
  atomic_init(&d->stop, false);
  d->o = (sl__daemon_run_opts){.master = d->master,
                               .rank = c.node_rank,
                               .nnodes = c.nnodes,
                               .devices = d->devices,
                               .listen = d->listen,
                               .token = d->token,
                               .heartbeat_timeout_ms = c.heartbeat_timeout_ms,
                               .host_master = c.host_master,
                               .stop = &d->stop,
                               .max_jobs = c.max_jobs,
                               .log = c.log};
  *out = d;
  return SL_OK;
}

sl_status sl_daemon_run(sl_daemon *d) {
  if (!d) return sl__fail(SL_EINVAL, "daemon: NULL");
  return sl__daemon_run(&d->o);
}

void sl_daemon_stop(sl_daemon *d) {
  if (d) atomic_store(&d->stop, true);
}
