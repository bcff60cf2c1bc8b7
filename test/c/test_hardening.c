/* Regression tests of the hardening issue over real sockets: each input here once crashed the engine, read
 * freed memory, smuggled a request or held a connection open without bound (docs/wire.md, "Bad input"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

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
