/* The threads of a session's CPU devices (docs/cpu.md): each CPU device
 * this node's ops run on owns a team (core_team.h) of `cpu_threads`
 * threads, its compute stream thread leading; its kernels cut their work
 * over them. By default the process's CPUs are shared out evenly between
 * those devices, so `cpu:0` alone uses the whole machine and `cpu:0-3` on
 * four cores gives each device one. Pinned (cpu_pin), device d's threads
 * each get a CPU of their own, d's after d - 1's. By default they are
 * pinned when the teams fit in the CPUs: left to the scheduler, threads
 * that wake each other can land on one core (a woken thread is often
 * placed on its waker's): a team's members, and so every kernel cut over
 * them takes as long as on one thread, or two one-thread devices in
 * tensor parallel, whose step then takes as long as on one device.
 *
 * The job's threads spin for up to 1 ms before sleeping when the teams
 * fit in the CPUs, 20 us otherwise. With a core per busy thread a spin
 * costs nothing, and a sleep can cost much: the thread a collective's end
 * wakes is often queued behind a busy one for a scheduler tick (tp on two
 * devices ran 1-2 ms late at each all-reduce: 16.5 ms/step, against 14.9
 * spinning). */
#include <stdlib.h>
#include <string.h>

#include "session_int.h"

#define MAX_CPUS 1024

/* 0, or the value of an integer environment variable; SL_EINVAL naming it
 * when it is not one in [lo, hi]. */
static sl_status env_int(const char *name, int lo, int hi, int *out) {
  const char *e = getenv(name);
  *out = 0;
  if (!e || !e[0]) return SL_OK;
  char *end;
  long v = strtol(e, &end, 10);
  if (*end || v < lo || v > hi)
    return sl__fail(SL_EINVAL, "%s=%s: want an integer in %d..%d", name, e, lo,
                    hi);
  *out = (int)v;
  return SL_OK;
}

/* The CPU device indices this node's kernels run on, ascending. */
static int32_t cpu_devices(const sl_session *s, int *idx, int32_t max) {
  int32_t n = 0;
  for (int32_t i = 0; i < s->pp->n_tasks; i++) {
    const sl__task *t = &s->pp->tasks[i];
    if (t->kind != SL__TASK_OP || t->proxy || t->machine != s->self_node ||
        sl__dev_class_of(t->device) != SL__DEV_CLASS_CPU)
      continue;
    int d = sl__dev_index(t->device), at = 0;
    while (at < n && idx[at] < d)
      at++;
    if (at < n && idx[at] == d) continue;
    if (n == max) break;
    memmove(&idx[at + 1], &idx[at], (size_t)(n - at) * sizeof *idx);
    idx[at] = d;
    n++;
  }
  return n;
}

#define SPIN_US_FIT 1000
#define SPIN_US_SHORT 20 /* sl_job_config's default */
#define SPIN_US_MAX 1000000

sl_status sl__session_cpu_config_check(const sl_session_config *c) {
  int threads = c->cpu_threads, pin = c->cpu_pin;
  if (threads < 0 || threads > SL__TEAM_MAX)
    return sl__fail(SL_EINVAL,
                    "session: cpu_threads %d: want 1..%d, or 0 for the "
                    "default",
                    threads, SL__TEAM_MAX);
  if (pin < -1 || pin > 1)
    return sl__fail(SL_EINVAL,
                    "session: cpu_pin %d: want 1 (pin), -1 (do not) or 0 "
                    "(the default: SLUICE_CPU_PIN, else pin when the "
                    "devices' threads fit in the CPUs)",
                    pin);
  if (c->spin_us < -1 || c->spin_us > SPIN_US_MAX)
    return sl__fail(SL_EINVAL,
                    "session: spin_us %d: want 1..%d microseconds, -1 (never "
                    "spin) or 0 (the default: SLUICE_SPIN_US, else %d when the "
                    "CPU devices' threads fit in the CPUs, else %d)",
                    c->spin_us, SPIN_US_MAX, SPIN_US_FIT, SPIN_US_SHORT);
  if (c->fetch_depth < 0)
    return sl__fail(SL_EINVAL,
                    "session: fetch_depth %d: want the number of steps each "
                    "fetch keeps (>= 1), or 0 for the default (2)",
                    (int)c->fetch_depth);
  return SL_OK;
}

sl_status sl__session_open_cpu_teams(sl_session *s) {
  int threads = s->cfg.cpu_threads, pin = s->cfg.cpu_pin, spin = s->cfg.spin_us;
  SL_CHECK(sl__session_cpu_config_check(&s->cfg));
  if (!threads)
    SL_CHECK(env_int("SLUICE_CPU_THREADS", 0, SL__TEAM_MAX, &threads));
  if (!pin) SL_CHECK(env_int("SLUICE_CPU_PIN", -1, 1, &pin));
  if (!spin) SL_CHECK(env_int("SLUICE_SPIN_US", -1, SPIN_US_MAX, &spin));
  int idx[SL__DEV_CUDA], cpus[MAX_CPUS];
  int32_t n = cpu_devices(s, idx, SL__DEV_CUDA);
  int n_cpus = sl__cpu_list(cpus, MAX_CPUS);
  if (!threads) threads = SL_MAX(1, n_cpus / SL_MAX(n, 1));
  bool fit = (int64_t)threads * n <= n_cpus;
  bool spare = (int64_t)threads * n < n_cpus;
  s->spin_us = spin ? spin : n && fit ? SPIN_US_FIT : SPIN_US_SHORT;
  if (n == 0) return SL_OK;
  if (!pin) pin = fit ? 1 : -1;
  s->cpu_teams = sl__calloc((size_t)n, sizeof *s->cpu_teams);
  if (!s->cpu_teams) return SL_ENOMEM;
  s->cpu_threads = threads;
  s->cpu_pinned = pin == 1;
  for (int32_t i = 0; i < n; i++) {
    int mine[SL__TEAM_MAX];
    for (int j = 0; j < threads; j++)
      mine[j] = cpus[((int64_t)i * threads + j) % n_cpus];
    char name[24];
    snprintf(name, sizeof name, "cpu%d", idx[i]);
    s->cpu_teams[i].index = idx[i];
    /* The device's collective worker goes beside its compute thread when
     * the teams take every CPU; with CPUs to spare the scheduler can run
     * it on an idle one. */
    s->cpu_teams[i].cpu = pin == 1 && !spare ? mine[0] : -1;
    s->n_cpu_teams = i + 1;
    SL_CHECK(sl__team_create(threads, pin == 1 ? mine : NULL, name,
                             &s->cpu_teams[i].team));
  }
  return SL_OK;
}

static int team_of(const sl_session *s, uint32_t device) {
  if (sl__dev_class_of(device) != SL__DEV_CLASS_CPU) return -1;
  int index = sl__dev_index(device);
  for (int32_t i = 0; i < s->n_cpu_teams; i++)
    if (s->cpu_teams[i].index == index) return i;
  return -1;
}

sl__team *sl__session_cpu_team(const sl_session *s, uint32_t device) {
  int i = team_of(s, device);
  return i < 0 ? NULL : s->cpu_teams[i].team;
}

int sl__session_worker_cpu(const sl_session *s, uint32_t device) {
  int i = team_of(s, device);
  return i < 0 ? -1 : s->cpu_teams[i].cpu;
}

void sl__session_job_spin(const sl_session *s, sl_job_config *jc) {
  if (s->spin_us < 0)
    jc->spin = -1;
  else
    jc->spin_us = s->spin_us;
}

void sl__session_close_cpu_teams(sl_session *s) {
  for (int32_t i = 0; i < s->n_cpu_teams; i++)
    sl__team_destroy(s->cpu_teams[i].team);
  sl__free(s->cpu_teams);
  s->cpu_teams = NULL;
  s->n_cpu_teams = 0;
}
