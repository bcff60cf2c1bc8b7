/* HTTP/2 over cleartext (h2c) with nghttp2: prior knowledge and Upgrade: h2c, behind the same response API
 * as HTTP/1.1 (cb__proto_t), so every handler serves both protocols unchanged.
 *
 * Output: frames go into the connection's output queue. DATA payloads are never copied through nghttp2: the
 * data provider returns NGHTTP2_DATA_FLAG_NO_COPY and the send-data callback queues the 9-byte frame header
 * followed by a reference to the payload (static bytes, a handler's buffer, or a file range for sendfile).
 * Small pieces are copied instead, because a copy is cheaper than one more iovec. nghttp2_session_send()
 * runs once per event, so the frames of many streams leave in one writev.
 */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "proto/h2_mem.h"
#include "proto/h2_park.h"
#include "proto/proto.h"

/* The receive windows we advertise: large, so uploads are not bound by round trips of WINDOW_UPDATE. */
#define STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (16 << 20)
/* The stream limit nghttp2 is told (see session_new): above the configured one, with room for a burst of
 * excess streams to be refused one by one, but bounded: a refused stream stays open in nghttp2 until its
 * RST_STREAM is sent, and the bound caps how many can pile up. */
static uint32_t nghttp2_stream_limit(uint32_t limit) { return limit < (1u << 29) ? 2 * limit + 100 : limit; }
/* A body that fits one DATA frame of the default SETTINGS_MAX_FRAME_SIZE. */
#define ONE_FRAME 16384
/* Entries of a SETTINGS frame (and of HTTP2-Settings) nghttp2 accepts; a frame with more ends the connection
 * (GOAWAY(ENHANCE_YOUR_CALM)). nghttp2's default, set explicitly so that cb__h2_settings_valid agrees. */
#define MAX_SETTINGS 32
/* Streams keep their structures for reuse up to this many per connection. */
#define FREE_STREAMS_MAX 16

enum { PIECE_STATIC, PIECE_FREE, PIECE_FILE };

typedef struct {
  uint8_t kind;
  uint8_t touched; /* part of a PIECE_FREE buffer was referenced by the output queue */
  uint8_t piece_end; /* a DATA frame holding bytes of this piece holds none of the next */
  uint32_t credit; /* request-body bytes whose receive window is given back once this piece is sent */
  size_t held;     /* PIECE_FREE: echo-budget bytes of the buffer, given back when it is freed */
  int fd;
  const char *base;
  uint64_t off;
  size_t len; /* left to send */
} piece_t;

typedef struct h2s h2s_t;
typedef struct h2c h2c_t;

struct h2s {
  cb__req_t req; /* first member: req.stream points back at the stream */
  h2c_t *h;
  h2s_t *prev, *next;
  int32_t id;
  /* Request head: path and kept headers, copied out of nghttp2's buffers. */
  char *head;
  size_t head_len, head_cap;
  cb__hdr_t *hdrs;
  int nhdrs, hdrs_cap;
  size_t path_len;
  /* Where :path, :method and :authority are in `head` (offsets: the buffer may move until the head is done). */
  size_t path_off, target_len, method_off, method_len, authority_off, authority_len;
  uint8_t have_path, have_method, have_authority, too_large, refused, dispatched, head_only;
  uint8_t res_ended, deferred, provider;
  uint8_t in_body;    /* inside the handler's on_body: copies made now hold request-body bytes */
  uint8_t over_budget; /* such a copy would have gone over the echo budget: the stream is cut after on_body */
  uint8_t rst_after;  /* answered before the request ended: reset (NO_ERROR) once the answer is sent */
  uint8_t trailers;   /* a fault: the body ends with a trailer block instead of END_STREAM on DATA */
  uint8_t cut;        /* a fault (h2_cut): CB__CUT_*, once the head and the pieces queued are sent */
  uint32_t cut_code;  /* CB__CUT_STREAM's RST_STREAM code */
  nghttp2_nv *tnv;    /* end_trailers: the trailer block (names lowercased; one block with its bytes), or NULL */
  size_t ntnv;
  uint8_t client_priority; /* the request has a priority field (RFC 9218), which nghttp2 applies */
  uint8_t expect_continue; /* the request has `expect: 100-continue` */
  size_t body_held;   /* of the current DATA chunk, bytes the handler copied into pieces */
  /* The status and content-length values of the response head: nghttp2 references them (NO_COPY) until the
   * HEADERS frame is written, in this event's send. */
  char status_buf[3];
  char len_buf[24];
  /* Response body pieces waiting for the data provider. */
  piece_t *pieces;
  uint32_t phead, ptail, pcap;
  size_t queued;
};

/* Client stream ids remembered as opened or not, for HEADERS on a lower id (RFC 9113 5.1.1), and as closed
 * after the client ended its side or not (for DATA and HEADERS on a closed stream, 5.1): the last
 * OPENED_WINDOW odd ids below the highest one. */
#define OPENED_WINDOW 1024
/* The two bitmaps, one after the other in h2c.opened. */
enum { SID_OPENED = 0, SID_CLOSED = OPENED_WINDOW };
#define SID_BYTES (2 * OPENED_WINDOW / 8)
/* Header blocks over the header limit a connection may send (each refused) before it is ended. */
#define OVERSIZED_BLOCKS_MAX 3

struct h2c {
  nghttp2_session *session;
  cb__h2_mem_t mem; /* the session's allocator (h2_mem.c) */
  cb__conn_t *c;
  h2s_t *streams;
  h2s_t *free_streams;
  int nfree;
  int nstreams;
  uint8_t stopping;
  uint8_t would_block; /* a send callback refused a frame because the output queue was full */
  uint8_t upgraded;    /* started with Upgrade: h2c (for the per-protocol counters) */
  uint8_t hold_data;   /* upgraded, and the client's preface has not arrived yet: DATA waits for it */
  uint8_t peer_eof;    /* the peer closed its sending side: complete requests are answered, then close */
  uint8_t timed_out;   /* a timeout sent GOAWAY; the next one closes (the GOAWAY could not leave) */
  uint8_t calm;        /* end with GOAWAY(ENHANCE_YOUR_CALM): too many oversized header blocks */
  uint8_t oversized;   /* header blocks over the limit so far */
  uint8_t block_over;  /* the header block being decoded is over the limit */
  uint8_t settings_seen; /* the client's first SETTINGS frame arrived */
  uint8_t violation;   /* a fault: DATA on stream 0 after the next frames sent (h2_violation) */
  uint8_t closed_err;  /* DATA or HEADERS on a closed stream: the connection ends with STREAM_CLOSED */
  uint8_t may_close;   /* a frame that may close a stream was followed since nghttp2 was last fed */
  uint8_t paused;      /* track() stopped before a frame header for nghttp2 to catch up (not an error) */
  uint8_t recheck;     /* the frame header track() stopped before: check it now, without stopping again */
  size_t block_bytes;  /* the header block being decoded, counted like max_header_bytes */
  /* The stream of the header block being decoded (NULL: none of ours), looked up once per block rather than
   * once per field: each lookup is a search of nghttp2's stream map. */
  int32_t block_sid;
  h2s_t *block_s;
  uint32_t nrst_after; /* streams with rst_after set: on_frame_send looks a stream up only while some are */
  uint32_t ncut;       /* streams with cut set: the same */
  /* The peer's frames, followed beside nghttp2 (track()): where the preface, a frame header and a frame's
   * payload end, whether a header block is open. The header timeout runs while one of them is incomplete. */
  uint32_t preface_left;
  uint32_t payload_left;
  uint8_t fh[9], fh_len;
  uint8_t ftype;
  uint8_t block_open;
  uint8_t pri_len;     /* of a PRIORITY frame's payload, the bytes of its dependency read so far */
  uint8_t pri[4];
  int32_t fsid;        /* the stream of the frame being followed */
  int32_t max_sid;     /* the highest stream id the client opened */
  uint8_t *opened;     /* 2 x OPENED_WINDOW bits (SID_OPENED, SID_CLOSED), made with the first stream (an idle
                        * connection holds none) */
  /* Parking (h2_park.h, "parking an idle session" below): an idle connection gives its session back (session
   * NULL, park holding what makes it again). */
  uint8_t table_asked; /* we asked the peer for a 0-byte HPACK table (SETTINGS_HEADER_TABLE_SIZE 0) */
  uint8_t table_zero;  /* it acknowledged: its encoder indexes nothing until we raise the size again */
  uint8_t park_soon;   /* that acknowledgement came in this event: park after it if still idle */
  uint8_t no_park;     /* a fault changed our settings: this session is never made again */
  uint16_t settings_owed; /* our SETTINGS frames not acknowledged yet */
  cb__h2_park_t park;
};

static const cb__proto_t h2_proto;
static const cb__conn_ops_t h2_ops;
static nghttp2_session_callbacks *callbacks;
static nghttp2_option *options;

/* ---- streams ---- */

static h2s_t *stream_new(h2c_t *h, int32_t id) {
  h2s_t *s = h->free_streams;
  if (s != NULL) {
    h->free_streams = s->next;
    h->nfree--;
  } else {
    s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
  }
  /* Keep the buffers of a reused stream; reset everything else. */
  char *head = s->head;
  size_t head_cap = s->head_cap;
  cb__hdr_t *hdrs = s->hdrs;
  int hdrs_cap = s->hdrs_cap;
  piece_t *pieces = s->pieces;
  uint32_t pcap = s->pcap;
  memset(s, 0, sizeof *s);
  s->head = head;
  s->head_cap = head_cap;
  s->hdrs = hdrs;
  s->hdrs_cap = hdrs_cap;
  s->pieces = pieces;
  s->pcap = pcap;
  s->h = h;
  s->id = id;
  s->req.conn = h->c;
  s->req.proto = &h2_proto;
  s->req.stream = s;
  s->req.stream_id = (uint32_t)id;
  s->req.content_length = -1;
  s->next = h->streams;
  if (h->streams) h->streams->prev = s;
  h->streams = s;
  h->nstreams++;
  return s;
}

/* Gives back the receive window of request-body bytes once their echo has left (or was dropped). */
static void give_credit(h2s_t *s, piece_t *p) {
  if (p->credit == 0) return;
  if (s->h->session != NULL) {
    if (nghttp2_session_consume(s->h->session, s->id, p->credit) != 0)
      nghttp2_session_consume_connection(s->h->session, p->credit);
  }
  p->credit = 0;
}

/* Frees a PIECE_FREE buffer, or, when frames already queued still point into it, releases it after them in
 * order. Its echo budget comes back with the memory. */
static void free_piece(h2s_t *s, piece_t *p) {
  cb__conn_t *c = s->h->c;
  if (p->touched) {
    cb__outq_ref_range(&c->out, p->base, 0, 0, 1, p->held);
  } else {
    free((void *)p->base);
    cb__echo_release(c, p->held);
  }
}

static void drop_pieces(h2s_t *s) {
  for (uint32_t i = s->phead; i < s->ptail; i++) {
    piece_t *p = &s->pieces[i];
    give_credit(s, p);
    if (p->kind == PIECE_FREE) free_piece(s, p);
  }
  s->phead = s->ptail = 0;
  s->queued = 0;
}

static void stream_free(h2c_t *h, h2s_t *s, int final) {
  if (s->req.handler) cb__req_release(&s->req);
  free(s->tnv);
  s->tnv = NULL;
  if (s->rst_after) h->nrst_after--;
  if (s->cut) h->ncut--;
  drop_pieces(s);
  if (s->prev) s->prev->next = s->next;
  else h->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  h->nstreams--;
  if (!final && h->nfree < FREE_STREAMS_MAX) {
    s->next = h->free_streams;
    h->free_streams = s;
    h->nfree++;
    return;
  }
  free(s->head);
  free(s->hdrs);
  free(s->pieces);
  free(s);
}

static __attribute__((noinline)) int head_grow(h2s_t *s, size_t n) {
  size_t cap = s->head_cap ? s->head_cap : 256;
  while (cap < s->head_len + n) cap *= 2;
  char *b = realloc(s->head, cap);
  if (b == NULL) return -1;
  s->head = b;
  s->head_cap = cap;
  return 0;
}

/* Room for n more bytes of the head. */
static inline int head_reserve(h2s_t *s, size_t n) {
  return s->head_len + n <= s->head_cap ? 0 : head_grow(s, n);
}

static int head_append(h2s_t *s, const uint8_t *p, size_t n) {
  if (n == 0) return 0;
  if (head_reserve(s, n) != 0) return -1;
  memcpy(s->head + s->head_len, p, n);
  s->head_len += n;
  return 0;
}

static int add_header(h2s_t *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen, int lower) {
  if (s->nhdrs == s->hdrs_cap) {
    int cap = s->hdrs_cap ? 2 * s->hdrs_cap : 16;
    cb__hdr_t *a = realloc(s->hdrs, (size_t)cap * sizeof *a);
    if (a == NULL) return -1;
    s->hdrs = a;
    s->hdrs_cap = cap;
  }
  size_t at = s->head_len;
  if (head_reserve(s, nlen + vlen) != 0) return -1;
  memcpy(s->head + at, name, nlen);
  if (vlen > 0) memcpy(s->head + at + nlen, value, vlen);
  s->head_len = at + nlen + vlen;
  for (size_t i = 0; lower && i < nlen; i++) /* an HTTP/1.1 name (upgrade): lowercase, as HTTP/2 sends them */
    if (s->head[at + i] >= 'A' && s->head[at + i] <= 'Z') s->head[at + i] += 32;
  /* Offsets until the head is complete: the buffer may still move. */
  s->hdrs[s->nhdrs++] = (cb__hdr_t){(const char *)(uintptr_t)at, nlen, (const char *)(uintptr_t)(at + nlen), vlen};
  return 0;
}

/* ---- the response API ---- */

static ssize_t provider_read(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *src, void *ud);

static void put_u64(char *dst, size_t cap, uint64_t v, size_t *len) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  size_t o = 0;
  while (n > 0 && o < cap) dst[o++] = tmp[--n];
  *len = o;
}

#define NV(n, nl, v, vl) \
  (nghttp2_nv) { (uint8_t *)(n), (uint8_t *)(v), (nl), (vl), NGHTTP2_NV_FLAG_NONE }
/* A field whose name and value outlive the HEADERS frame (it is written in this event's nghttp2_session_send,
 * before the Date cache or the table can change): nghttp2 references them instead of copying. */
#define NV_REF(n, nl, v, vl) \
  (nghttp2_nv) { (uint8_t *)(n), (uint8_t *)(v), (nl), (vl), NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE }

static void h2_head(cb__req_t *r, int status, const char *ctype, const cb__hdr_t *extra, int nextra,
                    int64_t content_length) {
  h2s_t *s = r->stream;
  h2c_t *h = s->h;
  cb__worker_t *w = h->c->w;
  nghttp2_nv stack_nv[16], *nv = stack_nv;
  if (nextra > 12) { /* a stub's long header list */
    nv = malloc((size_t)(nextra + 4) * sizeof *nv);
    if (nv == NULL) nextra = 0;
    if (nv == NULL) nv = stack_nv;
  }
  int n = 0;
  char *status_buf = s->status_buf, *len_buf = s->len_buf;
  status_buf[0] = (char)('0' + status / 100);
  status_buf[1] = (char)('0' + status / 10 % 10);
  status_buf[2] = (char)('0' + status % 10);
  size_t len_len;
  nv[n++] = NV_REF(":status", 7, status_buf, 3);
  nv[n++] = NV_REF("date", 4, w->date_line + 6, w->date_len - 8); /* "date: " ... "\r\n" */
  if (ctype) nv[n++] = NV_REF("content-type", 12, ctype, strlen(ctype));
  for (int i = 0; i < nextra; i++) nv[n++] = NV(extra[i].name, extra[i].name_len, extra[i].value, extra[i].value_len);
  if (content_length >= 0) {
    put_u64(len_buf, sizeof s->len_buf, (uint64_t)content_length, &len_len);
    nv[n++] = NV_REF("content-length", 14, len_buf, len_len);
  }
  /* A body follows unless the size says none: then HEADERS carries END_STREAM. */
  s->provider = !s->head_only && content_length != 0 && content_length != CB__NO_BODY;
  nghttp2_data_provider prd = {.source = {.ptr = s}, .read_callback = provider_read};
  if (s->provider && !s->client_priority && (content_length < 0 || content_length > ONE_FRAME)) {
    /* RFC 9218's default (urgency 3, not incremental) sends the streams of one urgency one after the other:
     * a small answer would wait behind a large one. Incremental, a body of more than one frame shares the
     * connection as under RFC 7540's default weights (a one-frame body waits at most one frame). A client's
     * priority field is left to rule. */
    static const nghttp2_extpri shared = {.urgency = NGHTTP2_EXTPRI_DEFAULT_URGENCY, .inc = 1};
    nghttp2_session_change_extpri_stream_priority(h->session, s->id, &shared, 0);
  }
  int rv = nghttp2_submit_response(h->session, s->id, nv, (size_t)n, s->provider ? &prd : NULL);
  if (nv != stack_nv) free(nv); /* nghttp2 copied the fields */
  if (rv != 0) s->provider = 0;
  r->res_state = CB__RES_HEAD;
}

static int push_piece(h2s_t *s, piece_t p) {
  if (s->ptail == s->pcap) {
    if (s->phead > 0) {
      memmove(s->pieces, s->pieces + s->phead, (s->ptail - s->phead) * sizeof *s->pieces);
      s->ptail -= s->phead;
      s->phead = 0;
    }
    if (s->ptail == s->pcap) {
      uint32_t cap = s->pcap ? 2 * s->pcap : 8;
      piece_t *a = realloc(s->pieces, cap * sizeof *a);
      if (a == NULL) return -1;
      s->pieces = a;
      s->pcap = cap;
    }
  }
  s->pieces[s->ptail++] = p;
  s->queued += p.len;
  if (s->deferred) {
    s->deferred = 0;
    nghttp2_session_resume_data(s->h->session, s->id);
  }
  return 0;
}

/* What a stream's unsent answer costs: its bytes and a piece_t per piece. A generator's pieces may be tiny (a
 * drip's single bytes): counted by their bytes alone, a stream that flow control holds (window 0) took all
 * 100,000 pieces of a drip, 4.8 MB of piece_t for 100 kB of body, and a connection that many per stream. */
static size_t stream_cost(const h2s_t *s) { return s->queued + (size_t)(s->ptail - s->phead) * sizeof(piece_t); }

static int stream_full(const h2s_t *s) {
  return stream_cost(s) >= CB__OUT_HIGH_WATER || s->h->c->out.bytes >= CB__OUT_HIGH_WATER;
}

static int h2_data(cb__req_t *r, const char *p, size_t n, int flags) {
  h2s_t *s = r->stream;
  int piece_end = (flags & CB__DATA_PIECE_END) != 0;
  flags &= CB__DATA_OWNERSHIP;
  if (!s->provider || n == 0 || s->refused) {
    if (flags == CB__DATA_FREE || flags == CB__DATA_HELD) free((void *)p);
    if (flags == CB__DATA_HELD) cb__echo_release(s->h->c, n);
    return 0;
  }
  piece_t piece = {.kind = PIECE_STATIC, .piece_end = (uint8_t)piece_end, .fd = -1, .base = p, .off = 0, .len = n};
  if (flags == CB__DATA_COPY) { /* the caller's bytes are transient: keep a copy until it is sent */
    /* A copy of request body (a streamed echo) is held from the echo budget, as /echo's body: the receive
     * window alone held a peer that sends without reading to 16 MiB a connection, any number of connections.
     * Over the budget the piece is dropped and the stream cut (on_data_chunk: the answer has begun). */
    if (s->in_body && cb__echo_hold(s->h->c, n) != 0) {
      s->over_budget = 1;
      return 1;
    }
    char *b = malloc(n);
    if (b == NULL) {
      if (s->in_body) cb__echo_release(s->h->c, n);
      return 1;
    }
    memcpy(b, p, n);
    piece.base = b;
    piece.kind = PIECE_FREE;
    if (s->in_body) {
      /* Its receive window comes back only when the copy has been sent, so a peer that sends without reading
       * is held to one window per stream; its budget when the copy is freed. */
      piece.credit = (uint32_t)n;
      piece.held = n;
      s->body_held += n;
    }
  } else if (flags == CB__DATA_FREE || flags == CB__DATA_HELD) {
    piece.kind = PIECE_FREE;
    piece.held = flags == CB__DATA_HELD ? n : 0;
  }
  if (push_piece(s, piece) != 0) {
    if (piece.kind == PIECE_FREE) free_piece(s, &piece);
    return 1;
  }
  return stream_full(s);
}

static int h2_file(cb__req_t *r, int fd, const char *map, uint64_t off, size_t n) {
  h2s_t *s = r->stream;
  if (!s->provider || n == 0 || s->refused) return 0;
  /* A mapped file goes out by reference into its mapping: each 16 KiB DATA frame is then one iovec next to
   * its header, and a batch of frames leaves in one writev instead of a sendfile per frame. */
  int rc;
  if (map != NULL)
    rc = push_piece(s, (piece_t){.kind = PIECE_STATIC, .piece_end = 1, .fd = -1, .base = map, .off = off, .len = n});
  else
    rc = push_piece(s, (piece_t){.kind = PIECE_FILE, .piece_end = 1, .fd = fd, .base = NULL, .off = off, .len = n});
  return rc != 0 || stream_full(s);
}

static void h2_end(cb__req_t *r) {
  h2s_t *s = r->stream;
  s->res_ended = 1;
  r->res_state = CB__RES_ENDED;
  if (s->provider && s->deferred) {
    s->deferred = 0;
    nghttp2_session_resume_data(s->h->session, s->id);
  }
}

/* The trailer fields end the stream (a HEADERS block after the body, from the data provider at its end), names
 * lowercased; the fields a stub may not give either (cb__forbidden_header: the connection-specific ones RFC 9113
 * 8.2.2 forbids, and the framing) are left out. A response without
 * a data provider (its head said no body) drops them. */
static void h2_end_trailers(cb__req_t *r, const cb__hdr_t *t, int n) {
  h2s_t *s = r->stream;
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += t[i].name_len + t[i].value_len;
  if (s->provider && !s->head_only && n > 0 && s->tnv == NULL &&
      (s->tnv = malloc((size_t)n * sizeof *s->tnv + bytes)) != NULL) {
    uint8_t *b = (uint8_t *)(s->tnv + n);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
      if (cb__forbidden_header(t[i].name, t[i].name_len)) continue;
      nghttp2_nv *v = &s->tnv[k++];
      v->name = b;
      for (size_t j = 0; j < t[i].name_len; j++) {
        char ch = t[i].name[j];
        *b++ = (uint8_t)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
      }
      v->namelen = t[i].name_len;
      v->value = b;
      memcpy(b, t[i].value, t[i].value_len);
      b += t[i].value_len;
      v->valuelen = t[i].value_len;
      v->flags = NGHTTP2_NV_FLAG_NONE;
    }
    s->ntnv = k;
    if (k == 0) {
      free(s->tnv);
      s->tnv = NULL;
    }
  }
  h2_end(r);
}

/* An answer that cannot end well: its stream is reset, the connection goes on. */
static void h2_abort(cb__req_t *r, uint32_t code) {
  h2s_t *s = r->stream;
  CB__STAT_INC(s->h->c->w, h2_errors);
  nghttp2_submit_rst_stream(s->h->session, NGHTTP2_FLAG_NONE, s->id, code);
}

/* The stream's pieces nghttp2 has not framed yet, with what each piece costs (stream_cost): what waits for the
 * windows (the connection's output queue takes frames only up to its high-water mark, shared by the streams). */
static size_t h2_queued(const cb__req_t *r) { return stream_cost((const h2s_t *)r->stream); }

static const cb__proto_faults_t h2_faults;
static const cb__proto_t h2_proto = {.head = h2_head, .data = h2_data, .file = h2_file, .end = h2_end,
                                     .end_trailers = h2_end_trailers, .abort = h2_abort, .faults = &h2_faults,
                                     .queued = h2_queued};

/* ---- the data provider and the send callbacks ---- */

static ssize_t provider_body(h2s_t *s, uint8_t *buf, size_t length, uint32_t *flags);

static ssize_t provider_read(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                             uint32_t *flags, nghttp2_data_source *src, void *ud) {
  (void)ud;
  h2s_t *s = src->ptr;
  ssize_t n = provider_body(s, buf, length, flags);
  if (n >= 0 && (*flags & NGHTTP2_DATA_FLAG_EOF) && s->tnv != NULL) { /* end_trailers: they end the stream */
    *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_submit_trailer(session, id, s->tnv, s->ntnv); /* copies the block */
    free(s->tnv);
    s->tnv = NULL;
    s->ntnv = 0;
  } else if (n >= 0 && (*flags & NGHTTP2_DATA_FLAG_EOF) && s->trailers) { /* a fault's trailers end the stream */
    static const nghttp2_nv trailer[] = {
        {(uint8_t *)"x-trailer", (uint8_t *)"cbench", 9, 6, NGHTTP2_NV_FLAG_NONE}};
    s->trailers = 0;
    *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_submit_trailer(session, id, trailer, 1);
  }
  return n;
}

static ssize_t provider_body(h2s_t *s, uint8_t *buf, size_t length, uint32_t *flags) {
  if (s->h->hold_data) {
    s->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (s->phead == s->ptail) {
    if (s->res_ended) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    s->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  piece_t *p = &s->pieces[s->phead];
  if (p->kind != PIECE_FILE && p->len <= CB__COPY_MAX) {
    /* Small pieces: gather as many as fit into one frame, copied (cheaper than a frame per piece). */
    size_t o = 0;
    while (s->phead < s->ptail && o < length) {
      p = &s->pieces[s->phead];
      if (p->kind == PIECE_FILE || p->len > CB__COPY_MAX) break;
      size_t n = p->len < length - o ? p->len : length - o;
      memcpy(buf + o, p->base + p->off, n);
      o += n;
      p->off += n;
      p->len -= n;
      s->queued -= n;
      if (p->len > 0) break;
      give_credit(s, p);
      int end = p->piece_end;
      if (p->kind == PIECE_FREE) free_piece(s, p);
      s->phead++;
      if (end) break; /* the next piece starts a frame of its own */
    }
    if (s->phead == s->ptail) {
      s->phead = s->ptail = 0;
      if (s->res_ended) *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return (ssize_t)o;
  }
  size_t n = p->len < length ? p->len : length;
  *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (s->res_ended && s->phead + 1 == s->ptail && n == p->len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static int send_data(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                     nghttp2_data_source *src, void *ud) {
  (void)session;
  h2c_t *h = ud;
  h2s_t *s = src->ptr;
  cb__outq_t *q = &h->c->out;
  if (q->bytes >= CB__OUT_HIGH_WATER) {
    h->would_block = 1;
    return NGHTTP2_ERR_WOULDBLOCK;
  }
  cb__outq_copy(q, framehd, 9);
  (void)frame; /* no padding is ever selected, so the payload follows the header directly */
  size_t left = length;
  while (left > 0 && s->phead < s->ptail) {
    piece_t *p = &s->pieces[s->phead];
    size_t n = p->len < left ? p->len : left;
    int last = n == p->len;
    if (p->kind == PIECE_FILE) {
      cb__outq_file(q, p->fd, p->off, n);
    } else if (n <= CB__COPY_MAX) {
      cb__outq_copy(q, p->base + p->off, n);
      if (last && p->kind == PIECE_FREE) free_piece(s, p);
    } else {
      int release = last && p->kind == PIECE_FREE;
      cb__outq_ref_range(q, p->base, p->off, n, release, release ? p->held : 0);
      if (!last) p->touched = 1;
    }
    p->off += n;
    p->len -= n;
    s->queued -= n;
    left -= n;
    if (p->len == 0) {
      give_credit(s, p);
      s->phead++;
    }
  }
  if (s->phead == s->ptail) s->phead = s->ptail = 0;
  return 0;
}

/* Our SETTINGS frame carries nghttp2's higher stream limit: the peer is told the configured one. */
static void write_stream_limit(char *frame, size_t len, uint32_t limit) {
  if (len < 9 || frame[3] != NGHTTP2_SETTINGS || (frame[4] & NGHTTP2_FLAG_ACK)) return;
  size_t flen = ((size_t)(uint8_t)frame[0] << 16) | ((size_t)(uint8_t)frame[1] << 8) | (uint8_t)frame[2];
  for (size_t o = 9; o + 6 <= 9 + flen && o + 6 <= len; o += 6) {
    uint8_t *e = (uint8_t *)frame + o;
    uint16_t id = (uint16_t)(e[0] << 8 | e[1]);
    uint32_t v = (uint32_t)e[2] << 24 | (uint32_t)e[3] << 16 | (uint32_t)e[4] << 8 | e[5];
    if (id != NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS || v != nghttp2_stream_limit(limit)) continue;
    e[2] = (uint8_t)(limit >> 24);
    e[3] = (uint8_t)(limit >> 16);
    e[4] = (uint8_t)(limit >> 8);
    e[5] = (uint8_t)limit;
  }
}

static ssize_t send_cb(nghttp2_session *session, const uint8_t *data, size_t len, int flags, void *ud) {
  (void)session;
  (void)flags;
  h2c_t *h = ud;
  if (h->c->out.bytes >= CB__OUT_HIGH_WATER) {
    h->would_block = 1;
    return NGHTTP2_ERR_WOULDBLOCK;
  }
  char *dst = cb__outq_reserve(&h->c->out, len);
  if (dst == NULL) return NGHTTP2_ERR_CALLBACK_FAILURE;
  memcpy(dst, data, len);
  /* nghttp2 hands each frame to this callback whole (frames are serialised one at a time). */
  write_stream_limit(dst, len, h->c->w->cfg->h2_max_concurrent_streams);
  cb__outq_commit(&h->c->out, len);
  return (ssize_t)len;
}

/* ---- receiving ---- */

/* An HTTP/2 header name (lowercase on the wire) against a literal: the length is a constant, so the
 * comparison is a few instructions inline. */
#define NAME_IS(a, n, lit) ((n) == sizeof(lit) - 1 && memcmp((a), (lit), sizeof(lit) - 1) == 0)

/* The same for an HTTP/1.1 name (any case) against a lowercase literal. */
static int ci_eq(const char *a, size_t n, const char *lit) {
  if (strlen(lit) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if ((a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : a[i]) != lit[i]) return 0;
  return 1;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *ud) {
  h2c_t *h = ud;
  if (h == NULL) return 0; /* a session being restored (wake): its frames are not the peer's */
  h->block_bytes = 0;
  h->block_over = 0;
  h->block_sid = frame->hd.stream_id;
  h->block_s = NULL;
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) { /* trailers */
    h->block_s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    return 0;
  }
  if ((uint32_t)h->nstreams >= h->c->w->cfg->h2_max_concurrent_streams) {
    /* Over our SETTINGS_MAX_CONCURRENT_STREAMS: a stream error, REFUSED_STREAM (RFC 9113 5.1.2), so the
     * client may retry it and its other streams go on. nghttp2 still decodes the header block (HPACK stays
     * in step) and the stream has no user data, so every later callback ignores it. */
    CB__STAT_INC(h->c->w, h2_errors);
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  h2s_t *s = stream_new(h, frame->hd.stream_id);
  if (s == NULL) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s);
  h->block_s = s;
  return 0;
}

static void refuse(h2s_t *s, int status, int ends);

/* A header block over the header limit. A request is answered 431 at the block's end (too_large), and the
 * engine does no more work per field. nghttp2 still checks every field it decodes, though: 16,000 references
 * to one 4,000-byte field cost it ~30 ms per frame (the HPACK bomb). So a block that goes on to four times the
 * limit is only decoded from there (HPACK must stay in step), not looked at: TEMPORAL_CALLBACK_FAILURE, after
 * which nghttp2 resets the stream (INTERNAL_ERROR, no 431). A connection that sends more than
 * OVERSIZED_BLOCKS_MAX oversized blocks is ended: GOAWAY(ENHANCE_YOUR_CALM). */
static int block_too_large(h2c_t *h, const nghttp2_frame *frame, h2s_t *s) {
  if (!h->block_over) {
    h->block_over = 1;
    if (++h->oversized > OVERSIZED_BLOCKS_MAX) {
      h->calm = 1;
      return NGHTTP2_ERR_CALLBACK_FAILURE; /* nghttp2_session_mem_recv stops here; h2_read sends the GOAWAY */
    }
    if (s != NULL && frame->headers.cat == NGHTTP2_HCAT_REQUEST) s->too_large = 1;
  }
  size_t limit = h->c->w->cfg->max_header_bytes;
  return h->block_bytes / 4 > limit ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  (void)flags;
  h2c_t *h = ud;
  if (h == NULL || frame->hd.type != NGHTTP2_HEADERS) return 0;
  h2s_t *s = frame->hd.stream_id == h->block_sid ? h->block_s
                                                 : nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
  /* The same accounting as HTTP/1.1's header limit; 32 bytes per field as in SETTINGS_MAX_HEADER_LIST_SIZE.
   * Every block counts, trailers and refused streams' too: each costs nghttp2 the same work. */
  h->block_bytes += nlen + vlen + 32;
  if (h->block_bytes > h->c->w->cfg->max_header_bytes) return block_too_large(h, frame, s);
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST || s == NULL || s->refused || s->too_large) return 0;
  if (nlen > 0 && name[0] == ':') {
    /* Kept in the head buffer, by offset until the head is complete. */
    if (NAME_IS(name, nlen, ":method") && !s->have_method) {
      s->req.method = (uint16_t)cb_method_bit((cb_str_t){(const char *)value, vlen});
      s->method_len = vlen;
      s->have_method = 1;
      /* A known method's name is a constant; another one is kept with the head. */
      s->req.method_str = cb__method_name(s->req.method);
      s->method_off = s->head_len;
      if (s->req.method_str == NULL && head_append(s, value, vlen) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    } else if (NAME_IS(name, nlen, ":path") && !s->have_path) {
      s->path_off = s->head_len;
      s->have_path = 1;
      if (head_append(s, value, vlen) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      const uint8_t *q = vlen > 0 ? memchr(value, '?', vlen) : NULL;
      s->path_len = q ? (size_t)(q - value) : vlen;
      s->target_len = vlen;
    } else if (NAME_IS(name, nlen, ":authority") && !s->have_authority) {
      s->authority_off = s->head_len;
      s->authority_len = vlen;
      s->have_authority = 1;
      if (head_append(s, value, vlen) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return 0;
  }
  if (NAME_IS(name, nlen, "content-length")) {
    int64_t v = 0;
    for (size_t i = 0; i < vlen && v <= INT64_MAX / 10 - 10; i++) v = v * 10 + (value[i] - '0');
    s->req.content_length = v; /* nghttp2 has checked it is all digits and matches the DATA received */
  } else if (NAME_IS(name, nlen, "priority")) {
    s->client_priority = 1;
  } else if (NAME_IS(name, nlen, "expect")) {
    s->expect_continue = ci_eq((const char *)value, vlen, "100-continue");
  }
  /* Every regular field is kept: routes match on them and the journal records them. */
  if (add_header(s, name, nlen, value, vlen, 0) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  return 0;
}

/* Answers a refused request (431, 413, 501) on its stream; the handler never sees it. */
static void refuse(h2s_t *s, int status, int ends) {
  cb__worker_t *w = s->h->c->w;
  if (status == 431) CB__STAT_INC(w, status_431);
  if (status == 413) CB__STAT_INC(w, status_413);
  s->refused = 1;
  if (s->req.res_state == CB__RES_NONE) s->req.status = status; /* what the journal records */
  if (s->req.handler) cb__req_release(&s->req);
  if (s->req.res_state == CB__RES_NONE) {
    s->head_only = 1;
    h2_head(&s->req, status, NULL, NULL, 0, 0);
    s->res_ended = 1;
    s->req.res_state = CB__RES_ENDED;
  } else {
    /* A streamed answer had begun (an echo): it cannot end well, so the stream is cut. */
    CB__STAT_INC(w, h2_errors);
    nghttp2_submit_rst_stream(s->h->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
    return;
  }
  /* The rest of the request body is not wanted. RFC 9113 section 8.1: after a complete response, RST_STREAM
   * with NO_ERROR asks the client to stop sending; sent earlier, it would discard the answer. */
  if (!s->req.req_done && !ends && !s->rst_after) {
    s->rst_after = 1;
    s->h->nrst_after++;
  }
}

/* `expect: 100-continue` on a request whose body is still to come, and no answer yet (RFC 9110 10.1.1): an
 * interim HEADERS with :status 100, as HTTP/1.1 sends `100 Continue`, so that a client waiting for it sends the
 * body. A request the route answered at once (a 413 or 503 before the body) gets that answer instead. */
static __attribute__((noinline)) void send_continue(h2c_t *h, h2s_t *s) {
  static const nghttp2_nv cont[] = {{(uint8_t *)":status", (uint8_t *)"100", 7, 3,
                                     NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE}};
  nghttp2_submit_headers(h->session, NGHTTP2_FLAG_NONE, s->id, NULL, cont, 1, NULL);
}

/* The head is complete: route it (or refuse it) and hand it to the handler. */
static void request_head_done(h2c_t *h, h2s_t *s, int ends) {
  cb__req_t *r = &s->req;
  cb__worker_t *w = h->c->w;
  CB__STAT_INC(w, requests_by_proto[h->c->proto_id]); /* h2c_prior, h2c_upgrade or h2_tls: attach() */
  if (s->too_large) {
    refuse(s, 431, ends);
    return;
  }
  if (r->method == 0) { /* a method the engine does not implement */
    refuse(s, 501, ends);
    return;
  }
  if (r->content_length > 0 && (uint64_t)r->content_length > w->cfg->max_body_bytes) {
    refuse(s, 413, ends);
    return;
  }
  for (int i = 0; i < s->nhdrs; i++) { /* the buffer stops moving here: offsets become pointers */
    s->hdrs[i].name = s->head + (uintptr_t)s->hdrs[i].name;
    s->hdrs[i].value = s->head + (uintptr_t)s->hdrs[i].value;
  }
  r->path = s->have_path ? s->head + s->path_off : ""; /* CONNECT has no :path */
  r->path_len = s->path_len;
  r->target_len = s->target_len;
  if (r->method_str == NULL) r->method_str = s->have_method ? s->head + s->method_off : "";
  r->method_len = s->method_len;
  r->authority = s->have_authority ? s->head + s->authority_off : NULL;
  r->authority_len = s->authority_len;
  r->headers = s->hdrs;
  r->nheaders = s->nhdrs;
  s->head_only = r->method == CB_METHOD_HEAD;
  s->dispatched = 1;
  cb__req_dispatch(r);
  if (s->expect_continue && !ends && r->res_state == CB__RES_NONE) send_continue(h, s);
}

static void request_done(h2s_t *s) {
  cb__req_t *r = &s->req;
  if (r->req_done) return;
  r->req_done = 1;
  if (s->dispatched && !s->refused && r->handler) r->handler->on_end(r);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud) {
  h2c_t *h = ud;
  if (h == NULL) return 0;
  if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK)) h->settings_seen = 1;
  if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) && h->settings_owed > 0 &&
      --h->settings_owed == 0 && h->table_asked) {
    /* The peer applied a 0-byte table: nghttp2 has emptied ours, and the idle session can go (h2_after). */
    h->table_asked = 0;
    h->table_zero = 1;
    h->park_soon = 1;
  }
  if (h->hold_data && frame->hd.type == NGHTTP2_SETTINGS) {
    /* The upgraded client has sent its preface: the response to the upgrade request may now flow. (curl
     * 7.88 fails when more than 32 KiB of DATA follow the 101 before it has sent its preface.) */
    h->hold_data = 0;
    for (h2s_t *s = h->streams; s != NULL; s = s->next) {
      if (!s->deferred) continue;
      s->deferred = 0;
      nghttp2_session_resume_data(session, s->id);
    }
  }
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  cb__conn_progress(h->c);
  h2s_t *s = frame->hd.type == NGHTTP2_HEADERS && frame->hd.stream_id == h->block_sid
                 ? h->block_s
                 : nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
  if (s == NULL) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
    request_head_done(h, s, frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) request_done(s);
  return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud) {
  h2c_t *h = ud;
  if (h == NULL) return 0;
  h2s_t *s = nghttp2_session_get_stream_user_data(session, id);
  cb__conn_progress(h->c);
  /* Receive windows are given back by hand (no automatic WINDOW_UPDATE): at once for bytes nobody keeps,
   * later for bytes a handler copied into its response. */
  size_t held = 0;
  if (s != NULL && !s->refused && s->dispatched) {
    cb__req_t *r = &s->req;
    r->body_received += len;
    if (r->body_received > h->c->w->cfg->max_body_bytes) {
      refuse(s, 413, flags & NGHTTP2_FLAG_END_STREAM);
    } else {
      if (r->jseq) cb__journal_body(r, (const char *)data, len);
      if (r->handler && r->handler->on_body) {
        s->in_body = 1;
        s->body_held = 0;
        r->handler->on_body(r, (const char *)data, len);
        s->in_body = 0;
        held = s->body_held < len ? s->body_held : len;
        if (s->over_budget) refuse(s, 503, flags & NGHTTP2_FLAG_END_STREAM); /* a piece of the echo is missing */
      }
    }
  }
  if (len > held && nghttp2_session_consume(session, id, len - held) != 0)
    nghttp2_session_consume_connection(session, len - held);
  return 0;
}

static void sid_set(h2c_t *h, int32_t sid, uint32_t map, int on);
static int sid_remembered(const h2c_t *h, int32_t sid);

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t error_code, void *ud) {
  h2c_t *h = ud;
  if (h == NULL) return 0;
  h2s_t *s = nghttp2_session_get_stream_user_data(session, id);
  /* Closed after the client ended its side: later DATA or HEADERS on it get STREAM_CLOSED (track()). */
  if (sid_remembered(h, id) &&
      ((s != NULL && s->req.req_done) || nghttp2_session_get_stream_remote_close(session, id) == 1))
    sid_set(h, id, SID_CLOSED, 1);
  if (s == NULL) return 0;
  if (id == h->block_sid) h->block_s = NULL;
  nghttp2_session_set_stream_user_data(session, id, NULL);
  /* A stream the peer reset, or that closed before its response ended, left work unfinished. */
  if (error_code != NGHTTP2_NO_ERROR && !s->refused && s->req.res_state != CB__RES_ENDED && !s->req.fault)
    CB__STAT_INC(h->c->w, resets);
  stream_free(h, s, 0);
  return 0;
}

/* A fault's cut (h2_cut): the last frame of what the stream had queued has just gone into the output. */
static void cut_now(h2c_t *h, h2s_t *s, int ended) {
  uint8_t how = s->cut;
  s->cut = 0;
  h->ncut--;
  if (how == CB__CUT_RESET)
    h->c->abort_after_flush = 1; /* conn.c resets once that frame has been written */
  else if (how == CB__CUT_CLOSE)
    cb__conn_close_linger(h->c); /* the same, ended the transport's way */
  else if (!ended) /* a head that ended the stream (HEAD, an empty body) leaves nothing to reset */
    nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id, s->cut_code);
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *ud) {
  h2c_t *h = ud;
  if (h == NULL) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) cb__conn_progress(h->c);
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && h->nrst_after > 0) {
    h2s_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s != NULL && s->rst_after && !s->req.req_done)
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
  }
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) && h->ncut > 0) {
    h2s_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s != NULL && s->cut && s->phead == s->ptail) cut_now(h, s, frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
  }
  if ((frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) ||
      (frame->hd.type == NGHTTP2_RST_STREAM && frame->rst_stream.error_code != NGHTTP2_CANCEL &&
       frame->rst_stream.error_code != NGHTTP2_NO_ERROR))
    CB__STAT_INC(h->c->w, h2_errors);
  return 0;
}

/* ---- the peer's frames, followed beside nghttp2 ----
 * nghttp2 says neither when a header block is half received nor which stream ids the client opened; both
 * are read here off the frame headers, before nghttp2 parses the same bytes. */

static int sid_get(const h2c_t *h, int32_t sid, uint32_t map) {
  uint32_t i = map + ((uint32_t)sid >> 1) % OPENED_WINDOW;
  return h->opened[i >> 3] >> (i & 7) & 1;
}

static void sid_set(h2c_t *h, int32_t sid, uint32_t map, int on) {
  uint32_t i = map + ((uint32_t)sid >> 1) % OPENED_WINDOW;
  if (on)
    h->opened[i >> 3] |= (uint8_t)(1u << (i & 7));
  else
    h->opened[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* A client id, opened or not, that is still remembered. */
static int sid_remembered(const h2c_t *h, int32_t sid) {
  return h->opened != NULL && sid > 0 && (sid & 1) && sid <= h->max_sid &&
         (int64_t)h->max_sid - sid < 2 * OPENED_WINDOW;
}

/* A new client stream: opened, not closed. */
static void opened_set(h2c_t *h, int32_t sid, int on) {
  sid_set(h, sid, SID_OPENED, on);
  sid_set(h, sid, SID_CLOSED, 0);
}

/* A client HEADERS frame on stream sid. Above every id so far, it opens the stream (the ids skipped are
 * never opened: RFC 9113 5.1.1 closes them implicitly). Below, it must go to a stream the client opened
 * (trailers, or a reuse of a closed stream that nghttp2 judges); on one it never opened it is a connection
 * error, PROTOCOL_ERROR (h2spec 5.1.1/2; nghttp2 cannot tell such an id from a closed one it forgot). Ids too
 * far below to be remembered, even ids and 0 are left to nghttp2. */
static int headers_sid_ok(h2c_t *h, int32_t sid) {
  if (sid <= 0 || (sid & 1) == 0) return 1;
  if (h->opened == NULL && (h->opened = calloc(1, SID_BYTES)) == NULL) return 0; /* out of memory: end */
  if (sid > h->max_sid) {
    if ((int64_t)sid - h->max_sid >= 2 * OPENED_WINDOW)
      memset(h->opened, 0, SID_BYTES);
    else
      for (int32_t k = h->max_sid + 2; k < sid; k += 2) opened_set(h, k, 0);
    opened_set(h, sid, 1);
    h->max_sid = sid;
    return 1;
  }
  return (int64_t)h->max_sid - sid >= 2 * OPENED_WINDOW || sid_get(h, sid, SID_OPENED);
}

/* Reads the dependency of a PRIORITY frame as it passes. Returns 0 when the stream depends on itself. With
 * RFC 7540 priorities off (SETTINGS_NO_RFC7540_PRIORITIES), nghttp2 checks only a PRIORITY frame's length;
 * RFC 9113 6.3 still makes a self-dependency a PROTOCOL_ERROR. */
static int priority_ok(h2c_t *h, const uint8_t *p, size_t n) {
  size_t take = n < 4u - h->pri_len ? n : 4u - h->pri_len;
  memcpy(h->pri + h->pri_len, p, take);
  h->pri_len = (uint8_t)(h->pri_len + take);
  if (h->pri_len < 4) return 1;
  h->ftype = 0xff; /* read: the rest of the payload is skipped */
  int32_t dep = (int32_t)((uint32_t)(h->pri[0] & 0x7f) << 24 | (uint32_t)h->pri[1] << 16 |
                          (uint32_t)h->pri[2] << 8 | h->pri[3]);
  return dep != h->fsid;
}

/* DATA or HEADERS on a stream id the client used before. On a stream that closed after the client had ended
 * its side, it is a connection error, STREAM_CLOSED (RFC 9113 5.1); nghttp2 judges this only for the closed
 * streams it keeps, and with RFC 7540 priorities off it keeps none, so the engine remembers them
 * (SID_CLOSED, set in on_stream_close; the client's RST_STREAM ends its side too). A stream the server reset
 * before the client ended its side is not marked: frames the client had in flight are ignored, as nghttp2
 * did (RFC 9113 5.1).
 * Returns 1 to go on, 0 to end the connection (closed_err), -1 to stop before this frame header until
 * nghttp2 has read what precedes it: a frame followed since it was last fed may close that stream. */
static int reused_sid_ok(h2c_t *h, int32_t sid) {
  if (!sid_remembered(h, sid)) return 1;
  if (sid_get(h, sid, SID_CLOSED)) {
    h->closed_err = 1;
    return 0;
  }
  if (h->may_close && !h->recheck) return -1;
  return 1;
}

/* Follows [p, p + n). Returns n, or where nghttp2 must stop: before a frame (or its part) that must end the
 * connection (a HEADERS frame on a stream never opened, a PRIORITY frame on stream 0 or depending on itself:
 * PROTOCOL_ERROR; DATA or HEADERS on a closed stream: STREAM_CLOSED), or, with h->paused set, before the last
 * byte of a frame header that is to be checked once nghttp2 has read the bytes before it (reused_sid_ok). */
static size_t track(h2c_t *h, const uint8_t *p, size_t n) {
  size_t o = 0;
  while (o < n) {
    size_t left = n - o, take;
    if (h->preface_left > 0 || h->payload_left > 0) {
      uint32_t *skip = h->preface_left > 0 ? &h->preface_left : &h->payload_left;
      take = left < *skip ? left : *skip;
      if (h->ftype == NGHTTP2_PRIORITY && h->preface_left == 0 && !priority_ok(h, p + o, take)) return o;
      *skip -= (uint32_t)take;
      o += take;
      continue;
    }
    size_t start = o;
    /* A new frame: the header deadline counts from it, unless it continues an open header block (or the
     * preface and first SETTINGS, which count from the connection's start). */
    if (h->fh_len == 0 && h->settings_seen && !h->block_open) cb__conn_head_begin(h->c);
    take = left < 9u - h->fh_len ? left : 9u - h->fh_len;
    memcpy(h->fh + h->fh_len, p + o, take);
    h->fh_len = (uint8_t)(h->fh_len + take);
    o += take;
    if (h->fh_len < 9) break;
    h->fh_len = 0;
    const uint8_t *fh = h->fh;
    h->payload_left = (uint32_t)fh[0] << 16 | (uint32_t)fh[1] << 8 | fh[2];
    h->ftype = fh[3];
    int32_t sid = (int32_t)((uint32_t)(fh[5] & 0x7f) << 24 | (uint32_t)fh[6] << 16 | (uint32_t)fh[7] << 8 | fh[8]);
    h->fsid = sid;
    int reused = (h->ftype == NGHTTP2_DATA || (h->ftype == NGHTTP2_HEADERS && sid <= h->max_sid)) &&
                 (sid & 1) && sid > 0;
    if (h->ftype == NGHTTP2_HEADERS && !headers_sid_ok(h, sid)) return start;
    if (reused) {
      int ok = reused_sid_ok(h, sid);
      if (ok == 0) return start;
      if (ok < 0) { /* nghttp2 gets all but the header's last byte; the next call reads it again */
        h->fh_len = 8;
        h->payload_left = 0;
        h->paused = 1;
        h->recheck = 1;
        return o - 1;
      }
    }
    h->recheck = 0;
    if ((h->ftype == NGHTTP2_DATA || h->ftype == NGHTTP2_HEADERS) && (fh[4] & NGHTTP2_FLAG_END_STREAM))
      h->may_close = 1;
    if (h->ftype == NGHTTP2_PRIORITY) {
      if (sid == 0) return start;
      h->pri_len = 0;
      if (h->payload_left != 5) h->ftype = 0xff; /* nghttp2 answers FRAME_SIZE_ERROR */
    } else if (h->ftype == NGHTTP2_RST_STREAM) {
      h->may_close = 1;
    } else if (h->ftype == NGHTTP2_HEADERS) {
      h->block_open = !(fh[4] & NGHTTP2_FLAG_END_HEADERS);
    } else if (h->ftype == NGHTTP2_CONTINUATION) {
      h->block_open = !(fh[4] & NGHTTP2_FLAG_END_HEADERS);
    }
  }
  return n;
}

/* Whether the peer is in the middle of something that must arrive promptly: the preface and first SETTINGS,
 * a frame header, a header block, or a frame other than DATA. */
static int in_head(const h2c_t *h) {
  return h->preface_left > 0 || !h->settings_seen || h->fh_len > 0 || h->block_open ||
         (h->payload_left > 0 && h->ftype != NGHTTP2_DATA);
}

static int wake(h2c_t *h);

static int h2_read(cb__conn_t *c, const char *data, size_t len) {
  h2c_t *h = c->proto_state;
  const uint8_t *p = (const uint8_t *)data;
  ssize_t rv;
  if (h->session == NULL && wake(h) != 0) return UV_EPROTO;
  h->may_close = 0;
  for (;;) {
    size_t ok = track(h, p, len);
    rv = nghttp2_session_mem_recv(h->session, p, ok);
    if (rv < 0 || ok == len) break;
    if (!h->paused) { /* a frame that ends the connection (track()) */
      rv = NGHTTP2_ERR_PROTO;
      break;
    }
    h->paused = 0;
    h->may_close = 0;
    p += ok;
    len -= ok;
  }
  if (rv < 0) {
    /* Bad preface, a protocol error or a flood: nghttp2 gives up on the session. Say why in GOAWAY, then
     * close. */
    CB__STAT_INC(c->w, h2_errors);
    uint32_t code = rv == NGHTTP2_ERR_FLOODED || h->calm ? NGHTTP2_ENHANCE_YOUR_CALM
                    : h->closed_err                          ? NGHTTP2_STREAM_CLOSED
                                                             : NGHTTP2_PROTOCOL_ERROR;
    nghttp2_session_terminate_session(h->session, code);
  }
  return 0;
}

/* ---- the connection ---- */

static void init_callbacks(void) {
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_send_callback(callbacks, send_cb);
  nghttp2_session_callbacks_set_send_data_callback(callbacks, send_data);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, on_frame_send);
  nghttp2_option_new(&options);
  /* Bound what a hostile peer can make us keep: CONTINUATION frames per header block, queued
   * acknowledgements (PING and SETTINGS floods), streams it resets. */
  nghttp2_option_set_max_continuations(options, 8);
  nghttp2_option_set_max_outbound_ack(options, 1000);
  nghttp2_option_set_stream_reset_rate_limit(options, 1000, 100);
  nghttp2_option_set_no_auto_window_update(options, 1);
  nghttp2_option_set_max_settings(options, MAX_SETTINGS);

}

static uv_once_t callbacks_once = UV_ONCE_INIT;

/* The worker's cache of nghttp2's small blocks (h2_mem.c) is its CB__PART_H2 part, made with its first session
 * and freed when its last connection has closed (the trim) or it stops. */
static void small_free(cb__worker_t *w, void *state) {
  (void)w;
  cb__h2_small_free(state);
}

static int small_trim(cb__worker_t *w, void *state) {
  small_free(w, state);
  return 1;
}

static const cb__part_ops_t small_part = {.free = small_free, .trim = small_trim};

static cb__h2_small_t *small_blocks(cb__worker_t *w) {
  cb__part_t *p = &w->parts[CB__PART_H2];
  if (p->state == NULL) *p = (cb__part_t){cb__h2_small_new(), &small_part};
  return p->state;
}

#define OUR_SETTINGS 4

/* The settings every session of ours sends first. */
static size_t our_settings(const cb_config_t *cfg, nghttp2_settings_entry iv[OUR_SETTINGS]) {
  /* nghttp2 1.52 makes a stream over an acknowledged limit a connection error (GOAWAY), where RFC 9113 5.1.2
   * asks for a stream error. So nghttp2 is given a higher limit, send_cb writes the real one on the wire, and
   * on_begin_headers refuses excess streams with REFUSED_STREAM itself. */
  iv[0] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                                   nghttp2_stream_limit(cfg->h2_max_concurrent_streams)};
  iv[1] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW};
  iv[2] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)cfg->max_header_bytes};
  /* No RFC 7540 priority tree (RFC 9113 deprecates it): nghttp2 then neither keeps a dependency tree nor closed
   * streams, and schedules streams by RFC 9218 urgency. The checks nghttp2 made with them are made here:
   * track() (PRIORITY frames) and on_begin_frame (frames on closed streams). */
  iv[3] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1};
  return OUR_SETTINGS;
}

static h2c_t *session_new(cb__conn_t *c) {
  uv_once(&callbacks_once, init_callbacks);
  h2c_t *h = calloc(1, sizeof *h);
  if (h == NULL) return NULL;
  h->c = c;
  h->preface_left = 24; /* the client magic, after an upgrade too */
  h->max_sid = -1;
  cb__h2_mem_init(&h->mem, small_blocks(c->w));
  if (callbacks == NULL || options == NULL ||
      nghttp2_session_server_new3(&h->session, callbacks, h, options, &h->mem.mem) != 0) {
    cb__h2_mem_free(&h->mem);
    free(h);
    return NULL;
  }
  nghttp2_settings_entry iv[OUR_SETTINGS];
  nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, our_settings(c->w->cfg, iv));
  h->settings_owed = 1;
  nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW);
  return h;
}

static void attach(cb__conn_t *c, h2c_t *h) {
  c->proto_state = h;
  c->proto = CB__PROTO_H2;
  c->proto_id = h->upgraded ? CB_PROTO_H2C_UPGRADE : c->tr.tls ? CB_PROTO_H2_TLS : CB_PROTO_H2C_PRIOR;
  c->ops = &h2_ops;
}

int cb__h2_attach_prior(cb__conn_t *c) {
  h2c_t *h = session_new(c);
  if (h == NULL) return UV_ENOMEM;
  attach(c, h);
  return 0;
}

/* base64url (RFC 4648 section 5) without padding, as HTTP2-Settings carries it. */
static ssize_t b64url_decode(const char *in, size_t n, uint8_t *out, size_t cap) {
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = in[i];
    int v;
    if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
    else if (ch == '-' || ch == '+') v = 62;
    else if (ch == '_' || ch == '/') v = 63;
    else if (ch == '=') break;
    else return -1;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (o == cap) return -1;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  return (ssize_t)o;
}

/* HTTP2-Settings is taken when nghttp2 will take it as the client's first SETTINGS: at most MAX_SETTINGS
 * entries. With more, nghttp2_session_upgrade2 failed after the 101 was decided and the connection closed
 * without an answer (33 to 85 entries; 86 and more are over the 512 bytes read here). Now the request is
 * served as HTTP/1.1, as for any HTTP2-Settings that is not taken. */
int cb__h2_settings_valid(const char *settings, size_t len) {
  uint8_t payload[512];
  ssize_t plen = b64url_decode(settings, len, payload, sizeof payload);
  return plen >= 0 && plen % 6 == 0 && plen / 6 <= MAX_SETTINGS;
}

int cb__h2_upgrade(cb__conn_t *c, const cb__req_t *r, const char *settings, size_t settings_len) {
  uint8_t payload[512];
  ssize_t plen = b64url_decode(settings, settings_len, payload, sizeof payload);
  if (plen < 0 || plen % 6 != 0) return UV_EINVAL;
  h2c_t *h = session_new(c);
  if (h == NULL) return UV_ENOMEM;
  h->upgraded = 1;
  h->opened = calloc(1, SID_BYTES);
  h2s_t *s = h->opened ? stream_new(h, 1) : NULL;
  int rv = s ? nghttp2_session_upgrade2(h->session, payload, (size_t)plen, r->method == CB_METHOD_HEAD, s) : -1;
  if (rv != 0) {
    if (s) stream_free(h, s, 1);
    nghttp2_session_del(h->session);
    cb__h2_mem_free(&h->mem);
    free(h->opened);
    free(h);
    return UV_EINVAL;
  }
  /* nghttp2 1.52 gives a server's stream 1 no user data whatever is passed to upgrade2: without this, its
   * close was never seen, and the stream stayed with the connection until it closed. */
  nghttp2_session_set_stream_user_data(h->session, 1, s);
  h->hold_data = 1; /* set after upgrade2, which applies HTTP2-Settings as a received SETTINGS frame */
  h->max_sid = 1;   /* stream 1 is the upgrade request */
  opened_set(h, 1, 1);
  cb__conn_head_begin(c); /* the preface and SETTINGS have the header timeout from the 101 on */
  /* Stream 1 is the upgrade request: its head comes from HTTP/1.1, and it has no body. */
  s->req.method = r->method;
  s->req.content_length = r->content_length;
  s->method_off = 0;
  s->method_len = r->method_len;
  if (head_append(s, (const uint8_t *)r->method_str, r->method_len) == 0) s->have_method = 1;
  s->path_off = s->head_len;
  if (head_append(s, (const uint8_t *)r->path, r->target_len) == 0) s->have_path = 1;
  s->path_len = r->path_len;
  s->target_len = r->target_len;
  for (int i = 0; i < r->nheaders; i++) {
    const cb__hdr_t *x = &r->headers[i];
    /* Connection-specific fields of the HTTP/1.1 request do not belong to the HTTP/2 stream. */
    if (ci_eq(x->name, x->name_len, "connection") || ci_eq(x->name, x->name_len, "upgrade") ||
        ci_eq(x->name, x->name_len, "http2-settings"))
      continue;
    add_header(s, (const uint8_t *)x->name, x->name_len, (const uint8_t *)x->value, x->value_len, 1);
  }
  CB__STAT_INC(c->w, conns_by_proto[CB_PROTO_H2C_UPGRADE]);
  attach(c, h);
  request_head_done(h, s, 1);
  request_done(s);
  return 0;
}

static void try_park(h2c_t *h);

static void h2_after(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  h->would_block = 0;
  if (h->session == NULL) { /* parked */
    if (h->peer_eof) cb__conn_close_linger(c);
    return;
  }
  if (nghttp2_session_send(h->session) != 0) {
    cb__conn_close(c);
    return;
  }
  if (h->violation) { /* fault.c: behind the HEADERS just written */
    static const char data0[11] = {0, 0, 2, 0 /* DATA */, 0, 0, 0, 0, 0 /* stream 0 */, 'o', 'k'};
    h->violation = 0;
    cb__outq_copy(&c->out, data0, sizeof data0);
  }
  /* nghttp2 wants neither to read nor to write once GOAWAY is out and its streams are done. */
  if (!nghttp2_session_want_read(h->session) && !nghttp2_session_want_write(h->session))
    cb__conn_close_linger(c);
  else if ((h->stopping || h->peer_eof) && h->nstreams == 0 && !nghttp2_session_want_write(h->session))
    cb__conn_close_linger(c);
  else if (h->park_soon) {
    h->park_soon = 0;
    try_park(h);
  }
}

static int h2_writable(cb__conn_t *c, int produce) {
  h2c_t *h = c->proto_state;
  int waiting = h->would_block;
  for (h2s_t *s = h->streams; s != NULL; s = s->next) {
    cb__req_t *r = &s->req;
    if (!(r->blocked && r->res_state == CB__RES_HEAD && r->handler && r->handler->on_writable)) continue;
    if (stream_cost(s) >= CB__OUT_LOW_WATER) continue;
    waiting = 1;
    if (produce) r->handler->on_writable(r);
  }
  return waiting;
}

static void h2_eof(cb__conn_t *c) {
  /* The peer closed its sending side (SHUT_WR) but may still read, as over HTTP/1.1: the requests that are
   * complete get their answers, then the connection closes (h2_after); those still waiting for request bytes
   * never complete and are reset. */
  h2c_t *h = c->proto_state;
  h->peer_eof = 1;
  if (h->session == NULL) return; /* parked: no stream (h2_after closes) */
  for (h2s_t *s = h->streams; s != NULL; s = s->next)
    if (!s->req.req_done) nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
}

/* Which timeout runs: the header timeout while the preface, a frame or a header block is incomplete; the idle
 * timeout on activity when no stream is open; the stall timeout (idle_timeout_ms without progress: no request
 * bytes in, no response bytes out) while a stream waits on the peer, for request bytes or for room to send
 * (flow control, a socket that does not drain, an upgrade's preface); none while every stream waits on its
 * handler (/delay). */
static int h2_timer_mode(const cb__conn_t *c) {
  const h2c_t *h = c->proto_state;
  if (in_head(h)) return CB__TIMER_HEADER;
  if (h->nstreams == 0) return CB__TIMER_IDLE;
  if (c->write_blocked || h->hold_data) return CB__TIMER_STALL;
  for (const h2s_t *s = h->streams; s != NULL; s = s->next)
    if (!s->req.req_done || s->phead != s->ptail || s->req.blocked || s->res_ended) return CB__TIMER_STALL;
  return CB__TIMER_HELD;
}

static void h2_timeout(cb__conn_t *c, int mode) {
  (void)mode;
  h2c_t *h = c->proto_state;
  if (h->timed_out) { /* the GOAWAY of the first timeout could not leave either */
    cb__conn_close(c);
    return;
  }
  h->timed_out = 1;
  if (h->session == NULL && wake(h) != 0) { /* parked: the GOAWAY needs a session */
    cb__conn_close(c);
    return;
  }
  nghttp2_session_terminate_session(h->session, NGHTTP2_NO_ERROR);
  h->stopping = 1;
}

static void h2_stop(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  h->stopping = 1;
  if (h->session == NULL && wake(h) != 0) {
    cb__conn_close(c);
    return;
  }
  /* GOAWAY names the last stream we took: those finish within the stop bound, no new ones start. */
  nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->session),
                        NGHTTP2_NO_ERROR, NULL, 0);
}

static void free_spare_streams(h2c_t *h) {
  while (h->free_streams) {
    h2s_t *s = h->free_streams;
    h->free_streams = s->next;
    free(s->head);
    free(s->hdrs);
    free(s->pieces);
    free(s);
  }
  h->nfree = 0;
}

/* Idle (no stream, no event for CB__REST_MS): the spare streams go, and so do the frame buffer's pages when
 * nothing is being sent (nghttp2 resets that buffer before each frame, so no byte of it is still needed). */
static void h2_rest(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  if (h == NULL || h->session == NULL || h->nstreams > 0) return;
  free_spare_streams(h);
  if (!h->would_block && !nghttp2_session_want_write(h->session))
    cb__h2_mem_rest(&h->mem);
  else
    cb__h2_mem_rest_skipped();
  try_park(h);
}

/* ---- parking an idle session (h2_park.h; docs/tls.md "Idle connections") ----
 * At rest, a connection with no stream and nothing half-received or unsent gives its nghttp2 session back.
 * If the peer's encoder has indexed fields, it is first asked for a 0-byte table (RFC 7541 4.2: it empties
 * its table and indexes nothing more) and the session goes once that is acknowledged; the first bytes from
 * the peer, a timeout or a stop make a new session, and a peer told 0 bytes is offered the usual table again.
 * Not parked: an upgraded connection (stream 1 was the upgrade's), one a fault has changed the settings of. */

static int park_ready(const h2c_t *h) {
  return h->session != NULL && h->nstreams == 0 && !h->upgraded && !h->no_park && !h->stopping &&
         !h->peer_eof && !h->timed_out && !h->calm && !h->closed_err && !h->violation && !h->would_block &&
         h->nrst_after == 0 && !in_head(h) && h->payload_left == 0 && !nghttp2_session_want_write(h->session) &&
         nghttp2_session_want_read(h->session);
}

static void try_park(h2c_t *h) {
  if (!park_ready(h)) return;
  if (!h->table_zero && nghttp2_session_get_hd_inflate_dynamic_table_size(h->session) > 0) {
    static const nghttp2_settings_entry zero = {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0};
    if (h->table_asked || nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, &zero, 1) != 0) return;
    h->table_asked = 1;
    h->settings_owed++;
    cb__conn_after_soon(h->c); /* sends it (rest runs from the connection's timer, outside any event) */
    return;
  }
  if (h->settings_owed > 0 || cb__h2_park_save(&h->park, h->session, h->max_sid) != 0) return;
  nghttp2_session_del(h->session);
  h->session = NULL;
  cb__h2_mem_free(&h->mem);
  CB__STAT_INC(h->c->w, h2_parked);
}

/* A new session in the parked one's place. 0, or an error: the connection is closed. */
static int wake(h2c_t *h) {
  cb__h2_mem_init(&h->mem, small_blocks(h->c->w));
  if (nghttp2_session_server_new3(&h->session, callbacks, NULL, options, &h->mem.mem) != 0) {
    h->session = NULL;
    return UV_ENOMEM;
  }
  nghttp2_settings_entry iv[OUR_SETTINGS];
  int err = cb__h2_park_restore(&h->park, h->session, iv, our_settings(h->c->w->cfg, iv));
  nghttp2_session_set_user_data(h->session, h);
  if (err) return err;
  CB__STAT_INC(h->c->w, h2_woken);
  if (h->table_zero) { /* the peer may index again */
    static const nghttp2_settings_entry usual = {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096};
    if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, &usual, 1) == 0) {
      h->settings_owed++;
      h->table_zero = 0;
    }
  }
  return 0;
}


static void h2_destroy(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  if (h == NULL) return;
  while (h->streams) {
    h2s_t *s = h->streams;
    if (s->req.handler && s->req.res_state != CB__RES_ENDED && !s->req.fault) CB__STAT_INC(c->w, resets);
    stream_free(h, s, 1);
  }
  free_spare_streams(h);
  nghttp2_session_del(h->session);
  cb__h2_mem_free(&h->mem);
  free(h->opened);
  free(h);
  c->proto_state = NULL;
}

/* The connection is to end (the session is done, or a fault closes it): every open stream's request is
 * journaled now, before the GOAWAY or the FIN that ends it leaves. */
static void h2_record(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  if (h == NULL) return;
  for (h2s_t *s = h->streams; s != NULL; s = s->next)
    if (s->req.jseq != 0) cb__journal_record(c->w, &s->req);
}

static const cb__conn_ops_t h2_ops = {
    .read = h2_read,
    .eof = h2_eof,
    .writable = h2_writable,
    .after = h2_after,
    .timer_mode = h2_timer_mode,
    .timeout = h2_timeout,
    .stop = h2_stop,
    .destroy = h2_destroy,
    .rest = h2_rest,
    .record = h2_record,
};

/* ---- the faults HTTP/2 carries (kinds/fault.c) ---- */

static void h2_rst_stream(cb__req_t *r, uint32_t code) {
  h2s_t *s = r->stream;
  nghttp2_submit_rst_stream(s->h->session, NGHTTP2_FLAG_NONE, s->id, code);
}

static void h2_goaway(cb__req_t *r, uint32_t code, int32_t last, int graceful) {
  h2c_t *h = r->conn->proto_state;
  if (graceful) {
    /* The streams up to last finish; h2_after closes once none is left. */
    nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE, last, code, NULL, 0);
    h->stopping = 1;
  } else {
    nghttp2_session_terminate_session2(h->session, last, code);
  }
}

/* SETTINGS frames of the settings fault a connection may have unacknowledged. nghttp2 keeps each until its ACK
 * and has no bound of its own: a peer that never acknowledged, asking for the fault in a loop, left about 300
 * bytes on the connection per request of a few bytes, for as long as it stayed. Over the bound the connection
 * ends as RFC 9113 6.5.3 lets it, with SETTINGS_TIMEOUT (a client that acknowledges never comes near it: it
 * would need as many settings faults in flight at once). */
#define FAULT_SETTINGS_UNACKED_MAX 1024

static int h2_settings(cb__req_t *r, int64_t max_frame, int64_t window) {
  h2c_t *h = r->conn->proto_state;
  if (h->settings_owed >= FAULT_SETTINGS_UNACKED_MAX) {
    nghttp2_session_terminate_session(h->session, NGHTTP2_SETTINGS_TIMEOUT);
    return UV_ENOBUFS;
  }
  nghttp2_settings_entry iv[2];
  size_t n = 0;
  if (max_frame >= 0) iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_MAX_FRAME_SIZE, (uint32_t)max_frame};
  if (window >= 0) iv[n++] = (nghttp2_settings_entry){NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window};
  if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, n) == 0) h->settings_owed++;
  h->no_park = 1; /* a restored session would start from the configuration's settings */
  return 0;
}

/* The head and the pieces queued so far leave when flow control lets them: the cut waits for the frame that
 * carries the last of them (on_frame_send), so that a reset after `bytes` bytes comes after that many bytes
 * whatever the peer's windows, where an RST_STREAM on the next turn dropped what the window still held and a
 * connection reset or a TLS fault's end went as soon as the output queue was empty. */
static void h2_cut(cb__req_t *r, uint32_t code, int how) {
  h2s_t *s = r->stream;
  if (!s->cut) s->h->ncut++;
  s->cut = (uint8_t)how;
  s->cut_code = code;
}

static void h2_violation(cb__req_t *r) { ((h2c_t *)r->conn->proto_state)->violation = 1; }

static void h2_trailers(cb__req_t *r) { ((h2s_t *)r->stream)->trailers = 1; }

/* No raw bytes: HTTP/2 frames every body itself. */
static const cb__proto_faults_t h2_faults = {
    .rst_stream = h2_rst_stream,
    .cut = h2_cut,
    .goaway = h2_goaway,
    .settings = h2_settings,
    .violation = h2_violation,
    .trailers = h2_trailers,
};
