/* Entry points for tests and fuzz targets: a connection with no socket.
 *
 * A test connection runs the real connection code (protocol detection, HTTP/1.1, HTTP/2, handlers) on a
 * worker that has a loop but no thread and no listener. Bytes fed in are parsed exactly as if read from a
 * socket; everything the connection would write goes to the sink, in order (file bytes included), so a test
 * can compare whole responses. These symbols are internal (hidden in libcbench.so); link libcbench.a.
 */
#ifndef CB_TESTING_H
#define CB_TESTING_H

#include <stddef.h>
#include "cbench.h"

typedef struct cb__testconn_s cb__testconn_t;

/* Receives output bytes. Called from within cb__testconn_feed() and cb__testconn_run(). */
typedef void (*cb__sink_fn)(void *arg, const char *data, size_t len);

/* Creates a worker (with its fixtures) and one connection on it. cfg may be NULL for the defaults; the fixture
 * files are written as by cb_server_start(). Returns NULL on failure. */
cb__testconn_t *cb__testconn_new(const cb_config_t *cfg, cb__sink_fn sink, void *arg);

/* The same worker with one connection over the TLS transport (transport/tls.c) on the socket fd, with a session
 * of ctx (cb__tls_ctx_new): the test holds the socket's other end, and cb__testconn_run() polls fd as the loop
 * of a server's worker does (a paced handshake's timer runs on it too). cb__testconn_feed() and _eof() do not
 * apply. The connection closes fd; so does a failure (NULL), but for a NULL ctx. */
struct cb__tls_ctx_s;
cb__testconn_t *cb__testconn_new_tls(const cb_config_t *cfg, int fd, struct cb__tls_ctx_s *ctx);

/* Feeds bytes as one read. Returns 0 while the connection is open, 1 once the server has closed it (after
 * which further input is ignored). */
int cb__testconn_feed(cb__testconn_t *tc, const char *data, size_t len);

/* Signals end of input (the peer closed its sending side). Returns like cb__testconn_feed(). */
int cb__testconn_eof(cb__testconn_t *tc);

/* The connection's rest step now, as after a second without an event (an idle h2 session parks there), then
 * its after-event step. Returns like cb__testconn_feed(). */
int cb__testconn_rest(cb__testconn_t *tc);

/* Runs the worker's loop once without blocking (uv_run NOWAIT), or until no timer is pending when
 * `until_idle` is non-zero, so that /delay responses and timeouts fire. Returns like cb__testconn_feed(). */
int cb__testconn_run(cb__testconn_t *tc, int until_idle);

/* What the connection holds between requests: 1 its protocol state, 2 its output queue's storage (or'ed). */
int cb__testconn_holds(cb__testconn_t *tc);

/* Sets the worker's Date line to `date: <imf>` (an IMF-fixdate, 29 characters), as its once-a-second refresh
 * does: what was made under the old line (HTTP/1.1's memos) is made again. */
void cb__testconn_set_date(cb__testconn_t *tc, const char *imf);

/* stalled 1: the peer stops reading (what the connection writes stays queued, as before a socket that does not
 * drain); 0: it reads again, and what was queued is flushed at once. Returns like cb__testconn_feed(). */
int cb__testconn_stall(cb__testconn_t *tc, int stalled);

/* The peer reads again, but the connection is not told: its writable event is still to come, as when a socket
 * drains and the loop turn runs other events (an upstream's) before that one (epoll's ready list order). The
 * next after-event step writes what is queued. Returns like cb__testconn_feed(). */
int cb__testconn_unstall_unseen(cb__testconn_t *tc);

/* The bytes the connection has queued and not written. */
size_t cb__testconn_queued(cb__testconn_t *tc);

/* The timer wake-ups of paced answers (faults dribble, drip, slow_head; stub intervals) on the test worker. */
uint64_t cb__testconn_pace_wakes(cb__testconn_t *tc);

/* The longest wait, in ms, of the timers running on the test worker (the one a /fault/delay armed, when the
 * idle and header timeouts are shorter). */
uint64_t cb__testconn_timer_max(cb__testconn_t *tc);

/* Reads the worker's counters. */
void cb__testconn_stats(cb__testconn_t *tc, cb_stats_t *out);

/* Requests counted under a route name on the test worker (names that repeat are added up). */
uint64_t cb__testconn_route_count(cb__testconn_t *tc, const char *name);

/* Adds a stub to the test worker's table, as cb_server_route_add() does for a server. */
int cb__testconn_route_add(cb__testconn_t *tc, const cb_stub_t *stub, uint64_t *id);

/* The near misses (near_miss.c) of a request that reached no route, scored against the test worker's table:
 * hdrs as "name:value" (names lowercased), out[i] "NAME SCORE: the parts that differ", best first. */
int cb__testconn_near(cb__testconn_t *tc, const char *method, const char *target, const char *const *hdrs, int nhdrs,
                      char out[][256], int max);
/* The same, adding to *work the units of work its query matchers took (kinds/kinds.h, cb__near_misses). */
int cb__testconn_near_counted(cb__testconn_t *tc, const char *method, const char *target, const char *const *hdrs,
                              int nhdrs, char out[][256], int max, uint64_t *work);

/* How many times the connections of srv's workers wrote their queued output (one flush: one write or writev,
 * more after a short one). Read while the server is quiet. */
uint64_t cb__server_flushes(cb_server_t *srv);

/* The bytes of deferred request ref's answer the server holds, not written yet (HTTP/1.1: its connection's
 * output queue; h2c: its stream's pieces), read on its worker after every reply posted before this call has
 * run; SIZE_MAX when the request is over. */
size_t cb__server_reply_queued(cb_server_t *srv, cb_reqref_t ref);

/* Closes the connection, closes every handle, checks that the loop closes cleanly, frees everything.
 * Returns 0, or a negative code when the loop still had handles (a leak). */
int cb__testconn_free(cb__testconn_t *tc);

/* Tests only: fn(arg) runs on the admin thread inside each POST /reset, once the stubs are removed and before the
 * journal and the expectations are cleared (NULL: none). Set it before the requests it is for. */
void cb__test_admin_reset_hook(void (*fn)(void *arg), void *arg);

#endif
