/* Helpers shared by the actor tests: terse plan building that asserts. */
#ifndef SLUICE_TEST_ACTOR_HELPERS_H
#define SLUICE_TEST_ACTOR_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/actor.h>

#include "core_int.h"
#include "core_thread.h"

static inline sl_actor_id add_actor(sl_actor_graph *p, const char *name,
                                    sl_actor_kind kind, uint32_t node,
                                    uint32_t device, uint32_t stream,
                                    sl_act_fn act, void *ctx, int64_t count) {
  sl_actor_desc d = {name, kind, node, device, stream, act, ctx, count};
  sl_actor_id id = 0;
  sl_status st = sl_actor_graph_add_actor(p, &d, &id);
  if (st != SL_OK) fail_msg("add_actor %s: %s", name, sl_last_error());
  return id;
}

static inline int32_t add_out(sl_actor_graph *p, sl_actor_id producer,
                              int32_t count, size_t bytes) {
  sl_regst_desc d = {NULL, count, bytes, -1, 0, NULL, NULL};
  int32_t r = -1;
  sl_status st = sl_actor_graph_add_output(p, producer, &d, &r);
  if (st != SL_OK) fail_msg("add_out: %s", sl_last_error());
  return r;
}

static inline void connect_to(sl_actor_graph *p, int32_t desc,
                              sl_actor_id consumer) {
  sl_status st = sl_actor_graph_connect(p, desc, consumer);
  if (st != SL_OK) fail_msg("connect: %s", sl_last_error());
}

/* Runs a one-node plan with cfg (may be NULL), returns the status; the job
 * is handed back through *job_out when not NULL (else destroyed). */
static inline sl_status run_plan(sl_actor_graph *p, const sl_job_config *cfg,
                                 sl_job **job_out) {
  sl_job *job = NULL;
  sl_status st = sl_job_create(p, cfg, &job);
  if (st != SL_OK) {
    if (job_out) *job_out = NULL;
    return st;
  }
  st = sl_job_run(job);
  if (job_out)
    *job_out = job;
  else
    sl_job_destroy(job);
  return st;
}

/* Seed for randomised tests: SLUICE_TEST_SEED or the given default; printed
 * so that a failure can be replayed. */
static inline uint64_t test_seed(uint64_t dflt, const char *what) {
  const char *e = getenv("SLUICE_TEST_SEED");
  uint64_t s = e && e[0] ? strtoull(e, NULL, 0) : dflt;
  printf("%s: seed %llu (replay with SLUICE_TEST_SEED=%llu)\n", what,
         (unsigned long long)s, (unsigned long long)s);
  fflush(stdout);
  return s;
}

static inline long env_long(const char *name, long dflt) {
  const char *e = getenv(name);
  return e && e[0] ? strtol(e, NULL, 0) : dflt;
}

#endif
