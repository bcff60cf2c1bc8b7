/* What the files of the NIF share: the atoms, the server resource, and the helpers every NIF uses.
 *
 *   cbench_nif.c   load, the resource and its reaper, start/stop/stats/port/info, down/up
 *   nif_stub.c     stub terms (cbench_spec's canonical form) to cb_stub_t; route add/remove/reset, the stub list
 *   nif_journal.c  journal reads as maps, clear, and the listener that wakes cbench:await/4
 *   nif_handler.c  Erlang handlers: deferred routes whose requests are sent to a process, and the replies
 */
#ifndef CBENCH_NIF_H
#define CBENCH_NIF_H

#include <erl_nif.h>

#include "cbench.h"

/* Atoms, made once in load from this one list. */
#define NIF_ATOMS(X)                                                                                  \
  X(ok) X(error) X(stopped) X(true) X(false) X(undefined) X(threads) X(cpus) X(bad_option) X(integer)  \
  X(boolean) X(address) X(string) X(list) X(available) X(known) X(conns_accepted) X(conns_open)       \
  X(conns_closed) X(requests) X(requests_by_route) X(conns_by_proto) X(requests_by_proto)             \
  X(bytes_read) X(bytes_written) X(status_400) X(status_404) X(status_405) X(status_413) X(status_431) \
  X(timeouts) X(resets) X(h2_errors) X(accept_backoffs) X(name) X(methods) X(any) X(path) X(headers)  \
  X(query) X(priority) X(present) X(equal) X(status) X(body) X(data) X(bytes) X(file) X(delay_ms)     \
  X(chunks) X(none) X(times) X(infinity) X(id) X(hits) X(left) X(seq) X(time_us) X(proto) X(conn)     \
  X(stream) X(peer) X(method) X(body_length) X(route) X(stub) X(bytes_out) X(duration_us) X(since)    \
  X(cbench_journal) X(fault) X(faults) X(cbench_request) X(cbench_requests) X(cbench_nif) X(handle) X(gone)   \
  X(http1) X(h2c_prior) X(h2c_upgrade) X(timeout_ms) X(batch) X(reply) X(send) X(finish) X(unavailable) X(handler_unavailable) \
  X(handler_timeouts) X(whole) X(cbench_body) X(cbench_body_end) X(admin_port) X(scenario) X(delay) X(uniform) \
  X(lognormal) X(responses) X(after) X(last) X(cycle) X(not_found) X(template) X(contains) X(regex) X(json)     \
  X(json_subset)

#define NIF_DECLARE_ATOM(name) extern ERL_NIF_TERM atom_##name;
NIF_ATOMS(NIF_DECLARE_ATOM)
#undef NIF_DECLARE_ATOM

/* The fixture routes' names as atoms, taken from the first server started (cb_server_route_counts lists the
 * fixture routes, then "not_found", before any stub). Route names are atoms for these and binaries for stubs,
 * whose names are the user's: a NIF never makes atoms out of user data. */
#define NIF_MAX_FIXTURE_NAMES 64

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
  nif_listener_t *listener; /* set while someone awaits requests; see nif_journal.c */
  /* Copied at start so that port/info never need the engine. */
  int port;
  int admin_port; /* 0: no admin API */
  int threads;
  int cpus[CB_MAX_THREADS];
} nif_server_t;

/* The resource of a term, without locking. */
int nif_get_server(ErlNifEnv *env, ERL_NIF_TERM t, nif_server_t **res);

/* The resource of a term, locked shared with its engine running: 1, and *srv is usable until nif_unlock();
 * 0 for a term that is not a server (badarg); -1 for a stopped server (the lock is not held). */
int nif_lock(ErlNifEnv *env, ERL_NIF_TERM t, nif_server_t **res, cb_server_t **srv);
void nif_unlock(nif_server_t *res);

/* The body of a NIF (Resource, Id) -> ok | {error, Reason}: op(server, Id) under the lock; badarg for a term
 * that is not a server or an Id that is not a 64-bit unsigned integer, {error, stopped} for a stopped server. */
int nif_get_id(ErlNifEnv *env, ERL_NIF_TERM t, uint64_t *id);
ERL_NIF_TERM nif_id_op(ErlNifEnv *env, const ERL_NIF_TERM argv[], int (*op)(cb_server_t *, uint64_t));

/* {error, Name}: the engine's error name lowercased without the CB_ prefix (eaddrinuse, efixture). */
ERL_NIF_TERM nif_error(ErlNifEnv *env, int err);
/* A refused stub or handler route: {error, {bad_stub, {Field, Value, Why}}} from cb_error_detail() (nif_stub.c). */
ERL_NIF_TERM nif_add_error(ErlNifEnv *env, int err, const cb_match_t *m, const cb_response_t *res);

/* {error, stopped} */
ERL_NIF_TERM nif_stopped(ErlNifEnv *env);

/* A binary term holding a copy of n bytes. */
ERL_NIF_TERM nif_binary(ErlNifEnv *env, const char *p, size_t n);

/* A route name: the fixture atom when it is one of those, else a binary. */
ERL_NIF_TERM nif_route_name(ErlNifEnv *env, const char *p, size_t n);

/* The arrays a decoded stub points into, on the caller's stack. */
typedef struct {
  cb_matcher_t headers[CB_MAX_MATCHERS];
  cb_matcher_t query[CB_MAX_MATCHERS];
  cb_header_t res_headers[CB_MAX_HEADERS];
} nif_stub_arrays_t;

/* A canonical match (cbench_spec) into st->name and st->match; 0 when it does not decode. */
int nif_decode_match(ErlNifEnv *env, ERL_NIF_TERM map, cb_stub_t *st, nif_stub_arrays_t *a);

/* The NIFs of nif_stub.c, nif_journal.c and nif_handler.c. */
ERL_NIF_TERM nif_route_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_route_remove(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_route_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scenario(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scenario_set(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_scenarios_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_requests(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_requests_clear(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_journal_listen(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_handler_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_handler_fail(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM nif_reply(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

#endif
