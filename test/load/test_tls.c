/* Wire tests of cbench-load's TLS layer (src/load/tls.c), run by `make load-unit`: an OpenSSL server in this
 * process, on memory BIOs, against a connection set up by hand as test_ws.c does (no loop, no socket); the
 * connection's output is the "socket" the test takes from or leaves to pile up.
 *
 * The case: after the handshake and an answer's head, the server asks for a key update (TLS 1.3 KeyUpdate,
 * update_requested) before every chunk of a chunked body, and never reads. OpenSSL answers each request with a
 * KeyUpdate of its own, written while the client reads; like h2's acknowledgements and WebSocket's pongs, that
 * output must stop at CBL_OUT_HIGH: the connection fails (a protocol error) rather than grow.
 *
 * And ALPN: h2 is spoken over TLS only when the server chose h2; a server that chose no protocol (or one not
 * offered) fails the handshake, named in the results, before any h2 is written. */
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

static int failures;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      failures++;                                                \
    }                                                            \
  } while (0)

static cbl_config_t cfg;
static cbl_wire_t wire;
static cbl_run_t run;
static cbl_thread_t th;
static cbl_conn_t conn;
static cbl_req_t reqs[1];

/* A server context with a fresh self-signed key and certificate (the client runs --insecure). */
static SSL_CTX *server_ctx(void) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  if (!key || !x) return NULL;
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME *name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, key, EVP_sha256());
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (ctx) {
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(ctx, 0);
    if (SSL_CTX_use_certificate(ctx, x) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1) {
      SSL_CTX_free(ctx);
      ctx = NULL;
    }
  }
  X509_free(x);
  EVP_PKEY_free(key);
  return ctx;
}

/* What the server wrote, read by the client as one socket read (in CBL_READ_BUF pieces, as libuv gives them). */
static int to_client(SSL *srv) {
  char *p;
  long n = BIO_get_mem_data(SSL_get_wbio(srv), &p);
  int rc = 0;
  for (long off = 0; rc == 0 && off < n; off += CBL_READ_BUF) {
    size_t k = (size_t)(n - off) < CBL_READ_BUF ? (size_t)(n - off) : CBL_READ_BUF;
    th.now = cbl_now();
    rc = cbl_tls_read(&conn, p + off, k);
  }
  (void)BIO_reset(SSL_get_wbio(srv));
  return rc;
}

/* What the client wrote, taken from its output and read by the server. */
static void to_server(SSL *srv) {
  BIO_write(SSL_get_rbio(srv), conn.out.p, (int)conn.out.len);
  conn.out.len = 0;
}

static void keyupdate_flood(void) {
  SSL_CTX *sctx = server_ctx();
  CHECK(sctx != NULL, "no server context");
  if (!sctx) return;
  SSL *srv = SSL_new(sctx);
  SSL_set_bio(srv, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
  SSL_set_accept_state(srv);
  CHECK(cbl_tls_ctx_new(&run) == 0, "client context");
  int rc = cbl_tls_start(&conn);
  CHECK(rc == 0, "start %d", rc);
  for (int i = 0; i < 10 && rc == 0 && conn.hs_pending; i++) {
    to_server(srv);
    SSL_do_handshake(srv);
    rc = to_client(srv);
  }
  CHECK(rc == 0 && !conn.hs_pending, "handshake: rc %d, pending %d", rc, conn.hs_pending);
  to_server(srv); /* the client's Finished */
  CHECK(SSL_do_handshake(srv) == 1, "server handshake");
  /* One request in flight: its answer's head, then a chunk after each key update the server asks for. */
  reqs[0] = (cbl_req_t){.used = true, .measured = true};
  conn.inflight = 1;
  static const char head[] = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
  CHECK(SSL_write(srv, head, sizeof head - 1) > 0, "head");
  rc = to_client(srv);
  CHECK(rc == 0, "head read: %d", rc);
  size_t peak = 0;
  int updates = 0;
  for (; updates < 20000 && rc == 0; updates++) {
    if (SSL_key_update(srv, SSL_KEY_UPDATE_REQUESTED) != 1 || SSL_write(srv, "1\r\nx\r\n", 6) != 6) {
      CHECK(0, "server key update %d", updates);
      break;
    }
    rc = to_client(srv);
    size_t unsent = cbl_conn_unsent(&conn);
    if (unsent > peak) peak = unsent;
  }
  /* The client took every key update it could answer: far more than 32 (no OpenSSL limit ends this first). */
  CHECK(updates > 1000, "only %d key updates before rc %d", updates, rc);
  CHECK(rc == CBL_FAIL(CBL_ERR_PROTOCOL), "after %d key updates: rc %d, %zu bytes waiting", updates, rc,
        cbl_conn_unsent(&conn));
  /* Bounded: the last answer may pass the bound by its own record, no more. */
  CHECK(peak < CBL_OUT_HIGH + 256, "%zu bytes waited for the socket (bound %d)", peak, CBL_OUT_HIGH);
  SSL_free(srv);
  SSL_CTX_free(sctx);
  cbl_tls_conn_free(&conn);
  cbl_tls_ctx_free(&run);
}

/* ALPN as the server answers it: "h2", "http/1.1", or NULL for no protocol chosen (no ALPN extension in the
 * ServerHello, as a server without ALPN support sends). The select callback may answer anything: OpenSSL's
 * client is what judges a protocol it did not offer. */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  (void)ssl;
  (void)in;
  (void)inlen;
  const char *proto = arg;
  *out = (const unsigned char *)proto;
  *outlen = (unsigned char)strlen(proto);
  return SSL_TLSEXT_ERR_OK;
}

/* One handshake of a connection speaking `proto` against a server choosing `alpn` (NULL: none); the client's
 * result, with the protocol's state made for the connection and freed after. */
static int handshake_alpn(cbl_proto_id_t proto, const char *alpn, size_t *plain_out) {
  const cbl_proto_t *ops = proto == CBL_H2C ? &cbl_h2_proto : &cbl_h1_proto;
  cfg.proto = proto;
  th.proto = ops;
  memset(&th.res.counts, 0, sizeof th.res.counts);
  th.res.tls_error[0] = th.res.tls_alpn[0] = th.res.tls_version[0] = 0;
  void *saved = conn.p;
  conn.p = ops->create(&conn);
  conn.out.len = conn.pt.len = 0;
  SSL_CTX *sctx = server_ctx();
  if (!sctx || !conn.p) abort();
  if (alpn) SSL_CTX_set_alpn_select_cb(sctx, select_alpn, (void *)alpn);
  SSL *srv = SSL_new(sctx);
  SSL_set_bio(srv, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
  SSL_set_accept_state(srv);
  if (cbl_tls_ctx_new(&run) != 0) abort();
  int rc = cbl_tls_start(&conn);
  for (int i = 0; i < 10 && rc == 0 && conn.hs_pending; i++) {
    to_server(srv);
    SSL_do_handshake(srv);
    rc = to_client(srv);
  }
  *plain_out = conn.pt.len; /* what the protocol wrote once the handshake completed (h2: its preface) */
  SSL_free(srv);
  SSL_CTX_free(sctx);
  cbl_tls_conn_free(&conn);
  conn.pt = (cbl_buf_t){0}; /* freed, and its capacity with it */
  cbl_tls_ctx_free(&run);
  ops->destroy(conn.p);
  conn.p = saved;
  conn.out.len = 0;
  return rc;
}

/* h2 over TLS only when ALPN chose h2 (RFC 9113 3.2): a server that chose no protocol does not speak h2 there,
 * so the handshake fails (a TLS error, per attempt), named, before the preface is written; one that chose h2 is
 * spoken to; HTTP/1.1 needs no ALPN (a server that chose none speaks it). */
static void alpn_for_h2(void) {
  static const char none_why[] =
      "no application protocol negotiated: the server chose none, and h2 over TLS needs ALPN h2 (RFC 9113 3.2)";
  size_t plain;
  int rc = handshake_alpn(CBL_H2C, NULL, &plain);
  CHECK(rc == CBL_FAIL(CBL_ERR_TLS), "h2, no ALPN: rc %d, expected %d", rc, CBL_FAIL(CBL_ERR_TLS));
  CHECK(strcmp(th.res.tls_error, none_why) == 0, "h2, no ALPN: error \"%s\"", th.res.tls_error);
  CHECK(plain == 0, "h2, no ALPN: %zu bytes of h2 written", plain);
  CHECK(th.res.counts.tls_full == 0 && th.res.counts.tls_resumed == 0, "h2, no ALPN: counted as completed");
  rc = handshake_alpn(CBL_H2C, "h2", &plain);
  CHECK(rc == 0 && plain > 24 && th.res.counts.tls_full == 1, "h2, ALPN h2: rc %d, %zu bytes, %llu full", rc, plain,
        (unsigned long long)th.res.counts.tls_full);
  CHECK(strcmp(th.res.tls_alpn, "h2") == 0, "h2, ALPN h2: alpn \"%s\"", th.res.tls_alpn);
  /* A server that chose a protocol the client did not offer: a TLS error too, whoever finds it. */
  rc = handshake_alpn(CBL_H2C, "http/1.1", &plain);
  CHECK(rc == CBL_FAIL(CBL_ERR_TLS) && plain == 0, "h2, ALPN http/1.1: rc %d, %zu bytes", rc, plain);
  CHECK(th.res.tls_error[0] != 0, "h2, ALPN http/1.1: no reason kept");
  rc = handshake_alpn(CBL_H1, NULL, &plain);
  CHECK(rc == 0 && th.res.counts.tls_full == 1 && th.res.tls_error[0] == 0, "HTTP/1.1, no ALPN: rc %d, error \"%s\"",
        rc, th.res.tls_error);
  cfg.proto = CBL_H1;
  th.proto = &cbl_h1_proto;
}

int main(void) {
  cfg.depth = 1;
  cfg.npaths = 1;
  cfg.connections = 1;
  cfg.threads = 1;
  cfg.tls = true;
  cfg.insecure = true;
  cfg.proto = CBL_H1;
  snprintf(cfg.host, sizeof cfg.host, "localhost");
  run.cfg = &cfg;
  th.cfg = &cfg;
  th.wire = &wire;
  th.run = &run;
  th.conns = &conn;
  th.nconns = 1;
  th.sending = true;
  th.proto = &cbl_h1_proto;
  cbl_result_init(&th.res, 0);
  conn.t = &th;
  conn.reqs = reqs;
  conn.state = CBL_CONN_OPEN;
  conn.p = cbl_h1_proto.create(&conn);
  if (!conn.p) return 1;
  keyupdate_flood();
  alpn_for_h2();
  cbl_h1_proto.destroy(conn.p);
  free(conn.out.p);
  cbl_result_free(&th.res);
  if (failures) {
    fprintf(stderr, "test_tls: %d failures\n", failures);
    return 1;
  }
  printf("test_tls: a key update flood that never reads fails the connection at the output bound; h2 only by "
         "ALPN h2: ok\n");
  return 0;
}
