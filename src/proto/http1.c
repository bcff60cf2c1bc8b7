/* HTTP/1.0 and HTTP/1.1 with llhttp: keep-alive, pipelining, request bodies (content-length and chunked),
 * Expect: 100-continue, HEAD, and response framing for the response API (cb__proto_t).
 *
 * One request is in a handler at a time. When a handler answers later (a timer, a generator waiting for
 * room), parsing pauses after that request and the unparsed input is held until the response ends, so that
 * responses to pipelined requests leave in request order. Responses made while parsing one read are queued
 * together and leave in one writev.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h" /* cb_ctoken: RFC 9110 token characters */
#include "proto/proto.h"
#include "llhttp.h"

/* Unparsed input held while a response is in flight; past this, reading from the socket stops. */
#define PENDING_MAX (64 * 1024)
/* The head's buffers inside the state: request line and headers, and header entries. */
#define HEAD_INLINE 512
#define HDRS_INLINE 16
/* c->rest_flags while the state is given back: a request was served on this connection. */
#define REST_SERVED 1

typedef struct {
  llhttp_t parser;
  cb__conn_t *c;
  /* The head: url and the kept headers. While `direct` is set, they point into the bytes being parsed (`url`,
   * the entries of `hdrs`, the name being read in `field`): most heads arrive in one read and are parsed before
   * it returns. Once a read ends inside a head, or a request outlives the bytes it came in (answered later, a
   * body still coming), the head is copied into `head` (pin_head) and goes on there: then headers hold offsets
   * into `head` while parsing and pointers once the head is complete (the buffer no longer moves then). */
  char *head;
  size_t head_len, head_cap;
  cb__hdr_t *hdrs;
  int nhdrs, hdrs_cap;
  const char *url;
  size_t url_len;
  const char *field;
  size_t field_len;
  uint8_t direct;
  int64_t head_left;  /* max_header_bytes less what the head has taken so far */
  size_t trailer_bytes; /* the trailer section of a chunked body, counted against its own max_header_bytes */
  size_t ext_bytes;     /* chunk extensions of the request, counted against their own max_header_bytes */
  size_t ext_len;       /* bytes of the current extension name or value */
  uint8_t ext_quoted;   /* the current extension value is a quoted string */
  uint8_t ext_resume;   /* paused after an extension value: parse() goes on (see on_ext_value_complete) */
  uint8_t url_at_end;   /* the target ran to the end of the last read: its next byte decides HTTP/0.9 */
  uint8_t value_cut;    /* the last value's last piece ran to the end of its read: its next piece may go on */
  uint8_t unknown_method; /* llhttp refused the method: its request line is held until it can be judged */
  uint8_t version_len;  /* bytes of the version digits seen (`1.1`), kept in `version` */
  char version[3];
  char last_byte;       /* the last byte of the last read (what came before a parse error at a read's start) */
  const char *exec_end; /* the end of the bytes llhttp is parsing now */
  size_t field_start; /* where the current header's name starts in `head` */
  int keep_cur;       /* 2 while a header name is being read, 1 once it is complete (its value, until the next name) */
  uint8_t in_head;    /* a message began and its head is not complete */
  uint8_t in_msg;     /* a message began and is not complete */
  uint8_t waiting;    /* parsing is paused until the current response ends */
  uint8_t resume;     /* the response ended: resume parsing the held input */
  uint8_t dead;       /* an error answer was queued: input is dropped */
  uint8_t keep_alive; /* after this response the connection stays */
  uint8_t http10;
  uint8_t chunked_res; /* the response is chunked */
  uint8_t head_only;   /* HEAD: no body bytes */
  uint8_t stopping;    /* graceful stop: close after the current response */
  uint8_t expect_continue;
  uint8_t upgrade_h2c;     /* this request upgrades the connection to h2c once it is complete */
  uint8_t upgrade_ws;      /* this request upgrades the connection to WebSocket once it is complete (ws.c) */
  int err_status; /* set by a callback that refuses the request */
  /* The headers the engine itself reads, found as their names complete (on_header_field_complete): the index
   * of the first of each in hdrs, -1 when none; and how many host headers there are. */
  int host_idx, expect_idx, upgrade_idx, settings_idx, te_idx;
  int host_count;
  uint64_t requests;
  char *pending;
  size_t pending_len, pending_cap;
  /* From here on, not cleared when the state is taken (h1_wake): the request (on_message_begin clears it), and
   * the head's first buffers. Most heads fit them; a bigger one moves to the heap. */
  cb__req_t req;
  char head_buf[HEAD_INLINE];
  cb__hdr_t hdrs_buf[HDRS_INLINE];
} h1_t;

/* http1.c's per-worker memos: response heads it made, kept so that the next head with the same status,
 * content type, length, connection header and head key (a stub's fixed headers), written under the same Date
 * line, is one copy instead of being formatted again; and the last Host value it found valid (most clients
 * send the same one every time). */
#define CB__H1_MEMOS 4
typedef struct {
  const char *ctype; /* the address of the content type string (always a static string), NULL for none */
  uint64_t key;      /* the request's head_key: 0 for a head without extra headers */
  int64_t content_length;
  int16_t status;      /* 0: the slot is empty */
  uint8_t conn_hdr;    /* the connection header it ends with (http1.c) */
  uint8_t chunked;     /* transfer-encoding: chunked (a streamed body to an HTTP/1.1 client) */
  uint8_t len;         /* bytes of the head */
  uint32_t date_gen;   /* the worker's date_gen when it was made */
  char bytes[232];
} cb__h1_memo_t;

/* A whole fixed response (cb__res_fixed) as HTTP/1.1 sends it, kept under its description's address and memo_id
 * for the Date line and connection header it was made with: the next one is a single copy. A slot is 1 KiB:
 * room for a stub's few headers and a body of several hundred bytes. */
#define CB__H1_WHOLES 4
typedef struct {
  uintptr_t src;          /* the description's address, only ever compared (it may be gone); 0: empty */
  uint64_t memo_id;
  uint64_t tag;           /* the worker's date_gen and what makes the connection header (http1.c) */
  uint16_t len;           /* bytes of head and body */
  char bytes[1024 - 26];
} cb__h1_whole_t;

typedef struct {
  cb__h1_memo_t heads[CB__H1_MEMOS];
  cb__h1_whole_t wholes[CB__H1_WHOLES];
  uint8_t host_len;
  char host[63];
} cb__h1_worker_t;

/* The worker's memos (its CB__PART_H1 part), made when it takes its first HTTP/1.1 connection. */
static cb__h1_worker_t *memos(cb__worker_t *w) { return w->parts[CB__PART_H1].state; }

static const cb__proto_t h1_proto;
static const cb__conn_ops_t h1_ops;

static h1_t *H(llhttp_t *p) { return (h1_t *)p; }

/* ---- the head ---- */

/* Room for n more bytes in `head`. */
static int head_room(h1_t *h, size_t n) {
  if (h->head_len + n <= h->head_cap) return 0;
  size_t cap = h->head_cap;
  while (cap < h->head_len + n) cap *= 2;
  char *b = h->head == h->head_buf ? malloc(cap) : realloc(h->head, cap);
  if (b == NULL) return -1;
  if (h->head == h->head_buf) memcpy(b, h->head_buf, h->head_len);
  h->head = b;
  h->head_cap = cap;
  return 0;
}

/* Copies p[0..n) to the end of `head` (head_room() was called). Returns its offset. */
static size_t head_put(h1_t *h, const char *p, size_t n) {
  size_t off = h->head_len;
  if (n > 0) memcpy(h->head + off, p, n);
  h->head_len += n;
  return off;
}

static int head_append(h1_t *h, const char *p, size_t n) {
  /* Once the head is complete its offsets are pointers into `head`: growing it would free what they point
   * to. Nothing may append then (trailers take their own path); refuse rather than move the buffer. */
  if (!h->in_head) return -1;
  if (n == 0) return 0;
  if (head_room(h, n) != 0) return -1;
  head_put(h, p, n);
  return 0;
}

static void head_complete(h1_t *h);

/* The head stops pointing into the bytes being parsed: its pieces are copied into `head` and it goes on there
 * (see h1_t). All or nothing: on failure (out of memory) the head is unchanged. */
static int pin_head(h1_t *h) {
  size_t need = h->url_len + (h->in_head && h->keep_cur == 2 ? h->field_len : 0);
  for (int i = 0; i < h->nhdrs; i++) need += h->hdrs[i].name_len + h->hdrs[i].value_len;
  h->head_len = 0;
  if (head_room(h, need) != 0) return -1;
  h->direct = 0;
  head_put(h, h->url, h->url_len);
  for (int i = 0; i < h->nhdrs; i++) {
    cb__hdr_t *hd = &h->hdrs[i];
    hd->name = (const char *)(uintptr_t)head_put(h, hd->name, hd->name_len);
    hd->value = (const char *)(uintptr_t)head_put(h, hd->value, hd->value_len);
  }
  if (!h->in_head) {
    head_complete(h); /* a complete head: its offsets become pointers now */
  } else if (h->keep_cur == 2) {
    h->field_start = head_put(h, h->field, h->field_len);
  }
  return 0;
}

/* At a read's end, with the head still direct: whether the value being read was cut by it (see on_header_value),
 * then the head copied out of the read. Apart from pin_if_needed, which runs at every read's end. */
static __attribute__((noinline)) int pin_at_read_end(h1_t *h) {
  h->value_cut = h->in_head && h->keep_cur == 1 && h->nhdrs > 0 &&
                 h->hdrs[h->nhdrs - 1].value + h->hdrs[h->nhdrs - 1].value_len == h->exec_end;
  return pin_head(h);
}

/* A request still needs its head after the bytes being parsed are gone. */
static int pin_if_needed(h1_t *h) {
  return h->direct && (h->in_msg || h->req.handler != NULL) ? pin_at_read_end(h) : 0;
}

/* The request line plus headers may not exceed the limit: 431. */
static int count_head(h1_t *h, size_t n) {
  h->head_left -= (int64_t)n; /* n is at most a read's length */
  if (h->head_left < 0) {
    h->err_status = 431;
    return -1;
  }
  return 0;
}

/* Trailers (the fields after the last chunk) come through the same header callbacks as the head, but after
 * on_headers_complete. They are parsed (llhttp checks their syntax, we check the names) and dropped: nothing
 * of them is kept or shown to a handler. Their own budget is max_header_bytes, counted like the head's;
 * over it: 431. */
static int count_trailer(h1_t *h, size_t n) {
  h->trailer_bytes += n;
  if (h->trailer_bytes > h->c->w->cfg->max_header_bytes) {
    h->err_status = 431;
    return -1;
  }
  return 0;
}

static int lower_eq(const char *a, size_t n, const char *lit) {
  if (strlen(lit) != n) return 0;
  for (size_t i = 0; i < n; i++) {
    char ch = a[i];
    if (ch >= 'A' && ch <= 'Z') ch += 32;
    if (ch != lit[i]) return 0;
  }
  return 1;
}

static int on_message_begin(llhttp_t *p) {
  h1_t *h = H(p);
  /* Pipelined heads: each has its own header timeout. Only in header mode: from another mode, conn.c starts the
   * header timeout (and its start) when the head is still incomplete after this event. */
  if (h->requests > 0 && h->c->timer_mode == CB__TIMER_HEADER) cb__conn_head_begin(h->c);
  h->head_len = 0;
  h->nhdrs = 0;
  h->url = "";
  h->url_len = 0;
  h->direct = 1;
  /* 14: method, version and line ends, roughly what the request line costs beyond the url */
  h->head_left = (int64_t)h->c->w->cfg->max_header_bytes - 14;
  h->trailer_bytes = 0;
  h->ext_bytes = 0;
  h->ext_len = 0;
  h->version_len = 0;
  h->in_head = 1;
  h->in_msg = 1;
  h->expect_continue = 0;
  h->upgrade_h2c = 0;
  h->host_idx = h->expect_idx = h->upgrade_idx = h->settings_idx = h->te_idx = -1;
  h->host_count = 0;
  h->err_status = 0;
  h->chunked_res = 0; /* an answer without a head (a raw fault) must not end with a stale last chunk */
  cb__req_t *r = &h->req;
  memset(r, 0, sizeof *r);
  r->conn = h->c;
  r->proto = &h1_proto;
  r->stream = h;
  r->content_length = -1;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  h1_t *h = H(p);
  if (count_head(h, n)) return -1;
  if (h->direct && h->url_len == 0) {
    h->url = at;
  } else if (!(h->direct && at == h->url + h->url_len)) {
    if ((h->direct && pin_head(h) != 0) || head_append(h, at, n) != 0) return -1;
  }
  h->url_len += n;
  /* A target ended by the line's end, without a version, is an HTTP/0.9 request: 400 at once (llhttp would
   * wait for header lines). Where the target reaches the end of the read, the next read's first byte
   * decides (parse()). */
  h->url_at_end = at + n == h->exec_end;
  if (!h->url_at_end && (at[n] == '\r' || at[n] == '\n')) return -1;
  return 0;
}

/* The path: the request target up to the first '?'. A short target is scanned here: most are, and for them the
 * call to memchr costs more than the scan. */
static size_t path_length(const char *url, size_t n) {
  if (n <= 16) {
    for (size_t i = 0; i < n; i++)
      if (url[i] == '?') return i;
    return n;
  }
  const char *q = memchr(url, '?', n);
  return q ? (size_t)(q - url) : n;
}


/* ---- the request line: method and version ----
 * Methods: GET, HEAD and POST are routed; the other methods of RFC 9110 and PATCH are known (405 on a
 * fixture path, 404 elsewhere); any other method is not implemented: 501, then close (RFC 9110 15.6.2), over
 * HTTP/1.1 and HTTP/2 alike. llhttp stops at a method it does not know itself (HPE_INVALID_METHOD, see
 * unknown_method()), so the connection cannot go on after a 501. PRI (the HTTP/2 preface seen by HTTP/1.1, a
 * broken one or h2c switched off) stays a 400.
 * Versions: HTTP/1.0 and HTTP/1.1 are served; HTTP/0.9 (no version, or written out) is a 400; any other
 * version (HTTP/2.0, HTTP/1.2) is a 505, then close. */
static int known_method(uint8_t m) {
  switch (m) {
    case HTTP_GET: case HTTP_HEAD: case HTTP_POST: case HTTP_PUT: case HTTP_DELETE: case HTTP_CONNECT:
    case HTTP_OPTIONS: case HTTP_TRACE: case HTTP_PATCH:
      return 1;
    default:
      return 0;
  }
}

static int on_method_complete(llhttp_t *p) {
  h1_t *h = H(p);
  uint8_t m = llhttp_get_method(p);
  if (known_method(m)) return 0;
  if (m != HTTP_PRI) h->err_status = 501;
  return -1;
}

static int on_version(llhttp_t *p, const char *at, size_t n) {
  h1_t *h = H(p);
  if (n == 3 && h->version_len == 0) { /* the usual case: all of it at once */
    memcpy(h->version, at, 3);
    h->version_len = 3;
    return 0;
  }
  for (size_t i = 0; i < n && h->version_len < sizeof h->version; i++) h->version[h->version_len++] = at[i];
  return 0;
}

static int on_version_complete(llhttp_t *p) {
  h1_t *h = H(p);
  if (p->http_major == 1 && p->http_minor <= 1) return 0;
  if (!(p->http_major == 0 && p->http_minor == 9)) h->err_status = 505;
  return -1;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* After a method llhttp does not know: the rest of the method (token bytes), SP, a target of visible ASCII,
 * SP, HTTP/d.d, CRLF. 1: such a line (the method is the only fault: 501); 0: not one (400); -1: not all of it
 * has arrived yet. */
static int unknown_method_line(const char *p, const char *end) {
  static const char form[] = " HTTP/d.d\r\n";
  while (p < end && cb_ctoken[(unsigned char)*p]) p++;
  if (p == end) return -1;
  if (*p++ != ' ') return 0;
  const char *t = p;
  while (p < end && *p > ' ' && *p < 0x7f) p++;
  if (p == end) return -1;
  if (p == t) return 0;
  for (size_t i = 0; i < sizeof form - 1; i++, p++) {
    if (p == end) return -1;
    if (form[i] == 'd' ? !is_digit(*p) : *p != form[i]) return 0;
  }
  return 1;
}

/* A version llhttp refuses although it is DIGIT.DIGIT (HTTP/1.2, HTTP/3.0): 505 like HTTP/2.0. */
static int unknown_version(const h1_t *h) {
  const char *v = h->version;
  if (h->version_len != 3 || !is_digit(v[0]) || v[1] != '.' || !is_digit(v[2])) return 0;
  return !((v[0] == '1' && (v[2] == '0' || v[2] == '1')) || (v[0] == '0' && v[2] == '9') ||
           (v[0] == '2' && v[2] == '0'));
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  h1_t *h = H(p);
  if (h->in_head ? count_head(h, n) : count_trailer(h, n)) return -1;
#if !LLHTTP_STRICT_MODE
  /* Strict mode refuses every byte of a name (head and trailers) that is not a token character (its table is
   * RFC 9110's tchar, proto_header_name_bytes); without it llhttp 8.1 lets spaces through. */
  for (size_t i = 0; i < n; i++)
    if (!cb_ctoken[(unsigned char)at[i]]) return -1; /* 400 */
#endif
  if (!h->in_head) { /* a trailer: only remember that the name is not empty */
    h->keep_cur = 2;
    return 0;
  }
  if (h->direct) {
    if (h->keep_cur != 2) {
      h->field = at;
      h->field_len = n;
      h->keep_cur = 2;
      return 0;
    }
    if (at == h->field + h->field_len) {
      h->field_len += n;
      return 0;
    }
    if (pin_head(h) != 0) return -1;
  }
  if (h->keep_cur == 2) return head_append(h, at, n); /* a name split across reads goes on */
  h->field_start = h->head_len;
  h->keep_cur = 2;
  return head_append(h, at, n);
}

/* Whether name[0..n) is lit (lowercase, 4 to 16 bytes) without case, for a name llhttp has let through: a token
 * (its strict mode checks), in which no byte but an uppercase letter changes with OR 0x20 into a byte of lit
 * (letters, digits, '-'). Word-wide: two overlapping loads each side. */
static int lower_is(const char *name, const char *lit, size_t n) {
  if (n >= 8) {
    uint64_t a, b, x, y;
    memcpy(&a, name, 8);
    memcpy(&b, name + n - 8, 8);
    memcpy(&x, lit, 8);
    memcpy(&y, lit + n - 8, 8);
    return (((a | 0x2020202020202020ull) ^ x) | ((b | 0x2020202020202020ull) ^ y)) == 0;
  }
  uint32_t a, b, x, y;
  memcpy(&a, name, 4);
  memcpy(&b, name + n - 4, 4);
  memcpy(&x, lit, 4);
  memcpy(&y, lit + n - 4, 4);
  return (((a | 0x20202020u) ^ x) | ((b | 0x20202020u) ^ y)) == 0;
}

/* Remembers where the headers the engine reads are (by the length first: most names are none of them). */
static void note_header(h1_t *h, const char *name, size_t n, int idx) {
  int *slot;
  const char *lit;
  switch (n) {
    case 4: slot = &h->host_idx; lit = "host"; break;
    case 6: slot = &h->expect_idx; lit = "expect"; break;
    case 7: slot = &h->upgrade_idx; lit = "upgrade"; break;
    case 14: slot = &h->settings_idx; lit = "http2-settings"; break;
    case 17: slot = &h->te_idx; lit = "transfer-encoding"; break;
    default: return;
  }
  /* n is lit's length; lower_is() reads up to 16 bytes, and transfer-encoding is rare enough for the loop. */
  if (!(n <= 16 ? lower_is(name, lit, n) : lower_eq(name, n, lit))) return;
  if (slot == &h->host_idx) h->host_count++;
  if (*slot < 0) *slot = idx;
}

/* Twice the room for header entries (past the inline ones: heap). */
static __attribute__((noinline)) int grow_hdrs(h1_t *h) {
  int cap = 2 * h->hdrs_cap;
  cb__hdr_t *a = h->hdrs == h->hdrs_buf ? malloc((size_t)cap * sizeof *a)
                                        : realloc(h->hdrs, (size_t)cap * sizeof *a);
  if (a == NULL) return -1;
  if (h->hdrs == h->hdrs_buf) memcpy(a, h->hdrs_buf, sizeof h->hdrs_buf);
  h->hdrs = a;
  h->hdrs_cap = cap;
  return 0;
}

/* RFC 9112 section 5: a field value excludes the whitespace (SP, HTAB) around it. llhttp drops what leads the
 * value but keeps what trails it, so a value's end is trimmed once the value is complete: when the next name
 * completes, or the head. v is where the value's bytes are. One test of the last byte for most values: llhttp
 * lets no control byte but HTAB into a value, so a last byte up to 0x20 is SP or HTAB. */
static __attribute__((noinline)) void trim_slow(const char *v, cb__hdr_t *hd) {
  size_t n = hd->value_len;
  while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  hd->value_len = n;
}

static inline void trim_value(const char *v, cb__hdr_t *hd) {
  if (hd->value_len > 0 && (unsigned char)v[hd->value_len - 1] <= ' ') trim_slow(v, hd);
}

static int on_header_field_complete(llhttp_t *p) {
  h1_t *h = H(p);
  if (!h->in_head) { /* a trailer: an empty name is a 400 as in the head; the value is not kept */
    if (h->keep_cur != 2) return -1;
    h->keep_cur = 0;
    return count_trailer(h, 4); /* ": " and CRLF */
  }
  /* An empty name (no on_header_field before): 400. Checked before the name is formed, because the head
   * buffer is still NULL when the request line was empty too. */
  if (h->keep_cur != 2) return -1;
  const char *name = h->direct ? h->field : h->head + h->field_start;
  size_t n = h->direct ? h->field_len : h->head_len - h->field_start;
  if (n == 0) return -1;
  /* ": " and CRLF, counted with the name: there is no callback at the value's end (it would cost a call per
   * header for this alone). */
  if (count_head(h, 4)) return -1;
  /* Every header is kept: routes match on them and the journal records them. */
  h->keep_cur = 1;
  if (h->nhdrs > 0) { /* the value before this name is complete; an offset into `head` unless direct (h1_t) */
    cb__hdr_t *prev = &h->hdrs[h->nhdrs - 1];
    trim_value(h->direct ? prev->value : h->head + (uintptr_t)prev->value, prev);
  }
  if (h->nhdrs == h->hdrs_cap && grow_hdrs(h) != 0) return -1;
  note_header(h, name, n, h->nhdrs);
  cb__hdr_t *hd = &h->hdrs[h->nhdrs++];
  hd->name_len = n;
  hd->value_len = 0;
  if (h->direct) {
    hd->name = name;
    hd->value = name + n; /* an empty value points somewhere valid */
  } else {
    hd->name = (const char *)(uintptr_t)h->field_start; /* offsets until the head is complete */
    hd->value = (const char *)(uintptr_t)h->head_len;
  }
  return 0;
}

/* A value comes in one piece per read it spans, and in one more per obs-fold (RFC 9112 5.2: a line that begins
 * with SP or HTAB goes on with the value before it), which llhttp 8.1 takes in every mode: it ends the piece
 * before the CRLF and starts the next one at the whitespace. A fold is a 400 (the RFC lets a server refuse it or
 * replace it by SP): joined, it was a value that another parser reads as two fields, or as a line end (the
 * proxy's upstream, the journal). So a value's next piece must go on where the last one stopped: in the same
 * read (direct), right after it; in the next (pinned), at its start, the last piece having reached its read's
 * end (value_cut). llhttp hands over a piece at a read's start even when it is empty (the CRLF of a fold came
 * first), so that a fold whose CRLF begins a read is seen too. Both tests are off the usual path: a value in one
 * piece never gets here twice. A fold right after the colon, before any byte of the value, is skipped by llhttp
 * as whitespace before the value: that is the RFC's replacement, and the value is the next line's. */
/* A piece of a value whose head was copied out of its read (pinned): appended, unless it is a fold. Apart from
 * on_header_value, whose usual path would pay for what this one keeps across the copy. */
static __attribute__((noinline)) int pinned_value(h1_t *h, cb__hdr_t *hd, const char *at, size_t n) {
  if (hd->value_len > 0 && !h->value_cut) return -1; /* a fold: 400 */
  if (head_append(h, at, n)) return -1;
  hd->value_len += n;
  h->value_cut = at + n == h->exec_end;
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  h1_t *h = H(p);
  if (!h->in_head) return count_trailer(h, n);
  if (count_head(h, n)) return -1;
  if (!h->keep_cur) return 0;
  cb__hdr_t *hd = &h->hdrs[h->nhdrs - 1];
  if (!h->direct) return pinned_value(h, hd, at, n);
  if (hd->value_len == 0) {
    hd->value = at;
    hd->value_len = n;
    return 0;
  }
  if (at == hd->value + hd->value_len) {
    hd->value_len += n;
    return 0;
  }
  return -1; /* a fold: 400 */
}

static const cb__hdr_t *header_at(const h1_t *h, int idx) { return idx >= 0 ? &h->hdrs[idx] : NULL; }

/* Host (RFC 9112 3.2): an HTTP/1.1 request carries exactly one, any request at most one, and its value is
 * uri-host [":" port] (RFC 3986 3.2.2): a reg-name (unreserved, sub-delims, %HH; IPv4 addresses are
 * reg-names too) or an IP literal in brackets, then digits after the colon. It may be empty. Otherwise:
 * 400. HTTP/1.0 may leave it out. */
/* Host characters: 1 in a reg-name (unreserved, sub-delims; '%' is checked apart), 2 only in an IP literal. */
static const uint8_t host_tab[256] = {
    ['-'] = 1, ['.'] = 1, ['_'] = 1, ['~'] = 1, ['!'] = 1, ['$'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1,
    [')'] = 1, ['*'] = 1, ['+'] = 1, [','] = 1, [';'] = 1, ['='] = 1, [':'] = 2,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

static int host_char(char ch, int literal) { return (host_tab[(unsigned char)ch] & (literal ? 3 : 1)) != 0; }

static int is_hex(char ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); }

static int valid_host(const char *v, size_t n) {
  size_t i = 0;
  if (n > 0 && v[0] == '[') {
    for (i = 1; i < n && v[i] != ']'; i++)
      if (!host_char(v[i], 1)) return 0;
    if (i == n || i == 1) return 0;
    i++;
  } else {
    for (; i < n; i++) {
      if (host_tab[(unsigned char)v[i]] == 1) continue; /* the common case first: a reg-name character */
      if (v[i] == ':') break;
      if (v[i] != '%' || i + 2 >= n || !is_hex(v[i + 1]) || !is_hex(v[i + 2])) return 0;
      i += 2;
    }
  }
  if (i < n && v[i++] != ':') return 0;
  for (; i < n; i++)
    if (!is_digit(v[i])) return 0;
  return 1;
}

static int host_ok(const h1_t *h) {
  if (h->host_count > 1) return 0;
  const cb__hdr_t *host = header_at(h, h->host_idx);
  if (host == NULL) return h->http10;
  cb__h1_worker_t *hw = memos(h->c->w);
  size_t n = host->value_len;
  if (n == hw->host_len && n > 0 && cb__same_bytes(host->value, hw->host, n)) return 1; /* as last time */
  if (!valid_host(host->value, n)) return 0;
  if (n <= sizeof hw->host) {
    memcpy(hw->host, host->value, n);
    hw->host_len = (uint8_t)n;
  }
  return 1;
}

/* Whether a token list (a header value) holds `token`, compared without case. */
static int has_token(const cb__hdr_t *hd, const char *token) {
  size_t tl = strlen(token);
  const char *p = hd->value, *end = hd->value + hd->value_len;
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) p++;
    const char *t = p;
    while (p < end && *p != ',' && *p != ' ' && *p != '\t') p++;
    if (lower_eq(t, (size_t)(p - t), token) && tl == (size_t)(p - t)) return 1;
  }
  return 0;
}

/* Upgrade: h2c is taken for a bodiless HTTP/1.1 request with a valid HTTP2-Settings, when HTTP/2 is on, also
 * when it was pipelined behind other requests (held input: it is taken once they are answered, h1_after).
 * Anything else is served as HTTP/1.1. */
/* Over TLS the upgrade is ignored and the request answered over HTTP/1.1: h2c is HTTP/2 over cleartext TCP, and
 * over TLS HTTP/2 is chosen by ALPN (RFC 9113 3.2 and 3.3). */
static int wants_h2c(h1_t *h, int has_body) {
  if (has_body || h->http10 || !h->c->w->cfg->enable_h2 || h->c->tr.tls) return 0;
  const cb__hdr_t *up = header_at(h, h->upgrade_idx);
  const cb__hdr_t *st = header_at(h, h->settings_idx);
  return up && st && has_token(up, "h2c") && cb__h2_settings_valid(st->value, st->value_len);
}

/* llhttp sets `upgrade` for a request with an Upgrade field that `connection` names, and for every CONNECT: both
 * end the message at the head, whatever it declared, and leave the bytes after it to the caller (RFC 9110 9.3.6:
 * a CONNECT's content has no defined meaning; after a 2xx they are the tunnel's). The engine tunnels nothing, so
 * a CONNECT is answered as the routes say and the connection closes after the answer: read on, the body of a
 * CONNECT with a content-length or a chunked one was taken for the next request (smuggled past whatever framed
 * it as a body). Its body is not read, so no 100 Continue is sent for it (its expect field is forgotten). Returns
 * whether the request upgrades to h2c. Off the usual path: a request without either never calls it. */
static __attribute__((noinline)) int upgrade_asked(h1_t *h, int has_body) {
  if (h->req.method == CB_METHOD_CONNECT) {
    h->keep_alive = 0;
    h->expect_idx = -1;
    return 0;
  }
  return wants_h2c(h, has_body);
}

/* The methods on_method_complete lets through (known_method): their bit and name. */
#define METHOD(m, bit) [HTTP_##m] = {bit, sizeof #m - 1, #m}
static const struct {
  uint16_t bit;
  uint8_t len;
  const char *name;
} methods[HTTP_PATCH + 1] = {
    METHOD(GET, CB_METHOD_GET),     METHOD(HEAD, CB_METHOD_HEAD),       METHOD(POST, CB_METHOD_POST),
    METHOD(PUT, CB_METHOD_PUT),     METHOD(DELETE, CB_METHOD_DELETE),   METHOD(PATCH, CB_METHOD_PATCH),
    METHOD(OPTIONS, CB_METHOD_OPTIONS), METHOD(CONNECT, CB_METHOD_CONNECT), METHOD(TRACE, CB_METHOD_TRACE),
};
#undef METHOD

/* The head is complete: the request's path and headers point at it (into the bytes parsed, or into `head`,
 * which stops moving here: offsets become pointers). */
static void head_complete(h1_t *h) {
  cb__req_t *r = &h->req;
  r->headers = h->hdrs;
  if (h->direct) {
    r->path = h->url;
    return;
  }
  for (int i = 0; i < h->nhdrs; i++) {
    h->hdrs[i].name = h->head + (uintptr_t)h->hdrs[i].name;
    h->hdrs[i].value = h->head + (uintptr_t)h->hdrs[i].value;
  }
  r->path = h->head;
}

/* llhttp_should_keep_alive() for a request, without the call: HTTP/1.1 unless `Connection: close`, HTTP/1.0 with
 * `Connection: keep-alive` (a request never needs the connection's end to end its body: llhttp_message_needs_eof
 * is 0 for requests). An HTTP/1.0 request with Transfer-Encoding is served but not kept: RFC 9112 6.1 says to
 * treat its framing as faulty and to close the connection after processing it (HTTP/1.0 has no chunked
 * coding, so an intermediary may have framed it otherwise: what follows cannot be trusted). */
static int request_keeps_alive(const llhttp_t *p) {
  return p->http_major > 0 && p->http_minor > 0
             ? !(p->flags & F_CONNECTION_CLOSE)
             : (p->flags & (F_CONNECTION_KEEP_ALIVE | F_TRANSFER_ENCODING)) == F_CONNECTION_KEEP_ALIVE;
}

static int on_headers_complete(llhttp_t *p) {
  h1_t *h = H(p);
  cb__conn_t *c = h->c;
  const cb_config_t *cfg = c->w->cfg;
  cb__req_t *r = &h->req;
  h->in_head = 0;
  head_complete(h);
  if (h->nhdrs > 0) trim_value(h->hdrs[h->nhdrs - 1].value, &h->hdrs[h->nhdrs - 1]); /* pointers now */
  r->path_len = path_length(r->path, h->url_len);
  r->target_len = h->url_len;
  r->nheaders = h->nhdrs;
  uint8_t m = llhttp_get_method(p);
  if (m < sizeof methods / sizeof methods[0] && methods[m].bit != 0) {
    r->method = methods[m].bit;
    r->method_str = methods[m].name;
    r->method_len = methods[m].len;
  } else { /* not reached: on_method_complete refused it */
    r->method = 0;
    r->method_str = llhttp_method_name(m);
    r->method_len = strlen(r->method_str);
  }
  h->http10 = p->http_major == 1 && p->http_minor == 0;
  if (!host_ok(h)) return -1; /* 400 */
  h->keep_alive = request_keeps_alive(p) && !h->stopping;
  h->head_only = r->method == CB_METHOD_HEAD;
  /* A transfer-encoding field that llhttp did not read as chunked is one whose codings are empty: llhttp refuses
   * every other coding list that does not end with chunked, but sets none of its flags for an empty value, and
   * would frame the request by its content-length or as bodiless. RFC 9112 6.3: such a request MUST get 400. */
  if (h->te_idx >= 0 && !(p->flags & F_CHUNKED)) return -1;
  int has_body = 0;
  if (p->flags & F_CHUNKED) {
    has_body = 1;
  } else if (p->flags & F_CONTENT_LENGTH) {
    r->content_length = (int64_t)p->content_length;
    if (p->content_length > cfg->max_body_bytes) {
      h->err_status = 413;
      return -1;
    }
    has_body = p->content_length > 0;
  }
  if (p->upgrade && upgrade_asked(h, has_body)) {
    /* Answered over HTTP/2 once the request is complete (see parse()); not dispatched here. */
    h->upgrade_h2c = 1;
    return 0;
  }
  const cb__hdr_t *expect = header_at(h, h->expect_idx);
  if (expect && has_body && !h->http10 && lower_eq(expect->value, expect->value_len, "100-continue")) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    cb__outq_copy(&c->out, cont, sizeof cont - 1);
  }
  h->requests++;
  CB__STAT_INC(c->w, requests_by_proto[c->proto_id]); /* http1 or h1_tls */
  cb__req_dispatch(r);
  return 0;
}

/* ---- chunk extensions ----
 * `;name` or `;name=value` after a chunk size (RFC 9112 7.1.1), the value a token or a quoted string. No
 * route uses them, but they cost time and memory to read: all the extensions of a request together may take
 * max_header_bytes, counted like a head (name, value, and 2 bytes for ';' and '='); over it: 413, as Node
 * answers since CVE-2024-22019. llhttp checks the characters; an empty name or value is a 400 here. */
static int count_ext(h1_t *h, size_t n) {
  h->ext_bytes += n;
  if (h->ext_bytes > h->c->w->cfg->max_header_bytes) {
    h->err_status = 413;
    return -1;
  }
  return 0;
}

static int on_ext_name(llhttp_t *p, const char *at, size_t n) {
  (void)at;
  H(p)->ext_len += n;
  return count_ext(H(p), n);
}

static int on_ext_name_complete(llhttp_t *p) {
  h1_t *h = H(p);
  if (h->ext_len == 0) return -1;
  h->ext_len = 0;
  return count_ext(h, 2); /* ';' and '=' */
}

static int on_ext_value(llhttp_t *p, const char *at, size_t n) {
  h1_t *h = H(p);
  if (h->ext_len == 0 && n > 0) h->ext_quoted = at[0] == '"';
  h->ext_len += n;
  return count_ext(h, n);
}

/* Whether llhttp loses its way after a token value ended by ';' (`5;a=b;c=d`: 400 in llhttp 8.1, which
 * takes the ';' and then expects the end of the line). Probed once, so that a fixed llhttp is used as is. */
static int ext_semicolon_bug;
static uv_once_t ext_probe_once = UV_ONCE_INIT;

static void probe_ext_semicolon(void) {
  static const char req[] = "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n1;a=b;c=d\r\nx\r\n0\r\n\r\n";
  llhttp_settings_t none;
  llhttp_t probe;
  llhttp_settings_init(&none);
  llhttp_init(&probe, HTTP_REQUEST, &none);
  ext_semicolon_bug = llhttp_execute(&probe, req, sizeof req - 1) != HPE_OK;
}

static int on_ext_value_complete(llhttp_t *p) {
  h1_t *h = H(p);
  if (h->ext_len == 0) return -1;
  h->ext_len = 0;
  if (!ext_semicolon_bug || h->ext_quoted) return 0;
  /* Pause here: parse() looks at the byte that ended the value and, for a ';', gives it to llhttp again. */
  h->ext_resume = 1;
  return HPE_PAUSED;
}

/* A chunk's size is known (its line is complete): one that takes the body over the limit gets its 413 now, as
 * a Content-Length over it does, rather than once the limit's worth of bytes has arrived. */
static int on_chunk_header(llhttp_t *p) {
  h1_t *h = H(p);
  if (p->content_length > h->c->w->cfg->max_body_bytes - h->req.body_received) {
    h->err_status = 413;
    return -1;
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  h1_t *h = H(p);
  cb__req_t *r = &h->req;
  r->body_received += n;
  if (r->body_received > h->c->w->cfg->max_body_bytes) {
    h->err_status = 413;
    return -1;
  }
  if (r->jseq) cb__journal_body(r, at, n);
  if (r->handler && r->handler->on_body) r->handler->on_body(r, at, n);
  return 0;
}

static void finish_request(h1_t *h) {
  cb__req_release(&h->req);
  h->req.res_state = CB__RES_NONE;
  h->in_msg = 0;
  if (!h->keep_alive) {
    h->dead = 1; /* anything after this request is not read */
    cb__conn_close_linger(h->c);
  }
}

static int on_message_complete(llhttp_t *p) {
  h1_t *h = H(p);
  cb__req_t *r = &h->req;
  r->req_done = 1;
  if (h->upgrade_h2c) return 0; /* llhttp pauses with HPE_PAUSED_UPGRADE: parse() switches protocols */
  /* GET /ws with a valid handshake, pipelined or not (as h2c's): the same pause, then ws.c. */
  if (r->handler == &cb__h_ws && h->parser.upgrade && !h->http10 && !h->stopping &&
      cb__ws_check(r) == 0) {
    h->upgrade_ws = 1;
    return 0;
  }
  if (r->handler) r->handler->on_end(r);
  if (r->res_state == CB__RES_ENDED) {
    finish_request(h);
    return h->dead ? HPE_PAUSED : 0;
  }
  h->waiting = 1; /* answered later: hold the rest of the input */
  return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_method_complete = on_method_complete,
    .on_version = on_version,
    .on_version_complete = on_version_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_chunk_header = on_chunk_header,
    .on_message_complete = on_message_complete,
    .on_chunk_extension_name = on_ext_name,
    .on_chunk_extension_name_complete = on_ext_name_complete,
    .on_chunk_extension_value = on_ext_value,
    .on_chunk_extension_value_complete = on_ext_value_complete,
};

/* ---- responses ---- */

static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}
#define PUTS(p, lit) put(p, lit, sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0) *p++ = tmp[--n];
  return p;
}

/* The connection header a head ends with. */
enum { CONN_NONE, CONN_CLOSE, CONN_KEEP_ALIVE };

/* Formats a head into o (room for head_room() bytes); returns its end. */
static char *format_head(char *o, const cb__worker_t *w, int status, const char *ctype, size_t ctype_len,
                         const cb__hdr_t *extra, int nextra, int64_t content_length, int chunked, int conn_hdr) {
  const char *reason = cb__reason(status);
  o = PUTS(o, "HTTP/1.1 ");
  *o++ = (char)('0' + status / 100);
  *o++ = (char)('0' + status / 10 % 10);
  *o++ = (char)('0' + status % 10);
  *o++ = ' ';
  o = put(o, reason, strlen(reason));
  o = PUTS(o, "\r\n");
  o = put(o, w->date_line, w->date_len);
  if (ctype) {
    o = PUTS(o, "content-type: ");
    o = put(o, ctype, ctype_len);
    o = PUTS(o, "\r\n");
  }
  for (int i = 0; i < nextra; i++) {
    o = put(o, extra[i].name, extra[i].name_len);
    o = PUTS(o, ": ");
    o = put(o, extra[i].value, extra[i].value_len);
    o = PUTS(o, "\r\n");
  }
  if (content_length >= 0) {
    o = PUTS(o, "content-length: ");
    o = put_u64(o, (uint64_t)content_length);
    o = PUTS(o, "\r\n");
  } else if (chunked) {
    o = PUTS(o, "transfer-encoding: chunked\r\n");
  }
  if (conn_hdr == CONN_CLOSE)
    o = PUTS(o, "connection: close\r\n");
  else if (conn_hdr == CONN_KEEP_ALIVE)
    o = PUTS(o, "connection: keep-alive\r\n");
  return PUTS(o, "\r\n");
}

static cb__h1_memo_t *memo_slot(cb__worker_t *w, int status, const char *ctype, int64_t content_length,
                                uint64_t key) {
  uintptr_t k = (uintptr_t)ctype >> 3 ^ (uintptr_t)status ^ (uintptr_t)content_length ^ (uintptr_t)key * 3;
  return &memos(w)->heads[(k ^ k >> 7) & (CB__H1_MEMOS - 1)];
}

/* Formats a head into the output queue, and into the memo m when there is one. 0, or -1 (out of memory). */
static __attribute__((noinline)) int new_head(cb__conn_t *c, cb__h1_memo_t *m, uint64_t key, int status,
                                              const char *ctype, const cb__hdr_t *extra, int nextra,
                                              int64_t content_length, int chunked, int conn_hdr) {
  cb__worker_t *w = c->w;
  size_t ctype_len = ctype ? strlen(ctype) : 0;
  size_t need = 64 + 40 + w->date_len + ctype_len + 64; /* the longest reason phrase is 31 bytes */
  for (int i = 0; i < nextra; i++) need += extra[i].name_len + extra[i].value_len + 4;
  char *start = cb__outq_reserve(&c->out, need);
  if (start == NULL) return -1;
  char *o = format_head(start, w, status, ctype, ctype_len, extra, nextra, content_length, chunked, conn_hdr);
  size_t len = (size_t)(o - start);
  cb__outq_commit(&c->out, len);
  if (m != NULL && len <= sizeof m->bytes) {
    m->status = (int16_t)status;
    m->ctype = ctype;
    m->key = key;
    m->content_length = content_length;
    m->conn_hdr = (uint8_t)conn_hdr;
    m->chunked = (uint8_t)chunked;
    m->len = (uint8_t)len;
    m->date_gen = w->date_gen;
    memcpy(m->bytes, start, len);
  }
  return 0;
}

static void h1_head(cb__req_t *r, int status, const char *ctype, const cb__hdr_t *extra, int nextra,
                    int64_t content_length) {
  h1_t *h = r->stream;
  cb__conn_t *c = h->c;
  cb__worker_t *w = c->w;
  int chunked = content_length == CB__STREAMED && !h->http10;
  /* HTTP/1.0 has no chunked coding: a body of unknown length ends with the connection. */
  int keep_alive = h->keep_alive && !h->stopping && !(content_length == CB__STREAMED && h->http10);
  int conn_hdr = !keep_alive ? CONN_CLOSE : h->http10 ? CONN_KEEP_ALIVE : CONN_NONE;
  /* Heads without extra headers (the fixture answers) and heads whose extra headers are fixed (a stub's) come
   * from the memo while the Date line is the same. */
  uint64_t key = nextra == 0 ? 0 : r->head_key;
  cb__h1_memo_t *m = NULL;
  if (nextra == 0 || key != 0) {
    m = memo_slot(w, status, ctype, content_length, key);
    if (m->status == status && m->ctype == ctype && m->key == key && m->content_length == content_length &&
        m->conn_hdr == conn_hdr && m->chunked == chunked && m->date_gen == w->date_gen) {
      if (cb__outq_copy(&c->out, m->bytes, m->len) != 0) return;
    } else if (new_head(c, m, key, status, ctype, extra, nextra, content_length, chunked, conn_hdr) != 0) {
      return;
    }
  } else if (new_head(c, NULL, 0, status, ctype, extra, nextra, content_length, chunked, conn_hdr) != 0) {
    return;
  }
  h->chunked_res = (uint8_t)chunked;
  h->keep_alive = (uint8_t)keep_alive;
  r->res_state = CB__RES_HEAD;
}

static int over_high_water(const cb__conn_t *c) { return c->out.bytes >= CB__OUT_HIGH_WATER; }

/* Frees a buffer handed over with CB__DATA_FREE or CB__DATA_HELD. */
static void drop_data(cb__conn_t *c, const char *p, size_t n, int flags) {
  if (flags != CB__DATA_FREE && flags != CB__DATA_HELD) return;
  free((void *)p);
  if (flags == CB__DATA_HELD) cb__echo_release(c, n);
}

/* "SIZE\r\n" of a chunk of n bytes, in lowercase hex. */
static int chunk_size_line(cb__conn_t *c, size_t n) {
  static const char hex[] = "0123456789abcdef";
  char *o = cb__outq_reserve(&c->out, 20);
  if (o == NULL) return -1;
  char tmp[16];
  int k = 0;
  do tmp[k++] = hex[n & 15];
  while ((n >>= 4) != 0);
  char *s = o;
  while (k > 0) *o++ = tmp[--k];
  o = PUTS(o, "\r\n");
  cb__outq_commit(&c->out, (size_t)(o - s));
  return 0;
}

static int data_piece(h1_t *h, const char *p, size_t n, int flags);

static int h1_data(cb__req_t *r, const char *p, size_t n, int flags) {
  h1_t *h = r->stream;
  flags &= CB__DATA_OWNERSHIP; /* chunks are pieces already */
  /* The usual piece (a fixed body): a few static or passed bytes, copied after the head. */
  if ((flags == CB__DATA_STATIC || flags == CB__DATA_COPY) && n - 1 < CB__COPY_MAX && !h->head_only &&
      !h->chunked_res) {
    cb__outq_copy(&h->c->out, p, n);
    return over_high_water(h->c);
  }
  return data_piece(h, p, n, flags);
}

/* Any piece: dropped (HEAD, empty), chunked, copied or referenced, its buffer freed or kept. */
static __attribute__((noinline)) int data_piece(h1_t *h, const char *p, size_t n, int flags) {
  cb__conn_t *c = h->c;
  if (h->head_only || n == 0) {
    drop_data(c, p, n, flags);
    return 0;
  }
  if (h->chunked_res && chunk_size_line(c, n) != 0) return 1;
  if (flags == CB__DATA_COPY || n <= CB__COPY_MAX) {
    cb__outq_copy(&c->out, p, n);
    drop_data(c, p, n, flags);
  } else if (flags == CB__DATA_HELD) {
    cb__outq_ref_range(&c->out, p, 0, n, 1, n); /* the budget comes back when the buffer is freed */
  } else {
    cb__outq_ref(&c->out, p, n, flags == CB__DATA_FREE);
  }
  if (h->chunked_res) cb__outq_copy(&c->out, "\r\n", 2);
  return over_high_water(c);
}

static int h1_file(cb__req_t *r, int fd, const char *map, uint64_t off, size_t n) {
  h1_t *h = r->stream;
  cb__conn_t *c = h->c;
  if (h->head_only || n == 0) return 0;
  if (h->chunked_res && chunk_size_line(c, n) != 0) return 1; /* a piece of a streamed body: one chunk */
  /* Small files leave from their mapping in the same writev as the head: one system call, where sendfile
   * would add one (file_tiny: 9.8 instead of 14.9 us of server CPU per request). Past that, sendfile spares
   * the copy into the socket (file_small: 24 instead of 41 us). */
  if (map != NULL && n <= CB__FILE_INLINE_MAX)
    cb__outq_ref(&c->out, map + off, n, 0);
  else
    cb__outq_file(&c->out, fd, off, n);
  if (h->chunked_res) cb__outq_copy(&c->out, "\r\n", 2);
  return over_high_water(c);
}

static void h1_end(cb__req_t *r);

/* The last chunk, then the trailer fields and the empty line, for a chunked body; otherwise they are dropped. */
static void h1_end_trailers(cb__req_t *r, const cb__hdr_t *t, int n) {
  h1_t *h = r->stream;
  if (h->chunked_res && !h->head_only && n > 0) {
    cb__outq_t *q = &h->c->out;
    cb__outq_copy(q, "0\r\n", 3);
    for (int i = 0; i < n; i++) {
      cb__outq_copy(q, t[i].name, t[i].name_len);
      cb__outq_copy(q, ": ", 2);
      cb__outq_copy(q, t[i].value, t[i].value_len);
      cb__outq_copy(q, "\r\n", 2);
    }
    cb__outq_copy(q, "\r\n", 2);
    h->chunked_res = 0; /* the last chunk is written: h1_end adds none */
  }
  h1_end(r);
}

static void h1_end(cb__req_t *r) {
  h1_t *h = r->stream;
  if (h->chunked_res && !h->head_only) cb__outq_copy(&h->c->out, "0\r\n\r\n", 5);
  r->res_state = CB__RES_ENDED;
  if (r->req_done && h->waiting) {
    /* The response to a paused request ended (from a timer or a generator): resume after this event. */
    h->waiting = 0;
    finish_request(h);
    h->resume = 1;
  }
}

/* ---- whole fixed responses (cb__res_fixed) ----
 * A description that stays the same (memo_id) is sent from the worker's memo of whole responses: head and body
 * in one copy. The memo is made again when the Date line or the connection header changes. HEAD, a stopping
 * connection, a paused request (its end resumes parsing, h1_end) and a description made on the spot take the
 * head, data and end steps. */

/* The slot of a description: its address hashed (Fibonacci hashing), so that descriptions next to each other (the
 * fixtures') get different slots. CB__H1_WHOLES is a power of two. */
static cb__h1_whole_t *whole_slot(cb__worker_t *w, const cb__fixed_t *f) {
  return &memos(w)->wholes[(uint64_t)(uintptr_t)f * 0x9e3779b97f4a7c15ull >> 40 & (CB__H1_WHOLES - 1)];
}

/* What a whole response depends on besides its description: the Date line, and what makes its connection header
 * (h1_head's conn_hdr: keep_alive, which stays as it is on a connection that is not stopping, and http10). */
static uint64_t whole_tag(const cb__worker_t *w, const h1_t *h) {
  return (uint64_t)w->date_gen << 16 | (uint64_t)h->keep_alive << 8 | (uint64_t)h->http10;
}

/* Formats f's head and body into m, as h1_head and h1_data would queue them on h; -1, with m unchanged, when they
 * would not fit. */
static __attribute__((noinline)) int whole_make(const cb__worker_t *w, const h1_t *h, cb__h1_whole_t *m,
                                                const cb__fixed_t *f) {
  size_t ctype_len = f->ctype ? strlen(f->ctype) : 0;
  size_t need = 64 + 40 + w->date_len + ctype_len + 64 + f->len; /* as new_head's, and the body */
  for (int i = 0; i < f->nextra; i++) need += f->extra[i].name_len + f->extra[i].value_len + 4;
  if (need > sizeof m->bytes) return -1;
  int conn_hdr = !h->keep_alive ? CONN_CLOSE : h->http10 ? CONN_KEEP_ALIVE : CONN_NONE;
  char *o = format_head(m->bytes, w, f->status, f->ctype, ctype_len, f->extra, f->nextra, (int64_t)f->len, 0,
                        conn_hdr);
  o = put(o, f->body, f->len);
  m->src = (uintptr_t)f;
  m->memo_id = f->memo_id;
  m->tag = whole_tag(w, h);
  m->len = (uint16_t)(o - m->bytes);
  return 0;
}

/* Whether the memo's way applies: the whole response is what h1_head, h1_data and h1_end would make of f (not
 * HEAD; the connection not stopping, so keep_alive stays; no paused request to resume at the end). h1_fixed
 * leaves out the memo_id test: a slot's memo_id is never 0. */
static int whole_ok(const h1_t *h, const cb__fixed_t *f) {
  return f->memo_id != 0 && !h->head_only && !h->stopping && !h->waiting;
}

/* Queues m's bytes: the response is over, as after h1_head, h1_data and h1_end (whole_ok). */
static void whole_send(h1_t *h, cb__req_t *r, const cb__h1_whole_t *m) {
  h->chunked_res = 0;
  r->res_state = CB__RES_ENDED;
  cb__outq_copy(&h->c->out, m->bytes, m->len);
}

/* A whole response not in the memo: made into it, or, when it cannot be, sent in the three steps. */
static __attribute__((noinline)) void fixed_miss(cb__req_t *r, const cb__fixed_t *f) {
  h1_t *h = r->stream;
  if (whole_ok(h, f)) {
    cb__worker_t *w = h->c->w;
    cb__h1_whole_t *m = whole_slot(w, f);
    if (whole_make(w, h, m, f) == 0) {
      whole_send(h, r, m);
      return;
    }
  }
  h1_head(r, f->status, f->ctype, f->extra, f->nextra, (int64_t)f->len);
  h1_data(r, f->body, f->len, f->flags);
  h1_end(r);
}

static void h1_fixed(cb__req_t *r, const cb__fixed_t *f) {
  h1_t *h = r->stream;
  if (!h->head_only && !h->stopping && !h->waiting) { /* whole_ok */
    cb__worker_t *w = h->c->w;
    const cb__h1_whole_t *m = whole_slot(w, f);
    if (m->src == (uintptr_t)f && m->memo_id == f->memo_id && m->tag == whole_tag(w, h)) {
      whole_send(h, r, m);
      return;
    }
  }
  fixed_miss(r, f);
}

/* An answer that cannot end well: HTTP/1.1 has no way to end one request alone, so the connection closes. */
static void h1_abort(cb__req_t *r, uint32_t code) {
  (void)code;
  cb__conn_close(r->conn);
}

/* Bytes outside the framing: what most HTTP/1.1 faults are made of (kinds/fault.c). */
static void h1_raw(cb__req_t *r, const char *p, size_t n) { cb__outq_copy(&r->conn->out, p, n); }

/* An HTTP/1.0 request: its answer cannot be chunked (the trailers fault asks). */
static int h1_http10(const cb__req_t *r) { return ((const h1_t *)r->stream)->http10; }

static const cb__proto_faults_t h1_faults = {.raw = h1_raw, .http10 = h1_http10};

/* One answer at a time leaves a connection: its output queue is that answer's (and the ends of those before it). */
static size_t h1_queued(const cb__req_t *r) { return r->conn->out.bytes; }

static const cb__proto_t h1_proto = {.head = h1_head, .data = h1_data, .file = h1_file, .end = h1_end, .end_trailers = h1_end_trailers,
                                     .fixed = h1_fixed, .abort = h1_abort, .faults = &h1_faults,
                                     .queued = h1_queued};

/* ---- errors ---- */

static void send_error(h1_t *h, int status) {
  cb__conn_t *c = h->c;
  cb__worker_t *w = c->w;
  switch (status) {
    case 400: CB__STAT_INC(w, status_400); break;
    case 413: CB__STAT_INC(w, status_413); break;
    case 431: CB__STAT_INC(w, status_431); break;
    default: break;
  }
  h->dead = 1;
  cb__req_t *r = &h->req;
  /* The request has been answered, or its answer has begun (a streamed echo, or trailers over their limit
   * after the response): no second status; close after what is queued. */
  int started = h->in_msg && r->res_state != CB__RES_NONE;
  if (!started && r->status == 0) r->status = status; /* what the journal records */
  if (r->handler) cb__req_release(r);
  if (started) {
    cb__conn_close_linger(c);
    return;
  }
  const char *reason = cb__reason(status);
  char *start = cb__outq_reserve(&c->out, 128 + w->date_len);
  if (start != NULL) {
    char *o = PUTS(start, "HTTP/1.1 ");
    o = put_u64(o, (uint64_t)status);
    *o++ = ' ';
    o = put(o, reason, strlen(reason));
    o = PUTS(o, "\r\n");
    o = put(o, w->date_line, w->date_len);
    o = PUTS(o, "content-length: 0\r\nconnection: close\r\n\r\n");
    cb__outq_commit(&c->out, (size_t)(o - start));
  }
  cb__conn_close_linger(c);
}

/* ---- input ---- */

static int hold(h1_t *h, const char *p, size_t n) {
  /* The bytes being parsed are about to move (held input) or go (the read buffer): a request that lives on
   * keeps its head. */
  if (pin_if_needed(h) != 0) return -1;
  if (n == 0) return 0;
  if (h->pending == NULL && n <= CB__BLOCK_4K) {
    h->pending = cb__cache_get(&h->c->w->caches.b4k);
    if (h->pending == NULL) return -1;
    h->pending_cap = CB__BLOCK_4K;
  }
  if (h->pending_len + n > h->pending_cap) {
    size_t cap = h->pending_cap ? h->pending_cap : CB__BLOCK_4K;
    while (cap < h->pending_len + n) cap *= 2;
    char *b = realloc(h->pending, cap);
    if (b == NULL) return -1;
    h->pending = b;
    h->pending_cap = cap;
  }
  memmove(h->pending + h->pending_len, p, n);
  h->pending_len += n;
  if (h->pending_len >= PENDING_MAX) h->c->read_paused = 1;
  return 0;
}

static void h1_free(h1_t *h);
static h1_t *h1_wake(cb__conn_t *c);
static void h1_rest(cb__conn_t *c);

/* Switches the connection to HTTP/2: 101, then the request becomes stream 1 and the bytes after it (the
 * client preface and frames) go to the HTTP/2 side. The rest may lie in `pending` (a request pipelined behind
 * one answered later): it is handed over before the state that holds it is given back. */
static int upgrade(h1_t *h, const char *rest, const char *end) {
  cb__conn_t *c = h->c;
  const cb__hdr_t *st = header_at(h, h->settings_idx);
  /* cb__h2_upgrade writes the 101 itself, before its first frame. */
  if (cb__h2_upgrade(c, &h->req, st->value, st->value_len) != 0) return -1;
  /* c->proto_state and c->ops are HTTP/2's now */
  int rc = rest < end ? c->ops->read(c, rest, (size_t)(end - rest)) : 0;
  h1_free(h);
  return rc;
}

/* Switches the connection to WebSocket (ws.c): the 101, then the bytes after the request are frames. */
static int upgrade_ws(h1_t *h, const char *rest, const char *end) {
  cb__conn_t *c = h->c;
  if (cb__ws_upgrade(c, &h->req) != 0) return -1;
  /* c->proto_state and c->ops are ws.c's now; the rest may lie in `pending` (see upgrade) */
  int rc = rest < end ? c->ops->read(c, rest, (size_t)(end - rest)) : 0;
  h1_free(h);
  return rc;
}

/* Decides on a request line whose method llhttp refused, from the bytes held since (`pending`): 501 for a
 * well-formed line, 400 otherwise, or wait for more (the header timeout still runs). */
static void decide_unknown_method(h1_t *h) {
  int r = unknown_method_line(h->pending, h->pending + h->pending_len);
  if (r < 0 && (h->pending_len > h->c->w->cfg->max_header_bytes || h->pending_len >= PENDING_MAX))
    send_error(h, 431);
  else if (r >= 0)
    send_error(h, r ? 501 : 400);
}

/* llhttp stopped at `pos`, the first byte that no method it knows continues. What it took before is a prefix
 * of a known method (capitals and '-'); the bytes from pos on tell the rest. */
static int unknown_method(h1_t *h, const char *pos, const char *start, const char *end) {
  char before = pos > start ? pos[-1] : h->last_byte;
  int taken = (before >= 'A' && before <= 'Z') || before == '-';
  if (!taken && (pos == end || !cb_ctoken[(unsigned char)*pos])) { /* an empty method */
    send_error(h, 400);
    return 0;
  }
  h->unknown_method = 1;
  h->pending_len = 0;
  if (hold(h, pos, (size_t)(end - pos)) != 0) return -1;
  decide_unknown_method(h);
  return 0;
}

/* llhttp over data[0..end): the error code it stopped with. */
static llhttp_errno_t run(h1_t *h, const char *data, const char *end) {
  h->exec_end = end;
  llhttp_errno_t e = llhttp_execute(&h->parser, data, (size_t)(end - data));
  h->last_byte = end[-1];
  return e;
}

/* llhttp stopped with e (not HPE_OK) in data[0..end), start being the read's first byte: a pause, an upgrade or
 * an error. Goes on where that says to: a loop, not recursion, as a read can hold thousands of pauses
 * (extensions, upgrade requests). */
static __attribute__((noinline)) int parse_stopped(h1_t *h, const char *start, const char *data, const char *end,
                                                   llhttp_errno_t e) {
  for (;; e = run(h, data, end)) {
    if (e == HPE_OK) return pin_if_needed(h);
    const char *pos = llhttp_get_error_pos(&h->parser);
    if (e == HPE_PAUSED && h->ext_resume) {
      /* After a token extension value ended by ';' (see on_ext_value_complete), llhttp 8.1 has consumed the
       * ';' but waits for the end of the size line: hand it the ';' again, then the rest. */
      h->ext_resume = 0;
      llhttp_resume(&h->parser);
      if (pos > data && pos[-1] == ';' && (e = llhttp_execute(&h->parser, ";", 1)) != HPE_OK) {
        send_error(h, 400);
        return 0;
      }
      data = pos;
      continue;
    }
    if (e == HPE_PAUSED) {
      if (h->dead) return pin_if_needed(h);
      return hold(h, pos, (size_t)(end - pos));
    }
    if (e == HPE_PAUSED_UPGRADE && h->upgrade_h2c) return upgrade(h, pos, end);
    if (e == HPE_PAUSED_UPGRADE && h->upgrade_ws) return upgrade_ws(h, pos, end);
    if (e == HPE_PAUSED_UPGRADE) {
      /* Upgrade requests are served as plain HTTP/1.1 (h2c upgrades are taken in on_message_complete). */
      llhttp_resume_after_upgrade(&h->parser);
      if (h->dead) return pin_if_needed(h);
      if (h->waiting) return hold(h, pos, (size_t)(end - pos));
      data = pos;
      continue;
    }
    if (e == HPE_INVALID_METHOD && !h->err_status) return unknown_method(h, pos, start, end);
    if (e == HPE_INVALID_VERSION && !h->err_status && unknown_version(h)) h->err_status = 505;
    send_error(h, h->err_status ? h->err_status : 400);
    return 0;
  }
}

static int parse(h1_t *h, const char *data, size_t len) {
  if (len == 0) return 0;
  if (h->url_at_end) { /* the target reached the end of the last read (on_url) */
    h->url_at_end = 0;
    if (h->in_head && (data[0] == '\r' || data[0] == '\n')) {
      send_error(h, 400);
      return 0;
    }
  }
  llhttp_errno_t e = run(h, data, data + len);
  return e == HPE_OK ? pin_if_needed(h) : parse_stopped(h, data, data, data + len, e);
}

static int h1_read(cb__conn_t *c, const char *data, size_t len) {
  h1_t *h = c->proto_state;
  if (h == NULL && (h = h1_wake(c)) == NULL) return -1;
  if (h->dead) return 0;
  if (h->unknown_method) { /* the request line of an unknown method goes on */
    if (hold(h, data, len) != 0) return -1;
    decide_unknown_method(h);
    return 0;
  }
  if (h->waiting || h->pending_len > 0) return hold(h, data, len);
  return parse(h, data, len);
}

/* Whether h1_destroy counts the request in flight as a reset: it has a handler whose answer is not over (a fault
 * ends its answers on purpose). Whoever else sees a request cut short counts it only when this does not. */
static int reset_at_destroy(const h1_t *h) {
  return h->req.handler != NULL && h->req.res_state != CB__RES_ENDED && !h->req.fault;
}

static void h1_after(cb__conn_t *c) {
  h1_t *h = c->proto_state;
  if (h == NULL) { /* at rest: nothing is in flight */
    c->read_paused = 0;
    if (c->eof && !c->closing) cb__conn_close_linger(c);
    return;
  }
  while (h->resume && !h->dead && !c->closing) {
    h->resume = 0;
    llhttp_resume(&h->parser);
    /* Parse the held input from the start of the buffer; what pauses again is moved back to the front. */
    size_t len = h->pending_len;
    h->pending_len = 0;
    int rc = len > 0 ? parse(h, h->pending, len) : 0;
    if (c->proto_state != h) {
      /* A held request upgraded the connection (h2c or WebSocket): h is gone, and the new protocol takes the
       * step. Reading was paused for h's held input, not for the new protocol; an EOF that came while the
       * input was held was told to HTTP/1.1 only. */
      c->read_paused = 0;
      if (rc != 0) {
        cb__conn_close(c);
        return;
      }
      if (c->eof) c->ops->eof(c);
      c->ops->after(c);
      return;
    }
    if (rc != 0) {
      cb__conn_close(c);
      return;
    }
  }
  if (h->pending_len < PENDING_MAX) c->read_paused = 0;
  if (c->eof && !h->waiting && !h->dead && !c->closing) {
    /* The peer sent its last byte: answer what is complete, then close; a request cut short is a reset. The
     * answers to the complete requests before it may still be queued (held behind an answer that came later,
     * or not yet read by the peer): they go out first, so the close waits for them, as after an error. */
    if (h->in_msg && !reset_at_destroy(h)) CB__STAT_INC(c->w, resets);
    h->dead = 1;
    cb__conn_close_linger(c);
  }
  /* Between requests the state goes back at once, unless the connection is in idle mode, that is it has been
   * served before (keep-alive traffic): then it keeps it for the next request and gives it back at the rest
   * step, once idle for CB__REST_MS (conn.c; the output queue does the same). */
  if (c->timer_mode != CB__TIMER_IDLE) h1_rest(c);
}

static void h1_eof(cb__conn_t *c) { (void)c; /* c->eof is set; h1_after decides once held input is parsed */ }

static int h1_writable(cb__conn_t *c, int produce) {
  h1_t *h = c->proto_state;
  if (h == NULL) return 0;
  cb__req_t *r = &h->req;
  if (!(r->blocked && r->res_state == CB__RES_HEAD && r->handler && r->handler->on_writable)) return 0;
  if (produce) r->handler->on_writable(r);
  return 1;
}

static int h1_timer_mode(const cb__conn_t *c) {
  const h1_t *h = c->proto_state;
  if (h == NULL) return c->rest_flags & REST_SERVED ? CB__TIMER_IDLE : CB__TIMER_HEADER;
  if (h->dead) return CB__TIMER_IDLE;
  if (h->in_head || (h->requests == 0 && !h->in_msg)) return CB__TIMER_HEADER;
  if (h->waiting && !h->req.blocked) return CB__TIMER_HELD; /* a handler's timer decides (delay) */
  return CB__TIMER_IDLE;
}

static void h1_timeout(cb__conn_t *c, int mode) {
  h1_t *h = c->proto_state;
  if (h == NULL) { /* at rest: a silent peer */
    cb__conn_close(c);
    return;
  }
  /* A head that started but did not finish in time gets 408; a silent peer just gets closed. */
  if (mode == CB__TIMER_HEADER && h->in_head && !h->dead) {
    send_error(h, 408);
    return;
  }
  cb__conn_close(c);
}

static void h1_stop(cb__conn_t *c) {
  h1_t *h = c->proto_state;
  if (h == NULL && (h = h1_wake(c)) == NULL) { /* at rest: a state that drops what may still arrive */
    cb__conn_close(c);
    return;
  }
  h->stopping = 1;
  if (!h->in_msg && !h->waiting) { /* between requests: close now, after what is still queued */
    h->dead = 1;
    if (c->out.bytes == 0)
      cb__conn_close(c);
    else
      cb__conn_close_linger(c);
    return;
  }
  if (h->req.res_state == CB__RES_NONE) return; /* its head will say connection: close */
  h->keep_alive = 0;
}

static void h1_destroy(cb__conn_t *c) {
  h1_t *h = c->proto_state;
  if (h == NULL) return;
  if (reset_at_destroy(h)) CB__STAT_INC(c->w, resets);
  if (h->req.handler) cb__req_release(&h->req);
  h1_free(h);
  c->proto_state = NULL;
}

/* Gives the state back to the worker's cache; buffers that grew past it are freed. */
static void h1_free(h1_t *h) {
  cb__caches_t *cs = &h->c->w->caches;
  if (h->head != h->head_buf) free(h->head);
  if (h->hdrs != h->hdrs_buf) free(h->hdrs);
  if (h->pending_cap == CB__BLOCK_4K)
    cb__cache_put(&cs->b4k, h->pending);
  else
    free(h->pending);
  cb__cache_put(&cs->h1, h);
}

/* ---- rest: an idle connection holds no HTTP/1.1 state ----
 * Between requests (nothing half-read, held or answered later) the state goes back to the worker's caches and
 * only c->rest_flags and c->rest_byte stay; the next read takes a fresh state. A parser at the start of a
 * message is what llhttp_init makes, so nothing of llhttp is lost. That happens after a connection's first
 * request, and on a keep-alive connection that goes on (idle mode) at the rest step, once it has had no event
 * for CB__REST_MS (h1_after, conn.c): a busy connection does not give its state back and take it again for
 * every request. */

/* A parser at the start of a request, copied into each state (cheaper than llhttp_init). */
static llhttp_t parser_start;

static h1_t *h1_wake(cb__conn_t *c) {
  h1_t *h = cb__cache_get(&c->w->caches.h1);
  if (h == NULL) return NULL;
  memcpy(&h->parser, &parser_start, sizeof parser_start);
  memset((char *)h + offsetof(h1_t, c), 0, offsetof(h1_t, req) - offsetof(h1_t, c));
  h->req.handler = NULL; /* what is read of the request before a message begins */
  h->req.res_state = CB__RES_NONE;
  h->req.blocked = 0;
  h->req.status = 0;
  h->head = h->head_buf;
  h->head_cap = sizeof h->head_buf;
  h->hdrs = h->hdrs_buf;
  h->hdrs_cap = HDRS_INLINE;
  h->c = c;
  h->req.conn = c;
  h->req.proto = &h1_proto;
  h->req.stream = h;
  h->requests = c->rest_flags & REST_SERVED;
  h->last_byte = c->rest_byte;
  c->proto_state = h;
  return h;
}

static void h1_rest(cb__conn_t *c) {
  h1_t *h = c->proto_state;
  if (h == NULL || h->in_msg || h->waiting || h->resume || h->dead || h->stopping || h->pending_len > 0 || h->unknown_method ||
      h->url_at_end || h->ext_resume || h->req.handler != NULL || c->closing)
    return;
  c->rest_flags = h->requests > 0 ? REST_SERVED : 0;
  c->rest_byte = h->last_byte;
  c->proto_state = NULL;
  h1_free(h);
}

/* The connection is to end: the request in flight (a fault's, or one cut short) is journaled now. */
static void h1_record(cb__conn_t *c) {
  h1_t *h = c->proto_state;
  if (h != NULL && h->req.jseq != 0) cb__journal_record(c->w, &h->req);
}

static const cb__conn_ops_t h1_ops = {
    .read = h1_read,
    .eof = h1_eof,
    .writable = h1_writable,
    .after = h1_after,
    .timer_mode = h1_timer_mode,
    .timeout = h1_timeout,
    .stop = h1_stop,
    .destroy = h1_destroy,
    .rest = h1_rest,
    .record = h1_record,
};

static void make_parser_start(void) {
  probe_ext_semicolon();
  llhttp_init(&parser_start, HTTP_REQUEST, &settings);
}

static void memos_free(cb__worker_t *w, void *state) {
  (void)w;
  free(state);
}

static const cb__part_ops_t memos_part = {.free = memos_free};

int cb__h1_attach(cb__conn_t *c) {
  uv_once(&ext_probe_once, make_parser_start);
  cb__worker_t *w = c->w;
  if (w->parts[CB__PART_H1].state == NULL) { /* the worker's first HTTP/1.1 connection */
    cb__h1_worker_t *hw = calloc(1, sizeof *hw);
    if (hw == NULL) return UV_ENOMEM;
    w->parts[CB__PART_H1] = (cb__part_t){hw, &memos_part};
    cb__cache_init(&w->caches.h1, sizeof(h1_t));
  }
  c->rest_flags = 0;
  c->rest_byte = 0;
  if (h1_wake(c) == NULL) return UV_ENOMEM;
  c->proto = CB__PROTO_H1;
  c->proto_id = c->tr.tls ? CB_PROTO_H1_TLS : CB_PROTO_HTTP1;
  c->ops = &h1_ops;
  return 0;
}
