/* transport/tls_fault.c's part in transport/tls.c: the TLS faults (docs/faults.md, docs/tls.md). Only the TLS
 * transport includes this header; it speaks OpenSSL's types. */
#ifndef CB_TLS_FAULT_H
#define CB_TLS_FAULT_H

#include <openssl/ssl.h>

#include "transport/transport.h"

/* The handshake faults, chosen by the SNI name a client sends. */
enum {
  CB__TLS_FAULT_NONE,
  CB__TLS_FAULT_STALL,     /* tls-stall.localhost: the ClientHello is read and never answered */
  CB__TLS_FAULT_RESET,     /* tls-reset.localhost: a reset (RST) once the ClientHello has been read */
  CB__TLS_FAULT_ALPN_NONE, /* alpn-none.localhost: the no_application_protocol alert, whatever the client offers */
  CB__TLS_FAULT_SLOW,      /* tls-slow.localhost: the server's first flight paced (CB__TLS_SLOW_PIECES pieces) */
  CB__TLS_FAULT_COUNT
};

/* tls-slow: the first flight goes in this many pieces, one every CB__TLS_SLOW_MS (the first at once). */
#define CB__TLS_SLOW_PIECES 10
#define CB__TLS_SLOW_MS 100

/* The handshake fault of an SNI name (ASCII, case-insensitive), CB__TLS_FAULT_NONE for any other. */
int cb__tls_fault_find(const char *sni, size_t len);
/* The servername callback's part, for a session whose SNI name is a fault's: sets the session up for it and
 * returns what the callback returns (SSL_TLSEXT_ERR_OK, or SSL_TLSEXT_ERR_ALERT_FATAL with *alert set). */
int cb__tls_fault_hello(SSL *ssl, int fault, int *alert);
/* After each handshake step (rc: what SSL_do_handshake returned): 0 when the read goes on as usual, else what
 * the read returns (a fault that ends the connection). Costs one lookup on sessions without a fault. */
ssize_t cb__tls_fault_handshake(cb__tport_t *t, int rc);
/* The shutdown of a session with an after-handshake fault: the fault's end instead of close_notify. Returns 1
 * when it did (the FIN is sent too), 0 for a session without one. */
int cb__tls_fault_shutdown(cb__tport_t *t);
/* The session is freed: the fault's state (and a pacing timer, closed) goes with it. */
void cb__tls_fault_close(cb__tport_t *t);
/* cb__tport_ops_t.fault of the TLS transport. */
int cb__tls_fault_after(cb__tport_t *t, int kind);

#endif
