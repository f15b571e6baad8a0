/* Checkpoints of a session (docs/checkpoint.md): save writes each distinct
 * shard of every variable once into its node's safetensors file and
 * commits the index; restore and load restart the job with variables read
 * from a checkpoint, each rank reading only the stored pieces its shard
 * intersects (checkpoint/read.c), so a checkpoint loads into any layout,
 * device count and node count. Over daemons, each daemon writes its own
 * node's file (the section near the end). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ckpt_write.h"
#include "job_blob.h"
#include "cpu/npy.h"
#include "session_int.h"

/* One stored piece and where it comes from. */
typedef struct save_piece {
  int32_t node;
  int rank;
  size_t bytes;
  char placement[256], sbp[128];
} save_piece;

/* A save: what this node stores, and, for a background save, a snapshot
 * of it. */
struct sl__save {
  char *dir;
  int64_t step, version; /* the step saved; the job's version of it */
  uint32_t node;
  int32_t n;
  save_piece *sp;
  sl__ckpt_piece *pc;
  void **data;  /* per piece: its bytes at the step (background saves) */
  int32_t n_kv; /* the index's metadata, for the side that commits */
  sl__ckpt_kv *kv;
  char *kv_text;
  pthread_t thread;
  sl_status st;
  char msg[1024];
  struct remote_save *remote; /* a background save over daemons */
};

static void remote_free(struct remote_save *rs);

static void save_free(sl__save *sv) {
  if (!sv) return;
  if (sv->remote) remote_free(sv->remote);
  for (int32_t k = 0; sv->data && k < sv->n; k++)
    sl__free(sv->data[k]);
  sl__free(sv->data);
  sl__free(sv->kv);
  sl__free(sv->kv_text);
  sl__free(sv->pc);
  sl__free(sv->sp);
  sl__free(sv->dir);
  sl__free(sv);
}

/* "source.<name>": where each data source of the graph stands, for people
 * reading the index; a restore derives every position from the step. */
static sl_status source_metadata(const sl_session *s, int32_t *n_kv,
                                 sl__ckpt_kv **kv, char **text) {
  int32_t n = 0, nn = s->pp->n_nodes;
  *kv = sl__calloc((size_t)nn + 2, sizeof **kv);
  *text = sl__calloc((size_t)nn + 2, 512);
  if (!*kv || !*text) return SL_ENOMEM;
  char *t = *text;
  snprintf(t, 512, "%s", sl_version());
  (*kv)[n++] = (sl__ckpt_kv){"sluice_version", t};
  for (int32_t i = 0; i < nn; i++) {
    const sl__pnode *g = &s->pp->nodes[i];
    if (!g->def || !g->def->per_step) continue;
    char *key = t + 512 * (size_t)(n + 1);
    char *val = key + 256;
    snprintf(key, 256, "source.%s", g->name);
    int64_t file = sl__attr_int(&g->attrs, "file", -1);
    sl__meta m;
    if (file >= 0 && sl__npy_meta((int32_t)file, &m) == SL_OK &&
        m.shape.ndim > 0 && m.shape.dims[0] > 0) {
      int64_t batch = sl__attr_int(&g->attrs, "batch", 0);
      snprintf(val, 256, "%s: step %lld reads rows from %lld", g->def->name,
               (long long)s->steps,
               (long long)(s->steps * batch % m.shape.dims[0]));
    } else {
      snprintf(val, 256, "%s seed %lld: step %lld", g->def->name,
               (long long)sl__attr_int(&g->attrs, "seed", 0),
               (long long)s->steps);
    }
    (*kv)[n++] = (sl__ckpt_kv){key, val};
  }
  *n_kv = n;
  return SL_OK;
}

/* Orders the pieces of whole SL__CKPT_DATA_ALIGN blocks first (stable):
 * each then starts at an aligned offset of the file, where a direct write
 * takes it from aligned memory without a copy. */
static sl_status blocks_first(sl__save *sv) {
  save_piece *sp = sl__calloc((size_t)sv->n + 1, sizeof *sp);
  sl__ckpt_piece *pc = sl__calloc((size_t)sv->n + 1, sizeof *pc);
  if (!sp || !pc) {
    sl__free(sp);
    sl__free(pc);
    return SL_ENOMEM;
  }
  int32_t m = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int32_t k = 0; k < sv->n; k++)
      if ((sv->sp[k].bytes % SL__CKPT_DATA_ALIGN != 0) == pass) {
        sp[m] = sv->sp[k];
        pc[m] = sv->pc[k];
        /* pc's strings point into their save_piece */
        pc[m].placement = sp[m].placement;
        pc[m].sbp = sp[m].sbp;
        m++;
      }
  sl__free(sv->sp);
  sl__free(sv->pc);
  sv->sp = sp;
  sv->pc = pc;
  return SL_OK;
}

/* What node `node` stores of every variable (each distinct shard once):
 * version `version` of its job, step `step`. */
static sl_status save_plan(const sl_session *s, const char *dir, uint32_t node,
                           int64_t step, int64_t version, sl__save **out) {
  *out = NULL;
  int32_t nn = s->pp->n_nodes, n = 0;
  for (int32_t i = 0; i < nn; i++)
    if (sl__session_is_variable(s, i))
      n += sl_placement_size(sl__session_var_value(s, i)->placement);
  sl__save *sv;
  if (SL_NEW(sv) != SL_OK) return SL_ENOMEM;
  sv->step = step;
  sv->version = version;
  sv->node = node;
  sv->dir = sl__strdup(dir);
  sv->sp = sl__calloc((size_t)n + 1, sizeof *sv->sp);
  sv->pc = sl__calloc((size_t)n + 1, sizeof *sv->pc);
  sl_status st = sv->dir && sv->sp && sv->pc ? SL_OK : SL_ENOMEM;
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    if (!sl__session_is_variable(s, i)) continue;
    const sl__ptensor *v = sl__session_var_value(s, i);
    if (sl_shape_numel(&v->meta.shape) == 0) continue; /* nothing to keep */
    for (int r = 0; r < sl_placement_size(v->placement) && st == SL_OK; r++) {
      if (!sl__session_stores_rank(v, r) ||
          !sl__session_rank_on_node(v, r, node))
        continue;
      save_piece *p = &sv->sp[sv->n];
      sl__ckpt_piece *c = &sv->pc[sv->n++];
      p->node = i;
      p->rank = r;
      sl_placement_print(v->placement, p->placement, sizeof p->placement);
      sl_nd_sbp_print(&v->sbp, p->sbp, sizeof p->sbp);
      c->tensor = s->pp->nodes[i].name;
      c->dtype = v->meta.dtype;
      c->shape = v->meta.shape;
      c->placement = p->placement;
      c->sbp = p->sbp;
      st = sl_local_slice(&v->meta.shape, v->placement, &v->sbp, r, &c->box);
      p->bytes = (size_t)sl_slice_numel(&c->box) * sl_dtype_size(c->dtype);
    }
  }
  if (st == SL_OK) st = blocks_first(sv);
  if (st != SL_OK) {
    save_free(sv);
    return st;
  }
  *out = sv;
  return SL_OK;
}

/* Copies every piece to host memory (a background save's snapshot). */
static sl_status save_snapshot(sl_session *s, sl__save *sv) {
  if (!(sv->data = sl__calloc((size_t)sv->n + 1, sizeof *sv->data)))
    return SL_ENOMEM;
  for (int32_t k = 0; k < sv->n; k++) {
    if (!(sv->data[k] =
              sl__malloc_aligned(sv->sp[k].bytes + 64, SL__CKPT_DATA_ALIGN)))
      return SL_ENOMEM;
    SL_CHECK(sl__session_job_shard(s, sv->sp[k].node, sv->sp[k].rank,
                                   sv->version, sv->data[k], sv->sp[k].bytes));
  }
  return SL_OK;
}

static bool exists(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return stat(path, &st) == 0;
}

/* Writes the node's file: pieces from the snapshot, or, without one, from
 * the job (s, idle between steps or ended). */
static sl_status save_file(sl__save *sv, const sl_session *s,
                           sl__ckpt_file_done *done) {
  char name[128];
  size_t cap = 0;
  for (int32_t k = 0; k < sv->n; k++)
    cap = SL_MAX(cap, sv->sp[k].bytes);
  /* A daemon's copy of the step (a background save's) */
  bool held = s && s->held && s->held_version == sv->version;
  void *buf = sv->data || held ? NULL : sl__malloc(cap + 64);
  if (!sv->data && !held && !buf) return SL_ENOMEM;
  sl__ckpt_file *f = NULL;
  /* A file of this name may exist (the directory holds a save of this
   * step): the new one must not replace what the index still names. */
  sl__ckpt_file_name(sv->step, sv->node, name, sizeof name);
  for (int gen = 2; gen < 1000 && exists(sv->dir, name); gen++)
    snprintf(name, sizeof name, "step-%06lld-%d.node%u.safetensors",
             (long long)sv->step, gen, (unsigned)sv->node);
  /* A copy (a background save's) is written beside training: direct. */
  sl_status st = sl__ckpt_file_create(sv->dir, name, sv->step, sv->n, sv->pc,
                                      sv->data || held, &f);
  for (int32_t k = 0; k < sv->n && st == SL_OK; k++) {
    const save_piece *p = &sv->sp[k];
    /* Host shards go to the file straight from their registers. */
    const void *src = sv->data ? sv->data[k]
                      : held   ? s->held[p->node][p->rank]
                               : sl__session_job_shard_host(
                                     s, p->node, p->rank, sv->version, p->bytes);
    if (!src) {
      st = sl__session_job_shard(s, p->node, p->rank, sv->version, buf,
                                 p->bytes);
      src = buf;
    }
    if (st == SL_OK) st = sl__ckpt_file_write(f, src, p->bytes);
  }
  if (st == SL_OK) {
    st = sl__ckpt_file_close(f, sv->node, done);
    f = NULL;
  }
  sl__ckpt_file_abort(f);
  sl__free(buf);
  return st;
}

/* One node's whole save: its file, then the index. */
static sl_status save_write(sl__save *sv, const sl_session *s) {
  sl__ckpt_file_done done;
  memset(&done, 0, sizeof done);
  sl_status st = save_file(sv, s, &done);
  if (st == SL_OK)
    st = sl__ckpt_commit(sv->dir, sv->step, 1, &done, sv->n_kv, sv->kv);
  sl__ckpt_file_done_free(&done);
  if (st != SL_OK) sl__fail_context(st, "save to '%s': ", sv->dir);
  return st;
}

int sl__session_writer_nice(int nice) {
  id_t tid = (id_t)syscall(SYS_gettid);
  int was = getpriority(PRIO_PROCESS, tid);
  if (setpriority(PRIO_PROCESS, tid, nice) != 0)
    SL_DEBUG("save: could not set the writer's priority to %d", nice);
  return was;
}

static void *save_main(void *arg) {
  sl__save *sv = arg;
  sl__session_writer_nice(SL__WRITER_NICE);
  sv->st = save_write(sv, NULL);
  if (sv->st != SL_OK) snprintf(sv->msg, sizeof sv->msg, "%s", sl_last_error());
  return NULL;
}

/* Joins the background save, keeping its outcome (the first failure)
 * for sl_session_save_wait. */
void sl__session_save_join(sl_session *s) {
  sl__save *sv = s->bg_save;
  if (!sv) return;
  pthread_join(sv->thread, NULL);
  s->bg_save = NULL;
  if (sv->st != SL_OK && s->bg_status == SL_OK) {
    s->bg_status = sv->st;
    snprintf(s->bg_msg, sizeof s->bg_msg, "%s", sv->msg);
  }
  save_free(sv);
}

sl_status sl_session_save_wait(sl_session *s) {
  if (!s) return sl__fail(SL_EINVAL, "save: NULL session");
  sl__session_save_join(s);
  sl_status st = s->bg_status;
  s->bg_status = SL_OK;
  if (st != SL_OK) sl__fail(st, "%s", s->bg_msg);
  return st;
}

/* ---- sessions over daemons -------------------------------------------------
 *
 * A save asks every daemon through the control plane's store
 * (daemon_requests.c): each writes its node's file, the program waits for
 * every answer and commits the index. A restore or load starts a new job
 * whose daemons read their variables from the checkpoint (handoff.c). The
 * directory must be the same path on every node (a shared file system). */

sl_status sl__session_save_node(sl_session *s, const char *dir, int64_t step,
                                int64_t version, char *name, size_t n,
                                int64_t *bytes, uint32_t *crc) {
  sl__save *sv;
  SL_CHECK(save_plan(s, dir, s->self_node, step, version, &sv));
  sl__ckpt_file_done done;
  memset(&done, 0, sizeof done);
  sl_status st = save_file(sv, s, &done);
  if (st == SL_OK) {
    snprintf(name, n, "%s", done.name);
    *bytes = done.bytes;
    *crc = done.crc32c;
  }
  sl__ckpt_file_done_free(&done);
  save_free(sv);
  return st;
}

int32_t sl__session_save_pieces(const sl_session *s) {
  sl__save *sv;
  if (save_plan(s, "-", s->self_node, 0, 0, &sv) != SL_OK) return -1;
  int32_t n = sv->n;
  save_free(sv);
  return n;
}

/* dir as an absolute path (daemons have their own working directories). */
static sl_status absolute(const char *dir, char *out, size_t n) {
  char cwd[4096];
  if (dir[0] == '/') {
    snprintf(out, n, "%s", dir);
  } else if (getcwd(cwd, sizeof cwd)) {
    snprintf(out, n, "%s/%s", cwd, dir);
  } else {
    return sl__fail(SL_EIO, "'%s': no working directory: %s", dir,
                    strerror(errno));
  }
  if (strlen(out) >= SL__JOB_BLOB_PATH)
    return sl__fail(SL_EINVAL, "'%s': the path is too long", dir);
  return SL_OK;
}

/* A save over daemons, the program's side: what each node stores
 * (plans[r]), and once asked, the request whose answers name the files. */
typedef struct remote_save {
  sl_session *s;
  char dir[SL__JOB_BLOB_PATH + 64];
  int64_t step, seq;
  uint32_t nn;
  sl__save **plans;
} remote_save;

static void remote_free(remote_save *rs) {
  for (uint32_t r = 0; rs->plans && r < rs->nn; r++)
    save_free(rs->plans[r]);
  sl__free(rs->plans);
  sl__free(rs);
}

static sl_status remote_plan(sl_session *s, const char *dir,
                             remote_save **out) {
  remote_save *rs;
  if (SL_NEW(rs) != SL_OK) return SL_ENOMEM;
  rs->s = s;
  rs->step = s->steps;
  rs->nn = s->driver; /* the daemons are nodes 0..nn-1 */
  sl_status st = absolute(dir, rs->dir, sizeof rs->dir);
  if (st == SL_OK &&
      !(rs->plans = sl__calloc((size_t)rs->nn + 1, sizeof *rs->plans)))
    st = SL_ENOMEM;
  for (uint32_t r = 0; r < rs->nn && st == SL_OK; r++)
    st = save_plan(s, rs->dir, r, s->steps, s->steps - s->base, &rs->plans[r]);
  if (st == SL_OK)
    st = source_metadata(s, &rs->plans[0]->n_kv, &rs->plans[0]->kv,
                         &rs->plans[0]->kv_text);
  if (st != SL_OK) {
    remote_free(rs);
    return st;
  }
  *out = rs;
  return SL_OK;
}

/* Every node's answer (also after a failure, so none is left behind),
 * then the index. */
static sl_status remote_commit(remote_save *rs) {
  sl_session *s = rs->s;
  sl__ckpt_file_done *done = sl__calloc((size_t)rs->nn + 1, sizeof *done);
  sl_status st = done ? SL_OK : SL_ENOMEM;
  int32_t n_files = 0;
  for (uint32_t r = 0; r < rs->nn; r++) {
    char ans[1400], name[128];
    long long bytes = -1;
    unsigned crc = 0;
    sl_status as = sl__remote_answer(s, rs->seq, (int)r, ans, sizeof ans);
    if (st == SL_OK) st = as;
    if (st != SL_OK || rs->plans[r]->n == 0 || !done) continue;
    if (sscanf(ans, "%127s %lld %x", name, &bytes, &crc) != 3 || bytes < 0)
      st = sl__fail(SL_EINTERNAL, "node %u: a malformed answer '%s'", r, ans);
    else
      st = sl__ckpt_file_describe(name, r, bytes, crc, rs->plans[r]->n,
                                  rs->plans[r]->pc, &done[n_files++]);
  }
  sl__remote_forget(s, rs->seq);
  if (st == SL_OK)
    st = sl__ckpt_commit(rs->dir, rs->step, n_files, done, rs->plans[0]->n_kv,
                         rs->plans[0]->kv);
  for (int32_t k = 0; done && k < n_files; k++)
    sl__ckpt_file_done_free(&done[k]);
  sl__free(done);
  if (st != SL_OK) sl__fail_context(st, "save to '%s': ", rs->dir);
  return st;
}

static void *remote_main(void *arg) {
  sl__save *sv = arg;
  sv->st = remote_commit(sv->remote);
  if (sv->st != SL_OK) snprintf(sv->msg, sizeof sv->msg, "%s", sl_last_error());
  return NULL;
}

/* Over daemons: each daemon writes its node's file once it completed the
 * step (the program releases no step until every node answered); in the
 * background, each copies its shards first ("hold", answered at once)
 * and writes them while training goes on, a thread here waiting for the
 * answers to commit the index. */
static sl_status save_remote(sl_session *s, const char *dir, bool background) {
  remote_save *rs = NULL;
  SL_CHECK(remote_plan(s, dir, &rs));
  char req[SL__JOB_BLOB_PATH + 160];
  int64_t version = s->steps - s->base;
  sl_status st = SL_OK;
  if (background) {
    st = sl__remote_hold(s, version);
    snprintf(req, sizeof req, "write %lld %lld %s", (long long)version,
             (long long)rs->step, rs->dir);
  } else {
    snprintf(req, sizeof req, "save %lld %lld %s", (long long)version,
             (long long)rs->step, rs->dir);
  }
  if (st == SL_OK) st = sl__remote_ask(s, req, &rs->seq);
  if (st != SL_OK) {
    remote_free(rs);
    return sl__fail_context(st, "save to '%s': ", dir);
  }
  if (!background) {
    st = remote_commit(rs);
    remote_free(rs);
    return st;
  }
  sl__save *sv;
  if (SL_NEW(sv) != SL_OK) {
    st = remote_commit(rs); /* the daemons write it anyway */
    remote_free(rs);
    return st != SL_OK ? st : SL_ENOMEM;
  }
  sv->remote = rs;
  if (pthread_create(&sv->thread, NULL, remote_main, sv) != 0) {
    st = remote_commit(rs);
    save_free(sv);
    return st;
  }
  s->bg_save = sv;
  return SL_OK;
}

static sl_status save(sl_session *s, const char *dir, bool background) {
  if (!s || !dir) return sl__fail(SL_EINVAL, "save: NULL argument");
  if (!dir[0]) return sl__fail(SL_EINVAL, "save: no directory given");
  sl__session_save_join(s);
  SL_CHECK(sl__session_check_usable(s, "save"));
  SL_CHECK(sl__session_apply_writes(s));
  if (s->remote) return save_remote(s, dir, background);
  sl__save *sv;
  SL_CHECK(save_plan(s, dir, s->self_node, s->steps, s->steps - s->base, &sv));
  sl_status st = source_metadata(s, &sv->n_kv, &sv->kv, &sv->kv_text);
  if (st == SL_OK) st = background ? save_snapshot(s, sv) : save_write(sv, s);
  if (st == SL_OK && background) {
    if (pthread_create(&sv->thread, NULL, save_main, sv) == 0) {
      s->bg_save = sv;
      return SL_OK;
    }
    st = sl__fail(SL_EINTERNAL, "save to '%s': no thread", dir);
  }
  save_free(sv);
  return st;
}

sl_status sl_session_save(sl_session *s, const char *dir) {
  return save(s, dir, false);
}

sl_status sl_session_save_async(sl_session *s, const char *dir) {
  return save(s, dir, true);
}

/* ---- restore and load -------------------------------------------------------
 */

/* Checks tensor ti of ck against variable node: same shape and dtype. */
static sl_status check_tensor(const sl_session *s, const char *path,
                              const sl_checkpoint *ck, int32_t ti,
                              int32_t node) {
  const sl__ptensor *v = sl__session_var_value(s, node);
  sl_checkpoint_tensor t;
  SL_CHECK(sl_checkpoint_get_tensor(ck, ti, &t));
  char want[128], got[128];
  sl_shape_print(&v->meta.shape, want, sizeof want);
  sl_shape_print(&t.shape, got, sizeof got);
  if (!t.dtype_known || t.dtype != v->meta.dtype ||
      !sl_shape_equal(&t.shape, &v->meta.shape))
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s' is %s %s, the variable is "
                    "%s %s",
                    path, t.name,
                    t.dtype_known ? sl_dtype_name(t.dtype) : t.dtype_name, got,
                    sl_dtype_name(v->meta.dtype), want);
  return SL_OK;
}

/* Points every variable that `ck` should set at its tensor: all of them
 * for a restore (every trained one must be there), the weights found by
 * name for a load. *set counts them. */
static sl_status plan_sources(sl_session *s, const char *path,
                              const sl_checkpoint *ck, bool restore,
                              int32_t *set) {
  sl__var_src *src = sl__session_sources(s);
  int32_t nn = s->pp->n_nodes;
  int32_t *take = sl__calloc((size_t)nn + 1, sizeof *take);
  if (!src || !take) {
    sl__free(take);
    return SL_ENOMEM;
  }
  *set = 0;
  sl_status st = SL_OK;
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    take[i] = -1;
    if (!sl__session_is_variable(s, i)) continue;
    const sl__pnode *n = &s->pp->nodes[i];
    if (!restore && n->optimizer) continue;
    if (sl_shape_numel(&sl__session_var_value(s, i)->meta.shape) == 0) continue;
    int32_t ti = sl_checkpoint_find(ck, n->name);
    if (ti >= 0) {
      st = check_tensor(s, path, ck, ti, i);
      take[i] = ti;
      (*set)++;
    } else if (restore && n->trained) {
      st = sl__fail(SL_EINVAL,
                    "checkpoint '%s' has no tensor '%s' (a variable the steps "
                    "train)",
                    path, n->name);
    }
  }
  /* Checked: now take them (a written value gives way). */
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    if (take[i] < 0) continue;
    sl__free(src[i].logical);
    src[i].logical = NULL;
    src[i].ck = ck;
    src[i].tensor = take[i];
  }
  sl__free(take);
  return st;
}

static sl_status restore_or_load(sl_session *s, const char *path, bool restore,
                                 int32_t *loaded) {
  const char *what = restore ? "restore" : "load";
  if (loaded) *loaded = 0;
  if (!s || !path) return sl__fail(SL_EINVAL, "%s: NULL argument", what);
  sl__session_save_join(s); /* a restore may read what it writes */
  SL_CHECK(sl__session_check_usable(s, what));
  sl_checkpoint *ck = NULL;
  SL_CHECK(sl_checkpoint_open(path, &ck));
  int64_t step = restore ? sl_checkpoint_step(ck) : s->steps;
  int32_t set = 0;
  sl_status st = SL_OK;
  if (step < 0)
    st = sl__fail(SL_EINVAL,
                  "checkpoint '%s' has no step: it holds weights, which "
                  "sl_session_load (--load) reads",
                  path);
  if (st == SL_OK) st = plan_sources(s, path, ck, restore, &set);
  char abs[SL__JOB_BLOB_PATH + 64];
  if (st == SL_OK && s->remote) {
    /* Checked here; the daemons read it. */
    for (int32_t i = 0; s->var_src && i < s->pp->n_nodes; i++)
      s->var_src[i].ck = NULL;
    st = absolute(path, abs, sizeof abs);
    if (st == SL_OK) st = sl__session_restart_remote(s, abs, restore, step);
  } else if (st == SL_OK) {
    /* Every shard read before the job is touched: a bad piece leaves the
     * session as it was. */
    st = sl__session_read_sources(s);
    if (st == SL_OK) st = sl__session_restart(s, step);
  }
  if (st != SL_OK && s->var_src) {
    /* Nothing was taken: forget the checkpoint's tensors. */
    for (int32_t i = 0; i < s->pp->n_nodes; i++)
      s->var_src[i].ck = NULL;
  }
  sl_checkpoint_close(ck);
  if (st == SL_OK && loaded) *loaded = set;
  return st;
}

sl_status sl__session_restore_sources(sl_session *s, const char *path,
                                      int64_t step) {
  SL_CHECK(sl_checkpoint_open(path, &s->restore_ck));
  /* The program checked it; a node that sees another file refuses. */
  if (sl_checkpoint_step(s->restore_ck) != step)
    return sl__fail(SL_EINVAL,
                    "checkpoint '%s' here is of step %lld, the program "
                    "restores step %lld (is the directory shared?)",
                    path, (long long)sl_checkpoint_step(s->restore_ck),
                    (long long)step);
  int32_t set = 0;
  return plan_sources(s, path, s->restore_ck, true, &set);
}

sl_status sl__session_load_sources(sl_session *s, const char *path) {
  if (s->restore_ck)
    return sl__fail(SL_EINVAL, "'%s': a job starts from one checkpoint", path);
  SL_CHECK(sl_checkpoint_open(path, &s->restore_ck));
  int32_t set = 0;
  return plan_sources(s, path, s->restore_ck, false, &set);
}

sl_status sl_session_restore(sl_session *s, const char *path) {
  return restore_or_load(s, path, true, NULL);
}

sl_status sl_session_load(sl_session *s, const char *path, int32_t *loaded) {
  return restore_or_load(s, path, false, loaded);
}
