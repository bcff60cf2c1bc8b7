/* The h2c server at HTTP/2's protocol edges, pinned before its nghttp2 session (nghttp2 1.52) is replaced by
 * the project's own framing: flow control on responses, the peer's SETTINGS, PING, padding and priority
 * fields, RST_STREAM, WINDOW_UPDATE, request trailers, content-length, the HTTP messaging rules test_h2.c's
 * malformed table leaves out, a response header block that needs CONTINUATION, a GOAWAY from the client, many
 * streams at once, HEAD and 100-continue, and stream ids. Nothing here repeats test_h2.c (docs/h2-tests.md).
 *
 * Every case asserts what comes back exactly: frame types and flags, error codes, stream ids, byte counts,
 * statuses and bodies. Where RFC 9113 leaves the server a choice (a stream error may be raised as a
 * connection error, 5.4.1; a MAY), every allowed answer passes and the test logs which one came; the case's
 * comment names the choice. No time is asserted: "the server sent nothing more" is a PING answered
 * (h2_sync(): frames are answered in order), never a wait. A case that is not a connection error ends with
 * GET /hello served on the same connection, a connection error with GET /hello on a new one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"

#define LARGE 65536 /* GET /large: 65,536 bytes of fixture content */

static cb_server_t *start_default(void) {
  cb_config_t cfg;
  test_config(&cfg);
  return test_start(&cfg);
}

/* GET or HEAD of a route on stream sid, answered exactly as exp_route() says. */
static void route_check(h2cl_t *cl, int32_t sid, const char *method, const char *path) {
  h2resp_t *r = h2_request(cl, sid, method, path, NULL, 0, NULL, 0);
  h2_wait1(cl, r, 15000);
  h2_assert_route(r, method, path);
}

/* A PING answered, and no GOAWAY before it: the connection is well and everything before it was read. */
static void sync_ok(h2cl_t *cl) {
  int rc = h2_sync(cl, 10000);
  if (rc != CL_OK)
    FAIL("no PING ACK: %s (GOAWAY %d, %s)", cl_status_name(rc), cl->goaway, h2_err_name(cl->goaway_code));
  ASSERT_EQ(cl->goaway, 0);
}

/* The next client stream id after every one the test registered. */
static int32_t next_sid(const h2cl_t *cl) {
  int32_t sid = 1;
  for (size_t i = 0; i < H2_MAX_STREAMS; i++)
    if (cl->streams[i] != NULL && cl->streams[i]->sid >= sid) sid = cl->streams[i]->sid + 2;
  return sid;
}

/* The connection still serves GET /hello on a new stream. */
static void hello_after(h2cl_t *cl) {
  route_check(cl, next_sid(cl), "GET", "/hello");
  ASSERT_EQ(cl->goaway, 0);
}

static void exp_large(buf_t *head, buf_t *body) {
  buf_adds(head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/octet-stream\r\n"
                 "content-length: 65536\r\n");
  exp_file_bytes(body, LARGE);
}

static void assert_large(h2resp_t *r) {
  buf_t head = {0}, body = {0};
  exp_large(&head, &body);
  h2_assert_resp(r, &head, &body, "GET /large");
  buf_free(&head);
  buf_free(&body);
}

static void exp_echo(buf_t *head, size_t len) {
  buf_addf(head, ":status: 200\r\ndate: " DATE_MASK "\r\ncontent-type: application/octet-stream\r\n"
                 "content-length: %zu\r\n", len);
}

static void assert_echo(h2resp_t *r, const void *body, size_t len, const char *what) {
  buf_t head = {0}, b = {0};
  exp_echo(&head, len);
  buf_add(&b, body, len);
  h2_assert_resp(r, &head, &b, what);
  buf_free(&head);
  buf_free(&b);
}

/* Appends one frame to b. The stream id is written as given, reserved bit included. */
static void frame(buf_t *b, uint32_t len, uint8_t type, uint8_t flags, uint32_t sid, const void *p, size_t n) {
  uint8_t hd[9] = {(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, type, flags,
                   (uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
  buf_add(b, hd, 9);
  buf_add(b, p, n);
}

/* Appends a HEADERS frame of a request (h2_encode_request) with these flags. */
static void req_frame(h2cl_t *cl, buf_t *b, uint32_t sid, uint8_t flags, const char *method, const char *path) {
  buf_t block = {0};
  h2_encode_request(cl, method, path, NULL, 0, &block);
  frame(b, (uint32_t)block.len, NGHTTP2_HEADERS, flags, sid, block.p, block.len);
  buf_free(&block);
}

/* Appends a HEADERS frame holding one field (a trailer block). */
static void field_frame(h2cl_t *cl, buf_t *b, uint32_t sid, uint8_t flags, const char *name, const char *value) {
  nghttp2_nv nv = {(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value), NGHTTP2_NV_FLAG_NONE};
  buf_t block = {0};
  h2_encode(cl, &nv, 1, &block);
  frame(b, (uint32_t)block.len, NGHTTP2_HEADERS, flags, sid, block.p, block.len);
  buf_free(&block);
}

static void send_buf(h2cl_t *cl, buf_t *b) {
  cl_send(cl->fd, b->p, b->len);
  buf_reset(b);
}

/* A stream error, RST_STREAM(code) on r, or (RFC 9113 5.4.1) the connection error GOAWAY(code) and a close.
 * Returns 1 when the stream was reset and the connection goes on. The stream got no response head. */
static int expect_rst_or_goaway(h2cl_t *cl, h2resp_t *r, uint32_t code, const char *what) {
  while (r->rst == H2_NO_RST && !cl->goaway) {
    h2frame_t f;
    int rc = h2_next(cl, &f, 10000);
    if (rc != CL_OK) FAIL("%s: no RST_STREAM and no GOAWAY before %s", what, cl_status_name(rc));
  }
  ASSERT_EQ(r->status, 0);
  if (r->rst != H2_NO_RST) {
    if (r->rst != code) FAIL("%s: RST_STREAM(%s), expected %s", what, h2_err_name(r->rst), h2_err_name(code));
    cbt_log("%s: RST_STREAM(%s) on stream %d", what, h2_err_name(r->rst), (int)r->sid);
    return 1;
  }
  if (cl->goaway_code != code)
    FAIL("%s: GOAWAY(%s), expected %s", what, h2_err_name(cl->goaway_code), h2_err_name(code));
  cbt_log("%s: GOAWAY(%s)", what, h2_err_name(cl->goaway_code));
  int rc = h2_wait_closed(cl, 10000);
  if (rc != CL_EOF && rc != CL_RESET) FAIL("%s: not closed after GOAWAY (%s)", what, cl_status_name(rc));
  return 0;
}

/* Every stream that got a response head is at or below the GOAWAY's last stream id (RFC 9113 6.8). */
static void assert_goaway_last(const h2cl_t *cl) {
  for (size_t i = 0; i < H2_MAX_STREAMS; i++)
    if (cl->streams[i] != NULL && cl->streams[i]->status != 0) ASSERT_LE(cl->streams[i]->sid, cl->goaway_last);
}

/* ---- frame logs: what the server sent on some streams, frame by frame ---- */

typedef struct {
  uint8_t type, flags;
  uint32_t len;
  int32_t sid;
} fr_t;

typedef struct {
  fr_t v[4096];
  size_t n;
} frlog_t;

/* Reads (and processes) frames until every stream of rs ended or was reset, logging those streams' frames. */
static void run_logged(h2cl_t *cl, h2resp_t *const *rs, size_t n, frlog_t *log, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    size_t open = 0;
    for (size_t i = 0; i < n; i++) open += !rs[i]->ended && rs[i]->rst == H2_NO_RST;
    if (open == 0) return;
    uint64_t now = now_ms();
    if (now >= deadline) FAIL("%zu of %zu streams unfinished", open, n);
    h2frame_t f;
    int rc = h2_next(cl, &f, (int)(deadline - now));
    if (rc != CL_OK)
      FAIL("reading frames: %s (GOAWAY %d, %s)", cl_status_name(rc), cl->goaway, h2_err_name(cl->goaway_code));
    for (size_t i = 0; i < n; i++) {
      if (f.sid != rs[i]->sid) continue;
      if (log->n == sizeof log->v / sizeof log->v[0]) FAIL("frame log full");
      log->v[log->n++] = (fr_t){f.type, f.flags, f.len, f.sid};
    }
  }
}

/* ==== 1. Flow control on responses ====
 * The client's windows hold the server back (RFC 9113 6.9): GET /large (65,536 bytes) gets exactly as many
 * body bytes as the smaller window allows, then nothing until a WINDOW_UPDATE; each step says the bytes
 * received in all after it. */

enum { FC_STREAM_WU, FC_CONN_WU, FC_END };

typedef struct {
  uint8_t op;
  uint32_t value; /* the increment, sent as written (a reserved bit stays set) */
  size_t total;   /* body bytes received in all after the step; LARGE: the response ended */
} fcstep_t;

typedef struct {
  const char *what;
  nghttp2_settings_entry iv[2];
  size_t niv;
  uint32_t conn_inc; /* the connection WINDOW_UPDATE of the handshake (0: the window stays 65535) */
  size_t first;      /* body bytes before any step */
  fcstep_t steps[4];
} fcase_t;

#define IWS NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE
#define CONN_WIDE (H2_WINDOW_MAX - 65535)

static const fcase_t fc_cases[] = {
    {"stream window 100",
     {{IWS, 100}},
     1,
     CONN_WIDE,
     100,
     {{FC_STREAM_WU, 1000, 1100}, {FC_CONN_WU, 1000, 1100}, {FC_STREAM_WU, 64436, LARGE}, {FC_END, 0, 0}}},
    {"stream window 0: HEADERS, no DATA",
     {{IWS, 0}},
     1,
     CONN_WIDE,
     0,
     {{FC_STREAM_WU, 1, 1}, {FC_STREAM_WU, 65535, LARGE}, {FC_END, 0, 0}}},
    {"connection window 65535 (the default)",
     {{IWS, H2_WINDOW_MAX}},
     1,
     0,
     65535,
     {{FC_STREAM_WU, 1000, 65535}, {FC_CONN_WU, 1, LARGE}, {FC_END, 0, 0}}},
    {"stream window 40000 and connection window 65535",
     {{IWS, 40000}},
     1,
     0,
     40000,
     {{FC_STREAM_WU, 40000, 65535}, {FC_CONN_WU, 1, LARGE}, {FC_END, 0, 0}}},
    /* RFC 9113 6.5.3: the values of a SETTINGS frame are processed in order, the last one wins. */
    {"INITIAL_WINDOW_SIZE 0 then 100 in one SETTINGS frame",
     {{IWS, 0}, {IWS, 100}},
     2,
     CONN_WIDE,
     100,
     {{FC_STREAM_WU, 65436, LARGE}, {FC_END, 0, 0}}},
    /* RFC 9113 6.9: the reserved bit of the increment is ignored. */
    {"a WINDOW_UPDATE with the reserved bit set",
     {{IWS, H2_WINDOW_MAX}},
     1,
     0,
     65535,
     {{FC_CONN_WU, 0x80000001u, LARGE}, {FC_END, 0, 0}}},
};

typedef struct {
  const h2resp_t *r;
  size_t want;
} body_wait_t;

static int body_at_least(h2cl_t *cl, const void *arg) {
  const body_wait_t *bw = arg;
  (void)cl;
  return (bw->r->status != 0 && bw->r->body.len >= bw->want) || bw->r->ended || bw->r->rst != H2_NO_RST;
}

/* r has its head and exactly `total` body bytes, has not ended, and the server sends no more before a PING's
 * ACK. */
static void expect_held(h2cl_t *cl, h2resp_t *r, size_t total, const char *what) {
  body_wait_t bw = {r, total};
  int rc = h2_run(cl, body_at_least, &bw, 10000);
  if (rc != CL_OK)
    FAIL("%s: stream %d has %zu of %zu bytes (%s)", what, (int)r->sid, r->body.len, total, cl_status_name(rc));
  sync_ok(cl);
  if (r->body.len != total) cbt_log("%s: stream %d", what, (int)r->sid);
  ASSERT_EQ(r->body.len, total);
  ASSERT_EQ(r->ended, 0);
  ASSERT_EQ(r->rst, H2_NO_RST);
  ASSERT_EQ(r->status, 200);
}

static void send_wu_raw(h2cl_t *cl, int32_t sid, uint32_t value) {
  uint8_t p[4] = {(uint8_t)(value >> 24), (uint8_t)(value >> 16), (uint8_t)(value >> 8), (uint8_t)value};
  h2_send_frame(cl, NGHTTP2_WINDOW_UPDATE, 0, sid, p, 4);
}

/* After a test that used the windows up: new streams get 65535 and the connection 100 more bytes, enough for
 * /hello (and never past 2^31-1, whatever the test left). */
static void refill(h2cl_t *cl) {
  nghttp2_settings_entry iv[] = {{IWS, 65535}};
  h2_send_settings(cl, iv, 1);
  h2_send_window_update(cl, 0, 100);
}

TEST(h2_edge_flow_control_table) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  for (size_t i = 0; i < sizeof fc_cases / sizeof fc_cases[0]; i++) {
    const fcase_t *c = &fc_cases[i];
    cbt_log("case: %s", c->what);
    h2cl_t *cl = h2_open(port);
    h2_handshake_with(cl, c->iv, c->niv, c->conn_inc);
    h2resp_t *r = h2_request(cl, 1, "GET", "/large", NULL, 0, NULL, 0);
    expect_held(cl, r, c->first, c->what);
    for (const fcstep_t *s = c->steps; s->op != FC_END; s++) {
      send_wu_raw(cl, s->op == FC_STREAM_WU ? 1 : 0, s->value);
      if (s->total == LARGE) {
        h2_wait1(cl, r, 10000);
        assert_large(r);
      } else {
        expect_held(cl, r, s->total, c->what);
      }
    }
    ASSERT(r->ended);
    refill(cl);
    hello_after(cl);
    h2_free(cl);
  }
  test_stop(srv);
}

static void send_iws(h2cl_t *cl, uint32_t v) {
  nghttp2_settings_entry iv[] = {{IWS, v}};
  h2_send_settings(cl, iv, 1);
}

/* RFC 9113 6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE moves the window of every open stream by the difference,
 * below 0 too, and a stream opened after it starts with the new value. */
TEST(h2_edge_initial_window_change) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  nghttp2_settings_entry iv[] = {{IWS, 100}};
  h2_handshake_with(cl, iv, 1, CONN_WIDE);
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/large", NULL, 0, NULL, 0);
  expect_held(cl, r1, 100, "stream 1 with window 100");
  send_iws(cl, 0); /* stream 1: 0 - 100 = -100 */
  h2resp_t *r3 = h2_request(cl, 3, "GET", "/large", NULL, 0, NULL, 0);
  expect_held(cl, r3, 0, "stream 3 opened with window 0");
  expect_held(cl, r1, 100, "stream 1 at window -100");
  send_wu_raw(cl, 1, 50); /* -50: still nothing */
  expect_held(cl, r1, 100, "stream 1 at window -50");
  send_iws(cl, 300); /* stream 1: -50 + 300 = 250; stream 3: 300 */
  expect_held(cl, r1, 350, "stream 1 after INITIAL_WINDOW_SIZE 300");
  expect_held(cl, r3, 300, "stream 3 after INITIAL_WINDOW_SIZE 300");
  ASSERT_GE(cl->settings_acks, 3);
  send_iws(cl, H2_WINDOW_MAX);
  h2resp_t *rs[] = {r1, r3};
  h2_wait(cl, rs, 2, 10000);
  assert_large(r1);
  assert_large(r3);
  hello_after(cl);
  h2_free(cl);
  test_stop(srv);
}

/* The connection window (65535, not enlarged) is shared: three streams with wide windows get 65,535 bytes in
 * all, then the rest once the connection window opens. */
TEST(h2_edge_connection_window_shared) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  nghttp2_settings_entry iv[] = {{IWS, H2_WINDOW_MAX}};
  h2_handshake_with(cl, iv, 1, 0);
  buf_t all = {0};
  h2resp_t *rs[3];
  for (int i = 0; i < 3; i++) {
    rs[i] = h2_stream(cl, 1 + 2 * i);
    req_frame(cl, &all, (uint32_t)(1 + 2 * i), NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, "GET", "/large");
  }
  send_buf(cl, &all);
  buf_free(&all);
  while (cl->data_bytes < 65535) {
    h2frame_t f;
    int rc = h2_next(cl, &f, 10000);
    if (rc != CL_OK) FAIL("%llu DATA bytes, then %s", (unsigned long long)cl->data_bytes, cl_status_name(rc));
  }
  sync_ok(cl);
  ASSERT_EQ(cl->data_bytes, 65535);
  cbt_log("65535 bytes shared as %zu + %zu + %zu", rs[0]->body.len, rs[1]->body.len, rs[2]->body.len);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(rs[i]->status, 200);
    ASSERT_EQ(rs[i]->ended, 0);
  }
  h2_send_window_update(cl, 0, 2 * LARGE + 1);
  h2_wait(cl, rs, 3, 10000);
  for (int i = 0; i < 3; i++) assert_large(rs[i]);
  ASSERT_EQ(cl->data_bytes, 3 * LARGE);
  refill(cl);
  hello_after(cl);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 2. The peer's SETTINGS ==== */

/* SETTINGS_MAX_FRAME_SIZE bounds every frame the server sends (RFC 9113 4.2); above 16384 the server may, but
 * need not, send larger DATA frames. Three bodies of more than one frame, one a file, one streamed. */
TEST(h2_edge_max_frame_size) {
  static const uint32_t sizes[] = {0, 16384, 32768, 16777215}; /* 0: not sent, the default 16384 */
  static const char *const paths[] = {"/large", "/file/small", "/stream/big"};
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  static frlog_t log;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint32_t limit = sizes[i] ? sizes[i] : 16384;
    nghttp2_settings_entry iv[] = {{IWS, H2_WINDOW_MAX}, {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, sizes[i]}};
    h2cl_t *cl = h2_open(port);
    h2_handshake_with(cl, iv, sizes[i] ? 2 : 1, CONN_WIDE);
    h2resp_t *rs[3];
    for (int k = 0; k < 3; k++) rs[k] = h2_request(cl, 1 + 2 * k, "GET", paths[k], NULL, 0, NULL, 0);
    log.n = 0;
    run_logged(cl, rs, 3, &log, 20000);
    uint32_t max_data = 0;
    for (size_t k = 0; k < log.n; k++) {
      ASSERT_LE(log.v[k].len, limit);
      if (log.v[k].type == NGHTTP2_DATA && log.v[k].len > max_data) max_data = log.v[k].len;
    }
    cbt_log("SETTINGS_MAX_FRAME_SIZE %u: %zu frames, the largest DATA %u bytes", limit, log.n, max_data);
    assert_large(rs[0]);
    h2_assert_route(rs[1], "GET", "/file/small");
    h2_assert_route(rs[2], "GET", "/stream/big");
    hello_after(cl);
    h2_free(cl);
  }
  test_stop(srv);
}

/* Legal SETTINGS values the server must take without complaint (RFC 9113 6.5.2): it acknowledges them and
 * serves. Unknown identifiers are ignored (6.5.2); MAX_HEADER_LIST_SIZE is advisory (6.5.2), and the current
 * server sends its usual heads whatever the client announces; ENABLE_PUSH and MAX_CONCURRENT_STREAMS bind
 * only a server that pushes. */
TEST(h2_edge_settings_accepted) {
  typedef struct {
    const char *what;
    nghttp2_settings_entry iv[4];
    size_t n;
  } scase_t;
  static const scase_t cases[] = {
      {"SETTINGS_MAX_FRAME_SIZE 16777215 (the largest)", {{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16777215}}, 1},
      {"SETTINGS_MAX_FRAME_SIZE 16384 (the smallest)", {{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16384}}, 1},
      {"SETTINGS_HEADER_TABLE_SIZE 0", {{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0}}, 1},
      {"SETTINGS_ENABLE_PUSH 1", {{NGHTTP2_SETTINGS_ENABLE_PUSH, 1}}, 1},
      {"SETTINGS_MAX_CONCURRENT_STREAMS 0", {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 0}}, 1},
      {"SETTINGS_MAX_HEADER_LIST_SIZE 1", {{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 1}}, 1},
      {"SETTINGS_ENABLE_CONNECT_PROTOCOL 1", {{NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1}}, 1},
      {"SETTINGS_NO_RFC7540_PRIORITIES 1 in the first SETTINGS", {{NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1}}, 1},
      {"unknown identifiers 0x7, 0xa, 0xff, 0xffff", {{0x7, 1}, {0xa, 0xffffffffu}, {0xff, 0}, {0xffff, 1}}, 4},
  };
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cbt_log("case: %s", cases[i].what);
    h2cl_t *cl = h2_open(port);
    h2_handshake_with(cl, cases[i].iv, cases[i].n, CONN_WIDE);
    sync_ok(cl);
    ASSERT_EQ(cl->settings_acks, 1);
    /* The stream window is the default 65535: /large needs a WINDOW_UPDATE for its last byte. */
    h2resp_t *r = h2_request(cl, 1, "GET", "/large", NULL, 0, NULL, 0);
    route_check(cl, 3, "GET", "/hello");
    route_check(cl, 5, "GET", "/json");
    h2_send_window_update(cl, 1, 1);
    h2_wait1(cl, r, 10000);
    assert_large(r);
    h2_free(cl);
  }
  test_stop(srv);
}

/* ==== Connection errors (and stream errors the server may raise as such) ====
 * Each case on a fresh connection: the setup (the handshake, and what the case needs), then one frame. */

typedef struct {
  const char *what;
  void (*setup)(h2cl_t *cl); /* NULL: h2_handshake() */
  uint8_t type, flags;
  uint32_t sid; /* as written, reserved bit included */
  uint32_t len; /* in the frame header */
  const char *payload;
  size_t payload_len; /* bytes sent after the header */
  uint32_t code;      /* the GOAWAY's error code */
  uint32_t alt_code;  /* another code that passes too (0: none) */
  int32_t rst_sid;    /* non-zero: RST_STREAM(code) on this stream passes too, a stream error (5.4.1) */
  int may_ignore;     /* the RFC lets the server ignore the frame: the connection going on passes too */
} cerr_t;

#define P(s) s, sizeof(s) - 1

static void setup_post_open(h2cl_t *cl) { /* stream 1 open: POST /echo, no END_STREAM */
  buf_t b = {0};
  h2_handshake(cl);
  h2_stream(cl, 1);
  req_frame(cl, &b, 1, NGHTTP2_FLAG_END_HEADERS, "POST", "/echo");
  send_buf(cl, &b);
  buf_free(&b);
}

static void setup_get_delay(h2cl_t *cl) { /* stream 1 half-closed (remote): GET /delay/2000 */
  h2_handshake(cl);
  h2_request(cl, 1, "GET", "/delay/2000", NULL, 0, NULL, 0);
}

static void setup_hello_on_5(h2cl_t *cl) { /* stream 5 answered; 1 and 3 never opened */
  h2_handshake(cl);
  route_check(cl, 5, "GET", "/hello");
}

static void setup_block_open(h2cl_t *cl) { /* a HEADERS of stream 1 without END_HEADERS: a header block open */
  buf_t b = {0};
  h2_handshake(cl);
  h2_stream(cl, 1);
  req_frame(cl, &b, 1, NGHTTP2_FLAG_END_STREAM, "GET", "/hello");
  send_buf(cl, &b);
  buf_free(&b);
}

static void setup_synced(h2cl_t *cl) { /* the handshake's WINDOW_UPDATE took the connection window to 2^31-1 */
  h2_handshake(cl);
  sync_ok(cl);
}

/* Stream 1 (GET /delay/2000) has a window of exactly 2^31-1: the default 65535 and a WINDOW_UPDATE. */
static void setup_stream_window_max(h2cl_t *cl) {
  h2_handshake_with(cl, NULL, 0, CONN_WIDE);
  h2_request(cl, 1, "GET", "/delay/2000", NULL, 0, NULL, 0);
  h2_send_window_update(cl, 1, H2_WINDOW_MAX - 65535);
  sync_ok(cl);
}

/* The code alone: no other code, no stream error, not to be ignored. */
#define NO_ALT 0, 0, 0

/* A request header block of static-table entries and one literal: GET / with :authority x (6 bytes). */
#define BLOCK "\x82\x86\x84\x41\x01x"

static const cerr_t conn_errors[] = {
    /* SETTINGS (RFC 9113 6.5.2, 6.5): the limits of MAX_FRAME_SIZE, a length not a multiple of 6. */
    {"SETTINGS_MAX_FRAME_SIZE 16383", NULL, NGHTTP2_SETTINGS, 0, 0, 6,
     P("\0\5\0\0\x3f\xff"), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"SETTINGS_MAX_FRAME_SIZE 2^24", NULL, NGHTTP2_SETTINGS, 0, 0, 6,
     P("\0\5\1\0\0\0"), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"SETTINGS of 13 bytes", NULL, NGHTTP2_SETTINGS, 0, 0, 13, P("\0\5\0\0\x40\0\0\3\0\0\0\1\0"),
     NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    {"SETTINGS_INITIAL_WINDOW_SIZE 2^32-1", NULL, NGHTTP2_SETTINGS, 0, 0, 6, P("\0\4\xff\xff\xff\xff"),
     NGHTTP2_FLOW_CONTROL_ERROR, NO_ALT},
    /* RFC 9218 2.1: only 0 or 1; RFC 8441 3: only 0 or 1. */
    {"SETTINGS_NO_RFC7540_PRIORITIES 2", NULL, NGHTTP2_SETTINGS, 0, 0, 6,
     P("\0\x09\0\0\0\2"), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"SETTINGS_ENABLE_CONNECT_PROTOCOL 2", NULL, NGHTTP2_SETTINGS, 0, 0, 6, P("\0\x08\0\0\0\2"),
     NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    /* RFC 9218 2.1: a change after the first SETTINGS MAY be a PROTOCOL_ERROR (the current server: it is). */
    {"SETTINGS_NO_RFC7540_PRIORITIES changed after the first SETTINGS", NULL, NGHTTP2_SETTINGS, 0, 0, 6,
     P("\0\x09\0\0\0\1"), NGHTTP2_PROTOCOL_ERROR, 0, 0, 1},
    /* RFC 9113 6.9.2: a new INITIAL_WINDOW_SIZE that takes an open stream's window past 2^31-1 is a connection
     * error. The current server (nghttp2) resets that stream instead, RST_STREAM(FLOW_CONTROL_ERROR), and
     * goes on: both pass. */
    {"SETTINGS_INITIAL_WINDOW_SIZE raising a stream window past 2^31-1", setup_stream_window_max,
     NGHTTP2_SETTINGS, 0, 0, 6, P("\0\4\0\1\0\0"), NGHTTP2_FLOW_CONTROL_ERROR, 0, 1, 0},
    /* PING (6.7): 8 bytes, ACK or not. */
    {"PING of 9 bytes", NULL, NGHTTP2_PING, 0, 0, 9, P("123456789"), NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    {"PING of 0 bytes", NULL, NGHTTP2_PING, 0, 0, 0, P(""), NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    {"PING ACK of 7 bytes", NULL, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, 7, P("1234567"), NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    /* RST_STREAM (6.4): 4 bytes, on an open stream too. */
    {"RST_STREAM of 3 bytes", setup_get_delay, NGHTTP2_RST_STREAM, 0, 1, 3,
     P("\0\0\x08"), NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    {"RST_STREAM of 5 bytes", setup_get_delay, NGHTTP2_RST_STREAM, 0, 1, 5, P("\0\0\0\x08\0"),
     NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    /* WINDOW_UPDATE (6.9): 4 bytes on any stream; the connection window at exactly 2^31-1 takes no +1. */
    {"WINDOW_UPDATE of 5 bytes", NULL, NGHTTP2_WINDOW_UPDATE, 0, 0, 5,
     P("\0\0\1\0\0"), NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    {"WINDOW_UPDATE of 3 bytes on an open stream", setup_get_delay, NGHTTP2_WINDOW_UPDATE, 0, 1, 3, P("\0\1\0"),
     NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    {"WINDOW_UPDATE of 1 with the connection window at 2^31-1", setup_synced, NGHTTP2_WINDOW_UPDATE, 0, 0, 4,
     P("\0\0\0\1"), NGHTTP2_FLOW_CONTROL_ERROR, NO_ALT},
    /* PRIORITY (6.3): 5 bytes, a stream error that the server may raise as a connection error. */
    {"PRIORITY of 6 bytes", NULL, NGHTTP2_PRIORITY, 0, 3, 6, P("\0\0\0\1\x10\0"), NGHTTP2_FRAME_SIZE_ERROR, 0, 3, 0},
    /* Padding (6.1, 6.2): the Pad Length at or past what the payload holds after it. A PADDED DATA frame too
     * short to hold its Pad Length is a PROTOCOL_ERROR for the current server; 4.2 would make it a
     * FRAME_SIZE_ERROR (a frame too small for its mandatory fields): both pass. */
    {"DATA with Pad Length 5 in a payload of 5", setup_post_open, NGHTTP2_DATA, NGHTTP2_FLAG_PADDED, 1, 5,
     P("\5hell"), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"DATA, PADDED, of 0 bytes", setup_post_open, NGHTTP2_DATA, NGHTTP2_FLAG_PADDED, 1, 0, P(""),
     NGHTTP2_PROTOCOL_ERROR, NGHTTP2_FRAME_SIZE_ERROR, 0, 0},
    {"HEADERS with Pad Length 7 in a payload of 7", NULL, NGHTTP2_HEADERS,
     NGHTTP2_FLAG_PADDED | NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, 7, P("\7" BLOCK),
     NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"HEADERS, PADDED and PRIORITY, with Pad Length 7 in a payload of 12", NULL, NGHTTP2_HEADERS,
     NGHTTP2_FLAG_PADDED | NGHTTP2_FLAG_PRIORITY | NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, 12,
     P("\7\0\0\0\0\x10" BLOCK), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"HEADERS, PRIORITY, of 3 bytes", NULL, NGHTTP2_HEADERS,
     NGHTTP2_FLAG_PRIORITY | NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, 3, P("\0\0\0"),
     NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    /* 5.3.1: a stream depending on itself is a stream error; the current server makes it a connection error. */
    {"HEADERS with a PRIORITY field depending on its own stream", NULL, NGHTTP2_HEADERS,
     NGHTTP2_FLAG_PRIORITY | NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, 11, P("\0\0\0\1\x10" BLOCK),
     NGHTTP2_PROTOCOL_ERROR, 0, 1, 0},
    /* Header blocks (6.2, 6.10): nothing but CONTINUATION of the same stream until END_HEADERS. */
    {"PING inside a header block", setup_block_open, NGHTTP2_PING, 0, 0, 8,
     P("12345678"), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"CONTINUATION of another stream inside a header block", setup_block_open, NGHTTP2_CONTINUATION,
     NGHTTP2_FLAG_END_HEADERS, 3, 6, P(BLOCK), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    {"CONTINUATION after END_HEADERS on an open stream", setup_post_open, NGHTTP2_CONTINUATION,
     NGHTTP2_FLAG_END_HEADERS, 1, 1, P("\x82"), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
    /* GOAWAY (6.8): at least 8 bytes. */
    {"GOAWAY of 7 bytes", NULL, NGHTTP2_GOAWAY, 0, 0, 7, P("\0\0\0\0\0\0\0"), NGHTTP2_FRAME_SIZE_ERROR, NO_ALT},
    /* Stream ids (5.1.1): a new stream's id is above every id the client used; 3 was skipped, so closed. */
    {"HEADERS on stream 3 after stream 5", setup_hello_on_5, NGHTTP2_HEADERS,
     NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3, 6, P(BLOCK), NGHTTP2_PROTOCOL_ERROR, NO_ALT},
};

static void run_cerr(int port, const cerr_t *c) {
  h2cl_t *cl = h2_open(port);
  buf_t b = {0};
  cbt_log("case: %s", c->what);
  if (c->setup != NULL) c->setup(cl);
  else h2_handshake(cl);
  h2resp_t *r = c->rst_sid ? h2_stream(cl, c->rst_sid) : NULL;
  frame(&b, c->len, c->type, c->flags, c->sid, c->payload, c->payload_len);
  h2_send_raw(cl, b.p, b.len);
  buf_free(&b);
  if (c->may_ignore) {
    int rc = h2_sync(cl, 10000);
    if (rc == CL_OK && !cl->goaway) {
      cbt_log("%s: ignored", c->what);
      hello_after(cl);
      h2_free(cl);
      return;
    }
  }
  while (!cl->goaway && (r == NULL || r->rst == H2_NO_RST)) {
    h2frame_t f;
    int rc = h2_next(cl, &f, 10000);
    if (rc != CL_OK) FAIL("%s: no GOAWAY (%s)", c->what, cl_status_name(rc));
  }
  if (!cl->goaway) {
    if (r->rst != c->code) FAIL("%s: RST_STREAM(%s), expected %s", c->what, h2_err_name(r->rst), h2_err_name(c->code));
    cbt_log("%s: RST_STREAM(%s)", c->what, h2_err_name(r->rst));
    hello_after(cl);
    h2_free(cl);
    return;
  }
  if (cl->goaway_code != c->code && (c->alt_code == 0 || cl->goaway_code != c->alt_code))
    FAIL("%s: GOAWAY(%s), expected GOAWAY(%s)", c->what, h2_err_name(cl->goaway_code), h2_err_name(c->code));
  int rc = h2_wait_closed(cl, 10000);
  if (rc != CL_EOF && rc != CL_RESET) FAIL("%s: not closed after GOAWAY (%s)", c->what, cl_status_name(rc));
  assert_goaway_last(cl);
  h2_free(cl);
}

TEST(h2_edge_connection_errors) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  /* A connection opened before the errors keeps working through all of them. */
  h2cl_t *other = h2_open(port);
  h2_handshake(other);
  for (size_t i = 0; i < sizeof conn_errors / sizeof conn_errors[0]; i++) {
    run_cerr(port, &conn_errors[i]);
    h2_check_hello(port);
  }
  route_check(other, 1, "GET", "/json");
  h2_free(other);
  test_stop(srv);
}

/* ==== 3. PING ==== */

static int pings_at_least(h2cl_t *cl, const void *arg) { return cl->pings >= *(const int *)arg; }

TEST(h2_edge_ping) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  /* The ACK carries the 8 bytes as sent (RFC 9113 6.7), all 256 byte values among them. */
  for (int k = 0; k < 32; k++) {
    uint8_t data[8];
    for (int j = 0; j < 8; j++) data[j] = (uint8_t)(8 * k + j);
    int want = cl->pings + 1;
    h2_send_ping(cl, data);
    ASSERT_EQ(h2_run(cl, pings_at_least, &want, 10000), CL_OK);
    ASSERT_MEM_EQ(cl->ping_data, 8, data, 8);
  }
  /* A PING with the ACK flag from the client is not answered (6.7: "MUST NOT respond to PING frames containing
   * this flag"); the next PING is, with its own data. Unknown flags (0xfe: all but ACK) are ignored (4.1). */
  int before = cl->pings;
  h2_send_frame(cl, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, "ignored!", 8);
  h2_send_frame(cl, NGHTTP2_PING, 0xfe, 0, "answer!!", 8);
  int want = before + 1;
  ASSERT_EQ(h2_run(cl, pings_at_least, &want, 10000), CL_OK);
  ASSERT_MEM_EQ(cl->ping_data, 8, "answer!!", 8);
  sync_ok(cl);
  ASSERT_EQ(cl->pings, before + 2); /* "answer!!" and the sync's: none for the ACK */
  hello_after(cl);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 4. Padding and the priority fields of HEADERS ==== */

/* A HEADERS frame of a request: PADDED with `pad` bytes when pad >= 0, with a PRIORITY field when prio. */
static void padded_headers(h2cl_t *cl, buf_t *b, int32_t sid, uint8_t flags, int pad, const char *prio,
                           const char *method, const char *path) {
  buf_t block = {0}, p = {0};
  h2_encode_request(cl, method, path, NULL, 0, &block);
  if (pad >= 0) {
    uint8_t pl = (uint8_t)pad;
    buf_add(&p, &pl, 1);
    flags |= NGHTTP2_FLAG_PADDED;
  }
  if (prio != NULL) {
    buf_add(&p, prio, 5);
    flags |= NGHTTP2_FLAG_PRIORITY;
  }
  buf_add(&p, block.p, block.len);
  for (int i = 0; i < pad; i++) buf_add(&p, "\0", 1);
  frame(b, (uint32_t)p.len, NGHTTP2_HEADERS, flags, (uint32_t)sid, p.p, p.len);
  buf_free(&block);
  buf_free(&p);
}

static void padded_data(buf_t *b, int32_t sid, uint8_t flags, int pad, const char *data, size_t n) {
  buf_t p = {0};
  uint8_t pl = (uint8_t)pad;
  buf_add(&p, &pl, 1);
  buf_add(&p, data, n);
  for (int i = 0; i < pad; i++) buf_add(&p, "\0", 1);
  frame(b, (uint32_t)p.len, NGHTTP2_DATA, flags | NGHTTP2_FLAG_PADDED, (uint32_t)sid, p.p, p.len);
  buf_free(&p);
}

#define ES NGHTTP2_FLAG_END_STREAM
#define EH NGHTTP2_FLAG_END_HEADERS

TEST(h2_edge_padding_and_priority_fields) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t b = {0};
  h2_handshake(cl);
  /* GET /hello with padded HEADERS: 10 bytes, 0 bytes, 255 bytes of padding. */
  static const int pads[] = {10, 0, 255};
  for (int i = 0; i < 3; i++) {
    h2resp_t *r = h2_stream(cl, 1 + 2 * i);
    padded_headers(cl, &b, 1 + 2 * i, EH | ES, pads[i], NULL, "GET", "/hello");
    send_buf(cl, &b);
    h2_wait1(cl, r, 10000);
    h2_assert_route(r, "GET", "/hello");
  }
  /* POST /echo: padded HEADERS, DATA "hello" with 20 bytes of padding, DATA " world" with none (Pad Length 0),
   * and an empty DATA of padding alone with END_STREAM: the echo is the body without any padding. */
  h2resp_t *r = h2_stream(cl, 7);
  padded_headers(cl, &b, 7, EH, 255, NULL, "POST", "/echo");
  padded_data(&b, 7, 0, 20, "hello", 5);
  padded_data(&b, 7, 0, 0, " world", 6);
  padded_data(&b, 7, ES, 255, "", 0);
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "hello world", 11, "padded POST /echo");
  /* HEADERS with a PRIORITY field (RFC 9113 6.2; its content is deprecated, 5.3.2, but parsed): depending on
   * stream 0, exclusive on stream 0 with weight 256, on an idle stream, and with padding as well. */
  static const char *const prios[] = {"\0\0\0\0\x0f", "\x80\0\0\0\xff", "\0\0\0\x63\x10", "\x80\0\0\x01\0"};
  for (int i = 0; i < 4; i++) {
    int32_t sid = 9 + 2 * i;
    r = h2_stream(cl, sid);
    padded_headers(cl, &b, sid, EH | ES, i == 3 ? 7 : -1, prios[i], "GET", "/hello");
    send_buf(cl, &b);
    h2_wait1(cl, r, 10000);
    h2_assert_route(r, "GET", "/hello");
  }
  /* The idle stream 99 named as a dependency above can still be opened. */
  route_check(cl, 99, "GET", "/json");
  ASSERT_EQ(cl->goaway, 0);
  hello_after(cl);
  buf_free(&b);
  h2_free(cl);
  test_stop(srv);
}

/* Padding counts against flow control (RFC 9113 6.1: the whole DATA payload), and the server gives its window
 * back: 4,200 DATA frames of 256 bytes (Pad Length, 1 byte of body, 254 of padding) are 1,075,200 bytes, more
 * than the stream window of 1 MiB the server announces; the client waits for the server's WINDOW_UPDATEs. */
typedef struct {
  const h2resp_t *r;
  int64_t need;
} win_wait_t;

static int window_for(h2cl_t *cl, const void *arg) {
  const win_wait_t *w = arg;
  return (cl->conn_window >= w->need && w->r->window >= w->need) || w->r->rst != H2_NO_RST;
}

TEST(h2_edge_padding_flow_control) {
  enum { FRAMES = 4200, PAYLOAD = 256 };
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t b = {0}, body = {0}, out = {0};
  h2_handshake(cl);
  ASSERT_EQ(cl->srv_initial_window, 1 << 20);
  exp_file_bytes(&body, FRAMES);
  h2resp_t *r = h2_stream(cl, 1);
  req_frame(cl, &b, 1, EH, "POST", "/echo");
  send_buf(cl, &b);
  for (int i = 0; i < FRAMES; i++) {
    if (cl->conn_window < PAYLOAD || r->window < PAYLOAD) {
      send_buf(cl, &out);
      win_wait_t w = {r, PAYLOAD};
      int rc = h2_run(cl, window_for, &w, 10000);
      if (rc != CL_OK) FAIL("no window after %d padded frames (%lld, %lld): %s", i, (long long)cl->conn_window,
                            (long long)r->window, cl_status_name(rc));
      ASSERT_EQ(r->rst, H2_NO_RST);
    }
    padded_data(&out, 1, i == FRAMES - 1 ? ES : 0, PAYLOAD - 2, body.p + i, 1);
    cl->conn_window -= PAYLOAD;
    r->window -= PAYLOAD;
  }
  send_buf(cl, &out);
  h2_wait1(cl, r, 10000);
  assert_echo(r, body.p, body.len, "4,200 padded DATA frames");
  hello_after(cl);
  buf_free(&b);
  buf_free(&body);
  buf_free(&out);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 5. PRIORITY frames, and other frames the server must ignore ==== */

/* PRIORITY on an open stream, on a closed one (RFC 9113 5.1 allows it in every state), and on an idle one that
 * is opened afterwards; WINDOW_UPDATE and RST_STREAM right after a stream's END_STREAM (5.1: "closed", received
 * "for a short period" after END_STREAM: ignored). Unknown flags on every frame type are ignored (4.1). */
TEST(h2_edge_frames_ignored) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t b = {0};
  h2_handshake_with(cl, NULL, 0, 0); /* windows of 65535 both: the WINDOW_UPDATE case below needs them */
  /* PRIORITY on stream 1 between its HEADERS and its DATA. */
  h2resp_t *r = h2_stream(cl, 1);
  req_frame(cl, &b, 1, EH, "POST", "/echo");
  frame(&b, 5, NGHTTP2_PRIORITY, 0, 1, "\0\0\0\0\x20", 5);
  frame(&b, 5, NGHTTP2_DATA, ES, 1, "hello", 5);
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "hello", 5, "POST /echo with PRIORITY in the middle");
  /* Stream 1 is closed now: PRIORITY, WINDOW_UPDATE and RST_STREAM on it are ignored. */
  frame(&b, 5, NGHTTP2_PRIORITY, 0, 1, "\0\0\0\0\x20", 5);
  frame(&b, 4, NGHTTP2_WINDOW_UPDATE, 0, 1, "\0\0\1\0", 4);
  frame(&b, 4, NGHTTP2_RST_STREAM, 0, 1, "\0\0\0\x08", 4);
  /* PRIORITY on idle stream 11, which is then opened. */
  frame(&b, 5, NGHTTP2_PRIORITY, 0, 11, "\0\0\0\1\x20", 5);
  send_buf(cl, &b);
  sync_ok(cl);
  route_check(cl, 3, "GET", "/hello");
  route_check(cl, 11, "GET", "/hello");
  /* Unknown flags: HEADERS (0x02, 0x10, 0x40, 0x80 are unused), DATA (all but END_STREAM and PADDED),
   * SETTINGS (all but ACK: it is acknowledged), PRIORITY, RST_STREAM, WINDOW_UPDATE. */
  r = h2_stream(cl, 13);
  req_frame(cl, &b, 13, EH | 0xd2, "POST", "/echo");
  frame(&b, 2, NGHTTP2_DATA, ES | 0xf6, 13, "hi", 2);
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "hi", 2, "POST /echo with unknown flags");
  int acks = cl->settings_acks;
  h2_send_frame(cl, NGHTTP2_SETTINGS, 0xfe, 0, NULL, 0);
  h2_send_frame(cl, NGHTTP2_PRIORITY, 0xff, 15, "\0\0\0\0\x20", 5);
  sync_ok(cl);
  ASSERT_EQ(cl->settings_acks, acks + 1);
  h2resp_t *r17 = h2_request(cl, 17, "GET", "/delay/3000", NULL, 0, NULL, 0);
  h2_send_frame(cl, NGHTTP2_RST_STREAM, 0xff, 17, "\0\0\0\x08", 4);
  sync_ok(cl);
  ASSERT_EQ(r17->status, 0);
  ASSERT_EQ(r17->rst, H2_NO_RST); /* no RST_STREAM for a RST_STREAM (5.4.2) */
  /* GET /large with windows of 65535 (the connection's given back first: the DATA read so far used it): the
   * last byte needs WINDOW_UPDATEs, here with all flags set. */
  h2_send_window_update(cl, 0, (uint32_t)cl->data_bytes);
  r = h2_request(cl, 19, "GET", "/large", NULL, 0, NULL, 0);
  expect_held(cl, r, 65535, "GET /large with windows of 65535");
  h2_send_frame(cl, NGHTTP2_WINDOW_UPDATE, 0xff, 19, "\0\0\0\1", 4);
  h2_send_frame(cl, NGHTTP2_WINDOW_UPDATE, 0xff, 0, "\0\0\0\1", 4);
  h2_wait1(cl, r, 10000);
  assert_large(r);
  refill(cl);
  hello_after(cl);
  buf_free(&b);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 6. RST_STREAM from the client ==== */

static void add_slow_stub(cb_server_t *srv) {
  cb_stub_t st;
  uint64_t id;
  memset(&st, 0, sizeof st);
  st.match.methods = CB_METHOD_GET;
  st.match.path = CB_S("/edge/slow");
  st.response.status = 200;
  st.response.body_kind = CB_BODY_GENERATED;
  st.response.body_size = 40000;
  st.response.chunks = 40;       /* 1,000 bytes a piece ... */
  st.response.interval_ms = 100; /* ... for 4 s: a reset after the first piece comes mid-response */
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
}

/* A reset mid-response stops the stream's DATA at once; the other streams go on and complete. The reset is not
 * answered with a reset (RFC 9113 5.4.2), nor is a second one on the closed stream (5.1: ignored, or a
 * STREAM_CLOSED connection error, which the server may choose). An unknown error code is a reset like any
 * other (7). */
TEST(h2_edge_rst_stream_mid_response) {
  cb_server_t *srv = start_default();
  add_slow_stub(srv);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t b = {0}, want = {0};
  h2_handshake(cl);
  h2resp_t *slow = h2_stream(cl, 1), *small = h2_stream(cl, 3), *large = h2_stream(cl, 5);
  req_frame(cl, &b, 1, EH | ES, "GET", "/edge/slow");
  req_frame(cl, &b, 3, EH | ES, "GET", "/file/small");
  req_frame(cl, &b, 5, EH | ES, "GET", "/large");
  send_buf(cl, &b);
  body_wait_t bw = {slow, 1000};
  ASSERT_EQ(h2_run(cl, body_at_least, &bw, 10000), CL_OK);
  ASSERT_EQ(slow->ended, 0);
  h2_send_rst(cl, 1, NGHTTP2_CANCEL);
  sync_ok(cl);
  size_t got = slow->body.len;
  int ndata = slow->ndata;
  cbt_log("stream 1 reset after %zu body bytes in %d DATA frames", got, ndata);
  exp_file_bytes(&want, 40000);
  ASSERT_MEM_EQ(slow->body.p, got, want.p, got);
  h2resp_t *both[] = {small, large};
  h2_wait(cl, both, 2, 10000);
  h2_assert_route(small, "GET", "/file/small");
  assert_large(large);
  /* A second reset of stream 1, and one with an unknown code on a new slow stream. */
  h2_send_rst(cl, 1, NGHTTP2_CANCEL);
  h2resp_t *slow2 = h2_request(cl, 7, "GET", "/edge/slow", NULL, 0, NULL, 0);
  bw.r = slow2;
  ASSERT_EQ(h2_run(cl, body_at_least, &bw, 10000), CL_OK);
  h2_send_rst(cl, 7, 0xdead);
  int rc = h2_sync(cl, 10000);
  if (cl->goaway) { /* the second reset of stream 1 as a connection error: allowed (5.1, 5.4.1) */
    cbt_log("a second RST_STREAM: GOAWAY(%s)", h2_err_name(cl->goaway_code));
    ASSERT_EQ(cl->goaway_code, NGHTTP2_STREAM_CLOSED);
    h2_free(cl);
    h2_check_hello(cb_server_port(srv));
  } else {
    ASSERT_EQ(rc, CL_OK);
    size_t got2 = slow2->body.len;
    /* Time for the stub's next pieces to be made, were they still made: the server's other work meanwhile. */
    route_check(cl, 9, "GET", "/delay/250");
    hello_after(cl);
    sync_ok(cl);
    ASSERT_EQ(slow->body.len, got);
    ASSERT_EQ(slow->ndata, ndata);
    ASSERT_EQ(slow->ended, 0);
    ASSERT_EQ(slow->rst, H2_NO_RST);
    ASSERT_EQ(slow2->body.len, got2);
    ASSERT_EQ(slow2->ended, 0);
    ASSERT_EQ(slow2->rst, H2_NO_RST);
    h2_free(cl);
  }
  buf_free(&b);
  buf_free(&want);
  test_stop(srv);
}

/* ==== 8. Request trailers ==== */

TEST(h2_edge_request_trailers) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t b = {0};
  h2_handshake(cl);
  /* HEADERS, DATA, trailers with END_STREAM: the echo is the body (RFC 9113 8.1). */
  h2resp_t *r = h2_stream(cl, 1);
  req_frame(cl, &b, 1, EH, "POST", "/echo");
  frame(&b, 5, NGHTTP2_DATA, 0, 1, "hello", 5);
  field_frame(cl, &b, 1, EH | ES, "x-trailer", "1");
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "hello", 5, "POST /echo with trailers");
  /* Trailers right after the HEADERS: an empty body. */
  r = h2_stream(cl, 3);
  req_frame(cl, &b, 3, EH, "POST", "/echo");
  field_frame(cl, &b, 3, EH | ES, "x-trailer", "1");
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "", 0, "POST /echo with trailers and no DATA");
  /* A trailer block in a HEADERS without END_HEADERS and a CONTINUATION. */
  r = h2_stream(cl, 5);
  req_frame(cl, &b, 5, EH, "POST", "/echo");
  frame(&b, 3, NGHTTP2_DATA, 0, 5, "abc", 3);
  {
    nghttp2_nv nv[] = {{(uint8_t *)"x-a", (uint8_t *)"1", 3, 1, 0}, {(uint8_t *)"x-b", (uint8_t *)"2", 3, 1, 0}};
    buf_t block = {0};
    h2_encode(cl, nv, 2, &block);
    frame(&b, 3, NGHTTP2_HEADERS, ES, 5, block.p, 3);
    frame(&b, (uint32_t)block.len - 3, NGHTTP2_CONTINUATION, EH, 5, block.p + 3, block.len - 3);
    buf_free(&block);
  }
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "abc", 3, "POST /echo with trailers over CONTINUATION");
  hello_after(cl);

  /* Malformed trailers (8.1: a trailer block ends the stream; 8.1.1/8.3: no pseudo-header, no
   * connection-specific field): a stream error, PROTOCOL_ERROR, or a connection error (5.4.1). */
  typedef struct {
    const char *what;
    uint8_t flags;
    const char *name, *value;
  } tcase_t;
  static const tcase_t bad[] = {
      {"trailers without END_STREAM", EH, "x-trailer", "1"},
      {"trailers with a pseudo-header", EH | ES, ":path", "/hello"},
      {"trailers with a connection field", EH | ES, "connection", "close"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int32_t sid = next_sid(cl);
    r = h2_stream(cl, sid);
    req_frame(cl, &b, (uint32_t)sid, EH, "POST", "/echo");
    frame(&b, 5, NGHTTP2_DATA, 0, (uint32_t)sid, "hello", 5);
    field_frame(cl, &b, (uint32_t)sid, bad[i].flags, bad[i].name, bad[i].value);
    send_buf(cl, &b);
    if (expect_rst_or_goaway(cl, r, NGHTTP2_PROTOCOL_ERROR, bad[i].what)) {
      hello_after(cl);
    } else {
      h2_free(cl);
      cl = h2_open(port);
      h2_handshake(cl);
    }
  }
  /* DATA after the trailers' END_STREAM: the stream is half-closed (remote), a STREAM_CLOSED error (5.1); the
   * current server makes it a connection error. Whether the echo was answered first is not asserted. */
  {
    int32_t sid = next_sid(cl);
    r = h2_stream(cl, sid);
    req_frame(cl, &b, (uint32_t)sid, EH, "POST", "/echo");
    frame(&b, 5, NGHTTP2_DATA, 0, (uint32_t)sid, "hello", 5);
    field_frame(cl, &b, (uint32_t)sid, EH | ES, "x-trailer", "1");
    frame(&b, 1, NGHTTP2_DATA, ES, (uint32_t)sid, "x", 1);
    send_buf(cl, &b);
    while (r->rst == H2_NO_RST && !cl->goaway) {
      h2frame_t f;
      int rc = h2_next(cl, &f, 10000);
      if (rc != CL_OK) FAIL("DATA after trailers: no RST_STREAM and no GOAWAY (%s)", cl_status_name(rc));
    }
    if (cl->goaway) {
      cbt_log("DATA after trailers: GOAWAY(%s)", h2_err_name(cl->goaway_code));
      ASSERT_EQ(cl->goaway_code, NGHTTP2_STREAM_CLOSED);
      int rc = h2_wait_closed(cl, 10000);
      ASSERT(rc == CL_EOF || rc == CL_RESET);
    } else {
      cbt_log("DATA after trailers: RST_STREAM(%s)", h2_err_name(r->rst));
      ASSERT_EQ(r->rst, NGHTTP2_STREAM_CLOSED);
      hello_after(cl);
    }
  }
  h2_free(cl);
  h2_check_hello(port);
  buf_free(&b);
  test_stop(srv);
}

/* ==== 9. content-length of a request (RFC 9113 8.1.1) ==== */

TEST(h2_edge_request_content_length) {
  typedef struct {
    const char *what;
    const char *const *extra; /* header fields after the pseudo-headers */
    size_t nextra;
    const char *const *data; /* DATA payloads, NULL-terminated; END_STREAM on the last (none: on HEADERS) */
    int end_on_last;         /* 0: the last DATA frame has no END_STREAM (the error comes before the end) */
    const char *echo;        /* the echo, or NULL: a PROTOCOL_ERROR stream error (or connection error) */
    int either;              /* the RFC lets the server choose: the echo or the error pass */
  } ccase_t;
  static const char *const cl3[] = {"content-length", "3"}, *const cl4[] = {"content-length", "4"},
                           *const cl5[] = {"content-length", "5"}, *const cl0[] = {"content-length", "0"},
                           *const cl05[] = {"content-length", "05"}, *const clabc[] = {"content-length", "abc"},
                           *const clneg[] = {"content-length", "-1"}, *const clempty[] = {"content-length", ""},
                           *const clplus[] = {"content-length", "+5"},
                           *const cl55[] = {"content-length", "5", "content-length", "5"},
                           *const cl56[] = {"content-length", "5", "content-length", "6"},
                           *const cllist[] = {"content-length", "5, 5"};
  static const char *const hello[] = {"hello", NULL}, *const he_llo[] = {"he", "llo", NULL},
                           *const bytes5[] = {"h", "e", "l", "l", "o", NULL}, *const empty[] = {"", NULL},
                           *const none[] = {NULL};
  static const ccase_t cases[] = {
      {"content-length 3, 5 bytes in one DATA", cl3, 1, hello, 1, NULL, 0},
      {"content-length 3, 2 + 3 bytes", cl3, 1, he_llo, 1, NULL, 0},
      {"content-length 4, 5 bytes before END_STREAM", cl4, 1, hello, 0, NULL, 0},
      {"content-length 5, END_STREAM on HEADERS", cl5, 1, none, 1, NULL, 0},
      {"content-length abc", clabc, 1, hello, 1, NULL, 0},
      {"content-length -1", clneg, 1, hello, 1, NULL, 0},
      {"content-length +5", clplus, 1, hello, 1, NULL, 0},
      {"an empty content-length", clempty, 1, hello, 1, NULL, 0},
      {"content-length 5 and 6", cl56, 2, hello, 1, NULL, 0},
      /* RFC 9110 8.6: identical repeated values, or a list of them, may be taken as one or refused. */
      {"content-length 5 twice", cl55, 2, hello, 1, "hello", 1},
      {"content-length \"5, 5\"", cllist, 1, hello, 1, "hello", 1},
      {"content-length 5 in five 1-byte DATA frames", cl5, 1, bytes5, 1, "hello", 0},
      {"content-length 0 and an empty DATA", cl0, 1, empty, 1, "", 0},
      {"content-length 0, END_STREAM on HEADERS", cl0, 1, none, 1, "", 0},
      {"content-length 05", cl05, 1, hello, 1, "hello", 0},
  };
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t b = {0}, block = {0};
  h2_handshake(cl);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const ccase_t *c = &cases[i];
    int32_t sid = next_sid(cl);
    h2resp_t *r = h2_stream(cl, sid);
    size_t nd = 0;
    while (c->data[nd] != NULL) nd++;
    buf_reset(&block);
    h2_encode_request(cl, "POST", "/echo", c->extra, c->nextra, &block);
    frame(&b, (uint32_t)block.len, NGHTTP2_HEADERS, EH | (nd == 0 ? ES : 0), (uint32_t)sid, block.p, block.len);
    for (size_t k = 0; k < nd; k++)
      frame(&b, (uint32_t)strlen(c->data[k]), NGHTTP2_DATA, k + 1 == nd && c->end_on_last ? ES : 0, (uint32_t)sid,
            c->data[k], strlen(c->data[k]));
    send_buf(cl, &b);
    if (c->echo != NULL && !c->either) {
      h2_wait1(cl, r, 10000);
      assert_echo(r, c->echo, strlen(c->echo), c->what);
      continue;
    }
    while (!r->ended && r->rst == H2_NO_RST && !cl->goaway) {
      h2frame_t f;
      int rc = h2_next(cl, &f, 10000);
      if (rc != CL_OK) FAIL("%s: no answer (%s)", c->what, cl_status_name(rc));
    }
    if (r->ended) {
      if (!c->either) FAIL("%s: answered %d, expected PROTOCOL_ERROR", c->what, r->status);
      cbt_log("%s: answered", c->what);
      assert_echo(r, c->echo, strlen(c->echo), c->what);
      continue;
    }
    if (!expect_rst_or_goaway(cl, r, NGHTTP2_PROTOCOL_ERROR, c->what)) {
      h2_free(cl);
      cl = h2_open(port);
      h2_handshake(cl);
      continue;
    }
    if (!c->end_on_last) { /* the client's side is still open: the stream is closed by the reset anyway */
      ASSERT_EQ(r->ended, 0);
    }
    hello_after(cl);
  }
  hello_after(cl);
  buf_free(&b);
  buf_free(&block);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 10. HTTP messaging checks (RFC 9113 8.1.1, 8.2, 8.3) not in test_h2.c's malformed table ==== */

typedef struct {
  const char *name, *value;
  size_t vlen;
} hv_t;

#define HV(n, v) {n, v, sizeof(v) - 1}
#define REQ(method, path) HV(":method", method), HV(":scheme", "http"), HV(":authority", "x"), HV(":path", path)
#define GET_HELLO REQ("GET", "/hello")

enum {
  M_ERROR,     /* RST_STREAM(PROTOCOL_ERROR), or GOAWAY(PROTOCOL_ERROR) (5.4.1) */
  M_HELLO,     /* served as GET /hello */
  M_STATUS,    /* answered `status`, content-length 0, no body */
  M_HELLO_OR_ERROR /* the RFC lets the server choose (SHOULD, MAY): either passes */
};

typedef struct {
  const char *what;
  const hv_t *h;
  size_t n;
  int outcome;
  int status; /* M_STATUS */
} mcase_t;

static const hv_t m_keep_alive[] = {GET_HELLO, HV("keep-alive", "timeout=5")};
static const hv_t m_proxy_conn[] = {GET_HELLO, HV("proxy-connection", "keep-alive")};
static const hv_t m_te_chunked[] = {GET_HELLO, HV("transfer-encoding", "chunked")};
static const hv_t m_upgrade[] = {GET_HELLO, HV("upgrade", "h2c")};
static const hv_t m_te_trailers[] = {GET_HELLO, HV("te", "trailers")};
static const hv_t m_te_list[] = {GET_HELLO, HV("te", "trailers, gzip")};
static const hv_t m_status[] = {GET_HELLO, HV(":status", "200")};
static const hv_t m_no_scheme[] = {HV(":method", "GET"), HV(":authority", "x"), HV(":path", "/hello")};
static const hv_t m_dup_method[] = {HV(":method", "GET"), GET_HELLO};
static const hv_t m_dup_scheme[] = {GET_HELLO, HV(":scheme", "http")};
static const hv_t m_dup_authority[] = {GET_HELLO, HV(":authority", "x")};
static const hv_t m_connect_bare[] = {HV(":method", "CONNECT")};
static const hv_t m_connect[] = {HV(":method", "CONNECT"), HV(":authority", "example.com:443")};
static const hv_t m_connect_path[] = {HV(":method", "CONNECT"), HV(":authority", "example.com:443"),
                                      HV(":scheme", "http"), HV(":path", "/")};
static const hv_t m_nul[] = {GET_HELLO, HV("x-a", "a\0b")};
static const hv_t m_cr[] = {GET_HELLO, HV("x-a", "a\rb")};
static const hv_t m_lf[] = {GET_HELLO, HV("x-a", "a\nb")};
static const hv_t m_lead_sp[] = {GET_HELLO, HV("x-a", " ab")};
static const hv_t m_trail_tab[] = {GET_HELLO, HV("x-a", "ab\t")};
static const hv_t m_inner_tab[] = {GET_HELLO, HV("x-a", "a\tb c")};
static const hv_t m_obs_text[] = {GET_HELLO, HV("x-a", "a\x80\xff")};
static const hv_t m_name_space[] = {GET_HELLO, HV("x a", "1")};
static const hv_t m_name_colon[] = {GET_HELLO, HV("x:a", "1")};
static const hv_t m_name_empty[] = {GET_HELLO, HV("", "1")};
static const hv_t m_path_rel[] = {REQ("GET", "hello")};
static const hv_t m_path_star[] = {REQ("GET", "*")};
static const hv_t m_options_star[] = {REQ("OPTIONS", "*")};
static const hv_t m_method_empty[] = {REQ("", "/hello")};
static const hv_t m_method_lower[] = {REQ("get", "/hello")};
static const hv_t m_host_only[] = {HV(":method", "GET"), HV(":scheme", "http"), HV(":path", "/hello"), HV("host", "x")};
static const hv_t m_host_differs[] = {GET_HELLO, HV("host", "y")};
static const hv_t m_no_authority[] = {HV(":method", "GET"), HV(":scheme", "http"), HV(":path", "/hello")};

#define MC(what, arr, outcome, status) {what, arr, sizeof arr / sizeof arr[0], outcome, status}

static const mcase_t m_cases[] = {
    /* 8.2.2: connection-specific fields (test_h2.c has `connection` and `te: gzip`). */
    MC("keep-alive", m_keep_alive, M_ERROR, 0),
    MC("proxy-connection", m_proxy_conn, M_ERROR, 0),
    MC("transfer-encoding", m_te_chunked, M_ERROR, 0),
    MC("upgrade", m_upgrade, M_ERROR, 0),
    MC("te: trailers", m_te_trailers, M_HELLO, 0),
    MC("te: trailers, gzip", m_te_list, M_ERROR, 0),
    /* 8.3: response pseudo-headers, missing or repeated ones. */
    MC(":status in a request", m_status, M_ERROR, 0),
    MC("no :scheme", m_no_scheme, M_ERROR, 0),
    MC("two :method", m_dup_method, M_ERROR, 0),
    MC("two :scheme", m_dup_scheme, M_ERROR, 0),
    MC("two :authority", m_dup_authority, M_ERROR, 0),
    /* 8.5: CONNECT has :authority and no :scheme or :path. The route table answers it 404. */
    MC("CONNECT without :authority", m_connect_bare, M_ERROR, 0),
    MC("CONNECT with :authority", m_connect, M_STATUS, 404),
    MC("CONNECT with :scheme and :path", m_connect_path, M_ERROR, 0),
    /* 8.2.1: NUL, CR, LF anywhere in a value, whitespace at its ends; a tab or obs-text inside is fine. */
    MC("a value with NUL", m_nul, M_ERROR, 0),
    MC("a value with CR", m_cr, M_ERROR, 0),
    MC("a value with LF", m_lf, M_ERROR, 0),
    MC("a value with a leading space", m_lead_sp, M_ERROR, 0),
    MC("a value with a trailing tab", m_trail_tab, M_ERROR, 0),
    MC("a value with a tab and a space inside", m_inner_tab, M_HELLO, 0),
    MC("a value with bytes 0x80 and 0xff", m_obs_text, M_HELLO, 0),
    /* 8.2.1: a name is a token. */
    MC("a name with a space", m_name_space, M_ERROR, 0),
    MC("a name with a colon", m_name_colon, M_ERROR, 0),
    MC("an empty name", m_name_empty, M_ERROR, 0),
    /* 8.3.1: :path is an absolute path, or * for OPTIONS; :method a token. */
    MC(":path without a leading slash", m_path_rel, M_ERROR, 0),
    MC(":path * for GET", m_path_star, M_ERROR, 0),
    MC("OPTIONS *", m_options_star, M_STATUS, 404),
    MC("an empty :method", m_method_empty, M_ERROR, 0),
    MC("a lowercase :method (not a method the engine knows)", m_method_lower, M_STATUS, 501),
    /* 8.3.1: host instead of :authority is served; a host that differs from :authority SHOULD be malformed
     * (the current server serves it). A request with neither: 8.3.1 does not count :authority among the
     * mandatory pseudo-headers, but an http URI has a host (RFC 9110 4.2.1); the current server refuses it
     * (nghttp2 wants one of the two). Either answer passes for both. */
    MC("host and no :authority", m_host_only, M_HELLO, 0),
    MC("host differing from :authority", m_host_differs, M_HELLO_OR_ERROR, 0),
    MC("no :authority and no host", m_no_authority, M_HELLO_OR_ERROR, 0),
};

TEST(h2_edge_malformed_requests) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  for (size_t i = 0; i < sizeof m_cases / sizeof m_cases[0]; i++) {
    const mcase_t *c = &m_cases[i];
    nghttp2_nv nv[8];
    buf_t block = {0};
    for (size_t k = 0; k < c->n; k++)
      nv[k] = (nghttp2_nv){(uint8_t *)c->h[k].name, (uint8_t *)c->h[k].value, strlen(c->h[k].name), c->h[k].vlen,
                           NGHTTP2_NV_FLAG_NONE};
    h2_encode(cl, nv, c->n, &block);
    int32_t sid = next_sid(cl);
    h2resp_t *r = h2_stream(cl, sid);
    h2_send_frame(cl, NGHTTP2_HEADERS, EH | ES, sid, block.p, block.len);
    buf_free(&block);
    int outcome = c->outcome;
    if (outcome == M_HELLO_OR_ERROR) {
      while (!r->ended && r->rst == H2_NO_RST && !cl->goaway) {
        h2frame_t f;
        int rc = h2_next(cl, &f, 10000);
        if (rc != CL_OK) FAIL("%s: no answer (%s)", c->what, cl_status_name(rc));
      }
      outcome = r->ended ? M_HELLO : M_ERROR;
      cbt_log("%s: %s", c->what, r->ended ? "served" : "refused");
    }
    if (outcome == M_ERROR) {
      if (!expect_rst_or_goaway(cl, r, NGHTTP2_PROTOCOL_ERROR, c->what)) {
        h2_free(cl);
        cl = h2_open(port);
        h2_handshake(cl);
        continue;
      }
    } else if (outcome == M_HELLO) {
      h2_wait1(cl, r, 10000);
      h2_assert_route(r, "GET", "/hello");
    } else {
      buf_t head = {0}, body = {0};
      h2_wait1(cl, r, 10000);
      buf_addf(&head, ":status: %d\r\ndate: " DATE_MASK "\r\ncontent-length: 0\r\n", c->status);
      h2_assert_resp(r, &head, &body, c->what);
      buf_free(&head);
    }
    hello_after(cl);
  }
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}

/* ==== 11. A response header block over SETTINGS_MAX_FRAME_SIZE: HEADERS and CONTINUATION ==== */

#define BIG_HEADERS 8
#define BIG_VALUE 8000

static char big_values[BIG_HEADERS][BIG_VALUE + 1];
static char big_names[BIG_HEADERS][24];

/* A stub answering 200 "ok" with 8 fields of 8,000 bytes each: 64,000 bytes of fields, far over 16 KiB however
 * HPACK codes them. */
static void add_big_head_stub(cb_server_t *srv) {
  cb_header_t hs[BIG_HEADERS];
  cb_stub_t st;
  uint64_t id;
  for (int i = 0; i < BIG_HEADERS; i++) {
    snprintf(big_names[i], sizeof big_names[i], "x-big-%d", i);
    for (int k = 0; k < BIG_VALUE; k++) big_values[i][k] = LINE64[(k * 7 + i) % 64];
    hs[i].name = (cb_str_t){big_names[i], strlen(big_names[i])};
    hs[i].value = (cb_str_t){big_values[i], BIG_VALUE};
  }
  memset(&st, 0, sizeof st);
  st.match.methods = CB_METHOD_GET;
  st.match.path = CB_S("/edge/big-head");
  st.response.status = 200;
  st.response.headers = hs;
  st.response.nheaders = BIG_HEADERS;
  st.response.body_kind = CB_BODY_BYTES;
  st.response.body = CB_S("ok");
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
}

/* RFC 9113 6.2, 6.10: HEADERS without END_HEADERS, then CONTINUATION frames of the same stream with nothing
 * between them, END_HEADERS on the last only, END_STREAM (HEAD) on the HEADERS frame only, every frame within
 * SETTINGS_MAX_FRAME_SIZE. The client's decoder must read the exact fields. */
TEST(h2_edge_response_continuation) {
  static const uint32_t sizes[] = {0, 16777215};
  cb_server_t *srv = start_default();
  add_big_head_stub(srv);
  int port = cb_server_port(srv);
  buf_t head = {0};
  buf_adds(&head, ":status: 200\r\ndate: " DATE_MASK "\r\n");
  for (int i = 0; i < BIG_HEADERS; i++) {
    buf_adds(&head, big_names[i]);
    buf_adds(&head, ": ");
    buf_adds(&head, big_values[i]);
    buf_adds(&head, "\r\n");
  }
  buf_adds(&head, "content-length: 2\r\n");
  static frlog_t log;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    uint32_t limit = sizes[s] ? sizes[s] : 16384;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, sizes[s]}};
    h2cl_t *cl = h2_open(port);
    h2_handshake_with(cl, iv, sizes[s] ? 1 : 0, CONN_WIDE);
    for (int head_only = 0; head_only <= 1; head_only++) {
      const char *method = head_only ? "HEAD" : "GET";
      int32_t sid = next_sid(cl);
      h2resp_t *r = h2_request(cl, sid, method, "/edge/big-head", NULL, 0, NULL, 0);
      log.n = 0;
      run_logged(cl, &r, 1, &log, 10000);
      size_t k = 0, block = 0;
      ASSERT_GE(log.n, 1);
      ASSERT_EQ(log.v[0].type, NGHTTP2_HEADERS);
      ASSERT_EQ(log.v[0].flags & NGHTTP2_FLAG_END_STREAM, head_only ? NGHTTP2_FLAG_END_STREAM : 0);
      ASSERT_EQ(log.v[0].flags & (NGHTTP2_FLAG_PADDED | NGHTTP2_FLAG_PRIORITY), 0);
      while (k < log.n && !(log.v[k].flags & NGHTTP2_FLAG_END_HEADERS)) {
        ASSERT_LE(log.v[k].len, limit);
        block += log.v[k].len;
        k++;
        ASSERT_LT(k, log.n);
        ASSERT_EQ(log.v[k].type, NGHTTP2_CONTINUATION);
        ASSERT_EQ(log.v[k].flags & ~NGHTTP2_FLAG_END_HEADERS, 0);
      }
      ASSERT_LE(log.v[k].len, limit);
      block += log.v[k].len;
      cbt_log("%s, SETTINGS_MAX_FRAME_SIZE %u: a header block of %zu bytes in HEADERS and %zu CONTINUATION", method,
              limit, block, k);
      if (block > limit) ASSERT_GE(k, 1);
      ASSERT_GT(block, 16384);
      k++;
      if (head_only) {
        ASSERT_EQ(k, log.n);
      } else { /* then DATA "ok" with END_STREAM */
        ASSERT_EQ(log.n, k + 1);
        ASSERT_EQ(log.v[k].type, NGHTTP2_DATA);
        ASSERT_EQ(log.v[k].flags, NGHTTP2_FLAG_END_STREAM);
        ASSERT_EQ(log.v[k].len, 2);
      }
      buf_t body = {0};
      if (!head_only) buf_adds(&body, "ok");
      h2_assert_resp(r, &head, &body, method);
      buf_free(&body);
    }
    hello_after(cl);
    h2_free(cl);
  }
  buf_free(&head);
  test_stop(srv);
}

/* ==== 12. GOAWAY from the client ==== */

/* RFC 9113 6.8: the client's GOAWAY (last stream 0: the server opened none) does not cut what it asked for. The
 * current server finishes the streams open, also one the client opened after its GOAWAY (only the receiver of
 * a GOAWAY may open no more streams), whatever the GOAWAY's error code; then, with no stream left, it closes
 * the connection without a GOAWAY of its own (one with NO_ERROR would pass too). */
TEST(h2_edge_client_goaway) {
  typedef struct {
    const char *what;
    const char *payload; /* the GOAWAY's 8 bytes */
    int open_after;      /* a GET /hello on stream 3 after the GOAWAY, while stream 1 is in flight */
    int streams;         /* 0: no stream at all */
  } gcase_t;
  static const gcase_t cases[] = {
      {"GOAWAY(NO_ERROR) with a stream in flight", "\0\0\0\0\0\0\0\0", 0, 1},
      {"GOAWAY(NO_ERROR), then a new stream", "\0\0\0\0\0\0\0\0", 1, 1},
      {"GOAWAY(PROTOCOL_ERROR) with a stream in flight", "\0\0\0\0\0\0\0\1", 0, 1},
      {"GOAWAY(NO_ERROR) with no stream", "\0\0\0\0\0\0\0\0", 0, 0},
  };
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const gcase_t *c = &cases[i];
    h2cl_t *cl = h2_open(port);
    buf_t b = {0};
    cbt_log("case: %s", c->what);
    h2_handshake(cl);
    h2resp_t *r1 = NULL, *r3 = NULL;
    if (c->streams) {
      r1 = h2_stream(cl, 1);
      req_frame(cl, &b, 1, EH | ES, "GET", "/delay/200");
    }
    frame(&b, 8, NGHTTP2_GOAWAY, 0, 0, c->payload, 8);
    if (c->open_after) {
      r3 = h2_stream(cl, 3);
      req_frame(cl, &b, 3, EH | ES, "GET", "/hello");
    }
    send_buf(cl, &b);
    if (r1 != NULL) {
      h2resp_t *rs[] = {r1, r3};
      h2_wait(cl, rs, r3 ? 2 : 1, 10000);
      h2_assert_route(r1, "GET", "/delay/200");
      if (r3 != NULL) h2_assert_route(r3, "GET", "/hello");
    }
    int rc = h2_wait_closed(cl, 10000);
    if (rc != CL_EOF && rc != CL_RESET) FAIL("%s: not closed (%s)", c->what, cl_status_name(rc));
    if (cl->goaway) ASSERT_EQ(cl->goaway_code, NGHTTP2_NO_ERROR);
    cbt_log("%s: closed, %s", c->what, cl->goaway ? "after GOAWAY(NO_ERROR)" : "without a GOAWAY");
    buf_free(&b);
    h2_free(cl);
    h2_check_hello(port);
  }
  test_stop(srv);
}

/* ==== 13. Many streams with bodies of several frames ==== */

TEST(h2_edge_many_streams_interleave) {
  enum { N = 10 };
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t all = {0}, order = {0};
  static frlog_t log;
  h2resp_t *rs[N];
  h2_handshake(cl);
  for (int i = 0; i < N; i++) {
    rs[i] = h2_stream(cl, 1 + 2 * i);
    req_frame(cl, &all, (uint32_t)(1 + 2 * i), EH | ES, "GET", i % 2 ? "/large" : "/file/small");
  }
  send_buf(cl, &all);
  log.n = 0;
  run_logged(cl, rs, N, &log, 20000);
  for (int i = 0; i < N; i++) {
    if (i % 2) assert_large(rs[i]);
    else h2_assert_route(rs[i], "GET", "/file/small");
  }
  /* The order is the server's choice (RFC 9218 leaves it to the scheduler): logged, not asserted. */
  int32_t last = 0;
  int run = 0, switches = 0;
  for (size_t k = 0; k < log.n; k++) {
    if (log.v[k].type != NGHTTP2_DATA) continue;
    if (log.v[k].sid != last && run > 0) {
      buf_addf(&order, "%d*%d ", (int)last, run);
      switches++;
      run = 0;
    }
    last = log.v[k].sid;
    run++;
  }
  buf_addf(&order, "%d*%d", (int)last, run);
  cbt_log("DATA frames by stream (%d switches): %.*s", switches, (int)order.len, order.p);
  buf_reset(&order);
  for (int i = 0; i < N; i++) buf_addf(&order, "%d:%d ", (int)rs[i]->sid, rs[i]->end_seq);
  cbt_log("end order (stream:rank): %.*s", (int)order.len, order.p);
  hello_after(cl);
  buf_free(&all);
  buf_free(&order);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 14. HEAD and 100-continue ==== */

TEST(h2_edge_head_and_continue) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  buf_t b = {0}, head = {0}, body = {0};
  static frlog_t log;
  h2_handshake(cl);
  /* HEAD: one HEADERS frame with END_STREAM and END_HEADERS, no DATA at all, the head of the GET (its
   * content-length included; none for a streamed route). */
  static const char *const paths[] = {"/hello", "/large", "/stream", "/file/small"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    int32_t sid = next_sid(cl);
    h2resp_t *r = h2_request(cl, sid, "HEAD", paths[i], NULL, 0, NULL, 0);
    log.n = 0;
    run_logged(cl, &r, 1, &log, 10000);
    ASSERT_EQ(log.n, 1);
    ASSERT_EQ(log.v[0].type, NGHTTP2_HEADERS);
    ASSERT_EQ(log.v[0].flags, NGHTTP2_FLAG_END_STREAM | NGHTTP2_FLAG_END_HEADERS);
    ASSERT_EQ(r->ndata, 0);
    if (strcmp(paths[i], "/large") == 0) {
      buf_reset(&head);
      buf_reset(&body);
      exp_large(&head, &body);
      buf_reset(&body);
      h2_assert_resp(r, &head, &body, "HEAD /large");
    } else {
      h2_assert_route(r, "HEAD", paths[i]);
    }
  }
  /* expect: 100-continue and the body still to come: an interim HEADERS with :status 100 alone, no END_STREAM
   * (RFC 9113 8.1, RFC 9110 10.1.1), then the final answer after the body. */
  static const char *const expect[] = {"expect", "100-continue"};
  int32_t sid = next_sid(cl);
  h2resp_t *r = h2_stream(cl, sid);
  {
    buf_t block = {0};
    h2_encode_request(cl, "POST", "/echo", expect, 1, &block);
    h2_send_frame(cl, NGHTTP2_HEADERS, EH, sid, block.p, block.len);
    buf_free(&block);
  }
  log.n = 0;
  while (r->nheaders == 0) {
    h2frame_t f;
    ASSERT_EQ(h2_next(cl, &f, 10000), CL_OK);
    if (f.sid == sid) log.v[log.n++] = (fr_t){f.type, f.flags, f.len, f.sid};
  }
  ASSERT_EQ(log.n, 1);
  ASSERT_EQ(log.v[0].type, NGHTTP2_HEADERS);
  ASSERT_EQ(log.v[0].flags, NGHTTP2_FLAG_END_HEADERS);
  ASSERT_MEM_EQ(r->head.p, r->head.len, ":status: 100\r\n", (size_t)14);
  sync_ok(cl);
  ASSERT_EQ(r->nheaders, 1); /* one interim answer only, and nothing final before the body */
  h2_send_body(cl, sid, "hello", 5, 1);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->nheaders, 2);
  r->nheaders = 1; /* h2_assert_resp counts the final block only */
  assert_echo(r, "hello", 5, "POST /echo after 100-continue");
  /* With END_STREAM on the HEADERS there is no body to wait for: no 100, the answer at once. */
  sid = next_sid(cl);
  r = h2_request(cl, sid, "POST", "/echo", expect, 1, NULL, 0);
  h2_wait1(cl, r, 10000);
  assert_echo(r, "", 0, "POST /echo, expect 100-continue, no body");
  /* A body over the limit (10 MB by default) declared: 413 at once instead of 100, then RST_STREAM(NO_ERROR)
   * asking the client to stop sending (RFC 9113 8.1). */
  static const char *const expect_big[] = {"expect", "100-continue", "content-length", "99999999"};
  sid = next_sid(cl);
  r = h2_stream(cl, sid);
  {
    buf_t block = {0};
    h2_encode_request(cl, "POST", "/echo", expect_big, 2, &block);
    h2_send_frame(cl, NGHTTP2_HEADERS, EH, sid, block.p, block.len);
    buf_free(&block);
  }
  h2_wait1(cl, r, 10000);
  sync_ok(cl);
  uint32_t rst = r->rst;
  r->rst = H2_NO_RST; /* h2_assert_resp wants a stream that was not reset: the reset comes after the answer */
  buf_reset(&head);
  buf_reset(&body);
  buf_addf(&head, ":status: 413\r\ndate: " DATE_MASK "\r\ncontent-length: 0\r\n");
  h2_assert_resp(r, &head, &body, "POST /echo, expect 100-continue, content-length over the limit");
  ASSERT_EQ(rst, NGHTTP2_NO_ERROR);
  hello_after(cl);
  buf_free(&b);
  buf_free(&head);
  buf_free(&body);
  h2_free(cl);
  test_stop(srv);
}

/* ==== 15. Stream ids ==== */

TEST(h2_edge_stream_ids) {
  cb_server_t *srv = start_default();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  buf_t b = {0};
  h2_handshake(cl);
  /* The reserved bit of a stream id is ignored (RFC 9113 4.1): HEADERS on 0x80000001 opens stream 1. */
  h2resp_t *r = h2_stream(cl, 1);
  req_frame(cl, &b, 0x80000001u, EH | ES, "GET", "/hello");
  send_buf(cl, &b);
  h2_wait1(cl, r, 10000);
  h2_assert_route(r, "GET", "/hello");
  /* Ids may be skipped (5.1.1): 101 after 1. */
  route_check(cl, 101, "GET", "/hello");
  /* DATA on 51, skipped and so closed (5.1.1). RFC 9113 6.1 asks for a STREAM_CLOSED stream error; 5.1 lets an
   * endpoint make frames on a closed stream a connection error (STREAM_CLOSED). The current server ignores
   * the frame (nghttp2 cannot tell 51 from a stream it has forgotten): all three pass. */
  h2resp_t *r51 = h2_stream(cl, 51);
  h2_send_frame(cl, NGHTTP2_DATA, ES, 51, "x", 1);
  int rc = h2_sync(cl, 10000);
  if (cl->goaway) {
    cbt_log("DATA on a skipped stream: GOAWAY(%s)", h2_err_name(cl->goaway_code));
    ASSERT_EQ(cl->goaway_code, NGHTTP2_STREAM_CLOSED);
    h2_free(cl);
    cl = h2_open(port);
    h2_handshake(cl);
  } else {
    ASSERT_EQ(rc, CL_OK);
    ASSERT(r51->rst == H2_NO_RST || r51->rst == NGHTTP2_STREAM_CLOSED);
    cbt_log("DATA on a skipped stream: %s", r51->rst == H2_NO_RST ? "ignored" : "RST_STREAM(STREAM_CLOSED)");
    ASSERT_EQ(r51->status, 0);
    route_check(cl, 103, "GET", "/hello");
  }
  h2_free(cl);
  /* The largest stream id, 2^31-1, is served; the client has no id left after it (5.1.1). */
  cl = h2_open(port);
  h2_handshake(cl);
  req_frame(cl, &b, 0x7fffffffu, EH | ES, "GET", "/hello");
  send_buf(cl, &b);
  {
    int headers = 0, ended = 0;
    buf_t got = {0};
    while (!ended) {
      h2frame_t f;
      ASSERT_EQ(h2_next(cl, &f, 10000), CL_OK);
      if (f.sid != 0x7fffffff) continue;
      if (f.type == NGHTTP2_HEADERS) headers++;
      if (f.type == NGHTTP2_DATA) buf_add(&got, f.p, f.len);
      ended = (f.type == NGHTTP2_DATA || f.type == NGHTTP2_HEADERS) && (f.flags & NGHTTP2_FLAG_END_STREAM);
      ASSERT(f.type == NGHTTP2_HEADERS || f.type == NGHTTP2_DATA);
    }
    ASSERT_EQ(headers, 1);
    ASSERT_MEM_EQ(got.p, got.len, "Hello, Joe!", (size_t)11);
    buf_free(&got);
  }
  ASSERT_EQ(cl->goaway, 0);
  sync_ok(cl);
  h2_free(cl);
  h2_check_hello(port);
  buf_free(&b);
  test_stop(srv);
}

/* The repeated-block memo (proto/http2.c, block_memo): a block that leaves the decoder's table alone (indexed
 * fields, literals without indexing) is replayed from its last decoding when the same bytes come again; any
 * block that may change the table (a literal with incremental indexing, a table size update, a block in
 * CONTINUATION frames) makes the memo void. Here the same bytes, one reference to dynamic entry 62, must follow
 * every change of that entry: x-m "one", again "one" (replayed), then "two" after a block that inserts, then
 * "three" after a block that shrinks the table to 0 and inserts again, then "four" after a block in two frames. */
static void memo_block(buf_t *b, const char *tail, size_t tail_len) {
  /* :method GET, :scheme http (indexed), :path /headers and :authority x (literals without indexing) */
  static const uint8_t pseudo[] = {0x82, 0x86, 0x04, 8, '/', 'h', 'e', 'a', 'd', 'e', 'r', 's', 0x01, 1, 'x'};
  buf_reset(b);
  buf_add(b, pseudo, sizeof pseudo);
  buf_add(b, tail, tail_len);
}

static void memo_expect(h2cl_t *cl, int32_t sid, const buf_t *b, const char *value, int split) {
  h2resp_t *r = h2_stream(cl, sid);
  if (split) {
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, sid, b->p, 5);
    h2_send_frame(cl, NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, sid, b->p + 5, b->len - 5);
  } else {
    h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, sid, b->p, b->len);
  }
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  char want[64];
  snprintf(want, sizeof want, "{\"x-m\":\"%s\"}", value);
  ASSERT_MEM_EQ(r->body.p, r->body.len, want, strlen(want));
}

TEST(h2_edge_repeated_block_memo) {
  cb_server_t *srv = start_default();
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  buf_t b = {0};
  /* 0x40: a literal with incremental indexing, new name */
  memo_block(&b, "\x40\x03x-m\x03one", 9);
  memo_expect(cl, 1, &b, "one", 0);
  buf_t ref = {0};
  memo_block(&ref, "\xbe", 1); /* index 62: the newest dynamic entry */
  memo_expect(cl, 3, &ref, "one", 0);
  memo_expect(cl, 5, &ref, "one", 0); /* the same bytes: replayed */
  memo_block(&b, "\x40\x03x-m\x03two", 9);
  memo_expect(cl, 7, &b, "two", 0);
  memo_expect(cl, 9, &ref, "two", 0);
  /* a table size update to 0 (everything evicted), one back to 4096, then an insert */
  memo_block(&b, "\x40\x03x-m\x05three", 11);
  static const char upd[] = {0x20, 0x3f, (char)0xe1, 0x1f}; /* size 0, then size 4096 (31 + 4065) */
  buf_t sized = {0};
  buf_add(&sized, upd, sizeof upd);
  buf_add(&sized, b.p, b.len);
  memo_expect(cl, 11, &sized, "three", 0);
  memo_expect(cl, 13, &ref, "three", 0);
  /* an insert in a block cut into HEADERS and CONTINUATION */
  memo_block(&b, "\x40\x03x-m\x04" "four", 10);
  memo_expect(cl, 15, &b, "four", 1);
  memo_expect(cl, 17, &ref, "four", 0);
  memo_expect(cl, 19, &ref, "four", 0);
  ASSERT_EQ(cl->goaway, 0);
  buf_free(&b);
  buf_free(&ref);
  buf_free(&sized);
  h2_free(cl);
  test_stop(srv);
}
