/* The dense family's vector loops: the 16-byte-vector instance, which any
 * SIMD target runs (SSE2 on x86-64, NEON), and the choice of the fastest
 * table for this CPU among it and the instruction-set files' ones. */
#include "cpu/dense_util.h"

static bool usable_any(const sl__cpu_features *f) { return true; }

#define DR_W 4
#define DR_ATTR
#define DR_FN(name) name##_sse
#define DR_NAME "sse"
#define DR_USABLE usable_any
#include "cpu/dense_rows_impl.h"

int sl__dense_rows_count(void) {
  const sl__dense_rows *const *isa;
  return 1 + sl__dense_rows_isa(&isa);
}

const sl__dense_rows *sl__dense_rows_at(int i) {
  const sl__dense_rows *const *isa;
  int n = sl__dense_rows_isa(&isa);
  if (i == 0) return &table_sse;
  return i > 0 && i <= n ? isa[i - 1] : NULL;
}

const sl__dense_rows *sl__dense_rows_get(void) {
  /* Racing first callers store the same pointer. */
  static const sl__dense_rows *chosen;
  const sl__dense_rows *t = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
  if (t) return t;
  const sl__cpu_features *f = sl__cpu_features_get();
  t = &table_sse;
  for (int i = 1; i < sl__dense_rows_count(); i++)
    if (sl__dense_rows_at(i)->usable(f)) t = sl__dense_rows_at(i);
  __atomic_store_n(&chosen, t, __ATOMIC_RELEASE);
  return t;
}
