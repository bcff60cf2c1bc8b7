/* The proxy route kind: a stub whose response is `proxy` forwards the request to an upstream HTTP/1.1 server on
 * the worker's loop and streams its answer back (docs/proxy.md), in TLS for an https:// upstream (the client
 * layer's session over memory buffers, src/client/tls_client.c, between the socket and the parser).
 *
 * Three things live here:
 * - the options (cb__proxy_t): checked and copied when the stub is added, the upstream's name resolved then, and
 *   never changed after (every worker reads them);
 * - the per-worker pool (a worker part): for each upstream address, the kept-alive connections that are idle
 *   (at most PROXY_MAX_IDLE, the oldest closed first, each closed after PROXY_IDLE_MS), and the list of every
 *   open upstream connection, so that a stopping worker closes them all;
 * - the exchange (px_t, one per proxied request, pointed to by cb__req_t.stub): the request written to an
 *   upstream connection as it arrives, the answer parsed with the client layer's response parser and handed to
 *   the response API piece by piece. The upstream is read only while the client's output is below its
 *   high-water mark, so a fast upstream and a slow client hold at most one read buffer more than the client's
 *   own output queue.
 *
 * A connection goes back to the pool only after a complete answer with nothing after it; anything else (an
 * error, a client gone mid-answer, bytes after the answer) closes it. Memory per exchange is bounded: the
 * answer's head by PROXY_MAX_HEAD (the parser's limit), its body by the client's output (streaming) or by
 * max_body_bytes (an answer gathered whole: for a fault, or for the recorder). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "kinds/kinds.h"
#include "kinds/proxy.h"
#include "kinds/record.h"

#define PROXY_MAX_TO 1024
#define PROXY_MAX_RECORD_HEADERS 32
#define PROXY_MAX_RECORD_STATUS 64
/* The fields a forwarded request head adds: x-forwarded-for, -proto, -host, and host itself. */
#define PROXY_ADDED 3
#define PROXY_MAX_SERVER_NAME 253
/* The idempotent methods (RFC 9110 9.2.2): the only ones sent again after a kept connection closed. */
#define PROXY_IDEMPOTENT \
  (CB_METHOD_GET | CB_METHOD_HEAD | CB_METHOD_PUT | CB_METHOD_DELETE | CB_METHOD_OPTIONS | CB_METHOD_TRACE)

/* ---- the options ---- */


static int bad_to(cb_str_t to) { return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_BAD_URL, to.ptr, to.len); }

/* http://HOST[:PORT][/prefix] or https://...: HOST a name, an IPv4 literal or [IPv6]; resolved now (the add runs
 * on the API's thread, never on a worker). */
static int parse_to(cb__proxy_t *p, cb_str_t to) {
  static const char scheme[] = "http://", tls_scheme[] = "https://";
  if (to.ptr == NULL) return cb__bad_bytes(CB_FIELD_PROXY, -1, to.len ? CB_WHY_NULL_POINTER : CB_WHY_MISSING, NULL, 0);
  if (to.len == 0) return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_EMPTY, to.ptr, 0);
  if (to.len > PROXY_MAX_TO) return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_TOO_LONG, to.ptr, to.len);
  for (size_t i = 0; i < to.len; i++)
    if ((unsigned char)to.ptr[i] <= 0x20 || (unsigned char)to.ptr[i] >= 0x7f || to.ptr[i] == '?' || to.ptr[i] == '#')
      return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_BAD_CHAR, to.ptr, to.len);
  size_t slen = sizeof scheme - 1;
  if (to.len > sizeof tls_scheme - 1 && strncasecmp(to.ptr, tls_scheme, sizeof tls_scheme - 1) == 0) {
    p->tls = 1;
    slen = sizeof tls_scheme - 1;
  } else if (to.len <= sizeof scheme - 1 || strncasecmp(to.ptr, scheme, sizeof scheme - 1) != 0) {
    return bad_to(to);
  }
  if ((p->to = malloc(to.len + 1)) == NULL) return UV_ENOMEM;
  memcpy(p->to, to.ptr, to.len);
  p->to[to.len] = '\0';
  const char *a = p->to + slen, *end = p->to + to.len;
  const char *slash = memchr(a, '/', (size_t)(end - a));
  const char *aend = slash ? slash : end;
  p->authority = a;
  p->authority_len = (size_t)(aend - a);
  p->prefix = slash ? slash : "";
  p->prefix_len = slash ? (size_t)(end - slash) : 0;
  if (p->prefix_len == 1) p->prefix_len = 0; /* "http://h:1/": no prefix */
  if (p->prefix_len > 0 && p->prefix[p->prefix_len - 1] == '/') p->prefix_len--; /* "/base/" is "/base" */
  char host[256], port[8];
  snprintf(port, sizeof port, "%s", p->tls ? "443" : "80");
  const char *h = a, *hend;
  if (a < aend && *a == '[') {
    hend = memchr(a, ']', (size_t)(aend - a));
    if (hend == NULL) return bad_to(to);
    h = a + 1;
    const char *after = hend + 1;
    if (after < aend && *after != ':') return bad_to(to);
    if (after < aend) a = after; else a = aend;
  } else {
    hend = memchr(a, ':', (size_t)(aend - a));
    if (hend == NULL) hend = aend;
    a = hend;
  }
  if (hend == h || (size_t)(hend - h) >= sizeof host) return bad_to(to);
  memcpy(host, h, (size_t)(hend - h));
  host[hend - h] = '\0';
  if (a < aend) { /* ":PORT" */
    size_t n = (size_t)(aend - a - 1);
    if (n == 0 || n > 5) return bad_to(to);
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
      if (a[1 + i] < '0' || a[1 + i] > '9') return bad_to(to);
      v = v * 10 + (unsigned)(a[1 + i] - '0');
    }
    if (v == 0 || v > 65535) return bad_to(to);
    snprintf(port, sizeof port, "%u", v);
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL) return bad_to(to);
  memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
  p->addr_len = res->ai_addrlen;
  freeaddrinfo(res);
  memcpy(p->host, host, sizeof host);
  return 0;
}

/* FNV-1a over bytes, continuing from h: the pool's key of an https upstream's verification settings. */
static uint64_t fnv(uint64_t h, const void *b, size_t n) {
  const unsigned char *q = b;
  for (size_t i = 0; i < n; i++) h = (h ^ q[i]) * 1099511628211ull;
  return h;
}

/* An https upstream's options: checked, copied (the listing reads them back from opts) and made into the TLS
 * context. With http://, any of them is a conflict. */
static int tls_options(cb__proxy_t *p, const cb_proxy_t *o) {
  const cb_str_t *strs[3] = {&o->ca_file, &o->ca_pem, &o->server_name};
  for (int i = 0; i < 3; i++)
    if (strs[i]->ptr == NULL && strs[i]->len) return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_NULL_POINTER, (long long)strs[i]->len);
  if (o->insecure != 0 && o->insecure != 1) return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_OUT_OF_RANGE, o->insecure);
  if (!p->tls) {
    for (int i = 0; i < 3; i++)
      if (strs[i]->len) return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_CONFLICT, strs[i]->ptr, strs[i]->len);
    if (o->insecure) return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_CONFLICT, o->insecure);
    return 0;
  }
  if (o->ca_file.len && o->ca_pem.len) return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_CONFLICT, o->ca_file.ptr, o->ca_file.len);
  if (o->ca_file.len > 4096) return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_TOO_LONG, o->ca_file.ptr, o->ca_file.len);
  if (memchr(o->ca_file.ptr ? o->ca_file.ptr : "", '\0', o->ca_file.len))
    return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_BAD_CHAR, o->ca_file.ptr, o->ca_file.len);
  cb_str_t sn = o->server_name;
  if (sn.len > PROXY_MAX_SERVER_NAME) return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_TOO_LONG, sn.ptr, sn.len);
  for (size_t i = 0; i < sn.len; i++) {
    char ch = sn.ptr[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
          ch == '-' || ch == ':'))
      return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_BAD_CHAR, sn.ptr, sn.len);
  }
  size_t n = o->ca_file.len + o->ca_pem.len + sn.len + 3;
  if ((p->tls_bytes = malloc(n)) == NULL) return UV_ENOMEM;
  char *b = p->tls_bytes;
  cb_str_t *outs[3] = {&p->opts.ca_file, &p->opts.ca_pem, &p->opts.server_name};
  for (int i = 0; i < 3; i++) {
    if (strs[i]->len) memcpy(b, strs[i]->ptr, strs[i]->len);
    b[strs[i]->len] = '\0';
    *outs[i] = (cb_str_t){strs[i]->len ? b : NULL, strs[i]->len};
    b += strs[i]->len + 1;
  }
  if (sn.len) {
    memcpy(p->host, sn.ptr, sn.len);
    p->host[sn.len] = '\0';
  }
  /* ALPN offers the one protocol the stub speaks (h2 for protocol h2c, else http/1.1): the upstream must not
   * choose one this connection does not speak. */
  static const unsigned char alpn_h1[] = "\x08http/1.1", alpn_h2[] = "\x02h2";
  int h2 = o->protocol == CB_PROXY_H2C;
  cb_ctls_opts_t to = {.alpn = h2 ? alpn_h2 : alpn_h1, .alpn_len = h2 ? sizeof alpn_h2 - 1 : sizeof alpn_h1 - 1,
                       .insecure = o->insecure,
                       .ca_file = o->ca_file.len ? p->opts.ca_file.ptr : NULL, .ca_strict = 1,
                       .ca_pem = o->ca_pem.len ? p->opts.ca_pem.ptr : NULL, .ca_pem_len = o->ca_pem.len,
                       .resume = 1};
  char why[256];
  int err = cb_ctls_ctx_new(&to, &p->ctx, why, sizeof why);
  if (err == CB_CTLS_E_CA) {
    cb_str_t v = o->ca_pem.len ? o->ca_pem : o->ca_file;
    return cb__bad_bytes(CB_FIELD_PROXY, -1, CB_WHY_BAD_CA, v.ptr, v.len);
  }
  if (err) return UV_ENOMEM;
  /* Connections are shared only by stubs that verify alike: the same insecure, name and CAs. */
  uint64_t h = fnv(1469598103934665603ull, &o->insecure, sizeof o->insecure);
  h = fnv(h, p->host, strlen(p->host) + 1);
  h = fnv(h, o->ca_file.len ? "f" : o->ca_pem.len ? "p" : "s", 1);
  h = fnv(h, o->ca_file.ptr ? o->ca_file.ptr : "", o->ca_file.len);
  h = fnv(h, o->ca_pem.ptr ? o->ca_pem.ptr : "", o->ca_pem.len);
  p->tls_key = h;
  return 0;
}

static int copy_record(cb__proxy_t *p, const cb_proxy_t *o) {
  if (o->nrecord_headers > PROXY_MAX_RECORD_HEADERS)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_TOO_MANY, (long long)o->nrecord_headers);
  if (o->nrecord_status > PROXY_MAX_RECORD_STATUS)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_TOO_MANY, (long long)o->nrecord_status);
  if (o->nrecord_headers && o->record_headers == NULL)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_NULL_POINTER, (long long)o->nrecord_headers);
  if (o->nrecord_status && o->record_status == NULL)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_NULL_POINTER, (long long)o->nrecord_status);
  size_t bytes = 0;
  for (size_t i = 0; i < o->nrecord_headers; i++) {
    cb_str_t n = o->record_headers[i];
    int why = cb__header_name_why(n.ptr, n.len);
    if (why) return cb__bad_bytes(CB_FIELD_PROXY, (long)i, why, n.ptr, n.len);
    bytes += n.len + 1;
  }
  for (size_t i = 0; i < o->nrecord_status; i++)
    if (o->record_status[i] < 100 || o->record_status[i] > 599)
      return cb__bad_number(CB_FIELD_PROXY, (long)i, CB_WHY_OUT_OF_RANGE, o->record_status[i]);
  if (o->nrecord_headers) {
    p->rec_headers = calloc(o->nrecord_headers, sizeof *p->rec_headers);
    p->rec_bytes = malloc(bytes);
    if (p->rec_headers == NULL || p->rec_bytes == NULL) return UV_ENOMEM;
    char *b = p->rec_bytes;
    for (size_t i = 0; i < o->nrecord_headers; i++) { /* lowercased, as request header names are compared */
      cb_str_t n = o->record_headers[i];
      for (size_t k = 0; k < n.len; k++) b[k] = (char)(n.ptr[k] >= 'A' && n.ptr[k] <= 'Z' ? n.ptr[k] + 32 : n.ptr[k]);
      b[n.len] = '\0';
      p->rec_headers[i] = (cb_str_t){b, n.len};
      b += n.len + 1;
    }
  }
  if (o->nrecord_status) {
    if ((p->rec_status = malloc(o->nrecord_status * sizeof *p->rec_status)) == NULL) return UV_ENOMEM;
    memcpy(p->rec_status, o->record_status, o->nrecord_status * sizeof *p->rec_status);
  }
  p->opts.record_headers = p->rec_headers;
  p->opts.nrecord_headers = o->nrecord_headers;
  p->opts.record_status = p->rec_status;
  p->opts.nrecord_status = o->nrecord_status;
  return 0;
}

void cb__proxy_free(cb__proxy_t *p) {
  if (p == NULL) return;
  free(p->to);
  free(p->rec_headers);
  free(p->rec_status);
  free(p->rec_bytes);
  free(p->tls_bytes);
  cb_ctls_ctx_free(p->ctx);
  free(p);
}

int cb__proxy_check_to(cb_str_t to) {
  cb__proxy_t *p = calloc(1, sizeof *p);
  if (p == NULL) return UV_ENOMEM;
  int err = parse_to(p, to);
  cb__proxy_free(p);
  return err;
}

int cb__proxy_new(const cb_proxy_t *o, cb__proxy_t **out) {
  *out = NULL;
  if (o->protocol != CB_PROXY_HTTP1 && o->protocol != CB_PROXY_H2C)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_OUT_OF_RANGE, o->protocol);
  if (o->timeout_ms > CB_PROXY_MAX_TIMEOUT_MS)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_OUT_OF_RANGE, o->timeout_ms);
  if (o->record != 0 && o->record != 1) return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_OUT_OF_RANGE, o->record);
  if (o->pipeline > CB_PROXY_MAX_PIPELINE)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_OUT_OF_RANGE, o->pipeline);
  cb__proxy_t *p = calloc(1, sizeof *p);
  if (p == NULL) return UV_ENOMEM;
  p->opts = *o;
  int err = parse_to(p, o->to);
  if (err == 0) err = copy_record(p, o);
  if (err == 0) err = tls_options(p, o);
  if (err) {
    cb__proxy_free(p);
    return err;
  }
  p->opts.to = (cb_str_t){p->to, o->to.len};
  /* Pipelining is HTTP/1.1's: h2c multiplexes already, and an https:// upstream's records are not batched. */
  if (o->pipeline > 1 && (o->protocol == CB_PROXY_H2C || p->tls)) {
    cb__proxy_free(p);
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_CONFLICT, o->pipeline);
  }
  p->pipeline = o->pipeline > 1 ? o->pipeline : 1;
  p->timeout_ms = o->timeout_ms ? o->timeout_ms : CB_PROXY_DEFAULT_TIMEOUT_MS;
  p->max_body = o->max_body_bytes ? o->max_body_bytes : CB_PROXY_DEFAULT_MAX_BODY;
  p->opts.timeout_ms = p->timeout_ms;
  p->opts.max_body_bytes = p->max_body;
  *out = p;
  return 0;
}

const cb__handler_t *cb__proxy_handler(const cb__proxy_t *p) {
  return p->opts.protocol == CB_PROXY_H2C ? &cb__h_proxy_h2 : &cb__h_proxy;
}

void cb__proxy_answer_with(cb__proxy_t *p, unsigned delay_ms, const cb__fault_t *fault) {
  p->delay_ms = delay_ms;
  p->fault = fault != NULL && fault->kind != CB__FAULT_NONE ? fault : NULL;
}

/* ---- the pool (a worker part) ---- */


/* One upstream connection. Freed when both its handles have closed. */
struct upc_s {
  uv_tcp_t tcp;      /* first member: callbacks cast back */
  uv_timer_t timer;  /* fires at or before the deadline below (upc_time) */
  uint64_t deadline;          /* loop time: the connect and head timeout, a body pause's end, the idle end */
  uint64_t due;               /* loop time the timer fires at; 0 when it is not running */
  pool_t *pool;
  upstream_t *up;
  upc_t *prev, *next;         /* pool->all */
  upc_t *iprev, *inext;       /* up->idle while idle */
  px_t *px;                   /* the exchange it carries; NULL when idle */
  uv_connect_t connect;
  uint8_t connected;
  uint8_t idle;
  uint8_t closing;
  uint8_t reading;
  uint8_t done;               /* the answer ended (on_done) */
  uint8_t keep;               /* on_done said it may carry another request */
  uint8_t extra;              /* bytes of another answer followed it: the connection is not reused */
  uint8_t got_bytes;          /* bytes of this exchange's answer arrived */
  uint8_t pending;            /* handles still to close */
  uint8_t tmode;              /* what the deadline ends: UPC_T_NONE, UPC_T_EXCHANGE or UPC_T_IDLE */
  uint8_t tls;                /* https: the session below is in use */
  uint8_t tls_bad;            /* the session failed or the upstream closed it: no close_notify */
  cb_ctls_t ssl;
  char *pt;                   /* https: plaintext written before the handshake completed, sent after it */
  size_t pt_len, pt_cap;
  /* Pipelining (c->pipe): px is the exchange being answered, qtail the last one sent; inflight counts them. The
   * requests of one loop turn are gathered in ob and written at its end (pool_turn_end). */
  px_t *qtail;
  upc_t *dprev, *dnext;       /* pool->pipe_due while ob waits */
  char *ob;
  size_t ob_len, ob_cap;
  uint64_t max_body;          /* the answers' limit, that of the exchanges it carries */
  unsigned tmo_ms;            /* the exchange timeout of the one being answered (a ghost keeps the last one's) */
  uint16_t inflight;
  uint8_t pipe;
  uint8_t spent;              /* an answer said the connection ends after it: nobody joins, the rest go again */
  uint8_t in_due;             /* in pool->pipe_due */
  cb_cres_t parser;
  char head[CB_CRES_HEADBUF_SIZE(PROXY_MAX_HEAD, PROXY_MAX_HEADERS)];
};


static void pool_close_all(cb__worker_t *w, void *state);
/* At most this many freed exchanges are kept per worker; none under ASan, which then sees every exchange's
 * memory freed (a kept one would hide a use after its end). */
#if defined(__SANITIZE_ADDRESS__)
#define PX_SPARE_MAX 0
#else
#define PX_SPARE_MAX 64
#endif

static void free_spares(pool_t *pl) {
  while (pl->spare) {
    px_t *x = pl->spare;
    pl->spare = x->spare_next;
    free(x);
  }
  pl->nspare = 0;
}

/* The worker's last connection closed: the spare exchanges and streams go, and the h2c sessions' small blocks
 * when no session is left (the kept upstream connections stay). */
static int pool_trim(cb__worker_t *w, void *state) {
  (void)w;
  pool_t *pl = state;
  free_spares(pl);
  cb__proxy_h2_trim(pl);
  if (pl->h2_sessions == 0) {
    cb__h2_small_free(pl->h2_small);
    pl->h2_small = NULL;
  }
  return 0;
}

static void pool_free(cb__worker_t *w, void *state) {
  (void)w;
  pool_t *pl = state;
  free_spares(pl);
  cb__h2_small_free(pl->h2_small); /* after the loop: every session was freed with its connection */
  while (pl->ups) {
    upstream_t *u = pl->ups;
    pl->ups = u->next;
    cb_ctls_session_free(&u->sess);
    free(u);
  }
  free(pl);
}
/* The upstream connections outlive the worker's client connections on purpose: a client that opens a connection
 * per request still finds the upstream's kept alive. */
static void pipe_flush_all(pool_t *pl);
static void pool_turn_end(cb__worker_t *w, void *state) {
  (void)w;
  cb__proxy_h2_turn_end(state);
  pipe_flush_all(state);
}

static const cb__part_ops_t pool_ops = {.close = pool_close_all, .free = pool_free, .trim = pool_trim,
                                        .turn_end = pool_turn_end};

static pool_t *pool_of(cb__worker_t *w) {
  cb__part_t *part = &w->parts[CB__PART_PROXY];
  if (part->state == NULL) {
    pool_t *pl = calloc(1, sizeof *pl);
    if (pl == NULL) return NULL;
    pl->w = w;
    part->state = pl;
    part->ops = &pool_ops;
  }
  return part->state;
}

static upstream_t *upstream_of(pool_t *pl, const cb__proxy_t *p) {
  for (upstream_t *u = pl->ups; u; u = u->next)
    if (u->addr_len == p->addr_len && memcmp(&u->addr, &p->addr, p->addr_len) == 0 && u->tls == p->tls &&
        u->tls_key == p->tls_key)
      return u;
  upstream_t *u = calloc(1, sizeof *u);
  if (u == NULL) return NULL;
  memcpy(&u->addr, &p->addr, p->addr_len);
  u->addr_len = p->addr_len;
  u->tls = p->tls;
  u->tls_key = p->tls_key;
  u->next = pl->ups;
  pl->ups = u;
  return u;
}

static void idle_remove(upc_t *c) {
  if (!c->idle) return;
  if (c->iprev) c->iprev->inext = c->inext; else c->up->idle = c->inext;
  if (c->inext) c->inext->iprev = c->iprev;
  c->iprev = c->inext = NULL;
  c->idle = 0;
  c->up->nidle--;
}

static void upc_closed(uv_handle_t *h) {
  upc_t *c = h->data;
  if (--c->pending == 0) {
    if (c->tls) cb_ctls_free(&c->ssl);
    free(c->pt);
    free(c->ob);
    free(c);
  }
}

/* https: sends what the session has written (handshake messages, records, close_notify). */
static int tls_flush(upc_t *c);

static void pipe_unlist(upc_t *c);
static void pipe_requeue(pool_t *pl, px_t *list);

/* Closes an upstream connection: out of every list, its handles closed (it is freed once both are). A pipelining
 * one's queued exchanges go again on connections of their own (pipe_requeue). */
static void upc_close(upc_t *c) {
  if (c->closing) return;
  c->closing = 1;
  idle_remove(c);
  if (c->prev) c->prev->next = c->next; else c->pool->all = c->next;
  if (c->next) c->next->prev = c->prev;
  px_t *rest = NULL;
  if (__builtin_expect(c->pipe, 0)) {
    rest = c->px; /* the queue: sent again or failed below, once the connection is out of every list */
    pipe_unlist(c);
  } else if (c->px) {
    c->px->c = NULL; /* the exchange must not reach a connection that is about to be freed */
  }
  c->px = NULL;
  if (c->tls && !c->tls_bad && !c->ssl.hs_pending) {
    /* Best effort: close_notify goes if the socket takes it now (a write queued now would be cancelled by the
     * close). */
    cb_ctls_close_notify(&c->ssl);
    (void)tls_flush(c);
  }
  c->pending = 2;
  uv_close((uv_handle_t *)&c->tcp, upc_closed);
  uv_close((uv_handle_t *)&c->timer, upc_closed);
  if (rest) pipe_requeue(c->pool, rest);
}

static void pool_close_all(cb__worker_t *w, void *state) {
  (void)w;
  pool_t *pl = state;
  pl->closed = 1;
  cb__proxy_h2_close_all(pl);
  while (pl->all) upc_close(pl->all); /* an exchange still holding one sees px->c cleared below */
}

/* ---- the exchange ---- */

typedef struct {
  uv_write_t req;
  size_t n;
  char data[];
} wreq_t;

static void written(uv_write_t *req, int status) {
  (void)status; /* a failed write shows as an error or EOF on the read side, where it is answered */
  free(req);
}

/* uv_try_write's rule (nothing queued, the connect done) with a bare writev(2) (cb__sys3, base.h): glibc's wrapper
 * arms and disarms cancellation around each call. uv_buf_t is laid out as struct iovec on Unix. */
static int try_write(upc_t *c, const uv_buf_t *bufs, unsigned nbufs) {
  uv_stream_t *s = (uv_stream_t *)&c->tcp;
  uv_os_fd_t fd;
  if (!c->connected || uv_stream_get_write_queue_size(s) != 0 || uv_fileno((uv_handle_t *)s, &fd) != 0)
    return UV_EAGAIN;
  ssize_t n;
  do n = cb__sys3(SYS_writev, fd, (long)bufs, (long)nbufs);
  while (n == UV_EINTR);
  return (int)n;
}

/* Writes pieces to the upstream: at once (try_write) when nothing waits before them (the usual case: no
 * request object, no copy, and none of the epoll_ctl a completed uv_write costs in libuv's drain step), and
 * what the socket does not take now copied into one uv_write, which keeps the order behind earlier ones. */
static int raw_send(upc_t *c, const uv_buf_t *bufs, unsigned nbufs) {
  uv_stream_t *s = (uv_stream_t *)&c->tcp;
  size_t total = 0, done = 0;
  for (unsigned i = 0; i < nbufs; i++) total += bufs[i].len;
  int n = try_write(c, bufs, nbufs);
  if (n == (int)total) return 0;
  if (n > 0) done = (size_t)n;
  else if (n != UV_EAGAIN && n != UV_ENOSYS) return n;
  wreq_t *wr = malloc(sizeof *wr + (total - done));
  if (wr == NULL) return UV_ENOMEM;
  size_t at = 0, skip = done;
  for (unsigned i = 0; i < nbufs; i++) {
    size_t len = bufs[i].len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    memcpy(wr->data + at, bufs[i].base + skip, len - skip);
    at += len - skip;
    skip = 0;
  }
  wr->n = at;
  uv_buf_t buf = uv_buf_init(wr->data, (unsigned)wr->n);
  int err = uv_write(&wr->req, s, &buf, 1, written);
  if (err) free(wr);
  return err;
}

static int tls_flush(upc_t *c) {
  const char *p;
  size_t n = cb_ctls_out(&c->ssl, &p);
  if (n == 0) return 0;
  uv_buf_t buf = uv_buf_init((char *)p, (unsigned)n);
  int err = raw_send(c, &buf, 1);
  cb_ctls_out_done(&c->ssl);
  return err;
}

/* Makes room for need bytes in a block that doubles from first (the https plaintext kept for the handshake, a
 * gathered answer, a pipelining connection's requests of the turn). */
static int grow(char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : first;
  while (n < need) n *= 2;
  char *b = realloc(*buf, n);
  if (b == NULL) return UV_ENOMEM;
  *buf = b;
  *cap = n;
  return 0;
}

/* Writes request bytes to the upstream: as they are, or (https) encrypted, or kept until the handshake is done. */
static int pipe_send(upc_t *c, const uv_buf_t *bufs, unsigned nbufs);
static int up_send(px_t *x, const uv_buf_t *bufs, unsigned nbufs) {
  upc_t *c = x->c;
  if (__builtin_expect(c->pipe, 0)) return pipe_send(c, bufs, nbufs);
  if (!c->tls) return raw_send(c, bufs, nbufs);
  for (unsigned i = 0; i < nbufs; i++) {
    if (c->ssl.hs_pending) {
      if (grow(&c->pt, &c->pt_cap, c->pt_len + bufs[i].len, 4096) != 0) return UV_ENOMEM;
      memcpy(c->pt + c->pt_len, bufs[i].base, bufs[i].len);
      c->pt_len += bufs[i].len;
    } else if (cb_ctls_write(&c->ssl, bufs[i].base, bufs[i].len) != 0) {
      c->tls_bad = 1;
      return UV_EPROTO;
    }
  }
  return c->ssl.hs_pending ? 0 : tls_flush(c);
}

static int up_write(px_t *x, const char *a, size_t an, const char *b, size_t bn, const char *c3, size_t cn) {
  uv_buf_t bufs[3];
  unsigned n = 0;
  bufs[n++] = uv_buf_init((char *)a, (unsigned)an);
  if (bn) bufs[n++] = uv_buf_init((char *)b, (unsigned)bn);
  if (cn) bufs[n++] = uv_buf_init((char *)c3, (unsigned)cn);
  return up_send(x, bufs, n);
}

static void px_fail(px_t *x, int why);
static inline __attribute__((always_inline)) void px_spare(pool_t *pl, px_t *x);
static void start_forward(px_t *x);

/* The answer, once complete and gathered, for the recorder. */
static void record_answer(px_t *x) {
  cb__req_t *r = x->r;
  const cb__proxy_t *p = x->p;
  if (p->opts.nrecord_status) {
    size_t i;
    for (i = 0; i < p->opts.nrecord_status && p->opts.record_status[i] != x->status; i++) {}
    if (i == p->opts.nrecord_status) return;
  }
  cb__exchange_t ex = {.opts = &p->opts, .method = r->method_str, .method_len = r->method_len, .target = r->path,
                       .target_len = r->target_len, .req_headers = r->headers, .nreq_headers = r->nheaders,
                       .status = x->status, .res_headers = x->hdrs, .nres_headers = x->nhdrs, .body = x->body,
                       .body_len = x->body_len};
  cb__record_exchange(r->conn->w->srv, &ex);
}

static int gather_body(px_t *x, const char *p, size_t n) {
  if (grow(&x->body, &x->body_cap, x->body_len + n, 16384) != 0) return UV_ENOMEM;
  memcpy(x->body + x->body_len, p, n);
  x->body_len += n;
  return 0;
}

/* The gathered answer as a fault departs from it (cb__fault_answer_t): normal() sends it whole, body() paces it.
 * Copied, not referenced: x->body is freed with the request, which cb__res_end may release before the output
 * queued so far has left. */
static void gathered_normal(cb__req_t *r) {
  px_t *x = PX(r);
  int no_body = x->status == 204 || x->status == 304 || (x->status >= 100 && x->status < 200);
  /* A HEAD answer has no body to measure: it goes with the length the upstream declared, as unfaulted. */
  int64_t len = no_body ? CB__NO_BODY : r->method == CB_METHOD_HEAD ? x->head_len : (int64_t)x->body_len;
  cb__res_head(r, x->status, NULL, x->hdrs, x->nhdrs, len);
  if (!no_body && x->body_len && r->method != CB_METHOD_HEAD)
    cb__res_data(r, x->body, x->body_len, CB__DATA_COPY | CB__DATA_PIECE_END);
  cb__res_end(r);
}

static int gathered_body(cb__req_t *r, uint64_t from, uint64_t to) {
  return cb__res_data(r, PX(r)->body + from, (size_t)(to - from), CB__DATA_COPY | CB__DATA_PIECE_END);
}

/* Keeps the head's fields (for a fault's answer and the recorder): names lowercased, in one block. */
static int keep_head(px_t *x, const cb__hdr_t *hs, int n) {
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += hs[i].name_len + hs[i].value_len;
  x->hdrs = calloc((size_t)(n ? n : 1), sizeof *x->hdrs);
  x->hbuf = malloc(bytes ? bytes : 1);
  if (x->hdrs == NULL || x->hbuf == NULL) return UV_ENOMEM;
  char *o = x->hbuf;
  for (int i = 0; i < n; i++) {
    memcpy(o, hs[i].name, hs[i].name_len);
    x->hdrs[i].name = o;
    x->hdrs[i].name_len = hs[i].name_len;
    o += hs[i].name_len;
    memcpy(o, hs[i].value, hs[i].value_len);
    x->hdrs[i].value = o;
    x->hdrs[i].value_len = hs[i].value_len;
    o += hs[i].value_len;
  }
  x->nhdrs = n;
  return 0;
}

/* ---- the answer: the parser's callbacks ---- */

/* Stops a feed: the exchange is over (failed or given up), nothing more is to be read from this answer. */
#define STOP_FEED (-2000)

/* Inlined into the HTTP/1.1 path (its instruction count stays what it was before proxy_h2.c shared it). */
static inline __attribute__((always_inline)) int pass_head(px_t *x, int status, const cb_chdr_t *hf, int nf,
                                                           int64_t len);

static int on_head(void *ud, const cb_cres_head_t *h) {
  upc_t *c = ud;
  px_t *x = c->px;
  if (x == NULL) return STOP_FEED;
  if (c->done) { /* a second answer to one request */
    c->extra = 1;
    return STOP_FEED;
  }
  x->got_head = 1;
  if (h->status < 200) { /* 101: an upgrade the proxy does not carry */
    px_fail(x, CB__UPERR_BAD_RESPONSE);
    return STOP_FEED;
  }
  int no_body = h->status == 204 || h->status == 304;
  /* The declared length of a body that comes: a HEAD's (or a 304's) describes one that does not. */
  if (h->content_length > 0 && (uint64_t)h->content_length > x->p->max_body && !no_body &&
      x->r->method != CB_METHOD_HEAD) {
    px_fail(x, CB__UPERR_BODY_TOO_BIG);
    return STOP_FEED;
  }
  int64_t len = no_body ? CB__NO_BODY : (!h->chunked && h->content_length >= 0) ? h->content_length : CB__STREAMED;
  return pass_head(x, h->status, h->headers, h->nheaders, len) ? STOP_FEED : 0;
}

/* The answer's head goes on (or is kept, for a fault's gathered answer). The connection's own fields go (its
 * connection header's names among them), and those the engine writes itself: date and the framing. Names are
 * lowercased in place: the fields are in the caller's head buffer, which is the proxy's. */
static inline __attribute__((always_inline)) int pass_head(px_t *x, int status, const cb_chdr_t *hf, int nf,
                                                           int64_t len) {
  cb__req_t *r = x->r;
  /* Dropped: hop-by-hop fields (and, once the whole head is seen, those its connection field names), date and
   * the framing. Each name is classified once. */
  const char *conn_v = NULL;
  size_t conn_n = 0;
  cb__hdr_t hs[PROXY_MAX_HEADERS];
  int n = 0;
  for (int i = 0; i < nf && n < PROXY_MAX_HEADERS; i++) {
    const cb_chdr_t *f = &hf[i];
    int id = cb_chdr_name(f->name, f->name_len);
    if (id == CB_CHDR_CONNECTION && conn_v == NULL) {
      conn_v = f->value;
      conn_n = f->value_len; /* TODO(merge): several connection fields; the client layer may join them */
    }
    if (CB_CHDR_IS_HOP_BY_HOP(id) || id == CB_CHDR_DATE || id == CB_CHDR_CONTENT_LENGTH) continue;
    char *name = (char *)f->name;
    for (size_t k = 0; k < f->name_len; k++)
      if (name[k] >= 'A' && name[k] <= 'Z') name[k] = (char)(name[k] + 32);
    hs[n++] = (cb__hdr_t){f->name, f->name_len, f->value, f->value_len};
  }
  if (conn_v != NULL) { /* rare: a connection field that names others */
    int k = 0;
    for (int i = 0; i < n; i++)
      if (!cb_chdr_listed(hs[i].name, hs[i].name_len, conn_v, conn_n)) hs[k++] = hs[i];
    n = k;
  }
  x->status = status;
  r->up_status = (uint16_t)status;
  if (x->gather || x->record) {
    x->head_len = len;
    if (keep_head(x, hs, n) != 0) {
      px_fail(x, CB__UPERR_NO_MEMORY);
      return CB__UPERR_NO_MEMORY;
    }
  }
  if (x->gather) return 0; /* the answer goes once it is whole (on_done) */
  x->state = PX_HEAD;
  cb__res_head(r, status, NULL, hs, n, len);
  return 0;
}

int cb__px_head(px_t *x, int status, const cb_chdr_t *h, int n, int64_t len) {
  x->got_head = 1;
  return pass_head(x, status, h, n, len);
}

int cb__px_body(px_t *x, const char *p, size_t n) {
  if ((x->gather || x->record) && gather_body(x, p, n) != 0) {
    px_fail(x, CB__UPERR_NO_MEMORY);
    return -1;
  }
  if (x->gather) return 0;
  if (cb__res_data(x->r, p, n, CB__DATA_COPY) && !x->blocked) {
    x->blocked = 1;
    x->r->blocked = 1;
  }
  return x->blocked;
}

static int on_body(void *ud, const char *p, size_t n) {
  upc_t *c = ud;
  px_t *x = c->px;
  if (x == NULL) return STOP_FEED;
  if ((x->gather || x->record) && gather_body(x, p, n) != 0) {
    px_fail(x, CB__UPERR_NO_MEMORY);
    return STOP_FEED;
  }
  if (x->gather) return 0;
  if (cb__res_data(x->r, p, n, CB__DATA_COPY) && !x->blocked) {
    /* The client's output is above its mark: this read is passed on whole, then the upstream waits. */
    x->blocked = 1;
    x->r->blocked = 1;
  }
  return 0;
}

/* The trailer fields of a chunked answer, kept for its end (px_done): hop-by-hop ones and those a stub may not
 * give (the framing) left out. Kept in one block: the parser's fields live only during this call. */
static int on_trailers(void *ud, const cb_chdr_t *t, int n) {
  upc_t *c = ud;
  if (c->px != NULL) cb__px_trailers(c->px, t, n);
  return 0;
}

void cb__px_trailers(px_t *x, const cb_chdr_t *t, int n) {
  if (x->trs != NULL || n <= 0) return;
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += t[i].name_len + t[i].value_len;
  cb__hdr_t *trs = malloc((size_t)n * sizeof *trs + bytes);
  if (trs == NULL) return; /* without memory the trailers are dropped, the answer goes on */
  char *o = (char *)(trs + n);
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (cb_chdr_hop_by_hop(t[i].name, t[i].name_len, NULL, 0) || cb__forbidden_header(t[i].name, t[i].name_len))
      continue;
    memcpy(o, t[i].name, t[i].name_len);
    memcpy(o + t[i].name_len, t[i].value, t[i].value_len);
    trs[k++] = (cb__hdr_t){o, t[i].name_len, o + t[i].name_len, t[i].value_len};
    o += t[i].name_len + t[i].value_len;
  }
  x->trs = trs;
  x->ntrs = k;
}

/* The read callback decides what becomes of the connection once the feed returns: bytes after the answer are
 * still parsed (a second answer is refused in on_head), so that cb_cres_idle() then says whether the connection
 * ended clean. */
static int on_done(void *ud, int keep_alive) {
  upc_t *c = ud;
  if (c->done) {
    c->extra = 1;
    return STOP_FEED;
  }
  c->done = 1;
  c->keep = (uint8_t)keep_alive;
  return 0;
}

static const cb_cres_callbacks_t parser_cb = {
    .on_head = on_head, .on_body = on_body, .on_trailers = on_trailers, .on_done = on_done};

/* ---- the connection's life ---- */

/* The connection's one deadline. Each exchange used to stop and start the timer twice (the idle timeout off, the
 * exchange's on, then the reverse), a third of the proxy's own instructions per request in the timer heap. Now
 * a deadline that moves later only writes the time; the timer is started when none runs or when it would fire
 * too late, and on firing re-arms for what is left (as core/conn.c's connection timer). */
enum { UPC_T_NONE, UPC_T_EXCHANGE, UPC_T_IDLE };

static void up_timer_fired(uv_timer_t *t);

static void upc_time(upc_t *c, int mode, uint64_t ms) {
  uint64_t now = uv_now(c->timer.loop);
  c->tmode = (uint8_t)mode;
  c->deadline = now + ms;
  if (c->due == 0 || c->due > c->deadline) {
    uv_timer_start(&c->timer, up_timer_fired, ms, 0);
    c->due = c->deadline;
  }
}

/* Nothing is timed (an idle connection being taken, a client that does not read): the timer, if it runs, fires
 * and does nothing. */
static void upc_untime(upc_t *c) { c->tmode = UPC_T_NONE; }

static void start_reading(upc_t *c);

/* The answer ended with nothing after it: the connection goes back to its upstream's idle list (the oldest
 * beyond PROXY_MAX_IDLE closed). */
static void upc_park(upc_t *c) {
  upstream_t *u = c->up;
  c->px = NULL;
  c->done = 0;
  c->idle = 1;
  start_reading(c); /* an idle connection is read: the upstream's close (or stray bytes) end it */
  c->iprev = NULL;
  c->inext = u->idle;
  if (u->idle) u->idle->iprev = c;
  u->idle = c;
  u->nidle++;
  if (u->nidle > PROXY_MAX_IDLE) {
    upc_t *last = u->idle;
    while (last->inext) last = last->inext;
    upc_close(last);
  }
  upc_time(c, UPC_T_IDLE, PROXY_IDLE_MS);
}

/* The exchange lets go of its connection: kept when the answer ended cleanly, closed otherwise. */
static void pipe_detach(px_t *x);
static void px_detach(px_t *x, int keep) {
  upc_t *c = x->c;
  if (c == NULL) return;
  if (__builtin_expect(c->pipe, 0)) {
    pipe_detach(x);
    return;
  }
  x->c = NULL;
  c->px = NULL;
  upc_untime(c);
  if (keep && !c->pool->closed) upc_park(c); else upc_close(c);
}

/* The answer is complete, its connection let go: passed on whole (a fault's) or ended. */
static inline __attribute__((always_inline)) void px_finish(px_t *x) {
  cb__req_t *r = x->r;
  cb__conn_t *conn = r->conn;
  x->state = PX_ENDED;
  if (x->record) record_answer(x);
  if (x->gather) {
    x->answer = (cb__fault_answer_t){x->status, x->hdrs, x->nhdrs, gathered_normal, x->body_len,
                                     x->body_len ? gathered_body : NULL, 3600000};
    cb__fault_start(r, x->p->fault, &x->answer);
  } else if (x->ntrs > 0 && r->proto->end_trailers != NULL) {
    r->proto->end_trailers(r, x->trs, x->ntrs); /* as cb__res_end: may release r and free x */
  } else {
    cb__res_end(r); /* may release r (and free x): nothing touches either after it */
  }
  /* Written once the loop's events are through (cb__conn_after_soon): the answers that end in one iteration on
   * several upstream connections, to the streams of one HTTP/2 client, leave in one write. */
  cb__conn_after_soon(conn);
}

/* The answer is complete (on_done). */
static void px_done(px_t *x, int keep) {
  px_detach(x, keep);
  px_finish(x);
}

/* Failed: before the answer's head a 502 or 504 with a text body, after it a cut answer. */
static void px_fail(px_t *x, int why) {
  cb__req_t *r = x->r;
  cb__conn_t *conn = r->conn;
  px_detach(x, 0);
  if (x->state == PX_ENDED) return;
  r->up_error = (uint8_t)why;
  if (x->state == PX_HEAD) {
    /* What came of the answer is sent first (the client sees it cut, not lost), then the answer is aborted.
     * That write can end the request itself: over HTTP/2 a RST_STREAM nghttp2 queued for the stream (a stream
     * error of the client's, behind frames that filled the output) goes out with it once the socket drained,
     * and the stream's close releases r (its stream block may be freed) and x. The abort then read freed memory
     * (test_proxy_abort.c). x->cutting keeps x alive through the write (px_free leaves it to us); r is not
     * touched once released. The connection itself is freed only from a close callback, later. */
    x->state = PX_ENDED;
    x->cutting = 1;
    cb__conn_after(conn);
    if (x->released) { /* the stream is over already: nothing to abort */
      px_spare(pool_of(conn->w), x);
      return;
    }
    x->cutting = 0;
    if (!conn->closing) r->proto->abort(r, 2 /* HTTP/2's INTERNAL_ERROR */);
    cb__conn_after(conn);
    return;
  }
  x->state = PX_ENDED;
  int status = why == CB__UPERR_TIMEOUT ? 504 : 502;
  if (status == 504) CB__STAT_INC(conn->w, proxy_504); else CB__STAT_INC(conn->w, proxy_502);
  char body[PROXY_MAX_TO + 256];
  int n = snprintf(body, sizeof body, "cbench proxy: %s%s%s (%.*s)\n", cb__uperr_text(why), x->detail ? ": " : "",
                   x->detail ? x->detail : "", (int)x->p->opts.to.len, x->p->to);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof body) n = (int)sizeof body - 1;
  static const cb__hdr_t ctype = {STR("content-type"), STR("text/plain")};
  cb__res_head(r, status, NULL, &ctype, 1, n);
  if (r->method != CB_METHOD_HEAD) cb__res_data(r, body, (size_t)n, CB__DATA_COPY | CB__DATA_PIECE_END);
  cb__res_end(r);
  cb__conn_after_soon(conn);
}

static void up_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  upc_t *c = h->data;
  *buf = uv_buf_init(c->pool->rbuf, sizeof c->pool->rbuf);
}

static int uperr_of(int feed_err) {
  switch (feed_err) {
    case CB_CRES_E_HEAD_TOO_BIG: return CB__UPERR_HEAD_TOO_BIG;
    case CB_CRES_E_BODY_TOO_BIG: return CB__UPERR_BODY_TOO_BIG;
    case CB_CRES_E_TRUNCATED: return CB__UPERR_TRUNCATED;
    default: return CB__UPERR_BAD_RESPONSE;
  }
}

/* An https upstream's handshake failed (or the upstream closed or reset it): 502, with the reason. */
static void tls_fail(px_t *x, const char *why) {
  size_t n = strlen(why);
  if (x->detail == NULL && (x->detail = malloc(n + 1)) != NULL) memcpy(x->detail, why, n + 1);
  px_fail(x, CB__UPERR_TLS);
}

/* Answer bytes (plaintext) for the parser: 0 to go on, 1 when the exchange let go of the connection (ended or
 * failed: x may be freed). */
static int up_bytes(upc_t *c, px_t *x, const char *p, size_t n) {
  c->got_bytes = 1;
  int err = cb_cres_feed(&c->parser, p, n);
  if (c->px == NULL) return 1; /* failed in a callback: answered there */
  if (c->done) {
    /* Kept only when nothing followed the answer, and the request had ended (an upstream that answers early
     * may not have read all of it). */
    int keep = c->keep && !c->extra && err == 0 && cb_cres_idle(&c->parser) && x->req_ended;
    px_done(x, keep);
    return 1;
  }
  if (err) {
    px_fail(x, uperr_of(err));
    return 1;
  }
  return 0;
}

/* After a read that left the exchange going: the client's output decides whether the upstream is read on. */
static void up_after(upc_t *c, px_t *x) {
  if (x->blocked) { /* the client's output is full: the upstream waits, and is not timed meanwhile */
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
    upc_untime(c);
  } else if (x->got_head) {
    /* The pause allowed between two reads of the body. The head keeps its deadline from the request: an
     * upstream that sends it a byte at a time is not given timeout_ms per byte. */
    upc_time(c, UPC_T_EXCHANGE, x->p->timeout_ms);
  }
  if (x->state == PX_HEAD) cb__conn_after_soon(x->r->conn);
}

static void up_eof(upc_t *c, px_t *x, ssize_t n);

/* https: the read's ciphertext goes into the session; the handshake steps, then the plaintext goes to the
 * parser as a plain read's bytes do. An idle connection reads too: a session ticket is taken in, anything else
 * (plaintext, an alert, close_notify) ends it. */
static void tls_read(upc_t *c, const char *p, size_t n) {
  px_t *x = c->px;
  char why[160];
  if (cb_ctls_put(&c->ssl, p, n) != 0) {
    c->tls_bad = 1;
    if (x) px_fail(x, CB__UPERR_NO_MEMORY); else upc_close(c);
    return;
  }
  if (c->ssl.hs_pending) {
    int rc = cb_ctls_handshake(&c->ssl);
    int ferr = tls_flush(c);
    if (rc < 0) {
      c->tls_bad = 1;
      cb_ctls_why(&c->ssl, 0, why, sizeof why);
      if (x) tls_fail(x, why); else upc_close(c);
      return;
    }
    if (rc == 0 || x == NULL) {
      if (ferr && x) px_fail(x, CB__UPERR_RESET);
      return;
    }
    /* Done: the request bytes written meanwhile go now, in records. */
    if (c->pt_len) {
      uv_buf_t b = uv_buf_init(c->pt, (unsigned)c->pt_len);
      c->pt_len = 0;
      if (up_send(x, &b, 1) != 0) {
        px_fail(x, CB__UPERR_RESET);
        return;
      }
    }
  }
  for (;;) {
    ssize_t k = cb_ctls_read(&c->ssl, c->pool->ptbuf, sizeof c->pool->ptbuf);
    if (k == 0) break;
    x = c->px;
    if (k < 0 || x == NULL) {
      c->tls_bad = 1;
      if (x == NULL) upc_close(c);
      else if (k == CB_CTLS_EOF) up_eof(c, x, UV_EOF); /* close_notify: the stream ended */
      else px_fail(x, x->got_head ? CB__UPERR_TRUNCATED : CB__UPERR_BAD_RESPONSE); /* an alert, a bad record */
      return;
    }
    /* The exchange let go of the connection. Parked, it must hold nothing more: a TLS read gives one record at a
     * time, so records after the answer's (in the same read) are still in the session. They are read now, and
     * plaintext among them ends the connection (x == NULL above), as bytes after an answer do over cleartext. */
    if (up_bytes(c, x, c->pool->ptbuf, (size_t)k) && !c->idle) return;
  }
  if (tls_flush(c) != 0) c->tls_bad = 1; /* a KeyUpdate's answer; a failed write shows on the read side */
  if (c->px) up_after(c, c->px);
}

static void pipe_read(upc_t *c, ssize_t n, const uv_buf_t *buf);
static void up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  upc_t *c = (upc_t *)s;
  px_t *x = c->px;
  if (n == 0) return;
  if (__builtin_expect(c->pipe, 0)) {
    pipe_read(c, n, buf);
    return;
  }
  if (n > 0 && c->tls) {
    tls_read(c, buf->base, (size_t)n);
    return;
  }
  if (x == NULL) { /* idle: an upstream that closes or speaks out of turn is done with */
    upc_close(c);
    return;
  }
  if (n < 0) up_eof(c, x, n);
  else if (!up_bytes(c, x, buf->base, (size_t)n)) up_after(c, x);
}

/* The upstream closed (UV_EOF, or close_notify) or the socket failed (n). */
static void up_eof(upc_t *c, px_t *x, ssize_t n) {
  if (c->tls) c->tls_bad = 1;
  if (c->tls && c->ssl.hs_pending) { /* closed or reset in the middle of the handshake */
    tls_fail(x, n == UV_EOF ? "connection closed" : n == UV_ECONNRESET ? "connection reset" : uv_strerror((int)n));
    return;
  }
  int err = n == UV_EOF ? cb_cres_eof(&c->parser) : 0;
  if (c->done) { /* a body read until the close */
    px_done(x, 0);
    return;
  }
  /* Nothing of the answer yet on a kept-alive connection: the upstream closed it meanwhile. The request is
   * sent again, once, on a new connection, when no byte of its body went yet, and only when its method is
   * idempotent or its head had not gone either (a proxy must not retry another on its own, RFC 9112 9.3.1: the
   * upstream may have acted on it). */
  if (x->reused && !x->retried && !x->body_streamed && !c->got_bytes &&
      (!x->head_sent || (x->r->method & PROXY_IDEMPOTENT))) {
    x->retried = 1;
    px_detach(x, 0);
    x->state = PX_WAIT;
    x->head_sent = 0;
    start_forward(x);
    return;
  }
  if (x->got_head || (c->got_bytes && err != 0))
    px_fail(x, x->got_head ? CB__UPERR_TRUNCATED : uperr_of(err));
  else
    px_fail(x, n == UV_ECONNREFUSED ? CB__UPERR_REFUSED : CB__UPERR_RESET);
}

static void up_timer_fired(uv_timer_t *t) {
  upc_t *c = t->data;
  c->due = 0;
  if (c->tmode == UPC_T_NONE) return;
  uint64_t now = uv_now(t->loop);
  if (now < c->deadline) { /* the deadline moved since the timer started: wait for the rest */
    uv_timer_start(t, up_timer_fired, c->deadline - now, 0);
    c->due = c->deadline;
  } else if (c->tmode == UPC_T_IDLE) {
    upc_close(c);
  } else if (c->px != NULL && c->px->ghost) { /* a released request's answer that does not come */
    upc_close(c);
  } else if (c->px != NULL) {
    px_fail(c->px, CB__UPERR_TIMEOUT);
  }
}

static void start_reading(upc_t *c) {
  if (c->reading) return;
  if (uv_read_start((uv_stream_t *)&c->tcp, up_alloc, up_read) == 0) c->reading = 1;
}

static void connected(uv_connect_t *req, int status) {
  upc_t *c = req->data;
  if (c->closing) return;
  px_t *x = c->px;
  if (status != 0) {
    if (x) px_fail(x, status == UV_ECONNREFUSED ? CB__UPERR_REFUSED : status == UV_ETIMEDOUT ? CB__UPERR_TIMEOUT : CB__UPERR_CONNECT);
    else upc_close(c);
    return;
  }
  c->connected = 1;
  start_reading(c);
}

static const cb_cres_callbacks_t pipe_parser_cb;
static int pipelinable(const px_t *x);
static void pipe_join(upc_t *c, px_t *x);

/* An upstream connection for x: the newest idle one of its upstream, or a new one; a pipelined request first
 * joins the upstream's pipelining connection while it has room. */
static int take_conn(px_t *x) {
  cb__worker_t *w = x->r->conn->w;
  pool_t *pl = pool_of(w);
  if (pl == NULL || pl->closed) return UV_ENOMEM;
  upstream_t *u = upstream_of(pl, x->p);
  if (u == NULL) return UV_ENOMEM;
  int piped = __builtin_expect(x->p->pipeline > 1, 0) && pipelinable(x);
  if (piped && u->pipe != NULL && u->pipe->px != NULL && u->pipe->inflight < x->p->pipeline && !u->pipe->spent &&
      u->pipe->max_body == x->p->max_body) {
    CB__STAT_INC(w, proxy_upstream_reused);
    pipe_join(u->pipe, x);
    return 0;
  }
  upc_t *c = u->idle;
  if (c != NULL && !x->retried) {
    idle_remove(c);
    x->reused = 1;
    CB__STAT_INC(w, proxy_upstream_reused);
  } else {
    c = malloc(sizeof *c);
    if (c == NULL) return UV_ENOMEM;
    memset(c, 0, offsetof(upc_t, head));
    c->pool = pl;
    c->up = u;
    uv_tcp_init(&w->loop, &c->tcp);
    uv_timer_init(&w->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->connect.data = c;
    c->next = pl->all;
    if (pl->all) pl->all->prev = c;
    pl->all = c;
    x->reused = 0;
    CB__STAT_INC(w, proxy_upstream_connects);
    uv_tcp_nodelay(&c->tcp, 1);
    int err = uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&u->addr, connected);
    if (err == 0 && x->p->tls) {
      /* The ClientHello is queued behind the connect; the request waits in c->pt for the handshake. The last
       * session this upstream gave (u->sess, kept per worker) is offered for resumption. */
      c->tls = 1;
      err = cb_ctls_start(&c->ssl, x->p->ctx, x->p->host, !x->p->opts.insecure, &u->sess);
      if (err == 0 && cb_ctls_handshake(&c->ssl) < 0) err = UV_EPROTO;
      if (err == 0) err = tls_flush(c);
      if (err) c->tls_bad = 1;
    }
    if (err) {
      upc_close(c);
      return err;
    }
  }
  cb_cres_limits_t lim = {.max_head = PROXY_MAX_HEAD, .max_body = x->p->max_body, .max_headers = PROXY_MAX_HEADERS};
  cb_cres_init(&c->parser, piped ? &pipe_parser_cb : &parser_cb, c, &lim, c->head, sizeof c->head);
  cb_cres_expect(&c->parser, x->r->method == CB_METHOD_HEAD);
  c->done = 0;
  c->keep = 0;
  c->extra = 0;
  c->got_bytes = 0;
  c->px = x;
  x->c = c;
  if (piped) { /* the upstream's pipelining connection from now on: the requests after x join it */
    c->pipe = 1;
    c->spent = 0;
    c->qtail = x;
    c->inflight = 1;
    c->max_body = x->p->max_body;
    c->tmo_ms = x->p->timeout_ms;
    x->head_req = x->r->method == CB_METHOD_HEAD;
    u->pipe = c;
  }
  upc_time(c, UPC_T_EXCHANGE, x->p->timeout_ms);
  if (c->connected) start_reading(c);
  return 0;
}

/* What both upstream protocols forward of a request's fields (docs/proxy.md, "What is forwarded"): the names its
 * connection field lists and the host it came for (the host field, or :authority over HTTP/2). */
typedef struct {
  const char *conn_v, *host;
  size_t conn_n, host_n;
} fwd_t;

/* Fills fw from r's fields, and hs (room for r->nheaders) with those that go on: not hop-by-hop (nor named by
 * the connection field), not host, expect (answered here already), content-length (the proxy writes the
 * framing) or an x-forwarded-* the proxy writes itself. Returns their count. Each name is classified once: a
 * comparison per name and field was a tenth of a proxied request's instructions. */
static int fwd_collect(const cb__req_t *r, fwd_t *fw, cb_chdr_t *hs) {
  *fw = (fwd_t){NULL, r->authority, 0, r->authority_len};
  int nh = 0;
  for (int i = 0; i < r->nheaders; i++) {
    const cb__hdr_t *f = &r->headers[i];
    int id = cb_chdr_name(f->name, f->name_len);
    if (id == CB_CHDR_OTHER || id == CB_CHDR_DATE) {
      hs[nh++] = (cb_chdr_t){f->name, f->name_len, f->value, f->value_len};
    } else if (id == CB_CHDR_CONNECTION && fw->conn_v == NULL) {
      fw->conn_v = f->value;
      fw->conn_n = f->value_len;
    } else if (id == CB_CHDR_HOST && fw->host == NULL) {
      fw->host = f->value;
      fw->host_n = f->value_len;
    }
  }
  if (fw->conn_v == NULL) return nh;
  int k = 0; /* rare: a connection field that names others */
  for (int i = 0; i < nh; i++)
    if (!cb_chdr_listed(hs[i].name, hs[i].name_len, fw->conn_v, fw->conn_n)) hs[k++] = hs[i];
  return k;
}

/* Appends x-forwarded-for (the client's address, written at peer: INET6_ADDRSTRLEN bytes), -proto and -host to
 * hs after its nh fields; returns the new count. */
static int fwd_add(const fwd_t *fw, const cb__conn_t *conn, char *peer, cb_chdr_t *hs, int nh) {
  size_t pn;
  pool_t *pl = pool_of(conn->w);
  if (pl != NULL && pl->peer_len > 0 && pl->peer_family == conn->peer_family &&
      memcmp(pl->peer_addr, conn->peer_addr, sizeof pl->peer_addr) == 0) {
    pn = pl->peer_len;
    memcpy(peer, pl->peer_text, pn);
  } else {
    pn = cb__peer_text(conn->peer_family, conn->peer_addr, -1, peer);
    if (pl != NULL && pn > 0 && pn < sizeof pl->peer_text) {
      pl->peer_family = conn->peer_family;
      memcpy(pl->peer_addr, conn->peer_addr, sizeof pl->peer_addr);
      memcpy(pl->peer_text, peer, pn);
      pl->peer_len = (uint8_t)pn;
    }
  }
  int tls = conn->proto_id == CB_PROTO_H1_TLS || conn->proto_id == CB_PROTO_H2_TLS;
  hs[nh++] = (cb_chdr_t){STR("x-forwarded-for"), peer, pn};
  hs[nh++] = (cb_chdr_t){STR("x-forwarded-proto"), tls ? "https" : "http", tls ? 5 : 4};
  if (fw->host != NULL) hs[nh++] = (cb_chdr_t){STR("x-forwarded-host"), fw->host, fw->host_n};
  return nh;
}

/* The forwarded head (contract section 2): method, prefix + target, the request's fields but the hop-by-hop
 * ones, host and expect (answered here already), then host, x-forwarded-for, -proto, -host. length: the body's,
 * CB__STREAMED (chunked) or CB__NO_BODY. */
static int send_head(px_t *x, int64_t length) {
  cb__req_t *r = x->r;
  const cb__proxy_t *p = x->p;
  cb__conn_t *conn = r->conn;
  fwd_t fw;
  /* The field list and the target are made on the stack when they fit (the usual case), else in blocks of
   * their own: two mallocs and frees per request were a tenth of the proxy's own instructions. */
  cb_chdr_t stack_hs[64];
  size_t nhs = (size_t)r->nheaders + PROXY_ADDED;
  cb_chdr_t *hs = nhs <= sizeof stack_hs / sizeof *stack_hs ? stack_hs : malloc(nhs * sizeof *hs);
  if (hs == NULL) return UV_ENOMEM;
  int nh = fwd_collect(r, &fw, hs);
  char peer[INET6_ADDRSTRLEN];
  nh = fwd_add(&fw, conn, peer, hs, nh);
  /* The target: the prefix, then the request's as received. */
  size_t tn = p->prefix_len + r->target_len;
  char stack_target[1024];
  char *target = tn <= sizeof stack_target ? stack_target : malloc(tn);
  if (target == NULL) {
    if (hs != stack_hs) free(hs);
    return UV_ENOMEM;
  }
  memcpy(target, p->prefix, p->prefix_len);
  memcpy(target + p->prefix_len, r->path, r->target_len);
  /* The fields are not checked again: the request's came through the engine's parsers (llhttp in strict mode and
   * http1.c's token check, or nghttp2's HTTP messaging: token names, values without controls; the wire tests
   * proxy_fields_parsed_* hold them to it), the added ones are an address, a constant and the host's value. */
  cb_creq_t q = {.method = r->method_str, .method_len = r->method_len, .target = target, .target_len = tn,
                 .host = p->authority, .host_len = p->authority_len, .headers = hs, .nheaders = nh,
                 .fields_checked = 1,
                 .content_length = length == CB__STREAMED ? CB_CREQ_CHUNKED
                                   : length == CB__NO_BODY ? CB_CREQ_NO_BODY : length};
  size_t cap = 256 + tn + p->authority_len + r->method_len;
  for (int i = 0; i < nh; i++) cap += hs[i].name_len + hs[i].value_len + 4;
  /* The head is made on the stack when it fits (the usual case), else in a block of its own. */
  char stack_head[4096];
  char *head = cap <= sizeof stack_head ? stack_head : malloc(cap);
  ssize_t hn = head ? cb_creq_head(head, cap, &q) : -1;
  if (hs != stack_hs) free(hs);
  if (target != stack_target) free(target);
  if (hn < 0) {
    if (head != stack_head) free(head);
    return UV_ENOMEM;
  }
  uv_buf_t buf = uv_buf_init(head, (unsigned)hn);
  int err = up_send(x, &buf, 1);
  if (head != stack_head) free(head);
  if (err) return err;
  x->head_sent = 1;
  x->chunked = length == CB__STREAMED;
  x->state = PX_SENT;
  return 0;
}

static int send_body(px_t *x, const char *p, size_t n) {
  if (n == 0) return 0;
  x->body_streamed = 1;
  if (!x->chunked) return up_write(x, p, n, NULL, 0, NULL, 0);
  char line[24];
  int ln = snprintf(line, sizeof line, "%zx\r\n", n);
  return up_write(x, line, (size_t)ln, p, n, "\r\n", 2);
}

static int send_end(px_t *x) { return x->chunked ? up_write(x, STR("0\r\n\r\n"), NULL, 0, NULL, 0) : 0; }

/* A write of the request failed with err. The socket's reset or close (the upstream dropped a kept-alive
 * connection, and the write found it before the read did: both came in one loop turn) is the upstream's end,
 * and goes where the read's would (up_eof: sent again on a new connection when nothing of it can have been
 * acted on); any other failure is the request's. */
static void send_failed(px_t *x, int err, int why) {
  upc_t *c = x->c;
  if (c != NULL && (err == UV_ECONNRESET || err == UV_EPIPE)) up_eof(c, x, UV_ECONNRESET);
  else px_fail(x, why);
}

/* What length the head announces: the request's content-length when it had one, none when it is complete with
 * no body, else chunked (an HTTP/1.1 chunked body, an h2 body without content-length). */
static int64_t req_length(const px_t *x) {
  const cb__req_t *r = x->r;
  if (x->hold != NULL || x->hold_len) return (int64_t)x->hold_len;
  if (r->content_length >= 0) return r->content_length;
  return x->req_ended ? CB__NO_BODY : CB__STREAMED;
}

/* Takes a connection and sends what is known of the request: its head (when its framing is known), the held
 * body, and its end. */
static void start_forward(px_t *x) {
  int err = take_conn(x);
  if (err) {
    px_fail(x, CB__UPERR_CONNECT);
    return;
  }
  if (x->p->delay_ms > 0 || x->hold_len > 0) { /* after a delay: the request is complete, its body held */
    err = send_head(x, x->hold_len > 0 ? (int64_t)x->hold_len : x->r->content_length >= 0 ? x->r->content_length
                                                                                          : CB__NO_BODY);
    if (err == 0 && x->hold_len) err = send_body(x, x->hold, x->hold_len);
  } else if (x->r->content_length >= 0 || x->req_ended) {
    err = send_head(x, req_length(x));
  }
  if (err) send_failed(x, err, CB__UPERR_CONNECT);
}

static void delay_done(cb__req_t *r) { start_forward(PX(r)); }

/* ---- pipelining (docs/proxy.md, "Pipelining") ----
 *
 * With a stub's pipeline above 1, bodiless GET and HEAD requests share an upstream connection, up to that many in
 * flight (RFC 9112 9.3.2), and the requests a worker forwards in one loop turn leave in one write at its end: a
 * proxied request then costs less than a write and a read on the upstream side each. The answers come in order;
 * each goes to the exchange at the head of the connection's queue. Anything that ends the connection early (a
 * close, a reset, an answer that ends it, a failed answer, a timeout) sends the queued requests that have had no
 * byte of their answer again, once, each on a connection of its own (they are idempotent: the upstream may have
 * acted on them, which a GET or HEAD allows). */

static inline __attribute__((always_inline)) void px_let_go(px_t *x);

static int pipelinable(const px_t *x) {
  const cb__req_t *r = x->r;
  return !x->retried && (r->method == CB_METHOD_GET || r->method == CB_METHOD_HEAD) && x->hold_len == 0 &&
         (r->content_length == 0 || (r->content_length < 0 && x->req_ended));
}

/* x goes behind the exchanges c carries. */
static void pipe_join(upc_t *c, px_t *x) {
  c->qtail->qnext = x;
  c->qtail = x;
  c->inflight++;
  x->c = c;
  x->reused = 1;
  x->head_req = x->r->method == CB_METHOD_HEAD;
}

/* Request bytes for c: gathered, and written at the end of the turn (pipe_flush_all). */
static int pipe_send(upc_t *c, const uv_buf_t *bufs, unsigned nbufs) {
  size_t n = 0;
  for (unsigned i = 0; i < nbufs; i++) n += bufs[i].len;
  if (grow(&c->ob, &c->ob_cap, c->ob_len + n, 4096) != 0) return UV_ENOMEM;
  for (unsigned i = 0; i < nbufs; i++) {
    memcpy(c->ob + c->ob_len, bufs[i].base, bufs[i].len);
    c->ob_len += bufs[i].len;
  }
  if (!c->in_due) {
    pool_t *pl = c->pool;
    c->in_due = 1;
    c->dprev = NULL;
    c->dnext = pl->pipe_due;
    if (pl->pipe_due) pl->pipe_due->dprev = c;
    pl->pipe_due = c;
    cb__worker_part_due(pl->w, CB__PART_PROXY);
  }
  return 0;
}

/* c takes no more requests: out of its upstream's pipe slot and the turn's write list. */
static void pipe_unlist(upc_t *c) {
  if (c->up->pipe == c) c->up->pipe = NULL;
  if (c->in_due) {
    if (c->dprev) c->dprev->dnext = c->dnext; else c->pool->pipe_due = c->dnext;
    if (c->dnext) c->dnext->dprev = c->dprev;
    c->dprev = c->dnext = NULL;
    c->in_due = 0;
  }
  c->ob_len = 0;
  c->qtail = NULL;
  c->inflight = 0;
}

/* The exchanges of a closed connection's queue (linked by qnext, let go of the connection): a ghost is freed, one
 * whose answer had begun is cut, one sent again already fails, the others are sent again. */
static void pipe_requeue(pool_t *pl, px_t *list) {
  while (list != NULL) {
    px_t *x = list;
    list = x->qnext;
    x->qnext = NULL;
    x->c = NULL;
    if (x->ghost) {
      px_spare(pl, x);
    } else if (x->got_head || x->retried || pl->closed) {
      px_fail(x, x->got_head ? CB__UPERR_TRUNCATED : CB__UPERR_RESET);
    } else {
      x->retried = 1; /* and so not pipelined: a connection of its own */
      x->state = PX_WAIT;
      x->head_sent = 0;
      start_forward(x);
    }
  }
}

/* x failed (px_fail): the connection's parse is over with it, so the connection ends, and its queue goes again. */
static void pipe_detach(px_t *x) {
  upc_t *c = x->c;
  px_t **at = &c->px;
  while (*at != x) at = &(*at)->qnext;
  *at = x->qnext;
  x->qnext = NULL;
  x->c = NULL;
  upc_close(c);
}

/* The request of a queued exchange was released (its client went): x stays in the queue as a ghost. */
static void pipe_ghost(px_t *x) {
  upc_t *c = x->c;
  px_let_go(x);
  x->r = NULL;
  x->p = NULL;
  x->ghost = 1;
  x->blocked = 0;
  if (c->px == x) { /* its answer was being read: now at the upstream's pace, dropped */
    start_reading(c);
    upc_time(c, UPC_T_EXCHANGE, c->tmo_ms);
  }
}

static int pipe_on_head(void *ud, const cb_cres_head_t *h) {
  upc_t *c = ud;
  if (c->px != NULL && c->px->ghost) return h->status < 200 ? STOP_FEED : 0;
  return on_head(ud, h);
}

static int pipe_on_body(void *ud, const char *p, size_t n) {
  upc_t *c = ud;
  return c->px != NULL && c->px->ghost ? 0 : on_body(ud, p, n);
}

static int pipe_on_trailers(void *ud, const cb_chdr_t *t, int n) {
  upc_t *c = ud;
  return c->px != NULL && c->px->ghost ? 0 : on_trailers(ud, t, n);
}

/* An answer is complete: its exchange leaves the queue and ends, the next one's answer is read. */
static int pipe_on_done(void *ud, int keep_alive) {
  upc_t *c = ud;
  px_t *x = c->px;
  if (x == NULL) return STOP_FEED;
  c->px = x->qnext;
  if (c->px == NULL) c->qtail = NULL;
  c->inflight--;
  x->qnext = NULL;
  x->c = NULL;
  if (c->px != NULL) {
    cb_cres_expect(&c->parser, c->px->head_req);
    if (!c->px->ghost) c->tmo_ms = c->px->p->timeout_ms;
    upc_time(c, UPC_T_EXCHANGE, c->tmo_ms);
  } else {
    upc_untime(c);
  }
  if (x->ghost) px_spare(c->pool, x); else px_finish(x);
  if (!keep_alive) { /* the upstream ends the connection here */
    c->spent = 1;
    if (c->up->pipe == c) c->up->pipe = NULL;
    return STOP_FEED;
  }
  return 0;
}

static const cb_cres_callbacks_t pipe_parser_cb = {
    .on_head = pipe_on_head, .on_body = pipe_on_body, .on_trailers = pipe_on_trailers, .on_done = pipe_on_done};

/* The upstream closed (UV_EOF) or the socket failed (n): a body read until the close ends; an answer cut short
 * fails; the queue goes again. */
static void pipe_eof(upc_t *c, ssize_t n) {
  int err = n == UV_EOF ? cb_cres_eof(&c->parser) : 0;
  if (c->closing) return;
  px_t *x = c->px;
  if (x != NULL && !x->ghost && (x->got_head || (err != 0 && err != STOP_FEED))) {
    px_fail(x, x->got_head ? CB__UPERR_TRUNCATED : uperr_of(err));
    return;
  }
  upc_close(c);
}

/* The head's client does not read (its output is full), so the connection stops being read: the requests queued
 * behind it, and any that joined, would wait on that client. Each goes again on a connection of its own, and leaves a ghost in its
 * place, whose answer is read and dropped when the connection moves on. Nobody joins the connection meanwhile.
 * (Without memory for a ghost, a request stays and waits.) */
static void pipe_unblock_queue(upc_t *c) {
  px_t *list = NULL, **tail = &list;
  for (px_t **at = &c->px->qnext; *at != NULL;) {
    px_t *x = *at;
    px_t *g = x->ghost ? NULL : calloc(1, sizeof *g);
    if (g == NULL) {
      at = &x->qnext;
      continue;
    }
    g->ghost = 1;
    g->head_req = x->head_req;
    g->c = c;
    g->qnext = x->qnext;
    *at = g;
    if (c->qtail == x) c->qtail = g;
    at = &g->qnext;
    x->qnext = NULL;
    *tail = x;
    tail = &x->qnext;
  }
  if (c->up->pipe == c) c->up->pipe = NULL;
  pipe_requeue(c->pool, list);
}

static void pipe_read(upc_t *c, ssize_t n, const uv_buf_t *buf) {
  if (n < 0) {
    pipe_eof(c, n);
    return;
  }
  int err = cb_cres_feed(&c->parser, buf->base, (size_t)n);
  if (c->closing) return; /* an exchange failed in a callback: answered there, its queue sent again */
  px_t *x = c->px;
  if (err == 0 && !c->spent) {
    if (x == NULL) { /* every answer is in: the connection is idle */
      pipe_unlist(c);
      c->pipe = 0;
      if (cb_cres_idle(&c->parser) && !c->pool->closed) upc_park(c); else upc_close(c);
    } else if (!x->ghost) {
      if (x->blocked) pipe_unblock_queue(c);
      up_after(c, x);
    }
    return;
  }
  /* An answer that ends the connection, bytes after the last answer, or bytes that are no answer. */
  if (err != 0 && err != STOP_FEED && x != NULL && !x->ghost) px_fail(x, uperr_of(err));
  else upc_close(c);
}

/* The end of the turn: each pipelining connection's gathered requests in one write. */
static void pipe_flush_all(pool_t *pl) {
  while (pl->pipe_due != NULL) {
    upc_t *c = pl->pipe_due;
    pl->pipe_due = c->dnext;
    if (pl->pipe_due) pl->pipe_due->dprev = NULL;
    c->in_due = 0;
    c->dnext = NULL;
    uv_buf_t b = uv_buf_init(c->ob, (unsigned)c->ob_len);
    c->ob_len = 0;
    if (b.len > 0 && raw_send(c, &b, 1) != 0) pipe_eof(c, UV_ECONNRESET);
  }
}

/* ---- the handler ---- */

static inline __attribute__((always_inline)) px_t *px_new(cb__req_t *r) {
  const cb__proxy_t *p = cb__stub_proxy(r->route);
  cb__worker_t *w = r->conn->w;
  CB__STAT_INC(w, proxy_requests);
  r->up_to = p->to;
  r->up_to_len = (uint16_t)p->opts.to.len;
  pool_t *pl = pool_of(w);
  px_t *x = pl != NULL ? pl->spare : NULL;
  if (x != NULL) {
    pl->spare = x->spare_next;
    pl->nspare--;
    memset(x, 0, sizeof *x);
  } else {
    x = calloc(1, sizeof *x);
  }
  if (x == NULL) {
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return NULL;
  }
  x->r = r;
  x->p = p;
  r->stub = x;
  x->record = (uint8_t)p->opts.record;
  x->gather = p->fault != NULL && cb__fault_fires(p->fault, (uint64_t *)&p->draws);
  return x;
}

px_t *cb__px_new(cb__req_t *r) { return px_new(r); }

static void proxy_head(cb__req_t *r) {
  px_t *x = px_new(r);
  if (x == NULL) return;
  if (x->p->delay_ms > 0) return; /* the body is held; the forward begins delay_ms after the request ends */
  /* A GET or HEAD whose framing does not say yet whether a body comes (HTTP/1.1 without content-length, h2
   * without END_STREAM seen): pipelined when it ends with none, which for HTTP/1.1 is in the same parse. */
  if (__builtin_expect(x->p->pipeline > 1, 0) && r->content_length < 0 &&
      (r->method == CB_METHOD_GET || r->method == CB_METHOD_HEAD)) {
    x->wait_end = 1;
    return;
  }
  start_forward(x);
}

int cb__px_hold(px_t *x, const char *p, size_t n) {
  cb__req_t *r = x->r;
  if (x->hold_off > 0 && x->hold_off == x->hold_len) x->hold_off = x->hold_len = 0; /* all taken: from the start */
  if (x->hold_len + n > x->hold_cap) {
    size_t cap = x->hold_cap ? x->hold_cap * 2 : 16384;
    while (cap < x->hold_len + n) cap *= 2;
    if (cb__echo_hold(r->conn, cap - x->hold_cap) != 0) return UV_ENOMEM;
    char *b = realloc(x->hold, cap);
    if (b == NULL) {
      cb__echo_release(r->conn, cap - x->hold_cap);
      return UV_ENOMEM;
    }
    x->hold = b;
    x->hold_cap = cap;
  }
  memcpy(x->hold + x->hold_len, p, n);
  x->hold_len += n;
  return 0;
}

static void proxy_body(cb__req_t *r, const char *p, size_t n) {
  px_t *x = PX(r);
  if (x == NULL || x->state == PX_ENDED || n == 0) return;
  if (x->p->delay_ms > 0) {
    if (cb__px_hold(x, p, n) != 0) px_fail(x, CB__UPERR_NO_MEMORY);
    return;
  }
  if (__builtin_expect(x->wait_end, 0)) { /* a body: forwarded as any other, on a connection of its own */
    x->wait_end = 0;
    start_forward(x);
  }
  if (x->c == NULL) return;
  int err = 0;
  if (!x->head_sent) err = send_head(x, CB__STREAMED);
  if (err == 0) err = send_body(x, p, n);
  if (err) send_failed(x, err, CB__UPERR_RESET);
}

static void proxy_end(cb__req_t *r) {
  px_t *x = PX(r);
  if (x == NULL || x->state == PX_ENDED) return;
  x->req_ended = 1;
  if (x->p->delay_ms > 0) {
    r->delay_ms = x->p->delay_ms;
    if (cb__req_timer(r, x->p->delay_ms, delay_done) != 0) px_fail(x, CB__UPERR_NO_MEMORY);
    return;
  }
  if (__builtin_expect(x->wait_end, 0)) { /* ended with no body: pipelined (start_forward sends its head) */
    x->wait_end = 0;
    start_forward(x);
    return;
  }
  if (x->c == NULL) return;
  int err = x->head_sent ? send_end(x) : send_head(x, CB__NO_BODY);
  if (err) send_failed(x, err, CB__UPERR_RESET);
}

static void proxy_writable(cb__req_t *r) {
  px_t *x = PX(r);
  if (x == NULL) return;
  if (x->state == PX_ENDED) {
    if (cb__fault_pacing(r)) cb__fault_writable(r);
    return;
  }
  r->blocked = 0;
  x->blocked = 0;
  if (x->c != NULL && x->c->px == x) { /* (a pipelined exchange still queued has nothing to read yet) */
    start_reading(x->c);
    upc_time(x->c, UPC_T_EXCHANGE, x->p->timeout_ms);
  }
}

/* The request is released: a connection still carrying its exchange is closed (the answer was not read to
 * its end, so it cannot carry another). */
static inline __attribute__((always_inline)) void px_free(px_t *x);
static void pipe_ghost(px_t *x);
static void proxy_free(cb__req_t *r) {
  px_t *x = PX(r);
  if (x == NULL) return;
  if (__builtin_expect(x->c != NULL && x->c->pipe, 0)) { /* its answer is still read, for those behind it */
    pipe_ghost(x);
    return;
  }
  px_detach(x, 0);
  px_free(x);
}

/* What x holds beside itself, and its link from r. */
static inline __attribute__((always_inline)) void px_let_go(px_t *x) {
  cb__req_t *r = x->r;
  if (x->hold_cap) cb__echo_release(r->conn, x->hold_cap);
  free(x->hold);
  free(x->hdrs);
  free(x->hbuf);
  free(x->body);
  free(x->trs);
  free(x->detail);
  r->stub = NULL;
}

static inline __attribute__((always_inline)) void px_free(px_t *x) {
  cb__req_t *r = x->r;
  px_let_go(x);
  if (__builtin_expect(x->cutting, 0)) { /* released inside px_fail's write: px_fail lets x go when it returns */
    x->released = 1;
    return;
  }
  px_spare(pool_of(r->conn->w), x);
}

/* An exchange let go: kept among the pool's spares (at most PX_SPARE_MAX) for the next request, or freed. */
static inline __attribute__((always_inline)) void px_spare(pool_t *pl, px_t *x) {
  if (pl != NULL && pl->nspare < PX_SPARE_MAX) {
    x->spare_next = pl->spare;
    pl->spare = x;
    pl->nspare++;
  } else {
    free(x);
  }
}

void cb__px_free(px_t *x) { px_free(x); }
void cb__px_done(px_t *x) { px_done(x, 0); }
void cb__px_fail(px_t *x, int why) { px_fail(x, why); }
pool_t *cb__px_pool(cb__worker_t *w) { return pool_of(w); }
upstream_t *cb__px_upstream(pool_t *pl, const cb__proxy_t *p) { return upstream_of(pl, p); }

char *cb__px_target(px_t *x, char *stack, size_t cap, size_t *n) {
  const cb__proxy_t *p = x->p;
  cb__req_t *r = x->r;
  size_t tn = p->prefix_len + r->target_len;
  char *target = tn <= cap ? stack : malloc(tn ? tn : 1);
  if (target == NULL) return NULL;
  memcpy(target, p->prefix, p->prefix_len);
  memcpy(target + p->prefix_len, r->path, r->target_len);
  *n = tn;
  return target;
}

/* The HTTP/2 form of send_head's fields: names lowercased (HTTP/2 allows no other), no host (the authority is
 * :authority), te only as "trailers" (RFC 9113 8.2.2) and dropped here like every hop-by-hop field, and the
 * body's content-length when the request declared one. */
int cb__px_h2_fields(px_t *x, cb__px_h2_fields_t *f) {
  cb__req_t *r = x->r;
  cb__conn_t *conn = r->conn;
  fwd_t fw;
  size_t nhs = (size_t)r->nheaders + PROXY_ADDED + 1;
  cb_chdr_t *hs = nhs <= CB__PX_STACK_FIELDS ? f->stack_hs : malloc(nhs * sizeof *hs);
  if (hs == NULL) return UV_ENOMEM;
  int nh = fwd_collect(r, &fw, hs);
  size_t bytes = 24 + INET6_ADDRSTRLEN; /* a length, an address and the names */
  for (int i = 0; i < nh; i++) bytes += hs[i].name_len;
  char *b = bytes <= sizeof f->stack_block ? f->stack_block : malloc(bytes), *o = b;
  if (b == NULL) {
    if (hs != f->stack_hs) free(hs);
    return UV_ENOMEM;
  }
  f->fields = hs;
  f->block = b;
  for (int i = 0; i < nh; i++) { /* the names lowercased into the block */
    for (size_t k = 0; k < hs[i].name_len; k++)
      o[k] = (char)(hs[i].name[k] >= 'A' && hs[i].name[k] <= 'Z' ? hs[i].name[k] + 32 : hs[i].name[k]);
    hs[i].name = o;
    o += hs[i].name_len;
  }
  /* After a delay the body is held whole: its length; otherwise the declared one, if any. */
  int64_t len = x->p->delay_ms > 0 && x->hold_len > 0 ? (int64_t)x->hold_len : r->content_length;
  if (len >= 0) {
    int n = snprintf(o, 24, "%lld", (long long)len);
    hs[nh++] = (cb_chdr_t){STR("content-length"), o, (size_t)n};
    o += n;
  }
  return fwd_add(&fw, conn, o, hs, nh);
}

void cb__px_h2_fields_free(cb__px_h2_fields_t *f) {
  if (f->fields != f->stack_hs) free(f->fields);
  if (f->block != f->stack_block) free(f->block);
}

const cb__handler_t cb__h_proxy = {
    .on_head = proxy_head, .on_body = proxy_body, .on_end = proxy_end, .on_writable = proxy_writable,
    .on_free = proxy_free};
