/* WebSocket echo for cbench-load (RFC 6455): the upgrade request (parsed back with llhttp in response mode: a
 * 101 with Upgrade ends the HTTP part), then each "request" is one masked text frame of --ws-size bytes and its
 * answer is the echoed message, compared byte for byte with what was sent as it arrives (anything else is a
 * protocol error). Messages are answered in order, so the oldest in flight is the one an echo completes. A close
 * frame from the server ends the connection: a reset for the messages still in flight.
 *
 * Both directions go through wslay's frame layer (wslay_frame_send, wslay_frame_recv), not its event layer,
 * because a hostile server must not be able to grow the generator's memory: the event layer queues a pong, with
 * a copy of the ping, for every ping it reads, and keeps a message whole until its last fragment. The frame
 * layer keeps nothing but its fixed 4 KiB input buffer: it parses headers across reads, refuses control frames
 * that are fragmented or longer than 125 bytes and lengths not in their shortest form, and hands the payload
 * back in pieces as it arrives. Here each piece of a data frame is compared with the message sent and dropped
 * (so a frame or a message longer than --ws-size fails before its payload is looked at), and pings are
 * coalesced: only the latest waits for its pong (RFC 6455 section 5.5.3 allows answering only the most recent
 * one), and the pong is written only while less than CBL_OUT_HIGH bytes wait for the socket, so a server that
 * floods pings and never reads costs one pending pong. A message that begins with nothing in flight is
 * unsolicited; a failed handshake is an upgrade error unless its status (not 2xx) counts it already (load.h).
 * Sending with the frame layer too means one wslay context per connection (the event layer's holds a frame
 * context and a 4 KiB output buffer besides) and no copy of each message into a queue: a message is framed
 * and masked straight into the connection's output when it is sent.
 *
 * wslay_frame_recv reports a frame only with the first piece of its payload (or at once when it has none), so
 * a frame's header is judged when its first payload byte arrives: a server that sends the header of an
 * over-long or unsolicited frame and then nothing is counted by --timeout, not by the header's fault.
 *
 * Interim 1xx answers before the 101 are skipped (on_message_complete); the 101 is the handshake's final answer.
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
  wslay_frame_context_ptr fr;
  bool upgraded;
  int status;
  size_t head_bytes;
  /* The read wslay_frame_recv is pulling bytes from. */
  const uint8_t *in;
  size_t in_len;
  /* The frame being read. */
  bool in_frame;
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

/* Only a 101 may end the handshake's head; any other final answer fails it (ws_read counts it). An interim 1xx
 * (100 Continue, 103 Early Hints: RFC 9110 15.2, a client parses them before the final answer) is skipped, and
 * llhttp reads on into the next head; its status is forgotten, so that what follows it is judged alone. The
 * interim answers' bytes count toward the head's bound (ws_read), so a server that sends them forever fails the
 * upgrade once they pass CBL_MAX_HEAD. */
static int on_message_complete(llhttp_t *p) {
  ws_t *w = (ws_t *)p;
  if (w->status == 101) return 0;
  if (w->status >= 100 && w->status < 200) {
    w->status = 0;
    return 0;
  }
  return HPE_USER;
}

static const llhttp_settings_t settings = {
  .on_headers_complete = on_headers_complete,
  .on_message_complete = on_message_complete,
};

/* wslay copies the current read's bytes into its buffer as it needs them; -1 when they are all taken makes
 * wslay_frame_recv answer WSLAY_ERR_WANT_READ, keeping a partial header for the next read. */
static ssize_t recv_cb(uint8_t *buf, size_t len, int flags, void *ud) {
  (void)flags;
  ws_t *w = ud;
  if (w->in_len == 0) return -1;
  size_t n = w->in_len < len ? w->in_len : len;
  memcpy(buf, w->in, n);
  w->in += n;
  w->in_len -= n;
  return (ssize_t)n;
}

/* Output is queued on the connection, so a frame is always taken whole (or the connection fails). */
static ssize_t send_cb(const uint8_t *data, size_t len, int flags, void *ud) {
  (void)flags;
  ws_t *w = ud;
  return cbl_conn_write(w->c, data, len) ? -1 : (ssize_t)len;
}

static int genmask_cb(uint8_t *buf, size_t len, void *ud) {
  ws_t *w = ud;
  for (size_t i = 0; i < len; i += 8) {
    uint64_t r = cbl_rand(w->c->t);
    memcpy(buf + i, &r, len - i < 8 ? len - i : 8);
  }
  return 0;
}

static const struct wslay_frame_callbacks callbacks = {
  .send_callback = send_cb,
  .recv_callback = recv_cb,
  .genmask_callback = genmask_cb,
};

/* One masked final frame. */
static int frame_send(ws_t *w, uint8_t op, const void *p, size_t n) {
  struct wslay_frame_iocb f = {.fin = 1, .opcode = op, .mask = 1, .payload_length = n, .data = p, .data_length = n};
  return wslay_frame_send(w->fr, &f) == (ssize_t)n ? 0 : CBL_FAIL(CBL_ERR_PROTOCOL);
}

/* ---- the server's frames ---- */

/* A frame's first piece: check its header against what this client may receive. wslay has refused control
 * frames that are fragmented or over 125 bytes already. */
static int frame_begin(ws_t *w, const struct wslay_frame_iocb *f) {
  cbl_conn_t *c = w->c;
  w->fin = f->fin;
  w->op = f->opcode;
  if (f->mask || f->rsv) return CBL_FAIL(CBL_ERR_PROTOCOL); /* a server does not mask; no extension */
  if (wslay_is_ctrl_frame(w->op)) {
    if (w->op != WSLAY_CONNECTION_CLOSE && w->op != WSLAY_PING && w->op != WSLAY_PONG)
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
  if (!wslay_is_ctrl_frame(w->op) && f->payload_length > c->t->cfg->ws_size - w->msg_off)
    return CBL_FAIL(CBL_ERR_PROTOCOL);
  w->left = f->payload_length;
  w->in_frame = true;
  return 0;
}

/* The payload is complete. */
static int frame_end(ws_t *w) {
  cbl_conn_t *c = w->c;
  w->in_frame = false;
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

static int ws_frames(ws_t *w, const uint8_t *p, size_t n) {
  const char *msg = w->c->t->wire->ws_msg;
  w->in = p;
  w->in_len = n;
  for (;;) {
    struct wslay_frame_iocb f;
    ssize_t r = wslay_frame_recv(w->fr, &f);
    if (r == WSLAY_ERR_WANT_READ) {
      if (w->in_len == 0) return 0;
      continue; /* part of a header came; the rest of the read has more */
    }
    if (r < 0) return CBL_FAIL(CBL_ERR_PROTOCOL);
    if (!w->in_frame) {
      int rc = frame_begin(w, &f);
      if (rc) return rc;
    }
    size_t m = f.data_length;
    if (wslay_is_ctrl_frame(w->op)) {
      memcpy(w->ctrl + w->ctrl_len, f.data, m);
      w->ctrl_len += m;
    } else {
      if (memcmp(f.data, msg + w->msg_off, m) != 0) return CBL_FAIL(CBL_ERR_PROTOCOL);
      w->msg_off += m;
    }
    w->left -= m;
    if (w->left == 0) {
      int rc = frame_end(w);
      if (rc) return rc;
    }
  }
}

/* ---- the protocol ---- */

static void *ws_create(cbl_conn_t *c) {
  ws_t *w = calloc(1, sizeof *w);
  if (w) w->c = c;
  return w;
}

static void ws_reset(cbl_conn_t *c) {
  ws_t *w = c->p;
  if (w->fr) wslay_frame_context_free(w->fr);
  w->fr = NULL;
  w->upgraded = false;
}

static void ws_destroy(void *p) {
  ws_t *w = p;
  if (w->fr) wslay_frame_context_free(w->fr);
  free(w);
}

static int ws_open(cbl_conn_t *c) {
  ws_t *w = c->p;
  llhttp_init(&w->parser, HTTP_RESPONSE, &settings);
  w->status = 0;
  w->head_bytes = 0;
  w->in_frame = false;
  w->in_msg = false;
  w->pong_due = false;
  if (wslay_frame_context_init(&w->fr, &callbacks, w)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return cbl_conn_write(c, c->t->wire->ws_handshake, c->t->wire->ws_handshake_len);
}

static bool ws_ready(cbl_conn_t *c) {
  ws_t *w = c->p;
  return w->upgraded;
}

static bool ws_handshaking(cbl_conn_t *c) {
  ws_t *w = c->p;
  return !w->upgraded;
}

static int ws_send(cbl_conn_t *c, cbl_req_t *r) {
  (void)r;
  ws_t *w = c->p;
  return frame_send(w, WSLAY_TEXT_FRAME, c->t->wire->ws_msg, c->t->cfg->ws_size);
}

static int ws_flush(cbl_conn_t *c) {
  ws_t *w = c->p;
  if (!w->fr || !w->upgraded || !w->pong_due || cbl_conn_unsent(c) >= CBL_OUT_HIGH) return 0;
  w->pong_due = false;
  return frame_send(w, WSLAY_PONG, w->ping, w->ping_len);
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
  .handshaking = ws_handshaking,
  .send = ws_send,
  .flush = ws_flush,
  .read = ws_read,
  .eof = ws_eof,
  .reset = ws_reset,
};
