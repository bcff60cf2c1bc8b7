/* Detection: the protocol every connection starts with (the worker's first_ops). It tells the HTTP/2 client
 * preface from an HTTP/1.x request and hands the connection to that protocol with the bytes it held back. A
 * transport that negotiates the protocol itself (TLS with ALPN) would choose here the same way. */
#include <string.h>

#include "proto/proto.h"

static const char h2_preface[24] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* The per-protocol counters: a connection over TLS counts as h1_tls or h2_tls, whichever way its protocol was
 * chosen (ALPN, or the preface rule for a client that offered no ALPN). */
static inline int h1_id(const cb__conn_t *c) { return c->tr.tls ? CB_PROTO_H1_TLS : CB_PROTO_HTTP1; }
static inline int h2_id(const cb__conn_t *c) { return c->tr.tls ? CB_PROTO_H2_TLS : CB_PROTO_H2C_PRIOR; }

/* The protocol the transport negotiated (TLS's ALPN) decides at once, without holding bytes back: HTTP/2 answers
 * a missing preface with GOAWAY, as it does on an h2c-only listener. */
static int attach_negotiated(cb__conn_t *c, const char *data, size_t len) {
  int err;
  if (c->tr.alpn == CB__ALPN_H2) {
    CB__STAT_INC(c->w, conns_by_proto[CB_PROTO_H2_TLS]);
    err = cb__h2_attach_prior(c);
  } else {
    CB__STAT_INC(c->w, conns_by_proto[CB_PROTO_H1_TLS]);
    err = cb__h1_attach(c);
  }
  if (err) return -1;
  return c->ops->read(c, data, len);
}

static int detect_read(cb__conn_t *c, const char *data, size_t len) {
  if (c->tr.alpn != CB__ALPN_NONE) return attach_negotiated(c, data, len);
  /* Hold bytes back while they are a prefix of the HTTP/2 preface, so both protocols see the whole start. */
  size_t take = len < sizeof h2_preface - c->detect_len ? len : sizeof h2_preface - c->detect_len;
  memcpy(c->detect + c->detect_len, data, take);
  size_t have = c->detect_len + take;
  int is_prefix = memcmp(c->detect, h2_preface, have) == 0;
  if (is_prefix && have < sizeof h2_preface) {
    c->detect_len = have;
    return 0;
  }
  int err;
  /* An h2c-only listener (enable_h1 0) gives anything to HTTP/2, which answers a bad preface with
   * GOAWAY(PROTOCOL_ERROR) and closes. The shared port can only answer it as HTTP/1.1 would: a broken
   * preface is a request line `PRI * HTTP/2.0` there, a 400 (docs/wire.md). */
  if ((is_prefix || !c->w->cfg->enable_h1) && c->w->cfg->enable_h2) {
    CB__STAT_INC(c->w, conns_by_proto[h2_id(c)]);
    err = cb__h2_attach_prior(c);
  } else {
    CB__STAT_INC(c->w, conns_by_proto[h1_id(c)]);
    err = cb__h1_attach(c);
  }
  if (err) return -1;
  /* The held-back bytes first, then the rest of this read. */
  if (c->detect_len > 0 && c->ops->read(c, c->detect, c->detect_len) != 0) return -1;
  c->detect_len = 0;
  if (c->closing) return 0;
  return c->ops->read(c, data, len);
}

/* Until the first bytes have come, only the header timeout applies. */
static int detect_timer_mode(const cb__conn_t *c) {
  (void)c;
  return CB__TIMER_HEADER;
}

/* Every other operation is absent: an end of input, a timeout or a stop before the protocol is known closes the
 * connection (core/conn.c). */
const cb__conn_ops_t cb__detect_ops = {.read = detect_read, .timer_mode = detect_timer_mode};
