/* HTTP/2 (h2c by prior knowledge or Upgrade: h2c, and h2 over TLS) behind the same response API as HTTP/1.1
 * (cb__proto_t), so every handler serves both protocols unchanged.
 *
 * The session is the engine's own (RFC 9113): frames are read in place when a read holds them whole, streams
 * live in a small open-addressing table, and of nghttp2 only the HPACK decoder is used
 * (nghttp2_hd_inflate_hd2). Response header blocks are written without table state: static table references
 * and literals without indexing (client/h2_fields.c), so nothing is kept per connection for them.
 *
 * Output: every frame goes straight into the connection's output queue. HEADERS, RST_STREAM, GOAWAY and the
 * acknowledgements are written when they are decided; DATA is written by the after-event step (flush), round
 * robin over the streams that have body to send, one frame per stream per turn, within the peer's windows and
 * the queue's high-water mark, so the frames of many streams leave in one writev. A DATA payload is referenced
 * (static bytes, a handler's buffer, a file range for sendfile), or copied when small: a copy is cheaper than
 * one more iovec.
 *
 * Streams are freed only where no handler is on the stack: in the frame handlers and in flush. The response
 * API marks (an answer ended, a reset to send) and links the stream for flush. */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"
#include "proto/proto.h"

/* The receive windows we advertise: large, so uploads are not bound by round trips of WINDOW_UPDATE. */
#define STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (16 << 20)
#define DEFAULT_WINDOW 65535
#define MAX_WINDOW 0x7fffffff
/* A DATA frame we write carries at most this much, whatever the peer's SETTINGS_MAX_FRAME_SIZE allows. */
#define ONE_FRAME 16384
#define DEFAULT_MAX_FRAME 16384
#define MAX_MAX_FRAME 16777215
/* Entries of a SETTINGS frame (and of HTTP2-Settings) we take; a frame with more ends the connection
 * (GOAWAY(ENHANCE_YOUR_CALM)). cb__h2_settings_valid agrees. */
#define MAX_SETTINGS 32
/* CONTINUATION frames after one HEADERS; one more ends the connection (GOAWAY(ENHANCE_YOUR_CALM)). */
#define MAX_CONTINUATIONS 8
/* Streams the peer may reset (RST_STREAM) in a burst, and per second after it (the rapid reset attack,
 * CVE-2023-44487); over it: GOAWAY(ENHANCE_YOUR_CALM). */
#define RST_BURST 1000
#define RST_PER_SECOND 100
/* Streams keep their structures for reuse up to this many per connection. */
#define FREE_STREAMS_MAX 16
/* Header blocks over the header limit a connection may send (each refused) before it is ended. */
#define OVERSIZED_BLOCKS_MAX 3
/* The repeated-block memo (block_memo): a block of at most MEMO_BLOCK_MAX bytes, its fields within MEMO_MAX. */
#define MEMO_BLOCK_MAX 64
#define MEMO_MAX 1024

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN 24

enum { PIECE_STATIC, PIECE_FREE, PIECE_FILE };

typedef struct {
  uint8_t kind;
  uint8_t touched;   /* part of a PIECE_FREE buffer was referenced by the output queue */
  uint8_t piece_end; /* a DATA frame holding bytes of this piece holds none of the next */
  uint32_t credit;   /* request-body bytes whose receive window is given back once this piece is sent */
  size_t held;       /* PIECE_FREE: echo-budget bytes of the buffer, given back when it is freed */
  int fd;
  const char *base;
  uint64_t off;
  size_t len; /* left to send */
} piece_t;

typedef struct h2s h2s_t;
typedef struct h2c h2c_t;

/* Which pseudo-headers a request block carried (RFC 9113 8.3.1). */
enum { PS_METHOD = 1, PS_SCHEME = 2, PS_PATH = 4, PS_AUTHORITY = 8 };

struct h2s {
  cb__req_t req; /* first member: req.stream points back at the stream */
  h2c_t *h;
  h2s_t *prev, *next; /* every stream of the connection */
  h2s_t *rnext;       /* the streams flush is to look at */
  int32_t id;
  /* Request head: path and kept headers, copied out of the decoder's buffers. */
  char *head;
  size_t head_len, head_cap;
  cb__hdr_t *hdrs;
  int nhdrs, hdrs_cap;
  size_t path_len;
  /* Where :path, :method and :authority are in `head` (offsets: the buffer may move until the head is done). */
  size_t path_off, target_len, method_off, method_len, authority_off, authority_len;
  uint8_t pseudo;      /* PS_* seen in the head */
  uint8_t regular;     /* a regular field came: no pseudo-header may follow */
  uint8_t malformed;   /* the head or trailers broke RFC 9113 8.2 or 8.3: the stream is reset (PROTOCOL_ERROR) */
  uint8_t is_connect;
  uint8_t too_large, refused, dispatched, head_only;
  uint8_t res_ended, provider;
  uint8_t remote_closed; /* the peer ended its side (END_STREAM, or the upgrade request) */
  uint8_t local_closed;  /* we ended ours (END_STREAM sent, or RST_STREAM) */
  uint8_t ready;         /* on the flush list */
  uint8_t rst_owed;      /* an RST_STREAM (rst_code) is to be written by flush, which closes the stream */
  uint8_t in_body;    /* inside the handler's on_body: copies made now hold request-body bytes */
  uint8_t over_budget; /* such a copy would have gone over the echo budget: the stream is cut after on_body */
  uint8_t rst_after;  /* answered before the request ended: reset (NO_ERROR) once the answer is sent */
  uint8_t trailers;   /* a fault: the body ends with a trailer block instead of END_STREAM on DATA */
  uint8_t cut;        /* a fault (h2_cut): CB__CUT_*, once the head and the pieces queued are sent */
  uint8_t expect_continue; /* the request has `expect: 100-continue` */
  uint8_t have_cl;    /* the request has a content-length */
  uint32_t cut_code;  /* CB__CUT_STREAM's RST_STREAM code */
  uint32_t rst_code;
  char *tblock;       /* end_trailers: the trailer block, HPACK-encoded, or NULL */
  size_t tblock_len;
  int64_t send_window; /* what we may still send on the stream */
  int32_t recv_window; /* what the peer may still send on it */
  uint32_t consumed;   /* received bytes given back but not yet announced by WINDOW_UPDATE */
  size_t body_held;    /* of the current DATA chunk, bytes the handler copied into pieces */
  /* Response body pieces waiting for flush. */
  piece_t *pieces;
  uint32_t phead, ptail, pcap;
  size_t queued;
};

/* Client stream ids remembered as opened or not, for HEADERS on a lower id (RFC 9113 5.1.1), and as closed
 * after the client ended its side or not (for DATA and HEADERS on a closed stream, 5.1): the last
 * OPENED_WINDOW odd ids below the highest one. */
#define OPENED_WINDOW 1024
enum { SID_OPENED = 0, SID_CLOSED = OPENED_WINDOW };
#define SID_BYTES (2 * OPENED_WINDOW / 8)

/* What the header block being received belongs to. */
enum { BLK_IGNORE, BLK_REQUEST, BLK_TRAILERS };

/* What the reader is inside of. */
enum { IN_HEADER, IN_GATHER, IN_DATA, IN_SKIP };

struct h2c {
  cb__conn_t *c;
  cb__h2_mem_t mem;           /* the decoder's allocator (h2_mem.c) */
  nghttp2_hd_inflater *inf;   /* NULL while parked */
  h2s_t *streams;
  h2s_t *rhead, *rtail;       /* the flush list */
  h2s_t **tab;                /* streams by id, open addressing */
  uint32_t tab_cap, tab_n;
  h2s_t *free_streams;
  int nfree;
  int nstreams;
  uint8_t stopping;
  uint8_t would_block; /* flush stopped at the output queue's high-water mark with frames still to write */
  uint8_t upgraded;    /* started with Upgrade: h2c (for the per-protocol counters) */
  uint8_t hold_data;   /* upgraded, and the client's preface has not arrived yet: DATA waits for it */
  uint8_t peer_eof;    /* the peer closed its sending side: complete requests are answered, then close */
  uint8_t timed_out;   /* a timeout sent GOAWAY; the next one closes (the GOAWAY could not leave) */
  uint8_t oversized;   /* header blocks over the limit so far */
  uint8_t settings_seen; /* the client's first SETTINGS frame arrived */
  uint8_t violation;   /* a fault: DATA on stream 0 after the next frames sent (h2_violation) */
  uint8_t ended;       /* a GOAWAY ended the session: nothing more is read; close once it is written */
  uint8_t goaway_sent; /* a graceful GOAWAY: no stream above goaway_last is taken */
  uint8_t goaway_recv; /* the peer sent GOAWAY: close once our streams are done */
  uint8_t table_asked; /* we asked the peer for a 0-byte HPACK table (SETTINGS_HEADER_TABLE_SIZE 0) */
  uint8_t table_zero;  /* it acknowledged: its encoder indexes nothing until we raise the size again */
  uint8_t park_soon;   /* that acknowledgement came in this event: park after it if still idle */
  uint8_t no_park;     /* a fault changed our settings: never parked */
  uint16_t settings_owed; /* our SETTINGS frames not acknowledged yet */
  int32_t goaway_last;
  int32_t max_sid;     /* the highest stream id the client opened */
  uint8_t *opened;     /* 2 x OPENED_WINDOW bits (SID_OPENED, SID_CLOSED), made with the first stream */
  /* The reader. */
  uint8_t in;           /* IN_* */
  uint8_t fh[9], fh_len;
  uint8_t ftype, fflags;
  int32_t fsid;
  uint32_t flen;        /* the current frame's payload length */
  uint32_t left;        /* of it, bytes still to come (IN_GATHER, IN_DATA, IN_SKIP) */
  uint32_t preface_left;
  uint8_t *gbuf;        /* a frame payload that came in pieces, gathered */
  uint32_t gcap;
  /* A DATA frame being read. */
  h2s_t *ds;            /* its stream, NULL when it is ignored */
  uint8_t dpad_wait;    /* PADDED, and the pad length not read yet */
  uint32_t dpad;        /* padding at its end */
  /* The header block being received. */
  uint8_t block_open;   /* HEADERS came without END_HEADERS: CONTINUATION must follow */
  uint8_t block_kind;   /* BLK_* */
  uint8_t block_end;    /* its HEADERS had END_STREAM */
  uint8_t block_over;   /* over the header limit */
  uint8_t nconts;
  int32_t block_sid;
  h2s_t *block_s;
  size_t block_bytes;   /* counted like max_header_bytes */
  /* The memo of the last header block made of indexed fields alone (block_memo): its bytes, then its fields
   * as (u16 name length, u16 value length, name, value). NULL until one comes; given back at rest. */
  uint8_t *memo;
  uint16_t memo_block, memo_used;
  uint8_t memo_valid, memo_rec, memo_over;
  /* Windows. */
  int64_t conn_send;        /* what we may still send on the connection */
  uint32_t peer_initial;    /* the peer's SETTINGS_INITIAL_WINDOW_SIZE */
  uint32_t peer_max_frame;  /* the peer's SETTINGS_MAX_FRAME_SIZE */
  int32_t conn_recv;        /* what the peer may still send on the connection */
  uint32_t conn_consumed;   /* received bytes given back but not announced yet */
  uint32_t local_initial;   /* our SETTINGS_INITIAL_WINDOW_SIZE, acknowledged */
  uint32_t max_recv_frame;  /* our SETTINGS_MAX_FRAME_SIZE, acknowledged */
  int64_t pend_window, pend_max_frame; /* a fault's settings, in force once acknowledged (-1: none) */
  /* The rapid-reset bound: tokens and when they were last counted. */
  uint32_t rst_tokens;
  uint64_t rst_ms;
};

static const cb__proto_t h2_proto;
static const cb__conn_ops_t h2_ops;

/* ---- writing frames ---- */

static void out_frame(h2c_t *h, uint8_t type, uint8_t flags, int32_t id, const void *payload, size_t len) {
  char *o = cb__outq_reserve(&h->c->out, 9 + len);
  if (o == NULL) return; /* out of memory: the frame is lost, as a write error would lose it */
  cb_h2_put_fh(o, len, type, flags, id);
  if (len > 0) memcpy(o + 9, payload, len);
  cb__outq_commit(&h->c->out, 9 + len);
}

static void out_u32(h2c_t *h, uint8_t type, int32_t id, uint32_t v) {
  char b[4];
  cb_h2_put32(b, v);
  out_frame(h, type, 0, id, b, 4);
}

static void out_goaway(h2c_t *h, int32_t last, uint32_t code) {
  char b[8];
  cb_h2_put32(b, (uint32_t)last);
  cb_h2_put32(b + 4, code);
  out_frame(h, NGHTTP2_GOAWAY, 0, 0, b, 8);
  if (code != NGHTTP2_NO_ERROR) CB__STAT_INC(h->c->w, h2_errors);
}

/* The session is over: GOAWAY names the last stream taken, nothing more is read, the connection closes once
 * it is written (h2_after). */
static void end_session(h2c_t *h, int32_t last, uint32_t code) {
  if (h->ended) return;
  h->ended = 1;
  out_goaway(h, last, code);
}

/* A connection error (RFC 9113 5.4.1). Returns -1 for the reader to stop. */
static int conn_error(h2c_t *h, uint32_t code) {
  end_session(h, h->max_sid > 0 ? h->max_sid : 0, code);
  return -1;
}

static void out_settings(h2c_t *h, const uint16_t *ids, const uint32_t *vals, size_t n) {
  char b[6 * 8];
  for (size_t i = 0; i < n; i++) {
    b[6 * i] = (char)(ids[i] >> 8);
    b[6 * i + 1] = (char)ids[i];
    cb_h2_put32(b + 6 * i + 2, vals[i]);
  }
  out_frame(h, NGHTTP2_SETTINGS, 0, 0, b, 6 * n);
  h->settings_owed++;
}

/* ---- streams ---- */

static uint32_t slot_of(const h2c_t *h, int32_t id) { return ((uint32_t)id >> 1) & (h->tab_cap - 1); }

static h2s_t *find(const h2c_t *h, int32_t id) {
  if (h->tab_n == 0) return NULL;
  for (uint32_t i = slot_of(h, id);; i = (i + 1) & (h->tab_cap - 1)) {
    h2s_t *s = h->tab[i];
    if (s == NULL) return NULL;
    if (s->id == id) return s;
  }
}

static int tab_insert(h2c_t *h, h2s_t *s) {
  if (2 * (h->tab_n + 1) > h->tab_cap) {
    uint32_t cap = h->tab_cap ? 2 * h->tab_cap : 16;
    h2s_t **t = calloc(cap, sizeof *t);
    if (t == NULL) return -1;
    h2s_t **old = h->tab;
    uint32_t ocap = h->tab_cap;
    h->tab = t;
    h->tab_cap = cap;
    for (uint32_t i = 0; i < ocap; i++) {
      if (old[i] == NULL) continue;
      uint32_t k = slot_of(h, old[i]->id);
      while (t[k] != NULL) k = (k + 1) & (cap - 1);
      t[k] = old[i];
    }
    free(old);
  }
  uint32_t k = slot_of(h, s->id);
  while (h->tab[k] != NULL) k = (k + 1) & (h->tab_cap - 1);
  h->tab[k] = s;
  h->tab_n++;
  return 0;
}

/* Linear probing's deletion: the entries after the hole that would not be found across it move into it. */
static void tab_remove(h2c_t *h, h2s_t *s) {
  uint32_t mask = h->tab_cap - 1, i = slot_of(h, s->id);
  while (h->tab[i] != s) i = (i + 1) & mask;
  h->tab[i] = NULL;
  h->tab_n--;
  for (uint32_t j = (i + 1) & mask; h->tab[j] != NULL; j = (j + 1) & mask) {
    uint32_t home = slot_of(h, h->tab[j]->id);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      h->tab[i] = h->tab[j];
      h->tab[j] = NULL;
      i = j;
    }
  }
}

static void link_ready(h2s_t *s) {
  h2c_t *h = s->h;
  if (s->ready) return;
  s->ready = 1;
  s->rnext = NULL;
  if (h->rtail) h->rtail->rnext = s;
  else h->rhead = s;
  h->rtail = s;
}

static void unlink_ready(h2s_t *s) {
  h2c_t *h = s->h;
  if (!s->ready) return;
  h2s_t **pp = &h->rhead, *prev = NULL;
  while (*pp != s) {
    prev = *pp;
    pp = &(*pp)->rnext;
  }
  *pp = s->rnext;
  if (h->rtail == s) h->rtail = prev;
  s->ready = 0;
}

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
  s->send_window = h->peer_initial;
  s->recv_window = (int32_t)h->local_initial;
  s->req.conn = h->c;
  s->req.proto = &h2_proto;
  s->req.stream = s;
  s->req.stream_id = (uint32_t)id;
  s->req.content_length = -1;
  if (tab_insert(h, s) != 0) {
    free(s->head);
    free(s->hdrs);
    free(s->pieces);
    free(s);
    return NULL;
  }
  s->next = h->streams;
  if (h->streams) h->streams->prev = s;
  h->streams = s;
  h->nstreams++;
  return s;
}

/* Received bytes given back: a WINDOW_UPDATE once half a window has come back (as nghttp2 does), on the stream
 * (when it is still open to the peer) and on the connection. */
static void consume(h2c_t *h, h2s_t *s, size_t n) {
  if (n == 0) return;
  if (s != NULL && !s->remote_closed && !s->rst_owed) {
    s->consumed += (uint32_t)n;
    if (s->consumed >= h->local_initial / 2 || s->recv_window <= 0) {
      out_u32(h, NGHTTP2_WINDOW_UPDATE, s->id, s->consumed);
      s->recv_window += (int32_t)s->consumed;
      s->consumed = 0;
    }
  }
  h->conn_consumed += (uint32_t)n;
  if (h->conn_consumed >= CONN_WINDOW / 2) {
    out_u32(h, NGHTTP2_WINDOW_UPDATE, 0, h->conn_consumed);
    h->conn_recv += (int32_t)h->conn_consumed;
    h->conn_consumed = 0;
  }
}

/* Gives back the receive window of request-body bytes once their echo has left (or was dropped). */
static void give_credit(h2s_t *s, piece_t *p) {
  if (p->credit == 0) return;
  consume(s->h, s, p->credit);
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
  free(s->tblock);
  s->tblock = NULL;
  s->remote_closed = 1; /* no WINDOW_UPDATE for it from here on */
  drop_pieces(s);
  unlink_ready(s);
  tab_remove(h, s);
  if (h->block_s == s) h->block_s = NULL;
  if (h->ds == s) h->ds = NULL;
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

static void sid_set(h2c_t *h, int32_t sid, uint32_t map, int on);
static int sid_remembered(const h2c_t *h, int32_t sid);

/* The stream is closed (RFC 9113 5.1). After the peer had ended its side, later DATA or HEADERS on its id are
 * a connection error (STREAM_CLOSED); a stream we reset before that may still get frames the peer had in
 * flight, which are ignored. error: the stream ended with an error code (counted when work was left). */
static void close_stream(h2c_t *h, h2s_t *s, int error) {
  if (s->remote_closed && sid_remembered(h, s->id)) sid_set(h, s->id, SID_CLOSED, 1);
  if (error && !s->refused && s->req.res_state != CB__RES_ENDED && !s->req.fault) CB__STAT_INC(h->c->w, resets);
  stream_free(h, s, 0);
}

/* A stream error (RFC 9113 5.4.2) or a reset the response asked for: flush writes RST_STREAM and closes the
 * stream. Its frames after this are ignored. */
static void stream_reset(h2s_t *s, uint32_t code) {
  if (s->rst_owed) return;
  s->rst_owed = 1;
  s->rst_code = code;
  link_ready(s);
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

/* ---- header blocks we write ---- */

/* A whole header block as HEADERS and, past the peer's frame size, CONTINUATION frames. */
static void out_block(h2c_t *h, int32_t id, const char *block, size_t len, int end_stream) {
  size_t maxf = h->peer_max_frame;
  uint8_t es = end_stream ? NGHTTP2_FLAG_END_STREAM : 0;
  if (len <= maxf) {
    out_frame(h, NGHTTP2_HEADERS, (uint8_t)(es | NGHTTP2_FLAG_END_HEADERS), id, block, len);
    return;
  }
  size_t off = 0;
  uint8_t type = NGHTTP2_HEADERS;
  while (off < len) {
    size_t n = len - off < maxf ? len - off : maxf;
    uint8_t fl = type == NGHTTP2_HEADERS ? es : 0;
    if (off + n == len) fl |= NGHTTP2_FLAG_END_HEADERS;
    out_frame(h, type, fl, id, block + off, n);
    off += n;
    type = NGHTTP2_CONTINUATION;
  }
}

/* The static table entry (RFC 7541 Appendix A) of `:status: N`, or 0. */
static int status_index(int status) {
  switch (status) {
  case 200: return 8;
  case 204: return 9;
  case 206: return 10;
  case 304: return 11;
  case 400: return 12;
  case 404: return 13;
  case 500: return 14;
  default: return 0;
  }
}

/* ---- the response API ---- */

static void put_u64(char *dst, size_t cap, uint64_t v, size_t *len) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  size_t o = 0;
  while (n > 0 && o < cap) dst[o++] = tmp[--n];
  *len = o;
}

static void h2_head(cb__req_t *r, int status, const char *ctype, const cb__hdr_t *extra, int nextra,
                    int64_t content_length) {
  h2s_t *s = r->stream;
  h2c_t *h = s->h;
  cb__worker_t *w = h->c->w;
  r->res_state = CB__RES_HEAD;
  if (s->local_closed || s->rst_owed) return;
  size_t ctype_len = ctype ? strlen(ctype) : 0;
  size_t bound = 16 + (w->date_len + 16) + (ctype_len + 16) + 40;
  for (int i = 0; i < nextra; i++) bound += extra[i].name_len + extra[i].value_len + 16;
  char stack[2048], *block = bound <= sizeof stack ? stack : malloc(bound);
  if (block == NULL) {
    stream_reset(s, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  char *o = block;
  int si = status_index(status);
  if (si) {
    *o++ = (char)(0x80 | si); /* indexed */
  } else {
    char st[3] = {(char)('0' + status / 100), (char)('0' + status / 10 % 10), (char)('0' + status % 10)};
    o = cb_hp_field(o, 8, NULL, 0, st, 3);
  }
  o = cb_hp_field(o, 33, NULL, 0, w->date_line + 6, w->date_len - 8); /* "date: " ... "\r\n" */
  if (ctype) o = cb_hp_field(o, 31, NULL, 0, ctype, ctype_len);
  for (int i = 0; i < nextra; i++)
    o = cb_hp_field(o, 0, extra[i].name, extra[i].name_len, extra[i].value, extra[i].value_len);
  if (content_length >= 0) {
    char len_buf[24];
    size_t len_len;
    put_u64(len_buf, sizeof len_buf, (uint64_t)content_length, &len_len);
    o = cb_hp_field(o, 28, NULL, 0, len_buf, len_len);
  }
  /* A body follows unless the size says none: then HEADERS carries END_STREAM. */
  s->provider = !s->head_only && content_length != 0 && content_length != CB__NO_BODY;
  out_block(h, s->id, block, (size_t)(o - block), !s->provider);
  if (block != stack) free(block);
  cb__conn_progress(h->c);
  if (!s->provider) {
    s->local_closed = 1;
    if (s->rst_after && !s->req.req_done) stream_reset(s, NGHTTP2_NO_ERROR);
  }
  link_ready(s); /* flush closes it, cuts it, or sends its body */
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
  link_ready(s);
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
  if (!s->provider || n == 0 || s->refused || s->local_closed || s->rst_owed) {
    if (flags == CB__DATA_FREE || flags == CB__DATA_HELD) free((void *)p);
    if (flags == CB__DATA_HELD) cb__echo_release(s->h->c, n);
    return 0;
  }
  piece_t piece = {.kind = PIECE_STATIC, .piece_end = (uint8_t)piece_end, .fd = -1, .base = p, .off = 0, .len = n};
  if (flags == CB__DATA_COPY) { /* the caller's bytes are transient: keep a copy until it is sent */
    /* A copy of request body (a streamed echo) is held from the echo budget, as /echo's body: the receive
     * window alone held a peer that sends without reading to 16 MiB a connection, any number of connections.
     * Over the budget the piece is dropped and the stream cut (on_data: the answer has begun). */
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
  if (!s->provider || n == 0 || s->refused || s->local_closed || s->rst_owed) return 0;
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
  link_ready(s);
}

/* The trailer fields end the stream (a HEADERS block after the body), names lowercased; the fields a stub may
 * not give either (cb__forbidden_header: the connection-specific ones RFC 9113 8.2.2 forbids, and the framing)
 * are left out. A response without a body (its head said none) drops them. */
static void h2_end_trailers(cb__req_t *r, const cb__hdr_t *t, int n) {
  h2s_t *s = r->stream;
  size_t bound = 0;
  for (int i = 0; i < n; i++) bound += t[i].name_len + t[i].value_len + 16;
  if (s->provider && !s->head_only && n > 0 && s->tblock == NULL && (s->tblock = malloc(bound)) != NULL) {
    char *o = s->tblock;
    for (int i = 0; i < n; i++) {
      if (cb__forbidden_header(t[i].name, t[i].name_len)) continue;
      char lower[256], *name = t[i].name_len <= sizeof lower ? lower : malloc(t[i].name_len);
      if (name == NULL) continue;
      for (size_t j = 0; j < t[i].name_len; j++) {
        char ch = t[i].name[j];
        name[j] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
      }
      o = cb_hp_field(o, 0, name, t[i].name_len, t[i].value, t[i].value_len);
      if (name != lower) free(name);
    }
    s->tblock_len = (size_t)(o - s->tblock);
    if (s->tblock_len == 0) {
      free(s->tblock);
      s->tblock = NULL;
    }
  }
  h2_end(r);
}

/* An answer that cannot end well: its stream is reset, the connection goes on. */
static void h2_abort(cb__req_t *r, uint32_t code) {
  h2s_t *s = r->stream;
  CB__STAT_INC(s->h->c->w, h2_errors);
  stream_reset(s, code);
}

/* The stream's pieces not framed yet, with what each piece costs (stream_cost): what waits for the windows
 * (the connection's output queue takes frames only up to its high-water mark, shared by the streams). */
static size_t h2_queued(const cb__req_t *r) { return stream_cost((const h2s_t *)r->stream); }

static const cb__proto_faults_t h2_faults;
static const cb__proto_t h2_proto = {.head = h2_head, .data = h2_data, .file = h2_file, .end = h2_end,
                                     .end_trailers = h2_end_trailers, .abort = h2_abort, .faults = &h2_faults,
                                     .queued = h2_queued};

/* ---- flush: the DATA frames ---- */

/* Writes one DATA frame of at most max bytes (max > 0, or 0 for the empty last frame). Returns 1 when it
 * carried END_STREAM. */
static int data_frame(h2c_t *h, h2s_t *s, size_t max) {
  cb__outq_t *q = &h->c->out;
  int trailers = s->tblock != NULL || s->trailers;
  if (s->phead == s->ptail) { /* the body is done and empty from here: END_STREAM alone, or the trailers */
    if (!trailers) out_frame(h, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, s->id, NULL, 0);
    return !trailers;
  }
  piece_t *p = &s->pieces[s->phead];
  if (p->kind != PIECE_FILE && p->len <= CB__COPY_MAX) {
    /* Small pieces: gather as many as fit into one frame, copied (cheaper than a frame per piece). */
    size_t room = s->queued < max ? s->queued : max;
    char *o = cb__outq_reserve(q, 9 + room);
    if (o == NULL) return 0;
    size_t n = 0;
    uint32_t i = s->phead;
    while (i < s->ptail && n < room) {
      p = &s->pieces[i];
      if (p->kind == PIECE_FILE || p->len > CB__COPY_MAX) break;
      size_t k = p->len < room - n ? p->len : room - n;
      memcpy(o + 9 + n, p->base + p->off, k);
      n += k;
      p->off += k;
      p->len -= k;
      s->queued -= k;
      if (p->len > 0) break;
      i++;
      if (p->piece_end) break; /* the next piece starts a frame of its own */
    }
    int es = s->res_ended && i == s->ptail && !trailers;
    cb_h2_put_fh(o, n, NGHTTP2_DATA, es ? NGHTTP2_FLAG_END_STREAM : 0, s->id);
    cb__outq_commit(q, 9 + n);
    /* Only now the pieces copied whole go: freeing one, and giving its window back, may write into the output
     * queue (a release after the frames that reference it, a WINDOW_UPDATE), which the reservation held. */
    for (; s->phead < i; s->phead++) {
      give_credit(s, &s->pieces[s->phead]);
      if (s->pieces[s->phead].kind == PIECE_FREE) free_piece(s, &s->pieces[s->phead]);
    }
    if (s->phead == s->ptail) s->phead = s->ptail = 0;
    h->conn_send -= (int64_t)n;
    s->send_window -= (int64_t)n;
    return es;
  }
  size_t n = p->len < max ? p->len : max;
  int es = s->res_ended && s->phead + 1 == s->ptail && n == p->len && !trailers;
  char fh[9];
  cb_h2_put_fh(fh, n, NGHTTP2_DATA, es ? NGHTTP2_FLAG_END_STREAM : 0, s->id);
  cb__outq_copy(q, fh, 9);
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
  if (p->len == 0) {
    give_credit(s, p);
    s->phead++;
  }
  if (s->phead == s->ptail) s->phead = s->ptail = 0;
  h->conn_send -= (int64_t)n;
  s->send_window -= (int64_t)n;
  return es;
}

/* The trailer block that ends the stream: end_trailers' or a fault's. */
static void trailer_block(h2c_t *h, h2s_t *s) {
  if (s->tblock != NULL) {
    out_block(h, s->id, s->tblock, s->tblock_len, 1);
    free(s->tblock);
    s->tblock = NULL;
  } else {
    char b[32], *o = cb_hp_field(b, 0, "x-trailer", 9, "cbench", 6);
    s->trailers = 0;
    out_block(h, s->id, b, (size_t)(o - b), 1);
  }
}

/* A fault's cut (h2_cut): the last frame of what the stream had queued has just gone into the output. */
static void cut_now(h2c_t *h, h2s_t *s) {
  uint8_t how = s->cut;
  s->cut = 0;
  if (how == CB__CUT_RESET)
    h->c->abort_after_flush = 1; /* conn.c resets once that frame has been written */
  else if (how == CB__CUT_CLOSE)
    cb__conn_close_linger(h->c); /* the same, ended the transport's way */
  else if (!s->local_closed) /* a head that ended the stream (HEAD, an empty body) leaves nothing to reset */
    stream_reset(s, s->cut_code);
}

/* One turn of a stream on the flush list: its reset, or one DATA frame. Returns 1 to keep it on the list. */
static int flush_one(h2c_t *h, h2s_t *s) {
  if (s->rst_owed) {
    out_u32(h, NGHTTP2_RST_STREAM, s->id, s->rst_code);
    if (s->rst_code != NGHTTP2_NO_ERROR && s->rst_code != NGHTTP2_CANCEL) CB__STAT_INC(h->c->w, h2_errors);
    s->local_closed = 1;
    close_stream(h, s, s->rst_code != NGHTTP2_NO_ERROR);
    return -1;
  }
  if (!s->local_closed && s->provider && !h->hold_data && (s->phead < s->ptail || s->res_ended)) {
    int64_t win = h->conn_send < s->send_window ? h->conn_send : s->send_window;
    size_t max = h->peer_max_frame < ONE_FRAME ? h->peer_max_frame : ONE_FRAME;
    if (win < (int64_t)max) max = win > 0 ? (size_t)win : 0;
    if (s->phead < s->ptail && max == 0) return 0; /* flow control: a WINDOW_UPDATE brings it back */
    if (data_frame(h, s, max)) {
      s->local_closed = 1;
    } else if (s->res_ended && s->phead == s->ptail && (s->tblock != NULL || s->trailers)) {
      trailer_block(h, s);
      s->local_closed = 1;
    }
    cb__conn_progress(h->c);
    if (s->local_closed && s->rst_after && !s->req.req_done) stream_reset(s, NGHTTP2_NO_ERROR);
  }
  if (s->cut && s->phead == s->ptail && s->req.res_state >= CB__RES_HEAD) cut_now(h, s);
  if (s->rst_owed) return 1;
  if (s->local_closed) {
    if (s->remote_closed) {
      close_stream(h, s, 0);
      return -1;
    }
    return 0;
  }
  return s->provider && !h->hold_data && s->phead < s->ptail;
}

static void flush(h2c_t *h) {
  while (h->rhead != NULL) {
    if (h->c->out.bytes >= CB__OUT_HIGH_WATER) {
      h->would_block = 1;
      return;
    }
    h2s_t *s = h->rhead;
    h->rhead = s->rnext;
    if (h->rhead == NULL) h->rtail = NULL;
    s->ready = 0;
    int keep = flush_one(h, s);
    if (keep > 0) link_ready(s);
  }
}

/* A window grew: the streams that wait for one go back on the list. */
static void windows_grew(h2c_t *h) {
  for (h2s_t *s = h->streams; s != NULL; s = s->next)
    if (s->provider && !s->local_closed && s->phead < s->ptail) link_ready(s);
}

/* ---- receiving: HTTP semantics ---- */

/* The same for an HTTP/1.1 name (any case) against a lowercase literal. */
static int ci_eq(const char *a, size_t n, const char *lit) {
  if (strlen(lit) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if ((a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : a[i]) != lit[i]) return 0;
  return 1;
}

/* Answers a refused request (431, 413, 501) on its stream; the handler never sees it. */
static void refuse(h2s_t *s, int status, int ends) {
  cb__worker_t *w = s->h->c->w;
  if (status == 431) CB__STAT_INC(w, status_431);
  if (status == 413) CB__STAT_INC(w, status_413);
  s->refused = 1;
  if (s->req.res_state == CB__RES_NONE) s->req.status = status; /* what the journal records */
  if (s->req.handler) cb__req_release(&s->req);
  /* The rest of the request body is not wanted. RFC 9113 section 8.1: after a complete response, RST_STREAM
   * with NO_ERROR asks the client to stop sending; sent earlier, it would discard the answer. */
  if (!s->req.req_done && !ends) s->rst_after = 1;
  if (s->req.res_state == CB__RES_NONE) {
    s->head_only = 1;
    h2_head(&s->req, status, NULL, NULL, 0, 0);
    s->res_ended = 1;
    s->req.res_state = CB__RES_ENDED;
  } else {
    /* A streamed answer had begun (an echo): it cannot end well, so the stream is cut. */
    CB__STAT_INC(w, h2_errors);
    stream_reset(s, NGHTTP2_CANCEL);
  }
}

/* `expect: 100-continue` on a request whose body is still to come, and no answer yet (RFC 9110 10.1.1): an
 * interim HEADERS with :status 100, as HTTP/1.1 sends `100 Continue`, so that a client waiting for it sends the
 * body. A request the route answered at once (a 413 or 503 before the body) gets that answer instead. */
static __attribute__((noinline)) void send_continue(h2c_t *h, h2s_t *s) {
  char b[8], *o = cb_hp_field(b, 8, NULL, 0, "100", 3);
  out_block(h, s->id, b, (size_t)(o - b), 0);
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
  r->path = (s->pseudo & PS_PATH) ? s->head + s->path_off : ""; /* CONNECT has no :path */
  r->path_len = s->path_len;
  r->target_len = s->target_len;
  if (r->method_str == NULL) r->method_str = (s->pseudo & PS_METHOD) ? s->head + s->method_off : "";
  r->method_len = s->method_len;
  r->authority = (s->pseudo & PS_AUTHORITY) ? s->head + s->authority_off : NULL;
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

/* The peer ended its side of s (END_STREAM): the body must have had the declared length (RFC 9113 8.1.1). */
static void remote_end(h2c_t *h, h2s_t *s) {
  s->remote_closed = 1;
  if (s->have_cl && (uint64_t)s->req.content_length != s->req.body_received && !s->refused) {
    stream_reset(s, NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  request_done(s);
  if (s->local_closed && !s->rst_owed && !s->ready) close_stream(h, s, 0);
}

/* ---- receiving: header blocks ---- */

/* A header block over the header limit. A request is answered 431 at the block's end (too_large), and the
 * engine does no more work per field. A connection that sends more than OVERSIZED_BLOCKS_MAX oversized blocks
 * is ended: GOAWAY(ENHANCE_YOUR_CALM). */
static int block_too_large(h2c_t *h) {
  if (h->block_over) return 0;
  h->block_over = 1;
  if (++h->oversized > OVERSIZED_BLOCKS_MAX) return conn_error(h, NGHTTP2_ENHANCE_YOUR_CALM);
  if (h->block_s != NULL && h->block_kind == BLK_REQUEST) h->block_s->too_large = 1;
  return 0;
}

/* A pseudo-header of a request (RFC 9113 8.3.1): kept in the head buffer, by offset until the head is done. */
static void pseudo_field(h2s_t *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen) {
#define NAME_IS(lit) (nlen == sizeof(lit) - 1 && memcmp(name, lit, sizeof(lit) - 1) == 0)
  if (s->regular) goto bad;
  if (NAME_IS(":method")) {
    if ((s->pseudo & PS_METHOD) || !cb__is_token((const char *)value, vlen)) goto bad;
    s->pseudo |= PS_METHOD;
    s->req.method = (uint16_t)cb_method_bit((cb_str_t){(const char *)value, vlen});
    s->method_len = vlen;
    s->is_connect = vlen == 7 && memcmp(value, "CONNECT", 7) == 0;
    /* A known method's name is a constant; another one is kept with the head. */
    s->req.method_str = cb__method_name(s->req.method);
    s->method_off = s->head_len;
    if (s->req.method_str == NULL && head_append(s, value, vlen) != 0) goto bad;
  } else if (NAME_IS(":path")) {
    if ((s->pseudo & PS_PATH) || vlen == 0) goto bad;
    for (size_t i = 0; i < vlen; i++)
      if (value[i] <= 0x20 || value[i] == 0x7f) goto bad;
    s->pseudo |= PS_PATH;
    s->path_off = s->head_len;
    if (head_append(s, value, vlen) != 0) goto bad;
    const uint8_t *q = memchr(value, '?', vlen);
    s->path_len = q ? (size_t)(q - value) : vlen;
    s->target_len = vlen;
  } else if (NAME_IS(":authority")) {
    if ((s->pseudo & PS_AUTHORITY) || !cb_h2_valid_value(value, vlen)) goto bad;
    for (size_t i = 0; i < vlen; i++)
      if (value[i] <= 0x20) goto bad;
    s->pseudo |= PS_AUTHORITY;
    s->authority_off = s->head_len;
    s->authority_len = vlen;
    if (head_append(s, value, vlen) != 0) goto bad;
  } else if (NAME_IS(":scheme")) {
    if ((s->pseudo & PS_SCHEME) || vlen == 0) goto bad;
    for (size_t i = 0; i < vlen; i++) {
      uint8_t ch = value[i];
      int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
               (i > 0 && ((ch >= '0' && ch <= '9') || ch == '+' || ch == '-' || ch == '.'));
      if (!ok) goto bad;
    }
    s->pseudo |= PS_SCHEME;
  } else {
    goto bad; /* :status, :protocol (no SETTINGS_ENABLE_CONNECT_PROTOCOL) or unknown */
  }
  return;
bad:
  s->malformed = 1;
#undef NAME_IS
}

/* One field of the block being received. */
static int on_field(h2c_t *h, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen) {
  /* The same accounting as HTTP/1.1's header limit; 32 bytes per field as in SETTINGS_MAX_HEADER_LIST_SIZE.
   * Every block counts, trailers and ignored ones too. */
  h->block_bytes += nlen + vlen + 32;
  if (h->block_bytes > h->c->w->cfg->max_header_bytes && block_too_large(h) != 0) return -1;
  h2s_t *s = h->block_s;
  if (h->block_over || s == NULL || s->malformed) return 0;
  if (h->block_kind == BLK_TRAILERS) {
    if (nlen == 0 || name[0] == ':') s->malformed = 1;
    else if (!cb_h2_valid_name(name, nlen) || cb_h2_conn_specific(name, nlen, value, vlen)) s->malformed = 1;
    return 0; /* trailers are checked, not kept */
  }
  if (nlen > 0 && name[0] == ':') {
    pseudo_field(s, name, nlen, value, vlen);
    return 0;
  }
  s->regular = 1;
  if (!cb_h2_valid_name(name, nlen) || !cb_h2_valid_value(value, vlen) ||
      cb_h2_conn_specific(name, nlen, value, vlen)) {
    s->malformed = 1;
    return 0;
  }
#define NAME_IS(lit) (nlen == sizeof(lit) - 1 && memcmp(name, lit, sizeof(lit) - 1) == 0)
  if (NAME_IS("content-length")) {
    int64_t v = cb_h2_parse_length(value, vlen);
    if (v < 0 || s->have_cl) {
      s->malformed = 1;
      return 0;
    }
    s->have_cl = 1;
    s->req.content_length = v;
  } else if (NAME_IS("expect")) {
    s->expect_continue = ci_eq((const char *)value, vlen, "100-continue");
  }
#undef NAME_IS
  /* Every regular field is kept: routes match on them and the journal records them. */
  if (add_header(s, name, nlen, value, vlen, 0) != 0) s->malformed = 1;
  return 0;
}

/* A field the decoder gave, kept in the memo being recorded (block_memo). */
static void memo_add(h2c_t *h, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
  if (h->memo_over || h->memo_used + 4 + nl + vl > MEMO_MAX) {
    h->memo_over = 1;
    return;
  }
  uint8_t *o = h->memo + h->memo_used;
  o[0] = (uint8_t)(nl >> 8);
  o[1] = (uint8_t)nl;
  o[2] = (uint8_t)(vl >> 8);
  o[3] = (uint8_t)vl;
  memcpy(o + 4, name, nl);
  memcpy(o + 4 + nl, value, vl);
  h->memo_used = (uint16_t)(h->memo_used + 4 + nl + vl);
}

/* Decodes a fragment of the block (last: its END_HEADERS). -1: the connection ends (HPACK broken:
 * COMPRESSION_ERROR, or too many oversized blocks). */
static int block_decode(h2c_t *h, const uint8_t *in, size_t len, int last) {
  for (;;) {
    nghttp2_nv nv;
    int fl = 0;
    ssize_t r = nghttp2_hd_inflate_hd2(h->inf, &nv, &fl, in, len, last);
    if (r < 0) return conn_error(h, NGHTTP2_COMPRESSION_ERROR);
    in += r;
    len -= (size_t)r;
    if ((fl & NGHTTP2_HD_INFLATE_EMIT) && h->memo_rec) memo_add(h, nv.name, nv.namelen, nv.value, nv.valuelen);
    if ((fl & NGHTTP2_HD_INFLATE_EMIT) && on_field(h, nv.name, nv.namelen, nv.value, nv.valuelen) != 0) return -1;
    if (fl & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(h->inf);
      return 0;
    }
    if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && len == 0) return 0;
  }
}

/* An HPACK integer with an n-bit prefix at p[*i] (RFC 7541 5.1), or -1 when the block ends first or it is
 * over 2^21. */
static int64_t hp_int_at(const uint8_t *p, size_t len, size_t *i, int bits) {
  if (*i >= len) return -1;
  uint32_t max = (1u << bits) - 1, v = p[(*i)++] & max;
  if (v < max) return v;
  for (int shift = 0; shift <= 14; shift += 7) {
    if (*i >= len) return -1;
    uint8_t b = p[(*i)++];
    v += (uint32_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  return -1;
}

/* Whether a block leaves the decoder's table as it found it: indexed fields (RFC 7541 6.1) and literals
 * without indexing or never indexed (6.2.2, 6.2.3) only; no literal with incremental indexing (6.2.1), no
 * table size update (6.3). Read for its structure only (string lengths skipped, nothing decoded). */
static int table_neutral(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t b = p[i];
    if (b & 0x80) {
      if (hp_int_at(p, n, &i, 7) < 0) return 0;
      continue;
    }
    if (b & 0x60) return 0; /* 01xxxxxx incremental indexing, 001xxxxx a size update */
    int64_t name = hp_int_at(p, n, &i, 4);
    if (name < 0) return 0;
    for (int str = name == 0 ? 2 : 1; str > 0; str--) {
      int64_t l = hp_int_at(p, n, &i, 7);
      if (l < 0 || (uint64_t)l > n - i) return 0;
      i += (size_t)l;
    }
  }
  return 1;
}

/* A whole header block in one HEADERS frame, decoded, or replayed from the memo. A block that leaves the
 * decoder's table as it was (table_neutral) decodes to the same fields for the same bytes until a block of
 * another kind (or a table size change) comes: clients that send one request again and again (a load
 * generator, a poller) send the same bytes each time (h2load: a literal :path and indexed fields), and the
 * memo spares the decoder's work for them. The fields replayed go through the same checks (on_field) as
 * decoded ones. */
static int block_memo(h2c_t *h, const uint8_t *p, size_t n) {
  if (h->memo_valid && n == h->memo_block && memcmp(p, h->memo, n) == 0) {
    const uint8_t *f = h->memo + n, *end = h->memo + h->memo_used;
    while (f < end) {
      size_t nl = (size_t)f[0] << 8 | f[1], vl = (size_t)f[2] << 8 | f[3];
      if (on_field(h, f + 4, nl, f + 4 + nl, vl) != 0) return -1;
      f += 4 + nl + vl;
    }
    return 0;
  }
  int indexed = n > 0 && n <= MEMO_BLOCK_MAX && table_neutral(p, n);
  h->memo_valid = 0;
  if (indexed && h->memo == NULL) h->memo = malloc(MEMO_MAX);
  if (indexed && h->memo != NULL) {
    memcpy(h->memo, p, n);
    h->memo_used = (uint16_t)n;
    h->memo_rec = 1;
    h->memo_over = 0;
  }
  int rc = block_decode(h, p, n, 1);
  if (h->memo_rec) {
    h->memo_rec = 0;
    h->memo_block = (uint16_t)n;
    h->memo_valid = rc == 0 && !h->memo_over;
  }
  return rc;
}

static void memo_free(h2c_t *h) {
  free(h->memo);
  h->memo = NULL;
  h->memo_valid = 0;
}

/* The block is whole: what it means for its stream. */
static void block_done(h2c_t *h) {
  h2s_t *s = h->block_s;
  h->block_open = 0;
  h->block_s = NULL;
  if (s == NULL || h->block_kind == BLK_IGNORE) return;
  cb__conn_progress(h->c);
  if (h->block_kind == BLK_TRAILERS) {
    if (s->malformed) stream_reset(s, NGHTTP2_PROTOCOL_ERROR);
    else remote_end(h, s);
    return;
  }
  int ends = h->block_end;
  if (!s->too_large) {
    int need = s->is_connect ? PS_METHOD | PS_AUTHORITY : PS_METHOD | PS_SCHEME | PS_PATH;
    if ((s->pseudo & need) != need || (s->is_connect && (s->pseudo & (PS_SCHEME | PS_PATH))) ||
        (ends && s->have_cl && s->req.content_length != 0))
      s->malformed = 1;
    /* :path is origin-form, or `*` for OPTIONS (RFC 9113 8.3.1) */
    else if ((s->pseudo & PS_PATH) && s->head[s->path_off] != '/' &&
             !(s->target_len == 1 && s->head[s->path_off] == '*' && s->req.method == CB_METHOD_OPTIONS))
      s->malformed = 1;
  }
  if (s->malformed && !s->too_large) {
    s->remote_closed = ends;
    stream_reset(s, NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  request_head_done(h, s, ends);
  if (ends) remote_end(h, s);
}

/* ---- receiving: stream ids ---- */

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

/* A new stream id above every one so far: it opens, the ids skipped never will (RFC 9113 5.1.1). */
static int open_sid(h2c_t *h, int32_t sid) {
  if (h->opened == NULL && (h->opened = calloc(1, SID_BYTES)) == NULL) return -1;
  if (h->max_sid < 0 || (int64_t)sid - h->max_sid >= 2 * OPENED_WINDOW)
    memset(h->opened, 0, SID_BYTES);
  else
    for (int32_t k = h->max_sid + 2; k < sid; k += 2) opened_set(h, k, 0);
  opened_set(h, sid, 1);
  h->max_sid = sid;
  return 0;
}

enum { NS_OTHER, NS_HEADERS, NS_DATA };

/* A frame (NS_*) on a stream id that has no stream. Idle (above every id the client used, or even): a
 * connection error, PROTOCOL_ERROR (5.1). Skipped (a lower id never opened, so closed by 5.1.1): HEADERS there
 * is a PROTOCOL_ERROR (h2spec 5.1.1), DATA a STREAM_CLOSED. Closed after the peer ended its side: DATA and
 * HEADERS are STREAM_CLOSED. Closed otherwise (we reset it first), forgotten, or any other frame: ignored.
 * Returns 0 to ignore the frame, -1 when the connection ends. */
static int no_stream(h2c_t *h, int32_t sid, int kind) {
  if ((sid & 1) == 0 || sid > h->max_sid) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if (kind == NS_OTHER || !sid_remembered(h, sid)) return 0;
  if (!sid_get(h, sid, SID_OPENED))
    return conn_error(h, kind == NS_HEADERS ? NGHTTP2_PROTOCOL_ERROR : NGHTTP2_STREAM_CLOSED);
  if (sid_get(h, sid, SID_CLOSED)) return conn_error(h, NGHTTP2_STREAM_CLOSED);
  return 0;
}

/* ---- receiving: frames ---- */

static int on_headers(h2c_t *h, const uint8_t *p, size_t n) {
  int32_t sid = h->fsid;
  uint8_t fl = h->fflags;
  if (sid == 0 || (sid & 1) == 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  size_t pad = 0;
  if (fl & NGHTTP2_FLAG_PADDED) {
    if (n < 1) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
    pad = p[0];
    p++;
    n--;
  }
  int self_dep = 0;
  if (fl & NGHTTP2_FLAG_PRIORITY) {
    if (n < 5) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
    self_dep = (int32_t)(cb_h2_get32(p) & 0x7fffffff) == sid;
    p += 5;
    n -= 5;
  }
  if (pad > n) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  n -= pad;
  h->block_sid = sid;
  h->block_end = (fl & NGHTTP2_FLAG_END_STREAM) != 0;
  h->block_bytes = 0;
  h->block_over = 0;
  h->nconts = 0;
  h->block_s = NULL;
  h->block_kind = BLK_IGNORE;
  if (sid > h->max_sid) {
    if (open_sid(h, sid) != 0) return conn_error(h, NGHTTP2_INTERNAL_ERROR);
    if (self_dep) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
    if (h->goaway_sent && sid > h->goaway_last) {
      /* After our GOAWAY, new streams are ignored (RFC 9113 6.8); the block is still decoded. */
    } else if ((uint32_t)h->nstreams >= h->c->w->cfg->h2_max_concurrent_streams) {
      /* Over our SETTINGS_MAX_CONCURRENT_STREAMS: a stream error, REFUSED_STREAM (RFC 9113 5.1.2), so the
       * client may retry it and its other streams go on. The block is still decoded (HPACK stays in step). */
      CB__STAT_INC(h->c->w, h2_errors);
      out_u32(h, NGHTTP2_RST_STREAM, sid, NGHTTP2_REFUSED_STREAM);
    } else {
      h2s_t *s = stream_new(h, sid);
      if (s == NULL) return conn_error(h, NGHTTP2_INTERNAL_ERROR);
      h->block_s = s;
      h->block_kind = BLK_REQUEST;
    }
  } else {
    h2s_t *s = find(h, sid);
    if (s == NULL) {
      if (no_stream(h, sid, NS_HEADERS) != 0) return -1;
    } else if (s->rst_owed) {
      /* we are resetting it: ignored */
    } else if (s->remote_closed) {
      return conn_error(h, NGHTTP2_STREAM_CLOSED); /* half-closed (remote): 5.1 */
    } else {
      h->block_s = s;
      h->block_kind = BLK_TRAILERS;
      if (!h->block_end || self_dep) s->malformed = 1; /* trailers end the stream (8.1) */
    }
  }
  if (fl & NGHTTP2_FLAG_END_HEADERS) {
    if (block_memo(h, p, n) != 0) return -1;
    block_done(h);
    return 0;
  }
  h->block_open = 1;
  h->memo_valid = 0; /* the fragments may change the table */
  return block_decode(h, p, n, 0);
}

static int on_continuation(h2c_t *h, const uint8_t *p, size_t n) {
  if (++h->nconts > MAX_CONTINUATIONS) return conn_error(h, NGHTTP2_ENHANCE_YOUR_CALM);
  int last = (h->fflags & NGHTTP2_FLAG_END_HEADERS) != 0;
  if (block_decode(h, p, n, last) != 0) return -1;
  if (last) block_done(h);
  return 0;
}

static void apply_local_settings(h2c_t *h) {
  if (h->pend_max_frame >= 0) h->max_recv_frame = (uint32_t)h->pend_max_frame;
  if (h->pend_window >= 0) {
    int64_t delta = h->pend_window - (int64_t)h->local_initial;
    for (h2s_t *s = h->streams; s != NULL; s = s->next) s->recv_window = (int32_t)(s->recv_window + delta);
    h->local_initial = (uint32_t)h->pend_window;
  }
  h->pend_max_frame = h->pend_window = -1;
}

/* The peer's settings (a SETTINGS frame's payload, or HTTP2-Settings). -1: a connection error (sent). */
static int take_settings(h2c_t *h, const uint8_t *p, size_t n) {
  if (n / 6 > MAX_SETTINGS) return conn_error(h, NGHTTP2_ENHANCE_YOUR_CALM);
  for (size_t o = 0; o + 6 <= n; o += 6) {
    uint16_t id = (uint16_t)(p[o] << 8 | p[o + 1]);
    uint32_t v = cb_h2_get32(p + o + 2);
    switch (id) {
    case NGHTTP2_SETTINGS_ENABLE_PUSH:
      if (v > 1) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
      break;
    case NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE: {
      if (v > MAX_WINDOW) return conn_error(h, NGHTTP2_FLOW_CONTROL_ERROR);
      int64_t delta = (int64_t)v - h->peer_initial;
      for (h2s_t *s = h->streams; s != NULL; s = s->next)
        if (s->send_window + delta > MAX_WINDOW) return conn_error(h, NGHTTP2_FLOW_CONTROL_ERROR);
      for (h2s_t *s = h->streams; s != NULL; s = s->next) s->send_window += delta;
      h->peer_initial = v;
      if (delta > 0) windows_grew(h);
      break;
    }
    case NGHTTP2_SETTINGS_MAX_FRAME_SIZE:
      if (v < DEFAULT_MAX_FRAME || v > MAX_MAX_FRAME) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
      h->peer_max_frame = v;
      break;
    case NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL:
    case NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES:
      if (v > 1) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
      break;
    default: /* HEADER_TABLE_SIZE (our blocks use no table), MAX_CONCURRENT_STREAMS (we open none),
              * MAX_HEADER_LIST_SIZE (advisory), and ids we do not know */
      break;
    }
  }
  return 0;
}

static int on_settings(h2c_t *h, const uint8_t *p, size_t n) {
  if (h->fsid != 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if (h->fflags & NGHTTP2_FLAG_ACK) {
    if (n != 0) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
    if (h->settings_owed > 0 && --h->settings_owed == 0) {
      apply_local_settings(h);
      if (h->table_asked) {
        /* The peer applied a 0-byte table: ours is emptied, and the idle connection can park (h2_after). */
        nghttp2_hd_inflate_change_table_size(h->inf, 0);
        h->memo_valid = 0;
        h->table_asked = 0;
        h->table_zero = 1;
        h->park_soon = 1;
      }
    }
    return 0;
  }
  if (n % 6 != 0) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  if (take_settings(h, p, n) != 0) return -1;
  if (!h->settings_seen) {
    /* The preface is whole: the connection window opens (before, a bad preface gets SETTINGS and GOAWAY
     * alone). The peer cannot have sent DATA yet: SETTINGS comes first. */
    out_u32(h, NGHTTP2_WINDOW_UPDATE, 0, CONN_WINDOW - DEFAULT_WINDOW);
    h->conn_recv += CONN_WINDOW - DEFAULT_WINDOW;
  }
  out_frame(h, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
  h->settings_seen = 1;
  if (h->hold_data) {
    /* The upgraded client has sent its preface: the response to the upgrade request may now flow. (curl
     * 7.88 fails when more than 32 KiB of DATA follow the 101 before it has sent its preface.) */
    h->hold_data = 0;
    windows_grew(h);
    for (h2s_t *s = h->streams; s != NULL; s = s->next)
      if (s->res_ended) link_ready(s);
  }
  return 0;
}

static int on_window_update(h2c_t *h, const uint8_t *p, size_t n) {
  if (n != 4) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  uint32_t inc = cb_h2_get32(p) & 0x7fffffff;
  if (h->fsid == 0) {
    if (inc == 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
    if (h->conn_send + inc > MAX_WINDOW) return conn_error(h, NGHTTP2_FLOW_CONTROL_ERROR);
    int was_shut = h->conn_send <= 0;
    h->conn_send += inc;
    if (was_shut) windows_grew(h);
    return 0;
  }
  h2s_t *s = find(h, h->fsid);
  if (s == NULL) return no_stream(h, h->fsid, NS_OTHER);
  if (inc == 0) {
    stream_reset(s, NGHTTP2_PROTOCOL_ERROR);
    return 0;
  }
  if (s->send_window + inc > MAX_WINDOW) {
    stream_reset(s, NGHTTP2_FLOW_CONTROL_ERROR);
    return 0;
  }
  int was_shut = s->send_window <= 0;
  s->send_window += inc;
  if (was_shut && s->provider && !s->local_closed && s->phead < s->ptail) link_ready(s);
  return 0;
}

static int on_rst_stream(h2c_t *h, const uint8_t *p, size_t n) {
  if (n != 4) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  if (h->fsid == 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  h2s_t *s = find(h, h->fsid);
  if (s == NULL) return no_stream(h, h->fsid, NS_OTHER);
  /* The rapid-reset bound: tokens come back at RST_PER_SECOND, up to RST_BURST. */
  uint64_t now = uv_now(&h->c->w->loop);
  uint64_t back = (now - h->rst_ms) * RST_PER_SECOND / 1000;
  if (back > 0) {
    h->rst_tokens = h->rst_tokens + back > RST_BURST ? RST_BURST : (uint32_t)(h->rst_tokens + back);
    h->rst_ms = now;
  }
  if (h->rst_tokens == 0) return conn_error(h, NGHTTP2_ENHANCE_YOUR_CALM);
  h->rst_tokens--;
  s->remote_closed = 1; /* the peer is done with it: later frames on it are STREAM_CLOSED */
  s->local_closed = 1;
  close_stream(h, s, cb_h2_get32(p) != NGHTTP2_NO_ERROR);
  return 0;
}

static int on_ping(h2c_t *h, const uint8_t *p, size_t n) {
  if (h->fsid != 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if (n != 8) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  if (!(h->fflags & NGHTTP2_FLAG_ACK)) out_frame(h, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, p, 8);
  return 0;
}

static int on_goaway(h2c_t *h, const uint8_t *p, size_t n) {
  (void)p;
  if (h->fsid != 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if (n < 8) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  h->goaway_recv = 1; /* we open no streams: ours are the peer's, which it still wants answered */
  return 0;
}

static int on_priority(h2c_t *h, const uint8_t *p, size_t n) {
  /* RFC 7540 priorities are off (SETTINGS_NO_RFC7540_PRIORITIES): the frame is checked, nothing more. */
  if (h->fsid == 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if (n != 5) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  if ((int32_t)(cb_h2_get32(p) & 0x7fffffff) == h->fsid) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  return 0;
}

/* A frame whose payload is whole in [p, p + n). */
static int on_frame(h2c_t *h, const uint8_t *p, size_t n) {
  switch (h->ftype) {
  case NGHTTP2_HEADERS: return on_headers(h, p, n);
  case NGHTTP2_CONTINUATION: return on_continuation(h, p, n);
  case NGHTTP2_SETTINGS: return on_settings(h, p, n);
  case NGHTTP2_WINDOW_UPDATE: return on_window_update(h, p, n);
  case NGHTTP2_RST_STREAM: return on_rst_stream(h, p, n);
  case NGHTTP2_PING: return on_ping(h, p, n);
  case NGHTTP2_GOAWAY: return on_goaway(h, p, n);
  case NGHTTP2_PRIORITY: return on_priority(h, p, n);
  default: return 0;
  }
}

/* DATA: its header is checked; the payload then comes in chunks (data_chunk). */
static int data_begin(h2c_t *h) {
  int32_t sid = h->fsid;
  uint32_t len = h->flen;
  if (sid == 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if ((int64_t)len > h->conn_recv) return conn_error(h, NGHTTP2_FLOW_CONTROL_ERROR);
  h->conn_recv -= (int32_t)len;
  h->ds = NULL;
  h->dpad_wait = (h->fflags & NGHTTP2_FLAG_PADDED) != 0;
  h->dpad = 0;
  if (h->dpad_wait && len == 0) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  h2s_t *s = find(h, sid);
  if (s == NULL) {
    if (no_stream(h, sid, NS_DATA) != 0) return -1;
  } else if (s->rst_owed) {
    /* being reset: ignored */
  } else if (s->remote_closed) {
    if (s->local_closed) return conn_error(h, NGHTTP2_STREAM_CLOSED);
    stream_reset(s, NGHTTP2_STREAM_CLOSED); /* half-closed (remote): 5.1 */
  } else if ((int64_t)len > s->recv_window) {
    stream_reset(s, NGHTTP2_FLOW_CONTROL_ERROR);
  } else {
    s->recv_window -= (int32_t)len;
    h->ds = s;
  }
  return 0;
}

/* Body bytes of the DATA frame being read. */
static void data_bytes(h2c_t *h, const uint8_t *data, size_t len) {
  h2s_t *s = h->ds;
  cb__conn_progress(h->c);
  if (s == NULL || s->refused || s->rst_owed) {
    consume(h, s, len);
    return;
  }
  /* Receive windows are given back at once for bytes nobody keeps, later for bytes a handler copied into its
   * response. */
  size_t held = 0;
  cb__req_t *r = &s->req;
  r->body_received += len;
  if (r->body_received > h->c->w->cfg->max_body_bytes) {
    refuse(s, 413, h->fflags & NGHTTP2_FLAG_END_STREAM);
  } else if (s->have_cl && r->body_received > (uint64_t)r->content_length) {
    stream_reset(s, NGHTTP2_PROTOCOL_ERROR);
  } else {
    if (r->jseq) cb__journal_body(r, (const char *)data, len);
    if (r->handler && r->handler->on_body) {
      s->in_body = 1;
      s->body_held = 0;
      r->handler->on_body(r, (const char *)data, len);
      s->in_body = 0;
      held = s->body_held < len ? s->body_held : len;
      if (s->over_budget) refuse(s, 503, h->fflags & NGHTTP2_FLAG_END_STREAM); /* a piece of the echo is missing */
    }
  }
  consume(h, s, len - held);
}

/* The DATA frame has been read whole. */
static void data_end(h2c_t *h) {
  h2s_t *s = h->ds;
  h->ds = NULL;
  if (s != NULL && (h->fflags & NGHTTP2_FLAG_END_STREAM) && !s->rst_owed && !s->remote_closed) {
    cb__conn_progress(h->c);
    remote_end(h, s);
  }
}

/* n bytes of the DATA frame's payload (pad length, body, padding). */
static int data_chunk(h2c_t *h, const uint8_t *p, size_t n) {
  if (h->dpad_wait && n > 0) {
    h->dpad_wait = 0;
    h->dpad = p[0];
    if (h->dpad >= h->flen) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
    consume(h, h->ds, 1);
    p++;
    n--;
    h->left--;
  }
  size_t body_left = h->left > h->dpad ? h->left - h->dpad : 0;
  size_t body = n < body_left ? n : body_left;
  if (body > 0) data_bytes(h, p, body);
  if (n > body) consume(h, h->ds, n - body); /* padding */
  h->left -= (uint32_t)n;
  if (h->left == 0) data_end(h);
  return 0;
}

/* A frame header has been read: where its payload goes. -1: the connection ends. */
static int frame_begin(h2c_t *h, const uint8_t *fh) {
  h->flen = (uint32_t)fh[0] << 16 | (uint32_t)fh[1] << 8 | fh[2];
  h->ftype = fh[3];
  h->fflags = fh[4];
  h->fsid = (int32_t)(cb_h2_get32(fh + 5) & 0x7fffffff);
  h->left = h->flen;
  if (h->flen > h->max_recv_frame) return conn_error(h, NGHTTP2_FRAME_SIZE_ERROR);
  if (!h->settings_seen && (h->ftype != NGHTTP2_SETTINGS || (h->fflags & NGHTTP2_FLAG_ACK)))
    return conn_error(h, NGHTTP2_PROTOCOL_ERROR); /* the preface's SETTINGS comes first (3.4) */
  if (h->block_open != (h->ftype == NGHTTP2_CONTINUATION) || (h->block_open && h->fsid != h->block_sid))
    return conn_error(h, NGHTTP2_PROTOCOL_ERROR); /* a header block is one run of frames (4.3) */
  if (h->ftype == NGHTTP2_PUSH_PROMISE) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
  if (h->ftype == NGHTTP2_DATA) {
    if (data_begin(h) != 0) return -1;
    h->in = IN_DATA;
    if (h->left == 0) {
      data_end(h);
      h->in = IN_HEADER;
    }
    return 0;
  }
  if (h->ftype > NGHTTP2_CONTINUATION) { /* unknown types are skipped (5.5) */
    h->in = h->left > 0 ? IN_SKIP : IN_HEADER;
    return 0;
  }
  h->in = IN_GATHER;
  return 0;
}

/* Whether the peer is in the middle of something that must arrive promptly: the preface and first SETTINGS,
 * a frame header, a header block, or a frame other than DATA. */
static int in_head(const h2c_t *h) {
  return h->preface_left > 0 || !h->settings_seen || h->fh_len > 0 || h->block_open ||
         (h->in != IN_HEADER && h->in != IN_DATA);
}

static int wake(h2c_t *h);

/* Reads [p, p + n). -1 when the session ended (GOAWAY written). */
static int h2_input(h2c_t *h, const uint8_t *p, size_t n) {
  const uint8_t *end = p + n;
  while (p < end && !h->ended) {
    size_t avail = (size_t)(end - p);
    if (h->preface_left > 0) {
      size_t k = avail < h->preface_left ? avail : h->preface_left;
      if (memcmp(p, preface + PREFACE_LEN - h->preface_left, k) != 0) return conn_error(h, NGHTTP2_PROTOCOL_ERROR);
      h->preface_left -= (uint32_t)k;
      p += k;
      continue;
    }
    switch (h->in) {
    case IN_HEADER: {
      /* A new frame: the header deadline counts from it, unless it continues an open header block (or the
       * preface and first SETTINGS, which count from the connection's start). */
      if (h->fh_len == 0 && h->settings_seen && !h->block_open) cb__conn_head_begin(h->c);
      const uint8_t *fh;
      if (h->fh_len == 0 && avail >= 9) {
        fh = p;
        p += 9;
      } else {
        size_t k = avail < 9u - h->fh_len ? avail : 9u - h->fh_len;
        memcpy(h->fh + h->fh_len, p, k);
        h->fh_len = (uint8_t)(h->fh_len + k);
        p += k;
        if (h->fh_len < 9) return 0;
        h->fh_len = 0;
        fh = h->fh;
      }
      if (frame_begin(h, fh) != 0) return -1;
      if (h->in == IN_GATHER && (size_t)(end - p) >= h->flen) { /* whole in this read: in place */
        h->in = IN_HEADER;
        const uint8_t *payload = p;
        p += h->flen;
        if (on_frame(h, payload, h->flen) != 0) return -1;
      } else if (h->in == IN_GATHER && h->gcap < h->flen) {
        uint8_t *b = realloc(h->gbuf, h->flen);
        if (b == NULL) return conn_error(h, NGHTTP2_INTERNAL_ERROR);
        h->gbuf = b;
        h->gcap = h->flen;
      }
      break;
    }
    case IN_GATHER: {
      size_t k = avail < h->left ? avail : h->left;
      memcpy(h->gbuf + (h->flen - h->left), p, k);
      h->left -= (uint32_t)k;
      p += k;
      if (h->left == 0) {
        h->in = IN_HEADER;
        if (on_frame(h, h->gbuf, h->flen) != 0) return -1;
      }
      break;
    }
    case IN_DATA: {
      size_t k = avail < h->left ? avail : h->left;
      if (data_chunk(h, p, k) != 0) return -1;
      p += k;
      if (h->left == 0) h->in = IN_HEADER;
      break;
    }
    default: { /* IN_SKIP */
      size_t k = avail < h->left ? avail : h->left;
      h->left -= (uint32_t)k;
      p += k;
      if (h->left == 0) h->in = IN_HEADER;
      break;
    }
    }
  }
  return h->ended ? -1 : 0;
}

static int h2_read(cb__conn_t *c, const char *data, size_t len) {
  h2c_t *h = c->proto_state;
  if (h->ended) return 0;
  if (h->inf == NULL && wake(h) != 0) return UV_EPROTO;
  h2_input(h, (const uint8_t *)data, len);
  return 0;
}

/* ---- the connection ---- */

/* The worker's cache of the decoder's small blocks (h2_mem.c) is its CB__PART_H2 part, made with its first
 * session and freed when its last connection has closed (the trim) or it stops. */
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

/* The settings every session of ours sends first. No RFC 7540 priority tree (RFC 9113 deprecates it). */
static void our_settings(h2c_t *h) {
  const cb_config_t *cfg = h->c->w->cfg;
  static const uint16_t ids[] = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
                                 NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES};
  uint32_t vals[] = {cfg->h2_max_concurrent_streams, STREAM_WINDOW, (uint32_t)cfg->max_header_bytes, 1};
  out_settings(h, ids, vals, 4);
}

static int inflater_new(h2c_t *h) {
  cb__h2_mem_init(&h->mem, small_blocks(h->c->w));
  if (nghttp2_hd_inflate_new2(&h->inf, &h->mem.mem) != 0) {
    h->inf = NULL;
    cb__h2_mem_free(&h->mem);
    return UV_ENOMEM;
  }
  return 0;
}

static h2c_t *session_new(cb__conn_t *c) {
  h2c_t *h = calloc(1, sizeof *h);
  if (h == NULL) return NULL;
  h->c = c;
  if (inflater_new(h) != 0) {
    free(h);
    return NULL;
  }
  h->preface_left = PREFACE_LEN; /* the client magic, after an upgrade too */
  h->max_sid = -1;
  h->conn_send = DEFAULT_WINDOW;
  h->peer_initial = DEFAULT_WINDOW;
  h->peer_max_frame = DEFAULT_MAX_FRAME;
  h->conn_recv = DEFAULT_WINDOW; /* CONN_WINDOW once the preface is whole (on_settings) */
  h->local_initial = STREAM_WINDOW;
  h->max_recv_frame = DEFAULT_MAX_FRAME;
  h->pend_window = h->pend_max_frame = -1;
  h->rst_tokens = RST_BURST;
  h->rst_ms = uv_now(&c->w->loop);
  return h;
}

static void session_free(h2c_t *h) {
  if (h->inf) nghttp2_hd_inflate_del(h->inf);
  free(h->memo);
  cb__h2_mem_free(&h->mem);
  free(h->tab);
  free(h->gbuf);
  free(h->opened);
  free(h);
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
  our_settings(h);
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

/* Whether HTTP2-Settings holds settings we take: whole entries, at most MAX_SETTINGS, each value in its range.
 * A request whose HTTP2-Settings is not taken is served as HTTP/1.1. */
int cb__h2_settings_valid(const char *settings, size_t len) {
  uint8_t payload[512];
  ssize_t plen = b64url_decode(settings, len, payload, sizeof payload);
  if (plen < 0 || plen % 6 != 0 || plen / 6 > MAX_SETTINGS) return 0;
  for (ssize_t o = 0; o < plen; o += 6) {
    uint16_t id = (uint16_t)(payload[o] << 8 | payload[o + 1]);
    uint32_t v = cb_h2_get32(payload + o + 2);
    if ((id == NGHTTP2_SETTINGS_ENABLE_PUSH && v > 1) || (id == NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE && v > MAX_WINDOW) ||
        (id == NGHTTP2_SETTINGS_MAX_FRAME_SIZE && (v < DEFAULT_MAX_FRAME || v > MAX_MAX_FRAME)))
      return 0;
  }
  return 1;
}

int cb__h2_upgrade(cb__conn_t *c, const cb__req_t *r, const char *settings, size_t settings_len) {
  static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n";
  uint8_t payload[512];
  ssize_t plen = b64url_decode(settings, settings_len, payload, sizeof payload);
  if (plen < 0 || plen % 6 != 0 || !cb__h2_settings_valid(settings, settings_len)) return UV_EINVAL;
  h2c_t *h = session_new(c);
  if (h == NULL) return UV_ENOMEM;
  h->upgraded = 1;
  /* HTTP2-Settings counts as the client's first SETTINGS (RFC 7540 3.2.1: the 101 acknowledges it). */
  h2s_t *s = open_sid(h, 1) == 0 && take_settings(h, payload, (size_t)plen) == 0 ? stream_new(h, 1) : NULL;
  if (s == NULL) {
    session_free(h);
    return UV_EINVAL;
  }
  /* The 101 first, then our frames. */
  cb__outq_copy(&c->out, switching, sizeof switching - 1);
  our_settings(h);
  h->hold_data = 1; /* until the client's preface SETTINGS */
  cb__conn_head_begin(c); /* the preface and SETTINGS have the header timeout from the 101 on */
  /* Stream 1 is the upgrade request: its head comes from HTTP/1.1, and it has no body. */
  s->req.method = r->method;
  s->req.content_length = r->content_length;
  s->method_off = 0;
  s->method_len = r->method_len;
  if (head_append(s, (const uint8_t *)r->method_str, r->method_len) == 0) s->pseudo |= PS_METHOD;
  s->path_off = s->head_len;
  if (head_append(s, (const uint8_t *)r->path, r->target_len) == 0) s->pseudo |= PS_PATH;
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
  s->remote_closed = 1;
  request_head_done(h, s, 1);
  request_done(s);
  return 0;
}

static void try_park(h2c_t *h);

static void h2_after(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  h->would_block = 0;
  if (h->inf == NULL) { /* parked */
    if (h->peer_eof) cb__conn_close_linger(c);
    return;
  }
  if (!h->ended) flush(h);
  if (h->violation) { /* fault.c: behind the HEADERS just written */
    static const char data0[11] = {0, 0, 2, 0 /* DATA */, 0, 0, 0, 0, 0 /* stream 0 */, 'o', 'k'};
    h->violation = 0;
    cb__outq_copy(&c->out, data0, sizeof data0);
  }
  if (h->ended)
    cb__conn_close_linger(c);
  else if ((h->stopping || h->peer_eof || h->goaway_recv) && h->nstreams == 0)
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
  for (h2s_t *s = h->streams; s != NULL; s = s->next)
    if (!s->req.req_done) stream_reset(s, NGHTTP2_CANCEL);
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
  if (h->inf == NULL && wake(h) != 0) {
    cb__conn_close(c);
    return;
  }
  end_session(h, h->max_sid > 0 ? h->max_sid : 0, NGHTTP2_NO_ERROR);
  h->stopping = 1;
}

static void h2_stop(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  h->stopping = 1;
  if (h->inf == NULL && wake(h) != 0) {
    cb__conn_close(c);
    return;
  }
  if (h->ended || h->goaway_sent) return;
  /* GOAWAY names the last stream we took: those finish within the stop bound, no new ones start. */
  h->goaway_sent = 1;
  h->goaway_last = h->max_sid > 0 ? h->max_sid : 0;
  out_goaway(h, h->goaway_last, NGHTTP2_NO_ERROR);
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

/* What a connection without streams keeps only for speed: spare streams, the stream table, the memo and the
 * gather buffer (unless a frame is being gathered). */
static void drop_idle_buffers(h2c_t *h) {
  free_spare_streams(h);
  if (h->in != IN_GATHER) {
    free(h->gbuf);
    h->gbuf = NULL;
    h->gcap = 0;
  }
  free(h->tab);
  h->tab = NULL;
  h->tab_cap = h->tab_n = 0;
  memo_free(h);
}

/* Idle (no stream, no event for CB__REST_MS): the spare streams and buffers go, then the decoder if it can. */
static void h2_rest(cb__conn_t *c) {
  h2c_t *h = c->proto_state;
  if (h == NULL || h->inf == NULL || h->nstreams > 0) return;
  drop_idle_buffers(h);
  try_park(h);
}

/* ---- parking an idle session (docs/tls.md "Idle connections") ----
 * At rest, a connection with no stream and nothing half-received gives its HPACK decoder back (about 1.2 KiB
 * with its table). If the peer's encoder has indexed fields, it is first asked for a 0-byte table (RFC 7541
 * 4.2: it empties its table and indexes nothing more) and the decoder goes once that is acknowledged; the first
 * bytes from the peer, a timeout or a stop make a new one, and a peer told 0 bytes is offered the usual table
 * again. Not parked: an upgraded connection, one a fault has changed the settings of. */

static int park_ready(const h2c_t *h) {
  return h->inf != NULL && h->nstreams == 0 && !h->upgraded && !h->no_park && !h->stopping && !h->peer_eof &&
         !h->timed_out && !h->ended && !h->goaway_recv && !h->violation && !h->would_block &&
         !in_head(h) && h->in == IN_HEADER;
}

static void try_park(h2c_t *h) {
  if (!park_ready(h)) return;
  if (!h->table_zero && nghttp2_hd_inflate_get_dynamic_table_size(h->inf) > 0) {
    if (h->table_asked) return;
    static const uint16_t id = NGHTTP2_SETTINGS_HEADER_TABLE_SIZE;
    static const uint32_t zero = 0;
    out_settings(h, &id, &zero, 1);
    h->table_asked = 1;
    cb__conn_after_soon(h->c); /* sends it (rest runs from the connection's timer, outside any event) */
    return;
  }
  if (h->settings_owed > 0) return;
  drop_idle_buffers(h);
  nghttp2_hd_inflate_del(h->inf);
  h->inf = NULL;
  cb__h2_mem_free(&h->mem);
  CB__STAT_INC(h->c->w, h2_parked);
}

/* A new decoder in the parked one's place. 0, or an error: the connection is closed. */
static int wake(h2c_t *h) {
  if (inflater_new(h) != 0) return UV_ENOMEM;
  CB__STAT_INC(h->c->w, h2_woken);
  if (h->table_zero) { /* the peer may index again */
    static const uint16_t id = NGHTTP2_SETTINGS_HEADER_TABLE_SIZE;
    static const uint32_t usual = 4096;
    out_settings(h, &id, &usual, 1);
    h->table_zero = 0;
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
  session_free(h);
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

static void h2_rst_stream(cb__req_t *r, uint32_t code) { stream_reset(r->stream, code); }

static void h2_goaway(cb__req_t *r, uint32_t code, int32_t last, int graceful) {
  h2c_t *h = r->conn->proto_state;
  if (graceful) {
    /* The streams up to last finish; h2_after closes once none is left. */
    if (!h->goaway_sent || last < h->goaway_last) h->goaway_last = last;
    h->goaway_sent = 1;
    out_goaway(h, last, code);
    h->stopping = 1;
  } else {
    end_session(h, last, code);
  }
}

/* SETTINGS frames of the settings fault a connection may have unacknowledged. A peer that never acknowledged,
 * asking for the fault in a loop, would have them pile up; over the bound the connection ends as RFC 9113 6.5.3
 * lets it, with SETTINGS_TIMEOUT (a client that acknowledges never comes near it: it would need as many
 * settings faults in flight at once). */
#define FAULT_SETTINGS_UNACKED_MAX 1024

static int h2_settings(cb__req_t *r, int64_t max_frame, int64_t window) {
  h2c_t *h = r->conn->proto_state;
  if (h->settings_owed >= FAULT_SETTINGS_UNACKED_MAX) {
    end_session(h, h->max_sid > 0 ? h->max_sid : 0, NGHTTP2_SETTINGS_TIMEOUT);
    return UV_ENOBUFS;
  }
  uint16_t ids[2];
  uint32_t vals[2];
  size_t n = 0;
  if (max_frame >= 0) {
    ids[n] = NGHTTP2_SETTINGS_MAX_FRAME_SIZE;
    vals[n++] = (uint32_t)max_frame;
    h->pend_max_frame = max_frame;
  }
  if (window >= 0) {
    ids[n] = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    vals[n++] = (uint32_t)window;
    h->pend_window = window;
  }
  out_settings(h, ids, vals, n);
  h->no_park = 1;
  return 0;
}

/* The head and the pieces queued so far leave when flow control lets them: the cut waits for the frame that
 * carries the last of them (flush), so that a reset after `bytes` bytes comes after that many bytes whatever
 * the peer's windows. */
static void h2_cut(cb__req_t *r, uint32_t code, int how) {
  h2s_t *s = r->stream;
  s->cut = (uint8_t)how;
  s->cut_code = code;
  link_ready(s);
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
