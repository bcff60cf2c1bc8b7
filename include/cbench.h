/* cbench: an HTTP/1.1 and h2c test-fixture server on libuv.
 *
 * This is the only header a C user includes. Link with `pkg-config --cflags --libs cbench`.
 *
 * Threads: every function here may be called from any thread, but calls on one server must not race with
 * cb_server_stop() on that server (stop frees it). The engine runs its own worker threads; nothing in this
 * API calls back into the caller's code, and nothing in the library prints.
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
#define CB_EAI_NONAME (-3008) /* UV_EAI_NONAME: a host name that does not resolve */

/* Error codes of cbench's own (libuv's codes are small negative errno values; these stay clear of them). */
enum {
  CB_EFIXTURE = -30001, /* the fixture files could not be written or opened */
  CB_ESTOPPED = -30002, /* the server is stopping or stopped */
  CB_ETHREADS = -30003, /* the number of threads or the CPU list is out of range */
  CB_ELIMIT = -30004    /* a size limit or timeout is out of range */
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
} cb_config_t;

/* The routes of the fixture table, as indexes into cb_stats_t.requests_by_route. */
typedef enum {
  CB_ROUTE_ROOT,
  CB_ROUTE_HELLO,
  CB_ROUTE_JSON,
  CB_ROUTE_ECHO,
  CB_ROUTE_ECHO_CHUNKED,
  CB_ROUTE_FILE_TINY,
  CB_ROUTE_FILE_SMALL,
  CB_ROUTE_FILE_BIG,
  CB_ROUTE_STREAM,
  CB_ROUTE_STREAM_SMALL,
  CB_ROUTE_STREAM_BIG,
  CB_ROUTE_SSE,
  CB_ROUTE_SSE_SMALL,
  CB_ROUTE_SSE_BIG,
  CB_ROUTE_DELAY,
  CB_ROUTE_STATUS,
  CB_ROUTE_HEADERS,
  CB_ROUTE_NOT_FOUND, /* requests answered 404 */
  CB_ROUTE_COUNT
} cb_route_id;

/* Protocols, as indexes into the per-protocol counters. */
typedef enum {
  CB_PROTO_HTTP1,       /* HTTP/1.0 and HTTP/1.1 */
  CB_PROTO_H2C_PRIOR,   /* h2c started with the client preface (prior knowledge) */
  CB_PROTO_H2C_UPGRADE, /* h2c started with Upgrade: h2c */
  CB_PROTO_COUNT
} cb_proto_id;

/* Counters, summed over the workers when read. All are totals since start except conns_open. */
typedef struct cb_stats_s {
  uint64_t conns_accepted;
  uint64_t conns_open;
  uint64_t conns_closed;
  uint64_t requests; /* every request that reached a route or was answered 404/405 */
  uint64_t requests_by_route[CB_ROUTE_COUNT];
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
  uint64_t accept_backoffs; /* times accept(2) ran out of descriptors (EMFILE/ENFILE) and backed off */
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
  CB_OPT_CPUS    /* the cpus / ncpus pair: at most CB_MAX_THREADS CPU numbers, each within [min, max] */
} cb_opt_type;

/* cb_option_t.flags */
#define CB_OPT_F_C_ONLY 1u      /* not an option of the Erlang API (fixture_dir) */
#define CB_OPT_F_EHTTPD_ONLY 2u /* an option of the Erlang ehttpd engine only, no field of cb_config_t */

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

/* Text for an error code returned by this library (cbench's own or libuv's). Never NULL. */
CB_EXTERN const char *cb_strerror(int err);

/* The symbolic name of an error code ("EADDRINUSE", "CB_EFIXTURE"). Never NULL. */
CB_EXTERN const char *cb_err_name(int err);

/* The name of a route id ("hello", "file_big", "not_found"), or NULL when out of range. */
CB_EXTERN const char *cb_route_name(int route);

/* The name of a protocol id ("http1", "h2c_prior", "h2c_upgrade"), or NULL when out of range. */
CB_EXTERN const char *cb_proto_name(int proto);

/* The library version as "MAJOR.MINOR.PATCH". */
CB_EXTERN const char *cb_version(void);

#ifdef __cplusplus
}
#endif
#endif /* CBENCH_H */
