/* Helpers of the control-plane tests: a master on 127.0.0.1 with an
 * ephemeral port, nodes and clients joining it, threads. Deadlines in the
 * tests bound waits that should succeed (LONG, generous, so a loaded
 * machine does not fail them) and provoke timeouts where a timeout is the
 * property under test (SHORT); no test measures how long anything took. */
#ifndef SLUICE_TEST_CP_HELPERS_H
#define SLUICE_TEST_CP_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_thread.h"
#include "cp_int.h"

#define TOKEN "test-token-0123456789"
#define LONG_MS 30000
#define SHORT_MS 300

#define CHECK_OK(call)                                                         \
  do {                                                                         \
    sl_status st__ = (call);                                                   \
    if (st__ != SL_OK)                                                         \
      fail_msg("%s: %s: %s", #call, sl_status_str(st__), sl_last_error());     \
  } while (0)

/* The call fails with `want` and its message contains `part`. */
#define CHECK_FAILS(call, want, part)                                          \
  do {                                                                         \
    sl_status st__ = (call);                                                   \
    if (st__ != (want))                                                        \
      fail_msg("%s: %s (%s), expected %s", #call, sl_status_str(st__),         \
               sl_last_error(), sl_status_str(want));                          \
    if (!strstr(sl_last_error(), (part)))                                      \
      fail_msg("%s: message '%s' lacks '%s'", #call, sl_last_error(), (part)); \
  } while (0)

static inline sl__cp_server *start_master(int nnodes, uint32_t timeout_ms) {
  sl__cp_server_opts o = {0};
  o.nnodes = nnodes;
  o.token = TOKEN;
  o.heartbeat_timeout_ms = timeout_ms;
  sl__cp_server *s = NULL;
  CHECK_OK(sl__cp_server_create(&o, &s));
  assert_true(sl__cp_server_port(s) > 0);
  return s;
}

static inline void master_addr(sl__cp_server *s, char *buf, size_t n) {
  snprintf(buf, n, "127.0.0.1:%d", sl__cp_server_port(s));
}

static inline sl_status join_as(sl__cp_server *s, sl__cp_role role, int rank,
                                const char *token, bool wait_all,
                                uint64_t timeout_ms, sl__cp_client **out) {
  char addr[64], dev[32], data[32];
  master_addr(s, addr, sizeof addr);
  snprintf(dev, sizeof dev, "cpu:0-%d", rank < 0 ? 3 : rank);
  snprintf(data, sizeof data, "127.0.0.1:%d", 40000 + (rank < 0 ? 99 : rank));
  sl__cp_client_opts o = {0};
  o.master = addr;
  o.token = token;
  o.role = role;
  o.node_rank = rank;
  o.devices = role == SL__CP_NODE ? dev : NULL;
  o.data_addr = role == SL__CP_NODE ? data : NULL;
  o.wait_all = wait_all;
  return sl__cp_client_connect(&o, timeout_ms, out);
}

static inline sl__cp_client *join_node(sl__cp_server *s, int rank) {
  sl__cp_client *c = NULL;
  CHECK_OK(join_as(s, SL__CP_NODE, rank, TOKEN, false, LONG_MS, &c));
  return c;
}

static inline sl__cp_client *join_client(sl__cp_server *s, bool wait_all) {
  sl__cp_client *c = NULL;
  CHECK_OK(join_as(s, SL__CP_CLIENT, -1, TOKEN, wait_all, LONG_MS, &c));
  return c;
}

static inline sl__cp_server_stats stats_of(sl__cp_server *s) {
  sl__cp_server_stats st;
  sl__cp_server_stats_get(s, &st);
  return st;
}

/* Runs fn(arg) on a thread. */
static inline void spawn(sl__thread *t, void *(*fn)(void *), void *arg) {
  CHECK_OK(sl__thread_start(t, fn, arg, "cp-test"));
}

#endif
