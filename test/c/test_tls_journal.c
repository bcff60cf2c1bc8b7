/* The journal over TLS (issue 24, docs/tls.md "From Erlang"): a request over a TLS connection is recorded as
 * h1_tls with what the handshake settled (version, cipher, SNI, ALPN, resumed), the strings NUL-terminated
 * copies, the body still whole before them in the ring; a client that sends no SNI and offers no ALPN gets
 * empty ones; the per-protocol counters count h1_tls and nothing under http1; a cleartext entry has no TLS. A
 * blocking OpenSSL client that trusts only the server's CA (cb_server_tls_ca) talks to the server. */
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "common.h"

static cb_server_t *start_tls(void) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls = 1;
  cfg.journal = 100;
  return test_start(&cfg);
}

typedef struct {
  SSL_CTX *ctx;
  SSL *ssl;
  int fd;
} client_t;

/* A verified TLS 1.3 session to the server: sni and alpn (ALPN's wire format) may be NULL. */
static void client_open(client_t *c, cb_server_t *srv, const char *sni, const char *alpn, size_t alpn_len) {
  char pem[8192];
  int n = cb_server_tls_ca(srv, pem, sizeof pem);
  ASSERT_GT(n, 0);
  BIO *bio = BIO_new_mem_buf(pem, n);
  X509 *ca = PEM_read_bio_X509(bio, NULL, NULL, NULL);
  BIO_free(bio);
  ASSERT_NOT_NULL(ca);
  c->ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(c->ctx);
  ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), ca), 1);
  X509_free(ca);
  SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
  c->ssl = SSL_new(c->ctx);
  ASSERT_NOT_NULL(c->ssl);
  if (sni != NULL) ASSERT_EQ(SSL_set_tlsext_host_name(c->ssl, sni), 1);
  ASSERT_EQ(SSL_set1_host(c->ssl, "localhost"), 1);
  if (alpn != NULL) ASSERT_EQ(SSL_set_alpn_protos(c->ssl, (const unsigned char *)alpn, (unsigned)alpn_len), 0);
  c->fd = cl_connect(cb_server_port(srv));
  ASSERT_EQ(SSL_set_fd(c->ssl, c->fd), 1);
  int rc = SSL_connect(c->ssl);
  if (rc != 1) cbt_log("SSL_connect: %d, %s", SSL_get_error(c->ssl, rc), ERR_error_string(ERR_get_error(), NULL));
  ASSERT_EQ(rc, 1);
  ASSERT_EQ(SSL_get_verify_result(c->ssl), X509_V_OK);
}

/* Sends req and reads one whole response into got. */
static void client_roundtrip(client_t *c, const char *req, buf_t *got) {
  ASSERT_EQ(SSL_write(c->ssl, req, (int)strlen(req)), (int)strlen(req));
  char b[4096];
  while (cl_response_len(got->p, got->len, 0) == 0) {
    int k = SSL_read(c->ssl, b, sizeof b);
    ASSERT_GT(k, 0);
    buf_add(got, b, (size_t)k);
  }
}

static void client_close(client_t *c) {
  SSL_free(c->ssl);
  SSL_CTX_free(c->ctx);
  close(c->fd);
}

static void assert_str(cb_str_t got, const char *want) {
  ASSERT_EQ(got.len, strlen(want));
  ASSERT_EQ(got.ptr[got.len], '\0');
  ASSERT_STR_EQ(got.ptr, want);
}

TEST(tls_journal_h1_alpn_sni) {
  cb_server_t *srv = start_tls();
  client_t c;
  client_open(&c, srv, "localhost", "\x08http/1.1", 9);
  buf_t got = {0};
  client_roundtrip(&c, "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello", &got);
  ASSERT(got.len > 12 && memcmp(got.p, "HTTP/1.1 200", 12) == 0);
  const char *cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(c.ssl));
  cb_request_list_t *list = wait_journal(srv, NULL, 1, 5000);
  ASSERT_EQ(list->count, 1);
  const cb_request_t *r = &list->items[0];
  ASSERT_EQ(r->proto, CB_PROTO_H1_TLS);
  assert_str(r->path, "/echo");
  assert_str(r->body, "hello"); /* the body, and the TLS details after it in the ring, both whole */
  ASSERT_EQ(r->tls, 1);
  assert_str(r->tls_version, "TLSv1.3");
  assert_str(r->tls_cipher, cipher);
  assert_str(r->tls_sni, "localhost");
  ASSERT_EQ(r->tls_alpn.len, 8);
  ASSERT_MEM_EQ(r->tls_alpn.ptr, r->tls_alpn.len, "http/1.1", (size_t)8);
  ASSERT_EQ(r->tls_resumed, 0);
  cb_request_list_free(list);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H1_TLS], 1);
  ASSERT_EQ(st.requests_by_proto[CB_PROTO_H1_TLS], 1);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_HTTP1], 0);
  ASSERT_EQ(st.requests_by_proto[CB_PROTO_HTTP1], 0);
  ASSERT_EQ(st.conns_by_proto[CB_PROTO_H2_TLS], 0);
  buf_free(&got);
  client_close(&c);
  test_stop(srv);
}

/* No SNI and no ALPN: the entry says so with empty strings; the journal's other requests keep their own. */
TEST(tls_journal_no_sni_no_alpn) {
  cb_server_t *srv = start_tls();
  client_t c;
  client_open(&c, srv, NULL, NULL, 0);
  buf_t got = {0};
  client_roundtrip(&c, "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n", &got);
  buf_reset(&got);
  client_t d;
  client_open(&d, srv, "localhost", NULL, 0);
  client_roundtrip(&d, "GET /hello?second HTTP/1.1\r\nHost: localhost\r\n\r\n", &got);
  cb_request_list_t *list = wait_journal(srv, NULL, 2, 5000);
  ASSERT_EQ(list->count, 2);
  const cb_request_t *r = &list->items[0];
  ASSERT_EQ(r->proto, CB_PROTO_H1_TLS);
  ASSERT_EQ(r->tls, 1);
  assert_str(r->tls_version, "TLSv1.3");
  ASSERT_EQ(r->tls_sni.len, 0);
  ASSERT_EQ(r->tls_alpn.len, 0);
  r = &list->items[1];
  assert_str(r->query, "second");
  assert_str(r->tls_sni, "localhost");
  ASSERT_EQ(r->tls_alpn.len, 0);
  cb_request_list_free(list);
  buf_free(&got);
  client_close(&c);
  client_close(&d);
  test_stop(srv);
}

/* A cleartext request has no TLS details. */
TEST(tls_journal_cleartext_none) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.journal = 10;
  cb_server_t *srv = test_start(&cfg);
  int fd = cl_connect(cb_server_port(srv));
  cl_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  cb_request_list_t *list = wait_journal(srv, NULL, 1, 5000);
  ASSERT_EQ(list->count, 1);
  ASSERT_EQ(list->items[0].proto, CB_PROTO_HTTP1);
  ASSERT_EQ(list->items[0].tls, 0);
  ASSERT_EQ(list->items[0].tls_version.len, 0);
  ASSERT_EQ(list->items[0].tls_sni.len, 0);
  cb_request_list_free(list);
  close(fd);
  test_stop(srv);
}
