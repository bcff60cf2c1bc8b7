/* The wire contract without sockets (src/testing.h): request bytes in, exact response bytes out.
 *
 * Each case feeds its request in one read, then again split at every position into two reads (and byte by
 * byte), and expects the same output: the parser must not depend on how the bytes arrive. Every test ends with
 * cb__testconn_free() == 0, the clean-loop check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "testing.h"

#define D "date: " DATE_MASK "\r\n"
#define OCTET "content-type: application/octet-stream\r\n"

typedef struct {
  cb__testconn_t *tc;
  buf_t out;
  int closed;
} tconn_t;

static void sink(void *arg, const char *data, size_t len) {
  tconn_t *t = arg;
  if (len == 0) FAIL("sink called with 0 bytes");
  buf_add(&t->out, data, len);
}

/* The fixture files live in one directory shared by every test process (the engine reuses files of the right
 * size there), so that a test connection does not write 5 MB each time it is made. */
static const char *fixture_dir(void) {
  static char dir[512];
  const char *env = getenv("CBT_FIXTURE_DIR"), *tmp = getenv("TMPDIR");
  if (env && *env) return env;
  snprintf(dir, sizeof dir, "%s/cbench-test-fixtures", tmp && *tmp ? tmp : "/tmp");
  return dir;
}

static void tc_config(cb_config_t *cfg) {
  cb_config_init(cfg);
  cfg->fixture_dir = fixture_dir();
  cfg->max_header_bytes = 1024;
  cfg->max_body_bytes = 1000;
  cfg->header_timeout_ms = 100;
  cfg->idle_timeout_ms = 150;
}

static void tc_open(tconn_t *t, const cb_config_t *cfg) {
  cb_config_t def;
  memset(t, 0, sizeof *t);
  if (cfg == NULL) {
    tc_config(&def);
    cfg = &def;
  }
  t->tc = cb__testconn_new(cfg, sink, t);
  ASSERT_NOT_NULL(t->tc);
}

static void tc_feed(tconn_t *t, const char *data, size_t len) {
  int r = cb__testconn_feed(t->tc, data, len);
  ASSERT(r == 0 || r == 1);
  if (t->closed) ASSERT_EQ(r, 1); /* once closed, stays closed */
  t->closed = r;
}

static void tc_feeds(tconn_t *t, const char *s) { tc_feed(t, s, strlen(s)); }

/* Runs the loop without blocking until the output holds `want` bytes or 5 s pass (for /delay answers). */
static void tc_run_until(tconn_t *t, size_t want) {
  uint64_t deadline = now_ms() + 5000;
  while (t->out.len < want && now_ms() < deadline) {
    t->closed = cb__testconn_run(t->tc, 0);
    if (t->out.len < want) sleep_ms(1);
  }
}

/* Runs the loop without blocking until the server closes the connection or `ms` pass (for the timeouts). */
static void tc_run_until_closed(tconn_t *t, int ms) {
  uint64_t deadline = now_ms() + (uint64_t)ms;
  while (!t->closed && now_ms() < deadline) {
    t->closed = cb__testconn_run(t->tc, 0);
    if (!t->closed) sleep_ms(1);
  }
}

static void tc_close(tconn_t *t) {
  ASSERT_ERR(cb__testconn_free(t->tc), 0);
  buf_free(&t->out);
}

/* closed: 1 the server closed after answering, 0 it keeps the connection. */
typedef struct {
  const char *name;
  const char *req;
  const char *exp;
  int closed;
} pcase_t;

static const pcase_t cases[] = {
    {"root", "GET / HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-length: 12\r\n\r\nhello world!", 0},
    {"hello", "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/plain\r\ncontent-length: 11\r\n\r\nHello, Joe!", 0},
    {"json", "GET /json HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: 25\r\n\r\n"
     "{\"message\":\"Hello, Joe!\"}",
     0},
    {"head hello", "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/plain\r\ncontent-length: 11\r\n\r\n", 0},
    {"head file big", "HEAD /file/big HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D OCTET "content-length: 5242880\r\n\r\n", 0},
    {"stream", "GET /stream HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
     "7\r\nhello, \r\n4\r\nJoe!\r\n0\r\n\r\n",
     0},
    {"head stream", "HEAD /stream HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n", 0},
    {"head sse", "HEAD /sse/big HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/event-stream\r\ncache-control: no-cache\r\n"
     "transfer-encoding: chunked\r\n\r\n",
     0},
    {"status 200", "GET /status/200 HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 200 OK\r\n" D "content-length: 0\r\n\r\n", 0},
    {"status 204", "GET /status/204 HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 204 No Content\r\n" D "\r\n", 0},
    {"status 304", "GET /status/304 HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 304 Not Modified\r\n" D "\r\n", 0},
    {"status 299", "GET /status/299 HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 299 Unknown\r\n" D "content-length: 0\r\n\r\n", 0},
    {"status 413", "GET /status/413 HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 413 Content Too Large\r\n" D "content-length: 0\r\n\r\n", 0},
    {"status 599 head", "HEAD /status/599 HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 599 Unknown\r\n" D "content-length: 0\r\n\r\n", 0},
    {"status bad", "GET /status/600 HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\n\r\n",
     0},
    {"delay bad", "GET /delay/60001 HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\n\r\n", 0},
    {"not found", "GET /nope HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 404 Not Found\r\n" D "content-length: 0\r\n\r\n", 0},
    {"not found post", "POST /nope HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc",
     "HTTP/1.1 404 Not Found\r\n" D "content-length: 0\r\n\r\n", 0},
    {"405 get route", "DELETE /hello HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 405 Method Not Allowed\r\n" D "allow: GET, HEAD\r\ncontent-length: 0\r\n\r\n", 0},
    {"405 echo", "GET /echo HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 405 Method Not Allowed\r\n" D "allow: POST\r\ncontent-length: 0\r\n\r\n", 0},
    {"405 echo chunked head", "HEAD /echo/chunked HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 405 Method Not Allowed\r\n" D "allow: POST\r\ncontent-length: 0\r\n\r\n", 0},
    {"echo", "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nabcd",
     "HTTP/1.1 200 OK\r\n" D OCTET "content-length: 4\r\n\r\nabcd", 0},
    {"echo chunked request", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D OCTET "content-length: 3\r\n\r\nabc", 0},
    {"echo chunked empty", "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D OCTET "transfer-encoding: chunked\r\n\r\n0\r\n\r\n", 0},
    {"headers", "GET /headers HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nX-Esc: \"\\\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: 40\r\n\r\n"
     "{\"host\":\"a\",\"x-a\":\"1, 2\",\"x-esc\":\"\\\"\\\\\"}",
     0},
    /* The handler reads the headers once the body is complete: in a later read when the input is split. */
    {"headers with a body", "GET /headers HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Long: 0123456789abcdef\r\n\r\nabcde",
     "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: 61\r\n\r\n"
     "{\"host\":\"a\",\"content-length\":\"5\",\"x-long\":\"0123456789abcdef\"}",
     0},
    {"http/1.0", "GET /hello HTTP/1.0\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/plain\r\ncontent-length: 11\r\nconnection: close\r\n\r\nHello, Joe!", 1},
    {"http/1.0 keep-alive", "GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-type: text/plain\r\ncontent-length: 11\r\nconnection: keep-alive\r\n\r\n"
     "Hello, Joe!",
     0},
    {"connection close", "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-length: 12\r\nconnection: close\r\n\r\nhello world!", 1},
    {"404 connection close", "GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
     "HTTP/1.1 404 Not Found\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"pipelined", "GET / HTTP/1.1\r\nhost: x\r\n\r\nHEAD /json HTTP/1.1\r\nhost: x\r\n\r\nGET /status/204 HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-length: 12\r\n\r\nhello world!"
     "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: 25\r\n\r\n"
     "HTTP/1.1 204 No Content\r\n" D "\r\n",
     0},
    {"expect", "POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\nhi",
     "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n" D OCTET "content-length: 2\r\n\r\nhi", 0},
    {"expect over limit", "POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 1001\r\n\r\n",
     "HTTP/1.1 413 Content Too Large\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"413 declared", "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n",
     "HTTP/1.1 413 Content Too Large\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 garbage", "HELLO\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 header", "GET / HTTP/1.1\r\nhost: x\r\nbad\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 chunk size", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nxyz\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 cl and te", "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 after good", "GET / HTTP/1.1\r\nhost: x\r\n\r\n\x01\x02\x03\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-length: 12\r\n\r\nhello world!"
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n",
     1},
    {"nothing after close", "GET / HTTP/1.0\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D "content-length: 12\r\nconnection: close\r\n\r\nhello world!", 1},
    /* Chunk extensions: several per chunk, token and quoted values (llhttp 8.1 needed help with `;` after a
     * token value, see on_ext_value_complete); then malformed ones. */
    {"chunk extensions", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
     "2;a=b;c=d\r\nab\r\n1;e=\"f;g\";h;i=j\r\nc\r\n0;k=l;m\r\n\r\n",
     "HTTP/1.1 200 OK\r\n" D OCTET "content-length: 3\r\n\r\nabc", 0},
    {"400 chunk ext empty value", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
     "2;a=\r\nab\r\n0\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 chunk ext trailing semicolon", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
     "2;a=b;\r\nab\r\n0\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    /* The CRLF after chunk data is checked: two other bytes there once smuggled what followed. */
    {"400 chunk terminator", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
     "2\r\nabcd0\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 chunk terminator smuggling", "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
     "3\r\nabcXX0\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 target control byte", "GET /he\x01llo HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 target tab", "GET /he\tllo HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
    {"400 target non-ascii", "GET /caf\xc3\xa9 HTTP/1.1\r\nhost: x\r\n\r\n",
     "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n", 1},
};

/* Feeds `req` in pieces split at `cuts` (sorted offsets, ncuts of them) and checks the output and the state. */
static void run_case(const pcase_t *c, const size_t *cuts, size_t ncuts) {
  tconn_t t;
  size_t len = strlen(c->req), exp_len = strlen(c->exp), pos = 0, i;
  tc_open(&t, NULL);
  for (i = 0; i <= ncuts; i++) {
    size_t end = i < ncuts ? cuts[i] : len;
    if (end > pos) tc_feed(&t, c->req + pos, end - pos);
    pos = end;
  }
  mask_dates(t.out.p, t.out.len);
  if (t.out.len != exp_len || memcmp(t.out.p, c->exp, exp_len) != 0 || t.closed != c->closed) {
    cbt_log("case \"%s\", %zu cuts, first at %zu", c->name, ncuts, ncuts ? cuts[0] : 0);
    ASSERT_MEM_EQ(t.out.p, t.out.len, c->exp, exp_len);
    ASSERT_EQ(t.closed, c->closed);
  }
  tc_close(&t);
}

/* The case whole, split in two at every offset, and byte by byte. */
static void run_case_cuts(const pcase_t *c) {
  size_t k, len = strlen(c->req), cuts[4096];
  run_case(c, NULL, 0);
  for (k = 1; k < len; k++) {
    cuts[0] = k;
    run_case(c, cuts, 1);
  }
  if (len <= sizeof cuts / sizeof cuts[0]) {
    for (k = 0; k + 1 < len; k++) cuts[k] = k + 1;
    run_case(c, cuts, len - 1);
  }
}

TEST_T(proto_table, 120000) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case_cuts(&cases[i]);
}

/* A head past the inline buffers of the HTTP/1.1 state (512 bytes, 16 headers), split at every offset: the
 * pieces seen so far are copied out of each read (the test connection scribbles over its input once fed). */
TEST_T(proto_big_head_split, 60000) {
  buf_t req = {0}, json = {0}, exp = {0};
  buf_adds(&req, "GET /headers?x=1 HTTP/1.1\r\nHost: big\r\n");
  buf_adds(&json, "{\"host\":\"big\"");
  for (int i = 0; i < 20; i++) {
    buf_addf(&req, "X-H%02d: value-%02d-abcdefghijklmnopqrstu\r\n", i, i);
    buf_addf(&json, ",\"x-h%02d\":\"value-%02d-abcdefghijklmnopqrstu\"", i, i);
  }
  buf_adds(&req, "\r\n");
  buf_adds(&json, "}");
  buf_addf(&exp, "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: %zu\r\n\r\n", json.len);
  buf_add(&exp, json.p, json.len);
  buf_add(&req, "", 1);
  buf_add(&exp, "", 1);
  ASSERT_GT(req.len, 600);
  pcase_t c = {"big head", req.p, exp.p, 0};
  run_case_cuts(&c);
  buf_free(&req);
  buf_free(&json);
  buf_free(&exp);
}

/* Feeds `METHOD PATH` and compares with the route table's expectation (delays run the loop). */
static void route_case(tconn_t *t, const char *method, const char *path) {
  buf_t req = {0}, exp = {0};
  size_t before = t->out.len;
  buf_addf(&req, "%s %s HTTP/1.1\r\nhost: x\r\n\r\n", method, path);
  ASSERT_EQ(exp_route(&exp, method, path, CONN_NONE), 0);
  tc_feed(t, req.p, req.len);
  tc_run_until(t, before + exp.len);
  mask_dates(t->out.p + before, t->out.len - before);
  if (t->out.len - before != exp.len || memcmp(t->out.p + before, exp.p, exp.len) != 0) {
    cbt_log("%s %s", method, path);
    ASSERT_MEM_EQ(t->out.p + before, t->out.len - before, exp.p, exp.len);
  }
  ASSERT_EQ(t->closed, 0);
  buf_free(&req);
  buf_free(&exp);
}

TEST_T(proto_route_table, 60000) {
  tconn_t t;
  size_t i;
  char path[32];
  int code;
  tc_open(&t, NULL);
  for (i = 0; i < n_ok_paths; i++) {
    route_case(&t, "GET", ok_paths[i]);
    route_case(&t, "HEAD", ok_paths[i]);
  }
  for (i = 0; i < n_not_found_paths; i++) {
    route_case(&t, "GET", not_found_paths[i]);
    route_case(&t, "PUT", not_found_paths[i]);
  }
  for (i = 0; i < n_bad_param_paths; i++) route_case(&t, "GET", bad_param_paths[i]);
  for (code = 200; code <= 599; code++) {
    snprintf(path, sizeof path, "/status/%d", code);
    route_case(&t, code % 2 ? "HEAD" : "GET", path);
  }
  tc_close(&t);
}

TEST(proto_echo_chunked_pieces) {
  tconn_t t;
  buf_t exp = {0};
  tc_open(&t, NULL);
  /* One chunk per piece read, whatever the request's own chunking. */
  tc_feeds(&t, "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc");
  tc_feeds(&t, "defg");
  tc_feeds(&t, "hij");
  buf_adds(&exp, "HTTP/1.1 200 OK\r\n" D OCTET "transfer-encoding: chunked\r\n\r\n"
                 "3\r\nabc\r\n4\r\ndefg\r\n3\r\nhij\r\n0\r\n\r\n");
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  buf_reset(&t.out);
  buf_reset(&exp);
  tc_feeds(&t, "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel");
  tc_feeds(&t, "lo\r\n6\r\n world\r\n");
  tc_feeds(&t, "0\r\n\r\n");
  buf_adds(&exp, "HTTP/1.1 200 OK\r\n" D OCTET "transfer-encoding: chunked\r\n\r\n"
                 "3\r\nhel\r\n2\r\nlo\r\n6\r\n world\r\n0\r\n\r\n");
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  ASSERT_EQ(t.closed, 0);
  buf_free(&exp);
  tc_close(&t);
}

TEST(proto_files_and_streams) {
  tconn_t t;
  buf_t exp = {0};
  static const char *const paths[] = {"/file/tiny", "/file/small", "/file/big", "/stream/small",
                                      "/stream/big", "/sse",       "/sse/small", "/sse/big"};
  size_t i;
  tc_open(&t, NULL);
  for (i = 0; i < sizeof paths / sizeof paths[0]; i++) route_case(&t, "GET", paths[i]);
  /* Pipelined after one another, in order. */
  buf_reset(&t.out);
  for (i = 0; i < sizeof paths / sizeof paths[0]; i++) exp_route(&exp, "GET", paths[i], CONN_NONE);
  {
    buf_t req = {0};
    for (i = 0; i < sizeof paths / sizeof paths[0]; i++) buf_addf(&req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", paths[i]);
    tc_feed(&t, req.p, req.len);
    buf_free(&req);
  }
  tc_run_until(&t, exp.len);
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  buf_free(&exp);
  tc_close(&t);
}

TEST(proto_pipelined_delay_in_order) {
  tconn_t t;
  buf_t exp = {0};
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\nGET /delay/30 HTTP/1.1\r\nhost: x\r\n\r\nGET /json HTTP/1.1\r\nhost: x\r\n\r\n");
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  exp_route(&exp, "GET", "/delay/30", CONN_NONE);
  exp_route(&exp, "GET", "/json", CONN_NONE);
  tc_run_until(&t, exp.len);
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  buf_free(&exp);
  tc_close(&t);
}

/* RFC 9110 5.1: a field name is a token. Every byte value at the start, inside and at the end of a name (a
 * plain one, and names llhttp reads apart: content-length, connection), in the head and in the trailers: a
 * token character is served, anything else is a 400 and a close. */
TEST_T(proto_header_name_bytes, 60000) {
  static const char *const names[] = {"X-A", "Content-Length", "connection", "Upgrade"};
  static const char tchars[] = "!#$%&'*+-.^_`|~";
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    size_t len = strlen(names[k]);
    for (size_t pos = 0; pos <= len; pos += len > 4 ? 3 : 1) {
      for (int b = 1; b < 256; b++) {
        if (b == ':' || b == '\r' || b == '\n') continue; /* they end the name, or the line */
        int token = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || strchr(tchars, b);
        for (int trailer = 0; trailer < 2; trailer++) {
          char name[64];
          buf_t req = {0};
          memcpy(name, names[k], pos);
          name[pos] = (char)b;
          memcpy(name + pos + 1, names[k] + pos, len - pos);
          name[len + 1] = '\0';
          if (trailer)
            buf_adds(&req, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n");
          else
            buf_adds(&req, "GET /hello HTTP/1.1\r\nhost: x\r\n");
          buf_add(&req, name, len + 1);
          buf_adds(&req, ": 0\r\n\r\n");
          tconn_t t;
          tc_open(&t, NULL);
          tc_feed(&t, req.p, req.len);
          mask_dates(t.out.p, t.out.len);
          if (!token) {
            static const char bad[] = "HTTP/1.1 400 Bad Request\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n";
            if (t.out.len != sizeof bad - 1 || memcmp(t.out.p, bad, sizeof bad - 1) != 0)
              cbt_log("byte %d in \"%s\" at %zu%s", b, names[k], pos, trailer ? " (trailer)" : "");
            ASSERT_MEM_EQ(t.out.p, t.out.len, bad, sizeof bad - 1);
            ASSERT_EQ(t.closed, 1);
          } else {
            if (t.out.len < 17 || memcmp(t.out.p, "HTTP/1.1 200 OK\r\n", 17) != 0)
              cbt_log("byte %d in \"%s\" at %zu%s", b, names[k], pos, trailer ? " (trailer)" : "");
            ASSERT_MEM_EQ(t.out.p, 17, "HTTP/1.1 200 OK\r\n", (size_t)17);
          }
          tc_close(&t);
          buf_free(&req);
        }
      }
    }
  }
}

/* A request parsed from held input (behind one answered later) and one answered later itself keep their heads
 * after the read they came in is gone. */
TEST(proto_held_heads) {
  tconn_t t;
  buf_t exp = {0};
  static const char json[] = "{\"host\":\"held\",\"x-b\":\"2\"}";
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /delay/20 HTTP/1.1\r\nhost: x\r\n\r\nGET /headers HTTP/1.1\r\nhost: held\r\nX-B: 2\r\n\r\nGET /del");
  tc_feeds(&t, "ay/10 HTTP/1.1\r\nhost: y\r\n\r\nGET /headers HTTP/1.1\r\nhost: held\r\nX-B: 2\r\n\r\n");
  exp_route(&exp, "GET", "/delay/20", CONN_NONE);
  buf_addf(&exp, "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
           sizeof json - 1, json);
  exp_route(&exp, "GET", "/delay/10", CONN_NONE);
  buf_addf(&exp, "HTTP/1.1 200 OK\r\n" D "content-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
           sizeof json - 1, json);
  tc_run_until(&t, exp.len);
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  buf_free(&exp);
  tc_close(&t);
}

/* Between requests a connection's first request leaves nothing held; a keep-alive connection that goes on
 * keeps its HTTP/1.1 state and output storage from one request to the next, and gives both back once idle for
 * CB__REST_MS (the rest step). */
TEST_T(proto_rest_between_requests, 30000) {
  tconn_t t;
  cb_config_t cfg;
  buf_t exp = {0};
  tc_config(&cfg);
  cfg.idle_timeout_ms = 5000; /* past the rest step */
  tc_open(&t, &cfg);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  ASSERT_EQ(t.out.len, exp.len);
  ASSERT_EQ(cb__testconn_holds(t.tc), 0);
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  ASSERT_EQ(t.out.len, 3 * exp.len);
  ASSERT_EQ(cb__testconn_holds(t.tc), 3);
  uint64_t deadline = now_ms() + 10000;
  while (cb__testconn_holds(t.tc) != 0 && now_ms() < deadline) {
    t.closed = cb__testconn_run(t.tc, 0);
    sleep_ms(5);
  }
  ASSERT_EQ(cb__testconn_holds(t.tc), 0);
  ASSERT_EQ(t.closed, 0);
  /* And it serves again, byte for byte. */
  buf_reset(&t.out);
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  buf_free(&exp);
  tc_close(&t);
}

TEST(proto_run_until_idle_fires_delay) {
  tconn_t t;
  buf_t exp = {0};
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /delay/20 HTTP/1.1\r\nhost: x\r\n\r\n");
  ASSERT_EQ(t.out.len, 0);
  t.closed = cb__testconn_run(t.tc, 1);
  exp_route(&exp, "GET", "/delay/20", CONN_NONE);
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, exp.p, exp.len);
  buf_free(&exp);
  tc_close(&t);
}

static const char e431[] = "HTTP/1.1 431 Request Header Fields Too Large\r\n" D
                           "content-length: 0\r\nconnection: close\r\n\r\n";

/* The output so far (dates masked) is a 431, and the connection is closed. */
static void expect_431_closed(tconn_t *t) {
  mask_dates(t->out.p, t->out.len);
  ASSERT_MEM_EQ(t->out.p, t->out.len, e431, sizeof e431 - 1);
  ASSERT_EQ(t->closed, 1);
}

/* The head's budget to the byte: max_header_bytes less 14 (the request line's method, version and line ends)
 * for the target plus, for each header, its name, its value and 4 (": " and CRLF); past it, 431. The same
 * whole or a byte a read (names and values split across reads). A trailer section has max_header_bytes of its
 * own, counted the same way. */
TEST(proto_head_budget_exact) {
  cb_config_t cfg;
  tc_config(&cfg);
  cfg.max_header_bytes = 64;
  buf_t ok = {0};
  exp_route(&ok, "GET", "/hello", CONN_NONE);
  for (int bytewise = 0; bytewise < 2; bytewise++) {
    for (int v = 29; v <= 31; v++) { /* 64 - 14 = 50 = 6 (/hello) + 9 (host: x) + 5 (x: ) + 30 */
      tconn_t t;
      buf_t req = {0};
      buf_adds(&req, "GET /hello HTTP/1.1\r\nhost: x\r\nx: ");
      for (int i = 0; i < v; i++) buf_adds(&req, "v");
      buf_adds(&req, "\r\n\r\n");
      tc_open(&t, &cfg);
      if (bytewise)
        for (size_t i = 0; i < req.len && !t.closed; i++) tc_feed(&t, req.p + i, 1);
      else
        tc_feed(&t, req.p, req.len);
      if (v <= 30) {
        mask_dates(t.out.p, t.out.len);
        ASSERT_MEM_EQ(t.out.p, t.out.len, ok.p, ok.len);
        ASSERT_EQ(t.closed, 0);
      } else {
        expect_431_closed(&t);
      }
      tc_close(&t);
      buf_free(&req);
    }
  }
  /* Trailers: 1 (t) + 4 + 59 = 64 is the most. */
  for (int v = 59; v <= 60; v++) {
    tconn_t t;
    buf_t req = {0};
    buf_adds(&req, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nt: ");
    for (int i = 0; i < v; i++) buf_adds(&req, "w");
    buf_adds(&req, "\r\n\r\n");
    tc_open(&t, &cfg);
    tc_feed(&t, req.p, req.len);
    if (v == 59) {
      static const char head200[] = "HTTP/1.1 200 OK\r\n";
      ASSERT(t.out.len > sizeof head200 - 1);
      ASSERT_MEM_EQ(t.out.p, sizeof head200 - 1, head200, sizeof head200 - 1);
      ASSERT(t.out.len >= 2 && memcmp(t.out.p + t.out.len - 2, "hi", 2) == 0);
      ASSERT_EQ(t.closed, 0);
    } else {
      expect_431_closed(&t);
    }
    tc_close(&t);
    buf_free(&req);
  }
  buf_free(&ok);
}

TEST(proto_limits) {
  tconn_t t;
  buf_t req = {0};
  static const char e413[] = "HTTP/1.1 413 Content Too Large\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n";
  /* 431 */
  tc_open(&t, NULL);
  buf_adds(&req, "GET / HTTP/1.1\r\nhost: x\r\nx: ");
  while (req.len < 1100) buf_adds(&req, "v");
  buf_adds(&req, "\r\n\r\n");
  tc_feed(&t, req.p, req.len);
  expect_431_closed(&t);
  tc_feeds(&t, "GET / HTTP/1.1\r\nhost: x\r\n\r\n"); /* ignored */
  ASSERT_EQ(t.out.len, sizeof e431 - 1);
  tc_close(&t);
  /* 431 for a head that is fed slowly and never ends. */
  tc_open(&t, NULL);
  tc_feeds(&t, "GET / HTTP/1.1\r\nhost: x\r\n");
  for (int i = 0; i < 200 && !t.closed; i++) tc_feeds(&t, "x-header: 0123456789\r\n");
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, e431, sizeof e431 - 1);
  tc_close(&t);
  /* 413 received in chunks */
  tc_open(&t, NULL);
  buf_reset(&req);
  buf_adds(&req, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n");
  tc_feed(&t, req.p, req.len);
  for (int i = 0; i < 20 && !t.closed; i++) {
    buf_reset(&req);
    buf_adds(&req, "64\r\n");
    for (int k = 0; k < 100; k++) buf_adds(&req, "c");
    buf_adds(&req, "\r\n");
    tc_feed(&t, req.p, req.len);
  }
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, e413, sizeof e413 - 1);
  ASSERT_EQ(t.closed, 1);
  tc_close(&t);
  /* 413 received with /echo/chunked: the head and the pieces under the limit may have gone out already, but
   * the answer ends there. */
  tc_open(&t, NULL);
  tc_feeds(&t, "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n");
  for (int i = 0; i < 20 && !t.closed; i++) tc_feeds(&t, "100\r\n0123456789abcdef0123456789abcdef0123456789abcdef"
                                                         "0123456789abcdef0123456789abcdef0123456789abcdef"
                                                         "0123456789abcdef0123456789abcdef0123456789abcdef"
                                                         "0123456789abcdef0123456789abcdef0123456789abcdef"
                                                         "0123456789abcdef0123456789abcdef0123456789abcdef"
                                                         "0123456789abcdef\r\n");
  ASSERT_EQ(t.closed, 1);
  tc_close(&t);
  buf_free(&req);
}

TEST(proto_timeouts) {
  tconn_t t;
  static const char e408[] = "HTTP/1.1 408 Request Timeout\r\n" D "content-length: 0\r\nconnection: close\r\n\r\n";
  /* Part of a head: 408. */
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n");
  tc_run_until_closed(&t, 3000);
  mask_dates(t.out.p, t.out.len);
  ASSERT_MEM_EQ(t.out.p, t.out.len, e408, sizeof e408 - 1);
  ASSERT_EQ(t.closed, 1);
  tc_close(&t);
  /* Nothing: a silent close. */
  tc_open(&t, NULL);
  tc_run_until_closed(&t, 3000);
  ASSERT_EQ(t.out.len, 0);
  ASSERT_EQ(t.closed, 1);
  tc_close(&t);
  /* Idle after an exchange: a silent close. */
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /status/200 HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_reset(&t.out);
  tc_run_until_closed(&t, 3000);
  ASSERT_EQ(t.out.len, 0);
  ASSERT_EQ(t.closed, 1);
  {
    cb_stats_t st;
    cb__testconn_stats(t.tc, &st);
    ASSERT_EQ(st.timeouts, 1);
  }
  tc_close(&t);
}

TEST(proto_eof) {
  tconn_t t;
  /* EOF after a complete request: the answer still goes out. */
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  t.closed = cb__testconn_eof(t.tc);
  ASSERT_EQ(t.closed, 1);
  ASSERT_GT(t.out.len, 0);
  tc_close(&t);
  /* EOF mid-head, mid-body, while a delay is pending: closed, nothing sent. */
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /hel");
  ASSERT_EQ(cb__testconn_eof(t.tc), 1);
  ASSERT_EQ(t.out.len, 0);
  tc_close(&t);
  tc_open(&t, NULL);
  tc_feeds(&t, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc");
  ASSERT_EQ(cb__testconn_eof(t.tc), 1);
  ASSERT_EQ(t.out.len, 0);
  tc_close(&t);
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /delay/50 HTTP/1.1\r\nhost: x\r\n\r\n");
  cb__testconn_eof(t.tc);
  tc_close(&t);
  /* Freed with work pending (a stream half-way, a delay): no leak, clean loop. */
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /delay/10000 HTTP/1.1\r\nhost: x\r\n\r\n");
  tc_close(&t);
}

TEST(proto_stats) {
  tconn_t t;
  cb_stats_t st;
  size_t in = 0;
  static const char *const reqs[] = {"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", "GET /nope HTTP/1.1\r\nhost: x\r\n\r\n",
                                     "POST /json HTTP/1.1\r\nhost: x\r\n\r\n", "GET /file/tiny HTTP/1.1\r\nhost: x\r\n\r\n",
                                     "GET /status/500 HTTP/1.1\r\nhost: x\r\n\r\n"};
  size_t i;
  tc_open(&t, NULL);
  for (i = 0; i < 5; i++) {
    tc_feeds(&t, reqs[i]);
    in += strlen(reqs[i]);
  }
  cb__testconn_stats(t.tc, &st);
  ASSERT_EQ(st.requests, 5);
  ASSERT_EQ(cb__testconn_route_count(t.tc, "hello"), 1);
  ASSERT_EQ(cb__testconn_route_count(t.tc, "not_found"), 1);
  ASSERT_EQ(cb__testconn_route_count(t.tc, "file_tiny"), 1);
  ASSERT_EQ(cb__testconn_route_count(t.tc, "status"), 1);
  ASSERT_EQ(st.status_404, 1);
  ASSERT_EQ(st.status_405, 1);
  ASSERT_EQ(st.bytes_read, in);
  ASSERT_EQ(st.bytes_written, t.out.len);
  tc_close(&t);
}

TEST(proto_stats_route_400) {
  /* One route-level 400 answer is one status_400, one request, on the route it reached. */
  tconn_t t;
  cb_stats_t st;
  tc_open(&t, NULL);
  tc_feeds(&t, "GET /status/abc HTTP/1.1\r\nhost: x\r\n\r\nGET /delay/x HTTP/1.1\r\nhost: x\r\n\r\n");
  cb__testconn_stats(t.tc, &st);
  ASSERT_EQ(st.status_400, 2);
  ASSERT_EQ(st.requests, 2);
  ASSERT_EQ(cb__testconn_route_count(t.tc, "status"), 1);
  ASSERT_EQ(cb__testconn_route_count(t.tc, "delay"), 1);
  tc_close(&t);
}
