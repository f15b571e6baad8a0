/* The CUDA device through the device interface. Built in every build: the
 * first tests check what happens without a GPU (or without CUDA in the
 * build) — a clear status and message, never a crash — and run anywhere;
 * the others need a GPU and skip, printing why ("no CUDA device: <the
 * runtime's reason>"), when there is none. With a GPU they cover memory,
 * pinned memory, copies in every direction, memset, streams ordered by
 * events, callbacks, CUDA errors mapped to SL_ECUDA, the caching allocator
 * over device and pinned memory, and the notifier in both modes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/build.h>

#include "caching_alloc.h"
#include "core_int.h"
#include "core_thread.h"
#include "device_iface.h"
#include "device_notify.h"

/* Opens cuda:0 or skips the test, saying why. */
static sl__device *open_or_skip(void) {
  sl__device *d = NULL;
  sl_status st = sl__device_open(SL_DEVICE_CUDA, 0, &d);
  if (st == SL_OK) return d;
  printf("skipped: %s\n", sl_last_error());
  fflush(stdout);
  skip();
  return NULL;
}

/* ---- without a GPU
 * ------------------------------------------------------------- */

static void test_open_without_gpu(void **state) {
  sl__device *d = (sl__device *)&d;
  if (!sl_build_has_cuda()) {
    assert_int_equal(sl__device_open(SL_DEVICE_CUDA, 0, &d), SL_EUNSUPPORTED);
    assert_null(d);
    assert_non_null(
        strstr(sl_last_error(), "this build of sluice has no CUDA"));
    return;
  }
  if (sl_device_count(SL_DEVICE_CUDA) > 0) {
    /* A GPU is here: check the index range instead. */
    int n = sl_device_count(SL_DEVICE_CUDA);
    assert_int_equal(sl__device_open(SL_DEVICE_CUDA, n, &d), SL_EINVAL);
    assert_null(d);
    assert_int_equal(sl__device_open(SL_DEVICE_CUDA, -1, &d), SL_EINVAL);
    return;
  }
  sl_status st = sl__device_open(SL_DEVICE_CUDA, 0, &d);
  assert_int_equal(st, SL_ECUDA);
  assert_null(d);
  const char *msg = sl_last_error();
  printf("without a GPU: %s\n", msg);
  /* The prefix the skipping tests print, then the runtime's own reason. */
  assert_int_equal(strncmp(msg, "no CUDA device: ", 16), 0);
  assert_true(strlen(msg) > 16);
  /* And again: the failed probe left no sticky state behind. */
  assert_int_equal(sl__device_open(SL_DEVICE_CUDA, 0, &d), SL_ECUDA);
}

static void test_device_info_without_gpu(void **state) {
  sl_cuda_device_info info;
  memset(&info, 0x7f, sizeof info);
  int n = sl_device_count(SL_DEVICE_CUDA);
  sl_status want = sl_build_has_cuda() ? SL_EINVAL : SL_EUNSUPPORTED;
  assert_int_equal(sl_build_cuda_device_info(n, &info), want);
  assert_int_equal(info.name[0], 0); /* zeroed on failure */
  assert_int_equal(info.total_memory, 0);
  assert_int_equal(sl_build_cuda_device_info(-1, &info), want);
  if (!sl_build_has_cuda()) {
    assert_int_equal(n, 0);
    assert_null(sl_build_cuda_runtime_version());
  }
}

/* ---- with a GPU
 * ---------------------------------------------------------------- */

static void test_device_info(void **state) {
  sl__device_close(open_or_skip());
  int n = sl_device_count(SL_DEVICE_CUDA);
  for (int i = 0; i < n; i++) {
    sl_cuda_device_info g;
    assert_int_equal(sl_build_cuda_device_info(i, &g), SL_OK);
    printf("cuda:%d: %s, %zu bytes, sm_%d%d, %d SMs\n", i, g.name,
           g.total_memory, g.compute_major, g.compute_minor, g.multiprocessors);
    assert_true(g.name[0] != 0);
    assert_true(g.total_memory > 0);
    assert_true(g.compute_major >= 7); /* what CUDA 13 supports at least */
    assert_true(g.multiprocessors > 0);
  }
}

static void test_memory_and_copies(void **state) {
  sl__device *d = open_or_skip();
  assert_string_equal(d->name, "cuda:0");
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  enum { N = 1 << 20 };
  unsigned char *pin = NULL, *pin2 = NULL;
  void *a = NULL, *b = NULL;
  assert_int_equal(sl__device_host_alloc(d, N, (void **)&pin), SL_OK);
  assert_int_equal(sl__device_host_alloc(d, N, (void **)&pin2), SL_OK);
  assert_int_equal(sl__device_alloc(d, N, &a), SL_OK);
  assert_int_equal(sl__device_alloc(d, N, &b), SL_OK);
  assert_int_equal((uintptr_t)a % 256, 0);
  for (int i = 0; i < N; i++)
    pin[i] = (unsigned char)(i * 13 + 5);
  assert_int_equal(sl__device_memcpy_h2d(d, a, pin, N, s), SL_OK);
  assert_int_equal(sl__device_memcpy_d2d(d, b, a, N, s), SL_OK);
  assert_int_equal(sl__device_memset(d, a, 0x3c, N / 2, s), SL_OK);
  assert_int_equal(sl__device_memcpy_d2h(d, pin2, b, N, s), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(d, s), SL_OK);
  assert_memory_equal(pin2, pin, N);
  assert_int_equal(sl__device_memcpy_d2h(d, pin2, a, N, s), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(d, s), SL_OK);
  for (int i = 0; i < N; i++)
    if (pin2[i] != (i < N / 2 ? 0x3c : pin[i])) fail_msg("byte %d", i);
  /* Pageable host memory works too (the runtime stages it). */
  unsigned char *page = malloc(4096);
  assert_non_null(page);
  assert_int_equal(sl__device_memcpy_d2h(d, page, b, 4096, s), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(d, s), SL_OK);
  assert_memory_equal(page, pin, 4096);
  free(page);
  assert_int_equal(sl__device_free(d, a), SL_OK);
  assert_int_equal(sl__device_free(d, b), SL_OK);
  assert_int_equal(sl__device_host_free(d, pin), SL_OK);
  assert_int_equal(sl__device_host_free(d, pin2), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

/* A copy stream that waits on the compute stream's event sees its writes. */
static void test_streams_and_events(void **state) {
  sl__device *d = open_or_skip();
  sl__stream *compute, *copy;
  sl__event *e;
  assert_int_equal(sl__device_stream_create(d, &compute), SL_OK);
  assert_int_equal(sl__device_stream_create(d, &copy), SL_OK);
  assert_int_equal(sl__device_event_create(d, &e), SL_OK);
  bool done = false;
  assert_int_equal(sl__device_event_query(d, e, &done), SL_OK);
  assert_true(done); /* never recorded */
  enum { N = 64 << 20 };
  void *buf;
  unsigned char *host;
  assert_int_equal(sl__device_alloc(d, N, &buf), SL_OK);
  assert_int_equal(sl__device_host_alloc(d, 4096, (void **)&host), SL_OK);
  for (int round = 0; round < 4; round++) {
    int v = 0x10 + round;
    assert_int_equal(sl__device_memset(d, buf, v, N, compute), SL_OK);
    assert_int_equal(sl__device_event_record(d, e, compute), SL_OK);
    assert_int_equal(sl__device_stream_wait_event(d, copy, e), SL_OK);
    assert_int_equal(
        sl__device_memcpy_d2h(d, host, (char *)buf + N - 4096, 4096, copy),
        SL_OK);
    assert_int_equal(sl__device_stream_synchronize(d, copy), SL_OK);
    assert_int_equal(sl__device_event_query(d, e, &done), SL_OK);
    assert_true(done);
    for (int i = 0; i < 4096; i++)
      assert_int_equal(host[i], v);
  }
  assert_int_equal(sl__device_event_synchronize(d, e), SL_OK);
  assert_int_equal(sl__device_free(d, buf), SL_OK);
  assert_int_equal(sl__device_host_free(d, host), SL_OK);
  assert_int_equal(sl__device_event_destroy(d, e), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, compute), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, copy), SL_OK);
  sl__device_close(d);
}

static void on_called(void *arg, sl_status st) {
  atomic_int *c = arg;
  atomic_fetch_add(c, st == SL_OK ? 1 : 1000);
}

static void wait_count(atomic_int *c, int want) {
  uint64_t deadline = sl__now_ns() + 10ull * 1000 * 1000 * 1000;
  while (atomic_load(c) < want && sl__now_ns() < deadline)
    sl__sleep_ns(100000);
  assert_int_equal(atomic_load(c), want);
}

static void test_callbacks(void **state) {
  sl__device *d = open_or_skip();
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  atomic_int calls = 0;
  for (int i = 0; i < 10; i++)
    assert_int_equal(sl__device_stream_add_callback(d, s, on_called, &calls),
                     SL_OK);
  wait_count(&calls, 10);
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

static void test_errors_map_to_ecuda(void **state) {
  sl__device *d = open_or_skip();
  void *p = (void *)&p;
  /* 1 PiB: no GPU has it. */
  assert_int_equal(sl__device_alloc(d, (size_t)1 << 50, &p), SL_ECUDA);
  assert_null(p);
  const char *msg = sl_last_error();
  printf("huge alloc: %s\n", msg);
  assert_non_null(strstr(msg, "cuda:0: cudaMalloc(1048576.0 GiB)"));
  int local;
  assert_int_equal(sl__device_free(d, &local), SL_ECUDA);
  assert_non_null(strstr(sl_last_error(), "cudaFree"));
  /* Both errors were cleared: the device still works. */
  assert_int_equal(sl__device_alloc(d, 4096, &p), SL_OK);
  assert_int_equal(sl__device_free(d, p), SL_OK);
  sl__device_close(d);
}

static void test_caching_over_cuda(void **state) {
  sl__device *d = open_or_skip();
  sl__caching_alloc *mem = NULL, *pinned = NULL;
  sl__caching_alloc_config c = {.name = "cuda:0 memory"};
  assert_int_equal(sl__caching_alloc_create(sl__device_raw_memory(d), &c, &mem),
                   SL_OK);
  c.name = "cuda:0 pinned";
  assert_int_equal(
      sl__caching_alloc_create(sl__device_raw_pinned(d), &c, &pinned), SL_OK);
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  static const size_t sizes[] = {256, 4096, 1 << 20, (3 << 20) + 7, 12 << 20};
  uint64_t raw_first = 0;
  for (int step = 0; step < 10; step++) {
    void *dv[5], *hv[5];
    for (int i = 0; i < 5; i++) {
      assert_int_equal(sl__caching_alloc_alloc(mem, sizes[i], s, &dv[i]),
                       SL_OK);
      assert_int_equal(sl__caching_alloc_alloc(pinned, sizes[i], s, &hv[i]),
                       SL_OK);
      memset(hv[i], step, sizes[i]);
      assert_int_equal(sl__device_memcpy_h2d(d, dv[i], hv[i], sizes[i], s),
                       SL_OK);
    }
    assert_int_equal(sl__device_stream_synchronize(d, s), SL_OK);
    for (int i = 0; i < 5; i++) {
      assert_int_equal(sl__caching_alloc_free(mem, dv[i]), SL_OK);
      assert_int_equal(sl__caching_alloc_free(pinned, hv[i]), SL_OK);
    }
    sl__caching_alloc_stats st;
    sl__caching_alloc_get_stats(mem, &st);
    if (step == 0) raw_first = st.raw_allocs;
    assert_int_equal(st.raw_allocs, raw_first);
  }
  assert_int_equal(sl__caching_alloc_check(mem), SL_OK);
  assert_int_equal(sl__caching_alloc_empty_cache(mem), SL_OK);
  assert_int_equal(sl__caching_alloc_empty_cache(pinned), SL_OK);
  sl__caching_alloc_stats st;
  sl__caching_alloc_get_stats(mem, &st);
  assert_int_equal(st.reserved, 0);
  sl__caching_alloc_destroy(mem);
  sl__caching_alloc_destroy(pinned);
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

typedef struct seen {
  const unsigned char *host;
  atomic_int value; /* the pinned byte as the callback saw it */
  atomic_int calls;
} seen;

static void on_copy_done(void *arg, sl_status st) {
  seen *s = arg;
  atomic_store(&s->value, st == SL_OK ? s->host[0] : -1);
  atomic_fetch_add(&s->calls, 1);
}

/* After a long memset and a copy back, the callback already sees the copied
 * value in pinned memory: it ran after the stream's work, not before. */
static void run_notifier(sl__notify_mode mode) {
  sl__device *d = open_or_skip();
  sl__notifier_config c = {.mode = mode};
  sl__notifier *n;
  assert_int_equal(sl__notifier_create(d, &c, &n), SL_OK);
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  enum { N = 256 << 20 };
  void *buf;
  unsigned char *host;
  assert_int_equal(sl__device_alloc(d, N, &buf), SL_OK);
  assert_int_equal(sl__device_host_alloc(d, 64, (void **)&host), SL_OK);
  for (int round = 1; round <= 8; round++) {
    host[0] = 0;
    seen sn = {.host = host};
    assert_int_equal(sl__device_memset(d, buf, round, N, s), SL_OK);
    assert_int_equal(
        sl__device_memcpy_d2h(d, host, (char *)buf + N - 64, 64, s), SL_OK);
    assert_int_equal(sl__notifier_watch(n, s, on_copy_done, &sn), SL_OK);
    uint64_t deadline = sl__now_ns() + 10ull * 1000 * 1000 * 1000;
    while (atomic_load(&sn.calls) == 0 && sl__now_ns() < deadline)
      sl__sleep_ns(50000);
    assert_int_equal(atomic_load(&sn.calls), 1);
    assert_int_equal(atomic_load(&sn.value), round);
  }
  sl__notifier_destroy(n);
  assert_int_equal(sl__device_free(d, buf), SL_OK);
  assert_int_equal(sl__device_host_free(d, host), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

static void test_notifier_poll(void **state) { run_notifier(SL__NOTIFY_POLL); }
static void test_notifier_callback(void **state) {
  run_notifier(SL__NOTIFY_CALLBACK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_without_gpu),
      cmocka_unit_test(test_device_info_without_gpu),
      cmocka_unit_test(test_device_info),
      cmocka_unit_test(test_memory_and_copies),
      cmocka_unit_test(test_streams_and_events),
      cmocka_unit_test(test_callbacks),
      cmocka_unit_test(test_errors_map_to_ecuda),
      cmocka_unit_test(test_caching_over_cuda),
      cmocka_unit_test(test_notifier_poll),
      cmocka_unit_test(test_notifier_callback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
