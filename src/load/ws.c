/* WebSocket echo for cbench-load (RFC 6455), framed by wslay: the upgrade request (parsed back with llhttp in
 * response mode: a 101 with Upgrade ends the HTTP part), then each "request" is one masked text frame of
 * --ws-size bytes and its answer is the echoed message, compared byte for byte with what was sent (anything
 * else is a protocol error). Messages are answered in order, so the oldest in flight is the one an echo
 * completes. A close frame from the server ends the connection: a reset for the messages still in flight.
 *
 * The handshake's Sec-WebSocket-Accept is not verified (it needs SHA-1, which none of the libraries cbench
 * uses offers); a load generator loses nothing by trusting the 101. */
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <wslay/wslay.h>

#include "load.h"

typedef struct {
  llhttp_t parser; /* first: callbacks cast back */
  cbl_conn_t *c;
  wslay_event_context_ptr ctx;
  bool upgraded;
  int status;
  const char *in; /* the bytes wslay is being fed */
  size_t in_len;
  int error; /* a cbl_err_t + 1 set from a wslay callback */
} ws_t;

static int on_headers_complete(llhttp_t *p) {
  ((ws_t *)p)->status = p->status_code;
  return 0;
}

/* Only a 101 may end the handshake's head; any other complete answer fails it (ws_read counts its status). */
static int on_message_complete(llhttp_t *p) { return ((ws_t *)p)->status == 101 ? 0 : HPE_USER; }

static const llhttp_settings_t settings = {
  .on_headers_complete = on_headers_complete,
  .on_message_complete = on_message_complete,
};

static ssize_t recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *ud) {
  (void)flags;
  ws_t *w = ud;
  if (w->in_len == 0) {
    wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
    return -1;
  }
  size_t n = w->in_len < len ? w->in_len : len;
  memcpy(buf, w->in, n);
  w->in += n;
  w->in_len -= n;
  return (ssize_t)n;
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

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg, void *ud) {
  (void)ctx;
  ws_t *w = ud;
  cbl_conn_t *c = w->c;
  if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
    if (!w->error) w->error = 1 + CBL_ERR_RESET;
    return;
  }
  if (wslay_is_ctrl_frame(arg->opcode)) return; /* ping (wslay answers it), pong */
  const cbl_config_t *cfg = c->t->cfg;
  if (c->inflight == 0 || arg->opcode != WSLAY_TEXT_FRAME || arg->msg_length != cfg->ws_size ||
      memcmp(arg->msg, c->t->wire->ws_msg, cfg->ws_size) != 0) {
    if (!w->error) w->error = 1 + CBL_ERR_PROTOCOL;
    return;
  }
  if (c->t->now >= c->t->run->t_measure) c->t->res.counts.body_bytes += arg->msg_length;
  cbl_req_done(c, &c->reqs[c->head], 0, c->t->now);
}

static const struct wslay_event_callbacks callbacks = {
  .recv_callback = recv_cb,
  .send_callback = send_cb,
  .genmask_callback = genmask_cb,
  .on_msg_recv_callback = on_msg,
};

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
  w->error = 0;
  if (wslay_event_context_client_init(&w->ctx, &callbacks, w)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  wslay_event_config_set_max_recv_msg_length(w->ctx, c->t->cfg->ws_size + 1);
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
  if (wslay_event_want_write(w->ctx) && wslay_event_send(w->ctx)) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return 0;
}

static int feed(ws_t *w, const char *p, size_t n) {
  w->in = p;
  w->in_len = n;
  int rc = wslay_event_recv(w->ctx);
  if (w->error) return CBL_FAIL(w->error - 1);
  return rc ? CBL_FAIL(CBL_ERR_PROTOCOL) : 0;
}

static int ws_read(cbl_conn_t *c, const char *p, size_t n) {
  ws_t *w = c->p;
  if (w->upgraded) return feed(w, p, n);
  llhttp_errno_t e = llhttp_execute(&w->parser, p, n);
  if (e == HPE_OK) return 0; /* more of the head to come */
  if (e == HPE_PAUSED_UPGRADE && w->status == 101) {
    w->upgraded = true;
    c->answered++;
    const char *rest = llhttp_get_error_pos(&w->parser);
    size_t left = (size_t)(p + n - rest);
    return left ? feed(w, rest, left) : 0;
  }
  /* Anything but a 101 (a 404 from a server without the route, say) is counted by its status. */
  if (w->status > 0 && w->status < CBL_MAX_STATUS && c->t->now >= c->t->run->t_measure)
    c->t->res.counts.status[w->status]++;
  return CBL_FAIL(CBL_ERR_PROTOCOL);
}

static int ws_eof(cbl_conn_t *c) {
  (void)c;
  return 0;
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
