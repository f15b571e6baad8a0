/* The collective engine table (comm/coll/engine.h): a round run through
 * the wrappers gives the collective's result, a bad arrival is refused
 * without a callback, and an abort through the table completes a waiting
 * member with the failure, and every later arrival too. The engines' rounds
 * themselves are tested with their collectives (test_coll.c,
 * test_span_coll.c, test_dev_coll.c and the sessions' tests). */
#include "comm_helpers.h"

#include "engine.h"

static sl__comm *g_comm;
static sl__coll_engine g_engine;

/* An in-process all-reduce of n f32 elements over 3 members. */
static int setup(void **state) {
  (void)state;
  sl__comm_config cfg = {3, 0, NULL};
  if (sl__comm_create(&cfg, &g_comm) != SL_OK) return -1;
  int workers[3] = {0, 1, 2};
  sl__coll_desc d;
  memset(&d, 0, sizeof d);
  d.name = "engine test";
  d.op = SL__COLL_ALL_REDUCE;
  d.dtype = SL_DTYPE_F32;
  d.reduce = SL_REDUCE_SUM;
  d.n = 3;
  d.workers = workers;
  d.block = (sl_shape){1, {5}};
  sl__coll *x = NULL;
  if (sl__coll_create(g_comm, &d, &x) != SL_OK) return -1;
  g_engine = (sl__coll_engine){&sl__coll_engine_inproc, x};
  return 0;
}

static int teardown(void **state) {
  (void)state;
  sl__coll_engine_destroy(&g_engine); /* the comm owns the collective */
  assert_null(g_engine.i);
  sl__comm_destroy(g_comm);
  return 0;
}

static sl__coll_arrival arrival(int member, float *in, float *out, waiter *w) {
  return (sl__coll_arrival){.member = member,
                            .in = in,
                            .in_bytes = 5 * sizeof(float),
                            .out = out,
                            .out_bytes = 5 * sizeof(float),
                            .done = waiter_cb,
                            .arg = w};
}

static void test_round_through_table(void **state) {
  (void)state;
  assert_string_equal(g_engine.i->name, "in-process");
  float in[3][5], out[3][5];
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 5; i++) {
      in[k][i] = (float)(10 * k + i);
      out[k][i] = -1.0f;
    }
  waiter w;
  waiter_init(&w);
  for (int k = 2; k >= 0; k--) {
    sl__coll_arrival a = arrival(k, in[k], out[k], &w);
    assert_int_equal(sl__coll_engine_arrive(&g_engine, &a), SL_OK);
  }
  waiter_wait(&w, 3);
  assert_int_equal(w.failed, 0);
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 5; i++)
      assert_true(out[k][i] == (float)(30 + 3 * i));
  /* A member that is not one, or whose sizes do not match: refused, and
   * no callback. */
  sl__coll_arrival bad = arrival(3, in[0], out[0], &w);
  assert_int_not_equal(sl__coll_engine_arrive(&g_engine, &bad), SL_OK);
  bad = arrival(0, in[0], out[0], &w);
  bad.in_bytes = 4;
  assert_int_not_equal(sl__coll_engine_arrive(&g_engine, &bad), SL_OK);
  assert_int_equal(w.done, 3);
  waiter_fini(&w);
}

static void test_abort_through_table(void **state) {
  (void)state;
  float in[5] = {0}, out[5];
  waiter w;
  waiter_init(&w);
  sl__coll_arrival a = arrival(1, in, out, &w);
  assert_int_equal(sl__coll_engine_arrive(&g_engine, &a), SL_OK);
  sl__coll_engine_abort(&g_engine, SL_ECOMM, "a peer was lost");
  waiter_wait(&w, 1);
  assert_int_equal(w.failed, 1);
  assert_int_equal(w.last, SL_ECOMM);
  /* A later arrival completes at once with the abort's status. */
  a.member = 0;
  assert_int_equal(sl__coll_engine_arrive(&g_engine, &a), SL_OK);
  waiter_wait(&w, 2);
  assert_int_equal(w.failed, 2);
  assert_int_equal(w.last, SL_ECOMM);
  waiter_fini(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_through_table),
      cmocka_unit_test(test_abort_through_table),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
