/* The commit of a save (sl__ckpt_commit): index.json written atomically,
 * then the files of earlier saves removed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_int.h"

typedef struct pref {
  int32_t file, piece;
  const sl__ckpt_piece *p;
} pref;

static int cmp_pref(const void *a, const void *b) {
  const pref *x = a, *y = b;
  int c = strcmp(x->p->tensor, y->p->tensor);
  if (c) return c;
  if (x->file != y->file) return x->file < y->file ? -1 : 1;
  return x->piece < y->piece ? -1 : x->piece > y->piece;
}

static bool same_layout(const sl__ckpt_piece *a, const sl__ckpt_piece *b) {
  return a->dtype == b->dtype && sl_shape_equal(&a->shape, &b->shape) &&
         strcmp(a->placement, b->placement) == 0 && strcmp(a->sbp, b->sbp) == 0;
}

static void emit_index(sl__jbuf *j, int64_t step, int32_t n,
                       const sl__ckpt_file_done *files, int32_t n_kv,
                       const sl__ckpt_kv *kv, int32_t np, const pref *refs) {
  sl__jbuf_printf(j,
                  "{\n  \"format\": \"sluice-checkpoint\",\n  \"version\": 1,"
                  "\n  \"step\": %lld,\n  \"metadata\": {",
                  (long long)step);
  for (int32_t k = 0; k < n_kv; k++) {
    sl__jbuf_puts(j, k ? ", " : "");
    sl__jbuf_string(j, kv[k].key);
    sl__jbuf_puts(j, ": ");
    sl__jbuf_string(j, kv[k].value);
  }
  sl__jbuf_puts(j, "},\n  \"files\": [");
  for (int32_t k = 0; k < n; k++) {
    sl__jbuf_puts(j, k ? ",\n    {\"name\": " : "\n    {\"name\": ");
    sl__jbuf_string(j, files[k].name);
    sl__jbuf_printf(j, ", \"node\": %u, \"bytes\": %lld, \"crc32c\": \"%08x\"}",
                    (unsigned)files[k].node, (long long)files[k].bytes,
                    (unsigned)files[k].crc32c);
  }
  sl__jbuf_puts(j, "\n  ],\n  \"tensors\": {");
  for (int32_t k = 0; k < np; k++) {
    const sl__ckpt_piece *p = refs[k].p;
    bool first = k == 0 || strcmp(refs[k - 1].p->tensor, p->tensor) != 0;
    if (first) {
      sl__jbuf_puts(j, k ? "]},\n    " : "\n    ");
      sl__jbuf_string(j, p->tensor);
      sl__jbuf_printf(
          j, ": {\"dtype\": \"%s\", \"shape\": ", sl__st_dtype_name(p->dtype));
      sl__jbuf_ints(j, p->shape.ndim, p->shape.dims);
      sl__jbuf_puts(j, ", \"placement\": ");
      sl__jbuf_string(j, p->placement);
      sl__jbuf_puts(j, ", \"sbp\": ");
      sl__jbuf_string(j, p->sbp);
      sl__jbuf_puts(j, ", \"pieces\": [\n      ");
    } else {
      sl__jbuf_puts(j, ",\n      ");
    }
    sl__jbuf_printf(j, "{\"file\": %d, \"key\": ", (int)refs[k].file);
    sl__jbuf_string(j, files[refs[k].file].keys[refs[k].piece]);
    sl__jbuf_puts(j, ", \"start\": ");
    sl__jbuf_ints(j, p->box.ndim, p->box.start);
    sl__jbuf_puts(j, ", \"extent\": ");
    sl__jbuf_ints(j, p->box.ndim, p->box.extent);
    sl__jbuf_puts(j, "}");
  }
  sl__jbuf_puts(j, np ? "]}\n  }\n}\n" : "}\n}\n");
}

static bool has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Files of earlier saves and temporary files of interrupted ones. A
 * failure to remove one leaves a stray file, not a broken checkpoint. */
static void remove_stale(const char *dir, int32_t n,
                         const sl__ckpt_file_done *files) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const char *name = de->d_name;
    bool stale = false;
    if (strncmp(name, "step-", 5) == 0 && has_suffix(name, ".safetensors")) {
      stale = true;
      for (int32_t k = 0; k < n && stale; k++)
        stale = strcmp(files[k].name, name) != 0;
    } else if ((strncmp(name, "step-", 5) == 0 && has_suffix(name, ".tmp")) ||
               strcmp(name, "index.json.tmp") == 0) {
      stale = true;
    }
    if (!stale) continue;
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = sl__malloc(len);
    if (!p) break;
    snprintf(p, len, "%s/%s", dir, name);
    if (unlink(p) != 0)
      SL_WARN("checkpoint '%s': cannot remove a stale file", p);
    sl__free(p);
  }
  closedir(d);
}

sl_status sl__ckpt_commit(const char *dir, int64_t step, int32_t n,
                          const sl__ckpt_file_done *files, int32_t n_kv,
                          const sl__ckpt_kv *kv) {
  sl_status st = SL_OK;
  pref *refs = NULL;
  sl__jbuf j = {0};
  sl__ckpt_index *check = NULL;
  char *path = NULL;
  sl__wfile w = {.fd = -1};
  if (!dir || n < 0 || (n > 0 && !files) || n_kv < 0 || (n_kv > 0 && !kv))
    return sl__fail(SL_EINVAL, "checkpoint commit: bad arguments");
  int32_t np = 0;
  for (int32_t k = 0; k < n; k++) {
    if (files[k].n < 0 || (files[k].n > 0 && !files[k].pieces))
      return sl__fail(SL_EINVAL, "checkpoint commit: file %d has no pieces",
                      (int)k);
    np += files[k].n;
  }
  for (int32_t k = 0; k < n_kv; k++)
    for (int32_t m = 0; m < k; m++)
      if (!kv[k].key || !kv[k].value || strcmp(kv[k].key, kv[m].key) == 0)
        return sl__fail(SL_EINVAL,
                        "checkpoint '%s': metadata key '%s' given twice", dir,
                        kv[k].key ? kv[k].key : "(null)");
  refs = sl__calloc((size_t)np + 1, sizeof *refs);
  if (!refs) return SL_ENOMEM;
  np = 0;
  for (int32_t k = 0; k < n; k++)
    for (int32_t m = 0; m < files[k].n; m++)
      refs[np++] = (pref){k, m, &files[k].pieces[m]};
  qsort(refs, (size_t)np, sizeof *refs, cmp_pref);
  for (int32_t k = 1; k < np; k++)
    if (strcmp(refs[k - 1].p->tensor, refs[k].p->tensor) == 0 &&
        !same_layout(refs[k - 1].p, refs[k].p)) {
      st = sl__fail(SL_EINVAL,
                    "checkpoint '%s': tensor '%s': '%s' and '%s' disagree on "
                    "its dtype, shape, placement or sbp",
                    dir, refs[k].p->tensor, files[refs[k - 1].file].name,
                    files[refs[k].file].name);
      goto done;
    }
  emit_index(&j, step, n, files, n_kv, kv, np, refs);
  SL_CHECK_GOTO(sl__jbuf_status(&j), st, done);
  path = sl__malloc(strlen(dir) + sizeof "/index.json");
  if (!path) {
    st = SL_ENOMEM;
    goto done;
  }
  sprintf(path, "%s/index.json", dir);
  /* The reader's own checks (coverage, names, keys) before anything is
   * replaced: a save that could not be loaded is refused here. */
  SL_CHECK_GOTO(sl__ckpt_index_parse(j.data, j.len, path, &check), st, done);
  SL_CHECK_GOTO(sl__wfile_open(path, false, &w), st, done);
  st = sl__wfile_write(&w, j.data, j.len);
  if (st != SL_OK) {
    sl__wfile_abort(&w);
    goto done;
  }
  SL_CHECK_GOTO(sl__wfile_finish(&w), st, done);
  remove_stale(dir, n, files);
done:
  sl__ckpt_index_free(check);
  sl__free(path);
  sl__jbuf_free(&j);
  sl__free(refs);
  return st;
}
