/* Lowering and register planning on the examples' layouts (tasks per rank,
 * boxing tasks on their streams, variables' update loops, feeds, ticks,
 * fetch ranks, register bytes and counts), the plan's protobuf round trip,
 * text and DOT, bad plan files, plan dumps from programs, and
 * `sluice plan` end to end. */
#include <unistd.h>

#include "cli_run.h"
#include "lower_int.h"
#include "session_helpers.h"

static sl_graph *mlp(const char *placement, const char *x_sbp,
                     const char *w1_sbp, const char *w2_sbp) {
  sl_graph *g = st_graph(placement);
  sl_shape xs = SL_SHAPE(16, 12), ys = SL_SHAPE(16), w1s = SL_SHAPE(12, 20),
           w2s = SL_SHAPE(20, 7);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, x_sbp);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, NULL);
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_uniform(-1, 1, 1), NULL, w1_sbp);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_uniform(-1, 1, 2), NULL, w2_sbp);
  sl_tensor h = sl_relu(sl_matmul(x, w1, false, false));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_optimizer opt = sl_optimizer_sgd(0.1, 0);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  sl_fetch(w1, "w1_out");
  st_check_graph(g);
  return g;
}

static int32_t node_named(const sl_graph *g, const char *name) {
  int32_t i = sl__graph_find(g, name);
  if (i < 0) fail_msg("no node '%s'", name);
  return i;
}

static int count_tasks(const sl__pplan *p, int32_t node, sl__task_kind kind) {
  int n = 0;
  for (int32_t i = 0; i < p->n_tasks; i++)
    n += p->tasks[i].node == node && p->tasks[i].kind == kind;
  return n;
}

static void test_dp_structure(void **state) {
  sl_graph *g = mlp("cpu:0-1", "S(0)", "B", "B");
  sl__pplan *p = st_lower(g);
  assert_int_equal(p->machines, 1);
  assert_int_equal(p->driver, 1);
  int ticks = 0, colls = 0, fetches = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind == SL__TASK_TICK) {
      ticks++;
      const sl__regst *r = &p->regsts[t->out[0]];
      assert_int_equal(r->bytes, 0);
      assert_int_equal(r->count, 2);
      assert_true(r->n_cons > 0);
      /* every reader of a tick is on the tick's device, and reads it in
       * its tick slot */
      for (int32_t c = 0; c < r->n_cons; c++) {
        const sl__task *u = &p->tasks[r->cons[c]];
        assert_int_equal(u->device, t->device);
        assert_true(u->tick_slot >= 0 && u->in[u->tick_slot] == t->out[0]);
      }
      continue;
    }
    const sl__node *n = sl__graph_node(g, t->node);
    if (n->kind == SL__NODE_OP) {
      assert_int_equal(t->kind, SL__TASK_OP);
      assert_int_equal(t->stream, SL_STREAM_COMPUTE);
      assert_int_equal((int)t->device, t->rank); /* cpu:0-1: rank r on r */
      /* sources and the producers of variables read the tick */
      bool writes_var = false;
      for (int32_t k = 0; k < t->n_out; k++)
        writes_var |= p->regsts[t->out[k]].var_node >= 0;
      assert_true((t->tick_slot >= 0) == (n->n_in == 0 || writes_var));
    }
    if (t->kind == SL__TASK_COLL) {
      colls++;
      /* in-process on CPUs: on the compute stream, outside its order */
      assert_int_equal(t->stream, SL_STREAM_COMPUTE);
      assert_int_equal(t->engine, SL__ENGINE_INPROC);
      assert_false(sl__task_in_device_order(t));
      assert_true(t->member == 0 || t->member == 1);
      assert_int_equal(t->group, 0);
    }
    if (t->kind == SL__TASK_FEED) {
      assert_int_equal(p->regsts[t->out[0]].count, 2);
      assert_true(t->tick_slot == 0);
    }
    /* feeds and fetches of CPU devices: on the compute stream, outside
     * its order */
    if (t->kind == SL__TASK_FEED || t->kind == SL__TASK_FETCH) {
      assert_int_equal(t->stream, SL_STREAM_COMPUTE);
      assert_false(sl__task_in_device_order(t));
    }
    fetches += t->kind == SL__TASK_FETCH;
  }
  assert_int_equal(ticks, 2);
  assert_true(fetches >= 1);
  assert_true(colls >= 4); /* at least the two weight gradients, 2 ranks */
  /* one task per rank for every op node; x's shard is 8 rows */
  int32_t xi = node_named(g, "x");
  assert_int_equal(count_tasks(p, xi, SL__TASK_FEED), 2);
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const sl__regst *rg = &p->regsts[r];
    if (rg->value == sl__graph_node(g, xi)->out[0]) {
      assert_int_equal(rg->bytes, 8 * 12 * 4);
      assert_int_equal(rg->shape.dims[0], 8);
    }
  }
  /* variables: one register, initially ready, produced by the SGD update
   * of their rank, which also reads it: updated in place */
  int32_t wi = node_named(g, "w1");
  int vars = 0;
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const sl__regst *rg = &p->regsts[r];
    if (rg->var_node != wi) continue;
    vars++;
    assert_int_equal(rg->count, 1);
    assert_int_equal(rg->initial, 1);
    assert_int_equal(rg->bytes, 12 * 20 * 4);
    const sl__task *u = &p->tasks[rg->producer];
    const sl__node *un = sl__graph_node(g, u->node);
    assert_true(un->optimizer);
    assert_string_equal(un->op->name, "sgd_update");
    assert_int_equal(u->rank, rg->rank);
    bool loops = false;
    for (int32_t k = 0; k < u->n_in; k++)
      loops |= u->in[k] == r;
    assert_true(loops);
  }
  assert_int_equal(vars, 2);
  /* fetches: the loss is partial (both ranks fetch), w1 is B (rank 0) */
  int32_t li = node_named(g, "loss"), fi = node_named(g, "w1_out");
  const sl__value *lv = sl__graph_value(g, sl__graph_node(g, li)->in[0]);
  int want = lv->sbp.sbp[0].kind == SL_SBP_BROADCAST ? 1 : 2;
  assert_int_equal(count_tasks(p, li, SL__TASK_FETCH), want);
  assert_int_equal(count_tasks(p, fi, SL__TASK_FETCH), 1);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

/* Tensor parallel: one all-reduce closes the row-split matmul; hybrid on a
 * 2x2 mesh: collectives run on groups of 2 along one mesh axis. */
static void test_tp_hybrid_structure(void **state) {
  sl_graph *g = mlp("cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))");
  sl__pplan *p = st_lower(g);
  int colls = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind != SL__TASK_COLL) continue;
    colls++;
    const sl__node *n = sl__graph_node(g, t->node);
    assert_int_equal(n->kind, SL__NODE_BOXING);
    const int *ranks;
    int gn = sl_boxing_step_group(n->boxing, t->step, t->group, &ranks);
    assert_int_equal(gn, 2);
    assert_int_equal(ranks[t->member], t->rank);
  }
  assert_true(colls > 0);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
  /* send_recv between placements: exchange tasks on the copy stream; a
   * target-only device reads its tick */
  g = st_graph("cpu:0-1");
  sl_shape xs = SL_SHAPE(5, 4);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_fetch(sl_to_global(x, "cpu:1-3", "S(1)"), "moved");
  p = st_lower(g);
  int xchg = 0, only_out = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind != SL__TASK_XCHG) continue;
    xchg++;
    assert_int_equal(t->stream, SL_STREAM_COPY);
    if (t->tick_slot >= 0) {
      only_out++;
      assert_int_equal(t->n_in, 1);
      assert_int_equal(t->n_out, 1);
    }
  }
  assert_int_equal(xchg, 4);     /* devices 0, 1, 2, 3 */
  assert_int_equal(only_out, 2); /* devices 2 and 3 hold no source shard */
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

static void write_text(const sl__pplan *p, int fmt, char **buf, size_t *len) {
  FILE *f = open_memstream(buf, len);
  assert_non_null(f);
  assert_int_equal(fmt == 0 ? sl__pplan_write_text(p, -1, f)
                            : sl__pplan_write_dot(p, -1, f),
                   SL_OK);
  fclose(f);
}

static void test_protobuf_round_trip(void **state) {
  sl_graph *g = mlp("cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))");
  sl__pplan *p = st_lower(g);
  uint8_t *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  assert_int_equal(sl__pplan_pack(p, &a, &na), SL_OK);
  sl__pplan *q = NULL;
  assert_int_equal(sl__pplan_unpack(a, na, &q), SL_OK);
  assert_int_equal(sl__pplan_pack(q, &b, &nb), SL_OK);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na);
  assert_int_equal(q->n_tasks, p->n_tasks);
  assert_int_equal(q->n_regsts, p->n_regsts);
  for (int32_t r = 0; r < p->n_regsts; r++) {
    assert_int_equal(q->regsts[r].n_cons, p->regsts[r].n_cons);
    assert_int_equal(q->regsts[r].bytes, p->regsts[r].bytes);
    assert_true(sl_shape_equal(&q->regsts[r].shape, &p->regsts[r].shape));
  }
  for (int fmt = 0; fmt < 2; fmt++) {
    char *t1 = NULL, *t2 = NULL;
    size_t l1 = 0, l2 = 0;
    write_text(p, fmt, &t1, &l1);
    write_text(q, fmt, &t2, &l2);
    assert_string_equal(t1, t2);
    if (fmt == 0) {
      assert_non_null(strstr(t1, "machine 0"));
      assert_non_null(strstr(t1, "device cpu:3"));
      assert_non_null(strstr(t1, "stream compute"));
      assert_non_null(strstr(t1, "[boxing all_reduce(sum) group"));
      assert_non_null(strstr(t1, "driver (machine 1)"));
      assert_non_null(strstr(t1, "(1 initial)"));
      assert_non_null(strstr(t1, "(updated in place)"));
    } else {
      assert_non_null(strstr(t1, "digraph plan {"));
      assert_non_null(strstr(t1, "subgraph cluster_m0_d2"));
      assert_non_null(strstr(t1, "class=boxing"));
      assert_non_null(strstr(t1, "cluster_driver"));
    }
    free(t1);
    free(t2);
  }
  /* Tampering: a task reading a register that does not exist, a register
   * whose producer does not write it, garbage, truncation, version. */
  sl__pplan_destroy(q);
  int32_t saved = p->tasks[3].n_in ? p->tasks[3].in[0] : 0;
  if (p->tasks[3].n_in) {
    p->tasks[3].in[0] = p->n_regsts + 5;
    uint8_t *c = NULL;
    size_t nc = 0;
    assert_int_equal(sl__pplan_pack(p, &c, &nc), SL_OK);
    assert_int_equal(sl__pplan_unpack(c, nc, &q), SL_EINVAL);
    assert_null(q);
    assert_non_null(strstr(sl_last_error(), p->tasks[3].name));
    free(c);
    p->tasks[3].in[0] = saved;
  }
  int32_t prod = p->regsts[0].producer;
  p->regsts[0].producer = (prod + 1) % p->n_tasks;
  uint8_t *c = NULL;
  size_t nc = 0;
  assert_int_equal(sl__pplan_pack(p, &c, &nc), SL_OK);
  assert_int_equal(sl__pplan_unpack(c, nc, &q), SL_EINVAL);
  free(c);
  p->regsts[0].producer = prod;
  uint8_t junk[64];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (uint8_t)(i * 37 + 11);
  assert_int_equal(sl__pplan_unpack(junk, sizeof junk, &q), SL_EINVAL);
  assert_int_equal(sl__pplan_unpack(a, na / 2, &q), SL_EINVAL);
  a[1] = 7; /* field 1 is the version: 7 */
  assert_int_equal(a[0], 0x08);
  assert_int_equal(sl__pplan_unpack(a, na, &q), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "version 7"));
  free(a);
  free(b);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

/* A plan's collective specs (graph/lower_coll.c): every boxing task names
 * one; its members run where their tasks do and hand in and get back
 * exactly their registers' shards; an exchange's pieces cover every
 * output; group collectives name their block and axes. Then tampered
 * specs are refused when read back. */
static void check_specs(const sl__pplan *p, int *by_op) {
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    bool boxing = t->kind == SL__TASK_COLL || t->kind == SL__TASK_XCHG ||
                  t->kind == SL__TASK_LOCAL;
    if (!boxing) {
      assert_int_equal(t->coll, -1);
      continue;
    }
    assert_true(t->coll >= 0 && t->coll < p->n_colls);
    const sl__pcoll *c = &p->colls[t->coll];
    const sl__xgeom *g = &c->geom;
    int k = t->kind == SL__TASK_LOCAL ? 0 : t->member;
    assert_true(k >= 0 && k < g->n);
    assert_int_equal(c->machine[k], t->machine);
    assert_int_equal(c->device[k], t->device);
    assert_int_equal(c->node, t->node);
    assert_int_equal(c->step, t->step);
    if (t->kind != SL__TASK_LOCAL) assert_int_equal(c->engine, t->engine);
    assert_int_equal(g->has_in[k], t->n_in > (t->tick_slot >= 0 ? 1 : 0));
    assert_int_equal(g->has_out[k], t->n_out == 1);
    for (int32_t j = 0; j < t->n_in; j++)
      if (j != t->tick_slot)
        assert_int_equal(sl_slice_numel(&g->in_box[k]),
                         sl_shape_numel(&p->regsts[t->in[j]].shape));
    if (t->n_out)
      assert_int_equal(sl_slice_numel(&g->out_box[k]),
                       sl_shape_numel(&p->regsts[t->out[0]].shape));
    by_op[c->op]++;
  }
  for (int32_t i = 0; i < p->n_colls; i++) {
    const sl__pcoll *c = &p->colls[i];
    const sl__xgeom *g = &c->geom;
    if (c->op == SL__PCOLL_ALL_GATHER || c->op == SL__PCOLL_ALL_TO_ALL)
      assert_true(c->in_axis >= 0 && c->in_axis < c->block.ndim);
    if (c->op == SL__PCOLL_REDUCE_SCATTER || c->op == SL__PCOLL_ALL_TO_ALL)
      assert_true(c->out_axis >= 0 && c->out_axis < c->block.ndim);
    if (c->op != SL__PCOLL_EXCHANGE) continue;
    /* Pieces stored into an output cover it exactly (no fill here). */
    for (int m = 0; m < g->n; m++) {
      if (!g->has_out[m] || g->fill[m]) continue;
      int64_t covered = 0;
      for (int q = 0; q < g->n_pieces; q++)
        if (g->pieces[q].dst == m && !g->pieces[q].reduce)
          covered += sl_slice_numel(&g->pieces[q].box);
      assert_int_equal(covered, sl_slice_numel(&g->out_box[m]));
    }
  }
}

/* Packs p and unpacks it into *q: the status. */
static sl_status round_trip(const sl__pplan *p, sl__pplan **q) {
  uint8_t *a = NULL;
  size_t na = 0;
  assert_int_equal(sl__pplan_pack(p, &a, &na), SL_OK);
  sl_status st = sl__pplan_unpack(a, na, q);
  free(a);
  return st;
}

/* Expects p's protobuf form refused with `what` in the message. */
static void expect_refused(const sl__pplan *p, const char *what) {
  sl__pplan *q = NULL;
  assert_int_equal(round_trip(p, &q), SL_EINVAL);
  assert_null(q);
  if (!strstr(sl_last_error(), what))
    fail_msg("'%s' does not say '%s'", sl_last_error(), what);
}

static int32_t first_task(const sl__pplan *p, sl__task_kind kind) {
  for (int32_t i = 0; i < p->n_tasks; i++)
    if (p->tasks[i].kind == kind) return i;
  fail_msg("no %s task", sl__task_kind_name(kind));
  return -1;
}

/* What a session reads instead of the graph (graph/plan_node.c): ops,
 * attributes, values, initializers and kernel arguments survive the
 * protobuf form, agree with the registers, and a plan whose facts
 * disagree is refused naming the node or task. */
static void test_runtime_facts(void **state) {
  sl_graph *g = mlp("cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))");
  sl__pplan *p = st_lower(g);
  sl__pplan *q = NULL;
  assert_int_equal(round_trip(p, &q), SL_OK);
  int ops = 0, vars = 0;
  for (int32_t i = 0; i < p->n_nodes; i++) {
    const sl__pnode *x = &p->nodes[i], *y = &q->nodes[i];
    assert_ptr_equal(x->def, y->def);
    assert_int_equal(x->attrs.n, y->attrs.n);
    for (int k = 0; k < x->attrs.n; k++) {
      assert_string_equal(x->attrs.a[k].name, y->attrs.a[k].name);
      assert_int_equal(x->attrs.a[k].i, y->attrs.a[k].i);
    }
    assert_int_equal(x->feed, y->feed);
    assert_int_equal(x->trained, y->trained);
    assert_int_equal(x->of_variable, y->of_variable);
    assert_int_equal(!x->value.placement, !y->value.placement);
    if (x->value.placement) {
      assert_true(sl_placement_equal(x->value.placement, y->value.placement));
      assert_true(sl_nd_sbp_equal(&x->value.sbp, &y->value.sbp));
      assert_true(sl_shape_equal(&x->value.meta.shape, &y->value.meta.shape));
    }
    ops += x->def != NULL;
    if (strcmp(x->kind, "variable") != 0) continue;
    vars++;
    /* The same initial shards from either plan. */
    for (int r = 0; r < sl_placement_size(x->value.placement); r++) {
      sl_slice box;
      assert_int_equal(sl_local_slice(&x->value.meta.shape, x->value.placement,
                                      &x->value.sbp, r, &box),
                       SL_OK);
      size_t bytes =
          (size_t)sl_slice_numel(&box) * sl_dtype_size(x->value.meta.dtype);
      uint8_t u[1024], v[1024];
      assert_true(bytes <= sizeof u);
      assert_int_equal(sl__pplan_variable_init(p, i, r, u), SL_OK);
      assert_int_equal(sl__pplan_variable_init(q, i, r, v), SL_OK);
      assert_memory_equal(u, v, bytes);
    }
  }
  assert_true(ops > 4);
  assert_true(p->nodes[sl__pplan_find_node(p, "w1")].trained);
  assert_true(vars >= 2);
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    assert_int_equal(t->n_args, q->tasks[i].n_args);
    for (int32_t k = 0; k < t->n_args; k++) {
      const sl__karg *x = &t->args[k], *y = &q->tasks[i].args[k];
      assert_memory_equal(&x->box, &y->box, sizeof x->box);
      assert_true(sl_shape_equal(&x->global, &y->global));
      assert_int_equal(x->dtype, y->dtype);
      assert_int_equal(x->partial, y->partial);
    }
    if (t->kind != SL__TASK_OP) continue;
    /* The kernel sees its registers' shapes. */
    sl__kernel_ctx k;
    sl__pplan_kernel_ctx(q, &q->tasks[i], &k);
    assert_int_equal(k.n_in + k.n_out, t->n_args);
    for (int j = 0; j < k.n_in; j++)
      assert_true(
          sl_shape_equal(&k.in_meta[j].shape, &p->regsts[t->in[j]].shape));
    for (int j = 0; j < k.n_out; j++)
      assert_true(
          sl_shape_equal(&k.out_meta[j].shape, &p->regsts[t->out[j]].shape));
  }
  sl__pplan_destroy(q);

  /* An op this build does not have. */
  int32_t mm = first_task(p, SL__TASK_OP);
  sl__pnode *on = &p->nodes[p->tasks[mm].node];
  const char *op = on->op;
  on->op = "no_such_op";
  expect_refused(p, "no op of its name");
  on->op = op;
  /* Outputs the op does not make of its inputs. */
  sl__karg *out = &p->tasks[mm].args[p->tasks[mm].n_args - 1];
  out->global.dims[0] += 1;
  expect_refused(p, p->tasks[mm].name);
  expect_refused(p, "outputs other than its op makes");
  out->global.dims[0] -= 1;
  /* A feed cutting a box its register does not hold. */
  int32_t fd = first_task(p, SL__TASK_FEED);
  p->tasks[fd].args[0].box.extent[0] += 1;
  expect_refused(p, p->tasks[fd].name);
  p->tasks[fd].args[0].box.extent[0] -= 1;
  /* A variable's register of another size than its shard. */
  int32_t vr = 0;
  while (p->regsts[vr].var_node < 0)
    vr++;
  p->regsts[vr].bytes += 4;
  expect_refused(p, "not a shard of its variable");
  p->regsts[vr].bytes -= 4;
  /* A variable whose initializer is no initializer. */
  sl__pnode *vn = &p->nodes[p->regsts[vr].var_node];
  vn->init.kind = (sl_init_kind)99;
  expect_refused(p, "a bad initializer");
  vn->init.kind = SL_INIT_UNIFORM;
  assert_int_equal(sl__pplan_check_runtime(p), SL_OK);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

/* Each machine's part, the program's and a machine's beyond the plan's:
 * they pack and read back, hold every task once as a task of their own,
 * and number what crosses between them as the whole plan does. */
static void test_parts(void **state) {
  sl_graph *g = mlp("cpu:0-1/0-1[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))");
  sl__pplan *p = st_lower(g);
  assert_int_equal(p->machines, 2);
  int32_t *own = calloc((size_t)p->n_tasks, sizeof *own);
  for (int node = -1; node <= (int)p->machines + 1; node++) {
    sl__pplan *part = NULL, *q = NULL;
    assert_int_equal(sl__pplan_part(p, node, &part), SL_OK);
    if (round_trip(part, &q) != SL_OK)
      fail_msg("machine %d's part: %s", node, sl_last_error());
    assert_int_equal(q->n_tasks, part->n_tasks);
    int locals = 0;
    for (int32_t i = 0; i < q->n_tasks; i++) {
      const sl__task *t = &q->tasks[i];
      /* The task of the whole plan it is: the same name. */
      int32_t w = 0;
      while (strcmp(p->tasks[w].name, t->name) != 0)
        w++;
      uint32_t runner = sl__task_runner(p, &p->tasks[w]);
      if (t->proxy) { /* another machine's (an idle one's: the ticks) */
        assert_true(node < 0                  ? runner != p->driver
                    : node < (int)p->machines ? runner != (uint32_t)node
                                              : t->kind == SL__TASK_TICK);
        continue;
      }
      locals++;
      own[w]++;
      assert_int_equal(runner, node < 0 ? p->driver : (uint32_t)node);
      assert_int_equal(t->n_in, p->tasks[w].n_in);
      for (int32_t k = 0; k < t->n_in; k++) {
        assert_int_equal(t->in_slot[k], p->tasks[w].in_slot[k]);
        assert_int_equal(t->in_pos[k], p->tasks[w].in_pos[k]);
        /* Every register keeps the whole plan's number. */
        assert_int_equal(q->regsts[t->in[k]].wire, p->tasks[w].in[k]);
      }
    }
    if (node > (int)p->machines) assert_int_equal(locals, 0);
    if (node < 0)
      for (int32_t i = 0; i < q->n_tasks; i++)
        if (!q->tasks[i].proxy)
          assert_true(q->tasks[i].kind == SL__TASK_TICK ||
                      q->tasks[i].kind == SL__TASK_FEED ||
                      q->tasks[i].kind == SL__TASK_FETCH);
    sl__pplan_destroy(q);
    sl__pplan_destroy(part);
  }
  /* Every task is some part's own exactly once. */
  for (int32_t i = 0; i < p->n_tasks; i++)
    assert_int_equal(own[i], 1);
  free(own);
  /* Only a whole plan has parts. */
  sl__pplan *part = NULL, *pp = NULL;
  assert_int_equal(sl__pplan_part(p, 0, &part), SL_OK);
  assert_int_equal(sl__pplan_part(part, 1, &pp), SL_EINVAL);
  sl__pplan_destroy(part);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

static void test_collective_specs(void **state) {
  int by_op[SL__PCOLL_OP_COUNT] = {0};
  /* dp (all-reduces, a slice), 2-D tp (gathers, scatters, all-to-alls),
   * and a placement change (an exchange). */
  const char *layouts[][4] = {
      {"cpu:0-1", "S(0)", "B", "B"},
      {"cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))"},
      {"cpu:0-2", "S(1)", "S(0)", "S(1)"},
  };
  for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
    sl_graph *g =
        mlp(layouts[l][0], layouts[l][1], layouts[l][2], layouts[l][3]);
    sl__pplan *p = st_lower(g);
    check_specs(p, by_op);
    /* What a daemon checks before it runs the program's plan. */
    assert_int_equal(sl__pplan_check_runtime(p), SL_OK);
    sl__pplan_destroy(p);
    sl_graph_destroy(g);
  }
  /* an exchange between placements */
  sl_graph *g = st_graph("cpu:0-1");
  sl_shape xs = SL_SHAPE(6, 4);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, "S(0)");
  sl_tensor y = sl_to_global(x, "cpu:2-4", "S(1)");
  sl_fetch(sl_relu(y), "y");
  st_check_graph(g);
  sl__pplan *p = st_lower(g);
  check_specs(p, by_op);
  assert_int_equal(sl__pplan_check_runtime(p), SL_OK);
  assert_true(by_op[SL__PCOLL_ALL_REDUCE] > 0);
  assert_true(by_op[SL__PCOLL_EXCHANGE] > 0);
  assert_true(by_op[SL__PCOLL_SLICE] + by_op[SL__PCOLL_ZERO] > 0);
  /* The specs survive the protobuf form; tampered ones do not. */
  uint8_t *a = NULL;
  size_t na = 0;
  assert_int_equal(sl__pplan_pack(p, &a, &na), SL_OK);
  sl__pplan *q = NULL;
  assert_int_equal(sl__pplan_unpack(a, na, &q), SL_OK);
  assert_int_equal(q->n_colls, p->n_colls);
  check_specs(q, by_op);
  sl__pplan_destroy(q);
  free(a);
  int32_t ci = 0;
  while (ci < p->n_colls && (p->colls[ci].op != SL__PCOLL_EXCHANGE ||
                             p->colls[ci].geom.n_pieces == 0))
    ci++;
  assert_true(ci < p->n_colls);
  sl__pcoll *c = &p->colls[ci];
  char what[32];
  snprintf(what, sizeof what, "collective %d", (int)ci);
  int src = c->geom.pieces[0].src;
  c->geom.pieces[0].src = c->geom.n; /* a member that does not exist */
  assert_int_equal(sl__pplan_pack(p, &a, &na), SL_OK);
  assert_int_equal(sl__pplan_unpack(a, na, &q), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), what));
  free(a);
  c->geom.pieces[0].src = src;
  c->geom.pieces[0].box.extent[0] = -1; /* a box that is no box */
  assert_int_equal(sl__pplan_pack(p, &a, &na), SL_OK);
  assert_int_equal(sl__pplan_unpack(a, na, &q), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), what));
  free(a);
  c->geom.pieces[0].box.extent[0] = 1;
  for (int32_t i = 0; i < p->n_tasks; i++) /* members beyond the spec's */
    if (p->tasks[i].coll == ci) p->tasks[i].member = c->geom.n;
  assert_int_equal(sl__pplan_pack(p, &a, &na), SL_OK);
  assert_int_equal(sl__pplan_unpack(a, na, &q), SL_EINVAL);
  free(a);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

static char *tmp_path(const char *suffix) {
  static int k;
  char *p = malloc(256);
  snprintf(p, 256, "/tmp/sluice_plan_%d_%d%s", (int)getpid(), k++, suffix);
  return p;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f);
  b[got] = 0;
  fclose(f);
  return b;
}

/* The public calls and the dump of a running program. */
static void test_dumps(void **state) {
  assert_int_equal(sl_plan_format_for_path("a/b.pb"), SL_PLAN_PROTOBUF);
  assert_int_equal(sl_plan_format_for_path("x.dot"), SL_PLAN_DOT);
  assert_int_equal(sl_plan_format_for_path("plan.txt"), SL_PLAN_TEXT);
  assert_int_equal(sl_plan_format_for_path("pb"), SL_PLAN_TEXT);
  char *pb = tmp_path(".pb"), *txt = tmp_path(".txt"), *dot = tmp_path(".dot"),
       *env = tmp_path(".pb"), *conv = tmp_path(".txt");
  sl_graph *g = mlp("cpu:0-1", "S(0)", "B", "B");
  assert_int_equal(sl_graph_write_plan(g, SL_PLAN_PROTOBUF, pb), SL_OK);
  assert_int_equal(sl_graph_write_plan(g, SL_PLAN_TEXT, txt), SL_OK);
  assert_int_equal(sl_graph_write_plan(g, SL_PLAN_DOT, dot), SL_OK);
  assert_int_equal(sl_graph_write_plan(g, (sl_plan_format)9, dot), SL_EINVAL);
  assert_int_equal(sl_plan_file_convert(pb, SL_PLAN_TEXT, conv), SL_OK);
  char *a = slurp(txt), *b = slurp(conv);
  assert_non_null(a);
  assert_non_null(b);
  assert_string_equal(a, b);
  free(a);
  free(b);
  /* SLUICE_PLAN_DUMP: the session writes its plan when created, the same
   * plan as the graph's; the config's path wins over the variable */
  setenv("SLUICE_PLAN_DUMP", env, 1);
  sl_session *s;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_OK);
  sl_session_destroy(s);
  unsetenv("SLUICE_PLAN_DUMP");
  a = slurp(pb);
  b = slurp(env);
  assert_non_null(b);
  assert_int_equal(sl_plan_file_convert(env, SL_PLAN_TEXT, conv), SL_OK);
  char *c = slurp(conv), *d = slurp(txt);
  assert_string_equal(c, d);
  free(a);
  free(b);
  free(c);
  free(d);
  sl_session_config cfg = sl_session_config_default();
  cfg.plan_dump_path = dot;
  unlink(dot);
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_OK);
  assert_int_equal(sl_session_write_plan(s, SL_PLAN_TEXT, conv), SL_OK);
  sl_session_destroy(s);
  a = slurp(dot);
  assert_non_null(a);
  assert_non_null(strstr(a, "digraph plan"));
  free(a);
  /* errors */
  assert_int_equal(
      sl_plan_file_convert("/nonexistent/plan.pb", SL_PLAN_TEXT, conv), SL_EIO);
  assert_int_equal(sl_plan_file_convert(txt, SL_PLAN_TEXT, conv), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), txt));
  assert_int_equal(
      sl_graph_write_plan(g, SL_PLAN_TEXT, "/nonexistent/dir/p.txt"), SL_EIO);
  sl_graph_destroy(g);
  const char *all[] = {pb, txt, dot, env, conv};
  for (int i = 0; i < 5; i++) {
    unlink(all[i]);
    free((void *)all[i]);
  }
}

static void test_cli(void **state) {
  char *pb = tmp_path(".pb"), *out = tmp_path(".dot");
  sl_graph *g = mlp("cpu:0-2", "S(0)", "B", "B");
  assert_int_equal(sl_graph_write_plan(g, SL_PLAN_PROTOBUF, pb), SL_OK);
  sl_graph_destroy(g);
  cli_result r;
  const char *text[] = {"sluice", "plan", pb, NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, text, &r), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "machine 0"));
  assert_non_null(strstr(r.out, "device cpu:2"));
  assert_non_null(strstr(r.out, "stream compute"));
  cli_result_free(&r);
  const char *dot[] = {"sluice", "plan", pb, "--dot", "-o", out, NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, dot, &r), 0);
  assert_int_equal(r.status, 0);
  cli_result_free(&r);
  char *d = slurp(out);
  assert_non_null(d);
  assert_non_null(strstr(d, "digraph plan {"));
  assert_non_null(strstr(d, "class=boxing"));
  free(d);
  const char *help[] = {"sluice", "plan", "--help", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, help, &r), 0);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "SLUICE_PLAN_DUMP"));
  cli_result_free(&r);
  const char *missing[] = {"sluice", "plan", "/nonexistent.pb", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, missing, &r), 0);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "SL_EIO"));
  cli_result_free(&r);
  const char *bad[] = {"sluice", "plan", pb, "--svg", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, bad, &r), 0);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--svg"));
  cli_result_free(&r);
  const char *none[] = {"sluice", "plan", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, none, &r), 0);
  assert_int_equal(r.status, 2);
  cli_result_free(&r);
  unlink(pb);
  unlink(out);
  free(pb);
  free(out);
}

/* Tasks in a text plan's header ("..., N tasks, ..."). */
static int header_tasks(const char *text) {
  const char *t = strstr(text, " tasks,");
  assert_non_null(t);
  while (t > text && t[-1] >= '0' && t[-1] <= '9')
    t--;
  return atoi(t);
}

/* One node's part of a plan over two nodes: `sluice plan --node N` shows
 * that node's devices, tasks and memory only, and the parts add up to the
 * whole plan. */
static void test_node_parts(void **state) {
  char *pb = tmp_path(".pb"), *part = tmp_path(".txt");
  sl_graph *g = mlp("cpu:0-1/0-1", "S(0)", "B", "B");
  assert_int_equal(sl_graph_write_plan(g, SL_PLAN_PROTOBUF, pb), SL_OK);
  sl_graph_destroy(g);
  sl__pplan *p = NULL;
  assert_int_equal(sl__pplan_read_file(pb, &p), SL_OK);
  int real = 0;
  for (int32_t i = 0; i < p->n_tasks; i++)
    real += p->tasks[i].kind != SL__TASK_TICK;
  uint32_t driver = p->driver;
  sl__pplan_destroy(p);
  int sum = 0;
  for (int node = 0; node < 2; node++) {
    char nb[8];
    snprintf(nb, sizeof nb, "%d", node);
    cli_result r;
    const char *text[] = {"sluice", "plan", pb, "--node", nb, NULL};
    assert_int_equal(cli_run(SLUICE_CLI_PATH, text, &r), 0);
    assert_int_equal(r.status, 0);
    char want[64], other[64];
    snprintf(want, sizeof want, "plan of machine %d (of 2 machines", node);
    assert_non_null(strstr(r.out, want));
    snprintf(want, sizeof want, "\nmachine %d\n", node);
    snprintf(other, sizeof other, "\nmachine %d\n", 1 - node);
    assert_non_null(strstr(r.out, want));
    assert_null(strstr(r.out, other));
    snprintf(other, sizeof other, "of machine %d device", 1 - node);
    assert_null(strstr(r.out, other)); /* the other node's ticks */
    sum += header_tasks(r.out);
    cli_result_free(&r);
    const char *mem[] = {"sluice", "plan", pb, "--memory", "--node", nb, NULL};
    assert_int_equal(cli_run(SLUICE_CLI_PATH, mem, &r), 0);
    assert_int_equal(r.status, 0);
    snprintf(want, sizeof want, "\nn%d/cpu:1", node);
    snprintf(other, sizeof other, "\nn%d/", 1 - node);
    assert_non_null(strstr(r.out, want));
    assert_null(strstr(r.out, other));
    cli_result_free(&r);
  }
  assert_int_equal(sum, real);
  /* The API: a node the plan does not have (in text; in protobuf a
   * machine beyond the driver's number). */
  assert_int_equal(sl_plan_file_convert_node(pb, SL_PLAN_TEXT, 2, part),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no machine 2"));
  assert_int_equal(sl_plan_file_convert_node(pb, SL_PLAN_PROTOBUF, 3, part),
                   SL_EINVAL);
  assert_int_equal(sl_plan_file_convert_node(pb, SL_PLAN_DOT, 1, part), SL_OK);
  char *d = slurp(part);
  assert_non_null(d);
  assert_non_null(strstr(d, "cluster_m1_d"));
  assert_null(strstr(d, "cluster_m0_d"));
  free(d);
  cli_result r;
  const char *bad[] = {"sluice", "plan", pb, "--node", "x", NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, bad, &r), 0);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--node needs a node number"));
  cli_result_free(&r);
  /* --pb --node: the part node 1's daemon receives, a plan that reads
   * back as machine 1's, with proxies for the tasks it exchanges registers
   * with; the driver's number gives the program's part. */
  const char *pbn[] = {"sluice", "plan", pb,   "--pb", "--node",
                       "1",      "-o",   part, NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, pbn, &r), 0);
  assert_int_equal(r.status, 0);
  cli_result_free(&r);
  sl__pplan *q = NULL;
  if (sl__pplan_read_file(part, &q) != SL_OK) fail_msg("%s", sl_last_error());
  assert_int_equal(q->part, 1);
  int proxies = 0, own = 0;
  for (int32_t i = 0; i < q->n_tasks; i++) {
    proxies += q->tasks[i].proxy;
    own += !q->tasks[i].proxy;
    if (!q->tasks[i].proxy) assert_int_equal(q->tasks[i].machine, 1);
  }
  assert_true(proxies > 0 && own > 0);
  sl__pplan_destroy(q);
  char drv[16];
  snprintf(drv, sizeof drv, "%u", driver);
  const char *pbd[] = {"sluice", "plan", pb,   "--pb", "--node",
                       drv,      "-o",   part, NULL};
  assert_int_equal(cli_run(SLUICE_CLI_PATH, pbd, &r), 0);
  assert_int_equal(r.status, 0);
  cli_result_free(&r);
  if (sl__pplan_read_file(part, &q) != SL_OK) fail_msg("%s", sl_last_error());
  assert_int_equal(q->part, (int32_t)driver);
  sl__pplan_destroy(q);
  unlink(pb);
  unlink(part);
  free(pb);
  free(part);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp_structure),
      cmocka_unit_test(test_tp_hybrid_structure),
      cmocka_unit_test(test_protobuf_round_trip),
      cmocka_unit_test(test_runtime_facts),
      cmocka_unit_test(test_parts),
      cmocka_unit_test(test_collective_specs),
      cmocka_unit_test(test_dumps),
      cmocka_unit_test(test_cli),
      cmocka_unit_test(test_node_parts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
