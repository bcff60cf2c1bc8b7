/* TLS for cbench-load (https:// and wss:// URLs): an OpenSSL client session per connection, between the socket
 * and the protocol (HTTP/1.1, h2, WebSocket), which never knows it is there.
 *
 * The session reads from and writes to two memory BIOs, so the connection's libuv reads and writes stay as they
 * are and nothing blocks: the bytes a read brings go into the read BIO, the handshake steps or SSL_read takes
 * them out, and whatever the session has to send (the handshake's messages, records) is taken from the write BIO
 * into the connection's output queue. What the protocols write collects as plaintext (c->pt) and is encrypted
 * once per flush, so an event's requests (a pipelined batch, nghttp2's frames) go out in as few records as fit.
 *
 * One SSL_CTX for the run, shared by the threads (OpenSSL allows SSL_new from several threads on one context):
 * TLS 1.2 and 1.3, no renegotiation, no compression; ALPN offers the one protocol asked for (h2 for -p h2, or
 * http/1.1); SNI is the URL's host unless it is an IP address (RFC 6066 has no IP names); the peer is verified
 * against --cacert (or the system's CAs) and the URL's host (a DNS name, or an IP address against the
 * certificate's IP entries), unless --insecure.
 *
 * Resumption (on unless --no-resume): each connection keeps the last session the server gave it (the TLS 1.3
 * tickets, or the TLS 1.2 session, through the context's new-session callback) and offers it when it connects
 * again, so a connection per request (--new-conn) measures resumed handshakes; with --no-resume none is offered
 * and every handshake is a full one. Handshakes are counted as full or resumed as they complete. */
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

static int conn_index = -1; /* the SSL ex_data slot that points back at the connection */

static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
  cbl_conn_t *c = SSL_get_ex_data(ssl, conn_index);
  if (!c) return 0;
  if (c->sess) SSL_SESSION_free(c->sess);
  c->sess = sess;
  return 1; /* the reference is ours now */
}

static bool is_ip(const char *host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The reason of the last failure in OpenSSL's queue for this thread, as text. */
static void last_error(char *out, size_t n, const char *fallback) {
  unsigned long e = ERR_peek_last_error();
  if (e) ERR_error_string_n(e, out, n);
  else snprintf(out, n, "%s", fallback);
}

int cbl_tls_ctx_new(cbl_run_t *run) {
  const cbl_config_t *cfg = run->cfg;
  if (!cfg->tls) return 0;
  char why[256];
  if (conn_index < 0) conn_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx || conn_index < 0) goto fail;
  int minv = cfg->tls_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION;
  int maxv = cfg->tls_version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION;
  if (!SSL_CTX_set_min_proto_version(ctx, minv) || !SSL_CTX_set_max_proto_version(ctx, maxv)) goto fail;
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  /* No SSL_MODE_RELEASE_BUFFERS: a loaded connection reads all the time, and releasing the buffers between
   * records would cost an allocation and a free per read. */
  if (cfg->ciphers && !SSL_CTX_set_cipher_list(ctx, cfg->ciphers)) {
    fprintf(stderr, "cbench-load: --ciphers '%s': no cipher OpenSSL knows\n", cfg->ciphers);
    SSL_CTX_free(ctx);
    return -1;
  }
  if (cfg->tls13_ciphers && !SSL_CTX_set_ciphersuites(ctx, cfg->tls13_ciphers)) {
    fprintf(stderr, "cbench-load: --tls13-ciphers '%s': not a TLS 1.3 cipher suite list\n", cfg->tls13_ciphers);
    SSL_CTX_free(ctx);
    return -1;
  }
  /* ALPN: the protocol asked for, alone, so the server cannot pick one the connection would not speak. */
  static const unsigned char alpn_h2[] = "\x02h2", alpn_h1[] = "\x08http/1.1";
  bool h2 = cfg->proto == CBL_H2C;
  if (SSL_CTX_set_alpn_protos(ctx, h2 ? alpn_h2 : alpn_h1, h2 ? sizeof alpn_h2 - 1 : sizeof alpn_h1 - 1)) goto fail;
  if (cfg->insecure) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    int ok = cfg->cacert ? SSL_CTX_load_verify_locations(ctx, cfg->cacert, NULL)
                         : SSL_CTX_set_default_verify_paths(ctx);
    if (!ok) {
      last_error(why, sizeof why, "no certificate in it");
      fprintf(stderr, "cbench-load: cannot load the CA %s: %s\n", cfg->cacert ? cfg->cacert : "(system)", why);
      SSL_CTX_free(ctx);
      return -1;
    }
  }
  if (cfg->resume) {
    /* The client cache mode makes OpenSSL hand every new session to the callback; the internal store is not
     * used (a client's is never looked up: each connection offers its own). */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  }
  run->tls_ctx = ctx;
  return 0;
fail:
  last_error(why, sizeof why, "out of memory");
  fprintf(stderr, "cbench-load: cannot set up TLS: %s\n", why);
  SSL_CTX_free(ctx);
  return -1;
}

void cbl_tls_ctx_free(cbl_run_t *run) {
  SSL_CTX_free(run->tls_ctx);
  run->tls_ctx = NULL;
}

/* Moves what the session wrote into the write BIO to the connection's output (ciphertext, for the socket). */
static int drain(cbl_conn_t *c) {
  BIO *wbio = SSL_get_wbio(c->ssl);
  char *p;
  long n = BIO_get_mem_data(wbio, &p);
  if (n <= 0) return 0;
  if (cbl_buf_append(&c->out, p, (size_t)n)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  (void)BIO_reset(wbio);
  return 0;
}

/* A failed handshake: counted (conn_fail does, under tls), and its reason kept, the first of the thread's. */
static int hs_failed(cbl_conn_t *c, int ret) {
  cbl_result_t *res = &c->t->res;
  if (res->tls_error[0]) return CBL_FAIL(CBL_ERR_TLS);
  long v = SSL_get_verify_result(c->ssl);
  int e = SSL_get_error(c->ssl, ret);
  if (v != X509_V_OK) {
    snprintf(res->tls_error, sizeof res->tls_error, "certificate verify failed: %s",
             X509_verify_cert_error_string(v));
  } else if (e == SSL_ERROR_SSL) {
    char why[200];
    last_error(why, sizeof why, "handshake failure");
    snprintf(res->tls_error, sizeof res->tls_error, "%s", why);
  } else {
    snprintf(res->tls_error, sizeof res->tls_error, "handshake failed (SSL_get_error %d)", e);
  }
  return CBL_FAIL(CBL_ERR_TLS);
}

/* The handshake completed: counted, the first session's parameters kept for the report, and the protocol's
 * preface or handshake queued. */
static int hs_done(cbl_conn_t *c) {
  cbl_thread_t *t = c->t;
  cbl_result_t *res = &t->res;
  c->hs_pending = false;
  bool resumed = SSL_session_reused(c->ssl);
  if (t->now >= t->run->t_measure) {
    if (resumed) res->counts.tls_resumed++;
    else res->counts.tls_full++;
  }
  if (!res->tls_version[0]) {
    const unsigned char *alpn;
    unsigned int alen;
    SSL_get0_alpn_selected(c->ssl, &alpn, &alen);
    snprintf(res->tls_version, sizeof res->tls_version, "%s", SSL_get_version(c->ssl));
    snprintf(res->tls_cipher, sizeof res->tls_cipher, "%s", SSL_CIPHER_get_name(SSL_get_current_cipher(c->ssl)));
    snprintf(res->tls_alpn, sizeof res->tls_alpn, "%.*s", alen < sizeof res->tls_alpn ? (int)alen : 0,
             alen ? (const char *)alpn : "");
  }
  return t->proto->open(c);
}

static int handshake(cbl_conn_t *c) {
  ERR_clear_error();
  int ret = SSL_do_handshake(c->ssl);
  int rc = drain(c);
  if (rc) return rc;
  if (ret == 1) return hs_done(c);
  int e = SSL_get_error(c->ssl, ret);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  return hs_failed(c, ret);
}

int cbl_tls_start(cbl_conn_t *c) {
  const cbl_config_t *cfg = c->t->cfg;
  SSL *ssl = SSL_new(c->t->run->tls_ctx);
  BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
  if (!ssl || !rbio || !wbio) {
    SSL_free(ssl);
    BIO_free(rbio);
    BIO_free(wbio);
    return CBL_FAIL(CBL_ERR_TLS);
  }
  /* An empty read BIO is "no data yet", not the end of the stream. */
  BIO_set_mem_eof_return(rbio, -1);
  SSL_set_bio(ssl, rbio, wbio);
  c->ssl = ssl;
  c->hs_pending = true;
  SSL_set_ex_data(ssl, conn_index, c);
  SSL_set_connect_state(ssl);
  if (!is_ip(cfg->host)) {
    if (!SSL_set_tlsext_host_name(ssl, cfg->host)) return CBL_FAIL(CBL_ERR_TLS);
    if (!cfg->insecure && !SSL_set1_host(ssl, cfg->host)) return CBL_FAIL(CBL_ERR_TLS);
  } else if (!cfg->insecure && !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), cfg->host)) {
    return CBL_FAIL(CBL_ERR_TLS);
  }
  if (c->sess && cfg->resume) SSL_set_session(ssl, c->sess);
  return handshake(c);
}

int cbl_tls_read(cbl_conn_t *c, const char *p, size_t n) {
  if (BIO_write(SSL_get_rbio(c->ssl), p, (int)n) != (int)n) return CBL_FAIL(CBL_ERR_PROTOCOL);
  int rc = 0;
  if (c->hs_pending) {
    rc = handshake(c);
    if (rc || c->hs_pending) return rc;
  }
  char *buf = c->t->pbuf;
  for (;;) {
    ERR_clear_error();
    int k = SSL_read(c->ssl, buf, CBL_READ_BUF);
    if (k > 0) {
      rc = c->t->proto->read(c, buf, (size_t)k);
      if (rc || c->done_clean) break;
      continue;
    }
    int e = SSL_get_error(c->ssl, k);
    if (e == SSL_ERROR_WANT_READ) break;
    if (e == SSL_ERROR_ZERO_RETURN) return CBL_TLS_EOF; /* close_notify */
    rc = CBL_FAIL(CBL_ERR_PROTOCOL); /* a record that does not decrypt, an alert */
    break;
  }
  /* SSL_read may have written (a KeyUpdate's answer). */
  int d = drain(c);
  return rc ? rc : d;
}

int cbl_tls_flush(cbl_conn_t *c) {
  if (c->hs_pending || c->pt.len == 0) return 0;
  ERR_clear_error();
  /* A memory BIO takes every record: the write succeeds whole or the session is broken. */
  int k = SSL_write(c->ssl, c->pt.p, (int)c->pt.len);
  if (k <= 0 || (size_t)k != c->pt.len) return CBL_FAIL(CBL_ERR_PROTOCOL);
  c->pt.len = 0;
  return drain(c);
}

void cbl_tls_drop(cbl_conn_t *c) {
  /* Closed without close_notify (thread.c says why), but not broken: OpenSSL marks the session of a connection
   * freed unshut as not resumable, which would make every later offer of it a full handshake. */
  if (c->ssl && !c->hs_pending) SSL_set_shutdown(c->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
  SSL_free(c->ssl);
  c->ssl = NULL;
  c->hs_pending = false;
  c->pt.len = 0;
}

void cbl_tls_conn_free(cbl_conn_t *c) {
  cbl_tls_drop(c);
  if (c->sess) SSL_SESSION_free(c->sess);
  c->sess = NULL;
  free(c->pt.p);
  c->pt.p = NULL;
}
