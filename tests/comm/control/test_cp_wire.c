/* Control plane: the wire and auth pieces on their own. Message checks,
 * the method table, status mapping, HMAC and its encoding, session keys,
 * the replay window (against a model, randomised). */
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cp_helpers.h"

static uint64_t test_seed(uint64_t dflt, const char *what) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t s = e && e[0] ? strtoull(e, NULL, 0) : dflt;
  printf("%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", what,
         (unsigned long long)s, (unsigned long long)s);
  fflush(stdout);
  return s;
}

static sl_status roundtrip(const ProtobufCMessage *m, ProtobufCMessage **out) {
  uint8_t *buf;
  size_t len;
  SL_CHECK(sl__cp_pack(m, &buf, &len));
  sl_status st = sl__cp_decode(m->descriptor, buf, len, out);
  sl__free(buf);
  return st;
}

static void test_join_request_checks(void **state) {
  (void)state;
  uint8_t sn[SL__CP_NONCE_BYTES], cn[SL__CP_NONCE_BYTES];
  memset(sn, 1, sizeof sn);
  memset(cn, 2, sizeof cn);
  Sluice__Cp__JoinRequest q = SLUICE__CP__JOIN_REQUEST__INIT;
  q.protocol = SL__CP_PROTOCOL;
  q.version = "0.1.0";
  q.server_nonce = (ProtobufCBinaryData){sizeof sn, sn};
  q.client_nonce = (ProtobufCBinaryData){sizeof cn, cn};
  q.rank = 3;
  q.devices = "cpu:0-3";
  q.data_addr = "10.0.0.2:7001";
  q.host = "n2";
  ProtobufCMessage *m;
  CHECK_OK(roundtrip(&q.base, &m));
  const Sluice__Cp__JoinRequest *d = (const void *)m;
  assert_int_equal(d->rank, 3);
  assert_string_equal(d->devices, "cpu:0-3");
  assert_memory_equal(d->client_nonce.data, cn, sizeof cn);
  sl__cp_msg_free(m);

  q.server_nonce.len = 5;
  CHECK_FAILS(roundtrip(&q.base, &m), SL_EINVAL,
              "malformed message: JoinRequest.server_nonce: 5 bytes, "
              "expected 32");
  assert_null(m);
  q.server_nonce.len = sizeof sn;
  q.rank = -2;
  CHECK_FAILS(roundtrip(&q.base, &m), SL_EINVAL, "JoinRequest.rank: -2");
  q.rank = -1;
  q.role = (Sluice__Cp__Role)7;
  CHECK_FAILS(roundtrip(&q.base, &m), SL_EINVAL, "JoinRequest.role: 7");
  q.role = SLUICE__CP__ROLE__CLIENT;
  q.host = "bad\x1bhost";
  CHECK_FAILS(roundtrip(&q.base, &m), SL_EINVAL,
              "JoinRequest.host: control character 0x1b at byte 3");
  q.host = "";
  CHECK_OK(roundtrip(&q.base, &m));
  sl__cp_msg_free(m);
}

static void test_other_checks(void **state) {
  (void)state;
  ProtobufCMessage *m;
  /* The member table must list ranks in order. */
  Sluice__Cp__Member a = SLUICE__CP__MEMBER__INIT, b = SLUICE__CP__MEMBER__INIT;
  a.rank = 1;
  b.rank = 0;
  Sluice__Cp__Member *ms[2] = {&a, &b};
  Sluice__Cp__MembersReply r = SLUICE__CP__MEMBERS_REPLY__INIT;
  r.n_members = 2;
  r.members = ms;
  CHECK_FAILS(roundtrip(&r.base, &m), SL_EINVAL, "entry 0 holds rank 1");
  a.rank = 0;
  b.rank = 1;
  b.state = SLUICE__CP__MEMBER_STATE__LOST;
  CHECK_OK(roundtrip(&r.base, &m));
  sl__cp_msg_free(m);
  r.n_members = 0;
  CHECK_FAILS(roundtrip(&r.base, &m), SL_EINVAL, "MembersReply.members");
  /* Statuses and states in range. */
  Sluice__Cp__JobStatus js = SLUICE__CP__JOB_STATUS__INIT;
  js.failed_node = -1;
  js.state = SLUICE__CP__JOB_STATE__FAILED;
  js.status = SL_ECOMM;
  CHECK_OK(roundtrip(&js.base, &m));
  sl__cp_msg_free(m);
  js.status = 4096;
  CHECK_FAILS(roundtrip(&js.base, &m), SL_EINVAL, "JobStatus.status");
  js.status = 0;
  js.failed_node = -5;
  CHECK_FAILS(roundtrip(&js.base, &m), SL_EINVAL, "JobStatus.failed_node");
  /* Names: empty, too long. */
  Sluice__Cp__ResultGet rg = SLUICE__CP__RESULT_GET__INIT;
  CHECK_FAILS(roundtrip(&rg.base, &m), SL_EINVAL, "ResultGet.key: empty");
  char name[SL__CP_MAX_NAME + 1];
  memset(name, 'n', SL__CP_MAX_NAME);
  name[SL__CP_MAX_NAME] = '\0';
  rg.key = name;
  CHECK_OK(roundtrip(&rg.base, &m));
  sl__cp_msg_free(m);
  Sluice__Cp__BarrierRequest br = SLUICE__CP__BARRIER_REQUEST__INIT;
  char longer[SL__CP_MAX_NAME + 2];
  memset(longer, 'n', SL__CP_MAX_NAME + 1);
  longer[SL__CP_MAX_NAME + 1] = '\0';
  br.name = longer;
  CHECK_FAILS(roundtrip(&br.base, &m), SL_EINVAL,
              "BarrierRequest.name: longer than 256 bytes");
  /* Bytes that are no message of the type at all. */
  static const uint8_t junk[] = {0x0a, 0x80};
  CHECK_FAILS(
      sl__cp_decode(&sluice__cp__kv_get__descriptor, junk, sizeof junk, &m),
      SL_EINVAL, "malformed KvGet: 2 bytes that do not decode");
  /* Zero bytes decode to the empty message. */
  CHECK_OK(sl__cp_decode(&sluice__cp__empty__descriptor, NULL, 0, &m));
  sl__cp_msg_free(m);
}

static void test_methods_and_statuses(void **state) {
  (void)state;
  for (int i = 0; i < SL__CP_N_METHODS; i++) {
    const char *p = sl__cp_methods[i].path;
    assert_int_equal(sl__cp_method_find(p, strlen(p)), i);
    assert_non_null(sl__cp_methods[i].request);
    assert_non_null(sl__cp_methods[i].reply);
    for (int j = 0; j < i; j++)
      assert_string_not_equal(p, sl__cp_methods[j].path);
  }
  assert_int_equal(sl__cp_method_find("/sluice.cp.Control/Joi", 22), -1);
  assert_int_equal(sl__cp_method_find("/sluice.cp.Control/JoinX", 24), -1);
  static const sl_status same[] = {SL_OK,     SL_EINVAL,   SL_ETIMEOUT,
                                   SL_EAUTH,  SL_ECOMM,    SL_ENOTFOUND,
                                   SL_ESTATE, SL_EABORTED, SL_ENOMEM};
  for (size_t i = 0; i < SL_ARRAY_LEN(same); i++)
    assert_int_equal(sl__cp_status_from_grpc(sl__cp_status_to_grpc(same[i])),
                     same[i]);
  /* gRPC's own failures: transport trouble is SL_ECOMM. */
  assert_int_equal(sl__cp_status_from_grpc(14), SL_ECOMM); /* UNAVAILABLE */
  assert_int_equal(sl__cp_status_from_grpc(1), SL_ECOMM);  /* CANCELLED */
  assert_int_equal(sl__cp_status_from_grpc(12), SL_EUNSUPPORTED);
}

/* The MAC is HMAC-SHA256 over (label, method, member || counter, body),
 * each piece prefixed by its 8-byte big-endian length. */
static void test_mac(void **state) {
  (void)state;
  const uint8_t key[] = "k3y";
  const uint8_t body[] = {9, 8, 7};
  uint8_t mac[SL__CP_MAC_BYTES];
  CHECK_OK(sl__cp_mac(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0102, body,
                      sizeof body, mac));
  uint8_t msg[256];
  size_t n = 0;
  const char *pieces[2] = {"sluice-cp-v1 call", "KvPut"};
  for (int p = 0; p < 2; p++) {
    size_t l = strlen(pieces[p]);
    memset(msg + n, 0, 7);
    msg[n + 7] = (uint8_t)l;
    memcpy(msg + n + 8, pieces[p], l);
    n += 8 + l;
  }
  static const uint8_t ids[] = {0, 0, 0, 0, 0, 0, 0, 12, 0, 0,
                                0, 5, 0, 0, 0, 0, 0, 0,  1, 2};
  memcpy(msg + n, ids, sizeof ids);
  n += sizeof ids;
  memset(msg + n, 0, 7);
  msg[n + 7] = sizeof body;
  memcpy(msg + n + 8, body, sizeof body);
  n += 8 + sizeof body;
  uint8_t want[32];
  unsigned int want_len = 0;
  assert_non_null(HMAC(EVP_sha256(), key, 3, msg, n, want, &want_len));
  assert_int_equal(want_len, 32);
  assert_memory_equal(mac, want, 32);
  assert_true(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0102,
                            body, sizeof body, mac, sizeof mac));
  /* Any change of any input is a different MAC. */
  assert_false(sl__cp_mac_ok(key, 2, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0102,
                             body, sizeof body, mac, sizeof mac));
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_REPLY, SL__CP_KV_PUT, 5, 0x0102,
                             body, sizeof body, mac, sizeof mac));
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_GET, 5, 0x0102,
                             body, sizeof body, mac, sizeof mac));
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 6, 0x0102,
                             body, sizeof body, mac, sizeof mac));
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0103,
                             body, sizeof body, mac, sizeof mac));
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0102,
                             body, 2, mac, sizeof mac));
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0102,
                             body, sizeof body, mac, 31));
  mac[31] ^= 1;
  assert_false(sl__cp_mac_ok(key, 3, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 0x0102,
                             body, sizeof body, mac, sizeof mac));
  CHECK_FAILS(sl__cp_mac(key, 0, SL__CP_MAC_CALL, SL__CP_KV_PUT, 5, 1, body,
                         sizeof body, mac),
              SL_EINVAL, "non-empty key");
}

/* Both ends derive the same key from the same inputs, and any difference
 * in token, nonces, member or rank gives another. */
static void test_session_keys(void **state) {
  (void)state;
  uint8_t sn[SL__CP_NONCE_BYTES], cn[SL__CP_NONCE_BYTES];
  CHECK_OK(sl__cp_random(sn, sizeof sn));
  CHECK_OK(sl__cp_random(cn, sizeof cn));
  uint8_t k1[32], k2[32], k[32];
  CHECK_OK(sl__cp_session_key("tok", sn, cn, 7, 2, k1));
  CHECK_OK(sl__cp_session_key("tok", sn, cn, 7, 2, k2));
  assert_memory_equal(k1, k2, 32);
  CHECK_OK(sl__cp_session_key("toK", sn, cn, 7, 2, k));
  assert_memory_not_equal(k, k1, 32);
  CHECK_OK(sl__cp_session_key("tok", cn, sn, 7, 2, k));
  assert_memory_not_equal(k, k1, 32);
  CHECK_OK(sl__cp_session_key("tok", sn, cn, 8, 2, k));
  assert_memory_not_equal(k, k1, 32);
  CHECK_OK(sl__cp_session_key("tok", sn, cn, 7, -1, k));
  assert_memory_not_equal(k, k1, 32);
  /* The key is not the token nor a plain hash of it. */
  assert_memory_not_equal(k1, "tok", 3);
  CHECK_FAILS(sl__cp_session_key("", sn, cn, 7, 2, k), SL_EINVAL, "token");
  /* Nonces are not repeated. */
  uint8_t sn2[SL__CP_NONCE_BYTES];
  CHECK_OK(sl__cp_random(sn2, sizeof sn2));
  assert_memory_not_equal(sn, sn2, sizeof sn);
}

static void test_replay_window(void **state) {
  (void)state;
  sl__cp_replay w = {0};
  assert_false(sl__cp_replay_accept(&w, 0));
  assert_true(sl__cp_replay_accept(&w, 1));
  assert_false(sl__cp_replay_accept(&w, 1));
  assert_true(sl__cp_replay_accept(&w, 5));
  assert_true(sl__cp_replay_accept(&w, 3)); /* overtaken, still fresh */
  assert_false(sl__cp_replay_accept(&w, 3));
  assert_true(sl__cp_replay_accept(&w, 5 + SL__CP_REPLAY_WINDOW));
  assert_false(sl__cp_replay_accept(&w, 5)); /* fell out of the window */
  assert_true(sl__cp_replay_accept(&w, 6));
  /* Against a model: accepted iff non-zero, never accepted before, and
   * within the window below the highest accepted. */
  sl_rng rng = {test_seed(42, "replay window")};
  enum { MAX_C = 4096 };
  static bool seen[MAX_C];
  memset(seen, 0, sizeof seen);
  sl__cp_replay r = {0};
  uint64_t top = 0;
  for (int i = 0; i < 20000; i++) {
    uint64_t base = top > 300 ? top - 300 : 0;
    uint64_t c = base + sl__rng_below(&rng, 330);
    if (c >= MAX_C) break;
    bool want =
        c != 0 && !seen[c] && (c > top || top - c < SL__CP_REPLAY_WINDOW);
    bool got = sl__cp_replay_accept(&r, c);
    if (got != want)
      fail_msg("step %d: counter %llu (top %llu): got %d, want %d", i,
               (unsigned long long)c, (unsigned long long)top, got, want);
    if (got) {
      seen[c] = true;
      if (c > top) top = c;
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_join_request_checks),
      cmocka_unit_test(test_other_checks),
      cmocka_unit_test(test_methods_and_statuses),
      cmocka_unit_test(test_mac),
      cmocka_unit_test(test_session_keys),
      cmocka_unit_test(test_replay_window),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
