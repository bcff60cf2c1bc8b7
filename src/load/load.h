/* cbench-load's internal types: the run's configuration, the per-thread loop and its connections, the protocol
 * table, and the results. Everything here belongs to the load generator (build/cbench-load); nothing is shared
 * with the engine but the libraries (libuv, llhttp, nghttp2) and the build rules.
 *
 * Who owns what:
 *   config.c    the command line: URL, options, body file; usage
 *   request.c   what goes on the wire, made once per run: HTTP/1.1 request bytes per path, h2 header lists, the
 *               WebSocket handshake and message
 *   run.c       the run: threads, the common start time, join, merge
 *   thread.c    one thread, one uv_loop_t: its connections (connect, read, write, close, reconnect), the
 *               open-loop schedule (a timerfd in the loop), timeouts, the measured window, the accounting
 *   h1.c        HTTP/1.1 over llhttp in response mode: keep-alive, pipelining, a connection per request, HEAD
 *   h2.c        h2c with prior knowledge (h2 below tls.c): N streams per connection, framed here, answers'
 *               header blocks decoded by nghttp2's HPACK decoder when they change its table
 *   ws.c        WebSocket echo: the upgrade, then frames both ways through wslay's frame layer
 *   tls.c       https:// and wss://: an OpenSSL client session between the socket and the protocol (memory
 *               BIOs on the connection's libuv reads and writes), ALPN, SNI, verification, resumption
 *   report.c    the results as a human summary, JSON (jansson) and an Erlang term file
 *   hist.c      the log-linear latency histogram
 */
#ifndef CBL_LOAD_H
#define CBL_LOAD_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "client/client.h"
#include "hist.h"

#define CBL_VERSION "1.0"
#define CBL_MAX_THREADS 256
#define CBL_MAX_CONNECTIONS 100000
#define CBL_MAX_DEPTH 4096
#define CBL_READ_BUF (64 * 1024)
#define CBL_MAX_STATUS 600
/* What a hostile server can make the generator hold, per connection. An answer's head (or the WebSocket
 * handshake's) longer than CBL_MAX_HEAD is a protocol error; bodies are counted, never kept. Output that reading
 * makes (h2 acknowledgements, WebSocket pongs) is produced only while less than CBL_OUT_HIGH bytes wait for the
 * socket: h2 fails a connection that floods acknowledgements past it, and pings are coalesced into
 * one pending pong (RFC 6455 section 5.5.3), so a server that never reads cannot grow the generator's memory. */
#define CBL_MAX_HEAD (1024 * 1024)
#define CBL_OUT_HIGH (256 * 1024)
/* The longest run whose per-second timeline is kept: a histogram per second and thread is 30 KiB, so 15 minutes
 * cost 27 MiB per thread. Longer runs keep the totals and an empty timeline. */
#define CBL_MAX_TIMELINE 900

typedef enum { CBL_H1, CBL_H2C, CBL_WS } cbl_proto_id_t;

/* Error kinds. Reset, timeout and protocol are counted per measured request; connect per attempt. Unsolicited
 * (an answer, or a WebSocket message, with no request in flight to be its answer; h2 HEADERS or DATA on a
 * stream no request opened) and upgrade (a WebSocket
 * handshake that failed without a non-2xx status to count it by: a 2xx instead of the 101, a head llhttp
 * rejects or longer than CBL_MAX_HEAD, the close or --timeout before the 101) are counted per event, and end
 * the connection; requests still in flight on it count as protocol errors. */
typedef enum {
  CBL_ERR_CONNECT,
  CBL_ERR_RESET,
  CBL_ERR_TIMEOUT,
  CBL_ERR_PROTOCOL,
  CBL_ERR_UNSOLICITED,
  CBL_ERR_UPGRADE,
  CBL_ERR_TLS, /* a TLS handshake that failed (per attempt, as connect): verification, an alert, the close */
  CBL_ERR_KINDS
} cbl_err_t;

typedef struct {
  const char *name;
  const char *value;
} cbl_header_t;

/* ---- config.c ---- */

typedef struct {
  char url[2048];
  char host[256];      /* as in the URL (IPv6 without brackets) */
  char authority[300]; /* host[:port] for Host and :authority */
  int port;
  struct sockaddr_storage addr;
  cbl_proto_id_t proto;
  int connections; /* in all */
  int threads;
  int depth;     /* HTTP/1.1 pipelining depth, h2 streams per connection, WebSocket messages in flight */
  bool new_conn; /* HTTP/1.1: one request per connection */
  int cpus[CBL_MAX_THREADS];
  int ncpus;
  uint64_t duration_ns, warmup_ns, timeout_ns;
  uint64_t spin_ns; /* open loop: poll instead of sleeping when the next send is this close */
  double rate; /* requests per second in all; 0: closed loop */
  const char *method;
  const char **paths; /* round robin */
  int npaths;
  cbl_header_t *headers;
  int nheaders;
  char *body; /* the body file's bytes, or NULL */
  size_t body_len;
  size_t ws_size;
  /* TLS (https://, wss://): tls.c. */
  bool tls;
  const char *cacert;        /* --cacert: the CAs to verify the server with (else the system's) */
  bool insecure;             /* --insecure: no verification */
  bool resume;               /* offer each connection's last session again (on unless --no-resume) */
  int tls_version;           /* 0: 1.2 or 1.3; 12 or 13: that one only */
  const char *ciphers;       /* --ciphers (TLS 1.2), --tls13-ciphers: OpenSSL's lists */
  const char *tls13_ciphers;
  const char *json_path;
  const char *erl_path;
  bool quiet;
} cbl_config_t;

/* Parses argv. 0: cfg is ready; 1: --help or --version was asked (answered on stdout); -1: a message and the usage
 * were printed on stderr (the caller exits 2). */
int cbl_config_parse(cbl_config_t *cfg, int argc, char **argv);
void cbl_config_free(cbl_config_t *cfg);
void cbl_usage(void *file);
const char *cbl_proto_name(cbl_proto_id_t p);
/* The protocol as the results name it: h1, h2c, ws, or h2 for h2 over TLS. */
const char *cbl_proto_label(const cbl_config_t *cfg);

/* ---- request.c ---- */

typedef struct {
  /* HTTP/1.1: the whole request (head and body) per path. */
  char **h1;
  size_t *h1_len;
  /* h2: the HEADERS payload per path (pseudo-headers first, then -H headers lowercased, then content-length),
   * HPACK with no dynamic table (request.c). */
  char **h2_block;
  size_t *h2_block_len;
  /* WebSocket: the upgrade request, and the message each echo carries. */
  char *ws_handshake;
  size_t ws_handshake_len;
  char *ws_msg;
  bool head; /* the method is HEAD: responses have no body */
} cbl_wire_t;

int cbl_wire_build(cbl_wire_t *w, const cbl_config_t *cfg);
void cbl_wire_free(cbl_wire_t *w, const cbl_config_t *cfg);

/* ---- results: counted per thread, summed by run.c ---- */

typedef struct {
  uint64_t sent;      /* measured requests written */
  uint64_t completed; /* measured requests answered (any status) */
  uint64_t ok;        /* of which 2xx (or an echo, for WebSocket) */
  uint64_t unsent;    /* open loop: due in the window but never sent (the client or its connections fell behind) */
  uint64_t late;      /* of the completed, answered after the window ended (within --timeout): in no second */
  uint64_t errors[CBL_ERR_KINDS];
  uint64_t status[CBL_MAX_STATUS]; /* answers by status (non-2xx are errors) */
  uint64_t bytes_read, bytes_written, body_bytes;
  uint64_t connects; /* connections established, the warm-up included */
  uint64_t tls_full, tls_resumed; /* TLS handshakes completed in the window: full, and resuming a session */
} cbl_counts_t;

typedef struct {
  cbl_counts_t counts;
  cbl_hist_t corrected;   /* from the intended send time */
  cbl_hist_t uncorrected; /* from the actual send */
  cbl_hist_t send_lag;    /* open loop: actual send - intended send (the generator's own pacing error) */
  cbl_hist_t *second;     /* corrected, by the second of the window the answer came in (late ones in none) */
  uint64_t *second_done;  /* answers per second */
  uint32_t nsec;
  /* TLS: the first completed handshake's parameters, and the first failure's reason (empty: none). */
  char tls_version[16], tls_cipher[64], tls_alpn[32];
  char tls_error[256];
} cbl_result_t;

void cbl_result_init(cbl_result_t *r, uint32_t nsec);
void cbl_result_merge(cbl_result_t *dst, const cbl_result_t *src);
void cbl_result_free(cbl_result_t *r);

/* ---- thread.c: one loop, its connections ---- */

typedef struct cbl_thread_s cbl_thread_t;
typedef struct cbl_conn_s cbl_conn_t;

/* One request in flight. HTTP/1.1 and WebSocket use a connection's slots as a ring (answers come in order);
 * h2 takes any free slot and finds it again through the stream's user data. */
typedef struct {
  uint64_t intended; /* when the schedule said to send it (closed loop: = sent) */
  uint64_t sent;
  int status;
  bool used;
  bool measured; /* intended inside the measured window */
  size_t body_off; /* h2: how much of the body the data provider has given */
} cbl_req_t;

/* A protocol, seen from the connection code. Each function returns 0, or a negative cbl_err_t (-1 - kind) after
 * which the connection is closed and its requests in flight are counted under that kind. */
typedef struct {
  void *(*create)(cbl_conn_t *c);
  void (*destroy)(void *p);
  int (*open)(cbl_conn_t *c);                        /* connected: preface, handshake */
  bool (*ready)(cbl_conn_t *c);                      /* requests may be sent (WebSocket: after the 101) */
  /* Its own handshake has not completed yet (WebSocket: before the 101), and --timeout bounds it; NULL: the
   * protocol has none. Not the same as !ready: h2 after a GOAWAY sends nothing new but has streams to finish. */
  bool (*handshaking)(cbl_conn_t *c);
  int (*send)(cbl_conn_t *c, cbl_req_t *r);          /* queue one request */
  int (*flush)(cbl_conn_t *c);                       /* after a batch of sends or a read */
  int (*read)(cbl_conn_t *c, const char *p, size_t n); /* bytes from the socket */
  int (*eof)(cbl_conn_t *c);                         /* the peer closed its side */
  void (*reset)(cbl_conn_t *c);                      /* the socket is gone: drop the session's state */
} cbl_proto_t;

extern const cbl_proto_t cbl_h1_proto, cbl_h2_proto, cbl_ws_proto;

#define CBL_FAIL(kind) (-1 - (int)(kind))

typedef struct {
  char *p;
  size_t len, cap;
} cbl_buf_t;

int cbl_buf_append(cbl_buf_t *b, const void *p, size_t n);

enum { CBL_CONN_IDLE, CBL_CONN_CONNECTING, CBL_CONN_OPEN, CBL_CONN_CLOSING };

struct cbl_conn_s {
  uv_tcp_t tcp; /* first: callbacks cast the handle back */
  cbl_thread_t *t;
  uint32_t g; /* global index: its place in the open-loop schedule */
  int state;
  uv_connect_t connect_req;
  uv_write_t write_req;
  cbl_buf_t out;   /* queued, not yet handed to the socket */
  cbl_buf_t wout;  /* being written by uv_write */
  bool writing;
  cbl_req_t *reqs; /* depth slots */
  uint32_t head;   /* ring: oldest in flight (HTTP/1.1, WebSocket) */
  uint32_t inflight;
  uint32_t *free_slots; /* h2 */
  uint32_t nfree;
  uint64_t k_sent, k_due; /* open loop: requests of this connection's schedule sent, and due by now */
  uint64_t started;       /* when the connect began */
  uint64_t retry_at;      /* idle: when to connect again */
  uint64_t answered;      /* answers on this socket */
  bool in_dirty;
  bool done_clean; /* closing without an error (a connection per request, or the server's close) */
  void *p;         /* the protocol's state */
  /* TLS (tls.c): the session (the client layer's), the last session the server gave (an SSL_SESSION *, offered on the
   * next connect), the handshake not complete yet (no request may be sent), and what the protocol wrote,
   * waiting to be encrypted (out then holds ciphertext). */
  cb_ctls_t tls;
  void *sess;
  bool hs_pending;
  cbl_buf_t pt;
};

struct cbl_thread_s {
  int index;
  pthread_t tid;
  uv_loop_t loop;
  const cbl_config_t *cfg;
  const cbl_wire_t *wire;
  const cbl_proto_t *proto;
  struct cbl_run_s *run;
  cbl_conn_t *conns;
  int nconns;
  uv_timer_t tick; /* every 10 ms: reconnects, timeouts, the end of the run */
  uv_poll_t pace;  /* open loop: a timerfd armed for the next intended send, in nanoseconds */
  int tfd;
  uv_idle_t idle;   /* open loop: started while the next send is within --spin-us (the loop polls, no sleep) */
  uv_check_t check; /* ... and this sends on time after each poll meanwhile */
  bool spinning;
  uint64_t next_due;
  uint64_t cur_k; /* open-loop cursor: the next request due is round cur_k of connection cur_l */
  int cur_l;
  bool pacing_done;
  cbl_conn_t **dirty;
  int ndirty;
  uint32_t path_rr;
  uint64_t now;     /* the time of the current event */
  bool sending;     /* false once the window has ended: no new requests */
  bool draining;
  uint64_t tick_n;
  cbl_result_t res;
  uint64_t rng;
  char rbuf[CBL_READ_BUF];
  char pbuf[CBL_READ_BUF]; /* TLS: the plaintext of a read */
};

typedef struct cbl_run_s {
  const cbl_config_t *cfg;
  cbl_wire_t wire;
  uint64_t t_start;   /* the schedule's origin: the warm-up begins */
  uint64_t t_measure; /* the measured window begins */
  uint64_t t_end;     /* and ends */
  uint64_t t_drain;   /* answers still outstanding then are timeouts */
  pthread_barrier_t ready, go;
  cbl_thread_t *threads;
  void *tls_ctx; /* the SSL_CTX of every connection (tls.c) */
  cbl_result_t total;
  double elapsed_s; /* the measured window as it ran */
} cbl_run_t;

void *cbl_thread_main(void *arg);

/* Called by the protocols. */
uint64_t cbl_now(void);
int cbl_conn_write(cbl_conn_t *c, const void *p, size_t n);
/* Bytes queued on c that the socket has not taken yet (compared with CBL_OUT_HIGH). */
size_t cbl_conn_unsent(const cbl_conn_t *c);
/* A request's answer is complete with this status; the slot is released. */
void cbl_req_done(cbl_conn_t *c, cbl_req_t *r, int status, uint64_t now);
/* A request ended with an error of this kind (the connection goes on: an h2 stream reset); the slot is released. */
void cbl_req_failed(cbl_conn_t *c, cbl_req_t *r, cbl_err_t kind);
/* A request was answered for the connection to end cleanly (a connection per request, or the server's
 * Connection: close): closed after the current read, reconnected at once, nothing counted as an error. */
void cbl_conn_end(cbl_conn_t *c);
uint64_t cbl_rand(cbl_thread_t *t);

/* ---- tls.c ---- */

/* cbl_tls_read's answer when the server sent close_notify: the stream ended, as a read of 0 bytes would say. */
#define CBL_TLS_EOF 1

/* The run's SSL_CTX (nothing without TLS). 0; -2 with the reason printed for an option OpenSSL refuses (a
 * --cacert file without a certificate, a cipher list); -1 with it for anything else (the system's CAs). */
int cbl_tls_ctx_new(cbl_run_t *run);
void cbl_tls_ctx_free(cbl_run_t *run);
/* Connected: a session, the ClientHello queued on c->out. Returns 0 or CBL_FAIL(kind). */
int cbl_tls_start(cbl_conn_t *c);
/* Bytes from the socket: the handshake's next step (and the protocol's open once it completes), then the
 * plaintext to the protocol's read. 0, CBL_TLS_EOF, or CBL_FAIL(kind) (CBL_ERR_TLS: the handshake failed). */
int cbl_tls_read(cbl_conn_t *c, const char *p, size_t n);
/* Encrypts c->pt into c->out (once the handshake is complete). 0 or CBL_FAIL(kind). */
int cbl_tls_flush(cbl_conn_t *c);
/* The socket is gone: the session freed (the connection's saved session is kept). */
void cbl_tls_drop(cbl_conn_t *c);
/* The thread ends: everything of c's TLS freed. */
void cbl_tls_conn_free(cbl_conn_t *c);

/* ---- run.c, report.c ---- */

/* 0 once the run is over (its results in run->total); -1 when it could not be made; -2 for an argument found bad
 * only at set-up (cbl_tls_ctx_new), after which the caller prints the usage and exits 2. */
int cbl_run(cbl_run_t *run, const cbl_config_t *cfg);
void cbl_run_free(cbl_run_t *run);
void cbl_report_text(const cbl_run_t *run, void *file);
int cbl_report_files(const cbl_run_t *run); /* --json and --erl; 0 or -1 with a message printed */
/* One histogram as the --erl file writes it under `hist' (#{total, min, max, sum, buckets}), on file (a FILE *):
 * for the tests of erl/cbench_hist.erl, which merges these. */
void cbl_report_hist_erl(const cbl_hist_t *h, void *file);

#endif
