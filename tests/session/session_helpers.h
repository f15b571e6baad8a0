/* Helpers shared by the session tests: seeds, feeding random inputs to a
 * session and the reference interpreter alike, and comparing every fetch
 * after every step (exact, or within a relative tolerance for floats). */
#ifndef SLUICE_TEST_SESSION_HELPERS_H
#define SLUICE_TEST_SESSION_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/session.h>

#include "graph_int.h"

/* Asserts call returns SL_OK, printing sl_last_error() otherwise. */
#define ST_OK(call)                                                            \
  do {                                                                         \
    sl_status st_ok_ = (call);                                                 \
    if (st_ok_ != SL_OK)                                                       \
      fail_msg("%s -> %s: %s", #call, sl_status_str(st_ok_), sl_last_error()); \
  } while (0)

static inline uint64_t st_seed(uint64_t dflt, const char *what) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t s = e && e[0] ? strtoull(e, NULL, 0) : dflt;
  printf("%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", what,
         (unsigned long long)s, (unsigned long long)s);
  fflush(stdout);
  return s;
}

/* Writes n int32 values as a 1-d .npy file (format 1.0) at path. */
static inline void st_write_npy_i32(const char *path, const int32_t *v, int n) {
  char header[128];
  snprintf(header, sizeof header,
           "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }", n);
  size_t len = strlen(header), pad = (64 - (11 + len) % 64) % 64;
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc((int)((len + pad + 1) & 0xff), f);
  fputc((int)((len + pad + 1) >> 8), f);
  fputs(header, f);
  for (size_t i = 0; i < pad; i++)
    fputc(' ', f);
  fputc('\n', f);
  fwrite(v, sizeof *v, (size_t)n, f);
  fclose(f);
}

static inline sl_graph *st_graph(const char *placement) {
  sl_graph *g = NULL;
  if (sl_graph_create(&g) != SL_OK) fail_msg("graph: %s", sl_last_error());
  if (placement && sl_graph_set_default_placement(g, placement) != SL_OK)
    fail_msg("placement: %s", sl_last_error());
  return g;
}

static inline void st_check_graph(sl_graph *g) {
  if (sl_graph_status(g) != SL_OK) fail_msg("graph: %s", sl_graph_error(g));
}

#ifdef SLUICE_LOWER_INT_H
/* Compiles and lowers g (tests that include lower_int.h first). */
static inline sl__pplan *st_lower(sl_graph *g) {
  if (sl__graph_compile(g) != SL_OK) fail_msg("compile: %s", sl_last_error());
  sl__pplan *p = NULL;
  if (sl__lower(g, &p) != SL_OK) fail_msg("lower: %s", sl_last_error());
  return p;
}
#endif

static inline size_t st_value_bytes(const sl__value *v) {
  return (size_t)sl_shape_numel(&v->meta.shape) * sl_dtype_size(v->meta.dtype);
}

/* Random data for every input of g: floats uniform in [-1, 1), integers in
 * [0, int_hi). */
typedef struct st_feeds {
  int n;
  const char *name[64];
  void *data[64];
  size_t bytes[64];
} st_feeds;

static inline void st_feeds_make(const sl_graph *g, uint64_t seed, int int_hi,
                                 st_feeds *f) {
  memset(f, 0, sizeof *f);
  sl_rng r = {seed};
  for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
    const sl__node *n = sl__graph_node(g, i);
    if (n->kind != SL__NODE_INPUT) continue;
    const sl__value *v = sl__graph_value(g, n->out[0]);
    int k = f->n++;
    f->name[k] = n->name;
    f->bytes[k] = st_value_bytes(v);
    f->data[k] = calloc(1, f->bytes[k] + 8);
    for (int64_t e = 0; e < sl_shape_numel(&v->meta.shape); e++) {
      double x =
          sl_dtype_is_float(v->meta.dtype)
              ? -1.0 + 2.0 * (double)(sl__rng_next(&r) >> 11) * 0x1.0p-53
              : (double)sl__rng_below(&r, (uint64_t)(int_hi > 0 ? int_hi : 2));
      sl_store_element(v->meta.dtype, f->data[k], e, x);
    }
  }
}

static inline void st_feeds_free(st_feeds *f) {
  for (int k = 0; k < f->n; k++)
    free(f->data[k]);
}

/* A small MLP (12 -> hidden -> 7, relu, bias on the hidden layer) trained
 * with opt under a layout: the placement and the nd-SBP of x, w1 and w2
 * (b1 follows w1's split). Fetches loss, w1_out and w2_out. */
typedef struct st_mlp_layout {
  const char *name, *placement, *x, *w1, *w2;
} st_mlp_layout;

static inline sl_graph *st_mlp(const st_mlp_layout *l, int batch, int hidden,
                               sl_optimizer opt) {
  sl_graph *g = st_graph(l->placement);
  sl_shape xs = SL_SHAPE(batch, 12), ys = SL_SHAPE(batch);
  sl_shape w1s = SL_SHAPE(12, hidden), b1s = SL_SHAPE(hidden),
           w2s = SL_SHAPE(hidden, 7);
  sl_tensor x = sl_input(g, "x", &xs, SL_DTYPE_F32, NULL, l->x);
  sl_tensor y = sl_input(g, "y", &ys, SL_DTYPE_I32, NULL, NULL);
  sl_tensor w1 = sl_variable(g, "w1", &w1s, SL_DTYPE_F32,
                             sl_init_kaiming_uniform(1.41, 1), NULL, l->w1);
  sl_tensor b1 = sl_variable(g, "b1", &b1s, SL_DTYPE_F32, sl_init_zeros(), NULL,
                             strcmp(l->w1, "S(1)") == 0       ? "S(0)"
                             : strcmp(l->w1, "(B,S(1))") == 0 ? "(B,S(0))"
                                                              : NULL);
  sl_tensor w2 = sl_variable(g, "w2", &w2s, SL_DTYPE_F32,
                             sl_init_xavier_uniform(1, 2), NULL, l->w2);
  sl_tensor h = sl_relu(sl_add(sl_matmul(x, w1, false, false), b1));
  sl_tensor loss = sl_cross_entropy(sl_matmul(h, w2, false, false), y);
  sl_minimize(loss, &opt);
  sl_fetch(loss, "loss");
  sl_fetch(w1, "w1_out");
  sl_fetch(w2, "w2_out");
  st_check_graph(g);
  return g;
}

/* Compares n elements of dtype dt: exact when rtol is 0, else
 * |got - want| <= rtol * (|want| + max|want|) (a relative bound that does
 * not blow up at values near zero). Fails naming what and the element. */
static inline void st_compare(sl_dtype dt, const void *got, const void *want,
                              int64_t n, double rtol, const char *what) {
  double scale = 0;
  for (int64_t i = 0; i < n; i++)
    scale = fmax(scale, fabs(sl_load_element(dt, want, i)));
  for (int64_t i = 0; i < n; i++) {
    double g = sl_load_element(dt, got, i), w = sl_load_element(dt, want, i);
    bool ok = rtol == 0 ? (g == w || (isnan(g) && isnan(w)))
                        : fabs(g - w) <= rtol * (fabs(w) + scale);
    if (!ok)
      fail_msg("%s: element %lld: session %.9g, reference %.9g (rtol %g)", what,
               (long long)i, g, w, rtol);
  }
}

/* Runs `steps` steps of g in a session and in the interpreter, feeding the
 * same random inputs before every step (new ones each step), and compares
 * every fetch after every step. The session config may be NULL. Returns
 * the session's stats after finishing. */
static inline sl_session_stats st_run_vs_interp(sl_graph *g, int steps,
                                                double rtol, uint64_t seed,
                                                int int_hi,
                                                const sl_session_config *cfg) {
  st_check_graph(g);
  sl_session *s = NULL;
  if (sl_session_create(g, cfg, &s) != SL_OK)
    fail_msg("session: %s", sl_last_error());
  sl__interp *it = NULL;
  if (sl__interp_create(g, &it) != SL_OK)
    fail_msg("interp: %s", sl_last_error());
  int compared = 0;
  for (int step = 0; step < steps; step++) {
    st_feeds f;
    st_feeds_make(g, seed + (uint64_t)step * 7919u, int_hi, &f);
    for (int k = 0; k < f.n; k++) {
      if (sl_session_feed(s, f.name[k], f.data[k], f.bytes[k]) != SL_OK)
        fail_msg("feed %s: %s", f.name[k], sl_last_error());
      if (sl__interp_feed(it, f.name[k], f.data[k], f.bytes[k]) != SL_OK)
        fail_msg("interp feed %s: %s", f.name[k], sl_last_error());
    }
    st_feeds_free(&f);
    if (sl_session_run(s, 1) != SL_OK) fail_msg("run: %s", sl_last_error());
    if (sl__interp_step(it) != SL_OK) fail_msg("interp: %s", sl_last_error());
    for (int32_t i = 0; i < sl__graph_node_count(g); i++) {
      const sl__node *n = sl__graph_node(g, i);
      if (n->kind != SL__NODE_FETCH) continue;
      const void *want = NULL;
      sl__meta meta;
      if (sl__interp_fetch(it, n->name, &want, &meta) != SL_OK)
        fail_msg("interp fetch: %s", sl_last_error());
      size_t bytes =
          (size_t)sl_shape_numel(&meta.shape) * sl_dtype_size(meta.dtype);
      void *got = malloc(bytes + 8);
      if (sl_session_fetch(s, n->name, got, bytes) != SL_OK)
        fail_msg("fetch %s: %s", n->name, sl_last_error());
      char what[300];
      snprintf(what, sizeof what, "fetch '%s' after step %d", n->name, step);
      st_compare(meta.dtype, got, want, sl_shape_numel(&meta.shape),
                 sl_dtype_is_float(meta.dtype) ? rtol : 0, what);
      free(got);
      compared++;
    }
  }
  if (getenv("SLUICE_TEST_VERBOSE"))
    printf("  %d fetches compared over %d steps\n", compared, steps);
  if (sl_session_finish(s) != SL_OK) fail_msg("finish: %s", sl_last_error());
  sl_session_stats stats;
  assert_int_equal(sl_session_get_stats(s, &stats), SL_OK);
  assert_int_equal(stats.steps, steps);
  /* A finished job leaves nothing behind; quotas held throughout. */
  assert_int_equal(stats.in_flight, 0);
  assert_int_equal(stats.messages_left, 0);
  assert_int_equal(stats.over_quota, 0);
  sl_session_destroy(s);
  sl__interp_destroy(it);
  return stats;
}

#endif
