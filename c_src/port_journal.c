/* The journal commands of the port program: {requests, Filter} answered with the entries as maps (the keys of
 * cbench_journal:entry(), as the NIF gives them), requests_clear, and {journal_listen, Bool}: while on, the
 * worker that records a request writes an unsolicited {cbench_journal, Seq} frame, which cbench_port.erl
 * forwards to the server process so that cbench:await/4 is woken without polling. Worker threads and the main
 * thread write whole frames under one lock (port_send_from_worker).
 */
#include <string.h>

#include "port.h"

static void encode_bin(ei_x_buff *x, cb_str_t s) { ei_x_encode_binary(x, s.ptr ? s.ptr : "", (long)s.len); }

static void encode_entry(ei_x_buff *x, const cb_request_t *q) {
  const char *proto = cb_proto_name(q->proto);
  ei_x_encode_map_header(x, 19);
  ei_x_encode_atom(x, "seq");
  ei_x_encode_ulonglong(x, q->seq);
  ei_x_encode_atom(x, "time_us");
  ei_x_encode_longlong(x, q->time_us);
  ei_x_encode_atom(x, "proto");
  ei_x_encode_atom(x, proto ? proto : "undefined");
  ei_x_encode_atom(x, "conn");
  ei_x_encode_ulonglong(x, q->conn_id);
  ei_x_encode_atom(x, "stream");
  ei_x_encode_ulong(x, q->stream_id);
  ei_x_encode_atom(x, "peer");
  encode_bin(x, q->peer);
  ei_x_encode_atom(x, "method");
  encode_bin(x, q->method);
  ei_x_encode_atom(x, "path");
  encode_bin(x, q->path);
  ei_x_encode_atom(x, "query");
  encode_bin(x, q->query);
  ei_x_encode_atom(x, "headers");
  if (q->nheaders > 0) ei_x_encode_list_header(x, (long)q->nheaders);
  for (size_t i = 0; i < q->nheaders; i++) {
    ei_x_encode_tuple_header(x, 2);
    encode_bin(x, q->headers[i].name);
    encode_bin(x, q->headers[i].value);
  }
  ei_x_encode_empty_list(x);
  ei_x_encode_atom(x, "body");
  encode_bin(x, q->body);
  ei_x_encode_atom(x, "body_length");
  ei_x_encode_ulonglong(x, q->body_len);
  ei_x_encode_atom(x, "route");
  port_encode_route_name(x, q->route.ptr ? q->route.ptr : "", q->route.len);
  ei_x_encode_atom(x, "stub");
  if (q->stub_id)
    ei_x_encode_ulonglong(x, q->stub_id);
  else
    ei_x_encode_atom(x, "undefined");
  ei_x_encode_atom(x, "status");
  ei_x_encode_long(x, q->status);
  ei_x_encode_atom(x, "bytes_out");
  ei_x_encode_ulonglong(x, q->bytes_out);
  ei_x_encode_atom(x, "duration_us");
  ei_x_encode_ulonglong(x, q->duration_us);
  ei_x_encode_atom(x, "fault");
  ei_x_encode_atom_len(x, q->fault.len ? q->fault.ptr : "undefined", q->fault.len ? (int)q->fault.len : 9);
  ei_x_encode_atom(x, "delay_ms");
  ei_x_encode_ulong(x, q->delay_ms);
}

/* An optional binary: `undefined` is absent. */
static int get_opt_bin(const char *buf, int *idx, cb_str_t *out) {
  if (port_is_atom(buf, idx, "undefined")) {
    *out = (cb_str_t){NULL, 0};
    return 0;
  }
  return port_get_bin(buf, idx, out);
}

/* Filter: #{since, method, path, stub}: what the engine applies itself (cbench_journal filters the rest). */
static int decode_filter(const char *buf, int *idx, cb_request_filter_t *f, int *none) {
  int arity, seen = 0;
  unsigned long long u;
  memset(f, 0, sizeof *f);
  if (ei_decode_map_header(buf, idx, &arity) != 0 || arity != 4) return -1;
  for (int i = 0; i < arity; i++) {
    char key[MAXATOMLEN_UTF8];
    if (ei_decode_atom(buf, idx, key) != 0) return -1;
    if (strcmp(key, "since") == 0) {
      if (port_get_uint(buf, idx, UINT64_MAX, &u) != 0) return -1;
      f->since = u;
      seen |= 1;
    } else if (strcmp(key, "method") == 0) {
      if (get_opt_bin(buf, idx, &f->method) != 0) return -1;
      seen |= 2;
    } else if (strcmp(key, "path") == 0) {
      if (get_opt_bin(buf, idx, &f->path) != 0) return -1;
      seen |= 4;
    } else if (strcmp(key, "stub") == 0) {
      if (!port_is_atom(buf, idx, "undefined")) {
        /* 0 (also for an integer out of range) matches nothing: port_requests() answers [] itself. */
        if (port_get_id(buf, idx, &u) != 0) return -1;
        f->stub_id = u;
        *none = u == 0;
      }
      seen |= 8;
    } else {
      return -1;
    }
  }
  return seen == 15 ? 0 : -1;
}

void port_requests(const char *buf, int *idx) {
  cb_request_filter_t f;
  int none = 0;
  if (decode_filter(buf, idx, &f, &none) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  cb_request_list_t empty = {0};
  cb_request_list_t *list = &empty;
  int err = none ? 0 : cb_server_requests(port_server, &f, &list);
  if (err < 0) {
    port_reply_error(err);
    return;
  }
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "ok");
  if (list->count > 0) ei_x_encode_list_header(&x, (long)list->count);
  for (size_t i = 0; i < list->count; i++) encode_entry(&x, &list->items[i]);
  ei_x_encode_empty_list(&x);
  if (list != &empty) cb_request_list_free(list);
  port_send(&x);
}

void port_requests_clear(void) { port_reply_result(cb_server_requests_clear(port_server)); }

/* On a worker thread, right after a request was recorded. */
static void wake(void *ud, const cb_request_t *req) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return; /* the waiter's timeout still answers it */
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "cbench_journal");
  ei_x_encode_ulonglong(&x, req->seq);
  port_send_from_worker(&x);
}

void port_journal_listen(const char *buf, int *idx) {
  int on;
  if (ei_decode_boolean(buf, idx, &on) != 0) {
    port_reply_error_atom("badarg");
    return;
  }
  port_reply_result(cb_server_set_journal_listener(port_server, on ? wake : NULL, NULL));
}
