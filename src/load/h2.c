/* h2c with prior knowledge for cbench-load (and h2 over TLS, below tls.c): up to `depth` streams in flight per
 * connection, framed here (RFC 9113) rather than through an nghttp2 session. A load generator sends the same
 * request again and again and keeps nothing of the answers but their status and size; a session's per-stream
 * work (its stream objects, the request's header list copied and HPACK-encoded each time, the answer's fields
 * checked and handed out one by one) was three quarters of the generator's own instructions per request. Here a
 * request is its path's HEADERS payload, made once (request.c: HPACK that touches no table). An answer's header
 * block that leaves the decoder's table as it is (indexed fields and literals not indexed, :status by a static
 * index: a server's repeated answer) has its status read from the bytes; any other goes through nghttp2's HPACK
 * decoder, which keeps the connection's table in step. Only :status is looked at.
 *
 * What the server may send is checked as far as it matters to the counts and to memory: frame sizes (16,384, the
 * default this client never raises), stream ids (HEADERS or DATA on a stream this client did not open, or has
 * closed: an unsolicited answer), CONTINUATION sequences, SETTINGS, PING, WINDOW_UPDATE and GOAWAY lengths; a
 * header block is bounded by CBL_MAX_HEAD; what does not decode is a protocol error for the connection. Windows
 * are opened wide (1 GiB - 1 for the connection and each stream) so that flow control never paces the server, and
 * given back once half is used. A request body goes as DATA within the server's windows. A stream the server
 * refuses (REFUSED_STREAM: over its limit, before its SETTINGS said the limit) is sent again once a stream ends;
 * a stream reset otherwise before its answer ended is a protocol error for its request; RST_STREAM NO_ERROR after
 * a complete head ends it as answered. A GOAWAY fails the streams above its last id and the requests not sent yet, and the
 * connection is closed after its last stream and opened again. Acknowledgements (SETTINGS, PING) are written
 * while less than CBL_OUT_HIGH bytes wait for the socket; a server that floods them without reading fails the
 * connection. */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

#define WINDOW ((1u << 30) - 1)
#define FRAME_MAX 16384 /* SETTINGS_MAX_FRAME_SIZE: this client's is the default */
#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

enum { F_DATA, F_HEADERS, F_PRIORITY, F_RST_STREAM, F_SETTINGS, F_PUSH_PROMISE, F_PING, F_GOAWAY, F_WINDOW_UPDATE,
       F_CONTINUATION };
enum { FL_END_STREAM = 0x1, FL_ACK = 0x1, FL_END_HEADERS = 0x4, FL_PADDED = 0x8, FL_PRIORITY = 0x20 };

typedef struct {
  int32_t sid;       /* 0: the slot is free */
  cbl_req_t *r;
  bool final;        /* a final (non-1xx) head came */
  bool body_pending; /* request body bytes still to send */
  int64_t send_win;  /* what the server's window for the stream lets through */
  uint64_t recv;     /* DATA bytes received since the last WINDOW_UPDATE */
} h2s_t;

typedef struct {
  cbl_conn_t *c;
  nghttp2_hd_inflater *inf;
  bool open;
  /* The frame being read: its header, then its payload (whole, except DATA, which is counted as it comes). */
  uint8_t hd[9];
  uint32_t hd_got;
  bool in_frame;
  uint32_t flen, fgot;
  uint8_t ftype, fflags;
  int32_t fsid;
  uint8_t pad;        /* DATA: padding still to skip at the end of the payload */
  bool pad_known;     /* DATA: its pad length byte was read (or it has none) */
  uint8_t *fbuf;      /* FRAME_MAX bytes, malloc'ed: a page is resident only once a frame reaches it */
  /* A header block in progress (HEADERS then CONTINUATION). */
  cbl_buf_t hb;
  int32_t hb_sid;
  bool hb_open;
  bool hb_end_stream;
  bool settings_seen; /* the server's preface: its first frame must be SETTINGS */
  /* Streams: direct-mapped on the stream id (slot_of), cap >= 2 * depth slots. */
  h2s_t *st;
  uint32_t cap;
  uint32_t nopen;
  int32_t next_sid;
  cbl_req_t **queue; /* requests waiting for a stream slot (the server's limit), oldest first */
  uint32_t qhead, qlen, qcap;
  uint32_t max_streams;   /* the server's SETTINGS_MAX_CONCURRENT_STREAMS */
  uint32_t peer_frame_max; /* the server's SETTINGS_MAX_FRAME_SIZE: DATA sent is at most this */
  int64_t peer_init_win;   /* the server's SETTINGS_INITIAL_WINDOW_SIZE */
  int64_t conn_send_win;
  uint64_t conn_recv;     /* DATA bytes received since the connection's last WINDOW_UPDATE */
  bool goaway;
  int32_t goaway_last;
} h2_t;

static int wr(cbl_conn_t *c, const void *p, size_t n) { return cbl_conn_write(c, p, n); }

static int frame_hd(cbl_conn_t *c, uint32_t len, uint8_t type, uint8_t flags, int32_t sid) {
  uint8_t b[9] = {(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, type, flags,
                  (uint8_t)((uint32_t)sid >> 24 & 0x7f), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8), (uint8_t)sid};
  return wr(c, b, 9);
}

static int window_update(cbl_conn_t *c, int32_t sid, uint32_t inc) {
  uint8_t p[4] = {(uint8_t)(inc >> 24 & 0x7f), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8), (uint8_t)inc};
  int rc = frame_hd(c, 4, F_WINDOW_UPDATE, 0, sid);
  return rc ? rc : wr(c, p, 4);
}

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* ---- streams ---- */

/* Streams are direct-mapped on their id: slot (id / 2) mod cap, cap >= 2 * depth. A new stream whose slot is
 * taken (a slow stream cap ids older) takes the next id instead: a client may skip ids (RFC 9113 5.1.1). */
static h2s_t *slot_of(h2_t *h, int32_t sid) { return &h->st[((uint32_t)sid >> 1) & (h->cap - 1)]; }

static h2s_t *find(h2_t *h, int32_t sid) {
  if (sid <= 0 || !(sid & 1)) return NULL;
  h2s_t *s = slot_of(h, sid);
  return s->sid == sid ? s : NULL;
}

static void forget(h2_t *h, h2s_t *s) {
  s->sid = 0;
  h->nopen--;
}

/* The stream ended: its request answered (status) or failed (kind); --new-conn ends the connection with it. */
static void stream_end(h2_t *h, h2s_t *s, bool ok) {
  cbl_conn_t *c = h->c;
  cbl_req_t *r = s->r;
  forget(h, s);
  if (!r || !r->used) return;
  if (ok && r->status >= 200) cbl_req_done(c, r, r->status, c->t->now);
  else cbl_req_failed(c, r, CBL_ERR_PROTOCOL);
  if (c->t->cfg->new_conn) cbl_conn_end(c);
}

/* ---- sending ---- */

/* DATA for a stream's body, as far as the windows and the output bound allow. */
static int send_body(h2_t *h, h2s_t *s) {
  cbl_conn_t *c = h->c;
  const cbl_config_t *cfg = c->t->cfg;
  cbl_req_t *r = s->r;
  while (s->body_pending && cbl_conn_unsent(c) < CBL_OUT_HIGH) {
    size_t left = cfg->body_len - r->body_off;
    size_t n = left < h->peer_frame_max ? left : h->peer_frame_max;
    if ((int64_t)n > s->send_win) n = (size_t)(s->send_win > 0 ? s->send_win : 0);
    if ((int64_t)n > h->conn_send_win) n = (size_t)(h->conn_send_win > 0 ? h->conn_send_win : 0);
    if (n == 0 && left > 0) return 0; /* a window is shut: the server's WINDOW_UPDATE resumes it */
    bool last = n == left;
    int rc = frame_hd(c, (uint32_t)n, F_DATA, last ? FL_END_STREAM : 0, s->sid);
    if (!rc && n) rc = wr(c, cfg->body + r->body_off, n);
    if (rc) return rc;
    r->body_off += n;
    s->send_win -= (int64_t)n;
    h->conn_send_win -= (int64_t)n;
    if (last) s->body_pending = false;
  }
  return 0;
}

static int start_stream(h2_t *h, cbl_req_t *r) {
  cbl_conn_t *c = h->c;
  cbl_thread_t *t = c->t;
  while (h->next_sid > 0 && h->next_sid <= 0x7ffffffd && slot_of(h, h->next_sid)->sid != 0) h->next_sid += 2;
  /* Out of stream ids (2^31 / 2 requests on one connection): end it and start a fresh one. */
  if (h->next_sid <= 0 || h->next_sid > 0x7ffffffd) return CBL_FAIL(CBL_ERR_RESET);
  int32_t sid = h->next_sid;
  h->next_sid += 2;
  uint32_t i = t->path_rr++ % (uint32_t)t->cfg->npaths;
  bool body = t->cfg->body != NULL;
  const char *blk = t->wire->h2_block[i];
  size_t n = t->wire->h2_block_len[i];
  /* A block over the frame size goes on in CONTINUATION frames. */
  size_t first = n < FRAME_MAX ? n : FRAME_MAX;
  int rc = frame_hd(c, (uint32_t)first, F_HEADERS,
                    (uint8_t)((first == n ? FL_END_HEADERS : 0) | (body ? 0 : FL_END_STREAM)), sid);
  if (!rc) rc = wr(c, blk, first);
  for (size_t off = first; !rc && off < n; off += FRAME_MAX) {
    size_t k = n - off < FRAME_MAX ? n - off : FRAME_MAX;
    rc = frame_hd(c, (uint32_t)k, F_CONTINUATION, off + k == n ? FL_END_HEADERS : 0, sid);
    if (!rc) rc = wr(c, blk + off, k);
  }
  if (rc) return rc;
  h2s_t *s = slot_of(h, sid);
  *s = (h2s_t){.sid = sid};
  h->nopen++;
  s->r = r;
  r->body_off = 0;
  s->send_win = h->peer_init_win;
  s->body_pending = body;
  return body ? send_body(h, s) : 0;
}

/* ---- the protocol's functions ---- */

static void *h2_create(cbl_conn_t *c) {
  h2_t *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->c = c;
  uint32_t depth = (uint32_t)c->t->cfg->depth;
  h->cap = 8;
  while (h->cap < 2 * depth) h->cap <<= 1;
  h->qcap = depth;
  h->st = calloc(h->cap, sizeof *h->st);
  h->queue = calloc(h->qcap, sizeof *h->queue);
  h->fbuf = malloc(FRAME_MAX);
  if (!h->st || !h->queue || !h->fbuf) {
    free(h->st);
    free(h->queue);
    free(h->fbuf);
    free(h);
    return NULL;
  }
  return h;
}

static void h2_reset(cbl_conn_t *c) {
  h2_t *h = c->p;
  if (h->inf) nghttp2_hd_inflate_del(h->inf);
  h->inf = NULL;
  h->open = false;
  free(h->hb.p);
  h->hb = (cbl_buf_t){0};
}

static void h2_destroy(void *p) {
  h2_t *h = p;
  if (h->inf) nghttp2_hd_inflate_del(h->inf);
  free(h->hb.p);
  free(h->st);
  free(h->queue);
  free(h->fbuf);
  free(h);
}

static int h2_open(cbl_conn_t *c) {
  h2_t *h = c->p;
  h2_reset(c);
  if (nghttp2_hd_inflate_new(&h->inf)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  memset(h->st, 0, h->cap * sizeof *h->st);
  h->nopen = 0;
  h->qhead = h->qlen = 0;
  h->in_frame = false;
  h->hd_got = 0;
  h->hb_open = false;
  h->settings_seen = false;
  h->next_sid = 1;
  h->max_streams = (uint32_t)c->t->cfg->depth; /* until the server's SETTINGS say otherwise */
  h->peer_frame_max = FRAME_MAX;
  h->peer_init_win = 65535;
  h->conn_send_win = 65535;
  h->conn_recv = 0;
  h->goaway = false;
  /* The preface, SETTINGS (no push, the stream window, 100 streams), and the connection's window opened. */
  static const uint8_t settings[] = {0, 2, 0, 0, 0, 0,                                  /* ENABLE_PUSH 0 */
                                     0, 4, (WINDOW >> 24) & 0xff, (WINDOW >> 16) & 0xff, /* INITIAL_WINDOW_SIZE */
                                     (WINDOW >> 8) & 0xff, WINDOW & 0xff,
                                     0, 3, 0, 0, 0, 100};                               /* MAX_CONCURRENT_STREAMS */
  int rc = wr(c, PREFACE, sizeof PREFACE - 1);
  if (!rc) rc = frame_hd(c, sizeof settings, F_SETTINGS, 0, 0);
  if (!rc) rc = wr(c, settings, sizeof settings);
  if (!rc) rc = window_update(c, 0, WINDOW - 65535);
  if (rc) return rc;
  h->open = true;
  return 0;
}

/* After a GOAWAY no stream may start: the connection ends with its last one (h2_flush). */
static bool h2_ready(cbl_conn_t *c) {
  h2_t *h = c->p;
  return h->open && !h->goaway;
}

static int h2_send(cbl_conn_t *c, cbl_req_t *r) {
  h2_t *h = c->p;
  if (h->goaway) return CBL_FAIL(CBL_ERR_RESET);
  if (h->nopen < h->max_streams && h->qlen == 0 && cbl_conn_unsent(c) < CBL_OUT_HIGH) return start_stream(h, r);
  if (h->qlen == h->qcap) return CBL_FAIL(CBL_ERR_PROTOCOL); /* cannot be: at most depth in flight */
  /* Streams beyond the server's limit wait for a slot, and requests wait while the socket does not take what
   * is queued (a server that answers without reading must not grow the output). */
  h->queue[(h->qhead + h->qlen++) % h->qcap] = r;
  return 0;
}

static int h2_flush(cbl_conn_t *c) {
  h2_t *h = c->p;
  if (!h->open) return 0;
  while (h->qlen > 0 && h->nopen < h->max_streams && !h->goaway && cbl_conn_unsent(c) < CBL_OUT_HIGH) {
    cbl_req_t *r = h->queue[h->qhead];
    h->qhead = (h->qhead + 1) % h->qcap;
    h->qlen--;
    if (!r->used) continue; /* timed out meanwhile */
    int rc = start_stream(h, r);
    if (rc) return rc;
  }
  if (c->t->cfg->body)
    for (uint32_t i = 0; i < h->cap; i++)
      if (h->st[i].sid != 0 && h->st[i].body_pending) {
        int rc = send_body(h, &h->st[i]);
        if (rc) return rc;
      }
  if (h->goaway && h->nopen == 0) {
    /* Every stream the server kept has ended: a clean end when nothing is left in flight. */
    if (c->inflight) return CBL_FAIL(CBL_ERR_RESET);
    cbl_conn_end(c);
  }
  return 0;
}

/* ---- reading ---- */

#define BAD CBL_FAIL(CBL_ERR_PROTOCOL)

/* An HPACK integer with an n-bit prefix (RFC 7541 5.1) at *p, below end: its value, or -1 when it does not fit. */
static int64_t hp_int(const uint8_t **p, const uint8_t *end, int n) {
  int64_t max = (1 << n) - 1, v = **p & max;
  (*p)++;
  if (v < max) return v;
  for (int shift = 0; *p < end && shift <= 21; shift += 7) {
    uint8_t b = *(*p)++;
    v += (int64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  return -1;
}

/* A block that leaves the decoder's table as it is (RFC 7541 6.1 and 6.2.2-6.2.3: indexed fields and literals
 * not indexed, the form a server's repeated answer takes once its table holds the fields), with :status by a
 * static index (200, 204, 206, 304, 400, 404, 500): its status, read without decoding. 0 for any other block, which
 * goes through the decoder. */
static int status_of_plain_block(h2_t *h, const uint8_t *p, size_t n) {
  static const int static_status[7] = {200, 204, 206, 304, 400, 404, 500};
  const uint8_t *end = p + n;
  int64_t entries = (int64_t)nghttp2_hd_inflate_get_num_table_entries(h->inf);
  int status = 0;
  while (p < end) {
    uint8_t b = *p;
    if (b & 0x80) { /* indexed */
      int64_t i = hp_int(&p, end, 7);
      if (i <= 0 || i > entries) return 0;
      if (i >= 8 && i <= 14) {
        if (status) return 0;
        status = static_status[i - 8];
      }
      continue;
    }
    if ((b & 0xe0) != 0) return 0; /* incremental indexing or a table size update: the decoder's */
    int64_t name = hp_int(&p, end, 4);
    if (name < 0 || name > entries || name == 8) return 0; /* :status as a literal: its value is needed */
    for (int strs = name == 0 ? 2 : 1; strs > 0; strs--) {
      if (p >= end) return 0;
      int64_t len = hp_int(&p, end, 7);
      if (len < 0 || len > end - p) return 0;
      p += len;
    }
  }
  return status;
}

/* A complete header block: decoded whole (the table must follow every block, trailers too); :status kept for
 * the stream's request when it is a head. */
static int header_block(h2_t *h) {
  h2s_t *s = find(h, h->hb_sid);
  const uint8_t *in = h->hb.p ? (const uint8_t *)h->hb.p : (const uint8_t *)""; /* an empty block: no buffer yet */
  size_t left = h->hb.len;
  int status = status_of_plain_block(h, in, left);
  if (status == 0) { /* the decoder, field by field */
    status = -1;
    for (;;) {
      nghttp2_nv nv;
      int fl = 0;
      ssize_t k = nghttp2_hd_inflate_hd2(h->inf, &nv, &fl, in, left, 1);
      if (k < 0) return BAD;
      in += k;
      left -= (size_t)k;
      if ((fl & NGHTTP2_HD_INFLATE_EMIT) && nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0 &&
          nv.valuelen == 3 && nv.value[0] >= '1' && nv.value[0] <= '9' && nv.value[1] >= '0' && nv.value[1] <= '9' &&
          nv.value[2] >= '0' && nv.value[2] <= '9')
        status = (nv.value[0] - '0') * 100 + (nv.value[1] - '0') * 10 + (nv.value[2] - '0');
      if (fl & NGHTTP2_HD_INFLATE_FINAL) {
        nghttp2_hd_inflate_end_headers(h->inf);
        break;
      }
      if (k == 0 && left == 0) return BAD; /* the block ended inside a field */
    }
  }
  h->hb.len = 0;
  h->hb_open = false;
  if (!s) return CBL_FAIL(CBL_ERR_UNSOLICITED); /* an answer on a stream not open (never, or no longer) */
  if (!s->final) {
    if (status < 100) return BAD; /* a head without a :status */
    if (status >= 200) {
      s->final = true;
      if (s->r && status < CBL_MAX_STATUS) s->r->status = status;
    } else if (h->hb_end_stream) {
      return BAD; /* a 1xx cannot end the stream */
    }
  } else if (!h->hb_end_stream) {
    return BAD; /* trailers end the stream */
  }
  if (h->hb_end_stream) stream_end(h, s, true);
  return 0;
}

static int block_add(h2_t *h, const uint8_t *p, size_t n) {
  if (h->hb.len + n > CBL_MAX_HEAD) return BAD;
  return cbl_buf_append(&h->hb, p, n) ? BAD : 0;
}

/* DATA payload bytes, padding set apart: counted. */
static void data_bytes(h2_t *h, uint32_t n) {
  cbl_thread_t *t = h->c->t;
  if (t->now >= t->run->t_measure) t->res.counts.body_bytes += n;
}

/* The whole DATA frame's length is flow-controlled, padding included (RFC 9113 6.1): given back once half of a
 * window is used. */
static int data_window(h2_t *h, h2s_t *s, uint32_t flen) {
  h->conn_recv += flen;
  if (h->conn_recv >= WINDOW / 2) {
    int rc = window_update(h->c, 0, (uint32_t)h->conn_recv);
    if (rc) return rc;
    h->conn_recv = 0;
  }
  if (s) {
    s->recv += flen;
    if (s->recv >= WINDOW / 2) {
      int rc = window_update(h->c, s->sid, (uint32_t)s->recv);
      if (rc) return rc;
      s->recv = 0;
    }
  }
  return 0;
}

/* A frame whose payload is in fbuf (every type but DATA). */
static int frame_done(h2_t *h) {
  cbl_conn_t *c = h->c;
  const uint8_t *p = h->fbuf;
  uint32_t n = h->flen;
  uint8_t fl = h->fflags;
  int32_t sid = h->fsid;
  if (!h->settings_seen && h->ftype != F_SETTINGS) return BAD; /* the server's preface is a SETTINGS frame */
  if (h->hb_open && h->ftype != F_CONTINUATION) return BAD;
  switch (h->ftype) {
    case F_HEADERS: {
      if (sid == 0) return BAD;
      uint32_t off = 0, pad = 0;
      if (fl & FL_PADDED) {
        if (n < 1) return BAD;
        pad = p[0];
        off = 1;
      }
      if (fl & FL_PRIORITY) off += 5;
      if (off + pad > n) return BAD;
      h->hb_sid = sid;
      h->hb_open = true;
      h->hb_end_stream = (fl & FL_END_STREAM) != 0;
      h->hb.len = 0;
      int rc = block_add(h, p + off, n - off - pad);
      if (rc) return rc;
      return (fl & FL_END_HEADERS) ? header_block(h) : 0;
    }
    case F_CONTINUATION: {
      if (!h->hb_open || sid != h->hb_sid) return BAD;
      int rc = block_add(h, p, n);
      if (rc) return rc;
      return (fl & FL_END_HEADERS) ? header_block(h) : 0;
    }
    case F_PRIORITY:
      return sid != 0 && n == 5 ? 0 : BAD;
    case F_RST_STREAM: {
      if (sid == 0 || n != 4) return BAD;
      h2s_t *s = find(h, sid);
      /* A reset of a stream this client never opened is one it may have closed already: ignored. */
      if (!s) return 0;
      if (get32(p) == NGHTTP2_REFUSED_STREAM && !s->final && s->r && s->r->used && h->qlen < h->qcap) {
        /* Not processed (RFC 9113 8.7: a stream over the server's limit, sent before its SETTINGS came): the
         * request waits for a slot and goes again, first in line. */
        cbl_req_t *r = s->r;
        forget(h, s);
        h->qhead = (h->qhead + h->qcap - 1) % h->qcap;
        h->queue[h->qhead] = r;
        h->qlen++;
        return 0;
      }
      stream_end(h, s, get32(p) == NGHTTP2_NO_ERROR && s->final);
      return 0;
    }
    case F_SETTINGS: {
      if (sid != 0) return BAD;
      if (fl & FL_ACK) return n == 0 && h->settings_seen ? 0 : BAD;
      if (n % 6) return BAD;
      for (uint32_t i = 0; i < n; i += 6) {
        uint16_t id = (uint16_t)(p[i] << 8 | p[i + 1]);
        uint32_t v = get32(p + i + 2);
        if (id == 2 && v > 1) return BAD; /* ENABLE_PUSH */
        if (id == 3) h->max_streams = v < (uint32_t)c->t->cfg->depth ? v : (uint32_t)c->t->cfg->depth;
        if (id == 4) { /* INITIAL_WINDOW_SIZE: open streams' windows move by the difference */
          if (v > 0x7fffffff) return BAD;
          int64_t d = (int64_t)v - h->peer_init_win;
          h->peer_init_win = v;
          for (uint32_t k = 0; k < h->cap; k++)
            if (h->st[k].sid != 0) h->st[k].send_win += d;
        }
        if (id == 5) {
          if (v < FRAME_MAX || v > 0xffffff) return BAD;
          h->peer_frame_max = v;
        }
      }
      h->settings_seen = true;
      if (cbl_conn_unsent(c) >= CBL_OUT_HIGH) return BAD; /* acknowledgements flooded, never read */
      return frame_hd(c, 0, F_SETTINGS, FL_ACK, 0);
    }
    case F_PUSH_PROMISE:
      return BAD; /* push is disabled (SETTINGS_ENABLE_PUSH 0) */
    case F_PING: {
      if (sid != 0 || n != 8) return BAD;
      if (fl & FL_ACK) return 0;
      if (cbl_conn_unsent(c) >= CBL_OUT_HIGH) return BAD; /* acknowledgements flooded, never read */
      int rc = frame_hd(c, 8, F_PING, FL_ACK, 0);
      return rc ? rc : wr(c, p, 8);
    }
    case F_GOAWAY: {
      if (sid != 0 || n < 8) return BAD;
      int32_t last = (int32_t)(get32(p) & 0x7fffffff);
      if (!h->goaway || last < h->goaway_last) h->goaway_last = last;
      h->goaway = true;
      /* Streams the server will not process, and the requests not sent: failed. */
      for (uint32_t i = 0; i < h->cap; i++)
        if (h->st[i].sid > h->goaway_last) stream_end(h, &h->st[i], false);
      while (h->qlen > 0) {
        cbl_req_t *r = h->queue[h->qhead];
        h->qhead = (h->qhead + 1) % h->qcap;
        h->qlen--;
        if (r->used) cbl_req_failed(c, r, CBL_ERR_PROTOCOL);
      }
      return 0;
    }
    case F_WINDOW_UPDATE: {
      if (n != 4) return BAD;
      uint32_t inc = get32(p) & 0x7fffffff;
      if (inc == 0) return BAD;
      if (sid == 0) {
        h->conn_send_win += inc;
        if (h->conn_send_win > 0x7fffffff) return BAD;
      } else {
        h2s_t *s = find(h, sid);
        if (s) {
          s->send_win += inc;
          if (s->send_win > 0x7fffffff) return BAD;
        }
      }
      return 0;
    }
    default:
      return 0; /* an extension frame: ignored (RFC 9113 5.5) */
  }
}

static int h2_read(cbl_conn_t *c, const char *data, size_t len) {
  h2_t *h = c->p;
  const uint8_t *p = (const uint8_t *)data;
  for (;;) {
    if (!h->in_frame) { /* the 9-byte frame header */
      if (len == 0) return 0;
      size_t k = 9 - h->hd_got < len ? 9 - h->hd_got : len;
      memcpy(h->hd + h->hd_got, p, k);
      h->hd_got += (uint32_t)k;
      p += k;
      len -= k;
      if (h->hd_got < 9) return 0;
      h->hd_got = 0;
      h->flen = (uint32_t)h->hd[0] << 16 | (uint32_t)h->hd[1] << 8 | h->hd[2];
      h->ftype = h->hd[3];
      h->fflags = h->hd[4];
      h->fsid = (int32_t)(get32(h->hd + 5) & 0x7fffffff);
      h->fgot = 0;
      h->in_frame = true;
      if (h->flen > FRAME_MAX) return BAD; /* FRAME_SIZE_ERROR */
      if (h->ftype == F_DATA) {
        if (!h->settings_seen || h->hb_open || h->fsid == 0) return BAD;
        if ((h->fflags & FL_PADDED) && h->flen < 1) return BAD;
        h->pad = 0;
        h->pad_known = !(h->fflags & FL_PADDED);
        h2s_t *s = find(h, h->fsid);
        if (!s) return CBL_FAIL(CBL_ERR_UNSOLICITED); /* DATA on a stream not open (never, or no longer) */
        if (!s->final) return BAD;                   /* before its head */
        int rc = data_window(h, s, h->flen);
        if (rc) return rc;
      }
    }
    if (h->ftype == F_DATA) { /* counted as it comes, never kept */
      if (!h->pad_known) {
        if (len == 0) return 0;
        h->pad = *p++;
        len--;
        h->fgot = 1;
        h->pad_known = true;
        if ((uint32_t)h->pad > h->flen - 1) return BAD;
      }
      size_t k = h->flen - h->fgot < len ? h->flen - h->fgot : len;
      uint32_t body_end = h->flen - h->pad; /* bytes past it are padding */
      if (h->fgot < body_end) data_bytes(h, (uint32_t)(h->fgot + k < body_end ? k : body_end - h->fgot));
      h->fgot += (uint32_t)k;
      p += k;
      len -= k;
      if (h->fgot < h->flen) return 0;
      h->in_frame = false;
      if (h->fflags & FL_END_STREAM) {
        h2s_t *s = find(h, h->fsid);
        if (s) stream_end(h, s, true);
      }
      continue;
    }
    size_t k = h->flen - h->fgot < len ? h->flen - h->fgot : len; /* every other frame: its payload whole */
    memcpy(h->fbuf + h->fgot, p, k);
    h->fgot += (uint32_t)k;
    p += k;
    len -= k;
    if (h->fgot < h->flen) return 0;
    h->in_frame = false;
    int rc = frame_done(h);
    if (rc) return rc;
  }
}

static int h2_eof(cbl_conn_t *c) {
  (void)c;
  return 0;
}

const cbl_proto_t cbl_h2_proto = {
  .create = h2_create,
  .destroy = h2_destroy,
  .open = h2_open,
  .ready = h2_ready,
  .send = h2_send,
  .flush = h2_flush,
  .read = h2_read,
  .eof = h2_eof,
  .reset = h2_reset,
};
