/* The proxy's cut answer to an HTTP/2 client (px_fail after the head, src/kinds/proxy.c): what came of the answer
 * is written first, then the stream is reset. The write can itself end the stream (a reset nghttp2 had queued
 * for it and could not send while the output was full): the exchange and its request are released inside that
 * write, and the reset that followed read them freed. Run on a test connection (testing.h), whose output a test
 * stalls and lets drain at chosen points, and a real upstream socket read by the same worker loop. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "common.h"
#include "h2client.h"
#include "testing.h"

/* core.h's CB__OUT_HIGH_WATER: the connection's output queue above which nghttp2's frames wait. */
#define OUT_HIGH_WATER (256 * 1024)
/* A PING's ACK on the wire: a frame header and 8 bytes. */
#define PING_ACK_BYTES 17
/* Body bytes the upstream sends before it fails: the output queue ends a little below its mark. */
#define BODY_SENT 255000

static void sink(void *arg, const char *p, size_t n) { buf_add(arg, p, n); }

static void put_frame(buf_t *b, uint8_t type, uint8_t flags, int32_t sid, const void *payload, size_t len) {
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)len, type, flags, sid);
  buf_add(b, hd, 9);
  if (len) buf_add(b, payload, len);
}

static void put_get(buf_t *b, nghttp2_hd_deflater *def, int32_t sid, const char *path) {
  nghttp2_nv nv[] = {
      {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, NGHTTP2_NV_FLAG_NONE},
      {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, NGHTTP2_NV_FLAG_NONE},
      {(uint8_t *)":authority", (uint8_t *)"x", 10, 1, NGHTTP2_NV_FLAG_NONE},
      {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), NGHTTP2_NV_FLAG_NONE},
  };
  uint8_t block[256];
  ssize_t n = nghttp2_hd_deflate_hd(def, block, sizeof block, nv, 4);
  ASSERT(n > 0);
  put_frame(b, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, sid, block, (size_t)n);
}

static void put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* What the client got on one stream, read off the server's output. */
typedef struct {
  int status;
  size_t body;       /* DATA payload bytes */
  int body_ok;       /* every payload byte was the upstream's 'b' */
  uint32_t rst[4];   /* RST_STREAM codes, in order */
  int nrst;
  int frames_after_rst; /* frames of any type on the stream after its first RST_STREAM */
  int ping_acks;     /* on the connection */
} seen_t;

static void read_output(const buf_t *out, int32_t sid, seen_t *s) {
  memset(s, 0, sizeof *s);
  s->body_ok = 1;
  nghttp2_hd_inflater *inf;
  ASSERT_EQ(nghttp2_hd_inflate_new(&inf), 0);
  size_t o = 0;
  while (o + 9 <= out->len) {
    const uint8_t *h = (const uint8_t *)out->p + o;
    size_t len = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
    uint8_t type = h[3], flags = h[4];
    int32_t id = (int32_t)(((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) & 0x7fffffff);
    ASSERT_LE(o + 9 + len, out->len);
    const uint8_t *p = h + 9;
    if (type == NGHTTP2_PING && (flags & NGHTTP2_FLAG_ACK)) s->ping_acks++;
    if (type == NGHTTP2_HEADERS) { /* every block is inflated: the table stays in step */
      const uint8_t *in = p;
      size_t left = len;
      for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t k = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, left, 1);
        ASSERT(k >= 0);
        in += k;
        left -= (size_t)k;
        if ((fl & NGHTTP2_HD_INFLATE_EMIT) && id == sid && nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0)
          s->status = atoi((const char *)nv.value);
        if (fl & NGHTTP2_HD_INFLATE_FINAL) break;
      }
      nghttp2_hd_inflate_end_headers(inf);
    }
    if (id == sid) {
      if (s->nrst > 0) s->frames_after_rst++;
      if (type == NGHTTP2_DATA) {
        s->body += len;
        for (size_t i = 0; i < len; i++)
          if (p[i] != 'b') s->body_ok = 0;
      }
      if (type == NGHTTP2_RST_STREAM && len == 4 && s->nrst < 4)
        s->rst[s->nrst++] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    o += 9 + len;
  }
  ASSERT_EQ(o, out->len);
  nghttp2_hd_inflate_del(inf);
}

/* Runs the test worker's loop (without blocking) until cond holds, 5 s at most. */
#define RUN_UNTIL(tc, cond)                                                                                           \
  do {                                                                                                                \
    for (int ru_ = 0; ru_ < 5000 && !(cond); ru_++) {                                                                \
      ASSERT_EQ(cb__testconn_run((tc), 0), 0);                                                                        \
      if (!(cond)) usleep(1000);                                                                                      \
    }                                                                                                                 \
    ASSERT(cond);                                                                                                     \
  } while (0)

static int try_accept(int lfd, int *ufd) {
  if (*ufd < 0) *ufd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
  return *ufd >= 0;
}

static int got_request(int ufd, buf_t *req) {
  char b[4096];
  ssize_t n;
  while ((n = read(ufd, b, sizeof b)) > 0) buf_add(req, b, (size_t)n);
  return req->len >= 4 && memmem(req->p, req->len, "\r\n\r\n", 4) != NULL;
}

/* The upstream fails mid-body (it closes) in the loop turn where the client's socket has drained but its writable
 * event has not run, while nghttp2 holds a RST_STREAM for the stream that the full output kept back (the client's
 * WINDOW_UPDATE past the largest window, a stream error, behind PING ACKs that filled the output to its mark).
 * The cut's write sends
 * that RST_STREAM, which ends the stream and releases the request (its h2 stream block freed: 16 spare blocks are
 * kept, the 16 fixture streams before it filled them). The client gets the head, every body byte that came, the
 * PING ACKs and one RST_STREAM(FLOW_CONTROL_ERROR), nothing after it on the stream. The cut's own reset read the
 * released request (a heap use after free; a crash without ASan). */
TEST_T(proxy_abort_h2_stream_closed_by_the_cut_write, 30000) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT(lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  socklen_t al = sizeof a;
  ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", ntohs(a.sin_port));

  buf_t out = {0};
  cb__testconn_t *tc = cb__testconn_new(NULL, sink, &out);
  ASSERT(tc != NULL);
  cb_proxy_t px = {.to = {to, strlen(to)}};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = (cb_str_t){"/x", 2};
  st.response.proxy = &px;
  uint64_t id = 0;
  ASSERT_EQ(cb__testconn_route_add(tc, &st, &id), 0);

  /* The preface, windows that never hold the server back, 16 fixture requests and the proxied one, in one read:
   * their 17 streams are open at once, so the proxied one's block is a fresh one. */
  nghttp2_hd_deflater *def;
  ASSERT_EQ(nghttp2_hd_deflate_new(&def, 4096), 0);
  buf_t in = {0};
  buf_add(&in, H2_PREFACE, H2_PREFACE_LEN);
  uint8_t settings[12] = {0, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0, 0, 0, 0,
                          0, NGHTTP2_SETTINGS_ENABLE_PUSH,         0, 0, 0, 0};
  put_u32(settings + 2, H2_WINDOW_MAX);
  put_frame(&in, NGHTTP2_SETTINGS, 0, 0, settings, sizeof settings);
  uint8_t inc[4];
  put_u32(inc, H2_WINDOW_MAX - 65535);
  put_frame(&in, NGHTTP2_WINDOW_UPDATE, 0, 0, inc, 4);
  for (int32_t sid = 1; sid <= 31; sid += 2) put_get(&in, def, sid, "/hello");
  const int32_t sid = 33;
  put_get(&in, def, sid, "/x");
  ASSERT_EQ(cb__testconn_feed(tc, in.p, in.len), 0);

  int ufd = -1;
  RUN_UNTIL(tc, try_accept(lfd, &ufd));
  buf_t req = {0};
  RUN_UNTIL(tc, got_request(ufd, &req));

  /* The client stops reading; the head and BODY_SENT bytes of a longer body come. */
  ASSERT_EQ(cb__testconn_stall(tc, 1), 0);
  buf_t up = {0};
  buf_adds(&up, "HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n");
  char *body = malloc(BODY_SENT);
  memset(body, 'b', BODY_SENT);
  buf_add(&up, body, BODY_SENT);
  free(body);
  size_t off = 0;
  for (int i = 0; i < 5000 && off < up.len; i++) {
    ssize_t w = write(ufd, up.p + off, up.len - off);
    if (w > 0) off += (size_t)w;
    else ASSERT(errno == EAGAIN);
    ASSERT_EQ(cb__testconn_run(tc, 0), 0);
  }
  ASSERT_EQ(off, up.len);
  RUN_UNTIL(tc, cb__testconn_queued(tc) >= BODY_SENT);
  for (int i = 0; i < 100; i++) ASSERT_EQ(cb__testconn_run(tc, 0), 0); /* nothing more comes */
  size_t q = cb__testconn_queued(tc);
  ASSERT_LT(q, (size_t)OUT_HIGH_WATER); /* below the mark: a socket's connection is still read */

  /* PINGs whose ACKs take the output over its mark, then a WINDOW_UPDATE on the stream that takes its window past
   * 2^31-1: nghttp2 queues RST_STREAM(FLOW_CONTROL_ERROR) behind the ACKs (its urgent frames go first) and cannot
   * send it. */
  int pings = (int)((OUT_HIGH_WATER - q) / PING_ACK_BYTES) + 1;
  ASSERT_LT(pings, 1000); /* nghttp2's limit on queued ACKs */
  buf_reset(&in);
  for (int i = 0; i < pings; i++) {
    uint8_t opaque[8] = {0};
    put_u32(opaque, (uint32_t)i);
    put_frame(&in, NGHTTP2_PING, 0, 0, opaque, 8);
  }
  put_u32(inc, H2_WINDOW_MAX);
  put_frame(&in, NGHTTP2_WINDOW_UPDATE, 0, sid, inc, 4);
  ASSERT_EQ(cb__testconn_feed(tc, in.p, in.len), 0);
  ASSERT_GE(cb__testconn_queued(tc), (size_t)OUT_HIGH_WATER);

  /* The client's socket drains, and in the same turn the upstream closes mid-body: the cut comes first. */
  ASSERT_EQ(cb__testconn_unstall_unseen(tc), 0);
  close(ufd);
  RUN_UNTIL(tc, cb__testconn_queued(tc) == 0 && out.len > 0);
  for (int i = 0; i < 200; i++) { /* the upstream's close is surely read by then */
    ASSERT_EQ(cb__testconn_run(tc, 0), 0);
    usleep(1000);
  }

  seen_t s;
  read_output(&out, sid, &s);
  ASSERT_EQ(s.status, 200);
  ASSERT_EQ(s.body, (size_t)BODY_SENT);
  ASSERT_EQ(s.body_ok, 1);
  ASSERT_EQ(s.ping_acks, pings);
  if (s.nrst != 1) cbt_log("RST_STREAM frames on the stream: %d (codes %u, %u)", s.nrst, s.rst[0], s.rst[1]);
  ASSERT_EQ(s.nrst, 1);
  ASSERT_EQ(s.rst[0], (uint32_t)NGHTTP2_FLOW_CONTROL_ERROR);
  ASSERT_EQ(s.frames_after_rst, 0);
  cb_stats_t stats;
  cb__testconn_stats(tc, &stats);
  ASSERT_EQ(stats.proxy_requests, 1);

  ASSERT_EQ(cb__testconn_free(tc), 0);
  nghttp2_hd_deflate_del(def);
  close(lfd);
  buf_free(&in);
  buf_free(&req);
  buf_free(&up);
  buf_free(&out);
}
