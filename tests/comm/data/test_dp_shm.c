/* The shared-memory payload path between endpoints on one host
 * (comm/data/shm.c): the rings' placement (aligned), wrap-around, full and
 * unwritten cases and the segment's checks (size, file type, cookie); a
 * segment reachable only while offered, and gone with a dialer killed
 * mid-offer; two endpoints taking a segment (and not, when one side has it
 * off); a segment offered without the token's proof, one that does not
 * exist, and a payload flagged as in shared memory on a connection that has
 * none. The bytes themselves cross through the
 * rings in comm_dp_plan_shm and comm_net_coll_shm (the plan and collective
 * tests run with a 1 MiB ring). */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include "dp_helpers.h"

#define RING 8192u

static void fill(uint8_t *p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(seed + i * 7);
}

/* Takes the next payload of n bytes and checks it holds fill(seed). */
static void expect_next(sl__dp_shm *rx, size_t n, uint8_t seed) {
  const uint8_t *p;
  assert_int_equal(sl__dp_shm_take(rx, n, &p), SL_OK);
  assert_int_equal((uintptr_t)p % 64, 0); /* reduced from in place */
  uint8_t want[RING];
  fill(want, n, seed);
  assert_memory_equal(p, want, n);
}

static void test_rings(void **state) {
  (void)state;
  uint8_t mac[SL__DP_MAC_BYTES], id[SL__DP_SHM_ID_BYTES];
  memset(mac, 0x5a, sizeof mac);
  sl__dp_shm *a, *b;
  assert_int_equal(sl__dp_shm_create(RING, mac, id, &a), SL_OK);
  /* the wrong size, a changed cookie, then the right offer */
  assert_int_equal(sl__dp_shm_open(id, 2 * RING, &b), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "but the offer says"));
  id[15] ^= 1;
  assert_int_equal(sl__dp_shm_open(id, RING, &b), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "not the sluice segment offered"));
  id[15] ^= 1;
  assert_int_equal(sl__dp_shm_open(id, RING, &b), SL_OK);
  assert_memory_equal(sl__dp_shm_mac(b), mac, sizeof mac);
  /* reachable until the dialer withdraws it; the mappings stay */
  sl__dp_shm_withdraw(a);
  sl__dp_shm *c = NULL;
  assert_int_equal(sl__dp_shm_open(id, RING, &c), SL_ENOTFOUND);
  assert_null(c);
  sl__dp_shm_withdraw(a); /* idempotent */

  uint8_t buf[RING];
  /* a -> b: three payloads, each on a 64-byte line, take bytes 0 to 7016
   * of 8192; the next 2000 do not fit until the first two are released,
   * and then go to the start of the ring (the 1152 bytes from 7040 to the
   * end are too few). */
  fill(buf, 3000, 1);
  assert_true(sl__dp_shm_put(a, buf, 3000));
  fill(buf, 3000, 2);
  assert_true(sl__dp_shm_put(a, buf, 3000));
  fill(buf, 1000, 3);
  assert_true(sl__dp_shm_put(a, buf, 1000));
  fill(buf, 2000, 4);
  assert_false(sl__dp_shm_put(a, buf, 2000));
  assert_false(sl__dp_shm_put(a, buf, 0));
  assert_false(sl__dp_shm_put(a, buf, RING + 1));
  expect_next(b, 3000, 1);
  expect_next(b, 3000, 2);
  assert_false(sl__dp_shm_put(a, buf, 2000)); /* taken, not released */
  sl__dp_shm_release(b);
  assert_true(sl__dp_shm_put(a, buf, 2000));
  expect_next(b, 1000, 3);
  expect_next(b, 2000, 4);
  sl__dp_shm_release(b);
  /* a payload as large as the ring, once the ring is empty */
  fill(buf, RING, 5);
  assert_true(sl__dp_shm_put(a, buf, RING));
  expect_next(b, RING, 5);
  sl__dp_shm_release(b);

  /* b -> a is the other ring: independent positions */
  fill(buf, 100, 6);
  assert_true(sl__dp_shm_put(b, buf, 100));
  expect_next(a, 100, 6);
  sl__dp_shm_release(a);

  /* a receiver asked for bytes its peer never wrote */
  const uint8_t *p;
  assert_int_equal(sl__dp_shm_take(a, 64, &p), SL_ECOMM);
  assert_non_null(strstr(sl_last_error(), "not in the shared-memory ring"));
  assert_int_equal(sl__dp_shm_take(a, RING + 1, &p), SL_ECOMM);
  sl__dp_shm_destroy(a);
  sl__dp_shm_destroy(b);

  /* no such process here: the offer came from another host */
  uint32_t nobody = 0x7ffffff0u, fd_no = 3;
  memcpy(id, &nobody, 4);
  memcpy(id + 4, &fd_no, 4);
  assert_int_equal(sl__dp_shm_open(id, RING, &b), SL_ENOTFOUND);
  assert_non_null(strstr(sl_last_error(), "not on this host"));
  /* a descriptor that is not a regular file (a pipe): refused before
   * it is opened */
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  uint32_t me = (uint32_t)getpid(), rd = (uint32_t)pfd[0];
  memcpy(id, &me, 4);
  memcpy(id + 4, &rd, 4);
  assert_int_equal(sl__dp_shm_open(id, RING, &b), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "not a regular file"));
  close(pfd[0]);
  close(pfd[1]);
  assert_false(sl__dp_shm_ring_ok(0));
  assert_false(sl__dp_shm_ring_ok(4097));
  assert_true(sl__dp_shm_ring_ok(4096));
}

/* Descriptors this process has open. */
static int count_fds(void) {
  struct dirent **list;
  int k = scandir("/proc/self/fd", &list, NULL, NULL);
  assert_true(k >= 0);
  for (int i = 0; i < k; i++)
    free(list[i]);
  free(list);
  return k;
}

/* More than /dev/shm can hold: no segment (the memory is reserved at
 * creation, so a full /dev/shm is found out here instead of by SIGBUS at
 * some later write), refused from the free space before any is taken (a
 * /dev/shm as large as the memory must not be filled to find out), and no
 * descriptor left holding any of it. Skipped where /dev/shm is larger than the
 * largest ring (16 GiB) could use up. */
static void test_no_room(void **state) {
  (void)state;
  struct statvfs v;
  assert_int_equal(statvfs("/dev/shm", &v), 0);
  uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
  uint64_t ring = (avail / 2 + (64u << 20)) / 4096 * 4096;
  if (!sl__dp_shm_ring_ok(ring)) {
    printf("skipped: /dev/shm has %llu bytes free\n",
           (unsigned long long)avail);
    skip(); /* reported as skipped, not passed */
  }
  uint8_t mac[SL__DP_MAC_BYTES] = {0}, id[SL__DP_SHM_ID_BYTES];
  sl__dp_shm *a = NULL;
  int fds = count_fds();
  assert_int_equal(sl__dp_shm_create(ring, mac, id, &a), SL_EIO);
  assert_null(a);
  assert_int_equal(count_fds(), fds); /* nothing holds a reservation */
}

/* The names in /dev/shm that start "sluice", sorted and joined, into out
 * (others come and go with other programs). */
static void shm_names(char *out, size_t n) {
  struct dirent **list;
  int k = scandir("/dev/shm", &list, NULL, alphasort);
  assert_true(k >= 0);
  size_t at = 0;
  out[0] = '\0';
  for (int i = 0; i < k; i++) {
    if (at < n && strncmp(list[i]->d_name, "sluice", 6) == 0)
      at += (size_t)snprintf(out + at, n - at, "%s/", list[i]->d_name);
    free(list[i]);
  }
  free(list);
}

/* A dialer killed between its offer and the answer: before, the offer
 * can be taken; after, it cannot, and /dev/shm lists no sluice name it
 * did not list before (a named segment would stay there until someone
 * removed it). Runs before the tests that start endpoints: the child
 * forks from a process with no other thread. */
static void test_dialer_killed(void **state) {
  (void)state;
  static char before[1 << 16], after[1 << 16];
  shm_names(before, sizeof before);
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    uint8_t mac[SL__DP_MAC_BYTES] = {0}, id[SL__DP_SHM_ID_BYTES];
    sl__dp_shm *a;
    if (sl__dp_shm_create(RING, mac, id, &a) != SL_OK) _exit(1);
    if (write(p[1], id, sizeof id) != (ssize_t)sizeof id) _exit(1);
    pause(); /* killed here, mid-offer */
    _exit(0);
  }
  close(p[1]);
  uint8_t id[SL__DP_SHM_ID_BYTES];
  assert_int_equal(read(p[0], id, sizeof id), (ssize_t)sizeof id);
  close(p[0]);
  sl__dp_shm *b = NULL;
  assert_int_equal(sl__dp_shm_open(id, RING, &b), SL_OK);
  sl__dp_shm_destroy(b);
  assert_int_equal(kill(child, SIGKILL), 0);
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(sl__dp_shm_open(id, RING, &b), SL_ENOTFOUND);
  shm_names(after, sizeof after);
  assert_string_equal(after, before);
}

/* Polls (bounded) until both endpoints counted `want` segments. */
static void expect_shm(sl__dp_endpoint **eps, uint64_t want) {
  sl__dp_stats s0, s1;
  for (int i = 0; i < 3000; i++) {
    sl__dp_endpoint_get_stats(eps[0], &s0);
    sl__dp_endpoint_get_stats(eps[1], &s1);
    if (s0.shm_connections == want && s1.shm_connections == want) break;
    sl__sleep_ns(1000000);
  }
  assert_int_equal(s0.shm_connections, want);
  assert_int_equal(s1.shm_connections, want);
}

static void test_pair(void **state) {
  (void)state;
  for (int acceptor_on = 1; acceptor_on >= 0; acceptor_on--) {
    sl__dp_config cfg[2] = {dp_cfg(0, 2), dp_cfg(1, 2)};
    cfg[0].shm_bytes = acceptor_on ? 1 << 20 : -1;
    cfg[1].shm_bytes = 1 << 20;
    sl__dp_endpoint *eps[2];
    dp_mesh(eps, 2, cfg);
    /* node 1 dials (and offers), node 0 accepts */
    assert_int_equal(sl__dp_endpoint_connect(eps[1], 0), SL_OK);
    assert_int_equal(sl__dp_endpoint_wait_connected(eps[1], 0, SOON_MS), SL_OK);
    if (acceptor_on) {
      expect_shm(eps, 1);
    } else {
      /* the offer refused, and counted by the dialer */
      sl__dp_stats s1;
      for (int i = 0; i < 3000; i++) {
        sl__dp_endpoint_get_stats(eps[1], &s1);
        if (s1.shm_refused) break;
        sl__sleep_ns(1000000);
      }
      assert_int_equal(s1.shm_refused, 1);
      expect_shm(eps, 0);
    }
    sl__dp_endpoint_destroy(eps[0]);
    sl__dp_endpoint_destroy(eps[1]);
  }
  /* A ring size no segment can have is a config error, and so is a size
   * that does not parse. */
  sl__dp_config c = dp_cfg(0, 1);
  c.shm_bytes = 32ll << 30;
  sl__dp_endpoint *ep = NULL;
  assert_int_equal(sl__dp_endpoint_create(&c, &ep), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "shared-memory ring"));
  const char *had = getenv("SLUICE_DP_SHM_BYTES");
  char saved[64] = "";
  if (had) snprintf(saved, sizeof saved, "%s", had);
  const char *bad[] = {"32X", "16MB", "-1", "M", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("SLUICE_DP_SHM_BYTES", bad[i], 1);
    c.shm_bytes = 0;
    assert_int_equal(sl__dp_endpoint_create(&c, &ep), SL_EINVAL);
    assert_non_null(strstr(sl_last_error(), "not a size"));
  }
  const char *good[] = {"1M", "64k", "8192", "0"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("SLUICE_DP_SHM_BYTES", good[i], 1);
    c.shm_bytes = 0;
    ep = dp_make(&c);
    sl__dp_endpoint_destroy(ep);
  }
  if (had)
    setenv("SLUICE_DP_SHM_BYTES", saved, 1);
  else
    unsetenv("SLUICE_DP_SHM_BYTES");
}

/* ---- a ring too small for what is in flight ---------------------------- */

#define CHUNKS 64
#define CHUNK 3000

typedef struct sink {
  pthread_mutex_t m;
  pthread_cond_t cv;
  uint8_t buf[CHUNKS][CHUNK];
  int got, sent;
} sink;

static sl_status sink_target(void *ctx, uint32_t node, const sl__dp_frame *f,
                             void **buf) {
  sink *k = ctx;
  (void)node;
  /* never read in place: the bytes land in this chunk's own slot */
  *buf = f->piece >= 0 && f->piece < CHUNKS ? k->buf[f->piece] : NULL;
  return SL_OK;
}

static void sink_received(void *ctx, uint32_t node, const sl__dp_frame *f,
                          void *buf) {
  sink *k = ctx;
  (void)node, (void)f, (void)buf;
  pthread_mutex_lock(&k->m);
  k->got++;
  pthread_cond_broadcast(&k->cv);
  pthread_mutex_unlock(&k->m);
}

static void sink_sent(void *ctx, void *token, sl_status st) {
  sink *k = ctx;
  (void)token;
  pthread_mutex_lock(&k->m);
  if (st == SL_OK) k->sent++;
  pthread_cond_broadcast(&k->cv);
  pthread_mutex_unlock(&k->m);
}

/* 64 chunks of 3000 bytes queued at once into an 8 KiB ring: the ones
 * that find it full go over TCP, with the CRC the sender left to the loop
 * thread computed there; every chunk arrives intact either way. */
static void test_ring_full(void **state) {
  (void)state;
  static sink k;
  memset(&k, 0, sizeof k);
  pthread_mutex_init(&k.m, NULL);
  sl__cond_init(&k.cv);
  sl__dp_config cfg[2] = {dp_cfg(0, 2), dp_cfg(1, 2)};
  cfg[0].shm_bytes = cfg[1].shm_bytes = RING;
  sl__dp_endpoint *eps[2];
  dp_mesh(eps, 2, cfg);
  sl__dp_coll_hooks h = {
      .target = sink_target, .received = sink_received, .sent = sink_sent};
  sl__dp_endpoint_set_coll(eps[0], &h, &k);
  sl__dp_endpoint_set_coll(eps[1], &h, &k);
  assert_int_equal(sl__dp_endpoint_connect(eps[0], 1), SL_OK);
  expect_shm(eps, 1);
  static uint8_t out[CHUNKS][CHUNK];
  for (int i = 0; i < CHUNKS; i++) {
    fill(out[i], CHUNK, (uint8_t)(i * 3));
    sl__dp_frame f = {0};
    f.piece = i;
    assert_int_equal(
        sl__dp_endpoint_send_coll(eps[0], 1, &f, out[i], CHUNK, NULL, NULL),
        SL_OK);
  }
  pthread_mutex_lock(&k.m);
  while (k.got < CHUNKS || k.sent < CHUNKS)
    if (!sl__cond_wait_ns(&k.cv, &k.m, (uint64_t)SOON_MS * 1000000ull)) break;
  pthread_mutex_unlock(&k.m);
  assert_int_equal(k.got, CHUNKS);
  assert_int_equal(k.sent, CHUNKS);
  for (int i = 0; i < CHUNKS; i++)
    assert_memory_equal(k.buf[i], out[i], CHUNK);
  sl__dp_stats st;
  sl__dp_endpoint_get_stats(eps[0], &st);
  assert_int_equal(st.payload_bytes_sent, (uint64_t)CHUNKS * CHUNK);
  assert_true(st.payload_bytes_shm > 0);
  assert_true(st.payload_bytes_shm < st.payload_bytes_sent); /* both ways */
  sl__dp_endpoint_get_stats(eps[1], &st);
  assert_int_equal(st.bad_frames, 0);
  sl__dp_endpoint_destroy(eps[0]);
  sl__dp_endpoint_destroy(eps[1]);
  pthread_mutex_destroy(&k.m);
  pthread_cond_destroy(&k.cv);
}

/* Reads frames from the fake peer's socket until one of `kind`. */
static sl__dp_frame fake_expect(int s, unsigned kind) {
  for (int i = 0; i < 64; i++) {
    uint8_t hdr[SL__DP_HDR_BYTES];
    assert_int_equal(fake_read(s, hdr, sizeof hdr, SOON_MS), sizeof hdr);
    sl__dp_frame f;
    assert_int_equal(sl__dp_frame_decode(hdr, 0, &f), SL_OK);
    if (f.kind == kind) return f;
  }
  fail_msg("no %s frame", sl__dp_kind_name(kind));
  return (sl__dp_frame){0};
}

static sl__dp_frame offer_of(const uint8_t id[SL__DP_SHM_ID_BYTES]) {
  sl__dp_frame f = {.version = SL__DP_VERSION, .kind = SL__DP_SHM_OFFER};
  memcpy(&f.src, id, 8);
  memcpy(&f.dst, id + 8, 8);
  f.piece = RING;
  return f;
}

static void test_bad_offers(void **state) {
  (void)state;
  errlog e;
  errlog_init(&e);
  sl__dp_config c = dp_cfg(0, 2);
  c.shm_bytes = RING;
  c.on_error = errlog_cb;
  c.on_error_ctx = &e;
  sl__dp_endpoint *ep = dp_make(&c);
  uint16_t port = sl__dp_endpoint_port(ep);

  /* a segment whose header lacks the proof of the token: refused */
  int s = fake_client_open(port, 1, 0, 2);
  uint8_t mac[SL__DP_MAC_BYTES], id[SL__DP_SHM_ID_BYTES];
  memset(mac, 0x11, sizeof mac);
  sl__dp_shm *seg;
  assert_int_equal(sl__dp_shm_create(RING, mac, id, &seg), SL_OK);
  sl__dp_frame f = offer_of(id);
  fake_frame(s, &f, NULL);
  assert_int_equal(fake_expect(s, SL__DP_SHM_REPLY).desc, 0);
  sl__dp_shm_destroy(seg);
  /* rings larger than the endpoint's own: refused before opening */
  assert_int_equal(sl__dp_shm_create(2 * RING, mac, id, &seg), SL_OK);
  f = offer_of(id);
  f.piece = 2 * RING;
  fake_frame(s, &f, NULL);
  assert_int_equal(fake_expect(s, SL__DP_SHM_REPLY).desc, 0);
  sl__dp_shm_destroy(seg);
  /* one that does not exist (another host's): refused, the pair stays */
  memset(id, 0xcd, sizeof id);
  f = offer_of(id);
  fake_frame(s, &f, NULL);
  assert_int_equal(fake_expect(s, SL__DP_SHM_REPLY).desc, 0);
  /* a payload said to be in shared memory on this connection: bad frame */
  f = (sl__dp_frame){.version = SL__DP_VERSION, .kind = SL__DP_COLL};
  f.flags = SL__DP_FLAG_SHM;
  f.len = 64;
  fake_frame(s, &f, NULL);
  assert_true(fake_sees_close(s, SOON_MS));
  assert_true(errlog_wait(&e, 1, SOON_MS) >= 1);
  if (!errlog_has(&e, "a payload in shared memory, but this connection has "
                      "none"))
    fail_msg("not reported:\n%s", e.msgs);
  close(s);
  sl__dp_stats st;
  sl__dp_endpoint_get_stats(ep, &st);
  assert_int_equal(st.shm_connections, 0);
  assert_int_equal(st.bad_frames, 1);
  sl__dp_endpoint_destroy(ep);
  errlog_fini(&e);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rings),         cmocka_unit_test(test_no_room),
      cmocka_unit_test(test_dialer_killed), cmocka_unit_test(test_pair),
      cmocka_unit_test(test_ring_full),     cmocka_unit_test(test_bad_offers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
