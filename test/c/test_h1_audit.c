/* HTTP/1.1 findings of an audit of http1.c and the fixture routes (request framing, the fixture handlers): each
 * test failed before its fix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "engine.h"
#include "testing.h"

/* ---- an empty Transfer-Encoding ----
 * llhttp sets none of its transfer-encoding flags for a field whose value is empty (or only whitespace), so such
 * a request was framed as if the field were not there: by its Content-Length, or as bodiless. RFC 9112 6.3 says
 * that a request whose Transfer-Encoding does not end with chunked cannot be framed reliably and MUST get a 400
 * and a close; beside a Content-Length that is the disagreement request smuggling is made of (a front end that
 * honours the field reads the bytes after the head differently). Empty list elements beside a chunked coding
 * (two fields, `chunked` and an empty one) are ignored as RFC 9110 5.6.1 asks: still chunked. */
TEST(h1_audit_empty_transfer_encoding) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  EXPECT_ERROR(port, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: \r\ncontent-length: 3\r\n\r\nabc", 400);
  EXPECT_ERROR(port, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding:\r\n\r\nabc", 400);
  EXPECT_ERROR(port, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding:  \t \r\n\r\n", 400);
  EXPECT_ERROR(port, "GET /hello HTTP/1.1\r\nhost: x\r\nTransfer-Encoding:\r\n\r\n", 400);
  EXPECT_ERROR(port, "POST /echo HTTP/1.0\r\nTRANSFER-ENCODING: \r\ncontent-length: 3\r\n\r\nabc", 400);

  /* With chunked in another field the codings still end with it: read as chunked, the connection goes on. */
  buf_t exp = {0};
  exp_head(&exp, 200, "application/octet-stream", NULL, 3, CONN_NONE);
  buf_adds(&exp, "abc");
  int fd = cl_connect(port);
  ROUNDTRIP_S(fd,
              "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ntransfer-encoding: \r\n\r\n"
              "3\r\nabc\r\n0\r\n\r\n",
              &exp);
  ROUNDTRIP_S(fd,
              "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding:\r\ntransfer-encoding: chunked\r\n\r\n"
              "3\r\nabc\r\n0\r\n\r\n",
              &exp);
  /* A field named like it but longer or shorter is no transfer-encoding. */
  buf_reset(&exp);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\ntransfer-encodings:\r\ntransfer-encodin:\r\n\r\n", &exp);
  EXPECT_QUIET(fd, 100);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- /headers with many names ----
 * Each header's name was compared with every name before it (is it a repeat?) and every name after it (its
 * repeats): n * n comparisons. Within the default header limit (16 KiB) a head holds 2,600 distinct two-letter
 * names, 57 ms of a worker's CPU per request against 0.6 ms for the same head to /hello, so one client that
 * pipelines such heads holds every other connection of its worker back. The names are found by hash now. The test
 * counts the comparisons of two names (cb__headers_json_counted), not time: at most 8 per header, where the scan
 * made about n per header; and the answer is byte for byte the one of docs/wire.md (first appearance, repeats
 * joined with ", ", names lowercased), repeats and case included. */
TEST(h1_audit_headers_json_many_names) {
  enum { NAMES = 2600, ROUNDS = 3 };
  static const char tok[] = "abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~";
  const size_t ntok = sizeof tok - 1;
  int n = NAMES * ROUNDS;
  cb__hdr_t *hs = calloc((size_t)n, sizeof *hs);
  char(*names)[2] = calloc(NAMES, 2);
  char(*values)[8] = calloc((size_t)n, 8);
  ASSERT_NOT_NULL(hs);
  ASSERT_NOT_NULL(names);
  ASSERT_NOT_NULL(values);
  for (int i = 0; i < NAMES; i++) {
    names[i][0] = tok[(size_t)i / ntok];
    names[i][1] = tok[(size_t)i % ntok];
  }
  /* Round k repeats every name, in upper case when k is odd, with the value "k.i". */
  char upper[NAMES][2];
  for (int i = 0; i < NAMES; i++)
    for (int b = 0; b < 2; b++)
      upper[i][b] = names[i][b] >= 'a' && names[i][b] <= 'z' ? (char)(names[i][b] - 32) : names[i][b];
  for (int k = 0; k < ROUNDS; k++)
    for (int i = 0; i < NAMES; i++) {
      cb__hdr_t *h = &hs[k * NAMES + i];
      h->name = k % 2 ? upper[i] : names[i];
      h->name_len = 2;
      h->value = values[k * NAMES + i];
      h->value_len = (size_t)snprintf(values[k * NAMES + i], 8, "%d.%d", k, i);
    }
  buf_t want = {0};
  buf_adds(&want, "{");
  for (int i = 0; i < NAMES; i++) {
    buf_adds(&want, i ? ",\"" : "\"");
    /* '"' is no token character, '\\' neither: no escaping in a name here */
    buf_add(&want, names[i], 2);
    buf_adds(&want, "\":\"");
    for (int k = 0; k < ROUNDS; k++) buf_addf(&want, "%s%d.%d", k ? ", " : "", k, i);
    buf_adds(&want, "\"");
  }
  buf_adds(&want, "}");
  char *out = malloc(cb__headers_json_cap(hs, n));
  ASSERT_NOT_NULL(out);
  uint64_t compared = 0;
  size_t len = cb__headers_json_counted(hs, n, out, &compared);
  ASSERT_MEM_EQ(out, len, want.p, want.len);
  cbt_log("%d headers (%d names), %llu comparisons of names", n, NAMES, (unsigned long long)compared);
  if (compared > 8ull * (uint64_t)n)
    FAIL("%llu comparisons of names for %d headers: a name should be compared with a few others (a hash "
         "lookup), not with every one before and after it (a scan: about %d each here)",
         (unsigned long long)compared, n, n);
  /* A few headers, with control bytes, quotes and an empty value: the same escaping as before. */
  cb__hdr_t few[] = {{"Host", 4, "x", 1}, {"X-A", 3, "q\"\\\x01", 4}, {"x-b", 3, "", 0}, {"x-a", 3, "2", 1}};
  static const char few_json[] = "{\"host\":\"x\",\"x-a\":\"q\\\"\\\\\\u0001, 2\",\"x-b\":\"\"}";
  char small[256];
  ASSERT_LE(cb__headers_json_cap(few, 4), sizeof small);
  compared = 0;
  len = cb__headers_json_counted(few, 4, small, &compared);
  ASSERT_MEM_EQ(small, len, few_json, sizeof few_json - 1);
  len = cb__headers_json_counted(NULL, 0, small, &compared);
  ASSERT_MEM_EQ(small, len, "{}", (size_t)2);
  free(out);
  free(hs);
  free(names);
  free(values);
  buf_free(&want);
}

/* ---- the peer's EOF behind complete requests ----
 * An EOF with a request cut short was a hard close of the connection at once, dropping what was still queued: the
 * answers to the complete requests before the cut one. That happens whenever those answers are still queued when
 * the EOF is judged: held behind an answer that comes later (/delay/10, /hello, then half a request: the EOF is
 * judged when the delay's answer lets the held input be parsed, and neither answer left), or not yet written to a
 * client that reads slowly (a big file before half a request: the file was cut off). docs/wire.md's half-close
 * rule ("as over HTTP/1.1"): the complete requests are answered, then the connection closes; the request cut short
 * is a reset (counted), and nothing after it is read. */
typedef struct {
  cb__testconn_t *tc;
  buf_t out;
  int closed;
} aconn_t;

static void a_sink(void *arg, const char *data, size_t len) { buf_add(&((aconn_t *)arg)->out, data, len); }

static void a_open(aconn_t *a) {
  cb_config_t cfg;
  cb_config_init(&cfg);
  memset(a, 0, sizeof *a);
  a->tc = cb__testconn_new(&cfg, a_sink, a);
  ASSERT_NOT_NULL(a->tc);
}

static void a_feed(aconn_t *a, const char *s) { a->closed = cb__testconn_feed(a->tc, s, strlen(s)); }

static void a_close(aconn_t *a) {
  ASSERT_EQ(cb__testconn_free(a->tc), 0);
  buf_free(&a->out);
}

TEST(h1_audit_eof_keeps_complete_answers) {
  aconn_t a;
  buf_t exp = {0};
  cb_stats_t st;

  /* Held behind a delayed answer. */
  a_open(&a);
  a_feed(&a, "GET /delay/10 HTTP/1.1\r\nhost: x\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\nGET /hel");
  ASSERT_EQ(a.closed, 0);
  ASSERT_EQ(cb__testconn_eof(a.tc), 0); /* the delay is still pending */
  a.closed = cb__testconn_run(a.tc, 1);
  ASSERT_EQ(a.closed, 1);
  exp_route(&exp, "GET", "/delay/10", CONN_NONE);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  mask_dates(a.out.p, a.out.len);
  ASSERT_MEM_EQ(a.out.p, a.out.len, exp.p, exp.len);
  cb__testconn_stats(a.tc, &st);
  ASSERT_EQ(st.requests, 2);
  ASSERT_EQ(st.resets, 1);
  a_close(&a);

  /* Queued for a client that does not read yet; then it reads. */
  a_open(&a);
  ASSERT_EQ(cb__testconn_stall(a.tc, 1), 0);
  a_feed(&a, "GET /file/small HTTP/1.1\r\nhost: x\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\nPOST /echo HTTP/1.1\r\n"
             "host: x\r\ncontent-length: 10\r\n\r\nabc");
  ASSERT_EQ(a.closed, 0);
  ASSERT_EQ(cb__testconn_eof(a.tc), 0); /* the answers are still queued */
  ASSERT_EQ(a.out.len, 0);
  a.closed = cb__testconn_stall(a.tc, 0);
  if (!a.closed) a.closed = cb__testconn_run(a.tc, 1);
  ASSERT_EQ(a.closed, 1);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/file/small", CONN_NONE);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  mask_dates(a.out.p, a.out.len);
  ASSERT_MEM_EQ(a.out.p, a.out.len, exp.p, exp.len);
  cb__testconn_stats(a.tc, &st);
  ASSERT_EQ(st.requests, 3);
  ASSERT_EQ(st.resets, 1);
  a_close(&a);

  /* Nothing complete before the cut request: closed at once, nothing sent (as before). */
  a_open(&a);
  a_feed(&a, "GET /hel");
  ASSERT_EQ(cb__testconn_eof(a.tc), 1);
  ASSERT_EQ(a.out.len, 0);
  a_close(&a);
  buf_free(&exp);
}

/* ---- a request cut short by the EOF is one reset ----
 * h1_after counted the reset of a request cut short by the peer's EOF, and h1_destroy counted it again when the
 * request had a handler whose answer was not over (a body cut short): two resets for one request in the stats. */
static uint64_t resets_after_eof(const char *req) {
  aconn_t a;
  cb_stats_t st;
  a_open(&a);
  a_feed(&a, req);
  ASSERT_EQ(a.closed, 0);
  ASSERT_EQ(cb__testconn_eof(a.tc), 1);
  cb__testconn_stats(a.tc, &st);
  a_close(&a);
  return st.resets;
}

TEST(h1_audit_eof_reset_counted_once) {
  ASSERT_EQ(resets_after_eof("GET /hel"), 1);
  ASSERT_EQ(resets_after_eof("GET /hello HTTP/1.1\r\nhost: x\r\n"), 1);
  ASSERT_EQ(resets_after_eof("POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc"), 1);
  ASSERT_EQ(resets_after_eof("POST /echo/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"),
            1);
  ASSERT_EQ(resets_after_eof("GET /hello HTTP/1.1\r\nhost: x\r\n\r\n"), 0);
}

/* ---- obs-fold ----
 * A header line that begins with SP or HTAB goes on with the field before it (obs-fold, RFC 9112 5.2). llhttp 8.1
 * takes it, and the engine joined the pieces of the value: `x: a<CRLF> b` was the value `a b` for /headers, stub
 * matchers and the journal, where another parser reads two fields or a line end. A server MUST refuse it with 400
 * or replace each fold by SP; every engine refuses it now, wherever the reads cut the head (a fold whose CRLF
 * or whitespace begins a read, a value cut by a read then folded). A value cut by reads only is still one value,
 * and a fold right after the colon is skipped by llhttp as the whitespace before the value (the RFC's
 * replacement): `x:<CRLF> b` is `b`. */
static void fold_feed(const char *req, size_t cut1, size_t cut2, const buf_t *exp) {
  aconn_t a;
  size_t n = strlen(req);
  size_t cuts[3] = {cut1, cut2, n};
  a_open(&a);
  size_t at = 0;
  for (int i = 0; i < 3 && !a.closed; i++) {
    if (cuts[i] <= at) continue;
    a.closed = cb__testconn_feed(a.tc, req + at, cuts[i] - at);
    at = cuts[i];
  }
  if (!a.closed) a.closed = cb__testconn_run(a.tc, 1);
  mask_dates(a.out.p, a.out.len);
  if (a.out.len != exp->len || memcmp(a.out.p, exp->p, exp->len) != 0)
    cbt_log("cut at %zu and %zu: %.*s", cut1, cut2, (int)a.out.len, a.out.p);
  ASSERT_MEM_EQ(a.out.p, a.out.len, exp->p, exp->len);
  ASSERT_EQ(a.closed, 1);
  a_close(&a);
}

/* req in one read, and in two or three at every place and pair of places around what matters (the first fold, or
 * the value after `x:`; 6 bytes each side): every way reads can cut a value and its fold. */
static void fold_every_cut(const char *req, const buf_t *exp) {
  size_t n = strlen(req);
  const char *x = strstr(req, "\nx:");
  const char *f = strstr(req, "\r\n ") ? strstr(req, "\r\n ") : strstr(req, "\r\n\t");
  size_t mid = (size_t)((f ? f : x) - req);
  size_t lo = mid > 6 ? mid - 6 : 0, hi = mid + 6 < n ? mid + 6 : n;
  fold_feed(req, n, n, exp);
  for (size_t i = lo; i < hi; i++)
    for (size_t j = i; j < hi; j++) fold_feed(req, i, j, exp);
}

TEST(h1_audit_obs_fold) {
  buf_t bad = {0}, exp = {0};
  exp_error_close(&bad, 400);
  fold_every_cut("GET /headers HTTP/1.1\r\nhost: x\r\nx: a\r\n b\r\nconnection: close\r\n\r\n", &bad);
  fold_every_cut("GET /headers HTTP/1.1\r\nhost: x\r\nx: a \r\n\tb\r\n\r\n", &bad);
  fold_every_cut("GET /hello HTTP/1.1\r\nx: a\r\n \r\nhost: x\r\n\r\n", &bad);
  /* A fold of a field llhttp reads itself: 400 as well (a content-length one was a 400 already). */
  fold_every_cut("GET /hello HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n ,close\r\n\r\n", &bad);
  fold_every_cut("GET /hello HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n 0\r\n\r\n", &bad);
  fold_every_cut("POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip\r\n ,chunked\r\n\r\n0\r\n\r\n", &bad);

  /* Cut by reads only: one value. */
  static const char body[] = "{\"host\":\"x\",\"x\":\"a b\",\"connection\":\"close\"}";
  exp_head(&exp, 200, "application/json", NULL, (long)sizeof body - 1, CONN_CLOSE);
  buf_adds(&exp, body);
  fold_every_cut("GET /headers HTTP/1.1\r\nhost: x\r\nx: a b\r\nconnection: close\r\n\r\n", &exp);
  /* A fold before any byte of the value: the value is the next line's. */
  static const char body2[] = "{\"host\":\"x\",\"x\":\"b\",\"connection\":\"close\"}";
  buf_reset(&exp);
  exp_head(&exp, 200, "application/json", NULL, (long)sizeof body2 - 1, CONN_CLOSE);
  buf_adds(&exp, body2);
  fold_every_cut("GET /headers HTTP/1.1\r\nhost: x\r\nx:\r\n b\r\nconnection: close\r\n\r\n", &exp);
  buf_free(&bad);
  buf_free(&exp);
}

/* ---- CONNECT ----
 * llhttp ends a CONNECT's message at its head, whatever the head declared (a content-length, a chunked body), and
 * leaves the bytes after it to the caller as the tunnel's. The engine tunnels nothing and parsed them as the next
 * request: a `CONNECT` whose body was a whole `GET` got two answers, the second to a request that whatever framed
 * the CONNECT's body (a proxy, a front end) never saw as one. A CONNECT is answered as the routes say, with
 * `connection: close`, and nothing after its head is read. */
TEST(h1_audit_connect_closes) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  buf_t exp = {0};
  static const char *const reqs[] = {
      "CONNECT /hello HTTP/1.1\r\nhost: x\r\ncontent-length: 32\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
      "CONNECT /hello HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
      "CONNECT /hello HTTP/1.1\r\nhost: x\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
      "CONNECT /hello HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n",
      "CONNECT /hello HTTP/1.0\r\nconnection: keep-alive\r\ncontent-length: 32\r\n\r\n"
      "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
    buf_reset(&exp);
    exp_head(&exp, 405, NULL, "allow: GET, HEAD\r\n", 0, CONN_CLOSE);
    int fd = cl_connect(port);
    ROUNDTRIP(fd, reqs[i], strlen(reqs[i]), &exp);
    EXPECT_CLOSED(fd, 3000);
    close(fd);
  }
  /* The authority form, to no route: 404, the same close. */
  buf_reset(&exp);
  exp_head(&exp, 404, NULL, NULL, 0, CONN_CLOSE);
  int fd = cl_connect(port);
  ROUNDTRIP_S(fd, "CONNECT x:443 HTTP/1.1\r\nhost: x:443\r\ncontent-length: 32\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
              &exp);
  EXPECT_CLOSED(fd, 3000);
  close(fd);
  /* Over the body limit it is still a 413 (the head is judged before the method's rule). */
  EXPECT_ERROR(port, "CONNECT x:443 HTTP/1.1\r\nhost: x\r\ncontent-length: 20000000\r\n\r\n", 413);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- the trailers fault to HTTP/1.0 ----
 * The fault sent its chunked body with a trailer field to an HTTP/1.0 request too, which cannot read chunked
 * (RFC 9112 7: a server MUST NOT send it). It answers there as a streamed route does: no transfer-encoding, no
 * trailer field, `connection: close`, the body ended by the close. */
TEST(h1_audit_trailers_http10) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  buf_t exp = {0};
  exp_head(&exp, 200, "application/octet-stream", NULL, CL_NONE, CONN_CLOSE);
  exp_file_bytes(&exp, 300);
  int fd = cl_connect(port);
  ROUNDTRIP_S(fd, "GET /fault/trailers?length=300 HTTP/1.0\r\nconnection: keep-alive\r\n\r\n", &exp);
  EXPECT_CLOSED(fd, 3000);
  close(fd);
  buf_reset(&exp);
  exp_head(&exp, 200, "application/octet-stream", NULL, CL_NONE, CONN_CLOSE);
  fd = cl_connect(port);
  ROUNDTRIP_S(fd, "HEAD /fault/trailers HTTP/1.0\r\n\r\n", &exp);
  EXPECT_CLOSED(fd, 3000);
  close(fd);
  /* HTTP/1.1 as before: chunked, the trailer field after the last chunk. */
  buf_reset(&exp);
  buf_adds(&exp, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-type: application/octet-stream\r\n"
                 "transfer-encoding: chunked\r\ntrailer: x-trailer\r\n\r\n3\r\n");
  exp_file_bytes(&exp, 3);
  buf_adds(&exp, "\r\n0\r\nx-trailer: cbench\r\n\r\n");
  fd = cl_connect(port);
  ROUNDTRIP_S(fd, "GET /fault/trailers?length=3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", &exp);
  EXPECT_CLOSED(fd, 3000);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}
