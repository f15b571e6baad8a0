/* Topological orders that keep an order already given: among the items
 * ready, the smallest index first (a binary min-heap). The memory planner
 * orders a plan's tasks this way (graph/memory.c), and recomputation its
 * graph's nodes (graph/recompute.c). */
#include "graph_int.h"

sl_status sl__topo_smallest_first(int32_t n, const int32_t *off,
                                  const int32_t *to, int32_t *indeg,
                                  int32_t *order, int32_t *count) {
  int32_t len = 0, out = 0;
  int32_t *heap = sl__calloc((size_t)n + 1, sizeof *heap);
  if (!heap) return SL_ENOMEM;
  for (int32_t t = 0; t < n; t++)
    if (!indeg[t]) heap[len++] = t; /* ascending: already a heap */
  while (len) {
    int32_t t = heap[0];
    heap[0] = heap[--len];
    for (int32_t i = 0;;) { /* sift down */
      int32_t l = 2 * i + 1, m = i;
      if (l < len && heap[l] < heap[m]) m = l;
      if (l + 1 < len && heap[l + 1] < heap[m]) m = l + 1;
      if (m == i) break;
      int32_t x = heap[i];
      heap[i] = heap[m];
      heap[m] = x;
      i = m;
    }
    order[out++] = t;
    for (int32_t k = off[t]; k < off[t + 1]; k++) {
      int32_t v = to[k];
      if (--indeg[v]) continue;
      int32_t i = len++;
      heap[i] = v;
      while (i > 0 && heap[(i - 1) / 2] > heap[i]) { /* sift up */
        int32_t q = (i - 1) / 2, x = heap[i];
        heap[i] = heap[q];
        heap[q] = x;
        i = q;
      }
    }
  }
  sl__free(heap);
  *count = out;
  return SL_OK;
}
