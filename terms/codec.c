/* The one term codec of the NIF and the port program (codec.h): written against term.h's reader and writer, so
 * it knows neither enif nor ei. The key tables at the top are the only place the keys of these terms are
 * spelled in C; the names of refused fields come from the library's field table (cb_field_names()).
 */
#include "codec.h"

#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- key tables ----
 *
 * Each enum lists the keys of one term in the order of its table, so a key's index is its enum value. */

enum { M_NAME, M_METHODS, M_PATH, M_HEADERS, M_QUERY, M_PRIORITY, M_BODY, M_SCENARIO, M_COUNT };
static const char *const match_names[] = {"name", "methods", "path", "headers", "query", "priority", "body",
                                          "scenario", NULL};
static const cb_codec_keys_t match_keys = {"match", match_names, M_SCENARIO};

enum { R_STATUS, R_HEADERS, R_BODY, R_DELAY_MS, R_CHUNKS, R_TIMES, R_FAULT, R_DELAY, R_TEMPLATE, R_COUNT };
static const char *const response_names[] = {"status", "headers", "body", "delay_ms", "chunks", "times", "fault",
                                             "delay", "template", NULL};
static const cb_codec_keys_t response_keys = {"response", response_names, R_FAULT};

/* A proxy response (docs/proxy.md): the proxy's options, and of a response's keys those that act on the proxied
 * answer. */
enum { PR_PROXY, PR_DELAY_MS, PR_TIMES, PR_FAULT, PR_COUNT };
static const char *const proxy_response_names[] = {"proxy", "delay_ms", "times", "fault", NULL};
static const cb_codec_keys_t proxy_response_keys = {"proxy_response", proxy_response_names, PR_FAULT};
/* The keys from P_CA_FILE on are there only when the stub gave them (an https:// upstream's), and pipeline only
 * when above 1 (so that a stub without it is the term it was). */
enum { P_TO, P_PROTOCOL, P_TIMEOUT_MS, P_MAX_BODY_BYTES, P_RECORD, P_RECORD_HEADERS, P_RECORD_BODY_FILE_BYTES,
       P_RECORD_STATUS, P_INSECURE, P_CA_FILE, P_CA_PEM, P_SERVER_NAME, P_PIPELINE, P_COUNT };
static const char *const proxy_names[] = {"to", "protocol", "timeout_ms", "max_body_bytes", "record",
                                          "record_headers", "record_body_file_bytes", "record_status", "insecure",
                                          "ca_file", "ca_pem", "server_name", "pipeline", NULL};
static const cb_codec_keys_t proxy_keys = {"proxy", proxy_names, P_CA_FILE};

enum { S_RESPONSES, S_AFTER, S_TIMES, S_COUNT };
static const char *const sequence_names[] = {"responses", "after", "times", NULL};
static const cb_codec_keys_t sequence_keys = {"sequence", sequence_names, S_COUNT};

/* pool is the server process's (an {M, F} target's processes): known, not the engine's. */
enum { H_TIMEOUT_MS, H_BATCH, H_BODY, H_POOL, H_COUNT };
static const char *const handler_names[] = {"timeout_ms", "batch", "body", "pool", NULL};
static const cb_codec_keys_t handler_keys = {"handler", handler_names, H_POOL};

enum { F_SINCE, F_METHOD, F_PATH, F_STUB, F_COUNT };
static const char *const filter_names[] = {"since", "method", "path", "stub", NULL};
static const cb_codec_keys_t filter_keys = {"filter", filter_names, F_COUNT};

typedef enum {
  E_SEQ, E_TIME_US, E_PROTO, E_CONN, E_STREAM, E_PEER, E_METHOD, E_PATH, E_QUERY, E_HEADERS, E_BODY,
  E_BODY_LENGTH, E_ROUTE, E_STUB, E_STATUS, E_BYTES_OUT, E_DURATION_US, E_FAULT, E_DELAY_MS, E_TLS, E_UPSTREAM,
  E_COUNT
} entry_key;
static const char *const entry_names[] = {"seq", "time_us", "proto", "conn", "stream", "peer", "method", "path",
                                          "query", "headers", "body", "body_length", "route", "stub", "status",
                                          "bytes_out", "duration_us", "fault", "delay_ms", "tls", "upstream",
                                          NULL};
static const cb_codec_keys_t entry_keys = {"entry", entry_names, E_COUNT};

/* An entry's tls: the TLS session of its connection (undefined over cleartext). client_cert is the client's
 * certificate (undefined: none asked for or sent). */
typedef enum { T_VERSION, T_CIPHER, T_SNI, T_ALPN, T_RESUMED, T_CLIENT_CERT, T_COUNT } tls_key;
static const char *const tls_names[] = {"version", "cipher", "sni", "alpn", "resumed", "client_cert", NULL};
static const cb_codec_keys_t tls_keys = {"tls", tls_names, T_COUNT};
typedef enum { U_TO, U_STATUS, U_ERROR, U_COUNT } upstream_key;
static const char *const upstream_names[] = {"to", "status", "error", NULL};
static const cb_codec_keys_t upstream_keys = {"upstream", upstream_names, U_COUNT};
typedef enum { K_SUBJECT, K_SHA256, K_COUNT } client_cert_key;
static const char *const client_cert_names[] = {"subject", "sha256", NULL};
static const cb_codec_keys_t client_cert_keys = {"client_cert", client_cert_names, K_COUNT};

typedef enum { I_ID, I_NAME, I_HITS, I_LEFT, I_COUNT } info_key;
static const char *const info_names[] = {"id", "name", "hits", "left", NULL};
static const cb_codec_keys_t info_keys = {"stub_info", info_names, I_COUNT};

/* The counters: cb_stats_t's scalar fields by their own names, then the three maps. */
#define STATS_SCALARS(X)                                                                                          \
  X(conns_accepted) X(conns_open) X(conns_closed) X(requests) X(bytes_read) X(bytes_written) X(status_400)     \
  X(status_404) X(status_405) X(status_413) X(status_431) X(timeouts) X(resets) X(h2_errors) X(h2_parked)      \
  X(h2_woken) X(accept_backoffs) X(faults) X(handler_unavailable) X(handler_timeouts) X(handler_overflows)    \
  X(tls_handshakes_failed) X(tls_handshakes_refused) X(tls_ktls) X(tls_handshakes_full) X(tls_handshakes_resumed) X(proxy_requests)     \
  X(proxy_upstream_connects) X(proxy_upstream_reused) X(proxy_502) X(proxy_504) X(recorded)                    \
  X(recorded_duplicates) X(record_skipped)
#define STATS_NAME(f) #f,
#define STATS_OFFSET(f) offsetof(cb_stats_t, f),
static const char *const stats_names[] = {STATS_SCALARS(STATS_NAME) "requests_by_route", "conns_by_proto",
                                          "requests_by_proto", NULL};
static const size_t stats_offsets[] = {STATS_SCALARS(STATS_OFFSET)};
#define NSCALARS (sizeof stats_offsets / sizeof stats_offsets[0])
static const cb_codec_keys_t stats_keys = {"stats", stats_names, NSCALARS + 3};

_Static_assert(sizeof match_names / sizeof *match_names == M_COUNT + 1, "match keys");
_Static_assert(sizeof response_names / sizeof *response_names == R_COUNT + 1, "response keys");
_Static_assert(sizeof sequence_names / sizeof *sequence_names == S_COUNT + 1, "sequence keys");
_Static_assert(sizeof proxy_response_names / sizeof *proxy_response_names == PR_COUNT + 1, "proxy response keys");
_Static_assert(sizeof proxy_names / sizeof *proxy_names == P_COUNT + 1, "proxy keys");
_Static_assert(sizeof handler_names / sizeof *handler_names == H_COUNT + 1, "handler keys");
_Static_assert(sizeof filter_names / sizeof *filter_names == F_COUNT + 1, "filter keys");
_Static_assert(sizeof entry_names / sizeof *entry_names == E_COUNT + 1, "entry keys");
_Static_assert(sizeof info_names / sizeof *info_names == I_COUNT + 1, "stub info keys");
_Static_assert(sizeof tls_names / sizeof *tls_names == T_COUNT + 1, "tls keys");
_Static_assert(sizeof client_cert_names / sizeof *client_cert_names == K_COUNT + 1, "client_cert keys");

const cb_codec_keys_t *const *cb_codec_key_tables(void) {
  static const cb_codec_keys_t *const all[] = {&match_keys,  &response_keys, &sequence_keys, &handler_keys,
                                               &filter_keys, &entry_keys,    &tls_keys,      &info_keys,
                                               &stats_keys,  &client_cert_keys, &proxy_response_keys,
                                               &proxy_keys,  &upstream_keys, NULL};
  return all;
}

/* ---- reading ---- */

int cb_codec_is_atom(cb_term_in_t *in, cb_term_t t, const char *name) {
  char buf[32];
  return in->ops->atom(in, t, buf, sizeof buf) >= 0 && strcmp(buf, name) == 0;
}

/* Which of `names` (NULL-terminated) the atom t is: its index, or -1. */
static int atom_of(cb_term_in_t *in, cb_term_t t, const char *const *names) {
  char buf[32];
  if (in->ops->atom(in, t, buf, sizeof buf) < 0) return -1;
  for (int i = 0; names[i] != NULL; i++)
    if (strcmp(buf, names[i]) == 0) return i;
  return -1;
}

int cb_codec_binary(cb_term_in_t *in, cb_term_t t, cb_str_t *out) { return in->ops->binary(in, t, out); }

int cb_codec_bool(cb_term_in_t *in, cb_term_t t, int *b) {
  static const char *const names[] = {"false", "true", NULL};
  return (*b = atom_of(in, t, names)) < 0 ? -1 : 0;
}

/* An integer from 0 to max. */
static int get_uint(cb_term_in_t *in, cb_term_t t, uint64_t max, uint64_t *out) {
  int neg;
  return in->ops->integer(in, t, &neg, out) == 0 && !neg && *out <= max ? 0 : -1;
}

static int get_u32(cb_term_in_t *in, cb_term_t t, unsigned *out) {
  uint64_t u;
  if (get_uint(in, t, UINT32_MAX, &u) != 0) return -1;
  *out = (unsigned)u;
  return 0;
}

/* Any C int. */
static int get_int(cb_term_in_t *in, cb_term_t t, int *out) {
  int neg;
  uint64_t mag;
  if (in->ops->integer(in, t, &neg, &mag) != 0 || mag > (neg ? (uint64_t)INT_MAX + 1 : (uint64_t)INT_MAX)) return -1;
  *out = neg ? (int)(-(int64_t)mag) : (int)mag;
  return 0;
}

int cb_codec_id(cb_term_in_t *in, cb_term_t t, uint64_t *id) {
  int neg;
  switch (in->ops->integer(in, t, &neg, id)) {
    case 0:
      if (neg) *id = 0;
      return 0;
    case 1: *id = 0; return 0;
    default: return -1;
  }
}

/* A binary, or undefined ({NULL, 0}). */
static int get_opt_bin(cb_term_in_t *in, cb_term_t t, cb_str_t *out) {
  if (cb_codec_is_atom(in, t, "undefined")) {
    *out = (cb_str_t){NULL, 0};
    return 0;
  }
  return in->ops->binary(in, t, out);
}

/* Looks up every key of k in map t: vals[i], and bit i of *present when it is there. -1 when t is not a map, a
 * required key is missing, or t has a key that k does not list (found and size differ: the ei backend's map with
 * a key twice is refused the same way). */
static int get_keys(cb_term_in_t *in, cb_term_t t, const cb_codec_keys_t *k, cb_term_t *vals, unsigned *present) {
  long size = in->ops->map_size(in, t), found = 0;
  if (size < 0) return -1;
  *present = 0;
  for (int i = 0; k->keys[i] != NULL; i++) {
    if (in->ops->map_get(in, t, k->keys[i], &vals[i])) {
      *present |= 1u << i;
      found++;
    } else if (i < k->required) {
      return -1;
    }
  }
  return found == size ? 0 : -1;
}

/* `any`, or a list of 1..16 method names: CB_METHOD_* bits (0: any). */
static int get_methods(cb_term_in_t *in, cb_term_t t, unsigned *bits) {
  cb_term_list_t it;
  cb_term_t head;
  *bits = 0;
  if (cb_codec_is_atom(in, t, "any")) return 0;
  long n = in->ops->list(in, t, &it);
  if (n < 1 || n > 16) return -1;
  while (in->ops->next(in, &it, &head)) {
    cb_str_t name;
    unsigned bit;
    if (in->ops->binary(in, head, &name) != 0 || (bit = cb_method_bit(name)) == 0) return -1;
    *bits |= bit;
  }
  return 0;
}

/* [{Name, present | {equal, Value}}], at most CB_MAX_MATCHERS. */
static int get_matchers(cb_term_in_t *in, cb_term_t t, cb_matcher_t *out, size_t *n) {
  cb_term_list_t it;
  cb_term_t head, pair[2], eq[2];
  long len = in->ops->list(in, t, &it);
  if (len < 0 || len > CB_MAX_MATCHERS) return -1;
  for (*n = 0; in->ops->next(in, &it, &head); (*n)++) {
    cb_matcher_t *m = &out[*n];
    if (in->ops->tuple(in, head, pair, 2) != 2 || in->ops->binary(in, pair[0], &m->name) != 0) return -1;
    if (cb_codec_is_atom(in, pair[1], "present")) {
      m->value = (cb_str_t){NULL, 0};
    } else if (in->ops->tuple(in, pair[1], eq, 2) != 2 || !cb_codec_is_atom(in, eq[0], "equal") ||
               in->ops->binary(in, eq[1], &m->value) != 0) {
      return -1;
    }
  }
  return 0;
}

/* [{Name, Value}] of binaries, at most CB_MAX_HEADERS. */
static int get_headers(cb_term_in_t *in, cb_term_t t, cb_header_t *out, size_t *n) {
  cb_term_list_t it;
  cb_term_t head, pair[2];
  long len = in->ops->list(in, t, &it);
  if (len < 0 || len > CB_MAX_HEADERS) return -1;
  for (*n = 0; in->ops->next(in, &it, &head); (*n)++)
    if (in->ops->tuple(in, head, pair, 2) != 2 || in->ops->binary(in, pair[0], &out[*n].name) != 0 ||
        in->ops->binary(in, pair[1], &out[*n].value) != 0)
      return -1;
  return 0;
}

/* match.body: `any` or {equal | contains | regex | json | json_subset, Bytes}. */
static int get_body_match(cb_term_in_t *in, cb_term_t t, cb_body_match_t *out) {
  static const char *const kinds[] = {"equal", "contains", "regex", "json", "json_subset", NULL};
  static const cb_match_body_kind values[] = {CB_MATCH_BODY_EQUAL, CB_MATCH_BODY_CONTAINS, CB_MATCH_BODY_REGEX,
                                              CB_MATCH_BODY_JSON, CB_MATCH_BODY_JSON_SUBSET};
  cb_term_t e[2];
  int k;
  out->kind = CB_MATCH_BODY_ANY;
  out->value = (cb_str_t){NULL, 0};
  if (cb_codec_is_atom(in, t, "any")) return 0;
  if (in->ops->tuple(in, t, e, 2) != 2 || (k = atom_of(in, e[0], kinds)) < 0) return -1;
  out->kind = values[k];
  return in->ops->binary(in, e[1], &out->value);
}

/* scenario: {Name, When | undefined, Then | undefined}. */
static int get_scenario(cb_term_in_t *in, cb_term_t t, cb_stub_t *st) {
  cb_term_t e[3];
  return in->ops->tuple(in, t, e, 3) == 3 && in->ops->binary(in, e[0], &st->scenario) == 0 &&
                 get_opt_bin(in, e[1], &st->when) == 0 && get_opt_bin(in, e[2], &st->then) == 0
             ? 0
             : -1;
}

int cb_codec_match(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s) {
  cb_term_t v[M_COUNT];
  unsigned present;
  cb_stub_t *st = &s->st;
  memset(s, 0, sizeof *s);
  if (get_keys(in, t, &match_keys, v, &present) != 0 || get_opt_bin(in, v[M_NAME], &st->name) != 0 ||
      get_methods(in, v[M_METHODS], &st->match.methods) != 0 || in->ops->binary(in, v[M_PATH], &st->match.path) != 0 ||
      get_matchers(in, v[M_HEADERS], s->headers, &st->match.nheaders) != 0 ||
      get_matchers(in, v[M_QUERY], s->query, &st->match.nquery) != 0 ||
      get_int(in, v[M_PRIORITY], &st->match.priority) != 0 || get_body_match(in, v[M_BODY], &st->match.body) != 0)
    return -1;
  st->match.headers = s->headers;
  st->match.query = s->query;
  return (present & 1u << M_SCENARIO) ? get_scenario(in, v[M_SCENARIO], st) : 0;
}

/* {data, Bin} | {bytes, N} | {file, Path} */
static int get_body(cb_term_in_t *in, cb_term_t t, cb_response_t *res) {
  static const char *const kinds[] = {"data", "bytes", "file", NULL};
  cb_term_t e[2];
  if (in->ops->tuple(in, t, e, 2) != 2) return -1;
  switch (atom_of(in, e[0], kinds)) {
    case 0: res->body_kind = CB_BODY_BYTES; return in->ops->binary(in, e[1], &res->body);
    case 1: res->body_kind = CB_BODY_GENERATED; return get_uint(in, e[1], UINT64_MAX, &res->body_size);
    case 2:
      res->body_kind = CB_BODY_FILE;
      return in->ops->binary(in, e[1], &res->body) != 0 || res->body.len == 0 ? -1 : 0;
    default: return -1;
  }
}

/* none | {N, IntervalMs}, N >= 1 */
static int get_chunks(cb_term_in_t *in, cb_term_t t, cb_response_t *res) {
  cb_term_t e[2];
  res->chunks = res->interval_ms = 0;
  if (cb_codec_is_atom(in, t, "none")) return 0;
  return in->ops->tuple(in, t, e, 2) == 2 && get_u32(in, e[0], &res->chunks) == 0 && res->chunks > 0 &&
                 get_u32(in, e[1], &res->interval_ms) == 0
             ? 0
             : -1;
}

/* infinity (0) | N >= 1 */
static int get_times(cb_term_in_t *in, cb_term_t t, uint64_t *times) {
  *times = 0;
  if (cb_codec_is_atom(in, t, "infinity")) return 0;
  return get_uint(in, t, UINT64_MAX, times) == 0 && *times > 0 ? 0 : -1;
}

/* delay: {uniform, Min, Max, Seed} | {lognormal, Median, Sigma (a float), Seed}; delay_ms is Min or the median. */
static int get_delay(cb_term_in_t *in, cb_term_t t, cb_response_t *res) {
  static const char *const dists[] = {"uniform", "lognormal", NULL};
  cb_term_t e[4];
  int dist;
  if (in->ops->tuple(in, t, e, 4) != 4 || (dist = atom_of(in, e[0], dists)) < 0 ||
      get_u32(in, e[1], &res->delay_ms) != 0 || get_uint(in, e[3], UINT64_MAX, &res->delay_seed) != 0)
    return -1;
  res->delay_dist = dist == 0 ? CB_DELAY_UNIFORM : CB_DELAY_LOGNORMAL;
  return dist == 0 ? get_u32(in, e[2], &res->delay_max_ms) : in->ops->real(in, e[2], &res->delay_sigma);
}

/* One response (not a sequence); its headers go to hbuf. */
static int get_single(cb_term_in_t *in, cb_term_t t, cb_response_t *res, cb_header_t *hbuf) {
  cb_term_t v[R_COUNT];
  unsigned present;
  uint64_t status;
  if (get_keys(in, t, &response_keys, v, &present) != 0 || get_uint(in, v[R_STATUS], 599, &status) != 0 ||
      get_headers(in, v[R_HEADERS], hbuf, &res->nheaders) != 0 || get_body(in, v[R_BODY], res) != 0 ||
      get_u32(in, v[R_DELAY_MS], &res->delay_ms) != 0 || get_chunks(in, v[R_CHUNKS], res) != 0 ||
      get_times(in, v[R_TIMES], &res->times) != 0)
    return -1;
  res->status = (int)status;
  res->headers = hbuf;
  /* fault: undefined, or the spec text (docs/faults.md), checked again by the engine. */
  if ((present & 1u << R_FAULT) && get_opt_bin(in, v[R_FAULT], &res->fault) != 0) return -1;
  if (present & 1u << R_TEMPLATE) {
    if (!cb_codec_is_atom(in, v[R_TEMPLATE], "true")) return -1;
    res->templated = 1;
  }
  /* After delay_ms: a drawn delay's lower end or median replaces it. */
  return (present & 1u << R_DELAY) ? get_delay(in, v[R_DELAY], res) : 0;
}

/* A sequence: #{responses => [Response], after => last | cycle | not_found, times}. The responses and their
 * headers live in one block (s->mem), sized by a first walk that counts the headers. */
static int get_sequence(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s) {
  static const char *const afters[] = {"last", "cycle", "not_found", NULL};
  static const cb_after after_values[] = {CB_AFTER_LAST, CB_AFTER_CYCLE, CB_AFTER_NOT_FOUND};
  cb_term_t v[S_COUNT], item, hs;
  cb_term_list_t it, hit;
  unsigned present;
  int after;
  if (get_keys(in, t, &sequence_keys, v, &present) != 0 || (after = atom_of(in, v[S_AFTER], afters)) < 0 ||
      get_times(in, v[S_TIMES], &s->st.response.times) != 0)
    return -1;
  long n = in->ops->list(in, v[S_RESPONSES], &it);
  if (n < 1 || n > CB_MAX_RESPONSES) return -1;
  size_t nh = 0;
  while (in->ops->next(in, &it, &item)) {
    long k = in->ops->map_get(in, item, "headers", &hs) ? in->ops->list(in, hs, &hit) : -1;
    if (k < 0 || k > CB_MAX_HEADERS) return -1;
    nh += (size_t)k;
  }
  cb_response_t *rs = calloc(1, (size_t)n * sizeof *rs + (nh ? nh : 1) * sizeof(cb_header_t));
  if (rs == NULL) return -1;
  s->mem = rs;
  cb_header_t *hbuf = (cb_header_t *)(rs + n);
  in->ops->list(in, v[S_RESPONSES], &it);
  for (long i = 0; in->ops->next(in, &it, &item); i++) {
    if (get_single(in, item, &rs[i], hbuf) != 0) return -1;
    hbuf += rs[i].nheaders;
  }
  s->st.responses = rs;
  s->st.nresponses = (size_t)n;
  s->st.after = after_values[after];
  return 0;
}

/* proxy: #{to, protocol => http1 | h2c, timeout_ms, max_body_bytes, record, record_headers => [Bin],
 * record_body_file_bytes, record_status => [Status], insecure} and, when given, ca_file, ca_pem and server_name
 * as binaries and pipeline (cbench_spec's canonical form). */
static int get_proxy(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s) {
  static const char *const protocols[] = {"http1", "h2c", NULL}; /* CB_PROXY_HTTP1, CB_PROXY_H2C */
  cb_term_t v[P_COUNT], item;
  cb_term_list_t it;
  unsigned present;
  cb_proxy_t *p = &s->proxy;
  uint64_t u;
  if (get_keys(in, t, &proxy_keys, v, &present) != 0 || in->ops->binary(in, v[P_TO], &p->to) != 0 ||
      (p->protocol = atom_of(in, v[P_PROTOCOL], protocols)) < 0 || get_u32(in, v[P_TIMEOUT_MS], &p->timeout_ms) != 0 ||
      get_uint(in, v[P_MAX_BODY_BYTES], UINT64_MAX, &p->max_body_bytes) != 0 ||
      cb_codec_bool(in, v[P_RECORD], &p->record) != 0 ||
      get_uint(in, v[P_RECORD_BODY_FILE_BYTES], UINT64_MAX, &p->record_body_file_bytes) != 0 ||
      cb_codec_bool(in, v[P_INSECURE], &p->insecure) != 0)
    return -1;
  cb_str_t *tls_strs[] = {&p->ca_file, &p->ca_pem, &p->server_name};
  for (int k = 0; k < 3; k++)
    if ((present & 1u << (P_CA_FILE + k)) && in->ops->binary(in, v[P_CA_FILE + k], tls_strs[k]) != 0) return -1;
  if ((present & 1u << P_PIPELINE) && get_u32(in, v[P_PIPELINE], &p->pipeline) != 0) return -1;
  long n = in->ops->list(in, v[P_RECORD_HEADERS], &it);
  if (n < 0 || n > CB_CODEC_MAX_RECORD_HEADERS) return -1;
  for (p->nrecord_headers = 0; in->ops->next(in, &it, &item); p->nrecord_headers++)
    if (in->ops->binary(in, item, &s->record_headers[p->nrecord_headers]) != 0) return -1;
  n = in->ops->list(in, v[P_RECORD_STATUS], &it);
  if (n < 0 || n > CB_CODEC_MAX_RECORD_STATUS) return -1;
  for (p->nrecord_status = 0; in->ops->next(in, &it, &item); p->nrecord_status++) {
    if (get_uint(in, item, 999, &u) != 0) return -1;
    s->record_status[p->nrecord_status] = (int)u;
  }
  p->record_headers = s->record_headers;
  p->record_status = s->record_status;
  s->st.response.proxy = p;
  return 0;
}

/* #{proxy, delay_ms, times} and optionally fault. */
static int get_proxy_response(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s) {
  cb_term_t v[PR_COUNT];
  unsigned present;
  cb_response_t *res = &s->st.response;
  if (get_keys(in, t, &proxy_response_keys, v, &present) != 0 || get_u32(in, v[PR_DELAY_MS], &res->delay_ms) != 0 ||
      get_times(in, v[PR_TIMES], &res->times) != 0 || get_proxy(in, v[PR_PROXY], s) != 0)
    return -1;
  return (present & 1u << PR_FAULT) ? get_opt_bin(in, v[PR_FAULT], &res->fault) : 0;
}

int cb_codec_response(cb_term_in_t *in, cb_term_t t, cb_codec_stub_t *s) {
  cb_term_t v;
  if (in->ops->map_get(in, t, "responses", &v)) return get_sequence(in, t, s);
  if (in->ops->map_get(in, t, "proxy", &v)) return get_proxy_response(in, t, s);
  return get_single(in, t, &s->st.response, s->res_headers);
}

void cb_codec_stub_free(cb_codec_stub_t *s) {
  free(s->mem);
  s->mem = NULL;
}

int cb_codec_timeout(cb_term_in_t *in, cb_term_t t, unsigned *timeout_ms) {
  uint64_t u;
  if (get_uint(in, t, 3600000, &u) != 0 || u == 0) return -1;
  *timeout_ms = (unsigned)u;
  return 0;
}

int cb_codec_handler_opts(cb_term_in_t *in, cb_term_t t, unsigned *timeout_ms, int *batch, int *stream) {
  static const char *const bodies[] = {"whole", "stream", NULL};
  cb_term_t v[H_COUNT];
  unsigned present;
  uint64_t pool;
  if (get_keys(in, t, &handler_keys, v, &present) != 0 || cb_codec_timeout(in, v[H_TIMEOUT_MS], timeout_ms) != 0 ||
      cb_codec_bool(in, v[H_BATCH], batch) != 0 || (*stream = atom_of(in, v[H_BODY], bodies)) < 0)
    return -1;
  return (present & 1u << H_POOL) && (get_uint(in, v[H_POOL], 1024, &pool) != 0 || pool == 0) ? -1 : 0;
}

int cb_codec_filter(cb_term_in_t *in, cb_term_t t, cb_request_filter_t *f, int *none) {
  cb_term_t v[F_COUNT];
  unsigned present;
  memset(f, 0, sizeof *f);
  *none = 0;
  if (get_keys(in, t, &filter_keys, v, &present) != 0 || get_uint(in, v[F_SINCE], UINT64_MAX, &f->since) != 0 ||
      get_opt_bin(in, v[F_METHOD], &f->method) != 0 || get_opt_bin(in, v[F_PATH], &f->path) != 0)
    return -1;
  if (cb_codec_is_atom(in, v[F_STUB], "undefined")) return 0;
  /* A stub id that cannot exist (0, negative, 2^64 and more) matches no entry. */
  if (cb_codec_id(in, v[F_STUB], &f->stub_id) != 0) return -1;
  *none = f->stub_id == 0;
  return 0;
}

/* ---- handler replies ---- */

static const char *const reply_ops[] = {"reply", "stream", "send", "finish", "unavailable", NULL};
static const cb_reply_op reply_op_values[] = {CB_REPLY_FULL, CB_REPLY_STREAM, CB_REPLY_SEND, CB_REPLY_FINISH,
                                              CB_REPLY_UNAVAILABLE};
static const int reply_op_arity[] = {5, 4, 3, 2, 2};

/* One item; its headers go to hbuf from *nh on. */
static int get_reply(cb_term_in_t *in, cb_term_t t, cb_reply_t *r, cb_header_t *hbuf, size_t *nh) {
  cb_term_t e[5], head, pair[2];
  cb_term_list_t it;
  int arity = in->ops->tuple(in, t, e, 5), op;
  memset(r, 0, sizeof *r);
  if (arity < 2 || get_uint(in, e[0], UINT64_MAX, &r->ref) != 0 || (op = atom_of(in, e[1], reply_ops)) < 0 ||
      arity != reply_op_arity[op])
    return -1;
  r->op = reply_op_values[op];
  if (r->op == CB_REPLY_SEND) return in->ops->iodata(in, e[2], &r->body);
  if (r->op == CB_REPLY_FINISH || r->op == CB_REPLY_UNAVAILABLE) return 0;
  /* Any C int: cb_server_reply() checks the range (200..599) and names it. */
  if (get_int(in, e[2], &r->status) != 0) return -1;
  long n = in->ops->list(in, e[3], &it);
  if (n < 0 || n > CB_MAX_HEADERS) return -1;
  r->headers = n ? hbuf + *nh : NULL;
  r->nheaders = (size_t)n;
  for (; in->ops->next(in, &it, &head); (*nh)++)
    if (in->ops->tuple(in, head, pair, 2) != 2 || in->ops->iodata(in, pair[0], &hbuf[*nh].name) != 0 ||
        in->ops->iodata(in, pair[1], &hbuf[*nh].value) != 0)
      return -1;
  return r->op == CB_REPLY_STREAM ? 0 : in->ops->iodata(in, e[4], &r->body);
}

int cb_codec_replies(cb_term_in_t *in, cb_term_t t, cb_codec_replies_t *r) {
  cb_term_list_t it, hit;
  cb_term_t item, e[5];
  r->items = NULL;
  r->headers = NULL;
  r->n = 0;
  long n = in->ops->list(in, t, &it);
  if (n <= 0) return -1;
  /* Room for every item's headers, counted first: a burst takes two allocations at most. */
  size_t nh = 0;
  while (in->ops->next(in, &it, &item)) {
    long k = in->ops->tuple(in, item, e, 5) >= 4 ? in->ops->list(in, e[3], &hit) : 0;
    if (k > CB_MAX_HEADERS) return -1;
    nh += k > 0 ? (size_t)k : 0;
  }
  r->items = (size_t)n <= sizeof r->items_here / sizeof *r->items_here ? r->items_here
                                                                       : malloc((size_t)n * sizeof *r->items);
  r->headers = nh <= sizeof r->headers_here / sizeof *r->headers_here ? r->headers_here
                                                                     : malloc(nh * sizeof *r->headers);
  if (r->items == NULL || r->headers == NULL) return -1;
  in->ops->list(in, t, &it);
  nh = 0;
  for (r->n = 0; in->ops->next(in, &it, &item); r->n++)
    if (get_reply(in, item, &r->items[r->n], r->headers, &nh) != 0) return -1;
  return 0;
}

void cb_codec_replies_free(cb_codec_replies_t *r) {
  if (r->items != r->items_here) free(r->items);
  if (r->headers != r->headers_here) free(r->headers);
  r->items = NULL;
  r->headers = NULL;
}

/* ---- writing ---- */

static void atom(cb_term_out_t *out, const char *name) { out->ops->atom(out, name, strlen(name)); }
static void bin(cb_term_out_t *out, cb_str_t s) { out->ops->binary(out, s.len ? s.ptr : "", s.len); }
static void key(cb_term_out_t *out, const cb_codec_keys_t *k, int i) { atom(out, k->keys[i]); }

void cb_codec_error_name(int err, char *buf, size_t cap) {
  const char *name = cb_err_name(err);
  size_t i;
  if (strncmp(name, "CB_", 3) == 0) name += 3;
  for (i = 0; name[i] != '\0' && i + 1 < cap; i++) buf[i] = (char)tolower((unsigned char)name[i]);
  buf[i] = '\0';
}

void cb_codec_error_atom(cb_term_out_t *out, const char *name) {
  out->ops->tuple(out, 2);
  atom(out, "error");
  atom(out, name);
}

void cb_codec_error(cb_term_out_t *out, int err) {
  char name[64];
  cb_codec_error_name(err, name, sizeof name);
  cb_codec_error_atom(out, name);
}

void cb_codec_result(cb_term_out_t *out, int err) {
  if (err < 0)
    cb_codec_error(out, err);
  else
    atom(out, "ok");
}

void cb_codec_add_result(cb_term_out_t *out, int err, uint64_t id, const cb_match_t *m, const cb_response_t *res) {
  const cb_error_detail_t *d = cb_error_detail();
  const cb_field_names_t *f = d->err == CB_EINVAL ? cb_field_names(d->field) : NULL;
  if (err >= 0) {
    out->ops->tuple(out, 2);
    atom(out, "ok");
    out->ops->uint(out, id);
    return;
  }
  if (err != CB_EINVAL || f == NULL || f->erl[0] == NULL) {
    cb_codec_error(out, err);
    return;
  }
  /* An item of a list is named by its name, as cbench_spec names it. */
  const cb_str_t *item = NULL;
  if (d->index >= 0 && d->field == CB_FIELD_MATCH_HEADERS && (size_t)d->index < m->nheaders)
    item = &m->headers[d->index].name;
  else if (d->index >= 0 && d->field == CB_FIELD_MATCH_QUERY && (size_t)d->index < m->nquery)
    item = &m->query[d->index].name;
  else if (d->index >= 0 && d->field == CB_FIELD_HEADERS && res && (size_t)d->index < res->nheaders)
    item = &res->headers[d->index].name;
  out->ops->tuple(out, 2);
  atom(out, "error");
  out->ops->tuple(out, 2);
  /* The family is the field's term: a handler route's own options are a bad_handler, as cbench_handler says. */
  atom(out, strcmp(f->erl[0], "handler") == 0 ? "bad_handler" : "bad_stub");
  out->ops->tuple(out, 3);
  out->ops->tuple(out, item ? 3 : 2);
  atom(out, f->erl[0]);
  atom(out, f->erl[1]);
  if (item) bin(out, *item);
  if ((d->field == CB_FIELD_CHUNKS || d->field == CB_FIELD_INTERVAL_MS) && res) {
    /* Erlang gives chunks and their interval as one {N, Ms}. */
    out->ops->tuple(out, 2);
    out->ops->uint(out, res->chunks);
    out->ops->uint(out, res->interval_ms);
  } else if (d->numeric) {
    out->ops->sint(out, d->number);
  } else if (d->value.ptr == NULL) {
    atom(out, "undefined");
  } else if (d->field == CB_FIELD_BODY && d->why == CB_WHY_NOT_REGULAR) {
    out->ops->tuple(out, 2);
    atom(out, "file");
    bin(out, d->value);
  } else {
    bin(out, d->value);
  }
  atom(out, d->why_name);
}

void cb_codec_fixture_take(cb_codec_fixture_t *fx, const cb_route_counts_t *rc) {
  fx->n = 0;
  for (size_t i = 0; i < rc->count && fx->n < CB_CODEC_MAX_FIXTURE; i++) {
    const cb_str_t *name = &rc->items[i].name;
    if (name->len > CB_MAX_NAME) break;
    memcpy(fx->names[fx->n], name->ptr, name->len);
    fx->names[fx->n][name->len] = '\0';
    fx->n++;
    if (name->len == 9 && memcmp(name->ptr, "not_found", 9) == 0) break; /* the stubs follow */
  }
}

void cb_codec_route_name(cb_term_out_t *out, const cb_codec_fixture_t *fx, cb_str_t name) {
  for (size_t i = 0; fx != NULL && i < fx->n; i++)
    if (strlen(fx->names[i]) == name.len && memcmp(fx->names[i], name.ptr, name.len) == 0) {
      out->ops->atom(out, name.ptr, name.len);
      return;
    }
  bin(out, name);
}

/* A binary, or undefined when empty. */
static void bin_or_undefined(cb_term_out_t *out, cb_str_t s) {
  if (s.len)
    bin(out, s);
  else
    atom(out, "undefined");
}

/* An entry's tls map (docs/tls.md, "The journal"), or undefined over cleartext. */
static void tls_value(cb_term_out_t *out, const cb_request_t *q) {
  if (!q->tls) {
    atom(out, "undefined");
    return;
  }
  out->ops->map(out, T_COUNT);
  for (int k = 0; k < T_COUNT; k++) {
    key(out, &tls_keys, k);
    switch ((tls_key)k) {
      case T_VERSION: bin(out, q->tls_version); break;
      case T_CIPHER: bin(out, q->tls_cipher); break;
      case T_SNI: bin_or_undefined(out, q->tls_sni); break;
      case T_ALPN: bin_or_undefined(out, q->tls_alpn); break;
      case T_RESUMED: atom(out, q->tls_resumed ? "true" : "false"); break;
      case T_CLIENT_CERT:
        if (q->tls_client_sha256.len == 0) {
          atom(out, "undefined");
          break;
        }
        out->ops->map(out, K_COUNT);
        key(out, &client_cert_keys, K_SUBJECT);
        bin(out, q->tls_client_subject);
        key(out, &client_cert_keys, K_SHA256);
        bin(out, q->tls_client_sha256);
        break;
      case T_COUNT: break;
    }
  }
}

/* The value of one key of an entry. A switch over every key: a key added to the table without its value here
 * is a compiler warning (-Wswitch). */
static void entry_value(cb_term_out_t *out, const cb_codec_fixture_t *fx, const cb_request_t *q, entry_key k) {
  const char *proto;
  switch (k) {
    case E_SEQ: out->ops->uint(out, q->seq); return;
    case E_TIME_US: out->ops->sint(out, q->time_us); return;
    case E_PROTO: atom(out, (proto = cb_proto_name(q->proto)) ? proto : "undefined"); return;
    case E_CONN: out->ops->uint(out, q->conn_id); return;
    case E_STREAM: out->ops->uint(out, q->stream_id); return;
    case E_PEER: bin(out, q->peer); return;
    case E_METHOD: bin(out, q->method); return;
    case E_PATH: bin(out, q->path); return;
    case E_QUERY: bin(out, q->query); return;
    case E_HEADERS:
      out->ops->list(out, q->nheaders);
      for (size_t i = 0; i < q->nheaders; i++) {
        out->ops->tuple(out, 2);
        bin(out, q->headers[i].name);
        bin(out, q->headers[i].value);
      }
      return;
    case E_BODY: bin(out, q->body); return;
    case E_BODY_LENGTH: out->ops->uint(out, q->body_len); return;
    case E_ROUTE: cb_codec_route_name(out, fx, q->route); return;
    case E_STUB:
      if (q->stub_id)
        out->ops->uint(out, q->stub_id);
      else
        atom(out, "undefined");
      return;
    case E_STATUS: out->ops->sint(out, q->status); return;
    case E_BYTES_OUT: out->ops->uint(out, q->bytes_out); return;
    case E_DURATION_US: out->ops->uint(out, q->duration_us); return;
    case E_FAULT:
      /* The engine's own static names (docs/faults.md), never user data. */
      if (q->fault.len)
        out->ops->atom(out, q->fault.ptr, q->fault.len);
      else
        atom(out, "undefined");
      return;
    case E_DELAY_MS: out->ops->uint(out, q->delay_ms); return;
    case E_TLS: tls_value(out, q); return;
    case E_UPSTREAM:
      if (q->upstream_to.len == 0) break;
      out->ops->map(out, U_COUNT);
      key(out, &upstream_keys, U_TO);
      bin(out, q->upstream_to);
      key(out, &upstream_keys, U_STATUS);
      out->ops->uint(out, (uint64_t)q->upstream_status);
      key(out, &upstream_keys, U_ERROR);
      out->ops->atom(out, q->upstream_error.ptr, q->upstream_error.len); /* the engine's static names */
      return;
    case E_COUNT: break;
  }
  atom(out, "undefined");
}

void cb_codec_entries(cb_term_out_t *out, const cb_codec_fixture_t *fx, const cb_request_list_t *list) {
  out->ops->list(out, list->count);
  for (size_t i = 0; i < list->count; i++) {
    out->ops->map(out, E_COUNT);
    for (int k = 0; k < E_COUNT; k++) {
      key(out, &entry_keys, k);
      entry_value(out, fx, &list->items[i], (entry_key)k);
    }
  }
}

void cb_codec_stub_list(cb_term_out_t *out, const cb_stub_list_t *list) {
  out->ops->list(out, list->count);
  for (size_t i = 0; i < list->count; i++) {
    const cb_stub_info_t *s = &list->items[i];
    out->ops->map(out, I_COUNT);
    key(out, &info_keys, I_ID);
    out->ops->uint(out, s->id);
    key(out, &info_keys, I_NAME);
    bin(out, s->name);
    key(out, &info_keys, I_HITS);
    out->ops->uint(out, s->hits);
    key(out, &info_keys, I_LEFT);
    if (s->times == 0)
      atom(out, "infinity");
    else
      out->ops->uint(out, s->spent || s->hits >= s->times ? 0 : s->times - s->hits);
  }
}

void cb_codec_scenario_state(cb_term_out_t *out, const char *state, size_t len) {
  out->ops->tuple(out, 2);
  atom(out, "ok");
  out->ops->binary(out, state, len);
}

/* Route counts in name order, so that a name that repeats (stubs may share one) is one run. */
static int by_name(const void *a, const void *b) {
  return strcmp((*(const cb_route_count_t *const *)a)->name.ptr, (*(const cb_route_count_t *const *)b)->name.ptr);
}

static void by_proto(cb_term_out_t *out, const uint64_t *v) {
  out->ops->map(out, CB_PROTO_COUNT);
  for (int i = 0; i < CB_PROTO_COUNT; i++) {
    atom(out, cb_proto_name(i));
    out->ops->uint(out, v[i]);
  }
}

void cb_codec_stats(cb_term_out_t *out, const cb_codec_fixture_t *fx, const cb_stats_t *st,
                    const cb_route_counts_t *rc) {
  out->ops->map(out, NSCALARS + 3);
  for (size_t i = 0; i < NSCALARS; i++) {
    key(out, &stats_keys, (int)i);
    out->ops->uint(out, *(const uint64_t *)((const char *)st + stats_offsets[i]));
  }
  /* Requests by route name, names that repeat added up: sorted, then each run of one name is one key. */
  const cb_route_count_t **order = malloc((rc->count ? rc->count : 1) * sizeof *order);
  size_t groups = 0;
  key(out, &stats_keys, NSCALARS);
  if (order == NULL) {
    out->failed = 1;
    out->ops->map(out, 0);
  } else {
    for (size_t i = 0; i < rc->count; i++) order[i] = &rc->items[i];
    qsort(order, rc->count, sizeof *order, by_name);
    for (size_t i = 0; i < rc->count; i++) groups += i == 0 || strcmp(order[i]->name.ptr, order[i - 1]->name.ptr) != 0;
    out->ops->map(out, groups);
    for (size_t i = 0, j; i < rc->count; i = j) {
      uint64_t sum = 0;
      for (j = i; j < rc->count && strcmp(order[j]->name.ptr, order[i]->name.ptr) == 0; j++) sum += order[j]->requests;
      cb_codec_route_name(out, fx, order[i]->name);
      out->ops->uint(out, sum);
    }
  }
  free(order);
  key(out, &stats_keys, NSCALARS + 1);
  by_proto(out, st->conns_by_proto);
  key(out, &stats_keys, NSCALARS + 2);
  by_proto(out, st->requests_by_proto);
}

void cb_codec_reply_results(cb_term_out_t *out, const cb_reply_t *items, size_t n) {
  out->ops->list(out, n);
  for (size_t i = 0; i < n; i++) {
    int r = items[i].result;
    if (r == 0) {
      atom(out, "ok");
    } else {
      cb_codec_error_atom(out, r == CB_EGONE ? "gone" : r == CB_ENOTSTREAMING ? "not_streaming" : "badarg");
    }
  }
}
