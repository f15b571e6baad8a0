/* Helpers the benchmarks share: medians, and running a peer (a PyTorch
 * script) with its standard output piped back. */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* The median of n > 0 values (the mean of the middle two for even n);
 * sorts v. */
double bench_median(double *v, int n);

/* An integer flag `--name N` with N in [min, max]. */
typedef struct bench_int_flag {
  const char *name; /* without the dashes */
  int *value;
  int min, max;
} bench_int_flag;

/* Parses argv into the n flags: 0 when all are good, 1 for --help (say
 * the usage on stdout), 2 for an unknown flag, a missing value or one out
 * of range, which is reported on stderr under prog's name (say the usage
 * on stderr). */
int bench_int_flags(int argc, char **argv, const char *prog,
                    const bench_int_flag *flags, int n);

typedef struct bench_peer {
  pid_t pid;
  FILE *out; /* the peer's standard output */
} bench_peer;

/* Starts argv[0] (searched in PATH) with argv (NULL-terminated), its
 * standard output readable from p->out; its standard error stays ours.
 * False with the reason in why. */
bool bench_peer_start(const char *const *argv, bench_peer *p, char *why,
                      size_t n);
/* Closes p->out and waits for the peer: its exit status, -1 when it did not
 * exit normally. */
int bench_peer_wait(bench_peer *p);

#endif
