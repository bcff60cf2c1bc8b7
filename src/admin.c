/* The admin API (cfg.admin): an engine of its own answers the admin listener, and one thread does the work.
 *
 * The library's calls that change a server (cb_server_route_add, cb_server_requests, ...) block until every
 * worker has run them, so a worker cannot make them (they return UV_EBUSY there). The admin listener is
 * therefore a second engine (one worker, no journal) with one deferred route that matches everything: its
 * deliver function copies each request onto a queue, the admin thread takes it, calls the data server's API
 * and answers with cb_server_reply(). The data server's workers never see an admin request, so the admin API
 * costs the data port nothing. */
#include "admin.h"

#include "engine.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A request copied off the admin engine's worker. */
typedef struct job_s {
  struct job_s *next;
  cb_reqref_t ref;
  char *method, *path, *query, *body; /* NUL-terminated; body also has body_len */
  size_t body_len;
} job_t;

/* An expectation of a stub ("expect" in its JSON). */
typedef struct {
  uint64_t id;
  cb_stub_expect_kind kind;
  uint64_t n;
} expect_t;

struct cb__admin_s {
  cb_server_t *data;  /* the server administered */
  cb_server_t *admin; /* the engine serving the admin listener */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job_t *head, *tail; /* under mu */
  int stopping;       /* under mu */
  /* Held across each change of the stub set together with its expectations: an add (the stubs, then their
   * expectations: POST /stubs, cb_server_stubs_file()) and POST /reset (stubs, journal, expectations), so that
   * a reset is one step against an add from another thread: the add is wholly before it (and gone) or wholly
   * after it (and kept). Taken before the engine's locks and emu. */
  pthread_mutex_t amu;
  pthread_mutex_t emu; /* the expectations: the admin thread and cb_server_stubs_file() change them */
  expect_t *expects;
  size_t nexpects, capexpects;
};

/* An answer: status, a JSON body (or none) and an optional allow header. */
typedef struct {
  int status;
  json_t *body; /* owned; NULL: empty body */
  const char *allow;
  char *text;   /* owned: a JSON body already written (GET /recorded), sent as it is; NULL: none */
  size_t text_len;
} answer_t;

static answer_t json_answer(int status, json_t *body) { return (answer_t){.status = status, .body = body}; }

/* 400 and the like: {"field": F, "why": W, "value": V, "message": M}, value only when there is one. */
static answer_t error_answer(int status, const char *field, const char *why, const char *value, const char *msg) {
  json_t *o = json_object();
  if (field != NULL) json_object_set_new(o, "field", json_string(field));
  json_object_set_new(o, "why", json_string(why));
  if (value != NULL && value[0] != '\0') json_object_set_new(o, "value", json_string(value));
  json_object_set_new(o, "message", json_string(msg));
  return json_answer(status, o);
}

static answer_t engine_error(int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s (%s)", cb_strerror(err), cb_err_name(err));
  return error_answer(err == CB_ENOMEM ? 503 : 500, NULL, "engine_error", NULL, msg);
}

/* ---- expectations ---- */

/* Under emu. */
static int expect_add(cb__admin_t *a, uint64_t id, cb_stub_expect_kind kind, uint64_t n) {
  if (kind == CB_STUB_EXPECT_NONE) return 0;
  if (a->nexpects == a->capexpects) {
    size_t cap = a->capexpects ? a->capexpects * 2 : 16;
    expect_t *e = realloc(a->expects, cap * sizeof *e);
    if (e == NULL) return CB_ENOMEM;
    a->expects = e;
    a->capexpects = cap;
  }
  a->expects[a->nexpects++] = (expect_t){.id = id, .kind = kind, .n = n};
  return 0;
}

/* Under emu. */
static void expect_remove(cb__admin_t *a, uint64_t id) {
  size_t o = 0;
  for (size_t i = 0; i < a->nexpects; i++)
    if (a->expects[i].id != id) a->expects[o++] = a->expects[i];
  a->nexpects = o;
}

/* ---- JSON of the engine's lists ---- */

static const char *const method_names[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT",
                                           "TRACE"};

/* "GET /x", "GET,POST /x", "* /x": as the Erlang API's cbench_spec:describe/1 names a match. */
static void describe(const cb_stub_info_t *s, char *out, size_t cap) {
  size_t o = 0;
  out[0] = '\0';
  for (int b = 0; b < 9 && o < cap; b++) {
    /* GET implies HEAD: a GET stub is described as GET. */
    if (!(s->methods & (1u << b)) || (b == 1 && (s->methods & CB_METHOD_GET))) continue;
    o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "," : "", method_names[b]);
  }
  if (o == 0) o = (size_t)snprintf(out, cap, "*");
  if (o < cap) snprintf(out + o, cap - o, " %s", s->path.ptr);
}

static json_t *methods_json(unsigned methods) {
  json_t *l = json_array();
  for (int b = 0; b < 9; b++)
    if (methods & (1u << b)) json_array_append_new(l, json_string(method_names[b]));
  return l;
}

static const expect_t *expect_of(const cb__admin_t *a, uint64_t id) {
  for (size_t i = 0; i < a->nexpects; i++)
    if (a->expects[i].id == id) return &a->expects[i];
  return NULL;
}

static json_t *expect_json(const expect_t *e) {
  return json_pack("{s:I}", e->kind == CB_STUB_EXPECT_TIMES ? "times" : "at_least", (json_int_t)e->n);
}

/* A string that may hold any bytes: JSON text for UTF-8, else NULL (the caller gives base64). */
static json_t *utf8_or_null(cb_str_t s) { return json_stringn(s.ptr ? s.ptr : "", s.len); }

static void base64(const char *in, size_t n, char *out) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *p = (const unsigned char *)in;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out[o++] = t[v >> 18 & 63];
    out[o++] = t[v >> 12 & 63];
    out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? t[v & 63] : '=';
  }
  out[o] = '\0';
}

/* A string field, or FIELD_base64 when the bytes are not UTF-8 (a body, a query, a header value). */
static void set_bytes(json_t *o, const char *key, cb_str_t s) {
  json_t *v = utf8_or_null(s);
  if (v != NULL) {
    json_object_set_new(o, key, v);
    return;
  }
  char *b = malloc(s.len / 3 * 4 + 8);
  char k[64];
  if (b == NULL) return;
  base64(s.ptr, s.len, b);
  snprintf(k, sizeof k, "%s_base64", key);
  json_object_set_new(o, k, json_string(b));
  free(b);
}

/* An entry's "tls": the connection's TLS session (docs/tls.md, "The journal"), or null over cleartext. */
static json_t *tls_json(const cb_request_t *r) {
  if (!r->tls) return json_null();
  json_t *t = json_object();
  set_bytes(t, "version", r->tls_version);
  set_bytes(t, "cipher", r->tls_cipher);
  if (r->tls_sni.len)
    set_bytes(t, "sni", r->tls_sni);
  else
    json_object_set_new(t, "sni", json_null());
  json_object_set_new(t, "alpn", r->tls_alpn.len ? json_stringn(r->tls_alpn.ptr, r->tls_alpn.len) : json_null());
  json_object_set_new(t, "resumed", json_boolean(r->tls_resumed));
  if (r->tls_client_sha256.len) {
    json_t *cc = json_object();
    set_bytes(cc, "subject", r->tls_client_subject);
    set_bytes(cc, "sha256", r->tls_client_sha256);
    json_object_set_new(t, "client_cert", cc);
  } else {
    json_object_set_new(t, "client_cert", json_null());
  }
  return t;
}

static json_t *request_json(const cb_request_t *r) {
  json_t *o = json_object(), *h = json_array();
  json_object_set_new(o, "seq", json_integer((json_int_t)r->seq));
  json_object_set_new(o, "time_us", json_integer((json_int_t)r->time_us));
  json_object_set_new(o, "proto", json_string(cb_proto_name(r->proto) ? cb_proto_name(r->proto) : "?"));
  json_object_set_new(o, "conn_id", json_integer((json_int_t)r->conn_id));
  json_object_set_new(o, "stream_id", json_integer(r->stream_id));
  set_bytes(o, "peer", r->peer);
  set_bytes(o, "method", r->method);
  set_bytes(o, "path", r->path);
  set_bytes(o, "query", r->query);
  for (size_t i = 0; i < r->nheaders; i++) {
    json_t *pair = json_object();
    set_bytes(pair, "name", r->headers[i].name);
    set_bytes(pair, "value", r->headers[i].value);
    json_array_append_new(h, pair);
  }
  json_object_set_new(o, "headers", h);
  set_bytes(o, "body", r->body);
  json_object_set_new(o, "body_len", json_integer((json_int_t)r->body_len));
  set_bytes(o, "route", r->route);
  json_object_set_new(o, "stub_id", json_integer((json_int_t)r->stub_id));
  json_object_set_new(o, "status", json_integer(r->status));
  json_object_set_new(o, "bytes_out", json_integer((json_int_t)r->bytes_out));
  json_object_set_new(o, "duration_us", json_integer((json_int_t)r->duration_us));
  set_bytes(o, "fault", r->fault);
  json_object_set_new(o, "tls", tls_json(r));
  if (r->upstream_to.len) { /* a proxied request (docs/proxy.md) */
    json_t *u = json_object();
    set_bytes(u, "to", r->upstream_to);
    json_object_set_new(u, "status", json_integer(r->upstream_status));
    set_bytes(u, "error", r->upstream_error);
    json_object_set_new(o, "upstream", u);
  } else {
    json_object_set_new(o, "upstream", json_null());
  }
  return o;
}

/* ---- the endpoints ---- */

static answer_t post_stubs(cb__admin_t *a, const job_t *j) {
  cb_stubs_json_error_t err;
  cb_stub_added_t *added = NULL;
  cb__admin_add_begin(a);
  /* Relative body files are relative to the server's working directory. */
  int n = cb_stubs_json_add(a->data, "body", NULL, j->body, j->body_len, &added, &err);
  int eerr = n < 0 ? 0 : cb__admin_expect(a, added, (size_t)n);
  cb__admin_add_end(a);
  if (n < 0) return error_answer(400, err.field[0] ? err.field : NULL, err.why[0] ? err.why : "refused", err.value,
                                 err.msg);
  if (eerr != 0) {
    free(added);
    return engine_error(CB_ENOMEM);
  }
  json_t *ids = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(ids, json_integer((json_int_t)added[i].id));
  free(added);
  return json_answer(201, json_pack("{s:o}", "ids", ids));
}

static answer_t get_stubs(cb__admin_t *a) {
  cb_stub_list_t *l;
  int err = cb_server_stubs(a->data, &l);
  if (err) return engine_error(err);
  json_t *out = json_array();
  pthread_mutex_lock(&a->emu);
  for (size_t i = 0; i < l->count; i++) {
    const cb_stub_info_t *s = &l->items[i];
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)s->id));
    set_bytes(o, "name", s->name);
    set_bytes(o, "path", s->path);
    json_object_set_new(o, "methods", methods_json(s->methods));
    json_object_set_new(o, "priority", json_integer(s->priority));
    json_object_set_new(o, "status", json_integer(s->status));
    json_object_set_new(o, "times", json_integer((json_int_t)s->times));
    json_object_set_new(o, "hits", json_integer((json_int_t)s->hits));
    json_object_set_new(o, "spent", json_boolean(s->spent));
    const expect_t *e = expect_of(a, s->id);
    if (e != NULL) json_object_set_new(o, "expect", expect_json(e));
    json_array_append_new(out, o);
  }
  pthread_mutex_unlock(&a->emu);
  cb_stub_list_free(l);
  return json_answer(200, out);
}

/* s[0..n) as text for an error's field or value: a control byte, DEL or a byte above 0x7f becomes \xNN (as the
 * stub loader quotes a field), so that bytes a query decoded to, UTF-8 or not, can be a JSON string. Owned by
 * the caller; NULL when out of memory. */
static char *quote_bytes(const char *s, size_t n) {
  char *out = malloc(n * 4 + 1);
  if (out == NULL) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch >= 0x7f)
      o += (size_t)snprintf(out + o, 5, "\\x%02x", ch);
    else
      out[o++] = (char)ch;
  }
  out[o] = '\0';
  return out;
}

/* A 400 for the query parameter key[0..klen) with the value v[0..vlen) (NULL: none named). */
static answer_t bad_parameter(const char *key, size_t klen, const char *v, size_t vlen, const char *why,
                              const char *msg) {
  char *qk = quote_bytes(key, klen), *qv = v ? quote_bytes(v, vlen) : NULL;
  answer_t r = qk == NULL || (v != NULL && qv == NULL) ? engine_error(CB_ENOMEM)
                                                       : error_answer(400, qk, why, qv, msg);
  free(qk);
  free(qv);
  return r;
}

static answer_t delete_stub(cb__admin_t *a, const char *id_text) {
  char *end;
  errno = 0;
  unsigned long long id = strtoull(id_text, &end, 10);
  if (id_text[0] < '0' || id_text[0] > '9' || *end != '\0' || errno != 0 || id == 0) {
    /* An h2 :path may hold bytes HTTP/1.1's parser refuses: quoted, or the value would be dropped. */
    char *q = quote_bytes(id_text, strlen(id_text));
    answer_t r = q ? error_answer(400, "id", "wrong_type", q, "a stub id is a positive integer")
                   : engine_error(CB_ENOMEM);
    free(q);
    return r;
  }
  int err = cb_server_route_remove(a->data, id);
  if (err == CB_ENOENT) return error_answer(404, "id", "not_found", id_text, "no such stub");
  if (err) return engine_error(err);
  pthread_mutex_lock(&a->emu);
  expect_remove(a, id);
  pthread_mutex_unlock(&a->emu);
  return json_answer(204, NULL);
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decodes s in place ('+' as space); returns its new length. */
static size_t unescape(char *s) {
  size_t o = 0;
  for (size_t i = 0; s[i]; i++) {
    if (s[i] == '%' && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      s[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else {
      s[o++] = s[i] == '+' ? ' ' : s[i];
    }
  }
  s[o] = '\0';
  return o;
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end;
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end != '\0' || errno != 0) return -1;
  *out = v;
  return 0;
}

/* GET /requests?path=..&method=..&route=..&stub=..&since=..&limit=..: the journal's entries, oldest first. */
static answer_t get_requests(cb__admin_t *a, char *query) {
  cb_request_filter_t f;
  memset(&f, 0, sizeof f);
  for (char *save = NULL, *kv = strtok_r(query, "&", &save); kv != NULL; kv = strtok_r(NULL, "&", &save)) {
    char *v = strchr(kv, '=');
    if (v != NULL) *v++ = '\0';
    else v = kv + strlen(kv);
    size_t klen = unescape(kv), vlen = unescape(v);
    uint64_t n = 0;
    /* A %00 decodes to a byte like any other: a name holding one is no parameter's ("limit%00x" is not "limit"),
     * and a number holding one is not a number ("1%00x"), though the C strings would end there. */
    if (strlen(kv) != klen) {
      return bad_parameter(kv, klen, NULL, 0, "unknown_key",
                           "GET /requests takes path, method, route, stub, since and limit");
    } else if (strcmp(kv, "path") == 0) {
      f.path = (cb_str_t){v, vlen};
    } else if (strcmp(kv, "method") == 0) {
      f.method = (cb_str_t){v, vlen};
    } else if (strcmp(kv, "route") == 0) {
      f.route = (cb_str_t){v, vlen};
    } else if (strcmp(kv, "since") == 0 || strcmp(kv, "stub") == 0 || strcmp(kv, "limit") == 0) {
      if (strlen(v) != vlen || parse_u64(v, &n) != 0)
        return bad_parameter(kv, klen, v, vlen, "wrong_type", "must be a non-negative integer");
      if (kv[0] == 's' && kv[1] == 'i') f.since = n;
      else if (kv[0] == 's') f.stub_id = n;
      else f.limit = (size_t)n;
    } else {
      return bad_parameter(kv, klen, NULL, 0, "unknown_key",
                           "GET /requests takes path, method, route, stub, since and limit");
    }
  }
  cb_request_list_t *l;
  int err = cb_server_requests(a->data, &f, &l);
  if (err) return engine_error(err);
  json_t *out = json_array();
  for (size_t i = 0; i < l->count; i++) json_array_append_new(out, request_json(&l->items[i]));
  cb_request_list_free(l);
  return json_answer(200, out);
}

/* Bytes as a JSON string of the code points U+0000..U+00FF, one per byte: what a 404's JSON body says with its
 * \u00HH escapes, so that both decode to the same strings (a stub's name, a matcher's name). */
static json_t *latin1_json(cb_str_t s) {
  char *b = malloc(s.len * 2 + 1);
  if (b == NULL) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < s.len; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    if (c < 0x80) {
      b[o++] = (char)c;
    } else {
      b[o++] = (char)(0xc0 | c >> 6);
      b[o++] = (char)(0x80 | (c & 0x3f));
    }
  }
  json_t *v = json_stringn(b, o);
  free(b);
  return v;
}

/* GET /near-misses: cb_server_near_misses() as JSON, each 404 as its JSON body's items are written (name, id,
 * differs) with the request's seq, method, path and query (as in GET /requests: FIELD_base64 when not UTF-8). */
static answer_t get_near_misses(cb__admin_t *a) {
  cb_near_miss_list_t *l;
  int err = cb_server_near_misses(a->data, &l);
  if (err) return engine_error(err);
  json_t *out = json_array();
  for (size_t i = 0; i < l->count; i++) {
    const cb_near_miss_t *x = &l->items[i];
    json_t *o = json_object(), *near = json_array();
    json_object_set_new(o, "seq", json_integer((json_int_t)x->seq));
    set_bytes(o, "method", x->method);
    set_bytes(o, "path", x->path);
    set_bytes(o, "query", x->query);
    for (size_t k = 0; k < x->count; k++) {
      json_t *d = json_array();
      for (size_t p = 0; p < x->near[k].ndiffers; p++) json_array_append_new(d, latin1_json(x->near[k].differs[p]));
      json_array_append_new(near, json_pack("{s:o, s:I, s:o}", "name", latin1_json(x->near[k].name), "id",
                                            (json_int_t)x->near[k].id, "differs", d));
    }
    json_object_set_new(o, "near_misses", near);
    json_array_append_new(out, o);
  }
  cb_near_miss_list_free(l);
  return json_answer(200, out);
}

/* A request nothing was set up for: a 404, or a 405 that no stub and not the fixture /status route made (as
 * the Erlang API's cbench_expect decides). */
static int unexpected(const cb_request_t *r) {
  if (r->route.len == 9 && memcmp(r->route.ptr, "not_found", 9) == 0) return 1;
  return r->status == 405 && r->stub_id == 0 && !(r->route.len == 6 && memcmp(r->route.ptr, "status", 6) == 0);
}

/* POST /verify: 200 {"ok": true, "problems": []}, or 409 with the problems in the order of the Erlang API's
 * verify/1: each expectation not met (in the order the stubs were added), then each unexpected request. */
static answer_t post_verify(cb__admin_t *a) {
  cb_stub_list_t *l;
  int err = cb_server_stubs(a->data, &l);
  if (err) return engine_error(err);
  json_t *problems = json_array();
  pthread_mutex_lock(&a->emu);
  for (size_t k = 0; k < a->nexpects; k++) {
    const expect_t *e = &a->expects[k];
    const cb_stub_info_t *s = NULL;
    for (size_t i = 0; i < l->count && s == NULL; i++)
      if (l->items[i].id == e->id) s = &l->items[i];
    if (s == NULL) continue; /* removed: its expectation went with it */
    if (e->kind == CB_STUB_EXPECT_TIMES ? s->hits == e->n : s->hits >= e->n) continue;
    char what[CB_MAX_PATH + 64];
    describe(s, what, sizeof what);
    json_t *p = json_pack("{s:s, s:s, s:I, s:o, s:I}", "problem", s->hits == 0 ? "no_request_arrived" : "expected",
                          "stub", what, "id", (json_int_t)s->id, "expected", expect_json(e), "got",
                          (json_int_t)s->hits);
    json_array_append_new(problems, p);
  }
  pthread_mutex_unlock(&a->emu);
  cb_stub_list_free(l);
  cb_request_list_t *r;
  cb_request_filter_t f;
  memset(&f, 0, sizeof f);
  err = cb_server_requests(a->data, &f, &r);
  if (err) {
    json_decref(problems);
    return engine_error(err);
  }
  for (size_t i = 0; i < r->count; i++) {
    if (!unexpected(&r->items[i])) continue;
    json_t *p = json_pack("{s:s}", "problem", "unexpected_request");
    set_bytes(p, "method", r->items[i].method);
    set_bytes(p, "path", r->items[i].path);
    set_bytes(p, "query", r->items[i].query);
    json_object_set_new(p, "seq", json_integer((json_int_t)r->items[i].seq));
    json_object_set_new(p, "status", json_integer(r->items[i].status));
    json_array_append_new(problems, p);
  }
  cb_request_list_free(r);
  int ok = json_array_size(problems) == 0;
  return json_answer(ok ? 200 : 409, json_pack("{s:b, s:o}", "ok", ok, "problems", problems));
}

static answer_t get_stats(cb__admin_t *a) {
  cb_stats_t s;
  cb_route_counts_t *rc;
  int err = cb_server_stats(a->data, &s);
  if (err == 0) err = cb_server_route_counts(a->data, &rc);
  if (err) return engine_error(err);
  json_t *o = json_object(), *by_route = json_object(), *conns = json_object(), *reqs = json_object();
#define U(f) json_object_set_new(o, #f, json_integer((json_int_t)s.f))
  U(conns_accepted); U(conns_open); U(conns_closed); U(requests); U(bytes_read); U(bytes_written);
  U(status_400); U(status_404); U(status_405); U(status_413); U(status_431); U(timeouts); U(resets);
  U(h2_errors); U(h2_parked); U(h2_woken); U(accept_backoffs); U(faults); U(handler_unavailable); U(handler_timeouts);
  U(handler_overflows);
  U(tls_handshakes_failed); U(tls_handshakes_refused); U(tls_ktls);
  U(tls_handshakes_full); U(tls_handshakes_resumed);
  U(proxy_requests); U(proxy_upstream_connects); U(proxy_upstream_reused); U(proxy_502); U(proxy_504);
  U(recorded); U(recorded_duplicates); U(record_skipped);
#undef U
  for (int i = 0; i < CB_PROTO_COUNT; i++) {
    json_object_set_new(conns, cb_proto_name(i), json_integer((json_int_t)s.conns_by_proto[i]));
    json_object_set_new(reqs, cb_proto_name(i), json_integer((json_int_t)s.requests_by_proto[i]));
  }
  json_object_set_new(o, "conns_by_proto", conns);
  json_object_set_new(o, "requests_by_proto", reqs);
  /* Names may repeat (stubs of one name): their counts add up, as in cb_server_route_counts' own rule. */
  for (size_t i = 0; i < rc->count; i++) {
    json_t *prev = json_object_get(by_route, rc->items[i].name.ptr);
    json_int_t n = (json_int_t)rc->items[i].requests + (prev ? json_integer_value(prev) : 0);
    json_object_set_new(by_route, rc->items[i].name.ptr, json_integer(n));
  }
  json_object_set_new(o, "requests_by_route", by_route);
  cb_route_counts_free(rc);
  return json_answer(200, o);
}

void (*cb__admin_reset_hook)(void *arg);
void *cb__admin_reset_hook_arg;

/* Under amu from the first step to the last: an add from another thread (cb_server_stubs_file()) between the
 * stubs' removal and the expectations' would otherwise keep its stubs and lose their expectations. */
static answer_t post_reset(cb__admin_t *a) {
  pthread_mutex_lock(&a->amu);
  int err = cb_server_route_reset(a->data);
  void (*hook)(void *) = __atomic_load_n(&cb__admin_reset_hook, __ATOMIC_ACQUIRE);
  if (hook != NULL) hook(__atomic_load_n(&cb__admin_reset_hook_arg, __ATOMIC_ACQUIRE));
  if (err == 0) err = cb_server_requests_clear(a->data);
  if (err == 0) {
    pthread_mutex_lock(&a->emu);
    a->nexpects = 0;
    pthread_mutex_unlock(&a->emu);
  }
  pthread_mutex_unlock(&a->amu);
  if (err) return engine_error(err);
  return json_answer(204, NULL);
}

/* ---- recordings (docs/record.md) ---- */

static answer_t get_recorded(cb__admin_t *a) {
  char *json = NULL;
  size_t len = 0;
  int err = cb_server_recorded_json(a->data, &json, &len);
  if (err) return engine_error(err);
  return (answer_t){.status = 200, .text = json, .text_len = len};
}

/* Writes the file the server was started with (cfg.record_to, --record-to). */
static answer_t post_recorded_save(cb__admin_t *a) {
  const char *file = cb__recorder_file(a->data->recorder);
  if (file == NULL)
    return error_answer(409, NULL, "no_record_file", NULL,
                        "the server has no file to save to: start it with --record-to FILE (cfg.record_to)");
  char msg[1024];
  int n = cb_server_save_stubs(a->data, file, msg, sizeof msg);
  /* A path is bytes: a name that is not UTF-8 is no JSON string (jansson refuses it, and the member or the whole
   * answer would be dropped). The message quotes it with \xNN, the answer gives it as file_base64. */
  if (n < 0) {
    char *q = quote_bytes(msg, strlen(msg));
    answer_t r = q ? error_answer(500, NULL, "save_failed", NULL, q) : engine_error(CB_ENOMEM);
    free(q);
    return r;
  }
  json_t *o = json_pack("{s:i}", "saved", n);
  if (o == NULL) return engine_error(CB_ENOMEM);
  set_bytes(o, "file", (cb_str_t){file, strlen(file)});
  return json_answer(200, o);
}

static answer_t method_not_allowed(const char *allow) {
  answer_t r = error_answer(405, NULL, "method_not_allowed", NULL, "see docs/routes.md, \"The admin API\"");
  r.allow = allow;
  return r;
}

/* HEAD is answered as GET (RFC 9110 9.3.2, as the engine's own routes do): the engine sends a HEAD request's
 * reply without its body and with the content-length the body would have had. An allow header lists HEAD
 * beside GET, in the engine's order. */
static answer_t route(cb__admin_t *a, job_t *j) {
  const char *m = j->method, *p = j->path;
  int get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0, post = strcmp(m, "POST") == 0, del = strcmp(m, "DELETE") == 0;
  if (strcmp(p, "/stubs") == 0) {
    if (get) return get_stubs(a);
    if (post) return post_stubs(a, j);
    return method_not_allowed("GET, HEAD, POST");
  }
  if (strncmp(p, "/stubs/", 7) == 0) {
    if (del) return delete_stub(a, p + 7);
    return method_not_allowed("DELETE");
  }
  if (strcmp(p, "/requests") == 0) {
    if (get) return get_requests(a, j->query);
    if (del) {
      int err = cb_server_requests_clear(a->data);
      return err ? engine_error(err) : json_answer(204, NULL);
    }
    return method_not_allowed("GET, HEAD, DELETE");
  }
  if (strcmp(p, "/near-misses") == 0) {
    if (!get) return method_not_allowed("GET, HEAD");
    return get_near_misses(a);
  }
  if (strcmp(p, "/verify") == 0) return post ? post_verify(a) : method_not_allowed("POST");
  if (strcmp(p, "/reset") == 0) return post ? post_reset(a) : method_not_allowed("POST");
  if (strcmp(p, "/stats") == 0) return get ? get_stats(a) : method_not_allowed("GET, HEAD");
  if (strcmp(p, "/recorded") == 0) {
    if (get) return get_recorded(a);
    if (del) {
      cb_server_recorded_clear(a->data);
      return json_answer(204, NULL);
    }
    return method_not_allowed("GET, HEAD, DELETE");
  }
  if (strcmp(p, "/recorded/save") == 0) return post ? post_recorded_save(a) : method_not_allowed("POST");
  return error_answer(404, NULL, "not_found", NULL,
                      "the admin API has /stubs, /stubs/{id}, /requests, /near-misses, /verify, /reset, /stats, "
                      "/recorded, /recorded/save");
}

static void answer(cb__admin_t *a, job_t *j) {
  answer_t r = route(a, j);
  char *text = r.text ? r.text : r.body ? json_dumps(r.body, JSON_COMPACT) : NULL;
  size_t text_len = r.text ? r.text_len : text ? strlen(text) : 0;
  cb_header_t h[2];
  size_t nh = 0;
  if (text != NULL) h[nh++] = (cb_header_t){CB_S("content-type"), CB_S("application/json")};
  if (r.allow != NULL) h[nh++] = (cb_header_t){CB_S("allow"), {r.allow, strlen(r.allow)}};
  cb_reply_t rep = {.ref = j->ref, .op = CB_REPLY_FULL, .status = r.status, .headers = h, .nheaders = nh,
                    .body = {text ? text : "", text_len}};
  if (r.body != NULL && text == NULL) rep = (cb_reply_t){.ref = j->ref, .op = CB_REPLY_UNAVAILABLE};
  /* A request whose client went away meanwhile is CB_EGONE: nothing to do. */
  (void)cb_server_reply(a->admin, &rep, 1);
  free(text);
  json_decref(r.body);
}

static void job_free(job_t *j) {
  free(j->method);
  free(j->path);
  free(j->query);
  free(j->body);
  free(j);
}

static void *admin_thread(void *arg) {
  cb__admin_t *a = arg;
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while (a->head == NULL && !a->stopping) pthread_cond_wait(&a->cv, &a->mu);
    if (a->stopping) break;
    job_t *j = a->head;
    a->head = j->next;
    if (a->head == NULL) a->tail = NULL;
    pthread_mutex_unlock(&a->mu);
    answer(a, j);
    job_free(j);
    pthread_mutex_lock(&a->mu);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

static char *dup_str(cb_str_t s) {
  char *p = malloc(s.len + 1);
  if (p == NULL) return NULL;
  if (s.len) memcpy(p, s.ptr, s.len);
  p[s.len] = '\0';
  return p;
}

/* On the admin engine's worker: copies the request onto the queue. Refused (503) when out of memory. */
static int deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  cb__admin_t *a = ud;
  for (size_t i = 0; i < n; i++) {
    job_t *j = calloc(1, sizeof *j);
    if (j == NULL) return -1;
    j->ref = reqs[i].ref;
    j->method = dup_str(reqs[i].method);
    j->path = dup_str(reqs[i].path);
    j->query = dup_str(reqs[i].query);
    j->body = dup_str(reqs[i].body);
    j->body_len = reqs[i].body.len;
    if (!j->method || !j->path || !j->query || !j->body) {
      job_free(j);
      return -1;
    }
    pthread_mutex_lock(&a->mu);
    if (a->tail) a->tail->next = j;
    else a->head = j;
    a->tail = j;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
  }
  return 0;
}

void cb__admin_add_begin(cb__admin_t *a) { pthread_mutex_lock(&a->amu); }

void cb__admin_add_end(cb__admin_t *a) { pthread_mutex_unlock(&a->amu); }

int cb__admin_expect(cb__admin_t *a, const cb_stub_added_t *added, size_t n) {
  int err = 0;
  pthread_mutex_lock(&a->emu);
  for (size_t i = 0; i < n && err == 0; i++) err = expect_add(a, added[i].id, added[i].expect, added[i].expect_n);
  pthread_mutex_unlock(&a->emu);
  return err;
}

int cb__admin_start(cb_server_t *data, const char *host, int port, cb__admin_t **out) {
  cb__admin_t *a = calloc(1, sizeof *a);
  if (a == NULL) return CB_ENOMEM;
  a->data = data;
  pthread_mutex_init(&a->mu, NULL);
  pthread_mutex_init(&a->amu, NULL);
  pthread_mutex_init(&a->emu, NULL);
  pthread_cond_init(&a->cv, NULL);
  int err = 0;
  cb_config_t cfg;
  cb_config_init(&cfg);
  cfg.host = host;
  cfg.port = port;
  cfg.threads = 1;
  cfg.journal = 0;
  if (err == 0) err = cb_server_start(&cfg, &a->admin);
  if (err == 0) {
    /* Everything on the admin listener goes to the admin thread: a prefix of "/" and any method, in front of
     * the fixture routes (which always come after stubs). */
    cb_deferred_t d = {.name = CB_S("admin"), .match = {.path = CB_S("/*")}, .timeout_ms = 60000,
                       .deliver = deliver, .ud = a};
    uint64_t id;
    err = cb_server_deferred_add(a->admin, &d, &id);
    if (err) cb_server_stop(a->admin);
  }
  if (err == 0) {
    err = -pthread_create(&a->thread, NULL, admin_thread, a);
    if (err) cb_server_stop(a->admin);
  }
  if (err) {
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->amu);
    pthread_mutex_destroy(&a->emu);
    pthread_cond_destroy(&a->cv);
    free(a);
    return err;
  }
  *out = a;
  return 0;
}

int cb__admin_port(const cb__admin_t *a) { return cb_server_port(a->admin); }

void cb__admin_stop(cb__admin_t *a) {
  if (a == NULL) return;
  /* The thread first (it may be answering), then the engine: cb_server_reply must not race its stop. */
  pthread_mutex_lock(&a->mu);
  a->stopping = 1;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  cb_server_stop(a->admin);
  for (job_t *j = a->head, *next; j != NULL; j = next) {
    next = j->next;
    job_free(j);
  }
  free(a->expects);
  pthread_mutex_destroy(&a->mu);
  pthread_mutex_destroy(&a->amu);
  pthread_mutex_destroy(&a->emu);
  pthread_cond_destroy(&a->cv);
  free(a);
}
