/* All-reduce of float32 between two nodes: sluice's ring over the data
 * plane (comm/coll/net_coll.c; two endpoints in this process on 127.0.0.1, so
 * two loop threads and real TCP) against two PyTorch gloo processes on
 * 127.0.0.1 (bench/peers/allreduce_gloo.py), 4 KiB to 64 MiB, one table.
 *
 *   bench_allreduce_vs_gloo [--budget S] [--no-gloo] [--python PATH]
 *                           [--size BYTES]... [--split K] [--no-shared]
 *
 * Each endpoint's all-reduces are issued by a thread of its own, as a
 * daemon's collective stream issues them and as each gloo process does;
 * the two pass a barrier before each repetition (gloo's peer agrees on
 * going on with an all-reduce). Time per all-reduce is the median over
 * repetitions of member 0's, from its start to its completion, as the gloo
 * peer times rank 0's; bus bandwidth follows nccl-tests:
 * 2(n-1)/n x bytes / time, n = 2. Each size gets 5 untimed repetitions
 * and then about `budget` seconds (default 0.4) on each side. `algo` is the
 * algorithm net_coll ran for the size (its per-algorithm counts), as NCCL_ALGO
 * names NCCL's: the cost model's pick (ring, or the one-hop exchange for
 * small buffers; the tree wins only with many nodes), or the one
 * SLUICE_NET_COLL_ALGO=ring|exchange|tree forces. --size
 * (repeatable) picks the sizes, e.g. for a profile of one. --split K cuts each
 * size into K buffers all-reduced at once (as a model's gradients are; sluice
 * only), the time being until all K are done. The buffers lie in register
 * pools the two endpoints map, as two daemons' on one host do, so from
 * 256 KiB the all-reduce is the shared one (docs/cluster.md, "Shared
 * registers"); --no-shared puts them on the heap (the rings' copies). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_thread.h"
#include "dp.h"
#include "net_coll.h"
#include "shm_pool.h"
#include "bench_util.h"

#ifndef ALLREDUCE_GLOO_PEER
#define ALLREDUCE_GLOO_PEER "bench/peers/allreduce_gloo.py"
#endif

static const char token[] = "bench-token";

static void die(const char *what) {
  fprintf(stderr, "%s: %s\n", what, sl_last_error());
  exit(1);
}

/* Untimed repetitions before each size, as nccl-tests' default (-w 5);
 * the gloo peer does as many. */
enum { NDEFAULT = 8, MAXSIZES = 32, MAXREPS = 4000, WARMUP = 5 };

typedef struct waiter {
  pthread_mutex_t m;
  pthread_cond_t cv;
  int done, failed;
} waiter;

static void on_done(void *arg, sl_status st) {
  waiter *w = arg;
  pthread_mutex_lock(&w->m);
  w->done++;
  w->failed += st != SL_OK;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->m);
}

/* One member, as one daemon's collective stream issues it: each
 * repetition starts after both members passed a barrier (gloo's peer
 * agrees on going on with an all-reduce), and lasts from this member's
 * start to its completion. Rank 0 decides how many and keeps the times. */
typedef struct rank {
  uint32_t r;
  sl__net_coll *nc;
  const sl__net_group *g;
  float *buf;
  size_t count;
  int split;
  uint64_t seq; /* the first instance's; both ranks count alike */
  waiter w;
  pthread_barrier_t *bar;
  atomic_bool *go;
  double budget, *t;
  int reps;
} rank;

static void *rank_main(void *arg) {
  rank *k = arg;
  uint64_t t_end = 0;
  for (int it = -WARMUP;; it++) {
    if (k->r == 0) {
      uint64_t now = sl__now_ns();
      if (it == 0) t_end = now + (uint64_t)(k->budget * 1e9);
      atomic_store(k->go, it < 3 || (it < MAXREPS && now < t_end));
    }
    pthread_barrier_wait(k->bar);
    if (!atomic_load(k->go)) break;
    uint64_t t0 = sl__now_ns();
    pthread_mutex_lock(&k->w.m);
    k->w.done = 0;
    pthread_mutex_unlock(&k->w.m);
    for (int j = 0; j < k->split; j++) {
      size_t lo = k->count * (size_t)j / (size_t)k->split;
      size_t hi = k->count * (size_t)(j + 1) / (size_t)k->split;
      if (sl__net_all_reduce(k->nc, k->g, k->seq++, k->buf + lo, hi - lo,
                             SL_DTYPE_F32, SL_REDUCE_SUM, on_done,
                             &k->w) != SL_OK)
        die("all_reduce");
    }
    pthread_mutex_lock(&k->w.m);
    while (k->w.done < k->split)
      pthread_cond_wait(&k->w.cv, &k->w.m);
    int failed = k->w.failed;
    pthread_mutex_unlock(&k->w.m);
    if (failed) die("all_reduce completed");
    if (it >= 0 && k->r == 0)
      k->t[k->reps++] = (double)(sl__now_ns() - t0) * 1e-9;
  }
  /* the last barrier released both: rank 1 would otherwise leave first */
  pthread_barrier_wait(k->bar);
  return NULL;
}

/* The algorithm the instances counted in `after` but not in `before`
 * ran: one name, or "mixed". */
static const char *algo_ran(const sl__net_coll_stats *before,
                            const sl__net_coll_stats *after) {
  const char *name = "-";
  for (int a = 0; a < SL__NET_ALGO_COUNT; a++)
    if (after->by_algo[a] != before->by_algo[a])
      name = strcmp(name, "-") ? "mixed" : sl__net_algo_name(a);
  return name;
}

int main(int argc, char **argv) {
  double budget = 0.4;
  bool gloo = true;
  const char *python = "/usr/bin/python3";
  size_t sizes[MAXSIZES];
  int nsizes = 0, split = 1;
  bool shared = true;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--budget") && i + 1 < argc)
      budget = atof(argv[++i]);
    else if (!strcmp(argv[i], "--no-gloo"))
      gloo = false;
    else if (!strcmp(argv[i], "--no-shared"))
      shared = false;
    else if (!strcmp(argv[i], "--split") && i + 1 < argc &&
             atoi(argv[i + 1]) >= 1)
      split = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--python") && i + 1 < argc)
      python = argv[++i];
    else if (!strcmp(argv[i], "--size") && i + 1 < argc && nsizes < MAXSIZES &&
             strtoull(argv[i + 1], NULL, 0) >= 4)
      sizes[nsizes++] = (size_t)strtoull(argv[++i], NULL, 0) / 4 * 4;
    else {
      fprintf(stderr,
              "usage: %s [--budget S] [--no-gloo] [--python PATH] "
              "[--size BYTES]... [--split K] [--no-shared]\n",
              argv[0]);
      return 2;
    }
  }
  if (!nsizes)
    for (; nsizes < NDEFAULT; nsizes++)
      sizes[nsizes] = (size_t)4096 << (2 * nsizes); /* 4 KiB .. 64 MiB */

  /* gloo first, while this process is idle */
  double gloo_s[MAXSIZES] = {0};
  if (split > 1) gloo = false; /* the peer has no such mode */
  if (gloo) {
    char cmd[4096];
    int port = 20000 + (int)(getpid() % 20000);
    int n = snprintf(cmd, sizeof cmd, "%s %s %d %g", python,
                     ALLREDUCE_GLOO_PEER, port, budget);
    for (int i = 0; i < nsizes; i++)
      n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %zu", sizes[i]);
    FILE *f = popen(cmd, "r");
    if (!f) {
      perror("popen");
      gloo = false;
    } else {
      size_t b;
      double s;
      while (fscanf(f, "%zu %lf", &b, &s) == 2)
        for (int i = 0; i < nsizes; i++)
          if (sizes[i] == b) gloo_s[i] = s;
      if (pclose(f) != 0) fprintf(stderr, "gloo peer failed: '%s'\n", cmd);
    }
  }

  sl__dp_endpoint *ep[2];
  sl__net_coll *nc[2];
  for (uint32_t i = 0; i < 2; i++) {
    sl__dp_config c = {
        .node = i, .nnodes = 2, .token = token, .token_len = sizeof token - 1};
    if (sl__dp_endpoint_create(&c, &ep[i]) != SL_OK) die("endpoint");
    if (sl__net_coll_create(ep[i], NULL, &nc[i]) != SL_OK) die("net_coll");
  }
  for (uint32_t i = 0; i < 2; i++)
    if (sl__dp_endpoint_set_peer(ep[i], 1 - i, "127.0.0.1",
                                 sl__dp_endpoint_port(ep[1 - i])) != SL_OK)
      die("peer");
  if (sl__dp_endpoint_connect(ep[0], 1) != SL_OK ||
      sl__dp_endpoint_wait_connected(ep[0], 1, 10000) != SL_OK)
    die("connect");
  /* register pools that map each other, one per endpoint */
  sl__shm_pool *pool[2] = {NULL, NULL};
  sl__shm_view views[2][2];
  memset(views, 0, sizeof views);
  if (shared) {
    uint64_t need = 0;
    for (int i = 0; i < nsizes; i++)
      need += sizes[i] + 4096;
    static const uint8_t maps[4] = {0, 1, 1, 0};
    for (uint32_t i = 0; i < 2; i++)
      if (sl__shm_pool_create(need + (1u << 20), &pool[i]) != SL_OK)
        die("shared registers");
    for (uint32_t i = 0; i < 2; i++) {
      char desc[SL__SHM_POOL_DESC_MAX];
      sl__shm_pool_describe(pool[1 - i], desc, sizeof desc);
      if (sl__shm_view_map(desc, &views[i][1 - i]) != SL_OK ||
          sl__net_coll_set_shared(nc[i], pool[i], views[i], 2, maps) != SL_OK)
        die("shared registers");
    }
  }
  uint32_t nodes[2] = {0, 1};
  sl__net_group g = {.id = 1, .nodes = nodes, .n = 2};
  rank rk[2];
  pthread_barrier_t bar;
  atomic_bool go;
  pthread_barrier_init(&bar, NULL, 2);
  double t[MAXREPS];
  for (uint32_t i = 0; i < 2; i++) {
    rk[i] = (rank){.r = i,
                   .nc = nc[i],
                   .g = &g,
                   .split = split,
                   .bar = &bar,
                   .go = &go,
                   .budget = budget,
                   .t = t};
    pthread_mutex_init(&rk[i].w.m, NULL);
    sl__cond_init(&rk[i].w.cv);
  }

  printf("all-reduce f32, 2 nodes on 127.0.0.1; bus bandwidth = "
         "2(n-1)/n x bytes / time\n");
  printf("%10s %9s %12s %10s %12s %10s %8s\n", "bytes", "algo", "sluice us",
         "GB/s", "gloo us", "GB/s", "ratio");
  for (int si = 0; si < nsizes; si++) {
    sl__net_coll_stats before, after;
    sl__net_coll_get_stats(nc[0], &before);
    size_t count = sizes[si] / 4;
    float *a =
        shared ? sl__shm_pool_alloc(pool[0], sizes[si]) : malloc(sizes[si]);
    float *b =
        shared ? sl__shm_pool_alloc(pool[1], sizes[si]) : malloc(sizes[si]);
    if (!a || !b) die("buffers");
    for (size_t i = 0; i < count; i++)
      a[i] = b[i] = 0.0f; /* stays 0 however many times it is reduced */
    for (uint32_t i = 0; i < 2; i++) {
      rk[i].buf = i ? b : a;
      rk[i].count = count;
      rk[i].reps = 0;
    }
    sl__thread th[2];
    for (uint32_t i = 0; i < 2; i++)
      if (sl__thread_start(&th[i], rank_main, &rk[i], "bench-rank") != SL_OK)
        die("thread");
    for (uint32_t i = 0; i < 2; i++)
      sl__thread_join(&th[i]);
    int reps = rk[0].reps;
    sl__net_coll_get_stats(nc[0], &after);
    const char *algo = algo_ran(&before, &after);
    double s = bench_median(t, reps);
    double bus = (double)sizes[si] / s * 1e-9; /* 2(n-1)/n = 1 for n = 2 */
    if (gloo && gloo_s[si] > 0) {
      double gbus = (double)sizes[si] / gloo_s[si] * 1e-9;
      printf("%10zu %9s %12.1f %10.3f %12.1f %10.3f %8.2f\n", sizes[si], algo,
             s * 1e6, bus, gloo_s[si] * 1e6, gbus, gloo_s[si] / s);
    } else {
      printf("%10zu %9s %12.1f %10.3f %12s %10s %8s\n", sizes[si], algo,
             s * 1e6, bus, "-", "-", "-");
    }
    fflush(stdout);
    if (!shared) {
      free(a);
      free(b);
    }
  }
  for (uint32_t i = 0; i < 2; i++)
    sl__dp_endpoint_destroy(ep[i]);
  for (uint32_t i = 0; i < 2; i++) {
    sl__net_coll_destroy(nc[i]);
    sl__shm_view_unmap(&views[i][1 - i]);
    sl__shm_pool_destroy(pool[i]);
  }
  for (uint32_t i = 0; i < 2; i++) {
    pthread_mutex_destroy(&rk[i].w.m);
    pthread_cond_destroy(&rk[i].w.cv);
  }
  pthread_barrier_destroy(&bar);
  return 0;
}
