/* The device collectives (comm/coll/dev_coll.c). Without a GPU, against a fake
 * backend (dev_coll_fake.h) that works on host memory and behaves like
 * NCCL where it matters here — group calls per thread, the k-th collective of
 * every rank matched with the k-th of the others (a disagreement is counted:
 * NCCL would hang), point-to-point matched per pair in order: dtype and
 * reduction mapping, results of every collective, the unique id's trip through
 * a key-value store between simulated processes, keys, the communicator cache,
 * launch order under concurrent callers, and error propagation. With a GPU, the
 * NCCL backend on the devices present against host results. */
#include <sluice/build.h>

#include "dev_coll_fake.h"

/* ---- cases: buffers per rank and the expected outputs ------------------ */

typedef struct ccase {
  int n;
  sl__dev_coll_op op;
  sl_dtype dt;
  sl_reduce_op red;
  size_t count, inb, outb;
  unsigned char *in[FMAX], *out[FMAX], *want[FMAX];
  /* EXCHANGE */
  sl__dev_send send[FMAX][FMAX * 2];
  sl__dev_recv recv[FMAX][FMAX * 2];
  int n_send[FMAX], n_recv[FMAX];
} ccase;

static void fill_random(sl_dtype dt, void *p, size_t n, sl_rng *rng) {
  for (size_t k = 0; k < n; k++) {
    int64_t v = (int64_t)sl__rng_below(rng, 2001) - 1000;
    switch (dt) {
    case SL_DTYPE_F32: ((float *)p)[k] = (float)(v % 9); break;
    case SL_DTYPE_F64: ((double *)p)[k] = (double)(v % 9); break;
    case SL_DTYPE_I8: ((int8_t *)p)[k] = (int8_t)(v % 128); break;
    case SL_DTYPE_U8: ((uint8_t *)p)[k] = (uint8_t)(v & 255); break;
    case SL_DTYPE_BOOL: ((uint8_t *)p)[k] = (uint8_t)(v & 1); break;
    case SL_DTYPE_I32: ((int32_t *)p)[k] = (int32_t)v; break;
    case SL_DTYPE_I64: ((int64_t *)p)[k] = v * 1000003; break;
    default: fail_msg("fill_random: %s", sl_dtype_name(dt));
    }
  }
}

static void case_make(ccase *c, int n, sl__dev_coll_op op, sl_dtype dt,
                      sl_reduce_op red, size_t count, sl_rng *rng) {
  memset(c, 0, sizeof *c);
  c->n = n, c->op = op, c->dt = dt, c->red = red, c->count = count;
  sl__dev_type t = SL__DEV_UINT8;
  sl__dev_redop r = SL__DEV_SUM;
  size_t es = 1, nn = (size_t)n, part = count;
  if (op != SL__DEV_EXCHANGE) {
    assert_int_equal(sl__dev_coll_map(NULL, dt, true, red, &t, &r), SL_OK);
    es = sl_dtype_size(dt);
  }
  switch (op) {
  case SL__DEV_ALL_REDUCE: c->inb = c->outb = count; break;
  case SL__DEV_REDUCE_SCATTER: c->inb = nn * count, c->outb = count; break;
  case SL__DEV_ALL_GATHER: c->inb = count, c->outb = nn * count; break;
  case SL__DEV_ALL_TO_ALL: c->inb = c->outb = nn * count; break;
  case SL__DEV_EXCHANGE: c->inb = c->outb = 64 * nn * 2; break;
  }
  size_t inb = c->inb * es, outb = c->outb * es;
  c->inb = inb, c->outb = outb;
  for (int k = 0; k < n; k++) {
    c->in[k] = calloc(1, inb + 1);
    c->out[k] = calloc(1, outb + 1);
    c->want[k] = calloc(1, outb + 1);
    if (op == SL__DEV_EXCHANGE) memset(c->want[k], 0xee, outb);
    if (op == SL__DEV_EXCHANGE)
      for (size_t i = 0; i < inb; i++)
        c->in[k][i] = (unsigned char)sl__rng_next(rng);
    else
      fill_random(dt, c->in[k], inb / es, rng);
    memset(c->out[k], 0xee, outb);
  }
  unsigned char *acc = calloc(1, inb + 1);
  switch (op) {
  case SL__DEV_ALL_REDUCE:
  case SL__DEV_REDUCE_SCATTER:
    memcpy(acc, c->in[0], inb);
    for (int k = 1; k < n; k++)
      host_reduce(t, r, acc, c->in[k], inb / es);
    for (int k = 0; k < n; k++)
      memcpy(c->want[k], acc + (op == SL__DEV_ALL_REDUCE ? 0 : k * outb), outb);
    break;
  case SL__DEV_ALL_GATHER:
    for (int k = 0; k < n; k++)
      for (int j = 0; j < n; j++)
        memcpy(c->want[k] + (size_t)j * inb, c->in[j], inb);
    break;
  case SL__DEV_ALL_TO_ALL:
    for (int k = 0; k < n; k++)
      for (int j = 0; j < n; j++)
        memcpy(c->want[k] + (size_t)j * part * es,
               c->in[j] + (size_t)k * part * es, part * es);
    break;
  case SL__DEV_EXCHANGE: {
    /* Up to 2 pieces (0..64 bytes, sometimes empty) from every rank to
     * every rank, itself included; receives listed in reverse peer order. */
    size_t soff[FMAX] = {0}, roff[FMAX] = {0};
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        int pieces = (int)sl__rng_below(rng, 3);
        for (int p = 0; p < pieces; p++) {
          size_t bytes = sl__rng_below(rng, 65);
          c->send[a][c->n_send[a]++] =
              (sl__dev_send){b, bytes ? c->in[a] + soff[a] : NULL, bytes};
          memcpy(c->want[b] + roff[b], c->in[a] + soff[a], bytes);
          soff[a] += bytes;
          roff[b] += bytes;
        }
      }
    memset(roff, 0, sizeof roff);
    for (int b = 0; b < n; b++) /* the same walk, assigning receives */
      c->n_recv[b] = 0;
    for (int a = 0; a < n; a++)
      for (int i = 0; i < c->n_send[a]; i++) {
        int b = c->send[a][i].peer;
        size_t bytes = c->send[a][i].bytes;
        c->recv[b][c->n_recv[b]++] =
            (sl__dev_recv){a, bytes ? c->out[b] + roff[b] : NULL, bytes};
        roff[b] += bytes;
      }
    for (int b = 0; b < n; b++) { /* reverse by peer, keep order per peer */
      sl__dev_recv tmp[FMAX * 2];
      int m = 0;
      for (int a = n - 1; a >= 0; a--)
        for (int i = 0; i < c->n_recv[b]; i++)
          if (c->recv[b][i].peer == a) tmp[m++] = c->recv[b][i];
      memcpy(c->recv[b], tmp, (size_t)m * sizeof tmp[0]);
    }
    break;
  }
  }
  free(acc);
}

static void case_free(ccase *c) {
  for (int k = 0; k < c->n; k++) {
    free(c->in[k]);
    free(c->out[k]);
    free(c->want[k]);
  }
}

static void case_args(ccase *c, sl__dev_rank_args *a, unsigned char **in,
                      unsigned char **out, sl__stream **streams) {
  for (int k = 0; k < c->n; k++)
    a[k] = (sl__dev_rank_args){.in = in[k],
                               .out = out[k],
                               .stream = streams ? streams[k] : STREAM(k),
                               .n_send = c->n_send[k],
                               .n_recv = c->n_recv[k],
                               .send = c->send[k],
                               .recv = c->recv[k]};
}

static sl__dev_coll_desc case_desc(const ccase *c, const char *name) {
  return (sl__dev_coll_desc){name, c->op, c->dt, c->red, c->count};
}

static void case_check(const ccase *c, unsigned char **got, const char *what) {
  for (int k = 0; k < c->n; k++)
    if (memcmp(got[k], c->want[k], c->outb) != 0)
      fail_msg("%s %s %s n=%d count=%zu: rank %d differs", what,
               sl__dev_coll_op_name(c->op), sl_dtype_name(c->dt), c->n,
               c->count, k);
}

/* ---- tests -------------------------------------------------------------- */

static void test_map(void **state) {
  (void)state;
  static const struct {
    sl_dtype dt;
    sl__dev_type t;
  } types[] = {
      {SL_DTYPE_F32, SL__DEV_FLOAT32},   {SL_DTYPE_F16, SL__DEV_FLOAT16},
      {SL_DTYPE_BF16, SL__DEV_BFLOAT16}, {SL_DTYPE_F64, SL__DEV_FLOAT64},
      {SL_DTYPE_I8, SL__DEV_INT8},       {SL_DTYPE_I32, SL__DEV_INT32},
      {SL_DTYPE_I64, SL__DEV_INT64},     {SL_DTYPE_U8, SL__DEV_UINT8},
      {SL_DTYPE_BOOL, SL__DEV_UINT8}};
  assert_int_equal(SL_ARRAY_LEN(types), SL_DTYPE_COUNT);
  for (size_t i = 0; i < SL_ARRAY_LEN(types); i++) {
    sl__dev_type t;
    sl__dev_redop r;
    assert_int_equal(
        sl__dev_coll_map(NULL, types[i].dt, true, SL_REDUCE_SUM, &t, &r),
        SL_OK);
    assert_int_equal(t, types[i].t);
    assert_int_equal(r,
                     types[i].dt == SL_DTYPE_BOOL ? SL__DEV_MAX : SL__DEV_SUM);
    assert_int_equal(
        sl__dev_coll_map(NULL, types[i].dt, true, SL_REDUCE_MAX, &t, &r), 0);
    assert_int_equal(r, SL__DEV_MAX); /* P(max) */
    assert_int_equal(
        sl__dev_coll_map(NULL, types[i].dt, true, SL_REDUCE_MIN, &t, &r), 0);
    assert_int_equal(r, SL__DEV_MIN); /* P(min); bool: and */
  }
  sl__dev_type t = SL__DEV_INT64;
  sl__dev_redop r = SL__DEV_PROD;
  assert_int_equal(sl__dev_coll_map(NULL, (sl_dtype)42, false, 0, &t, &r),
                   SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "dtype 42"));
  assert_int_equal(
      sl__dev_coll_map(NULL, SL_DTYPE_F32, true, (sl_reduce_op)9, &t, &r),
      SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "reduce op 9"));
  assert_int_equal(t, SL__DEV_INT64); /* untouched on failure */
  assert_int_equal(r, SL__DEV_PROD);
  /* The op matters only where it reduces. */
  assert_int_equal(
      sl__dev_coll_map(NULL, SL_DTYPE_F32, false, (sl_reduce_op)9, &t, &r), 0);

  /* A backend without a type refuses it, also at launch, naming both. */
  fake *f = fake_new();
  sl__dev_coll *e = engine(f);
  assert_int_equal(
      sl__dev_coll_map(e, SL_DTYPE_BF16, true, SL_REDUCE_SUM, &t, &r),
      SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "'fake' cannot handle bf16"));
  sl__dev_comm *c = local_comm(e, "g2", 2);
  uint16_t buf[2][4];
  sl__dev_rank_args a[2] = {rargs(buf[0], buf[0], STREAM(0)),
                            rargs(buf[1], buf[1], STREAM(1))};
  sl__dev_coll_desc d = {"grad", SL__DEV_ALL_REDUCE, SL_DTYPE_F16,
                         SL_REDUCE_SUM, 4};
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EUNSUPPORTED);
  assert_non_null(strstr(sl_last_error(), "all_reduce 'grad'"));
  assert_non_null(strstr(sl_last_error(), "group 'g2'"));
  assert_non_null(strstr(sl_last_error(), "cannot handle f16"));
  assert_int_equal(f->collectives, 0);
  assert_int_equal(sl__dev_comm_check(c), SL_OK); /* not poisoned */
  sl__dev_comm_destroy(c);
  sl__dev_coll_destroy(e);
  fake_free(f);

  /* NCCL: opens without a GPU in a CUDA build, says why not without. */
  sl__dev_coll *nccl = NULL;
  sl_status st = sl__dev_coll_nccl_open(&nccl);
  if (sl_build_has_nccl()) {
    assert_int_equal(st, SL_OK);
    assert_string_equal(sl__dev_coll_backend_name(nccl), "nccl");
    assert_int_equal(
        sl__dev_coll_map(nccl, SL_DTYPE_BF16, true, SL_REDUCE_MAX, &t, &r), 0);
    sl__dev_coll_destroy(nccl);
  } else {
    assert_int_equal(st, SL_EUNSUPPORTED);
    assert_null(nccl);
    assert_non_null(strstr(sl_last_error(), "without CUDA/NCCL"));
  }
}

static void test_create_checks(void **state) {
  (void)state;
  sl__dev_coll_vtable vt = fake_vt;
  vt.reduce_scatter = NULL;
  sl__dev_coll *e = NULL;
  assert_int_equal(sl__dev_coll_create(&vt, NULL, &e), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no reduce_scatter"));
  vt = fake_vt;
  vt.id_bytes = SL__DEV_COLL_ID_MAX + 1;
  assert_int_equal(sl__dev_coll_create(&vt, NULL, &e), SL_EINVAL);
  assert_null(e);

  fake *f = fake_new();
  e = engine(f);
  sl__dev_comm *c = NULL;
  int dev[3] = {0, 1, 1}, ranks[3] = {0, 1, 2};
  assert_int_equal(sl__dev_comm_create_local(e, "dup", 3, dev, &c), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "same device 1"));
  assert_int_equal(sl__dev_comm_create_local(e, "", 2, dev, &c), SL_EINVAL);
  assert_int_equal(sl__dev_comm_create_local(e, "zero", 0, dev, &c), SL_EINVAL);
  sl__dev_comm_desc d = {.name = "far",
                         .nranks = 3,
                         .nlocal = 1,
                         .ranks = &ranks[1],
                         .devices = dev};
  assert_int_equal(sl__dev_comm_create(e, &d, &c), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no key-value store"));
  ranks[1] = 3;
  assert_int_equal(sl__dev_comm_create(e, &d, &c), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "rank 3 out of range"));
  assert_null(c);
  assert_int_equal(f->inits, 0);
  sl__dev_coll_destroy(e);
  fake_free(f);
}

/* Every op on groups of 1 to 5 ranks, several dtypes, reductions and
 * counts (0 included), against the host. */
static void test_local_collectives(void **state) {
  (void)state;
  sl_rng rng = {seed_of(11, "local_collectives")};
  static const sl_dtype dts[] = {SL_DTYPE_F32, SL_DTYPE_I32, SL_DTYPE_I64,
                                 SL_DTYPE_F64, SL_DTYPE_U8,  SL_DTYPE_I8,
                                 SL_DTYPE_BOOL};
  fake *f = fake_new();
  sl__dev_coll *e = engine(f);
  int launches = 0;
  for (int n = 1; n <= 5; n++) {
    char name[16];
    snprintf(name, sizeof name, "local%d", n);
    sl__dev_comm *c = local_comm(e, name, n);
    assert_int_equal(sl__dev_comm_nranks(c), n);
    assert_int_equal(sl__dev_comm_nlocal(c), n);
    assert_int_equal(sl__dev_comm_device(c, n - 1), n - 1);
    for (int op = SL__DEV_ALL_REDUCE; op <= SL__DEV_EXCHANGE; op++)
      for (size_t i = 0; i < SL_ARRAY_LEN(dts); i++)
        for (int red = SL_REDUCE_SUM; red <= SL_REDUCE_MIN; red++) {
          size_t count =
              sl__rng_below(&rng, 4) == 0 ? 0 : sl__rng_below(&rng, 40);
          ccase *cs = calloc(1, sizeof *cs);
          case_make(cs, n, (sl__dev_coll_op)op, dts[i], (sl_reduce_op)red,
                    count, &rng);
          sl__dev_rank_args a[FMAX];
          case_args(cs, a, cs->in, cs->out, NULL);
          sl__dev_coll_desc d = case_desc(cs, "step");
          if (sl__dev_comm_launch(c, &d, a))
            fail_msg("launch: %s", sl_last_error());
          launches++;
          case_check(cs, cs->out, "fake");
          case_free(cs);
          free(cs);
        }
    /* In place all-reduce. */
    int32_t v[FMAX][3];
    sl__dev_rank_args a[FMAX];
    for (int k = 0; k < n; k++) {
      v[k][0] = k, v[k][1] = 1, v[k][2] = -k;
      a[k] = rargs(v[k], v[k], STREAM(k));
    }
    sl__dev_coll_desc d = {"inplace", SL__DEV_ALL_REDUCE, SL_DTYPE_I32,
                           SL_REDUCE_SUM, 3};
    assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_OK);
    launches++;
    for (int k = 0; k < n; k++)
      assert_true(v[k][0] == n * (n - 1) / 2 && v[k][1] == n &&
                  v[k][2] == -n * (n - 1) / 2);
    sl__dev_comm_destroy(c);
  }
  assert_int_equal(f->mismatches, 0);
  assert_int_equal(f->outside_group, 0);
  /* One group per launch, plus one per creation and per finalisation. */
  assert_int_equal(f->group_starts, launches + 2 * 5);
  assert_int_equal(f->finalizes, 15);
  assert_int_equal(f->destroys, 15);
  assert_int_equal(f->aborts, 0);
  sl__dev_coll_destroy(e);
  fake_free(f);
}

static void test_launch_checks(void **state) {
  (void)state;
  fake *f = fake_new();
  sl__dev_coll *e = engine(f);
  sl__dev_comm *c = local_comm(e, "chk", 2);
  unsigned char b[2][64];
  sl__dev_rank_args a[2] = {rargs(b[0], b[0] + 8, STREAM(0)),
                            rargs(b[1], b[1] + 32, STREAM(1))};
  sl__dev_coll_desc d = {"a2a", SL__DEV_ALL_TO_ALL, SL_DTYPE_I32, 0, 2};
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "rank 0: input and output overlap"));
  a[0].out = b[0] + 16;
  a[1].stream = NULL;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "rank 1: no stream"));
  a[1].stream = STREAM(1);
  a[1].in = NULL;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EINVAL);
  a[1].in = b[1];
  d.count = SIZE_MAX / 2;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "overflow"));
  d.op = (sl__dev_coll_op)9;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EINVAL);

  /* An exchange whose sends and receives do not pair up would hang. */
  sl__dev_send s0[2] = {{1, b[0], 4}, {1, b[0] + 4, 8}};
  sl__dev_recv r1[2] = {{0, b[1], 8}, {0, b[1] + 8, 4}};
  sl__dev_rank_args x[2] = {{.stream = STREAM(0), .n_send = 2, .send = s0},
                            {.stream = STREAM(1), .n_recv = 2, .recv = r1}};
  sl__dev_coll_desc xd = {"swap", SL__DEV_EXCHANGE, 0, 0, 0};
  assert_int_equal(sl__dev_comm_launch(c, &xd, x), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "from rank 0 to rank 1 do not pair"));
  assert_non_null(strstr(sl_last_error(), "exchange 'swap' on group 'chk'"));
  r1[0].bytes = 4, r1[1].bytes = 9;
  assert_int_equal(sl__dev_comm_launch(c, &xd, x), SL_EINVAL);
  r1[1].bytes = 8;
  s0[1].peer = 2;
  assert_int_equal(sl__dev_comm_launch(c, &xd, x), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "send 1 to no rank"));
  s0[1].peer = 1;
  /* Zero-byte entries are skipped on both sides. */
  sl__dev_send s0z[3] = {{1, NULL, 0}, {1, b[0], 4}, {1, b[0] + 4, 8}};
  x[0].n_send = 3, x[0].send = s0z;
  memset(b[0], 7, 12);
  assert_int_equal(sl__dev_comm_launch(c, &xd, x), SL_OK);
  assert_int_equal(b[1][11], 7);
  assert_int_equal(f->p2p, 4);
  assert_int_equal(f->mismatches, 0);
  assert_int_equal(sl__dev_comm_check(c), SL_OK);
  sl__dev_comm_destroy(c);
  sl__dev_coll_destroy(e);
  fake_free(f);
}

/* ---- processes, simulated by threads sharing the fake and a store ------ */

typedef struct proc {
  fake *f;
  memkv *kv;
  int node, n;
  uint64_t job, timeout_ms, delay_ms;
  sl__dev_member m[FMAX];
  sl_status st;
  char msg[512];
  int nlocal, rank[FMAX];
  int32_t buf[FMAX][4];
} proc;

/* Creates the group through a cache, then all-reduces {rank, 1, rank^2, 0}
 * over its local ranks. No cmocka calls: this runs on other threads. */
static void *proc_main(void *arg) {
  proc *p = arg;
  if (p->delay_ms) sl__sleep_ns(p->delay_ms * 1000000u);
  sl__dev_coll *e = NULL;
  sl__dev_comm_cache *cc = NULL;
  sl__dev_kv kv = {kv_put, kv_get, p->kv};
  sl__dev_comm_cache_config cfg = {NULL, p->node, p->job, &kv, p->timeout_ms};
  sl__dev_comm *c = NULL;
  p->st = sl__dev_coll_create(&fake_vt, p->f, &e);
  cfg.engine = e;
  if (p->st == SL_OK) p->st = sl__dev_comm_cache_create(&cfg, &cc);
  if (p->st == SL_OK) p->st = sl__dev_comm_cache_get(cc, p->n, p->m, &c);
  if (p->st == SL_OK) {
    sl__dev_rank_args a[FMAX];
    p->nlocal = sl__dev_comm_nlocal(c);
    for (int i = 0; i < p->nlocal; i++) {
      int r = p->rank[i] = sl__dev_comm_rank(c, i);
      p->buf[i][0] = r, p->buf[i][1] = 1, p->buf[i][2] = r * r;
      p->buf[i][3] = 0;
      a[i] = rargs(p->buf[i], p->buf[i], STREAM(i));
    }
    sl__dev_coll_desc d = {"sum", SL__DEV_ALL_REDUCE, SL_DTYPE_I32,
                           SL_REDUCE_SUM, 4};
    p->st = sl__dev_comm_launch(c, &d, a);
  }
  if (p->st != SL_OK) snprintf(p->msg, sizeof p->msg, "%s", sl_last_error());
  sl__dev_comm_cache_destroy(cc);
  sl__dev_coll_destroy(e);
  return NULL;
}

static void run_procs(proc *p, int np) {
  sl__thread th[FMAX];
  memset(th, 0, sizeof th);
  for (int i = 0; i < np; i++)
    assert_int_equal(sl__thread_start(&th[i], proc_main, &p[i], "proc"), 0);
  for (int i = 0; i < np; i++)
    sl__thread_join(&th[i]);
}

static void check_procs(proc *p, int np, int n) {
  int32_t sum = n * (n - 1) / 2, sq = 0;
  for (int r = 0; r < n; r++)
    sq += r * r;
  for (int i = 0; i < np; i++) {
    if (p[i].st != SL_OK) fail_msg("node %d: %s", p[i].node, p[i].msg);
    for (int k = 0; k < p[i].nlocal; k++)
      assert_true(p[i].buf[k][0] == sum && p[i].buf[k][1] == n &&
                  p[i].buf[k][2] == sq && p[i].buf[k][3] == 0);
  }
}

/* Rank 0's process puts the id, the others wait for it (here they start
 * first), and every process ends up in the same communicator. */
static void test_id_exchange(void **state) {
  (void)state;
  fake *f = fake_new();
  memkv kv;
  memkv_init(&kv);
  proc p[3];
  memset(p, 0, sizeof p);
  for (int i = 0; i < 3; i++) {
    p[i] = (proc){.f = f,
                  .kv = &kv,
                  .node = i,
                  .n = 3,
                  .job = 7,
                  .timeout_ms = 10000,
                  .delay_ms = i == 0 ? 30 : 0};
    for (int k = 0; k < 3; k++)
      p[i].m[k] = (sl__dev_member){k, 0};
  }
  run_procs(p, 3);
  check_procs(p, 3, 3);
  assert_int_equal(kv.puts, 1);
  assert_int_equal(kv.gets, 2);
  assert_string_equal(kv.key[0], "sluice/dev_coll/7/0:0,1:0,2:0");
  assert_int_equal(kv.len[0], SL__DEV_COLL_ID_MAX);

  /* Two processes with two devices each, ranks interleaved between them:
   * each process initialises and launches its two ranks in one group. */
  for (int i = 0; i < 2; i++) {
    p[i] = (proc){.f = f,
                  .kv = &kv,
                  .node = i,
                  .n = 4,
                  .job = 7,
                  .timeout_ms = 10000,
                  .delay_ms = i == 0 ? 20 : 0};
    p[i].m[0] = (sl__dev_member){0, 0};
    p[i].m[1] = (sl__dev_member){1, 0};
    p[i].m[2] = (sl__dev_member){0, 1};
    p[i].m[3] = (sl__dev_member){1, 1};
  }
  run_procs(p, 2);
  check_procs(p, 2, 4);
  assert_int_equal(p[0].nlocal, 2);
  assert_true(p[0].rank[0] == 0 && p[0].rank[1] == 2);
  assert_true(p[1].rank[0] == 1 && p[1].rank[1] == 3);
  /* A second group: a key of its own. */
  assert_int_equal(kv.n, 2);
  assert_string_equal(kv.key[1], "sluice/dev_coll/7/0:0,1:0,0:1,1:1");
  assert_int_equal(f->mismatches, 0);
  assert_int_equal(f->outside_group, 0);
  memkv_fini(&kv);
  fake_free(f);
}

static void test_id_timeout(void **state) {
  (void)state;
  fake *f = fake_new();
  memkv kv;
  memkv_init(&kv);
  sl__dev_coll *e = engine(f);
  sl__dev_kv k = {kv_put, kv_get, &kv};
  sl__dev_comm_cache_config cfg = {e, 1, 9, &k, 50};
  sl__dev_comm_cache *cc = NULL;
  assert_int_equal(sl__dev_comm_cache_create(&cfg, &cc), SL_OK);
  sl__dev_member m[2] = {{0, 0}, {1, 0}};
  sl__dev_comm *c = NULL;
  uint64_t t0 = sl__now_ns();
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, m, &c), SL_ETIMEOUT);
  assert_true(sl__now_ns() - t0 >= 50000000u);
  const char *msg = sl_last_error();
  assert_non_null(strstr(msg, "device group '0:0,1:0'"));
  assert_non_null(strstr(msg, "'sluice/dev_coll/9/0:0,1:0' after 50 ms"));
  assert_non_null(strstr(msg, "rank 0"));
  assert_null(c);
  /* The failure is kept: the key must not be used twice. */
  t0 = sl__now_ns();
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, m, &c), SL_ETIMEOUT);
  assert_true(sl__now_ns() - t0 < 40000000u);
  assert_non_null(strstr(sl_last_error(), "after 50 ms"));
  assert_int_equal(kv.gets, 1);
  assert_int_equal(sl__dev_comm_cache_count(cc), 0);
  assert_int_equal(f->inits, 0);
  /* A value that is not an id. */
  kv_put(&kv, "sluice/dev_coll/9/0:0,1:0,0:1", "short", 5);
  sl__dev_member m3[3] = {{0, 0}, {1, 0}, {0, 1}};
  assert_int_equal(sl__dev_comm_cache_get(cc, 3, m3, &c), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "has 5 bytes"));
  sl__dev_comm_cache_destroy(cc);
  sl__dev_coll_destroy(e);
  memkv_fini(&kv);
  fake_free(f);
}

static void test_keys(void **state) {
  (void)state;
  char a[SL__CP_MAX_NAME + 1], b[SL__CP_MAX_NAME + 1];
  assert_int_equal(sl__dev_coll_key(3, "0:0,0:1", a, sizeof a), SL_OK);
  assert_string_equal(a, "sluice/dev_coll/3/0:0,0:1");
  assert_int_equal(sl__dev_coll_key(4, "0:0,0:1", b, sizeof b), SL_OK);
  assert_string_not_equal(a, b); /* another job */
  assert_int_equal(sl__dev_coll_key(3, "0:1,0:0", b, sizeof b), SL_OK);
  assert_string_not_equal(a, b); /* another group */
  /* Long names are hashed into a key that fits, and still differ. */
  char big[600];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  assert_int_equal(sl__dev_coll_key(3, big, a, sizeof a), SL_OK);
  assert_true(strlen(a) <= SL__CP_MAX_NAME);
  assert_non_null(strstr(a, "sluice/dev_coll/3/#"));
  big[10] = 'y';
  assert_int_equal(sl__dev_coll_key(3, big, b, sizeof b), SL_OK);
  assert_string_not_equal(a, b);
  assert_int_equal(sl__dev_coll_key(3, "", a, sizeof a), SL_EINVAL);
  assert_int_equal(sl__dev_coll_key(3, "g", a, 16), SL_EINVAL);
  /* The control plane's adapter is a plain table over the client. */
  sl__dev_kv cp = sl__dev_kv_cp(NULL);
  assert_non_null(cp.put);
  assert_non_null(cp.get);
}

typedef struct getter {
  sl__dev_comm_cache *cc;
  sl__dev_comm *got;
  sl_status st;
} getter;

static void *get_main(void *arg) {
  getter *g = arg;
  sl__dev_member m[3] = {{0, 2}, {0, 3}, {0, 4}};
  g->st = sl__dev_comm_cache_get(g->cc, 3, m, &g->got);
  return NULL;
}

static void test_cache(void **state) {
  (void)state;
  fake *f = fake_new();
  f->yield = true; /* widen the window between creators */
  sl__dev_coll *e = engine(f);
  sl__dev_comm_cache_config cfg = {e, 0, 1, NULL, 0};
  sl__dev_comm_cache *cc = NULL;
  assert_int_equal(sl__dev_comm_cache_create(&cfg, &cc), SL_OK);
  sl__dev_member m[2] = {{0, 0}, {0, 1}}, r[2] = {{0, 1}, {0, 0}};
  sl__dev_comm *c1 = NULL, *c2 = NULL, *c3 = NULL;
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, m, &c1), SL_OK);
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, m, &c2), SL_OK);
  assert_ptr_equal(c1, c2);
  assert_string_equal(sl__dev_comm_name(c1), "0:0,0:1");
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, r, &c3), SL_OK);
  assert_ptr_not_equal(c1, c3); /* another order is another group */
  assert_int_equal(sl__dev_comm_device(c3, 0), 1);
  assert_int_equal(sl__dev_comm_cache_count(cc), 2);
  assert_int_equal(f->inits, 4);
  sl__dev_member far[1] = {{1, 0}}, dup[2] = {{0, 0}, {0, 0}};
  assert_int_equal(sl__dev_comm_cache_get(cc, 1, far, &c3), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no member on node 0"));
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, dup, &c3), SL_EINVAL);
  sl__dev_member span[2] = {{0, 0}, {1, 0}}; /* no store configured */
  assert_int_equal(sl__dev_comm_cache_get(cc, 2, span, &c3), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "no key-value store"));
  assert_null(c3);

  /* Four threads asking for one new group get one communicator. */
  getter g[4];
  sl__thread th[4];
  memset(th, 0, sizeof th);
  for (int i = 0; i < 4; i++) {
    g[i] = (getter){cc, NULL, SL_EINTERNAL};
    assert_int_equal(sl__thread_start(&th[i], get_main, &g[i], "get"), 0);
  }
  for (int i = 0; i < 4; i++)
    sl__thread_join(&th[i]);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(g[i].st, SL_OK);
    assert_ptr_equal(g[i].got, g[0].got);
  }
  assert_int_equal(f->inits, 7);
  assert_int_equal(sl__dev_comm_cache_count(cc), 3);
  sl__dev_comm_cache_abort(cc);
  assert_int_equal(sl__dev_comm_check(c1), SL_EABORTED);
  sl__dev_comm_cache_destroy(cc);
  assert_int_equal(f->aborts, 7);
  assert_int_equal(f->destroys, 0);
  sl__dev_coll_destroy(e);
  fake_free(f);
}

/* ---- launch order under concurrent callers ----------------------------- */

#define CONC_N 4
#define CONC_THREADS 6
#define CONC_LAUNCHES 40

typedef struct launcher {
  sl__dev_comm *c;
  int id, errors;
  char msg[256];
} launcher;

/* Each thread launches its own mix of ops with its own count (so launches
 * of different threads look different to the fake) and checks results. */
static void *launch_main(void *arg) {
  launcher *L = arg;
  size_t count = 1 + (size_t)L->id, n = CONC_N;
  int32_t in[CONC_N][CONC_N * 8], out[CONC_N][CONC_N * 8];
  for (int i = 0; i < CONC_LAUNCHES; i++) {
    sl__dev_coll_op op = (sl__dev_coll_op)((L->id + i) % 4);
    sl__dev_rank_args a[CONC_N];
    for (int k = 0; k < CONC_N; k++) {
      for (size_t j = 0; j < n * count; j++)
        in[k][j] = (int32_t)(k * 100 + (int)j + i);
      a[k] = rargs(in[k], out[k], STREAM(k));
    }
    sl__dev_coll_desc d = {"conc", op, SL_DTYPE_I32, SL_REDUCE_MAX, count};
    if (sl__dev_comm_launch(L->c, &d, a) != SL_OK) {
      snprintf(L->msg, sizeof L->msg, "%s", sl_last_error());
      L->errors++;
      continue;
    }
    for (int k = 0; k < CONC_N; k++)
      for (size_t j = 0; j < (op == SL__DEV_REDUCE_SCATTER ? count
                              : op == SL__DEV_ALL_REDUCE   ? count
                                                           : n * count);
           j++) {
        int32_t want;
        size_t part = j / count, off = j % count;
        switch (op) {
        case SL__DEV_ALL_REDUCE: want = (int32_t)(300 + j + (size_t)i); break;
        case SL__DEV_REDUCE_SCATTER:
          want = (int32_t)(300 + (size_t)k * count + j + (size_t)i);
          break;
        case SL__DEV_ALL_GATHER:
          want = (int32_t)(part * 100 + off + (size_t)i);
          break;
        default: /* all-to-all: part `part` of rank part's input */
          want = (int32_t)(part * 100 + (size_t)k * count + off + (size_t)i);
        }
        if (out[k][j] != want) L->errors++;
      }
  }
  return NULL;
}

static void test_concurrent_launch_order(void **state) {
  (void)state;
  fake *f = fake_new();
  f->yield = true; /* a yield in every call: interleavings are likely */
  sl__dev_coll *e = engine(f);
  sl__dev_comm *c = local_comm(e, "conc", CONC_N);
  launcher L[CONC_THREADS];
  sl__thread th[CONC_THREADS];
  memset(th, 0, sizeof th);
  for (int i = 0; i < CONC_THREADS; i++) {
    L[i] = (launcher){.c = c, .id = i};
    assert_int_equal(sl__thread_start(&th[i], launch_main, &L[i], "launch"), 0);
  }
  for (int i = 0; i < CONC_THREADS; i++)
    sl__thread_join(&th[i]);
  for (int i = 0; i < CONC_THREADS; i++)
    if (L[i].errors)
      fail_msg("thread %d: %d errors %s", i, L[i].errors, L[i].msg);
  /* Every rank saw the same sequence of operations. */
  assert_int_equal(f->mismatches, 0);
  assert_int_equal(f->outside_group, 0);
  clique *q = f->cliques;
  assert_non_null(q);
  assert_null(q->next);
  assert_true(q->nlog[0] >= CONC_THREADS * CONC_LAUNCHES);
  for (int r = 1; r < CONC_N; r++) {
    assert_int_equal(q->nlog[r], q->nlog[0]);
    /* all-to-all logs carry the peer, the same list on every rank */
    assert_memory_equal(q->log[r], q->log[0], (size_t)q->nlog[0] * sizeof(int));
  }
  sl__dev_comm_destroy(c);
  sl__dev_coll_destroy(e);
  fake_free(f);
}

/* ---- errors ------------------------------------------------------------- */

static void test_errors(void **state) {
  (void)state;
  fake *f = fake_new();
  sl__dev_coll *e = engine(f);
  int32_t b[3][6];
  sl__dev_rank_args a[4];
  for (int k = 0; k < 3; k++)
    a[k] = rargs(b[k], b[k], STREAM(k));

  /* A backend failure names the collective, the group and the rank, and
   * poisons the communicator: its ranks may now disagree. */
  sl__dev_comm *c = local_comm(e, "errs", 3);
  f->fail_entry = "all_gather", f->fail_nth = 2;
  sl__dev_coll_desc d = {"gather7", SL__DEV_ALL_GATHER, SL_DTYPE_I32, 0, 2};
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_ENCCL);
  const char *msg = sl_last_error();
  assert_non_null(strstr(msg, "all_gather 'gather7' (i32, 2 elements)"));
  assert_non_null(strstr(msg, "on group 'errs' (fake, 3 ranks)"));
  assert_non_null(strstr(msg, "rank 1: fake: injected all_gather failure"));
  assert_int_equal(t_depth, 0); /* the group was closed */
  f->fail_entry = NULL;
  assert_int_equal(sl__dev_comm_check(c), SL_ENCCL);
  assert_non_null(strstr(sl_last_error(), "device group 'errs' failed"));
  d.op = SL__DEV_ALL_REDUCE;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_ENCCL);
  assert_non_null(strstr(sl_last_error(), "failed earlier"));
  assert_non_null(strstr(sl_last_error(), "injected all_gather"));
  sl__dev_comm_destroy(c);

  /* group_end failing, and group_start failing (nothing issued: usable). */
  c = local_comm(e, "ends", 3);
  f->fail_entry = "group_start", f->fail_nth = 1, f->fail_calls = 0;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_ENCCL);
  assert_int_equal(sl__dev_comm_check(c), SL_OK);
  f->fail_entry = "group_end", f->fail_nth = 1, f->fail_calls = 0;
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_ENCCL);
  assert_non_null(strstr(sl_last_error(), "all_reduce 'gather7'"));
  assert_non_null(strstr(sl_last_error(), "injected group_end"));
  assert_int_equal(sl__dev_comm_check(c), SL_ENCCL);
  f->fail_entry = NULL;
  sl__dev_comm_destroy(c);

  /* A failed init leaves nothing behind: the ranks made are aborted. */
  int aborts = f->aborts;
  f->fail_entry = "comm_init", f->fail_nth = 3, f->fail_calls = 0;
  int dev[4] = {0, 1, 2, 3};
  assert_int_equal(sl__dev_comm_create_local(e, "bad", 4, dev, &c), SL_ENCCL);
  assert_null(c);
  assert_non_null(
      strstr(sl_last_error(), "device group 'bad' (fake, 4 ranks)"));
  assert_non_null(strstr(sl_last_error(), "rank 2 on device 2"));
  assert_int_equal(f->aborts, aborts + 2);
  assert_int_equal(t_depth, 0);
  f->fail_entry = NULL;

  /* Asynchronous errors, then abort. */
  c = local_comm(e, "async", 3);
  f->async_error = true;
  assert_int_equal(sl__dev_comm_check(c), SL_ENCCL);
  assert_non_null(strstr(sl_last_error(), "device group 'async', rank 0"));
  assert_non_null(strstr(sl_last_error(), "remote rank was lost"));
  f->async_error = false;
  int destroys = f->destroys;
  aborts = f->aborts;
  sl__dev_comm_abort(c);
  sl__dev_comm_abort(c); /* once */
  assert_int_equal(f->aborts, aborts + 3);
  assert_int_equal(sl__dev_comm_launch(c, &d, a), SL_EABORTED);
  assert_non_null(strstr(sl_last_error(), "on group 'async'"));
  assert_int_equal(sl__dev_comm_check(c), SL_EABORTED);
  sl__dev_comm_destroy(c);
  assert_int_equal(f->destroys, destroys); /* aborted ranks are gone */
  sl__dev_comm_destroy(NULL);
  sl__dev_comm_abort(NULL);
  sl__dev_coll_destroy(e);
  fake_free(f);
}

/* ---- NCCL on the GPUs present ------------------------------------------ */

static void test_nccl_gpu(void **state) {
  (void)state;
  if (!sl_build_has_nccl()) {
    printf("skipped: this build of sluice has no CUDA/NCCL\n");
    skip();
  }
  int ndev = sl_device_count(SL_DEVICE_CUDA);
  if (ndev < 1) {
    printf("skipped: no GPU (the CUDA runtime sees no device)\n");
    skip();
  }
  int n = ndev > 8 ? 8 : ndev;
  sl_rng rng = {seed_of(23, "nccl_gpu")};
  sl__dev_coll *e = NULL;
  if (sl__dev_coll_nccl_open(&e)) fail_msg("%s", sl_last_error());
  sl__device *dev[8];
  sl__stream *s[8];
  int devs[8];
  for (int k = 0; k < n; k++) {
    devs[k] = k;
    if (sl__device_open(SL_DEVICE_CUDA, k, &dev[k]) ||
        sl__device_stream_create(dev[k], &s[k]))
      fail_msg("cuda:%d: %s", k, sl_last_error());
  }
  sl__dev_comm *c = NULL;
  if (sl__dev_comm_create_local(e, "gpus", n, devs, &c))
    fail_msg("%s", sl_last_error());
  printf("nccl: %d GPU%s\n", n, n == 1 ? "" : "s");
  static const struct {
    sl_dtype dt;
    sl_reduce_op red;
  } kinds[] = {{SL_DTYPE_F32, SL_REDUCE_SUM}, {SL_DTYPE_I32, SL_REDUCE_MAX},
               {SL_DTYPE_I64, SL_REDUCE_MIN}, {SL_DTYPE_F64, SL_REDUCE_SUM},
               {SL_DTYPE_U8, SL_REDUCE_SUM},  {SL_DTYPE_BOOL, SL_REDUCE_SUM}};
  static const size_t counts[] = {1, 1000, (1u << 20) + 3};
  for (int op = SL__DEV_ALL_REDUCE; op <= SL__DEV_EXCHANGE; op++)
    for (size_t ki = 0; ki < SL_ARRAY_LEN(kinds); ki++)
      for (size_t ci = 0; ci < SL_ARRAY_LEN(counts); ci++) {
        if (op == SL__DEV_EXCHANGE && (ki > 0 || ci > 0)) continue;
        ccase *cs = calloc(1, sizeof *cs);
        case_make(cs, n, (sl__dev_coll_op)op, kinds[ki].dt, kinds[ki].red,
                  counts[ci], &rng);
        unsigned char *din[8], *dout[8], *got[8];
        for (int k = 0; k < n; k++) {
          got[k] = calloc(1, cs->outb + 1);
          if (sl__device_alloc(dev[k], cs->inb, (void **)&din[k]) ||
              sl__device_alloc(dev[k], cs->outb, (void **)&dout[k]) ||
              sl__device_memcpy_h2d(dev[k], din[k], cs->in[k], cs->inb, s[k]) ||
              sl__device_memset(dev[k], dout[k], 0xee, cs->outb, s[k]))
            fail_msg("cuda:%d: %s", k, sl_last_error());
          /* The exchange's lists point into host buffers: move them. */
          for (int i = 0; i < cs->n_send[k]; i++)
            if (cs->send[k][i].bytes)
              cs->send[k][i].buf =
                  din[k] +
                  ((const unsigned char *)cs->send[k][i].buf - cs->in[k]);
          for (int i = 0; i < cs->n_recv[k]; i++)
            if (cs->recv[k][i].bytes)
              cs->recv[k][i].buf =
                  dout[k] + ((unsigned char *)cs->recv[k][i].buf - cs->out[k]);
        }
        sl__dev_rank_args a[8];
        case_args(cs, a, din, dout, s);
        sl__dev_coll_desc d = case_desc(cs, "gpu");
        if (sl__dev_comm_launch(c, &d, a)) fail_msg("%s", sl_last_error());
        for (int k = 0; k < n; k++)
          if (sl__device_memcpy_d2h(dev[k], got[k], dout[k], cs->outb, s[k]) ||
              sl__device_stream_synchronize(dev[k], s[k]))
            fail_msg("cuda:%d: %s", k, sl_last_error());
        if (sl__dev_comm_check(c)) fail_msg("%s", sl_last_error());
        case_check(cs, got, "nccl");
        for (int k = 0; k < n; k++) {
          sl__device_free(dev[k], din[k]);
          sl__device_free(dev[k], dout[k]);
          free(got[k]);
        }
        case_free(cs);
        free(cs);
      }
  sl__dev_comm_destroy(c);
  for (int k = 0; k < n; k++) {
    sl__device_stream_destroy(dev[k], s[k]);
    sl__device_close(dev[k]);
  }
  sl__dev_coll_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_map),
      cmocka_unit_test(test_create_checks),
      cmocka_unit_test(test_local_collectives),
      cmocka_unit_test(test_launch_checks),
      cmocka_unit_test(test_id_exchange),
      cmocka_unit_test(test_id_timeout),
      cmocka_unit_test(test_keys),
      cmocka_unit_test(test_cache),
      cmocka_unit_test(test_concurrent_launch_order),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_nccl_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
