/* Endpoints on 127.0.0.1 opening connections: the handshake succeeding,
 * refused for a wrong or missing token, another version or a wrong rank
 * (the endpoint serving on afterwards), a port in use, an unreachable
 * peer, a peer that never answers, simultaneous dials, and malformed
 * frames from a peer that passed the handshake. */
#include "dp_helpers.h"

/* A correct peer can still connect: the endpoint kept serving. */
static void assert_still_serving(sl__dp_endpoint *server, uint32_t n) {
  sl__dp_config c = dp_cfg(n - 1, n);
  sl__dp_endpoint *probe = dp_make(&c);
  uint32_t srv = sl__dp_endpoint_node(server);
  assert_int_equal(sl__dp_endpoint_set_peer(probe, srv, "127.0.0.1",
                                            sl__dp_endpoint_port(server)),
                   SL_OK);
  assert_int_equal(sl__dp_endpoint_connect(probe, srv), SL_OK);
  if (sl__dp_endpoint_wait_connected(probe, srv, SOON_MS) != SL_OK)
    fail_msg("the endpoint stopped serving: %s", sl_last_error());
  sl__dp_endpoint_destroy(probe);
}

static void test_connect(void **state) {
  (void)state;
  sl__dp_endpoint *eps[2];
  dp_mesh(eps, 2, NULL);
  assert_int_not_equal(sl__dp_endpoint_port(eps[0]), 0);
  assert_int_equal(sl__dp_endpoint_connect(eps[0], 1), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(eps[0], 1, SOON_MS), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(eps[1], 0, SOON_MS), SL_OK);
  sl__dp_stats s0, s1;
  sl__dp_endpoint_get_stats(eps[0], &s0);
  sl__dp_endpoint_get_stats(eps[1], &s1);
  assert_int_equal(s0.connections_opened, 1);
  assert_int_equal(s0.connections_dialed, 1);
  assert_int_equal(s1.connections_opened, 1);
  assert_int_equal(s1.connections_dialed, 0);
  assert_int_equal(s1.handshakes_refused, 0);
  /* Bad arguments. */
  assert_int_equal(sl__dp_endpoint_connect(eps[0], 0), SL_EINVAL);
  assert_int_equal(sl__dp_endpoint_connect(eps[0], 2), SL_EINVAL);
  assert_int_equal(sl__dp_endpoint_set_peer(eps[0], 5, "127.0.0.1", 1),
                   SL_EINVAL);
  assert_int_equal(
      sl__dp_endpoint_set_peer(eps[0], 1, "no such host.invalid", 1),
      SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no such host.invalid"));
  sl__dp_endpoint_destroy(eps[0]);
  sl__dp_endpoint_destroy(eps[1]);
  sl__dp_endpoint_destroy(NULL);
}

static void test_bad_config(void **state) {
  (void)state;
  sl__dp_endpoint *ep = (sl__dp_endpoint *)1;
  sl__dp_config c = dp_cfg(0, 2);
  c.token = NULL;
  c.token_len = 0;
  assert_int_equal(sl__dp_endpoint_create(&c, &ep), SL_EINVAL);
  assert_null(ep);
  assert_non_null(strstr(sl_last_error(), "token is required"));
  c = dp_cfg(2, 2);
  assert_int_equal(sl__dp_endpoint_create(&c, &ep), SL_EINVAL);
  c = dp_cfg(0, 2);
  c.listen_host = "not-an-address";
  assert_int_equal(sl__dp_endpoint_create(&c, &ep), SL_EINVAL);
  assert_int_equal(sl__dp_endpoint_create(NULL, &ep), SL_EINVAL);
}

static void test_port_in_use(void **state) {
  (void)state;
  sl__dp_config c = dp_cfg(0, 2);
  sl__dp_endpoint *a = dp_make(&c), *b = (sl__dp_endpoint *)1;
  c.listen_port = sl__dp_endpoint_port(a);
  assert_int_equal(sl__dp_endpoint_create(&c, &b), SL_EIO);
  assert_null(b);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%u: address in use", c.listen_port);
  if (strcmp(sl_last_error(), want) != 0)
    fail_msg("'%s', expected '%s'", sl_last_error(), want);
  sl__dp_endpoint_destroy(a);
}

static void test_wrong_token(void **state) {
  (void)state;
  errlog e0, e1;
  errlog_init(&e0);
  errlog_init(&e1);
  sl__dp_config cfg[2] = {dp_cfg(0, 3), dp_cfg(1, 3)};
  cfg[0].token = "another token";
  cfg[0].token_len = strlen("another token");
  cfg[0].on_error = errlog_cb;
  cfg[0].on_error_ctx = &e0;
  cfg[1].on_error = errlog_cb;
  cfg[1].on_error_ctx = &e1;
  sl__dp_endpoint *eps[2];
  dp_mesh(eps, 2, cfg);
  assert_int_equal(sl__dp_endpoint_connect(eps[0], 1), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(eps[0], 1, SOON_MS),
                   SL_EAUTH);
  if (!strstr(sl_last_error(), "wrong token") ||
      !strstr(sl_last_error(), "node 1"))
    fail_msg("dialer's error: %s", sl_last_error());
  /* Both sides reported it: the server as a refusal of an unproved peer. */
  assert_true(errlog_wait(&e1, 1, SOON_MS) >= 1);
  assert_int_equal(e1.last, SL_EAUTH);
  assert_int_equal(e1.last_node, UINT32_MAX);
  assert_true(errlog_has(&e1, "refused a connection"));
  assert_true(errlog_has(&e1, "claiming to be node 0"));
  assert_true(errlog_wait(&e0, 1, SOON_MS) >= 1);
  assert_int_equal(e0.last, SL_EAUTH);
  assert_int_equal(e0.last_node, 1);
  sl__dp_stats s;
  sl__dp_endpoint_get_stats(eps[1], &s);
  assert_int_equal(s.handshakes_refused, 1);
  assert_int_equal(s.connections_opened, 0);
  /* The other way round: the client sees the server fail its proof. */
  assert_int_equal(sl__dp_endpoint_connect(eps[1], 0), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(eps[1], 0, SOON_MS),
                   SL_EAUTH);
  assert_true(strstr(sl_last_error(), "wrong token") != NULL);
  assert_still_serving(eps[1], 3);
  sl__dp_endpoint_destroy(eps[0]);
  sl__dp_endpoint_destroy(eps[1]);
  errlog_fini(&e0);
  errlog_fini(&e1);
}

/* A client that connects and proves nothing: closed after the handshake
 * timeout, reported; one that sends a proof without the token: refused. */
static void test_missing_token(void **state) {
  (void)state;
  errlog e;
  errlog_init(&e);
  sl__dp_config c = dp_cfg(0, 3);
  c.handshake_timeout_ms = 300;
  c.on_error = errlog_cb;
  c.on_error_ctx = &e;
  sl__dp_endpoint *ep = dp_make(&c);
  uint16_t port = sl__dp_endpoint_port(ep);

  int s = fake_connect(port);
  assert_true(fake_sees_close(s, SOON_MS));
  close(s);
  assert_true(errlog_wait(&e, 1, SOON_MS) >= 1);
  assert_true(errlog_has(&e, "no handshake (token proof) within 300 ms"));

  s = fake_connect(port);
  uint8_t buf[SL__DP_PROOF_BYTES];
  sl__dp_hs hello, res;
  assert_int_equal(fake_read(s, buf, SL__DP_HELLO_BYTES, SOON_MS),
                   SL__DP_HELLO_BYTES);
  assert_int_equal(
      sl__dp_hs_decode(buf, SL__DP_HELLO_BYTES, SL__DP_HS_HELLO, &hello),
      SL_OK);
  assert_int_equal(hello.rank, 0);
  assert_int_equal(hello.nnodes, 3);
  sl__dp_hs proof = {.version = SL__DP_VERSION,
                     .type = SL__DP_HS_PROOF,
                     .rank = 1,
                     .peer_rank = 0,
                     .nnodes = 3}; /* all-zero MAC: no token */
  fake_write(s, buf, sl__dp_hs_encode(&proof, buf));
  assert_int_equal(fake_read(s, buf, SL__DP_RESULT_BYTES, SOON_MS),
                   SL__DP_RESULT_BYTES);
  assert_int_equal(
      sl__dp_hs_decode(buf, SL__DP_RESULT_BYTES, SL__DP_HS_RESULT, &res),
      SL_OK);
  assert_int_equal(res.code, SL__DP_HS_AUTH);
  assert_true(fake_sees_close(s, SOON_MS));
  close(s);
  assert_true(errlog_wait(&e, 2, SOON_MS) >= 2);
  assert_true(errlog_has(&e, "claiming to be node 1: wrong token"));
  sl__dp_stats st;
  sl__dp_endpoint_get_stats(ep, &st);
  assert_int_equal(st.handshakes_refused, 2);
  assert_still_serving(ep, 3);
  sl__dp_endpoint_destroy(ep);
  errlog_fini(&e);
}

/* A client of another version, and one dialing the wrong rank. */
static void test_refusals(void **state) {
  (void)state;
  errlog e;
  errlog_init(&e);
  sl__dp_config c = dp_cfg(0, 3);
  c.on_error = errlog_cb;
  c.on_error_ctx = &e;
  sl__dp_endpoint *ep = dp_make(&c);
  uint16_t port = sl__dp_endpoint_port(ep);
  struct {
    uint8_t version;
    uint32_t rank, peer_rank, nnodes;
    unsigned code;
    const char *logged;
  } cases[] = {
      {3, 1, 0, 3, SL__DP_HS_VERSION, "speaks data-plane version 3"},
      {SL__DP_VERSION, 1, 2, 3, SL__DP_HS_RANK, "it dialed node 2 of 3"},
      {SL__DP_VERSION, 1, 0, 4, SL__DP_HS_RANK, "it dialed node 0 of 4"},
      {SL__DP_VERSION, 0, 0, 3, SL__DP_HS_RANK, "as node 0, but this is"},
      {SL__DP_VERSION, 3, 0, 3, SL__DP_HS_RANK, "as node 3, but this is"},
  };
  for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
    int s = fake_connect(port);
    uint8_t buf[SL__DP_PROOF_BYTES];
    sl__dp_hs hello, res;
    assert_int_equal(fake_read(s, buf, SL__DP_HELLO_BYTES, SOON_MS),
                     SL__DP_HELLO_BYTES);
    assert_int_equal(
        sl__dp_hs_decode(buf, SL__DP_HELLO_BYTES, SL__DP_HS_HELLO, &hello),
        SL_OK);
    sl__dp_hs proof = {.version = SL__DP_VERSION,
                       .type = SL__DP_HS_PROOF,
                       .rank = cases[i].rank,
                       .peer_rank = cases[i].peer_rank,
                       .nnodes = cases[i].nnodes};
    sl__dp_random(proof.nonce, SL__DP_NONCE_BYTES);
    sl__dp_mac(TOKEN, strlen(TOKEN), 'C', hello.nonce, proof.nonce,
               cases[i].rank, cases[i].peer_rank, cases[i].nnodes, proof.mac);
    size_t n = sl__dp_hs_encode(&proof, buf);
    buf[4] = cases[i].version;
    fake_write(s, buf, n);
    assert_int_equal(fake_read(s, buf, SL__DP_RESULT_BYTES, SOON_MS),
                     SL__DP_RESULT_BYTES);
    assert_int_equal(
        sl__dp_hs_decode(buf, SL__DP_RESULT_BYTES, SL__DP_HS_RESULT, &res),
        SL_OK);
    assert_int_equal(res.code, cases[i].code);
    assert_true(fake_sees_close(s, SOON_MS));
    close(s);
    assert_true(errlog_wait(&e, (int)i + 1, SOON_MS) >= (int)i + 1);
    if (!errlog_has(&e, cases[i].logged))
      fail_msg("case %zu: '%s' not in:\n%s", i, cases[i].logged, e.msgs);
  }
  /* Not a sluice peer at all: garbage instead of a proof. */
  int s = fake_connect(port);
  uint8_t junk[SL__DP_PROOF_BYTES];
  assert_int_equal(fake_read(s, junk, SL__DP_HELLO_BYTES, SOON_MS),
                   SL__DP_HELLO_BYTES);
  memset(junk, 'x', sizeof junk);
  fake_write(s, junk, sizeof junk);
  assert_true(fake_sees_close(s, SOON_MS));
  close(s);
  assert_true(errlog_wait(&e, 6, SOON_MS) >= 6);
  assert_true(errlog_has(&e, "bad handshake: magic"));
  assert_still_serving(ep, 3);
  sl__dp_endpoint_destroy(ep);
  errlog_fini(&e);
}

/* Dialing a server of another version, one that answers as the wrong
 * node, and one that accepts and never speaks. */
static void *fake_server(void *arg) {
  int *a = arg; /* listen socket, mode, result */
  int s = fake_accept(a[0], SOON_MS);
  if (s < 0) {
    a[2] = -1;
    return NULL;
  }
  uint8_t buf[SL__DP_HELLO_BYTES];
  sl__dp_hs hello = {.version = SL__DP_VERSION,
                     .type = SL__DP_HS_HELLO,
                     .rank = 1,
                     .nnodes = 2};
  sl__dp_hs_encode(&hello, buf);
  if (a[1] == 0) buf[4] = 9; /* another version */
  if (a[1] == 1) buf[8] = 5; /* "node 5" */
  if (a[1] != 2) fake_write(s, buf, sizeof buf);
  a[2] = fake_sees_close(s, SOON_MS) ? 1 : 0;
  close(s);
  return NULL;
}

static void test_dial_refusals(void **state) {
  (void)state;
  const char *want[] = {"version mismatch: the peer speaks data-plane "
                        "version 9, this build 2",
                        "answered as node 5 of 2",
                        "unreachable: handshake "
                        "timed out after 200 ms"};
  for (int mode = 0; mode < 3; mode++) {
    uint16_t port;
    int ls = fake_listen(&port);
    int args[3] = {ls, mode, 0};
    sl__thread t = {0};
    assert_int_equal(sl__thread_start(&t, fake_server, args, "fake"), SL_OK);
    sl__dp_config c = dp_cfg(0, 2);
    c.handshake_timeout_ms = 200;
    c.connect_retries = -1; /* one attempt: the fake accepts only one */
    sl__dp_endpoint *ep = dp_make(&c);
    assert_int_equal(sl__dp_endpoint_set_peer(ep, 1, "127.0.0.1", port), SL_OK);
    assert_int_equal(sl__dp_endpoint_connect(ep, 1), SL_OK);
    sl_status st = sl__dp_endpoint_wait_connected(ep, 1, SOON_MS);
    assert_int_equal(st, SL_ECOMM);
    if (!strstr(sl_last_error(), want[mode]) ||
        !strstr(sl_last_error(), "node 1"))
      fail_msg("mode %d: '%s'", mode, sl_last_error());
    sl__thread_join(&t);
    assert_int_equal(args[2], 1); /* the endpoint closed the connection */
    close(ls);
    sl__dp_endpoint_destroy(ep);
  }
}

/* Nothing listens: refused, retried, then unreachable. */
static void test_unreachable(void **state) {
  (void)state;
  errlog e;
  errlog_init(&e);
  sl__dp_config c = dp_cfg(0, 2);
  c.connect_retries = 2;
  c.retry_delay_ms = 10;
  c.on_error = errlog_cb;
  c.on_error_ctx = &e;
  sl__dp_endpoint *ep = dp_make(&c);
  uint16_t port = dead_port();
  assert_int_equal(sl__dp_endpoint_set_peer(ep, 1, "127.0.0.1", port), SL_OK);
  assert_int_equal(sl__dp_endpoint_connect(ep, 1), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(ep, 1, SOON_MS), SL_ECOMM);
  char want[128];
  snprintf(want, sizeof want,
           "node 1 (127.0.0.1:%u): unreachable: connection refused (3 "
           "attempts)",
           port);
  if (!strstr(sl_last_error(), want))
    fail_msg("'%s', expected '%s'", sl_last_error(), want);
  assert_true(errlog_wait(&e, 1, SOON_MS) >= 1);
  assert_int_equal(e.last_node, 1);
  /* A peer without an address. */
  sl__dp_config c3 = dp_cfg(0, 3);
  sl__dp_endpoint *ep3 = dp_make(&c3);
  assert_int_equal(sl__dp_endpoint_connect(ep3, 2), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(ep3, 2, SOON_MS), SL_ECOMM);
  assert_non_null(strstr(sl_last_error(), "no address known for node 2"));
  assert_int_equal(sl__dp_endpoint_wait_connected(ep3, 1, 50), SL_ETIMEOUT);
  sl__dp_endpoint_destroy(ep3);
  sl__dp_endpoint_destroy(ep);
  errlog_fini(&e);
}

/* Both dial at once, many times: exactly one connection per pair. */
typedef struct racer {
  sl__dp_endpoint *ep;
  uint32_t peer;
  pthread_barrier_t *bar;
  sl_status st;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  pthread_barrier_wait(r->bar);
  r->st = sl__dp_endpoint_connect(r->ep, r->peer);
  if (r->st == SL_OK)
    r->st = sl__dp_endpoint_wait_connected(r->ep, r->peer, SOON_MS);
  return NULL;
}

static void test_simultaneous_dial(void **state) {
  (void)state;
  uint64_t dups = 0;
  for (int it = 0; it < 40; it++) {
    sl__dp_endpoint *eps[2];
    dp_mesh(eps, 2, NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    racer r[2] = {{eps[0], 1, &bar, SL_OK}, {eps[1], 0, &bar, SL_OK}};
    sl__thread t[2] = {{0}, {0}};
    for (int i = 0; i < 2; i++)
      assert_int_equal(sl__thread_start(&t[i], race, &r[i], "race"), SL_OK);
    for (int i = 0; i < 2; i++)
      sl__thread_join(&t[i]);
    pthread_barrier_destroy(&bar);
    assert_int_equal(r[0].st, SL_OK);
    assert_int_equal(r[1].st, SL_OK);
    sl__dp_stats s0, s1;
    sl__dp_endpoint_get_stats(eps[0], &s0);
    sl__dp_endpoint_get_stats(eps[1], &s1);
    assert_int_equal(s0.connections_opened, 1);
    assert_int_equal(s1.connections_opened, 1);
    /* The one connection was dialed by exactly one of them. */
    assert_int_equal(s0.connections_dialed + s1.connections_dialed, 1);
    dups += s0.duplicates_refused + s1.duplicates_refused;
    sl__dp_endpoint_destroy(eps[0]);
    sl__dp_endpoint_destroy(eps[1]);
  }
  printf("simultaneous dials: %llu duplicate attempts refused in 40 rounds\n",
         (unsigned long long)dups);
}

/* Frames that fail their checks, from a peer that passed the handshake:
 * reported naming the peer and the check, connection closed, the endpoint
 * serving on. */
static void test_bad_frames(void **state) {
  (void)state;
  errlog e;
  errlog_init(&e);
  sl__dp_config c = dp_cfg(0, 3);
  c.on_error = errlog_cb;
  c.on_error_ctx = &e;
  c.max_frame_bytes = 1u << 20;
  sl__dp_endpoint *ep = dp_make(&c);
  uint16_t port = sl__dp_endpoint_port(ep);
  enum {
    BAD_MAGIC,
    BAD_VERSION,
    BAD_HCRC,
    BAD_KIND,
    BAD_PAYLOAD_KIND,
    TOO_LONG,
    BAD_PCRC,
    WRONG_ORIGIN,
    BAD_CREDIT,
    TRUNCATED,
    TRUNCATED_HEADER,
    N_CASES
  };
  const char *want[N_CASES] = {
      "bad frame: magic",
      "bad frame: version 3",
      "header checksum mismatch",
      "unknown kind 42",
      "on a ping frame",
      "exceeds the limit of 1048576",
      "payload checksum mismatch",
      "a message from node 2 on node 1's connection",
      "credit for 5 messages",
      "lost: connection closed by the peer in the middle of a frame (10 "
      "of 100 payload bytes received)",
      "lost: connection closed by the peer in the middle of a frame (30 "
      "of 80 header bytes received)",
  };
  uint8_t payload[100];
  memset(payload, 7, sizeof payload);
  for (int k = 0; k < N_CASES; k++) {
    int s = fake_client_open(port, 1, 0, 3);
    sl__dp_frame f = {.version = SL__DP_VERSION, .kind = SL__DP_MSG};
    f.msg_kind = SL_MSG_READY;
    f.origin = 1;
    f.dst = sl_actor_id_make(0, 0, 0, 0);
    f.src = sl_actor_id_make(1, 0, 0, 0);
    f.len = sizeof payload;
    f.payload_crc = sl__crc32c(0, payload, sizeof payload);
    uint8_t hdr[SL__DP_HDR_BYTES];
    /* A valid frame first: the connection works until the bad one. */
    fake_frame(s, &f, payload);
    switch (k) {
    case BAD_MAGIC:
    case BAD_VERSION:
    case BAD_HCRC:
      sl__dp_frame_encode(&f, hdr);
      if (k == BAD_MAGIC) hdr[0] = 'X';
      if (k == BAD_VERSION) hdr[4] = 3;
      if (k == BAD_HCRC) hdr[20] ^= 0x40;
      fake_write(s, hdr, sizeof hdr);
      break;
    case BAD_KIND:
      f.kind = 42;
      fake_frame(s, &f, payload);
      break;
    case BAD_PAYLOAD_KIND:
      f.kind = SL__DP_PING;
      fake_frame(s, &f, payload);
      break;
    case TOO_LONG:
      f.len = (1u << 20) + 1;
      fake_frame(s, &f, NULL);
      break;
    case BAD_PCRC:
      f.payload_crc ^= 1;
      fake_frame(s, &f, payload);
      break;
    case WRONG_ORIGIN:
      f.origin = 2;
      fake_frame(s, &f, payload);
      break;
    case BAD_CREDIT:
      f.kind = SL__DP_CREDIT;
      f.len = 0;
      f.payload_crc = 0;
      f.credit_frames = 5; /* the endpoint never sent it anything */
      fake_frame(s, &f, NULL);
      break;
    case TRUNCATED:
      sl__dp_frame_encode(&f, hdr);
      fake_write(s, hdr, sizeof hdr);
      fake_write(s, payload, 10); /* then the connection ends */
      break;
    case TRUNCATED_HEADER:
      sl__dp_frame_encode(&f, hdr);
      fake_write(s, hdr, 30);
      break;
    }
    if (k == TRUNCATED || k == TRUNCATED_HEADER) {
      shutdown(s, SHUT_WR);
    } else {
      assert_true(fake_sees_close(s, SOON_MS));
    }
    assert_true(errlog_wait(&e, k + 1, SOON_MS) >= k + 1);
    if (!errlog_has(&e, want[k]))
      fail_msg("case %d: '%s' not in:\n%s", k, want[k], e.msgs);
    close(s);
  }
  assert_true(errlog_has(&e, "node 0: node 1 (127.0.0.1:"));
  assert_int_equal(e.last_node, 1);
  assert_int_equal(e.last, SL_ECOMM);
  sl__dp_stats st;
  sl__dp_endpoint_get_stats(ep, &st);
  assert_int_equal(st.bad_frames, N_CASES - 2);
  /* The valid frames were taken (and discarded: no job). */
  assert_true(st.messages_discarded >= N_CASES);
  assert_still_serving(ep, 3);
  sl__dp_endpoint_destroy(ep);
  errlog_fini(&e);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_connect),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_port_in_use),
      cmocka_unit_test(test_wrong_token),
      cmocka_unit_test(test_missing_token),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_dial_refusals),
      cmocka_unit_test(test_unreachable),
      cmocka_unit_test(test_simultaneous_dial),
      cmocka_unit_test(test_bad_frames),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
