/* The graph builder's core: graphs, sticky errors, names and scopes,
 * interned placements, nodes and values, and the generic op constructor
 * every typed wrapper goes through. */
#include <stdarg.h>
#include <string.h>

#include "cpu/npy.h"
#include "graph_priv.h"

/* Copies src into dst (size bytes), truncating. */
static void str_copy(char *dst, size_t size, const char *src) {
  size_t n = strlen(src);
  if (n >= size) n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* ---- graphs ------------------------------------------------------------ */

sl_status sl_graph_create(sl_graph **out) {
  *out = NULL;
  sl_graph *g;
  if (SL_NEW(g) != SL_OK) return SL_ENOMEM;
  sl_status st = sl__arena_create(0, &g->arena);
  if (st != SL_OK) goto fail;
  sl_placement *p = NULL;
  SL_CHECK_GOTO(sl_placement_parse("cpu:0", &p), st, fail);
  g->default_placement = sl__g_place(g, p);
  sl_placement_destroy(p);
  g->micro_batches = 1;
  g->force_stage = -1;
  if (!g->default_placement) {
    st = SL_ENOMEM;
    goto fail;
  }
  *out = g;
  return SL_OK;
fail:
  sl_graph_destroy(g);
  return st;
}

void sl_graph_destroy(sl_graph *g) {
  if (!g) return;
  sl__g_release_nodes(g);
  for (int i = 0; i < g->n_places; i++)
    sl_placement_destroy(g->places[i]);
  sl__free(g->places);
  sl__free(g->nodes);
  sl__free(g->values);
  sl__free(g->buckets);
  sl__free(g->copy);
  sl__arena_destroy(g->arena);
  sl__free(g);
}

sl_status sl_graph_status(const sl_graph *g) { return g ? g->err : SL_EINVAL; }

const char *sl_graph_error(const sl_graph *g) {
  return g && g->err ? g->err_msg : "";
}

int sl_graph_node_count(const sl_graph *g) { return g ? g->n_nodes : 0; }

/* ---- errors ------------------------------------------------------------ */

static void render_error(sl_graph *g) {
  if (g->err_type[0])
    snprintf(g->err_msg, sizeof g->err_msg, "%s '%s' (%s): %s", g->err_what,
             g->err_name, g->err_type, g->err_reason);
  else
    snprintf(g->err_msg, sizeof g->err_msg, "%s '%s': %s", g->err_what,
             g->err_name, g->err_reason);
}

static sl_status verror(sl_graph *g, sl_status st, const char *what,
                        const char *name, const char *type, const char *fmt,
                        va_list ap) {
  if (g->err == SL_OK) {
    g->err = st;
    str_copy(g->err_what, sizeof g->err_what, what);
    str_copy(g->err_name, sizeof g->err_name, name ? name : "");
    str_copy(g->err_type, sizeof g->err_type, type ? type : "");
    vsnprintf(g->err_reason, sizeof g->err_reason, fmt, ap);
    render_error(g);
    return sl__fail(st, "%s", g->err_msg);
  }
  return st;
}

sl_status sl__g_error(sl_graph *g, sl_status st, const char *what,
                      const char *name, const char *type, const char *fmt,
                      ...) {
  va_list ap;
  va_start(ap, fmt);
  st = verror(g, st, what, name, type, fmt, ap);
  va_end(ap);
  return st;
}

sl_status sl__g_error_last(sl_graph *g, sl_status st, const char *what,
                           const char *name, const char *type) {
  char reason[1024];
  str_copy(reason, sizeof reason,
           sl_last_error()[0] ? sl_last_error() : sl_status_str(st));
  return sl__g_error(g, st, what, name, type, "%s", reason);
}

sl_tensor sl__g_poison(sl_graph *g, bool origin) {
  sl_tensor t = {g, origin ? SL__POISON_ORIGIN : SL__POISON};
  return t;
}

sl_tensor sl__g_fail_op(sl_graph *g, const char *op, const char *fmt, ...) {
  if (g->err) return sl__g_poison(g, false);
  char name[512];
  sl__g_auto_name(g, op, name, sizeof name);
  g->serial++;
  va_list ap;
  va_start(ap, fmt);
  verror(g, SL_EINVAL, "op", name, op, fmt, ap);
  va_end(ap);
  return sl__g_poison(g, true);
}

/* ---- names and scopes -------------------------------------------------- */

void sl__g_scoped(const sl_graph *g, const char *base, char *buf, size_t size) {
  size_t len = strlen(g->scope);
  str_copy(buf, size, g->scope);
  if (len && len + 1 < size) buf[len++] = '/';
  if (len < size) str_copy(buf + len, size - len, base);
}

void sl__g_auto_name(const sl_graph *g, const char *op, char *buf,
                     size_t size) {
  char base[128];
  snprintf(base, sizeof base, "%s_%lld", op, (long long)g->serial);
  sl__g_scoped(g, base, buf, size);
}

void sl_graph_push_scope(sl_graph *g, const char *scope) {
  if (!g) return;
  if (g->scope_depth == (int)SL_ARRAY_LEN(g->scope_len)) {
    sl__g_error(g, SL_EINVAL, "scope", scope ? scope : "", NULL,
                "more than %d nested scopes", (int)SL_ARRAY_LEN(g->scope_len));
    return;
  }
  size_t len = strlen(g->scope);
  g->scope_len[g->scope_depth++] = (int)len;
  if (!scope || !scope[0]) return;
  snprintf(g->scope + len, sizeof g->scope - len, "%s%s", len ? "/" : "",
           scope);
}

void sl_graph_pop_scope(sl_graph *g) {
  if (!g || g->scope_depth == 0) return;
  g->scope[g->scope_len[--g->scope_depth]] = '\0';
}

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

sl__gnode *sl__g_find(const sl_graph *g, const char *name) {
  if (!g->n_buckets) return NULL;
  for (sl__gnode *n = g->buckets[name_hash(name) & (g->n_buckets - 1)]; n;
       n = n->hnext)
    if (strcmp(n->n.name, name) == 0) return n;
  return NULL;
}

static void hash_insert(sl_graph *g, sl__gnode *n) {
  uint32_t b = name_hash(n->n.name) & (g->n_buckets - 1);
  n->hnext = g->buckets[b];
  g->buckets[b] = n;
}

static void hash_remove(sl_graph *g, sl__gnode *n) {
  sl__gnode **pp = &g->buckets[name_hash(n->n.name) & (g->n_buckets - 1)];
  while (*pp && *pp != n)
    pp = &(*pp)->hnext;
  if (*pp) *pp = n->hnext;
  n->hnext = NULL;
}

/* Keeps the load factor at most 1. */
static sl_status hash_reserve(sl_graph *g, int32_t count) {
  if ((uint32_t)count <= g->n_buckets) return SL_OK;
  uint32_t nb = g->n_buckets ? g->n_buckets * 2 : 64;
  while (nb < (uint32_t)count)
    nb *= 2;
  sl__gnode **b = sl__calloc(nb, sizeof *b);
  if (!b) return SL_ENOMEM;
  sl__free(g->buckets);
  g->buckets = b;
  g->n_buckets = nb;
  for (int32_t i = 0; i < g->n_nodes; i++)
    hash_insert(g, g->nodes[i]);
  return SL_OK;
}

static bool name_valid(const char *name) {
  if (!name || !name[0] || strlen(name) > 255) return false;
  for (const char *c = name; *c; c++)
    if ((unsigned char)*c <= ' ' || *c == '\'' || *c == '"') return false;
  return true;
}

sl_tensor sl_name(sl_tensor t, const char *name) {
  sl_graph *g = t.graph;
  if (!g) return t;
  char full[512];
  sl__g_scoped(g, name ? name : "", full, sizeof full);
  if (t.id == SL__POISON_ORIGIN) {
    /* Name the op whose call failed, if the error is still that one. */
    if (g->err && name_valid(name) && strcmp(g->err_what, "op") == 0) {
      str_copy(g->err_name, sizeof g->err_name, full);
      render_error(g);
    }
    return t;
  }
  if (t.id < 0 || g->err) return t;
  if (t.id >= g->n_values) {
    sl__g_error(g, SL_EINVAL, "name", name ? name : "", NULL,
                "tensor id %d is not in this graph", (int)t.id);
    return sl__g_poison(g, false);
  }
  sl__gnode *n = g->nodes[g->values[t.id]->producer];
  if (g->frozen) {
    sl__g_error(g, SL_ESTATE, "name", full, NULL,
                "the graph is compiled: it can no longer change");
    return sl__g_poison(g, false);
  }
  if (!name_valid(name)) {
    sl__g_error(g, SL_EINVAL, "name", name ? name : "(null)", NULL,
                "a name is 1 to 255 characters without spaces or quotes");
    return sl__g_poison(g, false);
  }
  if (strcmp(n->n.name, full) == 0) return t;
  if (sl__g_find(g, full)) {
    sl__g_error(g, SL_EINVAL, "name", full, NULL,
                "the name is already used by another node");
    return sl__g_poison(g, false);
  }
  char *copy = sl__arena_strdup(g->arena, full);
  if (!copy) {
    sl__g_error(g, SL_ENOMEM, "name", full, NULL, "out of memory");
    return sl__g_poison(g, false);
  }
  hash_remove(g, n);
  n->n.name = copy;
  hash_insert(g, n);
  return t;
}

/* ---- placements -------------------------------------------------------- */

sl_placement *sl__g_place(sl_graph *g, const sl_placement *p) {
  for (int i = 0; i < g->n_places; i++)
    if (sl_placement_equal(g->places[i], p)) return g->places[i];
  if (g->n_places == g->cap_places) {
    int cap = g->cap_places ? g->cap_places * 2 : 8;
    sl_placement **np = sl__reallocarray(g->places, (size_t)cap, sizeof *np);
    if (!np) return NULL;
    g->places = np;
    g->cap_places = cap;
  }
  sl_placement *c = NULL;
  if (sl_placement_copy(p, &c) != SL_OK) return NULL;
  g->places[g->n_places++] = c;
  return c;
}

sl_placement *sl__g_place_text(sl_graph *g, const char *text, const char *what,
                               const char *name) {
  if (!text) return g->default_placement;
  sl_placement *p = NULL;
  sl_status st = sl_placement_parse(text, &p);
  if (st != SL_OK) {
    sl__g_error_last(g, st, what, name, NULL);
    return NULL;
  }
  sl_placement *r = sl__g_place(g, p);
  sl_placement_destroy(p);
  if (!r) sl__g_error(g, SL_ENOMEM, what, name, NULL, "out of memory");
  return r;
}

sl_status sl_graph_set_default_placement_p(sl_graph *g, const sl_placement *p) {
  if (!g || !p) return sl__fail(SL_EINVAL, "default placement: NULL argument");
  if (g->frozen)
    return sl__g_error(g, SL_ESTATE, "graph", "default placement", NULL,
                       "the graph is compiled: it can no longer change");
  sl_placement *r = sl__g_place(g, p);
  if (!r)
    return sl__g_error(g, SL_ENOMEM, "graph", "default placement", NULL,
                       "out of memory");
  g->default_placement = r;
  return SL_OK;
}

sl_status sl_graph_set_default_placement(sl_graph *g, const char *placement) {
  if (!g || !placement)
    return sl__fail(SL_EINVAL, "default placement: NULL argument");
  if (g->frozen)
    return sl__g_error(g, SL_ESTATE, "graph", "default placement", NULL,
                       "the graph is compiled: it can no longer change");
  sl_placement *r =
      sl__g_place_text(g, placement, "default placement", placement);
  if (!r) return g->err ? g->err : SL_EINVAL;
  g->default_placement = r;
  return SL_OK;
}

sl_status sl_graph_set_compute_dtype(sl_graph *g, sl_dtype dt) {
  if (!g) return sl__fail(SL_EINVAL, "compute dtype: NULL graph");
  if (g->frozen)
    return sl__g_error(g, SL_ESTATE, "graph", "compute dtype", NULL,
                       "the graph is compiled: it can no longer change");
  if (dt != SL_DTYPE_F32 && dt != SL_DTYPE_BF16 && dt != SL_DTYPE_F16)
    return sl__fail(SL_EINVAL, "compute dtype %s: want f32, bf16 or f16",
                    (unsigned)dt < SL_DTYPE_COUNT ? sl_dtype_name(dt) : "?");
  g->compute_dtype = dt;
  return SL_OK;
}

/* ---- nodes and values -------------------------------------------------- */

bool sl__g_axis(int *axis, int ndim) {
  int a = *axis < 0 ? *axis + ndim : *axis;
  if (a < 0 || a >= ndim) return false;
  *axis = a;
  return true;
}

bool sl__g_usable(sl_graph *g, int n, const sl_tensor *ts, const char *op) {
  if (!g || g->err) return false;
  for (int i = 0; i < n; i++)
    if (ts[i].id < 0) return false;
  if (g->frozen) {
    char name[512];
    sl__g_auto_name(g, op, name, sizeof name);
    sl__g_error(g, SL_ESTATE, "op", name, op,
                "the graph is compiled: it can no longer change");
    return false;
  }
  for (int i = 0; i < n; i++)
    if (ts[i].graph != g || ts[i].id >= g->n_values) {
      char name[512];
      sl__g_auto_name(g, op, name, sizeof name);
      sl__g_error(g, SL_EINVAL, "op", name, op,
                  "input %d is a tensor of another graph", i);
      return false;
    }
  return true;
}

static sl_status grow(void **arr, int32_t *cap, int32_t need, size_t elem) {
  if (need <= *cap) return SL_OK;
  int32_t c = *cap ? *cap * 2 : 64;
  while (c < need)
    c *= 2;
  void *n = sl__reallocarray(*arr, (size_t)c, elem);
  if (!n) return SL_ENOMEM;
  *arr = n;
  *cap = c;
  return SL_OK;
}

sl__gnode *sl__g_new_node(sl_graph *g, sl__node_kind kind, const char *name,
                          const char *type, sl_placement *p, int n_in,
                          const int32_t *in, int n_out, const sl__meta *out) {
  static const char *const what[] = {"op", "input", "variable", "boxing",
                                     "fetch"};
  char full[512];
  if (name)
    sl__g_scoped(g, name, full, sizeof full);
  else
    sl__g_auto_name(g, type, full, sizeof full);
  g->serial++;
  if (name && !name_valid(name)) {
    sl__g_error(g, SL_EINVAL, what[kind], name, type,
                "a name is 1 to 255 characters without spaces or quotes");
    return NULL;
  }
  if (sl__g_find(g, full)) {
    sl__g_error(g, SL_EINVAL, what[kind], full, type,
                "the name is already used by another node");
    return NULL;
  }
  if (grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1,
           sizeof *g->nodes) != SL_OK ||
      grow((void **)&g->values, &g->cap_values, g->n_values + n_out,
           sizeof *g->values) != SL_OK ||
      hash_reserve(g, g->n_nodes + 1) != SL_OK)
    goto oom;
  sl__gnode *gn = sl__arena_calloc(g->arena, 1, sizeof *gn);
  char *nm = sl__arena_strdup(g->arena, full);
  if (!gn || !nm) goto oom;
  sl__value *vals[SL_OP_MAX_OUTPUTS];
  for (int i = 0; i < n_out; i++)
    if (!(vals[i] = sl__arena_calloc(g->arena, 1, sizeof *vals[i]))) goto oom;
  sl__node *n = &gn->n;
  n->name = nm;
  n->kind = kind;
  n->n_in = n_in;
  n->n_out = n_out;
  n->placement = p;
  n->update = -1;
  n->backward = g->mark == SL__MARK_BACKWARD;
  n->optimizer = g->mark == SL__MARK_OPTIMIZER;
  /* micro and the derived stage are settled by sl__g_assign_stages; a
   * stage stated by sl_graph_push_stage, or autodiff's, is kept. */
  n->micro = SL__MICRO_UNSET;
  n->micro_of = -1;
  n->stage = -1;
  if (g->mark == SL__MARK_BACKWARD && p == g->stage_place)
    n->stage = g->force_stage;
  else if (g->mark == SL__MARK_BACKWARD && p == g->input_place)
    n->stage = g->input_stage;
  else if (g->mark == SL__MARK_FORWARD && g->stage_depth > 0)
    n->stage = g->stages[g->stage_depth - 1];
  n->phase = n->backward ? SL__PHASE_B : SL__PHASE_F;
  for (int i = 0; i < n_in; i++)
    n->in[i] = in[i];
  gn->index = g->n_nodes;
  gn->trainable = true;
  gn->npy_id = -1;
  if (kind == SL__NODE_OP && g->mark == SL__MARK_FORWARD &&
      g->recompute_depth > 0)
    gn->recompute = g->recompute_stack[g->recompute_depth - 1];
  for (int i = 0; i < n_out; i++) {
    vals[i]->producer = gn->index;
    vals[i]->index = i;
    vals[i]->meta = out[i];
    vals[i]->placement = p;
    n->out[i] = g->n_values;
    g->values[g->n_values++] = vals[i];
  }
  g->nodes[g->n_nodes++] = gn;
  hash_insert(g, gn);
  return gn;
oom:
  sl__g_error(g, SL_ENOMEM, what[kind], full, type, "out of memory");
  return NULL;
}

sl_tensor sl__g_op(sl_graph *g, const char *opname, int n_in,
                   const sl_tensor *in, const sl__attrs *at, sl_tensor *outs) {
  if (!sl__g_usable(g, n_in, in, opname)) return sl__g_poison(g, false);
  const sl__op_def *op = sl__op_find(opname);
  if (!op) return sl__g_fail_op(g, opname, "no such op in the registry");
  if (n_in < op->min_in || n_in > op->max_in) {
    if (op->min_in == op->max_in)
      return sl__g_fail_op(g, opname, "%d inputs given, it takes %d", n_in,
                           op->min_in);
    return sl__g_fail_op(g, opname, "%d inputs given, it takes %d to %d", n_in,
                         op->min_in, op->max_in);
  }
  sl__meta im[SL_OP_MAX_INPUTS], om[SL_OP_MAX_OUTPUTS];
  int32_t ids[SL_OP_MAX_INPUTS];
  memset(om, 0, sizeof om);
  for (int i = 0; i < n_in; i++) {
    ids[i] = in[i].id;
    im[i] = g->values[in[i].id]->meta;
  }
  sl__attrs empty = {0};
  if (!at) at = &empty;
  sl_clear_error();
  sl_status st = op->infer(at, n_in, im, om);
  if (st != SL_OK) {
    char name[512];
    sl__g_auto_name(g, opname, name, sizeof name);
    g->serial++;
    sl__g_error_last(g, st, "op", name, opname);
    return sl__g_poison(g, true);
  }
  sl_placement *p = g->force_placement;
  if (!p) p = n_in ? g->values[in[0].id]->placement : g->default_placement;
  sl__gnode *gn =
      sl__g_new_node(g, SL__NODE_OP, NULL, opname, p, n_in, ids, op->n_out, om);
  if (!gn) return sl__g_poison(g, true);
  gn->n.op = op;
  gn->n.attrs = *at;
  for (int i = 0; outs && i < op->n_out; i++)
    outs[i] = sl__g_tensor(g, gn->n.out[i]);
  return sl__g_tensor(g, gn->n.out[0]);
}

bool sl__g_source_accepts(const sl__op_def *op, const sl__attrs *at, sl_sbp s) {
  if (s.kind == SL_SBP_BROADCAST) return true;
  if (!op->signatures) return false;
  sl__sbp_sig sigs[SL_OP_MAX_SIGNATURES];
  int n = op->signatures(at, 0, NULL, sigs, SL_OP_MAX_SIGNATURES);
  for (int i = 0; i < n; i++)
    if (sl_sbp_equal(sigs[i].out[0], s)) return true;
  return false;
}

sl_tensor sl__g_source(sl_graph *g, const char *opname, const sl__attrs *at,
                       const char *name, const sl_placement *placement,
                       const sl_nd_sbp *sbp) {
  if (!sl__g_usable(g, 0, NULL, opname)) return sl__g_poison(g, false);
  sl_placement *p =
      placement ? sl__g_place(g, placement) : g->default_placement;
  if (!p) return sl__g_fail_op(g, opname, "out of memory");
  sl_tensor t = sl__g_op(g, opname, 0, NULL, at, NULL);
  if (t.id < 0) return t;
  sl__value *v = g->values[t.id];
  sl__node *n = sl__g_node(g, v->producer);
  n->placement = p;
  v->placement = p;
  if (name) {
    sl_tensor r = sl_name(t, name);
    if (r.id < 0) return r;
  }
  if (sbp) {
    if (sl_nd_sbp_check(sbp, p, &v->meta.shape) != SL_OK) {
      sl__g_error_last(g, SL_EINVAL, "op", n->name, opname);
      return sl__g_poison(g, false);
    }
    for (int m = 0; m < sbp->ndim; m++)
      if (!sl__g_source_accepts(n->op, &n->attrs, sbp->sbp[m])) {
        char s[32];
        sl_sbp_print(sbp->sbp[m], s, sizeof s);
        sl__g_error(g, SL_EINVAL, "op", n->name, opname,
                    "it cannot produce SBP %s (mesh axis %d)", s, m);
        return sl__g_poison(g, false);
      }
    v->sbp = *sbp;
    v->sbp_fixed = true;
  }
  return t;
}

/* ---- tensors ----------------------------------------------------------- */

static const sl__value *tensor_value(sl_tensor t) {
  if (!t.graph || t.id < 0 || t.id >= t.graph->n_values) return NULL;
  return t.graph->values[t.id];
}

bool sl_tensor_ok(sl_tensor t) { return tensor_value(t) != NULL; }

sl_status sl_tensor_shape(sl_tensor t, sl_shape *out) {
  const sl__value *v = tensor_value(t);
  memset(out, 0, sizeof *out);
  if (!v) return sl__fail(SL_EINVAL, "shape of a poisoned tensor");
  *out = v->meta.shape;
  return SL_OK;
}

sl_dtype sl_tensor_dtype(sl_tensor t) {
  const sl__value *v = tensor_value(t);
  return v ? v->meta.dtype : SL_DTYPE_F32;
}

const char *sl_tensor_name(sl_tensor t) {
  const sl__value *v = tensor_value(t);
  return v ? t.graph->nodes[v->producer]->n.name : "";
}

/* ---- the IR accessors (graph_int.h) ------------------------------------ */

int32_t sl__graph_node_count(const sl_graph *g) { return g->n_nodes; }

const sl__node *sl__graph_node(const sl_graph *g, int32_t i) {
  return i >= 0 && i < g->n_nodes ? &g->nodes[i]->n : NULL;
}

int32_t sl__graph_value_count(const sl_graph *g) { return g->n_values; }

const sl__value *sl__graph_value(const sl_graph *g, int32_t v) {
  return v >= 0 && v < g->n_values ? g->values[v] : NULL;
}

int32_t sl__graph_find(const sl_graph *g, const char *name) {
  const sl__gnode *n = sl__g_find(g, name);
  return n ? n->index : -1;
}

const sl__node *sl__graph_find_kind(const sl_graph *g, const char *name,
                                    sl__node_kind kind) {
  const sl__gnode *gn = name ? sl__g_find(g, name) : NULL;
  return gn && gn->n.kind == kind ? &gn->n : NULL;
}

bool sl__graph_frozen(const sl_graph *g) { return g->frozen; }

void sl__g_release_nodes(sl_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    sl__gnode *n = g->nodes[i];
    sl_boxing_route_destroy(n->n.boxing);
    n->n.boxing = NULL;
    if (n->npy_id >= 0) sl__npy_release(n->npy_id);
    n->npy_id = -1;
  }
}
