/* The reference interpreter: a graph run on the host with whole logical
 * tensors, one buffer per value, each op's CPU kernel called once per step
 * with the whole tensor as its slice. Placement and SBP are ignored (a
 * boxing node is a copy), which makes it the single-device reference. */
#include <string.h>

#include "graph_priv.h"

struct sl__interp {
  const sl_graph *g;
  int32_t n_values;
  void **buf;    /* per value: the whole tensor */
  size_t *bytes; /* per value */
  bool *fed;     /* per value: an input's data was given */
  int64_t step;
  bool ran;
};

static size_t value_bytes(const sl__value *v) {
  return (size_t)sl_shape_numel(&v->meta.shape) * sl_dtype_size(v->meta.dtype);
}

static sl_slice whole(const sl_shape *s) {
  sl_slice r;
  memset(&r, 0, sizeof r);
  r.ndim = s->ndim;
  for (int d = 0; d < s->ndim; d++)
    r.extent[d] = s->dims[d];
  return r;
}

void sl__interp_destroy(sl__interp *it) {
  if (!it) return;
  for (int32_t v = 0; it->buf && v < it->n_values; v++)
    sl__free(it->buf[v]);
  sl__free(it->buf);
  sl__free(it->bytes);
  sl__free(it->fed);
  sl__free(it);
}

sl_status sl__interp_create(const sl_graph *g, sl__interp **out) {
  *out = NULL;
  if (!g) return sl__fail(SL_EINVAL, "interpreter: NULL graph");
  if (g->err) return sl__fail(g->err, "%s", g->err_msg);
  sl__interp *it;
  if (SL_NEW(it) != SL_OK) return SL_ENOMEM;
  it->g = g;
  it->n_values = g->n_values;
  it->buf = sl__calloc((size_t)g->n_values + 1, sizeof *it->buf);
  it->bytes = sl__calloc((size_t)g->n_values + 1, sizeof *it->bytes);
  it->fed = sl__calloc((size_t)g->n_values + 1, sizeof *it->fed);
  sl_status st = SL_OK;
  if (!it->buf || !it->bytes || !it->fed) {
    st = SL_ENOMEM;
    goto fail;
  }
  for (int32_t v = 0; v < g->n_values; v++) {
    it->bytes[v] = value_bytes(g->values[v]);
    /* 64-byte multiples: kernels may use aligned vector loads. */
    if (!(it->buf[v] = sl__calloc(1, it->bytes[v] + 64))) {
      st = SL_ENOMEM;
      goto fail;
    }
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__gnode *gn = g->nodes[i];
    if (gn->n.kind != SL__NODE_VARIABLE) continue;
    const sl__value *v = g->values[gn->n.out[0]];
    sl_slice s = whole(&v->meta.shape);
    st = sl__g_init_fill(&gn->init, &v->meta.shape, v->meta.dtype, &s,
                         it->buf[gn->n.out[0]]);
    if (st != SL_OK) {
      sl__fail_context(st, "variable '%s': ", gn->n.name);
      goto fail;
    }
  }
  *out = it;
  return SL_OK;
fail:
  sl__interp_destroy(it);
  return st;
}

sl_status sl__interp_feed(sl__interp *it, const char *name, const void *data,
                          size_t bytes) {
  const sl__node *n = sl__graph_find_kind(it->g, name, SL__NODE_INPUT);
  if (!n)
    return sl__fail(SL_ENOTFOUND, "feed: the graph has no input '%s'",
                    name ? name : "(null)");
  int32_t v = n->out[0];
  if (bytes != it->bytes[v])
    return sl__fail(SL_EINVAL,
                    "feed of input '%s': %zu bytes, the input "
                    "needs %zu",
                    name, bytes, it->bytes[v]);
  if (bytes) memcpy(it->buf[v], data, bytes);
  it->fed[v] = true;
  return SL_OK;
}

void sl__interp_set_step(sl__interp *it, int64_t step) { it->step = step; }

static sl_status run_op(sl__interp *it, const sl__node *n) {
  const sl_graph *g = it->g;
  sl__kernel_ctx k;
  memset(&k, 0, sizeof k);
  k.attrs = &n->attrs;
  k.n_in = n->n_in;
  k.n_out = n->n_out;
  k.step = it->step;
  for (int i = 0; i < n->n_in; i++) {
    const sl__value *v = g->values[n->in[i]];
    k.in[i] = it->buf[n->in[i]];
    k.in_meta[i] = v->meta;
    k.in_slice[i] = whole(&v->meta.shape);
    k.in_global[i] = v->meta.shape;
  }
  for (int j = 0; j < n->n_out; j++) {
    const sl__value *v = g->values[n->out[j]];
    k.out[j] = it->buf[n->out[j]];
    k.out_meta[j] = v->meta;
    k.out_slice[j] = whole(&v->meta.shape);
    k.out_global[j] = v->meta.shape;
  }
  sl__graph_micro_shift(g, n, &k);
  sl_clear_error();
  sl_status st = sl__op_run_cpu(n->op, &k);
  if (st != SL_OK)
    return sl__fail_context(st, "op '%s' (%s): ", n->name, n->op->name);
  return SL_OK;
}

sl_status sl__interp_step(sl__interp *it) {
  const sl_graph *g = it->g;
  if (g->n_values != it->n_values)
    return sl__fail(SL_ESTATE, "interpreter: the graph changed after the "
                               "interpreter was created");
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__node *n = &g->nodes[i]->n;
    switch (n->kind) {
    case SL__NODE_INPUT:
      if (!it->fed[n->out[0]])
        return sl__fail(SL_ESTATE, "input '%s' was never fed", n->name);
      break;
    case SL__NODE_OP: SL_CHECK(run_op(it, n)); break;
    case SL__NODE_BOXING:
      if (it->bytes[n->in[0]])
        memcpy(it->buf[n->out[0]], it->buf[n->in[0]], it->bytes[n->in[0]]);
      break;
    case SL__NODE_VARIABLE:
    case SL__NODE_FETCH: break;
    }
  }
  /* Updates apply after the whole step has read the old values. An update
   * whose new value is another variable's value (v <- w) must see w's old
   * version, so those are staged before any variable changes. */
  size_t staged_bytes = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__node *n = &g->nodes[i]->n;
    if (n->kind == SL__NODE_VARIABLE && n->update >= 0 &&
        g->nodes[g->values[n->update]->producer]->n.kind == SL__NODE_VARIABLE)
      staged_bytes += it->bytes[n->out[0]];
  }
  unsigned char *staged = staged_bytes ? sl__malloc(staged_bytes) : NULL;
  if (staged_bytes && !staged) return SL_ENOMEM;
  size_t off = 0;
  for (int pass = 0; pass < 2; pass++) {
    off = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      const sl__node *n = &g->nodes[i]->n;
      if (n->kind != SL__NODE_VARIABLE || n->update < 0) continue;
      size_t bytes = it->bytes[n->out[0]];
      bool from_var =
          g->nodes[g->values[n->update]->producer]->n.kind == SL__NODE_VARIABLE;
      if (pass == 0 && from_var && bytes) /* snapshot the old version */
        memcpy(staged + off, it->buf[n->update], bytes);
      if (pass == 1 && bytes)
        memcpy(it->buf[n->out[0]], from_var ? staged + off : it->buf[n->update],
               bytes);
      if (from_var) off += bytes;
    }
  }
  sl__free(staged);
  it->step++;
  it->ran = true;
  return SL_OK;
}

sl_status sl__interp_fetch(const sl__interp *it, const char *name,
                           const void **data, sl__meta *meta) {
  *data = NULL;
  const sl__node *n = sl__graph_find_kind(it->g, name, SL__NODE_FETCH);
  if (!n)
    return sl__fail(SL_ENOTFOUND, "fetch: the graph has no fetch '%s'",
                    name ? name : "(null)");
  if (!it->ran) return sl__fail(SL_ESTATE, "fetch '%s': no step has run", name);
  *data = it->buf[n->in[0]];
  if (meta) *meta = it->g->values[n->in[0]]->meta;
  return SL_OK;
}

sl_status sl__interp_variable(sl__interp *it, const char *name, void **data,
                              sl__meta *meta) {
  *data = NULL;
  const sl__node *n = sl__graph_find_kind(it->g, name, SL__NODE_VARIABLE);
  if (!n)
    return sl__fail(SL_ENOTFOUND, "the graph has no variable '%s'",
                    name ? name : "(null)");
  *data = it->buf[n->out[0]];
  if (meta) *meta = it->g->values[n->out[0]]->meta;
  return SL_OK;
}

const void *sl__interp_value(const sl__interp *it, int32_t value) {
  if (!it->ran || value < 0 || value >= it->n_values) return NULL;
  return it->buf[value];
}
