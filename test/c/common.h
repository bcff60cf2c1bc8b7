/* Helpers shared by the C tests: a growable byte buffer, the expected bytes of the wire contract
 * (docs/wire.md) written out independently of the engine, a small blocking client, and server helpers. */
#ifndef CBT_COMMON_H
#define CBT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cbench.h"
#include "runner.h"

/* ---- byte buffer ---- */

typedef struct {
  char *p;
  size_t len, cap;
} buf_t;

void buf_add(buf_t *b, const void *data, size_t len);
void buf_adds(buf_t *b, const char *s);
__attribute__((format(printf, 2, 3))) void buf_addf(buf_t *b, const char *fmt, ...);
void buf_reset(buf_t *b);
void buf_free(buf_t *b);

/* ---- the contract ---- */

/* Every date header is compared as this mask (an IMF-fixdate is always 29 characters). */
#define DATE_MASK "Xxx, 00 Xxx 0000 00:00:00 GMT"
#define LINE64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

#define FILE_TINY 1024
#define FILE_SMALL 102400
#define FILE_BIG 5242880

/* The reason phrase the contract gives a status code ("Unknown" for unlisted codes). */
const char *exp_reason(int status);

/* Framing of the response head, header by header in the contract's order. */
enum { CL_NONE = -2, CL_CHUNKED = -1 };
enum { CONN_NONE, CONN_CLOSE, CONN_KEEP_ALIVE };
/* Appends a status line and head. ctype may be NULL; extra (e.g. "allow: POST\r\n") goes between content-type /
 * cache-control and the framing header; clen is the content-length, CL_CHUNKED or CL_NONE. */
void exp_head(buf_t *b, int status, const char *ctype, const char *extra, long clen, int conn);
void exp_chunk(buf_t *b, const void *data, size_t len);
void exp_last_chunk(buf_t *b);
/* The fixture file content of a given size (byte i is i % 251). */
void exp_file_bytes(buf_t *b, size_t size);
/* The empty error answers that close the connection (400, 408, 413, 431). */
void exp_error_close(buf_t *b, int status);

/* Appends the whole expected response to `method path` (GET or HEAD, or any method for 404/405) for every route
 * whose answer does not depend on the request's body or headers (so not /echo, /echo/chunked, /headers).
 * conn is the connection header the request implies. Returns 0, or -1 for a path this function does not know. */
int exp_route(buf_t *b, const char *method, const char *path, int conn);
/* The 404 of a request no stub matched while the table has stubs (near misses, docs/routes.md): the plain-text
 * body naming the request, then `lines` ("  NAME (id N): parts\n" each). */
void exp_near404(buf_t *b, const char *method, const char *target, const char *lines, int conn);

/* Paths answered 200 (or their /status code) to GET and HEAD; paths answered 404; /delay and /status paths with
 * a bad parameter (400, connection kept). */
extern const char *const ok_paths[];
extern const char *const not_found_paths[];
extern const char *const bad_param_paths[];
extern const size_t n_ok_paths, n_not_found_paths, n_bad_param_paths;

/* Replaces the value of every `\r\ndate: ` header that is a well-formed IMF-fixdate with DATE_MASK.
 * Returns the number of dates masked. */
int mask_dates(char *p, size_t len);

/* ---- blocking client ---- */

int cl_connect(int port);                                  /* to 127.0.0.1; asserts on failure */
int cl_socket(void);                                       /* a socket, not connected yet */
int cl_connect_fd(int fd, int port);                       /* connects a socket from cl_socket() */
void cl_send(int fd, const void *data, size_t len);        /* all of it; asserts on failure */
void cl_sends(int fd, const char *s);
/* Reads until b holds `want` bytes, the peer closes, or timeout_ms passes. Returns CL_OK (want reached),
 * CL_EOF, CL_RESET or CL_TIMEOUT. */
enum { CL_OK, CL_EOF, CL_RESET, CL_TIMEOUT };
int cl_read_n(int fd, buf_t *b, size_t want, int timeout_ms);
const char *cl_status_name(int r);
/* Reads everything until the peer closes (CL_EOF / CL_RESET) or timeout_ms (CL_TIMEOUT). */
int cl_read_close(int fd, buf_t *b, int timeout_ms);
/* Closes with a reset (SO_LINGER 0). */
void cl_reset(int fd);
/* Reads one response of a request `method` from b's start: returns its total length once complete in b, 0 while
 * incomplete, -1 when malformed. Understands content-length, chunked and close-delimited (at EOF only). */
long cl_response_len(const char *p, size_t len, int head_request);
/* The length of the whole request at p's start (head, then its content-length body or a chunked body to its
 * end), 0 while incomplete: what a raw upstream in a test reads before it answers. */
size_t cl_request_len(const char *p, size_t len);

/* Sends req, reads exactly exp->len bytes, masks dates and compares them byte for byte. */
#define ROUNDTRIP(fd, req, reqlen, exp)                                                                    \
  do {                                                                                                     \
    buf_t rt_got_ = {0};                                                                                   \
    cl_send((fd), (req), (reqlen));                                                                        \
    int rt_r_ = cl_read_n((fd), &rt_got_, (exp)->len, 15000);                                              \
    if (rt_r_ != CL_OK) cbt_log("reading the answer ended with %s", cl_status_name(rt_r_));                \
    mask_dates(rt_got_.p, rt_got_.len);                                                                    \
    ASSERT_MEM_EQ(rt_got_.p, rt_got_.len, (exp)->p, (exp)->len);                                           \
    buf_free(&rt_got_);                                                                                    \
  } while (0)

/* The same for a string literal request. */
#define ROUNDTRIP_S(fd, lit, exp) ROUNDTRIP((fd), (lit), sizeof(lit) - 1, (exp))

/* Reads what is left until the server closes, asserting that it closes cleanly and sends nothing more. */
#define EXPECT_CLOSED(fd, timeout_ms)                                                                      \
  do {                                                                                                     \
    buf_t ec_rest_ = {0};                                                                                  \
    int ec_r_ = cl_read_close((fd), &ec_rest_, (timeout_ms));                                              \
    ASSERT_MEM_EQ(ec_rest_.p, ec_rest_.len, "", (size_t)0);                                                \
    ASSERT_EQ(ec_r_, CL_EOF);                                                                              \
    buf_free(&ec_rest_);                                                                                   \
  } while (0)

/* Asserts that nothing arrives and the connection stays open for `ms`. */
#define EXPECT_QUIET(fd, ms)                                                                               \
  do {                                                                                                     \
    buf_t eq_rest_ = {0};                                                                                  \
    int eq_r_ = cl_read_close((fd), &eq_rest_, (ms));                                                      \
    ASSERT_MEM_EQ(eq_rest_.p, eq_rest_.len, "", (size_t)0);                                                \
    ASSERT_EQ(eq_r_, CL_TIMEOUT);                                                                          \
    buf_free(&eq_rest_);                                                                                   \
  } while (0)

/* Sends `req` on a new connection and expects exactly the empty error answer `status` and a close. */
void expect_error(int port, const void *req, size_t len, int status);
#define EXPECT_ERROR(port, s, status) expect_error((port), (s), sizeof(s) - 1, (status))

/* ---- servers ---- */

/* cb_config_init() plus port 0 and one thread. */
void test_config(cb_config_t *cfg);
/* Starts a server, asserting success. */
cb_server_t *test_start(const cb_config_t *cfg);
void test_stop(cb_server_t *srv);
/* Requests counted under a route name (cb_server_route_counts; names that repeat are added up). */
uint64_t route_count(cb_server_t *srv, const char *name);
/* Polls the server's stats until pred(stats, arg) holds or timeout_ms passes; returns the last stats read. */
void wait_stats(cb_server_t *srv, cb_stats_t *st, int (*pred)(const cb_stats_t *, const void *), const void *arg,
                int timeout_ms);
/* Reads the journal (filter f, NULL for all) until it holds `want` entries or timeout_ms passes; returns the last
 * list read (a request is recorded once its response is complete, a moment after the client has it). */
cb_request_list_t *wait_journal(cb_server_t *srv, const cb_request_filter_t *f, size_t want, int timeout_ms);
void sleep_ms(int ms);
uint64_t now_ms(void);

/* Holds a server's only worker: set as its journal listener (cfg.journal on), it sleeps 300 ms when the worker
 * journals a request for /block, after setting `holding`. What arrives meanwhile is read in the worker's next
 * loop turn, in the order it came (epoll's ready list), so a test can put a client's request and an upstream's
 * close into one turn. */
typedef struct {
  int holding; /* atomic */
} worker_hold_t;
void worker_hold_listener(void *ud, const cb_request_t *r);
/* Sends GET /block on a new connection (returned) and waits until the worker holds. */
int worker_hold(cb_server_t *srv, worker_hold_t *h);

/* The number of threads and of open file descriptors of this process (from /proc/self). */
int count_threads(void);
int count_fds(void);
/* This process's resident memory in kB (VmRSS of /proc/self/status). */
long vm_rss_kb(void);

#define ASSERT_ERR(a, b)                                                                                   \
  do {                                                                                                     \
    int ae_a_ = (a), ae_b_ = (b);                                                                          \
    if (ae_a_ != ae_b_)                                                                                    \
      cbt__fail(__FILE__, __LINE__, "ASSERT_ERR(%s, %s) failed: %d (%s) != %d (%s)", #a, #b, ae_a_,        \
                cb_err_name(ae_a_), ae_b_, cb_err_name(ae_b_));                                            \
  } while (0)

/* An nghttp2_mem (as void *) on libc's malloc, for sessions a test makes without a worker's cache (the client
 * layer's h2c session takes its allocator from its caller). */
void *cbt_plain_mem(void);

#endif
