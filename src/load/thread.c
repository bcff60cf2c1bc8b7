/* One thread of cbench-load: one uv_loop_t and its connections.
 *
 * The schedule (open loop). Request k of connection g (global index, over all threads) is intended at
 *   t_start + (k * C + g) / rate
 * so the run's requests are spread evenly in time and over the C connections. A thread walks its own
 * connections' requests in intended order with a cursor; a timerfd in the loop (nanosecond resolution, where
 * libuv's timers have milliseconds) wakes the thread at the next intended time, every request that is due by
 * then is handed to its connection, and the timer is armed for the next one. A connection sends a due request
 * as soon as it has a free slot (depth); one that is behind (its answers are late, or it is reconnecting)
 * catches up by sending everything due as soon as it can. Latency is taken from the intended time (corrected:
 * what a client arriving on schedule would have waited) and from the actual send (uncorrected: service time).
 *
 * Closed loop: every connection keeps its depth of requests in flight; intended time = send time.
 *
 * The window: requests intended in [t_measure, t_end) are measured; the warm-up before it is not. At t_end no
 * new request is sent; answers still outstanding at t_drain (t_end + the timeout) are timeouts. Due requests
 * never sent are `unsent`. Answers that come between t_end and t_drain are `late`: answered, but in no second
 * of the timeline.
 *
 * Errors: a socket error or the peer's reset is `reset` for each request in flight (the peer closing with
 * requests in flight too); a malformed answer is `protocol`; an answer later than --timeout is `timeout`; a
 * failed connect is `connect` (per attempt); an answer with no request in flight is `unsolicited` and a failed
 * WebSocket handshake `upgrade` (per event, load.h). The connection is then closed and opened again (after 10 ms
 * when it had not been answered at all, so that a refusing server is not hammered in a tight loop).
 *
 * Memory against a hostile server: reading never queues output without a bound (load.h, CBL_OUT_HIGH), and a
 * write that completes runs the connection's step again, so output held back for the bound goes out as soon as
 * the socket takes it. Reading itself is not stopped while output waits: what reading can add is bounded, and a
 * client that stopped reading while its own requests wait for the socket would deadlock with a server that
 * stops reading while its answers wait. */
#include <errno.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "load.h"

#define TICK_MS 10
#define RETRY_NS (10ull * 1000000)

uint64_t cbl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cbl_buf_append(cbl_buf_t *b, const void *p, size_t n) {
  if (n == 0) return 0; /* an empty buffer has no block yet to point into */
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

uint64_t cbl_rand(cbl_thread_t *t) {
  /* xorshift64*: masks for WebSocket frames, nothing that needs to be unpredictable. */
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static bool open_loop(const cbl_thread_t *t) { return t->cfg->rate > 0; }

static uint64_t intended(const cbl_thread_t *t, uint64_t k, uint32_t g) {
  double idx = (double)k * (double)t->cfg->connections + (double)g;
  double off = idx * 1e9 / t->cfg->rate;
  /* At a low enough rate (--rate 1e-11) the offset passes what uint64_t holds, and converting it would be
   * undefined (x86-64 gives 0: every request due at the start, a schedule that never ends). 2^62 ns is a
   * century and a half, past the end of any run (at most two days): UINT64_MAX says so without overflow. */
  if (off >= 0x1p62) return UINT64_MAX;
  return t->run->t_start + (uint64_t)off;
}

static bool measured(const cbl_thread_t *t, uint64_t when) {
  return when >= t->run->t_measure && when < t->run->t_end;
}

static bool in_stats(const cbl_thread_t *t) { return t->now >= t->run->t_measure; }

static void conn_connect(cbl_conn_t *c);
static void conn_close(cbl_conn_t *c, bool clean);

/* ---- slots: the requests in flight ---- */

static cbl_req_t *slot_take(cbl_conn_t *c) {
  uint32_t i;
  if (c->free_slots) i = c->free_slots[--c->nfree];
  else i = (c->head + c->inflight) % (uint32_t)c->t->cfg->depth;
  c->inflight++;
  cbl_req_t *r = &c->reqs[i];
  r->used = true;
  r->status = 0;
  r->body_off = 0;
  return r;
}

static void slot_release(cbl_conn_t *c, cbl_req_t *r) {
  r->used = false;
  c->inflight--;
  if (c->free_slots) c->free_slots[c->nfree++] = (uint32_t)(r - c->reqs);
  else c->head = (c->head + 1) % (uint32_t)c->t->cfg->depth;
}

static void slots_reset(cbl_conn_t *c) {
  int depth = c->t->cfg->depth;
  c->head = 0;
  c->inflight = 0;
  for (int i = 0; i < depth; i++) c->reqs[i].used = false;
  if (c->free_slots) {
    c->nfree = (uint32_t)depth;
    for (int i = 0; i < depth; i++) c->free_slots[i] = (uint32_t)(depth - 1 - i);
  }
}

void cbl_req_done(cbl_conn_t *c, cbl_req_t *r, int status, uint64_t now) {
  cbl_thread_t *t = c->t;
  c->answered++;
  if (r->measured) {
    cbl_result_t *res = &t->res;
    res->counts.completed++;
    if (status == 0 || (status >= 200 && status < 300)) res->counts.ok++;
    if (status > 0 && status < CBL_MAX_STATUS) res->counts.status[status]++;
    uint64_t corrected = now - r->intended;
    cbl_hist_record(&res->corrected, corrected);
    cbl_hist_record(&res->uncorrected, now - r->sent);
    /* The timeline's seconds are those of the window: an answer that came after it (in the drain, within
     * --timeout) is counted as late, not in a second it did not come in. Within the window the second is below
     * nsec, the duration rounded up. */
    if (now >= t->run->t_end) {
      res->counts.late++;
    } else if (res->nsec) {
      uint64_t s = (now - t->run->t_measure) / 1000000000ull;
      cbl_hist_record(&res->second[s], corrected);
      res->second_done[s]++;
    }
  }
  slot_release(c, r);
}

void cbl_req_failed(cbl_conn_t *c, cbl_req_t *r, cbl_err_t kind) {
  if (r->measured) c->t->res.counts.errors[kind]++;
  slot_release(c, r);
}

/* Every request in flight on c ends with an error of this kind. */
static void fail_inflight(cbl_conn_t *c, cbl_err_t kind) {
  int depth = c->t->cfg->depth;
  for (int i = 0; i < depth && c->inflight; i++) {
    cbl_req_t *r = &c->reqs[i];
    if (!r->used) continue;
    if (r->measured) c->t->res.counts.errors[kind]++;
    r->used = false;
    c->inflight--;
  }
  slots_reset(c);
}

static void conn_fail(cbl_conn_t *c, cbl_err_t kind) {
  if (c->state != CBL_CONN_OPEN && c->state != CBL_CONN_CONNECTING) return;
  cbl_thread_t *t = c->t;
  if ((kind == CBL_ERR_CONNECT || kind == CBL_ERR_TLS) && in_stats(t) && t->sending) t->res.counts.errors[kind]++;
  if (kind == CBL_ERR_UNSOLICITED || kind == CBL_ERR_UPGRADE) {
    /* Counted once for the connection; a request in flight there is lost to a protocol error. */
    if (in_stats(t)) t->res.counts.errors[kind]++;
    kind = CBL_ERR_PROTOCOL;
  }
  fail_inflight(c, kind);
  conn_close(c, false);
}

void cbl_conn_end(cbl_conn_t *c) { c->done_clean = true; }

/* ---- writing ---- */

/* Over TLS the protocol's bytes wait as plaintext and are encrypted once per flush (tls.c). */
int cbl_conn_write(cbl_conn_t *c, const void *p, size_t n) {
  return cbl_buf_append(c->tls.ssl ? &c->pt : &c->out, p, n) ? CBL_FAIL(CBL_ERR_PROTOCOL) : 0;
}

size_t cbl_conn_unsent(const cbl_conn_t *c) { return c->pt.len + c->out.len + c->wout.len; }

static int conn_flush(cbl_conn_t *c);
static void conn_step(cbl_conn_t *c, int rc);

static void on_write(uv_write_t *req, int status) {
  cbl_conn_t *c = req->data;
  c->writing = false;
  size_t n = c->wout.len;
  c->wout.len = 0;
  if (status == UV_ECANCELED || c->state != CBL_CONN_OPEN) return;
  c->t->now = cbl_now();
  if (status < 0) {
    conn_fail(c, CBL_ERR_RESET);
    return;
  }
  if (in_stats(c->t)) c->t->res.counts.bytes_written += n;
  /* Not just conn_flush: a protocol may have held output back for CBL_OUT_HIGH, and room has just been made. */
  conn_step(c, 0);
}

/* Hands c->out to the socket: uv_try_write first (the common case: it all goes at once, no callback), and what
 * the socket does not take goes to uv_write from a second buffer while new bytes collect in the first. */
static int conn_flush(cbl_conn_t *c) {
  if (c->state != CBL_CONN_OPEN) return 0;
  if (c->tls.ssl) {
    int rc = cbl_tls_flush(c);
    if (rc) return rc;
  }
  if (c->writing || c->out.len == 0) return 0;
  uv_buf_t b = uv_buf_init(c->out.p, (unsigned)c->out.len);
  int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
  if (n == UV_EAGAIN) n = 0;
  if (n < 0) return CBL_FAIL(CBL_ERR_RESET);
  if (in_stats(c->t)) c->t->res.counts.bytes_written += (uint64_t)n;
  if ((size_t)n == c->out.len) {
    c->out.len = 0;
    return 0;
  }
  memmove(c->out.p, c->out.p + n, c->out.len - (size_t)n);
  c->out.len -= (size_t)n;
  cbl_buf_t tmp = c->wout;
  c->wout = c->out;
  c->out = tmp;
  c->out.len = 0;
  b = uv_buf_init(c->wout.p, (unsigned)c->wout.len);
  c->write_req.data = c;
  int rc = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
  if (rc < 0) return CBL_FAIL(CBL_ERR_RESET);
  c->writing = true;
  return 0;
}

/* ---- sending: as many requests as the connection's slots and (open loop) the schedule allow ---- */

static int conn_pump(cbl_conn_t *c) {
  cbl_thread_t *t = c->t;
  if (c->state != CBL_CONN_OPEN || c->done_clean || !t->sending || c->hs_pending || !t->proto->ready(c)) return 0;
  uint32_t depth = (uint32_t)t->cfg->depth;
  bool open = open_loop(t);
  /* Closed loop: nothing is sent past the end (the tick that stops the thread comes up to 10 ms late), so
   * with no warm-up every request that reaches the server is a measured one. */
  if (!open && t->now >= t->run->t_end) return 0;
  while (c->inflight < depth && (!open || c->k_sent < c->k_due)) {
    cbl_req_t *r = slot_take(c);
    r->sent = t->now;
    r->intended = open ? intended(t, c->k_sent++, c->g) : t->now;
    r->measured = measured(t, r->intended);
    if (r->measured) {
      t->res.counts.sent++;
      if (open) cbl_hist_record(&t->res.send_lag, r->sent - r->intended);
    }
    int rc = t->proto->send(c, r);
    if (rc < 0) return rc;
    if (t->cfg->new_conn) break;
  }
  return 0;
}

/* After anything happened on c: send what may be sent, write it out, or close on an error. */
static void conn_step(cbl_conn_t *c, int rc) {
  if (rc == 0 && !c->done_clean) rc = conn_pump(c);
  if (rc == 0 && !c->done_clean) rc = c->t->proto->flush(c);
  if (rc == 0 && !c->done_clean) rc = conn_flush(c);
  /* A protocol holds output back once CBL_OUT_HIGH bytes wait (an h2 request body, frames it queued). When the
   * socket took all of it at once, no write completion comes to ask for the rest: ask now, until the protocol
   * has nothing more or the socket stops taking it all (then on_write asks). */
  while (rc == 0 && !c->done_clean && c->state == CBL_CONN_OPEN && !c->writing && cbl_conn_unsent(c) == 0) {
    rc = c->t->proto->flush(c);
    if (rc || cbl_conn_unsent(c) == 0) break;
    rc = conn_flush(c);
  }
  /* Ended cleanly, by a read (a connection per request, the server's close) or by the protocol's flush (h2:
   * the last stream after a GOAWAY): whatever else the server sent on this socket is not ours to wait for. */
  if (rc == 0 && c->done_clean) {
    if (c->inflight) fail_inflight(c, CBL_ERR_RESET);
    conn_close(c, true);
    return;
  }
  if (rc < 0) conn_fail(c, (cbl_err_t)(-1 - rc));
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  cbl_conn_t *c = (cbl_conn_t *)h;
  *buf = uv_buf_init(c->t->rbuf, CBL_READ_BUF);
}

/* The server ended the stream (a FIN, or TLS's close_notify). */
static void conn_eof(cbl_conn_t *c) {
  cbl_thread_t *t = c->t;
  if (c->hs_pending) {
    if (!t->res.tls_error[0])
      snprintf(t->res.tls_error, sizeof t->res.tls_error, "the server closed the connection during the handshake");
    conn_fail(c, CBL_ERR_TLS);
    return;
  }
  int rc = t->proto->eof(c);
  if (rc < 0) conn_fail(c, (cbl_err_t)(-1 - rc));
  else if (c->inflight) conn_fail(c, CBL_ERR_RESET);
  else conn_close(c, true);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  cbl_conn_t *c = (cbl_conn_t *)s;
  cbl_thread_t *t = c->t;
  if (c->state != CBL_CONN_OPEN) return;
  t->now = cbl_now();
  if (nread > 0) {
    if (in_stats(t)) t->res.counts.bytes_read += (uint64_t)nread;
    int rc = c->tls.ssl ? cbl_tls_read(c, buf->base, (size_t)nread) : t->proto->read(c, buf->base, (size_t)nread);
    if (rc == CBL_TLS_EOF) conn_eof(c);
    else conn_step(c, rc);
  } else if (nread == UV_EOF) {
    conn_eof(c);
  } else if (nread < 0) {
    if (c->hs_pending && !t->res.tls_error[0])
      snprintf(t->res.tls_error, sizeof t->res.tls_error, "the connection failed during the handshake: %s",
               uv_strerror((int)nread));
    conn_fail(c, c->hs_pending ? CBL_ERR_TLS : CBL_ERR_RESET);
  }
}

/* ---- connecting and closing ---- */

static void on_connect(uv_connect_t *req, int status) {
  cbl_conn_t *c = req->data;
  if (status == UV_ECANCELED || c->state != CBL_CONN_CONNECTING) return;
  cbl_thread_t *t = c->t;
  t->now = cbl_now();
  if (status < 0) {
    conn_fail(c, CBL_ERR_CONNECT);
    return;
  }
  c->state = CBL_CONN_OPEN;
  t->res.counts.connects++;
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc < 0) {
    conn_fail(c, CBL_ERR_CONNECT);
    return;
  }
  /* Over TLS the protocol opens once the handshake is complete (tls.c). */
  conn_step(c, t->cfg->tls ? cbl_tls_start(c) : t->proto->open(c));
}

static void conn_connect(cbl_conn_t *c) {
  cbl_thread_t *t = c->t;
  c->started = t->now;
  c->answered = 0;
  c->done_clean = false;
  c->out.len = 0;
  c->pt.len = 0;
  slots_reset(c);
  uv_tcp_init(&t->loop, &c->tcp);
  uv_tcp_nodelay(&c->tcp, 1);
  c->state = CBL_CONN_CONNECTING;
  c->connect_req.data = c;
  if (uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&t->cfg->addr, on_connect) < 0)
    conn_fail(c, CBL_ERR_CONNECT);
}

static void on_closed(uv_handle_t *h) {
  cbl_conn_t *c = (cbl_conn_t *)h;
  cbl_thread_t *t = c->t;
  c->state = CBL_CONN_IDLE;
  c->out.len = 0;
  if (t->draining || !t->sending) return;
  t->now = cbl_now();
  if (c->retry_at <= t->now) conn_connect(c);
}

static void conn_close(cbl_conn_t *c, bool clean) {
  if (c->state == CBL_CONN_CLOSING || c->state == CBL_CONN_IDLE) return;
  cbl_thread_t *t = c->t;
  t->proto->reset(c);
  /* No close_notify: the handle closes at once, and the server's close_notify in answer would meet a closed
   * socket and draw the kernel's RST, which a server counts as a reset (cbench-server counted 83 of 420
   * connections per request so). With nothing in flight there is nothing a FIN alone could truncate. */
  if (c->tls.ssl) cbl_tls_drop(c);
  /* A connection that was never answered waits a little before the next try; a clean end (a connection per
   * request, the server's close after answering) reconnects at once. */
  c->retry_at = (clean || c->answered) ? 0 : t->now + RETRY_NS;
  c->state = CBL_CONN_CLOSING;
  uv_close((uv_handle_t *)&c->tcp, on_closed);
}

/* ---- the open-loop schedule ---- */

static void mark_dirty(cbl_thread_t *t, cbl_conn_t *c) {
  if (c->in_dirty) return;
  c->in_dirty = true;
  t->dirty[t->ndirty++] = c;
}

/* The first k in [lo, hi) whose request of connection g is intended at `when` or later, or hi when none is:
 * intended() grows with k, so a binary search. */
static uint64_t first_at(const cbl_thread_t *t, uint32_t g, uint64_t when, uint64_t lo, uint64_t hi) {
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (intended(t, mid, g) >= when) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* Hands every request due by `until` to its connection and, with `send`, sends what can be sent; leaves the
 * next intended time in t->next_due. */
static void advance_schedule(cbl_thread_t *t, uint64_t until, bool send) {
  uint64_t next = 0;
  if (!t->pacing_done) {
    /* Whole rounds due (each connection's request k) are handed out per connection, not request by request: a
     * thread far behind its schedule (a rate its connections cannot send, --rate 1e9 at most) would otherwise
     * walk every request it missed, which cost more than the run itself (30 s after a 1 s run). A round is
     * whole when its last connection's request is due and inside the window; the exponential search finds
     * the first round that is not in O(log) calls. */
    uint64_t limit = until < t->run->t_end ? until + 1 : t->run->t_end;
    uint32_t g_last = t->conns[t->nconns - 1].g;
    uint64_t lo = t->cur_k, span = 1;
    while (intended(t, lo + span - 1, g_last) < limit) {
      lo += span;
      span *= 2;
    }
    uint64_t k = first_at(t, g_last, limit, lo, lo + span - 1);
    if (k > t->cur_k) {
      for (int l = 0; l < t->nconns; l++) {
        cbl_conn_t *c = &t->conns[l];
        c->k_due += k - t->cur_k - (l < t->cur_l ? 1 : 0); /* those before the cursor had round cur_k */
        mark_dirty(t, c);
      }
      t->cur_k = k;
      t->cur_l = 0;
    }
  }
  /* What is left: less than a round. */
  while (!t->pacing_done) {
    cbl_conn_t *c = &t->conns[t->cur_l];
    next = intended(t, t->cur_k, c->g);
    t->next_due = next;
    if (next >= t->run->t_end) {
      t->pacing_done = true;
      break;
    }
    if (next > until) break;
    c->k_due++;
    mark_dirty(t, c);
    if (++t->cur_l == t->nconns) {
      t->cur_l = 0;
      t->cur_k++;
    }
  }
  for (int i = 0; i < t->ndirty; i++) {
    cbl_conn_t *c = t->dirty[i];
    c->in_dirty = false;
    if (send) conn_step(c, 0);
  }
  t->ndirty = 0;
}

/* Sends what is due, then waits for the next intended time in one of two ways. Far ahead: the timerfd, armed
 * --spin-us early. Within --spin-us: the loop polls without sleeping (a uv_idle_t makes its poll timeout zero,
 * so answers are still read as they come) and the check callback sends on time. Waking a sleeping thread
 * costs tens of microseconds on a virtual machine, which would otherwise be added to every corrected latency
 * at low and middle rates; the spin trades the load generator's CPU for that accuracy. */
static void on_idle(uv_idle_t *h) { (void)h; }

static void pace(cbl_thread_t *t) {
  t->now = cbl_now();
  if (t->sending) advance_schedule(t, t->now, true);
  bool spin = t->sending && !t->pacing_done && t->next_due <= t->now + t->cfg->spin_ns;
  if (spin != t->spinning) {
    if (spin) uv_idle_start(&t->idle, on_idle);
    else uv_idle_stop(&t->idle);
    t->spinning = spin;
  }
  if (t->sending && !t->pacing_done && !spin) {
    uint64_t at = t->next_due - t->cfg->spin_ns;
    struct itimerspec its = {.it_value = {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)}};
    timerfd_settime(t->tfd, TFD_TIMER_ABSTIME, &its, NULL);
  }
}

static void on_pace(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  cbl_thread_t *t = p->data;
  uint64_t expirations;
  if (read(t->tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) return;
  pace(t);
}

static void on_check(uv_check_t *h) {
  cbl_thread_t *t = h->data;
  if (t->spinning) pace(t);
}

/* ---- the end of the run ---- */

/* Each connection's requests due and not sent, k_sent to k_due, are in time order: those inside the window are
 * a range found by two searches, not by a walk (which took minutes for a high --rate that nothing sent). */
static void count_unsent(cbl_thread_t *t) {
  for (int i = 0; i < t->nconns; i++) {
    cbl_conn_t *c = &t->conns[i];
    uint64_t lo = first_at(t, c->g, t->run->t_measure, c->k_sent, c->k_due);
    t->res.counts.unsent += first_at(t, c->g, t->run->t_end, lo, c->k_due) - lo;
  }
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void finish(cbl_thread_t *t) {
  t->draining = true;
  for (int i = 0; i < t->nconns; i++) {
    cbl_conn_t *c = &t->conns[i];
    if (c->state == CBL_CONN_OPEN || c->state == CBL_CONN_CONNECTING) {
      fail_inflight(c, CBL_ERR_TIMEOUT);
      conn_close(c, true);
    }
  }
  uv_close((uv_handle_t *)&t->tick, on_handle_closed);
  if (open_loop(t)) {
    uv_close((uv_handle_t *)&t->pace, on_handle_closed);
    uv_close((uv_handle_t *)&t->idle, on_handle_closed);
    uv_close((uv_handle_t *)&t->check, on_handle_closed);
  }
}

static void on_tick(uv_timer_t *tm) {
  cbl_thread_t *t = tm->data;
  cbl_run_t *run = t->run;
  t->now = cbl_now();
  if (t->sending && t->now >= run->t_end) {
    /* Requests due before the end that the pacing timer has not handed out yet are unsent, not forgotten. */
    if (open_loop(t)) advance_schedule(t, run->t_end - 1, false);
    t->sending = false;
    count_unsent(t);
  }
  bool busy = false;
  for (int i = 0; i < t->nconns; i++) {
    cbl_conn_t *c = &t->conns[i];
    if (c->state == CBL_CONN_IDLE && t->sending && c->retry_at <= t->now) conn_connect(c);
    else if (c->state == CBL_CONN_CONNECTING && t->now - c->started >= t->cfg->timeout_ns)
      conn_fail(c, CBL_ERR_CONNECT);
    else if (c->state == CBL_CONN_OPEN && c->hs_pending && t->now - c->started >= t->cfg->timeout_ns) {
      if (!t->res.tls_error[0])
        snprintf(t->res.tls_error, sizeof t->res.tls_error, "no TLS handshake within --timeout");
      conn_fail(c, CBL_ERR_TLS);
    }
    /* A WebSocket handshake the server never finishes is no request's timeout: it would hold the connection
     * without a single error to show for it. Only a handshake: an h2 connection that a GOAWAY stopped from
     * starting streams is not ready either, and its streams in flight are timed by their requests below. */
    else if (c->state == CBL_CONN_OPEN && t->proto->handshaking && t->proto->handshaking(c) &&
             t->now - c->started >= t->cfg->timeout_ns)
      conn_fail(c, CBL_ERR_UPGRADE);
    else if (c->state == CBL_CONN_OPEN && c->inflight) {
      busy = true;
      /* The oldest request in flight decides (HTTP/1.1 and WebSocket answer in order; over h2 any stream may
       * be the oldest, and a stalled one is as much a timeout). */
      uint64_t oldest = UINT64_MAX;
      for (int k = 0; k < t->cfg->depth; k++)
        if (c->reqs[k].used && c->reqs[k].sent < oldest) oldest = c->reqs[k].sent;
      if (t->now - oldest >= t->cfg->timeout_ns) {
        fail_inflight(c, CBL_ERR_TIMEOUT);
        conn_close(c, false);
      }
    }
  }
  if (!t->sending && (!busy || t->now >= run->t_drain)) finish(t);
}

/* ---- the thread ---- */

static int thread_setup(cbl_thread_t *t) {
  const cbl_config_t *cfg = t->cfg;
  if (uv_loop_init(&t->loop)) return -1;
  t->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)t->index << 32) ^ cbl_now();
  t->conns = calloc((size_t)t->nconns, sizeof *t->conns);
  t->dirty = calloc((size_t)t->nconns, sizeof *t->dirty);
  if (!t->conns || !t->dirty) return -1;
  for (int l = 0; l < t->nconns; l++) {
    cbl_conn_t *c = &t->conns[l];
    c->t = t;
    c->g = (uint32_t)(t->index + l * cfg->threads);
    c->reqs = calloc((size_t)cfg->depth, sizeof *c->reqs);
    if (!c->reqs) return -1;
    if (cfg->proto == CBL_H2C) {
      c->free_slots = calloc((size_t)cfg->depth, sizeof *c->free_slots);
      if (!c->free_slots) return -1;
    }
    c->p = t->proto->create(c);
    if (!c->p) return -1;
  }
  uint32_t nsec = (uint32_t)((cfg->duration_ns + 999999999ull) / 1000000000ull);
  cbl_result_init(&t->res, nsec > CBL_MAX_TIMELINE ? 0 : nsec);
  if (t->res.nsec != 0 && !t->res.second) return -1;
  uv_timer_init(&t->loop, &t->tick);
  t->tick.data = t;
  if (open_loop(t)) {
    t->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (t->tfd < 0 || uv_poll_init(&t->loop, &t->pace, t->tfd)) return -1;
    t->pace.data = t;
    uv_idle_init(&t->loop, &t->idle);
    uv_check_init(&t->loop, &t->check);
    t->check.data = t;
  }
  return 0;
}

static void thread_teardown(cbl_thread_t *t) {
  for (int l = 0; t->conns && l < t->nconns; l++) {
    cbl_conn_t *c = &t->conns[l];
    if (c->p) t->proto->destroy(c->p);
    cbl_tls_conn_free(c);
    free(c->reqs);
    free(c->free_slots);
    free(c->out.p);
    free(c->wout.p);
  }
  free(t->conns);
  free(t->dirty);
  t->conns = NULL;
  if (open_loop(t) && t->tfd > 0) close(t->tfd);
}

void *cbl_thread_main(void *arg) {
  cbl_thread_t *t = arg;
  const cbl_config_t *cfg = t->cfg;
  if (cfg->ncpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cfg->cpus[t->index % cfg->ncpus], &set);
    int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (e) fprintf(stderr, "cbench-load: thread %d: cannot pin to CPU %d: %s\n", t->index,
                   cfg->cpus[t->index % cfg->ncpus], strerror(e));
  }
  /* The pacing timer should fire when armed, not up to the default 50 µs of timer slack later. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  int ok = thread_setup(t) == 0;
  if (!ok) fprintf(stderr, "cbench-load: thread %d: setup failed (out of memory or descriptors)\n", t->index);
  pthread_barrier_wait(&t->run->ready); /* the main thread sets the common start time in between */
  pthread_barrier_wait(&t->run->go);
  if (ok) {
    t->now = cbl_now();
    t->sending = true;
    for (int l = 0; l < t->nconns; l++) conn_connect(&t->conns[l]);
    uv_timer_start(&t->tick, on_tick, TICK_MS, TICK_MS);
    if (open_loop(t)) {
      uv_poll_start(&t->pace, UV_READABLE, on_pace);
      uv_check_start(&t->check, on_check);
      pace(t);
    }
    uv_run(&t->loop, UV_RUN_DEFAULT);
  }
  thread_teardown(t);
  if (uv_loop_close(&t->loop) != 0) fprintf(stderr, "cbench-load: thread %d: loop not empty at exit\n", t->index);
  return ok ? NULL : (void *)1;
}
