/* The session engine of ex_run: the embedded session of
 * include/sluice/session.h (public API only). Compiled when the build has
 * the session module. */
#include <stddef.h>

#include <sluice/session.h>

sl_status ex__session_create(sl_graph *g, const char *trace_path, void **out);
void ex__session_destroy(void *s);
sl_status ex__session_feed(void *s, const char *name, const void *data,
                           size_t bytes);
sl_status ex__session_step(void *s);
sl_status ex__session_fetch(void *s, const char *name, void *out, size_t bytes);

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
