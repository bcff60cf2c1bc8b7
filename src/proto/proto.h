/* proto/: the protocols. Each takes a connection (cb__conn_ops_t) and answers its requests through the response
 * API (cb__proto_t, with its abort and the faults it can carry): HTTP/1.1 (llhttp), HTTP/2 (nghttp2, with its
 * own memory), WebSocket after an upgrade, and detection, the ops every connection starts with, which hands it
 * to HTTP/1.1 or HTTP/2. (docs/architecture.md: "A new protocol") */
#ifndef CB_PROTO_H
#define CB_PROTO_H

#include "core/core.h"
#include "proto/h2_mem.h" /* also the memory of kinds/proxy_h2.c's client sessions */

/* Worker parts (core.h) that the protocols own. */
#define CB__PART_H2 0 /* nghttp2's small blocks (h2_mem.c), made with the worker's first session */
#define CB__PART_H1 1 /* HTTP/1.1's memos of heads and whole responses (http1.c) */

/* HTTP/1.1 sends files up to this size from their mapping with writev, bigger ones with sendfile. */
#define CB__FILE_INLINE_MAX (16 * 1024)

/* detect.c: what a new connection starts with (the worker's first_ops): tells the HTTP/2 client preface from an
 * HTTP/1.x request and hands the connection to that protocol. */
extern const cb__conn_ops_t cb__detect_ops;

/* ---- http1.c / http2.c ---- */

/* Makes c an HTTP/1.1 connection. */
int cb__h1_attach(cb__conn_t *c);
/* Makes c an HTTP/2 connection; data starts with the client preface. */
int cb__h2_attach_prior(cb__conn_t *c);
/* Upgrades an HTTP/1.1 connection (Upgrade: h2c): writes `101 Switching Protocols`, then the request r
 * (method, path and headers; no body) becomes stream 1. settings is the HTTP2-Settings header value
 * (base64url). On success c->ops is HTTP/2's and the bytes after the request go to c->ops->read. On failure
 * nothing changed and the request is answered over HTTP/1.1. */
int cb__h2_upgrade(cb__conn_t *c, const cb__req_t *r, const char *settings, size_t settings_len);
/* Whether an HTTP2-Settings header value decodes to a SETTINGS payload. */
int cb__h2_settings_valid(const char *settings, size_t len);

/* ---- ws.c: GET /ws, WebSocket echo (RFC 6455) over HTTP/1.1 ---- */
extern const cb__handler_t cb__h_ws;
/* 0 when the request is a valid WebSocket handshake; otherwise the status it gets: 426 (a version other than
 * 13) or 400. */
int cb__ws_check(const cb__req_t *r);
/* Sec-WebSocket-Accept for a key: base64(SHA-1(key + the RFC's GUID)), 28 characters (not terminated). */
void cb__ws_accept(const char *key, size_t key_len, char out[28]);
/* Answers the checked handshake r with 101, records r, and makes c a WebSocket connection (c->ops, state). */
int cb__ws_upgrade(cb__conn_t *c, cb__req_t *r);

#endif
