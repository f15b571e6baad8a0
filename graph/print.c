/* A text listing of a graph: one line per node. */
#include <stdarg.h>
#include <string.h>

#include "graph_priv.h"

typedef struct out_buf {
  char *buf;
  size_t size;
  int len;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) SL__PRINTF(2, 3);
static void put(out_buf *o, const char *fmt, ...) {
  size_t room = (size_t)o->len < o->size ? o->size - (size_t)o->len : 0;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
  va_end(ap);
  if (w > 0) o->len += w;
}

const char *sl__graph_kind_name(sl__node_kind k) {
  static const char *const names[] = {"op", "input", "variable", "boxing",
                                      "fetch"};
  return (int)k >= 0 && (int)k < (int)SL_ARRAY_LEN(names) ? names[k] : "?";
}

int sl_graph_print(const sl_graph *g, char *buf, size_t size) {
  out_buf o = {buf, size, 0};
  if (size) buf[0] = '\0';
  if (!g) return 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__node *n = &g->nodes[i]->n;
    char place[128], attrs[512];
    sl_placement_print(n->placement, place, sizeof place);
    put(&o, "%s = %s", n->name,
        n->kind == SL__NODE_OP ? n->op->name : sl__graph_kind_name(n->kind));
    if (n->kind == SL__NODE_OP && n->attrs.n) {
      sl__attrs_print(&n->attrs, attrs, sizeof attrs);
      put(&o, "{%s}", attrs);
    }
    if (n->kind == SL__NODE_BOXING && n->boxing) {
      put(&o, "{");
      int steps = sl_boxing_route_step_count(n->boxing);
      for (int s = 0; s < steps; s++)
        put(&o, "%s%s", s ? "," : "",
            sl_boxing_op_name(sl_boxing_step_op(n->boxing, s)));
      put(&o, "%s}", steps ? "" : "relabel");
    }
    put(&o, "(");
    for (int j = 0; j < n->n_in; j++) {
      const sl__value *v = g->values[n->in[j]];
      put(&o, "%s%s", j ? ", " : "", g->nodes[v->producer]->n.name);
      if (v->index) put(&o, ":%d", v->index);
    }
    put(&o, ")");
    for (int j = 0; j < n->n_out; j++) {
      const sl__value *v = g->values[n->out[j]];
      char shape[128], sbp[128] = "";
      sl_shape_print(&v->meta.shape, shape, sizeof shape);
      if (v->sbp.ndim) sl_nd_sbp_print(&v->sbp, sbp, sizeof sbp);
      put(&o, " %s%s %s", j ? "; " : "-> ", sl_dtype_name(v->meta.dtype),
          shape);
      if (sbp[0]) put(&o, " %s%s", sbp, v->sbp_fixed ? "!" : "");
    }
    put(&o, " @%s%s%s", place, n->backward ? " [bw]" : "",
        n->optimizer ? " [opt]" : "");
    /* Pipelined graphs: the stage and pass of each micro-batch's node. */
    if (g->micro_batches > 1 && n->micro >= 0 && n->stage >= 0)
      put(&o, " [s%d %c%d]", (int)n->stage, "FBW"[n->phase % 3],
          (int)n -> micro);
    put(&o, "\n");
  }
  return o.len;
}
