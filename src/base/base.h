/* base/: what every layer of the engine stands on: payloads and fixture files, status texts, name tables and the
 * error detail, HTTP's text rules, SHA-1, per-worker block caches. Nothing here knows a connection, a request
 * or a route. (docs/architecture.md: the layers) */
#ifndef CB_BASE_H
#define CB_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>
#include "cbench.h"

/* A string literal and its length, for the (pointer, length) pairs the engine passes. */
#define STR(s) s, (sizeof(s) - 1)

/* One header field, not terminated: what the protocols parse into and what the response API takes. */
typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} cb__hdr_t;

/* a[0..n) == b[0..n). Keys of 4 to 16 bytes (paths, header values) with two overlapping loads, no call. */
static inline int cb__same_bytes(const char *a, const char *b, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t x0, x1, y0, y1;
    __builtin_memcpy(&x0, a, 8);
    __builtin_memcpy(&x1, a + n - 8, 8);
    __builtin_memcpy(&y0, b, 8);
    __builtin_memcpy(&y1, b + n - 8, 8);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  if (n >= 4 && n < 8) {
    uint32_t x0, x1, y0, y1;
    __builtin_memcpy(&x0, a, 4);
    __builtin_memcpy(&x1, a + n - 4, 4);
    __builtin_memcpy(&y0, b, 4);
    __builtin_memcpy(&y1, b + n - 4, 4);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  return __builtin_memcmp(a, b, n) == 0;
}

/* ---- fixture.c: files and static payloads ---- */

enum { CB__FILE_TINY, CB__FILE_SMALL, CB__FILE_BIG, CB__FILE_COUNT };

typedef struct {
  int fd[CB__FILE_COUNT];
  uint64_t size[CB__FILE_COUNT];
  /* The same bytes mapped read-only: HTTP/2 sends a file as many DATA frames, and a frame header plus a
   * reference into the mapping batches into one writev where sendfile would cost a call per frame. */
  const char *map[CB__FILE_COUNT];
  char dir[512]; /* empty: the files are in memory (memfd) */
} cb__fixtures_t;

int cb__fixtures_open(cb__fixtures_t *fx, const char *dir);
void cb__fixtures_close(cb__fixtures_t *fx);

typedef struct {
  const char *ptr;
  size_t len;
} cb__slice_t;

/* Payloads built once per process and never freed; safe to reference from any thread. */
typedef struct {
  cb__slice_t line;      /* LINE: 64 bytes */
  cb__slice_t bigline;   /* BIGLINE: 16384 bytes */
  cb__slice_t sse_line;  /* one SSE event carrying LINE */
  cb__slice_t sse_big;   /* one SSE event carrying BIGLINE */
} cb__payloads_t;

const cb__payloads_t *cb__payloads(void);

/* Generated content (byte i is i % 251) as one read-only buffer of CB__GEN_SPAN + 251 bytes: any run of up to
 * CB__GEN_SPAN bytes starting at content offset `off` is gen + off % 251. Made on first use, never freed. */
#define CB__GEN_SPAN (1u << 20)
/* GET /large: the first CB__LARGE_LEN bytes of the generated content. */
#define CB__LARGE_LEN 65536
const char *cb__generated(void);

/* ---- http_status.c ---- */

/* The reason phrase of docs/wire.md for a status code ("Unknown" when it has none). */
const char *cb__reason(int status);


/* ---- pool.c: per-worker block caches ---- */

#define CB__CACHE_MAX 64

typedef struct {
  uint32_t n;
  size_t size;
  void *free[CB__CACHE_MAX];
} cb__cache_t;

/* A worker's caches: output-queue storage (entries and arena in one block), 4 KiB blocks (held HTTP/1.1
 * input), and one of a size its owner gives (the HTTP/1.1 request state: proto/ sets it when a worker is made,
 * cb__cache_init). */
typedef struct {
  cb__cache_t outq, b4k, h1;
} cb__caches_t;

#define CB__BLOCK_4K 4096

void cb__cache_init(cb__cache_t *k, size_t size);
/* A block of k->size bytes (not zeroed), or NULL. */
void *cb__cache_get(cb__cache_t *k);
/* Gives a block of k->size bytes back (NULL is ignored). */
void cb__cache_put(cb__cache_t *k, void *p);
void cb__cache_drain(cb__cache_t *k);
/* outq_block: the size of an output queue's block (core/). The h1 cache starts with no size (cb__cache_init). */
void cb__caches_init(cb__caches_t *cs, size_t outq_block);
void cb__caches_drain(cb__caches_t *cs);

/* ---- names.c: name tables and the error detail of a refused stub ---- */

/* The error detail of a refused stub (names.c; include/cbench.h, cb_error_detail()): cleared at the start of each
 * route add, filled by the check that refuses a field. Both setters return UV_EINVAL, so a check reads
 * `return cb__bad_bytes(CB_FIELD_PATH, -1, CB_WHY_EMPTY, p, n);`. p may be NULL (then n is taken as 0). */
void cb__detail_clear(void);
int cb__bad_bytes(cb_field_id field, long index, cb_why_id why, const char *p, size_t n);
int cb__bad_number(cb_field_id field, long index, cb_why_id why, long long number);
/* The kinds of fault (docs/faults.md), numbered as the journal records them (cb_request_t.fault). */
enum {
  CB__FAULT_NONE,
  CB__FAULT_RESET,
  CB__FAULT_EMPTY,
  CB__FAULT_HANG,
  CB__FAULT_GARBAGE,
  CB__FAULT_TRUNCATED,
  CB__FAULT_OVERLONG,
  CB__FAULT_MALFORMED_CHUNK,
  CB__FAULT_MISSING_LAST_CHUNK,
  CB__FAULT_RAW,
  CB__FAULT_DELAY,
  CB__FAULT_DRIBBLE,
  CB__FAULT_RST_STREAM,
  CB__FAULT_GOAWAY,
  CB__FAULT_SETTINGS,
  CB__FAULT_VIOLATION,
  CB__FAULT_TRAILERS,
  CB__FAULT_SLOW_HEAD,
  CB__FAULT_DRIP,
  CB__FAULT_COUNT
};

/* The name of a fault kind ("reset"), "" for none (the journal's and the fault parser's table). */
const char *cb__fault_name(int kind);

/* ---- text.c: HTTP's text rules ---- */

/* The name of one CB_METHOD_* bit ("GET"), NULL for another value. */
const char *cb__method_name(unsigned bit);
/* The allow header value for a method mask, in the fixed order. Returns its length; buf has 80 bytes. */
size_t cb__allow_string(unsigned mask, char *buf);
/* RFC 9110 token / a field value with no control character but HTAB. */
int cb__is_token(const char *p, size_t n);
int cb__bad_value(const char *p, size_t n);
/* Why a header name or value is refused: 0 when it is good, else a CB_WHY_*. Shared by stub matchers, stub
 * response headers and deferred replies. */
int cb__header_name_why(const char *p, size_t n);
int cb__header_value_why(const char *p, size_t n);
/* A route's name: 0, or UV_EINVAL with the detail filled. {NULL, 0} is good (the default name). */
int cb__check_name(cb_str_t name);
/* Whether a response header name is one the engine writes itself (content-length...). */
int cb__forbidden_header(const char *name, size_t n);

/* ---- sha1.c ---- */
void cb__sha1(const void *data, size_t len, uint8_t out[20]);

#endif
