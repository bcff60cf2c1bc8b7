/* TEMPORARY, for the i26-proxy branch only: the recorder's interface as the issue-26 contract declares it
 * (part 3, src/kinds/record.h, owned by the record branch). proxy.c includes this file until the record branch
 * is merged; the lead then drops this file and record_stub.c and includes "kinds/record.h" instead. */
#ifndef CB_RECORD_STUB_H
#define CB_RECORD_STUB_H

#include "kinds/kinds.h"

typedef struct {
  const cb_proxy_t *opts;            /* the proxy stub's options (record_headers, record_status, body files) */
  const char *method; size_t method_len;
  const char *target; size_t target_len;      /* as received: path, then '?' query */
  const cb__hdr_t *req_headers; int nreq_headers;
  int status;
  const cb__hdr_t *res_headers; int nres_headers; /* already without hop-by-hop, date, framing */
  const char *body; size_t body_len;            /* the whole de-chunked answer body */
} cb__exchange_t;

/* Captures one exchange (any thread; a mutex inside). 0, or UV_ENOMEM. Deduplicated by match key. */
int cb__record_exchange(cb_server_t *srv, const cb__exchange_t *x);
/* The stand-in's count of calls (record_stub.c), for the proxy's tests. */
extern uint64_t cb__record_stub_calls;

#endif
