/* sluice boxing: explain (and verify) how a global tensor moves from one
 * placement and nd-SBP to another. Uses only the public API. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "boxing_args.h"
#include "cli.h"

/* Human output lists at most this many ranks or groups on one line; the JSON
 * output always has all of them. */
#define LIST_MAX 64

static char *placement_str(const sl_placement *p) {
  int n = sl_placement_print(p, NULL, 0);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s) sl_placement_print(p, s, (size_t)n + 1);
  return s;
}

/* nd-SBPs have at most 4 entries of at most 13 characters ("S(2147483647)"),
 * so this never truncates. */
typedef struct sbp_text {
  char s[80];
} sbp_text;

static sbp_text sbp_str(const sl_nd_sbp *s) {
  sbp_text t;
  sl_nd_sbp_print(s, t.s, sizeof t.s);
  return t;
}

/* The shortest %g form that reads back as the same double, so JSON and
 * tables show 1.5 rather than 1.5000000000000000. */
static const char *num_str(double v, char *buf, size_t size) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

/* ---- JSON --------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* JSON has no inf or NaN; a value that is not finite becomes null. */
static void json_number(FILE *f, double v) {
  char buf[40];
  if (isfinite(v))
    fputs(num_str(v, buf, sizeof buf), f);
  else
    fputs("null", f);
}

static void json_i64_array(FILE *f, int n, const int64_t *v) {
  fputc('[', f);
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
  fputc(']', f);
}

static void json_side(FILE *f, const char *key, const char *place,
                      const sl_nd_sbp *s) {
  fprintf(f, "  \"%s\": {\"placement\": ", key);
  json_string(f, place);
  fputs(", \"sbp\": ", f);
  json_string(f, sbp_str(s).s);
  fputs("},\n", f);
}

typedef struct verify_result {
  bool ran;
  sl_status status; /* SL_OK or SL_EMISMATCH */
  sl_boxing_mismatch mismatch;
} verify_result;

static void print_json(FILE *f, const sl_cli_boxing_args *a,
                       const sl_boxing_route *plan, const char *src_place,
                       const char *dst_place, const verify_result *vr) {
  int nranks = sl_boxing_route_rank_count(plan);
  fputs("{\n  \"shape\": [", f);
  for (int i = 0; i < a->shape.ndim; i++)
    fprintf(f, "%s%lld", i ? "," : "", (long long)a->shape.dims[i]);
  fprintf(f, "],\n  \"dtype\": \"%s\",\n", sl_dtype_name(a->dtype));
  json_side(f, "from", src_place, &a->src_sbp);
  json_side(f, "to", dst_place, &a->dst_sbp);
  fputs("  \"ranks\": [", f);
  for (int r = 0; r < nranks; r++) {
    int node, dev;
    sl_boxing_route_rank_device(plan, r, &node, &dev);
    fprintf(f, "%s[%d,%d]", r ? "," : "", node, dev);
  }
  fputs("],\n  \"steps\": [", f);
  int nsteps = sl_boxing_route_step_count(plan);
  for (int s = 0; s < nsteps; s++) {
    fprintf(f, "%s\n    {\"op\": \"%s\"", s ? "," : "",
            sl_boxing_op_name(sl_boxing_step_op(plan, s)));
    sl_reduce_op rop;
    if (sl_boxing_step_reduce(plan, s, &rop))
      fprintf(f, ", \"reduce\": \"%s\"", sl_reduce_op_name(rop));
    fprintf(f, ", \"mesh_axis\": %d", sl_boxing_step_mesh_axis(plan, s));
    sl_nd_sbp from, to;
    sl_boxing_step_layout(plan, s, &from, &to);
    fputs(", \"from\": ", f);
    json_string(f, sbp_str(&from).s);
    fputs(", \"to\": ", f);
    json_string(f, sbp_str(&to).s);
    fputs(",\n     \"groups\": [", f);
    int ng = sl_boxing_step_group_count(plan, s);
    for (int g = 0; g < ng; g++) {
      const int *ranks;
      int n = sl_boxing_step_group(plan, s, g, &ranks);
      fputs(g ? ",[" : "[", f);
      for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? "," : "", ranks[i]);
      fputc(']', f);
    }
    fputs("],\n     \"bytes_sent_per_rank\": ", f);
    json_i64_array(f, nranks, sl_boxing_step_bytes_sent(plan, s));
    fputs(", \"predicted_us\": ", f);
    json_number(f, sl_boxing_step_predicted_us(plan, s));
    fputc('}', f);
  }
  fputs(nsteps ? "\n  ],\n" : "],\n", f);
  fputs("  \"bytes_sent_per_rank\": ", f);
  json_i64_array(f, nranks, sl_boxing_route_bytes_sent(plan));
  fputs(",\n  \"predicted_us\": ", f);
  json_number(f, sl_boxing_route_predicted_us(plan));
  if (vr->ran) {
    fprintf(f, ",\n  \"seed\": %llu,\n  \"verified\": %s",
            (unsigned long long)a->seed,
            vr->status == SL_OK ? "true" : "false");
    if (vr->status != SL_OK) {
      fprintf(f,
              ",\n  \"mismatch\": {\"rank\": %d, \"index\": %lld, "
              "\"expected\": ",
              vr->mismatch.rank, (long long)vr->mismatch.index);
      json_number(f, vr->mismatch.expected);
      fputs(", \"got\": ", f);
      json_number(f, vr->mismatch.got);
      fputc('}', f);
    }
  }
  fputs("\n}\n", f);
}

/* ---- human output ------------------------------------------------------- */

/* A cell's text, built with a memory stream. */
typedef struct cell {
  char *s;
  size_t len;
  FILE *f;
} cell;

static FILE *cell_open(cell *c) {
  c->s = NULL;
  c->len = 0;
  c->f = open_memstream(&c->s, &c->len);
  return c->f;
}

static char *cell_close(cell *c) {
  if (!c->f) return NULL;
  fclose(c->f);
  return c->s;
}

/* "288 each" when every rank sends the same, else the list (or its range
 * when there are many ranks). */
static void bytes_summary(FILE *f, int n, const int64_t *v) {
  bool same = true;
  int64_t lo = n ? v[0] : 0, hi = lo;
  for (int i = 1; i < n; i++) {
    same = same && v[i] == v[0];
    lo = v[i] < lo ? v[i] : lo;
    hi = v[i] > hi ? v[i] : hi;
  }
  if (same) {
    fprintf(f, "%lld each", (long long)lo);
  } else if (n <= 16) {
    for (int i = 0; i < n; i++)
      fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
  } else {
    fprintf(f, "%lld..%lld", (long long)lo, (long long)hi);
  }
}

static void groups_summary(FILE *f, const sl_boxing_route *plan, int s) {
  int ng = sl_boxing_step_group_count(plan, s);
  int shown = 0;
  for (int g = 0; g < ng; g++) {
    const int *ranks;
    int n = sl_boxing_step_group(plan, s, g, &ranks);
    if (shown + n > LIST_MAX && g > 0) {
      fprintf(f, " ... (%d groups)", ng);
      return;
    }
    fputs(g ? " [" : "[", f);
    for (int i = 0; i < n; i++) {
      if (i == LIST_MAX) {
        fprintf(f, ",... %d ranks", n);
        break;
      }
      fprintf(f, "%s%d", i ? "," : "", ranks[i]);
    }
    fputc(']', f);
    shown += n;
  }
}

enum {
  C_STEP,
  C_OP,
  C_REDUCE,
  C_AXIS,
  C_LAYOUT,
  C_US,
  C_BYTES,
  C_GROUPS,
  C_COUNT
};

static const char *const col_title[C_COUNT] = {
    "step",   "op", "reduce",          "axis",
    "layout", "us", "bytes sent/rank", "groups (plan ranks)"};

/* Numbers right-aligned, text left-aligned. */
static const bool col_right[C_COUNT] = {true,  false, false, true,
                                        false, true,  false, false};

/* The last column is not padded, so lines carry no trailing blanks. */
static void put_cell(FILE *f, int c, int width, const char *txt) {
  if (c == C_COUNT - 1)
    fprintf(f, "%s\n", txt);
  else if (col_right[c])
    fprintf(f, "%*s  ", width, txt);
  else
    fprintf(f, "%-*s  ", width, txt);
}

static int print_human(FILE *f, const sl_cli_boxing_args *a,
                       const sl_boxing_route *plan, const char *src_place,
                       const char *dst_place, const verify_result *vr) {
  char shape[200], buf[40];
  sl_shape_print(&a->shape, shape, sizeof shape);
  fprintf(f, "boxing %s %s: %s %s -> %s %s\n", shape, sl_dtype_name(a->dtype),
          src_place, sbp_str(&a->src_sbp).s, dst_place, sbp_str(&a->dst_sbp).s);
  int nranks = sl_boxing_route_rank_count(plan);
  if (!sl_placement_equal(a->src_place, a->dst_place)) {
    fputs("plan ranks (node,device):", f);
    for (int r = 0; r < nranks && r < LIST_MAX; r++) {
      int node, dev;
      sl_boxing_route_rank_device(plan, r, &node, &dev);
      fprintf(f, " %d=(%d,%d)", r, node, dev);
    }
    if (nranks > LIST_MAX) fprintf(f, " ... (%d ranks)", nranks);
    fputc('\n', f);
  }

  int nsteps = sl_boxing_route_step_count(plan);
  if (nsteps == 0) {
    fputs("no data movement needed\n", f);
  } else {
    /* Build every cell first so the columns can be sized to fit. */
    char **cells = calloc((size_t)nsteps * C_COUNT, sizeof *cells);
    if (!cells) return -1;
    int width[C_COUNT];
    for (int c = 0; c < C_COUNT; c++)
      width[c] = (int)strlen(col_title[c]);
    bool ok = true;
    for (int s = 0; s < nsteps && ok; s++) {
      for (int c = 0; c < C_COUNT; c++) {
        cell cl;
        FILE *cf = cell_open(&cl);
        if (!cf) {
          ok = false;
          break;
        }
        sl_reduce_op rop;
        sl_nd_sbp from, to;
        int axis;
        switch (c) {
        case C_STEP: fprintf(cf, "%d", s); break;
        case C_OP:
          fputs(sl_boxing_op_name(sl_boxing_step_op(plan, s)), cf);
          break;
        case C_REDUCE:
          fputs(sl_boxing_step_reduce(plan, s, &rop) ? sl_reduce_op_name(rop)
                                                     : "-",
                cf);
          break;
        case C_AXIS:
          axis = sl_boxing_step_mesh_axis(plan, s);
          if (axis < 0)
            fputs("-", cf);
          else
            fprintf(cf, "%d", axis);
          break;
        case C_LAYOUT:
          sl_boxing_step_layout(plan, s, &from, &to);
          fprintf(cf, "%s -> %s", sbp_str(&from).s, sbp_str(&to).s);
          break;
        case C_US:
          fprintf(cf, "%.3f", sl_boxing_step_predicted_us(plan, s));
          break;
        case C_BYTES:
          bytes_summary(cf, nranks, sl_boxing_step_bytes_sent(plan, s));
          break;
        case C_GROUPS: groups_summary(cf, plan, s); break;
        }
        char *txt = cell_close(&cl);
        cells[s * C_COUNT + c] = txt;
        if (!txt)
          ok = false;
        else if ((int)strlen(txt) > width[c])
          width[c] = (int)strlen(txt);
      }
    }
    if (ok) {
      for (int c = 0; c < C_COUNT; c++)
        put_cell(f, c, width[c], col_title[c]);
      for (int s = 0; s < nsteps; s++)
        for (int c = 0; c < C_COUNT; c++)
          put_cell(f, c, width[c], cells[s * C_COUNT + c]);
    }
    for (int i = 0; i < nsteps * C_COUNT; i++)
      free(cells[i]);
    free(cells);
    if (!ok) return -1;

    const int64_t *bytes = sl_boxing_route_bytes_sent(plan);
    long long total = 0, most = 0;
    for (int r = 0; r < nranks; r++) {
      total += bytes[r];
      if (bytes[r] > most) most = bytes[r];
    }
    fprintf(f,
            "total: %lld bytes sent, at most %lld by one rank; "
            "predicted %.3f us\n",
            total, most, sl_boxing_route_predicted_us(plan));
  }

  if (vr->ran) {
    if (vr->status == SL_OK) {
      fprintf(f,
              "verified: every target shard matches the logical tensor "
              "(seed %llu)\n",
              (unsigned long long)a->seed);
    } else {
      char got[40];
      fprintf(f,
              "verify FAILED (seed %llu): target rank %d, index %lld: "
              "expected %s, got %s\n",
              (unsigned long long)a->seed, vr->mismatch.rank,
              (long long)vr->mismatch.index,
              num_str(vr->mismatch.expected, buf, sizeof buf),
              num_str(vr->mismatch.got, got, sizeof got));
    }
  }
  return 0;
}

/* ---- the command -------------------------------------------------------- */

/* The one stderr line of a failure. Library messages quote input text, so
 * control characters are replaced to keep it one line. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  for (char *p = msg; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  fprintf(stderr, "sluice boxing: %s\n", msg);
}

/* --verify holds the logical tensor and every source and target shard in
 * memory, and the executor's intermediate buffers take about as much again.
 * Requests beyond this estimate are refused up front rather than left to
 * the out-of-memory killer. */
#define VERIFY_MAX_BYTES (1024.0 * 1024 * 1024)

static double verify_bytes(const sl_cli_boxing_args *a) {
  double esize = (double)sl_dtype_size(a->dtype);
  double total = (double)sl_shape_numel(&a->shape) * esize;
  const sl_placement *place[2] = {a->src_place, a->dst_place};
  const sl_nd_sbp *sbp[2] = {&a->src_sbp, &a->dst_sbp};
  for (int side = 0; side < 2; side++)
    for (int r = 0; r < sl_placement_size(place[side]); r++) {
      sl_slice sl;
      if (sl_local_slice(&a->shape, place[side], sbp[side], r, &sl) == SL_OK)
        total += (double)sl_slice_numel(&sl) * esize;
    }
  return 2 * total;
}

/* A seed nobody chose: different per run, printed so the run can be
 * replayed with --seed. */
static uint64_t clock_seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  x ^= (uint64_t)getpid() << 32;
  /* SplitMix64 finaliser: nearby clock values give unrelated seeds. */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (x ^ (x >> 31)) >> 1; /* keep it readable as a signed value too */
}

int sl_cli_boxing(int argc, char **argv) {
  sl_cli_boxing_args a;
  char err[1024];
  if (sl_cli_boxing_args_parse(argc, argv, &a, err, sizeof err) != SL_OK) {
    report("%s", err);
    return 2;
  }
  if (a.help) {
    fputs(sl_cli_boxing_usage, stdout);
    return 0;
  }
  if (a.verify && !a.seed_given) a.seed = clock_seed();
  if (a.verify && verify_bytes(&a) > VERIFY_MAX_BYTES) {
    report("--verify would need about %.1f GiB of memory for this tensor "
           "(limit %.0f GiB); leave out --verify or use a smaller --shape",
           verify_bytes(&a) / (1024.0 * 1024 * 1024),
           VERIFY_MAX_BYTES / (1024.0 * 1024 * 1024));
    sl_cli_boxing_args_clear(&a);
    return 2;
  }

  int rc = 2;
  char *src_place = NULL, *dst_place = NULL;
  sl_boxing_route *plan = NULL;
  verify_result vr = {0};
  sl_status st =
      sl_boxing_route_create(&a.shape, a.dtype, a.src_place, &a.src_sbp,
                             a.dst_place, &a.dst_sbp, &a.cost, &plan);
  if (st != SL_OK) {
    report("cannot plan: %s (%s)", sl_last_error(), sl_status_str(st));
    goto done;
  }
  if (a.verify) {
    vr.ran = true;
    vr.status = sl_boxing_verify(plan, a.seed, &vr.mismatch);
    if (vr.status != SL_OK && vr.status != SL_EMISMATCH) {
      report("--verify: %s (%s)", sl_last_error(), sl_status_str(vr.status));
      goto done;
    }
  }
  src_place = placement_str(a.src_place);
  dst_place = placement_str(a.dst_place);
  if (!src_place || !dst_place) {
    report("out of memory");
    goto done;
  }
  if (a.json) {
    print_json(stdout, &a, plan, src_place, dst_place, &vr);
  } else if (print_human(stdout, &a, plan, src_place, dst_place, &vr) != 0) {
    report("out of memory");
    goto done;
  }
  rc = vr.ran && vr.status != SL_OK ? 1 : 0;
  if (fflush(stdout) != 0) {
    report("cannot write the output");
    rc = 2;
  }
done:
  free(src_place);
  free(dst_place);
  sl_boxing_route_destroy(plan);
  sl_cli_boxing_args_clear(&a);
  return rc;
}
