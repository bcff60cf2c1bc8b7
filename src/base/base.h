/* base/: what every layer of the engine stands on: payloads and fixture files, status texts, name tables and the
 * error detail, HTTP's text rules, per-worker block caches, the certificates of TLS tests. Nothing here knows a
 * connection, a request or a route. (docs/architecture.md: the layers) */
#ifndef CB_BASE_H
#define CB_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>
#include <uv.h>
#include "cbench.h"

/* A string literal and its length, for the (pointer, length) pairs the engine passes. */
#define STR(s) s, (sizeof(s) - 1)

/* One header field, not terminated: what the protocols parse into and what the response API takes. */
typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} cb__hdr_t;

/* splitmix64's finaliser: spreads every input bit over the whole word, so that a table can index by the low
 * bits of an FNV-1a sum or a counter. The stub memo key, the near-miss query index and the fault dice use it. */
static inline uint64_t cb__mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* a[0..n) == b[0..n). Keys of 4 to 16 bytes (paths, header values) with two overlapping loads, no call. */
static inline int cb__same_bytes(const char *a, const char *b, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t x0, x1, y0, y1;
    __builtin_memcpy(&x0, a, 8);
    __builtin_memcpy(&x1, a + n - 8, 8);
    __builtin_memcpy(&y0, b, 8);
    __builtin_memcpy(&y1, b + n - 8, 8);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  if (n >= 4 && n < 8) {
    uint32_t x0, x1, y0, y1;
    __builtin_memcpy(&x0, a, 4);
    __builtin_memcpy(&x1, a + n - 4, 4);
    __builtin_memcpy(&y0, b, 4);
    __builtin_memcpy(&y1, b + n - 4, 4);
    return ((x0 ^ y0) | (x1 ^ y1)) == 0;
  }
  return __builtin_memcmp(a, b, n) == 0;
}

/* ---- fixture.c: files and static payloads ---- */

enum { CB__FILE_TINY, CB__FILE_SMALL, CB__FILE_BIG, CB__FILE_COUNT };

typedef struct {
  int fd[CB__FILE_COUNT];
  uint64_t size[CB__FILE_COUNT];
  /* The same bytes mapped read-only: HTTP/2 sends a file as many DATA frames, and a frame header plus a
   * reference into the mapping batches into one writev where sendfile would cost a call per frame. */
  const char *map[CB__FILE_COUNT];
  char dir[512]; /* empty: the files are in memory (memfd) */
} cb__fixtures_t;

int cb__fixtures_open(cb__fixtures_t *fx, const char *dir);
void cb__fixtures_close(cb__fixtures_t *fx);

typedef struct {
  const char *ptr;
  size_t len;
} cb__slice_t;

/* Payloads built once per process and never freed; safe to reference from any thread. */
typedef struct {
  cb__slice_t line;      /* LINE: 64 bytes */
  cb__slice_t bigline;   /* BIGLINE: 16384 bytes */
  cb__slice_t sse_line;  /* one SSE event carrying LINE */
  cb__slice_t sse_big;   /* one SSE event carrying BIGLINE */
} cb__payloads_t;

const cb__payloads_t *cb__payloads(void);

/* Generated content (byte i is i % 251) as one read-only buffer of CB__GEN_SPAN + 251 bytes: any run of up to
 * CB__GEN_SPAN bytes starting at content offset `off` is gen + off % 251. Made on first use, never freed. */
#define CB__GEN_SPAN (1u << 20)
/* GET /large: the first CB__LARGE_LEN bytes of the generated content. */
#define CB__LARGE_LEN 65536
const char *cb__generated(void);

/* ---- http_status.c ---- */

/* The reason phrase of docs/wire.md for a status code ("Unknown" when it has none). */
const char *cb__reason(int status);


/* ---- pool.c: per-worker block caches ---- */

#define CB__CACHE_MAX 64

typedef struct {
  uint32_t n;
  size_t size;
  void *free[CB__CACHE_MAX];
} cb__cache_t;

/* A worker's caches: output-queue storage (entries and arena in one block), 4 KiB blocks (held HTTP/1.1
 * input), and one of a size its owner gives (the HTTP/1.1 request state: proto/ sets it when a worker is made,
 * cb__cache_init). */
typedef struct {
  cb__cache_t outq, b4k, h1;
} cb__caches_t;

#define CB__BLOCK_4K 4096

void cb__cache_init(cb__cache_t *k, size_t size);
/* A block of k->size bytes (not zeroed), or NULL. */
void *cb__cache_get(cb__cache_t *k);
/* Gives a block of k->size bytes back (NULL is ignored). */
void cb__cache_put(cb__cache_t *k, void *p);
void cb__cache_drain(cb__cache_t *k);
/* outq_block: the size of an output queue's block (core/). The h1 cache starts with no size (cb__cache_init). */
void cb__caches_init(cb__caches_t *cs, size_t outq_block);
void cb__caches_drain(cb__caches_t *cs);

/* ---- names.c: name tables and the error detail of a refused stub ---- */

/* The error detail of a refused stub (names.c; include/cbench.h, cb_error_detail()): cleared at the start of each
 * route add, filled by the check that refuses a field. Both setters return UV_EINVAL, so a check reads
 * `return cb__bad_bytes(CB_FIELD_PATH, -1, CB_WHY_EMPTY, p, n);`. p may be NULL (then n is taken as 0). */
void cb__detail_clear(void);
int cb__bad_bytes(cb_field_id field, long index, cb_why_id why, const char *p, size_t n);
int cb__bad_number(cb_field_id field, long index, cb_why_id why, long long number);
/* The kinds of fault (docs/faults.md), numbered as the journal records them (cb_request_t.fault). */
enum {
  CB__FAULT_NONE,
  CB__FAULT_RESET,
  CB__FAULT_EMPTY,
  CB__FAULT_HANG,
  CB__FAULT_GARBAGE,
  CB__FAULT_TRUNCATED,
  CB__FAULT_OVERLONG,
  CB__FAULT_MALFORMED_CHUNK,
  CB__FAULT_MISSING_LAST_CHUNK,
  CB__FAULT_RAW,
  CB__FAULT_DELAY,
  CB__FAULT_DRIBBLE,
  CB__FAULT_RST_STREAM,
  CB__FAULT_GOAWAY,
  CB__FAULT_SETTINGS,
  CB__FAULT_VIOLATION,
  CB__FAULT_TRAILERS,
  CB__FAULT_SLOW_HEAD,
  CB__FAULT_DRIP,
  CB__FAULT_TLS_BAD_RECORD, /* TLS only (transport/tls_fault.c): a corrupt record after the head */
  CB__FAULT_TLS_TRUNCATE,   /* TLS only: part of the body, then the FIN without close_notify */
  CB__FAULT_COUNT
};

/* The name of a fault kind ("reset"), "" for none (the journal's and the fault parser's table). */
const char *cb__fault_name(int kind);

/* Why a proxied request's upstream failed (kinds/proxy.c; the journal's upstream error, docs/proxy.md). */
enum {
  CB__UPERR_NONE,
  CB__UPERR_REFUSED,      /* connect(2) refused */
  CB__UPERR_RESET,        /* reset, or closed before any byte of the answer */
  CB__UPERR_TIMEOUT,      /* no connection or no answer head within timeout_ms, or a pause in its body as long */
  CB__UPERR_BAD_RESPONSE, /* bytes that are not an HTTP/1.1 answer */
  CB__UPERR_HEAD_TOO_BIG, /* an answer head over the proxy's limit */
  CB__UPERR_BODY_TOO_BIG, /* an answer body over max_body_bytes */
  CB__UPERR_TRUNCATED,    /* closed in the middle of the answer */
  CB__UPERR_CONNECT,      /* another connect or socket error */
  CB__UPERR_NO_MEMORY,
  CB__UPERR_TLS,          /* an https upstream's handshake failed: verification, an alert, bytes that are not TLS */
  CB__UPERR_COUNT
};
/* Its name ("refused"; "none" for CB__UPERR_NONE) and its text for a 502 body ("connection refused"). */
const char *cb__uperr_name(int e);
const char *cb__uperr_text(int e);

/* ---- text.c: HTTP's text rules ---- */

/* The name of one CB_METHOD_* bit ("GET"), NULL for another value. */
const char *cb__method_name(unsigned bit);
/* The allow header value for a method mask, in the fixed order. Returns its length; buf has 80 bytes. */
size_t cb__allow_string(unsigned mask, char *buf);
/* RFC 9110 token / a field value with no control character but HTAB. */
int cb__is_token(const char *p, size_t n);
int cb__bad_value(const char *p, size_t n);
/* Why a header name or value is refused: 0 when it is good, else a CB_WHY_*. Shared by stub matchers, stub
 * response headers and deferred replies. */
int cb__header_name_why(const char *p, size_t n);
int cb__header_value_why(const char *p, size_t n);
/* A route's name: 0, or UV_EINVAL with the detail filled. {NULL, 0} is good (the default name). */
int cb__check_name(cb_str_t name);
/* Percent-decodes src (and '+' as a space) into dst, which has room for n bytes (dst may be src): the length.
 * The one decoding of a query: the route's matchers and the recorder's keys (kinds/record.c) agree by it. */
size_t cb__url_decode(char *dst, const char *src, size_t n);
/* Whether a response header name is one the engine writes itself (content-length...). */
int cb__forbidden_header(const char *name, size_t n);
/* A peer's address as text (AF_INET: "a.b.c.d", written here; AF_INET6: inet_ntop's form; another family: ""),
 * NUL-terminated in buf (46 bytes, INET6_ADDRSTRLEN): its length. With port >= 0, ":port" follows, and an IPv6
 * address is bracketed first ("[::1]:8080"; buf then 54 bytes). A request's x-forwarded-for and a handler's
 * peer: printf and inet_ntop's IPv4 path cost 1,300 instructions per proxied request. */
#define CB__PEER_TEXT_MAX 54
size_t cb__peer_text(int family, const unsigned char *addr, int port, char *buf);

/* ---- certs.c: the certificates a test needs, made in memory at start ---- */

/* What a TLS listener serves, chosen by the SNI name a client sends (cb__certs_find). The default identity is a
 * leaf for localhost, 127.0.0.1 and ::1 signed by the test CA (or the user's files, cb__certs_load); it names
 * tls-slow.localhost too, the paced-handshake fault's name (transport/tls_fault.c), whose handshake succeeds.
 * Every other one is a leaf with exactly one flaw, for the bad-certificate scenarios (issue 24). Each leaf's
 * subjectAltName is its SNI name, so that the flaw named is the only one a client can find. */
enum {
  CB__CERT_DEFAULT,
  CB__CERT_EXPIRED,              /* expired.localhost: its validity ended yesterday */
  CB__CERT_NOT_YET_VALID,        /* not-yet-valid.localhost: its validity starts tomorrow */
  CB__CERT_WRONG_HOST,           /* wrong-host.localhost: a leaf for other.invalid only */
  CB__CERT_SELF_SIGNED,          /* self-signed.localhost: signed by its own key */
  CB__CERT_UNTRUSTED_ROOT,       /* untrusted-root.localhost: signed by a second CA the test is never given */
  CB__CERT_MISSING_INTERMEDIATE, /* missing-intermediate.localhost: signed by an intermediate the test CA signed,
                                    which is not served */
  CB__CERT_WEAK_KEY,             /* weak-key.localhost: an RSA-1024 key (signed with SHA-256) */
  CB__CERT_COUNT
};

/* The two CAs a test is given: the one that signs the server's leaves, and the one that signs client
 * certificates (cb__certs_client). */
enum { CB__CA_SERVER, CB__CA_CLIENT, CB__CA_COUNT };

typedef struct cb__certs_s cb__certs_t;

typedef struct {
  /* More names for the default leaf, beside localhost, 127.0.0.1 and ::1 (a listener on another address): each an
   * IPv4 or IPv6 literal (an IP entry) or a DNS name (letters, digits, '-', '.', an optional leading "*."; at
   * most 253 bytes). NULL when nhosts is 0. */
  const char *const *hosts;
  size_t nhosts;
} cb__certs_opts_t;

/* One identity. The OpenSSL objects are typed void * so that no layer but the one that speaks TLS needs
 * OpenSSL's headers: cert is an X509 *, key an EVP_PKEY *, chain a STACK_OF(X509) * (the certificates served
 * after the leaf, possibly none, never NULL), issuer the X509 * whose key signed cert (the cert itself when it
 * is self-signed; NULL for a user's certificate), which a client would need and is not always served. All are
 * owned by the cb__certs_t; SSL_CTX_use_certificate(), SSL_CTX_use_PrivateKey() and SSL_CTX_set1_chain() take
 * references of their own, so an SSL_CTX made from them may outlive cb__certs_free(). */
typedef struct {
  const char *sni; /* "expired.localhost"; NULL for the default */
  void *cert, *key, *chain, *issuer;
} cb__cert_ident_t;

/* Makes the test CA, the client CA and every identity (fresh keys, random serials: two calls share nothing).
 * ECDSA P-256 with SHA-256 but the weak-key leaf; valid from an hour ago for a week but the expired and the
 * not-yet-valid leaves. o may be NULL. Returns 0 and *out, UV_EINVAL for a host that is neither an IP literal
 * nor a DNS name, UV_ENOMEM when libcrypto fails (with fixed inputs it fails only for want of memory). Any
 * thread; no global state. About 10 ms, most of it the RSA key. */
int cb__certs_new(const cb__certs_opts_t *o, cb__certs_t **out);
void cb__certs_free(cb__certs_t *c);

/* The user's certificate and key (PEM files) become the default identity in place of the made leaf; the
 * bad-certificate identities and the CAs stay. cert_path holds the leaf first; any certificates after it, then
 * those of chain_path (may be NULL), are the chain served after it. Nothing changes unless it returns 0.
 * Errors: UV_ENOENT, UV_EACCES... (what open(2) said), UV_EINVAL (not a regular file, over 1 MiB, no PEM
 * certificate or key, an encrypted key, a key that does not belong to the certificate), UV_ENOMEM; the reason,
 * naming the file, is written into why (why_size bytes, NUL-terminated; why may be NULL). */
int cb__certs_load(cb__certs_t *c, const char *cert_path, const char *key_path, const char *chain_path, char *why,
                   size_t why_size);

/* The identity for an SNI name (ASCII, case-insensitive, without a trailing dot): one of the bad-certificate
 * names, else CB__CERT_DEFAULT (no SNI, localhost, an IP, any other name). */
int cb__certs_find(const char *sni, size_t len);
/* The identity numbered id (CB__CERT_*), NULL when out of range. Valid until cb__certs_free(). */
const cb__cert_ident_t *cb__certs_ident(const cb__certs_t *c, int id);

/* A CA (CB__CA_*): as an X509 *, as PEM text (NUL-terminated; len without the NUL), as DER. Valid until
 * cb__certs_free(); out of range: NULL, {NULL, 0}. */
void *cb__certs_ca(const cb__certs_t *c, int which);
cb__slice_t cb__certs_ca_pem(const cb__certs_t *c, int which);
cb__slice_t cb__certs_ca_der(const cb__certs_t *c, int which);

/* A client certificate issued by the client CA, and its key, in one block (mem; cb__client_cert_free): PEM
 * (NUL-terminated) and DER. The key is PKCS#8 ("PRIVATE KEY"; OTP's {'PrivateKeyInfo', Der}). */
typedef struct {
  char *mem;
  cb__slice_t cert_pem, key_pem, cert_der, key_der;
} cb__client_cert_t;

/* Issues a client certificate for common name cn (1 to 64 bytes of UTF-8 without control bytes): ECDSA P-256,
 * clientAuth, the CAs' validity. Reads c only, so any thread may call it while c lives. Returns 0, UV_EINVAL
 * (cn), UV_ENOMEM. */
int cb__certs_client(const cb__certs_t *c, const char *cn, size_t cn_len, cb__client_cert_t *out);
void cb__client_cert_free(cb__client_cert_t *cc);

/* How a client certificate is named (the journal's client_cert): x509 (an X509 *)'s subject, RFC 2253 style
 * ("CN=alice"; characters beyond ASCII kept as UTF-8, RFC 2253's specials escaped), written NUL-terminated into
 * subject[0..cap) as far as it fits, and its SHA-256 over the DER as 64 lowercase hex digits and a NUL. Returns
 * the subject's whole length (more than cap - 1: it was cut), or UV_ENOMEM. */
int cb__cert_identity(const void *x509, char *subject, size_t cap, char sha256[65]);
/* The same for the first certificate of a PEM text: UV_EINVAL when it holds none. */
int cb__cert_identity_pem(const char *pem, size_t len, char *subject, size_t cap, char sha256[65]);

/* System calls made bare on the engine's hot paths (the plain transport, the proxy's upstream writes). glibc's
 * read(2) and write(2) wrappers are cancellation points, which in a threaded process cost about 25 instructions
 * each way per call to arm and disarm (the engine's threads are never cancelled), and its syscall(2) sets errno.
 * On x86-64 Linux the instruction itself: the result, or -errno, which is the UV_E* code of that error. */
#if defined(__x86_64__) && defined(__linux__)
static inline ssize_t cb__sys3(long nr, long a, long b, long c) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}
#else
static inline ssize_t cb__sys3(long nr, long a, long b, long c) {
  long ret = syscall(nr, a, b, c);
  return ret < 0 ? -errno : ret;
}
#endif

#endif
