/* What the files of the port program share: the server, framed replies, and the codec's ei backend. Terms are
 * decoded and encoded by the one codec of the NIF and the port program (terms/codec.h).
 *
 *   cbench_port.c   framing, dispatch, start/stop/stats, down/up
 *   port_calls.c    the control plane over the codec: {route_add, Match, Response} and the other route,
 *                   scenario and journal commands, {handler_add, ...}, {handler_fail, Id}, {reply, Items}
 *   port_deliver.c  the unsolicited frames worker threads write: {cbench_journal, Seq}, {cbench_requests, ...},
 *                   {cbench_body, ...} and {cbench_gone, Ref}
 *   port_reply_frame.c  the {reply, Items} frames of whole answers, read in one pass
 */
#ifndef CBENCH_PORT_H
#define CBENCH_PORT_H

#include <ei.h>

#include "cbench.h"
#include "codec.h"
#include "term_ei.h"

enum { EXIT_MALFORMED = 2, EXIT_TOO_LARGE = 3, EXIT_IO = 4, EXIT_NOMEM = 5 };

/* The engine, once started (only the main thread changes it). */
extern cb_server_t *port_server;

/* The fixture route names of the started server (journal entries and counters give them as atoms). */
extern cb_codec_fixture_t port_fixture;

/* Stops the engine and exits. Main thread only. */
void port_die(int status) __attribute__((noreturn));

/* A reply buffer with the version byte. */
void port_new(ei_x_buff *x);

/* Writes x as one {packet, 4} frame and frees it. Frames are written whole under one lock: worker threads
 * write unsolicited frames (port_deliver.c) while the main thread replies. */
void port_send(ei_x_buff *x);

/* Like port_send for a worker thread: a failed write is left for the main thread to find (it reads EOF). */
void port_send_from_worker(ei_x_buff *x);

/* The same for a frame's bytes written without ei (malloc'd: freed here). */
void port_send_bytes_from_worker(char *bytes, size_t n);

/* A reply written by the codec into a frame: w is initialised on a new buffer; port_answer() sends it (exiting
 * EXIT_NOMEM when the codec ran out of memory). */
void port_begin(cb_ei_out_t *w, ei_x_buff *x);
void port_answer(cb_ei_out_t *w);

/* Replies: ok or {error, Name} from an engine result; {error, Atom}. */
void port_reply_result(int err);
void port_reply_error_atom(const char *atom);

/* The commands of port_calls.c; each reads its arguments at args (the index of the first) and replies, but
 * port_reply, which sends no answer. */
void port_route_add(const char *buf, int args);
void port_route_remove(const char *buf, int args);
void port_route_reset(void);
void port_stubs(void);
void port_tls(void);
void port_scenario(const char *buf, int args);
void port_scenario_set(const char *buf, int args);
void port_scenarios_reset(void);
void port_client_ca(void);
/* The recordings (docs/record.md), as the NIF answers them (nif/nif_record.c). */
void port_recorded(void);
void port_clear_recorded(void);
void port_save_stubs(const char *buf, int args);
void port_load_stubs(const char *buf, int args);
void port_client_cert(const char *buf, int args);
void port_requests(const char *buf, int args);
void port_requests_clear(void);
void port_journal_listen(const char *buf, int args);
void port_handler_add(const char *buf, int args);
void port_handler_fail(const char *buf, int args);
void port_reply(const char *buf, int args);
/* {reply, Items} by port_reply_frame when it takes the frame (answered: 1), else 0 and nothing was done: the
 * caller checks the frame and gives it to port_reply. len: the frame's end. */
int port_reply_fast(const char *buf, int args, int len);

/* Reads the list of items at buf[at..end) when each is {Ref, reply, Status, [{Name, Value}], Body} of binaries
 * and the list ends at end: 1, with *items (the reader's own array, good until the next call) and *n; 0 for
 * anything else (nothing read: the codec then reads it). Main thread only. */
int port_reply_frame(const char *buf, int at, int end, cb_reply_t **items, size_t *n);

/* The engine callbacks of port_deliver.c, on worker threads. */
void port_journal_wake(void *ud, const cb_request_t *req);
int port_deliver(void *ud, const cb_deferred_req_t *reqs, size_t n);
void port_gone(void *ud, cb_reqref_t ref);
void port_body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end);

#endif
