/* The session engine of ex_run: the embedded session of
 * include/sluice/session.h (public API only). Compiled when the build has
 * the session module. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

#include <sluice/session.h>

sl_status ex__session_create(sl_graph *g, const char *trace_path, void **out);
void ex__session_destroy(void *s);
sl_status ex__session_feed(void *s, const char *name, const void *data,
                           size_t bytes);
sl_status ex__session_step(void *s);
sl_status ex__session_fetch(void *s, const char *name, void *out, size_t bytes);
sl_status ex__session_memory_print(void *s, FILE *out);

sl_status ex__session_create(sl_graph *g, const char *trace_path, void **out) {
  sl_session_config cfg = sl_session_config_default();
  cfg.trace_path = trace_path;
  sl_session *s = NULL;
  sl_status st = sl_session_create(g, &cfg, &s);
  *out = s;
  return st;
}

void ex__session_destroy(void *s) { sl_session_destroy(s); }

sl_status ex__session_feed(void *s, const char *name, const void *data,
                           size_t bytes) {
  return sl_session_feed(s, name, data, bytes);
}

sl_status ex__session_step(void *s) { return sl_session_run(s, 1); }

sl_status ex__session_fetch(void *s, const char *name, void *out,
                            size_t bytes) {
  return sl_session_fetch(s, name, out, bytes);
}

sl_status ex__session_memory_print(void *s, FILE *out) {
  for (int32_t i = 0; i < sl_session_memory_device_count(s); i++) {
    sl_memory_stats m;
    sl_status st = sl_session_get_memory(s, i, &m);
    if (st != SL_OK) return st;
    fprintf(out, "memory %s peak %" PRId64 " bytes (", m.device, m.peak);
    for (int c = 0; c < SL_MEMORY_CATEGORIES; c++)
      fprintf(out, "%s%s %" PRId64, c ? ", " : "",
              sl_memory_category_name((sl_memory_category)c), m.category[c]);
    fprintf(out, "); allocated %" PRId64 " bytes\n", m.allocated);
  }
  return SL_OK;
}
