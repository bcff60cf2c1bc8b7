/* The unsolicited frames of the port program, written by the engine's worker threads (docs/erlang.md, "Handlers
 * on the port engine"), each whole under the write lock (port_send_from_worker):
 *
 *   {cbench_journal, Seq}
 *        a request was recorded, while the listener is on: cbench_port.erl forwards it to the server process
 *        so that cbench:await/4 is woken without polling
 *   {cbench_requests, Id, [{Ref, Method, Path, Query, [{Name, Value}], Peer, Proto, Body}]}
 *        every request of handler route Id a worker parked in one loop iteration, in one frame (always
 *        batched: the node hands them on one by one to a handler that did not ask for batches)
 *   {cbench_body, Ref, Data, End}
 *        a streamed body's bytes of one loop iteration (End: true on the last)
 *   {cbench_gone, Ref}
 *        the request ended without its answer completing (503, 504, cut, client or stream gone): the node
 *        refuses replies to it from then on without a round trip.
 *
 * A write that fails means the node is gone: the main thread reads EOF and stops. */
#include "port.h"

static void encode_bin(ei_x_buff *x, cb_str_t s) { ei_x_encode_binary(x, s.len ? s.ptr : "", (long)s.len); }

void port_journal_wake(void *ud, const cb_request_t *req) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return; /* the waiter's timeout still answers it */
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "cbench_journal");
  ei_x_encode_ulonglong(&x, req->seq);
  port_send_from_worker(&x);
}

int port_deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
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
  return 0;
}

void port_gone(void *ud, cb_reqref_t ref) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return;
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "cbench_gone");
  ei_x_encode_ulonglong(&x, ref);
  port_send_from_worker(&x);
}

void port_body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end) {
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
