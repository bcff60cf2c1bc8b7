/* Faults (docs/faults.md) on the C engine over real sockets: each kind's exact bytes over HTTP/1.1, the
 * HTTP/2 kinds frame by frame, stub faults through the C API, the journal's fault field, the faults counter,
 * seeded rates, the parameter bounds (400), and a server that serves /hello right after every fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"

static cb_server_t *start_one(void) {
  cb_config_t cfg;
  test_config(&cfg);
  return test_start(&cfg);
}

/* GET /fault/spec on a new connection: everything until the server closes (or resets), dates masked. */
static int fault_get(int port, const char *spec, buf_t *got) {
  int fd = cl_connect(port);
  char req[512];
  snprintf(req, sizeof req, "GET /fault/%s HTTP/1.1\r\nHost: x\r\n\r\n", spec);
  cl_sends(fd, req);
  int r = cl_read_close(fd, got, 10000);
  close(fd);
  mask_dates(got->p, got->len);
  return r;
}

static void exp_gen(buf_t *b, size_t from, size_t n) {
  for (size_t i = from; i < from + n; i++) {
    char ch = (char)(i % 251);
    buf_add(b, &ch, 1);
  }
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void check(int port, const char *spec, const buf_t *exp, int how) {
  buf_t got = {0};
  int r = fault_get(port, spec, &got);
  cbt_log("%s: %s", spec, cl_status_name(r));
  ASSERT_MEM_EQ(got.p, got.len, exp->p, exp->len);
  ASSERT_EQ(r, how);
  buf_free(&got);
}

TEST(fault_h1_exact) {
  cb_server_t *srv = start_one();
  int port = cb_server_port(srv);
  buf_t e = {0};

  exp_head(&e, 200, "application/octet-stream", NULL, 10, CONN_NONE);
  exp_gen(&e, 0, 3);
  check(port, "truncated?length=10&bytes=3", &e, CL_EOF);

  buf_reset(&e);
  exp_head(&e, 200, "application/octet-stream", NULL, 4, CONN_NONE);
  exp_gen(&e, 0, 6);
  check(port, "overlong?length=4&bytes=2", &e, CL_EOF);

  buf_reset(&e);
  exp_head(&e, 200, "application/octet-stream", NULL, CL_CHUNKED, CONN_NONE);
  buf_adds(&e, "3\r\n");
  exp_gen(&e, 0, 3);
  buf_adds(&e, "\r\nzz\r\n");
  check(port, "malformed_chunk?bytes=3", &e, CL_EOF);

  buf_reset(&e);
  exp_head(&e, 200, "application/octet-stream", NULL, CL_CHUNKED, CONN_NONE);
  buf_adds(&e, "5\r\n");
  exp_gen(&e, 0, 5);
  buf_adds(&e, "\r\n");
  check(port, "missing_last_chunk?length=5", &e, CL_EOF);

  buf_reset(&e);
  check(port, "empty", &e, CL_EOF);
  check(port, "hang?ms=100", &e, CL_EOF);
  check(port, "reset", &e, CL_RESET);

  exp_head(&e, 200, "application/octet-stream", NULL, 1024, CONN_NONE);
  check(port, "reset?at=head", &e, CL_RESET);
  exp_gen(&e, 0, 100);
  check(port, "reset?bytes=100", &e, CL_RESET);

  /* garbage: 8 little-endian bytes of splitmix64(seed + k) at a time. */
  buf_reset(&e);
  for (uint64_t k = 0; k < 3; k++) {
    uint64_t v = splitmix64(5 + k);
    buf_add(&e, &v, k < 2 ? 8 : 4);
  }
  check(port, "garbage?bytes=20&seed=5", &e, CL_EOF);

  int fd;
  buf_reset(&e);
  buf_adds(&e, "HTTP/1.1 200 OK\ncontent-length: 2\n\nok");
  check(port, "raw?preset=bare_lf", &e, CL_EOF);
  buf_reset(&e);
  buf_adds(&e, "HTTP/1.1 200 OK\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n");
  check(port, "raw?preset=cl_te", &e, CL_EOF);
  buf_reset(&e);
  buf_adds(&e, "abc def+");
  check(port, "raw?data=abc+def%2B", &e, CL_EOF);

  /* trailers and slow_head: answers the fault writes itself; the connection goes on after each. */
  buf_reset(&e);
  fd = cl_connect(port);
  buf_adds(&e, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-type: application/octet-stream\r\n"
                "transfer-encoding: chunked\r\ntrailer: x-trailer\r\n\r\n5\r\n");
  exp_gen(&e, 0, 5);
  buf_adds(&e, "\r\n0\r\nx-trailer: cbench\r\n\r\n");
  ROUNDTRIP_S(fd, "GET /fault/trailers?length=5 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  buf_reset(&e);
  buf_adds(&e, "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 3\r\n\r\n");
  exp_gen(&e, 0, 3);
  ROUNDTRIP_S(fd, "GET /fault/slow_head?length=3&pieces=5&ms=50 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  close(fd);

  /* The declared answer when the rate says no; the dribbled one whole. */
  buf_reset(&e);
  exp_head(&e, 200, "application/octet-stream", NULL, 7, CONN_NONE);
  exp_gen(&e, 0, 7);
  fd = cl_connect(port);
  ROUNDTRIP_S(fd, "GET /fault/reset?rate=0&length=7 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  ROUNDTRIP_S(fd, "GET /fault/dribble?length=7&pieces=7&ms=70 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  ROUNDTRIP_S(fd, "GET /fault/delay?length=7&ms=5&max=20&seed=9 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  ROUNDTRIP_S(fd, "GET /fault/drip?length=7&ms=35 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  /* raw with close=0: the bytes are the answer and the connection goes on. */
  buf_reset(&e);
  buf_adds(&e, "HTTP/1.1 204 No Content\r\n\r\n");
  ROUNDTRIP_S(fd, "GET /fault/raw?data=HTTP%2F1.1%20204%20No%20Content%0D%0A%0D%0A&close=0 HTTP/1.1\r\nHost: x\r\n\r\n",
              &e);
  /* HTTP/2 kinds over HTTP/1.1: 501, the connection goes on. */
  buf_reset(&e);
  exp_head(&e, 501, NULL, NULL, 0, CONN_NONE);
  ROUNDTRIP_S(fd, "GET /fault/rst_stream HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  ROUNDTRIP_S(fd, "GET /fault/goaway?code=0 HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  buf_reset(&e);
  exp_route(&e, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  close(fd);

  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.faults, 19);
  ASSERT_EQ(st.resets, 0);
  buf_free(&e);
  test_stop(srv);
}

TEST(fault_bad_params_400) {
  static const char *const bad[] = {
      "nosuch", "reset?at=later", "reset?bytes=16777217", "reset?length=10&bytes=11", "garbage?bytes=0",
      "garbage?bytes=65537", "hang?ms=3600001", "hang?ms=60001", "delay?ms=1&max=60001", "truncated?length=0", "truncated?length=5&bytes=5",
      "overlong?bytes=0", "dribble?pieces=0", "dribble?length=2&pieces=3", "drip?length=0", "drip?length=100001", "delay?ms=10&max=5",
      "delay?max=5&sigma=1", "delay?sigma=10.5", "rst_stream?code=4294967296", "goaway?last=2147483648",
      "reset?rate=1.1", "reset?rate=0.1234567891", "reset?rate=.5", "reset?seed=-1", "reset?x=1", "reset?at",
      "reset?=1", "reset?at=", "raw", "raw?preset=x", "raw?data=%zz", "raw?data=%2", "raw?data=a&data=b",
      "raw?preset=bare_lf&data=x", "reset?bytes=99999999999999999999999"};
  cb_server_t *srv = start_one();
  int fd = cl_connect(cb_server_port(srv));
  buf_t e = {0};
  exp_head(&e, 400, NULL, NULL, 0, CONN_NONE);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char req[256];
    int n = snprintf(req, sizeof req, "GET /fault/%s HTTP/1.1\r\nHost: x\r\n\r\n", bad[i]);
    cbt_log("%s", bad[i]);
    ROUNDTRIP(fd, req, (size_t)n, &e);
  }
  close(fd);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.faults, 0);
  ASSERT_EQ(st.status_400, sizeof bad / sizeof bad[0]);
  buf_free(&e);
  test_stop(srv);
}

TEST(fault_h2_frames) {
  cb_server_t *srv = start_one();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);

  h2resp_t *r = h2_request(cl, 1, "GET", "/fault/rst_stream?code=8", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->rst, 8);
  ASSERT_EQ(r->status, 0);

  r = h2_request(cl, 3, "GET", "/fault/rst_stream?bytes=5&length=9", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->rst, 2);
  buf_t e = {0};
  exp_gen(&e, 0, 5);
  ASSERT_MEM_EQ(r->body.p, r->body.len, e.p, e.len);
  ASSERT_EQ(r->ended, 0);

  /* truncated: content-length 10, END_STREAM after 3 bytes. */
  r = h2_request(cl, 5, "GET", "/fault/truncated?length=10&bytes=3", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->rst, H2_NO_RST);
  ASSERT_EQ(r->ended, 1);
  ASSERT(memmem(r->head.p, r->head.len, "content-length: 10\r\n", 20) != NULL);
  ASSERT_EQ(r->body.len, 3);

  /* trailers: DATA without END_STREAM, then a trailing HEADERS block that ends the stream. */
  r = h2_request(cl, 7, "GET", "/fault/trailers?length=6", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->nheaders, 2);
  ASSERT_EQ(r->ended, 1);
  ASSERT_EQ(r->body.len, 6);
  ASSERT(memmem(r->head.p, r->head.len, "x-trailer: cbench\r\n", 19) != NULL);

  /* HTTP/1.1-only kinds: 501 on the stream. */
  r = h2_request(cl, 9, "GET", "/fault/raw?preset=bare_lf", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 501);

  /* A graceful GOAWAY: the stream is answered, then the connection ends. */
  r = h2_request(cl, 11, "GET", "/fault/goaway?code=0&last=11&length=4", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, 4);
  ASSERT_EQ(cl->goaway, 1);
  ASSERT_EQ(cl->goaway_code, 0);
  ASSERT_EQ(cl->goaway_last, 11);
  ASSERT(h2_wait_closed(cl, 10000) != CL_TIMEOUT);
  h2_free(cl);

  /* A cutting GOAWAY: code and last as asked, the stream never answered. */
  cl = h2_open(port);
  h2_handshake(cl);
  r = h2_request(cl, 1, "GET", "/fault/goaway?code=11&last=0", NULL, 0, NULL, 0);
  ASSERT_EQ(h2_wait_goaway(cl, 10000), CL_OK);
  ASSERT_EQ(cl->goaway_code, 11);
  ASSERT_EQ(cl->goaway_last, 0);
  ASSERT(h2_wait_closed(cl, 10000) != CL_TIMEOUT);
  ASSERT_EQ(r->status, 0);
  h2_free(cl);

  /* A reset cuts the whole connection. */
  cl = h2_open(port);
  h2_handshake(cl);
  r = h2_request(cl, 1, "GET", "/fault/reset", NULL, 0, NULL, 0);
  ASSERT_EQ(h2_wait_closed(cl, 10000), CL_RESET);
  h2_free(cl);

  h2_check_hello(port);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.faults, 7);
  ASSERT_EQ(st.resets, 0);
  buf_free(&e);
  test_stop(srv);
}

static int idle(const cb_stats_t *st, const void *arg) {
  (void)arg;
  return st->conns_open == 0;
}

TEST(fault_stub_journal_rate) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  static const cb_header_t hdrs[] = {{CB_S("x-a"), CB_S("1")}};
  cb_stub_t st = {.match = {.path = CB_S("/t")},
                  .response = {.status = 201, .headers = hdrs, .nheaders = 1, .body_kind = CB_BODY_BYTES,
                               .body = CB_S("unused"), .fault = CB_S("truncated?length=10&bytes=3")}};
  uint64_t id;
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
  st.response.fault = CB_S("reset?at=nowhere");
  uint64_t bad;
  ASSERT_ERR(cb_server_route_add(srv, &st, &bad), CB_EINVAL);
  st.response.fault = (cb_str_t){"reset\0", 6};
  ASSERT_ERR(cb_server_route_add(srv, &st, &bad), CB_EINVAL);

  int fd = cl_connect(port);
  cl_sends(fd, "GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
  buf_t got = {0}, e = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
  close(fd);
  mask_dates(got.p, got.len);
  exp_head(&e, 201, NULL, "x-a: 1\r\n", 10, CONN_NONE);
  exp_gen(&e, 0, 3);
  ASSERT_MEM_EQ(got.p, got.len, e.p, e.len);

  /* A seeded rate: the n-th request gets the fault exactly when the draw says so. */
  cb_stub_t flaky = {.match = {.path = CB_S("/u")},
                     .response = {.status = 200, .body_kind = CB_BODY_BYTES, .body = CB_S("ok"),
                                  .fault = CB_S("empty?rate=0.3&seed=42")}};
  ASSERT_ERR(cb_server_route_add(srv, &flaky, &id), 0);
  int fired = 0;
  for (uint64_t n = 0; n < 40; n++) {
    int want = splitmix64(42 ^ splitmix64(n)) % 1000000000u < 300000000u;
    buf_reset(&got);
    fd = cl_connect(port);
    cl_sends(fd, "GET /u HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
    close(fd);
    ASSERT_EQ(got.len == 0, want);
    fired += want;
  }
  ASSERT(fired > 0 && fired < 40);

  cb_request_filter_t f = {.path = CB_S("/t")};
  cb_request_list_t *list;
  ASSERT_ERR(cb_server_requests(srv, &f, &list), 0);
  ASSERT_EQ(list->count, 1);
  ASSERT_MEM_EQ(list->items[0].fault.ptr, list->items[0].fault.len, "truncated", (size_t)9);
  ASSERT_EQ(list->items[0].status, 201);
  ASSERT_EQ(list->items[0].bytes_out, 3);
  cb_request_list_free(list);
  f.path = CB_S("/u");
  ASSERT_ERR(cb_server_requests(srv, &f, &list), 0);
  ASSERT_EQ(list->count, 40);
  int empties = 0;
  for (size_t i = 0; i < list->count; i++) empties += list->items[i].fault.len > 0;
  ASSERT_EQ(empties, fired);
  cb_request_list_free(list);

  cb_stats_t s;
  wait_stats(srv, &s, idle, NULL, 10000);
  ASSERT_EQ(s.faults, 1 + (uint64_t)fired);
  ASSERT_EQ(s.conns_open, 0);
  buf_free(&got);
  buf_free(&e);
  test_stop(srv);
}

TEST(fault_h2_settings_violation_stall) {
  cb_server_t *srv = start_one();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  int before = cl->settings;
  h2resp_t *r = h2_request(cl, 1, "GET", "/fault/settings?max_frame=20000&window=1000&length=5", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, 5);
  ASSERT_EQ(cl->settings, before + 1);
  ASSERT_EQ(cl->srv_max_frame, 20000);
  ASSERT_EQ(cl->srv_initial_window, 1000);

  /* hang?at=head: HEADERS, then no DATA until the server gives up and closes. */
  r = h2_request(cl, 3, "GET", "/fault/hang?at=head&ms=100", NULL, 0, NULL, 0);
  ASSERT(h2_wait_closed(cl, 10000) != CL_TIMEOUT);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->body.len, 0);
  ASSERT_EQ(r->ended, 0);
  h2_free(cl);

  /* violation: the head, then DATA on stream 0. */
  cl = h2_open(port);
  h2_handshake(cl);
  r = h2_request(cl, 1, "GET", "/fault/violation?ms=100", NULL, 0, NULL, 0);
  h2frame_t f;
  int seen = 0;
  while (!seen && h2_next(cl, &f, 10000) == CL_OK) seen = f.type == 0 && f.sid == 0 && f.len == 2;
  ASSERT(seen);
  ASSERT_EQ(r->status, 200);
  ASSERT(h2_wait_closed(cl, 10000) != CL_TIMEOUT);
  h2_free(cl);

  h2_check_hello(port);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.faults, 3);
  test_stop(srv);
}
