/* TLS listeners (issue 24): a TLS port beside the cleartext one (cfg.tls_port), the bound on handshakes in
 * progress per worker (cfg.tls_max_handshakes) and the header timeout that bounds a handshake, with exact counts of
 * failed and refused handshakes; and kernel TLS's detection and fallback (src/transport/ktls.c), forced through
 * CBENCH_KTLS_ULP_FILE and CBENCH_KTLS (every test runs in its own process, so setenv stays in it).
 *
 * The TLS client here is OpenSSL's, blocking, trusting only the server's made CA and verifying localhost. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "common.h"

/* ---- a blocking TLS client ---- */

typedef struct {
  SSL_CTX *ctx;
  SSL *ssl;
  int fd;
} tcl_t;

static void tcl_connect(tcl_t *c, cb_server_t *srv, int port) {
  char pem[8192];
  int n = cb_server_tls_ca(srv, pem, sizeof pem);
  ASSERT_GT(n, 0);
  c->ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(c->ctx);
  BIO *b = BIO_new_mem_buf(pem, n);
  X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
  BIO_free(b);
  ASSERT_NOT_NULL(ca);
  ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), ca), 1);
  X509_free(ca);
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
  ASSERT_EQ(SSL_CTX_set_alpn_protos(c->ctx, (const unsigned char *)"\x08http/1.1", 9), 0);
  c->fd = cl_connect(port);
  struct timeval tv = {.tv_sec = 15};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  c->ssl = SSL_new(c->ctx);
  ASSERT_NOT_NULL(c->ssl);
  SSL_set_fd(c->ssl, c->fd);
  SSL_set_tlsext_host_name(c->ssl, "localhost");
  SSL_set1_host(c->ssl, "localhost");
  int rc = SSL_connect(c->ssl);
  if (rc != 1) {
    char err[256];
    ERR_error_string_n(ERR_get_error(), err, sizeof err);
    FAIL("TLS handshake with port %d: SSL_connect %d, SSL_get_error %d, %s", port, rc, SSL_get_error(c->ssl, rc), err);
  }
  ASSERT_EQ(SSL_get_verify_result(c->ssl), X509_V_OK);
}

static void tcl_close(tcl_t *c) {
  SSL_shutdown(c->ssl);
  SSL_free(c->ssl);
  SSL_CTX_free(c->ctx);
  close(c->fd);
}

/* GET path over a new TLS connection; the response, dates masked, must be exp's bytes. */
static void tls_check(cb_server_t *srv, int port, const char *path, const buf_t *exp) {
  tcl_t c;
  tcl_connect(&c, srv, port);
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nhost: localhost\r\n\r\n", path);
  ASSERT_EQ(SSL_write(c.ssl, req, n), n);
  buf_t got = {0};
  char tmp[16384];
  while (got.len < exp->len) {
    int r = SSL_read(c.ssl, tmp, sizeof tmp);
    if (r <= 0) break;
    buf_add(&got, tmp, (size_t)r);
  }
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp->p, exp->len);
  buf_free(&got);
  tcl_close(&c);
}

static void hello_exp(buf_t *e) {
  buf_reset(e);
  exp_route(e, "GET", "/hello", CONN_NONE);
}

static void plain_check(int port, const buf_t *exp) {
  int fd = cl_connect(port);
  static const char hello[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  ROUNDTRIP_S(fd, hello, exp);
  close(fd);
}

static void expect_refused_connect(int port) {
  int fd = cl_socket();
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), -1);
  ASSERT_EQ(errno, ECONNREFUSED);
  close(fd);
}

/* The first bytes a TLS client sends (its ClientHello record), made by an OpenSSL client into a memory BIO. */
static void client_hello(buf_t *out) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL *ssl = SSL_new(ctx);
  BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rb, wb);
  SSL_set_tlsext_host_name(ssl, "localhost");
  ASSERT_EQ(SSL_connect(ssl), -1); /* waits for the server's answer */
  char *p;
  long n = BIO_get_mem_data(wb, &p);
  ASSERT_GT(n, 100);
  buf_add(out, p, (size_t)n);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
}

static int hs_at_least(const cb_stats_t *st, const void *arg) {
  const uint64_t *want = arg; /* failed, refused, accepted */
  return st->tls_handshakes_failed >= want[0] && st->tls_handshakes_refused >= want[1] &&
         st->conns_accepted >= want[2];
}

static int all_closed(const cb_stats_t *st, const void *arg) {
  (void)arg;
  return st->conns_open == 0;
}

static void wait_counts(cb_server_t *srv, cb_stats_t *st, uint64_t failed, uint64_t refused, uint64_t accepted) {
  uint64_t want[3] = {failed, refused, accepted};
  wait_stats(srv, st, hs_at_least, want, 10000);
  ASSERT_EQ(st->tls_handshakes_failed, failed);
  ASSERT_EQ(st->tls_handshakes_refused, refused);
  ASSERT_EQ(st->conns_accepted, accepted);
}

/* ---- the options ---- */

TEST(tls_listen_options) {
  cb_config_t cfg;
  cb_config_init(&cfg);
  ASSERT_EQ(cfg.tls_port, -1); /* unset: no TLS listener of its own */
  ASSERT_EQ(cfg.tls_max_handshakes, 256);
  const cb_option_t *bad = NULL;
  ASSERT_ERR(cb_config_check(&cfg, NULL), 0);
  cfg.tls_port = 65535;
  ASSERT_ERR(cb_config_check(&cfg, NULL), 0);
  cfg.tls_port = 65536;
  ASSERT_ERR(cb_config_check(&cfg, &bad), CB_EINVAL);
  ASSERT_STR_EQ(bad->name, "tls_port");
  cfg.tls_port = -2;
  ASSERT_ERR(cb_config_check(&cfg, &bad), CB_EINVAL);
  cfg.tls_port = 0;
  cfg.tls_max_handshakes = 0;
  ASSERT_ERR(cb_config_check(&cfg, &bad), CB_ELIMIT);
  ASSERT_STR_EQ(bad->name, "tls_max_handshakes");
  const cb_option_t *o = cb_config_option("tls_port");
  ASSERT_NOT_NULL(o);
  ASSERT(o->flags & CB_OPT_F_UNSET);
  ASSERT_ERR(cb_config_set_uint(&cfg, o, 65536), CB_EINVAL);
}

/* ---- a TLS port beside the cleartext one ---- */

TEST(tls_listen_both_ports) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cfg.tls_port = 0;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv), tport = cb_server_tls_port(srv);
  ASSERT_GT(tport, 0);
  ASSERT(tport != port);
  buf_t e = {0};
  hello_exp(&e);
  for (int i = 0; i < 4; i++) { /* both workers, both listeners */
    plain_check(port, &e);
    tls_check(srv, tport, "/hello", &e);
  }
  cb_stats_t st;
  wait_counts(srv, &st, 0, 0, 8);
  ASSERT_EQ(st.requests, 8);
  /* Cleartext bytes on the TLS port: a failed handshake, closed. */
  int fd = cl_connect(tport);
  cl_sends(fd, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_t rest = {0};
  int r = cl_read_close(fd, &rest, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  ASSERT(rest.len < 64); /* at most an alert record, never an HTTP answer */
  ASSERT(rest.len == 0 || (unsigned char)rest.p[0] == 0x15);
  buf_free(&rest);
  close(fd);
  wait_counts(srv, &st, 1, 0, 9);
  ASSERT_EQ(st.requests, 8);
  /* Down closes both listeners; up opens both again, on the same ports. */
  ASSERT_ERR(cb_server_down(srv), 0);
  expect_refused_connect(port);
  expect_refused_connect(tport);
  ASSERT_ERR(cb_server_up(srv), 0);
  ASSERT_EQ(cb_server_port(srv), port);
  ASSERT_EQ(cb_server_tls_port(srv), tport);
  for (int i = 0; i < 4; i++) {
    plain_check(port, &e);
    tls_check(srv, tport, "/hello", &e);
  }
  buf_free(&e);
  test_stop(srv);
}

/* Up fails when someone took the TLS port meanwhile: the server stays down, nothing leaks, and up works later. */
TEST(tls_listen_up_tls_port_taken) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cfg.tls_port = 0;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv), tport = cb_server_tls_port(srv);
  int fds_before = count_fds();
  ASSERT_ERR(cb_server_down(srv), 0);
  int other = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(other, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)tport),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(other, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(other, 4), 0);
  ASSERT_ERR(cb_server_up(srv), CB_EADDRINUSE);
  expect_refused_connect(port); /* the cleartext sockets of the failed up were closed again */
  close(other);
  ASSERT_ERR(cb_server_up(srv), 0);
  ASSERT_EQ(count_fds(), fds_before);
  buf_t e = {0};
  hello_exp(&e);
  plain_check(port, &e);
  tls_check(srv, tport, "/hello", &e);
  buf_free(&e);
  test_stop(srv);
}

/* The main port's own TLS (cfg.tls alone) is the TLS port; no TLS: 0. */
TEST(tls_listen_port_numbers) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  ASSERT_EQ(cb_server_tls_port(srv), 0);
  char why[256];
  ASSERT_EQ(cb_server_ktls(srv, why, sizeof why), 0);
  ASSERT_STR_EQ(why, "the server has no TLS");
  test_stop(srv);
  cfg.tls = 1;
  srv = test_start(&cfg);
  ASSERT_EQ(cb_server_tls_port(srv), cb_server_port(srv));
  buf_t e = {0};
  hello_exp(&e);
  tls_check(srv, cb_server_port(srv), "/hello", &e);
  buf_free(&e);
  test_stop(srv);
  ASSERT_ERR(cb_server_tls_port(NULL), CB_EINVAL);
  ASSERT_ERR(cb_server_ktls(NULL, NULL, 0), CB_EINVAL);
}

/* ---- bounded handshakes ---- */

/* tls_max_handshakes 4 on one worker: three clients that stall (nothing, half a ClientHello) hold three; a good
 * client is served beside them; a fourth staller fills the bound and the next connection is closed at once and
 * counted; the cleartext port is served all along; the stallers' closes are failed handshakes, and then a good
 * client is served again. */
TEST(tls_handshakes_bounded) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls_port = 0;
  cfg.tls_max_handshakes = 4;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv), tport = cb_server_tls_port(srv);
  buf_t hello = {0}, e = {0};
  client_hello(&hello);
  hello_exp(&e);
  int stall[4];
  stall[0] = cl_connect(tport);
  stall[1] = cl_connect(tport);
  stall[2] = cl_connect(tport);
  cl_send(stall[2], hello.p, hello.len / 2);
  cb_stats_t st;
  wait_counts(srv, &st, 0, 0, 3);
  tls_check(srv, tport, "/hello", &e);
  wait_counts(srv, &st, 0, 0, 4);
  stall[3] = cl_connect(tport);
  cl_send(stall[3], hello.p, 5); /* a record header alone */
  wait_counts(srv, &st, 0, 0, 5);
  /* The fifth handshake is refused: closed before a byte is read. */
  int fd = cl_connect(tport);
  buf_t rest = {0};
  int r = cl_read_close(fd, &rest, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  ASSERT_EQ(rest.len, 0);
  close(fd);
  wait_counts(srv, &st, 0, 1, 5); /* refused at accept: not a connection */
  plain_check(port, &e);
  wait_counts(srv, &st, 0, 1, 6);
  for (int i = 0; i < 4; i++) EXPECT_QUIET(stall[i], 50); /* still held, nothing sent to them */
  for (int i = 0; i < 4; i++) close(stall[i]);
  wait_counts(srv, &st, 4, 1, 6);
  tls_check(srv, tport, "/hello", &e);
  wait_counts(srv, &st, 4, 1, 7);
  ASSERT_EQ(st.requests, 3);
  wait_stats(srv, &st, all_closed, NULL, 10000); /* the last client's close reaches the server a moment later */
  ASSERT_EQ(st.conns_open, 0);
  ASSERT_EQ(st.tls_handshakes_failed, 4);
  buf_free(&hello);
  buf_free(&rest);
  buf_free(&e);
  test_stop(srv);
}

/* The header timeout bounds a handshake: a client that sends nothing, and one that sends half a ClientHello, are
 * closed after it (failed handshakes, and timeouts), and a good client is served meanwhile. */
TEST(tls_handshake_timeout) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls_port = 0;
  cfg.header_timeout_ms = 300;
  cb_server_t *srv = test_start(&cfg);
  int tport = cb_server_tls_port(srv);
  buf_t hello = {0}, e = {0};
  client_hello(&hello);
  hello_exp(&e);
  int quiet = cl_connect(tport);
  int half = cl_connect(tport);
  cl_send(half, hello.p, hello.len / 2);
  tls_check(srv, tport, "/hello", &e);
  for (int i = 0; i < 2; i++) {
    int fd = i == 0 ? quiet : half;
    buf_t rest = {0};
    int r = cl_read_close(fd, &rest, 10000);
    if (r != CL_EOF && r != CL_RESET) FAIL("a stalled handshake was not closed after the header timeout: %s", cl_status_name(r));
    buf_free(&rest);
    close(fd);
  }
  cb_stats_t st;
  wait_counts(srv, &st, 2, 0, 3);
  ASSERT_EQ(st.timeouts, 2);
  ASSERT_EQ(st.requests, 1);
  buf_free(&hello);
  buf_free(&e);
  test_stop(srv);
}

/* ---- kernel TLS: detection and fallback ---- */

static const char *write_ulp(const char *content) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/cbench-ulp-%d", (int)getpid());
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(content, f);
  fclose(f);
  return path;
}

/* Starts a TLS-port server with the environment as set, checks cb_server_ktls's answer and reason, serves /hello
 * and a file over TLS, and returns the tls_ktls count. */
static uint64_t ktls_run(int want_on, const char *want_why) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls_port = 0;
  cb_server_t *srv = test_start(&cfg);
  char why[256];
  int on = cb_server_ktls(srv, why, sizeof why);
  ASSERT_EQ(on, want_on);
  if (strstr(why, want_why) == NULL) FAIL("cb_server_ktls says '%s', not '%s'", why, want_why);
  buf_t e = {0};
  hello_exp(&e);
  tls_check(srv, cb_server_tls_port(srv), "/hello", &e);
  buf_reset(&e);
  exp_route(&e, "GET", "/file/small", CONN_NONE);
  tls_check(srv, cb_server_tls_port(srv), "/file/small", &e);
  buf_free(&e);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stop_stats(srv, &st), 0);
  ASSERT_EQ(st.requests, 2);
  ASSERT_EQ(st.tls_handshakes_failed, 0);
  return st.tls_ktls;
}

TEST(ktls_not_offered_falls_back) {
  const char *p = write_ulp("mptcp espintcp\n");
  setenv("CBENCH_KTLS_ULP_FILE", p, 1);
  char want[160];
  snprintf(want, sizeof want, "the kernel offers no tls ULP (%s does not list tls: modprobe tls)", p);
  ASSERT_EQ(ktls_run(0, want), 0);
  unlink(p);
}

TEST(ktls_unreadable_falls_back) {
  setenv("CBENCH_KTLS_ULP_FILE", "/nonexistent/tcp_available_ulp", 1);
  ASSERT_EQ(ktls_run(0, "/nonexistent/tcp_available_ulp cannot be read"), 0);
}

TEST(ktls_forced_off) {
  setenv("CBENCH_KTLS", "off", 1);
  ASSERT_EQ(ktls_run(0, "turned off (CBENCH_KTLS=off)"), 0);
}

/* The kernel is said to offer the ULP: the server asks OpenSSL for kernel TLS. Whether a connection's records then
 * go to the kernel is the real kernel's answer: when it has no `tls` module, setsockopt(TCP_ULP) fails and every
 * connection stays with OpenSSL (served the same, tls_ktls 0). */
TEST(ktls_offered_tries) {
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");
  char real[256] = "";
  if (f != NULL) {
    size_t n = fread(real, 1, sizeof real - 1, f);
    real[n] = '\0';
    fclose(f);
  }
  int kernel_has = strstr(real, "tls") != NULL;
  const char *p = write_ulp("mptcp tls\n");
  setenv("CBENCH_KTLS_ULP_FILE", p, 1);
  uint64_t n = ktls_run(1, "");
  unlink(p);
  if (n != (kernel_has ? 2u : 0u))
    FAIL("tls_ktls %llu with this kernel's ULPs '%s' (the kernel %s the tls module)", (unsigned long long)n, real,
         kernel_has ? "has" : "lacks");
}
