/* Damaged checkpoints: each kind of damage is a clear error naming the file
 * (and the tensor where there is one), never a crash; random damage to a
 * header or an index is survived. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "ckpt_util.h"

static uint64_t seed;

static void model(ttensor *ts) {
  ts[0] = (ttensor){.name = "fc1.w",
                    .dtype = SL_DTYPE_F32,
                    .placement = "cpu:0-1",
                    .sbp = "S(0)"};
  sl_shape_parse("5,6", &ts[0].shape);
  split_rows(&ts[0], 0, 2, 2);
  ts[1] = (ttensor){
      .name = "fc1.b", .dtype = SL_DTYPE_F32, .placement = "cpu:0", .sbp = "B"};
  sl_shape_parse("6", &ts[1].shape);
  split_rows(&ts[1], 0, 1, 1);
}

/* A fresh valid checkpoint (step 5) in a new directory. */
static void fresh(char *dir, size_t size) {
  scratch_dir(dir, size);
  ttensor ts[2];
  model(ts);
  if (save_tensors(dir, 5, 2, 2, ts, 0, NULL) != SL_OK)
    fail_msg("save: %s", sl_last_error());
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  buf[len] = '\0';
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void write_all(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* Opening path fails with st and a message holding every given part. */
static void expect_fail(const char *path, sl_status st, ...) {
  sl_checkpoint *c = (sl_checkpoint *)1;
  sl_status got = sl_checkpoint_open(path, &c);
  assert_null(c);
  if (got != st)
    fail_msg("open '%s': %s (%s), expected %s", path, sl_status_str(got),
             sl_last_error(), sl_status_str(st));
  va_list ap;
  va_start(ap, st);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(sl_last_error(), s))
      fail_msg("expected '%s' in the message: %s", s, sl_last_error());
  va_end(ap);
  printf("  %s\n", sl_last_error());
}

/* Replaces the first `from` in the index with `to`. */
static void edit_index(const char *dir, const char *from, const char *to) {
  char p[400];
  snprintf(p, sizeof p, "%s/index.json", dir);
  size_t n;
  char *text = read_all(p, &n);
  char *at = strstr(text, from);
  if (!at) fail_msg("'%s' not in the index:\n%s", from, text);
  size_t a = (size_t)(at - text), fl = strlen(from), tl = strlen(to);
  char *out = malloc(n - fl + tl + 1);
  memcpy(out, text, a);
  memcpy(out + a, to, tl);
  memcpy(out + a + tl, at + fl, n - a - fl);
  write_all(p, out, n - fl + tl);
  free(out);
  free(text);
}

static void file_path(char *buf, size_t size, const char *dir, int node) {
  char name[64];
  sl__ckpt_file_name(5, (uint32_t)node, name, sizeof name);
  snprintf(buf, size, "%s/%s", dir, name);
}

static void test_node_files(void **state) {
  (void)state;
  char dir[256], p[400];
  fresh(dir, sizeof dir);
  sl_checkpoint *c;
  assert_int_equal(sl_checkpoint_open(dir, &c), SL_OK);
  sl_checkpoint_close(c);

  /* Truncated. */
  file_path(p, sizeof p, dir, 1);
  size_t n;
  char *bytes = read_all(p, &n);
  assert_int_equal(truncate(p, (off_t)n - 10), 0);
  expect_fail(dir, SL_EINVAL, "step-000005.node1.safetensors", "the index says",
              NULL);
  /* One flipped bit in the data: the CRC. */
  bytes[n - 3] ^= 0x10;
  write_all(p, bytes, n);
  expect_fail(dir, SL_EINVAL, "step-000005.node1.safetensors", "CRC32C",
              "corrupt", NULL);
  /* A flipped byte in the header: the header no longer parses. */
  bytes[n - 3] ^= 0x10;
  char *brace = memchr(bytes + 8, '{', n - 8);
  *brace = '(';
  write_all(p, bytes, n);
  expect_fail(dir, SL_EINVAL, "step-000005.node1.safetensors", NULL);
  *brace = '{';
  write_all(p, bytes, n);
  assert_int_equal(sl_checkpoint_open(dir, &c), SL_OK);
  sl_checkpoint_close(c);
  free(bytes);
  /* Missing. */
  file_path(p, sizeof p, dir, 0);
  unlink(p);
  expect_fail(dir, SL_EINVAL, "step-000005.node0.safetensors", "missing", NULL);
  rm_rf(dir);
}

static void test_index(void **state) {
  (void)state;
  char dir[256], p[400];
  struct {
    const char *from, *to;
    const char *parts[3];
  } cases[] = {
      {"\"fc1.b\": {\"dtype\": \"F32\"",
       "\"fc1.b\": {\"dtype\": \"I32\"",
       {"step-000005.node0.safetensors", "tensor 'fc1.b'", "I32"}},
      {"\"extent\": [2, 6]",
       "\"extent\": [1, 6]",
       {"index.json", "tensor 'fc1.w'", "pieces hold 24 of the 30"}},
      {"\"start\": [3, 0]",
       "\"start\": [2, 0]",
       {"index.json", "tensor 'fc1.w'", "overlap"}},
      {"\"start\": [3, 0]",
       "\"start\": [4, 0]",
       {"index.json", "tensor 'fc1.w'", "outside"}},
      {"\"version\": 1,",
       "\"version\": 1, \"version\": 1,",
       {"index.json", "duplicate key 'version'", NULL}},
      {"\"version\": 1,", "\"version\": 2,", {"index.json", "version", NULL}},
      {"sluice-checkpoint", "other", {"index.json", "not a sluice", NULL}},
      {"\"file\": 1, \"key\": \"fc1.w#0\"",
       "\"file\": 1, \"key\": \"fc1.w#7\"",
       {"step-000005.node1.safetensors", "tensor 'fc1.w'", "no key 'fc1.w#7'"}},
      {"\"step\": 5", "\"step\": 5.5", {"index.json", "only integers", NULL}},
      {"\"files\": [", "\"files\": [[],", {"index.json", "files[0]", NULL}},
      {"\"file\": 1", "\"file\": 9", {"index.json", "pieces[", NULL}},
      {"\"name\": \"step",
       "\"name\": \"../step",
       {"index.json", "files[0]", NULL}},
      {"\"shape\": [5, 6]",
       "\"shape\": [5, 6, 1, 1, 1, 1, 1, 1, 1]",
       {"index.json", "fc1.w", "shape"}},
      {"\"crc32c\": \"", "\"crc32c\": \"x", {"index.json", "crc32c", NULL}},
  };
  for (size_t k = 0; k < SL_ARRAY_LEN(cases); k++) {
    fresh(dir, sizeof dir);
    edit_index(dir, cases[k].from, cases[k].to);
    expect_fail(dir, SL_EINVAL, cases[k].parts[0], cases[k].parts[1],
                cases[k].parts[2], NULL);
    rm_rf(dir);
  }
  /* Cut short: malformed JSON. */
  fresh(dir, sizeof dir);
  snprintf(p, sizeof p, "%s/index.json", dir);
  size_t n;
  char *text = read_all(p, &n);
  write_all(p, text, n / 2);
  expect_fail(dir, SL_EINVAL, "index.json", "at byte", NULL);
  free(text);
  /* None at all, and no such path. */
  unlink(p);
  expect_fail(dir, SL_ENOTFOUND, "index.json", NULL);
  rm_rf(dir);
  expect_fail("/nonexistent/sluice/ckpt", SL_ENOTFOUND, "/nonexistent", NULL);
}

static void write_plain(const char *path, uint64_t len, const char *json,
                        size_t data_bytes) {
  FILE *f = fopen(path, "wb");
  unsigned char l8[8];
  for (int k = 0; k < 8; k++)
    l8[k] = (unsigned char)(len >> (8 * k));
  fwrite(l8, 1, 8, f);
  fwrite(json, 1, strlen(json), f);
  for (size_t k = 0; k < data_bytes; k++)
    fputc(0, f);
  fclose(f);
}

static void plain(const char *path, const char *json, size_t data_bytes) {
  write_plain(path, strlen(json), json, data_bytes);
}

static void test_plain_files(void **state) {
  (void)state;
  char dir[256], p[300];
  scratch_dir(dir, sizeof dir);
  snprintf(p, sizeof p, "%s/x.safetensors", dir);
  write_plain(p, 1000, "{}", 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "runs past the end", NULL);
  write_plain(p, UINT64_MAX, "{}", 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "over the limit", NULL);
  write_all(p, "abc", 3);
  expect_fail(p, SL_EINVAL, "x.safetensors", "shorter than", NULL);
  plain(p,
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,100]}}",
        24);
  expect_fail(p, SL_EINVAL, "x.safetensors", "tensor 'w'",
              "outside the data section of 24 bytes", NULL);
  plain(p,
        "{\"fc1.w\":{\"dtype\":\"F32\",\"shape\":[5,6],\"data_offsets\":[0,"
        "100]}}",
        100);
  expect_fail(p, SL_EINVAL, "x.safetensors", "tensor 'fc1.w'",
              "data_offsets [0, 100) hold 100 bytes, F32 [5,6] needs 120",
              NULL);
  plain(p,
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
        4);
  expect_fail(p, SL_EINVAL, "x.safetensors", "duplicate key 'a'", NULL);
  plain(p,
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
        12);
  expect_fail(p, SL_EINVAL, "x.safetensors", "'a'", "'b'", "overlap", NULL);
  plain(p, "{\"a\": ", 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "at byte", NULL);
  plain(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[2.5],\"data_offsets\":[0,2]}}",
        2);
  expect_fail(p, SL_EINVAL, "x.safetensors", "only integers", NULL);
  plain(p, "{\"a\":{\"dtype\":\"U8\",\"shape\":[-2],\"data_offsets\":[0,2]}}",
        2);
  expect_fail(p, SL_EINVAL, "x.safetensors", "tensor 'a'", "shape", NULL);
  plain(p, "{\"a\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
  expect_fail(p, SL_EINVAL, "x.safetensors", "dtype", NULL);
  plain(p, "{\"__metadata__\":{\"step\":5}}", 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "__metadata__", NULL);
  plain(p, "[1,2]", 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "not an object", NULL);
  plain(p, "{\"\xff\":1}", 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "UTF-8", NULL);
  char deep[300];
  memset(deep, '[', 200);
  deep[200] = '\0';
  plain(p, deep, 0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "nested too deeply", NULL);
  plain(p,
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
        "\"data_offsets\":[0,0]}}",
        0);
  expect_fail(p, SL_EINVAL, "x.safetensors", "tensor 'a'", NULL);
  rm_rf(dir);
}

/* Random damage: bytes flipped in a plain file's header and in an index.
 * Whatever opens must read without failing. */
static void test_random_damage(void **state) {
  (void)state;
  char dir[256], p[400];
  fresh(dir, sizeof dir);
  char out[400];
  snprintf(out, sizeof out, "%s/one.safetensors", dir);
  assert_int_equal(sl_checkpoint_convert(dir, out), SL_OK);
  size_t n, ni;
  char *good = read_all(out, &n);
  snprintf(p, sizeof p, "%s/index.json", dir);
  char *index = read_all(p, &ni);
  char *bad = malloc(n > ni ? n : ni);
  sl_rng rng = {seed};
  int opened = 0;
  for (int it = 0; it < 3000; it++) {
    bool idx = it % 3 == 2;
    const char *src = idx ? index : good;
    size_t len = idx ? ni : n;
    const char *target = idx ? p : out;
    memcpy(bad, src, len);
    int flips = 1 + (int)sl__rng_below(&rng, 4);
    size_t span = idx ? len : SL_MIN(len, 200);
    for (int k = 0; k < flips; k++) {
      size_t at = (size_t)sl__rng_below(&rng, span);
      bad[at] = (char)sl__rng_below(&rng, 256);
    }
    size_t cut = sl__rng_below(&rng, 10) == 0 ? sl__rng_below(&rng, len) : len;
    write_all(target, bad, cut);
    sl_checkpoint *c;
    sl_status st = sl_checkpoint_open(idx ? dir : out, &c);
    if (st != SL_OK) {
      assert_true(sl_last_error()[0] != '\0');
      continue;
    }
    opened++;
    for (int32_t i = 0; i < sl_checkpoint_tensor_count(c); i++) {
      sl_checkpoint_tensor t;
      assert_int_equal(sl_checkpoint_get_tensor(c, i, &t), SL_OK);
      if (!t.dtype_known || t.bytes > (1 << 20)) continue;
      void *buf = malloc((size_t)t.bytes + 1);
      assert_int_equal(sl_checkpoint_read(c, i, NULL, buf, (size_t)t.bytes),
                       SL_OK);
      free(buf);
    }
    sl_checkpoint_close(c);
  }
  printf("  %d of 3000 damaged copies still opened\n", opened);
  write_all(p, index, ni);
  free(bad);
  free(good);
  free(index);
  rm_rf(dir);
}

int main(void) {
  seed = test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_node_files),
      cmocka_unit_test(test_index),
      cmocka_unit_test(test_plain_files),
      cmocka_unit_test(test_random_damage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
