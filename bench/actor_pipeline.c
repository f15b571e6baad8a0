/* bench_actor_pipeline: back-pressure and pipelining by register counts.
 *
 * Four stages on four streams of one device, each holding a piece for 2 ms
 * without using a core, pass 16 pieces (source on the first stage's stream,
 * sink on the last's). A perfect pipeline takes (16 + 3) x 2 ms = 38 ms.
 * With 1 register per edge a stage cannot start the next piece before the
 * next stage has finished with the previous one; with 2 it can.
 *
 * Two ways to hold a piece:
 *   wait   the act sleeps 2 ms on its stream thread (a synchronous device);
 *   async  the act defers; a "device" thread per stage completes the firing
 *          2 ms later (sl_act_defer / sl_completion_done, as a CUDA stream
 *          event would), and the stream thread stays free meanwhile.
 * Each row is the median of `repeats` runs.
 *
 *   bench_actor_pipeline [pieces] [hold_ms] [repeats]   (16 2 5) */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <sluice/actor.h>

#include "core_int.h"
#include "core_thread.h"

enum { STAGES = 4, MAXQ = 64 };

static uint64_t hold_ns = 2000000;

/* A device stream stand-in: runs work items in order, each taking hold_ns
 * of wall time and no CPU. */
typedef struct device {
  pthread_mutex_t m;
  pthread_cond_t cv;
  sl_completion *q[MAXQ];
  int head, len;
  bool quit;
  pthread_t thread;
} device;

static void *device_main(void *arg) {
  device *d = arg;
  pthread_mutex_lock(&d->m);
  for (;;) {
    while (d->len == 0 && !d->quit)
      pthread_cond_wait(&d->cv, &d->m);
    if (d->len == 0) break;
    sl_completion *c = d->q[d->head];
    d->head = (d->head + 1) % MAXQ;
    d->len--;
    pthread_mutex_unlock(&d->m);
    sl__sleep_ns(hold_ns);
    sl_completion_done(c, SL_OK);
    pthread_mutex_lock(&d->m);
  }
  pthread_mutex_unlock(&d->m);
  return NULL;
}

static sl_status act_wait(sl_act *a) {
  sl__sleep_ns(hold_ns);
  return SL_OK;
}

static sl_status act_async(sl_act *a) {
  device *d = a->ctx;
  sl_completion *c = sl_act_defer(a);
  pthread_mutex_lock(&d->m);
  if (d->len == MAXQ) {
    pthread_mutex_unlock(&d->m);
    return sl_act_fail(a, SL_EINTERNAL, "device queue full");
  }
  d->q[(d->head + d->len++) % MAXQ] = c;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->m);
  return SL_OK;
}

typedef struct result {
  double ms;
  int32_t peak_sum, peak_max;
} result;

static result run_once(int64_t pieces, int32_t count, bool async) {
  device dev[STAGES];
  sl_actor_graph *p;
  if (sl_actor_graph_create(&p) != SL_OK) exit(1);
  sl_actor_desc src = {"source", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, pieces};
  sl_actor_id prev, id;
  int32_t descs[STAGES + 1];
  sl_regst_desc rd = {NULL, count, 4096, -1, 0, NULL, NULL};
  if (sl_actor_graph_add_actor(p, &src, &prev) != SL_OK) exit(1);
  for (int s = 0; s <= STAGES; s++) {
    char name[16];
    snprintf(name, sizeof name, s < STAGES ? "stage%d" : "sink", s + 1);
    sl_actor_desc d = {name,
                       s < STAGES ? SL_ACTOR_KERNEL : SL_ACTOR_SINK,
                       0,
                       0,
                       (uint32_t)(s < STAGES ? s : STAGES - 1),
                       s < STAGES ? (async ? act_async : act_wait) : NULL,
                       s < STAGES ? &dev[s] : NULL,
                       0};
    if (sl_actor_graph_add_actor(p, &d, &id) != SL_OK ||
        sl_actor_graph_add_output(p, prev, &rd, &descs[s]) != SL_OK ||
        sl_actor_graph_connect(p, descs[s], id) != SL_OK) {
      fprintf(stderr, "plan: %s\n", sl_last_error());
      exit(1);
    }
    prev = id;
  }
  for (int s = 0; s < STAGES && async; s++) {
    pthread_mutex_init(&dev[s].m, NULL);
    pthread_cond_init(&dev[s].cv, NULL);
    dev[s].head = dev[s].len = 0;
    dev[s].quit = false;
    pthread_create(&dev[s].thread, NULL, device_main, &dev[s]);
  }
  sl_job *job;
  sl_job_config cfg = SL_JOB_CONFIG(.hang_timeout_ms = -1);
  if (sl_job_create(p, &cfg, &job) != SL_OK) {
    fprintf(stderr, "job: %s\n", sl_last_error());
    exit(1);
  }
  uint64_t t0 = sl__now_ns();
  if (sl_job_run(job) != SL_OK) {
    fprintf(stderr, "run: %s\n", sl_last_error());
    exit(1);
  }
  result r = {(double)(sl__now_ns() - t0) / 1e6, 0, 0};
  for (int s = 0; s <= STAGES; s++) {
    sl_regst_stats rs;
    sl_job_get_regst_stats(job, descs[s], &rs);
    r.peak_sum += rs.peak_in_flight;
    if (rs.peak_in_flight > r.peak_max) r.peak_max = rs.peak_in_flight;
  }
  sl_job_destroy(job);
  for (int s = 0; s < STAGES && async; s++) {
    pthread_mutex_lock(&dev[s].m);
    dev[s].quit = true;
    pthread_cond_signal(&dev[s].cv);
    pthread_mutex_unlock(&dev[s].m);
    pthread_join(dev[s].thread, NULL);
    pthread_mutex_destroy(&dev[s].m);
    pthread_cond_destroy(&dev[s].cv);
  }
  sl_actor_graph_destroy(p);
  return r;
}

static int cmp(const void *a, const void *b) {
  double x = ((const result *)a)->ms, y = ((const result *)b)->ms;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int64_t pieces = argc > 1 ? atoll(argv[1]) : 16;
  double hold_ms = argc > 2 ? atof(argv[2]) : 2.0;
  int repeats = argc > 3 ? atoi(argv[3]) : 5;
  if (pieces < 1 || hold_ms <= 0 || repeats < 1 || repeats > 31) {
    fprintf(stderr,
            "usage: bench_actor_pipeline [pieces] [hold_ms] [repeats <= 31]\n");
    return 2;
  }
  hold_ns = (uint64_t)(hold_ms * 1e6);
  double ideal = (double)(pieces + STAGES - 1) * hold_ms;
  printf("bench_actor_pipeline: %d stages on %d streams, %lld pieces, %.1f ms "
         "per stage, median of %d runs\n",
         STAGES, STAGES, (long long)pieces, hold_ms, repeats);
  printf("ideal (perfect pipeline) = (%lld + %d) x %.1f ms = %.1f ms\n\n",
         (long long)pieces, STAGES - 1, hold_ms, ideal);
  printf(
      "| registers/edge | hold  | run ms | ideal ms | ratio | peak in flight "
      "(sum over 5 edges) | peak per edge |\n");
  printf("|----------------|-------|--------|----------|-------|---------------"
         "--------------------|---------------|\n");
  for (int mode = 0; mode < 2; mode++)
    for (int32_t count = 1; count <= 2; count++) {
      result r[31];
      for (int i = 0; i < repeats; i++)
        r[i] = run_once(pieces, count, mode == 1);
      qsort(r, (size_t)repeats, sizeof r[0], cmp);
      result m = r[repeats / 2];
      printf("| %14d | %-5s | %6.1f | %8.1f | %5.2f | %33d | %13d |\n",
             (int)count, mode ? "async" : "wait", m.ms, ideal, m.ms / ideal,
             (int)m.peak_sum, (int)m.peak_max);
    }
  return 0;
}
