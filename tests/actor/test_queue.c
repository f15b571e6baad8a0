/* The stream threads' MPSC queues (core/queue.c), both kinds: order, bounds,
 * many producers, sleeping and waking. */
#include <pthread.h>
#include <stdatomic.h>

#include "actor_helpers.h"

static const sl__queue_kind kinds[] = {SL__QUEUE_MUTEX, SL__QUEUE_LOCKFREE};

typedef struct item {
  uint32_t producer;
  uint32_t seq;
  uint64_t check;
} item;

static void test_fifo_and_bound(void **state) {
  for (size_t k = 0; k < SL_ARRAY_LEN(kinds); k++) {
    sl__mpsc *q;
    assert_int_equal(sl__mpsc_create(kinds[k], sizeof(item), 5, &q), SL_OK);
    assert_int_equal(sl__mpsc_capacity(q), 8);
    item it = {0}, out[16];
    assert_int_equal(sl__mpsc_pop(q, out, 16), 0);
    /* Several laps around the ring. */
    for (uint32_t lap = 0; lap < 5; lap++) {
      for (uint32_t i = 0; i < 8; i++) {
        it.seq = lap * 100 + i;
        assert_true(sl__mpsc_push(q, &it));
      }
      assert_false(sl__mpsc_push(q, &it)); /* full, nothing changed */
      assert_int_equal(sl__mpsc_count(q), 8);
      assert_int_equal(sl__mpsc_pop(q, out, 3), 3);
      assert_int_equal(sl__mpsc_pop(q, out + 3, 16), 5);
      for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(out[i].seq, lap * 100 + i);
    }
    sl__mpsc_destroy(q);
  }
  sl__mpsc_destroy(NULL);
  sl__mpsc *q;
  assert_int_equal(sl__mpsc_create(SL__QUEUE_LOCKFREE, 0, 4, &q), SL_EINVAL);
  assert_int_equal(sl__mpsc_create((sl__queue_kind)9, 8, 4, &q), SL_EINVAL);
  assert_string_equal(sl__queue_kind_name(SL__QUEUE_MUTEX), "mutex");
  assert_string_equal(sl__queue_kind_name(SL__QUEUE_LOCKFREE), "lock-free");
}

typedef struct prod_arg {
  sl__mpsc *q;
  uint32_t id, n;
  _Atomic uint64_t *full_retries;
} prod_arg;

static void *producer(void *arg) {
  prod_arg *a = arg;
  for (uint32_t i = 0; i < a->n; i++) {
    item it = {a->id, i, sl__mix64(((uint64_t)a->id << 32) | i)};
    while (!sl__mpsc_push(a->q, &it)) {
      atomic_fetch_add(a->full_retries, 1);
      sched_yield();
    }
  }
  return NULL;
}

/* 4 producers, a small queue (so it fills), a consumer that sleeps when it
 * is empty: every item arrives once, each producer's in its order. */
static void test_many_producers(void **state) {
  enum { P = 4, N = 50000 };
  for (size_t k = 0; k < SL_ARRAY_LEN(kinds); k++) {
    sl__mpsc *q;
    assert_int_equal(sl__mpsc_create(kinds[k], sizeof(item), 64, &q), SL_OK);
    _Atomic uint64_t retries = 0;
    prod_arg args[P];
    pthread_t th[P];
    for (uint32_t i = 0; i < P; i++) {
      args[i] = (prod_arg){q, i, N, &retries};
      assert_int_equal(pthread_create(&th[i], NULL, producer, &args[i]), 0);
    }
    uint32_t next[P] = {0};
    uint64_t got = 0;
    item buf[32];
    while (got < (uint64_t)P * N) {
      size_t n = sl__mpsc_pop(q, buf, 32);
      if (n == 0) {
        sl__mpsc_wait(q, 0);
        continue;
      }
      for (size_t i = 0; i < n; i++) {
        assert_true(buf[i].producer < P);
        assert_int_equal(buf[i].seq, next[buf[i].producer]);
        assert_true(buf[i].check ==
                    sl__mix64(((uint64_t)buf[i].producer << 32) | buf[i].seq));
        next[buf[i].producer]++;
      }
      got += n;
    }
    for (uint32_t i = 0; i < P; i++)
      pthread_join(th[i], NULL);
    assert_int_equal(sl__mpsc_pop(q, buf, 32), 0);
    printf("%s: %llu retries on a full queue\n", sl__queue_kind_name(kinds[k]),
           (unsigned long long)atomic_load(&retries));
    sl__mpsc_destroy(q);
  }
}

typedef struct waker_arg {
  sl__mpsc *q;
  _Atomic int flag;
} waker_arg;

static void *waker(void *arg) {
  waker_arg *w = arg;
  /* Wait until the consumer sleeps, then wake it without an element. */
  while (!sl__mpsc_sleeping(w->q))
    sched_yield();
  atomic_store(&w->flag, 1);
  sl__mpsc_wake(w->q);
  return NULL;
}

static void test_wait_and_wake(void **state) {
  for (size_t k = 0; k < SL_ARRAY_LEN(kinds); k++) {
    sl__mpsc *q;
    assert_int_equal(sl__mpsc_create(kinds[k], sizeof(int), 4, &q), SL_OK);
    /* A timeout returns. */
    assert_false(sl__mpsc_sleeping(q));
    sl__mpsc_wait(q, 1000000);
    assert_false(sl__mpsc_sleeping(q));
    /* A wake before the wait makes the wait return at once. */
    sl__mpsc_wake(q);
    sl__mpsc_wait(q, 0);
    /* A wake while sleeping ends the sleep. */
    waker_arg w = {q, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waker, &w), 0);
    while (!atomic_load(&w.flag))
      sl__mpsc_wait(q, 0);
    pthread_join(t, NULL);
    /* Non-empty: returns at once. */
    int x = 7, y = 0;
    assert_true(sl__mpsc_push(q, &x));
    sl__mpsc_wait(q, 0);
    assert_int_equal(sl__mpsc_pop(q, &y, 1), 1);
    assert_int_equal(y, 7);
    sl__mpsc_destroy(q);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_and_bound),
      cmocka_unit_test(test_many_producers),
      cmocka_unit_test(test_wait_and_wake),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
