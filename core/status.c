/* Status names and the thread-local detailed error message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"

#define SL__ERRMSG_MAX 1024

static _Thread_local char last_error[SL__ERRMSG_MAX];

const char *sl_status_str(sl_status st) {
  switch (st) {
  case SL_OK: return "SL_OK";
  case SL_EINVAL: return "SL_EINVAL";
  case SL_ENOMEM: return "SL_ENOMEM";
  case SL_EUNSUPPORTED: return "SL_EUNSUPPORTED";
  case SL_ESTATE: return "SL_ESTATE";
  case SL_EIO: return "SL_EIO";
  case SL_EINTERNAL: return "SL_EINTERNAL";
  case SL_ETIMEOUT: return "SL_ETIMEOUT";
  case SL_EABORTED: return "SL_EABORTED";
  case SL_EHANG: return "SL_EHANG";
  case SL_EMISMATCH: return "SL_EMISMATCH";
  case SL_ECOMM: return "SL_ECOMM";
  case SL_EAUTH: return "SL_EAUTH";
  case SL_ECUDA: return "SL_ECUDA";
  case SL_ENCCL: return "SL_ENCCL";
  case SL_ENOTFOUND: return "SL_ENOTFOUND";
  }
  return "SL_E?";
}

const char *sl_last_error(void) { return last_error; }

void sl_clear_error(void) { last_error[0] = '\0'; }

sl_status sl_set_error(sl_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return st;
}

sl_status sl_add_error_context(sl_status st, const char *fmt, ...) {
  char prefix[SL__ERRMSG_MAX];
  char old[SL__ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_error, sizeof old);
  /* Truncation keeps the prefix, which names the failing object. */
  size_t n = strlen(prefix);
  if (n >= sizeof last_error) n = sizeof last_error - 1;
  memcpy(last_error, prefix, n);
  size_t rest = strnlen(old, sizeof old - 1);
  if (rest > sizeof last_error - 1 - n) rest = sizeof last_error - 1 - n;
  memcpy(last_error + n, old, rest);
  last_error[n + rest] = '\0';
  return st;
}

void sl__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "sluice: internal invariant failed: %s (%s:%d)\n", expr, file,
          line);
  abort();
}

const char *sl_version(void) { return SLUICE_VERSION_STRING; }
