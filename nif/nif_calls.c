/* The control-plane NIFs: each decodes its arguments with the codec (terms/codec.h), calls the engine under
 * the resource's lock and encodes the answer with the codec, so the NIF and the port program take and give the
 * same terms. Anything that does not decode is badarg. Strings point into the argument terms, which live until
 * the NIF returns; the engine copies what it keeps.
 *
 * Dirty I/O (funcs in cbench_nif.c): everything that waits for the workers (adds, removes, journal reads and
 * clears, the listener). Dirty CPU: the stub list, whose work grows with the stubs (up to CB_MAX_ROUTES, 100,000:
 * a copy and a map each, tens of milliseconds), and reply_dirty_nif, for replies whose bytes or items pass
 * what a normal scheduler may spend (a NIF should return within about a millisecond). The rest (scenarios,
 * handler_fail, reply_nif) return in microseconds.
 */
#include <string.h>

#include "nif.h"

#define T(t) CB_ENIF_TERM(t)

/* Takes the server of argv[0] or returns: badarg for a term that is not a server, {error, stopped}. */
#define LOCK_OR_RETURN(env, argv, res, srv)                        \
  do {                                                             \
    int locked_ = nif_lock((env), (argv)[0], &(res), &(srv));      \
    if (locked_ == 0) return enif_make_badarg(env);                \
    if (locked_ < 0) return nif_stopped(env);                      \
  } while (0)

/* ok | {error, Name} */
static ERL_NIF_TERM result(ErlNifEnv *env, int err) {
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_result(&w.out, err);
  return nif_written(&w);
}

/* The body of a NIF (Resource, Id) -> ok | {error, Reason}: an id that cannot be one (negative, 2^64 and more)
 * names nothing (CB_ENOENT: not_found in cbench) rather than badarg, so a caller's id never raises in the
 * server process that makes the call; anything but an integer is badarg. */
static ERL_NIF_TERM id_op(ErlNifEnv *env, const ERL_NIF_TERM argv[], int (*op)(cb_server_t *, uint64_t)) {
  cb_enif_in_t r;
  uint64_t id;
  nif_server_t *res;
  cb_server_t *srv;
  cb_enif_in_init(&r, env);
  if (cb_codec_id(&r.in, T(argv[1]), &id) != 0) return enif_make_badarg(env);
  LOCK_OR_RETURN(env, argv, res, srv);
  int err = id == 0 ? CB_ENOENT : op(srv, id);
  nif_unlock(res);
  return result(env, err);
}

/* An operation on the server alone -> ok | {error, Reason}. */
static ERL_NIF_TERM server_op(ErlNifEnv *env, const ERL_NIF_TERM argv[], int (*op)(cb_server_t *)) {
  nif_server_t *res;
  cb_server_t *srv;
  LOCK_OR_RETURN(env, argv, res, srv);
  int err = op(srv);
  nif_unlock(res);
  return result(env, err);
}

/* ---- routes ---- */

/* route_add_nif(Resource, Match, Response) -> {ok, Id} | {error, Reason}. */
ERL_NIF_TERM nif_route_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_enif_in_t r;
  cb_codec_stub_t s;
  nif_server_t *res;
  cb_server_t *srv;
  cb_enif_in_init(&r, env);
  if (cb_codec_match(&r.in, T(argv[1]), &s) != 0 || cb_codec_response(&r.in, T(argv[2]), &s) != 0) {
    cb_codec_stub_free(&s);
    return enif_make_badarg(env);
  }
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked <= 0) {
    cb_codec_stub_free(&s);
    return locked == 0 ? enif_make_badarg(env) : nif_stopped(env);
  }
  uint64_t id = 0;
  int err = cb_server_route_add(srv, &s.st, &id);
  nif_unlock(res);
  /* Right after, on the thread that added it: cb_error_detail() is this thread's. */
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_add_result(&w.out, err, id, &s.st.match, &s.st.response);
  cb_codec_stub_free(&s);
  return nif_written(&w);
}

/* route_remove_nif(Resource, Id) -> ok | {error, enoent}. */
ERL_NIF_TERM nif_route_remove(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return id_op(env, argv, cb_server_route_remove);
}

/* route_reset_nif(Resource) -> ok. */
ERL_NIF_TERM nif_route_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return server_op(env, argv, cb_server_route_reset);
}

/* stubs_nif(Resource) -> [#{id, name, hits, left}]. The counts are read without the workers. */
ERL_NIF_TERM nif_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  cb_stub_list_t *list;
  LOCK_OR_RETURN(env, argv, res, srv);
  int err = cb_server_stubs(srv, &list);
  nif_unlock(res);
  if (err < 0) return nif_error(env, err);
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_stub_list(&w.out, list);
  cb_stub_list_free(list);
  return nif_written(&w);
}

/* ---- scenarios: the engine checks names and states ---- */

/* scenario_nif(Resource, Name) -> {ok, State}. */
ERL_NIF_TERM nif_scenario(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_enif_in_t r;
  cb_str_t name;
  nif_server_t *res;
  cb_server_t *srv;
  cb_enif_in_init(&r, env);
  if (cb_codec_binary(&r.in, T(argv[1]), &name) != 0) return enif_make_badarg(env);
  LOCK_OR_RETURN(env, argv, res, srv);
  char state[CB_MAX_NAME + 1];
  int n = cb_server_scenario(srv, name, state, sizeof state);
  nif_unlock(res);
  if (n < 0) return nif_error(env, n);
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_scenario_state(&w.out, state, (size_t)n);
  return nif_written(&w);
}

/* scenario_set_nif(Resource, Name, State) -> ok. */
ERL_NIF_TERM nif_scenario_set(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_enif_in_t r;
  cb_str_t name, state;
  nif_server_t *res;
  cb_server_t *srv;
  cb_enif_in_init(&r, env);
  if (cb_codec_binary(&r.in, T(argv[1]), &name) != 0 || cb_codec_binary(&r.in, T(argv[2]), &state) != 0)
    return enif_make_badarg(env);
  LOCK_OR_RETURN(env, argv, res, srv);
  int err = cb_server_scenario_set(srv, name, state);
  nif_unlock(res);
  return result(env, err);
}

/* scenarios_reset_nif(Resource) -> ok. */
ERL_NIF_TERM nif_scenarios_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return server_op(env, argv, cb_server_scenarios_reset);
}

/* ---- the journal ---- */

/* requests_nif(Resource, #{since, method, path, stub}) -> [Entry]: the engine's part of the filter
 * (cbench_journal filters the rest). */
ERL_NIF_TERM nif_requests(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_enif_in_t r;
  cb_request_filter_t f;
  int none;
  nif_server_t *res;
  cb_server_t *srv;
  cb_enif_in_init(&r, env);
  if (cb_codec_filter(&r.in, T(argv[1]), &f, &none) != 0) return enif_make_badarg(env);
  LOCK_OR_RETURN(env, argv, res, srv);
  cb_request_list_t empty = {0}, *list = &empty;
  int err = none ? 0 : cb_server_requests(srv, &f, &list);
  nif_unlock(res);
  if (err < 0) return nif_error(env, err);
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_entries(&w.out, nif_fixture(), list);
  if (list != &empty) cb_request_list_free(list);
  return nif_written(&w);
}

/* requests_clear_nif(Resource) -> ok. */
ERL_NIF_TERM nif_requests_clear(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return server_op(env, argv, cb_server_requests_clear);
}

/* journal_listen_nif(Resource, Pid | false) -> ok. Pid gets {cbench_journal, Seq} for every request recorded
 * from now on; false stops it. The engine's set waits for every worker, after which the listener that was
 * replaced is no longer used and is freed. */
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
  int err = res->srv == NULL ? CB_ESTOPPED : cb_server_set_journal_listener(res->srv, l ? nif_journal_wake : NULL, l);
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

/* ---- handler routes ---- */

/* handler_add_nif(Resource, Match, Target, #{timeout_ms, batch, body}) -> {ok, Id} | {error, Reason}. A
 * batching route always sends {cbench_requests, List}. */
ERL_NIF_TERM nif_handler_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_enif_in_t r;
  cb_codec_stub_t s;
  unsigned tmo;
  int batch, stream;
  ErlNifPid pid;
  nif_server_t *res;
  cb_server_t *srv;
  cb_enif_in_init(&r, env);
  /* Target: a local pid, or a registered name looked up at each delivery. */
  if (cb_codec_match(&r.in, T(argv[1]), &s) != 0 || (!enif_is_atom(env, argv[2]) && !enif_get_local_pid(env, argv[2], &pid)) ||
      cb_codec_handler_opts(&r.in, T(argv[3]), &tmo, &batch, &stream) != 0)
    return enif_make_badarg(env);
  LOCK_OR_RETURN(env, argv, res, srv);
  nif_target_t *t = nif_target_new(res, env, argv[2], batch, stream);
  if (t == NULL) {
    nif_unlock(res);
    return nif_error(env, CB_ENOMEM);
  }
  cb_deferred_t d = {.name = s.st.name, .match = s.st.match, .timeout_ms = tmo, .batch = batch,
                     .deliver = nif_deliver, .body = stream ? nif_body_piece : NULL, .ud = t,
                     .free_ud = nif_target_free};
  uint64_t id = 0;
  int err = cb_server_deferred_add(srv, &d, &id);
  nif_unlock(res);
  if (err < 0) nif_target_free(t);
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_add_result(&w.out, err, id, &s.st.match, NULL);
  return nif_written(&w);
}

/* handler_fail_nif(Resource, Id) -> ok: the handler's process is gone (a monitor in cbench_server). */
ERL_NIF_TERM nif_handler_fail(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return id_op(env, argv, cb_server_deferred_fail);
}

/* reply_nif's twin on a dirty CPU scheduler (funcs in cbench_nif.c): a reply's bodies and header fields are
 * decoded (an iolist is flattened: a copy) and copied into the workers' command queues, so its cost grows with
 * its bytes (a body may have 32 MiB, 64 fields 1 MiB each) and its items. The caller chooses: cbench_handler
 * measures every answer anyway (its size limits), and sends big ones here (docs/erlang.md). Counted, so that a
 * test sees which path a call took without timing it: dirty_replies_nif. */
static uint64_t dirty_replies;

static ERL_NIF_TERM reply_here(ErlNifEnv *env, const ERL_NIF_TERM argv[]);

ERL_NIF_TERM nif_reply_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  __atomic_add_fetch(&dirty_replies, 1, __ATOMIC_RELAXED);
  return reply_here(env, argv);
}

/* dirty_replies_nif() -> N: the reply_dirty_nif calls since the library was loaded. */
ERL_NIF_TERM nif_dirty_replies(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  (void)argv;
  return enif_make_uint64(env, __atomic_load_n(&dirty_replies, __ATOMIC_RELAXED));
}

/* reply_nif(Resource, [Item]) -> [ok | {error, gone} | {error, not_streaming} | {error, badarg}], one result per
 * item, in order; badarg when an item does not decode. Nothing waits for a worker: microseconds for the
 * answers cbench_handler gives here (reply_dirty_nif takes the big ones). */
ERL_NIF_TERM nif_reply(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return reply_here(env, argv);
}

static ERL_NIF_TERM reply_here(ErlNifEnv *env, const ERL_NIF_TERM argv[]) {
  cb_enif_in_t r;
  cb_codec_replies_t items;
  nif_server_t *res;
  cb_server_t *srv;
  ERL_NIF_TERM out;
  cb_enif_in_init(&r, env);
  if (cb_codec_replies(&r.in, T(argv[1]), &items) != 0) {
    cb_codec_replies_free(&items);
    return enif_make_badarg(env);
  }
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) {
    out = enif_make_badarg(env);
  } else {
    int err = 0;
    if (locked < 0) { /* the server stopped: every request is gone */
      for (size_t i = 0; i < items.n; i++) items.items[i].result = CB_EGONE;
    } else {
      err = cb_server_reply(srv, items.items, items.n);
      nif_unlock(res);
    }
    cb_enif_out_t w;
    cb_enif_out_init(&w, env);
    if (err < 0)
      cb_codec_error(&w.out, err);
    else
      cb_codec_reply_results(&w.out, items.items, items.n);
    out = nif_written(&w);
  }
  cb_codec_replies_free(&items);
  return out;
}
