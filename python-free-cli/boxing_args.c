/* `sluice boxing` argument parsing: flags -> a validated request. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boxing_args.h"

const char sl_cli_boxing_usage[] =
    "usage: sluice boxing --shape SHAPE --from-placement PLACEMENT\n"
    "                     --from SBP --to SBP [options]\n"
    "\n"
    "Explains (and with --verify checks) how a global tensor moves from one\n"
    "placement and nd-SBP to another: the collective steps the boxing\n"
    "planner picks, the bytes each rank sends and the predicted time.\n"
    "\n"
    "required:\n"
    "  --shape SHAPE            logical shape: 8,6 or 8x6 or [8,6]; '' or []\n"
    "                           is a scalar\n"
    "  --from-placement P       source placement TYPE:[NODES/]DEVICES[MESH],\n"
    "                           e.g. cpu:0-3, cpu:0-3[2,2], cuda:0-1/0-7\n"
    "  --from SBP               source nd-SBP, one entry per mesh axis:\n"
    "                           S(0), B, P, P(max), P(min), (S(0),P)\n"
    "  --to SBP                 target nd-SBP\n"
    "options:\n"
    "  --to-placement P         target placement (default: the source's);\n"
    "                           it must have the same device type\n"
    "  --dtype DTYPE            f32 (default), f16, bf16, f64, i8, i32, i64,\n"
    "                           u8, bool\n"
    "  --json                   print one JSON object instead of a table\n"
    "  --verify                 run the plan on random data with the\n"
    "                           reference executor and compare every target\n"
    "                           shard with the logical tensor (exit 1 on a\n"
    "                           mismatch; tensors needing more than about\n"
    "                           1 GiB for this are refused)\n"
    "  --seed N                 seed for --verify (default: from the clock;\n"
    "                           it is printed so a run can be replayed)\n"
    "  --intra-bw GBPS          cost model: intra-node bandwidth, GB/s\n"
    "  --intra-latency-us US    cost model: intra-node latency, µs\n"
    "  --inter-bw GBPS          cost model: inter-node bandwidth, GB/s\n"
    "  --inter-latency-us US    cost model: inter-node latency, µs\n"
    "                           (defaults: the device type's, docs/boxing.md)\n"
    "  -h, --help               this text\n"
    "\n"
    "Flags take '--flag value' or '--flag=value'. Exit status: 0 success,\n"
    "1 --verify found a mismatch, 2 bad input (one line on stderr).\n"
    "\n"
    "example:\n"
    "  sluice boxing --shape 8,6 --from-placement 'cpu:0-3[2,2]' \\\n"
    "      --from '(S(0),P)' --to '(B,B)' --verify\n";

enum {
  F_SHAPE,
  F_DTYPE,
  F_FROM_PLACEMENT,
  F_FROM,
  F_TO,
  F_TO_PLACEMENT,
  F_SEED,
  F_INTRA_BW,
  F_INTRA_LAT,
  F_INTER_BW,
  F_INTER_LAT,
  F_JSON,
  F_VERIFY,
  F_COUNT
};

static const struct {
  const char *name;
  bool takes_value;
} flags[F_COUNT] = {
    [F_SHAPE] = {"shape", true},
    [F_DTYPE] = {"dtype", true},
    [F_FROM_PLACEMENT] = {"from-placement", true},
    [F_FROM] = {"from", true},
    [F_TO] = {"to", true},
    [F_TO_PLACEMENT] = {"to-placement", true},
    [F_SEED] = {"seed", true},
    [F_INTRA_BW] = {"intra-bw", true},
    [F_INTRA_LAT] = {"intra-latency-us", true},
    [F_INTER_BW] = {"inter-bw", true},
    [F_INTER_LAT] = {"inter-latency-us", true},
    [F_JSON] = {"json", false},
    [F_VERIFY] = {"verify", false},
};

typedef struct errbuf {
  char *buf;
  size_t size;
} errbuf;

/* Formats the one-line message. Text from argv or from the library may
 * hold newlines or escapes; they become '?' so that stderr gets exactly one
 * line whatever the input. */
static sl_status fail(errbuf *e, sl_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sl_status fail(errbuf *e, sl_status st, const char *fmt, ...) {
  if (!e->size) return st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->buf, e->size, fmt, ap);
  va_end(ap);
  for (char *p = e->buf; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  return st;
}

#define CHECK(call)                                                            \
  do {                                                                         \
    sl_status st_ = (call);                                                    \
    if (st_ != SL_OK) return st_;                                              \
  } while (0)

/* Messages quote user text; a long or binary argument would drown the
 * message, so quote at most this many bytes. */
#define QUOTE_MAX 120

static sl_status parse_u64(errbuf *e, const char *flag, const char *v,
                           uint64_t *out) {
  /* strtoull accepts a sign and leading space; a seed is digits only. */
  bool ok = *v != '\0';
  for (const char *p = v; *p; p++)
    ok = ok && isdigit((unsigned char)*p);
  errno = 0;
  unsigned long long x = ok ? strtoull(v, NULL, 10) : 0;
  if (!ok || errno == ERANGE)
    return fail(e, SL_EINVAL,
                "--%s '%.*s': expected an integer from 0 to "
                "18446744073709551615",
                flag, QUOTE_MAX, v);
  *out = x;
  return SL_OK;
}

/* A bandwidth must be positive (it divides), a latency may be zero. */
static sl_status parse_figure(errbuf *e, const char *flag, const char *v,
                              bool positive, double *out) {
  char *end = NULL;
  errno = 0;
  double x = *v && !isspace((unsigned char)*v) ? strtod(v, &end) : NAN;
  bool ok = end && *end == '\0' && errno != ERANGE && isfinite(x) &&
            (positive ? x > 0 : x >= 0);
  if (!ok)
    return fail(e, SL_EINVAL, "--%s '%.*s': expected a finite number %s", flag,
                QUOTE_MAX, v, positive ? "> 0" : ">= 0");
  *out = x;
  return SL_OK;
}

/* Placement text of p for messages, into a fixed buffer (truncated). */
static const char *placement_text(const sl_placement *p, char *buf,
                                  size_t size) {
  sl_placement_print(p, buf, size);
  return buf;
}

static sl_status check_side(errbuf *e, const char *flag, const char *text,
                            const sl_nd_sbp *s, const sl_placement *p,
                            const sl_shape *shape) {
  if (sl_nd_sbp_check(s, p, shape) == SL_OK) return SL_OK;
  char pt[128], st[64];
  sl_shape_print(shape, st, sizeof st);
  return fail(e, SL_EINVAL, "--%s '%.*s' does not fit shape %s on %s: %s", flag,
              QUOTE_MAX, text, st, placement_text(p, pt, sizeof pt),
              sl_last_error());
}

/* Splits "--name" / "--name=value" and looks the name up. Returns the
 * flag id or -1; *value is the text after '=' or NULL. */
static int lookup(const char *arg, const char **value) {
  const char *name = arg + 2;
  const char *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  *value = eq ? eq + 1 : NULL;
  for (int f = 0; f < F_COUNT; f++)
    if (strlen(flags[f].name) == len && memcmp(flags[f].name, name, len) == 0)
      return f;
  return -1;
}

static sl_status parse(int argc, char *const *argv, sl_cli_boxing_args *a,
                       errbuf *e) {
  const char *val[F_COUNT] = {0};
  bool seen[F_COUNT] = {0};

  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      a->help = true;
      return SL_OK;
    }

  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
      return fail(e, SL_EINVAL, "unexpected argument '%.*s'", QUOTE_MAX, arg);
    const char *value;
    int f = lookup(arg, &value);
    if (f < 0) {
      int len = (int)strcspn(arg, "=");
      return fail(e, SL_EINVAL, "unknown flag '%.*s' (see --help)",
                  len < QUOTE_MAX ? len : QUOTE_MAX, arg);
    }
    if (seen[f])
      return fail(e, SL_EINVAL, "--%s given more than once", flags[f].name);
    seen[f] = true;
    if (!flags[f].takes_value) {
      if (value)
        return fail(e, SL_EINVAL, "--%s takes no value", flags[f].name);
      continue;
    }
    /* A value never starts with "--" (no shape, placement, SBP or number
     * does), so "--shape --json" means the value was left out, not a shape
     * called "--json". */
    if (!value) {
      if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
        return fail(e, SL_EINVAL, "missing value for --%s", flags[f].name);
      value = argv[++i];
    }
    val[f] = value;
  }

  static const int required[] = {F_SHAPE, F_FROM_PLACEMENT, F_FROM, F_TO};
  for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
    if (!val[required[k]])
      return fail(e, SL_EINVAL, "missing required flag --%s (see --help)",
                  flags[required[k]].name);

  a->json = seen[F_JSON];
  a->verify = seen[F_VERIFY];
  if (sl_shape_parse(val[F_SHAPE], &a->shape) != SL_OK)
    return fail(e, SL_EINVAL, "--shape: %s", sl_last_error());
  a->dtype = SL_DTYPE_F32;
  if (val[F_DTYPE] && sl_dtype_parse(val[F_DTYPE], &a->dtype) != SL_OK)
    return fail(e, SL_EINVAL, "--dtype: %s", sl_last_error());

  sl_status st = sl_placement_parse(val[F_FROM_PLACEMENT], &a->src_place);
  if (st != SL_OK) return fail(e, st, "--from-placement: %s", sl_last_error());
  a->dst_place_given = val[F_TO_PLACEMENT] != NULL;
  st = a->dst_place_given
           ? sl_placement_parse(val[F_TO_PLACEMENT], &a->dst_place)
           : sl_placement_copy(a->src_place, &a->dst_place);
  if (st != SL_OK) return fail(e, st, "--to-placement: %s", sl_last_error());
  sl_device_type t_src = sl_placement_device_type(a->src_place);
  sl_device_type t_dst = sl_placement_device_type(a->dst_place);
  if (t_src != t_dst)
    return fail(e, SL_EINVAL,
                "--to-placement is on %s devices but --from-placement on %s; "
                "boxing does not change the device type",
                sl_device_type_name(t_dst), sl_device_type_name(t_src));

  if (sl_nd_sbp_parse(val[F_FROM], &a->src_sbp) != SL_OK)
    return fail(e, SL_EINVAL, "--from: %s", sl_last_error());
  if (sl_nd_sbp_parse(val[F_TO], &a->dst_sbp) != SL_OK)
    return fail(e, SL_EINVAL, "--to: %s", sl_last_error());
  CHECK(
      check_side(e, "from", val[F_FROM], &a->src_sbp, a->src_place, &a->shape));
  CHECK(check_side(e, "to", val[F_TO], &a->dst_sbp, a->dst_place, &a->shape));

  if (val[F_SEED]) {
    CHECK(parse_u64(e, "seed", val[F_SEED], &a->seed));
    a->seed_given = true;
  }
  a->cost = sl_boxing_cost_default(t_src);
  if (val[F_INTRA_BW])
    CHECK(parse_figure(e, "intra-bw", val[F_INTRA_BW], true,
                       &a->cost.intra_bandwidth_gbps));
  if (val[F_INTRA_LAT])
    CHECK(parse_figure(e, "intra-latency-us", val[F_INTRA_LAT], false,
                       &a->cost.intra_latency_us));
  if (val[F_INTER_BW])
    CHECK(parse_figure(e, "inter-bw", val[F_INTER_BW], true,
                       &a->cost.inter_bandwidth_gbps));
  if (val[F_INTER_LAT])
    CHECK(parse_figure(e, "inter-latency-us", val[F_INTER_LAT], false,
                       &a->cost.inter_latency_us));
  return SL_OK;
}

sl_status sl_cli_boxing_args_parse(int argc, char *const *argv,
                                   sl_cli_boxing_args *out, char *err,
                                   size_t err_size) {
  errbuf e = {err, err_size};
  if (err_size) err[0] = '\0';
  memset(out, 0, sizeof *out);
  sl_status st = parse(argc, argv, out, &e);
  if (st != SL_OK) sl_cli_boxing_args_clear(out);
  return st;
}

void sl_cli_boxing_args_clear(sl_cli_boxing_args *a) {
  sl_placement_destroy(a->src_place);
  sl_placement_destroy(a->dst_place);
  memset(a, 0, sizeof *a);
}
