/* Thread teams: every item of a loop is run exactly once, in the part the
 * partition names; workers take parts; loops back to back (workers
 * spinning) and after a sleep (workers woken) both work; bad sizes are
 * refused; a NULL team runs on the caller. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core_team.h"
#include "core_thread.h"

#define ITEMS 1000

typedef struct visit {
  atomic_int count[ITEMS];
  int part_of[ITEMS];
  pthread_t thread_of_part[SL__TEAM_MAX];
  int64_t count_n;
  int parts;
} visit;

static void mark(void *arg, int64_t b, int64_t e, int part) {
  visit *v = arg;
  v->thread_of_part[part] = pthread_self();
  for (int64_t i = b; i < e; i++) {
    atomic_fetch_add(&v->count[i], 1);
    v->part_of[i] = part;
  }
}

/* Runs one loop and checks each item ran once, in the documented part. */
static void check_loop(sl__team *t, int64_t n, int64_t grain) {
  static visit v;
  memset(&v, 0, sizeof v);
  sl__team_for(t, n, grain, mark, &v);
  int parts = sl__team_parts(t, n, grain);
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(atomic_load(&v.count[i]), 1);
    int want = 0;
    while (!(i >= n * want / parts && i < n * (want + 1) / parts))
      want++;
    assert_int_equal(v.part_of[i], want);
  }
  for (int64_t i = n; i < ITEMS; i++)
    assert_int_equal(atomic_load(&v.count[i]), 0);
}

static void test_team_loops(void **state) {
  (void)state;
  for (int size = 1; size <= 5; size++) {
    sl__team *t;
    assert_int_equal(sl__team_create(size, NULL, "test", &t), SL_OK);
    assert_int_equal(sl__team_size(t), size);
    for (int64_t n = 0; n <= 37; n++)
      check_loop(t, n, 1);
    check_loop(t, ITEMS, 1);
    check_loop(t, ITEMS, 300); /* 4 parts at most */
    assert_int_equal(sl__team_parts(t, ITEMS, 300), size < 4 ? size : 4);
    /* Back to back: workers still spinning. */
    for (int r = 0; r < 2000; r++)
      check_loop(t, 64, 1);
    /* After a pause: workers asleep must be woken. */
    sl__sleep_ns(200 * 1000 * 1000);
    check_loop(t, ITEMS, 1);
    sl__team_destroy(t);
  }
  sl__team_destroy(NULL);
}

/* The workers take parts: parts that each take a millisecond are not all
 * run by the caller. */
static void slow(void *arg, int64_t b, int64_t e, int part) {
  visit *v = arg;
  v->thread_of_part[part] = pthread_self();
  sl__sleep_ns(1000 * 1000);
}

static void test_team_shares(void **state) {
  (void)state;
  sl__team *t;
  assert_int_equal(sl__team_create(3, NULL, "share", &t), SL_OK);
  static visit v;
  int shared = 0;
  for (int r = 0; r < 10; r++) {
    memset(&v, 0, sizeof v);
    sl__team_for(t, 3, 1, slow, &v);
    for (int p = 0; p < 3; p++)
      shared += !pthread_equal(v.thread_of_part[p], pthread_self());
  }
  assert_true(shared > 0);
  sl__team_destroy(t);
}

static void test_team_parts(void **state) {
  (void)state;
  assert_int_equal(sl__team_size(NULL), 1);
  assert_int_equal(sl__team_parts(NULL, 100, 1), 1);
  sl__team *t;
  assert_int_equal(sl__team_create(4, NULL, NULL, &t), SL_OK);
  assert_int_equal(sl__team_parts(t, 0, 1), 1);
  assert_int_equal(sl__team_parts(t, 3, 1), 3);
  assert_int_equal(sl__team_parts(t, 3, 0), 3); /* grain < 1 counts as 1 */
  assert_int_equal(sl__team_parts(t, 100, 30), 4);
  assert_int_equal(sl__team_parts(t, 100, 40), 3);
  assert_int_equal(sl__team_parts(t, 100, 100), 1);
  sl__team_destroy(t);
  /* A NULL team runs the whole loop on the caller. */
  static visit v;
  memset(&v, 0, sizeof v);
  sl__team_for(NULL, 10, 1, mark, &v);
  for (int i = 0; i < 10; i++)
    assert_int_equal(atomic_load(&v.count[i]), 1);
}

static void test_team_refuses(void **state) {
  (void)state;
  sl__team *t = (sl__team *)1;
  assert_int_equal(sl__team_create(0, NULL, "x", &t), SL_EINVAL);
  assert_null(t);
  assert_non_null(strstr(sl_last_error(), "0 is not in 1..256"));
  assert_int_equal(sl__team_create(SL__TEAM_MAX + 1, NULL, "x", &t), SL_EINVAL);
}

/* Pinned: every member runs on the CPU it was given (all on the first
 * allowed CPU, which exists on any machine). */
static void pinned_cpu(void *arg, int64_t b, int64_t e, int part) {
  (void)b;
  (void)e;
  int *cpu_of_part = arg;
  cpu_of_part[part] = sched_getcpu();
}

static void test_team_pinned(void **state) {
  (void)state;
  int cpus[SL__TEAM_MAX];
  int n = sl__cpu_list(cpus, SL__TEAM_MAX);
  assert_true(n >= 1);
  for (int i = 1; i < n; i++)
    assert_true(cpus[i] > cpus[i - 1]);
  int mine[3] = {cpus[0], cpus[0], cpus[0]};
  sl__team *t;
  assert_int_equal(sl__team_create(3, mine, "pin", &t), SL_OK);
  int cpu_of_part[3] = {-1, -1, -1};
  sl__team_for(t, 3, 1, pinned_cpu, cpu_of_part);
  for (int i = 0; i < 3; i++)
    assert_int_equal(cpu_of_part[i], cpus[0]);
  sl__team_destroy(t);
  /* A team of one pins its leader too: the caller's affinity, reset to
   * every allowed CPU, is the team's one CPU after it leads a loop. */
  cpu_set_t all, got;
  CPU_ZERO(&all);
  for (int i = 0; i < n; i++)
    CPU_SET(cpus[i], &all);
  assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof all, &all), 0);
  int last = cpus[n - 1];
  assert_int_equal(sl__team_create(1, &last, "pin1", &t), SL_OK);
  sl__team_for(t, 1, 1, pinned_cpu, cpu_of_part);
  assert_int_equal(pthread_getaffinity_np(pthread_self(), sizeof got, &got), 0);
  assert_int_equal(CPU_COUNT(&got), 1);
  assert_true(CPU_ISSET(last, &got));
  sl__team_destroy(t);
  assert_false(sl__pin_self(-1));
}

/* Each thread's scratch buffers: 64-byte aligned, one per slot, kept (the
 * same address) while no larger one is asked for, grown keeping nothing,
 * and a thread's never another's. */
static void *other_thread_scratch(void *arg) {
  return sl__thread_scratch(SL__SCRATCH_GEMM_PART, *(size_t *)arg);
}

static void test_thread_scratch(void **state) {
  (void)state;
  char *a = sl__thread_scratch(SL__SCRATCH_OP_WORKSPACE, 100);
  char *b = sl__thread_scratch(SL__SCRATCH_GEMM_PART, 100);
  assert_non_null(a);
  assert_non_null(b);
  assert_true((uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0);
  assert_true(a + 100 <= b || b + 100 <= a); /* slots do not overlap */
  memset(a, 1, 100);
  memset(b, 2, 100);
  assert_ptr_equal(sl__thread_scratch(SL__SCRATCH_OP_WORKSPACE, 64), a);
  assert_int_equal(a[99], 1);
  char *big = sl__thread_scratch(SL__SCRATCH_OP_WORKSPACE, 1 << 20);
  assert_non_null(big);
  memset(big, 3, 1 << 20);
  assert_ptr_equal(sl__thread_scratch(SL__SCRATCH_GEMM_PART, 100), b);
  assert_int_equal(b[0], 2);
  size_t bytes = 100;
  pthread_t t;
  void *theirs = NULL;
  assert_int_equal(pthread_create(&t, NULL, other_thread_scratch, &bytes), 0);
  assert_int_equal(pthread_join(t, &theirs), 0);
  assert_non_null(theirs);
  assert_ptr_not_equal(theirs, b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_team_loops),  cmocka_unit_test(test_team_parts),
      cmocka_unit_test(test_team_shares), cmocka_unit_test(test_team_refuses),
      cmocka_unit_test(test_team_pinned), cmocka_unit_test(test_thread_scratch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
