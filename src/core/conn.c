/* One connection: the read and write path over its transport (c->tr), its timeouts and its close. The bytes
 * go to a protocol (c->ops): first to the worker's first_ops (detection, proto/detect.c), which hands the
 * connection to HTTP/1.1 or HTTP/2. */
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/core.h"

static void on_ready(cb__conn_t *c, int status, int events);
static void on_timer(uv_timer_t *t);
static void update_poll(cb__conn_t *c);

cb__conn_t *cb__conn_new(cb__worker_t *w, const cb__tport_t *tr) {
  cb__conn_t *c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  cb__outq_init(&c->out, &w->caches);
  c->w = w;
  c->tr = *tr;
  c->proto = CB__PROTO_DETECT;
  c->ops = w->first_ops;
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

int cb__conn_accept(cb__worker_t *w, const cb__tport_t *tr, const struct sockaddr *peer) {
  cb__conn_t *c = cb__conn_new(w, tr);
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
  c->tr.ops->close(&c->tr, c->reset_on_close);
  if (c->after_queued) { /* closed before its after-step ran (only a close callback of this iteration can) */
    cb__conn_t **at = &w->after_soon;
    while (*at != c) at = &(*at)->after_next;
    *at = c->after_next;
  }
  if (c->prev) c->prev->next = c->next;
  else w->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  w->nconns--;
  CB__STAT_INC(w, conns_closed);
  if (c->freed_flag) *c->freed_flag = 1;
  free(c);
  cb__worker_conn_gone(w);
}

static void on_handle_closed(uv_handle_t *h) { free_conn(h->data); }

void cb__conn_close(cb__conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  /* Out of the epoll set before close(2) (free_conn, after this iteration's events): an event for it could
   * otherwise outlive the connection, should its socket still be open elsewhere (a fork's copy). Events of
   * this iteration already read are skipped (on_ready: closing). */
  if (c->poll_events != 0) {
    epoll_ctl(c->w->epfd, EPOLL_CTL_DEL, c->tr.fd, NULL);
    c->poll_events = 0;
  }
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

/* The sending side is shut down once everything queued is written; the peer then reads our last response
 * and its EOF instead of a reset caused by unread input. We drain its input for a short while. */
static void start_linger(cb__conn_t *c) {
  c->lingering = 1;
  c->tr.ops->shutdown(&c->tr);
  c->timer_mode = CB__TIMER_LINGER;
  uv_timer_start(&c->timer, on_timer, CB__LINGER_MS, 0);
  if (c->eof || c->tr.fd < 0) cb__conn_close(c);
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
  c->reset_on_close = 1; /* the transport's close then sends RST and drops unsent bytes */
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
  c->w->flushes++; /* before the write: a test that has read the bytes then sees the count */
  ssize_t n = cb__outq_flush(&c->out, &c->tr);
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

/* Reading stops while the peer is not reading our responses (no unbounded buffering), or while the protocol
 * holds input it cannot parse yet. Lingering keeps reading to drain. */
static int reading(const cb__conn_t *c) {
  return !c->eof && (c->lingering || (!c->read_paused && c->out.bytes < CB__OUT_HIGH_WATER));
}

static void update_poll(cb__conn_t *c) {
  if (c->tr.fd < 0 || c->closing) return;
  int ev = reading(c) ? UV_READABLE : 0;
  /* Input the transport holds (TLS records read ahead of a full buffer) is read at the next turn of the loop:
   * the socket is writable at once, as for a generator's next round (cb__conn_after). */
  if (c->write_blocked || c->tr.want_write || c->tr.held || (ev && c->tr.buffered)) ev |= UV_WRITABLE;
  if (ev == c->poll_events) return;
  /* Nothing to watch: out of the set (an empty mask would still report a hang-up, again and again). */
  int op = ev == 0 ? EPOLL_CTL_DEL : c->poll_events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  struct epoll_event e = {.events = (ev & UV_READABLE ? EPOLLIN : 0u) | (ev & UV_WRITABLE ? EPOLLOUT : 0u),
                          .data.ptr = c};
  if (epoll_ctl(c->w->epfd, op, c->tr.fd, &e) != 0) { /* ENOMEM or ENOSPC (max_user_watches): no events */
    cb__conn_close(c);
    return;
  }
  c->poll_events = (uint8_t)ev;
}

static void update_timer(cb__conn_t *c) {
  if (c->lingering) return;
  int mode = c->ops->timer_mode(c);
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
      int held = c->timer_mode == CB__TIMER_HELD;
      c->timer_mode = (uint8_t)mode;
      c->rested = 0;
      /* Back from a held request (an Erlang handler's, a proxy's or a delay's answer came): the timer left
       * running when it was held fires early enough, and on_timer waits for the rest. */
      if (!(held && uv_is_active((uv_handle_t *)&c->timer) && uv_timer_get_due_in(&c->timer) <= wait))
        uv_timer_start(&c->timer, on_timer, wait, 0);
    }
  } else if (c->timer_mode != CB__TIMER_HELD) {
    /* A request the handler holds is not timed. The timer is left to run (on_timer ignores it) rather than
     * stopped: a deferred answer per request would otherwise stop and start it each time. */
    c->timer_mode = CB__TIMER_HELD;
  }
}

/* Rounds of "produce, then write" per event before a connection yields to the others on its worker. */
#define PRODUCE_ROUNDS 8

void cb__conn_after(cb__conn_t *c) {
  c->afters++;
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
  /* What the transport gathered in this event (TLS records: the handshake's last messages, the response, the
   * close_notify) leaves in one write. */
  if (c->tr.ops->push != NULL && c->tr.ops->push(&c->tr) != 0) {
    if (!c->lingering) CB__STAT_INC(c->w, resets);
    cb__conn_close(c);
    return;
  }
  update_poll(c);
  update_timer(c);
}

void cb__conn_after_soon(cb__conn_t *c) {
  if (c->after_queued || c->closing) return;
  c->after_queued = 1;
  c->after_next = c->w->after_soon;
  c->w->after_soon = c;
}

void cb__worker_run_afters(cb__worker_t *w) {
  cb__conn_t *c;
  while ((c = w->after_soon) != NULL) {
    w->after_soon = c->after_next;
    c->after_queued = 0;
    cb__conn_after(c);
  }
}

/* ---- input ---- */

static void input(cb__conn_t *c, const char *data, size_t len) {
  CB__STAT_ADD(c->w, bytes_read, len);
  if (c->lingering) return; /* drained and dropped */
  int rc = c->ops->read(c, data, len);
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

/* ---- Readiness ----
 *
 * The worker's epoll set holds every connection that waits for something (update_poll), with the connection as
 * the event's data, level-triggered as libuv's own. The worker's loop waits on it (worker.c, cb__worker_turn)
 * and hands each event here. A connection closed by an earlier event of the same wait is skipped (closing): its
 * memory stays until libuv's close callbacks, which run after the wait's events. */
void cb__conn_ready(cb__conn_t *c, uint32_t e) {
  if (c->closing) return;
  /* As libuv's uv_poll_t: an error is UV_EBADF; a hang-up reports what the connection waits for. */
  if (e & EPOLLERR) {
    on_ready(c, UV_EBADF, 0);
    return;
  }
  int events = (e & EPOLLIN ? UV_READABLE : 0) | (e & EPOLLOUT ? UV_WRITABLE : 0);
  if (e & EPOLLHUP) events |= c->poll_events;
  on_ready(c, 0, events);
}

static void on_ready(cb__conn_t *c, int status, int events) {
  if (c->closing) return;
  if (status < 0) {
    /* UV_EBADF for EPOLLERR: the peer's reset. After the peer's end (lingering) it is no reset of an
     * exchange: a TLS client that sent close_notify and closed resets the connection when our close_notify
     * reaches its closed socket. */
    if (!(c->proto == CB__PROTO_DETECT || c->lingering)) CB__STAT_INC(c->w, resets);
    cb__conn_close(c);
    return;
  }
  /* A transport that stopped reading until it could write (a TLS handshake message) reads again then, and one
   * that holds input read ahead reads it as soon as reading is on (update_poll). */
  if ((events & UV_READABLE) || (c->tr.want_write && (events & UV_WRITABLE)) || (c->tr.buffered && reading(c))) {
    ssize_t n = c->tr.ops->read(&c->tr, c->w->rbuf, sizeof c->w->rbuf);
    if (n > 0) {
      input(c, c->w->rbuf, (size_t)n);
    } else if (n == 0) {
      cb__conn_input_eof(c);
      return;
    } else if (n != UV_EAGAIN) {
      /* A reset before the protocol was known, or while draining, is no reset of an exchange. */
      if (!(c->proto == CB__PROTO_DETECT || c->lingering)) CB__STAT_INC(c->w, resets);
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

void cb__conn_rest_now(cb__conn_t *c) {
  if (c->closing || c->lingering) return;
  rest(c);
  cb__conn_after(c);
}

static void on_timer(uv_timer_t *t) {
  cb__conn_t *c = t->data;
  if (c->closing) return;
  int mode = c->timer_mode;
  if (mode == CB__TIMER_HELD) return; /* left running when the request was held (update_timer) */
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
