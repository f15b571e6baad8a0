/* Shared registers (comm/data/shm_pool.h) and the shared all-reduce
 * (comm/coll/net_shared.c): the pool's allocations and its mapping by another
 * "process" (this one, through /proc/self/fd), descriptions it refuses,
 * and the all-reduce on 2 and 3 endpoints in this process whose pools map
 * each other — in place, out of place, uneven and tiny sizes, buffers in
 * the pool (read in place) or not (sent by value), a map with a pair
 * missing (another algorithm, same result), and a peer lost mid-way. */
#include "dp_helpers.h"
#include "net_coll.h"
#include "shm_pool.h"

#define MEMBERS_MAX 3

static void test_pool_alloc_and_view(void **state) {
  (void)state;
  sl__shm_pool *p;
  assert_int_equal(sl__shm_pool_create(64u << 20, &p), SL_OK);
  uint8_t *a = sl__shm_pool_alloc(p, 100);
  uint8_t *b = sl__shm_pool_alloc(p, 3u << 20);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal((uintptr_t)a % 64, 0);
  assert_int_equal((uintptr_t)b % 64, 0);
  assert_true(b >= a + 100);
  for (size_t i = 0; i < (3u << 20); i += 4093)
    assert_int_equal(b[i], 0);
  uint64_t off_a, off_b, off;
  assert_true(sl__shm_pool_offset(p, a, 100, &off_a));
  assert_true(sl__shm_pool_offset(p, b, 3u << 20, &off_b));
  assert_false(sl__shm_pool_offset(p, b, (3u << 20) + 4096, &off));
  int local;
  assert_false(sl__shm_pool_offset(p, &local, 4, &off));
  assert_false(sl__shm_pool_offset(NULL, a, 4, &off));
  memset(a, 0x5a, 100);
  b[12345] = 7;

  char desc[SL__SHM_POOL_DESC_MAX];
  sl__shm_pool_describe(p, desc, sizeof desc);
  sl__shm_view v;
  assert_int_equal(sl__shm_view_map(desc, &v), SL_OK);
  assert_non_null(v.base);
  assert_int_equal(v.base[off_a + 99], 0x5a);
  assert_int_equal(v.base[off_b + 12345], 7);
  b[12345] = 9; /* the same memory, not a copy */
  assert_int_equal(v.base[off_b + 12345], 9);
  sl__shm_view_unmap(&v);
  assert_null(v.base);
  sl__shm_pool_destroy(p);
}

static void test_pool_full(void **state) {
  (void)state;
  sl__shm_pool *p;
  assert_int_equal(sl__shm_pool_create(1u << 20, &p), SL_OK);
  void *a = sl__shm_pool_alloc(p, 512u << 10);
  assert_non_null(a);
  assert_null(sl__shm_pool_alloc(p, 768u << 10)); /* past its end */
  assert_non_null(sl__shm_pool_alloc(p, 4096));   /* what is left serves */
  sl__shm_pool_destroy(p);
}

static void test_view_refuses(void **state) {
  (void)state;
  sl__shm_pool *p;
  assert_int_equal(sl__shm_pool_create(1u << 20, &p), SL_OK);
  char desc[SL__SHM_POOL_DESC_MAX], bad[2 * SL__SHM_POOL_DESC_MAX];
  sl__shm_pool_describe(p, desc, sizeof desc);
  long pid;
  int fd;
  unsigned long long bytes;
  char cookie[40];
  assert_int_equal(sscanf(desc, "%ld %d %llu %39s", &pid, &fd, &bytes, cookie),
                   4);
  sl__shm_view v;
  static const char *malformed[] = {"", "1 2 3", "x 3 4096 00",
                                    "1 2 99999 zz", "-1 3 8192 "
                                                    "000102030405060708090a0b"
                                                    "0c0d0e0f"};
  for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
    assert_int_equal(sl__shm_view_map(malformed[i], &v), SL_EINVAL);
    assert_null(v.base);
  }
  assert_int_equal(sl__shm_view_map(NULL, &v), SL_EINVAL);
  /* trailing bytes */
  snprintf(bad, sizeof bad, "%s x", desc);
  assert_int_equal(sl__shm_view_map(bad, &v), SL_EINVAL);
  /* another cookie: not this pool */
  char other[40];
  snprintf(other, sizeof other, "%s", cookie);
  other[0] = other[0] == '0' ? '1' : '0';
  snprintf(bad, sizeof bad, "%ld %d %llu %s", pid, fd, bytes, other);
  assert_int_equal(sl__shm_view_map(bad, &v), SL_EIO);
  if (!strstr(sl_last_error(), "cookie")) fail_msg("%s", sl_last_error());
  /* another size, a descriptor that is not open, a file that is not one */
  snprintf(bad, sizeof bad, "%ld %d %llu %s", pid, fd, bytes * 2, cookie);
  assert_int_equal(sl__shm_view_map(bad, &v), SL_EIO);
  snprintf(bad, sizeof bad, "%ld %d %llu %s", pid, 100000, bytes, cookie);
  assert_int_equal(sl__shm_view_map(bad, &v), SL_EIO);
  snprintf(bad, sizeof bad, "%ld %d %llu %s", pid, 0, bytes, cookie);
  assert_int_equal(sl__shm_view_map(bad, &v), SL_EIO);
  assert_null(v.base);
  sl__shm_pool_destroy(p);
}

/* ---- the all-reduce --------------------------------------------------- */

typedef struct shared_mesh {
  uint32_t n;
  sl__dp_endpoint *ep[MEMBERS_MAX];
  sl__net_coll *nc[MEMBERS_MAX];
  sl__shm_pool *pool[MEMBERS_MAX];
  sl__shm_view views[MEMBERS_MAX][MEMBERS_MAX]; /* [i][k]: k's, mapped by i */
} shared_mesh;

/* n endpoints whose pools map each other, except the pair `gap` (i, j with
 * i != j; gap[0] == gap[1]: none), which i does not map. */
static void shared_up(shared_mesh *m, uint32_t n, const uint32_t gap[2]) {
  memset(m, 0, sizeof *m);
  m->n = n;
  dp_mesh(m->ep, n, NULL);
  sl__net_coll_config cfg = {.all_reduce = "auto", .shared_min_bytes = 1};
  for (uint32_t i = 0; i < n; i++) {
    assert_int_equal(sl__net_coll_create(m->ep[i], &cfg, &m->nc[i]), SL_OK);
    assert_int_equal(sl__shm_pool_create(64u << 20, &m->pool[i]), SL_OK);
  }
  uint8_t maps[MEMBERS_MAX * MEMBERS_MAX] = {0};
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; k < n; k++) {
      if (i == k || (gap[0] != gap[1] && i == gap[0] && k == gap[1])) continue;
      char desc[SL__SHM_POOL_DESC_MAX];
      sl__shm_pool_describe(m->pool[k], desc, sizeof desc);
      assert_int_equal(sl__shm_view_map(desc, &m->views[i][k]), SL_OK);
      maps[i * n + k] = 1;
    }
  for (uint32_t i = 0; i < n; i++)
    assert_int_equal(sl__net_coll_set_shared(m->nc[i], m->pool[i],
                                             m->views[i], n, maps),
                     SL_OK);
}

static void shared_down(shared_mesh *m) {
  for (uint32_t i = 0; i < m->n; i++)
    if (m->nc[i])
      assert_int_equal(
          sl__net_coll_set_shared(m->nc[i], NULL, NULL, 0, NULL), SL_OK);
  for (uint32_t i = 0; i < m->n; i++)
    sl__dp_endpoint_destroy(m->ep[i]);
  for (uint32_t i = 0; i < m->n; i++) {
    sl__net_coll_destroy(m->nc[i]);
    for (uint32_t k = 0; k < m->n; k++)
      sl__shm_view_unmap(&m->views[i][k]);
    sl__shm_pool_destroy(m->pool[i]);
  }
}

static float value(uint32_t member, size_t i, uint64_t seq) {
  return (float)((int)((i * 7 + member * 13 + seq * 3) % 31) - 15);
}

/* Where a member's buffers lie. */
enum { IN_POOL, OUTSIDE, MIXED /* member 0 outside, the others in it */ };

/* One all-reduce of count floats on every member: in place on even
 * members, out of place on odd ones; checked exactly (small integers). */
static void run_shared(shared_mesh *m, size_t count, int where, uint64_t seq,
                       sl_reduce_op op) {
  uint32_t n = m->n, nodes[MEMBERS_MAX];
  for (uint32_t k = 0; k < n; k++)
    nodes[k] = k;
  sl__net_group g = {.id = 9, .nodes = nodes, .n = n};
  float *in[MEMBERS_MAX], *out[MEMBERS_MAX];
  bool heap[MEMBERS_MAX];
  size_t bytes = (count ? count : 1) * sizeof(float);
  for (uint32_t k = 0; k < n; k++) {
    heap[k] = where == OUTSIDE || (where == MIXED && k == 0);
    in[k] = heap[k] ? calloc(1, bytes) : sl__shm_pool_alloc(m->pool[k], bytes);
    out[k] = k % 2 == 0 ? in[k]
             : heap[k]  ? calloc(1, bytes)
                        : sl__shm_pool_alloc(m->pool[k], bytes);
    assert_non_null(in[k]);
    assert_non_null(out[k]);
    for (size_t i = 0; i < count; i++)
      in[k][i] = value(k, i, seq);
  }
  waiter w;
  waiter_init(&w);
  for (uint32_t k = 0; k < n; k++)
    if (sl__net_all_reduce_into(m->nc[k], &g, seq, in[k], out[k], count,
                                SL_DTYPE_F32, op, waiter_cb, &w) != SL_OK)
      fail_msg("start member %u: %s", k, sl_last_error());
  waiter_wait_within(&w, (int)n, SOON_MS);
  if (w.failed) fail_msg("%d failed: %s", w.failed, w.msg);
  for (uint32_t k = 0; k < n; k++) {
    for (size_t i = 0; i < count; i++) {
      float want = value(0, i, seq);
      for (uint32_t j = 1; j < n; j++) {
        float v = value(j, i, seq);
        want = op == SL_REDUCE_SUM   ? want + v
               : op == SL_REDUCE_MAX ? (v > want ? v : want)
                                     : (v < want ? v : want);
      }
      if (out[k][i] != want)
        fail_msg("member %u element %zu of %zu: %g, want %g", k, i, count,
                 (double)out[k][i], (double)want);
    }
    if (k % 2 == 1) /* out of place: in unchanged */
      for (size_t i = 0; i < count; i++)
        assert_true(in[k][i] == value(k, i, seq));
  }
  for (uint32_t k = 0; k < n; k++)
    if (heap[k]) {
      if (out[k] != in[k]) free(out[k]);
      free(in[k]);
    }
  waiter_fini(&w);
}

static void expect_algo(shared_mesh *m, uint64_t shared, bool read_shared) {
  for (uint32_t k = 0; k < m->n; k++) {
    sl__net_coll_stats s;
    sl__net_coll_get_stats(m->nc[k], &s);
    assert_int_equal(s.by_algo[SL__NET_ALGO_SHARED], shared);
    if (read_shared != (s.bytes_read_shared > 0))
      fail_msg("member %u read %llu bytes in place", k,
               (unsigned long long)s.bytes_read_shared);
  }
}

static void test_shared_all_reduce(void **state) {
  (void)state;
  static const size_t counts[] = {1, 2, 3, 1000, 1001, 300007};
  static const uint32_t none[2] = {0, 0};
  for (uint32_t n = 2; n <= 3; n++) {
    shared_mesh m;
    shared_up(&m, n, none);
    uint64_t seq = 0;
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
      run_shared(&m, counts[c], IN_POOL, seq++, SL_REDUCE_SUM);
    run_shared(&m, 4099, IN_POOL, seq++, SL_REDUCE_MAX);
    run_shared(&m, 4099, IN_POOL, seq++, SL_REDUCE_MIN);
    expect_algo(&m, seq, true);
    shared_down(&m);
  }
}

/* Buffers outside the pools go by value; the result is the same. */
static void test_shared_by_value(void **state) {
  (void)state;
  static const uint32_t none[2] = {0, 0};
  shared_mesh m;
  shared_up(&m, 3, none);
  run_shared(&m, 5003, OUTSIDE, 0, SL_REDUCE_SUM);
  expect_algo(&m, 1, false);
  run_shared(&m, 5003, MIXED, 1, SL_REDUCE_SUM);
  run_shared(&m, 2, MIXED, 2, SL_REDUCE_SUM);
  expect_algo(&m, 3, true);
  shared_down(&m);
}

/* Node 2 does not map node 0's pool: groups holding both take another
 * algorithm, the pair of nodes 0 and 1 still shares. */
static void test_shared_needs_every_pair(void **state) {
  (void)state;
  static const uint32_t gap[2] = {2, 0};
  shared_mesh m;
  shared_up(&m, 3, gap);
  run_shared(&m, 70000, IN_POOL, 0, SL_REDUCE_SUM);
  expect_algo(&m, 0, false);
  uint32_t pair[2] = {0, 1};
  sl__net_group g = {.id = 10, .nodes = pair, .n = 2};
  waiter w;
  waiter_init(&w);
  float *buf[2];
  for (uint32_t k = 0; k < 2; k++) {
    buf[k] = sl__shm_pool_alloc(m.pool[k], 64 * sizeof(float));
    for (int i = 0; i < 64; i++)
      buf[k][i] = (float)(i + (int)k);
    assert_int_equal(sl__net_all_reduce(m.nc[k], &g, 0, buf[k], 64,
                                        SL_DTYPE_F32, SL_REDUCE_SUM,
                                        waiter_cb, &w),
                     SL_OK);
  }
  waiter_wait_within(&w, 2, SOON_MS);
  assert_int_equal(w.failed, 0);
  for (uint32_t k = 0; k < 2; k++)
    for (int i = 0; i < 64; i++)
      assert_true(buf[k][i] == (float)(2 * i + 1));
  sl__net_coll_stats s;
  sl__net_coll_get_stats(m.nc[0], &s);
  assert_int_equal(s.by_algo[SL__NET_ALGO_SHARED], 1);
  waiter_fini(&w);
  shared_down(&m);
}

/* A member whose peer goes away mid-way fails with the peer named, within
 * a bounded time, instead of waiting for it. */
static void test_shared_peer_lost(void **state) {
  (void)state;
  static const uint32_t none[2] = {0, 0};
  shared_mesh m;
  shared_up(&m, 2, none);
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 11, .nodes = nodes, .n = 2};
  float *a = sl__shm_pool_alloc(m.pool[0], 1000 * sizeof(float));
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__dp_endpoint_connect(m.ep[0], 1), SL_OK);
  assert_int_equal(sl__dp_endpoint_wait_connected(m.ep[0], 1, SOON_MS), SL_OK);
  assert_int_equal(sl__net_all_reduce(m.nc[0], &g, 0, a, 1000, SL_DTYPE_F32,
                                      SL_REDUCE_SUM, waiter_cb, &w),
                   SL_OK);
  sl__net_coll_set_shared(m.nc[1], NULL, NULL, 0, NULL);
  sl__dp_endpoint_destroy(m.ep[1]);
  m.ep[1] = NULL;
  waiter_wait_within(&w, 1, SOON_MS);
  assert_int_equal(w.failed, 1);
  assert_int_equal(w.last, SL_ECOMM);
  if (!strstr(w.msg, "node 1")) fail_msg("message: %s", w.msg);
  waiter_fini(&w);
  shared_down(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_alloc_and_view),
      cmocka_unit_test(test_pool_full),
      cmocka_unit_test(test_view_refuses),
      cmocka_unit_test(test_shared_all_reduce),
      cmocka_unit_test(test_shared_by_value),
      cmocka_unit_test(test_shared_needs_every_pair),
      cmocka_unit_test(test_shared_peer_lost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
