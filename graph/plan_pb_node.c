/* The protobuf form of what the runtime reads of the nodes (plan_node.c):
 * ops' attributes, values, variables' initializers and files, and tasks'
 * kernel arguments. The reader bounds every count and parses every text;
 * sl__pplan_check_runtime then checks what the facts say of each other. */
#include <string.h>

#include "plan_pb_int.h"

#define TEXT 256 /* a placement's or nd-SBP's text */

static char *mstr(const char *s) { return (char *)(s ? s : ""); }

sl_status sl__plan_pb_nodes_pack(const sl__pplan *p, Sluice__Node *nodes,
                                 Sluice__Task *tasks, sl__plan_pb_nodes *k) {
  memset(k, 0, sizeof *k);
  size_t na = 0, nargs = 0, nv = (size_t)p->n_nodes;
  for (int32_t i = 0; i < p->n_nodes; i++)
    na += (size_t)p->nodes[i].attrs.n;
  for (int32_t i = 0; i < p->n_tasks; i++)
    nargs += (size_t)p->tasks[i].n_args;
  k->attrs = sl__calloc(na + 1, sizeof *k->attrs);
  k->attrp = sl__calloc(na + 1, sizeof *k->attrp);
  k->values = sl__calloc(nv + 1, sizeof *k->values);
  k->inits = sl__calloc(nv + 1, sizeof *k->inits);
  k->text = sl__calloc(2 * nv + 1, TEXT);
  k->args = sl__calloc(nargs + 1, sizeof *k->args);
  k->argp = sl__calloc(nargs + 1, sizeof *k->argp);
  k->dims = sl__calloc(3 * nargs + 1, SL_MAX_DIMS * sizeof *k->dims);
  if (!k->attrs || !k->attrp || !k->values || !k->inits || !k->text ||
      !k->args || !k->argp || !k->dims)
    return SL_ENOMEM;
  size_t a = 0;
  for (int32_t i = 0; i < p->n_nodes; i++) {
    const sl__pnode *pn = &p->nodes[i];
    Sluice__Node *n = &nodes[i];
    n->n_attrs = (size_t)pn->attrs.n;
    n->attrs = k->attrp + a;
    for (int j = 0; j < pn->attrs.n; j++, a++) {
      const sl__attr *at = &pn->attrs.a[j];
      Sluice__Attr *x = &k->attrs[a];
      sluice__attr__init(x);
      x->name = mstr(at->name);
      x->kind = (int32_t)at->kind;
      /* npy_read's file id is this process's: a session reading the plan
       * opens the path (pn->file) itself. */
      x->i = pn->file && strcmp(at->name, "file") == 0 ? -1 : at->i;
      x->f = at->f;
      x->n_ints = (size_t)(at->kind == SL__ATTR_INTS ? at->n : 0);
      x->ints = (int64_t *)at->ints;
      k->attrp[a] = x;
    }
    const sl__ptensor *v = &pn->value;
    if (v->placement) {
      Sluice__Tensor *x = &k->values[i];
      sluice__tensor__init(x);
      x->n_shape = (size_t)v->meta.shape.ndim;
      x->shape = (int64_t *)v->meta.shape.dims;
      x->dtype = mstr(sl_dtype_name(v->meta.dtype));
      x->placement = k->text + (size_t)2 * i * TEXT;
      x->sbp = x->placement + TEXT;
      sl_placement_print(v->placement, x->placement, TEXT);
      sl_nd_sbp_print(&v->sbp, x->sbp, TEXT);
      n->value = x;
    }
    n->feed = pn->feed + 1;
    n->trained = pn->trained;
    n->of_variable = pn->of_variable;
    n->load = mstr(pn->load);
    n->tensor = mstr(pn->tensor);
    n->file = mstr(pn->file);
    if (strcmp(pn->kind, "variable") == 0) {
      Sluice__Initializer *x = &k->inits[i];
      sluice__initializer__init(x);
      x->kind = (int32_t)pn->init.kind;
      x->a = pn->init.a;
      x->b = pn->init.b;
      x->seed = pn->init.seed;
      n->init = x;
    }
  }
  size_t g = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    tasks[i].n_args = (size_t)t->n_args;
    tasks[i].args = k->argp + g;
    for (int32_t j = 0; j < t->n_args; j++, g++) {
      const sl__karg *ka = &t->args[j];
      Sluice__KernelArg *x = &k->args[g];
      sluice__kernel_arg__init(x);
      size_t nd = (size_t)ka->global.ndim;
      int64_t *d = k->dims + 3 * g * SL_MAX_DIMS;
      memcpy(d, ka->box.start, nd * sizeof *d);
      memcpy(d + SL_MAX_DIMS, ka->box.extent, nd * sizeof *d);
      memcpy(d + 2 * SL_MAX_DIMS, ka->global.dims, nd * sizeof *d);
      x->n_start = x->n_extent = x->n_global = nd;
      x->start = d;
      x->extent = d + SL_MAX_DIMS;
      x->global = d + 2 * SL_MAX_DIMS;
      x->dtype = mstr(sl_dtype_name(ka->dtype));
      x->partial = ka->partial;
      k->argp[g] = x;
    }
  }
  return SL_OK;
}

void sl__plan_pb_nodes_free(sl__plan_pb_nodes *k) {
  sl__free(k->attrs);
  sl__free(k->attrp);
  sl__free(k->values);
  sl__free(k->inits);
  sl__free(k->text);
  sl__free(k->args);
  sl__free(k->argp);
  sl__free(k->dims);
}

static sl_status bad(const char *what, size_t i) {
  return sl__fail(SL_EINVAL, "plan file: %s %zu is malformed", what, i);
}

static sl_status read_value(const Sluice__Tensor *x, sl__ptensor *v) {
  if (x->n_shape > SL_MAX_DIMS ||
      sl_shape_make((int)x->n_shape, x->shape, &v->meta.shape) != SL_OK ||
      sl_dtype_parse(x->dtype, &v->meta.dtype) != SL_OK ||
      sl_nd_sbp_parse(x->sbp, &v->sbp) != SL_OK)
    return SL_EINVAL;
  return sl_placement_parse(x->placement, &v->placement);
}

static sl_status read_node(sl__pplan *p, const Sluice__Node *n, sl__pnode *pn) {
  if (strcmp(pn->kind, "op") == 0) pn->def = sl__op_find(pn->op);
  if (n->n_attrs > SL_OP_MAX_ATTRS) return SL_EINVAL;
  pn->attrs.n = (int)n->n_attrs;
  for (size_t j = 0; j < n->n_attrs; j++) {
    const Sluice__Attr *x = n->attrs[j];
    sl__attr *at = &pn->attrs.a[j];
    if (x->kind < SL__ATTR_INT || x->kind > SL__ATTR_INTS ||
        x->n_ints > SL_MAX_DIMS || (x->kind != SL__ATTR_INTS && x->n_ints))
      return SL_EINVAL;
    at->name = sl__arena_strdup(p->arena, x->name);
    if (!at->name) return SL_ENOMEM;
    at->kind = (sl__attr_kind)x->kind;
    at->i = x->i;
    at->f = x->f;
    at->n = (int)x->n_ints;
    if (x->n_ints) memcpy(at->ints, x->ints, x->n_ints * sizeof *at->ints);
  }
  if (n->value) {
    sl_status st = read_value(n->value, &pn->value);
    if (st != SL_OK) return st;
  }
  if (n->feed < 0 || n->feed > p->n_nodes) return SL_EINVAL;
  pn->feed = n->feed - 1;
  pn->trained = n->trained;
  pn->of_variable = n->of_variable;
  if (n->init)
    pn->init = (sl_init){(sl_init_kind)n->init->kind, n->init->a, n->init->b,
                         n->init->seed};
  bool npy = pn->def && strcmp(pn->def->name, "npy_read") == 0;
  if (npy != (n->file[0] != 0)) return SL_EINVAL; /* a file iff npy_read */
  if (npy && !(pn->file = sl__arena_strdup(p->arena, n->file)))
    return SL_ENOMEM;
  if (n->load[0]) {
    pn->load = sl__arena_strdup(p->arena, n->load);
    pn->tensor = sl__arena_strdup(p->arena, n->tensor);
    if (!pn->load || !pn->tensor) return SL_ENOMEM;
  }
  return SL_OK;
}

static sl_status read_arg(const Sluice__KernelArg *x, sl__karg *a) {
  size_t nd = x->n_global;
  if (nd > SL_MAX_DIMS || x->n_start != nd || x->n_extent != nd ||
      sl_shape_make((int)nd, x->global, &a->global) != SL_OK ||
      sl_dtype_parse(x->dtype, &a->dtype) != SL_OK)
    return SL_EINVAL;
  a->box.ndim = (int)nd;
  for (size_t d = 0; d < nd; d++) {
    a->box.start[d] = x->start[d];
    a->box.extent[d] = x->extent[d];
  }
  a->partial = x->partial;
  return SL_OK;
}

sl_status sl__plan_pb_nodes_unpack(const Sluice__Plan *m, sl__pplan *p) {
  for (size_t i = 0; i < m->n_nodes; i++) {
    sl_status st = read_node(p, m->nodes[i], &p->nodes[i]);
    if (st == SL_ENOMEM) return st;
    if (st != SL_OK) {
      sl_clear_error();
      return bad("node", i);
    }
  }
  for (size_t i = 0; i < m->n_tasks; i++) {
    const Sluice__Task *x = m->tasks[i];
    sl__task *t = &p->tasks[i];
    if (x->n_args > SL_OP_MAX_INPUTS + SL_OP_MAX_OUTPUTS) return bad("task", i);
    t->n_args = (int32_t)x->n_args;
    t->args = x->n_args ? sl__arena_calloc(p->arena, x->n_args, sizeof *t->args)
                        : NULL;
    if (x->n_args && !t->args) return SL_ENOMEM;
    for (size_t j = 0; j < x->n_args; j++)
      if (read_arg(x->args[j], &t->args[j]) != SL_OK) {
        sl_clear_error();
        return bad("task", i);
      }
  }
  return SL_OK;
}
