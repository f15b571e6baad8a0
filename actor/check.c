/* The static plan check: what can be known to fail before running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor_int.h"

static sl_status need(bool ok, const plan_actor *a, const char *what) {
  if (ok) return SL_OK;
  return sl__fail(SL_EINVAL, "actor '%s': %s", a->d.name, what);
}

/* An actor that runs has every slot, and each descriptor it produces
 * every reader position once. */
static sl_status check_numbering(const sl_actor_graph *p, const plan_actor *a) {
  for (int32_t k = 0; k < a->n_in; k++)
    SL_CHECK(need(a->in[k] >= 0, a, "an input slot is missing"));
  for (int32_t k = 0; k < a->n_out; k++) {
    SL_CHECK(need(a->out[k] >= 0, a, "an output slot is missing"));
    const plan_regst *r = &p->regsts[a->out[k]];
    unsigned char *seen = sl__calloc((size_t)r->n_cons + 1, 1);
    if (!seen) return SL_ENOMEM;
    bool ok = true;
    for (int32_t c = 0; c < r->n_cons && ok; c++) {
      int32_t q = r->cons[c].position;
      ok = q >= 0 && q < r->n_cons && !seen[q];
      if (ok) seen[q] = 1;
    }
    sl__free(seen);
    SL_CHECK(need(ok, a, "its readers' positions are not 0 to n-1"));
  }
  return SL_OK;
}

sl_status sl__check_actor(const sl_actor_graph *p, int32_t i) {
  const plan_actor *a = &p->actors[i];
  const sl_actor_desc *d = &a->d;
  if (a->proxy) return SL_OK; /* its node checks it */
  SL_CHECK(check_numbering(p, a));
  switch (d->kind) {
  case SL_ACTOR_SOURCE:
    SL_CHECK(need(a->n_in == 0, a, "a source has no inputs"));
    SL_CHECK(need(a->n_out >= 1, a, "a source needs an output"));
    SL_CHECK(need(d->count >= 0, a, "a source needs a piece count >= 0"));
    return SL_OK;
  case SL_ACTOR_SINK:
    SL_CHECK(need(a->n_in >= 1, a, "a sink needs an input"));
    SL_CHECK(need(a->n_out == 0, a, "a sink has no outputs"));
    return SL_OK;
  case SL_ACTOR_KERNEL:
    return need(a->n_in >= 1, a,
                "a kernel needs an input (make it a source to produce pieces "
                "from nothing)");
  case SL_ACTOR_REPEAT:
  case SL_ACTOR_UNPACK:
  case SL_ACTOR_ACCUMULATE:
  case SL_ACTOR_PACK: break;
  default:
    return sl__fail(SL_EINVAL, "actor '%s': unknown kind %d", d->name,
                    (int)d->kind);
  }
  bool fan_in = d->kind == SL_ACTOR_ACCUMULATE || d->kind == SL_ACTOR_PACK;
  SL_CHECK(need(d->count >= 1 && d->count <= INT32_MAX, a,
                "a counting actor needs a count k in [1, 2^31)"));
  SL_CHECK(need(a->n_in == 1, a, "a counting actor has exactly one input"));
  SL_CHECK(need(fan_in ? a->n_out == 1 : a->n_out >= 1, a,
                fan_in ? "accumulate and pack have exactly one output"
                       : "repeat and unpack need an output"));
  size_t in_bytes = p->regsts[a->in[0]].d.bytes;
  if (d->kind == SL_ACTOR_ACCUMULATE)
    SL_CHECK(need(d->act != NULL, a, "accumulate needs a reduce callback"));
  if (d->kind == SL_ACTOR_PACK && !d->act) {
    size_t ob = p->regsts[a->out[0]].d.bytes;
    if ((uint64_t)in_bytes * (uint64_t)d->count > ob)
      return sl__fail(
          SL_EINVAL,
          "actor '%s': pack of %lld pieces of %zu bytes needs an "
          "output of at least %llu bytes, not %zu",
          d->name, (long long)d->count, in_bytes,
          (unsigned long long)in_bytes * (unsigned long long)d->count, ob);
  }
  if (d->kind == SL_ACTOR_UNPACK && !d->act) {
    for (int32_t o = 0; o < a->n_out; o++) {
      size_t ob = p->regsts[a->out[o]].d.bytes;
      if ((uint64_t)ob * (uint64_t)d->count > in_bytes)
        return sl__fail(SL_EINVAL,
                        "actor '%s': unpack into %lld pieces of %zu bytes "
                        "needs an input of at least %llu bytes, not %zu",
                        d->name, (long long)d->count, ob,
                        (unsigned long long)ob * (unsigned long long)d->count,
                        in_bytes);
    }
  }
  return SL_OK;
}

static int cmp_name(const void *x, const void *y) {
  const plan_actor *const *a = x, *const *b = y;
  return strcmp((*a)->d.name, (*b)->d.name);
}

static sl_status check_names(const sl_actor_graph *p) {
  if (p->n_actors < 2) return SL_OK;
  const plan_actor **v = sl__reallocarray(NULL, (size_t)p->n_actors, sizeof *v);
  if (!v) return SL_ENOMEM;
  for (int32_t i = 0; i < p->n_actors; i++)
    v[i] = &p->actors[i];
  qsort(v, (size_t)p->n_actors, sizeof *v, cmp_name);
  sl_status st = SL_OK;
  for (int32_t i = 1; i < p->n_actors && st == SL_OK; i++)
    if (strcmp(v[i - 1]->d.name, v[i]->d.name) == 0)
      st = sl__fail(SL_EINVAL, "actor graph: two actors are named '%s'", v[i]->d.name);
  sl__free(v);
  return st;
}

/* Every actor must be reachable from a source along data edges: otherwise it
 * gets neither pieces nor end-of-data, and would wait forever. */
static sl_status check_reachable(const sl_actor_graph *p) {
  int32_t n = p->n_actors;
  int32_t *queue = sl__reallocarray(NULL, (size_t)(n ? n : 1), sizeof *queue);
  unsigned char *seen = sl__calloc((size_t)(n ? n : 1), 1);
  sl_status st = SL_OK;
  if (!queue || !seen) {
    st = SL_ENOMEM;
    goto done;
  }
  int32_t qh = 0, qt = 0;
  /* Proxies: other nodes' actors, reachable there. */
  for (int32_t i = 0; i < n; i++)
    if (p->actors[i].d.kind == SL_ACTOR_SOURCE || p->actors[i].proxy) {
      seen[i] = 1;
      queue[qt++] = i;
    }
  while (qh < qt) {
    const plan_actor *a = &p->actors[queue[qh++]];
    for (int32_t o = 0; o < a->n_out; o++) {
      if (a->out[o] < 0) continue;
      const plan_regst *r = &p->regsts[a->out[o]];
      for (int32_t c = 0; c < r->n_cons; c++)
        if (!seen[r->cons[c].actor]) {
          seen[r->cons[c].actor] = 1;
          queue[qt++] = r->cons[c].actor;
        }
    }
  }
  for (int32_t i = 0; i < n; i++)
    if (!seen[i]) {
      st = sl__fail(SL_EINVAL,
                    "actor '%s': not reachable from any source, so it would "
                    "never get a piece or end-of-data",
                    p->actors[i].d.name);
      break;
    }
done:
  sl__free(queue);
  sl__free(seen);
  return st;
}

/* Loops. Seen as a marked graph, every (descriptor, reader) pair is two
 * places: "ready" from producer to reader holding the registers that start
 * ready (initial), and "free" from reader back to producer holding the
 * others (count - initial). A marked graph can always fire again iff every
 * directed circuit holds a token (Commoner et al., "Marked directed graphs",
 * 1971), i.e. iff the places without tokens form no cycle. So: keep the
 * token-less places as edges "u enables v" and look for a cycle. Counting
 * actors make the graph weighted; for them this is a necessary condition,
 * and the hang detector covers the rest at run time. */
typedef struct dep_edge {
  int32_t to;
  int32_t desc;
  bool ret; /* a "free" place: `to` (the producer) waits for a return */
} dep_edge;

static sl_status describe_cycle(const sl_actor_graph *p, const int32_t *path,
                                const dep_edge *const *via, int32_t len) {
  char msg[900];
  size_t n = 0;
  n += (size_t)snprintf(msg + n, sizeof msg - n,
                        "actor graph: a loop cannot make progress:");
  for (int32_t i = 0; i < len && n < sizeof msg - 1; i++) {
    const dep_edge *e = via[i];
    const plan_regst *r = &p->regsts[e->desc];
    const char *from = p->actors[path[i]].d.name;
    const char *to = p->actors[e->to].d.name;
    if (e->ret)
      n += (size_t)snprintf(msg + n, sizeof msg - n,
                            " '%s' waits for '%s' to return a register of "
                            "'%s' (all %d start ready);",
                            to, from, r->d.name, (int)r->d.count);
    else
      n += (size_t)snprintf(msg + n, sizeof msg - n,
                            " '%s' waits for a piece of '%s' from '%s' (none "
                            "starts ready);",
                            to, r->d.name, from);
  }
  return sl__fail(SL_EINVAL,
                  "%s a loop needs a descriptor with an initial register (a "
                  "variable) and one register more than it starts with",
                  msg);
}

static sl_status check_loops(const sl_actor_graph *p) {
  int32_t n = p->n_actors;
  if (n == 0) return SL_OK;
  /* Count edges, then fill a CSR adjacency. */
  int32_t *deg = sl__calloc((size_t)n + 1, sizeof *deg);
  dep_edge *edges = NULL;
  int32_t *state = NULL, *path = NULL, *pos = NULL;
  const dep_edge **via = NULL;
  sl_status st = SL_OK;
  if (!deg) return SL_ENOMEM;
  size_t m = 0;
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const plan_regst *g = &p->regsts[r];
    for (int32_t c = 0; c < g->n_cons; c++) {
      if (g->d.initial == 0) {
        deg[g->producer + 1]++;
        m++;
      }
      if (g->d.count == g->d.initial) {
        deg[g->cons[c].actor + 1]++;
        m++;
      }
    }
  }
  for (int32_t i = 0; i < n; i++)
    deg[i + 1] += deg[i];
  edges = sl__reallocarray(NULL, m ? m : 1, sizeof *edges);
  pos = sl__reallocarray(NULL, (size_t)n, sizeof *pos);
  state = sl__calloc((size_t)n, sizeof *state);
  path = sl__reallocarray(NULL, (size_t)n, sizeof *path);
  via = sl__reallocarray(NULL, (size_t)n, sizeof *via);
  if (!edges || !pos || !state || !path || !via) {
    st = SL_ENOMEM;
    goto done;
  }
  for (int32_t i = 0; i < n; i++)
    pos[i] = deg[i];
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const plan_regst *g = &p->regsts[r];
    for (int32_t c = 0; c < g->n_cons; c++) {
      int32_t cons = g->cons[c].actor;
      if (g->d.initial == 0)
        edges[pos[g->producer]++] = (dep_edge){cons, r, false};
      if (g->d.count == g->d.initial)
        edges[pos[cons]++] = (dep_edge){g->producer, r, true};
    }
  }
  /* Iterative DFS; state 0 new, 1 on the path, 2 done. pos[] is reused as
   * the next edge to follow. */
  for (int32_t i = 0; i < n; i++)
    pos[i] = deg[i];
  for (int32_t root = 0; root < n && st == SL_OK; root++) {
    if (state[root]) continue;
    int32_t len = 0;
    path[len++] = root;
    state[root] = 1;
    while (len > 0 && st == SL_OK) {
      int32_t u = path[len - 1];
      if (pos[u] == deg[u + 1]) {
        state[u] = 2;
        len--;
        continue;
      }
      const dep_edge *e = &edges[pos[u]++];
      if (state[e->to] == 0) {
        via[len - 1] = e;
        path[len++] = e->to;
        state[e->to] = 1;
      } else if (state[e->to] == 1) {
        via[len - 1] = e;
        int32_t start = len - 1;
        while (path[start] != e->to)
          start--;
        st = describe_cycle(p, path + start, via + start, len - start);
      }
    }
  }
done:
  sl__free(deg);
  sl__free(edges);
  sl__free(pos);
  sl__free(state);
  sl__free(path);
  sl__free(via);
  return st;
}

sl_status sl_actor_graph_check(const sl_actor_graph *p) {
  if (p->n_actors == 0) return sl__fail(SL_EINVAL, "actor graph: no actors");
  for (int32_t i = 0; i < p->n_actors; i++)
    SL_CHECK(sl__check_actor(p, i));
  for (int32_t r = 0; r < p->n_regsts; r++)
    if (p->regsts[r].d.count < 1)
      return sl__fail(SL_EINVAL, "register '%s': needs at least 1 register",
                      p->regsts[r].d.name);
  SL_CHECK(check_names(p));
  SL_CHECK(check_reachable(p));
  return check_loops(p);
}
