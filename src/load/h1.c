/* HTTP/1.1 for cbench-load: llhttp in response mode. Requests are the prebuilt bytes of request.c, copied into
 * the connection's output (pipelined up to the depth); answers come back in order, so the oldest request in
 * flight is the one each answer completes. HEAD answers have no body whatever their headers say (llhttp is told
 * so from on_headers_complete). A server's `Connection: close` ends the connection cleanly after its answer.
 *
 * A hostile server cannot make it hold more than the parser's state: bodies are counted, never kept; a head
 * longer than CBL_MAX_HEAD is a protocol error (llhttp itself sets no bound); an answer that begins with no
 * request in flight is an unsolicited one, counted as such and the end of the connection, for nothing says
 * which of the later answers belong to which request any more. */
#include <llhttp.h>
#include <stdlib.h>

#include "load.h"

typedef struct {
  llhttp_t parser; /* first: callbacks cast back */
  cbl_conn_t *c;
  bool in_head;      /* an answer's head has begun and is not complete */
  size_t head_bytes; /* bytes read while it was (at most one read more than the head itself) */
  cbl_err_t err;     /* why a callback stopped the parser, when not a protocol error */
} h1_t;

static int on_message_begin(llhttp_t *p) {
  h1_t *h = (h1_t *)p;
  if (h->c->inflight == 0) {
    h->err = CBL_ERR_UNSOLICITED;
    return HPE_USER;
  }
  h->in_head = true;
  h->head_bytes = 0;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  h1_t *h = (h1_t *)p;
  cbl_conn_t *c = h->c;
  h->in_head = false;
  c->reqs[c->head].status = p->status_code;
  if (c->t->wire->head) return 1; /* no body follows */
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  (void)at;
  h1_t *h = (h1_t *)p;
  if (h->c->t->now >= h->c->t->run->t_measure) h->c->t->res.counts.body_bytes += n;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  h1_t *h = (h1_t *)p;
  cbl_conn_t *c = h->c;
  /* 1xx answers (100 Continue, 103) precede the real one. */
  if (p->status_code < 200) return 0;
  cbl_req_t *r = &c->reqs[c->head];
  bool keep = llhttp_should_keep_alive(p);
  cbl_req_done(c, r, p->status_code, c->t->now);
  if (!keep || c->t->cfg->new_conn) {
    cbl_conn_end(c);
    return HPE_PAUSED;
  }
  return 0;
}

static const llhttp_settings_t settings = {
  .on_message_begin = on_message_begin,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_message_complete = on_message_complete,
};

static void *h1_create(cbl_conn_t *c) {
  h1_t *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->c = c;
  h->err = CBL_ERR_PROTOCOL;
  llhttp_init(&h->parser, HTTP_RESPONSE, &settings);
  return h;
}

static void h1_destroy(void *p) { free(p); }

static int h1_open(cbl_conn_t *c) {
  h1_t *h = c->p;
  llhttp_init(&h->parser, HTTP_RESPONSE, &settings);
  h->in_head = false;
  h->err = CBL_ERR_PROTOCOL;
  return 0;
}

static bool h1_ready(cbl_conn_t *c) {
  (void)c;
  return true;
}

static int h1_send(cbl_conn_t *c, cbl_req_t *r) {
  (void)r;
  cbl_thread_t *t = c->t;
  uint32_t i = t->path_rr++ % (uint32_t)t->cfg->npaths;
  return cbl_conn_write(c, t->wire->h1[i], t->wire->h1_len[i]);
}

static int h1_flush(cbl_conn_t *c) {
  (void)c;
  return 0;
}

static int h1_read(cbl_conn_t *c, const char *p, size_t n) {
  h1_t *h = c->p;
  llhttp_errno_t e = llhttp_execute(&h->parser, p, n);
  if (e == HPE_OK) {
    if (h->in_head && (h->head_bytes += n) > CBL_MAX_HEAD) return CBL_FAIL(CBL_ERR_PROTOCOL);
    return 0;
  }
  if (e == HPE_PAUSED && c->done_clean) return 0;
  /* llhttp reports a callback's refusal as its own code (HPE_CB_MESSAGE_BEGIN): the reason is in h->err. */
  return CBL_FAIL(h->err);
}

static int h1_eof(cbl_conn_t *c) {
  h1_t *h = c->p;
  /* An answer delimited by the close completes here. */
  if (c->inflight && llhttp_finish(&h->parser) != HPE_OK) return CBL_FAIL(CBL_ERR_RESET);
  return 0;
}

static void h1_reset(cbl_conn_t *c) { (void)c; }

const cbl_proto_t cbl_h1_proto = {
  .create = h1_create,
  .destroy = h1_destroy,
  .open = h1_open,
  .ready = h1_ready,
  .send = h1_send,
  .flush = h1_flush,
  .read = h1_read,
  .eof = h1_eof,
  .reset = h1_reset,
};
