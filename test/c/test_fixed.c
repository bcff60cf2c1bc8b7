/* Whole fixed responses (cb__res_fixed): /, /hello, /json, /delay and the usual stub, which HTTP/1.1 sends from
 * its worker's memo of whole answers in one copy, and every way around that memo (HEAD, HTTP/1.0 keep-alive and
 * close, Connection: close, pipelined requests in one read, a new Date line, an answer from a timer, a body too
 * big for the memo, chunked stubs), byte for byte; the journal's status and bytes_out; HTTP/2 unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"
#include "testing.h"

#define DATE_A "Tue, 01 Dec 2026 10:00:00 GMT"
#define DATE_B "Tue, 01 Dec 2026 10:00:01 GMT"
#define HELLO_HEAD(date) "HTTP/1.1 200 OK\r\ndate: " date "\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n"
#define HELLO(date) HELLO_HEAD(date) "\r\nHello, Joe!"
#define ROOT(date) "HTTP/1.1 200 OK\r\ndate: " date "\r\ncontent-length: 12\r\n\r\nhello world!"
#define JSON(date)                                                                                          \
  "HTTP/1.1 200 OK\r\ndate: " date "\r\ncontent-type: application/json\r\ncontent-length: 25\r\n\r\n"      \
  "{\"message\":\"Hello, Joe!\"}"
#define GET(path) "GET " path " HTTP/1.1\r\nhost: x\r\n\r\n"

typedef struct {
  cb__testconn_t *tc;
  buf_t out;
  int closed;
} fconn_t;

static void sink(void *arg, const char *data, size_t len) { buf_add(&((fconn_t *)arg)->out, data, len); }

static void f_open(fconn_t *f) {
  cb_config_t cfg;
  cb_config_init(&cfg);
  memset(f, 0, sizeof *f);
  f->tc = cb__testconn_new(&cfg, sink, f);
  ASSERT_NOT_NULL(f->tc);
  cb__testconn_set_date(f->tc, DATE_A);
}

/* Feeds req as one read and expects exactly `exp` as the answer, and the connection closed or not. */
static void step(fconn_t *f, const char *req, const char *exp, int closed) {
  cbt_log("%s", req);
  buf_reset(&f->out);
  f->closed = cb__testconn_feed(f->tc, req, strlen(req));
  ASSERT_MEM_EQ(f->out.p, f->out.len, exp, strlen(exp));
  ASSERT_EQ(f->closed, closed);
}

static void f_close(fconn_t *f) {
  ASSERT_EQ(cb__testconn_free(f->tc), 0);
  buf_free(&f->out);
}

/* One keep-alive connection: the first answer makes the memo, the next ones come from it; HEAD, other fixed
 * answers, a new Date line, HTTP/1.0 keep-alive, pipelined requests and a last Connection: close each get
 * their own bytes. */
TEST(fixed_h1_memo_and_fallbacks) {
  fconn_t f;
  f_open(&f);
  step(&f, GET("/hello"), HELLO(DATE_A), 0);
  step(&f, GET("/hello"), HELLO(DATE_A), 0);
  step(&f, "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", HELLO_HEAD(DATE_A) "\r\n", 0);
  step(&f, GET("/hello"), HELLO(DATE_A), 0);
  step(&f, GET("/"), ROOT(DATE_A), 0);
  step(&f, GET("/json"), JSON(DATE_A), 0);
  step(&f, GET("/hello"), HELLO(DATE_A), 0);
  step(&f, GET("/"), ROOT(DATE_A), 0);
  /* The Date line changes between two requests (the memo's date_gen), and back to an earlier value. */
  cb__testconn_set_date(f.tc, DATE_B);
  step(&f, GET("/hello"), HELLO(DATE_B), 0);
  step(&f, GET("/hello"), HELLO(DATE_B), 0);
  cb__testconn_set_date(f.tc, DATE_A);
  step(&f, GET("/hello"), HELLO(DATE_A), 0);
  /* HTTP/1.0 with keep-alive on the same connection, then HTTP/1.1 again. */
  step(&f, "GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
       HELLO_HEAD(DATE_A) "connection: keep-alive\r\n\r\nHello, Joe!", 0);
  step(&f, "GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
       HELLO_HEAD(DATE_A) "connection: keep-alive\r\n\r\nHello, Joe!", 0);
  step(&f, GET("/hello"), HELLO(DATE_A), 0);
  /* Pipelined in one read: the answers leave together, in order. */
  step(&f,
       GET("/hello") "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n" GET("/json") GET("/hello") GET("/") GET("/hello"),
       HELLO(DATE_A) HELLO_HEAD(DATE_A) "\r\n" JSON(DATE_A) HELLO(DATE_A) ROOT(DATE_A) HELLO(DATE_A), 0);
  /* The last request asks to close: its head says so, though the memo holds the keep-alive answer. */
  step(&f, "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
       HELLO_HEAD(DATE_A) "connection: close\r\n\r\nHello, Joe!", 1);
  f_close(&f);
}

/* Pipelined requests whose last one closes, in one read: the answers before it keep the connection. */
TEST(fixed_h1_pipelined_close) {
  fconn_t f;
  f_open(&f);
  step(&f, GET("/hello") GET("/hello") "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n" GET("/hello"),
       HELLO(DATE_A) HELLO(DATE_A) HELLO_HEAD(DATE_A) "connection: close\r\n\r\nHello, Joe!", 1);
  f_close(&f);
}

/* HTTP/1.0: keep-alive, then a request without it on the same connection (connection: close, then closed);
 * and HTTP/1.0 without keep-alive as the first request. */
TEST(fixed_h1_http10) {
  fconn_t f;
  f_open(&f);
  step(&f, "GET /hello HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
       HELLO_HEAD(DATE_A) "connection: keep-alive\r\n\r\nHello, Joe!", 0);
  step(&f, "GET /hello HTTP/1.0\r\n\r\n", HELLO_HEAD(DATE_A) "connection: close\r\n\r\nHello, Joe!", 1);
  f_close(&f);
  f_open(&f);
  step(&f, "GET /json HTTP/1.0\r\n\r\n",
       "HTTP/1.1 200 OK\r\ndate: " DATE_A "\r\ncontent-type: application/json\r\ncontent-length: 25\r\n"
       "connection: close\r\n\r\n{\"message\":\"Hello, Joe!\"}",
       1);
  f_close(&f);
}

/* An answer from a timer (/delay: the request is paused, its end resumes parsing) with a fixed answer
 * pipelined behind it, twice: both in order, and the connection goes on. */
TEST(fixed_h1_from_a_timer) {
  fconn_t f;
  f_open(&f);
  static const char ok[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\n"
                           "content-length: 2\r\n\r\nok";
  static const char hello[] = HELLO(DATE_MASK);
  for (int round = 0; round < 2; round++) {
    buf_reset(&f.out);
    f.closed = cb__testconn_feed(f.tc, GET("/delay/1") GET("/hello"), strlen(GET("/delay/1") GET("/hello")));
    uint64_t deadline = now_ms() + 5000;
    while (f.out.len < strlen(ok) + strlen(hello) && now_ms() < deadline) {
      f.closed = cb__testconn_run(f.tc, 0);
      sleep_ms(1);
    }
    mask_dates(f.out.p, f.out.len); /* the loop ran: the date timer may have refreshed the line */
    buf_t exp = {0};
    buf_adds(&exp, ok);
    buf_adds(&exp, hello);
    ASSERT_MEM_EQ(f.out.p, f.out.len, exp.p, exp.len);
    ASSERT_EQ(f.closed, 0);
    buf_free(&exp);
  }
  f_close(&f);
}

static cb_stub_t stub(const char *path, int status, const char *body) {
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.methods = CB_METHOD_GET;
  st.match.path = (cb_str_t){path, strlen(path)};
  st.response.status = status;
  st.response.body_kind = CB_BODY_BYTES;
  st.response.body = (cb_str_t){body, strlen(body)};
  return st;
}

static void add(fconn_t *f, const cb_stub_t *st) {
  uint64_t id;
  ASSERT_EQ(cb__testconn_route_add(f->tc, st, &id), 0);
}

/* Stubs: the usual one (headers, a body in one piece) from the memo, HEAD, a body too big for the memo, one
 * chunk, no body (204), a delayed one, and two stubs with the same status, headers and length but other bodies
 * asked in turn. */
TEST(fixed_h1_stubs) {
  static const cb_header_t hdrs[] = {{CB_S("Content-Type"), CB_S("application/json")}, {CB_S("x-trace"), CB_S("a")}};
  fconn_t f;
  f_open(&f);
  cb_stub_t usual = stub("/usual", 201, "{\"id\":42}");
  usual.response.headers = hdrs;
  usual.response.nheaders = 2;
  add(&f, &usual);
  cb_stub_t same1 = stub("/same1", 200, "one");
  cb_stub_t same2 = stub("/same2", 200, "two");
  add(&f, &same1);
  add(&f, &same2);
  char *big = malloc(3001);
  ASSERT_NOT_NULL(big);
  for (int i = 0; i < 3000; i++) big[i] = (char)('a' + i % 26);
  big[3000] = '\0';
  cb_stub_t large = stub("/large-stub", 200, big);
  add(&f, &large);
  cb_stub_t chunk = stub("/chunk", 200, "abcdef");
  chunk.response.chunks = 1;
  add(&f, &chunk);
  cb_stub_t empty = stub("/empty", 204, "");
  add(&f, &empty);
  cb_stub_t late = stub("/late", 200, "late");
  late.response.delay_ms = 1;
  add(&f, &late);

  for (int i = 0; i < 3; i++) step(&f, GET("/usual"), "HTTP/1.1 201 Created\r\ndate: " DATE_A
                                   "\r\ncontent-type: application/json\r\nx-trace: a\r\ncontent-length: 9\r\n\r\n{\"id\":42}", 0);
  step(&f, "HEAD /usual HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 201 Created\r\ndate: " DATE_A
       "\r\ncontent-type: application/json\r\nx-trace: a\r\ncontent-length: 9\r\n\r\n", 0);
  for (int i = 0; i < 3; i++) {
    step(&f, GET("/same1"), "HTTP/1.1 200 OK\r\ndate: " DATE_A "\r\ncontent-length: 3\r\n\r\none", 0);
    step(&f, GET("/same2"), "HTTP/1.1 200 OK\r\ndate: " DATE_A "\r\ncontent-length: 3\r\n\r\ntwo", 0);
  }
  buf_t exp = {0};
  for (int i = 0; i < 2; i++) {
    buf_reset(&exp);
    buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_A "\r\ncontent-length: 3000\r\n\r\n");
    buf_adds(&exp, big);
    buf_add(&exp, "", 1);
    step(&f, GET("/large-stub"), exp.p, 0);
  }
  for (int i = 0; i < 2; i++)
    step(&f, GET("/chunk"), "HTTP/1.1 200 OK\r\ndate: " DATE_A "\r\ntransfer-encoding: chunked\r\n\r\n"
         "6\r\nabcdef\r\n0\r\n\r\n", 0);
  step(&f, GET("/empty"), "HTTP/1.1 204 No Content\r\ndate: " DATE_A "\r\n\r\n", 0);
  /* Pipelined in one read around the delayed stub: it is answered from its timer, the rest after it. */
  buf_reset(&f.out);
  static const char pipe[] = GET("/usual") GET("/late") GET("/usual") GET("/late");
  f.closed = cb__testconn_feed(f.tc, pipe, sizeof pipe - 1);
  buf_reset(&exp);
  for (int i = 0; i < 2; i++) {
    buf_adds(&exp, "HTTP/1.1 201 Created\r\ndate: " DATE_MASK "\r\ncontent-type: application/json\r\n"
                   "x-trace: a\r\ncontent-length: 9\r\n\r\n{\"id\":42}");
    buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-length: 4\r\n\r\nlate");
  }
  uint64_t deadline = now_ms() + 5000;
  while (f.out.len < exp.len && now_ms() < deadline) {
    f.closed = cb__testconn_run(f.tc, 0);
    sleep_ms(1);
  }
  mask_dates(f.out.p, f.out.len);
  ASSERT_MEM_EQ(f.out.p, f.out.len, exp.p, exp.len);
  ASSERT_EQ(f.closed, 0);
  cb__testconn_set_date(f.tc, DATE_B);
  step(&f, "GET /usual HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", "HTTP/1.1 201 Created\r\ndate: " DATE_B
       "\r\ncontent-type: application/json\r\nx-trace: a\r\ncontent-length: 9\r\nconnection: close\r\n\r\n{\"id\":42}", 1);
  buf_free(&exp);
  free(big);
  f_close(&f);
}

/* The journal records a fixed answer's status and body bytes as before: 11 for GET /hello (from the memo or
 * not), 0 for HEAD, the body's length for a stub. */
TEST(fixed_journal_status_and_bytes) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.journal = 100;
  cb_server_t *srv = test_start(&cfg);
  cb_stub_t st = stub("/s", 202, "stubbed");
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  int fd = cl_connect(cb_server_port(srv));
  buf_t exp = {0};
  exp_head(&exp, 200, "text/plain", NULL, 11, CONN_NONE);
  buf_adds(&exp, "Hello, Joe!");
  ROUNDTRIP_S(fd, GET("/hello"), &exp);
  ROUNDTRIP_S(fd, GET("/hello"), &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, "text/plain", NULL, 11, CONN_NONE);
  ROUNDTRIP_S(fd, "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_head(&exp, 202, NULL, NULL, 7, CONN_NONE);
  buf_adds(&exp, "stubbed");
  ROUNDTRIP_S(fd, GET("/s"), &exp);
  ROUNDTRIP_S(fd, GET("/s"), &exp);
  cb_request_list_t *list = wait_journal(srv, NULL, 5, 5000);
  ASSERT_EQ(list->count, 5);
  static const struct {
    int status;
    uint64_t bytes_out;
    const char *method;
  } want[] = {{200, 11, "GET"}, {200, 11, "GET"}, {200, 0, "HEAD"}, {202, 7, "GET"}, {202, 7, "GET"}};
  for (size_t i = 0; i < 5; i++) {
    ASSERT_EQ(list->items[i].status, want[i].status);
    ASSERT_EQ(list->items[i].bytes_out, want[i].bytes_out);
    ASSERT_STR_EQ(list->items[i].method.ptr, want[i].method);
  }
  cb_request_list_free(list);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}

/* HTTP/2 takes the three steps (no whole-response step of its own): the same heads and bodies as always, the
 * body in one DATA frame, none for HEAD. */
TEST(fixed_h2_unchanged) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  static const cb_header_t hdrs[] = {{CB_S("x-trace"), CB_S("a")}};
  cb_stub_t st = stub("/s", 202, "stubbed");
  st.response.headers = hdrs;
  st.response.nheaders = 1;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  int32_t sid = 1;
  for (int i = 0; i < 2; i++, sid += 6) {
    h2resp_t *r = h2_request(cl, sid, "GET", "/hello", NULL, 0, NULL, 0);
    h2_wait1(cl, r, 15000);
    h2_assert_route(r, "GET", "/hello");
    ASSERT_EQ(r->ndata, 1);
    r = h2_request(cl, sid + 2, "HEAD", "/hello", NULL, 0, NULL, 0);
    h2_wait1(cl, r, 15000);
    h2_assert_route(r, "HEAD", "/hello");
    ASSERT_EQ(r->ndata, 0);
    r = h2_request(cl, sid + 4, "GET", "/s", NULL, 0, NULL, 0);
    h2_wait1(cl, r, 15000);
    buf_t head = {0}, body = {0};
    buf_adds(&head, ":status: 202\r\ndate: " DATE_MASK "\r\nx-trace: a\r\ncontent-length: 7\r\n");
    buf_adds(&body, "stubbed");
    h2_assert_resp(r, &head, &body, "GET /s");
    ASSERT_EQ(r->ndata, 1);
    buf_free(&head);
    buf_free(&body);
  }
  h2_free(cl);
  test_stop(srv);
}
