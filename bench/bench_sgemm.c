/* bench_sgemm: one-thread sgemm GFLOP/s of sluice's CPU matmul next to the
 * alternatives, in one table:
 *   sluice      sluice's own choice (OPENBLAS_CORETYPE removed from the env)
 *   ob-probe    OpenBLAS choosing its kernels itself
 * (SLUICE_BLAS_CORETYPE=auto-off) ob-haswell  OPENBLAS_CORETYPE=HASWELL: the
 * kernels of a misdetected CPU torch       torch.mm in /usr/bin/python3, if
 * torch imports there c           sluice's C sgemm (SLUICE_BLAS_LIBRARY=none)
 * Each column runs in its own process (OpenBLAS picks its kernels once per
 * process): this program re-executes itself with `--child`. A shape's time
 * is the best of at least 3 runs and 0.2 s; GFLOP/s = 2 m n k / time.
 * Usage: bench_sgemm [--child] (the child form is internal). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/blas.h"
#include "gemm_shapes.h"

#define MIN_SECONDS 0.2
#define MIN_RUNS 3

static float *random_matrix(sl_rng *rng, int64_t n) {
  float *p = malloc((size_t)n * sizeof *p);
  if (!p) {
    perror("malloc");
    exit(1);
  }
  for (int64_t i = 0; i < n; i++)
    p[i] = (float)((int)sl__rng_below(rng, 2001) - 1000) / 1000.0f;
  return p;
}

/* Spot-checks 32 entries against a double-precision sum, so a broken path
 * cannot post a fast time. */
static bool spot_check(const shape *s, const float *a, const float *b,
                       const float *c, sl_rng *rng) {
  for (int t = 0; t < 32; t++) {
    int64_t i = (int64_t)sl__rng_below(rng, (uint64_t)s->m);
    int64_t j = (int64_t)sl__rng_below(rng, (uint64_t)s->n);
    double sum = 0, abs = 0;
    for (int64_t p = 0; p < s->k; p++) {
      double x = s->ta ? a[p * s->m + i] : a[i * s->k + p];
      double y = s->tb ? b[j * s->k + p] : b[p * s->n + j];
      sum += x * y;
      abs += fabs(x * y);
    }
    if (fabs(c[i * s->n + j] - sum) > 1e-5 * (abs + 1)) return false;
  }
  return true;
}

/* The child: times every shape through sl__blas_sgemm and prints
 * "I <description>" then "R <shape> <GFLOP/s>" lines. */
static int child(void) {
  if (sl__blas_set_threads(1) != SL_OK) {
    fprintf(stderr, "bench_sgemm: %s\n", sl_last_error());
    return 1;
  }
  printf("I %s\n", sl__blas_describe());
  sl_rng rng = {12345};
  for (int si = 0; si < NSHAPES; si++) {
    const shape *s = &shapes[si];
    float *a = random_matrix(&rng, s->m * s->k);
    float *b = random_matrix(&rng, s->k * s->n);
    float *c = random_matrix(&rng, s->m * s->n);
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double best = INFINITY, spent = 0;
    for (int run = -1; run < MIN_RUNS || spent < MIN_SECONDS; run++) {
      uint64_t t0 = sl__now_ns();
      sl_status st = sl__blas_sgemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a,
                                    lda, b, ldb, 0.0f, c, s->n);
      double dt = (double)(sl__now_ns() - t0) * 1e-9;
      if (st != SL_OK) {
        fprintf(stderr, "bench_sgemm: %s\n", sl_last_error());
        return 1;
      }
      if (run < 0) continue; /* warm-up: page faults, packing buffers */
      spent += dt;
      if (dt < best) best = dt;
    }
    if (!spot_check(s, a, b, c, &rng)) {
      fprintf(stderr, "bench_sgemm: wrong result for %s\n", s->label);
      return 1;
    }
    printf("R %d %.2f\n", si,
           2.0 * (double)s->m * (double)s->n * (double)s->k / best * 1e-9);
    fflush(stdout);
    free(a);
    free(b);
    free(c);
  }
  return 0;
}

/* torch.mm with one thread, same shapes and timing rule. A transposed
 * operand is a transposed view, which torch hands to BLAS as a flag. */
static const char torch_script[] =
    "import sys, time, ctypes\n"
    "import torch\n"
    "torch.set_num_threads(1)\n"
    "try:\n"
    "    core = ctypes.CDLL('libopenblas.so.0').openblas_get_corename\n"
    "    core.restype = ctypes.c_char_p\n"
    "    core = core().decode()\n"
    "except OSError:\n"
    "    core = '?'\n"
    "cfg = torch.__config__.show()\n"
    "blas = cfg.split('BLAS_INFO=')[1].split(',')[0] if 'BLAS_INFO=' in cfg "
    "else '?'\n"
    "print('I torch %s, one thread, BLAS_INFO=%s, OpenBLAS kernels %s' % (\n"
    "    torch.__version__, blas, core), flush=True)\n"
    "args = [int(x) for x in sys.argv[1:]]\n"
    "for si in range(len(args) // 5):\n"
    "    m, n, k, ta, tb = args[5 * si:5 * si + 5]\n"
    "    a = torch.rand(k, m).t() if ta else torch.rand(m, k)\n"
    "    b = torch.rand(n, k).t() if tb else torch.rand(k, n)\n"
    "    c = torch.empty(m, n)\n"
    "    torch.mm(a, b, out=c)\n"
    "    best, spent, runs = float('inf'), 0.0, 0\n"
    "    while runs < 3 or spent < 0.2:\n"
    "        t0 = time.perf_counter()\n"
    "        torch.mm(a, b, out=c)\n"
    "        dt = time.perf_counter() - t0\n"
    "        best, spent, runs = min(best, dt), spent + dt, runs + 1\n"
    "    print('R %d %.2f' % (si, 2.0 * m * n * k / best * 1e-9), "
    "flush=True)\n";

typedef struct column {
  const char *name;
  const char *how;        /* for the legend */
  char *const *argv;      /* the program to run */
  const char *const *env; /* its environment edits */
  double gflops[NSHAPES]; /* NaN until measured */
  char info[1024];        /* its "I" line: what it ran */
  bool ran;
} column;

/* Runs argv with the environment edits ("NAME=VALUE" sets, "-NAME"
 * unsets; NULL-terminated), reading its I/R lines into col; a cell keeps
 * the best of the rounds. */
static void run_column(column *col, char *const argv[],
                       const char *const *env) {
  int fd[2];
  if (pipe(fd) != 0) {
    perror("pipe");
    exit(1);
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], STDOUT_FILENO);
    close(fd[1]);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("SLUICE_BLAS_CORETYPE");
    unsetenv("SLUICE_BLAS_LIBRARY");
    setenv("SLUICE_LOG", "error", 1); /* the C column's warning is expected */
    for (const char *const *e = env; *e; e++) {
      if (**e == '-') {
        unsetenv(*e + 1);
      } else {
        char name[128];
        size_t n = strcspn(*e, "=");
        snprintf(name, sizeof name, "%.*s", (int)n, *e);
        setenv(name, *e + n + 1, 1);
      }
    }
    execv(argv[0], argv);
    fprintf(stderr, "bench_sgemm: cannot run %s: %s\n", argv[0],
            strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  FILE *in = fdopen(fd[0], "r");
  char line[1024];
  while (in && fgets(line, sizeof line, in)) {
    int si;
    double gf;
    if (line[0] == 'I' && line[1] == ' ') {
      line[strcspn(line, "\n")] = '\0';
      snprintf(col->info, sizeof col->info, "%s", line + 2);
    } else if (sscanf(line, "R %d %lf", &si, &gf) == 2 && si >= 0 &&
               si < NSHAPES) {
      if (isnan(col->gflops[si]) || gf > col->gflops[si]) col->gflops[si] = gf;
      col->ran = true;
    }
  }
  if (in) fclose(in);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !col->ran)
    snprintf(col->info, sizeof col->info, "did not run (exit status %d)",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
  setvbuf(stdout, NULL, _IOLBF, 0);

  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self[len] = '\0';
  char *child_argv[] = {self, "--child", NULL};

  /* python3 -c SCRIPT m n k ta tb ... */
  char *py_argv[3 + 5 * NSHAPES + 1];
  static char nums[5 * NSHAPES][24];
  int pa = 0;
  py_argv[pa++] = "/usr/bin/python3";
  py_argv[pa++] = "-c";
  py_argv[pa++] = (char *)torch_script;
  for (int si = 0; si < NSHAPES; si++) {
    const shape *s = &shapes[si];
    int64_t v[5] = {s->m, s->n, s->k, s->ta, s->tb};
    for (int j = 0; j < 5; j++) {
      snprintf(nums[si * 5 + j], sizeof nums[0], "%lld", (long long)v[j]);
      py_argv[pa++] = nums[si * 5 + j];
    }
  }
  py_argv[pa] = NULL;

  static const char *const env_sluice[] = {NULL};
  static const char *const env_probe[] = {"SLUICE_BLAS_CORETYPE=auto-off",
                                          NULL};
  static const char *const env_haswell[] = {"OPENBLAS_CORETYPE=HASWELL", NULL};
  static const char *const env_torch[] = {"OMP_NUM_THREADS=1", NULL};
  static const char *const env_c[] = {"SLUICE_BLAS_LIBRARY=none", NULL};
  column cols[] = {
      {.name = "sluice",
       .how = "no OPENBLAS_CORETYPE: sluice chooses",
       .argv = child_argv,
       .env = env_sluice},
      {.name = "ob-probe",
       .how = "SLUICE_BLAS_CORETYPE=auto-off: OpenBLAS probes",
       .argv = child_argv,
       .env = env_probe},
      {.name = "ob-haswell",
       .how = "OPENBLAS_CORETYPE=HASWELL",
       .argv = child_argv,
       .env = env_haswell},
      {.name = "torch",
       .how = "/usr/bin/python3 torch.mm, no OPENBLAS_CORETYPE",
       .argv = py_argv,
       .env = env_torch},
      {.name = "c",
       .how = "SLUICE_BLAS_LIBRARY=none: sluice's C sgemm",
       .argv = child_argv,
       .env = env_c},
  };
  enum { NCOLS = sizeof cols / sizeof cols[0] };
  for (int c = 0; c < NCOLS; c++)
    for (int si = 0; si < NSHAPES; si++)
      cols[c].gflops[si] = NAN;
  const char *env_core = getenv("OPENBLAS_CORETYPE");
  if (env_core)
    printf("note: this environment sets OPENBLAS_CORETYPE=%s; sluice honours "
           "it as the user's choice. Each column sets its own.\n",
           env_core);

  /* Two rounds, the second in reverse order, best per cell: the machine is
   * shared, and a column should not win by running first. */
  bool have_python = access(py_argv[0], X_OK) == 0;
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < NCOLS; i++) {
      int c = round == 0 ? i : NCOLS - 1 - i;
      if (cols[c].argv == py_argv &&
          (!have_python || (round > 0 && !cols[c].ran)))
        continue;
      run_column(&cols[c], cols[c].argv, cols[c].env);
    }
  if (!have_python)
    snprintf(cols[3].info, sizeof cols[3].info, "no /usr/bin/python3");
  else if (!cols[3].ran)
    snprintf(cols[3].info, sizeof cols[3].info,
             "torch not importable in /usr/bin/python3 (apt-get install "
             "python3-torch)");

  printf("\nsgemm, one thread, GFLOP/s (best of >= %d runs and %.1f s); "
         "(x) = sluice / column\n\n",
         MIN_RUNS, MIN_SECONDS);
  printf("%-26s", "shape (m x n x k)");
  for (int c = 0; c < NCOLS; c++)
    printf(" %*s", c == 0 ? 8 : 16, cols[c].name);
  printf("\n");
  for (int si = 0; si < NSHAPES; si++) {
    printf("%-26s", shapes[si].label);
    double base = cols[0].gflops[si];
    for (int c = 0; c < NCOLS; c++) {
      double g = cols[c].gflops[si];
      if (c == 0)
        printf(" %8.1f", g);
      else if (isnan(g))
        printf(" %16s", "n/a");
      else
        printf(" %8.1f (%4.2fx)", g, base / g);
    }
    printf("\n");
  }
  printf("\n");
  for (int c = 0; c < NCOLS; c++)
    printf("%-10s %s\n%-10s   -> %s\n", cols[c].name, cols[c].how, "",
           cols[c].info[0] ? cols[c].info : "?");
  return cols[0].ran ? 0 : 1;
}
