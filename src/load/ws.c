/* WebSocket echo for cbench-load (RFC 6455): the upgrade request (parsed back with llhttp in response mode: a
 * 101 with Upgrade ends the HTTP part), then each "request" is one masked text frame of --ws-size bytes, framed
 * by wslay, and its answer is the echoed message, compared byte for byte with what was sent as it arrives
 * (anything else is a protocol error). Messages are answered in order, so the oldest in flight is the one an
 * echo completes. A close frame from the server ends the connection: a reset for the messages still in flight.
 *
 * The server's frames are read here rather than by wslay, because a hostile server must not be able to grow
 * the generator's memory. wslay queues a pong, with a copy of the ping, for every ping it reads and keeps a
 * message whole until its last fragment; here nothing of a data frame is kept (it is compared with the message
 * sent, so a frame or a message longer than --ws-size fails at once), and pings are coalesced: only the latest
 * waits for its pong (RFC 6455 section 5.5.3 allows answering only the most recent one), and the pong is queued
 * only while less than CBL_OUT_HIGH bytes wait for the socket, so a server that floods pings and never reads
 * costs one pending pong. A message that begins with nothing in flight is unsolicited; a failed handshake is an
 * upgrade error unless its status (not 2xx) counts it already (load.h).
 *
 * The handshake's Sec-WebSocket-Accept is not verified (it needs SHA-1, which none of the libraries cbench
 * uses offers); a load generator loses nothing by trusting the 101. */
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <wslay/wslay.h>

#include "load.h"

#define CTRL_MAX 125 /* a control frame's payload at most (RFC 6455 section 5.5) */

typedef struct {
  llhttp_t parser; /* first: callbacks cast back */
  cbl_conn_t *c;
  wslay_event_context_ptr ctx; /* the sending side */
  bool upgraded;
  int status;
  size_t head_bytes;
  /* The frame being read. */
  uint8_t hdr[10]; /* its header (a server's frames are not masked: 10 bytes at most) */
  size_t hdr_len;
  bool in_payload;
  uint64_t left; /* payload bytes still to come */
  uint8_t op;
  bool fin;
  bool in_msg;    /* a data message has begun and its last fragment has not come */
  size_t msg_off; /* how much of the message sent it has matched */
  uint8_t ctrl[CTRL_MAX];
  size_t ctrl_len;
  /* The most recent ping not answered yet. */
  bool pong_due;
  uint8_t ping[CTRL_MAX];
  size_t ping_len;
} ws_t;

static int on_headers_complete(llhttp_t *p) {
  ((ws_t *)p)->status = p->status_code;
  return 0;
}

/* Only a 101 may end the handshake's head; any other complete answer fails it (ws_read counts it). */
static int on_message_complete(llhttp_t *p) { return ((ws_t *)p)->status == 101 ? 0 : HPE_USER; }

static const llhttp_settings_t settings = {
  .on_headers_complete = on_headers_complete,
  .on_message_complete = on_message_complete,
};

/* wslay reads nothing here (the frames are read by ws_frames), but its context wants a recv callback. */
static ssize_t recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *ud) {
  (void)buf;
  (void)len;
  (void)flags;
  (void)ud;
  wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
  return -1;
}

static ssize_t send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *ud) {
  (void)flags;
  ws_t *w = ud;
  if (cbl_conn_write(w->c, data, len)) {
    wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
    return -1;
  }
  return (ssize_t)len;
}

static int genmask_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *ud) {
  (void)ctx;
  ws_t *w = ud;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t r = cbl_rand(w->c->t);
    memcpy(buf + i, &r, len - i < 8 ? len - i : 8);
  }
  return 0;
}

static const struct wslay_event_callbacks callbacks = {
  .recv_callback = recv_cb,
  .send_callback = send_cb,
  .genmask_callback = genmask_cb,
};

/* ---- the server's frames ---- */

/* The header is complete: check it against what this client may receive. */
static int frame_begin(ws_t *w) {
  cbl_conn_t *c = w->c;
  const uint8_t *h = w->hdr;
  w->fin = (h[0] & 0x80) != 0;
  w->op = h[0] & 0x0f;
  uint8_t len7 = h[1] & 0x7f;
  uint64_t len = len7;
  if (len7 == 126) len = (uint64_t)h[2] << 8 | h[3];
  if (len7 == 127) {
    len = 0;
    for (int i = 2; i < 10; i++) len = len << 8 | h[i];
  }
  if (h[0] & 0x70) return CBL_FAIL(CBL_ERR_PROTOCOL); /* no extension was negotiated */
  if (w->op & 0x08) {
    if (!w->fin || len > CTRL_MAX || (w->op != WSLAY_CONNECTION_CLOSE && w->op != WSLAY_PING && w->op != WSLAY_PONG))
      return CBL_FAIL(CBL_ERR_PROTOCOL);
    w->ctrl_len = 0;
  } else if (w->op == WSLAY_CONTINUATION_FRAME) {
    if (!w->in_msg) return CBL_FAIL(CBL_ERR_PROTOCOL);
  } else {
    if (w->in_msg) return CBL_FAIL(CBL_ERR_PROTOCOL);
    if (c->inflight == 0) return CBL_FAIL(CBL_ERR_UNSOLICITED);
    if (w->op != WSLAY_TEXT_FRAME) return CBL_FAIL(CBL_ERR_PROTOCOL);
    w->in_msg = true;
    w->msg_off = 0;
  }
  if (!(w->op & 0x08) && len > c->t->cfg->ws_size - w->msg_off) return CBL_FAIL(CBL_ERR_PROTOCOL);
  w->left = len;
  w->in_payload = true;
  return 0;
}

/* The payload is complete. */
static int frame_end(ws_t *w) {
  cbl_conn_t *c = w->c;
  w->in_payload = false;
  w->hdr_len = 0;
  switch (w->op) {
    case WSLAY_CONNECTION_CLOSE: return CBL_FAIL(CBL_ERR_RESET);
    case WSLAY_PING:
      memcpy(w->ping, w->ctrl, w->ctrl_len);
      w->ping_len = w->ctrl_len;
      w->pong_due = true;
      return 0;
    case WSLAY_PONG: return 0;
    default: break;
  }
  if (!w->fin) return 0;
  w->in_msg = false;
  size_t size = c->t->cfg->ws_size;
  if (w->msg_off != size) return CBL_FAIL(CBL_ERR_PROTOCOL);
  if (c->t->now >= c->t->run->t_measure) c->t->res.counts.body_bytes += size;
  cbl_req_done(c, &c->reqs[c->head], 0, c->t->now);
  return 0;
}

/* The header's length once its first two bytes are in: 2, 4 or 10 (a masked frame is refused before). */
static size_t hdr_need(const ws_t *w) {
  uint8_t len7 = w->hdr[1] & 0x7f;
  return len7 == 127 ? 10 : len7 == 126 ? 4 : 2;
}

static int ws_frames(ws_t *w, const uint8_t *p, size_t n) {
  const char *msg = w->c->t->wire->ws_msg;
  while (n) {
    if (!w->in_payload) {
      w->hdr[w->hdr_len++] = *p++;
      n--;
      if (w->hdr_len == 2 && (w->hdr[1] & 0x80)) return CBL_FAIL(CBL_ERR_PROTOCOL); /* a server does not mask */
      if (w->hdr_len < 2 || w->hdr_len < hdr_need(w)) continue;
      int rc = frame_begin(w);
      if (rc) return rc;
    } else {
      size_t m = w->left < n ? (size_t)w->left : n;
      if (w->op & 0x08) {
        memcpy(w->ctrl + w->ctrl_len, p, m);
        w->ctrl_len += m;
      } else {
        if (memcmp(p, msg + w->msg_off, m) != 0) return CBL_FAIL(CBL_ERR_PROTOCOL);
        w->msg_off += m;
      }
      p += m;
      n -= m;
      w->left -= m;
    }
    if (w->in_payload && w->left == 0) {
      int rc = frame_end(w);
      if (rc) return rc;
    }
  }
  return 0;
}

/* ---- the protocol ---- */

static void *ws_create(cbl_conn_t *c) {
  ws_t *w = calloc(1, sizeof *w);
  if (w) w->c = c;
  return w;
}

static void ws_reset(cbl_conn_t *c) {
  ws_t *w = c->p;
  if (w->ctx) wslay_event_context_free(w->ctx);
  w->ctx = NULL;
  w->upgraded = false;
}

static void ws_destroy(void *p) {
  ws_t *w = p;
  if (w->ctx) wslay_event_context_free(w->ctx);
  free(w);
}

static int ws_open(cbl_conn_t *c) {
  ws_t *w = c->p;
  llhttp_init(&w->parser, HTTP_RESPONSE, &settings);
  w->status = 0;
  w->head_bytes = 0;
  w->hdr_len = 0;
  w->in_payload = false;
  w->in_msg = false;
  w->pong_due = false;
  if (wslay_event_context_client_init(&w->ctx, &callbacks, w)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return cbl_conn_write(c, c->t->wire->ws_handshake, c->t->wire->ws_handshake_len);
}

static bool ws_ready(cbl_conn_t *c) {
  ws_t *w = c->p;
  return w->upgraded;
}

static int ws_send(cbl_conn_t *c, cbl_req_t *r) {
  (void)r;
  ws_t *w = c->p;
  struct wslay_event_msg msg = {WSLAY_TEXT_FRAME, (const uint8_t *)c->t->wire->ws_msg, c->t->cfg->ws_size};
  return wslay_event_queue_msg(w->ctx, &msg) ? CBL_FAIL(CBL_ERR_PROTOCOL) : 0;
}

static int ws_flush(cbl_conn_t *c) {
  ws_t *w = c->p;
  if (!w->ctx || !w->upgraded) return 0;
  if (w->pong_due && cbl_conn_unsent(c) < CBL_OUT_HIGH) {
    struct wslay_event_msg pong = {WSLAY_PONG, w->ping, w->ping_len};
    if (wslay_event_queue_msg(w->ctx, &pong)) return CBL_FAIL(CBL_ERR_PROTOCOL);
    w->pong_due = false;
  }
  if (wslay_event_want_write(w->ctx) && wslay_event_send(w->ctx)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return 0;
}

static int ws_read(cbl_conn_t *c, const char *p, size_t n) {
  ws_t *w = c->p;
  if (w->upgraded) return ws_frames(w, (const uint8_t *)p, n);
  llhttp_errno_t e = llhttp_execute(&w->parser, p, n);
  if (e == HPE_OK) /* more of the head to come */
    return (w->head_bytes += n) > CBL_MAX_HEAD ? CBL_FAIL(CBL_ERR_UPGRADE) : 0;
  if (e == HPE_PAUSED_UPGRADE && w->status == 101) {
    w->upgraded = true;
    c->answered++;
    const char *rest = llhttp_get_error_pos(&w->parser);
    size_t left = (size_t)(p + n - rest);
    return left ? ws_frames(w, (const uint8_t *)rest, left) : 0;
  }
  /* Any other answer is counted by its status (a 404 from a server without the route, say); one that is not an
   * error by its status (a 200), or not an answer at all, is a failed upgrade. */
  int st = w->status;
  if (st > 0 && st < CBL_MAX_STATUS && c->t->now >= c->t->run->t_measure) c->t->res.counts.status[st]++;
  bool by_status = st > 0 && st < CBL_MAX_STATUS && (st < 200 || st >= 300);
  return by_status ? CBL_FAIL(CBL_ERR_PROTOCOL) : CBL_FAIL(CBL_ERR_UPGRADE);
}

static int ws_eof(cbl_conn_t *c) {
  ws_t *w = c->p;
  return w->upgraded ? 0 : CBL_FAIL(CBL_ERR_UPGRADE);
}

const cbl_proto_t cbl_ws_proto = {
  .create = ws_create,
  .destroy = ws_destroy,
  .open = ws_open,
  .ready = ws_ready,
  .send = ws_send,
  .flush = ws_flush,
  .read = ws_read,
  .eof = ws_eof,
  .reset = ws_reset,
};
