/* Threads, sleeping and monotonic condition variables. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core_thread.h"

sl_status sl__thread_start(sl__thread *t, void *(*fn)(void *), void *arg,
                           const char *name) {
  t->started = false;
  int rc = pthread_create(&t->handle, NULL, fn, arg);
  if (rc != 0)
    return sl__fail(SL_EINTERNAL, "cannot start thread '%s': %s",
                    name ? name : "?", strerror(rc));
  t->started = true;
  if (name) {
    char short_name[16];
    snprintf(short_name, sizeof short_name, "%s", name);
    pthread_setname_np(t->handle, short_name); /* cosmetic: errors ignored */
  }
  return SL_OK;
}

void sl__thread_join(sl__thread *t) {
  if (!t->started) return;
  pthread_join(t->handle, NULL);
  t->started = false;
}

void sl__sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull),
                        (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

sl_status sl__cond_init(pthread_cond_t *c) {
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr) != 0)
    return sl__fail(SL_EINTERNAL, "pthread_condattr_init failed");
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(c, &attr);
  pthread_condattr_destroy(&attr);
  if (rc != 0)
    return sl__fail(SL_EINTERNAL, "pthread_cond_init: %s", strerror(rc));
  return SL_OK;
}

bool sl__cond_wait_ns(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t t = (uint64_t)ts.tv_nsec + ns % 1000000000ull;
  ts.tv_sec += (time_t)(ns / 1000000000ull + t / 1000000000ull);
  ts.tv_nsec = (long)(t % 1000000000ull);
  return pthread_cond_timedwait(c, m, &ts) != ETIMEDOUT;
}

int sl__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* ---- per-thread scratch ------------------------------------------------ */

typedef struct scratch {
  void *buf[SL__SCRATCH_SLOTS];
  size_t bytes[SL__SCRATCH_SLOTS];
} scratch;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
  scratch *s = p;
  for (int i = 0; i < SL__SCRATCH_SLOTS; i++)
    sl__free(s->buf[i]);
  sl__free(s);
}

static void scratch_key_init(void) {
  if (pthread_key_create(&g_scratch_key, scratch_free) != 0)
    SL_ASSERT(!"pthread_key_create");
}

void *sl__thread_scratch(sl__scratch_slot slot, size_t bytes) {
  SL_ASSERT(slot >= 0 && slot < SL__SCRATCH_SLOTS);
  pthread_once(&g_scratch_once, scratch_key_init);
  scratch *s = pthread_getspecific(g_scratch_key);
  if (!s) {
    s = sl__calloc(1, sizeof *s);
    if (!s || pthread_setspecific(g_scratch_key, s) != 0) {
      sl__free(s);
      return NULL;
    }
  }
  if (s->bytes[slot] < bytes) {
    void *buf = sl__malloc(bytes + 64);
    if (!buf) return NULL;
    sl__free(s->buf[slot]);
    s->buf[slot] = buf;
    s->bytes[slot] = bytes;
  }
  return (void *)(((uintptr_t)s->buf[slot] + 63) & ~(uintptr_t)63);
}
