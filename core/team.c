/* Thread teams (core_team.h): a leader publishes a loop (its fields, then
 * its parts in `work`) and bumps a generation counter; workers spin on the
 * counter for a while, then sleep on a condition variable. Every member,
 * the leader included, takes parts until none is left; the leader then
 * waits for the last to finish.
 *
 * Waking: a worker about to sleep counts itself in `sleepers` and re-reads
 * the generation under the mutex; the leader bumps the generation and then
 * reads `sleepers`. Both are sequentially consistent, so either the leader
 * sees the sleeper (and broadcasts under the mutex) or the worker sees the
 * new generation: no wake-up is lost. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core_team.h"
#include "core_thread.h"

/* Polls of the generation before a worker sleeps: about 50 µs, longer than
 * the gap between two kernels of a step (message handling), far shorter
 * than a wait for another device or a collective. */
#define SPIN_POLLS 20000

typedef struct member {
  struct sl__team *team;
  int cpu; /* -1: not pinned */
  sl__thread thread;
} member;

struct sl__team {
  int n;
  member *members;
  bool pinned;      /* cpus were given */
  pthread_t led_by; /* the thread pinned as leader */
  bool leader_pinned;
  /* the loop being run, written by the leader before `work` */
  sl__team_fn fn;
  void *arg;
  int64_t count;
  /* (parts << 32) | the next part to take: a member takes a part with one
   * fetch-add, and reads the loop's fields only once it holds a part, so a
   * worker that wakes late, after the leader has moved on, either finds
   * every part of the old loop taken or takes a part of the new one. */
  atomic_uint_fast64_t work;
  atomic_int done;          /* parts finished */
  atomic_uint_fast64_t gen; /* bumped for every loop: wakes the workers */
  atomic_int sleepers;
  atomic_bool stop;
  pthread_mutex_t lock;
  pthread_cond_t cond;
};

/* Takes and runs parts until none is left. */
static void take_parts(sl__team *t) {
  for (;;) {
    uint_fast64_t w = atomic_fetch_add(&t->work, 1);
    int64_t p = (int64_t)(w & 0xffffffffu), parts = (int64_t)(w >> 32);
    if (p >= parts) return;
    int64_t b = t->count * p / parts, e = t->count * (p + 1) / parts;
    t->fn(t->arg, b, e, (int)p);
    atomic_fetch_add_explicit(&t->done, 1, memory_order_release);
  }
}

bool sl__pin_thread(pthread_t thread, int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(thread, sizeof set, &set) == 0;
}

bool sl__pin_self(int cpu) { return sl__pin_thread(pthread_self(), cpu); }

int sl__cpu_list(int *cpus, int max) {
  cpu_set_t set;
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
      if (CPU_ISSET(c, &set)) cpus[n++] = c;
  if (n == 0 && max > 0) cpus[n++] = 0;
  return n;
}

void sl__cpu_list_text(char *buf, size_t size) {
  int cpus[1024], n = sl__cpu_list(cpus, 1024);
  size_t used = 0;
  if (size) buf[0] = '\0';
  for (int i = 0; i < n && used < size; i++) {
    int j = i;
    while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
      j++;
    int w = j > i ? snprintf(buf + used, size - used, "%s%d-%d",
                             used ? "," : "", cpus[i], cpus[j])
                  : snprintf(buf + used, size - used, "%s%d", used ? "," : "",
                             cpus[i]);
    used += w > 0 ? (size_t)w : 0;
    i = j;
  }
}

static void *worker_main(void *arg) {
  member *m = arg;
  sl__team *t = m->team;
  if (m->cpu >= 0) sl__pin_self(m->cpu);
  /* The generation before any loop: a worker that starts after the first
   * loop was announced still takes its part. */
  uint_fast64_t seen = 0;
  for (;;) {
    uint_fast64_t g = atomic_load_explicit(&t->gen, memory_order_acquire);
    for (int i = 0; g == seen && i < SPIN_POLLS; i++) {
      if (i % 256 == 255) sched_yield();
      sl__cpu_relax();
      g = atomic_load_explicit(&t->gen, memory_order_acquire);
    }
    if (g == seen) {
      pthread_mutex_lock(&t->lock);
      atomic_fetch_add(&t->sleepers, 1);
      while ((g = atomic_load(&t->gen)) == seen && !atomic_load(&t->stop))
        pthread_cond_wait(&t->cond, &t->lock);
      atomic_fetch_sub(&t->sleepers, 1);
      pthread_mutex_unlock(&t->lock);
    }
    if (atomic_load(&t->stop)) break;
    seen = g;
    take_parts(t);
  }
  return NULL;
}

static void wake_all(sl__team *t) {
  if (atomic_load(&t->sleepers) == 0) return;
  pthread_mutex_lock(&t->lock);
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
}

sl_status sl__team_create(int threads, const int *cpus, const char *name,
                          sl__team **out) {
  *out = NULL;
  if (threads < 1 || threads > SL__TEAM_MAX)
    return sl__fail(SL_EINVAL, "a CPU device's threads: %d is not in 1..%d",
                    threads, SL__TEAM_MAX);
  sl__team *t = sl__calloc(1, sizeof *t);
  member *ms = t ? sl__calloc((size_t)threads, sizeof *ms) : NULL;
  if (!ms) {
    sl__free(t);
    return SL_ENOMEM;
  }
  t->members = ms;
  t->pinned = cpus != NULL;
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->cond, NULL);
  for (int i = 0; i < threads; i++)
    ms[i] = (member){t, cpus ? cpus[i] : -1, {0}};
  for (int i = 1; i < threads; i++) {
    char tname[32];
    snprintf(tname, sizeof tname, "%s/%d", name ? name : "team", i);
    sl_status st = sl__thread_start(&ms[i].thread, worker_main, &ms[i], tname);
    if (st != SL_OK) {
      t->n = i;
      sl__team_destroy(t);
      return st;
    }
  }
  t->n = threads;
  *out = t;
  return SL_OK;
}

void sl__team_destroy(sl__team *t) {
  if (!t) return;
  pthread_mutex_lock(&t->lock);
  atomic_store(&t->stop, true);
  atomic_fetch_add(&t->gen, 1);
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
  for (int i = 1; i < t->n; i++)
    sl__thread_join(&t->members[i].thread);
  pthread_mutex_destroy(&t->lock);
  pthread_cond_destroy(&t->cond);
  sl__free(t->members);
  sl__free(t);
}

int sl__team_size(const sl__team *t) { return t ? t->n : 1; }

int sl__team_parts(const sl__team *t, int64_t count, int64_t grain) {
  if (grain < 1) grain = 1;
  int64_t by_grain = count <= 0 ? 1 : (count + grain - 1) / grain;
  int n = sl__team_size(t);
  return by_grain < n ? (int)by_grain : n;
}

void sl__team_for(sl__team *t, int64_t count, int64_t grain, sl__team_fn fn,
                  void *arg) {
  if (count <= 0) return;
  /* The leader pins itself when it first leads (a team of one included). */
  if (t && t->pinned &&
      !(t->leader_pinned && pthread_equal(t->led_by, pthread_self()))) {
    sl__pin_self(t->members[0].cpu);
    t->led_by = pthread_self();
    t->leader_pinned = true;
  }
  int parts = sl__team_parts(t, count, grain);
  if (parts == 1) {
    fn(arg, 0, count, 0);
    return;
  }
  t->fn = fn;
  t->arg = arg;
  t->count = count;
  atomic_store(&t->done, 0);
  atomic_store(&t->work, (uint_fast64_t)parts << 32); /* publishes the loop */
  atomic_fetch_add(&t->gen, 1);
  wake_all(t);
  take_parts(t);
  for (int i = 0; atomic_load_explicit(&t->done, memory_order_acquire) < parts;
       i++) {
    if (i % 256 == 255) sched_yield();
    sl__cpu_relax();
  }
}
