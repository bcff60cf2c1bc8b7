/* The client layer (src/client/): the answer parser's events for exact bytes, fed whole, split at every offset
 * and byte by byte; its limits at and one past the bound; the request-head writer's exact bytes; the hop-by-hop
 * test. Each parser run is written as one line of events, so that a test states the whole expected sequence. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "runner.h"

/* ---- a recorder: the events of a run as text ---- */

typedef struct {
  char log[8192];
  size_t len;
  int body_open; /* the last event was body bytes: more are appended to it (splits give the same line) */
  int stop_at_done; /* on_done returns this when non-zero */
} rec_t;

static void logf_(rec_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(rec_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(r->log + r->len, sizeof r->log - r->len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof r->log - r->len) FAIL("event log full");
  r->len += (size_t)n;
}

static void log_fields(rec_t *r, const cb_chdr_t *f, int n) {
  for (int i = 0; i < n; i++)
    logf_(r, " [%.*s: %.*s]", (int)f[i].name_len, f[i].name, (int)f[i].value_len, f[i].value);
}

static int r_begin(void *ud) {
  rec_t *r = ud;
  r->body_open = 0;
  logf_(r, "begin|");
  return 0;
}

static int r_head(void *ud, const cb_cres_head_t *h) {
  rec_t *r = ud;
  r->body_open = 0;
  logf_(r, "head %d %d.%d cl=%lld chunked=%d ka=%d body=%d", h->status, h->major, h->minor,
        (long long)h->content_length, h->chunked, h->keep_alive, h->has_body);
  log_fields(r, h->headers, h->nheaders);
  logf_(r, "|");
  return 0;
}

static int r_body(void *ud, const char *p, size_t n) {
  rec_t *r = ud;
  if (n == 0) FAIL("on_body with no bytes");
  if (r->body_open) r->len--; /* reopen the last body event */
  else logf_(r, "body ");
  logf_(r, "%.*s|", (int)n, p);
  r->body_open = 1;
  return 0;
}

static int r_trailers(void *ud, const cb_chdr_t *t, int n) {
  rec_t *r = ud;
  r->body_open = 0;
  logf_(r, "trailers");
  log_fields(r, t, n);
  logf_(r, "|");
  return 0;
}

static int r_done(void *ud, int keep_alive) {
  rec_t *r = ud;
  r->body_open = 0;
  logf_(r, "done %d|", keep_alive);
  return r->stop_at_done;
}

static const cb_cres_callbacks_t rec_cb = {
  .on_begin = r_begin, .on_head = r_head, .on_body = r_body, .on_trailers = r_trailers, .on_done = r_done};

/* One run: init with these limits, feed `in` in pieces at the given split offsets (ascending, 0-terminated
 * list; NULL: whole), then eof when asked; the result of the first feed that is not 0 ends the run and is
 * logged ("= <code>"), as is eof's. */
typedef struct {
  cb_cres_limits_t lim;
  int head_req;
  int eof;
  const size_t *splits;
  size_t bytewise; /* 1: feed byte by byte */
} run_opts_t;

static char headbuf[CB_CRES_HEADBUF_SIZE(65536, 200)];

static const char *run_(rec_t *r, const char *in, size_t n, const run_opts_t *o) {
  cb_cres_t p;
  memset(r->log, 0, sizeof r->log);
  r->len = 0;
  r->body_open = 0;
  cb_cres_init(&p, &rec_cb, r, &o->lim, headbuf, sizeof headbuf);
  cb_cres_expect(&p, o->head_req);
  size_t at = 0;
  int rc = 0;
  size_t si = 0;
  while (at < n && rc == 0) {
    size_t next = n;
    if (o->bytewise) next = at + 1;
    else if (o->splits && o->splits[si]) next = o->splits[si++];
    rc = cb_cres_feed(&p, in + at, next - at);
    at = next;
  }
  if (rc != 0) {
    logf_(r, "= %d", rc);
    /* A stopped parser says the same again. */
    ASSERT_EQ(cb_cres_feed(&p, "x", 1), rc);
  } else if (o->eof) {
    rc = cb_cres_eof(&p);
    logf_(r, "eof %d", rc);
  } else {
    logf_(r, "idle %d", cb_cres_idle(&p));
  }
  return r->log;
}

/* The same log whole, at every split offset, and byte by byte. */
static void expect_events(const char *in, size_t n, const run_opts_t *o, const char *want) {
  static rec_t r;
  run_opts_t v = *o;
  ASSERT_STR_EQ(run_(&r, in, n, &v), want);
  for (size_t k = 1; k < n; k++) {
    size_t splits[2] = {k, 0};
    v.splits = splits;
    const char *got = run_(&r, in, n, &v);
    if (strcmp(got, want) != 0) cbt_log("split at %zu of %zu", k, n);
    ASSERT_STR_EQ(got, want);
  }
  v.splits = NULL;
  v.bytewise = 1;
  ASSERT_STR_EQ(run_(&r, in, n, &v), want);
}

#define EXPECT(in, opts, want) expect_events(in, sizeof(in) - 1, opts, want)

static const run_opts_t plain = {.lim = {.max_head = 4096, .max_headers = 50}};
static const run_opts_t plain_eof = {.lim = {.max_head = 4096, .max_headers = 50}, .eof = 1};

/* ---- framing ---- */

TEST(client_content_length) {
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b \t\r\nX-Empty:\r\n\r\nhello", &plain,
         "begin|head 200 1.1 cl=5 chunked=0 ka=1 body=1 [Content-Length: 5] [X-A: b] [X-Empty: ]|"
         "body hello|done 1|idle 1");
}

TEST(client_chunked_trailers) {
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "5\r\nhello\r\n6;name=val\r\n world\r\n0\r\nX-Trailer: t1\r\nx-two: 2\r\n\r\n",
         &plain,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body hello world|"
         "trailers [X-Trailer: t1] [x-two: 2]|done 1|idle 1");
  /* No trailers: no on_trailers. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", &plain,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body ab|done 1|idle 1");
}

TEST(client_read_until_close) {
  EXPECT("HTTP/1.1 200 OK\r\nX: y\r\n\r\nuntil the close", &plain_eof,
         "begin|head 200 1.1 cl=-1 chunked=0 ka=0 body=1 [X: y]|body until the close|done 0|eof 0");
  /* A transfer-encoding that is not chunked: read until the close as well (RFC 9112 6.3). */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzz", &plain_eof,
         "begin|head 200 1.1 cl=-1 chunked=0 ka=0 body=1 [Transfer-Encoding: gzip]|body zz|done 0|eof 0");
  /* With no body bytes at all. */
  EXPECT("HTTP/1.1 200 OK\r\n\r\n", &plain_eof, "begin|head 200 1.1 cl=-1 chunked=0 ka=0 body=1|done 0|eof 0");
}

TEST(client_head_answers) {
  run_opts_t o = plain;
  o.head_req = 1;
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "HTTP/1.1 404 Not Found\r\n\r\n",
         &o,
         "begin|head 200 1.1 cl=5 chunked=0 ka=1 body=0 [Content-Length: 5]|done 1|"
         "begin|head 200 1.1 cl=-1 chunked=0 ka=1 body=0 [Transfer-Encoding: chunked]|done 1|"
         "begin|head 404 1.1 cl=-1 chunked=0 ka=1 body=0|done 1|idle 1");
}

TEST(client_204_304_no_body) {
  /* A content-length on a 204 or a 304 announces no body: the next answer starts right after the head. */
  EXPECT("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"
         "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"
         "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
         &plain,
         "begin|head 204 1.1 cl=5 chunked=0 ka=1 body=0 [Content-Length: 5]|done 1|"
         "begin|head 304 1.1 cl=7 chunked=0 ka=1 body=0 [Content-Length: 7]|done 1|"
         "begin|head 200 1.1 cl=2 chunked=0 ka=1 body=1 [Content-Length: 2]|body ok|done 1|idle 1");
  EXPECT("HTTP/1.1 204 No Content\r\n\r\n", &plain_eof,
         "begin|head 204 1.1 cl=-1 chunked=0 ka=1 body=0|done 1|eof 0");
}

TEST(client_1xx_skipped) {
  EXPECT("HTTP/1.1 100 Continue\r\n\r\n"
         "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nContent-Length: 3\r\n\r\n"
         "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
         &plain, "begin|head 200 1.1 cl=2 chunked=0 ka=1 body=1 [Content-Length: 2]|body ok|done 1|idle 1");
  /* The close after an interim answer: the final one never came. */
  EXPECT("HTTP/1.1 100 Continue\r\n\r\n", &plain_eof, "begin|eof -1004");
}

TEST(client_101_final) {
  /* A 101 is a final head; what follows is another protocol, not parsed. */
  EXPECT("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi", &plain,
         "begin|head 101 1.1 cl=-1 chunked=0 ka=0 body=0 [Upgrade: websocket] [Connection: Upgrade]|done 0|idle 0");
  EXPECT("HTTP/1.1 101 Switching Protocols\r\n\r\nnot http", &plain,
         "begin|head 101 1.1 cl=-1 chunked=0 ka=0 body=0|done 0|idle 0");
}

TEST(client_keep_alive) {
  EXPECT("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx"
         "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\ny",
         &plain, "begin|head 200 1.1 cl=1 chunked=0 ka=0 body=1 [Connection: close] [Content-Length: 1]|body x|"
                 "done 0|idle 0");
  EXPECT("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", &plain,
         "begin|head 200 1.0 cl=1 chunked=0 ka=0 body=1 [Content-Length: 1]|body x|done 0|idle 0");
  EXPECT("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"
         "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
         &plain, "begin|head 200 1.0 cl=1 chunked=0 ka=1 body=1 [Connection: keep-alive] [Content-Length: 1]|"
                 "body x|done 1|begin|head 200 1.0 cl=0 chunked=0 ka=0 body=0 [Content-Length: 0]|done 0|idle 0");
  /* A connection: close among the trailers ends the connection too. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nConnection: close\r\n\r\n"
         "HTTP/1.1 200 OK\r\n\r\n",
         &plain, "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|"
                 "trailers [Connection: close]|done 0|idle 0");
  /* A transfer-encoding among the trailers makes llhttp take the answer for the connection's last (found by
   * fuzz_h1_response: the answer said keep-alive, and the next answer's bytes were refused or not as the reads
   * fell): the answer says so. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nTransfer-Encoding: gzip\r\n\r\n"
         "HTTP/1.1 200 OK\r\n\r\n",
         &plain, "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|"
                 "trailers [Transfer-Encoding: gzip]|done 0|idle 0");
  /* Empty lines between answers are skipped: no answer begins, the close there is clean. */
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n\r\n\r\n", &plain_eof,
         "begin|head 200 1.1 cl=0 chunked=0 ka=1 body=0 [Content-Length: 0]|done 1|eof 0");
}

TEST(client_pipelined_mix) {
  /* Every framing in one stream, at every split: each answer's events in order. */
  EXPECT("HTTP/1.1 100 Continue\r\n\r\n"
         "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
         "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n1;a=\"b c\"\r\nd\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\n"
         "HTTP/1.1 204 No Content\r\n\r\n"
         "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
         &plain,
         "begin|head 200 1.1 cl=3 chunked=0 ka=1 body=1 [Content-Length: 3]|body abc|done 1|"
         "begin|head 201 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body d0123456789|"
         "trailers [T: 1]|done 1|"
         "begin|head 204 1.1 cl=-1 chunked=0 ka=1 body=0|done 1|"
         "begin|head 500 1.1 cl=0 chunked=0 ka=0 body=0 [Content-Length: 0] [Connection: close]|done 0|idle 0");
}

/* ---- limits ---- */

TEST(client_head_limit_exact) {
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: 0123456789\r\n\r\n";
  static const char in[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: 0123456789\r\n\r\nok"
                           "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: 0123456789\r\n\r\nok";
  run_opts_t o = plain;
  o.lim.max_head = sizeof head - 1; /* the head exactly: both answers pass, each counted alone */
  EXPECT(in, &o,
         "begin|head 200 1.1 cl=2 chunked=0 ka=1 body=1 [Content-Length: 2] [X-Pad: 0123456789]|body ok|done 1|"
         "begin|head 200 1.1 cl=2 chunked=0 ka=1 body=1 [Content-Length: 2] [X-Pad: 0123456789]|body ok|done 1|"
         "idle 1");
  o.lim.max_head = sizeof head - 2; /* one byte less */
  EXPECT(in, &o, "begin|= -1002");
  /* 1xx heads are counted alone: a 100 and a final head each within the bound pass. */
  o.lim.max_head = sizeof head - 1;
  EXPECT("HTTP/1.1 100 Continue\r\nX-Pad: 01234567890123456789\r\n\r\n"
         "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: 0123456789\r\n\r\nok",
         &o, "begin|head 200 1.1 cl=2 chunked=0 ka=1 body=1 [Content-Length: 2] [X-Pad: 0123456789]|body ok|"
             "done 1|idle 1");
  /* A head that never ends stops at the bound, with nothing kept beyond it. */
  char big[3000];
  memset(big, 'a', sizeof big);
  memcpy(big, "HTTP/1.1 200 OK\r\nX-Long: ", 25);
  o.lim.max_head = 1000;
  static rec_t r;
  ASSERT_STR_EQ(run_(&r, big, sizeof big, &o), "begin|= -1002");
}

TEST(client_trailer_limit_exact) {
  static const char in[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 12345\r\n\r\n";
  /* The trailer section: "X-T: 12345\r\n\r\n", 14 bytes, its own budget; the head is 47 bytes. */
  run_opts_t o = plain;
  o.lim.max_head = 47;
  EXPECT(in, &o, "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body a|"
                 "trailers [X-T: 12345]|done 1|idle 1");
  o.lim.max_head = 46;
  EXPECT(in, &o, "begin|= -1002");
  o.lim.max_head = 47;
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n"
         "X-T: 1234567890123456789012345678901234567890\r\n\r\n",
         &o, "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body a|= -1002");
  /* Each chunk-size line (size, extensions, line end) has the same budget: here 47 bytes, then 48. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "1;e=01234567890123456789012345678901234567890\r\na\r\n"
         "1;e=01234567890123456789012345678901234567890\r\nb\r\n0\r\n\r\n",
         &o, "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body ab|done 1|idle 1");
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "1;e=01234567890123456789012345678901234567890\r\na\r\n"
         "1;e=012345678901234567890123456789012345678901\r\nb\r\n0\r\n\r\n",
         &o, "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body a|= -1002");
  /* An endless chunk-size line stops at the bound. */
  static char endless[4096];
  static const char start[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;e=";
  memset(endless, 'x', sizeof endless);
  memcpy(endless, start, sizeof start - 1);
  static rec_t r;
  ASSERT_STR_EQ(run_(&r, endless, sizeof endless, &o),
                "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|= -1002");
}

TEST(client_header_count_limit) {
  run_opts_t o = plain;
  o.lim.max_headers = 3;
  EXPECT("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nContent-Length: 0\r\n\r\n", &o,
         "begin|head 200 1.1 cl=0 chunked=0 ka=1 body=0 [A: 1] [B: 2] [Content-Length: 0]|done 1|idle 1");
  EXPECT("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nContent-Length: 0\r\n\r\n", &o, "begin|= -1002");
  /* A field is counted once its name is complete: a line that is no field at all is a bad answer, however the
   * reads cut it (found by fuzz_h1_response: a read ending inside "1f" counted it, a whole read did not). */
  o.lim.max_headers = 4;
  EXPECT("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n1f\r\nE: 5a\r\n\r\n", &o, "begin|= -1001");
  o.lim.max_headers = 3;
  /* Trailers: their own count of the same bound. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nA: 1\r\nB: 2\r\n\r\n0\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", &o,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked] [A: 1] [B: 2]|"
         "trailers [C: 3] [D: 4] [E: 5]|done 1|idle 1");
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\n\r\n", &o,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|= -1002");
}

TEST(client_headbuf_too_small) {
  /* A buffer short of CB_CRES_HEADBUF_SIZE: two entries (half of it, at most) and the rest for the text. */
  static char small[4 * sizeof(cb_chdr_t) + 8];
  cb_cres_limits_t lim = {.max_head = 4096, .max_headers = 50};
  rec_t r = {0};
  cb_cres_t p;
  cb_cres_init(&p, &rec_cb, &r, &lim, small, sizeof small);
  static const char ok[] = "HTTP/1.1 204 No Content\r\nA: 1\r\nB: 2\r\n\r\n";
  ASSERT_EQ(cb_cres_feed(&p, ok, sizeof ok - 1), 0);
  ASSERT_STR_EQ(r.log, "begin|head 204 1.1 cl=-1 chunked=0 ka=1 body=0 [A: 1] [B: 2]|done 1|");
  static const char many[] = "HTTP/1.1 204 No Content\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
  ASSERT_EQ(cb_cres_feed(&p, many, sizeof many - 1), CB_CRES_E_HEAD_TOO_BIG);
  cb_cres_reset(&p);
  /* The entries leave 64 to 72 bytes of text (as the buffer is aligned): a name and value of 80 do not fit. */
  static const char text[] = "HTTP/1.1 204 No Content\r\nA: "
                             "0123456789012345678901234567890123456789012345678901234567890123456789012345678\r\n\r\n";
  ASSERT_EQ(cb_cres_feed(&p, text, sizeof text - 1), CB_CRES_E_HEAD_TOO_BIG);
}

TEST(client_body_limit) {
  run_opts_t o = plain;
  o.lim.max_body = 4;
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd", &o,
         "begin|head 200 1.1 cl=4 chunked=0 ka=1 body=1 [Content-Length: 4]|body abcd|done 1|idle 1");
  /* A content-length over the bound: refused before on_head. */
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde", &o, "begin|= -1003");
  /* Chunked: on_body gets exactly max_body bytes, then the error. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n", &o,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body abcd|done 1|idle 1");
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", &o,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body abcd|= -1003");
  /* Read until the close, alike. */
  EXPECT("HTTP/1.1 200 OK\r\n\r\nabcdef", &o,
         "begin|head 200 1.1 cl=-1 chunked=0 ka=0 body=1|body abcd|= -1003");
  /* The bound is per answer. */
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nefgh", &o,
         "begin|head 200 1.1 cl=3 chunked=0 ka=1 body=1 [Content-Length: 3]|body abc|done 1|"
         "begin|head 200 1.1 cl=4 chunked=0 ka=1 body=1 [Content-Length: 4]|body efgh|done 1|idle 1");
  /* A HEAD answer's content-length announces no body: not over the bound. */
  o.head_req = 1;
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n", &o,
         "begin|head 200 1.1 cl=500 chunked=0 ka=1 body=0 [Content-Length: 500]|done 1|idle 1");
}

/* ---- bad answers ---- */

TEST(client_garbage) {
  EXPECT("HTTX/1.1 200 OK\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 2x0 OK\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("GET / HTTP/1.1\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", &plain, "begin|= -1001");
  /* An empty name (found by fuzz_h1_response: llhttp lets it through, and it was taken for the previous field's
   * value). */
  EXPECT("HTTP/1.1 200 OK\r\nA: 1\r\n: 2\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\n:x\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", &plain, "begin|= -1001");
  /* A content-length that an int64_t cannot hold (llhttp takes up to 2^64-1): it was cast to a negative
   * length, so the answer had "no body" (has_body 0, and a proxy's max_body check before the head skipped)
   * while llhttp went on reading its body. */
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\nab", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\nConnection: close\r\n\r\nab", &plain,
         "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", &plain, "begin|= -1001");
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", &plain,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|= -1001");
  /* Strict mode: chunk data must end with CRLF. */
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\naXY0\r\n\r\n", &plain,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body a|= -1001");
}

TEST(client_truncated) {
  EXPECT("HTTP/1.1 200 OK\r\nContent-Len", &plain_eof, "begin|eof -1004");
  EXPECT("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", &plain_eof,
         "begin|head 200 1.1 cl=5 chunked=0 ka=1 body=1 [Content-Length: 5]|body abc|eof -1004");
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", &plain_eof,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|body ab|eof -1004");
  EXPECT("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n", &plain_eof,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1 [Transfer-Encoding: chunked]|eof -1004");
  /* Nothing of an answer: a clean close. */
  EXPECT("", &plain_eof, "eof 0");
}

/* ---- the parser's state across answers ---- */

TEST(client_stop_and_reset) {
  cb_cres_limits_t lim = {.max_head = 4096};
  rec_t r = {0};
  r.stop_at_done = -7;
  cb_cres_t p;
  cb_cres_init(&p, &rec_cb, &r, &lim, headbuf, sizeof headbuf);
  static const char two[] = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb";
  ASSERT_EQ(cb_cres_feed(&p, two, sizeof two - 1), -7); /* stopped after the first answer */
  ASSERT_EQ(cb_cres_feed(&p, two, sizeof two - 1), -7);
  ASSERT_EQ(cb_cres_eof(&p), -7);
  ASSERT_STR_EQ(r.log, "begin|head 200 1.1 cl=1 chunked=0 ka=1 body=1 [Content-Length: 1]|body a|done 1|");
  cb_cres_reset(&p);
  r.len = 0;
  r.stop_at_done = 0;
  memset(r.log, 0, sizeof r.log);
  ASSERT_EQ(cb_cres_feed(&p, two, sizeof two - 1), 0);
  ASSERT_EQ(cb_cres_idle(&p), 1);
  ASSERT_STR_EQ(r.log, "begin|head 200 1.1 cl=1 chunked=0 ka=1 body=1 [Content-Length: 1]|body a|done 1|"
                       "begin|head 200 1.1 cl=1 chunked=0 ka=1 body=1 [Content-Length: 1]|body b|done 1|");
  /* cb_cres_expect is kept from one answer to the next, and a reset keeps it too. */
  cb_cres_expect(&p, 1);
  cb_cres_reset(&p);
  r.len = 0;
  memset(r.log, 0, sizeof r.log);
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n";
  ASSERT_EQ(cb_cres_feed(&p, head, sizeof head - 1), 0);
  ASSERT_STR_EQ(r.log, "begin|head 200 1.1 cl=1 chunked=0 ka=1 body=0 [Content-Length: 1]|done 1|"
                       "begin|head 200 1.1 cl=1 chunked=0 ka=1 body=0 [Content-Length: 1]|done 1|");
}

TEST(client_count_only) {
  /* No fields gathered, no trailers, no buffer; the head bound still holds, the field count is not kept. */
  run_opts_t o = {.lim = {.max_head = 4096, .max_headers = 1, .count_only = 1}};
  EXPECT("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\nT: 1\r\n\r\n"
         "HTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nx",
         &o,
         "begin|head 200 1.1 cl=-1 chunked=1 ka=1 body=1|body ab|done 1|"
         "begin|head 404 1.1 cl=1 chunked=0 ka=1 body=1|body x|done 1|idle 1");
  cb_cres_t p;
  rec_t r = {0};
  cb_cres_init(&p, &rec_cb, &r, &o.lim, NULL, 0);
  static const char in[] = "HTTP/1.1 200 OK\r\nX: 0123456789\r\n\r\n";
  o.lim.max_head = sizeof in - 2;
  cb_cres_init(&p, &rec_cb, &r, &o.lim, NULL, 0);
  ASSERT_EQ(cb_cres_feed(&p, in, sizeof in - 1), CB_CRES_E_HEAD_TOO_BIG);
}

TEST(client_strerror) {
  ASSERT_STR_EQ(cb_cres_strerror(CB_CRES_E_BAD), "bad response");
  ASSERT_STR_EQ(cb_cres_strerror(CB_CRES_E_HEAD_TOO_BIG), "response head too big");
  ASSERT_STR_EQ(cb_cres_strerror(CB_CRES_E_BODY_TOO_BIG), "response body too big");
  ASSERT_STR_EQ(cb_cres_strerror(CB_CRES_E_TRUNCATED), "response truncated");
  ASSERT_STR_EQ(cb_cres_strerror(-5), "response error");
}

/* ---- the request head ---- */

#define S(s) s, sizeof(s) - 1

TEST(client_request_head) {
  char buf[512];
  cb_chdr_t hs[] = {{S("accept"), S("*/*")}, {S("X-Forwarded-For"), S("127.0.0.1")}, {S("x-empty"), S("")}};
  cb_creq_t r = {S("GET"), S("/a/b?c=d"), S("127.0.0.1:8080"), hs, 3, CB_CREQ_NO_BODY, 0};
  static const char want[] = "GET /a/b?c=d HTTP/1.1\r\nhost: 127.0.0.1:8080\r\naccept: */*\r\n"
                             "X-Forwarded-For: 127.0.0.1\r\nx-empty: \r\n\r\n";
  ssize_t n = cb_creq_head(buf, sizeof buf, &r);
  ASSERT_MEM_EQ(buf, (size_t)n, want, sizeof want - 1);
  /* Exactly the room it needs, and one byte less at every length. */
  ASSERT_EQ(cb_creq_head(buf, sizeof want - 1, &r), (ssize_t)sizeof want - 1);
  for (size_t cap = 0; cap < sizeof want - 1; cap++) ASSERT_EQ(cb_creq_head(buf, cap, &r), -1);

  cb_creq_t post = {S("POST"), S("/up"), S("h"), NULL, 0, 12345, 0};
  static const char want_post[] = "POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 12345\r\n\r\n";
  n = cb_creq_head(buf, sizeof buf, &post);
  ASSERT_MEM_EQ(buf, (size_t)n, want_post, sizeof want_post - 1);
  post.content_length = 0;
  static const char want_zero[] = "POST /up HTTP/1.1\r\nhost: h\r\ncontent-length: 0\r\n\r\n";
  n = cb_creq_head(buf, sizeof buf, &post);
  ASSERT_MEM_EQ(buf, (size_t)n, want_zero, sizeof want_zero - 1);
  post.content_length = CB_CREQ_CHUNKED;
  static const char want_chunked[] = "POST /up HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n";
  n = cb_creq_head(buf, sizeof buf, &post);
  ASSERT_MEM_EQ(buf, (size_t)n, want_chunked, sizeof want_chunked - 1);
}

TEST(client_request_head_refuses_injection) {
  char buf[512];
  cb_chdr_t ok = {S("a"), S("b")};
  cb_chdr_t bad_value = {S("a"), S("b\r\nX: smuggled")};
  cb_chdr_t bad_value_lf = {S("a"), S("b\nc")};
  cb_chdr_t bad_value_nul = {S("a"), "b\0c", 3};
  cb_chdr_t bad_name_colon = {S("a:b"), S("c")};
  cb_chdr_t bad_name_space = {S("a b"), S("c")};
  cb_chdr_t empty_name = {S(""), S("c")};
  cb_creq_t r = {S("GET"), S("/"), S("h"), &ok, 1, CB_CREQ_NO_BODY, 0};
  ASSERT_GT(cb_creq_head(buf, sizeof buf, &r), 0);
  const cb_chdr_t *bad[] = {&bad_value, &bad_value_lf, &bad_value_nul, &bad_name_colon, &bad_name_space, &empty_name};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r.headers = bad[i];
    ASSERT_EQ(cb_creq_head(buf, sizeof buf, &r), -2);
  }
  r.headers = &ok;
  cb_creq_t t = r;
  t.target = "/a b";
  t.target_len = 4;
  ASSERT_EQ(cb_creq_head(buf, sizeof buf, &t), -2);
  t.target = "/a\r\n";
  ASSERT_EQ(cb_creq_head(buf, sizeof buf, &t), -2);
  t.target_len = 0;
  ASSERT_EQ(cb_creq_head(buf, sizeof buf, &t), -2);
  t = r;
  t.host = "h\r\nX: y";
  t.host_len = 7;
  ASSERT_EQ(cb_creq_head(buf, sizeof buf, &t), -2);
  t = r;
  t.method = "GE T";
  t.method_len = 4;
  ASSERT_EQ(cb_creq_head(buf, sizeof buf, &t), -2);
  t.method_len = 0;
  ASSERT_EQ(cb_creq_head(buf, sizeof buf, &t), -2);
}

/* ---- hop-by-hop ---- */

/* Every name cb_chdr_name knows, in any case, and nothing else: each byte of each name replaced by each of the
 * 256 values gives CB_CHDR_OTHER unless the value is that letter in the other case (the word compare lowercases
 * only 'A'..'Z': '@', '[', a CR where a '-' stands and the bytes above 0x7f stay what they are). */
TEST(client_field_names) {
  static const struct {
    const char *name;
    int id;
  } known[] = {{"connection", CB_CHDR_CONNECTION}, {"keep-alive", CB_CHDR_KEEP_ALIVE},
               {"proxy-connection", CB_CHDR_PROXY_CONNECTION}, {"te", CB_CHDR_TE}, {"trailer", CB_CHDR_TRAILER},
               {"transfer-encoding", CB_CHDR_TRANSFER_ENCODING}, {"upgrade", CB_CHDR_UPGRADE},
               {"host", CB_CHDR_HOST}, {"expect", CB_CHDR_EXPECT}, {"content-length", CB_CHDR_CONTENT_LENGTH},
               {"date", CB_CHDR_DATE}, {"x-forwarded-for", CB_CHDR_X_FORWARDED_FOR},
               {"x-forwarded-proto", CB_CHDR_X_FORWARDED_PROTO}, {"x-forwarded-host", CB_CHDR_X_FORWARDED_HOST}};
  char b[32];
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
    size_t n = strlen(known[k].name);
    memcpy(b, known[k].name, n);
    ASSERT_EQ(cb_chdr_name(b, n), known[k].id);
    for (size_t i = 0; i < n; i++) b[i] = (char)(b[i] >= 'a' && b[i] <= 'z' ? b[i] - 32 : b[i]);
    ASSERT_EQ(cb_chdr_name(b, n), known[k].id); /* all upper case */
    ASSERT_EQ(cb_chdr_name(b, n - 1), CB_CHDR_OTHER);
    memcpy(b, known[k].name, n);
    for (size_t i = 0; i < n; i++) {
      char keep = b[i];
      for (int v = 0; v < 256; v++) {
        b[i] = (char)v;
        int same = v == keep || (keep >= 'a' && keep <= 'z' && v == keep - 32);
        int want = same ? known[k].id : CB_CHDR_OTHER;
        ASSERT_EQ(cb_chdr_name(b, n), want);
      }
      b[i] = keep;
    }
  }
  ASSERT_EQ(cb_chdr_name("", 0), CB_CHDR_OTHER);
  ASSERT_EQ(cb_chdr_name("user-agent", 10), CB_CHDR_OTHER);
  ASSERT_EQ(cb_chdr_name("content-type", 12), CB_CHDR_OTHER);
}

TEST(client_hop_by_hop) {
  static const char *const hop[] = {"connection", "Keep-Alive", "PROXY-CONNECTION", "te", "Trailer",
                                    "transfer-encoding", "Upgrade"};
  for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++) ASSERT_EQ(cb_chdr_hop_by_hop(hop[i], strlen(hop[i]), NULL, 0), 1);
  static const char *const end[] = {"content-type", "content-length", "host", "t", "tee", "trailers", "upgrade-x",
                                    "x-forwarded-for", ""};
  for (size_t i = 0; i < sizeof end / sizeof end[0]; i++) ASSERT_EQ(cb_chdr_hop_by_hop(end[i], strlen(end[i]), NULL, 0), 0);
  /* The names the connection field lists, without case, around spaces, tabs and empty list elements. */
  static const char cv[] = "close, X-Foo ,\tx-bar\t,, ,Baz";
  ASSERT_EQ(cb_chdr_hop_by_hop(S("x-foo"), S(cv)), 1);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("X-BAR"), S(cv)), 1);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("baz"), S(cv)), 1);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("close"), S(cv)), 1);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("x-fo"), S(cv)), 0);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("x-foo2"), S(cv)), 0);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("ba"), S(cv)), 0);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("accept"), S(cv)), 0);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("accept"), S("")), 0);
  ASSERT_EQ(cb_chdr_hop_by_hop(S("accept"), S("accept")), 1);
}
