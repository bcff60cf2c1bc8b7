/* kinds/: the route kinds, each filling cb__route_kind_t and answering through the response API: the fixture
 * routes of docs/wire.md (with /cookies and /gzip), stubs (with their templates and near misses), faults, and
 * deferred routes answered by another thread (Erlang handlers). (docs/architecture.md: "A new route kind",
 * "A new fault") */
#ifndef CB_KINDS_H
#define CB_KINDS_H

#include "proto/proto.h"
#include "routes/routes.h"
#include "kinds/record.h"

/* A kind's state in a request (cb__req_t.kind): CB__KIND_STATE(r, type) is r's, as the kind's own struct, which
 * is declared `typedef struct CB__KIND_STATE_ATTR {...} type;` (may_alias: the bytes are read through it). */
#define CB__KIND_STATE_ATTR __attribute__((may_alias))
#define CB__KIND_STATE(r, type) ((type *)(void *)(r)->kind.u64)
#define CB__KIND_STATE_FITS(type) _Static_assert(sizeof(type) <= CB__KIND_STATE_SIZE, #type " fits cb__req_t.kind")

/* The worker part (core.h) deferred routes own: the parked requests, made with the first. */
#define CB__PART_DEFERRED 2
/* Tests: the bytes of a deferred request's answer queued and not written (SIZE_MAX when it is over), on its
 * worker's thread (testing.c). */
size_t cb__deferred_queued(cb__worker_t *w, cb_reqref_t ref);

/* ---- fixture_routes.c: the fixture routes (built into reg: cb__routes_new's fixtures) and the 404 ---- */
int cb__fixture_routes(cb__routes_t *reg, cb__route_t ***out, int *n, cb__route_t **not_found);

/* GET /headers: the bytes cb__headers_json_counted() may write for these headers, and their JSON object
 * (docs/wire.md), or 0 when the index of names could not be allocated (the object is at least "{}"). *compared
 * counts the comparisons of two names (for the tests: a name costs a few, not one per header around it). */
size_t cb__headers_json_cap(const cb__hdr_t *hs, int n);
size_t cb__headers_json_counted(const cb__hdr_t *hs, int n, char *out, uint64_t *compared);

/* ---- the roadrunner routes: cookies.c (GET /cookies), gzip_body.c (GET /gzip) ---- */
extern const cb__handler_t cb__h_cookies;
extern const cb__handler_t cb__h_gzip;
/* At most this many distinct cookie names are answered; later pairs are ignored (browsers send fewer). */
#define CB__COOKIES_MAX 256
/* The bytes cb__cookies_json() may write for these headers, and the JSON object of their cookie fields. */
size_t cb__cookies_json_cap(const cb__hdr_t *hs, int n);
size_t cb__cookies_json(const cb__hdr_t *hs, int n, char *out);
/* The same, adding to *compared the comparisons of a pair's name with a name already kept (for the tests: a
 * repeated name costs a few, not one per name kept). */
size_t cb__cookies_json_counted(const cb__hdr_t *hs, int n, char *out, uint64_t *compared);
#define CB__GZIP_PLAIN_LEN 16384
/* The /gzip body as sent: plain and gzip-coded, made once per process. 0, or UV_ENOMEM. */
int cb__gzip_bodies(cb__slice_t *identity, cb__slice_t *gzip);
/* Whether the accept-encoding fields of these headers make gzip the answer (1) or identity (0). */
int cb__accepts_gzip(const cb__hdr_t *hs, int n);

/* ---- near_miss.c: the stubs closest to a request that matched none (the 404 path only) ----
 * Each stub is scored by the parts of its match the request fails: the path counts 4, the method 2, each header
 * or query matcher and the body matcher 1 (a body matcher on a request whose body was not held cannot be judged:
 * it counts 1 and is flagged unchecked). The best CB__NEAR_MAX (lowest score, then matching order) are kept. */
#define CB__NEAR_MAX 3
/* CB__NEAR_SPENT: every part matched, so the stub was passed over: its `times` or its sequence used up, or its
 * scenario in another state. */
enum { CB__NEAR_METHOD = 1, CB__NEAR_PATH = 2, CB__NEAR_BODY = 4, CB__NEAR_BODY_UNCHECKED = 8, CB__NEAR_SPENT = 16 };
typedef struct {
  const cb__route_t *route;
  unsigned score;
  unsigned flags;    /* CB__NEAR_*: the parts that differ */
  uint32_t headers;  /* bit i: header matcher i differs */
  uint32_t query;    /* bit i: query matcher i differs */
} cb__near_t;
/* Scores every stub of t (fixture routes are not stubs) against r; fills out[] best first, returns how many.
 * work (NULL: not counted; tests read it): adds the units of work the query matchers took (below). */
int cb__near_misses(const cb__rtable_t *t, cb__req_t *r, cb__near_t out[CB__NEAR_MAX], uint64_t *work);
/* The same over routes[0..nroutes) in matching order (cb_server_near_misses scores a snapshot of the stubs). */
int cb__near_misses_of(cb__route_t *const *routes, int nroutes, cb__req_t *r, cb__near_t out[CB__NEAR_MAX],
                       uint64_t *work);
/* The differing parts as text, "method, path, header x-k, query a, body": at most cap bytes with the NUL. */
size_t cb__near_text(const cb__near_t *n, char *buf, size_t cap);
/* The body of a 404 with near misses under r->table, malloc'd (*len bytes), JSON when the request accepts
 * application/json (*json set), or NULL when no stub is near (an empty 404) or memory runs out. */
char *cb__near_body(cb__req_t *r, size_t *len, int *json);

/* ---- template.c: response templates (cb_response_t.templated) ---- */
enum { CB__TPL_LIT, CB__TPL_METHOD, CB__TPL_BODY, CB__TPL_SEQ, CB__TPL_PATH, CB__TPL_QUERY, CB__TPL_HEADER };
typedef struct {
  uint8_t kind;    /* CB__TPL_* */
  unsigned arg;    /* PATH: the parameter's index in the pattern */
  const char *str; /* LIT: the bytes; QUERY: the name; HEADER: the name, lowercased (in the template's text) */
  size_t len;
} cb__tpl_piece_t;
typedef struct {
  cb__tpl_piece_t *p;
  int n;
  char *text;        /* the template's own copy, which the pieces point into */
  uint8_t uses_body; /* {{body}}: the request's body is kept for it */
} cb__tpl_t;
/* Compiles text[0..n) against the path pattern (whose {params} {{path.NAME}} may name). 0, UV_EINVAL (an unknown
 * or unclosed placeholder, a parameter the pattern does not have) or UV_ENOMEM. */
int cb__tpl_compile(const char *text, size_t n, cb_str_t pattern, cb__tpl_t *t);
void cb__tpl_free(cb__tpl_t *t);
/* Writes the template for r into dst (NULL: only measures) and returns the length, at most max: the rendering
 * stops there, so a value that is cut (a header's, at 8,192 bytes) is never sized or written past the cut however
 * often it inserts {{body}}. header: a header value, from whose inserted values the bytes a field value cannot
 * hold are left out. */
size_t cb__tpl_render(const cb__tpl_t *t, const cb__req_t *r, const char *body, size_t body_len, uint64_t seq,
                      int header, size_t max, char *dst);

/* ---- fault.c: faults, one more kind of answer (docs/faults.md) ---- */

/* A parsed fault: what cb__fault_parse() makes of "KIND?name=value&...". Immutable once parsed. */
typedef struct {
  uint8_t kind;     /* CB__FAULT_* */
  uint8_t at;       /* reset, rst_stream: 0 before the head, 1 after the head, 2 after `bytes` body bytes */
  uint8_t close;    /* raw: close after the bytes (1) or keep the connection (0) */
  uint8_t dist;     /* delay: 0 fixed, 1 uniform [ms, max], 2 lognormal (median ms, sigma) */
  uint64_t length;  /* the declared body length */
  uint64_t bytes;   /* body bytes before the fault; garbage bytes */
  uint64_t seed;
  uint32_t ms, max_ms; /* hang, delay, dribble */
  uint32_t pieces;     /* dribble */
  double sigma;        /* delay=lognormal */
  uint32_t code;       /* rst_stream, goaway: the HTTP/2 error code */
  int64_t last;        /* goaway: last-stream-id; -1: the stream before this one (this one is cut) */
  int64_t max_frame, window; /* settings: SETTINGS_MAX_FRAME_SIZE, SETTINGS_INITIAL_WINDOW_SIZE; -1: unchanged */
  uint32_t rate_ppb;   /* the chance it applies, in parts per billion (1e9: always) */
  int raw_status;      /* raw: the status the journal records (from the bytes' status line, 0 if none) */
  const char *data;    /* raw: the bytes (a preset's, or owned) */
  size_t data_len;
  char *owned;
} cb__fault_t;

#define CB__FAULT_ALWAYS 1000000000u

/* The answer a fault departs from: the head it sends (a stub's status and headers; 200 and
 * application/octet-stream for /fault/) and the answer without the fault (a stub's, which delay, settings and
 * a graceful goaway send; NULL: /fault/'s declared one). Lives as long as the route. */
typedef struct {
  int status;
  const cb__hdr_t *hdrs;
  int nhdrs;
  void (*normal)(cb__req_t *r);
  /* The answer's own body, which the pacing faults (dribble, drip, slow_head) pace: body_len bytes, of which
   * body(r, from, to) hands [from, to) to the response API as one piece, returning what cb__res_data returns.
   * body NULL: none (/fault/, a stub without a body): `length` bytes of generated content instead. */
  uint64_t body_len;
  int (*body)(cb__req_t *r, uint64_t from, uint64_t to);
  uint32_t max_delay_ms; /* the bound of a drawn delay: the path's bound of `ms` (60,000 for /fault/) */
} cb__fault_answer_t;

/* Parses a fault spec (KIND, or KIND?name=value&... with the parameters of docs/faults.md, values
 * percent-decoded). Returns 0, or UV_EINVAL for an unknown kind or parameter, or a value out of its bound;
 * UV_ENOMEM. Free with cb__fault_free (the owned raw bytes). */
int cb__fault_parse(const char *spec, size_t n, cb__fault_t *f);
void cb__fault_free(cb__fault_t *f);
/* Whether the fault applies to this request: the n-th draw (n from *counter, atomically) of its rate. */
int cb__fault_fires(const cb__fault_t *f, uint64_t *counter);
/* Answers r with fault f (on_end time), departing from answer. Both must outlive the request. */
void cb__fault_start(cb__req_t *r, const cb__fault_t *f, const cb__fault_answer_t *answer);
/* A stub's fault paces the stub's own body when it has one (body_len > 0): drip sends it a byte per piece, so
 * body_len must be at most 100,000; dribble's pieces at most body_len. Returns 0 or UV_EINVAL. */
int cb__fault_fit(cb__fault_t *f, uint64_t body_len);
/* Whether r's answer is being paced by its fault (dribble, drip, slow_head): its handler's on_writable then
 * calls cb__fault_writable(r). */
int cb__fault_pacing(const cb__req_t *r);
void cb__fault_writable(cb__req_t *r);
/* Delay's n-th seeded draw of f, at most bound_ms (exposed for the tests of the bound). */
uint32_t cb__fault_delay_ms(const cb__fault_t *f, uint64_t n, uint32_t bound_ms);
/* The /fault/{kind} fixture handler. */
extern const cb__handler_t cb__h_fault;


/* ---- stub.c ---- */
/* Validates and copies a stub, and appends it to the registry (not published yet). */
int cb__stub_append(cb__routes_t *reg, const cb_stub_t *stub, uint64_t *id);
typedef struct cb__proxy_s cb__proxy_t;
/* The options of a proxy stub's route (its cb_response_t.proxy, as proxy.c made them). */
const cb__proxy_t *cb__stub_proxy(const cb__route_t *rt);

/* ---- proxy.c: the proxy kind (docs/proxy.md) ---- */
/* The worker part (core.h) the proxy owns: the worker's upstream connections, made with the first. */
#define CB__PART_PROXY 3
/* Checks and copies a stub's proxy options, resolving the upstream's host (the add's thread: never a worker).
 * 0, UV_EINVAL with the detail filled (CB_FIELD_PROXY), UV_ENOMEM. */
int cb__proxy_new(const cb_proxy_t *opts, cb__proxy_t **out);
/* Whether `to' alone is what cb__proxy_new refuses (0, or UV_EINVAL with the detail filled, as cb__proxy_new would
 * fill it; UV_ENOMEM), its host resolved again: the stub file loader asks it after a CB_FIELD_PROXY refusal, to name
 * the field `proxy.to' as the Erlang API does. */
int cb__proxy_check_to(cb_str_t to);
void cb__proxy_free(cb__proxy_t *p);
/* The stub's delay and fault (which must outlive p), applied to the proxied answer. */
void cb__proxy_answer_with(cb__proxy_t *p, unsigned delay_ms, const cb__fault_t *fault);
extern const cb__handler_t cb__h_proxy;
/* The handler a proxy stub answers with: cb__h_proxy (HTTP/1.1 upstream) or proxy_h2.c's (h2c). */
const cb__handler_t *cb__proxy_handler(const cb__proxy_t *p);

#endif
