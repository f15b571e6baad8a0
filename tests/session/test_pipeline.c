/* Pipeline parallelism (docs/pipeline.md): every schedule, stage count and
 * micro-batch count trains like the same model on one batch without
 * micro-batches; each device runs its passes in the schedule's order
 * (read from the plan and from the trace); activation memory follows the
 * schedule; a wrong stage is a deadlock reported before anything runs. */
#include <unistd.h>

#include "lower_int.h"
#include "session_helpers.h"

#define D 8       /* features */
#define CLASSES 5 /* outputs */
#define STEPS 3

typedef struct pipe_cfg {
  int devices;          /* pipeline devices: cpu:0 .. cpu:devices-1 */
  int layers;           /* hidden layers + the output layer */
  const int *stage_of;  /* per layer; NULL: balanced over the devices */
  const int *device_of; /* per layer; NULL: stage mod devices */
  int micro;            /* micro-batches */
  const char *schedule;
  bool adam;
  int batch; /* rows per micro-batch */
} pipe_cfg;

/* The stage of layer l: stage_of[l], or layers spread evenly. */
static int layer_stage(const pipe_cfg *c, int l) {
  return c->stage_of ? c->stage_of[l] : l * c->devices / c->layers;
}

/* An MLP of c->layers layers, layer l on cpu:(stage mod devices), with
 * m micro-batches of c->batch rows (m = 1 and batch * micro rows for the
 * reference). */
static sl_graph *pipe_mlp(const pipe_cfg *c, int m, int rows) {
  sl_graph *g = st_graph("cpu:0");
  if (m > 1) assert_int_equal(sl_graph_set_micro_batches(g, m), SL_OK);
  if (c->schedule)
    assert_int_equal(sl_graph_set_schedule(g, c->schedule), SL_OK);
  sl_shape xs = SL_SHAPE(rows, D), ys = SL_SHAPE(rows);
  int last = c->device_of ? c->device_of[c->layers - 1]
                          : layer_stage(c, c->layers - 1) % c->devices;
  char place[32];
  sl_tensor h = sl_input(g, "x", &xs, SL_DTYPE_F32, "cpu:0", NULL);
  snprintf(place, sizeof place, "cpu:%d", last);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, place, NULL);
  for (int l = 0; l < c->layers; l++) {
    int s = layer_stage(c, l);
    snprintf(place, sizeof place, "cpu:%d",
             c->device_of ? c->device_of[l] : s % c->devices);
    bool out = l + 1 == c->layers;
    sl_shape ws = SL_SHAPE(D, out ? CLASSES : D);
    char name[32];
    snprintf(name, sizeof name, "w%d", l);
    sl_tensor w =
        sl_variable(g, name, &ws, SL_DTYPE_F32,
                    sl_init_xavier_uniform(1, (uint64_t)l + 1), place, NULL);
    if (c->stage_of) sl_graph_push_stage(g, s);
    h = sl_to_global(h, place, NULL);
    h = sl_matmul(h, w, false, false);
    if (!out) h = sl_tanh(h);
    if (c->stage_of) sl_graph_pop_stage(g);
  }
  if (c->stage_of) sl_graph_push_stage(g, layer_stage(c, c->layers - 1));
  sl_tensor loss = sl_cross_entropy(h, y);
  if (c->stage_of) sl_graph_pop_stage(g);
  sl_optimizer opt =
      c->adam ? sl_optimizer_adam(0.01) : sl_optimizer_sgd(0.1, 0.9);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  sl_fetch(h, "logits");
  st_check_graph(g);
  return g;
}

static void feed_all(sl_session *s, int rows, uint64_t seed) {
  float *x = calloc((size_t)rows * D, sizeof *x);
  int32_t *y = calloc((size_t)rows, sizeof *y);
  sl_rng r = {seed};
  for (int i = 0; i < rows * D; i++)
    x[i] = (float)(-1.0 + 2.0 * (double)(sl__rng_next(&r) >> 11) * 0x1.0p-53);
  for (int i = 0; i < rows; i++)
    y[i] = (int32_t)sl__rng_below(&r, CLASSES);
  assert_int_equal(sl_session_feed(s, "x", x, (size_t)rows * D * sizeof *x),
                   SL_OK);
  assert_int_equal(sl_session_feed(s, "y", y, (size_t)rows * sizeof *y), SL_OK);
  free(x);
  free(y);
}

/* Losses and logits of STEPS steps. */
static void train(sl_graph *g, int rows, float *loss, float *logits) {
  sl_session *s = NULL;
  if (sl_session_create(g, NULL, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  for (int k = 0; k < STEPS; k++) {
    feed_all(s, rows, 100 + (uint64_t)k);
    if (sl_session_run(s, 1) != SL_OK) fail_msg("run: %s", sl_last_error());
    assert_int_equal(sl_session_fetch(s, "loss", &loss[k], sizeof *loss),
                     SL_OK);
  }
  assert_int_equal(sl_session_fetch(s, "logits", logits,
                                    (size_t)rows * CLASSES * sizeof *logits),
                   SL_OK);
  assert_int_equal(sl_session_finish(s), SL_OK);
  sl_session_destroy(s);
}

/* The pipelined run against one batch of micro * batch rows without
 * micro-batches, on the same devices. */
static void check_same_training(const pipe_cfg *c) {
  int rows = c->batch * c->micro;
  float want[STEPS], got[STEPS];
  float *lw = calloc((size_t)rows * CLASSES, sizeof *lw);
  float *lg = calloc((size_t)rows * CLASSES, sizeof *lg);
  pipe_cfg ref = *c;
  ref.schedule = NULL;
  sl_graph *g0 = pipe_mlp(&ref, 1, rows);
  train(g0, rows, want, lw);
  sl_graph *g1 = pipe_mlp(c, c->micro, c->batch);
  train(g1, rows, got, lg);
  char what[160];
  snprintf(what, sizeof what, "%s P=%d M=%d layers=%d %s",
           c->schedule ? c->schedule : "1f1b", c->devices, c->micro, c->layers,
           c->adam ? "adam" : "sgd");
  st_compare(SL_DTYPE_F32, got, want, STEPS, c->micro == 1 ? 0 : 1e-5, what);
  st_compare(SL_DTYPE_F32, lg, lw, (int64_t)rows * CLASSES,
             c->micro == 1 ? 0 : 1e-5, what);
  sl_graph_destroy(g0);
  sl_graph_destroy(g1);
  free(lw);
  free(lg);
}

static void test_schedules_train_like_one_batch(void **state) {
  (void)state;
  const char *scheds[] = {"gpipe", "1f1b", "zero-bubble"};
  const int ms[] = {1, 2, 3, 4, 8};
  for (size_t s = 0; s < SL_ARRAY_LEN(scheds); s++)
    for (int p = 2; p <= 4; p++)
      for (size_t m = 0; m < SL_ARRAY_LEN(ms); m++) {
        pipe_cfg c = {p, p + 1, NULL, NULL, ms[m], scheds[s], (m + s) % 2 == 1,
                      2};
        check_same_training(&c);
      }
}

static void test_interleaved_trains_like_one_batch(void **state) {
  (void)state;
  /* Two devices, two chunks each: stage s on cpu:(s mod 2). */
  static const int four[] = {0, 1, 2, 3};
  const int ms[] = {2, 4, 8};
  for (size_t m = 0; m < SL_ARRAY_LEN(ms); m++)
    for (int adam = 0; adam < 2; adam++) {
      pipe_cfg c = {2, 4, four, NULL, ms[m], "interleaved", adam, 2};
      check_same_training(&c);
    }
  /* Three devices, two chunks: 6 stages, M a multiple of 3. */
  static const int six[] = {0, 1, 2, 3, 4, 5};
  pipe_cfg c = {3, 6, six, NULL, 3, "interleaved", false, 1};
  check_same_training(&c);
}

static void test_uneven_stages(void **state) {
  (void)state;
  static const int uneven[] = {0, 0, 0, 1}; /* 3 layers, then 1 */
  pipe_cfg c = {2, 4, uneven, NULL, 4, "1f1b", true, 3};
  check_same_training(&c);
  static const int three[] = {0, 1, 1, 1, 2};
  pipe_cfg d = {3, 5, three, NULL, 3, "gpipe", false, 2};
  check_same_training(&d);
}

/* Gradient accumulation: micro-batches without stages (one device). */
static void test_accumulation_on_one_device(void **state) {
  (void)state;
  pipe_cfg c = {1, 3, NULL, NULL, 4, NULL, true, 2};
  check_same_training(&c);
}

/* ---- the order of passes, from the trace --------------------------------- */

/* The passes ("s<stage> <F|B|W><micro>") device cpu:dev fired in one step,
 * in the order of the trace's timestamps (one thread runs a device's
 * compute tasks, so that is their firing order), consecutive repeats
 * collapsed, joined by spaces into out. */
static void traced_passes(sl_graph *g, const char *trace, int dev, char *out,
                          size_t size) {
  sl__pplan *p = NULL;
  if (sl__lower(g, &p) != SL_OK) fail_msg("lower: %s", sl_last_error());
  FILE *f = fopen(trace, "r");
  assert_non_null(f);
  typedef struct ev {
    double ts;
    char pass[32];
  } ev;
  ev *evs = calloc(100000, sizeof *evs);
  int n = 0;
  char line[4096];
  while (fgets(line, sizeof line, f) && n < 100000) {
    char *nm = strstr(line, "{\"name\":\"");
    char *ts = strstr(line, "\"ts\":");
    char *ps = strstr(line, "\"pass\":\"");
    if (!nm || !ts || !ps || !strstr(line, "\"cat\":\"actor\"")) continue;
    nm += 9;
    char *end = strchr(nm, '"');
    *end = '\0';
    int32_t t = -1;
    for (int32_t i = 0; i < p->n_tasks && t < 0; i++)
      if (strcmp(p->tasks[i].name, nm) == 0) t = i;
    assert_true(t >= 0);
    const sl__task *task = &p->tasks[t];
    if (task->device != (uint32_t)dev || task->stream != SL_STREAM_COMPUTE ||
        task->kind == SL__TASK_FEED || task->kind == SL__TASK_FETCH)
      continue; /* feeds run as soon as the program gives data */
    evs[n].ts = strtod(ts + 5, NULL);
    ps += 8;
    end = strchr(ps, '"');
    *end = '\0';
    snprintf(evs[n].pass, sizeof evs[n].pass, "%s", ps);
    n++;
  }
  fclose(f);
  /* Insertion sort by time (stable). */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && evs[j - 1].ts > evs[j].ts; j--) {
      ev x = evs[j];
      evs[j] = evs[j - 1];
      evs[j - 1] = x;
    }
  size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < n; i++)
    if (i == 0 || strcmp(evs[i].pass, evs[i - 1].pass) != 0)
      len += (size_t)snprintf(out + len, size - len, "%s%s", len ? " " : "",
                              evs[i].pass);
  free(evs);
  sl__pplan_destroy(p);
}

/* The earliest start (first) or the latest start of a firing of pass
 * `pass` in the trace. */
static double pass_time(const char *trace, const char *pass, bool first) {
  FILE *f = fopen(trace, "r");
  assert_non_null(f);
  char line[4096], want[48];
  snprintf(want, sizeof want, "\"pass\":\"%s\"", pass);
  double best = first ? INFINITY : -INFINITY;
  while (fgets(line, sizeof line, f)) {
    char *ts = strstr(line, "\"ts\":");
    if (!ts || !strstr(line, want)) continue;
    double t = strtod(ts + 5, NULL);
    best = first ? fmin(best, t) : fmax(best, t);
  }
  fclose(f);
  assert_true(isfinite(best));
  return best;
}

/* Runs one step of c with a trace and checks each device's passes. */
static void check_order(const pipe_cfg *c, const char *const *want) {
  char trace[] = "/tmp/sluice_pipe_trace_XXXXXX";
  int fd = mkstemp(trace);
  assert_true(fd >= 0);
  close(fd);
  sl_graph *g = pipe_mlp(c, c->micro, c->batch);
  sl_session_config cfg = sl_session_config_default();
  cfg.trace_path = trace;
  sl_session *s = NULL;
  if (sl_session_create(g, &cfg, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  feed_all(s, c->batch * c->micro, 7);
  assert_int_equal(sl_session_run(s, 1), SL_OK);
  assert_int_equal(sl_session_finish(s), SL_OK);
  /* The trace as the simulation's costs: every compute task measured. */
  sl_sim_config sc = sl_sim_config_default();
  sc.costs = trace;
  sl_simulation r;
  if (sl_session_simulate(s, &sc, &r, NULL) != SL_OK)
    fail_msg("simulate: %s", sl_last_error());
  assert_true(r.tasks_measured > 0 && r.step_us > 0 && r.handoff_us >= 0);
  sl_session_destroy(s);
  for (int d = 0; d < c->devices; d++) {
    char got[8192];
    traced_passes(g, trace, d, got, sizeof got);
    if (strcmp(got, want[d]) != 0)
      fail_msg("%s P=%d M=%d cpu:%d: passes\n  %s\nwanted\n  %s", c->schedule,
               c->devices, c->micro, d, got, want[d]);
  }
  /* The pipeline overlaps: stage 1 starts micro-batch 0 before stage 0
   * has started its last forward (under 1F1B, stage 0's last forwards
   * wait for stage 1's first backwards). */
  if (strcmp(c->schedule, "1f1b") == 0) {
    char last[16];
    snprintf(last, sizeof last, "s0 F%d", c->micro - 1);
    assert_true(pass_time(trace, "s1 F0", true) <
                pass_time(trace, last, false));
  }
  unlink(trace);
  sl_graph_destroy(g);
}

static void test_order_of_passes(void **state) {
  (void)state;
  /* 1F1B: stage 0 warms up with P-1 forwards; the last stage alternates. */
  const char *f1b[] = {"s0 F0 s0 F1 s0 B0 s0 F2 s0 B1 s0 F3 s0 B2 s0 B3",
                       "s1 F0 s1 B0 s1 F1 s1 B1 s1 F2 s1 B2 s1 F3 s1 B3"};
  pipe_cfg c = {2, 2, NULL, NULL, 4, "1f1b", false, 2};
  check_order(&c, f1b);
  const char *f1b3[] = {
      "s0 F0 s0 F1 s0 F2 s0 B0 s0 F3 s0 B1 s0 F4 s0 B2 s0 B3 s0 B4",
      "s1 F0 s1 F1 s1 B0 s1 F2 s1 B1 s1 F3 s1 B2 s1 F4 s1 B3 s1 B4",
      "s2 F0 s2 B0 s2 F1 s2 B1 s2 F2 s2 B2 s2 F3 s2 B3 s2 F4 s2 B4"};
  pipe_cfg c3 = {3, 3, NULL, NULL, 5, "1f1b", true, 1};
  check_order(&c3, f1b3);
  const char *gp[] = {"s0 F0 s0 F1 s0 F2 s0 B0 s0 B1 s0 B2",
                      "s1 F0 s1 F1 s1 F2 s1 B0 s1 B1 s1 B2"};
  pipe_cfg g = {2, 2, NULL, NULL, 3, "gpipe", false, 2};
  check_order(&g, gp);
  /* Zero-bubble: the last stage runs each W right after its B; the first
   * has no input gradient to send (no B) and defers its W. */
  const char *zb[] = {"s0 F0 s0 F1 s0 F2 s0 W0 s0 F3 s0 W1 s0 W2 s0 W3",
                      "s1 F0 s1 B0 s1 W0 s1 F1 s1 B1 s1 W1 s1 F2 s1 B2 s1 "
                      "W2 s1 F3 s1 B3 s1 W3"};
  pipe_cfg z = {2, 2, NULL, NULL, 4, "zero-bubble", false, 2};
  check_order(&z, zb);
  /* Interleaved, 2 devices x 2 chunks, 4 micro-batches (Megatron's). */
  static const int four[] = {0, 1, 2, 3};
  const char *il[] = {"s0 F0 s0 F1 s2 F0 s2 F1 s0 F2 s2 B0 s0 F3 s2 B1 s2 F2 "
                      "s0 B0 s2 F3 s0 B1 s2 B2 s2 B3 s0 B2 s0 B3",
                      "s1 F0 s1 F1 s3 F0 s3 B0 s3 F1 s3 B1 s1 F2 s1 B0 s1 F3 "
                      "s1 B1 s3 F2 s3 B2 s3 F3 s3 B3 s1 B2 s1 B3"};
  pipe_cfg i = {2, 4, four, NULL, 4, "interleaved", false, 2};
  check_order(&i, il);
}

/* ---- memory and deadlocks -------------------------------------------------
 */

/* The bytes of cpu:dev's shared block: the registers whose lifetimes the
 * order bounds, activations and gradients in flight among them (the fed
 * batch, a whole step's, has buffers of its own). */
static int64_t activations(const pipe_cfg *c, int dev) {
  sl_graph *g = pipe_mlp(c, c->micro, c->batch);
  sl__pplan *p = st_lower(g);
  int64_t a = -1;
  for (int32_t m = 0; m < p->n_mem; m++)
    if (p->mem[m].machine == 0 && p->mem[m].device == (uint32_t)dev)
      a = p->mem[m].block;
  sl__pplan_destroy(p);
  sl_graph_destroy(g);
  assert_true(a > 0);
  return a;
}

static void test_activation_memory_follows_the_schedule(void **state) {
  (void)state;
  /* 1F1B keeps at most P micro-batches in flight on stage 0 whatever M;
   * GPipe keeps all M. */
  pipe_cfg c = {2, 2, NULL, NULL, 4, "1f1b", false, 32};
  int64_t f4 = activations(&c, 0);
  c.micro = 8;
  int64_t f8 = activations(&c, 0);
  c.micro = 16;
  int64_t f16 = activations(&c, 0);
  c.schedule = "gpipe";
  int64_t g16 = activations(&c, 0);
  c.micro = 8;
  int64_t g8 = activations(&c, 0);
  printf("stage 0 shared block: 1f1b M=4 %lld, M=8 %lld, M=16 %lld; gpipe "
         "M=8 %lld, M=16 %lld\n",
         (long long)f4, (long long)f8, (long long)f16, (long long)g8,
         (long long)g16);
  fflush(stdout);
  assert_int_equal(f4, f8);
  assert_int_equal(f8, f16);
  assert_true(g16 > g8);
  assert_true(g8 > 2 * f8);
}

static void test_wrong_stage_is_a_reported_deadlock(void **state) {
  (void)state;
  /* Layer 0 on cpu:0 said to be stage 1, layer 1 on cpu:1 stage 0: cpu:0
   * waits for a backward that cpu:1 runs only after a forward cpu:0 has
   * not run yet. */
  static const int stages[] = {1, 0}, devices[] = {0, 1};
  pipe_cfg c = {2, 2, stages, devices, 4, "1f1b", false, 2};
  sl_graph *g = pipe_mlp(&c, c.micro, c.batch);
  sl_session *s = NULL;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_EINVAL);
  const char *e = sl_last_error();
  printf("%s\n", e);
  fflush(stdout);
  assert_non_null(strstr(e, "schedule '1f1b' with 4 micro-batches deadlocks"));
  assert_non_null(strstr(e, "by its device's order"));
  assert_non_null(strstr(e, "waits for data from"));
  assert_null(s);
  sl_graph_destroy(g);
}

static void test_config_errors(void **state) {
  (void)state;
  sl_graph *g = st_graph("cpu:0");
  assert_int_equal(sl_graph_set_micro_batches(g, 0), SL_EINVAL);
  assert_int_equal(sl_graph_set_schedule(g, "2f2b"), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "known: 1f1b, gpipe"));
  sl_shape xs = SL_SHAPE(4, 3), ws = SL_SHAPE(3, 2);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, NULL);
  sl_tensor w =
      sl_variable(g, "w", &ws, SL_DTYPE_F32, sl_init_zeros(), NULL, NULL);
  assert_int_equal(sl_graph_set_micro_batches(g, 2), SL_OK);
  sl_tensor y = sl_matmul(x, w, false, false);
  sl_optimizer o = sl_optimizer_sgd(0.1, 0);
  assert_int_equal(sl_minimize(sl_reduce_mean(y, 0, NULL, false), &o), SL_OK);
  assert_int_equal(sl_graph_set_micro_batches(g, 4), SL_ESTATE);
  /* An op on a micro-batch's tensor after sl_minimize would see only
   * micro-batch 0. */
  sl_tensor z = sl_relu(y);
  (void)z;
  assert_int_equal(sl_graph_set_schedule(g, "gpipe"), SL_OK);
  sl_session *s = NULL;
  assert_int_equal(sl_session_create(g, NULL, &s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "built after sl_minimize"));
  sl_graph_destroy(g);
}

/* ---- simulation ------------------------------------------------------------
 */

static sl_simulation simulate_cfg(const pipe_cfg *c, const char *report) {
  sl_graph *g = pipe_mlp(c, c->micro, c->batch);
  sl_session *s = NULL;
  if (sl_session_create(g, NULL, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  sl_simulation r;
  if (sl_session_simulate(s, NULL, &r, report) != SL_OK)
    fail_msg("simulate: %s", sl_last_error());
  sl_session_destroy(s);
  sl_graph_destroy(g);
  return r;
}

static void test_simulation(void **state) {
  (void)state;
  /* Bubbles shrink with more micro-batches, as (P-1)/(M+P-1) does. */
  pipe_cfg c = {4, 8, NULL, NULL, 2, "1f1b", false, 64};
  sl_simulation m2 = simulate_cfg(&c, NULL);
  c.micro = 8;
  sl_simulation m8 = simulate_cfg(&c, NULL);
  c.schedule = "zero-bubble";
  sl_simulation z8 = simulate_cfg(&c, NULL);
  printf("simulated bubble: 1f1b M=2 %.3f, M=8 %.3f; zero-bubble M=8 %.3f\n",
         m2.bubble, m8.bubble, z8.bubble);
  fflush(stdout);
  assert_int_equal(m8.devices, 4);
  assert_true(m8.step_us > 0);
  assert_true(m8.bubble < m2.bubble);
  assert_true(z8.bubble <= m8.bubble);
  /* The report's order of passes is the schedule's. */
  char path[] = "/tmp/sluice_pipe_sim_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  pipe_cfg o = {2, 2, NULL, NULL, 4, "1f1b", false, 2};
  simulate_cfg(&o, path);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(path);
  assert_non_null(strstr(text, "predicted step time:"));
  assert_non_null(
      strstr(text, "cpu:0: s0 F0 s0 F1 s0 B0 s0 F2 s0 B1 s0 F3 s0 B2 s0 B3"));
  assert_non_null(
      strstr(text, "cpu:1: s1 F0 s1 B0 s1 F1 s1 B1 s1 F2 s1 B2 s1 F3 s1 B3"));
}

/* A plan (as a file could hold) whose two tasks each wait for the other:
 * the simulation names them instead of running forever. */
static void test_simulated_deadlock_is_named(void **state) {
  (void)state;
  sl__pplan *p = NULL;
  assert_int_equal(sl__pplan_create(&p), SL_OK);
  p->machines = 1;
  p->driver = 1;
  int32_t regs[2];
  for (int i = 0; i < 2; i++) {
    sl__task *t = sl__pplan_add_task(p);
    assert_non_null(t);
    t->kind = SL__TASK_LOCAL;
    t->name = i ? "b@r0" : "a@r0";
    t->stream = SL_STREAM_COMPUTE;
    t->n_in = t->n_out = 1;
    t->in = sl__arena_calloc(p->arena, 1, sizeof *t->in);
    t->out = sl__arena_calloc(p->arena, 1, sizeof *t->out);
    sl__regst *r = sl__pplan_add_regst(p);
    assert_non_null(r);
    r->name = i ? "b" : "a";
    r->producer = i;
    r->count = 1;
    r->bytes = 4;
    r->shape = SL_SHAPE(1);
    r->value = r->rank = r->var_node = -1;
    r->out_slot = 0;
    regs[i] = i;
  }
  p->tasks[0].out[0] = regs[0];
  p->tasks[1].out[0] = regs[1];
  p->tasks[0].in[0] = regs[1];
  p->tasks[1].in[0] = regs[0];
  if (sl__pplan_validate(p) != SL_OK) fail_msg("%s", sl_last_error());
  sl_simulation r;
  assert_int_equal(sl__pplan_simulate(p, NULL, &r, NULL), SL_EINVAL);
  const char *e = sl_last_error();
  printf("%s\n", e);
  assert_non_null(strstr(e, "deadlocks"));
  assert_non_null(strstr(e, "'a@r0' waits for 'b@r0'"));
  sl__pplan_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accumulation_on_one_device),
      cmocka_unit_test(test_schedules_train_like_one_batch),
      cmocka_unit_test(test_interleaved_trains_like_one_batch),
      cmocka_unit_test(test_uneven_stages),
      cmocka_unit_test(test_order_of_passes),
      cmocka_unit_test(test_activation_memory_follows_the_schedule),
      cmocka_unit_test(test_wrong_stage_is_a_reported_deadlock),
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_simulation),
      cmocka_unit_test(test_simulated_deadlock_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
