/* CPU devices with several threads (sl_session_config.cpu_threads): the
 * kernels cut their work over a device's threads so that every output is
 * computed as on one thread, so mlp (SGD with momentum) and gpt (Adam;
 * softmax, layer norm, batched matmuls) give the same losses bit for bit
 * on 1, 2 and 3 threads per device, single and data parallel; so does gpt
 * with bf16 matmuls (the bf16 gemm where the CPU has one). Shapes are
 * large enough that every kind of kernel is cut (matmuls over 2M
 * multiply-adds, elementwise ops over 16K elements). The session reports
 * the threads it gave each device; a bad count is refused. Its threads
 * spin long only when the devices' threads fit in the CPUs. */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/session.h>

#include "core_team.h"
#include "gpt/model.h"
#include "inv.h"
#include "mlp/model.h"

#define STEPS 3

typedef sl_status (*build_fn)(sl_graph *g, ex_layout layout,
                              const char *placement);

static sl_status build_mlp(sl_graph *g, ex_layout layout,
                           const char *placement) {
  ex_mlp_config c = ex_mlp_defaults();
  c.batch = 64;
  c.in = 256;
  c.hidden = 384;
  c.layers = 2;
  c.opt = sl_optimizer_sgd(0.05, 0.9);
  c.layout = layout;
  c.placement = placement;
  return ex_mlp_build(g, &c);
}

static sl_status build_gpt_in(sl_graph *g, ex_layout layout,
                              const char *placement, sl_dtype dtype) {
  ex_gpt_config c = ex_gpt_defaults();
  c.batch = 4;
  c.seq = 64;
  c.vocab = 512;
  c.hidden = 128;
  c.heads = 4;
  c.layers = 1;
  c.dtype = dtype;
  c.opt = sl_optimizer_adam(1e-3);
  c.layout = layout;
  c.placement = placement;
  return ex_gpt_build(g, &c);
}

static sl_status build_gpt(sl_graph *g, ex_layout layout,
                           const char *placement) {
  return build_gpt_in(g, layout, placement, SL_DTYPE_F32);
}

static sl_status build_gpt_bf16(sl_graph *g, ex_layout layout,
                                const char *placement) {
  return build_gpt_in(g, layout, placement, SL_DTYPE_BF16);
}

/* Trains STEPS steps with `threads` per CPU device; returns the threads
 * the session reports. */
static uint32_t train(build_fn build, ex_layout layout, const char *devices,
                      int threads, float *losses) {
  char placement[256];
  INV_OK(ex_layout_placement(layout, devices, placement, sizeof placement));
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build(g, layout, placement));
  ex_run_opts o = {.engine = EX_ENGINE_SESSION, .cpu_threads = threads};
  ex_run *r;
  INV_OK(ex_run_create(g, &o, &r));
  INV_OK(ex_train(r, STEPS, 1, "loss", NULL, losses, NULL));
  sl_session_stats st;
  INV_OK(sl_session_get_stats(ex_run_session(r), &st));
  ex_run_destroy(r);
  sl_graph_destroy(g);
  return st.cpu_threads;
}

static void check_model(const char *name, build_fn build) {
  static const struct {
    ex_layout layout;
    const char *devices;
  } cases[] = {{EX_LAYOUT_SINGLE, "cpu:1"}, {EX_LAYOUT_DP, "cpu:2"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float base[STEPS], got[STEPS];
    assert_int_equal(train(build, cases[c].layout, cases[c].devices, 1, base),
                     1);
    for (int threads = 2; threads <= 3; threads++) {
      assert_int_equal(
          train(build, cases[c].layout, cases[c].devices, threads, got),
          threads);
      if (!inv_identical(got, base, STEPS))
        fail_msg("%s %s on %s: %d threads per device give other losses "
                 "than 1 (max rel %.3g)",
                 name, ex_layout_name(cases[c].layout), cases[c].devices,
                 threads, inv_max_rel(got, base, STEPS));
    }
  }
}

static void test_mlp_threads(void **state) {
  (void)state;
  check_model("mlp", build_mlp);
}

static void test_gpt_threads(void **state) {
  (void)state;
  check_model("gpt", build_gpt);
}

static void test_gpt_bf16_threads(void **state) {
  (void)state;
  check_model("gpt bf16", build_gpt_bf16);
}

static void test_bad_threads(void **state) {
  (void)state;
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build_mlp(g, EX_LAYOUT_SINGLE, "cpu:0"));
  sl_session_config cfg = SL_SESSION_CONFIG(.cpu_threads = 257);
  sl_session *s;
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "cpu_threads 257"));
  cfg = SL_SESSION_CONFIG(.cpu_pin = 2);
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "cpu_pin 2"));
  setenv("SLUICE_CPU_THREADS", "two", 1);
  assert_int_equal(sl_session_create(g, NULL, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "SLUICE_CPU_THREADS=two"));
  unsetenv("SLUICE_CPU_THREADS");
  cfg = SL_SESSION_CONFIG(.spin_us = -2);
  assert_int_equal(sl_session_create(g, &cfg, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "spin_us -2"));
  setenv("SLUICE_SPIN_US", "1ms", 1);
  assert_int_equal(sl_session_create(g, NULL, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "SLUICE_SPIN_US=1ms"));
  unsetenv("SLUICE_SPIN_US");
  sl_graph_destroy(g);
}

/* The stats of a session of g made with cfg. */
static sl_session_stats stats_of(sl_graph *g, sl_session_config cfg) {
  sl_session *s;
  INV_OK(sl_session_create(g, &cfg, &s));
  sl_session_stats st;
  INV_OK(sl_session_get_stats(s, &st));
  sl_session_destroy(s);
  return st;
}

/* The spin the session gives its job's threads: cfg, else SLUICE_SPIN_US,
 * else 1000 us when the device's threads fit in the CPUs, else 20. */
static int32_t spin_of(sl_graph *g, int threads, int spin_us) {
  return stats_of(g,
                  SL_SESSION_CONFIG(.cpu_threads = threads, .spin_us = spin_us))
      .spin_us;
}

static void test_spin(void **state) {
  (void)state;
  cpu_set_t set;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  int cpus = CPU_COUNT(&set);
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build_mlp(g, EX_LAYOUT_SINGLE, "cpu:0"));
  assert_int_equal(spin_of(g, 0, 0), 1000);
  assert_int_equal(spin_of(g, cpus, 0), 1000);
  if (cpus < 256) { /* cpus + 1 threads must be a valid count */
    assert_int_equal(spin_of(g, cpus + 1, 0), 20);
    assert_int_equal(spin_of(g, cpus + 1, 300), 300);
  }
  assert_int_equal(spin_of(g, 0, -1), -1);
  setenv("SLUICE_SPIN_US", "50", 1);
  assert_int_equal(spin_of(g, 0, 0), 50);
  assert_int_equal(spin_of(g, 0, 70), 70);
  unsetenv("SLUICE_SPIN_US");
  sl_graph_destroy(g);
}

/* Whether the session pins its CPU devices' threads: cfg, else
 * SLUICE_CPU_PIN, else when all the devices' threads fit in the CPUs,
 * devices of one thread included. */
static bool pinned(sl_graph *g, int threads, int pin) {
  return stats_of(g, SL_SESSION_CONFIG(.cpu_threads = threads, .cpu_pin = pin))
      .cpu_pinned;
}

/* The CPUs thread `name` of this process may run on, as
 * /proc/self/task/TID/status lists them ("0-1"), into buf; false when no
 * thread has that name. */
static bool thread_cpus(const char *name, char *buf, size_t size) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  bool found = false;
  for (struct dirent *e; !found && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
    if (strcmp(comm, name) != 0) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Cpus_allowed_list: %63s", buf) == 1) found = true;
    fclose(f);
  }
  closedir(d);
  (void)size;
  return found;
}

/* Where the devices' pinned threads take every CPU, a device's
 * communicator worker (which does its part of large collective rounds)
 * runs beside the device's compute thread: device 0's on the first CPU,
 * device 1's on the first of device 1's. With CPUs to spare, or devices
 * unpinned, the workers are left to the scheduler. */
static void test_pin_workers(void **state) {
  (void)state;
  int cpus[1024], n = sl__cpu_list(cpus, 1024);
  if (n < 2) {
    print_message("one CPU: no devices to pin apart\n");
    skip();
  }
  sl_graph *g;
  INV_OK(sl_graph_create(&g));
  INV_OK(build_mlp(g, EX_LAYOUT_DP, "cpu:0-1"));
  int every = (n + 1) / 2; /* threads per device taking every CPU */
  const struct {
    int threads, pin;
    bool pinned;
  } cases[] = {{every, 1, true}, {every, -1, false}, {1, 1, n == 2}};
  for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
    sl_session_config cfg = SL_SESSION_CONFIG(.cpu_threads = cases[c].threads,
                                              .cpu_pin = cases[c].pin);
    sl_session *s;
    INV_OK(sl_session_create(g, &cfg, &s));
    for (int w = 0; w < 2; w++) {
      char name[16], got[64] = "", want[16];
      snprintf(name, sizeof name, "sl-comm%d", w);
      snprintf(want, sizeof want, "%d", cpus[(w * cases[c].threads) % n]);
      assert_true(thread_cpus(name, got, sizeof got));
      printf("%d threads, pin %d: %s on CPUs %s\n", cases[c].threads,
             cases[c].pin, name, got);
      if (cases[c].pinned)
        assert_string_equal(got, want);
      else
        assert_true(strchr(got, '-') || strchr(got, ','));
    }
    sl_session_destroy(s);
  }
  sl_graph_destroy(g);
}

static void test_pin(void **state) {
  (void)state;
  cpu_set_t set;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  int cpus = CPU_COUNT(&set);
  sl_graph *one, *two;
  INV_OK(sl_graph_create(&one));
  INV_OK(build_mlp(one, EX_LAYOUT_SINGLE, "cpu:0"));
  INV_OK(sl_graph_create(&two));
  INV_OK(build_mlp(two, EX_LAYOUT_DP, "cpu:0-1"));
  assert_true(pinned(one, 1, 0));
  assert_true(pinned(one, 0, 0));
  assert_false(pinned(one, 1, -1));
  if (cpus >= 2) assert_true(pinned(two, 1, 0));
  if (cpus < 256) { /* cpus + 1 threads must be a valid count */
    assert_false(pinned(one, cpus + 1, 0));
    assert_true(pinned(one, cpus + 1, 1));
  }
  setenv("SLUICE_CPU_PIN", "-1", 1);
  assert_false(pinned(one, 1, 0));
  assert_true(pinned(one, 1, 1));
  unsetenv("SLUICE_CPU_PIN");
  sl_graph_destroy(one);
  sl_graph_destroy(two);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_threads),
      cmocka_unit_test(test_gpt_threads),
      cmocka_unit_test(test_gpt_bf16_threads),
      cmocka_unit_test(test_bad_threads),
      cmocka_unit_test(test_spin),
      cmocka_unit_test(test_pin),
      cmocka_unit_test(test_pin_workers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
