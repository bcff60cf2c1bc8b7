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

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void port_journal_wake(void *ud, const cb_request_t *req) {
  (void)ud;
  ei_x_buff x;
  if (ei_x_new_with_version(&x) != 0) return; /* the waiter's timeout still answers it */
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "cbench_journal");
  ei_x_encode_ulonglong(&x, req->seq);
  port_send_from_worker(&x);
}

/* {cbench_requests, ...} is written with the bytes of the external term format directly, into one buffer sized
 * first: the frame of every Erlang-handled request, where ei_x_encode_* (each term encoded twice, to size and to
 * write, and the buffer checked for room) cost about 2,200 instructions per request. The node reads it with
 * binary_to_term like any frame. */
enum { VERSION_MAGIC = 131 }; /* the external term format's first byte (ei.h does not name it) */

typedef struct {
  unsigned char *o;
} wr_t;

static void put_u32(wr_t *w, uint32_t v) {
  w->o[0] = (unsigned char)(v >> 24);
  w->o[1] = (unsigned char)(v >> 16);
  w->o[2] = (unsigned char)(v >> 8);
  w->o[3] = (unsigned char)v;
  w->o += 4;
}

static void put_tuple(wr_t *w, unsigned arity) {
  *w->o++ = ERL_SMALL_TUPLE_EXT;
  *w->o++ = (unsigned char)arity;
}

static void put_list(wr_t *w, size_t n) {
  *w->o++ = ERL_LIST_EXT;
  put_u32(w, (uint32_t)n);
}

/* A non-negative integer in its canonical form: a byte, a signed 32-bit integer, or a small bignum. */
enum { UINT_MAX_BYTES = 11 };
static void put_uint(wr_t *w, uint64_t v) {
  if (v < 256) {
    *w->o++ = ERL_SMALL_INTEGER_EXT;
    *w->o++ = (unsigned char)v;
  } else if (v <= INT32_MAX) {
    *w->o++ = ERL_INTEGER_EXT;
    put_u32(w, (uint32_t)v);
  } else {
    unsigned char *n = w->o + 1;
    *w->o = ERL_SMALL_BIG_EXT;
    w->o[2] = 0; /* the sign */
    w->o += 3;
    for (*n = 0; v > 0; v >>= 8, ++*n) *w->o++ = (unsigned char)v; /* little-endian digits */
  }
}

enum { BIN_HEAD = 5 };
static void put_bin(wr_t *w, cb_str_t s) {
  *w->o++ = ERL_BINARY_EXT;
  put_u32(w, (uint32_t)s.len);
  if (s.len) memcpy(w->o, s.ptr, s.len);
  w->o += s.len;
}

/* An atom of fewer than 256 bytes of ASCII, as a small UTF-8 atom. */
static void put_atom(wr_t *w, const char *a) {
  size_t n = strlen(a);
  *w->o++ = ERL_SMALL_ATOM_UTF8_EXT;
  *w->o++ = (unsigned char)n;
  memcpy(w->o, a, n);
  w->o += n;
}

int port_deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  (void)ud;
  static const char tag[] = "cbench_requests";
  /* The most each part can take: the version, {_, _, _}, the tag, the route id, the list and its [] end. */
  size_t cap = 1 + 2 + 2 + sizeof tag + UINT_MAX_BYTES + 5 + 1;
  for (size_t k = 0; k < n; k++) {
    const cb_deferred_req_t *q = &reqs[k];
    const char *proto = cb_proto_name(q->proto);
    cap += 2 + UINT_MAX_BYTES + 3 * BIN_HEAD + q->method.len + q->path.len + q->query.len + 5 + 1 +
           BIN_HEAD + q->peer.len + 2 + (proto ? strlen(proto) : 5) + BIN_HEAD + q->body.len;
    for (size_t i = 0; i < q->nheaders; i++)
      cap += 2 + 2 * BIN_HEAD + q->headers[i].name.len + q->headers[i].value.len;
  }
  if (cap > UINT32_MAX) return -1; /* beyond what {packet, 4} frames a length for: answered 503 */
  unsigned char *buf = malloc(cap);
  if (buf == NULL) return -1;
  wr_t w = {buf};
  *w.o++ = VERSION_MAGIC;
  put_tuple(&w, 3);
  put_atom(&w, tag);
  put_uint(&w, reqs[0].route_id);
  put_list(&w, n);
  for (size_t k = 0; k < n; k++) {
    const cb_deferred_req_t *q = &reqs[k];
    put_tuple(&w, 8);
    put_uint(&w, q->ref);
    put_bin(&w, q->method);
    put_bin(&w, q->path);
    put_bin(&w, q->query);
    if (q->nheaders > 0) put_list(&w, q->nheaders);
    for (size_t i = 0; i < q->nheaders; i++) {
      put_tuple(&w, 2);
      put_bin(&w, q->headers[i].name);
      put_bin(&w, q->headers[i].value);
    }
    *w.o++ = ERL_NIL_EXT;
    put_bin(&w, q->peer);
    const char *proto = cb_proto_name(q->proto);
    put_atom(&w, proto ? proto : "http1");
    put_bin(&w, q->body);
  }
  *w.o++ = ERL_NIL_EXT;
  port_send_bytes_from_worker((char *)buf, (size_t)(w.o - buf));
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
