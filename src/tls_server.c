/* The server's TLS: the certificates it serves (made at start: a test CA, a leaf for localhost, 127.0.0.1 and ::1,
 * and the bad-certificate leaves chosen by SNI; the user's files in place of the leaf) and the context its
 * workers' connections take sessions of (transport/tls.c). The made CA is what a test trusts:
 * cb_server_tls_ca() hands it out as PEM. */
#include <stdio.h>
#include <string.h>

#include "engine.h"
#include "tls_server.h"

int cb__server_tls_open(cb_server_t *srv, const cb_config_t *cfg, char *why, size_t why_size) {
  if (!cfg->tls && cfg->tls_port < 0) return 0; /* a TLS listener of its own turns TLS on too */
  if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL)) {
    if (why != NULL) snprintf(why, why_size, "tls_cert_file and tls_key_file go together");
    return UV_EINVAL;
  }
  int err = cb__certs_new(NULL, &srv->certs);
  if (err == 0 && cfg->tls_cert_file != NULL) {
    err = cb__certs_load(srv->certs, cfg->tls_cert_file, cfg->tls_key_file, NULL, why, why_size);
    srv->tls_user_cert = err == 0;
  }
  if (err == 0) err = cb__tls_ctx_new(srv->certs, cfg->enable_h2, cfg->enable_h1, &srv->tls);
  if (err == 0) err = cb__tls_ctx_client_auth(srv->tls, srv->certs, cfg->tls_client_auth);
  /* Kernel TLS where the kernel offers it; otherwise every session keeps OpenSSL's record layer. */
  if (err == 0 && (srv->ktls = cb__ktls_probe(srv->ktls_why, sizeof srv->ktls_why)) != 0) cb__tls_ctx_ktls(srv->tls);
  return err;
}

void cb__server_tls_close(cb_server_t *srv) {
  cb__tls_ctx_free(srv->tls);
  srv->tls = NULL;
  cb__certs_free(srv->certs);
  srv->certs = NULL;
}

int cb_server_ktls(const cb_server_t *srv, char *why, size_t why_size) {
  if (srv == NULL) return UV_EINVAL;
  if (why != NULL && why_size > 0)
    snprintf(why, why_size, "%s", srv->tls == NULL ? "the server has no TLS" : srv->ktls ? "" : srv->ktls_why);
  return srv->tls != NULL && srv->ktls;
}

int cb_server_tls_ca(const cb_server_t *srv, char *pem, size_t cap) {
  if (srv == NULL || (pem == NULL && cap > 0)) return UV_EINVAL;
  if (srv->certs == NULL || srv->tls_user_cert) return UV_ENOENT; /* no TLS, or the user's: the test has its CA */
  cb__slice_t ca = cb__certs_ca_pem(srv->certs, CB__CA_SERVER);
  if (ca.len + 1 > cap) return UV_ENOBUFS;
  memcpy(pem, ca.ptr, ca.len);
  pem[ca.len] = '\0';
  return (int)ca.len;
}

/* ---- client certificates ---- */

int cb_server_tls_client_ca(const cb_server_t *srv, char *pem, size_t cap) {
  if (srv == NULL || (pem == NULL && cap > 0)) return UV_EINVAL;
  if (srv->certs == NULL) return UV_ENOENT;
  cb__slice_t ca = cb__certs_ca_pem(srv->certs, CB__CA_CLIENT);
  if (ca.len + 1 > cap) return UV_ENOBUFS;
  memcpy(pem, ca.ptr, ca.len);
  pem[ca.len] = '\0';
  return (int)ca.len;
}

static int copy_pem(cb__slice_t s, char *out, size_t cap) {
  if (s.len + 1 > cap) return UV_ENOBUFS;
  memcpy(out, s.ptr, s.len);
  out[s.len] = '\0';
  return 0;
}

int cb_server_tls_client_cert(const cb_server_t *srv, const char *cn, char *cert_pem, size_t cert_cap,
                              char *key_pem, size_t key_cap) {
  if (srv == NULL || cn == NULL || cert_pem == NULL || key_pem == NULL) return UV_EINVAL;
  if (srv->certs == NULL) return UV_ENOENT;
  cb__client_cert_t cc;
  int err = cb__certs_client(srv->certs, cn, strlen(cn), &cc);
  if (err != 0) return err;
  err = copy_pem(cc.cert_pem, cert_pem, cert_cap);
  if (err == 0) err = copy_pem(cc.key_pem, key_pem, key_cap);
  cb__client_cert_free(&cc);
  return err;
}

int cb_tls_cert_identity(const char *cert_pem, size_t len, char *subject, size_t subject_cap, char sha256[65]) {
  if (cert_pem == NULL || subject == NULL || subject_cap == 0 || sha256 == NULL) return UV_EINVAL;
  int n = cb__cert_identity_pem(cert_pem, len, subject, subject_cap, sha256);
  if (n < 0) return n;
  return (size_t)n < subject_cap ? n : UV_ENOBUFS;
}
