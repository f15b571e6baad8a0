/* The device interface on the CPU device: memory (alignment, empty
 * allocations), copies in every direction and memset, streams, events and
 * callbacks (synchronous: complete when queued), handles of the wrong kind,
 * and the wrappers' argument checks for every entry, including a device
 * table with no entries at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core_int.h"
#include "device_iface.h"

static sl__device *open_cpu(int index) {
  sl__device *d = NULL;
  assert_int_equal(sl__device_open(SL_DEVICE_CPU, index, &d), SL_OK);
  assert_non_null(d);
  return d;
}

static void test_open(void **state) {
  sl__device *d = open_cpu(3);
  assert_int_equal(d->type, SL_DEVICE_CPU);
  assert_int_equal(d->index, 3);
  assert_string_equal(d->name, "cpu:3");
  sl__device_close(d);
  sl__device_close(NULL);

  sl__device *bad = (sl__device *)&bad;
  assert_int_equal(sl__device_open(SL_DEVICE_CPU, -1, &bad), SL_EINVAL);
  assert_null(bad);
  bad = (sl__device *)&bad;
  assert_int_equal(sl__device_open((sl_device_type)7, 0, &bad), SL_EINVAL);
  assert_null(bad);
  assert_non_null(strstr(sl_last_error(), "unknown device type 7"));
  assert_int_equal(sl__device_open(SL_DEVICE_CPU, 0, NULL), SL_EINVAL);
}

static void test_memory(void **state) {
  sl__device *d = open_cpu(0);
  void *p = (void *)&p;
  assert_int_equal(sl__device_alloc(d, 0, &p), SL_OK);
  assert_null(p);
  assert_int_equal(sl__device_free(d, NULL), SL_OK);
  for (size_t n = 1; n < 5000; n = n * 3 + 1) {
    assert_int_equal(sl__device_alloc(d, n, &p), SL_OK);
    assert_non_null(p);
    /* The CUDA guarantee, kept so CPU-tested code assumes no more. */
    assert_int_equal((uintptr_t)p % 256, 0);
    memset(p, 0xab, n); /* ASan checks the size */
    assert_int_equal(sl__device_free(d, p), SL_OK);
    assert_int_equal(sl__device_host_alloc(d, n, &p), SL_OK);
    assert_int_equal((uintptr_t)p % 256, 0);
    memset(p, 0xcd, n);
    assert_int_equal(sl__device_host_free(d, p), SL_OK);
  }
  /* A size whose rounding would wrap: refused, not wrapped. */
  p = (void *)&p;
  assert_int_equal(sl__device_alloc(d, SIZE_MAX - 10, &p), SL_ENOMEM);
  assert_null(p);
  assert_non_null(strstr(sl_last_error(), "cpu:0"));
  assert_int_equal(sl__device_alloc(d, 16, NULL), SL_EINVAL);
  sl__device_close(d);
}

static void test_copies(void **state) {
  sl__device *d = open_cpu(0);
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  enum { N = 1000 };
  unsigned char host[N], back[N];
  for (int i = 0; i < N; i++)
    host[i] = (unsigned char)(i * 7 + 1);
  void *a, *b;
  assert_int_equal(sl__device_alloc(d, N, &a), SL_OK);
  assert_int_equal(sl__device_alloc(d, N, &b), SL_OK);
  assert_int_equal(sl__device_memcpy_h2d(d, a, host, N, s), SL_OK);
  assert_int_equal(sl__device_memcpy_d2d(d, b, a, N, s), SL_OK);
  assert_int_equal(sl__device_memset(d, a, 0x5a, N / 2, s), SL_OK);
  memset(back, 0, N);
  assert_int_equal(sl__device_memcpy_d2h(d, back, b, N, s), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(d, s), SL_OK);
  assert_memory_equal(back, host, N);
  assert_int_equal(sl__device_memcpy_d2h(d, back, a, N, s), SL_OK);
  for (int i = 0; i < N; i++)
    assert_int_equal(back[i], i < N / 2 ? 0x5a : host[i]);

  /* Empty copies do nothing, even with NULL pointers. */
  assert_int_equal(sl__device_memcpy_h2d(d, NULL, NULL, 0, s), SL_OK);
  assert_int_equal(sl__device_memset(d, NULL, 1, 0, s), SL_OK);
  /* Missing pointers or stream are refused with the operation's name. */
  assert_int_equal(sl__device_memcpy_h2d(d, NULL, host, 4, s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "memcpy h2d on cpu:0: NULL dst"));
  assert_int_equal(sl__device_memcpy_d2h(d, back, NULL, 4, s), SL_EINVAL);
  assert_int_equal(sl__device_memcpy_d2d(d, b, a, 4, NULL), SL_EINVAL);
  assert_int_equal(sl__device_memset(d, NULL, 1, 4, s), SL_EINVAL);
  assert_int_equal(sl__device_memcpy_d2d(NULL, b, a, 4, s), SL_EINVAL);

  assert_int_equal(sl__device_free(d, a), SL_OK);
  assert_int_equal(sl__device_free(d, b), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, NULL), SL_OK);
  sl__device_close(d);
}

static void on_done(void *arg, sl_status st) {
  int *calls = arg;
  assert_int_equal(st, SL_OK);
  (*calls)++;
}

static void test_streams_events(void **state) {
  sl__device *d = open_cpu(1);
  sl__stream *s1, *s2;
  sl__event *e;
  assert_int_equal(sl__device_stream_create(d, &s1), SL_OK);
  assert_int_equal(sl__device_stream_create(d, &s2), SL_OK);
  assert_ptr_not_equal(s1, s2);
  assert_int_equal(sl__device_event_create(d, &e), SL_OK);
  bool done = false;
  /* Never recorded counts as complete, as in CUDA. */
  assert_int_equal(sl__device_event_query(d, e, &done), SL_OK);
  assert_true(done);
  assert_int_equal(sl__device_event_record(d, e, s1), SL_OK);
  done = false;
  assert_int_equal(sl__device_event_query(d, e, &done), SL_OK);
  assert_true(done);
  assert_int_equal(sl__device_event_synchronize(d, e), SL_OK);
  assert_int_equal(sl__device_stream_wait_event(d, s2, e), SL_OK);

  /* The callback has run by the time add_callback returns. */
  int calls = 0;
  assert_int_equal(sl__device_stream_add_callback(d, s1, on_done, &calls),
                   SL_OK);
  assert_int_equal(calls, 1);
  assert_int_equal(sl__device_stream_add_callback(d, s1, NULL, &calls),
                   SL_EINVAL);

  /* A handle of the other kind is refused, not trusted. */
  assert_int_equal(sl__device_event_query(d, (sl__event *)s1, &done),
                   SL_EINVAL);
  assert_false(done);
  assert_non_null(strstr(sl_last_error(), "cpu:1: event is not a live handle"));
  assert_int_equal(sl__device_event_record(d, e, (sl__stream *)e), SL_EINVAL);
  assert_int_equal(sl__device_stream_synchronize(d, (sl__stream *)e),
                   SL_EINVAL);
  assert_int_equal(sl__device_event_query(d, NULL, &done), SL_EINVAL);
  assert_int_equal(sl__device_event_query(d, e, NULL), SL_EINVAL);
  assert_int_equal(sl__device_event_record(d, NULL, s1), SL_EINVAL);
  assert_int_equal(sl__device_stream_wait_event(d, s1, NULL), SL_EINVAL);

  assert_int_equal(sl__device_event_destroy(d, e), SL_OK);
  assert_int_equal(sl__device_event_destroy(d, NULL), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, s1), SL_OK);
  assert_int_equal(sl__device_stream_destroy(d, s2), SL_OK);
  sl__device_close(d);
}

/* A device whose table has only a name: every wrapper must say which entry
 * is missing instead of calling through NULL. */
static const sl__device_vtable empty_vt = {.name = "empty"};

static void test_missing_entries(void **state) {
  sl__device *d;
  assert_int_equal(
      sl__device_wrap(&empty_vt, NULL, SL_DEVICE_CUDA, 2, NULL, &d), SL_OK);
  assert_string_equal(d->name, "empty:2");
  void *p = (void *)&p;
  char buf[8];
  sl__stream *s = (sl__stream *)buf;
  sl__event *e = (sl__event *)buf;
  bool done = true;
  assert_int_equal(sl__device_alloc(d, 8, &p), SL_EUNSUPPORTED);
  assert_null(p);
  assert_non_null(strstr(sl_last_error(), "device empty:2 has no alloc"));
  assert_int_equal(sl__device_free(d, buf), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_host_alloc(d, 8, &p), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_host_free(d, buf), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_memcpy_h2d(d, buf, buf, 1, s), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_memset(d, buf, 0, 1, s), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_stream_create(d, &s), SL_EUNSUPPORTED);
  assert_null(s);
  s = (sl__stream *)buf;
  assert_int_equal(sl__device_stream_destroy(d, s), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_stream_synchronize(d, s), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_stream_wait_event(d, s, e), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_stream_add_callback(d, s, on_done, NULL),
                   SL_EUNSUPPORTED);
  assert_int_equal(sl__device_event_create(d, &e), SL_EUNSUPPORTED);
  assert_null(e);
  e = (sl__event *)buf;
  assert_int_equal(sl__device_event_destroy(d, e), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_event_record(d, e, s), SL_EUNSUPPORTED);
  assert_int_equal(sl__device_event_query(d, e, &done), SL_EUNSUPPORTED);
  assert_false(done);
  assert_int_equal(sl__device_event_synchronize(d, e), SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "has no event_synchronize"));
  sl__device_close(d); /* no close entry: only the wrapper is freed */

  assert_int_equal(sl__device_wrap(NULL, NULL, SL_DEVICE_CPU, 0, NULL, &d),
                   SL_EINVAL);
  assert_null(d);
  assert_int_equal(sl__device_alloc(NULL, 8, &p), SL_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open),
      cmocka_unit_test(test_memory),
      cmocka_unit_test(test_copies),
      cmocka_unit_test(test_streams_events),
      cmocka_unit_test(test_missing_entries),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
