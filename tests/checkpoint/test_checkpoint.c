/* Checkpoints end to end: tensors of every dtype split over two node files,
 * committed, opened, and read back whole and by random sub-boxes spanning
 * several pieces; a second save replacing the first; commits that must be
 * refused; plain safetensors files; conversion to one file, read back by
 * this reader and by python (numpy, or the struct module without it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include <unistd.h>

#include "ckpt_util.h"
#include "crc32c.h"

static uint64_t seed;

static const char *meta_keys[] = {"model", "lr"};

static int model(ttensor *ts) {
  int n = 0;
  ttensor *t;
  t = &ts[n++];
  *t = (ttensor){.name = "a.w",
                 .dtype = SL_DTYPE_F32,
                 .placement = "cpu:0-3",
                 .sbp = "S(0)"};
  sl_shape_parse("6,10", &t->shape);
  split_rows(t, 0, 4, 2);
  t = &ts[n++];
  *t = (ttensor){.name = "b",
                 .dtype = SL_DTYPE_I32,
                 .placement = "cpu:0-3[2,2]",
                 .sbp = "(S(0),S(1))"};
  sl_shape_parse("5,7", &t->shape);
  t->n = 4;
  for (int k = 0; k < 4; k++) {
    sl_slice b = {.ndim = 2};
    sl_split_range(5, 2, k / 2, &b.start[0], &b.extent[0]);
    sl_split_range(7, 2, k % 2, &b.start[1], &b.extent[1]);
    t->pieces[k] = (tpiece){k / 2, b};
  }
  t = &ts[n++];
  *t = (ttensor){.name = "c3",
                 .dtype = SL_DTYPE_I64,
                 .placement = "cpu:0-2",
                 .sbp = "S(2)"};
  sl_shape_parse("3,4,5", &t->shape);
  split_rows(t, 2, 3, 2);
  t = &ts[n++];
  *t = (ttensor){
      .name = "bias", .dtype = SL_DTYPE_F16, .placement = "cpu:0", .sbp = "B"};
  sl_shape_parse("7", &t->shape);
  split_rows(t, 0, 1, 1);
  t->pieces[0].node = 1;
  t = &ts[n++];
  *t = (ttensor){
      .name = "s", .dtype = SL_DTYPE_F64, .placement = "cpu:0", .sbp = "B"};
  sl_shape_parse("", &t->shape);
  t->n = 1;
  t->pieces[0] = (tpiece){0, {.ndim = 0}};
  t = &ts[n++];
  *t = (ttensor){
      .name = "empty", .dtype = SL_DTYPE_F32, .placement = "cpu:0", .sbp = "B"};
  sl_shape_parse("0,3", &t->shape);
  split_rows(t, 0, 1, 1);
  t = &ts[n++];
  *t = (ttensor){
      .name = "u", .dtype = SL_DTYPE_U8, .placement = "cpu:0-2", .sbp = "S(1)"};
  sl_shape_parse("9,3", &t->shape);
  split_rows(t, 1, 3, 2);
  t = &ts[n++];
  *t = (ttensor){.name = "h",
                 .dtype = SL_DTYPE_BF16,
                 .placement = "cpu:0-1",
                 .sbp = "S(0)"};
  sl_shape_parse("4,4", &t->shape);
  split_rows(t, 0, 2, 2);
  t = &ts[n++];
  *t = (ttensor){
      .name = "m", .dtype = SL_DTYPE_BOOL, .placement = "cpu:0", .sbp = "B"};
  sl_shape_parse("5", &t->shape);
  split_rows(t, 0, 1, 1);
  t = &ts[n++];
  *t = (ttensor){
      .name = "q", .dtype = SL_DTYPE_I8, .placement = "cpu:1", .sbp = "B"};
  sl_shape_parse("2,3", &t->shape);
  split_rows(t, 0, 1, 1);
  t->pieces[0].node = 1;
  t = &ts[n++];
  *t = (ttensor){.name = "d",
                 .dtype = SL_DTYPE_F64,
                 .placement = "cpu:0-3",
                 .sbp = "S(1)"};
  sl_shape_parse("8,9", &t->shape);
  split_rows(t, 1, 4, 2);
  return n;
}

static void save_model(const char *dir, int64_t step) {
  ttensor ts[16];
  int n = model(ts);
  sl__ckpt_kv kv[] = {{meta_keys[0], "test"}, {meta_keys[1], "0.1"}};
  sl_status st = save_tensors(dir, step, 2, n, ts, 2, kv);
  if (st != SL_OK) fail_msg("save: %s", sl_last_error());
}

/* Reads box of tensor `name` and compares it with the values of step. */
static void check_box(const sl_checkpoint *c, const ttensor *ts, int t,
                      int64_t step, const sl_slice *box) {
  int32_t i = sl_checkpoint_find(c, ts[t].name);
  assert_true(i >= 0);
  size_t es = sl_dtype_size(ts[t].dtype);
  size_t bytes = (size_t)sl_slice_numel(box) * es;
  unsigned char *got = malloc(bytes + 1), *want = malloc(bytes + 1);
  memset(got, 0xa5, bytes + 1);
  fill_box(t, step, &ts[t], box, want);
  if (sl_checkpoint_read(c, i, box, got, bytes) != SL_OK)
    fail_msg("read '%s': %s", ts[t].name, sl_last_error());
  if (memcmp(got, want, bytes) != 0)
    fail_msg("tensor '%s': the box read back differs", ts[t].name);
  assert_int_equal(got[bytes], 0xa5);
  free(got);
  free(want);
}

static void check_model(const char *path, int64_t step, bool sharded) {
  ttensor ts[16];
  int n = model(ts);
  sl_checkpoint *c = NULL;
  if (sl_checkpoint_open(path, &c) != SL_OK)
    fail_msg("open '%s': %s", path, sl_last_error());
  assert_int_equal(sl_checkpoint_step(c), step);
  assert_int_equal(sl_checkpoint_is_sharded(c), sharded);
  assert_string_equal(sl_checkpoint_metadata(c, "model"), "test");
  assert_string_equal(sl_checkpoint_metadata(c, "lr"), "0.1");
  assert_null(sl_checkpoint_metadata(c, "nope"));
  assert_int_equal(sl_checkpoint_tensor_count(c), n);
  sl_checkpoint_tensor prev = {0};
  for (int32_t i = 0; i < n; i++) {
    sl_checkpoint_tensor t;
    assert_int_equal(sl_checkpoint_get_tensor(c, i, &t), SL_OK);
    if (i) assert_true(strcmp(prev.name, t.name) < 0);
    prev = t;
    assert_int_equal(sl_checkpoint_find(c, t.name), i);
  }
  assert_int_equal(sl_checkpoint_find(c, "zz"), -1);
  sl_rng rng = {seed};
  for (int t = 0; t < n; t++) {
    sl_checkpoint_tensor info;
    int32_t i = sl_checkpoint_find(c, ts[t].name);
    assert_int_equal(sl_checkpoint_get_tensor(c, i, &info), SL_OK);
    assert_true(info.dtype_known);
    assert_int_equal(info.dtype, ts[t].dtype);
    assert_string_equal(info.dtype_name, sl__st_dtype_name(ts[t].dtype));
    assert_true(sl_shape_equal(&info.shape, &ts[t].shape));
    assert_string_equal(info.placement, sharded ? ts[t].placement : "");
    assert_string_equal(info.sbp, sharded ? ts[t].sbp : "");
    assert_int_equal(info.pieces, sharded ? ts[t].n : 1);
    assert_int_equal(info.bytes, sl_shape_numel(&ts[t].shape) *
                                     (int64_t)sl_dtype_size(ts[t].dtype));
    sl_slice whole = {.ndim = ts[t].shape.ndim};
    memcpy(whole.extent, ts[t].shape.dims, sizeof whole.extent);
    check_box(c, ts, t, step, &whole);
    /* NULL: the whole tensor. */
    size_t bytes = (size_t)info.bytes;
    void *buf = malloc(bytes + 1), *want = malloc(bytes + 1);
    fill_box(t, step, &ts[t], &whole, want);
    assert_int_equal(sl_checkpoint_read(c, i, NULL, buf, bytes), SL_OK);
    assert_memory_equal(buf, want, bytes);
    free(buf);
    free(want);
    for (int r = 0; r < 200; r++) {
      sl_slice b = {.ndim = ts[t].shape.ndim};
      for (int d = 0; d < b.ndim; d++) {
        int64_t len = ts[t].shape.dims[d];
        b.start[d] = len ? (int64_t)sl__rng_below(&rng, (uint64_t)len) : 0;
        b.extent[d] =
            (int64_t)sl__rng_below(&rng, (uint64_t)(len - b.start[d] + 1));
      }
      check_box(c, ts, t, step, &b);
    }
  }
  /* Wrong boxes and sizes. */
  int32_t i = sl_checkpoint_find(c, "a.w");
  sl_slice out = {.ndim = 2, .start = {5, 0}, .extent = {2, 10}};
  float buf[64];
  assert_int_equal(sl_checkpoint_read(c, i, &out, buf, 80), SL_EINVAL);
  sl_slice rank1 = {.ndim = 1, .extent = {3}};
  assert_int_equal(sl_checkpoint_read(c, i, &rank1, buf, 12), SL_EINVAL);
  sl_slice ok = {.ndim = 2, .start = {1, 1}, .extent = {2, 2}};
  assert_int_equal(sl_checkpoint_read(c, i, &ok, buf, 12), SL_EINVAL);
  assert_int_equal(sl_checkpoint_read(c, i, &ok, buf, 16), SL_OK);
  assert_int_equal(sl_checkpoint_read(c, 99, &ok, buf, 16), SL_EINVAL);
  sl_checkpoint_tensor t;
  assert_int_equal(sl_checkpoint_get_tensor(c, 99, &t), SL_ENOTFOUND);
  assert_null(t.name);
  sl_checkpoint_close(c);
}

static int count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

static void test_round_trip(void **state) {
  (void)state;
  char dir[256];
  scratch_dir(dir, sizeof dir);
  char sub[300];
  snprintf(sub, sizeof sub, "%s/ck", dir); /* created by the writer */
  save_model(sub, 5);
  check_model(sub, 5, true);
  assert_int_equal(count_files(sub, "step-000005.node"), 2);
  /* A later save replaces the files of the earlier one. */
  save_model(sub, 6);
  check_model(sub, 6, true);
  assert_int_equal(count_files(sub, "step-000005"), 0);
  assert_int_equal(count_files(sub, "step-000006.node"), 2);
  assert_int_equal(count_files(sub, "index.json"), 1);
  char p[400];
  snprintf(p, sizeof p, "%s/index.json", sub);
  FILE *f = fopen(p, "r");
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  assert_non_null(strstr(text, "\"format\": \"sluice-checkpoint\""));
  assert_non_null(strstr(text, "\"key\": \"a.w#1\""));
  assert_non_null(strstr(text, "\"sbp\": \"(S(0),S(1))\""));
  rm_rf(dir);
}

static unsigned char *read_whole(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n + 1);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

/* Writes one file of whole tensors through the direct and the buffered
 * path; returns its path (in dir) and what the writer reported. */
static void write_file(const char *dir, const char *name, bool direct, int n,
                       const sl__ckpt_piece *ps, void *const *data,
                       sl__ckpt_file_done *done) {
  sl__ckpt_file *f;
  assert_int_equal(sl__ckpt_file_create(dir, name, 3, n, ps, direct, &f),
                   SL_OK);
  for (int k = 0; k < n; k++)
    assert_int_equal(sl__ckpt_file_write(f, data[k],
                                         (size_t)sl_slice_numel(&ps[k].box) *
                                             sl_dtype_size(ps[k].dtype)),
                     SL_OK);
  assert_int_equal(sl__ckpt_file_close(f, 0, done), SL_OK);
}

/* A direct write (a background save's) gives the same bytes as a buffered
 * one, whatever the pieces' sizes and memory alignment: whole blocks from
 * aligned memory at an aligned offset, pieces larger than the write
 * buffer, odd sizes that leave later pieces misaligned, unaligned memory.
 * The data section starts at a 4096-byte boundary. */
static void test_direct_write(void **state) {
  (void)state;
  char dir[256];
  scratch_dir(dir, sizeof dir);
  const sl_shape shapes[] = {
      {2, {1024, 1024}}, {2, {3, 5}}, {2, {300, 7}}, {2, {512, 600}}, {1, {1}}};
  const char *names[] = {"big", "odd", "mid", "late", "last"};
  const size_t shift[] = {0, 0, 4, 0, 0}; /* bytes off a 4096 boundary */
  enum { N = 5 };
  sl__ckpt_piece ps[N];
  void *mem[N], *data[N];
  sl_rng rng = {seed};
  for (int k = 0; k < N; k++) {
    size_t bytes = (size_t)sl_shape_numel(&shapes[k]) * 4;
    mem[k] = sl__malloc_aligned(bytes + shift[k], SL__CKPT_DATA_ALIGN);
    assert_non_null(mem[k]);
    data[k] = (char *)mem[k] + shift[k];
    for (size_t i = 0; i < bytes / 4; i++)
      ((float *)data[k])[i] = (float)sl__rng_below(&rng, 1000) - 500;
    int64_t zero[SL_MAX_DIMS] = {0};
    ps[k] = (sl__ckpt_piece){
        names[k], SL_DTYPE_F32, shapes[k],
        "cpu:0",  "B",          box_of(shapes[k].ndim, zero, shapes[k].dims)};
  }
  sl__ckpt_file_done dd, bd;
  write_file(dir, "direct.safetensors", true, N, ps, data, &dd);
  write_file(dir, "buffered.safetensors", false, N, ps, data, &bd);
  char pd[400], pb[400];
  snprintf(pd, sizeof pd, "%s/direct.safetensors", dir);
  snprintf(pb, sizeof pb, "%s/buffered.safetensors", dir);
  size_t nd, nb;
  unsigned char *fd = read_whole(pd, &nd), *fb = read_whole(pb, &nb);
  assert_int_equal(nd, nb);
  assert_memory_equal(fd, fb, nd);
  assert_int_equal(dd.bytes, (int64_t)nd);
  assert_int_equal(dd.crc32c, bd.crc32c);
  assert_int_equal(dd.crc32c, sl__crc32c(0, fd, nd));
  uint64_t hn = 0;
  for (int k = 0; k < 8; k++)
    hn |= (uint64_t)fd[k] << (8 * k);
  assert_int_equal((8 + hn) % SL__CKPT_DATA_ALIGN, 0);
  /* And the reader gives every tensor back. */
  sl_checkpoint *c;
  assert_int_equal(sl_checkpoint_open(pd, &c), SL_OK);
  for (int k = 0; k < N; k++) {
    size_t bytes = (size_t)sl_shape_numel(&shapes[k]) * 4;
    void *back = malloc(bytes);
    int32_t i = sl_checkpoint_find(c, names[k]);
    assert_true(i >= 0);
    assert_int_equal(sl_checkpoint_read(c, i, NULL, back, bytes), SL_OK);
    assert_memory_equal(back, data[k], bytes);
    free(back);
    sl__free(mem[k]);
  }
  sl_checkpoint_close(c);
  sl__ckpt_file_done_free(&dd);
  sl__ckpt_file_done_free(&bd);
  free(fd);
  free(fb);
  rm_rf(dir);
}

/* Saves that must be refused, each leaving the committed checkpoint. */
static void test_refused(void **state) {
  (void)state;
  char dir[256];
  scratch_dir(dir, sizeof dir);
  save_model(dir, 1);
  ttensor t[2];
  t[0] = (ttensor){.name = "x",
                   .dtype = SL_DTYPE_F32,
                   .placement = "cpu:0-1",
                   .sbp = "S(0)"};
  sl_shape_parse("4,2", &t[0].shape);
  split_rows(&t[0], 0, 2, 2);
  /* Pieces that disagree on the sbp: two files, one tensor. */
  t[1] = t[0];
  t[1].sbp = "S(1)";
  t[1].n = 1;
  t[1].pieces[0] = t[0].pieces[1];
  t[0].n = 1;
  sl_status st = save_tensors(dir, 2, 2, 2, t, 0, NULL);
  assert_int_equal(st, SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "'x'"));
  assert_non_null(strstr(sl_last_error(), "disagree"));
  /* A piece missing: the tensor is not covered. */
  t[0].n = 1;
  st = save_tensors(dir, 3, 2, 1, t, 0, NULL);
  assert_int_equal(st, SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "pieces hold 4 of the 8 elements"));
  /* Overlapping pieces. */
  split_rows(&t[0], 0, 2, 2);
  t[0].pieces[1].box.start[0] = 1;
  t[0].pieces[1].box.extent[0] = 3;
  st = save_tensors(dir, 4, 2, 1, t, 0, NULL);
  assert_int_equal(st, SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "overlap"));
  check_model(dir, 1, true);

  /* The writer's own checks. */
  split_rows(&t[0], 0, 2, 1);
  sl__ckpt_piece ps[3];
  for (int k = 0; k < 2; k++)
    ps[k] = (sl__ckpt_piece){"x",       SL_DTYPE_F32, t[0].shape,
                             "cpu:0-1", "S(0)",       t[0].pieces[k].box};
  sl__ckpt_file *f;
  assert_int_equal(
      sl__ckpt_file_create(dir, "w.safetensors", 9, 2, ps, false, &f), SL_OK);
  float v[4] = {1, 2, 3, 4};
  assert_int_equal(sl__ckpt_file_write(f, v, 12), SL_EINVAL);
  assert_int_equal(sl__ckpt_file_write(f, v, 16), SL_OK);
  sl__ckpt_file_done done;
  assert_int_equal(sl__ckpt_file_close(f, 0, &done), SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "after 1 of its 2 pieces"));
  assert_int_equal(count_files(dir, "w.safetensors"), 0);
  /* "x#0" as a name and as the key of x's first piece. */
  ps[2] = ps[0];
  ps[2].tensor = "x#0";
  ps[2].box.extent[0] = 4;
  assert_int_equal(
      sl__ckpt_file_create(dir, "w.safetensors", 9, 3, ps, false, &f),
      SL_EINVAL);
  assert_non_null(strstr(sl_last_error(), "'x#0'"));
  assert_null(f);
  ps[0].box.extent[0] = 5;
  assert_int_equal(
      sl__ckpt_file_create(dir, "w.safetensors", 9, 1, ps, false, &f),
      SL_EINVAL);
  assert_int_equal(count_files(dir, "w.safetensors"), 0);
  char name[64];
  sl__ckpt_file_name(12, 3, name, sizeof name);
  assert_string_equal(name, "step-000012.node3.safetensors");
  sl__ckpt_file_name(12345678, 0, name, sizeof name);
  assert_string_equal(name, "step-12345678.node0.safetensors");
  rm_rf(dir);
}

/* A safetensors file as another framework writes it, built by hand. */
static void write_plain(const char *path, const char *json, const void *data,
                        size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint64_t len = strlen(json);
  unsigned char l8[8];
  for (int k = 0; k < 8; k++)
    l8[k] = (unsigned char)(len >> (8 * k));
  fwrite(l8, 1, 8, f);
  fwrite(json, 1, len, f);
  fwrite(data, 1, n, f);
  fclose(f);
}

static void test_plain(void **state) {
  (void)state;
  char dir[256], p[300];
  scratch_dir(dir, sizeof dir);
  snprintf(p, sizeof p, "%s/plain.safetensors", dir);
  unsigned char data[33];
  float w[6] = {0, 1, 2, 3, 4, 5};
  memcpy(data, w, 24);
  uint16_t u[3] = {7, 8, 65535};
  memcpy(data + 24, u, 6);
  data[30] = 'x', data[31] = 'y', data[32] = 'z';
  write_plain(p,
              "{\"__metadata__\":{\"step\":\"42\",\"who\":\"hand\"},"
              "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]"
              "},\"n\":{\"dtype\":\"U16\",\"shape\":[3],\"data_offsets\":[24,"
              "30]},\"z\":{\"dtype\":\"X9\",\"shape\":[2],\"data_offsets\":[30,"
              "33]}}  ",
              data, sizeof data);
  sl_checkpoint *c;
  if (sl_checkpoint_open(p, &c) != SL_OK) fail_msg("%s", sl_last_error());
  assert_false(sl_checkpoint_is_sharded(c));
  assert_int_equal(sl_checkpoint_step(c), 42);
  assert_string_equal(sl_checkpoint_metadata(c, "who"), "hand");
  assert_int_equal(sl_checkpoint_tensor_count(c), 3);
  sl_checkpoint_tensor t;
  assert_int_equal(sl_checkpoint_get_tensor(c, 0, &t), SL_OK);
  assert_string_equal(t.name, "n");
  assert_false(t.dtype_known);
  assert_string_equal(t.dtype_name, "U16");
  assert_int_equal(t.bytes, 6);
  assert_int_equal(sl_checkpoint_get_tensor(c, 1, &t), SL_OK);
  assert_string_equal(t.name, "w");
  assert_true(t.dtype_known);
  assert_int_equal(t.dtype, SL_DTYPE_F32);
  assert_string_equal(t.placement, "");
  assert_string_equal(t.sbp, "");
  assert_int_equal(t.pieces, 1);
  float col[2];
  sl_slice b = {.ndim = 2, .start = {0, 1}, .extent = {2, 1}};
  assert_int_equal(sl_checkpoint_read(c, 1, &b, col, sizeof col), SL_OK);
  assert_true(col[0] == 1 && col[1] == 4);
  uint16_t uu[3];
  assert_int_equal(sl_checkpoint_read(c, 0, NULL, uu, 6), SL_OK);
  assert_int_equal(uu[2], 65535);
  assert_int_equal(sl_checkpoint_get_tensor(c, 2, &t), SL_OK);
  assert_string_equal(t.dtype_name, "X9");
  assert_int_equal(t.bytes, 3);
  char zz[3];
  assert_int_equal(sl_checkpoint_read(c, 2, NULL, zz, 3), SL_EUNSUPPORTED);
  sl_checkpoint_close(c);

  /* Converted: the unknown dtypes' bytes copied as they are. */
  char out[320];
  snprintf(out, sizeof out, "%s/one.safetensors", dir);
  if (sl_checkpoint_convert(p, out) != SL_OK) fail_msg("%s", sl_last_error());
  assert_int_equal(sl_checkpoint_open(out, &c), SL_OK);
  assert_int_equal(sl_checkpoint_step(c), 42);
  assert_string_equal(sl_checkpoint_metadata(c, "who"), "hand");
  assert_int_equal(sl_checkpoint_read(c, 0, NULL, uu, 6), SL_OK);
  assert_int_equal(uu[0], 7);
  sl_checkpoint_close(c);

  /* No step, or one that is no integer: -1. */
  write_plain(p, "{\"__metadata__\":{\"step\":\"12x\"}}", NULL, 0);
  assert_int_equal(sl_checkpoint_open(p, &c), SL_OK);
  assert_int_equal(sl_checkpoint_step(c), -1);
  assert_int_equal(sl_checkpoint_tensor_count(c), 0);
  sl_checkpoint_close(c);
  write_plain(p, "{}", NULL, 0);
  assert_int_equal(sl_checkpoint_open(p, &c), SL_OK);
  assert_int_equal(sl_checkpoint_step(c), -1);
  assert_null(sl_checkpoint_metadata(c, "step"));
  sl_checkpoint_close(c);
  rm_rf(dir);
}

/* python3 reads the converted file: numpy when it has it, else struct. It
 * prints "name dtype shape sum" per tensor it can decode. */
static const char *py_reader =
    "import json, struct, sys\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "n = struct.unpack('<Q', b[:8])[0]\n"
    "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "assert (8 + n) % 8 == 0\n"
    "data = b[8 + n:]\n"
    "try:\n"
    "    import numpy as np\n"
    "except ImportError:\n"
    "    np = None\n"
    "print('reader', 'numpy' if np else 'struct')\n"
    "codes = {'F32': 'f', 'F64': 'd', 'I32': 'i', 'I64': 'q', 'U8': 'B',\n"
    "         'I8': 'b', 'F16': 'e', 'BOOL': '?'}\n"
    "npt = {'F32': 'f4', 'F64': 'f8', 'I32': 'i4', 'I64': 'i8', 'U8': 'u1',\n"
    "       'I8': 'i1', 'F16': 'f2', 'BOOL': 'bool'}\n"
    "print('meta', json.dumps(h.get('__metadata__', {}), sort_keys=True))\n"
    "for k, v in sorted(h.items()):\n"
    "    if k == '__metadata__' or v['dtype'] not in codes: continue\n"
    "    s, e = v['data_offsets']\n"
    "    cnt = 1\n"
    "    for d in v['shape']: cnt *= d\n"
    "    if np is not None:\n"
    "        a = np.frombuffer(data[s:e], dtype=npt[v['dtype']])\n"
    "        a = a.reshape(v['shape']).astype('f8')\n"
    "        tot = float(a.sum()) if a.size else 0.0\n"
    "    else:\n"
    "        vals = struct.unpack('<%d%s' % (cnt, codes[v['dtype']]), "
    "data[s:e])\n"
    "        tot = float(sum(float(x) for x in vals))\n"
    "    print(k, v['dtype'], 'x'.join(map(str, v['shape'])), repr(tot))\n";

static void python_check(const char *file, const ttensor *ts, int n,
                         int64_t step) {
  char script[400], cmd[1000];
  snprintf(script, sizeof script, "%s.py", file);
  FILE *f = fopen(script, "w");
  fputs(py_reader, f);
  fclose(f);
  /* Debian's python3 (numpy comes with python3-torch), unless told. */
  const char *py = getenv("SLUICE_PYTHON");
  if (!py || !py[0])
    py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  snprintf(cmd, sizeof cmd, "%s -c pass >/dev/null 2>&1", py);
  if (system(cmd) != 0) {
    printf("%s not found: the converted file is checked by sluice's "
           "reader only\n",
           py);
    return;
  }
  snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py, script, file);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[512];
  int checked = 0;
  while (fgets(line, sizeof line, p)) {
    printf("python: %s", line);
    if (strncmp(line, "meta ", 5) == 0) {
      char want[64];
      snprintf(want, sizeof want, "\"step\": \"%lld\"", (long long)step);
      assert_non_null(strstr(line, want));
      assert_non_null(strstr(line, "\"model\": \"test\""));
      continue;
    }
    char name[64], dt[16], shape[64];
    double sum;
    if (sscanf(line, "%63s %15s %63s %lf", name, dt, shape, &sum) != 4)
      continue;
    int t = 0;
    while (t < n && strcmp(ts[t].name, name) != 0)
      t++;
    assert_true(t < n);
    sl_slice whole = {.ndim = ts[t].shape.ndim};
    memcpy(whole.extent, ts[t].shape.dims, sizeof whole.extent);
    int64_t cnt = sl_slice_numel(&whole);
    void *buf = malloc((size_t)cnt * sl_dtype_size(ts[t].dtype) + 1);
    fill_box(t, step, &ts[t], &whole, buf);
    double want = 0;
    for (int64_t k = 0; k < cnt; k++)
      want += sl_load_element(ts[t].dtype, buf, k);
    free(buf);
    if (fabs(want - sum) > 1e-9 * fabs(want) + 1e-9)
      fail_msg("python sums '%s' to %g, sluice wrote %g", name, sum, want);
    checked++;
  }
  assert_int_equal(pclose(p), 0);
  assert_true(checked >= 8);
}

static void test_convert(void **state) {
  (void)state;
  char dir[256], ck[300], out[320];
  scratch_dir(dir, sizeof dir);
  snprintf(ck, sizeof ck, "%s/ck", dir);
  snprintf(out, sizeof out, "%s/model.safetensors", dir);
  save_model(ck, 77);
  if (sl_checkpoint_convert(ck, out) != SL_OK) fail_msg("%s", sl_last_error());
  struct stat sb;
  char tmp[340];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  assert_int_not_equal(stat(tmp, &sb), 0);
  check_model(out, 77, false);
  ttensor ts[16];
  int n = model(ts);
  python_check(out, ts, n, 77);
  /* Errors name the input. */
  assert_int_equal(sl_checkpoint_convert("/nonexistent/ck", out), SL_ENOTFOUND);
  assert_non_null(strstr(sl_last_error(), "/nonexistent/ck"));
  rm_rf(dir);
}

/* Tensors bigger than convert's 4 MiB chunk: streamed in several boxes. */
static void test_convert_large(void **state) {
  (void)state;
  char dir[256], ck[300], out[320];
  scratch_dir(dir, sizeof dir);
  snprintf(ck, sizeof ck, "%s/ck", dir);
  snprintf(out, sizeof out, "%s/big.safetensors", dir);
  ttensor ts[2];
  ts[0] = (ttensor){.name = "rows",
                    .dtype = SL_DTYPE_F32,
                    .placement = "cpu:0-2",
                    .sbp = "S(1)"};
  sl_shape_parse("1100,1000", &ts[0].shape);
  split_rows(&ts[0], 1, 3, 2);
  ts[1] = (ttensor){.name = "vec",
                    .dtype = SL_DTYPE_F64,
                    .placement = "cpu:0-4",
                    .sbp = "S(0)"};
  sl_shape_parse("600001", &ts[1].shape);
  split_rows(&ts[1], 0, 5, 2);
  assert_int_equal(save_tensors(ck, 3, 2, 2, ts, 0, NULL), SL_OK);
  if (sl_checkpoint_convert(ck, out) != SL_OK) fail_msg("%s", sl_last_error());
  sl_checkpoint *c;
  assert_int_equal(sl_checkpoint_open(out, &c), SL_OK);
  sl_slice whole = {.ndim = 2, .extent = {1100, 1000}};
  check_box(c, ts, 0, 3, &whole);
  sl_slice v = {.ndim = 1, .extent = {600001}};
  check_box(c, ts, 1, 3, &v);
  sl_checkpoint_close(c);
  rm_rf(dir);
}

int main(void) {
  seed = test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_refused),
      cmocka_unit_test(test_plain),         cmocka_unit_test(test_convert),
      cmocka_unit_test(test_convert_large), cmocka_unit_test(test_direct_write),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
