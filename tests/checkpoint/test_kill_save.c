/* Crash safety of saves: a child saves over and over into one directory
 * (two node files of many pieces, then the index) and is killed with
 * SIGKILL at a random moment; after every kill the directory must open as
 * one complete checkpoint whose every value belongs to the index's step, at
 * least as new as the last save the child reported committed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "ckpt_util.h"

#define ITERATIONS 40

static int model(ttensor *ts) {
  ts[0] = (ttensor){.name = "big",
                    .dtype = SL_DTYPE_F64,
                    .placement = "cpu:0-15",
                    .sbp = "S(0)"};
  sl_shape_parse("256,1024", &ts[0].shape);
  split_rows(&ts[0], 0, 16, 2);
  ts[1] = (ttensor){.name = "mat",
                    .dtype = SL_DTYPE_F32,
                    .placement = "cpu:0-11[4,3]",
                    .sbp = "(S(0),S(1))"};
  sl_shape_parse("100,37", &ts[1].shape);
  ts[1].n = 12;
  for (int k = 0; k < 12; k++) {
    sl_slice b = {.ndim = 2};
    sl_split_range(100, 4, k / 3, &b.start[0], &b.extent[0]);
    sl_split_range(37, 3, k % 3, &b.start[1], &b.extent[1]);
    ts[1].pieces[k] = (tpiece){k % 2, b};
  }
  ts[2] = (ttensor){.name = "v",
                    .dtype = SL_DTYPE_I64,
                    .placement = "cpu:0-7",
                    .sbp = "S(0)"};
  sl_shape_parse("1000", &ts[2].shape);
  split_rows(&ts[2], 0, 8, 2);
  return 3;
}

/* The child: saves steps base+1, base+2, ... until killed, reporting each
 * committed step on fd. */
static void saver(const char *dir, int64_t base, int fd) {
  ttensor ts[3];
  int n = model(ts);
  for (int64_t step = base + 1;; step++) {
    char s[24];
    snprintf(s, sizeof s, "%lld", (long long)step);
    sl__ckpt_kv kv = {"saved_step", s};
    if (save_tensors(dir, step, 2, n, ts, 1, &kv) != SL_OK) {
      fprintf(stderr, "child: save %lld: %s\n", (long long)step,
              sl_last_error());
      _exit(3);
    }
    if (write(fd, &step, sizeof step) != sizeof step) _exit(4);
  }
}

static void check_dir(const char *dir, bool committed, int64_t at_least) {
  sl_checkpoint *c;
  sl_status st = sl_checkpoint_open(dir, &c);
  if (st == SL_ENOTFOUND && !committed) return;
  if (st != SL_OK)
    fail_msg("after the kill: %s: %s", sl_status_str(st), sl_last_error());
  int64_t step = sl_checkpoint_step(c);
  if (step < at_least)
    fail_msg("index step %lld, but step %lld was committed", (long long)step,
             (long long)at_least);
  char s[24];
  snprintf(s, sizeof s, "%lld", (long long)step);
  assert_string_equal(sl_checkpoint_metadata(c, "saved_step"), s);
  ttensor ts[3];
  int n = model(ts);
  assert_int_equal(sl_checkpoint_tensor_count(c), n);
  for (int t = 0; t < n; t++) {
    int32_t i = sl_checkpoint_find(c, ts[t].name);
    assert_true(i >= 0);
    sl_slice whole = {.ndim = ts[t].shape.ndim};
    memcpy(whole.extent, ts[t].shape.dims, sizeof whole.extent);
    size_t bytes = (size_t)sl_slice_numel(&whole) * sl_dtype_size(ts[t].dtype);
    void *got = malloc(bytes), *want = malloc(bytes);
    fill_box(t, step, &ts[t], &whole, want);
    if (sl_checkpoint_read(c, i, NULL, got, bytes) != SL_OK)
      fail_msg("read '%s': %s", ts[t].name, sl_last_error());
    if (memcmp(got, want, bytes) != 0)
      fail_msg("tensor '%s' does not hold the values of step %lld", ts[t].name,
               (long long)step);
    free(got);
    free(want);
  }
  sl_checkpoint_close(c);
}

static void test_kill_save(void **state) {
  (void)state;
  sl_rng rng = {test_seed()};
  char dir[256];
  scratch_dir(dir, sizeof dir);
  /* Kills land within about three saves of the child's start, however fast
   * this build saves (sanitizers slow it several times). */
  char timing[256];
  scratch_dir(timing, sizeof timing);
  ttensor tts[3];
  int tn = model(tts);
  uint64_t t0 = sl__now_ns();
  assert_int_equal(save_tensors(timing, 1, 2, tn, tts, 0, NULL), SL_OK);
  long save_us = (long)((sl__now_ns() - t0) / 1000) + 1000;
  rm_rf(timing);
  printf("one save takes about %ld us\n", save_us);
  bool committed = false;
  int64_t last = 0;
  for (int it = 0; it < ITERATIONS; it++) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    /* Steps grow across children: a save never reuses the step of the
     * checkpoint the directory holds. */
    int64_t base = (int64_t)(it + 1) * 100000;
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      saver(dir, base, fds[1]);
    }
    close(fds[1]);
    long us = (long)sl__rng_below(&rng, (uint64_t)(3 * save_us));
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status))
      fail_msg("the saver ended by itself (status %d)", status);
    int64_t step;
    int64_t reported = 0;
    while (read(fds[0], &step, sizeof step) == sizeof step)
      reported = step;
    close(fds[0]);
    if (reported) {
      committed = true;
      last = reported;
    }
    check_dir(dir, committed, last);
    printf("kill %2d after %6ld us: last committed step %lld\n", it, us,
           (long long)reported);
  }
  assert_true(committed);
  rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_save),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
