/* Placements: parse/print round trips, rank maps, mesh coordinates, axis
 * groups, and a clear error for every malformed spec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "core_int.h"
#include <sluice/placement.h>

static sl_placement *parse_ok(const char *text) {
  sl_placement *p = NULL;
  sl_status st = sl_placement_parse(text, &p);
  if (st != SL_OK) fail_msg("parse '%s': %s", text, sl_last_error());
  return p;
}

static void assert_prints(const char *text, const char *want) {
  sl_placement *p = parse_ok(text);
  char buf[128];
  int n = sl_placement_print(p, buf, sizeof buf);
  assert_string_equal(buf, want);
  assert_int_equal(n, (int)strlen(want));
  sl_placement *q = parse_ok(buf);
  assert_true(sl_placement_equal(p, q));
  sl_placement_destroy(p);
  sl_placement_destroy(q);
}

static void test_print_canonical(void **state) {
  assert_prints("cpu:0-3", "cpu:0-3");
  assert_prints("cpu:0,1,2,3", "cpu:0-3");
  assert_prints("cpu:0-3[4]", "cpu:0-3");
  assert_prints("cpu:0/0-3", "cpu:0-3");
  assert_prints("cuda:0-1/0-7", "cuda:0-1/0-7");
  assert_prints("cuda:0-1/0-3[2,4]", "cuda:0-1/0-3[2,4]");
  assert_prints("cpu:0,2", "cpu:0,2");
  assert_prints("cpu:3,1,2", "cpu:3,1-2");
  assert_prints(" cpu : 0 - 1 , 5 ", "cpu:0-1,5");
  assert_prints("cpu:1/4", "cpu:1/4");
  assert_prints("cpu:0-1/0-1[2,1,2,1]", "cpu:0-1/0-1[2,1,2,1]");
}

static void test_rank_maps(void **state) {
  sl_placement *p = parse_ok("cuda:2,5/0-3[2,4]");
  assert_int_equal(sl_placement_device_type(p), SL_DEVICE_CUDA);
  assert_int_equal(sl_placement_size(p), 8);
  assert_int_equal(sl_placement_node_count(p), 2);
  assert_int_equal(sl_placement_mesh_ndim(p), 2);
  assert_int_equal(sl_placement_mesh_dim(p, 1), 4);
  assert_int_equal(sl_placement_mesh_dim(p, 2), 0);
  for (int r = 0; r < 8; r++) {
    int node, dev;
    assert_int_equal(sl_placement_rank_device(p, r, &node, &dev), SL_OK);
    assert_int_equal(node, r < 4 ? 2 : 5); /* node-major */
    assert_int_equal(dev, r % 4);
    assert_int_equal(sl_placement_rank_of(p, node, dev), r);
    int coord[SL_MAX_MESH_AXES];
    sl_placement_rank_coord(p, r, coord);
    assert_int_equal(coord[0], r / 4);
    assert_int_equal(coord[1], r % 4);
    assert_int_equal(sl_placement_coord_rank(p, coord), r);
  }
  int node, dev;
  assert_int_equal(sl_placement_rank_device(p, 8, &node, &dev), SL_EINVAL);
  assert_int_equal(sl_placement_rank_of(p, 3, 0), -1);
  assert_int_equal(sl_placement_rank_of(p, 2, 4), -1);
  sl_placement_destroy(p);
}

static void test_axis_groups(void **state) {
  sl_placement *p = parse_ok("cpu:0-11[2,3,2]");
  int g[3];
  /* rank 7 = coord (1,0,1) */
  assert_int_equal(sl_placement_axis_group(p, 0, 7, g), SL_OK);
  assert_int_equal(g[0], 1);
  assert_int_equal(g[1], 7);
  assert_int_equal(sl_placement_axis_group(p, 1, 7, g), SL_OK);
  assert_int_equal(g[0], 7);
  assert_int_equal(g[1], 9);
  assert_int_equal(g[2], 11);
  assert_int_equal(sl_placement_axis_group(p, 2, 7, g), SL_OK);
  assert_int_equal(g[0], 6);
  assert_int_equal(g[1], 7);
  assert_int_equal(sl_placement_axis_group(p, 3, 7, g), SL_EINVAL);
  assert_int_equal(sl_placement_axis_group(p, 0, 12, g), SL_EINVAL);
  /* Every rank is in exactly one group per axis, and groups are consistent. */
  for (int axis = 0; axis < 3; axis++) {
    int seen[12] = {0};
    for (int r = 0; r < 12; r++) {
      int grp[3];
      sl_placement_axis_group(p, axis, r, grp);
      int n = sl_placement_mesh_dim(p, axis);
      int found = 0;
      for (int i = 0; i < n; i++) found += grp[i] == r;
      assert_int_equal(found, 1);
      if (grp[0] == r)
        for (int i = 0; i < n; i++) seen[grp[i]]++;
    }
    for (int r = 0; r < 12; r++) assert_int_equal(seen[r], 1);
  }
  sl_placement_destroy(p);
}

static void test_equality(void **state) {
  sl_placement *a = parse_ok("cpu:0-3"), *b = parse_ok("cpu:0-3[2,2]"),
               *c = parse_ok("cpu:3,2,1,0"), *d = parse_ok("cuda:0-3"),
               *e, *f;
  assert_false(sl_placement_equal(a, b));
  assert_true(sl_placement_same_devices(a, b));
  assert_true(sl_placement_same_devices(a, c));
  assert_false(sl_placement_equal(a, c));
  assert_false(sl_placement_same_devices(a, d));
  assert_int_equal(sl_placement_copy(b, &e), SL_OK);
  assert_true(sl_placement_equal(b, e));
  int nodes[] = {0}, devs[] = {0, 1, 2, 3}, mesh[] = {2, 2};
  assert_int_equal(
      sl_placement_create(SL_DEVICE_CPU, 1, nodes, 4, devs, 2, mesh, &f), SL_OK);
  assert_true(sl_placement_equal(b, f));
  sl_placement_destroy(a);
  sl_placement_destroy(b);
  sl_placement_destroy(c);
  sl_placement_destroy(d);
  sl_placement_destroy(e);
  sl_placement_destroy(f);
  sl_placement_destroy(NULL);
}

static void assert_bad(const char *text, const char *needle) {
  sl_placement *p = (sl_placement *)0x1;
  sl_clear_error();
  assert_int_equal(sl_placement_parse(text, &p), SL_EINVAL);
  assert_null(p);
  if (!strstr(sl_last_error(), needle))
    fail_msg("'%s': message '%s' lacks '%s'", text, sl_last_error(), needle);
}

static void test_bad_specs(void **state) {
  assert_bad("cpu:3-1", "range end before start in '3-1'");
  assert_bad("gpu:0-3", "unknown device type 'gpu'");
  assert_bad("0-3", "expected TYPE:DEVICES");
  assert_bad("cpu:", "expected a number at end of text");
  assert_bad("cpu:a", "expected a number at 'a'");
  assert_bad("cpu:0-", "expected a number");
  assert_bad("cpu:0,,1", "expected a number at ','");
  assert_bad("cpu:0,0", "duplicate device id 0");
  assert_bad("cpu:0-1,1", "duplicate device id 1");
  assert_bad("cpu:0,0/1", "duplicate node id 0");
  assert_bad("cpu:0-3[3]", "mesh has 3 ranks but the placement has 4 devices");
  assert_bad("cpu:0-3[2,3]", "mesh has 6 ranks");
  assert_bad("cpu:0-3[0]", "mesh extent 0");
  assert_bad("cpu:0-3[2", "expected ',' or ']'");
  assert_bad("cpu:0-3[2,2]x", "unexpected text at 'x'");
  assert_bad("cpu:0-15[1,1,1,1,16]", "more than 4 axes");
  assert_bad("cpu:0-3 4", "unexpected text at '4'");
  assert_bad("cpu:99999999", "exceeds");
  assert_bad("cpu:0-100000", "more than 65536 ids");
  assert_bad("cpu:0-999/0-999", "exceeds 65536 ranks");
  assert_bad("cpu:0/1/2", "unexpected text at '/'");
  sl_placement *p = NULL;
  assert_int_equal(sl_placement_parse(NULL, &p), SL_EINVAL);
  int ids[] = {0, 1};
  assert_int_equal(sl_placement_create((sl_device_type)7, 1, ids, 2, ids, 0,
                                       NULL, &p),
                   SL_EINVAL);
  assert_int_equal(sl_placement_create(SL_DEVICE_CPU, 0, ids, 2, ids, 0, NULL, &p),
                   SL_EINVAL);
  int neg[] = {-1};
  assert_int_equal(sl_placement_create(SL_DEVICE_CPU, 1, ids, 1, neg, 0, NULL, &p),
                   SL_EINVAL);
  assert_null(p);
}

static void test_print_truncates_like_snprintf(void **state) {
  sl_placement *p = parse_ok("cuda:0-1/0-3[2,4]");
  char small[6];
  int n = sl_placement_print(p, small, sizeof small);
  assert_int_equal(n, (int)strlen("cuda:0-1/0-3[2,4]"));
  assert_string_equal(small, "cuda:");
  assert_int_equal(sl_placement_print(p, NULL, 0), n);
  sl_placement_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_print_canonical),
      cmocka_unit_test(test_rank_maps),
      cmocka_unit_test(test_axis_groups),
      cmocka_unit_test(test_equality),
      cmocka_unit_test(test_bad_specs),
      cmocka_unit_test(test_print_truncates_like_snprintf),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
