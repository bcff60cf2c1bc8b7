/* Regression tests of the hardening issue over real sockets: each input here once crashed the engine, read
 * freed memory, smuggled a request or held a connection open without bound (docs/wire.md, "Bad input"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"

static cb_server_t *start_with(size_t max_header, size_t max_body, unsigned header_ms, unsigned idle_ms) {
  cb_config_t cfg;
  test_config(&cfg);
  if (max_header) cfg.max_header_bytes = max_header;
  if (max_body) cfg.max_body_bytes = max_body;
  if (header_ms) cfg.header_timeout_ms = header_ms;
  if (idle_ms) cfg.idle_timeout_ms = idle_ms;
  return test_start(&cfg);
}

/* The expected /headers answer for a JSON body. */
static void exp_json(buf_t *exp, const char *json) {
  exp_head(exp, 200, "application/json", NULL, (long)strlen(json), CONN_NONE);
  buf_adds(exp, json);
}

/* `METHOD path` with a chunked empty body ending in `trailers` (each "name: value\r\n"). */
static void chunked_with_trailers(buf_t *req, const char *method, const char *path, const char *trailers) {
  buf_addf(req, "%s %s HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n", method, path);
  buf_adds(req, trailers);
  buf_adds(req, "\r\n");
}

/* ---- trailers ---- */

/* Trailers used to be appended to the head's buffer after its offsets had become pointers: /headers then
 * escaped freed memory into its answer (heap-use-after-free under ASan). Trailers are dropped now: /headers,
 * /delay and /status answer exactly as without them. */
TEST(wire_trailers_are_dropped) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int fd = cl_connect(cb_server_port(srv));
  buf_t big = {0}, many = {0}, req = {0}, exp = {0};
  buf_adds(&big, "x-trailer: ");
  for (int i = 0; i < 4000; i++) buf_adds(&big, "A");
  buf_adds(&big, "\r\n");
  for (int i = 0; i < 20; i++) buf_addf(&many, "x-t%d: %d\r\n", i, i);
  static const char json[] = "{\"host\":\"x\",\"transfer-encoding\":\"chunked\"}";

  chunked_with_trailers(&req, "GET", "/headers", big.p);
  exp_json(&exp, json);
  ROUNDTRIP(fd, req.p, req.len, &exp);

  buf_reset(&req);
  chunked_with_trailers(&req, "GET", "/headers", many.p);
  ROUNDTRIP(fd, req.p, req.len, &exp);

  const char *const paths[] = {"/delay/1", "/status/201", "/hello"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    buf_reset(&req);
    buf_reset(&exp);
    chunked_with_trailers(&req, "GET", paths[i], big.p);
    exp_route(&exp, "GET", paths[i], CONN_NONE);
    ROUNDTRIP(fd, req.p, req.len, &exp);
  }
  /* A body before the trailers, pipelined behind the trailers of the previous request. */
  buf_reset(&req);
  buf_reset(&exp);
  buf_adds(&req, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n");
  buf_adds(&req, many.p);
  buf_adds(&req, "\r\nGET /headers HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n");
  buf_adds(&req, big.p);
  buf_adds(&req, "\r\n");
  exp_head(&exp, 200, "application/octet-stream", NULL, 3, CONN_NONE);
  buf_adds(&exp, "abc");
  exp_json(&exp, json);
  ROUNDTRIP(fd, req.p, req.len, &exp);
  EXPECT_QUIET(fd, 50);
  close(fd);
  buf_free(&big);
  buf_free(&many);
  buf_free(&req);
  buf_free(&exp);
  test_stop(srv);
}

/* Trailers have their own budget, max_header_bytes: over it, 431 and close; when the answer has already
 * begun (a streamed echo), the connection is closed without a second status. */
TEST(wire_trailers_over_limit) {
  cb_server_t *srv = start_with(1024, 0, 0, 0);
  int port = cb_server_port(srv);
  buf_t req = {0}, exp = {0}, got = {0};
  /* A head near the limit and trailers near the limit: both fit, they are counted apart. */
  buf_adds(&req, "GET /status/200 HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nx-fill: ");
  while (req.len < 900) buf_adds(&req, "h");
  buf_adds(&req, "\r\n\r\n0\r\nx-trailer: ");
  while (req.len < 1900) buf_adds(&req, "t");
  buf_adds(&req, "\r\n\r\n");
  exp_route(&exp, "GET", "/status/200", CONN_NONE);
  int fd = cl_connect(port);
  ROUNDTRIP(fd, req.p, req.len, &exp);
  close(fd);

  buf_reset(&req);
  buf_adds(&req, "GET /headers HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\nx-trailer: ");
  for (int i = 0; i < 1100; i++) buf_adds(&req, "A");
  buf_adds(&req, "\r\n\r\n");
  expect_error(port, req.p, req.len, 431);

  /* Many small trailers. */
  buf_reset(&req);
  buf_adds(&req, "GET /hello HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n");
  for (int i = 0; i < 150; i++) buf_addf(&req, "x-t%d: v\r\n", i);
  buf_adds(&req, "\r\n");
  expect_error(port, req.p, req.len, 431);

  /* /echo/chunked has answered the first piece: no 431 after it, the connection is cut. */
  fd = cl_connect(port);
  buf_reset(&exp);
  exp_head(&exp, 200, "application/octet-stream", NULL, CL_CHUNKED, CONN_NONE);
  exp_chunk(&exp, "abc", 3);
  ROUNDTRIP_S(fd, "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n", &exp);
  buf_reset(&req);
  buf_adds(&req, "0\r\nx-trailer: ");
  for (int i = 0; i < 1100; i++) buf_adds(&req, "A");
  cl_send(fd, req.p, req.len);
  int r = cl_read_close(fd, &got, 3000);
  ASSERT_MEM_EQ(got.p, got.len, "", (size_t)0);
  ASSERT_EQ(r, CL_EOF);
  close(fd);
  buf_free(&req);
  buf_free(&exp);
  buf_free(&got);
  test_stop(srv);
}

/* ---- chunked framing and the request target ---- */

#define CHUNKED_ECHO "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"

/* llhttp was built without its strict mode: any two bytes were taken where the CRLF after chunk data
 * belongs, so `2\r\nabcd0\r\n\r\n` was echoed as "ab" (and what followed could be smuggled as a request). */
TEST(wire_chunk_terminator_checked) {
  cb_server_t *srv = start_with(1024, 0, 0, 0);
  int port = cb_server_port(srv);
  EXPECT_ERROR(port, CHUNKED_ECHO "2\r\nabcd0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "3\r\nabcXX0\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "2\r\nab\n0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "2\r\nab\r0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "2\nab\r\n0\r\n\r\n", 400);
  test_stop(srv);
}

/* Valid extensions are accepted (`5;a=b;c=d` was a 400 in llhttp 8.1), malformed ones get 400, and all the
 * extensions of a request may take max_header_bytes: 200 MB of them used to be read (Node's CVE-2024-22019
 * is this class); over the budget now: 413. */
TEST(wire_chunk_extensions) {
  cb_server_t *srv = start_with(1024, 0, 0, 0);
  int port = cb_server_port(srv), fd = cl_connect(port);
  buf_t req = {0}, exp = {0};
  exp_head(&exp, 200, "application/octet-stream", NULL, 8, CONN_NONE);
  buf_adds(&exp, "helloabc");
  ROUNDTRIP_S(fd, CHUNKED_ECHO "5;a=b;c=d\r\nhello\r\n3;q=\"x;y \t\";r;s=t\r\nabc\r\n0;z=9\r\n\r\n", &exp);
  /* Extensions near the budget pass (900 bytes). */
  buf_adds(&req, CHUNKED_ECHO "8");
  for (int i = 0; i < 225; i++) buf_adds(&req, ";a=b");
  buf_adds(&req, "\r\nhelloabc\r\n0\r\n\r\n");
  ROUNDTRIP(fd, req.p, req.len, &exp);
  EXPECT_QUIET(fd, 50);
  close(fd);

  EXPECT_ERROR(port, CHUNKED_ECHO "5;=b\r\nhello\r\n0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "5;a=\r\nhello\r\n0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "5;a=b;\r\nhello\r\n0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "5;a=b c\r\nhello\r\n0\r\n\r\n", 400);
  EXPECT_ERROR(port, CHUNKED_ECHO "5;a=\"x\\y\"\r\nhello\r\n0\r\n\r\n", 400);

  /* Over the budget in one line, and spread over chunks. */
  buf_reset(&req);
  buf_adds(&req, CHUNKED_ECHO "1");
  for (int i = 0; i < 300; i++) buf_adds(&req, ";a=b");
  buf_adds(&req, "\r\nx\r\n0\r\n\r\n");
  expect_error(port, req.p, req.len, 413);
  buf_reset(&req);
  buf_adds(&req, CHUNKED_ECHO);
  for (int c = 0; c < 5; c++) {
    buf_adds(&req, "1;e=");
    for (int i = 0; i < 250; i++) buf_adds(&req, "v");
    buf_adds(&req, "\r\nx\r\n");
  }
  buf_adds(&req, "0\r\n\r\n");
  expect_error(port, req.p, req.len, 413);
  buf_free(&req);
  buf_free(&exp);
  test_stop(srv);
}

/* The target may hold visible ASCII only: llhttp's default mode let tabs, form feeds and raw bytes over 0x7f
 * through. */
TEST(wire_target_bytes) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int port = cb_server_port(srv);
  static const unsigned char bad[] = {0x01, 0x08, 0x09, 0x0c, 0x1b, 0x7f, 0x80, 0xc3, 0xff};
  for (size_t i = 0; i < sizeof bad; i++) {
    char req[64];
    int n = snprintf(req, sizeof req, "GET /he%cllo HTTP/1.1\r\nhost: x\r\n\r\n", bad[i]);
    expect_error(port, req, (size_t)n, 400);
  }
  EXPECT_ERROR(port, "GET /hello?a\x01 HTTP/1.1\r\nhost: x\r\n\r\n", 400);
  int fd = cl_connect(port);
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello?a=%C3%A9&b=~!$'()*+,;= HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- the request line and Host ---- */

/* Sends `a`, then after a pause `b`, on one connection, and expects the empty error answer `status`. */
static void expect_error_split(int port, const char *a, const char *b, int status) {
  buf_t exp = {0}, got = {0};
  int fd = cl_connect(port);
  cbt_log("expecting %d for %s|%s", status, a, b);
  exp_error_close(&exp, status);
  cl_sends(fd, a);
  sleep_ms(30);
  cl_sends(fd, b);
  ASSERT_EQ(cl_read_close(fd, &got, 3000), CL_EOF);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  buf_free(&exp);
  buf_free(&got);
}

/* Unknown methods were a 400 over HTTP/1.1 (llhttp refuses them) and a 405 over HTTP/2; both get 501 now
 * (RFC 9110 15.6.2), and a line that is malformed besides stays a 400. Methods the engine knows but does not
 * route keep 405 and 404. */
TEST(wire_unknown_methods_501) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int port = cb_server_port(srv);
  EXPECT_ERROR(port, "FOO /hello HTTP/1.1\r\nhost: x\r\n\r\n", 501);
  EXPECT_ERROR(port, "PROPFIND /hello HTTP/1.1\r\nhost: x\r\n\r\n", 501);
  EXPECT_ERROR(port, "get /hello HTTP/1.1\r\nhost: x\r\n\r\n", 501);
  EXPECT_ERROR(port, "PROPFINDX /nope HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nab", 501);
  EXPECT_ERROR(port, "G@T /hello HTTP/1.1\r\nhost: x\r\n\r\n", 400);
  EXPECT_ERROR(port, " /hello HTTP/1.1\r\nhost: x\r\n\r\n", 400);
  EXPECT_ERROR(port, "GARBAGE\r\n\r\n", 400);
  EXPECT_ERROR(port, "BAD REQUEST LINE\r\n\r\n", 400);
  EXPECT_ERROR(port, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", 400);
  /* The line of an unknown method is judged once it has arrived. */
  expect_error_split(port, "FO", "O /hello HTTP/1.1\r\nhost: x\r\n\r\n", 501);
  expect_error_split(port, "FOO /hel", "lo HTTP/1.1\r\nhost: x\r\n\r\n", 501);
  expect_error_split(port, "HEL", "LO\r\n\r\n", 400);
  int fd = cl_connect(port);
  buf_t exp = {0};
  exp_route(&exp, "PATCH", "/hello", CONN_NONE);
  exp_route(&exp, "OPTIONS", "/nope", CONN_NONE);
  ROUNDTRIP_S(fd, "PATCH /hello HTTP/1.1\r\nhost: x\r\n\r\nOPTIONS /nope HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  EXPECT_QUIET(fd, 50);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}

TEST(h2_unknown_methods_501) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t head = {0}, none = {0};
  h2_handshake(cl);
  buf_adds(&head, ":status: 501\r\ndate: " DATE_MASK "\r\ncontent-length: 0\r\n");
  h2resp_t *a = h2_request(cl, 1, "FOO", "/hello", NULL, 0, NULL, 0);
  h2resp_t *b = h2_request(cl, 3, "PROPFIND", "/nope", NULL, 0, NULL, 0);
  h2resp_t *c = h2_request(cl, 5, "get", "/hello", NULL, 0, "ab", 2);
  h2_wait1(cl, a, 5000);
  h2_wait1(cl, b, 5000);
  h2_wait1(cl, c, 5000);
  h2_assert_resp(a, &head, &none, "FOO");
  h2_assert_resp(b, &head, &none, "PROPFIND");
  h2_assert_resp(c, &head, &none, "get");
  h2resp_t *d = h2_request(cl, 7, "PATCH", "/hello", NULL, 0, NULL, 0);
  h2_wait1(cl, d, 5000);
  h2_assert_route(d, "PATCH", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);
  buf_free(&head);
  test_stop(srv);
}

/* `GET /hello\r\n` (HTTP/0.9) waited for the 10 s header timeout, and HTTP/2.0 as an HTTP/1 version got 200.
 * HTTP/0.9 is a 400 at once now, any version but 1.0 and 1.1 a 505. */
TEST(wire_http09_and_versions) {
  cb_server_t *srv = start_with(0, 0, 10000, 0);
  int port = cb_server_port(srv);
  EXPECT_ERROR(port, "GET /hello\r\n", 400);
  EXPECT_ERROR(port, "GET /hello\n", 400);
  EXPECT_ERROR(port, "GET /hello HTTP/0.9\r\n\r\n", 400);
  expect_error_split(port, "GET /hello", "\r\n", 400);
  EXPECT_ERROR(port, "GET /hello HTTP/2.0\r\nhost: x\r\n\r\n", 505);
  EXPECT_ERROR(port, "GET /hello HTTP/1.2\r\nhost: x\r\n\r\n", 505);
  EXPECT_ERROR(port, "GET /hello HTTP/3.0\r\nhost: x\r\n\r\n", 505);
  expect_error_split(port, "GET /hello HTTP/1", ".2\r\nhost: x\r\n\r\n", 505);
  EXPECT_ERROR(port, "GET /hello HTTP/1.10\r\nhost: x\r\n\r\n", 400);
  EXPECT_ERROR(port, "GET /hello HTTP/1.1 x\r\nhost: x\r\n\r\n", 400);
  test_stop(srv);
}

/* A missing, repeated or malformed Host got 200 (RFC 9112 3.2 asks for 400). */
TEST(wire_host_rules) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int port = cb_server_port(srv);
  static const char *const bad[] = {NULL, "a\r\nhost: b", "a\r\nHost: a", "a b", "a:b", "a/b", "a%4", "a%zz",
                                    "[::1", "[]", "a@b", "[::1]x"};
  static const char *const good[] = {"", "127.0.0.1:8080", "[::1]:80", "[v1.x]", "example.com", "ex-ample.com:",
                                     "a%20b", "a.b_c~d!$&'()*+,;="};
  char req[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int n = bad[i] ? snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nhost: %s\r\n\r\n", bad[i])
                   : snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\n\r\n");
    expect_error(port, req, (size_t)n, 400);
  }
  EXPECT_ERROR(port, "GET /hello HTTP/1.0\r\nhost: a\r\nhost: a\r\n\r\n", 400);
  EXPECT_ERROR(port, "GET /hello HTTP/1.0\r\nhost: a b\r\n\r\n", 400);
  int fd = cl_connect(port);
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    int n = snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nhost: %s\r\n\r\n", good[i]);
    cbt_log("host: %s", good[i]);
    ROUNDTRIP(fd, req, (size_t)n, &exp);
  }
  close(fd);
  /* HTTP/1.0 may leave it out. */
  fd = cl_connect(port);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/hello", CONN_KEEP_ALIVE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- the final stats ---- */

/* cbench-server printed the stats it read before the graceful stop: a response finished while draining was
 * missing from them (its bytes, its closed connection). cb_server_stop_stats() reads them after. */
TEST(api_stop_stats_after_drain) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  int fd = cl_connect(cb_server_port(srv));
  buf_t exp = {0}, got = {0};
  static const char req[] = "GET /delay/300 HTTP/1.1\r\nhost: x\r\n\r\n";
  cl_sends(fd, req);
  shutdown(fd, SHUT_WR); /* so that the close after the answer does not linger */
  cb_stats_t before, final;
  memset(&final, 0xff, sizeof final);
  for (int i = 0; i < 200; i++) { /* until the request is in its handler */
    cb_server_stats(srv, &before);
    if (before.requests == 1) break;
    sleep_ms(5);
  }
  ASSERT_EQ(before.requests, 1);
  ASSERT_EQ(before.bytes_written, 0);
  ASSERT_ERR(cb_server_stop_stats(srv, &final), 0);
  exp_route(&exp, "GET", "/delay/300", CONN_CLOSE);
  ASSERT_EQ(cl_read_close(fd, &got, 5000), CL_EOF);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  ASSERT_EQ(final.requests, 1);
  ASSERT_EQ(final.requests_by_route[CB_ROUTE_DELAY], 1);
  ASSERT_EQ(final.bytes_written, exp.len);
  ASSERT_EQ(final.bytes_read, sizeof req - 1);
  ASSERT_EQ(final.conns_closed, 1);
  ASSERT_EQ(final.conns_open, 0);
  ASSERT_ERR(cb_server_stop_stats(NULL, &final), CB_EINVAL);
  close(fd);
  buf_free(&exp);
  buf_free(&got);
}
