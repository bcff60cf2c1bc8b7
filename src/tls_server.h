/* The server's TLS (cfg.tls): its certificates (made at start, or the user's files) and the context every worker's
 * connections take a session of (transport/tls.c). */
#ifndef CB_TLS_SERVER_H
#define CB_TLS_SERVER_H

#include "cbench.h"

/* Sets up srv->tls from cfg: 0 (also when cfg.tls is 0), UV_ENOENT... (a file that cannot be read), UV_EINVAL (a
 * certificate or key that does not parse, or that do not belong together), UV_ENOMEM; the reason, naming the
 * file, in why (why_size bytes, NUL-terminated). */
int cb__server_tls_open(cb_server_t *srv, const cb_config_t *cfg, char *why, size_t why_size);
void cb__server_tls_close(cb_server_t *srv);

#endif
