/* The counting actors (repeat, accumulate, pack, unpack) and variables
 * updated in a loop. */
#include "actor_helpers.h"

static sl_status act_src_i64(sl_act *a) {
  *(int64_t *)a->out[0]->data = a->piece;
  return SL_OK;
}

static sl_status act_src_i32(sl_act *a) {
  *(int32_t *)a->out[0]->data = (int32_t)a->piece;
  return SL_OK;
}

/* Four int32: 4p, 4p+1, 4p+2, 4p+3. */
static sl_status act_src_quad(sl_act *a) {
  int32_t *v = a->out[0]->data;
  for (int i = 0; i < 4; i++)
    v[i] = (int32_t)(4 * a->piece + i);
  return SL_OK;
}

/* A sink that hands each piece to a check function and counts failures. */
typedef bool (*check_fn)(int64_t piece, const void *data, size_t bytes);
typedef struct check_sink {
  check_fn check;
  int64_t next, bad;
} check_sink;

static sl_status act_check(sl_act *a) {
  check_sink *c = a->ctx;
  if (a->in[0]->piece != c->next ||
      !c->check(c->next, a->in[0]->data, a->in[0]->bytes))
    c->bad++;
  c->next++;
  return SL_OK;
}

static sl_actor_id add_check_sink(sl_actor_graph *p, const char *name,
                                  uint32_t dev, check_sink *c) {
  return add_actor(p, name, SL_ACTOR_SINK, 0, dev, 0, act_check, c, 0);
}

static void run_ok(sl_actor_graph *p, uint64_t *discarded) {
  sl_job *job;
  sl_status st = run_plan(p, NULL, &job);
  if (st != SL_OK) fail_msg("run: %s", sl_last_error());
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.in_flight, 0);
  assert_int_equal(s.messages_left, 0);
  if (discarded)
    *discarded = s.discarded;
  else
    assert_int_equal(s.discarded, 0);
  sl_job_destroy(job);
}

/* ---- repeat ---------------------------------------------------------------
 */

static bool check_repeat3(int64_t q, const void *d, size_t n) {
  return *(const int64_t *)d == q / 3;
}

static sl_status act_repeat_tag(sl_act *a) {
  if (a->steps != 3 || a->step < 0 || a->step >= 3)
    return sl_act_fail(a, SL_EINVAL, "step %d of %d", a->step, a->steps);
  *(int64_t *)a->out[0]->data = *(const int64_t *)a->in[0]->data * 10 + a->step;
  return SL_OK;
}

static bool check_repeat_tag(int64_t q, const void *d, size_t n) {
  return *(const int64_t *)d == (q / 3) * 10 + q % 3;
}

static void test_repeat(void **state) {
  for (int custom = 0; custom < 2; custom++) {
    sl_actor_graph *p;
    assert_int_equal(sl_actor_graph_create(&p), SL_OK);
    check_sink c = {custom ? check_repeat_tag : check_repeat3, 0, 0};
    sl_actor_id s =
        add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_src_i64, NULL, 10);
    sl_actor_id r = add_actor(p, "repeat", SL_ACTOR_REPEAT, 0, 1, 0,
                              custom ? act_repeat_tag : NULL, NULL, 3);
    connect_to(p, add_out(p, s, 1, 8), r);
    connect_to(p, add_out(p, r, 2, 8), add_check_sink(p, "sink", 2, &c));
    run_ok(p, NULL);
    assert_int_equal(c.next, 30);
    assert_int_equal(c.bad, 0);
    sl_actor_graph_destroy(p);
  }
}

/* ---- unpack and pack
 * --------------------------------------------------------- */

static bool check_i32_is_piece(int64_t q, const void *d, size_t n) {
  return n == 4 && *(const int32_t *)d == q;
}

static bool check_quad(int64_t q, const void *d, size_t n) {
  const int32_t *v = d;
  for (int i = 0; i < 4; i++)
    if (v[i] != 4 * q + i) return false;
  return n == 16;
}

static void test_unpack_pack(void **state) {
  /* src(quads) -> unpack 4 -> sink: piece q is the integer q. */
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  check_sink c1 = {check_i32_is_piece, 0, 0};
  sl_actor_id s =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_src_quad, NULL, 12);
  sl_actor_id u =
      add_actor(p, "unpack", SL_ACTOR_UNPACK, 0, 1, 0, NULL, NULL, 4);
  connect_to(p, add_out(p, s, 2, 16), u);
  connect_to(p, add_out(p, u, 3, 4), add_check_sink(p, "sink", 0, &c1));
  run_ok(p, NULL);
  assert_int_equal(c1.next, 48);
  assert_int_equal(c1.bad, 0);
  sl_actor_graph_destroy(p);

  /* src(int p) -> pack 4 -> sink: piece q is 4q..4q+3. */
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  check_sink c2 = {check_quad, 0, 0};
  s = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_src_i32, NULL, 20);
  sl_actor_id k = add_actor(p, "pack", SL_ACTOR_PACK, 0, 1, 0, NULL, NULL, 4);
  connect_to(p, add_out(p, s, 2, 4), k);
  connect_to(p, add_out(p, k, 1, 16), add_check_sink(p, "sink", 1, &c2));
  run_ok(p, NULL);
  assert_int_equal(c2.next, 5);
  assert_int_equal(c2.bad, 0);
  sl_actor_graph_destroy(p);
}

/* ---- accumulate
 * ------------------------------------------------------------------- */

static sl_status act_sum(sl_act *a) {
  int64_t *acc = a->out[0]->data;
  int64_t v = *(const int64_t *)a->in[0]->data;
  *acc = a->step == 0 ? v : *acc + v;
  return SL_OK;
}

static bool check_sum5(int64_t q, const void *d, size_t n) {
  int64_t want = 0;
  for (int64_t i = 5 * q; i < 5 * q + 5 && i < 27; i++)
    want += i;
  return *(const int64_t *)d == want;
}

static void test_accumulate_with_partial_tail(void **state) {
  for (int64_t n = 25; n <= 27; n += 2) {
    sl_actor_graph *p;
    assert_int_equal(sl_actor_graph_create(&p), SL_OK);
    check_sink c = {check_sum5, 0, 0};
    sl_actor_id s =
        add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_src_i64, NULL, n);
    sl_actor_id acc =
        add_actor(p, "acc", SL_ACTOR_ACCUMULATE, 0, 1, 0, act_sum, NULL, 5);
    connect_to(p, add_out(p, s, 2, 8), acc);
    connect_to(p, add_out(p, acc, 1, 8), add_check_sink(p, "sink", 2, &c));
    run_ok(p, NULL);
    /* 27 pieces: 5 full groups and a last one of 2 (25 + 26). */
    assert_int_equal(c.next, n == 25 ? 5 : 6);
    assert_int_equal(c.bad, 0);
    sl_actor_graph_destroy(p);
  }
}

/* Micro-batching with gradient accumulation: each batch of 4 numbers is
 * split into micro-batches, each goes through a kernel (+1), and the
 * results are summed back into one piece per batch. */
static sl_status act_plus1_i32(sl_act *a) {
  *(int32_t *)a->out[0]->data = *(const int32_t *)a->in[0]->data + 1;
  return SL_OK;
}

static sl_status act_sum_i32(sl_act *a) {
  int32_t *acc = a->out[0]->data;
  int32_t v = *(const int32_t *)a->in[0]->data;
  *acc = a->step == 0 ? v : *acc + v;
  return SL_OK;
}

static bool check_batch_sum(int64_t q, const void *d, size_t n) {
  /* sum over i of (4q + i + 1) */
  return *(const int32_t *)d == (int32_t)(16 * q + 10);
}

static void test_micro_batching(void **state) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  check_sink c = {check_batch_sum, 0, 0};
  sl_actor_id s =
      add_actor(p, "batches", SL_ACTOR_SOURCE, 0, 0, 0, act_src_quad, NULL, 16);
  sl_actor_id u =
      add_actor(p, "split", SL_ACTOR_UNPACK, 0, 0, 1, NULL, NULL, 4);
  sl_actor_id k =
      add_actor(p, "fwd", SL_ACTOR_KERNEL, 0, 1, 0, act_plus1_i32, NULL, 0);
  sl_actor_id acc = add_actor(p, "grad_acc", SL_ACTOR_ACCUMULATE, 0, 2, 0,
                              act_sum_i32, NULL, 4);
  connect_to(p, add_out(p, s, 2, 16), u);
  connect_to(p, add_out(p, u, 2, 4), k);
  connect_to(p, add_out(p, k, 2, 4), acc);
  connect_to(p, add_out(p, acc, 1, 4), add_check_sink(p, "sink", 3, &c));
  run_ok(p, NULL);
  assert_int_equal(c.next, 16);
  assert_int_equal(c.bad, 0);
  sl_actor_graph_destroy(p);
}

/* ---- variables
 * ---------------------------------------------------------------- */

/* A training loop: "update" owns the weights (a variable, version 0 from
 * init); "forward" reads weights version p with data piece p; "backward"
 * turns forward's output into a gradient; "update" reads the current
 * weights and the gradient and writes the next version. Forward must see
 * exactly version p at piece p: the loop makes it wait for the update. */
typedef struct loop_state {
  int64_t bad;
  int64_t updates;
} loop_state;

static sl_status init_weights(void *ctx, sl_register *r) {
  *(int64_t *)r->data = 1000;
  return SL_OK;
}

static sl_status act_forward(sl_act *a) {
  loop_state *ls = a->ctx;
  const sl_register *x = a->in[0], *w = a->in[1];
  /* Version v of the weights holds 1000 + sum of gradients 0..v-1, and the
   * gradient of piece i is i, so version p holds 1000 + p(p-1)/2. */
  int64_t want = 1000 + a->piece * (a->piece - 1) / 2;
  if (w->piece != a->piece || *(const int64_t *)w->data != want ||
      *(const int64_t *)x->data != a->piece)
    ls->bad++;
  *(int64_t *)a->out[0]->data = *(const int64_t *)x->data;
  return SL_OK;
}

static sl_status act_backward(sl_act *a) {
  *(int64_t *)a->out[0]->data = *(const int64_t *)a->in[0]->data;
  return SL_OK;
}

static sl_status act_update(sl_act *a) {
  loop_state *ls = a->ctx;
  const sl_register *g = a->in[0], *w = a->in[1];
  if (w->piece + 1 != a->piece) ls->bad++;
  *(int64_t *)a->out[0]->data =
      *(const int64_t *)w->data + *(const int64_t *)g->data;
  ls->updates++;
  return SL_OK;
}

static void test_variable_training_loop(void **state) {
  for (int32_t count = 2; count <= 3; count++) {
    sl_actor_graph *p;
    assert_int_equal(sl_actor_graph_create(&p), SL_OK);
    loop_state ls = {0};
    enum { STEPS = 200 };
    sl_actor_id data = add_actor(p, "data", SL_ACTOR_SOURCE, 0, 0, 0,
                                 act_src_i64, NULL, STEPS);
    sl_actor_id fwd =
        add_actor(p, "forward", SL_ACTOR_KERNEL, 0, 1, 0, act_forward, &ls, 0);
    sl_actor_id bwd = add_actor(p, "backward", SL_ACTOR_KERNEL, 0, 2, 0,
                                act_backward, NULL, 0);
    sl_actor_id upd =
        add_actor(p, "update", SL_ACTOR_KERNEL, 0, 3, 0, act_update, &ls, 0);
    sl_regst_desc wd = {"weights", count, 8, -1, 1, init_weights, NULL};
    int32_t w;
    assert_int_equal(sl_actor_graph_add_output(p, upd, &wd, &w), SL_OK);
    connect_to(p, add_out(p, data, 2, 8), fwd); /* forward input 0 */
    connect_to(p, w, fwd);                      /* forward input 1 */
    connect_to(p, add_out(p, fwd, 2, 8), bwd);
    connect_to(p, add_out(p, bwd, 2, 8), upd); /* update input 0 */
    connect_to(p, w, upd);                     /* update input 1 */
    assert_int_equal(sl_actor_graph_check(p), SL_OK);
    uint64_t discarded = 0;
    run_ok(p, &discarded);
    assert_int_equal(ls.bad, 0);
    assert_int_equal(ls.updates, STEPS);
    /* The last version is left unread by both readers. */
    assert_int_equal(discarded, 2);
    sl_actor_graph_destroy(p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_repeat),
      cmocka_unit_test(test_unpack_pack),
      cmocka_unit_test(test_accumulate_with_partial_tail),
      cmocka_unit_test(test_micro_batching),
      cmocka_unit_test(test_variable_training_loop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
