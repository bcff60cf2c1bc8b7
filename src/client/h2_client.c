/* An h2c client session (prior knowledge, RFC 9113 3.3) for the engine's proxy kind: HTTP/2's framing written
 * here, header blocks decoded by nghttp2's HPACK decoder, behind a small bytes-in, bytes-out interface, with the
 * answer told per stream (head, body, trailers, end, or why it ended early) and the request body pulled from
 * its owner.
 *
 * Why not nghttp2's client session: it cost about 10,000 instructions per proxied request (its stream objects,
 * priority queues, frame queue, header validation callbacks and HPACK encoder), as much as the server session
 * that answers the client, which kept h2c-to-h2c proxying above twice the cost of answering directly (issue 26;
 * docs/proxy.md, "h2c upstreams"). A client needs a small part of the protocol: it opens every stream itself,
 * in order, and only reads answers.
 *
 * Choices that make a hostile peer cheap:
 * - The receive windows are the owner's: a stream's window (65,535 bytes) opens again only as the owner hands
 *   its body on (cb_ch2_consume). DATA beyond a window is a FLOW_CONTROL_ERROR that ends the connection.
 * - A frame is read in place when the read holds it whole, else gathered into one buffer of MAX_FRAME bytes
 *   (SETTINGS_MAX_FRAME_SIZE is left at its default). A header block is decoded fragment by fragment as it
 *   comes (at most MAX_CONTINUATIONS CONTINUATION frames), its fields gathered into the owner's buffer, bounded
 *   by max_head and max_headers; over either, the stream ends with CB_CH2_E_HEAD_TOO_BIG and the rest of the
 *   block is still decoded, without being kept, to keep HPACK's state.
 * - The answer's fields are checked as RFC 9113 8.2 and 8.3.2 ask (cb_h2_valid_name, cb_h2_valid_value, the pseudo-header
 *   rules, connection-specific fields, content-length against the DATA received): a malformed answer is a stream
 *   error (RST_STREAM PROTOCOL_ERROR, told as CB_CH2_E_BAD), a field with bytes its name or value may not hold
 *   included.
 * - Frames the peer queues answers with (PING, SETTINGS) are bounded: past OUT_LIMIT bytes waiting to be taken
 *   by cb_ch2_pull, the connection ends (ENHANCE_YOUR_CALM).
 *
 * Requests are encoded without the dynamic table (literal fields without indexing, after a table size update
 * to 0): the encoder keeps no state, so a request its owner cancels before it was
 * taken can be cut from the output, and encoding is a copy. Their bytes are what the upstream's decoder reads. */
#include <nghttp2/nghttp2.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

#define ASSUMED_MAX_STREAMS 100 /* the peer's limit until its SETTINGS say */
#define DEFAULT_WINDOW 65535
#define MAX_WINDOW 0x7fffffff
#define MAX_FRAME 16384           /* the frames we take: SETTINGS_MAX_FRAME_SIZE at its default */
#define MAX_CONTINUATIONS 8       /* CONTINUATION frames after one HEADERS */
#define OUT_LIMIT (1u << 20)      /* bytes waiting for cb_ch2_pull before the peer is told to calm down */
#define DATA_PER_PULL (64 * 1024) /* request body taken from owners per pull */
#define UNLIMITED_STREAMS 0xffffffffu

enum { T_DATA, T_HEADERS, T_PRIORITY, T_RST, T_SETTINGS, T_PUSH, T_PING, T_GOAWAY, T_WINDOW, T_CONTINUATION };
enum { F_END_STREAM = 0x1, F_ACK = 0x1, F_END_HEADERS = 0x4, F_PADDED = 0x8, F_PRIORITY = 0x20 };
enum {
  E_NO = 0x0,
  E_PROTOCOL = 0x1,
  E_INTERNAL = 0x2,
  E_FLOW = 0x3,
  E_FRAME_SIZE = 0x6,
  E_REFUSED = 0x7,
  E_CANCEL = 0x8,
  E_COMPRESSION = 0x9,
  E_CALM = 0xb
};

/* One open stream: submitted, and neither ended nor closed for its owner. A stream in the table is attached:
 * every way it ends for its owner takes it out. */
typedef struct st_s {
  int32_t id;
  void *sud;
  struct st_s *snext, *sprev; /* the sending list: a request body that may go */
  struct st_s *free_next;
  int64_t send_window;
  int64_t recv_window;    /* bytes the peer may still send on it */
  uint32_t unacked;       /* consumed and not yet given back by WINDOW_UPDATE */
  int64_t content_length; /* declared by the final head, -1 none */
  int64_t got;            /* DATA bytes received */
  uint32_t hseq;          /* its HEADERS' place among those submitted: still waiting while above pulled_seq */
  uint8_t local_closed;   /* END_STREAM sent (or queued) */
  uint8_t sending;        /* on the sending list */
  uint8_t final_head;     /* its final head came */
  uint8_t head_req;       /* a HEAD request: the answer has no body whatever it declares */
  uint8_t no_body;        /* a 204 or 304 */
} st_t;

/* A request's HEADERS still in the output: cut from it if the owner cancels before cb_ch2_pull took it. */
typedef struct {
  int32_t id;
  size_t off, len;
} seg_t;

typedef struct cb_ch2_k {
  nghttp2_mem *mem;      /* the caller's allocator: every block of the session comes from it */
  nghttp2_hd_inflater *inf;
  char *ob;              /* output: frames not yet taken, after the ob_handed bytes cb_ch2_pull gave last */
  size_t ob_len, ob_cap, ob_handed;
  seg_t *segs;           /* the HEADERS in ob not yet taken */
  int nsegs, seg_cap, dead_segs;
  st_t **tab;            /* open streams by id: open addressing, linear probing, tab_cap a power of two */
  uint32_t tab_cap, tab_n;
  st_t *free_st;
  st_t *send_head, *send_tail;
  int32_t next_id;
  uint32_t seq, pulled_seq;
  int64_t conn_send_window;
  int64_t conn_recv_window;
  uint32_t conn_local_window; /* the connection's receive window as set at the start */
  uint32_t conn_unacked;
  uint32_t peer_initial_window;
  uint32_t peer_max_frame;
  uint32_t peer_max_streams;
  uint8_t got_first_frame;
  uint8_t sent_goaway;
  /* input */
  uint8_t fh[9];
  size_t fh_len;
  char *fbuf;
  size_t fbuf_len, need;
  uint32_t flen;
  uint8_t ftype, fflags;
  int32_t fid;
  /* the header block being read */
  int32_t blk_id;       /* > 0 while CONTINUATION frames are due */
  uint8_t blk_end_stream;
  uint8_t blk_ignore;   /* decoded for HPACK's state only */
  uint8_t blk_trailers;
  uint8_t blk_regular;  /* a regular field came: no pseudo-header may follow */
  uint8_t blk_bad;      /* malformed */
  uint8_t blk_over;     /* over the owner's limits */
  int blk_conts;
  int64_t blk_cl;
} k_t;

/* ---- validity of the answer's fields (RFC 9110 5.1, 5.5; RFC 9113 8.2.1) ---- */

static int name_is(const uint8_t *p, size_t n, const char *s) { return n == strlen(s) && memcmp(p, s, n) == 0; }

/* ---- memory: the caller's (the layer calls no allocator itself) ---- */

static void *k_malloc(const k_t *k, size_t n) { return k->mem->malloc(n, k->mem->mem_user_data); }
static void *k_realloc(const k_t *k, void *p, size_t n) { return k->mem->realloc(p, n, k->mem->mem_user_data); }
static void k_free(const k_t *k, void *p) {
  if (p != NULL) k->mem->free(p, k->mem->mem_user_data);
}

/* ---- output ---- */

static int ob_reserve(k_t *k, size_t n) {
  if (k->ob_len + n <= k->ob_cap) return 0;
  size_t cap = k->ob_cap ? k->ob_cap : 4096;
  while (cap < k->ob_len + n) cap *= 2;
  char *p = k_realloc(k, k->ob, cap);
  if (p == NULL) return -1;
  k->ob = p;
  k->ob_cap = cap;
  return 0;
}

/* A control frame of up to 12 bytes of payload. */
static int out_frame(cb_ch2_t *c, uint8_t type, uint8_t flags, int32_t id, const void *payload, size_t len) {
  k_t *k = c->k;
  if (ob_reserve(k, 9 + len) != 0) return -1;
  cb_h2_put_fh(k->ob + k->ob_len, len, type, flags, id);
  if (len) memcpy(k->ob + k->ob_len + 9, payload, len);
  k->ob_len += 9 + len;
  return 0;
}

static void out_rst(cb_ch2_t *c, int32_t id, uint32_t code) {
  char p[4];
  cb_h2_put32(p, code);
  (void)out_frame(c, T_RST, 0, id, p, 4);
}

static void out_window(cb_ch2_t *c, int32_t id, uint32_t inc) {
  char p[4];
  cb_h2_put32(p, inc);
  (void)out_frame(c, T_WINDOW, 0, id, p, 4);
}

/* A connection error: GOAWAY with the code, and the session is done. */
static int conn_error(cb_ch2_t *c, uint32_t code) {
  k_t *k = c->k;
  if (!c->bad && !k->sent_goaway) {
    char p[8];
    cb_h2_put32(p, 0); /* no stream of the server's was processed: a client opens them all */
    cb_h2_put32(p + 4, code);
    k->sent_goaway = 1;
    (void)out_frame(c, T_GOAWAY, 0, 0, p, 8);
  }
  c->bad = 1;
  return CB_CH2_E_BAD;
}

/* ---- streams ---- */

static uint32_t slot_of(const k_t *k, int32_t id) { return ((uint32_t)id >> 1) & (k->tab_cap - 1); }

static st_t *find(const k_t *k, int32_t id) {
  if (id <= 0 || k->tab_n == 0) return NULL;
  for (uint32_t i = slot_of(k, id);; i = (i + 1) & (k->tab_cap - 1)) {
    st_t *s = k->tab[i];
    if (s == NULL) return NULL;
    if (s->id == id) return s;
  }
}

static int tab_insert(k_t *k, st_t *s) {
  if ((k->tab_n + 1) * 2 > k->tab_cap) {
    uint32_t cap = k->tab_cap ? k->tab_cap * 2 : 64;
    st_t **t = k_malloc(k, cap * sizeof *t);
    if (t == NULL) return -1;
    memset(t, 0, cap * sizeof *t);
    st_t **old = k->tab;
    uint32_t ocap = k->tab_cap;
    k->tab = t;
    k->tab_cap = cap;
    for (uint32_t i = 0; i < ocap; i++)
      if (old[i] != NULL) {
        uint32_t j = slot_of(k, old[i]->id);
        while (t[j] != NULL) j = (j + 1) & (cap - 1);
        t[j] = old[i];
      }
    k_free(k, old);
  }
  uint32_t j = slot_of(k, s->id);
  while (k->tab[j] != NULL) j = (j + 1) & (k->tab_cap - 1);
  k->tab[j] = s;
  k->tab_n++;
  return 0;
}

/* Takes s out of the table (backward-shift deletion: no tombstones). */
static void tab_remove(k_t *k, st_t *s) {
  uint32_t mask = k->tab_cap - 1, i = slot_of(k, s->id);
  while (k->tab[i] != s) i = (i + 1) & mask;
  k->tab[i] = NULL;
  for (uint32_t j = (i + 1) & mask; k->tab[j] != NULL; j = (j + 1) & mask) {
    uint32_t home = slot_of(k, k->tab[j]->id);
    /* k->tab[j] moves into the hole i when its home is not within (i, j] */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      k->tab[i] = k->tab[j];
      k->tab[j] = NULL;
      i = j;
    }
  }
  k->tab_n--;
}

static void send_unlink(k_t *k, st_t *s) {
  if (!s->sending) return;
  if (s->sprev) s->sprev->snext = s->snext; else k->send_head = s->snext;
  if (s->snext) s->snext->sprev = s->sprev; else k->send_tail = s->sprev;
  s->snext = s->sprev = NULL;
  s->sending = 0;
}

static void send_link(k_t *k, st_t *s) {
  if (s->sending || s->local_closed) return;
  s->sending = 1;
  s->snext = NULL;
  s->sprev = k->send_tail;
  if (k->send_tail) k->send_tail->snext = s; else k->send_head = s;
  k->send_tail = s;
}

/* The stream is over for the session and its owner (told already, or about to be by the caller). */
static void close_stream(cb_ch2_t *c, st_t *s) {
  k_t *k = c->k;
  send_unlink(k, s);
  tab_remove(k, s);
  s->sud = NULL;
  s->free_next = k->free_st;
  k->free_st = s;
  c->nstreams--;
}

static void tell_close(cb_ch2_t *c, st_t *s, int err) {
  void *sud = s->sud;
  close_stream(c, s);
  if (c->cb->on_close) c->cb->on_close(sud, err);
}

/* A stream error: RST_STREAM with the code, the owner told err. */
static void stream_error(cb_ch2_t *c, st_t *s, uint32_t code, int err) {
  out_rst(c, s->id, code);
  tell_close(c, s, err);
}

/* The answer is complete: a request still being sent is not wanted any more (RST_STREAM NO_ERROR). */
static void ended(cb_ch2_t *c, st_t *s) {
  if (!s->local_closed) out_rst(c, s->id, E_NO);
  void *sud = s->sud;
  close_stream(c, s);
  if (c->cb->on_end) c->cb->on_end(sud);
}

/* Answers the peer asks for (PING and SETTINGS acknowledgements) while more than OUT_LIMIT bytes wait to be
 * taken: a peer that sends them faster than it reads. */
static int flooded(const k_t *k) { return k->ob_len - k->ob_handed > OUT_LIMIT; }

/* An id the peer names but the session never opened: not ours (even), or not yet used. */
static int idle_id(const k_t *k, int32_t id) { return (id & 1) == 0 || id >= k->next_id; }

/* ---- windows ---- */

static void give_back_conn(cb_ch2_t *c, size_t n) {
  k_t *k = c->k;
  if (n == 0) return;
  k->conn_unacked += (uint32_t)n;
  if (k->conn_unacked >= k->conn_local_window / 2) {
    out_window(c, 0, k->conn_unacked);
    k->conn_recv_window += k->conn_unacked;
    k->conn_unacked = 0;
  }
}

static void give_back_stream(cb_ch2_t *c, st_t *s, size_t n) {
  if (n == 0) return;
  s->unacked += (uint32_t)n;
  if (s->unacked >= DEFAULT_WINDOW / 2) {
    out_window(c, s->id, s->unacked);
    s->recv_window += s->unacked;
    s->unacked = 0;
  }
}

/* ---- header blocks ---- */

static void blk_field(cb_ch2_t *c, k_t *k, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
  if (k->blk_ignore || k->blk_bad) return;
  if (nl > 0 && name[0] == ':') {
    if (k->blk_trailers || k->blk_regular || !name_is(name, nl, ":status") || c->status >= 0 || vl != 3 ||
        value[0] < '0' || value[0] > '9' || value[1] < '0' || value[1] > '9' || value[2] < '0' || value[2] > '9') {
      k->blk_bad = 1;
      return;
    }
    c->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    return;
  }
  k->blk_regular = 1;
  if (!cb_h2_valid_name(name, nl) || !cb_h2_valid_value(value, vl) || cb_h2_conn_specific(name, nl, value, vl)) {
    k->blk_bad = 1;
    return;
  }
  if (name_is(name, nl, "content-length")) {
    int64_t v = cb_h2_parse_length(value, vl);
    if (v < 0 || k->blk_cl >= 0 || (c->status == 204 && v != 0)) {
      k->blk_bad = 1;
      return;
    }
    k->blk_cl = v;
    if (c->status == 204) return; /* a 204 may not carry one (RFC 9110 8.6); "0", which servers send, is dropped */
  }
  if (k->blk_over) return;
  if (c->nfields >= c->max_fields || c->text_len + nl + vl > c->text_cap || c->text_len + nl + vl > c->lim.max_head) {
    k->blk_over = 1;
    return;
  }
  char *t = c->text + c->text_len;
  memcpy(t, name, nl);
  memcpy(t + nl, value, vl);
  c->fields[c->nfields++] = (cb_chdr_t){t, nl, t + nl, vl};
  c->text_len += nl + vl;
}

/* Decodes a fragment of the block (last: its END_HEADERS). -1: HPACK broken (a connection error). */
static int blk_decode(cb_ch2_t *c, k_t *k, const uint8_t *in, size_t len, int last) {
  for (;;) {
    nghttp2_nv nv;
    int fl = 0;
    ssize_t r = nghttp2_hd_inflate_hd2(k->inf, &nv, &fl, in, len, last);
    if (r < 0) return -1;
    in += r;
    len -= (size_t)r;
    if (fl & NGHTTP2_HD_INFLATE_EMIT) blk_field(c, k, nv.name, nv.namelen, nv.value, nv.valuelen);
    if (fl & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(k->inf);
      return 0;
    }
    if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && len == 0) return 0;
  }
}

/* The block is whole: what it means for its stream. */
static void blk_done(cb_ch2_t *c, k_t *k) {
  int32_t id = k->blk_id;
  k->blk_id = 0;
  if (k->blk_ignore) return;
  st_t *s = find(k, id);
  if (s == NULL) return;
  if (k->blk_bad) {
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return;
  }
  if (k->blk_over) {
    stream_error(c, s, E_INTERNAL, CB_CH2_E_HEAD_TOO_BIG);
    return;
  }
  void *sud = s->sud;
  if (k->blk_trailers) {
    if (!k->blk_end_stream) { /* trailers end the stream */
      stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
      return;
    }
    if (s->content_length >= 0 && s->got != s->content_length && !s->head_req && !s->no_body) {
      stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
      return;
    }
    if (c->cb->on_trailers && c->cb->on_trailers(sud, c->fields, c->nfields) != 0) {
      if ((s = find(k, id)) != NULL) {
        out_rst(c, id, E_CANCEL);
        close_stream(c, s);
      }
      return;
    }
    if ((s = find(k, id)) != NULL && s->sud == sud) ended(c, s);
    return;
  }
  int status = c->status;
  if (status < 0) { /* no :status */
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return;
  }
  if (status >= 100 && status < 200 && status != 101) { /* interim: the final follows */
    if (k->blk_end_stream) stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return;
  }
  if (status < 200) { /* a 101 (an upgrade has no place in HTTP/2), or three digits below 100 */
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return;
  }
  s->final_head = 1;
  s->no_body = status == 204 || status == 304;
  if (status == 204 && k->blk_cl > 0) {
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return;
  }
  s->content_length = s->head_req || s->no_body ? 0 : k->blk_cl;
  if (k->blk_end_stream && s->content_length > 0) {
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return;
  }
  if (c->cb->on_head && c->cb->on_head(sud, status, c->fields, c->nfields) != 0) {
    if ((s = find(k, id)) != NULL) {
      out_rst(c, id, E_CANCEL);
      close_stream(c, s);
    }
    return;
  }
  /* The owner may have let go of the stream inside its callback (cb_ch2_cancel). */
  if (k->blk_end_stream && (s = find(k, id)) != NULL && s->sud == sud) ended(c, s);
}

/* HEADERS or CONTINUATION: a fragment of the block. */
static int on_fragment(cb_ch2_t *c, k_t *k, const uint8_t *p, size_t n, int end_headers) {
  if (blk_decode(c, k, p, n, end_headers) != 0) return conn_error(c, E_COMPRESSION);
  if (end_headers) blk_done(c, k);
  return 0;
}

static int on_headers(cb_ch2_t *c, k_t *k, const uint8_t *p, size_t n) {
  int32_t id = k->fid;
  if (id == 0 || idle_id(k, id)) return conn_error(c, E_PROTOCOL);
  size_t pad = 0;
  if (k->fflags & F_PADDED) {
    if (n < 1) return conn_error(c, E_PROTOCOL);
    pad = p[0];
    p++;
    n--;
  }
  if (k->fflags & F_PRIORITY) {
    if (n < 5 || (int32_t)(cb_h2_get32(p) & MAX_WINDOW) == id) return conn_error(c, E_PROTOCOL); /* on itself */
    p += 5;
    n -= 5;
  }
  if (pad > n) return conn_error(c, E_PROTOCOL);
  n -= pad;
  st_t *s = find(k, id);
  k->blk_id = id;
  k->blk_conts = 0;
  k->blk_end_stream = (k->fflags & F_END_STREAM) != 0;
  k->blk_ignore = s == NULL; /* a stream over already: decoded for HPACK only */
  k->blk_trailers = s != NULL && s->final_head;
  k->blk_regular = 0;
  k->blk_bad = 0;
  k->blk_over = 0;
  k->blk_cl = -1;
  c->nfields = 0;
  c->text_len = 0;
  c->status = -1;
  return on_fragment(c, k, p, n, (k->fflags & F_END_HEADERS) != 0);
}

static int on_data(cb_ch2_t *c, k_t *k, const uint8_t *p, size_t n) {
  int32_t id = k->fid;
  if (id == 0) return conn_error(c, E_PROTOCOL);
  size_t total = n, pad = 0;
  if (k->fflags & F_PADDED) {
    if (n < 1 || p[0] >= n) return conn_error(c, E_PROTOCOL);
    pad = p[0];
    p++;
    n -= 1 + pad;
  }
  if ((int64_t)total > k->conn_recv_window) return conn_error(c, E_FLOW);
  st_t *s = find(k, id);
  if (s == NULL) {
    if (idle_id(k, id)) return conn_error(c, E_PROTOCOL);
    k->conn_recv_window -= (int64_t)total;
    give_back_conn(c, total); /* a stream over already: its bytes go back at once */
    return 0;
  }
  if ((int64_t)total > s->recv_window) { /* past the stream's window: the peer ignores flow control */
    stream_error(c, s, E_FLOW, CB_CH2_E_BAD);
    return conn_error(c, E_FLOW);
  }
  k->conn_recv_window -= (int64_t)total;
  s->recv_window -= (int64_t)total;
  give_back_conn(c, total - n); /* the padding */
  give_back_stream(c, s, total - n);
  if (!s->final_head || (s->content_length >= 0 && s->got + (int64_t)n > s->content_length)) {
    give_back_conn(c, n);
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return 0;
  }
  s->got += (int64_t)n;
  int end = (k->fflags & F_END_STREAM) != 0;
  if (end && s->content_length >= 0 && s->got != s->content_length) {
    give_back_conn(c, n);
    stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
    return 0;
  }
  void *sud = s->sud;
  if (n > 0 && c->cb->on_data && c->cb->on_data(sud, (const char *)p, n) != 0) {
    give_back_conn(c, n);
    if ((s = find(k, id)) != NULL) {
      out_rst(c, id, E_CANCEL);
      close_stream(c, s);
    }
    return 0;
  }
  if (end && (s = find(k, id)) != NULL && s->sud == sud) ended(c, s);
  return 0;
}

static int on_settings(cb_ch2_t *c, k_t *k, const uint8_t *p, size_t n) {
  if (k->fid != 0) return conn_error(c, E_PROTOCOL);
  if (k->fflags & F_ACK) return n != 0 ? conn_error(c, E_FRAME_SIZE) : 0;
  if (n % 6 != 0) return conn_error(c, E_FRAME_SIZE);
  for (size_t i = 0; i < n; i += 6) {
    uint16_t what = (uint16_t)(p[i] << 8 | p[i + 1]);
    uint32_t v = cb_h2_get32(p + i + 2);
    switch (what) {
      case NGHTTP2_SETTINGS_ENABLE_PUSH: /* a server may not set it to 1 (RFC 9113 6.5.2) */
        if (v != 0) return conn_error(c, E_PROTOCOL);
        break;
      case NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS:
        k->peer_max_streams = v;
        break;
      case NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE: {
        if (v > MAX_WINDOW) return conn_error(c, E_FLOW);
        int64_t delta = (int64_t)v - (int64_t)k->peer_initial_window;
        k->peer_initial_window = v;
        for (uint32_t j = 0; j < k->tab_cap && delta != 0; j++) {
          st_t *s = k->tab[j];
          if (s == NULL) continue;
          s->send_window += delta;
          if (s->send_window > MAX_WINDOW) return conn_error(c, E_FLOW);
        }
        break;
      }
      case NGHTTP2_SETTINGS_MAX_FRAME_SIZE:
        if (v < 16384 || v > 16777215) return conn_error(c, E_PROTOCOL);
        k->peer_max_frame = v;
        break;
      case NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL:
      case NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES:
        if (v > 1) return conn_error(c, E_PROTOCOL);
        break;
      default: /* HEADER_TABLE_SIZE (the encoder keeps no table), MAX_HEADER_LIST_SIZE, unknown: nothing to do */
        break;
    }
  }
  c->settings = 1;
  if (flooded(k) || out_frame(c, T_SETTINGS, F_ACK, 0, NULL, 0) != 0) return conn_error(c, E_CALM);
  return 0;
}

static int on_frame(cb_ch2_t *c, k_t *k, const uint8_t *p, size_t n) {
  if (k->blk_id != 0) { /* CONTINUATION frames of the block, and nothing else */
    if (k->ftype != T_CONTINUATION || k->fid != k->blk_id) return conn_error(c, E_PROTOCOL);
    if (++k->blk_conts > MAX_CONTINUATIONS) return conn_error(c, E_CALM);
    return on_fragment(c, k, p, n, (k->fflags & F_END_HEADERS) != 0);
  }
  if (!k->got_first_frame) { /* the server's preface is a SETTINGS frame */
    if (k->ftype != T_SETTINGS || (k->fflags & F_ACK)) return conn_error(c, E_PROTOCOL);
    k->got_first_frame = 1;
  }
  switch (k->ftype) {
    case T_DATA: return on_data(c, k, p, n);
    case T_HEADERS: return on_headers(c, k, p, n);
    case T_PRIORITY: /* RFC 7540's priorities are not used: checked, then ignored */
      if (k->fid == 0) return conn_error(c, E_PROTOCOL);
      if (n != 5) return conn_error(c, E_FRAME_SIZE);
      if ((int32_t)(cb_h2_get32(p) & MAX_WINDOW) == k->fid) return conn_error(c, E_PROTOCOL); /* on itself */
      return 0;
    case T_RST: {
      if (k->fid == 0) return conn_error(c, E_PROTOCOL);
      if (n != 4) return conn_error(c, E_FRAME_SIZE);
      st_t *s = find(k, k->fid);
      if (s == NULL) return idle_id(k, k->fid) ? conn_error(c, E_PROTOCOL) : 0;
      tell_close(c, s, cb_h2_get32(p) == E_REFUSED ? CB_CH2_E_REFUSED : CB_CH2_E_RESET);
      return 0;
    }
    case T_SETTINGS: return on_settings(c, k, p, n);
    case T_PUSH: return conn_error(c, E_PROTOCOL); /* push is off (SETTINGS_ENABLE_PUSH 0) */
    case T_PING:
      if (k->fid != 0) return conn_error(c, E_PROTOCOL);
      if (n != 8) return conn_error(c, E_FRAME_SIZE);
      if (!(k->fflags & F_ACK) && (flooded(k) || out_frame(c, T_PING, F_ACK, 0, p, 8) != 0))
        return conn_error(c, E_CALM);
      return 0;
    case T_GOAWAY: {
      if (k->fid != 0) return conn_error(c, E_PROTOCOL);
      if (n < 8) return conn_error(c, E_FRAME_SIZE);
      int32_t last = (int32_t)(cb_h2_get32(p) & MAX_WINDOW);
      c->goaway = 1;
      /* The streams above last were not processed: refused, each told (the table changes as they go). */
      for (;;) {
        st_t *s = NULL;
        for (uint32_t j = 0; j < k->tab_cap && s == NULL; j++)
          if (k->tab[j] != NULL && k->tab[j]->id > last) s = k->tab[j];
        if (s == NULL) break;
        tell_close(c, s, CB_CH2_E_REFUSED);
      }
      return 0;
    }
    case T_WINDOW: {
      if (n != 4) return conn_error(c, E_FRAME_SIZE);
      uint32_t inc = cb_h2_get32(p) & MAX_WINDOW;
      if (k->fid == 0) {
        if (inc == 0) return conn_error(c, E_PROTOCOL);
        k->conn_send_window += inc;
        if (k->conn_send_window > MAX_WINDOW) return conn_error(c, E_FLOW);
        return 0;
      }
      st_t *s = find(k, k->fid);
      if (s == NULL) return idle_id(k, k->fid) ? conn_error(c, E_PROTOCOL) : 0;
      if (inc == 0) {
        stream_error(c, s, E_PROTOCOL, CB_CH2_E_BAD);
        return 0;
      }
      s->send_window += inc;
      if (s->send_window > MAX_WINDOW) stream_error(c, s, E_FLOW, CB_CH2_E_BAD);
      return 0;
    }
    case T_CONTINUATION: return conn_error(c, E_PROTOCOL); /* no block is open */
    default: return 0;                                    /* an extension's frame: ignored (RFC 9113 5.5) */
  }
}

int cb_ch2_feed(cb_ch2_t *c, const char *in, size_t n) {
  if (c->bad) return CB_CH2_E_BAD;
  k_t *k = c->k;
  const uint8_t *p = (const uint8_t *)in;
  while (n > 0) {
    if (k->fh_len < 9) {
      size_t take = 9 - k->fh_len < n ? 9 - k->fh_len : n;
      memcpy(k->fh + k->fh_len, p, take);
      k->fh_len += take;
      p += take;
      n -= take;
      if (k->fh_len < 9) break;
      k->flen = (uint32_t)k->fh[0] << 16 | (uint32_t)k->fh[1] << 8 | k->fh[2];
      k->ftype = k->fh[3];
      k->fflags = k->fh[4];
      k->fid = (int32_t)(cb_h2_get32(k->fh + 5) & MAX_WINDOW);
      if (k->flen > MAX_FRAME) return conn_error(c, E_FRAME_SIZE);
      k->need = k->flen;
      k->fbuf_len = 0;
      if (k->need > 0) continue;
      k->fh_len = 0;
      int rv = on_frame(c, k, k->fh, 0); /* an empty payload: a pointer all the same */
      if (rv != 0 || c->bad) return CB_CH2_E_BAD;
      continue;
    }
    const uint8_t *payload;
    if (k->fbuf_len == 0 && n >= k->need) { /* the frame is whole in this read: read in place */
      payload = p;
      p += k->need;
      n -= k->need;
    } else {
      if (k->fbuf == NULL && (k->fbuf = k_malloc(k, MAX_FRAME)) == NULL) {
        c->bad = 1;
        return CB_CH2_E_NOMEM;
      }
      size_t take = k->need - k->fbuf_len < n ? k->need - k->fbuf_len : n;
      memcpy(k->fbuf + k->fbuf_len, p, take);
      k->fbuf_len += take;
      p += take;
      n -= take;
      if (k->fbuf_len < k->need) break;
      payload = (const uint8_t *)k->fbuf;
    }
    size_t len = k->need;
    k->fh_len = 0;
    k->fbuf_len = 0;
    int rv = on_frame(c, k, payload, len);
    if (rv != 0 || c->bad) return CB_CH2_E_BAD;
  }
  return 0;
}

/* ---- requests ---- */

/* HPACK integer with an N-bit prefix (RFC 7541 5.1), first byte's high bits in `high`. */
int32_t cb_ch2_submit(cb_ch2_t *c, const cb_ch2_req_t *q, void *sud) {
  k_t *k = c->k;
  /* After a GOAWAY either way no stream may open: the peer's would refuse it at once, and an owner that
   * submitted again from the refusal's on_close would never stop. */
  if (q->nheaders < 0 || q->nheaders > CB_CH2_MAX_REQ_FIELDS || c->bad || c->goaway || k->sent_goaway ||
      k->next_id > MAX_WINDOW - 2)
    return CB_CH2_E_NOMEM;
  size_t bound = 1 + 3 * 16 + q->method_len + q->path_len + q->authority_len;
  for (int i = 0; i < q->nheaders; i++) bound += 16 + q->headers[i].name_len + q->headers[i].value_len;
  size_t maxf = k->peer_max_frame;
  size_t frames_max = bound / maxf + 1;
  if (ob_reserve(k, 9 * frames_max + bound) != 0) return CB_CH2_E_NOMEM;
  if (k->nsegs == k->seg_cap) {
    int cap = k->seg_cap ? k->seg_cap * 2 : 16;
    seg_t *sg = k_realloc(k, k->segs, (size_t)cap * sizeof *sg);
    if (sg == NULL) return CB_CH2_E_NOMEM;
    k->segs = sg;
    k->seg_cap = cap;
  }
  st_t *s = k->free_st;
  if (s != NULL) k->free_st = s->free_next;
  else if ((s = k_malloc(k, sizeof *s)) == NULL) return CB_CH2_E_NOMEM;
  memset(s, 0, sizeof *s);
  s->id = k->next_id;
  if (tab_insert(k, s) != 0) {
    s->free_next = k->free_st;
    k->free_st = s;
    return CB_CH2_E_NOMEM;
  }
  k->next_id += 2;
  s->sud = sud;
  s->send_window = k->peer_initial_window;
  s->recv_window = DEFAULT_WINDOW;
  s->content_length = -1;
  s->head_req = q->method_len == 4 && memcmp(q->method, "HEAD", 4) == 0;
  s->local_closed = !q->has_body;
  s->hseq = ++k->seq;
  c->nstreams++;

  /* The block, after room for one frame header (moved apart below when it needs CONTINUATION frames). */
  size_t start = k->ob_len;
  char *b0 = k->ob + start + 9, *o = b0;
  /* A dynamic table size update to 0 opens every block: the encoder keeps no table, and a peer that lowers
   * SETTINGS_HEADER_TABLE_SIZE waits for an update in the next block (RFC 7541 4.2), which may be any block,
   * as one cancelled before it was taken is cut. */
  *o++ = 0x20;
  if (q->method_len == 3 && memcmp(q->method, "GET", 3) == 0) *o++ = (char)0x82;
  else if (q->method_len == 4 && memcmp(q->method, "POST", 4) == 0) *o++ = (char)0x83;
  else o = cb_hp_field(o, 2, NULL, 0, q->method, q->method_len);
  *o++ = (char)(q->https ? 0x87 : 0x86);
  o = cb_hp_field(o, 1, NULL, 0, q->authority, q->authority_len);
  if (q->path_len == 1 && q->path[0] == '/') *o++ = (char)0x84;
  else o = cb_hp_field(o, 4, NULL, 0, q->path, q->path_len);
  for (int i = 0; i < q->nheaders; i++)
    o = cb_hp_field(o, 0, q->headers[i].name, q->headers[i].name_len, q->headers[i].value, q->headers[i].value_len);
  size_t blen = (size_t)(o - b0);
  uint8_t end_stream = q->has_body ? 0 : F_END_STREAM;
  if (blen <= maxf) {
    cb_h2_put_fh(k->ob + start, blen, T_HEADERS, (uint8_t)(F_END_HEADERS | end_stream), s->id);
    k->ob_len = start + 9 + blen;
  } else { /* HEADERS then CONTINUATION frames: the block's pieces moved apart, from the last */
    size_t nfr = (blen + maxf - 1) / maxf;
    for (size_t f = nfr; f-- > 0;) {
      size_t off = f * maxf, len = blen - off < maxf ? blen - off : maxf;
      char *dst = k->ob + start + f * (9 + maxf);
      memmove(dst + 9, b0 + off, len);
      uint8_t flags = (uint8_t)(f == nfr - 1 ? F_END_HEADERS : 0);
      if (f == 0) cb_h2_put_fh(dst, len, T_HEADERS, (uint8_t)(flags | end_stream), s->id);
      else cb_h2_put_fh(dst, len, T_CONTINUATION, flags, s->id);
    }
    k->ob_len = start + blen + 9 * nfr;
  }
  k->segs[k->nsegs++] = (seg_t){s->id, start, k->ob_len - start};
  if (q->has_body) send_link(k, s);
  return s->id;
}

/* Request body into DATA frames while the windows allow, at most DATA_PER_PULL bytes, the streams taken in
 * turn: each from the head of the sending list, back at its tail while it has more. */
static void take_bodies(cb_ch2_t *c, k_t *k) {
  size_t taken = 0;
  int turns = 0;
  for (st_t *s = k->send_head; s != NULL; s = s->snext) turns++;
  while (turns-- > 0 && k->send_head != NULL && taken < DATA_PER_PULL && k->conn_send_window > 0) {
    st_t *s = k->send_head;
    int32_t id = s->id;
    int more = 1;
    send_unlink(k, s);
    while (s->send_window > 0 && k->conn_send_window > 0 && taken < DATA_PER_PULL) {
      size_t cap = MAX_FRAME; /* the peer may take bigger frames; 16 KiB ones waste nothing */
      if ((int64_t)cap > s->send_window) cap = (size_t)s->send_window;
      if ((int64_t)cap > k->conn_send_window) cap = (size_t)k->conn_send_window;
      if (ob_reserve(k, 9 + cap) != 0) return;
      int eof = 0;
      ssize_t r = c->cb->read_body(s->sud, k->ob + k->ob_len + 9, cap, &eof);
      if (find(k, id) != s) return; /* the owner let go of it inside */
      if (r < 0 || (size_t)r > cap) {
        stream_error(c, s, E_INTERNAL, CB_CH2_E_BAD);
        more = 0;
        break;
      }
      if (r == 0 && !eof) { /* nothing now: cb_ch2_resume puts it back */
        more = 0;
        break;
      }
      cb_h2_put_fh(k->ob + k->ob_len, (size_t)r, T_DATA, (uint8_t)(eof ? F_END_STREAM : 0), id);
      k->ob_len += 9 + (size_t)r;
      s->send_window -= r;
      k->conn_send_window -= r;
      taken += (size_t)r;
      if (eof) {
        s->local_closed = 1;
        more = 0;
        break;
      }
    }
    if (more) send_link(k, s);
  }
}

/* Cuts the HEADERS of requests cancelled before they were taken. */
static void cut_dead(k_t *k) {
  size_t w = k->ob_handed, r = k->ob_handed;
  for (int i = 0; i < k->nsegs; i++) {
    if (k->segs[i].id != 0) continue;
    size_t off = k->segs[i].off;
    memmove(k->ob + w, k->ob + r, off - r);
    w += off - r;
    r = off + k->segs[i].len;
  }
  memmove(k->ob + w, k->ob + r, k->ob_len - r);
  k->ob_len = w + (k->ob_len - r);
  k->dead_segs = 0;
}

ssize_t cb_ch2_pull(cb_ch2_t *c, const char **out) {
  k_t *k = c->k;
  if (k->ob_handed > 0) { /* what the last call gave is written */
    memmove(k->ob, k->ob + k->ob_handed, k->ob_len - k->ob_handed);
    k->ob_len -= k->ob_handed;
    for (int i = 0; i < k->nsegs; i++) k->segs[i].off -= k->ob_handed;
    k->ob_handed = 0;
  }
  if (k->dead_segs > 0) cut_dead(k);
  if (!c->bad && k->send_head != NULL) take_bodies(c, k);
  k->nsegs = 0;
  k->pulled_seq = k->seq;
  if (k->ob_len == 0) return 0;
  k->ob_handed = k->ob_len;
  *out = k->ob;
  return (ssize_t)k->ob_len;
}

/* ---- the rest of the interface ---- */

int cb_ch2_init(cb_ch2_t *c, const cb_ch2_callbacks_t *cb, void *ud, const cb_ch2_limits_t *lim, char *headbuf,
                size_t headcap, void *mem) {
  memset(c, 0, sizeof *c);
  c->cb = cb;
  c->ud = ud;
  c->lim = *lim;
  c->assumed = ASSUMED_MAX_STREAMS;
  if (c->lim.max_head == 0) c->lim.max_head = CB_CRES_MAX_HEAD_DEFAULT;
  if (c->lim.max_headers <= 0) c->lim.max_headers = CB_CRES_MAX_HEADERS_DEFAULT;
  size_t pad = (alignof(cb_chdr_t) - (uintptr_t)headbuf % alignof(cb_chdr_t)) % alignof(cb_chdr_t);
  size_t room = headcap > pad ? headcap - pad : 0;
  size_t nf = (size_t)c->lim.max_headers;
  if (room < nf * sizeof(cb_chdr_t) + c->lim.max_head) nf = room / 2 / sizeof(cb_chdr_t);
  c->fields = (cb_chdr_t *)(void *)(headbuf + pad);
  c->max_fields = (int)nf;
  c->text = headbuf + pad + nf * sizeof(cb_chdr_t);
  c->text_cap = room - nf * sizeof(cb_chdr_t);

  nghttp2_mem *m = mem;
  k_t *k = m != NULL ? m->malloc(sizeof *k, m->mem_user_data) : NULL;
  if (k == NULL) return CB_CH2_E_NOMEM;
  memset(k, 0, sizeof *k);
  k->mem = m;
  c->k = k;
  if (nghttp2_hd_inflate_new2(&k->inf, mem) != 0) {
    cb_ch2_free(c);
    return CB_CH2_E_NOMEM;
  }
  k->next_id = 1;
  k->conn_send_window = DEFAULT_WINDOW;
  k->conn_local_window = c->lim.conn_window > DEFAULT_WINDOW ? c->lim.conn_window : DEFAULT_WINDOW;
  k->conn_recv_window = k->conn_local_window;
  k->peer_initial_window = DEFAULT_WINDOW;
  k->peer_max_frame = MAX_FRAME;
  k->peer_max_streams = UNLIMITED_STREAMS; /* until its SETTINGS name a limit (c->assumed counts before) */
  /* The preface, SETTINGS (no push; the largest header list taken), the connection's window opened. */
  if (ob_reserve(k, 24 + 9 + 12 + 13) != 0) {
    cb_ch2_free(c);
    return CB_CH2_E_NOMEM;
  }
  memcpy(k->ob, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
  k->ob_len = 24;
  char set[12] = {0, NGHTTP2_SETTINGS_ENABLE_PUSH, 0, 0, 0, 0, 0, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE};
  cb_h2_put32(set + 8, (uint32_t)c->lim.max_head);
  (void)out_frame(c, T_SETTINGS, 0, 0, set, 12);
  if (k->conn_local_window > DEFAULT_WINDOW) out_window(c, 0, k->conn_local_window - DEFAULT_WINDOW);
  return 0;
}

void cb_ch2_free(cb_ch2_t *c) {
  k_t *k = c->k;
  if (k == NULL) return;
  if (k->inf) nghttp2_hd_inflate_del(k->inf);
  for (uint32_t i = 0; i < k->tab_cap; i++) k_free(k, k->tab[i]);
  while (k->free_st != NULL) {
    st_t *s = k->free_st;
    k->free_st = s->free_next;
    k_free(k, s);
  }
  k_free(k, k->tab);
  k_free(k, k->segs);
  k_free(k, k->ob);
  k_free(k, k->fbuf);
  k_free(k, k);
  c->k = NULL;
}

int cb_ch2_can_submit(const cb_ch2_t *c) {
  if (c->bad || c->goaway || c->k == NULL || c->k->sent_goaway || c->k->next_id > MAX_WINDOW - 2) return 0;
  uint32_t max = c->settings ? cb_ch2_max_streams(c) : c->assumed;
  return (uint32_t)c->nstreams < max;
}

uint32_t cb_ch2_max_streams(const cb_ch2_t *c) {
  if (!c->settings || c->k == NULL) return 0;
  return c->k->peer_max_streams;
}

void cb_ch2_assume_max_streams(cb_ch2_t *c, uint32_t n) {
  if (n >= 1 && n <= ASSUMED_MAX_STREAMS) c->assumed = n;
}

void cb_ch2_resume(cb_ch2_t *c, int32_t id) {
  st_t *s = find(c->k, id);
  if (s != NULL) send_link(c->k, s);
}

void cb_ch2_consume(cb_ch2_t *c, int32_t id, size_t n) {
  if (n == 0 || c->bad) return;
  give_back_conn(c, n);
  st_t *s = id > 0 ? find(c->k, id) : NULL;
  if (s != NULL) give_back_stream(c, s, n);
}

void cb_ch2_cancel(cb_ch2_t *c, int32_t id) {
  if (c->k == NULL || id <= 0) return;
  k_t *k = c->k;
  st_t *s = find(k, id);
  if (s == NULL) return;
  if (s->hseq > k->pulled_seq) { /* its HEADERS were not taken: cut, as if it never was */
    for (int i = 0; i < k->nsegs; i++)
      if (k->segs[i].id == id) {
        k->segs[i].id = 0;
        k->dead_segs++;
      }
  } else {
    out_rst(c, id, E_CANCEL);
  }
  close_stream(c, s);
}

int cb_ch2_done(const cb_ch2_t *c) {
  if (c->bad || c->k == NULL || c->k->sent_goaway) return 1;
  return c->goaway && c->nstreams == 0;
}

int cb_ch2_waiting(const cb_ch2_t *c, int32_t id) {
  if (c->k == NULL) return 0;
  st_t *s = find(c->k, id);
  return s != NULL && s->hseq > c->k->pulled_seq;
}

const char *cb_ch2_strerror(int e) {
  switch (e) {
    case CB_CH2_E_BAD: return "bad response";
    case CB_CH2_E_RESET: return "stream reset";
    case CB_CH2_E_REFUSED: return "stream refused";
    case CB_CH2_E_HEAD_TOO_BIG: return "response head too big";
    case CB_CH2_E_NOMEM: return "out of memory";
    default: return "response error";
  }
}
