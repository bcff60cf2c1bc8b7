/* Faults: answers that misbehave on purpose, so that a client's failure paths can be tested (docs/faults.md).
 *
 * A fault is one more kind of answer. It is written "KIND?name=value&..." and parsed once by
 * cb__fault_parse(): from the target of a /fault/{kind} request (the fixture route, parsed per request), or
 * from a stub's cb_response_t.fault (parsed when the stub is added). Running one uses the response API for
 * what is well-formed (heads, bodies, HTTP/2 frames) and reaches past it, to the connection, for what is not:
 * raw bytes into the output queue, a close without an answer, a reset (SO_LINGER 0).
 *
 * Every fault leaves the engine as it found it: the request is released when its connection or stream
 * goes (the journal records it with the fault's name), a connection a fault cut is freed like any other, and
 * the sizes and times a client may choose through /fault/ are bounded (the limits below; 400 over them).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* What this kind keeps in a request while it answers (cb__req_t.kind). */
typedef struct CB__KIND_STATE_ATTR {
  const cb__fault_t *f;
  const cb__fault_answer_t *answer;
  unsigned piece; /* dribble, drip, slow_head: the next piece; hang: ms left */
  unsigned wake;  /* dribble, drip, slow_head: the wake-up whose pieces go next (see fault.c, pacing) */
  uint8_t own;    /* /fault/{kind}: f was parsed for this request and is freed with it */
} fault_state_t;
CB__KIND_STATE_FITS(fault_state_t);
#define FAULT(r) CB__KIND_STATE(r, fault_state_t)

#define MAX_LENGTH (16u << 20)    /* a declared body */
#define MAX_GARBAGE (64u << 10)   /* garbage bytes: allocated per request, so kept small */
#define MAX_MS 3600000u           /* hang, delay, dribble (a stub's) */
#define MAX_ROUTE_MS 60000u       /* the same through /fault/, whose parameters are the client's (as /delay/) */
#define MAX_PIECES 100000u        /* dribble */
#define MAX_DATA (64u << 10)      /* raw bytes */
#define MAX_SIGMA 10.0            /* delay=lognormal */
#define DEFAULT_LENGTH 1024
#define DEFAULT_GARBAGE 64
#define HANG_TICK_MS 200          /* how often a hang looks whether its peer has gone */

/* ---- the raw presets: the responses of OTP httpc_SUITE's dummy server, and a few more ---- */

#define S(lit) lit, sizeof(lit) - 1
static const struct {
  const char *name;
  const char *bytes;
  size_t len;
} presets[] = {
    {"bare_lf", S("HTTP/1.1 200 OK\ncontent-length: 2\n\nok")},
    {"obs_fold", S("HTTP/1.1 200 OK\r\nx-folded: a\r\n b\r\ncontent-length: 2\r\n\r\nok")},
    {"no_reason", S("HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok")},
    {"bad_status_line", S("HTTP/1.1 OK 200\r\ncontent-length: 2\r\n\r\nok")},
    {"cl_te", S("HTTP/1.1 200 OK\r\ncontent-length: 10\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")},
    {"te_capitalised", S("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")},
    {"te_identity", S("HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\nok")},
    {"informational", S("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n"
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")},
    {"http10_no_length", S("HTTP/1.0 200 OK\r\n\r\nok")},
};
#undef S

/* ---- parsing ---- */

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into out ('+' is a space). Returns the length, or -1 for a bad escape. */
static long pct_decode(const char *s, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (i + 2 >= n) return -1;
      int a = hexval(s[i + 1]), b = hexval(s[i + 2]);
      if (a < 0 || b < 0) return -1;
      out[o++] = (char)(a * 16 + b);
      i += 2;
    } else {
      out[o++] = s[i] == '+' ? ' ' : s[i];
    }
  }
  return (long)o;
}

static int eq(const char *p, size_t n, const char *lit) { return strlen(lit) == n && memcmp(p, lit, n) == 0; }

/* 1..20 decimal digits, at most max. */
static int parse_u64(const char *p, size_t n, uint64_t max, uint64_t *out) {
  if (n == 0 || n > 20) return UV_EINVAL;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return UV_EINVAL;
    uint64_t d = (uint64_t)(p[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return UV_EINVAL;
    v = v * 10 + d;
  }
  if (v > max) return UV_EINVAL;
  *out = v;
  return 0;
}

/* A decimal D[.DDDDDDDDD] as parts per billion, at most max (in ppb). */
static int parse_ppb(const char *p, size_t n, uint64_t max, uint64_t *out) {
  size_t i = 0;
  uint64_t whole = 0, frac = 0, scale = 1000000000u;
  if (n == 0) return UV_EINVAL;
  while (i < n && p[i] >= '0' && p[i] <= '9' && i < 3) whole = whole * 10 + (uint64_t)(p[i++] - '0');
  if (i == 0) return UV_EINVAL;
  if (i < n) {
    if (p[i++] != '.' || i == n || n - i > 9) return UV_EINVAL;
    for (; i < n; i++) {
      if (p[i] < '0' || p[i] > '9') return UV_EINVAL;
      scale /= 10;
      frac += (uint64_t)(p[i] - '0') * scale;
    }
  }
  uint64_t v = whole * 1000000000u + frac;
  if (v > max) return UV_EINVAL;
  *out = v;
  return 0;
}

/* The status code of a raw response's last status line ("HTTP/1.x DDD"), for the journal; 0 when none. */
static int raw_status(const char *p, size_t n) {
  int status = 0;
  for (size_t i = 0; i + 12 <= n; i++) {
    if ((i == 0 || p[i - 1] == '\n') && memcmp(p + i, "HTTP/1.", 7) == 0 && p[i + 8] == ' ' && p[i + 9] >= '1' &&
        p[i + 9] <= '5' && p[i + 10] >= '0' && p[i + 10] <= '9' && p[i + 11] >= '0' && p[i + 11] <= '9')
      status = (p[i + 9] - '0') * 100 + (p[i + 10] - '0') * 10 + (p[i + 11] - '0');
  }
  return status;
}

void cb__fault_free(cb__fault_t *f) {
  if (f == NULL) return;
  free(f->owned);
  f->owned = NULL;
}

/* One name=value (value percent-decoded into val). */
static int param(cb__fault_t *f, const char *name, size_t nl, const char *val, size_t vl, unsigned *seen) {
  uint64_t u = 0;
  int err = 0;
  if (eq(name, nl, "at")) {
    *seen |= 1;
    if (eq(val, vl, "before")) f->at = 0;
    else if (eq(val, vl, "head")) f->at = 1;
    else if (eq(val, vl, "body")) f->at = 2;
    else err = UV_EINVAL;
  } else if (eq(name, nl, "bytes")) {
    *seen |= 2;
    err = parse_u64(val, vl, MAX_LENGTH, &f->bytes);
  } else if (eq(name, nl, "length")) {
    *seen |= 4;
    err = parse_u64(val, vl, MAX_LENGTH, &f->length);
  } else if (eq(name, nl, "seed")) {
    err = parse_u64(val, vl, UINT64_MAX, &f->seed);
  } else if (eq(name, nl, "ms")) {
    err = parse_u64(val, vl, MAX_MS, &u);
    f->ms = (uint32_t)u;
  } else if (eq(name, nl, "max")) {
    *seen |= 8;
    err = parse_u64(val, vl, MAX_MS, &u);
    f->max_ms = (uint32_t)u;
  } else if (eq(name, nl, "sigma")) {
    *seen |= 16;
    err = parse_ppb(val, vl, (uint64_t)(MAX_SIGMA * 1e9), &u);
    f->sigma = (double)u / 1e9;
  } else if (eq(name, nl, "pieces")) {
    err = parse_u64(val, vl, MAX_PIECES, &u);
    if (err == 0 && u == 0) err = UV_EINVAL;
    f->pieces = (uint32_t)u;
  } else if (eq(name, nl, "code")) {
    err = parse_u64(val, vl, UINT32_MAX, &u);
    f->code = (uint32_t)u;
  } else if (eq(name, nl, "last")) {
    err = parse_u64(val, vl, INT32_MAX, &u);
    f->last = (int64_t)u;
  } else if (eq(name, nl, "max_frame")) {
    err = parse_u64(val, vl, 16777215, &u);
    if (err == 0 && u < 16384) err = UV_EINVAL; /* RFC 9113 6.5.2 */
    f->max_frame = (int64_t)u;
  } else if (eq(name, nl, "window")) {
    err = parse_u64(val, vl, INT32_MAX, &u);
    f->window = (int64_t)u;
  } else if (eq(name, nl, "rate")) {
    err = parse_ppb(val, vl, CB__FAULT_ALWAYS, &u);
    f->rate_ppb = (uint32_t)u;
  } else if (eq(name, nl, "close")) {
    if (eq(val, vl, "1") || eq(val, vl, "true")) f->close = 1;
    else if (eq(val, vl, "0") || eq(val, vl, "false")) f->close = 0;
    else err = UV_EINVAL;
  } else if (eq(name, nl, "preset")) {
    *seen |= 32;
    size_t i = 0;
    while (i < sizeof presets / sizeof presets[0] && !eq(val, vl, presets[i].name)) i++;
    if (i == sizeof presets / sizeof presets[0]) return UV_EINVAL;
    f->data = presets[i].bytes;
    f->data_len = presets[i].len;
  } else if (eq(name, nl, "data")) {
    *seen |= 64;
    if (vl == 0 || vl > MAX_DATA || f->owned != NULL) return UV_EINVAL;
    f->owned = malloc(vl);
    if (f->owned == NULL) return UV_ENOMEM;
    memcpy(f->owned, val, vl);
    f->data = f->owned;
    f->data_len = vl;
  } else {
    err = UV_EINVAL;
  }
  return err;
}

static int parse_parts(const char *kind, size_t kn, const char *q, size_t qn, cb__fault_t *f) {
  memset(f, 0, sizeof *f);
  f->last = -1;
  f->max_frame = f->window = -1;
  f->close = 1;
  f->code = 2; /* INTERNAL_ERROR */
  f->length = DEFAULT_LENGTH;
  f->rate_ppb = CB__FAULT_ALWAYS;
  for (int k = 1; k < CB__FAULT_COUNT; k++)
    if (eq(kind, kn, cb__fault_name(k))) f->kind = (uint8_t)k;
  if (f->kind == CB__FAULT_NONE) return UV_EINVAL;
  unsigned seen = 0;
  char *val = malloc(qn + 1);
  if (val == NULL) return UV_ENOMEM;
  int err = 0;
  size_t i = 0;
  while (err == 0 && i < qn) {
    size_t end = i;
    while (end < qn && q[end] != '&') end++;
    size_t eqp = i;
    while (eqp < end && q[eqp] != '=') eqp++;
    if (eqp == i || eqp == end) {
      err = UV_EINVAL; /* every parameter has a name and a value */
    } else {
      long vl = pct_decode(q + eqp + 1, end - eqp - 1, val);
      err = vl < 0 ? UV_EINVAL : param(f, q + i, eqp - i, val, (size_t)vl, &seen);
    }
    i = end + 1;
  }
  free(val);
  if (err == 0) {
    switch (f->kind) {
      case CB__FAULT_RESET:
      case CB__FAULT_RST_STREAM:
        if (!(seen & 1) && (seen & 2)) f->at = 2; /* bytes=N alone means after N bytes */
        if (f->bytes > f->length) err = UV_EINVAL;
        break;
      case CB__FAULT_GARBAGE:
        if (!(seen & 2)) f->bytes = DEFAULT_GARBAGE;
        if (f->bytes == 0 || f->bytes > MAX_GARBAGE) err = UV_EINVAL;
        break;
      case CB__FAULT_TLS_BAD_RECORD:
        if (f->bytes > f->length) err = UV_EINVAL;
        break;
      case CB__FAULT_TRUNCATED:
      case CB__FAULT_TLS_TRUNCATE:
        if (!(seen & 2)) f->bytes = f->length / 2;
        if (f->length == 0 || f->bytes >= f->length) err = UV_EINVAL;
        break;
      case CB__FAULT_OVERLONG:
        if (!(seen & 2)) f->bytes = 16;
        if (f->bytes == 0) err = UV_EINVAL;
        break;
      case CB__FAULT_MISSING_LAST_CHUNK:
        if (f->length == 0) err = UV_EINVAL;
        break;
      case CB__FAULT_RAW:
        if (((seen & 32) != 0) == ((seen & 64) != 0)) err = UV_EINVAL; /* exactly one of preset and data */
        else f->raw_status = raw_status(f->data, f->data_len);
        break;
      case CB__FAULT_DELAY:
        if ((seen & 8) && (seen & 16)) err = UV_EINVAL;
        else if (seen & 8) f->dist = 1;
        else if (seen & 16) f->dist = 2;
        if (f->dist == 1 && f->max_ms < f->ms) err = UV_EINVAL;
        break;
      case CB__FAULT_HANG:
        if (f->at == 2) err = UV_EINVAL; /* before or head */
        break;
      case CB__FAULT_GOAWAY:
        /* A GOAWAY names a stream of the client's (odd) or 0: nghttp2 refuses an even one, and the fault then
         * sent nothing and never answered (its stream held, without a timer, as long as the client stayed). */
        if (f->last > 0 && f->last % 2 == 0) err = UV_EINVAL;
        break;
      case CB__FAULT_SETTINGS:
        if (f->max_frame < 0 && f->window < 0) err = UV_EINVAL;
        break;
      case CB__FAULT_TRAILERS:
        if (f->length == 0) err = UV_EINVAL; /* the trailers follow a body */
        break;
      case CB__FAULT_SLOW_HEAD:
        if (f->pieces == 0) f->pieces = 4;
        if (f->ms == 0) f->ms = 1000;
        break;
      case CB__FAULT_DRIP: /* go-httpbin's /drip: the body a byte at a time, evenly over ms */
        if (!(seen & 4)) f->length = 10;
        if (f->ms == 0) f->ms = 1000;
        if (f->length == 0 || f->length > MAX_PIECES) err = UV_EINVAL;
        f->pieces = (uint32_t)f->length;
        break;
      case CB__FAULT_DRIBBLE:
        if (f->pieces == 0) f->pieces = 4;
        if (f->ms == 0) f->ms = 1000;
        if (f->pieces > f->length) err = UV_EINVAL;
        break;
      default:
        break;
    }
  }
  if (err) cb__fault_free(f);
  return err;
}

int cb__fault_fit(cb__fault_t *f, uint64_t body_len) {
  if (body_len == 0) return 0; /* no body of its own: `length` generated bytes, as for /fault/ */
  if (f->kind == CB__FAULT_DRIP) {
    if (body_len > MAX_PIECES) return UV_EINVAL;
    f->pieces = (uint32_t)body_len;
  } else if (f->kind == CB__FAULT_DRIBBLE && f->pieces > body_len) {
    return UV_EINVAL;
  }
  return 0;
}

int cb__fault_parse(const char *spec, size_t n, cb__fault_t *f) {
  if (spec == NULL || n == 0 || n > 4 * MAX_DATA) return UV_EINVAL;
  const char *q = memchr(spec, '?', n);
  size_t kn = q ? (size_t)(q - spec) : n;
  return parse_parts(spec, kn, q ? q + 1 : "", q ? n - kn - 1 : 0, f);
}

/* ---- chance and seeded numbers ---- */

/* splitmix64: the generator's step (the golden-ratio increment), then its finaliser. */
static uint64_t splitmix64(uint64_t x) { return cb__mix64(x + 0x9e3779b97f4a7c15ull); }

int cb__fault_fires(const cb__fault_t *f, uint64_t *counter) {
  if (f->rate_ppb >= CB__FAULT_ALWAYS) return 1;
  if (f->rate_ppb == 0) return 0;
  /* The n-th request of the route gets the same answer in every run with this seed. */
  uint64_t n = __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
  return splitmix64(f->seed ^ splitmix64(n)) % CB__FAULT_ALWAYS < f->rate_ppb;
}

/* A delay's length for the n-th draw: fixed, uniform in [ms, max], or lognormal around the median ms. A
 * lognormal draw has no upper end, so it is cut at bound_ms, the bound of `ms` on the fault's path (the
 * client's 60,000 through /fault/): a parameter the path bounds cannot be stretched past it by chance. */
uint32_t cb__fault_delay_ms(const cb__fault_t *f, uint64_t n, uint32_t bound_ms) {
  uint64_t a = splitmix64(f->seed ^ splitmix64(2 * n)), b = splitmix64(f->seed ^ splitmix64(2 * n + 1));
  if (f->dist == 1) return f->ms + (uint32_t)(a % ((uint64_t)f->max_ms - f->ms + 1));
  if (f->dist == 2) {
    double u1 = ((double)(a >> 11) + 1.0) / 9007199254740993.0, u2 = (double)(b >> 11) / 9007199254740992.0;
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2); /* Box-Muller: one standard normal draw */
    double v = (double)f->ms * exp(f->sigma * z);
    return v >= bound_ms ? bound_ms : (uint32_t)v;
  }
  return f->ms;
}

/* ---- running a fault ---- */

static uint64_t delay_draws; /* atomic: delay's seeded draws, server-wide */

/* The faults r's protocol can carry (core.h, cb__proto_faults_t). */
static const cb__proto_faults_t *faults(const cb__req_t *r) { return r->proto->faults; }

/* Whether r's protocol frames every body itself (HTTP/2): a body shorter or longer than declared then ends the
 * stream, where HTTP/1.1, which writes bytes as they are, ends the connection. */
static int frames_bodies(const cb__req_t *r) { return faults(r)->raw == NULL; }

static void head(cb__req_t *r, int64_t length) {
  const cb__fault_answer_t *a = FAULT(r)->answer;
  cb__res_head(r, a->status, NULL, a->hdrs, a->nhdrs, length);
}

/* Body bytes [from, to) of the generated content (byte i is i % 251), in pieces the generator spans (flags
 * on the last). Returns what the last cb__res_data returned: 1 when the output is above its high-water mark. */
static int gen_body(cb__req_t *r, uint64_t from, uint64_t to, int flags) {
  const char *gen = cb__generated();
  int full = 0;
  if (gen == NULL) return 0;
  while (from < to) {
    uint64_t n = to - from < CB__GEN_SPAN ? to - from : CB__GEN_SPAN;
    full = cb__res_data(r, gen + from % 251, (size_t)n, CB__DATA_STATIC | (from + n == to ? flags : 0));
    from += n;
  }
  return full;
}

static void body(cb__req_t *r, uint64_t from, uint64_t to) { (void)gen_body(r, from, to, 0); }

/* What a pacing fault paces: the answer's own body (a stub's), or `length` generated bytes. */
static uint64_t paced_length(const cb__req_t *r) {
  const cb__fault_answer_t *a = FAULT(r)->answer;
  return a->body != NULL ? a->body_len : FAULT(r)->f->length;
}

/* Bytes [from, to) of what is paced, as one piece. */
static int paced_body(cb__req_t *r, uint64_t from, uint64_t to) {
  const cb__fault_answer_t *a = FAULT(r)->answer;
  if (a->body != NULL) return a->body(r, from, to);
  return gen_body(r, from, to, CB__DATA_PIECE_END);
}

/* The answer without the fault: the stub's, or /fault/'s declared one. */
static void declared(cb__req_t *r) {
  const cb__fault_t *f = FAULT(r)->f;
  if (FAULT(r)->answer->normal != NULL) {
    FAULT(r)->answer->normal(r);
    return;
  }
  head(r, (int64_t)f->length);
  body(r, 0, f->length);
  cb__res_end(r);
}

/* Whether the request's protocol can carry the kind: the entry it needs in the protocol's faults table is there
 * (HTTP/1.1's framing and raw bytes have no meaning in HTTP/2; RST_STREAM, GOAWAY, SETTINGS none in HTTP/1.1).
 * The TLS kinds ask the connection's transport instead (a cleartext one has no faults). */
static int carried(int kind, const cb__req_t *r) {
  const cb__proto_faults_t *fx = faults(r);
  switch (kind) {
    case CB__FAULT_TLS_BAD_RECORD:
    case CB__FAULT_TLS_TRUNCATE: return r->conn->tr.ops->fault != NULL;
    case CB__FAULT_MALFORMED_CHUNK:
    case CB__FAULT_MISSING_LAST_CHUNK:
    case CB__FAULT_SLOW_HEAD:
    case CB__FAULT_RAW: return fx->raw != NULL;
    case CB__FAULT_RST_STREAM: return fx->rst_stream != NULL && fx->cut != NULL;
    case CB__FAULT_GOAWAY: return fx->goaway != NULL;
    case CB__FAULT_SETTINGS: return fx->settings != NULL;
    case CB__FAULT_VIOLATION: return fx->violation != NULL;
    case CB__FAULT_TRAILERS: return fx->trailers != NULL || fx->raw != NULL;
    default: return 1;
  }
}

static void hang_tick(cb__req_t *r) {
  cb__conn_t *c = r->conn;
  uint32_t left = FAULT(r)->piece; /* ms still to wait */
  if (c->eof || left == 0) { /* the peer has gone, or the time is up: close without an answer */
    cb__conn_close_linger(c);
    return;
  }
  uint32_t step = left < HANG_TICK_MS ? left : HANG_TICK_MS;
  FAULT(r)->piece = left - step;
  if (cb__req_timer(r, step, hang_tick) != 0) cb__conn_close_linger(c);
}

/* ---- pacing: dribble, drip, slow_head ----
 *
 * A paced answer sends `pieces` pieces spread evenly over `ms` with one request timer. It wakes up at most
 * once per millisecond however the numbers divide: W = min(pieces, ms) wake-ups, wake-up j at ms * j / W from
 * the first (which is at once) sending pieces [pieces * j / W, pieces * (j + 1) / W). And it sends only while
 * the connection's output is below its high-water mark: when a piece leaves it above, the rest waits for the
 * protocol's on_writable (r->blocked) instead of for the timer, so a client that does not read holds at most
 * the high-water mark and a piece, and its idle timeout runs (the connection is quiet). Without both rules a
 * `dribble?pieces=100000&ms=60000` re-armed 0 ms timers that libuv runs in one pass, and queued 16 MiB. */

static unsigned wakes(const cb__fault_t *f) { return f->pieces < f->ms ? f->pieces : f->ms; }

/* The first piece of wake-up j. */
static unsigned wake_start(const cb__fault_t *f, unsigned j) {
  return (unsigned)((uint64_t)f->pieces * j / wakes(f));
}

/* Pieces [k0, k1) of the paced answer; returns 1 when the output is above its high-water mark. The last
 * piece ends the answer. */
static int pace_pieces(cb__req_t *r, unsigned k0, unsigned k1);

static void pace(cb__req_t *r);

static void pace_tick(cb__req_t *r) {
  r->conn->w->pace_wakes++;
  pace(r);
}

/* Starts the timer of wake-up j (>= 1): ms * j / W after the first, so at least 1 ms after wake-up j - 1. */
static void pace_later(cb__req_t *r, unsigned j) {
  uint64_t ms = FAULT(r)->f->ms, w = wakes(FAULT(r)->f);
  if (cb__req_timer(r, (unsigned)(ms * j / w - ms * (j - 1) / w), pace_tick) != 0) cb__conn_abort(r->conn);
}

/* Sends what wake-up FAULT(r)->wake owes from piece FAULT(r)->piece on, then waits: for the timer, or for
 * on_writable when the output is full. */
static void pace(cb__req_t *r) {
  const cb__fault_t *f = FAULT(r)->f;
  unsigned j = FAULT(r)->wake, end = wake_start(f, j + 1);
  r->blocked = 0;
  /* slow_head's pieces are bytes of a head (bounded by the header limits): one wake-up's pieces go at once.
   * A body's go one at a time, each checked against the high-water mark. */
  unsigned step = f->kind == CB__FAULT_SLOW_HEAD ? end - FAULT(r)->piece : 1;
  int full = 0;
  while (FAULT(r)->piece < end) {
    unsigned k = FAULT(r)->piece;
    FAULT(r)->piece = k + step;
    if (k + step >= f->pieces) { /* the last piece ends the answer: r may be gone after it */
      pace_pieces(r, k, k + step);
      return;
    }
    full = pace_pieces(r, k, k + step);
    if (full && FAULT(r)->piece < end) {
      r->blocked = 1; /* on_writable sends the rest of this wake-up's pieces */
      return;
    }
  }
  FAULT(r)->wake = ++j;
  if (full)
    r->blocked = 1; /* on_writable starts the timer */
  else
    pace_later(r, j);
}

int cb__fault_pacing(const cb__req_t *r) {
  return r->fault == CB__FAULT_DRIBBLE || r->fault == CB__FAULT_DRIP || r->fault == CB__FAULT_SLOW_HEAD;
}

/* Room in the output again: the rest of a wake-up's pieces at once; after a whole wake-up, the timer. */
void cb__fault_writable(cb__req_t *r) {
  const cb__fault_t *f = FAULT(r)->f;
  unsigned j = FAULT(r)->wake;
  r->blocked = 0;
  if (j == 0 || FAULT(r)->piece > wake_start(f, j))
    pace(r);
  else
    pace_later(r, j);
}

/* An HTTP/1.1 head written by the fault itself (slow_head, trailers): the parts go to emit(arg, p, n) in
 * order. With date 0 there is no date header: a slow head spans seconds, and its pieces are rendered one at
 * a time, so they must not depend on the clock. */
typedef void (*emit_fn)(void *arg, const char *p, size_t n);
#define EMIT(arg, lit) emit(arg, lit, sizeof(lit) - 1)

static void h1_head_parts(cb__req_t *r, int64_t length, int date, emit_fn emit, void *arg) {
  char line[64], len[48];
  const cb__fault_answer_t *a = FAULT(r)->answer;
  int status = a->status;
  int n = snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
  emit(arg, line, (size_t)n);
  emit(arg, cb__reason(status), strlen(cb__reason(status)));
  emit(arg, "\r\n", 2);
  if (date) emit(arg, r->conn->w->date_line, r->conn->w->date_len);
  const cb__hdr_t *h = a->hdrs;
  for (int i = 0; h != NULL && i < a->nhdrs; i++) {
    emit(arg, h[i].name, h[i].name_len);
    emit(arg, ": ", 2);
    emit(arg, h[i].value, h[i].value_len);
    emit(arg, "\r\n", 2);
  }
  if (length >= 0) {
    n = snprintf(len, sizeof len, "content-length: %llu\r\n\r\n", (unsigned long long)length);
    emit(arg, len, (size_t)n);
  } else {
    EMIT(arg, "transfer-encoding: chunked\r\ntrailer: x-trailer\r\n\r\n");
  }
}

static void emit_all(void *arg, const char *p, size_t n) {
  cb__req_t *r = arg;
  faults(r)->raw(r, p, n);
}

/* Bytes [from, to) of a head: the parts walked again, their overlap with the range queued. */
typedef struct {
  cb__req_t *r;
  size_t pos, from, to;
} range_t;

static void emit_range(void *arg, const char *p, size_t n) {
  range_t *g = arg;
  size_t a = g->pos > g->from ? g->pos : g->from, b = g->pos + n < g->to ? g->pos + n : g->to;
  if (a < b) faults(g->r)->raw(g->r, p + (a - g->pos), b - a);
  g->pos += n;
}

static void count_bytes(void *arg, const char *p, size_t n) {
  (void)p;
  *(size_t *)arg += n;
}

/* An answer written by the fault itself ends like one of the protocol's: the connection goes on. */
static void raw_end(cb__req_t *r) {
  r->status = FAULT(r)->answer->status;
  r->res_state = CB__RES_HEAD;
  cb__res_end(r);
}

static int pace_pieces(cb__req_t *r, unsigned k0, unsigned k1) {
  const cb__fault_t *f = FAULT(r)->f;
  uint64_t length = paced_length(r);
  if (f->kind == CB__FAULT_SLOW_HEAD) { /* bytes of the head, rendered again for each wake-up's range */
    size_t total = 0;
    h1_head_parts(r, (int64_t)length, 0, count_bytes, &total);
    range_t g = {r, 0, total * k0 / f->pieces, total * k1 / f->pieces};
    h1_head_parts(r, (int64_t)length, 0, emit_range, &g);
    if (k1 < f->pieces) return 0; /* a head is small: it never waits for the output (see pace) */
    if (FAULT(r)->answer->body != NULL)
      FAULT(r)->answer->body(r, 0, length); /* then the body at once */
    else
      body(r, 0, length);
    raw_end(r);
    return 0;
  }
  uint64_t from = length * k0 / f->pieces, to = length * k1 / f->pieces;
  int full = from < to ? paced_body(r, from, to) : r->conn->out.bytes >= CB__OUT_HIGH_WATER;
  if (k1 >= f->pieces) cb__res_end(r);
  return full;
}

/* What a connection-closing fault does to an HTTP/1.1 request: nothing more is parsed (the request never
 * ends), and the connection closes once the fault's bytes have left. */
static void end_by_close(cb__req_t *r) { cb__conn_close_linger(r->conn); }

static void run(cb__req_t *r) {
  const cb__fault_t *f = FAULT(r)->f;
  cb__conn_t *c = r->conn;
  const cb__proto_faults_t *fx = faults(r);
  switch (f->kind) {
    case CB__FAULT_RESET:
      if (f->at == 0) {
        cb__conn_abort(c);
        return;
      }
      head(r, (int64_t)f->length);
      if (f->at == 2) body(r, 0, f->bytes);
      if (fx->cut != NULL)
        fx->cut(r, 0, CB__CUT_RESET); /* h2c: once flow control has let the head (and bytes) go */
      else
        c->abort_after_flush = 1; /* conn.c resets once the head (and bytes) have been written */
      return;
    case CB__FAULT_EMPTY:
      cb__conn_close_linger(c);
      return;
    case CB__FAULT_HANG:
      if (f->at == 1) head(r, (int64_t)f->length); /* then no byte of body: over h2c, no DATA at all */
      /* At most the idle timeout: a hang must not hold a connection longer than an idle peer could. */
      FAULT(r)->piece = f->ms && f->ms < c->w->cfg->idle_timeout_ms ? f->ms : c->w->cfg->idle_timeout_ms;
      hang_tick(r);
      return;
    case CB__FAULT_GARBAGE: {
      char *g = malloc(f->bytes);
      if (g == NULL) {
        cb__conn_abort(c);
        return;
      }
      uint64_t x = f->seed;
      for (uint64_t i = 0; i < f->bytes; i += 8) {
        uint64_t v = splitmix64(x++);
        memcpy(g + i, &v, f->bytes - i < 8 ? f->bytes - i : 8);
      }
      cb__outq_ref(&c->out, g, f->bytes, 1);
      cb__conn_close_linger(c);
      return;
    }
    case CB__FAULT_TRUNCATED:
      head(r, (int64_t)f->length);
      body(r, 0, f->bytes);
      if (frames_bodies(r)) cb__res_end(r); /* END_STREAM before content-length is reached */
      else end_by_close(r);
      return;
    case CB__FAULT_OVERLONG:
      head(r, (int64_t)f->length);
      body(r, 0, f->length + f->bytes);
      cb__res_end(r);
      if (!frames_bodies(r)) end_by_close(r);
      return;
    case CB__FAULT_MALFORMED_CHUNK:
      head(r, CB__STREAMED);
      if (f->bytes) body(r, 0, f->bytes);
      fx->raw(r, "zz\r\n", 4); /* not a hex chunk size */
      end_by_close(r);
      return;
    case CB__FAULT_MISSING_LAST_CHUNK:
      head(r, CB__STREAMED);
      body(r, 0, f->length);
      end_by_close(r); /* no 0\r\n\r\n */
      return;
    case CB__FAULT_RAW:
      fx->raw(r, f->data, f->data_len);
      r->status = f->raw_status;
      if (f->close) {
        end_by_close(r);
      } else { /* the bytes were a whole answer: the connection goes on */
        r->res_state = CB__RES_HEAD;
        cb__res_end(r);
      }
      return;
    case CB__FAULT_DELAY: {
      uint64_t n = __atomic_fetch_add(&delay_draws, 1, __ATOMIC_RELAXED);
      if (cb__req_timer(r, cb__fault_delay_ms(f, n, FAULT(r)->answer->max_delay_ms), declared) != 0) declared(r);
      return;
    }
    case CB__FAULT_DRIBBLE:
    case CB__FAULT_DRIP:
      head(r, (int64_t)paced_length(r));
      if (r->method == CB_METHOD_HEAD) {
        cb__res_end(r);
        return;
      }
      FAULT(r)->piece = FAULT(r)->wake = 0;
      pace(r);
      return;
    case CB__FAULT_RST_STREAM:
      if (f->at == 0) {
        fx->rst_stream(r, f->code);
        return;
      }
      head(r, (int64_t)f->length);
      if (f->at == 2) body(r, 0, f->bytes);
      fx->cut(r, f->code, CB__CUT_STREAM); /* once the head (and bytes) have been sent */
      return;
    case CB__FAULT_GOAWAY: {
      int32_t id = (int32_t)r->stream_id;
      int32_t last = f->last >= 0 ? (int32_t)f->last : (id > 2 ? id - 2 : 0);
      int graceful = f->code == 0 && last >= id;
      fx->goaway(r, f->code, last, graceful);
      if (graceful) declared(r);
      return;
    }
    case CB__FAULT_TRAILERS:
      if (fx->trailers != NULL) {
        fx->trailers(r);
        declared(r);
        return;
      }
      if (fx->http10 != NULL && fx->http10(r)) {
        /* RFC 9112 7: no chunked answer to an HTTP/1.0 request, and so no trailers (it has no other place for
         * them). The body as a streamed route sends it there: no transfer-encoding, `connection: close`, the
         * close ends it. */
        head(r, CB__STREAMED);
        body(r, 0, f->length);
        cb__res_end(r);
        return;
      }
      /* HTTP/1.1: a chunked body, then the last chunk with a trailer field. */
      h1_head_parts(r, -1, 1, emit_all, r);
      if (r->method != CB_METHOD_HEAD) {
        char size[24];
        int n = snprintf(size, sizeof size, "%llx\r\n", (unsigned long long)f->length);
        fx->raw(r, size, (size_t)n);
        body(r, 0, f->length);
        static const char last[] = "\r\n0\r\nx-trailer: cbench\r\n\r\n";
        fx->raw(r, last, sizeof last - 1);
      }
      raw_end(r);
      return;
    case CB__FAULT_SLOW_HEAD:
      FAULT(r)->piece = FAULT(r)->wake = 0;
      pace(r);
      return;
    case CB__FAULT_SETTINGS:
      if (fx->settings(r, f->max_frame, f->window) == 0) declared(r);
      return;
    case CB__FAULT_TLS_BAD_RECORD:
    case CB__FAULT_TLS_TRUNCATE:
      /* The head and `bytes` body bytes through the protocol, then the transport ends the connection its way
       * (a corrupt record, or no close_notify) once they have left: over h2 the whole connection, as a reset. */
      head(r, (int64_t)f->length);
      if (f->bytes) body(r, 0, f->bytes);
      if (c->tr.ops->fault(&c->tr, f->kind) != 0) {
        cb__conn_abort(c);
        return;
      }
      if (fx->cut != NULL)
        fx->cut(r, 0, CB__CUT_CLOSE); /* h2: once flow control has let the head (and bytes) go */
      else
        cb__conn_close_linger(c);
      return;
    case CB__FAULT_VIOLATION: {
      /* The head, then a DATA frame on stream 0: a connection error of type PROTOCOL_ERROR for any client
       * (RFC 9113 6.1). DATA after END_STREAM would be the gentler breach, but nghttp2-based clients drop
       * frames on a recently closed stream without a word. The stream then waits like a hang. */
      head(r, (int64_t)f->length);
      fx->violation(r);
      FAULT(r)->piece = f->ms ? f->ms : 1000; /* a client that lets the breach pass is not kept long */
      if (FAULT(r)->piece > c->w->cfg->idle_timeout_ms) FAULT(r)->piece = c->w->cfg->idle_timeout_ms;
      hang_tick(r);
      return;
    }
    default:
      break;
  }
}

void cb__fault_start(cb__req_t *r, const cb__fault_t *f, const cb__fault_answer_t *answer) {
  FAULT(r)->f = f;
  FAULT(r)->answer = answer;
  if (!carried(f->kind, r)) { /* 501 on this request; not a fault */
    cb__res_head(r, 501, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  r->fault = f->kind;
  CB__STAT_INC(r->conn->w, faults);
  run(r);
}

/* ---- the fixture route /fault/{kind}?params ---- */

static uint64_t route_draws; /* atomic: /fault/'s rate draws, server-wide (see docs/faults.md) */
/* /fault/'s declared head carries its content-type as a header of the answer, as a stub's would: a stub
 * without headers has none under a fault either (docs/faults.md: a fault departs from the declared answer). */
static const cb__hdr_t route_ctype = {"content-type", 12, "application/octet-stream", 24};
static const cb__fault_answer_t route_answer = {200, &route_ctype, 1, NULL, 0, NULL, MAX_ROUTE_MS};

static void route_end(cb__req_t *r) {
  size_t pre = r->route->path_len; /* "/fault/" */
  const char *q = r->target_len > r->path_len ? r->path + r->path_len + 1 : "";
  size_t qn = r->target_len > r->path_len ? r->target_len - r->path_len - 1 : 0;
  cb__fault_t *f = malloc(sizeof *f);
  int err = f == NULL ? UV_ENOMEM : parse_parts(r->path + pre, r->path_len - pre, q, qn, f);
  if (err == 0 && (f->ms > MAX_ROUTE_MS || f->max_ms > MAX_ROUTE_MS)) {
    cb__fault_free(f);
    err = UV_EINVAL;
  }
  if (err) {
    free(f);
    if (err == UV_EINVAL) CB__STAT_INC(r->conn->w, status_400);
    cb__res_head(r, err == UV_EINVAL ? 400 : 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  FAULT(r)->f = f;
  FAULT(r)->own = 1;
  FAULT(r)->answer = &route_answer;
  if (!cb__fault_fires(f, &route_draws)) {
    declared(r);
    return;
  }
  cb__fault_start(r, f, &route_answer);
}

static void route_head(cb__req_t *r) { FAULT(r)->own = 0; }

static void route_free(cb__req_t *r) {
  if (!FAULT(r)->own) return;
  cb__fault_t *f = (cb__fault_t *)FAULT(r)->f; /* parsed for this request: ours to free */
  cb__fault_free(f);
  free(f);
  FAULT(r)->own = 0;
}

const cb__handler_t cb__h_fault = {
    .on_head = route_head, .on_end = route_end, .on_writable = cb__fault_writable, .on_free = route_free};
