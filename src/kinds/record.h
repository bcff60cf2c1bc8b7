/* kinds/record.h: the recorder (docs/record.md). A proxy stub with `record` hands every complete exchange to
 * cb__record_exchange(); the recorder keeps each distinct one as a stub (match: method, path, query, chosen
 * request headers; response: status, headers, body) in arrival order, deduplicated by its match. The public
 * calls that read, save and clear the recordings (cb_server_recorded_json, cb_server_save_stubs,
 * cb_server_recorded_clear) live in record.c too. */
#ifndef CB_KINDS_RECORD_H
#define CB_KINDS_RECORD_H

#include "base/base.h"

typedef struct {
  const cb_proxy_t *opts; /* the proxy stub's options (record_headers, record_status, body files) */
  const char *method;
  size_t method_len;
  const char *target; /* as received: path, then '?' query */
  size_t target_len;
  const cb__hdr_t *req_headers;
  int nreq_headers;
  int status;
  const cb__hdr_t *res_headers; /* already without hop-by-hop, date, framing */
  int nres_headers;
  const char *body; /* the whole de-chunked answer body */
  size_t body_len;
} cb__exchange_t;

/* Captures one exchange. Any thread (a mutex inside, held for a lookup and an insert, never for a copy); the
 * bytes are copied, x may be freed on return. Returns 0 (recorded, counted as a duplicate, filtered out by
 * record_status, or skipped as not expressible as a stub: record_skipped), or UV_ENOMEM, UV_EINVAL (NULL). */
int cb__record_exchange(cb_server_t *srv, const cb__exchange_t *x);

/* The server's recorder: made at start (a mutex and zeros: nothing is allocated until the first recording),
 * freed with the server. record_to: the file POST /recorded/save writes (copied), or NULL. 0 or UV_ENOMEM. */
typedef struct cb__recorder_s cb__recorder_t;
int cb__recorder_new(const char *record_to, cb__recorder_t **out);
void cb__recorder_free(cb__recorder_t *rec);

/* The file given as cfg.record_to, or NULL. */
const char *cb__recorder_file(const cb__recorder_t *rec);

/* Counts for cb_stats_t and the tests: recordings kept, duplicates counted, exchanges skipped, and the bytes the
 * recorder holds (every recording's one allocation, the order array and the dedup table). */
typedef struct {
  uint64_t recorded, duplicates, skipped, bytes;
} cb__record_counts_t;
void cb__record_counts(const cb_server_t *srv, cb__record_counts_t *out);

#endif
