/* The stub route kind: a match plus a canned response, added at run time (cb_server_route_add and the rest of
 * the public route API live here too).
 *
 * Everything a stub answers is copied or opened when it is added, then never changes: bodies are referenced
 * from the stub (zero copy) by every response, and the route table that lists the stub keeps it alive until
 * those responses have left (route_table.c). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kinds/kinds.h"

/* What this kind keeps in a request while it answers (cb__req_t.kind). */
typedef struct CB__KIND_STATE_ATTR {
  uint64_t off;   /* body bytes emitted */
  unsigned piece; /* the piece being emitted */
  uint8_t due;    /* interval_ms: the timer fired for this piece (on_writable alone does not start one) */
  uint8_t refused; /* a template's {{body}}: over the echo budget, answered 503 */
  char *body;     /* a template's {{body}}: the request body, held from the echo budget (cap bytes) */
  size_t len, cap;
} stub_state_t;
CB__KIND_STATE_FITS(stub_state_t);
#define STUB(r) CB__KIND_STATE(r, stub_state_t)

#define MAX_BODY_BYTES (1ull << 30)   /* a CB_BODY_BYTES body: copied, so bounded */
#define MAX_GENERATED (1ull << 44)    /* 16 TiB: enough for any test */
#define MAX_DELAY_MS 3600000u
#define MAX_CHUNKS 1000000u
#define MAX_HEADER_BYTES 65536

typedef struct stub_s stub_t;
struct stub_s {
  int status;
  cb__hdr_t *headers;
  int nheaders;
  char *hbuf;
  uint64_t head_key; /* names, values and their lengths hashed: the same for every stub with the same headers */
  cb__fixed_t whole; /* the usual stub's whole answer (one_piece), under the stub's id (cb__res_fixed) */
  cb_body_kind kind;
  const char *body; /* BYTES (and small files): the copy; FILE: NULL (sent with sendfile) */
  uint64_t len;
  char *owned;
  int fd;
  unsigned delay_ms, chunks, interval_ms;
  uint64_t times;
  uint64_t claimed; /* atomic: answers given, when times > 0 */
  cb__fault_t fault; /* kind CB__FAULT_NONE: none */
  cb__fault_answer_t answer; /* what the fault departs from: this stub's head and answer */
  uint64_t draws;    /* atomic: the fault's rate draws */
  /* A drawn delay (delay_dist not FIXED): a delay fault's parameters (dist, ms, max_ms, sigma, seed), drawn with
   * cb__fault_delay_ms as that fault is, the n-th answer of this response getting the n-th draw. */
  uint8_t drawn;
  cb__fault_t dist;
  uint64_t delay_draws; /* atomic */
  /* A sequence: the responses in turn (seq_next: answers claimed, atomic), then `after`. Its items are stubs of
   * their own (with nseq 0); the route's stub holds them, and each request notes its item (cb__req_t.stub). */
  stub_t **seq;
  unsigned nseq;
  uint8_t after;
  uint64_t seq_next;
  /* A scenario: matches while its state is `when` (ANY_STATE: whatever it is), then moves it to `then`. */
  cb__scenario_t *scen;
  uint32_t when, then;
  uint8_t moves;
  /* A template (templated): the body's and each header value's, and this response's answers (atomic). */
  uint8_t tpl;
  cb__tpl_t body_tpl;
  cb__tpl_t *hdr_tpl; /* nheaders of them */
  uint64_t tpl_seq;
  cb__proxy_t *proxy; /* a proxy (proxy.c): the request is forwarded, none of the fields above answers */
};

#define ANY_STATE UINT32_MAX

static void stub_free(void *arg) {
  stub_t *st = arg;
  if (st == NULL) return;
  free(st->headers);
  free(st->hbuf);
  free(st->owned);
  if (st->fd >= 0) close(st->fd);
  cb__fault_free(&st->fault);
  for (unsigned i = 0; i < st->nseq; i++) stub_free(st->seq[i]);
  free(st->seq);
  cb__tpl_free(&st->body_tpl);
  for (int i = 0; st->hdr_tpl && i < st->nheaders; i++) cb__tpl_free(&st->hdr_tpl[i]);
  free(st->hdr_tpl);
  cb__proxy_free(st->proxy);
  free(st);
}

/* Whether the stub answers r: a stub with times > 0 answers that many requests over all workers (one atomic per
 * answer, on this stub); a sequence hands out its responses in turn (one atomic per answer); a scenario's state
 * must be `when`, and is moved to `then` with one compare-and-swap, so that of two requests racing for one
 * transition only one takes it (the other passes the stub over, as it would once the state had moved).
 * Everything that can refuse is looked at with plain loads first, so that a stub passed over for one reason does
 * not use up another: a use is only taken once the cheaper checks passed. (A request that wins the scenario's
 * swap and then finds times used up by a racing request has moved the state without an answer from this stub.) */
static int stub_claim(const cb__route_t *rt, cb__req_t *r) {
  stub_t *st = rt->arg;
  if (st->scen == NULL && st->nseq == 0) /* times alone: one atomic, as before sequences and scenarios */
    return __atomic_fetch_add(&st->claimed, 1, __ATOMIC_RELAXED) < st->times;
  if (st->times > 0 && __atomic_load_n(&st->claimed, __ATOMIC_RELAXED) >= st->times) return 0;
  if (st->nseq > 0 && st->after == CB_AFTER_NOT_FOUND && __atomic_load_n(&st->seq_next, __ATOMIC_RELAXED) >= st->nseq)
    return 0;
  if (st->scen != NULL) {
    uint32_t cur = __atomic_load_n(&st->scen->state, __ATOMIC_ACQUIRE);
    if (st->when != ANY_STATE && cur != st->when) return 0;
    if (st->moves && cur != st->then) {
      if (!__atomic_compare_exchange_n(&st->scen->state, &cur, st->then, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
      __atomic_add_fetch(st->scen->moves, 1, __ATOMIC_RELEASE); /* the lookups running now look again on a miss */
    }
  }
  if (st->times > 0 && __atomic_fetch_add(&st->claimed, 1, __ATOMIC_RELAXED) >= st->times) return 0;
  if (st->nseq > 0) {
    uint64_t i = __atomic_fetch_add(&st->seq_next, 1, __ATOMIC_RELAXED);
    if (i >= st->nseq) {
      if (st->after == CB_AFTER_NOT_FOUND) return 0;
      i = st->after == CB_AFTER_CYCLE ? i % st->nseq : st->nseq - 1;
    }
    r->stub = st->seq[i];
  }
  return 1;
}

/* A stub without times, sequence or scenario claims nothing: without a claim it is also a route the dispatch may
 * remember (a worker's last route, route_table.c). */
static const cb__route_kind_t stub_kind = {.claim = NULL, .free_arg = stub_free};
static const cb__route_kind_t stub_claim_kind = {.claim = stub_claim, .free_arg = stub_free};

/* ---- answering ---- */

static unsigned npieces(const stub_t *st) { return st->chunks ? st->chunks : 1; }

/* Where piece k ends: pieces of nearly equal size. */
static uint64_t piece_end(const stub_t *st, unsigned k) {
  if (st->chunks <= 1) return st->len; /* one piece: no 128-bit division on the common path */
  return (uint64_t)((unsigned __int128)st->len * (k + 1) / st->chunks);
}

/* Bytes [from, to) of the stub's body; piece_end: they end a piece (no DATA frame carries bytes of the next).
 * Generated bytes go in runs of at most CB__GEN_SPAN. Returns 1 when the output is above its high-water mark. */
static int body_range(cb__req_t *r, const stub_t *st, uint64_t from, uint64_t to, int piece_end) {
  int end_flag = piece_end ? CB__DATA_PIECE_END : 0;
  if (st->kind == CB_BODY_FILE) return cb__res_file(r, st->fd, st->body, from, (size_t)(to - from));
  if (st->kind == CB_BODY_BYTES)
    return cb__res_data(r, st->body + from, (size_t)(to - from), CB__DATA_STATIC | end_flag);
  const char *gen = cb__generated();
  int full = 0;
  while (gen != NULL && from < to) {
    uint64_t n = to - from > CB__GEN_SPAN ? CB__GEN_SPAN : to - from;
    full = cb__res_data(r, gen + from % 251, (size_t)n, CB__DATA_STATIC | (from + n == to ? end_flag : 0));
    from += n;
  }
  return full;
}

/* The body a pacing fault paces (cb__fault_answer_t.body): [from, to) as one piece. */
static int fault_body(cb__req_t *r, uint64_t from, uint64_t to) { return body_range(r, r->stub, from, to, 1); }

static void stub_tick(cb__req_t *r);

static void stub_produce(cb__req_t *r) {
  const stub_t *st = r->stub;
  r->blocked = 0;
  /* interval_ms: a piece begins on its timer only. On_writable at a piece's start (the output was full when
   * the last piece ended) starts that timer; it never sends the piece itself. */
  if (st->interval_ms > 0 && STUB(r)->piece > 0 && !STUB(r)->due) {
    if (cb__req_timer(r, st->interval_ms, stub_tick) != 0) cb__conn_abort(r->conn);
    return;
  }
  if (st->kind == CB_BODY_GENERATED && cb__generated() == NULL) { /* out of memory: the response comes short */
    cb__res_end(r);
    return;
  }
  for (;;) {
    uint64_t end = piece_end(st, STUB(r)->piece);
    int full = 0;
    while (STUB(r)->off < end) {
      /* Generated bytes a run at a time, so that a full output stops a big piece between two runs. */
      uint64_t off = STUB(r)->off, n = end - off;
      if (st->kind == CB_BODY_GENERATED && n > CB__GEN_SPAN) n = CB__GEN_SPAN;
      full = body_range(r, st, off, off + n, off + n == end);
      STUB(r)->off = off + n;
      if (full && STUB(r)->off < end) { /* mid-piece: go on when the output has room */
        r->blocked = 1;
        return;
      }
    }
    STUB(r)->due = 0;
    if (++STUB(r)->piece >= npieces(st)) {
      cb__res_end(r);
      return;
    }
    /* The next piece waits: for room in the output first (on_writable), then for its interval. */
    if (full) {
      r->blocked = 1;
      return;
    }
    if (st->interval_ms > 0) {
      if (cb__req_timer(r, st->interval_ms, stub_tick) != 0) cb__conn_abort(r->conn);
      return;
    }
  }
}

static void stub_tick(cb__req_t *r) {
  r->conn->w->pace_wakes++;
  STUB(r)->due = 1;
  stub_produce(r);
}

/* Room in the output: the stub's own pieces, or those of a fault that paces its body. */
static void stub_writable(cb__req_t *r) {
  const stub_t *st = r->stub;
  if (st == NULL || st->tpl) return; /* not begun (stub_end notes the stub), or a template's answer went whole */
  if (cb__fault_pacing(r))
    cb__fault_writable(r);
  else
    stub_produce(r);
}

/* The usual stub: a body of bytes, sent in one piece with its length (not chunked). */
static int one_piece(const stub_t *st) {
  return st->kind == CB_BODY_BYTES && st->chunks == 0 && st->len > 0 && st->status != 204 && st->status != 304;
}

static void tpl_start(cb__req_t *r, stub_t *st);

static void stub_start(cb__req_t *r) {
  const stub_t *st = r->stub;
  if (st->tpl) {
    tpl_start(r, (stub_t *)st);
    return;
  }
  int no_body = st->status == 204 || st->status == 304;
  int64_t length = no_body ? CB__NO_BODY : st->chunks ? CB__STREAMED : (int64_t)st->len;
  r->head_key = st->head_key; /* a stub's headers are fixed: its head can be reused */
  if (one_piece(st) && r->method != CB_METHOD_HEAD) {
    /* Its head, its bytes, then the end (which, as in stub_produce, does not wait for the output to drain below
     * its high-water mark), in one step. Nothing touches r after it: the end may free an HTTP/2 stream. */
    STUB(r)->off = st->len;
    STUB(r)->piece = 1;
    cb__res_fixed(r, &st->whole);
    return;
  }
  cb__res_head(r, st->status, NULL, st->headers, st->nheaders, length);
  r->head_key = 0;
  STUB(r)->off = 0;
  STUB(r)->piece = 0;
  STUB(r)->due = 0;
  if (no_body || r->method == CB_METHOD_HEAD || st->len == 0) {
    cb__res_end(r);
    return;
  }
  if (st->kind == CB_BODY_BYTES && st->chunks <= 1) {
    /* One chunk: its bytes in one piece, then the end. */
    cb__res_data(r, st->body, (size_t)st->len, CB__DATA_STATIC | CB__DATA_PIECE_END);
    STUB(r)->off = st->len;
    STUB(r)->piece = 1;
    cb__res_end(r);
    return;
  }
  stub_produce(r);
}

/* The answer begins: the response (a sequence's: the one its claim noted), its fault, its delay. */
static void stub_end(cb__req_t *r) {
  stub_t *st = r->route->arg;
  if (st->nseq > 0) st = (stub_t *)r->stub;
  r->stub = st;
  if (st->fault.kind != CB__FAULT_NONE && cb__fault_fires(&st->fault, &st->draws)) {
    cb__fault_start(r, &st->fault, &st->answer);
    return;
  }
  uint32_t ms = st->delay_ms;
  if (st->drawn) ms = cb__fault_delay_ms(&st->dist, __atomic_fetch_add(&st->delay_draws, 1, __ATOMIC_RELAXED), MAX_DELAY_MS);
  r->delay_ms = ms;
  if (ms > 0 && cb__req_timer(r, ms, stub_start) == 0) return;
  stub_start(r);
}

static const cb__handler_t stub_handler = {.on_end = stub_end, .on_writable = stub_writable};

/* ---- templates (template.c) ----
 * A templated answer is made per request: its header values and body rendered for it, held from the echo
 * budget while they exist (a {{body}} or a header repeated many times can make an answer much bigger than the
 * request), sent whole with its length. The request body is kept only for a template that uses {{body}}. */

static void tpl_refuse(cb__req_t *r) {
  free(STUB(r)->body);
  cb__echo_release(r->conn, STUB(r)->cap);
  STUB(r)->body = NULL;
  STUB(r)->len = STUB(r)->cap = 0;
  STUB(r)->refused = 1;
}

static void tpl_body(cb__req_t *r, const char *p, size_t n) {
  if (STUB(r)->refused) return;
  if (STUB(r)->len + n > STUB(r)->cap) {
    size_t cap = STUB(r)->cap ? STUB(r)->cap : 4096;
    while (cap < STUB(r)->len + n) cap *= 2;
    size_t max = r->conn->w->cfg->max_body_bytes; /* the protocol refuses a longer body before it gets here */
    if (cap > max && STUB(r)->len + n <= max) cap = max;
    if (cb__echo_hold(r->conn, cap - STUB(r)->cap) != 0) {
      tpl_refuse(r);
      return;
    }
    char *b = realloc(STUB(r)->body, cap);
    if (b == NULL) {
      cb__echo_release(r->conn, cap - STUB(r)->cap);
      tpl_refuse(r);
      return;
    }
    STUB(r)->body = b;
    STUB(r)->cap = cap;
  }
  memcpy(STUB(r)->body + STUB(r)->len, p, n);
  STUB(r)->len += n;
}

static void tpl_free_req(cb__req_t *r) {
  free(STUB(r)->body);
  cb__echo_release(r->conn, STUB(r)->cap);
  STUB(r)->body = NULL;
  STUB(r)->cap = STUB(r)->len = 0;
}

/* Spaces and tabs at either end of a rendered header value are dropped: neither protocol carries them. */
static void trim(cb__hdr_t *h) {
  while (h->value_len && (h->value[0] == ' ' || h->value[0] == '\t')) {
    h->value++;
    h->value_len--;
  }
  while (h->value_len && (h->value[h->value_len - 1] == ' ' || h->value[h->value_len - 1] == '\t')) h->value_len--;
}

/* A rendered header value is cut there, as a stub's own values are bounded; it is rendered only up to the cut, so
 * a value that repeats {{body}} costs (and holds from the echo budget) no more than it sends. */
#define TPL_MAX_VALUE 8192

static void tpl_start(cb__req_t *r, stub_t *st) {
  r->head_key = 0;
  int no_body = st->status == 204 || st->status == 304, head_only = r->method == CB_METHOD_HEAD;
  if (STUB(r)->refused) { /* its {{body}} went over the echo budget */
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  uint64_t seq = __atomic_add_fetch(&st->tpl_seq, 1, __ATOMIC_RELAXED);
  const char *b = STUB(r)->body;
  size_t bl = STUB(r)->len, hbytes = 0, n = 0;
  size_t hlen[CB_MAX_HEADERS];
  for (int i = 0; i < st->nheaders; i++) {
    hlen[i] = cb__tpl_render(&st->hdr_tpl[i], r, b, bl, seq, 1, TPL_MAX_VALUE, NULL);
    hbytes += hlen[i];
  }
  if (!no_body) n = cb__tpl_render(&st->body_tpl, r, b, bl, seq, 0, SIZE_MAX, NULL);
  size_t out_n = head_only ? 0 : n;
  char *hbuf = NULL, *out = NULL;
  if (cb__echo_hold(r->conn, hbytes + out_n) != 0) { /* over the budget: 503, not a part of the answer */
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  if ((hbytes && (hbuf = malloc(hbytes)) == NULL) || (out_n && (out = malloc(out_n)) == NULL)) {
    free(hbuf);
    free(out);
    cb__echo_release(r->conn, hbytes + out_n);
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  cb__hdr_t hs[CB_MAX_HEADERS];
  size_t o = 0;
  for (int i = 0; i < st->nheaders; i++) {
    hs[i].name = st->headers[i].name;
    hs[i].name_len = st->headers[i].name_len;
    hs[i].value = hbuf + o;
    hs[i].value_len = cb__tpl_render(&st->hdr_tpl[i], r, b, bl, seq, 1, TPL_MAX_VALUE, hbuf + o);
    o += hlen[i];
    trim(&hs[i]);
  }
  if (out_n) cb__tpl_render(&st->body_tpl, r, b, bl, seq, 0, out_n, out);
  cb__res_head(r, st->status, NULL, hs, st->nheaders, no_body ? CB__NO_BODY : (int64_t)n);
  free(hbuf); /* the head is written (HTTP/1.1) or its fields copied (nghttp2) */
  cb__echo_release(r->conn, hbytes);
  if (out_n) cb__res_data(r, out, out_n, CB__DATA_HELD | CB__DATA_PIECE_END); /* the protocol owns it now */
  STUB(r)->off = out_n;
  STUB(r)->piece = 1;
  cb__res_end(r);
}

static const cb__handler_t stub_body_handler = {
    .on_body = tpl_body, .on_end = stub_end, .on_writable = stub_writable, .on_free = tpl_free_req};

/* ---- building a stub from its public description ---- */

/* The key under which HTTP/1.1 may reuse a head made with these headers (cb__req_t.head_key): a 64-bit hash of
 * the names, values and lengths (FNV-1a, then splitmix64's finaliser), never 0. Stubs with the same headers
 * share it, so 100 stubs answering alike share one memo; two different header lists would have to collide in
 * 64 bits to be confused (stubs are the test author's, not a client's, so the hash need not resist an
 * adversary). */
static uint64_t headers_key(const cb__hdr_t *h, int n) {
  uint64_t x = 14695981039346656037ull;
#define MIX_BYTE(b) (x = (x ^ (uint8_t)(b)) * 1099511628211ull)
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < 4; k++) MIX_BYTE(h[i].name_len >> 8 * k);
    for (size_t k = 0; k < h[i].name_len; k++) MIX_BYTE(h[i].name[k]);
    for (int k = 0; k < 4; k++) MIX_BYTE(h[i].value_len >> 8 * k);
    for (size_t k = 0; k < h[i].value_len; k++) MIX_BYTE(h[i].value[k]);
  }
#undef MIX_BYTE
  return cb__mix64(x) | 1;
}

static int copy_headers(stub_t *st, const cb_response_t *res) {
  if (res->nheaders == 0) return 0;
  long long n = (long long)res->nheaders;
  if (res->headers == NULL) return cb__bad_number(CB_FIELD_HEADERS, -1, CB_WHY_NULL_POINTER, n);
  if (res->nheaders > CB_MAX_HEADERS) return cb__bad_number(CB_FIELD_HEADERS, -1, CB_WHY_TOO_MANY, n);
  size_t total = 0;
  for (size_t i = 0; i < res->nheaders; i++) {
    const cb_header_t *h = &res->headers[i];
    int why = cb__header_name_why(h->name.ptr, h->name.len);
    if (why == 0 && cb__forbidden_header(h->name.ptr, h->name.len)) why = CB_WHY_FORBIDDEN_HEADER;
    if (why) return cb__bad_bytes(CB_FIELD_HEADERS, (long)i, why, h->name.ptr, h->name.len);
    if (h->value.ptr == NULL && h->value.len)
      return cb__bad_bytes(CB_FIELD_HEADERS, (long)i, CB_WHY_NULL_POINTER, NULL, 0);
    if (h->value.ptr && (why = cb__header_value_why(h->value.ptr, h->value.len)) != 0)
      return cb__bad_bytes(CB_FIELD_HEADERS, (long)i, why, h->value.ptr, h->value.len);
    total += h->name.len + h->value.len;
  }
  if (total > MAX_HEADER_BYTES) return cb__bad_number(CB_FIELD_HEADERS, -1, CB_WHY_TOO_LONG, (long long)total);
  st->headers = calloc(res->nheaders, sizeof *st->headers);
  st->hbuf = malloc(total + 1);
  if (st->headers == NULL || st->hbuf == NULL) return UV_ENOMEM;
  char *o = st->hbuf;
  for (size_t i = 0; i < res->nheaders; i++) {
    const cb_header_t *h = &res->headers[i];
    cb__hdr_t *d = &st->headers[i];
    d->name = o;
    d->name_len = h->name.len;
    for (size_t k = 0; k < h->name.len; k++) { /* sent lowercased over both protocols */
      char ch = h->name.ptr[k];
      *o++ = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    d->value = o;
    d->value_len = h->value.len;
    if (h->value.len) memcpy(o, h->value.ptr, h->value.len);
    o += h->value.len;
  }
  st->nheaders = (int)res->nheaders;
  st->head_key = headers_key(st->headers, st->nheaders);
  return 0;
}

/* Files up to this size are read into memory when the stub is added; bigger ones are sent with sendfile(2).
 * Never mapped: a file someone truncates while it is served would make a read of its mapping fault (SIGBUS,
 * the end of a node that hosts the NIF), where sendfile just comes up short and that connection is closed. */
#define FILE_IN_MEMORY_MAX (1u << 20)

/* A body file is a regular file: a FIFO would block open(2) until a writer came (the CLI before its ready
 * line, a dirty scheduler of the node), a device such as /dev/zero has no size to announce, and a directory
 * has no bytes. It is looked at with stat(2) first, so that nothing else is ever opened (opening a device or a
 * FIFO can have effects of its own), then opened with O_NONBLOCK and looked at again through the descriptor:
 * if the path was replaced between the two, the descriptor is still checked and open(2) could not block. */
static int open_body_file(stub_t *st, cb_str_t path) {
  if (path.ptr == NULL)
    return cb__bad_bytes(CB_FIELD_BODY, -1, path.len ? CB_WHY_NULL_POINTER : CB_WHY_MISSING, NULL, 0);
  if (path.len == 0) return cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_EMPTY, path.ptr, 0);
  if (path.len >= 4096) return cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_TOO_LONG, path.ptr, path.len);
  if (memchr(path.ptr, '\0', path.len)) return cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_BAD_CHAR, path.ptr, path.len);
  char p[4096];
  memcpy(p, path.ptr, path.len);
  p[path.len] = '\0';
  struct stat sb;
  if (stat(p, &sb) != 0) return uv_translate_sys_error(errno);
  if (S_ISDIR(sb.st_mode)) return UV_EISDIR;
  if (!S_ISREG(sb.st_mode)) return cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_NOT_REGULAR, path.ptr, path.len);
  st->fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (st->fd < 0) return uv_translate_sys_error(errno);
  if (fstat(st->fd, &sb) != 0) return uv_translate_sys_error(errno);
  if (S_ISDIR(sb.st_mode)) return UV_EISDIR;
  if (!S_ISREG(sb.st_mode)) return cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_NOT_REGULAR, path.ptr, path.len);
  if ((uint64_t)sb.st_size > CB_MAX_BODY_FILE) return UV_EFBIG;
  st->len = (uint64_t)sb.st_size;
  if (st->len > FILE_IN_MEMORY_MAX) return 0;
  /* Small: read once, then served like bytes. */
  st->owned = malloc(st->len ? st->len : 1);
  if (st->owned == NULL) return UV_ENOMEM;
  uint64_t got = 0;
  while (got < st->len) {
    ssize_t n = pread(st->fd, st->owned + got, (size_t)(st->len - got), (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return uv_translate_sys_error(errno);
    if (n == 0) break; /* it shrank meanwhile: serve what was there */
    got += (uint64_t)n;
  }
  st->len = got;
  st->body = st->owned;
  st->kind = CB_BODY_BYTES;
  close(st->fd);
  st->fd = -1;
  return 0;
}

/* A drawn delay (cb_response_t.delay_dist): kept as a delay fault's parameters, so that the draws are the delay
 * fault's (cb__fault_delay_ms), with the same bound as a fixed delay. */
static int delay_dist(stub_t *st, const cb_response_t *res) {
  switch (res->delay_dist) {
    case CB_DELAY_FIXED:
      return 0;
    case CB_DELAY_UNIFORM:
      if (res->delay_max_ms > MAX_DELAY_MS)
        return cb__bad_number(CB_FIELD_DELAY, -1, CB_WHY_OUT_OF_RANGE, res->delay_max_ms);
      if (res->delay_ms > res->delay_max_ms)
        return cb__bad_number(CB_FIELD_DELAY, -1, CB_WHY_MIN_ABOVE_MAX, res->delay_ms);
      st->dist.dist = 1;
      break;
    case CB_DELAY_LOGNORMAL:
      if (!(res->delay_sigma > 0.0 && res->delay_sigma <= 10.0)) /* NaN too */
        return cb__bad_number(CB_FIELD_DELAY, -1, CB_WHY_OUT_OF_RANGE, (long long)res->delay_sigma);
      st->dist.dist = 2;
      st->dist.sigma = res->delay_sigma;
      break;
    default:
      return cb__bad_number(CB_FIELD_DELAY, -1, CB_WHY_OUT_OF_RANGE, res->delay_dist);
  }
  st->drawn = 1;
  st->dist.kind = CB__FAULT_DELAY;
  st->dist.ms = res->delay_ms;
  st->dist.max_ms = res->delay_max_ms;
  st->dist.seed = res->delay_seed;
  return 0;
}

/* A templated response: its body and every header value compiled (template.c). Templates are sent whole from
 * bytes: not in chunks, not with a fault (which would pace or cut the stub's fixed bytes). */
static int templates(stub_t *st, const cb_response_t *res, cb_str_t pattern) {
  if (res->chunks > 0 || st->fault.kind != CB__FAULT_NONE || res->body_kind != CB_BODY_BYTES)
    return cb__bad_number(CB_FIELD_TEMPLATE, -1, CB_WHY_CONFLICT, res->templated);
  st->tpl = 1;
  int err = cb__tpl_compile(st->body, (size_t)st->len, pattern, &st->body_tpl);
  if (err == UV_EINVAL) return cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_BAD_TEMPLATE, res->body.ptr, res->body.len);
  if (err) return err;
  if (st->nheaders > 0 && (st->hdr_tpl = calloc((size_t)st->nheaders, sizeof *st->hdr_tpl)) == NULL) return UV_ENOMEM;
  for (int i = 0; i < st->nheaders; i++) {
    err = cb__tpl_compile(st->headers[i].value, st->headers[i].value_len, pattern, &st->hdr_tpl[i]);
    if (err == UV_EINVAL)
      return cb__bad_bytes(CB_FIELD_HEADERS, i, CB_WHY_BAD_TEMPLATE, res->headers[i].value.ptr, res->headers[i].value.len);
    if (err) return err;
  }
  return 0;
}

const cb__proxy_t *cb__stub_proxy(const cb__route_t *rt) { return ((const stub_t *)rt->arg)->proxy; }

/* A proxy response: its options (proxy.c), and of the other fields only its delay and fault, which act on the
 * proxied answer. The pacing faults that pace a stub's own body (drip, dribble) need the body's length when the
 * stub is added, which a proxy does not know: refused. */
static int proxy_new(stub_t *st, const cb_response_t *res) {
  long long conflict = -1;
  if (res->status != 0) conflict = CB_FIELD_STATUS;
  else if (res->nheaders != 0) conflict = CB_FIELD_HEADERS;
  else if (res->body.len != 0 || res->body_kind != CB_BODY_BYTES || res->body_size != 0) conflict = CB_FIELD_BODY;
  else if (res->chunks != 0) conflict = CB_FIELD_CHUNKS;
  else if (res->interval_ms != 0) conflict = CB_FIELD_INTERVAL_MS;
  else if (res->templated) conflict = CB_FIELD_TEMPLATE;
  else if (res->delay_dist != CB_DELAY_FIXED) conflict = CB_FIELD_DELAY;
  if (conflict >= 0) return cb__bad_number((cb_field_id)conflict, -1, CB_WHY_CONFLICT, conflict == CB_FIELD_STATUS ? res->status : 1);
  if (res->delay_ms > MAX_DELAY_MS) return cb__bad_number(CB_FIELD_DELAY_MS, -1, CB_WHY_OUT_OF_RANGE, res->delay_ms);
  int err = 0;
  if (res->fault.ptr != NULL || res->fault.len != 0) {
    err = cb__fault_parse(res->fault.ptr, res->fault.len, &st->fault);
    if (err == UV_EINVAL) return cb__bad_bytes(CB_FIELD_FAULT, -1, CB_WHY_BAD_FAULT, res->fault.ptr, res->fault.len);
    if (err) return err;
    if (st->fault.kind == CB__FAULT_DRIP || st->fault.kind == CB__FAULT_DRIBBLE)
      return cb__bad_bytes(CB_FIELD_FAULT, -1, CB_WHY_CONFLICT, res->fault.ptr, res->fault.len);
  }
  err = cb__proxy_new(res->proxy, &st->proxy);
  if (err) return err;
  st->delay_ms = res->delay_ms;
  st->times = res->times;
  cb__proxy_answer_with(st->proxy, res->delay_ms, &st->fault);
  return 0;
}

static int stub_new(const cb_response_t *res, cb_str_t pattern, stub_t **out) {
  *out = NULL;
  stub_t *st = calloc(1, sizeof *st);
  if (st == NULL) return UV_ENOMEM;
  st->fd = -1;
  int err = 0;
  if (res->proxy != NULL) {
    err = proxy_new(st, res);
    if (err) {
      stub_free(st);
      return err;
    }
    *out = st;
    return 0;
  }
  if (res->status < 200 || res->status > 599)
    err = cb__bad_number(CB_FIELD_STATUS, -1, CB_WHY_OUT_OF_RANGE, res->status);
  else if (res->delay_ms > MAX_DELAY_MS)
    err = cb__bad_number(CB_FIELD_DELAY_MS, -1, CB_WHY_OUT_OF_RANGE, res->delay_ms);
  else if (res->chunks > MAX_CHUNKS)
    err = cb__bad_number(CB_FIELD_CHUNKS, -1, CB_WHY_OUT_OF_RANGE, res->chunks);
  else if (res->interval_ms > MAX_DELAY_MS)
    err = cb__bad_number(CB_FIELD_INTERVAL_MS, -1, CB_WHY_OUT_OF_RANGE, res->interval_ms);
  if (err == 0) err = delay_dist(st, res);
  st->status = res->status;
  st->kind = res->body_kind;
  st->delay_ms = res->delay_ms;
  st->chunks = res->chunks;
  st->interval_ms = res->interval_ms;
  st->times = res->times;
  if (err == 0) err = copy_headers(st, res);
  if (err == 0 && (res->fault.ptr != NULL || res->fault.len != 0)) {
    err = cb__fault_parse(res->fault.ptr, res->fault.len, &st->fault);
    if (err == UV_EINVAL) err = cb__bad_bytes(CB_FIELD_FAULT, -1, CB_WHY_BAD_FAULT, res->fault.ptr, res->fault.len);
  }
  st->answer = (cb__fault_answer_t){st->status, st->headers, st->nheaders, stub_start, 0, NULL, MAX_DELAY_MS};
  if (err == 0) {
    switch (res->body_kind) {
      case CB_BODY_BYTES:
        if (res->body.ptr == NULL && res->body.len) {
          err = cb__bad_bytes(CB_FIELD_BODY, -1, CB_WHY_NULL_POINTER, NULL, 0);
          break;
        }
        if (res->body.len > MAX_BODY_BYTES) {
          err = cb__bad_number(CB_FIELD_BODY, -1, CB_WHY_TOO_LONG, (long long)res->body.len);
          break;
        }
        st->len = res->body.len;
        st->owned = malloc(st->len ? st->len : 1);
        if (st->owned == NULL) {
          err = UV_ENOMEM;
          break;
        }
        if (st->len) memcpy(st->owned, res->body.ptr, st->len);
        st->body = st->owned;
        break;
      case CB_BODY_GENERATED:
        if (res->body_size > MAX_GENERATED)
          err = cb__bad_number(CB_FIELD_BODY, -1, CB_WHY_OUT_OF_RANGE,
                               res->body_size > INT64_MAX ? INT64_MAX : (long long)res->body_size);
        st->len = res->body_size;
        if (err == 0 && st->len > 0 && cb__generated() == NULL) err = UV_ENOMEM;
        break;
      case CB_BODY_FILE:
        err = open_body_file(st, res->body);
        break;
      default:
        err = cb__bad_number(CB_FIELD_BODY, -1, CB_WHY_OUT_OF_RANGE, res->body_kind);
    }
  }
  if (err == 0 && (st->status == 204 || st->status == 304) && (st->len > 0 || st->chunks > 0))
    err = cb__bad_number(CB_FIELD_STATUS, -1, CB_WHY_BODY_NOT_ALLOWED, st->status);
  if (err == 0 && st->chunks > 0 && st->chunks > st->len && !(st->len == 0 && st->chunks == 1))
    err = cb__bad_number(CB_FIELD_CHUNKS, -1, CB_WHY_CHUNKS_EXCEED_BODY, st->chunks);
  /* A fault that paces a body paces the stub's own, when it has one. */
  if (err == 0 && st->len > 0 && st->status != 204 && st->status != 304) {
    st->answer.body_len = st->len;
    st->answer.body = fault_body;
    err = cb__fault_fit(&st->fault, st->len);
    if (err == UV_EINVAL)
      err = cb__bad_bytes(CB_FIELD_FAULT, -1, CB_WHY_FAULT_EXCEEDS_BODY, res->fault.ptr, res->fault.len);
  }
  if (err == 0 && res->templated) err = templates(st, res, pattern);
  if (err) {
    stub_free(st);
    return err;
  }
  *out = st;
  return 0;
}

/* ---- the public API ---- */

/* Whether the stub (or a response of its sequence) has a template that inserts the request's body. */
static int uses_body(const stub_t *st) {
  if (st->tpl && st->body_tpl.uses_body) return 1;
  for (int i = 0; st->tpl && i < st->nheaders; i++)
    if (st->hdr_tpl[i].uses_body) return 1;
  for (unsigned i = 0; i < st->nseq; i++)
    if (uses_body(st->seq[i])) return 1;
  return 0;
}

static void set_whole(stub_t *st, uint64_t sid) {
  st->whole = (cb__fixed_t){.status = st->status, .ctype = NULL, .extra = st->headers, .nextra = st->nheaders,
                            .body = st->body, .len = (size_t)st->len, .flags = CB__DATA_STATIC | CB__DATA_PIECE_END,
                            .memo_id = sid};
}

/* A scenario's name or state: as a route's name (1..CB_MAX_NAME printable ASCII bytes, no space). */
static int check_label(int field, cb_str_t v) {
  if (v.ptr == NULL) return cb__bad_bytes(field, -1, v.len ? CB_WHY_NULL_POINTER : CB_WHY_MISSING, NULL, 0);
  if (v.len == 0) return cb__bad_bytes(field, -1, CB_WHY_EMPTY, v.ptr, 0);
  if (v.len > CB_MAX_NAME) return cb__bad_bytes(field, -1, CB_WHY_TOO_LONG, v.ptr, v.len);
  for (size_t i = 0; i < v.len; i++)
    if ((unsigned char)v.ptr[i] <= 0x20 || (unsigned char)v.ptr[i] >= 0x7f)
      return cb__bad_bytes(field, -1, CB_WHY_BAD_CHAR, v.ptr, v.len);
  return 0;
}

static int given(cb_str_t v) { return v.ptr != NULL || v.len != 0; }

/* The stub's scenario: its name and states checked, then interned in the server's registry (scenario.c). */
static int scenario_of(cb__routes_t *reg, const cb_stub_t *stub, stub_t *st) {
  if (!given(stub->scenario)) {
    if (given(stub->when)) return cb__bad_bytes(CB_FIELD_WHEN, -1, CB_WHY_NEEDS_SCENARIO, stub->when.ptr, stub->when.len);
    if (given(stub->then)) return cb__bad_bytes(CB_FIELD_THEN, -1, CB_WHY_NEEDS_SCENARIO, stub->then.ptr, stub->then.len);
    return 0;
  }
  int err = check_label(CB_FIELD_SCENARIO, stub->scenario);
  if (err == 0 && given(stub->when)) err = check_label(CB_FIELD_WHEN, stub->when);
  if (err == 0 && given(stub->then)) err = check_label(CB_FIELD_THEN, stub->then);
  if (err) return err;
  cb__scenarios_t *sc = cb__routes_scenarios(reg);
  err = cb__scenario_find(sc, stub->scenario, &st->scen);
  st->when = ANY_STATE;
  if (err == 0 && given(stub->when)) err = cb__scenario_state_id(sc, stub->when, &st->when);
  if (err == 0 && given(stub->then)) {
    err = cb__scenario_state_id(sc, stub->then, &st->then);
    st->moves = 1;
  }
  return err;
}

/* A sequence: a stub of its own for each response, held by the route's stub, which answers nothing itself (but
 * lists the first response's status and counts `times`). */
static int sequence_new(const cb_stub_t *stub, stub_t **out) {
  *out = NULL;
  size_t n = stub->nresponses;
  if (n > CB_MAX_RESPONSES) return cb__bad_number(CB_FIELD_RESPONSES, -1, CB_WHY_TOO_MANY, (long long)n);
  if (stub->responses == NULL) return cb__bad_number(CB_FIELD_RESPONSES, -1, CB_WHY_NULL_POINTER, (long long)n);
  if ((unsigned)stub->after > CB_AFTER_NOT_FOUND) return cb__bad_number(CB_FIELD_AFTER, -1, CB_WHY_OUT_OF_RANGE, stub->after);
  stub_t *st = calloc(1, sizeof *st);
  if (st == NULL || (st->seq = calloc(n, sizeof *st->seq)) == NULL) {
    free(st);
    return UV_ENOMEM;
  }
  st->fd = -1;
  for (size_t i = 0; i < n; i++) {
    int err = stub->responses[i].proxy != NULL ? cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_CONFLICT, (long long)i)
                                               : stub_new(&stub->responses[i], stub->match.path, &st->seq[i]);
    if (err) {
      stub_free(st);
      return err;
    }
    st->nseq = (unsigned)i + 1;
  }
  st->status = st->seq[0]->status;
  st->times = stub->response.times;
  st->after = (uint8_t)stub->after;
  *out = st;
  return 0;
}

int cb__stub_append(cb__routes_t *reg, const cb_stub_t *stub, uint64_t *id) {
  cb__detail_clear();
  if (stub == NULL || id == NULL) return UV_EINVAL;
  if (cb__check_name(stub->name)) return UV_EINVAL;
  stub_t *st;
  if (stub->nresponses > 0 && stub->response.proxy != NULL)
    return cb__bad_number(CB_FIELD_PROXY, -1, CB_WHY_CONFLICT, (long long)stub->nresponses);
  int err = stub->nresponses > 0 ? sequence_new(stub, &st) : stub_new(&stub->response, stub->match.path, &st);
  if (err) return err;
  err = scenario_of(reg, stub, st);
  if (err) {
    stub_free(st);
    return err;
  }
  cb__routes_lock(reg);
  uint64_t sid = cb__routes_next_id(reg); /* ids are never reused, even when the add fails */
  cb__routes_unlock(reg);
  char defname[32];
  cb_str_t name = stub->name;
  if (name.ptr == NULL) {
    int n = snprintf(defname, sizeof defname, "stub_%llu", (unsigned long long)sid);
    name = (cb_str_t){defname, (size_t)n};
  }
  cb__route_t *rt;
  int claims = st->times > 0 || st->nseq > 0 || st->scen != NULL;
  err = cb__route_new(&stub->match, name.ptr, name.len, claims ? &stub_claim_kind : &stub_kind,
                      st->proxy ? cb__proxy_handler(st->proxy) : uses_body(st) ? &stub_body_handler : &stub_handler, st, &rt);
  if (err) {
    stub_free(st);
    return err;
  }
  rt->stub_id = sid;
  set_whole(st, sid);
  for (unsigned i = 0; i < st->nseq; i++) set_whole(st->seq[i], sid); /* memos are kept by address and id */
  err = cb__routes_slot(reg, rt);
  if (err == 0) {
    cb__routes_lock(reg);
    err = cb__routes_append(reg, rt);
    cb__routes_unlock(reg);
  }
  if (err) {
    cb__route_unref(reg, rt);
    return err;
  }
  *id = sid;
  return 0;
}

/* Takes the stubs ids[0..n-1] back out of the registry (the newest last, so each is found at once). */
static void take_back(cb__routes_t *reg, const uint64_t *ids, size_t n) {
  while (n > 0) {
    cb__routes_lock(reg);
    cb__route_t *rt = cb__routes_take(reg, ids[--n]);
    cb__routes_unlock(reg);
    cb__route_unref(reg, rt);
  }
}

int cb_server_route_add_many(cb_server_t *srv, const cb_stub_t *stubs, size_t n, uint64_t *ids, size_t *failed) {
  if (failed != NULL) *failed = n;
  if (srv == NULL || (n > 0 && (stubs == NULL || ids == NULL))) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  if (n == 0) return 0;
  if (n > CB_MAX_ROUTES) return CB_ELIMIT;
  uv_mutex_lock(&srv->api_mu);
  size_t i;
  int err = 0;
  for (i = 0; i < n; i++) {
    err = cb__stub_append(srv->routes, &stubs[i], &ids[i]);
    if (err) break;
  }
  if (err) {
    if (failed != NULL) *failed = i;
  } else {
    err = n > 1 ? cb__routes_publish_now(srv) : cb__routes_publish(srv);
  }
  if (err) take_back(srv->routes, ids, i); /* not in any worker's table yet */
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

int cb_server_route_add(cb_server_t *srv, const cb_stub_t *stub, uint64_t *id) {
  if (srv == NULL || stub == NULL || id == NULL) return UV_EINVAL;
  return cb_server_route_add_many(srv, stub, 1, id, NULL);
}

int cb_server_route_remove(cb_server_t *srv, uint64_t id) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  uv_mutex_lock(&srv->api_mu);
  cb__routes_lock(srv->routes);
  cb__route_t *rt = id ? cb__routes_take(srv->routes, id) : NULL;
  cb__routes_unlock(srv->routes);
  int err = UV_ENOENT;
  if (rt != NULL) {
    /* On failure the workers keep the old table until the next change; the stub is gone from the list. */
    err = cb__routes_publish(srv);
    cb__route_unref(srv->routes, rt);
  }
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

int cb_server_route_reset(cb_server_t *srv) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  uv_mutex_lock(&srv->api_mu);
  int n;
  cb__routes_lock(srv->routes);
  cb__route_t **all = cb__routes_take_all(srv->routes, &n);
  cb__routes_unlock(srv->routes);
  int err = cb__routes_publish(srv);
  for (int i = 0; i < n; i++) cb__route_unref(srv->routes, all[i]);
  free(all);
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

static uint64_t answered(cb__routes_t *reg, const cb__route_t *rt) { return cb__routes_count(reg, 2 * rt->slot); }
static uint64_t all_requests(cb__routes_t *reg, const cb__route_t *rt) {
  return answered(reg, rt) + cb__routes_count(reg, 2 * rt->slot + 1);
}

int cb_server_stubs(cb_server_t *srv, cb_stub_list_t **out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  cb__routes_t *reg = srv->routes;
  cb__routes_lock(reg);
  int n;
  cb__route_t **stubs = cb__routes_stubs(reg, &n);
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += stubs[i]->name_len + stubs[i]->pattern_len + 2;
  cb_stub_list_t *list = malloc(sizeof *list + (size_t)n * sizeof(cb_stub_info_t) + bytes);
  if (list == NULL) {
    cb__routes_unlock(reg);
    return UV_ENOMEM;
  }
  list->count = (size_t)n;
  list->items = (cb_stub_info_t *)(list + 1);
  char *b = (char *)(list->items + n);
  for (int i = 0; i < n; i++) {
    const cb__route_t *rt = stubs[i];
    /* NULL: a deferred route (deferred.c) */
    const stub_t *st = rt->kind == &stub_kind || rt->kind == &stub_claim_kind ? rt->arg : NULL;
    cb_stub_info_t *x = &list->items[i];
    memcpy(b, rt->name, rt->name_len + 1);
    x->name = (cb_str_t){b, rt->name_len};
    b += rt->name_len + 1;
    memcpy(b, rt->pattern, rt->pattern_len + 1);
    x->path = (cb_str_t){b, rt->pattern_len};
    b += rt->pattern_len + 1;
    x->id = rt->stub_id;
    x->methods = rt->methods;
    x->priority = rt->priority;
    x->status = st ? st->status : 0;
    x->times = st ? st->times : 0;
    x->hits = answered(reg, rt);
    x->spent = st && st->times > 0 && __atomic_load_n(&st->claimed, __ATOMIC_RELAXED) >= st->times;
  }
  cb__routes_unlock(reg);
  /* Matching order, as the table sorts them: priority first, then the newest (ids grow with age). */
  for (int i = 1; i < n; i++) {
    cb_stub_info_t x = list->items[i];
    int k = i;
    while (k > 0 && (list->items[k - 1].priority < x.priority ||
                     (list->items[k - 1].priority == x.priority && list->items[k - 1].id < x.id))) {
      list->items[k] = list->items[k - 1];
      k--;
    }
    list->items[k] = x;
  }
  *out = list;
  return 0;
}

void cb_stub_list_free(cb_stub_list_t *list) { free(list); }

int cb_server_route_counts(cb_server_t *srv, cb_route_counts_t **out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  cb__routes_t *reg = srv->routes;
  cb__routes_lock(reg);
  int nf, ns;
  cb__route_t **fx = cb__routes_fixtures(reg, &nf);
  cb__route_t **stubs = cb__routes_stubs(reg, &ns);
  cb__route_t *nfound = cb__routes_not_found(reg);
  size_t n = (size_t)nf + 1 + (size_t)ns, bytes = nfound->name_len + 1;
  for (int i = 0; i < nf; i++) bytes += fx[i]->name_len + 1;
  for (int i = 0; i < ns; i++) bytes += stubs[i]->name_len + 1;
  cb_route_counts_t *list = malloc(sizeof *list + n * sizeof(cb_route_count_t) + bytes);
  if (list == NULL) {
    cb__routes_unlock(reg);
    return UV_ENOMEM;
  }
  list->count = n;
  list->items = (cb_route_count_t *)(list + 1);
  char *b = (char *)(list->items + n);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const cb__route_t *rt = i < (size_t)nf ? fx[i] : i == (size_t)nf ? nfound : stubs[i - (size_t)nf - 1];
    memcpy(b, rt->name, rt->name_len + 1);
    list->items[k].name = (cb_str_t){b, rt->name_len};
    list->items[k].requests = all_requests(reg, rt);
    b += rt->name_len + 1;
    k++;
  }
  cb__routes_unlock(reg);
  *out = list;
  return 0;
}

void cb_route_counts_free(cb_route_counts_t *counts) { free(counts); }
