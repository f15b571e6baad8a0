/* The data plane's codecs without sockets: CRC32C against published
 * vectors and between its two implementations, frame headers (round trips
 * and every rejected malformation), handshake messages and their MACs. */
#include "dp_helpers.h"

static sl_rng rng;

/* ---- CRC32C ---------------------------------------------------------------
 */

static void test_crc_vectors(void **state) {
  (void)state;
  /* RFC 3720 (iSCSI), appendix B.4, and the usual check value. */
  uint8_t buf[32];
  assert_int_equal(sl__crc32c(0, "123456789", 9), 0xe3069283u);
  assert_int_equal(sl__crc32c_sw(0, "123456789", 9), 0xe3069283u);
  memset(buf, 0, sizeof buf);
  assert_int_equal(sl__crc32c(0, buf, 32), 0x8a9136aau);
  memset(buf, 0xff, sizeof buf);
  assert_int_equal(sl__crc32c(0, buf, 32), 0x62a8ab43u);
  for (int i = 0; i < 32; i++)
    buf[i] = (uint8_t)i;
  assert_int_equal(sl__crc32c(0, buf, 32), 0x46dd794eu);
  for (int i = 0; i < 32; i++)
    buf[i] = (uint8_t)(31 - i);
  assert_int_equal(sl__crc32c(0, buf, 32), 0x113fdb5cu);
  assert_int_equal(sl__crc32c(0, NULL, 0), 0u);
  printf("crc32c: %s\n", sl__crc32c_hw() ? "SSE4.2" : "tables");
}

/* Both implementations, whole and in random pieces, at random offsets and
 * lengths up to 200 KiB (the 3-way loop runs on 3 KiB blocks). */
static void test_crc_agree(void **state) {
  (void)state;
  size_t cap = 200 * 1024 + 64;
  uint8_t *buf = malloc(cap);
  assert_non_null(buf);
  for (size_t i = 0; i < cap; i++)
    buf[i] = (uint8_t)sl__rng_next(&rng);
  for (int t = 0; t < 300; t++) {
    size_t off = sl__rng_below(&rng, 64);
    size_t n =
        t < 100 ? sl__rng_below(&rng, 100) : sl__rng_below(&rng, cap - off);
    uint32_t whole = sl__crc32c(0, buf + off, n);
    assert_int_equal(whole, sl__crc32c_sw(0, buf + off, n));
    uint32_t c = 0;
    size_t done = 0;
    while (done < n) {
      size_t k = 1 + sl__rng_below(&rng, n - done);
      c = sl__crc32c(c, buf + off + done, k);
      done += k;
    }
    assert_int_equal(c, whole);
  }
  /* A single flipped bit anywhere changes the CRC. */
  uint32_t ref = sl__crc32c(0, buf, 10000);
  for (int t = 0; t < 200; t++) {
    size_t bit = sl__rng_below(&rng, 10000 * 8);
    buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    assert_int_not_equal(sl__crc32c(0, buf, 10000), ref);
    buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  }
  free(buf);
}

/* ---- frames
 * ------------------------------------------------------------------ */

static sl__dp_frame random_msg_frame(void) {
  sl__dp_frame f = {0};
  f.version = SL__DP_VERSION;
  f.kind = SL__DP_MSG;
  f.src = sl__rng_next(&rng);
  f.dst = sl__rng_next(&rng);
  f.piece = (int64_t)sl__rng_next(&rng);
  f.desc = (int32_t)sl__rng_next(&rng);
  f.index = (int32_t)sl__rng_next(&rng);
  f.slot = (uint16_t)sl__rng_next(&rng);
  f.consumer = (uint16_t)sl__rng_next(&rng);
  f.msg_kind = (uint8_t)(1 + sl__rng_below(&rng, 4));
  f.cmd = f.msg_kind == SL_MSG_CMD ? (uint8_t)(1 + sl__rng_below(&rng, 3)) : 0;
  f.origin = (uint16_t)sl__rng_next(&rng);
  f.credit_frames = sl__rng_next(&rng);
  f.credit_bytes = sl__rng_next(&rng);
  if (f.msg_kind == SL_MSG_READY) {
    f.len = sl__rng_below(&rng, 1u << 30);
    f.payload_crc = (uint32_t)sl__rng_next(&rng);
  }
  return f;
}

static void assert_frames_equal(const sl__dp_frame *a, const sl__dp_frame *b) {
  assert_memory_equal(a, b, sizeof *a);
}

static void test_frame_round_trip(void **state) {
  (void)state;
  uint8_t hdr[SL__DP_HDR_BYTES];
  for (int t = 0; t < 1000; t++) {
    sl__dp_frame f = random_msg_frame(), g;
    sl__dp_frame_encode(&f, hdr);
    assert_int_equal(sl__dp_frame_decode(hdr, UINT64_MAX, &g), SL_OK);
    assert_frames_equal(&f, &g);
    /* A message survives frame -> msg -> frame. */
    sl_msg m;
    sl__dp_frame_to_msg(&g, &m);
    sl__dp_frame h;
    sl__dp_frame_from_msg(&m, g.len, &h);
    h.credit_frames = g.credit_frames;
    h.credit_bytes = g.credit_bytes;
    h.payload_crc = g.payload_crc;
    assert_frames_equal(&g, &h);
  }
  for (unsigned k = SL__DP_CREDIT; k <= SL__DP_KIND_MAX; k++) {
    sl__dp_frame f = {.version = SL__DP_VERSION, .kind = (uint8_t)k}, g;
    f.desc = 77;
    f.src = 5;
    f.flags = (k == SL__DP_PROBE_REPLY || k == SL__DP_DONE)
                  ? SL__DP_FLAG_QUIESCENT
                  : 0;
    sl__dp_frame_encode(&f, hdr);
    assert_int_equal(sl__dp_frame_decode(hdr, 0, &g), SL_OK);
    assert_frames_equal(&f, &g);
  }
}

/* Decoding must fail with SL_ECOMM, a message containing `why`, and a
 * zeroed frame. */
static void expect_reject(const uint8_t *hdr, uint64_t max, const char *why) {
  sl__dp_frame g;
  memset(&g, 0xab, sizeof g);
  sl_status got_st = sl__dp_frame_decode(hdr, max, &g);
  if (got_st != SL_ECOMM)
    fail_msg("accepted (status %d) where expected: %s", (int)got_st, why);
  if (!strstr(sl_last_error(), why))
    fail_msg("rejected with '%s', expected '%s'", sl_last_error(), why);
  sl__dp_frame zero = {0};
  assert_memory_equal(&g, &zero, sizeof g);
}

/* Re-encodes f (a valid header CRC) so only the field check can fail. */
static void expect_field_reject(const sl__dp_frame *f, uint64_t max,
                                const char *why) {
  uint8_t hdr[SL__DP_HDR_BYTES];
  sl__dp_frame_encode(f, hdr);
  expect_reject(hdr, max, why);
}

static void test_frame_rejects(void **state) {
  (void)state;
  uint8_t hdr[SL__DP_HDR_BYTES], bad[SL__DP_HDR_BYTES];
  sl__dp_frame f = random_msg_frame();
  f.msg_kind = SL_MSG_READY;
  f.len = 4096;
  sl__dp_frame_encode(&f, hdr);
  /* Every single-byte change anywhere in the header is caught. */
  for (int pos = 0; pos < (int)SL__DP_HDR_BYTES; pos++)
    for (int v = 1; v < 256; v += 37) {
      memcpy(bad, hdr, sizeof bad);
      bad[pos] ^= (uint8_t)v;
      const char *why = pos < 4    ? "magic"
                        : pos == 4 ? "version"
                                   : "header checksum mismatch";
      expect_reject(bad, UINT64_MAX, why);
    }
  /* Fields that are wrong although the checksum is right. */
  sl__dp_frame g = f;
  g.version = 3;
  expect_field_reject(&g, UINT64_MAX, "version 3 (this build speaks");
  g = f;
  g.kind = 0;
  expect_field_reject(&g, UINT64_MAX, "unknown kind 0");
  g.kind = SL__DP_KIND_MAX + 1;
  expect_field_reject(&g, UINT64_MAX, "unknown kind");
  g = f;
  g.flags = 0x4;
  expect_field_reject(&g, UINT64_MAX, "unknown flags");
  /* A payload in shared memory: only with a payload, never a checksum. */
  g = f;
  g.flags = SL__DP_FLAG_SHM;
  g.payload_crc = 0x1234;
  expect_field_reject(&g, UINT64_MAX, "with a payload checksum");
  g.payload_crc = 0;
  {
    uint8_t h2[SL__DP_HDR_BYTES];
    sl__dp_frame back;
    sl__dp_frame_encode(&g, h2);
    assert_int_equal(sl__dp_frame_decode(h2, UINT64_MAX, &back), SL_OK);
    assert_int_equal(back.flags, SL__DP_FLAG_SHM);
  }
  g.kind = SL__DP_PING;
  g.len = 0;
  expect_field_reject(&g, UINT64_MAX, "ping frame with no payload");
  g = f;
  g.msg_kind = 0;
  expect_field_reject(&g, UINT64_MAX, "unknown message kind 0");
  g.msg_kind = 5; /* the runtime's internal COMPLETE never crosses */
  expect_field_reject(&g, UINT64_MAX, "unknown message kind 5");
  g = f;
  g.msg_kind = SL_MSG_CMD;
  g.len = 0;
  g.payload_crc = 0;
  g.cmd = 9;
  expect_field_reject(&g, UINT64_MAX, "unknown command 9");
  g = f;
  g.msg_kind = SL_MSG_RETURN;
  expect_field_reject(&g, UINT64_MAX, "payload of 4096 bytes on a msg frame");
  g = f;
  g.kind = SL__DP_PING;
  expect_field_reject(&g, UINT64_MAX, "on a ping frame");
  g = f;
  expect_field_reject(&g, 4095, "exceeds the limit of 4095");
  /* A collective's chunk carries a payload too, whatever its message
   * kind byte (unused there), with the same length limit. */
  g = f;
  g.kind = SL__DP_COLL;
  g.msg_kind = 0;
  {
    uint8_t h2[SL__DP_HDR_BYTES];
    sl__dp_frame back;
    sl__dp_frame_encode(&g, h2);
    assert_int_equal(sl__dp_frame_decode(h2, UINT64_MAX, &back), SL_OK);
    assert_int_equal(back.kind, SL__DP_COLL);
    assert_int_equal(back.len, g.len);
    assert_string_equal(sl__dp_kind_name(SL__DP_COLL), "coll");
  }
  expect_field_reject(&g, 4095, "exceeds the limit of 4095");
  g = f;
  g.len = 0;
  g.payload_crc = 0x1234;
  expect_field_reject(&g, UINT64_MAX, "checksum without a payload");
  /* Exactly at the limit is fine. */
  sl__dp_frame_encode(&f, hdr);
  assert_int_equal(sl__dp_frame_decode(hdr, 4096, &g), SL_OK);
}

/* ---- handshake messages
 * ------------------------------------------------------ */

static void test_hs_round_trip(void **state) {
  (void)state;
  uint8_t buf[SL__DP_PROOF_BYTES];
  for (unsigned type = SL__DP_HS_HELLO; type <= SL__DP_HS_RESULT; type++) {
    sl__dp_hs m = {.version = SL__DP_VERSION, .type = (uint8_t)type}, d;
    m.rank = 3;
    if (type != SL__DP_HS_RESULT) m.nnodes = 9;
    if (type == SL__DP_HS_PROOF) m.peer_rank = 7;
    if (type != SL__DP_HS_RESULT)
      assert_int_equal(sl__dp_random(m.nonce, sizeof m.nonce), SL_OK);
    if (type != SL__DP_HS_HELLO)
      assert_int_equal(sl__dp_random(m.mac, sizeof m.mac), SL_OK);
    size_t n = sl__dp_hs_encode(&m, buf);
    assert_int_equal(n, sl__dp_hs_size(type));
    assert_int_equal(sl__dp_hs_decode(buf, n, type, &d), SL_OK);
    assert_memory_equal(&m, &d, sizeof m);
    /* Wrong length, magic, type; reserved bytes. */
    assert_int_equal(sl__dp_hs_decode(buf, n - 1, type, &d), SL_ECOMM);
    buf[0] ^= 1;
    assert_int_equal(sl__dp_hs_decode(buf, n, type, &d), SL_ECOMM);
    assert_non_null(strstr(sl_last_error(), "magic"));
    buf[0] ^= 1;
    unsigned other =
        type == SL__DP_HS_HELLO ? SL__DP_HS_RESULT : SL__DP_HS_HELLO;
    if (sl__dp_hs_size(other) == n) {
      assert_int_equal(sl__dp_hs_decode(buf, n, other, &d), SL_ECOMM);
      assert_non_null(strstr(sl_last_error(), "message type"));
    }
    buf[7] ^= 0x10;
    assert_int_equal(sl__dp_hs_decode(buf, n, type, &d), SL_ECOMM);
    buf[7] ^= 0x10;
    /* Another version: recognised, reported with its number. */
    buf[4] = 7;
    assert_int_equal(sl__dp_hs_decode(buf, n, type, &d), SL_EUNSUPPORTED);
    assert_int_equal(d.version, 7);
    assert_non_null(strstr(sl_last_error(), "version 7"));
  }
  /* A result code out of range; a refusal that carries a MAC. */
  sl__dp_hs r = {.version = SL__DP_VERSION, .type = SL__DP_HS_RESULT}, d;
  r.code = SL__DP_HS_CODE_MAX + 1;
  sl__dp_hs_encode(&r, buf);
  assert_int_equal(
      sl__dp_hs_decode(buf, SL__DP_RESULT_BYTES, SL__DP_HS_RESULT, &d),
      SL_ECOMM);
  r.code = SL__DP_HS_AUTH;
  r.mac[5] = 1;
  sl__dp_hs_encode(&r, buf);
  assert_int_equal(
      sl__dp_hs_decode(buf, SL__DP_RESULT_BYTES, SL__DP_HS_RESULT, &d),
      SL_ECOMM);
  assert_int_equal(sl__dp_hs_decode(buf, 3, 9, &d), SL_EINVAL);
}

/* The MAC depends on every input; the token itself never appears in a
 * message. */
static void test_mac(void **state) {
  (void)state;
  uint8_t ns[32], nc[32], mac[32], other[32];
  assert_int_equal(sl__dp_random(ns, 32), SL_OK);
  assert_int_equal(sl__dp_random(nc, 32), SL_OK);
  const char *tok = TOKEN;
  size_t tl = strlen(tok);
  assert_int_equal(sl__dp_mac(tok, tl, 'C', ns, nc, 1, 2, 3, mac), SL_OK);
  assert_true(sl__dp_mac_verify(tok, tl, 'C', ns, nc, 1, 2, 3, mac));
  assert_false(sl__dp_mac_verify("test-token-0123456788", tl, 'C', ns, nc, 1, 2,
                                 3, mac));
  assert_false(sl__dp_mac_verify(tok, tl - 1, 'C', ns, nc, 1, 2, 3, mac));
  assert_false(sl__dp_mac_verify(tok, tl, 'S', ns, nc, 1, 2, 3, mac));
  assert_false(sl__dp_mac_verify(tok, tl, 'C', nc, ns, 1, 2, 3, mac));
  assert_false(sl__dp_mac_verify(tok, tl, 'C', ns, nc, 2, 1, 3, mac));
  assert_false(sl__dp_mac_verify(tok, tl, 'C', ns, nc, 1, 2, 4, mac));
  memcpy(other, mac, 32);
  other[31] ^= 1;
  assert_false(sl__dp_mac_verify(tok, tl, 'C', ns, nc, 1, 2, 3, other));
  /* Fresh nonces give a fresh MAC. */
  uint8_t ns2[32];
  assert_int_equal(sl__dp_random(ns2, 32), SL_OK);
  assert_int_equal(sl__dp_mac(tok, tl, 'C', ns2, nc, 1, 2, 3, other), SL_OK);
  assert_memory_not_equal(mac, other, 32);
  sl__dp_hs m = {.version = SL__DP_VERSION, .type = SL__DP_HS_PROOF};
  memcpy(m.mac, mac, 32);
  memcpy(m.nonce, nc, 32);
  uint8_t buf[SL__DP_PROOF_BYTES];
  size_t n = sl__dp_hs_encode(&m, buf);
  for (size_t i = 0; i + tl <= n; i++)
    assert_memory_not_equal(buf + i, tok, tl);
}

int main(void) {
  rng.state = test_seed(0x5eed0dc0, "dp_codec");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc_vectors),
      cmocka_unit_test(test_crc_agree),
      cmocka_unit_test(test_frame_round_trip),
      cmocka_unit_test(test_frame_rejects),
      cmocka_unit_test(test_hs_round_trip),
      cmocka_unit_test(test_mac),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
