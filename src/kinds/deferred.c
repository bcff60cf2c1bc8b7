/* The deferred route kind: a request handed to someone else (an Erlang process, through the NIF, the port
 * program or a C caller) and answered later from any thread (include/cbench.h, docs/erlang.md).
 *
 * A parked request lives in a slot of its worker. A slot's state word (atomic) is generation << 8 | state, with
 * the count of pieces on their way above them (ON_WAY): repliers on other threads claim a request with one
 * compare-and-swap (PARKED -> REPLIED or STREAMING, STREAMING -> FINISHED; a piece counts itself in, STREAMING
 * -> STREAMING), the worker claims it the same way for a 503 or a 504 (-> DONE), and the worker bumps the
 * generation when the request is released. So exactly one answer wins, a reference to a finished request is
 * refused (CB_EGONE) where it is made, a command that lost a race meets a newer generation on the worker and is
 * dropped, and a piece that won is never dropped by a 504 (take_back). Slots come in chunks that are never
 * moved or freed while the worker runs, so another thread may read a state word without a lock. No lock is
 * shared by workers: a reply takes only its worker's command-queue lock, once per cb_server_reply() call.
 *
 * Batching: a request is parked when it is complete and queued on the worker's pending list; a prepare handle
 * (run once per loop iteration, before the loop polls) hands the pending requests to each route's deliver
 * function, one call per route with all of its requests when the route batches. */
#include <arpa/inet.h>
#include <ctype.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* What this kind keeps in a request while it answers (cb__req_t.kind). */
typedef struct CB__KIND_STATE_ATTR {
  char *buf;     /* the request body, held from the echo budget (cap bytes) */
  size_t len, cap;
  uint32_t slot; /* the parked request's slot + 1; 0 before it is parked */
  uint8_t refused; /* over the echo budget: answered 503 */
  uint8_t stream, ended, end_sent, dirty; /* a streamed body (deferred.c): parked at the head, pieces
                                             handed over once per loop iteration */
} defer_state_t;
CB__KIND_STATE_FITS(defer_state_t);
#define DEFER(r) CB__KIND_STATE(r, defer_state_t)

#define CHUNK_SLOTS 1024u
#define MAX_CHUNKS 16384u /* 16M parked requests per worker: the 24 bits of a reference's slot */
#define DEFAULT_TIMEOUT_MS 5000u
#define MAX_TIMEOUT_MS 3600000u

enum { ST_FREE, ST_PARKED, ST_REPLIED, ST_STREAMING, ST_FINISHED, ST_DONE };

#define WORD(gen, st) ((uint64_t)(gen) << 8 | (uint64_t)(st))
#define GEN(word) ((uint32_t)((word) >> 8))
#define STATE(word) ((unsigned)((word)&0xff))
/* Bits 40 to 63: the pieces (CB_REPLY_SEND) claimed and not yet run by the worker, while STREAMING or FINISHED;
 * 0 in every other state. A count at ON_WAY_MAX stays there (16M pieces on their way: no 504 waits for more). */
#define ON_WAY_ONE ((uint64_t)1 << 40)
#define ON_WAY_MAX 0xffffffu
#define ON_WAY(word) ((uint32_t)((word) >> 40))

typedef struct {
  uint64_t word; /* atomic: pieces on their way << 40 | generation << 8 | state */
  cb__req_t *r;  /* the worker's: the parked request, NULL when free */
  uint32_t next_free;
  uint64_t deadline; /* the loop's time (ms) of the 504: no answer (or no piece while streaming); 0: none */
  uv_timer_t timer;  /* fires at the deadline at the latest (see arm) */
  uint8_t fresh_afters; /* the connection's after-step count when a piece was last queued (run_item): the
                          * same now, that piece has not been offered to the socket yet */
} slot_t;

typedef struct cb__defer_w_s {
  slot_t *chunks[MAX_CHUNKS]; /* atomic pointers: read by repliers on other threads */
  uint32_t nchunks;
  uint32_t free_head; /* slot index + 1 of the first free slot, 0 when none */
  uv_prepare_t prepare;
  int prepare_on, closed;
  uint64_t *pending; /* generation << 32 | slot of the requests parked during this loop iteration, in order */
  size_t npending, cap;
  uint64_t *dirty; /* the same for streamed bodies with bytes (or their end) to hand over */
  size_t ndirty, dirty_cap;
  uint32_t *idx; /* scratch: the slots handed over in one iteration, grouped by route */
  size_t idx_cap;
  cb_deferred_req_t *reqs; /* scratch for deliver */
  size_t reqs_cap;
  cb_header_t *hdrs; /* scratch for the requests' headers */
  size_t hdrs_cap;
  char *text; /* scratch: 64 bytes of peer text per request, then the HTTP/1.1 header names lowercased */
  size_t text_cap;
} defer_w_t;

typedef struct {
  cb_deliver_fn deliver;
  void *ud;
  void (*free_ud)(void *ud);
  void (*gone)(void *ud, cb_reqref_t ref);
  cb_body_fn body;
  unsigned timeout_ms;
  int batch;
} droute_t;

static slot_t *slot_at(defer_w_t *d, uint32_t i) {
  slot_t *chunk = __atomic_load_n(&d->chunks[i / CHUNK_SLOTS], __ATOMIC_ACQUIRE);
  return chunk ? &chunk[i % CHUNK_SLOTS] : NULL;
}

static void on_prepare(uv_prepare_t *p);

static const cb__part_ops_t defer_part;

/* The worker's parked requests are its CB__PART_DEFERRED part: made with the first, read by replying threads
 * (claim), closed with the worker's handles, freed after its loop. */
static defer_w_t *worker_state(cb__worker_t *w) {
  cb__part_t *p = &w->parts[CB__PART_DEFERRED];
  defer_w_t *d = p->state;
  if (d != NULL) return d;
  d = calloc(1, sizeof *d);
  if (d == NULL) return NULL;
  uv_prepare_init(&w->loop, &d->prepare);
  d->prepare.data = w;
  p->ops = &defer_part;
  __atomic_store_n(&p->state, d, __ATOMIC_RELEASE);
  return d;
}

static uint32_t slot_take(cb__worker_t *w, defer_w_t *d) {
  if (d->free_head == 0) {
    if (d->nchunks == MAX_CHUNKS) return UINT32_MAX;
    slot_t *chunk = calloc(CHUNK_SLOTS, sizeof *chunk);
    if (chunk == NULL) return UINT32_MAX;
    uint32_t base = d->nchunks * CHUNK_SLOTS;
    for (uint32_t k = 0; k < CHUNK_SLOTS; k++) {
      chunk[k].word = WORD(1, ST_FREE);
      chunk[k].next_free = k + 1 < CHUNK_SLOTS ? base + k + 2 : 0;
      uv_timer_init(&w->loop, &chunk[k].timer);
      chunk[k].timer.data = w;
    }
    __atomic_store_n(&d->chunks[d->nchunks], chunk, __ATOMIC_RELEASE);
    d->nchunks++;
    d->free_head = base + 1;
  }
  uint32_t i = d->free_head - 1;
  d->free_head = slot_at(d, i)->next_free;
  return i;
}

static cb_reqref_t ref_of(const cb__worker_t *w, uint32_t i, uint32_t gen) {
  return (uint64_t)w->index << 56 | (uint64_t)i << 32 | gen;
}

/* ---- the worker's side: park, deliver, time out, fail, release ---- */

static const droute_t *droute(const cb__req_t *r) { return r->route->arg; }

static void answer_empty(cb__req_t *r, int status) {
  cb__res_head(r, status, NULL, NULL, 0, 0);
  cb__res_end(r);
}

/* Cuts an answer that began and cannot end well. */
static void cut(cb__req_t *r) { r->proto->abort(r, 2 /* HTTP/2's INTERNAL_ERROR */); }

/* What take_back's status 0 means: a streamed answer whose client does not read it (run_item's SEND). */
#define OVERFLOW 0

/* The worker takes a parked request back (from PARKED or STREAMING) to answer it itself: 503 or 504, or a cut
 * when its answer had begun. Returns 0 when a replier got there first (its command is on the way), and for a 504
 * when a piece is on its way. OVERFLOW cuts a streamed answer, from FINISHED too: the pieces before the end are
 * still in the command queue. */
static int take_back(cb__worker_t *w, slot_t *s, int status) {
  uint64_t word = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
  for (;;) { /* a failed swap reloads the word: a piece counted itself in, or a reply claimed the request */
    unsigned st = STATE(word);
    if (st != ST_PARKED && st != ST_STREAMING && !(status == OVERFLOW && st == ST_FINISHED)) return 0;
    /* A piece handed over (its reply returned 0) and not run yet: in the command queue, which a turn of the loop
     * runs after libuv's timers, or about to be posted. It came in time, so no 504: when it runs it is queued
     * and moves the deadline (run_item), as every piece does. The 504 used to win here and the piece met DONE. */
    if (status == 504 && ON_WAY(word) > 0) return 0;
    if (__atomic_compare_exchange_n(&s->word, &word, WORD(GEN(word), ST_DONE), 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      break;
  }
  cb__req_t *r = s->r;
  cb__conn_t *c = r->conn;
  const droute_t *dr = droute(r);
  if (dr->gone) dr->gone(dr->ud, ref_of(w, DEFER(r)->slot - 1, GEN(word)));
  if (status == 503)
    CB__STAT_INC(w, handler_unavailable);
  else if (status == OVERFLOW)
    CB__STAT_INC(w, handler_overflows);
  else
    CB__STAT_INC(w, handler_timeouts);
  /* Whether the answer began is the request's to say, not the state's: a replier claims STREAMING on its own
   * thread, and the 504 (or a 503) may come due before the worker has run that head. Nothing was sent then,
   * so the client gets the status, not a cut with no head at all; the head on its way meets DONE and is
   * dropped. */
  if (r->res_state == CB__RES_NONE) {
    answer_empty(r, status);
  } else if (status == OVERFLOW) {
    cut(r); /* its pieces were offered to the socket (run_item), and the client does not read them */
  } else {
    /* The pieces handed over before the 503 or the 504 go first, then the cut, as a proxied answer whose
     * upstream fails (px_fail). The pieces of this batch of replies (an UNAVAILABLE after them in one post, a
     * target's failure behind them in the queue) are still in the connection's output: its after-step runs once
     * the whole batch has. Cut before it, HTTP/1.1 closed the connection with none of them written, the head
     * neither, and h2c reset the stream with nothing framed (nghttp2 sends no HEADERS nor DATA on a stream it
     * has a RST_STREAM queued for). The after-step offers them to the socket; what it does not take now is
     * dropped with the cut, as the proxy's. That write may end the request itself (a write error, a RST_STREAM
     * nghttp2 had queued for the stream): then there is nothing left to cut. */
    uint32_t gen = GEN(word);
    cb__conn_after(c);
    if (c->closing || s->r != r || GEN(__atomic_load_n(&s->word, __ATOMIC_ACQUIRE)) != gen) return 1;
    cut(r);
  }
  cb__conn_after(c);
  return 1;
}

/* Whether a streamed body's bytes still go to the target: parked or streaming its answer. */
static int body_wanted(const cb__req_t *r) {
  defer_w_t *d = ((defer_w_t *)r->conn->w->parts[CB__PART_DEFERRED].state);
  if (DEFER(r)->slot == 0 || d == NULL) return 0;
  unsigned st = STATE(__atomic_load_n(&slot_at(d, DEFER(r)->slot - 1)->word, __ATOMIC_ACQUIRE));
  return st == ST_PARKED || st == ST_STREAMING;
}

static void on_timeout(uv_timer_t *t) {
  cb__worker_t *w = t->data;
  slot_t *s = (slot_t *)((char *)t - offsetof(slot_t, timer));
  if (s->r == NULL || s->deadline == 0) return; /* the slot is free, or its request answered */
  uint64_t now = uv_now(&w->loop);
  if (now < s->deadline) { /* moved on since the timer was started: wait for the rest */
    uv_timer_start(&s->timer, on_timeout, s->deadline - now, 0);
    return;
  }
  take_back(w, s, 504);
}

/* The request in slot s gets its 504 timeout_ms from now. A lazy deadline, as the proxy's: the slot's timer is
 * left running when it fires no later than the new deadline (on_timeout then waits for the rest), and a
 * request answered in time leaves it running too. Starting and stopping it for every request, a heap
 * operation each in libuv, cost about 320 instructions per request (callgrind, the port engine's erl_hello);
 * under load a slot's timer now fires about once per timeout. */
static void arm(cb__worker_t *w, slot_t *s, unsigned timeout_ms) {
  s->deadline = uv_now(&w->loop) + timeout_ms;
  if (!uv_is_active((uv_handle_t *)&s->timer) || uv_timer_get_due_in(&s->timer) > timeout_ms)
    uv_timer_start(&s->timer, on_timeout, timeout_ms, 0);
}

/* No 504 for the request in slot s any more (answered whole, or finished): its timer may still fire, for nothing. */
static void disarm(slot_t *s) { s->deadline = 0; }

static void start_prepare(defer_w_t *d);
static void park(cb__req_t *r);

static void defer_head(cb__req_t *r) {
  memset(DEFER(r), 0, sizeof *DEFER(r));
  if (droute(r)->body == NULL) return;
  DEFER(r)->stream = 1; /* handed over now; the body follows in pieces */
  park(r);
}

static void mark_dirty(cb__req_t *r);

static void defer_body(cb__req_t *r, const char *p, size_t n) {
  if (DEFER(r)->refused) return;
  if (DEFER(r)->stream) {
    if (!body_wanted(r)) return; /* answered whole, or gone: the rest is read and dropped */
    mark_dirty(r);
  }
  if (DEFER(r)->len + n > DEFER(r)->cap) {
    size_t cap = DEFER(r)->cap ? DEFER(r)->cap : 4096;
    while (cap < DEFER(r)->len + n) cap *= 2;
    size_t max = r->conn->w->cfg->max_body_bytes; /* the protocol refuses more before it gets here */
    if (cap > max && DEFER(r)->len + n <= max) cap = max;
    char *b = NULL;
    if (cb__echo_hold(r->conn, cap - DEFER(r)->cap) == 0) {
      b = realloc(DEFER(r)->buf, cap);
      if (b == NULL) cb__echo_release(r->conn, cap - DEFER(r)->cap);
    }
    if (b == NULL) { /* over the budget for held bodies (or out of memory): 503 when the request ends */
      DEFER(r)->refused = 1;
      return;
    }
    DEFER(r)->buf = b;
    DEFER(r)->cap = cap;
  }
  memcpy(DEFER(r)->buf + DEFER(r)->len, p, n);
  DEFER(r)->len += n;
}

/* Parks the request and queues it for delivery at the end of this loop iteration (503 when it cannot be). */
static void park(cb__req_t *r) {
  cb__worker_t *w = r->conn->w;
  defer_w_t *d = worker_state(w);
  uint32_t i = UINT32_MAX;
  if (d != NULL && !d->closed && !DEFER(r)->refused) i = slot_take(w, d);
  if (i != UINT32_MAX && d->npending == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 64;
    uint64_t *p = realloc(d->pending, cap * sizeof *p);
    if (p == NULL) {
      slot_t *s = slot_at(d, i);
      s->next_free = d->free_head;
      d->free_head = i + 1;
      i = UINT32_MAX;
    } else {
      d->pending = p;
      d->cap = cap;
    }
  }
  if (i == UINT32_MAX) {
    CB__STAT_INC(w, handler_unavailable);
    answer_empty(r, 503);
    return;
  }
  slot_t *s = slot_at(d, i);
  s->r = r;
  s->fresh_afters = (uint8_t)(r->conn->afters - 1); /* no piece queued yet */
  uint32_t gen = GEN(__atomic_load_n(&s->word, __ATOMIC_RELAXED));
  __atomic_store_n(&s->word, WORD(gen, ST_PARKED), __ATOMIC_RELEASE);
  DEFER(r)->slot = i + 1;
  arm(w, s, droute(r)->timeout_ms);
  d->pending[d->npending++] = (uint64_t)gen << 32 | i;
  start_prepare(d);
}

static void start_prepare(defer_w_t *d) {
  if (!d->prepare_on) {
    d->prepare_on = 1;
    uv_prepare_start(&d->prepare, on_prepare);
    cb__worker_want_uv_turn(d->prepare.data); /* the worker runs libuv's phases before it waits again */
  }
}

/* A streamed body has bytes or its end to hand over: queued once per loop iteration. */
static void mark_dirty(cb__req_t *r) {
  defer_w_t *d = ((defer_w_t *)r->conn->w->parts[CB__PART_DEFERRED].state);
  if (DEFER(r)->dirty || DEFER(r)->slot == 0 || d == NULL) return;
  if (d->ndirty == d->dirty_cap) {
    size_t cap = d->dirty_cap ? 2 * d->dirty_cap : 64;
    uint64_t *p = realloc(d->dirty, cap * sizeof *p);
    if (p == NULL) { /* out of memory: the request cannot be followed any more */
      DEFER(r)->refused = 1;
      return;
    }
    d->dirty = p;
    d->dirty_cap = cap;
  }
  uint32_t i = DEFER(r)->slot - 1;
  d->dirty[d->ndirty++] = (uint64_t)GEN(__atomic_load_n(&slot_at(d, i)->word, __ATOMIC_RELAXED)) << 32 | i;
  DEFER(r)->dirty = 1;
  start_prepare(d);
}

static void defer_end(cb__req_t *r) {
  if (!DEFER(r)->stream) {
    park(r);
    return;
  }
  DEFER(r)->ended = 1;
  mark_dirty(r);
}

static void defer_free(cb__req_t *r) {
  cb__worker_t *w = r->conn->w;
  defer_w_t *d = ((defer_w_t *)w->parts[CB__PART_DEFERRED].state);
  if (DEFER(r)->slot != 0 && d != NULL) {
    uint32_t i = DEFER(r)->slot - 1;
    slot_t *s = slot_at(d, i);
    disarm(s);
    s->r = NULL;
    uint64_t word = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
    /* Gone before its answer completed: PARKED or STREAMING (DONE was reported by take_back). A replier may
     * still claim it between this load and the store below; its command then meets the new generation. */
    const droute_t *dr = droute(r);
    if (dr->gone && (STATE(word) == ST_PARKED || STATE(word) == ST_STREAMING))
      dr->gone(dr->ud, ref_of(w, i, GEN(word)));
    uint32_t gen = GEN(word) + 1;
    if (gen == 0) gen = 1; /* a reference is never 0 */
    __atomic_store_n(&s->word, WORD(gen, ST_FREE), __ATOMIC_RELEASE);
    s->next_free = d->free_head;
    d->free_head = i + 1;
    DEFER(r)->slot = 0;
  }
  free(DEFER(r)->buf);
  cb__echo_release(r->conn, DEFER(r)->cap);
  DEFER(r)->buf = NULL;
  DEFER(r)->cap = 0;
}

static const cb__handler_t defer_handler = {
    .on_head = defer_head, .on_body = defer_body, .on_end = defer_end, .on_free = defer_free};

static size_t format_peer(const cb__conn_t *c, char *buf) {
  if (c->peer_family != AF_INET && c->peer_family != AF_INET6) { /* a test connection: no address */
    int n = snprintf(buf, 64, ":%u", c->peer_port);
    return n < 0 ? 0 : (size_t)n;
  }
  return cb__peer_text(c->peer_family, c->peer_addr, c->peer_port, buf);
}

static int has_host(const cb__req_t *r) {
  for (int i = 0; i < r->nheaders; i++)
    if (r->headers[i].name_len == 4 && strncasecmp(r->headers[i].name, "host", 4) == 0) return 1;
  return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (q == NULL) return -1;
  *p = q;
  *cap = c;
  return 0;
}

/* Fills *q for the parked request in slot i: headers go to d->hdrs from *nh on, the peer to peer (64 bytes),
 * HTTP/1.1 header names (lowercased) to *names, which moves past them. */
static void describe(cb__worker_t *w, defer_w_t *d, uint32_t i, cb_deferred_req_t *q, size_t *nh, char *peer,
                     char **names) {
  slot_t *s = slot_at(d, i);
  cb__req_t *r = s->r;
  cb__conn_t *c = r->conn;
  q->ref = ref_of(w, i, GEN(__atomic_load_n(&s->word, __ATOMIC_RELAXED)));
  q->route_id = r->route->stub_id;
  q->proto = c->proto_id;
  q->conn_id = c->id;
  q->stream_id = r->stream_id;
  q->peer = (cb_str_t){peer, format_peer(c, peer)};
  q->method = (cb_str_t){r->method_str, r->method_len};
  q->path = (cb_str_t){r->path, r->path_len};
  if (r->target_len > r->path_len)
    q->query = (cb_str_t){r->path + r->path_len + 1, r->target_len - r->path_len - 1};
  else
    q->query = (cb_str_t){"", 0};
  cb_header_t *h = d->hdrs + *nh;
  size_t k = 0;
  if (r->authority != NULL && !has_host(r))
    h[k++] = (cb_header_t){CB_S("host"), (cb_str_t){r->authority, r->authority_len}};
  for (int j = 0; j < r->nheaders; j++) {
    const cb__hdr_t *x = &r->headers[j];
    const char *name = x->name;
    if (c->proto_id == CB_PROTO_HTTP1 || c->proto_id == CB_PROTO_H1_TLS) { /* HTTP/2 names are lowercase */
      char *o = *names;
      for (size_t b = 0; b < x->name_len; b++) o[b] = (char)tolower((unsigned char)x->name[b]);
      *names += x->name_len;
      name = o;
    }
    h[k++] = (cb_header_t){(cb_str_t){name, x->name_len}, (cb_str_t){x->value, x->value_len}};
  }
  q->headers = h;
  q->nheaders = k;
  *nh += k;
  if (DEFER(r)->stream) /* its bytes so far go in the first piece, after this */
    q->body = (cb_str_t){"", 0};
  else
    q->body = (cb_str_t){DEFER(r)->buf ? DEFER(r)->buf : "", DEFER(r)->len};
}

/* The n requests of idx were refused by deliver: 503 for those still parked. */
static void refuse_range(cb__worker_t *w, defer_w_t *d, const uint32_t *idx, size_t n) {
  for (size_t k = 0; k < n; k++) {
    slot_t *s = slot_at(d, idx[k]);
    if (s->r != NULL) take_back(w, s, 503);
  }
}

static void deliver_group(cb__worker_t *w, defer_w_t *d, const droute_t *dr, const uint32_t *idx, size_t n) {
  size_t nh = 0, text = 64 * n;
  for (size_t k = 0; k < n; k++) {
    const cb__req_t *r = slot_at(d, idx[k])->r;
    nh += (size_t)r->nheaders + 1;
    for (int j = 0; j < r->nheaders; j++) text += r->headers[j].name_len;
  }
  if (grow((void **)&d->reqs, &d->reqs_cap, n, sizeof *d->reqs) != 0 ||
      grow((void **)&d->hdrs, &d->hdrs_cap, nh, sizeof *d->hdrs) != 0 ||
      grow((void **)&d->text, &d->text_cap, text, 1) != 0) {
    refuse_range(w, d, idx, n);
    return;
  }
  nh = 0;
  char *names = d->text + 64 * n;
  for (size_t k = 0; k < n; k++) describe(w, d, idx[k], &d->reqs[k], &nh, d->text + 64 * k, &names);
  if (dr->batch) {
    if (dr->deliver(dr->ud, d->reqs, n) != 0) refuse_range(w, d, idx, n);
  } else {
    for (size_t k = 0; k < n; k++)
      if (dr->deliver(dr->ud, &d->reqs[k], 1) != 0) refuse_range(w, d, &idx[k], 1);
  }
}

/* The streamed bodies with bytes or an end to hand over, after the deliveries of the same iteration (so a
 * target gets a request before its first piece). A request over its budget for held bytes gets 503 (cut when
 * its answer has begun). */
static void flush_bodies(cb__worker_t *w, defer_w_t *d) {
  size_t n = d->ndirty;
  uint64_t *dirty = d->dirty;
  d->dirty = NULL; /* marked during the calls below: the next iteration */
  d->ndirty = d->dirty_cap = 0;
  for (size_t k = 0; k < n; k++) {
    uint32_t i = (uint32_t)dirty[k], gen = (uint32_t)(dirty[k] >> 32);
    slot_t *s = slot_at(d, i);
    cb__req_t *r = s->r;
    if (r == NULL || GEN(__atomic_load_n(&s->word, __ATOMIC_ACQUIRE)) != gen) continue; /* released */
    DEFER(r)->dirty = 0;
    if (DEFER(r)->refused) {
      take_back(w, s, 503);
      continue;
    }
    size_t len = DEFER(r)->len;
    DEFER(r)->len = 0;
    if (!body_wanted(r) || DEFER(r)->end_sent) continue;
    int end = DEFER(r)->ended;
    DEFER(r)->end_sent = (uint8_t)end;
    const droute_t *dr = droute(r);
    if (STATE(__atomic_load_n(&s->word, __ATOMIC_ACQUIRE)) == ST_PARKED)
      arm(w, s, dr->timeout_ms); /* timeout_ms runs from the last piece */
    dr->body(dr->ud, ref_of(w, i, gen), DEFER(r)->buf ? DEFER(r)->buf : "", len, end);
  }
  free(dirty);
}

/* Once per loop iteration: every request parked since the last one goes to its route's deliver, grouped by
 * route in order of first arrival. */
static void on_prepare(uv_prepare_t *p) {
  cb__worker_t *w = p->data;
  defer_w_t *d = ((defer_w_t *)w->parts[CB__PART_DEFERRED].state);
  uv_prepare_stop(p);
  d->prepare_on = 0;
  size_t n = d->npending;
  uint64_t *pending = d->pending;
  d->pending = NULL; /* requests parked by the deliver calls below go to a new list, for the next iteration */
  d->npending = d->cap = 0;
  /* A request released before delivery (its client left) is skipped: its slot is free, or holds a newer
   * request (another generation) that has its own entry. */
  if (grow((void **)&d->idx, &d->idx_cap, n, sizeof *d->idx) != 0) { /* out of memory: 503 for all */
    for (size_t k = 0; k < n; k++) {
      slot_t *s = slot_at(d, (uint32_t)pending[k]);
      if (s->r != NULL && __atomic_load_n(&s->word, __ATOMIC_RELAXED) == WORD(pending[k] >> 32, ST_PARKED))
        take_back(w, s, 503);
    }
    free(pending);
    flush_bodies(w, d);
    return;
  }
  uint32_t *idx = d->idx;
  size_t m = 0;
  for (size_t k = 0; k < n; k++) {
    uint32_t i = (uint32_t)pending[k], gen = (uint32_t)(pending[k] >> 32);
    slot_t *s = slot_at(d, i);
    if (s->r != NULL && __atomic_load_n(&s->word, __ATOMIC_RELAXED) == WORD(gen, ST_PARKED)) idx[m++] = i;
  }
  /* Group by route, keeping arrival order within each group. */
  size_t done = 0;
  while (done < m) {
    const cb__route_t *rt = slot_at(d, idx[done])->r->route;
    size_t end = done + 1;
    for (size_t k = done + 1; k < m; k++) {
      if (slot_at(d, idx[k])->r->route != rt) continue;
      uint32_t x = idx[k]; /* move it next to its group: a stable pass over what is left */
      memmove(&idx[end + 1], &idx[end], (k - end) * sizeof *idx);
      idx[end++] = x;
    }
    deliver_group(w, d, rt->arg, idx + done, end - done);
    done = end;
  }
  free(pending);
  flush_bodies(w, d);
}

static void parked_close(cb__worker_t *w, void *state) {
  (void)w;
  defer_w_t *d = state;
  if (d->closed) return;
  d->closed = 1;
  uv_close((uv_handle_t *)&d->prepare, NULL);
  for (uint32_t c = 0; c < d->nchunks; c++)
    for (uint32_t k = 0; k < CHUNK_SLOTS; k++) uv_close((uv_handle_t *)&d->chunks[c][k].timer, NULL);
}

static void parked_free(cb__worker_t *w, void *state) {
  (void)w;
  defer_w_t *d = state;
  for (uint32_t c = 0; c < d->nchunks; c++) free(d->chunks[c]);
  free(d->pending);
  free(d->dirty);
  free(d->reqs);
  free(d->hdrs);
  free(d->text);
  free(d->idx);
  free(d);
}

static const cb__part_ops_t defer_part = {.close = parked_close, .free = parked_free};

/* ---- replies: built on the caller's thread, run on the worker's ---- */

typedef struct {
  uint32_t slot, gen;
  uint8_t op;
  int status;
  cb__hdr_t *headers;
  int nheaders;
  char *body; /* FULL and SEND: malloc'd (handed to the protocol) or NULL when empty */
  size_t len;
} item_t;

typedef struct {
  cb__cmd_t cmd;
  size_t n;
  item_t items[]; /* then the header bytes */
} reply_cmd_t;

/* A piece claimed by a replier (claim) has reached its worker: one fewer on its way. The 504 that this count holds
 * back is decided on this thread too (take_back), never while a piece is half run. */
static void piece_arrived(slot_t *s) {
  uint64_t word = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
  while (ON_WAY(word) > 0 &&
         !__atomic_compare_exchange_n(&s->word, &word, word - ON_WAY_ONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

static void run_item(cb__worker_t *w, defer_w_t *d, item_t *it) {
  slot_t *s = slot_at(d, it->slot);
  cb__req_t *r = s ? s->r : NULL;
  uint64_t word = s ? __atomic_load_n(&s->word, __ATOMIC_ACQUIRE) : 0;
  if (r == NULL || GEN(word) != it->gen || STATE(word) == ST_DONE) { /* the request went away meanwhile */
    free(it->body);
    return;
  }
  cb__conn_t *c = r->conn;
  int head_only = r->method == CB_METHOD_HEAD;
  if (it->op == CB_REPLY_SEND) piece_arrived(s);
  switch (it->op) {
    case CB_REPLY_FULL: {
      int no_body = it->status == 204 || it->status == 304;
      disarm(s);
      cb__res_head(r, it->status, NULL, it->headers, it->nheaders, no_body ? CB__NO_BODY : (int64_t)it->len);
      if (it->len > 0 && !head_only)
        cb__res_data(r, it->body, it->len, CB__DATA_FREE);
      else
        free(it->body);
      cb__res_end(r);
      break;
    }
    case CB_REPLY_STREAM:
      cb__res_head(r, it->status, NULL, it->headers, it->nheaders, CB__STREAMED);
      arm(w, s, droute(r)->timeout_ms);
      break;
    case CB_REPLY_SEND:
      if (r->res_state != CB__RES_HEAD) { /* a send that outran its reply_stream cannot happen: one queue */
        free(it->body);
        break;
      }
      /* Nothing paces a handler's pieces but this: a client that does not read would have the server keep
       * them all (HTTP/1.1's output queue, an h2c stream's pieces behind its window). At the bound the answer is
       * cut, the request ends (gone: further replies are CB_EGONE) and the cut is counted. What waits counts
       * once the socket has been offered it: the pieces of one batch of replies are all queued before the
       * connection's after-step writes, so at the bound with pieces not yet offered the after-step runs here
       * first. Without it a burst from a handler was cut before a byte of it was written, the head too (the
       * client saw the connection close and nothing else). */
      if (it->len > 0 && !head_only) {
        size_t max = c->w->cfg->max_queued_reply_bytes;
        if (r->proto->queued(r) >= max && s->fresh_afters == c->afters) {
          cb__conn_after(c);
          unsigned st = STATE(__atomic_load_n(&s->word, __ATOMIC_ACQUIRE)); /* FINISHED: its end is claimed */
          if (c->closing || s->r != r || (st != ST_STREAMING && st != ST_FINISHED)) {
            free(it->body);
            return;
          }
        }
        if (r->proto->queued(r) >= max) {
          free(it->body);
          take_back(w, s, OVERFLOW);
          return; /* take_back ran the connection's follow-up */
        }
        s->fresh_afters = c->afters; /* queued after the connection's latest after-step: not offered yet */
        cb__res_data(r, it->body, it->len, CB__DATA_FREE | CB__DATA_PIECE_END);
      } else {
        free(it->body);
      }
      arm(w, s, droute(r)->timeout_ms);
      break;
    case CB_REPLY_UNAVAILABLE:
      take_back(w, s, 503);
      free(it->body);
      return; /* take_back ran the connection's follow-up */
    default: /* FINISH */
      disarm(s);
      if (r->res_state == CB__RES_HEAD) cb__res_end(r);
      break;
  }
  (void)w;
  /* Once per connection for the whole batch of replies (cmdq.c runs it): over HTTP/2, the answers to a
   * connection's streams then leave in one write. */
  cb__conn_after_soon(c);
}

static void run_replies(cb__worker_t *w, cb__cmd_t *cmd) {
  reply_cmd_t *rc = (reply_cmd_t *)cmd;
  defer_w_t *d = ((defer_w_t *)w->parts[CB__PART_DEFERRED].state);
  for (size_t k = 0; k < rc->n; k++) {
    if (d == NULL || d->closed)
      free(rc->items[k].body);
    else
      run_item(w, d, &rc->items[k]);
  }
  free(rc);
}

static int check_reply(const cb_reply_t *x, size_t *hbytes) {
  if (x->op == CB_REPLY_FULL || x->op == CB_REPLY_STREAM) {
    if (x->status < 200 || x->status > 599) return UV_EINVAL;
    int no_body = x->status == 204 || x->status == 304;
    if (no_body && (x->op == CB_REPLY_STREAM || x->body.len > 0)) return UV_EINVAL;
    if (x->nheaders > CB_MAX_HEADERS || (x->nheaders > 0 && x->headers == NULL)) return UV_EINVAL;
    for (size_t i = 0; i < x->nheaders; i++) {
      const cb_header_t *h = &x->headers[i];
      if (h->name.ptr == NULL || !cb__is_token(h->name.ptr, h->name.len) ||
          cb__forbidden_header(h->name.ptr, h->name.len))
        return UV_EINVAL;
      if ((h->value.ptr == NULL && h->value.len) || (h->value.ptr && cb__bad_value(h->value.ptr, h->value.len)))
        return UV_EINVAL;
      *hbytes += h->name.len + h->value.len;
    }
  } else if (x->op != CB_REPLY_SEND && x->op != CB_REPLY_FINISH && x->op != CB_REPLY_UNAVAILABLE) {
    return UV_EINVAL;
  }
  if (x->body.len > 0 && x->body.ptr == NULL) return UV_EINVAL;
  return 0;
}

/* Claims the request for this reply: the one compare-and-swap that makes an answer the only one. */
static int claim(cb_server_t *srv, const cb_reply_t *x, uint32_t *slot, uint32_t *gen) {
  uint32_t wi = (uint32_t)(x->ref >> 56), i = (uint32_t)(x->ref >> 32) & 0xffffff, g = (uint32_t)x->ref;
  if (x->ref == 0 || wi >= (uint32_t)srv->nworkers) return CB_EGONE;
  defer_w_t *d = (defer_w_t *)__atomic_load_n(&srv->workers[wi]->parts[CB__PART_DEFERRED].state, __ATOMIC_ACQUIRE);
  if (d == NULL || i / CHUNK_SLOTS >= MAX_CHUNKS) return CB_EGONE;
  slot_t *s = slot_at(d, i);
  if (s == NULL) return CB_EGONE;
  uint64_t word = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
  if (GEN(word) != g) return CB_EGONE;
  unsigned from, to;
  switch (x->op) {
    case CB_REPLY_FULL: from = ST_PARKED, to = ST_REPLIED; break;
    case CB_REPLY_STREAM: from = ST_PARKED, to = ST_STREAMING; break;
    case CB_REPLY_SEND: from = to = ST_STREAMING; break;
    case CB_REPLY_UNAVAILABLE: /* the worker's take_back claims it (PARKED or STREAMING -> DONE) */
      if (STATE(word) != ST_PARKED && STATE(word) != ST_STREAMING) return CB_EGONE;
      *slot = i;
      *gen = g;
      return 0;
    default: from = ST_STREAMING, to = ST_FINISHED; break;
  }
  /* A piece or an end before the head: the request is still open, which gone would deny. */
  if (STATE(word) == ST_PARKED && from == ST_STREAMING) return CB_ENOTSTREAMING;
  for (;;) { /* a failed swap reloads the word: the count moved (another piece, the worker), or the state */
    if (GEN(word) != g || STATE(word) != from) return CB_EGONE;
    uint64_t next = (word & ~(uint64_t)0xff) | to; /* the generation and the pieces on their way kept */
    if (x->op == CB_REPLY_SEND && ON_WAY(word) < ON_WAY_MAX) next += ON_WAY_ONE; /* the worker counts it out */
    if (next == word ||
        __atomic_compare_exchange_n(&s->word, &word, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      break;
  }
  *slot = i;
  *gen = g;
  return 0;
}

/* A reply's header array follows the bytes of the one before it in the command's memory: each item's bytes are
 * padded so that the next array is aligned (several replies with headers in one call). */
#define HDR_ALIGN(n) (((n) + _Alignof(cb__hdr_t) - 1) & ~(size_t)(_Alignof(cb__hdr_t) - 1))

int cb_server_reply(cb_server_t *srv, cb_reply_t *replies, size_t n) {
  if (srv == NULL || (replies == NULL && n > 0)) return UV_EINVAL;
  int nw = srv->nworkers;
  size_t *count = calloc((size_t)nw, sizeof *count), *bytes = calloc((size_t)nw, sizeof *bytes);
  reply_cmd_t **cmds = calloc((size_t)nw, sizeof *cmds);
  char **hcur = calloc((size_t)nw, sizeof *hcur);
  int err = count && bytes && cmds && hcur ? 0 : UV_ENOMEM;
  for (size_t k = 0; k < n && err == 0; k++) {
    cb_reply_t *x = &replies[k];
    size_t hb = 0;
    x->result = check_reply(x, &hb);
    if (x->result != 0) continue;
    uint32_t wi = (uint32_t)(x->ref >> 56);
    if (wi >= (uint32_t)nw) {
      x->result = CB_EGONE;
      continue;
    }
    count[wi]++;
    /* Only the ops that carry a head have headers: another op's count is not read (nor checked) at all. */
    if (x->op == CB_REPLY_FULL || x->op == CB_REPLY_STREAM)
      bytes[wi] += HDR_ALIGN(hb) + x->nheaders * sizeof(cb__hdr_t);
  }
  for (int wi = 0; wi < nw && err == 0; wi++) {
    if (count[wi] == 0) continue;
    cmds[wi] = malloc(sizeof(reply_cmd_t) + count[wi] * sizeof(item_t) + bytes[wi]);
    if (cmds[wi] == NULL) err = UV_ENOMEM;
    else {
      cmds[wi]->n = 0;
      hcur[wi] = (char *)&cmds[wi]->items[count[wi]];
    }
  }
  for (size_t k = 0; k < n && err == 0; k++) {
    cb_reply_t *x = &replies[k];
    if (x->result != 0) continue;
    uint32_t wi = (uint32_t)(x->ref >> 56);
    item_t it = {.op = (uint8_t)x->op, .status = x->status};
    int has_body = (x->op == CB_REPLY_FULL || x->op == CB_REPLY_SEND) && x->body.len > 0;
    if (has_body && (it.body = malloc(x->body.len)) == NULL) {
      x->result = UV_ENOMEM;
      continue;
    }
    x->result = claim(srv, x, &it.slot, &it.gen);
    if (x->result != 0) {
      free(it.body);
      continue;
    }
    if (has_body) {
      memcpy(it.body, x->body.ptr, x->body.len);
      it.len = x->body.len;
    }
    if (x->op == CB_REPLY_FULL || x->op == CB_REPLY_STREAM) {
      /* Headers: the array, then names (lowercased) and values, in the command's own memory. */
      cb__hdr_t *hd = (cb__hdr_t *)hcur[wi];
      char *o = (char *)(hd + x->nheaders);
      for (size_t i = 0; i < x->nheaders; i++) {
        const cb_header_t *h = &x->headers[i];
        hd[i].name = o;
        hd[i].name_len = h->name.len;
        for (size_t j = 0; j < h->name.len; j++) {
          char ch = h->name.ptr[j];
          *o++ = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
        hd[i].value = o;
        hd[i].value_len = h->value.len;
        if (h->value.len) memcpy(o, h->value.ptr, h->value.len);
        o += h->value.len;
      }
      it.headers = hd;
      it.nheaders = (int)x->nheaders;
      hcur[wi] = (char *)hd + x->nheaders * sizeof(cb__hdr_t) + HDR_ALIGN((size_t)(o - (char *)(hd + x->nheaders)));
    }
    cmds[wi]->items[cmds[wi]->n++] = it;
  }
  for (int wi = 0; wi < nw; wi++) {
    if (cmds == NULL || cmds[wi] == NULL) continue;
    if (err != 0 || cmds[wi]->n == 0) {
      free(cmds[wi]);
      continue;
    }
    cmds[wi]->cmd.fn = run_replies;
    cb__worker_post(srv->workers[wi], &cmds[wi]->cmd);
  }
  free(count);
  free(bytes);
  free(cmds);
  free(hcur);
  return err;
}

/* Tests (testing.h): the bytes of ref's answer queued and not written, on ref's worker; SIZE_MAX when the
 * request is over. */
size_t cb__deferred_queued(cb__worker_t *w, cb_reqref_t ref) {
  defer_w_t *d = (defer_w_t *)w->parts[CB__PART_DEFERRED].state;
  uint32_t i = (uint32_t)(ref >> 32) & 0xffffff;
  slot_t *s = d != NULL && i / CHUNK_SLOTS < d->nchunks ? slot_at(d, i) : NULL;
  uint64_t word = s != NULL ? __atomic_load_n(&s->word, __ATOMIC_ACQUIRE) : 0;
  if (s == NULL || s->r == NULL || GEN(word) != (uint32_t)ref || STATE(word) == ST_DONE) return SIZE_MAX;
  return s->r->proto->queued(s->r);
}

/* ---- the target went away ---- */

typedef struct {
  cb__cmd_t cmd;
  uint64_t id;
} fail_cmd_t;

static void run_fail(cb__worker_t *w, cb__cmd_t *cmd) {
  fail_cmd_t *fc = (fail_cmd_t *)cmd;
  defer_w_t *d = ((defer_w_t *)w->parts[CB__PART_DEFERRED].state);
  if (d != NULL && !d->closed) {
    for (uint32_t c = 0; c < d->nchunks; c++) {
      for (uint32_t k = 0; k < CHUNK_SLOTS; k++) {
        slot_t *s = &d->chunks[c][k];
        if (s->r != NULL && s->r->route->stub_id == fc->id) take_back(w, s, 503);
      }
    }
  }
  free(fc);
}

int cb_server_deferred_fail(cb_server_t *srv, uint64_t id) {
  if (srv == NULL || id == 0) return UV_EINVAL;
  fail_cmd_t **cmds = calloc((size_t)srv->nworkers, sizeof *cmds);
  int err = cmds ? 0 : UV_ENOMEM;
  for (int i = 0; i < srv->nworkers && err == 0; i++)
    if ((cmds[i] = malloc(sizeof **cmds)) == NULL) err = UV_ENOMEM;
  for (int i = 0; cmds && i < srv->nworkers; i++) {
    if (err) {
      free(cmds[i]);
      continue;
    }
    cmds[i]->cmd.fn = run_fail;
    cmds[i]->id = id;
    cb__worker_post(srv->workers[i], &cmds[i]->cmd);
  }
  free(cmds);
  return err;
}

/* ---- adding a deferred route ---- */

static void droute_free(void *arg) {
  droute_t *dr = arg;
  if (dr->free_ud) dr->free_ud(dr->ud);
  free(dr);
}

static const cb__route_kind_t defer_kind = {.free_arg = droute_free};

int cb_server_deferred_add(cb_server_t *srv, const cb_deferred_t *d, uint64_t *id) {
  cb__detail_clear();
  if (srv == NULL || d == NULL || id == NULL) return UV_EINVAL;
  if (d->deliver == NULL) return cb__bad_bytes(CB_FIELD_DELIVER, -1, CB_WHY_MISSING, NULL, 0);
  if (d->timeout_ms > MAX_TIMEOUT_MS)
    return cb__bad_number(CB_FIELD_TIMEOUT_MS, -1, CB_WHY_OUT_OF_RANGE, d->timeout_ms);
  if (cb__check_name(d->name)) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  droute_t *dr = calloc(1, sizeof *dr);
  if (dr == NULL) return UV_ENOMEM;
  *dr = (droute_t){.deliver = d->deliver, .ud = d->ud, .gone = d->gone, .body = d->body, .timeout_ms = d->timeout_ms ? d->timeout_ms : DEFAULT_TIMEOUT_MS,
                   .batch = d->batch != 0};
  uv_mutex_lock(&srv->api_mu);
  cb__routes_t *reg = srv->routes;
  cb__routes_lock(reg);
  uint64_t sid = cb__routes_next_id(reg);
  cb__routes_unlock(reg);
  char defname[32];
  cb_str_t name = d->name;
  if (name.ptr == NULL) name = (cb_str_t){defname, (size_t)snprintf(defname, sizeof defname, "handler_%llu",
                                                                    (unsigned long long)sid)};
  cb__route_t *rt;
  int err = cb__route_new(&d->match, name.ptr, name.len, &defer_kind, &defer_handler, dr, &rt);
  if (err) {
    free(dr);
    uv_mutex_unlock(&srv->api_mu);
    return err;
  }
  rt->stub_id = sid;
  err = cb__routes_slot(reg, rt);
  if (err == 0) {
    cb__routes_lock(reg);
    err = cb__routes_append(reg, rt);
    cb__routes_unlock(reg);
    if (err == 0) {
      err = cb__routes_publish(srv);
      if (err) {
        cb__routes_lock(reg);
        cb__routes_take(reg, sid);
        cb__routes_unlock(reg);
      }
    }
  }
  if (err) {
    dr->free_ud = NULL; /* on failure the caller keeps its ud */
    cb__route_unref(reg, rt);
  } else {
    dr->free_ud = d->free_ud;
    *id = sid;
  }
  uv_mutex_unlock(&srv->api_mu);
  return err;
}
