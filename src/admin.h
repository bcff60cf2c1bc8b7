/* The admin API (cfg.admin): JSON over HTTP on a listener of its own, so that a test written in any language can
 * add and remove stubs, read and clear the journal, verify expectations, reset and read the counters of a running
 * server. The endpoints are in docs/routes.md ("The admin API"). */
#ifndef CB_ADMIN_H
#define CB_ADMIN_H

#include <stddef.h>

#include "cbench.h"
#include "stub_json.h"

typedef struct cb__admin_s cb__admin_t;

/* Starts the admin listener on host:port (port 0: an ephemeral one) for the server `data`, whose workers are
 * running. The admin API runs on an engine of its own (one worker thread, no journal) whose one deferred route
 * hands every request to the admin thread; that thread calls data's API and answers. Returns 0, or the error of
 * cb_server_start() (UV_EADDRINUSE...), of pthread_create() (negated), UV_ENOMEM. */
int cb__admin_start(cb_server_t *data, const char *host, int port, cb__admin_t **out);

/* The port the admin listener is bound to. */
int cb__admin_port(const cb__admin_t *a);

/* Around an add from outside the admin thread (cb_server_stubs_file()): the stubs added, then their
 * expectations recorded, with POST /reset held off meanwhile, so that a reset never comes between the two (the
 * stubs kept and their expectations lost). Any thread but a worker; not nested. */
void cb__admin_add_begin(cb__admin_t *a);
void cb__admin_add_end(cb__admin_t *a);

/* Tests only (testing.h, cb__test_admin_reset_hook()): called by POST /reset on the admin thread once the stubs
 * are removed, before the journal and the expectations are cleared. */
extern void (*cb__admin_reset_hook)(void *arg);
extern void *cb__admin_reset_hook_arg;

/* Records the expectations ("expect") of stubs just added outside the admin API (a stub file). Any thread but a
 * worker. Returns 0 or UV_ENOMEM. */
int cb__admin_expect(cb__admin_t *a, const cb_stub_added_t *added, size_t n);

/* Stops the admin thread and its listener, before the data server stops (the admin thread calls it). Requests
 * not answered yet are cut. NULL does nothing. */
void cb__admin_stop(cb__admin_t *a);

#endif
