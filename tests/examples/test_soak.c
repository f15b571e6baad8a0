/* Soak: examples/mlp trains a small MLP for many steps with --save-every,
 * and its resident memory, open file descriptors and threads stay flat
 * (within 5% of where they are after the warm-up) from save to save.
 *
 * The full soak is 10,000 steps saving every 500:
 *   SLUICE_SOAK_STEPS=10000 ctest -L long
 * Without SLUICE_SOAK_STEPS (CI), 2,000 steps saving every 100: the same
 * 20 saves, shorter. SLUICE_SOAK_EVERY overrides the interval (default
 * steps / 20). The program is stopped (SIGSTOP) while it is measured,
 * right after it reports a save, from /proc/PID/status and /proc/PID/fd. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inv.h"

typedef struct sample {
  long step, rss_kb, threads, fds;
} sample;

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 1) fail_msg("%s='%s': want a positive integer", name, v);
  return x;
}

static void measure(pid_t pid, sample *s) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  s->rss_kb = s->threads = -1;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "VmRSS:", 6) == 0) s->rss_kb = strtol(line + 6, NULL, 10);
    if (strncmp(line, "Threads:", 8) == 0)
      s->threads = strtol(line + 8, NULL, 10);
  }
  fclose(f);
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  assert_non_null(d);
  s->fds = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') s->fds++;
  closedir(d);
  if (s->rss_kb < 0 || s->threads < 0)
    fail_msg("/proc/%d/status lacks VmRSS or Threads", (int)pid);
}

/* Whether x lies within 5% of base (for small counts: equal). */
static bool flat(long x, long base) {
  long slack = base / 20;
  return x >= base - slack && x <= base + slack;
}

static void test_soak(void **state) {
  long steps = env_long("SLUICE_SOAK_STEPS", 2000);
  long every = env_long("SLUICE_SOAK_EVERY", steps / 20 ? steps / 20 : 1);
  char dir[] = "/tmp/sluice-test-soak-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char ckpt[64], steps_s[32], every_s[32];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  snprintf(steps_s, sizeof steps_s, "%ld", steps);
  snprintf(every_s, sizeof every_s, "%ld", every);
  printf("soak: %ld steps of mlp (dp on 2 devices, Adam), saving every %ld "
         "(SLUICE_SOAK_STEPS, SLUICE_SOAK_EVERY)\n",
         steps, every);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execl(EX_MLP_BIN, EX_MLP_BIN, "--devices", "cpu:2", "--layout", "dp",
          "--hidden", "64", "--in", "32", "--batch", "16", "--layers", "2",
          "--optimizer", "adam", "--steps", steps_s, "--save", ckpt,
          "--save-every", every_s, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE *out = fdopen(fds[0], "r");
  assert_non_null(out);
  int cap = (int)(steps / every) + 2, n = 0;
  sample *s = calloc((size_t)cap, sizeof *s);
  assert_non_null(s);
  char line[512], last[512] = "";
  long last_step = -1;
  while (fgets(line, sizeof line, out)) {
    long step;
    if (strncmp(line, "step ", 5) == 0) {
      snprintf(last, sizeof last, "%s", line);
      last_step = strtol(line + 5, NULL, 10);
    }
    /* The save at the end is followed by the program's teardown (threads
     * exit while it is measured): the periodic saves are the soak. */
    if (sscanf(line, "saved step %ld", &step) != 1 || n == cap || step >= steps)
      continue;
    /* Stopped, the program is between two saves: nothing is half open. */
    int ws;
    kill(pid, SIGSTOP);
    waitpid(pid, &ws, WUNTRACED);
    s[n].step = step;
    measure(pid, &s[n]);
    kill(pid, SIGCONT);
    n++;
  }
  fclose(out);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
    fail_msg("mlp did not finish (status %#x); last line: %s", ws, last);
  if (last_step != steps - 1)
    fail_msg("mlp ended at step %ld, want %ld", last_step, steps - 1);
  if (n < 4) fail_msg("only %d saves reported; want --steps / --save-every", n);
  /* Warm-up: the first quarter of the saves (allocators, page cache and
   * thread pools settle). */
  int base = n / 4;
  printf("%8s %10s %8s %6s\n", "step", "rss KiB", "threads", "fds");
  bool ok = true;
  for (int i = 0; i < n; i++) {
    bool good = i <= base || (flat(s[i].rss_kb, s[base].rss_kb) &&
                              flat(s[i].threads, s[base].threads) &&
                              flat(s[i].fds, s[base].fds));
    printf("%8ld %10ld %8ld %6ld%s\n", s[i].step, s[i].rss_kb, s[i].threads,
           s[i].fds,
           i < base    ? "  (warm-up)"
           : i == base ? "  (baseline)"
           : good      ? ""
                       : "  <- not within 5% of the baseline");
    ok = ok && good;
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  free(s);
  fflush(stdout);
  if (!ok)
    fail_msg("memory, threads or file descriptors grew over the soak (see "
             "the table)");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_soak)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
