/* Flag parsing, layouts and device lists for the examples. */
#include "ex_flags.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sluice/placement.h>

#include "ex_util.h"

static ex_flags_result failf(char *err, size_t size, const char *fmt, ...)
    SL_PRINTF_LIKE(3, 4);

static ex_flags_result failf(char *err, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (size) vsnprintf(err, size, fmt, ap);
  va_end(ap);
  return EX_FLAGS_ERROR;
}

static void print_usage(const char *usage, const ex_flag *flags, int n,
                        FILE *out) {
  fprintf(out, "%s\n\nflags:\n", usage);
  for (int i = 0; i < n; i++) {
    const ex_flag *f = &flags[i];
    char def[128] = "";
    switch (f->kind) {
    case EX_FLAG_INT:
    case EX_FLAG_INT64:
      snprintf(def, sizeof def, " (default %" PRId64 ")",
               *(const int64_t *)f->value);
      break;
    case EX_FLAG_DOUBLE:
    case EX_FLAG_POSITIVE:
    case EX_FLAG_FRACTION:
      /* Negative defaults mean "chosen from other flags" (the help says). */
      if (*(const double *)f->value >= 0)
        snprintf(def, sizeof def, " (default %g)", *(const double *)f->value);
      break;
    case EX_FLAG_STRING: {
      const char *s = *(const char *const *)f->value;
      if (s) snprintf(def, sizeof def, " (default %s)", s);
      break;
    }
    case EX_FLAG_BOOL: break;
    }
    char name[64];
    snprintf(name, sizeof name, "--%s%s", f->name,
             f->kind == EX_FLAG_BOOL ? "" : " V");
    fprintf(out, "  %-18s %s%s\n", name, f->help, def);
  }
  fprintf(out, "  %-18s %s\n", "--help", "print this help");
}

/* 2^31 - 1: sizes, counts and steps fit an int, as the programs use them. */
#define INT_FLAG_MAX INT64_C(2147483647)

static ex_flags_result set_int(const ex_flag *f, const char *v, int64_t max,
                               char *err, size_t errsize) {
  char *end = NULL;
  errno = 0;
  /* strtoll skips leading blanks and takes a prefix: neither is a value. */
  long long x = strtoll(v, &end, 10);
  if (!*v || isspace((unsigned char)*v) || *end)
    return failf(err, errsize, "flag '--%s': '%s' is not an integer", f->name,
                 v);
  if (errno == ERANGE || x > max)
    return failf(err, errsize, "flag '--%s': %s is above the maximum %" PRId64,
                 f->name, v, max);
  if (x < f->min)
    return failf(err, errsize, "flag '--%s': %s is below the minimum %" PRId64,
                 f->name, v, f->min);
  *(int64_t *)f->value = x;
  return EX_FLAGS_OK;
}

/* A finite double, the whole text; false for anything else (nan, inf, a
 * value strtod rounds to infinity or to zero). */
static bool parse_finite(const char *v, double *out) {
  char *end = NULL;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || isspace((unsigned char)*v) || *end || errno || !isfinite(x))
    return false;
  *out = x;
  return true;
}

static ex_flags_result set_value(const ex_flag *f, const char *v, char *err,
                                 size_t errsize) {
  double x = 0;
  switch (f->kind) {
  case EX_FLAG_INT: return set_int(f, v, INT_FLAG_MAX, err, errsize);
  case EX_FLAG_INT64: return set_int(f, v, INT64_MAX, err, errsize);
  case EX_FLAG_DOUBLE:
    if (!parse_finite(v, &x))
      return failf(err, errsize, "flag '--%s': '%s' is not a finite number",
                   f->name, v);
    if (x < (double)f->min)
      return failf(err, errsize,
                   "flag '--%s': %s is below the minimum %" PRId64, f->name, v,
                   f->min);
    *(double *)f->value = x;
    return EX_FLAGS_OK;
  case EX_FLAG_POSITIVE:
    if (!parse_finite(v, &x) || !(x > 0))
      return failf(err, errsize,
                   "flag '--%s': '%s' is not a finite number above 0", f->name,
                   v);
    *(double *)f->value = x;
    return EX_FLAGS_OK;
  case EX_FLAG_FRACTION:
    if (!parse_finite(v, &x) || !(x >= 0 && x < 1))
      return failf(err, errsize, "flag '--%s': '%s' is not a number in [0, 1)",
                   f->name, v);
    *(double *)f->value = x;
    return EX_FLAGS_OK;
  case EX_FLAG_STRING: *(const char **)f->value = v; return EX_FLAGS_OK;
  case EX_FLAG_BOOL: *(bool *)f->value = true; return EX_FLAGS_OK;
  }
  return failf(err, errsize, "flag '--%s': bad kind", f->name);
}

ex_flags_result ex_flags_parse(int argc, char **argv, const char *usage,
                               const ex_flag *flags, int n, FILE *help_out,
                               char *err, size_t errsize) {
  if (errsize) err[0] = '\0';
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      print_usage(usage, flags, n, help_out);
      return EX_FLAGS_HELP;
    }
    if (strncmp(a, "--", 2) != 0 || !a[2])
      return failf(err, errsize,
                   "unexpected argument '%s' (flags start with "
                   "--; see --help)",
                   a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const ex_flag *f = NULL;
    for (int k = 0; k < n && !f; k++)
      if (strlen(flags[k].name) == len &&
          strncmp(flags[k].name, name, len) == 0)
        f = &flags[k];
    if (!f)
      return failf(err, errsize, "unknown flag '--%.*s' (see --help)", (int)len,
                   name);
    const char *v = NULL;
    if (f->kind == EX_FLAG_BOOL) {
      if (eq) return failf(err, errsize, "flag '--%s' takes no value", f->name);
    } else if (eq) {
      v = eq + 1;
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return failf(err, errsize, "flag '--%s' needs a value", f->name);
    }
    ex_flags_result r = set_value(f, v, err, errsize);
    if (r != EX_FLAGS_OK) return r;
  }
  return EX_FLAGS_OK;
}

/* ---- paths -------------------------------------------------------------- */

static bool path_fail(char *err, size_t size, const char *flag,
                      const char *path, const char *why) {
  failf(err, size, "flag '--%s': %s: %s", flag, path, why);
  return false;
}

bool ex_path_check_file_writable(const char *flag, const char *path, char *err,
                                 size_t errsize) {
  if (!*path) return path_fail(err, errsize, flag, "''", "empty path");
  struct stat sb;
  bool existed = stat(path, &sb) == 0;
  if (existed && S_ISDIR(sb.st_mode))
    return path_fail(err, errsize, flag, path, "is a directory");
  /* Opening is the only honest test (access() says yes to root on a
   * read-only file system); O_APPEND leaves an existing file's bytes. */
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd < 0) return path_fail(err, errsize, flag, path, strerror(errno));
  close(fd);
  if (!existed) unlink(path);
  return true;
}

bool ex_path_check_dir_writable(const char *flag, const char *path, char *err,
                                size_t errsize) {
  if (!*path) return path_fail(err, errsize, flag, "''", "empty path");
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (mkdir(path, 0777) != 0)
      return path_fail(err, errsize, flag, path, strerror(errno));
    rmdir(path);
    return true;
  }
  if (!S_ISDIR(sb.st_mode))
    return path_fail(err, errsize, flag, path, "exists and is not a directory");
  char probe[4096];
  if (snprintf(probe, sizeof probe, "%s/.sluice-probe-XXXXXX", path) >=
      (int)sizeof probe)
    return path_fail(err, errsize, flag, path, "path too long");
  int fd = mkstemp(probe);
  if (fd < 0) return path_fail(err, errsize, flag, path, strerror(errno));
  close(fd);
  unlink(probe);
  return true;
}

bool ex_path_check_readable(const char *flag, const char *path, char *err,
                            size_t errsize) {
  if (!*path) return path_fail(err, errsize, flag, "''", "empty path");
  struct stat sb;
  if (stat(path, &sb) != 0)
    return path_fail(err, errsize, flag, path, strerror(errno));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return path_fail(err, errsize, flag, path, strerror(errno));
  close(fd);
  return true;
}

/* ---- layouts ------------------------------------------------------------ */

static const char *const layout_names[] = {"single", "dp", "tp", "hybrid"};

const char *ex_layout_name(ex_layout l) {
  return (unsigned)l < EX_ARRAY_LEN(layout_names) ? layout_names[l] : "?";
}

sl_status ex_layout_parse(const char *text, ex_layout *out) {
  for (size_t i = 0; i < EX_ARRAY_LEN(layout_names); i++)
    if (text && strcmp(text, layout_names[i]) == 0) {
      *out = (ex_layout)i;
      return SL_OK;
    }
  return sl_set_error(SL_EINVAL, "unknown layout '%s' (single, dp, tp, hybrid)",
                      text ? text : "(null)");
}

sl_status ex_dtype_parse(const char *text, sl_dtype *out) {
  static const sl_dtype ok[] = {SL_DTYPE_F32, SL_DTYPE_BF16, SL_DTYPE_F16};
  for (size_t i = 0; i < EX_ARRAY_LEN(ok); i++)
    if (text && strcmp(text, sl_dtype_name(ok[i])) == 0) {
      *out = ok[i];
      return SL_OK;
    }
  return sl_set_error(SL_EINVAL, "unknown dtype '%s' (f32, bf16, f16)",
                      text ? text : "(null)");
}

sl_status ex_train_flags_apply(const ex_train_flags *f, sl_dtype *dtype,
                               sl_optimizer *opt) {
  if (ex_dtype_parse(f->dtype, dtype) != SL_OK ||
      ex_dtype_parse(f->reduce_dtype, &opt->reduce_dtype) != SL_OK)
    return SL_EINVAL;
  opt->loss_scale = f->loss_scale;
  opt->zero_stage = (int)f->zero;
  return SL_OK;
}

bool ex_layout_is_tensor_parallel(ex_layout l) {
  return l == EX_LAYOUT_TP || l == EX_LAYOUT_HYBRID;
}

/* "cpu:N" with N a bare count (no range, list or mesh). */
static bool bare_count(const char *devices, const char **type_end, long *n) {
  const char *colon = strchr(devices, ':');
  if (!colon || !colon[1]) return false;
  const char *p = colon + 1;
  for (const char *q = p; *q; q++)
    if (!isdigit((unsigned char)*q)) return false;
  char *end;
  errno = 0;
  *n = strtol(p, &end, 10);
  if (errno || *end) return false;
  *type_end = colon;
  return true;
}

sl_status ex_layout_placement(ex_layout l, const char *devices, char *buf,
                              size_t size) {
  char text[512];
  const char *type_end;
  long count;
  if (!devices || !*devices)
    return sl_set_error(SL_EINVAL,
                        "devices: empty (want cpu:N or a placement)");
  if (bare_count(devices, &type_end, &count)) {
    if (count < 1 || count > 4096)
      return sl_set_error(SL_EINVAL, "devices '%s': want 1 to 4096 devices",
                          devices);
    if (count == 1)
      snprintf(text, sizeof text, "%.*s:0", (int)(type_end - devices), devices);
    else
      snprintf(text, sizeof text, "%.*s:0-%ld", (int)(type_end - devices),
               devices, count - 1);
  } else {
    snprintf(text, sizeof text, "%s", devices);
  }
  sl_placement *p = NULL;
  sl_status st = sl_placement_parse(text, &p);
  if (st != SL_OK) return sl_add_error_context(st, "devices '%s': ", devices);
  int n = sl_placement_size(p), ndim = sl_placement_mesh_ndim(p);
  char canon[512];
  sl_placement_print(p, canon, sizeof canon);
  sl_placement_destroy(p);
  if (l == EX_LAYOUT_HYBRID) {
    if (ndim == 2) {
      snprintf(buf, size, "%s", canon);
      return SL_OK;
    }
    if (ndim != 1 || n % 2 != 0)
      return sl_set_error(SL_EINVAL,
                          "layout hybrid needs an even number of devices (a "
                          "[N/2, 2] mesh); '%s' has %d",
                          devices, n);
    snprintf(buf, size, "%s[%d,2]", canon, n / 2);
    return SL_OK;
  }
  if (ndim != 1)
    return sl_set_error(SL_EINVAL,
                        "layout %s needs a 1-D placement; '%s' has a %d-D mesh "
                        "(use --layout hybrid)",
                        ex_layout_name(l), devices, ndim);
  snprintf(buf, size, "%s", canon);
  return SL_OK;
}

static void sbp1(int axis, char *buf, size_t size) {
  if (axis >= 0)
    snprintf(buf, size, "S(%d)", axis);
  else
    snprintf(buf, size, "B");
}

const char *ex_layout_sbp(ex_layout l, int data_axis, int model_axis, char *buf,
                          size_t size) {
  char a[16], b[16];
  switch (l) {
  case EX_LAYOUT_SINGLE: snprintf(buf, size, "B"); break;
  case EX_LAYOUT_DP: sbp1(data_axis, buf, size); break;
  case EX_LAYOUT_TP: sbp1(model_axis, buf, size); break;
  case EX_LAYOUT_HYBRID:
    sbp1(data_axis, a, sizeof a);
    sbp1(model_axis, b, sizeof b);
    snprintf(buf, size, "(%s,%s)", a, b);
    break;
  }
  return buf;
}
