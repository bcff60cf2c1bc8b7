/* client/: the client side, shared by the engine's proxy kind and by cbench-load. An HTTP/1.1 answer parser
 * (llhttp in response mode) and the request-head writer, with the hop-by-hop test a proxy needs; an h2c client
 * session (h2_client.c: its own framing, nghttp2's HPACK decoder) for the proxy's h2c upstreams; a TLS client
 * session over memory buffers (tls_client.c, on OpenSSL).
 *
 * The lowest layer: it includes nothing of the engine (only llhttp.h, nghttp2 in h2_client.c, OpenSSL in
 * tls_client.c, and libc), does no I/O and never allocates itself (the h2c session's blocks come from the
 * allocator its caller gives; OpenSSL's context and sessions allocate inside OpenSSL). The caller owns the parser (embedded in its connection), gives it a
 * buffer for the head at init, feeds it the bytes it reads and says when the peer closed. (docs/architecture.md:
 * the layers) */
#ifndef CB_CLIENT_H
#define CB_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "llhttp.h"

/* One header field as received: not terminated, names in their received case. */
typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} cb_chdr_t;

/* ---- h1_response.c: the answer parser ---- */

/* A final answer's head, given to on_head. */
typedef struct {
  int status;             /* 100..999 as received (101 is a final head; other 1xx never reach on_head) */
  int major, minor;       /* HTTP/major.minor */
  const cb_chdr_t *headers; /* valid during on_head only (they point into the caller's head buffer) */
  int nheaders;           /* 0 in count_only mode */
  int64_t content_length; /* -1: none */
  int chunked;            /* transfer-encoding: chunked */
  int keep_alive;         /* the connection may carry another request after this answer */
  int has_body;           /* 0: the answer ends with its head (HEAD, 1xx, 204, 304, content-length 0) */
} cb_cres_head_t;

/* What the parser tells its owner. Each returns 0 to go on, or a negative value: feeding stops at once and
 * cb_cres_feed returns that value; the parser must then be reset (cb_cres_reset) before it is fed again. Any
 * callback may be NULL (nothing to tell). */
typedef struct {
  /* The first byte of an answer's status line has come (empty lines before it do not count); not again for the
   * final head after a 1xx. For a client that must know an answer began (cbench-load: one nobody asked for). */
  int (*on_begin)(void *ud);
  /* A final head (status >= 200, or 101). 1xx interim answers (100 Continue, 103 Early Hints) are skipped. */
  int (*on_head)(void *ud, const cb_cres_head_t *h);
  /* Body bytes, de-chunked, in order; they point into the bytes being fed. */
  int (*on_body)(void *ud, const char *p, size_t n);
  /* The trailer fields of a chunked body, when it has any (never in count_only mode); before on_done. */
  int (*on_trailers)(void *ud, const cb_chdr_t *t, int n);
  /* The answer is complete. keep_alive: the connection may carry the next request (0 after `connection:
   * close`, an HTTP/1.0 answer without keep-alive, a body read until the close, a 101). */
  int (*on_done)(void *ud, int keep_alive);
} cb_cres_callbacks_t;

typedef struct {
  /* Bytes of one head: from the status line's first byte to the end of the empty line (empty lines before a
   * status line are skipped, not counted), each 1xx head counted alone. A chunked body's chunk-size lines
   * (with their extensions and line end) and its trailer section (after the last chunk's line, to the end of
   * the empty line) have each a budget of the same size. Over it: CB_CRES_E_HEAD_TOO_BIG.
   * 0: CB_CRES_MAX_HEAD_DEFAULT. */
  size_t max_head;
  /* De-chunked body bytes of one answer; over it: CB_CRES_E_BODY_TOO_BIG (a content-length above it before
   * on_head; otherwise on_body has had exactly max_body bytes). 0: no limit. */
  uint64_t max_body;
  /* Header fields of one head (and of one trailer section); over it: CB_CRES_E_HEAD_TOO_BIG. 0:
   * CB_CRES_MAX_HEADERS_DEFAULT. Not counted in count_only mode (max_head bounds them). */
  int max_headers;
  /* 1: fields are neither gathered nor counted (cbench-load): on_head gets nheaders 0 and the framing facts,
   * on_trailers is never called, and no head buffer is needed. */
  int count_only;
} cb_cres_limits_t;

#define CB_CRES_MAX_HEAD_DEFAULT 16384
#define CB_CRES_MAX_HEADERS_DEFAULT 100

/* The head buffer that always suffices (any alignment): the field entries, then the names' and values' bytes.
 * A smaller one works for smaller heads (the entries get at most half of it); a head whose fields do not fit
 * is CB_CRES_E_HEAD_TOO_BIG. */
#define CB_CRES_HEADBUF_SIZE(max_head, max_headers) \
  ((size_t)(max_headers) * sizeof(cb_chdr_t) + (size_t)(max_head) + sizeof(cb_chdr_t))

/* The parser's own errors (the callbacks' values are the caller's: keep them apart from these). */
enum {
  CB_CRES_E_BAD = -1001,          /* llhttp refused the bytes: not an HTTP/1.x answer */
  CB_CRES_E_HEAD_TOO_BIG = -1002, /* a head or trailer section over max_head bytes or max_headers fields */
  CB_CRES_E_BODY_TOO_BIG = -1003, /* a body over max_body */
  CB_CRES_E_TRUNCATED = -1004     /* the peer closed inside an answer */
};

/* The parser. Embed it (no allocation); its fields are private. */
typedef struct cb_cres_s {
  llhttp_t parser; /* first: llhttp's callbacks cast back */
  const cb_cres_callbacks_t *cb;
  void *ud;
  cb_cres_limits_t lim;
  cb_chdr_t *fields;  /* the entries, at the aligned start of the head buffer */
  int max_fields;     /* entries that fit */
  char *text;         /* names' and values' bytes, after the entries */
  size_t text_cap, text_len;
  int nfields;
  int name_open;      /* a name is being read (its bytes from name_off in text) */
  size_t name_off;
  int err;            /* a limit's error, set by a callback that stopped llhttp */
  int cb_ret;         /* a caller's callback's negative value */
  uint64_t body_bytes; /* of the current answer, counted when max_body is set */
  size_t head_bytes;  /* bytes of the current bounded section (head, chunk-size line, trailers) parsed so far */
  uint8_t phase;      /* private: where in an answer the parser is */
  uint8_t head_req;   /* the answers are to HEAD requests: no body (cb_cres_expect) */
  uint8_t final_seen; /* on_head was called for the current answer */
  uint8_t keep_alive; /* the current answer's head allows another request after it (2: ask llhttp) */
} cb_cres_t;

/* Sets the parser up for a new connection. cb is kept (static storage), lim is copied. headbuf/headcap: where
 * the fields of a head are gathered (CB_CRES_HEADBUF_SIZE; ignored and may be NULL in count_only mode); it must
 * outlive the parser. */
void cb_cres_init(cb_cres_t *p, const cb_cres_callbacks_t *cb, void *ud, const cb_cres_limits_t *lim,
                  char *headbuf, size_t headcap);
/* The same connection state as after init (a new connection), keeping callbacks, limits and buffer. */
void cb_cres_reset(cb_cres_t *p);
/* The answers from now on are (1) or are not (0) to HEAD requests: they have no body, whatever their headers
 * say. Stays set until the next call; call it before the answer's head is fed. */
void cb_cres_expect(cb_cres_t *p, int head_request);
/* Parses n bytes: the callbacks run from inside. Returns 0, a callback's negative value, or CB_CRES_E_*; after
 * anything but 0 the parser needs cb_cres_reset. Bytes after an answer that ends the connection (keep_alive 0)
 * are not parsed. Pipelined answers in one call are fine: each gets its events in order. */
int cb_cres_feed(cb_cres_t *p, const char *data, size_t n);
/* The peer closed. A body read until the close ends here (on_done with keep_alive 0): 0. Between answers
 * (nothing of an answer fed since the last on_done): 0. Inside an answer: CB_CRES_E_TRUNCATED. */
int cb_cres_eof(cb_cres_t *p);
/* 1 when nothing of an answer has been fed since the last on_done (or init/reset): a connection that can be
 * reused. */
int cb_cres_idle(const cb_cres_t *p);
/* A CB_CRES_E_* as text ("bad response", "response head too big", "response body too big", "response
 * truncated"), for an error answer's body; other values: "response error". */
const char *cb_cres_strerror(int e);

/* ---- h1_request.c: the request side ---- */

typedef struct {
  const char *method;
  size_t method_len;
  const char *target; /* path and query as received */
  size_t target_len;
  const char *host;   /* the upstream's authority, sent as the host header */
  size_t host_len;
  const cb_chdr_t *headers; /* already filtered by the caller (no host, no hop-by-hop, no framing) */
  int nheaders;
  int64_t content_length; /* >= 0: content-length; CB_CREQ_CHUNKED: transfer-encoding chunked; CB_CREQ_NO_BODY */
  /* 1: the caller vouches that every name is a token and no value holds CR, LF or NUL (fields a request parser
   * of the engine has checked already), and they are not checked again; the method, target and host still are. */
  int fields_checked;
} cb_creq_t;

#define CB_CREQ_CHUNKED (-1)
#define CB_CREQ_NO_BODY (-2)

/* Writes the request head ("METHOD target HTTP/1.1", host, the headers in order, the framing field, the empty
 * line) into buf. Returns its length; -1 when cap is too small; -2 when a method, target, host, name or value
 * holds CR, LF or NUL, a name is empty or holds ':' or a space, or the method or target is empty (nothing a
 * peer could read as a second request is ever written). */
ssize_t cb_creq_head(char *buf, size_t cap, const cb_creq_t *r);

/* 1 when the field `name` must not be forwarded (RFC 9110 7.6.1): connection, keep-alive, proxy-connection,
 * te, trailer, transfer-encoding, upgrade, and the names listed in connection_value (the message's connection
 * field, several joined with ','; NULL/0 when none). Names compare without case. */
int cb_chdr_hop_by_hop(const char *name, size_t len, const char *connection_value, size_t cv_len);

/* The field names a proxy treats apart, as cb_chdr_name tells them: the hop-by-hop ones first (from
 * CB_CHDR_CONNECTION to CB_CHDR_UPGRADE), then those it replaces or answers itself. */
enum {
  CB_CHDR_OTHER = 0,
  CB_CHDR_CONNECTION,
  CB_CHDR_KEEP_ALIVE,
  CB_CHDR_PROXY_CONNECTION,
  CB_CHDR_TE,
  CB_CHDR_TRAILER,
  CB_CHDR_TRANSFER_ENCODING,
  CB_CHDR_UPGRADE,
  CB_CHDR_HOST,
  CB_CHDR_EXPECT,
  CB_CHDR_CONTENT_LENGTH,
  CB_CHDR_DATE,
  CB_CHDR_X_FORWARDED_FOR,
  CB_CHDR_X_FORWARDED_PROTO,
  CB_CHDR_X_FORWARDED_HOST,
};
#define CB_CHDR_IS_HOP_BY_HOP(id) ((id) >= CB_CHDR_CONNECTION && (id) <= CB_CHDR_UPGRADE)

/* Which of the names above `name` is (without case), CB_CHDR_OTHER for any other: one look at the length, then
 * at most two comparisons, where testing each name in turn cost a proxied request hundreds of instructions. */
int cb_chdr_name(const char *name, size_t len);

/* 1 when connection_value (a connection field's list, as cb_chdr_hop_by_hop takes it) names `name`. */
int cb_chdr_listed(const char *name, size_t len, const char *connection_value, size_t cv_len);

/* RFC 9110 token characters (1 for each byte a field name may hold): the answer parser's, and the engine's
 * HTTP/1.1 request parser's (proto/http1.c), one table for both directions. */
extern const uint8_t cb_ctoken[256];

/* ---- tls_client.c: a TLS client session over memory buffers (OpenSSL) ---- */

struct ssl_ctx_st;     /* OpenSSL's SSL_CTX */
struct ssl_st;         /* SSL */
struct ssl_session_st; /* SSL_SESSION */

typedef struct {
  int version;                /* 0: TLS 1.2 and 1.3; 12 or 13: that one only */
  const char *ciphers;        /* OpenSSL's TLS 1.2 cipher list; NULL: its default */
  const char *tls13_ciphers;  /* TLS 1.3 suites; NULL: the default */
  const unsigned char *alpn;  /* the ALPN list in wire form ("\x08http/1.1"); NULL: none offered */
  size_t alpn_len;
  int insecure;               /* 1: the peer is not verified */
  const char *ca_file;        /* a PEM file of CA certificates (NUL-terminated) */
  int ca_strict;              /* 1: ca_file is read as PEM certificates here (a file that cannot be read and one
                               * with no certificate are told apart); 0: OpenSSL's load_verify_locations */
  const char *ca_pem;         /* PEM text of CA certificates; wins over ca_file. Neither: the system's CAs */
  size_t ca_pem_len;
  int resume;                 /* 1: each session the server gives goes to the session's keep slot */
} cb_ctls_opts_t;

enum {
  CB_CTLS_E_SETUP = -1201,         /* OpenSSL refused a setting, or no memory */
  CB_CTLS_E_CIPHERS = -1202,       /* a TLS 1.2 cipher list OpenSSL does not know */
  CB_CTLS_E_TLS13_CIPHERS = -1203, /* a TLS 1.3 suite list it does not know */
  CB_CTLS_E_CA = -1204,            /* the CAs: a file that cannot be read, no certificate in it or in the PEM */
  CB_CTLS_E_HANDSHAKE = -1205,     /* the handshake failed (cb_ctls_why says why) */
  CB_CTLS_E_PROTOCOL = -1206,      /* a record that does not decrypt, an alert, a failed write */
  CB_CTLS_EOF = -1207              /* cb_ctls_read: the peer's close_notify */
};

/* A context for many sessions (any thread may start one on it). 0 with *out set, or CB_CTLS_E_* with the reason
 * in why ("no certificate in it", "cannot be read", or OpenSSL's error string). */
int cb_ctls_ctx_new(const cb_ctls_opts_t *o, struct ssl_ctx_st **out, char *why, size_t whyn);
void cb_ctls_ctx_free(struct ssl_ctx_st *ctx);

/* One session (one connection). Embed it; its fields are private but hs_pending. */
typedef struct {
  struct ssl_st *ssl;
  struct ssl_session_st **keep; /* where the last session the server gave is kept (NULL: nowhere) */
  int hs_pending;               /* 1 until the handshake completes */
  int ssl_error;                /* a failed handshake's SSL_get_error */
  long verify;                  /* and its verification result */
  char reason[96];              /* and OpenSSL's reason, alone and as its whole error string */
  char reason_full[160];
} cb_ctls_t;

/* 1 when host is an IPv4 or IPv6 literal (no SNI for it; verified against the certificate's IP entries). */
int cb_ctls_is_ip(const char *host);
/* Begins a client session on ctx: SNI `name` unless it is an IP literal or empty; with verify, the certificate
 * checked against it. *keep (when keep and *keep) is offered for resumption, and each session the server gives
 * replaces it (with a context made with resume). 0 or CB_CTLS_E_SETUP (then cb_ctls_free it). Nothing goes out
 * until cb_ctls_handshake. */
int cb_ctls_start(cb_ctls_t *t, struct ssl_ctx_st *ctx, const char *name, int verify, struct ssl_session_st **keep);
/* A handshake step with what was put in: 1 complete (at once when it was), 0 wants more bytes, or
 * CB_CTLS_E_HANDSHAKE. What it has to send waits in cb_ctls_out either way. */
int cb_ctls_handshake(cb_ctls_t *t);
/* Why the handshake failed, as text: "certificate verify failed: <X.509 reason>", else OpenSSL's reason (full:
 * its whole error string; else the reason alone, "wrong version number"), else "connection closed". */
void cb_ctls_why(const cb_ctls_t *t, int full, char *out, size_t n);
/* Ciphertext that arrived: 0, or CB_CTLS_E_PROTOCOL. */
int cb_ctls_put(cb_ctls_t *t, const char *p, size_t n);
/* Plaintext of what was put in: bytes (> 0), 0 when a whole record is not in yet, CB_CTLS_EOF, or
 * CB_CTLS_E_PROTOCOL. Call until 0. It may leave bytes to send (a KeyUpdate's answer). */
ssize_t cb_ctls_read(cb_ctls_t *t, char *buf, size_t cap);
/* Encrypts n bytes of plaintext into records waiting in cb_ctls_out: 0 or CB_CTLS_E_PROTOCOL. */
int cb_ctls_write(cb_ctls_t *t, const char *p, size_t n);
/* The ciphertext waiting to be sent (its length; *p valid until the next call on t), and its release once the
 * caller has copied or sent it. */
size_t cb_ctls_out(cb_ctls_t *t, const char **p);
void cb_ctls_out_done(cb_ctls_t *t);
/* Queues close_notify in cb_ctls_out (nothing before the handshake completed). */
void cb_ctls_close_notify(cb_ctls_t *t);
/* After the handshake: whether it resumed a session, and its version, cipher and ALPN choice. */
int cb_ctls_resumed(const cb_ctls_t *t);
void cb_ctls_params(const cb_ctls_t *t, const char **version, const char **cipher, const char **alpn,
                    unsigned *alpn_len);
/* Frees the session (keeping it resumable: see tls_client.c); t may be started again. */
void cb_ctls_free(cb_ctls_t *t);
/* Frees a kept session (a keep slot), leaving NULL. */
void cb_ctls_session_free(struct ssl_session_st **s);
/* ---- h2_client.c: an h2c client session (prior knowledge, RFC 9113 3.3): its own framing, nghttp2's HPACK
 * decoder ---- */

/* What the session tells its owner about one stream (sud: what cb_ch2_submit was given). Each stream ends for
 * its owner with exactly one of on_end and on_close, or with the owner's own cb_ch2_cancel, or with a callback
 * that returned non-zero; nothing is told about it after that ("detached"). Any entry but read_body may be NULL. */
typedef struct {
  /* The final answer's head: status 200..999 as received (1xx heads are skipped; a 101, or three digits below
   * 100, end the stream with CB_CH2_E_BAD), the fields in their order (pseudo-headers left out; names lowercase,
   * as HTTP/2 sends them), valid during the call only. Non-zero: the owner is done with the stream (it is reset
   * with CANCEL). */
  int (*on_head)(void *sud, int status, const cb_chdr_t *h, int n);
  /* Answer body bytes. Each byte counts against the stream's and the connection's receive windows until the
   * owner gives it back with cb_ch2_consume (the owner's backpressure). Non-zero: done with the stream. */
  int (*on_data)(void *sud, const char *p, size_t n);
  /* The trailer fields (a HEADERS block after the body), before on_end. Non-zero: done with the stream. */
  int (*on_trailers)(void *sud, const cb_chdr_t *t, int n);
  /* The answer is complete (END_STREAM). A stream whose request had not ended is reset (NO_ERROR). */
  void (*on_end)(void *sud);
  /* The stream ended without a complete answer: CB_CH2_E_*. */
  void (*on_close)(void *sud, int err);
  /* Request body bytes for the stream, at most cap into buf: n > 0; 0 with *eof set at its end; 0 without: none
   * waiting now (the stream waits for cb_ch2_resume). */
  ssize_t (*read_body)(void *sud, char *buf, size_t cap, int *eof);
} cb_ch2_callbacks_t;

typedef struct {
  size_t max_head;      /* bytes of one header block's names and values; over it: CB_CH2_E_HEAD_TOO_BIG */
  int max_headers;      /* fields of one header block; over it: CB_CH2_E_HEAD_TOO_BIG */
  uint32_t conn_window; /* the connection's receive window (streams have HTTP/2's default 65,535 bytes each) */
} cb_ch2_limits_t;

enum {
  CB_CH2_E_BAD = -1101,          /* the peer broke the protocol (a connection error, or this stream's frames) */
  CB_CH2_E_RESET = -1102,        /* the peer reset the stream (RST_STREAM), or its GOAWAY ended it */
  CB_CH2_E_REFUSED = -1103,      /* the peer did not process the request (REFUSED_STREAM, above a GOAWAY's last
                                  * stream id): it may be sent again */
  CB_CH2_E_HEAD_TOO_BIG = -1104, /* a header block over max_head or max_headers */
  CB_CH2_E_NOMEM = -1105
};

/* The session. Embed it; its fields are private. */
typedef struct cb_ch2_s {
  struct cb_ch2_k *k; /* the framing's state (h2_client.c) */
  const cb_ch2_callbacks_t *cb;
  void *ud;      /* the connection's owner (on_unsent) */
  cb_ch2_limits_t lim;
  cb_chdr_t *fields; /* the header block being read, gathered in the caller's buffer as cb_cres_t does */
  int max_fields;
  char *text;
  size_t text_cap, text_len;
  int nfields;
  int status;        /* the block's :status (0..999), -1 when none */
  int nstreams;      /* streams submitted and not yet closed */
  uint32_t assumed;  /* the peer's stream limit until its SETTINGS come (cb_ch2_assume_max_streams) */
  uint8_t bad;       /* a connection error: the session is done */
  uint8_t goaway;    /* the peer sent GOAWAY: no new streams */
  uint8_t settings;  /* the peer's SETTINGS arrived */
} cb_ch2_t;

/* A request: pseudo-headers from these, then fields (names lowercase, without connection-specific ones: the
 * caller filters). has_body 0: the HEADERS frame ends the stream; 1: the body comes from read_body. */
typedef struct {
  const char *method;
  size_t method_len;
  const char *path;
  size_t path_len;
  const char *authority;
  size_t authority_len;
  const cb_chdr_t *headers;
  int nheaders;
  int has_body;
  int https; /* :scheme https (the connection is TLS), else http (RFC 9113 8.3.1: the target URI's scheme) */
} cb_ch2_req_t;

#define CB_CH2_MAX_REQ_FIELDS 256 /* fields of a submitted request */

/* Makes a client session and queues the connection preface and SETTINGS (push off). headbuf as for
 * cb_cres_init (CB_CRES_HEADBUF_SIZE(max_head, max_headers)), outliving the session. mem: the nghttp2_mem every
 * block of the session comes from, its HPACK decoder's included (the proxy's: a worker's small-block cache,
 * proto/h2_mem.c; cb__h2_mem_plain for malloc), outliving the session: the layer calls no allocator itself.
 * 0, or CB_CH2_E_NOMEM (mem NULL too). */
int cb_ch2_init(cb_ch2_t *c, const cb_ch2_callbacks_t *cb, void *ud, const cb_ch2_limits_t *lim, char *headbuf,
                size_t headcap, void *mem);
/* Frees the session (no callback runs). */
void cb_ch2_free(cb_ch2_t *c);
/* cb_ch2_feed and cb_ch2_pull run the callbacks, and neither may be called again from inside one (the
 * session is not reentrant): an owner that wants output taken while a callback runs takes it afterwards.
 * Bytes read from the peer: the callbacks run from inside. 0, or CB_CH2_E_BAD / CB_CH2_E_NOMEM: the
 * connection is done (what cb_ch2_pull still gives is its GOAWAY); its attached streams are not told. */
int cb_ch2_feed(cb_ch2_t *c, const char *p, size_t n);
/* The next bytes to write (*out valid until the next call into the session): n > 0, 0 when nothing is due, or
 * CB_CH2_E_BAD / CB_CH2_E_NOMEM. */
ssize_t cb_ch2_pull(cb_ch2_t *c, const char **out);
/* 1 when a new stream may be opened now: no GOAWAY either way, and fewer streams than the peer's
 * SETTINGS_MAX_CONCURRENT_STREAMS (until its SETTINGS came: 100, or what cb_ch2_assume_max_streams said). */
int cb_ch2_can_submit(const cb_ch2_t *c);
/* The peer's stream limit as the session knows it now (0 until its SETTINGS came). */
uint32_t cb_ch2_max_streams(const cb_ch2_t *c);
/* Until the peer's SETTINGS come, count on at most n streams (1..100): what another connection to the same
 * peer was told, so that a new connection is not given more streams than the peer will take. */
void cb_ch2_assume_max_streams(cb_ch2_t *c, uint32_t n);
/* Opens a stream. Its id, or CB_CH2_E_NOMEM (over CB_CH2_MAX_REQ_FIELDS fields, a GOAWAY either way, stream ids
 * used up, or out of memory). */
int32_t cb_ch2_submit(cb_ch2_t *c, const cb_ch2_req_t *q, void *sud);
/* Body bytes are waiting for a stream whose read_body said none. */
void cb_ch2_resume(cb_ch2_t *c, int32_t id);
/* The owner passed n bytes of the stream's body on: they go back into its windows (WINDOW_UPDATE when due). A
 * stream already over (id 0, or closed) gives them back to the connection's window only. */
void cb_ch2_consume(cb_ch2_t *c, int32_t id, size_t n);
/* The owner is done with the stream: reset (CANCEL) when still open, and detached. */
void cb_ch2_cancel(cb_ch2_t *c, int32_t id);
/* 1 when the session is done: a connection error, or a GOAWAY either way with no stream left. */
int cb_ch2_done(const cb_ch2_t *c);
/* For a stream its owner still holds (submitted, and neither ended, closed nor cancelled for it): 1 when its
 * HEADERS still wait in the session (cb_ch2_pull has handed out nothing of the request), so the peer cannot
 * have seen it. */
int cb_ch2_waiting(const cb_ch2_t *c, int32_t id);
/* A CB_CH2_E_* as text. */
const char *cb_ch2_strerror(int e);

/* HTTP/2 frame bytes (RFC 9113 4.1), for this layer's h2c session and the engine's server session: a 9-byte frame
 * header (the stream id's reserved bit clear), and 32-bit big-endian values. */
static inline void cb_h2_put_fh(char *o, size_t len, uint8_t type, uint8_t flags, int32_t id) {
  o[0] = (char)(len >> 16);
  o[1] = (char)(len >> 8);
  o[2] = (char)len;
  o[3] = (char)type;
  o[4] = (char)flags;
  o[5] = (char)((uint32_t)id >> 24 & 0x7f);
  o[6] = (char)(id >> 16);
  o[7] = (char)(id >> 8);
  o[8] = (char)id;
}

static inline void cb_h2_put32(char *o, uint32_t v) {
  o[0] = (char)(v >> 24);
  o[1] = (char)(v >> 16);
  o[2] = (char)(v >> 8);
  o[3] = (char)v;
}

static inline uint32_t cb_h2_get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* HTTP/2 fields (h2_fields.c), for this layer's h2c session and the engine's server session (proto/http2.c).
 * A name of lower-case tchars only; a value of field-vchars, spaces and tabs (RFC 9110 5.5: no control byte
 * but HTAB, no DEL) without white space at either end (RFC 9113 8.2.1). */
int cb_h2_valid_name(const uint8_t *p, size_t n);
int cb_h2_valid_value(const uint8_t *p, size_t n);
/* A connection-specific field (RFC 9113 8.2.2): connection, keep-alive, proxy-connection, transfer-encoding,
 * upgrade, or a te other than "trailers". */
int cb_h2_conn_specific(const uint8_t *name, size_t nl, const uint8_t *value, size_t vl);
/* A content-length of digits only: its value, or -1. */
int64_t cb_h2_parse_length(const uint8_t *p, size_t n);
/* HPACK (RFC 7541): an integer with an n-bit prefix after the bits `high`, and a field without indexing whose
 * name is static table entry `index` (0: a literal name). Each returns the end of what it wrote; a field takes
 * at most nl + vl + 16 bytes. */
char *cb_hp_int(char *o, uint8_t high, int bits, size_t v);
char *cb_hp_field(char *o, int index, const char *name, size_t nl, const char *value, size_t vl);

#endif
