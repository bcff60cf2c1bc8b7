/* What the files of the NIF share: the atoms, the server resource, and the helpers every NIF uses. Terms are
 * decoded and encoded by the one codec of the NIF and the port program (terms/codec.h, enif backend).
 *
 *   cbench_nif.c   load, the resource and its reaper, start/stop/stats/port/info, down/up
 *   nif_calls.c    the control plane over the codec: routes, stubs, scenarios, the journal, handler routes and
 *                  their replies
 *   nif_deliver.c  what the engine's worker threads send: handler requests and body pieces, journal wake-ups
 */
#ifndef CBENCH_NIF_H
#define CBENCH_NIF_H

#include <erl_nif.h>

#include "cbench.h"
#include "codec.h"
#include "term_enif.h"

/* Atoms, made once in load from this one list. */
#define NIF_ATOMS(X)                                                                                          \
  X(ok) X(error) X(stopped) X(true) X(false) X(undefined) X(threads) X(cpus) X(bad_option) X(integer)         \
  X(boolean) X(address) X(string) X(list) X(available) X(known) X(method) X(path) X(query) X(headers) X(peer)  \
  X(proto) X(body) X(handle) X(stream) X(cbench_journal) X(cbench_request) X(cbench_requests) X(cbench_nif)    \
  X(cbench_body) X(cbench_body_end) X(admin_port) X(enomem) X(http1) X(h2c_prior) X(h2c_upgrade)   \
  X(h1_tls) X(h2_tls) X(no_ca) X(tls_port) X(ktls) X(ktls_why) X(one_of)

#define NIF_DECLARE_ATOM(name) extern ERL_NIF_TERM atom_##name;
NIF_ATOMS(NIF_DECLARE_ATOM)
#undef NIF_DECLARE_ATOM

/* Who cbench:await/4 needs woken: the server process. Owned by the resource while the engine uses it; replaced
 * or cleared only once the engine has stopped calling the listener with it. */
typedef struct {
  ErlNifPid pid;
} nif_listener_t;

typedef struct {
  ErlNifRWLock *lock; /* calls on the engine take it shared; whoever stops the engine takes it exclusive */
  cb_server_t *srv;   /* NULL once the engine is stopped or handed to the reaper */
  ErlNifMonitor owner;
  int monitored;
  nif_listener_t *listener; /* set while someone awaits requests; see nif_calls.c */
  /* Copied at start so that port/info never need the engine. */
  int port;
  int admin_port; /* 0: no admin API */
  int tls_port;   /* 0: no TLS (cb_server_tls_port) */
  int ktls;       /* cb_server_ktls */
  char ktls_why[192]; /* why not, when not */
  int threads;
  int cpus[CB_MAX_THREADS];
} nif_server_t;

/* The resource of a term, without locking. */
int nif_get_server(ErlNifEnv *env, ERL_NIF_TERM t, nif_server_t **res);

/* The resource of a term, locked shared with its engine running: 1, and *srv is usable until nif_unlock();
 * 0 for a term that is not a server (badarg); -1 for a stopped server (the lock is not held). */
int nif_lock(ErlNifEnv *env, ERL_NIF_TERM t, nif_server_t **res, cb_server_t **srv);
void nif_unlock(nif_server_t *res);

/* {error, Name}: the engine's error name lowercased without the CB_ prefix (eaddrinuse, efixture). */
ERL_NIF_TERM nif_error(ErlNifEnv *env, int err);

/* {error, stopped} */
ERL_NIF_TERM nif_stopped(ErlNifEnv *env);

/* A binary term holding a copy of n bytes. */
ERL_NIF_TERM nif_binary(ErlNifEnv *env, const char *p, size_t n);

/* The fixture route names of the first server started in this load (NULL before one started), for journal
 * entries and counters: atoms for those, binaries for stubs, whose names are the user's (a NIF never makes
 * atoms out of user data). */
const cb_codec_fixture_t *nif_fixture(void);

/* The term a codec writer built, or {error, enomem} when it ran out of memory. */
ERL_NIF_TERM nif_written(cb_enif_out_t *w);

/* The journal listener and the handler targets of nif_deliver.c: called on the engine's worker threads. */
void nif_journal_wake(void *ud, const cb_request_t *req);

/* A handler route's target: who its requests go to. Freed by the engine (nif_target_free) with the route. */
typedef struct nif_target_s nif_target_t;
nif_target_t *nif_target_new(nif_server_t *res, ErlNifEnv *env, ERL_NIF_TERM target, int batch, int stream);
int nif_deliver(void *ud, const cb_deferred_req_t *reqs, size_t n);
void nif_body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end);
void nif_target_free(void *ud);

/* The NIFs of nif_calls.c. */
ERL_NIF_TERM nif_route_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_route_remove(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_route_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scenario(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scenario_set(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scenarios_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* nif_tls_auth.c: the client CA and client certificates. */
ERL_NIF_TERM nif_client_ca(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_client_cert(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_requests(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_requests_clear(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_journal_listen(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_handler_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_handler_fail(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_reply(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_reply_dirty(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_dirty_replies(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
/* nif_record.c: the recordings (docs/record.md). */
ERL_NIF_TERM nif_recorded(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_save_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_load_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_clear_recorded(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
