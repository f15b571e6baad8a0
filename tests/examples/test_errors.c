/* Bad input to the examples gives a clear error, never a crash: bad flags
 * (exit 2 with one line naming the problem), a missing data file (exit 1
 * naming the path), a wrong feed size, an unknown input or fetch, an
 * unfed input, an out-of-range label — on every engine this build has. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "inv.h"
#include "mlp/model.h"

/* Runs `cmd` (stderr joined to stdout): its exit status and output. */
static int run_cmd(const char *cmd, char *out, size_t size) {
  char full[1100];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  if (!WIFEXITED(st)) fail_msg("'%s' did not exit normally:\n%s", cmd, out);
  return WEXITSTATUS(st);
}

static void expect_cmd(const char *bin, const char *args, int want_rc,
                       const char *want_text) {
  char cmd[1024], out[8192];
  snprintf(cmd, sizeof cmd, "%s %s", bin, args);
  int rc = run_cmd(cmd, out, sizeof out);
  printf("$ %s  -> %d: %s", cmd, rc, out);
  if (rc != want_rc)
    fail_msg("'%s': exit %d, want %d; output:\n%s", cmd, rc, want_rc, out);
  if (!strstr(out, want_text))
    fail_msg("'%s': output lacks \"%s\":\n%s", cmd, want_text, out);
}

static void test_flags(void **state) {
  expect_cmd(EX_MLP_BIN, "--layout diagonal", 2,
             "mlp: unknown layout 'diagonal' (single, dp, tp, hybrid)");
  expect_cmd(EX_GPT_BIN, "--layout zigzag", 2,
             "gpt: unknown layout 'zigzag' (single, dp, tp, hybrid)");
  expect_cmd(EX_MLP_BIN, "--layout hybrid --devices cpu:3", 2,
             "layout hybrid needs an even number of devices");
  expect_cmd(EX_MLP_BIN, "--layout dp --devices 'cpu:0-3[2,2]'", 2,
             "layout dp needs a 1-D placement");
  expect_cmd(EX_MLP_BIN, "--devices cpu:3-1", 2, "devices 'cpu:3-1'");
  expect_cmd(EX_MLP_BIN, "--steps abc", 2,
             "flag '--steps': 'abc' is not an integer");
  expect_cmd(EX_MLP_BIN, "--steps 0", 2, "below the minimum 1");
  expect_cmd(EX_MLP_BIN, "--lr", 2, "flag '--lr' needs a value");
  expect_cmd(EX_MLP_BIN, "--bogus 3", 2, "unknown flag '--bogus'");
  expect_cmd(EX_MLP_BIN, "extra", 2, "unexpected argument 'extra'");
  expect_cmd(EX_MLP_BIN, "--optimizer rmsprop", 2,
             "unknown optimizer 'rmsprop' (sgd, adam)");
  expect_cmd(EX_MLP_BIN, "--engine warp", 2, "unknown engine 'warp'");
  expect_cmd(EX_MLP_BIN, "--data only_one.npy", 2,
             "--data wants X.npy,LABELS.npy");
  expect_cmd(EX_GPT_BIN, "--hidden 10 --heads 4", 2,
             "--hidden 10 is not a multiple of --heads 4");
  expect_cmd(EX_GPT_BIN, "--layout dp --devices cpu:2 --megatron", 2,
             "gpt: --megatron is for the tp and hybrid layouts, not dp");
  expect_cmd(EX_MLP_BIN, "--devices cpu:3 --pp 2", 2,
             "2 pipeline stages do not divide the 3 devices of 'cpu:3'");
  expect_cmd(EX_MLP_BIN, "--micro 3", 2,
             "flag '--micro': batch 256 is not a multiple of 3 micro-batches");
  expect_cmd(EX_GPT_BIN, "--schedule 2f2b", 2,
             "flag '--schedule': set_schedule: unknown schedule '2f2b'");
  expect_cmd(EX_GPT_BIN, "--micro 2 --engine sharded", 2,
             "pipelining (--pp, --micro, --schedule) need the session "
             "engine");
  expect_cmd(EX_MLP_BIN, "--help", 0, "--layout V");
  expect_cmd(EX_GPT_BIN, "--help", 0, "--tie");
}

static void test_missing_data(void **state) {
  expect_cmd(EX_MLP_BIN,
             "--data /nonexistent/x.npy,/nonexistent/y.npy --steps 1", 1,
             "/nonexistent/x.npy");
}

/* A tiny MLP fed by the program. */
static sl_graph *fed_mlp(ex_layout layout, const char *devices) {
  ex_mlp_config c = ex_mlp_defaults();
  char placement[128];
  INV_OK(ex_layout_placement(layout, devices, placement, sizeof placement));
  c.batch = 6;
  c.in = 4;
  c.hidden = 8;
  c.classes = 3;
  c.layers = 2;
  c.layout = layout;
  c.placement = placement;
  c.data = EX_MLP_DATA_FEED;
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(ex_mlp_build(g, &c));
  return g;
}

static void expect_error(sl_status st, sl_status want, const char *text,
                         const char *what) {
  const char *msg = sl_last_error();
  printf("  %-34s %s: %s\n", what, sl_status_str(st), msg);
  if (st != want)
    fail_msg("%s: %s, want %s (%s)", what, sl_status_str(st),
             sl_status_str(want), msg);
  if (!strstr(msg, text))
    fail_msg("%s: message \"%s\" lacks \"%s\"", what, msg, text);
}

static void test_feeds(void **state) {
  ex_engine engines[3] = {EX_ENGINE_SHARDED, EX_ENGINE_INTERP,
                          EX_ENGINE_SESSION};
  for (int e = 0; e < 3; e++) {
    printf("engine %s:\n", ex_engine_name(engines[e]));
    sl_graph *g = fed_mlp(EX_LAYOUT_DP, "cpu:3");
    ex_run_opts o = {.engine = engines[e]};
    ex_run *r;
    INV_OK(ex_run_create(g, &o, &r));
    float x[6 * 4] = {0};
    int32_t labels[6] = {0, 1, 2, 0, 1, 2};
    expect_error(ex_run_feed(r, "x", x, sizeof x - 4), SL_EINVAL,
                 "feed of input 'x': 92 bytes, the input needs 96",
                 "short feed");
    expect_error(ex_run_feed(r, "x", x, sizeof x + 4), SL_EINVAL,
                 "100 bytes, the input needs 96", "long feed");
    expect_error(ex_run_feed(r, "images", x, sizeof x), SL_ENOTFOUND,
                 "no input 'images'", "unknown input");
    INV_OK(ex_run_feed(r, "x", x, sizeof x));
    expect_error(ex_run_step(r), SL_ESTATE, "'labels'", "step, labels unfed");
    INV_OK(ex_run_feed(r, "labels", labels, sizeof labels));
    INV_OK(ex_run_step(r));
    float loss;
    double lossd;
    expect_error(ex_run_fetch(r, "loss", &lossd, sizeof lossd), SL_EINVAL,
                 "fetch 'loss'", "fetch of a wrong size");
    expect_error(ex_run_fetch(r, "accuracy", &loss, sizeof loss), SL_ENOTFOUND,
                 "accuracy", "unknown fetch");
    INV_OK(ex_run_fetch(r, "loss", &loss, sizeof loss));
    labels[4] = 7; /* 3 classes */
    INV_OK(ex_run_feed(r, "labels", labels, sizeof labels));
    expect_error(ex_run_step(r), SL_EINVAL, "label 7", "out-of-range label");
    ex_run_destroy(r);
    sl_graph_destroy(g);
  }
}

/* A layout the model cannot take: an SBP that does not fit is a graph
 * error naming the tensor, not a crash. */
static void test_bad_layout(void **state) {
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  ex_mlp_config c = ex_mlp_defaults();
  c.layout = EX_LAYOUT_HYBRID;
  c.placement = "cpu:0-2"; /* 1-D: hybrid's 2-D SBPs do not fit */
  c.batch = 4;
  c.in = c.hidden = 4;
  sl_status st = ex_mlp_build(g, &c);
  printf("  hybrid SBPs on a 1-D placement: %s: %s\n", sl_status_str(st),
         sl_graph_error(g));
  assert_int_equal(st, SL_EINVAL);
  assert_non_null(strstr(sl_graph_error(g), "placement 'cpu:0-2'"));
  sl_graph_destroy(g);
  ex_layout l;
  expect_error(ex_layout_parse("diagonal", &l), SL_EINVAL,
               "unknown layout 'diagonal' (single, dp, tp, hybrid)",
               "ex_layout_parse");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flags),
      cmocka_unit_test(test_missing_data),
      cmocka_unit_test(test_feeds),
      cmocka_unit_test(test_bad_layout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
