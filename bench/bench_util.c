/* Helpers the benchmarks share (bench_util.h). */
#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
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

/* ---- the cores' round trip ---------------------------------------------- */

typedef struct ping {
  _Alignas(64) atomic_int flag;
  int cpu;
} ping;

enum { ROUND_TRIPS = 100000 };

static void pin_to(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *pong(void *arg) {
  ping *p = arg;
  pin_to(p->cpu);
  for (int i = 0; i < ROUND_TRIPS; i++) {
    while (atomic_load(&p->flag) != 2 * i + 1) {
    }
    atomic_store(&p->flag, 2 * i + 2);
  }
  return NULL;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double bench_core_round_trip_ns(void) {
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return NAN;
  int cpus[2], n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &mine)) cpus[n++] = c;
  if (n < 2) return NAN;
  double runs[5];
  pin_to(cpus[0]);
  for (int r = 0; r < 5; r++) {
    ping p = {.cpu = cpus[1]};
    atomic_init(&p.flag, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, pong, &p) != 0) {
      sched_setaffinity(0, sizeof mine, &mine);
      return NAN;
    }
    double t0 = now_s();
    for (int i = 0; i < ROUND_TRIPS; i++) {
      atomic_store(&p.flag, 2 * i + 1);
      while (atomic_load(&p.flag) != 2 * i + 2) {
      }
    }
    runs[r] = (now_s() - t0) / ROUND_TRIPS * 1e9;
    pthread_join(t, NULL);
  }
  sched_setaffinity(0, sizeof mine, &mine);
  return bench_median(runs, 5);
}
