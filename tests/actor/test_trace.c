/* Chrome-trace output: one complete event per firing, thread = stream,
 * name = actor, args.piece = piece; SLUICE_TRACE or the config path. */
#include <unistd.h>

#include "actor_helpers.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* Brackets and braces balance outside strings, and strings are closed. */
static bool json_balanced(const char *s) {
  int depth = 0;
  bool in_str = false;
  for (; *s; s++) {
    if (in_str) {
      if (*s == '\\' && s[1])
        s++;
      else if (*s == '"')
        in_str = false;
      continue;
    }
    if (*s == '"') in_str = true;
    if (*s == '{' || *s == '[') depth++;
    if (*s == '}' || *s == ']') depth--;
    if (depth < 0) return false;
  }
  return depth == 0 && !in_str;
}

static sl_actor_graph *small_plan(int64_t pieces) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id s =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, pieces);
  sl_actor_id k = add_actor(p, "the \"quoted\" kernel", SL_ACTOR_KERNEL, 0, 0,
                            1, NULL, NULL, 0);
  connect_to(p, add_out(p, s, 2, 8), k);
  connect_to(p, add_out(p, k, 2, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, NULL, NULL, 0));
  return p;
}

static void check_trace(const char *path, int64_t pieces) {
  char *t = slurp(path);
  assert_non_null(t);
  assert_true(strncmp(t, "{\"traceEvents\":[", 16) == 0);
  assert_true(json_balanced(t));
  assert_int_equal(count(t, "\"ph\":\"X\""), 3 * pieces);
  assert_int_equal(count(t, "\"name\":\"src\""), pieces);
  assert_int_equal(count(t, "\"name\":\"the \\\"quoted\\\" kernel\""), pieces);
  assert_int_equal(count(t, "\"name\":\"sink\""), pieces);
  /* Every piece id appears once per actor. */
  for (int64_t i = 0; i < pieces; i++) {
    char arg[48];
    snprintf(arg, sizeof arg, "\"args\":{\"piece\":%lld}}", (long long)i);
    assert_int_equal(count(t, arg), 3);
  }
  /* Threads are named after their streams. */
  assert_int_equal(count(t, "\"thread_name\""), 3);
  assert_non_null(strstr(t, "\"name\":\"dev0/compute\""));
  assert_non_null(strstr(t, "\"name\":\"dev0/copy\""));
  assert_non_null(strstr(t, "\"name\":\"dev1/compute\""));
  free(t);
}

static void test_trace_config_path(void **state) {
  char path[] = "/tmp/sluice_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  sl_actor_graph *p = small_plan(25);
  sl_job_config cfg = SL_JOB_CONFIG(.trace_path = path);
  assert_int_equal(run_plan(p, &cfg, NULL), SL_OK);
  check_trace(path, 25);
  unlink(path);
  sl_actor_graph_destroy(p);
}

static void gpu_name(uint32_t device, char *buf, size_t n) {
  snprintf(buf, n, "gpu:%u", device);
}

/* The config's device names name the streams instead of "dev<id>". */
static void test_trace_device_names(void **state) {
  char path[] = "/tmp/sluice_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  sl_actor_graph *p = small_plan(3);
  sl_job_config cfg =
      SL_JOB_CONFIG(.trace_path = path, .device_name = gpu_name);
  assert_int_equal(run_plan(p, &cfg, NULL), SL_OK);
  char *t = slurp(path);
  assert_non_null(t);
  assert_non_null(strstr(t, "\"name\":\"gpu:0/compute\""));
  assert_non_null(strstr(t, "\"name\":\"gpu:1/compute\""));
  assert_null(strstr(t, "dev0"));
  free(t);
  unlink(path);
  sl_actor_graph_destroy(p);
}

/* Defers its firing and completes it at once: the completion is a
 * message its stream handles after the act returns. */
static sl_status act_defer(sl_act *a) {
  sl_completion_done(sl_act_defer(a), SL_OK);
  return SL_OK;
}

/* A deferred firing goes on a row of its own under its stream's, named
 * "<stream> (deferred)", and the stream's own row keeps the rest. */
static void test_trace_deferred_row(void **state) {
  char path[] = "/tmp/sluice_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id s = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 4);
  sl_actor_id k =
      add_actor(p, "async", SL_ACTOR_KERNEL, 0, 0, 0, act_defer, NULL, 0);
  connect_to(p, add_out(p, s, 2, 8), k);
  connect_to(p, add_out(p, k, 2, 8),
             add_actor(p, "sink", SL_ACTOR_SINK, 0, 1, 0, NULL, NULL, 0));
  sl_job_config cfg = SL_JOB_CONFIG(.trace_path = path);
  assert_int_equal(run_plan(p, &cfg, NULL), SL_OK);
  char *t = slurp(path);
  assert_non_null(t);
  assert_true(json_balanced(t));
  /* dev0/compute, its deferred row, dev0/copy */
  assert_int_equal(count(t, "\"thread_name\""), 3);
  const char *row = strstr(t, "\"name\":\"dev0/compute (deferred)\"");
  assert_non_null(row);
  /* the row's tid: read back from its metadata line */
  const char *line = row;
  while (line > t && line[-1] != '\n')
    line--;
  const char *tid = strstr(line, "\"tid\":");
  assert_true(tid && tid < row);
  char want[64];
  snprintf(want, sizeof want, "\"tid\":%d,", atoi(tid + 6));
  /* every firing of "async" is on that row, and only those */
  int on_row = 0, async = 0;
  for (const char *e = t; (e = strstr(e, "\n{\"name\":\"")); e++) {
    const char *end = strchr(e + 1, '\n');
    size_t n = end ? (size_t)(end - e) : strlen(e);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)n, e);
    if (!strstr(buf, "\"ph\":\"X\"")) continue;
    bool is_async = strstr(buf, "\"name\":\"async\"") != NULL;
    bool there = strstr(buf, want) != NULL;
    assert_true(is_async == there);
    async += is_async;
    on_row += there;
  }
  assert_int_equal(async, 4);
  assert_int_equal(on_row, 4);
  free(t);
  unlink(path);
  sl_actor_graph_destroy(p);
}

static void test_trace_env(void **state) {
  char path[] = "/tmp/sluice_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  unlink(path);
  sl_actor_graph *p = small_plan(7);
  /* Off: nothing written. */
  unsetenv("SLUICE_TRACE");
  assert_int_equal(run_plan(p, NULL, NULL), SL_OK);
  assert_int_equal(access(path, F_OK), -1);
  setenv("SLUICE_TRACE", path, 1);
  assert_int_equal(run_plan(p, NULL, NULL), SL_OK);
  unsetenv("SLUICE_TRACE");
  check_trace(path, 7);
  unlink(path);
  sl_actor_graph_destroy(p);
}

static void test_trace_nodes_and_errors(void **state) {
  /* Two nodes: ".node<N>" goes before the extension. */
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id s = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 5);
  sl_actor_id z = add_actor(p, "sink", SL_ACTOR_SINK, 1, 0, 0, NULL, NULL, 0);
  connect_to(p, add_out(p, s, 1, 8), z);
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(2, &lb), SL_OK);
  sl_job *jobs[2];
  for (uint32_t n = 0; n < 2; n++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = n, .trace_path = "/tmp/sluice_trace_nodes.json",
                      .transport = sl_loopback_transport(lb));
    assert_int_equal(sl_job_create(p, &cfg, &jobs[n]), SL_OK);
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  for (int n = 0; n < 2; n++)
    assert_int_equal(sl_job_wait(jobs[n]), SL_OK);
  assert_string_equal(sl_job_trace_path(jobs[1]),
                      "/tmp/sluice_trace_nodes.node1.json");
  for (int n = 0; n < 2; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  char *t0 = slurp("/tmp/sluice_trace_nodes.node0.json");
  char *t1 = slurp("/tmp/sluice_trace_nodes.node1.json");
  assert_non_null(t0);
  assert_non_null(t1);
  assert_int_equal(count(t0, "\"name\":\"src\""), 5);
  assert_int_equal(count(t1, "\"name\":\"sink\""), 5);
  assert_non_null(strstr(t1, "\"pid\":1"));
  free(t0);
  free(t1);
  unlink("/tmp/sluice_trace_nodes.node0.json");
  unlink("/tmp/sluice_trace_nodes.node1.json");

  /* An unwritable path is an error of the job, with the path. */
  sl_actor_graph *q = small_plan(3);
  sl_job_config cfg =
      SL_JOB_CONFIG(.trace_path = "/nonexistent-dir/trace.json");
  assert_int_equal(run_plan(q, &cfg, NULL), SL_EIO);
  assert_non_null(strstr(sl_last_error(), "/nonexistent-dir/trace.json"));
  sl_actor_graph_destroy(q);
  sl_actor_graph_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_config_path),
      cmocka_unit_test(test_trace_env),
      cmocka_unit_test(test_trace_device_names),
      cmocka_unit_test(test_trace_deferred_row),
      cmocka_unit_test(test_trace_nodes_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
