/* The client layer's h2c session (src/client/h2_client.c) at HTTP/2's protocol edges: for scripted server
 * frames, the events each stream's owner sees (one line per run, as in test_client_h2.c) and what the session
 * writes back (the frame types, with the error code of RST_STREAM and GOAWAY; WINDOW_UPDATE is left out of
 * that line except where a test counts it on purpose). They were written against nghttp2's client session, which
 * the session's own framing replaced; where the two differ the case says what changed and why ("Was:"). */
#include <nghttp2/nghttp2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "ch2_events.h"
#include "common.h"
#include "runner.h"

/* ---- the helpers of test_client_h2.c (static there), a little extended ---- */

#define MAX_HEAD 1024
#define MAX_HEADERS 16
static char hb[CB_CRES_HEADBUF_SIZE(MAX_HEAD, MAX_HEADERS)];

static const char *log_of(sx_t *s) {
  s->log[s->len] = '\0';
  return s->log;
}

static const char *code_name(uint32_t e) {
  static const char *const names[] = {"NO_ERROR",
                                      "PROTOCOL_ERROR",
                                      "INTERNAL_ERROR",
                                      "FLOW_CONTROL_ERROR",
                                      "SETTINGS_TIMEOUT",
                                      "STREAM_CLOSED",
                                      "FRAME_SIZE_ERROR",
                                      "REFUSED_STREAM",
                                      "CANCEL",
                                      "COMPRESSION_ERROR",
                                      "CONNECT_ERROR",
                                      "ENHANCE_YOUR_CALM",
                                      "INADEQUATE_SECURITY",
                                      "HTTP_1_1_REQUIRED"};
  return e < sizeof names / sizeof names[0] ? names[e] : "?";
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* What was written, one entry per frame: "DATA s=1 n=10 ES|", "HEADERS s=3|", "RST_STREAM s=1 CANCEL|",
 * "GOAWAY PROTOCOL_ERROR|", "SETTINGS ACK|", "PING ACK|". WINDOW_UPDATE is left out, its increments added up in
 * *wu0 (the connection's) and *wu1 (the streams'), when given. */
static void wrote_str(const uint8_t *out, size_t n, char *buf, size_t cap, uint64_t *wu0, uint64_t *wu1) {
  size_t bl = 0;
  buf[0] = '\0';
  size_t at = 0;
  if (n >= 24 && memcmp(out, "PRI * HTTP/2.0", 14) == 0) at = 24;
  for (; at + 9 <= n;) {
    size_t len = (size_t)out[at] << 16 | (size_t)out[at + 1] << 8 | out[at + 2];
    uint8_t type = out[at + 3], flags = out[at + 4];
    int32_t sid = (int32_t)(be32(out + at + 5) & 0x7fffffff);
    const uint8_t *p = out + at + 9;
    ASSERT_LE(at + 9 + len, n);
    int k = 0;
    switch (type) {
      case NGHTTP2_DATA:
        k = snprintf(buf + bl, cap - bl, "DATA s=%d n=%zu%s|", (int)sid, len,
                     flags & NGHTTP2_FLAG_END_STREAM ? " ES" : "");
        break;
      case NGHTTP2_HEADERS:
        k = snprintf(buf + bl, cap - bl, "HEADERS s=%d%s|", (int)sid, flags & NGHTTP2_FLAG_END_STREAM ? " ES" : "");
        break;
      case NGHTTP2_RST_STREAM:
        ASSERT_EQ(len, (size_t)4);
        k = snprintf(buf + bl, cap - bl, "RST_STREAM s=%d %s|", (int)sid, code_name(be32(p)));
        break;
      case NGHTTP2_GOAWAY:
        ASSERT_GE(len, (size_t)8);
        k = snprintf(buf + bl, cap - bl, "GOAWAY %s|", code_name(be32(p + 4)));
        break;
      case NGHTTP2_SETTINGS:
        k = snprintf(buf + bl, cap - bl, "SETTINGS%s|", flags & NGHTTP2_FLAG_ACK ? " ACK" : "");
        break;
      case NGHTTP2_PING:
        k = snprintf(buf + bl, cap - bl, "PING%s|", flags & NGHTTP2_FLAG_ACK ? " ACK" : "");
        break;
      case NGHTTP2_WINDOW_UPDATE:
        ASSERT_EQ(len, (size_t)4);
        if (sid == 0 && wu0) *wu0 += be32(p) & 0x7fffffff;
        if (sid != 0 && wu1) *wu1 += be32(p) & 0x7fffffff;
        break;
      default:
        k = snprintf(buf + bl, cap - bl, "type%u s=%d|", type, (int)sid);
        break;
    }
    ASSERT(k >= 0 && (size_t)k < cap - bl);
    bl += (size_t)k;
    at += 9 + len;
  }
  ASSERT_EQ(at, n);
}

/* A session with conn_window, its preface taken; when settings is not NULL, the server's SETTINGS (that payload)
 * fed and the ACK taken. */
static void open_conn(cb_ch2_t *c, uint32_t conn_window, const void *settings, size_t slen) {
  cb_ch2_limits_t lim = {.max_head = MAX_HEAD, .max_headers = MAX_HEADERS, .conn_window = conn_window};
  ASSERT_EQ(cb_ch2_init(c, &sx_callbacks, NULL, &lim, hb, sizeof hb, cbt_plain_mem()), 0);
  static uint8_t out[1024], in[256];
  ch2_pull_all(c, out, sizeof out);
  if (settings == NULL) return;
  ASSERT_LE(slen, sizeof in - 9);
  size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, settings, slen);
  ASSERT_EQ(cb_ch2_feed(c, (const char *)in, n), 0);
  n = ch2_pull_all(c, out, sizeof out);
  char w[256];
  wrote_str(out, n, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "SETTINGS ACK|");
}

/* A request (GET or HEAD, a body when has_body) with s as its owner, and its HEADERS written (taken). */
static void submit(cb_ch2_t *c, sx_t *s, const char *method, int has_body, int32_t want_id) {
  memset(s, 0, sizeof *s);
  s->c = c;
  cb_ch2_req_t q = {.method = method,
                    .method_len = strlen(method),
                    .path = "/p",
                    .path_len = 2,
                    .authority = "h:1",
                    .authority_len = 3,
                    .has_body = has_body};
  s->id = cb_ch2_submit(c, &q, s);
  ASSERT_EQ(s->id, want_id);
}

/* Feeds n bytes and takes what is written: *rc cb_ch2_feed's value, w the written line. */
static void feed_pull(cb_ch2_t *c, const uint8_t *in, size_t n, int *rc, char *w, size_t wcap, uint64_t *wu0,
                      uint64_t *wu1) {
  static uint8_t out[1 << 18];
  *rc = cb_ch2_feed(c, (const char *)in, n);
  size_t o = ch2_pull_all(c, out, sizeof out);
  wrote_str(out, o, w, wcap, wu0, wu1);
}

/* A connection error: the feed failed (or the session found it as it wrote), the session is done, and it took
 * no new stream. */
static void assert_conn_err(const cb_ch2_t *c, int rc) {
  ASSERT(rc == CB_CH2_E_BAD || c->bad);
  ASSERT_EQ(cb_ch2_done(c), 1);
  ASSERT_EQ(cb_ch2_can_submit(c), 0);
}

static void assert_conn_ok(const cb_ch2_t *c, int rc) {
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(c->bad, 0);
}

/* ---- table-driven cases: one request (stream 1), the server's SETTINGS, then the case's frames ---- */

#define EH NGHTTP2_FLAG_END_HEADERS
#define ES NGHTTP2_FLAG_END_STREAM
#define P(s) s, sizeof(s) - 1

typedef struct {
  uint8_t type, flags;
  int32_t sid;
  const char *p; /* NULL: no more frames */
  size_t len;
} frm_t;

typedef struct {
  const char *what;
  const char *method; /* NULL: GET */
  frm_t f[5];
  const char *log;   /* stream 1's events */
  const char *wrote; /* what the session wrote after the frames */
  int conn_err;      /* 1: a connection error (GOAWAY written, session done) */
} edge_t;

static void run_cases(const edge_t *cases, size_t ncases) {
  for (size_t i = 0; i < ncases; i++) {
    const edge_t *e = &cases[i];
    cb_ch2_t c;
    sx_t s;
    open_conn(&c, 1 << 20, "", 0);
    submit(&c, &s, e->method ? e->method : "GET", 0, 1);
    static uint8_t out[4096], in[4096];
    ch2_pull_all(&c, out, sizeof out);
    size_t n = 0;
    for (int k = 0; k < 5 && e->f[k].p != NULL; k++) {
      ASSERT_LE(n + 9 + e->f[k].len, sizeof in);
      n += ch2_frame(in + n, e->f[k].type, e->f[k].flags, e->f[k].sid, e->f[k].p, e->f[k].len);
    }
    int rc;
    char w[512];
    feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
    const char *l = log_of(&s);
    if (strcmp(l, e->log) != 0 || strcmp(w, e->wrote) != 0) cbt_log("case: %s", e->what);
    ASSERT_STR_EQ(l, e->log);
    ASSERT_STR_EQ(w, e->wrote);
    if ((rc == CB_CH2_E_BAD || c.bad) != e->conn_err) cbt_log("case: %s", e->what);
    if (e->conn_err)
      assert_conn_err(&c, rc);
    else
      assert_conn_ok(&c, rc);
    cb_ch2_free(&c);
  }
}

#define RUN(t) run_cases(t, sizeof t / sizeof t[0])

/* HPACK pieces: :status 200 (static index 8), 204 (9), 304 (11); literal fields without indexing. */
#define H200 "\x88"
#define XA1         \
  "\x00\x03x-a\x01" \
  "1"
#define CL(v) "\x0f\x0d\x01" v /* content-length, one digit (static index 28) */
#define PADDED NGHTTP2_FLAG_PADDED
#define PRIO NGHTTP2_FLAG_PRIORITY
#define END \
  { 0, 0, 0, NULL, 0 }

/* 1-3: padding, the PRIORITY flag, CONTINUATION. */
TEST(client_h2_edge_framing) {
  static const edge_t cases[] = {
      /* Padding is taken off: the events are those of the frames without it. */
      {"headers padded",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES | PADDED, 1, P("\x03" H200 XA1 "\0\0\0")}, END},
       "head 200 [x-a: 1]|end|",
       "",
       0},
      {"data padded",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)}, {NGHTTP2_DATA, ES | PADDED, 1, P("\x04hello\0\0\0\0")}, END},
       "head 200|data hello|end|",
       "",
       0},
      {"data padded, pad 0",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_DATA, ES | PADDED, 1,
         P("\x00"
           "ab")},
        END},
       "head 200|data ab|end|",
       "",
       0},
      /* A pad length that leaves no room (>= the payload's length): a connection PROTOCOL_ERROR. */
      {"headers pad too long",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES | PADDED, 1, P("\x02" H200)}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"data pad = payload length",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_DATA, ES | PADDED, 1,
         P("\x03"
           "ab")},
        END},
       "head 200|",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"data pad > payload length",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_DATA, ES | PADDED, 1,
         P("\x04"
           "ab")},
        END},
       "head 200|",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      /* Padding that fills all but the pad length byte: no data bytes, no data event. */
      {"data all padding",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_DATA, ES | PADDED, 1,
         P("\x02"
           "ab")},
        END},
       "head 200|end|",
       "",
       0},
      /* The PRIORITY flag's 5 bytes (dependency, weight) are skipped. */
      {"headers priority",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES | PRIO, 1, P("\0\0\0\0\x0f" H200 XA1)}, END},
       "head 200 [x-a: 1]|end|",
       "",
       0},
      {"headers priority padded",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES | PRIO | PADDED, 1, P("\x02\x80\0\0\0\xff" H200 XA1 "\0\0")}, END},
       "head 200 [x-a: 1]|end|",
       "",
       0},
      /* A head in HEADERS and two CONTINUATION frames: one head event with every field. */
      {"continuation x2",
       NULL,
       {{NGHTTP2_HEADERS, ES, 1, P(H200)},
        {NGHTTP2_CONTINUATION, 0, 1, P(XA1)},
        {NGHTTP2_CONTINUATION, EH, 1,
         P("\x00\x03x-b\x01"
           "2")},
        END},
       "head 200 [x-a: 1] [x-b: 2]|end|",
       "",
       0},
      /* A field split across the frames. */
      {"continuation splits a field",
       NULL,
       {{NGHTTP2_HEADERS, ES, 1, P(H200 "\x00\x03x-")},
        {NGHTTP2_CONTINUATION, EH, 1,
         P("a\x01"
           "1")},
        END},
       "head 200 [x-a: 1]|end|",
       "",
       0},
      /* Another frame where a CONTINUATION must come: a connection PROTOCOL_ERROR. */
      {"headers then data",
       NULL,
       {{NGHTTP2_HEADERS, 0, 1, P(H200)}, {NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"headers then ping",
       NULL,
       {{NGHTTP2_HEADERS, 0, 1, P(H200)}, {NGHTTP2_PING, 0, 0, P("12345678")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"continuation on another stream",
       NULL,
       {{NGHTTP2_HEADERS, 0, 1, P(H200)}, {NGHTTP2_CONTINUATION, EH, 3, P(XA1)}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"continuation alone", NULL, {{NGHTTP2_CONTINUATION, EH, 1, P(H200)}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"continuation after a complete head",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)}, {NGHTTP2_CONTINUATION, EH, 1, P(XA1)}, END},
       "head 200|",
       "GOAWAY PROTOCOL_ERROR|",
       1},
  };
  RUN(cases);
}

/* 4: the response's header fields as HTTP/2 and HTTP semantics check them (RFC 9113 8.2, 8.3): a malformed
 * response resets its stream (PROTOCOL_ERROR, told as "bad response"), or the field is dropped. */
TEST(client_h2_edge_header_validation) {
#define HD(block) \
  { {NGHTTP2_HEADERS, EH | ES, 1, P(block)}, END }
  static const edge_t cases[] = {
      {"name uppercase", NULL,
       HD(H200 "\x00\x03X-A\x01"
               "1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"name with space", NULL,
       HD(H200 "\x00\x03x a\x01"
               "1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"name with colon inside", NULL,
       HD(H200 "\x00\x03x:a\x01"
               "1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"name with DEL", NULL,
       HD(H200 "\x00\x03x\x7f"
               "a\x01"
               "1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"name empty", NULL,
       HD(H200 "\x00\x00\x01"
               "1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value with CR", NULL,
       HD(H200 "\x00\x03x-a\x03"
               "a\rb"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value with LF", NULL,
       HD(H200 "\x00\x03x-a\x03"
               "a\nb"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value with NUL", NULL,
       HD(H200 "\x00\x03x-a\x03"
               "a\0b"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value leading space", NULL,
       HD(H200 "\x00\x03x-a\x02"
               " a"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value trailing space", NULL,
       HD(H200 "\x00\x03x-a\x02"
               "a "),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value leading tab", NULL,
       HD(H200 "\x00\x03x-a\x02"
               "\ta"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value trailing tab", NULL,
       HD(H200 "\x00\x03x-a\x02"
               "a\t"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"value inner space and tab", NULL,
       HD(H200 "\x00\x03x-a\x04"
               "a \tb"),
       "head 200 [x-a: a \tb]|end|", "", 0},
      {"value empty", NULL, HD(H200 "\x00\x03x-a\x00"), "head 200 [x-a: ]|end|", "", 0},
      {"pseudo after regular", NULL, HD(XA1 H200), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":path in a response", NULL, HD(H200 "\x84"), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":foo", NULL,
       HD(H200 "\x00\x04:foo\x01"
               "1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"duplicate :status same", NULL, HD(H200 H200), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"duplicate :status other", NULL, HD(H200 "\x8d"), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"no :status", NULL, HD(XA1), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":status 2 digits", NULL,
       HD("\x08\x02"
          "20"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":status 4 digits", NULL,
       HD("\x08\x04"
          "2000"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":status non-digit", NULL,
       HD("\x08\x03"
          "2x0"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":status empty", NULL, HD("\x08\x00"), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {":status 999", NULL,
       HD("\x08\x03"
          "999"),
       "head 999|end|", "", 0},
      {"connection", NULL,
       HD(H200 "\x00\x0a"
               "connection\x05"
               "close"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"keep-alive", NULL,
       HD(H200 "\x00\x0a"
               "keep-alive\x01"
               "5"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"proxy-connection", NULL,
       HD(H200 "\x00\x10proxy-connection\x05"
               "close"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"transfer-encoding", NULL,
       HD(H200 "\x00\x11transfer-encoding\x07"
               "chunked"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"upgrade", NULL, HD(H200 "\x00\x07upgrade\x03h2c"), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"te: trailers", NULL, HD(H200 "\x00\x02te\x08trailers"), "head 200 [te: trailers]|end|", "", 0},
      {"te: gzip", NULL, HD(H200 "\x00\x02te\x04gzip"), "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"host", NULL, HD(H200 "\x00\x04host\x01h"), "head 200 [host: h]|end|", "", 0},
      {"content-length non-numeric", NULL,
       HD(H200 "\x0f\x0d\x03"
               "abc"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"content-length negative", NULL,
       HD(H200 "\x0f\x0d\x02"
               "-1"),
       "close bad response|", "RST_STREAM s=1 PROTOCOL_ERROR|", 0},
      {"content-length same twice",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("5") CL("5"))}, {NGHTTP2_DATA, ES, 1, P("hello")}, END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"content-length differing",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("5") CL("6"))}, {NGHTTP2_DATA, ES, 1, P("hello")}, END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"content-length 0 and no data", NULL, HD(H200 CL("0")), "head 200 [content-length: 0]|end|", "", 0},
      /* Trailers: HEADERS after the head (with or without DATA between). */
      {"trailers",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_HEADERS, EH | ES, 1,
         P("\x00\x03x-t\x01"
           "2")},
        END},
       "head 200|trailers [x-t: 2]|end|",
       "",
       0},
      {"trailers with :status",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)}, {NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, END},
       "head 200|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"trailers with :foo",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_HEADERS, EH | ES, 1,
         P("\x00\x04:foo\x01"
           "1")},
        END},
       "head 200|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"trailers without END_STREAM",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_DATA, 0, 1, P("ab")},
        {NGHTTP2_HEADERS, EH, 1,
         P("\x00\x03x-t\x01"
           "2")},
        END},
       "head 200|data ab|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"trailers uppercase name",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)},
        {NGHTTP2_HEADERS, EH | ES, 1,
         P("\x00\x03X-T\x01"
           "2")},
        END},
       "head 200|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"empty trailers",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)}, {NGHTTP2_HEADERS, EH | ES, 1, P("")}, END},
       "head 200|trailers|end|",
       "",
       0},
  };
#undef HD
  RUN(cases);
}

/* 5, 6: content-length against the DATA that came, for answers that have no body; interim (1xx) heads. */
TEST(client_h2_edge_content_length_and_interim) {
  static const edge_t cases[] = {
      {"cl 5, data 3",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("5"))}, {NGHTTP2_DATA, ES, 1, P("abc")}, END},
       /* Was: the last DATA handed over, then the reset; now the frame that breaks the length is not. */
       "head 200 [content-length: 5]|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"cl 5, data 3 then HEADERS ending",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("5"))},
        {NGHTTP2_DATA, 0, 1, P("abc")},
        {NGHTTP2_HEADERS, EH | ES, 1,
         P("\x00\x03x-t\x01"
           "2")},
        END},
       "head 200 [content-length: 5]|data abc|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"cl 2, data 3",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("2"))}, {NGHTTP2_DATA, ES, 1, P("abc")}, END},
       "head 200 [content-length: 2]|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"cl 2, data 1+2",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("2"))}, {NGHTTP2_DATA, 0, 1, P("a")}, {NGHTTP2_DATA, ES, 1, P("bc")}, END},
       "head 200 [content-length: 2]|data a|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"cl 3, data 3",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("3"))}, {NGHTTP2_DATA, ES, 1, P("abc")}, END},
       "head 200 [content-length: 3]|data abc|end|",
       "",
       0},
      {"204 cl 0", NULL, {{NGHTTP2_HEADERS, EH | ES, 1, P("\x89" CL("0"))}, END}, "head 204|end|", "", 0},
      {"204 cl 5",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P("\x89" CL("5"))}, END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"204 with data",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P("\x89")}, {NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "head 204|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"HEAD cl 9",
       "HEAD",
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200 CL("9"))}, END},
       "head 200 [content-length: 9]|end|",
       "",
       0},
      {"HEAD cl 9 with data",
       "HEAD",
       {{NGHTTP2_HEADERS, EH, 1, P(H200 CL("9"))}, {NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "head 200 [content-length: 9]|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"304 cl 9",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P("\x8b" CL("9"))}, END},
       "head 304 [content-length: 9]|end|",
       "",
       0},
      {"304 with data",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P("\x8b")}, {NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "head 304|close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"100 with END_STREAM",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1,
         P("\x08\x03"
           "100")},
        END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"103 with END_STREAM",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1,
         P("\x08\x03"
           "103")},
        END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"100, 103, 200",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1,
         P("\x08\x03"
           "100")},
        {NGHTTP2_HEADERS, EH, 1,
         P("\x08\x03"
           "103" XA1)},
        {NGHTTP2_HEADERS, EH | ES, 1,
         P(H200 "\x00\x03x-b\x01"
                "2")},
        END},
       "head 200 [x-b: 2]|end|",
       "",
       0},
      {"100 then data",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1,
         P("\x08\x03"
           "100")},
        {NGHTTP2_DATA, ES, 1, P("ab")},
        END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
  };
  RUN(cases);
}

/* 7, 8: frames on streams they have no place on: before the head, on stream 0, idle or server-initiated
 * streams, PUSH_PROMISE (push is off), and after the stream ended. */
TEST(client_h2_edge_wrong_stream) {
  static const edge_t cases[] = {
      /* Was: a connection error; a malformed answer is a stream error (RFC 9113 8.1.1). */
      {"data before headers",
       NULL,
       {{NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"data on stream 0", NULL, {{NGHTTP2_DATA, ES, 0, P("ab")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"data on idle 3", NULL, {{NGHTTP2_DATA, ES, 3, P("ab")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"data on even 2", NULL, {{NGHTTP2_DATA, ES, 2, P("ab")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"headers on even 2", NULL, {{NGHTTP2_HEADERS, EH | ES, 2, P(H200)}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"headers on idle 5", NULL, {{NGHTTP2_HEADERS, EH | ES, 5, P(H200)}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"headers on stream 0", NULL, {{NGHTTP2_HEADERS, EH | ES, 0, P(H200)}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      /* Before the server acknowledged the client's SETTINGS, and after. Was: before, the pushed stream was
       * cancelled. The client's SETTINGS (ENABLE_PUSH 0) come ahead of its first request, so a server has them
       * before it could push for one (RFC 9113 6.5.2, 8.4): a connection error either way. */
      {"push_promise before settings ack",
       NULL,
       {{NGHTTP2_PUSH_PROMISE, EH, 1, P("\0\0\0\x02\x82\x86\x84")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"push_promise",
       NULL,
       {{NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, P("")},
        {NGHTTP2_PUSH_PROMISE, EH, 1, P("\0\0\0\x02\x82\x86\x84")},
        END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"data after end",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, {NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "head 200|end|",
       "",
       0},
      {"data after end by data",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)}, {NGHTTP2_DATA, ES, 1, P("ab")}, {NGHTTP2_DATA, 0, 1, P("cd")}, END},
       "head 200|data ab|end|",
       "",
       0},
      {"headers after end",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, {NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, END},
       "head 200|end|",
       "",
       0},
      {"rst after end",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, {NGHTTP2_RST_STREAM, 0, 1, P("\0\0\0\x08")}, END},
       "head 200|end|",
       "",
       0},
  };
  RUN(cases);
}

/* 9-15: control frames of the wrong size, on the wrong stream, or with wrong values. */
TEST(client_h2_edge_control_frames) {
  static const edge_t cases[] = {
      {"settings length 5",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x03\0\0\0")}, END},
       "",
       "GOAWAY FRAME_SIZE_ERROR|",
       1},
      {"settings ack with payload",
       NULL,
       {{NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, P("\0\x03\0\0\0\x01")}, END},
       "",
       "GOAWAY FRAME_SIZE_ERROR|",
       1},
      {"settings on stream 1", NULL, {{NGHTTP2_SETTINGS, 0, 1, P("")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"settings enable_push 1",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x02\0\0\0\x01")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"settings enable_push 2",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x02\0\0\0\x02")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"settings window 2^31",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x04\x80\0\0\0")}, END},
       "",
       "GOAWAY FLOW_CONTROL_ERROR|",
       1},
      {"settings window 2^31-1",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x04\x7f\xff\xff\xff")}, END},
       "",
       "SETTINGS ACK|",
       0},
      {"settings max frame 100",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x05\0\0\0\x64")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"settings max frame 2^24",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x05\x01\0\0\0")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"settings max frame 2^24-1",
       NULL,
       {{NGHTTP2_SETTINGS, 0, 0, P("\0\x05\0\xff\xff\xff")}, END},
       "",
       "SETTINGS ACK|",
       0},
      {"settings unknown id", NULL, {{NGHTTP2_SETTINGS, 0, 0, P("\0\x99\0\0\0\x01")}, END}, "", "SETTINGS ACK|", 0},
      {"settings ack unexpected", NULL, {{NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, P("")}, END}, "", "", 0},
      {"ping length 7", NULL, {{NGHTTP2_PING, 0, 0, P("1234567")}, END}, "", "GOAWAY FRAME_SIZE_ERROR|", 1},
      {"ping on stream 1", NULL, {{NGHTTP2_PING, 0, 1, P("12345678")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"ping ack from server", NULL, {{NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, P("12345678")}, END}, "", "", 0},
      /* Was: a connection error; RFC 9113 6.9 makes it a stream error. */
      {"window_update 0 on stream 1",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 1, P("\0\0\0\0")}, END},
       "close bad response|",
       "RST_STREAM s=1 PROTOCOL_ERROR|",
       0},
      {"window_update 0 on stream 0",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 0, P("\0\0\0\0")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"window_update overflow on 0",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 0, P("\x7f\xff\xff\xff")}, END},
       "",
       "GOAWAY FLOW_CONTROL_ERROR|",
       1},
      /* A stream error (RFC 9113 6.9.1). Was: the connection counted as failed too, without a GOAWAY. */
      {"window_update overflow on 1",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 1, P("\x7f\xff\xff\xff")}, END},
       "close bad response|",
       "RST_STREAM s=1 FLOW_CONTROL_ERROR|",
       0},
      {"window_update length 3",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 0, P("\0\0\x01")}, END},
       "",
       "GOAWAY FRAME_SIZE_ERROR|",
       1},
      {"window_update length 3 on 1",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 1, P("\0\0\x01")}, END},
       "",
       "GOAWAY FRAME_SIZE_ERROR|",
       1},
      {"window_update on idle 3",
       NULL,
       {{NGHTTP2_WINDOW_UPDATE, 0, 3, P("\0\0\0\x01")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"rst_stream on 0", NULL, {{NGHTTP2_RST_STREAM, 0, 0, P("\0\0\0\x08")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"rst_stream length 3",
       NULL,
       {{NGHTTP2_RST_STREAM, 0, 1, P("\0\0\x08")}, END},
       "",
       "GOAWAY FRAME_SIZE_ERROR|",
       1},
      {"rst_stream on idle 3",
       NULL,
       {{NGHTTP2_RST_STREAM, 0, 3, P("\0\0\0\x08")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"goaway length 7",
       NULL,
       {{NGHTTP2_GOAWAY, 0, 0, P("\0\0\0\x01\0\0\0")}, END},
       "",
       "GOAWAY FRAME_SIZE_ERROR|",
       1},
      {"goaway on stream 1",
       NULL,
       {{NGHTTP2_GOAWAY, 0, 1, P("\0\0\0\x01\0\0\0\0")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"priority on 1",
       NULL,
       {{NGHTTP2_PRIORITY, 0, 1, P("\0\0\0\0\x0f")}, {NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, END},
       "head 200|end|",
       "",
       0},
      {"priority on idle 7",
       NULL,
       {{NGHTTP2_PRIORITY, 0, 7, P("\0\0\0\0\x0f")}, {NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, END},
       "head 200|end|",
       "",
       0},
      {"priority length 4", NULL, {{NGHTTP2_PRIORITY, 0, 1, P("\0\0\0\0")}, END}, "", "GOAWAY FRAME_SIZE_ERROR|", 1},
      {"priority on 0", NULL, {{NGHTTP2_PRIORITY, 0, 0, P("\0\0\0\0\x0f")}, END}, "", "GOAWAY PROTOCOL_ERROR|", 1},
      {"priority on itself",
       NULL,
       {{NGHTTP2_PRIORITY, 0, 1, P("\0\0\0\x01\x0f")}, END},
       "",
       "GOAWAY PROTOCOL_ERROR|",
       1},
      {"unknown type on 0",
       NULL,
       {{0xfa, 0xff, 0, P("whatever")}, {NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, END},
       "head 200|end|",
       "",
       0},
      {"unknown type on 1",
       NULL,
       {{NGHTTP2_HEADERS, EH, 1, P(H200)}, {0xfa, 0, 1, P("whatever")}, {NGHTTP2_DATA, ES, 1, P("ab")}, END},
       "head 200|data ab|end|",
       "",
       0},
      {"unknown type on idle 9",
       NULL,
       {{0xfa, 0, 9, P("")}, {NGHTTP2_HEADERS, EH | ES, 1, P(H200)}, END},
       "head 200|end|",
       "",
       0},
  };
  RUN(cases);
}

/* 19: HPACK errors: a connection COMPRESSION_ERROR. */
TEST(client_h2_edge_hpack_errors) {
  static const edge_t cases[] = {
      {"index 254", NULL, {{NGHTTP2_HEADERS, EH | ES, 1, P("\xff\x7f")}, END}, "", "GOAWAY COMPRESSION_ERROR|", 1},
      {"index 0", NULL, {{NGHTTP2_HEADERS, EH | ES, 1, P("\x80")}, END}, "", "GOAWAY COMPRESSION_ERROR|", 1},
      {"index 62 (empty dynamic table)",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200 "\xbe")}, END},
       "",
       "GOAWAY COMPRESSION_ERROR|",
       1},
      {"size update over 4096",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P("\x3f\xe2\x1f" H200)}, END},
       "",
       "GOAWAY COMPRESSION_ERROR|",
       1},
      {"size update after a field",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200 "\x20")}, END},
       "",
       "GOAWAY COMPRESSION_ERROR|",
       1},
      {"truncated literal",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1, P(H200 "\x00\x03x-")}, END},
       "",
       "GOAWAY COMPRESSION_ERROR|",
       1},
      {"bad huffman (EOS)",
       NULL,
       {{NGHTTP2_HEADERS, EH | ES, 1,
         P(H200 "\x00\x84\xff\xff\xff\xff\x01"
                "1")},
        END},
       "",
       "GOAWAY COMPRESSION_ERROR|",
       1},
  };
  RUN(cases);
}

/* ---- cases of their own shape ---- */

static void pull_str(cb_ch2_t *c, char *w, size_t cap, uint64_t *wu0, uint64_t *wu1) {
  static uint8_t out[1 << 18];
  size_t o = ch2_pull_all(c, out, sizeof out);
  wrote_str(out, o, w, cap, wu0, wu1);
}

/* The owner's events, what was written, and whether the connection failed. */
static void expect(cb_ch2_t *c, int rc, sx_t *s, const char *w, const char *log, const char *wrote, int conn_err) {
  ASSERT_STR_EQ(log_of(s), log);
  ASSERT_STR_EQ(w, wrote);
  if (conn_err)
    assert_conn_err(c, rc);
  else
    assert_conn_ok(c, rc);
}

/* 1: the padding of DATA counts against both windows and goes back with the data: a window's worth (65,535
 * bytes of payload, 404 of them pad length and padding) consumed by the owner, and both the connection's and
 * the stream's WINDOW_UPDATEs add up to the whole window. */
TEST(client_h2_edge_padding_counts_in_windows) {
  cb_ch2_t c;
  sx_t s;
  open_conn(&c, 65535, "", 0);
  submit(&c, &s, "GET", 0, 1);
  s.consume = 1;
  static uint8_t in[70000], pay[16384];
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  size_t n = ch2_frame(in, NGHTTP2_HEADERS, EH, 1, H200, 1);
  size_t sizes[] = {16384, 16384, 16384, 16383};
  memset(pay, 'd', sizeof pay);
  for (int i = 0; i < 4; i++) {
    pay[0] = 100; /* pad length */
    memset(pay + sizes[i] - 100, 0, 100);
    n += ch2_frame(in + n, NGHTTP2_DATA, PADDED, 1, pay, sizes[i]);
    memset(pay + sizes[i] - 100, 'd', 100);
  }
  int rc;
  uint64_t wu0 = 0, wu1 = 0;
  feed_pull(&c, in, n, &rc, w, sizeof w, &wu0, &wu1);
  expect(&c, rc, &s, w, "head 200|data 16283|data 16283|data 16283|data 16282|", "", 0);
  /* The window was used up: a session that kept the padding back would leave the peer stuck for good. */
  ASSERT_EQ(wu0, (uint64_t)65535);
  ASSERT_EQ(wu1, (uint64_t)65535);
  cb_ch2_free(&c);
}

/* 3: one header block in HEADERS and 8 CONTINUATION frames of one byte each: one head; 9 or 20: over the limit
 * (8 a block, as nghttp2's CVE-2024-28182 fix has it), a connection error inside cb_ch2_feed, no event, and a
 * GOAWAY (ENHANCE_YOUR_CALM) that says why. Was: nothing written. */
TEST(client_h2_edge_many_continuations) {
  static const int counts[] = {8, 9, 20};
  for (int k = 0; k < 3; k++) {
    int nc = counts[k];
    cb_ch2_t c;
    sx_t s;
    open_conn(&c, 1 << 20, "", 0);
    submit(&c, &s, "GET", 0, 1);
    char w[512];
    pull_str(&c, w, sizeof w, NULL, NULL);
    static uint8_t in[1024];
    const uint8_t first[] = {0x88, 0x00, 0x03, 'x', '-', 'a', (uint8_t)nc};
    size_t n = ch2_frame(in, NGHTTP2_HEADERS, ES, 1, first, sizeof first);
    for (int i = 0; i < nc; i++) n += ch2_frame(in + n, NGHTTP2_CONTINUATION, i == nc - 1 ? EH : 0, 1, "v", 1);
    int rc;
    feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
    if (nc == 8)
      expect(&c, rc, &s, w, "head 200 [x-a: vvvvvvvv]|end|", "", 0);
    else {
      expect(&c, rc, &s, w, "", "GOAWAY ENHANCE_YOUR_CALM|", 1);
      ASSERT_EQ(rc, CB_CH2_E_BAD);
    }
    cb_ch2_free(&c);
  }
}

/* 9: the server's first frame is not SETTINGS (a PING), then its SETTINGS. */
TEST(client_h2_edge_settings_not_first) {
  cb_ch2_t c;
  sx_t s;
  open_conn(&c, 1 << 20, NULL, 0);
  submit(&c, &s, "GET", 0, 1);
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  uint8_t in[64];
  size_t n = ch2_frame(in, NGHTTP2_PING, 0, 0, "12345678", 8);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  /* The preface's SETTINGS must come first (RFC 9113 3.4): a connection PROTOCOL_ERROR. */
  expect(&c, rc, &s, w, "", "GOAWAY PROTOCOL_ERROR|", 1);
  n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH | ES, 1, H200, 1);
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  /* Nothing more is read. */
  expect(&c, rc, &s, w, "", "", 1);
  ASSERT_EQ(rc, CB_CH2_E_BAD);
  cb_ch2_free(&c);
}

/* 9: SETTINGS_MAX_CONCURRENT_STREAMS 1 with a stream open: no new stream until it ends. */
TEST(client_h2_edge_max_concurrent_streams_1) {
  cb_ch2_t c;
  sx_t s;
  open_conn(&c, 1 << 20, NULL, 0);
  ASSERT_EQ(cb_ch2_can_submit(&c), 1); /* 100 assumed until the SETTINGS come */
  ASSERT_EQ(cb_ch2_max_streams(&c), 0u);
  submit(&c, &s, "GET", 0, 1);
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  uint8_t in[64];
  static const uint8_t mcs1[] = {0, 3, 0, 0, 0, 1};
  size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, mcs1, sizeof mcs1);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s, w, "", "SETTINGS ACK|", 0);
  ASSERT_EQ(cb_ch2_can_submit(&c), 0);
  ASSERT_EQ(cb_ch2_max_streams(&c), 1u);
  n = ch2_frame(in, NGHTTP2_HEADERS, EH | ES, 1, H200, 1);
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s, w, "head 200|end|", "", 0);
  ASSERT_EQ(cb_ch2_can_submit(&c), 1);
  ASSERT_EQ(cb_ch2_max_streams(&c), 1u);
  cb_ch2_free(&c);
}

/* 9: SETTINGS_INITIAL_WINDOW_SIZE lowered to 10 before a 100-byte request body goes: 10 bytes go, the rest
 * after a WINDOW_UPDATE of 90 on the stream, with END_STREAM. */
TEST(client_h2_edge_initial_window_lowered) {
  cb_ch2_t c;
  sx_t s;
  open_conn(&c, 1 << 20, "", 0);
  submit(&c, &s, "POST", 1, 1);
  s.body_wait = 1;
  s.body_left = 100;
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "HEADERS s=1|");
  uint8_t in[64];
  static const uint8_t iws10[] = {0, 4, 0, 0, 0, 10};
  size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, iws10, sizeof iws10);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s, w, "", "SETTINGS ACK|", 0);
  s.body_wait = 0;
  cb_ch2_resume(&c, 1);
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "DATA s=1 n=10|");
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "");
  static const uint8_t inc90[] = {0, 0, 0, 90};
  n = ch2_frame(in, NGHTTP2_WINDOW_UPDATE, 0, 1, inc90, 4);
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s, w, "", "DATA s=1 n=90 ES|", 0);
  cb_ch2_free(&c);
}

/* 20: a request body over the connection's send window (65,535): it stops there until the connection's
 * WINDOW_UPDATE (the server's SETTINGS gave streams 1 MiB). */
TEST(client_h2_edge_body_over_connection_window) {
  cb_ch2_t c;
  sx_t s;
  static const uint8_t iws[] = {0, 4, 0, 0x10, 0, 0};
  open_conn(&c, 1 << 20, iws, sizeof iws);
  submit(&c, &s, "POST", 1, 1);
  s.body_left = 70000;
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "HEADERS s=1|DATA s=1 n=16384|DATA s=1 n=16384|DATA s=1 n=16384|DATA s=1 n=16383|");
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "");
  uint8_t in[64];
  static const uint8_t inc[] = {0, 0, 0x27, 0x10}; /* 10,000 */
  size_t n = ch2_frame(in, NGHTTP2_WINDOW_UPDATE, 0, 0, inc, 4);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s, w, "", "DATA s=1 n=4465 ES|", 0);
  cb_ch2_free(&c);
}

/* 10: a PING is answered with a PING ACK carrying the same 8 bytes. */
TEST(client_h2_edge_ping_answered) {
  cb_ch2_t c;
  sx_t s;
  open_conn(&c, 1 << 20, "", 0);
  submit(&c, &s, "GET", 0, 1);
  static uint8_t out[1024];
  ch2_pull_all(&c, out, sizeof out);
  uint8_t in[64], exp[32];
  size_t n = ch2_frame(in, NGHTTP2_PING, 0, 0, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
  ASSERT_EQ(cb_ch2_feed(&c, (const char *)in, n), 0);
  size_t o = ch2_pull_all(&c, out, sizeof out);
  size_t e = ch2_frame(exp, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
  ASSERT_MEM_EQ(out, o, exp, e);
  ASSERT_STR_EQ(log_of(&s), "");
  cb_ch2_free(&c);
}

/* 13: GOAWAY (NO_ERROR) with last stream id 1 while streams 1 and 3 are open. */
TEST(client_h2_edge_goaway_last_stream_1) {
  cb_ch2_t c;
  sx_t s1, s3;
  open_conn(&c, 1 << 20, "", 0);
  submit(&c, &s1, "GET", 0, 1);
  submit(&c, &s3, "GET", 0, 3);
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  uint8_t in[64];
  size_t n = ch2_frame(in, NGHTTP2_GOAWAY, 0, 0, "\0\0\0\x01\0\0\0\0", 8);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  /* Stream 3 is refused (may be sent again), stream 1 goes on; nothing is written back. */
  expect(&c, rc, &s1, w, "", "", 0);
  ASSERT_STR_EQ(log_of(&s3), "close stream refused|");
  ASSERT_EQ(cb_ch2_can_submit(&c), 0);
  ASSERT_EQ(cb_ch2_done(&c), 0);
  n = ch2_frame(in, NGHTTP2_HEADERS, EH | ES, 1, H200, 1);
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s1, w, "head 200|end|", "", 0);
  ASSERT_STR_EQ(log_of(&s3), "close stream refused|");
  ASSERT_EQ(cb_ch2_can_submit(&c), 0);
  ASSERT_EQ(cb_ch2_done(&c), 1); /* GOAWAY and no stream left */
  cb_ch2_free(&c);
}

/* 8: the owner cancels a stream whose answer has begun: the DATA still coming for it is dropped without
 * events, its bytes given back to the connection's window (65,535 bytes of it, then more: no
 * FLOW_CONTROL_ERROR). */
TEST(client_h2_edge_cancelled_stream_data) {
  cb_ch2_t c;
  sx_t s;
  open_conn(&c, 65535, "", 0);
  submit(&c, &s, "GET", 0, 1);
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  static uint8_t in[80000], d[16384];
  memset(d, 'd', sizeof d);
  size_t n = ch2_frame(in, NGHTTP2_HEADERS, EH, 1, H200, 1);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, "ab", 2);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  cb_ch2_consume(&c, 1, 2);
  cb_ch2_cancel(&c, 1);
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(log_of(&s), "head 200|data ab|");
  ASSERT_STR_EQ(w, "RST_STREAM s=1 CANCEL|");
  n = 0;
  for (size_t left = 65535 - 2; left > 0;) {
    size_t k = left < sizeof d ? left : sizeof d;
    n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, d, k);
    left -= k;
  }
  uint64_t wu0 = 0, wu1 = 0;
  feed_pull(&c, in, n, &rc, w, sizeof w, &wu0, &wu1);
  /* The rest of the window's worth: no event, nothing but the connection's WINDOW_UPDATE written (none for
   * the stream). */
  expect(&c, rc, &s, w, "head 200|data ab|", "", 0);
  ASSERT_GT(wu0, (uint64_t)0);
  ASSERT_EQ(wu1, (uint64_t)0);
  n = ch2_frame(in, NGHTTP2_DATA, ES, 1, d, 16384);
  feed_pull(&c, in, n, &rc, w, sizeof w, &wu0, &wu1);
  /* More than the connection's window in all: accepted, so the dropped bytes were given back. */
  expect(&c, rc, &s, w, "head 200|data ab|", "", 0);
  ASSERT_EQ(wu1, (uint64_t)0);
  cb_ch2_free(&c);
}

/* 16: a frame over the default SETTINGS_MAX_FRAME_SIZE (16,384). */
TEST(client_h2_edge_frame_too_big) {
  for (int type = 0; type < 2; type++) {
    cb_ch2_t c;
    sx_t s;
    open_conn(&c, 1 << 20, "", 0);
    submit(&c, &s, "GET", 0, 1);
    char w[512];
    pull_str(&c, w, sizeof w, NULL, NULL);
    static uint8_t in[20000], d[16385];
    memset(d, 'd', sizeof d);
    size_t n = 0;
    if (type == 0) {
      n = ch2_frame(in, NGHTTP2_HEADERS, EH, 1, H200, 1);
      n += ch2_frame(in + n, NGHTTP2_DATA, ES, 1, d, sizeof d);
    } else {
      d[0] = 0x88;
      d[1] = 0x00;
      d[2] = 0x03;
      memcpy(d + 3, "x-a", 3);
      d[6] = 0x7f; /* a value of 127 + 16,250 bytes */
      d[7] = 0xfa;
      d[8] = 0x7e;
      n = ch2_frame(in, NGHTTP2_HEADERS, EH | ES, 1, d, sizeof d);
    }
    int rc;
    feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
    /* A connection FRAME_SIZE_ERROR (the head before it was told). */
    expect(&c, rc, &s, w, type ? "" : "head 200|", "GOAWAY FRAME_SIZE_ERROR|", 1);
    cb_ch2_free(&c);
  }
}

/* A whole answer: SETTINGS, a head with fields, two DATA, trailers. */
static size_t full_answer(uint8_t *in) {
  size_t n = ch2_frame(in, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
  static const char h[] = H200 XA1
      "\x00\x03x-b\x02"
      "22";
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH, 1, h, sizeof h - 1);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, "hel", 3);
  n += ch2_frame(in + n, NGHTTP2_DATA, PADDED, 1, "\x01lo\0", 4);
  static const char t[] =
      "\x00\x03x-t\x01"
      "2";
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH | ES, 1, t, sizeof t - 1);
  return n;
}

/* 17: the answer fed one byte a call gives the same events, and writes the same, as fed whole: a frame cut
 * between reads is gathered and read whole. Was: DATA handed on one byte per event. */
TEST(client_h2_edge_byte_at_a_time) {
  char logs[2][4096], wrote[2][512];
  for (int split = 0; split < 2; split++) {
    cb_ch2_t c;
    sx_t s;
    open_conn(&c, 1 << 20, NULL, 0);
    submit(&c, &s, "GET", 0, 1);
    char w[512];
    pull_str(&c, w, sizeof w, NULL, NULL);
    uint8_t in[256];
    size_t n = full_answer(in);
    if (split)
      for (size_t i = 0; i < n; i++) ASSERT_EQ(cb_ch2_feed(&c, (const char *)in + i, 1), 0);
    else
      ASSERT_EQ(cb_ch2_feed(&c, (const char *)in, n), 0);
    pull_str(&c, wrote[split], sizeof wrote[split], NULL, NULL);
    snprintf(logs[split], sizeof logs[split], "%s", log_of(&s));
    ASSERT_EQ(c.bad, 0);
    cb_ch2_free(&c);
  }
  ASSERT_STR_EQ(logs[0], "head 200 [x-a: 1] [x-b: 22]|data hel|data lo|trailers [x-t: 2]|end|");
  ASSERT_STR_EQ(logs[1], logs[0]);
  ASSERT_STR_EQ(wrote[0], "SETTINGS ACK|");
  ASSERT_STR_EQ(wrote[1], wrote[0]);
}

/* 18: three streams answered frame by frame in turn: each owner gets its own stream's events, in order. */
TEST(client_h2_edge_interleaved_streams) {
  cb_ch2_t c;
  sx_t s[3];
  open_conn(&c, 1 << 20, "", 0);
  for (int i = 0; i < 3; i++) submit(&c, &s[i], "GET", 0, 1 + 2 * i);
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  ASSERT_STR_EQ(w, "HEADERS s=1 ES|HEADERS s=3 ES|HEADERS s=5 ES|");
  static uint8_t in[1024];
  size_t n = 0;
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH, 5, "\x8d", 1); /* 404 */
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH, 1, H200, 1);
  n += ch2_frame(in + n, NGHTTP2_HEADERS, 0, 3, "\x8e", 1); /* 500, its block goes on below */
  n += ch2_frame(in + n, NGHTTP2_CONTINUATION, EH, 3, XA1, sizeof XA1 - 1);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, "a1", 2);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 5, "c1", 2);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 3, "b1", 2);
  n += ch2_frame(in + n, NGHTTP2_DATA, ES, 5, "c2", 2);
  n += ch2_frame(in + n, NGHTTP2_DATA, 0, 1, "a2", 2);
  n += ch2_frame(in + n, NGHTTP2_RST_STREAM, 0, 3, "\0\0\0\x02", 4);
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH | ES, 1,
          "\x00\x03x-t\x01"
          "2",
          7);
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s[0], w, "head 200|data a1|data a2|trailers [x-t: 2]|end|", "", 0);
  ASSERT_STR_EQ(log_of(&s[1]), "head 500 [x-a: 1]|data b1|close stream reset|");
  ASSERT_STR_EQ(log_of(&s[2]), "head 404|data c1|data c2|end|");
  cb_ch2_free(&c);
}

/* 19: HPACK's dynamic table: a size update (to 100) opens the first block, which adds x-d: dyn (literal with
 * incremental indexing); the next answer, on stream 3, names it by index 62. */
TEST(client_h2_edge_hpack_dynamic_table) {
  cb_ch2_t c;
  sx_t s1, s3;
  open_conn(&c, 1 << 20, "", 0);
  submit(&c, &s1, "GET", 0, 1);
  submit(&c, &s3, "GET", 0, 3);
  char w[512];
  pull_str(&c, w, sizeof w, NULL, NULL);
  uint8_t in[256];
  size_t n = ch2_frame(in, NGHTTP2_HEADERS, EH | ES, 1,
                P("\x3f\x45" H200 "\x40\x03x-d\x03"
                  "dyn"));
  n += ch2_frame(in + n, NGHTTP2_HEADERS, EH | ES, 3, P(H200 "\xbe\xbe"));
  int rc;
  feed_pull(&c, in, n, &rc, w, sizeof w, NULL, NULL);
  expect(&c, rc, &s1, w, "head 200 [x-d: dyn]|end|", "", 0);
  ASSERT_STR_EQ(log_of(&s3), "head 200 [x-d: dyn] [x-d: dyn]|end|");
  cb_ch2_free(&c);
}
