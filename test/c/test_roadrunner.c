/* The roadrunner routes (issue 16): GET /large, GET /cookies (RFC 6265 parsing), GET /gzip (accept-encoding with
 * q-values, the body compressed once), over HTTP/1.1 and h2c, byte for byte; the two parsers on their own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "h2client.h"
#include "engine.h"
#include "testing.h"

static cb_server_t *start(void) {
  cb_config_t cfg;
  test_config(&cfg);
  return test_start(&cfg);
}

/* GET target with the header lines h1hdrs over HTTP/1.1 (its own connection), and with the same headers as nextra
 * name/value pairs (2 * nextra strings) over h2c; both compared with exp (HTTP/1.1 form). */
static void both(int port, const char *method, const char *target, const char *h1hdrs, const char *const *extra,
                 size_t nextra, const buf_t *exp) {
  buf_t req = {0};
  buf_addf(&req, "%s %s HTTP/1.1\r\nhost: 127.0.0.1\r\n%s\r\n", method, target, h1hdrs);
  int fd = cl_connect(port);
  ROUNDTRIP(fd, req.p, req.len, exp);
  EXPECT_QUIET(fd, 20);
  close(fd);
  buf_free(&req);

  buf_t head = {0}, body = {0};
  char what[256];
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, method, target, extra, nextra, NULL, 0);
  h2_wait1(cl, r, 15000);
  h2_expect_from_h1(exp, &head, &body);
  snprintf(what, sizeof what, "h2 %s %s", method, target);
  h2_assert_resp(r, &head, &body, what);
  buf_free(&head);
  buf_free(&body);
  h2_free(cl);
}

/* ---- /large ---- */

TEST(rr_large) {
  cb_server_t *srv = start();
  int port = cb_server_port(srv);
  buf_t exp = {0};
  exp_head(&exp, 200, "application/octet-stream", NULL, 65536, CONN_NONE);
  exp_file_bytes(&exp, 65536);
  both(port, "GET", "/large", "", NULL, 0, &exp);
  both(port, "GET", "/large?x=1", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, "application/octet-stream", NULL, 65536, CONN_NONE);
  both(port, "HEAD", "/large", "", NULL, 0, &exp);
  ASSERT_EQ(route_count(srv, "large"), 6);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- /cookies ---- */

/* The JSON for these cookie field values, through the parser alone. */
static void cookies_case(const char *const *values, int n, const char *want) {
  cb__hdr_t hs[8];
  ASSERT_LE(n + 1, 8);
  hs[0] = (cb__hdr_t){"host", 4, "x", 1};
  for (int i = 0; i < n; i++) hs[i + 1] = (cb__hdr_t){i % 2 ? "Cookie" : "cookie", 6, values[i], strlen(values[i])};
  size_t cap = cb__cookies_json_cap(hs, n + 1);
  char *out = malloc(cap);
  size_t len = cb__cookies_json(hs, n + 1, out);
  ASSERT_LE(len, cap);
  cbt_log("cookie: %s", n ? values[0] : "(none)");
  ASSERT_MEM_EQ(out, len, want, strlen(want));
  free(out);
}

#define COOKIES1(v, want)                     \
  do {                                        \
    const char *const vs_[] = {v};            \
    cookies_case(vs_, 1, want);               \
  } while (0)

TEST(rr_cookies_parse) {
  cookies_case(NULL, 0, "{}");
  COOKIES1("", "{}");
  COOKIES1(";;; ;", "{}");
  COOKIES1("a=1; bb=22; ccc=333; session=9f86d081884c7d65; theme=dark; lang=en-GB; csrf=\"tok-e3b0c442\"; consent=yes",
           "{\"a\":\"1\",\"bb\":\"22\",\"ccc\":\"333\",\"session\":\"9f86d081884c7d65\",\"theme\":\"dark\","
           "\"lang\":\"en-GB\",\"csrf\":\"tok-e3b0c442\",\"consent\":\"yes\"}");
  /* No '=', a space in the name or the value, a comma, a backslash, an empty name, a lone quote: skipped. */
  COOKIES1("a=1; novalue; c d=3; e=x y; f=ok;; g=; h=a,b; i=a\\b; =v; j=\"; k = 2 ;a=dup",
           "{\"a\":\"1\",\"f\":\"ok\",\"g\":\"\",\"k\":\"2\"}");
  COOKIES1("q=\"\"; r=\"x\"y\"; s=\"v\"; t=x\"y", "{\"q\":\"\",\"s\":\"v\"}");
  COOKIES1("a(b=1; !#$%&=2; x==3", "{\"!#$%&\":\"2\",\"x\":\"=3\"}");
  COOKIES1("\ta=1\t;\tb=2 ", "{\"a\":\"1\",\"b\":\"2\"}");
  /* Bytes over 0x7E and control bytes are not cookie-octets. */
  COOKIES1("a=\xc3\xa9; b=\x01; c=ok", "{\"c\":\"ok\"}");
  const char *const two[] = {"a=1", "b=2; a=3"};
  cookies_case(two, 2, "{\"a\":\"1\",\"b\":\"2\"}");
  /* 300 distinct names: the first 256 are answered. */
  buf_t many = {0}, want = {0};
  buf_adds(&want, "{");
  for (int i = 1; i <= 300; i++) {
    buf_addf(&many, "%sc%d=%d", i > 1 ? "; " : "", i, i);
    if (i <= 256) buf_addf(&want, "%s\"c%d\":\"%d\"", i > 1 ? "," : "", i, i);
  }
  buf_adds(&want, "}");
  buf_add(&many, "", 1);
  buf_add(&want, "", 1);
  COOKIES1(many.p, want.p);
  /* The worst case for the output bound: 256 one-byte pairs "a=" with quotes. */
  buf_reset(&many);
  for (int i = 0; i < 300; i++) buf_addf(&many, "%c%c=\"\";", 'A' + i % 26, 'a' + i / 26);
  buf_add(&many, "", 1);
  const char *const v[] = {many.p};
  cb__hdr_t h = {"cookie", 6, v[0], strlen(v[0])};
  char *out = malloc(cb__cookies_json_cap(&h, 1));
  ASSERT_LE(cb__cookies_json(&h, 1, out), cb__cookies_json_cap(&h, 1));
  free(out);
  buf_free(&many);
  buf_free(&want);
}

TEST(rr_cookies_wire) {
  cb_server_t *srv = start();
  int port = cb_server_port(srv);
  buf_t exp = {0};
  const char *want = "{\"a\":\"1\",\"session\":\"abc\",\"t\":\"x\"}";
  exp_head(&exp, 200, "application/json", NULL, (long)strlen(want), CONN_NONE);
  buf_adds(&exp, want);
  /* Over h2c the cookies come as two fields (RFC 9113 8.2.3 lets a client split them): read in order. */
  const char *const h2[] = {"cookie", "a=1; session=\"abc\"", "cookie", "bad; t=x; a=2"};
  both(port, "GET", "/cookies", "Cookie: a=1; session=\"abc\"; bad; t=x; a=2\r\n", h2, 2, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, "application/json", NULL, 2, CONN_NONE);
  buf_adds(&exp, "{}");
  both(port, "GET", "/cookies", "", NULL, 0, &exp);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- /gzip ---- */

static int ae(const char *v) {
  cb__hdr_t hs[2] = {{"host", 4, "x", 1}, {"Accept-Encoding", 15, v, strlen(v)}};
  return cb__accepts_gzip(hs, 2);
}

TEST(rr_accept_encoding) {
  static const struct {
    const char *value;
    int gzip;
  } cases[] = {
      {"gzip", 1}, {"gzip, deflate, br", 1}, {"GZip", 1}, {"x-gzip", 1}, {"br, *", 1}, {"deflate, br", 0},
      {"identity", 0}, {"", 0}, {" , ,", 0}, {"gzip;q=0", 0}, {"gzip;q=0.000", 0}, {"gzip;q=1", 1},
      {"gzip;q=1.000", 1}, {"gzip ; Q=0.001", 0}, {"gzip ; Q=0.001, identity;q=0", 1},
      {"gzip;q=0.5, identity;q=0.4", 1}, {"gzip;q=0.4, identity;q=0.5", 0}, {"gzip;q=0.5, identity;q=0.5", 1},
      {"*;q=0.3, identity;q=0.2", 1}, {"*;q=0", 0}, {"identity;q=0, *;q=0", 0}, {"gzip;q=1.5", 0},
      {"gzip;q=1.001", 0}, {"gzip;q=0.1234", 0}, {"gzip;q=.5", 0}, {"gzip;q=", 0}, {"gzip;q", 0},
      {"gzip;level=1", 0}, {"gzip;q=0.5;x=y", 0}, {"gzip;q=0, gzip", 0}, {"gzip q=1", 0}, {"gz(ip", 0},
      {"\tgzip\t", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cbt_log("accept-encoding: [%s]", cases[i].value);
    ASSERT_EQ(ae(cases[i].value), cases[i].gzip);
  }
  /* No accept-encoding at all: identity. Two fields: one list, in order. */
  cb__hdr_t none = {"host", 4, "x", 1};
  ASSERT_EQ(cb__accepts_gzip(&none, 1), 0);
  cb__hdr_t two[2] = {{"accept-encoding", 15, "identity;q=0.1", 14}, {"accept-encoding", 15, "gzip;q=0.2", 10}};
  ASSERT_EQ(cb__accepts_gzip(two, 2), 1);
}

/* The /gzip body as docs/wire.md describes it. */
static void gzip_plain(buf_t *b) {
  buf_adds(b, "{\"items\":[");
  for (int i = 0; i < 150; i++)
    buf_addf(b, "%s{\"id\":%d,\"name\":\"item-%d\",\"price\":%d.%02d,\"in_stock\":%s,\"tags\":[\"cbench\",\"fixture\"]}",
             i ? "," : "", i, i, i * 37 % 1000, i * 13 % 100, i % 3 ? "true" : "false");
  buf_adds(b, "],\"pad\":\"");
  for (size_t i = 0; b->len < 16382; i++) buf_add(b, &"0123456789abcdef"[i % 16], 1);
  buf_adds(b, "\"}");
}

TEST(rr_gzip_wire) {
  cb_server_t *srv = start();
  int port = cb_server_port(srv);
  buf_t plain = {0}, exp = {0};
  gzip_plain(&plain);
  ASSERT_EQ(plain.len, 16384);
  cb__slice_t id, gz;
  ASSERT_ERR(cb__gzip_bodies(&id, &gz), 0);
  ASSERT_MEM_EQ(id.ptr, id.len, plain.p, plain.len);
  /* The compressed body inflates to the plain one and is a gzip member (magic, deflate, no flags, mtime 0). */
  char *back = malloc(plain.len + 1);
  uLongf back_len = plain.len + 1;
  z_stream z;
  memset(&z, 0, sizeof z);
  ASSERT_EQ(inflateInit2(&z, 16 + 15), Z_OK);
  z.next_in = (Bytef *)gz.ptr;
  z.avail_in = (uInt)gz.len;
  z.next_out = (Bytef *)back;
  z.avail_out = (uInt)back_len;
  ASSERT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  ASSERT_EQ(z.avail_in, 0);
  ASSERT_MEM_EQ(back, back_len - z.avail_out, plain.p, plain.len);
  inflateEnd(&z);
  free(back);
  ASSERT_MEM_EQ(gz.ptr, 8, "\x1f\x8b\x08\x00\x00\x00\x00\x00", 8);

  exp_head(&exp, 200, "application/json", "vary: accept-encoding\r\n", 16384, CONN_NONE);
  buf_add(&exp, plain.p, plain.len);
  both(port, "GET", "/gzip", "", NULL, 0, &exp);
  const char *const idq[] = {"accept-encoding", "gzip;q=0.4, identity;q=0.5"};
  both(port, "GET", "/gzip", "Accept-Encoding: gzip;q=0.4, identity;q=0.5\r\n", idq, 1, &exp);

  buf_reset(&exp);
  exp_head(&exp, 200, "application/json", "content-encoding: gzip\r\nvary: accept-encoding\r\n", (long)gz.len,
           CONN_NONE);
  buf_add(&exp, gz.ptr, gz.len);
  const char *const g[] = {"accept-encoding", "gzip, deflate, br"};
  both(port, "GET", "/gzip", "Accept-Encoding: gzip, deflate, br\r\n", g, 1, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, "application/json", "content-encoding: gzip\r\nvary: accept-encoding\r\n", (long)gz.len,
           CONN_NONE);
  both(port, "HEAD", "/gzip", "Accept-Encoding: gzip, deflate, br\r\n", g, 1, &exp);
  buf_free(&exp);
  buf_free(&plain);
  test_stop(srv);
}

/* ---- /ws ---- */

/* Sec-WebSocket-Accept (SHA-1 from libcrypto, base64 of the engine's own): RFC 6455 1.3's example, and a second
 * key whose answer was computed with Python's hashlib and base64. */
TEST(rr_ws_accept) {
  char acc[29] = {0};
  cb__ws_accept("dGhlIHNhbXBsZSBub25jZQ==", 24, acc);
  ASSERT_STR_EQ(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  cb__ws_accept("x3JJHMbDL1EzLkh9GBhXDw==", 24, acc);
  ASSERT_STR_EQ(acc, "HSmrc0sMlYUkAGmm5OPpG2HaGWk=");
}

#define WS_HANDSHAKE                                                                                           \
  "GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"                              \
  "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
#define WS_101                                                                                                 \
  "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"                         \
  "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"

/* A masked client frame. */
static void cframe(buf_t *b, int fin, int op, const void *p, size_t n) {
  static const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
  uint8_t h[14];
  size_t hl = 0;
  h[hl++] = (uint8_t)((fin ? 0x80 : 0) | op);
  if (n < 126) {
    h[hl++] = (uint8_t)(0x80 | n);
  } else if (n < 65536) {
    h[hl++] = 0x80 | 126;
    h[hl++] = (uint8_t)(n >> 8);
    h[hl++] = (uint8_t)n;
  } else {
    h[hl++] = 0x80 | 127;
    for (int i = 0; i < 8; i++) h[hl++] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
  }
  memcpy(h + hl, key, 4);
  hl += 4;
  buf_add(b, h, hl);
  for (size_t i = 0; i < n; i++) {
    uint8_t c = ((const uint8_t *)p)[i] ^ key[i & 3];
    buf_add(b, &c, 1);
  }
}

static void sframe(buf_t *b, int op, const void *p, size_t n) {
  uint8_t h[4] = {(uint8_t)(0x80 | op), (uint8_t)n};
  if (n < 126) {
    buf_add(b, h, 2);
  } else {
    h[1] = 126;
    h[2] = (uint8_t)(n >> 8);
    h[3] = (uint8_t)n;
    buf_add(b, h, 4);
  }
  buf_add(b, p, n);
}

/* The conversation of rr_ws_proto: input and the exact output. */
static void ws_script(buf_t *in, buf_t *out) {
  buf_adds(in, WS_HANDSHAKE);
  buf_adds(out, WS_101);
  cframe(in, 1, 1, "hello", 5);
  sframe(out, 1, "hello", 5);
  uint8_t bin[300];
  for (int i = 0; i < 300; i++) bin[i] = (uint8_t)i;
  cframe(in, 1, 2, bin, sizeof bin);
  sframe(out, 2, bin, sizeof bin);
  cframe(in, 0, 1, "h\xc3", 2); /* é split across fragments, a ping between them */
  cframe(in, 1, 9, "ping!", 5);
  cframe(in, 1, 0, "\xa9llo", 4);
  sframe(out, 10, "ping!", 5);
  sframe(out, 1, "h\xc3\xa9llo", 6);
  cframe(in, 1, 10, "pong", 4); /* not answered */
  cframe(in, 1, 8, "\x03\xe8" "bye", 5);
  sframe(out, 8, "\x03\xe8", 2);
}

static void sink(void *arg, const char *p, size_t n) { buf_add(arg, p, n); }

/* Without sockets: the same conversation fed whole, then split in two at every offset. */
TEST(rr_ws_proto) {
  buf_t in = {0}, want = {0};
  ws_script(&in, &want);
  for (size_t cut = 0; cut <= in.len; cut += (cut < 200 ? 1 : 7)) {
    buf_t got = {0};
    cb__testconn_t *tc = cb__testconn_new(NULL, sink, &got);
    ASSERT_NE(tc, NULL);
    if (cut > 0) cb__testconn_feed(tc, in.p, cut);
    if (cut < in.len) cb__testconn_feed(tc, in.p + cut, in.len - cut);
    cb__testconn_run(tc, 0);
    ASSERT_MEM_EQ(got.p, got.len, want.p, want.len);
    ASSERT_EQ(cb__testconn_route_count(tc, "ws"), 1);
    ASSERT_EQ(cb__testconn_free(tc), 0);
    buf_free(&got);
  }
  /* Byte by byte. */
  buf_t got = {0};
  cb__testconn_t *tc = cb__testconn_new(NULL, sink, &got);
  for (size_t i = 0; i < in.len; i++) cb__testconn_feed(tc, in.p + i, 1);
  ASSERT_MEM_EQ(got.p, got.len, want.p, want.len);
  ASSERT_EQ(cb__testconn_free(tc), 0);
  buf_free(&got);
  buf_free(&in);
  buf_free(&want);
}

/* Over sockets: echo and the close handshake, a bad frame's 1002, a message over the limit's 1009, and /ws
 * over h2c (400: WebSocket is an HTTP/1.1 upgrade here). */
TEST(rr_ws_wire) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.max_body_bytes = 1000;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  buf_t in = {0}, want = {0};
  ws_script(&in, &want);
  int fd = cl_connect(port);
  ROUNDTRIP(fd, in.p, in.len, &want);
  EXPECT_CLOSED(fd, 5000);
  close(fd);
  /* Unmasked: 1002. */
  buf_reset(&in);
  buf_reset(&want);
  buf_adds(&in, WS_HANDSHAKE "\x81\x02hi");
  buf_adds(&want, WS_101);
  sframe(&want, 8, "\x03\xea", 2);
  fd = cl_connect(port);
  ROUNDTRIP(fd, in.p, in.len, &want);
  EXPECT_CLOSED(fd, 5000);
  close(fd);
  /* 1001 bytes over a limit of 1000: 1009; exactly 1000 is echoed. */
  static char big[1001];
  memset(big, 'x', sizeof big);
  buf_reset(&in);
  buf_reset(&want);
  buf_adds(&in, WS_HANDSHAKE);
  buf_adds(&want, WS_101);
  cframe(&in, 1, 2, big, 1000);
  sframe(&want, 2, big, 1000);
  cframe(&in, 1, 2, big, 1001);
  sframe(&want, 8, "\x03\xf1", 2);
  fd = cl_connect(port);
  ROUNDTRIP(fd, in.p, in.len, &want);
  EXPECT_CLOSED(fd, 5000);
  close(fd);
  /* h2c: 400. */
  buf_reset(&want);
  exp_head(&want, 400, NULL, NULL, 0, CONN_NONE);
  buf_t head = {0}, body = {0};
  h2_expect_from_h1(&want, &head, &body);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  const char *const ws_hdrs[] = {"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version", "13"};
  h2resp_t *r = h2_request(cl, 1, "GET", "/ws", ws_hdrs, 2, NULL, 0);
  h2_wait1(cl, r, 15000);
  h2_assert_resp(r, &head, &body, "h2 GET /ws");
  h2_free(cl);
  ASSERT_EQ(route_count(srv, "ws"), 4);
  buf_free(&head);
  buf_free(&body);
  buf_free(&in);
  buf_free(&want);
  test_stop(srv);
}
