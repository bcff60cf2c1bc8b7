/* The NIFs of TLS client certificates (docs/tls.md): the server's client CA, and a client certificate it
 * issues with how the engine names it (subject, SHA-256), so that what a test holds and what the journal records
 * are the same strings. client_cert_nif makes a key and a signature (a fraction of a millisecond): dirty CPU. */
#include <string.h>

#include "nif.h"

/* The longest common name a client certificate takes (RFC 5280's bound, as cb_server_tls_client_cert). */
#define MAX_CN 64
/* PEM of a P-256 certificate or key is well under this. */
#define PEM_CAP 8192

/* client_ca_nif(Resource) -> {ok, Pem} | {error, no_tls}. */
ERL_NIF_TERM nif_client_ca(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  char pem[PEM_CAP];
  int n = cb_server_tls_client_ca(srv, pem, sizeof pem);
  nif_unlock(res);
  if (n == CB_ENOENT) return enif_make_tuple2(env, atom_error, enif_make_atom(env, "no_tls"));
  if (n < 0) return nif_error(env, n);
  return enif_make_tuple2(env, atom_ok, nif_binary(env, pem, (size_t)n));
}

/* client_cert_nif(Resource, Cn) -> {ok, CertPem, KeyPem, Subject, Sha256} | {error, no_tls | einval}. Cn is a
 * binary (cbench:client_cert/2 checked it; the engine checks again). */
ERL_NIF_TERM nif_client_cert(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  ErlNifBinary bin;
  if (!enif_inspect_binary(env, argv[1], &bin)) return enif_make_badarg(env);
  if (bin.size == 0 || bin.size > MAX_CN || memchr(bin.data, 0, bin.size) != NULL) return nif_error(env, CB_EINVAL);
  char cn[MAX_CN + 1];
  memcpy(cn, bin.data, bin.size);
  cn[bin.size] = '\0';
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  char cert[PEM_CAP], key[PEM_CAP], subject[512], sha[65];
  int err = cb_server_tls_client_cert(srv, cn, cert, sizeof cert, key, sizeof key);
  nif_unlock(res);
  if (err == CB_ENOENT) return enif_make_tuple2(env, atom_error, enif_make_atom(env, "no_tls"));
  if (err < 0) return nif_error(env, err);
  int n = cb_tls_cert_identity(cert, strlen(cert), subject, sizeof subject, sha);
  if (n < 0) return nif_error(env, n);
  ERL_NIF_TERM t[5] = {atom_ok, nif_binary(env, cert, strlen(cert)), nif_binary(env, key, strlen(key)),
                       nif_binary(env, subject, (size_t)n), nif_binary(env, sha, 64)};
  return enif_make_tuple_from_array(env, t, 5);
}
