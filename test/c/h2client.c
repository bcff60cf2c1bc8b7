/* The raw HTTP/2 test client (see h2client.h). Written from RFC 9113 for the framing and from nghttp2's public
 * HPACK API (nghttp2_hd_deflate_*, nghttp2_hd_inflate_*) for the header blocks. */
#include "h2client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

const char *h2_err_name(uint32_t code) {
  static const char *const names[] = {"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
                                      "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM",
                                      "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
                                      "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"};
  if (code == H2_NO_RST) return "(none)";
  return code < sizeof names / sizeof names[0] ? names[code] : "(unknown code)";
}

void h2_connect(h2cl_t *cl, int port) { h2_adopt(cl, cl_connect(port), port, NULL, 0); }

void h2_adopt(h2cl_t *cl, int fd, int port, const void *already, size_t len) {
  memset(cl, 0, sizeof *cl);
  cl->port = port;
  cl->fd = fd;
  cl->conn_window = 65535;
  cl->goaway_code = H2_NO_RST;
  cl->srv_initial_window = 65535;
  cl->srv_max_frame = 16384;
  cl->srv_header_table = 4096;
  buf_add(&cl->in, already, len);
  if (nghttp2_hd_deflate_new(&cl->def, 4096) != 0) FAIL("nghttp2_hd_deflate_new");
  if (nghttp2_hd_inflate_new(&cl->inf) != 0) FAIL("nghttp2_hd_inflate_new");
}

h2cl_t *h2_open(int port) {
  h2cl_t *cl = malloc(sizeof *cl);
  if (cl == NULL) FAIL("out of memory");
  h2_connect(cl, port);
  return cl;
}

void h2_free(h2cl_t *cl) {
  h2_close(cl);
  free(cl);
}

void h2_forget(h2cl_t *cl, int32_t sid) {
  size_t i = (size_t)sid / 2;
  if (sid <= 0 || i >= H2_MAX_STREAMS || cl->streams[i] == NULL) return;
  buf_free(&cl->streams[i]->head);
  buf_free(&cl->streams[i]->body);
  free(cl->streams[i]);
  cl->streams[i] = NULL;
}

void h2_close(h2cl_t *cl) {
  for (size_t i = 0; i < H2_MAX_STREAMS; i++) {
    if (cl->streams[i] == NULL) continue;
    buf_free(&cl->streams[i]->head);
    buf_free(&cl->streams[i]->body);
    free(cl->streams[i]);
    cl->streams[i] = NULL;
  }
  buf_free(&cl->in);
  buf_free(&cl->block);
  nghttp2_hd_deflate_del(cl->def);
  nghttp2_hd_inflate_del(cl->inf);
  if (cl->fd >= 0) close(cl->fd);
  cl->fd = -1;
}

/* ---- sending ---- */

void h2_frame_hd(uint8_t out[9], uint32_t len, uint8_t type, uint8_t flags, int32_t sid) {
  out[0] = (uint8_t)(len >> 16);
  out[1] = (uint8_t)(len >> 8);
  out[2] = (uint8_t)len;
  out[3] = type;
  out[4] = flags;
  put32(out + 5, (uint32_t)sid & 0x7fffffffu);
}

int h2_send_raw(h2cl_t *cl, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t n = send(cl->fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return -1;
    if (n < 0) FAIL("send: %s", strerror(errno));
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

void h2_send_frame(h2cl_t *cl, uint8_t type, uint8_t flags, int32_t sid, const void *payload, size_t len) {
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)len, type, flags, sid);
  /* One send for header and payload, so that the server reads whole frames where it can. */
  buf_t b = {0};
  buf_add(&b, hd, 9);
  buf_add(&b, payload, len);
  cl_send(cl->fd, b.p, b.len);
  buf_free(&b);
}

void h2_send_settings(h2cl_t *cl, const nghttp2_settings_entry *iv, size_t n) {
  uint8_t p[6 * 16];
  if (n > 16) FAIL("too many settings");
  for (size_t i = 0; i < n; i++) {
    p[6 * i] = (uint8_t)(iv[i].settings_id >> 8);
    p[6 * i + 1] = (uint8_t)iv[i].settings_id;
    put32(p + 6 * i + 2, iv[i].value);
  }
  h2_send_frame(cl, NGHTTP2_SETTINGS, 0, 0, p, 6 * n);
}

void h2_send_window_update(h2cl_t *cl, int32_t sid, uint32_t increment) {
  uint8_t p[4];
  put32(p, increment);
  h2_send_frame(cl, NGHTTP2_WINDOW_UPDATE, 0, sid, p, 4);
}

void h2_send_ping(h2cl_t *cl, const uint8_t data[8]) { h2_send_frame(cl, NGHTTP2_PING, 0, 0, data, 8); }

void h2_send_rst(h2cl_t *cl, int32_t sid, uint32_t code) {
  uint8_t p[4];
  put32(p, code);
  h2_send_frame(cl, NGHTTP2_RST_STREAM, 0, sid, p, 4);
}

void h2_start(h2cl_t *cl) {
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_WINDOW_MAX},
  };
  cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
  h2_send_settings(cl, iv, 2);
  h2_send_window_update(cl, 0, H2_WINDOW_MAX - 65535);
}

static int got_settings(h2cl_t *cl, const void *arg) {
  (void)arg;
  return cl->settings > 0;
}

void h2_handshake(h2cl_t *cl) {
  h2_start(cl);
  int r = h2_run(cl, got_settings, NULL, 10000);
  if (r != CL_OK) FAIL("no SETTINGS from the server: %s", cl_status_name(r));
}

void h2_handshake_with(h2cl_t *cl, const nghttp2_settings_entry *iv, size_t n, uint32_t conn_increment) {
  nghttp2_settings_entry all[16] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  if (n > 15) FAIL("too many settings");
  for (size_t i = 0; i < n; i++) all[1 + i] = iv[i];
  cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
  h2_send_settings(cl, all, 1 + n);
  if (conn_increment > 0) h2_send_window_update(cl, 0, conn_increment);
  int r = h2_run(cl, got_settings, NULL, 10000);
  if (r != CL_OK) FAIL("no SETTINGS from the server: %s", cl_status_name(r));
}

typedef struct {
  int pings;
  uint8_t data[8];
} sync_t;

static int got_sync(h2cl_t *cl, const void *arg) {
  const sync_t *s = arg;
  return cl->pings > s->pings && memcmp(cl->ping_data, s->data, 8) == 0;
}

int h2_sync(h2cl_t *cl, int timeout_ms) {
  static unsigned seq;
  sync_t s;
  char tmp[9];
  s.pings = cl->pings;
  snprintf(tmp, sizeof tmp, "sync%04u", ++seq % 10000);
  memcpy(s.data, tmp, 8);
  h2_send_ping(cl, s.data);
  return h2_run(cl, got_sync, &s, timeout_ms);
}

void h2_encode(h2cl_t *cl, const nghttp2_nv *nv, size_t n, buf_t *out) {
  size_t bound = nghttp2_hd_deflate_bound(cl->def, (nghttp2_nv *)nv, n);
  uint8_t *tmp = malloc(bound ? bound : 1);
  if (tmp == NULL) FAIL("out of memory");
  ssize_t len = nghttp2_hd_deflate_hd(cl->def, tmp, bound, (nghttp2_nv *)nv, n);
  if (len < 0) FAIL("nghttp2_hd_deflate_hd: %s", nghttp2_strerror((int)len));
  buf_add(out, tmp, (size_t)len);
  free(tmp);
}

static nghttp2_nv mknv(const char *name, const char *value) {
  nghttp2_nv nv = {(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value), NGHTTP2_NV_FLAG_NONE};
  return nv;
}

void h2_encode_request(h2cl_t *cl, const char *method, const char *path, const char *const *extra, size_t nextra,
                       buf_t *out) {
  char authority[32];
  nghttp2_nv *nv = calloc(4 + nextra, sizeof *nv);
  if (nv == NULL) FAIL("out of memory");
  snprintf(authority, sizeof authority, "127.0.0.1:%d", cl->port);
  nv[0] = mknv(":method", method);
  nv[1] = mknv(":scheme", "http");
  nv[2] = mknv(":authority", authority);
  nv[3] = mknv(":path", path);
  for (size_t i = 0; i < nextra; i++) nv[4 + i] = mknv(extra[2 * i], extra[2 * i + 1]);
  h2_encode(cl, nv, 4 + nextra, out);
  free(nv);
}

h2resp_t *h2_stream(h2cl_t *cl, int32_t sid) {
  size_t i = (size_t)sid / 2;
  if (sid <= 0 || i >= H2_MAX_STREAMS) FAIL("stream id %d out of the client's range", (int)sid);
  if (cl->streams[i] == NULL) {
    h2resp_t *r = calloc(1, sizeof *r);
    if (r == NULL) FAIL("out of memory");
    r->sid = sid;
    r->rst = H2_NO_RST;
    r->window = cl->srv_initial_window;
    cl->streams[i] = r;
  }
  return cl->streams[i];
}

static h2resp_t *find_stream(h2cl_t *cl, int32_t sid) {
  size_t i = (size_t)sid / 2;
  if (sid <= 0 || i >= H2_MAX_STREAMS) return NULL;
  h2resp_t *r = cl->streams[i];
  return r && r->sid == sid ? r : NULL;
}

static int got_stream_window(h2cl_t *cl, const void *arg) {
  const h2resp_t *r = arg;
  return cl->conn_window > 0 && (r->window > 0 || r->rst != H2_NO_RST);
}

void h2_send_body(h2cl_t *cl, int32_t sid, const void *body, size_t len, int end) {
  const char *p = body;
  h2resp_t *r = h2_stream(cl, sid);
  do {
    size_t n = len < 16384 ? len : 16384;
    if (n > 0 && ((int64_t)n > cl->conn_window || (int64_t)n > r->window)) {
      /* The server's windows are smaller than the body: wait for its WINDOW_UPDATEs. */
      if (h2_run(cl, got_stream_window, r, 10000) != CL_OK) FAIL("no WINDOW_UPDATE from the server");
      if (r->rst != H2_NO_RST) return; /* the server reset the stream: nothing more is wanted */
      if ((int64_t)n > cl->conn_window) n = (size_t)cl->conn_window;
      if ((int64_t)n > r->window) n = (size_t)r->window;
    }
    h2_send_frame(cl, NGHTTP2_DATA, end && n == len ? NGHTTP2_FLAG_END_STREAM : 0, sid, p, n);
    cl->conn_window -= (int64_t)n;
    r->window -= (int64_t)n;
    p += n;
    len -= n;
  } while (len > 0);
}

h2resp_t *h2_request(h2cl_t *cl, int32_t sid, const char *method, const char *path, const char *const *extra,
                     size_t nextra, const void *body, size_t body_len) {
  buf_t block = {0};
  h2resp_t *r = h2_stream(cl, sid);
  h2_encode_request(cl, method, path, extra, nextra, &block);
  if (block.len > 16384) FAIL("header block of %zu bytes does not fit one frame", block.len);
  h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | (body ? 0 : NGHTTP2_FLAG_END_STREAM), sid,
                block.p, block.len);
  buf_free(&block);
  if (body) h2_send_body(cl, sid, body, body_len, 1);
  return r;
}

/* ---- receiving ---- */

/* Decodes a complete header block into r (or into nothing, to keep the HPACK state in step). */
static void decode_block(h2cl_t *cl, h2resp_t *r, const uint8_t *in, size_t len) {
  if (r) {
    buf_reset(&r->head);
    r->nheaders++;
  }
  for (;;) {
    nghttp2_nv nv;
    int fl = 0;
    ssize_t n = nghttp2_hd_inflate_hd2(cl->inf, &nv, &fl, in, len, 1);
    if (n < 0) FAIL("HPACK decoding of the server's header block failed: %s", nghttp2_strerror((int)n));
    in += n;
    len -= (size_t)n;
    if (fl & NGHTTP2_HD_INFLATE_EMIT) {
      if (r) {
        buf_add(&r->head, nv.name, nv.namelen);
        buf_adds(&r->head, ": ");
        buf_add(&r->head, nv.value, nv.valuelen);
        buf_adds(&r->head, "\r\n");
        if (nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0) r->status = atoi((const char *)nv.value);
      }
    }
    if (fl & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(cl->inf);
      break;
    }
    if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && len == 0) FAIL("HPACK: header block ended in the middle of a field");
  }
}

static void end_stream(h2cl_t *cl, h2resp_t *r) {
  r->ended = 1;
  r->end_seq = ++cl->ends;
}

static void process(h2cl_t *cl, const h2frame_t *f) {
  const uint8_t *p = f->p;
  size_t len = f->len;
  h2resp_t *r = f->sid ? find_stream(cl, f->sid) : NULL;
  cl->frames++;
  if (cl->block_sid && f->type != NGHTTP2_CONTINUATION)
    FAIL("frame type %u on stream %d in the middle of a header block of stream %d", f->type, (int)f->sid,
         (int)cl->block_sid);
  switch (f->type) {
  case NGHTTP2_DATA:
    if (f->flags & NGHTTP2_FLAG_PADDED) {
      if (len < 1 || p[0] >= len) FAIL("bad padding in DATA");
      len -= 1 + p[0];
      p++;
    }
    cl->data_bytes += len;
    if (r) {
      buf_add(&r->body, p, len);
      r->ndata++;
      if (f->flags & NGHTTP2_FLAG_END_STREAM) end_stream(cl, r);
    }
    break;
  case NGHTTP2_HEADERS:
    if (f->flags & NGHTTP2_FLAG_PADDED) {
      if (len < 1 || p[0] >= len) FAIL("bad padding in HEADERS");
      len -= 1 + p[0];
      p++;
    }
    if (f->flags & NGHTTP2_FLAG_PRIORITY) {
      if (len < 5) FAIL("short HEADERS with PRIORITY");
      p += 5;
      len -= 5;
    }
    buf_reset(&cl->block);
    buf_add(&cl->block, p, len);
    cl->block_end_stream = (f->flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (f->flags & NGHTTP2_FLAG_END_HEADERS) {
      decode_block(cl, r, (const uint8_t *)cl->block.p, cl->block.len);
      if (r && cl->block_end_stream) end_stream(cl, r);
    } else {
      cl->block_sid = f->sid;
    }
    break;
  case NGHTTP2_CONTINUATION:
    if (cl->block_sid != f->sid) FAIL("CONTINUATION on stream %d without a header block", (int)f->sid);
    buf_add(&cl->block, p, len);
    if (f->flags & NGHTTP2_FLAG_END_HEADERS) {
      cl->block_sid = 0;
      decode_block(cl, r, (const uint8_t *)cl->block.p, cl->block.len);
      if (r && cl->block_end_stream) end_stream(cl, r);
    }
    break;
  case NGHTTP2_RST_STREAM:
    if (len != 4) FAIL("RST_STREAM of length %zu", len);
    if (r) r->rst = get32(p);
    else cbt_log("RST_STREAM(%s) on unregistered stream %d", h2_err_name(get32(p)), (int)f->sid);
    break;
  case NGHTTP2_SETTINGS:
    if (f->flags & NGHTTP2_FLAG_ACK) {
      cl->settings_acks++;
      break;
    }
    for (size_t i = 0; i + 6 <= len; i += 6) {
      uint16_t id = (uint16_t)(p[i] << 8 | p[i + 1]);
      uint32_t v = get32(p + i + 2);
      if (id == NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) cl->srv_max_streams = v;
      if (id == NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE) { /* open streams' windows move by the difference */
        for (size_t k = 0; k < H2_MAX_STREAMS; k++)
          if (cl->streams[k] != NULL) cl->streams[k]->window += (int64_t)v - (int64_t)cl->srv_initial_window;
        cl->srv_initial_window = v;
      }
      if (id == NGHTTP2_SETTINGS_MAX_FRAME_SIZE) cl->srv_max_frame = v;
      if (id == NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE) cl->srv_max_header_list = v;
      if (id == NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES) cl->srv_no_rfc7540_priorities = v;
      if (id == NGHTTP2_SETTINGS_HEADER_TABLE_SIZE) { /* RFC 7541 4.2: the encoder's table follows it */
        cl->srv_header_table = v;
        if (nghttp2_hd_deflate_change_table_size(cl->def, v) != 0) FAIL("HPACK table size %u refused", v);
      }
    }
    cl->settings++;
    if (!cl->no_auto_ack) h2_send_frame(cl, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
    break;
  case NGHTTP2_PING:
    if (len != 8) FAIL("PING of length %zu", len);
    if (f->flags & NGHTTP2_FLAG_ACK) {
      cl->pings++;
      memcpy(cl->ping_data, p, 8);
    } else if (!cl->no_auto_ack) {
      h2_send_frame(cl, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, p, 8);
    }
    break;
  case NGHTTP2_GOAWAY:
    if (len < 8) FAIL("GOAWAY of length %zu", len);
    cl->goaway++;
    cl->goaway_last = (int32_t)(get32(p) & 0x7fffffffu);
    cl->goaway_code = get32(p + 4);
    cbt_log("GOAWAY(last stream %d, %s) \"%.*s\"", (int)cl->goaway_last, h2_err_name(cl->goaway_code),
            (int)(len - 8), (const char *)p + 8);
    break;
  case NGHTTP2_WINDOW_UPDATE:
    if (len != 4) FAIL("WINDOW_UPDATE of length %zu", len);
    if (f->sid == 0) cl->conn_window += get32(p) & 0x7fffffffu;
    else if ((size_t)f->sid / 2 < H2_MAX_STREAMS && cl->streams[f->sid / 2] != NULL)
      cl->streams[f->sid / 2]->window += get32(p) & 0x7fffffffu;
    break;
  case NGHTTP2_PRIORITY:
    break;
  default:
    cl->unexpected++;
    break;
  }
}

int h2_next(h2cl_t *cl, h2frame_t *f, int timeout_ms) {
  if (cl->closed) return cl->closed;
  /* Keep the buffer from growing with everything ever read (and from counting in the memory tests, which
   * measure the server in this process: a 1 MiB bound here was most of h2_memory_flat_over_many_streams'
   * allowance). */
  if (cl->off > (64u << 10)) {
    memmove(cl->in.p, cl->in.p + cl->off, cl->in.len - cl->off);
    cl->in.len -= cl->off;
    cl->off = 0;
  }
  int r = cl_read_n(cl->fd, &cl->in, cl->off + 9, timeout_ms);
  if (r == CL_OK) {
    const uint8_t *h = (const uint8_t *)cl->in.p + cl->off;
    uint32_t len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
    r = cl_read_n(cl->fd, &cl->in, cl->off + 9 + len, timeout_ms);
    if (r == CL_OK) {
      h = (const uint8_t *)cl->in.p + cl->off;
      f->len = len;
      f->type = h[3];
      f->flags = h[4];
      f->sid = (int32_t)(get32(h + 5) & 0x7fffffffu);
      f->p = h + 9;
      cl->off += 9 + len;
      process(cl, f);
      return CL_OK;
    }
  }
  if (r == CL_EOF || r == CL_RESET) {
    if (cl->in.len > cl->off) cbt_log("%zu bytes of a partial frame before the close", cl->in.len - cl->off);
    cl->closed = r;
  }
  return r;
}

int h2_run(h2cl_t *cl, int (*pred)(h2cl_t *, const void *), const void *arg, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  while (!pred(cl, arg)) {
    h2frame_t f;
    uint64_t now = now_ms();
    if (now >= deadline) return CL_TIMEOUT;
    int r = h2_next(cl, &f, (int)(deadline - now));
    if (r != CL_OK) return pred(cl, arg) ? CL_OK : r;
  }
  return CL_OK;
}

typedef struct {
  h2resp_t *const *rs;
  size_t n;
} waitset_t;

static int all_done(h2cl_t *cl, const void *arg) {
  const waitset_t *ws = arg;
  (void)cl;
  for (size_t i = 0; i < ws->n; i++)
    if (!ws->rs[i]->ended && ws->rs[i]->rst == H2_NO_RST) return 0;
  return 1;
}

void h2_wait(h2cl_t *cl, h2resp_t *const *rs, size_t n, int timeout_ms) {
  waitset_t ws = {rs, n};
  int r = h2_run(cl, all_done, &ws, timeout_ms);
  if (r != CL_OK) {
    for (size_t i = 0; i < n; i++)
      if (!rs[i]->ended && rs[i]->rst == H2_NO_RST)
        cbt_log("stream %d unfinished: status %d, %zu body bytes", (int)rs[i]->sid, rs[i]->status,
                rs[i]->body.len);
    FAIL("waiting for %zu streams ended with %s (GOAWAY %d, %s)", n, cl_status_name(r), cl->goaway,
         h2_err_name(cl->goaway_code));
  }
}

void h2_wait1(h2cl_t *cl, h2resp_t *r, int timeout_ms) { h2_wait(cl, &r, 1, timeout_ms); }

static int got_goaway(h2cl_t *cl, const void *arg) {
  (void)arg;
  return cl->goaway > 0;
}

int h2_wait_goaway(h2cl_t *cl, int timeout_ms) { return h2_run(cl, got_goaway, NULL, timeout_ms); }

static int never(h2cl_t *cl, const void *arg) {
  (void)cl;
  (void)arg;
  return 0;
}

int h2_wait_closed(h2cl_t *cl, int timeout_ms) { return h2_run(cl, never, NULL, timeout_ms); }

/* ---- expectations ---- */

void h2_expect_from_h1(const buf_t *h1, buf_t *head, buf_t *body) {
  const char *p = h1->p, *end = h1->p + h1->len;
  const char *hend = memmem(p, h1->len, "\r\n\r\n", 4);
  int chunked = 0;
  if (hend == NULL || h1->len < 12 || memcmp(p, "HTTP/1.1 ", 9) != 0) FAIL("not an HTTP/1.1 response");
  buf_addf(head, ":status: %.3s\r\n", p + 9);
  const char *line = memchr(p, '\n', (size_t)(hend - p)) + 1;
  while (line < hend + 2) {
    const char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
    size_t n = (size_t)(eol - line);
    if (n >= 26 && memcmp(line, "transfer-encoding: chunked", 26) == 0) chunked = 1;
    else if (!(n >= 11 && memcmp(line, "connection:", 11) == 0)) buf_add(head, line, n + 2);
    line = eol + 2;
  }
  p = hend + 4;
  if (!chunked) {
    buf_add(body, p, (size_t)(end - p));
    return;
  }
  while (p < end) { /* a HEAD answer has no body at all */
    char *e;
    long sz = strtol(p, &e, 16);
    if (e == p || memcmp(e, "\r\n", 2) != 0) FAIL("bad chunk in the expected response");
    if (sz == 0) break;
    buf_add(body, e + 2, (size_t)sz);
    p = e + 2 + sz + 2;
  }
}

static int same(const buf_t *a, const buf_t *b) {
  return a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0);
}

void h2_assert_resp(h2resp_t *r, const buf_t *head, const buf_t *body, const char *what) {
  if (r->rst != H2_NO_RST) FAIL("%s: stream %d reset with %s", what, (int)r->sid, h2_err_name(r->rst));
  if (!r->ended) FAIL("%s: stream %d did not end", what, (int)r->sid);
  mask_dates(r->head.p, r->head.len);
  if (!same(&r->head, head)) cbt_log("head of %s", what);
  ASSERT_MEM_EQ(r->head.p, r->head.len, head->p, head->len);
  if (!same(&r->body, body)) cbt_log("body of %s", what);
  ASSERT_MEM_EQ(r->body.p, r->body.len, body->p, body->len);
  ASSERT_EQ(r->nheaders, 1);
}

void h2_assert_route(h2resp_t *r, const char *method, const char *path) {
  buf_t h1 = {0}, head = {0}, body = {0};
  char what[256];
  if (exp_route(&h1, method, path, CONN_NONE) != 0) FAIL("no expectation for %s %s", method, path);
  h2_expect_from_h1(&h1, &head, &body);
  snprintf(what, sizeof what, "%s %s", method, path);
  h2_assert_resp(r, &head, &body, what);
  buf_free(&h1);
  buf_free(&head);
  buf_free(&body);
}

void h2_check_hello(int port) {
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r = h2_request(cl, 1, "GET", "/hello", NULL, 0, NULL, 0);
  h2_wait1(cl, r, 15000);
  h2_assert_route(r, "GET", "/hello");
  h2_free(cl);
}
