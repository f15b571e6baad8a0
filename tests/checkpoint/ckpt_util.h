/* Helpers of the checkpoint tests: scratch directories, and saving a set of
 * tensors as a sharded checkpoint through the internal writer, with values
 * that encode (tensor, step, global element index). */
#ifndef SLUICE_TEST_CKPT_UTIL_H
#define SLUICE_TEST_CKPT_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_int.h"

/* One stored piece of a test tensor: its box and the node writing it. */
typedef struct tpiece {
  int node;
  sl_slice box;
} tpiece;

typedef struct ttensor {
  const char *name;
  sl_dtype dtype;
  sl_shape shape;
  const char *placement, *sbp;
  int n;
  tpiece pieces[32];
} ttensor;

/* The value element `flat` of tensor number `t` holds after step `step`:
 * exact in every dtype used (small integers in 8-bit types). */
static inline double tval(int t, int64_t step, int64_t flat, sl_dtype dt) {
  switch (dt) {
  case SL_DTYPE_BOOL: return (double)((flat + t + step) % 2);
  case SL_DTYPE_I8: return (double)((flat * 7 + t + step) % 200 - 100);
  case SL_DTYPE_U8: return (double)((flat * 3 + t + step) % 251);
  case SL_DTYPE_F16:
  case SL_DTYPE_BF16: return (double)((flat + t + step) % 256) - 128;
  case SL_DTYPE_F32: return (double)((step % 1000) * 4096 + flat % 4096) + t;
  default: return (double)(step * (1 << 20) + flat) * 4 + t;
  }
}

static inline int64_t flat_of(const sl_shape *s, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < s->ndim; d++)
    f = f * s->dims[d] + idx[d];
  return f;
}

/* Fills buf (row-major in box) with the expected values of tensor t. */
static inline void fill_box(int t, int64_t step, const ttensor *tt,
                            const sl_slice *box, void *buf) {
  int64_t n = sl_slice_numel(box);
  int64_t idx[SL_MAX_DIMS];
  for (int64_t k = 0; k < n; k++) {
    int64_t r = k;
    for (int d = box->ndim - 1; d >= 0; d--) {
      idx[d] = box->start[d] + (box->extent[d] ? r % box->extent[d] : 0);
      if (box->extent[d]) r /= box->extent[d];
    }
    sl_store_element(tt->dtype, buf, k,
                     tval(t, step, flat_of(&tt->shape, idx), tt->dtype));
  }
}

/* Writes the n tensors as node files plus the index; returns the status of
 * the first failing call. */
static inline sl_status save_tensors(const char *dir, int64_t step, int nodes,
                                     int n, const ttensor *ts, int n_kv,
                                     const sl__ckpt_kv *kv) {
  sl__ckpt_file_done done[8];
  memset(done, 0, sizeof done);
  sl_status st = SL_OK;
  int made = 0;
  for (int node = 0; node < nodes && st == SL_OK; node++) {
    sl__ckpt_piece ps[256];
    const ttensor *owner[256];
    int np = 0;
    for (int t = 0; t < n; t++)
      for (int k = 0; k < ts[t].n; k++)
        if (ts[t].pieces[k].node == node) {
          ps[np] = (sl__ckpt_piece){ts[t].name,  ts[t].dtype,
                                    ts[t].shape, ts[t].placement,
                                    ts[t].sbp,   ts[t].pieces[k].box};
          owner[np++] = &ts[t];
        }
    char name[128];
    sl__ckpt_file_name(step, (uint32_t)node, name, sizeof name);
    sl__ckpt_file *f;
    /* Odd nodes write with direct I/O: readers see both kinds of file. */
    st = sl__ckpt_file_create(dir, name, step, np, ps, node % 2 == 1, &f);
    for (int k = 0; k < np && st == SL_OK; k++) {
      size_t bytes =
          (size_t)sl_slice_numel(&ps[k].box) * sl_dtype_size(ps[k].dtype);
      void *buf = malloc(bytes ? bytes : 1);
      fill_box((int)(owner[k] - ts), step, owner[k], &ps[k].box, buf);
      st = sl__ckpt_file_write(f, buf, bytes);
      free(buf);
    }
    if (st == SL_OK)
      st = sl__ckpt_file_close(f, (uint32_t)node, &done[made++]);
    else if (f)
      sl__ckpt_file_abort(f);
  }
  if (st == SL_OK) st = sl__ckpt_commit(dir, step, made, done, n_kv, kv);
  for (int k = 0; k < made; k++)
    sl__ckpt_file_done_free(&done[k]);
  return st;
}

static inline sl_slice box_of(int ndim, const int64_t *start,
                              const int64_t *extent) {
  sl_slice b = {.ndim = ndim};
  for (int d = 0; d < ndim; d++) {
    b.start[d] = start[d];
    b.extent[d] = extent[d];
  }
  return b;
}

/* Splits dimension `dim` of the tensor into `parts` balanced pieces, the
 * k-th written by node k % nodes. */
static inline void split_rows(ttensor *t, int dim, int parts, int nodes) {
  t->n = parts;
  for (int k = 0; k < parts; k++) {
    sl_slice b = {.ndim = t->shape.ndim};
    for (int d = 0; d < t->shape.ndim; d++)
      b.extent[d] = t->shape.dims[d];
    sl_split_range(t->shape.dims[dim], parts, k, &b.start[dim], &b.extent[dim]);
    t->pieces[k] = (tpiece){k % nodes, b};
  }
}

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static inline void rm_rf(const char *path) {
  nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh scratch directory (its path in buf). */
static inline void scratch_dir(char *buf, size_t size) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, size, "%s/sluice-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    abort();
  }
}

static inline uint64_t test_seed(void) {
  const char *s = getenv("SLUICE_TEST_SEED");
  uint64_t seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
  printf("seed %llu (set SLUICE_TEST_SEED to repeat)\n",
         (unsigned long long)seed);
  return seed;
}

#endif
