/* The fixture handlers of docs/wire.md, written once against the response API (cb__res_*), so that every
 * protocol serves them the same way. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* What this kind keeps in a request while it answers (cb__req_t.kind). */
typedef struct CB__KIND_STATE_ATTR {
  char *buf;
  size_t len, cap; /* cap bytes are held from the echo budget while buf is the handler's */
  int refused;     /* over the echo budget: answered 503, the rest of the body is dropped */
} echo_state_t;
CB__KIND_STATE_FITS(echo_state_t);
#define ECHO_STATE(r) CB__KIND_STATE(r, echo_state_t)

/* What this kind keeps in a request while it answers (cb__req_t.kind). */
typedef struct CB__KIND_STATE_ATTR {
  unsigned next;
} gen_state_t;
CB__KIND_STATE_FITS(gen_state_t);
#define GEN_STATE(r) CB__KIND_STATE(r, gen_state_t)

#define STR(s) s, (sizeof(s) - 1)

static const char ct_text[] = "text/plain";
static const char ct_json[] = "application/json";
static const char ct_octet[] = "application/octet-stream";
static const char ct_sse[] = "text/event-stream";

/* ---- fixed bodies: /, /hello, /json ---- */

/* A 200 with a static body, the same every time (memo_id 1: HTTP/1.1 keeps it whole, cb__fixed_t). */
#define FIXED(ct, lit) {.status = 200, .ctype = ct, .body = lit, .len = sizeof(lit) - 1, .flags = CB__DATA_STATIC, \
                        .memo_id = 1}
static const cb__fixed_t fixed_root = FIXED(NULL, "hello world!");
static const cb__fixed_t fixed_hello = FIXED(ct_text, "Hello, Joe!");
static const cb__fixed_t fixed_json = FIXED(ct_json, "{\"message\":\"Hello, Joe!\"}");

static void root_end(cb__req_t *r) { cb__res_fixed(r, &fixed_root); }
static void hello_end(cb__req_t *r) { cb__res_fixed(r, &fixed_hello); }
static void json_end(cb__req_t *r) { cb__res_fixed(r, &fixed_json); }

static const cb__handler_t h_root = {.on_end = root_end};
static const cb__handler_t h_hello = {.on_end = hello_end};
static const cb__handler_t h_json = {.on_end = json_end};

/* ---- /echo: the whole body, with content-length ----
 * The buffer is held from the echo budget (cb__echo_hold): a body that would take a connection or the server
 * over it is refused with 503, and the rest of it is read and dropped. */

static void echo_refuse(cb__req_t *r) {
  free(ECHO_STATE(r)->buf);
  cb__echo_release(r->conn, ECHO_STATE(r)->cap);
  ECHO_STATE(r)->buf = NULL;
  ECHO_STATE(r)->len = ECHO_STATE(r)->cap = 0;
  ECHO_STATE(r)->refused = 1;
  cb__res_head(r, 503, NULL, NULL, 0, 0);
  cb__res_end(r);
}

static void echo_head(cb__req_t *r) {
  /* The protocol has already refused a declared length over the body limit, so this is bounded. */
  ECHO_STATE(r)->buf = NULL;
  ECHO_STATE(r)->len = 0;
  ECHO_STATE(r)->cap = 0;
  ECHO_STATE(r)->refused = 0;
  size_t want = r->content_length > 0 ? (size_t)r->content_length : 0;
  if (want == 0) return;
  if (cb__echo_hold(r->conn, want) != 0) {
    echo_refuse(r);
    return;
  }
  ECHO_STATE(r)->cap = want;
  ECHO_STATE(r)->buf = malloc(want);
  if (ECHO_STATE(r)->buf == NULL) echo_refuse(r);
}

static void echo_body(cb__req_t *r, const char *p, size_t n) {
  if (ECHO_STATE(r)->refused) return;
  if (ECHO_STATE(r)->len + n > ECHO_STATE(r)->cap) {
    size_t cap = ECHO_STATE(r)->cap ? ECHO_STATE(r)->cap : 4096;
    while (cap < ECHO_STATE(r)->len + n) cap *= 2;
    /* The protocol refuses a body over the limit before it gets here: never hold more than that. */
    size_t max = r->conn->w->cfg->max_body_bytes;
    if (cap > max && ECHO_STATE(r)->len + n <= max) cap = max;
    if (cb__echo_hold(r->conn, cap - ECHO_STATE(r)->cap) != 0) {
      echo_refuse(r);
      return;
    }
    char *b = realloc(ECHO_STATE(r)->buf, cap);
    if (b == NULL) { /* out of memory: the echo comes back short rather than crashing */
      cb__echo_release(r->conn, cap - ECHO_STATE(r)->cap);
      return;
    }
    ECHO_STATE(r)->buf = b;
    ECHO_STATE(r)->cap = cap;
  }
  memcpy(ECHO_STATE(r)->buf + ECHO_STATE(r)->len, p, n);
  ECHO_STATE(r)->len += n;
}

static void echo_end(cb__req_t *r) {
  if (ECHO_STATE(r)->refused) return; /* answered already */
  char *buf = ECHO_STATE(r)->buf;
  size_t len = ECHO_STATE(r)->len;
  cb__echo_release(r->conn, ECHO_STATE(r)->cap - len); /* what stays held is what goes out */
  ECHO_STATE(r)->buf = NULL; /* ownership, and the budget it holds, move to the protocol */
  ECHO_STATE(r)->cap = 0;
  cb__res_head(r, 200, ct_octet, NULL, 0, (int64_t)len);
  if (buf != NULL) cb__res_data(r, buf, len, CB__DATA_HELD);
  cb__res_end(r);
}

static void echo_free(cb__req_t *r) {
  free(ECHO_STATE(r)->buf);
  cb__echo_release(r->conn, ECHO_STATE(r)->cap);
  ECHO_STATE(r)->buf = NULL;
  ECHO_STATE(r)->cap = 0;
}

static const cb__handler_t h_echo = {.on_head = echo_head, .on_body = echo_body, .on_end = echo_end,
                                  .on_free = echo_free};

/* ---- /echo/chunked: each piece back as it arrives, never the whole body ---- */

static void echo_chunked_head(cb__req_t *r) { cb__res_head(r, 200, ct_octet, NULL, 0, CB__STREAMED); }
static void echo_chunked_body(cb__req_t *r, const char *p, size_t n) {
  cb__res_data(r, p, n, CB__DATA_COPY);
}
static void echo_chunked_end(cb__req_t *r) { cb__res_end(r); }

static const cb__handler_t h_echo_chunked = {.on_head = echo_chunked_head, .on_body = echo_chunked_body,
                                          .on_end = echo_chunked_end};

/* ---- /file/{tiny,small,big} ---- */

static void file_end(cb__req_t *r) {
  const cb__fixtures_t *fx = r->conn->w->fx;
  int i = r->route->iarg;
  cb__res_head(r, 200, ct_octet, NULL, 0, (int64_t)fx->size[i]);
  cb__res_file(r, fx->fd[i], fx->map[i], 0, (size_t)fx->size[i]);
  cb__res_end(r);
}

static const cb__handler_t h_file = {.on_end = file_end};

/* ---- /large: 64 KiB of the generated content (byte i is i % 251), referenced, never copied ---- */

static void large_end(cb__req_t *r) {
  const char *gen = cb__generated();
  if (gen == NULL) { /* the buffer could not be made: out of memory */
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  cb__fixed_t large = {.status = 200, .ctype = ct_octet, .body = gen, .len = CB__LARGE_LEN, .flags = CB__DATA_STATIC};
  cb__res_fixed(r, &large);
}

static const cb__handler_t h_large = {.on_end = large_end};

/* ---- generators: /stream*, /sse* ----
 * A generator emits its pieces until the protocol says the connection's output is full, then waits for
 * on_writable. Pieces are static payloads: referenced, never copied. */

static const cb__handler_t h_sse;

static cb__slice_t piece(const cb__req_t *r, unsigned i, unsigned *count) {
  const cb__payloads_t *pl = cb__payloads();
  int sse = r->handler == &h_sse;
  switch (r->route->iarg) {
    case 0:
      if (sse) {
        *count = 32;
        return pl->sse_line;
      }
      *count = 2;
      return i == 0 ? (cb__slice_t){STR("hello, ")} : (cb__slice_t){STR("Joe!")};
    case 1:
      *count = 100;
      return sse ? pl->sse_line : pl->line;
    default:
      *count = 64;
      return sse ? pl->sse_big : pl->bigline;
  }
}

static void gen_produce(cb__req_t *r) {
  unsigned count;
  r->blocked = 0;
  piece(r, 0, &count);
  if (r->method == CB_METHOD_HEAD) GEN_STATE(r)->next = count;
  while (GEN_STATE(r)->next < count) {
    cb__slice_t s = piece(r, GEN_STATE(r)->next++, &count);
    if (cb__res_data(r, s.ptr, s.len, CB__DATA_STATIC)) {
      if (GEN_STATE(r)->next < count) {
        r->blocked = 1;
        return;
      }
    }
  }
  cb__res_end(r);
}

static void stream_end(cb__req_t *r) {
  cb__res_head(r, 200, r->route->iarg == 0 ? ct_text : ct_octet, NULL, 0, CB__STREAMED);
  GEN_STATE(r)->next = 0;
  gen_produce(r);
}

static void sse_end(cb__req_t *r) {
  static const cb__hdr_t no_cache[] = {{STR("cache-control"), STR("no-cache")}};
  cb__res_head(r, 200, ct_sse, no_cache, 1, CB__STREAMED);
  GEN_STATE(r)->next = 0;
  gen_produce(r);
}

static const cb__handler_t h_stream = {.on_end = stream_end, .on_writable = gen_produce};
static const cb__handler_t h_sse = {.on_end = sse_end, .on_writable = gen_produce};

/* ---- route-level 400: a well-formed request with a bad parameter; the connection stays ---- */

static void bad_request(cb__req_t *r) {
  CB__STAT_INC(r->conn->w, status_400);
  cb__res_head(r, 400, NULL, NULL, 0, 0);
  cb__res_end(r);
}

/* Parses 1..max_digits decimal digits that make up all of s[0..n). Returns the value or -1. */
static long parse_digits(const char *s, size_t n, size_t max_digits) {
  if (n == 0 || n > max_digits) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/* ---- /delay/{ms}: answered from a timer; the worker goes on meanwhile ---- */

static void delay_fire(cb__req_t *r) {
  static const cb__fixed_t ok = FIXED(ct_text, "ok");
  cb__res_fixed(r, &ok);
}

static void delay_end(cb__req_t *r) {
  size_t pre = r->route->path_len;
  long ms = parse_digits(r->path + pre, r->path_len - pre, 5);
  if (ms < 0 || ms > 60000) {
    bad_request(r);
    return;
  }
  if (cb__req_timer(r, (unsigned)ms, delay_fire) != 0) {
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
  }
}

static const cb__handler_t h_delay = {.on_end = delay_end};

/* ---- /status/{code} ---- */

static void status_end(cb__req_t *r) {
  size_t pre = r->route->path_len;
  long code = parse_digits(r->path + pre, r->path_len - pre, 3);
  if (code < 200 || code > 599 || r->path_len - pre != 3) {
    bad_request(r);
    return;
  }
  cb__res_head(r, (int)code, NULL, NULL, 0, (code == 204 || code == 304) ? CB__NO_BODY : 0);
  cb__res_end(r);
}

static const cb__handler_t h_status = {.on_end = status_end};

/* ---- /headers: the request headers as JSON ---- */

static int name_eq(const cb__hdr_t *a, const cb__hdr_t *b) {
  if (a->name_len != b->name_len) return 0;
  for (size_t i = 0; i < a->name_len; i++) {
    unsigned char x = (unsigned char)a->name[i], y = (unsigned char)b->name[i];
    if (x >= 'A' && x <= 'Z') x += 32;
    if (y >= 'A' && y <= 'Z') y += 32;
    if (x != y) return 0;
  }
  return 1;
}

/* Appends s as the inside of a JSON string. dst has room for 6 bytes per input byte. */
static size_t json_escape(char *dst, const char *s, size_t n, int lower) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (lower && ch >= 'A' && ch <= 'Z') ch += 32;
    if (ch == '"' || ch == '\\') {
      dst[o++] = '\\';
      dst[o++] = (char)ch;
    } else if (ch < 0x20) {
      memcpy(dst + o, "\\u00", 4);
      dst[o + 4] = hex[ch >> 4];
      dst[o + 5] = hex[ch & 15];
      o += 6;
    } else {
      dst[o++] = (char)ch;
    }
  }
  return o;
}

size_t cb__headers_json_cap(const cb__hdr_t *hs, int n) {
  size_t cap = 2;
  for (int i = 0; i < n; i++) cap += 6 * (hs[i].name_len + hs[i].value_len) + 8;
  return cap;
}

/* The names of the headers are grouped by hash: a name is compared with the few of its probe run, where a scan of
 * the names before and after each header made n * n comparisons (2,600 distinct names, the default header limit's
 * worth: 57 ms of a worker's CPU per request, against 0.6 ms for the same head to /hello). Open addressing in at
 * least twice as many slots as headers; the hash is of the lowercased name, seeded per call (from the answer
 * buffer's address) so that a client cannot aim its names at one slot. The groups are kept as lists in header
 * order: first[] the slot's first header, next[] the header's next of its name, last[] a first header's last. */
static uint64_t lower_hash(uint64_t seed, const char *p, size_t n) {
  uint64_t x = seed ^ 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch >= 'A' && ch <= 'Z') ch += 32;
    x = (x ^ ch) * 0x100000001b3ull;
  }
  return x ^ x >> 29;
}

/* Heads of up to this many headers (most) group them in arrays on the stack. */
#define HEADERS_INLINE 64

size_t cb__headers_json_counted(const cb__hdr_t *hs, int n, char *json, uint64_t *compared) {
  size_t slots = 2 * HEADERS_INLINE;
  while (slots < 2 * (size_t)n) slots *= 2;
  int inline_ix[2 * HEADERS_INLINE + 2 * HEADERS_INLINE];
  int *ix = n <= HEADERS_INLINE ? inline_ix : malloc((slots + 2 * (size_t)n) * sizeof *ix);
  if (ix == NULL) return 0;
  int *first = ix, *next = ix + slots, *last = next + n; /* last[i] is -1 for a repeat */
  memset(first, 0xff, slots * sizeof *first); /* -1: empty */
  uint64_t seed = (uint64_t)(uintptr_t)json * 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; i++) {
    next[i] = -1;
    last[i] = i;
    for (uint64_t k = lower_hash(seed, hs[i].name, hs[i].name_len);; k++) {
      int *slot = &first[k & (slots - 1)];
      if (*slot < 0) {
        *slot = i;
        break;
      }
      (*compared)++;
      if (name_eq(&hs[*slot], &hs[i])) {
        next[last[*slot]] = i;
        last[*slot] = i;
        last[i] = -1;
        break;
      }
    }
  }
  size_t o = 0;
  json[o++] = '{';
  for (int i = 0; i < n; i++) {
    if (last[i] < 0) continue; /* a repeat: written with the first of its name */
    if (o > 1) json[o++] = ',';
    json[o++] = '"';
    o += json_escape(json + o, hs[i].name, hs[i].name_len, 1);
    memcpy(json + o, "\":\"", 3);
    o += 3;
    o += json_escape(json + o, hs[i].value, hs[i].value_len, 0);
    for (int j = next[i]; j >= 0; j = next[j]) {
      memcpy(json + o, ", ", 2);
      o += 2;
      o += json_escape(json + o, hs[j].value, hs[j].value_len, 0);
    }
    json[o++] = '"';
  }
  json[o++] = '}';
  if (ix != inline_ix) free(ix);
  return o;
}

static void headers_end(cb__req_t *r) {
  char *json = malloc(cb__headers_json_cap(r->headers, r->nheaders));
  uint64_t compared = 0; /* a local the compiler keeps in a register: no cost to the route */
  size_t o = json != NULL ? cb__headers_json_counted(r->headers, r->nheaders, json, &compared) : 0;
  if (o == 0) { /* out of memory */
    free(json);
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  cb__res_head(r, 200, ct_json, NULL, 0, (int64_t)o);
  cb__res_data(r, json, o, CB__DATA_FREE);
  cb__res_end(r);
}

static const cb__handler_t h_headers = {.on_end = headers_end};

/* ---- 404 and 405 ---- */

static void not_found_end(cb__req_t *r) {
  CB__STAT_INC(r->conn->w, status_404);
  /* The stubs that came closest, in the body (near_miss.c, docs/routes.md "Near misses"): none, an empty 404. */
  char *body = NULL;
  size_t len = 0;
  int json = 0;
  if (r->table != NULL) body = cb__near_body(r, &len, &json);
  if (body == NULL) {
    cb__res_head(r, 404, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  cb__res_head(r, 404, json ? ct_json : ct_text, NULL, 0, (int64_t)len);
  cb__res_data(r, body, len, CB__DATA_FREE);
  cb__res_end(r);
}

static const cb__handler_t h_not_found = {.on_end = not_found_end};

/* ---- the fixture routes: the default table, built like stubs from a cb_match_t ---- */

#define GET CB_METHOD_GET
#define POST CB_METHOD_POST

static const struct {
  const char *name;
  unsigned methods;
  const char *path;
  const cb__handler_t *handler;
  int iarg;
} fixture_routes[] = {
    {"root", GET, "/", &h_root, 0},
    {"hello", GET, "/hello", &h_hello, 0},
    {"json", GET, "/json", &h_json, 0},
    {"echo", POST, "/echo", &h_echo, 0},
    {"echo_chunked", POST, "/echo/chunked", &h_echo_chunked, 0},
    {"file_tiny", GET, "/file/tiny", &h_file, CB__FILE_TINY},
    {"file_small", GET, "/file/small", &h_file, CB__FILE_SMALL},
    {"file_big", GET, "/file/big", &h_file, CB__FILE_BIG},
    {"stream", GET, "/stream", &h_stream, 0},
    {"stream_small", GET, "/stream/small", &h_stream, 1},
    {"stream_big", GET, "/stream/big", &h_stream, 2},
    {"sse", GET, "/sse", &h_sse, 0},
    {"sse_small", GET, "/sse/small", &h_sse, 1},
    {"sse_big", GET, "/sse/big", &h_sse, 2},
    {"headers", GET, "/headers", &h_headers, 0},
    {"large", GET, "/large", &h_large, 0},
    {"cookies", GET, "/cookies", &cb__h_cookies, 0},
    {"gzip", GET, "/gzip", &cb__h_gzip, 0},
    {"ws", GET, "/ws", &cb__h_ws, 0},
    /* Prefix routes, so that a bad parameter (/delay/abc, /delay/1/2) reaches the handler and gets its 400. */
    {"delay", GET, "/delay/*", &h_delay, 0},
    {"status", GET, "/status/*", &h_status, 0},
    {"fault", 0, "/fault/*", &cb__h_fault, 0}, /* fault.c, docs/faults.md */
};

#define NFIXTURES (sizeof fixture_routes / sizeof fixture_routes[0])

static const cb__route_kind_t fixture_kind = {.claim = NULL, .free_arg = NULL};

static int fixture_route(cb__routes_t *reg, const char *name, unsigned methods, const char *path,
                         const cb__handler_t *h, int iarg, cb__route_t **out) {
  cb_match_t m = {.methods = methods, .path = {path, strlen(path)}};
  int err = cb__route_new(&m, name, strlen(name), &fixture_kind, h, NULL, out);
  if (err) return err;
  (*out)->fixture = 1;
  (*out)->iarg = iarg;
  err = cb__routes_slot(reg, *out);
  if (err) {
    cb__route_unref(reg, *out);
    *out = NULL;
  }
  return err;
}

int cb__fixture_routes(cb__routes_t *reg, cb__route_t ***out, int *n, cb__route_t **not_found) {
  cb__route_t **a = calloc(NFIXTURES, sizeof *a);
  if (a == NULL) return UV_ENOMEM;
  *out = a;
  *n = 0;
  /* "not_found" never matches (its handler answers 404); it carries the 404 count. */
  int err = fixture_route(reg, "not_found", 0, "/", &h_not_found, 0, not_found);
  for (size_t i = 0; i < NFIXTURES && err == 0; i++) {
    err = fixture_route(reg, fixture_routes[i].name, fixture_routes[i].methods, fixture_routes[i].path,
                        fixture_routes[i].handler, fixture_routes[i].iarg, &a[i]);
    if (err == 0) (*n)++;
  }
  return err;
}
