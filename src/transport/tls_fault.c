/* The TLS faults (issue 24, docs/faults.md, docs/tls.md): a server whose TLS misbehaves on purpose.
 *
 * Handshake faults are chosen by the SNI name the client sends, as the bad certificates are (base/certs.c): the
 * servername callback (transport/tls.c, select_identity) hands a fault's name to cb__tls_fault_hello(), which
 * sets the session up before OpenSSL writes a byte of its answer:
 *   - tls-stall.localhost: the session's write BIO becomes a null BIO, so the answer to the ClientHello never
 *     reaches the wire; the handshake then waits for a client that waits too, until the header timeout (which
 *     bounds every handshake) closes the connection.
 *   - tls-reset.localhost: the same, and the read that processed the ClientHello ends the connection with a
 *     reset (SO_LINGER 0): RST in the middle of the handshake.
 *   - alpn-none.localhost: the callback fails with the no_application_protocol alert, whatever the client offers
 *     (no ALPN at all included), which is what RFC 7301 3.2 has a server send when no protocol is in common.
 *   - tls-slow.localhost: the write BIO becomes a memory BIO that holds the server's first flight, and a timer on
 *     the worker's loop writes it to the socket in CB__TLS_SLOW_PIECES pieces, one every CB__TLS_SLOW_MS: a
 *     bounded number of wake-ups, and the worker never waits. Once the handshake is done, what the session
 *     wrote last (TLS 1.3's tickets, TLS 1.2's last flight) goes at once, and the socket is the write BIO again,
 *     so the answer itself is not paced. The default leaf names tls-slow.localhost, so the handshake succeeds.
 *
 * After-handshake faults are route fault kinds (kinds/fault.c asks for them through cb__tport_ops_t.fault): the
 * answer's head and bytes are written as usual, and the connection's shutdown, once they have left, ends it
 * without close_notify: tls_bad_record writes a record that cannot be decrypted (an application_data record
 * whose authentication tag is garbage) and then the FIN; tls_truncate the FIN alone.
 *
 * A session's fault lives in its SSL's ex_data, so that sessions without one pay nothing but a lookup per
 * handshake step; the state is freed with the session (cb__tls_fault_close), a pacing timer through uv_close. */
#include <errno.h>
#include <openssl/err.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tls_batch.h"
#include "transport/tls_fault.h"

typedef struct {
  uv_timer_t timer; /* tls-slow: the pacing; first member so the close callback frees the whole state */
  int kind;         /* CB__TLS_FAULT_*, or NONE for a session with an after-handshake fault only */
  int after;        /* CB__FAULT_TLS_BAD_RECORD, CB__FAULT_TLS_TRUNCATE, or 0 */
  int fd;
  BIO *held;        /* tls-slow: the session's write BIO while paced (the session owns it); NULL after */
  size_t piece;     /* tls-slow: bytes per wake-up */
  uint8_t timer_on; /* the timer was initialised: it is closed, and the state freed in its close callback */
} fault_state_t;

static const char *const names[CB__TLS_FAULT_COUNT] = {
    [CB__TLS_FAULT_STALL] = "tls-stall.localhost",
    [CB__TLS_FAULT_RESET] = "tls-reset.localhost",
    [CB__TLS_FAULT_ALPN_NONE] = "alpn-none.localhost",
    [CB__TLS_FAULT_SLOW] = "tls-slow.localhost",
};

int cb__tls_fault_find(const char *sni, size_t len) {
  for (int k = 1; k < CB__TLS_FAULT_COUNT; k++)
    if (sni != NULL && strlen(names[k]) == len && strncasecmp(sni, names[k], len) == 0) return k;
  return CB__TLS_FAULT_NONE;
}

/* ---- the state, in the session's ex_data ---- */

static int ex_index = -1;
static pthread_once_t ex_once = PTHREAD_ONCE_INIT;

static void ex_init(void) { ex_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL); }

static fault_state_t *state_of(SSL *ssl) {
  pthread_once(&ex_once, ex_init);
  return ex_index < 0 ? NULL : SSL_get_ex_data(ssl, ex_index);
}

/* The session's state, made on first use. */
static fault_state_t *state_new(SSL *ssl) {
  fault_state_t *st = state_of(ssl);
  if (st != NULL || ex_index < 0) return st;
  st = calloc(1, sizeof *st);
  if (st == NULL) return NULL;
  st->fd = SSL_get_fd(ssl);
  if (SSL_set_ex_data(ssl, ex_index, st) != 1) {
    free(st);
    return NULL;
  }
  return st;
}

static void state_closed(uv_handle_t *h) { free(h); /* the timer is the state's first member */ }

void cb__tls_fault_close(cb__tport_t *t) {
  SSL *ssl = t->state;
  fault_state_t *st = ssl != NULL ? state_of(ssl) : NULL;
  if (st == NULL) return;
  SSL_set_ex_data(ssl, ex_index, NULL);
  st->held = NULL; /* freed with the session */
  if (st->timer_on)
    uv_close((uv_handle_t *)&st->timer, state_closed);
  else
    free(st);
}

/* ---- handshake faults ---- */

int cb__tls_fault_hello(SSL *ssl, int fault, int *alert) {
  if (fault == CB__TLS_FAULT_ALPN_NONE) {
    *alert = SSL_AD_NO_APPLICATION_PROTOCOL;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  fault_state_t *st = state_of(ssl);
  if (st != NULL && st->kind != CB__TLS_FAULT_NONE) return SSL_TLSEXT_ERR_OK; /* a second ClientHello (after a
                                                                               HelloRetryRequest): set up already */
  st = state_new(ssl);
  BIO *b = BIO_new(fault == CB__TLS_FAULT_SLOW ? BIO_s_mem() : BIO_s_null());
  if (st == NULL || b == NULL) {
    BIO_free(b);
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  st->kind = fault;
  if (fault == CB__TLS_FAULT_SLOW) st->held = b;
  /* The session writes its answer into b from here on: the socket BIO stays the read BIO. */
  SSL_set0_wbio(ssl, b);
  return SSL_TLSEXT_ERR_OK;
}

/* Drops the first n bytes of the held flight (they were sent). */
static void held_drop(BIO *held, size_t n) {
  char scratch[512];
  while (n > 0) {
    int k = BIO_read(held, scratch, (int)(n < sizeof scratch ? n : sizeof scratch));
    if (k <= 0) return;
    n -= (size_t)k;
  }
}

/* Sends up to max bytes of the held flight: 0, or -1 when the socket refuses (the peer has gone, or is so full
 * that a handshake cannot go on). */
static int held_send(fault_state_t *st, size_t max) {
  char *p;
  long n = BIO_get_mem_data(st->held, &p);
  if (n <= 0) return 0;
  size_t k = (size_t)n < max ? (size_t)n : max;
  ssize_t s;
  do s = send(st->fd, p, k, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (s < 0 && errno == EINTR);
  if (s < 0) return errno == EAGAIN ? 0 : -1;
  held_drop(st->held, (size_t)s);
  return 0;
}

static void pace_tick(uv_timer_t *h) {
  fault_state_t *st = (fault_state_t *)h;
  if (st->held == NULL) return;
  /* A socket that refuses ends the pacing: the connection's next read sees the error or the end. */
  if (held_send(st, st->piece) == 0 && BIO_pending(st->held) > 0) uv_timer_start(h, pace_tick, CB__TLS_SLOW_MS, 0);
}

/* tls-slow after a handshake step: pace what the session wrote, or, once it is done, send the rest at once and
 * give the session its socket back. */
static ssize_t slow_step(cb__tport_t *t, fault_state_t *st, int rc) {
  SSL *ssl = t->state;
  if (st->held == NULL) return 0;
  if (rc == 1) {
    if (st->timer_on) uv_timer_stop(&st->timer);
    /* A few hundred bytes (tickets, or TLS 1.2's last flight) into a socket that has taken the whole first
     * flight: a socket that cannot take them now ends the connection rather than reorder bytes. */
    if (held_send(st, SIZE_MAX) != 0 || BIO_pending(st->held) > 0) return UV_EPROTO;
    BIO *sock = BIO_new_socket(st->fd, BIO_NOCLOSE); /* the read BIO (tls_batch.c's reader) does not write */
    if (sock == NULL) return UV_ENOMEM;
    st->held = NULL;
    SSL_set0_wbio(ssl, sock); /* frees the memory BIO */
    return 0;
  }
  size_t pending = BIO_pending(st->held);
  if (pending == 0 || (st->timer_on && uv_is_active((uv_handle_t *)&st->timer))) return 0;
  st->piece = (pending + CB__TLS_SLOW_PIECES - 1) / CB__TLS_SLOW_PIECES;
  if (t->loop == NULL) { /* no loop to pace on (a test's transport): the flight at once */
    return held_send(st, SIZE_MAX) != 0 ? UV_EPROTO : 0;
  }
  if (!st->timer_on) {
    if (uv_timer_init(t->loop, &st->timer) != 0) return UV_ENOMEM;
    st->timer_on = 1;
  }
  pace_tick(&st->timer); /* the first piece at once */
  return 0;
}

ssize_t cb__tls_fault_handshake(cb__tport_t *t, int rc) {
  fault_state_t *st = state_of(t->state);
  if (st == NULL) return 0;
  switch (st->kind) {
    case CB__TLS_FAULT_RESET: {
      struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* the connection's close sends RST */
      setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      return UV_ECONNRESET;
    }
    case CB__TLS_FAULT_SLOW: return slow_step(t, st, rc);
    default: return 0; /* a stall waits as any handshake does: the header timeout ends it */
  }
}

/* ---- after-handshake faults ---- */

int cb__tls_fault_after(cb__tport_t *t, int kind) {
  if (t->state == NULL) return UV_EINVAL;
  fault_state_t *st = state_new(t->state);
  if (st == NULL) return UV_ENOMEM;
  st->after = kind;
  return 0;
}

int cb__tls_fault_shutdown(cb__tport_t *t) {
  fault_state_t *st = t->state != NULL ? state_of(t->state) : NULL;
  if (st == NULL || st->after == 0) return 0;
  (void)cb__tls_batch_push(SSL_get_wbio(t->state), 1); /* what the session wrote before goes first */
  if (st->after == CB__FAULT_TLS_BAD_RECORD) {
    /* An application_data record (TLS 1.3 and 1.2 alike on the wire) of 32 bytes that no key decrypts: the
     * client's AEAD (or MAC) check fails, and it answers with the bad_record_mac alert. 32 bytes: at least a
     * TLS 1.3 tag and content type, and a TLS 1.2 GCM nonce and tag, or a CBC IV and block. */
    unsigned char rec[5 + 32] = {0x17, 0x03, 0x03, 0x00, 32};
    for (int i = 0; i < 32; i++) rec[5 + i] = (unsigned char)(0xa5 ^ (i * 37));
    ssize_t s;
    do s = send(t->fd, rec, sizeof rec, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (s < 0 && errno == EINTR);
    /* A socket too full for 37 bytes leaves the client a truncation instead: nothing is waited for. */
  }
  shutdown(t->fd, SHUT_WR);
  return 1;
}
