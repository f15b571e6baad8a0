/* SBP and nd-SBP values: parse/print round trips, a clear message naming
 * the bad token for every malformed text, and the fit check. */
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

static sl_shape shape_of(const char *text) {
  sl_shape s;
  if (sl_shape_parse(text, &s) != SL_OK)
    fail_msg("shape '%s': %s", text, sl_last_error());
  return s;
}

/* Parses text as an nd-SBP, prints it, expects want, and parses it back. */
static void assert_nd_round_trip(const char *text, const char *want) {
  sl_nd_sbp s, t;
  if (sl_nd_sbp_parse(text, &s) != SL_OK)
    fail_msg("parse '%s': %s", text, sl_last_error());
  char buf[64];
  int n = sl_nd_sbp_print(&s, buf, sizeof buf);
  assert_string_equal(buf, want);
  assert_int_equal(n, (int)strlen(want));
  assert_int_equal(sl_nd_sbp_parse(buf, &t), SL_OK);
  assert_true(sl_nd_sbp_equal(&s, &t));
}

static void test_parse_single(void **state) {
  sl_sbp s;
  assert_int_equal(sl_sbp_parse("S(0)", &s), SL_OK);
  assert_true(sl_sbp_equal(s, sl_sbp_split(0)));
  assert_int_equal(sl_sbp_parse(" S ( 3 ) ", &s), SL_OK);
  assert_true(sl_sbp_equal(s, sl_sbp_split(3)));
  assert_int_equal(sl_sbp_parse("B", &s), SL_OK);
  assert_int_equal(s.kind, SL_SBP_BROADCAST);
  assert_int_equal(sl_sbp_parse("P", &s), SL_OK);
  assert_true(sl_sbp_equal(s, sl_sbp_partial(SL_REDUCE_SUM)));
  assert_int_equal(sl_sbp_parse("P(sum)", &s), SL_OK);
  assert_true(sl_sbp_equal(s, sl_sbp_partial(SL_REDUCE_SUM)));
  assert_int_equal(sl_sbp_parse("P( max )", &s), SL_OK);
  assert_true(sl_sbp_equal(s, sl_sbp_partial(SL_REDUCE_MAX)));
  assert_int_equal(sl_sbp_parse("\tP(min)\n", &s), SL_OK);
  assert_true(sl_sbp_equal(s, sl_sbp_partial(SL_REDUCE_MIN)));
  assert_int_equal(sl_sbp_parse("S(7)", &s), SL_OK);
  assert_int_equal(s.axis, 7);
}

static void test_print_round_trip(void **state) {
  assert_nd_round_trip("S(0)", "S(0)");
  assert_nd_round_trip("B", "B");
  assert_nd_round_trip("P", "P");
  assert_nd_round_trip("P(sum)", "P");
  assert_nd_round_trip("P(max)", "P(max)");
  assert_nd_round_trip("P(min)", "P(min)");
  assert_nd_round_trip("(S(0))", "S(0)");
  assert_nd_round_trip("(S(0),B)", "(S(0),B)");
  assert_nd_round_trip(" ( S(1) , P(max) ) ", "(S(1),P(max))");
  assert_nd_round_trip("(P,P,B,S(7))", "(P,P,B,S(7))");
  char buf[16];
  sl_sbp_print(sl_sbp_split(5), buf, sizeof buf);
  assert_string_equal(buf, "S(5)");
  sl_sbp_print(sl_sbp_partial(SL_REDUCE_MIN), buf, sizeof buf);
  assert_string_equal(buf, "P(min)");
}

static void test_print_truncates_like_snprintf(void **state) {
  sl_nd_sbp s;
  assert_int_equal(sl_nd_sbp_parse("(S(0),B)", &s), SL_OK);
  char buf[4];
  assert_int_equal(sl_nd_sbp_print(&s, buf, sizeof buf), 8);
  assert_string_equal(buf, "(S(");
  assert_int_equal(sl_nd_sbp_print(&s, NULL, 0), 8);
  assert_int_equal(sl_sbp_print(sl_sbp_partial(SL_REDUCE_MAX), NULL, 0), 6);
}

static void test_equal_ignores_unused_fields(void **state) {
  sl_sbp a = sl_sbp_broadcast(), b = sl_sbp_broadcast();
  b.axis = 3;
  b.reduce = SL_REDUCE_MAX;
  assert_true(sl_sbp_equal(a, b));
  assert_false(sl_sbp_equal(sl_sbp_split(0), sl_sbp_split(1)));
  assert_false(sl_sbp_equal(sl_sbp_partial(SL_REDUCE_SUM),
                            sl_sbp_partial(SL_REDUCE_MAX)));
  assert_false(sl_sbp_equal(sl_sbp_split(0), sl_sbp_broadcast()));
  sl_nd_sbp x, y;
  assert_int_equal(sl_nd_sbp_parse("(S(0),B)", &x), SL_OK);
  assert_int_equal(sl_nd_sbp_parse("S(0)", &y), SL_OK);
  assert_false(sl_nd_sbp_equal(&x, &y));
}

/* text must fail with SL_EINVAL and a message containing each of want. */
static void assert_bad(const char *text, const char *want1, const char *want2) {
  sl_nd_sbp s;
  sl_sbp one;
  sl_clear_error();
  assert_int_equal(sl_nd_sbp_parse(text, &s), SL_EINVAL);
  const char *msg = sl_last_error();
  if (!strstr(msg, want1) || (want2 && !strstr(msg, want2)))
    fail_msg("'%s': message '%s' lacks '%s'/'%s'", text, msg, want1,
             want2 ? want2 : "");
  assert_int_equal(s.ndim, 0);
  /* Single SBPs fail the same way unless the text is a list. */
  if (text[0] != '(') {
    assert_int_equal(sl_sbp_parse(text, &one), SL_EINVAL);
    if (!strstr(sl_last_error(), want1))
      fail_msg("sbp '%s': message '%s'", text, sl_last_error());
  }
}

static void test_parse_errors(void **state) {
  assert_bad("", "empty", NULL);
  assert_bad("   ", "empty", NULL);
  assert_bad("S(", "split axis", "end of text");
  assert_bad("S(x)", "split axis", "'x'");
  assert_bad("S()", "split axis", "')'");
  assert_bad("S(1x)", "split axis", "'1x'");
  assert_bad("S(-1)", "split axis", "'-1'");
  assert_bad("S(8)", "split axis '8' out of range", NULL);
  assert_bad("S(99999999999999)", "out of range", "99999999999999");
  assert_bad("S(1", "')'", "end of text");
  assert_bad("S 0", "'('", "'0'");
  assert_bad("S", "'('", "end of text");
  assert_bad("P(avg)", "unknown reduce op 'avg'", NULL);
  assert_bad("P(", "reduce op", "end of text");
  assert_bad("P()", "reduce op", "')'");
  assert_bad("P(max", "')'", "end of text");
  assert_bad("P(max,)", "')'", "','");
  assert_bad("X", "unknown SBP 'X'", NULL);
  assert_bad("Split(0)", "unknown SBP 'Split'", NULL);
  assert_bad("Bx", "unknown SBP 'Bx'", NULL);
  assert_bad("s(0)", "unknown SBP 's'", NULL);
  assert_bad("B B", "expected end of text", "'B'");
  assert_bad("B)", "expected end of text", "')'");
  assert_bad("()", "no entries", NULL);
  assert_bad("(B,", "SBP", "end of text");
  assert_bad("(B,,B)", "expected an SBP", "','");
  assert_bad("(B B)", "',' or ')'", "'B'");
  assert_bad("(B,B", "',' or ')'", "end of text");
  assert_bad("((B))", "expected an SBP", "'('");
  assert_bad("(B,B,B,B,B)", "more than 4 entries", NULL);
  assert_bad("(B,B)x", "expected end of text", "'x'");
  /* The whole text is quoted for context. */
  assert_bad("(S(0),P(avg))", "'(S(0),P(avg))'", "'avg'");
  sl_sbp one;
  assert_int_equal(sl_sbp_parse(NULL, &one), SL_EINVAL);
  sl_nd_sbp s;
  assert_int_equal(sl_nd_sbp_parse(NULL, &s), SL_EINVAL);
  /* A single SBP is not a list. */
  assert_int_equal(sl_sbp_parse("(B)", &one), SL_EINVAL);
}

static void test_check(void **state) {
  sl_placement *p1 = place("cpu:0-3"), *p2 = place("cpu:0-3[2,2]");
  sl_shape s2 = shape_of("8,6"), scalar = shape_of("");
  sl_nd_sbp s;
  assert_int_equal(sl_nd_sbp_parse("S(1)", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p1, &s2), SL_OK);
  assert_int_equal(sl_nd_sbp_parse("(S(0),S(1))", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_OK);
  assert_int_equal(sl_nd_sbp_parse("(P(max),P(max))", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_OK);
  assert_int_equal(sl_nd_sbp_parse("(B,P)", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &scalar), SL_OK);

  /* One entry per mesh axis. */
  assert_int_equal(sl_nd_sbp_check(&s, p1, &s2), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "2 entries"));
  assert_non_null(strstr(sl_last_error(), "1-axis mesh"));
  assert_int_equal(sl_nd_sbp_parse("B", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "2-axis mesh"));

  /* Split axes within the shape. */
  assert_int_equal(sl_nd_sbp_parse("(S(0),S(2))", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "split axis 2"));
  assert_non_null(strstr(sl_last_error(), "[8,6]"));
  assert_int_equal(sl_nd_sbp_parse("S(0)", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p1, &scalar), SL_EINVAL);

  /* Partial kinds may not mix. */
  assert_int_equal(sl_nd_sbp_parse("(P,P(max))", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "mixes partial sum and partial max"));
  assert_int_equal(sl_nd_sbp_parse("(P(min),P(max))", &s), SL_OK);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);

  /* Hand-built values out of range. */
  s.ndim = 2;
  s.sbp[0] = sl_sbp_broadcast();
  s.sbp[1].kind = (sl_sbp_kind)7;
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  s.sbp[1] = sl_sbp_partial((sl_reduce_op)9);
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  s.ndim = 0;
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  s.ndim = 9;
  assert_int_equal(sl_nd_sbp_check(&s, p2, &s2), SL_EINVAL);
  assert_int_equal(sl_nd_sbp_check(NULL, p2, &s2), SL_EINVAL);
  sl_placement_destroy(p1);
  sl_placement_destroy(p2);
}

static void test_names(void **state) {
  assert_string_equal(sl_reduce_op_name(SL_REDUCE_SUM), "sum");
  assert_string_equal(sl_reduce_op_name(SL_REDUCE_MAX), "max");
  assert_string_equal(sl_reduce_op_name(SL_REDUCE_MIN), "min");
  assert_string_equal(sl_reduce_op_name((sl_reduce_op)5), "?");
  const char *ops[] = {
      "all_reduce", "reduce_scatter", "all_gather", "all_to_all",
      "slice",      "zero",           "send_recv",  "copy"};
  for (int i = 0; i < 8; i++)
    assert_string_equal(sl_boxing_op_name((sl_boxing_op)i), ops[i]);
  assert_string_equal(sl_boxing_op_name((sl_boxing_op)8), "?");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_single),
      cmocka_unit_test(test_print_round_trip),
      cmocka_unit_test(test_print_truncates_like_snprintf),
      cmocka_unit_test(test_equal_ignores_unused_fields),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_check),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
