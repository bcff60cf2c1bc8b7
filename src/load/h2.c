/* h2c with prior knowledge for cbench-load: an nghttp2 client session per connection, up to `depth` streams in
 * flight. nghttp2 frames into its own buffers; nghttp2_session_mem_send's output is copied into the
 * connection's output once per batch (one write for all the requests and WINDOW_UPDATEs of an event). The
 * windows are opened wide (1 GiB - 1 for the connection and each stream) so that flow control never paces the
 * server; nghttp2 returns the consumed window by itself. A stream reset by the server (RST_STREAM, or refused
 * after GOAWAY) is a protocol error for its request; a connection the server ends with GOAWAY is closed after
 * its last stream and opened again. Frames are taken from nghttp2 only while less than CBL_OUT_HIGH bytes wait
 * for the socket (the rest when a write completes): a server that sends PINGs or SETTINGS and never reads fills
 * nghttp2's queue instead, which fails the session past its limit of unanswered acknowledgements. */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

#define WINDOW ((1 << 30) - 1)

typedef struct {
  nghttp2_session *s;
  cbl_conn_t *c;
  bool unsolicited; /* the server sent an answer on a stream no request opened */
} h2_t;

static cbl_req_t *stream_req(nghttp2_session *s, int32_t id) { return nghttp2_session_get_stream_user_data(s, id); }

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud) {
  (void)flags;
  (void)ud;
  if (f->hd.type != NGHTTP2_HEADERS || namelen != 7 || memcmp(name, ":status", 7) != 0) return 0;
  cbl_req_t *r = stream_req(s, f->hd.stream_id);
  if (!r || valuelen != 3) return 0;
  int st = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
  /* A 1xx is followed by the real answer; keep the final one. */
  if (st >= 200 && st < CBL_MAX_STATUS) r->status = st;
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud) {
  (void)s;
  (void)flags;
  (void)id;
  (void)data;
  h2_t *h = ud;
  if (h->c->t->now >= h->c->t->run->t_measure) h->c->t->res.counts.body_bytes += len;
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud) {
  h2_t *h = ud;
  cbl_conn_t *c = h->c;
  cbl_req_t *r = stream_req(s, id);
  if (!r || !r->used) return 0;
  if (error_code == NGHTTP2_NO_ERROR && r->status >= 200) {
    cbl_req_done(c, r, r->status, c->t->now);
  } else {
    cbl_req_failed(c, r, CBL_ERR_PROTOCOL);
  }
  /* --new-conn: the connection's one stream is done, and so is the connection. */
  if (c->t->cfg->new_conn) cbl_conn_end(c);
  return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  (void)s;
  (void)id;
  h2_t *h = ud;
  cbl_req_t *r = src->ptr;
  const cbl_config_t *cfg = h->c->t->cfg;
  size_t n = cfg->body_len - r->body_off;
  if (n > len) n = len;
  memcpy(buf, cfg->body + r->body_off, n);
  r->body_off += n;
  if (r->body_off == cfg->body_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

/* nghttp2 ends the session when a server sends HEADERS or DATA on a stream this client did not open; it is
 * counted as what it is, an answer nobody asked for, rather than as the connection's end. */
static int on_invalid_frame(nghttp2_session *s, const nghttp2_frame *f, int lib_error, void *ud) {
  (void)lib_error;
  h2_t *h = ud;
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && !stream_req(s, f->hd.stream_id))
    h->unsolicited = true;
  return 0;
}

/* One callback table for every session of every thread, made once. */
static nghttp2_session_callbacks *shared_cbs;

static void init_callbacks(void) {
  nghttp2_session_callbacks_new(&shared_cbs);
  nghttp2_session_callbacks_set_on_header_callback(shared_cbs, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(shared_cbs, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(shared_cbs, on_stream_close);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(shared_cbs, on_invalid_frame);
}

static void *h2_create(cbl_conn_t *c) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_callbacks);
  if (!shared_cbs) return NULL;
  h2_t *h = calloc(1, sizeof *h);
  if (h) h->c = c;
  return h;
}

static void h2_reset(cbl_conn_t *c) {
  h2_t *h = c->p;
  if (h->s) nghttp2_session_del(h->s);
  h->s = NULL;
}

static void h2_destroy(void *p) {
  h2_t *h = p;
  if (h->s) nghttp2_session_del(h->s);
  free(h);
}

static int h2_open(cbl_conn_t *c) {
  h2_t *h = c->p;
  h->unsolicited = false;
  nghttp2_option *opt;
  if (nghttp2_option_new(&opt)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  /* Streams beyond the server's limit wait in nghttp2 instead of failing. */
  nghttp2_option_set_peer_max_concurrent_streams(opt, (uint32_t)c->t->cfg->depth);
  int rc = nghttp2_session_client_new2(&h->s, shared_cbs, h, opt);
  nghttp2_option_del(opt);
  if (rc) return CBL_FAIL(CBL_ERR_PROTOCOL);
  nghttp2_settings_entry iv[] = {
    {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW},
    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
  };
  if (nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) ||
      nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, WINDOW))
    return CBL_FAIL(CBL_ERR_PROTOCOL);
  return 0;
}

static bool h2_ready(cbl_conn_t *c) {
  h2_t *h = c->p;
  return h->s != NULL;
}

static int h2_send(cbl_conn_t *c, cbl_req_t *r) {
  h2_t *h = c->p;
  cbl_thread_t *t = c->t;
  uint32_t i = t->path_rr++ % (uint32_t)t->cfg->npaths;
  nghttp2_data_provider prd = {.source.ptr = r, .read_callback = read_body};
  int32_t id = nghttp2_submit_request(h->s, NULL, t->wire->h2_nva[i], t->wire->h2_nvlen,
                                      t->cfg->body ? &prd : NULL, r);
  /* Out of stream ids (2^31 / 2 requests on one connection): end it and start a fresh one. */
  if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) return CBL_FAIL(CBL_ERR_RESET);
  return id < 0 ? CBL_FAIL(CBL_ERR_PROTOCOL) : 0;
}

static int h2_flush(cbl_conn_t *c) {
  h2_t *h = c->p;
  if (!h->s) return 0;
  while (cbl_conn_unsent(c) < CBL_OUT_HIGH) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(h->s, &data);
    if (n < 0) return CBL_FAIL(CBL_ERR_PROTOCOL);
    if (n == 0) break;
    int rc = cbl_conn_write(c, data, (size_t)n);
    if (rc) return rc;
  }
  if (!nghttp2_session_want_read(h->s) && !nghttp2_session_want_write(h->s)) {
    /* GOAWAY handled and every stream closed: a clean end when nothing is left in flight. */
    if (c->inflight) return CBL_FAIL(CBL_ERR_RESET);
    cbl_conn_end(c);
  }
  return 0;
}

static int h2_read(cbl_conn_t *c, const char *p, size_t n) {
  h2_t *h = c->p;
  ssize_t rc = nghttp2_session_mem_recv(h->s, (const uint8_t *)p, n);
  if (h->unsolicited) return CBL_FAIL(CBL_ERR_UNSOLICITED);
  if (rc < 0) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return 0;
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
