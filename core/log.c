/* Leveled logging to stderr; the threshold starts from SLUICE_LOG. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_int.h"

/* -1 = not yet read from the environment. */
static atomic_int log_level = -1;

sl_status sl_logging_level_parse(const char *text, sl_logging_level *out) {
  static const char *const names[] = {"debug", "info", "warn", "error", "off"};
  for (size_t i = 0; text && i < SL_ARRAY_LEN(names); i++) {
    if (strcmp(text, names[i]) == 0) {
      *out = (sl_logging_level)i;
      return SL_OK;
    }
  }
  return sl__fail(SL_EINVAL,
                  "log level '%s': expected debug, info, warn, error or off",
                  text ? text : "(null)");
}

sl_logging_level sl_logging_get_level(void) {
  int lv = atomic_load_explicit(&log_level, memory_order_relaxed);
  if (lv >= 0) return (sl_logging_level)lv;
  sl_logging_level parsed = SL_LOGGING_WARN;
  const char *env = getenv("SLUICE_LOG");
  if (env && *env && sl_logging_level_parse(env, &parsed) != SL_OK) {
    fprintf(stderr, "sluice: SLUICE_LOG='%s' is not a level; using warn\n",
            env);
    parsed = SL_LOGGING_WARN;
  }
  atomic_store(&log_level, (int)parsed);
  return parsed;
}

void sl_logging_set_level(sl_logging_level level) {
  atomic_store(&log_level, (int)level);
}

void sl__log(sl_logging_level level, const char *file, int line,
             const char *fmt, ...) {
  static const char tags[] = "DIWE";
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  localtime_r(&ts.tv_sec, &tm);
  /* One fprintf per line so concurrent threads do not interleave fragments. */
  fprintf(stderr, "%c %02d:%02d:%02d.%03ld %s:%d] %s\n", tags[level],
          tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
          base ? base + 1 : file, line, msg);
}
