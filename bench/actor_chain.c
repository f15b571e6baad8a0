/* bench_actor_chain: the scheduler's overhead per firing.
 *
 * A chain of 1,000 no-op actors (a source, 998 kernels, a sink; 2
 * registers per edge) passes 100,000 pieces, on one stream thread and split
 * over two. Then the two queue implementations are measured against each
 * other: inside the runtime (a chain whose every hop crosses threads, and
 * 16 source threads feeding 16 sinks on one thread) and raw (producers
 * pushing into one consumer). Rows are medians of `repeats` runs (3x as
 * many for the short cross-thread runs, queue kinds alternating), with the
 * min-max spread: the machine may be shared. Prints tables; exits 0.
 *
 *   bench_actor_chain [pieces] [actors] [repeats]   (100000 1000 3) */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <sluice/actor.h>

#include "core_int.h"
#include "core_thread.h"

#include "bench_util.h"

typedef enum layout { ONE_THREAD, TWO_HALVES, TWO_INTERLEAVED } layout;

static sl_actor_graph *chain(int actors, int64_t pieces, layout lay) {
  sl_actor_graph *p;
  if (sl_actor_graph_create(&p) != SL_OK) return NULL;
  sl_actor_id prev = 0;
  for (int i = 0; i < actors; i++) {
    uint32_t stream = 0;
    if (lay == TWO_HALVES) stream = i >= actors / 2;
    if (lay == TWO_INTERLEAVED) stream = (uint32_t)(i % 2);
    char name[32];
    snprintf(name, sizeof name, "a%d", i);
    sl_actor_kind kind = i == 0            ? SL_ACTOR_SOURCE
                         : i == actors - 1 ? SL_ACTOR_SINK
                                           : SL_ACTOR_KERNEL;
    sl_actor_desc d = {name, kind, 0, 0, stream, NULL, NULL, pieces};
    sl_actor_id id;
    int32_t r;
    sl_regst_desc rd = {NULL, 2, 64, -1, 0, NULL, NULL};
    if (sl_actor_graph_add_actor(p, &d, &id) != SL_OK ||
        (i > 0 && sl_actor_graph_add_output(p, prev, &rd, &r) != SL_OK) ||
        (i > 0 && sl_actor_graph_connect(p, r, id) != SL_OK)) {
      fprintf(stderr, "plan: %s\n", sl_last_error());
      exit(1);
    }
    prev = id;
  }
  return p;
}

typedef struct result {
  double seconds;
  uint64_t firings, cross;
} result;

static result run_once(sl_actor_graph *p, sl_queue_kind q) {
  sl_job_config cfg = SL_JOB_CONFIG(.queue = q);
  sl_job *job;
  result r = {0};
  if (sl_job_create(p, &cfg, &job) != SL_OK) {
    fprintf(stderr, "job: %s\n", sl_last_error());
    exit(1);
  }
  uint64_t t0 = sl__now_ns();
  if (sl_job_run(job) != SL_OK) {
    fprintf(stderr, "run: %s\n", sl_last_error());
    exit(1);
  }
  r.seconds = (double)(sl__now_ns() - t0) / 1e9;
  sl_job_stats s;
  sl_job_get_stats(job, &s);
  r.firings = s.firings;
  r.cross = s.messages_cross;
  sl_job_destroy(job);
  return r;
}

static int repeats = 3;

typedef struct stats3 {
  double med, lo, hi; /* ns per firing */
  uint64_t firings;
} stats3;

static stats3 summarize(double *ns, int n, uint64_t firings) {
  double med = bench_median(ns, n); /* sorts ns */
  return (stats3){med, ns[0], ns[n - 1], firings};
}

/* Runs plan p `n` times per queue kind, alternating the kinds so that both
 * see the same background load. */
static void measure(sl_actor_graph *p, int n, int kinds, const sl_queue_kind *k,
                    stats3 *out) {
  double ns[2][31];
  uint64_t firings = 0;
  if (n > 31) n = 31;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < kinds; j++) {
      result r = run_once(p, k[j]);
      ns[j][i] = r.seconds * 1e9 / (double)r.firings;
      firings = r.firings;
    }
  for (int j = 0; j < kinds; j++)
    out[j] = summarize(ns[j], n, firings);
}

static void header(void) {
  printf("| %-34s | %-9s | %11s | %12s | %9s | %17s |\n", "layout", "queue",
         "firings", "firings/s", "ns/firing", "min-max ns/firing");
  printf("|------------------------------------|-----------|-------------|"
         "--------------|-----------|-------------------|\n");
}

static void row(const char *what, const char *queue, stats3 s) {
  printf("| %-34s | %-9s | %11llu | %12.0f | %9.1f | %8.1f-%-8.1f |\n", what,
         queue, (unsigned long long)s.firings, 1e9 / s.med, s.med, s.lo, s.hi);
}

/* `p` sources, each on a thread of its own, feed `p` sinks sharing one
 * thread: every piece crosses threads, and the sinks' queue has p
 * producers. */
static sl_actor_graph *fan_in(int p_, int64_t pieces) {
  sl_actor_graph *p;
  if (sl_actor_graph_create(&p) != SL_OK) return NULL;
  for (int i = 0; i < p_; i++) {
    char sn[32], kn[32];
    snprintf(sn, sizeof sn, "src%d", i);
    snprintf(kn, sizeof kn, "sink%d", i);
    sl_actor_desc s = {sn,   SL_ACTOR_SOURCE, 0, (uint32_t)i + 1, 0, NULL,
                       NULL, pieces};
    sl_actor_desc k = {kn, SL_ACTOR_SINK, 0, 0, 0, NULL, NULL, 0};
    sl_regst_desc rd = {NULL, 2, 64, -1, 0, NULL, NULL};
    sl_actor_id a, b;
    int32_t r;
    if (sl_actor_graph_add_actor(p, &s, &a) != SL_OK ||
        sl_actor_graph_add_actor(p, &k, &b) != SL_OK ||
        sl_actor_graph_add_output(p, a, &rd, &r) != SL_OK ||
        sl_actor_graph_connect(p, r, b) != SL_OK) {
      fprintf(stderr, "plan: %s\n", sl_last_error());
      exit(1);
    }
  }
  return p;
}

/* ---- raw queues ------------------------------------------------------------
 */

typedef struct qarg {
  sl__mpsc *q;
  uint64_t n;
} qarg;

static void *qproducer(void *arg) {
  qarg *a = arg;
  sl_msg m = {0};
  for (uint64_t i = 0; i < a->n; i++) {
    m.piece = (int64_t)i;
    while (!sl__mpsc_push(a->q, &m))
      sched_yield();
  }
  return NULL;
}

/* `producers` threads push n messages each into one queue of 1024; the
 * consumer pops in batches of 64 and sleeps when it finds it empty. */
static double queue_rate(sl__queue_kind kind, int producers, uint64_t n) {
  sl__mpsc *q;
  if (sl__mpsc_create(kind, sizeof(sl_msg), 1024, &q) != SL_OK) exit(1);
  pthread_t t[8];
  qarg a = {q, n};
  uint64_t t0 = sl__now_ns();
  for (int i = 0; i < producers; i++)
    pthread_create(&t[i], NULL, qproducer, &a);
  uint64_t got = 0, want = n * (uint64_t)producers;
  sl_msg buf[64];
  while (got < want) {
    size_t k = sl__mpsc_pop(q, buf, 64);
    if (k == 0) sl__mpsc_wait(q, 1000000);
    got += k;
  }
  double s = (double)(sl__now_ns() - t0) / 1e9;
  for (int i = 0; i < producers; i++)
    pthread_join(t[i], NULL);
  sl__mpsc_destroy(q);
  return (double)want / s;
}

int main(int argc, char **argv) {
  int64_t pieces = argc > 1 ? atoll(argv[1]) : 100000;
  int actors = argc > 2 ? atoi(argv[2]) : 1000;
  if (argc > 3) repeats = atoi(argv[3]);
  if (pieces < 1 || actors < 2) {
    fprintf(stderr, "usage: bench_actor_chain [pieces >= 1] [actors >= 2]\n");
    return 2;
  }
  printf("bench_actor_chain: %d no-op actors, %lld pieces, 2 registers per "
         "edge, %d CPUs, median of %d runs\n\n",
         actors, (long long)pieces, sl__cpu_count(), repeats);
  header();
  const sl_queue_kind both[2] = {SL_QUEUE_LOCKFREE, SL_QUEUE_MUTEX};
  stats3 st[2];
  sl_actor_graph *p = chain(actors, pieces, ONE_THREAD);
  measure(p, repeats, 1, both, st);
  row("1 thread", "-", st[0]);
  sl_actor_graph_destroy(p);
  p = chain(actors, pieces, TWO_HALVES);
  measure(p, repeats, 2, both, st);
  row("2 threads (halves)", "lock-free", st[0]);
  row("2 threads (halves)", "mutex", st[1]);
  sl_actor_graph_destroy(p);

  /* Short runs, so more of them: cross-thread wake-ups are noisy. */
  int qrep = 3 * repeats;
  printf("\nqueues inside the runtime: every message crosses threads "
         "(median of %d, kinds alternating)\n\n",
         qrep);
  header();
  int64_t ipieces = pieces / 50 > 0 ? pieces / 50 : 1;
  p = chain(actors, ipieces, TWO_INTERLEAVED);
  measure(p, qrep, 2, both, st);
  row("chain, 2 threads alternating", "lock-free", st[0]);
  row("chain, 2 threads alternating", "mutex", st[1]);
  sl_actor_graph_destroy(p);
  for (int fan = 1; fan <= 16; fan *= 4) {
    char what[64];
    p = fan_in(fan, pieces / fan);
    snprintf(what, sizeof what, "%d source thread%s -> 1 sink thread", fan,
             fan > 1 ? "s" : "");
    measure(p, qrep, 2, both, st);
    row(what, "lock-free", st[0]);
    row(what, "mutex", st[1]);
    sl_actor_graph_destroy(p);
  }

  printf("\nraw queues: producers push 2,000,000 messages each (%zu bytes) "
         "into one consumer\n\n",
         sizeof(sl_msg));
  printf("| %-10s | %-9s | %14s |\n", "producers", "queue", "messages/s");
  printf("|------------|-----------|----------------|\n");
  for (int prod = 1; prod <= 2; prod++) {
    const sl__queue_kind kinds[] = {SL__QUEUE_LOCKFREE, SL__QUEUE_MUTEX};
    for (int k = 0; k < 2; k++) {
      double r[15];
      int n = repeats < 1 ? 1 : repeats > 15 ? 15 : repeats;
      for (int i = 0; i < n; i++)
        r[i] = queue_rate(kinds[k], prod, 2000000);
      printf("| %-10d | %-9s | %14.0f |\n", prod, sl__queue_kind_name(kinds[k]),
             bench_median(r, n));
    }
  }
  return 0;
}
