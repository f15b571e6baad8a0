/* Memory planned by a compiler: sl_actor_graph_add_block and
 * sl_actor_graph_place, the registers placed in a block, and SLUICE_MEMCHECK —
 * checksums that catch a plan whose shared registers are live at once, poison
 * that a reader which reads after handing a register back sees. */
#include "actor_helpers.h"

/* ---- acts whose data can be checked ----------------------------------- */

#define NV 5 /* int64s per register: 40 bytes, one 64-byte stride */

/* Value i of what the actor tagged `tag` writes for piece p. */
static int64_t val(int64_t piece, int tag, int i) {
  return piece * 100 + tag * 10 + i;
}

typedef struct ck {
  int tag;        /* written into output 0; 0: nothing */
  int in_tag;     /* expected in input 0; 0: no input */
  int64_t next;   /* next piece expected */
  int64_t errors; /* input pieces that were not what their producer wrote */
  const void *in_data, *out_data; /* input 0 and output 0 at the last firing */
  /* act_keep: input 0 of the previous firing, kept after handing it back */
  const unsigned char *kept;
  int64_t kept_piece, seen_poison, seen_old;
  int64_t wrong; /* act_both: pieces whose first input was not k1's */
} ck;

/* Checks input 0 (all of it, before writing: an output may overlay it),
 * then writes output 0. */
static sl_status act_val(sl_act *a) {
  ck *c = a->ctx;
  if (c->in_tag) {
    const int64_t *in = a->in[0]->data;
    c->in_data = in;
    if (a->piece != c->next || a->in[0]->piece != a->piece) c->errors++;
    for (int i = 0; i < NV; i++)
      if (in[i] != val(a->piece, c->in_tag, i)) c->errors++;
    c->next = a->piece + 1;
  }
  if (c->tag && a->n_out > 0) {
    int64_t *out = a->out[0]->data;
    c->out_data = out;
    for (int i = 0; i < NV; i++)
      out[i] = val(a->piece, c->tag, i);
  }
  return SL_OK;
}

/* act_val, and looks at the register it read at its previous firing, now
 * handed back: all 0xff (poisoned), or still the previous piece's values. */
static sl_status act_keep(sl_act *a) {
  ck *c = a->ctx;
  act_val(a);
  if (c->kept && c->kept != a->in[0]->data) {
    bool poison = true, old = true;
    for (int j = 0; j < NV * 8; j++)
      poison = poison && c->kept[j] == 0xff;
    for (int i = 0; i < NV; i++) {
      int64_t v;
      memcpy(&v, c->kept + 8 * i, 8);
      old = old && v == val(c->kept_piece, c->in_tag, i);
    }
    if (poison)
      c->seen_poison++;
    else if (old)
      c->seen_old++;
    else
      c->errors++;
  }
  c->kept = a->in[0]->data;
  c->kept_piece = a->piece;
  return SL_OK;
}

static int32_t out_named(sl_actor_graph *p, sl_actor_id producer,
                         const char *name, int32_t count, size_t bytes,
                         int32_t device) {
  sl_regst_desc d = {name, count, bytes, device, 0, NULL, NULL};
  int32_t r = -1;
  if (sl_actor_graph_add_output(p, producer, &d, &r) != SL_OK)
    fail_msg("add_output %s: %s", name, sl_last_error());
  return r;
}

static int32_t block_ok(sl_actor_graph *p, int32_t device, size_t bytes) {
  int32_t b = 0;
  if (sl_actor_graph_add_block(p, 0, device, bytes, &b) != SL_OK)
    fail_msg("add_block: %s", sl_last_error());
  return b;
}

static void place_ok(sl_actor_graph *p, int32_t desc, int32_t block,
                     size_t off) {
  if (sl_actor_graph_place(p, desc, block, off) != SL_OK)
    fail_msg("place: %s", sl_last_error());
}

/* Creates (SLUICE_MEMCHECK=1 when memcheck) and runs a job. */
static sl_status run_mc(sl_actor_graph *p, bool memcheck, sl_job **job) {
  if (memcheck)
    setenv("SLUICE_MEMCHECK", "1", 1);
  else
    unsetenv("SLUICE_MEMCHECK");
  sl_status st = sl_job_create(p, NULL, job);
  unsetenv("SLUICE_MEMCHECK");
  if (st != SL_OK) fail_msg("job_create: %s", sl_last_error());
  return sl_job_run(*job);
}

#define EXPECT_FAIL(call, status, needle)                                      \
  do {                                                                         \
    assert_int_equal((call), (status));                                        \
    if (!strstr(sl_last_error(), (needle)))                                    \
      fail_msg("'%s' lacks '%s'", sl_last_error(), (needle));                  \
  } while (0)

/* ---- 1. validation ----------------------------------------------------- */

static void test_place_validation(void **state) {
  (void)state;
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 1, 0, NULL, NULL, 4);
  int32_t r100 = out_named(p, src, "r100", 1, 100, -1); /* device 1 */
  int32_t r64x3 = out_named(p, src, "r64x3", 3, 64, 2);
  int32_t empty = out_named(p, src, "empty", 2, 0, -1);
  int32_t huge = out_named(p, src, "huge", 1, SIZE_MAX - 10, -1);
  int32_t n = sl_actor_graph_regst_count(p);
  assert_int_equal(n, 4);

  /* Blocks: node or device out of range, *out 0. */
  int32_t b = 77;
  EXPECT_FAIL(sl_actor_graph_add_block(p, SL_ACTOR_MAX_NODES, 0, 64, &b),
              SL_EINVAL, "block");
  assert_int_equal(b, 0);
  b = 77;
  EXPECT_FAIL(sl_actor_graph_add_block(p, 0, -1, 64, &b), SL_EINVAL,
              "device -1");
  assert_int_equal(b, 0);
  b = 77;
  EXPECT_FAIL(
      sl_actor_graph_add_block(p, 0, (int32_t)SL_ACTOR_MAX_DEVICES, 64, &b),
      SL_EINVAL, "block");
  assert_int_equal(b, 0);
  int32_t b128 = block_ok(p, 1, 128), b127 = block_ok(p, 1, 127);
  assert_int_equal(b128, 1);
  assert_int_equal(b127, 2);
  int32_t b_node1 = 0, b_last = 0;
  assert_int_equal(sl_actor_graph_add_block(p, 1, 1, 1024, &b_node1), SL_OK);
  assert_int_equal(b_node1, 3);
  int32_t b_dev0 = block_ok(p, 0, 1024), b_dev2 = block_ok(p, 2, 256);
  int32_t b_max = block_ok(p, 1, SIZE_MAX);
  assert_int_equal(sl_actor_graph_add_block(p, SL_ACTOR_MAX_NODES - 1,
                                            (int32_t)SL_ACTOR_MAX_DEVICES - 1,
                                            64, &b_last),
                   SL_OK);
  assert_int_equal(b_last, 7);

  /* Unknown descriptor or block. */
  EXPECT_FAIL(sl_actor_graph_place(p, -1, b128, 0), SL_ENOTFOUND,
              "descriptor -1");
  EXPECT_FAIL(sl_actor_graph_place(p, n, b128, 0), SL_ENOTFOUND,
              "descriptor 4");
  EXPECT_FAIL(sl_actor_graph_place(p, r100, 0, 0), SL_ENOTFOUND, "block 0");
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_last + 1, 0), SL_ENOTFOUND,
              "block 8");
  EXPECT_FAIL(sl_actor_graph_place(p, r100, -1, 0), SL_ENOTFOUND, "block -1");

  /* The block must be on the producer's node and the descriptor's device
   * (the producer's when -1, else the one it names). */
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_node1, 0), SL_EINVAL, "'r100'");
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_dev0, 0), SL_EINVAL, "'r100'");
  EXPECT_FAIL(sl_actor_graph_place(p, r64x3, b128, 0), SL_EINVAL, "'r64x3'");
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_last, 0), SL_EINVAL, "'r100'");

  /* Fitting: each register takes a 64-rounded stride. */
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b127, 0), SL_EINVAL, "do not fit");
  place_ok(p, r100, b128, 0);
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b128, 64), SL_EINVAL, "offset 64");
  place_ok(p, r64x3, b_dev2, 0);
  place_ok(p, r64x3, b_dev2, 64); /* 64 + 3 * 64 == 256 */
  /* One register would fit at 128, three do not. */
  EXPECT_FAIL(sl_actor_graph_place(p, r64x3, b_dev2, 128), SL_EINVAL,
              "'r64x3'");
  EXPECT_FAIL(sl_actor_graph_place(p, r64x3, b_dev2, 256), SL_EINVAL,
              "'r64x3'");
  place_ok(p, empty, b128, 128); /* no bytes: fits anywhere inside */

  /* Offsets: multiples of 64, and no overflow near SIZE_MAX. */
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_max, 32), SL_EINVAL, "offset 32");
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_max, 1), SL_EINVAL, "'r100'");
  place_ok(p, r100, b_max, 64);
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_max, SIZE_MAX - 63), SL_EINVAL,
              "'r100'"); /* 63 bytes left */
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b_max, SIZE_MAX - 127), SL_EINVAL,
              "'r100'"); /* 127 left: one 128-byte stride does not fit */
  place_ok(p, r100, b_max, SIZE_MAX - 191); /* 191 left: it fits */
  EXPECT_FAIL(sl_actor_graph_place(p, r100, b128, SIZE_MAX - 63), SL_EINVAL,
              "'r100'");
  /* A register whose stride overflows fits nowhere. */
  EXPECT_FAIL(sl_actor_graph_place(p, huge, b_max, 0), SL_EINVAL, "'huge'");
  sl_actor_graph_destroy(p);

  /* Frozen once a job was created; the placed plan runs. */
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  src = add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, NULL, NULL, 10);
  sl_actor_id sink =
      add_actor(p, "sink", SL_ACTOR_SINK, 0, 0, 0, NULL, NULL, 0);
  int32_t r = out_named(p, src, "r", 2, 8, -1);
  connect_to(p, r, sink);
  int32_t blk = block_ok(p, 0, 128);
  place_ok(p, r, blk, 0);
  sl_job *job;
  assert_int_equal(sl_job_create(p, NULL, &job), SL_OK);
  b = 77;
  EXPECT_FAIL(sl_actor_graph_add_block(p, 0, 0, 64, &b), SL_ESTATE,
              "job was created");
  assert_int_equal(b, 0);
  EXPECT_FAIL(sl_actor_graph_place(p, r, blk, 64), SL_ESTATE,
              "job was created");
  assert_int_equal(sl_job_run(job), SL_OK);
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.register_bytes, 128);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- 2. a chain whose registers share a block -----------------------------
 *
 * src -S-> k1 -A-> k2 -B-> k3 -C-> sink, plus T: k1 -> sink (0 bytes, one
 * register), which the sink reads after C (input slot 1). A and C share
 * bytes [0, 64) of one block; B is at 64, S's two registers at 128 and 256.
 * Every use of [0, 64) is ordered:
 *   k1(p) writes A; k2(p) reads it and hands it back (memcheck: checks and
 *   poisons it) before it publishes B(p);
 *   k3(p) fires after B(p) and writes C; the sink(p) reads C and hands it
 *   back (checks, poisons) before it hands back T(p) — inputs in slot order;
 *   k1(p+1) needs T's only register back, so writes A after all that. */

enum { SRC, K1, K2, K3, SINK, N_ACT };

typedef struct chain {
  sl_actor_graph *p;
  ck c[N_ACT];
  int32_t s, a, b, cc, t;
} chain;

static void chain_build(chain *ch, int64_t pieces, bool placed,
                        const uint32_t where[N_ACT][2]) {
  static const char *names[N_ACT] = {"src", "k1", "k2", "k3", "sink"};
  static const sl_actor_kind kinds[N_ACT] = {SL_ACTOR_SOURCE, SL_ACTOR_KERNEL,
                                             SL_ACTOR_KERNEL, SL_ACTOR_KERNEL,
                                             SL_ACTOR_SINK};
  memset(ch, 0, sizeof *ch);
  assert_int_equal(sl_actor_graph_create(&ch->p), SL_OK);
  sl_actor_graph *p = ch->p;
  sl_actor_id id[N_ACT];
  for (int i = 0; i < N_ACT; i++) {
    ch->c[i].tag = i < SINK ? i + 1 : 0;
    ch->c[i].in_tag = i; /* the previous actor's tag; src: none */
    id[i] = add_actor(p, names[i], kinds[i], 0, where[i][0], where[i][1],
                      act_val, &ch->c[i], pieces);
  }
  /* The placed ones all on device 0, whatever device their producer has. */
  ch->s = out_named(p, id[SRC], "reg_s", 2, 100, 0);
  ch->a = out_named(p, id[K1], "reg_a", 1, NV * 8, 0);
  ch->t = out_named(p, id[K1], "reg_t", 1, 0, -1);
  ch->b = out_named(p, id[K2], "reg_b", 1, NV * 8, 0);
  ch->cc = out_named(p, id[K3], "reg_c", 1, NV * 8, 0);
  connect_to(p, ch->s, id[K1]);
  connect_to(p, ch->a, id[K2]);
  connect_to(p, ch->b, id[K3]);
  connect_to(p, ch->cc, id[SINK]);
  connect_to(p, ch->t, id[SINK]);
  if (placed) {
    int32_t blk = block_ok(p, 0, 384);
    place_ok(p, ch->a, blk, 0);
    place_ok(p, ch->cc, blk, 0);
    place_ok(p, ch->b, blk, 64);
    place_ok(p, ch->s, blk, 128);
  }
}

static void run_chain(const uint32_t where[N_ACT][2], int64_t pieces,
                      bool placed, bool memcheck) {
  chain ch;
  chain_build(&ch, pieces, placed, where);
  sl_job *job;
  sl_status st = run_mc(ch.p, memcheck, &job);
  if (st != SL_OK)
    fail_msg("placed %d memcheck %d: %s", (int)placed, (int)memcheck,
             sl_last_error());
  for (int i = K1; i < N_ACT; i++) {
    assert_int_equal(ch.c[i].errors, 0);
    assert_int_equal(ch.c[i].next, pieces);
  }
  int threads = 0;
  for (int i = 0; i < N_ACT; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++)
      seen = seen || (where[j][0] == where[i][0] && where[j][1] == where[i][1]);
    threads += !seen;
  }
  sl_job_stats s;
  assert_int_equal(sl_job_get_stats(job, &s), SL_OK);
  assert_int_equal(s.threads, threads);
  assert_int_equal(s.firings, N_ACT * pieces);
  assert_int_equal(s.in_flight, 0);
  assert_int_equal(s.registers, 6);
  /* A block counts once, not once per descriptor placed in it. */
  assert_int_equal(s.register_bytes, placed ? 384 : 2 * 100 + 3 * NV * 8);
  const unsigned char *k2_in = ch.c[K2].in_data, *k1_in = ch.c[K1].in_data;
  if (placed) { /* the registers are where they were placed */
    assert_ptr_equal(ch.c[K1].out_data, k2_in);
    assert_ptr_equal(ch.c[K3].out_data, k2_in);
    assert_ptr_equal(ch.c[SINK].in_data, k2_in);
    assert_ptr_equal(ch.c[K3].in_data, k2_in + 64);
    assert_true(k1_in == k2_in + 128 || k1_in == k2_in + 256);
  } else {
    assert_ptr_not_equal(ch.c[SINK].in_data, k2_in);
  }
  sl_job_destroy(job);
  sl_actor_graph_destroy(ch.p);
}

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static void test_shared_block_chain(void **state) {
  (void)state;
  /* Every actor on a thread of its own. */
  static const uint32_t spread[N_ACT][2] = {
      {0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}};
  for (int m = 0; m < 2; m++) {
    run_chain(spread, 2000, true, m);
    run_chain(spread, 300, false, m);
  }
  /* Random layouts over 3 devices x 4 streams. */
  uint64_t seed = test_seed(0x5eed0001, "test_shared_block_chain");
  for (int round = 0; round < 4; round++) {
    uint32_t where[N_ACT][2];
    for (int i = 0; i < N_ACT; i++) {
      where[i][0] = (uint32_t)(splitmix(&seed) % 3);
      where[i][1] = (uint32_t)(splitmix(&seed) % 4);
    }
    run_chain(where, 1000 + (int64_t)(splitmix(&seed) % 1000), true,
              round % 2 == 0);
  }
}

/* ---- 3. memcheck catches a bad placement ----------------------------------
 *
 * src -S-> k1 -X-> k2 -Y-> k3 (a sink reading X, then Y). X and Y share
 * bytes, though X is live until k3 read it: k2 writes Y over X, and k3,
 * which fires only once Y is ready, always finds Y's bytes where X was.
 * Without memcheck nothing fails: k3 just reads wrong data. T is not needed:
 * k1 writes X(p+1) only once k2 and k3 handed X(p) back. */

/* k3: counts pieces whose X is not what k1 wrote; Y must be k2's. */
static sl_status act_both(sl_act *a) {
  ck *c = a->ctx;
  const int64_t *x = a->in[0]->data, *y = a->in[1]->data;
  bool wrong = false;
  for (int i = 0; i < NV; i++) {
    wrong = wrong || x[i] != val(a->piece, 2, i);
    if (y[i] != val(a->piece, 3, i)) c->errors++;
  }
  c->wrong += wrong;
  c->next = a->piece + 1;
  c->in_data = x;
  c->out_data = y;
  return SL_OK;
}

static sl_actor_graph *bad_plan(ck c[4], int64_t pieces) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  memset(c, 0, 4 * sizeof *c);
  for (int i = 0; i < 3; i++)
    c[i] = (ck){.tag = i + 1, .in_tag = i};
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_val, &c[0], pieces);
  sl_actor_id k1 =
      add_actor(p, "k1", SL_ACTOR_KERNEL, 0, 1, 0, act_val, &c[1], 0);
  sl_actor_id k2 =
      add_actor(p, "k2", SL_ACTOR_KERNEL, 0, 1, 1, act_val, &c[2], 0);
  sl_actor_id k3 =
      add_actor(p, "k3", SL_ACTOR_SINK, 0, 2, 0, act_both, &c[3], 0);
  connect_to(p, out_named(p, src, "reg_s", 1, NV * 8, -1), k1);
  int32_t x = out_named(p, k1, "reg_x", 1, NV * 8, -1);
  int32_t y = out_named(p, k2, "reg_y", 1, NV * 8, -1);
  connect_to(p, x, k2);
  connect_to(p, x, k3);
  connect_to(p, y, k3);
  int32_t blk = block_ok(p, 1, 64);
  place_ok(p, x, blk, 0);
  place_ok(p, y, blk, 0);
  return p;
}

static void test_memcheck_catches_overlap(void **state) {
  (void)state;
  ck c[4];
  sl_actor_graph *p = bad_plan(c, 500);
  sl_job *job;
  assert_int_equal(run_mc(p, true, &job), SL_EINTERNAL);
  const char *msg = sl_last_error();
  print_message("memcheck: %s\n", msg);
  /* k2's hand-back or k3's firing finds X changed, at the first piece. */
  if (!strstr(msg, "memcheck") || !strstr(msg, "'reg_x'") ||
      !strstr(msg, "piece 0") || !(strstr(msg, "'k2'") || strstr(msg, "'k3'")))
    fail_msg("message '%s'", msg);
  assert_int_equal(c[2].errors, 0); /* k2 read X(0) before overwriting it */
  assert_int_equal(c[3].wrong, 0);  /* k3 never got to read it */
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);

  /* The same plan without memcheck: the job succeeds, with every X that
   * k3 read silently replaced by Y. */
  p = bad_plan(c, 500);
  if (run_mc(p, false, &job) != SL_OK) fail_msg("%s", sl_last_error());
  for (int i = 1; i < 4; i++) {
    assert_int_equal(c[i].errors, 0);
    assert_int_equal(c[i].next, 500);
  }
  assert_int_equal(c[3].wrong, 500);
  assert_ptr_equal(c[3].in_data, c[3].out_data); /* X and Y share bytes */
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

/* ---- 4. memcheck poison ---------------------------------------------------
 *
 * src -> k1 -A-> reader, T: k1 -> reader (slot 1). A has two registers; the
 * reader keeps the pointer of the one it read at piece p-1 and looks at it
 * at piece p. It handed that register back at p-1 (poisoning it first, as
 * its last reader, when it is in a block), and k1 cannot write it again
 * before firing for p+1, which needs T(p) back from this very firing. */

static void poison_run(bool placed, bool memcheck, int64_t pieces, ck *reader) {
  sl_actor_graph *p;
  assert_int_equal(sl_actor_graph_create(&p), SL_OK);
  ck c[2];
  memset(c, 0, sizeof c);
  memset(reader, 0, sizeof *reader);
  c[0].tag = 1;
  c[1] = (ck){.tag = 2, .in_tag = 1};
  reader->in_tag = 2;
  sl_actor_id src =
      add_actor(p, "src", SL_ACTOR_SOURCE, 0, 0, 0, act_val, &c[0], pieces);
  sl_actor_id k1 =
      add_actor(p, "k1", SL_ACTOR_KERNEL, 0, 1, 0, act_val, &c[1], 0);
  sl_actor_id rd =
      add_actor(p, "reader", SL_ACTOR_SINK, 0, 2, 0, act_keep, reader, 0);
  connect_to(p, out_named(p, src, "reg_s", 1, NV * 8, -1), k1);
  int32_t a = out_named(p, k1, "reg_a", 2, NV * 8, -1);
  int32_t t = out_named(p, k1, "reg_t", 1, 0, -1);
  connect_to(p, a, rd);
  connect_to(p, t, rd);
  if (placed) place_ok(p, a, block_ok(p, 1, 128), 0);
  sl_job *job;
  if (run_mc(p, memcheck, &job) != SL_OK) fail_msg("%s", sl_last_error());
  assert_int_equal(c[1].errors, 0);
  assert_int_equal(reader->errors, 0);
  assert_int_equal(reader->next, pieces);
  print_message("placed %d memcheck %d: %lld poisoned, %lld old\n", (int)placed,
                (int)memcheck, (long long)reader->seen_poison,
                (long long)reader->seen_old);
  sl_job_destroy(job);
  sl_actor_graph_destroy(p);
}

static void test_memcheck_poison(void **state) {
  (void)state;
  ck r;
  poison_run(true, true, 1000, &r);
  assert_true(r.seen_poison > 0);
  assert_int_equal(r.seen_old, 0);
  /* Poison only with memcheck, and only in blocks. */
  poison_run(true, false, 1000, &r);
  assert_true(r.seen_old > 0);
  assert_int_equal(r.seen_poison, 0);
  poison_run(false, true, 1000, &r);
  assert_true(r.seen_old > 0);
  assert_int_equal(r.seen_poison, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_place_validation),
      cmocka_unit_test(test_shared_block_chain),
      cmocka_unit_test(test_memcheck_catches_overlap),
      cmocka_unit_test(test_memcheck_poison),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
