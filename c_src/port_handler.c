/* Erlang handlers on the port engine (docs/beam.md, "Erlang handlers"): a deferred route (src/deferred.c)
 * whose requests go to the node as frames, and the replies that come back.
 *
 *   {handler_add, Match, TimeoutMs, Stream} -> {ok, Id} | {error, Reason}   (Stream: the body in pieces)
 *   {handler_fail, Id}              -> ok | {error, Reason}   (the handler died: 503s, cut streams)
 *   {reply, [Item]}                 -> nothing: one cb_server_reply() call for every item of the frame
 *        Item: {Ref, reply, Status, [{Name, Value}], Body} | {Ref, stream, Status, [{Name, Value}]}
 *            | {Ref, send, Data} | {Ref, finish} | {Ref, unavailable}   (binaries, checked by the node too)
 * and, from the worker threads:
 *   {cbench_requests, Id, [{Ref, Method, Path, Query, [{Name, Value}], Peer, Proto, Body}]}
 *        every request of route Id a worker parked in one loop iteration, in one frame (always batched: the
 *        node hands them on one by one to a handler that did not ask for batches)
 *   {cbench_body, Ref, Data, End}
 *        a streamed body's bytes of one loop iteration (End: true on the last)
 *   {cbench_gone, Ref}
 *        the request ended without its answer completing (503, 504, cut, client or stream gone): the node
 *        refuses replies to it from then on without a round trip.
 * Replies carry no answer: the node keeps each request's state (an atomics word, as the ehttpd engine does),
 * so a second answer is refused there; an answer that crosses a {cbench_gone, Ref} on the pipe is dropped here
 * (CB_EGONE) and nothing is sent. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "port.h"

static void encode_bin(ei_x_buff *x, cb_str_t s) { ei_x_encode_binary(x, s.len ? s.ptr : "", (long)s.len); }

/* On a worker thread: one frame for the n requests. */
static int deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return -1;
  ei_x_encode_tuple_header(&x, 3);
  ei_x_encode_atom(&x, "cbench_requests");
  ei_x_encode_ulonglong(&x, reqs[0].route_id);
  ei_x_encode_list_header(&x, (long)n);
  for (size_t k = 0; k < n; k++) {
    const cb_deferred_req_t *q = &reqs[k];
    ei_x_encode_tuple_header(&x, 8);
    ei_x_encode_ulonglong(&x, q->ref);
    encode_bin(&x, q->method);
    encode_bin(&x, q->path);
    encode_bin(&x, q->query);
    if (q->nheaders > 0) ei_x_encode_list_header(&x, (long)q->nheaders);
    for (size_t i = 0; i < q->nheaders; i++) {
      ei_x_encode_tuple_header(&x, 2);
      encode_bin(&x, q->headers[i].name);
      encode_bin(&x, q->headers[i].value);
    }
    ei_x_encode_empty_list(&x);
    encode_bin(&x, q->peer);
    const char *proto = cb_proto_name(q->proto);
    ei_x_encode_atom(&x, proto ? proto : "http1");
    encode_bin(&x, q->body);
  }
  ei_x_encode_empty_list(&x);
  port_send_from_worker(&x);
  return 0; /* a write that failed means the node is gone: the main thread reads EOF and stops */
}

static void gone(void *ud, cb_reqref_t ref) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return;
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "cbench_gone");
  ei_x_encode_ulonglong(&x, ref);
  port_send_from_worker(&x);
}

static void body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return;
  ei_x_encode_tuple_header(&x, 4);
  ei_x_encode_atom(&x, "cbench_body");
  ei_x_encode_ulonglong(&x, ref);
  ei_x_encode_binary(&x, n ? data : "", (long)n);
  ei_x_encode_boolean(&x, end);
  port_send_from_worker(&x);
}

void port_handler_add(const char *buf, int *idx) {
  stub_arrays_t arrays;
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  unsigned long long tmo;
  int stream;
  if (port_decode_match(buf, idx, &st, &arrays) != 0 || port_get_uint(buf, idx, 3600000, &tmo) != 0 || tmo == 0 ||
      ei_decode_boolean(buf, idx, &stream) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  cb_deferred_t d = {.name = st.name, .match = st.match, .timeout_ms = (unsigned)tmo, .batch = 1,
                     .deliver = deliver, .gone = gone,
                     .body = stream ? body_piece : NULL};
  uint64_t id = 0;
  int err = cb_server_deferred_add(port_server, &d, &id); /* sets id: before the call that reads it */
  port_reply_added(err, id, &st.match, NULL);
}

void port_handler_fail(const char *buf, int *idx) {
  port_id_op(buf, idx, cb_server_deferred_fail);
}

/* [{Name, Value}] into hbuf from *nh on. */
static int decode_headers(const char *buf, int *idx, cb_reply_t *r, cb_header_t *hbuf, size_t *nh, size_t hcap) {
  int n, arity;
  if (ei_decode_list_header(buf, idx, &n) != 0 || n < 0 || n > CB_MAX_HEADERS || *nh + (size_t)n > hcap) return -1;
  r->nheaders = (size_t)n; /* r->headers is set once every item is decoded: hbuf may still move */
  for (int i = 0; i < n; i++, (*nh)++) {
    if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 2 ||
        port_get_bin(buf, idx, &hbuf[*nh].name) != 0 || port_get_bin(buf, idx, &hbuf[*nh].value) != 0)
      return -1;
  }
  if (n > 0 && (ei_decode_list_header(buf, idx, &arity) != 0 || arity != 0)) return -1;
  return 0;
}

static int decode_item(const char *buf, int *idx, cb_reply_t *r, cb_header_t *hbuf, size_t *nh, size_t hcap) {
  int arity;
  unsigned long long ref;
  memset(r, 0, sizeof *r);
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity < 2 || port_get_uint(buf, idx, UINT64_MAX, &ref) != 0)
    return -1;
  r->ref = ref;
  if (arity == 5 && port_is_atom(buf, idx, "reply")) r->op = CB_REPLY_FULL;
  else if (arity == 4 && port_is_atom(buf, idx, "stream")) r->op = CB_REPLY_STREAM;
  else if (arity == 3 && port_is_atom(buf, idx, "send")) return r->op = CB_REPLY_SEND, port_get_bin(buf, idx, &r->body);
  else if (arity == 2 && port_is_atom(buf, idx, "finish")) return r->op = CB_REPLY_FINISH, 0;
  else if (arity == 2 && port_is_atom(buf, idx, "unavailable")) return r->op = CB_REPLY_UNAVAILABLE, 0;
  else return -1;
  /* Any int, as the NIF takes it: cb_server_reply() checks the range (200..599) for both. */
  long status;
  if (ei_decode_long(buf, idx, &status) != 0 || status < INT_MIN || status > INT_MAX) return -1;
  r->status = (int)status;
  if (decode_headers(buf, idx, r, hbuf, nh, hcap) != 0) return -1;
  return r->op == CB_REPLY_STREAM ? 0 : port_get_bin(buf, idx, &r->body);
}

/* {reply, [Item]}: a frame that does not decode is a bug on the node's side (cbench_port builds it from
 * checked answers), so the program exits EXIT_MALFORMED, as for any malformed frame. Results are dropped: an
 * answer refused here (CB_EGONE) raced the request's end, which the node learns from {cbench_gone, Ref}. */
void port_reply(const char *buf, int *idx) {
  int n;
  int at = *idx;
  if (ei_decode_list_header(buf, &at, &n) != 0 || n <= 0) port_die(EXIT_MALFORMED);
  cb_reply_t *items = calloc((size_t)n, sizeof *items);
  size_t hcap = 4 * CB_MAX_HEADERS;
  cb_header_t *hdrs = calloc(hcap, sizeof *hdrs);
  if (items == NULL || hdrs == NULL) port_die(EXIT_NOMEM);
  size_t nh = 0;
  for (int i = 0; i < n; i++) {
    if (nh + CB_MAX_HEADERS > hcap) { /* a burst of many answers with headers: room for the worst item */
      cb_header_t *more = realloc(hdrs, (hcap * 2 + CB_MAX_HEADERS) * sizeof *hdrs);
      if (more == NULL) port_die(EXIT_NOMEM);
      hdrs = more;
      hcap = hcap * 2 + CB_MAX_HEADERS;
    }
    if (decode_item(buf, &at, &items[i], hdrs, &nh, hcap) != 0) port_die(EXIT_MALFORMED);
  }
  for (int i = 0, h = 0; i < n; h += (int)items[i].nheaders, i++) items[i].headers = items[i].nheaders ? hdrs + h : NULL;
  int tail;
  if (ei_decode_list_header(buf, &at, &tail) != 0 || tail != 0) port_die(EXIT_MALFORMED);
  *idx = at;
  (void)cb_server_reply(port_server, items, (size_t)n);
  free(items);
  free(hdrs);
}
