/* transport/: the socket under a connection. A connection reads, writes, sends file ranges and shuts down
 * through its transport and never touches a socket itself; nothing above core/conn.c and core/outq.c calls
 * one of these. `plain` is a TCP socket; `sink` hands output to a function (socket-less test connections,
 * the fuzzers). A TLS transport is a third table of the same shape (docs/architecture.md, "A new transport").
 * Every operation runs on the worker's thread. Errors are negative UV_E* codes; UV_EAGAIN means "not now". */
#ifndef CB_TRANSPORT_H
#define CB_TRANSPORT_H

#include <sys/uio.h>
#include "base/base.h"

typedef struct cb__tport_s cb__tport_t;

typedef void (*cb__sink_fn_t)(void *arg, const char *data, size_t len);

typedef struct {
  /* Reads up to n bytes into buf: the count (> 0), 0 at the peer's end of stream, or a negative error
   * (UV_EAGAIN: nothing to read now). */
  ssize_t (*read)(cb__tport_t *t, char *buf, size_t n);
  /* Writes p[0..n) / the n pieces of iov, as far as they go: the count written (>= 0, short when the peer's
   * window is full), or a negative error (UV_EAGAIN: nothing could be written). */
  ssize_t (*write)(cb__tport_t *t, const char *p, size_t n);
  ssize_t (*writev)(cb__tport_t *t, const struct iovec *iov, int n);
  /* Sends bytes [off, off + n) of the file fd without copying them through the engine (sendfile(2)): the
   * count, or a negative error. NULL: the transport has to see the bytes (TLS without kernel TLS), and the
   * output queue reads the range and writes it (core/outq.c). */
  ssize_t (*sendfile)(cb__tport_t *t, int fd, uint64_t off, size_t n);
  /* Nothing more will be written: the peer reads the end of the stream after what was written. */
  void (*shutdown)(cb__tport_t *t);
  /* The connection ends: release the socket. reset: the peer gets a reset (RST) instead of an orderly end, and
   * what was not sent yet is dropped (a fault). */
  void (*close)(cb__tport_t *t, int reset);
  /* Optional: the transport's own faults (kinds/fault.c asks for them as it asks a protocol's faults table;
   * NULL: this transport cannot carry them, and such a fault is answered 501). kind is CB__FAULT_TLS_BAD_RECORD
   * or CB__FAULT_TLS_TRUNCATE: the connection ends with it when it shuts down, after what was written before
   * (transport/tls_fault.c). 0, or UV_ENOMEM. */
  int (*fault)(cb__tport_t *t, int kind);
  /* Optional: writes what the transport gathered during the event (TLS records, transport/tls_batch.c), as far
   * as the socket takes it; the connection calls it once its event's output is all handed over (core/conn.c).
   * Sets held when bytes still wait for the socket to be writable. 0, or a negative UV_E* error of the socket.
   * NULL: every write went to the socket at once. */
  int (*push)(cb__tport_t *t);
} cb__tport_ops_t;

/* The application protocol a transport negotiated (TLS's ALPN): detection follows it before the preface rule. */
enum { CB__ALPN_NONE, CB__ALPN_HTTP1, CB__ALPN_H2 };

/* A connection's transport: its table and what the table works on. */
struct cb__tport_s {
  const cb__tport_ops_t *ops;
  int fd;              /* the socket the loop polls; -1: none (sink) */
  uint8_t stalled;     /* sink: the peer takes nothing, like one that does not read (cb__testconn_stall) */
  uint8_t want_write;  /* tls: the last read stopped until the socket is writable (a handshake message): the
                          connection polls for writable and reads again then (core/conn.c) */
  uint8_t alpn;        /* CB__ALPN_*, once the transport knows it */
  uint8_t ready;       /* tls: the handshake is done */
  uint8_t buffered;    /* tls: the last read filled the buffer and OpenSSL holds more of what it read from the
                          socket, or OpenSSL met the end (a close_notify) or an error after the bytes it returned:
                          the connection reads again without waiting for the socket (core/conn.c) */
  uint8_t tls;         /* 1: the tls transport (the protocols name the connection h1_tls / h2_tls) */
  uint8_t held;        /* tls: the last push left bytes for the socket: the connection polls for writable */
  cb__sink_fn_t sink;  /* sink: where written bytes go (NULL: dropped) */
  void *sink_arg;
  void *state;         /* tls: the session (an OpenSSL SSL) */
  uv_loop_t *loop;     /* tls: the worker's loop, for the timer of a paced handshake (tls-slow.localhost); NULL: the
                          paced flight is sent at once */
};

/* plain.c: the TCP socket fd (non-blocking). */
cb__tport_t cb__tport_plain(int fd);
/* sink.c: no socket; written bytes go to sink(arg, ...). */
cb__tport_t cb__tport_sink(cb__sink_fn_t sink, void *arg);

/* tls.c: TLS 1.2 and 1.3 over the TCP socket fd, with OpenSSL, non-blocking on the worker's loop. A context is a
 * server's (certificate, key, chain, ALPN), shared by its workers; each connection gets a session of it. */
typedef struct cb__tls_ctx_s cb__tls_ctx_t;
/* A context serving certs' identities (base/certs.c: the default one, and each bad-certificate one for its SNI
 * name); ALPN offers h2 when enable_h2 and http/1.1 when enable_h1. certs may be freed after this call. 0 or
 * UV_ENOMEM. */
int cb__tls_ctx_new(const cb__certs_t *certs, int enable_h2, int enable_h1, cb__tls_ctx_t **out);
/* Asks OpenSSL to hand each session's records to the kernel after its handshake (SSL_OP_ENABLE_KTLS): only when
 * cb__ktls_probe() said the kernel offers it. Before any session of ctx is made. */
void cb__tls_ctx_ktls(cb__tls_ctx_t *ctx);
void cb__tls_ctx_free(cb__tls_ctx_t *ctx);
/* A worker's TLS handshakes in progress, bounded (cfg.tls_max_handshakes): a session counts from its accept
 * until its handshake completes or its connection closes, whichever comes first; one that closes first is a
 * failed handshake. One per worker, touched only by its thread. */
typedef struct {
  uint32_t pending; /* sessions whose handshake has not completed */
  uint32_t max;     /* pending may not go over it: cb__tport_tls() refuses the next session */
  uint64_t *failed; /* the worker's counter of handshakes that did not complete (cb_stats_t, read by other threads
                       with relaxed atomic loads) */
  uint64_t *ktls;   /* the worker's counter of sessions whose records went to the kernel (kTLS, ktls.c) */
} cb__tls_budget_t;

/* A transport over the accepted socket fd with a new session of ctx, counted in budget until its handshake
 * completes. 0, UV_EBUSY (budget->max handshakes are pending already: the caller closes fd and counts the
 * refusal) or UV_ENOMEM. */
int cb__tport_tls(int fd, cb__tls_ctx_t *ctx, cb__tls_budget_t *budget, cb__tport_t *out);

/* ktls.c: kernel TLS. After the handshake the session's record layer may go to the kernel (the `tls` upper-layer
 * protocol of Linux, SSL_OP_ENABLE_KTLS): the kernel then encrypts what the plain write, writev and sendfile(2)
 * system calls hand it, and the transport's table switches to those. Whether the server tries it is decided once,
 * at start: cb__ktls_probe(). */
/* Whether the kernel offers the tls ULP (listed in /proc/sys/net/ipv4/tcp_available_ulp, or in the file that
 * $CBENCH_KTLS_ULP_FILE names: the tests' way to play a kernel that has it or not): 1, or 0 with the reason in
 * why (why_size bytes, NUL-terminated; why may be NULL). CBENCH_KTLS=off forces 0. */
int cb__ktls_probe(char *why, size_t why_size);
/* After a completed handshake: when the context asked for kTLS and OpenSSL moved the session's sending side to the
 * kernel, t's table becomes the kTLS one (writes, writev and sendfile(2) as system calls; reads still through
 * OpenSSL, which reads the kernel's records and handles the ones that are not data). Returns whether it did. */
int cb__ktls_take(cb__tport_t *t);
/* The kTLS table's read, shutdown and close are the TLS ones (tls.c). */
ssize_t cb__tls_read(cb__tport_t *t, char *buf, size_t n);
void cb__tls_shutdown(cb__tport_t *t);
void cb__tls_close(cb__tport_t *t, int reset);

/* What a TLS connection's handshake settled, taken once when it ended (the journal reads it for each request
 * without asking OpenSSL again). Strings are NUL-terminated; version and cipher are OpenSSL's static names, sni
 * lives as long as the connection's transport. */
typedef struct cb__tls_info_s {
  const char *version; /* "TLSv1.3", "TLSv1.2" */
  const char *cipher;  /* "TLS_AES_128_GCM_SHA256" */
  const char *sni;     /* the server name the client sent; NULL: none */
  uint8_t alpn;        /* CB__ALPN_* */
  uint8_t resumed;     /* 1: a resumed session (no full handshake) */
  /* The client's certificate (cfg.tls_client_auth): its subject, RFC 2253 style, and SHA-256 fingerprint (64
   * lowercase hex digits), both NULL when the client sent none; they live as long as the connection's session. */
  const char *client_subject;
  const char *client_sha256;
} cb__tls_info_t;

/* The TLS session of t as its handshake ended: 0, or UV_EINVAL when t is not a TLS transport or its handshake
 * has not ended. */
int cb__tls_info(const cb__tport_t *t, cb__tls_info_t *out);

/* Client certificates (cfg.tls_client_auth, CB_TLS_CLIENT_AUTH_*): every identity of ctx asks for one (request)
 * or refuses a handshake without one (require), and verifies what is sent against certs' client CA. Called once,
 * before the first session. 0, UV_EINVAL (no client CA), UV_ENOMEM. */
int cb__tls_ctx_client_auth(cb__tls_ctx_t *ctx, const cb__certs_t *certs, int mode);
/* The handshakes ctx's sessions completed: with a new session (full) and by resuming one. Any thread. */
void cb__tls_ctx_handshakes(const cb__tls_ctx_t *ctx, uint64_t *full, uint64_t *resumed);

/* What a TLS connection's handshake said of its client certificate (cb__tls_info() copies it into its answer).
 * Both NULL when the client sent none. */
typedef struct {
  const char *client_subject; /* RFC 2253 style, "CN=alice" (cb__cert_identity) */
  const char *client_sha256;  /* SHA-256 of the certificate's DER, 64 lowercase hex digits */
} cb__tls_peer_t;
/* Fills out for t (a TLS transport whose handshake is done): 1 when the client sent a certificate, else 0 (also
 * for a transport that is not TLS). The strings live as long as the connection's session (until close). */
int cb__tls_peer(const cb__tport_t *t, cb__tls_peer_t *out);

#endif
