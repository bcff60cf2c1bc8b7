/* Client certificates (cfg.tls_client_auth) and session resumption over a real TLS listener, with an OpenSSL
 * client in this process (blocking sockets): what each mode answers a client with and without a certificate,
 * the exact alert a refused client reads, the handshakes counted full and resumed (TLS 1.3 tickets, TLS 1.2),
 * how a client certificate is named (subject and SHA-256, the journal's client_cert) and the C API's errors. */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "base/base.h"
#include "transport/transport.h"

/* A TLS server with one worker and client_auth mode. */
static cb_server_t *start_tls(int mode) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls = 1;
  cfg.tls_client_auth = mode;
  return test_start(&cfg);
}

static X509 *pem_cert(const char *pem) {
  BIO *b = BIO_new_mem_buf(pem, -1);
  X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
  BIO_free(b);
  ASSERT_NOT_NULL(x);
  return x;
}

static EVP_PKEY *pem_key(const char *pem) {
  BIO *b = BIO_new_mem_buf(pem, -1);
  EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
  BIO_free(b);
  ASSERT_NOT_NULL(k);
  return k;
}

/* A client context trusting the server's CA; with a certificate of the server's client CA for cn when cn is not
 * NULL; TLS 1.2 only when tls12. */
static SSL_CTX *client_ctx(cb_server_t *srv, const char *cn, int tls12) {
  char ca[8192], cert[8192], key[8192];
  ASSERT_GT(cb_server_tls_ca(srv, ca, sizeof ca), 0);
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(ctx);
  X509 *cax = pem_cert(ca);
  ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), cax), 1);
  X509_free(cax);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (tls12) SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
  if (cn != NULL) {
    ASSERT_EQ(cb_server_tls_client_cert(srv, cn, cert, sizeof cert, key, sizeof key), 0);
    X509 *x = pem_cert(cert);
    EVP_PKEY *k = pem_key(key);
    ASSERT_EQ(SSL_CTX_use_certificate(ctx, x), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey(ctx, k), 1);
    X509_free(x);
    EVP_PKEY_free(k);
  }
  return ctx;
}

typedef struct {
  int status;            /* the response's status, 0 when none came */
  unsigned long err;     /* the first OpenSSL error the client saw, 0 for none */
  int reused;            /* SSL_session_reused */
  SSL_SESSION *session;  /* the session to resume next (owned by the caller), when asked */
} got_t;

/* GET /hello over HTTP/1.1 (ALPN http/1.1) on a new connection; resumes sess when not NULL. */
static got_t get_hello(SSL_CTX *ctx, int port, SSL_SESSION *sess, int keep_session) {
  got_t g = {0};
  int fd = cl_connect(port);
  SSL *ssl = SSL_new(ctx);
  ASSERT_NOT_NULL(ssl);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, "localhost");
  SSL_set1_host(ssl, "localhost");
  SSL_set_alpn_protos(ssl, (const unsigned char *)"\x08http/1.1", 9);
  if (sess != NULL) SSL_set_session(ssl, sess);
  ERR_clear_error();
  static const char req[] = "GET /hello HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
  char buf[4096];
  size_t got = 0;
  if (SSL_connect(ssl) == 1 && SSL_write(ssl, req, sizeof req - 1) == (int)sizeof req - 1) {
    int n;
    while (got < sizeof buf - 1 && (n = SSL_read(ssl, buf + got, (int)(sizeof buf - 1 - got))) > 0) got += (size_t)n;
  }
  buf[got] = '\0';
  g.err = ERR_peek_error();
  if (got > 12 && strncmp(buf, "HTTP/1.1 ", 9) == 0) g.status = atoi(buf + 9);
  g.reused = SSL_session_reused(ssl);
  /* The response was read to its end, so TLS 1.3's NewSessionTicket messages (sent after the handshake) are in. */
  if (keep_session) g.session = SSL_get1_session(ssl);
  SSL_shutdown(ssl);
  SSL_free(ssl);
  close(fd);
  ERR_clear_error();
  return g;
}

static int handshakes_are(const cb_stats_t *s, const void *arg) {
  const uint64_t *want = arg;
  return s->tls_handshakes_full == want[0] && s->tls_handshakes_resumed == want[1];
}

static void expect_handshakes(cb_server_t *srv, uint64_t full, uint64_t resumed) {
  uint64_t want[2] = {full, resumed};
  cb_stats_t st;
  wait_stats(srv, &st, handshakes_are, want, 5000);
  ASSERT_EQ(st.tls_handshakes_full, full);
  ASSERT_EQ(st.tls_handshakes_resumed, resumed);
}

TEST(tls_auth_none_asks_nothing) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_NONE);
  SSL_CTX *ctx = client_ctx(srv, NULL, 0);
  got_t g = get_hello(ctx, cb_server_port(srv), NULL, 0);
  ASSERT_EQ(g.status, 200);
  ASSERT_EQ(g.err, 0);
  SSL_CTX_free(ctx);
  test_stop(srv);
}

TEST(tls_auth_require) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_REQUIRE);
  int port = cb_server_port(srv);
  /* TLS 1.3: the client finishes first, then reads the certificate_required alert instead of a response. */
  SSL_CTX *none = client_ctx(srv, NULL, 0);
  got_t g = get_hello(none, port, NULL, 0);
  ASSERT_EQ(g.status, 0);
  ASSERT_EQ(ERR_GET_REASON(g.err), SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED);
  SSL_CTX_free(none);
  /* TLS 1.2: the handshake itself fails (handshake_failure). */
  SSL_CTX *none12 = client_ctx(srv, NULL, 1);
  g = get_hello(none12, port, NULL, 0);
  ASSERT_EQ(g.status, 0);
  ASSERT_EQ(ERR_GET_REASON(g.err), SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE);
  SSL_CTX_free(none12);
  /* A certificate of the client CA: served, over both versions. */
  SSL_CTX *with = client_ctx(srv, "alice", 0);
  ASSERT_EQ(get_hello(with, port, NULL, 0).status, 200);
  SSL_CTX_free(with);
  SSL_CTX *with12 = client_ctx(srv, "alice", 1);
  ASSERT_EQ(get_hello(with12, port, NULL, 0).status, 200);
  SSL_CTX_free(with12);
  /* Only the two that got through count as handshakes. */
  expect_handshakes(srv, 2, 0);
  test_stop(srv);
}

/* A certificate that the client CA did not sign: refused in both modes (unknown_ca). */
static void stranger(int mode) {
  cb_server_t *srv = start_tls(mode);
  cb_server_t *other = start_tls(CB_TLS_CLIENT_AUTH_NONE); /* its client CA is another one */
  char ca[8192], cert[8192], key[8192];
  SSL_CTX *ctx = client_ctx(srv, NULL, 0);
  ASSERT_EQ(cb_server_tls_client_cert(other, "mallory", cert, sizeof cert, key, sizeof key), 0);
  X509 *x = pem_cert(cert);
  EVP_PKEY *k = pem_key(key);
  ASSERT_EQ(SSL_CTX_use_certificate(ctx, x), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey(ctx, k), 1);
  got_t g = get_hello(ctx, cb_server_port(srv), NULL, 0);
  ASSERT_EQ(g.status, 0);
  ASSERT_EQ(ERR_GET_REASON(g.err), SSL_R_TLSV1_ALERT_UNKNOWN_CA);
  (void)ca;
  X509_free(x);
  EVP_PKEY_free(k);
  SSL_CTX_free(ctx);
  test_stop(other);
  test_stop(srv);
}

TEST(tls_auth_require_stranger) { stranger(CB_TLS_CLIENT_AUTH_REQUIRE); }
TEST(tls_auth_request_stranger) { stranger(CB_TLS_CLIENT_AUTH_REQUEST); }

TEST(tls_auth_request) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_REQUEST);
  int port = cb_server_port(srv);
  SSL_CTX *none = client_ctx(srv, NULL, 0);
  ASSERT_EQ(get_hello(none, port, NULL, 0).status, 200);
  SSL_CTX_free(none);
  SSL_CTX *with = client_ctx(srv, "bob", 0);
  ASSERT_EQ(get_hello(with, port, NULL, 0).status, 200);
  SSL_CTX_free(with);
  test_stop(srv);
}

/* Two connections of one client: the second resumes the first's session (TLS 1.3: a ticket; TLS 1.2: a ticket
 * too, OpenSSL's default), also with a client certificate required (the session keeps it). */
static void resumes(int mode, const char *cn, int tls12) {
  cb_server_t *srv = start_tls(mode);
  int port = cb_server_port(srv);
  SSL_CTX *ctx = client_ctx(srv, cn, tls12);
  got_t a = get_hello(ctx, port, NULL, 1);
  ASSERT_EQ(a.status, 200);
  ASSERT_EQ(a.reused, 0);
  ASSERT_NOT_NULL(a.session);
  got_t b = get_hello(ctx, port, a.session, 0);
  ASSERT_EQ(b.status, 200);
  ASSERT_EQ(b.reused, 1);
  expect_handshakes(srv, 1, 1);
  SSL_SESSION_free(a.session);
  SSL_CTX_free(ctx);
  test_stop(srv);
}

TEST(tls_resume_13) { resumes(CB_TLS_CLIENT_AUTH_NONE, NULL, 0); }
TEST(tls_resume_12) { resumes(CB_TLS_CLIENT_AUTH_NONE, NULL, 1); }
TEST(tls_resume_13_client_cert) { resumes(CB_TLS_CLIENT_AUTH_REQUIRE, "carol", 0); }
TEST(tls_resume_12_client_cert) { resumes(CB_TLS_CLIENT_AUTH_REQUIRE, "carol", 1); }

/* TLS 1.2 without tickets: the server session cache resumes by session id. */
TEST(tls_resume_12_cache) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_NONE);
  int port = cb_server_port(srv);
  SSL_CTX *ctx = client_ctx(srv, NULL, 1);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  got_t a = get_hello(ctx, port, NULL, 1);
  ASSERT_EQ(a.status, 200);
  ASSERT_NOT_NULL(a.session);
  unsigned idlen = 0;
  SSL_SESSION_get_id(a.session, &idlen);
  ASSERT_GT(idlen, 0); /* a session id, not a ticket */
  got_t b = get_hello(ctx, port, a.session, 0);
  ASSERT_EQ(b.reused, 1);
  expect_handshakes(srv, 1, 1);
  SSL_SESSION_free(a.session);
  SSL_CTX_free(ctx);
  test_stop(srv);
}

/* TLS 1.2, session id: a client that closes first (before any request, as a pool closing an idle connection)
 * leaves its session resumable. */
TEST(tls_resume_12_client_closes) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_NONE);
  int port = cb_server_port(srv);
  SSL_CTX *ctx = client_ctx(srv, NULL, 1);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  int fd = cl_connect(port);
  SSL *ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  ASSERT_EQ(SSL_connect(ssl), 1);
  SSL_SESSION *sess = SSL_get1_session(ssl);
  /* No close_notify. The client keeps its session (SSL_free would take it out of its own cache otherwise). */
  SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN);
  SSL_free(ssl);
  close(fd);
  /* The server sees the end of the connection and closes its side; the session must stay in its cache. */
  uint64_t want[2] = {1, 0};
  cb_stats_t st;
  wait_stats(srv, &st, handshakes_are, want, 5000);
  int closed_before = 0;
  for (int i = 0; i < 500 && !closed_before; i++) {
    cb_server_stats(srv, &st);
    closed_before = st.conns_closed == 1;
    if (!closed_before) sleep_ms(10);
  }
  ASSERT_EQ(closed_before, 1);
  got_t b = get_hello(ctx, port, sess, 0);
  ASSERT_EQ(b.status, 200);
  ASSERT_EQ(b.reused, 1);
  expect_handshakes(srv, 1, 1);
  SSL_SESSION_free(sess);
  SSL_CTX_free(ctx);
  test_stop(srv);
}

/* A session made under a bad-certificate identity (SNI expired.localhost) does not resume on the default one:
 * each identity has its own session id context. The default identity's own sessions resume (tls_resume_*). */
TEST(tls_resume_not_across_identities) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_NONE);
  int port = cb_server_port(srv);
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method()); /* verifies nothing: the expired leaf is served */
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
  int fd = cl_connect(port);
  SSL *ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, "expired.localhost");
  ASSERT_EQ(SSL_connect(ssl), 1);
  static const char req[] = "GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
  ASSERT_EQ(SSL_write(ssl, req, sizeof req - 1), (int)sizeof req - 1);
  char buf[1024];
  while (SSL_read(ssl, buf, sizeof buf) > 0) {
  }
  SSL_SESSION *sess = SSL_get1_session(ssl);
  ASSERT_NOT_NULL(sess);
  SSL_free(ssl);
  close(fd);
  /* The same session offered without SNI, to the default identity: a full handshake. */
  fd = cl_connect(port);
  ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set_session(ssl, sess);
  ASSERT_EQ(SSL_connect(ssl), 1);
  ASSERT_EQ(SSL_session_reused(ssl), 0);
  SSL_free(ssl);
  close(fd);
  expect_handshakes(srv, 2, 0);
  SSL_SESSION_free(sess);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  test_stop(srv);
}

/* The C API: the client CA, client certificates and how they are named. */
TEST(tls_client_cert_api) {
  cb_server_t *srv = start_tls(CB_TLS_CLIENT_AUTH_NONE);
  char ca[8192], cert[8192], key[8192], small[16], subject[256], sha[65];
  ASSERT_GT(cb_server_tls_client_ca(srv, ca, sizeof ca), 0);
  X509 *cax = pem_cert(ca);
  ASSERT_EQ(cb_server_tls_client_cert(srv, "dave, \"the\" admin", cert, sizeof cert, key, sizeof key), 0);
  X509 *x = pem_cert(cert);
  ASSERT_EQ(X509_check_issued(cax, x), X509_V_OK);
  ASSERT_EQ(X509_check_purpose(x, X509_PURPOSE_SSL_CLIENT, 0), 1);
  EVP_PKEY *k = pem_key(key);
  ASSERT_EQ(X509_check_private_key(x, k), 1);
  EVP_PKEY_free(k);
  /* Valid from an hour ago (give or take the test's own seconds) for a week. */
  int days, secs;
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(x), X509_get0_notAfter(x)), 1);
  ASSERT_EQ(days, 7);
  ASSERT_EQ(secs, 0);
  /* The name: RFC 2253 escapes ',' and '"'; the fingerprint is SHA-256 over the DER. */
  int n = cb_tls_cert_identity(cert, strlen(cert), subject, sizeof subject, sha);
  ASSERT_STR_EQ(subject, "CN=dave\\, \\\"the\\\" admin");
  ASSERT_EQ(n, (int)strlen(subject));
  unsigned char md[32];
  unsigned mdlen;
  X509_digest(x, EVP_sha256(), md, &mdlen);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  ASSERT_STR_EQ(sha, hex);
  /* UTF-8 stays UTF-8. */
  ASSERT_EQ(cb_server_tls_client_cert(srv, "J\xc3\xb6rg", cert, sizeof cert, key, sizeof key), 0);
  cb_tls_cert_identity(cert, strlen(cert), subject, sizeof subject, sha);
  ASSERT_STR_EQ(subject, "CN=J\xc3\xb6rg");
  /* Errors. */
  ASSERT_EQ(cb_tls_cert_identity(cert, strlen(cert), small, 4, sha), UV_ENOBUFS);
  ASSERT_EQ(cb_tls_cert_identity("nothing", 7, subject, sizeof subject, sha), UV_EINVAL);
  ASSERT_EQ(cb_server_tls_client_cert(srv, "", cert, sizeof cert, key, sizeof key), UV_EINVAL);
  ASSERT_EQ(cb_server_tls_client_cert(srv, "a\nb", cert, sizeof cert, key, sizeof key), UV_EINVAL);
  char long_cn[70];
  memset(long_cn, 'a', 65);
  long_cn[65] = '\0';
  ASSERT_EQ(cb_server_tls_client_cert(srv, long_cn, cert, sizeof cert, key, sizeof key), UV_EINVAL);
  ASSERT_EQ(cb_server_tls_client_cert(srv, "x", small, sizeof small, key, sizeof key), UV_ENOBUFS);
  ASSERT_EQ(cb_server_tls_client_ca(srv, small, sizeof small), UV_ENOBUFS);
  X509_free(x);
  X509_free(cax);
  test_stop(srv);
  /* Without TLS: nothing to issue. */
  cb_config_t cfg;
  test_config(&cfg);
  srv = test_start(&cfg);
  ASSERT_EQ(cb_server_tls_client_ca(srv, ca, sizeof ca), UV_ENOENT);
  ASSERT_EQ(cb_server_tls_client_cert(srv, "x", cert, sizeof cert, key, sizeof key), UV_ENOENT);
  test_stop(srv);
}

/* The option: its names, and a value out of range refused by cb_server_start. */
TEST(tls_client_auth_option) {
  const cb_option_t *o = cb_config_option("client_auth");
  ASSERT_NOT_NULL(o);
  ASSERT_STR_EQ(o->name, "tls_client_auth");
  ASSERT_EQ(o->type, CB_OPT_ENUM);
  ASSERT_STR_EQ(o->names[0], "none");
  ASSERT_STR_EQ(o->names[1], "request");
  ASSERT_STR_EQ(o->names[2], "require");
  ASSERT_NULL(o->names[3]);
  cb_config_t cfg;
  test_config(&cfg);
  ASSERT_EQ(cfg.tls_client_auth, CB_TLS_CLIENT_AUTH_NONE);
  cfg.tls_client_auth = 3;
  const cb_option_t *bad = NULL;
  ASSERT_EQ(cb_config_check(&cfg, &bad), UV_EINVAL);
  ASSERT_EQ(bad, o);
  cb_server_t *srv = NULL;
  ASSERT_EQ(cb_server_start(&cfg, &srv), UV_EINVAL);
}

/* ---- the transport's record of a client certificate (cb__tls_peer), over a socket pair ---- */

typedef struct {
  int fd;
  SSL_CTX *ctx;
  int ok;
} peer_client_t;

static void *peer_client(void *arg) {
  peer_client_t *p = arg;
  SSL *ssl = SSL_new(p->ctx);
  SSL_set_fd(ssl, p->fd);
  p->ok = SSL_connect(ssl) == 1;
  char b;
  SSL_read(ssl, &b, 1); /* until the server's side closes */
  SSL_free(ssl);
  return NULL;
}

TEST(tls_peer_record) {
  cb__certs_t *certs;
  ASSERT_EQ(cb__certs_new(NULL, &certs), 0);
  cb__tls_ctx_t *tls;
  ASSERT_EQ(cb__tls_ctx_new(certs, 1, 1, &tls), 0);
  ASSERT_EQ(cb__tls_ctx_client_auth(tls, certs, CB_TLS_CLIENT_AUTH_REQUEST), 0);
  cb__client_cert_t cc;
  ASSERT_EQ(cb__certs_client(certs, "erin", 4, &cc), 0);
  for (int with = 0; with < 2; with++) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    if (with) {
      X509 *x = pem_cert(cc.cert_pem.ptr);
      EVP_PKEY *k = pem_key(cc.key_pem.ptr);
      SSL_CTX_use_certificate(cctx, x);
      SSL_CTX_use_PrivateKey(cctx, k);
      X509_free(x);
      EVP_PKEY_free(k);
    }
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    peer_client_t pc = {.fd = sv[1], .ctx = cctx};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, peer_client, &pc), 0);
    cb__tport_t t;
    ASSERT_EQ(cb__tport_tls(sv[0], tls, NULL, &t), 0);
    cb__tls_peer_t peer;
    ASSERT_EQ(cb__tls_peer(&t, &peer), 0); /* before the handshake: nothing */
    char buf[64];
    uint64_t until = now_ms() + 5000;
    while (!t.ready && now_ms() < until) {
      ssize_t r = t.ops->read(&t, buf, sizeof buf);
      ASSERT_EQ(r, UV_EAGAIN);
      sleep_ms(1);
    }
    ASSERT_EQ(t.ready, 1);
    ASSERT_EQ(cb__tls_peer(&t, &peer), with);
    if (with) {
      char subject[128], sha[65];
      cb__cert_identity_pem(cc.cert_pem.ptr, cc.cert_pem.len, subject, sizeof subject, sha);
      ASSERT_STR_EQ(peer.client_subject, "CN=erin");
      ASSERT_STR_EQ(peer.client_sha256, sha);
    } else {
      ASSERT_NULL(peer.client_subject);
      ASSERT_NULL(peer.client_sha256);
    }
    t.ops->close(&t, 0); /* frees the record with the session (LeakSanitizer checks it) */
    pthread_join(th, NULL);
    ASSERT_EQ(pc.ok, 1);
    close(sv[1]);
    SSL_CTX_free(cctx);
  }
  uint64_t full, resumed;
  cb__tls_ctx_handshakes(tls, &full, &resumed);
  ASSERT_EQ(full, 2);
  ASSERT_EQ(resumed, 0);
  cb__client_cert_free(&cc);
  cb__tls_ctx_free(tls);
  cb__certs_free(certs);
}
