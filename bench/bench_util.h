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
