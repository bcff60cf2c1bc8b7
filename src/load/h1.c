/* HTTP/1.1 for cbench-load: the engine's client layer (src/client/, llhttp in response mode) in count_only mode.
 * Requests are the prebuilt bytes of request.c, copied into the connection's output (pipelined up to the depth);
 * answers come back in order, so the oldest request in flight is the one each answer completes. HEAD answers
 * have no body whatever their headers say (cb_cres_expect), nor have 1xx, 204 and 304 answers; 1xx interim
 * answers are skipped. A server's `Connection: close` ends the connection cleanly after its answer.
 *
 * A hostile server cannot make it hold more than the parser's state: bodies are counted, never kept, and fields
 * are not even gathered; a head longer than CBL_MAX_HEAD is a protocol error (the parser counts it exactly); an
 * answer that begins with no request in flight is an unsolicited one, counted as such and the end of the
 * connection, for nothing says which of the later answers belong to which request any more. A 101 has no
 * place here (WebSocket runs are ws.c's): a protocol error, as is a status over 599. */
#include <stdlib.h>

#include "client/client.h"
#include "load.h"

/* An answer that ends the connection cleanly: the parser stops, h1_read and h1_eof report no error. */
#define H1_STOP (-100)

typedef struct {
  cb_cres_t res;
  cbl_conn_t *c;
} h1_t;

static int on_begin(void *ud) {
  h1_t *h = ud;
  return h->c->inflight == 0 ? CBL_FAIL(CBL_ERR_UNSOLICITED) : 0;
}

static int on_head(void *ud, const cb_cres_head_t *hd) {
  h1_t *h = ud;
  if (hd->status == 101) return CBL_FAIL(CBL_ERR_PROTOCOL);
  /* llhttp takes any three digits; HTTP's statuses end at 599 (RFC 9110 15), where the counts by status end
   * too, and h2.c fails the others as well. */
  if (hd->status >= CBL_MAX_STATUS) return CBL_FAIL(CBL_ERR_PROTOCOL);
  h->c->reqs[h->c->head].status = hd->status;
  return 0;
}

static int on_body(void *ud, const char *at, size_t n) {
  (void)at;
  h1_t *h = ud;
  if (h->c->t->now >= h->c->t->run->t_measure) h->c->t->res.counts.body_bytes += n;
  return 0;
}

static int on_done(void *ud, int keep_alive) {
  h1_t *h = ud;
  cbl_conn_t *c = h->c;
  cbl_req_t *r = &c->reqs[c->head];
  cbl_req_done(c, r, r->status, c->t->now);
  if (!keep_alive || c->t->cfg->new_conn) {
    cbl_conn_end(c);
    return H1_STOP;
  }
  return 0;
}

static const cb_cres_callbacks_t callbacks = {
  .on_begin = on_begin,
  .on_head = on_head,
  .on_body = on_body,
  .on_done = on_done,
};

static const cb_cres_limits_t limits = {.max_head = CBL_MAX_HEAD, .count_only = 1};

/* The parser's value as the connection's: a stop is no error, the parser's own errors are protocol errors, and
 * the callbacks' values are CBL_FAIL(kind) already. */
static int result(int r) {
  if (r == 0 || r == H1_STOP) return 0;
  if (r == CB_CRES_E_TRUNCATED) return CBL_FAIL(CBL_ERR_RESET);
  if (r <= CB_CRES_E_BAD) return CBL_FAIL(CBL_ERR_PROTOCOL);
  return r;
}

static void *h1_create(cbl_conn_t *c) {
  h1_t *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->c = c;
  cb_cres_init(&h->res, &callbacks, h, &limits, NULL, 0);
  return h;
}

static void h1_destroy(void *p) { free(p); }

static int h1_open(cbl_conn_t *c) {
  h1_t *h = c->p;
  cb_cres_reset(&h->res);
  cb_cres_expect(&h->res, c->t->wire->head);
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
  return result(cb_cres_feed(&h->res, p, n));
}

/* An answer delimited by the close completes here; the close inside any other answer is a reset. */
static int h1_eof(cbl_conn_t *c) {
  h1_t *h = c->p;
  return c->inflight ? result(cb_cres_eof(&h->res)) : 0;
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
