/* The examples' checkpoint flags (see ex_ckpt.h). Public API only. */
#include "ex_ckpt.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/checkpoint.h>
#include <sluice/session.h>

#include "ex_util.h"
#include "ex_flags.h"

static bool check_fail(char *err, size_t size, const char *fmt, ...)
    SL_PRINTF_LIKE(3, 4);

static bool check_fail(char *err, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (size) vsnprintf(err, size, fmt, ap);
  va_end(ap);
  return false;
}

bool ex_ckpt_any(const ex_ckpt_flags *f) {
  return f->save || f->save_every || f->load || f->resume;
}

/* The path opens as a checkpoint: it exists, is readable and is whole
 * (sl_checkpoint_open checks the headers and every file's CRC). */
static bool check_checkpoint(const char *flag, const char *path, char *err,
                             size_t errsize) {
  if (!ex_path_check_readable(flag, path, err, errsize)) return false;
  sl_checkpoint *c = NULL;
  sl_status st = sl_checkpoint_open(path, &c);
  sl_checkpoint_close(c);
  if (st != SL_OK)
    return check_fail(err, errsize, "flag '--%s': %s", flag, sl_last_error());
  return true;
}

bool ex_ckpt_check(const ex_ckpt_flags *f, char *err, size_t errsize) {
  if (f->save_every && !f->save)
    return check_fail(err, errsize,
                      "flag '--save-every' needs --save DIR (where to save)");
  if (f->load && f->resume)
    return check_fail(err, errsize,
                      "flags '--load' and '--resume' exclude each other "
                      "(--load: weights only; --resume: weights, optimizer "
                      "state and step)");
  if (f->save && !ex_path_check_dir_writable("save", f->save, err, errsize))
    return false;
  if (f->load && !check_checkpoint("load", f->load, err, errsize)) return false;
  if (f->resume && !check_checkpoint("resume", f->resume, err, errsize))
    return false;
  return true;
}

/* ---- PyTorch weights ---------------------------------------------------- */

/* The shape PyTorch stores variable shape s in. */
static bool torch_shape(ex_torch_layout l, const sl_shape *s, sl_shape *out) {
  *out = *s;
  switch (l) {
  case EX_TORCH_SAME: return true;
  case EX_TORCH_LINEAR:
    if (s->ndim != 2) return false;
    out->dims[0] = s->dims[1];
    out->dims[1] = s->dims[0];
    return true;
  case EX_TORCH_MERGE_LAST:  /* [r, a, b] <- [r, a*b] */
  case EX_TORCH_MERGE_FIRST: /* [a, b, c] <- [a*b, c] */
    if (s->ndim != 3) return false;
    out->ndim = 2;
    out->dims[0] =
        l == EX_TORCH_MERGE_LAST ? s->dims[0] : s->dims[0] * s->dims[1];
    out->dims[1] =
        l == EX_TORCH_MERGE_LAST ? s->dims[1] * s->dims[2] : s->dims[2];
    return true;
  }
  return false;
}

/* PyTorch's numbers t (in its layout) into sluice's order in v, for a
 * variable of shape s. */
static void torch_to_sluice(ex_torch_layout l, const sl_shape *s,
                            const float *t, float *v) {
  int64_t n = sl_shape_numel(s);
  switch (l) {
  case EX_TORCH_SAME:
  case EX_TORCH_MERGE_LAST:
  case EX_TORCH_MERGE_FIRST: memcpy(v, t, (size_t)n * sizeof *v); break;
  case EX_TORCH_LINEAR: {
    int64_t rows = s->dims[0], cols = s->dims[1]; /* sluice [in, out] */
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++)
        v[i * cols + j] = t[j * rows + i];
    break;
  }
  }
}

static void shape_text(const sl_shape *s, char *buf, size_t size) {
  int n = snprintf(buf, size, "[");
  for (int i = 0; i < s->ndim && n > 0 && (size_t)n < size; i++)
    n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, i ? ", " : "",
                  s->dims[i]);
  if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, "]");
}

/* Whether a plain file holds PyTorch's names rather than sluice's: for a
 * weight whose two names differ, it has the PyTorch name and not the
 * sluice one (some names are the same in both: gpt's "wte"). */
static bool is_torch_file(sl_session *s, const sl_checkpoint *c,
                          ex_torch_map_fn map, const void *ctx) {
  if (!map || sl_checkpoint_is_sharded(c)) return false;
  for (int32_t i = 0; i < sl_session_variable_count(s); i++) {
    sl_variable_info v;
    char name[256];
    ex_torch_layout l;
    if (sl_session_get_variable(s, i, &v) != SL_OK || v.optimizer ||
        !v.trained || !map(ctx, v.name, name, sizeof name, &l) ||
        strcmp(name, v.name) == 0)
      continue;
    return sl_checkpoint_find(c, v.name) < 0 &&
           sl_checkpoint_find(c, name) >= 0;
  }
  return false;
}

static sl_status load_torch(sl_session *s, const sl_checkpoint *c,
                            const char *path, ex_torch_map_fn map,
                            const void *ctx, int32_t *loaded) {
  sl_status st = SL_OK;
  int32_t nt = sl_checkpoint_tensor_count(c);
  bool *used = calloc((size_t)nt + 1, sizeof *used);
  float *t = NULL, *v = NULL;
  if (!used) return sl_set_error(SL_ENOMEM, "out of memory");
  *loaded = 0;
  for (int32_t i = 0; i < sl_session_variable_count(s); i++) {
    sl_variable_info var;
    char name[256], want[128], got[128];
    ex_torch_layout l;
    sl_shape ts;
    if ((st = sl_session_get_variable(s, i, &var)) != SL_OK) goto done;
    if (var.optimizer || !var.trained ||
        !map(ctx, var.name, name, sizeof name, &l))
      continue;
    int32_t k = sl_checkpoint_find(c, name);
    if (k < 0) {
      st = sl_set_error(SL_EINVAL,
                        "%s: no tensor '%s' (PyTorch's name for '%s')", path,
                        name, var.name);
      goto done;
    }
    sl_checkpoint_tensor info;
    if ((st = sl_checkpoint_get_tensor(c, k, &info)) != SL_OK) goto done;
    if (!torch_shape(l, &var.shape, &ts) || var.dtype != SL_DTYPE_F32) {
      st = sl_set_error(SL_EINVAL, "variable '%s': no PyTorch layout for it",
                        var.name);
      goto done;
    }
    shape_text(&ts, want, sizeof want);
    shape_text(&info.shape, got, sizeof got);
    if (!info.dtype_known || info.dtype != SL_DTYPE_F32 ||
        !sl_shape_equal(&info.shape, &ts)) {
      st =
          sl_set_error(SL_EINVAL,
                       "%s: tensor '%s' is %s %s; '%s' needs F32 %s (PyTorch's "
                       "layout)",
                       path, name, info.dtype_name, got, var.name, want);
      goto done;
    }
    size_t bytes = (size_t)info.bytes;
    free(t);
    free(v);
    t = malloc(bytes ? bytes : 1);
    v = malloc(bytes ? bytes : 1);
    if (!t || !v) {
      st = sl_set_error(SL_ENOMEM, "%s: out of memory for '%s'", path, name);
      goto done;
    }
    if ((st = sl_checkpoint_read(c, k, NULL, t, bytes)) != SL_OK) goto done;
    torch_to_sluice(l, &var.shape, t, v);
    if ((st = sl_session_write_variable(s, var.name, v, bytes)) != SL_OK)
      goto done;
    used[k] = true;
    ++*loaded;
  }
  for (int32_t k = 0; k < nt; k++) {
    sl_checkpoint_tensor info;
    if (used[k] || sl_checkpoint_get_tensor(c, k, &info) != SL_OK) continue;
    st = sl_set_error(SL_EINVAL,
                      "%s: tensor '%s' has no place in this model (another "
                      "model, or other sizes?)",
                      path, info.name);
    goto done;
  }
done:
  free(used);
  free(t);
  free(v);
  return st;
}

/* ---- the flags ---------------------------------------------------------- */

sl_status ex_ckpt_begin(ex_ckpt *ck, const ex_ckpt_flags *f, ex_run *run,
                        ex_torch_map_fn map, const void *map_ctx, FILE *out,
                        int64_t *first_step) {
  *ck = (ex_ckpt){.flags = *f, .run = run, .out = out, .saved_step = -1};
  *first_step = 0;
  if (!ex_ckpt_any(f)) return SL_OK;
  sl_session *s = ex_run_session(run);
  if (!s)
    return sl_set_error(
        SL_EUNSUPPORTED,
        "checkpoints (--save, --load, --resume) need the session "
        "engine, not %s",
        ex_engine_name(ex_run_engine(run)));
  sl_status st = SL_OK;
  if (f->resume) {
    if ((st = sl_session_restore(s, f->resume)) != SL_OK)
      return sl_add_error_context(st, "flag '--resume': ");
    *first_step = sl_session_steps(s);
    fprintf(out, "resumed from %s at step %" PRId64 "\n", f->resume,
            *first_step);
    return SL_OK;
  }
  if (!f->load) return SL_OK;
  sl_checkpoint *c = NULL;
  if ((st = sl_checkpoint_open(f->load, &c)) != SL_OK)
    return sl_add_error_context(st, "flag '--load': ");
  int32_t loaded = 0;
  bool torch = is_torch_file(s, c, map, map_ctx);
  if (torch)
    st = load_torch(s, c, f->load, map, map_ctx, &loaded);
  else if ((st = sl_session_load(s, f->load, &loaded)) == SL_OK && !loaded)
    st = sl_set_error(SL_EINVAL,
                      "%s: no tensor has the name of a weight of this model",
                      f->load);
  sl_checkpoint_close(c);
  if (st != SL_OK) return sl_add_error_context(st, "flag '--load': ");
  fprintf(out, "loaded %" PRId32 " tensors from %s%s\n", loaded, f->load,
          torch ? " (PyTorch names)" : "");
  return SL_OK;
}

static sl_status save(ex_ckpt *ck) {
  sl_session *s = ex_run_session(ck->run);
  int64_t step = sl_session_steps(s);
  sl_status st = sl_session_save(s, ck->flags.save);
  if (st != SL_OK) return st;
  ck->saved_step = step;
  fprintf(ck->out, "saved step %" PRId64 " to %s\n", step, ck->flags.save);
  fflush(ck->out);
  return SL_OK;
}

sl_status ex_ckpt_hook(void *ctx, int64_t steps_done) {
  (void)steps_done; /* the session's own count is the step saved */
  return save(ctx);
}

sl_status ex_ckpt_end(ex_ckpt *ck) {
  if (!ck->flags.save) return SL_OK;
  if (ck->saved_step == sl_session_steps(ex_run_session(ck->run))) return SL_OK;
  return save(ck);
}
