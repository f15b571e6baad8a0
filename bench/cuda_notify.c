/* bench_cuda_notify: how a CPU thread learns that its work on a CUDA stream
 * has completed — an event polled by a thread (SL__NOTIFY_POLL) or a stream
 * callback (SL__NOTIFY_CALLBACK) — against blocking in
 * cudaStreamSynchronize ("sync", the floor for latency, but it blocks the
 * caller). bench/README.md has the results.
 *
 *   1. round trip: queue a tiny memset, get notified; median and p99 over
 *      --iters. What an actor chain pays per firing.
 *   2. chain: 1000 tiny memsets on one stream with a notification after
 *      each, until the last is notified. A stream callback holds its stream
 *      until it returns; an event does not — this shows the difference.
 *   3. fan-in: 4 streams x 500 notifications in flight at once: completions
 *      per second and CPU time per notification.
 *   4. idle cost: CPU used by the process while one ~50 ms piece of work
 *      runs and the caller sleeps.
 *
 * Needs a GPU: without one (or without CUDA in the build) it prints why and
 * exits 0. Usage: bench_cuda_notify [--iters N] [--device I] */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core_int.h"
#include "core_thread.h"
#include "device_iface.h"
#include "device_notify.h"

typedef struct flag {
  atomic_int count;
  atomic_int failed;
} flag;

static void on_done(void *arg, sl_status st) {
  flag *f = arg;
  if (st != SL_OK) atomic_fetch_add(&f->failed, 1);
  atomic_fetch_add_explicit(&f->count, 1, memory_order_release);
}

static void wait_flag(flag *f, int want) {
  while (atomic_load_explicit(&f->count, memory_order_acquire) < want)
    sl__cpu_relax();
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

#define MODES 3 /* sync, poll, callback */
static const char *const mode_names[MODES] = {"sync", "poll", "callback"};

typedef struct result {
  double rt_median_us, rt_p99_us;
  double chain_ms;
  double fanin_per_s, fanin_cpu_us;
  double idle_cpu_pct;
} result;

#define CHECK(call)                                                            \
  do {                                                                         \
    sl_status st_ = (call);                                                    \
    if (st_ != SL_OK) {                                                        \
      fprintf(stderr, "bench_cuda_notify: %s: %s\n", #call, sl_last_error());  \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Queues nothing and notifies in "sync" mode by blocking. */
static void notify(sl__device *d, sl__notifier *n, sl__stream *s, flag *f) {
  if (!n) {
    CHECK(sl__device_stream_synchronize(d, s));
    on_done(f, SL_OK);
  } else {
    CHECK(sl__notifier_watch(n, s, on_done, f));
  }
}

static result run_mode(sl__device *d, int mode, int iters) {
  result r = {0};
  sl__notifier *n = NULL;
  if (mode > 0) {
    sl__notifier_config c = {.mode = mode == 1 ? SL__NOTIFY_POLL
                                               : SL__NOTIFY_CALLBACK};
    CHECK(sl__notifier_create(d, &c, &n));
  }
  enum { STREAMS = 4, FAN = 500, CHAIN = 1000 };
  sl__stream *s[STREAMS];
  for (int i = 0; i < STREAMS; i++)
    CHECK(sl__device_stream_create(d, &s[i]));
  void *tiny, *big;
  size_t big_bytes = (size_t)1 << 30;
  CHECK(sl__device_alloc(d, 4096, &tiny));
  CHECK(sl__device_alloc(d, big_bytes, &big));

  /* 1. round trip */
  uint64_t *lat = malloc(sizeof *lat * (size_t)iters);
  for (int i = -100; i < iters; i++) { /* 100 warm-up rounds */
    flag f = {0};
    uint64_t t0 = sl__now_ns();
    CHECK(sl__device_memset(d, tiny, i & 0xff, 4, s[0]));
    notify(d, n, s[0], &f);
    wait_flag(&f, 1);
    if (i >= 0) lat[i] = sl__now_ns() - t0;
  }
  qsort(lat, (size_t)iters, sizeof *lat, cmp_u64);
  r.rt_median_us = lat[iters / 2] / 1e3;
  r.rt_p99_us = lat[(size_t)iters * 99 / 100] / 1e3;
  free(lat);

  /* 2. chain */
  {
    flag f = {0};
    uint64_t t0 = sl__now_ns();
    for (int i = 0; i < CHAIN; i++) {
      CHECK(sl__device_memset(d, tiny, i & 0xff, 4, s[0]));
      if (n) CHECK(sl__notifier_watch(n, s[0], on_done, &f));
    }
    if (n)
      wait_flag(&f, CHAIN);
    else
      CHECK(sl__device_stream_synchronize(d, s[0]));
    r.chain_ms = (sl__now_ns() - t0) / 1e6;
  }

  /* 3. fan-in */
  {
    flag f = {0};
    double c0 = cpu_seconds();
    uint64_t t0 = sl__now_ns();
    for (int i = 0; i < FAN; i++)
      for (int k = 0; k < STREAMS; k++) {
        CHECK(
            sl__device_memset(d, (char *)tiny + 1024 * k, i & 0xff, 64, s[k]));
        if (n) CHECK(sl__notifier_watch(n, s[k], on_done, &f));
      }
    if (n) {
      wait_flag(&f, FAN * STREAMS);
    } else {
      for (int k = 0; k < STREAMS; k++)
        CHECK(sl__device_stream_synchronize(d, s[k]));
    }
    double wall = (sl__now_ns() - t0) / 1e9;
    r.fanin_per_s = FAN * STREAMS / wall;
    r.fanin_cpu_us = (cpu_seconds() - c0) * 1e6 / (FAN * STREAMS);
  }

  /* 4. idle cost: about 50 ms of memsets, the caller asleep meanwhile */
  {
    uint64_t t0 = sl__now_ns();
    CHECK(sl__device_memset(d, big, 1, big_bytes, s[1]));
    CHECK(sl__device_stream_synchronize(d, s[1]));
    uint64_t one = sl__now_ns() - t0;
    int reps = (int)(50e6 / (double)(one ? one : 1)) + 1;
    flag f = {0};
    double c0 = cpu_seconds();
    t0 = sl__now_ns();
    for (int i = 0; i < reps; i++)
      CHECK(sl__device_memset(d, big, i, big_bytes, s[1]));
    if (n) {
      CHECK(sl__notifier_watch(n, s[1], on_done, &f));
      while (atomic_load(&f.count) == 0)
        sl__sleep_ns(1000 * 1000);
    } else {
      CHECK(sl__device_stream_synchronize(d, s[1])); /* spins by default */
    }
    double wall = (sl__now_ns() - t0) / 1e9;
    r.idle_cpu_pct = 100.0 * (cpu_seconds() - c0) / wall;
  }

  sl__notifier_destroy(n);
  CHECK(sl__device_free(d, tiny));
  CHECK(sl__device_free(d, big));
  for (int i = 0; i < STREAMS; i++)
    CHECK(sl__device_stream_destroy(d, s[i]));
  return r;
}

int main(int argc, char **argv) {
  int iters = 2000, dev = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc)
      dev = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--iters N] [--device I]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 100) iters = 100;
  sl__device *d = NULL;
  if (sl__device_open(SL_DEVICE_CUDA, dev, &d) != SL_OK) {
    printf("bench_cuda_notify: skipped: %s\n", sl_last_error());
    return 0;
  }
  result r[MODES];
  for (int m = 0; m < MODES; m++)
    r[m] = run_mode(d, m, iters);
  printf("CUDA stream-completion notification on %s (%d round trips)\n\n",
         d->name, iters);
  printf("%-9s %12s %10s %12s %14s %14s %12s\n", "mode", "rt median us",
         "rt p99 us", "chain1000 ms", "fan-in /s", "cpu us/notif",
         "idle cpu %");
  for (int m = 0; m < MODES; m++)
    printf("%-9s %12.1f %10.1f %12.2f %14.0f %14.2f %12.1f\n", mode_names[m],
           r[m].rt_median_us, r[m].rt_p99_us, r[m].chain_ms, r[m].fanin_per_s,
           r[m].fanin_cpu_us, r[m].idle_cpu_pct);
  printf("\nratio poll/callback: round trip %.2f, chain %.2f, fan-in %.2f\n",
         r[1].rt_median_us / r[2].rt_median_us, r[1].chain_ms / r[2].chain_ms,
         r[1].fanin_per_s / r[2].fanin_per_s);
  sl__device_close(d);
  return 0;
}
