/* Collective frames written by the sending thread itself
 * (comm/data/transport.c's write_inline): a frame to an idle connection
 * goes out at once, and one the socket takes only in part has its rest
 * written by the loop thread before anything else, so the peer reads every
 * frame whole and in order. The peer here is a fake node 1 that reads nothing
 * until node 0 has queued every frame, so the sockets fill up. */
#include "dp_helpers.h"

#define NFRAMES 1000
#define FRAME (16u * 1024u - 40u) /* odd-sized, under the inline limit */

typedef struct counts {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int sent, failed;
} counts;

static void on_sent(void *ctx, void *token, sl_status st) {
  counts *k = ctx;
  (void)token;
  pthread_mutex_lock(&k->m);
  if (st == SL_OK)
    k->sent++;
  else
    k->failed++;
  pthread_cond_broadcast(&k->cv);
  pthread_mutex_unlock(&k->m);
}

static uint8_t byte_of(int frame, size_t i) {
  return (uint8_t)(frame * 13 + i * 7 + (i >> 8));
}

static void test_partial_writes(void **state) {
  (void)state;
  static counts k;
  memset(&k, 0, sizeof k);
  pthread_mutex_init(&k.m, NULL);
  sl__cond_init(&k.cv);
  sl__dp_config c0 = dp_cfg(0, 2);
  c0.shm_bytes = -1; /* payloads after their headers, on the socket */
  sl__dp_endpoint *a = dp_make(&c0);
  sl__dp_coll_hooks h = {.sent = on_sent};
  sl__dp_endpoint_set_coll(a, &h, &k);
  int s = fake_client_open(sl__dp_endpoint_port(a), 1, 0, 2);
  assert_int_equal(sl__dp_endpoint_wait_connected(a, 1, SOON_MS), SL_OK);

  /* Small frames until one goes out from here: the loop publishes the
   * connection idle just after it opens. */
  static const uint8_t probe[64];
  int probes = 0;
  for (bool w = false; !w; probes++) {
    assert_true(probes < 2000);
    sl__dp_frame f = {0};
    f.piece = -1;
    assert_int_equal(
        sl__dp_endpoint_send_coll(a, 1, &f, probe, sizeof probe, NULL, &w),
        SL_OK);
    if (!w) sl__sleep_ns(1000000);
  }
  int probes_queued = probes - 1; /* the last one was written here */
  sl__dp_stats st;
  sl__dp_endpoint_get_stats(a, &st);
  assert_int_equal(st.frames_inline, 1);

  uint8_t *out = malloc((size_t)NFRAMES * FRAME);
  assert_non_null(out);
  int written = 0;
  for (int i = 0; i < NFRAMES; i++) {
    uint8_t *p = out + (size_t)i * FRAME;
    for (size_t j = 0; j < FRAME; j++)
      p[j] = byte_of(i, j);
    sl__dp_frame f = {0};
    f.src = 7;
    f.piece = i;
    bool w = false;
    assert_int_equal(sl__dp_endpoint_send_coll(a, 1, &f, p, FRAME, NULL, &w),
                     SL_OK);
    written += w;
  }
  /* the sockets filled up: a frame went out in part */
  sl__dp_endpoint_get_stats(a, &st);
  assert_true(written < NFRAMES);
  assert_true(st.frames_inline_part >= 1);

  uint8_t *in = malloc(FRAME);
  assert_non_null(in);
  for (int i = 0; i < NFRAMES;) {
    uint8_t hdr[SL__DP_HDR_BYTES];
    sl__dp_frame g;
    assert_int_equal(fake_read(s, hdr, sizeof hdr, SOON_MS), sizeof hdr);
    assert_int_equal(sl__dp_frame_decode(hdr, 1u << 20, &g), SL_OK);
    if (g.kind != SL__DP_COLL) { /* a ping or credit request */
      assert_int_equal(g.len, 0);
      continue;
    }
    if (g.piece < 0) { /* a probe */
      assert_int_equal(g.len, sizeof probe);
      assert_int_equal(fake_read(s, in, sizeof probe, SOON_MS), sizeof probe);
      probes--;
      continue;
    }
    assert_int_equal(g.piece, i);
    assert_int_equal(g.src, 7);
    assert_int_equal(g.len, FRAME);
    assert_int_equal(fake_read(s, in, FRAME, SOON_MS), FRAME);
    assert_int_equal(sl__crc32c(0, in, FRAME), g.payload_crc);
    assert_memory_equal(in, out + (size_t)i * FRAME, FRAME);
    i++;
  }
  /* every frame accounted once: written here, or by the loop (sent) */
  pthread_mutex_lock(&k.m);
  while (written + k.sent < NFRAMES + probes_queued && !k.failed)
    if (!sl__cond_wait_ns(&k.cv, &k.m, (uint64_t)SOON_MS * 1000000ull)) break;
  pthread_mutex_unlock(&k.m);
  assert_int_equal(k.failed, 0);
  assert_int_equal(written + k.sent, NFRAMES + probes_queued);
  assert_int_equal(probes, 0);
  sl__dp_endpoint_get_stats(a, &st);
  assert_int_equal(st.payload_bytes_sent,
                   (uint64_t)NFRAMES * FRAME + (uint64_t)probes_queued * 64 + 64);
  free(in);
  close(s);
  sl__dp_endpoint_destroy(a);
  free(out);
  pthread_mutex_destroy(&k.m);
  pthread_cond_destroy(&k.cv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_partial_writes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
