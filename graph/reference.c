/* Reference runs (<sluice/reference.h>): the sharded executor, then the
 * public API over it and the logical interpreter (interpret.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/boxing.h>
#include <sluice/reference.h>

#include "graph_int.h"
#include "sbp_int.h"

/* ---- the sharded executor --------------------------------------------------
 * Every value has one buffer per rank of its placement holding that rank's
 * local shard (sl_local_slice of its nd-SBP); op nodes call their CPU kernel
 * once per rank; boxing nodes run their plan with sl_boxing_execute, which
 * combines partial members in member order, as the session's collectives
 * do; variables are initialised per rank (sl__graph_variable_init); fetches
 * are converted to the logical tensor by a plan to all-B, or, partial ones,
 * reduced in the session's order. */

typedef struct sl__shard sl__shard;

/* Called after each kernel or boxing run: node, rank (-1 for a boxing node,
 * which runs all ranks at once), start and end times (sl__now_ns). */
typedef void (*sl__shard_hook)(void *ctx, const sl__node *n, int rank,
                               uint64_t t0, uint64_t t1);

typedef struct sl__shard_opts {
  bool check_replicas;
  sl__shard_hook hook; /* may be NULL */
  void *hook_ctx;
  /* Optimizer updates into a buffer of their own, then swapped with the
   * variable's, instead of in place (to measure what in place saves). */
  bool out_of_place_updates;
} sl__shard_opts;

/* One value's shards: a buffer per rank of its placement. */
typedef struct shards {
  int n;      /* ranks */
  void **buf; /* n buffers, each bytes[r] + 64 */
  size_t *bytes;
  sl_slice *slice; /* n local slices */
  bool partial;    /* some mesh axis is partial */
  bool borrowed;   /* buf are another value's buffers (in-place update) */
} shards;

/* A fetch's conversion to the logical tensor (NULL plan: already all-B),
 * taken at the end of every step into `logical`. */
typedef struct fetch {
  int32_t node;
  sl_boxing_route *plan;
  void **dst;    /* plan's target buffers (whole tensor each) */
  void *logical; /* dst[0], or a copy of rank 0's shard without a plan */
  size_t bytes;
  bool of_variable; /* fetches a variable: taken after the update */
  /* A partial value is reduced as the session reduces it
   * (sl__nd_sbp_fetch_rank): the ranks at coordinate 0 of every broadcast mesh
   * axis, in rank order, from the identity, whatever order the boxing planner's
   * steps take. */
  bool partial;
  sl_reduce_op reduce;
} fetch;

struct sl__shard {
  sl_graph *g;
  sl__shard_opts opts;
  int32_t nv;
  shards *v;  /* per value */
  void **fed; /* per value: the logical input, or NULL */
  int nfetch;
  fetch *fetches;
  int64_t step;
  bool ran;
};

static bool nd_partial(const sl_nd_sbp *s) {
  for (int i = 0; i < s->ndim; i++)
    if (s->sbp[i].kind == SL_SBP_PARTIAL) return true;
  return false;
}

static size_t slice_bytes(const sl_slice *s, sl_dtype dt) {
  return (size_t)sl_slice_numel(s) * sl_dtype_size(dt);
}

/* Copies the box `s` of a row-major tensor of shape `gs` (src) into a
 * contiguous buffer (dst). */
static void copy_box(void *dst, const void *src, const sl_shape *gs,
                     const sl_slice *s, size_t es) {
  int nd = gs->ndim;
  if (nd == 0) {
    memcpy(dst, src, es);
    return;
  }
  if (sl_slice_numel(s) == 0) return;
  int64_t strides[SL_MAX_DIMS];
  sl_shape_strides(gs, strides);
  int64_t idx[SL_MAX_DIMS] = {0};
  size_t row = (size_t)s->extent[nd - 1] * es;
  char *d = dst;
  for (;;) {
    int64_t off = 0;
    for (int k = 0; k < nd; k++)
      off += (s->start[k] + idx[k]) * strides[k];
    memcpy(d, (const char *)src + (size_t)off * es, row);
    d += row;
    int k = nd - 2;
    while (k >= 0 && ++idx[k] == s->extent[k])
      idx[k--] = 0;
    if (k < 0) break;
  }
}

static void shards_free(shards *s) {
  for (int r = 0; s->buf && r < s->n && !s->borrowed; r++)
    free(s->buf[r]);
  free(s->buf);
  free(s->bytes);
  free(s->slice);
  memset(s, 0, sizeof *s);
}

static sl_status shards_alloc(shards *s, const sl__value *v) {
  const sl_placement *p = v->placement;
  if (!p)
    return sl__fail(SL_EINTERNAL, "value of node %d has no placement",
                    (int)v->producer);
  s->n = sl_placement_size(p);
  s->partial = nd_partial(&v->sbp);
  s->buf = calloc((size_t)s->n, sizeof *s->buf);
  s->bytes = calloc((size_t)s->n, sizeof *s->bytes);
  s->slice = calloc((size_t)s->n, sizeof *s->slice);
  if (!s->buf || !s->bytes || !s->slice)
    return sl__fail(SL_ENOMEM, "sharded executor: out of memory");
  for (int r = 0; r < s->n; r++) {
    SL_CHECK(sl_local_slice(&v->meta.shape, p, &v->sbp, r, &s->slice[r]));
    s->bytes[r] = slice_bytes(&s->slice[r], v->meta.dtype);
    /* 64 spare bytes: kernels may use aligned vector loads past the end. */
    size_t alloc = (s->bytes[r] + 64 + 63) / 64 * 64;
    if (!(s->buf[r] = aligned_alloc(64, alloc)))
      return sl__fail(SL_ENOMEM, "sharded executor: %zu bytes", alloc);
    memset(s->buf[r], 0, alloc);
  }
  return SL_OK;
}

static void sl__shard_destroy(sl__shard *x) {
  if (!x) return;
  for (int32_t i = 0; x->v && i < x->nv; i++)
    shards_free(&x->v[i]);
  for (int32_t i = 0; x->fed && i < x->nv; i++)
    free(x->fed[i]);
  for (int f = 0; x->fetches && f < x->nfetch; f++) {
    fetch *ft = &x->fetches[f];
    if (ft->plan) {
      const sl__value *v =
          sl__graph_value(x->g, sl__graph_node(x->g, ft->node)->in[0]);
      for (int r = 0; r < sl_placement_size(v->placement); r++)
        free(ft->dst[r]);
    } else {
      free(ft->logical);
    }
    free(ft->dst);
    sl_boxing_route_destroy(ft->plan);
  }
  free(x->fetches);
  free(x->v);
  free(x->fed);
  free(x);
}

static sl_status fetch_prepare(sl__shard *x, fetch *ft) {
  const sl__value *v =
      sl__graph_value(x->g, sl__graph_node(x->g, ft->node)->in[0]);
  sl_nd_sbp all_b = v->sbp;
  bool already = true;
  for (int i = 0; i < all_b.ndim; i++) {
    already = already && all_b.sbp[i].kind == SL_SBP_BROADCAST;
    all_b.sbp[i] = sl_sbp_broadcast();
  }
  ft->bytes =
      (size_t)sl_shape_numel(&v->meta.shape) * sl_dtype_size(v->meta.dtype);
  ft->of_variable =
      sl__graph_node(x->g, v->producer)->kind == SL__NODE_VARIABLE;
  ft->partial = sl__nd_sbp_partial_op(&v->sbp, &ft->reduce);
  if (already || ft->partial) {
    if (!(ft->logical = calloc(1, ft->bytes + 64)))
      return sl__fail(SL_ENOMEM, "sharded executor: out of memory");
    return SL_OK;
  }
  SL_CHECK(sl_boxing_route_create(&v->meta.shape, v->meta.dtype, v->placement,
                                  &v->sbp, v->placement, &all_b, NULL,
                                  &ft->plan));
  int n = sl_placement_size(v->placement);
  if (!(ft->dst = calloc((size_t)n, sizeof *ft->dst)))
    return sl__fail(SL_ENOMEM, "sharded executor: out of memory");
  for (int r = 0; r < n; r++)
    if (!(ft->dst[r] = calloc(1, ft->bytes + 64)))
      return sl__fail(SL_ENOMEM, "sharded executor: out of memory");
  ft->logical = ft->dst[0];
  return SL_OK;
}

/* Which input output j of an optimizer update may overwrite (its kernel
 * reads every chunk before writing it, kernels/cpu/optim.c), or -1. */
static int inplace_input(const sl__node *p, int j) {
  if (p->kind != SL__NODE_OP) return -1;
  if (strcmp(p->op->name, "sgd_update") == 0)
    return j == 0 ? 0 : j == 1 ? 2 : -1;
  if (strcmp(p->op->name, "adam_update") == 0)
    return j == 0 ? 0 : j <= 2 ? j + 1 : -1;
  return -1;
}

/* Updates write into their variable's buffers where the variable's last
 * reader of the step is its update (fetches, taken after the update, aside):
 * the update then needs no output buffer of its own, and no write-allocate
 * traffic through memory for one. */
static sl_status alias_updates(sl__shard *x) {
  const sl_graph *g = x->g;
  int32_t nn = sl__graph_node_count(g);
  int32_t *last = malloc(((size_t)x->nv + 1) * sizeof *last);
  if (!last) return sl__fail(SL_ENOMEM, "sharded executor: out of memory");
  for (int32_t v = 0; v < x->nv; v++)
    last[v] = -1;
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind == SL__NODE_FETCH) continue;
    for (int k = 0; k < n->n_in; k++)
      last[n->in[k]] = i;
  }
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind != SL__NODE_VARIABLE || n->update < 0) continue;
    const sl__value *u = sl__graph_value(g, n->update);
    const sl__node *p = sl__graph_node(g, u->producer);
    int k = inplace_input(p, u->index);
    if (k < 0 || p->in[k] != n->out[0] || last[n->out[0]] != u->producer)
      continue;
    shards *vs = &x->v[n->out[0]], *us = &x->v[n->update];
    bool same = vs->n == us->n && !us->borrowed;
    for (int r = 0; same && r < vs->n; r++)
      same = vs->bytes[r] == us->bytes[r];
    if (!same) continue;
    for (int r = 0; r < us->n; r++) {
      free(us->buf[r]);
      us->buf[r] = vs->buf[r];
    }
    us->borrowed = true;
  }
  free(last);
  return SL_OK;
}

static sl_status sl__shard_create(sl_graph *g, const sl__shard_opts *opts,
                                  sl__shard **out) {
  *out = NULL;
  SL_CHECK(sl__graph_compile(g));
  sl__shard *x = calloc(1, sizeof *x);
  if (!x) return sl__fail(SL_ENOMEM, "sharded executor: out of memory");
  sl_status st = SL_OK;
  x->g = g;
  if (opts) x->opts = *opts;
  x->nv = sl__graph_value_count(g);
  x->v = calloc((size_t)x->nv + 1, sizeof *x->v);
  x->fed = calloc((size_t)x->nv + 1, sizeof *x->fed);
  if (!x->v || !x->fed) {
    st = sl__fail(SL_ENOMEM, "sharded executor: out of memory");
    goto fail;
  }
  for (int32_t i = 0; i < x->nv; i++)
    SL_CHECK_GOTO(shards_alloc(&x->v[i], sl__graph_value(g, i)), st, fail);
  if (!x->opts.out_of_place_updates) SL_CHECK_GOTO(alias_updates(x), st, fail);
  int32_t nn = sl__graph_node_count(g);
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind == SL__NODE_FETCH) x->nfetch++;
    if (n->kind != SL__NODE_VARIABLE) continue;
    shards *s = &x->v[n->out[0]];
    for (int r = 0; r < s->n; r++) {
      st = sl__graph_variable_init(g, i, r, s->buf[r]);
      if (st != SL_OK) goto fail;
    }
  }
  x->fetches = calloc((size_t)x->nfetch + 1, sizeof *x->fetches);
  if (!x->fetches) {
    st = sl__fail(SL_ENOMEM, "sharded executor: out of memory");
    goto fail;
  }
  for (int32_t i = 0, f = 0; i < nn; i++)
    if (sl__graph_node(g, i)->kind == SL__NODE_FETCH) {
      x->fetches[f].node = i;
      SL_CHECK_GOTO(fetch_prepare(x, &x->fetches[f]), st, fail);
      f++;
    }
  *out = x;
  return SL_OK;
fail:
  sl__shard_destroy(x);
  return st;
}

static size_t logical_bytes(const sl__value *v) {
  return (size_t)sl_shape_numel(&v->meta.shape) * sl_dtype_size(v->meta.dtype);
}

static sl_status sl__shard_feed(sl__shard *x, const char *name,
                                const void *data, size_t bytes) {
  const sl__node *n = sl__graph_find_kind(x->g, name, SL__NODE_INPUT);
  if (!n)
    return sl__fail(SL_ENOTFOUND, "feed: the graph has no input '%s'",
                    name ? name : "(null)");
  const sl__value *v = sl__graph_value(x->g, n->out[0]);
  size_t want = logical_bytes(v);
  if (bytes != want)
    return sl__fail(SL_EINVAL,
                    "feed of input '%s': %zu bytes, the input needs %zu", name,
                    bytes, want);
  void **dst = &x->fed[n->out[0]];
  if (!*dst && !(*dst = malloc(want + 1)))
    return sl__fail(SL_ENOMEM, "feed of input '%s': out of memory", name);
  if (bytes) memcpy(*dst, data, bytes);
  return SL_OK;
}

/* Rank r's view of value v: its local meta, slice, global shape and
 * whether it is partial. */
static void shard_view(const sl__shard *x, int32_t v, int r, sl__meta *meta,
                       sl_slice *slice, sl_shape *global, bool *partial) {
  const sl__value *val = sl__graph_value(x->g, v);
  const shards *s = &x->v[v];
  meta->dtype = val->meta.dtype;
  meta->shape = val->meta.shape;
  for (int d = 0; d < val->meta.shape.ndim; d++)
    meta->shape.dims[d] = s->slice[r].extent[d];
  *slice = s->slice[r];
  *global = val->meta.shape;
  *partial = s->partial;
}

static sl_status run_op(sl__shard *x, const sl__node *n) {
  for (int r = 0; r < sl_placement_size(n->placement); r++) {
    sl__kernel_ctx k;
    memset(&k, 0, sizeof k);
    k.attrs = &n->attrs;
    k.n_in = n->n_in;
    k.n_out = n->n_out;
    k.step = x->step;
    for (int i = 0; i < n->n_in; i++) {
      k.in[i] = x->v[n->in[i]].buf[r];
      shard_view(x, n->in[i], r, &k.in_meta[i], &k.in_slice[i], &k.in_global[i],
                 &k.in_partial[i]);
    }
    for (int j = 0; j < n->n_out; j++) {
      k.out[j] = x->v[n->out[j]].buf[r];
      shard_view(x, n->out[j], r, &k.out_meta[j], &k.out_slice[j],
                 &k.out_global[j], &k.out_partial[j]);
    }
    sl_clear_error();
    uint64_t t0 = sl__now_ns();
    sl_status st = sl__op_run_cpu(n->op, &k);
    if (x->opts.hook) x->opts.hook(x->opts.hook_ctx, n, r, t0, sl__now_ns());
    if (st != SL_OK)
      return sl__fail_context(st, "op '%s' (%s) on rank %d: ", n->name,
                              n->op->name, r);
  }
  return SL_OK;
}

static sl_status run_boxing(sl__shard *x, const sl__node *n) {
  uint64_t t0 = sl__now_ns();
  sl_status st = sl_boxing_execute(
      n->boxing, (const void *const *)x->v[n->in[0]].buf, x->v[n->out[0]].buf);
  if (x->opts.hook) x->opts.hook(x->opts.hook_ctx, n, -1, t0, sl__now_ns());
  if (st != SL_OK) return sl__fail_context(st, "boxing '%s': ", n->name);
  return SL_OK;
}

static bool same_slice(const sl_slice *a, const sl_slice *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->start[d] != b->start[d] || a->extent[d] != b->extent[d])
      return false;
  return true;
}

/* Ranks holding the same slice of a non-partial value hold the same bytes. */
static sl_status check_replicas(sl__shard *x, const sl__node *n) {
  for (int j = 0; j < n->n_out; j++) {
    const shards *s = &x->v[n->out[j]];
    if (s->partial) continue;
    for (int r = 1; r < s->n; r++)
      for (int q = 0; q < r; q++) {
        if (!same_slice(&s->slice[q], &s->slice[r])) continue;
        if (memcmp(s->buf[q], s->buf[r], s->bytes[r]) == 0) break;
        const sl__value *v = sl__graph_value(x->g, n->out[j]);
        int64_t count = (int64_t)(s->bytes[r] / sl_dtype_size(v->meta.dtype));
        int64_t i = 0;
        while (i < count && sl_load_element(v->meta.dtype, s->buf[q], i) ==
                                sl_load_element(v->meta.dtype, s->buf[r], i))
          i++;
        return sl__fail(
            SL_EMISMATCH,
            "node '%s' output %d, step %lld: ranks %d and %d hold "
            "the same slice but differ at element %lld (%.9g vs "
            "%.9g)",
            n->name, j, (long long)x->step, q, r, (long long)i,
            i < count ? sl_load_element(v->meta.dtype, s->buf[q], i) : 0.0,
            i < count ? sl_load_element(v->meta.dtype, s->buf[r], i) : 0.0);
      }
  }
  return SL_OK;
}

/* The logical value of partial value v into ft->logical (see fetch). */
static void reduce_fetch(sl__shard *x, fetch *ft, int32_t v) {
  const sl__value *val = sl__graph_value(x->g, v);
  const shards *sh = &x->v[v];
  int nd = val->meta.shape.ndim;
  sl__elem_fill_identity(val->meta.dtype, ft->reduce, ft->logical,
                         sl_shape_numel(&val->meta.shape));
  int64_t zero[SL_MAX_DIMS] = {0};
  for (int r = 0; r < sh->n; r++)
    if (sl__nd_sbp_fetch_rank(val->placement, &val->sbp, r))
      sl__box_move(val->meta.dtype, nd, ft->logical, val->meta.shape.dims,
                   sh->slice[r].start, sh->buf[r], sh->slice[r].extent, zero,
                   sh->slice[r].extent, true, ft->reduce);
}

/* Takes the logical value of every fetch of a variable (of_variable) or of
 * every other fetch. */
static sl_status take_fetches(sl__shard *x, bool of_variable) {
  for (int f = 0; f < x->nfetch; f++) {
    fetch *ft = &x->fetches[f];
    if (ft->of_variable != of_variable) continue;
    const sl__node *n = sl__graph_node(x->g, ft->node);
    if (ft->partial) {
      reduce_fetch(x, ft, n->in[0]);
      continue;
    }
    if (!ft->plan) {
      if (ft->bytes) memcpy(ft->logical, x->v[n->in[0]].buf[0], ft->bytes);
      continue;
    }
    sl_status st = sl_boxing_execute(
        ft->plan, (const void *const *)x->v[n->in[0]].buf, ft->dst);
    if (st != SL_OK) return sl__fail_context(st, "fetch '%s': ", n->name);
  }
  return SL_OK;
}

static sl_status sl__shard_step(sl__shard *x) {
  const sl_graph *g = x->g;
  int32_t nn = sl__graph_node_count(g);
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *n = sl__graph_node(g, i);
    switch (n->kind) {
    case SL__NODE_INPUT: {
      const void *src = x->fed[n->out[0]];
      if (!src) return sl__fail(SL_ESTATE, "input '%s' was never fed", n->name);
      const sl__value *v = sl__graph_value(g, n->out[0]);
      shards *s = &x->v[n->out[0]];
      for (int r = 0; r < s->n; r++)
        copy_box(s->buf[r], src, &v->meta.shape, &s->slice[r],
                 sl_dtype_size(v->meta.dtype));
      break;
    }
    case SL__NODE_OP: SL_CHECK(run_op(x, n)); break;
    case SL__NODE_BOXING: SL_CHECK(run_boxing(x, n)); break;
    case SL__NODE_VARIABLE:
    case SL__NODE_FETCH: break;
    }
    if (x->opts.check_replicas && n->kind != SL__NODE_FETCH)
      SL_CHECK(check_replicas(x, n));
  }
  SL_CHECK(take_fetches(x, false));
  /* Updates apply after the whole step has read the old values: unless
   * updated in place, the variable takes the update's buffers and the
   * update value gets the old ones, which the next step overwrites before
   * reading (no copy). */
  for (int32_t i = 0; i < nn; i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind != SL__NODE_VARIABLE || n->update < 0) continue;
    shards *dst = &x->v[n->out[0]], *src = &x->v[n->update];
    if (dst->n != src->n)
      return sl__fail(SL_EINTERNAL,
                      "variable '%s': update on another placement", n->name);
    for (int r = 0; r < dst->n; r++) {
      if (dst->bytes[r] != src->bytes[r])
        return sl__fail(SL_EINTERNAL,
                        "variable '%s': update shard size differs on rank %d",
                        n->name, r);
      if (dst->buf[r] == src->buf[r]) continue; /* updated in place */
      void *t = dst->buf[r];
      dst->buf[r] = src->buf[r];
      src->buf[r] = t;
    }
  }
  SL_CHECK(take_fetches(x, true));
  x->step++;
  x->ran = true;
  return SL_OK;
}

static sl_status sl__shard_fetch(sl__shard *x, const char *name, void *out,
                                 size_t bytes) {
  const sl__node *n = sl__graph_find_kind(x->g, name, SL__NODE_FETCH);
  if (!n)
    return sl__fail(SL_ENOTFOUND, "fetch: the graph has no fetch '%s'",
                    name ? name : "(null)");
  if (!x->ran) return sl__fail(SL_ESTATE, "fetch '%s': no step has run", name);
  const sl__value *v = sl__graph_value(x->g, n->in[0]);
  size_t want = logical_bytes(v);
  if (bytes != want)
    return sl__fail(SL_EINVAL, "fetch '%s': %zu bytes, the value has %zu", name,
                    bytes, want);
  for (int f = 0; f < x->nfetch; f++)
    if (sl__graph_node(x->g, x->fetches[f].node) == n) {
      if (bytes) memcpy(out, x->fetches[f].logical, bytes);
      return SL_OK;
    }
  return sl__fail(SL_EINTERNAL, "fetch '%s': not prepared", name);
}

/* ---- the public API ------------------------------------------------------ */

struct sl_reference {
  sl_reference_config cfg;
  sl__shard *shard;   /* SL_REFERENCE_SHARDED */
  sl__interp *interp; /* SL_REFERENCE_LOGICAL */
};

static void public_hook(void *ctx, const sl__node *n, int rank, uint64_t t0,
                        uint64_t t1) {
  const sl_reference *r = ctx;
  r->cfg.hook(r->cfg.hook_ctx, n->name,
              n->kind == SL__NODE_BOXING ? "boxing" : n->op->name, rank, t0,
              t1);
}

sl_status sl_reference_create(sl_graph *g, const sl_reference_config *cfg,
                              sl_reference **out) {
  if (out) *out = NULL;
  if (!g || !out) return sl__fail(SL_EINVAL, "reference: NULL graph or output");
  sl_reference_config c = SL_REFERENCE_CONFIG(.kind = SL_REFERENCE_SHARDED);
  if (cfg)
    SL_CHECK(sl__config_copy(&c, sizeof c, cfg, "sl_reference_config",
                             "SL_REFERENCE_CONFIG"));
  if (c.kind != SL_REFERENCE_SHARDED && c.kind != SL_REFERENCE_LOGICAL)
    return sl__fail(SL_EINVAL, "reference: unknown kind %d", (int)c.kind);
  sl_reference *r;
  if (SL_NEW(r) != SL_OK) return SL_ENOMEM;
  r->cfg = c;
  sl_status st;
  if (c.kind == SL_REFERENCE_SHARDED) {
    sl__shard_opts so = {.check_replicas = c.check_replicas,
                         .out_of_place_updates = c.out_of_place_updates,
                         .hook = c.hook ? public_hook : NULL,
                         .hook_ctx = r};
    st = sl__shard_create(g, &so, &r->shard);
  } else {
    st = sl__graph_compile(g);
    if (st == SL_OK) st = sl__interp_create(g, &r->interp);
  }
  if (st != SL_OK) {
    sl_reference_destroy(r);
    return st;
  }
  *out = r;
  return SL_OK;
}

void sl_reference_destroy(sl_reference *r) {
  if (!r) return;
  sl__shard_destroy(r->shard);
  sl__interp_destroy(r->interp);
  sl__free(r);
}

sl_status sl_reference_feed(sl_reference *r, const char *name, const void *data,
                            size_t bytes) {
  if (!r || !name) return sl__fail(SL_EINVAL, "reference feed: NULL argument");
  return r->shard ? sl__shard_feed(r->shard, name, data, bytes)
                  : sl__interp_feed(r->interp, name, data, bytes);
}

sl_status sl_reference_step(sl_reference *r) {
  if (!r) return sl__fail(SL_EINVAL, "reference step: NULL");
  return r->shard ? sl__shard_step(r->shard) : sl__interp_step(r->interp);
}

sl_status sl_reference_fetch(sl_reference *r, const char *name, void *out,
                             size_t bytes) {
  if (!r || !name) return sl__fail(SL_EINVAL, "reference fetch: NULL argument");
  if (r->shard) return sl__shard_fetch(r->shard, name, out, bytes);
  const void *data;
  sl__meta meta;
  SL_CHECK(sl__interp_fetch(r->interp, name, &data, &meta));
  size_t want = (size_t)sl_shape_numel(&meta.shape) * sl_dtype_size(meta.dtype);
  if (bytes != want)
    return sl__fail(SL_EINVAL, "fetch '%s': %zu bytes, the value has %zu", name,
                    bytes, want);
  if (bytes) memcpy(out, data, bytes);
  return SL_OK;
}
