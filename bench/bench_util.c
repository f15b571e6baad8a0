/* Helpers the benchmarks share (bench_util.h). */
#include "bench_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_int_flags(int argc, char **argv, const char *prog,
                    const bench_int_flag *flags, int n) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) return 1;
    const bench_int_flag *f = NULL;
    for (int k = 0; k < n && !f; k++)
      if (strncmp(argv[i], "--", 2) == 0 &&
          strcmp(argv[i] + 2, flags[k].name) == 0)
        f = &flags[k];
    if (!f || i + 1 == argc) {
      fprintf(stderr, "%s: unknown flag or missing value: %s\n", prog,
              argv[i]);
      return 2;
    }
    char *end;
    long v = strtol(argv[++i], &end, 10);
    if (*end || end == argv[i] || v < f->min || v > f->max) {
      fprintf(stderr, "%s: --%s %s is out of range [%d, %d]\n", prog, f->name,
              argv[i], f->min, f->max);
      return 2;
    }
    *f->value = (int)v;
  }
  return 0;
}

bool bench_peer_start(const char *const *argv, bench_peer *p, char *why,
                      size_t n) {
  p->pid = -1;
  p->out = NULL;
  int fd[2];
  if (pipe(fd) != 0) {
    snprintf(why, n, "pipe: %s", strerror(errno));
    return false;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, n, "fork: %s", strerror(errno));
    close(fd[0]);
    close(fd[1]);
    return false;
  }
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  p->pid = pid;
  p->out = fdopen(fd[0], "r");
  if (!p->out) {
    snprintf(why, n, "fdopen: %s", strerror(errno));
    close(fd[0]);
    bench_peer_wait(p);
    return false;
  }
  return true;
}

int bench_peer_wait(bench_peer *p) {
  if (p->out) fclose(p->out);
  p->out = NULL;
  int status = 0;
  if (p->pid > 0 && waitpid(p->pid, &status, 0) < 0) return -1;
  p->pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
