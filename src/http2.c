/* HTTP/2 over cleartext (h2c) with nghttp2: not built yet (issue 3). Until then the engine reports HTTP/2 as
 * unavailable, and a prior-knowledge preface is parsed as HTTP/1.1 (where PRI is refused with 400). */
#include "internal.h"

int cb__h2_available(void) { return 0; }

int cb__h2_attach_prior(cb__conn_t *c) {
  (void)c;
  return UV_ENOSYS;
}

int cb__h2_upgrade(cb__conn_t *c, const char *settings, size_t settings_len, int head_request) {
  (void)c;
  (void)settings;
  (void)settings_len;
  (void)head_request;
  return UV_ENOSYS;
}
