/* The certificates a TLS test needs, made in memory when a server starts (issue 24): a test CA and a leaf for
 * localhost, 127.0.0.1 and ::1 that it signed, one leaf per bad-certificate scenario (chosen later by SNI), a
 * client CA and the client certificates it issues. Since OTP 26, `ssl` verifies the peer by default and httpc
 * refuses a self-signed leaf even when it is listed in cacertfile, so a test server has to hand out a real chain:
 * a CA the test trusts and a leaf that CA signed.
 *
 * Every key is fresh and every serial random, so two servers (or two runs) never share a CA: a client that
 * trusted one cannot be fooled by the other. Nothing here is global; libcrypto's own initialisation is
 * thread-safe. The X.509 extensions are those a public CA would give, so clients that check them (key usage,
 * extended key usage, basic constraints, key identifiers) accept the good leaf and find only the one flaw of
 * each bad one. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "base/base.h"

#define HOUR 3600L
#define DAY (24 * HOUR)
#define WEEK (7 * DAY)
/* A user's PEM file larger than this is not a certificate chain or a key. */
#define MAX_PEM_FILE (1 << 20)
/* RFC 5280's upper bound on a common name. */
#define MAX_CN 64

/* The made CAs beside the two a test is given: one that signs nothing but the untrusted-root leaf, and the
 * intermediate of the missing-intermediate leaf. Kept so that cb__cert_ident_t.issuer can point at them. */
enum { CA_UNTRUSTED = CB__CA_COUNT, CA_INTERMEDIATE, CA_ALL };

struct cb__certs_s {
  time_t now; /* the moment every validity period is counted from */
  X509 *ca[CA_ALL];
  EVP_PKEY *ca_key[CA_ALL];
  cb__slice_t ca_pem[CB__CA_COUNT], ca_der[CB__CA_COUNT];
  cb__cert_ident_t ident[CB__CERT_COUNT];
};

static const char *const sni_names[CB__CERT_COUNT] = {
    [CB__CERT_DEFAULT] = NULL,
    [CB__CERT_EXPIRED] = "expired.localhost",
    [CB__CERT_NOT_YET_VALID] = "not-yet-valid.localhost",
    [CB__CERT_WRONG_HOST] = "wrong-host.localhost",
    [CB__CERT_SELF_SIGNED] = "self-signed.localhost",
    [CB__CERT_UNTRUSTED_ROOT] = "untrusted-root.localhost",
    [CB__CERT_MISSING_INTERMEDIATE] = "missing-intermediate.localhost",
    [CB__CERT_WEAK_KEY] = "weak-key.localhost",
};

/* What one certificate is. */
typedef struct {
  const char *cn;
  const char *const *names; /* subjectAltName: IP literals and DNS names; NULL: none */
  size_t nnames;
  enum { ROLE_CA, ROLE_SERVER, ROLE_CLIENT } role;
  int pathlen;   /* a CA's pathLenConstraint, -1 for none */
  long from, to; /* validity, in seconds from certs->now */
} spec_t;

/* ---- making ---- */

static void hex(const unsigned char *p, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  out[2 * n] = '\0';
}

/* A random serial of 16 octets, 126 of its bits random (RFC 5280 4.1.2.2 allows up to 20 octets; the CA/Browser
 * Forum asks for at least 64 random bits). */
static int set_serial(X509 *x) {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) return 0;
  b[0] &= 0x7f;
  b[0] |= 0x40; /* always 16 octets in DER, never a leading zero to strip */
  BIGNUM *bn = BN_bin2bn(b, sizeof b, NULL);
  int ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
  BN_free(bn);
  return ok;
}

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value) {
  X509_EXTENSION *e = X509V3_EXT_nconf_nid(NULL, ctx, nid, value);
  if (e == NULL) return 0;
  int ok = X509_add_ext(x, e, -1);
  X509_EXTENSION_free(e);
  return ok;
}

/* Whether h is a DNS name the default leaf may hold: letters, digits, '-', '.', and "*." only at its start. */
static int dns_name_ok(const char *h) {
  size_t n = strlen(h);
  if (n == 0 || n > 253) return 0;
  size_t i = h[0] == '*' && h[1] == '.' && n > 2 ? 2 : 0;
  for (; i < n; i++) {
    char ch = h[i];
    if (!(ch >= 'a' && ch <= 'z') && !(ch >= 'A' && ch <= 'Z') && !(ch >= '0' && ch <= '9') && ch != '-' &&
        ch != '.')
      return 0;
  }
  return 1;
}

/* subjectAltName from a list of IP literals and DNS names, built entry by entry (a host given by the user never
 * passes through OpenSSL's "DNS:a,IP:b" text, where a comma would start another entry). 1, 0 when libcrypto
 * failed, -1 for a name that is neither. */
static int add_san(X509 *x, const char *const *names, size_t n) {
  GENERAL_NAMES *gens = sk_GENERAL_NAME_new_null();
  int rc = gens != NULL;
  for (size_t i = 0; rc == 1 && i < n; i++) {
    GENERAL_NAME *g = GENERAL_NAME_new();
    if (g == NULL) {
      rc = 0;
      break;
    }
    if (names[i] == NULL) {
      GENERAL_NAME_free(g);
      rc = -1;
      break;
    }
    ASN1_OCTET_STRING *ip = a2i_IPADDRESS(names[i]);
    if (ip != NULL) {
      GENERAL_NAME_set0_value(g, GEN_IPADD, ip);
    } else if (dns_name_ok(names[i])) {
      ASN1_IA5STRING *s = ASN1_IA5STRING_new();
      if (s == NULL || !ASN1_STRING_set(s, names[i], (int)strlen(names[i]))) {
        ASN1_IA5STRING_free(s);
        GENERAL_NAME_free(g);
        rc = 0;
        break;
      }
      GENERAL_NAME_set0_value(g, GEN_DNS, s);
    } else {
      GENERAL_NAME_free(g);
      rc = -1;
      break;
    }
    if (!sk_GENERAL_NAME_push(gens, g)) {
      GENERAL_NAME_free(g);
      rc = 0;
    }
  }
  if (rc == 1 && !X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT)) rc = 0;
  GENERAL_NAMES_free(gens);
  return rc;
}

static int set_cn(X509_NAME *name, const char *cn, size_t len) {
  return X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, (int)len, -1, 0);
}

/* A certificate for key as s describes it, signed by issuer_key (issuer NULL: self-signed). 0, UV_EINVAL for a
 * name add_san refuses, UV_ENOMEM. */
static int make_cert(const spec_t *s, time_t now, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key, X509 **out) {
  X509 *x = X509_new();
  int rc = UV_ENOMEM;
  if (x == NULL || !X509_set_version(x, X509_VERSION_3) || !set_serial(x)) goto done;
  if (X509_time_adj_ex(X509_getm_notBefore(x), 0, s->from, &now) == NULL ||
      X509_time_adj_ex(X509_getm_notAfter(x), 0, s->to, &now) == NULL)
    goto done;
  if (!set_cn(X509_get_subject_name(x), s->cn, strlen(s->cn))) goto done;
  if (!X509_set_issuer_name(x, issuer != NULL ? X509_get_subject_name(issuer) : X509_get_subject_name(x)))
    goto done;
  if (!X509_set_pubkey(x, key)) goto done;

  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer != NULL ? issuer : x, x, NULL, NULL, 0);
  char bc[40];
  if (s->role == ROLE_CA && s->pathlen >= 0)
    snprintf(bc, sizeof bc, "critical,CA:TRUE,pathlen:%d", s->pathlen);
  else
    snprintf(bc, sizeof bc, "critical,CA:%s", s->role == ROLE_CA ? "TRUE" : "FALSE");
  if (!add_ext(x, &ctx, NID_basic_constraints, bc)) goto done;
  const char *ku = s->role == ROLE_CA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature";
  if (!add_ext(x, &ctx, NID_key_usage, ku)) goto done;
  if (s->role != ROLE_CA &&
      !add_ext(x, &ctx, NID_ext_key_usage, s->role == ROLE_SERVER ? "serverAuth" : "clientAuth"))
    goto done;
  if (!add_ext(x, &ctx, NID_subject_key_identifier, "hash")) goto done;
  /* The authority key identifier names the issuer's key (its subject key identifier), which is how a client
   * picks the issuer among several with the same name. A self-signed certificate needs none. */
  if (issuer != NULL && !add_ext(x, &ctx, NID_authority_key_identifier, "keyid:always")) goto done;
  if (s->nnames > 0) {
    int san = add_san(x, s->names, s->nnames);
    if (san < 0) rc = UV_EINVAL;
    if (san != 1) goto done;
  }
  if (X509_sign(x, issuer_key, EVP_sha256()) <= 0) goto done;
  *out = x;
  return 0;
done:
  X509_free(x);
  return rc;
}

static EVP_PKEY *p256(void) { return EVP_EC_gen("P-256"); }

/* A CA: "<what> <16 random hex digits>", its key, signed by issuer (NULL: a root). */
static int make_ca(cb__certs_t *c, int which, const char *what, int issuer, int pathlen) {
  unsigned char r[8];
  char cn[80], h[17];
  if (RAND_bytes(r, sizeof r) != 1) return UV_ENOMEM;
  hex(r, sizeof r, h);
  snprintf(cn, sizeof cn, "%s %s", what, h);
  spec_t s = {.cn = cn, .role = ROLE_CA, .pathlen = pathlen, .from = -HOUR, .to = -HOUR + WEEK};
  c->ca_key[which] = p256();
  if (c->ca_key[which] == NULL) return UV_ENOMEM;
  X509 *iss = issuer >= 0 ? c->ca[issuer] : NULL;
  EVP_PKEY *iss_key = issuer >= 0 ? c->ca_key[issuer] : c->ca_key[which];
  return make_cert(&s, c->now, c->ca_key[which], iss, iss_key, &c->ca[which]);
}

/* Fills ident with a leaf made as s describes, with a fresh key (RSA-1024 when weak), signed by CA ca (-1: by
 * its own key). */
static int make_leaf(cb__certs_t *c, cb__cert_ident_t *ident, const spec_t *s, int ca, int weak) {
  EVP_PKEY *key = weak ? EVP_RSA_gen(1024) : p256();
  STACK_OF(X509) *chain = sk_X509_new_null();
  X509 *x = NULL;
  int rc = UV_ENOMEM;
  if (key != NULL && chain != NULL)
    rc = make_cert(s, c->now, key, ca >= 0 ? c->ca[ca] : NULL, ca >= 0 ? c->ca_key[ca] : key, &x);
  if (rc != 0) {
    EVP_PKEY_free(key);
    sk_X509_free(chain);
    return rc;
  }
  ident->cert = x;
  ident->key = key;
  ident->chain = chain;
  ident->issuer = ca >= 0 ? c->ca[ca] : x;
  return 0;
}

/* PEM and DER of x into two malloc'ed slices (the PEM NUL-terminated). */
static int encode_cert(X509 *x, cb__slice_t *pem, cb__slice_t *der) {
  BIO *b = BIO_new(BIO_s_mem());
  char *data;
  int rc = UV_ENOMEM;
  if (b == NULL || !PEM_write_bio_X509(b, x)) goto done;
  long n = BIO_get_mem_data(b, &data);
  char *p = malloc((size_t)n + 1);
  if (p == NULL) goto done;
  memcpy(p, data, (size_t)n);
  p[n] = '\0';
  unsigned char *d = NULL;
  int dn = i2d_X509(x, &d);
  if (dn <= 0) {
    free(p);
    goto done;
  }
  /* i2d_X509 allocates with OPENSSL_malloc; copy so that both slices are freed with free(). */
  char *dcopy = malloc((size_t)dn);
  if (dcopy != NULL) memcpy(dcopy, d, (size_t)dn);
  OPENSSL_free(d);
  if (dcopy == NULL) {
    free(p);
    goto done;
  }
  *pem = (cb__slice_t){p, (size_t)n};
  *der = (cb__slice_t){dcopy, (size_t)dn};
  rc = 0;
done:
  BIO_free(b);
  return rc;
}

static void ident_clear(cb__cert_ident_t *id) {
  X509_free(id->cert);
  EVP_PKEY_free(id->key);
  sk_X509_pop_free(id->chain, X509_free);
  id->cert = id->key = id->chain = id->issuer = NULL;
}

static int make_all(cb__certs_t *c, const cb__certs_opts_t *o) {
  int rc;
  if ((rc = make_ca(c, CB__CA_SERVER, "cbench test CA", -1, -1)) != 0 ||
      (rc = make_ca(c, CB__CA_CLIENT, "cbench test client CA", -1, -1)) != 0 ||
      (rc = make_ca(c, CA_UNTRUSTED, "cbench untrusted CA", -1, -1)) != 0 ||
      (rc = make_ca(c, CA_INTERMEDIATE, "cbench test intermediate CA", CB__CA_SERVER, 0)) != 0)
    return rc;
  for (int w = 0; w < CB__CA_COUNT; w++)
    if ((rc = encode_cert(c->ca[w], &c->ca_pem[w], &c->ca_der[w])) != 0) return rc;

  /* The default leaf: the three names of this host, the paced-handshake fault's name (tls-slow.localhost, whose
   * handshake is slow but succeeds: transport/tls_fault.c), then the caller's. */
  size_t nextra = o != NULL ? o->nhosts : 0;
  const char **names = malloc((4 + nextra) * sizeof *names);
  if (names == NULL) return UV_ENOMEM;
  names[0] = "localhost";
  names[1] = "127.0.0.1";
  names[2] = "::1";
  names[3] = "tls-slow.localhost";
  for (size_t i = 0; i < nextra; i++) names[4 + i] = o->hosts[i];
  spec_t s = {.cn = "localhost", .names = names, .nnames = 4 + nextra, .role = ROLE_SERVER, .from = -HOUR,
              .to = -HOUR + WEEK};
  rc = make_leaf(c, &c->ident[CB__CERT_DEFAULT], &s, CB__CA_SERVER, 0);
  free(names);
  if (rc != 0) return rc;

  for (int id = 1; id < CB__CERT_COUNT; id++) {
    const char *name = sni_names[id];
    static const char *const other[] = {"other.invalid"};
    spec_t b = {.cn = name, .names = &name, .nnames = 1, .role = ROLE_SERVER, .from = -HOUR, .to = -HOUR + WEEK};
    int ca = CB__CA_SERVER;
    switch (id) {
      case CB__CERT_EXPIRED: b.from = -WEEK - DAY, b.to = -DAY; break;
      case CB__CERT_NOT_YET_VALID: b.from = DAY, b.to = DAY + WEEK; break;
      case CB__CERT_WRONG_HOST: b.cn = other[0], b.names = other; break;
      case CB__CERT_SELF_SIGNED: ca = -1; break;
      case CB__CERT_UNTRUSTED_ROOT: ca = CA_UNTRUSTED; break;
      case CB__CERT_MISSING_INTERMEDIATE: ca = CA_INTERMEDIATE; break;
      default: break;
    }
    if ((rc = make_leaf(c, &c->ident[id], &b, ca, id == CB__CERT_WEAK_KEY)) != 0) return rc;
    c->ident[id].sni = name;
  }
  /* Every chain is served empty: the default leaf's issuer is the trust anchor itself, the untrusted root is
   * never sent (servers do not send roots), and the missing intermediate is the flaw. */
  return 0;
}

int cb__certs_new(const cb__certs_opts_t *o, cb__certs_t **out) {
  if (o != NULL && o->nhosts > 0 && o->hosts == NULL) return UV_EINVAL;
  cb__certs_t *c = calloc(1, sizeof *c);
  if (c == NULL) return UV_ENOMEM;
  c->now = time(NULL);
  int rc = make_all(c, o);
  ERR_clear_error();
  if (rc != 0) {
    cb__certs_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void cb__certs_free(cb__certs_t *c) {
  if (c == NULL) return;
  for (int id = 0; id < CB__CERT_COUNT; id++) ident_clear(&c->ident[id]);
  for (int w = 0; w < CA_ALL; w++) {
    X509_free(c->ca[w]);
    EVP_PKEY_free(c->ca_key[w]);
  }
  for (int w = 0; w < CB__CA_COUNT; w++) {
    free((char *)c->ca_pem[w].ptr);
    free((char *)c->ca_der[w].ptr);
  }
  free(c);
}

/* ---- reading ---- */

int cb__certs_find(const char *sni, size_t len) {
  for (int id = 1; id < CB__CERT_COUNT; id++)
    if (sni != NULL && strlen(sni_names[id]) == len && strncasecmp(sni, sni_names[id], len) == 0) return id;
  return CB__CERT_DEFAULT;
}

const cb__cert_ident_t *cb__certs_ident(const cb__certs_t *c, int id) {
  return id >= 0 && id < CB__CERT_COUNT ? &c->ident[id] : NULL;
}

void *cb__certs_ca(const cb__certs_t *c, int which) {
  return which >= 0 && which < CB__CA_COUNT ? c->ca[which] : NULL;
}

cb__slice_t cb__certs_ca_pem(const cb__certs_t *c, int which) {
  return which >= 0 && which < CB__CA_COUNT ? c->ca_pem[which] : (cb__slice_t){NULL, 0};
}

cb__slice_t cb__certs_ca_der(const cb__certs_t *c, int which) {
  return which >= 0 && which < CB__CA_COUNT ? c->ca_der[which] : (cb__slice_t){NULL, 0};
}

/* ---- client certificates ---- */

int cb__certs_client(const cb__certs_t *c, const char *cn, size_t cn_len, cb__client_cert_t *out) {
  if (cn == NULL || cn_len == 0 || cn_len > MAX_CN) return UV_EINVAL;
  for (size_t i = 0; i < cn_len; i++)
    if ((unsigned char)cn[i] < 0x20 || cn[i] == 0x7f) return UV_EINVAL;
  char name[MAX_CN + 1];
  memcpy(name, cn, cn_len);
  name[cn_len] = '\0';
  spec_t s = {.cn = name, .role = ROLE_CLIENT, .from = -HOUR, .to = -HOUR + WEEK};
  EVP_PKEY *key = p256();
  X509 *x = NULL;
  BIO *b = BIO_new(BIO_s_mem());
  int rc = UV_ENOMEM;
  if (key == NULL || b == NULL) goto done;
  /* A name that is not UTF-8 is refused by libcrypto as it sets the subject. */
  if ((rc = make_cert(&s, c->now, key, c->ca[CB__CA_CLIENT], c->ca_key[CB__CA_CLIENT], &x)) != 0) {
    if (ERR_GET_LIB(ERR_peek_last_error()) == ERR_LIB_ASN1) rc = UV_EINVAL;
    goto done;
  }
  rc = UV_ENOMEM;
  /* One memory BIO, written in turn: certificate PEM, key PEM, certificate DER, key DER; the offsets of each
   * part are taken as it is written. */
  size_t off[5];
  char *data;
  off[0] = 0;
  if (!PEM_write_bio_X509(b, x) || BIO_write(b, "", 1) != 1) goto done;
  off[1] = (size_t)BIO_get_mem_data(b, &data);
  if (!PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL) || BIO_write(b, "", 1) != 1) goto done;
  off[2] = (size_t)BIO_get_mem_data(b, &data);
  if (!i2d_X509_bio(b, x)) goto done;
  off[3] = (size_t)BIO_get_mem_data(b, &data);
  if (!i2d_PKCS8PrivateKey_bio(b, key, NULL, NULL, 0, NULL, NULL)) goto done;
  off[4] = (size_t)BIO_get_mem_data(b, &data);
  out->mem = malloc(off[4]);
  if (out->mem == NULL) goto done;
  memcpy(out->mem, data, off[4]);
  out->cert_pem = (cb__slice_t){out->mem + off[0], off[1] - off[0] - 1};
  out->key_pem = (cb__slice_t){out->mem + off[1], off[2] - off[1] - 1};
  out->cert_der = (cb__slice_t){out->mem + off[2], off[3] - off[2]};
  out->key_der = (cb__slice_t){out->mem + off[3], off[4] - off[3]};
  rc = 0;
done:
  BIO_free(b);
  X509_free(x);
  EVP_PKEY_free(key);
  ERR_clear_error();
  return rc;
}

void cb__client_cert_free(cb__client_cert_t *cc) {
  if (cc == NULL) return;
  free(cc->mem);
  cc->mem = NULL;
}

/* RFC 2253's form (the most specific RDN first, "," between), but without its escaping of bytes above 0x7f: a
 * name in UTF-8 reads as itself in the journal. */
#define SUBJECT_FLAGS (XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB)

int cb__cert_identity(const void *x509, char *subject, size_t cap, char sha256[65]) {
  X509 *x = (X509 *)x509;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  BIO *b = BIO_new(BIO_s_mem());
  int rc = UV_ENOMEM;
  if (b == NULL || X509_NAME_print_ex(b, X509_get_subject_name(x), 0, SUBJECT_FLAGS) < 0 ||
      X509_digest(x, EVP_sha256(), md, &mdlen) != 1 || mdlen != 32)
    goto done;
  char *data;
  long n = BIO_get_mem_data(b, &data);
  if (n < 0 || n > INT32_MAX) goto done;
  if (cap > 0) {
    size_t k = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
    memcpy(subject, data, k);
    subject[k] = '\0';
  }
  hex(md, mdlen, sha256);
  rc = (int)n;
done:
  BIO_free(b);
  ERR_clear_error();
  return rc;
}

int cb__cert_identity_pem(const char *pem, size_t len, char *subject, size_t cap, char sha256[65]) {
  if (pem == NULL || len > INT32_MAX) return UV_EINVAL;
  BIO *b = BIO_new_mem_buf(pem, (int)len);
  if (b == NULL) return UV_ENOMEM;
  X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
  BIO_free(b);
  int rc = x != NULL ? cb__cert_identity(x, subject, cap, sha256) : UV_EINVAL;
  X509_free(x);
  ERR_clear_error();
  return rc;
}

/* ---- the user's files ---- */

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t size, const char *fmt, ...) {
  if (why != NULL && size > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
  }
  return UV_EINVAL;
}

/* Reads a whole PEM file into a memory BIO. 0, a negated errno (libuv's codes on Unix), UV_EINVAL, UV_ENOMEM. */
static int read_pem(const char *path, const char *what, BIO **out, char *why, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = -errno;
    fail(why, size, "%s %s: %s", what, path, strerror(-err));
    return err;
  }
  struct stat st;
  int rc = 0;
  char *buf = NULL;
  if (fstat(fd, &st) != 0) {
    rc = -errno;
    fail(why, size, "%s %s: %s", what, path, strerror(-rc));
  } else if (!S_ISREG(st.st_mode)) {
    rc = fail(why, size, "%s %s: not a regular file", what, path);
  } else if (st.st_size > MAX_PEM_FILE) {
    rc = fail(why, size, "%s %s: larger than %d bytes", what, path, MAX_PEM_FILE);
  } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
    rc = UV_ENOMEM;
  }
  size_t n = 0;
  while (rc == 0 && n < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = -errno;
      fail(why, size, "%s %s: %s", what, path, strerror(-rc));
    }
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (rc == 0) {
    /* The BIO reads a copy, so buf can go now. */
    BIO *b = BIO_new(BIO_s_mem());
    if (b == NULL || (n > 0 && BIO_write(b, buf, (int)n) != (int)n)) {
      BIO_free(b);
      rc = UV_ENOMEM;
    } else {
      *out = b;
    }
  }
  free(buf);
  return rc;
}

/* Every certificate left in b, pushed onto chain. */
static int read_chain(BIO *b, STACK_OF(X509) *chain) {
  X509 *x;
  while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
    if (!sk_X509_push(chain, x)) {
      X509_free(x);
      return UV_ENOMEM;
    }
  /* Reading stops with "no start line" at the end of the file: that is the end, not an error. */
  ERR_clear_error();
  return 0;
}

/* A key that asks for a pass phrase is not read: there is no one to type it. */
static int no_password(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

int cb__certs_load(cb__certs_t *c, const char *cert_path, const char *key_path, const char *chain_path, char *why,
                   size_t why_size) {
  if (why != NULL && why_size > 0) why[0] = '\0';
  if (cert_path == NULL || key_path == NULL)
    return fail(why, why_size, "a certificate file and a key file are both needed");
  BIO *cb = NULL, *kb = NULL, *chb = NULL;
  X509 *cert = NULL;
  EVP_PKEY *key = NULL;
  STACK_OF(X509) *chain = sk_X509_new_null();
  int rc = chain == NULL ? UV_ENOMEM : 0;
  if (rc == 0) rc = read_pem(cert_path, "certificate file", &cb, why, why_size);
  if (rc == 0) rc = read_pem(key_path, "key file", &kb, why, why_size);
  if (rc == 0 && chain_path != NULL) rc = read_pem(chain_path, "chain file", &chb, why, why_size);
  if (rc != 0) goto done;
  if ((cert = PEM_read_bio_X509(cb, NULL, NULL, NULL)) == NULL) {
    rc = fail(why, why_size, "certificate file %s: no PEM certificate (BEGIN CERTIFICATE)", cert_path);
    goto done;
  }
  if ((rc = read_chain(cb, chain)) != 0 || (chb != NULL && (rc = read_chain(chb, chain)) != 0)) goto done;
  if (chb != NULL && sk_X509_num(chain) == 0) {
    rc = fail(why, why_size, "chain file %s: no PEM certificate (BEGIN CERTIFICATE)", chain_path);
    goto done;
  }
  if ((key = PEM_read_bio_PrivateKey(kb, NULL, no_password, NULL)) == NULL) {
    rc = fail(why, why_size, "key file %s: no PEM private key that can be read without a pass phrase", key_path);
    goto done;
  }
  if (X509_check_private_key(cert, key) != 1) {
    rc = fail(why, why_size, "key file %s: the key does not belong to the certificate of %s", key_path, cert_path);
    goto done;
  }
  cb__cert_ident_t *d = &c->ident[CB__CERT_DEFAULT];
  ident_clear(d);
  *d = (cb__cert_ident_t){.sni = NULL, .cert = cert, .key = key, .chain = chain, .issuer = NULL};
  cert = NULL, key = NULL, chain = NULL;
done:
  ERR_clear_error();
  BIO_free(cb);
  BIO_free(kb);
  BIO_free(chb);
  X509_free(cert);
  EVP_PKEY_free(key);
  sk_X509_pop_free(chain, X509_free);
  return rc;
}
