/* The proxy kind's h2c upstream (docs/proxy.md, "h2c upstreams"): a proxy stub with `protocol => h2c` forwards
 * its request as a stream on a prior-knowledge HTTP/2 connection to the upstream (RFC 9113 3.3), through the
 * client layer's session (client/h2_client.c), and passes the answer on through the exchange proxy.c shares
 * with the HTTP/1.1 upstream (head, body, trailers, a fault's gathered answer, the recorder, 502 and 504).
 *
 * Connections: per worker and upstream, streams go to the newest connection that can take one more (fewer than
 * the peer's SETTINGS_MAX_CONCURRENT_STREAMS, 100 until its SETTINGS came, and no GOAWAY); when none can, a new
 * one is opened, up to PROXY_MAX_H2 (past it the stream waits in the newest connection's session for a slot).
 * Requests submitted while the connection is being made go out with its preface. A connection without streams
 * is closed after PROXY_IDLE_MS, one the upstream ended (GOAWAY) once its last stream is over.
 *
 * Memory: the answer's body goes to the client as it comes, and each stream's receive window (65,535 bytes)
 * opens again only for what the client's output took below its mark (cb_ch2_consume), so a slow client holds
 * at most a window more than its own output queue. Frames are taken from the session only while less than
 * H2_OUT_HIGH bytes wait for the upstream's socket: an upstream that never reads fills nghttp2's queue, which
 * nghttp2 bounds (its flood limits end the session). The request body waits in the exchange (x->hold, from the
 * echo budget) until the stream's data provider takes it. */
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "kinds/kinds.h"
#include "kinds/proxy.h"

#define H2_OUT_HIGH (64 * 1024)          /* bytes queued for the upstream's socket before the session waits */
#define H2_CONN_WINDOW (16 * 1024 * 1024) /* the connection's receive window: 256 streams' windows */
#define H2_GATHER (16 * 1024)             /* frames gathered for one write (h2c_flush) */

/* One h2c upstream connection. Freed when both its handles have closed. */
struct h2c_s {
  uv_tcp_t tcp;     /* first member: callbacks cast back */
  uv_timer_t timer; /* the idle timeout */
  uv_connect_t connect;
  pool_t *pool;
  upstream_t *up;
  h2c_t *prev, *next; /* up->h2 while open */
  h2x_t *xs;          /* the streams it carries for exchanges */
  cb_ch2_t s;
  cb__h2_mem_t mem; /* the session's memory, from the pool's small-block cache */
  uint8_t connected;
  uint8_t closing;
  uint8_t busy;       /* the session is running its callbacks (feed or pull): it may not be called again now */
  uint8_t pending;    /* handles still to close */
  uint8_t tls;        /* https: the TLS session below carries the frames (ALPN h2) */
  uint8_t tls_bad;    /* it failed, or the upstream ended it: no close_notify */
  uint8_t due;        /* on the pool's h2_due list: its frames go at the end of the turn (h2c_flush_soon) */
  h2c_t *due_next;
  cb_ctls_t ssl;
  char head[CB_CRES_HEADBUF_SIZE(PROXY_MAX_HEAD, PROXY_MAX_HEADERS)];
};

/* An exchange's stream. Its own block, because its timer must outlive both the exchange (released by the
 * client's side at any time) and the stream (ended by the upstream's): freed in the timer's close callback. */
struct h2x_s {
  uv_timer_t timer; /* first member: connect and head, then the pause allowed between two pieces of body */
  px_t *x;          /* NULL once the exchange let go */
  h2c_t *hc;        /* NULL once off its connection */
  h2x_t *prev, *next;
  int32_t id;
  uint8_t attached; /* the session still tells this stream's events */
  uint8_t released; /* h2x_release ran (a failure's answer may release the exchange, which releases it too) */
  uint8_t dirty;    /* the feed passed answer bytes on: the client's connection writes them after the feed */
  uint8_t timed;    /* deadline counts (not while the client's output is full) */
  uint64_t deadline; /* loop time (ms) the stream times out at, moved later by each piece of the answer */
  uint64_t due;      /* when the timer, if it runs, fires (0: it does not) */
  size_t unconsumed; /* body passed on while the client's output was full: not yet given back to the windows */
  uint64_t got;      /* body bytes received */
};

static void h2c_flush(h2c_t *hc);
static void h2c_flush_soon(h2c_t *hc);
static void h2c_close(h2c_t *hc);
static void h2_forward(px_t *x);

/* ---- the exchange's stream ---- */

static void h2x_closed(uv_handle_t *h) { free(h->data); }

/* Released streams kept per worker (pool_t.h2x_spare); none under ASan, which then sees each one freed. */
#if defined(__SANITIZE_ADDRESS__)
#define H2X_SPARE_MAX 0
#else
#define H2X_SPARE_MAX 1024
#endif

/* The stream lets go of its exchange and connection: reset when the session still tells it (the exchange ended
 * first), its unconsumed bytes given back to the connection's window, its timer closed (then it is freed). A
 * connection left without streams waits PROXY_IDLE_MS for another. */
static void idle_fire(uv_timer_t *t) { h2c_close(t->data); }

static void h2x_release(h2x_t *h) {
  if (h->released) return;
  h->released = 1;
  h2c_t *hc = h->hc;
  if (h->x != NULL) h->x->h2 = NULL;
  h->x = NULL;
  if (hc != NULL) {
    if (h->prev) h->prev->next = h->next; else hc->xs = h->next;
    if (h->next) h->next->prev = h->prev;
    h->hc = NULL;
    if (!hc->closing) {
      if (h->attached) cb_ch2_cancel(&hc->s, h->id);
      cb_ch2_consume(&hc->s, 0, h->unconsumed);
      if (hc->xs == NULL) uv_timer_start(&hc->timer, idle_fire, PROXY_IDLE_MS, 0);
      h2c_flush_soon(hc);
    }
  }
  h->attached = 0;
  h->timed = 0; /* a running timer fires for nothing (h2x_timeout), or for the block's next stream */
  pool_t *pl = cb__px_pool(h->timer.loop->data); /* the loop's data is its worker (core/worker.c) */
  if (pl != NULL && !pl->closed && pl->nh2x_spare < H2X_SPARE_MAX) {
    pl->nh2x_spare++; /* counted from now: the limbo's become spares */
    h->next = pl->h2x_limbo;
    pl->h2x_limbo = h;
    cb__worker_part_due(pl->w, CB__PART_PROXY);
    return;
  }
  uv_timer_stop(&h->timer);
  uv_close((uv_handle_t *)&h->timer, h2x_closed);
}

/* A stream for a new exchange: a spare one (its timer may run, due at h->due), or a new block. */
static h2x_t *h2x_take(pool_t *pl) {
  h2x_t *h = pl->h2x_spare;
  if (h != NULL) {
    pl->h2x_spare = h->next;
    pl->nh2x_spare--;
    uint64_t due = h->due;
    memset((char *)h + sizeof h->timer, 0, sizeof *h - sizeof h->timer);
    h->due = due;
    return h;
  }
  h = calloc(1, sizeof *h);
  if (h == NULL) return NULL;
  uv_timer_init(&pl->w->loop, &h->timer);
  h->timer.data = h;
  return h;
}

/* A stream taken and not used (its request was not submitted). */
static void h2x_drop(pool_t *pl, h2x_t *h) {
  h->released = 1;
  h->next = pl->h2x_spare;
  pl->h2x_spare = h;
  pl->nh2x_spare++;
  if (pl->nh2x_spare > H2X_SPARE_MAX) {
    pl->h2x_spare = h->next;
    pl->nh2x_spare--;
    uv_close((uv_handle_t *)&h->timer, h2x_closed);
  }
}

/* The stream's deadline, as the HTTP/1.1 connection's (proxy.c, upc_time): a deadline that moves later only
 * writes the time, and the timer, on firing, waits for what is left. Restarting the timer at the head and at
 * each piece of body took two timer-heap removals and insertions per request. */
static void h2x_timeout(uv_timer_t *t);

static void h2x_time(h2x_t *h, uint64_t ms) {
  h->timed = 1;
  h->deadline = uv_now(h->timer.loop) + ms;
  if (h->due == 0 || h->due > h->deadline) {
    uv_timer_start(&h->timer, h2x_timeout, ms, 0);
    h->due = h->deadline;
  }
}

static void h2x_timeout(uv_timer_t *t) {
  h2x_t *h = t->data;
  h->due = 0;
  if (!h->timed) return;
  uint64_t now = uv_now(t->loop);
  if (now < h->deadline) {
    uv_timer_start(t, h2x_timeout, h->deadline - now, 0);
    h->due = h->deadline;
    return;
  }
  px_t *x = h->x;
  h2x_release(h);
  if (x != NULL) cb__px_fail(x, CB__UPERR_TIMEOUT);
}

/* The stream ended for the exchange with why (a CB__UPERR_*): before the head a 502, after it a cut answer. */
static void h2x_fail(h2x_t *h, int why) {
  px_t *x = h->x;
  h2x_release(h);
  if (x != NULL) cb__px_fail(x, why);
}

static int64_t content_length_of(const cb_chdr_t *h, int n) {
  for (int i = 0; i < n; i++) {
    if (h[i].name_len != 14 || memcmp(h[i].name, "content-length", 14) != 0) continue;
    int64_t v = 0;
    if (h[i].value_len == 0 || h[i].value_len > 18) return -1;
    for (size_t k = 0; k < h[i].value_len; k++) {
      if (h[i].value[k] < '0' || h[i].value[k] > '9') return -1;
      v = v * 10 + (h[i].value[k] - '0');
    }
    return v;
  }
  return -1;
}

static int st_head(void *sud, int status, const cb_chdr_t *f, int n) {
  h2x_t *h = sud;
  px_t *x = h->x;
  if (x == NULL) return 1;
  int64_t cl = content_length_of(f, n);
  int no_body = status == 204 || status == 304;
  /* The declared length of a body that comes: a HEAD's (or a 304's) describes one that does not. */
  if (cl > 0 && (uint64_t)cl > x->p->max_body && !no_body && x->r->method != CB_METHOD_HEAD) {
    h->attached = 0; /* the session drops the stream on our non-zero */
    h2x_fail(h, CB__UPERR_BODY_TOO_BIG);
    return 1;
  }
  h2x_time(h, x->p->timeout_ms);
  if (cb__px_head(x, status, f, n, no_body ? CB__NO_BODY : cl >= 0 ? cl : CB__STREAMED) != 0) {
    h->attached = 0;
    h2x_release(h); /* answered already (px_fail) */
    return 1;
  }
  h->dirty = 1;
  return 0;
}

static int st_data(void *sud, const char *p, size_t n) {
  h2x_t *h = sud;
  px_t *x = h->x;
  if (x == NULL) return 1;
  uint64_t max = x->p->max_body;
  if (h->got + n > max) { /* exactly max_body bytes go on, then the answer is cut */
    size_t room = (size_t)(max - h->got);
    h->got = max;
    if (room > 0 && cb__px_body(x, p, room) < 0) {
      h->attached = 0;
      h2x_release(h);
      return 1;
    }
    h->attached = 0;
    h2x_fail(h, CB__UPERR_BODY_TOO_BIG);
    return 1;
  }
  h->got += n;
  int blocked = cb__px_body(x, p, n);
  if (blocked < 0) { /* answered already (px_fail) */
    h->attached = 0;
    h2x_release(h);
    return 1;
  }
  if (blocked) { /* the client's output is full: the window stays closed by n and the stream is not timed */
    h->unconsumed += n;
    h->timed = 0;
  } else {
    cb_ch2_consume(&h->hc->s, h->id, n);
    h2x_time(h, x->p->timeout_ms);
  }
  h->dirty = 1;
  return 0;
}

static int st_trailers(void *sud, const cb_chdr_t *t, int n) {
  h2x_t *h = sud;
  if (h->x != NULL) cb__px_trailers(h->x, t, n);
  return 0;
}

static void st_end(void *sud) {
  h2x_t *h = sud;
  px_t *x = h->x;
  h->attached = 0;
  h2x_release(h);
  if (x != NULL) cb__px_done(x);
}

static void st_close(void *sud, int err) {
  h2x_t *h = sud;
  px_t *x = h->x;
  h->attached = 0;
  /* Not processed by the upstream (REFUSED_STREAM, or above its GOAWAY's last stream): sent again once, on
   * another connection, when none of its body went and none of its answer came (an upstream that refuses a
   * stream it answered in part: a second answer would follow the first's head and body). */
  if (x != NULL && err == CB_CH2_E_REFUSED && !x->retried && !x->body_streamed && !x->got_head) {
    x->retried = 1;
    h2x_release(h);
    x->state = PX_WAIT;
    x->head_sent = 0;
    h2_forward(x);
    return;
  }
  h2x_fail(h, err == CB_CH2_E_HEAD_TOO_BIG ? CB__UPERR_HEAD_TOO_BIG
              : err == CB_CH2_E_BAD        ? CB__UPERR_BAD_RESPONSE
              : err == CB_CH2_E_NOMEM      ? CB__UPERR_NO_MEMORY
                                           : CB__UPERR_RESET);
}

/* The request body for the stream's data provider: what waits in x->hold. */
static ssize_t st_read_body(void *sud, char *buf, size_t cap, int *eof) {
  h2x_t *h = sud;
  px_t *x = h->x;
  if (x == NULL) return -1;
  size_t n = x->hold_len - x->hold_off;
  if (n > cap) n = cap;
  if (n > 0) {
    memcpy(buf, x->hold + x->hold_off, n);
    x->hold_off += n;
    x->body_streamed = 1;
  }
  if (x->req_ended && x->hold_off == x->hold_len) *eof = 1;
  return (ssize_t)n;
}

static const cb_ch2_callbacks_t session_cb = {.on_head = st_head, .on_data = st_data, .on_trailers = st_trailers,
                                              .on_end = st_end, .on_close = st_close,
                                              .read_body = st_read_body};

/* ---- the connection ---- */

static void h2c_handle_closed(uv_handle_t *h) {
  h2c_t *hc = h->data;
  if (--hc->pending != 0) return;
  if (hc->tls) cb_ctls_free(&hc->ssl);
  free(hc);
}

static int h2c_send(h2c_t *hc, const char *p, size_t n);

/* https: what the TLS session has to send (handshake messages, records, close_notify) goes to the socket. */
static int h2c_tls_out(h2c_t *hc) {
  const char *p;
  size_t n = cb_ctls_out(&hc->ssl, &p);
  if (n == 0) return 0;
  int err = h2c_send(hc, p, n);
  cb_ctls_out_done(&hc->ssl);
  return err;
}

/* Every stream of a connection that ended fails: why, or after the head a cut answer. */
static void h2c_fail_all(h2c_t *hc, int why) {
  h2x_t *h;
  while ((h = hc->xs) != NULL) {
    h->attached = 0;
    h2x_fail(h, why);
  }
}

/* The session and what it left of its memory. */
static void h2c_session_free(h2c_t *hc) {
  cb_ch2_free(&hc->s);
  cb__h2_mem_free(&hc->mem);
  hc->pool->h2_sessions--;
}

static void h2c_close(h2c_t *hc) {
  if (hc->closing) return;
  hc->closing = 1;
  if (hc->due) { /* off the pool's list before it can be freed */
    h2c_t **pp = &hc->pool->h2_due;
    while (*pp != hc) pp = &(*pp)->due_next;
    *pp = hc->due_next;
    hc->due = 0;
  }
  upstream_t *u = hc->up;
  if (hc->prev) hc->prev->next = hc->next; else u->h2 = hc->next;
  if (hc->next) hc->next->prev = hc->prev;
  u->nh2--;
  h2c_fail_all(hc, CB__UPERR_RESET);
  h2c_session_free(hc);
  if (hc->tls && hc->connected && !hc->tls_bad && !hc->ssl.hs_pending) { /* best effort, not waited for */
    cb_ctls_close_notify(&hc->ssl);
    (void)h2c_tls_out(hc);
  }
  hc->pending = 2;
  uv_close((uv_handle_t *)&hc->tcp, h2c_handle_closed);
  uv_close((uv_handle_t *)&hc->timer, h2c_handle_closed);
}

/* Closes a connection whose session is over: after its last frames (a GOAWAY) went, as far as the socket takes
 * them now. */
static void h2c_end(h2c_t *hc, int why) {
  if (hc->closing) return;
  h2c_fail_all(hc, why);
  h2c_flush(hc);
  h2c_close(hc);
}

typedef struct {
  uv_write_t req;
  h2c_t *hc;
  char data[];
} h2w_t;

static void h2c_written(uv_write_t *req, int status) {
  h2w_t *w = (h2w_t *)req;
  h2c_t *hc = w->hc;
  free(w);
  if (status == 0 && !hc->closing) h2c_flush(hc); /* the rest of what the session holds */
}

/* Bytes to the socket: uv_try_write first, the rest copied into a write of its own. 0, or -1 when the socket
 * failed (the read side sees the connection's end). */
static int h2c_send(h2c_t *hc, const char *p, size_t n) {
  uv_stream_t *s = (uv_stream_t *)&hc->tcp;
  size_t done = 0;
  if (uv_stream_get_write_queue_size(s) == 0) {
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int k = uv_try_write(s, &b, 1);
    if (k == (int)n) return 0;
    if (k > 0) done = (size_t)k;
    else if (k != UV_EAGAIN && k != UV_ENOSYS) return -1;
  }
  h2w_t *w = malloc(sizeof *w + (n - done));
  if (w == NULL) return -1;
  w->hc = hc;
  memcpy(w->data, p + done, n - done);
  uv_buf_t b = uv_buf_init(w->data, (unsigned)(n - done));
  if (uv_write(&w->req, s, &b, 1, h2c_written) != 0) {
    free(w);
    return -1;
  }
  return 0;
}

/* The bytes gathered from the session, to the socket (over TLS: encrypted into records first). 0, or -1 when
 * the connection failed. */
static int h2c_out(h2c_t *hc, const char *p, size_t n) {
  if (!hc->tls) return h2c_send(hc, p, n);
  if (cb_ctls_write(&hc->ssl, p, n) != 0 || h2c_tls_out(hc) != 0) {
    hc->tls_bad = 1;
    return -1;
  }
  return 0;
}

/* Takes frames from the session while the socket's queue is short, and writes them together: nghttp2 hands
 * out one frame per call, and a write per frame cost one system call (and, over loopback, one TCP segment
 * through both stacks) per forwarded request. Frames are copied into a buffer on the stack (the pointer the
 * session gives is good only until its next call); one bigger than the buffer goes out by itself. */
static void h2c_flush(h2c_t *hc) {
  if (!hc->connected || hc->closing || hc->busy || (hc->tls && hc->ssl.hs_pending)) return;
  uv_stream_t *s = (uv_stream_t *)&hc->tcp;
  char out[H2_GATHER];
  size_t len = 0;
  while (uv_stream_get_write_queue_size(s) + len < H2_OUT_HIGH) {
    const char *p;
    /* What a callback inside the pull submits (a reset, a retried request) is taken by this same loop. */
    hc->busy = 1;
    ssize_t n = cb_ch2_pull(&hc->s, &p);
    hc->busy = 0;
    if (hc->closing) return;
    if (n <= 0) break;
    if (len + (size_t)n > sizeof out) {
      if (h2c_out(hc, out, len) != 0) return;
      len = 0;
    }
    if ((size_t)n > sizeof out) {
      if (h2c_out(hc, p, (size_t)n) != 0) return;
      continue;
    }
    memcpy(out + len, p, (size_t)n);
    len += (size_t)n;
  }
  if (len > 0) (void)h2c_out(hc, out, len);
}

/* The connection's frames go at the end of this turn of the worker's loop (the pool's turn_end), with those of
 * every other stream submitted in the turn: for frames that answer the client's side (a request, its body, a
 * window opened again, a reset). */
static void h2c_flush_soon(h2c_t *hc) {
  if (hc->due || hc->closing) return;
  hc->due = 1;
  hc->due_next = hc->pool->h2_due;
  hc->pool->h2_due = hc;
  cb__worker_part_due(hc->pool->w, CB__PART_PROXY);
}

void cb__proxy_h2_turn_end(pool_t *pl) {
  while (pl->h2x_limbo != NULL) { /* released in this turn: no session can still name them */
    h2x_t *h = pl->h2x_limbo;
    pl->h2x_limbo = h->next;
    h->next = pl->h2x_spare;
    pl->h2x_spare = h;
  }
  h2c_t *hc;
  while ((hc = pl->h2_due) != NULL) { /* a flush may put connections on the list again: taken from its head */
    pl->h2_due = hc->due_next;
    hc->due = 0;
    h2c_flush(hc);
  }
}

static void h2c_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  h2c_t *hc = h->data;
  *buf = uv_buf_init(hc->pool->rbuf, sizeof hc->pool->rbuf);
}

/* What the feed passed on goes out after the feed, so that an answer is complete (and recorded, px_done) before
 * its last bytes leave, as on the HTTP/1.1 path: each client connection's step is asked for once the loop's
 * events are through (cb__conn_after_soon), so the answers of many streams to one client leave together. */
static void h2c_write_clients(h2c_t *hc) {
  for (h2x_t *h = hc->xs; h != NULL && !hc->closing; h = h->next) {
    if (!h->dirty) continue;
    h->dirty = 0;
    if (h->x != NULL && h->x->state == PX_HEAD) cb__conn_after_soon(h->x->r->conn);
  }
}

/* Every stream of a connection whose TLS handshake failed: 502 with the reason (as cb__px_fail words it). */
static void h2c_tls_failed(h2c_t *hc, const char *why) {
  size_t n = strlen(why);
  for (h2x_t *h = hc->xs; h != NULL; h = h->next)
    if (h->x != NULL && h->x->detail == NULL && (h->x->detail = malloc(n + 1)) != NULL) memcpy(h->x->detail, why, n + 1);
  hc->tls_bad = 1;
  h2c_fail_all(hc, CB__UPERR_TLS);
  h2c_close(hc);
}

/* https: the ciphertext read goes into the session; the handshake steps (ALPN must have chosen h2), then the
 * plaintext is fed as a cleartext read's bytes are. 0 to go on, 1 when the connection closed. */
static int h2c_tls_read(h2c_t *hc, const char *p, size_t n, int *err) {
  if (cb_ctls_put(&hc->ssl, p, n) != 0) {
    h2c_tls_failed(hc, "out of memory");
    return 1;
  }
  if (hc->ssl.hs_pending) {
    int rc = cb_ctls_handshake(&hc->ssl);
    int ferr = h2c_tls_out(hc);
    if (rc < 0) {
      char why[160];
      cb_ctls_why(&hc->ssl, 0, why, sizeof why);
      h2c_tls_failed(hc, why);
      return 1;
    }
    if (ferr != 0) {
      h2c_close(hc);
      return 1;
    }
    if (rc == 0) return 0;
    const char *version, *cipher, *alpn;
    unsigned alpn_len = 0;
    cb_ctls_params(&hc->ssl, &version, &cipher, &alpn, &alpn_len);
    if (alpn == NULL || alpn_len != 2 || memcmp(alpn, "h2", 2) != 0) {
      h2c_tls_failed(hc, "the upstream did not choose h2 by ALPN");
      return 1;
    }
  }
  for (;;) {
    ssize_t k = cb_ctls_read(&hc->ssl, hc->pool->ptbuf, sizeof hc->pool->ptbuf);
    if (k == 0) break;
    if (k < 0) { /* close_notify, an alert, a record that does not decrypt: what was in flight is cut */
      hc->tls_bad = 1;
      h2c_close(hc);
      return 1;
    }
    hc->busy = 1;
    *err = cb_ch2_feed(&hc->s, hc->pool->ptbuf, (size_t)k);
    hc->busy = 0;
    if (*err || hc->closing) break;
  }
  if (!hc->closing && h2c_tls_out(hc) != 0) hc->tls_bad = 1; /* a KeyUpdate's answer */
  return 0;
}

/* The upstream closed the connection (no GOAWAY told which streams it saw): a request whose HEADERS still
 * waited in the session never reached it (the turn's batch had not gone out, or the socket's queue was full),
 * so it goes again on a new connection, once, as a refused one does (st_close); the others are cut. */
static void h2c_retry_waiting(h2c_t *hc) {
  for (;;) {
    h2x_t *h = hc->xs;
    while (h != NULL && !(h->attached && cb_ch2_waiting(&hc->s, h->id))) h = h->next;
    if (h == NULL) return;
    st_close(h, CB_CH2_E_REFUSED); /* takes h off hc->xs */
  }
}

static void h2c_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  h2c_t *hc = (h2c_t *)st;
  if (n == 0 || hc->closing) return;
  if (n < 0) { /* the upstream closed or reset: what was in flight is cut */
    if (hc->tls && hc->ssl.hs_pending && hc->xs != NULL) {
      h2c_tls_failed(hc, n == UV_EOF ? "connection closed" : "connection reset");
      return;
    }
    hc->tls_bad = 1;
    h2c_retry_waiting(hc);
    h2c_close(hc);
    return;
  }
  int err = 0;
  if (hc->tls) {
    if (h2c_tls_read(hc, buf->base, (size_t)n, &err)) return;
  } else {
    hc->busy = 1;
    err = cb_ch2_feed(&hc->s, buf->base, (size_t)n);
    hc->busy = 0;
  }
  h2c_write_clients(hc);
  if (hc->closing) return;
  if (err) {
    h2c_end(hc, err == CB_CH2_E_NOMEM ? CB__UPERR_NO_MEMORY : CB__UPERR_BAD_RESPONSE);
    return;
  }
  uint32_t max = cb_ch2_max_streams(&hc->s);
  if (max != 0) hc->up->h2_max = max;
  h2c_flush(hc);
  /* nghttp2 may find the upstream's frames wrong only as it writes (its GOAWAY for them): bad_response too. */
  if (hc->s.bad) h2c_end(hc, CB__UPERR_BAD_RESPONSE);
  else if (cb_ch2_done(&hc->s)) h2c_end(hc, CB__UPERR_RESET);
}

static void h2c_connected(uv_connect_t *req, int status) {
  h2c_t *hc = req->data;
  if (hc->closing) return;
  if (status != 0) {
    h2c_fail_all(hc, status == UV_ECONNREFUSED ? CB__UPERR_REFUSED
                     : status == UV_ETIMEDOUT  ? CB__UPERR_TIMEOUT
                                               : CB__UPERR_CONNECT);
    h2c_close(hc);
    return;
  }
  hc->connected = 1;
  if (uv_read_start((uv_stream_t *)&hc->tcp, h2c_alloc, h2c_read) != 0) {
    h2c_close(hc);
    return;
  }
  if (hc->tls) { /* the ClientHello; the session's preface waits for the handshake's end */
    if (cb_ctls_handshake(&hc->ssl) < 0 || h2c_tls_out(hc) != 0) {
      char why[160];
      cb_ctls_why(&hc->ssl, 0, why, sizeof why);
      h2c_tls_failed(hc, why);
    }
    return;
  }
  h2c_flush(hc);
}

static h2c_t *h2c_open(pool_t *pl, upstream_t *u, const cb__proxy_t *p) {
  h2c_t *hc = malloc(sizeof *hc);
  if (hc == NULL) return NULL;
  memset(hc, 0, offsetof(h2c_t, head));
  cb_ch2_limits_t lim = {.max_head = PROXY_MAX_HEAD, .max_headers = PROXY_MAX_HEADERS,
                         .conn_window = H2_CONN_WINDOW};
  if (pl->h2_small == NULL) pl->h2_small = cb__h2_small_new(); /* NULL (out of memory): blocks from malloc */
  cb__h2_mem_init(&hc->mem, pl->h2_small);
  hc->pool = pl;
  if (cb_ch2_init(&hc->s, &session_cb, hc, &lim, hc->head, sizeof hc->head, &hc->mem.mem) != 0) {
    cb__h2_mem_free(&hc->mem);
    free(hc);
    return NULL;
  }
  pl->h2_sessions++;
  if (p->tls) { /* https: the stub's context (ALPN h2), the last session this upstream gave offered again */
    if (cb_ctls_start(&hc->ssl, p->ctx, p->host, !p->opts.insecure, &u->sess) != 0) {
      cb_ctls_free(&hc->ssl);
      h2c_session_free(hc);
      free(hc);
      return NULL;
    }
    hc->tls = 1;
  }
  cb_ch2_assume_max_streams(&hc->s, u->h2_max);
  hc->up = u;
  uv_tcp_init(&pl->w->loop, &hc->tcp);
  uv_timer_init(&pl->w->loop, &hc->timer);
  hc->tcp.data = hc;
  hc->timer.data = hc;
  hc->connect.data = hc;
  hc->next = u->h2;
  if (u->h2) u->h2->prev = hc;
  u->h2 = hc;
  u->nh2++;
  CB__STAT_INC(pl->w, proxy_upstream_connects);
  uv_tcp_nodelay(&hc->tcp, 1);
  if (uv_tcp_connect(&hc->connect, &hc->tcp, (const struct sockaddr *)&u->addr, h2c_connected) != 0) {
    h2c_close(hc);
    return NULL;
  }
  return hc;
}

/* A connection for one more stream: the newest that can take it (not for a retry, which wants a fresh one),
 * else a new one, else (PROXY_MAX_H2 open) the newest still taking streams, where it waits for a slot. */
static h2c_t *h2c_for(pool_t *pl, upstream_t *u, const cb__proxy_t *p, int fresh) {
  if (!fresh)
    for (h2c_t *hc = u->h2; hc; hc = hc->next)
      if (cb_ch2_can_submit(&hc->s)) {
        CB__STAT_INC(pl->w, proxy_upstream_reused);
        return hc;
      }
  if (u->nh2 < PROXY_MAX_H2) return h2c_open(pl, u, p);
  for (h2c_t *hc = u->h2; hc; hc = hc->next)
    if (!hc->s.goaway && !hc->s.bad) {
      CB__STAT_INC(pl->w, proxy_upstream_reused);
      return hc;
    }
  return NULL;
}

/* ---- the handler ---- */

static void h2_forward(px_t *x) {
  cb__req_t *r = x->r;
  pool_t *pl = cb__px_pool(r->conn->w);
  upstream_t *u = pl && !pl->closed ? cb__px_upstream(pl, x->p) : NULL;
  h2c_t *hc = u ? h2c_for(pl, u, x->p, x->retried) : NULL;
  h2x_t *h = hc ? h2x_take(pl) : NULL;
  if (h == NULL) {
    cb__px_fail(x, CB__UPERR_CONNECT);
    return;
  }
  cb__px_h2_fields_t f;
  char stack_target[1024], *target = NULL;
  size_t tn = 0;
  int nf = cb__px_h2_fields(x, &f);
  if (nf >= 0) target = cb__px_target(x, stack_target, sizeof stack_target, &tn);
  int32_t id = -1;
  if (nf >= 0 && target != NULL) {
    cb_ch2_req_t q = {.method = r->method_str, .method_len = r->method_len, .path = target, .path_len = tn,
                      .authority = x->p->authority, .authority_len = x->p->authority_len, .headers = f.fields,
                      .nheaders = nf, .has_body = !x->req_ended || x->hold_len > x->hold_off, .https = x->p->tls};
    id = cb_ch2_submit(&hc->s, &q, h);
  }
  if (nf >= 0) cb__px_h2_fields_free(&f);
  if (target != stack_target) free(target);
  if (id < 0) {
    h2x_drop(pl, h);
    if (hc->xs == NULL) uv_timer_start(&hc->timer, idle_fire, PROXY_IDLE_MS, 0);
    cb__px_fail(x, CB__UPERR_CONNECT);
    return;
  }
  h->x = x;
  h->hc = hc;
  h->id = id;
  h->attached = 1;
  h->next = hc->xs;
  if (hc->xs) hc->xs->prev = h;
  hc->xs = h;
  x->h2 = h;
  x->head_sent = 1;
  x->state = PX_SENT;
  uv_timer_stop(&hc->timer);
  h2x_time(h, x->p->timeout_ms);
  h2c_flush_soon(hc);
}

static void h2_delay_done(cb__req_t *r) { h2_forward(PX(r)); }

/* The stream opens once it is known whether the request has a body (a length, a first body byte, or its end),
 * as the HTTP/1.1 upstream's head waits for its framing: a request without one ends with its HEADERS. */
static void h2_head(cb__req_t *r) {
  px_t *x = cb__px_new(r);
  if (x == NULL) return;
  if (x->p->delay_ms > 0) return; /* the body is held; the forward begins delay_ms after the request ends */
  if (r->content_length >= 0) h2_forward(x);
}

static void h2_body(cb__req_t *r, const char *p, size_t n) {
  px_t *x = PX(r);
  if (x == NULL || x->state == PX_ENDED || n == 0) return;
  if (cb__px_hold(x, p, n) != 0) {
    if (x->h2) h2x_release(x->h2);
    cb__px_fail(x, CB__UPERR_NO_MEMORY);
    return;
  }
  if (x->p->delay_ms > 0) return;
  if (x->state == PX_WAIT && x->h2 == NULL) {
    h2_forward(x);
  } else if (x->h2 != NULL && x->h2->hc != NULL) {
    cb_ch2_resume(&x->h2->hc->s, x->h2->id);
    h2c_flush_soon(x->h2->hc);
  }
}

static void h2_end(cb__req_t *r) {
  px_t *x = PX(r);
  if (x == NULL || x->state == PX_ENDED) return;
  x->req_ended = 1;
  if (x->p->delay_ms > 0) {
    r->delay_ms = x->p->delay_ms;
    if (cb__req_timer(r, x->p->delay_ms, h2_delay_done) != 0) cb__px_fail(x, CB__UPERR_NO_MEMORY);
    return;
  }
  if (x->state == PX_WAIT && x->h2 == NULL) {
    h2_forward(x);
  } else if (x->h2 != NULL && x->h2->hc != NULL) {
    cb_ch2_resume(&x->h2->hc->s, x->h2->id);
    h2c_flush_soon(x->h2->hc);
  }
}

static void h2_writable(cb__req_t *r) {
  px_t *x = PX(r);
  if (x == NULL) return;
  if (x->state == PX_ENDED) {
    if (cb__fault_pacing(r)) cb__fault_writable(r);
    return;
  }
  r->blocked = 0;
  x->blocked = 0;
  h2x_t *h = x->h2;
  if (h != NULL && h->hc != NULL) { /* the window opens again by what the client's output took */
    cb_ch2_consume(&h->hc->s, h->id, h->unconsumed);
    h->unconsumed = 0;
    h2x_time(h, x->p->timeout_ms);
    h2c_flush_soon(h->hc);
  }
}

static void h2_free(cb__req_t *r) {
  px_t *x = PX(r);
  if (x == NULL) return;
  if (x->h2 != NULL) h2x_release(x->h2);
  cb__px_free(x);
}

const cb__handler_t cb__h_proxy_h2 = {
    .on_head = h2_head, .on_body = h2_body, .on_end = h2_end, .on_writable = h2_writable, .on_free = h2_free};

void cb__proxy_h2_close_all(pool_t *pl) {
  for (upstream_t *u = pl->ups; u; u = u->next)
    while (u->h2) h2c_close(u->h2);
  cb__proxy_h2_turn_end(pl); /* the limbo's streams join the spares */
  cb__proxy_h2_trim(pl);     /* whose timers close (then they are freed) */
}

void cb__proxy_h2_trim(pool_t *pl) {
  while (pl->h2x_spare != NULL) {
    h2x_t *h = pl->h2x_spare;
    pl->h2x_spare = h->next;
    pl->nh2x_spare--;
    uv_close((uv_handle_t *)&h->timer, h2x_closed);
  }
}
