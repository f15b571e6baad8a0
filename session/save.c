/* Checkpoints of the embedded session (docs/checkpoint.md): save writes
 * each distinct shard of every variable once into this node's safetensors
 * file and commits the index; restore and load restart the job with
 * variables read from a checkpoint, each rank reading only the stored
 * pieces its shard intersects (checkpoint/read.c), so a checkpoint loads
 * into any layout and device count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_write.h"
#include "cpu/npy.h"
#include "session_int.h"

static const sl__value *var_value(const sl_session *s, int32_t node) {
  return sl__graph_value(s->g, sl__graph_node(s->g, node)->out[0]);
}

static bool is_variable(const sl_session *s, int32_t node) {
  const sl__node *n = sl__graph_node(s->g, node);
  return n && n->kind == SL__NODE_VARIABLE;
}

/* Whether rank r's shard is one to store: coordinate 0 on every mesh axis
 * the value is broadcast along (the other coordinates hold copies). */
static bool stores(const sl__value *v, int r) {
  int coord[SL_MAX_DIMS] = {0};
  sl_placement_rank_coord(v->placement, r, coord);
  for (int a = 0; a < v->sbp.ndim; a++)
    if (v->sbp.sbp[a].kind == SL_SBP_BROADCAST && coord[a] != 0) return false;
  return true;
}

/* One stored piece and where it comes from. */
typedef struct save_piece {
  int32_t node;
  int rank;
  size_t bytes;
  char placement[256], sbp[128];
} save_piece;

/* "source.<name>": where each data source of the graph stands, for people
 * reading the index; a restore derives every position from the step. */
static sl_status source_metadata(const sl_session *s, int32_t *n_kv,
                                 sl__ckpt_kv **kv, char **text) {
  int32_t n = 0, nn = sl__graph_node_count(s->g);
  *kv = sl__calloc((size_t)nn + 2, sizeof **kv);
  *text = sl__calloc((size_t)nn + 2, 512);
  if (!*kv || !*text) return SL_ENOMEM;
  char *t = *text;
  snprintf(t, 512, "%s", sl_version());
  (*kv)[n++] = (sl__ckpt_kv){"sluice_version", t};
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *g = sl__graph_node(s->g, i);
    if (g->kind != SL__NODE_OP || !g->op->per_step) continue;
    char *key = t + 512 * (size_t)(n + 1);
    char *val = key + 256;
    snprintf(key, 256, "source.%s", g->name);
    int64_t file = sl__attr_int(&g->attrs, "file", -1);
    sl__meta m;
    if (file >= 0 && sl__npy_meta((int32_t)file, &m) == SL_OK &&
        m.shape.ndim > 0 && m.shape.dims[0] > 0) {
      int64_t batch = sl__attr_int(&g->attrs, "batch", 0);
      snprintf(val, 256, "%s: step %lld reads rows from %lld", g->op->name,
               (long long)s->steps,
               (long long)(s->steps * batch % m.shape.dims[0]));
    } else {
      snprintf(val, 256, "%s seed %lld: step %lld", g->op->name,
               (long long)sl__attr_int(&g->attrs, "seed", 0),
               (long long)s->steps);
    }
    (*kv)[n++] = (sl__ckpt_kv){key, val};
  }
  *n_kv = n;
  return SL_OK;
}

sl_status sl_session_save(sl_session *s, const char *dir) {
  if (!s || !dir || !dir[0]) return sl__fail(SL_EINVAL, "save: NULL argument");
  SL_CHECK(sl__session_check_usable(s, "save"));
  SL_CHECK(sl__session_apply_writes(s));
  int64_t version = s->steps - s->base;
  int32_t nn = sl__graph_node_count(s->g), n = 0;
  for (int32_t i = 0; i < nn; i++)
    if (is_variable(s, i)) n += sl_placement_size(var_value(s, i)->placement);
  save_piece *sp = sl__calloc((size_t)n + 1, sizeof *sp);
  sl__ckpt_piece *pc = sl__calloc((size_t)n + 1, sizeof *pc);
  sl__ckpt_kv *kv = NULL;
  char *kv_text = NULL, name[128];
  void *buf = NULL;
  size_t cap = 0;
  sl__ckpt_file *f = NULL;
  sl__ckpt_file_done done;
  memset(&done, 0, sizeof done);
  sl_status st = sp && pc ? SL_OK : SL_ENOMEM;
  n = 0;
  for (int32_t i = 0; i < nn && st == SL_OK; i++) {
    if (!is_variable(s, i)) continue;
    const sl__value *v = var_value(s, i);
    if (sl_shape_numel(&v->meta.shape) == 0) continue; /* nothing to keep */
    for (int r = 0; r < sl_placement_size(v->placement) && st == SL_OK; r++) {
      if (!stores(v, r)) continue;
      save_piece *p = &sp[n];
      sl__ckpt_piece *c = &pc[n++];
      p->node = i;
      p->rank = r;
      sl_placement_print(v->placement, p->placement, sizeof p->placement);
      sl_nd_sbp_print(&v->sbp, p->sbp, sizeof p->sbp);
      c->tensor = sl__graph_node(s->g, i)->name;
      c->dtype = v->meta.dtype;
      c->shape = v->meta.shape;
      c->placement = p->placement;
      c->sbp = p->sbp;
      st = sl_local_slice(&v->meta.shape, v->placement, &v->sbp, r, &c->box);
      p->bytes = (size_t)sl_slice_numel(&c->box) * sl_dtype_size(c->dtype);
      cap = SL_MAX(cap, p->bytes);
    }
  }
  if (st == SL_OK && !(buf = sl__malloc(cap + 64))) st = SL_ENOMEM;
  if (st == SL_OK) {
    sl__ckpt_file_name(s->steps, s->self_node, name, sizeof name);
    st = sl__ckpt_file_create(dir, name, s->steps, n, pc, &f);
  }
  for (int32_t k = 0; k < n && st == SL_OK; k++) {
    st = sl__session_job_shard(s, sp[k].node, sp[k].rank, version, buf,
                               sp[k].bytes);
    if (st == SL_OK) st = sl__ckpt_file_write(f, buf, sp[k].bytes);
  }
  if (st == SL_OK) {
    st = sl__ckpt_file_close(f, s->self_node, &done);
    f = NULL;
  }
  int32_t n_kv = 0;
  if (st == SL_OK) st = source_metadata(s, &n_kv, &kv, &kv_text);
  if (st == SL_OK) st = sl__ckpt_commit(dir, s->steps, 1, &done, n_kv, kv);
  sl__ckpt_file_abort(f);
  sl__ckpt_file_done_free(&done);
  sl__free(buf);
  sl__free(kv);
  sl__free(kv_text);
  sl__free(pc);
  sl__free(sp);
  if (st != SL_OK) sl__fail_context(st, "save to '%s': ", dir);
  return st;
}

/* ---- restore and load -------------------------------------------------------
 */

/* Checks tensor ti of ck against variable node: same shape and dtype. */
static sl_status check_tensor(const sl_session *s, const char *path,
                              const sl_checkpoint *ck, int32_t ti,
                              int32_t node) {
  const sl__value *v = var_value(s, node);
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
  if (!src) return SL_ENOMEM;
  *set = 0;
  for (int32_t i = 0; i < sl__graph_node_count(s->g); i++) {
    if (!is_variable(s, i)) continue;
    const sl__node *n = sl__graph_node(s->g, i);
    if (!restore && n->optimizer) continue;
    if (sl_shape_numel(&var_value(s, i)->meta.shape) == 0) continue;
    int32_t ti = sl_checkpoint_find(ck, n->name);
    if (ti < 0) {
      if (restore && n->update >= 0)
        return sl__fail(SL_EINVAL,
                        "checkpoint '%s' has no tensor '%s' (a variable the "
                        "steps train)",
                        path, n->name);
      continue;
    }
    SL_CHECK(check_tensor(s, path, ck, ti, i));
    (*set)++;
  }
  /* Checked: now take them (a written value gives way). */
  for (int32_t i = 0; i < sl__graph_node_count(s->g); i++) {
    if (!is_variable(s, i)) continue;
    const sl__node *n = sl__graph_node(s->g, i);
    if (!restore && n->optimizer) continue;
    int32_t ti = sl_checkpoint_find(ck, n->name);
    if (ti < 0 || sl_shape_numel(&var_value(s, i)->meta.shape) == 0) continue;
    sl__free(src[i].logical);
    src[i].logical = NULL;
    src[i].ck = ck;
    src[i].tensor = ti;
  }
  return SL_OK;
}

static sl_status restore_or_load(sl_session *s, const char *path, bool restore,
                                 int32_t *loaded) {
  const char *what = restore ? "restore" : "load";
  if (loaded) *loaded = 0;
  if (!s || !path) return sl__fail(SL_EINVAL, "%s: NULL argument", what);
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
  if (st == SL_OK)
    st = sl__session_restart(s, step);
  else if (s->var_src) {
    /* Nothing was taken: forget the checkpoint's tensors. */
    for (int32_t i = 0; i < sl__graph_node_count(s->g); i++)
      s->var_src[i].ck = NULL;
  }
  sl_checkpoint_close(ck);
  if (st == SL_OK && loaded) *loaded = set;
  return st;
}

sl_status sl_session_restore(sl_session *s, const char *path) {
  return restore_or_load(s, path, true, NULL);
}

sl_status sl_session_load(sl_session *s, const char *path, int32_t *loaded) {
  return restore_or_load(s, path, false, loaded);
}
