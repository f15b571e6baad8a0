/* What a daemon does for the program between steps (docs/cluster.md,
 * "Requests"). The program puts request seq of its job in the control
 * plane's store; every node answers each one, in order, with text ("E"
 * and why on failure), bytes coming with it in chunks:
 *
 *   save VERSION STEP DIR   once this node completed VERSION steps of its
 *                           job (the program releases no more until every
 *                           node answered), write its file of the
 *                           checkpoint of step STEP into DIR: "NAME BYTES
 *                           CRC32C" ("-" for a node that stores nothing)
 *   hold VERSION            copy this node's shards of every variable at
 *                           VERSION (for the next job, or a background
 *                           save): "ok"
 *   write VERSION STEP DIR  write that copy as `save` does, while training
 *                           goes on; the copy is freed then
 *   read VERSION NODE       this node's stored shards of graph node NODE
 *                           at VERSION, in rank order: "ok BYTES", the
 *                           bytes in chunks */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "session_int.h"

#define POLL_MS 500u
#define CALL_MS 30000u

static void chunk_key(const char *prefix, size_t k, char *buf, size_t n) {
  snprintf(buf, n, "%s/%zu", prefix, k);
}

sl_status sl__kv_put_chunks(sl__cp_client *cp, const char *prefix,
                            const void *data, size_t bytes) {
  char key[SL__CP_MAX_NAME];
  for (size_t off = 0, k = 0; off < bytes; off += SL__KV_CHUNK, k++) {
    chunk_key(prefix, k, key, sizeof key);
    SL_CHECK(sl__cp_kv_put(cp, key, (const uint8_t *)data + off,
                           SL_MIN(SL__KV_CHUNK, bytes - off), CALL_MS));
  }
  return SL_OK;
}

sl_status sl__kv_get_chunks(sl__cp_client *cp, const char *prefix, void *data,
                            size_t bytes, uint64_t wait_ms) {
  char key[SL__CP_MAX_NAME];
  for (size_t off = 0, k = 0; off < bytes; off += SL__KV_CHUNK, k++) {
    chunk_key(prefix, k, key, sizeof key);
    uint8_t *v = NULL;
    size_t n = 0;
    SL_CHECK(sl__cp_kv_get(cp, key, true, wait_ms, &v, &n));
    size_t want = SL_MIN(SL__KV_CHUNK, bytes - off);
    if (n == want) memcpy((uint8_t *)data + off, v, n);
    sl__free(v);
    if (n != want)
      return sl__fail(SL_EINTERNAL, "'%s': %zu bytes where %zu were put", key,
                      n, want);
  }
  return SL_OK;
}

void sl__kv_empty_chunks(sl__cp_client *cp, const char *prefix, size_t bytes) {
  char key[SL__CP_MAX_NAME];
  for (size_t off = 0, k = 0; off < bytes; off += SL__KV_CHUNK, k++) {
    chunk_key(prefix, k, key, sizeof key);
    sl__cp_kv_put(cp, key, "", 0, CALL_MS);
  }
}

/* Waits until this node completed `version` steps of its job: SL_OK, or
 * why it never will. */
static sl_status wait_version(const sl__daemon_requests *q, int64_t version) {
  sl_session *s = q->s;
  pthread_mutex_lock(&s->lock);
  while (s->completed < version && !atomic_load(q->done) &&
         atomic_load(&s->failed) == SL_OK)
    sl__cond_wait_ns(&s->cond, &s->lock, 100000000ull);
  bool ready = s->completed >= version;
  pthread_mutex_unlock(&s->lock);
  if (ready) return SL_OK;
  return sl__fail(SL_EABORTED, "the job %s before it completed step %lld",
                  atomic_load(&s->failed) != SL_OK ? "failed" : "ended",
                  (long long)(s->base + version));
}

/* save / write: this node's file, answered "NAME BYTES CRC". */
static sl_status write_file(const sl__daemon_requests *q, const char *dir,
                            int64_t version, int64_t step, char *ans,
                            size_t n) {
  char name[128];
  int64_t bytes = 0;
  uint32_t crc = 0;
  SL_CHECK(sl__session_save_node(q->s, dir, step, version, name, sizeof name,
                                 &bytes, &crc));
  snprintf(ans, n, "%s %lld %08x", name, (long long)bytes, (unsigned)crc);
  return SL_OK;
}

/* Whether rank r of v is one this node sends for a read. */
static bool sends(const sl_session *s, const sl__ptensor *v, int r) {
  return sl__session_stores_rank(v, r) &&
         sl__session_rank_on_node(v, r, s->self_node);
}

/* read: the stored shards of `node` here, in rank order, in chunks. */
static sl_status read_value(const sl__daemon_requests *q, int64_t seq,
                            int64_t version, int32_t node, char *ans,
                            size_t n) {
  sl_session *s = q->s;
  if (node < 0 || node >= s->pp->n_nodes || !sl__session_is_variable(s, node))
    return sl__fail(SL_EINVAL, "no variable %d to read", (int)node);
  const sl__ptensor *v = sl__session_var_value(s, node);
  int nr = sl_placement_size(v->placement);
  sl_slice box;
  size_t total = 0, b = 0;
  for (int r = 0; r < nr; r++)
    if (sends(s, v, r)) {
      SL_CHECK(sl__session_rank_box(v, r, &box, &b));
      total += b;
    }
  snprintf(ans, n, "ok %zu", total);
  if (total == 0) return SL_OK;
  SL_CHECK(wait_version(q, version));
  uint8_t *buf = sl__malloc(total + 64);
  if (!buf) return SL_ENOMEM;
  sl_status st = SL_OK;
  for (size_t off = 0, r = 0; (int)r < nr && st == SL_OK; r++) {
    if (!sends(s, v, (int)r)) continue;
    st = sl__session_rank_box(v, (int)r, &box, &b);
    if (st == SL_OK && b)
      st = sl__session_job_shard(s, node, (int)r, version, buf + off, b);
    off += b;
  }
  char prefix[SL__CP_MAX_NAME];
  sl__daemon_ans_key(q->job, seq, q->rank, -1, prefix, sizeof prefix);
  if (st == SL_OK) st = sl__kv_put_chunks(q->cp, prefix, buf, total);
  sl__free(buf);
  return st;
}

/* One request: its answer in ans. */
static sl_status serve(const sl__daemon_requests *q, int64_t seq,
                       const char *req, char *ans, size_t n) {
  sl_session *s = q->s;
  long long version = -1, step = -1;
  int used = 0, node = -1;
  char dir[SL__JOB_BLOB_PATH];
  if (sscanf(req, "save %lld %lld %n", &version, &step, &used) == 2 &&
      version >= 0 && req[used]) {
    snprintf(dir, sizeof dir, "%s", req + used);
    snprintf(ans, n, "- 0 0");
    /* A node holding no variable has nothing to wait for or write. */
    if (sl__session_save_pieces(s) <= 0) return SL_OK;
    SL_CHECK(wait_version(q, version));
    return write_file(q, dir, version, step, ans, n);
  }
  if (sscanf(req, "hold %lld", &version) == 1 && version >= 0) {
    snprintf(ans, n, "ok");
    SL_CHECK(wait_version(q, version));
    return sl__session_hold(s, version);
  }
  if (sscanf(req, "write %lld %lld %n", &version, &step, &used) == 2 &&
      version >= 0 && req[used]) {
    snprintf(dir, sizeof dir, "%s", req + used);
    snprintf(ans, n, "- 0 0");
    if (!s->held || s->held_version != version)
      return sl__fail(SL_ESTATE, "no copy of step %lld to write",
                      (long long)(s->base + version));
    int was = sl__session_writer_nice(SL__WRITER_NICE);
    sl_status st = sl__session_save_pieces(s) > 0
                       ? write_file(q, dir, version, step, ans, n)
                       : SL_OK;
    sl__session_writer_nice(was);
    sl__session_free_held(s);
    return st;
  }
  if (sscanf(req, "read %lld %d", &version, &node) == 2 && version >= 0)
    return read_value(q, seq, version, node, ans, n);
  return sl__fail(SL_EINVAL, "a malformed request '%.200s'", req);
}

void *sl__daemon_requests_main(void *arg) {
  const sl__daemon_requests *q = arg;
  for (int64_t seq = 1;;) {
    char key[SL__CP_MAX_NAME];
    sl__daemon_req_key(q->job, seq, key, sizeof key);
    uint8_t *v = NULL;
    size_t n = 0;
    /* Once the job ended, the requests the program made before ending it
     * (a background save's write) are still served. */
    bool ended = atomic_load(q->done);
    sl_status gst = sl__cp_kv_get(q->cp, key, !ended, POLL_MS, &v, &n);
    if (gst != SL_OK) {
      if (ended) break;
      if (gst == SL_ETIMEOUT) continue;
      if (sl__cp_client_health(q->cp) != SL_OK) break; /* the monitor acts */
      struct timespec pause = {0, 100000000};
      nanosleep(&pause, NULL);
      continue;
    }
    char req[SL__JOB_BLOB_PATH + 160], ans[1400];
    size_t k = n < sizeof req - 1 ? n : sizeof req - 1;
    memcpy(req, v, k);
    req[k] = '\0';
    sl__free(v);
    if (serve(q, seq, req, ans, sizeof ans) != SL_OK)
      snprintf(ans, sizeof ans, "Enode %d: %s", q->rank, sl_last_error());
    sl__daemon_ans_key(q->job, seq, q->rank, -1, key, sizeof key);
    /* The program waits for this answer: try again before giving up. */
    for (int tries = 0; tries < 3; tries++)
      if (sl__cp_kv_put(q->cp, key, ans, strlen(ans), CALL_MS) == SL_OK) break;
    seq++;
  }
  return NULL;
}
