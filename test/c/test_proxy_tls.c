/* Proxy stubs to https:// upstreams (issue 26 with issue 24, docs/proxy.md "https upstreams"): the upstream is a
 * second cbench server with a TLS port (its made CA given as ca_pem), or a raw socket thread in this file that
 * stalls, answers garbage or resets instead of a ServerHello. Every answer is compared byte for byte, dates
 * masked; the 502 bodies carry OpenSSL's reason as this OpenSSL words it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"
#include "stub_json.h"

/* OpenSSL 3's reason for a ServerHello that is not TLS at all (an HTTP answer). */
#define TLS_GARBAGE_REASON "wrong version number"

/* ---- a raw upstream that never completes a handshake ---- */

enum { HS_STALL, HS_GARBAGE, HS_RESET };

typedef struct {
  int lfd, port, mode, stop;
  pthread_t th;
} hs_raw_t;

static void *hs_main(void *arg) {
  hs_raw_t *u = arg;
  for (;;) {
    int fd = accept(u->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return NULL;
    }
    /* The ClientHello is read first, so that what follows answers it. */
    char in[4096];
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, 5000) > 0 && read(fd, in, sizeof in) > 0) {
      if (u->mode == HS_GARBAGE) {
        static const char g[] = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        (void)!write(fd, g, sizeof g - 1);
        sleep_ms(200);
      } else if (u->mode == HS_RESET) {
        struct linger lg = {1, 0}; /* close with RST */
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      } else {
        while (!__atomic_load_n(&u->stop, __ATOMIC_ACQUIRE) && poll(&pfd, 1, 50) >= 0) {
          if ((pfd.revents & POLLIN) && read(fd, in, sizeof in) <= 0) break;
        }
      }
    }
    close(fd);
  }
}

static void hs_start(hs_raw_t *u, int mode) {
  memset(u, 0, sizeof *u);
  u->mode = mode;
  u->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(u->lfd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(u->lfd, 16), 0);
  socklen_t al = sizeof a;
  getsockname(u->lfd, (struct sockaddr *)&a, &al);
  u->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&u->th, NULL, hs_main, u), 0);
}

static void hs_stop(hs_raw_t *u) {
  __atomic_store_n(&u->stop, 1, __ATOMIC_RELEASE);
  shutdown(u->lfd, SHUT_RDWR);
  pthread_join(u->th, NULL);
  close(u->lfd);
}

/* ---- servers ---- */

static char ca_pem[8192];

/* A cbench server with a TLS port beside its cleartext one; its CA in ca_pem. */
static cb_server_t *tls_upstream(void) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls_port = 0;
  cb_server_t *up = test_start(&cfg);
  ASSERT_GT(cb_server_tls_ca(up, ca_pem, sizeof ca_pem), 0);
  return up;
}

typedef struct {
  const char *ca_pem, *ca_file, *server_name;
  int insecure;
  int protocol;
  unsigned timeout_ms;
  const char *path;
  const char *fault;
  unsigned delay_ms;
} tls_opts_t;

static int add_tls_proxy(cb_server_t *srv, const char *to, const tls_opts_t *o) {
  cb_proxy_t px = {.to = {to, strlen(to)}, .timeout_ms = o->timeout_ms, .insecure = o->insecure,
                   .protocol = o->protocol};
  if (o->ca_pem) px.ca_pem = (cb_str_t){o->ca_pem, strlen(o->ca_pem)};
  if (o->ca_file) px.ca_file = (cb_str_t){o->ca_file, strlen(o->ca_file)};
  if (o->server_name) px.server_name = (cb_str_t){o->server_name, strlen(o->server_name)};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = o->path ? (cb_str_t){o->path, strlen(o->path)} : CB_S("/*");
  st.response.proxy = &px;
  st.response.delay_ms = o->delay_ms;
  if (o->fault) st.response.fault = (cb_str_t){o->fault, strlen(o->fault)};
  uint64_t id = 0;
  return cb_server_route_add(srv, &st, &id);
}

static cb_server_t *tls_proxy(const char *to, const tls_opts_t *o) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  int err = add_tls_proxy(srv, to, o);
  if (err) cbt_log("route_add: %s, %s %s", cb_err_name(err), cb_error_detail()->field_name, cb_error_detail()->why_name);
  ASSERT_EQ(err, 0);
  return srv;
}

static void exp_fail(buf_t *b, int status, const char *why, const char *to) {
  char body[512];
  int n = snprintf(body, sizeof body, "cbench proxy: %s (%s)\n", why, to);
  buf_addf(b, "HTTP/1.1 %d %s\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s",
           status, exp_reason(status), n, body);
}

static void expect_journal_error(cb_server_t *px, const char *err, int status) {
  cb_request_list_t *l = wait_journal(px, NULL, 1, 5000);
  ASSERT_EQ(l->count, 1);
  ASSERT_EQ(l->items[0].status, status);
  ASSERT_EQ(l->items[0].upstream_status, 0);
  ASSERT_MEM_EQ(l->items[0].upstream_error.ptr, l->items[0].upstream_error.len, err, strlen(err));
  cb_request_list_free(l);
}

/* One request whose answer is the proxy's own 502 or 504. */
static void expect_fail(const char *to, const tls_opts_t *o, int status, const char *why, const char *jerr) {
  cb_server_t *px = tls_proxy(to, o);
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_fail(&exp, status, why, to);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  expect_journal_error(px, jerr, status);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(status == 502 ? st.proxy_502 : st.proxy_504, 1);
  close(fd);
  buf_free(&exp);
  test_stop(px);
}

/* Reads until b holds a whole head: 0, or -1. */
static int read_head(int fd, buf_t *b) {
  while (memmem(b->p ? b->p : "", b->len, "\r\n\r\n", 4) == NULL)
    if (cl_read_n(fd, b, b->len + 1, 5000) != CL_OK) return -1;
  return 0;
}

/* ---- through a cbench TLS upstream ---- */

/* GET /hello, an echoed body and GET again on one client connection: the upstream's answers byte for byte, over
 * one upstream TLS connection (one full handshake on the upstream, two requests reusing it). */
TEST(proxy_tls_hello_echo_reuse) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem});
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK
                 "\r\ncontent-type: application/octet-stream\r\ncontent-length: 11\r\n\r\nhello world");
  ROUNDTRIP_S(fd, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 11\r\n\r\nhello world", &exp);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_requests, 3);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_upstream_reused, 2);
  ASSERT_EQ(st.proxy_502, 0);
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.conns_accepted, 1);
  ASSERT_EQ(ust.tls_handshakes_full, 1);
  /* The upstream saw SNI localhost and ALPN http/1.1. */
  cb_request_list_t *l = wait_journal(up, NULL, 3, 5000);
  ASSERT_EQ(l->count, 3);
  ASSERT_EQ(l->items[0].tls, 1);
  ASSERT_MEM_EQ(l->items[0].tls_sni.ptr, l->items[0].tls_sni.len, "localhost", (size_t)9);
  ASSERT_MEM_EQ(l->items[0].tls_alpn.ptr, l->items[0].tls_alpn.len, "http/1.1", (size_t)8);
  cb_request_list_free(l);
  close(fd);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* A 1 MiB chunked stream through TLS (many records, read while the client reads) arrives whole and in order; a
 * fault and a delay act on a proxied TLS answer as on a plain one (reset?at=head: the upstream's head, then a
 * reset), and the journal has the delay and the upstream's status. */
TEST(proxy_tls_stream_fault_delay) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem});
  int fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /stream/big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  buf_t got = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 15000), CL_EOF);
  static const char head[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK
                             "\r\ncontent-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n"
                             "connection: close\r\n\r\n";
  mask_dates(got.p, got.len);
  ASSERT_GE(got.len, sizeof head - 1);
  ASSERT_MEM_EQ(got.p, sizeof head - 1, head, sizeof head - 1);
  size_t off = sizeof head - 1, body = 0;
  int bad = 0;
  for (;;) {
    size_t n = strtoul(got.p + off, NULL, 16);
    const char *crlf = memmem(got.p + off, got.len - off, "\r\n", 2);
    ASSERT_NOT_NULL(crlf);
    off = (size_t)(crlf - got.p) + 2;
    if (n == 0) break;
    for (size_t k = 0; k < n; k++)
      if (got.p[off + k] != LINE64[(body + k) % 64]) bad++;
    body += n;
    off += n + 2;
  }
  ASSERT_EQ(bad, 0);
  ASSERT_EQ(body, 64 * 16384);
  close(fd);
  test_stop(px);
  px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem, .fault = "reset?at=head", .delay_ms = 20});
  fd = cl_connect(cb_server_port(px));
  cl_sends(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_reset(&got);
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_RESET);
  mask_dates(got.p, got.len);
  static const char fhead[] =
      "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\ncontent-length: 1024\r\n\r\n";
  ASSERT_MEM_EQ(got.p, got.len, fhead, sizeof fhead - 1);
  cb_request_list_t *l = wait_journal(px, NULL, 1, 5000);
  ASSERT_EQ(l->count, 1);
  ASSERT_EQ(l->items[0].delay_ms, 20);
  ASSERT_EQ(l->items[0].upstream_status, 200);
  ASSERT_MEM_EQ(l->items[0].upstream_error.ptr, l->items[0].upstream_error.len, "none", (size_t)4);
  cb_request_list_free(l);
  close(fd);
  buf_free(&got);
  test_stop(px);
  test_stop(up);
}

/* A client that does not read for a while: the proxy stops reading the TLS upstream and goes on when the client
 * reads; every byte of /file/big arrives, and another client is served meanwhile. */
TEST(proxy_tls_slow_client) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem});
  int slow = cl_connect(cb_server_port(px));
  cl_sends(slow, "GET /file/big HTTP/1.1\r\nhost: x\r\n\r\n");
  sleep_ms(300);
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/file/big", CONN_NONE);
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(slow, &got, exp.len, 20000), CL_OK);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  close(slow);
  buf_free(&exp);
  buf_free(&got);
  test_stop(px);
  test_stop(up);
}

/* A second upstream connection (two requests at once) offers the session the first was given: the upstream
 * counts one full handshake and one resumed. */
TEST(proxy_tls_resumes_session) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://127.0.0.1:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem});
  int a = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(a, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  /* The kept connection is busy with a slow answer while another client asks. */
  cl_sends(a, "GET /delay/1000 HTTP/1.1\r\nhost: x\r\n\r\n");
  sleep_ms(50);
  int b = cl_connect(cb_server_port(px));
  ROUNDTRIP_S(b, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  buf_t got = {0};
  cl_sends(a, "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  ASSERT_EQ(cl_read_close(a, &got, 5000), CL_EOF);
  cb_stats_t ust;
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.conns_accepted, 2);
  ASSERT_EQ(ust.tls_handshakes_full, 1);
  ASSERT_EQ(ust.tls_handshakes_resumed, 1);
  close(a);
  close(b);
  buf_free(&got);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* Without the CA (the system's CAs know nothing of cbench's): 502, the verification's reason, journal `tls`. */
TEST(proxy_tls_unknown_ca_502) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  expect_fail(to, &(tls_opts_t){0}, 502,
              "tls handshake failed: certificate verify failed: unable to get local issuer certificate", "tls");
  test_stop(up);
}

/* protocol h2c with https://: h2 by ALPN. Two requests ride one upstream TLS connection as two streams (the
 * upstream counts them as h2 over TLS), the answers byte for byte as over HTTP/1.1; an upstream that does not
 * speak h2 refuses the ALPN, and an unknown CA fails as for HTTP/1.1, each a 502 with the reason. */
TEST(proxy_tls_h2_upstream) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem, .protocol = CB_PROXY_H2C});
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  buf_reset(&exp);
  buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK
                 "\r\ncontent-type: application/octet-stream\r\ncontent-length: 5\r\n\r\nover2");
  ROUNDTRIP_S(fd, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nover2", &exp);
  cb_stats_t st, ust;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_requests, 2);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_502, 0);
  ASSERT_EQ(cb_server_stats(up, &ust), 0);
  ASSERT_EQ(ust.conns_accepted, 1);
  ASSERT_EQ(ust.requests_by_proto[CB_PROTO_H2_TLS], 2);
  close(fd);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
  /* No h2 on the upstream: its no_application_protocol alert. */
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls_port = 0;
  cfg.enable_h2 = 0;
  up = test_start(&cfg);
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  expect_fail(to, &(tls_opts_t){.insecure = 1, .protocol = CB_PROXY_H2C}, 502,
              "tls handshake failed: tlsv1 alert no application protocol", "tls");
  test_stop(up);
  up = tls_upstream();
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  expect_fail(to, &(tls_opts_t){.protocol = CB_PROXY_H2C}, 502,
              "tls handshake failed: certificate verify failed: unable to get local issuer certificate", "tls");
  test_stop(up);
}

/* insecure: the same upstream answers without a CA. */
TEST(proxy_tls_insecure) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.insecure = 1});
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* server_name: a name the leaf is not for fails verification; the bad-certificate leaves cbench serves for an
 * SNI name fail with their own reason. */
TEST(proxy_tls_server_name) {
  cb_server_t *up = tls_upstream();
  char to[80];
  snprintf(to, sizeof to, "https://127.0.0.1:%d", cb_server_tls_port(up));
  expect_fail(to, &(tls_opts_t){.ca_pem = ca_pem, .server_name = "other.example"}, 502,
              "tls handshake failed: certificate verify failed: hostname mismatch", "tls");
  expect_fail(to, &(tls_opts_t){.ca_pem = ca_pem, .server_name = "expired.localhost"}, 502,
              "tls handshake failed: certificate verify failed: certificate has expired", "tls");
  /* The right name for an IP-literal `to` works: SNI localhost, verified as localhost. */
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem, .server_name = "localhost"});
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* An https and an http stub to the same address never share a connection: the http request after the https one
 * opens its own (and the TLS port does not answer plaintext HTTP). */
TEST(proxy_tls_pool_key) {
  cb_server_t *up = tls_upstream();
  char tls_to[80], plain_to[80];
  snprintf(tls_to, sizeof tls_to, "https://127.0.0.1:%d", cb_server_tls_port(up));
  snprintf(plain_to, sizeof plain_to, "http://127.0.0.1:%d", cb_server_tls_port(up));
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  ASSERT_EQ(add_tls_proxy(px, tls_to, &(tls_opts_t){.ca_pem = ca_pem, .path = "/s/*"}), 0);
  ASSERT_EQ(add_tls_proxy(px, plain_to, &(tls_opts_t){.path = "/p/*"}), 0);
  int fd = cl_connect(cb_server_port(px));
  buf_t got = {0};
  cl_sends(fd, "GET /s/x HTTP/1.1\r\nhost: x\r\n\r\n");
  ASSERT_EQ(read_head(fd, &got), 0);
  ASSERT_MEM_EQ(got.p, 13, "HTTP/1.1 404 ", (size_t)13); /* the upstream's own 404 for /s/x */
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  buf_reset(&got);
  int fd2 = cl_connect(cb_server_port(px));
  cl_sends(fd2, "GET /p/x HTTP/1.1\r\nhost: x\r\n\r\n");
  ASSERT_EQ(read_head(fd2, &got), 0);
  ASSERT_MEM_EQ(got.p, 13, "HTTP/1.1 502 ", (size_t)13);
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 2);
  ASSERT_EQ(st.proxy_upstream_reused, 0);
  close(fd);
  close(fd2);
  buf_free(&got);
  test_stop(px);
  test_stop(up);
}

/* ---- upstreams that break the handshake ---- */

TEST(proxy_tls_stalled_handshake_504) {
  hs_raw_t u;
  hs_start(&u, HS_STALL);
  char to[80];
  snprintf(to, sizeof to, "https://127.0.0.1:%d", u.port);
  expect_fail(to, &(tls_opts_t){.insecure = 1, .timeout_ms = 200}, 504, "timeout", "timeout");
  hs_stop(&u);
}

TEST(proxy_tls_garbage_handshake_502) {
  hs_raw_t u;
  hs_start(&u, HS_GARBAGE);
  char to[80];
  snprintf(to, sizeof to, "https://127.0.0.1:%d", u.port);
  expect_fail(to, &(tls_opts_t){.insecure = 1}, 502, "tls handshake failed: " TLS_GARBAGE_REASON, "tls");
  hs_stop(&u);
}

TEST(proxy_tls_reset_handshake_502) {
  hs_raw_t u;
  hs_start(&u, HS_RESET);
  char to[80];
  snprintf(to, sizeof to, "https://127.0.0.1:%d", u.port);
  expect_fail(to, &(tls_opts_t){.insecure = 1}, 502, "tls handshake failed: connection reset", "tls");
  hs_stop(&u);
}

/* ---- options ---- */

static void expect_bad(const char *to, const tls_opts_t *o, int why) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  ASSERT_EQ(add_tls_proxy(srv, to, o), CB_EINVAL);
  ASSERT_EQ(cb_error_detail()->field, CB_FIELD_PROXY);
  ASSERT_STR_EQ(cb_error_detail()->why_name, cb_why_name(why));
  test_stop(srv);
}

TEST(proxy_tls_bad_options) {
  static const char junk_pem[] = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.ca_pem = "no pem here"}, CB_WHY_BAD_CA);
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.ca_pem = junk_pem}, CB_WHY_BAD_CA);
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.ca_file = "/nonexistent/ca.pem"}, CB_WHY_BAD_CA);
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.ca_file = "/etc/hostname"}, CB_WHY_BAD_CA);
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.ca_file = "/x", .ca_pem = "y"}, CB_WHY_CONFLICT);
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.server_name = "bad name"}, CB_WHY_BAD_CHAR);
  expect_bad("http://127.0.0.1:1", &(tls_opts_t){.insecure = 1}, CB_WHY_CONFLICT);
  expect_bad("http://127.0.0.1:1", &(tls_opts_t){.server_name = "localhost"}, CB_WHY_CONFLICT);
  expect_bad("https://127.0.0.1:1", &(tls_opts_t){.insecure = 2}, CB_WHY_OUT_OF_RANGE);
  /* A CA file that holds the certificate works. */
  cb_server_t *up = tls_upstream();
  char path[64];
  snprintf(path, sizeof path, "/tmp/cbench-test-ca-%d.pem", (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(ca_pem, f);
  fclose(f);
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.ca_file = path});
  unlink(path); /* read when the stub was added */
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  test_stop(px);
  test_stop(up);
}

/* The https options in a stub file: a CA as PEM text (JSON-escaped newlines) works; bad types and values are
 * named by their key or by the engine's why. */
TEST(proxy_tls_stub_json) {
  cb_server_t *up = tls_upstream();
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  /* The PEM with its newlines as \n in a JSON string. */
  char esc[8192];
  size_t o = 0;
  for (const char *p = ca_pem; *p && o + 3 < sizeof esc; p++) {
    if (*p == '\n') {
      esc[o++] = '\\';
      esc[o++] = 'n';
    } else {
      esc[o++] = *p;
    }
  }
  esc[o] = '\0';
  char json[10000];
  snprintf(json, sizeof json,
           "{\"match\": {\"path\": \"/*\"}, \"response\": {\"proxy\": {\"to\": \"https://127.0.0.1:%d\", "
           "\"ca_pem\": \"%s\", \"server_name\": \"localhost\", \"insecure\": false}}}",
           cb_server_tls_port(up), esc);
  cb_stubs_json_error_t err;
  cb_stub_added_t *added = NULL;
  ASSERT_EQ(cb_stubs_json_add(px, "body", NULL, json, strlen(json), &added, &err), 1);
  free(added);
  int fd = cl_connect(cb_server_port(px));
  buf_t exp = {0};
  exp_route(&exp, "GET", "/json", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /json HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
  close(fd);
  buf_free(&exp);
  /* A relative ca_file is the stub file's directory's, as a body file is. */
  char dir[64], path[96];
  snprintf(dir, sizeof dir, "/tmp/cbench-test-cadir-%d", (int)getpid());
  ASSERT_EQ(mkdir(dir, 0700), 0);
  snprintf(path, sizeof path, "%s/upstream-ca.pem", dir);
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(ca_pem, f);
  fclose(f);
  snprintf(json, sizeof json,
           "{\"match\": {\"path\": \"/rel/*\"}, \"response\": {\"proxy\": {\"to\": \"https://localhost:%d\", "
           "\"ca_file\": \"upstream-ca.pem\"}}}",
           cb_server_tls_port(up));
  added = NULL;
  int n_rel = cb_stubs_json_add(px, "body", dir, json, strlen(json), &added, &err);
  free(added);
  added = NULL;
  int n_cwd = cb_stubs_json_add(px, "body", NULL, json, strlen(json), &added, &err); /* not in the cwd */
  unlink(path);
  rmdir(dir);
  ASSERT_EQ(n_rel, 1);
  ASSERT_EQ(n_cwd, -1);
  ASSERT_STR_EQ(err.msg, "body:1: stubs[0].response.proxy: bad_ca: \"upstream-ca.pem\" (docs/routes.md)");
  static const struct {
    const char *text, *msg;
  } bad[] = {
      {"{\"match\": {\"path\": \"/x\"}, \"response\": {\"proxy\": {\"to\": \"https://127.0.0.1:1\", \"insecure\": 1}}}",
       "body:1: stubs[0].response.proxy.insecure: wrong_type: must be true or false"},
      {"{\"match\": {\"path\": \"/x\"}, \"response\": {\"proxy\": {\"to\": \"https://127.0.0.1:1\", \"ca_file\": 1}}}",
       "body:1: stubs[0].response.proxy.ca_file: wrong_type: must be a string"},
      {"{\"match\": {\"path\": \"/x\"}, \"response\": {\"proxy\": {\"to\": \"https://127.0.0.1:1\", \"ca_pem\": \"x\"}}}",
       "body:1: stubs[0].response.proxy: bad_ca: \"x\" (docs/routes.md)"},
      {"{\"match\": {\"path\": \"/x\"}, \"response\": {\"proxy\": {\"to\": \"http://127.0.0.1:1\", \"insecure\": true}}}",
       "body:1: stubs[0].response.proxy: conflict: \"1\" (docs/routes.md)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    added = NULL;
    ASSERT_EQ(cb_stubs_json_add(px, "body", NULL, bad[i].text, strlen(bad[i].text), &added, &err), -1);
    ASSERT_STR_EQ(err.msg, bad[i].msg);
  }
  test_stop(px);
  test_stop(up);
}

/* Clients that leave while the proxy's connection to an https upstream is still in its handshake, their
 * requests waiting for it (over h2, as HEADERS in the session), for an HTTP/1.1 and an h2 upstream: 3 rounds of
 * an h2c client whose 6 requests each go with their RST_STREAM in one write (read and cancelled in the same
 * read), 6 HTTP/1.1 clients that reset right after sending, then a request that reads; each reader gets exactly
 * its answer, and under ASan nothing touches a freed exchange (before the h2 client's fix: a use after free). */
TEST_T(proxy_tls_clients_leave_in_handshake, 60000) {
  for (int proto = 0; proto < 2; proto++) {
    cb_server_t *up = tls_upstream();
    char to[80];
    snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
    cb_server_t *px =
        tls_proxy(to, &(tls_opts_t){.ca_pem = ca_pem, .protocol = proto ? CB_PROXY_H2C : CB_PROXY_HTTP1});
    buf_t exp = {0};
    exp_route(&exp, "GET", "/hello", CONN_NONE);
    for (int round = 0; round < 3; round++) {
      h2cl_t *cl = h2_open(cb_server_port(px));
      h2_handshake(cl);
      buf_t wire = {0};
      for (int i = 0; i < 6; i++) {
        buf_t blk = {0};
        h2_encode_request(cl, "GET", i % 2 ? "/delay/20" : "/hello", NULL, 0, &blk);
        uint8_t hd[9], code[4] = {0, 0, 0, NGHTTP2_CANCEL};
        h2_frame_hd(hd, (uint32_t)blk.len, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM,
                    1 + 2 * i);
        buf_add(&wire, hd, 9);
        buf_add(&wire, blk.p, blk.len);
        h2_frame_hd(hd, 4, NGHTTP2_RST_STREAM, 0, 1 + 2 * i);
        buf_add(&wire, hd, 9);
        buf_add(&wire, code, 4);
        buf_free(&blk);
      }
      ASSERT_EQ(h2_send_raw(cl, wire.p, wire.len), 0);
      buf_free(&wire);
      for (int i = 0; i < 6; i++) {
        int fd = cl_connect(cb_server_port(px));
        cl_sends(fd, i % 2 ? "GET /delay/20 HTTP/1.1\r\nhost: x\r\n\r\n" : "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
        cl_reset(fd);
      }
      h2resp_t *r = h2_request(cl, 13, "GET", "/hello", NULL, 0, NULL, 0);
      h2_wait1(cl, r, 10000);
      h2_assert_route(r, "GET", "/hello");
      int fd = cl_connect(cb_server_port(px));
      ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
      close(fd);
      h2_free(cl);
      sleep_ms(30); /* the upstream's answers to what the others left */
    }
    buf_free(&exp);
    test_stop(px);
    test_stop(up);
  }
}

/* ---- a raw TLS upstream: one thread, one connection at a time; each whole request gets `nparts` answers,
 * each written by an SSL_write of its own (one TLS record each), all in one TCP segment (TCP_CORK) ---- */

typedef struct {
  int lfd, port, stop;
  pthread_t th;
  SSL_CTX *ctx;
  const char *parts[4];
  int nparts;
  pthread_mutex_t mu;
  int conns, requests;
} traw_t;

static SSL_CTX *self_signed_ctx(void) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME *nm = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
  X509_set_issuer_name(x, nm);
  X509_sign(x, key, EVP_sha256());
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX_use_certificate(ctx, x);
  SSL_CTX_use_PrivateKey(ctx, key);
  SSL_CTX_set_num_tickets(ctx, 0);
  X509_free(x);
  EVP_PKEY_free(key);
  return ctx;
}

static void *traw_main(void *arg) {
  traw_t *u = arg;
  for (;;) {
    int fd = accept(u->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return NULL;
    }
    pthread_mutex_lock(&u->mu);
    u->conns++;
    pthread_mutex_unlock(&u->mu);
    SSL *s = SSL_new(u->ctx);
    SSL_set_fd(s, fd);
    if (SSL_accept(s) != 1) goto done;
    char in[65536];
    size_t have = 0;
    for (;;) {
      struct pollfd pfd = {fd, POLLIN, 0};
      if (SSL_pending(s) == 0 && poll(&pfd, 1, 100) == 0) {
        if (__atomic_load_n(&u->stop, __ATOMIC_ACQUIRE)) break;
        continue;
      }
      int n = SSL_read(s, in + have, (int)(sizeof in - have));
      if (n <= 0) break;
      have += (size_t)n;
      size_t rl = cl_request_len(in, have);
      if (rl == 0) continue;
      memmove(in, in + rl, have - rl);
      have -= rl;
      pthread_mutex_lock(&u->mu);
      int req = ++u->requests;
      pthread_mutex_unlock(&u->mu);
      (void)req;
      int one = 1, zero = 0;
      setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
      for (int i = 0; i < u->nparts; i++) SSL_write(s, u->parts[i], (int)strlen(u->parts[i]));
      setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
    }
  done:
    SSL_free(s);
    close(fd);
  }
}

static void traw_start(traw_t *u) {
  u->ctx = self_signed_ctx();
  pthread_mutex_init(&u->mu, NULL);
  u->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(u->lfd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(u->lfd, 16), 0);
  socklen_t al = sizeof a;
  getsockname(u->lfd, (struct sockaddr *)&a, &al);
  u->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&u->th, NULL, traw_main, u), 0);
}

static void traw_stop(traw_t *u) {
  __atomic_store_n(&u->stop, 1, __ATOMIC_RELEASE);
  shutdown(u->lfd, SHUT_RDWR);
  pthread_join(u->th, NULL);
  close(u->lfd);
  SSL_CTX_free(u->ctx);
}

/* An https upstream answers each request with its answer, then (in a TLS record of its own, in the same TCP
 * segment) a second answer no request asked for. Over cleartext the bytes after the answer close the upstream
 * connection; over TLS the same must hold: the next client gets the upstream's answer to its own request, never
 * the stale second answer. */
TEST(proxy_tls_record_after_answer_not_parked) {
  traw_t u;
  memset(&u, 0, sizeof u);
  u.parts[0] = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst";
  u.parts[1] = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nSTALE";
  u.nparts = 2;
  traw_start(&u);
  char to[64];
  snprintf(to, sizeof to, "https://127.0.0.1:%d", u.port);
  cb_server_t *px = tls_proxy(to, &(tls_opts_t){.insecure = 1, .timeout_ms = 3000});
  static const char exp[] = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-length: 5\r\n\r\nfirst";
  buf_t e = {0};
  buf_adds(&e, exp);
  for (int i = 0; i < 3; i++) {
    int fd = cl_connect(cb_server_port(px));
    ROUNDTRIP_S(fd, "GET /a HTTP/1.1\r\nhost: x\r\n\r\n", &e);
    close(fd);
    sleep_ms(50);
  }
  buf_free(&e);
  test_stop(px);
  traw_stop(&u);
}


/* Clients that leave at random through an https upstream (a cbench server's TLS port), HTTP/1.1 upstream
 * connections: 25 rounds of 8 clients, each request (GET, HEAD of a 1 MB file, a delayed route behind a stub
 * delay, 204, a POST with a length, a chunked POST) and each fate drawn with a fixed seed (read the answer and ask
 * again, reset at once, after part of the request, during the delay, or mid-answer). Every answer read whole is
 * byte for byte what the upstream answers itself. */
static int read_answer_tls(int fd, buf_t *b, int head_req, int timeout_ms) {
  for (;;) {
    long n = cl_response_len(b->p, b->len, head_req);
    if (n > 0) return 0;
    if (cl_read_n(fd, b, b->len + 1, timeout_ms) != CL_OK) return -1;
  }
}

TEST_T(proxy_tls_clients_leave_at_random, 120000) {
  static char capem[8192];
  cb_config_t ucfg;
  test_config(&ucfg);
  ucfg.tls_port = 0;
  cb_server_t *up = test_start(&ucfg);
  ASSERT_GT(cb_server_tls_ca(up, capem, sizeof capem), 0);
  static const char *const reqs[] = {
      "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
      "HEAD /file/big HTTP/1.1\r\nhost: x\r\n\r\n",
      "GET /delay/10 HTTP/1.1\r\nhost: x\r\n\r\n",
      "GET /file/big HTTP/1.1\r\nhost: x\r\n\r\n",
      "GET /status/204 HTTP/1.1\r\nhost: x\r\n\r\n",
      "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 11\r\n\r\nhello world",
      "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
  };
  enum { NP = sizeof reqs / sizeof *reqs, K = 8, ROUNDS = 25 };
  buf_t exp[NP];
  for (int p = 0; p < NP; p++) {
    memset(&exp[p], 0, sizeof exp[p]);
    int fd = cl_connect(cb_server_port(up));
    cl_sends(fd, reqs[p]);
    ASSERT_EQ(read_answer_tls(fd, &exp[p], p == 1, 10000), 0);
    mask_dates(exp[p].p, exp[p].len);
    close(fd);
  }
  char to[80];
  snprintf(to, sizeof to, "https://localhost:%d", cb_server_tls_port(up));
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  for (int i = 0; i < 2; i++) {
    cb_proxy_t pr = {.to = {to, strlen(to)}, .ca_pem = {capem, strlen(capem)}, .timeout_ms = 5000};
    cb_stub_t st;
    memset(&st, 0, sizeof st);
    st.match.path = i == 0 ? CB_S("/delay/*") : CB_S("/*");
    st.response.proxy = &pr;
    st.response.delay_ms = i == 0 ? 20 : 0;
    uint64_t id;
    ASSERT_EQ(cb_server_route_add(px, &st, &id), 0);
  }
  uint32_t seed = 4242;
#define RNG() (seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff)
  int whole = 0;
  for (int round = 0; round < ROUNDS; round++) {
    int fds[K], path[K], act[K];
    for (int i = 0; i < K; i++) {
      fds[i] = cl_connect(cb_server_port(px));
      path[i] = (int)(RNG() % NP);
      act[i] = (int)(RNG() % 5);
      const char *rq = reqs[path[i]];
      if (act[i] == 4) { /* part of the request, then gone */
        cl_send(fds[i], rq, 1 + RNG() % strlen(rq));
        if (RNG() % 2) sleep_ms((int)(RNG() % 5));
        cl_reset(fds[i]);
        continue;
      }
      cl_sends(fds[i], rq);
      if (act[i] == 1) cl_reset(fds[i]);
    }
    sleep_ms((int)(RNG() % 15));
    for (int i = 0; i < K; i++) {
      if (act[i] == 1 || act[i] == 4) continue;
      if (act[i] == 2) {
        cl_reset(fds[i]);
        continue;
      }
      buf_t got = {0};
      if (act[i] == 3) {
        uint64_t t0 = now_ms();
        size_t want = 1 + RNG() % 200;
        if (want > exp[path[i]].len) want = exp[path[i]].len;
        int r3 = cl_read_n(fds[i], &got, want, 10000);
        if (r3 != CL_OK)
          cbt_log("round %d client %d path %d act 3: %s after %llu ms, %zu bytes", round, i, path[i],
                  cl_status_name(r3), (unsigned long long)(now_ms() - t0), got.len);
        cl_reset(fds[i]);
        buf_free(&got);
        continue;
      }
      for (int again = 0; again < 2; again++) {
        buf_reset(&got);
        if (again) cl_sends(fds[i], reqs[path[i]]);
        int rr = read_answer_tls(fds[i], &got, path[i] == 1, 10000);
        if (rr != 0)
          cbt_log("round %d client %d path %d act %d again %d: got %zu bytes", round, i, path[i], act[i], again,
                  got.len);
        ASSERT_EQ(rr, 0);
        mask_dates(got.p, got.len);
        ASSERT_MEM_EQ(got.p, got.len, exp[path[i]].p, exp[path[i]].len);
        whole++;
      }
      buf_free(&got);
      close(fds[i]);
    }
  }
#undef RNG
  ASSERT(whole > 0);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  cbt_log("whole %d reused %llu connects %llu 502 %llu", whole, (unsigned long long)st.proxy_upstream_reused,
          (unsigned long long)st.proxy_upstream_connects, (unsigned long long)st.proxy_502);
  for (int p = 0; p < NP; p++) buf_free(&exp[p]);
  test_stop(px);
  test_stop(up);
}
