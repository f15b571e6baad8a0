/* Builder: tensors that enter the graph — inputs, variables, fills,
 * synthetic and .npy data — plus sl_to_global and sl_fetch. */
#include <math.h>
#include <string.h>

#include <sluice/checkpoint.h>

#include "cpu/npy.h"
#include "graph_priv.h"

static bool shape_valid(const sl_shape *s) {
  if (!s || s->ndim < 0 || s->ndim > SL_MAX_DIMS) return false;
  for (int i = 0; i < s->ndim; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

/* Parses an SBP text for node (what, name); NULL text gives *has = false. */
static bool sbp_text(sl_graph *g, const char *text, const char *what,
                     const char *name, sl_nd_sbp *out, bool *has) {
  *has = false;
  memset(out, 0, sizeof *out);
  if (!text) return true;
  sl_status st = sl_nd_sbp_parse(text, out);
  if (st != SL_OK) {
    sl__g_error_last(g, st, what, name, NULL);
    return false;
  }
  *has = true;
  return true;
}

/* Checks a user-fixed SBP for an input or variable. */
static bool fixed_sbp_ok(sl_graph *g, const char *what, const char *name,
                         const sl_nd_sbp *s, const sl_placement *p,
                         const sl_shape *shape) {
  if (sl_nd_sbp_check(s, p, shape) != SL_OK) {
    sl__g_error_last(g, SL_EINVAL, what, name, NULL);
    return false;
  }
  for (int m = 0; m < s->ndim; m++)
    if (s->sbp[m].kind == SL_SBP_PARTIAL) {
      sl__g_error(g, SL_EINVAL, what, name, NULL,
                  "a partial SBP is not allowed here (mesh axis %d)", m);
      return false;
    }
  return true;
}

static sl_nd_sbp all_b(const sl_placement *p) {
  sl_nd_sbp s;
  memset(&s, 0, sizeof s);
  s.ndim = sl_placement_mesh_ndim(p);
  for (int m = 0; m < s.ndim; m++)
    s.sbp[m] = sl_sbp_broadcast();
  return s;
}

/* The common part of inputs and variables. */
static sl__gnode *leaf(sl_graph *g, sl__node_kind kind, const char *name,
                       const sl_shape *shape, sl_dtype dt,
                       const sl_placement *placement, const sl_nd_sbp *sbp) {
  const char *what = kind == SL__NODE_INPUT ? "input" : "variable";
  if (!g || g->err) return NULL;
  if (g->frozen) {
    sl__g_error(g, SL_ESTATE, what, name ? name : "", NULL,
                "the graph is compiled: it can no longer change");
    return NULL;
  }
  if (!name) {
    sl__g_error(g, SL_EINVAL, what, "(null)", NULL, "a name is required");
    return NULL;
  }
  if (!shape_valid(shape)) {
    sl__g_error(g, SL_EINVAL, what, name, NULL,
                "shape must have 0 to %d non-negative extents", SL_MAX_DIMS);
    return NULL;
  }
  if (sl_dtype_size(dt) == 0) {
    sl__g_error(g, SL_EINVAL, what, name, NULL, "invalid dtype %d", (int)dt);
    return NULL;
  }
  sl_placement *p =
      placement ? sl__g_place(g, placement) : g->default_placement;
  if (!p) {
    sl__g_error(g, SL_ENOMEM, what, name, NULL, "out of memory");
    return NULL;
  }
  sl_nd_sbp s = sbp ? *sbp : all_b(p);
  if (!fixed_sbp_ok(g, what, name, &s, p, shape)) return NULL;
  sl__meta m = {*shape, dt};
  sl__gnode *n = sl__g_new_node(g, kind, name, NULL, p, 0, NULL, 1, &m);
  if (!n) return NULL;
  sl__value *v = sl__g_value(g, n->n.out[0]);
  v->sbp = s;
  v->sbp_fixed = true;
  n->n.out_sbp[0] = s;
  return n;
}

sl_tensor sl_input_p(sl_graph *g, const char *name, const sl_shape *shape,
                     sl_dtype dt, const sl_placement *placement,
                     const sl_nd_sbp *sbp) {
  sl__gnode *n = leaf(g, SL__NODE_INPUT, name, shape, dt, placement, sbp);
  return n ? sl__g_tensor(g, n->n.out[0]) : sl__g_poison(g, false);
}

sl_tensor sl_input(sl_graph *g, const char *name, const sl_shape *shape,
                   sl_dtype dt, const char *placement, const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  const char *nm = name ? name : "(null)";
  sl_placement *p = sl__g_place_text(g, placement, "input", nm);
  sl_nd_sbp s;
  bool has;
  if (!p || !sbp_text(g, sbp, "input", nm, &s, &has))
    return sl__g_poison(g, false);
  return sl_input_p(g, name, shape, dt, p, has ? &s : NULL);
}

sl_tensor sl_variable_p(sl_graph *g, const char *name, const sl_shape *shape,
                        sl_dtype dt, sl_init init,
                        const sl_placement *placement, const sl_nd_sbp *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  if (sl__g_init_check(&init, dt) != SL_OK) {
    sl__g_error_last(g, SL_EINVAL, "variable", name ? name : "(null)", NULL);
    return sl__g_poison(g, false);
  }
  sl__gnode *n = leaf(g, SL__NODE_VARIABLE, name, shape, dt, placement, sbp);
  if (!n) return sl__g_poison(g, false);
  n->init = init;
  return sl__g_tensor(g, n->n.out[0]);
}

sl_tensor sl_variable(sl_graph *g, const char *name, const sl_shape *shape,
                      sl_dtype dt, sl_init init, const char *placement,
                      const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  const char *nm = name ? name : "(null)";
  sl_placement *p = sl__g_place_text(g, placement, "variable", nm);
  sl_nd_sbp s;
  bool has;
  if (!p || !sbp_text(g, sbp, "variable", nm, &s, &has))
    return sl__g_poison(g, false);
  return sl_variable_p(g, name, shape, dt, init, p, has ? &s : NULL);
}

sl_tensor sl_variable_set_trainable(sl_tensor v, bool trainable) {
  sl_graph *g = v.graph;
  if (!sl__g_usable(g, 1, &v, "variable")) return sl__g_poison(g, false);
  sl__gnode *n = g->nodes[sl__g_value(g, v.id)->producer];
  if (n->n.kind != SL__NODE_VARIABLE) {
    sl__g_error(g, SL_EINVAL, "variable", n->n.name, NULL,
                "set_trainable: the tensor is not a variable");
    return sl__g_poison(g, false);
  }
  n->trainable = trainable;
  return v;
}

sl_tensor sl_variable_set_zero_stage(sl_tensor v, int stage) {
  sl_graph *g = v.graph;
  if (!sl__g_usable(g, 1, &v, "variable")) return sl__g_poison(g, false);
  sl__gnode *n = g->nodes[sl__g_value(g, v.id)->producer];
  const char *why = n->n.kind != SL__NODE_VARIABLE
                        ? "set_zero_stage: the tensor is not a variable"
                    : g->minimized ? "set_zero_stage after sl_minimize"
                    : stage < 0 || stage > 3
                        ? "set_zero_stage: want a stage from 0 to 3"
                        : NULL;
  if (why) {
    sl__g_error(g,
                n->n.kind == SL__NODE_VARIABLE && g->minimized ? SL_ESTATE
                                                               : SL_EINVAL,
                "variable", n->n.name, NULL, "%s (got %d)", why, stage);
    return sl__g_poison(g, false);
  }
  n->zero_stage = stage + 1;
  return v;
}

sl_tensor sl_variable_load(sl_tensor v, const char *path, const char *tensor) {
  sl_graph *g = v.graph;
  if (!sl__g_usable(g, 1, &v, "variable")) return sl__g_poison(g, false);
  sl__gnode *n = g->nodes[sl__g_value(g, v.id)->producer];
  const sl__value *val = sl__g_value(g, v.id);
#define BAD(...)                                                               \
  (sl__g_error(g, SL_EINVAL, "variable", n->n.name, NULL, __VA_ARGS__),        \
   sl__g_poison(g, false))
  if (n->n.kind != SL__NODE_VARIABLE)
    return BAD("load: the tensor is not a variable");
  if (!path || !path[0]) return BAD("load: no path");
  if (!tensor) tensor = n->n.name;
  sl_checkpoint *ck = NULL;
  if (sl_checkpoint_open(path, &ck) != SL_OK)
    return BAD("load: %s", sl_last_error());
  int32_t i = sl_checkpoint_find(ck, tensor);
  sl_checkpoint_tensor t;
  bool found = i >= 0 && sl_checkpoint_get_tensor(ck, i, &t) == SL_OK;
  bool same = found && t.dtype_known && t.dtype == val->meta.dtype &&
              sl_shape_equal(&t.shape, &val->meta.shape);
  char want[128], got[128];
  sl_shape_print(&val->meta.shape, want, sizeof want);
  if (found) sl_shape_print(&t.shape, got, sizeof got);
  sl_tensor out = v;
  if (!found)
    out = BAD("load: '%s' has no tensor '%s'", path, tensor);
  else if (!same)
    out =
        BAD("load: tensor '%s' of '%s' is %s %s, the variable is %s %s", tensor,
            path, t.dtype_known ? sl_dtype_name(t.dtype) : t.dtype_name, got,
            sl_dtype_name(val->meta.dtype), want);
  sl_checkpoint_close(ck);
  if (out.id < 0) return out;
#undef BAD
  n->load_path = sl__arena_strdup(g->arena, path);
  n->load_tensor = sl__arena_strdup(g->arena, tensor);
  if (!n->load_path || !n->load_tensor) {
    sl__g_error(g, SL_ENOMEM, "variable", n->n.name, NULL, "out of memory");
    return sl__g_poison(g, false);
  }
  return v;
}

const char *sl__graph_variable_file(const sl_graph *g, int32_t node,
                                    const char **tensor) {
  const sl__gnode *n = node >= 0 && node < g->n_nodes ? g->nodes[node] : NULL;
  if (!n || n->n.kind != SL__NODE_VARIABLE || !n->load_path) return NULL;
  if (tensor) *tensor = n->load_tensor;
  return n->load_path;
}

/* ---- sources built on ops ---------------------------------------------- */

/* Shared by the text-form sources: placement and SBP parsed, then the op. */
static sl_tensor source_text(sl_graph *g, const char *op, const sl__attrs *at,
                             const char *placement, const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  char name[512];
  sl__g_auto_name(g, op, name, sizeof name);
  sl_placement *p = sl__g_place_text(g, placement, "op", name);
  sl_nd_sbp s;
  bool has;
  if (!p || !sbp_text(g, sbp, "op", name, &s, &has))
    return sl__g_poison(g, false);
  return sl__g_source(g, op, at, NULL, p, has ? &s : NULL);
}

static bool shape_attr(sl_graph *g, const char *op, const sl_shape *shape,
                       sl_dtype dt, sl__attrs *at) {
  if (!shape_valid(shape)) {
    sl__g_fail_op(g, op, "shape must have 0 to %d non-negative extents",
                  SL_MAX_DIMS);
    return false;
  }
  if (sl_dtype_size(dt) == 0) {
    sl__g_fail_op(g, op, "invalid dtype %d", (int)dt);
    return false;
  }
  sl__attrs_set_ints(at, "shape", shape->ndim, shape->dims);
  sl__attrs_set_int(at, "dtype", dt);
  return true;
}

sl_tensor sl_fill(sl_graph *g, const sl_shape *shape, sl_dtype dt, double value,
                  const char *placement, const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  sl__attrs at = {0};
  if (!shape_attr(g, "fill", shape, dt, &at)) return sl__g_poison(g, true);
  sl__attrs_set_float(&at, "value", value);
  return source_text(g, "fill", &at, placement, sbp);
}

sl_tensor sl_data_random_uniform(sl_graph *g, const sl_shape *shape,
                                 sl_dtype dt, double lo, double hi,
                                 uint64_t seed, const char *placement,
                                 const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  sl__attrs at = {0};
  if (!shape_attr(g, "random_uniform", shape, dt, &at))
    return sl__g_poison(g, true);
  if (!(lo < hi) || !isfinite(lo) || !isfinite(hi))
    return sl__g_fail_op(g, "random_uniform",
                         "range [%g, %g) is empty or not finite", lo, hi);
  sl__attrs_set_float(&at, "low", lo);
  sl__attrs_set_float(&at, "high", hi);
  sl__attrs_set_int(&at, "seed", (int64_t)seed);
  sl__attrs_set_int(&at, "per_step", 1);
  return source_text(g, "random_uniform", &at, placement, sbp);
}

sl_tensor sl_data_random_normal(sl_graph *g, const sl_shape *shape, sl_dtype dt,
                                double mean, double std, uint64_t seed,
                                const char *placement, const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  sl__attrs at = {0};
  if (!shape_attr(g, "random_normal", shape, dt, &at))
    return sl__g_poison(g, true);
  if (!(std >= 0) || !isfinite(mean) || !isfinite(std))
    return sl__g_fail_op(g, "random_normal",
                         "mean %g / std %g must be finite, std >= 0", mean,
                         std);
  sl__attrs_set_float(&at, "mean", mean);
  sl__attrs_set_float(&at, "std", std);
  sl__attrs_set_int(&at, "seed", (int64_t)seed);
  sl__attrs_set_int(&at, "per_step", 1);
  return source_text(g, "random_normal", &at, placement, sbp);
}

sl_tensor sl_data_random_int(sl_graph *g, const sl_shape *shape, sl_dtype dt,
                             int64_t lo, int64_t hi, uint64_t seed,
                             const char *placement, const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  sl__attrs at = {0};
  if (!shape_attr(g, "random_int", shape, dt, &at))
    return sl__g_poison(g, true);
  if (lo >= hi)
    return sl__g_fail_op(g, "random_int", "range [%lld, %lld) is empty",
                         (long long)lo, (long long)hi);
  sl__attrs_set_int(&at, "low", lo);
  sl__attrs_set_int(&at, "high", hi);
  sl__attrs_set_int(&at, "seed", (int64_t)seed);
  sl__attrs_set_int(&at, "per_step", 1);
  return source_text(g, "random_int", &at, placement, sbp);
}

sl_tensor sl_data_npy_p(sl_graph *g, const char *path, int64_t batch,
                        const sl_placement *placement, const sl_nd_sbp *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  if (!sl__g_usable(g, 0, NULL, "npy_read")) return sl__g_poison(g, false);
  if (!path) return sl__g_fail_op(g, "npy_read", "path is NULL");
  if (batch <= 0)
    return sl__g_fail_op(g, "npy_read", "'%s': batch %lld must be positive",
                         path, (long long)batch);
  int32_t id = -1;
  sl_clear_error();
  if (sl__npy_open(path, &id) != SL_OK)
    return sl__g_fail_op(g, "npy_read", "%s", sl_last_error());
  sl__attrs at = {0};
  sl__attrs_set_int(&at, "file", id);
  sl__attrs_set_int(&at, "batch", batch);
  sl_tensor t = sl__g_source(g, "npy_read", &at, NULL, placement, sbp);
  if (t.id < 0) {
    sl__npy_release(id);
    return t;
  }
  g->nodes[sl__g_value(g, t.id)->producer]->npy_id = id;
  return t;
}

sl_tensor sl_data_npy(sl_graph *g, const char *path, int64_t batch,
                      const char *placement, const char *sbp) {
  if (!g || g->err) return sl__g_poison(g, false);
  char name[512];
  sl__g_auto_name(g, "npy_read", name, sizeof name);
  sl_placement *p = sl__g_place_text(g, placement, "op", name);
  sl_nd_sbp s;
  bool has;
  if (!p || !sbp_text(g, sbp, "op", name, &s, &has))
    return sl__g_poison(g, false);
  return sl_data_npy_p(g, path, batch, p, has ? &s : NULL);
}

/* ---- conversions and fetches ------------------------------------------- */

sl_tensor sl_to_global_p(sl_tensor t, const sl_placement *placement,
                         const sl_nd_sbp *sbp) {
  sl_graph *g = t.graph;
  if (!sl__g_usable(g, 1, &t, "identity")) return sl__g_poison(g, false);
  sl__value *in = sl__g_value(g, t.id);
  sl_placement *p = placement ? sl__g_place(g, placement) : in->placement;
  if (!p) return sl__g_fail_op(g, "identity", "out of memory");
  if (sbp && sl_nd_sbp_check(sbp, p, &in->meta.shape) != SL_OK) {
    char reason[1024];
    snprintf(reason, sizeof reason, "%s", sl_last_error());
    return sl__g_fail_op(g, "identity", "%s", reason);
  }
  sl_placement *saved = g->force_placement;
  g->force_placement = p;
  sl_tensor r = sl__g_op(g, "identity", 1, &t, NULL, NULL);
  g->force_placement = saved;
  if (r.id < 0) return r;
  if (sbp) {
    sl__value *v = sl__g_value(g, r.id);
    v->sbp = *sbp;
    v->sbp_fixed = true;
  }
  return r;
}

sl_tensor sl_to_global(sl_tensor t, const char *placement, const char *sbp) {
  sl_graph *g = t.graph;
  if (!sl__g_usable(g, 1, &t, "identity")) return sl__g_poison(g, false);
  char name[512];
  sl__g_auto_name(g, "identity", name, sizeof name);
  sl_placement *p =
      placement ? sl__g_place_text(g, placement, "op", name) : NULL;
  sl_nd_sbp s;
  bool has;
  if ((placement && !p) || !sbp_text(g, sbp, "op", name, &s, &has))
    return sl__g_poison(g, false);
  return sl_to_global_p(t, p, has ? &s : NULL);
}

sl_tensor sl_gradient_sbp(sl_tensor t, const char *sbp) {
  sl_graph *g = t.graph;
  if (!sl__g_usable(g, 1, &t, "gradient_sbp")) return sl__g_poison(g, false);
  const char *name = sl_tensor_name(t);
  if (g->minimized) {
    sl__g_error(g, SL_ESTATE, "gradient layout", name, NULL,
                "set after sl_minimize built the gradients");
    return sl__g_poison(g, true);
  }
  sl__value *v = sl__g_value(g, t.id);
  sl_nd_sbp s;
  bool has;
  if (!sbp_text(g, sbp, "gradient layout", name, &s, &has))
    return sl__g_poison(g, true);
  if (!has) {
    sl__g_error(g, SL_EINVAL, "gradient layout", name, NULL, "no SBP given");
    return sl__g_poison(g, true);
  }
  if (sl_nd_sbp_check(&s, v->placement, &v->meta.shape) != SL_OK) {
    sl__g_error_last(g, SL_EINVAL, "gradient layout", name, NULL);
    return sl__g_poison(g, true);
  }
  v->grad_sbp = s;
  return t;
}

sl_status sl_fetch(sl_tensor t, const char *name) {
  sl_graph *g = t.graph;
  if (!g) return sl__fail(SL_EINVAL, "fetch: NULL graph");
  if (!sl__g_usable(g, 1, &t, "fetch")) return g->err ? g->err : SL_EINVAL;
  if (!name)
    return sl__g_error(g, SL_EINVAL, "fetch", "(null)", NULL,
                       "a name is required");
  int32_t id = sl__g_fetch_value(g, t.id); /* micro-batches merged */
  if (id < 0) return g->err;
  sl__value *v = sl__g_value(g, id);
  sl__gnode *n = sl__g_new_node(g, SL__NODE_FETCH, name, NULL, v->placement, 1,
                                &id, 0, NULL);
  return n ? SL_OK : g->err;
}
