/* Stubs: cbench_spec's canonical terms decoded into a cb_stub_t, and the route NIFs.
 *
 * cbench_nif:route_add/3 has already checked the terms (cbench_spec); they are decoded here field by field,
 * each checked again, because a NIF must survive any term: anything that does not decode is badarg. Strings
 * point into the argument binaries, which live until the NIF returns; cb_server_route_add copies what it keeps.
 */
#include <string.h>

#include "nif.h"

/* A binary's bytes as a cb_str_t (not an iolist: the canonical form has binaries only). */
static int get_str(ErlNifEnv *env, ERL_NIF_TERM t, cb_str_t *out) {
  ErlNifBinary b;
  if (!enif_inspect_binary(env, t, &b)) return 0;
  out->ptr = b.size ? (const char *)b.data : "";
  out->len = b.size;
  return 1;
}

static int get_map_value(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key, ERL_NIF_TERM *v) {
  return enif_is_map(env, map) && enif_get_map_value(env, map, key, v);
}

static int get_uint_in(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key, ErlNifUInt64 max, ErlNifUInt64 *out) {
  ERL_NIF_TERM v;
  return get_map_value(env, map, key, &v) && enif_get_uint64(env, v, out) && *out <= max;
}

/* `any` or a list of method names, to CB_METHOD_* bits (0: any). An unknown name does not decode. */
static int get_methods(ErlNifEnv *env, ERL_NIF_TERM t, unsigned *bits) {
  *bits = 0;
  if (enif_is_identical(t, atom_any)) return 1;
  unsigned len;
  if (!enif_get_list_length(env, t, &len) || len == 0 || len > 16) return 0;
  ERL_NIF_TERM head, tail = t;
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    cb_str_t name;
    unsigned bit;
    if (!get_str(env, head, &name) || (bit = cb_method_bit(name)) == 0) return 0;
    *bits |= bit;
  }
  return 1;
}

/* [{Name, present | {equal, Value}}] into at most CB_MAX_MATCHERS matchers. */
static int get_matchers(ErlNifEnv *env, ERL_NIF_TERM t, cb_matcher_t *out, size_t *n) {
  unsigned len;
  if (!enif_get_list_length(env, t, &len) || len > CB_MAX_MATCHERS) return 0;
  ERL_NIF_TERM head, tail = t;
  *n = 0;
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    const ERL_NIF_TERM *pair, *eq;
    int arity;
    cb_matcher_t *m = &out[(*n)++];
    if (!enif_get_tuple(env, head, &arity, &pair) || arity != 2 || !get_str(env, pair[0], &m->name)) return 0;
    if (enif_is_identical(pair[1], atom_present)) {
      m->value = (cb_str_t){NULL, 0};
    } else if (!enif_get_tuple(env, pair[1], &arity, &eq) || arity != 2 || !enif_is_identical(eq[0], atom_equal) ||
               !get_str(env, eq[1], &m->value)) {
      return 0;
    }
  }
  return 1;
}

/* [{Name, Value}] into at most CB_MAX_HEADERS response headers. */
static int get_headers(ErlNifEnv *env, ERL_NIF_TERM t, cb_header_t *out, size_t *n) {
  unsigned len;
  if (!enif_get_list_length(env, t, &len) || len > CB_MAX_HEADERS) return 0;
  ERL_NIF_TERM head, tail = t;
  *n = 0;
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    const ERL_NIF_TERM *pair;
    int arity;
    cb_header_t *h = &out[(*n)++];
    if (!enif_get_tuple(env, head, &arity, &pair) || arity != 2 || !get_str(env, pair[0], &h->name) ||
        !get_str(env, pair[1], &h->value))
      return 0;
  }
  return 1;
}

/* A label or undefined ({NULL, 0}). */
static int get_label(ErlNifEnv *env, ERL_NIF_TERM t, cb_str_t *out) {
  if (enif_is_identical(t, atom_undefined)) {
    *out = (cb_str_t){NULL, 0};
    return 1;
  }
  return get_str(env, t, out);
}

/* scenario: {Name, When | undefined, Then | undefined} (issue 25). */
static int decode_scenario(ErlNifEnv *env, ERL_NIF_TERM t, cb_stub_t *st) {
  const ERL_NIF_TERM *tuple;
  int arity;
  return enif_get_tuple(env, t, &arity, &tuple) && arity == 3 && get_str(env, tuple[0], &st->scenario) &&
         get_label(env, tuple[1], &st->when) && get_label(env, tuple[2], &st->then);
}


/* match.body: `any` or {equal | contains | regex | json | json_subset, Bytes} (cbench_c_terms:match/1). */
static int get_body_match(ErlNifEnv *env, ERL_NIF_TERM t, cb_body_match_t *out) {
  const ERL_NIF_TERM *tuple;
  int arity;
  out->kind = CB_MATCH_BODY_ANY;
  out->value = (cb_str_t){NULL, 0};
  if (enif_is_identical(t, atom_any)) return 1;
  if (!enif_get_tuple(env, t, &arity, &tuple) || arity != 2 || !get_str(env, tuple[1], &out->value)) return 0;
  if (enif_is_identical(tuple[0], atom_equal)) out->kind = CB_MATCH_BODY_EQUAL;
  else if (enif_is_identical(tuple[0], atom_contains)) out->kind = CB_MATCH_BODY_CONTAINS;
  else if (enif_is_identical(tuple[0], atom_regex)) out->kind = CB_MATCH_BODY_REGEX;
  else if (enif_is_identical(tuple[0], atom_json)) out->kind = CB_MATCH_BODY_JSON;
  else if (enif_is_identical(tuple[0], atom_json_subset)) out->kind = CB_MATCH_BODY_JSON_SUBSET;
  else return 0;
  return 1;
}

/* Match: #{name, methods, path (pattern text), headers, query, priority, body} and optionally scenario. */
int nif_decode_match(ErlNifEnv *env, ERL_NIF_TERM map, cb_stub_t *st, nif_stub_arrays_t *a) {
  ERL_NIF_TERM v;
  if (!get_map_value(env, map, atom_name, &v)) return 0;
  if (enif_is_identical(v, atom_undefined))
    st->name = (cb_str_t){NULL, 0};
  else if (!get_str(env, v, &st->name))
    return 0;
  if (!get_map_value(env, map, atom_methods, &v) || !get_methods(env, v, &st->match.methods)) return 0;
  if (!get_map_value(env, map, atom_path, &v) || !get_str(env, v, &st->match.path)) return 0;
  if (!get_map_value(env, map, atom_headers, &v) || !get_matchers(env, v, a->headers, &st->match.nheaders))
    return 0;
  st->match.headers = a->headers;
  if (!get_map_value(env, map, atom_query, &v) || !get_matchers(env, v, a->query, &st->match.nquery)) return 0;
  st->match.query = a->query;
  if (!get_map_value(env, map, atom_body, &v) || !get_body_match(env, v, &st->match.body)) return 0;
  if (!get_map_value(env, map, atom_priority, &v) || !enif_get_int(env, v, &st->match.priority)) return 0;
  return !get_map_value(env, map, atom_scenario, &v) || decode_scenario(env, v, st);
}

static int get_times(ErlNifEnv *env, ERL_NIF_TERM map, uint64_t *times) {
  ERL_NIF_TERM v;
  ErlNifUInt64 u;
  if (!get_map_value(env, map, atom_times, &v)) return 0;
  if (enif_is_identical(v, atom_infinity)) {
    *times = 0;
    return 1;
  }
  if (!enif_get_uint64(env, v, &u) || u == 0) return 0;
  *times = u;
  return 1;
}

/* delay: {uniform, Min, Max, Seed} | {lognormal, Median, Sigma, Seed} (issue 25); delay_ms holds Min or the
 * median already. */
static int decode_delay(ErlNifEnv *env, ERL_NIF_TERM t, cb_response_t *res) {
  const ERL_NIF_TERM *tuple;
  int arity;
  ErlNifUInt64 seed;
  unsigned a;
  if (!enif_get_tuple(env, t, &arity, &tuple) || arity != 4 || !enif_get_uint(env, tuple[1], &a) ||
      !enif_get_uint64(env, tuple[3], &seed))
    return 0;
  res->delay_ms = a;
  res->delay_seed = seed;
  if (enif_is_identical(tuple[0], atom_uniform)) {
    res->delay_dist = CB_DELAY_UNIFORM;
    return enif_get_uint(env, tuple[2], &res->delay_max_ms);
  }
  res->delay_dist = CB_DELAY_LOGNORMAL;
  return enif_is_identical(tuple[0], atom_lognormal) && enif_get_double(env, tuple[2], &res->delay_sigma);
}

/* Response: #{status, headers, body, delay_ms, chunks, times} and optionally fault and delay. */
static int decode_response(ErlNifEnv *env, ERL_NIF_TERM map, cb_response_t *res, nif_stub_arrays_t *a) {
  ErlNifUInt64 u;
  ERL_NIF_TERM v;
  const ERL_NIF_TERM *tuple;
  int arity;
  if (!get_uint_in(env, map, atom_status, 599, &u)) return 0;
  res->status = (int)u;
  if (!get_map_value(env, map, atom_headers, &v) || !get_headers(env, v, a->res_headers, &res->nheaders)) return 0;
  res->headers = a->res_headers;

  if (!get_map_value(env, map, atom_body, &v) || !enif_get_tuple(env, v, &arity, &tuple) || arity != 2) return 0;
  if (enif_is_identical(tuple[0], atom_data)) {
    res->body_kind = CB_BODY_BYTES;
    if (!get_str(env, tuple[1], &res->body)) return 0;
  } else if (enif_is_identical(tuple[0], atom_bytes)) {
    res->body_kind = CB_BODY_GENERATED;
    if (!enif_get_uint64(env, tuple[1], &u)) return 0;
    res->body_size = u;
  } else if (enif_is_identical(tuple[0], atom_file)) {
    res->body_kind = CB_BODY_FILE;
    if (!get_str(env, tuple[1], &res->body) || res->body.len == 0) return 0;
  } else {
    return 0;
  }

  if (!get_uint_in(env, map, atom_delay_ms, UINT32_MAX, &u)) return 0;
  res->delay_ms = (unsigned)u;
  if (!get_map_value(env, map, atom_chunks, &v)) return 0;
  if (enif_is_identical(v, atom_none)) {
    res->chunks = 0;
    res->interval_ms = 0;
  } else {
    unsigned n, ms;
    if (!enif_get_tuple(env, v, &arity, &tuple) || arity != 2 || !enif_get_uint(env, tuple[0], &n) || n == 0 ||
        !enif_get_uint(env, tuple[1], &ms))
      return 0;
    res->chunks = n;
    res->interval_ms = ms;
  }
  /* fault: undefined, or the spec text (docs/faults.md), checked again by the engine. */
  if (get_map_value(env, map, atom_fault, &v) && !enif_is_identical(v, atom_undefined) &&
      !get_str(env, v, &res->fault))
    return 0;
  if (!get_times(env, map, &res->times)) return 0;
  if (get_map_value(env, map, atom_template, &v)) {
    if (!enif_is_identical(v, atom_true)) return 0;
    res->templated = 1;
  }
  return !get_map_value(env, map, atom_delay, &v) || decode_delay(env, v, res);
}

/* A sequence (issue 25): #{responses => [Response], after => last | cycle | not_found, times}. The responses and
 * their header arrays live in one enif_alloc'ed block, which the caller frees (*mem). */
static int decode_sequence(ErlNifEnv *env, ERL_NIF_TERM map, cb_stub_t *st, void **mem) {
  ERL_NIF_TERM v, list, head;
  unsigned n;
  if (!get_map_value(env, map, atom_responses, &list) || !enif_get_list_length(env, list, &n) || n == 0 ||
      n > CB_MAX_RESPONSES)
    return 0;
  if (!get_map_value(env, map, atom_after, &v)) return 0;
  if (enif_is_identical(v, atom_last))
    st->after = CB_AFTER_LAST;
  else if (enif_is_identical(v, atom_cycle))
    st->after = CB_AFTER_CYCLE;
  else if (enif_is_identical(v, atom_not_found))
    st->after = CB_AFTER_NOT_FOUND;
  else
    return 0;
  if (!get_times(env, map, &st->response.times)) return 0;
  cb_response_t *rs = enif_alloc(n * (sizeof *rs + sizeof(nif_stub_arrays_t)));
  if (rs == NULL) return 0;
  *mem = rs;
  nif_stub_arrays_t *arrays = (nif_stub_arrays_t *)(rs + n);
  memset(rs, 0, n * sizeof *rs);
  for (unsigned i = 0; enif_get_list_cell(env, list, &head, &list); i++)
    if (!decode_response(env, head, &rs[i], &arrays[i])) return 0;
  st->responses = rs;
  st->nresponses = n;
  return 1;
}

/* A field refused by the engine as cbench_spec names it: {error, {bad_stub, {Field, Value, Why}}} from
 * cb_error_detail() (include/cbench.h lists the fields with their Erlang names), or the error's atom when the
 * engine gave no detail. Called on the thread that added the stub, right after, while `m` and `res` (NULL for a
 * deferred route) still point into the argument terms. c_src/port_stub.c builds the same term with ei. */
ERL_NIF_TERM nif_add_error(ErlNifEnv *env, int err, const cb_match_t *m, const cb_response_t *res) {
  const cb_error_detail_t *d = cb_error_detail();
  if (err != CB_EINVAL || d->err != CB_EINVAL) return nif_error(env, err);
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
  if (d->field <= CB_FIELD_NONE || d->field >= CB_FIELD_COUNT || keys[d->field][0] == NULL)
    return nif_error(env, err);
  ERL_NIF_TERM term = enif_make_atom(env, keys[d->field][0]), key = enif_make_atom(env, keys[d->field][1]);
  /* An item of a list is named by its name, as cbench_spec names it. */
  const cb_str_t *item = NULL;
  if (d->index >= 0 && d->field == CB_FIELD_MATCH_HEADERS && (size_t)d->index < m->nheaders)
    item = &m->headers[d->index].name;
  else if (d->index >= 0 && d->field == CB_FIELD_MATCH_QUERY && (size_t)d->index < m->nquery)
    item = &m->query[d->index].name;
  else if (d->index >= 0 && d->field == CB_FIELD_HEADERS && res && (size_t)d->index < res->nheaders)
    item = &res->headers[d->index].name;
  ERL_NIF_TERM field = item ? enif_make_tuple3(env, term, key, nif_binary(env, item->ptr, item->len))
                            : enif_make_tuple2(env, term, key);
  ERL_NIF_TERM value;
  if ((d->field == CB_FIELD_CHUNKS || d->field == CB_FIELD_INTERVAL_MS) && res)
    value = enif_make_tuple2(env, enif_make_uint(env, res->chunks), enif_make_uint(env, res->interval_ms));
  else if (d->numeric)
    value = enif_make_int64(env, d->number);
  else if (d->value.ptr == NULL)
    value = atom_undefined;
  else if (d->field == CB_FIELD_BODY && d->why == CB_WHY_NOT_REGULAR)
    value = enif_make_tuple2(env, atom_file, nif_binary(env, d->value.ptr, d->value.len));
  else
    value = nif_binary(env, d->value.ptr, d->value.len);
  ERL_NIF_TERM bad = enif_make_tuple3(env, field, value, enif_make_atom(env, d->why_name));
  return enif_make_tuple2(env, atom_error, enif_make_tuple2(env, enif_make_atom(env, "bad_stub"), bad));
}

/* route_add_nif(Resource, Match, Response) -> {ok, Id} | {error, Reason}. Dirty I/O: it waits for every worker
 * to take the new table (and opens and maps a body file). */
ERL_NIF_TERM nif_route_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_stub_arrays_t arrays;
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  void *mem = NULL;
  ERL_NIF_TERM v;
  int seq = get_map_value(env, argv[2], atom_responses, &v);
  if (!nif_decode_match(env, argv[1], &st, &arrays) ||
      !(seq ? decode_sequence(env, argv[2], &st, &mem) : decode_response(env, argv[2], &st.response, &arrays))) {
    if (mem) enif_free(mem);
    return enif_make_badarg(env);
  }
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  uint64_t id;
  int err = cb_server_route_add(srv, &st, &id);
  nif_unlock(res);
  ERL_NIF_TERM ret = err < 0 ? nif_add_error(env, err, &st.match, &st.response)
                             : enif_make_tuple2(env, atom_ok, enif_make_uint64(env, id));
  if (mem) enif_free(mem);
  return ret;
}

/* route_remove_nif(Resource, Id) -> ok | {error, enoent}. Dirty I/O. */
ERL_NIF_TERM nif_route_remove(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return nif_id_op(env, argv, cb_server_route_remove);
}

/* route_reset_nif(Resource) -> ok. Dirty I/O. */
ERL_NIF_TERM nif_route_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  int err = cb_server_route_reset(srv);
  nif_unlock(res);
  return err < 0 ? nif_error(env, err) : atom_ok;
}

/* stubs_nif(Resource) -> [#{id, name, hits, left}], left being infinity or the uses left. Microseconds: the
 * counts are read without the workers. */
ERL_NIF_TERM nif_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  cb_stub_list_t *list;
  int err = cb_server_stubs(srv, &list);
  nif_unlock(res);
  if (err < 0) return nif_error(env, err);
  ERL_NIF_TERM out = enif_make_list(env, 0);
  for (size_t i = list->count; i-- > 0;) {
    const cb_stub_info_t *s = &list->items[i];
    ERL_NIF_TERM left = s->times == 0 ? atom_infinity
                        : s->spent || s->hits >= s->times ? enif_make_uint64(env, 0)
                                                          : enif_make_uint64(env, s->times - s->hits);
    ERL_NIF_TERM keys[] = {atom_id, atom_name, atom_hits, atom_left};
    ERL_NIF_TERM vals[] = {enif_make_uint64(env, s->id), nif_binary(env, s->name.ptr, s->name.len),
                           enif_make_uint64(env, s->hits), left};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, vals, 4, &map);
    out = enif_make_list_cell(env, map, out);
  }
  cb_stub_list_free(list);
  return out;
}
