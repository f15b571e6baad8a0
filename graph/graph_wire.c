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
 * value's and the node's layouts, as compile made them. Files that
 * variables start from (sl_variable_load) go by path: each daemon opens
 * them itself. */
#include <stdlib.h>
#include <string.h>

#include "cpu/npy.h"
#include "graph_priv.h"

#define WIRE_MAGIC 0x52474c53u /* "SLGR" */
#define WIRE_VERSION 3u

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
  char text[1024] = "", *s = text;
  int n = p ? sl_placement_print(p, text, sizeof text) : 0;
  /* A long device list, whole: cut short it would still parse, as
   * another placement. */
  if (n >= (int)sizeof text) {
    if (!(s = sl__malloc((size_t)n + 1))) {
      b->oom = true;
      return;
    }
    sl_placement_print(p, s, (size_t)n + 1);
  }
  put_str(b, s);
  if (s != text) sl__free(s);
}

/* The boxing planner adds up byte counts in int64 over the steps and up to
 * SL_MAX_PLACEMENT_RANKS (2^16) ranks each side: 2^40 bytes per tensor
 * keeps those sums far from overflow. A logical tensor of a terabyte is
 * beyond what the runtime would be asked to move anyway. */
#define MAX_VALUE_BYTES ((int64_t)1 << 40)

/* The fewest bytes a node and a value take (empty strings, no attributes,
 * inputs or outputs): the fixed-size fields pack writes for each. */
#define NODE_MIN_BYTES                                                         \
  (15 * sizeof(uint32_t) +                                                     \
   (SL_OP_MAX_INPUTS + SL_OP_MAX_OUTPUTS) * sizeof(sl_nd_sbp) +                \
   2 * sizeof(double) + sizeof(uint64_t))
#define VALUE_MIN_BYTES                                                        \
  (6 * sizeof(uint32_t) + SL_MAX_DIMS * sizeof(int64_t) + sizeof(sl_nd_sbp))

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
  put_i32(&b, g->micro_batches);
  put_i32(&b, (int32_t)g->schedule);
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
      /* npy_read's file id is this process's; unpack opens the path and
       * sets its own. */
      if (gn->npy_id >= 0 && strcmp(at.name, "file") == 0) at.i = -1;
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
    put_i32(&b, n->micro);
    put_i32(&b, n->micro_of);
    put_i32(&b, n->stage);
    put_i32(&b, n->phase);
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
  /* The variables that start from a file (sl_variable_load), when there
   * are any: a count, then each one's node, path and tensor. Each daemon
   * reads its own ranks' boxes of it. */
  int32_t n_load = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    n_load += g->nodes[i]->load_path != NULL;
  if (n_load) put_i32(&b, n_load);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (!g->nodes[i]->load_path) continue;
    put_i32(&b, i);
    put_str(&b, g->nodes[i]->load_path);
    put_str(&b, g->nodes[i]->load_tensor);
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

/* What compile promises of every value, and what lowering and boxing
 * compute with (element and byte counts) without checking again. */
static sl_status check_value(const sl__value *val) {
  sl_shape shape;
  SL_CHECK(sl_shape_make(val->meta.shape.ndim, val->meta.shape.dims, &shape));
  size_t esize = sl_dtype_size(val->meta.dtype);
  if (!esize)
    return sl__fail(SL_EINVAL, "invalid dtype %d", (int)val->meta.dtype);
  int64_t bytes;
  if (__builtin_mul_overflow(sl_shape_numel(&shape), (int64_t)esize, &bytes) ||
      bytes > MAX_VALUE_BYTES)
    return sl__fail(SL_EINVAL,
                    "more than 2^40 bytes (the most a packed graph's tensor "
                    "may hold)");
  return sl_nd_sbp_check(&val->sbp, val->placement, &shape);
}

/* What compile promises of the nodes, which lowering and the kernels rely
 * on: each kind's inputs and outputs, inputs produced by earlier nodes,
 * every value the output of exactly the node and slot it names, op outputs
 * what the op infers from its inputs and laid out as one of its SBP
 * signatures, and a variable's update of the variable's meta and layout. */
static sl_status check_node(const sl_graph *g, int32_t i) {
  const sl__gnode *gn = g->nodes[i];
  const sl__node *n = &gn->n;
  int min_in = 0, max_in = 0, n_out = 1;
  switch (n->kind) {
  case SL__NODE_OP:
    min_in = n->op->min_in;
    max_in = n->op->max_in;
    n_out = n->op->n_out;
    break;
  case SL__NODE_INPUT:
  case SL__NODE_VARIABLE: break;
  case SL__NODE_BOXING: min_in = max_in = 1; break;
  case SL__NODE_FETCH:
    min_in = max_in = 1;
    n_out = 0;
    break;
  }
  if (n->n_in < min_in || n->n_in > max_in || n->n_out != n_out)
    return sl__fail(SL_EINVAL,
                    "graph unpack: node '%s': %d inputs and %d outputs for "
                    "a %s node",
                    n->name, n->n_in, n->n_out,
                    n->op ? n->op->name : sl__graph_kind_name(n->kind));
  sl__meta in[SL_OP_MAX_INPUTS], out[SL_OP_MAX_OUTPUTS];
  for (int k = 0; k < n->n_in; k++) {
    const sl__value *v = g->values[n->in[k]];
    if (v->producer >= i)
      return sl__fail(SL_EINVAL,
                      "graph unpack: node '%s': input %d is produced by a "
                      "later node",
                      n->name, k);
    in[k] = v->meta;
  }
  for (int k = 0; k < n->n_out; k++) {
    const sl__value *v = g->values[n->out[k]];
    if (v->producer != i || v->index != k)
      return sl__fail(SL_EINVAL,
                      "graph unpack: node '%s': output %d is value %d, which "
                      "names output %d of node %d",
                      n->name, k, (int)n->out[k], (int)v->index,
                      (int)v->producer);
    if (n->kind != SL__NODE_BOXING &&
        !sl_placement_equal(v->placement, n->placement))
      return sl__fail(SL_EINVAL,
                      "graph unpack: node '%s': output %d is placed elsewhere "
                      "than the node",
                      n->name, k);
  }
  if (n->kind == SL__NODE_OP) {
    sl_status st = n->op->infer(&n->attrs, n->n_in, in, out);
    if (st != SL_OK)
      return sl__fail_context(st, "graph unpack: node '%s' (%s): ", n->name,
                              n->op->name);
    for (int k = 0; k < n->n_out; k++) {
      const sl__meta *m = &g->values[n->out[k]]->meta;
      if (!sl_shape_equal(&m->shape, &out[k].shape) || m->dtype != out[k].dtype)
        return sl__fail(SL_EINVAL,
                        "graph unpack: node '%s' (%s): output %d's shape or "
                        "dtype is not what the op gives",
                        n->name, n->op->name, k);
    }
    st = sl__g_check_op_layout(g, n);
    if (st != SL_OK) return sl__fail_context(st, "graph unpack: ");
  }
  if (n->kind == SL__NODE_VARIABLE) {
    const sl__value *var = g->values[n->out[0]];
    sl_status st = sl__g_init_check(&gn->init, var->meta.dtype);
    if (st != SL_OK)
      return sl__fail_context(st, "graph unpack: variable '%s': ", n->name);
    const sl__value *u = n->update >= 0 ? g->values[n->update] : NULL;
    if (u && (!sl_shape_equal(&u->meta.shape, &var->meta.shape) ||
              u->meta.dtype != var->meta.dtype ||
              !sl_placement_equal(u->placement, var->placement) ||
              !sl_nd_sbp_equal(&u->sbp, &var->sbp)))
      return sl__fail(SL_EINVAL,
                      "graph unpack: variable '%s': its update has another "
                      "shape, dtype or layout",
                      n->name);
  }
  return SL_OK;
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
  int32_t micro = get_i32(&b), sched = get_i32(&b);
  if (b.bad || nn < 0 || nv < 0 || nn > (1 << 24) || nv > (1 << 24))
    return bad("bad node or value count");
  if (micro < 1 || micro > nn + 1 || sched < 0 || sched >= SL__SCHEDULE_COUNT)
    return bad("bad micro-batches or schedule");
  /* Every node and value is allocated before it is read: counts the bytes
   * cannot hold would let a few bytes claim gigabytes. */
  if ((uint64_t)nn * NODE_MIN_BYTES + (uint64_t)nv * VALUE_MIN_BYTES >
      b.n - b.off)
    return sl__fail(SL_EINVAL,
                    "graph unpack: %d nodes and %d values do not fit in the "
                    "%zu bytes that follow",
                    (int)nn, (int)nv, b.n - b.off);
  sl_graph *g = NULL;
  sl_status st = sl_graph_create(&g);
  if (st != SL_OK) return st;
  g->nodes = sl__calloc((size_t)nn + 1, sizeof *g->nodes);
  g->values = sl__calloc((size_t)nv + 1, sizeof *g->values);
  if (!g->nodes || !g->values) {
    st = SL_ENOMEM;
    goto fail;
  }
  g->micro_batches = micro;
  g->schedule = (sl__schedule)sched;
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
      sl__attr *at = &n->attrs.a[k];
      const char *an = get_str(&b, g->arena);
      get(&b, at, sizeof *at);
      at->name = an;
      if (b.bad || !an) {
        st = bad("malformed node");
        goto fail;
      }
      /* Ops read an INTS attribute's n values out of ints[]. */
      if ((at->kind != SL__ATTR_INT && at->kind != SL__ATTR_FLOAT &&
           at->kind != SL__ATTR_INTS) ||
          (at->kind == SL__ATTR_INTS && (at->n < 0 || at->n > SL_MAX_DIMS))) {
        st = sl__fail(SL_EINVAL,
                      "graph unpack: node '%s': attribute '%s' has kind %d "
                      "and %d values",
                      n->name, an, (int)at->kind, at->n);
        goto fail;
      }
    }
    bool npy_read = n->op && strcmp(n->op->name, "npy_read") == 0;
    if (!b.bad && npy_read && !(npy && npy[0])) {
      /* Its file id would name whatever this process opened under it. */
      st = sl__fail(SL_EINVAL, "graph unpack: npy_read '%s' has no .npy path",
                    n->name);
      goto fail;
    }
    if (npy && npy[0]) { /* this process's id of the same file */
      if (b.bad || !npy_read) {
        st = bad("a .npy path on a node that is not npy_read");
        goto fail;
      }
      st = sl__npy_open(npy, &gn->npy_id);
      if (st == SL_OK) st = sl__attrs_set_int(&n->attrs, "file", gn->npy_id);
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
    n->micro = get_i32(&b);
    n->micro_of = get_i32(&b);
    n->stage = get_i32(&b);
    n->phase = get_i32(&b);
    get_init(&b, &gn->init);
    if (n->micro < -1 || n->micro >= micro || n->micro_of < -1 ||
        n->micro_of >= nn || n->stage < -1 || n->phase < SL__PHASE_F ||
        n->phase > SL__PHASE_W) {
      st = bad("a node's micro-batch, stage or pass out of range");
      goto fail;
    }
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
    if (b.bad || !val->placement || val->producer < 0 || val->producer >= nn) {
      st = bad("malformed value");
      goto fail;
    }
    if ((st = check_value(val)) != SL_OK) {
      sl__fail_context(st, "graph unpack: value %d: ", (int)v);
      goto fail;
    }
  }
  if (b.off != b.n) {
    /* One encoding per graph: no table when no variable loads a file, and
     * each one loading once, in node order. */
    int32_t n_load = get_i32(&b), last = -1;
    if (b.bad || n_load < 1 || n_load > nn) {
      st = bad("trailing bytes");
      goto fail;
    }
    for (int32_t k = 0; k < n_load; k++) {
      int32_t i = get_i32(&b);
      const char *path = get_str(&b, g->arena);
      const char *tensor = get_str(&b, g->arena);
      if (b.bad || i <= last || i >= nn || !path || !path[0] || !tensor ||
          !tensor[0] || g->nodes[i]->n.kind != SL__NODE_VARIABLE) {
        st = bad("a malformed file to load");
        goto fail;
      }
      g->nodes[i]->load_path = path;
      g->nodes[i]->load_tensor = tensor;
      last = i;
    }
    if (b.off != b.n) {
      st = bad("trailing bytes");
      goto fail;
    }
  }
  for (int32_t i = 0; i < nn; i++)
    SL_CHECK_GOTO(check_node(g, i), st, fail);
  for (int32_t v = 0; v < nv; v++) {
    const sl__value *val = g->values[v];
    const sl__node *p = &g->nodes[val->producer]->n;
    if (val->index < 0 || val->index >= p->n_out || p->out[val->index] != v) {
      st = sl__fail(SL_EINVAL,
                    "graph unpack: value %d is not output %d of node '%s'",
                    (int)v, (int)val->index, p->name);
      goto fail;
    }
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
