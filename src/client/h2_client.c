/* An h2c client session (prior knowledge, RFC 9113 3.3) for the engine's proxy kind: nghttp2's client session
 * behind a small bytes-in, bytes-out interface, with the answer told per stream (head, body, trailers, end, or
 * why it ended early) and the request body pulled from its owner.
 *
 * Three choices make a hostile peer cheap:
 * - The receive windows are the owner's: NGHTTP2_OPT_NO_AUTO_WINDOW_UPDATE, so a stream's window (65,535 bytes)
 *   opens again only as the owner hands its body on (cb_ch2_consume). A peer cannot make the owner hold more
 *   than a window per stream; DATA beyond it is nghttp2's FLOW_CONTROL_ERROR, a connection error.
 * - A header block is gathered into the owner's buffer, bounded by max_head and max_headers; over either, the
 *   stream ends with CB_CH2_E_HEAD_TOO_BIG (nghttp2 still decodes the rest of the block, to keep HPACK's state,
 *   without keeping it; it also bounds CONTINUATION frames per block).
 * - Every frame the peer breaks the protocol with is nghttp2's to judge (it checks HTTP messaging too): a stream
 *   error resets the stream, told as CB_CH2_E_BAD; a connection error queues GOAWAY and makes cb_ch2_feed fail.
 *
 * Streams are "attached" while nghttp2's stream user data holds their owner's pointer; ending one for its owner
 * (on_end, on_close, a callback's non-zero, cb_ch2_cancel) clears it, so no callback names it again. */
#include <nghttp2/nghttp2.h>
#include <stdalign.h>
#include <string.h>

#include "client/client.h"

#define ASSUMED_MAX_STREAMS 100 /* the peer's limit until its SETTINGS say */

static void *sud_of(nghttp2_session *s, int32_t id) { return nghttp2_session_get_stream_user_data(s, id); }
static void detach(nghttp2_session *s, int32_t id) { nghttp2_session_set_stream_user_data(s, id, NULL); }

/* The owner is done with a stream: the rest of its answer is not wanted. */
static void drop(nghttp2_session *s, int32_t id, uint32_t code) {
  if (nghttp2_session_find_stream(s, id) == NULL) {
    /* Not open: a client session opens a request's stream when it sends the HEADERS, which may still wait in
     * the session (before the connection is up, or in a turn's batch). Setting the user data finds the waiting
     * request (it fails for a stream closed already), and the reset cancels it: it never goes (nghttp2 opens
     * its stream as it takes it from the queue, tells on_frame_not_send, then closes the stream). Left alone,
     * it went out later bound to the owner's pointer, which the owner had freed or given to another request. */
    if (nghttp2_session_set_stream_user_data(s, id, NULL) == 0)
      nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, code);
    return;
  }
  if (sud_of(s, id) == NULL) return; /* let go of already (the owner's callback may cancel it itself) */
  detach(s, id);
  nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, code);
}

static void tell_close(cb_ch2_t *c, nghttp2_session *s, int32_t id, int err) {
  void *sud = sud_of(s, id);
  if (sud == NULL) return;
  detach(s, id);
  if (c->cb->on_close) c->cb->on_close(sud, err);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  (void)s;
  (void)f;
  cb_ch2_t *c = ud;
  c->nfields = 0;
  c->text_len = 0;
  c->status = -1; /* none yet: a block without :status is trailers (nghttp2 refuses one elsewhere) */
  c->over = 0;
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud) {
  (void)flags;
  cb_ch2_t *c = ud;
  int32_t id = f->hd.stream_id;
  if (f->hd.type != NGHTTP2_HEADERS || sud_of(s, id) == NULL) return 0;
  if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
    /* nghttp2 has checked it is three digits */
    c->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    return 0;
  }
  if (namelen > 0 && name[0] == ':') return 0;
  if (c->nfields >= c->max_fields || c->text_len + namelen + valuelen > c->text_cap ||
      c->text_len + namelen + valuelen > c->lim.max_head) {
    tell_close(c, s, id, CB_CH2_E_HEAD_TOO_BIG);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset; the block is still decoded */
  }
  char *t = c->text + c->text_len;
  memcpy(t, name, namelen);
  memcpy(t + namelen, value, valuelen);
  c->fields[c->nfields++] = (cb_chdr_t){t, namelen, t + namelen, valuelen};
  c->text_len += namelen + valuelen;
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud) {
  (void)flags;
  cb_ch2_t *c = ud;
  void *sud = sud_of(s, id);
  if (sud == NULL) { /* a stream its owner let go of: its bytes go back to the windows at once */
    nghttp2_session_consume(s, id, len);
    return 0;
  }
  if (c->cb->on_data && c->cb->on_data(sud, (const char *)data, len) != 0) {
    nghttp2_session_consume(s, id, len);
    drop(s, id, NGHTTP2_CANCEL);
  }
  return 0;
}

/* The answer is over for the owner; a request still being sent is not wanted any more. */
static void ended(cb_ch2_t *c, nghttp2_session *s, int32_t id, void *sud) {
  detach(s, id);
  if (c->cb->on_end) c->cb->on_end(sud);
  if (!nghttp2_session_get_stream_local_close(s, id) && nghttp2_session_find_stream(s, id) != NULL)
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  cb_ch2_t *c = ud;
  int32_t id = f->hd.stream_id;
  switch (f->hd.type) {
    case NGHTTP2_SETTINGS:
      if (!(f->hd.flags & NGHTTP2_FLAG_ACK)) c->settings = 1;
      return 0;
    case NGHTTP2_GOAWAY:
      c->goaway = 1; /* nghttp2 closes the streams above last_stream_id (REFUSED_STREAM) after this */
      return 0;
    case NGHTTP2_RST_STREAM:
      tell_close(c, s, id, f->rst_stream.error_code == NGHTTP2_REFUSED_STREAM ? CB_CH2_E_REFUSED : CB_CH2_E_RESET);
      return 0;
    case NGHTTP2_DATA: {
      void *sud = sud_of(s, id);
      if (sud != NULL && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) ended(c, s, id, sud);
      return 0;
    }
    case NGHTTP2_HEADERS: {
      void *sud = sud_of(s, id);
      if (sud == NULL) return 0;
      if (c->status >= 0) {
        if (c->status >= 100 && c->status < 200 && c->status != 101) return 0; /* interim: the final follows */
        if (c->status < 200) { /* a 101 (an upgrade has no place in HTTP/2), or three digits below 100 */
          drop(s, id, NGHTTP2_PROTOCOL_ERROR);
          if (c->cb->on_close) c->cb->on_close(sud, CB_CH2_E_BAD);
          return 0;
        }
        if (c->cb->on_head && c->cb->on_head(sud, c->status, c->fields, c->nfields) != 0) {
          drop(s, id, NGHTTP2_CANCEL);
          return 0;
        }
      } else if (c->cb->on_trailers && c->cb->on_trailers(sud, c->fields, c->nfields) != 0) {
        drop(s, id, NGHTTP2_CANCEL);
        return 0;
      }
      /* The owner may have let go of the stream inside its callback (cb_ch2_cancel). */
      if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && sud_of(s, id) == sud) ended(c, s, id, sud);
      return 0;
    }
    default:
      return 0;
  }
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  cb_ch2_t *c = ud;
  if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR) c->bad = 1;
  /* A reset nghttp2 sent for a stream still attached: the peer broke the protocol on it (an invalid header
   * field, a wrong content-length, ...). The owner's own resets detach first. */
  if (f->hd.type == NGHTTP2_RST_STREAM) {
    /* DATA past the window: a peer that ignores flow control would go on sending into the stream it lost
     * (nghttp2 reads and drops DATA of a closed stream, giving the connection's window back), so the
     * connection ends too. (Read before the owner is told: f is nghttp2's, and the owner may call in.) */
    if (f->rst_stream.error_code == NGHTTP2_FLOW_CONTROL_ERROR) c->bad = 1;
    tell_close(c, s, f->hd.stream_id, CB_CH2_E_BAD);
  }
  return 0;
}

static int on_frame_not_send(nghttp2_session *s, const nghttp2_frame *f, int lib_error, void *ud) {
  cb_ch2_t *c = ud;
  int32_t id = f->hd.stream_id;
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  /* nghttp2 (1.52) opens a request's stream as it takes the HEADERS from its queue, before it checks that they
   * may go (not cancelled, no GOAWAY received): then the stream's close follows at once (the cancel's code, or
   * REFUSED_STREAM), and on_stream_close counts it and tells its owner. Counted here as well, the count fell
   * below the streams open: at -1 the connection took no stream again, and with one open a GOAWAY ended it. */
  if (nghttp2_session_find_stream(s, id) != NULL) return 0;
  c->nstreams--; /* never opened: no stream close follows */
  /* Told by id (nghttp2 keeps no user data for a stream it never opened); not one its owner cancelled. */
  if (lib_error != NGHTTP2_ERR_STREAM_CLOSING && c->cb->on_unsent) c->cb->on_unsent(c->ud, id);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
  cb_ch2_t *c = ud;
  c->nstreams--;
  /* Still attached here: ended by the peer's GOAWAY (REFUSED_STREAM above its last stream id) or by the end of
   * the session; resets either way were told where they were sent or received. */
  tell_close(c, s, id, code == NGHTTP2_REFUSED_STREAM ? CB_CH2_E_REFUSED : CB_CH2_E_RESET);
  return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  (void)src;
  cb_ch2_t *c = ud;
  void *sud = sud_of(s, id);
  if (sud == NULL) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* let go of: reset */
  int eof = 0;
  ssize_t n = c->cb->read_body(sud, (char *)buf, len, &eof);
  if (n < 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (eof) *flags |= NGHTTP2_DATA_FLAG_EOF;
  else if (n == 0) return NGHTTP2_ERR_DEFERRED;
  return n;
}

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

  nghttp2_session_callbacks *cbs;
  nghttp2_option *opt;
  if (nghttp2_session_callbacks_new(&cbs) != 0) return CB_CH2_E_NOMEM;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cbs);
    return CB_CH2_E_NOMEM;
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, on_frame_not_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt, ASSUMED_MAX_STREAMS);
  nghttp2_session *s = NULL;
  int rv = nghttp2_session_client_new3(&s, cbs, c, opt, mem);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_option_del(opt);
  if (rv != 0) return CB_CH2_E_NOMEM;
  c->session = s;
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)c->lim.max_head}};
  if (nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
      (c->lim.conn_window > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE &&
       nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, (int32_t)c->lim.conn_window) != 0)) {
    cb_ch2_free(c);
    return CB_CH2_E_NOMEM;
  }
  return 0;
}

void cb_ch2_free(cb_ch2_t *c) {
  if (c->session) nghttp2_session_del(c->session);
  c->session = NULL;
}

int cb_ch2_feed(cb_ch2_t *c, const char *p, size_t n) {
  if (c->bad) return CB_CH2_E_BAD;
  ssize_t rv = nghttp2_session_mem_recv(c->session, (const uint8_t *)p, n);
  if (rv == NGHTTP2_ERR_NOMEM) return CB_CH2_E_NOMEM;
  if (rv < 0) c->bad = 1;
  return c->bad ? CB_CH2_E_BAD : 0;
}

ssize_t cb_ch2_pull(cb_ch2_t *c, const char **out) {
  const uint8_t *p = NULL;
  ssize_t n = nghttp2_session_mem_send(c->session, &p);
  if (n < 0) {
    c->bad = 1;
    return n == NGHTTP2_ERR_NOMEM ? CB_CH2_E_NOMEM : CB_CH2_E_BAD;
  }
  *out = (const char *)p;
  return n;
}

int cb_ch2_can_submit(const cb_ch2_t *c) {
  if (c->bad || c->goaway || c->session == NULL) return 0;
  if (!nghttp2_session_check_request_allowed(c->session)) return 0;
  uint32_t max = c->settings ? cb_ch2_max_streams(c) : c->assumed;
  return (uint32_t)c->nstreams < max;
}

uint32_t cb_ch2_max_streams(const cb_ch2_t *c) {
  if (!c->settings || c->session == NULL) return 0;
  return nghttp2_session_get_remote_settings(c->session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

void cb_ch2_assume_max_streams(cb_ch2_t *c, uint32_t n) {
  if (n >= 1 && n <= ASSUMED_MAX_STREAMS) c->assumed = n;
}

int32_t cb_ch2_submit(cb_ch2_t *c, const cb_ch2_req_t *q, void *sud) {
  if (q->nheaders < 0 || q->nheaders > CB_CH2_MAX_REQ_FIELDS) return CB_CH2_E_NOMEM;
  nghttp2_nv nv[4 + CB_CH2_MAX_REQ_FIELDS];
  static const uint8_t flags = NGHTTP2_NV_FLAG_NO_COPY_NAME;
  int n = 0;
  nv[n++] = (nghttp2_nv){(uint8_t *)":method", (uint8_t *)q->method, 7, q->method_len, flags};
  nv[n++] = q->https ? (nghttp2_nv){(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, flags | NGHTTP2_NV_FLAG_NO_COPY_VALUE}
                     : (nghttp2_nv){(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, flags | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
  nv[n++] = (nghttp2_nv){(uint8_t *)":authority", (uint8_t *)q->authority, 10, q->authority_len, flags};
  nv[n++] = (nghttp2_nv){(uint8_t *)":path", (uint8_t *)q->path, 5, q->path_len, flags};
  for (int i = 0; i < q->nheaders; i++)
    nv[n++] = (nghttp2_nv){(uint8_t *)q->headers[i].name, (uint8_t *)q->headers[i].value, q->headers[i].name_len,
                           q->headers[i].value_len, NGHTTP2_NV_FLAG_NONE};
  nghttp2_data_provider dp = {.source.ptr = NULL, .read_callback = read_body};
  int32_t id = nghttp2_submit_request(c->session, NULL, nv, (size_t)n, q->has_body ? &dp : NULL, sud);
  if (id < 0) return CB_CH2_E_NOMEM;
  c->nstreams++;
  return id;
}

void cb_ch2_resume(cb_ch2_t *c, int32_t id) { nghttp2_session_resume_data(c->session, id); }

void cb_ch2_consume(cb_ch2_t *c, int32_t id, size_t n) {
  if (n == 0) return;
  if (id == 0 || nghttp2_session_consume(c->session, id, n) != 0) nghttp2_session_consume_connection(c->session, n);
}

void cb_ch2_cancel(cb_ch2_t *c, int32_t id) {
  if (c->session == NULL || id <= 0) return;
  drop(c->session, id, NGHTTP2_CANCEL);
}

int cb_ch2_done(const cb_ch2_t *c) {
  if (c->bad || c->session == NULL) return 1;
  if (c->goaway && c->nstreams == 0) return 1;
  return !nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session);
}

int cb_ch2_waiting(const cb_ch2_t *c, int32_t id) {
  /* nghttp2 opens a request's stream as it takes the HEADERS from its queue to write them (drop() above); an
   * attached stream that closed was told to its owner, which let go of it */
  return c->session != NULL && id > 0 && nghttp2_session_find_stream(c->session, id) == NULL;
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
