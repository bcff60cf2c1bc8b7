/* Reads over TLS (src/transport/tls.c, src/core/conn.c): what OpenSSL reads from the socket ahead of a full read
 * buffer is read at the next turn of the loop, without a readable event. A request whose records all wait in the
 * socket when the worker reads (a head written as one record, then a body of 16 KiB records) fills the worker's
 * 64 KiB buffer in the middle of a record: the rest of it is in OpenSSL, not in the socket, and the client sends
 * nothing more until it has its answer. Before `buffered`, that request waited for the header timeout. */
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "common.h"
#include "engine.h"
#include "testing.h"

/* A TLS client on memory BIOs: what it writes is taken from cout and sent to the socket by the test; what the
 * server wrote is put into cin. */
typedef struct {
  SSL_CTX *ctx;
  SSL *ssl;
  BIO *cin, *cout;
} client_t;

static void client_new(client_t *c, const char *ca_pem) {
  c->ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(c->ctx);
  BIO *b = BIO_new_mem_buf(ca_pem, -1);
  X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
  ASSERT_NOT_NULL(ca);
  ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), ca), 1);
  X509_free(ca);
  BIO_free(b);
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
  ASSERT_EQ(SSL_CTX_set_alpn_protos(c->ctx, (const unsigned char *)"\x08http/1.1", 9), 0);
  c->ssl = SSL_new(c->ctx);
  c->cin = BIO_new(BIO_s_mem());
  c->cout = BIO_new(BIO_s_mem());
  SSL_set_bio(c->ssl, c->cin, c->cout);
  SSL_set_connect_state(c->ssl);
  ASSERT_EQ(SSL_set_tlsext_host_name(c->ssl, "localhost"), 1);
}

static void client_free(client_t *c) {
  SSL_free(c->ssl);
  SSL_CTX_free(c->ctx);
}

/* What the client wrote so far goes to the socket fd. */
static void client_flush(client_t *c, int fd) {
  char *p;
  long n = BIO_get_mem_data(c->cout, &p);
  if (n > 0) cl_send(fd, p, (size_t)n);
  (void)BIO_reset(c->cout);
}

/* What the server wrote so far comes to the client. */
static void client_take(client_t *c, int fd) {
  char tmp[16384];
  for (;;) {
    ssize_t n = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n <= 0) return;
    BIO_write(c->cin, tmp, (int)n);
  }
}

TEST(tls_read_ahead_of_a_full_buffer) {
  cb__certs_t *certs;
  cb__tls_ctx_t *ctx;
  ASSERT_EQ(cb__certs_new(NULL, &certs), 0);
  ASSERT_EQ(cb__tls_ctx_new(certs, 1, 1, &ctx), 0);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  int big = 1 << 20;
  ASSERT_EQ(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big), 0);
  cb_config_t cfg;
  test_config(&cfg);
  cfg.max_body_bytes = 1 << 20;
  cb__testconn_t *tc = cb__testconn_new_tls(&cfg, sv[0], ctx);
  ASSERT_NOT_NULL(tc);
  client_t c;
  client_new(&c, cb__certs_ca_pem(certs, CB__CA_SERVER).ptr);

  /* The handshake, a flight at a time. */
  int rc, turns = 0;
  while ((rc = SSL_do_handshake(c.ssl)) != 1) {
    ASSERT_EQ(SSL_get_error(c.ssl, rc), SSL_ERROR_WANT_READ);
    ASSERT_LT(turns++, 20);
    client_flush(&c, sv[1]);
    cb__testconn_run(tc, 0);
    client_take(&c, sv[1]);
  }
  ASSERT_EQ(SSL_get_verify_result(c.ssl), X509_V_OK);

  /* The head as one record, the body as records of 16 KiB, all in the socket before the server reads: 300 bytes
   * + 3 x 16 KiB, then 16,084 bytes of the fourth record fill the buffer, and 100 bytes stay in OpenSSL. */
  size_t body_len = 65336;
  char *body = malloc(body_len);
  ASSERT_NOT_NULL(body);
  for (size_t i = 0; i < body_len; i++) body[i] = (char)('a' + i % 26);
  char head[301];
  int hl = snprintf(head, sizeof head, "POST /echo HTTP/1.1\r\nhost: localhost\r\ncontent-length: %zu\r\nx-pad: ",
                    body_len);
  memset(head + hl, 'p', 300 - 4 - (size_t)hl);
  memcpy(head + 296, "\r\n\r\n", 4);
  ASSERT_EQ(SSL_write(c.ssl, head, 300), 300);
  ASSERT_EQ(SSL_write(c.ssl, body, (int)body_len), (int)body_len);
  client_flush(&c, sv[1]);

  /* Turns of the loop, and nothing more from the client: the whole echo comes back. */
  buf_t got = {0};
  char tmp[16384];
  for (turns = 0; turns < 200 && (got.len < body_len || memmem(got.p, got.len, "\r\n\r\n", 4) == NULL ||
                                  got.len - ((char *)memmem(got.p, got.len, "\r\n\r\n", 4) + 4 - got.p) < body_len);
       turns++) {
    cb__testconn_run(tc, 0);
    client_take(&c, sv[1]);
    int n;
    while ((n = SSL_read(c.ssl, tmp, sizeof tmp)) > 0) buf_add(&got, tmp, (size_t)n);
  }
  cbt_log("%d turns, %zu bytes of answer", turns, got.len);
  ASSERT_GT(got.len, 12);
  ASSERT_MEM_EQ(got.p, 12, "HTTP/1.1 200", 12);
  const char *end = memmem(got.p, got.len, "\r\n\r\n", 4);
  ASSERT_NOT_NULL(end);
  ASSERT_MEM_EQ(end + 4, got.len - (size_t)(end + 4 - got.p), body, body_len);

  buf_free(&got);
  free(body);
  ASSERT_EQ(cb__testconn_free(tc), 0);
  close(sv[1]);
  client_free(&c);
  cb__tls_ctx_free(ctx);
  cb__certs_free(certs);
}

/* A client that sends its request and its close_notify together (one write: both records reach the server in
 * one recv) and keeps its socket open, waiting for the server's close_notify (a bidirectional shutdown, as
 * SSL_shutdown() callers and Python's unwrap() do). The read that returns the request has already taken the
 * close_notify into OpenSSL; the socket has nothing more to say. The server answers, then sends its own
 * close_notify and FIN: over plain TCP a request and its FIN in one read are answered and closed alike. Before
 * the fix the end was lost with that read, and the connection waited for the idle timeout. */
TEST(tls_close_notify_with_the_request) {
  cb__certs_t *certs;
  cb__tls_ctx_t *ctx;
  ASSERT_EQ(cb__certs_new(NULL, &certs), 0);
  ASSERT_EQ(cb__tls_ctx_new(certs, 1, 1, &ctx), 0);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  cb_config_t cfg;
  test_config(&cfg);
  cb__testconn_t *tc = cb__testconn_new_tls(&cfg, sv[0], ctx);
  ASSERT_NOT_NULL(tc);
  client_t c;
  client_new(&c, cb__certs_ca_pem(certs, CB__CA_SERVER).ptr);
  int rc, turns = 0;
  while ((rc = SSL_do_handshake(c.ssl)) != 1) {
    ASSERT_EQ(SSL_get_error(c.ssl, rc), SSL_ERROR_WANT_READ);
    ASSERT_LT(turns++, 20);
    client_flush(&c, sv[1]);
    cb__testconn_run(tc, 0);
    client_take(&c, sv[1]);
  }

  static const char req[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  ASSERT_EQ(SSL_write(c.ssl, req, (int)sizeof req - 1), (int)sizeof req - 1);
  ASSERT_EQ(SSL_shutdown(c.ssl), 0); /* close_notify sent; the server's is awaited */
  client_flush(&c, sv[1]);

  buf_t got = {0};
  char tmp[4096];
  int closed = 0;
  for (turns = 0; turns < 50 && !(SSL_get_shutdown(c.ssl) & SSL_RECEIVED_SHUTDOWN); turns++) {
    closed = cb__testconn_run(tc, 0);
    client_take(&c, sv[1]);
    int n;
    while ((n = SSL_read(c.ssl, tmp, sizeof tmp)) > 0) buf_add(&got, tmp, (size_t)n);
  }
  cbt_log("%d turns, %zu bytes of answer, closed %d", turns, got.len, closed);
  ASSERT_GT(got.len, 12);
  ASSERT_MEM_EQ(got.p, 12, "HTTP/1.1 200", 12);
  ASSERT(SSL_get_shutdown(c.ssl) & SSL_RECEIVED_SHUTDOWN); /* the server's close_notify came */
  for (int i = 0; i < 10 && !closed; i++) closed = cb__testconn_run(tc, 0);
  ASSERT_EQ(closed, 1); /* and the connection closed */
  char b;
  ASSERT_EQ(recv(sv[1], &b, 1, MSG_DONTWAIT), 0); /* its FIN */

  buf_free(&got);
  cb__testconn_free(tc);
  close(sv[1]);
  client_free(&c);
  cb__tls_ctx_free(ctx);
  cb__certs_free(certs);
}

/* Records that are not data, streamed by a client: TLS 1.3 KeyUpdates (27 bytes each) as fast as it can write
 * them. OpenSSL handles them inside one SSL_read and reads the socket again for the next, for as long as the
 * socket has bytes: before the fix one event of the connection took everything the client had sent (here the
 * whole socket buffer, 200 KiB and more; over TCP, from a client that keeps sending, without end), and every
 * other connection of the worker waited. An event now takes at most two read buffers (128 KiB) from the socket,
 * as a cleartext connection takes one; the rest comes at the next turns, and the connection still serves. */
static void keyupdate_stream(int ktls) {
  cb__certs_t *certs;
  cb__tls_ctx_t *ctx;
  ASSERT_EQ(cb__certs_new(NULL, &certs), 0);
  ASSERT_EQ(cb__tls_ctx_new(certs, 1, 1, &ctx), 0);
  if (ktls) cb__tls_ctx_ktls(ctx);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  int big = 4 << 20;
  ASSERT_EQ(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big), 0);
  cb_config_t cfg;
  test_config(&cfg);
  cb__testconn_t *tc = cb__testconn_new_tls(&cfg, sv[0], ctx);
  ASSERT_NOT_NULL(tc);
  client_t c;
  client_new(&c, cb__certs_ca_pem(certs, CB__CA_SERVER).ptr);
  ASSERT_EQ(SSL_set_min_proto_version(c.ssl, TLS1_3_VERSION), 1);
  int rc, turns = 0;
  while ((rc = SSL_do_handshake(c.ssl)) != 1) {
    ASSERT_EQ(SSL_get_error(c.ssl, rc), SSL_ERROR_WANT_READ);
    ASSERT_LT(turns++, 20);
    client_flush(&c, sv[1]);
    cb__testconn_run(tc, 0);
    client_take(&c, sv[1]);
  }

  /* KeyUpdates until the socket takes no more, or 320 KiB; what of the last did not fit is sent at the end. They
   * go 1,024 to a send: a unix socket charges each send with a few hundred bytes of its own, so one record per
   * send fills a host's default buffer (twice net.core.wmem_max, 416 KiB) with 15 KiB of records. The bound keeps
   * the test short where buffers are large: past a few seconds the connection's timeout would end it. */
  enum { KEYUPDATES_MAX = 320 << 10 }; /* enough to pass the bound twice; a host's large buffers are not filled */
  size_t sent = 0;
  char *last = NULL;
  long last_len = 0;
  for (;;) {
    for (int k = 0; k < 1024; k++) {
      ASSERT_EQ(SSL_key_update(c.ssl, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
      ASSERT_EQ(SSL_do_handshake(c.ssl), 1);
    }
    char *p;
    long n = BIO_get_mem_data(c.cout, &p);
    ASSERT_GT(n, 0);
    ssize_t w = sent + (size_t)n > KEYUPDATES_MAX ? 0 : send(sv[1], p, (size_t)n, MSG_DONTWAIT);
    if (w != n) {
      size_t done = w > 0 ? (size_t)w : 0;
      sent += done;
      last_len = n - (long)done;
      last = malloc((size_t)last_len);
      ASSERT_NOT_NULL(last);
      memcpy(last, p + done, (size_t)last_len);
      (void)BIO_reset(c.cout);
      break;
    }
    sent += (size_t)n;
    (void)BIO_reset(c.cout);
  }
  int queued = 0;
  ASSERT_EQ(ioctl(sv[0], FIONREAD, &queued), 0);
  ASSERT_EQ((size_t)queued, sent);
  if (sent <= 2 * 65536) { /* the host's socket buffers, not the server: say so before failing */
    int granted = 0;
    socklen_t gl = sizeof granted;
    (void)getsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &granted, &gl);
    cbt_log("the socketpair took only %zu bytes of KeyUpdates (SO_SNDBUF asked %d, granted %d; the kernel caps it at "
            "twice net.core.wmem_max): this host's socket buffers are too small to test a bound of 128 KiB per event",
            sent, big, granted);
  }
  ASSERT_GT(sent, 2 * 65536);

  cb__testconn_run(tc, 0); /* one event */
  ASSERT_EQ(ioctl(sv[0], FIONREAD, &queued), 0);
  cbt_log("%zu bytes of KeyUpdates; one event took %zu", sent, sent - (size_t)queued);
  ASSERT_LE(sent - (size_t)queued, 2 * 65536);
  ASSERT_GT(sent - (size_t)queued, 0);

  /* The rest, the last KeyUpdate and a request: the answer comes back under the client's newest keys. */
  static const char req[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  ASSERT_EQ(SSL_write(c.ssl, req, (int)sizeof req - 1), (int)sizeof req - 1);
  buf_t got = {0};
  char tmp[4096];
  int pending_sent = 0;
  for (turns = 0; turns < 200 && (got.len == 0 || memmem(got.p, got.len, "\r\n\r\n", 4) == NULL); turns++) {
    if (!pending_sent) {
      ASSERT_EQ(ioctl(sv[0], FIONREAD, &queued), 0);
      if (queued < 65536) { /* room again: the last KeyUpdate, then the request */
        cl_send(sv[1], last, (size_t)last_len);
        client_flush(&c, sv[1]);
        pending_sent = 1;
      }
    }
    ASSERT_EQ(cb__testconn_run(tc, 0), 0);
    client_take(&c, sv[1]);
    int n;
    while ((n = SSL_read(c.ssl, tmp, sizeof tmp)) > 0) buf_add(&got, tmp, (size_t)n);
  }
  cbt_log("%d more turns", turns);
  ASSERT_GT(got.len, 12);
  ASSERT_MEM_EQ(got.p, 12, "HTTP/1.1 200", 12);

  buf_free(&got);
  free(last);
  cb__testconn_free(tc);
  close(sv[1]);
  client_free(&c);
  cb__tls_ctx_free(ctx);
  cb__certs_free(certs);
}

TEST(tls_keyupdate_stream_bounded_per_event) { keyupdate_stream(0); }

/* The same for a session that asks for kernel TLS (SSL_OP_ENABLE_KTLS, as every session of a server whose kernel
 * offers the `tls` ULP): it kept OpenSSL's socket BIO for reads, which has no budget, and one event took every
 * KeyUpdate the socket held. Its reads now go through the reader too. A unix socket has no TLS ULP: the session
 * falls back to OpenSSL's records, as on a host without the module (the kernel's own records are not run here). */
TEST(tls_keyupdate_stream_bounded_per_event_ktls) { keyupdate_stream(1); }

/* TLS 1.2 renegotiation asked by the client (a second ClientHello on an established session): refused (OpenSSL 3
 * refuses it unless SSL_OP_ALLOW_CLIENT_RENEGOTIATION is set, and make_ctx in tls.c adds SSL_OP_NO_RENEGOTIATION).
 * A client could otherwise make the server run a full handshake, its key exchange included, as often as it likes
 * on one connection. The answer to the ClientHello is one alert record (no_renegotiation), never a ServerHello,
 * and OpenSSL's client then ends its session. */
TEST(tls12_client_renegotiation_refused) {
  cb__certs_t *certs;
  cb__tls_ctx_t *ctx;
  ASSERT_EQ(cb__certs_new(NULL, &certs), 0);
  ASSERT_EQ(cb__tls_ctx_new(certs, 1, 1, &ctx), 0);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  cb_config_t cfg;
  test_config(&cfg);
  cb__testconn_t *tc = cb__testconn_new_tls(&cfg, sv[0], ctx);
  ASSERT_NOT_NULL(tc);
  client_t c;
  client_new(&c, cb__certs_ca_pem(certs, CB__CA_SERVER).ptr);
  ASSERT_EQ(SSL_set_max_proto_version(c.ssl, TLS1_2_VERSION), 1);
  int rc, turns = 0;
  while ((rc = SSL_do_handshake(c.ssl)) != 1) {
    ASSERT_EQ(SSL_get_error(c.ssl, rc), SSL_ERROR_WANT_READ);
    ASSERT_LT(turns++, 20);
    client_flush(&c, sv[1]);
    cb__testconn_run(tc, 0);
    client_take(&c, sv[1]);
  }
  ASSERT_EQ(SSL_version(c.ssl), TLS1_2_VERSION);

  ASSERT_EQ(SSL_renegotiate(c.ssl), 1);
  rc = SSL_do_handshake(c.ssl);
  ASSERT_EQ(SSL_get_error(c.ssl, rc), SSL_ERROR_WANT_READ);
  char *hello;
  long hello_len = BIO_get_mem_data(c.cout, &hello);
  ASSERT_GT(hello_len, 5);
  ASSERT_EQ(hello[0], 22); /* a handshake record: the ClientHello */
  client_flush(&c, sv[1]);
  cb__testconn_run(tc, 0);

  unsigned char got[4096];
  ssize_t n = recv(sv[1], got, sizeof got, MSG_DONTWAIT);
  ASSERT_GT(n, 5);
  ASSERT_EQ(got[0], 21);                                    /* an alert record, */
  ASSERT_EQ((size_t)n, 5 + ((size_t)got[3] << 8 | got[4])); /* and only that one */
  BIO_write(c.cin, got, (int)n);
  rc = SSL_do_handshake(c.ssl);
  ASSERT_EQ(SSL_get_error(c.ssl, rc), SSL_ERROR_SSL);
  cbt_log("the client's error: %s", ERR_reason_error_string(ERR_peek_error()));
  ASSERT_EQ(ERR_GET_REASON(ERR_peek_error()), SSL_R_NO_RENEGOTIATION);
  ERR_clear_error();

  cb__testconn_free(tc);
  close(sv[1]);
  client_free(&c);
  cb__tls_ctx_free(ctx);
  cb__certs_free(certs);
}
