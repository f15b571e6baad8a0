/* sl_placement_parse on any text. An accepted placement prints to a form
 * that parses to an equal placement and prints identically (canonical), and
 * its rank <-> (node, device) and rank <-> coordinate maps are inverse. */
#include <sluice/placement.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstring(data, size);
  if (!text) return 0;
  sl_placement *p = NULL;
  sl_clear_error();
  sl_status st = sl_placement_parse(text, &p);
  if (st != SL_OK) {
    FUZZ_CHECK(p == NULL, "failure left a placement");
    FUZZ_CHECK(sl_last_error()[0] != '\0', "'%s' rejected silently", text);
    free(text);
    return 0;
  }
  int n = sl_placement_print(p, NULL, 0);
  FUZZ_CHECK(n > 0, "print length %d", n);
  char *buf = malloc((size_t)n + 1);
  if (!buf) abort();
  FUZZ_CHECK(sl_placement_print(p, buf, (size_t)n + 1) == n &&
                 strlen(buf) == (size_t)n,
             "print of '%s' is inconsistent", text);
  sl_placement *q = NULL;
  FUZZ_CHECK(sl_placement_parse(buf, &q) == SL_OK,
             "'%s' printed as '%s' which does not parse: %s", text, buf,
             sl_last_error());
  FUZZ_CHECK(sl_placement_equal(p, q), "'%s' -> '%s' is another placement",
             text, buf);
  char *again = malloc((size_t)n + 1);
  if (!again) abort();
  sl_placement_print(q, again, (size_t)n + 1);
  FUZZ_CHECK(strcmp(buf, again) == 0, "'%s' then '%s'", buf, again);

  int size_p = sl_placement_size(p);
  int mesh_product = 1;
  for (int a = 0; a < sl_placement_mesh_ndim(p); a++)
    mesh_product *= sl_placement_mesh_dim(p, a);
  FUZZ_CHECK(mesh_product == size_p, "mesh of '%s' has %d ranks, not %d", buf,
             mesh_product, size_p);
  /* Big placements: check a sample of ranks, spread over the whole range. */
  int step = size_p > 256 ? size_p / 256 : 1;
  for (int r = 0; r < size_p; r += step) {
    int node, dev, coord[SL_MAX_MESH_AXES];
    FUZZ_CHECK(sl_placement_rank_device(p, r, &node, &dev) == SL_OK, "rank %d",
               r);
    FUZZ_CHECK(sl_placement_rank_of(p, node, dev) == r, "rank %d of '%s'", r,
               buf);
    sl_placement_rank_coord(p, r, coord);
    FUZZ_CHECK(sl_placement_coord_rank(p, coord) == r, "coord of rank %d", r);
  }
  sl_placement_destroy(p);
  sl_placement_destroy(q);
  free(buf);
  free(again);
  free(text);
  return 0;
}
