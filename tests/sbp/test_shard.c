/* Shard geometry: balanced split ranges (uneven, empty parts), local slices
 * on 1-D and 2-D meshes (the same tensor axis split twice included), slice
 * intersection, and the mesh walks behind the planner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "sbp_int.h"

static sl_placement *place(const char *text) {
  sl_placement *p = NULL;
  if (sl_placement_parse(text, &p) != SL_OK)
    fail_msg("placement '%s': %s", text, sl_last_error());
  return p;
}

static sl_shape shape_of(const char *text) {
  sl_shape s;
  if (sl_shape_parse(text, &s) != SL_OK)
    fail_msg("shape '%s': %s", text, sl_last_error());
  return s;
}

static sl_nd_sbp sbp_of(const char *text) {
  sl_nd_sbp s;
  if (sl_nd_sbp_parse(text, &s) != SL_OK)
    fail_msg("sbp '%s': %s", text, sl_last_error());
  return s;
}

static void assert_range(int64_t len, int n, int i, int64_t start,
                         int64_t extent) {
  int64_t s = -1, e = -1;
  sl_split_range(len, n, i, &s, &e);
  if (s != start || e != extent)
    fail_msg("split %lld in %d, part %d: [%lld +%lld], want [%lld +%lld]",
             (long long)len, n, i, (long long)s, (long long)e, (long long)start,
             (long long)extent);
}

static void test_split_range(void **state) {
  for (int i = 0; i < 4; i++)
    assert_range(8, 4, i, 2 * i, 2);
  /* Uneven: the first len % n parts get one more. */
  assert_range(10, 4, 0, 0, 3);
  assert_range(10, 4, 1, 3, 3);
  assert_range(10, 4, 2, 6, 2);
  assert_range(10, 4, 3, 8, 2);
  /* Fewer elements than parts: trailing parts are empty. */
  assert_range(2, 4, 0, 0, 1);
  assert_range(2, 4, 1, 1, 1);
  assert_range(2, 4, 2, 2, 0);
  assert_range(2, 4, 3, 2, 0);
  assert_range(0, 3, 1, 0, 0);
  assert_range(7, 1, 0, 0, 7);
  /* Out-of-range arguments give an empty range. */
  assert_range(8, 4, 4, 0, 0);
  assert_range(8, 4, -1, 0, 0);
  assert_range(8, 0, 0, 0, 0);
  assert_range(-3, 2, 0, 0, 0);
  /* Large extents stay exact. */
  assert_range(INT64_C(1) << 40, 3, 2, ((INT64_C(1) << 40) / 3) * 2 + 1,
               (INT64_C(1) << 40) / 3);
}

static void test_split_part_of(void **state) {
  for (int64_t len = 1; len <= 20; len++)
    for (int n = 1; n <= 9; n++)
      for (int i = 0; i < n; i++) {
        int64_t s, e;
        sl_split_range(len, n, i, &s, &e);
        for (int64_t x = s; x < s + e; x++)
          assert_int_equal(sl__split_part_of(len, n, x), i);
      }
}

static void assert_slice(const sl_slice *s, int ndim, const int64_t *start,
                         const int64_t *extent) {
  assert_int_equal(s->ndim, ndim);
  for (int d = 0; d < ndim; d++) {
    assert_int_equal(s->start[d], start[d]);
    assert_int_equal(s->extent[d], extent[d]);
  }
}

static void local(const char *shape, const char *p, const char *sbp, int rank,
                  sl_slice *out) {
  sl_shape s = shape_of(shape);
  sl_placement *pl = place(p);
  sl_nd_sbp nd = sbp_of(sbp);
  assert_int_equal(sl_nd_sbp_check(&nd, pl, &s), SL_OK);
  if (sl_local_slice(&s, pl, &nd, rank, out) != SL_OK)
    fail_msg("local slice: %s", sl_last_error());
  sl_placement_destroy(pl);
}

static void test_local_slice_1d(void **state) {
  sl_slice s;
  local("10,3", "cpu:0-3", "S(0)", 2, &s);
  assert_slice(&s, 2, (int64_t[]){6, 0}, (int64_t[]){2, 3});
  local("10,3", "cpu:0-3", "S(1)", 0, &s);
  assert_slice(&s, 2, (int64_t[]){0, 0}, (int64_t[]){10, 1});
  local("10,3", "cpu:0-3", "S(1)", 3, &s);
  assert_slice(&s, 2, (int64_t[]){0, 3}, (int64_t[]){10, 0});
  assert_int_equal(sl_slice_numel(&s), 0);
  /* B and P hold the whole part. */
  local("10,3", "cpu:0-3", "B", 1, &s);
  assert_slice(&s, 2, (int64_t[]){0, 0}, (int64_t[]){10, 3});
  local("10,3", "cpu:0-3", "P(max)", 3, &s);
  assert_slice(&s, 2, (int64_t[]){0, 0}, (int64_t[]){10, 3});
  /* A scalar is one element everywhere. */
  local("", "cpu:0-1", "P", 1, &s);
  assert_int_equal(s.ndim, 0);
  assert_int_equal(sl_slice_numel(&s), 1);
}

static void test_local_slice_2d(void **state) {
  sl_slice s;
  /* Row-major mesh: rank 4 of [2,3] is (1,1). */
  local("7,5", "cpu:0-5[2,3]", "(S(0),S(1))", 4, &s);
  assert_slice(&s, 2, (int64_t[]){4, 2}, (int64_t[]){3, 2});
  local("7,5", "cpu:0-5[2,3]", "(S(1),B)", 4, &s);
  assert_slice(&s, 2, (int64_t[]){0, 3}, (int64_t[]){7, 2});
  local("7,5", "cpu:0-5[2,3]", "(P,S(0))", 5, &s);
  assert_slice(&s, 2, (int64_t[]){5, 0}, (int64_t[]){2, 5});
  /* The same axis split twice: 10 -> 5,5 -> each 2,2,1. */
  local("10", "cpu:0-5[2,3]", "(S(0),S(0))", 5, &s);
  assert_slice(&s, 1, (int64_t[]){9}, (int64_t[]){1});
  local("10", "cpu:0-5[2,3]", "(S(0),S(0))", 3, &s);
  assert_slice(&s, 1, (int64_t[]){5}, (int64_t[]){2});
  /* 7 -> 4,3 -> (2,1,1),(1,1,1): not the same as splitting 7 in 6. */
  local("7", "cpu:0-5[2,3]", "(S(0),S(0))", 2, &s);
  assert_slice(&s, 1, (int64_t[]){3}, (int64_t[]){1});
  local("7", "cpu:0-5[2,3]", "(S(0),S(0))", 3, &s);
  assert_slice(&s, 1, (int64_t[]){4}, (int64_t[]){1});
  /* Empty parts in a 2-D split: 2 -> 1,1 -> (1,0,0),(1,0,0). */
  local("2", "cpu:0-5[2,3]", "(S(0),S(0))", 4, &s);
  assert_int_equal(sl_slice_numel(&s), 0);
  local("2", "cpu:0-5[2,3]", "(S(0),S(0))", 3, &s);
  assert_slice(&s, 1, (int64_t[]){1}, (int64_t[]){1});
}

/* Split-only layouts tile the tensor: every element is held exactly once. */
static void test_slices_tile(void **state) {
  const char *sbps[] = {"(S(0),S(0))", "(S(0),S(1))", "(S(1),S(0))",
                        "(S(1),S(1))"};
  const char *shapes[] = {"7,5", "2,9", "0,4", "6,1"};
  sl_placement *p = place("cpu:0-5[2,3]");
  for (size_t a = 0; a < SL_ARRAY_LEN(sbps); a++)
    for (size_t b = 0; b < SL_ARRAY_LEN(shapes); b++) {
      sl_shape sh = shape_of(shapes[b]);
      sl_nd_sbp nd = sbp_of(sbps[a]);
      int count[100] = {0};
      for (int r = 0; r < 6; r++) {
        sl_slice s;
        assert_int_equal(sl_local_slice(&sh, p, &nd, r, &s), SL_OK);
        for (int64_t i = 0; i < s.extent[0]; i++)
          for (int64_t j = 0; j < s.extent[1]; j++)
            count[(s.start[0] + i) * sh.dims[1] + s.start[1] + j]++;
      }
      for (int64_t i = 0; i < sl_shape_numel(&sh); i++)
        assert_int_equal(count[i], 1);
    }
  sl_placement_destroy(p);
}

static void test_local_slice_errors(void **state) {
  sl_placement *p = place("cpu:0-3");
  sl_shape sh = shape_of("4,4");
  sl_nd_sbp nd = sbp_of("S(0)");
  sl_slice s;
  assert_int_equal(sl_local_slice(&sh, p, &nd, 4, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "rank 4"));
  assert_int_equal(sl_local_slice(&sh, p, &nd, -1, &s), SL_EINVAL);
  nd = sbp_of("S(2)");
  assert_int_equal(sl_local_slice(&sh, p, &nd, 0, &s), SL_EINVAL);
  nd = sbp_of("(B,B)");
  assert_int_equal(sl_local_slice(&sh, p, &nd, 0, &s), SL_EINVAL);
  assert_int_equal(sl_local_slice(NULL, p, &nd, 0, &s), SL_EINVAL);
  sl_placement_destroy(p);
}

static sl_slice box(int ndim, const int64_t *start, const int64_t *extent) {
  sl_slice s;
  memset(&s, 0, sizeof s);
  s.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    s.start[d] = start[d];
    s.extent[d] = extent[d];
  }
  return s;
}

static void test_intersect(void **state) {
  sl_slice a = box(2, (int64_t[]){0, 0}, (int64_t[]){4, 6});
  sl_slice b = box(2, (int64_t[]){2, 3}, (int64_t[]){5, 5});
  sl_slice r;
  assert_true(sl_slice_intersect(&a, &b, &r));
  assert_slice(&r, 2, (int64_t[]){2, 3}, (int64_t[]){2, 3});
  assert_int_equal(sl_slice_numel(&r), 6);
  assert_true(sl_slice_intersect(&b, &a, &r));
  assert_slice(&r, 2, (int64_t[]){2, 3}, (int64_t[]){2, 3});
  /* Touching boxes do not overlap. */
  sl_slice c = box(2, (int64_t[]){4, 0}, (int64_t[]){2, 6});
  assert_false(sl_slice_intersect(&a, &c, &r));
  assert_int_equal(r.ndim, 2);
  assert_int_equal(sl_slice_numel(&r), 0);
  /* An empty box meets nothing, even inside another. */
  sl_slice e = box(2, (int64_t[]){1, 1}, (int64_t[]){0, 3});
  assert_false(sl_slice_intersect(&a, &e, &r));
  assert_false(sl_slice_intersect(&e, &e, &r));
  /* Containment. */
  sl_slice in = box(2, (int64_t[]){1, 1}, (int64_t[]){1, 2});
  assert_true(sl_slice_intersect(&a, &in, &r));
  assert_slice(&r, 2, (int64_t[]){1, 1}, (int64_t[]){1, 2});
  /* Different ranks never intersect; scalars always do. */
  sl_slice one = box(1, (int64_t[]){0}, (int64_t[]){4});
  assert_false(sl_slice_intersect(&a, &one, &r));
  sl_slice s0 = box(0, NULL, NULL);
  assert_true(sl_slice_intersect(&s0, &s0, &r));
  assert_int_equal(sl_slice_numel(&r), 1);
}

static void test_mesh_walks(void **state) {
  sl_placement *p = place("cpu:0-5[2,3]");
  int out[6];
  /* Free axis 1 through rank 4 = (1,1): (1,0),(1,1),(1,2). */
  assert_int_equal(sl__mesh_ranks(p, 4, 2u, out), 3);
  assert_int_equal(out[0], 3);
  assert_int_equal(out[1], 4);
  assert_int_equal(out[2], 5);
  assert_int_equal(sl__mesh_ranks(p, 4, 1u, out), 2);
  assert_int_equal(out[0], 1);
  assert_int_equal(out[1], 4);
  assert_int_equal(sl__mesh_ranks(p, 4, 3u, out), 6);
  for (int i = 0; i < 6; i++)
    assert_int_equal(out[i], i);
  assert_int_equal(sl__mesh_ranks(p, 4, 0u, out), 1);
  assert_int_equal(out[0], 4);
  assert_int_equal(sl__mesh_stride(p, 0), 3);
  assert_int_equal(sl__mesh_stride(p, 1), 1);
  sl_nd_sbp nd = sbp_of("(P(min),S(1))");
  assert_int_equal(sl__nd_sbp_mask(&nd, SL_SBP_PARTIAL), 1u);
  assert_int_equal(sl__nd_sbp_mask(&nd, SL_SBP_SPLIT), 2u);
  assert_int_equal(sl__nd_sbp_mask(&nd, SL_SBP_BROADCAST), 0u);
  sl_reduce_op op;
  assert_true(sl__nd_sbp_partial_op(&nd, &op));
  assert_int_equal(op, SL_REDUCE_MIN);
  nd = sbp_of("(B,S(0))");
  assert_false(sl__nd_sbp_partial_op(&nd, &op));
  sl_placement_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_range),
      cmocka_unit_test(test_split_part_of),
      cmocka_unit_test(test_local_slice_1d),
      cmocka_unit_test(test_local_slice_2d),
      cmocka_unit_test(test_slices_tile),
      cmocka_unit_test(test_local_slice_errors),
      cmocka_unit_test(test_intersect),
      cmocka_unit_test(test_mesh_walks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
