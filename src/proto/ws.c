/* GET /ws: WebSocket echo (RFC 6455) over HTTP/1.1, roadrunner's `websocket_msg_throughput` case.
 *
 * The handshake is checked here (cb__ws_check) and taken by http1.c, which hands the connection over with
 * cb__ws_upgrade(): a 101 with Sec-WebSocket-Accept, then this file's connection ops. Every text and binary
 * message comes back as one unmasked frame of the same type; pings get pongs; a close frame gets a close
 * frame with its code, then the connection closes; a bad frame gets a close frame with the RFC's code (1002,
 * 1007 invalid UTF-8, 1009 over the message limit) and the same close. docs/wire.md has the rules in order.
 *
 * The frame codec is written here rather than taken from wslay (Debian's libwslay-dev, which cbench-load and
 * the tests use as the peer): Debian ships wslay as a shared library only, and libcbench promises a fully
 * static link (pkg-config --static, make pkgconfig-test). Its state is small and bounded: a 14-byte header, a
 * 125-byte control payload, and the message being assembled (at most max_body_bytes).
 *
 * Messages are held from the echo budget as /echo's bodies are (cb__echo_hold): the buffer of the message being
 * assembled and of every echo not yet written. Without it, clients that send large messages and never read
 * held a message each in the output queue, with nothing to bound their sum (100 clients of 9.9 MB: 970 MB). A
 * frame that would take the connection over its budget gets 1009 (the message is too big for what the
 * connection already holds), one that would take the server over its budget 1013 (try again later). */
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "proto/proto.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };
enum { CLOSE_NORMAL = 1000, CLOSE_GOING_AWAY = 1001, CLOSE_PROTOCOL = 1002, CLOSE_BAD_DATA = 1007,
       CLOSE_TOO_BIG = 1009, CLOSE_TRY_LATER = 1013 };

/* ---- the handshake ---- */

static int lower_eq(const char *p, size_t n, const char *lit) {
  size_t l = strlen(lit);
  if (n != l) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i] >= 'A' && p[i] <= 'Z' ? (char)(p[i] + 32) : p[i];
    if (c != lit[i]) return 0;
  }
  return 1;
}

static const cb__hdr_t *header(const cb__req_t *r, const char *name) {
  for (int i = 0; i < r->nheaders; i++)
    if (lower_eq(r->headers[i].name, r->headers[i].name_len, name)) return &r->headers[i];
  return NULL;
}

/* Whether a comma-separated field value lists token (case-insensitively). */
static int has_token(const cb__hdr_t *h, const char *token) {
  if (h == NULL) return 0;
  const char *p = h->value, *end = p + h->value_len;
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
    const char *t = p;
    while (p < end && *p != ',') p++;
    const char *e = p;
    while (e > t && (e[-1] == ' ' || e[-1] == '\t')) e--;
    if (e > t && lower_eq(t, (size_t)(e - t), token)) return 1;
  }
  return 0;
}

static int b64char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/';
}

int cb__ws_check(const cb__req_t *r) {
  const cb__hdr_t *up = header(r, "upgrade");
  if (r->method != CB_METHOD_GET || !has_token(up, "websocket") ||
      !has_token(header(r, "connection"), "upgrade") || r->content_length > 0 ||
      header(r, "transfer-encoding") != NULL)
    return 400;
  const cb__hdr_t *v = header(r, "sec-websocket-version");
  if (v == NULL || v->value_len != 2 || memcmp(v->value, "13", 2) != 0) return 426;
  /* The key is 16 bytes in base64: 22 characters and "==". */
  const cb__hdr_t *k = header(r, "sec-websocket-key");
  if (k == NULL || k->value_len != 24 || k->value[22] != '=' || k->value[23] != '=') return 400;
  for (int i = 0; i < 22; i++)
    if (!b64char(k->value[i])) return 400;
  return 0;
}

static size_t base64(const uint8_t *p, size_t n, char *out) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out[o++] = a[v >> 18];
    out[o++] = a[(v >> 12) & 63];
    out[o++] = i + 1 < n ? a[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? a[v & 63] : '=';
  }
  return o;
}

void cb__ws_accept(const char *key, size_t key_len, char out[28]) {
  char buf[64 + sizeof WS_GUID];
  uint8_t digest[20];
  if (key_len > 64) key_len = 64; /* cb__ws_check allows 24 */
  memcpy(buf, key, key_len);
  memcpy(buf + key_len, WS_GUID, sizeof WS_GUID - 1);
  /* SHA-1 by definition (RFC 6455 4.2.2), from libcrypto, which TLS links anyway. */
  SHA1((const unsigned char *)buf, key_len + sizeof WS_GUID - 1, digest);
  base64(digest, 20, out);
}

/* A request to /ws that was not taken as a WebSocket handshake (not HTTP/1.1, HTTP/2, a bad handshake). */
static void ws_refuse(cb__req_t *r) {
  static const cb__hdr_t version[] = {{"sec-websocket-version", 21, "13", 2}};
  int code = cb__ws_check(r);
  if (code == 426) {
    cb__res_head(r, 426, NULL, version, 1, 0);
  } else {
    CB__STAT_INC(r->conn->w, status_400);
    cb__res_head(r, 400, NULL, NULL, 0, 0);
  }
  cb__res_end(r);
}

const cb__handler_t cb__h_ws = {.on_end = ws_refuse};

/* ---- UTF-8 (RFC 3629): incremental, so that a text message is judged as its bytes arrive ---- */

/* state: continuation bytes still expected (low 2 bits) and the range of the next one (bits 2-4). */
enum { U_ANY = 0, U_A0_BF = 1, U_80_9F = 2, U_90_BF = 3, U_80_8F = 4 };

static int utf8_next(unsigned *state, uint8_t b) {
  unsigned left = *state & 3, range = *state >> 2;
  if (left == 0) {
    if (b < 0x80) return 0;
    if (b >= 0xc2 && b <= 0xdf) *state = 1;
    else if (b == 0xe0) *state = 2 | U_A0_BF << 2;
    else if (b == 0xed) *state = 2 | U_80_9F << 2;
    else if (b >= 0xe1 && b <= 0xef) *state = 2;
    else if (b == 0xf0) *state = 3 | U_90_BF << 2;
    else if (b == 0xf4) *state = 3 | U_80_8F << 2;
    else if (b >= 0xf1 && b <= 0xf3) *state = 3;
    else return -1;
    return 0;
  }
  uint8_t lo = 0x80, hi = 0xbf;
  if (range == U_A0_BF) lo = 0xa0;
  else if (range == U_80_9F) hi = 0x9f;
  else if (range == U_90_BF) lo = 0x90;
  else if (range == U_80_8F) hi = 0x8f;
  if (b < lo || b > hi) return -1;
  *state = left - 1;
  return 0;
}

/* ---- the connection ---- */

typedef struct {
  cb__conn_t *c;
  uint8_t hdr[14];
  uint8_t hdr_len, hdr_need; /* header bytes held, and the size of this header once known (0: not yet) */
  uint8_t in_payload;
  uint8_t opcode, fin, mask[4];
  uint64_t len, off; /* this frame's payload length and the bytes of it read */
  uint8_t ctrl[125]; /* a control frame's payload */
  char *msg;         /* the data message being assembled */
  size_t msg_len, msg_cap;
  uint8_t msg_op;    /* OP_TEXT or OP_BINARY while a message is open, 0 otherwise */
  unsigned utf8;     /* utf8_next state over the text message so far */
  uint8_t closed;    /* a close frame was sent: input is dropped, the connection closes once it is out */
} ws_t;

/* Grows the message buffer to `cap` bytes, held from the echo budget. Returns 0 or a close code. */
static unsigned msg_grow(ws_t *ws, size_t cap) {
  cb__conn_t *c = ws->c;
  size_t more = cap - ws->msg_cap;
  /* The connection's part of the budget is looked at first, so that the two refusals can be told apart
   * (cb__echo_hold says only that one of them refused). */
  size_t body = c->w->cfg->max_body_bytes;
  size_t conn_budget = body > SIZE_MAX / CB__ECHO_CONN_BODIES ? SIZE_MAX : body * CB__ECHO_CONN_BODIES;
  if (more > conn_budget - c->echo_held) return CLOSE_TOO_BIG;
  if (cb__echo_hold(c, more) != 0) return CLOSE_TRY_LATER;
  char *m = realloc(ws->msg, cap);
  if (m == NULL) { /* out of memory: refused like an oversized message */
    cb__echo_release(c, more);
    return CLOSE_TOO_BIG;
  }
  ws->msg = m;
  ws->msg_cap = cap;
  return 0;
}

static void frame_head(ws_t *ws, uint8_t op, uint64_t n) {
  uint8_t h[10];
  size_t hl;
  h[0] = (uint8_t)(0x80 | op);
  if (n < 126) {
    h[1] = (uint8_t)n;
    hl = 2;
  } else if (n < 65536) {
    h[1] = 126;
    h[2] = (uint8_t)(n >> 8);
    h[3] = (uint8_t)n;
    hl = 4;
  } else {
    h[1] = 127;
    for (int i = 0; i < 8; i++) h[2 + i] = (uint8_t)(n >> (56 - 8 * i));
    hl = 10;
  }
  cb__outq_copy(&ws->c->out, h, hl);
}

/* Sends a close frame (code 0: none) and stops reading; the connection closes once it is written. */
static void send_close(ws_t *ws, unsigned code) {
  uint8_t p[2] = {(uint8_t)(code >> 8), (uint8_t)code};
  if (ws->closed) return;
  ws->closed = 1;
  frame_head(ws, OP_CLOSE, code ? 2 : 0);
  if (code) cb__outq_copy(&ws->c->out, p, 2);
  cb__conn_close_linger(ws->c);
}

static int valid_close_code(unsigned code) {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/* A frame header is complete: the checks of docs/wire.md, in its order. Returns a close code, or 0. */
static unsigned header_done(ws_t *ws) {
  const uint8_t *h = ws->hdr;
  uint8_t len7 = h[1] & 0x7f;
  ws->fin = h[0] >> 7;
  ws->opcode = h[0] & 0x0f;
  int ctrl = ws->opcode & 8;
  if (h[0] & 0x70) return CLOSE_PROTOCOL;    /* no extension was negotiated: RSV bits must be 0 */
  if (!(h[1] & 0x80)) return CLOSE_PROTOCOL; /* a client's frames are masked (5.1) */
  if (ws->opcode > OP_BINARY && ws->opcode != OP_CLOSE && ws->opcode != OP_PING && ws->opcode != OP_PONG)
    return CLOSE_PROTOCOL;
  if (ctrl && (!ws->fin || len7 > 125)) return CLOSE_PROTOCOL;
  uint64_t n = len7;
  if (len7 == 126) {
    n = (uint64_t)h[2] << 8 | h[3];
    if (n < 126) return CLOSE_PROTOCOL; /* the minimal encoding is required (5.2) */
  } else if (len7 == 127) {
    n = 0;
    for (int i = 0; i < 8; i++) n = n << 8 | h[2 + i];
    if (n < 65536 || (n >> 63)) return CLOSE_PROTOCOL;
  }
  if (ws->opcode == OP_CONT && ws->msg_op == 0) return CLOSE_PROTOCOL; /* nothing to continue */
  if ((ws->opcode == OP_TEXT || ws->opcode == OP_BINARY) && ws->msg_op != 0) return CLOSE_PROTOCOL;
  if (ws->opcode == OP_CLOSE && n == 1) return CLOSE_PROTOCOL; /* a code is two bytes */
  memcpy(ws->mask, ws->hdr + ws->hdr_need - 4, 4);
  ws->len = n;
  ws->off = 0;
  if (!ctrl) {
    size_t limit = ws->c->w->cfg->max_body_bytes;
    if (n > limit || ws->msg_len + n > limit) return CLOSE_TOO_BIG;
    if (ws->opcode != OP_CONT) {
      ws->msg_op = ws->opcode;
      ws->utf8 = 0;
    }
    if (ws->msg_len + n > ws->msg_cap) return msg_grow(ws, ws->msg_len + (size_t)n);
  }
  return 0;
}

/* The whole frame has been read. Returns a close code, or 0. */
static unsigned frame_done(ws_t *ws) {
  switch (ws->opcode) {
    case OP_PING:
      frame_head(ws, OP_PONG, ws->len);
      if (ws->len) cb__outq_copy(&ws->c->out, ws->ctrl, (size_t)ws->len);
      return 0;
    case OP_PONG:
      return 0;
    case OP_CLOSE: {
      if (ws->len == 0) {
        send_close(ws, 0);
        return 0;
      }
      unsigned code = (unsigned)ws->ctrl[0] << 8 | ws->ctrl[1];
      if (!valid_close_code(code)) return CLOSE_PROTOCOL;
      unsigned st = 0;
      for (size_t i = 2; i < ws->len; i++)
        if (utf8_next(&st, ws->ctrl[i]) != 0) return CLOSE_BAD_DATA;
      if (st != 0) return CLOSE_BAD_DATA;
      send_close(ws, code); /* the code comes back, without the reason */
      return 0;
    }
    default:
      if (!ws->fin) return 0;
      if (ws->msg_op == OP_TEXT && ws->utf8 != 0) return CLOSE_BAD_DATA; /* a sequence cut at the end */
      /* The message goes out as it is: the queue takes the buffer, frees it once written and gives its budget
       * back then (conn.c's flush). */
      frame_head(ws, ws->msg_op, ws->msg_len);
      if (ws->msg_len > 0) {
        char *m = ws->msg;
        size_t held = ws->msg_cap;
        ws->msg = NULL;
        ws->msg_cap = 0;
        if (cb__outq_ref_range(&ws->c->out, m, 0, ws->msg_len, 1, held) != 0) return CLOSE_TOO_BIG;
      }
      ws->msg_len = 0;
      ws->msg_op = 0;
      return 0;
  }
}

/* Payload bytes of the current frame, unmasked as they are copied. Returns a close code, or 0. */
static unsigned payload(ws_t *ws, const uint8_t *p, size_t n) {
  uint8_t *dst = ws->opcode & 8 ? ws->ctrl + ws->off : (uint8_t *)ws->msg + ws->msg_len;
  for (size_t i = 0; i < n; i++) dst[i] = p[i] ^ ws->mask[(ws->off + i) & 3];
  if (!(ws->opcode & 8)) {
    if (ws->msg_op == OP_TEXT)
      for (size_t i = 0; i < n; i++)
        if (utf8_next(&ws->utf8, dst[i]) != 0) return CLOSE_BAD_DATA;
    ws->msg_len += n;
  }
  ws->off += n;
  return 0;
}

static int ws_feed(ws_t *ws, const uint8_t *p, size_t n) {
  while (n > 0 && !ws->closed) {
    unsigned code = 0;
    if (!ws->in_payload) {
      ws->hdr[ws->hdr_len++] = *p++;
      n--;
      if (ws->hdr_len == 2) {
        uint8_t len7 = ws->hdr[1] & 0x7f;
        ws->hdr_need = (uint8_t)(2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (ws->hdr[1] & 0x80 ? 4 : 0));
      }
      if (ws->hdr_len < 2 || ws->hdr_len < ws->hdr_need) continue;
      code = header_done(ws);
      ws->hdr_len = 0;
      ws->hdr_need = 0;
      if (code == 0 && ws->len > 0) ws->in_payload = 1;
      else if (code == 0) code = frame_done(ws);
    } else {
      size_t take = ws->len - ws->off < n ? (size_t)(ws->len - ws->off) : n;
      code = payload(ws, p, take);
      p += take;
      n -= take;
      if (code == 0 && ws->off == ws->len) {
        ws->in_payload = 0;
        code = frame_done(ws);
      }
    }
    if (code) send_close(ws, code);
  }
  return 0;
}

static int ws_read(cb__conn_t *c, const char *data, size_t len) {
  return ws_feed(c->proto_state, (const uint8_t *)data, len);
}

static void ws_eof(cb__conn_t *c) { cb__conn_close_linger(c); }
static int ws_writable(cb__conn_t *c, int produce) {
  (void)c;
  (void)produce;
  return 0;
}
static void ws_after(cb__conn_t *c) { (void)c; }
static int ws_timer_mode(const cb__conn_t *c) {
  (void)c;
  return CB__TIMER_IDLE;
}
static void ws_timeout(cb__conn_t *c, int mode) {
  (void)mode;
  cb__conn_close(c);
}
/* The server stops: 1001 Going Away, then the close. */
static void ws_stop(cb__conn_t *c) { send_close(c->proto_state, CLOSE_GOING_AWAY); }
static void ws_destroy(cb__conn_t *c) {
  ws_t *ws = c->proto_state;
  if (ws == NULL) return;
  free(ws->msg);
  cb__echo_release(c, ws->msg_cap);
  free(ws);
  c->proto_state = NULL;
}

static const cb__conn_ops_t ws_ops = {
    .read = ws_read,
    .eof = ws_eof,
    .writable = ws_writable,
    .after = ws_after,
    .timer_mode = ws_timer_mode,
    .timeout = ws_timeout,
    .stop = ws_stop,
    .destroy = ws_destroy,
};

int cb__ws_upgrade(cb__conn_t *c, cb__req_t *r) {
  static const char head[] = "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
                             "sec-websocket-accept: ";
  ws_t *ws = calloc(1, sizeof *ws);
  if (ws == NULL) return UV_ENOMEM;
  ws->c = c;
  const cb__hdr_t *k = header(r, "sec-websocket-key");
  char accept[28];
  cb__ws_accept(k->value, k->value_len, accept);
  cb__outq_copy(&c->out, head, sizeof head - 1);
  cb__outq_copy(&c->out, accept, sizeof accept);
  cb__outq_copy(&c->out, "\r\n\r\n", 4);
  /* The upgrade request is done: counted at dispatch, journaled now with its 101. */
  r->status = 101;
  r->res_state = CB__RES_ENDED;
  cb__req_release(r);
  c->ops = &ws_ops;
  c->proto_state = ws;
  return 0;
}
