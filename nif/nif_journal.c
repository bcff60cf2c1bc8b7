/* The request journal from Erlang: reads as maps (the keys of cbench_journal:entry()), clear, and the listener
 * that wakes cbench:await/4.
 *
 * The listener runs on the worker thread that recorded a request, and only while someone awaits (the engine
 * calls nothing while it is unset): it sends {cbench_journal, Seq} to the server process from an environment
 * of its own (process-independent, as enif_send requires off a scheduler), allocated per message because
 * several workers may call it at once.
 */
#include <string.h>

#include "nif.h"

static ERL_NIF_TERM proto_atom(ErlNifEnv *env, int proto) {
  const char *name = cb_proto_name(proto);
  return name ? enif_make_atom(env, name) : atom_undefined;
}

static ERL_NIF_TERM entry(ErlNifEnv *env, const cb_request_t *q) {
  ERL_NIF_TERM headers = enif_make_list(env, 0);
  for (size_t i = q->nheaders; i-- > 0;)
    headers = enif_make_list_cell(env,
                                  enif_make_tuple2(env, nif_binary(env, q->headers[i].name.ptr, q->headers[i].name.len),
                                                   nif_binary(env, q->headers[i].value.ptr, q->headers[i].value.len)),
                                  headers);
  ERL_NIF_TERM keys[] = {atom_seq,     atom_time_us, atom_proto,       atom_conn,  atom_stream,  atom_peer,
                         atom_method,  atom_path,    atom_query,       atom_headers, atom_body,  atom_body_length,
                         atom_route,   atom_stub,    atom_status,      atom_bytes_out, atom_duration_us,
                         atom_fault,   atom_delay_ms};
  ERL_NIF_TERM vals[] = {enif_make_uint64(env, q->seq),
                         enif_make_int64(env, q->time_us),
                         proto_atom(env, q->proto),
                         enif_make_uint64(env, q->conn_id),
                         enif_make_uint(env, q->stream_id),
                         nif_binary(env, q->peer.ptr, q->peer.len),
                         nif_binary(env, q->method.ptr, q->method.len),
                         nif_binary(env, q->path.ptr, q->path.len),
                         nif_binary(env, q->query.ptr, q->query.len),
                         headers,
                         nif_binary(env, q->body.ptr, q->body.len),
                         enif_make_uint64(env, q->body_len),
                         nif_route_name(env, q->route.ptr, q->route.len),
                         q->stub_id ? enif_make_uint64(env, q->stub_id) : atom_undefined,
                         enif_make_int(env, q->status),
                         enif_make_uint64(env, q->bytes_out),
                         enif_make_uint64(env, q->duration_us),
                         q->fault.len ? enif_make_atom_len(env, q->fault.ptr, q->fault.len) : atom_undefined,
                         enif_make_uint(env, q->delay_ms)};
  ERL_NIF_TERM map;
  if (!enif_make_map_from_arrays(env, keys, vals, sizeof keys / sizeof keys[0], &map))
    return enif_raise_exception(env, enif_make_string(env, __FILE__ ": duplicate journal key", ERL_NIF_LATIN1));
  return map;
}

/* An optional binary of the filter map: `undefined` is absent. */
static int get_opt_str(ErlNifEnv *env, ERL_NIF_TERM map, ERL_NIF_TERM key, cb_str_t *out) {
  ERL_NIF_TERM v;
  ErlNifBinary b;
  if (!enif_get_map_value(env, map, key, &v)) return 0;
  if (enif_is_identical(v, atom_undefined)) {
    *out = (cb_str_t){NULL, 0};
    return 1;
  }
  if (!enif_inspect_binary(env, v, &b)) return 0;
  *out = (cb_str_t){b.size ? (const char *)b.data : "", b.size};
  return 1;
}

/* requests_nif(Resource, #{since, method, path, stub}) -> [Entry] | {error, Reason}. The filter is what the
 * engine can apply itself (cbench_journal filters the rest). Dirty I/O: the read goes through every worker's
 * queue. */
ERL_NIF_TERM nif_requests(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_request_filter_t f;
  memset(&f, 0, sizeof f);
  ERL_NIF_TERM v;
  ErlNifUInt64 u;
  if (!enif_is_map(env, argv[1]) || !enif_get_map_value(env, argv[1], atom_since, &v) ||
      !enif_get_uint64(env, v, &u))
    return enif_make_badarg(env);
  f.since = u;
  if (!get_opt_str(env, argv[1], atom_method, &f.method) || !get_opt_str(env, argv[1], atom_path, &f.path) ||
      !enif_get_map_value(env, argv[1], atom_stub, &v))
    return enif_make_badarg(env);
  /* A stub id that cannot exist (0, negative, 2^64 and more) matches no entry: the answer is [], as for an id
   * that was never given, and the engine is not asked. */
  int none = 0;
  if (!enif_is_identical(v, atom_undefined)) {
    if (!nif_get_id(env, v, &f.stub_id)) return enif_make_badarg(env);
    none = f.stub_id == 0;
  }
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  if (none) {
    nif_unlock(res);
    return enif_make_list(env, 0);
  }
  cb_request_list_t *list;
  int err = cb_server_requests(srv, &f, &list);
  nif_unlock(res);
  if (err < 0) return nif_error(env, err);
  ERL_NIF_TERM out = enif_make_list(env, 0);
  for (size_t i = list->count; i-- > 0;) out = enif_make_list_cell(env, entry(env, &list->items[i]), out);
  cb_request_list_free(list);
  return out;
}

/* requests_clear_nif(Resource) -> ok. Dirty I/O. */
ERL_NIF_TERM nif_requests_clear(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  int err = cb_server_requests_clear(srv);
  nif_unlock(res);
  return err < 0 ? nif_error(env, err) : atom_ok;
}

/* On a worker thread, right after a request was recorded. */
static void wake(void *ud, const cb_request_t *req) {
  const nif_listener_t *l = ud;
  ErlNifEnv *msg_env = enif_alloc_env();
  if (msg_env == NULL) return; /* the waiter's timeout still answers it */
  enif_send(NULL, &l->pid, msg_env,
            enif_make_tuple2(msg_env, atom_cbench_journal, enif_make_uint64(msg_env, req->seq)));
  enif_free_env(msg_env);
}

/* journal_listen_nif(Resource, Pid | false) -> ok. Pid gets {cbench_journal, Seq} for every request recorded
 * from now on; false stops it. Dirty I/O: the engine's set waits for every worker, after which the listener
 * that was replaced is no longer used and is freed. */
ERL_NIF_TERM nif_journal_listen(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_listener_t *l = NULL;
  if (!enif_is_identical(argv[1], atom_false)) {
    ErlNifPid pid;
    if (!enif_get_local_pid(env, argv[1], &pid)) return enif_make_badarg(env);
    if ((l = enif_alloc(sizeof *l)) == NULL) return nif_error(env, CB_ENOMEM);
    l->pid = pid;
  }
  nif_server_t *res;
  if (!nif_get_server(env, argv[0], &res)) {
    if (l != NULL) enif_free(l);
    return enif_make_badarg(env);
  }
  /* Exclusive: two listen calls on one server must not cross between the engine's set and the swap below. */
  enif_rwlock_rwlock(res->lock);
  int err = res->srv == NULL ? CB_ESTOPPED : cb_server_set_journal_listener(res->srv, l ? wake : NULL, l);
  nif_listener_t *old = NULL;
  if (err == 0) {
    old = res->listener;
    res->listener = l;
  }
  enif_rwlock_rwunlock(res->lock);
  if (err < 0) {
    if (l != NULL) enif_free(l);
    return err == CB_ESTOPPED ? nif_stopped(env) : nif_error(env, err);
  }
  if (old != NULL) enif_free(old);
  return atom_ok;
}
