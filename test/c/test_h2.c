/* HTTP/2 over cleartext (issue 3) over real sockets, with the raw frame client of h2client.c: every route of
 * docs/wire.md byte for byte (prior knowledge and Upgrade: h2c), many streams on one connection, protocol
 * errors from hand-made frames (each answered as RFC 9113 says, and the server still serving afterwards),
 * limits, a client that never reads, graceful stop, the idle timeout and the per-protocol stats.
 *
 * Where RFC 9113 leaves the server a choice (a stream error may be raised as a connection error, 5.4.1), the
 * tests accept every allowed answer and log which one came. See docs/h2-tests.md. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"

static cb_server_t *start_with(unsigned max_streams, size_t max_header, size_t max_body, unsigned idle_ms) {
  cb_config_t cfg;
  test_config(&cfg);
  if (max_streams) cfg.h2_max_concurrent_streams = max_streams;
  if (max_header) cfg.max_header_bytes = max_header;
  if (max_body) cfg.max_body_bytes = max_body;
  if (idle_ms) cfg.idle_timeout_ms = idle_ms;
  return test_start(&cfg);
}

static cb_server_t *start_default(void) { return start_with(0, 0, 0, 0); }

/* The expected HTTP/2 answer of a fixed status with an empty body and content-length 0 (413, 431). */
static void exp_empty(buf_t *head, int status) {
  buf_addf(head, ":status: %d\r\ndate: " DATE_MASK "\r\ncontent-length: 0\r\n", status);
}

/* GET or HEAD of a route on stream sid, answered exactly as exp_route() says. */
static void route_check(h2cl_t *cl, int32_t sid, const char *method, const char *path) {
  h2resp_t *r = h2_request(cl, sid, method, path, NULL, 0, NULL, 0);
  h2_wait1(cl, r, 20000);
  h2_assert_route(r, method, path);
}

/* ---- the route table ---- */

TEST_T(h2_routes_get_and_head, 60000) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  int32_t sid = 1;
  h2_handshake(cl);
  ASSERT_EQ(cl->srv_max_streams, 128);
  ASSERT_EQ(cl->srv_initial_window, 1 << 20);
  ASSERT_EQ(cl->srv_max_header_list, 16384);
  ASSERT_EQ(cl->srv_no_rfc7540_priorities, 1); /* no RFC 7540 priority tree (RFC 9113 5.3.2) */
  /* One connection for all: a stream that ended early or late would show in the next one. */
  for (size_t i = 0; i < n_ok_paths; i++) {
    cbt_log("GET and HEAD %s", ok_paths[i]);
    route_check(cl, sid, "GET", ok_paths[i]);
    route_check(cl, sid + 2, "HEAD", ok_paths[i]);
    sid += 4;
  }
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);
  test_stop(srv);
}

TEST(h2_not_found_not_allowed_bad_params) {
  static const char *const allowed_get[] = {"/", "/hello", "/json", "/file/tiny", "/stream", "/sse/small",
                                            "/delay/1", "/status/200", "/headers"};
  static const char *const other_methods[] = {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"};
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  int32_t sid = 1;
  h2_handshake(cl);
  for (size_t i = 0; i < n_not_found_paths; i++) {
    route_check(cl, sid, "GET", not_found_paths[i]);
    route_check(cl, sid + 2, "POST", not_found_paths[i]);
    sid += 4;
  }
  /* 405 with allow: GET, HEAD, and allow: POST for the echo routes. */
  for (size_t i = 0; i < sizeof allowed_get / sizeof allowed_get[0]; i++)
    for (size_t k = 0; k < sizeof other_methods / sizeof other_methods[0]; k++, sid += 2)
      route_check(cl, sid, other_methods[k], allowed_get[i]);
  route_check(cl, sid, "GET", "/echo");
  route_check(cl, sid + 2, "HEAD", "/echo/chunked");
  route_check(cl, sid + 4, "PUT", "/echo");
  sid += 6;
  /* /delay/ and /status/ with a bad parameter: 400, and the connection goes on. */
  for (size_t i = 0; i < n_bad_param_paths; i++) {
    route_check(cl, sid, "GET", bad_param_paths[i]);
    route_check(cl, sid + 2, "HEAD", bad_param_paths[i]);
    sid += 4;
  }
  route_check(cl, sid, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);
  test_stop(srv);
}

static void exp_echo(buf_t *head, size_t len, int chunked) {
  buf_adds(head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/octet-stream\r\n");
  if (!chunked) buf_addf(head, "content-length: %zu\r\n", len);
}

typedef struct {
  const h2resp_t *r;
  size_t want;
} body_wait_t;

static int body_at_least(h2cl_t *cl, const void *arg) {
  const body_wait_t *bw = arg;
  (void)cl;
  return bw->r->body.len >= bw->want || bw->r->rst != H2_NO_RST;
}

TEST_T(h2_echo, 40000) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t head = {0}, body = {0};
  h2resp_t *r;
  h2_handshake(cl);

  /* A small body, with and without content-length. */
  r = h2_request(cl, 1, "POST", "/echo", NULL, 0, "hello", 5);
  h2_wait1(cl, r, 10000);
  exp_echo(&head, 5, 0);
  buf_adds(&body, "hello");
  h2_assert_resp(r, &head, &body, "POST /echo hello");
  static const char *const cl5[] = {"content-length", "5"};
  r = h2_request(cl, 3, "POST", "/echo", cl5, 1, "hello", 5);
  h2_wait1(cl, r, 10000);
  h2_assert_resp(r, &head, &body, "POST /echo hello with content-length");

  /* No body at all (HEADERS with END_STREAM), and an empty DATA frame. */
  buf_reset(&head);
  buf_reset(&body);
  exp_echo(&head, 0, 0);
  r = h2_request(cl, 5, "POST", "/echo", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  h2_assert_resp(r, &head, &body, "POST /echo without a body");
  r = h2_request(cl, 7, "POST", "/echo", NULL, 0, "", 0);
  h2_wait1(cl, r, 10000);
  h2_assert_resp(r, &head, &body, "POST /echo with an empty DATA frame");

  /* 300 KB in 16 KiB frames (and so over several WINDOW_UPDATEs of the connection). */
  buf_reset(&head);
  buf_reset(&body);
  exp_file_bytes(&body, 300000);
  exp_echo(&head, body.len, 0);
  r = h2_request(cl, 9, "POST", "/echo", NULL, 0, body.p, body.len);
  h2_wait1(cl, r, 20000);
  h2_assert_resp(r, &head, &body, "POST /echo 300000 bytes");

  /* /echo/chunked answers each piece before the next one is sent. */
  buf_reset(&head);
  buf_reset(&body);
  exp_echo(&head, 0, 1);
  r = h2_request(cl, 11, "POST", "/echo/chunked", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  h2_assert_resp(r, &head, &body, "POST /echo/chunked without a body");
  {
    buf_t block = {0};
    static const char *const pieces[] = {"first piece;", "second, longer piece;", "3"};
    h2_encode_request(cl, "POST", "/echo/chunked", NULL, 0, &block);
    r = h2_stream(cl, 13);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 13, block.p, block.len);
    for (size_t i = 0; i < 3; i++) {
      buf_adds(&body, pieces[i]);
      h2_send_body(cl, 13, pieces[i], strlen(pieces[i]), 0);
      body_wait_t bw = {r, body.len};
      ASSERT_EQ(h2_run(cl, body_at_least, &bw, 10000), CL_OK);
      ASSERT_MEM_EQ(r->body.p, r->body.len, body.p, body.len);
      ASSERT(!r->ended);
    }
    h2_send_body(cl, 13, NULL, 0, 1);
    h2_wait1(cl, r, 10000);
    h2_assert_resp(r, &head, &body, "POST /echo/chunked in three pieces");
    buf_free(&block);
  }
  /* A GET with a body: the body is read and dropped. */
  r = h2_request(cl, 15, "GET", "/hello", NULL, 0, "ignored", 7);
  h2_wait1(cl, r, 10000);
  h2_assert_route(r, "GET", "/hello");
  buf_free(&head);
  buf_free(&body);
  h2_free(cl);
  test_stop(srv);
}

TEST(h2_headers_json) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t head = {0}, body = {0};
  static const char *const hdrs[] = {"user-agent", "h2test", "accept", "*/*", "x-two", "a", "x-esc",
                                     "q\"b\\s\tz", "x-two", "b", "x-empty", ""};
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/headers?x=1", hdrs, 6, NULL, 0);
  h2_wait1(cl, r, 10000);
  /* Only regular fields, in order of first appearance, repeats joined; never the pseudo-headers. */
  buf_adds(&body, "{\"user-agent\":\"h2test\",\"accept\":\"*/*\",\"x-two\":\"a, b\",\"x-esc\":\"q\\\"b\\\\s\\u0009z\","
                  "\"x-empty\":\"\"}");
  buf_addf(&head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n",
           body.len);
  h2_assert_resp(r, &head, &body, "GET /headers");
  /* Without any regular field: an empty object. */
  r = h2_request(cl, 3, "GET", "/headers", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  buf_reset(&head);
  buf_reset(&body);
  buf_adds(&body, "{}");
  buf_adds(&head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/json\r\ncontent-length: 2\r\n");
  h2_assert_resp(r, &head, &body, "GET /headers without fields");
  buf_free(&head);
  buf_free(&body);
  h2_free(cl);
  test_stop(srv);
}

/* A malformed request (RFC 9113 8.1.1) is a stream error of type PROTOCOL_ERROR; 5.4.1 lets the server make it
 * a connection error instead. Returns 1 when the connection is still usable. */
static int expect_stream_error(h2cl_t *cl, h2resp_t *r, uint32_t code, const char *what) {
  for (;;) {
    h2frame_t f;
    if (r->rst != H2_NO_RST || cl->goaway) break;
    int rc = h2_next(cl, &f, 10000);
    if (rc != CL_OK) FAIL("%s: no RST_STREAM and no GOAWAY before %s", what, cl_status_name(rc));
  }
  if (r->rst != H2_NO_RST) {
    if (r->rst != code)
      FAIL("%s: RST_STREAM(%s), expected %s", what, h2_err_name(r->rst), h2_err_name(code));
    ASSERT_EQ(r->status, 0);
    cbt_log("%s: RST_STREAM(%s)", what, h2_err_name(r->rst));
    return 1;
  }
  if (cl->goaway_code != code) FAIL("%s: GOAWAY(%s), expected %s", what, h2_err_name(cl->goaway_code), h2_err_name(code));
  ASSERT_EQ(r->status, 0);
  cbt_log("%s: GOAWAY(%s)", what, h2_err_name(cl->goaway_code));
  return 0;
}

TEST(h2_malformed_requests) {
  typedef struct {
    const char *what;
    const char *const *nv; /* the whole header list, pseudo-headers included */
    size_t n;
    const char *body; /* DATA after the HEADERS, or NULL */
  } mcase_t;
  static const char *const no_path[] = {":method", "GET", ":scheme", "http", ":authority", "x"};
  static const char *const no_method[] = {":scheme", "http", ":path", "/hello", ":authority", "x"};
  static const char *const upper[] = {":method", "GET", ":scheme", "http", ":path", "/hello", "X-Upper", "1"};
  static const char *const conn_hdr[] = {":method", "GET", ":scheme", "http", ":path", "/hello", "connection",
                                         "keep-alive"};
  static const char *const te_hdr[] = {":method", "GET", ":scheme", "http", ":path", "/hello", "te", "gzip"};
  static const char *const late_pseudo[] = {":method", "GET", "x-a", "1", ":scheme", "http", ":path", "/hello"};
  static const char *const dup_path[] = {":method", "GET", ":scheme", "http", ":path", "/hello", ":path", "/json"};
  static const char *const bad_pseudo[] = {":method", "GET", ":scheme", "http", ":path", "/hello", ":foo", "1"};
  static const char *const cl_mismatch[] = {":method", "POST", ":scheme", "http", ":path", "/echo",
                                            "content-length", "10"};
  static const char *const empty_path[] = {":method", "GET", ":scheme", "http", ":path", ""};
  static const mcase_t cases[] = {
      {"no :path", no_path, 3, NULL},
      {"no :method", no_method, 3, NULL},
      {"an uppercase field name", upper, 4, NULL},
      {"a connection field", conn_hdr, 4, NULL},
      {"te other than trailers", te_hdr, 4, NULL},
      {"a pseudo-header after a regular field", late_pseudo, 4, NULL},
      {"two :path", dup_path, 4, NULL},
      {"an unknown pseudo-header", bad_pseudo, 4, NULL},
      {"content-length 10 with 5 bytes of DATA", cl_mismatch, 4, "hello"},
      {"an empty :path", empty_path, 3, NULL},
  };
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  int32_t sid = 1;
  h2_handshake(cl);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const mcase_t *c = &cases[i];
    nghttp2_nv nv[8];
    buf_t block = {0};
    for (size_t k = 0; k < c->n; k++)
      nv[k] = (nghttp2_nv){(uint8_t *)c->nv[2 * k], (uint8_t *)c->nv[2 * k + 1], strlen(c->nv[2 * k]),
                           strlen(c->nv[2 * k + 1]), NGHTTP2_NV_FLAG_NONE};
    h2_encode(cl, nv, c->n, &block);
    h2resp_t *r = h2_stream(cl, sid);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | (c->body ? 0 : NGHTTP2_FLAG_END_STREAM), sid,
                  block.p, block.len);
    if (c->body) h2_send_body(cl, sid, c->body, strlen(c->body), 1);
    buf_free(&block);
    if (!expect_stream_error(cl, r, NGHTTP2_PROTOCOL_ERROR, c->what)) {
      h2_free(cl); /* the connection is gone: go on with a fresh one */
      cl = h2_open(port);
      h2_handshake(cl);
      sid = 1;
      continue;
    }
    /* The connection goes on: the next stream is served. */
    route_check(cl, sid + 2, "GET", "/hello");
    sid += 4;
  }
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}

/* ---- many streams on one connection ---- */

TEST_T(h2_concurrent_streams, 60000) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2resp_t *rs[110];
  const char *paths[110];
  size_t n = 0;
  buf_t all = {0};
  h2_handshake(cl);
  /* 100 /hello with /file/big, /sse/big, /stream/big and a /delay among them, all sent in one write. */
  for (int i = 0; i < 104; i++) {
    const char *path = "/hello";
    if (i == 3) path = "/file/big";
    if (i == 40) path = "/sse/big";
    if (i == 70) path = "/stream/big";
    if (i == 90) path = "/delay/50";
    int32_t sid = 1 + 2 * i;
    buf_t block = {0};
    uint8_t hd[9];
    h2_encode_request(cl, "GET", path, NULL, 0, &block);
    h2_frame_hd(hd, (uint32_t)block.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, sid);
    buf_add(&all, hd, 9);
    buf_add(&all, block.p, block.len);
    buf_free(&block);
    rs[n] = h2_stream(cl, sid);
    paths[n++] = path;
  }
  cl_send(cl->fd, all.p, all.len);
  buf_free(&all);
  h2_wait(cl, rs, n, 40000);
  for (size_t i = 0; i < n; i++) h2_assert_route(rs[i], "GET", paths[i]);
  /* The big bodies came in many DATA frames, and the small answers did not wait behind them: every /hello
   * ended before /file/big did (nghttp2 sends HEADERS ahead of DATA and shares DATA among the streams). */
  ASSERT_GT(rs[3]->ndata, 300);
  for (size_t i = 0; i < n; i++)
    if (strcmp(paths[i], "/hello") == 0) ASSERT_LT(rs[i]->end_seq, rs[3]->end_seq);
  ASSERT_EQ(cl->goaway, 0);
  /* The connection is still good for more. */
  route_check(cl, 1 + 2 * 104, "GET", "/json");
  h2_free(cl);
  test_stop(srv);
}

/* ---- connection errors from hand-made frames ---- */

typedef struct {
  const char *what;
  int setup;          /* 1: open stream 1 first (POST /echo, no END_STREAM); 2: GET /delay/2000 on stream 1;
                       * 3: GET /hello on stream 1, answered (stream 1 is closed) */
  uint8_t type, flags;
  int32_t sid;
  uint32_t len;       /* payload length in the frame header */
  const char *payload; /* NULL: `len` bytes of 'x' */
  size_t payload_len;  /* bytes actually sent after the header */
  uint32_t code;      /* expected GOAWAY error code */
} errcase_t;

#define P(s) s, sizeof(s) - 1

static const errcase_t conn_errors[] = {
    {"DATA on stream 0", 0, NGHTTP2_DATA, 0, 0, 1, P("x"), NGHTTP2_PROTOCOL_ERROR},
    {"DATA on an idle stream", 0, NGHTTP2_DATA, 0, 5, 1, P("x"), NGHTTP2_PROTOCOL_ERROR},
    {"DATA over SETTINGS_MAX_FRAME_SIZE", 1, NGHTTP2_DATA, 0, 1, 16385, NULL, 16385, NGHTTP2_FRAME_SIZE_ERROR},
    {"HEADERS over SETTINGS_MAX_FRAME_SIZE", 0, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, 16385, NULL, 16385,
     NGHTTP2_FRAME_SIZE_ERROR},
    {"an unknown frame type over SETTINGS_MAX_FRAME_SIZE", 0, 0xfa, 0, 0, 16385, NULL, 16385,
     NGHTTP2_FRAME_SIZE_ERROR},
    {"PING of 7 bytes", 0, NGHTTP2_PING, 0, 0, 7, P("1234567"), NGHTTP2_FRAME_SIZE_ERROR},
    {"PING on stream 1", 0, NGHTTP2_PING, 0, 1, 8, P("12345678"), NGHTTP2_PROTOCOL_ERROR},
    {"SETTINGS of 5 bytes", 0, NGHTTP2_SETTINGS, 0, 0, 5, P("\0\3\0\0\0"), NGHTTP2_FRAME_SIZE_ERROR},
    {"SETTINGS on stream 1", 0, NGHTTP2_SETTINGS, 0, 1, 0, P(""), NGHTTP2_PROTOCOL_ERROR},
    {"SETTINGS ACK with a payload", 0, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, 6, P("\0\3\0\0\0\1"),
     NGHTTP2_FRAME_SIZE_ERROR},
    {"SETTINGS_ENABLE_PUSH 2", 0, NGHTTP2_SETTINGS, 0, 0, 6, P("\0\2\0\0\0\2"), NGHTTP2_PROTOCOL_ERROR},
    {"SETTINGS_INITIAL_WINDOW_SIZE 2^31", 0, NGHTTP2_SETTINGS, 0, 0, 6, P("\0\4\x80\0\0\0"),
     NGHTTP2_FLOW_CONTROL_ERROR},
    {"SETTINGS_MAX_FRAME_SIZE 100", 0, NGHTTP2_SETTINGS, 0, 0, 6, P("\0\5\0\0\0\x64"), NGHTTP2_PROTOCOL_ERROR},
    {"WINDOW_UPDATE overflowing the connection window", 0, NGHTTP2_WINDOW_UPDATE, 0, 0, 4, P("\x7f\xff\xff\xff"),
     NGHTTP2_FLOW_CONTROL_ERROR},
    {"WINDOW_UPDATE of 0 on the connection", 0, NGHTTP2_WINDOW_UPDATE, 0, 0, 4, P("\0\0\0\0"),
     NGHTTP2_PROTOCOL_ERROR},
    {"WINDOW_UPDATE of 3 bytes", 0, NGHTTP2_WINDOW_UPDATE, 0, 0, 3, P("\0\0\1"), NGHTTP2_FRAME_SIZE_ERROR},
    {"WINDOW_UPDATE on an idle stream", 0, NGHTTP2_WINDOW_UPDATE, 0, 9, 4, P("\0\0\1\0"), NGHTTP2_PROTOCOL_ERROR},
    {"RST_STREAM on stream 0", 0, NGHTTP2_RST_STREAM, 0, 0, 4, P("\0\0\0\x08"), NGHTTP2_PROTOCOL_ERROR},
    {"RST_STREAM on an idle stream", 0, NGHTTP2_RST_STREAM, 0, 5, 4, P("\0\0\0\x08"), NGHTTP2_PROTOCOL_ERROR},
    {"HEADERS on stream 0", 0, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 0, 1, P("\x82"), NGHTTP2_PROTOCOL_ERROR},
    {"HEADERS on an even (server) stream", 0, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 2, 1, P("\x82"),
     NGHTTP2_PROTOCOL_ERROR},
    {"HEADERS with an HPACK index out of range", 0, NGHTTP2_HEADERS,
     NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, 2, P("\xff\x70"), NGHTTP2_COMPRESSION_ERROR},
    {"CONTINUATION without HEADERS", 0, NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 1, 1, P("\x82"),
     NGHTTP2_PROTOCOL_ERROR},
    {"PUSH_PROMISE from the client", 0, NGHTTP2_PUSH_PROMISE, NGHTTP2_FLAG_END_HEADERS, 1, 5, P("\0\0\0\2\x82"),
     NGHTTP2_PROTOCOL_ERROR},
    {"GOAWAY on stream 1", 0, NGHTTP2_GOAWAY, 0, 1, 8, P("\0\0\0\0\0\0\0\0"), NGHTTP2_PROTOCOL_ERROR},
    /* With RFC 7540 priorities off, nghttp2 skips PRIORITY frames: the engine checks them (RFC 9113 6.3). */
    {"PRIORITY on stream 0", 0, NGHTTP2_PRIORITY, 0, 0, 5, P("\0\0\0\1\x10"), NGHTTP2_PROTOCOL_ERROR},
    {"PRIORITY of stream 3 depending on itself", 0, NGHTTP2_PRIORITY, 0, 3, 5, P("\x80\0\0\3\x10"),
     NGHTTP2_PROTOCOL_ERROR},
    {"PRIORITY of 4 bytes", 0, NGHTTP2_PRIORITY, 0, 3, 4, P("\0\0\0\3"), NGHTTP2_FRAME_SIZE_ERROR},
    /* ... and keeps no closed streams: the engine remembers them (RFC 9113 5.1). */
    {"DATA on a closed stream", 3, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, 1, P("x"), NGHTTP2_STREAM_CLOSED},
    {"HEADERS on a closed stream", 3, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, 1,
     P("\x82"), NGHTTP2_STREAM_CLOSED},
};

/* Runs one case on a fresh connection: the server must answer GOAWAY with the case's code and close. */
static void run_conn_error(int port, const errcase_t *c) {
  h2cl_t *cl = h2_open(port);
  buf_t frame = {0};
  uint8_t hd[9];
  cbt_log("case: %s", c->what);
  h2_handshake(cl);
  if (c->setup == 1) {
    buf_t block = {0};
    h2_encode_request(cl, "POST", "/echo", NULL, 0, &block);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block.p, block.len);
    buf_free(&block);
  }
  if (c->setup == 3) route_check(cl, 1, "GET", "/hello");
  h2_frame_hd(hd, c->len, c->type, c->flags, c->sid);
  buf_add(&frame, hd, 9);
  if (c->payload) {
    buf_add(&frame, c->payload, c->payload_len);
  } else {
    for (size_t i = 0; i < c->payload_len; i++) buf_add(&frame, "x", 1);
  }
  h2_send_raw(cl, frame.p, frame.len);
  buf_free(&frame);
  int r = h2_wait_goaway(cl, 10000);
  if (r != CL_OK) FAIL("%s: no GOAWAY (%s)", c->what, cl_status_name(r));
  if (cl->goaway_code != c->code)
    FAIL("%s: GOAWAY(%s), expected GOAWAY(%s)", c->what, h2_err_name(cl->goaway_code), h2_err_name(c->code));
  r = h2_wait_closed(cl, 10000);
  if (r != CL_EOF && r != CL_RESET) FAIL("%s: the connection was not closed after GOAWAY (%s)", c->what, cl_status_name(r));
  h2_free(cl);
}

TEST_T(h2_connection_errors, 60000) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  /* A connection opened before the errors keeps working through all of them. */
  h2cl_t *other = h2_open(port);
  h2_handshake(other);
  for (size_t i = 0; i < sizeof conn_errors / sizeof conn_errors[0]; i++) {
    run_conn_error(port, &conn_errors[i]);
    h2_check_hello(port);
  }
  route_check(other, 1, "GET", "/json");
  h2_free(other);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_GE(st.h2_errors, sizeof conn_errors / sizeof conn_errors[0]);
  test_stop(srv);
}

TEST(h2_bad_preface) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  buf_t got = {0}, exp400 = {0};
  int fd, r;

  /* A corrupted magic: not the HTTP/2 preface, so HTTP/1.1 sees `PRI * HTTP/2.0` and answers 400 and closes
   * (RFC 9113 3.4 only asks that the connection fail; a 400 is what the wire contract gives a bad request). */
  fd = cl_connect(port);
  cl_sends(fd, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
  r = cl_read_close(fd, &got, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  mask_dates(got.p, got.len);
  exp_error_close(&exp400, 400);
  if (got.len >= 9 && memcmp(got.p, "\0\0", 2) == 0) {
    /* An HTTP/2 answer is allowed too: then it is GOAWAY(PROTOCOL_ERROR). */
    cbt_log("answered with frames");
    ASSERT_EQ((uint8_t)got.p[3], NGHTTP2_GOAWAY);
  } else if (got.len > 0) {
    ASSERT_MEM_EQ(got.p, got.len, exp400.p, exp400.len);
  }
  close(fd);
  h2_check_hello(port);

  /* The magic, then something other than SETTINGS: GOAWAY(PROTOCOL_ERROR) and close (RFC 9113 3.4). */
  {
    static const uint8_t ping[8] = "12345678";
    h2cl_t *cl = h2_open(port);
    cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
    h2_send_ping(cl, ping);
    ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
    ASSERT_EQ(cl->goaway_code, NGHTTP2_PROTOCOL_ERROR);
    ASSERT_EQ(cl->pings, 0);
    r = h2_wait_closed(cl, 10000);
    ASSERT(r == CL_EOF || r == CL_RESET);
    h2_free(cl);
  }
  h2_check_hello(port);

  /* The magic, then HTTP/1.1 text. */
  {
    h2cl_t *cl = h2_open(port);
    cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
    cl_sends(cl->fd, "GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    r = h2_wait_goaway(cl, 10000);
    if (r == CL_OK) ASSERT_NE(cl->goaway_code, NGHTTP2_NO_ERROR);
    else ASSERT(r == CL_EOF || r == CL_RESET);
    r = h2_wait_closed(cl, 10000);
    ASSERT(r == CL_EOF || r == CL_RESET);
    h2_free(cl);
  }
  /* The magic cut short, then EOF: closed, nothing answered but maybe the server's SETTINGS. */
  fd = cl_connect(port);
  cl_send(fd, H2_PREFACE, 10);
  shutdown(fd, SHUT_WR);
  buf_reset(&got);
  r = cl_read_close(fd, &got, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  ASSERT_EQ(got.len, 0);
  close(fd);
  h2_check_hello(port);
  buf_free(&got);
  buf_free(&exp400);
  test_stop(srv);
}

/* ---- stream errors ---- */

TEST(h2_window_update_stream_overflow) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  /* Our SETTINGS gave the server a stream window of 2^31-1 already: any increment overflows it
   * (RFC 9113 6.9.1: a stream error of type FLOW_CONTROL_ERROR). */
  h2resp_t *r = h2_request(cl, 1, "GET", "/delay/2000", NULL, 0, NULL, 0);
  h2_send_window_update(cl, 1, 0x7fffffff);
  if (expect_stream_error(cl, r, NGHTTP2_FLOW_CONTROL_ERROR, "WINDOW_UPDATE overflowing a stream window"))
    route_check(cl, 3, "GET", "/hello");
  /* An increment of 0 on a stream: a stream error of type PROTOCOL_ERROR (6.9). */
  r = h2_request(cl, 5, "GET", "/delay/2000", NULL, 0, NULL, 0);
  h2_send_window_update(cl, 5, 0);
  if (expect_stream_error(cl, r, NGHTTP2_PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on a stream"))
    route_check(cl, 7, "GET", "/hello");
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}

static int ping_acked_or_goaway(h2cl_t *cl, const void *arg) {
  (void)arg;
  return cl->pings > 0 || cl->goaway > 0;
}

TEST(h2_headers_on_closed_stream) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t block = {0};
  h2_handshake(cl);
  /* Stream 1 is half-closed (remote) while /delay runs: another HEADERS on it is a STREAM_CLOSED error
   * (RFC 9113 5.1), of the stream or, per 5.4.1, of the connection. */
  h2resp_t *r = h2_request(cl, 1, "GET", "/delay/2000", NULL, 0, NULL, 0);
  h2_encode_request(cl, "GET", "/hello", NULL, 0, &block);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, block.p, block.len);
  buf_free(&block);
  if (expect_stream_error(cl, r, NGHTTP2_STREAM_CLOSED, "HEADERS on a half-closed (remote) stream"))
    route_check(cl, 3, "GET", "/hello");
  h2_free(cl);

  /* Stream 1 is closed (its response ended): HEADERS reusing its id must not start a second request on it.
   * RFC 9113 5.1.1 makes a reused stream id a connection error of type PROTOCOL_ERROR and 5.1 allows
   * STREAM_CLOSED for frames on a closed stream. */
  cl = h2_open(port);
  h2_handshake(cl);
  route_check(cl, 1, "GET", "/hello");
  r = h2_stream(cl, 1);
  buf_reset(&r->head);
  buf_reset(&r->body);
  r->ended = 0;
  r->nheaders = 0;
  h2_encode_request(cl, "GET", "/json", NULL, 0, &block);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, block.p, block.len);
  buf_free(&block);
  {
    static const uint8_t ping[8] = "closed!!";
    h2_send_ping(cl, ping); /* its ACK shows that the server has read the HEADERS before it */
    int rc = h2_run(cl, ping_acked_or_goaway, NULL, 10000);
    if (rc != CL_OK) FAIL("no PING ACK and no GOAWAY: %s", cl_status_name(rc));
  }
  /* Whatever the server did, it did not answer stream 1 again. */
  ASSERT_EQ(r->nheaders, 0);
  if (cl->goaway) {
    cbt_log("HEADERS on a closed stream: GOAWAY(%s)", h2_err_name(cl->goaway_code));
    ASSERT(cl->goaway_code == NGHTTP2_PROTOCOL_ERROR || cl->goaway_code == NGHTTP2_STREAM_CLOSED);
  } else {
    FAIL("HEADERS reusing the id of closed stream 1 was ignored; RFC 9113 5.1.1 requires a connection error "
         "of type PROTOCOL_ERROR (or STREAM_CLOSED, 5.1)");
  }
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}

/* Frames on streams that nghttp2 no longer keeps (RFC 7540 priorities are off), in the cases the connection
 * error table does not reach: a stream that closes within the same read as the frame that follows it, a
 * PRIORITY frame cut across two reads, and a stream the server reset before the client ended it. */
TEST(h2_frames_on_closed_streams) {
  cb_server_t *srv = start_with(0, 0, 1000, 0);
  int port = cb_server_port(srv);
  buf_t all = {0}, block = {0};
  uint8_t hd[9];

  /* HEADERS (no END_STREAM), RST_STREAM and DATA on stream 1 in one write: the DATA arrives on a closed
   * stream whose client side ended with the RST_STREAM, a connection error of type STREAM_CLOSED (h2spec
   * 5.1/8 sends the same three frames). */
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2_encode_request(cl, "POST", "/echo", NULL, 0, &block);
  h2_frame_hd(hd, (uint32_t)block.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1);
  buf_add(&all, hd, 9);
  buf_add(&all, block.p, block.len);
  h2_frame_hd(hd, 4, NGHTTP2_RST_STREAM, 0, 1);
  buf_add(&all, hd, 9);
  buf_add(&all, "\0\0\0\x08", 4);
  h2_frame_hd(hd, 4, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1);
  buf_add(&all, hd, 9);
  buf_add(&all, "body", 4);
  cl_send(cl->fd, all.p, all.len);
  ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_STREAM_CLOSED);
  h2_free(cl);

  /* A PRIORITY frame depending on itself, its payload cut across two writes. */
  cl = h2_open(port);
  h2_handshake(cl);
  h2_frame_hd(hd, 5, NGHTTP2_PRIORITY, 0, 5);
  buf_reset(&all);
  buf_add(&all, hd, 9);
  buf_add(&all, "\0\0", 2);
  cl_send(cl->fd, all.p, all.len);
  sleep_ms(50);
  cl_send(cl->fd, "\0\5\x10", 3);
  ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_PROTOCOL_ERROR);
  h2_free(cl);

  /* A PRIORITY frame for another stream, or for an idle one, is fine. */
  cl = h2_open(port);
  h2_handshake(cl);
  h2_send_frame(cl, NGHTTP2_PRIORITY, 0, 7, "\0\0\0\5\x10", 5);
  route_check(cl, 1, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);

  /* Stream 1 declares a body over the limit: 413, then RST_STREAM(NO_ERROR) from the server, before the client
   * ended its side. DATA the client had in flight is ignored (RFC 9113 5.1: "MUST ignore frames that it
   * receives on closed streams after it has sent a RST_STREAM"), and the connection goes on. */
  cl = h2_open(port);
  h2_handshake(cl);
  {
    const char *declared[] = {"content-length", "5000"};
    h2resp_t *r = h2_stream(cl, 1);
    buf_reset(&block);
    h2_encode_request(cl, "POST", "/echo", declared, 1, &block);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block.p, block.len);
    h2_wait1(cl, r, 10000);
    ASSERT_EQ(r->status, 413);
  }
  h2_send_body(cl, 1, "more", 4, 0);
  route_check(cl, 3, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);

  buf_free(&all);
  buf_free(&block);
  h2_check_hello(port);
  test_stop(srv);
}

/* ---- floods and limits ---- */

TEST_T(h2_continuation_flood, 40000) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *other = h2_open(port);
  h2_handshake(other);
  for (int big = 0; big <= 1; big++) {
    h2cl_t *cl = h2_open(port);
    buf_t block = {0}, flood = {0};
    uint8_t hd[9];
    size_t sent = 0, frames = 0;
    long rss0 = vm_rss_kb();
    h2_handshake(cl);
    /* HEADERS without END_HEADERS, then CONTINUATION frames that never end the block: empty ones (a frame
     * count flood) or 16 KiB ones of a literal that never ends (a byte flood). The server must give up on the
     * connection early, not keep the block. */
    h2_encode_request(cl, "GET", "/hello", NULL, 0, &block);
    h2_stream(cl, 1);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, block.p, block.len);
    for (int i = 0; i < 64; i++) {
      size_t n = big ? 16384 : 0;
      h2_frame_hd(hd, (uint32_t)n, NGHTTP2_CONTINUATION, 0, 1);
      buf_add(&flood, hd, 9);
      for (size_t k = 0; k < n; k++) buf_add(&flood, "a", 1);
    }
    /* Up to 16 MiB (byte flood) or 64k frames: stop once the server has closed. */
    while (sent < (big ? 16u << 20 : 64u * 9 * 1024) && h2_send_raw(cl, flood.p, flood.len) == 0) {
      sent += flood.len;
      frames += 64;
    }
    cbt_log("%s flood: %zu bytes (%zu frames) sent before the server closed", big ? "byte" : "frame", sent, frames);
    int r = h2_wait_goaway(cl, 10000);
    if (r != CL_OK) FAIL("CONTINUATION flood: no GOAWAY (%s)", cl_status_name(r));
    ASSERT_NE(cl->goaway_code, NGHTTP2_NO_ERROR);
    ASSERT_EQ(h2_stream(cl, 1)->nheaders, 0);
    /* The server did not keep the block: 16 MiB were sent, the process grew by far less. */
    cbt_log("VmRSS %ld kB -> %ld kB", rss0, vm_rss_kb());
    ASSERT_LT(vm_rss_kb() - rss0, 8 * 1024);
    r = h2_wait_closed(cl, 10000);
    ASSERT(r == CL_EOF || r == CL_RESET);
    buf_free(&block);
    buf_free(&flood);
    h2_free(cl);
    /* The other connection did not notice. */
    route_check(other, 1 + 2 * big, "GET", "/hello");
  }
  h2_check_hello(port);
  h2_free(other);
  test_stop(srv);
}


/* Five /delay requests sent in one write to a server whose limit is 4: the fifth is refused with
 * RST_STREAM(REFUSED_STREAM), a stream error (RFC 9113 5.1.2), so the other four are served, no GOAWAY comes,
 * and the refused request, retried, is served on the same connection. */
static void five_streams_one_refused(h2cl_t *cl) {
  h2resp_t *rs[5];
  buf_t all = {0};
  for (int i = 0; i < 5; i++) {
    uint8_t hd[9];
    buf_t block = {0};
    h2_encode_request(cl, "GET", "/delay/300", NULL, 0, &block);
    h2_frame_hd(hd, (uint32_t)block.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM,
                1 + 2 * i);
    buf_add(&all, hd, 9);
    buf_add(&all, block.p, block.len);
    buf_free(&block);
    rs[i] = h2_stream(cl, 1 + 2 * i);
  }
  cl_send(cl->fd, all.p, all.len);
  buf_free(&all);
  h2_wait(cl, rs, 5, 15000);
  for (int i = 0; i < 4; i++) h2_assert_route(rs[i], "GET", "/delay/300");
  ASSERT_EQ(rs[4]->status, 0);
  ASSERT_EQ(rs[4]->rst, NGHTTP2_REFUSED_STREAM);
  ASSERT_EQ(cl->goaway, 0);
  route_check(cl, 11, "GET", "/hello");
}

TEST_T(h2_max_concurrent_streams, 40000) {
  cb_server_t *srv = start_with(4, 0, 0, 0);
  int port = cb_server_port(srv);

  /* Sent with the preface, before the server's SETTINGS (limit 4 on the wire) is acknowledged. */
  h2cl_t *cl = h2_open(port);
  h2_start(cl);
  five_streams_one_refused(cl);
  ASSERT_EQ(cl->srv_max_streams, 4);
  h2_free(cl);

  /* After the SETTINGS ACK, where nghttp2 alone would answer GOAWAY(PROTOCOL_ERROR). */
  cl = h2_open(port);
  h2_handshake(cl);
  {
    static const uint8_t ping[8] = "acked!!!";
    h2_send_ping(cl, ping); /* our ACK went before this PING, so the server has it when the PING is answered */
    ASSERT_EQ(h2_run(cl, ping_acked_or_goaway, NULL, 10000), CL_OK);
  }
  five_streams_one_refused(cl);
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}

/* A request refused for a limit: the status (413 or 431, empty, content-length 0), or RST_STREAM. With
 * `complete` (the request ended with its HEADERS or DATA already) there is nothing left to cancel: the status
 * must arrive (docs/wire.md: 431 and 413), and no RST_STREAM after it. */
static void expect_refused(h2cl_t *cl, h2resp_t *r, int status, int complete, const char *what) {
  h2_wait1(cl, r, 10000);
  if (complete && r->status == 0)
    FAIL("%s: a complete request over the limit got RST_STREAM(%s) instead of its %d", what, h2_err_name(r->rst),
         status);
  if (r->status == 0) {
    cbt_log("%s: RST_STREAM(%s) without a status", what, h2_err_name(r->rst));
    ASSERT_NE(r->rst, H2_NO_RST);
    return;
  }
  buf_t head = {0};
  exp_empty(&head, status);
  mask_dates(r->head.p, r->head.len);
  ASSERT_MEM_EQ(r->head.p, r->head.len, head.p, head.len);
  ASSERT_EQ(r->body.len, 0);
  cbt_log("%s: %d", what, status);
  buf_free(&head);
}

TEST(h2_header_block_over_limit) {
  cb_server_t *srv = start_with(0, 1024, 0, 0);
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  char big[2001];
  const char *one_big[] = {"x-big", big};
  const char *many[2 * 60];
  char names[60][16];
  h2_handshake(cl);
  ASSERT_EQ(cl->srv_max_header_list, 1024);
  memset(big, 'v', 2000);
  big[2000] = '\0';
  expect_refused(cl, h2_request(cl, 1, "GET", "/hello", one_big, 1, NULL, 0), 431, 1, "one 2000-byte field");
  for (int i = 0; i < 60; i++) {
    snprintf(names[i], sizeof names[i], "x-%02d", i);
    many[2 * i] = names[i];
    many[2 * i + 1] = "0123456789";
  }
  expect_refused(cl, h2_request(cl, 3, "GET", "/hello", many, 60, NULL, 0), 431, 1, "60 fields");
  /* The same with a request body still to come: refused, and the body is not wanted. */
  expect_refused(cl, h2_request(cl, 5, "POST", "/echo", one_big, 1, "body", 4), 431, 0, "POST with a big field");
  /* Under the limit (the four pseudo-headers count 185 bytes with 32 per field, x-big 737) is served. */
  big[700] = '\0';
  route_check(cl, 7, "GET", "/hello?");
  h2resp_t *r = h2_request(cl, 9, "GET", "/hello", one_big, 1, NULL, 0);
  h2_wait1(cl, r, 10000);
  h2_assert_route(r, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_LE(st.status_431, 3);
  h2_check_hello(port);
  test_stop(srv);
}

TEST(h2_body_over_limit) {
  cb_server_t *srv = start_with(0, 0, 1000, 0);
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  char body[1600];
  static const char *const cl5000[] = {"content-length", "5000"};
  buf_t block = {0};
  memset(body, 'b', sizeof body);
  h2_handshake(cl);
  /* Declared over the limit: refused before any DATA is sent. */
  h2_encode_request(cl, "POST", "/echo", cl5000, 1, &block);
  h2resp_t *r = h2_stream(cl, 1);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, block.p, block.len);
  buf_free(&block);
  expect_refused(cl, r, 413, 0, "content-length 5000");
  /* Received over the limit without a content-length, in two DATA frames. */
  h2_encode_request(cl, "POST", "/echo", NULL, 0, &block);
  r = h2_stream(cl, 3);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 3, block.p, block.len);
  buf_free(&block);
  h2_send_body(cl, 3, body, 800, 0);
  h2_send_body(cl, 3, body, 800, 1);
  expect_refused(cl, r, 413, 0, "1600 bytes of DATA to /echo");
  /* /echo/chunked has answered 200 before the body goes over the limit: the stream is reset. */
  h2_encode_request(cl, "POST", "/echo/chunked", NULL, 0, &block);
  r = h2_stream(cl, 5);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 5, block.p, block.len);
  buf_free(&block);
  h2_send_body(cl, 5, body, 800, 0);
  h2_send_body(cl, 5, body, 800, 1);
  h2_wait1(cl, r, 10000);
  ASSERT(r->status == 413 || r->rst != H2_NO_RST);
  cbt_log("/echo/chunked over the limit: status %d, RST_STREAM(%s)", r->status, h2_err_name(r->rst));
  /* At the limit: served. */
  r = h2_request(cl, 7, "POST", "/echo", NULL, 0, body, 1000);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, 1000);
  route_check(cl, 9, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}

TEST(h2_unknown_frame_types_ignored) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  static const uint8_t ping[8] = {'u', 'n', 'k', 'n', 'o', 'w', 'n', 0xff};
  char big[16384];
  memset(big, 'u', sizeof big);
  h2_handshake(cl);
  /* RFC 9113 4.1 and 5.5: frames of unknown types are ignored, on any stream, whatever their flags. */
  h2_send_frame(cl, 0xfa, 0xff, 0, "abc", 3);
  h2_send_frame(cl, 0x20, 0, 1, NULL, 0);
  h2_send_frame(cl, 0x0b, 0x01, 3, big, sizeof big); /* ALTSVC-like numbers are not special either */
  h2_send_frame(cl, 0xff, 0, 0x7fffffff, big, 100);
  h2_send_ping(cl, ping);
  ASSERT_EQ(h2_run(cl, ping_acked_or_goaway, NULL, 10000), CL_OK);
  ASSERT_EQ(cl->goaway, 0);
  ASSERT_EQ(cl->pings, 1);
  ASSERT_MEM_EQ(cl->ping_data, 8, ping, 8);
  /* Between the frames of a request too. */
  {
    buf_t block = {0};
    h2_encode_request(cl, "POST", "/echo", NULL, 0, &block);
    h2resp_t *r = h2_stream(cl, 5);
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 5, block.p, block.len);
    h2_send_frame(cl, 0xfa, 0, 5, "zz", 2);
    h2_send_body(cl, 5, "hi", 2, 1);
    h2_wait1(cl, r, 10000);
    ASSERT_EQ(r->status, 200);
    ASSERT_MEM_EQ(r->body.p, r->body.len, "hi", (size_t)2);
    buf_free(&block);
  }
  route_check(cl, 7, "GET", "/hello");
  ASSERT_EQ(cl->unexpected, 0);
  h2_free(cl);
  test_stop(srv);
}

TEST_T(h2_client_never_reads, 60000) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t all = {0};
  cb_stats_t st;
  uint64_t last = 0;
  int still = 0, nreq = 0;
  long rss0 = vm_rss_kb();
  h2_handshake(cl);
  /* 40 /file/big, 4 /sse/big and 4 /stream/big (about 210 MB) with the flow-control windows wide open: only the
   * server's own backpressure can stop it from queueing all of it. */
  for (int i = 0; i < 48; i++) {
    uint8_t hd[9];
    buf_t block = {0};
    h2_encode_request(cl, "GET", i < 40 ? "/file/big" : i < 44 ? "/sse/big" : "/stream/big", NULL, 0, &block);
    h2_frame_hd(hd, (uint32_t)block.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM,
                1 + 2 * i);
    buf_add(&all, hd, 9);
    buf_add(&all, block.p, block.len);
    buf_free(&block);
    nreq++;
  }
  cl_send(cl->fd, all.p, all.len);
  buf_free(&all);
  /* Wait for the output to stop growing: 25 polls in a row without a written byte (bounded by 20 s). */
  for (int polls = 0; polls < 1000 && still < 25; polls++) {
    sleep_ms(20);
    ASSERT_ERR(cb_server_stats(srv, &st), 0);
    still = st.bytes_written == last ? still + 1 : 0;
    last = st.bytes_written;
  }
  long rss1 = vm_rss_kb();
  cbt_log("%d streams requested; %llu bytes written when it stopped; VmRSS %ld kB -> %ld kB", nreq,
          (unsigned long long)last, rss0, rss1);
  ASSERT_EQ(still, 25);
  /* What left is bounded by the socket buffers (a few MB), far below what was asked for. */
  ASSERT_LT(last, 64ull << 20);
  ASSERT_LT(rss1 - rss0, 64 * 1024);
  /* The worker is not stuck on it: other connections are served meanwhile. */
  h2_check_hello(port);
  /* The client goes away without reading: everything is released. */
  cl_reset(cl->fd);
  cl->fd = -1;
  h2_free(cl);
  for (int i = 0; i < 500; i++) {
    ASSERT_ERR(cb_server_stats(srv, &st), 0);
    if (st.conns_open == 0) break;
    sleep_ms(10);
  }
  ASSERT_EQ(st.conns_open, 0);
  h2_check_hello(port);
  test_stop(srv);
}

/* ---- lifecycle ---- */

static void *stop_thread(void *arg) {
  intptr_t rc = cb_server_stop(arg);
  return (void *)rc;
}

static int requests_at_least(const cb_stats_t *st, const void *arg) {
  return st->requests >= (uint64_t)(uintptr_t)arg;
}

TEST(h2_graceful_stop) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  cb_stats_t st;
  pthread_t th;
  void *rc;
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/delay/500", NULL, 0, NULL, 0);
  wait_stats(srv, &st, requests_at_least, (const void *)(uintptr_t)1, 5000);
  ASSERT_EQ(st.requests, 1);
  ASSERT_EQ(pthread_create(&th, NULL, stop_thread, srv), 0);
  /* GOAWAY(NO_ERROR) naming stream 1 as the last one taken, then stream 1's answer, then the close. */
  ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_NO_ERROR);
  ASSERT_EQ(cl->goaway_last, 1);
  /* A stream opened after GOAWAY is not served (RFC 9113 6.8); sending may fail if the server is gone. */
  {
    buf_t block = {0};
    uint8_t hd[9];
    h2resp_t *late = h2_stream(cl, 3);
    h2_encode_request(cl, "GET", "/hello", NULL, 0, &block);
    h2_frame_hd(hd, (uint32_t)block.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3);
    h2_send_raw(cl, hd, 9);
    h2_send_raw(cl, block.p, block.len);
    buf_free(&block);
    h2_wait1(cl, r, 10000);
    h2_assert_route(r, "GET", "/delay/500");
    int c = h2_wait_closed(cl, 10000);
    ASSERT(c == CL_EOF || c == CL_RESET);
    ASSERT_EQ(late->status, 0);
  }
  h2_free(cl); /* our close ends the server's lingering close */
  ASSERT_EQ(pthread_join(th, &rc), 0);
  ASSERT_EQ((intptr_t)rc, 0);
}

TEST(h2_idle_timeout) {
  cb_server_t *srv = start_with(0, 0, 0, 300);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  cb_stats_t st;
  h2_handshake(cl);
  route_check(cl, 1, "GET", "/hello");
  /* Idle past 300 ms: GOAWAY (NO_ERROR) and the close; bounded wait, no timing asserted. */
  int r = h2_wait_closed(cl, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  ASSERT_EQ(cl->goaway, 1);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_NO_ERROR);
  ASSERT_EQ(cl->goaway_last, 1);
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.timeouts, 1);
  /* A connection with a stream in progress is not idle: /delay/600 outlives the idle timeout. */
  cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  route_check(cl, 1, "GET", "/delay/600");
  h2_free(cl);
  /* Nothing after the preface at all: closed too. */
  cl = h2_open(cb_server_port(srv));
  cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
  r = h2_wait_closed(cl, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  h2_free(cl);
  test_stop(srv);
}

/* ---- parking an idle session (issue 24, proto/http2.c: its HPACK decoder is given back) ---- */

static int settings_at_least(h2cl_t *cl, const void *arg) { return cl->settings >= *(const int *)arg; }

static int never_done(h2cl_t *cl, const void *arg) {
  (void)cl;
  (void)arg;
  return 0;
}

/* Reads (and answers) the server's frames until the server has parked n sessions (its h2_parked counter). */
typedef struct {
  cb_server_t *srv;
  uint64_t n;
} parked_arg_t;

static int parked_at_least(h2cl_t *cl, const void *arg) {
  (void)cl;
  const parked_arg_t *a = arg;
  cb_stats_t st;
  return cb_server_stats(a->srv, &st) == 0 && st.h2_parked >= a->n;
}

/* Reads in slices of 50 ms (the server sends nothing once it has parked) until n sessions were parked: CL_OK,
 * or what ended the wait after 10 s. */
static int wait_parked(h2cl_t *cl, cb_server_t *srv, uint64_t n) {
  parked_arg_t want = {srv, n};
  int r = CL_TIMEOUT;
  for (int i = 0; i < 200 && r == CL_TIMEOUT; i++) r = h2_run(cl, parked_at_least, &want, 50);
  return r;
}

/* An idle connection's session is given back and made again when the client speaks: the client, which had
 * indexed a field, is asked for a 0-byte table first (SETTINGS), and the session goes once it acknowledged.
 * The new session agrees with the client on everything: its HPACK state (the client's blocks decode, ours
 * decode), its window for our data (this client never opens the connection window, so the second 40,000-byte
 * echo stops at exactly what the first left of 65,535 until a WINDOW_UPDATE), the table offered again (4096),
 * and the GOAWAY of the idle timeout names the streams the parked session had taken. */
TEST_T(h2_idle_session_parks_and_wakes, 60000) {
  cb_server_t *srv = start_with(0, 0, 0, 4000);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}, {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 100000}};
  cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
  h2_send_settings(cl, iv, 2);
  int one = 1, two = 2, three = 3;
  ASSERT_EQ(h2_run(cl, settings_at_least, &one, 10000), CL_OK);
  cb_stats_t st;
  static char body[40000];
  memset(body, 'e', sizeof body);
  const char *extra[] = {"x-park", "indexed-by-the-client"};
  h2resp_t *r = h2_request(cl, 1, "POST", "/echo", extra, 1, body, sizeof body);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_MEM_EQ(r->body.p, r->body.len, body, sizeof body);

  /* At rest: SETTINGS_HEADER_TABLE_SIZE 0, acknowledged by the client (automatically), then parked. */
  ASSERT_EQ(h2_run(cl, settings_at_least, &two, 10000), CL_OK);
  ASSERT_EQ(cl->srv_header_table, 0);
  ASSERT_EQ(wait_parked(cl, srv, 1), CL_OK);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.h2_woken, 0);

  /* The client speaks: a new session answers, the window for our data as the parked one left it. First a late
   * WINDOW_UPDATE and a RST_STREAM on stream 1, closed: ignored, as the parked session would have. */
  h2_send_window_update(cl, 1, 1000);
  h2_send_rst(cl, 1, NGHTTP2_CANCEL);
  r = h2_request(cl, 3, "POST", "/echo", extra, 1, body, sizeof body);
  ASSERT_EQ(h2_run(cl, settings_at_least, &three, 10000), CL_OK); /* the usual table offered again */
  ASSERT_EQ(cl->srv_header_table, 4096);
  ASSERT_EQ(h2_run(cl, never_done, r, 500), CL_TIMEOUT);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, (size_t)(65535 - 40000));
  ASSERT(!r->ended);
  h2_send_window_update(cl, 0, 40000);
  h2_wait1(cl, r, 10000);
  ASSERT_MEM_EQ(r->body.p, r->body.len, body, sizeof body);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.h2_parked, 1);
  ASSERT_EQ(st.h2_woken, 1);
  route_check(cl, 5, "GET", "/hello"); /* the client indexes again; both tables in step */

  /* Idle again: parked again, then the idle timeout wakes it for its GOAWAY, which names stream 5. */
  ASSERT_EQ(wait_parked(cl, srv, 2), CL_OK);
  int rc = h2_wait_closed(cl, 20000);
  ASSERT(rc == CL_EOF || rc == CL_RESET);
  ASSERT_EQ(cl->goaway, 1);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_NO_ERROR);
  ASSERT_EQ(cl->goaway_last, 5);
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.h2_parked, 2);
  ASSERT_EQ(st.h2_woken, 2); /* the second by the idle timeout, for its GOAWAY */
  test_stop(srv);
}

/* A stop reaches a parked session too: it is made again for its GOAWAY (NO_ERROR), which names the last stream
 * the parked session had taken, then the connection closes. */
TEST(h2_graceful_stop_while_parked) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  cb_stats_t st;
  pthread_t th;
  void *rc;
  h2_handshake(cl);
  route_check(cl, 1, "GET", "/hello");
  route_check(cl, 3, "GET", "/json");
  ASSERT_EQ(wait_parked(cl, srv, 1), CL_OK);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.h2_woken, 0);
  ASSERT_EQ(pthread_create(&th, NULL, stop_thread, srv), 0);
  ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_NO_ERROR);
  ASSERT_EQ(cl->goaway_last, 3);
  int c = h2_wait_closed(cl, 10000);
  ASSERT(c == CL_EOF || c == CL_RESET);
  h2_free(cl);
  ASSERT_EQ(pthread_join(th, &rc), 0); /* the server is freed by its stop */
  ASSERT_EQ((intptr_t)rc, 0);
}

/* Frames a client may send late on streams that closed before the session was parked (a WINDOW_UPDATE, a
 * RST_STREAM) are ignored by the new session, as the parked one ignored them: the new session has the client's
 * last stream as closed, not idle (a frame on an idle stream would end the connection, PROTOCOL_ERROR). */
static int got_pings(h2cl_t *cl, const void *arg) { return cl->pings >= *(const int *)arg; }

TEST(h2_late_frames_after_park) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  route_check(cl, 1, "GET", "/hello");
  route_check(cl, 3, "GET", "/json");
  ASSERT_EQ(wait_parked(cl, srv, 1), CL_OK);
  h2_send_window_update(cl, 3, 1000);
  h2_send_rst(cl, 3, NGHTTP2_CANCEL);
  static const uint8_t ping[8] = "parked!";
  h2_send_ping(cl, ping);
  int one = 1;
  ASSERT_EQ(h2_run(cl, got_pings, &one, 10000), CL_OK);
  route_check(cl, 5, "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.h2_parked, 1);
  ASSERT_EQ(st.h2_woken, 1);
  ASSERT_EQ(st.h2_errors, 0);
  h2_free(cl);
  test_stop(srv);
}

/* ---- Upgrade: h2c ---- */

static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";

/* base64url without padding (RFC 4648 5), as HTTP2-Settings carries a SETTINGS payload. */
static void b64url(const uint8_t *in, size_t n, char *out) {
  static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
    out[o++] = abc[v >> 18 & 63];
    out[o++] = abc[v >> 12 & 63];
    if (i + 1 < n) out[o++] = abc[v >> 6 & 63];
    if (i + 2 < n) out[o++] = abc[v & 63];
  }
  out[o] = '\0';
}

/* Our HTTP2-Settings: push off, initial window 2^31-1 (as h2_start() sends). */
static void our_settings(char *out) {
  static const uint8_t payload[12] = {0, 2, 0, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff};
  b64url(payload, sizeof payload, out);
}

/* Sends an upgrade request, reads the exact 101 and hands the socket to an HTTP/2 client that has sent its
 * preface; stream 1 is registered. */
static h2cl_t *upgrade_to_h2(int port, const char *method, const char *path, const char *more_headers) {
  char settings[64];
  buf_t req = {0}, got = {0};
  int fd = cl_connect(port);
  our_settings(settings);
  buf_addf(&req, "%s %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n%sconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
           "http2-settings: %s\r\n\r\n", method, path, port, more_headers, settings);
  cl_send(fd, req.p, req.len);
  int r = cl_read_n(fd, &got, sizeof switching - 1, 10000);
  if (r != CL_OK) cbt_log("reading the 101 ended with %s", cl_status_name(r));
  ASSERT_MEM_EQ(got.p, got.len < sizeof switching - 1 ? got.len : sizeof switching - 1, switching,
                sizeof switching - 1);
  h2cl_t *cl = malloc(sizeof *cl);
  if (cl == NULL) FAIL("out of memory");
  h2_adopt(cl, fd, port, got.p + sizeof switching - 1, got.len - (sizeof switching - 1));
  h2_stream(cl, 1);
  /* The server's first frame is its SETTINGS (RFC 9113 3.4), before anything on stream 1. It is acknowledged
   * after our preface. */
  {
    h2frame_t f;
    cl->no_auto_ack = 1;
    r = h2_next(cl, &f, 10000);
    if (r != CL_OK) FAIL("no frame after the 101: %s", cl_status_name(r));
    ASSERT_EQ(f.type, NGHTTP2_SETTINGS);
    ASSERT_EQ(f.flags, 0);
    cl->no_auto_ack = 0;
  }
  h2_start(cl);
  h2_send_frame(cl, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
  buf_free(&req);
  buf_free(&got);
  return cl;
}

TEST_T(h2_upgrade, 40000) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  const char *const cases[][2] = {{"GET", "/hello"}, {"HEAD", "/hello"}, {"GET", "/file/big"},
                                  {"GET", "/sse/small"}, {"HEAD", "/stream"}, {"GET", "/status/204"},
                                  {"GET", "/nope"}, {"POST", "/hello"}, {"GET", "/delay/x"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cbt_log("upgrade with %s %s", cases[i][0], cases[i][1]);
    h2cl_t *cl = upgrade_to_h2(port, cases[i][0], cases[i][1], "");
    h2resp_t *r = h2_stream(cl, 1);
    h2_wait1(cl, r, 20000);
    ASSERT_EQ(cl->settings, 1); /* the server's SETTINGS came first */
    h2_assert_route(r, cases[i][0], cases[i][1]);
    /* The connection is HTTP/2 from now on. */
    route_check(cl, 3, "GET", "/json");
    ASSERT_EQ(cl->goaway, 0);
    h2_free(cl);
  }
  /* /headers: the upgrade's own fields (connection, upgrade, http2-settings) are not the request's. */
  {
    h2cl_t *cl = upgrade_to_h2(port, "GET", "/headers", "user-agent: h2test\r\nX-Mixed-Case: v\r\n");
    h2resp_t *r = h2_stream(cl, 1);
    buf_t head = {0}, body = {0};
    h2_wait1(cl, r, 10000);
    buf_addf(&body, "{\"host\":\"127.0.0.1:%d\",\"user-agent\":\"h2test\",\"x-mixed-case\":\"v\"}", port);
    buf_addf(&head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n",
             body.len);
    h2_assert_resp(r, &head, &body, "upgrade GET /headers");
    buf_free(&head);
    buf_free(&body);
    h2_free(cl);
  }
  test_stop(srv);
}

/* An upgraded request's header names over 128 bytes were dropped from /headers (a fixed buffer). */
TEST(h2_upgrade_long_header_names) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  buf_t name = {0}, more = {0}, head = {0}, body = {0};
  buf_adds(&name, "X-Long-");
  while (name.len < 300) buf_adds(&name, "Name");
  buf_addf(&more, "%s: v\r\n", name.p);
  h2cl_t *cl = upgrade_to_h2(port, "GET", "/headers", more.p);
  h2resp_t *r = h2_stream(cl, 1);
  h2_wait1(cl, r, 10000);
  for (size_t k = 0; k < name.len; k++)
    if (name.p[k] >= 'A' && name.p[k] <= 'Z') name.p[k] += 32;
  buf_addf(&body, "{\"host\":\"127.0.0.1:%d\",", port);
  buf_addf(&body, "\"%s\":\"v\"}", name.p);
  buf_addf(&head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n",
           body.len);
  h2_assert_resp(r, &head, &body, "upgrade GET /headers with a long name");
  h2_free(cl);
  buf_free(&name);
  buf_free(&more);
  buf_free(&head);
  buf_free(&body);
  test_stop(srv);
}

/* Sends an HTTP/1.1 request, expects exactly the HTTP/1.1 answer of exp_route() (no upgrade), then checks that
 * the connection still speaks HTTP/1.1. */
static void upgrade_refused(int port, const char *req, const char *method, const char *path, const char *body) {
  buf_t exp = {0};
  int fd = cl_connect(port);
  cbt_log("not upgraded: %.60s...", req);
  if (body) {
    exp_head(&exp, 200, "application/octet-stream", NULL, (long)strlen(body), CONN_NONE);
    buf_adds(&exp, body);
  } else if (exp_route(&exp, method, path, CONN_NONE) != 0) {
    FAIL("no expectation");
  }
  ROUNDTRIP(fd, req, strlen(req), &exp);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/json", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /json HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  EXPECT_QUIET(fd, 50);
  close(fd);
  buf_free(&exp);
}

TEST(h2_upgrade_refused) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  char settings[64], req[512];
  cb_stats_t st;
  our_settings(settings);
  /* HTTP2-Settings that is not base64url of a SETTINGS payload. */
  upgrade_refused(port,
                  "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
                  "http2-settings: AAMAA\r\n\r\n",
                  "GET", "/hello", NULL);
  upgrade_refused(port,
                  "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
                  "http2-settings: !!!!!!!!\r\n\r\n",
                  "GET", "/hello", NULL);
  /* No HTTP2-Settings at all (RFC 7540 3.2.1: no upgrade without exactly one). */
  upgrade_refused(port, "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n", "GET",
                  "/hello", NULL);
  /* A request with a body. */
  snprintf(req, sizeof req,
           "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: Upgrade, HTTP2-Settings\r\n"
           "upgrade: h2c\r\nhttp2-settings: %s\r\n\r\nhello",
           settings);
  upgrade_refused(port, req, "POST", "/echo", "hello");
  snprintf(req, sizeof req,
           "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: Upgrade, HTTP2-Settings\r\n"
           "upgrade: h2c\r\nhttp2-settings: %s\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
           settings);
  upgrade_refused(port, req, "POST", "/echo", "hello");
  /* Another protocol than h2c. */
  snprintf(req, sizeof req,
           "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: websocket\r\n"
           "http2-settings: %s\r\n\r\n",
           settings);
  upgrade_refused(port, req, "GET", "/hello", NULL);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H2C_UPGRADE], 0);
  ASSERT_EQ(st.requests_by_proto[CB_PROTO_H2C_UPGRADE], 0);
  test_stop(srv);
}

TEST(h2_disabled) {
  cb_config_t cfg;
  cb_stats_t st;
  buf_t got = {0}, exp = {0};
  char settings[64], req[512];
  test_config(&cfg);
  cfg.enable_h2 = 0;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  /* The preface is an HTTP/1.1 request line with an unknown method and version: 400 and close. */
  int fd = cl_connect(port);
  cl_send(fd, H2_PREFACE, H2_PREFACE_LEN);
  ASSERT(cl_read_close(fd, &got, 10000) == CL_EOF);
  mask_dates(got.p, got.len);
  exp_error_close(&exp, 400);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  /* Upgrade: h2c is ignored. */
  our_settings(settings);
  snprintf(req, sizeof req,
           "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
           "http2-settings: %s\r\n\r\n",
           settings);
  upgrade_refused(port, req, "GET", "/hello", NULL);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H2C_PRIOR], 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H2C_UPGRADE], 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_HTTP1], 2);
  buf_free(&got);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- stats ---- */

static int all_closed(const cb_stats_t *st, const void *arg) {
  return st->conns_closed >= (uint64_t)(uintptr_t)arg && st->conns_open == 0;
}

TEST(h2_stats_by_proto) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  cb_stats_t st;
  buf_t exp = {0};
  /* HTTP/1.1: two requests on one connection. */
  int fd = cl_connect(port);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/json", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /json HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  /* Prior knowledge: three streams (one 404). */
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  route_check(cl, 1, "GET", "/hello");
  route_check(cl, 3, "GET", "/json");
  route_check(cl, 5, "GET", "/nope");
  h2_free(cl);
  /* Upgrade: the upgrade request and one more stream. */
  cl = upgrade_to_h2(port, "GET", "/hello", "");
  h2_wait1(cl, h2_stream(cl, 1), 10000);
  h2_assert_route(h2_stream(cl, 1), "GET", "/hello");
  route_check(cl, 3, "GET", "/json");
  h2_free(cl);
  wait_stats(srv, &st, all_closed, (const void *)(uintptr_t)3, 5000);
  ASSERT_EQ(st.conns_accepted, 3);
  ASSERT_EQ(st.conns_closed, 3);
  /* The upgraded connection counts under HTTP1 and under H2C_UPGRADE. */
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_HTTP1], 2);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H2C_PRIOR], 1);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H2C_UPGRADE], 1);
  /* The upgrade request itself counts under H2C_UPGRADE. */
  ASSERT_EQ(st.requests_by_proto[CB_PROTO_HTTP1], 2);
  ASSERT_EQ(st.requests_by_proto[CB_PROTO_H2C_PRIOR], 3);
  ASSERT_EQ(st.requests_by_proto[CB_PROTO_H2C_UPGRADE], 2);
  ASSERT_EQ(st.requests, 7);
  ASSERT_EQ(route_count(srv, "hello"), 3);
  ASSERT_EQ(route_count(srv, "json"), 3);
  ASSERT_EQ(route_count(srv, "not_found"), 1);
  ASSERT_EQ(st.status_404, 1);
  ASSERT_EQ(st.h2_errors, 0);
  ASSERT_EQ(st.resets, 0);
  ASSERT_EQ(st.timeouts, 0);
  buf_free(&exp);
  test_stop(srv);
}

TEST_T(h2_memory_flat_over_many_streams, 60000) {
  /* One connection, 16,000 streams one after another: what a stream costs must be given back when it
   * closes (nghttp2 would otherwise keep closed streams for its priority tree, ~240 bytes each here). The
   * server runs in this process, so its growth shows in VmRSS. The journal, which keeps requests on
   * purpose, is off. */
  cb_config_t cfg;
  test_config(&cfg);
  cfg.journal = 0;
  cb_server_t *srv = test_start(&cfg);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  for (int32_t i = 0; i < 1000; i++) { /* warm the allocators of both sides */
    route_check(cl, 1 + 2 * i, "GET", "/hello");
    h2_forget(cl, 1 + 2 * i);
  }
  long rss0 = vm_rss_kb();
  for (int32_t i = 1000; i < 16000; i++) {
    route_check(cl, 1 + 2 * i, "GET", "/hello");
    h2_forget(cl, 1 + 2 * i);
  }
  long grown = vm_rss_kb() - rss0;
  cbt_log("VmRSS grew by %ld kB over 15,000 streams", grown);
#if defined(__SANITIZE_ADDRESS__)
  /* ASan keeps freed memory in quarantine, so RSS grows whatever the engine does; the loop above still runs
   * under it for use-after-free and leaks. */
  cbt_log("RSS bound not checked under AddressSanitizer");
#else
  ASSERT_LT(grown, 1024);
#endif
  h2_free(cl);
  test_stop(srv);
}
