/* Shared registers between the daemons of one host (docs/cluster.md,
 * "Shared registers"): each daemon allocates its job's host registers from
 * a pool other processes can map (comm/data/shm_pool.h); at the job's start the
 * daemons tell each other where their pools are, map the ones they can,
 * tell each other which they mapped, and hand the resulting map to the
 * collectives, which then read each other's registers in place.
 *
 * Two rounds in the key-value store, so that every node decides from the
 * same map: a node that cannot map a peer's pool (another host, another
 * PID namespace) says so, and the pair simply does not share. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "session_int.h"

#define WAIT_SLICE_MS 500u

static bool sharing_wanted(void) {
  const char *e = getenv("SLUICE_SHARED_REGISTERS");
  return !e || strcmp(e, "0") != 0;
}

void sl__shared_regs_open(sl_session *s, int nnodes) {
  if (nnodes < 2 || !s->nc || !sharing_wanted()) return;
  if (sl__shm_pool_create(0, &s->pool) != SL_OK)
    SL_WARN("daemon: no shared registers: %s", sl_last_error());
}

static void key_of(const sl_session *s, const char *what, int rank, char *buf,
                   size_t n) {
  snprintf(buf, n, "sluice/job/%" PRIu64 "/%s/%d", s->job_id, what, rank);
}

/* The value under `key` once some node puts it (NUL-terminated, owned),
 * waiting in slices so that an abort of the job's collectives ends it. */
static sl_status wait_get(sl_session *s, sl__cp_client *cp, const char *key,
                          uint64_t wait_ms, char **out) {
  *out = NULL;
  sl_status st = SL_ETIMEOUT;
  uint8_t *v = NULL;
  size_t len = 0;
  for (uint64_t waited = 0; st == SL_ETIMEOUT && waited < wait_ms;
       waited += WAIT_SLICE_MS) {
    SL_CHECK(sl__net_coll_aborted(s->nc));
    st = sl__cp_kv_get(cp, key, true, WAIT_SLICE_MS, &v, &len);
  }
  if (st != SL_OK)
    return sl__fail_context(st, "shared registers: waiting for '%s': ", key);
  char *str = sl__malloc(len + 1);
  if (!str) {
    sl__free(v);
    return SL_ENOMEM;
  }
  memcpy(str, v, len);
  str[len] = '\0';
  sl__free(v);
  *out = str;
  return SL_OK;
}

sl_status sl__shared_regs_connect(sl_session *s, sl__cp_client *cp, int nnodes,
                                  uint64_t wait_ms) {
  /* A node without a pool (turned off, no /dev/shm) takes part all the
   * same, with "-": the others wait for every node's word. */
  if (nnodes < 2 || !s->nc) return SL_OK;
  uint32_t n = (uint32_t)nnodes, self = s->self_node;
  char key[128], desc[SL__SHM_POOL_DESC_MAX] = "-";
  if (s->pool) sl__shm_pool_describe(s->pool, desc, sizeof desc);
  key_of(s, "pool", (int)self, key, sizeof key);
  SL_CHECK(sl__cp_kv_put(cp, key, desc, strlen(desc), wait_ms));
  s->views = sl__calloc(n, sizeof *s->views);
  uint8_t *maps = sl__calloc((size_t)n * n + 1, 1);
  char *row = sl__calloc(n + 1, 1), *v = NULL;
  sl_status st = s->views && maps && row ? SL_OK : SL_ENOMEM;
  if (st == SL_OK) s->n_views = n;
  /* round 1: map every peer's pool that can be mapped from here */
  for (uint32_t k = 0; k < n && st == SL_OK; k++) {
    row[k] = '0';
    if (k == self) continue;
    key_of(s, "pool", (int)k, key, sizeof key);
    if ((st = wait_get(s, cp, key, wait_ms, &v)) != SL_OK) break;
    if (strcmp(v, "-") != 0 && sl__shm_view_map(v, &s->views[k]) == SL_OK)
      row[k] = '1';
    else
      SL_DEBUG("daemon: node %u's registers stay unshared: %s", k,
               sl_last_error());
    sl__free(v);
  }
  /* round 2: what every node mapped */
  if (st == SL_OK) {
    key_of(s, "maps", (int)self, key, sizeof key);
    st = sl__cp_kv_put(cp, key, row, n, wait_ms);
  }
  for (uint32_t k = 0; k < n && st == SL_OK; k++) {
    if (k == self) {
      for (uint32_t j = 0; j < n; j++)
        maps[(size_t)k * n + j] = row[j] == '1';
      continue;
    }
    key_of(s, "maps", (int)k, key, sizeof key);
    if ((st = wait_get(s, cp, key, wait_ms, &v)) != SL_OK) break;
    if (strlen(v) != n)
      st = sl__fail(SL_EINVAL, "shared registers: node %u maps %zu nodes of %u",
                    k, strlen(v), n);
    for (uint32_t j = 0; j < n && st == SL_OK; j++)
      maps[(size_t)k * n + j] = v[j] == '1';
    sl__free(v);
  }
  if (st == SL_OK)
    st = sl__net_coll_set_shared(s->nc, s->pool, s->views, n, maps);
  sl__free(maps);
  sl__free(row);
  return st;
}

void sl__shared_regs_close(sl_session *s) {
  if (s->nc && s->views) sl__net_coll_set_shared(s->nc, NULL, NULL, 0, NULL);
  for (uint32_t k = 0; k < s->n_views; k++)
    sl__shm_view_unmap(&s->views[k]);
  sl__free(s->views);
  s->views = NULL;
  s->n_views = 0;
}
