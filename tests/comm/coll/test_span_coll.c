/* Boxing collectives whose members live on several nodes
 * (comm/coll/span_coll.h): 2 and 3 endpoints in this process on 127.0.0.1.
 * Every op (all-reduce, reduce-scatter, all-gather, all-to-all, exchange)
 * with members spread over the nodes in order and interleaved, uneven and
 * empty parts, three rounds each, gives exactly the bytes the same
 * collective gives with every member in one process (values are small
 * integers, so sums are exact in any order). A member left waiting for
 * its peers completes with the abort's status. Waits are bounded. */
#include <time.h>

#include "coll_int.h"
#include "dp_helpers.h"
#include "net_coll.h"
#include "span_coll.h"

#define MAXM 8

/* Runs d with every member in one process and with member k on node
 * node[k] of nn endpoints, three rounds, and compares every output. */
static void check(const sl__coll_desc *d, const uint32_t *node, uint32_t nn) {
  int n = d->n;
  sl__comm_config cc = {2, 0, NULL};
  sl__comm *ref_comm, *comm[3];
  sl__coll *ref, *geo[3];
  sl__span *span[3] = {0};
  assert_int_equal(sl__comm_create(&cc, &ref_comm), SL_OK);
  assert_int_equal(sl__coll_create(ref_comm, d, &ref), SL_OK);
  sl__dp_endpoint *ep[3];
  sl__net_coll *nc[3];
  dp_mesh(ep, nn, NULL);
  for (uint32_t j = 0; j < nn; j++) {
    assert_int_equal(sl__net_coll_create(ep[j], NULL, &nc[j]), SL_OK);
    assert_int_equal(sl__comm_create(&cc, &comm[j]), SL_OK);
    assert_int_equal(sl__coll_create(comm[j], d, &geo[j]), SL_OK);
    sl__span_desc sd = {geo[j], node, j, nc[j], 0x5eed0000u + (uint64_t)n,
                        NULL};
    assert_int_equal(sl__span_create(&sd, &span[j]), SL_OK);
  }
  size_t es = sl_dtype_size(d->dtype);
  void *in[MAXM], *out_ref[MAXM], *out[MAXM];
  for (int k = 0; k < n; k++) {
    size_t ib = sl__coll_in_bytes(ref, k), ob = sl__coll_out_bytes(ref, k);
    in[k] = calloc(1, ib + 8);
    out_ref[k] = calloc(1, ob + 8);
    out[k] = calloc(1, ob + 8);
  }
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k < n; k++) {
      size_t cnt = sl__coll_in_bytes(ref, k) / es;
      for (size_t i = 0; i < cnt; i++) {
        int v = (int)(sl__mix64((uint64_t)(round * 131 + k) * 7919u + i) % 9) - 4;
        if (d->dtype == SL_DTYPE_F32)
          ((float *)in[k])[i] = (float)v;
        else
          ((int32_t *)in[k])[i] = v;
      }
      memset(out[k], 0x7f, sl__coll_out_bytes(ref, k));
    }
    waiter w, wr;
    waiter_init(&w);
    waiter_init(&wr);
    for (int k = 0; k < n; k++)
      assert_int_equal(sl__coll_arrive(ref, k, in[k], sl__coll_in_bytes(ref, k),
                                       out_ref[k], sl__coll_out_bytes(ref, k),
                                       waiter_cb, &wr),
                       SL_OK);
    waiter_wait_within(&wr, n, SOON_MS);
    /* members arrive last to first, so the nodes start in another order */
    for (int k = n - 1; k >= 0; k--)
      assert_int_equal(sl__span_arrive(span[node[k]], k, in[k],
                                       sl__coll_in_bytes(ref, k), out[k],
                                       sl__coll_out_bytes(ref, k), waiter_cb,
                                       &w),
                       SL_OK);
    waiter_wait_within(&w, n, SOON_MS);
    assert_int_equal(w.failed, 0);
    for (int k = 0; k < n; k++)
      if (memcmp(out[k], out_ref[k], sl__coll_out_bytes(ref, k)))
        fail_msg("%s round %d: member %d (node %u) differs", d->name, round, k,
                 node[k]);
  }
  for (int k = 0; k < n; k++) {
    free(in[k]);
    free(out_ref[k]);
    free(out[k]);
  }
  for (uint32_t j = 0; j < nn; j++)
    sl__dp_endpoint_destroy(ep[j]);
  for (uint32_t j = 0; j < nn; j++) {
    sl__span_destroy(span[j]);
    sl__net_coll_destroy(nc[j]);
    sl__comm_destroy(comm[j]);
  }
  sl__comm_destroy(ref_comm);
}

static const int workers[MAXM] = {0, 1, 0, 1, 0, 1, 0, 1};

static sl__coll_desc group(const char *name, sl__coll_op op, int n, int d0,
                           int d1) {
  sl__coll_desc d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.op = op;
  d.dtype = SL_DTYPE_F32;
  d.reduce = SL_REDUCE_SUM;
  d.n = n;
  d.workers = workers;
  d.block.ndim = 2;
  d.block.dims[0] = d0;
  d.block.dims[1] = d1;
  return d;
}

static void test_all_reduce(void **state) {
  (void)state;
  sl__coll_desc d = group("ar", SL__COLL_ALL_REDUCE, 4, 7, 5);
  check(&d, (const uint32_t[]){0, 0, 1, 1}, 2);
  check(&d, (const uint32_t[]){0, 1, 2, 1}, 3);
  d.reduce = SL_REDUCE_MAX;
  d.dtype = SL_DTYPE_I32;
  check(&d, (const uint32_t[]){1, 0, 0, 0}, 2);
  /* large enough for the ring (not the one-hop exchange) */
  sl__coll_desc big = group("ar-big", SL__COLL_ALL_REDUCE, 2, 300, 257);
  check(&big, (const uint32_t[]){0, 1}, 2);
}

static void test_reduce_scatter(void **state) {
  (void)state;
  sl__coll_desc d = group("rs", SL__COLL_REDUCE_SCATTER, 3, 4, 7);
  d.out_axis = 1;
  check(&d, (const uint32_t[]){0, 1, 1}, 2);
  d.out_axis = 0; /* 4 rows over 3 members: uneven */
  check(&d, (const uint32_t[]){2, 0, 1}, 3);
  sl__coll_desc e = group("rs-empty", SL__COLL_REDUCE_SCATTER, 4, 2, 3);
  e.out_axis = 0; /* two members get empty parts */
  check(&e, (const uint32_t[]){0, 1, 0, 1}, 2);
}

static void test_all_gather(void **state) {
  (void)state;
  sl__coll_desc d = group("ag", SL__COLL_ALL_GATHER, 4, 3, 10);
  d.in_axis = 1;
  check(&d, (const uint32_t[]){1, 0, 0, 1}, 2);
  d.in_axis = 0; /* 3 rows over 4 members: one empty */
  check(&d, (const uint32_t[]){0, 1, 2, 2}, 3);
  sl__coll_desc z = group("ag-zero", SL__COLL_ALL_GATHER, 2, 0, 4);
  check(&z, (const uint32_t[]){0, 1}, 2);
}

static void test_all_to_all(void **state) {
  (void)state;
  sl__coll_desc d = group("a2a", SL__COLL_ALL_TO_ALL, 3, 5, 7);
  d.in_axis = 0;
  d.out_axis = 1;
  check(&d, (const uint32_t[]){0, 1, 2}, 3);
  d.in_axis = 1;
  d.out_axis = 0;
  check(&d, (const uint32_t[]){1, 1, 0}, 2);
}

/* A placement change: members 0 and 1 hold row halves of a 6x5 tensor,
 * members 2 and 3 get column parts; with a reducing variant where both
 * sources send the same box (partial sums). */
static void test_exchange(void **state) {
  (void)state;
  bool has_in[4] = {true, true, false, false};
  bool has_out[4] = {false, false, true, true};
  sl_slice isl[4], osl[4];
  memset(isl, 0, sizeof isl);
  memset(osl, 0, sizeof osl);
  for (int k = 0; k < 4; k++) {
    isl[k].ndim = osl[k].ndim = 2;
  }
  isl[0] = (sl_slice){.ndim = 2, .start = {0, 0}, .extent = {3, 5}};
  isl[1] = (sl_slice){.ndim = 2, .start = {3, 0}, .extent = {3, 5}};
  osl[2] = (sl_slice){.ndim = 2, .start = {0, 0}, .extent = {6, 3}};
  osl[3] = (sl_slice){.ndim = 2, .start = {0, 3}, .extent = {6, 2}};
  sl__coll_piece pieces[4] = {
      {0, 2, {.ndim = 2, .start = {0, 0}, .extent = {3, 3}}},
      {1, 2, {.ndim = 2, .start = {3, 0}, .extent = {3, 3}}},
      {0, 3, {.ndim = 2, .start = {0, 3}, .extent = {3, 2}}},
      {1, 3, {.ndim = 2, .start = {3, 3}, .extent = {3, 2}}},
  };
  int8_t fill[4] = {SL__COLL_FILL_ZERO, SL__COLL_FILL_ZERO, SL__COLL_FILL_ZERO,
                    SL__COLL_FILL_ZERO};
  sl__coll_desc d = group("xchg", SL__COLL_EXCHANGE, 4, 6, 5);
  d.has_in = has_in;
  d.has_out = has_out;
  d.in_slice = isl;
  d.out_slice = osl;
  d.fill = fill;
  d.piece_count = 4;
  d.pieces = pieces;
  check(&d, (const uint32_t[]){0, 1, 1, 0}, 2);
  check(&d, (const uint32_t[]){0, 0, 1, 1}, 2);

  /* partial -> one copy: both sources hold the whole 4x4, summed */
  bool hi[3] = {true, true, false}, ho[3] = {false, false, true};
  sl_slice pi[3], po[3];
  memset(pi, 0, sizeof pi);
  memset(po, 0, sizeof po);
  pi[0] = pi[1] = po[2] =
      (sl_slice){.ndim = 2, .start = {0, 0}, .extent = {4, 4}};
  pi[2].ndim = po[0].ndim = po[1].ndim = 2;
  sl__coll_piece pp[2] = {
      {0, 2, {.ndim = 2, .start = {0, 0}, .extent = {4, 4}}},
      {1, 2, {.ndim = 2, .start = {0, 0}, .extent = {4, 4}}},
  };
  int8_t f3[3] = {SL_REDUCE_SUM, SL_REDUCE_SUM, SL_REDUCE_SUM};
  sl__coll_desc r = group("xchg-sum", SL__COLL_EXCHANGE, 3, 4, 4);
  r.has_in = hi;
  r.has_out = ho;
  r.in_slice = pi;
  r.out_slice = po;
  r.fill = f3;
  r.piece_count = 2;
  r.pieces = pp;
  r.piece_reduce = true;
  check(&r, (const uint32_t[]){0, 1, 2}, 3);
}

/* One span collective on node 0 of two endpoints (node 1 builds none). */
typedef struct solo {
  sl__comm *comm;
  sl__span *span;
  sl__dp_endpoint *ep[2];
  sl__net_coll *nc[2];
} solo;

static void solo_up(solo *o, const sl__coll_desc *d, const uint32_t *node,
                    uint64_t id) {
  sl__comm_config cc = {2, 0, NULL};
  sl__coll *geo;
  dp_mesh(o->ep, 2, NULL);
  for (int j = 0; j < 2; j++)
    assert_int_equal(sl__net_coll_create(o->ep[j], NULL, &o->nc[j]), SL_OK);
  assert_int_equal(sl__comm_create(&cc, &o->comm), SL_OK);
  assert_int_equal(sl__coll_create(o->comm, d, &geo), SL_OK);
  sl__span_desc sd = {geo, node, 0, o->nc[0], id, NULL};
  assert_int_equal(sl__span_create(&sd, &o->span), SL_OK);
}

static void solo_down(solo *o) {
  for (int j = 0; j < 2; j++)
    sl__dp_endpoint_destroy(o->ep[j]);
  sl__span_destroy(o->span);
  for (int j = 0; j < 2; j++)
    sl__net_coll_destroy(o->nc[j]);
  sl__comm_destroy(o->comm);
}

/* Node 0's members arrive, node 1's never does: sl__net_coll_abort (the
 * job ended) completes them with the status; later arrivals complete at
 * once; bad arrivals are refused. */
static void test_abort(void **state) {
  (void)state;
  sl__coll_desc d = group("ab", SL__COLL_ALL_REDUCE, 3, 10, 10);
  solo o;
  solo_up(&o, &d, (const uint32_t[]){0, 0, 1}, 77);
  float in[2][100] = {{0}}, out[2][100];
  waiter w;
  waiter_init(&w);
  /* both local members: the round goes between nodes and waits there */
  for (int k = 0; k < 2; k++)
    assert_int_equal(sl__span_arrive(o.span, k, in[k], 400, out[k], 400,
                                     waiter_cb, &w),
                     SL_OK);
  sl__span_abort(o.span, SL_EABORTED); /* running: not ended by this */
  sl__net_coll_abort(o.nc[0], SL_EABORTED, "job stopped");
  waiter_wait_within(&w, 2, SOON_MS);
  assert_int_equal(w.failed, 2);
  assert_int_equal(w.last, SL_EABORTED);
  assert_int_equal(sl__span_arrive(o.span, 0, in[0], 400, out[0], 400,
                                   waiter_cb, &w),
                   SL_OK);
  waiter_wait_within(&w, 3, SOON_MS);
  assert_int_equal(w.failed, 3);
  assert_int_equal(sl__span_arrive(o.span, 2, in[0], 400, out[0], 400,
                                   waiter_cb, &w),
                   SL_EINVAL);
  assert_int_equal(sl__span_arrive(o.span, 1, in[0], 4, out[0], 400,
                                   waiter_cb, &w),
                   SL_EINVAL);
  solo_down(&o);
}

/* A member waiting for a local peer is completed by sl__span_abort. */
static void test_abort_waiting(void **state) {
  (void)state;
  sl__coll_desc d = group("abw", SL__COLL_ALL_GATHER, 3, 6, 2);
  solo o;
  solo_up(&o, &d, (const uint32_t[]){1, 0, 0}, 78);
  float in[4] = {0}, out[12];
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__span_arrive(o.span, 1, in, 16, out, 48, waiter_cb, &w),
                   SL_OK);
  sl__span_abort(o.span, SL_ECOMM);
  waiter_wait_within(&w, 1, SOON_MS);
  assert_int_equal(w.last, SL_ECOMM);
  solo_down(&o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce),    cmocka_unit_test(test_reduce_scatter),
      cmocka_unit_test(test_all_gather),    cmocka_unit_test(test_all_to_all),
      cmocka_unit_test(test_exchange),      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_abort_waiting),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
