/* The TLS transport: TLS 1.2 and 1.3 over a non-blocking TCP socket, with OpenSSL 3 (Debian's libssl).
 *
 * The session reads the socket itself (a BIO that takes a bounded share of it per event) and writes the records of
 * one event into a batch that goes out in one write at the event's end (tls_batch.c, tls_push). Nothing waits: a
 * handshake step or a record that cannot go on now answers UV_EAGAIN, and the loop's next event for the socket goes
 * on with it. A handshake message that could not be written sets want_write, and the connection then polls for
 * writable and reads again (core/conn.c). The protocols above see plaintext only, after the handshake: the first
 * read that returns bytes has the peer's first application data, and by then `alpn` says what ALPN chose
 * (proto/detect.c follows it).
 *
 * What the context allows: TLS 1.2 and 1.3, no renegotiation, no compression; ALPN h2 and http/1.1 (a client
 * that offers neither gets the no_application_protocol alert; one that offers no ALPN gets the preface rule).
 * Sessions release their buffers while idle (SSL_MODE_RELEASE_BUFFERS). File ranges are read and written by the
 * output queue (no sendfile: the bytes must be encrypted here), unless kernel TLS took the session after its
 * handshake (ktls.c). A session counts against its worker's bound on handshakes in progress (cb__tls_budget_t)
 * from its accept until its handshake completes or its connection closes. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tls_batch.h"
#include "transport/tls_fault.h"
#include "transport/transport.h"

/* Sessions the server session cache keeps (OpenSSL's default, 20480): a few MB at most, and the oldest go first. */
#define SESSION_CACHE_SIZE 20480

/* A server's TLS settings: one SSL_CTX per identity of its certificates (below, "the server's context"). */
struct cb__tls_ctx_s {
  SSL_CTX *ctx[CB__CERT_COUNT];
  unsigned char alpn[16]; /* the protocols offered, in ALPN's wire format, preferred first */
  unsigned alpn_len;
  int ktls; /* sessions ask OpenSSL for kernel TLS (cb__tls_ctx_ktls) */
  /* Handshakes completed, new sessions and resumed ones, by every worker (atomic: one add per handshake, next to
   * the handshake's own public-key work). */
  uint64_t handshakes_full, handshakes_resumed;
};

/* Where a session keeps its worker's handshake budget (cb__tls_budget_t): an ex_data slot of its own, made once. */
static int budget_slot = -1;
static pthread_once_t budget_once = PTHREAD_ONCE_INIT;
static void make_budget_slot(void) { budget_slot = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL); }

/* One more on a worker's counter: its thread is the only writer, other threads read it (cb_server_stats). */
static void count(uint64_t *n) {
  if (n != NULL) __atomic_store_n(n, *n + 1, __ATOMIC_RELAXED);
}

/* The session's handshake no longer counts as pending: it completed, or its connection closes first (failed). */
static cb__tls_budget_t *handshake_over(SSL *ssl, int failed) {
  cb__tls_budget_t *b = SSL_get_ex_data(ssl, budget_slot);
  if (b == NULL) return NULL;
  SSL_set_ex_data(ssl, budget_slot, NULL);
  b->pending--;
  if (failed) count(b->failed);
  return b;
}

/* A connection's client certificate, named once when its handshake ends (cb__tls_peer), kept with the session
 * (SSL ex_data) and freed with it. Only connections that sent a certificate have one. */
typedef struct {
  char sha256[65];
  char subject[]; /* NUL-terminated */
} peer_t;

/* The longest subject kept: the client CA's certificates have a common name of at most 64 bytes, so only a name
 * made elsewhere (refused by the verification anyway) could be longer. */
#define MAX_SUBJECT 1024

static const cb__tport_ops_t tls_ops;

static int peer_index = -1;
static pthread_once_t peer_once = PTHREAD_ONCE_INIT;

static void peer_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp) {
  (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
  free(ptr);
}

static void peer_index_new(void) { peer_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, peer_free); }

/* Names the peer's certificate, when it sent one (a resumed session still holds it). A name that cannot be made
 * (no memory) leaves the connection without one; the connection goes on. */
static void peer_record(SSL *ssl) {
  X509 *x = SSL_get0_peer_certificate(ssl);
  if (x == NULL || peer_index < 0) return;
  char sha[65];
  int n = cb__cert_identity(x, NULL, 0, sha);
  if (n < 0) return;
  size_t len = n > MAX_SUBJECT ? MAX_SUBJECT : (size_t)n;
  peer_t *p = malloc(sizeof *p + len + 1);
  if (p == NULL) return;
  cb__cert_identity(x, p->subject, len + 1, p->sha256);
  if (SSL_set_ex_data(ssl, peer_index, p) != 1) free(p);
}

int cb__tls_peer(const cb__tport_t *t, cb__tls_peer_t *out) {
  *out = (cb__tls_peer_t){NULL, NULL};
  if (!t->tls || t->state == NULL || peer_index < 0 || !t->ready) return 0; /* tls or ktls ops */
  const peer_t *p = SSL_get_ex_data(t->state, peer_index);
  if (p == NULL) return 0;
  out->client_subject = p->subject;
  out->client_sha256 = p->sha256;
  return 1;
}


/* ---- a session's operations ---- */

/* What a failed call means: UV_EAGAIN for "not now" (want_write noted), UV_EOF for the peer's end (with or
 * without close_notify: a client that closes its socket is no error here), anything else UV_EPROTO.
 *
 * The thread's error queue must be empty when an operation starts, for SSL_get_error() to be right. It is kept
 * so by emptying it here, after every failed operation, and after each step that is not a record's (handshake,
 * shutdown, close): not before every SSL_read_ex and SSL_write_ex, which cost 1.3% of the server's CPU over
 * HTTP/1.1+TLS (perf). */
static ssize_t failed(cb__tport_t *t, SSL *ssl, int rc) {
  ssize_t r;
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ: r = UV_EAGAIN; break;
    case SSL_ERROR_WANT_WRITE: t->want_write = 1; r = UV_EAGAIN; break;
    case SSL_ERROR_ZERO_RETURN: r = UV_EOF; break;
    case SSL_ERROR_SYSCALL:
      r = ERR_peek_error() == 0 && (errno == 0 || errno == ECONNRESET || errno == EPIPE) ? UV_EOF : UV_EPROTO;
      break;
    default: r = UV_EPROTO; break;
  }
  ERR_clear_error();
  return r;
}

/* ---- what a handshake settled (cb__tls_info) ----
 * Taken once, when the handshake ends, into a block the session holds as its ex_data (freed with the session):
 * the journal reads it for every request of the connection, and no request asks OpenSSL again. The session's
 * own SNI string is not kept: OpenSSL may replace the session object after the handshake (a TLS 1.3 ticket). */
typedef struct {
  cb__tls_info_t info;
  char sni[]; /* info.sni points here */
} sess_info_t;

static int info_index = -1;
static pthread_once_t info_once = PTHREAD_ONCE_INIT;

static void free_info(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp) {
  (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
  free(ptr);
}

static void make_info_index(void) { info_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, free_info); }

/* A session without its block (no memory) still serves; its requests are journaled without TLS details. */
static void keep_info(SSL *ssl, uint8_t alpn) {
  const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  size_t len = name != NULL ? strlen(name) : 0;
  sess_info_t *si = malloc(sizeof *si + len + 1);
  if (si == NULL) return;
  memcpy(si->sni, name != NULL ? name : "", len + 1);
  si->info = (cb__tls_info_t){.version = SSL_get_version(ssl),
                              .cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(ssl)),
                              .sni = name != NULL ? si->sni : NULL,
                              .alpn = alpn,
                              .resumed = (uint8_t)(SSL_session_reused(ssl) == 1)};
  if (info_index < 0 || SSL_set_ex_data(ssl, info_index, si) != 1) free(si);
}

int cb__tls_info(const cb__tport_t *t, cb__tls_info_t *out) {
  if (!t->tls || !t->ready || t->state == NULL || info_index < 0) return UV_EINVAL;
  const sess_info_t *si = SSL_get_ex_data(t->state, info_index);
  if (si == NULL) return UV_EINVAL;
  *out = si->info;
  cb__tls_peer_t p;
  cb__tls_peer(t, &p); /* both NULL without a client certificate */
  out->client_subject = p.client_subject;
  out->client_sha256 = p.client_sha256;
  return 0;
}

/* A handshake that failed: OpenSSL wrote its alert (certificate_required, unknown_ca...), and the FIN goes right
 * after it. The socket stays open, read and dropped, until the client closes it (as it does once it reads the
 * alert) or the header timeout ends the connection: a TLS 1.3 client sends its Finished and first request before
 * it can know, and closing on them would answer with a reset that can discard the alert before the client reads
 * it. The session is done with: from here the connection's operations are refused_ops. */
static const cb__tport_ops_t refused_ops;

static void refuse(cb__tport_t *t) {
  if (!cb__tls_batch_fin(SSL_get_wbio(t->state))) shutdown(t->fd, SHUT_WR); /* else after the alert, at the push */
  t->ops = &refused_ops;
}

/* Drops what the socket holds, into the worker's buffer, up to one buffer per event: a client that keeps sending
 * gets no more of the worker than one that sends a request. */
static ssize_t refused_read(cb__tport_t *t, char *buf, size_t n) {
  size_t dropped = 0;
  while (dropped < n) {
    ssize_t r = recv(t->fd, buf, n, 0);
    if (r > 0) {
      dropped += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? UV_EAGAIN : 0; /* the end, or a reset: done */
  }
  return UV_EAGAIN; /* more may wait: the next readable event drops it */
}

static ssize_t refused_write(cb__tport_t *t, const char *p, size_t n) {
  (void)t, (void)p, (void)n;
  return UV_EPIPE;
}

static ssize_t refused_writev(cb__tport_t *t, const struct iovec *iov, int n) {
  (void)t, (void)iov, (void)n;
  return UV_EPIPE;
}

static void refused_shutdown(cb__tport_t *t) { (void)t; }

static void handshake_done(cb__tport_t *t, SSL *ssl) {
  cb__tls_ctx_t *c = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
  if (c != NULL)
    __atomic_add_fetch(SSL_session_reused(ssl) ? &c->handshakes_resumed : &c->handshakes_full, 1, __ATOMIC_RELAXED);
  peer_record(ssl);
  const unsigned char *p;
  unsigned n;
  SSL_get0_alpn_selected(ssl, &p, &n);
  t->alpn = n == 2 && memcmp(p, "h2", 2) == 0 ? CB__ALPN_H2 : n == 8 && memcmp(p, "http/1.1", 8) == 0 ? CB__ALPN_HTTP1 : CB__ALPN_NONE;
  t->ready = 1;
  keep_info(ssl, t->alpn);
  cb__tls_budget_t *b = handshake_over(ssl, 0);
  /* Kernel TLS, when the server asked for it: the records from here on may be the kernel's (ktls.c). */
  if ((SSL_get_options(ssl) & SSL_OP_ENABLE_KTLS) && cb__ktls_take(t) && b != NULL) count(b->ktls);
}

/* Reads plaintext until buf is full or OpenSSL holds no more of what it read: the handshake first. With read-ahead
 * (make_ctx) a record's header and body, and whatever else the socket had, come in one recv(2); the loop then
 * stops when OpenSSL has nothing buffered, and the next readable event (the poll is level-triggered) brings the
 * rest: no recv that can only answer EAGAIN, as over plain TCP. */
static ssize_t tls_read(cb__tport_t *t, char *buf, size_t n) {
  SSL *ssl = t->state;
  t->want_write = 0;
  /* What this event may take from the socket (tls_batch.c, the reader): a buffer of plaintext and the records'
   * overhead, twice the buffer. Records that are not data would otherwise be read for as long as the client
   * sends them, in this one call. */
  cb__tls_reader_budget(SSL_get_rbio(ssl), n > SIZE_MAX / 2 ? SIZE_MAX : 2 * n);
  if (!t->ready) {
    ERR_clear_error();
    int rc = SSL_do_handshake(ssl);
    ssize_t fault = cb__tls_fault_handshake(t, rc); /* a handshake fault's step (tls_fault.c) */
    if (fault != 0) {
      ERR_clear_error();
      return fault;
    }
    if (rc != 1) {
      ssize_t err = failed(t, ssl, rc);
      if (err == UV_EPROTO) {
        refuse(t);
        return UV_EAGAIN;
      }
      return err == UV_EOF ? 0 : err;
    }
    handshake_done(t, ssl);
    ERR_clear_error(); /* what naming the peer or kernel TLS may have left */
  }
  size_t got = 0;
  t->buffered = 0;
  while (got < n) {
    size_t k;
    int rc = SSL_read_ex(ssl, buf + got, n - got, &k);
    if (rc == 1) {
      got += k;
      if (!SSL_has_pending(ssl)) break;
      continue;
    }
    ssize_t err = failed(t, ssl, rc);
    if (got > 0) {
      /* What was read first; the end or the error comes with the next read, which OpenSSL answers the same
       * way again. The socket may have nothing more to say (a close_notify that came with the request, from a
       * client waiting for ours): the connection reads again without waiting for it, as for read-ahead. */
      if (err != UV_EAGAIN) t->buffered = 1;
      return (ssize_t)got;
    }
    return err == UV_EOF ? 0 : err;
  }
  /* A full buffer with records (or plaintext) still in OpenSSL: the socket may have nothing more to say, so no
   * readable event would come for them. */
  if (got == n && SSL_has_pending(ssl)) t->buffered = 1;
  return got > 0 ? (ssize_t)got : UV_EAGAIN;
}

static ssize_t tls_write(cb__tport_t *t, const char *p, size_t n) {
  if (!t->ready) return UV_EAGAIN;
  SSL *ssl = t->state;
  size_t k;
  if (SSL_write_ex(ssl, p, n, &k) == 1) return (ssize_t)k; /* partial writes on: k < n when the socket filled */
  ssize_t err = failed(t, ssl, 0);
  t->want_write = 0; /* a write that waits is the output queue's: it polls for writable itself */
  return err == UV_EOF ? UV_EPIPE : err;
}

/* Pieces up to one record (16 KiB) are gathered into one write, so a head and a small body go out as one
 * record, as they go out as one writev over plain TCP. A repeated write after UV_EAGAIN gathers the same bytes
 * first (the output queue keeps them at its front), which is what OpenSSL asks of a repeated write. */
static ssize_t tls_writev(cb__tport_t *t, const struct iovec *iov, int n) {
  char rec[16384];
  ssize_t total = 0;
  int i = 0;
  while (i < n) {
    if (iov[i].iov_len >= sizeof rec) { /* a big piece on its own */
      ssize_t r = tls_write(t, iov[i].iov_base, iov[i].iov_len);
      if (r < 0) return total > 0 ? total : r;
      total += r;
      if ((size_t)r < iov[i].iov_len) return total;
      i++;
      continue;
    }
    size_t len = 0;
    while (i < n && len + iov[i].iov_len <= sizeof rec) {
      memcpy(rec + len, iov[i].iov_base, iov[i].iov_len);
      len += iov[i].iov_len;
      i++;
    }
    ssize_t r = tls_write(t, rec, len);
    if (r < 0) return total > 0 ? total : r;
    total += r;
    if ((size_t)r < len) return total;
  }
  return total;
}

/* close_notify, then the FIN: both go out with the event's batch (tls_push), after the last response. A
 * close_notify that cannot be written now is not waited for. */
static void tls_shutdown(cb__tport_t *t) {
  if (cb__tls_fault_shutdown(t)) return; /* an after-handshake fault ends it instead (tls_fault.c) */
  if (t->ready) {
    (void)SSL_shutdown(t->state);
    ERR_clear_error();
  }
  if (!cb__tls_batch_fin(SSL_get_wbio(t->state))) shutdown(t->fd, SHUT_WR);
}

static int tls_push(cb__tport_t *t) {
  int r = cb__tls_batch_push(SSL_get_wbio(t->state), 0);
  t->held = r > 0;
  return r < 0 ? r : 0;
}

static void tls_close(cb__tport_t *t, int reset) {
  if (!t->ready) handshake_over(t->state, 1);
  if (reset) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* RST, no close_notify: a fault */
    setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  /* A session whose connection ended without our close_notify (the client closed first, as a pool closing an
   * idle connection does) stays resumable: OpenSSL would drop it from the session cache, as TLS 1.0 asked, but
   * TLS 1.1 and later allow it (RFC 4346 7.2.1). A reset (a fault) drops it. */
  if (!reset && t->ready && t->ops != &refused_ops)
    SSL_set_shutdown(t->state, SSL_get_shutdown(t->state) | SSL_SENT_SHUTDOWN);
  /* What the last event gathered (a response, a close_notify, an alert) goes before the FIN of close(2), as far
   * as the socket takes it: nothing is waited for. */
  if (!reset) (void)cb__tls_batch_push(SSL_get_wbio(t->state), 1);
  cb__tls_fault_close(t);
  SSL_free(t->state);
  ERR_clear_error();
  t->state = NULL;
  close(t->fd);
  t->fd = -1;
}

static const cb__tport_ops_t tls_ops = {
    .read = tls_read,
    .write = tls_write,
    .writev = tls_writev,
    .sendfile = NULL,
    .shutdown = tls_shutdown,
    .close = tls_close,
    .fault = cb__tls_fault_after,
    .push = tls_push,
};

static const cb__tport_ops_t refused_ops = {
    .read = refused_read,
    .write = refused_write,
    .writev = refused_writev,
    .sendfile = NULL,
    .shutdown = refused_shutdown,
    .close = tls_close,
    .push = tls_push,
};

/* The session's socket: read through the reader (tls_batch.c: a budget per event), written through a batch
 * (tls_batch.c), or through a socket BIO when the session may go to the kernel (kTLS writes through the BIO
 * OpenSSL gave its keys to). Such a session read through the socket BIO too, which has no budget: a client
 * streaming KeyUpdates held the worker in one read (tls_keyupdate_stream_bounded_per_event_ktls). The reader
 * takes no keys, so the kernel's receiving side is not asked for: records are read and decrypted by OpenSSL, as
 * they were whenever the kernel refused the receiving side. */
static int attach(SSL *ssl, int fd, int ktls) {
  BIO *r = cb__tls_reader_new(fd);
  if (r == NULL) return 0;
  SSL_set0_rbio(ssl, r);
  BIO *w = ktls ? BIO_new_socket(fd, BIO_NOCLOSE) : cb__tls_batch_new(ssl, fd);
  if (w == NULL) return 0;
  SSL_set0_wbio(ssl, w);
  return 1;
}

int cb__tport_tls(int fd, cb__tls_ctx_t *ctx, cb__tls_budget_t *budget, cb__tport_t *out) {
  /* A client that opens connections and never finishes their handshakes holds a session each (tens of KiB with
   * its buffers) until the header timeout: the budget bounds how many a worker holds. */
  if (budget != NULL && budget->pending >= budget->max) return UV_EBUSY;
  SSL *ssl = SSL_new(ctx->ctx[CB__CERT_DEFAULT]);
  if (ssl == NULL || !attach(ssl, fd, ctx->ktls) ||
      (budget != NULL && SSL_set_ex_data(ssl, budget_slot, budget) != 1)) {
    SSL_free(ssl);
    ERR_clear_error();
    return UV_ENOMEM;
  }
  if (budget != NULL) budget->pending++;
  if (ctx->ktls) SSL_set_options(ssl, SSL_OP_ENABLE_KTLS);
  SSL_set_accept_state(ssl);
  *out = (cb__tport_t){.ops = &tls_ops, .fd = fd, .tls = 1, .state = ssl};
  return 0;
}

/* The TLS table's operations that the kTLS one shares (ktls.c). */
ssize_t cb__tls_read(cb__tport_t *t, char *buf, size_t n) { return tls_read(t, buf, n); }
void cb__tls_shutdown(cb__tport_t *t) { tls_shutdown(t); }
void cb__tls_close(cb__tport_t *t, int reset) { tls_close(t, reset); }

/* ---- the server's context ----
 * One SSL_CTX per identity of the server's certificates (base/certs.c): the default one answers every client, and
 * the SNI name a client sends switches its session to the identity of that name (the bad-certificate scenarios:
 * expired.localhost...). Every SSL_CTX allows the same: TLS 1.2 and 1.3, ALPN h2 and http/1.1. */

/* ALPN: the first of our protocols the client offers (h2 before http/1.1). None in common: the
 * no_application_protocol alert (RFC 7301 3.2). */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg) {
  (void)ssl;
  cb__tls_ctx_t *c = arg;
  unsigned char *sel;
  if (SSL_select_next_proto(&sel, outlen, c->alpn, c->alpn_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

/* SNI: the identity of the name the client sent; the session moves to its SSL_CTX (the certificate it serves). */
static int select_identity(SSL *ssl, int *alert, void *arg) {
  cb__tls_ctx_t *c = arg;
  const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  int fault = name != NULL ? cb__tls_fault_find(name, strlen(name)) : CB__TLS_FAULT_NONE;
  if (fault != CB__TLS_FAULT_NONE) return cb__tls_fault_hello(ssl, fault, alert); /* tls-stall.localhost... */
  int id = name != NULL ? cb__certs_find(name, strlen(name)) : CB__CERT_DEFAULT;
  if (id != CB__CERT_DEFAULT && c->ctx[id] != NULL) SSL_set_SSL_CTX(ssl, c->ctx[id]);
  return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *make_ctx(cb__tls_ctx_t *c, const cb__cert_ident_t *id) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == NULL) return NULL;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  /* A client that closes its socket without close_notify (curl, h2load and most others do after their last
   * answer) is a peer that left, as over cleartext: OpenSSL 3 would report it as an error, counted as a reset. */
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                               SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  /* One recv(2) per readable event rather than one per record header and one per record body (tls_read). */
  SSL_CTX_set_read_ahead(ctx, 1);
  /* The weak-key scenario serves an RSA-1024 leaf, which OpenSSL's default security level refuses to load. */
  if (id->sni != NULL) SSL_CTX_set_security_level(ctx, 0);
  if (SSL_CTX_use_certificate(ctx, id->cert) != 1 || SSL_CTX_use_PrivateKey(ctx, id->key) != 1 ||
      SSL_CTX_set1_chain(ctx, id->chain) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    SSL_CTX_free(ctx);
    return NULL;
  }
  SSL_CTX_set_alpn_select_cb(ctx, select_alpn, c);
  SSL_CTX_set_app_data(ctx, c); /* handshake_done counts in c whichever identity served the session */
  return ctx;
}

/* Resumption, on by default (docs/tls.md): TLS 1.3 tickets and TLS 1.2 tickets (stateless, sealed with keys
 * OpenSSL makes with each SSL_CTX), and the server session cache for TLS 1.2 clients that send no ticket. Every
 * session is made and looked up through the context it started on, the default identity's (OpenSSL's
 * session_ctx), so all workers share one cache and one set of ticket keys. Each identity has its own session id
 * context: a session resumes only on the identity that made it, which the SNI switch keeps (SSL_set_SSL_CTX
 * takes the new identity's context along). A session id context is also what OpenSSL asks for before it resumes
 * a session whose client was verified. */
static void sessions_setup(cb__tls_ctx_t *c) {
  for (int i = 0; i < CB__CERT_COUNT; i++) {
    unsigned char sid[8] = {'c', 'b', 'e', 'n', 'c', 'h', ':', (unsigned char)('a' + i)};
    SSL_CTX_set_session_id_context(c->ctx[i], sid, sizeof sid);
    /* A client that closes without close_notify ends its connection as one that sent it (read() reads the
     * end of the stream either way, failed() above): not a fatal error, which would drop its session from the
     * cache (tls_close keeps it then). HTTP's own framing tells a cut request. */
    SSL_CTX_set_options(c->ctx[i], SSL_OP_IGNORE_UNEXPECTED_EOF);
  }
  SSL_CTX_set_session_cache_mode(c->ctx[CB__CERT_DEFAULT], SSL_SESS_CACHE_SERVER);
  SSL_CTX_sess_set_cache_size(c->ctx[CB__CERT_DEFAULT], SESSION_CACHE_SIZE);
}

int cb__tls_ctx_client_auth(cb__tls_ctx_t *c, const cb__certs_t *certs, int mode) {
  if (mode == CB_TLS_CLIENT_AUTH_NONE) return 0;
  X509 *ca = cb__certs_ca(certs, CB__CA_CLIENT);
  if (ca == NULL) return UV_EINVAL;
  int verify = SSL_VERIFY_PEER | (mode == CB_TLS_CLIENT_AUTH_REQUIRE ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0);
  /* Every identity verifies the same way: the SNI switch moves a session to another identity's store, and the
   * verify mode is the session's own (taken from the default identity). */
  for (int i = 0; i < CB__CERT_COUNT; i++) {
    SSL_CTX *ctx = c->ctx[i];
    SSL_CTX_set_verify(ctx, verify, NULL);
    /* The CertificateRequest names the client CA, so that a client holding several certificates sends its. */
    if (X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca) != 1 || SSL_CTX_add_client_CA(ctx, ca) != 1) {
      ERR_clear_error();
      return UV_ENOMEM;
    }
  }
  return 0;
}

void cb__tls_ctx_handshakes(const cb__tls_ctx_t *c, uint64_t *full, uint64_t *resumed) {
  *full = c != NULL ? __atomic_load_n(&c->handshakes_full, __ATOMIC_RELAXED) : 0;
  *resumed = c != NULL ? __atomic_load_n(&c->handshakes_resumed, __ATOMIC_RELAXED) : 0;
}

int cb__tls_ctx_new(const cb__certs_t *certs, int enable_h2, int enable_h1, cb__tls_ctx_t **out) {
  pthread_once(&info_once, make_info_index);
  pthread_once(&budget_once, make_budget_slot);
  if (budget_slot < 0) return UV_ENOMEM;
  pthread_once(&peer_once, peer_index_new);
  cb__tls_ctx_t *c = calloc(1, sizeof *c);
  if (c == NULL) return UV_ENOMEM;
  if (enable_h2) {
    memcpy(c->alpn + c->alpn_len, "\x02h2", 3);
    c->alpn_len += 3;
  }
  if (enable_h1) {
    memcpy(c->alpn + c->alpn_len, "\x08http/1.1", 9);
    c->alpn_len += 9;
  }
  for (int i = 0; i < CB__CERT_COUNT; i++) {
    const cb__cert_ident_t *id = cb__certs_ident(certs, i);
    if (id == NULL || (c->ctx[i] = make_ctx(c, id)) == NULL) {
      ERR_clear_error();
      cb__tls_ctx_free(c);
      return UV_ENOMEM;
    }
  }
  sessions_setup(c);
  SSL_CTX_set_tlsext_servername_callback(c->ctx[CB__CERT_DEFAULT], select_identity);
  SSL_CTX_set_tlsext_servername_arg(c->ctx[CB__CERT_DEFAULT], c);
  *out = c;
  return 0;
}

void cb__tls_ctx_ktls(cb__tls_ctx_t *c) { c->ktls = 1; }

void cb__tls_ctx_free(cb__tls_ctx_t *c) {
  if (c == NULL) return;
  for (int i = 0; i < CB__CERT_COUNT; i++) SSL_CTX_free(c->ctx[i]);
  free(c);
}
