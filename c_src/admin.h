/* The admin API of cbench-server (--admin-port): JSON over HTTP on a listener of its own, so that a test
 * written in any language can add and remove stubs, read and clear the journal, verify expectations, reset and
 * read the counters of a running server. The endpoints are in docs/routes.md ("The admin API"). */
#ifndef CB_ADMIN_H
#define CB_ADMIN_H

#include <stddef.h>

#include "cbench.h"
#include "stub_json.h"

typedef struct cb_admin_s cb_admin_t;

/* Starts the admin listener on host:port (port 0: an ephemeral one) for the server `data`. `initial`: the
 * stubs already added (from --stubs) with their expectations, copied. The admin API runs on an engine of its
 * own (one worker thread, no journal) whose one deferred route hands every request to the admin thread; that
 * thread calls data's API and answers. Returns 0, or the error of cb_server_start() or pthread_create()
 * (negated), UV_ENOMEM. */
int cb_admin_start(cb_server_t *data, const char *host, int port, const cb_stub_added_t *initial, size_t n,
                   cb_admin_t **out);

/* The port the admin listener is bound to. */
int cb_admin_port(const cb_admin_t *a);

/* Stops the admin thread and its listener (before the data server is stopped: the admin thread calls it).
 * Requests not answered yet are cut. */
void cb_admin_stop(cb_admin_t *a);

#endif
