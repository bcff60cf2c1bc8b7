/* Proxied answers that are gathered (for a fault, or the recorder) or held (a delayed forward), and recordings
 * replayed: the body of a faulted answer still the upstream's when it leaves (it was queued by reference and
 * freed with the request: a use after free), a HEAD's declared length under a fault and over max_body_bytes, a
 * HEAD not recorded, a query value holding `+` or `%` replayed; and clients leaving at every stage of a gathered
 * or held exchange, then the server stopping with some in flight (these last assert nothing in the normal build:
 * under ASan they fail on a freed block or a leak). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "engine.h"
#include "h2client.h"

#define H(n, v) {n, sizeof(n) - 1, v, sizeof(v) - 1}

static const char *az_tmp(const char *name) {
  static char p[512];
  const char *t = getenv("TMPDIR");
  snprintf(p, sizeof p, "%s/cbench-pxans-%d-%s", t && *t ? t : "/tmp", (int)getpid(), name);
  return p;
}

static cb_server_t *az_upstream(void) {
  cb_config_t cfg;
  test_config(&cfg);
  return test_start(&cfg);
}

/* A catch-all proxy stub to port: record, fault, delay_ms, protocol as given. */
static void az_proxy(cb_server_t *srv, int port, int record, const char *fault, unsigned delay_ms, int h2c,
                     char *to, size_t cap) {
  snprintf(to, cap, "http://127.0.0.1:%d", port);
  cb_proxy_t p = {.to = {to, strlen(to)}, .record = record, .protocol = h2c ? CB_PROXY_H2C : CB_PROXY_HTTP1};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = CB_S("/*");
  st.response.proxy = &p;
  st.response.delay_ms = delay_ms;
  if (fault) st.response.fault = (cb_str_t){fault, strlen(fault)};
  uint64_t id;
  int err = cb_server_route_add(srv, &st, &id);
  if (err) cbt_log("route_add: %s, %s %s", cb_err_name(err), cb_error_detail()->field_name, cb_error_detail()->why_name);
  ASSERT_EQ(err, 0);
}

/* One request on a new connection; its whole answer (a HEAD's head only), dates masked. */
static void az_one(int port, const char *req, int head, buf_t *out) {
  int fd = cl_connect(port);
  cl_sends(fd, req);
  uint64_t end = now_ms() + 10000;
  char tmp[65536];
  for (;;) {
    long n = cl_response_len(out->p ? out->p : "", out->len, head);
    if (n > 0 || n < 0) break;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (now_ms() > end || poll(&pfd, 1, 100) < 0) break;
    if (!(pfd.revents & POLLIN)) continue;
    ssize_t k = read(fd, tmp, sizeof tmp);
    if (k <= 0) break;
    buf_add(out, tmp, (size_t)k);
  }
  close(fd);
  if (out->len) mask_dates(out->p, out->len);
}

/* 1. A query value whose decoded form holds '+' or '%' is recorded decoded, and the stub loader decodes it once
 * more: the replay does not match the very request that was recorded. */
TEST(proxy_answer_query_plus_percent_roundtrip) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *rec = test_start(&cfg);
  cb_proxy_t opts = {.record = 1};
  static const struct {
    const char *target, *body;
  } es[] = {{"/s?q=a%2Bb", "plus"}, {"/t?q=%2541", "pct"}, {"/u?a%2Bb=1", "name"}};
  for (size_t i = 0; i < 3; i++) {
    cb__exchange_t x = {.opts = &opts, .method = "GET", .method_len = 3, .target = es[i].target,
                        .target_len = strlen(es[i].target), .status = 200, .body = es[i].body,
                        .body_len = strlen(es[i].body)};
    ASSERT_EQ(cb__record_exchange(rec, &x), 0);
  }
  char path[512], msg[512] = "";
  snprintf(path, sizeof path, "%s", az_tmp("q.json"));
  ASSERT_EQ(cb_server_save_stubs(rec, path, msg, sizeof msg), 3);
  test_stop(rec);
  cb_server_t *srv = test_start(&cfg);
  ASSERT_EQ(cb_server_stubs_file(srv, path, msg, sizeof msg), 3);
  for (size_t i = 0; i < 3; i++) {
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", es[i].target);
    buf_t got = {0}, exp = {0};
    az_one(cb_server_port(srv), req, 0, &got);
    exp_head(&exp, 200, NULL, "", (long)strlen(es[i].body), CONN_NONE);
    buf_adds(&exp, es[i].body);
    ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
    buf_free(&got);
    buf_free(&exp);
  }
  test_stop(srv);
  unlink(path);
}

/* 2. HEAD through a recording proxy (after the GET of the same path): the HEAD is not kept (a stub cannot replay
 * its content-length), and the replayed HEAD has the proxied one's head, content-length included. */
TEST(proxy_answer_head_roundtrip) {
  cb_server_t *up = az_upstream();
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  char to[64];
  az_proxy(px, cb_server_port(up), 1, NULL, 0, 0, to, sizeof to);
  buf_t get = {0}, proxied = {0};
  az_one(cb_server_port(px), "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", 0, &get);
  az_one(cb_server_port(px), "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", 1, &proxied);
  char path[512], msg[512] = "";
  snprintf(path, sizeof path, "%s", az_tmp("head.json"));
  ASSERT_EQ(cb_server_save_stubs(px, path, msg, sizeof msg), 1);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.recorded, 1);
  ASSERT_EQ(st.record_skipped, 1);
  test_stop(px);
  test_stop(up);
  cb_server_t *srv = test_start(&cfg);
  ASSERT_EQ(cb_server_stubs_file(srv, path, msg, sizeof msg), 1);
  buf_t replayed = {0};
  az_one(cb_server_port(srv), "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", 1, &replayed);
  ASSERT_MEM_EQ(replayed.p, replayed.len, proxied.p, proxied.len);
  buf_free(&get);
  buf_free(&proxied);
  buf_free(&replayed);
  test_stop(srv);
  unlink(path);
}

/* 3. A fault that answers the proxied answer as it is (delay): HEAD keeps the upstream's content-length. */
static void head_under_fault(int h2c) {
  cb_server_t *up = az_upstream();
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *plain = test_start(&cfg), *px = test_start(&cfg);
  char to[64];
  az_proxy(plain, cb_server_port(up), 0, NULL, 0, h2c, to, sizeof to);
  az_proxy(px, cb_server_port(up), 0, "delay?ms=5", 0, h2c, to, sizeof to);
  buf_t a = {0}, b = {0};
  az_one(cb_server_port(plain), "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", 1, &a);
  az_one(cb_server_port(px), "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", 1, &b);
  cbt_log("plain: %.*s", (int)a.len, a.p);
  cbt_log("fault: %.*s", (int)b.len, b.p);
  ASSERT_MEM_EQ(b.p, b.len, a.p, a.len);
  buf_free(&a);
  buf_free(&b);
  test_stop(px);
  test_stop(plain);
  test_stop(up);
}
TEST(proxy_answer_head_fault_delay_h1) { head_under_fault(0); }
TEST(proxy_answer_head_fault_delay_h2c) { head_under_fault(1); }

/* 4. Clients that leave at every stage: while the answer is gathered for a fault (and recorded), during a fault's
 * delay, while a request body is held for a delayed forward; then the server stops with some still in flight. */
static void leave_at(int h2c, const char *fault, unsigned delay_ms, const char *req, int wait_ms, int reset) {
  cb_server_t *up = az_upstream();
  cb_config_t cfg;
  test_config(&cfg);
  cfg.stop_timeout_ms = 100; /* the stop cuts what is still in flight */
  cb_server_t *px = test_start(&cfg);
  char to[64];
  az_proxy(px, cb_server_port(up), 1, fault, delay_ms, h2c, to, sizeof to);
  int fds[4];
  for (int i = 0; i < 4; i++) {
    fds[i] = cl_connect(cb_server_port(px));
    cl_sends(fds[i], req);
  }
  sleep_ms(wait_ms);
  for (int i = 0; i < 2; i++) {
    if (reset) cl_reset(fds[i]);
    else close(fds[i]);
  }
  sleep_ms(wait_ms);
  test_stop(px); /* two still in flight */
  close(fds[2]);
  close(fds[3]);
  test_stop(up);
}

#define DRIBBLE "GET /fault/dribble?length=4000&pieces=8&ms=800 HTTP/1.1\r\nhost: x\r\n\r\n"
#define POSTB "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n0123456789"
#define POSTP "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n01234"
TEST_T(proxy_answer_leave_gathering_h1, 30000) { leave_at(0, "delay?ms=1", 0, DRIBBLE, 200, 1); }
TEST_T(proxy_answer_leave_gathering_h2c, 30000) { leave_at(1, "delay?ms=1", 0, DRIBBLE, 200, 1); }
TEST_T(proxy_answer_leave_fault_delay_h1, 30000) { leave_at(0, "delay?ms=500", 0, POSTB, 150, 1); }
TEST_T(proxy_answer_leave_fault_delay_h2c, 30000) { leave_at(1, "delay?ms=500", 0, POSTB, 150, 0); }
TEST_T(proxy_answer_leave_held_body_h1, 30000) { leave_at(0, NULL, 500, POSTB, 150, 1); }
TEST_T(proxy_answer_leave_held_body_h2c, 30000) { leave_at(1, NULL, 500, POSTB, 150, 0); }
TEST_T(proxy_answer_leave_partial_body_h1, 30000) { leave_at(0, NULL, 500, POSTP, 150, 1); }
TEST_T(proxy_answer_leave_partial_body_h2c, 30000) { leave_at(1, "delay?ms=1", 500, POSTP, 150, 1); }
TEST_T(proxy_answer_leave_hang_h1, 30000) { leave_at(0, "hang?ms=400", 0, POSTB, 150, 1); }
TEST_T(proxy_answer_leave_dribble_body_h1, 30000) { leave_at(0, "delay?ms=1", 300, DRIBBLE, 400, 1); }

/* 6. A fault that answers the gathered answer itself (delay): its body is queued, the request released by the
 * answer's end, and the bytes must still be the upstream's when they leave. */
static void fault_delay_big_body(int h2c) {
  cb_server_t *up = az_upstream();
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  char to[64];
  az_proxy(px, cb_server_port(up), 0, "delay?ms=1", 0, h2c, to, sizeof to);
  size_t n = 200000;
  char *body = malloc(n);
  for (size_t i = 0; i < n; i++) body[i] = (char)('a' + i % 26);
  char head[160];
  snprintf(head, sizeof head, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: %zu\r\n\r\n", n);
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, head);
  cl_send(fd, body, n);
  buf_t exp = {0};
  buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-type: application/octet-stream\r\n");
  buf_addf(&exp, "content-length: %zu\r\n\r\n", n);
  buf_add(&exp, body, n);
  buf_t got = {0};
  cl_read_n(fd, &got, exp.len, 10000);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  buf_free(&got);
  buf_free(&exp);
  free(body);
  test_stop(px);
  test_stop(up);
}
TEST(proxy_answer_fault_delay_body_h1) { fault_delay_big_body(0); }
TEST(proxy_answer_fault_delay_body_h2c) { fault_delay_big_body(1); }

/* 7. HEAD: the declared content-length describes no body that will come; max_body_bytes limits bodies. */
static void head_over_max_body(int h2c) {
  cb_server_t *up = az_upstream();
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg), *plain = test_start(&cfg);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", cb_server_port(up));
  cb_proxy_t p = {.to = {to, strlen(to)}, .max_body_bytes = 5, .protocol = h2c ? CB_PROXY_H2C : CB_PROXY_HTTP1};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = CB_S("/*");
  st.response.proxy = &p;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(px, &st, &id), 0);
  az_proxy(plain, cb_server_port(up), 0, NULL, 0, h2c, to, sizeof to);
  buf_t a = {0}, b = {0};
  az_one(cb_server_port(plain), "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", 1, &a);
  az_one(cb_server_port(px), "HEAD /hello HTTP/1.1\r\nhost: x\r\n\r\n", 1, &b);
  ASSERT_MEM_EQ(b.p, b.len, a.p, a.len);
  buf_free(&a);
  buf_free(&b);
  test_stop(px);
  test_stop(plain);
  test_stop(up);
}
TEST(proxy_answer_head_over_max_body_h1) { head_over_max_body(0); }
TEST(proxy_answer_head_over_max_body_h2c) { head_over_max_body(1); }
