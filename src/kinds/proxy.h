/* The proxy kind's parts (docs/proxy.md): proxy.c holds the options, the worker's pool, the exchange shared by
 * both upstream protocols (its answer to the client: head, body, trailers, a fault's gathered answer, the
 * recorder, 502/504) and the HTTP/1.1 upstream; proxy_h2.c the h2c upstream (its connections, streams and flow
 * control). What one offers the other is declared here. */
#ifndef CB_KINDS_PROXY_H
#define CB_KINDS_PROXY_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "client/client.h"
#include "kinds/kinds.h"

#define PROXY_MAX_HEAD (32 * 1024) /* an upstream answer's head (and trailers): over it, 502 */
#define PROXY_MAX_HEADERS 128      /* header fields of an upstream answer: over it, 502 */
#define PROXY_MAX_IDLE 1024        /* idle HTTP/1.1 connections kept per upstream and worker */
#define PROXY_MAX_H2 1024          /* h2c connections per upstream and worker */
#define PROXY_IDLE_MS 30000        /* an idle upstream connection is closed after this long */
#define PROXY_READ_BUF (64 * 1024)

/* A proxy stub's options, as cb__proxy_new made them: never changed after (every worker reads them). */
struct cb__proxy_s {
  cb_proxy_t opts;              /* a deep copy: the recorder reads it (cb__exchange_t.opts) */
  char *to;                     /* opts.to's bytes */
  const char *authority;        /* HOST[:PORT] as in `to`: the forwarded host header */
  size_t authority_len;
  const char *prefix;           /* the path prefix ("" when none) */
  size_t prefix_len;
  struct sockaddr_storage addr; /* the upstream, resolved when the stub was added */
  socklen_t addr_len;
  unsigned timeout_ms;
  uint64_t max_body;
  unsigned pipeline;            /* requests in flight on one upstream connection: 1 (opts.pipeline 0 or 1) or more */
  unsigned delay_ms;            /* the stub's: waits before forwarding */
  const cb__fault_t *fault;     /* the stub's fault (NULL: none), applied to the proxied answer */
  uint64_t draws;               /* atomic: the fault's rate draws */
  cb_str_t *rec_headers;        /* opts.record_headers' copies */
  int *rec_status;
  char *rec_bytes;
  /* https:// upstreams: the TLS context (built when the stub is added, so that a CA that does not load is the
   * stub's error; freed with the stub, or with the last connection made on it: OpenSSL counts its users), the
   * name sent as SNI and verified, and what keys the pool beside the address (tls_key: the verification
   * settings). */
  int tls;
  struct ssl_ctx_st *ctx;
  char host[256];               /* the host of `to` (no brackets), or server_name */
  uint64_t tls_key;
  char *tls_bytes;              /* the copies of ca_file, ca_pem and server_name (opts points into them) */
};

typedef struct upc_s upc_t;
typedef struct px_s px_t;
typedef struct upstream_s upstream_t;
typedef struct h2c_s h2c_t;   /* proxy_h2.c: one h2c upstream connection */
typedef struct h2x_s h2x_t;   /* proxy_h2.c: an exchange's stream on one */

struct upstream_s {
  upstream_t *next;
  struct sockaddr_storage addr;
  socklen_t addr_len;
  int tls;
  uint64_t tls_key;             /* the verification settings (cb__proxy_t.tls_key) */
  struct ssl_session_st *sess;  /* https: the last TLS session the upstream gave, offered by new connections */
  upc_t *idle; /* most recently used first */
  int nidle;
  h2c_t *h2;   /* its h2c connections, newest first */
  int nh2;
  uint32_t h2_max; /* the stream limit its last SETTINGS said (0: none yet): assumed for a new connection */
  upc_t *pipe;     /* the pipelining connection new pipelined requests join while it has room (NULL: none) */
};

typedef struct {
  cb__worker_t *w;
  upstream_t *ups;
  upc_t *all;   /* every open HTTP/1.1 upstream connection of the worker */
  h2c_t *h2_due; /* h2c connections whose frames go at the end of the turn (proxy_h2.c, h2c_flush_soon) */
  upc_t *pipe_due; /* pipelining connections whose requests go at the end of the turn (proxy.c, pipe_send) */
  int closed;   /* the worker is stopping: no new connection */
  px_t *spare; /* freed exchanges kept for the next requests (a calloc and a free per request otherwise) */
  int nspare;
  /* The h2c upstream sessions' small-block cache (proto/h2_mem.c, as a server session's): nghttp2's blocks for a
   * stream cost a pointer pop and push, not malloc and free. Made with the first session, freed by the trim or
   * the pool's end once no session is left (its slots hold live sessions' blocks). */
  cb__h2_small_t *h2_small;
  int h2_sessions; /* sessions alive on it */
  /* Released h2c exchanges' streams (proxy_h2.c, h2x_t) kept with their timers for the next ones: a calloc, a
   * timer's init, stop and close, and a free per request otherwise. Released ones wait a turn in h2x_limbo (a
   * session may still be inside the callback that released one); turn_end makes them spares. */
  h2x_t *h2x_limbo, *h2x_spare;
  int nh2x_spare;
  /* The last client address written as x-forwarded-for, as text: a worker's clients often share one. */
  uint8_t peer_family;
  uint8_t peer_addr[16];
  uint8_t peer_len;
  char peer_text[INET6_ADDRSTRLEN];
  char rbuf[PROXY_READ_BUF]; /* one read buffer for every upstream connection of the worker */
  char ptbuf[PROXY_READ_BUF]; /* https: the plaintext of a read */
} pool_t;

enum { PX_WAIT, PX_SENT, PX_HEAD, PX_ENDED };

struct px_s {
  cb__req_t *r;
  const cb__proxy_t *p;
  upc_t *c;            /* HTTP/1.1: the connection carrying it */
  h2x_t *h2;           /* h2c: its stream */
  uint8_t state;       /* PX_* */
  uint8_t got_head;    /* the answer's head arrived */
  uint8_t head_sent;   /* the request head went to the upstream */
  uint8_t chunked;     /* the request body goes chunked */
  uint8_t req_ended;   /* the client's request is complete */
  uint8_t reused;      /* the connection came from the pool */
  uint8_t gather;      /* the answer is gathered whole: a fault is applied to it */
  uint8_t record;      /* the answer is also gathered for the recorder */
  uint8_t retried;
  uint8_t blocked;     /* reading stopped: the client's output is full */
  uint8_t body_streamed; /* request body bytes went to the upstream (a failed reused connection cannot retry) */
  uint8_t cutting;     /* px_fail is writing what came of a cut answer: a release then leaves x to it (px_free) */
  uint8_t released;    /* the request was released during that write: px_fail lets x go, touches r no more */
  /* Pipelining (docs/proxy.md, "Pipelining"): x waits on its connection's queue behind qnext's predecessors. A
   * ghost is an exchange whose request was released while queued: it stays in the queue, without r or p, so
   * that its answer is read and dropped and the answers behind it still find theirs. An exchange is pipelined when
 * its connection is (upc_t.pipe). */
  uint8_t ghost;
  uint8_t wait_end;    /* the forward waits for the request's end: bodiless, it may be pipelined */
  uint8_t head_req;    /* a HEAD request: its answer has no body */
  px_t *qnext;
  /* The held request body (delay_ms: the forward begins after the delay; h2c: bytes the stream has not taken
   * yet, from hold_off), from the echo budget. */
  char *hold;
  size_t hold_len, hold_cap, hold_off;
  /* The gathered answer: status, headers (names lowercased) and body. */
  int status;
  cb__hdr_t *hdrs;
  int nhdrs;
  char *hbuf;
  char *body;
  size_t body_len, body_cap;
  int64_t head_len;          /* the length pass_head announced (a HEAD answer's declared one), for normal() */
  cb__fault_answer_t answer; /* a fault's departure point: the gathered answer */
  /* The answer's trailer fields (a chunked body's), passed on at its end: one block with their bytes. */
  cb__hdr_t *trs;
  int ntrs;
  char *detail;        /* a failed TLS handshake's reason, for the 502's body (NULL: none) */
  px_t *spare_next;    /* in pool_t.spare's list, once freed */
};

/* A proxied request's exchange: cb__req_t.stub, which a proxy stub does not use otherwise (no sequence). */
#define PX(r) ((px_t *)(uintptr_t)(r)->stub)

/* ---- proxy.c, for proxy_h2.c ---- */
const struct sockaddr *cb__proxy_addr(const cb__proxy_t *p);
pool_t *cb__px_pool(cb__worker_t *w);
upstream_t *cb__px_upstream(pool_t *pl, const cb__proxy_t *p);
/* A new exchange for r (on_head): NULL after answering 503 itself. */
px_t *cb__px_new(cb__req_t *r);
/* Appends request body bytes to x->hold (from the echo budget): 0, or UV_ENOMEM. */
int cb__px_hold(px_t *x, const char *p, size_t n);
/* The answer's head, fields as received (lowercased here): filtered, kept for a fault or the recorder, and
 * passed on unless gathered. len: the body's framing (CB__STREAMED, CB__NO_BODY or a length). 0, or a
 * CB__UPERR_* after px_fail answered. */
int cb__px_head(px_t *x, int status, const cb_chdr_t *h, int n, int64_t len);
/* Body bytes: gathered or passed on; returns 1 when the client's output went above its mark (x->blocked). -1
 * after px_fail answered. */
int cb__px_body(px_t *x, const char *p, size_t n);
void cb__px_trailers(px_t *x, const cb_chdr_t *t, int n);
/* The answer is complete / failed (a CB__UPERR_*): as for HTTP/1.1 (x->c is NULL for h2c). */
void cb__px_done(px_t *x);
void cb__px_fail(px_t *x, int why);
/* Frees what the exchange holds (on_free), but its stream. */
void cb__px_free(px_t *x);
/* The forwarded request's fields for HTTP/2, made on the caller's stack when they fit (the usual case), else in
 * blocks of their own: a malloc and a free each per request otherwise. */
#define CB__PX_STACK_FIELDS 64
typedef struct {
  cb_chdr_t *fields; /* stack_hs or a block of its own */
  char *block;       /* the names lowercased, the length's digits, the address: stack_block or a block */
  cb_chdr_t stack_hs[CB__PX_STACK_FIELDS];
  char stack_block[2048];
} cb__px_h2_fields_t;
/* The request's fields but connection-specific ones, host, expect and x-forwarded-*, then content-length when
 * known and the three x-forwarded-*, into f (f->fields). Returns the count, or UV_ENOMEM; after a count,
 * cb__px_h2_fields_free(f) lets go of what did not fit on the stack. */
int cb__px_h2_fields(px_t *x, cb__px_h2_fields_t *f);
void cb__px_h2_fields_free(cb__px_h2_fields_t *f);
/* The request's target after the stub's prefix, its length in *n: in stack when it fits in cap bytes, else in
 * a block of its own (to free when it is not stack). NULL when out of memory. */
char *cb__px_target(px_t *x, char *stack, size_t cap, size_t *n);

/* ---- proxy_h2.c ---- */
extern const cb__handler_t cb__h_proxy_h2;
/* The worker stops: every h2c connection of pl closes. */
void cb__proxy_h2_close_all(pool_t *pl);
/* The worker's last client connection closed: the spare streams go (their timers closed, then freed). */
void cb__proxy_h2_trim(pool_t *pl);
/* The end of the worker's turn (the pool's turn_end): the h2c connections asked for write what their sessions
 * hold, each in one write. */
void cb__proxy_h2_turn_end(pool_t *pl);

#endif
