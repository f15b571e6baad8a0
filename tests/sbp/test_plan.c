/* The boxing planner: the 1-D table's ops and exact bytes (even and uneven
 * splits), P(max)/P(min), nd decomposition, placement changes (copy and
 * send_recv), plan ranks and accessors. Every plan here is also verified
 * with the reference executor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "sbp_int.h"

static sl_placement *place(const char *text) {
  sl_placement *p = NULL;
  if (sl_placement_parse(text, &p) != SL_OK)
    fail_msg("placement '%s': %s", text, sl_last_error());
  return p;
}

static sl_status try_plan(const char *shape, sl_dtype dt, const char *src,
                          const char *ssbp, const char *dst, const char *dsbp,
                          sl_boxing_route **out) {
  sl_shape sh;
  sl_nd_sbp a, b;
  if (sl_shape_parse(shape, &sh) != SL_OK) fail_msg("shape '%s'", shape);
  if (sl_nd_sbp_parse(ssbp, &a) != SL_OK) fail_msg("sbp '%s'", ssbp);
  if (sl_nd_sbp_parse(dsbp, &b) != SL_OK) fail_msg("sbp '%s'", dsbp);
  sl_placement *ps = place(src), *pd = place(dst);
  sl_status st = sl_boxing_route_create(&sh, dt, ps, &a, pd, &b, NULL, out);
  sl_placement_destroy(ps);
  sl_placement_destroy(pd);
  return st;
}

/* Plans and verifies a conversion (on three seeds). */
static sl_boxing_route *mk(const char *shape, sl_dtype dt, const char *src,
                           const char *ssbp, const char *dst,
                           const char *dsbp) {
  sl_boxing_route *plan = NULL;
  if (try_plan(shape, dt, src, ssbp, dst, dsbp, &plan) != SL_OK)
    fail_msg("plan %s %s -> %s %s: %s", src, ssbp, dst, dsbp, sl_last_error());
  for (uint64_t seed = 1; seed <= 3; seed++) {
    sl_boxing_mismatch mm;
    if (sl_boxing_verify(plan, seed, &mm) != SL_OK)
      fail_msg("verify %s %s -> %s %s: %s", src, ssbp, dst, dsbp,
               sl_last_error());
  }
  return plan;
}

/* ops: comma-separated op names, optionally "name@axis". */
static void assert_ops(const sl_boxing_route *plan, const char *ops) {
  char got[256] = "";
  for (int i = 0; i < sl_boxing_route_step_count(plan); i++) {
    char one[40];
    int axis = sl_boxing_step_mesh_axis(plan, i);
    if (axis >= 0 && strchr(ops, '@'))
      snprintf(one, sizeof one, "%s%s@%d", i ? "," : "",
               sl_boxing_op_name(sl_boxing_step_op(plan, i)), axis);
    else
      snprintf(one, sizeof one, "%s%s", i ? "," : "",
               sl_boxing_op_name(sl_boxing_step_op(plan, i)));
    strncat(got, one, sizeof got - strlen(got) - 1);
  }
  if (strcmp(got, ops) != 0) fail_msg("steps '%s', want '%s'", got, ops);
}

static void assert_bytes(const sl_boxing_route *plan, int step, int n,
                         const int64_t *want) {
  assert_int_equal(sl_boxing_route_rank_count(plan), n);
  const int64_t *b = step < 0 ? sl_boxing_route_bytes_sent(plan)
                              : sl_boxing_step_bytes_sent(plan, step);
  for (int r = 0; r < n; r++)
    if (b[r] != want[r])
      fail_msg("step %d rank %d sends %lld bytes, want %lld", step, r,
               (long long)b[r], (long long)want[r]);
}

static void assert_reduce(const sl_boxing_route *plan, int step, int want) {
  sl_reduce_op op;
  bool has = sl_boxing_step_reduce(plan, step, &op);
  if (want < 0)
    assert_false(has);
  else {
    assert_true(has);
    assert_int_equal(op, want);
  }
}

#define BYTES(...) ((const int64_t[]){__VA_ARGS__})

/* One 1-D conversion on cpu:0-3: its single op, reduce op and bytes. */
static void row(const char *shape, const char *from, const char *to,
                const char *op, int reduce, const int64_t *bytes) {
  sl_boxing_route *p = mk(shape, SL_DTYPE_F32, "cpu:0-3", from, "cpu:0-3", to);
  assert_ops(p, op);
  if (*op) {
    assert_reduce(p, 0, reduce);
    assert_bytes(p, 0, 4, bytes);
    assert_int_equal(sl_boxing_step_mesh_axis(p, 0), 0);
    assert_int_equal(sl_boxing_step_group_count(p, 0), 1);
    const int *g;
    assert_int_equal(sl_boxing_step_group(p, 0, 0, &g), 4);
    for (int i = 0; i < 4; i++)
      assert_int_equal(g[i], i);
  }
  assert_bytes(p, -1, 4, bytes);
  sl_boxing_route_destroy(p);
}

/* T = 8*4*4 = 128 bytes, n = 4. */
static void test_table_even(void **state) {
  row("8,4", "P", "B", "all_reduce", SL_REDUCE_SUM, BYTES(192, 192, 192, 192));
  row("8,4", "P", "S(0)", "reduce_scatter", SL_REDUCE_SUM,
      BYTES(96, 96, 96, 96));
  row("8,4", "P", "S(1)", "reduce_scatter", SL_REDUCE_SUM,
      BYTES(96, 96, 96, 96));
  row("8,4", "S(0)", "B", "all_gather", -1, BYTES(96, 96, 96, 96));
  row("8,4", "S(1)", "B", "all_gather", -1, BYTES(96, 96, 96, 96));
  row("8,4", "S(0)", "S(1)", "all_to_all", -1, BYTES(24, 24, 24, 24));
  row("8,4", "S(1)", "S(0)", "all_to_all", -1, BYTES(24, 24, 24, 24));
  row("8,4", "B", "S(0)", "slice", -1, BYTES(0, 0, 0, 0));
  row("8,4", "B", "P", "zero", SL_REDUCE_SUM, BYTES(0, 0, 0, 0));
  row("8,4", "S(0)", "P", "zero", SL_REDUCE_SUM, BYTES(0, 0, 0, 0));
  row("8,4", "S(1)", "P", "zero", SL_REDUCE_SUM, BYTES(0, 0, 0, 0));
  const char *same[] = {"S(0)", "S(1)", "B", "P", "P(max)", "P(min)"};
  for (size_t i = 0; i < SL_ARRAY_LEN(same); i++)
    row("8,4", same[i], same[i], "", -1, BYTES(0, 0, 0, 0));
}

/* [10] f32 in 4: chunks of 3,3,2,2 elements = 12,12,8,8 bytes, T = 40. */
static void test_table_uneven(void **state) {
  /* all_gather: rank r sends T - c[(r+1)%n]. */
  row("10", "S(0)", "B", "all_gather", -1, BYTES(28, 32, 32, 28));
  /* reduce_scatter: rank r sends T - c[r]. */
  row("10", "P", "S(0)", "reduce_scatter", SL_REDUCE_SUM,
      BYTES(28, 28, 32, 32));
  /* all_reduce: the sum of both. */
  row("10", "P", "B", "all_reduce", SL_REDUCE_SUM, BYTES(56, 60, 64, 60));
  /* all_to_all [10,7]: rows 3,3,2,2, columns 2,2,2,1; S(0)->S(1) rank r
   * sends rows_r * (7 - cols_r) * 4, S(1)->S(0) cols_r * (10 - rows_r) * 4. */
  row("10,7", "S(0)", "S(1)", "all_to_all", -1, BYTES(60, 60, 40, 48));
  row("10,7", "S(1)", "S(0)", "all_to_all", -1, BYTES(56, 56, 64, 32));
  /* Empty parts: [2] in 4 parts is 1,1,0,0. */
  row("2", "S(0)", "B", "all_gather", -1, BYTES(4, 8, 8, 4));
  row("2", "B", "S(0)", "slice", -1, BYTES(0, 0, 0, 0));
  /* An empty tensor still takes the table's op. */
  row("0,4", "S(0)", "S(1)", "all_to_all", -1, BYTES(0, 0, 0, 0));
  row("0,4", "P", "S(1)", "reduce_scatter", SL_REDUCE_SUM, BYTES(0, 0, 0, 0));
}

/* The even-split formulas of the table hold for other sizes and dtypes. */
static void test_table_formulas(void **state) {
  const int ns[] = {2, 3, 5, 8};
  for (size_t i = 0; i < SL_ARRAY_LEN(ns); i++) {
    int n = ns[i];
    char p[32], shape[32];
    snprintf(p, sizeof p, "cpu:0-%d", n - 1);
    snprintf(shape, sizeof shape, "%d,%d", 4 * n, 3 * n);
    int64_t t = (int64_t)12 * n * n * 8; /* f64 */
    struct {
      const char *from, *to;
      int64_t bytes;
    } rows[] = {{"P", "B", 2 * t * (n - 1) / n},
                {"P", "S(1)", t * (n - 1) / n},
                {"S(0)", "B", t * (n - 1) / n},
                {"S(0)", "S(1)", t * (n - 1) / ((int64_t)n * n)}};
    for (size_t j = 0; j < SL_ARRAY_LEN(rows); j++) {
      sl_boxing_route *plan =
          mk(shape, SL_DTYPE_F64, p, rows[j].from, p, rows[j].to);
      assert_int_equal(sl_boxing_route_step_count(plan), 1);
      for (int r = 0; r < n; r++)
        assert_int_equal(sl_boxing_route_bytes_sent(plan)[r], rows[j].bytes);
      sl_boxing_route_destroy(plan);
    }
  }
}

static void test_partial_max_min(void **state) {
  /* T = 120 bytes; flat chunks of 8,8,7,7 elements; rows 2,2,1,1. */
  row("6,5", "P(max)", "B", "all_reduce", SL_REDUCE_MAX,
      BYTES(176, 180, 184, 180));
  row("6,5", "P(min)", "S(0)", "reduce_scatter", SL_REDUCE_MIN,
      BYTES(80, 80, 100, 100));
  row("6,5", "S(1)", "P(min)", "zero", SL_REDUCE_MIN, BYTES(0, 0, 0, 0));
  row("6,5", "S(0)", "P(max)", "zero", SL_REDUCE_MAX, BYTES(0, 0, 0, 0));
  /* Copies are valid max/min partials: nothing moves. */
  row("6,5", "B", "P(max)", "", -1, BYTES(0, 0, 0, 0));
  row("6,5", "B", "P(min)", "", -1, BYTES(0, 0, 0, 0));
  /* Between partial kinds through B. */
  row("6,5", "P", "P(max)", "all_reduce", SL_REDUCE_SUM,
      BYTES(176, 180, 184, 180));
  row("6,5", "P(min)", "P(max)", "all_reduce", SL_REDUCE_MIN,
      BYTES(176, 180, 184, 180));
  sl_boxing_route *p =
      mk("6,5", SL_DTYPE_I32, "cpu:0-3", "P(max)", "cpu:0-3", "P");
  assert_ops(p, "all_reduce,zero");
  assert_reduce(p, 0, SL_REDUCE_MAX);
  assert_reduce(p, 1, SL_REDUCE_SUM);
  sl_nd_sbp from, to;
  sl_boxing_step_layout(p, 0, &from, &to);
  assert_int_equal(to.sbp[0].kind, SL_SBP_BROADCAST);
  sl_boxing_route_destroy(p);
}

/* A step's layouts, printed: "from->to". */
static void assert_layout(const sl_boxing_route *plan, int step,
                          const char *want) {
  sl_nd_sbp f, t;
  char a[64], b[64], got[140];
  sl_boxing_step_layout(plan, step, &f, &t);
  sl_nd_sbp_print(&f, a, sizeof a);
  sl_nd_sbp_print(&t, b, sizeof b);
  snprintf(got, sizeof got, "%s->%s", a, b);
  if (strcmp(got, want) != 0)
    fail_msg("step %d layout %s, want %s", step, got, want);
}

static void test_nd_same_axis_split_twice(void **state) {
  /* Gathering axis 0 first is invalid (axis 1 still splits tensor axis 0):
   * the planner gathers axis 1, then axis 0, then slices axis 1. */
  sl_boxing_route *p = mk("7,3", SL_DTYPE_F32, "cpu:0-3[2,2]", "(S(0),S(0))",
                          "cpu:0-3[2,2]", "(B,S(0))");
  assert_ops(p, "all_gather@1,all_gather@0,slice@1");
  assert_layout(p, 0, "(S(0),S(0))->(S(0),B)");
  assert_layout(p, 1, "(S(0),B)->(B,B)");
  assert_layout(p, 2, "(B,B)->(B,S(0))");
  sl_boxing_route_destroy(p);

  p = mk("7,3", SL_DTYPE_F32, "cpu:0-3[2,2]", "(B,S(0))", "cpu:0-3[2,2]",
         "(S(0),S(0))");
  assert_ops(p, "all_gather@1,slice@0,slice@1");
  sl_boxing_route_destroy(p);

  /* The last axis may always change. */
  p = mk("7,3", SL_DTYPE_F32, "cpu:0-5[2,3]", "(S(0),S(0))", "cpu:0-5[2,3]",
         "(S(0),B)");
  assert_ops(p, "all_gather@1");
  sl_boxing_route_destroy(p);
  p = mk("9,2", SL_DTYPE_F32, "cpu:0-5[3,2]", "(S(0),P)", "cpu:0-5[3,2]",
         "(S(0),S(0))");
  assert_ops(p, "reduce_scatter@1");
  sl_boxing_route_destroy(p);
  /* A later split of another tensor axis does not block axis 0. */
  p = mk("7,5", SL_DTYPE_F32, "cpu:0-5[2,3]", "(S(0),S(1))", "cpu:0-5[2,3]",
         "(B,S(1))");
  assert_ops(p, "all_gather@0");
  sl_boxing_route_destroy(p);
  p = mk("7,5", SL_DTYPE_F32, "cpu:0-5[2,3]", "(S(0),S(1))", "cpu:0-5[2,3]",
         "(S(1),S(0))");
  for (int i = 0; i < sl_boxing_route_step_count(p); i++)
    assert_int_not_equal(sl_boxing_step_op(p, i), SL_BOXING_SEND_RECV);
  sl_boxing_route_destroy(p);
}

/* A mesh axis of extent 1 holds the whole block on its single member: any
 * change there is a relabel, with no step and no ordering constraint. */
static void test_extent_one_axis_is_free(void **state) {
  sl_boxing_route *p = mk("8,6", SL_DTYPE_F32, "cpu:0-3[1,4]", "(S(0),S(0))",
                          "cpu:0-3[1,4]", "(B,S(0))");
  assert_ops(p, "");
  sl_boxing_route_destroy(p);
  p = mk("8,6", SL_DTYPE_F32, "cpu:0-3[4,1]", "(S(0),P)", "cpu:0-3[4,1]",
         "(B,P(max))");
  assert_ops(p, "all_gather@0");
  sl_boxing_route_destroy(p);
  p = mk("5", SL_DTYPE_I32, "cpu:0", "P", "cpu:0", "S(0)");
  assert_ops(p, "");
  sl_boxing_route_destroy(p);
}

static void test_nd_groups_and_bytes(void **state) {
  /* Axis 0 of [2,3] runs on columns, axis 1 on rows. */
  sl_boxing_route *p =
      mk("6,6", SL_DTYPE_F32, "cpu:0-5[2,3]", "(P,B)", "cpu:0-5[2,3]", "(B,B)");
  assert_ops(p, "all_reduce@0");
  assert_int_equal(sl_boxing_step_group_count(p, 0), 3);
  const int *g;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(sl_boxing_step_group(p, 0, i, &g), 2);
    assert_int_equal(g[0], i);
    assert_int_equal(g[1], i + 3);
  }
  /* T = 144 bytes, n = 2: 2T(n-1)/n = 144. */
  assert_bytes(p, 0, 6, BYTES(144, 144, 144, 144, 144, 144));
  sl_boxing_route_destroy(p);

  p = mk("6,6", SL_DTYPE_F32, "cpu:0-5[2,3]", "(B,S(1))", "cpu:0-5[2,3]",
         "(B,B)");
  assert_ops(p, "all_gather@1");
  assert_int_equal(sl_boxing_step_group_count(p, 0), 2);
  assert_int_equal(sl_boxing_step_group(p, 0, 1, &g), 3);
  assert_int_equal(g[0], 3);
  assert_int_equal(g[2], 5);
  assert_bytes(p, 0, 6, BYTES(96, 96, 96, 96, 96, 96));
  sl_boxing_route_destroy(p);

  /* T is the group's block: rows 3 and 2 of [5,6] for the two groups of
   * axis 1; columns split 3,3. */
  p = mk("5,6", SL_DTYPE_F32, "cpu:0-3[2,2]", "(S(0),S(1))", "cpu:0-3[2,2]",
         "(S(0),B)");
  assert_ops(p, "all_gather@1");
  assert_bytes(p, 0, 4, BYTES(36, 36, 24, 24));
  sl_boxing_route_destroy(p);

  /* Both axes partial: two all_reduces, one per axis. */
  p = mk("4,4", SL_DTYPE_F32, "cpu:0-3[2,2]", "(P,P)", "cpu:0-3[2,2]", "(B,B)");
  assert_int_equal(sl_boxing_route_step_count(p), 2);
  assert_int_equal(sl_boxing_step_op(p, 0), SL_BOXING_ALL_REDUCE);
  assert_int_equal(sl_boxing_step_op(p, 1), SL_BOXING_ALL_REDUCE);
  assert_int_not_equal(sl_boxing_step_mesh_axis(p, 0),
                       sl_boxing_step_mesh_axis(p, 1));
  sl_boxing_route_destroy(p);

  /* (P,P) -> (S(0),S(1)): reduce_scatter on each axis, no all_reduce. */
  p = mk("4,4", SL_DTYPE_F32, "cpu:0-3[2,2]", "(P,P)", "cpu:0-3[2,2]",
         "(S(0),S(1))");
  for (int i = 0; i < sl_boxing_route_step_count(p); i++)
    assert_int_equal(sl_boxing_step_op(p, i), SL_BOXING_REDUCE_SCATTER);
  sl_boxing_route_destroy(p);
}

static void test_nd_partial_kinds(void **state) {
  /* (P, P(max)) is never an intermediate state. */
  sl_boxing_route *p = mk("4,3", SL_DTYPE_I32, "cpu:0-3[2,2]", "(P,B)",
                          "cpu:0-3[2,2]", "(B,P(max))");
  assert_ops(p, "all_reduce@0");
  assert_reduce(p, 0, SL_REDUCE_SUM);
  sl_boxing_route_destroy(p);
  p = mk("4,3", SL_DTYPE_F32, "cpu:0-3[2,2]", "(P(min),P(min))", "cpu:0-3[2,2]",
         "(P,S(1))");
  for (int i = 0; i < sl_boxing_route_step_count(p); i++) {
    sl_nd_sbp f, t;
    sl_boxing_step_layout(p, i, &f, &t);
    sl_reduce_op a, b;
    if (sl__nd_sbp_partial_op(&t, &a)) {
      for (int k = 0; k < t.ndim; k++)
        if (t.sbp[k].kind == SL_SBP_PARTIAL) {
          b = t.sbp[k].reduce;
          assert_int_equal(a, b);
        }
    }
  }
  sl_boxing_route_destroy(p);
  p = mk("4,3", SL_DTYPE_I8, "cpu:0-3[2,2]", "(S(0),B)", "cpu:0-3[2,2]",
         "(P(max),P(max))");
  assert_ops(p, "zero@0");
  assert_reduce(p, 0, SL_REDUCE_MAX);
  sl_boxing_route_destroy(p);
}

static void test_copy(void **state) {
  sl_boxing_route *p =
      mk("8", SL_DTYPE_F32, "cpu:0-3", "S(0)", "cpu:4-7", "S(0)");
  assert_ops(p, "copy");
  assert_bytes(p, 0, 8, BYTES(8, 8, 8, 8, 0, 0, 0, 0));
  assert_int_equal(sl_boxing_step_mesh_axis(p, 0), -1);
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 4);
  int src, dst, node, dev;
  sl_slice s;
  bool red;
  assert_int_equal(sl_boxing_step_piece(p, 0, 3, &src, &dst, &s, &red), SL_OK);
  assert_int_equal(src, 3);
  assert_int_equal(dst, 7);
  assert_int_equal(s.start[0], 6);
  assert_int_equal(s.extent[0], 2);
  assert_false(red);
  sl_boxing_route_rank_device(p, 5, &node, &dev);
  assert_int_equal(node, 0);
  assert_int_equal(dev, 5);
  sl_boxing_route_destroy(p);

  /* Overlapping devices: a shard that stays on its device costs nothing. */
  p = mk("8", SL_DTYPE_F32, "cpu:0-3", "S(0)", "cpu:2,3,0,1", "S(0)");
  assert_ops(p, "copy");
  assert_bytes(p, 0, 4, BYTES(8, 8, 8, 8));
  sl_boxing_route_destroy(p);
  p = mk("8", SL_DTYPE_F32, "cpu:0-3", "S(0)", "cpu:0,1,7,3", "S(0)");
  assert_bytes(p, 0, 5, BYTES(0, 0, 8, 0, 0));
  sl_boxing_route_destroy(p);
  /* Partial layouts copy rank for rank. */
  p = mk("3,3", SL_DTYPE_I64, "cpu:0-3[2,2]", "(P(min),S(1))", "cpu:4-7[2,2]",
         "(P(min),S(1))");
  assert_ops(p, "copy");
  assert_reduce(p, 0, -1);
  sl_boxing_route_destroy(p);
}

static void test_send_recv(void **state) {
  /* Fewer ranks: target 0 (device 0) keeps its own half. */
  sl_boxing_route *p =
      mk("8", SL_DTYPE_F32, "cpu:0-3", "S(0)", "cpu:0-1", "S(0)");
  assert_ops(p, "send_recv");
  assert_bytes(p, 0, 4, BYTES(0, 8, 8, 8));
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 4);
  assert_int_equal(sl_boxing_step_group_count(p, 0), 1);
  assert_reduce(p, 0, -1);
  sl_boxing_route_destroy(p);

  /* Broadcast sources: the copy on the target's device, else the least
   * loaded one. */
  p = mk("8", SL_DTYPE_F32, "cpu:0-1", "B", "cpu:0-3", "S(0)");
  assert_bytes(p, 0, 4, BYTES(8, 8, 0, 0));
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 4);
  sl_boxing_route_destroy(p);

  /* Partial sources: each receiver reduces a piece from every part. */
  p = mk("5", SL_DTYPE_I32, "cpu:0-1", "P", "cpu:0-2", "B");
  assert_ops(p, "send_recv");
  assert_reduce(p, 0, SL_REDUCE_SUM);
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 6);
  bool red = false;
  assert_int_equal(sl_boxing_step_piece(p, 0, 0, NULL, NULL, NULL, &red),
                   SL_OK);
  assert_true(red);
  sl_reduce_op op;
  for (int r = 0; r < 3; r++) {
    assert_true(sl_boxing_step_fill(p, 0, r, &op));
    assert_int_equal(op, SL_REDUCE_SUM);
  }
  assert_bytes(p, 0, 3, BYTES(40, 40, 0));
  sl_boxing_route_destroy(p);

  /* Partial targets: one receiver per partial group, the others hold the
   * identity. */
  p = mk("6", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:2-3", "P(max)");
  assert_reduce(p, 0, SL_REDUCE_MAX);
  assert_false(sl_boxing_step_fill(p, 0, 2, &op));
  assert_true(sl_boxing_step_fill(p, 0, 3, &op));
  assert_int_equal(op, SL_REDUCE_MAX);
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 2);
  assert_bytes(p, 0, 4, BYTES(12, 12, 0, 0));
  sl_boxing_route_destroy(p);

  /* Another mesh on the same devices. */
  p = mk("5,7", SL_DTYPE_BF16, "cpu:0-3[2,2]", "(S(0),S(1))", "cpu:0-3",
         "S(0)");
  assert_ops(p, "send_recv");
  assert_int_equal(sl_boxing_route_rank_count(p), 4);
  sl_boxing_route_destroy(p);
  p = mk("5,7", SL_DTYPE_U8, "cpu:0-3[2,2]", "(P,B)", "cpu:0-3[4,1]",
         "(S(1),P)");
  assert_ops(p, "send_recv");
  sl_boxing_route_destroy(p);

  /* Other nodes and a different rank count. */
  p = mk("4,9", SL_DTYPE_F16, "cpu:0-1/0-1", "(S(1))", "cpu:1-2/1,5,6", "S(0)");
  assert_ops(p, "send_recv");
  /* Sources: (0,0) (0,1) (1,0) (1,1); new: (1,5) (1,6) (2,1) (2,5) (2,6). */
  assert_int_equal(sl_boxing_route_rank_count(p), 9);
  int node, dev;
  sl_boxing_route_rank_device(p, 4, &node, &dev);
  assert_int_equal(node, 1);
  assert_int_equal(dev, 5);
  sl_boxing_route_rank_device(p, 6, &node, &dev);
  assert_int_equal(node, 2);
  assert_int_equal(dev, 1);
  sl_boxing_route_destroy(p);

  /* A scalar. */
  p = mk("", SL_DTYPE_F64, "cpu:0-2", "P(min)", "cpu:3", "B");
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 3);
  sl_boxing_route_destroy(p);
}

/* Between device types no device is shared: cpu:0-1 -> cuda:0-1 moves
 * every shard (a copy when the layouts match, send_recv otherwise), and the
 * target's ranks follow the source's with their own type. */
static void test_across_device_types(void **state) {
  sl_boxing_route *p =
      mk("4", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cuda:0-1", "S(0)");
  assert_int_equal(sl_boxing_route_rank_count(p), 4);
  assert_int_equal(sl_boxing_route_step_count(p), 1);
  assert_int_equal(sl_boxing_step_op(p, 0), SL_BOXING_COPY);
  for (int q = 0; q < 4; q++) {
    int node, dev;
    sl_boxing_route_rank_device(p, q, &node, &dev);
    assert_int_equal(dev, q % 2);
    assert_int_equal(sl_boxing_route_rank_device_type(p, q),
                     q < 2 ? SL_DEVICE_CPU : SL_DEVICE_CUDA);
  }
  sl_boxing_route_destroy(p);
  p = mk("4", SL_DTYPE_F32, "cuda:0-1", "P", "cpu:0", "B");
  assert_int_equal(sl_boxing_route_rank_count(p), 3);
  assert_int_equal(sl_boxing_step_op(p, 0), SL_BOXING_SEND_RECV);
  assert_int_equal(sl_boxing_route_rank_device_type(p, 2), SL_DEVICE_CPU);
  sl_boxing_route_destroy(p);
}

static void test_errors(void **state) {
  sl_boxing_route *p = (sl_boxing_route *)1;
  assert_int_equal(
      try_plan("4", SL_DTYPE_F32, "cpu:0-1", "S(1)", "cpu:0-1", "B", &p),
      SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "boxing source: "));
  assert_int_equal(
      try_plan("4", SL_DTYPE_F32, "cpu:0-1", "B", "cpu:0-3[2,2]", "B", &p),
      SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "boxing target: "));
  assert_int_equal(
      try_plan("4", (sl_dtype)42, "cpu:0-1", "B", "cpu:0-1", "B", &p),
      SL_EINVAL);
  sl_shape sh = {1, {4}};
  sl_nd_sbp b = {1, {{SL_SBP_BROADCAST, 0, SL_REDUCE_SUM}}};
  sl_placement *pl = place("cpu:0-1");
  assert_int_equal(
      sl_boxing_route_create(NULL, SL_DTYPE_F32, pl, &b, pl, &b, NULL, &p),
      SL_EINVAL);
  assert_int_equal(
      sl_boxing_route_create(&sh, SL_DTYPE_F32, pl, &b, NULL, &b, NULL, &p),
      SL_EINVAL);
  assert_int_equal(
      sl_boxing_route_create(&sh, SL_DTYPE_F32, pl, &b, pl, &b, NULL, NULL),
      SL_EINVAL);
  sh.dims[0] = -1;
  assert_int_equal(
      sl_boxing_route_create(&sh, SL_DTYPE_F32, pl, &b, pl, &b, NULL, &p),
      SL_EINVAL);
  sl_placement_destroy(pl);
  sl_boxing_route_destroy(NULL);
}

static void test_accessors_out_of_range(void **state) {
  sl_boxing_route *p = mk("4", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:0-1", "B");
  assert_int_equal(sl_boxing_route_step_count(p), 1);
  assert_int_equal((int)sl_boxing_step_op(p, 1), -1);
  assert_int_equal(sl_boxing_step_mesh_axis(p, -1), -1);
  assert_false(sl_boxing_step_reduce(p, 7, NULL));
  assert_int_equal(sl_boxing_step_group_count(p, 1), 0);
  const int *g = (const int *)1;
  assert_int_equal(sl_boxing_step_group(p, 0, 1, &g), 0);
  assert_null(g);
  assert_null(sl_boxing_step_bytes_sent(p, 1));
  assert_true(sl_boxing_step_predicted_us(p, 1) == 0.0);
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 0);
  assert_int_equal(sl_boxing_step_piece(p, 0, 0, NULL, NULL, NULL, NULL),
                   SL_EINVAL);
  assert_false(sl_boxing_step_fill(p, 0, 0, NULL));
  int node, dev;
  sl_boxing_route_rank_device(p, 2, &node, &dev);
  assert_int_equal(node, -1);
  assert_int_equal(dev, -1);
  sl_nd_sbp f, t;
  sl_boxing_step_layout(p, 3, &f, &t);
  assert_int_equal(f.ndim, 0);
  sl_boxing_route_destroy(p);
}

/* Planning stays cheap on large placements; send_recv that would need an
 * unlistable number of pieces is refused. */
static void test_large_placements(void **state) {
  uint64_t t0 = sl__now_ns();
  sl_boxing_route *p = NULL;
  assert_int_equal(try_plan("65536,2", SL_DTYPE_F32,
                            "cuda:0-255/0-255[256,256]", "(S(0),P)",
                            "cuda:0-255/0-255[256,256]", "(S(1),S(0))", &p),
                   SL_OK);
  for (int i = 0; i < sl_boxing_route_step_count(p); i++)
    assert_int_not_equal(sl_boxing_step_op(p, i), SL_BOXING_SEND_RECV);
  sl_boxing_route_destroy(p);
  assert_int_equal(try_plan("65536", SL_DTYPE_F32, "cpu:0-65535", "S(0)",
                            "cpu:0-32767", "S(0)", &p),
                   SL_OK);
  assert_int_equal(sl_boxing_step_piece_count(p, 0), 65536);
  sl_boxing_route_destroy(p);
  assert_int_equal(
      try_plan("8", SL_DTYPE_F32, "cpu:0-4095", "P", "cpu:4096-8191", "B", &p),
      SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "pieces"));
  double secs = (double)(sl__now_ns() - t0) / 1e9;
  if (secs > 20) fail_msg("large plans took %.1f s", secs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_even),
      cmocka_unit_test(test_table_uneven),
      cmocka_unit_test(test_table_formulas),
      cmocka_unit_test(test_partial_max_min),
      cmocka_unit_test(test_nd_same_axis_split_twice),
      cmocka_unit_test(test_extent_one_axis_is_free),
      cmocka_unit_test(test_nd_groups_and_bytes),
      cmocka_unit_test(test_nd_partial_kinds),
      cmocka_unit_test(test_copy),
      cmocka_unit_test(test_send_recv),
      cmocka_unit_test(test_across_device_types),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_accessors_out_of_range),
      cmocka_unit_test(test_large_placements),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
