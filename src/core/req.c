/* A request's life, whatever protocol carries it and whatever route answers it: dispatch (the lookup through the
 * worker's router, the journal's arrival, the handler's on_head), a handler's timer, the whole-response steps
 * for a protocol without its own, the 405 answer, and the release (handler state, timer, journal, the table). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* cb__res_fixed for a protocol without a step of its own for it (HTTP/2): head, data, end. */
void cb__res_fixed_steps(cb__req_t *r, const cb__fixed_t *f) {
  r->proto->head(r, f->status, f->ctype, f->extra, f->nextra, (int64_t)f->len);
  r->proto->data(r, f->body, f->len, f->flags);
  r->proto->end(r);
}

static void method_not_allowed_end(cb__req_t *r) {
  char methods[80];
  cb__hdr_t allow = {STR("allow"), methods, cb__allow_string(r->allow, methods)};
  CB__STAT_INC(r->conn->w, status_405);
  cb__res_head(r, 405, NULL, &allow, 1, 0);
  cb__res_end(r);
}


const cb__handler_t cb__h_method_not_allowed = {.on_end = method_not_allowed_end};

static void req_timer_closed(uv_handle_t *h) { free(h); }

static void req_timer_fired(uv_timer_t *t) {
  cb__req_t *r = t->data;
  if (r == NULL) return;
  cb__conn_t *c = r->conn;
  r->timer = NULL;
  t->data = NULL;
  uv_close((uv_handle_t *)t, req_timer_closed);
  r->timer_fn(r);
  cb__conn_after(c);
}

int cb__req_timer(cb__req_t *r, unsigned ms, cb__timer_fn fn) {
  uv_timer_t *t = malloc(sizeof *t);
  if (t == NULL) return UV_ENOMEM;
  uv_timer_init(&r->conn->w->loop, t);
  t->data = r;
  r->timer = t;
  r->timer_fn = fn;
  uv_timer_start(t, req_timer_fired, ms, 0);
  return 0;
}

void cb__req_release(cb__req_t *r) {
  if (r->timer != NULL) { /* the request went away before its timer: the timer must not fire into it */
    r->timer->data = NULL;
    uv_close((uv_handle_t *)r->timer, req_timer_closed);
    r->timer = NULL;
  }
  if (r->handler != NULL && r->handler->on_free != NULL) r->handler->on_free(r);
  r->handler = NULL;
  if (r->jseq != 0) cb__journal_record(r->conn->w, r);
  /* Last: the held body, and the table, whose bytes the response may reference until the output queued so far
   * has left (the router's release). A fixture route's request holds neither. */
  if (r->table != NULL || __builtin_expect(r->mbody != NULL || r->mjson != NULL, 0)) r->conn->w->router->release(r);
}

void cb__req_dispatch(cb__req_t *r) {
  cb__worker_t *w = r->conn->w;
  CB__STAT_INC(w, requests);
  w->router->dispatch(w, r);
  if (w->journal != NULL) cb__journal_arrive(w, r);
  if (r->handler->on_head) r->handler->on_head(r);
}
