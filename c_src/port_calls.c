/* The control-plane commands of the port program, as the NIF answers them (nif/nif_calls.c), over the same
 * codec (terms/codec.h, ei backend):
 *
 *   {route_add, Match, Response}       -> {ok, Id} | {error, Reason}
 *   {route_remove, Id} | route_reset   -> ok | {error, Reason}
 *   stubs                              -> {ok, [#{id, name, hits, left}]}
 *   tls                                -> {ok, CaPem} | {error, no_ca}   (cb_server_tls_ca)
 *   {scenario, Name}                   -> {ok, State} | {error, Reason}
 *   {scenario_set, Name, State}        -> ok | {error, Reason}
 *   scenarios_reset                    -> ok
 *   {requests, Filter}                 -> {ok, [Entry]} | {error, Reason}
 *   requests_clear                     -> ok | {error, Reason}
 *   {journal_listen, Bool}             -> ok | {error, Reason}   (port_deliver.c writes the wake-ups)
 *   {handler_add, Match, TimeoutMs, Stream} -> {ok, Id} | {error, Reason}   (Stream: the body in pieces)
 *   {handler_fail, Id}                 -> ok | {error, Reason}   (the handler died: 503s, cut streams)
 *   client_ca                          -> {ok, Pem} | {error, no_tls}
 *   {client_cert, Cn}                  -> {ok, CertPem, KeyPem, Subject, Sha256} | {error, no_tls | einval}
 *   recorded                           -> {ok, Json} | {error, Reason}   (cb_server_recorded_json)
 *   {save_stubs, Path}                 -> {ok, N} | {error, {save_failed, Message}}
 *   {load_stubs, Path}                 -> {ok, N} | {error, {bad_stub_file, Message}}
 *   clear_recorded                     -> ok
 *   {reply, [Item]}                    -> no answer: one cb_server_reply() call for every item of the frame
 *
 * Arguments that do not decode get {error, badarg} and the program goes on; a {reply, Items} frame that does not
 * decode is a bug on the node's side (cbench_port builds it from checked answers), so the program exits
 * EXIT_MALFORMED, as for any malformed frame. Strings point into the frame, which lives while the command runs.
 * Replies carry no answer: the node keeps each request's state (docs/erlang.md), so an answer refused here
 * (CB_EGONE) raced the request's end, which the node learns from {cbench_gone, Ref}.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "port.h"

#define T(i) CB_EI_TERM(i)

/* ok | {error, Name}, or {error, badarg} when the argument did not decode. */
static void id_op(const char *buf, int args, int (*op)(cb_server_t *, uint64_t)) {
  cb_ei_in_t r;
  uint64_t id;
  cb_ei_in_init(&r, buf);
  if (cb_codec_id(&r.in, T(args), &id) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  port_reply_result(id == 0 ? CB_ENOENT : op(port_server, id));
}

void port_route_add(const char *buf, int args) {
  cb_ei_in_t r;
  cb_codec_stub_t s;
  int response = args;
  s.mem = NULL; /* freed below however far the decoding got */
  cb_ei_in_init(&r, buf);
  if (ei_skip_term(buf, &response) != 0 || cb_codec_match(&r.in, T(args), &s) != 0 ||
      cb_codec_response(&r.in, T(response), &s) != 0) {
    cb_codec_stub_free(&s);
    port_reply_error_atom("badarg");
    return;
  }
  uint64_t id = 0;
  int err = cb_server_route_add(port_server, &s.st, &id);
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  cb_codec_add_result(&w.out, err, id, &s.st.match, &s.st.response);
  cb_codec_stub_free(&s);
  port_answer(&w);
}

void port_route_remove(const char *buf, int args) { id_op(buf, args, cb_server_route_remove); }

void port_route_reset(void) { port_reply_result(cb_server_route_reset(port_server)); }

/* The test CA a TLS server made at start, as PEM; {error, no_ca} when it made none (no TLS, or the user's
 * certificate files). */
void port_tls(void) {
  char pem[8192];
  int n = cb_server_tls_ca(port_server, pem, sizeof pem);
  if (n == CB_ENOENT) {
    port_reply_error_atom("no_ca");
    return;
  }
  if (n < 0) {
    port_reply_result(n);
    return;
  }
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  w.out.ops->tuple(&w.out, 2);
  w.out.ops->atom(&w.out, "ok", 2);
  w.out.ops->binary(&w.out, pem, (size_t)n);
  port_answer(&w);
}

void port_stubs(void) {
  cb_stub_list_t *list;
  int err = cb_server_stubs(port_server, &list);
  if (err < 0) {
    port_reply_result(err);
    return;
  }
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  w.out.ops->tuple(&w.out, 2);
  w.out.ops->atom(&w.out, "ok", 2);
  cb_codec_stub_list(&w.out, list);
  cb_stub_list_free(list);
  port_answer(&w);
}

void port_scenario(const char *buf, int args) {
  cb_ei_in_t r;
  cb_str_t name;
  cb_ei_in_init(&r, buf);
  if (cb_codec_binary(&r.in, T(args), &name) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  char state[CB_MAX_NAME + 1];
  int n = cb_server_scenario(port_server, name, state, sizeof state);
  if (n < 0) {
    port_reply_result(n);
    return;
  }
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  cb_codec_scenario_state(&w.out, state, (size_t)n);
  port_answer(&w);
}

void port_scenario_set(const char *buf, int args) {
  cb_ei_in_t r;
  cb_str_t name, state;
  int second = args;
  cb_ei_in_init(&r, buf);
  if (ei_skip_term(buf, &second) != 0 || cb_codec_binary(&r.in, T(args), &name) != 0 ||
      cb_codec_binary(&r.in, T(second), &state) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  port_reply_result(cb_server_scenario_set(port_server, name, state));
}

void port_scenarios_reset(void) { port_reply_result(cb_server_scenarios_reset(port_server)); }

void port_requests(const char *buf, int args) {
  cb_ei_in_t r;
  cb_request_filter_t f;
  int none;
  cb_ei_in_init(&r, buf);
  if (cb_codec_filter(&r.in, T(args), &f, &none) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  cb_request_list_t empty = {0}, *list = &empty;
  int err = none ? 0 : cb_server_requests(port_server, &f, &list);
  if (err < 0) {
    port_reply_result(err);
    return;
  }
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  w.out.ops->tuple(&w.out, 2);
  w.out.ops->atom(&w.out, "ok", 2);
  cb_codec_entries(&w.out, &port_fixture, list);
  if (list != &empty) cb_request_list_free(list);
  port_answer(&w);
}

void port_requests_clear(void) { port_reply_result(cb_server_requests_clear(port_server)); }

void port_journal_listen(const char *buf, int args) {
  cb_ei_in_t r;
  int on;
  cb_ei_in_init(&r, buf);
  if (cb_codec_bool(&r.in, T(args), &on) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  port_reply_result(cb_server_set_journal_listener(port_server, on ? port_journal_wake : NULL, NULL));
}

void port_handler_add(const char *buf, int args) {
  cb_ei_in_t r;
  cb_codec_stub_t s;
  unsigned tmo;
  int stream, at_tmo = args, at_stream;
  cb_ei_in_init(&r, buf);
  if (ei_skip_term(buf, &at_tmo) != 0 || (at_stream = at_tmo, ei_skip_term(buf, &at_stream)) != 0 ||
      cb_codec_match(&r.in, T(args), &s) != 0 || cb_codec_timeout(&r.in, T(at_tmo), &tmo) != 0 ||
      cb_codec_bool(&r.in, T(at_stream), &stream) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  cb_deferred_t d = {.name = s.st.name, .match = s.st.match, .timeout_ms = tmo, .batch = 1,
                     .deliver = port_deliver, .gone = port_gone, .body = stream ? port_body_piece : NULL};
  uint64_t id = 0;
  int err = cb_server_deferred_add(port_server, &d, &id);
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  cb_codec_add_result(&w.out, err, id, &s.st.match, NULL);
  port_answer(&w);
}

void port_handler_fail(const char *buf, int args) { id_op(buf, args, cb_server_deferred_fail); }

void port_reply(const char *buf, int args) {
  cb_ei_in_t r;
  cb_codec_replies_t items;
  cb_ei_in_init(&r, buf);
  if (cb_codec_replies(&r.in, T(args), &items) != 0) port_die(EXIT_MALFORMED);
  (void)cb_server_reply(port_server, items.items, items.n);
  cb_codec_replies_free(&items);
  cb_ei_in_free(&r);
}

int port_reply_fast(const char *buf, int args, int len) {
  cb_reply_t *items;
  size_t n;
  if (!port_reply_frame(buf, args, len, &items, &n)) return 0;
  (void)cb_server_reply(port_server, items, n);
  return 1;
}

/* ---- TLS client certificates (docs/tls.md) ---- */

/* client_ca -> {ok, Pem} | {error, no_tls}. */
void port_client_ca(void) {
  char pem[8192];
  int n = cb_server_tls_client_ca(port_server, pem, sizeof pem);
  if (n == CB_ENOENT) {
    port_reply_error_atom("no_tls");
    return;
  }
  if (n < 0) {
    port_reply_result(n);
    return;
  }
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_binary(&x, pem, n);
  port_send(&x);
}

/* {client_cert, Cn} -> {ok, CertPem, KeyPem, Subject, Sha256} | {error, no_tls | einval}, as the NIF. */
void port_client_cert(const char *buf, int args) {
  int idx = args, type, size;
  char cn[65];
  long len;
  if (ei_get_type(buf, &idx, &type, &size) != 0 || type != ERL_BINARY_EXT) {
    port_reply_error_atom("badarg");
    return;
  }
  if (size == 0 || size > 64 || ei_decode_binary(buf, &idx, cn, &len) != 0 || memchr(cn, 0, (size_t)len) != NULL) {
    port_reply_result(CB_EINVAL);
    return;
  }
  cn[len] = '\0';
  char cert[8192], key[8192], subject[512], sha[65];
  int err = cb_server_tls_client_cert(port_server, cn, cert, sizeof cert, key, sizeof key);
  if (err == CB_ENOENT) {
    port_reply_error_atom("no_tls");
    return;
  }
  int n = err < 0 ? err : cb_tls_cert_identity(cert, strlen(cert), subject, sizeof subject, sha);
  if (n < 0) {
    port_reply_result(n);
    return;
  }
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 5);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_binary(&x, cert, (long)strlen(cert));
  ei_x_encode_binary(&x, key, (long)strlen(key));
  ei_x_encode_binary(&x, subject, n);
  ei_x_encode_binary(&x, sha, 64);
  port_send(&x);
}

/* ---- recordings (docs/record.md) ---- */

void port_recorded(void) {
  char *json = NULL;
  size_t len = 0;
  int err = cb_server_recorded_json(port_server, &json, &len);
  if (err) {
    port_reply_result(err);
    return;
  }
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_binary(&x, json, (long)len);
  free(json);
  port_send(&x);
}

void port_clear_recorded(void) {
  cb_server_recorded_clear(port_server);
  port_reply_result(0);
}

/* A binary path of 1 to PATH_MAX - 1 bytes without NUL into path: 0, or -1 (badarg answered). */
static int path_arg(const char *buf, int args, char *path, size_t cap) {
  int idx = args, type, size;
  long len;
  if (ei_get_type(buf, &idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size <= 0 || (size_t)size >= cap ||
      ei_decode_binary(buf, &idx, path, &len) != 0 || memchr(path, '\0', (size_t)len) != NULL) {
    port_reply_error_atom("badarg");
    return -1;
  }
  path[len] = '\0';
  return 0;
}

/* {ok, N} or {error, {Tag, Message}}. */
static void count_or_message(int n, const char *tag, const char *msg) {
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  if (n >= 0) {
    ei_x_encode_atom(&x, "ok");
    ei_x_encode_long(&x, n);
  } else {
    ei_x_encode_atom(&x, "error");
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, tag);
    ei_x_encode_binary(&x, msg, (long)strlen(msg));
  }
  port_send(&x);
}

void port_save_stubs(const char *buf, int args) {
  char path[PATH_MAX], msg[1024];
  if (path_arg(buf, args, path, sizeof path) != 0) return;
  int n = cb_server_save_stubs(port_server, path, msg, sizeof msg);
  count_or_message(n, "save_failed", msg);
}

void port_load_stubs(const char *buf, int args) {
  char path[PATH_MAX], msg[1024];
  if (path_arg(buf, args, path, sizeof path) != 0) return;
  int n = cb_server_stubs_file(port_server, path, msg, sizeof msg);
  count_or_message(n, "bad_stub_file", msg);
}
