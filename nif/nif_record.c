/* The recorder's NIFs (docs/record.md): the recordings as stub-file JSON, saved to a file, cleared, and a stub
 * file loaded (cb_server_stubs_file). Paths are binaries of 1 to 4095 bytes without NUL (cbench.erl checks them;
 * anything else is badarg here too). Saving and loading touch files: dirty I/O (cbench_nif.c's table). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "nif.h"

/* A binary path into buf (NUL-terminated): 1, or 0 when it is not one. */
static int get_path(ErlNifEnv *env, ERL_NIF_TERM t, char *buf, size_t cap) {
  ErlNifBinary bin;
  if (!enif_inspect_binary(env, t, &bin) || bin.size == 0 || bin.size >= cap) return 0;
  if (memchr(bin.data, '\0', bin.size) != NULL) return 0;
  memcpy(buf, bin.data, bin.size);
  buf[bin.size] = '\0';
  return 1;
}

/* {error, {Tag, Message}} */
static ERL_NIF_TERM failed(ErlNifEnv *env, const char *tag, const char *msg) {
  return enif_make_tuple2(env, atom_error,
                          enif_make_tuple2(env, enif_make_atom(env, tag), nif_binary(env, msg, strlen(msg))));
}

/* recorded_nif(Resource) -> {ok, Json} | {error, Reason}. */
ERL_NIF_TERM nif_recorded(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  char *json = NULL;
  size_t len = 0;
  int err = cb_server_recorded_json(srv, &json, &len);
  nif_unlock(res);
  if (err) return nif_error(env, err);
  ERL_NIF_TERM t = enif_make_tuple2(env, atom_ok, nif_binary(env, json, len));
  free(json);
  return t;
}

/* A call on a stub file: fn(srv, path, msg) as save_stubs and load_stubs make it; {ok, N}, or {error, {Why,
 * Message}} with the library's message. */
static ERL_NIF_TERM file_call(ErlNifEnv *env, const ERL_NIF_TERM argv[],
                              int (*fn)(cb_server_t *, const char *, char *, size_t), const char *why) {
  char path[PATH_MAX], msg[1024];
  if (!get_path(env, argv[1], path, sizeof path)) return enif_make_badarg(env);
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  int n = fn(srv, path, msg, sizeof msg);
  nif_unlock(res);
  if (n < 0) return failed(env, why, msg);
  return enif_make_tuple2(env, atom_ok, enif_make_int(env, n));
}

/* save_stubs_nif(Resource, Path) -> {ok, N} | {error, {save_failed, Message}}. */
ERL_NIF_TERM nif_save_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return file_call(env, argv, cb_server_save_stubs, "save_failed");
}

/* load_stubs_nif(Resource, Path) -> {ok, N} | {error, {bad_stub_file, Message}}: nothing of a file with an error
 * is added. */
ERL_NIF_TERM nif_load_stubs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return file_call(env, argv, cb_server_stubs_file, "bad_stub_file");
}

/* clear_recorded_nif(Resource) -> ok. */
ERL_NIF_TERM nif_clear_recorded(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  cb_server_recorded_clear(srv);
  nif_unlock(res);
  return atom_ok;
}
