/* Concurrent, independent collectives reached in different orders by
 * different ranks. Eight rank threads behave like actors' stream threads:
 * each joins every collective it is a member of in its own random order
 * and never waits inside a collective; when one of its collectives
 * completes it checks that round's output and joins the next round of that
 * collective at once, whatever the others are doing. A blocking
 * implementation deadlocks here within the first round (rank a waits in X
 * for b while b waits in Y for a); this one must finish every round with
 * correct outputs. Random ops, dtypes, shapes, groups (overlapping, any
 * member order), and a small direct threshold so both algorithms run.
 *
 * SLUICE_TEST_SEED replays; SLUICE_TEST_CASES sets the number of cases. */
#include "comm_helpers.h"

#include <sched.h>

enum { RANKS = 8, MAX_COLLS = 24, ROUNDS = 12 };

typedef struct rank_thread rank_thread;

typedef struct member_ref {
  rank_thread *rt;
  int coll;
} member_ref;

typedef struct tcoll {
  ccase c;
  int ranks[CASE_MAX]; /* member k is rank ranks[k] */
  sl__coll *x;
  case_data data[ROUNDS]; /* per round, so every rank can check */
  member_ref ref[CASE_MAX];
} tcoll;

struct rank_thread {
  int rank;
  uint64_t seed;
  tcoll *colls;
  int n_colls;
  pthread_mutex_t m;
  pthread_cond_t cv;
  int queue[MAX_COLLS * ROUNDS + 8]; /* completed collectives */
  int qh, qt;
  int failed;
  char err[256];
  pthread_t th;
};

static void on_done(void *arg, sl_status st) {
  member_ref *r = arg;
  rank_thread *t = r->rt;
  pthread_mutex_lock(&t->m);
  if (st != SL_OK) {
    t->failed++;
    snprintf(t->err, sizeof t->err, "%s", sl_last_error());
  }
  t->queue[t->qt++] = r->coll;
  pthread_cond_signal(&t->cv);
  pthread_mutex_unlock(&t->m);
}

static int member_of(const tcoll *tc, int rank) {
  for (int k = 0; k < tc->c.n; k++)
    if (tc->ranks[k] == rank) return k;
  return -1;
}

static void arrive(rank_thread *t, int ci, int round, sl_rng *rng) {
  tcoll *tc = &t->colls[ci];
  int k = member_of(tc, t->rank);
  case_data *cd = &tc->data[round];
  if (sl__rng_below(rng, 4) == 0) sched_yield();
  sl_status st = sl__coll_arrive(tc->x, k, cd->in[k], cd->inb[k], cd->out[k],
                                 cd->outb[k], on_done, &tc->ref[k]);
  if (st != SL_OK) {
    pthread_mutex_lock(&t->m);
    t->failed++;
    snprintf(t->err, sizeof t->err, "arrive: %s", sl_last_error());
    pthread_mutex_unlock(&t->m);
  }
}

static void *rank_main(void *arg) {
  rank_thread *t = arg;
  sl_rng rng = {t->seed * 31 + (uint64_t)t->rank};
  int mine[MAX_COLLS], n_mine = 0, round[MAX_COLLS] = {0};
  for (int i = 0; i < t->n_colls; i++)
    if (member_of(&t->colls[i], t->rank) >= 0) mine[n_mine++] = i;
  for (int i = n_mine - 1; i > 0; i--) { /* this rank's own order */
    int j = (int)sl__rng_below(&rng, (uint64_t)i + 1), x = mine[i];
    mine[i] = mine[j];
    mine[j] = x;
  }
  for (int i = 0; i < n_mine; i++)
    arrive(t, mine[i], 0, &rng);
  int left = n_mine * ROUNDS;
  while (left > 0) {
    pthread_mutex_lock(&t->m);
    while (t->qh == t->qt)
      pthread_cond_wait(&t->cv, &t->m);
    int ci = t->queue[t->qh++];
    bool bad = t->failed > 0;
    pthread_mutex_unlock(&t->m);
    if (bad) return NULL;
    tcoll *tc = &t->colls[ci];
    int k = member_of(tc, t->rank), r = round[ci];
    case_data *cd = &tc->data[r];
    size_t es = sl_dtype_size(cd->c.dt);
    for (int64_t i = 0; i < (int64_t)(cd->outb[k] / es); i++) {
      double g = sl_load_element(cd->c.dt, cd->out[k], i);
      double w = sl_load_element(cd->c.dt, cd->want[k], i);
      if (g != w) {
        pthread_mutex_lock(&t->m);
        t->failed++;
        snprintf(t->err, sizeof t->err,
                 "collective %d (%s %s, %d members) round %d rank %d element "
                 "%lld: got %g, want %g",
                 ci, sl__coll_op_name(cd->c.op), sl_dtype_name(cd->c.dt),
                 cd->c.n, r, t->rank, (long long)i, g, w);
        pthread_mutex_unlock(&t->m);
        return NULL;
      }
    }
    left--;
    if (++round[ci] < ROUNDS) arrive(t, ci, round[ci], &rng);
  }
  return NULL;
}

static void run_one(uint64_t seed, int case_no) {
  sl_rng rng = {seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(case_no + 1))};
  int n_workers = 1 + (int)sl__rng_below(&rng, 4);
  sl__comm_config cfg = {n_workers, (int64_t)sl__rng_below(&rng, 512), NULL};
  sl__comm *comm = NULL;
  assert_int_equal(sl__comm_create(&cfg, &comm), SL_OK);
  int n_colls = 2 + (int)sl__rng_below(&rng, MAX_COLLS - 1);
  tcoll *colls = calloc((size_t)n_colls, sizeof *colls);
  rank_thread *rts = calloc(RANKS, sizeof *rts);
  for (int i = 0; i < n_colls; i++) {
    tcoll *tc = &colls[i];
    ccase *c = &tc->c;
    c->op = (sl__coll_op)sl__rng_below(&rng, SL__COLL_BROADCAST + 1);
    c->dt = (sl_dtype)sl__rng_below(&rng, SL_DTYPE_COUNT);
    c->red = (sl_reduce_op)sl__rng_below(&rng, 3);
    c->n = 1 + (int)sl__rng_below(&rng, CASE_MAX);
    c->nd = 1 + (int)sl__rng_below(&rng, 3);
    for (int d = 0; d < c->nd; d++)
      c->block[d] = (int64_t)sl__rng_below(&rng, 24);
    c->in_axis = (int)sl__rng_below(&rng, (uint64_t)c->nd);
    c->out_axis = (int)sl__rng_below(&rng, (uint64_t)c->nd);
    if (c->op == SL__COLL_ALL_TO_ALL) {
      if (c->nd == 1) {
        c->nd = 2;
        c->block[1] = (int64_t)sl__rng_below(&rng, 24);
      }
      while (c->out_axis == c->in_axis)
        c->out_axis = (int)sl__rng_below(&rng, (uint64_t)c->nd);
    }
    c->root = (int)sl__rng_below(&rng, (uint64_t)c->n);
    c->algo = SL__COLL_AUTO;
    /* a random subset of ranks, in a random member order */
    int perm[RANKS];
    for (int r = 0; r < RANKS; r++)
      perm[r] = r;
    for (int r = RANKS - 1; r > 0; r--) {
      int j = (int)sl__rng_below(&rng, (uint64_t)r + 1), x = perm[r];
      perm[r] = perm[j];
      perm[j] = x;
    }
    for (int k = 0; k < c->n; k++) {
      tc->ranks[k] = perm[k];
      tc->ref[k] = (member_ref){&rts[perm[k]], i};
    }
    for (int r = 0; r < ROUNDS; r++)
      case_data_make(c, &rng, n_workers, &tc->data[r]);
    if (sl__coll_create(comm, &tc->data[0].desc, &tc->x))
      fail_msg("create: %s", sl_last_error());
  }
  for (int r = 0; r < RANKS; r++) {
    rank_thread *t = &rts[r];
    t->rank = r;
    t->seed = seed + (uint64_t)case_no;
    t->colls = colls;
    t->n_colls = n_colls;
    pthread_mutex_init(&t->m, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_create(&t->th, NULL, rank_main, t);
  }
  for (int r = 0; r < RANKS; r++)
    pthread_join(rts[r].th, NULL);
  for (int r = 0; r < RANKS; r++)
    if (rts[r].failed)
      fail_msg("case %d (SLUICE_TEST_SEED=%llu): rank %d: %s", case_no,
               (unsigned long long)seed, r, rts[r].err);
  sl__comm_stats s;
  sl__comm_get_stats(comm, &s);
  /* destroy with nothing waiting: no member is completed twice */
  sl__comm_destroy(comm);
  for (int r = 0; r < RANKS; r++) {
    assert_int_equal(rts[r].qh, rts[r].qt);
    pthread_mutex_destroy(&rts[r].m);
    pthread_cond_destroy(&rts[r].cv);
  }
  assert_int_equal(s.rounds_aborted, 0);
  assert_int_equal(s.rounds_direct + s.rounds_parallel,
                   (uint64_t)n_colls * ROUNDS);
  for (int i = 0; i < n_colls; i++)
    for (int r = 0; r < ROUNDS; r++)
      case_data_free(&colls[i].data[r]);
  free(colls);
  free(rts);
}

static void test_random_orders(void **state) {
  uint64_t seed = test_seed(77, "concurrent");
  const char *e = getenv("SLUICE_TEST_CASES");
  int cases = e && e[0] ? atoi(e) : 40;
  for (int i = 0; i < cases; i++)
    run_one(seed, i);
}

/* The classic deadlock: rank 0 joins A then B, rank 1 joins B then A, and
 * neither waits for completion before joining the next. */
static void test_crossed_order(void **state) {
  sl__comm_config cfg = {2, -1, NULL}; /* always parallel */
  sl__comm *comm = NULL;
  assert_int_equal(sl__comm_create(&cfg, &comm), SL_OK);
  int workers[2] = {0, 1};
  sl__coll_desc d =
      coll_desc_1d("A", SL__COLL_ALL_REDUCE, SL_DTYPE_I32, 2, workers, 1000);
  sl__coll *a, *b;
  assert_int_equal(sl__coll_create(comm, &d, &a), SL_OK);
  d.name = "B";
  assert_int_equal(sl__coll_create(comm, &d, &b), SL_OK);
  int32_t in[2][2][1000], out[2][2][1000];
  for (int c = 0; c < 2; c++)
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < 1000; i++)
        in[c][r][i] = c * 100000 + r * 1000 + i;
  waiter w;
  waiter_init(&w);
  assert_int_equal(
      sl__coll_arrive(a, 0, in[0][0], 4000, out[0][0], 4000, waiter_cb, &w),
      SL_OK);
  assert_int_equal(
      sl__coll_arrive(b, 1, in[1][1], 4000, out[1][1], 4000, waiter_cb, &w),
      SL_OK);
  assert_int_equal(
      sl__coll_arrive(b, 0, in[1][0], 4000, out[1][0], 4000, waiter_cb, &w),
      SL_OK);
  assert_int_equal(
      sl__coll_arrive(a, 1, in[0][1], 4000, out[0][1], 4000, waiter_cb, &w),
      SL_OK);
  waiter_wait(&w, 4);
  assert_int_equal(w.failed, 0);
  for (int c = 0; c < 2; c++)
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < 1000; i++)
        assert_int_equal(out[c][r][i], in[c][0][i] + in[c][1][i]);
  waiter_fini(&w);
  sl__comm_destroy(comm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crossed_order),
      cmocka_unit_test(test_random_orders),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
