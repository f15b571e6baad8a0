/* A stand-in daemon for the control-plane failure tests, run as its own
 * process so that a test can stop (SIGSTOP) or kill (SIGKILL) it the way a
 * hung or crashed daemon goes.
 *
 *   cp_node_helper MASTER TOKEN RANK FIRST_JOB NJOBS
 *
 * Joins as node RANK, prints "joined RANK" on stdout, then serves jobs
 * FIRST_JOB .. FIRST_JOB+NJOBS-1 in turn: fetches its plan, waits until the
 * job runs, puts its plan back as the result "rank<RANK>", reports success.
 * Then it idles, heartbeating, until killed. Exit status 1 with the error
 * on stderr when a step fails. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "core_thread.h"
#include "cp.h"

#define WAIT_MS 60000

static int die(const char *what) {
  fprintf(stderr, "cp_node_helper: %s: %s\n", what, sl_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: cp_node_helper MASTER TOKEN RANK FIRST_JOB "
                    "NJOBS\n");
    return 2;
  }
  /* Never outlive the test that started us, whatever happens to it. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1;
  sl__cp_client_opts o = {0};
  o.master = argv[1];
  o.token = argv[2];
  o.role = SL__CP_NODE;
  o.node_rank = atoi(argv[3]);
  o.devices = "cpu:0";
  o.data_addr = "127.0.0.1:1";
  uint64_t first = strtoull(argv[4], NULL, 10);
  int njobs = atoi(argv[5]);
  sl__cp_client *c;
  if (sl__cp_client_connect(&o, WAIT_MS, &c) != SL_OK) return die("connect");
  printf("joined %d\n", sl__cp_client_rank(c));
  fflush(stdout);
  char key[32];
  snprintf(key, sizeof key, "rank%d", sl__cp_client_rank(c));
  for (int k = 0; k < njobs; k++) {
    uint64_t job = first + (uint64_t)k;
    uint8_t *plan;
    size_t len;
    sl__cp_job_info info;
    if (sl__cp_plan_fetch(c, job, sl__cp_client_rank(c), WAIT_MS, &plan,
                          &len) != SL_OK)
      return die("plan fetch");
    if (sl__cp_job_status(c, job, SL__CP_JOB_RUNNING, WAIT_MS, &info) != SL_OK)
      return die("job status");
    if (info.state == SL__CP_JOB_RUNNING) {
      if (sl__cp_result_put(c, job, key, plan, len, WAIT_MS) != SL_OK)
        return die("result put");
      if (sl__cp_job_report(c, job, SL_OK, "", WAIT_MS) != SL_OK)
        return die("job report");
    }
    sl__free(plan);
  }
  for (;;)
    sl__sleep_ns(1000000000ull);
}
