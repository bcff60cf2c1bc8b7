/* Regression tests of the hardening issue over real sockets: each input here once crashed the engine, read
 * freed memory, smuggled a request or held a connection open without bound (docs/wire.md, "Bad input"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

/* Each Host value (NULL: none) gets a 400 and a close. */
static void expect_bad_hosts(int port, const char *const *bad, size_t n) {
  char req[256];
  for (size_t i = 0; i < n; i++) {
    int len = bad[i] ? snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nhost: %s\r\n\r\n", bad[i])
                     : snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\n\r\n");
    expect_error(port, req, (size_t)len, 400);
  }
}

/* A missing, repeated or malformed Host got 200 (RFC 9112 3.2 asks for 400). */
TEST(wire_host_rules) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int port = cb_server_port(srv);
  static const char *const bad[] = {NULL, "a\r\nhost: b", "a\r\nHost: a", "a b", "a:b", "a/b", "a%4", "a%zz",
                                    "[::1", "[]", "a@b", "[::1]x", "127.0.0.1:80a0"};
  static const char *const good[] = {"", "127.0.0.1:8080", "[::1]:80", "[v1.x]", "example.com", "ex-ample.com:",
                                     "a%20b", "a.b_c~d!$&'()*+,;="};
  char req[256];
  expect_bad_hosts(port, bad, sizeof bad / sizeof bad[0]);
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
  /* Again, after the good ones (the worker remembers the last valid value: a bad one is never taken for it). */
  expect_bad_hosts(port, bad, sizeof bad / sizeof bad[0]);
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
  ASSERT_EQ(route_count(srv, "delay"), 1); /* counted at dispatch; the counters go with the server */
  ASSERT_ERR(cb_server_stop_stats(srv, &final), 0);
  exp_route(&exp, "GET", "/delay/300", CONN_CLOSE);
  ASSERT_EQ(cl_read_close(fd, &got, 5000), CL_EOF);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  ASSERT_EQ(final.requests, 1);
  ASSERT_EQ(final.bytes_written, exp.len);
  ASSERT_EQ(final.bytes_read, sizeof req - 1);
  ASSERT_EQ(final.conns_closed, 1);
  ASSERT_EQ(final.conns_open, 0);
  ASSERT_ERR(cb_server_stop_stats(NULL, &final), CB_EINVAL);
  close(fd);
  buf_free(&exp);
  buf_free(&got);
}

/* ---- HTTP/2: timeouts, half-close, stream ids, header blocks, echo memory ---- */

static int acks_at_least(h2cl_t *cl, const void *arg) { return cl->settings_acks >= (int)(uintptr_t)arg; }

/* Tells the server it may not send DATA at all on new streams (SETTINGS_INITIAL_WINDOW_SIZE 0). */
static void window_zero(h2cl_t *cl) {
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
  int acks = cl->settings_acks;
  h2_send_settings(cl, iv, 1);
  ASSERT_EQ(h2_run(cl, acks_at_least, (const void *)(uintptr_t)(acks + 1), 5000), CL_OK);
}

static int stats_timeouts(const cb_stats_t *st, const void *arg) { return st->timeouts >= (uint64_t)(uintptr_t)arg; }

/* A stream blocked by flow control (window 0, never a WINDOW_UPDATE) kept the connection open indefinitely,
 * even with PINGs as the only traffic. The stall timeout (idle_timeout_ms without progress) ends it now. */
TEST_T(h2_stall_window_zero, 30000) {
  cb_server_t *srv = start_with(0, 0, 0, 400);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  static const uint8_t ping[8] = "stalling";
  h2_handshake(cl);
  window_zero(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/file/big", NULL, 0, NULL, 0);
  uint64_t t0 = now_ms();
  int closed = 0;
  while (!closed && now_ms() - t0 < 10000) { /* PINGs are activity, not progress */
    if (h2_send_raw(cl, NULL, 0) != 0) break;
    h2_send_ping(cl, ping);
    int rc = h2_wait_goaway(cl, 100);
    closed = rc == CL_OK || rc == CL_EOF || rc == CL_RESET;
  }
  ASSERT(closed);
  ASSERT_EQ(cl->goaway, 1);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_NO_ERROR);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, 0);
  int rc = h2_wait_closed(cl, 5000);
  ASSERT(rc == CL_EOF || rc == CL_RESET);
  cb_stats_t st;
  wait_stats(srv, &st, stats_timeouts, (const void *)(uintptr_t)1, 5000);
  ASSERT_EQ(st.timeouts, 1);
  h2_free(cl);
  h2_check_hello(cb_server_port(srv));
  test_stop(srv);
}

/* After Upgrade: h2c the response waits for the client's preface; a client that never sends it held the
 * connection forever. The preface has the header timeout. */
TEST_T(h2_stall_upgrade_without_preface, 30000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.header_timeout_ms = 300;
  cfg.idle_timeout_ms = 60000;
  cb_server_t *srv = test_start(&cfg);
  int fd = cl_connect(cb_server_port(srv));
  buf_t got = {0};
  cl_sends(fd, "GET /file/big HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
               "http2-settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n");
  int rc = cl_read_close(fd, &got, 10000);
  ASSERT(rc == CL_EOF || rc == CL_RESET);
  ASSERT(got.len > 0 && memcmp(got.p, "HTTP/1.1 101", 12) == 0);
  ASSERT(got.len < 65536); /* the 5 MB answer never flowed */
  cb_stats_t st;
  wait_stats(srv, &st, stats_timeouts, (const void *)(uintptr_t)1, 5000);
  ASSERT_EQ(st.timeouts, 1);
  close(fd);
  buf_free(&got);
  test_stop(srv);
}

/* HTTP/2 had no header timeout: a preface without SETTINGS, or a HEADERS frame dribbled a byte at a time,
 * held the connection until the idle timeout (60 s by default) or forever. */
TEST_T(h2_header_timeout, 30000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.header_timeout_ms = 300;
  cfg.idle_timeout_ms = 60000;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  /* The preface, then nothing. */
  h2cl_t *cl = h2_open(port);
  cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
  ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
  int rc = h2_wait_closed(cl, 5000);
  ASSERT(rc == CL_EOF || rc == CL_RESET);
  h2_free(cl);
  /* A HEADERS frame dribbled one byte every 50 ms: cut before it is complete. */
  cl = h2_open(port);
  h2_handshake(cl);
  buf_t block = {0};
  uint8_t hd[9];
  h2_encode_request(cl, "GET", "/hello", NULL, 0, &block);
  h2_frame_hd(hd, (uint32_t)block.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1);
  buf_t frame = {0};
  buf_add(&frame, hd, 9);
  buf_add(&frame, block.p, block.len);
  size_t sent = 0;
  for (; sent < frame.len; sent++) {
    if (h2_send_raw(cl, frame.p + sent, 1) != 0) break;
    if (h2_wait_goaway(cl, 50) == CL_OK || cl->closed) break;
  }
  cbt_log("%zu of %zu bytes sent when the server ended the connection", sent, frame.len);
  ASSERT_LT(sent, frame.len);
  ASSERT_EQ(cl->goaway, 1);
  h2_free(cl);
  /* A head that arrives in pieces within the timeout is served, and many heads in a row each get their own
   * deadline. */
  cl = h2_open(port);
  h2_handshake(cl);
  for (int32_t i = 0; i < 4; i++) {
    h2resp_t *r = h2_request(cl, 1 + 2 * i, "GET", "/delay/150", NULL, 0, NULL, 0);
    h2_wait1(cl, r, 5000);
    h2_assert_route(r, "GET", "/delay/150");
  }
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);
  buf_free(&block);
  buf_free(&frame);
  test_stop(srv);
}

/* GET /delay/500 then SHUT_WR: the connection was closed with no answer (HTTP/1.1 answers). Now the complete
 * request is answered, then the connection closes. */
TEST(h2_half_close_answers) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/delay/500", NULL, 0, NULL, 0);
  /* A request still waiting for its body cannot complete: it is reset. */
  h2resp_t *body = h2_stream(cl, 3);
  buf_t block = {0};
  h2_encode_request(cl, "POST", "/echo", NULL, 0, &block);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 3, block.p, block.len);
  shutdown(cl->fd, SHUT_WR);
  h2_wait1(cl, r, 5000);
  h2_assert_route(r, "GET", "/delay/500");
  h2_wait1(cl, body, 5000);
  ASSERT_EQ(body->rst, NGHTTP2_CANCEL);
  int rc = h2_wait_closed(cl, 5000);
  ASSERT(rc == CL_EOF || rc == CL_RESET);
  buf_free(&block);
  h2_free(cl);
  test_stop(srv);
}

/* h2spec 5.1.1/2: HEADERS on a stream id lower than one the client opened, on a stream it never opened, is a
 * connection error PROTOCOL_ERROR (nghttp2 ignored it). Trailers on a stream the engine reset are not. */
TEST(h2_lower_stream_ids) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.h2_max_concurrent_streams = 1;
  cfg.max_body_bytes = 1000;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t block = {0};
  h2_handshake(cl);
  h2_wait1(cl, h2_request(cl, 5, "GET", "/hello", NULL, 0, NULL, 0), 5000);
  h2_encode_request(cl, "GET", "/hello", NULL, 0, &block);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3, block.p, block.len);
  ASSERT_EQ(h2_wait_goaway(cl, 5000), CL_OK);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_PROTOCOL_ERROR);
  h2_free(cl);

  /* Refused over the body limit (413, then RST_STREAM NO_ERROR), then trailers: ignored. */
  cl = h2_open(port);
  h2_handshake(cl);
  static const char *const big[] = {"content-length", "5000"};
  buf_reset(&block);
  h2_encode_request(cl, "POST", "/echo", big, 1, &block);
  h2resp_t *r = h2_stream(cl, 1);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block.p, block.len);
  h2_wait1(cl, r, 5000);
  ASSERT_EQ(r->status, 413);
  /* Refused over the stream limit (1 here): stream 5 while stream 3 waits on its delay. */
  h2resp_t *held = h2_request(cl, 3, "GET", "/delay/300", NULL, 0, NULL, 0);
  h2resp_t *refused = h2_request(cl, 5, "POST", "/echo", NULL, 0, "ab", 2);
  (void)refused;
  for (int32_t sid = 1; sid <= 5; sid += 4) {
    static const char *const trailer[] = {"x-trailer", "t"};
    nghttp2_nv nv[] = {{(uint8_t *)trailer[0], (uint8_t *)trailer[1], 9, 1, NGHTTP2_NV_FLAG_NONE}};
    buf_reset(&block);
    h2_encode(cl, nv, 1, &block);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, sid, block.p,
                  block.len);
  }
  h2_wait1(cl, held, 5000);
  h2_assert_route(held, "GET", "/delay/300");
  h2resp_t *after = h2_request(cl, 7, "GET", "/hello", NULL, 0, NULL, 0);
  h2_wait1(cl, after, 5000);
  h2_assert_route(after, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  buf_free(&block);
  h2_free(cl);
  test_stop(srv);
}

/* The HPACK bomb: one 4,000-byte field put in the dynamic table, then header blocks of 16,000 one-byte
 * references to it. nghttp2's session checked all of them (66 s of server CPU for 2,000 frames) and the
 * connection was never dropped. The engine's own session looks at no field of a block once it is over the
 * limit (each costs the decoder's lookup and a sum), answers the request 431, and the fourth oversized block
 * ends the connection with GOAWAY(ENHANCE_YOUR_CALM). */
TEST_T(h2_hpack_bomb, 30000) {
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  /* Hand-encoded blocks (the client's own HPACK state is not used): :method GET, :scheme http, :path /hello
   * (literal without indexing), :authority x, then the field. */
  static const uint8_t pseudo[] = {0x82, 0x86, 0x04, 0x06, '/', 'h', 'e', 'l', 'l', 'o', 0x01, 0x01, 'x'};
  buf_t first = {0}, bomb = {0};
  buf_add(&first, pseudo, sizeof pseudo);
  /* Literal with incremental indexing, new name "x-bomb", value of 4000 bytes (length 4000 = 127 + 3873:
   * 0x7f then 3873 in 7-bit groups). */
  static const uint8_t name[] = {0x40, 0x06, 'x', '-', 'b', 'o', 'm', 'b', 0x7f, 0xa1, 0x1e};
  buf_add(&first, name, sizeof name);
  for (int i = 0; i < 4000; i++) buf_add(&first, "A", 1);
  h2resp_t *r = h2_stream(cl, 1);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, first.p, first.len);
  h2_wait1(cl, r, 5000);
  ASSERT_EQ(r->status, 200);
  buf_add(&bomb, pseudo, sizeof pseudo);
  for (int i = 0; i < 16000; i++) buf_add(&bomb, "\xbe", 1); /* index 62: the newest dynamic entry */
  for (int32_t k = 0, sid = 3; k < 4; k++, sid += 2) {
    h2resp_t *b = h2_stream(cl, sid);
    uint8_t hd[9];
    h2_frame_hd(hd, (uint32_t)bomb.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, sid);
    ASSERT_EQ(h2_send_raw(cl, hd, 9), 0);
    ASSERT_EQ(h2_send_raw(cl, bomb.p, bomb.len), 0);
    if (k == 3) break; /* the fourth oversized block ends the connection */
    h2_wait1(cl, b, 5000);
    ASSERT_EQ(b->status, 431); /* Was (nghttp2's session): past four times the limit, RST_STREAM(INTERNAL_ERROR) */
    ASSERT_EQ(b->rst, H2_NO_RST);
    ASSERT_EQ(cl->goaway, 0);
  }
  ASSERT_EQ(h2_wait_goaway(cl, 5000), CL_OK);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
  int rc = h2_wait_closed(cl, 5000);
  ASSERT(rc == CL_EOF || rc == CL_RESET);
  h2_free(cl);
  h2_check_hello(port);
  buf_free(&first);
  buf_free(&bomb);
  test_stop(srv);
}

typedef struct {
  int32_t first, n;
} streams_t;

/* Every stream of the range has a status (200 with its head only, or an ended 503). */
static int all_answered(h2cl_t *cl, const void *arg) {
  const streams_t *ss = arg;
  for (int32_t i = 0; i < ss->n; i++) {
    h2resp_t *r = h2_stream(cl, ss->first + 2 * i);
    if (r->status == 0 || (r->status == 503 && !r->ended)) return 0;
  }
  return 1;
}

/* One connection with window 0 and 100 streams of POST /echo (2 MB each, the body limit 2.5 MB here): the
 * bodies were all kept (881 MB of RSS for 100 x 9 MB). The echo budget of a connection is two body limits:
 * two streams are served (their answers wait for a window), the 98 others get 503 at once and their bodies
 * are read and dropped. */
TEST_T(h2_echo_budget_per_connection, 60000) {
  cb_server_t *srv = start_with(0, 2500000, 0, 0);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  static const char *const cl2m[] = {"content-length", "2000000"};
  char *body = malloc(2000000);
  ASSERT_NOT_NULL(body);
  memset(body, 'e', 2000000);
  h2_handshake(cl);
  window_zero(cl);
  for (int i = 0; i < 200; i++) h2_check_hello(cb_server_port(srv)); /* warm the allocators */
  long rss0 = vm_rss_kb();
  buf_t block = {0};
  for (int32_t i = 0; i < 100; i++) {
    buf_reset(&block);
    h2_encode_request(cl, "POST", "/echo", cl2m, 1, &block);
    h2_stream(cl, 1 + 2 * i);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1 + 2 * i, block.p, block.len);
  }
  for (int32_t i = 0; i < 100; i++) h2_send_body(cl, 1 + 2 * i, body, 2000000, 1);
  streams_t all = {1, 100};
  ASSERT_EQ(h2_run(cl, all_answered, &all, 30000), CL_OK);
  long grown = vm_rss_kb() - rss0;
  int served = 0, refused = 0;
  for (int32_t i = 0; i < 100; i++) {
    h2resp_t *r = h2_stream(cl, 1 + 2 * i);
    if (r->status == 200) {
      served++;
      ASSERT_EQ(r->body.len, 0); /* window 0 */
    } else {
      ASSERT_EQ(r->status, 503);
      refused++;
    }
  }
  cbt_log("served %d, refused %d; VmRSS grew by %ld kB", served, refused, grown);
  ASSERT_EQ(served, 2);
  ASSERT_EQ(h2_stream(cl, 1)->status, 200);
  ASSERT_EQ(h2_stream(cl, 3)->status, 200);
  ASSERT_EQ(refused, 98);
#if defined(__SANITIZE_ADDRESS__)
  cbt_log("RSS bound not checked under AddressSanitizer");
#else
  ASSERT_LT(grown, 32 * 1024); /* two bodies of 2 MB, and what the connection itself needs */
#endif
  free(body);
  buf_free(&block);
  h2_free(cl);
  test_stop(srv);
}

/* The server-wide budget, 32 body limits: 20 connections each holding two 100 kB echoes with window 0; the
 * first 16 fill the budget (3.2 MB), the last 4 get 503. Freed budget is taken again. */
TEST_T(h2_echo_budget_per_server, 60000) {
  cb_server_t *srv = start_with(0, 100000, 0, 0);
  int port = cb_server_port(srv);
  static const char *const cl100k[] = {"content-length", "100000"};
  static char body[100000];
  h2cl_t *cls[20];
  buf_t block = {0};
  memset(body, 's', sizeof body);
  for (int c = 0; c < 20; c++) {
    h2cl_t *cl = cls[c] = h2_open(port);
    h2_handshake(cl);
    window_zero(cl);
    for (int32_t sid = 1; sid <= 3; sid += 2) {
      buf_reset(&block);
      h2_encode_request(cl, "POST", "/echo", cl100k, 1, &block);
      h2_stream(cl, sid);
      h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, sid, block.p, block.len);
      h2_send_body(cl, sid, body, sizeof body, 1);
    }
    streams_t two = {1, 2};
    ASSERT_EQ(h2_run(cl, all_answered, &two, 10000), CL_OK);
    int want = c < 16 ? 200 : 503;
    cbt_log("connection %d: %d %d", c, h2_stream(cl, 1)->status, h2_stream(cl, 3)->status);
    ASSERT_EQ(h2_stream(cl, 1)->status, want);
    ASSERT_EQ(h2_stream(cl, 3)->status, want);
  }
  /* A connection that goes (reset: a plain close is a half-close, whose blocked answers wait for the stall
   * timeout) gives its budget back. */
  struct linger lg = {1, 0};
  setsockopt(cls[0]->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  h2_free(cls[0]);
  sleep_ms(200);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "POST", "/echo", cl100k, 1, body, sizeof body);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, sizeof body);
  h2_free(cl);
  for (int c = 1; c < 20; c++) {
    setsockopt(cls[c]->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    h2_free(cls[c]);
  }
  buf_free(&block);
  test_stop(srv);
}

/* ---- memory given back ---- */

static int all_closed_conns(const cb_stats_t *st, const void *arg) {
  return st->conns_closed >= (uint64_t)(uintptr_t)arg && st->conns_open == 0;
}

/* After thousands of h2c connections closed, the allocator kept their memory (RSS stayed at 291 MB after
 * 9,500). A worker whose last connection has closed now returns free memory to the system within a second
 * (malloc_trim from its once-a-second timer). */
TEST_T(h2_memory_returned_after_connections, 60000) {
  enum { N = 1000 };
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 2 * N + 100 && rl.rlim_max >= 2 * N + 100) {
    rl.rlim_cur = 2 * N + 100;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  cb_server_t *srv = start_with(0, 0, 0, 0);
  int port = cb_server_port(srv);
  static h2cl_t *cls[N];
  for (int i = 0; i < 50; i++) h2_check_hello(port);
  sleep_ms(1200);
  long rss0 = vm_rss_kb();
  for (int i = 0; i < N; i++) {
    cls[i] = h2_open(port);
    h2_handshake(cls[i]);
    h2_wait1(cls[i], h2_request(cls[i], 1, "GET", "/file/tiny", NULL, 0, NULL, 0), 10000);
  }
  long rss1 = vm_rss_kb();
  struct linger lg = {1, 0};
  for (int i = 0; i < N; i++) {
    setsockopt(cls[i]->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    h2_free(cls[i]);
  }
  cb_stats_t st;
  wait_stats(srv, &st, all_closed_conns, (const void *)(uintptr_t)(N + 50), 10000);
  ASSERT_EQ(st.conns_open, 0);
  long rss2 = vm_rss_kb();
  sleep_ms(1500); /* the worker's once-a-second timer */
  long rss3 = vm_rss_kb();
  cbt_log("VmRSS %ld kB, with %d connections %ld kB, after they closed %ld kB, a second later %ld kB", rss0, N,
          rss1, rss2, rss3);
#if defined(__SANITIZE_ADDRESS__)
  cbt_log("RSS bound not checked under AddressSanitizer");
#else
  ASSERT_LT(rss3 - rss0, 32 * 1024); /* 158 MB stayed before */
#endif
  test_stop(srv);
}

/* Over HTTP/1.1 the echo buffer leaves from the output queue: its budget comes back once it is written, so
 * 100 echoes of 100 kB in a row (10 MB, the server's budget 3.2 MB here) are all served. */
TEST(wire_echo_budget_returned) {
  cb_server_t *srv = start_with(0, 100000, 0, 0);
  int fd = cl_connect(cb_server_port(srv));
  buf_t req = {0}, exp = {0};
  buf_adds(&req, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n");
  exp_head(&exp, 200, "application/octet-stream", NULL, 100000, CONN_NONE);
  for (int i = 0; i < 100000; i++) {
    char ch = (char)('a' + i % 26);
    buf_add(&req, &ch, 1);
    buf_add(&exp, &ch, 1);
  }
  for (int i = 0; i < 100; i++) ROUNDTRIP(fd, req.p, req.len, &exp);
  close(fd);
  buf_free(&req);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- the h2c-only listener (enable_h1 0, --no-h1) ---- */

/* h2spec 3.5/2: on a listener that serves only HTTP/2, anything but the client preface gets
 * GOAWAY(PROTOCOL_ERROR) and a close. (On the shared port the same bytes are an HTTP/1.1 request line: 400.) */
TEST(h2_only_listener) {
  cb_config_t cfg;
  cb_server_t *srv;
  test_config(&cfg);
  cfg.enable_h1 = 0;
  cfg.enable_h2 = 0;
  ASSERT_ERR(cb_server_start(&cfg, &srv), CB_EINVAL);
  cfg.enable_h2 = 1;
  srv = test_start(&cfg);
  int port = cb_server_port(srv);
  static const char *const bad[] = {"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
                                    "\x16\x03\x01\x00\xa5\x01\x00\x00"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    h2cl_t *cl = h2_open(port);
    cl_sends(cl->fd, bad[i]);
    ASSERT_EQ(h2_wait_goaway(cl, 5000), CL_OK);
    ASSERT_EQ(cl->goaway_code, NGHTTP2_PROTOCOL_ERROR);
    int rc = h2_wait_closed(cl, 5000);
    ASSERT(rc == CL_EOF || rc == CL_RESET);
    h2_free(cl);
  }
  h2_check_hello(port);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_HTTP1], 0);
  ASSERT_EQ(st.status_400, 0);
  test_stop(srv);
}
