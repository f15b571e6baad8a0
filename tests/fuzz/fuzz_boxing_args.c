/* `sluice boxing` argument handling on a fuzzed command line: the input is
 * split on newlines into argv. Whatever it holds, parsing either succeeds
 * with a complete request or fails with one printable line and nothing
 * owned. Small accepted requests are also planned and verified with the
 * reference executor, so the fuzzer explores the planner through the same
 * door the command uses: a plan that gives wrong shards aborts. */
#include <math.h>

#include "boxing_args.h"
#include "fuzz_common.h"

#define MAX_ARGS 64
/* Bounds that keep one verification in the microseconds. */
#define VERIFY_MAX_RANKS 16
#define VERIFY_MAX_NUMEL 4096

static void plan_and_verify(const sl_cli_boxing_args *a) {
  int ranks = sl_placement_size(a->src_place) + sl_placement_size(a->dst_place);
  int64_t numel = sl_shape_numel(&a->shape);
  if (ranks > VERIFY_MAX_RANKS || numel > VERIFY_MAX_NUMEL) return;
  sl_boxing_route *plan = NULL;
  sl_status st =
      sl_boxing_route_create(&a->shape, a->dtype, a->src_place, &a->src_sbp,
                             a->dst_place, &a->dst_sbp, &a->cost, &plan);
  /* The arguments passed every check the planner documents. */
  FUZZ_CHECK(st == SL_OK, "plan failed: %s", sl_last_error());
  int n = sl_boxing_route_rank_count(plan);
  double total = 0;
  for (int s = 0; s < sl_boxing_route_step_count(plan); s++) {
    double us = sl_boxing_step_predicted_us(plan, s);
    FUZZ_CHECK(isfinite(us) && us >= 0, "step %d predicts %g us", s, us);
    total += us;
    const int64_t *b = sl_boxing_step_bytes_sent(plan, s);
    for (int r = 0; r < n; r++)
      FUZZ_CHECK(b[r] >= 0, "negative bytes");
  }
  FUZZ_CHECK(fabs(total - sl_boxing_route_predicted_us(plan)) <=
                 1e-9 * total + 1e-12,
             "steps sum to %g, plan says %g", total,
             sl_boxing_route_predicted_us(plan));
  sl_boxing_mismatch mm;
  st = sl_boxing_verify(plan, a->seed, &mm);
  FUZZ_CHECK(st == SL_OK, "verify: %s (rank %d index %lld expected %g got %g)",
             sl_status_str(st), mm.rank, (long long)mm.index, mm.expected,
             mm.got);
  sl_boxing_route_destroy(plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstring(data, size);
  if (!text) return 0;
  char *argv[MAX_ARGS + 1] = {"boxing"};
  int argc = 1;
  for (char *p = text; argc < MAX_ARGS;) {
    argv[argc++] = p;
    char *nl = strchr(p, '\n');
    if (!nl) break;
    *nl = '\0';
    p = nl + 1;
  }
  argv[argc] = NULL;

  sl_cli_boxing_args a;
  char err[256];
  sl_status st = sl_cli_boxing_args_parse(argc, argv, &a, err, sizeof err);
  if (st != SL_OK) {
    FUZZ_CHECK(err[0] != '\0', "failure without a message");
    for (const char *q = err; *q; q++)
      FUZZ_CHECK((unsigned char)*q >= 0x20 && *q != 0x7f,
                 "control character in '%s'", err);
    FUZZ_CHECK(a.src_place == NULL && a.dst_place == NULL,
               "failure left placements owned");
  } else if (!a.help) {
    FUZZ_CHECK(a.src_place && a.dst_place, "request without placements");
    FUZZ_CHECK(sl_placement_device_type(a.src_place) ==
                   sl_placement_device_type(a.dst_place),
               "device types differ");
    FUZZ_CHECK(sl_nd_sbp_check(&a.src_sbp, a.src_place, &a.shape) == SL_OK &&
                   sl_nd_sbp_check(&a.dst_sbp, a.dst_place, &a.shape) == SL_OK,
               "unchecked SBP");
    plan_and_verify(&a);
  }
  sl_cli_boxing_args_clear(&a);
  free(text);
  return 0;
}
