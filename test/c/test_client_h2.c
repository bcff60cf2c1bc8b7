/* The client layer's h2c session (src/client/h2_client.c): exact bytes out (the preface and SETTINGS, a
 * request, WINDOW_UPDATE only as the owner consumes), and for exact frames in, the events each stream gets,
 * written as one line per run. */
#include <nghttp2/nghttp2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "ch2_events.h"
#include "common.h"
#include "runner.h"

static char hb[CB_CRES_HEADBUF_SIZE(1024, 8)];

static void start_q(cb_ch2_t *c, sx_t *s, size_t max_head, int max_headers, int has_body, int https) {
  memset(s, 0, sizeof *s);
  s->c = c;
  cb_ch2_limits_t lim = {.max_head = max_head, .max_headers = max_headers, .conn_window = 1 << 20};
  ASSERT_EQ(cb_ch2_init(c, &sx_callbacks, NULL, &lim, hb, sizeof hb, cbt_plain_mem()), 0);
  static const cb_chdr_t f[] = {{"x-q", 3, "1", 1}};
  cb_ch2_req_t q = {.method = "GET", .method_len = 3, .path = "/p?q=1", .path_len = 6, .authority = "h:1",
                    .authority_len = 3, .headers = f, .nheaders = 1, .has_body = has_body, .https = https};
  s->id = cb_ch2_submit(c, &q, s);
  ASSERT_EQ(s->id, 1);
}

static void start(cb_ch2_t *c, sx_t *s, size_t max_head, int max_headers, int has_body) {
  start_q(c, s, max_head, max_headers, has_body, 0);
}

/* The first bytes: the preface, SETTINGS (ENABLE_PUSH 0, MAX_HEADER_LIST_SIZE), the connection window opened to
 * conn_window, then the request's HEADERS ending the stream (no body), its fields after the pseudo-headers. */
static void preface_and_request(int https, const char *want) {
  cb_ch2_t c;
  sx_t s;
  start_q(&c, &s, 1024, 8, 0, https);
  uint8_t out[1024], exp[1024];
  size_t n = ch2_pull_all(&c, out, sizeof out), e = 0;
  memcpy(exp, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
  e = 24;
  static const uint8_t settings[] = {0, 2, 0, 0, 0, 0, 0, 6, 0, 0, 4, 0};
  e += ch2_frame(exp + e, NGHTTP2_SETTINGS, 0, 0, settings, sizeof settings);
  uint32_t inc = (1u << 20) - 65535;
  const uint8_t wu[] = {(uint8_t)(inc >> 24), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8), (uint8_t)inc};
  e += ch2_frame(exp + e, NGHTTP2_WINDOW_UPDATE, 0, 0, wu, 4);
  ASSERT_GE(n, e + 9);
  ASSERT_MEM_EQ(out, e, exp, e);
  ASSERT_EQ(out[e + 3], NGHTTP2_HEADERS);
  ASSERT_EQ(out[e + 4], NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM);
  ASSERT_EQ(out[e + 8], 1);
  /* The header block, decoded: the pseudo-headers, then the field. */
  nghttp2_hd_inflater *inf;
  ASSERT_EQ(nghttp2_hd_inflate_new(&inf), 0);
  size_t blen = (size_t)out[e] << 16 | (size_t)out[e + 1] << 8 | out[e + 2];
  ASSERT_EQ(n, e + 9 + blen);
  uint8_t *in = out + e + 9;
  char got[256] = "";
  size_t gl = 0;
  for (;;) {
    nghttp2_nv nv;
    int fl = 0;
    ssize_t k = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, blen, 1);
    ASSERT_GE(k, 0);
    in += k;
    blen -= (size_t)k;
    if (fl & NGHTTP2_HD_INFLATE_EMIT)
      gl += (size_t)snprintf(got + gl, sizeof got - gl, "%.*s: %.*s\n", (int)nv.namelen, nv.name, (int)nv.valuelen,
                             nv.value);
    if (fl & NGHTTP2_HD_INFLATE_FINAL) break;
  }
  nghttp2_hd_inflate_del(inf);
  ASSERT_STR_EQ(got, want);
  cb_ch2_free(&c);
}

TEST(client_h2_preface_and_request) {
  preface_and_request(0, ":method: GET\n:scheme: http\n:authority: h:1\n:path: /p?q=1\nx-q: 1\n");
}

/* Over TLS (an https:// upstream) the request's scheme is https (RFC 9113 8.3.1). */
TEST(client_h2_request_over_tls_scheme) {
  preface_and_request(1, ":method: GET\n:scheme: https\n:authority: h:1\n:path: /p?q=1\nx-q: 1\n");
}

/* A server's SETTINGS, a 103 (skipped), the head, DATA in two frames, trailers: the events in order; the
 * session acknowledges the SETTINGS. */
TEST(client_h2_answer_events) {
  cb_ch2_t c;
  sx_t s;
  start(&c, &s, 1024, 8, 0);
  s.consume = 1;
  uint8_t out[2048], in[512];
  ch2_pull_all(&c, out, sizeof out);
  size_t n = 0;
  n += ch2_frame(in + n, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
  static const uint8_t h103[] = {0x08, 0x03, '1', '0', '3'};               /* :status 103, indexed name */
  n += ch2_frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, h103, sizeof h103);
  static const uint8_t h200[] = {0x88, 0x00, 0x03, 'x', '-', 'a', 0x01, '1'}; /* :status 200, x-a: 1 */
  n += ch2_frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, h200, sizeof h200);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, "hel", 3);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, "lo", 2);
  static const uint8_t tr[] = {0x00, 0x03, 'x', '-', 't', 0x01, '2'};
  n += ch2_frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, tr, sizeof tr);
  ASSERT_EQ(cb_ch2_feed(&c, (const char *)in, n), 0);
  s.log[s.len] = '\0';
  ASSERT_STR_EQ(s.log, "head 200 [x-a: 1]|data hel|data lo|trailers [x-t: 2]|end|");
  size_t o = ch2_pull_all(&c, out, sizeof out);
  uint8_t ack[9];
  ch2_frame(ack, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
  ASSERT_GE(o, (size_t)9);
  ASSERT_MEM_EQ(out, (size_t)9, ack, (size_t)9);
  ASSERT_EQ(cb_ch2_can_submit(&c), 1);
  cb_ch2_free(&c);
}

/* Windows: a stream's 65,535 bytes arrive and nothing is given back while the owner does not consume (no
 * WINDOW_UPDATE written); a frame more is FLOW_CONTROL_ERROR (the stream reset, the connection failed). After a
 * consume, the WINDOW_UPDATE for the stream is written. */
TEST(client_h2_windows_are_the_owners) {
  for (int round = 0; round < 2; round++) {
    cb_ch2_t c;
    sx_t s;
    start(&c, &s, 1024, 8, 0);
    static uint8_t out[4096], in[80000];
    ch2_pull_all(&c, out, sizeof out);
    size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    n += ch2_frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, "\x88", 1);
    static char d[16384];
    memset(d, 'd', sizeof d);
    for (size_t left = 65535; left > 0;) {
      size_t k = left < sizeof d ? left : sizeof d;
      n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, d, k);
      left -= k;
    }
    ASSERT_EQ(cb_ch2_feed(&c, (const char *)in, n), 0);
    size_t o = ch2_pull_all(&c, out, sizeof out);
    ASSERT_EQ(o, (size_t)9); /* the SETTINGS ACK only */
    if (round == 0) {
      n = ch2_frame(in, NGHTTP2_DATA, 0, 1, "x", 1);
      cb_ch2_feed(&c, (const char *)in, n);
      o = ch2_pull_all(&c, out, sizeof out);
      s.log[s.len] = '\0';
      /* The frame past the window is not handed over (nghttp2's session once handed it over first). */
      ASSERT_STR_EQ(s.log, "head 200|data 16384|data 16384|data 16384|data 16383|close bad response|");
      /* RST_STREAM then GOAWAY, both FLOW_CONTROL_ERROR */
      ASSERT_EQ(o, (size_t)(13 + 17));
      ASSERT_EQ(out[3], NGHTTP2_RST_STREAM);
      ASSERT_EQ(out[12], NGHTTP2_FLOW_CONTROL_ERROR);
      ASSERT_EQ(out[13 + 3], NGHTTP2_GOAWAY);
      ASSERT_EQ(out[13 + 16], NGHTTP2_FLOW_CONTROL_ERROR);
      ASSERT_EQ(c.bad, 1);
      ASSERT_EQ(cb_ch2_done(&c), 1);
    } else {
      cb_ch2_consume(&c, 1, 65535);
      o = ch2_pull_all(&c, out, sizeof out);
      uint8_t exp[13];
      const uint8_t inc[] = {0, 0, 0xff, 0xff};
      ch2_frame(exp, NGHTTP2_WINDOW_UPDATE, 0, 1, inc, 4);
      ASSERT_EQ(o, (size_t)13);
      ASSERT_MEM_EQ(out, o, exp, (size_t)13);
    }
    cb_ch2_free(&c);
  }
}

/* Why a stream ends early: a header block one byte over max_head, RST_STREAM (REFUSED_STREAM: may be sent
 * again; another code: reset), GOAWAY with last stream 0 (refused), a 101. */
TEST(client_h2_early_ends) {
  static const struct {
    const char *what;
    uint8_t type, flags;
    uint8_t payload[16];
    size_t len;
    const char *log;
  } cases[] = {
      {"rst internal", NGHTTP2_RST_STREAM, 0, {0, 0, 0, 2}, 4, "close stream reset|"},
      {"rst refused", NGHTTP2_RST_STREAM, 0, {0, 0, 0, 7}, 4, "close stream refused|"},
      {"goaway 0", NGHTTP2_GOAWAY, 0, {0, 0, 0, 0, 0, 0, 0, 0}, 8, "close stream refused|"},
      {"101", NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, {0x08, 0x03, '1', '0', '1'}, 5, "close bad response|"},
      {"000", NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, {0x08, 0x03, '0', '0', '0'}, 5,
       "close bad response|"},
      /* three digits below 100: not an interim answer (nghttp2 takes it for a final one): refused */
      {"051", NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, {0x08, 0x03, '0', '5', '1'}, 5,
       "close bad response|"},
      /* x-a: a value of 7 bytes: 3 + 7 = 10 bytes of fields, the limit 9 */
      {"head 10 > 9", NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS,
       {0x88, 0x00, 0x03, 'x', '-', 'a', 0x07, 'a', 'b', 'c', 'd', 'e', 'f', 'g'}, 14, "close response head too big|"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cb_ch2_t c;
    sx_t s;
    start(&c, &s, 9, 8, 0);
    uint8_t out[2048], in[256];
    ch2_pull_all(&c, out, sizeof out);
    size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    int32_t sid = cases[i].type == NGHTTP2_GOAWAY ? 0 : 1;
    n += ch2_frame(in + n, cases[i].type, cases[i].flags, sid, cases[i].payload, cases[i].len);
    cb_ch2_feed(&c, (const char *)in, n);
    ch2_pull_all(&c, out, sizeof out);
    s.log[s.len] = '\0';
    if (strcmp(s.log, cases[i].log) != 0) cbt_log("case %s", cases[i].what);
    ASSERT_STR_EQ(s.log, cases[i].log);
    cb_ch2_free(&c);
  }
  /* At the limit (9 bytes of fields): the head comes. */
  cb_ch2_t c;
  sx_t s;
  start(&c, &s, 9, 8, 0);
  uint8_t out[2048], in[256];
  ch2_pull_all(&c, out, sizeof out);
  static const uint8_t h[] = {0x88, 0x00, 0x03, 'x', '-', 'a', 0x06, 'a', 'b', 'c', 'd', 'e', 'f'};
  size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
  n += ch2_frame(in + n, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, h, sizeof h);
  ASSERT_EQ(cb_ch2_feed(&c, (const char *)in, n), 0);
  s.log[s.len] = '\0';
  ASSERT_STR_EQ(s.log, "head 200 [x-a: abcdef]|end|");
  cb_ch2_free(&c);
}

/* Not HTTP/2 from the server (an HTTP/1.1 answer): a connection error, the session done. */
TEST(client_h2_garbage) {
  cb_ch2_t c;
  sx_t s;
  start(&c, &s, 1024, 8, 0);
  uint8_t out[2048];
  ch2_pull_all(&c, out, sizeof out);
  static const char g[] = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
  int err = cb_ch2_feed(&c, g, sizeof g - 1);
  ch2_pull_all(&c, out, sizeof out); /* nghttp2 may find it only as it writes its GOAWAY */
  ASSERT(err == CB_CH2_E_BAD || c.bad);
  ASSERT_EQ(cb_ch2_done(&c), 1);
  ASSERT_EQ(cb_ch2_can_submit(&c), 0);
  cb_ch2_free(&c);
}

/* A body pulled from the owner: none waiting defers the stream, resume sends what came, then its end. */
TEST(client_h2_body_deferred) {
  cb_ch2_t c;
  sx_t s;
  start(&c, &s, 1024, 8, 1);
  s.body_wait = 1;
  s.body_left = 3;
  uint8_t out[2048];
  size_t n = ch2_pull_all(&c, out, sizeof out);
  /* After the preface: SETTINGS, WINDOW_UPDATE, the HEADERS without END_STREAM, and no DATA yet. */
  int types = 0;
  for (size_t at = 24; at + 9 <= n;) {
    size_t len = (size_t)out[at] << 16 | (size_t)out[at + 1] << 8 | out[at + 2];
    ASSERT(out[at + 3] != NGHTTP2_DATA);
    if (out[at + 3] == NGHTTP2_HEADERS) ASSERT_EQ(out[at + 4], NGHTTP2_FLAG_END_HEADERS);
    types++;
    at += 9 + len;
  }
  ASSERT_EQ(types, 3);
  s.body_wait = 0;
  cb_ch2_resume(&c, 1);
  n = ch2_pull_all(&c, out, sizeof out);
  uint8_t exp[12];
  ch2_frame(exp, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, "bbb", 3);
  ASSERT_MEM_EQ(out, n, exp, (size_t)12);
  cb_ch2_free(&c);
}

/* A request its owner cancels before the session wrote it (its HEADERS still queued): nothing of it is written,
 * not even a RST_STREAM, nothing is told (no on_close), and its slot is free again, counted once:
 * with a limit of 1 the next request may go, takes stream 3 and is the only HEADERS written. Before, the cancel
 * found no open stream and did nothing: the HEADERS went out with the next write, bound to the owner's pointer. */
TEST(client_h2_cancel_before_sent) {
  cb_ch2_t c;
  sx_t s, s2;
  memset(&s, 0, sizeof s);
  memset(&s2, 0, sizeof s2);
  s.c = s2.c = &c;
  cb_ch2_callbacks_t cbs = sx_callbacks;
  cb_ch2_limits_t lim = {.max_head = 1024, .max_headers = 8, .conn_window = 1 << 20};
  ASSERT_EQ(cb_ch2_init(&c, &cbs, NULL, &lim, hb, sizeof hb, cbt_plain_mem()), 0);
  cb_ch2_req_t q = {.method = "GET", .method_len = 3, .path = "/p", .path_len = 2, .authority = "h:1",
                    .authority_len = 3};
  s.id = cb_ch2_submit(&c, &q, &s);
  ASSERT_EQ(s.id, 1);
  cb_ch2_cancel(&c, s.id);
  uint8_t out[1024];
  size_t n = ch2_pull_all(&c, out, sizeof out);
  /* the preface (24), SETTINGS (9 + 12), WINDOW_UPDATE (9 + 4): no frame after them */
  ASSERT_EQ(n, 24 + 21 + 13);
  ASSERT_EQ(out[24 + 21 + 3], NGHTTP2_WINDOW_UPDATE);
  cb_ch2_assume_max_streams(&c, 1); /* the count is back at 0 (it once fell to -1: no stream could go again) */
  ASSERT_EQ(cb_ch2_can_submit(&c), 1);
  s2.id = cb_ch2_submit(&c, &q, &s2);
  ASSERT_EQ(s2.id, 3);
  ASSERT_EQ(cb_ch2_can_submit(&c), 0);
  n = ch2_pull_all(&c, out, sizeof out);
  ASSERT_GE(n, 9);
  ASSERT_EQ(out[3], NGHTTP2_HEADERS);
  ASSERT_EQ(out[8], 3);
  ASSERT_EQ(n, 9 + ((size_t)out[0] << 16 | (size_t)out[1] << 8 | out[2]));
  /* The server answers stream 3 only; stream 1's owner hears nothing. */
  uint8_t in[128];
  static const uint8_t h[] = {0x88};
  size_t k = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
  k += ch2_frame(in + k, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3, h, sizeof h);
  ASSERT_EQ(cb_ch2_feed(&c, (const char *)in, k), 0);
  s.log[s.len] = s2.log[s2.len] = '\0';
  ASSERT_STR_EQ(s.log, "");
  ASSERT_STR_EQ(s2.log, "head 200|end|");
  cb_ch2_free(&c);
}
