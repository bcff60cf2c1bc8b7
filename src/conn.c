/* One connection: the socket's read and write path, its timeouts and its close. The bytes go to a protocol
 * (c->ops): first to detection, which tells the HTTP/2 client preface from an HTTP/1.x request. */
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static const char h2_preface[24] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static void on_poll(uv_poll_t *h, int status, int events);
static void on_timer(uv_timer_t *t);
static void update_poll(cb__conn_t *c);

cb__conn_t *cb__conn_new(cb__worker_t *w, int fd, cb__sink_fn_t sink, void *arg) {
  cb__conn_t *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  cb__outq_init(&c->out, &w->caches);
  c->w = w;
  c->fd = fd;
  c->sink = sink;
  c->sink_arg = arg;
  c->proto = CB__PROTO_DETECT;
  if (fd >= 0) {
    if (uv_poll_init(&w->loop, &c->poll, fd) != 0) {
      free(c);
      return NULL;
    }
    c->poll.data = c;
  }
  uv_timer_init(&w->loop, &c->timer);
  c->timer.data = c;
  c->head_start = uv_now(&w->loop);
  c->id = __atomic_add_fetch(w->conn_ids, 1, __ATOMIC_RELAXED);
  c->next = w->conns;
  if (w->conns) w->conns->prev = c;
  w->conns = c;
  w->nconns++;
  CB__STAT_INC(w, conns_accepted);
  /* A fresh connection has until the header timeout to send its first request. */
  c->timer_mode = CB__TIMER_HEADER;
  uv_timer_start(&c->timer, on_timer, w->cfg->header_timeout_ms, 0);
  return c;
}

int cb__conn_accept(cb__worker_t *w, int fd, const struct sockaddr *peer) {
  cb__conn_t *c = cb__conn_new(w, fd, NULL, NULL);
  if (c == NULL) return UV_ENOMEM;
  if (peer->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)peer;
    c->peer_family = AF_INET;
    c->peer_port = ntohs(a->sin_port);
    memcpy(c->peer_addr, &a->sin_addr, 4);
  } else if (peer->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)peer;
    c->peer_family = AF_INET6;
    c->peer_port = ntohs(a->sin6_port);
    memcpy(c->peer_addr, &a->sin6_addr, 16);
  }
  update_poll(c);
  return 0;
}

/* ---- close ---- */

static void run_releases(cb__conn_t *c) {
  uint32_t n = c->rel_n;
  c->rel_n = 0;
  if (n) c->rel_fn(c->rel_arg, n);
}

void cb__conn_release_after(cb__conn_t *c, cb__release_fn fn, void *arg) {
  if (c->out.bytes == 0) { /* nothing queued refers to anything */
    fn(arg, 1);
    return;
  }
  if (c->rel_n > 0 && (c->rel_fn != fn || c->rel_arg != arg)) {
    /* Another pending release (a table swap happened between two requests): it goes into the queue, behind
     * everything queued now, which is later than its mark, never earlier. */
    cb__outq_call(&c->out, c->rel_fn, c->rel_arg, c->rel_n);
    c->rel_n = 0;
  }
  c->rel_fn = fn;
  c->rel_arg = arg;
  c->rel_n++;
  c->rel_mark = c->out.written + c->out.bytes;
}

static void free_conn(cb__conn_t *c) {
  cb__worker_t *w = c->w;
  /* destroy releases (and so journals) the requests still held before close(2) sends the FIN, or the RST of
   * cb__conn_abort: the peer cannot see the end of a request that is not in the journal yet. */
  if (c->ops && c->ops->destroy) c->ops->destroy(c);
  run_releases(c);
  cb__outq_free(&c->out);
  cb__echo_release(c, c->out.released);
  if (c->fd >= 0) close(c->fd);
  if (c->prev) c->prev->next = c->next;
  else w->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  w->nconns--;
  CB__STAT_INC(w, conns_closed);
  if (c->freed_flag) *c->freed_flag = 1;
  free(c);
  cb__worker_conn_gone(w);
}

static void on_handle_closed(uv_handle_t *h) {
  cb__conn_t *c = h->data;
  if (--c->pending_close == 0) free_conn(c);
}

void cb__conn_close(cb__conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  c->pending_close = 1;
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  if (c->fd >= 0) {
    c->pending_close++;
    uv_close((uv_handle_t *)&c->poll, on_handle_closed);
  }
}

/* The sending side is shut down once everything queued is written; the peer then reads our last response
 * and its EOF instead of a reset caused by unread input. We drain its input for a short while. */
static void start_linger(cb__conn_t *c) {
  c->lingering = 1;
  if (c->fd >= 0) shutdown(c->fd, SHUT_WR);
  c->timer_mode = CB__TIMER_LINGER;
  uv_timer_start(&c->timer, on_timer, CB__LINGER_MS, 0);
  if (c->eof || c->fd < 0) cb__conn_close(c);
}

void cb__conn_close_linger(cb__conn_t *c) {
  if (c->close_after_flush) return;
  c->close_after_flush = 1;
  /* Whatever ends the responses still open (the bytes queued last, the FIN) is written after this call, in
   * this event or a later one: their requests go into the journal first, so that a client that sees the end
   * and then reads the journal finds them. */
  if (c->ops && c->ops->record) c->ops->record(c);
}

void cb__conn_abort(cb__conn_t *c) {
  if (c->closing) return;
  if (c->fd >= 0) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* close(2) then sends RST and drops unsent bytes */
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  cb__conn_close(c);
}

void cb__conn_stop(cb__conn_t *c) {
  if (c->closing) return;
  if (c->ops && c->ops->stop) {
    c->ops->stop(c);
    cb__conn_after(c);
  } else {
    cb__conn_close(c); /* nothing received yet */
  }
}

void cb__conn_head_begin(cb__conn_t *c) { c->head_start = uv_now(&c->w->loop); }

void cb__conn_progress(cb__conn_t *c) { c->last_activity = uv_now(&c->w->loop); }

/* ---- the echo budget ---- */

static size_t times(size_t a, size_t k) { return a > SIZE_MAX / k ? SIZE_MAX : a * k; }

int cb__echo_hold(cb__conn_t *c, size_t n) {
  if (n == 0) return 0;
  size_t body = c->w->cfg->max_body_bytes;
  if (n > times(body, CB__ECHO_CONN_BODIES) - c->echo_held) return UV_ENOBUFS;
  uint64_t total = __atomic_add_fetch(c->w->echo_total, (uint64_t)n, __ATOMIC_RELAXED);
  if (total > times(body, CB__ECHO_SERVER_BODIES)) {
    __atomic_sub_fetch(c->w->echo_total, (uint64_t)n, __ATOMIC_RELAXED);
    return UV_ENOBUFS;
  }
  c->echo_held += n;
  return 0;
}

void cb__echo_release(cb__conn_t *c, size_t n) {
  if (n == 0) return;
  c->echo_held -= n;
  __atomic_sub_fetch(c->w->echo_total, (uint64_t)n, __ATOMIC_RELAXED);
}

/* ---- the after-event step: deferred protocol work, flush, poll and timer ---- */

static void flush(cb__conn_t *c) {
  if (c->out.bytes == 0) {
    c->write_blocked = 0;
    return;
  }
  ssize_t n = cb__outq_flush(&c->out, c->fd, c->sink, c->sink_arg);
  if (n < 0) {
    /* EPIPE or ECONNRESET: the peer left before reading its response. */
    CB__STAT_INC(c->w, resets);
    cb__conn_close(c);
    return;
  }
  CB__STAT_ADD(c->w, bytes_written, n);
  c->write_blocked = c->out.bytes > 0;
  if (c->out.released > 0) { /* echo buffers that left with this write */
    cb__echo_release(c, c->out.released);
    c->out.released = 0;
  }
  if (c->rel_n > 0 && c->out.written >= c->rel_mark) run_releases(c);
  /* All written: the storage goes back to the worker; or, on a connection in idle mode whose protocol rests,
   * at the rest step (CB__REST_MS without an event, on_timer), so that a busy keep-alive connection keeps it
   * from one response to the next. The other modes have no rest step. */
  if (c->out.bytes == 0 && !(c->timer_mode == CB__TIMER_IDLE && c->ops && c->ops->rest)) cb__outq_rest(&c->out);
}

static void update_poll(cb__conn_t *c) {
  if (c->fd < 0 || c->closing) return;
  int ev = 0;
  /* Reading stops while the peer is not reading our responses (no unbounded buffering), or while the
   * protocol holds input it cannot parse yet. Lingering keeps reading to drain. */
  if (!c->eof && (c->lingering || (!c->read_paused && c->out.bytes < CB__OUT_HIGH_WATER))) ev |= UV_READABLE;
  if (c->write_blocked) ev |= UV_WRITABLE;
  if (ev == c->poll_events) return;
  c->poll_events = (uint8_t)ev;
  if (ev == 0)
    uv_poll_stop(&c->poll);
  else
    uv_poll_start(&c->poll, ev, on_poll);
}

static void update_timer(cb__conn_t *c) {
  if (c->lingering) return;
  int mode = c->ops ? c->ops->timer_mode(c) : CB__TIMER_HEADER;
  /* Output that cannot leave is a stalled peer: the idle timeout bounds how long we wait for it. */
  if (mode == CB__TIMER_HELD && c->write_blocked) mode = CB__TIMER_IDLE;
  if (mode == CB__TIMER_HEADER) {
    if (c->timer_mode != CB__TIMER_HEADER) {
      c->timer_mode = CB__TIMER_HEADER;
      c->head_start = uv_now(&c->w->loop);
      uv_timer_start(&c->timer, on_timer, c->w->cfg->header_timeout_ms, 0);
    }
  } else if (mode == CB__TIMER_IDLE || mode == CB__TIMER_STALL) {
    /* Activity (idle) or progress (stall, cb__conn_progress) moves the deadline; the timer itself is only
     * started when none runs, and on firing it re-arms for what is left (on_timer). That keeps timer-heap
     * work off the per-request path. */
    if (mode == CB__TIMER_IDLE || c->timer_mode != CB__TIMER_STALL) c->last_activity = uv_now(&c->w->loop);
    /* An idle connection rests after CB__REST_MS (on_timer); after a rest, the next event makes it busy
     * again and it rests again once idle. */
    if (c->timer_mode != mode || (mode == CB__TIMER_IDLE && c->rested)) {
      uint64_t wait = c->w->cfg->idle_timeout_ms;
      if (mode == CB__TIMER_IDLE && c->ops && c->ops->rest && wait > CB__REST_MS) wait = CB__REST_MS;
      c->timer_mode = (uint8_t)mode;
      c->rested = 0;
      uv_timer_start(&c->timer, on_timer, wait, 0);
    }
  } else if (c->timer_mode != CB__TIMER_HELD) {
    c->timer_mode = CB__TIMER_HELD;
    uv_timer_stop(&c->timer);
  }
}

/* Rounds of "produce, then write" per event before a connection yields to the others on its worker. */
#define PRODUCE_ROUNDS 8

void cb__conn_after(cb__conn_t *c) {
  for (int round = 0;; round++) {
    if (c->closing) return;
    if (c->ops && c->ops->after) c->ops->after(c);
    if (c->closing) return;
    flush(c);
    if (c->closing) return;
    if (c->abort_after_flush && c->out.bytes == 0) { /* a reset fault: what it sent has left */
      cb__conn_abort(c);
      return;
    }
    /* Below the low-water mark a waiting generator may produce more; then that is written too. */
    if (c->out.bytes >= CB__OUT_LOW_WATER || c->ops == NULL || c->ops->writable == NULL) break;
    if (round == PRODUCE_ROUNDS) {
      /* Enough for this turn: ask for a writable event (the socket is writable at once), so that the loop
       * serves the worker's other connections before this one goes on. */
      if (c->ops->writable(c, 0)) c->write_blocked = 1;
      break;
    }
    if (!c->ops->writable(c, 1)) break;
  }
  if (c->close_after_flush && c->out.bytes == 0 && !c->lingering) {
    start_linger(c);
    if (c->closing) return;
  }
  update_poll(c);
  update_timer(c);
}

/* ---- input ---- */

static int detect(cb__conn_t *c, const char *data, size_t len) {
  /* Hold bytes back while they are a prefix of the HTTP/2 preface, so both protocols see the whole start. */
  size_t take = len < sizeof h2_preface - c->detect_len ? len : sizeof h2_preface - c->detect_len;
  memcpy(c->detect + c->detect_len, data, take);
  size_t have = c->detect_len + take;
  int is_prefix = memcmp(c->detect, h2_preface, have) == 0;
  if (is_prefix && have < sizeof h2_preface) {
    c->detect_len = have;
    return 0;
  }
  int err;
  /* An h2c-only listener (enable_h1 0) gives anything to HTTP/2, which answers a bad preface with
   * GOAWAY(PROTOCOL_ERROR) and closes. The shared port can only answer it as HTTP/1.1 would: a broken
   * preface is a request line `PRI * HTTP/2.0` there, a 400 (docs/wire.md). */
  if ((is_prefix || !c->w->cfg->enable_h1) && c->w->cfg->enable_h2 && cb__h2_available()) {
    CB__STAT_INC(c->w, conns_by_proto[CB_PROTO_H2C_PRIOR]);
    err = cb__h2_attach_prior(c);
  } else {
    CB__STAT_INC(c->w, conns_by_proto[CB_PROTO_HTTP1]);
    err = cb__h1_attach(c);
  }
  if (err) return -1;
  /* The held-back bytes first, then the rest of this read. */
  if (c->detect_len > 0 && c->ops->read(c, c->detect, c->detect_len) != 0) return -1;
  c->detect_len = 0;
  if (c->closing) return 0;
  return c->ops->read(c, data, len);
}

static void input(cb__conn_t *c, const char *data, size_t len) {
  CB__STAT_ADD(c->w, bytes_read, len);
  if (c->lingering) return; /* drained and dropped */
  int rc = c->ops ? c->ops->read(c, data, len) : detect(c, data, len);
  if (rc != 0) cb__conn_close(c);
}

void cb__conn_input(cb__conn_t *c, const char *data, size_t len) {
  if (c->closing) return;
  input(c, data, len);
  cb__conn_after(c);
}

void cb__conn_input_eof(cb__conn_t *c) {
  if (c->closing) return;
  c->eof = 1;
  if (c->lingering) {
    cb__conn_close(c);
    return;
  }
  if (c->ops && c->ops->eof) {
    c->ops->eof(c);
  } else {
    cb__conn_close(c);
  }
  cb__conn_after(c);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  cb__conn_t *c = h->data;
  if (c->closing) return;
  if (status < 0) {
    CB__STAT_INC(c->w, resets);
    cb__conn_close(c);
    return;
  }
  if (events & UV_READABLE) {
    ssize_t n;
    do n = cb__sys_read(c->fd, c->w->rbuf, sizeof c->w->rbuf);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      input(c, c->w->rbuf, (size_t)n);
    } else if (n == 0) {
      cb__conn_input_eof(c);
      return;
    } else if (errno != EAGAIN) {
      if (!(c->ops == NULL || c->lingering)) CB__STAT_INC(c->w, resets);
      cb__conn_close(c);
      return;
    }
  }
  cb__conn_after(c);
}

/* Idle for CB__REST_MS: the protocol gives back its state where it can, the output queue its storage. */
static void rest(cb__conn_t *c) {
  c->rested = 1;
  if (c->ops && c->ops->rest) c->ops->rest(c);
  cb__outq_rest(&c->out);
}

static void on_timer(uv_timer_t *t) {
  cb__conn_t *c = t->data;
  if (c->closing) return;
  int mode = c->timer_mode;
  if (mode == CB__TIMER_LINGER) {
    cb__conn_close(c);
    return;
  }
  if (mode == CB__TIMER_IDLE || mode == CB__TIMER_STALL || mode == CB__TIMER_HEADER) {
    /* The deadline may have moved since the timer started (activity, progress, a new head): wait for the
     * rest. */
    int head = mode == CB__TIMER_HEADER;
    uint64_t since = uv_now(&c->w->loop) - (head ? c->head_start : c->last_activity);
    uint64_t limit = head ? c->w->cfg->header_timeout_ms : c->w->cfg->idle_timeout_ms;
    if (since < limit) {
      uint64_t wait = limit - since;
      if (mode == CB__TIMER_IDLE && !c->rested && c->ops && c->ops->rest) {
        if (since >= CB__REST_MS)
          rest(c);
        else if (CB__REST_MS - since < wait)
          wait = CB__REST_MS - since;
      }
      uv_timer_start(&c->timer, on_timer, wait, 0);
      return;
    }
  }
  CB__STAT_INC(c->w, timeouts);
  if (c->ops && c->ops->timeout) {
    c->timer_mode = CB__TIMER_NONE;
    c->ops->timeout(c, mode);
    cb__conn_after(c);
  } else {
    cb__conn_close(c);
  }
}
