/* The boxing steps' collective specs (sl__pcoll) in the protobuf plan
 * (graph/plan.proto, message Collective): packing, and unpacking with
 * every field checked, so that no index or box read from a file is out of
 * range for those who use it. */
#include <string.h>

#include "plan_pb_int.h"

/* A box backed by a slice's own arrays (packing only reads them). */
static Sluice__Box *box_of(Sluice__Box *b, const sl_slice *s) {
  sluice__box__init(b);
  b->n_start = b->n_extent = (size_t)s->ndim;
  b->start = (int64_t *)s->start;
  b->extent = (int64_t *)s->extent;
  return b;
}

void sl__plan_pb_colls_free(sl__plan_pb_colls *k) {
  sl__free(k->colls);
  sl__free(k->collp);
  sl__free(k->members);
  sl__free(k->memberp);
  sl__free(k->pieces);
  sl__free(k->piecep);
  sl__free(k->boxes);
  memset(k, 0, sizeof *k);
}

sl_status sl__plan_pb_colls_pack(const sl__pplan *p, sl__plan_pb_colls *k) {
  memset(k, 0, sizeof *k);
  size_t nm = 0, np = 0;
  for (int32_t i = 0; i < p->n_colls; i++) {
    nm += (size_t)p->colls[i].geom.n;
    np += (size_t)p->colls[i].geom.n_pieces;
  }
  size_t nc = (size_t)p->n_colls;
  k->colls = sl__calloc(nc + 1, sizeof *k->colls);
  k->collp = sl__calloc(nc + 1, sizeof *k->collp);
  k->members = sl__calloc(nm + 1, sizeof *k->members);
  k->memberp = sl__calloc(nm + 1, sizeof *k->memberp);
  k->pieces = sl__calloc(np + 1, sizeof *k->pieces);
  k->piecep = sl__calloc(np + 1, sizeof *k->piecep);
  k->boxes = sl__calloc(2 * nm + np + 1, sizeof *k->boxes);
  if (!k->colls || !k->collp || !k->members || !k->memberp || !k->pieces ||
      !k->piecep || !k->boxes) {
    sl__plan_pb_colls_free(k);
    return SL_ENOMEM;
  }
  size_t m = 0, q = 0, b = 0;
  for (size_t i = 0; i < nc; i++) {
    const sl__pcoll *c = &p->colls[i];
    Sluice__Collective *x = &k->colls[i];
    sluice__collective__init(x);
    x->name = (char *)(c->name ? c->name : "");
    x->node = c->node;
    x->step = c->step;
    x->group = c->group;
    x->op = (int32_t)c->op;
    x->engine = (int32_t)c->engine;
    x->dtype = (char *)sl_dtype_name(c->dtype);
    x->reduce = (int32_t)c->reduce;
    x->in_axis = c->in_axis;
    x->out_axis = c->out_axis;
    x->n_block = (size_t)c->block.ndim;
    x->block = (int64_t *)c->block.dims;
    x->local_n = c->local_n;
    x->local_from_b = c->local_from_b;
    x->device_op = (int32_t)c->device_op;
    x->device_count = c->device_count;
    const sl__xgeom *g = &c->geom;
    x->n_members = (size_t)g->n;
    x->members = k->memberp + m;
    for (int j = 0; j < g->n; j++, m++) {
      Sluice__CollectiveMember *y = &k->members[m];
      sluice__collective_member__init(y);
      y->machine = c->machine[j];
      y->device = c->device[j];
      if (g->has_in[j]) y->input = box_of(&k->boxes[b++], &g->in_box[j]);
      if (g->has_out[j]) y->output = box_of(&k->boxes[b++], &g->out_box[j]);
      y->fill = g->fill[j];
      k->memberp[m] = y;
    }
    x->n_pieces = (size_t)g->n_pieces;
    x->pieces = k->piecep + q;
    for (int j = 0; j < g->n_pieces; j++, q++) {
      Sluice__CollectivePiece *y = &k->pieces[q];
      sluice__collective_piece__init(y);
      y->src = g->pieces[j].src;
      y->dst = g->pieces[j].dst;
      y->box = box_of(&k->boxes[b++], &g->pieces[j].box);
      y->reduce = g->pieces[j].reduce;
      k->piecep[q] = y;
    }
    k->collp[i] = x;
  }
  return SL_OK;
}

/* A box of ndim dimensions with starts and extents >= 0 whose ends do not
 * overflow. */
static bool box_in(const Sluice__Box *b, int ndim, sl_slice *out) {
  if (!b || b->n_start != (size_t)ndim || b->n_extent != (size_t)ndim)
    return false;
  out->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    int64_t end;
    if (b->start[d] < 0 || b->extent[d] < 0 ||
        __builtin_add_overflow(b->start[d], b->extent[d], &end))
      return false;
    out->start[d] = b->start[d];
    out->extent[d] = b->extent[d];
  }
  return true;
}

static sl_status bad_coll(size_t i) {
  return sl__fail(SL_EINVAL, "plan file: collective %zu is malformed", i);
}

/* The largest group a plan may hold: the actor runtime's devices. */
#define MAX_MEMBERS (1 << 20)

static sl_status copy_coll(const Sluice__Collective *x, size_t i,
                           sl__pplan *p) {
  sl_dtype dt;
  if (x->n_members < 1 || x->n_members > MAX_MEMBERS ||
      x->n_pieces > (size_t)MAX_MEMBERS * 64 || x->n_block > SL_MAX_DIMS ||
      x->op < 0 || x->op >= SL__PCOLL_OP_COUNT || x->engine < 0 ||
      x->engine >= SL__ENGINE_COUNT || x->reduce < 0 ||
      x->reduce > SL_REDUCE_MIN || sl_dtype_parse(x->dtype, &dt) != SL_OK ||
      x->in_axis < -1 || x->in_axis >= (int32_t)x->n_block ||
      x->out_axis < -1 || x->out_axis >= (int32_t)x->n_block ||
      x->local_n < 0 || x->device_count < 0 ||
      (x->device_op != SL__PCOLL_ALL_REDUCE &&
       x->device_op != SL__PCOLL_REDUCE_SCATTER &&
       x->device_op != SL__PCOLL_ALL_GATHER &&
       x->device_op != SL__PCOLL_EXCHANGE) ||
      x->node < -1 || x->node >= p->n_nodes)
    return bad_coll(i);
  sl__xgeom geom;
  SL_CHECK(sl__xgeom_alloc(&geom, (int)x->n_members, (int)x->n_pieces));
  geom.dtype = dt;
  geom.op = (sl_reduce_op)x->reduce;
  sl__pcoll *c = sl__pplan_add_coll(p, &geom);
  if (!c) return SL_ENOMEM;
  c->name = sl__arena_strdup(p->arena, x->name ? x->name : "");
  if (!c->name) return SL_ENOMEM;
  c->node = x->node;
  c->step = x->step;
  c->group = x->group;
  c->op = (sl__pcoll_op)x->op;
  c->engine = (sl__engine)x->engine;
  c->in_axis = x->in_axis;
  c->out_axis = x->out_axis;
  c->block.ndim = (int)x->n_block;
  for (size_t d = 0; d < x->n_block; d++) {
    if (x->block[d] < 0) return bad_coll(i);
    c->block.dims[d] = x->block[d];
  }
  c->local_n = x->local_n;
  c->local_from_b = x->local_from_b;
  c->device_op = (sl__pcoll_op)x->device_op;
  c->device_count = x->device_count;
  sl__xgeom *g = &c->geom;
  int nd = c->block.ndim;
  for (size_t j = 0; j < x->n_members; j++) {
    const Sluice__CollectiveMember *y = x->members[j];
    c->machine[j] = y->machine;
    c->device[j] = y->device;
    g->has_in[j] = y->input != NULL;
    g->has_out[j] = y->output != NULL;
    if ((y->input && !box_in(y->input, nd, &g->in_box[j])) ||
        (y->output && !box_in(y->output, nd, &g->out_box[j])))
      return bad_coll(i);
    g->fill[j] = y->fill;
  }
  for (size_t j = 0; j < x->n_pieces; j++) {
    const Sluice__CollectivePiece *y = x->pieces[j];
    sl__xpiece *pc = &g->pieces[j];
    if (y->src < 0 || (size_t)y->src >= x->n_members || y->dst < 0 ||
        (size_t)y->dst >= x->n_members || !box_in(y->box, nd, &pc->box))
      return bad_coll(i);
    pc->src = y->src;
    pc->dst = y->dst;
    pc->reduce = y->reduce;
    g->n_pieces++;
  }
  return SL_OK;
}

/* Whether box a lies inside box b. */
static bool box_inside(const sl_slice *a, const sl_slice *b) {
  for (int d = 0; d < a->ndim; d++)
    if (a->start[d] < b->start[d] ||
        a->start[d] + a->extent[d] > b->start[d] + b->extent[d])
      return false;
  return true;
}

/* Bytes of a box's elements, -1 past int64. */
static int64_t box_bytes(const sl_slice *b, sl_dtype dt) {
  int64_t n = (int64_t)sl_dtype_size(dt);
  for (int d = 0; d < b->ndim; d++)
    if (__builtin_mul_overflow(n, b->extent[d], &n)) return -1;
  return n;
}

/* What engines index with: every piece inside its source's input and
 * its target's output, and NCCL's count that of the members' buffers. */
static bool coll_consistent(const sl__pcoll *c) {
  const sl__xgeom *g = &c->geom;
  for (int j = 0; j < g->n_pieces; j++) {
    const sl__xpiece *pc = &g->pieces[j];
    if (!g->has_in[pc->src] || !g->has_out[pc->dst] ||
        !box_inside(&pc->box, &g->in_box[pc->src]) ||
        !box_inside(&pc->box, &g->out_box[pc->dst]))
      return false;
  }
  if (c->engine != SL__ENGINE_DEVICE || c->device_op == SL__PCOLL_EXCHANGE)
    return true;
  int64_t es = (int64_t)sl_dtype_size(c->dtype), n = g->n, want_in, want_out;
  switch (c->device_op) {
  case SL__PCOLL_ALL_REDUCE: want_in = want_out = c->device_count; break;
  case SL__PCOLL_ALL_GATHER:
    want_in = c->device_count;
    want_out = n * c->device_count;
    break;
  default: /* reduce-scatter */
    want_in = n * c->device_count;
    want_out = c->device_count;
  }
  if (c->device_count > INT64_MAX / n / (es ? es : 1)) return false;
  for (int k = 0; k < g->n; k++)
    if (!g->has_in[k] || !g->has_out[k] ||
        box_bytes(&g->in_box[k], c->dtype) != want_in * es ||
        box_bytes(&g->out_box[k], c->dtype) != want_out * es)
      return false;
  return true;
}

/* A boxing task's registers hold exactly its member's boxes. */
static bool task_fits(const sl__pplan *p, const sl__task *t,
                      const sl__pcoll *c) {
  int k = t->kind == SL__TASK_LOCAL ? 0 : t->member;
  const sl__xgeom *g = &c->geom;
  int32_t ins = t->n_in - (t->tick_slot >= 0 ? 1 : 0);
  if (ins > 1 || t->n_out > 1 || g->has_in[k] != (ins == 1) ||
      g->has_out[k] != (t->n_out == 1))
    return false;
  for (int32_t j = 0; j < t->n_in; j++)
    if (j != t->tick_slot &&
        (t->in[j] < 0 || t->in[j] >= p->n_regsts ||
         p->regsts[t->in[j]].bytes != box_bytes(&g->in_box[k], c->dtype)))
      return false;
  return t->n_out == 0 ||
         (t->out[0] >= 0 && t->out[0] < p->n_regsts &&
          p->regsts[t->out[0]].bytes == box_bytes(&g->out_box[k], c->dtype));
}

sl_status sl__plan_pb_colls_unpack(const Sluice__Plan *m, sl__pplan *p) {
  if (m->n_collectives > INT32_MAX / 2)
    return sl__fail(SL_EINVAL, "plan file: too many entries");
  for (size_t i = 0; i < m->n_collectives; i++) {
    SL_CHECK(copy_coll(m->collectives[i], i, p));
    if (!coll_consistent(&p->colls[i])) return bad_coll(i);
  }
  /* Every task's spec exists, a collective's or exchange's member is one of
   * its spec's, and its registers hold its member's boxes. */
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->coll < 0) continue;
    bool boxing = t->kind == SL__TASK_COLL || t->kind == SL__TASK_XCHG ||
                  t->kind == SL__TASK_LOCAL;
    if (t->coll >= p->n_colls || !boxing ||
        (t->kind != SL__TASK_LOCAL &&
         (t->member < 0 || t->member >= p->colls[t->coll].geom.n)) ||
        !task_fits(p, t, &p->colls[t->coll]))
      return sl__fail(SL_EINVAL, "plan file: task %d is malformed", (int)i);
  }
  return SL_OK;
}
