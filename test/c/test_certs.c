/* The certificates made for TLS tests (src/base/certs.c, issue 24), checked the way a TLS client checks them:
 * X509_verify_cert against a store that holds only the test CA, with the host or IP a client would ask for,
 * the SSL server purpose, and OpenSSL's security level 2 (Debian's default). Every bad leaf fails with its one
 * exact error, and verifies once that one flaw is forgiven, so that no leaf fails for a reason other than the
 * one it is named for. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common.h"
#include "base/base.h"

static cb__certs_t *new_certs(const cb__certs_opts_t *o) {
  cb__certs_t *c = NULL;
  int rc = cb__certs_new(o, &c);
  ASSERT_EQ(rc, 0);
  ASSERT_NOT_NULL(c);
  return c;
}

typedef struct {
  X509 *trust;              /* the store's one certificate */
  STACK_OF(X509) *untrusted; /* what the server sent after the leaf */
  const char *host, *ip;
  int purpose;       /* X509_PURPOSE_SSL_SERVER unless set */
  int level;         /* auth level; 2 unless set */
  unsigned long flags;
} how_t;

/* X509_V_OK or the error X509_verify_cert reports for leaf. */
static int verify(X509 *leaf, how_t h) {
  X509_STORE *store = X509_STORE_new();
  X509_STORE_CTX *ctx = X509_STORE_CTX_new();
  ASSERT(store != NULL && ctx != NULL);
  ASSERT_EQ(X509_STORE_add_cert(store, h.trust), 1);
  ASSERT_EQ(X509_STORE_CTX_init(ctx, store, leaf, h.untrusted), 1);
  X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(ctx);
  if (h.host != NULL) ASSERT_EQ(X509_VERIFY_PARAM_set1_host(p, h.host, 0), 1);
  if (h.ip != NULL) ASSERT_EQ(X509_VERIFY_PARAM_set1_ip_asc(p, h.ip), 1);
  ASSERT_EQ(X509_STORE_CTX_set_purpose(ctx, h.purpose ? h.purpose : X509_PURPOSE_SSL_SERVER), 1);
  X509_VERIFY_PARAM_set_auth_level(p, h.level ? h.level : 2);
  if (h.flags) X509_VERIFY_PARAM_set_flags(p, h.flags);
  int ok = X509_verify_cert(ctx);
  int err = X509_STORE_CTX_get_error(ctx);
  if (ok == 1) ASSERT_EQ(err, X509_V_OK);
  else ASSERT_NE(err, X509_V_OK);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return err;
}

#define ASSERT_VERIFY(leaf, exp, ...)                                                                      \
  do {                                                                                                     \
    int err_ = verify((leaf), (how_t){__VA_ARGS__});                                                       \
    if (err_ != (exp))                                                                                     \
      FAIL("verify: %d (%s), expected %d (%s)", err_, X509_verify_cert_error_string(err_), (exp),         \
           X509_verify_cert_error_string(exp));                                                            \
  } while (0)

static const cb__cert_ident_t *ident(cb__certs_t *c, int id) {
  const cb__cert_ident_t *d = cb__certs_ident(c, id);
  ASSERT_NOT_NULL(d);
  ASSERT_NOT_NULL(d->cert);
  ASSERT_NOT_NULL(d->key);
  ASSERT_NOT_NULL(d->chain);
  return d;
}

static X509 *ca(cb__certs_t *c) { return cb__certs_ca(c, CB__CA_SERVER); }

static void cn_of(X509 *x, char *out, int size) {
  ASSERT_GT(X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, out, size), 0);
}

/* The default leaf verifies for each of its three names, as a server and with security level 2; another name
 * does not (the host check is on). */
TEST(certs_default_leaf) {
  cb__certs_t *c = new_certs(NULL);
  const cb__cert_ident_t *d = ident(c, CB__CERT_DEFAULT);
  ASSERT_NULL(d->sni);
  ASSERT_EQ(sk_X509_num(d->chain), 0);
  ASSERT(d->issuer == ca(c));
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .host = "localhost");
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .ip = "127.0.0.1");
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .ip = "::1");
  ASSERT_VERIFY(d->cert, X509_V_ERR_HOSTNAME_MISMATCH, .trust = ca(c), .host = "example.localhost");
  ASSERT_VERIFY(d->cert, X509_V_ERR_IP_ADDRESS_MISMATCH, .trust = ca(c), .ip = "127.0.0.2");
  /* serverAuth only: it is no client certificate. */
  ASSERT_VERIFY(d->cert, X509_V_ERR_INVALID_PURPOSE, .trust = ca(c), .purpose = X509_PURPOSE_SSL_CLIENT);
  /* ECDSA P-256, the key it holds, digitalSignature, not a CA, a week from an hour ago. */
  EVP_PKEY *pub = X509_get0_pubkey(d->cert);
  ASSERT(EVP_PKEY_is_a(pub, "EC"));
  ASSERT_EQ(EVP_PKEY_get_bits(pub), 256);
  ASSERT_EQ(X509_check_private_key(d->cert, d->key), 1);
  ASSERT_EQ(X509_get_key_usage(d->cert), KU_DIGITAL_SIGNATURE);
  ASSERT_EQ(X509_get_extended_key_usage(d->cert), XKU_SSL_SERVER);
  ASSERT_EQ(X509_check_ca(d->cert), 0);
  int days, secs;
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(d->cert), X509_get0_notAfter(d->cert)), 1);
  ASSERT_EQ(days, 7);
  ASSERT_EQ(secs, 0);
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notBefore(d->cert)), 1);
  ASSERT_EQ(days, 0);
  ASSERT(secs <= -3600 && secs > -3600 - 60);
  cb__certs_free(c);
}

/* Each bad leaf fails with its exact error (the host asked for is its SNI name, as a client that sent that SNI
 * checks it), and verifies when its one flaw is forgiven. */
TEST(certs_bad_leaves) {
  cb__certs_t *c = new_certs(NULL);
  static const struct {
    int id;
    const char *sni;
    int err;
  } v[] = {
      {CB__CERT_EXPIRED, "expired.localhost", X509_V_ERR_CERT_HAS_EXPIRED},
      {CB__CERT_NOT_YET_VALID, "not-yet-valid.localhost", X509_V_ERR_CERT_NOT_YET_VALID},
      {CB__CERT_WRONG_HOST, "wrong-host.localhost", X509_V_ERR_HOSTNAME_MISMATCH},
      {CB__CERT_SELF_SIGNED, "self-signed.localhost", X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT},
      {CB__CERT_UNTRUSTED_ROOT, "untrusted-root.localhost", X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY},
      {CB__CERT_MISSING_INTERMEDIATE, "missing-intermediate.localhost",
       X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY},
      /* RSA-1024 is 80 bits of security; level 2 asks for 112 and names the leaf's key (the CA's is P-256). */
      {CB__CERT_WEAK_KEY, "weak-key.localhost", X509_V_ERR_EE_KEY_TOO_SMALL},
  };
  ASSERT_EQ(sizeof v / sizeof v[0], CB__CERT_COUNT - 1);
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    const cb__cert_ident_t *d = ident(c, v[i].id);
    cbt_log("%s", v[i].sni);
    ASSERT_STR_EQ(d->sni, v[i].sni);
    ASSERT_EQ(sk_X509_num(d->chain), 0);
    ASSERT_EQ(X509_check_private_key(d->cert, d->key), 1);
    ASSERT_VERIFY(d->cert, v[i].err, .trust = ca(c), .untrusted = d->chain, .host = v[i].sni);
  }
  const cb__cert_ident_t *d;
  d = ident(c, CB__CERT_EXPIRED);
  ASSERT_LT(X509_cmp_current_time(X509_get0_notAfter(d->cert)), 0);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .host = d->sni, .flags = X509_V_FLAG_NO_CHECK_TIME);
  d = ident(c, CB__CERT_NOT_YET_VALID);
  ASSERT_GT(X509_cmp_current_time(X509_get0_notBefore(d->cert)), 0);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .host = d->sni, .flags = X509_V_FLAG_NO_CHECK_TIME);
  d = ident(c, CB__CERT_WRONG_HOST);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .host = "other.invalid");
  ASSERT_VERIFY(d->cert, X509_V_ERR_HOSTNAME_MISMATCH, .trust = ca(c), .host = "localhost");
  d = ident(c, CB__CERT_SELF_SIGNED);
  ASSERT(d->issuer == d->cert);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = d->cert, .host = d->sni);
  d = ident(c, CB__CERT_UNTRUSTED_ROOT);
  ASSERT(d->issuer != ca(c));
  ASSERT_EQ(X509_check_ca(d->issuer), 1);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = d->issuer, .host = d->sni);
  d = ident(c, CB__CERT_MISSING_INTERMEDIATE);
  {
    /* The intermediate is a CA (path length 0) that the test CA signed: served, it completes the chain. */
    ASSERT_EQ(X509_check_ca(d->issuer), 1);
    ASSERT_EQ(X509_check_issued(ca(c), d->issuer), X509_V_OK);
    STACK_OF(X509) *served = sk_X509_new_null();
    sk_X509_push(served, d->issuer);
    ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .untrusted = served, .host = d->sni);
    sk_X509_free(served);
  }
  d = ident(c, CB__CERT_WEAK_KEY);
  ASSERT(EVP_PKEY_is_a(X509_get0_pubkey(d->cert), "RSA"));
  ASSERT_EQ(EVP_PKEY_get_bits(X509_get0_pubkey(d->cert)), 1024);
  ASSERT_EQ(X509_get_signature_nid(d->cert), NID_ecdsa_with_SHA256);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(c), .host = d->sni, .level = 1);
  cb__certs_free(c);
}

/* SNI names choose identities, ignoring case; anything else (no SNI, a near miss) gets the default. */
TEST(certs_find) {
  ASSERT_EQ(cb__certs_find(STR("expired.localhost")), CB__CERT_EXPIRED);
  ASSERT_EQ(cb__certs_find(STR("Not-Yet-Valid.LOCALHOST")), CB__CERT_NOT_YET_VALID);
  ASSERT_EQ(cb__certs_find(STR("wrong-host.localhost")), CB__CERT_WRONG_HOST);
  ASSERT_EQ(cb__certs_find(STR("self-signed.localhost")), CB__CERT_SELF_SIGNED);
  ASSERT_EQ(cb__certs_find(STR("untrusted-root.localhost")), CB__CERT_UNTRUSTED_ROOT);
  ASSERT_EQ(cb__certs_find(STR("missing-intermediate.localhost")), CB__CERT_MISSING_INTERMEDIATE);
  ASSERT_EQ(cb__certs_find(STR("weak-key.localhost")), CB__CERT_WEAK_KEY);
  ASSERT_EQ(cb__certs_find(STR("localhost")), CB__CERT_DEFAULT);
  ASSERT_EQ(cb__certs_find(STR("expired.localhos")), CB__CERT_DEFAULT);
  ASSERT_EQ(cb__certs_find(STR("expired.localhost.")), CB__CERT_DEFAULT);
  ASSERT_EQ(cb__certs_find(STR("x.expired.localhost")), CB__CERT_DEFAULT);
  ASSERT_EQ(cb__certs_find(NULL, 0), CB__CERT_DEFAULT);
  ASSERT_NULL(cb__certs_ident(NULL, CB__CERT_COUNT));
  ASSERT_NULL(cb__certs_ident(NULL, -1));
}

/* The CAs: self-signed, CA:TRUE, keyCertSign, P-256, a random 128-bit serial, a week from an hour ago; the PEM
 * reads back to the DER given beside it. */
TEST(certs_ca_pem_der) {
  cb__certs_t *c = new_certs(NULL);
  for (int w = 0; w < CB__CA_COUNT; w++) {
    X509 *x = cb__certs_ca(c, w);
    ASSERT_NOT_NULL(x);
    cb__slice_t pem = cb__certs_ca_pem(c, w), der = cb__certs_ca_der(c, w);
    ASSERT_EQ(pem.ptr[pem.len], '\0');
    ASSERT_EQ(strlen(pem.ptr), pem.len);
    ASSERT_EQ(strncmp(pem.ptr, "-----BEGIN CERTIFICATE-----\n", 28), 0);
    BIO *b = BIO_new_mem_buf(pem.ptr, (int)pem.len);
    X509 *back = PEM_read_bio_X509(b, NULL, NULL, NULL);
    ASSERT_NOT_NULL(back);
    unsigned char *d = NULL;
    int n = i2d_X509(back, &d);
    ASSERT_MEM_EQ(d, (size_t)n, der.ptr, der.len);
    ASSERT_EQ(X509_cmp(back, x), 0);
    OPENSSL_free(d);
    X509_free(back);
    BIO_free(b);

    char cn[128];
    cn_of(x, cn, sizeof cn);
    const char *prefix = w == CB__CA_SERVER ? "cbench test CA " : "cbench test client CA ";
    ASSERT_EQ(strncmp(cn, prefix, strlen(prefix)), 0);
    ASSERT_EQ(strlen(cn), strlen(prefix) + 16);
    ASSERT_EQ(strspn(cn + strlen(prefix), "0123456789abcdef"), 16);
    ASSERT_EQ(X509_check_ca(x), 1);
    ASSERT(X509_get_extension_flags(x) & EXFLAG_SS);
    ASSERT_EQ(X509_get_key_usage(x), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
    ASSERT_EQ(EVP_PKEY_get_bits(X509_get0_pubkey(x)), 256);
    BIGNUM *serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
    ASSERT_EQ(BN_num_bits(serial), 127);
    BN_free(serial);
    int days, secs;
    ASSERT_EQ(ASN1_TIME_diff(&days, &secs, X509_get0_notBefore(x), X509_get0_notAfter(x)), 1);
    ASSERT_EQ(days, 7);
    ASSERT_EQ(secs, 0);
  }
  ASSERT_NULL(cb__certs_ca(c, CB__CA_COUNT));
  ASSERT_NULL(cb__certs_ca_pem(c, -1).ptr);
  ASSERT_EQ(cb__certs_ca_der(c, CB__CA_COUNT).len, 0);
  /* The two CAs are two: a client certificate is no server's, nor the reverse. */
  ASSERT_NE(X509_cmp(cb__certs_ca(c, CB__CA_SERVER), cb__certs_ca(c, CB__CA_CLIENT)), 0);
  ASSERT_VERIFY(ident(c, CB__CERT_DEFAULT)->cert, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
                .trust = cb__certs_ca(c, CB__CA_CLIENT), .host = "localhost");
  cb__certs_free(c);
}

/* Two calls share nothing: other keys, other serials, other names. */
TEST(certs_fresh) {
  cb__certs_t *a = new_certs(NULL), *b = new_certs(NULL);
  for (int w = 0; w < CB__CA_COUNT; w++) {
    X509 *x = cb__certs_ca(a, w), *y = cb__certs_ca(b, w);
    ASSERT_EQ(EVP_PKEY_eq(X509_get0_pubkey(x), X509_get0_pubkey(y)), 0);
    ASSERT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(x), X509_get0_serialNumber(y)), 0);
    ASSERT_NE(X509_NAME_cmp(X509_get_subject_name(x), X509_get_subject_name(y)), 0);
  }
  for (int id = 0; id < CB__CERT_COUNT; id++)
    ASSERT_EQ(EVP_PKEY_eq(X509_get0_pubkey(ident(a, id)->cert), X509_get0_pubkey(ident(b, id)->cert)), 0);
  /* One server's leaf is not trusted by a client given the other's CA. */
  ASSERT_VERIFY(ident(a, CB__CERT_DEFAULT)->cert, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, .trust = ca(b),
                .host = "localhost");
  cb__certs_free(a);
  cb__certs_free(b);
}

/* More names for the default leaf: IP literals become IP entries, names DNS entries; anything else is refused. */
TEST(certs_hosts) {
  const char *hosts[] = {"10.1.2.3", "fd00::5", "test.example", "*.wild.example"};
  cb__certs_opts_t o = {hosts, 4};
  cb__certs_t *c = new_certs(&o);
  X509 *leaf = ident(c, CB__CERT_DEFAULT)->cert;
  ASSERT_VERIFY(leaf, X509_V_OK, .trust = ca(c), .ip = "10.1.2.3");
  ASSERT_VERIFY(leaf, X509_V_OK, .trust = ca(c), .ip = "fd00:0::5");
  ASSERT_VERIFY(leaf, X509_V_OK, .trust = ca(c), .host = "test.example");
  ASSERT_VERIFY(leaf, X509_V_OK, .trust = ca(c), .host = "a.wild.example");
  ASSERT_VERIFY(leaf, X509_V_OK, .trust = ca(c), .host = "localhost");
  ASSERT_VERIFY(leaf, X509_V_OK, .trust = ca(c), .ip = "::1");
  /* "10.1.2.3" is no DNS entry: a client asking for it by name does not match. */
  ASSERT_VERIFY(leaf, X509_V_ERR_HOSTNAME_MISMATCH, .trust = ca(c), .host = "10.1.2.3");
  cb__certs_free(c);

  static const char *const bad[] = {"", "a,DNS:evil.example", "a b", "x*.example", "ex\xc3\xa9.example", NULL};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cb__certs_opts_t ob = {&bad[i], 1};
    cb__certs_t *none = (cb__certs_t *)1;
    ASSERT_EQ(cb__certs_new(&ob, &none), UV_EINVAL);
    ASSERT(none == (cb__certs_t *)1);
  }
  char longname[300];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *lp = longname;
  cb__certs_opts_t ol = {&lp, 1};
  cb__certs_t *none = NULL;
  ASSERT_EQ(cb__certs_new(&ol, &none), UV_EINVAL);
  cb__certs_opts_t on = {NULL, 1};
  ASSERT_EQ(cb__certs_new(&on, &none), UV_EINVAL);
}

/* A client certificate: clientAuth, signed by the client CA, its key in PKCS#8 PEM and DER. */
TEST(certs_client) {
  cb__certs_t *c = new_certs(NULL);
  cb__client_cert_t cc;
  ASSERT_EQ(cb__certs_client(c, STR("alice"), &cc), 0);
  ASSERT_EQ(cc.cert_pem.ptr[cc.cert_pem.len], '\0');
  ASSERT_EQ(cc.key_pem.ptr[cc.key_pem.len], '\0');
  ASSERT_EQ(strncmp(cc.key_pem.ptr, "-----BEGIN PRIVATE KEY-----\n", 28), 0);
  BIO *b = BIO_new_mem_buf(cc.cert_pem.ptr, (int)cc.cert_pem.len);
  X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
  BIO_free(b);
  ASSERT_NOT_NULL(x);
  const unsigned char *p = (const unsigned char *)cc.cert_der.ptr;
  X509 *xd = d2i_X509(NULL, &p, (long)cc.cert_der.len);
  ASSERT_NOT_NULL(xd);
  ASSERT(p == (const unsigned char *)cc.cert_der.ptr + cc.cert_der.len);
  ASSERT_EQ(X509_cmp(x, xd), 0);
  b = BIO_new_mem_buf(cc.key_pem.ptr, (int)cc.key_pem.len);
  EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
  BIO_free(b);
  ASSERT_NOT_NULL(k);
  ASSERT_EQ(X509_check_private_key(x, k), 1);
  p = (const unsigned char *)cc.key_der.ptr;
  PKCS8_PRIV_KEY_INFO *p8 = d2i_PKCS8_PRIV_KEY_INFO(NULL, &p, (long)cc.key_der.len);
  ASSERT_NOT_NULL(p8);
  EVP_PKEY *kd = EVP_PKCS82PKEY(p8);
  ASSERT_NOT_NULL(kd);
  ASSERT_EQ(EVP_PKEY_eq(k, kd), 1);
  char cn[80];
  cn_of(x, cn, sizeof cn);
  ASSERT_STR_EQ(cn, "alice");
  ASSERT_EQ(X509_get_extended_key_usage(x), XKU_SSL_CLIENT);
  X509 *client_ca = cb__certs_ca(c, CB__CA_CLIENT);
  ASSERT_VERIFY(x, X509_V_OK, .trust = client_ca, .purpose = X509_PURPOSE_SSL_CLIENT);
  ASSERT_VERIFY(x, X509_V_ERR_INVALID_PURPOSE, .trust = client_ca, .purpose = X509_PURPOSE_SSL_SERVER);
  ASSERT_VERIFY(x, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, .trust = ca(c),
                .purpose = X509_PURPOSE_SSL_CLIENT);
  /* A second one for the same name has its own key. */
  cb__client_cert_t cc2;
  ASSERT_EQ(cb__certs_client(c, STR("alice"), &cc2), 0);
  ASSERT(cc2.cert_der.len != cc.cert_der.len || memcmp(cc2.cert_der.ptr, cc.cert_der.ptr, cc.cert_der.len) != 0);
  cb__client_cert_free(&cc2);
  PKCS8_PRIV_KEY_INFO_free(p8);
  EVP_PKEY_free(kd);
  EVP_PKEY_free(k);
  X509_free(xd);
  X509_free(x);
  cb__client_cert_free(&cc);
  cb__client_cert_free(&cc);

  char n64[65];
  memset(n64, 'n', 64);
  n64[64] = '\0';
  ASSERT_EQ(cb__certs_client(c, n64, 64, &cc), 0);
  cb__client_cert_free(&cc);
  ASSERT_EQ(cb__certs_client(c, "n", 0, &cc), UV_EINVAL);
  ASSERT_EQ(cb__certs_client(c, n64, 65, &cc), UV_EINVAL);
  ASSERT_EQ(cb__certs_client(c, STR("a\nb"), &cc), UV_EINVAL);
  ASSERT_EQ(cb__certs_client(c, STR("\xff"), &cc), UV_EINVAL);
  ASSERT_EQ(cb__certs_client(c, STR("\xc3\xa9l\xc3\xa8ve"), &cc), 0); /* UTF-8 is fine */
  cb__client_cert_free(&cc);
  cb__certs_free(c);
}

/* ---- the user's files ---- */

static char tmpdir[64];

static void write_file(const char *name, const char *data, size_t len) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(data, 1, len, f), len);
  ASSERT_EQ(fclose(f), 0);
}

static void write_pem(const char *name, X509 *a, X509 *b, EVP_PKEY *key, int encrypt) {
  BIO *m = BIO_new(BIO_s_mem());
  if (a != NULL) ASSERT_EQ(PEM_write_bio_X509(m, a), 1);
  if (b != NULL) ASSERT_EQ(PEM_write_bio_X509(m, b), 1);
  const EVP_CIPHER *cipher = encrypt ? EVP_aes_128_cbc() : NULL;
  unsigned char pw[] = "pw";
  if (key != NULL)
    ASSERT_EQ(PEM_write_bio_PrivateKey(m, key, cipher, encrypt ? pw : NULL, encrypt ? 2 : 0, NULL, NULL), 1);
  char *data;
  long n = BIO_get_mem_data(m, &data);
  write_file(name, data, (size_t)n);
  BIO_free(m);
}

static const char *at(const char *name) {
  static char paths[4][128];
  static int next;
  char *p = paths[next++ % 4];
  snprintf(p, 128, "%s/%s", tmpdir, name);
  return p;
}

/* The user's certificate, key and chain become the default identity; a file that cannot serve is refused with
 * its reason, and leaves the identity as it was. */
TEST(certs_load) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/cbt-certs-XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  /* The "user's" certificate: another run's missing-intermediate leaf, with its intermediate as the chain. */
  cb__certs_t *theirs = new_certs(NULL), *c = new_certs(NULL);
  const cb__cert_ident_t *u = ident(theirs, CB__CERT_MISSING_INTERMEDIATE);
  write_pem("leaf.pem", u->cert, NULL, NULL, 0);
  write_pem("full.pem", u->cert, u->issuer, NULL, 0);
  write_pem("inter.pem", u->issuer, NULL, NULL, 0);
  write_pem("key.pem", NULL, NULL, u->key, 0);
  write_pem("enc.pem", NULL, NULL, u->key, 1);
  write_pem("other-key.pem", NULL, NULL, ident(theirs, CB__CERT_EXPIRED)->key, 0);
  write_file("empty.pem", "", 0);
  write_file("junk.pem", STR("not a certificate\n"));
  char why[256];

  static const struct {
    const char *cert, *key, *chain;
    int rc;
    const char *why;
  } bad[] = {
      {"nope.pem", "key.pem", NULL, UV_ENOENT, "certificate file %s/nope.pem: No such file or directory"},
      {"leaf.pem", "nope.pem", NULL, UV_ENOENT, "key file %s/nope.pem: No such file or directory"},
      {"leaf.pem", "key.pem", "nope.pem", UV_ENOENT, "chain file %s/nope.pem: No such file or directory"},
      {".", "key.pem", NULL, UV_EINVAL, "certificate file %s/.: not a regular file"},
      {"empty.pem", "key.pem", NULL, UV_EINVAL,
       "certificate file %s/empty.pem: no PEM certificate (BEGIN CERTIFICATE)"},
      {"junk.pem", "key.pem", NULL, UV_EINVAL, "certificate file %s/junk.pem: no PEM certificate (BEGIN CERTIFICATE)"},
      {"leaf.pem", "key.pem", "junk.pem", UV_EINVAL,
       "chain file %s/junk.pem: no PEM certificate (BEGIN CERTIFICATE)"},
      {"leaf.pem", "leaf.pem", NULL, UV_EINVAL,
       "key file %s/leaf.pem: no PEM private key that can be read without a pass phrase"},
      {"leaf.pem", "enc.pem", NULL, UV_EINVAL,
       "key file %s/enc.pem: no PEM private key that can be read without a pass phrase"},
      {"leaf.pem", "other-key.pem", NULL, UV_EINVAL, NULL},
  };
  const cb__cert_ident_t before = *ident(c, CB__CERT_DEFAULT);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cbt_log("%s %s %s", bad[i].cert, bad[i].key, bad[i].chain ? bad[i].chain : "-");
    const char *cert = at(bad[i].cert), *key = at(bad[i].key), *chain = bad[i].chain ? at(bad[i].chain) : NULL;
    ASSERT_EQ(cb__certs_load(c, cert, key, chain, why, sizeof why), bad[i].rc);
    char exp[256];
    if (bad[i].why != NULL)
      snprintf(exp, sizeof exp, bad[i].why, tmpdir);
    else
      snprintf(exp, sizeof exp, "key file %s/other-key.pem: the key does not belong to the certificate of %s/leaf.pem",
               tmpdir, tmpdir);
    ASSERT_STR_EQ(why, exp);
    const cb__cert_ident_t *now = ident(c, CB__CERT_DEFAULT);
    ASSERT(now->cert == before.cert && now->key == before.key && now->chain == before.chain);
  }
  ASSERT_EQ(cb__certs_load(c, NULL, at("key.pem"), NULL, NULL, 0), UV_EINVAL);

  /* The chain: what follows the leaf in its file, then the chain file. */
  ASSERT_EQ(cb__certs_load(c, at("full.pem"), at("key.pem"), NULL, why, sizeof why), 0);
  ASSERT_STR_EQ(why, "");
  const cb__cert_ident_t *d = ident(c, CB__CERT_DEFAULT);
  ASSERT_EQ(X509_cmp(d->cert, u->cert), 0);
  ASSERT_EQ(EVP_PKEY_eq(d->key, u->key), 1);
  ASSERT_EQ(sk_X509_num(d->chain), 1);
  ASSERT_EQ(X509_cmp(sk_X509_value(d->chain, 0), u->issuer), 0);
  ASSERT_NULL(d->issuer);
  ASSERT_NULL(d->sni);
  ASSERT_VERIFY(d->cert, X509_V_OK, .trust = ca(theirs), .untrusted = d->chain, .host = u->sni);
  ASSERT_EQ(cb__certs_load(c, at("leaf.pem"), at("key.pem"), at("full.pem"), why, sizeof why), 0);
  d = ident(c, CB__CERT_DEFAULT);
  ASSERT_EQ(sk_X509_num(d->chain), 2);
  ASSERT_EQ(X509_cmp(sk_X509_value(d->chain, 1), u->issuer), 0);
  ASSERT_EQ(cb__certs_load(c, at("leaf.pem"), at("key.pem"), NULL, why, sizeof why), 0);
  ASSERT_EQ(sk_X509_num(ident(c, CB__CERT_DEFAULT)->chain), 0);
  /* The made identities stay. */
  ASSERT_VERIFY(ident(c, CB__CERT_EXPIRED)->cert, X509_V_ERR_CERT_HAS_EXPIRED, .trust = ca(c),
                .host = "expired.localhost");

  cb__certs_free(theirs);
  cb__certs_free(c);
  static const char *const names[] = {"leaf.pem", "full.pem", "inter.pem", "key.pem", "enc.pem", "other-key.pem",
                                      "empty.pem", "junk.pem"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(at(names[i]));
  rmdir(tmpdir);
}
