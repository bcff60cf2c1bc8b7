/* What the engine's worker threads send to Erlang processes (docs/erlang.md, "Erlang handlers"): a handler
 * route's requests and their body pieces, and the journal's wake-ups for cbench:await/4.
 *
 * Handler delivery: each worker builds its messages in an environment of its own (one per thread, made on first
 * use, freed when the thread ends) and sends them with enif_send, so no scheduler waits and no lock is taken. A
 * batching route gets one {cbench_requests, [Req, ...]} per loop iteration of a worker; the others one
 * {cbench_request, Req} per request. A Req is a map whose `handle' is {cbench_nif, Server, Ref}: Server the
 * engine's resource, Ref the engine's request reference (worker, slot, generation). Replies come back through
 * reply_nif/2 (nif_calls.c).
 *
 * The journal listener runs only while someone awaits (the engine calls nothing while it is unset): it sends
 * {cbench_journal, Seq} to the server process from an environment of its own (process-independent, as
 * enif_send requires off a scheduler), allocated per message because several workers may call it at once.
 */
#include <pthread.h>
#include <string.h>

#include "nif.h"

struct nif_target_s {
  nif_server_t *res; /* kept (enif_keep_resource) for as long as the route exists */
  int by_name;
  int batch;  /* always {cbench_requests, List} */
  int stream; /* body => stream: {cbench_body, Handle, Data} and {cbench_body_end, Handle} follow */
  ErlNifPid pid;
  ERL_NIF_TERM name; /* an atom: valid in any environment */
};

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
    case CB_PROTO_H1_TLS: return atom_h1_tls;
    case CB_PROTO_H2_TLS: return atom_h2_tls;
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

nif_target_t *nif_target_new(nif_server_t *res, ErlNifEnv *env, ERL_NIF_TERM target, int batch, int stream) {
  nif_target_t t = {.res = res, .batch = batch, .stream = stream};
  if (enif_is_atom(env, target)) {
    t.by_name = 1;
    t.name = target;
  } else if (!enif_get_local_pid(env, target, &t.pid)) {
    return NULL;
  }
  nif_target_t *p = enif_alloc(sizeof *p);
  if (p == NULL) return NULL;
  *p = t;
  enif_keep_resource(res);
  return p;
}

void nif_target_free(void *ud) {
  nif_target_t *t = ud;
  enif_release_resource(t->res);
  enif_free(t);
}

/* On a worker thread: one message for the n requests (batch) or for the one. Non-zero: nobody to send to. */
int nif_deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  nif_target_t *t = ud;
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
void nif_body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end) {
  nif_target_t *t = ud;
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

/* On a worker thread, right after a request was recorded. */
void nif_journal_wake(void *ud, const cb_request_t *req) {
  const nif_listener_t *l = ud;
  ErlNifEnv *msg_env = enif_alloc_env();
  if (msg_env == NULL) return; /* the waiter's timeout still answers it */
  enif_send(NULL, &l->pid, msg_env,
            enif_make_tuple2(msg_env, atom_cbench_journal, enif_make_uint64(msg_env, req->seq)));
  enif_free_env(msg_env);
}
