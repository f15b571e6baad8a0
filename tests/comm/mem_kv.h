/* An in-memory key-value store for device-collective unique ids between
 * simulated processes (threads) of one test: the sl__dev_kv interface
 * (comm/coll/dev_coll.h) over up to 16 keys, counting puts and gets. Shared by
 * tests/comm/coll/test_dev_coll.c (through dev_coll_fake.h) and
 * tests/session/test_fake_cuda.c. Include after cmocka.h (memkv_init
 * asserts). */
#ifndef SLUICE_TESTS_MEM_KV_H
#define SLUICE_TESTS_MEM_KV_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core_thread.h"
#include "dev_coll.h"

typedef struct memkv {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char key[16][SL__CP_MAX_NAME + 1];
  uint8_t val[16][SL__DEV_COLL_ID_MAX];
  size_t len[16];
  int n, puts, gets;
} memkv;

static sl_status kv_put(void *ctx, const char *key, const void *b, size_t len) {
  memkv *m = ctx;
  /* Not an assert: puts come from the simulated processes' threads. */
  if (len > SL__DEV_COLL_ID_MAX) return sl__fail(SL_EINVAL, "memkv: too long");
  pthread_mutex_lock(&m->mu);
  int k = 0;
  while (k < m->n && strcmp(m->key[k], key) != 0)
    k++;
  if (k == 16) {
    pthread_mutex_unlock(&m->mu);
    return sl__fail(SL_ENOMEM, "memkv: full");
  }
  if (k == m->n) m->n++;
  snprintf(m->key[k], sizeof m->key[k], "%s", key);
  memcpy(m->val[k], b, len);
  m->len[k] = len;
  m->puts++;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return SL_OK;
}

static sl_status kv_get(void *ctx, const char *key, uint64_t wait_ms,
                        uint8_t **b, size_t *len) {
  memkv *m = ctx;
  uint64_t end = sl__now_ns() + wait_ms * 1000000u;
  pthread_mutex_lock(&m->mu);
  m->gets++;
  for (;;) {
    for (int k = 0; k < m->n; k++)
      if (strcmp(m->key[k], key) == 0) {
        *b = sl__malloc(m->len[k] ? m->len[k] : 1);
        if (*b) memcpy(*b, m->val[k], m->len[k]);
        *len = m->len[k];
        pthread_mutex_unlock(&m->mu);
        return *b ? SL_OK : SL_ENOMEM;
      }
    uint64_t now = sl__now_ns();
    if (now >= end) break;
    sl__cond_wait_ns(&m->cv, &m->mu, end - now);
  }
  pthread_mutex_unlock(&m->mu);
  return sl__fail(SL_ETIMEOUT, "memkv: no '%s'", key);
}

static void memkv_init(memkv *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  assert_int_equal(sl__cond_init(&m->cv), SL_OK);
}

static void memkv_fini(memkv *m) {
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->mu);
}

#endif
