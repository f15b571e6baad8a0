/* Placements: parsing, printing and rank <-> (node, device, mesh coord). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "placement_int.h"

static bool valid_type(sl_device_type t) {
  return t == SL_DEVICE_CPU || t == SL_DEVICE_CUDA;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Ids must be in range and distinct; duplicates are found on a sorted copy
 * so that long lists stay O(n log n). */
static sl_status check_ids(const char *what, int n, const int *ids, int max) {
  if (n <= 0) return sl__fail(SL_EINVAL, "placement: empty %s list", what);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] > max)
      return sl__fail(SL_EINVAL, "placement: %s id %d out of range [0, %d]",
                      what, ids[i], max);
  int *sorted = sl__reallocarray(NULL, (size_t)n, sizeof(int));
  if (!sorted) return SL_ENOMEM;
  memcpy(sorted, ids, (size_t)n * sizeof(int));
  qsort(sorted, (size_t)n, sizeof(int), cmp_int);
  sl_status st = SL_OK;
  for (int i = 1; i < n && st == SL_OK; i++)
    if (sorted[i] == sorted[i - 1])
      st = sl__fail(SL_EINVAL, "placement: duplicate %s id %d", what, sorted[i]);
  sl__free(sorted);
  return st;
}

sl_status sl_placement_create(sl_device_type type, int nnodes, const int *nodes,
                              int ndevices, const int *devices, int mesh_ndim,
                              const int *mesh, sl_placement **out) {
  *out = NULL;
  if (!valid_type(type))
    return sl__fail(SL_EINVAL, "placement: unknown device type %d", (int)type);
  SL_CHECK(check_ids("node", nnodes, nodes, SL_MAX_NODE_ID));
  SL_CHECK(check_ids("device", ndevices, devices, SL_MAX_DEVICE_ID));
  if ((int64_t)nnodes * ndevices > SL_MAX_PLACEMENT_RANKS)
    return sl__fail(SL_EINVAL, "placement: %d nodes x %d devices exceeds %d ranks",
                    nnodes, ndevices, SL_MAX_PLACEMENT_RANKS);
  int size = nnodes * ndevices;
  int one_d[1] = {size};
  if (!mesh || mesh_ndim == 0) {
    mesh = one_d;
    mesh_ndim = 1;
  }
  if (mesh_ndim < 1 || mesh_ndim > SL_MAX_MESH_AXES)
    return sl__fail(SL_EINVAL, "placement: mesh has %d axes; at most %d",
                    mesh_ndim, SL_MAX_MESH_AXES);
  int64_t product = 1;
  for (int i = 0; i < mesh_ndim; i++) {
    if (mesh[i] <= 0)
      return sl__fail(SL_EINVAL, "placement: mesh extent %d must be positive",
                      mesh[i]);
    product *= mesh[i];
    if (product > SL_MAX_PLACEMENT_RANKS) break;
  }
  if (product != size)
    return sl__fail(SL_EINVAL,
                    "placement: mesh has %lld ranks but the placement has %d "
                    "devices",
                    (long long)product, size);

  sl_placement *p;
  if (SL_NEW(p) != SL_OK) return SL_ENOMEM;
  p->nodes = sl__reallocarray(NULL, (size_t)nnodes, sizeof(int));
  p->devices = sl__reallocarray(NULL, (size_t)ndevices, sizeof(int));
  if (!p->nodes || !p->devices) {
    sl_placement_destroy(p);
    return SL_ENOMEM;
  }
  memcpy(p->nodes, nodes, (size_t)nnodes * sizeof(int));
  memcpy(p->devices, devices, (size_t)ndevices * sizeof(int));
  p->type = type;
  p->nnodes = nnodes;
  p->ndevices = ndevices;
  p->size = size;
  p->mesh_ndim = mesh_ndim;
  memcpy(p->mesh, mesh, (size_t)mesh_ndim * sizeof(int));
  *out = p;
  return SL_OK;
}

sl_status sl_placement_copy(const sl_placement *p, sl_placement **out) {
  return sl_placement_create(p->type, p->nnodes, p->nodes, p->ndevices,
                             p->devices, p->mesh_ndim, p->mesh, out);
}

void sl_placement_destroy(sl_placement *p) {
  if (!p) return;
  sl__free(p->nodes);
  sl__free(p->devices);
  sl__free(p);
}

/* ---- parsing ------------------------------------------------------------ */

typedef struct parser {
  const char *text; /* the whole spec, for messages */
  const char *s;    /* cursor */
} parser;

static void skip_space(parser *ps) {
  while (*ps->s == ' ' || *ps->s == '\t') ps->s++;
}

/* The token at the cursor, for messages: up to the next separator. */
static int token_len(const char *s) {
  int n = 0;
  while (s[n] && !strchr(",/[]:", s[n]) && n < 32) n++;
  return n ? n : (s[0] ? 1 : 0);
}

static sl_status parse_fail(parser *ps, const char *why) {
  int n = token_len(ps->s);
  if (n == 0)
    return sl__fail(SL_EINVAL, "placement '%s': %s at end of text", ps->text,
                    why);
  return sl__fail(SL_EINVAL, "placement '%s': %s at '%.*s'", ps->text, why, n,
                  ps->s);
}

static sl_status parse_int(parser *ps, int max, int *out) {
  skip_space(ps);
  if (!isdigit((unsigned char)*ps->s)) return parse_fail(ps, "expected a number");
  const char *start = ps->s;
  long v = 0;
  while (isdigit((unsigned char)*ps->s)) {
    v = v * 10 + (*ps->s - '0');
    ps->s++;
    if (v > max) {
      ps->s = start;
      return sl__fail(SL_EINVAL, "placement '%s': number '%.*s' exceeds %d",
                      ps->text, token_len(start), start, max);
    }
  }
  *out = (int)v;
  skip_space(ps);
  return SL_OK;
}

/* A comma list of ids and ranges a-b, appended to *ids. Stops at '/', '['
 * or the end. */
static sl_status parse_id_list(parser *ps, int max, int **ids, int *n) {
  int cap = 0;
  *ids = NULL;
  *n = 0;
  for (;;) {
    const char *item = ps->s;
    int lo, hi;
    SL_CHECK(parse_int(ps, max, &lo));
    hi = lo;
    if (*ps->s == '-') {
      ps->s++;
      SL_CHECK(parse_int(ps, max, &hi));
      if (hi < lo)
        return sl__fail(SL_EINVAL,
                        "placement '%s': range end before start in '%.*s'",
                        ps->text, (int)(ps->s - item), item);
    }
    if ((int64_t)*n + (hi - lo + 1) > SL_MAX_PLACEMENT_RANKS)
      return sl__fail(SL_EINVAL, "placement '%s': more than %d ids in one list",
                      ps->text, SL_MAX_PLACEMENT_RANKS);
    for (int v = lo; v <= hi; v++) {
      if (*n == cap) {
        cap = cap ? cap * 2 : 8;
        int *grown = sl__reallocarray(*ids, (size_t)cap, sizeof(int));
        if (!grown) return SL_ENOMEM;
        *ids = grown;
      }
      (*ids)[(*n)++] = v;
    }
    if (*ps->s != ',') return SL_OK;
    ps->s++;
  }
}

static sl_status parse_mesh(parser *ps, int *ndim, int *mesh) {
  ps->s++; /* '[' */
  *ndim = 0;
  for (;;) {
    if (*ndim == SL_MAX_MESH_AXES)
      return parse_fail(ps, "mesh has more than 4 axes");
    SL_CHECK(parse_int(ps, SL_MAX_PLACEMENT_RANKS, &mesh[*ndim]));
    if (mesh[*ndim] == 0) return sl__fail(SL_EINVAL,
        "placement '%s': mesh extent 0", ps->text);
    (*ndim)++;
    if (*ps->s == ']') {
      ps->s++;
      return SL_OK;
    }
    if (*ps->s != ',') return parse_fail(ps, "expected ',' or ']' in mesh");
    ps->s++;
  }
}

sl_status sl_placement_parse(const char *text, sl_placement **out) {
  *out = NULL;
  if (!text) return sl__fail(SL_EINVAL, "placement: NULL text");
  parser ps = {text, text};
  skip_space(&ps);
  sl_device_type type;
  const char *colon = strchr(text, ':');
  size_t tlen = colon ? (size_t)(colon - ps.s) : 0;
  while (tlen && ps.s[tlen - 1] == ' ') tlen--;
  if (!colon)
    return sl__fail(SL_EINVAL,
                    "placement '%s': expected TYPE:DEVICES, e.g. 'cpu:0-3'",
                    text);
  if (tlen == 3 && strncmp(ps.s, "cpu", 3) == 0) {
    type = SL_DEVICE_CPU;
  } else if (tlen == 4 && strncmp(ps.s, "cuda", 4) == 0) {
    type = SL_DEVICE_CUDA;
  } else {
    return sl__fail(SL_EINVAL,
                    "placement '%s': unknown device type '%.*s' (cpu or cuda)",
                    text, (int)tlen, ps.s);
  }
  ps.s = colon + 1;

  int *first = NULL, *second = NULL, nfirst = 0, nsecond = 0;
  int mesh[SL_MAX_MESH_AXES], mesh_ndim = 0;
  sl_status st;
  int zero = 0;
  /* The first list is the nodes when a '/' follows, else the devices. */
  SL_CHECK_GOTO(parse_id_list(&ps, SL_MAX_DEVICE_ID, &first, &nfirst), st,
                done);
  if (*ps.s == '/') {
    ps.s++;
    SL_CHECK_GOTO(parse_id_list(&ps, SL_MAX_DEVICE_ID, &second, &nsecond), st,
                  done);
  }
  if (*ps.s == '[') SL_CHECK_GOTO(parse_mesh(&ps, &mesh_ndim, mesh), st, done);
  skip_space(&ps);
  if (*ps.s) {
    st = parse_fail(&ps, "unexpected text");
    goto done;
  }
  if (second) {
    st = sl_placement_create(type, nfirst, first, nsecond, second, mesh_ndim,
                             mesh, out);
  } else {
    st = sl_placement_create(type, 1, &zero, nfirst, first, mesh_ndim, mesh,
                             out);
  }
  if (st != SL_OK && st != SL_ENOMEM) {
    /* Re-anchor create's message on the text the user wrote. */
    char why[512];
    snprintf(why, sizeof why, "%s", sl_last_error());
    const char *tail = strncmp(why, "placement: ", 11) == 0 ? why + 11 : why;
    st = sl__fail(st, "placement '%s': %s", text, tail);
  }
done:
  sl__free(first);
  sl__free(second);
  return st;
}

/* ---- printing ----------------------------------------------------------- */

typedef struct out_buf {
  char *buf;
  size_t size;
  int len;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) SL__PRINTF(2, 3);
static void put(out_buf *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = (size_t)o->len < o->size ? o->size - (size_t)o->len : 0;
  int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->len += n;
}

static void put_ids(out_buf *o, int n, const int *ids) {
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && ids[j + 1] == ids[j] + 1) j++;
    put(o, i ? ",%d" : "%d", ids[i]);
    if (j > i) put(o, "-%d", ids[j]);
    i = j + 1;
  }
}

int sl_placement_print(const sl_placement *p, char *buf, size_t size) {
  out_buf o = {buf, size, 0};
  if (size) buf[0] = '\0';
  put(&o, "%s:", sl_device_type_name(p->type));
  if (!(p->nnodes == 1 && p->nodes[0] == 0)) {
    put_ids(&o, p->nnodes, p->nodes);
    put(&o, "/");
  }
  put_ids(&o, p->ndevices, p->devices);
  if (p->mesh_ndim > 1) {
    for (int i = 0; i < p->mesh_ndim; i++)
      put(&o, i ? ",%d" : "[%d", p->mesh[i]);
    put(&o, "]");
  }
  return o.len;
}

/* ---- queries ------------------------------------------------------------ */

sl_device_type sl_placement_device_type(const sl_placement *p) { return p->type; }
int sl_placement_size(const sl_placement *p) { return p->size; }
int sl_placement_node_count(const sl_placement *p) { return p->nnodes; }
int sl_placement_mesh_ndim(const sl_placement *p) { return p->mesh_ndim; }

int sl_placement_mesh_dim(const sl_placement *p, int axis) {
  return axis >= 0 && axis < p->mesh_ndim ? p->mesh[axis] : 0;
}

sl_status sl_placement_rank_device(const sl_placement *p, int rank, int *node,
                                   int *device) {
  if (rank < 0 || rank >= p->size)
    return sl__fail(SL_EINVAL, "placement: rank %d out of range [0, %d)", rank,
                    p->size);
  *node = p->nodes[rank / p->ndevices];
  *device = p->devices[rank % p->ndevices];
  return SL_OK;
}

int sl_placement_rank_of(const sl_placement *p, int node, int device) {
  int ni = -1, di = -1;
  for (int i = 0; i < p->nnodes && ni < 0; i++)
    if (p->nodes[i] == node) ni = i;
  for (int i = 0; i < p->ndevices && di < 0; i++)
    if (p->devices[i] == device) di = i;
  return ni < 0 || di < 0 ? -1 : ni * p->ndevices + di;
}

void sl_placement_rank_coord(const sl_placement *p, int rank, int *coord) {
  for (int a = p->mesh_ndim - 1; a >= 0; a--) {
    coord[a] = rank % p->mesh[a];
    rank /= p->mesh[a];
  }
}

int sl_placement_coord_rank(const sl_placement *p, const int *coord) {
  int rank = 0;
  for (int a = 0; a < p->mesh_ndim; a++) rank = rank * p->mesh[a] + coord[a];
  return rank;
}

sl_status sl_placement_axis_group(const sl_placement *p, int axis, int rank,
                                  int *ranks) {
  if (axis < 0 || axis >= p->mesh_ndim)
    return sl__fail(SL_EINVAL, "placement: mesh axis %d out of range [0, %d)",
                    axis, p->mesh_ndim);
  if (rank < 0 || rank >= p->size)
    return sl__fail(SL_EINVAL, "placement: rank %d out of range [0, %d)", rank,
                    p->size);
  int coord[SL_MAX_MESH_AXES];
  sl_placement_rank_coord(p, rank, coord);
  for (int i = 0; i < p->mesh[axis]; i++) {
    coord[axis] = i;
    ranks[i] = sl_placement_coord_rank(p, coord);
  }
  return SL_OK;
}

bool sl_placement_equal(const sl_placement *a, const sl_placement *b) {
  if (a->type != b->type || a->size != b->size || a->nnodes != b->nnodes ||
      a->mesh_ndim != b->mesh_ndim)
    return false;
  return memcmp(a->nodes, b->nodes, (size_t)a->nnodes * sizeof(int)) == 0 &&
         memcmp(a->devices, b->devices, (size_t)a->ndevices * sizeof(int)) == 0 &&
         memcmp(a->mesh, b->mesh, (size_t)a->mesh_ndim * sizeof(int)) == 0;
}

bool sl_placement_same_devices(const sl_placement *a, const sl_placement *b) {
  if (a->type != b->type || a->size != b->size) return false;
  for (int r = 0; r < a->size; r++) {
    int node, device;
    sl_placement_rank_device(a, r, &node, &device);
    if (sl_placement_rank_of(b, node, device) < 0) return false;
  }
  return true;
}
