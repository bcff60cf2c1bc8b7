/* Erlang handlers on the nif engine: a deferred route (src/deferred.c) whose requests are sent to a process,
 * and the NIFs that answer them (docs/beam.md, "Erlang handlers").
 *
 * Delivery runs on the engine's worker threads: each builds its messages in an environment of its own (one
 * per thread, made on first use, freed when the thread ends) and sends them with enif_send, so no scheduler
 * waits and no lock is taken. A batching route gets one {cbench_requests, [Req, ...]} per loop iteration of a
 * worker; the others one {cbench_request, Req} per request. A Req is a map whose `handle' is
 * {cbench_nif, Server, Ref}: Server the engine's resource, Ref the engine's request reference (worker, slot,
 * generation). Replies go through reply_nif/2 with a list of items: every item for one worker reaches it as
 * one command-queue post. */
#include <pthread.h>
#include <string.h>

#include "nif.h"

typedef struct {
  nif_server_t *res; /* kept (enif_keep_resource) for as long as the route exists */
  int by_name;
  int batch; /* always {cbench_requests, List} */
  int stream; /* body => stream: {cbench_body, Handle, Data} and {cbench_body_end, Handle} follow */
  ErlNifPid pid;
  ERL_NIF_TERM name; /* an atom: valid in any environment */
} target_t;

static pthread_key_t env_key;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void free_env(void *env) { enif_free_env(env); }
static void make_key(void) { pthread_key_create(&env_key, free_env); }

static ErlNifEnv *thread_env(void) {
  pthread_once(&env_once, make_key);
  ErlNifEnv *env = pthread_getspecific(env_key);
  if (env == NULL && (env = enif_alloc_env()) != NULL) pthread_setspecific(env_key, env);
  return env;
}

static ERL_NIF_TERM proto_atom(int proto) {
  switch (proto) {
    case CB_PROTO_H2C_PRIOR: return atom_h2c_prior;
    case CB_PROTO_H2C_UPGRADE: return atom_h2c_upgrade;
    default: return atom_http1;
  }
}

static ERL_NIF_TERM handle_term(ErlNifEnv *env, ERL_NIF_TERM server, cb_reqref_t ref) {
  return enif_make_tuple3(env, atom_cbench_nif, server, enif_make_uint64(env, ref));
}

static ERL_NIF_TERM request_term(ErlNifEnv *env, ERL_NIF_TERM server, const cb_deferred_req_t *q, int stream) {
  ERL_NIF_TERM hdrs = enif_make_list(env, 0);
  for (size_t i = q->nheaders; i-- > 0;) {
    const cb_header_t *h = &q->headers[i];
    hdrs = enif_make_list_cell(env,
                               enif_make_tuple2(env, nif_binary(env, h->name.ptr, h->name.len),
                                                nif_binary(env, h->value.ptr, h->value.len)),
                               hdrs);
  }
  ERL_NIF_TERM keys[] = {atom_method, atom_path, atom_query, atom_headers, atom_peer, atom_proto, atom_body,
                         atom_handle};
  ERL_NIF_TERM vals[] = {nif_binary(env, q->method.ptr, q->method.len), nif_binary(env, q->path.ptr, q->path.len),
                         nif_binary(env, q->query.ptr, q->query.len),   hdrs,
                         nif_binary(env, q->peer.ptr, q->peer.len),     proto_atom(q->proto),
                         stream ? atom_stream : nif_binary(env, q->body.ptr, q->body.len),
                         handle_term(env, server, q->ref)};
  ERL_NIF_TERM map;
  enif_make_map_from_arrays(env, keys, vals, sizeof keys / sizeof keys[0], &map);
  return map;
}

/* On a worker thread: one message for the n requests (batch) or for the one. Non-zero: nobody to send to. */
static int deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  target_t *t = ud;
  ErlNifPid pid = t->pid;
  if (t->by_name && !enif_whereis_pid(NULL, t->name, &pid)) return -1;
  ErlNifEnv *env = thread_env();
  if (env == NULL) return -1;
  ERL_NIF_TERM server = enif_make_resource(env, t->res);
  ERL_NIF_TERM msg;
  if (!t->batch) {
    msg = enif_make_tuple2(env, atom_cbench_request, request_term(env, server, &reqs[0], t->stream));
  } else {
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (size_t i = n; i-- > 0;) list = enif_make_list_cell(env, request_term(env, server, &reqs[i], t->stream), list);
    msg = enif_make_tuple2(env, atom_cbench_requests, list);
  }
  /* A send invalidates the environment's terms whether it succeeds or not: cleared for the next one. */
  int sent = enif_send(NULL, &pid, env, msg);
  enif_clear_env(env);
  return sent ? 0 : -1;
}

/* On a worker thread: a streamed body's bytes of one loop iteration, then its end. */
static void body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end) {
  target_t *t = ud;
  ErlNifPid pid = t->pid;
  if (t->by_name && !enif_whereis_pid(NULL, t->name, &pid)) return; /* the timeout answers it */
  ErlNifEnv *env = thread_env();
  if (env == NULL) return;
  ERL_NIF_TERM handle = handle_term(env, enif_make_resource(env, t->res), ref);
  if (n > 0) {
    enif_send(NULL, &pid, env, enif_make_tuple3(env, atom_cbench_body, handle, nif_binary(env, data, n)));
    enif_clear_env(env);
    handle = handle_term(env, enif_make_resource(env, t->res), ref);
  }
  if (end) enif_send(NULL, &pid, env, enif_make_tuple2(env, atom_cbench_body_end, handle));
  enif_clear_env(env);
}

static void target_free(void *ud) {
  target_t *t = ud;
  enif_release_resource(t->res);
  enif_free(t);
}

/* handler_add_nif(Resource, Match, Target, #{timeout_ms, batch, body}) -> {ok, Id} | {error, Reason}. Dirty I/O:
 * it waits for every worker to take the new table. A batching route always sends {cbench_requests, List}. */
ERL_NIF_TERM nif_handler_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_stub_arrays_t arrays;
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  if (!nif_decode_match(env, argv[1], &st, &arrays)) return enif_make_badarg(env);
  target_t tgt = {0};
  if (enif_is_atom(env, argv[2])) {
    tgt.by_name = 1;
    tgt.name = argv[2];
  } else if (!enif_get_local_pid(env, argv[2], &tgt.pid)) {
    return enif_make_badarg(env);
  }
  ERL_NIF_TERM v;
  unsigned tmo;
  if (!enif_get_map_value(env, argv[3], atom_timeout_ms, &v) || !enif_get_uint(env, v, &tmo) || tmo == 0 ||
      tmo > 3600000)
    return enif_make_badarg(env);
  if (!enif_get_map_value(env, argv[3], atom_batch, &v) ||
      !(enif_is_identical(v, atom_true) || enif_is_identical(v, atom_false)))
    return enif_make_badarg(env);
  int batch = enif_is_identical(v, atom_true);
  if (!enif_get_map_value(env, argv[3], atom_body, &v) ||
      !(enif_is_identical(v, atom_stream) || enif_is_identical(v, atom_whole)))
    return enif_make_badarg(env);
  int stream = enif_is_identical(v, atom_stream);
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  target_t *t = enif_alloc(sizeof *t);
  if (t == NULL) {
    nif_unlock(res);
    return nif_error(env, CB_ENOMEM);
  }
  *t = tgt;
  t->res = res;
  t->batch = batch;
  t->stream = stream;
  enif_keep_resource(res);
  cb_deferred_t d = {.name = st.name, .match = st.match, .timeout_ms = tmo, .batch = batch, .deliver = deliver,
                     .body = stream ? body_piece : NULL,
                     .ud = t, .free_ud = target_free};
  uint64_t id;
  int err = cb_server_deferred_add(srv, &d, &id);
  nif_unlock(res);
  if (err < 0) {
    enif_release_resource(res);
    enif_free(t);
    return nif_add_error(env, err, &st.match, NULL);
  }
  return enif_make_tuple2(env, atom_ok, enif_make_uint64(env, id));
}

/* handler_fail_nif(Resource, Id) -> ok: the handler's process is gone (a monitor in cbench_server). */
ERL_NIF_TERM nif_handler_fail(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return nif_id_op(env, argv, cb_server_deferred_fail);
}

static int get_iodata(ErlNifEnv *env, ERL_NIF_TERM t, cb_str_t *out) {
  ErlNifBinary b;
  if (!enif_inspect_iolist_as_binary(env, t, &b)) return 0;
  out->ptr = b.size ? (const char *)b.data : "";
  out->len = b.size;
  return 1;
}

/* One item: {Ref, reply, Status, Headers, Body} | {Ref, stream, Status, Headers} | {Ref, send, Data} |
 * {Ref, finish}. Headers go to hbuf from *nh on. */
static int decode_item(ErlNifEnv *env, ERL_NIF_TERM t, cb_reply_t *r, cb_header_t *hbuf, size_t *nh, size_t hcap) {
  const ERL_NIF_TERM *e;
  int arity;
  memset(r, 0, sizeof *r);
  if (!enif_get_tuple(env, t, &arity, &e) || arity < 2 || !enif_get_uint64(env, e[0], (ErlNifUInt64 *)&r->ref))
    return 0;
  if (arity == 5 && enif_is_identical(e[1], atom_reply)) r->op = CB_REPLY_FULL;
  else if (arity == 4 && enif_is_identical(e[1], atom_stream)) r->op = CB_REPLY_STREAM;
  else if (arity == 3 && enif_is_identical(e[1], atom_send)) r->op = CB_REPLY_SEND;
  else if (arity == 2 && enif_is_identical(e[1], atom_finish)) r->op = CB_REPLY_FINISH;
  else if (arity == 2 && enif_is_identical(e[1], atom_unavailable)) r->op = CB_REPLY_UNAVAILABLE;
  else return 0;
  if (r->op == CB_REPLY_SEND) return get_iodata(env, e[2], &r->body);
  if (r->op == CB_REPLY_FINISH || r->op == CB_REPLY_UNAVAILABLE) return 1;
  if (!enif_get_int(env, e[2], &r->status)) return 0;
  unsigned len;
  if (!enif_get_list_length(env, e[3], &len) || len > CB_MAX_HEADERS || *nh + len > hcap) return 0;
  r->headers = hbuf + *nh;
  r->nheaders = len;
  ERL_NIF_TERM head, tail = e[3];
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    const ERL_NIF_TERM *pair;
    if (!enif_get_tuple(env, head, &arity, &pair) || arity != 2 || !get_iodata(env, pair[0], &hbuf[*nh].name) ||
        !get_iodata(env, pair[1], &hbuf[*nh].value))
      return 0;
    (*nh)++;
  }
  return r->op == CB_REPLY_STREAM || get_iodata(env, e[4], &r->body);
}

/* reply_nif(Resource, [Item]) -> [ok | {error, gone} | {error, not_streaming} | {error, badarg}], one result per
 * item, in order (an item may also be {Ref, unavailable}: 503, as the port program takes it); badarg
 * when an item does not decode. Microseconds: nothing waits for a worker. */
ERL_NIF_TERM nif_reply(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  unsigned n;
  if (!enif_get_list_length(env, argv[1], &n) || n == 0) return enif_make_badarg(env);
  /* Room for every item's headers: counted first, so that a burst needs two allocations at most. */
  size_t hcap = 0;
  ERL_NIF_TERM head, tail = argv[1];
  while (enif_get_list_cell(env, tail, &head, &tail)) {
    const ERL_NIF_TERM *e;
    int arity;
    unsigned len;
    if (enif_get_tuple(env, head, &arity, &e) && arity >= 4 && enif_get_list_length(env, e[3], &len))
      hcap += len;
  }
  cb_reply_t stack_items[4];
  cb_header_t stack_hdrs[32];
  cb_reply_t *items = n <= 4 ? stack_items : enif_alloc(n * sizeof *items);
  cb_header_t *hdrs = hcap <= 32 ? stack_hdrs : enif_alloc(hcap * sizeof *hdrs);
  ERL_NIF_TERM out = 0;
  if (items == NULL || hdrs == NULL) {
    out = nif_error(env, CB_ENOMEM);
    goto done;
  }
  tail = argv[1];
  size_t nh = 0;
  for (unsigned i = 0; enif_get_list_cell(env, tail, &head, &tail); i++) {
    if (!decode_item(env, head, &items[i], hdrs, &nh, hcap)) {
      out = enif_make_badarg(env);
      goto done;
    }
  }
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) {
    out = enif_make_badarg(env);
    goto done;
  }
  if (locked < 0) { /* the server stopped: every request is gone */
    for (unsigned i = 0; i < n; i++) items[i].result = CB_EGONE;
  } else {
    int err = cb_server_reply(srv, items, n);
    nif_unlock(res);
    if (err < 0) {
      out = nif_error(env, err);
      goto done;
    }
  }
  ERL_NIF_TERM gone = enif_make_tuple2(env, atom_error, atom_gone);
  ERL_NIF_TERM early = enif_make_tuple2(env, atom_error, enif_make_atom(env, "not_streaming"));
  ERL_NIF_TERM bad = enif_make_tuple2(env, atom_error, enif_make_atom(env, "badarg"));
  out = enif_make_list(env, 0);
  for (unsigned i = n; i-- > 0;) {
    int r = items[i].result;
    out = enif_make_list_cell(env, r == 0 ? atom_ok : r == CB_EGONE ? gone : r == CB_ENOTSTREAMING ? early : bad, out);
  }
done:
  if (items != stack_items && items != NULL) enif_free(items);
  if (hdrs != stack_hdrs && hdrs != NULL) enif_free(hdrs);
  return out;
}
