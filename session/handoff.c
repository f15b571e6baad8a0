/* Variables from one job to the next over daemons (docs/cluster.md,
 * "Restarts"). A remote session restarts its job to take written values,
 * a load, a restore or a roll-back, like the embedded session (state.c);
 * but the variables are on the daemons. So each daemon keeps its job
 * after it ends, until the next job or the program's release, and the
 * next job's blob says how its variables start, in lines of text:
 *
 *   cwd PATH              the program's working directory (relative paths
 *                         of sl_variable_load)
 *   restore PATH          every variable from this checkpoint
 *   load PATH             the weights it names from this checkpoint
 *   value NODE BYTES      the program wrote graph node NODE's whole value:
 *                         in the store under "sluice/job/<job>/value/NODE"
 *   carry JOB VERSION     the others at version VERSION of job JOB: a copy
 *                         the program asked for before ending it ("hold"),
 *                         or, after a failed step, the registers as the
 *                         failure left them (checked to hold it)
 *
 * Without restore or carry, the job is a session's first: variables start
 * from their initializers or sl_variable_load's files. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_write.h"
#include "daemon.h"
#include "session_int.h"

#define CALL_MS 30000u

static size_t var_bytes(const sl_session *s, int32_t node) {
  return sl__session_value_bytes(sl__session_var_value(s, node));
}

/* Appends a line to the growing text (*t, *len, *cap). */
static sl_status add_line(char **t, size_t *len, size_t *cap, const char *fmt,
                          ...) SL__PRINTF(4, 5);
static sl_status add_line(char **t, size_t *len, size_t *cap, const char *fmt,
                          ...) {
  char line[SL__JOB_BLOB_PATH + 64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof line)
    return sl__fail(SL_EINVAL, "a path of the restart is too long");
  if (*len + (size_t)n + 2 > *cap) {
    size_t c = (*cap + (size_t)n + 2) * 2;
    char *g = sl__realloc(*t, c);
    if (!g) return SL_ENOMEM;
    *t = g;
    *cap = c;
  }
  memcpy(*t + *len, line, (size_t)n);
  *len += (size_t)n;
  (*t)[(*len)++] = '\n';
  (*t)[*len] = '\0';
  return SL_OK;
}

sl_status sl__handoff_starts(sl_session *s, sl__cp_client *cp, uint64_t job,
                             char **text) {
  size_t len = 0, cap = 0;
  *text = NULL;
  char cwd[SL__JOB_BLOB_PATH];
  if (!getcwd(cwd, sizeof cwd))
    return sl__fail(SL_EIO, "no working directory: %s", strerror(errno));
  sl_status st = add_line(text, &len, &cap, "cwd %s", cwd);
  const sl__next_start *n = &s->next;
  if (st == SL_OK && n->restore)
    st = add_line(text, &len, &cap, "restore %s", n->restore);
  if (st == SL_OK && n->load)
    st = add_line(text, &len, &cap, "load %s", n->load);
  for (int32_t i = 0; st == SL_OK && s->var_src && i < s->pp->n_nodes; i++) {
    if (!s->var_src[i].logical) continue;
    char prefix[SL__CP_MAX_NAME];
    sl__daemon_value_key(job, i, prefix, sizeof prefix);
    st = sl__kv_put_chunks(cp, prefix, s->var_src[i].logical, var_bytes(s, i));
    if (st == SL_OK)
      st = add_line(text, &len, &cap, "value %d %zu", (int)i, var_bytes(s, i));
  }
  if (st == SL_OK && n->carry)
    st = add_line(text, &len, &cap, "carry %" PRIu64 " %lld", n->carry_job,
                  (long long)n->carry_version);
  if (st == SL_OK && len >= SL__JOB_BLOB_STARTS)
    st = sl__fail(SL_EINVAL, "the restart's description takes %zu bytes", len);
  if (st != SL_OK) {
    sl__free(*text);
    *text = NULL;
  }
  return st;
}

void sl__handoff_forget(sl_session *s, sl__cp_client *cp, uint64_t job) {
  for (int32_t i = 0; s->var_src && i < s->pp->n_nodes; i++) {
    if (!s->var_src[i].logical) continue;
    char prefix[SL__CP_MAX_NAME];
    sl__daemon_value_key(job, i, prefix, sizeof prefix);
    sl__kv_empty_chunks(cp, prefix, var_bytes(s, i));
  }
}

/* ---- a daemon ---------------------------------------------------------------
 */

/* Whether this node runs a rank of variable node. */
static bool holds_rank(const sl_session *s, int32_t node) {
  int nr = sl_placement_size(sl__session_var_value(s, node)->placement);
  for (int r = 0; r < nr; r++)
    if (sl__session_rank_here(s, node, r)) return true;
  return false;
}

/* Variable node's written value, from the store, when this node runs it. */
static sl_status take_value(sl_session *s, sl__cp_client *cp, uint64_t job,
                            int32_t node, size_t bytes) {
  if (node < 0 || node >= s->pp->n_nodes || !sl__session_is_variable(s, node) ||
      bytes != var_bytes(s, node))
    return sl__fail(SL_EINVAL, "a written value for node %d of %zu bytes",
                    (int)node, bytes);
  if (!holds_rank(s, node)) return SL_OK;
  sl__var_src *src = &s->var_src[node];
  if (!(src->logical = sl__malloc(bytes + 64))) return SL_ENOMEM;
  char prefix[SL__CP_MAX_NAME];
  sl__daemon_value_key(job, node, prefix, sizeof prefix);
  src->ck = NULL; /* a written value wins over a load */
  return sl__kv_get_chunks(cp, prefix, src->logical, bytes, CALL_MS);
}

sl_status sl__handoff_take(sl_session *s, const char *text, sl_session *kept,
                           sl__cp_client *cp, uint64_t job) {
  if (!sl__session_sources(s)) return SL_ENOMEM;
  bool first = true, carry = false;
  uint64_t carry_job = 0;
  long long version = -1;
  sl_status st = SL_OK;
  char path[SL__JOB_BLOB_PATH];
  for (const char *l = text; st == SL_OK && l && *l;) {
    const char *nl = strchr(l, '\n');
    size_t n = nl ? (size_t)(nl - l) : strlen(l);
    char line[SL__JOB_BLOB_PATH + 64];
    if (n >= sizeof line)
      return sl__fail(SL_EINVAL, "a starts line of %zu bytes", n);
    memcpy(line, l, n);
    line[n] = '\0';
    l = nl ? nl + 1 : NULL;
    int node = -1;
    size_t bytes = 0;
    if (sscanf(line, "cwd %4095[^\n]", path) == 1) {
      sl__free(s->cwd);
      if (!(s->cwd = sl__strdup(path))) st = SL_ENOMEM;
    } else if (sscanf(line, "restore %4095[^\n]", path) == 1) {
      first = false;
      st = sl__session_restore_sources(s, path, s->base);
    } else if (sscanf(line, "load %4095[^\n]", path) == 1) {
      st = sl__session_load_sources(s, path);
    } else if (sscanf(line, "value %d %zu", &node, &bytes) == 2) {
      st = take_value(s, cp, job, node, bytes);
    } else if (sscanf(line, "carry %" SCNu64 " %lld", &carry_job, &version) ==
                   2 &&
               version >= 0) {
      first = false;
      carry = true;
    } else {
      st = sl__fail(SL_EINVAL, "the job's starts: a bad line '%.200s'", line);
    }
  }
  if (st != SL_OK) return st;
  if (carry) {
    /* After the written and loaded values: the others carry over. */
    if (!kept || kept->job_id != carry_job)
      return sl__fail(SL_ESTATE,
                      "this node no longer holds job %" PRIu64
                      "'s variables (the daemon restarted, or served another "
                      "job since)",
                      carry_job);
    if (kept->pp->n_nodes != s->pp->n_nodes)
      return sl__fail(SL_EINVAL, "job %" PRIu64 " ran another graph",
                      carry_job);
    return sl__session_carry(s, kept, version, true);
  }
  return first ? sl__session_open_files(s) : SL_OK;
}

sl_status sl__session_hold(sl_session *s, int64_t version) {
  sl__session_free_held(s);
  int32_t nn = s->pp->n_nodes;
  if (!(s->held = sl__calloc((size_t)nn + 1, sizeof *s->held)))
    return SL_ENOMEM;
  s->held_version = version;
  for (int32_t i = 0; i < nn; i++) {
    if (!sl__session_is_variable(s, i)) continue;
    const sl__ptensor *v = sl__session_var_value(s, i);
    int nr = sl_placement_size(v->placement);
    if (!(s->held[i] = sl__calloc((size_t)nr, sizeof *s->held[i])))
      return SL_ENOMEM;
    for (int r = 0; r < nr; r++) {
      if (!sl__session_rank_here(s, i, r)) continue;
      sl_slice box;
      size_t b = 0;
      SL_CHECK(sl__session_rank_box(v, r, &box, &b));
      if (!(s->held[i][r] = sl__malloc_aligned(b + 64, SL__CKPT_DATA_ALIGN)))
        return SL_ENOMEM;
      SL_CHECK(sl__session_job_shard(s, i, r, version, s->held[i][r], b));
    }
  }
  return SL_OK;
}

void sl__session_free_held(sl_session *s) {
  for (int32_t i = 0; s->held && i < s->pp->n_nodes; i++) {
    if (!s->held[i]) continue;
    int nr = sl_placement_size(sl__session_var_value(s, i)->placement);
    for (int r = 0; r < nr; r++)
      sl__free(s->held[i][r]);
    sl__free(s->held[i]);
  }
  sl__free(s->held);
  s->held = NULL;
}
