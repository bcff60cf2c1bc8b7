/* TLS for cbench-load (https:// and wss:// URLs): an OpenSSL client session per connection, between the socket
 * and the protocol (HTTP/1.1, h2, WebSocket), which never knows it is there.
 *
 * The session reads from and writes to two memory BIOs, so the connection's libuv reads and writes stay as they
 * are and nothing blocks: the bytes a read brings go into the read BIO, the handshake steps or SSL_read takes
 * them out, and whatever the session has to send (the handshake's messages, records) is taken from the write BIO
 * into the connection's output queue. What the protocols write collects as plaintext (c->pt) and is encrypted
 * once per flush, so an event's requests (a pipelined batch, nghttp2's frames) go out in as few records as fit.
 *
 * The OpenSSL part (the context, the session over memory BIOs) is the client layer's (src/client/tls_client.c),
 * shared with the engine's proxy kind; what is here ties it to a connection, its counts and its report.
 *
 * One SSL_CTX for the run, shared by the threads (OpenSSL allows SSL_new from several threads on one context):
 * TLS 1.2 and 1.3, no renegotiation, no compression; ALPN offers the one protocol asked for (h2 for -p h2, or
 * http/1.1), and h2 is spoken only when the server chose it (hs_done); SNI is the URL's host unless it is an IP
 * address (RFC 6066 has no IP names); the peer is verified against --cacert (or the system's CAs) and the URL's
 * host (a DNS name, or an IP address against the certificate's IP entries), unless --insecure.
 *
 * Resumption (on unless --no-resume): each connection keeps the last session the server gave it (the TLS 1.3
 * tickets, or the TLS 1.2 session, through the context's new-session callback) and offers it when it connects
 * again, so a connection per request (--new-conn) measures resumed handshakes; with --no-resume none is offered
 * and every handshake is a full one. Handshakes are counted as full or resumed as they complete. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "load.h"

int cbl_tls_ctx_new(cbl_run_t *run) {
  const cbl_config_t *cfg = run->cfg;
  if (!cfg->tls) return 0;
  /* ALPN: the protocol asked for, alone, so the server cannot pick one the connection would not speak. */
  static const unsigned char alpn_h2[] = "\x02h2", alpn_h1[] = "\x08http/1.1";
  bool h2 = cfg->proto == CBL_H2C;
  cb_ctls_opts_t o = {.version = cfg->tls_version, .ciphers = cfg->ciphers, .tls13_ciphers = cfg->tls13_ciphers,
                      .alpn = h2 ? alpn_h2 : alpn_h1, .alpn_len = h2 ? sizeof alpn_h2 - 1 : sizeof alpn_h1 - 1,
                      .insecure = cfg->insecure, .ca_file = cfg->cacert, .resume = cfg->resume};
  char why[256];
  struct ssl_ctx_st *ctx;
  switch (cb_ctls_ctx_new(&o, &ctx, why, sizeof why)) {
    case 0:
      run->tls_ctx = ctx;
      return 0;
    /* The options OpenSSL refuses are bad arguments (-2: the usage, exit 2), as those config.c refuses are; only
     * the system's CAs that do not load are the machine's fault. */
    case CB_CTLS_E_CIPHERS:
      fprintf(stderr, "cbench-load: --ciphers '%s': no cipher OpenSSL knows\n", cfg->ciphers);
      return -2;
    case CB_CTLS_E_TLS13_CIPHERS:
      fprintf(stderr, "cbench-load: --tls13-ciphers '%s': not a TLS 1.3 cipher suite list\n", cfg->tls13_ciphers);
      return -2;
    case CB_CTLS_E_CA:
      fprintf(stderr, "cbench-load: cannot load the CA %s: %s\n", cfg->cacert ? cfg->cacert : "(system)", why);
      return cfg->cacert ? -2 : -1;
    default:
      fprintf(stderr, "cbench-load: cannot set up TLS: %s\n", why);
      return -1;
  }
}

void cbl_tls_ctx_free(cbl_run_t *run) {
  cb_ctls_ctx_free(run->tls_ctx);
  run->tls_ctx = NULL;
}

/* Moves what the session wrote to the connection's output (ciphertext, for the socket). */
static int drain(cbl_conn_t *c) {
  const char *p;
  size_t n = cb_ctls_out(&c->tls, &p);
  if (n == 0) return 0;
  if (cbl_buf_append(&c->out, p, n)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  cb_ctls_out_done(&c->tls);
  return 0;
}

/* A failed handshake: counted (conn_fail does, under tls), and its reason kept, the first of the thread's. */
static int hs_failed(cbl_conn_t *c) {
  cbl_result_t *res = &c->t->res;
  if (!res->tls_error[0]) cb_ctls_why(&c->tls, 1, res->tls_error, sizeof res->tls_error);
  return CBL_FAIL(CBL_ERR_TLS);
}

/* The handshake completed: the first session's parameters kept for the report, the protocol checked against
 * ALPN, the handshake counted, and the protocol's preface or handshake queued.
 *
 * h2 is spoken over TLS only when ALPN chose it (RFC 9113 3.2, RFC 7540 3.3): a server that chose no protocol
 * does not speak h2 on that connection, and HTTP/2's preface would be a bad request to it. The handshake then
 * counts as failed (errors.tls, per attempt), named in tls.error as h2load's "No protocol negotiated" is, and
 * the connection tries again as after any failed handshake. (A protocol the client did not offer OpenSSL
 * refuses itself, with an alert.) HTTP/1.1 and WebSocket need no ALPN: HTTP/1.1 is what a server that chose
 * none speaks. */
static int hs_done(cbl_conn_t *c) {
  cbl_thread_t *t = c->t;
  cbl_result_t *res = &t->res;
  c->hs_pending = false;
  const char *version, *cipher, *alpn;
  unsigned int alen;
  cb_ctls_params(&c->tls, &version, &cipher, &alpn, &alen);
  if (!res->tls_version[0]) {
    snprintf(res->tls_version, sizeof res->tls_version, "%s", version);
    snprintf(res->tls_cipher, sizeof res->tls_cipher, "%s", cipher);
    snprintf(res->tls_alpn, sizeof res->tls_alpn, "%.*s", alen < sizeof res->tls_alpn ? (int)alen : 0,
             alen ? alpn : "");
  }
  if (t->cfg->proto == CBL_H2C && !(alen == 2 && memcmp(alpn, "h2", 2) == 0)) {
    if (!res->tls_error[0])
      snprintf(res->tls_error, sizeof res->tls_error, "no application protocol negotiated: the server chose %s, and "
               "h2 over TLS needs ALPN h2 (RFC 9113 3.2)", alen ? "another" : "none");
    return CBL_FAIL(CBL_ERR_TLS);
  }
  if (t->now >= t->run->t_measure) {
    if (cb_ctls_resumed(&c->tls)) res->counts.tls_resumed++;
    else res->counts.tls_full++;
  }
  return t->proto->open(c);
}

static int handshake(cbl_conn_t *c) {
  int ret = cb_ctls_handshake(&c->tls);
  int rc = drain(c);
  if (rc) return rc;
  if (ret == 1) return hs_done(c);
  if (ret == 0) return 0;
  return hs_failed(c);
}

int cbl_tls_start(cbl_conn_t *c) {
  const cbl_config_t *cfg = c->t->cfg;
  /* The keep slot is the connection's: it offers the last session it was given when it connects again. */
  if (cb_ctls_start(&c->tls, c->t->run->tls_ctx, cfg->host, !cfg->insecure,
                    cfg->resume ? (struct ssl_session_st **)&c->sess : NULL) != 0) {
    c->hs_pending = c->tls.ssl != NULL;
    return CBL_FAIL(CBL_ERR_TLS);
  }
  c->hs_pending = true;
  return handshake(c);
}

/* What the session wrote while reading (after the handshake, nothing encrypts the protocol's output then: a
 * KeyUpdate's answer, an alert) goes out as drain() moves it, but only while less than CBL_OUT_HIGH bytes wait
 * for the socket, as h2's acknowledgements and WebSocket's pongs: OpenSSL answers every KeyUpdate that asks for
 * one, so a server that asks before each record and never reads would grow the output without a bound (27
 * bytes a request, 1 MB after 40,000). It fails the connection instead: a protocol error. */
static int drain_read(cbl_conn_t *c) {
  size_t before = cbl_conn_unsent(c);
  int rc = drain(c);
  if (rc == 0 && before >= CBL_OUT_HIGH && cbl_conn_unsent(c) > before) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return rc;
}

int cbl_tls_read(cbl_conn_t *c, const char *p, size_t n) {
  if (cb_ctls_put(&c->tls, p, n)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  int rc = 0;
  if (c->hs_pending) {
    rc = handshake(c);
    if (rc || c->hs_pending) return rc;
  }
  char *buf = c->t->pbuf;
  for (;;) {
    ssize_t k = cb_ctls_read(&c->tls, buf, CBL_READ_BUF);
    if (k > 0) {
      rc = drain_read(c);
      if (!rc) rc = c->t->proto->read(c, buf, (size_t)k);
      if (rc || c->done_clean) break;
      continue;
    }
    if (k == 0) break;
    if (k == CB_CTLS_EOF) return CBL_TLS_EOF; /* close_notify */
    rc = CBL_FAIL(CBL_ERR_PROTOCOL); /* a record that does not decrypt, an alert */
    break;
  }
  int d = drain_read(c);
  return rc ? rc : d;
}

int cbl_tls_flush(cbl_conn_t *c) {
  if (c->hs_pending || c->pt.len == 0) return 0;
  if (cb_ctls_write(&c->tls, c->pt.p, c->pt.len)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  c->pt.len = 0;
  return drain(c);
}

void cbl_tls_drop(cbl_conn_t *c) {
  /* Closed without close_notify (thread.c says why), but not broken (cb_ctls_free keeps the session
   * resumable). */
  cb_ctls_free(&c->tls);
  c->hs_pending = false;
  c->pt.len = 0;
}

void cbl_tls_conn_free(cbl_conn_t *c) {
  cbl_tls_drop(c);
  cb_ctls_session_free((struct ssl_session_st **)&c->sess);
  free(c->pt.p);
  c->pt.p = NULL;
}
