/* Memory planning (graph/memory.c, docs/plan.md "Memory"): every pair of
 * registers the planner lets share bytes is checked against the plan's
 * happens-before relation by an independent checker (the plan unrolled over
 * three steps, every edge the runtime enforces), on many layouts and
 * optimizers; sessions with SLUICE_MEMCHECK=1 train to the same losses bit
 * for bit as with sharing off; the accounting adds up; the memory table and
 * the session API. */
#include <unistd.h>

#include "lower_int.h"
#include "op.h"
#include "session_helpers.h"

#define STEPS 3

/* ---- the plan unrolled -------------------------------------------------- */

typedef struct unrolled {
  int32_t n;    /* tasks */
  int32_t *off; /* successors of event e = step * n + task */
  int32_t *to;
  int32_t n_edges, cap;
  int32_t *from_; /* edge list before CSR */
  int32_t *to_;
} unrolled;

static void edge(unrolled *u, int32_t ta, int ka, int32_t tb, int kb) {
  if (ka < 0 || kb < 0 || ka >= STEPS || kb >= STEPS) return;
  if (u->n_edges == u->cap) {
    u->cap = u->cap ? u->cap * 2 : 1024;
    u->from_ = realloc(u->from_, (size_t)u->cap * sizeof *u->from_);
    u->to_ = realloc(u->to_, (size_t)u->cap * sizeof *u->to_);
    assert_non_null(u->from_);
    assert_non_null(u->to_);
  }
  u->from_[u->n_edges] = ka * u->n + ta;
  u->to_[u->n_edges++] = kb * u->n + tb;
}

/* What the runtime enforces: a reader fires after its register's producer
 * (a variable's readers one step later: they read the version the step
 * before wrote), and a producer writes register j again only after every
 * reader returned what j held (count registers per descriptor); control
 * edges are count-1 registers of 0 bytes. */
static void unroll(const sl__pplan *p, unrolled *u) {
  memset(u, 0, sizeof *u);
  u->n = p->n_tasks;
  for (int32_t i = 0; i < p->n_regsts; i++) {
    const sl__regst *r = &p->regsts[i];
    for (int32_t c = 0; c < r->n_cons; c++) {
      int32_t q = r->cons[c];
      if (q == r->producer) continue; /* updated in place: its own firing */
      for (int k = 0; k < STEPS; k++) {
        /* step k's firing of the producer writes piece k + initial, into
         * the register that held piece k + initial - count */
        edge(u, r->producer, k, q, k + r->initial);
        edge(u, q, k + r->initial - r->count, r->producer, k);
      }
    }
  }
  for (int32_t i = 0; i < p->n_ctrl; i++)
    for (int k = 0; k < STEPS; k++) {
      edge(u, p->ctrl[i].from, k, p->ctrl[i].to, k);
      edge(u, p->ctrl[i].to, k, p->ctrl[i].from, k + 1);
    }
  int32_t ev = STEPS * u->n;
  u->off = calloc((size_t)ev + 2, sizeof *u->off);
  u->to = calloc((size_t)u->n_edges + 1, sizeof *u->to);
  assert_non_null(u->off);
  assert_non_null(u->to);
  for (int32_t e = 0; e < u->n_edges; e++)
    u->off[u->from_[e] + 1]++;
  for (int32_t e = 0; e < ev; e++)
    u->off[e + 1] += u->off[e];
  int32_t *fill = calloc((size_t)ev + 1, sizeof *fill);
  assert_non_null(fill);
  for (int32_t e = 0; e < u->n_edges; e++)
    u->to[u->off[u->from_[e]] + fill[u->from_[e]]++] = u->to_[e];
  free(fill);
}

static void unroll_free(unrolled *u) {
  free(u->off);
  free(u->to);
  free(u->from_);
  free(u->to_);
}

/* Whether event a happens before event b (a path of at least one edge). */
static bool before(const unrolled *u, int32_t a, int32_t b, uint8_t *seen,
                   int32_t *stack) {
  int32_t ev = STEPS * u->n, top = 0;
  memset(seen, 0, (size_t)ev);
  for (int32_t e = u->off[a]; e < u->off[a + 1]; e++)
    if (!seen[u->to[e]]) {
      seen[u->to[e]] = 1;
      stack[top++] = u->to[e];
    }
  while (top) {
    int32_t x = stack[--top];
    if (x == b) return true;
    for (int32_t e = u->off[x]; e < u->off[x + 1]; e++)
      if (!seen[u->to[e]]) {
        seen[u->to[e]] = 1;
        stack[top++] = u->to[e];
      }
  }
  return false;
}

/* Register x of step kx is dead before register y of step ky is written:
 * every reader of x (its producer, when it has none) happens before y's
 * producer. */
static bool dead_before(const sl__pplan *p, const unrolled *u, int32_t x,
                        int kx, int32_t y, int ky, uint8_t *seen,
                        int32_t *stack) {
  const sl__regst *rx = &p->regsts[x];
  int32_t py = ky * u->n + p->regsts[y].producer;
  if (rx->n_cons == 0)
    return before(u, kx * u->n + rx->producer, py, seen, stack);
  for (int32_t c = 0; c < rx->n_cons; c++)
    if (!before(u, kx * u->n + rx->cons[c], py, seen, stack)) return false;
  return true;
}

static int64_t stride(int64_t b) {
  return (int64_t)sl_register_stride((size_t)b);
}

/* Register y is computed in place into register x: same bytes, y's producer
 * an elementwise op or a reshape (sl__op_def.inplace) reading x after every
 * other reader of x is done, or an in-process all-reduce and x's only reader,
 * and y dead before x of the next step is written. */
static bool in_place(const sl__pplan *p, const unrolled *u, int32_t x,
                     int32_t y, uint8_t *seen, int32_t *stack) {
  const sl__regst *rx = &p->regsts[x], *ry = &p->regsts[y];
  const sl__task *t = &p->tasks[ry->producer];
  if (rx->offset != ry->offset || stride(rx->bytes) != stride(ry->bytes) ||
      t->out[0] != y)
    return false;
  /* comm/coll/coll.c's all-reduce, its input's sole reader */
  if (t->kind == SL__TASK_COLL) {
    if (t->engine != SL__ENGINE_INPROC || rx->n_cons != 1 ||
        strcmp(p->nodes[t->node].steps[t->step].op, "all_reduce") != 0)
      return false;
  } else {
    const sl__op_def *op =
        t->kind == SL__TASK_OP ? sl__op_find(p->nodes[t->node].op) : NULL;
    if (!op || !op->inplace) return false;
  }
  bool reads = false;
  for (int32_t c = 0; c < rx->n_cons; c++) {
    if (rx->cons[c] == ry->producer) {
      reads = true;
    } else if (!before(u, u->n + rx->cons[c], u->n + ry->producer, seen,
                       stack)) {
      return false;
    }
  }
  return reads && dead_before(p, u, y, 1, x, 2, seen, stack);
}

/* Every pair of registers sharing bytes is ordered, in both directions
 * across a step boundary, by the plan, or one is computed in place into
 * the other. Returns the pairs checked. */
static int check_sharing(const sl__pplan *p, int *in_place_pairs) {
  unrolled u;
  unroll(p, &u);
  uint8_t *seen = malloc((size_t)STEPS * (size_t)u.n + 1);
  int32_t *stack = malloc(((size_t)STEPS * (size_t)u.n + 1) * sizeof *stack);
  assert_non_null(seen);
  assert_non_null(stack);
  int pairs = 0;
  for (int32_t a = 0; a < p->n_regsts; a++) {
    const sl__regst *ra = &p->regsts[a];
    if (ra->mem < 0) continue;
    const sl__pmem *m = &p->mem[ra->mem];
    assert_int_equal(ra->count, 1);
    assert_int_equal(ra->initial, 0);
    assert_true(ra->machine == m->machine && ra->device == m->device);
    assert_true(ra->offset % 64 == 0);
    assert_true(ra->offset + stride(ra->bytes) <= m->block);
    for (int32_t b = a + 1; b < p->n_regsts; b++) {
      const sl__regst *rb = &p->regsts[b];
      if (rb->mem != ra->mem || ra->offset >= rb->offset + stride(rb->bytes) ||
          rb->offset >= ra->offset + stride(ra->bytes))
        continue;
      pairs++;
      bool a_first = dead_before(p, &u, a, 1, b, 1, seen, stack) &&
                     dead_before(p, &u, b, 1, a, 2, seen, stack);
      bool b_first = dead_before(p, &u, b, 1, a, 1, seen, stack) &&
                     dead_before(p, &u, a, 1, b, 2, seen, stack);
      if (a_first || b_first) continue;
      if (in_place(p, &u, a, b, seen, stack) ||
          in_place(p, &u, b, a, seen, stack)) {
        if (in_place_pairs) ++*in_place_pairs;
        continue;
      }
      fail_msg("registers '%s' and '%s' share bytes of block %d but the "
               "plan does not order their lifetimes",
               ra->name, rb->name, (int)ra->mem);
    }
  }
  free(seen);
  free(stack);
  unroll_free(&u);
  return pairs;
}

/* The accounting adds up. */
static void check_accounting(const sl__pplan *p) {
  assert_true(p->n_mem > 0);
  for (int32_t i = 0; i < p->n_mem; i++) {
    const sl__pmem *m = &p->mem[i];
    int64_t sum = 0;
    for (int c = 0; c < SL_MEMORY_CATEGORIES; c++) {
      assert_true(m->category[c] >= 0);
      sum += m->category[c];
    }
    assert_true(sum == m->peak);
    assert_true(m->peak <= sl__pmem_allocated(m));
    assert_true(m->block + m->own <= m->unshared);
    assert_true(m->peak >= m->own + m->mirrors + m->workspace);
    int64_t placed = 0, own = 0;
    for (int32_t r = 0; r < p->n_regsts; r++) {
      const sl__regst *g = &p->regsts[r];
      if (g->machine != m->machine || g->device != m->device) continue;
      if (g->mem == i)
        placed++;
      else
        own += stride(g->bytes) * g->count;
    }
    assert_true(placed == m->n_shared);
    assert_true(own == m->own);
  }
}

/* ---- graphs ----------------------------------------------------------------
 */

typedef struct mlp_spec {
  const char *placement;
  const char *x_sbp, *w_in_sbp, *w_out_sbp; /* NULL: B */
  int layers;
  int64_t batch, width;
  int optimizer; /* 0 sgd, 1 momentum, 2 adam */
  bool fetch_hidden, weight_only_op;
  bool residual; /* h = relu(a) + a: an elementwise reader of a before its
                    last one */
  bool reshape;  /* h through [batch, width / 4, 4] and back: reshapes that
                    read their input last */
} mlp_spec;

static sl_graph *mlp(const mlp_spec *s) {
  sl_graph *g = st_graph(s->placement);
  sl_shape xs = SL_SHAPE(s->batch, s->width), ys = SL_SHAPE(s->batch),
           ws = SL_SHAPE(s->width, s->width), hs = SL_SHAPE(s->width, 5);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, s->x_sbp);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, s->x_sbp);
  sl_tensor h = x;
  for (int l = 0; l < s->layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "w%d", l);
    const char *sbp = l % 2 == 0 ? s->w_in_sbp : s->w_out_sbp;
    sl_tensor w =
        sl_variable(g, name, &ws, SL_DTYPE_F32,
                    sl_init_uniform(-0.5, 0.5, (uint64_t)l + 1), NULL, sbp);
    if (s->weight_only_op && l == 0) w = sl_mul_scalar(w, 0.5);
    sl_tensor a = sl_matmul(h, w, false, false);
    h = s->residual ? sl_add(sl_relu(a), a) : sl_relu(a);
    if (s->reshape) {
      sl_shape split = SL_SHAPE(s->batch, s->width / 4, 4);
      h = sl_reshape(sl_reshape(h, &split), &xs);
    }
    if (s->fetch_hidden && l == 0) sl_fetch(h, "h0");
  }
  sl_tensor head = sl_variable(g, "head", &hs, SL_DTYPE_F32,
                               sl_init_uniform(-0.5, 0.5, 99), NULL, NULL);
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, head, false, false), y);
  sl_optimizer opt = s->optimizer == 2   ? sl_optimizer_adam(1e-2)
                     : s->optimizer == 1 ? sl_optimizer_sgd(0.05, 0.9)
                                         : sl_optimizer_sgd(0.05, 0);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  st_check_graph(g);
  return g;
}

static const mlp_spec specs[] = {
    {"cpu:0", NULL, NULL, NULL, 3, 16, 24, 0, false, false, false, true},
    {"cpu:0", NULL, NULL, NULL, 6, 32, 16, 2, true, true, true, false},
    {"cpu:0-1", "S(0)", NULL, NULL, 3, 16, 24, 0, false, false, true, true},
    {"cpu:0-1", "S(0)", NULL, NULL, 4, 16, 24, 1, true, false, false, false},
    {"cpu:0-1", NULL, "S(1)", "S(0)", 4, 16, 24, 2, false, true, true, true},
    {"cpu:0-3", "S(0)", "S(1)", "S(0)", 3, 16, 24, 0, false, false, true,
     false},
    {"cpu:0-3[2,2]", "(S(0),B)", "(B,S(1))", "(B,S(0))", 4, 16, 24, 1, true,
     false, false, true},
};
#define N_SPECS (int)(sizeof specs / sizeof specs[0])

/* Reshapes whose output takes its input's bytes. */
static int reshapes_in_place(const sl__pplan *p) {
  int n = 0;
  for (int32_t t = 0; t < p->n_tasks; t++) {
    const sl__task *k = &p->tasks[t];
    if (k->kind != SL__TASK_OP || strcmp(p->nodes[k->node].op, "reshape"))
      continue;
    const sl__regst *x = &p->regsts[k->in[0]], *y = &p->regsts[k->out[0]];
    n += x->mem >= 0 && y->mem == x->mem && y->offset == x->offset;
  }
  return n;
}

/* Every layout's plan shares only what the plan orders, and shares. */
static void test_sharing_is_ordered(void **state) {
  (void)state;
  for (int i = 0; i < N_SPECS; i++) {
    sl_graph *g = mlp(&specs[i]);
    sl__pplan *p = st_lower(g);
    int in_place_pairs = 0, pairs = check_sharing(p, &in_place_pairs);
    check_accounting(p);
    printf("%s (%d layers, optimizer %d): %d pairs share bytes, %d of them "
           "in place\n",
           specs[i].placement, specs[i].layers, specs[i].optimizer, pairs,
           in_place_pairs);
    assert_true(pairs > 0);
    assert_true(in_place_pairs > 0); /* relu into matmul, at least */
    /* Each layer's two reshapes read their input last. */
    if (specs[i].reshape) assert_true(reshapes_in_place(p) >= specs[i].layers);
    sl__pplan_destroy(p);
    sl_graph_destroy(g);
  }
}

/* The same on random MLPs: depth, widths, layouts, optimizers, fetched
 * intermediates. */
static void test_sharing_random(void **state) {
  (void)state;
  sl_rng r = {st_seed(11, "sharing_random")};
  const char *places[] = {"cpu:0", "cpu:0-1", "cpu:0-2", "cpu:0-3[2,2]"};
  for (int trial = 0; trial < 12; trial++) {
    mlp_spec s;
    memset(&s, 0, sizeof s);
    int pl = (int)sl__rng_below(&r, 4);
    s.placement = places[pl];
    bool two_d = pl == 3;
    int layout = (int)sl__rng_below(&r, 3); /* single, dp, tp */
    if (layout == 1) s.x_sbp = two_d ? "(S(0),S(0))" : "S(0)";
    if (layout == 2) {
      s.w_in_sbp = two_d ? "(B,S(1))" : "S(1)";
      s.w_out_sbp = two_d ? "(B,S(0))" : "S(0)";
    }
    s.layers = 1 + (int)sl__rng_below(&r, 5);
    s.batch = 4 * (1 + (int64_t)sl__rng_below(&r, 4));
    s.width = 4 * (1 + (int64_t)sl__rng_below(&r, 6));
    s.optimizer = (int)sl__rng_below(&r, 3);
    s.fetch_hidden = sl__rng_below(&r, 2);
    s.weight_only_op = sl__rng_below(&r, 2);
    s.residual = sl__rng_below(&r, 2);
    s.reshape = sl__rng_below(&r, 2);
    sl_graph *g = mlp(&s);
    sl__pplan *p = st_lower(g);
    check_sharing(p, NULL);
    check_accounting(p);
    sl__pplan_destroy(p);
    sl_graph_destroy(g);
  }
}

/* ---- sessions
 * ---------------------------------------------------------------- */

static void train(const mlp_spec *s, int steps, float *losses) {
  sl_graph *g = mlp(s);
  sl_session *ss = NULL;
  if (sl_session_create(g, NULL, &ss) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  st_feeds f;
  st_feeds_make(g, 5, 5, &f);
  for (int k = 0; k < steps; k++) {
    for (int i = 0; i < f.n; i++)
      assert_int_equal(sl_session_feed(ss, f.name[i], f.data[i], f.bytes[i]),
                       SL_OK);
    if (sl_session_run(ss, 1) != SL_OK) fail_msg("run: %s", sl_last_error());
    assert_int_equal(sl_session_fetch(ss, "loss", &losses[k], sizeof(float)),
                     SL_OK);
  }
  st_feeds_free(&f);
  assert_int_equal(sl_session_finish(ss), SL_OK);
  sl_session_destroy(ss);
  sl_graph_destroy(g);
}

/* Sharing changes where registers live, never a bit of what they hold, and
 * SLUICE_MEMCHECK finds no register overwritten while live. */
static void test_sessions_memcheck(void **state) {
  (void)state;
  for (int i = 0; i < N_SPECS; i++) {
    float off[6], on[6];
    setenv("SLUICE_MEMORY_SHARING", "0", 1);
    train(&specs[i], 6, off);
    unsetenv("SLUICE_MEMORY_SHARING");
    setenv("SLUICE_MEMCHECK", "1", 1);
    train(&specs[i], 6, on);
    unsetenv("SLUICE_MEMCHECK");
    assert_memory_equal(off, on, sizeof off);
  }
}

/* Turning sharing off keeps every register in memory of its own. */
static void test_sharing_off(void **state) {
  (void)state;
  setenv("SLUICE_MEMORY_SHARING", "0", 1);
  sl_graph *g = mlp(&specs[1]);
  sl__pplan *p = st_lower(g);
  unsetenv("SLUICE_MEMORY_SHARING");
  for (int32_t i = 0; i < p->n_mem; i++) {
    assert_int_equal(p->mem[i].block, 0);
    assert_true(p->mem[i].own == p->mem[i].unshared);
  }
  assert_int_equal(check_sharing(p, NULL), 0);
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
}

/* An activation-heavy MLP: what the plan allocates is far below what the
 * registers would take unshared, the peak is what backward needs, and the
 * session reports it per device. */
static void test_savings_and_api(void **state) {
  (void)state;
  mlp_spec s = {"cpu:0", NULL, NULL,  NULL,  8,     256,
                64,      0,    false, false, false, false};
  sl_graph *g = mlp(&s);
  sl_session *ss = NULL;
  if (sl_session_create(g, NULL, &ss) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  assert_int_equal(sl_session_memory_device_count(ss), 1);
  sl_memory_stats m;
  assert_int_equal(sl_session_get_memory(ss, 0, &m), SL_OK);
  assert_string_equal(m.device, "cpu:0");
  printf("allocated %lld peak %lld unshared %lld, %d shared, %d control\n",
         (long long)m.allocated, (long long)m.peak, (long long)m.unshared,
         (int)m.shared_registers, (int)m.control_edges);
  assert_true(m.allocated * 2 < m.unshared);
  assert_true(m.peak <= m.allocated);
  /* Weights: 8 [64,64] and the [64,5] head (multiples of 64 bytes). */
  assert_int_equal(m.category[SL_MEMORY_WEIGHTS], 8 * 64 * 64 * 4 + 64 * 5 * 4);
  /* Backward needs each layer's input and relu output ([256,64] each). */
  assert_true(m.category[SL_MEMORY_ACTIVATIONS] >= 8 * 256 * 64 * 4);
  assert_true(m.shared_registers > 0 && m.control_edges > 0);
  assert_int_equal(sl_session_get_memory(ss, 1, &m), SL_ENOTFOUND);
  assert_int_equal(m.allocated, 0);
  assert_int_equal(sl_session_get_memory(ss, -1, &m), SL_ENOTFOUND);
  assert_int_equal(sl_session_get_memory(NULL, 0, &m), SL_EINVAL);
  assert_string_equal(sl_memory_category_name(SL_MEMORY_COMMUNICATION),
                      "communication");
  assert_string_equal(sl_memory_category_name((sl_memory_category)6), "?");
  sl_session_destroy(ss);
  sl_graph_destroy(g);
}

/* The memory table, from a plan file as `sluice plan --memory` prints it. */
static void test_memory_table(void **state) {
  (void)state;
  sl_graph *g = mlp(&specs[2]);
  char pb[] = "/tmp/sluice_test_memory_XXXXXX";
  int fd = mkstemp(pb);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(sl_graph_write_plan(g, SL_PLAN_PROTOBUF, pb), SL_OK);
  char txt[] = "/tmp/sluice_test_memory_txt_XXXXXX";
  fd = mkstemp(txt);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(sl_plan_file_convert(pb, SL_PLAN_MEMORY, txt), SL_OK);
  FILE *f = fopen(txt, "r");
  assert_non_null(f);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  assert_non_null(strstr(buf, "\ncpu:0 "));
  assert_non_null(strstr(buf, "\ncpu:1 "));
  assert_non_null(strstr(buf, "communication"));
  /* The file's plan is the compiled one, memory included. */
  sl__pplan *read = NULL;
  assert_int_equal(sl__pplan_read_file(pb, &read), SL_OK);
  sl__pplan *p = st_lower(g);
  assert_int_equal(read->n_mem, p->n_mem);
  assert_int_equal(read->n_ctrl, p->n_ctrl);
  for (int32_t i = 0; i < p->n_mem; i++)
    assert_memory_equal(&read->mem[i], &p->mem[i], sizeof p->mem[i]);
  for (int32_t i = 0; i < p->n_regsts; i++) {
    assert_int_equal(read->regsts[i].mem, p->regsts[i].mem);
    assert_true(read->regsts[i].offset == p->regsts[i].offset);
  }
  check_sharing(read, NULL);
  sl__pplan_destroy(read);
  sl__pplan_destroy(p);
  unlink(pb);
  unlink(txt);
  sl_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sharing_is_ordered),
      cmocka_unit_test(test_sharing_random),
      cmocka_unit_test(test_sessions_memcheck),
      cmocka_unit_test(test_sharing_off),
      cmocka_unit_test(test_savings_and_api),
      cmocka_unit_test(test_memory_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
