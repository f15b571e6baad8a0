/* A compiled graph as bytes, so that a daemon rebuilds the same graph the
 * program compiled (same node indices, value ids, placements, nd-SBPs,
 * attributes, initializers) and lowers it to the same plan. The physical
 * plan alone does not carry what the actors need (op attributes, variable
 * initializers, boxing plans), hence this.
 *
 * The encoding is for processes of the same build: fixed-layout structs
 * (sl__meta, sl_nd_sbp, sl_init, attribute values) are written as their
 * bytes, behind a header with the format version and their sizes, so a
 * daemon of another build refuses the graph instead of misreading it.
 * Strings are length-prefixed; integers little-endian as the host writes
 * them (x86-64 and aarch64 both). Boxing plans are recreated from the
 * value's and the node's layouts, as compile made them. */
#include <stdlib.h>
#include <string.h>

#include "cpu/npy.h"
#include "graph_priv.h"

#define WIRE_MAGIC 0x52474c53u /* "SLGR" */
#define WIRE_VERSION 2u

typedef struct wbuf {
  uint8_t *p;
  size_t n, cap;
  bool oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n)
      cap *= 2;
    uint8_t *np = sl__realloc(b->p, cap);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void put_u32(wbuf *b, uint32_t v) { put(b, &v, sizeof v); }
static void put_i32(wbuf *b, int32_t v) { put(b, &v, sizeof v); }

static void put_str(wbuf *b, const char *s) {
  uint32_t n = s ? (uint32_t)strlen(s) : 0;
  put_u32(b, n);
  put(b, s ? s : "", n);
}

/* Structs with padding go field by field, so the bytes are the same for
 * equal graphs. */
static void put_meta(wbuf *b, const sl__meta *m) {
  put_i32(b, m->shape.ndim);
  put(b, m->shape.dims, sizeof m->shape.dims);
  put_i32(b, (int32_t)m->dtype);
}

static void put_init(wbuf *b, const sl_init *in) {
  put_i32(b, (int32_t)in->kind);
  put(b, &in->a, sizeof in->a);
  put(b, &in->b, sizeof in->b);
  put(b, &in->seed, sizeof in->seed);
}

static void put_place(wbuf *b, const sl_placement *p) {
  char text[1024] = "";
  if (p) sl_placement_print(p, text, sizeof text);
  put_str(b, text);
}

typedef struct rbuf {
  const uint8_t *p;
  size_t n, off;
  bool bad;
} rbuf;

static void get(rbuf *b, void *dst, size_t n) {
  if (b->bad || b->n - b->off < n) {
    b->bad = true;
    memset(dst, 0, n);
    return;
  }
  memcpy(dst, b->p + b->off, n);
  b->off += n;
}

static uint32_t get_u32(rbuf *b) {
  uint32_t v;
  get(b, &v, sizeof v);
  return v;
}
static int32_t get_i32(rbuf *b) {
  int32_t v;
  get(b, &v, sizeof v);
  return v;
}

static void get_meta(rbuf *b, sl__meta *m) {
  m->shape.ndim = get_i32(b);
  get(b, m->shape.dims, sizeof m->shape.dims);
  m->dtype = (sl_dtype)get_i32(b);
  if (m->shape.ndim < 0 || m->shape.ndim > SL_MAX_DIMS) b->bad = true;
}

static void get_init(rbuf *b, sl_init *in) {
  in->kind = (sl_init_kind)get_i32(b);
  get(b, &in->a, sizeof in->a);
  get(b, &in->b, sizeof in->b);
  get(b, &in->seed, sizeof in->seed);
}

/* A string copied into the arena (NULL when malformed or out of memory). */
static char *get_str(rbuf *b, sl_arena *a) {
  uint32_t n = get_u32(b);
  if (b->bad || b->n - b->off < n || n > (1u << 20)) {
    b->bad = true;
    return NULL;
  }
  char *s = sl__arena_alloc(a, (size_t)n + 1);
  if (!s) return NULL;
  memcpy(s, b->p + b->off, n);
  s[n] = '\0';
  b->off += n;
  return s;
}

sl_status sl__graph_pack(const sl_graph *g, uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  if (!g->frozen)
    return sl__fail(SL_ESTATE, "graph pack: the graph is not compiled");
  wbuf b = {0};
  put_u32(&b, WIRE_MAGIC);
  put_u32(&b, WIRE_VERSION);
  put_u32(&b, (uint32_t)sizeof(sl__meta));
  put_u32(&b, (uint32_t)sizeof(sl_nd_sbp));
  put_u32(&b, (uint32_t)sizeof(sl_init));
  put_u32(&b, (uint32_t)sizeof(sl__attr));
  put_i32(&b, g->n_nodes);
  put_i32(&b, g->n_values);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const sl__gnode *gn = g->nodes[i];
    const sl__node *n = &gn->n;
    /* A .npy source travels as its absolute path: the daemon opens the
     * same file (this machine, or a shared file system). */
    char npy[4096] = "";
    if (gn->npy_id >= 0) {
      sl_status st = sl__npy_path(gn->npy_id, npy, sizeof npy);
      if (st != SL_OK) {
        sl__free(b.p);
        return sl__fail_context(st, "graph pack: node '%s': ", n->name);
      }
    }
    put_str(&b, n->name);
    put_str(&b, npy);
    put_i32(&b, (int32_t)n->kind);
    put_str(&b, n->op ? n->op->name : "");
    put_i32(&b, n->attrs.n);
    for (int k = 0; k < n->attrs.n; k++) {
      sl__attr at = n->attrs.a[k];
      put_str(&b, at.name);
      at.name = NULL;
      put(&b, &at, sizeof at);
    }
    put_i32(&b, n->n_in);
    put_i32(&b, n->n_out);
    for (int k = 0; k < n->n_in; k++)
      put_i32(&b, n->in[k]);
    for (int k = 0; k < n->n_out; k++)
      put_i32(&b, n->out[k]);
    put_place(&b, n->placement);
    put(&b, n->in_sbp, sizeof n->in_sbp);
    put(&b, n->out_sbp, sizeof n->out_sbp);
    put_i32(&b, n->update);
    uint32_t flags = (n->backward ? 1u : 0u) | (n->optimizer ? 2u : 0u) |
                     (gn->trainable ? 4u : 0u);
    put_u32(&b, flags);
    put_init(&b, &gn->init);
  }
  for (int32_t v = 0; v < g->n_values; v++) {
    const sl__value *val = g->values[v];
    put_i32(&b, val->producer);
    put_i32(&b, val->index);
    put_meta(&b, &val->meta);
    put_place(&b, val->placement);
    put(&b, &val->sbp, sizeof val->sbp);
    put_u32(&b, val->sbp_fixed ? 1u : 0u);
  }
  if (b.oom) {
    sl__free(b.p);
    return SL_ENOMEM;
  }
  *buf = b.p;
  *len = b.n;
  return SL_OK;
}

static sl_status bad(const char *what) {
  return sl__fail(SL_EINVAL, "graph unpack: %s", what);
}

/* The graph's interned placement for text (NULL: malformed). */
static sl_placement *place_of(sl_graph *g, const char *text) {
  sl_placement *p = NULL;
  if (!text || sl_placement_parse(text, &p) != SL_OK) return NULL;
  sl_placement *in = sl__g_place(g, p);
  sl_placement_destroy(p);
  return in;
}

sl_status sl__graph_unpack(const uint8_t *buf, size_t len, sl_graph **out) {
  *out = NULL;
  rbuf b = {buf, len, 0, false};
  if (get_u32(&b) != WIRE_MAGIC) return bad("not a packed graph");
  if (get_u32(&b) != WIRE_VERSION) return bad("another format version");
  if (get_u32(&b) != sizeof(sl__meta) || get_u32(&b) != sizeof(sl_nd_sbp) ||
      get_u32(&b) != sizeof(sl_init) || get_u32(&b) != sizeof(sl__attr))
    return bad("packed by another build of sluice (struct sizes differ)");
  int32_t nn = get_i32(&b), nv = get_i32(&b);
  if (b.bad || nn < 0 || nv < 0 || nn > (1 << 24) || nv > (1 << 24))
    return bad("bad node or value count");
  sl_graph *g = NULL;
  sl_status st = sl_graph_create(&g);
  if (st != SL_OK) return st;
  g->nodes = sl__calloc((size_t)nn + 1, sizeof *g->nodes);
  g->values = sl__calloc((size_t)nv + 1, sizeof *g->values);
  if (!g->nodes || !g->values) {
    st = SL_ENOMEM;
    goto fail;
  }
  g->cap_nodes = nn + 1;
  g->cap_values = nv + 1;
  for (int32_t v = 0; v < nv; v++)
    if (!(g->values[v] = sl__arena_calloc(g->arena, 1, sizeof(sl__value)))) {
      st = SL_ENOMEM;
      goto fail;
    }
  g->n_values = nv;
  for (int32_t i = 0; i < nn; i++) {
    sl__gnode *gn = sl__arena_calloc(g->arena, 1, sizeof *gn);
    if (!gn) {
      st = SL_ENOMEM;
      goto fail;
    }
    g->nodes[i] = gn;
    g->n_nodes = i + 1;
    gn->index = i;
    gn->npy_id = -1;
    sl__node *n = &gn->n;
    n->name = get_str(&b, g->arena);
    const char *npy = get_str(&b, g->arena);
    n->kind = (sl__node_kind)get_i32(&b);
    const char *opname = get_str(&b, g->arena);
    if (b.bad || !n->name || !opname || n->kind < SL__NODE_OP ||
        n->kind > SL__NODE_FETCH) {
      st = bad("malformed node");
      goto fail;
    }
    if (n->kind == SL__NODE_OP && !(n->op = sl__op_find(opname))) {
      st = sl__fail(SL_EINVAL, "graph unpack: node '%s': unknown op '%s'",
                    n->name, opname);
      goto fail;
    }
    n->attrs.n = get_i32(&b);
    if (n->attrs.n < 0 || n->attrs.n > SL_OP_MAX_ATTRS) {
      st = bad("bad attribute count");
      goto fail;
    }
    for (int k = 0; k < n->attrs.n; k++) {
      const char *an = get_str(&b, g->arena);
      get(&b, &n->attrs.a[k], sizeof n->attrs.a[k]);
      n->attrs.a[k].name = an;
    }
    if (npy && npy[0]) { /* this process's id of the same file */
      if (b.bad || !n->op || strcmp(n->op->name, "npy_read")) {
        st = bad("a .npy path on a node that is not npy_read");
        goto fail;
      }
      st = sl__npy_open(npy, &gn->npy_id);
      if (st == SL_OK)
        st = sl__attrs_set_int(&n->attrs, "file", gn->npy_id);
      if (st != SL_OK) {
        sl__fail_context(st, "graph unpack: node '%s': ", n->name);
        goto fail;
      }
    }
    n->n_in = get_i32(&b);
    n->n_out = get_i32(&b);
    if (n->n_in < 0 || n->n_in > SL_OP_MAX_INPUTS || n->n_out < 0 ||
        n->n_out > SL_OP_MAX_OUTPUTS) {
      st = bad("bad input or output count");
      goto fail;
    }
    for (int k = 0; k < n->n_in; k++)
      n->in[k] = get_i32(&b);
    for (int k = 0; k < n->n_out; k++)
      n->out[k] = get_i32(&b);
    char *ptext = get_str(&b, g->arena);
    n->placement = place_of(g, ptext);
    get(&b, n->in_sbp, sizeof n->in_sbp);
    get(&b, n->out_sbp, sizeof n->out_sbp);
    n->update = get_i32(&b);
    uint32_t flags = get_u32(&b);
    n->backward = flags & 1u;
    n->optimizer = (flags & 2u) != 0;
    gn->trainable = (flags & 4u) != 0;
    get_init(&b, &gn->init);
    if (b.bad || !n->placement) {
      st = bad("malformed node");
      goto fail;
    }
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] < 0 || n->in[k] >= nv) {
        st = bad("an input out of range");
        goto fail;
      }
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] < 0 || n->out[k] >= nv) {
        st = bad("an output out of range");
        goto fail;
      }
    if (n->update >= nv || n->update < -1) {
      st = bad("an update out of range");
      goto fail;
    }
  }
  for (int32_t v = 0; v < nv; v++) {
    sl__value *val = g->values[v];
    val->producer = get_i32(&b);
    val->index = get_i32(&b);
    get_meta(&b, &val->meta);
    char *ptext = get_str(&b, g->arena);
    val->placement = place_of(g, ptext);
    get(&b, &val->sbp, sizeof val->sbp);
    val->sbp_fixed = get_u32(&b) != 0;
    if (b.bad || !val->placement || val->producer < 0 ||
        val->producer >= nn) {
      st = bad("malformed value");
      goto fail;
    }
  }
  if (b.off != b.n) {
    st = bad("trailing bytes");
    goto fail;
  }
  SL_CHECK_GOTO(sl__graph_rehash(g), st, fail);
  /* Boxing plans, as compile made them: the input value's layout to the
   * output's. */
  for (int32_t i = 0; i < nn; i++) {
    sl__node *n = &g->nodes[i]->n;
    if (n->kind != SL__NODE_BOXING) continue;
    if (n->n_in != 1 || n->n_out != 1) {
      st = bad("a boxing node without one input and one output");
      goto fail;
    }
    const sl__value *vi = g->values[n->in[0]], *vo = g->values[n->out[0]];
    st = sl_boxing_plan_create(&vi->meta.shape, vi->meta.dtype, vi->placement,
                               &vi->sbp, vo->placement, &vo->sbp, NULL,
                               &n->boxing);
    if (st != SL_OK) {
      sl__fail_context(st, "graph unpack: boxing '%s': ", n->name);
      goto fail;
    }
  }
  g->frozen = true;
  g->minimized = true;
  *out = g;
  return SL_OK;
fail:
  if (st == SL_OK) st = SL_EINVAL;
  sl_graph_destroy(g);
  return st;
}
