/* The route commands of the port program: {route_add, Match, Response} decoded from cbench_spec's canonical
 * terms into a cb_stub_t (every field checked; a term that does not decode gets {error, badarg}), route_remove,
 * route_reset and the stub list. Strings point into the frame, which lives while the command runs;
 * cb_server_route_add copies what it keeps.
 */
#include <stdlib.h>
#include <string.h>

#include "port.h"

/* A proper list of n elements, each decoded by fn: 0 or -1. */
static int get_list(const char *buf, int *idx, int max, int *n, int (*fn)(const char *, int *, void *, int),
                    void *out) {
  int arity;
  if (ei_decode_list_header(buf, idx, &arity) != 0 || arity < 0 || arity > max) return -1;
  for (int i = 0; i < arity; i++)
    if (fn(buf, idx, out, i) != 0) return -1;
  if (arity > 0) {
    int tail;
    if (ei_decode_list_header(buf, idx, &tail) != 0 || tail != 0) return -1;
  }
  *n = arity;
  return 0;
}

/* {Name, present | {equal, Value}} */
static int get_matcher(const char *buf, int *idx, void *out, int i) {
  cb_matcher_t *m = (cb_matcher_t *)out + i;
  int arity;
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 2 || port_get_bin(buf, idx, &m->name) != 0)
    return -1;
  if (port_is_atom(buf, idx, "present")) {
    m->value = (cb_str_t){NULL, 0};
    return 0;
  }
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 2 || !port_is_atom(buf, idx, "equal")) return -1;
  return port_get_bin(buf, idx, &m->value);
}

/* {Name, Value} */
static int get_header(const char *buf, int *idx, void *out, int i) {
  cb_header_t *h = (cb_header_t *)out + i;
  int arity;
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 2) return -1;
  return port_get_bin(buf, idx, &h->name) != 0 || port_get_bin(buf, idx, &h->value) != 0 ? -1 : 0;
}

/* A method name's bit, or'ed into *(unsigned *)out. */
static int get_method(const char *buf, int *idx, void *out, int i) {
  (void)i;
  cb_str_t name;
  unsigned bit;
  if (port_get_bin(buf, idx, &name) != 0 || (bit = cb_method_bit(name)) == 0) return -1;
  *(unsigned *)out |= bit;
  return 0;
}

/* A label or undefined ({NULL, 0}). */
static int get_label(const char *buf, int *idx, cb_str_t *out) {
  if (port_is_atom(buf, idx, "undefined")) {
    *out = (cb_str_t){NULL, 0};
    return 0;
  }
  return port_get_bin(buf, idx, out);
}

/* scenario: {Name, When | undefined, Then | undefined} (issue 25). */
static int decode_scenario(const char *buf, int *idx, cb_stub_t *st) {
  int arity;
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 3) return -1;
  return port_get_bin(buf, idx, &st->scenario) != 0 || get_label(buf, idx, &st->when) != 0 ||
                 get_label(buf, idx, &st->then) != 0
             ? -1
             : 0;
}

/* match.body: `any` or {equal | contains | regex | json | json_subset, Bytes} (cbench_c_terms:match/1). */
static int get_body_match(const char *buf, int *idx, cb_body_match_t *out) {
  static const struct {
    const char *name;
    int kind;
  } kinds[] = {{"equal", CB_MATCH_BODY_EQUAL}, {"contains", CB_MATCH_BODY_CONTAINS}, {"regex", CB_MATCH_BODY_REGEX},
               {"json", CB_MATCH_BODY_JSON}, {"json_subset", CB_MATCH_BODY_JSON_SUBSET}};
  int arity;
  char kind[MAXATOMLEN_UTF8];
  out->kind = CB_MATCH_BODY_ANY;
  out->value = (cb_str_t){NULL, 0};
  if (port_is_atom(buf, idx, "any")) return 0;
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 2 || ei_decode_atom(buf, idx, kind) != 0) return -1;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kind, kinds[i].name) == 0) {
      out->kind = kinds[i].kind;
      return port_get_bin(buf, idx, &out->value);
    }
  return -1;
}

/* Match: #{name, methods, path (pattern text), headers, query, priority, body} and optionally scenario, each key
 * once. */
int port_decode_match(const char *buf, int *idx, cb_stub_t *st, stub_arrays_t *a) {
  int arity, seen = 0, n;
  if (ei_decode_map_header(buf, idx, &arity) != 0 || arity < 7 || arity > 8) return -1;
  for (int i = 0; i < arity; i++) {
    char key[MAXATOMLEN_UTF8];
    if (ei_decode_atom(buf, idx, key) != 0) return -1;
    if (strcmp(key, "name") == 0) {
      if (port_is_atom(buf, idx, "undefined"))
        st->name = (cb_str_t){NULL, 0};
      else if (port_get_bin(buf, idx, &st->name) != 0)
        return -1;
      seen |= 1;
    } else if (strcmp(key, "methods") == 0) {
      st->match.methods = 0;
      if (!port_is_atom(buf, idx, "any") &&
          (get_list(buf, idx, 16, &n, get_method, &st->match.methods) != 0 || n == 0))
        return -1;
      seen |= 2;
    } else if (strcmp(key, "path") == 0) {
      if (port_get_bin(buf, idx, &st->match.path) != 0) return -1;
      seen |= 4;
    } else if (strcmp(key, "headers") == 0) {
      if (get_list(buf, idx, CB_MAX_MATCHERS, &n, get_matcher, a->headers) != 0) return -1;
      st->match.headers = a->headers;
      st->match.nheaders = (size_t)n;
      seen |= 8;
    } else if (strcmp(key, "query") == 0) {
      if (get_list(buf, idx, CB_MAX_MATCHERS, &n, get_matcher, a->query) != 0) return -1;
      st->match.query = a->query;
      st->match.nquery = (size_t)n;
      seen |= 16;
    } else if (strcmp(key, "priority") == 0) {
      long p;
      if (ei_decode_long(buf, idx, &p) != 0 || p < -2147483647L || p > 2147483647L) return -1;
      st->match.priority = (int)p;
      seen |= 32;
    } else if (strcmp(key, "body") == 0 && !(seen & 64)) {
      if (get_body_match(buf, idx, &st->match.body) != 0) return -1;
      seen |= 64;
    } else if (strcmp(key, "scenario") == 0 && !(seen & 128)) {
      if (decode_scenario(buf, idx, st) != 0) return -1;
      seen |= 128;
    } else {
      return -1;
    }
  }
  return (seen & 127) == 127 && arity == 7 + !!(seen & 128) ? 0 : -1;
}

/* {data, Bin} | {bytes, N} | {file, Path} */
static int decode_body(const char *buf, int *idx, cb_response_t *res) {
  int arity;
  unsigned long long u;
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 2) return -1;
  if (port_is_atom(buf, idx, "data")) {
    res->body_kind = CB_BODY_BYTES;
    return port_get_bin(buf, idx, &res->body);
  }
  if (port_is_atom(buf, idx, "bytes")) {
    res->body_kind = CB_BODY_GENERATED;
    if (port_get_uint(buf, idx, UINT64_MAX, &u) != 0) return -1;
    res->body_size = u;
    return 0;
  }
  if (port_is_atom(buf, idx, "file")) {
    res->body_kind = CB_BODY_FILE;
    return port_get_bin(buf, idx, &res->body) != 0 || res->body.len == 0 ? -1 : 0;
  }
  return -1;
}

/* delay: {uniform, Min, Max, Seed} | {lognormal, Median, Sigma, Seed} (issue 25). */
static int decode_delay(const char *buf, int *idx, cb_response_t *res) {
  int arity, uniform;
  unsigned long long a, b, seed;
  if (ei_decode_tuple_header(buf, idx, &arity) != 0 || arity != 4) return -1;
  if ((uniform = port_is_atom(buf, idx, "uniform")) == 0 && !port_is_atom(buf, idx, "lognormal")) return -1;
  if (port_get_uint(buf, idx, UINT32_MAX, &a) != 0) return -1;
  res->delay_ms = (unsigned)a;
  if (uniform) {
    if (port_get_uint(buf, idx, UINT32_MAX, &b) != 0) return -1;
    res->delay_max_ms = (unsigned)b;
    res->delay_dist = CB_DELAY_UNIFORM;
  } else {
    if (ei_decode_double(buf, idx, &res->delay_sigma) != 0) return -1;
    res->delay_dist = CB_DELAY_LOGNORMAL;
  }
  if (port_get_uint(buf, idx, UINT64_MAX, &seed) != 0) return -1;
  res->delay_seed = seed;
  return 0;
}

static int decode_response(const char *buf, int *idx, cb_response_t *res, stub_arrays_t *a, cb_stub_t *seq,
                           void **mem);

/* A sequence's responses (issue 25): each decoded into one malloc'ed block of responses and their header
 * arrays, which the caller frees (*mem). */
static int decode_responses(const char *buf, int *idx, cb_stub_t *st, void **mem) {
  int n;
  if (ei_decode_list_header(buf, idx, &n) != 0 || n <= 0 || n > CB_MAX_RESPONSES || *mem != NULL) return -1;
  cb_response_t *rs = calloc((size_t)n, sizeof *rs + sizeof(stub_arrays_t));
  if (rs == NULL) return -1;
  *mem = rs;
  stub_arrays_t *arrays = (stub_arrays_t *)(rs + n);
  for (int i = 0; i < n; i++)
    if (decode_response(buf, idx, &rs[i], &arrays[i], NULL, NULL) != 0) return -1;
  int tail;
  if (ei_decode_list_header(buf, idx, &tail) != 0 || tail != 0) return -1;
  st->responses = rs;
  st->nresponses = (size_t)n;
  return 0;
}

enum { K_STATUS = 1, K_HEADERS = 2, K_BODY = 4, K_DELAY_MS = 8, K_CHUNKS = 16, K_TIMES = 32, K_FAULT = 64,
       K_DELAY = 128, K_RESPONSES = 256, K_AFTER = 512, K_TEMPLATE = 1024 };

/* Response: #{status, headers, body, delay_ms, chunks, times} and optionally fault and delay, each key once; or,
 * where seq is not NULL (a stub's own response), a sequence: #{responses, after, times}. */
static int decode_response(const char *buf, int *idx, cb_response_t *res, stub_arrays_t *a, cb_stub_t *seq,
                           void **mem) {
  int arity, seen = 0, n;
  unsigned long long u;
  if (ei_decode_map_header(buf, idx, &arity) != 0 || arity < 3 || arity > 9) return -1;
  for (int i = 0; i < arity; i++) {
    char key[MAXATOMLEN_UTF8];
    if (ei_decode_atom(buf, idx, key) != 0) return -1;
    if (strcmp(key, "template") == 0 && !(seen & K_TEMPLATE)) {
      if (!port_is_atom(buf, idx, "true")) return -1;
      res->templated = 1;
      seen |= K_TEMPLATE;
    } else if (strcmp(key, "delay") == 0 && !(seen & K_DELAY)) {
      if (decode_delay(buf, idx, res) != 0) return -1;
      seen |= K_DELAY;
    } else if (seq != NULL && strcmp(key, "responses") == 0 && !(seen & K_RESPONSES)) {
      if (decode_responses(buf, idx, seq, mem) != 0) return -1;
      seen |= K_RESPONSES;
    } else if (seq != NULL && strcmp(key, "after") == 0 && !(seen & K_AFTER)) {
      if (port_is_atom(buf, idx, "last"))
        seq->after = CB_AFTER_LAST;
      else if (port_is_atom(buf, idx, "cycle"))
        seq->after = CB_AFTER_CYCLE;
      else if (port_is_atom(buf, idx, "not_found"))
        seq->after = CB_AFTER_NOT_FOUND;
      else
        return -1;
      seen |= K_AFTER;
    } else if (strcmp(key, "status") == 0) {
      if (port_get_uint(buf, idx, 599, &u) != 0) return -1;
      res->status = (int)u;
      seen |= 1;
    } else if (strcmp(key, "headers") == 0) {
      if (get_list(buf, idx, CB_MAX_HEADERS, &n, get_header, a->res_headers) != 0) return -1;
      res->headers = a->res_headers;
      res->nheaders = (size_t)n;
      seen |= 2;
    } else if (strcmp(key, "body") == 0) {
      if (decode_body(buf, idx, res) != 0) return -1;
      seen |= 4;
    } else if (strcmp(key, "delay_ms") == 0) {
      if (port_get_uint(buf, idx, UINT32_MAX, &u) != 0) return -1;
      res->delay_ms = (unsigned)u;
      seen |= 8;
    } else if (strcmp(key, "chunks") == 0) {
      unsigned long long ms;
      if (port_is_atom(buf, idx, "none")) {
        res->chunks = 0;
        res->interval_ms = 0;
      } else if (ei_decode_tuple_header(buf, idx, &n) != 0 || n != 2 || port_get_uint(buf, idx, UINT32_MAX, &u) != 0 ||
                 u == 0 || port_get_uint(buf, idx, UINT32_MAX, &ms) != 0) {
        return -1;
      } else {
        res->chunks = (unsigned)u;
        res->interval_ms = (unsigned)ms;
      }
      seen |= 16;
    } else if (strcmp(key, "times") == 0) {
      if (port_is_atom(buf, idx, "infinity"))
        res->times = 0;
      else if (port_get_uint(buf, idx, UINT64_MAX, &u) != 0 || u == 0)
        return -1;
      else
        res->times = u;
      seen |= 32;
    } else if (strcmp(key, "fault") == 0 && !(seen & 64)) {
      /* undefined, or the spec text of docs/faults.md (checked again by the engine) */
      if (!port_is_atom(buf, idx, "undefined") && port_get_bin(buf, idx, &res->fault) != 0) return -1;
      seen |= 64;
    } else {
      return -1;
    }
  }
  if (seen & (K_RESPONSES | K_AFTER)) return seen == (K_RESPONSES | K_AFTER | K_TIMES) && arity == 3 ? 0 : -1;
  return (seen & 63) == 63 && arity == 6 + !!(seen & K_FAULT) + !!(seen & K_DELAY) + !!(seen & K_TEMPLATE) ? 0 : -1;
}

/* {ok, Id}, or a refused field as cbench_spec names it: {error, {bad_stub, {Field, Value, Why}}} from
 * cb_error_detail(), the term nif/nif_stub.c (nif_add_error) builds, or the error's atom when the engine gave no
 * detail. `m` and `res` (NULL for a deferred route) still point into the frame. */
void port_reply_added(int err, uint64_t id, const cb_match_t *m, const cb_response_t *res) {
  const cb_error_detail_t *d = cb_error_detail();
  static const char *const keys[CB_FIELD_COUNT][2] = {
      [CB_FIELD_NAME] = {"match", "name"},           [CB_FIELD_METHODS] = {"match", "method"},
      [CB_FIELD_PATH] = {"match", "path"},           [CB_FIELD_MATCH_HEADERS] = {"match", "headers"},
      [CB_FIELD_MATCH_QUERY] = {"match", "query"},   [CB_FIELD_STATUS] = {"response", "status"},
      [CB_FIELD_HEADERS] = {"response", "headers"},  [CB_FIELD_BODY] = {"response", "body"},
      [CB_FIELD_DELAY_MS] = {"response", "delay_ms"}, [CB_FIELD_CHUNKS] = {"response", "chunks"},
      [CB_FIELD_INTERVAL_MS] = {"response", "chunks"}, [CB_FIELD_FAULT] = {"response", "fault"},
      [CB_FIELD_TIMEOUT_MS] = {"handler", "timeout_ms"}, [CB_FIELD_DELIVER] = {"handler", "deliver"},
      [CB_FIELD_RESPONSES] = {"response", "responses"}, [CB_FIELD_AFTER] = {"response", "after"},
      [CB_FIELD_SCENARIO] = {"match", "scenario"},     [CB_FIELD_WHEN] = {"match", "when"},
      [CB_FIELD_THEN] = {"match", "then"},             [CB_FIELD_DELAY] = {"response", "delay"},
      [CB_FIELD_TEMPLATE] = {"response", "template"},  [CB_FIELD_MATCH_BODY] = {"match", "body"}};
  if (err != CB_EINVAL || d->err != CB_EINVAL || d->field <= CB_FIELD_NONE || d->field >= CB_FIELD_COUNT ||
      keys[d->field][0] == NULL) {
    port_reply_id(err, id);
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
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "error");
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "bad_stub");
  ei_x_encode_tuple_header(&x, 3);
  ei_x_encode_tuple_header(&x, item ? 3 : 2);
  ei_x_encode_atom(&x, keys[d->field][0]);
  ei_x_encode_atom(&x, keys[d->field][1]);
  if (item) ei_x_encode_binary(&x, item->ptr, (long)item->len);
  if ((d->field == CB_FIELD_CHUNKS || d->field == CB_FIELD_INTERVAL_MS) && res) {
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_ulong(&x, res->chunks);
    ei_x_encode_ulong(&x, res->interval_ms);
  } else if (d->numeric) {
    ei_x_encode_longlong(&x, d->number);
  } else if (d->value.ptr == NULL) {
    ei_x_encode_atom(&x, "undefined");
  } else if (d->field == CB_FIELD_BODY && d->why == CB_WHY_NOT_REGULAR) {
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "file");
    ei_x_encode_binary(&x, d->value.ptr, (long)d->value.len);
  } else {
    ei_x_encode_binary(&x, d->value.ptr, (long)d->value.len);
  }
  ei_x_encode_atom(&x, d->why_name);
  port_send(&x);
}

void port_route_add(const char *buf, int *idx) {
  stub_arrays_t arrays;
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  void *mem = NULL;
  if (port_decode_match(buf, idx, &st, &arrays) != 0 ||
      decode_response(buf, idx, &st.response, &arrays, &st, &mem) != 0) {
    free(mem);
    port_reply_error_atom("badarg");
    return;
  }
  uint64_t id = 0;
  int err = cb_server_route_add(port_server, &st, &id); /* sets id: before the call that reads it */
  port_reply_added(err, id, &st.match, &st.response);
  free(mem);
}

void port_route_remove(const char *buf, int *idx) {
  port_id_op(buf, idx, cb_server_route_remove);
}

void port_route_reset(void) { port_reply_result(cb_server_route_reset(port_server)); }

/* {ok, [#{id, name, hits, left}]}, left being infinity or the uses left, as the NIF answers. */
void port_stubs(void) {
  cb_stub_list_t *list;
  int err = cb_server_stubs(port_server, &list);
  if (err < 0) {
    port_reply_error(err);
    return;
  }
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "ok");
  if (list->count > 0) ei_x_encode_list_header(&x, (long)list->count);
  for (size_t i = 0; i < list->count; i++) {
    const cb_stub_info_t *s = &list->items[i];
    ei_x_encode_map_header(&x, 4);
    ei_x_encode_atom(&x, "id");
    ei_x_encode_ulonglong(&x, s->id);
    ei_x_encode_atom(&x, "name");
    ei_x_encode_binary(&x, s->name.ptr, (long)s->name.len);
    ei_x_encode_atom(&x, "hits");
    ei_x_encode_ulonglong(&x, s->hits);
    ei_x_encode_atom(&x, "left");
    if (s->times == 0)
      ei_x_encode_atom(&x, "infinity");
    else
      ei_x_encode_ulonglong(&x, s->spent || s->hits >= s->times ? 0 : s->times - s->hits);
  }
  ei_x_encode_empty_list(&x);
  cb_stub_list_free(list);
  port_send(&x);
}
