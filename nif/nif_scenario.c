/* Scenario states (issue 25): scenario_nif(Resource, Name) -> {ok, State}, scenario_set_nif(Resource, Name,
 * State) -> ok, scenarios_reset_nif(Resource) -> ok; {error, Reason} otherwise. cbench_spec has checked Name and
 * State; the engine checks them again. Microseconds: a mutex the workers never take. */
#include "nif.h"

static int get_bin(ErlNifEnv *env, ERL_NIF_TERM t, cb_str_t *out) {
  ErlNifBinary b;
  if (!enif_inspect_binary(env, t, &b)) return 0;
  out->ptr = b.size ? (const char *)b.data : "";
  out->len = b.size;
  return 1;
}

ERL_NIF_TERM nif_scenario(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_str_t name;
  if (!get_bin(env, argv[1], &name)) return enif_make_badarg(env);
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  char state[CB_MAX_NAME + 1];
  int n = cb_server_scenario(srv, name, state, sizeof state);
  nif_unlock(res);
  if (n < 0) return nif_error(env, n);
  return enif_make_tuple2(env, atom_ok, nif_binary(env, state, (size_t)n));
}

ERL_NIF_TERM nif_scenario_set(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_str_t name, state;
  if (!get_bin(env, argv[1], &name) || !get_bin(env, argv[2], &state)) return enif_make_badarg(env);
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  int err = cb_server_scenario_set(srv, name, state);
  nif_unlock(res);
  return err < 0 ? nif_error(env, err) : atom_ok;
}

ERL_NIF_TERM nif_scenarios_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  int err = cb_server_scenarios_reset(srv);
  nif_unlock(res);
  return err < 0 ? nif_error(env, err) : atom_ok;
}
