/* The reference executor and the verifier: each step on concrete data,
 * every dtype, the typed element operations, and tampered plans, which must
 * give wrong shards (the executor never looks at the logical tensor). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "sbp_int.h"

static sl_boxing_route *mk(const char *shape, sl_dtype dt, const char *src,
                           const char *ssbp, const char *dst,
                           const char *dsbp) {
  sl_shape sh;
  sl_nd_sbp a, b;
  sl_placement *ps = NULL, *pd = NULL;
  if (sl_shape_parse(shape, &sh) != SL_OK || sl_nd_sbp_parse(ssbp, &a) ||
      sl_nd_sbp_parse(dsbp, &b) || sl_placement_parse(src, &ps) ||
      sl_placement_parse(dst, &pd))
    fail_msg("bad test input: %s", sl_last_error());
  sl_boxing_route *plan = NULL;
  if (sl_boxing_route_create(&sh, dt, ps, &a, pd, &b, NULL, &plan))
    fail_msg("plan: %s", sl_last_error());
  sl_placement_destroy(ps);
  sl_placement_destroy(pd);
  return plan;
}

/* Runs plan on float shards given as rows of doubles (converted to dt) and
 * compares every target shard with want (NAN rows end a shard early). */
#define MAXV 16
static void run(sl_boxing_route *plan, sl_dtype dt, int ns, int nsv,
                const double src[][MAXV], int nt, int ntv,
                const double want[][MAXV]) {
  unsigned char in[8][MAXV * 8], out[8][MAXV * 8];
  const void *inp[8];
  void *outp[8];
  for (int r = 0; r < ns; r++) {
    for (int i = 0; i < nsv; i++)
      sl_store_element(dt, in[r], i, src[r][i]);
    inp[r] = in[r];
  }
  for (int t = 0; t < nt; t++)
    outp[t] = out[t];
  if (sl_boxing_execute(plan, inp, outp) != SL_OK)
    fail_msg("execute: %s", sl_last_error());
  for (int t = 0; t < nt; t++)
    for (int i = 0; i < ntv && !isnan(want[t][i]); i++) {
      double got = sl_load_element(dt, out[t], i);
      if (got != want[t][i])
        fail_msg("target %d element %d: %g, want %g", t, i, got, want[t][i]);
    }
}

static void test_collectives_on_data(void **state) {
  /* all_gather concatenates in group order. */
  sl_boxing_route *p = mk("6", SL_DTYPE_I32, "cpu:0-2", "S(0)", "cpu:0-2", "B");
  run(p, SL_DTYPE_I32, 3, 2, (const double[][MAXV]){{0, 1}, {2, 3}, {4, 5}}, 3,
      6,
      (const double[][MAXV]){
          {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}});
  sl_boxing_route_destroy(p);
  /* reduce_scatter: member k keeps chunk k of the sum. */
  p = mk("4", SL_DTYPE_F32, "cpu:0-1", "P", "cpu:0-1", "S(0)");
  run(p, SL_DTYPE_F32, 2, 4,
      (const double[][MAXV]){{1, 2, 3, 4}, {10, 20, 30, 40}}, 2, 2,
      (const double[][MAXV]){{11, 22}, {33, 44}});
  sl_boxing_route_destroy(p);
  /* all_reduce(max) in i8 with negative values. */
  p = mk("2", SL_DTYPE_I8, "cpu:0-1", "P(max)", "cpu:0-1", "B");
  run(p, SL_DTYPE_I8, 2, 2, (const double[][MAXV]){{-5, 3}, {-7, 9}}, 2, 2,
      (const double[][MAXV]){{-5, 9}, {-5, 9}});
  sl_boxing_route_destroy(p);
  /* all_to_all: row shards become column shards. */
  p = mk("2,2", SL_DTYPE_I32, "cpu:0-1", "S(0)", "cpu:0-1", "S(1)");
  run(p, SL_DTYPE_I32, 2, 2, (const double[][MAXV]){{1, 2}, {3, 4}}, 2, 2,
      (const double[][MAXV]){{1, 3}, {2, 4}});
  sl_boxing_route_destroy(p);
  /* slice: [5] in 2 is 3,2. */
  p = mk("5", SL_DTYPE_F64, "cpu:0-1", "B", "cpu:0-1", "S(0)");
  run(p, SL_DTYPE_F64, 2, 5,
      (const double[][MAXV]){{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}}, 2, 3,
      (const double[][MAXV]){{1, 2, 3}, {4, 5, NAN}});
  sl_boxing_route_destroy(p);
}

static void test_zero_on_data(void **state) {
  /* B -> P: member 0 keeps the value, the others hold 0. */
  sl_boxing_route *p = mk("2", SL_DTYPE_F32, "cpu:0-2", "B", "cpu:0-2", "P");
  run(p, SL_DTYPE_F32, 3, 2, (const double[][MAXV]){{1, 2}, {1, 2}, {1, 2}}, 3,
      2, (const double[][MAXV]){{1, 2}, {0, 0}, {0, 0}});
  sl_boxing_route_destroy(p);
  /* B -> P(min): nothing moves, copies stay. */
  p = mk("2", SL_DTYPE_F32, "cpu:0-1", "B", "cpu:0-1", "P(min)");
  assert_int_equal(sl_boxing_route_step_count(p), 0);
  run(p, SL_DTYPE_F32, 2, 2, (const double[][MAXV]){{1, 2}, {1, 2}}, 2, 2,
      (const double[][MAXV]){{1, 2}, {1, 2}});
  sl_boxing_route_destroy(p);
  /* S -> P(max): padding with -inf; [3] in 2 is 2,1. */
  p = mk("3", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:0-1", "P(max)");
  run(p, SL_DTYPE_F32, 2, 2, (const double[][MAXV]){{1, 2}, {3}}, 2, 3,
      (const double[][MAXV]){{1, 2, -INFINITY}, {-INFINITY, -INFINITY, 3}});
  sl_boxing_route_destroy(p);
  /* S -> P(min) in i32: padding with INT32_MAX. */
  p = mk("2,2", SL_DTYPE_I32, "cpu:0-1", "S(1)", "cpu:0-1", "P(min)");
  run(p, SL_DTYPE_I32, 2, 2, (const double[][MAXV]){{1, 2}, {3, 4}}, 2, 4,
      (const double[][MAXV]){{1, INT32_MAX, 2, INT32_MAX},
                             {INT32_MAX, 3, INT32_MAX, 4}});
  sl_boxing_route_destroy(p);
}

static void test_point_to_point_on_data(void **state) {
  /* Partial pieces are reduced by the receiver. */
  sl_boxing_route *p = mk("3", SL_DTYPE_I64, "cpu:0-1", "P", "cpu:2", "B");
  run(p, SL_DTYPE_I64, 2, 3, (const double[][MAXV]){{1, 2, 3}, {-4, 5, 60}}, 1,
      3, (const double[][MAXV]){{-3, 7, 63}});
  sl_boxing_route_destroy(p);
  /* A partial target's other members hold the identity. */
  p = mk("3", SL_DTYPE_F32, "cpu:0", "B", "cpu:1-2", "P(max)");
  run(p, SL_DTYPE_F32, 1, 3, (const double[][MAXV]){{1, 2, 3}}, 2, 3,
      (const double[][MAXV]){{1, 2, 3}, {-INFINITY, -INFINITY, -INFINITY}});
  sl_boxing_route_destroy(p);
  /* Regrouping rows: [5] from 2 ranks (3,2) to 3 ranks (2,2,1). */
  p = mk("5", SL_DTYPE_U8, "cpu:0-1", "S(0)", "cpu:3-5", "S(0)");
  run(p, SL_DTYPE_U8, 2, 3, (const double[][MAXV]){{1, 2, 3}, {4, 5}}, 3, 2,
      (const double[][MAXV]){{1, 2}, {3, 4}, {5, NAN}});
  sl_boxing_route_destroy(p);
  /* copy keeps partial parts rank for rank. */
  p = mk("2", SL_DTYPE_F32, "cpu:0-1", "P", "cpu:2-3", "P");
  assert_int_equal(sl_boxing_step_op(p, 0), SL_BOXING_COPY);
  run(p, SL_DTYPE_F32, 2, 2, (const double[][MAXV]){{1, 2}, {3, 4}}, 2, 2,
      (const double[][MAXV]){{1, 2}, {3, 4}});
  sl_boxing_route_destroy(p);
}

static void test_every_dtype(void **state) {
  const struct {
    const char *shape, *src, *ssbp, *dst, *dsbp;
  } conv[] = {
      {"5,3", "cpu:0-3", "P", "cpu:0-3", "B"},
      {"5,3", "cpu:0-3", "P(max)", "cpu:0-3", "S(0)"},
      {"5,3", "cpu:0-3", "P(min)", "cpu:0-3", "S(1)"},
      {"5,3", "cpu:0-3", "S(0)", "cpu:0-3", "P(min)"},
      {"5,3", "cpu:0-3", "S(1)", "cpu:0-3", "P(max)"},
      {"5,3", "cpu:0-3", "B", "cpu:0-3", "P"},
      {"5,3", "cpu:0-3", "S(0)", "cpu:0-3", "S(1)"},
      {"5,3", "cpu:0-3[2,2]", "(P,S(0))", "cpu:0-3[2,2]", "(S(1),B)"},
      {"5,3", "cpu:0-3[2,2]", "(P(max),P(max))", "cpu:0-3[2,2]", "(B,S(0))"},
      {"5,3", "cpu:0-3[2,2]", "(P(min),B)", "cpu:4-6", "P(min)"},
      {"5,3", "cpu:0-3[2,2]", "(P,P)", "cpu:1-3", "P(max)"},
      {"5,3", "cpu:0-3", "P(max)", "cpu:2-5[2,2]", "(P,S(1))"},
  };
  for (int dt = 0; dt < SL_DTYPE_COUNT; dt++)
    for (size_t i = 0; i < SL_ARRAY_LEN(conv); i++) {
      sl_boxing_route *p = mk(conv[i].shape, (sl_dtype)dt, conv[i].src,
                              conv[i].ssbp, conv[i].dst, conv[i].dsbp);
      for (uint64_t seed = 0; seed < 4; seed++)
        if (sl_boxing_verify(p, seed, NULL) != SL_OK)
          fail_msg("%s: %s %s -> %s %s: %s", sl_dtype_name((sl_dtype)dt),
                   conv[i].src, conv[i].ssbp, conv[i].dst, conv[i].dsbp,
                   sl_last_error());
      sl_boxing_route_destroy(p);
    }
}

static void test_identity_fill(void **state) {
  unsigned char buf[64];
  struct {
    sl_dtype dt;
    sl_reduce_op op;
    double want;
  } rows[] = {
      {SL_DTYPE_F32, SL_REDUCE_MAX, -INFINITY},
      {SL_DTYPE_F64, SL_REDUCE_MIN, INFINITY},
      {SL_DTYPE_F16, SL_REDUCE_MIN, INFINITY},
      {SL_DTYPE_BF16, SL_REDUCE_MAX, -INFINITY},
      {SL_DTYPE_I8, SL_REDUCE_MAX, INT8_MIN},
      {SL_DTYPE_I8, SL_REDUCE_MIN, INT8_MAX},
      {SL_DTYPE_I32, SL_REDUCE_MAX, INT32_MIN},
      {SL_DTYPE_U8, SL_REDUCE_MAX, 0},
      {SL_DTYPE_U8, SL_REDUCE_MIN, 255},
      {SL_DTYPE_BOOL, SL_REDUCE_MIN, 1},
      {SL_DTYPE_BOOL, SL_REDUCE_MAX, 0},
      {SL_DTYPE_F16, SL_REDUCE_SUM, 0},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(rows); i++) {
    memset(buf, 0x5a, sizeof buf);
    sl__elem_fill_identity(rows[i].dt, rows[i].op, buf, 3);
    for (int k = 0; k < 3; k++)
      assert_true(sl_load_element(rows[i].dt, buf, k) == rows[i].want);
  }
  int64_t v[2];
  sl__elem_fill_identity(SL_DTYPE_I64, SL_REDUCE_MIN, v, 2);
  assert_true(v[0] == INT64_MAX && v[1] == INT64_MAX);
  sl__elem_fill_identity(SL_DTYPE_I64, SL_REDUCE_MAX, v, 2);
  assert_true(v[0] == INT64_MIN && v[1] == INT64_MIN);
}

static void test_elem_reduce(void **state) {
  int32_t a[2] = {INT32_MAX, -3}, b[2] = {1, 5};
  sl__elem_reduce(SL_DTYPE_I32, SL_REDUCE_SUM, a, b, 2);
  assert_int_equal(a[0], INT32_MIN); /* wraps, no UB */
  assert_int_equal(a[1], 2);
  int64_t c[1] = {INT64_MAX}, d[1] = {1};
  sl__elem_reduce(SL_DTYPE_I64, SL_REDUCE_SUM, c, d, 1);
  assert_true(c[0] == INT64_MIN);
  uint8_t u[2] = {250, 7}, w[2] = {10, 9};
  sl__elem_reduce(SL_DTYPE_U8, SL_REDUCE_SUM, u, w, 2);
  assert_int_equal(u[0], 4);
  assert_int_equal(u[1], 16);
  uint8_t p[4] = {0, 1, 0, 1}, q[4] = {0, 0, 1, 1};
  uint8_t r[4];
  memcpy(r, p, 4);
  sl__elem_reduce(SL_DTYPE_BOOL, SL_REDUCE_SUM, r, q, 4);
  assert_memory_equal(r, ((uint8_t[]){0, 1, 1, 1}), 4);
  memcpy(r, p, 4);
  sl__elem_reduce(SL_DTYPE_BOOL, SL_REDUCE_MIN, r, q, 4);
  assert_memory_equal(r, ((uint8_t[]){0, 0, 0, 1}), 4);
  int8_t x[2] = {-128, 5}, y[2] = {-1, -6};
  sl__elem_reduce(SL_DTYPE_I8, SL_REDUCE_MIN, x, y, 2);
  assert_int_equal(x[0], -128);
  assert_int_equal(x[1], -6);
  uint16_t h[2] = {sl_f32_to_f16(1.5f), sl_f32_to_f16(-2.0f)};
  uint16_t k[2] = {sl_f32_to_f16(2.0f), sl_f32_to_f16(-3.0f)};
  sl__elem_reduce(SL_DTYPE_F16, SL_REDUCE_SUM, h, k, 2);
  assert_true(sl_f16_to_f32(h[0]) == 3.5f);
  assert_true(sl_f16_to_f32(h[1]) == -5.0f);
  uint16_t g[1] = {sl_f32_to_bf16(-1.0f)}, m[1] = {sl_f32_to_bf16(4.0f)};
  sl__elem_reduce(SL_DTYPE_BF16, SL_REDUCE_MAX, g, m, 1);
  assert_true(sl_bf16_to_f32(g[0]) == 4.0f);
  double f[1] = {-INFINITY}, e[1] = {-7};
  sl__elem_reduce(SL_DTYPE_F64, SL_REDUCE_MAX, f, e, 1);
  assert_true(f[0] == -7);
}

static void test_box_move(void **state) {
  int32_t src[12], dst[16] = {0};
  for (int i = 0; i < 12; i++)
    src[i] = i; /* 3x4 */
  /* src[1:3, 1:3] -> dst (4x4) at [2, 0]. */
  sl__box_move(SL_DTYPE_I32, 2, dst, (int64_t[]){4, 4}, (int64_t[]){2, 0}, src,
               (int64_t[]){3, 4}, (int64_t[]){1, 1}, (int64_t[]){2, 2}, false,
               SL_REDUCE_SUM);
  int32_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 0, 0, 9, 10, 0, 0};
  assert_memory_equal(dst, want, sizeof want);
  sl__box_move(SL_DTYPE_I32, 2, dst, (int64_t[]){4, 4}, (int64_t[]){2, 0}, src,
               (int64_t[]){3, 4}, (int64_t[]){1, 1}, (int64_t[]){2, 2}, true,
               SL_REDUCE_SUM);
  assert_int_equal(dst[8], 10);
  assert_int_equal(dst[13], 20);
  /* Empty boxes move nothing; scalars move one element. */
  sl__box_move(SL_DTYPE_I32, 2, dst, (int64_t[]){4, 4}, (int64_t[]){0, 0}, src,
               (int64_t[]){3, 4}, (int64_t[]){0, 0}, (int64_t[]){0, 4}, false,
               SL_REDUCE_SUM);
  assert_int_equal(dst[0], 0);
  int32_t s0 = 7, d0 = 1;
  sl__box_move(SL_DTYPE_I32, 0, &d0, NULL, NULL, &s0, NULL, NULL, NULL, true,
               SL_REDUCE_MAX);
  assert_int_equal(d0, 7);
}

/* A tampered plan must fail verification on some seed. */
static void assert_caught(sl_boxing_route *p, const char *what) {
  for (uint64_t seed = 0; seed < 8; seed++) {
    sl_boxing_mismatch mm = {0};
    sl_status st = sl_boxing_verify(p, seed, &mm);
    if (st == SL_EMISMATCH) {
      assert_true(mm.expected != mm.got);
      assert_non_null(strstr(sl_last_error(), "expected"));
      return;
    }
    if (st == SL_EINTERNAL) return;
    assert_int_equal(st, SL_OK);
  }
  fail_msg("tampered plan (%s) passed verification", what);
}

static void test_wrong_plans_give_wrong_shards(void **state) {
  /* all_gather in the wrong member order. */
  sl_boxing_route *p =
      mk("6,2", SL_DTYPE_F32, "cpu:0-2", "S(0)", "cpu:0-2", "B");
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_OK);
  int t = p->steps[0].group_ranks[0];
  p->steps[0].group_ranks[0] = p->steps[0].group_ranks[1];
  p->steps[0].group_ranks[1] = t;
  assert_caught(p, "group order");
  sl_boxing_route_destroy(p);

  /* The wrong reduce op. */
  p = mk("6,2", SL_DTYPE_I32, "cpu:0-2", "P", "cpu:0-2", "B");
  p->steps[0].reduce = SL_REDUCE_MAX;
  assert_caught(p, "reduce op");
  sl_boxing_route_destroy(p);

  /* reduce_scatter where all_reduce belongs: shapes break. */
  p = mk("6,2", SL_DTYPE_I32, "cpu:0-2", "P", "cpu:0-2", "B");
  p->steps[0].op = SL_BOXING_REDUCE_SCATTER;
  p->steps[0].to.sbp[0] = sl_sbp_split(0);
  sl_boxing_mismatch mm;
  assert_int_equal(sl_boxing_verify(p, 1, &mm), SL_EINTERNAL);
  assert_non_null(strstr(sl_last_error(), "target rank"));
  sl_boxing_route_destroy(p);

  /* A missing step. */
  p = mk("7,3", SL_DTYPE_F32, "cpu:0-3[2,2]", "(S(0),S(0))", "cpu:0-3[2,2]",
         "(B,S(0))");
  p->step_count = 2;
  assert_caught(p, "missing step");
  sl_boxing_route_destroy(p);

  /* Pieces sent to the wrong ranks. */
  p = mk("8", SL_DTYPE_F32, "cpu:0-3", "S(0)", "cpu:4-7", "S(0)");
  t = p->steps[0].pieces[0].dst;
  p->steps[0].pieces[0].dst = p->steps[0].pieces[1].dst;
  p->steps[0].pieces[1].dst = t;
  assert_caught(p, "piece destinations");
  sl_boxing_route_destroy(p);

  /* Partial pieces stored instead of reduced. */
  p = mk("4", SL_DTYPE_F32, "cpu:0-2", "P", "cpu:3-4", "S(0)");
  p->steps[0].piece_reduce = false;
  assert_caught(p, "no reduction");
  sl_boxing_route_destroy(p);

  /* A max target's other members left at 0 instead of -inf. */
  p = mk("8", SL_DTYPE_I32, "cpu:0", "B", "cpu:1-3", "P(max)");
  p->steps[0].fill = NULL;
  assert_caught(p, "no identity fill");
  sl_boxing_route_destroy(p);

  /* The layout after a step is not what the step produces. */
  p = mk("6,4", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:0-1", "S(1)");
  p->steps[0].to.sbp[0] = sl_sbp_split(0);
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_EINTERNAL);
  assert_non_null(strstr(sl_last_error(), "do not fit its op"));
  sl_boxing_route_destroy(p);

  /* Out-of-range indices fail cleanly. */
  p = mk("6,4", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:0-1", "B");
  p->steps[0].mesh_axis = 3;
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_EINTERNAL);
  p->steps[0].mesh_axis = 0;
  p->steps[0].group_ranks[1] = 9;
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_EINTERNAL);
  p->steps[0].group_ranks[1] = 1;
  p->steps[0].to.sbp[0] = sl_sbp_split(5);
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_EINTERNAL);
  assert_non_null(strstr(sl_last_error(), "do not fit its placements"));
  sl_boxing_route_destroy(p);
  p = mk("8", SL_DTYPE_F32, "cpu:0-3", "S(0)", "cpu:0-1", "S(0)");
  p->steps[0].pieces[1].src = -2;
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_EINTERNAL);
  p->steps[0].pieces[1].src = 1;
  p->steps[0].pieces[1].slice.start[0] = 7;
  assert_int_equal(sl_boxing_verify(p, 1, NULL), SL_EINTERNAL);
  assert_non_null(strstr(sl_last_error(), "piece outside"));
  sl_boxing_route_destroy(p);
}

static void test_execute_errors(void **state) {
  sl_boxing_route *p = mk("4", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:0-1", "B");
  float a[2] = {0}, b[4], c[4];
  const void *in[2] = {a, NULL};
  void *out[2] = {b, c};
  assert_int_equal(sl_boxing_execute(NULL, in, out), SL_EINVAL);
  assert_int_equal(sl_boxing_execute(p, NULL, out), SL_EINVAL);
  assert_int_equal(sl_boxing_execute(p, in, NULL), SL_EINVAL);
  assert_int_equal(sl_boxing_execute(p, in, out), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "source shard 1"));
  in[1] = a;
  out[1] = NULL;
  assert_int_equal(sl_boxing_execute(p, in, out), SL_EINVAL);
  assert_int_equal(sl_boxing_verify(NULL, 1, NULL), SL_EINVAL);
  sl_boxing_route_destroy(p);
  /* Empty shards may be NULL. */
  p = mk("1", SL_DTYPE_F32, "cpu:0-1", "S(0)", "cpu:0-1", "B");
  const void *in2[2] = {a, NULL};
  assert_int_equal(sl_boxing_execute(p, in2, out), SL_EINVAL); /* out[1] */
  out[1] = c;
  assert_int_equal(sl_boxing_execute(p, in2, out), SL_OK);
  sl_boxing_route_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives_on_data),
      cmocka_unit_test(test_zero_on_data),
      cmocka_unit_test(test_point_to_point_on_data),
      cmocka_unit_test(test_every_dtype),
      cmocka_unit_test(test_identity_fill),
      cmocka_unit_test(test_elem_reduce),
      cmocka_unit_test(test_box_move),
      cmocka_unit_test(test_wrong_plans_give_wrong_shards),
      cmocka_unit_test(test_execute_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
