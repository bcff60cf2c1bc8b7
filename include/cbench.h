/* cbench: an HTTP/1.1 and h2c test-fixture server on libuv.
 *
 * This is the only header a C user includes. Link with `pkg-config --cflags --libs cbench`.
 *
 * Threads: every function here may be called from any thread, but calls on one server must not race with
 * cb_server_stop() on that server (stop frees it). The engine runs its own worker threads; nothing in this
 * API calls back into the caller's code except a journal listener the caller installs, and nothing in the
 * library prints.
 *
 * Errors: functions return 0 (or a non-negative value) on success and a negative error code on failure:
 * libuv's UV_E* codes where one fits (UV_EADDRINUSE, UV_EINVAL, UV_ENOMEM, ...) and CB_E* below otherwise.
 * cb_strerror() and cb_err_name() name every code. A call that fails leaves nothing behind.
 */
#ifndef CBENCH_H
#define CBENCH_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CB_EXTERN __attribute__((visibility("default")))
#else
#define CB_EXTERN
#endif

#define CBENCH_VERSION_MAJOR 0
#define CBENCH_VERSION_MINOR 1
#define CBENCH_VERSION_PATCH 0

/* The libuv codes a caller most often tests for, usable without including uv.h (on Unix libuv's codes are
 * the negated errno values). */
#define CB_EINVAL (-EINVAL)
#define CB_ENOMEM (-ENOMEM)
#define CB_EADDRINUSE (-EADDRINUSE)
#define CB_EACCES (-EACCES)
#define CB_ENOENT (-ENOENT)
#define CB_EBUSY (-EBUSY)
#define CB_EAI_NONAME (-3008) /* UV_EAI_NONAME: a host name that does not resolve */

/* Error codes of cbench's own (libuv's codes are small negative errno values; these stay clear of them). */
enum {
  CB_EFIXTURE = -30001, /* the fixture files could not be written or opened */
  CB_ESTOPPED = -30002, /* the server is stopping or stopped */
  CB_ETHREADS = -30003, /* the number of threads or the CPU list is out of range */
  CB_ELIMIT = -30004,   /* a size limit or timeout is out of range */
  CB_EGONE = -30005,    /* a deferred request that was answered already, or whose client or stream is gone */
  CB_ENOTSTREAMING = -30006 /* a piece or the end of a streamed answer to a request whose answer has not begun */
};

/* Maximum numbers of worker threads and of CPUs in a pin list. */
#define CB_MAX_THREADS 256

/* Server configuration. Initialise with cb_config_init(), then change what you need. The server copies what it
 * needs at start: the strings and arrays may be freed once cb_server_start() returns. The bounds of every field
 * are in the option table (cb_config_options()). */
typedef struct cb_config_s {
  const char *host;            /* address to bind: an IPv4 or IPv6 literal or a host name; default "127.0.0.1" */
  int port;                    /* 0 binds an ephemeral port (see cb_server_port()); default 8080 */
  int threads;                 /* worker threads, 1..CB_MAX_THREADS; 0 = online CPUs (the default) */
  const int *cpus;             /* optional: worker i is pinned to cpus[i % ncpus]; NULL = no pinning */
  int ncpus;                   /* entries in cpus */
  int backlog;                 /* listen(2) backlog per worker, 1..65535; default 1024 */
  size_t max_header_bytes;     /* request line plus headers; over it: 431. Default 16384 */
  size_t max_body_bytes;       /* declared or received request body; over it: 413. Default 10000000 */
  unsigned header_timeout_ms;  /* time allowed for a whole request head; default 10000 */
  unsigned idle_timeout_ms;    /* time allowed between requests, or without progress; default 60000 */
  unsigned stop_timeout_ms;    /* cb_server_stop() lets in-flight responses finish this long; default 5000 */
  int enable_h2;               /* serve h2c (prior knowledge and Upgrade); default 1 */
  unsigned h2_max_concurrent_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS; default 128 */
  const char *fixture_dir;     /* NULL (default): the fixture files live in memory (memfd), nothing on disk.
                                * A directory: the files are written there as tiny, small and big (or reused
                                * when already there with the right size) and left for other servers to use */
  int enable_h1;               /* serve HTTP/1.0 and HTTP/1.1; default 1. 0 with enable_h2: an h2c-only
                                * listener, where anything but the HTTP/2 client preface gets
                                * GOAWAY(PROTOCOL_ERROR) and a close. Both 0: UV_EINVAL */
  unsigned journal;            /* requests kept in the request journal (the newest ones, over all workers);
                                * 0 disables it. 0..CB_JOURNAL_MAX; default 10000 */
  size_t journal_body_bytes;   /* request body bytes kept per journaled request (the full length is always
                                * recorded). 0..CB_JOURNAL_BODY_MAX; default 65536 */
  int admin;                   /* 1: serve the admin API (JSON over HTTP: stubs, journal, verify, reset, stats;
                                * docs/routes.md) on a listener of its own; default 0 */
  int admin_port;              /* the admin API's TCP port, 0..65535; 0 (default) binds an ephemeral one (see
                                * cb_server_admin_port()) */
  const char *admin_host;      /* the address the admin API binds; default "127.0.0.1". Anything but loopback
                                * lets other machines change the stubs */
  int tls;                     /* 1: the listener speaks TLS (1.2 and 1.3; ALPN h2 and http/1.1, docs/tls.md);
                                * default 0. With tls_port set, the TLS listener is that one and `port` stays
                                * cleartext */
  const char *tls_cert_file;   /* with tls: the certificate (PEM), followed by its chain. NULL (default): a test
                                * CA and a leaf for localhost, 127.0.0.1 and ::1 are made in memory at start
                                * (cb_server_tls_ca()) */
  const char *tls_key_file;    /* with tls_cert_file: its private key (PEM) */
  int tls_port;                /* -1 (default): no TLS listener of its own. 0..65535: a TLS listener on this port
                                * beside the cleartext `port` (0 binds an ephemeral one: cb_server_tls_port());
                                * TLS is on then, whether cfg.tls is set or not */
  unsigned tls_max_handshakes; /* TLS handshakes in progress per worker, 1..65535; default 256. A connection
                                * accepted over it is closed at once (cb_stats_t.tls_handshakes_refused) */
  int tls_client_auth;         /* with tls: CB_TLS_CLIENT_AUTH_NONE (default), _REQUEST (a certificate is asked
                                * for and, when sent, verified against the client CA; none is fine) or _REQUIRE
                                * (a handshake without a valid one fails: certificate_required in TLS 1.3).
                                * The client CA is made at start (cb_server_tls_client_ca()) */
  /* Recording (docs/record.md). */
  const char *proxy_to;        /* NULL (default), or "http[s]://HOST:PORT[/prefix]": a catch-all stub (path "/" "*", any
                                * method, priority -1000000, named "proxy_all") proxying there is added at start,
                                * recording each exchange when record_to is set. A URL the proxy refuses: start
                                * fails with UV_EINVAL */
  const char *record_to;       /* NULL (default), or the stub file the admin API's POST /recorded/save writes
                                * (cb_server_save_stubs()); cbench-server also writes it at stop */
  const char *proxy_ca;        /* with an https:// proxy_to: the CA file its certificate is verified against (the
                                * stub's ca_file); NULL: the system's CAs */
  int proxy_insecure;          /* with an https:// proxy_to: 1, its certificate is not verified (insecure) */
  int proxy_protocol;          /* with proxy_to: CB_PROXY_HTTP1 (default) or CB_PROXY_H2C, the catch-all's protocol */
  unsigned proxy_pipeline;     /* with proxy_to: the catch-all's cb_proxy_t.pipeline (0, the default, or 1: one
                                * request at a time; 2..CB_PROXY_MAX_PIPELINE with an http:// proxy_to spoken to
                                * over HTTP/1.1, else start fails with UV_EINVAL) */
  size_t max_queued_reply_bytes; /* a deferred route's streamed answer whose bytes not yet written (the client
                                  * does not read) are this many or more when a CB_REPLY_SEND runs is cut, and
                                  * counted in cb_stats_t.handler_overflows. Default 16777216 (16 MiB) */
} cb_config_t;

/* cfg.tls_client_auth (the option's names: "none", "request", "require"). */
enum { CB_TLS_CLIENT_AUTH_NONE, CB_TLS_CLIENT_AUTH_REQUEST, CB_TLS_CLIENT_AUTH_REQUIRE };

#define CB_JOURNAL_MAX 10000000u
#define CB_JOURNAL_BODY_MAX (64u << 20)

/* Protocols, as indexes into the per-protocol counters. */
typedef enum {
  CB_PROTO_HTTP1,       /* HTTP/1.0 and HTTP/1.1 */
  CB_PROTO_H2C_PRIOR,   /* h2c started with the client preface (prior knowledge) */
  CB_PROTO_H2C_UPGRADE, /* h2c started with Upgrade: h2c */
  CB_PROTO_H1_TLS,      /* HTTP/1.x over TLS (ALPN http/1.1, or no ALPN and no HTTP/2 preface) */
  CB_PROTO_H2_TLS,      /* HTTP/2 over TLS (ALPN h2, or no ALPN and the HTTP/2 preface) */
  CB_PROTO_COUNT
} cb_proto_id;

/* Counters, summed over the workers when read. All are totals since start except conns_open. */
typedef struct cb_stats_s {
  uint64_t conns_accepted;
  uint64_t conns_open;
  uint64_t conns_closed;
  uint64_t requests; /* every request that reached a route or was answered 404/405; by route: cb_server_route_counts() */
  uint64_t conns_by_proto[CB_PROTO_COUNT];    /* a connection upgraded to h2c counts under HTTP1 and UPGRADE */
  uint64_t requests_by_proto[CB_PROTO_COUNT]; /* the upgrade request itself counts under H2C_UPGRADE */
  uint64_t bytes_read;
  uint64_t bytes_written;
  uint64_t status_400;
  uint64_t status_404;
  uint64_t status_405;
  uint64_t status_413;
  uint64_t status_431;
  uint64_t timeouts;       /* connections closed by the header or idle timeout */
  uint64_t resets;         /* connections reset or closed by the peer with a request or response unfinished */
  uint64_t h2_errors;      /* HTTP/2 connection errors (GOAWAY sent with an error) and streams reset by us */
  uint64_t h2_parked;      /* idle HTTP/2 sessions given back until their client speaks again (docs/tls.md) */
  uint64_t h2_woken;       /* parked sessions made again: their client spoke, or a timeout or a stop */
  uint64_t accept_backoffs; /* times accept(2) ran out of descriptors (EMFILE/ENFILE) and backed off */
  uint64_t faults;         /* requests answered with a fault (docs/faults.md); not counted in resets */
  uint64_t handler_unavailable; /* deferred requests answered 503: no target, or it went away (or reset) */
  uint64_t handler_timeouts;    /* deferred requests answered 504 (or reset mid-stream) after timeout_ms */
  uint64_t handler_overflows;   /* deferred streamed answers cut: cfg.max_queued_reply_bytes were waiting for a
                                 * client that did not read */
  uint64_t tls_handshakes_failed;  /* TLS connections that closed before their handshake completed: an error, the
                                    * peer's close, the header timeout (which bounds a handshake) */
  uint64_t tls_handshakes_refused; /* TLS connections closed at accept: cfg.tls_max_handshakes were in progress */
  uint64_t tls_ktls;               /* TLS connections whose records went to the kernel after the handshake (kernel
                                    * TLS: cb_server_ktls()) */
  uint64_t tls_handshakes_full;    /* TLS handshakes completed with a new session */
  uint64_t tls_handshakes_resumed; /* TLS handshakes completed by resuming a session (a ticket or the cache) */
  /* Proxy routes (cb_response_t.proxy, docs/proxy.md) */
  uint64_t proxy_requests;          /* requests a proxy route forwarded (or tried to) */
  uint64_t proxy_upstream_connects; /* upstream connections opened (connect attempts) */
  uint64_t proxy_upstream_reused;   /* requests sent on a kept-alive upstream connection */
  uint64_t proxy_502;               /* proxied requests answered 502: refused, reset, a bad or too big answer */
  uint64_t proxy_504;               /* proxied requests answered 504: no answer head within timeout_ms */
  uint64_t recorded;            /* recordings kept now (docs/record.md; cb_server_recorded_clear() empties them) */
  uint64_t recorded_duplicates; /* exchanges recorded again with the match of a recording kept: counted, not kept */
  uint64_t record_skipped;      /* exchanges a stub cannot replay (a path with '*' or '{', a status outside
                                 * 200..599, bytes a JSON stub file cannot hold in a header or the query...) */
} cb_stats_t;

typedef struct cb_server_s cb_server_t;

/* Fills *cfg with the defaults listed in cb_config_t (they come from the option table below). */
CB_EXTERN void cb_config_init(cb_config_t *cfg);

/* ---- The option schema ----
 *
 * One table, in src/options.c, holds every option's name, type, bounds, default and one-line doc. It is the
 * source of cb_config_init()'s defaults and of cb_server_start()'s checks, and cbench-server (its flags and
 * their error messages), the NIF and the port program (which decode options by walking it) and the Erlang API
 * (erl/cbench_schema.erl, generated from it) all read it, so a new option is one row there. */

typedef enum {
  CB_OPT_UINT,   /* an integer field (int, unsigned or size_t) within [min, max] */
  CB_OPT_BOOL,   /* an int field, 0 or 1 */
  CB_OPT_HOST,   /* const char *: an IPv4 or IPv6 literal or a host name (resolved at start); max = longest */
  CB_OPT_STRING, /* const char *, NULL allowed; max = longest length */
  CB_OPT_CPUS,   /* the cpus / ncpus pair: at most CB_MAX_THREADS CPU numbers, each within [min, max] */
  CB_OPT_ENUM    /* an int field, the index of one of `names` (min 0, max the last index): a name in the CLI,
                  * an atom in Erlang */
} cb_opt_type;

/* cb_option_t.flags */
#define CB_OPT_F_C_ONLY 1u      /* not an option of the Erlang API (fixture_dir) */
#define CB_OPT_F_EHTTPD_ONLY 2u /* an option of the Erlang ehttpd engine only, no field of cb_config_t */
#define CB_OPT_F_C_ENGINES 4u   /* an option of the C engine only: the Erlang API takes it for nif and port,
                                 * the ehttpd engine refuses it (admin, admin_port) */
#define CB_OPT_F_UNSET 8u       /* a UINT option that may be unset, and is by default (tls_port): -1 in its int
                                 * field, `undefined' in the Erlang API, its flag not given to cbench-server */

typedef struct cb_option_s {
  const char *name;    /* the cb_config_t field and the Erlang option key ("max_header_bytes") */
  const char *erl_key; /* the Erlang key when it differs from name ("ip" for host), else NULL */
  const char *flag;    /* cbench-server's flag ("--max-header-bytes"), or NULL. A BOOL flag takes no value and
                        * sets the opposite of the default ("--no-h2") */
  cb_opt_type type;
  uint64_t min, max;   /* inclusive bounds: of the value (UINT), of each CPU (CPUS), 0 and the longest length
                        * (HOST, STRING) */
  uint64_t def;        /* the default of a UINT or BOOL */
  const char *def_str; /* the default of a HOST or STRING (NULL: none) */
  const char *doc;     /* one line for usage texts and docs */
  int err;             /* what cb_server_start() returns when this option is out of range */
  unsigned flags;      /* CB_OPT_F_* */
  size_t offset;       /* where the field lies in cb_config_t (CPUS: cpus; ncpus follows it) */
  size_t size;         /* its size (sizeof int, unsigned or size_t) */
  const char *const *names; /* ENUM: the value names, index = value, NULL-terminated; else NULL */
} cb_option_t;

/* The option table and its length (*count, when count is not NULL). Static, never freed, any thread. */
CB_EXTERN const cb_option_t *cb_config_options(int *count);

/* The row named `name` (or whose erl_key is `name`), or NULL. */
CB_EXTERN const cb_option_t *cb_config_option(const char *name);

/* Sets a UINT or BOOL option of *cfg after checking it against the table's bounds.
 * Errors: the option's err (CB_ELIMIT, CB_ETHREADS, UV_EINVAL) when out of range; UV_EINVAL for another type. */
CB_EXTERN int cb_config_set_uint(cb_config_t *cfg, const cb_option_t *opt, uint64_t value);

/* The value of a UINT or BOOL option of *cfg (0 for other types). */
CB_EXTERN uint64_t cb_config_get_uint(const cb_config_t *cfg, const cb_option_t *opt);

/* Checks *cfg against the table, as cb_server_start() does. Returns 0, or the first bad option's err with
 * *bad (when bad is not NULL) set to its row. A host name is checked for length here, resolved at start. */
CB_EXTERN int cb_config_check(const cb_config_t *cfg, const cb_option_t **bad);

/* The CPUs this process may run on (sched_getaffinity), ascending, at most max of them into out.
 * Returns how many there are in all (which may exceed max), or a negative UV_E* error. */
CB_EXTERN int cb_cpus_allowed(int *out, int max);

/* Starts a server: writes the fixture files, starts the worker threads, and returns once every worker listens
 * and is pinned (or the first error, with every thread joined and every resource freed).
 * On success *out is the server, owned by the caller until cb_server_stop().
 * cfg->host is an address literal or a host name: a name is resolved with getaddrinfo(3) and its first IPv4
 * address is bound (its first IPv6 one when it has no IPv4 address).
 * Errors: an option out of the table's range: that option's err (cb_config_check() says which);
 * CB_ETHREADS also when a worker could not be pinned to its CPU (a CPU that is offline or outside this
 * process's allowed set: see cb_cpus_allowed()); CB_EAI_NONAME (= UV_EAI_NONAME: a host name that does not resolve),
 * UV_EINVAL (NULL argument), CB_EFIXTURE, UV_EADDRINUSE, UV_EACCES, UV_ENOMEM, and any error of socket(2),
 * bind(2), listen(2) or pthread_create(3) as a UV_E* code. Blocks for the handshake (milliseconds). */
CB_EXTERN int cb_server_start(const cb_config_t *cfg, cb_server_t **out);

/* The TCP port every worker listens on (the bound port when cfg.port was 0). */
CB_EXTERN int cb_server_port(const cb_server_t *srv);

/* The TCP port of the admin API (the bound one when cfg.admin_port was 0), or 0 when cfg.admin is 0. */
CB_EXTERN int cb_server_admin_port(const cb_server_t *srv);
/* The test CA of a TLS server (cfg.tls without tls_cert_file) as PEM, NUL-terminated in pem[0..cap): its length,
 * UV_ENOBUFS when cap is too small (4096 is enough), UV_ENOENT when the server made no CA (no TLS, or the user's
 * certificate). A client that trusts it verifies the server as localhost, 127.0.0.1 or ::1. */
CB_EXTERN int cb_server_tls_ca(const cb_server_t *srv, char *pem, size_t cap);

/* The TCP port of the server's TLS listener: cfg.tls_port's (the bound one when it was 0), or cb_server_port()
 * when the main listener speaks TLS (cfg.tls without tls_port); 0 when the server has no TLS. UV_EINVAL for NULL. */
CB_EXTERN int cb_server_tls_port(const cb_server_t *srv);

/* Whether the server's TLS connections hand their records to the kernel after the handshake (kernel TLS): 1 when
 * it tries (the kernel offers the `tls` ULP; a connection whose cipher the kernel refuses still stays with
 * OpenSSL, and cb_stats_t.tls_ktls counts those that went), 0 when it does not, with the reason in why (why_size
 * bytes, NUL-terminated; why may be NULL): no TLS, or the kernel offers no `tls` ULP (`modprobe tls`, docs/tls.md).
 * UV_EINVAL for NULL srv. */
CB_EXTERN int cb_server_ktls(const cb_server_t *srv, char *why, size_t why_size);

/* The client CA of a TLS server (made at start, even with the user's certificate files) as PEM, NUL-terminated in
 * pem[0..cap): its length, UV_ENOBUFS when cap is too small (4096 is enough), UV_ENOENT without TLS. With
 * cfg.tls_client_auth, the server verifies client certificates against it. Any thread. */
CB_EXTERN int cb_server_tls_client_ca(const cb_server_t *srv, char *pem, size_t cap);

/* Issues a client certificate signed by the server's client CA: common name cn (1 to 64 bytes of UTF-8, no
 * control characters), ECDSA P-256, extendedKeyUsage clientAuth, valid from an hour ago for a week. The
 * certificate and its unencrypted key (PKCS#8) as PEM, NUL-terminated, in cert_pem[0..cert_cap) and
 * key_pem[0..key_cap) (4096 bytes each are enough). Returns 0, UV_EINVAL (NULL, or a cn out of bounds),
 * UV_ENOBUFS, UV_ENOENT without TLS, UV_ENOMEM. Each call makes a new key. Any thread. */
CB_EXTERN int cb_server_tls_client_cert(const cb_server_t *srv, const char *cn, char *cert_pem, size_t cert_cap,
                                        char *key_pem, size_t key_cap);

/* How the server names a client certificate (the journal's client_cert): the first certificate of cert_pem
 * (len bytes of PEM)'s subject, RFC 2253 style ("CN=alice", characters beyond ASCII kept as UTF-8),
 * NUL-terminated in subject[0..subject_cap), and its SHA-256 fingerprint over the DER, 64 lowercase hex digits
 * and a NUL in sha256. Returns the subject's length, UV_EINVAL (no certificate in the PEM), UV_ENOBUFS. */
CB_EXTERN int cb_tls_cert_identity(const char *cert_pem, size_t len, char *subject, size_t subject_cap,
                                   char sha256[65]);

/* The number of worker threads. */
CB_EXTERN int cb_server_threads(const cb_server_t *srv);

/* The CPU worker `i` is pinned to, as the kernel reports it (pthread_getaffinity_np() after pinning), or -1 when
 * it is not pinned or `i` is out of range. */
CB_EXTERN int cb_server_worker_cpu(const cb_server_t *srv, int i);

/* Sums the workers' counters into *out. Lock-free: counters are read while the workers run, so the sum is a
 * consistent total per counter, not a snapshot across counters. Errors: UV_EINVAL (NULL argument). */
CB_EXTERN int cb_server_stats(const cb_server_t *srv, cb_stats_t *out);

/* Stops the server gracefully and frees it: stops accepting, closes idle connections, lets in-flight responses
 * finish for at most cfg.stop_timeout_ms (HTTP/2 connections get GOAWAY), then closes everything, joins the
 * threads. Blocks until done. `srv` is invalid afterwards.
 * Returns 0, or UV_EINVAL for NULL. Must not be called from a worker thread. */
CB_EXTERN int cb_server_stop(cb_server_t *srv);

/* cb_server_stop(), and when `final` is not NULL, fills it with the counters as they stand once every worker
 * has stopped: requests finished while draining, their bytes and the closed connections included (stats read
 * before a stop miss them). Returns 0, or UV_EINVAL for a NULL srv. Must not be called from a worker thread. */
CB_EXTERN int cb_server_stop_stats(cb_server_t *srv, cb_stats_t *final);
/* ==== Routes as data: stubs ====
 *
 * Every server answers from one route table. The fixture routes of the README are its default entries; stubs
 * added at run time come before them. A route is a match (methods, path pattern, header and query matchers,
 * priority) and an answer. Matching, for each request, in this order: routes with a higher `priority` first,
 * among equal priorities the newest first, the fixture routes last; the first route whose path, headers, query
 * and method all match answers (a stub whose `times` are used up is skipped). When none matches: 405 with an
 * `allow` header when some route's path, headers and query matched but not its method (allow lists the union of
 * those routes' methods in the order GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, CONNECT, TRACE), otherwise
 * 404. A route that allows GET answers HEAD too (headers only).
 *
 * Tables are immutable values, read by the workers without a lock. The calls below return once every worker
 * will dispatch its next request under a table with the change, so a request sent after cb_server_route_add()
 * returns sees the new stub. The table itself is built once per burst of changes: a change hands every worker
 * a stand-in, and the first request dispatched under it builds the table from every change made so far (once,
 * for all workers), so N adds in a row cost O(N log N) in all, not N tables; cb_server_route_add_many builds
 * its table at once, before it returns. If that build runs out of memory, the workers keep the table they had
 * until the next change. A request that began under an old table is answered from it, and the old table (with
 * the stub bytes its responses reference) is freed once no worker and no queued response uses it.
 *
 * Threads: these functions may be called from any thread except an engine worker (from a worker, for example
 * inside a journal listener, they return UV_EBUSY); calls on one server are serialised. They block until every
 * worker has run the command (normally microseconds; at most as long as a worker's current loop iteration). */

/* Bytes with a length. Strings in this API are never required to be NUL-terminated. An absent value is
 * {NULL, 0}; an empty one is {"", 0}. */
typedef struct cb_str_s {
  const char *ptr;
  size_t len;
} cb_str_t;

/* A cb_str_t for a string literal: CB_S("/hello"). */
#define CB_S(lit) ((cb_str_t){(lit), sizeof(lit) - 1})

/* Methods a route matches, as bits of cb_match_t.methods. 0 matches every method. Methods other than these nine
 * are answered 501 before any route is looked at (docs/wire.md). */
enum {
  CB_METHOD_GET = 1 << 0, /* GET implies HEAD */
  CB_METHOD_HEAD = 1 << 1,
  CB_METHOD_POST = 1 << 2,
  CB_METHOD_PUT = 1 << 3,
  CB_METHOD_DELETE = 1 << 4,
  CB_METHOD_PATCH = 1 << 5,
  CB_METHOD_OPTIONS = 1 << 6,
  CB_METHOD_CONNECT = 1 << 7,
  CB_METHOD_TRACE = 1 << 8,
  CB_METHOD_ALL = (1 << 9) - 1
};

/* The bit of a method name ("GET" -> CB_METHOD_GET; case-sensitive, as methods are), or 0 for another name. */
CB_EXTERN unsigned cb_method_bit(cb_str_t name);

/* A header or query-parameter matcher. name: a header name (a token, compared without case) or a query parameter
 * name (compared after percent-decoding, '+' as space), 1 to 256 bytes. value: at most 8192 bytes (a header
 * value: no control byte but HTAB, no space or tab at either end); {NULL, 0} matches when the header or parameter is
 * present (with any value); otherwise it must equal `value` exactly (query values percent-decoded first). A
 * repeated header or parameter matches when any of its occurrences does. */
typedef struct cb_matcher_s {
  cb_str_t name;
  cb_str_t value;
} cb_matcher_t;

/* What a route asks of the request body (cb_match_t.body). The body is matched once it is complete; a request
 * whose candidate routes include one with a body matcher has its body held (up to the body limit) until then,
 * and goes on to the next route when the matcher fails (docs/routes.md, "Body matchers").
 *   ANY          no matcher (the default: the route never waits for the body);
 *   EQUAL        the body is exactly `value`;
 *   CONTAINS     the body holds `value` somewhere (an empty value: every body);
 *   JSON         the body is JSON equal to `value` (JSON text): object key order ignored, numbers compared by
 *                type and value (1 is not 1.0), as jansson's json_equal;
 *   JSON_SUBSET  the body is JSON holding `value`: an object holds every member of the pattern's (extra members
 *                allowed), recursively; an array has the pattern's length and each element holds the pattern's
 *                at its place; other values are equal;
 *   REGEX        `value` is a POSIX extended regular expression (regcomp(3), REG_EXTENDED | REG_NOSUB) in the
 *                subset both engines read alike (docs/routes.md), searched for anywhere in the body.
 * value: at most CB_MAX_BODY_MATCH bytes (a regex at most 1024); the bytes are copied or compiled when the route
 * is added. */
typedef enum {
  CB_MATCH_BODY_ANY = 0,
  CB_MATCH_BODY_EQUAL,
  CB_MATCH_BODY_CONTAINS,
  CB_MATCH_BODY_JSON,
  CB_MATCH_BODY_JSON_SUBSET,
  CB_MATCH_BODY_REGEX
} cb_match_body_kind;

#define CB_MAX_BODY_MATCH (1u << 20)
#define CB_MAX_BODY_REGEX 1024

typedef struct cb_body_match_s {
  int kind; /* cb_match_body_kind */
  cb_str_t value;
} cb_body_match_t;

/* Which requests a route answers.
 * path is a pattern over the request path (the target before '?', compared as received, not decoded):
 *   "/hello"           exactly this path;
 *   "/files/" "*"      (one string, split here because a C comment cannot hold slash-star): every path that
 *                      starts with "/files/"; a '*' after the last '/' makes a prefix of what precedes it;
 *   "/users/{id}/x"    segment by segment, where "{name}" matches one non-empty segment (no '/') and names a
 *                      path parameter (at most CB_MAX_PATH_PARAMS per pattern; a segment is a parameter or
 *                      literal text, not both; a name is 1 or more of A-Z, a-z, 0-9 and '_').
 * It must start with '/', may hold no space, control character, '?', '#' or non-ASCII byte (none can appear in a
 * request path), and is at most CB_MAX_PATH bytes. A prefix has no parameter. */
typedef struct cb_match_s {
  unsigned methods; /* CB_METHOD_* bits; 0: any method */
  cb_str_t path;
  const cb_matcher_t *headers; /* all must match; at most CB_MAX_MATCHERS */
  size_t nheaders;
  const cb_matcher_t *query; /* all must match; at most CB_MAX_MATCHERS */
  size_t nquery;
  int priority; /* higher first; default 0. Fixture routes come after every stub whatever its priority */
  cb_body_match_t body; /* {CB_MATCH_BODY_ANY}: any body */
} cb_match_t;

#define CB_MAX_PATH 4096
#define CB_MAX_PATH_PARAMS 8
#define CB_MAX_MATCHERS 32
#define CB_MAX_HEADERS 64 /* response headers of a stub */
#define CB_MAX_NAME 128   /* bytes of a route name */

/* A response header: name (an RFC 9110 token of at most 256 bytes, sent lowercased) and value (at most 8192 bytes,
 * no control byte but HTAB, no space or tab at either end). All names and values together: at most 65536 bytes. */
typedef struct cb_header_s {
  cb_str_t name;
  cb_str_t value;
} cb_header_t;

/* How a stub's delay is drawn (cb_response_t.delay_dist). */
typedef enum { CB_DELAY_FIXED, CB_DELAY_UNIFORM, CB_DELAY_LOGNORMAL } cb_delay_dist;

/* How a stub's body is given. */
typedef enum {
  CB_BODY_BYTES,     /* body: the bytes, copied by cb_server_route_add (may be empty) */
  CB_BODY_GENERATED, /* body_size bytes of fixture content: byte i is i % 251, like the fixture files */
  CB_BODY_FILE       /* body: a file path, opened at add time, its size taken then. A regular file only (a
                      * FIFO or a device: UV_EINVAL, a directory: UV_EISDIR, without opening it, so the call never
                      * blocks), at most CB_MAX_BODY_FILE bytes (UV_EFBIG). Up to 1 MiB it is read into
                      * memory then (served like bytes); a bigger one is sent with sendfile(2) from the open
                      * file, never mapped: if it shrinks later, the responses that reach past its end are cut
                      * short (their connections closed) instead of faulting */
} cb_body_kind;
#define CB_MAX_BODY_FILE (1ull << 40) /* 1 TiB: bytes of a CB_BODY_FILE body */

/* A proxy response (cb_response_t.proxy, docs/proxy.md): the request is forwarded to an upstream server over
 * HTTP/1.1 or h2c (prior knowledge), in TLS for an https:// upstream (HTTP/1.1 only), and its answer streamed back. */
enum { CB_PROXY_HTTP1 = 0, CB_PROXY_H2C = 1 };
#define CB_PROXY_MAX_TIMEOUT_MS 3600000u
#define CB_PROXY_DEFAULT_TIMEOUT_MS 10000u
#define CB_PROXY_DEFAULT_MAX_BODY (1ull << 30)
#define CB_PROXY_MAX_PIPELINE 64u
typedef struct cb_proxy_s {
  cb_str_t to;                 /* "http://HOST:PORT" or "http://HOST:PORT/prefix" (the prefix is put before every
                                * forwarded target); HOST an IP literal ([::1] for IPv6) or a name, resolved when
                                * the stub is added. At most 1024 bytes. "https://HOST[:PORT][/prefix]" (port 443
                                * by default): the upstream is spoken to in TLS (the four fields at the end) */
  int protocol;                /* CB_PROXY_HTTP1 or CB_PROXY_H2C (cleartext HTTP/2 with prior knowledge) */
  unsigned timeout_ms;         /* upstream connect plus the wait for its answer's head, and the longest pause
                                * between two reads of its body; past it: 504 (or the answer is cut).
                                * 0: CB_PROXY_DEFAULT_TIMEOUT_MS; at most CB_PROXY_MAX_TIMEOUT_MS */
  uint64_t max_body_bytes;     /* the upstream answer's body limit; 0: CB_PROXY_DEFAULT_MAX_BODY */
  int record;                  /* 1: each complete exchange is recorded (cb__record_exchange, issue 26 part 3) */
  const cb_str_t *record_headers; /* request header names that make a recording distinct (at most 32) */
  size_t nrecord_headers;
  uint64_t record_body_file_bytes; /* bodies above this size are saved as files; 0: never */
  const int *record_status;    /* statuses to record (at most 64); none: every status */
  size_t nrecord_status;
  /* https:// upstreams only (with http:// each is refused as CB_WHY_CONFLICT). The CAs the upstream's certificate
   * is verified against: ca_pem (PEM text) or ca_file (a PEM file's path), at most one, at least one certificate
   * (else CB_WHY_BAD_CA); neither: the system's default CAs. */
  cb_str_t ca_file;
  cb_str_t ca_pem;
  int insecure;                /* 1: the upstream's certificate is not verified */
  cb_str_t server_name;        /* SNI and the name verified; empty: the host of `to` (an IP literal: no SNI, and
                                * the certificate's IP entries verified). At most 253 bytes of A-Z a-z 0-9 . - : */
  unsigned pipeline;           /* cleartext HTTP/1.1 upstreams: the most requests in flight on one upstream
                                * connection (RFC 9112 9.3.2). 0 or 1: one at a time, the default; above 1, GET
                                * and HEAD requests without a body are pipelined, and a worker's requests of one
                                * loop turn leave in one write (docs/proxy.md, "Pipelining"). At most
                                * CB_PROXY_MAX_PIPELINE; above 1 with protocol h2c or an https:// upstream:
                                * CB_WHY_CONFLICT */
} cb_proxy_t;

/* What a stub answers. Every response also gets `date` (first) and the framing header the engine chooses:
 * content-length, or transfer-encoding: chunked over HTTP/1.1 when chunks > 0. */
typedef struct cb_response_s {
  int status;                 /* 200..599; 204 and 304 must have an empty body */
  const cb_header_t *headers; /* sent in this order after date, repeated names allowed; not content-length,
                               * transfer-encoding, connection, keep-alive, upgrade, te, proxy-connection or date
                               * (the engine writes those). At most CB_MAX_HEADERS */
  size_t nheaders;
  cb_body_kind body_kind;
  cb_str_t body;      /* CB_BODY_BYTES: the bytes; CB_BODY_FILE: the path */
  uint64_t body_size; /* CB_BODY_GENERATED: the length */
  unsigned delay_ms;  /* wait this long (from the end of the request) before the head; 0..3600000 */
  unsigned chunks;    /* 0: the body in one piece with content-length. N > 0: the body as N pieces of nearly
                       * equal size (N <= body length unless the body is empty and N is 1), streamed: one chunk
                       * each over HTTP/1.1, one or more DATA frames each over h2c (a frame never spans two
                       * pieces), each piece after `interval_ms` from the previous one */
  unsigned interval_ms; /* 0..3600000 */
  uint64_t times;       /* 0: answer forever. N: answer N times, then the stub is spent and matching goes on
                         * past it as if it were not there (counted across workers with one atomic per hit) */
  cb_str_t fault;       /* {NULL, 0}: none. A fault spec, "KIND" or "KIND?name=value&..." as after /fault/ in
                         * docs/faults.md ("reset?at=head", "truncated?length=100&bytes=10&rate=0.01&seed=7"):
                         * the stub answers with the fault (with probability rate, else normally). A fault
                         * that sends a head sends the stub's status and headers */
  /* A drawn delay instead of the fixed delay_ms (docs/routes.md, "Delay distributions"): FIXED (the default)
   * waits delay_ms; UNIFORM draws from [delay_ms, delay_max_ms]; LOGNORMAL around the median delay_ms with
   * delay_sigma (0 < sigma <= 10), cut at 3600000. The n-th answer of this response (n from 0, counted over
   * every worker) gets the n-th draw seeded by delay_seed: the same draws in every run. Journaled as
   * cb_request_t.delay_ms. */
  cb_delay_dist delay_dist;
  unsigned delay_max_ms; /* UNIFORM: the upper end, delay_ms..3600000 */
  double delay_sigma;    /* LOGNORMAL */
  uint64_t delay_seed;
  /* 1: the body (CB_BODY_BYTES) and the header values are templates (docs/routes.md, "Templates"): {{method}},
   * {{body}}, {{seq}} (this response's answers, from 1), {{path.NAME}} (a parameter of match.path),
   * {{query.NAME}} (decoded), {{header.NAME}}, each replaced by the request's value, escaped nowhere, a missing
   * one empty. Compiled when the stub is added: an unknown or unclosed placeholder is UV_EINVAL
   * (CB_WHY_BAD_TEMPLATE); with chunks, a fault or a body that is not bytes, CB_WHY_CONFLICT. 0: the bytes are
   * sent as they are, "{{" and all. */
  int templated;
  /* Non-NULL: the stub forwards the request (docs/proxy.md) instead of answering it itself; status, headers,
   * body, chunks, interval_ms and templated must then be left at zero (CB_WHY_CONFLICT otherwise; status 0 is
   * taken as unset), while delay_ms and fault act on the proxied answer. Not in a sequence's responses. Copied
   * by cb_server_route_add. */
  const cb_proxy_t *proxy;
} cb_response_t;

/* What a sequence answers once each of its responses was given (cb_stub_t.after). */
typedef enum {
  CB_AFTER_LAST,     /* the last response, again and again (the default) */
  CB_AFTER_CYCLE,    /* from the first again */
  CB_AFTER_NOT_FOUND /* nothing: the stub is spent, matching goes on past it as if it were not there */
} cb_after;

#define CB_MAX_RESPONSES 1000 /* responses of one sequence */
#define CB_SCENARIO_STARTED "started" /* every scenario's state until a stub or the API moves it */

/* A stub: a named match plus a response. */
typedef struct cb_stub_s {
  cb_str_t name; /* {NULL, 0}: "stub_<id>". 1..CB_MAX_NAME printable ASCII bytes, no space. Names need not be
                  * unique: counts by name (cb_server_route_counts) add up the routes of one name */
  cb_match_t match;
  cb_response_t response;
  /* A sequence (nresponses > 0): the stub answers responses[0], responses[1], ... in turn (one atomic increment
   * per answer, over all workers), then as `after` says. response is then not used, but for response.times,
   * which still bounds the answers in all. At most CB_MAX_RESPONSES. */
  const cb_response_t *responses;
  size_t nresponses;
  cb_after after;
  /* A scenario (docs/routes.md, "Scenarios"): with scenario set, the stub matches only while that scenario's
   * state is `when` ({NULL, 0}: in any state), and when `then` is set its answer moves the state there with one
   * compare-and-swap (so two requests racing for one transition cannot both take it: the loser passes the stub
   * over). Names and states: 1..CB_MAX_NAME printable ASCII bytes, no space. when or then without scenario:
   * UV_EINVAL (CB_WHY_NEEDS_SCENARIO). */
  cb_str_t scenario, when, then;
} cb_stub_t;

/* Adds a stub in front of the table. The library copies everything it needs (strings, header lists, body
 * bytes; a CB_BODY_FILE is opened, and read when small) before returning: `stub` and everything it points to may be
 * freed at once. On success *id is the stub's id: unique for the server's life, starting at 1.
 * Errors: UV_EINVAL (a bad field: see the limits above; cb_error_detail() says which and why; a body file that
 * is not a regular file is CB_WHY_NOT_REGULAR), CB_ELIMIT (more than CB_MAX_ROUTES routes live), the error of
 * stat(2), open(2) or read(2) for a body file (UV_ENOENT, UV_EACCES, UV_EISDIR...; UV_EFBIG above
 * CB_MAX_BODY_FILE), UV_ENOMEM,
 * UV_EBUSY (called from a worker thread). */
CB_EXTERN int cb_server_route_add(cb_server_t *srv, const cb_stub_t *stub, uint64_t *id);

/* Adds n stubs at once, as if by n calls of cb_server_route_add in array order (so stubs[n - 1] is the newest and
 * gets the highest id), but all or nothing and with one new table: adding N stubs this way costs O(N log N) in
 * all, where N separate calls each rebuild the table. On success ids[i] is the id of stubs[i]. On failure
 * nothing was added (some ids may have been used up: ids are never reused) and, when the fault is one stub's,
 * *failed is its index (otherwise n); failed may be NULL. Errors: those of cb_server_route_add (CB_ELIMIT
 * when the table would hold more than CB_MAX_ROUTES stubs), UV_EINVAL for a NULL stubs or ids with n > 0. n = 0
 * does nothing and returns 0. */
CB_EXTERN int cb_server_route_add_many(cb_server_t *srv, const cb_stub_t *stubs, size_t n, uint64_t *ids,
                                       size_t *failed);

#define CB_MAX_ROUTES 100000

/* Adds the stubs of a JSON stub file (the format of cbench-server --stubs: docs/routes.md) in one
 * cb_server_route_add_many call. Returns the number added, or UV_EINVAL with msg (msgcap bytes, NUL-terminated)
 * saying why: "FILE:LINE: FIELD: WHY: what", or the file's open(2) or read error; then nothing was added. A
 * stub's "expect" is kept for the admin API's POST /verify. A FIFO is read as a file (its open waits for a
 * writer). Not from a worker thread (UV_EBUSY). */
CB_EXTERN int cb_server_stubs_file(cb_server_t *srv, const char *path, char *msg, size_t msgcap);

/* ==== Why a stub was refused: the error detail ====
 *
 * cb_server_route_add() and cb_server_deferred_add() return UV_EINVAL for a bad field; cb_error_detail() then says
 * which field, which value and why, from the fixed lists below. The Erlang API reports the same three things as
 * {error, {bad_stub, {Field, Value, Why}}} with Why the lowercase name (docs/erlang.md), and cbench-server --stubs
 * prints them (docs/routes.md): one list of reasons for every way in.
 *
 * Threads and lifetime: the detail is per thread (thread-local, like errno). Each call of cb_server_route_add()
 * or cb_server_deferred_add() clears it first and fills it when it refuses a field; it stays until the next of
 * those calls on the same thread. detail->value points into the stub given to the call (valid while that
 * memory is); detail->text is a copy, safe to keep. Every other failure (a body file open(2) refused, UV_ENOMEM,
 * CB_ELIMIT, a NULL srv or stub) leaves it empty: err 0 and CB_FIELD_NONE. */

/* Which field: the member of cb_stub_t (or cb_deferred_t). The Erlang name is in parentheses. */
typedef enum {
  CB_FIELD_NONE = 0,      /* no detail: the last call did not refuse a field */
  CB_FIELD_NAME,          /* name ({match, name}) */
  CB_FIELD_METHODS,       /* match.methods ({match, method}) */
  CB_FIELD_PATH,          /* match.path ({match, path}) */
  CB_FIELD_MATCH_HEADERS, /* match.headers, index: which matcher ({match, headers} or {match, headers, Name}) */
  CB_FIELD_MATCH_QUERY,   /* match.query, index: which matcher ({match, query} or {match, query, Name}) */
  CB_FIELD_STATUS,        /* response.status ({response, status}) */
  CB_FIELD_HEADERS,       /* response.headers, index: which header ({response, headers} or {response, headers, Name}) */
  CB_FIELD_BODY,          /* response.body, body_kind or body_size ({response, body}) */
  CB_FIELD_DELAY_MS,      /* response.delay_ms ({response, delay_ms}) */
  CB_FIELD_CHUNKS,        /* response.chunks ({response, chunks}) */
  CB_FIELD_INTERVAL_MS,   /* response.interval_ms ({response, chunks}) */
  CB_FIELD_FAULT,         /* response.fault ({response, fault}) */
  CB_FIELD_TIMEOUT_MS,    /* cb_deferred_t.timeout_ms ({handler, timeout_ms}) */
  CB_FIELD_DELIVER,       /* cb_deferred_t.deliver */
  CB_FIELD_RESPONSES,     /* responses, nresponses ({response, responses}) */
  CB_FIELD_AFTER,         /* after ({response, after}) */
  CB_FIELD_SCENARIO,      /* scenario ({match, scenario}) */
  CB_FIELD_WHEN,          /* when ({match, 'when'}) */
  CB_FIELD_THEN,          /* then ({match, then}) */
  CB_FIELD_DELAY,         /* response.delay_dist, delay_max_ms, delay_sigma ({response, delay}) */
  CB_FIELD_TEMPLATE,      /* response.templated ({response, template}) */
  CB_FIELD_MATCH_BODY,    /* match.body ({match, body}) */
  CB_FIELD_PROXY,         /* response.proxy, index: -1, or which of record_headers / record_status
                           * ({response, proxy} or {response, proxy, Key}) */
  CB_FIELD_COUNT
} cb_field_id;

/* Why it was refused. The Erlang atom is the lowercase name without CB_WHY_ (CB_WHY_NOT_A_TOKEN: not_a_token);
 * test/cbench_stub_SUITE.erl checks that this list and cbench_spec:whys() agree. */
typedef enum {
  CB_WHY_NONE = 0,
  CB_WHY_UNKNOWN_KEY,        /* a key the term does not take (Erlang maps and JSON objects only) */
  CB_WHY_MISSING,            /* a required field is absent (a path) */
  CB_WHY_WRONG_TYPE,         /* a value of the wrong type: not an integer, not a string, not a list... */
  CB_WHY_NULL_POINTER,       /* C only: a NULL pointer with a non-zero length or count */
  CB_WHY_OUT_OF_RANGE,       /* a number outside its bounds (status 200..599, delay_ms 0..3600000, ...) */
  CB_WHY_EMPTY,              /* an empty string or list where one is needed (a name, a header name, a path) */
  CB_WHY_TOO_LONG,           /* longer than its limit: a path (4096), a name (128), a matcher or header name
                              * (256), a value (8192), a body, the response headers together (65536) */
  CB_WHY_TOO_MANY,           /* a list over its limit: 32 matchers, 64 headers, 16 methods */
  CB_WHY_NOT_A_TOKEN,        /* a header name that is not an RFC 9110 token */
  CB_WHY_CONTROL_CHAR,       /* a value holding CR, LF, NUL or another control byte (HTAB is allowed) */
  CB_WHY_EDGE_SPACE,         /* a header value that begins or ends with a space or tab (RFC 9113 8.2.1) */
  CB_WHY_BAD_CHAR,           /* a path or name byte that cannot be there: space, control, '?', '#', non-ASCII */
  CB_WHY_NO_LEADING_SLASH,   /* a path that does not start with '/' */
  CB_WHY_MISPLACED_STAR,     /* a '*' anywhere but the last byte, right after a '/' */
  CB_WHY_STAR_WITH_PARAM,    /* a prefix path ('*') that also has a {param} */
  CB_WHY_UNCLOSED_BRACE,     /* a path segment with '{' and no '}' */
  CB_WHY_STRAY_BRACE,        /* a path segment with '}' and no '{' */
  CB_WHY_PARAM_NOT_SEGMENT,  /* "{name}" that is not the whole segment ("/a/x{id}") */
  CB_WHY_EMPTY_PARAM_NAME,   /* "{}" */
  CB_WHY_BAD_PARAM_NAME,     /* a parameter name with a byte other than A-Z, a-z, 0-9 and '_' */
  CB_WHY_TOO_MANY_PARAMS,    /* more than CB_MAX_PATH_PARAMS parameters */
  CB_WHY_UNKNOWN_METHOD,     /* a method that is not one of the nine (or a bit outside CB_METHOD_ALL) */
  CB_WHY_FORBIDDEN_HEADER,   /* a response header the engine writes itself (content-length, date, ...) */
  CB_WHY_BODY_NOT_ALLOWED,   /* status 204 or 304 with a body or chunks */
  CB_WHY_CHUNKS_EXCEED_BODY, /* more chunks than body bytes */
  CB_WHY_BAD_FAULT,          /* a fault spec that does not parse (docs/faults.md) */
  CB_WHY_NOT_REGULAR,        /* a body file that is not a regular file (a directory is UV_EISDIR) */
  CB_WHY_FAULT_EXCEEDS_BODY, /* a pacing fault that cannot pace the stub's body: a drip over 100,000 bytes, a
                              * dribble in more pieces than the body has bytes (docs/faults.md) */
  CB_WHY_NEEDS_SCENARIO,     /* a scenario state (when, then) on a stub without a scenario */
  CB_WHY_MIN_ABOVE_MAX,      /* a uniform delay whose lower end is above its upper end */
  CB_WHY_CONFLICT,           /* fields that cannot go together: delay and delay_ms (Erlang, JSON); a template
                              * with chunks, a fault or a body that is not bytes */
  CB_WHY_BAD_TEMPLATE,       /* a template with an unknown or unclosed placeholder, or {{path.NAME}} that names
                              * no parameter of the path */
  CB_WHY_BAD_REGEX,          /* a body regex outside the subset both engines read alike, or refused by regcomp */
  CB_WHY_BAD_JSON,           /* a body JSON value that does not parse (or holds a key twice) */
  CB_WHY_BAD_URL,            /* a proxy's `to` that is not http://HOST[:PORT][/prefix], or whose host does not
                              * resolve */
  CB_WHY_BAD_CA,             /* a proxy's ca_file that cannot be read or holds no certificate, or a ca_pem with
                              * no certificate */
  CB_WHY_COUNT
} cb_why_id;

#define CB_DETAIL_TEXT 260 /* bytes of cb_error_detail_t.text, with its NUL */

typedef struct cb_error_detail_s {
  int err;            /* the code the call returned (UV_EINVAL); 0: no detail */
  cb_field_id field;  /* CB_FIELD_NONE when err is 0 */
  const char *field_name; /* "match.path", "response.headers", ...: static, never NULL */
  long index;         /* the item of a list field (a matcher, a header), from 0; -1: the field as a whole */
  cb_why_id why;
  const char *why_name; /* "not_a_token", ...: static, never NULL ("none" when err is 0) */
  int numeric;        /* 1: the value is `number` (a status, a count, a length); 0: the bytes in `value` */
  long long number;
  cb_str_t value;     /* the bytes refused, pointing into the caller's stub; {NULL, 0} when numeric */
  char text[CB_DETAIL_TEXT]; /* the value as text: printable ASCII as is, '\\' and '"' and other bytes escaped
                              * (\\r \\n \\t \\xHH), cut after 64 bytes of value with "..." */
} cb_error_detail_t;

/* The detail of this thread's last cb_server_route_add() or cb_server_deferred_add() (see above). Never NULL. */
CB_EXTERN const cb_error_detail_t *cb_error_detail(void);

/* The names of a field and of a reason ("response.headers", "not_a_token"); "?" when out of range. */
CB_EXTERN const char *cb_field_name(int field);
CB_EXTERN const char *cb_why_name(int why);

/* A field's name in each language a stub is given in: one table (src/base/names.c) that the NIF's and the port
 * program's term codec (terms/codec.c), the JSON stub loader and the Erlang suites (test/cbench_fields.erl,
 * generated from it and checked by make fields-check) all read, as the option table is for options. */
typedef struct cb_field_names_s {
  const char *c;       /* as cb_field_name(): "match.methods" */
  const char *erl[2];  /* the Field of {bad_stub, {Field, Value, Why}} as {Term, Key}: {"match", "method"};
                        * {"handler", ...} is a bad_handler; {NULL, NULL}: Erlang never gives this field */
  const char *json[2]; /* its key path in a JSON stub (docs/routes.md): {"match", "method"}, {"name", NULL} for a
                        * key of the stub itself; {NULL, NULL}: a JSON stub has no such field */
} cb_field_names_t;

/* The row of a field (CB_FIELD_NONE .. CB_FIELD_COUNT - 1), or NULL when out of range. */
CB_EXTERN const cb_field_names_t *cb_field_names(int field);

/* Removes the stub `id`. Requests already dispatched to it finish. Errors: UV_ENOENT (no such stub: never
 * added, removed, or dropped by reset), UV_EINVAL, UV_EBUSY. */
CB_EXTERN int cb_server_route_remove(cb_server_t *srv, uint64_t id);

/* Removes every stub: the table is the fixture table again. Their counts go with them (see
 * cb_server_route_counts); ids are never reused. The journal is not touched (cb_server_requests_clear).
 * Errors: UV_EINVAL, UV_EBUSY. */
CB_EXTERN int cb_server_route_reset(cb_server_t *srv);

/* ==== Scenarios (cb_stub_t.scenario) ====
 *
 * A server keeps one state per scenario name; every scenario is in state "started" until a stub's answer or
 * cb_server_scenario_set() moves it. At most CB_MAX_SCENARIOS names and CB_MAX_SCENARIOS states per server
 * (CB_ELIMIT past them). States are read by the workers with one atomic load when a stub that names the
 * scenario is matched, and changed with one compare-and-swap: a request sees the state at its dispatch. */
#define CB_MAX_SCENARIOS 4096

/* Copies scenario `name`'s state into out (cap bytes, NUL-terminated; CB_MAX_NAME + 1 always fits).
 * Returns its length, or UV_EINVAL (a bad name, a NULL argument), UV_ENOBUFS (cap too small). A name no stub
 * or call used is "started". */
CB_EXTERN int cb_server_scenario(cb_server_t *srv, cb_str_t name, char *out, size_t cap);

/* Sets scenario `name`'s state. Errors: UV_EINVAL (a bad name or state), CB_ELIMIT, UV_ENOMEM. */
CB_EXTERN int cb_server_scenario_set(cb_server_t *srv, cb_str_t name, cb_str_t state);

/* Puts every scenario back to "started". Errors: UV_EINVAL. */
CB_EXTERN int cb_server_scenarios_reset(cb_server_t *srv);

/* One stub as listed by cb_server_stubs(). The strings are NUL-terminated copies owned by the list. */
typedef struct cb_stub_info_s {
  uint64_t id;
  cb_str_t name;
  cb_str_t path;    /* the pattern as given */
  unsigned methods; /* CB_METHOD_* bits, 0 = any */
  int priority;
  int status;
  uint64_t times; /* as given; 0 = unlimited */
  uint64_t hits;  /* requests this stub answered (not counting 405s on its path) */
  int spent;      /* times > 0 and all used */
} cb_stub_info_t;

typedef struct cb_stub_list_s {
  size_t count;
  cb_stub_info_t *items; /* in matching order (first match first) */
} cb_stub_list_t;

/* Lists the live stubs. *out is allocated; free it with cb_stub_list_free(). Does not wait for the workers
 * (counts are read lock-free). Errors: UV_EINVAL, UV_ENOMEM. */
CB_EXTERN int cb_server_stubs(cb_server_t *srv, cb_stub_list_t **out);
CB_EXTERN void cb_stub_list_free(cb_stub_list_t *list);

/* Requests per route name, for the routes in the table now (fixture routes and live stubs) plus "not_found"
 * (requests answered 404). A request answered 405 counts under the first route whose path matched. A route
 * that is removed takes its count with it; the fixture routes' counts last for the server's life. */
typedef struct cb_route_count_s {
  cb_str_t name; /* NUL-terminated, owned by the list */
  uint64_t requests;
} cb_route_count_t;

typedef struct cb_route_counts_s {
  size_t count;
  cb_route_count_t *items; /* fixture routes in table order, "not_found", then stub names in order of addition */
} cb_route_counts_t;

/* Errors: UV_EINVAL, UV_ENOMEM. Lock-free like cb_server_stats(); free with cb_route_counts_free(). */
CB_EXTERN int cb_server_route_counts(cb_server_t *srv, cb_route_counts_t **out);
CB_EXTERN void cb_route_counts_free(cb_route_counts_t *counts);

/* ==== Recording: proxied exchanges kept as stubs (docs/record.md) ====
 *
 * A proxy stub with `record` set captures each exchange it forwards as a stub: match method, path (exact),
 * query (every parameter, exact decoded values), the request headers its record_headers names; priority the
 * number of query and header matchers; response status, headers (as received, in order) and body. Recordings are
 * kept in arrival order, named rec_1, rec_2, ... by their place, and deduplicated by their match: the first
 * answer is kept, later ones are counted (cb_stats_t.recorded_duplicates). Any thread may call these. */

/* The recordings as a stub file, {"stubs": [...]} with one stub a line and every body inline (a UTF-8 string, or
 * {"base64": "..."} for other bytes): *json is malloc'd and NUL-terminated (free() it), *len its length (len may
 * be NULL). Errors: UV_EINVAL (NULL), UV_ENOMEM. */
CB_EXTERN int cb_server_recorded_json(cb_server_t *srv, char **json, size_t *len);

/* Writes the recordings to `path` as cb_server_recorded_json() does, except that a body longer than its proxy's
 * record_body_file_bytes goes to PATH.bodies/N.bin (N: the stub's place, from 1) and the stub says {"file":
 * "BASENAME.bodies/N.bin"}, relative to the stub file as cb_server_stubs_file() reads it. Each file is written to
 * NAME.tmp and renamed, the stub file last: a reader sees the old file or the new one whole. Returns the number
 * of stubs written, or a negative error (UV_EINVAL for NULL or an empty path, UV_ENOMEM, open(2), write(2),
 * mkdir(2) or rename(2)'s error) with msg (msgcap bytes, NUL-terminated) naming the file and why. */
CB_EXTERN int cb_server_save_stubs(cb_server_t *srv, const char *path, char *msg, size_t msgcap);

/* Drops every recording and zeroes the three counts of cb_stats_t; names start again from rec_1. */
CB_EXTERN void cb_server_recorded_clear(cb_server_t *srv);

/* ==== The request journal ====
 *
 * With cfg.journal > 0 every request that reached the route table (everything counted in cb_stats_t.requests;
 * not the 400/408/413/431 answers to requests that never got that far) is recorded by its worker when its
 * response is complete (or cut short). Each worker keeps its own ring; no lock is shared between workers (one
 * atomic increment of a server-wide sequence counter per request). A read merges the workers' rings in
 * sequence order and keeps the newest cfg.journal requests. A worker also drops its oldest entries early when
 * their heads and bodies together pass about cfg.journal KiB (plus room for one largest request).
 *
 * A request is recorded before the socket call that ends its response: its last byte, the FIN or the reset of a
 * connection that ends, an HTTP/2 END_STREAM, RST_STREAM or GOAWAY. Reads go through the same worker after it.
 * So once a client has seen the end of a response, a cb_server_requests() started afterwards includes it. */

/* One journaled request. In a list from cb_server_requests() every string is a NUL-terminated copy owned by
 * the list. Inside a listener the strings point into the journal: valid during the call only, and not
 * NUL-terminated (use the lengths). */
typedef struct cb_request_s {
  uint64_t seq;        /* server-wide, from 1, in order of arrival (head complete) */
  int64_t time_us;     /* arrival, wall clock (CLOCK_REALTIME), microseconds since the epoch */
  int proto;           /* cb_proto_id */
  uint64_t conn_id;    /* server-wide connection number, from 1 */
  uint32_t stream_id;  /* HTTP/2 stream id; 0 over HTTP/1.x */
  cb_str_t peer;       /* "127.0.0.1:50312", "[::1]:50312" */
  cb_str_t method;     /* as received: "GET", "PURGE" */
  cb_str_t path;       /* the target before '?' */
  cb_str_t query;      /* after '?', without it; empty when none */
  const cb_header_t *headers; /* every request header as received, names lowercased, order and repeats kept.
                               * HTTP/2: the regular fields, with :authority first as "host" when the
                               * request has no host field */
  size_t nheaders;
  cb_str_t body;       /* the first cfg.journal_body_bytes bytes of the body */
  uint64_t body_len;   /* the whole body's length as received */
  cb_str_t route;      /* the name of the route that answered ("hello", a stub's name), "not_found" for 404 */
  uint64_t stub_id;    /* the stub that answered, 0 for a fixture route, 404 or 405 */
  int status;          /* the status sent; 0 when the connection went away before a response began */
  uint64_t bytes_out;  /* response body bytes produced for it (0 for HEAD), not counting head and framing */
  uint64_t duration_us; /* from arrival to the end of the response; both are read once per iteration of the
                         * worker's event loop, so 0 when it ended in the iteration it arrived in */
  cb_str_t fault;      /* the fault applied ("reset", "truncated": docs/faults.md), empty when none. Static */
  unsigned delay_ms;   /* the delay a stub waited before its answer (its delay_ms, or the drawn one); 0 else */
  /* The TLS session of the connection (proto CB_PROTO_H1_TLS or CB_PROTO_H2_TLS), as its handshake ended; over
   * cleartext tls is 0 and the strings are empty. */
  int tls;
  cb_str_t tls_version; /* "TLSv1.3", "TLSv1.2". Static */
  cb_str_t tls_cipher;  /* OpenSSL's name of the cipher suite: "TLS_AES_128_GCM_SHA256" */
  cb_str_t tls_sni;     /* the server name the client sent (SNI); empty when it sent none */
  cb_str_t tls_alpn;    /* the protocol ALPN chose: "h2", "http/1.1"; empty when the client offered none. Static */
  int tls_resumed;      /* 1: the session was resumed (a ticket or the session cache), no full handshake */
  cb_str_t tls_client_subject; /* the client certificate's subject, RFC 2253 style ("CN=alice", at most 255
                                * bytes kept); empty when the client sent none (cfg.tls_client_auth) */
  cb_str_t tls_client_sha256;  /* its SHA-256 fingerprint, 64 lowercase hex digits; empty when none */
  /* A request a proxy route forwarded (docs/proxy.md): the upstream's `to`, empty when the route is not a proxy;
   * the status of the upstream's answer, 0 when none came; why the upstream failed, "none" when it did not
   * ("refused", "reset", "timeout", "bad_response", "head_too_big", "body_too_big", "truncated",
   * "connect_failed", "no_memory"; static). status is what the client was sent (502, 504, or the upstream's). */
  cb_str_t upstream_to;
  int upstream_status;
  cb_str_t upstream_error;
} cb_request_t;

/* Which requests a read returns; zero it for "all". */
typedef struct cb_request_filter_s {
  cb_str_t method;  /* exact method, {NULL, 0}: any */
  cb_str_t path;    /* exact path (before '?'), {NULL, 0}: any */
  cb_str_t route;   /* exact route name, {NULL, 0}: any */
  uint64_t stub_id; /* 0: any */
  uint64_t since;   /* only seq > since */
  size_t limit;     /* at most this many (the oldest that match), 0: no limit */
} cb_request_filter_t;

typedef struct cb_request_list_s {
  size_t count;
  cb_request_t *items; /* ascending seq */
  void *priv_;         /* the library's: the memory the items point into */
} cb_request_list_t;

/* Reads the journal through every worker's command queue and merges it. *out is allocated; free it with
 * cb_request_list_free(). With the journal disabled the list is empty.
 * Errors: UV_EINVAL, UV_ENOMEM, UV_EBUSY. */
CB_EXTERN int cb_server_requests(cb_server_t *srv, const cb_request_filter_t *filter, cb_request_list_t **out);
CB_EXTERN void cb_request_list_free(cb_request_list_t *list);

/* Empties the journal: every request that arrived before the call is dropped (one still in flight is not
 * recorded when it ends). Sequence numbers go on. Errors: UV_EINVAL, UV_EBUSY. */
CB_EXTERN int cb_server_requests_clear(cb_server_t *srv);

/* ==== Near misses: the journal's 404s and the stubs closest to each ====
 *
 * The journal's 404s (route "not_found"), oldest first, each scored now against the live stubs exactly as a
 * 404's body scores them (docs/routes.md, "Near misses"): the path counts 4, the method 2, each header or
 * query matcher and the body matcher 1; the CB_MAX_NEAR_STUBS lowest, equal scores in matching order. The
 * body is judged from the journal's copy when it holds the whole body (cfg.journal_body_bytes), else it reads
 * "body (not read)". Built from the journal rather than a ring of its own, so a 404 costs nothing more and
 * cb_server_requests_clear() clears these too; with the journal off the list is empty. */
#define CB_MAX_NEAR_STUBS 3

/* One stub close to a 404: the parts of its match the request failed, each as text ("method", "path",
 * "header x-key", "query verbose", "body", "body (not read)", "unavailable (spent, or another scenario state)"),
 * in that order; the same items as a 404's JSON body. */
typedef struct cb_near_stub_s {
  uint64_t id;
  cb_str_t name;
  size_t ndiffers;
  const cb_str_t *differs;
} cb_near_stub_t;

/* One 404 from the journal. */
typedef struct cb_near_miss_s {
  uint64_t seq;      /* the journal's */
  cb_str_t method;   /* as received */
  cb_str_t path;     /* before '?' */
  cb_str_t query;    /* after '?', empty when none */
  size_t count;      /* stubs in near[], 0 when the table has none */
  cb_near_stub_t near[CB_MAX_NEAR_STUBS]; /* best first */
} cb_near_miss_t;

typedef struct cb_near_miss_list_s {
  size_t count;
  cb_near_miss_t *items; /* ascending seq */
  void *priv_;           /* the library's: the memory the items point into */
} cb_near_miss_list_t;

/* Lists the near misses: reads the journal as cb_server_requests() does (through every worker's command
 * queue, so not from a worker: UV_EBUSY there), then scores on the calling thread, holding a reference to each
 * stub meanwhile (a stub removed during the call is still scored). Every string is a NUL-terminated copy owned
 * by the list; *out is allocated, free it with cb_near_miss_list_free(). Errors: UV_EINVAL, UV_ENOMEM,
 * UV_EBUSY. */
CB_EXTERN int cb_server_near_misses(cb_server_t *srv, cb_near_miss_list_t **out);
CB_EXTERN void cb_near_miss_list_free(cb_near_miss_list_t *list);

/* Called on the worker's thread right after a request was recorded; `req` is valid during the call only. It
 * must be quick and must not call this API's blocking functions (they return UV_EBUSY there). */
typedef void (*cb_journal_fn)(void *ud, const cb_request_t *req);

/* Sets (fn != NULL) or clears (fn == NULL) the journal listener. Returns once every worker uses the new
 * setting: after a clear, the old fn is not running and will not be called again. Costs nothing per request
 * while unset. Errors: UV_EINVAL, UV_EBUSY. */
CB_EXTERN int cb_server_set_journal_listener(cb_server_t *srv, cb_journal_fn fn, void *ud);

/* ==== Down and up ====
 *
 * cb_server_down() closes every worker's listening socket and every connection (at once, not gracefully:
 * responses in flight are cut), and returns when all are closed: a connect then fails. cb_server_up() binds the
 * same port again and returns when every worker listens. Stats, routes and the journal survive both. Calling
 * either in the state it leads to does nothing and returns 0.
 * Errors: UV_EINVAL, UV_EBUSY; up also UV_EADDRINUSE (someone took the port meanwhile) and the errors of
 * socket(2), bind(2), listen(2). After a failed up the server stays down. */
CB_EXTERN int cb_server_down(cb_server_t *srv);
CB_EXTERN int cb_server_up(cb_server_t *srv);

/* ==== Deferred routes: requests answered later, from any thread ====
 *
 * A deferred route hands each complete request (head and whole body) to the caller's deliver function, on the
 * worker's thread, and parks it; any thread answers it later with cb_server_reply(), through the worker's
 * command queue. This is how the NIF, the port program and the ehttpd engine put an Erlang process behind a
 * route (docs/erlang.md). A parked request is named by a cb_reqref_t: worker, slot and generation, so a
 * reference to a request that is finished, timed out or whose connection or stream went away is refused with
 * CB_EGONE and never answers another request that reuses the slot.
 *
 * Batching: a worker collects the requests it completed during one loop iteration and, at the end of it,
 * calls deliver once per route with all of that route's requests (batch = 1) or once per request (batch = 0).
 * Replies given in one cb_server_reply() call reach each worker as one command-queue post (one wake-up).
 *
 * Failure: deliver returns non-zero (no target): those requests get 503. cb_server_deferred_fail(): every
 * request of the route not answered yet gets 503, and a streamed answer in progress is cut (HTTP/1.1: the
 * connection is closed; h2c: RST_STREAM(INTERNAL_ERROR), the connection goes on). No answer within
 * timeout_ms (no piece within timeout_ms while streaming): 504 (cut when streaming). "Streaming" means the
 * streamed answer's head was sent: a CB_REPLY_STREAM claimed but not yet run by the worker when the 503 or
 * 504 comes is dropped, and the client gets the status. A cut comes after the pieces handed over before it:
 * those posted ahead of a 503 (a CB_REPLY_UNAVAILABLE after them, a cb_server_deferred_fail() call after
 * theirs) are offered to the socket first, as far as it and the h2c windows take them then; a CB_REPLY_SEND
 * with result 0 that the worker has not run yet holds the 504 back, and restarts timeout_ms when it runs. All
 * are journaled with their status and counted in cb_stats_t (handler_unavailable, handler_timeouts). A
 * CB_REPLY_SEND that finds cfg.max_queued_reply_bytes of its answer not yet written (a client that does not
 * read) cuts the answer at once instead of queueing the piece: the request is over (gone; later replies
 * CB_EGONE), counted in handler_overflows. */

typedef uint64_t cb_reqref_t; /* worker << 56 | slot << 32 | generation; never 0 */

/* A request handed over. Every pointer is valid during the deliver call only. */
typedef struct cb_deferred_req_s {
  cb_reqref_t ref;
  uint64_t route_id; /* the deferred route's id */
  int proto;         /* cb_proto_id */
  uint64_t conn_id;
  uint32_t stream_id; /* 0 over HTTP/1.x */
  cb_str_t peer;      /* "127.0.0.1:50312" */
  cb_str_t method, path, query; /* query: after '?', empty when none */
  const cb_header_t *headers;   /* as received, names lowercased (h2c: :authority as "host" when none) */
  size_t nheaders;
  cb_str_t body; /* the whole body (at most cfg.max_body_bytes) */
} cb_deferred_req_t;

/* Hands n requests (n >= 1) of one route to the caller; on the worker's thread, quick, never blocking and
 * never calling this API's blocking functions. Returns 0, or non-zero when the target is not there: those
 * requests are answered 503 at once. */
typedef int (*cb_deliver_fn)(void *ud, const cb_deferred_req_t *reqs, size_t n);

/* A streamed body (cb_deferred_t.body set): the request is handed over when its head is complete (with an
 * empty body), then the body's bytes that arrived during each loop iteration come in one call, after the
 * request's own delivery; `end` is 1 on the last call (n may be 0 then). On the worker's thread, quick, never
 * blocking; data is valid during the call only. Pieces stop once the request is answered whole or gone. */
typedef void (*cb_body_fn)(void *ud, cb_reqref_t ref, const char *data, size_t n, int end);

typedef struct cb_deferred_s {
  cb_str_t name;         /* as a stub's name; {NULL, 0}: "handler_<id>" */
  cb_match_t match;      /* as a stub's */
  unsigned timeout_ms;   /* 1..3600000: 504 when not answered in time. 0: 5000 */
  int batch;             /* 1: deliver gets every request of one loop iteration at once; 0: one per call */
  cb_deliver_fn deliver; /* required */
  void *ud;
  void (*free_ud)(void *ud); /* optional: called once the route is gone (removed and its requests done) */
  /* Optional, on the worker's thread: request `ref` ended without its answer completing (503, 504, a cut
   * stream, or its client or stream went away), so a reply to it would get CB_EGONE. The port program
   * tells the node, which then refuses replies to it without asking the engine (docs/erlang.md). */
  void (*gone)(void *ud, cb_reqref_t ref);
  cb_body_fn body; /* optional: the body streams to it (see cb_body_fn); NULL: the whole body with the request */
} cb_deferred_t;

/* Adds a deferred route in front of the table, like cb_server_route_add() (its id is a stub id: removed with
 * cb_server_route_remove(), listed by cb_server_stubs() with status 0). On failure free_ud is not called.
 * Errors: those of cb_server_route_add(). */
CB_EXTERN int cb_server_deferred_add(cb_server_t *srv, const cb_deferred_t *d, uint64_t *id);

/* What a reply does. */
typedef enum {
  CB_REPLY_FULL,   /* status, headers and the whole body (content-length) */
  CB_REPLY_STREAM, /* status and headers; the body follows in CB_REPLY_SEND pieces (chunked over HTTP/1.1) */
  CB_REPLY_SEND,   /* one piece of a streamed body (body) */
  CB_REPLY_FINISH, /* the streamed body is complete */
  CB_REPLY_UNAVAILABLE /* the caller has no target for this parked request: 503 (or a cut when streaming),
                          counted in handler_unavailable and journaled, as when deliver refuses it */
} cb_reply_op;

typedef struct cb_reply_s {
  cb_reqref_t ref;
  cb_reply_op op;
  int status;                 /* FULL and STREAM: 200..599 (204 and 304: no body, and FULL only) */
  const cb_header_t *headers; /* FULL and STREAM: as a stub's response headers; copied */
  size_t nheaders;            /* FULL and STREAM; the other ops do not read headers or nheaders */
  cb_str_t body; /* FULL and SEND; copied */
  int result;    /* out: 0, CB_EGONE (nothing happens), CB_ENOTSTREAMING (SEND or FINISH before STREAM: nothing
                    happens, the request still waits for its answer), UV_EINVAL (a bad field: nothing happens) */
} cb_reply_t;

/* Answers parked requests, from any thread (not racing cb_server_stop()). Every item gets its own result;
 * the items for one worker are posted to it together. Never blocks on a worker. Returns 0 when every item was
 * looked at (see each result), UV_EINVAL for bad arguments, UV_ENOMEM (then no item was taken). */
CB_EXTERN int cb_server_reply(cb_server_t *srv, cb_reply_t *replies, size_t n);

/* The target of deferred route `id` went away: its requests not answered yet get 503 and its streams in
 * progress are cut. Does not wait for the workers. Errors: UV_EINVAL, UV_ENOMEM. */
CB_EXTERN int cb_server_deferred_fail(cb_server_t *srv, uint64_t id);

/* Text for an error code returned by this library (cbench's own or libuv's). Never NULL. */
CB_EXTERN const char *cb_strerror(int err);

/* The symbolic name of an error code ("EADDRINUSE", "CB_EFIXTURE"). Never NULL. */
CB_EXTERN const char *cb_err_name(int err);

/* The name of a protocol id ("http1", "h2c_prior", "h2c_upgrade", "h1_tls", "h2_tls"), or NULL when out of
 * range. */
CB_EXTERN const char *cb_proto_name(int proto);

/* The library version as "MAJOR.MINOR.PATCH". */
CB_EXTERN const char *cb_version(void);

#ifdef __cplusplus
}
#endif
#endif /* CBENCH_H */
