/* What the files of the port program share: the server, framed replies, and ei helpers.
 *
 *   cbench_port.c   framing, dispatch, start/stop/stats, down/up
 *   port_stub.c     {route_add, Match, Response} and the other route commands
 *   port_journal.c  {requests, Filter}, requests_clear, {journal_listen, Bool} and its unsolicited frames
 *   port_handler.c  Erlang handlers: {handler_add, ...}, {handler_fail, Id}, {reply, Items}, and the
 *                   unsolicited {cbench_requests, ...} and {cbench_gone, Ref} frames
 */
#ifndef CBENCH_PORT_H
#define CBENCH_PORT_H

#include <ei.h>

#include "cbench.h"

enum { EXIT_MALFORMED = 2, EXIT_TOO_LARGE = 3, EXIT_IO = 4, EXIT_NOMEM = 5 };

/* The engine, once started (only the main thread changes it). */
extern cb_server_t *port_server;

/* Stops the engine and exits. Main thread only. */
void port_die(int status) __attribute__((noreturn));

/* A reply buffer with the version byte. */
void port_new(ei_x_buff *x);

/* Writes x as one {packet, 4} frame and frees it. Frames are written whole under one lock: worker threads
 * write unsolicited frames (port_journal.c) while the main thread replies. */
void port_send(ei_x_buff *x);

/* Like port_send for a worker thread: a failed write is left for the main thread to find (it reads EOF). */
void port_send_from_worker(ei_x_buff *x);

/* Replies: `ok`; {error, Name} (the engine's error name lowercased without CB_, as the NIF answers); either,
 * from an engine result; {ok, Id} or the error, from an engine result and the id it made; {error, Atom}. */
void port_reply_ok(void);
void port_reply_error(int err);
void port_reply_result(int err);
void port_reply_id(int err, uint64_t id);
void port_reply_error_atom(const char *atom);
/* A command whose argument is an id: op(server, Id) and its result replied; badarg for anything but a 64-bit
 * unsigned integer. */
void port_id_op(const char *buf, int *idx, int (*op)(cb_server_t *, uint64_t));

/* A BINARY_EXT term as a pointer into the frame (valid while the frame is dispatched); 0 or -1. */
int port_get_bin(const char *buf, int *idx, cb_str_t *out);

/* An unsigned integer up to max; 0 or -1. */
int port_get_id(const char *buf, int *idx, unsigned long long *id);
int port_get_uint(const char *buf, int *idx, unsigned long long max, unsigned long long *out);

/* Whether the next term is the atom `name` (consumed when it is). */
int port_is_atom(const char *buf, int *idx, const char *name);

/* A route name as the NIF gives it: an atom for the fixture routes (and not_found), a binary for stubs. */
void port_encode_route_name(ei_x_buff *x, const char *p, size_t n);

/* Records the fixture route names of the started server. */
void port_fixture_names(const cb_route_counts_t *rc);

/* The arrays a decoded stub points into, on the caller's stack. */
typedef struct {
  cb_matcher_t headers[CB_MAX_MATCHERS];
  cb_matcher_t query[CB_MAX_MATCHERS];
  cb_header_t res_headers[CB_MAX_HEADERS];
} stub_arrays_t;

/* A match (cbench_c_terms:match/1) into st's name and match: 0, or -1 when it does not decode. */
int port_decode_match(const char *buf, int *idx, cb_stub_t *st, stub_arrays_t *a);

/* The commands of port_handler.c; each reads its arguments at *idx (port_reply sends no answer). */
void port_handler_add(const char *buf, int *idx);
void port_handler_fail(const char *buf, int *idx);
void port_reply(const char *buf, int *idx);

/* The commands of port_stub.c and port_journal.c; each reads its arguments at *idx and replies. */
void port_route_add(const char *buf, int *idx);
void port_scenario(const char *buf, int *idx);
void port_scenario_set(const char *buf, int *idx);
void port_scenarios_reset(void);
/* The reply to a route or handler add: {ok, Id}, or {error, {bad_stub, {Field, Value, Why}}} (port_stub.c). */
void port_reply_added(int err, uint64_t id, const cb_match_t *m, const cb_response_t *res);
void port_route_remove(const char *buf, int *idx);
void port_route_reset(void);
void port_stubs(void);
void port_requests(const char *buf, int *idx);
void port_requests_clear(void);
void port_journal_listen(const char *buf, int *idx);

#endif
