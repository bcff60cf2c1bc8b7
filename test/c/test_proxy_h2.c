/* The proxy kind's h2c upstream (docs/proxy.md, "h2c upstreams"): a proxy stub with protocol CB_PROXY_H2C
 * forwards over prior-knowledge HTTP/2. The upstream is a second cbench server (its fixture routes, to compare
 * with what it answers itself over HTTP/1.1) or a fake h2 upstream in this file: a thread that reads the proxy's
 * frames and writes what a test scripts, frame by frame (hostile answers: garbage, resets, GOAWAY, silence,
 * huge header blocks, endless DATA). Answers are compared byte for byte, dates masked. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_in (glibc's netinet/tcp.h has not the field) */

#include "common.h"
#include "h2client.h"

/* ---- the proxy and a real upstream ---- */

static uint64_t add_h2_proxy(cb_server_t *srv, const char *path, const char *to, unsigned timeout_ms,
                             uint64_t max_body) {
  cb_proxy_t px = {.to = {to, strlen(to)}, .protocol = CB_PROXY_H2C, .timeout_ms = timeout_ms,
                   .max_body_bytes = max_body};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = (cb_str_t){path, strlen(path)};
  st.response.proxy = &px;
  uint64_t id = 0;
  int err = cb_server_route_add(srv, &st, &id);
  if (err)
    cbt_log("route_add: %s, %s %s", cb_err_name(err), cb_error_detail()->field_name, cb_error_detail()->why_name);
  ASSERT_EQ(err, 0);
  return id;
}

static cb_server_t *h2_proxy_to(int port, unsigned timeout_ms, uint64_t max_body, char *to, size_t cap) {
  snprintf(to, cap, "http://127.0.0.1:%d", port);
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  add_h2_proxy(srv, "/*", to, timeout_ms, max_body);
  return srv;
}

static cb_server_t *upstream_server(unsigned max_streams) {
  cb_config_t cfg;
  test_config(&cfg);
  if (max_streams) cfg.h2_max_concurrent_streams = max_streams;
  return test_start(&cfg);
}

static int proxied_at_least(const cb_stats_t *s, const void *arg) {
  return s->proxy_requests >= *(const uint64_t *)arg && s->requests >= *(const uint64_t *)arg;
}

static void exp_fail(buf_t *b, int status, const char *why, const char *to) {
  char body[512];
  int n = snprintf(body, sizeof body, "cbench proxy: %s (%s)\n", why, to);
  buf_addf(b, "HTTP/1.1 %d %s\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s",
           status, exp_reason(status), n, body);
}

/* The fixture routes come back as the upstream answers them over HTTP/1.1 (its framing: a content-length
 * when its HTTP/2 answer had one, chunked otherwise; no body for HEAD, 204, 304), bodies go up with and without
 * a length, and every request rides the one upstream connection. */
TEST(proxy_h2up_fixture_routes) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  /* (Not the /stream routes: their chunk boundaries are the upstream's DATA frames, not its chunks.) */
  static const char *const paths[] = {"/hello", "/json", "/file/small", "/file/tiny", "/status/204", "/status/304",
                                      "/status/503"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    for (int head = 0; head < 2; head++) {
      buf_reset(&exp);
      exp_route(&exp, head ? "HEAD" : "GET", paths[i], CONN_NONE);
      char req[128];
      int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nhost: x\r\n\r\n", head ? "HEAD" : "GET", paths[i]);
      ROUNDTRIP(fd, req, (size_t)n, &exp);
    }
  }
  /* A body with content-length, and a chunked one (no length: the stream's DATA ends it). */
  static const char with_len[] = "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello";
  static const char chunked[] = "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                                "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n";
  buf_reset(&exp);
  exp_head(&exp, 200, "application/octet-stream", NULL, 5, CONN_NONE);
  buf_adds(&exp, "hello");
  ROUNDTRIP_S(fd, with_len, &exp);
  buf_reset(&exp); /* the upstream's /echo answers with the body's length once it has it all */
  exp_head(&exp, 200, "application/octet-stream", NULL, 7, CONN_NONE);
  buf_adds(&exp, "abcdefg");
  ROUNDTRIP_S(fd, chunked, &exp);
  cb_stats_t st;
  uint64_t want = 16;
  wait_stats(px, &st, proxied_at_least, &want, 5000);
  ASSERT_EQ(st.proxy_requests, 16);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_upstream_reused, 15);
  ASSERT_EQ(st.proxy_502 + st.proxy_504, 0);
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.conns_accepted, 1);
  ASSERT_EQ(ust.requests_by_proto[CB_PROTO_H2C_PRIOR], 16);
  close(fd);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* An h2c client through the proxy to the h2c upstream: the same answer in HTTP/2 form; a body both ways. */
TEST(proxy_h2up_h2c_client) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/hello", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  h2_assert_route(r, "GET", "/hello");
  h2resp_t *b = h2_request(cl, 3, "GET", "/file/big", NULL, 0, NULL, 0);
  h2_wait1(cl, b, 20000);
  h2_assert_route(b, "GET", "/file/big");
  static char body[200000];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (char)(i * 7);
  h2resp_t *e = h2_request(cl, 5, "POST", "/echo", NULL, 0, body, sizeof body); /* no content-length */
  h2_wait1(cl, e, 20000);
  ASSERT_EQ(e->status, 200);
  ASSERT_MEM_EQ(e->body.p, e->body.len, body, sizeof body);
  h2_free(cl);
  test_stop(px);
  test_stop(up);
}

/* The h2c sessions' small blocks belong to the worker's proxy pool, not to its client connections: when the last
 * client leaves (the trim, at the next tick of the worker's one-second timer) the upstream session stays open, and
 * its blocks with it; the next client's request rides the same session (under make asan, a cache freed under it
 * would be a use after free). */
TEST_T(proxy_h2up_session_outlives_trim, 30000) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  for (int client = 0; client < 2; client++) {
    int fd = cl_connect(cb_server_port(px));
    ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
    close(fd);
    if (client == 0) sleep_ms(1500); /* no client connection past a tick: the worker trims */
  }
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_requests, 2);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_upstream_reused, 1);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* A released stream's block is kept with its timer running for the next stream (H2X_SPARE_MAX; none under ASan),
 * so a deadline must never come from the block's last use. Three requests in turn through three stubs with
 * their own timeouts, each stream the block of the one before: /delay/100 within 200 ms answers; /delay/400
 * within 5 s answers, though the block's timer (due 200 ms after the first request) fires while it waits;
 * /delay/1000 within 300 ms gets its 504, though the block's timer is due 5 s after the second. */
TEST_T(proxy_h2up_reused_stream_deadlines, 30000) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", cb_server_port(up));
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  add_h2_proxy(px, "/delay/100", to, 200, 0);
  add_h2_proxy(px, "/delay/400", to, 5000, 0);
  add_h2_proxy(px, "/delay/1000", to, 300, 0);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  static const char *const paths[] = {"/delay/100", "/delay/400", "/delay/1000"};
  for (int i = 0; i < 3; i++) {
    h2resp_t *r = h2_request(cl, 1 + 2 * i, "GET", paths[i], NULL, 0, NULL, 0);
    h2_wait1(cl, r, 15000);
    if (i < 2) {
      ASSERT_EQ(r->status, 200);
      ASSERT_MEM_EQ(r->body.p, r->body.len, "ok", (size_t)2);
    } else {
      char body[128];
      int n = snprintf(body, sizeof body, "cbench proxy: timeout (%s)\n", to);
      ASSERT_EQ(r->status, 504);
      ASSERT_MEM_EQ(r->body.p, r->body.len, body, (size_t)n);
    }
  }
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_requests, 3);
  ASSERT_EQ(st.proxy_504, 1);
  ASSERT_EQ(st.proxy_502, 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  h2_free(cl);
  test_stop(px);
  test_stop(up);
}

/* Streams in flight at once share one upstream connection while they are below its stream limit; past it
 * (here the upstream allows 4) more connections open, each given what the limit allows. */
TEST_T(proxy_h2up_streams_share_connections, 30000) {
  for (int round = 0; round < 2; round++) {
    cb_server_t *up = upstream_server(round == 0 ? 0 : 4);
    char to[64];
    cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
    h2cl_t *cl = h2_open(cb_server_port(px));
    h2_handshake(cl);
    /* One first, so that the connection's SETTINGS (the limit) are known when the others come. */
    h2resp_t *first = h2_request(cl, 1, "GET", "/hello", NULL, 0, NULL, 0);
    h2_wait1(cl, first, 10000);
    ASSERT_EQ(first->status, 200);
    enum { N = 10 };
    h2resp_t *rs[N];
    for (int i = 0; i < N; i++) rs[i] = h2_request(cl, 3 + 2 * i, "GET", "/delay/300", NULL, 0, NULL, 0);
    h2_wait(cl, rs, N, 20000);
    for (int i = 0; i < N; i++) {
      ASSERT_EQ(rs[i]->status, 200);
      ASSERT_MEM_EQ(rs[i]->body.p, rs[i]->body.len, "ok", (size_t)2);
    }
    cb_stats_t st;
    ASSERT_EQ(cb_server_stats(px, &st), 0);
    ASSERT_EQ(st.proxy_requests, N + 1);
    /* 128 streams allowed: one connection; 4: the first takes 4, a second 4, a third 2. */
    ASSERT_EQ(st.proxy_upstream_connects, round == 0 ? 1 : 3);
    ASSERT_EQ(st.proxy_upstream_connects + st.proxy_upstream_reused, N + 1);
    cb_stats_t ust;
    ASSERT_EQ(cb_server_stats(up, &ust), 0);
    ASSERT_EQ(ust.conns_accepted, round == 0 ? 1 : 3);
    h2_free(cl);
    test_stop(px);
    test_stop(up);
  }
}

/* ---- a fake h2 upstream ---- */

typedef struct fake_s fake_t;
/* A script: runs on an accepted connection (conn counts from 1); returns when it is done with it. */
typedef void (*script_fn)(fake_t *f, int fd, int conn);

struct fake_s {
  int lfd, port;
  pthread_t th;
  script_fn script;
  int conns;
  int stop;
  uint64_t sent;    /* DATA payload bytes written (endless DATA) */
  int64_t conn_window; /* the proxy's connection window as its WINDOW_UPDATEs on stream 0 opened it */
  int end_stream;      /* the last request's HEADERS ended its stream (no body) */
  char req[2048];      /* the last request's header block, decoded: "name: value\n" each */
  int ready;           /* s_batch: the first exchange is over, the batch may come; s_goaway_keeps: a request read */
  int pace_cut;        /* s_paced: after the last piece, silence instead of the stream's end; s_goaway_keeps: go on */
  int64_t segs;        /* s_batch: the TCP segments with data the batch's requests came in (-1: not known) */
  nghttp2_hd_deflater *def;
  pthread_mutex_t mu;
};

static int fake_stopping(fake_t *f) { return __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); }

static void *fake_main(void *arg) {
  fake_t *f = arg;
  for (;;) {
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return NULL;
    }
    int n = __atomic_add_fetch(&f->conns, 1, __ATOMIC_ACQ_REL);
    nghttp2_hd_deflate_new(&f->def, 4096);
    f->script(f, fd, n);
    nghttp2_hd_deflate_del(f->def);
    close(fd);
  }
}

static void fake_start(fake_t *f, script_fn script) {
  memset(f, 0, sizeof *f);
  f->script = script;
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(f->lfd, 16), 0);
  socklen_t al = sizeof a;
  getsockname(f->lfd, (struct sockaddr *)&a, &al);
  f->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f) {
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
  shutdown(f->lfd, SHUT_RDWR);
  pthread_join(f->th, NULL);
  close(f->lfd);
}

static int wr_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

static int frame(int fd, uint8_t type, uint8_t flags, int32_t sid, const void *payload, size_t len) {
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)len, type, flags, sid);
  if (wr_all(fd, hd, 9) != 0) return -1;
  return len ? wr_all(fd, payload, len) : 0;
}

/* Reads one frame (blocking up to timeout_ms): 1 with its header and up to cap payload bytes, 0 on EOF or
 * timeout. */
static int read_frame(fake_t *f, int fd, h2frame_t *fr, uint8_t *payload, size_t cap, int timeout_ms) {
  uint8_t hd[9];
  size_t got = 0;
  while (got < 9) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) <= 0 || fake_stopping(f)) return 0;
    ssize_t n = read(fd, hd + got, 9 - got);
    if (n <= 0) return 0;
    got += (size_t)n;
  }
  fr->len = (uint32_t)hd[0] << 16 | (uint32_t)hd[1] << 8 | hd[2];
  fr->type = hd[3];
  fr->flags = hd[4];
  fr->sid = (int32_t)(((uint32_t)hd[5] << 24 | (uint32_t)hd[6] << 16 | (uint32_t)hd[7] << 8 | hd[8]) & 0x7fffffff);
  for (size_t k = 0; k < fr->len; k++) {
    uint8_t b;
    if (read(fd, &b, 1) != 1) return 0;
    if (k < cap) payload[k] = b;
  }
  fr->p = payload;
  return 1;
}

/* The request's header block (one HEADERS frame, no padding or priority: the proxy sends none) into f->req. */
static void decode_block(fake_t *f, const uint8_t *in, size_t len) {
  nghttp2_hd_inflater *inf;
  size_t n = 0;
  f->req[0] = '\0';
  if (nghttp2_hd_inflate_new(&inf) != 0) return;
  for (;;) {
    nghttp2_nv nv;
    int fl = 0;
    ssize_t k = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, len, 1);
    if (k < 0) break;
    in += k;
    len -= (size_t)k;
    if ((fl & NGHTTP2_HD_INFLATE_EMIT) && n < sizeof f->req)
      n += (size_t)snprintf(f->req + n, sizeof f->req - n, "%.*s: %.*s\n", (int)nv.namelen, nv.name,
                            (int)nv.valuelen, nv.value);
    if (fl & NGHTTP2_HD_INFLATE_FINAL) break;
  }
  nghttp2_hd_inflate_del(inf);
}

/* Reads the preface, then frames until a HEADERS frame (a request); returns its stream id, 0 when none came. */
static int32_t read_request(fake_t *f, int fd) {
  char pre[H2_PREFACE_LEN];
  size_t got = 0;
  while (got < sizeof pre) {
    ssize_t n = read(fd, pre + got, sizeof pre - got);
    if (n <= 0) return 0;
    got += (size_t)n;
  }
  static uint8_t payload[65536];
  h2frame_t fr;
  f->conn_window = 65535;
  while (read_frame(f, fd, &fr, payload, sizeof payload, 5000)) {
    if (fr.type == NGHTTP2_HEADERS) {
      f->end_stream = (fr.flags & NGHTTP2_FLAG_END_STREAM) != 0;
      decode_block(f, payload, fr.len < sizeof payload ? fr.len : sizeof payload);
      return fr.sid;
    }
    if (fr.type == NGHTTP2_WINDOW_UPDATE && fr.sid == 0 && fr.len == 4)
      f->conn_window += ((uint32_t)payload[0] << 24 | (uint32_t)payload[1] << 16 | (uint32_t)payload[2] << 8 |
                         payload[3]) & 0x7fffffff;
  }
  return 0;
}

static void send_settings(int fd) { frame(fd, NGHTTP2_SETTINGS, 0, 0, NULL, 0); }

static void send_headers(fake_t *f, int fd, int32_t sid, const nghttp2_nv *nv, size_t n, int end) {
  uint8_t block[65536];
  ssize_t len = nghttp2_hd_deflate_hd(f->def, block, sizeof block, (nghttp2_nv *)nv, n);
  frame(fd, NGHTTP2_HEADERS, (uint8_t)(NGHTTP2_FLAG_END_HEADERS | (end ? NGHTTP2_FLAG_END_STREAM : 0)), sid, block,
        len > 0 ? (size_t)len : 0);
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE}

/* Waits for the proxy to close the connection (or the test to stop). */
static void drain(fake_t *f, int fd) {
  static uint8_t payload[65536];
  h2frame_t fr;
  while (!fake_stopping(f) && read_frame(f, fd, &fr, payload, sizeof payload, 200)) {}
  for (int i = 0; i < 50 && !fake_stopping(f); i++) {
    char b[4096];
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 100) > 0 && read(fd, b, sizeof b) <= 0) return;
  }
}

/* GET /x through a proxy to the fake; returns the answer read until the close (the request asks for it). */
static void get_via(int port, buf_t *got) {
  int fd = cl_connect(port);
  cl_sends(fd, "GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  cl_read_close(fd, got, 15000);
  mask_dates(got->p, got->len);
  close(fd);
}

static void expect_fail_via(script_fn script, unsigned timeout_ms, uint64_t max_body, int status, const char *why,
                            int conns) {
  fake_t f;
  fake_start(&f, script);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, timeout_ms, max_body, to, sizeof to);
  buf_t got = {0}, exp = {0};
  get_via(cb_server_port(px), &got);
  exp_fail(&exp, status, why, to);
  /* exp_fail has no connection field; the request asked to close */
  buf_t want = {0};
  const char *cut = memmem(exp.p, exp.len, "\r\n\r\n", 4);
  buf_add(&want, exp.p, (size_t)(cut - exp.p) + 2);
  buf_adds(&want, "connection: close\r\n\r\n");
  buf_add(&want, cut + 4, exp.len - (size_t)(cut + 4 - exp.p));
  ASSERT_MEM_EQ(got.p, got.len, want.p, want.len);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(status == 504 ? st.proxy_504 : st.proxy_502, 1);
  if (conns) ASSERT_EQ(__atomic_load_n(&f.conns, __ATOMIC_ACQUIRE), conns);
  buf_free(&got);
  buf_free(&exp);
  buf_free(&want);
  test_stop(px);
  fake_stop(&f);
}

static void s_garbage(fake_t *f, int fd, int conn) {
  (void)conn;
  if (read_request(f, fd) == 0) return;
  static const char g[] = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
  wr_all(fd, g, sizeof g - 1);
  drain(f, fd);
}

static void s_rst(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  uint8_t code[4] = {0, 0, 0, 2};
  frame(fd, NGHTTP2_RST_STREAM, 0, sid, code, 4);
  drain(f, fd);
}

/* GOAWAY with last stream 0: the request was not processed, so it is sent again on a new connection, once. */
static void s_goaway(fake_t *f, int fd, int conn) {
  (void)conn;
  if (read_request(f, fd) == 0) return;
  send_settings(fd);
  uint8_t ga[8] = {0};
  frame(fd, NGHTTP2_GOAWAY, 0, 0, ga, 8);
  drain(f, fd);
}

/* The same, but the second connection answers. */
static void s_goaway_then_ok(fake_t *f, int fd, int conn) {
  if (conn == 1) {
    s_goaway(f, fd, conn);
    return;
  }
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  nghttp2_nv nv[] = {NV(":status", "200"), NV("x-second", "1"), NV("content-length", "2")};
  send_headers(f, fd, sid, nv, 3, 0);
  frame(fd, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, sid, "ok", 2);
  drain(f, fd);
}

static void s_silent(fake_t *f, int fd, int conn) {
  (void)conn;
  read_request(f, fd);
  drain(f, fd);
}

/* A header field of 40,000 bytes (over the proxy's 32 KiB), split over HEADERS and CONTINUATION frames. */
static void s_huge_head(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  static char big[40000];
  memset(big, 'a', sizeof big);
  nghttp2_nv nv[] = {NV(":status", "200"), {(uint8_t *)"x-big", (uint8_t *)big, 5, sizeof big, 0}};
  static uint8_t block[65536];
  ssize_t len = nghttp2_hd_deflate_hd(f->def, block, sizeof block, nv, 2);
  size_t off = 0;
  int first = 1;
  while (off < (size_t)len) {
    size_t n = (size_t)len - off > 16384 ? 16384 : (size_t)len - off;
    uint8_t fl = off + n == (size_t)len ? NGHTTP2_FLAG_END_HEADERS : 0;
    frame(fd, first ? NGHTTP2_HEADERS : NGHTTP2_CONTINUATION, fl, sid, block + off, n);
    off += n;
    first = 0;
  }
  drain(f, fd);
}

static void s_declared_too_big(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  nghttp2_nv nv[] = {NV(":status", "200"), NV("content-length", "1000")};
  send_headers(f, fd, sid, nv, 2, 0);
  drain(f, fd);
}

/* An invalid header block for a response: no :status. */
static void s_no_status(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  nghttp2_nv nv[] = {NV("x-a", "1")};
  send_headers(f, fd, sid, nv, 1, 1);
  drain(f, fd);
}

/* A :status below 100, ending the stream (nghttp2 lets three digits through). */
static void s_status_051(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  nghttp2_nv nv[] = {NV(":status", "051")};
  send_headers(f, fd, sid, nv, 1, 1);
  drain(f, fd);
}

/* Failures before the head: each a 502 (or 504) with the reason, as over HTTP/1.1. */
TEST_T(proxy_h2up_failures_before_head, 60000) {
  expect_fail_via(s_garbage, 0, 0, 502, "bad response", 1);
  expect_fail_via(s_rst, 0, 0, 502, "connection reset", 1);
  expect_fail_via(s_goaway, 0, 0, 502, "connection reset", 2); /* tried again once, on a new connection */
  expect_fail_via(s_silent, 300, 0, 504, "timeout", 1);
  expect_fail_via(s_huge_head, 0, 0, 502, "response head too big", 1);
  expect_fail_via(s_declared_too_big, 0, 999, 502, "response body too big", 1);
  expect_fail_via(s_no_status, 0, 0, 502, "bad response", 1);
  expect_fail_via(s_status_051, 0, 0, 502, "bad response", 1);
}

/* A GOAWAY that did not process the request: the request goes again on a new connection and is answered. */
TEST(proxy_h2up_goaway_retried) {
  fake_t f;
  fake_start(&f, s_goaway_then_ok);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 0, to, sizeof to);
  buf_t got = {0};
  get_via(cb_server_port(px), &got);
  static const char want[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\nx-second: 1\r\ncontent-length: 2\r\n"
                             "connection: close\r\n\r\nok";
  ASSERT_MEM_EQ(got.p, got.len, want, sizeof want - 1);
  ASSERT_EQ(__atomic_load_n(&f.conns, __ATOMIC_ACQUIRE), 2);
  ASSERT_EQ(__atomic_load_n(&f.end_stream, __ATOMIC_ACQUIRE), 1); /* a GET: HEADERS with END_STREAM, no DATA */
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 2);
  ASSERT_EQ(st.proxy_502, 0);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}

/* A trailing HEADERS block goes on: after the last chunk to an HTTP/1.1 client (hop-by-hop and framing fields
 * left out), as HEADERS ending the stream to an h2c one. */
static void s_trailers(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  static uint8_t payload[65536];
  h2frame_t fr;
  while (sid != 0) { /* every request on the connection gets the answer */
    nghttp2_nv nv[] = {NV(":status", "200"), NV("x-up", "1"), NV("connection", "x"), NV("trailer", "x-t")};
    send_headers(f, fd, sid, nv, 2, 0);
    frame(fd, NGHTTP2_DATA, 0, sid, "abc", 3);
    nghttp2_nv tr[] = {NV("x-t", "1"), NV("x-u", "2")};
    send_headers(f, fd, sid, tr, 2, 1);
    sid = 0;
    while (sid == 0 && read_frame(f, fd, &fr, payload, sizeof payload, 5000))
      if (fr.type == NGHTTP2_HEADERS) sid = fr.sid;
  }
}

TEST(proxy_h2up_trailers) {
  fake_t f;
  fake_start(&f, s_trailers);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 0, to, sizeof to);
  buf_t got = {0};
  get_via(cb_server_port(px), &got);
  static const char want[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\nx-up: 1\r\ntransfer-encoding: chunked\r\n"
                             "connection: close\r\n\r\n3\r\nabc\r\n0\r\nx-t: 1\r\nx-u: 2\r\n\r\n";
  ASSERT_MEM_EQ(got.p, got.len, want, sizeof want - 1);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/x", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->nheaders, 2);
  ASSERT(r->ended);
  ASSERT_MEM_EQ(r->body.p, r->body.len, "abc", (size_t)3);
  static const char tail[] = "x-t: 1\r\nx-u: 2\r\n";
  ASSERT(r->head.len >= sizeof tail - 1);
  ASSERT_MEM_EQ(r->head.p + r->head.len - (sizeof tail - 1), sizeof tail - 1, tail, sizeof tail - 1);
  h2_free(cl);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}

/* Endless DATA, sent as the windows allow (the fake honours WINDOW_UPDATE), to a client that reads nothing for
 * a second: the proxy opens the stream's window only for what the client's output took, so the upstream gets to
 * send at most the client's socket buffers, the proxy's output mark and one window. Without flow control it
 * would send without bound (gigabytes in a second over loopback). */
static void s_endless(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  nghttp2_nv nv[] = {NV(":status", "200")};
  send_headers(f, fd, sid, nv, 1, 0);
  int64_t sw = 65535, cw = f->conn_window;
  static uint8_t data[16384];
  memset(data, 'd', sizeof data);
  static uint8_t payload[65536];
  while (!fake_stopping(f)) {
    while (sw > 0 && cw > 0) {
      size_t n = (size_t)(sw < cw ? sw : cw);
      if (n > sizeof data) n = sizeof data;
      if (frame(fd, NGHTTP2_DATA, 0, sid, data, n) != 0) return;
      __atomic_add_fetch(&f->sent, n, __ATOMIC_ACQ_REL);
      sw -= (int64_t)n;
      cw -= (int64_t)n;
    }
    h2frame_t fr;
    if (!read_frame(f, fd, &fr, payload, sizeof payload, 200)) {
      if (fake_stopping(f)) return;
      struct pollfd pfd = {fd, POLLIN, 0};
      if (poll(&pfd, 1, 0) > 0) {
        char b;
        if (recv(fd, &b, 1, MSG_PEEK) <= 0) return;
      }
      continue;
    }
    if (fr.type == NGHTTP2_WINDOW_UPDATE && fr.len == 4) {
      uint32_t inc = ((uint32_t)payload[0] << 24 | (uint32_t)payload[1] << 16 | (uint32_t)payload[2] << 8 |
                      payload[3]) & 0x7fffffff;
      if (fr.sid == 0) cw += inc; else if (fr.sid == sid) sw += inc;
    }
    if (fr.type == NGHTTP2_RST_STREAM || fr.type == NGHTTP2_GOAWAY) return;
  }
}

TEST_T(proxy_h2up_endless_data_slow_client, 30000) {
  fake_t f;
  fake_start(&f, s_endless);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 0, to, sizeof to);
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /x HTTP/1.1\r\nhost: x\r\n\r\n");
  sleep_ms(1000);
  uint64_t a = __atomic_load_n(&f.sent, __ATOMIC_ACQUIRE);
  sleep_ms(500);
  uint64_t b = __atomic_load_n(&f.sent, __ATOMIC_ACQUIRE);
  /* Loopback socket buffers can hold several MiB each way on this host's settings; 32 MiB is far above them
   * and far below what an unbounded proxy reads in a second. */
  if (a > 32u << 20) cbt_log("the upstream sent %llu bytes to a client that reads nothing: not bounded",
                             (unsigned long long)a);
  ASSERT_LE(a, 32u << 20);
  ASSERT_EQ(b, a); /* nothing more while the client still reads nothing */
  /* The client reads: the stream goes on. */
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fd, &got, a + 200000, 15000), CL_OK);
  ASSERT_GE(__atomic_load_n(&f.sent, __ATOMIC_ACQUIRE), a + 100000);
  close(fd);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}

/* An upstream that ignores the windows (DATA without end, past what was granted) to a client that reads
 * nothing: once the stream's window is used up and not given back, more DATA is nghttp2's FLOW_CONTROL_ERROR,
 * the connection ends and the answer is cut (no last chunk). The upstream gets to send the client's socket
 * buffers, the proxy's output mark and one window, not more; the worker goes on serving. */
static void s_window_abuse(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  send_settings(fd);
  nghttp2_nv nv[] = {NV(":status", "200")};
  send_headers(f, fd, sid, nv, 1, 0);
  static uint8_t data[16384];
  memset(data, 'w', sizeof data);
  for (int i = 0; i < 4096 && !fake_stopping(f); i++) { /* 64 MiB at most */
    if (frame(fd, NGHTTP2_DATA, 0, sid, data, sizeof data) != 0) return;
    __atomic_add_fetch(&f->sent, sizeof data, __ATOMIC_ACQ_REL);
  }
}

TEST_T(proxy_h2up_window_abuse_cut, 30000) {
  fake_t f;
  fake_start(&f, s_window_abuse);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", f.port);
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  add_h2_proxy(px, "/x", to, 0, 0); /* only /x: the fixture routes answer the check below */
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  sleep_ms(1500);
  uint64_t sent = __atomic_load_n(&f.sent, __ATOMIC_ACQUIRE);
  if (sent > 32u << 20) cbt_log("the upstream sent %llu bytes past its window: not bounded", (unsigned long long)sent);
  ASSERT_LE(sent, 32u << 20);
  buf_t got = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 15000), CL_EOF);
  mask_dates(got.p, got.len);
  static const char head[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ntransfer-encoding: chunked\r\n"
                             "connection: close\r\n\r\n";
  ASSERT_GE(got.len, sizeof head - 1);
  ASSERT_MEM_EQ(got.p, sizeof head - 1, head, sizeof head - 1);
  ASSERT(memmem(got.p, got.len, "\r\n0\r\n\r\n", 7) == NULL); /* cut: no last chunk */
  ASSERT_LE(got.len, sent + 65536); /* no more than what came (with its chunk lines) */
  h2_check_hello(cb_server_port(px)); /* a fixture route: the worker is well */
  close(fd);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}

/* A body over max_body_bytes after the head: exactly max_body_bytes bytes reach the client, then the answer is
 * cut (the endless upstream gives the bytes). */
TEST(proxy_h2up_body_over_limit_cut) {
  fake_t f;
  fake_start(&f, s_endless);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 100000, to, sizeof to);
  buf_t got = {0};
  get_via(cb_server_port(px), &got);
  static const char head[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ntransfer-encoding: chunked\r\n"
                             "connection: close\r\n\r\n";
  ASSERT_GE(got.len, sizeof head - 1);
  ASSERT_MEM_EQ(got.p, sizeof head - 1, head, sizeof head - 1);
  size_t off = sizeof head - 1, body = 0;
  while (off < got.len) { /* de-chunk what came */
    size_t n = strtoul(got.p + off, NULL, 16);
    const char *crlf = memmem(got.p + off, got.len - off, "\r\n", 2);
    if (crlf == NULL || n == 0) break;
    off = (size_t)(crlf - got.p) + 2 + n + 2;
    body += n;
  }
  ASSERT_EQ(body, 100000);
  ASSERT(memmem(got.p, got.len, "\r\n0\r\n\r\n", 7) == NULL);
  cb_request_list_t *l = wait_journal(px, NULL, 1, 5000);
  ASSERT_EQ(l->count, 1);
  ASSERT_MEM_EQ(l->items[0].upstream_error.ptr, l->items[0].upstream_error.len, "body_too_big", (size_t)12);
  cb_request_list_free(l);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}

#include "stub_json.h"

/* The stub options: protocol h2c through the stub JSON (proxied for real) and the C API, a bad value refused. */
TEST(proxy_h2up_options) {
  cb_server_t *up = upstream_server(0);
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  cb_proxy_t px = {.to = CB_S("http://127.0.0.1:1"), .protocol = 2};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = CB_S("/x");
  st.response.proxy = &px;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), CB_EINVAL);
  ASSERT_EQ(cb_error_detail()->field, CB_FIELD_PROXY);
  px.protocol = CB_PROXY_H2C;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  char json[256];
  snprintf(json, sizeof json, "{\"match\": {\"path\": \"/*\"}, \"response\": {\"proxy\": "
           "{\"to\": \"http://127.0.0.1:%d\", \"protocol\": \"h2c\"}}}", cb_server_port(up));
  cb_stubs_json_error_t err;
  cb_stub_added_t *added = NULL;
  ASSERT_EQ(cb_stubs_json_add(srv, "body", NULL, json, strlen(json), &added, &err), 1);
  free(added);
  int fd = cl_connect(cb_server_port(srv));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/json", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /json HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.requests_by_proto[CB_PROTO_H2C_PRIOR], 1);
  test_stop(srv);
  test_stop(up);
}

/* A stub's fault, delay_ms and record act on the h2c-proxied answer as on the HTTP/1.1 path: reset?at=head sends
 * the upstream's head then resets; a delayed request (its chunked body held) goes with its length after the
 * delay and is journaled with both sides; each complete exchange reaches the recorder once. */
TEST(proxy_h2up_fault_delay_record) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", cb_server_port(up));
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  cb_proxy_t p = {.to = {to, strlen(to)}, .protocol = CB_PROXY_H2C};
  cb_proxy_t rec = {.to = {to, strlen(to)}, .protocol = CB_PROXY_H2C, .record = 1};
  cb_stub_t st[3];
  memset(st, 0, sizeof st);
  st[0].match.path = CB_S("/hello");
  st[0].response.proxy = &p;
  st[0].response.fault = CB_S("reset?at=head");
  st[1].match.path = CB_S("/echo");
  st[1].response.proxy = &p;
  st[1].response.delay_ms = 30;
  st[2].match.path = CB_S("/json");
  st[2].response.proxy = &rec;
  uint64_t id;
  for (int i = 0; i < 3; i++) ASSERT_EQ(cb_server_route_add(px, &st[i], &id), 0);
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_t got = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_RESET);
  mask_dates(got.p, got.len);
  static const char head[] =
      "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\ncontent-length: 1024\r\n\r\n";
  ASSERT_MEM_EQ(got.p, got.len, head, sizeof head - 1);
  close(fd);
  ASSERT_EQ(cb_server_requests_clear(px), 0);
  fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK
                 "\r\ncontent-type: application/octet-stream\r\ncontent-length: 5\r\n\r\nhello");
  ROUNDTRIP_S(fd, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", &exp);
  cb_request_list_t *l = wait_journal(px, NULL, 1, 5000);
  ASSERT_EQ(l->count, 1);
  ASSERT_EQ(l->items[0].status, 200);
  ASSERT_EQ(l->items[0].delay_ms, 30);
  ASSERT_EQ(l->items[0].upstream_status, 200);
  ASSERT_MEM_EQ(l->items[0].upstream_to.ptr, l->items[0].upstream_to.len, to, strlen(to));
  ASSERT_MEM_EQ(l->items[0].upstream_error.ptr, l->items[0].upstream_error.len, "none", (size_t)4);
  cb_request_list_free(l);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/json", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /json HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  ROUNDTRIP_S(fd, "GET /json HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  cb_stats_t s;
  ASSERT_EQ(cb_server_stats(px, &s), 0);
  ASSERT_EQ(s.faults, 1);
  ASSERT_EQ(s.recorded, 1);
  ASSERT_EQ(s.recorded_duplicates, 1);
  close(fd);
  buf_free(&exp);
  buf_free(&got);
  test_stop(px);
  test_stop(up);
}

/* A client that goes mid-answer: its stream is reset (CANCEL), the upstream connection goes on carrying others. */
TEST(proxy_h2up_client_gone_stream_reset) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /file/big HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fd, &got, 1000, 10000), CL_OK);
  cl_reset(fd);
  sleep_ms(200);
  int fd2 = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd2, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_upstream_reused, 1);
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.conns_accepted, 1);
  close(fd2);
  buf_free(&got);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* Answers 200 "ok" (with x-second: 1) to the first request. */
static void s_ok(fake_t *f, int fd, int conn) {
  (void)conn;
  s_goaway_then_ok(f, fd, 2);
}

/* The forwarded request in HTTP/2 form: :method, :scheme http, :authority the upstream's, :path the prefix and
 * the target as received; the fields with names lowercased, without host, the hop-by-hop ones (those the
 * connection field lists too, and te), and the client's x-forwarded-*; content-length when declared; then the
 * proxy's x-forwarded-for, -proto and -host. */
TEST(proxy_h2up_forwarded_head) {
  fake_t f;
  fake_start(&f, s_ok);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d/base", f.port);
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  add_h2_proxy(px, "/*", to, 0, 0);
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "POST /a/b?x=1&y HTTP/1.1\r\nHost: front.example\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
               "Keep-Alive: timeout=5\r\nTE: trailers\r\nUpgrade: foo\r\nProxy-Connection: x\r\nAccept: */*\r\n"
               "X-Forwarded-For: 6.6.6.6\r\nX-Two: a\r\nX-Two: b\r\nContent-Length: 3\r\n\r\nabc");
  buf_t got = {0};
  static const char want_answer[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\nx-second: 1\r\ncontent-length: 2\r\n\r\nok";
  ASSERT_EQ(cl_read_n(fd, &got, sizeof want_answer - 1, 10000), CL_OK);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, want_answer, sizeof want_answer - 1);
  char want[512];
  snprintf(want, sizeof want,
           ":method: POST\n:scheme: http\n:authority: 127.0.0.1:%d\n:path: /base/a/b?x=1&y\naccept: */*\n"
           "x-two: a\nx-two: b\ncontent-length: 3\nx-forwarded-for: 127.0.0.1\nx-forwarded-proto: http\n"
           "x-forwarded-host: front.example\n",
           f.port);
  ASSERT_STR_EQ(f.req, want);
  ASSERT_EQ(f.end_stream, 0); /* a body follows */
  close(fd);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}

/* An answer in five pieces 300 ms apart, ending its stream after the last, or silent after it (pace_cut). */
static void s_paced(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  if (sid == 0) return;
  send_settings(fd);
  nghttp2_nv nv[] = {NV(":status", "200")};
  send_headers(f, fd, sid, nv, 1, 0);
  int cut = __atomic_load_n(&f->pace_cut, __ATOMIC_ACQUIRE);
  for (int i = 0; i < 5; i++) {
    sleep_ms(300);
    frame(fd, NGHTTP2_DATA, (uint8_t)(i == 4 && !cut ? NGHTTP2_FLAG_END_STREAM : 0), sid, "abcde" + i, 1);
  }
  drain(f, fd);
}

/* timeout_ms bounds each pause of the answer, not the whole: with 1,000 ms, five pieces 300 ms apart (1.5 s in
 * all) come through whole (a deadline not moved by each piece would cut them); silence after the last piece cuts
 * the answer (no last chunk, the connection closed) once 1,000 ms passed. */
TEST_T(proxy_h2up_timeout_is_per_pause, 30000) {
  for (int cut = 0; cut < 2; cut++) {
    fake_t f;
    fake_start(&f, s_paced);
    __atomic_store_n(&f.pace_cut, cut, __ATOMIC_RELEASE);
    char to[64];
    cb_server_t *px = h2_proxy_to(f.port, 1000, 0, to, sizeof to);
    buf_t got = {0};
    get_via(cb_server_port(px), &got);
    static const char head[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ntransfer-encoding: chunked\r\n"
                               "connection: close\r\n\r\n1\r\na\r\n1\r\nb\r\n1\r\nc\r\n1\r\nd\r\n1\r\ne\r\n";
    buf_t want = {0};
    buf_adds(&want, head);
    if (!cut) buf_adds(&want, "0\r\n\r\n");
    ASSERT_MEM_EQ(got.p, got.len, want.p, want.len);
    cb_stats_t st;
    ASSERT_EQ(cb_server_stats(px, &st), 0);
    ASSERT_EQ(st.proxy_requests, 1);
    ASSERT_EQ(st.proxy_504 + st.proxy_502, 0); /* they count answers the proxy gave; a cut one is the upstream's */
    buf_free(&got);
    buf_free(&want);
    test_stop(px);
    fake_stop(&f);
  }
}

/* Segments with data the socket has received (TCP_INFO), or -1 where the kernel does not say (before 4.6). */
static int64_t data_segs_in(int fd) {
  struct tcp_info ti;
  socklen_t n = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
      n < offsetof(struct tcp_info, tcpi_data_segs_in) + sizeof ti.tcpi_data_segs_in)
    return -1;
  return ti.tcpi_data_segs_in;
}

enum { BATCH = 8 };

/* A retried request's answer on a later connection: 200 "ok" with x-second, then the connection is drained. */
static void answer_second(fake_t *f, int fd, int32_t sid) {
  nghttp2_nv nv[] = {NV(":status", "200"), NV("x-second", "1"), NV("content-length", "2")};
  send_headers(f, fd, sid, nv, 3, 0);
  frame(fd, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, sid, "ok", 2);
  drain(f, fd);
}

static void answer_ok(fake_t *f, int fd, int32_t sid) {
  nghttp2_nv nv[] = {NV(":status", "200"), NV("content-length", "2")};
  send_headers(f, fd, sid, nv, 2, 0);
  frame(fd, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, sid, "ok", 2);
}

/* Answers a first request, waits for the proxy's SETTINGS acknowledgement (after it, nothing more is due from
 * the proxy), then reads BATCH requests and counts the segments with data they came in before answering them. */
static void s_batch(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  if (sid == 0) return;
  send_settings(fd);
  answer_ok(f, fd, sid);
  static uint8_t payload[65536];
  h2frame_t fr;
  while (read_frame(f, fd, &fr, payload, sizeof payload, 5000))
    if (fr.type == NGHTTP2_SETTINGS && (fr.flags & NGHTTP2_FLAG_ACK)) break;
  int64_t before = data_segs_in(fd);
  __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
  int32_t sids[BATCH];
  int n = 0;
  while (n < BATCH && read_frame(f, fd, &fr, payload, sizeof payload, 5000))
    if (fr.type == NGHTTP2_HEADERS) sids[n++] = fr.sid;
  int64_t after = data_segs_in(fd);
  __atomic_store_n(&f->segs, before < 0 || after < 0 ? -1 : after - before, __ATOMIC_RELEASE);
  for (int i = 0; i < n; i++) answer_ok(f, fd, sids[i]);
  drain(f, fd);
}

/* Streams forwarded in one turn of the worker's loop leave in one write: BATCH requests that reach the proxy in
 * one read of an h2c client reach the upstream in one TCP segment (nghttp2 hands out a frame at a time; written
 * as they came, they were BATCH segments). */
TEST(proxy_h2up_streams_of_a_turn_in_one_write) {
  fake_t f;
  fake_start(&f, s_batch);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 0, to, sizeof to);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *first = h2_request(cl, 1, "GET", "/first", NULL, 0, NULL, 0);
  h2_wait1(cl, first, 10000);
  ASSERT_EQ(first->status, 200);
  for (int i = 0; i < 500 && !__atomic_load_n(&f.ready, __ATOMIC_ACQUIRE); i++) sleep_ms(10);
  ASSERT_EQ(__atomic_load_n(&f.ready, __ATOMIC_ACQUIRE), 1);
  buf_t all = {0};
  h2resp_t *rs[BATCH];
  for (int i = 0; i < BATCH; i++) { /* every HEADERS frame in one send */
    buf_t blk = {0};
    h2_encode_request(cl, "GET", "/batch", NULL, 0, &blk);
    uint8_t hd[9];
    h2_frame_hd(hd, (uint32_t)blk.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3 + 2 * i);
    buf_add(&all, hd, sizeof hd);
    buf_add(&all, blk.p, blk.len);
    buf_free(&blk);
    rs[i] = h2_stream(cl, 3 + 2 * i);
  }
  ASSERT_EQ(h2_send_raw(cl, all.p, all.len), 0);
  h2_wait(cl, rs, BATCH, 10000);
  for (int i = 0; i < BATCH; i++) {
    ASSERT_EQ(rs[i]->status, 200);
    ASSERT_MEM_EQ(rs[i]->body.p, rs[i]->body.len, "ok", (size_t)2);
  }
  int64_t segs = __atomic_load_n(&f.segs, __ATOMIC_ACQUIRE);
  if (segs < 0) cbt_log("TCP_INFO has no tcpi_data_segs_in on this kernel (before 4.6): the write count is not checked");
  else ASSERT_EQ(segs, 1);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_requests, BATCH + 1);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  buf_free(&all);
  h2_free(cl);
  test_stop(px);
  fake_stop(&f);
}

/* Stopping the proxy closes its h2c upstream connections. */
TEST(proxy_h2up_stop_closes_upstream) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(up, &st), 0);
  ASSERT_EQ(st.conns_open, 1); /* kept while idle */
  test_stop(px);
  for (int i = 0; i < 200; i++) {
    ASSERT_EQ(cb_server_stats(up, &st), 0);
    if (st.conns_open == 0) break;
    sleep_ms(10);
  }
  ASSERT_EQ(st.conns_accepted, 1);
  ASSERT_EQ(st.conns_open, 0);
  buf_free(&exp);
  test_stop(up);
}

/* A request reset by its client before the proxy sent it upstream: its upstream stream is cancelled while its
 * HEADERS still waits in the session (the first request of a connection not yet connected), so the upstream's
 * answer to it, if it is sent at all, must reach nobody. Before, the cancel looked the stream up, found none (a
 * client session opens it when it sends the HEADERS) and left the request to go out later still bound to the
 * exchange's block: under ASan the answer read the freed block; otherwise a later request on the same block got
 * the first one's answer ("first" where "second" was due). */
TEST_T(proxy_h2up_reset_before_sent, 30000) {
  cb_server_t *up = upstream_server(0);
  cb_stub_t st[2];
  const char *paths[2] = {"/first", "/second"};
  unsigned delays[2] = {300, 900};
  for (int i = 0; i < 2; i++) {
    memset(&st[i], 0, sizeof st[i]);
    st[i].match.path = (cb_str_t){paths[i], strlen(paths[i])};
    st[i].response.status = 200;
    st[i].response.body_kind = CB_BODY_BYTES;
    st[i].response.body = (cb_str_t){paths[i] + 1, strlen(paths[i] + 1)};
    st[i].response.delay_ms = delays[i];
    uint64_t id;
    ASSERT_EQ(cb_server_route_add(up, &st[i], &id), 0);
  }
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  /* HEADERS and RST_STREAM in one write: the proxy submits and cancels in the same read. */
  buf_t blk = {0}, wire = {0};
  h2_encode_request(cl, "GET", "/first", NULL, 0, &blk);
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)blk.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1);
  buf_add(&wire, hd, 9);
  buf_add(&wire, blk.p, blk.len);
  uint8_t code[4] = {0, 0, 0, NGHTTP2_CANCEL};
  h2_frame_hd(hd, 4, NGHTTP2_RST_STREAM, 0, 1);
  buf_add(&wire, hd, 9);
  buf_add(&wire, code, 4);
  ASSERT_EQ(h2_send_raw(cl, wire.p, wire.len), 0);
  sleep_ms(50); /* the first request's block released; the second takes it (as a spare) */
  h2resp_t *second = h2_request(cl, 3, "GET", "/second", NULL, 0, NULL, 0);
  h2_wait1(cl, second, 10000);
  ASSERT_EQ(second->status, 200);
  ASSERT_MEM_EQ(second->body.p, second->body.len, "second", (size_t)6);
  sleep_ms(100);
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.requests, 1); /* /first never went up */
  buf_free(&blk);
  buf_free(&wire);
  h2_free(cl);
  test_stop(px);
  test_stop(up);
}

/* Clients that reset streams and leave while their requests wait in the upstream sessions, at random (a fixed
 * seed): the upstream allows 2 streams per connection, which a new connection learns only from its SETTINGS,
 * so the requests above 2 first wait in the session, and some of those waiting are reset, some go, some are
 * reset after they went; a client of every fourth round closes its connection instead of reading. Every
 * stream not reset gets its own path's answer ("a" or "b"), exactly; under ASan none of it touches a freed
 * block. */
TEST_T(proxy_h2up_resets_while_waiting, 60000) {
  cb_server_t *up = upstream_server(2);
  static const char *const paths[2] = {"/a", "/b"};
  for (int i = 0; i < 2; i++) {
    cb_stub_t st;
    memset(&st, 0, sizeof st);
    st.match.path = (cb_str_t){paths[i], 2};
    st.response.status = 200;
    st.response.body_kind = CB_BODY_BYTES;
    st.response.body = (cb_str_t){paths[i] + 1, 1};
    st.response.delay_ms = i == 0 ? 0 : 20;
    uint64_t id;
    ASSERT_EQ(cb_server_route_add(up, &st, &id), 0);
  }
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  uint32_t seed = 12345;
#define RNG() (seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff)
  enum { ROUNDS = 24, N = 16 };
  for (int round = 0; round < ROUNDS; round++) {
    h2cl_t *cl = h2_open(cb_server_port(px));
    h2_handshake(cl);
    buf_t wire = {0};
    int reset[N], late[N];
    h2resp_t *rs[N];
    for (int i = 0; i < N; i++) {
      int32_t sid = 1 + 2 * i;
      rs[i] = h2_stream(cl, sid);
      buf_t blk = {0};
      h2_encode_request(cl, "GET", paths[i % 2], NULL, 0, &blk);
      uint8_t hd[9];
      h2_frame_hd(hd, (uint32_t)blk.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, sid);
      buf_add(&wire, hd, 9);
      buf_add(&wire, blk.p, blk.len);
      buf_free(&blk);
      unsigned r = RNG() % 4;
      reset[i] = r == 0; /* in the same write */
      late[i] = r == 1;  /* after a pause */
      if (reset[i]) {
        uint8_t code[4] = {0, 0, 0, NGHTTP2_CANCEL};
        h2_frame_hd(hd, 4, NGHTTP2_RST_STREAM, 0, sid);
        buf_add(&wire, hd, 9);
        buf_add(&wire, code, 4);
      }
    }
    ASSERT_EQ(h2_send_raw(cl, wire.p, wire.len), 0);
    buf_free(&wire);
    sleep_ms((int)(RNG() % 15));
    for (int i = 0; i < N; i++)
      if (late[i]) h2_send_rst(cl, 1 + 2 * i, NGHTTP2_CANCEL);
    if (round % 4 == 3) { /* gone with everything in flight */
      h2_free(cl);
      continue;
    }
    h2resp_t *wait[N];
    int nw = 0;
    for (int i = 0; i < N; i++)
      if (!reset[i] && !late[i]) wait[nw++] = rs[i];
    h2_wait(cl, wait, (size_t)nw, 20000);
    for (int i = 0; i < nw; i++) {
      ASSERT_EQ(wait[i]->status, 200);
      int k = (int)((wait[i]->sid - 1) / 2) % 2;
      ASSERT_MEM_EQ(wait[i]->body.p, wait[i]->body.len, paths[k] + 1, (size_t)1);
    }
    h2_free(cl);
  }
#undef RNG
  sleep_ms(200); /* the answers to what the last clients left */
  h2cl_t *cl = h2_open(cb_server_port(px)); /* the proxy still answers */
  h2_handshake(cl);
  h2resp_t *last = h2_request(cl, 1, "GET", "/b", NULL, 0, NULL, 0);
  h2_wait1(cl, last, 10000);
  ASSERT_MEM_EQ(last->body.p, last->body.len, "b", (size_t)1);
  h2_free(cl);
  test_stop(px);
  test_stop(up);
}

/* A request its client resets while its HEADERS wait in the session (HEADERS and RST_STREAM in one read): the
 * connection's stream count stays right, so it goes on taking streams. nghttp2 opens a waiting request's
 * stream as it takes it from its queue, tells on_frame_not_send, then closes the stream; both were counted,
 * and the count went to -1: every later request opened a connection of its own. */
TEST_T(proxy_h2up_cancel_while_waiting_keeps_count, 30000) {
  cb_server_t *up = upstream_server(0);
  char to[64];
  cb_server_t *px = h2_proxy_to(cb_server_port(up), 0, 0, to, sizeof to);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *first = h2_request(cl, 1, "GET", "/hello", NULL, 0, NULL, 0);
  h2_wait1(cl, first, 10000);
  ASSERT_EQ(first->status, 200);
  buf_t blk = {0}, wire = {0};
  h2_encode_request(cl, "GET", "/hello", NULL, 0, &blk);
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)blk.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3);
  buf_add(&wire, hd, 9);
  buf_add(&wire, blk.p, blk.len);
  uint8_t code[4] = {0, 0, 0, NGHTTP2_CANCEL};
  h2_frame_hd(hd, 4, NGHTTP2_RST_STREAM, 0, 3);
  buf_add(&wire, hd, 9);
  buf_add(&wire, code, 4);
  ASSERT_EQ(h2_send_raw(cl, wire.p, wire.len), 0);
  sleep_ms(100);
  h2resp_t *third = h2_request(cl, 5, "GET", "/hello", NULL, 0, NULL, 0);
  h2_wait1(cl, third, 10000);
  h2_assert_route(third, "GET", "/hello");
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1); /* the connection still takes streams */
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.conns_accepted, 1);
  buf_free(&blk);
  buf_free(&wire);
  h2_free(cl);
  test_stop(px);
  test_stop(up);
}

/* Reads a request, then, once the test says so (f->pace_cut), sends a graceful GOAWAY that keeps it (last
 * stream id its id) and answers it. */
static void s_goaway_keeps(fake_t *f, int fd, int conn) {
  (void)conn;
  int32_t sid = read_request(f, fd);
  if (sid == 0) return;
  send_settings(fd);
  __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 500 && !__atomic_load_n(&f->pace_cut, __ATOMIC_ACQUIRE); i++) sleep_ms(10);
  uint8_t ga[8] = {(uint8_t)(sid >> 24), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid, 0, 0, 0, 0};
  frame(fd, NGHTTP2_GOAWAY, 0, 0, ga, 8);
  sleep_ms(200);
  answer_ok(f, fd, sid);
  drain(f, fd);
}

/* The same count gone wrong ended a connection early: with a stream open and one cancelled while it waited,
 * the count said 0, so a graceful GOAWAY that keeps the open stream closed the connection at once and its
 * client got a 502 for a request the upstream answers. */
TEST_T(proxy_h2up_cancel_while_waiting_then_goaway, 30000) {
  fake_t f;
  fake_start(&f, s_goaway_keeps);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 0, to, sizeof to);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *first = h2_request(cl, 1, "GET", "/a", NULL, 0, NULL, 0);
  for (int i = 0; i < 500 && !__atomic_load_n(&f.ready, __ATOMIC_ACQUIRE); i++) sleep_ms(10);
  ASSERT_EQ(__atomic_load_n(&f.ready, __ATOMIC_ACQUIRE), 1);
  buf_t blk = {0}, wire = {0};
  h2_encode_request(cl, "GET", "/b", NULL, 0, &blk);
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)blk.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 3);
  buf_add(&wire, hd, 9);
  buf_add(&wire, blk.p, blk.len);
  uint8_t code[4] = {0, 0, 0, NGHTTP2_CANCEL};
  h2_frame_hd(hd, 4, NGHTTP2_RST_STREAM, 0, 3);
  buf_add(&wire, hd, 9);
  buf_add(&wire, code, 4);
  ASSERT_EQ(h2_send_raw(cl, wire.p, wire.len), 0);
  sleep_ms(100);
  __atomic_store_n(&f.pace_cut, 1, __ATOMIC_RELEASE);
  h2_wait1(cl, first, 10000);
  ASSERT_EQ(first->status, 200);
  ASSERT_MEM_EQ(first->body.p, first->body.len, "ok", (size_t)2);
  buf_free(&blk);
  buf_free(&wire);
  h2_free(cl);
  test_stop(px);
  fake_stop(&f);
}

/* The first connection answers a head and a piece of body, then resets the stream with REFUSED_STREAM; any
 * other connection answers 200 "ok". */
static void s_head_then_refused(fake_t *f, int fd, int conn) {
  int32_t sid = read_request(f, fd);
  if (sid == 0) return;
  send_settings(fd);
  if (conn != 1) {
    answer_second(f, fd, sid);
    return;
  }
  nghttp2_nv nv[] = {NV(":status", "200"), NV("x-first", "1")};
  send_headers(f, fd, sid, nv, 2, 0);
  frame(fd, NGHTTP2_DATA, 0, sid, "ab", 2);
  sleep_ms(100);
  uint8_t code[4] = {0, 0, 0, NGHTTP2_REFUSED_STREAM};
  frame(fd, NGHTTP2_RST_STREAM, 0, sid, code, 4);
  drain(f, fd);
}

/* REFUSED_STREAM after part of the answer came: the request is not sent again (its answer began); the client
 * sees the answer cut. It was sent again: a second status line and head went in the middle of the HTTP/1.1
 * answer ("ab" then "HTTP/1.1 200 OK ... ok"), an h2c client got the body "abok", and with the recorder the
 * first head's copy leaked (keep_head ran twice). */
TEST_T(proxy_h2up_refused_after_head_not_retried, 30000) {
  static const char want[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\nx-first: 1\r\ntransfer-encoding: chunked\r\n"
                             "connection: close\r\n\r\n2\r\nab\r\n";
  for (int record = 0; record < 2; record++) { /* HTTP/1.1 client, without and with the recorder */
    fake_t f;
    fake_start(&f, s_head_then_refused);
    char to[64];
    snprintf(to, sizeof to, "http://127.0.0.1:%d", f.port);
    cb_config_t cfg;
    test_config(&cfg);
    cb_server_t *px = test_start(&cfg);
    cb_proxy_t pxo = {.to = {to, strlen(to)}, .protocol = CB_PROXY_H2C, .record = record};
    cb_stub_t st;
    memset(&st, 0, sizeof st);
    st.match.path = (cb_str_t){"/*", 2};
    st.response.proxy = &pxo;
    uint64_t id;
    ASSERT_EQ(cb_server_route_add(px, &st, &id), 0);
    buf_t got = {0};
    get_via(cb_server_port(px), &got);
    ASSERT_MEM_EQ(got.p, got.len, want, sizeof want - 1);
    ASSERT_EQ(__atomic_load_n(&f.conns, __ATOMIC_ACQUIRE), 1);
    buf_free(&got);
    test_stop(px);
    fake_stop(&f);
  }
  fake_t f; /* an h2c client: "ab", then the stream reset */
  fake_start(&f, s_head_then_refused);
  char to[64];
  cb_server_t *px = h2_proxy_to(f.port, 0, 0, to, sizeof to);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/x", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 10000);
  ASSERT_EQ(r->status, 200);
  ASSERT_MEM_EQ(r->body.p, r->body.len, "ab", (size_t)2);
  ASSERT_EQ(r->rst, NGHTTP2_INTERNAL_ERROR);
  ASSERT_EQ(__atomic_load_n(&f.conns, __ATOMIC_ACQUIRE), 1);
  h2_free(cl);
  test_stop(px);
  fake_stop(&f);
}

/* The first connection answers one request, then (once the test says so: f->pace_cut) closes without a GOAWAY;
 * any other answers "ok" with x-second. */
static void s_close_kept(fake_t *f, int fd, int conn) {
  int32_t sid = read_request(f, fd);
  if (sid == 0) return;
  send_settings(fd);
  if (conn != 1) {
    answer_second(f, fd, sid);
    return;
  }
  answer_ok(f, fd, sid);
  __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 1000 && !__atomic_load_n(&f->pace_cut, __ATOMIC_ACQUIRE); i++) sleep_ms(5);
} /* fake_main closes the socket */

/* The upstream closes a kept connection (no GOAWAY) in the loop turn that gave it a request: the request's
 * HEADERS still waited for the turn's end, so the upstream never saw it, and it goes again on a new connection
 * (one 200 from the second connection, no 502). It was answered 502 "connection reset". */
TEST_T(proxy_h2up_closed_with_request_waiting_retried, 30000) {
  fake_t f;
  fake_start(&f, s_close_kept);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", f.port);
  cb_config_t cfg;
  test_config(&cfg); /* one worker: the client and the upstream connection are read in the same turns */
  cfg.journal = 100;
  cb_server_t *px = test_start(&cfg);
  add_h2_proxy(px, "/x", to, 0, 0);
  worker_hold_t hold = {0};
  ASSERT_ERR(cb_server_set_journal_listener(px, worker_hold_listener, &hold), 0);
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /x HTTP/1.1\r\nhost: x\r\n\r\n");
  static const char first[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-length: 2\r\n\r\nok";
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fd, &got, sizeof first - 1, 10000), CL_OK);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, first, sizeof first - 1);
  for (int i = 0; i < 1000 && !__atomic_load_n(&f.ready, __ATOMIC_ACQUIRE); i++) sleep_ms(5);
  ASSERT_EQ(__atomic_load_n(&f.ready, __ATOMIC_ACQUIRE), 1);
  int blocker = worker_hold(px, &hold);
  /* While the worker is held: the request first, then the upstream's close. */
  cl_sends(fd, "GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  sleep_ms(20);
  __atomic_store_n(&f.pace_cut, 1, __ATOMIC_RELEASE);
  buf_reset(&got);
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
  mask_dates(got.p, got.len);
  static const char want[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\nx-second: 1\r\ncontent-length: 2\r\n"
                             "connection: close\r\n\r\nok";
  ASSERT_MEM_EQ(got.p, got.len, want, sizeof want - 1);
  ASSERT_EQ(__atomic_load_n(&f.conns, __ATOMIC_ACQUIRE), 2);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_502, 0);
  ASSERT_EQ(st.proxy_upstream_connects, 2);
  ASSERT_ERR(cb_server_set_journal_listener(px, NULL, NULL), 0);
  close(blocker);
  close(fd);
  buf_free(&got);
  test_stop(px);
  fake_stop(&f);
}
