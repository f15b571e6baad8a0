/* Bootstrap from the environment (DESIGN.md section 8): sluice's own
 * SLUICE_* variables first, then the torchrun-style MASTER_ADDR /
 * MASTER_PORT / NODE_RANK / NNODES, then Slurm's. Variables that name the
 * same fact must agree: a job script that sets SLUICE_NODE_RANK=1 inside a
 * Slurm step whose SLURM_NODEID is 2 is a mistake worth stopping at, not a
 * precedence puzzle to resolve silently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_int.h"

static const char *get(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (; envp && *envp; envp++)
    if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
      return (*envp)[n + 1] ? *envp + n + 1 : NULL; /* empty = unset */
  return NULL;
}

static sl_status parse_int(const char *name, const char *v, long lo, long hi,
                           long *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi)
    return sl__fail(SL_EINVAL, "%s='%s': expected an integer in %ld..%ld", name,
                    v, lo, hi);
  *out = x;
  return SL_OK;
}

/* The first of `names` that is set gives the value; every other one that
 * is set must agree with it. *from names the source; -1 when none. */
static sl_status agreed_int(char *const *envp, const char *const *names,
                            size_t n, long lo, long hi, long *out,
                            const char **from) {
  *out = -1;
  *from = NULL;
  for (size_t i = 0; i < n; i++) {
    const char *v = get(envp, names[i]);
    if (!v) continue;
    long x;
    SL_CHECK(parse_int(names[i], v, lo, hi, &x));
    if (!*from) {
      *out = x;
      *from = names[i];
    } else if (x != *out) {
      return sl__fail(SL_EINVAL,
                      "%s=%ld but %s=%ld: they name the same thing and "
                      "disagree (unset one)",
                      *from, *out, names[i], x);
    }
  }
  return SL_OK;
}

sl_status sl__cp_slurm_first_host(const char *list, char **out) {
  *out = NULL;
  if (!list || !list[0]) return sl__fail(SL_EINVAL, "Slurm host list: empty");
  size_t cap = strlen(list) + 1;
  char *host = sl__malloc(cap);
  if (!host) return SL_ENOMEM;
  size_t n = 0;
  const char *p = list;
  while (*p && *p != ',') {
    if (*p == ']') goto bad;
    if (*p != '[') {
      host[n++] = *p++;
      continue;
    }
    /* A bracket group: ranges like 01-04,07; the first host takes the
     * first number as written (zero padding is part of the name). */
    p++;
    const char *num = p;
    while (*p >= '0' && *p <= '9')
      p++;
    if (p == num) goto bad;
    memcpy(host + n, num, (size_t)(p - num));
    n += (size_t)(p - num);
    while (*p && *p != ']') {
      if (!((*p >= '0' && *p <= '9') || *p == '-' || *p == ',')) goto bad;
      p++;
    }
    if (*p != ']') goto bad;
    p++;
  }
  if (n == 0) goto bad;
  host[n] = '\0';
  *out = host;
  return SL_OK;
bad:
  sl__free(host);
  return sl__fail(SL_EINVAL,
                  "Slurm host list '%s': cannot read its first host (expected "
                  "names like node[01-04,07],gpu1)",
                  list);
}

/* given: the caller's master, ahead of every variable; NULL or "": none. */
static sl_status master_from_env(char *const *envp, const char *given,
                                 sl__cp_env *e) {
  char host[256];
  int port;
  bool own = given && given[0];
  const char *from = own ? "the session's master" : "SLUICE_MASTER";
  const char *v = own ? given : get(envp, "SLUICE_MASTER");
  if (v) {
    sl_status st = sl__cp_addr_split(v, host, sizeof host, &port);
    if (st != SL_OK) return sl__fail_context(st, "%s: ", from);
    if (port == 0) return sl__fail(SL_EINVAL, "%s '%s': port 0", from, v);
    e->master_from = from;
    return (e->master = sl__strdup(v)) ? SL_OK : SL_ENOMEM;
  }
  const char *addr = get(envp, "MASTER_ADDR");
  const char *mport = get(envp, "MASTER_PORT");
  long p = SL__CP_DEFAULT_PORT;
  if (addr) {
    if (!mport)
      return sl__fail(SL_EINVAL,
                      "MASTER_ADDR='%s' is set but MASTER_PORT "
                      "is not",
                      addr);
    SL_CHECK(parse_int("MASTER_PORT", mport, 1, 65535, &p));
    size_t n = strlen(addr) + 16;
    if (!(e->master = sl__malloc(n))) return SL_ENOMEM;
    /* An IPv6 literal needs brackets before the port. */
    snprintf(e->master, n, strchr(addr, ':') ? "[%s]:%ld" : "%s:%ld", addr, p);
    e->master_from = "MASTER_ADDR and MASTER_PORT";
    return SL_OK;
  }
  static const char *const lists[] = {"SLURM_STEP_NODELIST",
                                      "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
  for (size_t i = 0; i < SL_ARRAY_LEN(lists); i++) {
    const char *list = get(envp, lists[i]);
    if (!list) continue;
    char *first;
    sl_status st = sl__cp_slurm_first_host(list, &first);
    if (st != SL_OK) return sl__fail_context(st, "%s: ", lists[i]);
    const char *pname = get(envp, "SLUICE_MASTER_PORT") ? "SLUICE_MASTER_PORT"
                        : mport                         ? "MASTER_PORT"
                                                        : NULL;
    if (pname &&
        (st = parse_int(pname, get(envp, pname), 1, 65535, &p)) != SL_OK) {
      sl__free(first);
      return st;
    }
    size_t n = strlen(first) + 16;
    e->master = sl__malloc(n);
    if (e->master) snprintf(e->master, n, "%s:%ld", first, p);
    sl__free(first);
    e->master_from = lists[i];
    return e->master ? SL_OK : SL_ENOMEM;
  }
  if (mport)
    return sl__fail(SL_EINVAL,
                    "MASTER_PORT='%s' is set but MASTER_ADDR is "
                    "not",
                    mport);
  return sl__fail(SL_EINVAL,
                  "no master: set SLUICE_MASTER=host:port (or MASTER_ADDR and "
                  "MASTER_PORT, or run under Slurm)");
}

sl_status sl__cp_env_parse(char *const *envp, sl__cp_env *out) {
  return sl__cp_env_parse_given(envp, NULL, NULL, out);
}

sl_status sl__cp_env_parse_given(char *const *envp, const char *master,
                                 const char *token, sl__cp_env *out) {
  memset(out, 0, sizeof *out);
  sl__cp_env e = {0};
  e.node_rank = SL__CP_RANK_ANY;
  e.heartbeat_timeout_ms = SL__CP_DEFAULT_HEARTBEAT_TIMEOUT_MS;
  static const char *const ranks[] = {"SLUICE_NODE_RANK", "NODE_RANK",
                                      "SLURM_NODEID"};
  static const char *const sizes[] = {"SLUICE_NNODES", "NNODES", "SLURM_NNODES",
                                      "SLURM_JOB_NUM_NODES"};
  long rank, nnodes;
  const char *rank_from, *nnodes_from;
  sl_status st;
  SL_CHECK_GOTO(agreed_int(envp, ranks, SL_ARRAY_LEN(ranks), 0,
                           SL__CP_MAX_NODES - 1, &rank, &rank_from),
                st, fail);
  SL_CHECK_GOTO(agreed_int(envp, sizes, SL_ARRAY_LEN(sizes), 1,
                           SL__CP_MAX_NODES, &nnodes, &nnodes_from),
                st, fail);
  if (rank_from && nnodes_from && rank >= nnodes) {
    st = sl__fail(SL_EINVAL,
                  "node rank %ld (%s) is not below the node count %ld (%s)",
                  rank, rank_from, nnodes, nnodes_from);
    goto fail;
  }
  e.node_rank = rank_from ? (int)rank : SL__CP_RANK_ANY;
  e.nnodes = nnodes_from ? (int)nnodes : 0;
  SL_CHECK_GOTO(master_from_env(envp, master, &e), st, fail);
  const char *v = get(envp, "SLUICE_HEARTBEAT_TIMEOUT_MS");
  if (v) {
    long ms;
    SL_CHECK_GOTO(parse_int("SLUICE_HEARTBEAT_TIMEOUT_MS", v, 1, 3600000, &ms),
                  st, fail);
    e.heartbeat_timeout_ms = (uint32_t)ms;
  }
  v = token ? token : get(envp, "SLUICE_TOKEN");
  if (v && v[0] && !(e.token = sl__strdup(v))) {
    st = SL_ENOMEM;
    goto fail;
  }
  v = get(envp, "SLUICE_BIND");
  if (!(e.bind = sl__strdup(v ? v : "127.0.0.1"))) {
    st = SL_ENOMEM;
    goto fail;
  }
  *out = e;
  return SL_OK;
fail:
  sl__cp_env_free(&e);
  return st;
}

void sl__cp_env_free(sl__cp_env *e) {
  if (!e) return;
  sl__free(e->master);
  if (e->token) explicit_bzero(e->token, strlen(e->token));
  sl__free(e->token);
  sl__free(e->bind);
  memset(e, 0, sizeof *e);
}
