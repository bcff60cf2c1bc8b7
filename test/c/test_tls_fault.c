/* TLS faults (docs/faults.md "TLS faults", src/transport/tls_fault.c) with an in-process OpenSSL client: what each
 * handshake fault puts on the wire (nothing and a FIN, a reset, one alert record, a flight in ten pieces), what the
 * after-handshake faults leave a client (the answer's plaintext, then a bad record or an EOF without close_notify),
 * their journal entries and counters, 501 in cleartext; and the TLS transport's reads with the client's flights
 * split at every byte. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common.h"
#include "engine.h"
#include "testing.h"
#include "transport/tls_fault.h"

static void sink_buf(void *arg, const char *p, size_t n) { buf_add(arg, p, n); }

/* ---- a client ---- */

static SSL_CTX *client_ctx(const char *ca_pem, const char *alpn, size_t alpn_len) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(ctx);
  if (ca_pem != NULL) {
    BIO *b = BIO_new_mem_buf(ca_pem, -1);
    X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
    ASSERT_NOT_NULL(ca);
    ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca), 1);
    X509_free(ca);
    BIO_free(b);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  }
  if (alpn != NULL) ASSERT_EQ(SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)alpn, (unsigned)alpn_len), 0);
  return ctx;
}

/* A client session on memory BIOs: what it writes waits in its write BIO (cout), what it reads is put into cin. */
typedef struct {
  SSL *ssl;
  BIO *cin, *cout;
} client_t;

static void client_new(client_t *c, SSL_CTX *ctx, const char *sni) {
  c->ssl = SSL_new(ctx);
  ASSERT_NOT_NULL(c->ssl);
  c->cin = BIO_new(BIO_s_mem());
  c->cout = BIO_new(BIO_s_mem());
  SSL_set_bio(c->ssl, c->cin, c->cout);
  SSL_set_connect_state(c->ssl);
  if (sni != NULL) {
    ASSERT_EQ(SSL_set_tlsext_host_name(c->ssl, sni), 1);
    ASSERT_EQ(SSL_set1_host(c->ssl, sni), 1);
  }
}

/* The client's next flight: drives its handshake and takes what it wrote. Returns the handshake's result. */
static int client_step(client_t *c, buf_t *flight) {
  int rc = SSL_do_handshake(c->ssl);
  char *p;
  long n = BIO_get_mem_data(c->cout, &p);
  if (n > 0) buf_add(flight, p, (size_t)n);
  (void)BIO_reset(c->cout);
  return rc;
}

/* Everything the server has written to fd so far (a non-blocking socket), into b. */
static void drain(int fd, buf_t *b) {
  char tmp[4096];
  for (;;) {
    ssize_t n = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n <= 0) return;
    buf_add(b, tmp, (size_t)n);
  }
}

static char ca_pem[8192];

static cb_server_t *start_tls(unsigned header_timeout_ms) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls = 1;
  cfg.journal = 64;
  cfg.header_timeout_ms = header_timeout_ms;
  cb_server_t *srv = test_start(&cfg);
  ASSERT_GT(cb_server_tls_ca(srv, ca_pem, sizeof ca_pem), 0);
  return srv;
}

/* A ClientHello for sni (with ALPN alpn, when not NULL) sent on a new connection; everything until the server
 * closes, and how it closed. */
static int hello_then_read(int port, const char *sni, const char *alpn, size_t alpn_len, buf_t *got) {
  SSL_CTX *ctx = client_ctx(NULL, alpn, alpn_len);
  client_t c;
  client_new(&c, ctx, sni);
  buf_t hello = {0};
  ASSERT_EQ(client_step(&c, &hello), -1);
  ASSERT_GT(hello.len, 0);
  int fd = cl_connect(port);
  cl_send(fd, hello.p, hello.len);
  int r = cl_read_close(fd, got, 10000);
  close(fd);
  buf_free(&hello);
  SSL_free(c.ssl);
  SSL_CTX_free(ctx);
  return r;
}

/* The handshake faults on the wire: a stall sends nothing and the header timeout closes (FIN); a reset, nothing
 * and RST; alpn-none, exactly one fatal no_application_protocol alert (plaintext, before any key) and a FIN,
 * whatever the client offered, no ALPN included. */
TEST(tls_fault_handshake_wire) {
  cb_server_t *srv = start_tls(300);
  int port = cb_server_port(srv);
  buf_t got = {0};
  static const char alert[] = "\x15\x03\x03\x00\x02\x02\x78"; /* alert(21), TLS 1.2 record, fatal(2), 120 */

  uint64_t t0 = now_ms();
  ASSERT_EQ(hello_then_read(port, "tls-stall.localhost", "\x02h2", 3, &got), CL_EOF);
  ASSERT_MEM_EQ(got.p, got.len, "", (size_t)0);
  cbt_log("tls-stall: closed after %llu ms (header timeout 300 ms)", (unsigned long long)(now_ms() - t0));
  buf_reset(&got);
  ASSERT_EQ(hello_then_read(port, "TLS-Reset.localhost", "\x08http/1.1", 9, &got), CL_RESET);
  ASSERT_MEM_EQ(got.p, got.len, "", (size_t)0);
  buf_reset(&got);
  ASSERT_EQ(hello_then_read(port, "alpn-none.localhost", "\x02h2\x08http/1.1", 12, &got), CL_EOF);
  ASSERT_MEM_EQ(got.p, got.len, alert, sizeof alert - 1);
  buf_reset(&got);
  ASSERT_EQ(hello_then_read(port, "alpn-none.localhost", NULL, 0, &got), CL_EOF);
  ASSERT_MEM_EQ(got.p, got.len, alert, sizeof alert - 1);
  buf_reset(&got);
  /* A name that is no fault's is served: the flight begins with a ServerHello record (handshake, 22). */
  ASSERT_EQ(hello_then_read(port, "localhost", "\x02h2", 3, &got), CL_EOF);
  ASSERT_GT(got.len, 5);
  ASSERT_EQ((unsigned char)got.p[0], 0x16);
  buf_free(&got);

  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.faults, 0); /* handshake faults answer no request */
  test_stop(srv);
}

/* ---- a blocking client over TCP ---- */

typedef struct {
  SSL_CTX *ctx;
  SSL *ssl;
  int fd;
} conn_t;

static void tls_connect(conn_t *k, int port, const char *sni) {
  k->ctx = client_ctx(ca_pem, "\x08http/1.1", 9);
  k->ssl = SSL_new(k->ctx);
  k->fd = cl_connect(port);
  SSL_set_fd(k->ssl, k->fd);
  ASSERT_EQ(SSL_set_tlsext_host_name(k->ssl, sni), 1);
  ASSERT_EQ(SSL_set1_host(k->ssl, sni), 1);
  int rc = SSL_connect(k->ssl);
  if (rc != 1) cbt_log("SSL_connect: %d, %s", SSL_get_error(k->ssl, rc), ERR_reason_error_string(ERR_peek_error()));
  ASSERT_EQ(rc, 1);
  ASSERT_EQ(SSL_get_verify_result(k->ssl), X509_V_OK);
}

/* Sends req and reads plaintext until the session ends; returns the reason it ended (0: close_notify). */
static int tls_exchange(conn_t *k, const char *req, buf_t *got) {
  ASSERT_EQ(SSL_write(k->ssl, req, (int)strlen(req)), (int)strlen(req));
  char tmp[4096];
  for (;;) {
    ERR_clear_error();
    int n = SSL_read(k->ssl, tmp, sizeof tmp);
    if (n > 0) {
      buf_add(got, tmp, (size_t)n);
      continue;
    }
    int e = SSL_get_error(k->ssl, n);
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    return ERR_GET_REASON(ERR_peek_error());
  }
}

static void tls_close(conn_t *k) {
  SSL_free(k->ssl);
  SSL_CTX_free(k->ctx);
  close(k->fd);
}

/* What a cleartext server sends for GET /fault/spec with the connection closed after it (dates masked). */
static void cleartext_bytes(const char *spec, buf_t *out) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *clear = test_start(&cfg);
  int fd = cl_connect(cb_server_port(clear));
  char req[256];
  snprintf(req, sizeof req, "GET /fault/%s HTTP/1.1\r\nhost: x\r\n\r\n", spec);
  cl_sends(fd, req);
  cl_read_close(fd, out, 10000);
  close(fd);
  mask_dates(out->p, out->len);
  test_stop(clear);
}

/* tls-slow's handshake succeeds (the default leaf names it) and the answer follows. */
TEST(tls_fault_slow_handshake) {
  cb_server_t *srv = start_tls(10000);
  conn_t k;
  uint64_t t0 = now_ms();
  tls_connect(&k, cb_server_port(srv), "tls-slow.localhost");
  uint64_t took = now_ms() - t0;
  /* Nine waits of 100 ms between ten pieces: a floor, whatever the host's load. */
  if (took < 9 * CB__TLS_SLOW_MS) cbt_log("the handshake took %llu ms", (unsigned long long)took);
  ASSERT_GE(took, 9 * CB__TLS_SLOW_MS);
  buf_t got = {0};
  ASSERT_EQ(tls_exchange(&k, "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", &got), 0);
  ASSERT(got.len > 11 && memcmp(got.p + got.len - 11, "Hello, Joe!", 11) == 0);
  buf_free(&got);
  tls_close(&k);
  test_stop(srv);
}

/* The after-handshake faults: the plaintext is exactly what the cleartext `truncated` fault sends (the head and
 * `bytes` bytes), then a record the client cannot decrypt (bad_record_mac), or the end of the stream without
 * close_notify (unexpected EOF). A normal answer with connection: close ends with close_notify. Journal and
 * counter as for any fault; in cleartext the kinds are answered 501 and count as no fault. */
TEST(tls_fault_after_handshake) {
  buf_t expect = {0}, got = {0};
  cleartext_bytes("truncated?length=100&bytes=10", &expect);
  cb_server_t *srv = start_tls(10000);
  int port = cb_server_port(srv);
  conn_t k;

  tls_connect(&k, port, "localhost");
  ASSERT_EQ(tls_exchange(&k, "GET /fault/tls_bad_record?length=100&bytes=10 HTTP/1.1\r\nhost: x\r\n\r\n", &got),
            SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, expect.p, expect.len);
  ASSERT_EQ(SSL_get_shutdown(k.ssl) & SSL_RECEIVED_SHUTDOWN, 0);
  tls_close(&k);
  buf_reset(&got);

  tls_connect(&k, port, "localhost");
  ASSERT_EQ(tls_exchange(&k, "GET /fault/tls_truncate?length=100&bytes=10 HTTP/1.1\r\nhost: x\r\n\r\n", &got),
            SSL_R_UNEXPECTED_EOF_WHILE_READING);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, expect.p, expect.len);
  ASSERT_EQ(SSL_get_shutdown(k.ssl) & SSL_RECEIVED_SHUTDOWN, 0);
  tls_close(&k);
  buf_reset(&got);

  tls_connect(&k, port, "localhost");
  ASSERT_EQ(tls_exchange(&k, "GET /fault/truncated?length=100&bytes=10 HTTP/1.1\r\nhost: x\r\n\r\n", &got), 0);
  ASSERT_EQ(SSL_get_shutdown(k.ssl) & SSL_RECEIVED_SHUTDOWN, SSL_RECEIVED_SHUTDOWN);
  tls_close(&k);
  buf_free(&got);
  buf_free(&expect);

  cb_request_filter_t f = {0};
  cb_request_list_t *l = wait_journal(srv, &f, 3, 5000);
  ASSERT_EQ(l->count, 3);
  ASSERT_STR_EQ(l->items[0].fault.ptr, "tls_bad_record");
  ASSERT_STR_EQ(l->items[1].fault.ptr, "tls_truncate");
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ(l->items[i].status, 200);
    ASSERT_EQ(l->items[i].bytes_out, 10);
  }
  cb_request_list_free(l);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.faults, 3);
  test_stop(srv);

  /* Cleartext: 501, empty, the connection goes on; no fault counted. */
  cb_config_t cfg;
  test_config(&cfg);
  buf_t out = {0};
  cb__testconn_t *tc = cb__testconn_new(&cfg, sink_buf, &out);
  ASSERT_NOT_NULL(tc);
  static const char req[] = "GET /fault/tls_bad_record HTTP/1.1\r\nhost: x\r\n\r\n"
                            "GET /fault/tls_truncate?bytes=1 HTTP/1.1\r\nhost: x\r\n\r\n";
  ASSERT_EQ(cb__testconn_feed(tc, req, sizeof req - 1), 0);
  cb__testconn_run(tc, 0);
  buf_t exp = {0};
  exp_head(&exp, 501, NULL, NULL, 0, 0);
  exp_head(&exp, 501, NULL, NULL, 0, 0);
  mask_dates(out.p, out.len);
  ASSERT_MEM_EQ(out.p, out.len, exp.p, exp.len);
  cb__testconn_stats(tc, &st);
  ASSERT_EQ(st.faults, 0);
  ASSERT_EQ(cb__testconn_free(tc), 0);
  buf_free(&out);
  buf_free(&exp);
}

/* ---- the transport alone, over a socketpair ---- */

typedef struct {
  cb__certs_t *certs;
  cb__tls_ctx_t *ctx;
  const char *ca;
} tls_env_t;

static void env_new(tls_env_t *e) {
  ASSERT_EQ(cb__certs_new(NULL, &e->certs), 0);
  ASSERT_EQ(cb__tls_ctx_new(e->certs, 1, 1, &e->ctx), 0);
  e->ca = cb__certs_ca_pem(e->certs, CB__CA_SERVER).ptr;
}

static void env_free(tls_env_t *e) {
  cb__tls_ctx_free(e->ctx);
  cb__certs_free(e->certs);
}

static void pair(int sv[2]) { ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0); }

/* tls-slow, piece by piece: the first of ten pieces at once, then one per turn of the loop (its timer), each
 * ceil(flight / 10) bytes but the last; then the client's flight completes the handshake, the session's last
 * messages go at once, and the socket is the session's again (a write reaches it without the loop). */
TEST(tls_fault_slow_pieces) {
  tls_env_t e;
  env_new(&e);
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  int sv[2];
  pair(sv);
  cb__tport_t t;
  ASSERT_EQ(cb__tport_tls(sv[0], e.ctx, NULL, &t), 0);
  t.loop = &loop;
  SSL_CTX *cctx = client_ctx(e.ca, "\x02h2", 3);
  client_t c;
  client_new(&c, cctx, "tls-slow.localhost");
  buf_t fl = {0}, pieces[16];
  memset(pieces, 0, sizeof pieces);
  char buf[4096];
  ASSERT_EQ(client_step(&c, &fl), -1);
  cl_send(sv[1], fl.p, fl.len);
  ASSERT_EQ(t.ops->read(&t, buf, sizeof buf), UV_EAGAIN);
  int n = 0;
  drain(sv[1], &pieces[n++]);
  while (uv_run(&loop, UV_RUN_ONCE) != 0) {
    ASSERT_LT(n, 16);
    drain(sv[1], &pieces[n++]);
  }
  drain(sv[1], &pieces[n++]); /* the last turn's piece */
  size_t total = 0;
  for (int i = 0; i < n; i++) total += pieces[i].len;
  size_t piece = (total + CB__TLS_SLOW_PIECES - 1) / CB__TLS_SLOW_PIECES;
  cbt_log("flight %zu bytes in %d pieces of %zu", total, n, piece);
  ASSERT_GT(total, 90); /* so that ten pieces of ceil(total / 10) are needed */
  ASSERT_EQ(n, CB__TLS_SLOW_PIECES);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(pieces[i].len, i + 1 < n ? piece : total - piece * (size_t)(n - 1));
    BIO_write(c.cin, pieces[i].p, (int)pieces[i].len);
    buf_free(&pieces[i]);
  }
  buf_reset(&fl);
  ASSERT_EQ(client_step(&c, &fl), 1);
  ASSERT_EQ(SSL_get_verify_result(c.ssl), X509_V_OK);
  cl_send(sv[1], fl.p, fl.len);
  ASSERT_EQ(t.ops->read(&t, buf, sizeof buf), UV_EAGAIN); /* done, no application data yet */
  ASSERT(t.ready);
  ASSERT_EQ(t.alpn, CB__ALPN_H2);
  buf_t rest = {0};
  drain(sv[1], &rest); /* the tickets, at once */
  ASSERT_GT(rest.len, 0);
  ASSERT_EQ(t.ops->write(&t, "pong", 4), 4);
  drain(sv[1], &rest);
  BIO_write(c.cin, rest.p, (int)rest.len);
  char got[8];
  ASSERT_EQ(SSL_read(c.ssl, got, sizeof got), 4);
  ASSERT_MEM_EQ(got, 4, "pong", 4);
  ASSERT_EQ(SSL_write(c.ssl, "ping", 4), 4);
  buf_reset(&fl);
  client_step(&c, &fl);
  cl_send(sv[1], fl.p, fl.len);
  ASSERT_EQ(t.ops->read(&t, buf, sizeof buf), 4);
  ASSERT_MEM_EQ(buf, 4, "ping", 4);
  t.ops->close(&t, 0);
  ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  close(sv[1]);
  buf_free(&fl);
  buf_free(&rest);
  SSL_free(c.ssl);
  SSL_CTX_free(cctx);
  env_free(&e);
}

/* A paced session closed in the middle of its flight: the timer goes with it (the loop closes clean; ASan sees
 * the state freed once). */
TEST(tls_fault_slow_closed_early) {
  tls_env_t e;
  env_new(&e);
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  int sv[2];
  pair(sv);
  cb__tport_t t;
  ASSERT_EQ(cb__tport_tls(sv[0], e.ctx, NULL, &t), 0);
  t.loop = &loop;
  SSL_CTX *cctx = client_ctx(NULL, NULL, 0);
  client_t c;
  client_new(&c, cctx, "tls-slow.localhost");
  buf_t fl = {0};
  char buf[256];
  client_step(&c, &fl);
  cl_send(sv[1], fl.p, fl.len);
  ASSERT_EQ(t.ops->read(&t, buf, sizeof buf), UV_EAGAIN);
  t.ops->close(&t, 1);
  ASSERT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ASSERT_EQ(uv_loop_close(&loop), 0);
  close(sv[1]);
  buf_free(&fl);
  SSL_free(c.ssl);
  SSL_CTX_free(cctx);
  env_free(&e);
}

/* The transport's reads with the client's flights split at every byte: the ClientHello in two writes split at k
 * (the first part is no handshake step: nothing is written back), then the client's second flight split at k too;
 * every split completes the handshake and carries a byte of application data. */
TEST(tls_split_every_byte) {
  tls_env_t e;
  env_new(&e);
  SSL_CTX *cctx = client_ctx(e.ca, "\x08http/1.1", 9);
  size_t hello_len = 0;
  for (size_t k = 1;; k++) {
    int sv[2];
    pair(sv);
    cb__tport_t t;
    ASSERT_EQ(cb__tport_tls(sv[0], e.ctx, NULL, &t), 0);
    client_t c;
    client_new(&c, cctx, "localhost");
    buf_t fl = {0}, back = {0};
    char buf[256];
    ASSERT_EQ(client_step(&c, &fl), -1);
    hello_len = fl.len;
    size_t cut = k < fl.len ? k : fl.len - 1;
    cl_send(sv[1], fl.p, cut);
    ASSERT_EQ(t.ops->read(&t, buf, sizeof buf), UV_EAGAIN);
    drain(sv[1], &back);
    ASSERT_EQ(back.len, 0);
    cl_send(sv[1], fl.p + cut, fl.len - cut);
    ASSERT_EQ(t.ops->read(&t, buf, sizeof buf), UV_EAGAIN);
    drain(sv[1], &back);
    ASSERT_GT(back.len, 0);
    BIO_write(c.cin, back.p, (int)back.len);
    buf_reset(&fl);
    ASSERT_EQ(client_step(&c, &fl), 1);
    ASSERT_EQ(SSL_write(c.ssl, "x", 1), 1);
    client_step(&c, &fl);
    cut = k % fl.len;
    cl_send(sv[1], fl.p, cut);
    ssize_t r = t.ops->read(&t, buf, sizeof buf);
    if (r == UV_EAGAIN) {
      cl_send(sv[1], fl.p + cut, fl.len - cut);
      r = t.ops->read(&t, buf, sizeof buf);
    }
    ASSERT_EQ(r, 1);
    ASSERT_EQ(buf[0], 'x');
    ASSERT(t.ready);
    t.ops->close(&t, 0);
    close(sv[1]);
    buf_free(&fl);
    buf_free(&back);
    SSL_free(c.ssl);
    if (k >= hello_len) break;
  }
  cbt_log("%zu splits of a %zu-byte ClientHello", hello_len, hello_len);
  SSL_CTX_free(cctx);
  env_free(&e);
}

/* ---- the batch of the transport's writes (src/transport/tls_batch.c) ----
 * Over a SOCK_SEQPACKET pair each write(2) of the server is one packet for the client, so these count the server's
 * writes exactly. */

static void seqpair(int sv[2]) { ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv), 0); }

/* The server's writes waiting on fd, each its own packet: how many, their bytes appended to all. */
static int packets(int fd, buf_t *all) {
  static char tmp[65536];
  int n = 0;
  for (;;) {
    ssize_t r = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (r <= 0) return n;
    buf_add(all, tmp, (size_t)r);
    n++;
  }
}

static int tickets_seen;
static int count_ticket(SSL *ssl, SSL_SESSION *s) {
  (void)ssl, (void)s;
  tickets_seen++;
  return 0; /* not kept */
}

/* A TLS 1.3 handshake up to the client's Finished, sent with the client's first data (req) in one packet, as
 * h2load and curl send them; the server's read returns req. */
static void batch_handshake(cb__tport_t *t, int fd, client_t *c, const char *req) {
  buf_t fl = {0}, back = {0};
  char buf[256];
  ASSERT_EQ(client_step(c, &fl), -1);
  cl_send(fd, fl.p, fl.len);
  ASSERT_EQ(t->ops->read(t, buf, sizeof buf), UV_EAGAIN);
  ASSERT_EQ(packets(fd, &back), 1); /* the server's flight, flushed at once: the client waits for it */
  BIO_write(c->cin, back.p, (int)back.len);
  buf_reset(&fl);
  ASSERT_EQ(client_step(c, &fl), 1);
  ASSERT_EQ(SSL_write(c->ssl, req, (int)strlen(req)), (int)strlen(req));
  client_step(c, &fl);
  cl_send(fd, fl.p, fl.len);
  ASSERT_EQ(t->ops->read(t, buf, sizeof buf), (ssize_t)strlen(req));
  ASSERT_MEM_EQ(buf, strlen(req), req, strlen(req));
  ASSERT(t->ready);
  buf_free(&fl);
  buf_free(&back);
}

/* The client reads plaintext from what the server wrote, into got, until it has nothing more. Returns SSL_read's
 * last result (0 after close_notify). */
static int client_read(client_t *c, const buf_t *wire, buf_t *got) {
  if (wire->len > 0) BIO_write(c->cin, wire->p, (int)wire->len);
  char tmp[65536];
  int r;
  while ((r = SSL_read(c->ssl, tmp, sizeof tmp)) > 0) buf_add(got, tmp, (size_t)r);
  return r;
}

/* A server transport on one end of a SOCK_SEQPACKET pair and a client session for the other, handshake done. */
typedef struct {
  tls_env_t e;
  int sv[2];
  cb__tport_t t;
  SSL_CTX *cctx;
  client_t c;
  buf_t wire, got;
} batch_fx_t;

static void batch_open(batch_fx_t *f, const char *req, int (*on_ticket)(SSL *, SSL_SESSION *)) {
  memset(f, 0, sizeof *f);
  env_new(&f->e);
  seqpair(f->sv);
  ASSERT_EQ(cb__tport_tls(f->sv[0], f->e.ctx, NULL, &f->t), 0);
  f->cctx = client_ctx(f->e.ca, "\x08http/1.1", 9);
  if (on_ticket != NULL) {
    SSL_CTX_set_session_cache_mode(f->cctx, SSL_SESS_CACHE_CLIENT);
    SSL_CTX_sess_set_new_cb(f->cctx, on_ticket);
  }
  client_new(&f->c, f->cctx, "localhost");
  batch_handshake(&f->t, f->sv[1], &f->c, req);
}

static void batch_close(batch_fx_t *f) {
  f->t.ops->close(&f->t, 0);
  close(f->sv[1]);
  buf_free(&f->wire);
  buf_free(&f->got);
  SSL_free(f->c.ssl);
  SSL_CTX_free(f->cctx);
  env_free(&f->e);
}

/* The session tickets, a response in two pieces and the close_notify leave in one write, and the FIN after them at
 * the push: three writes before the batch. */
TEST(tls_batch_one_write) {
  batch_fx_t f;
  tickets_seen = 0;
  batch_open(&f, "GET / HTTP/1.1\r\nconnection: close\r\n\r\n", count_ticket);
  ASSERT_EQ(packets(f.sv[1], &f.wire), 0); /* the tickets wait for the response */
  struct iovec iov[2] = {{"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", 38}, {"hello", 5}};
  ASSERT_EQ(f.t.ops->writev(&f.t, iov, 2), 43);
  ASSERT_EQ(packets(f.sv[1], &f.wire), 0); /* the response waits with the tickets */
  f.t.ops->shutdown(&f.t); /* OpenSSL flushes its alert: the close_notify goes, and all that waited with it */
  ASSERT_EQ(packets(f.sv[1], &f.wire), 1);
  char eof;
  ASSERT_EQ(recv(f.sv[1], &eof, 1, MSG_DONTWAIT), -1); /* no FIN before the push */
  ASSERT_EQ(errno, EAGAIN);
  ASSERT_EQ(f.t.ops->push(&f.t), 0);
  ASSERT_EQ(f.t.held, 0);
  ASSERT_EQ(recv(f.sv[1], &eof, 1, MSG_DONTWAIT), 0); /* the FIN, after the packet */
  ASSERT_EQ(client_read(&f.c, &f.wire, &f.got), 0);
  ASSERT_EQ(SSL_get_error(f.c.ssl, 0), SSL_ERROR_ZERO_RETURN); /* close_notify */
  ASSERT_MEM_EQ(f.got.p, f.got.len, "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", 43);
  ASSERT_EQ(tickets_seen, 2); /* a full handshake's two tickets were in the packet */
  batch_close(&f);
}

/* A record too big to copy goes out with what the batch holds, in one writev(2), uncopied: a head and a 40,000-byte
 * body are three writes (head and first 16 KiB record, second record, the rest), in order. */
TEST(tls_batch_big_records) {
  batch_fx_t f;
  batch_open(&f, "GET /big HTTP/1.1\r\n\r\n", NULL);
  static char body[40000];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (char)('a' + i % 26);
  ASSERT_EQ(f.t.ops->write(&f.t, "HTTP/1.1 200 OK\r\n\r\n", 19), 19); /* into the batch */
  size_t sent = 0;
  while (sent < sizeof body) { /* a record per call (partial writes) */
    ssize_t r = f.t.ops->write(&f.t, body + sent, sizeof body - sent);
    ASSERT_GT(r, 0);
    sent += (size_t)r;
  }
  ASSERT_EQ(packets(f.sv[1], &f.wire), 3);
  ASSERT_EQ(f.t.ops->push(&f.t), 0);
  ASSERT_EQ(packets(f.sv[1], &f.wire), 0);
  ASSERT_EQ(client_read(&f.c, &f.wire, &f.got), -1);
  ASSERT_EQ(f.got.len, 19 + sizeof body);
  ASSERT_MEM_EQ(f.got.p, 19, "HTTP/1.1 200 OK\r\n\r\n", 19);
  ASSERT_MEM_EQ(f.got.p + 19, sizeof body, body, sizeof body);
  batch_close(&f);
}

/* A socket that takes nothing: the push keeps the batch (held, so the connection polls for writable), a big record
 * waits behind it (the write answers UV_EAGAIN, as with a socket BIO), and once the client has read, the push and
 * the repeated write send both, in order. */
TEST(tls_batch_socket_full) {
  batch_fx_t f;
  batch_open(&f, "GET / HTTP/1.1\r\n\r\n", NULL);
  ASSERT_EQ(f.t.ops->push(&f.t), 0); /* the tickets */
  ASSERT_EQ(packets(f.sv[1], &f.wire), 1);
  ASSERT_EQ(client_read(&f.c, &f.wire, &f.got), -1);
  ASSERT_EQ(f.got.len, 0);
  buf_reset(&f.wire);
  char fill[1000];
  memset(fill, 'F', sizeof fill);
  int filled = 0;
  while (send(f.sv[0], fill, sizeof fill, MSG_DONTWAIT) == (ssize_t)sizeof fill) filled++;
  ASSERT_EQ(errno, EAGAIN);
  ASSERT_EQ(f.t.ops->write(&f.t, "small", 5), 5); /* into the batch */
  ASSERT_EQ(f.t.ops->push(&f.t), 0);
  ASSERT_EQ(f.t.held, 1);
  static char big[20000];
  memset(big, 'B', sizeof big);
  ASSERT_EQ(f.t.ops->write(&f.t, big, sizeof big), UV_EAGAIN);
  int n = 0;
  static char tmp[65536];
  while (recv(f.sv[1], tmp, sizeof tmp, MSG_DONTWAIT) == (ssize_t)sizeof fill) n++; /* the filler, dropped */
  ASSERT_EQ(n, filled);
  ASSERT_EQ(f.t.ops->push(&f.t), 0); /* the small record: one packet */
  ASSERT_EQ(f.t.held, 0);
  size_t sent = 0;
  while (sent < sizeof big) { /* the same bytes again, as OpenSSL asks */
    ssize_t r = f.t.ops->write(&f.t, big + sent, sizeof big - sent);
    ASSERT_GT(r, 0);
    sent += (size_t)r;
  }
  ASSERT_EQ(f.t.ops->push(&f.t), 0); /* the last record, 3,616 bytes, was small enough to wait */
  ASSERT_EQ(packets(f.sv[1], &f.wire), 3); /* the small record, the first big one alone, the last one */
  ASSERT_EQ(client_read(&f.c, &f.wire, &f.got), -1);
  ASSERT_EQ(f.got.len, 5 + sizeof big);
  ASSERT_MEM_EQ(f.got.p, 5, "small", 5);
  ASSERT_MEM_EQ(f.got.p + 5, sizeof big, big, sizeof big);
  batch_close(&f);
}
