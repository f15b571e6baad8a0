/* The in-process collectives on concrete data: every op, every dtype, every
 * reduce kind, groups of 1 to 8 members, uneven and empty parts, both
 * algorithms, members arriving in random order; exchanges and group steps
 * built from boxing routes checked against the reference executor; sizes,
 * bad arguments, abort, the waiting hook, and the choice of algorithm by
 * size. */
#include "comm_helpers.h"

#include <stdatomic.h>

#include <sluice/boxing.h>

static int g_workers; /* of the communicator mk_comm made last */

static sl__comm *mk_comm(int workers, int64_t direct_max) {
  sl__comm_config cfg = {workers, direct_max, NULL};
  g_workers = workers;
  sl__comm *c = NULL;
  if (sl__comm_create(&cfg, &c) != SL_OK) fail_msg("comm: %s", sl_last_error());
  return c;
}

/* Arrives members 0..n-1 in a random order and waits for every callback. */
static void arrive_all(sl__coll *x, int n, void **in, size_t *inb, void **out,
                       size_t *outb, sl_rng *rng) {
  int order[64];
  for (int k = 0; k < n; k++)
    order[k] = k;
  for (int k = n - 1; k > 0; k--) {
    int j = (int)sl__rng_below(rng, (uint64_t)k + 1), t = order[k];
    order[k] = order[j];
    order[j] = t;
  }
  waiter w;
  waiter_init(&w);
  for (int i = 0; i < n; i++) {
    int k = order[i];
    if (sl__coll_arrive(x, k, in[k], inb[k], out[k], outb[k], waiter_cb, &w))
      fail_msg("arrive %d: %s", k, sl_last_error());
  }
  waiter_wait(&w, n);
  if (w.failed) fail_msg("a member failed: %s", w.msg);
  waiter_fini(&w);
}

static void run_case(sl__comm *comm, const ccase *c, sl_rng *rng) {
  case_data cd;
  case_data_make(c, rng, g_workers, &cd);
  sl__coll *x = NULL;
  if (sl__coll_create(comm, &cd.desc, &x))
    fail_msg("create: %s", sl_last_error());
  char what[160];
  snprintf(what, sizeof what, "%s %s %s n=%d nd=%d algo=%d",
           sl__coll_op_name(c->op), sl_dtype_name(c->dt),
           sl_reduce_op_name(c->red), c->n, c->nd, (int)c->algo);
  for (int k = 0; k < c->n; k++)
    if (sl__coll_in_bytes(x, k) != cd.inb[k] ||
        sl__coll_out_bytes(x, k) != cd.outb[k])
      fail_msg("%s: member %d sizes %zu/%zu, want %zu/%zu", what, k,
               sl__coll_in_bytes(x, k), sl__coll_out_bytes(x, k), cd.inb[k],
               cd.outb[k]);
  assert_int_equal(sl__coll_algo_of(x), c->algo);
  /* Two rounds: the collective is reusable. */
  for (int round = 0; round < 2; round++) {
    arrive_all(x, c->n, (void **)cd.in, cd.inb, cd.out, cd.outb, rng);
    case_data_check(&cd, what);
  }
  case_data_free(&cd);
}

static void random_block(ccase *c, sl_rng *rng, int max_extent) {
  c->nd = 1 + (int)sl__rng_below(rng, 3);
  for (int d = 0; d < c->nd; d++)
    c->block[d] = (int64_t)sl__rng_below(rng, (uint64_t)max_extent + 1);
  c->in_axis = (int)sl__rng_below(rng, (uint64_t)c->nd);
  c->out_axis = (int)sl__rng_below(rng, (uint64_t)c->nd);
  if (c->op == SL__COLL_ALL_TO_ALL) {
    if (c->nd == 1) {
      c->nd = 2;
      c->block[1] = (int64_t)sl__rng_below(rng, (uint64_t)max_extent + 1);
    }
    while (c->out_axis == c->in_axis)
      c->out_axis = (int)sl__rng_below(rng, (uint64_t)c->nd);
  }
  c->root = (int)sl__rng_below(rng, (uint64_t)c->n);
}

/* Every op x dtype x reduce x group size 1..8 x algorithm, random blocks of
 * up to 3 dims with extents 0..9 (so parts are uneven and often empty). */
static void test_every_op_dtype_reduce_size(void **state) {
  sl_rng rng = {test_seed(1234, "every op")};
  sl__comm *comm = mk_comm(4, 65536);
  int cases = 0;
  for (int op = 0; op <= SL__COLL_BROADCAST; op++)
    for (int dt = 0; dt < SL_DTYPE_COUNT; dt++)
      for (int red = 0; red < 3; red++) {
        bool reduces =
            op == SL__COLL_ALL_REDUCE || op == SL__COLL_REDUCE_SCATTER;
        if (!reduces && red > 0) continue;
        for (int n = 1; n <= 8; n++)
          for (int algo = SL__COLL_DIRECT; algo <= SL__COLL_PARALLEL; algo++) {
            ccase c = {0};
            c.op = (sl__coll_op)op;
            c.dt = (sl_dtype)dt;
            c.red = (sl_reduce_op)red;
            c.n = n;
            c.algo = (sl__coll_algo)algo;
            random_block(&c, &rng, 9);
            run_case(comm, &c, &rng);
            cases++;
          }
      }
  printf("%d cases\n", cases);
  sl__comm_destroy(comm);
}

/* Parts that are empty for most members, and an empty block. */
static void test_uneven_and_empty_parts(void **state) {
  sl_rng rng = {test_seed(99, "uneven")};
  sl__comm *comm = mk_comm(3, 65536);
  for (int op = 0; op <= SL__COLL_BROADCAST; op++)
    for (int algo = SL__COLL_DIRECT; algo <= SL__COLL_PARALLEL; algo++)
      for (int64_t len = 0; len <= 9; len++) {
        ccase c = {0};
        c.op = (sl__coll_op)op;
        c.dt = SL_DTYPE_F32;
        c.n = 8;
        c.algo = (sl__coll_algo)algo;
        c.nd = 2;
        c.block[0] = len; /* split axis: 8 members, len 0..9 */
        c.block[1] = 3;
        c.in_axis = 0;
        c.out_axis = op == SL__COLL_ALL_TO_ALL ? 1 : 0;
        if (op == SL__COLL_ALL_TO_ALL) c.block[1] = len;
        c.root = 7;
        run_case(comm, &c, &rng);
      }
  sl__comm_destroy(comm);
}

/* Larger tensors through both algorithms, with the worker count smaller
 * than the group (several members' tasks on one worker). */
static void test_large(void **state) {
  sl_rng rng = {test_seed(7, "large")};
  sl__comm *comm = mk_comm(2, 0);
  for (int op = 0; op <= SL__COLL_BROADCAST; op++) {
    ccase c = {0};
    c.op = (sl__coll_op)op;
    c.dt = SL_DTYPE_F32;
    c.red = SL_REDUCE_SUM;
    c.n = 5;
    c.nd = 2;
    c.block[0] = 301;
    c.block[1] = 257;
    c.in_axis = 0;
    c.out_axis = op == SL__COLL_ALL_TO_ALL ? 1 : (op == 1 ? 1 : 0);
    c.root = 2;
    c.algo = SL__COLL_PARALLEL;
    run_case(comm, &c, &rng);
    c.algo = SL__COLL_DIRECT;
    run_case(comm, &c, &rng);
  }
  sl__comm_destroy(comm);
}

/* An all_reduce whose members' outputs are their inputs (some or all of
 * them): the same values as out of place, with chunks of several tiles,
 * uneven parts and both algorithms. */
static void test_all_reduce_in_place(void **state) {
  sl_rng rng = {test_seed(31, "all_reduce_in_place")};
  sl__comm *comm = mk_comm(3, 0);
  const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_F64, SL_DTYPE_BF16,
                          SL_DTYPE_I32, SL_DTYPE_U8};
  for (int trial = 0; trial < 40; trial++) {
    ccase c = {0};
    c.op = SL__COLL_ALL_REDUCE;
    c.dt = dts[sl__rng_below(&rng, 5)];
    c.red = (sl_reduce_op)sl__rng_below(&rng, 3);
    c.n = 1 + (int)sl__rng_below(&rng, 6);
    c.nd = 1;
    c.block[0] = 1 + (int64_t)sl__rng_below(&rng, 9000); /* up to ~9 tiles */
    c.algo = sl__rng_below(&rng, 2) ? SL__COLL_PARALLEL : SL__COLL_DIRECT;
    if (trial < 10) { /* two members summing f32 have a one-pass path */
      c.dt = SL_DTYPE_F32;
      c.red = SL_REDUCE_SUM;
      c.n = 2;
    }
    case_data cd;
    case_data_make(&c, &rng, g_workers, &cd);
    sl__coll *x = NULL;
    if (sl__coll_create(comm, &cd.desc, &x))
      fail_msg("create: %s", sl_last_error());
    for (int k = 0; k < c.n; k++)
      if (sl__rng_below(&rng, 3)) { /* in place: out holds the input */
        assert_true(cd.inb[k] == cd.outb[k]);
        memcpy(cd.out[k], cd.in[k], cd.inb[k]);
        free(cd.in[k]);
        cd.in[k] = cd.out[k];
      }
    char what[160];
    snprintf(what, sizeof what, "in place %s %s n=%d extent=%lld algo=%d",
             sl_dtype_name(c.dt), sl_reduce_op_name(c.red), c.n,
             (long long)c.block[0], (int)c.algo);
    arrive_all(x, c.n, (void **)cd.in, cd.inb, cd.out, cd.outb, &rng);
    for (int k = 0; k < c.n; k++) {
      expect_equal(c.dt, cd.out[k], cd.want[k],
                   (int64_t)(cd.outb[k] / sl_dtype_size(c.dt)), what, k);
      if (cd.in[k] == cd.out[k]) cd.in[k] = NULL; /* not freed twice */
    }
    case_data_free(&cd);
  }
  sl__comm_destroy(comm);
}

/* The exact bytes of docs/boxing.md's example: [10] f32 on 4 members. */
static void test_sizes(void **state) {
  sl__comm *comm = mk_comm(1, 0);
  int workers[4] = {0, 0, 0, 0};
  sl__coll_desc d =
      coll_desc_1d("sizes", SL__COLL_ALL_GATHER, SL_DTYPE_F32, 4, workers, 10);
  sl__coll *x;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  size_t want_in[4] = {12, 12, 8, 8};
  for (int k = 0; k < 4; k++) {
    assert_int_equal(sl__coll_in_bytes(x, k), want_in[k]);
    assert_int_equal(sl__coll_out_bytes(x, k), 40);
  }
  d.op = SL__COLL_REDUCE_SCATTER;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  for (int k = 0; k < 4; k++) {
    assert_int_equal(sl__coll_in_bytes(x, k), 40);
    assert_int_equal(sl__coll_out_bytes(x, k), want_in[k]);
  }
  /* The threshold: 40 bytes run direct under a 40-byte limit, parallel
   * under 39; a single member is always direct. */
  sl__comm_destroy(comm);
  comm = mk_comm(1, 40);
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  assert_int_equal(sl__coll_algo_of(x), SL__COLL_DIRECT);
  sl__comm_destroy(comm);
  comm = mk_comm(1, 39);
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  assert_int_equal(sl__coll_algo_of(x), SL__COLL_PARALLEL);
  d.n = 1;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  assert_int_equal(sl__coll_algo_of(x), SL__COLL_DIRECT);
  sl__comm_destroy(comm);
}

static void test_bad_arguments(void **state) {
  sl__comm *comm = mk_comm(2, 0);
  int workers[3] = {0, 1, 0};
  sl__coll_desc d =
      coll_desc_1d("grads", SL__COLL_ALL_GATHER, SL_DTYPE_F32, 3, workers, 6);
  d.in_axis = 1; /* outside the block */
  sl__coll *x = NULL;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "grads"));
  assert_null(x);
  d.in_axis = 0;
  workers[2] = 2; /* no such worker */
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_EINVAL);
  workers[2] = 0;
  d.op = SL__COLL_ALL_TO_ALL;
  d.out_axis = 0; /* same as in_axis */
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_EINVAL);
  d.op = SL__COLL_BROADCAST;
  d.root = 3;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_EINVAL);
  d.op = (sl__coll_op)42;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_EINVAL);
  d.op = SL__COLL_ALL_REDUCE;
  d.reduce = (sl_reduce_op)9;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_EINVAL);
  d.reduce = SL_REDUCE_SUM;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);

  float in[3][6] = {{0}}, out[3][6];
  waiter w;
  waiter_init(&w);
  /* wrong sizes, member out of range, NULL buffers: refused, no callback */
  assert_int_equal(sl__coll_arrive(x, 0, in[0], 20, out[0], 24, waiter_cb, &w),
                   SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "expected 24 and 24"));
  assert_int_equal(sl__coll_arrive(x, 3, in[0], 24, out[0], 24, waiter_cb, &w),
                   SL_EINVAL);
  assert_int_equal(sl__coll_arrive(x, 0, NULL, 24, out[0], 24, waiter_cb, &w),
                   SL_EINVAL);
  /* twice in one round */
  assert_int_equal(sl__coll_arrive(x, 0, in[0], 24, out[0], 24, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__coll_arrive(x, 0, in[0], 24, out[0], 24, waiter_cb, &w),
                   SL_ESTATE);
  assert_int_equal(w.done, 0);
  assert_int_equal(sl__coll_arrive(x, 1, in[1], 24, out[1], 24, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__coll_arrive(x, 2, in[2], 24, out[2], 24, waiter_cb, &w),
                   SL_OK);
  waiter_wait(&w, 3);
  assert_int_equal(w.failed, 0);
  waiter_fini(&w);
  sl__comm_config bad = {0, 0, NULL};
  sl__comm *c2 = NULL;
  assert_int_equal(sl__comm_create(&bad, &c2), SL_EINVAL);
  assert_null(c2);
  sl__comm_destroy(comm);
  sl__comm_destroy(NULL);
}

/* Abort completes the members that wait, with the status and a message;
 * later arrivals complete at once; destroy aborts what still waits. */
static void test_abort(void **state) {
  sl__comm *comm = mk_comm(2, 0);
  int workers[3] = {0, 1, 0};
  sl__coll_desc d =
      coll_desc_1d("wgrad", SL__COLL_ALL_REDUCE, SL_DTYPE_F64, 3, workers, 4);
  sl__coll *x, *y;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  assert_int_equal(sl__coll_create(comm, &d, &y), SL_OK);
  double in[3][4] = {{0}}, out[3][4];
  waiter w;
  waiter_init(&w);
  assert_int_equal(sl__coll_arrive(x, 0, in[0], 32, out[0], 32, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__coll_arrive(x, 2, in[2], 32, out[2], 32, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(sl__coll_arrive(y, 1, in[1], 32, out[1], 32, waiter_cb, &w),
                   SL_OK);
  assert_int_equal(w.done, 0);
  sl__comm_abort(comm, SL_ECOMM);
  waiter_wait(&w, 3);
  assert_int_equal(w.failed, 3);
  assert_int_equal(w.last, SL_ECOMM);
  assert_non_null(strstr(w.msg, "aborted"));
  assert_int_equal(sl__coll_arrive(x, 1, in[1], 32, out[1], 32, waiter_cb, &w),
                   SL_OK);
  waiter_wait(&w, 4);
  assert_int_equal(w.failed, 4);
  sl__comm_stats s;
  sl__comm_get_stats(comm, &s);
  assert_int_equal(s.rounds_aborted, 2);
  sl__comm_destroy(comm);

  comm = mk_comm(1, 0);
  workers[1] = 0;
  assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
  assert_int_equal(sl__coll_arrive(x, 1, in[1], 32, out[1], 32, waiter_cb, &w),
                   SL_OK);
  sl__comm_destroy(comm);
  assert_int_equal(w.done, 5);
  assert_int_equal(w.last, SL_EABORTED);
  waiter_fini(&w);
}

/* ---- against the reference executor ------------------------------------- */

static sl_boxing_route *mk_plan(const char *shape, sl_dtype dt, const char *src,
                                const char *ssbp, const char *dst,
                                const char *dsbp, sl_placement **ps,
                                sl_placement **pd) {
  sl_shape sh;
  sl_nd_sbp a, b;
  if (sl_shape_parse(shape, &sh) || sl_nd_sbp_parse(ssbp, &a) ||
      sl_nd_sbp_parse(dsbp, &b) || sl_placement_parse(src, ps) ||
      sl_placement_parse(dst, pd))
    fail_msg("bad test input: %s", sl_last_error());
  sl_boxing_route *plan = NULL;
  if (sl_boxing_route_create(&sh, dt, *ps, &a, *pd, &b, NULL, &plan))
    fail_msg("plan: %s", sl_last_error());
  return plan;
}

/* Random source shards (for P: random parts); returns them per source
 * placement rank. */
static void **src_shards(const sl_shape *sh, sl_dtype dt, const sl_placement *p,
                         const sl_nd_sbp *s, sl_rng *rng) {
  int n = sl_placement_size(p);
  void **v = calloc((size_t)n, sizeof *v);
  for (int r = 0; r < n; r++) {
    sl_slice sl;
    assert_int_equal(sl_local_slice(sh, p, s, r, &sl), SL_OK);
    v[r] = rand_tensor(dt, sl_slice_numel(&sl), rng);
  }
  return v;
}

/* Runs plan step by step with collectives built the way the session builds
 * them (group steps: one collective per group, block = a member's slice
 * with the step's mesh axis made B; send_recv/copy: one exchange of every
 * plan rank), and compares the final shards with sl_boxing_execute's. */
static void check_plan_with_colls(sl__comm *comm, const char *shape,
                                  sl_dtype dt, const char *src,
                                  const char *ssbp, const char *dst,
                                  const char *dsbp, sl_rng *rng) {
  sl_placement *ps, *pd;
  sl_boxing_route *plan = mk_plan(shape, dt, src, ssbp, dst, dsbp, &ps, &pd);
  sl_shape sh;
  sl_nd_sbp a, b;
  sl_shape_parse(shape, &sh);
  sl_nd_sbp_parse(ssbp, &a);
  sl_nd_sbp_parse(dsbp, &b);
  size_t es = sl_dtype_size(dt);
  int R = sl_boxing_route_rank_count(plan);
  void **src_v = src_shards(&sh, dt, ps, &a, rng);
  /* cur[p]: plan rank p's shard in the current layout (NULL: none) */
  void **cur = calloc((size_t)R, sizeof *cur);
  int *prank_src = calloc((size_t)sl_placement_size(ps), sizeof(int));
  int *prank_dst = calloc((size_t)sl_placement_size(pd), sizeof(int));
  for (int r = 0; r < sl_placement_size(ps); r++) {
    int node, dev;
    sl_placement_rank_device(ps, r, &node, &dev);
    for (int p = 0; p < R; p++) {
      int pn, pdv;
      sl_boxing_route_rank_device(plan, p, &pn, &pdv);
      if (pn == node && pdv == dev) prank_src[r] = p;
    }
  }
  for (int t = 0; t < sl_placement_size(pd); t++) {
    int node, dev;
    sl_placement_rank_device(pd, t, &node, &dev);
    for (int p = 0; p < R; p++) {
      int pn, pdv;
      sl_boxing_route_rank_device(plan, p, &pn, &pdv);
      if (pn == node && pdv == dev) prank_dst[t] = p;
    }
  }
  for (int r = 0; r < sl_placement_size(ps); r++) {
    sl_slice sl;
    sl_local_slice(&sh, ps, &a, r, &sl);
    size_t bytes = (size_t)sl_slice_numel(&sl) * es;
    cur[prank_src[r]] = malloc(bytes ? bytes : 1);
    memcpy(cur[prank_src[r]], src_v[r], bytes);
  }
  const sl_placement *cur_p = ps;
  for (int s = 0; s < sl_boxing_route_step_count(plan); s++) {
    sl_boxing_op op = sl_boxing_step_op(plan, s);
    sl_nd_sbp from, to;
    sl_boxing_step_layout(plan, s, &from, &to);
    sl_reduce_op red = SL_REDUCE_SUM;
    bool has_red = sl_boxing_step_reduce(plan, s, &red);
    void **next = calloc((size_t)R, sizeof *next);
    if (op == SL_BOXING_SEND_RECV || op == SL_BOXING_COPY) {
      const sl_placement *to_p = pd;
      bool *has_in = calloc((size_t)R, 1), *has_out = calloc((size_t)R, 1);
      sl_slice *isl = calloc((size_t)R, sizeof *isl),
               *osl = calloc((size_t)R, sizeof *osl);
      int8_t *fill = calloc((size_t)R, 1);
      int *workers = calloc((size_t)R, sizeof(int));
      size_t *inb = calloc((size_t)R, sizeof(size_t)),
             *outb = calloc((size_t)R, sizeof(size_t));
      for (int p = 0; p < R; p++) {
        fill[p] = SL__COLL_FILL_ZERO;
        sl_reduce_op f;
        if (sl_boxing_step_fill(plan, s, p, &f)) fill[p] = (int8_t)f;
        workers[p] = p % 3;
      }
      for (int r = 0; r < sl_placement_size(cur_p); r++) {
        int p = cur_p == ps ? prank_src[r] : prank_dst[r];
        has_in[p] = true;
        sl_local_slice(&sh, cur_p, &from, r, &isl[p]);
        inb[p] = (size_t)sl_slice_numel(&isl[p]) * es;
      }
      for (int t = 0; t < sl_placement_size(to_p); t++) {
        int p = prank_dst[t];
        has_out[p] = true;
        sl_local_slice(&sh, to_p, &to, t, &osl[p]);
        outb[p] = (size_t)sl_slice_numel(&osl[p]) * es;
        next[p] = malloc(outb[p] ? outb[p] : 1);
      }
      int np = sl_boxing_step_piece_count(plan, s);
      sl__coll_piece *pieces = calloc((size_t)np + 1, sizeof *pieces);
      bool preduce = false;
      for (int i = 0; i < np; i++)
        assert_int_equal(sl_boxing_step_piece(plan, s, i, &pieces[i].src,
                                              &pieces[i].dst, &pieces[i].slice,
                                              &preduce),
                         SL_OK);
      sl__coll_desc d = {0};
      d.name = "xchg";
      d.op = SL__COLL_EXCHANGE;
      d.dtype = dt;
      d.reduce = red;
      d.n = R;
      d.workers = workers;
      d.block = sh;
      d.has_in = has_in;
      d.has_out = has_out;
      d.in_slice = isl;
      d.out_slice = osl;
      d.fill = fill;
      d.piece_count = np;
      d.pieces = pieces;
      d.piece_reduce = preduce && has_red;
      d.algo = s % 2 ? SL__COLL_PARALLEL : SL__COLL_DIRECT;
      sl__coll *x;
      if (sl__coll_create(comm, &d, &x))
        fail_msg("exchange: %s", sl_last_error());
      arrive_all(x, R, cur, inb, next, outb, rng);
      cur_p = to_p;
      free(has_in);
      free(has_out);
      free(isl);
      free(osl);
      free(fill);
      free(workers);
      free(inb);
      free(outb);
      free(pieces);
    } else {
      int m = sl_boxing_step_mesh_axis(plan, s);
      int gs = sl_placement_mesh_dim(cur_p, m);
      if (op == SL_BOXING_SLICE) { /* local: member k keeps its part k */
        for (int g = 0; g < sl_boxing_step_group_count(plan, s); g++) {
          const int *ranks;
          int n = sl_boxing_step_group(plan, s, g, &ranks);
          for (int k = 0; k < n; k++) {
            sl_slice have;
            sl_local_slice(&sh, cur_p, &from, ranks[k], &have);
            int64_t pd_[SL_MAX_DIMS];
            next[ranks[k]] = take_part(dt, sh.ndim, have.extent, cur[ranks[k]],
                                       to.sbp[m].axis, n, k, pd_);
          }
        }
        for (int p = 0; p < R; p++)
          free(cur[p]);
        free(cur);
        cur = next;
        continue;
      }
      for (int g = 0; g < sl_boxing_step_group_count(plan, s); g++) {
        const int *ranks;
        int n = sl_boxing_step_group(plan, s, g, &ranks);
        assert_int_equal(n, gs);
        /* same placement: plan ranks are placement ranks */
        sl_nd_sbp bl = from;
        bl.sbp[m] = sl_sbp_broadcast();
        sl_slice blk;
        sl_local_slice(&sh, cur_p, &bl, ranks[0], &blk);
        void *in[8], *out[8];
        size_t inb[8], outb[8];
        int workers[8];
        sl__coll_desc d = {0};
        d.name = "group";
        d.dtype = dt;
        d.reduce = red;
        d.n = n;
        d.workers = workers;
        d.block.ndim = sh.ndim;
        memcpy(d.block.dims, blk.extent, sizeof d.block.dims);
        d.algo = g % 2 ? SL__COLL_PARALLEL : SL__COLL_DIRECT;
        switch (op) {
        case SL_BOXING_ALL_REDUCE: d.op = SL__COLL_ALL_REDUCE; break;
        case SL_BOXING_REDUCE_SCATTER:
          d.op = SL__COLL_REDUCE_SCATTER;
          d.out_axis = to.sbp[m].axis;
          break;
        case SL_BOXING_ALL_GATHER:
          d.op = SL__COLL_ALL_GATHER;
          d.in_axis = from.sbp[m].axis;
          break;
        case SL_BOXING_ALL_TO_ALL:
          d.op = SL__COLL_ALL_TO_ALL;
          d.in_axis = from.sbp[m].axis;
          d.out_axis = to.sbp[m].axis;
          break;
        default: fail_msg("step %s not covered here", sl_boxing_op_name(op));
        }
        for (int k = 0; k < n; k++)
          workers[k] = k % 2;
        sl__coll *x;
        if (sl__coll_create(comm, &d, &x))
          fail_msg("group: %s", sl_last_error());
        for (int k = 0; k < n; k++) {
          int p = ranks[k];
          sl_slice want;
          sl_local_slice(&sh, cur_p, &from, p, &want);
          inb[k] = (size_t)sl_slice_numel(&want) * es;
          assert_int_equal(inb[k], sl__coll_in_bytes(x, k));
          in[k] = cur[p];
          sl_local_slice(&sh, cur_p, &to, p, &want);
          outb[k] = (size_t)sl_slice_numel(&want) * es;
          assert_int_equal(outb[k], sl__coll_out_bytes(x, k));
          next[p] = out[k] = malloc(outb[k] ? outb[k] : 1);
        }
        arrive_all(x, n, in, inb, out, outb, rng);
      }
    }
    for (int p = 0; p < R; p++)
      free(cur[p]);
    free(cur);
    cur = next;
  }
  /* the reference */
  int nt = sl_placement_size(pd);
  void **ref = calloc((size_t)nt, sizeof *ref);
  for (int t = 0; t < nt; t++) {
    sl_slice sl;
    sl_local_slice(&sh, pd, &b, t, &sl);
    ref[t] = calloc((size_t)sl_slice_numel(&sl) + 1, es);
  }
  if (sl_boxing_execute(plan, (const void *const *)src_v, ref))
    fail_msg("execute: %s", sl_last_error());
  char what[200];
  snprintf(what, sizeof what, "%s %s %s -> %s %s", shape, src, ssbp, dst, dsbp);
  for (int t = 0; t < nt; t++) {
    sl_slice sl;
    sl_local_slice(&sh, pd, &b, t, &sl);
    expect_equal(dt, cur[prank_dst[t]], ref[t], sl_slice_numel(&sl), what, t);
    free(ref[t]);
  }
  free(ref);
  for (int p = 0; p < R; p++)
    free(cur[p]);
  free(cur);
  for (int r = 0; r < sl_placement_size(ps); r++)
    free(src_v[r]);
  free(src_v);
  free(prank_src);
  free(prank_dst);
  sl_boxing_route_destroy(plan);
  sl_placement_destroy(ps);
  sl_placement_destroy(pd);
}

/* The waiting hook: members that arrive before the last are told they
 * wait, and told the wait is over when the last one arrives (the hook gets
 * the member's done-arg); an abort completes a waiting member without
 * ending its wait through the hook (its completion does that). */
static int g_waits[3], g_wait_calls;
static void record_waiting(void *arg, bool waiting) {
  g_waits[*(int *)arg] += waiting ? 1 : -1;
  g_wait_calls++;
}
static atomic_int g_member_done[3]; /* worker threads complete members */
static void member_done(void *arg, sl_status st) {
  atomic_fetch_add(&g_member_done[*(int *)arg], 1);
  (void)st;
}

static void test_waiting_hook(void **state) {
  for (int parallel = 0; parallel < 2; parallel++) {
    sl__comm *comm = mk_comm(2, parallel ? -1 : 1 << 20);
    int workers[3] = {0, 1, 0}, ids[3] = {0, 1, 2};
    sl__coll_desc d = coll_desc_1d("watched", SL__COLL_ALL_REDUCE, SL_DTYPE_F32,
                                   3, workers, 6);
    d.waiting = record_waiting;
    sl__coll *x;
    assert_int_equal(sl__coll_create(comm, &d, &x), SL_OK);
    float in[3][6] = {{1}, {2}, {3}}, out[3][6];
    memset(g_waits, 0, sizeof g_waits);
    for (int k = 0; k < 3; k++)
      atomic_store(&g_member_done[k], 0);
    g_wait_calls = 0;
    assert_int_equal(
        sl__coll_arrive(x, 2, in[2], 24, out[2], 24, member_done, &ids[2]),
        SL_OK);
    assert_int_equal(
        sl__coll_arrive(x, 0, in[0], 24, out[0], 24, member_done, &ids[0]),
        SL_OK);
    assert_int_equal(g_waits[2], 1);
    assert_int_equal(g_waits[0], 1);
    assert_int_equal(g_wait_calls, 2);
    assert_int_equal(
        sl__coll_arrive(x, 1, in[1], 24, out[1], 24, member_done, &ids[1]),
        SL_OK);
    /* The last arriver never waited; the other two waited and stopped. */
    assert_int_equal(g_wait_calls, 4);
    for (int k = 0; k < 3; k++)
      assert_int_equal(g_waits[k], 0);
    for (int spin = 0; spin < 10000 && atomic_load(&g_member_done[0]) +
                                               atomic_load(&g_member_done[1]) +
                                               atomic_load(&g_member_done[2]) <
                                           3;
         spin++)
      sl__sleep_ns(100000);
    assert_true(out[0][0] == 6.0f && out[1][0] == 6.0f && out[2][0] == 6.0f);
    /* Abort with one member waiting: completed, the hook not called. */
    assert_int_equal(
        sl__coll_arrive(x, 1, in[1], 24, out[1], 24, member_done, &ids[1]),
        SL_OK);
    assert_int_equal(g_waits[1], 1);
    sl__comm_abort(comm, SL_ECOMM);
    assert_int_equal(atomic_load(&g_member_done[1]), 2);
    assert_int_equal(g_wait_calls, 5);
    sl__comm_destroy(comm);
  }
}

static void test_against_executor(void **state) {
  sl_rng rng = {test_seed(2024, "executor")};
  sl__comm *comm = mk_comm(3, 0);
  for (int dt = 0; dt < SL_DTYPE_COUNT; dt++) {
    sl_dtype t = (sl_dtype)dt;
    check_plan_with_colls(comm, "10,7", t, "cpu:0-3", "S(0)", "cpu:4-6", "S(1)",
                          &rng);
    check_plan_with_colls(comm, "5,3", t, "cpu:0-1", "P", "cpu:2-4", "B", &rng);
    check_plan_with_colls(comm, "5,3", t, "cpu:0-1", "P(max)", "cpu:1-3",
                          "S(0)", &rng);
    check_plan_with_colls(comm, "7,2", t, "cpu:0-1", "S(0)", "cpu:2-3", "S(0)",
                          &rng);
    check_plan_with_colls(comm, "6,5", t, "cpu:0-2", "B", "cpu:1-4", "P", &rng);
    check_plan_with_colls(comm, "9,6", t, "cpu:0-3[2,2]", "(S(0),P)", "cpu:0-2",
                          "S(1)", &rng);
    check_plan_with_colls(comm, "10", t, "cpu:0-3", "P", "cpu:0-3", "B", &rng);
    check_plan_with_colls(comm, "10,3", t, "cpu:0-3", "P(min)", "cpu:0-3",
                          "S(0)", &rng);
    check_plan_with_colls(comm, "10,3", t, "cpu:0-3", "S(0)", "cpu:0-3", "B",
                          &rng);
    check_plan_with_colls(comm, "10,3", t, "cpu:0-2", "S(0)", "cpu:0-2", "S(1)",
                          &rng);
    check_plan_with_colls(comm, "7,5", t, "cpu:0-5[2,3]", "(S(0),P)",
                          "cpu:0-5[2,3]", "(B,B)", &rng);
    check_plan_with_colls(comm, "7,5", t, "cpu:0-5[3,2]", "(S(0),S(0))",
                          "cpu:0-5[3,2]", "(B,S(1))", &rng);
  }
  sl__comm_destroy(comm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_dtype_reduce_size),
      cmocka_unit_test(test_uneven_and_empty_parts),
      cmocka_unit_test(test_large),
      cmocka_unit_test(test_all_reduce_in_place),
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_waiting_hook),
      cmocka_unit_test(test_against_executor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
