/* The compiled graph's decoder (graph/graph_wire.c) on any bytes: a daemon
 * unpacks one per job from the driver's job blob, then lowers it. A
 * rejected input says why ("graph unpack: ...") and leaves no graph; an
 * accepted one is frozen, prints, lowers without breaking memory (lowering
 * may still refuse it), and packs to bytes that unpack to the same graph
 * and pack identically (the decoder and encoder agree). */
#include "fuzz_common.h"
#include "graph_int.h"
#include "lower_int.h"

/* What lowering reads of a graph came through packing unchanged. */
static void same_graph(const sl_graph *g, const sl_graph *h) {
  FUZZ_CHECK(sl__graph_node_count(g) == sl__graph_node_count(h) &&
                 sl__graph_value_count(g) == sl__graph_value_count(h),
             "node or value count changed");
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *a = sl__graph_node(g, i), *b = sl__graph_node(h, i);
    FUZZ_CHECK(strcmp(a->name, b->name) == 0 && a->kind == b->kind &&
                   a->op == b->op && a->n_in == b->n_in &&
                   a->n_out == b->n_out &&
                   sl_placement_equal(a->placement, b->placement),
               "node %d changed", (int)i);
  }
  for (int32_t v = 0; v < sl__graph_value_count(g); v++) {
    const sl__value *a = sl__graph_value(g, v), *b = sl__graph_value(h, v);
    FUZZ_CHECK(a->producer == b->producer && a->index == b->index &&
                   sl_shape_equal(&a->meta.shape, &b->meta.shape) &&
                   a->meta.dtype == b->meta.dtype &&
                   sl_placement_equal(a->placement, b->placement) &&
                   sl_nd_sbp_equal(&a->sbp, &b->sbp),
               "value %d changed", (int)v);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly `size` bytes, so AddressSanitizer sees any read
   * past the end. */
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  sl_graph *g = (sl_graph *)buf; /* must come back NULL on failure */
  sl_clear_error();
  sl_status st = sl__graph_unpack(buf, size, &g);
  if (st != SL_OK) {
    FUZZ_CHECK(g == NULL, "failure left a graph");
    FUZZ_CHECK(strstr(sl_last_error(), "graph unpack") != NULL,
               "status %d, message '%s'", (int)st, sl_last_error());
    free(buf);
    return 0;
  }
  FUZZ_CHECK(g && sl__graph_frozen(g), "accepted but not frozen");
  char text[4096];
  sl_graph_print(g, text, sizeof text);
  sl__pplan *p = NULL;
  if (sl__lower(g, &p) == SL_OK) sl__pplan_destroy(p);
  uint8_t *a = NULL, *b = NULL;
  size_t alen = 0, blen = 0;
  FUZZ_CHECK(sl__graph_pack(g, &a, &alen) == SL_OK, "pack: %s",
             sl_last_error());
  sl_graph *h = NULL;
  FUZZ_CHECK(sl__graph_unpack(a, alen, &h) == SL_OK,
             "its own encoding does not unpack: %s", sl_last_error());
  same_graph(g, h);
  FUZZ_CHECK(sl__graph_pack(h, &b, &blen) == SL_OK, "pack again: %s",
             sl_last_error());
  FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0,
             "re-encoding changed (%zu vs %zu bytes)", alen, blen);
  sl__free(a);
  sl__free(b);
  sl_graph_destroy(h);
  sl_graph_destroy(g);
  free(buf);
  return 0;
}
