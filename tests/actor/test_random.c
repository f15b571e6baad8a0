/* Randomised plans: DAGs of 2-200 actors (sources, kernels with 1-3 inputs
 * and 1-2 outputs, sinks, repeat->kernel->accumulate and unpack->pack
 * segments), random register counts, bytes, streams, devices and simulated
 * nodes (loopback), random queue kinds, some asynchronous acts. Every act
 * checks that each input holds exactly the bytes the reference evaluation
 * expects for that piece; sinks check that pieces arrive once and in order.
 * After the job: quotas held (peak <= count), nothing in flight, nothing
 * queued. One case in three injects a kernel error somewhere: the job must
 * end with that error, naming the actor, and not hang.
 *
 * SLUICE_TEST_SEED=<n> replays a run; SLUICE_TEST_CASE=<i> runs case i
 * alone; SLUICE_TEST_CASES=<n> sets the number of cases (default 500);
 * SLUICE_TEST_VERBOSE=1 describes each case. */
#include <pthread.h>
#include <stdatomic.h>

#include "actor_helpers.h"

enum { MAX_IN = 4, MAX_OUT = 2, MAX_ACTORS = 256, MAX_DESCS = 512 };

typedef enum gkind {
  G_SOURCE,
  G_KERNEL,
  G_SINK,
  G_REPEAT,
  G_ACC,
  G_UNPACK,
  G_PACK
} gkind;
static const char *gkind_name[] = {"source", "kernel", "sink", "repeat",
                                   "acc",    "unpack", "pack"};

typedef struct rcase rcase;

typedef struct rdesc {
  int32_t id;
  int producer;
  int64_t rate; /* pieces carried */
  size_t bytes;
  int32_t count;
  uint64_t *expect; /* tag per piece */
  int comp;         /* component (union-find root at generation) */
  int n_cons;
} rdesc;

typedef struct gactor {
  rcase *rc;
  gkind kind;
  sl_actor_id id;
  char name[24];
  uint32_t node, dev, stream;
  int n_in, in[MAX_IN];
  int n_out, out[MAX_OUT];
  int k;
  uint64_t salt;
  bool async;
  int64_t fail_at; /* firing index that fails, -1 none */
  int64_t total;   /* firings expected */
  int64_t firings; /* act calls (the actor's thread only) */
  int64_t errors;
  char err[200];
} gactor;

/* Completions of asynchronous acts, signalled by one helper thread. */
typedef struct pending {
  sl_completion *c;
  bool fail;
  char msg[96];
} pending;

struct rcase {
  uint64_t seed;
  int64_t N;
  uint32_t nodes, devs, streams;
  gactor actors[MAX_ACTORS];
  int n_actors;
  rdesc descs[MAX_DESCS];
  int n_descs;
  int parent[MAX_ACTORS];
  sl_actor_graph *plan;
  int fail_actor; /* -1: none */
  /* completer */
  pthread_mutex_t m;
  pthread_cond_t cv;
  pending *q;
  size_t qh, qt, qcap;
  bool quit;
  pthread_t completer;
};

/* ---- register contents ----------------------------------------------------
 */

static void write_reg(sl_register *r, int64_t piece, uint64_t tag) {
  unsigned char *d = r->data;
  if (r->bytes >= 16) {
    memcpy(d, &piece, 8);
    memcpy(d + 8, &tag, 8);
  }
  for (size_t i = 16; i < r->bytes; i++)
    d[i] = (unsigned char)((tag >> (8 * (i % 8))) ^ i);
}

static bool check_reg(const sl_register *r, int64_t piece, uint64_t tag) {
  const unsigned char *d = r->data;
  if (r->bytes < 16) return false;
  int64_t p;
  uint64_t t;
  memcpy(&p, d, 8);
  memcpy(&t, d + 8, 8);
  if (p != piece || t != tag || r->piece != piece) return false;
  for (size_t i = 16; i < r->bytes; i++)
    if (d[i] != (unsigned char)((tag >> (8 * (i % 8))) ^ i)) return false;
  return true;
}

/* ---- the reference: tags per (descriptor, piece) ----------------------------
 */

static uint64_t tag_source(const gactor *g, int o, int64_t p) {
  return sl__mix64(g->salt ^ ((uint64_t)p * 0x9e3779b97f4a7c15ull) ^
                   (uint64_t)o);
}

static uint64_t tag_kernel(const rcase *rc, const gactor *g, int o, int64_t p) {
  uint64_t h = g->salt;
  for (int i = 0; i < g->n_in; i++)
    h = sl__mix64(h ^ (rc->descs[g->in[i]].expect[p] + (uint64_t)i));
  return sl__mix64(h + (uint64_t)o + 1);
}

static uint64_t tag_repeat(const rcase *rc, const gactor *g, int o, int64_t q) {
  int64_t p = q / g->k, j = q % g->k;
  return sl__mix64(g->salt ^ rc->descs[g->in[0]].expect[p] ^
                   ((uint64_t)(j + 1) * 0xbf58476d1ce4e5b9ull) ^ (uint64_t)o);
}

static uint64_t acc_step(const gactor *g, uint64_t acc, uint64_t in, int j) {
  return j == 0 ? sl__mix64(g->salt ^ in) : sl__mix64(acc ^ in);
}

static sl_status fill_expect(rcase *rc, gactor *g) {
  for (int o = 0; o < g->n_out; o++) {
    rdesc *d = &rc->descs[g->out[o]];
    d->expect = malloc((size_t)d->rate * sizeof *d->expect + 8);
    if (!d->expect) return SL_ENOMEM;
    for (int64_t q = 0; q < d->rate; q++) {
      switch (g->kind) {
      case G_SOURCE: d->expect[q] = tag_source(g, o, q); break;
      case G_KERNEL: d->expect[q] = tag_kernel(rc, g, o, q); break;
      case G_REPEAT: d->expect[q] = tag_repeat(rc, g, o, q); break;
      case G_ACC: {
        uint64_t acc = 0;
        for (int j = 0; j < g->k; j++)
          acc = acc_step(g, acc, rc->descs[g->in[0]].expect[q * g->k + j], j);
        d->expect[q] = acc;
        break;
      }
      case G_PACK: /* unpack -> pack gives back the bytes unpack got */
        d->expect[q] =
            rc->descs[rc->actors[rc->descs[g->in[0]].producer].in[0]].expect[q];
        break;
      case G_UNPACK: d->expect[q] = 0; break; /* slices: not checked */
      case G_SINK: break;
      }
    }
  }
  return SL_OK;
}

/* ---- acts
 * ------------------------------------------------------------------------ */

static void record(gactor *g, const char *fmt, ...) SL__PRINTF(2, 3);
static void record(gactor *g, const char *fmt, ...) {
  if (g->errors++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
  }
}

static void check_input(gactor *g, sl_act *a, int i, int64_t want_piece) {
  const rdesc *d = &g->rc->descs[g->in[i]];
  const sl_register *r = a->in[i];
  if (r->piece != want_piece || want_piece >= d->rate ||
      !check_reg(r, want_piece, d->expect[want_piece]))
    record(g, "input %d: piece %lld (want %lld) has wrong contents", i,
           (long long)r->piece, (long long)want_piece);
}

static void complete_async(rcase *rc, sl_completion *c, bool fail,
                           const char *msg) {
  pthread_mutex_lock(&rc->m);
  if (rc->qt - rc->qh == rc->qcap) { /* grow */
    size_t cap = rc->qcap ? rc->qcap * 2 : 64;
    pending *q = malloc(cap * sizeof *q);
    for (size_t i = rc->qh; i < rc->qt; i++)
      q[i - rc->qh] = rc->q[i % rc->qcap];
    rc->qt -= rc->qh;
    rc->qh = 0;
    free(rc->q);
    rc->q = q;
    rc->qcap = cap;
  }
  pending *p = &rc->q[rc->qt++ % rc->qcap];
  p->c = c;
  p->fail = fail;
  snprintf(p->msg, sizeof p->msg, "%s", msg ? msg : "");
  pthread_cond_signal(&rc->cv);
  pthread_mutex_unlock(&rc->m);
}

static void *completer_main(void *arg) {
  rcase *rc = arg;
  pthread_mutex_lock(&rc->m);
  for (;;) {
    while (rc->qh == rc->qt && !rc->quit)
      pthread_cond_wait(&rc->cv, &rc->m);
    if (rc->qh == rc->qt) break;
    pending p = rc->q[rc->qh++ % rc->qcap];
    pthread_mutex_unlock(&rc->m);
    if (p.fail) {
      sl_act_fail(NULL, SL_EIO, "%s", p.msg);
      sl_completion_done(p.c, SL_EIO);
    } else {
      sl_completion_done(p.c, SL_OK);
    }
    pthread_mutex_lock(&rc->m);
  }
  pthread_mutex_unlock(&rc->m);
  return NULL;
}

static sl_status act_random(sl_act *a) {
  gactor *g = a->ctx;
  rcase *rc = g->rc;
  int64_t f = g->firings++;
  switch (g->kind) {
  case G_SOURCE:
    if (a->piece != f)
      record(g, "source piece %lld at firing %lld", (long long)a->piece,
             (long long)f);
    for (int o = 0; o < g->n_out; o++)
      write_reg(a->out[o], a->piece, rc->descs[g->out[o]].expect[a->piece]);
    break;
  case G_KERNEL:
    if (a->piece != f)
      record(g, "kernel piece %lld at firing %lld", (long long)a->piece,
             (long long)f);
    for (int i = 0; i < g->n_in; i++)
      check_input(g, a, i, f);
    for (int o = 0; o < g->n_out; o++)
      write_reg(a->out[o], a->piece, rc->descs[g->out[o]].expect[a->piece]);
    break;
  case G_SINK:
    if (a->piece != f)
      record(g, "sink piece %lld at firing %lld", (long long)a->piece,
             (long long)f);
    for (int i = 0; i < g->n_in; i++)
      check_input(g, a, i, f);
    break;
  case G_REPEAT:
    if (a->step != f % g->k || a->steps != g->k || a->piece != f)
      record(g, "repeat step %d/%d piece %lld at firing %lld", a->step,
             a->steps, (long long)a->piece, (long long)f);
    check_input(g, a, 0, f / g->k);
    for (int o = 0; o < g->n_out; o++)
      write_reg(a->out[o], a->piece, rc->descs[g->out[o]].expect[a->piece]);
    break;
  case G_ACC: {
    if (a->step != f % g->k || a->piece != f / g->k)
      record(g, "acc step %d piece %lld at firing %lld", a->step,
             (long long)a->piece, (long long)f);
    check_input(g, a, 0, f);
    uint64_t in =
        f < rc->descs[g->in[0]].rate ? rc->descs[g->in[0]].expect[f] : 0;
    sl_register *out = a->out[0];
    uint64_t acc = 0;
    if (a->step > 0) memcpy(&acc, (unsigned char *)out->data + 8, 8);
    acc = acc_step(g, acc, in, a->step);
    write_reg(out, a->piece, acc);
    break;
  }
  default: record(g, "act on a %s", gkind_name[g->kind]);
  }
  bool fail = f == g->fail_at;
  char msg[96];
  if (fail)
    snprintf(msg, sizeof msg, "injected failure in %s at firing %lld", g->name,
             (long long)f);
  if (g->async) {
    complete_async(rc, sl_act_defer(a), fail, fail ? msg : NULL);
    return SL_OK;
  }
  if (fail) return sl_act_fail(a, SL_EIO, "%s", msg);
  return SL_OK;
}

/* ---- generation
 * ----------------------------------------------------------------- */

static int find(rcase *rc, int x) {
  while (rc->parent[x] != x)
    x = rc->parent[x] = rc->parent[rc->parent[x]];
  return x;
}

static void unite(rcase *rc, int a, int b) {
  rc->parent[find(rc, a)] = find(rc, b);
}

static gactor *new_actor(rcase *rc, sl_rng *r, gkind kind, int k) {
  gactor *g = &rc->actors[rc->n_actors];
  memset(g, 0, sizeof *g);
  g->rc = rc;
  g->kind = kind;
  g->k = k;
  g->salt = sl__rng_next(r);
  g->fail_at = -1;
  g->node = (uint32_t)sl__rng_below(r, rc->nodes);
  g->dev = (uint32_t)sl__rng_below(r, rc->devs);
  g->stream = (uint32_t)sl__rng_below(r, rc->streams);
  g->async = kind != G_UNPACK && kind != G_PACK && sl__rng_below(r, 10) == 0;
  snprintf(g->name, sizeof g->name, "%s%d", gkind_name[kind], rc->n_actors);
  rc->parent[rc->n_actors] = rc->n_actors;
  bool has_act = kind != G_UNPACK && kind != G_PACK;
  g->id = add_actor(rc->plan, g->name,
                    (sl_actor_kind[]){SL_ACTOR_SOURCE, SL_ACTOR_KERNEL,
                                      SL_ACTOR_SINK, SL_ACTOR_REPEAT,
                                      SL_ACTOR_ACCUMULATE, SL_ACTOR_UNPACK,
                                      SL_ACTOR_PACK}[kind],
                    g->node, g->dev, g->stream, has_act ? act_random : NULL, g,
                    kind == G_SOURCE ? rc->N : k);
  rc->n_actors++;
  return g;
}

static int new_out(rcase *rc, sl_rng *r, gactor *g, int64_t rate,
                   size_t bytes) {
  rdesc *d = &rc->descs[rc->n_descs];
  memset(d, 0, sizeof *d);
  d->producer = (int)(g - rc->actors);
  d->rate = rate;
  d->bytes = bytes;
  d->count = 1 + (int32_t)sl__rng_below(r, 3);
  d->id = add_out(rc->plan, g->id, d->count, bytes);
  g->out[g->n_out++] = rc->n_descs;
  return rc->n_descs++;
}

static void link_in(rcase *rc, gactor *g, int desc) {
  connect_to(rc->plan, rc->descs[desc].id, g->id);
  g->in[g->n_in++] = desc;
  rc->descs[desc].n_cons++;
  unite(rc, (int)(g - rc->actors), rc->descs[desc].producer);
}

static size_t rand_bytes(sl_rng *r) {
  return 16 * (1 + (size_t)sl__rng_below(r, 8));
}

/* Rate-N descriptors any later actor may read. */
typedef struct avail {
  int d[MAX_DESCS];
  int n;
} avail;

static int open_count(const rcase *rc, const avail *av) {
  int n = 0;
  for (int i = 0; i < av->n; i++)
    n += rc->descs[av->d[i]].n_cons == 0;
  return n;
}

static int pick_input(rcase *rc, sl_rng *r, const avail *av) {
  /* Half the time an unread one, to keep the number of leaves down. */
  if (sl__rng_below(r, 2)) {
    int open[MAX_DESCS], n = 0;
    for (int i = 0; i < av->n; i++)
      if (rc->descs[av->d[i]].n_cons == 0) open[n++] = av->d[i];
    if (n) return open[sl__rng_below(r, (uint64_t)n)];
  }
  return av->d[sl__rng_below(r, (uint64_t)av->n)];
}

static void generate(rcase *rc, sl_rng *r) {
  int target = 2 + (int)sl__rng_below(r, 199);
  avail av = {{0}, 0};
  int n_src =
      1 + (int)sl__rng_below(r, (uint64_t)SL_MIN(3, SL_MAX(1, target / 4)));
  for (int s = 0; s < n_src; s++) {
    gactor *g = new_actor(rc, r, G_SOURCE, 0);
    int outs = 1 + (sl__rng_below(r, 4) == 0);
    for (int o = 0; o < outs; o++)
      av.d[av.n++] = new_out(rc, r, g, rc->N, rand_bytes(r));
  }
  /* The body, leaving room for a sink per unread descriptor and a join. */
  while (rc->n_actors + open_count(rc, &av) + 3 < target) {
    int budget = target - (rc->n_actors + open_count(rc, &av) + 1);
    uint64_t roll = sl__rng_below(r, 100);
    if (roll < 8 && budget >= 4) { /* repeat -> kernel -> accumulate */
      int k = 1 + (int)sl__rng_below(r, 4);
      int in = pick_input(rc, r, &av);
      gactor *rep = new_actor(rc, r, G_REPEAT, k);
      link_in(rc, rep, in);
      int r1 = new_out(rc, r, rep, rc->N * k, rand_bytes(r));
      gactor *mid = new_actor(rc, r, G_KERNEL, 0);
      link_in(rc, mid, r1);
      int r2 = new_out(rc, r, mid, rc->N * k, rand_bytes(r));
      gactor *acc = new_actor(rc, r, G_ACC, k);
      link_in(rc, acc, r2);
      av.d[av.n++] = new_out(rc, r, acc, rc->N, rand_bytes(r));
    } else if (roll < 14 && budget >= 3) { /* unpack -> pack */
      int in = pick_input(rc, r, &av);
      size_t bytes = rc->descs[in].bytes;
      int k = 1 << sl__rng_below(r, 3); /* divides 16 * m */
      gactor *u = new_actor(rc, r, G_UNPACK, k);
      link_in(rc, u, in);
      int u1 = new_out(rc, r, u, rc->N * k, bytes / (size_t)k);
      gactor *pk = new_actor(rc, r, G_PACK, k);
      link_in(rc, pk, u1);
      av.d[av.n++] = new_out(rc, r, pk, rc->N, bytes);
    } else {
      gactor *g = new_actor(rc, r, G_KERNEL, 0);
      int want = 1 + (int)sl__rng_below(r, 3);
      for (int t = 0; t < want * 3 && g->n_in < want; t++) {
        int d = pick_input(rc, r, &av);
        bool dup = false;
        for (int i = 0; i < g->n_in; i++)
          dup |= g->in[i] == d;
        if (!dup) link_in(rc, g, d);
      }
      int outs = 1 + (sl__rng_below(r, 5) == 0);
      for (int o = 0; o < outs; o++)
        av.d[av.n++] = new_out(rc, r, g, rc->N, rand_bytes(r));
    }
  }
  /* Join the components, so that an error anywhere concerns everyone. */
  int comp_desc[MAX_ACTORS], n_comp = 0;
  for (int i = 0; i < av.n; i++) {
    int root = find(rc, rc->descs[av.d[i]].producer);
    bool seen = false;
    for (int c = 0; c < n_comp; c++)
      seen |= find(rc, rc->descs[comp_desc[c]].producer) == root;
    if (!seen) comp_desc[n_comp++] = av.d[i];
  }
  if (n_comp > 1) {
    gactor *j = new_actor(rc, r, G_KERNEL, 0);
    for (int c = 0; c < n_comp && j->n_in < MAX_IN; c++)
      link_in(rc, j, comp_desc[c]);
    av.d[av.n++] = new_out(rc, r, j, rc->N, rand_bytes(r));
  }
  /* A sink for every unread descriptor, and now and then one more. */
  int n_av = av.n;
  for (int i = 0; i < n_av; i++)
    if (rc->descs[av.d[i]].n_cons == 0 || sl__rng_below(r, 20) == 0) {
      gactor *s = new_actor(rc, r, G_SINK, 0);
      link_in(rc, s, av.d[i]);
    }
}

/* ---- one case
 * --------------------------------------------------------------------- */

static int64_t total_firings(const rcase *rc, const gactor *g) {
  switch (g->kind) {
  case G_SOURCE: return rc->N;
  case G_REPEAT:
  case G_UNPACK: return rc->N * g->k;
  default: return rc->descs[g->in[0]].rate;
  }
}

/* Returns 0 on success; on failure prints why and returns 1. */
static int run_case(uint64_t base, uint64_t seed, int index, bool verbose) {
  rcase *rc = calloc(1, sizeof *rc);
  assert_non_null(rc);
  sl_rng r = {seed};
  rc->seed = seed;
  rc->N = 1 + (int64_t)sl__rng_below(&r, 64);
  rc->nodes = 1 + (uint32_t)sl__rng_below(&r, 3);
  rc->devs = 1 + (uint32_t)sl__rng_below(&r, 3);
  rc->streams = 1 + (uint32_t)sl__rng_below(&r, 4);
  rc->fail_actor = -1;
  pthread_mutex_init(&rc->m, NULL);
  pthread_cond_init(&rc->cv, NULL);
  assert_int_equal(sl_actor_graph_create(&rc->plan), SL_OK);
  generate(rc, &r);
  for (int i = 0; i < rc->n_actors; i++) {
    gactor *g = &rc->actors[i];
    g->total = total_firings(rc, g);
    assert_int_equal(fill_expect(rc, g), SL_OK);
  }
  bool inject = sl__rng_below(&r, 3) == 0;
  if (inject) {
    int cand[MAX_ACTORS], n = 0;
    for (int i = 0; i < rc->n_actors; i++)
      if (rc->actors[i].kind != G_UNPACK && rc->actors[i].kind != G_PACK)
        cand[n++] = i;
    rc->fail_actor = cand[sl__rng_below(&r, (uint64_t)n)];
    gactor *g = &rc->actors[rc->fail_actor];
    g->fail_at = (int64_t)sl__rng_below(&r, (uint64_t)g->total);
  }
  sl_queue_kind qk = sl__rng_below(&r, 2) ? SL_QUEUE_LOCKFREE : SL_QUEUE_MUTEX;
  int32_t spin = (int32_t[]){0, -1, 50}[sl__rng_below(&r, 3)];
  if (verbose)
    printf(
        "case %d seed %llu: %d actors, %d descriptors, %lld pieces, %u nodes x "
        "%u devices x %u streams, %s queue, spin %d, %s\n",
        index, (unsigned long long)seed, rc->n_actors, rc->n_descs,
        (long long)rc->N, rc->nodes, rc->devs, rc->streams,
        qk == SL_QUEUE_MUTEX ? "mutex" : "lock-free", (int)spin,
        inject ? rc->actors[rc->fail_actor].name : "no error");

  int failed = 0;
#define CASE_FAIL(...)                                                         \
  do {                                                                         \
    printf("case %d (replay: SLUICE_TEST_SEED=%llu SLUICE_TEST_CASE=%d): ",    \
           index, (unsigned long long)base, index);                            \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    failed = 1;                                                                \
  } while (0)

  assert_int_equal(pthread_create(&rc->completer, NULL, completer_main, rc), 0);
  sl_loopback *lb;
  assert_int_equal(sl_loopback_create(rc->nodes, &lb), SL_OK);
  sl_job *jobs[4] = {0};
  for (uint32_t n = 0; n < rc->nodes; n++) {
    sl_job_config cfg =
        SL_JOB_CONFIG(.node = n, .queue = qk, .spin = spin,
                      .hang_timeout_ms = env_long("SLUICE_TEST_HANG_MS", 20000),
                      .transport = sl_loopback_transport(lb));
    if (sl_job_create(rc->plan, &cfg, &jobs[n]) != SL_OK)
      fail_msg("case %d: create node %u: %s", index, n, sl_last_error());
    assert_int_equal(sl_loopback_attach(lb, n, jobs[n]), SL_OK);
  }
  for (uint32_t n = 0; n < rc->nodes; n++)
    assert_int_equal(sl_job_start(jobs[n]), SL_OK);
  sl_status st[4];
  char msg[4][1024];
  for (uint32_t n = 0; n < rc->nodes; n++) {
    st[n] = sl_job_wait(jobs[n]);
    snprintf(msg[n], sizeof msg[n], "%s",
             st[n] == SL_OK ? "" : sl_last_error());
  }
  pthread_mutex_lock(&rc->m);
  rc->quit = true;
  pthread_cond_signal(&rc->cv);
  pthread_mutex_unlock(&rc->m);
  pthread_join(rc->completer, NULL);

  /* Every act saw exactly the expected bytes, in order, error or not. */
  for (int i = 0; i < rc->n_actors; i++)
    if (rc->actors[i].errors)
      CASE_FAIL("actor %s: %s", rc->actors[i].name, rc->actors[i].err);

  if (!inject) {
    for (uint32_t n = 0; n < rc->nodes; n++)
      if (st[n] != SL_OK)
        CASE_FAIL("node %u: %s: %s", n, sl_status_str(st[n]), msg[n]);
    for (int i = 0; i < rc->n_actors && !failed; i++) {
      gactor *g = &rc->actors[i];
      if ((g->kind != G_UNPACK && g->kind != G_PACK) && g->firings != g->total)
        CASE_FAIL("actor %s fired %lld times, expected %lld", g->name,
                  (long long)g->firings, (long long)g->total);
      sl_actor_stats as;
      assert_int_equal(sl_job_get_actor_stats(jobs[g->node], g->id, &as),
                       SL_OK);
      if ((int64_t)as.firings != g->total || !as.finished)
        CASE_FAIL("actor %s: runtime counted %llu firings of %lld, finished %d",
                  g->name, (unsigned long long)as.firings, (long long)g->total,
                  (int)as.finished);
    }
    for (uint32_t n = 0; n < rc->nodes && !failed; n++) {
      sl_job_stats s;
      assert_int_equal(sl_job_get_stats(jobs[n], &s), SL_OK);
      if (s.in_flight || s.messages_left || s.discarded)
        CASE_FAIL("node %u: in flight %llu, left %llu, discarded %llu", n,
                  (unsigned long long)s.in_flight,
                  (unsigned long long)s.messages_left,
                  (unsigned long long)s.discarded);
    }
  } else {
    gactor *g = &rc->actors[rc->fail_actor];
    char want[64];
    snprintf(want, sizeof want, "actor '%s'", g->name);
    bool any = false;
    for (uint32_t n = 0; n < rc->nodes; n++) {
      if (st[n] == SL_OK) continue; /* finished its share before the error */
      any = true;
      if (st[n] != SL_EIO || !strstr(msg[n], want))
        CASE_FAIL("node %u: %s: '%s' (expected SL_EIO naming %s)", n,
                  sl_status_str(st[n]), msg[n], g->name);
    }
    if (st[g->node] != SL_EIO || !strstr(msg[g->node], "injected failure"))
      CASE_FAIL("failing node %u: %s: '%s'", g->node,
                sl_status_str(st[g->node]), msg[g->node]);
    if (!any) CASE_FAIL("no node reported the injected error");
  }
  /* Quotas, instrumented by the runtime: peak registers in flight never
   * exceed the count, and (without error) all came back. */
  for (int d = 0; d < rc->n_descs && !failed; d++) {
    rdesc *dd = &rc->descs[d];
    sl_regst_stats rs;
    uint32_t node = rc->actors[dd->producer].node;
    assert_int_equal(sl_job_get_regst_stats(jobs[node], dd->id, &rs), SL_OK);
    if (rs.count != dd->count || rs.peak_in_flight > dd->count ||
        (!inject && (rs.peak_in_flight < 1 || rs.in_flight != 0)))
      CASE_FAIL("descriptor %d: count %d, peak %d, in flight %d", dd->id,
                (int)rs.count, (int)rs.peak_in_flight, (int)rs.in_flight);
  }
  for (uint32_t n = 0; n < rc->nodes; n++)
    sl_job_destroy(jobs[n]);
  sl_loopback_destroy(lb);
  sl_actor_graph_destroy(rc->plan);
  for (int d = 0; d < rc->n_descs; d++)
    free(rc->descs[d].expect);
  free(rc->q);
  pthread_mutex_destroy(&rc->m);
  pthread_cond_destroy(&rc->cv);
  free(rc);
  return failed;
#undef CASE_FAIL
}

static void test_random_plans(void **state) {
  uint64_t base = test_seed(0x5171cea5ull, "actor_random");
  long cases = env_long("SLUICE_TEST_CASES", 500);
  long only = env_long("SLUICE_TEST_CASE", -1);
  bool verbose = env_long("SLUICE_TEST_VERBOSE", 0) != 0 || only >= 0;
  sl_logging_set_level(SL_LOGGING_OFF); /* injected errors are expected */
  int failures = 0;
  uint64_t t0 = sl__now_ns();
  for (long i = 0; i < cases; i++) {
    if (only >= 0 && i != only) continue;
    failures += run_case(base, sl__mix64(base + (uint64_t)i), (int)i, verbose);
    if (failures >= 5) break;
  }
  printf("actor_random: %ld cases in %.1f s, %d failed\n",
         only >= 0 ? 1 : cases, (double)(sl__now_ns() - t0) / 1e9, failures);
  sl_logging_set_level(SL_LOGGING_WARN);
  assert_int_equal(failures, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_plans),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
