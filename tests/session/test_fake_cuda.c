/* The fake CUDA device of fake_cuda.h itself, where the session tests do
 * not reach it directly: its NCCL's sends and receives (exchanges and
 * all-to-alls through the public device-collective API, comm/coll/dev_coll.h)
 * inside one process and across two fake processes, sizes that do not
 * pair up, waits that end as NCCL would hang, an abort ending a wait; and
 * box moves and fills (kernels/box.h) on its streams. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/mem_kv.h"
#include "core_thread.h"
#include "fake_cuda.h"
#include "session_int.h"

/* ---- helpers --------------------------------------------------------------
 */

/* One fake device and a stream on it. */
typedef struct fdev {
  sl__device *dev;
  sl__stream *s;
} fdev;

static void dev_open(int index, fdev *d) {
  const sl__session_backend *be = fake_cuda_backend();
  assert_int_equal(be->open(index, &d->dev), SL_OK);
  assert_int_equal(sl__device_stream_create(d->dev, &d->s), SL_OK);
}

static void dev_close(fdev *d) {
  assert_int_equal(sl__device_stream_destroy(d->dev, d->s), SL_OK);
  sl__device_close(d->dev);
}

/* Device memory holding bytes from host (zeros when host is NULL). */
static void *dev_up(fdev *d, const void *host, size_t bytes) {
  void *p = NULL;
  assert_int_equal(sl__device_alloc(d->dev, bytes, &p), SL_OK);
  if (host)
    assert_int_equal(sl__device_memcpy_h2d(d->dev, p, host, bytes, d->s),
                     SL_OK);
  else
    assert_int_equal(sl__device_memset(d->dev, p, 0, bytes, d->s), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(d->dev, d->s), SL_OK);
  return p;
}

static void dev_down(fdev *d, void *host, const void *p, size_t bytes) {
  assert_int_equal(sl__device_memcpy_d2h(d->dev, host, p, bytes, d->s), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(d->dev, d->s), SL_OK);
}

static void dev_free(fdev *d, void *p) {
  assert_int_equal(sl__device_free(d->dev, p), SL_OK);
}

/* A fake process holding one rank of a two-rank communicator: its own
 * sl__dev_coll (the backend's coll_open), device cuda:rank and a stream.
 * Its thread records statuses and messages; the main thread asserts
 * (cmocka's asserts belong to the main thread) and owns the buffers. */
#define NPROC 2

typedef struct proc proc;
struct proc {
  int rank;
  memkv *kv;
  uint64_t job;
  fdev d;
  sl__dev_coll *e;
  sl__dev_comm *c;
  sl_status st;
  char why[512];
  /* body_exchange's launches */
  sl__dev_send send[2];
  sl__dev_recv recv[2];
  int n_send, n_recv;
  void *in, *out; /* all-to-all */
  void *bufs[8];  /* freed by procs_destroy */
  int n_bufs;
};

static void proc_fail(proc *p, sl_status st) {
  if (p->st != SL_OK) return;
  p->st = st;
  snprintf(p->why, sizeof p->why, "%s", sl_last_error());
}

static void *proc_create_main(void *arg) {
  proc *p = arg;
  sl_status st = fake_cuda_backend()->coll_open(&p->e);
  if (st == SL_OK) {
    int rank = p->rank, device = p->rank;
    sl__dev_kv kv = {kv_put, kv_get, p->kv};
    sl__dev_comm_desc desc = {.name = "pair",
                              .nranks = NPROC,
                              .nlocal = 1,
                              .ranks = &rank,
                              .devices = &device,
                              .kv = &kv,
                              .job = p->job,
                              .timeout_ms = 10000};
    st = sl__dev_comm_create(p->e, &desc, &p->c);
  }
  if (st != SL_OK) proc_fail(p, st);
  return NULL;
}

/* Runs fn on one thread per process, all at once. */
static void procs_on_threads(proc *p, void *(*fn)(void *)) {
  pthread_t t[NPROC];
  for (int r = 0; r < NPROC; r++)
    assert_int_equal(pthread_create(&t[r], NULL, fn, &p[r]), 0);
  for (int r = 0; r < NPROC; r++)
    pthread_join(t[r], NULL);
  for (int r = 0; r < NPROC; r++)
    if (p[r].st != SL_OK)
      fail_msg("process %d: %s: %s", r, sl_status_str(p[r].st), p[r].why);
}

/* Two processes, process r with rank r of one communicator (made from
 * two threads: creation is collective). */
static void procs_create(proc *p, memkv *kv, uint64_t job) {
  memset(p, 0, NPROC * sizeof *p);
  memkv_init(kv);
  for (int r = 0; r < NPROC; r++) {
    p[r].rank = r;
    p[r].kv = kv;
    p[r].job = job;
    dev_open(r, &p[r].d);
  }
  procs_on_threads(p, proc_create_main);
  for (int r = 0; r < NPROC; r++)
    assert_int_equal(sl__dev_comm_nlocal(p[r].c), 1);
}

static void *proc_buf(proc *p, const void *host, size_t bytes) {
  assert_true(p->n_bufs < (int)SL_ARRAY_LEN(p->bufs));
  return p->bufs[p->n_bufs++] = dev_up(&p->d, host, bytes);
}

static void procs_destroy(proc *p, memkv *kv) {
  for (int r = 0; r < NPROC; r++) {
    sl__dev_comm_destroy(p[r].c);
    sl__dev_coll_destroy(p[r].e);
    for (int k = 0; k < p[r].n_bufs; k++)
      dev_free(&p[r].d, p[r].bufs[k]);
    dev_close(&p[r].d);
  }
  memkv_fini(kv);
}

static sl_status exchange(sl__dev_comm *c, sl__dev_rank_args *ra) {
  sl__dev_coll_desc d = {.name = "x", .op = SL__DEV_EXCHANGE};
  return sl__dev_comm_launch(c, &d, ra);
}

static sl_status all_to_all(sl__dev_comm *c, size_t count,
                            sl__dev_rank_args *ra) {
  sl__dev_coll_desc d = {.name = "a2a",
                         .op = SL__DEV_ALL_TO_ALL,
                         .dtype = SL_DTYPE_F32,
                         .count = count};
  return sl__dev_comm_launch(c, &d, ra);
}

static double seconds_since(uint64_t t0) {
  return (double)(sl__now_ns() - t0) / 1e9;
}

/* ---- in one process ------------------------------------------------------ */

static void test_p2p_in_process(void **state) {
  fake_cuda_install();
  fdev d[2];
  dev_open(0, &d[0]);
  dev_open(1, &d[1]);
  sl__dev_coll *e = NULL;
  assert_int_equal(fake_cuda_backend()->coll_open(&e), SL_OK);
  sl__dev_comm *c = NULL;
  int devices[2] = {0, 1};
  assert_int_equal(sl__dev_comm_create_local(e, "pair", 2, devices, &c), SL_OK);

  /* Rank 0 sends a then b to rank 1 (matched in order, a zero-byte entry
   * between them skipped on both sides) and s to itself; rank 1 sends x
   * to rank 0. */
  const char a[] = "abcdefghijklmno", b[] = "XYZ", s[] = "selfsel",
             x[] = "12345";
  void *a0 = dev_up(&d[0], a, sizeof a), *b0 = dev_up(&d[0], b, sizeof b);
  void *s0 = dev_up(&d[0], s, sizeof s), *x1 = dev_up(&d[1], x, sizeof x);
  void *ra1 = dev_up(&d[1], NULL, sizeof a),
       *rb1 = dev_up(&d[1], NULL, sizeof b);
  void *rs0 = dev_up(&d[0], NULL, sizeof s),
       *rx0 = dev_up(&d[0], NULL, sizeof x);
  sl__dev_send send0[] = {
      {1, a0, sizeof a}, {0, s0, sizeof s}, {1, NULL, 0}, {1, b0, sizeof b}};
  sl__dev_recv recv0[] = {{1, rx0, sizeof x}, {0, rs0, sizeof s}};
  sl__dev_send send1[] = {{0, x1, sizeof x}};
  sl__dev_recv recv1[] = {{0, ra1, sizeof a}, {0, NULL, 0}, {0, rb1, sizeof b}};
  sl__dev_rank_args ra[2] = {{.stream = d[0].s,
                              .n_send = 4,
                              .send = send0,
                              .n_recv = 2,
                              .recv = recv0},
                             {.stream = d[1].s,
                              .n_send = 1,
                              .send = send1,
                              .n_recv = 3,
                              .recv = recv1}};
  assert_int_equal(exchange(c, ra), SL_OK);
  char got[64];
  dev_down(&d[1], got, ra1, sizeof a);
  assert_memory_equal(got, a, sizeof a);
  dev_down(&d[1], got, rb1, sizeof b);
  assert_memory_equal(got, b, sizeof b);
  dev_down(&d[0], got, rs0, sizeof s);
  assert_memory_equal(got, s, sizeof s);
  dev_down(&d[0], got, rx0, sizeof x);
  assert_memory_equal(got, x, sizeof x);
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.exchanges, 2); /* one part per rank */
  assert_int_equal(fs.cross_exchanges, 0);
  assert_int_equal(fs.p2p_bytes, sizeof a + sizeof b + sizeof s + sizeof x);

  /* Rank 1 alone: a send to itself; rank 0 has nothing, so nothing is
   * queued for it. The pairs' counts go on from the first group call. */
  sl__dev_send self1[] = {{1, x1, sizeof x}};
  sl__dev_recv selfr1[] = {{1, ra1, sizeof x}};
  sl__dev_rank_args rb[2] = {{.stream = d[0].s},
                             {.stream = d[1].s,
                              .n_send = 1,
                              .send = self1,
                              .n_recv = 1,
                              .recv = selfr1}};
  assert_int_equal(exchange(c, rb), SL_OK);
  dev_down(&d[1], got, ra1, sizeof x);
  assert_memory_equal(got, x, sizeof x);
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.exchanges, 3);

  /* All-to-all: part j of rank i's input is part i of rank j's output. */
  enum { COUNT = 3 };
  float in[2][2 * COUNT], out[2 * COUNT];
  void *din[2], *dout[2];
  for (int r = 0; r < 2; r++) {
    for (int k = 0; k < 2 * COUNT; k++)
      in[r][k] = (float)(100 * r + k);
    din[r] = dev_up(&d[r], in[r], sizeof in[r]);
    dout[r] = dev_up(&d[r], NULL, sizeof out);
  }
  sl__dev_rank_args rc[2] = {{.in = din[0], .out = dout[0], .stream = d[0].s},
                             {.in = din[1], .out = dout[1], .stream = d[1].s}};
  assert_int_equal(all_to_all(c, COUNT, rc), SL_OK);
  for (int r = 0; r < 2; r++) {
    dev_down(&d[r], out, dout[r], sizeof out);
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < COUNT; k++)
        assert_true(out[j * COUNT + k] == in[j][r * COUNT + k]);
  }
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.exchanges, 5);

  sl__dev_comm_destroy(c);
  sl__dev_coll_destroy(e);
  void *bufs[] = {a0, b0, s0, rs0, rx0, din[0], dout[0]};
  for (size_t k = 0; k < SL_ARRAY_LEN(bufs); k++)
    dev_free(&d[0], bufs[k]);
  void *bufs1[] = {x1, ra1, rb1, din[1], dout[1]};
  for (size_t k = 0; k < SL_ARRAY_LEN(bufs1); k++)
    dev_free(&d[1], bufs1[k]);
  dev_close(&d[0]);
  dev_close(&d[1]);
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.live_allocs, 0);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* ---- across two processes ------------------------------------------------ */

enum { A2A_COUNT = 2 };

/* On its process's thread: the exchange of p's lists, then an all-to-all,
 * then the stream's end. */
static void *body_exchange(void *arg) {
  proc *p = arg;
  sl__dev_rank_args ra = {.stream = p->d.s,
                          .n_send = p->n_send,
                          .send = p->send,
                          .n_recv = p->n_recv,
                          .recv = p->recv};
  sl_status st = exchange(p->c, &ra);
  if (st == SL_OK) {
    sl__dev_rank_args rc = {.in = p->in, .out = p->out, .stream = p->d.s};
    st = all_to_all(p->c, A2A_COUNT, &rc);
  }
  if (st == SL_OK) st = sl__device_stream_synchronize(p->d.dev, p->d.s);
  if (st != SL_OK) proc_fail(p, st);
  return NULL;
}

static void test_p2p_across_processes(void **state) {
  fake_cuda_install();
  proc p[NPROC];
  memkv kv;
  procs_create(p, &kv, 1);
  /* Rank 0 sends a then b to rank 1; rank 1 sends c to rank 0. */
  const char a[] = "from rank 0, first", b[] = "second", c[] = "from rank 1";
  p[0].send[0] = (sl__dev_send){1, proc_buf(&p[0], a, sizeof a), sizeof a};
  p[0].send[1] = (sl__dev_send){1, proc_buf(&p[0], b, sizeof b), sizeof b};
  p[0].n_send = 2;
  p[0].recv[0] = (sl__dev_recv){1, proc_buf(&p[0], NULL, sizeof c), sizeof c};
  p[0].n_recv = 1;
  p[1].send[0] = (sl__dev_send){0, proc_buf(&p[1], c, sizeof c), sizeof c};
  p[1].n_send = 1;
  p[1].recv[0] = (sl__dev_recv){0, proc_buf(&p[1], NULL, sizeof a), sizeof a};
  p[1].recv[1] = (sl__dev_recv){0, proc_buf(&p[1], NULL, sizeof b), sizeof b};
  p[1].n_recv = 2;
  float in[NPROC][NPROC * A2A_COUNT], out[NPROC * A2A_COUNT];
  for (int r = 0; r < NPROC; r++) {
    for (int k = 0; k < NPROC * A2A_COUNT; k++)
      in[r][k] = (float)(10 * r + k) + 0.5f;
    p[r].in = proc_buf(&p[r], in[r], sizeof in[r]);
    p[r].out = proc_buf(&p[r], NULL, sizeof out);
  }
  procs_on_threads(p, body_exchange);

  char got[64];
  dev_down(&p[1].d, got, p[1].recv[0].buf, sizeof a);
  assert_memory_equal(got, a, sizeof a);
  dev_down(&p[1].d, got, p[1].recv[1].buf, sizeof b);
  assert_memory_equal(got, b, sizeof b);
  dev_down(&p[0].d, got, p[0].recv[0].buf, sizeof c);
  assert_memory_equal(got, c, sizeof c);
  for (int r = 0; r < NPROC; r++) {
    dev_down(&p[r].d, out, p[r].out, sizeof out);
    for (int j = 0; j < NPROC; j++)
      for (int k = 0; k < A2A_COUNT; k++)
        assert_true(out[j * A2A_COUNT + k] == in[j][r * A2A_COUNT + k]);
  }
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.cross_exchanges, 2 * NPROC); /* 2 launches, 2 ranks */
  assert_int_equal(fs.exchanges, 0);
  assert_int_equal(fs.p2p_bytes,
                   sizeof a + sizeof b + sizeof c + sizeof in[0] * NPROC);
  procs_destroy(p, &kv);
  /* Each process closed, checked that it launched in its order. */
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.order_checks, NPROC);
  assert_int_equal(fs.order_errors, 0);
  assert_int_equal(fs.live_allocs, 0);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* A send and its receive of different sizes (the in-process launch checks
 * that; across processes only the fake can): both streams fail, naming
 * the communicator, the ranks and the sizes. */
static void test_p2p_size_mismatch(void **state) {
  fake_cuda_install();
  proc p[NPROC];
  memkv kv;
  procs_create(p, &kv, 2);
  fake_cuda_set_wait_ms(2000); /* a mistake here fails fast */
  char zeros[12] = {0};
  sl__dev_send s0 = {1, proc_buf(&p[0], "12345678", 8), 8};
  sl__dev_recv r1 = {0, proc_buf(&p[1], zeros, sizeof zeros), sizeof zeros};
  sl__dev_rank_args ra0 = {.stream = p[0].d.s, .n_send = 1, .send = &s0};
  sl__dev_rank_args ra1 = {.stream = p[1].d.s, .n_recv = 1, .recv = &r1};
  assert_int_equal(exchange(p[0].c, &ra0), SL_OK);
  assert_int_equal(exchange(p[1].c, &ra1), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(p[1].d.dev, p[1].d.s),
                   SL_EINVAL);
  const char *why = sl_last_error();
  printf("  receiver: %s\n", why);
  assert_non_null(strstr(why, "communicator"));
  assert_non_null(strstr(why, "rank 1's receive 0 from rank 0 has 12 bytes"));
  assert_non_null(strstr(why, "the send has 8"));
  assert_non_null(strstr(why, "NCCL would corrupt memory"));
  assert_int_equal(sl__device_stream_synchronize(p[0].d.dev, p[0].d.s),
                   SL_EINVAL);
  why = sl_last_error();
  printf("  sender: %s\n", why);
  assert_non_null(strstr(why, "rank 0's send 0 to rank 1 has 8 bytes"));
  assert_non_null(strstr(why, "the receive has 12"));
  /* Nothing was written. */
  char got[sizeof zeros];
  assert_int_equal(
      sl__device_memcpy_d2h(p[1].d.dev, got, r1.buf, sizeof got, p[1].d.s),
      SL_OK);
  assert_int_equal(sl__device_stream_synchronize(p[1].d.dev, p[1].d.s),
                   SL_EINVAL); /* the stream stays failed, as CUDA's */
  assert_memory_equal(got, zeros, sizeof zeros);
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.p2p_bytes, 0);
  procs_destroy(p, &kv);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* A receive whose send never comes, and a send never received: the
 * stream fails past the wait, where NCCL would hang. */
static void test_p2p_timeout(void **state) {
  fake_cuda_install();
  proc p[NPROC];
  memkv kv;
  procs_create(p, &kv, 3);
  fake_cuda_set_wait_ms(200);
  sl__dev_recv r1 = {0, proc_buf(&p[1], NULL, 8), 8};
  sl__dev_rank_args ra1 = {.stream = p[1].d.s, .n_recv = 1, .recv = &r1};
  uint64_t t0 = sl__now_ns();
  assert_int_equal(exchange(p[1].c, &ra1), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(p[1].d.dev, p[1].d.s),
                   SL_ETIMEOUT);
  double took = seconds_since(t0);
  const char *why = sl_last_error();
  printf("  receive: %s (%.3f s)\n", why, took);
  assert_non_null(strstr(why, "rank 1 of communicator"));
  assert_non_null(strstr(why, "waited 200 ms for its receive 0 from rank 0"));
  assert_non_null(strstr(why, "NCCL would hang"));
  assert_true(took >= 0.19 && took < 5);

  /* Rank 0's first send to rank 1 is matched with the receive that gave
   * up: nobody takes it. */
  sl__dev_send s0 = {1, proc_buf(&p[0], "abcdefgh", 8), 8};
  sl__dev_rank_args ra0 = {.stream = p[0].d.s, .n_send = 1, .send = &s0};
  t0 = sl__now_ns();
  assert_int_equal(exchange(p[0].c, &ra0), SL_OK);
  assert_int_equal(sl__device_stream_synchronize(p[0].d.dev, p[0].d.s),
                   SL_ETIMEOUT);
  took = seconds_since(t0);
  why = sl_last_error();
  printf("  send: %s (%.3f s)\n", why, took);
  assert_non_null(
      strstr(why, "waited 200 ms for rank 1 to receive its send 0 (8 bytes)"));
  assert_non_null(strstr(why, "NCCL would hang"));
  assert_true(took >= 0.19 && took < 5);
  procs_destroy(p, &kv);
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* An abort of the peer's communicator does not free a waiting receive
 * (NCCL's abort frees only its own rank); its own abort does, without
 * writing anything, long before the wait would end. */
static void test_p2p_abort(void **state) {
  fake_cuda_install();
  proc p[NPROC];
  memkv kv;
  procs_create(p, &kv, 4);
  unsigned char zeros[8] = {0}, got[8];
  sl__dev_recv r1 = {0, proc_buf(&p[1], NULL, 8), 8};
  sl__dev_rank_args ra1 = {.stream = p[1].d.s, .n_recv = 1, .recv = &r1};
  uint64_t t0 = sl__now_ns();
  assert_int_equal(exchange(p[1].c, &ra1), SL_OK);
  sl__event *ev = NULL;
  assert_int_equal(sl__device_event_create(p[1].d.dev, &ev), SL_OK);
  assert_int_equal(sl__device_event_record(p[1].d.dev, ev, p[1].d.s), SL_OK);
  sl__dev_comm_abort(p[0].c);
  sl__sleep_ns(100 * 1000000ull);
  bool done = true;
  assert_int_equal(sl__device_event_query(p[1].d.dev, ev, &done), SL_OK);
  assert_false(done);
  sl__dev_comm_abort(p[1].c);
  assert_int_equal(sl__device_stream_synchronize(p[1].d.dev, p[1].d.s), SL_OK);
  assert_true(seconds_since(t0) < 5); /* the wait is 20 s */
  dev_down(&p[1].d, got, r1.buf, sizeof got);
  assert_memory_equal(got, zeros, sizeof zeros);
  assert_int_equal(sl__device_event_destroy(p[1].d.dev, ev), SL_OK);
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.comm_aborts, NPROC);
  procs_destroy(p, &kv);
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.order_checks, 0); /* aborted processes are not checked */
  assert_int_equal(fake_cuda_live_comms(), 0);
  fake_cuda_uninstall();
}

/* ---- boxes --------------------------------------------------------------- */

static sl__box_op box2(float *dst, int64_t dr, int64_t dc, int64_t r0,
                       int64_t c0, const float *src, int64_t sr, int64_t sc,
                       int64_t sr0, int64_t sc0, int64_t er, int64_t ec,
                       bool reduce, sl_reduce_op op) {
  sl__box_op b = {.dtype = SL_DTYPE_F32,
                  .ndim = 2,
                  .dst = dst,
                  .dst_dims = {dr, dc},
                  .dst_off = {r0, c0},
                  .src = src,
                  .src_dims = {sr, sc},
                  .src_off = {sr0, sc0},
                  .ext = {er, ec},
                  .reduce = reduce,
                  .op = op};
  return b;
}

/* A move, a reduction and a fill queued on a stream compute what the host
 * does, from copies of the operations (scribbled over once queued, while
 * the device's delay holds them back). */
static void test_box(void **state) {
  fake_cuda_install();
  fdev d;
  dev_open(0, &d);
  float src[3 * 4], dst[4 * 5], want[4 * 5], got[4 * 5];
  for (int k = 0; k < 12; k++)
    src[k] = (float)k + 0.25f;
  for (int k = 0; k < 20; k++)
    dst[k] = want[k] = 100.0f + (float)k;
  float *dsrc = dev_up(&d, src, sizeof src),
        *ddst = dev_up(&d, dst, sizeof dst);
  sl__box_op ops[3] = {
      box2(NULL, 4, 5, 2, 0, NULL, 3, 4, 1, 1, 2, 3, false, SL_REDUCE_SUM),
      box2(NULL, 4, 5, 0, 3, NULL, 3, 4, 0, 0, 2, 2, true, SL_REDUCE_SUM),
      box2(NULL, 4, 5, 1, 0, NULL, 0, 0, 0, 0, 1, 5, false, SL_REDUCE_MAX)};
  fake_cuda_set_device_delay(0, 50000);
  const sl__session_backend *be = fake_cuda_backend();
  sl__box_op queued[3];
  for (int i = 0; i < 3; i++) {
    sl__box_op host = ops[i];
    host.dst = want;
    host.src = i < 2 ? src : NULL;
    assert_int_equal(sl__box_op_run_host(&host), SL_OK);
    queued[i] = ops[i];
    queued[i].dst = ddst;
    queued[i].src = i < 2 ? dsrc : NULL;
    assert_int_equal(be->box(&queued[i], d.s), SL_OK);
  }
  memset(queued, 0xff, sizeof queued); /* the items have their own copies */
  fake_cuda_set_device_delay(0, 0);
  dev_down(&d, got, ddst, sizeof got);
  assert_int_equal(queued[2].ndim, -1);
  assert_memory_equal(got, want, sizeof want);
  assert_true(got[5] == -INFINITY); /* the fill of row 1 */
  fake_cuda_stats fs;
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.boxes, 3);

  /* Refused at once: host memory, a box that does not fit. An empty box
   * is nothing to do, wherever it points. */
  sl__box_op b =
      box2(dst, 4, 5, 0, 0, dsrc, 3, 4, 0, 0, 2, 2, false, SL_REDUCE_SUM);
  assert_int_equal(be->box(&b, d.s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "host memory"));
  b.dst = ddst;
  b.src = src;
  assert_int_equal(be->box(&b, d.s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "host memory"));
  b.src = dsrc;
  b.ext[0] = 4; /* src has 3 rows */
  assert_int_equal(be->box(&b, d.s), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "does not fit"));
  b.ext[0] = 0;
  b.dst = dst;
  assert_int_equal(be->box(&b, d.s), SL_OK);
  fake_cuda_get_stats(&fs);
  assert_int_equal(fs.boxes, 3);
  assert_int_equal(sl__device_stream_synchronize(d.dev, d.s), SL_OK);

  dev_free(&d, dsrc);
  dev_free(&d, ddst);
  dev_close(&d);
  fake_cuda_uninstall();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_p2p_in_process),
      cmocka_unit_test(test_p2p_across_processes),
      cmocka_unit_test(test_p2p_size_mismatch),
      cmocka_unit_test(test_p2p_timeout),
      cmocka_unit_test(test_p2p_abort),
      cmocka_unit_test(test_box),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
