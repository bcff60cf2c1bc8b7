/* A TLS client session over memory buffers, shared by cbench-load (https://, wss://) and the engine's proxy kind
 * (https:// upstreams): OpenSSL between a socket the caller owns and a protocol that never knows TLS is there.
 *
 * The session reads from and writes to two memory BIOs, so the caller's libuv reads and writes stay as they are
 * and nothing blocks: the bytes a read brings are put in (cb_ctls_put), the handshake steps or cb_ctls_read take
 * them out as plaintext, and whatever the session has to send (the handshake's messages, records, close_notify)
 * waits in the write BIO until the caller takes it (cb_ctls_out, cb_ctls_out_done).
 *
 * The context (cb_ctls_ctx_new): TLS 1.2 and 1.3 (or one of them), no renegotiation, no compression, the ALPN
 * list asked for, the peer verified against a CA file, CA PEM text or the system's CAs unless insecure, and,
 * with resume, every session the server gives handed to the session's keep slot (the caller decides whose: a
 * connection's for cbench-load, an upstream's for the proxy). A session (cb_ctls_start) sends SNI for a DNS
 * name (RFC 6066 has no IP names) and checks the certificate against the name, or against its IP entries for
 * an IP literal.
 *
 * OpenSSL is the one library this layer uses besides llhttp and libc, in this file alone (test/layers.py); the
 * allocations are OpenSSL's own (the context, the session), none per read. */
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "client/client.h"

/* The SSL ex_data slot that points back at the cb_ctls_t: taken once per process (contexts are made on any
 * thread: cbench-load's main one, each server's API caller). */
static int sess_index = -1;
static pthread_once_t sess_once = PTHREAD_ONCE_INIT;
static void sess_index_new(void) { sess_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL); }

/* The context's new-session callback: the session goes to the keep slot, the one it held is freed. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
  cb_ctls_t *t = SSL_get_ex_data(ssl, sess_index);
  if (t == NULL || t->keep == NULL) return 0;
  if (*t->keep) SSL_SESSION_free(*t->keep);
  *t->keep = sess;
  return 1; /* the reference is the slot's now */
}

int cb_ctls_is_ip(const char *host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The reason of the last failure in OpenSSL's queue for this thread, as text (full: OpenSSL's whole error
 * string, "error:0A000086:SSL routines::certificate verify failed"; else the reason alone). */
static void last_error(char *out, size_t n, const char *fallback, int full) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e && !full ? ERR_reason_error_string(e) : NULL;
  if (e && full) ERR_error_string_n(e, out, n);
  else snprintf(out, n, "%s", r ? r : fallback);
}

/* Adds every certificate of a PEM text to the context's store: how many, or -1. */
static int add_pem(SSL_CTX *ctx, BIO *bio) {
  X509_STORE *store = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  X509 *x;
  while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
    int ok = X509_STORE_add_cert(store, x);
    X509_free(x);
    if (!ok) return -1;
    n++;
  }
  ERR_clear_error(); /* the end of the text reads as an error */
  return n;
}

int cb_ctls_ctx_new(const cb_ctls_opts_t *o, struct ssl_ctx_st **out, char *why, size_t whyn) {
  *out = NULL;
  pthread_once(&sess_once, sess_index_new);
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  int rc = CB_CTLS_E_SETUP;
  if (!ctx || sess_index < 0) goto fail;
  int minv = o->version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION;
  int maxv = o->version == 12 ? TLS1_2_VERSION : TLS1_3_VERSION;
  if (!SSL_CTX_set_min_proto_version(ctx, minv) || !SSL_CTX_set_max_proto_version(ctx, maxv)) goto fail;
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  /* No SSL_MODE_RELEASE_BUFFERS: a loaded connection reads all the time, and releasing the buffers between
   * records would cost an allocation and a free per read. */
  if (o->ciphers && !SSL_CTX_set_cipher_list(ctx, o->ciphers)) {
    rc = CB_CTLS_E_CIPHERS;
    goto fail;
  }
  if (o->tls13_ciphers && !SSL_CTX_set_ciphersuites(ctx, o->tls13_ciphers)) {
    rc = CB_CTLS_E_TLS13_CIPHERS;
    goto fail;
  }
  if (o->alpn && SSL_CTX_set_alpn_protos(ctx, o->alpn, (unsigned)o->alpn_len)) goto fail;
  if (o->insecure) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    rc = CB_CTLS_E_CA;
    if (o->ca_pem) {
      BIO *bio = BIO_new_mem_buf(o->ca_pem, (int)o->ca_pem_len);
      int n = bio ? add_pem(ctx, bio) : -1;
      BIO_free(bio);
      if (n <= 0) {
        snprintf(why, whyn, "%s", n == 0 ? "no certificate in it" : "out of memory");
        SSL_CTX_free(ctx);
        return rc;
      }
    } else if (o->ca_file && o->ca_strict) {
      /* The proxy's ca_file: read here, so that a file that cannot be read and one without a certificate are
       * told apart, and a file of CRLs alone is refused. */
      BIO *bio = BIO_new_file(o->ca_file, "r");
      if (bio == NULL) {
        snprintf(why, whyn, "cannot be read");
        SSL_CTX_free(ctx);
        return rc;
      }
      int n = add_pem(ctx, bio);
      BIO_free(bio);
      if (n <= 0) {
        snprintf(why, whyn, "%s", n == 0 ? "no certificate in it" : "out of memory");
        SSL_CTX_free(ctx);
        return rc;
      }
    } else if (!(o->ca_file ? SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL)
                            : SSL_CTX_set_default_verify_paths(ctx))) {
      goto fail;
    }
  }
  if (o->resume) {
    /* The client cache mode makes OpenSSL hand every new session to the callback; the internal store is not
     * used (a client's is never looked up: each connection offers its own). */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  }
  *out = ctx;
  return 0;
fail:
  last_error(why, whyn, rc == CB_CTLS_E_CA ? "no certificate in it" : "out of memory", 1);
  SSL_CTX_free(ctx);
  return rc;
}

void cb_ctls_ctx_free(struct ssl_ctx_st *ctx) { SSL_CTX_free(ctx); }

int cb_ctls_start(cb_ctls_t *t, struct ssl_ctx_st *ctx, const char *name, int verify,
                  struct ssl_session_st **keep) {
  memset(t, 0, sizeof *t);
  SSL *ssl = SSL_new(ctx);
  BIO *rbio = BIO_new(BIO_s_mem()), *wbio = BIO_new(BIO_s_mem());
  if (!ssl || !rbio || !wbio) {
    SSL_free(ssl);
    BIO_free(rbio);
    BIO_free(wbio);
    return CB_CTLS_E_SETUP;
  }
  /* An empty read BIO is "no data yet", not the end of the stream. */
  BIO_set_mem_eof_return(rbio, -1);
  SSL_set_bio(ssl, rbio, wbio);
  t->ssl = ssl;
  t->keep = keep;
  t->hs_pending = 1;
  SSL_set_ex_data(ssl, sess_index, t);
  SSL_set_connect_state(ssl);
  if (name != NULL && name[0] != '\0') {
    if (!cb_ctls_is_ip(name)) {
      if (!SSL_set_tlsext_host_name(ssl, name)) return CB_CTLS_E_SETUP;
      if (verify && !SSL_set1_host(ssl, name)) return CB_CTLS_E_SETUP;
    } else if (verify && !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)) {
      return CB_CTLS_E_SETUP;
    }
  }
  if (keep && *keep) SSL_set_session(ssl, *keep);
  return 0;
}

int cb_ctls_handshake(cb_ctls_t *t) {
  if (!t->hs_pending) return 1;
  ERR_clear_error();
  int ret = SSL_do_handshake(t->ssl);
  if (ret == 1) {
    t->hs_pending = 0;
    return 1;
  }
  int e = SSL_get_error(t->ssl, ret);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  t->ssl_error = e;
  t->verify = SSL_get_verify_result(t->ssl);
  /* Kept now: the thread's error queue is another's by the time the caller words it. */
  last_error(t->reason, sizeof t->reason, "handshake failure", 0);
  last_error(t->reason_full, sizeof t->reason_full, "handshake failure", 1);
  return CB_CTLS_E_HANDSHAKE;
}

void cb_ctls_why(const cb_ctls_t *t, int full, char *out, size_t n) {
  if (t->verify != X509_V_OK)
    snprintf(out, n, "certificate verify failed: %s", X509_verify_cert_error_string(t->verify));
  else if (t->ssl_error == SSL_ERROR_SSL)
    snprintf(out, n, "%s", full ? t->reason_full : t->reason);
  else if (full)
    snprintf(out, n, "handshake failed (SSL_get_error %d)", t->ssl_error);
  else
    snprintf(out, n, "%s", t->ssl_error == SSL_ERROR_SYSCALL || t->ssl_error == SSL_ERROR_ZERO_RETURN
                               ? "connection closed" : "handshake failure");
}

int cb_ctls_put(cb_ctls_t *t, const char *p, size_t n) {
  return BIO_write(SSL_get_rbio(t->ssl), p, (int)n) == (int)n ? 0 : CB_CTLS_E_PROTOCOL;
}

ssize_t cb_ctls_read(cb_ctls_t *t, char *buf, size_t cap) {
  ERR_clear_error();
  int k = SSL_read(t->ssl, buf, (int)cap);
  if (k > 0) return k;
  int e = SSL_get_error(t->ssl, k);
  if (e == SSL_ERROR_WANT_READ) return 0;
  if (e == SSL_ERROR_ZERO_RETURN) return CB_CTLS_EOF; /* close_notify */
  return CB_CTLS_E_PROTOCOL; /* a record that does not decrypt, an alert */
}

int cb_ctls_write(cb_ctls_t *t, const char *p, size_t n) {
  if (n == 0) return 0;
  ERR_clear_error();
  /* A memory BIO takes every record: the write succeeds whole or the session is broken. */
  int k = SSL_write(t->ssl, p, (int)n);
  return k > 0 && (size_t)k == n ? 0 : CB_CTLS_E_PROTOCOL;
}

size_t cb_ctls_out(cb_ctls_t *t, const char **p) {
  char *q;
  long n = BIO_get_mem_data(SSL_get_wbio(t->ssl), &q);
  *p = q;
  return n > 0 ? (size_t)n : 0;
}

void cb_ctls_out_done(cb_ctls_t *t) { (void)BIO_reset(SSL_get_wbio(t->ssl)); }

void cb_ctls_close_notify(cb_ctls_t *t) {
  if (t->ssl == NULL || t->hs_pending) return;
  ERR_clear_error();
  (void)SSL_shutdown(t->ssl); /* only our half: the peer's answer is not waited for */
}

int cb_ctls_resumed(const cb_ctls_t *t) { return SSL_session_reused(t->ssl); }

void cb_ctls_params(const cb_ctls_t *t, const char **version, const char **cipher, const char **alpn,
                    unsigned *alpn_len) {
  const unsigned char *a;
  SSL_get0_alpn_selected(t->ssl, &a, alpn_len);
  *alpn = (const char *)a;
  *version = SSL_get_version(t->ssl);
  *cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(t->ssl));
}

void cb_ctls_free(cb_ctls_t *t) {
  /* A session closed without close_notify is not broken: OpenSSL marks the session of a connection freed unshut
   * as not resumable, which would make every later offer of it a full handshake. */
  if (t->ssl && !t->hs_pending) SSL_set_shutdown(t->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
  SSL_free(t->ssl);
  t->ssl = NULL;
  t->hs_pending = 0;
}

void cb_ctls_session_free(struct ssl_session_st **s) {
  if (*s) SSL_SESSION_free(*s);
  *s = NULL;
}
