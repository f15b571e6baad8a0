/* A link-time seam for the CLI test: `sluice` linked with
 * -Wl,--wrap=sl_boxing_verify gets this verifier, which always reports one
 * known mismatch. A correct planner never produces a mismatch, so this is
 * how the test reaches the command's failure reporting (exit 1, the rank,
 * index and values) without a broken library. */
#include <sluice/boxing.h>

sl_status __wrap_sl_boxing_verify(const sl_boxing_route *plan, uint64_t seed,
                                  sl_boxing_mismatch *mismatch);

sl_status __wrap_sl_boxing_verify(const sl_boxing_route *plan, uint64_t seed,
                                  sl_boxing_mismatch *mismatch) {
  (void)plan;
  (void)seed;
  if (mismatch) {
    mismatch->rank = 2;
    mismatch->index = 5;
    mismatch->expected = 3;
    mismatch->got = 0.5;
  }
  return SL_EMISMATCH;
}
