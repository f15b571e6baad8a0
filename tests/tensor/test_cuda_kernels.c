/* kernels/cuda/fill.cu: fill and add on f32, on a stream of the CUDA
 * device, compared with the values computed here. Only in CUDA builds; the
 * argument checks run without a GPU, the rest skips without one. The sizes
 * include one above the grid cap (65535 blocks of 256 threads), so the
 * grid-stride loop is exercised. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "cuda/fill.h"
#include "device_iface.h"

static void test_arguments(void **state) {
  char fake_stream;
  sl__stream *s = (sl__stream *)&fake_stream; /* never launched on */
  float x;
  assert_int_equal(sl__cuda_fill_f32(&x, 1.0f, -1, s), SL_EINVAL);
  assert_int_equal(sl__cuda_fill_f32(NULL, 1.0f, 4, s), SL_EINVAL);
  assert_int_equal(sl__cuda_fill_f32(&x, 1.0f, 4, NULL), SL_EINVAL);
  assert_int_equal(sl__cuda_add_f32(&x, NULL, &x, 4, s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "cuda add: bad arguments"));
  /* Nothing to do is not an error, and launches nothing. */
  assert_int_equal(sl__cuda_fill_f32(NULL, 1.0f, 0, s), SL_OK);
  assert_int_equal(sl__cuda_add_f32(NULL, NULL, NULL, 0, s), SL_OK);
}

static void test_fill_and_add(void **state) {
  sl__device *d = NULL;
  if (sl__device_open(SL_DEVICE_CUDA, 0, &d) != SL_OK) {
    printf("skipped: %s\n", sl_last_error());
    skip();
  }
  sl__stream *s;
  assert_int_equal(sl__device_stream_create(d, &s), SL_OK);
  static const int64_t sizes[] = {1, 255, 257, 1000003, 20000000};
  for (size_t k = 0; k < SL_ARRAY_LEN(sizes); k++) {
    int64_t n = sizes[k];
    size_t bytes = (size_t)n * sizeof(float);
    void *a, *b, *host_v;
    assert_int_equal(sl__device_alloc(d, bytes, &a), SL_OK);
    assert_int_equal(sl__device_alloc(d, bytes, &b), SL_OK);
    assert_int_equal(sl__device_host_alloc(d, bytes, &host_v), SL_OK);
    float *host = host_v;
    for (int64_t i = 0; i < n; i++)
      host[i] = (float)(i % 1000) * 0.5f;
    assert_int_equal(sl__device_memcpy_h2d(d, b, host, bytes, s), SL_OK);
    assert_int_equal(sl__cuda_fill_f32(a, 2.25f, n, s), SL_OK);
    assert_int_equal(sl__cuda_add_f32(a, a, b, n, s), SL_OK); /* aliasing out */
    assert_int_equal(sl__device_memcpy_d2h(d, host, a, bytes, s), SL_OK);
    assert_int_equal(sl__device_stream_synchronize(d, s), SL_OK);
    for (int64_t i = 0; i < n; i++)
      if (host[i] != 2.25f + (float)(i % 1000) * 0.5f)
        fail_msg("n %lld: element %lld is %g", (long long)n, (long long)i,
                 (double)host[i]);
    assert_int_equal(sl__device_free(d, a), SL_OK);
    assert_int_equal(sl__device_free(d, b), SL_OK);
    assert_int_equal(sl__device_host_free(d, host_v), SL_OK);
  }
  assert_int_equal(sl__device_stream_destroy(d, s), SL_OK);
  sl__device_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_arguments),
      cmocka_unit_test(test_fill_and_add),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
